/* sx_tensor_kernels.h: the tensor kernels that strix's own modules call and a user does not:
 * the forms with a caller's workspace and the fused kernels a compiled graph runs (cgraph's ops
 * and rewrites, autodiff, nn), kept out of the public sx_tensor.h. In-tree only (the modules,
 * tests and benchmarks find it by name; never installed). The conventions of sx_tensor.h hold
 * for every function here. */
#ifndef SX_TENSOR_KERNELS_H
#define SX_TENSOR_KERNELS_H

#include "sx_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- attention */

/* sx_tensor_attention_out and sx_tensor_attention_backward_out with scratch of
 * sx_attention_workspace(dtype, q's shape, backward) bytes, aligned for doubles: a slot per
 * thread, up to 16 (a smaller one runs on fewer threads, with the same results; less than one
 * slot is SX_E_ARG), or NULL with 0 to have one allocated (as the _out forms do). Errors as
 * theirs. */
size_t sx_attention_workspace(sx_dtype dtype, const int64_t *q_shape, bool backward);
SX_NODISCARD sx_status sx_tensor_attention_ws(const sx_tensor *q, const sx_tensor *k,
                                              const sx_tensor *v, double scale, bool causal,
                                              sx_tensor *out, void *ws, size_t ws_bytes);
/* sx_tensor_attention_ws over the first n_keys keys of each head only (0..tk; the others, as if
 * masked, are never read): the step of a generator attending to the filled part of its cache,
 * whose cost is then proportional to n_keys. A query that sees no key (n_keys 0) gets o = 0 and
 * lse = -inf. Errors: those of sx_tensor_attention_ws, SX_E_RANGE (n_keys outside 0..tk). */
SX_NODISCARD sx_status sx_tensor_attention_keys_ws(const sx_tensor *q, const sx_tensor *k,
                                                   const sx_tensor *v, int64_t n_keys, double scale,
                                                   bool causal, sx_tensor *out, void *ws,
                                                   size_t ws_bytes);
SX_NODISCARD sx_status sx_tensor_attention_backward_ws(const sx_tensor *q, const sx_tensor *k,
                                                       const sx_tensor *v, const sx_tensor *y,
                                                       const sx_tensor *dy, double scale,
                                                       bool causal, sx_tensor *out, void *ws,
                                                       size_t ws_bytes);

/* ---------------------------------------------------------------- batch normalisation */

/* The batch-norm kernels (tensor/norm/batch_norm.c): the per-channel geometry of the norm family
 * (sx_tensor_norm_*_out of sx_tensor.h, lead 0, tail 1, groups c, dispatch here), with the
 * fused and workspace forms the graph evaluator runs. x (..., c) of rank >= 1 is viewed as
 * (m, c), m the product of the other dims (m = 0 is fine: zero statistics and sums).
 * Reductions accumulate in double in chunks of rows fixed by the shape alone, so results never
 * depend on the thread count. Errors: SX_E_ARG (NULL tensor or data; an output overlapping an
 * input it must not, see each), SX_E_DTYPE (dtypes differ), SX_E_RANK (x of rank 0), SX_E_SHAPE
 * (a per-channel tensor not (c), stats/sums not (2,c), dy not x's shape), SX_E_NOMEM (scratch of
 * a few doubles per channel and chunk).
 * stats (2,c): row 0 the mean, row 1 the biased variance (clamped at 0) of each channel, from
 * sums of x - x[0,j] (the first row as shift); stats apart from x. */
SX_NODISCARD sx_status sx_tensor_batch_norm_stats_out(const sx_tensor *x, sx_tensor *stats);
/* y = (x - mean) / sqrt(var + eps) * gamma + beta, as y = x a + b in the dtype, with
 * a = gamma / sqrt(var + eps) (in double, rounded to the dtype) and b = beta - mean a (the same);
 * mean and var the rows of stats (2,c), gamma and beta (c). y has x's shape; it may be x itself
 * (in place), else apart from x; it may overlap stats, gamma or beta (read before y is
 * written). eps finite and >= 0 (SX_E_ARG). */
