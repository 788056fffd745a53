/* sx_tensor.h: dense n-d arrays and every numerical kernel of strix.
 *
 * This is the bottom layer. It also holds what every module above shares: the status list
 * (sx_status.def), the per-thread error message, the allocator hook and the thread policy.
 *
 * Conventions that hold for every function below
 * ----------------------------------------------
 * - Errors are values. A function that can fail returns sx_status; on failure it returns a code
 *   other than SX_OK, sets a one-line message readable with sx_last_error() ("sx_tensor_binary_out:
 *   shapes (3,4) and (5,4) do not broadcast"), and leaves its outputs unchanged unless the
 *   function says otherwise. Bad user input never aborts the process.
 * - Tensors are row-major and contiguous, of dtype f32 or f64 (or an integer dtype, which only
 *   holds indices: see sx_dtype), rank 0..SX_MAX_RANK. A rank-0
 *   tensor is a scalar with one element. Shapes may contain 0 (empty tensors); kernels accept
 *   them and do nothing (folds of an empty set give the identity of the fold, or an error where
 *   there is none: max/min/argmax/argmin of nothing is SX_E_SHAPE).
 * - All inputs and outputs of one call have the same dtype (SX_E_DTYPE otherwise); convert with
 *   sx_tensor_cast_out.
 * - `_out` functions write into a caller-provided tensor whose shape and dtype must already be
 *   the result's (SX_E_SHAPE / SX_E_DTYPE otherwise). They never allocate unless the comment
 *   says so; kernels that need scratch memory take it as an explicit workspace. Element-wise
 *   kernels (map, binary, fma, cast, copy) may be called in place: `out` may be the same memory
 *   as an input of the same shape. Other kernels require `out` not to overlap any input.
 * - Functions without `_out` allocate their result through the allocator hook and hand it to
 *   the caller, who frees it with sx_tensor_free. On failure *out is set to NULL.
 * - Axes sets are bit masks: bit i set means axis i (SX_AXIS(i)); SX_AXES_ALL means every axis.
 *
 * Threads (the one policy for every parallel piece of strix): the kernels run their loops above
 * a size threshold, and strix's own GEMM (tensor/gemm/gemm.c; AVX-512, AVX2 or portable kernels
 * picked at run time) its rectangles, on one thread pool (tensor/core/par.c; no OpenMP runtime, and
 * no environment variable is needed). A loop is cut into tasks, about four per thread; the calling
 * thread takes part, tasks go to whichever threads are awake, and the call returns when every
 * task has run, never waiting for a worker that has not started one: a worker the OS has
 * descheduled cannot hold the caller up, so a loaded machine slows strix by about its fair share.
 * Idle workers spin for about 50 us, then sleep until a loop needs them; while a compiled graph
 * runs (sx_cg_eval), for up to 1 ms, so that the serial gaps between its kernels do not put them
 * to sleep and cost a wake-up at the next kernel. Each kernel uses at
 * most sx_threads_get() threads (the caller included, at most 256), set for all at once by
 * sx_threads_set() or per calling thread by sx_threads_set_local(). One loop uses the pool at a
 * time: a kernel called while another thread's loop holds it, or from inside a task, runs on its
 * calling thread alone. The dependency engine's workers follow the rule in sx_engine.h, so they
 * and the pool never oversubscribe the cores. OpenBLAS (the LAPACK-based kernels only) runs on
 * the calling thread. Results are bit-reproducible and depend neither on the thread count nor on
 * the load: work is split so that every element is computed by the same operations in the same
 * order, and reductions combine fixed blocks in a fixed order (matmul and conv2d included; the
 * LAPACK-based kernels excepted); bits may differ between CPUs with and without AVX2/AVX-512.
 */
