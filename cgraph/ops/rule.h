/* rule.h: what the gradient rules share (never installed). One rule per row of
 * include/strix/sx_ops.def whose nograd column is NG_NONE, NG_INPUT(i) or NG_ALL_BUT(i), named
 * grad_<op name>, closes its family's file cgraph/ops/<family>.c, after the family's ops:
 *
 *   #ifndef CG_GRAD_RULES
 *   ... the ops: constructors, shape rules, evaluators, costs ...
 *   #else
 *   #include "rule.h"
 *   ... the gradient rules ...
 *   #endif
 *
 * cgraph/CMakeLists.txt builds each such file twice: as itself (the ops) and as
 * <family>_rules.c, which defines CG_GRAD_RULES and includes it (the rules, an object file of
 * their own). A rule calls other families' constructors (sum's rule broadcasts, mul's sums back
 * over the broadcast axes), so the rules in their family's object file would make the families
 * call each other in a circle (the cgraph_layers test); apart, they are one layer above every
 * constructor. cgraph/rules.c collects the rules into the table autodiff reads (cgraph_grad.h).
 * This header gives a rules section the rule declarations, the helpers (cgraph/rules.c) and
 * three shorthands for a rule's body. */
#ifndef SX_CGRAPH_RULE_H
#define SX_CGRAPH_RULE_H

#include "cgraph_grad.h"

/* The rule of an op, from its nograd column (sx_ops.def): grad_<name> for an op with a
 * gradient (so a row without its rule does not link), the shared cg_grad_none for NG_ALL (no
 * input has a gradient) and cg_grad_refused for NG_REFUSED (sx_ad_grad fails through it). */
#define CG_GRAD_RULE(name, nograd) CG_GRAD_RULE_##nograd(name)
#define CG_GRAD_RULE_NG_NONE(name) grad_##name
#define CG_GRAD_RULE_NG_INPUT(i) CG_GRAD_RULE_NG_NONE
#define CG_GRAD_RULE_NG_ALL_BUT(i) CG_GRAD_RULE_NG_NONE
#define CG_GRAD_RULE_NG_ALL(name) cg_grad_none
#define CG_GRAD_RULE_NG_REFUSED(name) cg_grad_refused
/* The inputs without a gradient as a bit mask (bit i for input i; bit 31 for 31 and up). */
#define CG_GRAD_NOGRAD(nograd) CG_GRAD_NOGRAD_##nograd
#define CG_GRAD_NOGRAD_NG_NONE 0u
#define CG_GRAD_NOGRAD_NG_INPUT(i) (1u << (i))
#define CG_GRAD_NOGRAD_NG_ALL_BUT(i) (~(1u << (i)))
#define CG_GRAD_NOGRAD_NG_ALL (~0u)
#define CG_GRAD_NOGRAD_NG_REFUSED (~0u)

#define X(NAME, name, arity, shape, eval, flags, kernel, nograd)                                   \
    sx_status CG_GRAD_RULE(name, nograd)(sx_cg_graph * g, sx_cg_node * y, sx_cg_node * gy,         \
                                         const bool *need, sx_cg_node **gin);
#include "sx_ops.def"
#undef X

/* Helpers for rules (cgraph/rules.c; also sx__cg_grad_full and sx__cg_grad_status of
 * cgraph_grad.h, which the reverse sweep shares). */
/* Sum a gradient of a broadcast result back to the shape of the input x (NumPy rules). Every
 * rule of an op whose inputs may broadcast (binary ops, fma, where, matmul's factors and
 * addend) passes its inputs' gradients through it. */
sx_cg_node *cg_grad_unbroadcast(sx_cg_graph *g, sx_cg_node *grad, const sx_cg_node *x);
/* where(mask, v, 0): v where mask != 0, else an exact 0 (mask and v broadcast). The rules of
 * choices (relu, max/min, reduce_max/min, max pooling) route gradients with it, never as
 * v * mask: an infinite or NaN v must not turn the zeros of a mask into NaN (as in PyTorch). */
sx_cg_node *cg_grad_select(sx_cg_graph *g, sx_cg_node *mask, sx_cg_node *v);
/* x s, s a scalar of x's dtype. */
sx_cg_node *cg_grad_scale(sx_cg_graph *g, sx_cg_node *x, double s);
/* where(x > 0, G, 0), with one zero constant for the comparison and the choice: the gradient
 * of relu read from x = relu's input or output (an infinite G gives 0 where x <= 0). */
sx_cg_node *cg_grad_positive_part(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *G);
/* G sign(x) as a selection: G where x > 0, -G where x < 0, 0 where x = 0 (also when G is
 * infinite there; PyTorch's G * sgn(x) gives NaN). The gradient of |x| and of l1norm. */
sx_cg_node *cg_grad_signed_part(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *G);

/* Input i of the node y being differentiated; y's attributes. */
#define IN(i) sx_cg_node_input(y, i)
#define ATTR (sx_cg_node_attr(y))
/* Finish a rule: a NULL among the needed gradients means a constructor failed. */
#define DONE()                                                                                     \
    do {                                                                                           \
        for (int k_ = 0; k_ < sx_cg_node_n_inputs(y); k_++)                                        \
            if (need[k_] && gin[k_] == NULL && sx_cg_graph_status(g) != SX_OK)                     \
                return sx__cg_grad_status(g);                                                      \
        return SX_OK;                                                                              \
    } while (0)

#endif
