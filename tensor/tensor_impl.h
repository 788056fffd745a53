/* tensor_impl.h: helpers shared by the kernel files of tensor/ (never installed).
 * Argument checks that produce strix's error messages, the parallel runtime (par_impl.h), and
 * the macro that instantiates a kernel body once per dtype (one source, a template per dtype). */
#ifndef SX_TENSOR_IMPL_H
#define SX_TENSOR_IMPL_H

#include "par_impl.h"
#include "sx_tensor.h"
#include "sx_tensor_kernels.h"

#include <assert.h>
#include <string.h>

/* Instantiate `BODY(T)` for the dtype of `dt`: `SX_DISPATCH(x->dtype, MY_BODY)` expands to a
 * switch whose cases run MY_BODY(float) and MY_BODY(double). */
#define SX_DISPATCH(dt, BODY)                                                                      \
    do {                                                                                           \
        switch (dt) {                                                                              \
        case SX_F32: {                                                                             \
            BODY(float);                                                                           \
            break;                                                                                 \
        }                                                                                          \
        case SX_F64: {                                                                             \
            BODY(double);                                                                          \
            break;                                                                                 \
        }                                                                                          \
        case SX_I32:                                                                               \
        case SX_I64:                                                                               \
            assert(!"an integer tensor reached a float kernel");                                   \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

/* NULL and dtype checks: SX_E_ARG naming the argument / SX_E_DTYPE naming both dtypes.
 * sx__check_desc checks a descriptor only (shape functions accept tensors without data).
 * Both refuse an integer tensor (SX_E_DTYPE): they guard the float kernels. sx__check_any is
 * sx__check_tensor for the functions that also take integer tensors (see sx_dtype). */
sx_status sx__check_tensor(const char *who, const char *name, const sx_tensor *t);
sx_status sx__check_desc(const char *who, const char *name, const sx_tensor *t);
sx_status sx__check_any(const char *who, const char *name, const sx_tensor *t);
sx_status sx__check_same_dtype(const char *who, const sx_tensor *a, const sx_tensor *b);
/* `out` must exist, have x's dtype and exactly the given shape (SX_E_SHAPE naming both). */
sx_status sx__check_out(const char *who, const sx_tensor *out, sx_dtype dtype, int rank,
                        const int64_t *shape);
/* The output `out` must not share memory with input `in` (kernels that read inputs after
 * writing outputs): SX_E_ARG naming both. */
sx_status sx__check_apart(const char *who, const char *in_name, const sx_tensor *in,
                          const char *out_name, const sx_tensor *out);
/* Resolve a possibly negative axis against rank (SX_E_AXIS naming it). */
sx_status sx__axis(const char *who, int axis, int rank, int *out);
/* Fused programs (tensor/elementwise/fused.c): how many sources (a, b, c) an instruction of `kind`
 * reads, and the one validator of every field of a program over n_in operands
 * (sx_tensor_fused_out's rules, stated in sx_tensor.h), used by sx_tensor_fused_out, the FUSED
 * node's shape rule and the model file reader. SX_E_ARG naming `who`, the instruction and the
 * field. */
static inline int sx__fused_sources(int kind)
{
    return kind == SX_FUSED_MAP || kind == SX_FUSED_STORE ? 1 : kind == SX_FUSED_BINARY ? 2 : 3;
}
sx_status sx__fused_check(const char *who, const sx_fused_prog *p, int n_in);
/* The same, with stores allowed into operands 0..n_store-1 (sx_tensor_fused_update: all of
 * them; the update nodes: the parameters they write); n_store 0 is sx__fused_check. */
sx_status sx__fused_check_stores(const char *who, const sx_fused_prog *p, int n_in, int n_store);
/* Known fused programs (tensor/elementwise/fused_known.c): the programs element-wise fusion
 * makes of the optimisers' formulas, each with a compiled kernel. run: when p over n_in operands
 * (period as fused.c's: 0 the program's size, 1 one element) is one of them exactly, run its
 * kernel over the `size` elements of ops (writing its stores in place, the interpreter's bits)
 * and return true; else false (nothing done). find: the index of the program whose operand i
 * holds one element where bit i of `scalar` is set (the others the program's size), or -1.
 * entry: program i (false past the last); enable(false) makes run always return false (the
 * tests compare the kernels with the interpreter). */
bool sx__fused_known_run(const sx_fused_prog *p, int n_in, void *const *ops, const int64_t *period,
                         sx_dtype dt, int64_t size);
int sx__fused_known_find(const sx_fused_prog *p, int n_in, uint64_t scalar);
int sx__fused_known_count(void);
bool sx__fused_known_entry(int i, const char **name, sx_fused_prog *prog, int *n_ops,
                           uint64_t *scalar);
void sx__fused_known_enable(bool on);
/* Allocate a tensor of the given shape for an allocating wrapper. */
sx_status sx__new_like(sx_dtype dtype, int rank, const int64_t *shape, sx_tensor **out);

/* One step of the xoshiro256** generator behind sx_rng_u64, inlined for kernels that draw one
 * number per element (copy the generator to a local, draw, store it back). */
static inline uint64_t sx_rng_u64_inline(sx_rng *r)
{
    uint64_t *s = r->s;
    const uint64_t x = s[1] * 5;
    const uint64_t result = ((x << 7) | (x >> 57)) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* The instruction set of this process's kernels (tensor/core/isa.c), detected once: on x86-64,
 * AVX512 when the CPU has AVX-512 F, VL, BW and DQ plus AVX2 and FMA, AVX2 when it has AVX2 and
 * FMA, else BASE; NEON on every AArch64 CPU (mandatory there); BASE elsewhere or without a GNU C
 * compiler. Then capped by $SX_ISA (base|avx2|avx512|neon; a cap only lowers it, within the
 * CPU's family: base caps every set, avx2 and avx512 only x86's). Compare with ==: NEON is not
 * above AVX512, the values only name the sets. Every kernel family with per-ISA builds uses it. */
enum { SX__ISA_BASE = 0, SX__ISA_AVX2 = 1, SX__ISA_AVX512 = 2, SX__ISA_NEON = 3 };
int sx__isa(void);

/* One row-major GEMM (tensor/gemm/gemm.c): c (m,n) = alpha * op(a) @ op(b) + beta * c, with op(a)
 * (m,k) and op(b) (k,n); lda, ldb, ldc are row strides in elements; all dims >= 1 and <= INT_MAX
 * (checked by the caller); beta = 0 overwrites c (NaN too). c must not overlap a or b. Uses
 * sx_threads_get() threads; the result does not depend on the thread count.
 * Rounding: each element's sum P runs over sx__gemm_kblocks(k) blocks of k, each one chain of
 * multiply-adds from zero, added in order. beta = 0: c = alpha * P rounded after P (the bits of
 * P then a scaling by alpha; alpha = 1 gives P). alpha = beta = 1 with one K block: c = P + c,
 * rounded once. Otherwise beta * c is added to the first block's sum (the BLAS contract, no
 * promise on rounding). */
void sx__gemm(sx_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
              const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
              int64_t ldc);
/* The number of K blocks sx__gemm sums a product of inner size k in (0 for k = 0): the same for
 * every kernel set and dtype. */
int64_t sx__gemm_kblocks(int64_t k);

#endif
