/* softmax.c: the gradient rules of the softmax family and the cross-entropies
 * (cgraph/ops/softmax.c).
 * y is the node, x_i = y's inputs, G = gy is the adjoint of y. */
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
