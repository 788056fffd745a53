/* ops/softmax.c: softmax and log-softmax along an axis, their backward ops, and
 * cross-entropy with softmax folded in (and its backward op). */
#ifndef CG_GRAD_RULES /* the ops; their gradient rules, at the end, build apart (ops/rule.h) */
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

#else
/* ---------------------------------------------------------------- gradient rules */

/* y is the node, x_i = y's inputs, G = gy is the adjoint of y. */
#include "rule.h"

static sx_cg_node *sum_axis(sx_cg_graph *g, sx_cg_node *x, int axis)
{
    return sx_cg_sum(g, x, SX_AXIS(axis), true);
}

/* softmax: dx = y (G - sum(G y)) */
sx_status grad_softmax(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                       sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_softmax_backward(g, y, gy, ATTR->axis);
    DONE();
}

/* log_softmax: dx = G - exp(y) sum(G) */
sx_status grad_log_softmax(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                           sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_log_softmax_backward(g, y, gy, ATTR->axis);
    DONE();
}

/* out = s (d - <d, s>) with s = softmax output, d = dy; t = <G, s>:
 * d(d) = s (G - t) = softmax_backward(s, G); d(s) = G (d - <d, s>) - t d */
sx_status grad_softmax_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                sx_cg_node **gin)
{
    sx_cg_node *s = IN(0), *d = IN(1);
    int axis = ATTR->axis;
    if (need[0]) {
        sx_cg_node *ds = sum_axis(g, sx_cg_mul(g, d, s), axis);
        sx_cg_node *t = sum_axis(g, sx_cg_mul(g, gy, s), axis);
        gin[0] = sx_cg_sub(g, sx_cg_mul(g, gy, sx_cg_sub(g, d, ds)), sx_cg_mul(g, t, d));
    }
    if (need[1])
        gin[1] = sx_cg_softmax_backward(g, s, gy, axis);
    DONE();
}

/* out = d - exp(l) sum(d) with l = log-softmax output:
 * d(d) = G - sum(G exp(l)); d(l) = -G exp(l) sum(d) */
sx_status grad_log_softmax_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                    sx_cg_node **gin)
{
    sx_cg_node *l = IN(0), *d = IN(1);
    int axis = ATTR->axis;
    sx_cg_node *e = sx_cg_exp(g, l);
    if (need[0])
        gin[0] = sx_cg_neg(g, sx_cg_mul(g, sx_cg_mul(g, gy, e), sum_axis(g, d, axis)));
    if (need[1])
        gin[1] = sx_cg_sub(g, gy, sum_axis(g, sx_cg_mul(g, gy, e), axis));
    DONE();
}

/* Per-row G (n) as an (n,1) column that broadcasts over the classes. */
static sx_cg_node *column(sx_cg_graph *g, sx_cg_node *v)
{
    int64_t s[2] = {sx_cg_node_shape(v)[0], 1};
    return sx_cg_reshape(g, v, 2, s);
}

/* loss_i = -sum_j t_ij log_softmax(l)_ij: dl = G_i (softmax(l) - t), dt = -G_i log_softmax(l) */
sx_status grad_softmax_xent(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                            sx_cg_node **gin)
{
    if (need[0])
        gin[0] = sx_cg_softmax_xent_backward(g, IN(0), IN(1), gy);
    if (need[1])
        gin[1] = sx_cg_neg(g, sx_cg_mul(g, column(g, gy), sx_cg_log_softmax(g, IN(0), 1)));
    DONE();
}

/* out = d_i (s T_i - t), s = softmax(l), T_i = sum_j t_ij (the exact gradient of the loss for
 * targets that need not sum to 1, as the kernel computes it):
 * d(d)_i = sum_j G_ij (s_ij T_i - t_ij); dt_ij = d_i (sum_k G_ik s_ik - G_ij);
 * dl = softmax_backward(s, G d_i T_i) */
sx_status grad_softmax_xent_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                     const bool *need, sx_cg_node **gin)
{
    sx_cg_node *l = IN(0), *t = IN(1), *d = column(g, IN(2));
    sx_cg_node *s = sx_cg_softmax(g, l, 1), *tsum = sum_axis(g, t, 1);
    if (need[0])
        gin[0] = sx_cg_softmax_backward(g, s, sx_cg_mul(g, gy, sx_cg_mul(g, d, tsum)), 1);
    if (need[1])
        gin[1] = sx_cg_mul(g, d, sx_cg_sub(g, sum_axis(g, sx_cg_mul(g, gy, s), 1), gy));
    if (need[2])
        gin[2] = sx_cg_sum(g, sx_cg_mul(g, gy, sx_cg_sub(g, sx_cg_mul(g, s, tsum), t)), SX_AXIS(1),
                           false);
    DONE();
}

/* loss_i = lse_i - (1 - e) l_{i,t_i} - e/k sum_j l_ij: dl = sparse_xent_backward(l, t, G); the
 * indices have no gradient */
sx_status grad_sparse_xent(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                           sx_cg_node **gin)
{
    const sx_cg_attr *a = sx_cg_node_attr(y);
    if (need[0])
        gin[0] = sx_cg_sparse_xent_backward(g, IN(0), IN(1), gy, a->sparse_xent.ignore,
                                            a->sparse_xent.smoothing);
    DONE();
}

/* out_ij = d_i v_i (s_ij - q_ij), s = softmax(l), q the smoothed one-hot row, v_i = [t_i is not
 * ignored]: dl = softmax_backward(s, G d_i v_i); dd_i = sum_j G_ij v_i (s_ij - q_ij), which is
 * this op again with v as dout */
sx_status grad_sparse_xent_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                    sx_cg_node **gin)
{
    const sx_cg_attr *a = sx_cg_node_attr(y);
    sx_cg_node *l = IN(0), *t = IN(1), *d = IN(2);
    sx_cg_node *v = sx_cg_ne(g, t, sx_cg_scalar_like(g, t, (double)a->sparse_xent.ignore));
    if (need[0])
        gin[0] = sx_cg_softmax_backward(g, sx_cg_softmax(g, l, 1),
                                        sx_cg_mul(g, gy, column(g, sx_cg_mul(g, d, v))), 1);
    if (need[2])
        gin[2] = sx_cg_sum(g,
                           sx_cg_mul(g, gy,
                                     sx_cg_sparse_xent_backward(g, l, t, v, a->sparse_xent.ignore,
                                                                a->sparse_xent.smoothing)),
                           SX_AXIS(1), false);
    DONE();
}

#endif