SX_NODISCARD sx_status sx_tensor_batch_norm_out(const sx_tensor *x, const sx_tensor *stats,
                                                const sx_tensor *gamma, const sx_tensor *beta,
                                                double eps, sx_tensor *y);
/* The two per-channel reductions of batch norm's backward pass in one pass: sums (2,c), row 0
 * sum(dy), row 1 sum(dy (x - mean)) over the m rows, mean row 0 of stats (2,c); dy of x's shape;
 * sums apart from every input. */
SX_NODISCARD sx_status sx_tensor_batch_norm_sums_out(const sx_tensor *x, const sx_tensor *stats,
                                                     const sx_tensor *dy, sx_tensor *sums);
/* The same three with a caller's workspace (what a compiled graph passes: no allocation): ws of
 * at least sx_batch_norm_workspace(x's rank, x's shape) bytes, aligned for doubles; ws NULL with
 * ws_bytes 0 allocates one (as the _out forms do); a smaller one is SX_E_ARG naming both sizes. */
size_t sx_batch_norm_workspace(int rank, const int64_t *x_shape);
SX_NODISCARD sx_status sx_tensor_batch_norm_stats_ws(const sx_tensor *x, sx_tensor *stats, void *ws,
                                                     size_t ws_bytes);
SX_NODISCARD sx_status sx_tensor_batch_norm_ws(const sx_tensor *x, const sx_tensor *stats,
                                               const sx_tensor *gamma, const sx_tensor *beta,
                                               double eps, sx_tensor *y, void *ws, size_t ws_bytes);
SX_NODISCARD sx_status sx_tensor_batch_norm_sums_ws(const sx_tensor *x, const sx_tensor *stats,
                                                    const sx_tensor *dy, sx_tensor *sums, void *ws,
                                                    size_t ws_bytes);
/* sx_tensor_batch_norm_ws, then relu when `relu` (y = max(x a + b, 0), relu's expression of
 * include/strix/sx_map.def: the bits of the two kernels run one after the other) in the same pass.
 */
SX_NODISCARD sx_status sx_tensor_batch_norm_act_ws(const sx_tensor *x, const sx_tensor *stats,
                                                   const sx_tensor *gamma, const sx_tensor *beta,
                                                   double eps, bool relu, sx_tensor *y, void *ws,
                                                   size_t ws_bytes);
/* sx_tensor_batch_norm_act_ws with a residual added before the activation, in the same pass:
 * y = x a + b rounded to the dtype, then v = y + res (rounded), then relu when `relu`: the bits of
 * the normalise, add and relu kernels run one after the other (a basic residual block's end,
 * relu(batch_norm(x) + res): one pass over memory instead of two). res NULL: no residual
 * (sx_tensor_batch_norm_act_ws). res has x's dtype (SX_E_DTYPE) and shape (SX_E_SHAPE: no
 * broadcast); y may be x or res itself (in place), else apart from both; res may be x. */
SX_NODISCARD sx_status sx_tensor_batch_norm_res_ws(const sx_tensor *x, const sx_tensor *stats,
                                                   const sx_tensor *gamma, const sx_tensor *beta,
                                                   double eps, const sx_tensor *res, bool relu,
                                                   sx_tensor *y, void *ws, size_t ws_bytes);
/* sx_tensor_batch_norm_sums_ws of dy masked by y (NULL: no mask; else of x's shape, apart from
 * sums): dy taken as 0 where y <= 0, as relu's gradient selects (an infinite or NaN dy there adds
 * nothing): the sums of where(y > 0, dy, 0) without that tensor, the same bits. */
SX_NODISCARD sx_status sx_tensor_batch_norm_sums_mask_ws(const sx_tensor *x, const sx_tensor *stats,
                                                         const sx_tensor *dy, const sx_tensor *y,
                                                         sx_tensor *sums, void *ws,
                                                         size_t ws_bytes);
