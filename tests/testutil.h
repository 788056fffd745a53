/* testutil.h: what the Criterion suites share: random tensors, reference comparisons, and an
 * allocator that fails on the k-th allocation (for out-of-memory tests). */
#ifndef SX_TESTUTIL_H
#define SX_TESTUTIL_H

#include <criterion/criterion.h>
#include <sx_optim.h>
#include <sx_tensor.h>

/* A new tensor of the given shape filled with uniform values in [lo, hi); aborts the test on
 * failure (tests only). */
sx_tensor *tu_rand(sx_rng *rng, sx_dtype dt, int rank, const int64_t *shape, double lo, double hi);
/* A new tensor of the given shape, zero-filled. */
sx_tensor *tu_zeros(sx_dtype dt, int rank, const int64_t *shape);
/* A random shape: rank in [rmin, rmax], dims in [1, dmax]. */
int tu_rand_shape(sx_rng *rng, int rmin, int rmax, int64_t dmax, int64_t *shape);
/* Element-wise closeness: |a-b| <= atol + rtol*|b| everywhere (NaN matches NaN). On failure
 * the first bad index and both values are reported through cr_log_error. */
bool tu_close(const sx_tensor *a, const sx_tensor *b, double rtol, double atol);
/* Tolerances fit for a dtype: f32 1e-5 relative, f64 1e-12. */
double tu_rtol(sx_dtype dt);

/* The MNIST directory the tests read: $SX_MNIST_DIR when set, else data/mnist of the source
 * tree (where scripts/fetch_mnist puts the files). */
void tu_mnist_dir(char *buf, size_t n);

/* True when the suite runs under emulation: qemu-aarch64 in the AArch64 cross build, whose
 * toolchain file (cmake/aarch64-linux-gnu.cmake) sets SX_TEST_EMULATED=1 for the guest. The
 * longest sweeps then take every few of their steps (the same kernels, 30-50x slower there);
 * the native builds run them all. */
bool tu_emulated(void);

/* Failing allocator: after tu_fail_after(k), allocations 0..k-1 succeed and every later one
 * fails until tu_fail_reset(). tu_live_allocs() counts allocations not yet freed since the last
 * reset (for leak checks without ASan). */
void tu_fail_after(long k);
void tu_fail_reset(void);
long tu_alloc_count(void);
long tu_live_allocs(void);

/* The reference formula of each optimiser (sx_optim.h) as plain graph ops, one assign per written
 * tensor (the states' first, the parameter's last, as sx_optim_update hands out its handles):
 * what the fused update kernels must equal bit for bit. `states` as sx_optim_update takes them
 * (NULL: new zero ones named "<param>.<state>"). Aborts the test on a failure (tests only);
 * returns how many assigns it stored in outs (at most 4). */
int tu_optim_reference(sx_cg_graph *g, const sx_optim_params *p, sx_cg_node *param,
                       sx_cg_node *grad, sx_cg_node *lr, sx_cg_node *step,
                       sx_cg_node *const *states, sx_cg_node **outs);

#endif
