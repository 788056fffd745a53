/* autodiff_impl.h: the gradient rules' interface (never installed). One rule per row of
 * include/strix/sx_ops.def whose nograd column is NG_NONE, NG_INPUT(i) or NG_ALL_BUT(i), named
 * grad_<op name> and written in autodiff/rules/<family>.c beside its family's
 * cgraph/ops/<family>.c; grad.c collects them into a table. */
#ifndef SX_AUTODIFF_IMPL_H
#define SX_AUTODIFF_IMPL_H

#include "sx_autodiff.h"

/* A gradient rule. y is the node, gy its adjoint (y's shape). For every input i with need[i]
 * set, the rule stores in gin[i] the gradient of the output with respect to input i (input i's
 * shape), or NULL when it is zero. Rules build nodes with the public cgraph constructors only,
 * so every gradient is itself differentiable wherever the ops it uses are. A constructor
 * failure shows as a NULL node: the rule returns the graph's status. */
typedef sx_status (*ad_rule)(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                             sx_cg_node **gin);

/* The rule of an op, from its nograd column (sx_ops.def): grad_<name> for an op with a
 * gradient (so a row without its rule does not link), the shared ad_rule_none for NG_ALL (no
 * input has a gradient) and ad_rule_refused for NG_REFUSED (sx_ad_grad fails through it). */
#define AD_RULE(name, nograd) AD_RULE_##nograd(name)
#define AD_RULE_NG_NONE(name) grad_##name
#define AD_RULE_NG_INPUT(i) AD_RULE_NG_NONE
#define AD_RULE_NG_ALL_BUT(i) AD_RULE_NG_NONE
#define AD_RULE_NG_ALL(name) ad_rule_none
#define AD_RULE_NG_REFUSED(name) ad_rule_refused
/* The inputs without a gradient as a bit mask (bit i for input i; bit 31 for 31 and up). */
#define AD_NOGRAD(nograd) AD_NOGRAD_##nograd
#define AD_NOGRAD_NG_NONE 0u
#define AD_NOGRAD_NG_INPUT(i) (1u << (i))
#define AD_NOGRAD_NG_ALL_BUT(i) (~(1u << (i)))
#define AD_NOGRAD_NG_ALL (~0u)
#define AD_NOGRAD_NG_REFUSED (~0u)

#define X(NAME, name, arity, shape, eval, flags, kernel, nograd)                                   \
    sx_status AD_RULE(name, nograd)(sx_cg_graph * g, sx_cg_node * y, sx_cg_node * gy,              \
                                    const bool *need, sx_cg_node **gin);
#include "sx_ops.def"
#undef X

/* Helpers for rules (grad.c). */
/* Sum a gradient of a broadcast result back to the shape of the input x (NumPy rules). Every
 * rule of an op whose inputs may broadcast (binary ops, fma, where, matmul's factors and
 * addend) passes its inputs' gradients through it. */
sx_cg_node *ad_unbroadcast(sx_cg_graph *g, sx_cg_node *grad, const sx_cg_node *x);
/* where(mask, v, 0): v where mask != 0, else an exact 0 (mask and v broadcast). The rules of
 * choices (relu, max/min, reduce_max/min, max pooling) route gradients with it, never as
 * v * mask: an infinite or NaN v must not turn the zeros of a mask into NaN (as in PyTorch). */
sx_cg_node *ad_select(sx_cg_graph *g, sx_cg_node *mask, sx_cg_node *v);
/* A constant of `like`'s dtype and the given shape filled with v. */
sx_cg_node *ad_full(sx_cg_graph *g, const sx_cg_node *like, int rank, const int64_t *shape,
                    double v);
/* The status to return when a rule got a NULL node. */
sx_status ad_status(sx_cg_graph *g);
/* x s, s a scalar of x's dtype. */
sx_cg_node *ad_scale(sx_cg_graph *g, sx_cg_node *x, double s);
/* where(x > 0, G, 0), with one zero constant for the comparison and the choice: the gradient
 * of relu read from x = relu's input or output (an infinite G gives 0 where x <= 0). */
sx_cg_node *ad_positive_part(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *G);
/* G sign(x) as a selection: G where x > 0, -G where x < 0, 0 where x = 0 (also when G is
 * infinite there; PyTorch's G * sgn(x) gives NaN). The gradient of |x| and of l1norm. */
sx_cg_node *ad_signed_part(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *G);

#endif
