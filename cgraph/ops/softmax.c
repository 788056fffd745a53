/* ops/softmax.c: softmax and log-softmax along an axis, their backward ops, and
 * cross-entropy with softmax folded in (and its backward op). */
#include "cgraph_impl.h"

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

/* ---------------------------------------------------------------- constructors */

static sx_cg_node *axis_op(sx_cg_graph *g, sx_cg_op op, int n_in, sx_cg_node *x, sx_cg_node *y,
                           int axis)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.axis = cg_norm_axis(x, axis);
    return n_in == 1 ? cg_op1(g, op, x, &a) : cg_op2(g, op, x, y, &a);
}

sx_cg_node *sx_cg_softmax(sx_cg_graph *g, sx_cg_node *x, int axis)
{
    return axis_op(g, SX_OP_SOFTMAX, 1, x, NULL, axis);
}

sx_cg_node *sx_cg_log_softmax(sx_cg_graph *g, sx_cg_node *x, int axis)
{
    return axis_op(g, SX_OP_LOG_SOFTMAX, 1, x, NULL, axis);
}

sx_cg_node *sx_cg_softmax_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *dy, int axis)
{
    return axis_op(g, SX_OP_SOFTMAX_BACKWARD, 2, y, dy, axis);
}

sx_cg_node *sx_cg_log_softmax_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *dy, int axis)
{
    return axis_op(g, SX_OP_LOG_SOFTMAX_BACKWARD, 2, y, dy, axis);
}

sx_cg_node *sx_cg_softmax_xent(sx_cg_graph *g, sx_cg_node *logits, sx_cg_node *target)
{
    return cg_op2(g, SX_OP_SOFTMAX_XENT, logits, target, NULL);
}

sx_cg_node *sx_cg_softmax_xent_backward(sx_cg_graph *g, sx_cg_node *logits, sx_cg_node *target,
                                        sx_cg_node *dout)
{
    return cg_op3(g, SX_OP_SOFTMAX_XENT_BACKWARD, logits, target, dout, NULL);
}

static sx_cg_node *sparse_op(sx_cg_graph *g, sx_cg_op op, sx_cg_node *logits, sx_cg_node *idx,
                             sx_cg_node *dout, int64_t ignore, double smoothing)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.sparse_xent.ignore = ignore;
    a.sparse_xent.smoothing = smoothing;
    return dout == NULL ? cg_op2(g, op, logits, idx, &a) : cg_op3(g, op, logits, idx, dout, &a);
}

sx_cg_node *sx_cg_sparse_xent(sx_cg_graph *g, sx_cg_node *logits, sx_cg_node *idx, int64_t ignore,
                              double smoothing)
{
    return sparse_op(g, SX_OP_SPARSE_XENT, logits, idx, NULL, ignore, smoothing);
}

sx_cg_node *sx_cg_sparse_xent_backward(sx_cg_graph *g, sx_cg_node *logits, sx_cg_node *idx,
                                       sx_cg_node *dout, int64_t ignore, double smoothing)
{
    return sparse_op(g, SX_OP_SPARSE_XENT_BACKWARD, logits, idx, dout, ignore, smoothing);
}

/* ---------------------------------------------------------------- shape rules */

/* Same shapes, plus an axis that is normalised to 0..rank-1 (so hashing sees one form). */
sx_status cg_shape_softmax(sx_cg_node *n)
{
    SX_TRY(cg_shape_same(n));
    int axis;
    SX_TRY(sx__axis(cg_who(n), n->attr.axis, IN_VALUE(0)->rank, &axis));
    n->attr.axis = axis;
    return SX_OK;
}

/* softmax_xent_backward(logits (n,k), target (n,k), dout (n)) -> (n,k) */
sx_status cg_shape_xent_backward(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_want_rank(n, 0, 2));
    SX_TRY(cg_want_same_shape(n, 0, 1));
    SX_TRY(cg_want_rank(n, 2, 1));
    if (IN_VALUE(2)->shape[0] != IN_VALUE(0)->shape[0])
        return sx_error(SX_E_SHAPE, "%s: dout has %lld rows, logits %lld", cg_who(n),
                        (long long)IN_VALUE(2)->shape[0], (long long)IN_VALUE(0)->shape[0]);
    cg_set_shape(n, 2, IN_VALUE(0)->shape);
    return SX_OK;
}

