/* sx_autodiff.h: reverse-mode automatic differentiation as a graph transformation.
 *
 * Differentiating adds gradient nodes to the same graph, built with the ordinary cgraph
 * constructors: a gradient is again a graph that can be optimised, frozen, evaluated and
 * differentiated again (higher order). In an eager graph the gradient nodes are computed as
 * they are made; in a lazy graph they are symbols like any other node.
 *
 * Only nodes on a path from the differentiated node to the requested nodes get gradient
 * nodes; unused branches cost nothing. A requested node that the output does not depend on gets
 * a zero constant of its shape.
 *
 * Conventions at non-differentiable points (as in PyTorch and TensorFlow unless said):
 *   relu'(0) = 0, leaky_relu'(0) = slope, elu'(0) = alpha... (the left derivative) except
 *   relu; abs'(0) = 0, sign' = floor' = ceil' = round' = 0; max/min of two equal values send
 *   the gradient to the first argument (as TensorFlow; PyTorch's maximum/minimum split it in
 *   halves); reduce_max/reduce_min and max pooling send it to the first maximum in row-major
 *   order (as PyTorch's max over a dimension and max pooling; its amax splits ties evenly);
 *   comparisons, argmax/argmin, one_hot and the index input of gather/scatter_add have no
 *   gradient (zero); sqrt'(0) = +inf as in IEEE arithmetic.
 *
 * Choices select, they do not multiply: relu, max/min, where, reduce_max/reduce_min and max
 * pooling route the incoming gradient G to the chosen elements and give the others an exact 0,
 * even when G is infinite or NaN (d/dx sum(sqrt(relu(x))) at x = (-1, 2, -3) is
 * (0, 0.354, 0), as in PyTorch). Rules with a factor keep IEEE products, as PyTorch does:
 * abs and l1norm multiply G by sign(x), so an infinite G at x = 0 gives NaN there, and so does
 * leaky_relu with slope 0 left of 0.
 *
 * Broadcasting: every op whose inputs broadcast (binary ops, fma, where, the batch axes of
 * matmul and its addend c) sums an input's gradient over the axes it was broadcast along, so
 * grads[i] always has xs[i]'s shape.
 *
 * Linear algebra: cholesky, eigh_w and eigh_v read only the lower triangle, so their gradients
 * are zero above the diagonal. eigh_v needs distinct eigenvalues; svd_s needs distinct non-zero
 * singular values (its gradient uses eigh_v of A^T A or A A^T). inv, det, logdet and solve need
 * an invertible matrix, qr a full-rank one. Eigenvectors and Q follow LAPACK's locally smooth
 * sign choice. The dy-gradient of maxpool2d_backward costs kh*kw times the pooled size.
 *
 * Optimised graphs may be differentiated: the passes keep the function, so the gradients are
 * the unoptimised graph's (up to what the passes promise about rounding) wherever the path
 * holds only ops with gradient rules (the gemm-fold pass's gemm with a broadcasting bias
 * included). A path through an op that only the optimiser makes (fused element-wise chains,
 * fused optimiser updates) is SX_E_UNSUPPORTED, naming the op: differentiate first, then
 * optimise the loss and its gradients together.
 *
 * Errors follow cgraph: status values with a message in sx_last_error(); on failure the
 * out-parameters are NULL, and nodes made before the failure stay in the graph (unused). A rule
 * that gave an input a gradient of the wrong shape would be a bug in strix: SX_E_STATE, naming
 * the op and both shapes, rather than a silently broadcast gradient.
 */
#ifndef SX_AUTODIFF_H
#define SX_AUTODIFF_H

#include "sx_cgraph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Gradients of the scalar (rank-0 or single-element) node y with respect to each of xs[0..n):
 * grads[i] has the shape of xs[i]. Any node may be differentiated against (inputs, parameters,
 * intermediate nodes). */
SX_NODISCARD sx_status sx_ad_grad(sx_cg_graph *g, sx_cg_node *y, int n, sx_cg_node *const *xs,
                                  sx_cg_node **grads);

/* Vector-Jacobian product: the gradient of sum(y * seed) (seed has y's shape), i.e. reverse
 * mode seeded with `seed` instead of 1. */
SX_NODISCARD sx_status sx_ad_vjp(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *seed, int n,
                                 sx_cg_node *const *xs, sx_cg_node **grads);

/* Dense Jacobian of y (any shape, m elements) with respect to x (k elements), as an (m, k)
 * node built from m vector-Jacobian products: for small functions. */
SX_NODISCARD sx_status sx_ad_jacobian(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *x,
                                      sx_cg_node **jac);

/* Hessian-vector product of the scalar y at x along v (v has x's shape): the gradient of
 * <grad(y, x), v>, built from grad of grad. */
SX_NODISCARD sx_status sx_ad_hvp(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *x, sx_cg_node *v,
                                 sx_cg_node **hv);

/* Full Hessian of the scalar y with respect to x (k elements) as a (k, k) node: k Hessian-vector
 * products with the unit vectors. For small inputs. */
SX_NODISCARD sx_status sx_ad_hessian(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *x,
                                     sx_cg_node **hess);

/* Does the op have a gradient rule that produces a non-zero gradient for input i? (false for
 * comparisons, argmax, index inputs, ...). */
bool sx_ad_differentiable(sx_cg_op op, int input);

#ifdef __cplusplus
}
#endif

#endif /* SX_AUTODIFF_H */
