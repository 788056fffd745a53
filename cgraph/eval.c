/* eval.c: the evaluators' shared part. An evaluator (one per row of sx_ops.def, in the op's
 * family file under ops/) calls the tensor kernel of its op on the input values, writing into
 * the node's storage; the op table (graph.c) dispatches to it. Here: the generic evaluators of
 * leaves (nothing to do) and views (reshape, identity, seq: the input's memory). */
#include "cgraph_impl.h"

sx_status cg_eval_leaf(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    (void)n;
    return SX_OK;
}

/* Views share their input's memory: nothing moves. */
sx_status cg_eval_view(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    n->value.data = n->in[0]->value.data;
    return SX_OK;
}
