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
