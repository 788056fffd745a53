/* ops/fold.c: the reductions (sum, mean, prod, max/min, arg-max/min, norms, logsumexp): one
 * shape rule, evaluator and cost for all, dispatching on the op table's kernel column
 * (sx_fold_op), over an axes mask with keepdims. */
#include "cgraph_impl.h"

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)
#define KERNEL (sx_cg_ops[n->op].kernel)

/* ---------------------------------------------------------------- constructors */

#define FOLD(NAME, name)                                                                           \
    sx_cg_node *sx_cg_##name(sx_cg_graph *g, sx_cg_node *x, unsigned axes, bool keepdims)          \
    {                                                                                              \
        sx_cg_attr a = sx_cg_attr_default();                                                       \
        a.axes = axes;                                                                             \
        a.keepdims = keepdims;                                                                     \
        return cg_op1(g, SX_OP_##NAME, x, &a);                                                     \
    }
FOLD(SUM, sum)
FOLD(MEAN, mean)
FOLD(PROD, prod)
FOLD(REDUCE_MAX, reduce_max)
FOLD(REDUCE_MIN, reduce_min)
FOLD(ARGMAX, argmax)
FOLD(ARGMIN, argmin)
FOLD(L1NORM, l1norm)
FOLD(L2NORM, l2norm)
FOLD(LOGSUMEXP, logsumexp)
#undef FOLD

/* ---------------------------------------------------------------- shape rules */

sx_status cg_shape_fold(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    int r;
    int64_t s[SX_MAX_RANK];
    SX_TRY(sx_fold_shape(cg_who(n), IN_VALUE(0)->rank, IN_VALUE(0)->shape, n->attr.axes,
                         n->attr.keepdims, &r, s));
    cg_set_shape(n, r, s);
    return SX_OK;
}

/* ---------------------------------------------------------------- evaluators */

sx_status cg_eval_fold(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_fold_out((sx_fold_op)KERNEL, IN_VALUE(0), n->attr.axes, n->attr.keepdims, OUT);
}

/* ---------------------------------------------------------------- flop model */

/* one operation per input element */
cg_cost cg_eval_fold_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, 1);
}
