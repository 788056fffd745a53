/* ops/fused.c: element-wise programs (attr.prog) made by the optimiser's chain fusion. */
#include "cgraph_impl.h"

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

/* ---------------------------------------------------------------- shape rules */

sx_status cg_shape_fused(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(sx__fused_check(cg_who(n), &n->attr.prog, n->n_in)); /* what the kernel will run */
    SX_TRY(cg_attr_shape(n));
    int64_t size = sx_shape_size(n->attr.rank, n->attr.shape);
    for (int i = 0; i < n->n_in; i++)
        if (IN_VALUE(i)->size != size &&
            !cg_trailing_bcast(IN_VALUE(i), n->attr.rank, n->attr.shape)) {
            char a[128], b[128];
            return sx_error(SX_E_SHAPE,
                            "%s: input %d has shape %s, the result %s (want the same size, or "
                            "the result's trailing axes)",
                            cg_who(n), i,
                            sx_shape_str(IN_VALUE(i)->rank, IN_VALUE(i)->shape, a, sizeof a),
                            sx_shape_str(n->attr.rank, n->attr.shape, b, sizeof b));
        }
    return SX_OK;
}

/* ---------------------------------------------------------------- evaluators */

sx_status cg_eval_fused(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    const sx_tensor *in[SX_CG_MAX_INPUTS];
    if (n->n_in > SX_CG_MAX_INPUTS)
        return sx_error(SX_E_UNSUPPORTED, "%s: more than %d inputs", cg_who(n), SX_CG_MAX_INPUTS);
    for (int i = 0; i < n->n_in; i++)
        in[i] = IN_VALUE(i);
    return sx_tensor_fused_out(&n->attr.prog, n->n_in, in, OUT);
}

/* ---------------------------------------------------------------- flop model */

/* a fused chain: one operation per instruction per element */
cg_cost cg_eval_fused_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, n->attr.prog.n);
}