#ifndef SX_TENSOR_H
#define SX_TENSOR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* SX_NODISCARD, at the head of a declaration: the compiler warns when a caller drops the
 * result (every function returning sx_status has it). To drop one on purpose, cast the call
 * to void: `(void)sx_threads_set(4);`. That silences the warning wherever the compiler has an
 * attribute that allows it: C23's [[nodiscard]] (C23, and GCC in C11/C17 mode through
 * __extension__, which keeps -Wpedantic quiet), C++17's [[nodiscard]], and clang's
 * warn_unused_result. Other GCC-compatible compilers get warn_unused_result, which GCC does not
 * let a cast silence (there, use the result: `if (f() != SX_OK) ...`). Declarations put it
 * first: `SX_NODISCARD sx_status sx_f(...);` (an attribute after the parameter list would name
 * the function's type, which nodiscard cannot). */
#if defined(__cplusplus) && __cplusplus >= 201703L
#define SX_NODISCARD [[nodiscard]]
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ > 201710L
#define SX_NODISCARD [[nodiscard]]
#elif defined(__GNUC__) && !defined(__clang__) && !defined(__cplusplus) &&                         \
    defined(__has_c_attribute)
#if __has_c_attribute(nodiscard)
#define SX_NODISCARD __extension__ [[nodiscard]]
#endif
#endif
#if !defined(SX_NODISCARD) && defined(__GNUC__)
#define SX_NODISCARD __attribute__((warn_unused_result))
#elif !defined(SX_NODISCARD)
#define SX_NODISCARD
#endif
#if defined(__GNUC__)
#define SX_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SX_PRINTF(f, a)
#endif

/* ---------------------------------------------------------------- status and errors */

typedef enum {
#define X(name, msg) name,
#include "sx_status.def"
#undef X
    SX_STATUS_COUNT
} sx_status;

/* The fixed message of a status ("shape mismatch"); never NULL. */
const char *sx_status_str(sx_status s);

/* The message of the last error set on this thread, or "" if none. The buffer stays valid
 * until the next error on the same thread. */
const char *sx_last_error(void);

/* Record an error for this thread and return `s`; for modules built on strix. The message is
 * formatted like printf and truncated to 511 bytes. */
sx_status sx_error(sx_status s, const char *fmt, ...) SX_PRINTF(2, 3);

/* Forget the last error of this thread. */
void sx_error_clear(void);

/* Return from the calling function when `expr` (an sx_status) is not SX_OK. */
#define SX_TRY(expr)                                                                               \
    do {                                                                                           \
        sx_status sx_try_s_ = (expr);                                                              \
        if (sx_try_s_ != SX_OK)                                                                    \
            return sx_try_s_;                                                                      \
    } while (0)

/* ---------------------------------------------------------------- allocation */

/* The allocator hook: every allocation strix makes, in every module, goes through it.
 * The functions have malloc/realloc/free semantics (realloc(ctx, NULL, n) is alloc; free(ctx,
 * NULL) does nothing). Tests replace it to fail the k-th allocation. */
typedef struct sx_allocator {
    void *(*alloc)(void *ctx, size_t bytes);
    void *(*realloc)(void *ctx, void *p, size_t bytes);
    void (*free)(void *ctx, void *p);
    void *ctx;
} sx_allocator;

/* Install `a` (copied) as the allocator for the whole process; NULL restores the default
 * (malloc). Not thread-safe: call it while no strix call runs. */
void sx_allocator_set(const sx_allocator *a);
/* The allocator in use (to chain to it from a wrapper). */
sx_allocator sx_allocator_get(void);

/* Allocate through the hook. Return NULL and set SX_E_NOMEM on failure (also for 0 bytes
 * never: a request of 0 bytes is served as 1). */
void *sx_alloc(size_t bytes);
void *sx_calloc(size_t count, size_t size); /* zeroed; overflow of count*size -> NULL */
void *sx_realloc(void *p, size_t bytes);    /* on failure p is untouched */
void sx_free(void *p);                      /* NULL is fine */

/* ---------------------------------------------------------------- threads */

/* Set the number of threads strix's kernels use (n >= 1; n = 0 means the number of cores); may
 * be called at any time (running kernels keep the count they started with). The default is the
 * number of cores, or $SX_THREADS (1..1024) when set. Pool workers start as loops need them. */
SX_NODISCARD sx_status sx_threads_set(int n);
/* Override the count for the calling thread only (n >= 1; 0 returns to the global count): the
 * strix kernels this thread calls then use n threads. The dependency engine gives each worker
 * its share this way. */
SX_NODISCARD sx_status sx_threads_set_local(int n);
/* The count for the calling thread: its local override, else the global count. */
int sx_threads_get(void);

/* Seconds on a monotonic clock (CLOCK_MONOTONIC) from an arbitrary origin: differences time
 * a piece of work (training progress, profiles, examples and benchmarks). */
double sx_seconds(void);

/* Instruction sets: the element-wise, GEMM, convolution, pooling and dropout kernels are built
 * for AVX-512, AVX2+FMA and baseline x86-64 (SSE2), and the process uses the widest the CPU has
 * (AVX-512 means its F, VL, BW and DQ subsets); an AArch64 process runs at "neon" (every AArch64
 * CPU has it); elsewhere the portable code only. The environment variable
 * SX_ISA=avx512|avx2|neon|base, read once at the first kernel call, caps the choice (it never
 * raises it; base caps every set, avx2 and avx512 only x86's; other values are ignored):
 * SX_ISA=avx2 or base runs the kernels a machine without AVX-512 would, e.g. to test them or to
 * get that machine's bits. The name of the set in use: "avx512", "avx2", "neon" or "base". */
const char *sx_isa_name(void);

/* ---------------------------------------------------------------- random numbers */

/* A seeded random-number generator (xoshiro256**, seeded by splitmix64). There is no global
 * generator: every random draw in strix names the generator it uses. The struct is open so it
 * can live on the stack; treat the fields as private. */
typedef struct sx_rng {
    uint64_t s[4];
} sx_rng;

void sx_rng_seed(sx_rng *r, uint64_t seed);
uint64_t sx_rng_u64(sx_rng *r);
double sx_rng_uniform(sx_rng *r); /* in [0, 1), 53 random bits */
double sx_rng_normal(sx_rng *r);  /* standard normal (Box-Muller; no cached second value) */
/* A uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t sx_rng_below(sx_rng *r, uint64_t n);

/* ---------------------------------------------------------------- tensors */

#define SX_MAX_RANK 8
#define SX_AXIS(i) (1u << (i))
#define SX_AXES_ALL 0xFFu

/* Element types. f32 and f64 are what strix computes with. The integer dtypes hold indices
 * (token ids, class labels, an ONNX model's int64 data): they are storage, not arithmetic. An
 * integer tensor can be made (sx_tensor_new/_wrap/_zeros/_ones/_full/_scalar/_from_doubles),
 * cloned, reshaped, filled (sx_tensor_fill, sx_tensor_arange), copied, converted
 * (sx_tensor_cast_out), read and written element by element, compared (sx_tensor_max_abs_diff)
 * and printed, and it is what the layers that take indices accept at their boundary (nn's
 * sx_nn_input_ids and sparse targets, datasets' sources); every other function refuses it with
 * SX_E_DTYPE ("sx_tensor_binary_out: a is an integer tensor (i64); this function takes f32 or
 * f64"). A double given for an integer element (sx_tensor_set, a fill) is truncated toward
 * zero; it must be finite and within the dtype's range (sx_tensor_cast_out checks, and fails
 * with SX_E_RANGE; the element functions assert). */
typedef enum { SX_F32 = 0, SX_F64 = 1, SX_I32 = 2, SX_I64 = 3 } sx_dtype;

/* Bytes of one element (4 or 8) and the name ("f32", "f64", "i32", "i64"; "bad-dtype" for a value
 * that is none of them). */
size_t sx_dtype_size(sx_dtype d);
const char *sx_dtype_name(sx_dtype d);
/* True for SX_I32 and SX_I64. */
bool sx_dtype_is_int(sx_dtype d);

/* A dense row-major tensor. The descriptor is open so that kernels and the graph engine can make
 * views on the stack (sx_tensor_view) with no allocation.
 * Ownership: when `owns` is true, `data` was allocated by strix and sx_tensor_free releases it;
 * when false, the data is borrowed and the caller keeps it alive and frees it.
 * Descriptors from sx_tensor_new/_wrap/_zeros/... are heap-allocated and released by
 * sx_tensor_free; descriptors from sx_tensor_view are values and are never passed to it. */
typedef struct sx_tensor {
    sx_dtype dtype;
    int rank;                   /* 0..SX_MAX_RANK */
    int64_t shape[SX_MAX_RANK]; /* shape[i] for i < rank; entries past rank are 1 */
    int64_t size;               /* product of shape (1 for rank 0) */
    void *data;                 /* size * sx_dtype_size(dtype) bytes, row-major */
    bool owns;                  /* data is released by sx_tensor_free */
} sx_tensor;

/* Element accessors for code that knows the dtype. */
#define SX_F32P(t) ((float *)(t)->data)
#define SX_F64P(t) ((double *)(t)->data)
#define SX_I32P(t) ((int32_t *)(t)->data)
#define SX_I64P(t) ((int64_t *)(t)->data)

/* Check a shape: 0 <= rank <= SX_MAX_RANK, every dim >= 0, the element count fits in int64
 * (SX_E_RANK, SX_E_ARG for a NULL shape of rank > 0, SX_E_SHAPE). `who` names the caller in the
 * message (NULL: "sx_shape_check"). */
SX_NODISCARD sx_status sx_shape_check(const char *who, int rank, const int64_t *shape);
/* Product of the dims (1 for rank 0). The shape must have passed sx_shape_check. */
int64_t sx_shape_size(int rank, const int64_t *shape);
/* "(3,4)" into buf (at most n bytes, always terminated); returns buf. "()" for rank 0. */
char *sx_shape_str(int rank, const int64_t *shape, char *buf, size_t n);
/* NumPy broadcasting of two shapes into out_shape (rank max(ra, rb)); SX_E_SHAPE with both
 * shapes named when they do not broadcast; sx_shape_check's errors for either shape; SX_E_ARG
 * when out_rank or out_shape is NULL. `who` names the caller (NULL: "sx_shape_broadcast"). */
SX_NODISCARD sx_status sx_shape_broadcast(const char *who, int ra, const int64_t *sa, int rb,
                                          const int64_t *sb, int *out_rank, int64_t *out_shape);
bool sx_shape_equal(int ra, const int64_t *sa, int rb, const int64_t *sb);

/* A stack descriptor over borrowed memory (owns = false). The shape must be valid. */
sx_tensor sx_tensor_view(sx_dtype dtype, int rank, const int64_t *shape, void *data);

/* New tensor with owned, uninitialised data. */
SX_NODISCARD sx_status sx_tensor_new(sx_dtype dtype, int rank, const int64_t *shape,
                                     sx_tensor **out);
/* New descriptor over borrowed `data` (not copied, not freed by strix). */
SX_NODISCARD sx_status sx_tensor_wrap(sx_dtype dtype, int rank, const int64_t *shape, void *data,
                                      sx_tensor **out);
SX_NODISCARD sx_status sx_tensor_zeros(sx_dtype dtype, int rank, const int64_t *shape,
                                       sx_tensor **out);
SX_NODISCARD sx_status sx_tensor_ones(sx_dtype dtype, int rank, const int64_t *shape,
                                      sx_tensor **out);
SX_NODISCARD sx_status sx_tensor_full(sx_dtype dtype, int rank, const int64_t *shape, double value,
                                      sx_tensor **out);
/* A rank-0 tensor holding `value`. */
SX_NODISCARD sx_status sx_tensor_scalar(sx_dtype dtype, double value, sx_tensor **out);
/* New tensor from `count` doubles (converted to dtype); count must equal the shape's size. */
SX_NODISCARD sx_status sx_tensor_from_doubles(sx_dtype dtype, int rank, const int64_t *shape,
                                              const double *values, int64_t count, sx_tensor **out);
/* A deep copy with owned data. */
SX_NODISCARD sx_status sx_tensor_clone(const sx_tensor *x, sx_tensor **out);
/* Release the descriptor and, when owned, the data. NULL is fine. */
void sx_tensor_free(sx_tensor *t);

/* Change the shape of `t` in place without copying; the element count must stay the same. */
SX_NODISCARD sx_status sx_tensor_reshape(sx_tensor *t, int rank, const int64_t *shape);

/* Element i (flat, row-major) as a double, and set it. No bounds check beyond an assert. */
double sx_tensor_get(const sx_tensor *t, int64_t i);
void sx_tensor_set(sx_tensor *t, int64_t i, double v);

/* Fill helpers (in place). arange: out[i] = start + i*step; linspace: n = size points from
 * `lo` to `hi` inclusive (size 1 gives lo). */
SX_NODISCARD sx_status sx_tensor_fill(sx_tensor *out, double value);
SX_NODISCARD sx_status sx_tensor_arange(sx_tensor *out, double start, double step);
SX_NODISCARD sx_status sx_tensor_linspace(sx_tensor *out, double lo, double hi);
/* Random fills from an explicit generator; same seed, same values, whatever the thread count. */
SX_NODISCARD sx_status sx_tensor_rand_uniform(sx_tensor *out, sx_rng *rng, double lo, double hi);
SX_NODISCARD sx_status sx_tensor_rand_normal(sx_tensor *out, sx_rng *rng, double mean, double std);

/* Copy values (same dtype, same size; shapes may differ, as in a reshape). */
SX_NODISCARD sx_status sx_tensor_copy_out(const sx_tensor *x, sx_tensor *out);
/* Convert between dtypes (same shape; any two dtypes, integers included). Floats to integers
 * truncate toward zero; a value that is not finite or outside the integer dtype's range fails
 * with SX_E_RANGE naming the element (out is then partly written). Integers to f32 round to the
 * nearest float (exact below 2^24), i64 to f64 exact below 2^53. */
SX_NODISCARD sx_status sx_tensor_cast_out(const sx_tensor *x, sx_tensor *out);

/* Print like NumPy: shape and dtype, then the values; more than 1000 elements are summarised
 * with "..." (the first and last three along each axis). */
void sx_tensor_print(const sx_tensor *t, FILE *f);

/* Largest |a[i] - b[i]| over two tensors of equal size (any dtypes); +inf if either holds a NaN
 * where the other does not. For tests and tools. */
double sx_tensor_max_abs_diff(const sx_tensor *a, const sx_tensor *b);

/* ---------------------------------------------------------------- map: y = f(x) */

typedef enum {
#define X(name, lname, expr, ...) SX_MAP_##name,
#include "sx_map.def"
#undef X
    SX_MAP_COUNT
} sx_map_op;

const char *sx_map_name(sx_map_op op);
/* out[i] = f(x[i]); `alpha` is the op parameter (leaky_relu slope, elu alpha). In place ok.
 * f32 transcendentals are strix's vectorised functions (tensor/core/vmath.h): within 0.87 ulp
 * (expm1, sin, cos, tan, tanh, sigmoid, softplus, erf within 0.501), the same bits on every CPU;
 * sin/cos/tan of |x| > 2^20 use libm. f64 uses libm. The f32 kernels are built for SSE2, AVX2
 * and AVX-512 and picked at run time; $SX_ISA=base|avx2|avx512 caps the choice. Softmax and
 * the fused element-wise programs use the same functions. round sends halves to the even
 * integer (0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -2.5 -> -2; NumPy, PyTorch and ONNX do the same), in
 * every dtype and instruction set. */
SX_NODISCARD sx_status sx_tensor_map_out(sx_map_op op, double alpha, const sx_tensor *x,
                                         sx_tensor *out);
SX_NODISCARD sx_status sx_tensor_map(sx_map_op op, double alpha, const sx_tensor *x,
                                     sx_tensor **out);

/* ---------------------------------------------------------------- binary: z = a op b */

typedef enum {
#define X(name, lname, expr, ...) SX_BINARY_##name,
#include "sx_binary.def"
#undef X
    SX_BINARY_COUNT
} sx_binary_op;

const char *sx_binary_name(sx_binary_op op);
/* out = a op b with NumPy broadcasting; out has the broadcast shape. In place ok when out has
 * the shape of the input it overlaps. */
SX_NODISCARD sx_status sx_tensor_binary_out(sx_binary_op op, const sx_tensor *a, const sx_tensor *b,
                                            sx_tensor *out);
SX_NODISCARD sx_status sx_tensor_binary(sx_binary_op op, const sx_tensor *a, const sx_tensor *b,
                                        sx_tensor **out);
/* out = a op s (tensor, scalar) and out = s op b (scalar, tensor). */
SX_NODISCARD sx_status sx_tensor_binary_scalar_out(sx_binary_op op, const sx_tensor *a, double s,
                                                   sx_tensor *out);
SX_NODISCARD sx_status sx_tensor_scalar_binary_out(sx_binary_op op, double s, const sx_tensor *b,
                                                   sx_tensor *out);
/* out = a * b + c, all three broadcast together. */
SX_NODISCARD sx_status sx_tensor_fma_out(const sx_tensor *a, const sx_tensor *b, const sx_tensor *c,
                                         sx_tensor *out);
/* out = x broadcast to out's shape (NumPy broadcast_to, materialised). */
SX_NODISCARD sx_status sx_tensor_broadcast_out(const sx_tensor *x, sx_tensor *out);

/* ---------------------------------------------------------------- fold: reductions */

typedef enum {
#define X(name, str) SX_FOLD_##name,
#include "sx_fold.def"
#undef X
    SX_FOLD_COUNT
} sx_fold_op;

const char *sx_fold_name(sx_fold_op op);
/* Reduce x over the axes in `axes` (bit mask; bits >= x->rank are SX_E_AXIS; 0 means no axis:
 * the result equals x for sum/mean/prod/max/min, |x| for the norms, x for logsumexp, 0 for
 * argmax/argmin), in one pass with adjacent axes merged.
 *   sum, mean, prod, max, min: as named (max/min propagate NaN; the mean of nothing is NaN);
 *   argmax, argmin: the flat row-major index within the reduced axes of the first extreme
 *     element, stored as a value of the dtype;
 *   l1norm = sum |x|;  l2norm = sqrt(sum x^2);  logsumexp = m + log(sum exp(x - m)), m = max.
 * With keepdims the reduced axes stay as size 1; otherwise they are removed. */
SX_NODISCARD sx_status sx_tensor_fold_out(sx_fold_op op, const sx_tensor *x, unsigned axes,
                                          bool keepdims, sx_tensor *out);
SX_NODISCARD sx_status sx_tensor_fold(sx_fold_op op, const sx_tensor *x, unsigned axes,
                                      bool keepdims, sx_tensor **out);
/* The result shape of a fold (for callers that allocate). */
SX_NODISCARD sx_status sx_fold_shape(const char *who, int rank, const int64_t *shape, unsigned axes,
                                     bool keepdims, int *out_rank, int64_t *out_shape);

/* ---------------------------------------------------------------- repeat, tile, layout */

/* repeat: each element repeated reps[i] times along axis i (NumPy repeat on every axis at once:
 * [a b] x2 -> [a a b b]); tile: the whole tensor repeated reps[i] times along axis i
 * ([a b] x2 -> [a b a b]). reps has x->rank entries, each >= 0 (SX_E_ARG otherwise; a result
 * too large is SX_E_SHAPE). One pass over the output. */
SX_NODISCARD sx_status sx_tensor_repeat_out(const sx_tensor *x, const int64_t *reps,
                                            sx_tensor *out);
SX_NODISCARD sx_status sx_tensor_tile_out(const sx_tensor *x, const int64_t *reps, sx_tensor *out);

/* One axis of a slice, Python semantics: negative start/stop count from the end, and are
 * clamped to the axis; step != 0 (negative steps walk backwards). SX_SLICE_ALL takes the whole
 * axis. */
typedef struct sx_slice {
    int64_t start, stop, step;
} sx_slice;
#define SX_SLICE_END INT64_MAX
#define SX_SLICE_ALL ((sx_slice){0, SX_SLICE_END, 1})

/* Resolve slices (one per axis) against a shape: the result shape, and the normalised first
 * index of each axis (meaningful only where out_shape[i] > 0); who, out_shape and first may be
 * NULL. */
SX_NODISCARD sx_status sx_slice_shape(const char *who, int rank, const int64_t *shape,
                                      const sx_slice *s, int64_t *out_shape, int64_t *first);
/* out = x[s0, s1, ...]. */
SX_NODISCARD sx_status sx_tensor_slice_out(const sx_tensor *x, const sx_slice *s, sx_tensor *out);
/* The adjoint of slice: out is set to zero, then out[s0, s1, ...] = g (out has the full shape). */
SX_NODISCARD sx_status sx_tensor_unslice_out(const sx_tensor *g, const sx_slice *s, sx_tensor *out);
/* Join n >= 1 tensors along `axis`; all other dims must agree. */
SX_NODISCARD sx_status sx_tensor_concat_out(int n, const sx_tensor *const *xs, int axis,
                                            sx_tensor *out);
/* The inverse of concat: outs[i] receives the next outs[i]->shape[axis] entries along axis;
 * their sizes along `axis` must add up to x's. */
SX_NODISCARD sx_status sx_tensor_split_out(const sx_tensor *x, int axis, int n,
                                           sx_tensor *const *outs);
/* out axis i = x axis perm[i] (perm is a permutation of 0..rank-1; an entry out of range or
 * repeated is SX_E_AXIS). */
SX_NODISCARD sx_status sx_tensor_permute_out(const sx_tensor *x, const int *perm, sx_tensor *out);
/* Swap the last two axes (rank >= 2). */
SX_NODISCARD sx_status sx_tensor_transpose_out(const sx_tensor *x, sx_tensor *out);
/* Constant padding: before[i] and after[i] (>= 0) elements of `value` around axis i. */
SX_NODISCARD sx_status sx_tensor_pad_out(const sx_tensor *x, const int64_t *before,
                                         const int64_t *after, double value, sx_tensor *out);
/* Index tensors (one_hot, gather, scatter_add) hold their indices as values of the tensor's
 * dtype; NaN, infinite, non-integral or out-of-range values are SX_E_RANGE with nothing
 * written; gather/scatter with an idx of rank != 1 or a rank-0 table are SX_E_RANK.
 * out (idx shape + [depth]) = 1 where the last index equals idx, else 0. */
SX_NODISCARD sx_status sx_tensor_one_hot_out(const sx_tensor *idx, int64_t depth, sx_tensor *out);
/* Rows of x: out[i, ...] = x[idx[i], ...]; idx rank 1 of integral values in [0, x->shape[0]). */
SX_NODISCARD sx_status sx_tensor_gather_out(const sx_tensor *x, const sx_tensor *idx,
                                            sx_tensor *out);
/* The adjoint of gather: out is set to zero, then out[idx[i], ...] += g[i, ...]. */
SX_NODISCARD sx_status sx_tensor_scatter_add_out(const sx_tensor *g, const sx_tensor *idx,
                                                 sx_tensor *out);
/* Embedding (tensor/layout/embedding.c): table (vocab, dim), idx of any rank r <= 7 with
 * integral values in [0, vocab), out (idx shape..., dim): out[i, :] = table[idx[i], :], or zeros
 * where idx[i] == pad (pad -1: none; else in [0, vocab), SX_E_RANGE otherwise). A table of rank
 * != 2 is SX_E_RANK, bad indices SX_E_RANGE with nothing written. The backward kernel is its
 * adjoint: out (vocab, dim) is set to zero, then out[idx[i], :] += g[i, :] for idx[i] != pad,
 * in index order (deterministic). */
SX_NODISCARD sx_status sx_tensor_embedding_out(const sx_tensor *table, const sx_tensor *idx,
                                               int64_t pad, sx_tensor *out);
SX_NODISCARD sx_status sx_tensor_embedding_backward_out(const sx_tensor *g, const sx_tensor *idx,
                                                        int64_t pad, sx_tensor *out);

/* ---------------------------------------------------------------- matmul */

/* out = alpha * op(a) @ op(b) + beta * out, op(m) = m or its transpose (of the last two axes).
 * a, b of rank >= 2; leading (batch) axes broadcast (NumPy matmul); a rank-2 operand is shared
 * by every batch. beta = 0 ignores out's old contents (even NaN). Every product runs on strix's
 * own GEMM (tensor/gemm/gemm.c, not BLAS): one per batch, or one for the whole batch when b is one
 * shared matrix and a is not transposed (its rows are then contiguous).
 * Rounding with beta = 0: alpha times the finished sum, rounded once more, so alpha != 1 gives
 * the bits of the product followed by a multiplication by alpha. */
SX_NODISCARD sx_status sx_tensor_matmul_out(const sx_tensor *a, const sx_tensor *b, bool trans_a,
                                            bool trans_b, double alpha, double beta,
                                            sx_tensor *out);
SX_NODISCARD sx_status sx_tensor_matmul(const sx_tensor *a, const sx_tensor *b, bool trans_a,
                                        bool trans_b, sx_tensor **out);
/* The result shape of a matmul. */
SX_NODISCARD sx_status sx_matmul_shape(const char *who, const sx_tensor *a, const sx_tensor *b,
                                       bool trans_a, bool trans_b, int *out_rank,
                                       int64_t *out_shape);
/* Inner product of two vectors of equal size; out is rank 0. */
SX_NODISCARD sx_status sx_tensor_dot_out(const sx_tensor *a, const sx_tensor *b, sx_tensor *out);

/* ---------------------------------------------------------------- convolution and pooling */

/* Padding of a window op (convolution, pooling). VALID: none. SAME_UPPER (= SAME, TensorFlow's and
 * ONNX's default): out = ceil(in / stride), the odd padding cell after (bottom/right);
 * SAME_LOWER: the same total, the odd cell before (top/left). EXPLICIT: the pad_* fields of the
 * params struct. The values are stored in saved models: append only. */
typedef enum {
    SX_PAD_VALID = 0,
    SX_PAD_SAME = 1,
    SX_PAD_SAME_UPPER = SX_PAD_SAME,
    SX_PAD_SAME_LOWER = 2,
    SX_PAD_EXPLICIT = 3
} sx_padding;

/* 2-d convolution (cross-correlation, as in every DL framework) of an NHWC input x (n,h,w,c)
 * with a kernel k (kh,kw,c/groups,f) giving y (n,oh,ow,f):
 *   y[b,oy,ox,j] = sum over ky, kx, ci of x[b, oy*sh - pt + ky*dh, ox*sw - pl + kx*dw,
 *                  (j / (f/groups)) * (c/groups) + ci] * k[ky,kx,ci,j]
 * (taps that fall into the padding read 0). Filter j belongs to group j / (f/groups), which
 * reads the input channels of its group: groups = 1 is a dense convolution, groups = c a
 * depthwise one (with f = c * multiplier). PyTorch's Conv2d weight (f, c/groups, kh, kw) is
 * this kernel permuted by (2, 3, 1, 0); ONNX Conv's W likewise.
 * Sizes, with the dilated window K = dh*(kh-1) + 1 (and likewise for the columns):
 *   VALID:      oh = (h - K) / sh + 1 (floor), pads 0; K > h is SX_E_SHAPE.
 *   SAME_UPPER (SX_PAD_SAME, TensorFlow's SAME, ONNX's auto_pad SAME_UPPER) and SAME_LOWER:
 *               oh = ceil(h / sh); total padding P = max((oh-1)*sh + K - h, 0);
 *               SAME_UPPER: pt = P / 2 (the odd cell after, at the bottom/right);
 *               SAME_LOWER: pt = P - P / 2 (the odd cell before, at the top/left).
 *   EXPLICIT:   oh = (h + pad_top + pad_bottom - K) / sh + 1 (floor), pt = pad_top (as PyTorch's
 *               padding=(ph, pw) with pad_top = pad_bottom = ph, or ONNX's pads); the padded
 *               height h + pad_top + pad_bottom < K is SX_E_SHAPE.
 * The struct is open: start from sx_conv2d_params_default() and set fields, or use designated
 * initialisers; every field left 0 keeps the meaning it had before the field existed (a
 * dilation or groups of 0 reads as 1), so `{sh, sw, SX_PAD_SAME}` still means what it did.
 * The values are stored in graphs and saved models. */
typedef struct sx_conv2d_params {
    int stride_h, stride_w; /* >= 1 */
    sx_padding padding;     /* VALID, SAME(_UPPER), SAME_LOWER or EXPLICIT */
    /* EXPLICIT only (ignored by the other modes): zero rows above / below x, zero columns to
     * its left / right; >= 0. */
    int pad_top, pad_bottom, pad_left, pad_right;
    int dilation_h, dilation_w; /* >= 1 (0 reads as 1): tap ky reads row oy*sh - pt + ky*dh */
    int groups;                 /* >= 1 (0 reads as 1); divides c and f */
    /* Transposed convolution only (conv2d requires 0): extra rows / columns at the bottom /
     * right of the transposed output; >= 0 and smaller than the stride or the dilation of its
     * axis (PyTorch's rule). */
    int output_padding_h, output_padding_w;
} sx_conv2d_params;

/* Stride 1, VALID, no dilation, one group, no output padding. */
sx_conv2d_params sx_conv2d_params_default(void);

/* The shape of y. Errors (who names the caller in the message; NULL: "sx_conv2d_shape"):
 * SX_E_ARG: NULL p or out_shape; stride < 1; dilation or groups < 0; an unknown padding; a
 * negative pad_* with EXPLICIT; a nonzero output_padding. SX_E_RANK: x or k not of rank 4.
 * SX_E_SHAPE: groups not dividing c or f; k's channels (its axis 2) not c / groups; an empty
 * window (kh or kw = 0); the dilated window larger than the padded input (VALID, EXPLICIT).
 * SX_E_UNSUPPORTED: a dimension above INT_MAX. The kernels below report the same errors. */
SX_NODISCARD sx_status sx_conv2d_shape(const char *who, const sx_tensor *x, const sx_tensor *k,
                                       const sx_conv2d_params *p, int64_t out_shape[4]);
/* Scratch bytes the three conv kernels use for their fastest plan, and the least they accept
 * (0 for invalid shapes or parameters). Which implementation runs:
 * - Dense (groups 1), undilated, and a padding whose geometry (oh, ow, pt, pl) is that of VALID
 *   or SAME_UPPER (any such EXPLICIT or SAME_LOWER too), or EXPLICIT pads each smaller than the
 *   kernel along its axis (PyTorch's padding=p, any stride): the dense kernels, as follows. The
 *   workspace holds one cache-sized unit of work per processor (at most 16) - an im2col block
 *   of whole images or of a band of rows, or a zero-padded band of the image for the direct
 *   and Winograd (AVX2 and AVX-512) kernels - plus, for backward-kernel, up to 8 partial sums of dk
 * (at most 4 MB, or two), and for Winograd's F(2x2, 5x5) and F(4x4, 3x3) (5x5 and 3x3 kernels at
 *   stride 1 with enough channels, when the transformed kernel, 36 * c * f elements, stays
 *   in half the last-level cache: a quarter for backward-kernel's partial sums; else the
 *   direct kernels, which then win) that transformed kernel. A smaller
 *   workspace runs smaller units, fewer at once, fewer partial sums, or the direct kernels
 *   instead of Winograd. A 1x1 kernel at stride 1 without padding (or a window covering the
 *   whole unpadded image) is one GEMM over x and needs no workspace.
 * - Depthwise (groups = c, any multiplier f / c, stride, dilation and padding): its own
 *   kernels, vectorised over the channels (NHWC keeps them contiguous; at the AVX512 level,
 *   direct kernels over zero-padded rows kept on the stack); no workspace.
 * - Grouped with at most 16 channels and 16 filters per group, not both above 12, at the
 *   AVX512 level: the same direct kernels, a vector lane per filter (per channel for
 *   backward-input) and each group's channels spread over the lanes; no workspace is used
 *   (the sizes below are reported all the same, for the other levels).
 * - Grouped 1x1 kernels at stride 1 without padding: one GEMM per group on x itself; no
 *   workspace.
 * - Everything else (dilated, grouped, other paddings): per group, the im2col block of a band
 *   of output rows (one row of ow * kh * kw * c/groups elements at least, about 768 KB at
 *   most) and a GEMM.
 * The sizes are valid for both dtypes and all three kernels (the workspace may be unaligned).
 * Results never depend on the thread count; they may round differently for different
 * workspace sizes (Winograd rounds up to a few times more than the direct sums, relative to
 * the largest terms of a tile; backward-kernel's sums are cut where its bands end) and
 * between CPUs (direct, Winograd or GEMM). */
size_t sx_conv2d_workspace(const int64_t x_shape[4], const int64_t k_shape[4],
                           const sx_conv2d_params *p);
size_t sx_conv2d_workspace_min(const int64_t x_shape[4], const int64_t k_shape[4],
                               const sx_conv2d_params *p);
/* y = conv2d(x, k). ws/ws_bytes: scratch memory. Errors: those of sx_conv2d_shape; SX_E_DTYPE
 * (inputs or output of another dtype); SX_E_SHAPE (y not of the shape above); SX_E_ARG (a NULL
 * tensor, a workspace below the minimum or NULL, y or the workspace overlapping an input or
 * each other); y is unchanged on error. */
SX_NODISCARD sx_status sx_tensor_conv2d_out(const sx_tensor *x, const sx_tensor *k,
                                            const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                            sx_tensor *y);
/* dx = dL/dx given dy = dL/dy (n,oh,ow,f) and the kernel; dx's shape is x's (it determines the
 * geometry). Errors as above, and SX_E_SHAPE for dy not of conv2d's output shape. */
SX_NODISCARD sx_status sx_tensor_conv2d_backward_input_out(const sx_tensor *k, const sx_tensor *dy,
                                                           const sx_conv2d_params *p, void *ws,
                                                           size_t ws_bytes, sx_tensor *dx);
/* dk = dL/dk given x and dy; dk's shape is k's. Errors as for backward-input. */
SX_NODISCARD sx_status sx_tensor_conv2d_backward_kernel_out(const sx_tensor *x, const sx_tensor *dy,
                                                            const sx_conv2d_params *p, void *ws,
                                                            size_t ws_bytes, sx_tensor *dk);
/* Allocating form of the forward pass (allocates its own workspace). */
SX_NODISCARD sx_status sx_tensor_conv2d(const sx_tensor *x, const sx_tensor *k,
                                        const sx_conv2d_params *p, sx_tensor **y);

/* 2-d transposed convolution ("deconvolution"; PyTorch's ConvTranspose2d, ONNX ConvTranspose)
 * of x (n,h,w,c_in) with a kernel k (kh,kw,c_out/groups,c_in) giving y (n,oh,ow,c_out): the
 * adjoint of conv2d. It is conv2d's backward-input for a conv2d from y to x with the same
 * kernel and parameters: each x pixel scatters x[b,iy,ix,:] @ k[ky,kx]^T into y at row
 * iy*sh - pt + ky*dh (and likewise for the columns), dropping what falls into the padding.
 * Kernel layout: PyTorch's and ONNX's weight (c_in, c_out/groups, kh, kw) permuted by
 * (2, 3, 1, 0), i.e. k[ky,kx,co,ci] = W[ci,co,ky,kx]; input channel ci belongs to group
 * ci / (c_in/groups), whose outputs are the channels g*(c_out/groups) + co.
 * Sizes (PyTorch / ONNX), K = dh*(kh-1) + 1, op = output_padding_h:
 *   VALID, EXPLICIT: oh = (h-1)*sh - pad_top - pad_bottom + K + op (VALID: pads 0);
 *   SAME_UPPER / SAME_LOWER (ONNX auto_pad): oh = h*sh, total padding
 *               P = (h-1)*sh + K + op - oh (P < 0 is SX_E_SHAPE; use EXPLICIT), pad_top = P/2
 *               (SAME_UPPER) or P - P/2 (SAME_LOWER).
 * oh < 1 is SX_E_SHAPE. Errors: as sx_conv2d_shape (SX_E_SHAPE: groups not dividing c_in, k's
 * axis 3 not c_in; c_out is k's axis 2 times groups), but output_padding may be nonzero:
 * negative, or not below the stride nor the dilation, is SX_E_ARG. */
SX_NODISCARD sx_status sx_conv_transpose2d_shape(const char *who, const sx_tensor *x,
                                                 const sx_tensor *k, const sx_conv2d_params *p,
                                                 int64_t out_shape[4]);
/* Scratch for the three transposed kernels (x (n,h,w,c_in), k as above): that of the conv2d
 * whose backward-input the forward pass is (the dense kernels when that conv2d is dense,
 * undilated and padded as VALID or SAME_UPPER would; else as listed for conv2d). */
size_t sx_conv_transpose2d_workspace(const int64_t x_shape[4], const int64_t k_shape[4],
                                     const sx_conv2d_params *p);
size_t sx_conv_transpose2d_workspace_min(const int64_t x_shape[4], const int64_t k_shape[4],
                                         const sx_conv2d_params *p);
/* y = conv_transpose2d(x, k); errors as for sx_tensor_conv2d_out. */
SX_NODISCARD sx_status sx_tensor_conv_transpose2d_out(const sx_tensor *x, const sx_tensor *k,
                                                      const sx_conv2d_params *p, void *ws,
                                                      size_t ws_bytes, sx_tensor *y);
/* dx = dL/dx (x's shape, which fixes the geometry) given dy (n,oh,ow,c_out): conv2d of dy. */
SX_NODISCARD sx_status sx_tensor_conv_transpose2d_backward_input_out(const sx_tensor *k,
                                                                     const sx_tensor *dy,
                                                                     const sx_conv2d_params *p,
                                                                     void *ws, size_t ws_bytes,
                                                                     sx_tensor *dx);
/* dk = dL/dk (k's shape) given x and dy. */
SX_NODISCARD sx_status sx_tensor_conv_transpose2d_backward_kernel_out(const sx_tensor *x,
                                                                      const sx_tensor *dy,
                                                                      const sx_conv2d_params *p,
                                                                      void *ws, size_t ws_bytes,
                                                                      sx_tensor *dk);

/* 2-d pooling over NHWC (n,h,w,c) -> (n,oh,ow,c), with ONNX's MaxPool/AveragePool semantics
 * (which PyTorch's MaxPool2d/AvgPool2d share). Per axis, with the dilated kernel
 * ke = (k - 1) * dilation + 1 and the pads before/after pb/pa:
 * - VALID: pb = pa = 0. EXPLICIT: pad_top/bottom/left/right, each >= 0 and < ke (SX_E_ARG
 *   otherwise, and when a pad is set in any other mode). Then oh = floor((h + pb + pa - ke) / s)
 *   + 1, or with ceil_mode ceil(...) + 1 less one if the last window would start at or after
 *   h + pb (every window starts inside the input or the leading pad); h + pb + pa < ke is
 *   SX_E_SHAPE (an empty axis with EXPLICIT gives an empty output, with VALID SX_E_SHAPE).
 * - SAME_UPPER (SAME) / SAME_LOWER: oh = ceil(h / s), total pad max(0, (oh - 1) * s + ke - h)
 *   split evenly, the odd cell after (UPPER, TensorFlow's and ONNX's default) or before (LOWER);
 *   ceil_mode has no effect.
 * Window (i, j) covers input rows i * s - pb + r * dilation, r = 0..k-1 (and columns likewise).
 * Max pooling takes the maximum over the window's real cells, padding never takes part; NaN
 * propagates (and then receives the gradient); a window whose dilated cells all fall in padding
 * (possible only with dilation) gives -inf and no gradient. Average pooling requires dilation 1
 * (SX_E_ARG otherwise) and divides the sum of the real cells by their number, or, with
 * count_include_pad, by the number of cells of the window inside the padded input
 * [-pb, h + pa) (as PyTorch and ONNX: cells past the trailing pad that ceil_mode adds are never
 * counted). Outputs overlapping an input are SX_E_ARG (here, for the softmax family and for
 * conv2d).
 * Designated initialisers that leave the newer fields out keep their meaning: zero pads,
 * dilation 0 read as 1, ceil_mode and count_include_pad off. A negative dilation or a flag other
 * than 0 or 1 is SX_E_ARG. */
typedef struct sx_pool2d_params {
    int kernel_h, kernel_w; /* >= 1 */
    int stride_h, stride_w; /* >= 1 */
    sx_padding padding;
    int pad_top, pad_bottom, pad_left, pad_right; /* SX_PAD_EXPLICIT only */
    int dilation_h, dilation_w;                   /* >= 1 (0 means 1); max pooling only */
    /* Flags, 0 or 1 (ints, not bools, so that the struct has no padding bytes: the graph
     * compares attributes bytewise). */
    int ceil_mode;         /* VALID and EXPLICIT: see above */
    int count_include_pad; /* average pooling: see above */
} sx_pool2d_params;

/* kernel kh x kw, stride = kernel, VALID, no pads, dilation 1, the rest off. */
sx_pool2d_params sx_pool2d_params_default(int kh, int kw);

SX_NODISCARD sx_status sx_pool2d_shape(const char *who, const sx_tensor *x,
                                       const sx_pool2d_params *p, int64_t out_shape[4]);
SX_NODISCARD sx_status sx_tensor_maxpool2d_out(const sx_tensor *x, const sx_pool2d_params *p,
                                               sx_tensor *y);
/* dx (x's shape) = the gradient routed to the first maximum of each window (accumulated where
 * windows overlap). dx may be x itself (in place) when windows do not overlap (stride >= kernel
 * on both axes, dilation 1); any other overlap of dx with x or dy is SX_E_ARG. */
SX_NODISCARD sx_status sx_tensor_maxpool2d_backward_out(const sx_tensor *x, const sx_tensor *dy,
                                                        const sx_pool2d_params *p, sx_tensor *dx);
SX_NODISCARD sx_status sx_tensor_avgpool2d_out(const sx_tensor *x, const sx_pool2d_params *p,
                                               sx_tensor *y);
SX_NODISCARD sx_status sx_tensor_avgpool2d_backward_out(const sx_tensor *dy,
                                                        const sx_pool2d_params *p, sx_tensor *dx);
/* Adaptive average pooling (PyTorch's AdaptiveAvgPool2d): x (n,h,w,c) -> y (n,oh,ow,c) for any
 * oh, ow >= 1, given by y's shape (its n and c are x's). Output (i, j) is the mean of rows
 * [floor(i * h / oh), ceil((i + 1) * h / oh)) and columns [floor(j * w / ow),
 * ceil((j + 1) * w / ow)): windows of varying size that may overlap. h, w, oh, ow >= 1
 * (SX_E_SHAPE otherwise; n or c may be 0). */
SX_NODISCARD sx_status sx_tensor_adaptive_avgpool2d_out(const sx_tensor *x, sx_tensor *y);
/* dx (n,h,w,c) = each window's dy divided by its cell count, added to each of its cells (dx is
 * overwritten; shapes as above, dx's h, w and dy's oh, ow define the windows). */
SX_NODISCARD sx_status sx_tensor_adaptive_avgpool2d_backward_out(const sx_tensor *dy,
                                                                 sx_tensor *dx);

/* ---------------------------------------------------------------- softmax, losses, dropout */

/* Numerically stable softmax and log-softmax along `axis`. */
SX_NODISCARD sx_status sx_tensor_softmax_out(const sx_tensor *x, int axis, sx_tensor *out);
SX_NODISCARD sx_status sx_tensor_log_softmax_out(const sx_tensor *x, int axis, sx_tensor *out);
/* Backward passes from the forward result y: softmax dx = y * (dy - sum(dy * y));
 * log-softmax dx = dy - exp(y) * sum(dy) (sums along axis). */
SX_NODISCARD sx_status sx_tensor_softmax_backward_out(const sx_tensor *y, const sx_tensor *dy,
                                                      int axis, sx_tensor *dx);
SX_NODISCARD sx_status sx_tensor_log_softmax_backward_out(const sx_tensor *y, const sx_tensor *dy,
                                                          int axis, sx_tensor *dx);
/* Cross-entropy with softmax folded in, per row: logits and target (n,k) (target rows are
 * probabilities, e.g. one-hot) -> out (n): -sum_j target[i,j] * log_softmax(logits)[i,j].
 * Backward: dlogits = dout[i] * (softmax(logits) * sum_j target[i,j] - target), the exact
 * gradient, which is dout[i] * (softmax(logits) - target) for probability rows. */
SX_NODISCARD sx_status sx_tensor_softmax_xent_out(const sx_tensor *logits, const sx_tensor *target,
                                                  sx_tensor *out);
SX_NODISCARD sx_status sx_tensor_softmax_xent_backward_out(const sx_tensor *logits,
                                                           const sx_tensor *target,
                                                           const sx_tensor *dout,
                                                           sx_tensor *dlogits);
/* Cross-entropy against class indices (PyTorch's cross_entropy with integer targets,
 * ignore_index and label_smoothing), softmax folded in: logits (n,k), k >= 1, and idx (n) of
 * logits' dtype holding a class in 0..k-1 or `ignore` per row -> out (n):
 * out[i] = logsumexp(logits[i]) - (1 - e) logits[i,idx[i]] - e/k sum_j logits[i,j], 0 for an
 * ignored row; 0 <= smoothing e < 1. Backward: dlogits[i,j] = dout[i] * (softmax(logits)[i,j] -
 * e/k - (1 - e) [j == idx[i]]), zero rows where ignored. No one-hot target is made; each row is
 * read from memory once. Errors: SX_E_RANK, SX_E_SHAPE, SX_E_DTYPE, SX_E_RANGE (an index that
 * is not a class nor `ignore`, named with its position), SX_E_ARG (smoothing). */
SX_NODISCARD sx_status sx_tensor_sparse_xent_out(const sx_tensor *logits, const sx_tensor *idx,
                                                 int64_t ignore, double smoothing, sx_tensor *out);
SX_NODISCARD sx_status sx_tensor_sparse_xent_backward_out(const sx_tensor *logits,
                                                          const sx_tensor *idx,
                                                          const sx_tensor *dout, int64_t ignore,
                                                          double smoothing, sx_tensor *dlogits);
/* Fused scaled-dot-product attention (tensor/attention/attention.c), FlashAttention's tiling
 * with an online softmax: q (bh, tq, dh), k and v (bh, tk, dh) of one dtype (f32 or f64; bh
 * folds batch and heads), dh >= 1, tk >= 1 -> out (bh, tq, dh + 1), per query row t the output
 * o_t = sum_j softmax_j(scale q_t . k_j + m_tj) v_j in columns 0..dh-1 and the softmax's
 * log-sum-exp lse_t = log sum_j exp(scale q_t . k_j + m_tj) in column dh (what the backward pass
 * needs). m_tj = -inf where causal hides key j from query t (j > t + tk - tq, the diagonal at the
 * last query: tk >= tq required), else 0; the mask is computed from the indices, and the (tq, tk)
 * scores are never stored (blocks of 64 queries x 64 keys in scratch). Backward: from y = the
 * forward output and dy its adjoint (both (bh, tq, dh + 1): dO and dlse), out (bh, tq + 2 tk, dh)
 * holds per head dq (rows 0..tq-1), dk (the next tk) and dv (the last tk), the scores recomputed
 * per block. Results do not depend on the thread count (forward tasks: a head's query block;
 * backward: a head). Errors: SX_E_ARG (NULL, a non-finite scale, a short workspace), SX_E_DTYPE,
 * SX_E_RANK, SX_E_SHAPE (shapes that do not agree, dh or tk of 0, causal with tk < tq), and
 * outputs sharing memory with an input (SX_E_ARG). The forms with a caller's workspace, which
 * a compiled graph runs, are in sx_tensor_kernels.h. */
SX_NODISCARD sx_status sx_tensor_attention_out(const sx_tensor *q, const sx_tensor *k,
                                               const sx_tensor *v, double scale, bool causal,
                                               sx_tensor *out);
SX_NODISCARD sx_status sx_tensor_attention_backward_out(const sx_tensor *q, const sx_tensor *k,
                                                        const sx_tensor *v, const sx_tensor *y,
                                                        const sx_tensor *dy, double scale,
                                                        bool causal, sx_tensor *out);
/* Normalisation (tensor/norm/): batch norm, LayerNorm, GroupNorm and InstanceNorm in one
 * kernel family. x of rank r is viewed as (n, s, c): n the product of its first `lead` axes, c of
 * its last `tail` axes, s of those between; its c channels form `groups` groups of k = c / groups
 * adjacent channels, and each of the p = n * groups (batch row, group) pairs is normalised
 * over its s k elements. Batch norm of x (..., c): lead 0, tail 1, groups c (statistics per
 * channel over every leading element); LayerNorm over the last d axes: lead r - d, tail d,
 * groups 1 (PyTorch's normalized_shape); GroupNorm of NHWC x: lead 1, tail 1, groups G;
 * InstanceNorm: lead 1, tail 1, groups c.
 * Batch norm's geometry runs on the batch-norm kernels (tensor/norm/batch_norm.c): one pass per
 * reduction, accumulated in double in chunks of rows fixed by the shape alone, statistics from
 * sums of x - x[0,j] (the first row as shift), normalising as y = x a + b in the dtype with
 * a = gamma / sqrt(var + eps) and b = beta - mean a (in double, rounded to the dtype); they
 * allocate scratch of a few doubles per channel and chunk (SX_E_NOMEM). Every other geometry
 * (and batch norm without gamma and beta) runs on the group kernels (tensor/norm/norm.c): each
 * group summed by one thread in memory order, in double, the variance about the mean in a second
 * pass, the normalised value computed in double and rounded once. Either way results never
 * depend on the thread count. Errors: SX_E_ARG (NULL tensor or data; groups < 1 or not dividing
 * c; an output overlapping an input, see each; eps), SX_E_AXIS (lead < 0, tail < 1 or
 * lead + tail > r), SX_E_DTYPE (dtypes differ), SX_E_SHAPE (stats/sums not (2,p), dy not x's
 * shape, gamma/beta not x's last `tail` axes), SX_E_NOMEM (batch norm's scratch). */
typedef struct sx_norm_axes {
    int lead, tail; /* leading axes kept (the batch), trailing axes forming the channels */
    int64_t groups; /* groups of channels, >= 1, dividing c */
} sx_norm_axes;
/* stats (2,p): row 0 the mean and row 1 the biased variance (clamped at 0) of each group, p = n
 * groups in order (n, group); stats apart from x. */
SX_NODISCARD sx_status sx_tensor_norm_stats_out(const sx_tensor *x, sx_norm_axes ax,
                                                sx_tensor *stats);
/* y = (x - mean) / sqrt(var + eps) per group, then * gamma + beta per channel when gamma and beta
 * are given (both, of the shape of x's last `tail` axes; both NULL: no affine). y has x's shape; it
 * may be x itself (in place), else apart from x; apart from stats, gamma and beta. eps finite and
 * >= 0. */
SX_NODISCARD sx_status sx_tensor_norm_out(const sx_tensor *x, const sx_tensor *stats,
                                          const sx_tensor *gamma, const sx_tensor *beta,
                                          sx_norm_axes ax, double eps, sx_tensor *y);
/* The backward pass's two per-group reductions in one pass: sums (2,p), row 0 sum(dy) and row 1
 * sum(dy (x - mean)) over each group, mean row 0 of stats; dy of x's shape; sums apart from
 * every input. */
SX_NODISCARD sx_status sx_tensor_norm_sums_out(const sx_tensor *x, const sx_tensor *stats,
                                               const sx_tensor *dy, sx_norm_axes ax,
                                               sx_tensor *sums);
/* Inverted-dropout mask: out[i] = 0 with probability p, else 1/(1-p); 0 <= p < 1. The mask
 * depends only on rng's state, p and out's size (never on the thread count or the CPU); the
 * call advances rng by exactly one draw. (That draw keys a counter-based generator: element i
 * drops when the top 53 bits of SplitMix64's (i+1)-th output from the key, as a uniform in
 * [0, 1), are below p.) */
SX_NODISCARD sx_status sx_tensor_dropout_mask(sx_tensor *out, sx_rng *rng, double p);
/* Elements [first, first + out's size) of the mask sx_tensor_dropout_mask draws from the same
 * state into a larger tensor (in data-parallel training, a rank's rows of the global batch's
 * mask); first = 0 is sx_tensor_dropout_mask. Advances rng by one draw. Errors as it, and
 * SX_E_ARG for first < 0. */
SX_NODISCARD sx_status sx_tensor_dropout_mask_at(sx_tensor *out, sx_rng *rng, double p,
                                                 int64_t first);

/* ---------------------------------------------------------------- fused kernels */

/* A short element-wise program run as one loop over blocks of elements, with no temporaries
 * in memory (element-wise chain fusion). Instruction k computes register k from its sources:
 * a source s >= 0 is operand s, s < 0 is register -1-s (an earlier instruction). The result
 * is the last register. Operands have the output's size, or m elements with m dividing it:
 * element i then reads operand element i % m (one element: a scalar; the size of the output's
 * trailing axes: NumPy broadcasting over the leading ones, e.g. a bias over the channels).
 * Every field of every instruction is checked before anything runs: a known kind; op a map op
 * (map), a binary op (binary) or 0 (fma, where); each source the kind reads (map: a; binary:
 * a, b; fma and where: a, b, c) an operand < n_in or an earlier register; each source it does
 * not read 0. Errors (out untouched): SX_E_ARG (a bad field, named with its instruction;
 * n_in outside 1..SX_FUSED_MAX_OPERANDS; NULL), SX_E_DTYPE, SX_E_SHAPE (an operand whose size
 * does not divide the output's). */
#define SX_FUSED_MAX 32          /* instructions of a program */
#define SX_FUSED_MAX_OPERANDS 64 /* operands of a program */
/* SX_FUSED_STORE (sx_tensor_fused_update only): writes source a (an earlier register) into
 * operand b, element for element, in place; it makes no register (reading it is an error). */
typedef enum {
    SX_FUSED_MAP,
    SX_FUSED_BINARY,
    SX_FUSED_FMA,
    SX_FUSED_WHERE,
    SX_FUSED_STORE
} sx_fused_kind;
typedef struct sx_fused_instr {
    uint8_t kind;    /* sx_fused_kind */
    uint8_t op;      /* sx_map_op or sx_binary_op; 0 for the other kinds */
    int16_t a, b, c; /* sources (b, c unused by maps, c by binaries: then 0); store: a the
                        register, b the operand written, c 0 */
    double alpha;    /* map parameter */
} sx_fused_instr;
typedef struct sx_fused_prog {
    int n; /* 1..SX_FUSED_MAX instructions */
    sx_fused_instr ins[SX_FUSED_MAX];
} sx_fused_prog;
/* ---------------------------------------------------------------- linear algebra (LAPACKE) */

/* Square matrices are rank 2 (n,n). These call LAPACKE, which allocates its own scratch memory
 * (outside the hook); strix's own copies go through the hook. A singular matrix gives
 * SX_E_SINGULAR, a non-positive-definite one (cholesky) SX_E_NOT_PD; inputs holding NaN or Inf
 * (in the part that is read) give SX_E_RANGE. Outputs may alias inputs (inputs are copied
 * first). */
SX_NODISCARD sx_status sx_tensor_inv_out(const sx_tensor *a, sx_tensor *out);
/* x = solve(a, b): a (n,n), b (n,) or (n,m); out has b's shape. */
SX_NODISCARD sx_status sx_tensor_solve_out(const sx_tensor *a, const sx_tensor *b, sx_tensor *out);
/* det (rank 0); logdet = log|det| (rank 0), with the sign of det in *sign when not NULL
 * (0 and -inf for a singular matrix: not an error). */
SX_NODISCARD sx_status sx_tensor_det_out(const sx_tensor *a, sx_tensor *out);
SX_NODISCARD sx_status sx_tensor_logdet_out(const sx_tensor *a, sx_tensor *out, double *sign);
/* Lower-triangular l with l @ l^T = a (a symmetric positive definite; its upper triangle is
 * not read). */
SX_NODISCARD sx_status sx_tensor_cholesky_out(const sx_tensor *a, sx_tensor *l);
/* Reduced QR of a (m,n): q (m,k), r (k,n), k = min(m,n); r upper triangular. */
SX_NODISCARD sx_status sx_tensor_qr_out(const sx_tensor *a, sx_tensor *q, sx_tensor *r);
/* Thin SVD of a (m,n): u (m,k), s (k) descending, vt (k,n), k = min(m,n). u and vt may be
 * NULL when only the singular values are wanted. */
SX_NODISCARD sx_status sx_tensor_svd_out(const sx_tensor *a, sx_tensor *u, sx_tensor *s,
                                         sx_tensor *vt);
/* Symmetric eigen-decomposition (lower triangle read): w (n) ascending, v (n,n) with the
 * eigenvectors in columns (a = v diag(w) v^T); v may be NULL. */
SX_NODISCARD sx_status sx_tensor_eigh_out(const sx_tensor *a, sx_tensor *w, sx_tensor *v);

#ifdef __cplusplus
}
#endif

#endif /* SX_TENSOR_H */