/* The whole input gradient of y = batch_norm(x, stats(x), gamma, beta) in one pass, the
 * statistics' path included: with r = 1 / sqrt(var + eps), (S0; S1) = sums (2,c) of
 * sx_tensor_batch_norm_sums_out over the same dy, dx = dy a + (x - mean) k1 + k0, a = gamma r,
 * k1 = -gamma r^3 S1 / m, k0 = -gamma r S0 / m (the coefficients in double rounded to the dtype,
 * the rest in the dtype). y NULL, or of x's shape: a relu mask, dy taken as 0 where y <= 0
 * (sums must then be of the masked dy too). dx has x's shape; it may be x, dy or y itself, else
 * apart from them. Workspace as the _ws forms above; eps finite and >= 0 (SX_E_ARG). */
SX_NODISCARD sx_status sx_tensor_batch_norm_dx_ws(const sx_tensor *x, const sx_tensor *stats,
                                                  const sx_tensor *gamma, const sx_tensor *dy,
                                                  const sx_tensor *sums, const sx_tensor *y,
                                                  double eps, sx_tensor *dx, void *ws,
                                                  size_t ws_bytes);

/* ---------------------------------------------------------------- pooling */

/* The gradient of maxpool2d(relu(z)) with respect to z, from x = relu(z): the above where
 * x > 0 and +0 elsewhere (a selection, not a product: an infinite or NaN dy gives 0 where
 * x <= 0; the same bits as the two steps), in one pass; dx may be x as above. With it, relu's
 * output dies at the pooling's backward pass and dx takes its memory. */
SX_NODISCARD sx_status sx_tensor_maxpool2d_relu_backward_out(const sx_tensor *x,
                                                             const sx_tensor *dy,
                                                             const sx_pool2d_params *p,
                                                             sx_tensor *dx);

/* ---------------------------------------------------------------- fused element-wise programs */

/* Run the program prog (sx_fused_prog in sx_tensor.h documents it and its checks) over n_in
 * operands into out. */
SX_NODISCARD sx_status sx_tensor_fused_out(const sx_fused_prog *prog, int n_in,
                                           const sx_tensor *const *in, sx_tensor *out);
/* The program over the operands in[0..n_in) with no result tensor: its STORE instructions write
 * registers into operands in place (an optimiser step: p, m and v read and written in one pass
 * over memory). Element i of every operand is read before any store writes element i, and the
 * stores run in program order, so a program reads the old values of what it stores. The same
 * rules as sx_tensor_fused_out, with: the size of the program is that of operand 0; an operand
 * written has that size and overlaps no other operand. Errors (nothing written): those of
 * sx_tensor_fused_out; SX_E_ARG for a store into an operand of another size, a store into an
 * overlapping operand, or a source that names a store. A program in the table of known programs
 * (the optimisers' updates, elementwise/fused_known.c) with its operands of the kinds it was
 * compiled for (each of the program's size, or one element) runs as that program's compiled
 * kernel, else through the interpreter: the same bits (a NaN may differ in sign or payload). */
SX_NODISCARD sx_status sx_tensor_fused_update(const sx_fused_prog *prog, int n_in,
                                              sx_tensor *const *in);

/* y = prog(conv2d(x, k), ops[0], ..., ops[n_ops - 1]): a convolution with an epilogue.
 * The program runs as in sx_tensor_fused_out with the convolution's result as operand 0 and
 * ops[i] as operand i + 1, each operand of y's size or repeated over its leading axes (a bias of
 * f elements), so the result has the same bits as sx_tensor_conv2d_out followed by
 * sx_tensor_fused_out. The dense kernels run it on each unit's rows of y right after the unit
 * writes them (while they are in cache) when every repeated operand's size divides a row of y
 * (ow * f), else over all of y at the end. n_ops 0..SX_FUSED_MAX_OPERANDS - 1 (ops may then be
 * NULL). Errors: those of sx_tensor_conv2d_out and of sx_tensor_fused_out; an operand
 * overlapping y is SX_E_ARG. y is unchanged on error. */
SX_NODISCARD sx_status sx_tensor_conv2d_fused_out(const sx_tensor *x, const sx_tensor *k,
                                                  const sx_conv2d_params *p, void *ws,
                                                  size_t ws_bytes, const sx_fused_prog *prog,
                                                  int n_ops, const sx_tensor *const *ops,
                                                  sx_tensor *y);

#ifdef __cplusplus
}
#endif

#endif /* SX_TENSOR_KERNELS_H */
