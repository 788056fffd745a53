/* cgraph_grad.h: what cgraph lends autodiff's reverse sweep (never installed; autodiff names
 * cgraph a friend in its CMakeLists.txt): the gradient rule and the nograd column of each op of
 * include/strix/sx_ops.def, and two helpers the sweep shares with the rules. The rules
 * themselves close each family's file, cgraph/ops/<family>.c (ops/rule.h says how);
 * cgraph/rules.c makes the table. */
#ifndef SX_CGRAPH_GRAD_H
#define SX_CGRAPH_GRAD_H

#include "sx_cgraph.h"

/* A gradient rule. y is the node, gy its adjoint (y's shape). For every input i with need[i]
 * set, the rule stores in gin[i] the gradient of the output with respect to input i (input i's
 * shape), or NULL when it is zero. Rules build nodes with the public cgraph constructors only,
 * so every gradient is itself differentiable wherever the ops it uses are. A constructor
 * failure shows as a NULL node: the rule returns the graph's status. */
typedef sx_status (*sx__cg_grad_rule_fn)(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                         const bool *need, sx_cg_node **gin);

/* The rule of op (op < SX_OP_COUNT): grad_<name> for an op with a gradient, a rule that does
 * nothing for NG_ALL and one that fails (SX_E_UNSUPPORTED) for NG_REFUSED. */
sx__cg_grad_rule_fn sx__cg_grad_rule(sx_cg_op op);
/* The inputs of op (op < SX_OP_COUNT) without a gradient, its nograd column as a bit mask: bit
 * i for input i, bit 31 for inputs 31 and up. */
unsigned sx__cg_grad_nograd(sx_cg_op op);

/* A constant of `like`'s dtype and the given shape filled with v (NULL, the graph failed, when
 * like is NULL or the tensor cannot be made). */
sx_cg_node *sx__cg_grad_full(sx_cg_graph *g, const sx_cg_node *like, int rank, const int64_t *shape,
                             double v);
/* The status to return when a gradient node came out NULL: the graph's, or SX_E_STATE. */
sx_status sx__cg_grad_status(sx_cg_graph *g);

#endif
