/* cost.c: the flop model's table. Every evaluator of sx_ops.def has its cost function
 * cg_<eval>_cost beside it in the op's family file (ops/), so an element-wise row shares its
 * family's model (cg_eval_map_cost, cg_eval_binary_cost) and a structural op brings its own; a
 * row whose evaluator has no cost function does not build (the table below names it). The model
 * counts floating-point operations of one evaluation (a transcendental or a comparison counts as
 * one); it feeds the WIDE rule of parallel evaluation (par.c) and sx_cg_node_flops. */
#include "cgraph_impl.h"

typedef cg_cost (*cost_fn)(const sx_cg_node *n);

/* leaves and views do no arithmetic */
cg_cost cg_eval_leaf_cost(const sx_cg_node *n)
{
    return cg_cost_none(n);
}

cg_cost cg_eval_view_cost(const sx_cg_node *n)
{
    return cg_cost_none(n);
}

static const cost_fn costs[SX_OP_COUNT] = {
#define X(NAME, name, arity, shape, eval, flags, kernel, nograd) [SX_OP_##NAME] = cg_##eval##_cost,
#include "sx_ops.def"
#undef X
};
_Static_assert(sizeof costs / sizeof costs[0] == SX_OP_COUNT, "one cost per op");

cg_cost cg_node_cost(const sx_cg_node *n)
{
    return costs[n->op](n);
}

double sx_cg_node_flops(const sx_cg_node *n)
{
    return n != NULL && (unsigned)n->op < SX_OP_COUNT ? costs[n->op](n).flops : 0;
}