sx_status cg_shape_softmax_xent(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_want_rank(n, 0, 2));
    SX_TRY(cg_want_same_shape(n, 0, 1));
    cg_set_shape(n, 1, IN_VALUE(0)->shape);
    return SX_OK;
}

/* sparse_xent(logits (n,k), idx (n)) -> (n); sparse_xent_backward(logits, idx, dout (n)) ->
 * (n,k); k >= 1, 0 <= smoothing < 1 */
sx_status cg_shape_sparse_xent(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_want_rank(n, 0, 2));
    const sx_tensor *l = IN_VALUE(0);
    if (l->shape[1] < 1)
        return sx_error(SX_E_SHAPE, "%s: logits of %lld classes (want >= 1)", cg_who(n),
                        (long long)l->shape[1]);
    for (int i = 1; i < n->n_in; i++) {
        SX_TRY(cg_want_rank(n, i, 1));
        if (IN_VALUE(i)->shape[0] != l->shape[0])
            return sx_error(SX_E_SHAPE, "%s: %s has %lld rows, logits %lld", cg_who(n),
                            i == 1 ? "idx" : "dout", (long long)IN_VALUE(i)->shape[0],
                            (long long)l->shape[0]);
    }
    const double e = n->attr.sparse_xent.smoothing;
    if (!(e >= 0 && e < 1))
        return sx_error(SX_E_ARG, "%s: label smoothing %g (want 0 <= e < 1)", cg_who(n), e);
    cg_set_shape(n, n->n_in == 2 ? 1 : 2, l->shape);
    return SX_OK;
}

/* ---------------------------------------------------------------- evaluators */

sx_status cg_eval_softmax(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_softmax_out(IN_VALUE(0), n->attr.axis, OUT);
}

sx_status cg_eval_log_softmax(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_log_softmax_out(IN_VALUE(0), n->attr.axis, OUT);
}

sx_status cg_eval_softmax_backward(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_softmax_backward_out(IN_VALUE(0), IN_VALUE(1), n->attr.axis, OUT);
}

sx_status cg_eval_log_softmax_backward(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_log_softmax_backward_out(IN_VALUE(0), IN_VALUE(1), n->attr.axis, OUT);
}

sx_status cg_eval_softmax_xent(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_softmax_xent_out(IN_VALUE(0), IN_VALUE(1), OUT);
}

sx_status cg_eval_softmax_xent_backward(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_softmax_xent_backward_out(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2), OUT);
}

sx_status cg_eval_sparse_xent(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_sparse_xent_out(IN_VALUE(0), IN_VALUE(1), n->attr.sparse_xent.ignore,
                                     n->attr.sparse_xent.smoothing, OUT);
}

sx_status cg_eval_sparse_xent_backward(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_sparse_xent_backward_out(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2),
                                              n->attr.sparse_xent.ignore,
                                              n->attr.sparse_xent.smoothing, OUT);
}

/* ---------------------------------------------------------------- flop model */

/* max, exp, sum and a division (or log) per element */
cg_cost cg_eval_softmax_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, 4);
}

cg_cost cg_eval_log_softmax_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, 4);
}

/* a dot product along the axis and a multiply-add per element */
cg_cost cg_eval_softmax_backward_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, 4);
}

cg_cost cg_eval_log_softmax_backward_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, 4);
}

/* a log-softmax and a dot with the target per logit */
cg_cost cg_eval_softmax_xent_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, 6);
}

cg_cost cg_eval_softmax_xent_backward_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, 6);
}

/* a max, an exp and two sums per logit */
cg_cost cg_eval_sparse_xent_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, 4);
}

/* a max, two exps and a multiply-add per logit */
cg_cost cg_eval_sparse_xent_backward_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, 5);
}
