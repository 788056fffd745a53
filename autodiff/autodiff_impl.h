/* autodiff_impl.h: the gradient rules' interface (never installed). One rule per row of
 * cgraph/sx_ops.def, named grad_<op name>, collected into a table in rules.c. */
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

#define X(NAME, name, arity, shape, eval, flags, kernel)                                           \
    sx_status grad_##name(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,         \
                          sx_cg_node **gin);
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

#endif
