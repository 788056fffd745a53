/* ops/dropout.c: inverted-dropout masks drawn from a generator the graph owns (attr.rng_id). */
#include "cgraph_impl.h"

#define OUT (&n->value)

/* ---------------------------------------------------------------- constructors */

sx_cg_node *sx_cg_dropout_mask(sx_cg_graph *g, int rng_id, double p, int rank, const int64_t *shape)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.dropout.p = p;
    a.rng_id = rng_id;
    if (!cg_set_target_shape(g, &a, rank, shape, "sx_cg_dropout_mask"))
        return NULL;
    return sx_cg_op_new(g, SX_OP_DROPOUT_MASK, 0, NULL, &a);
}

/* ---------------------------------------------------------------- shape rules */

/* the mask has attr.shape; p and the generator are checked here */
sx_status cg_shape_dropout_mask(sx_cg_node *n)
{
    if (!(n->attr.dropout.p >= 0 && n->attr.dropout.p < 1))
        return sx_error(SX_E_ARG, "%s: drop probability %g (want 0 <= p < 1)", cg_who(n),
                        n->attr.dropout.p);
    if (n->attr.rng_id < 0 || n->attr.rng_id >= n->graph->n_rngs)
        return sx_error(SX_E_ARG, "%s: no generator %d in this graph", cg_who(n), n->attr.rng_id);
    return cg_attr_shape(n);
}

/* ---------------------------------------------------------------- evaluators */

sx_status cg_eval_dropout_mask(sx_cg_graph *g, sx_cg_node *n)
{
    int64_t rows = OUT->rank > 0 ? OUT->shape[0] : 1;
    int64_t first = rows > 0 ? g->mask_row * (OUT->size / rows) : 0; /* this rank's rows */
    return sx_tensor_dropout_mask_at(OUT, &g->rngs[n->attr.rng_id], n->attr.dropout.p, first);
}

/* ---------------------------------------------------------------- flop model */

cg_cost cg_eval_dropout_mask_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, 1);
}
