/* pool.c: the gradient rules of the pooling ops (cgraph/ops/pool.c): linear pools have their
 * adjoint op as gradient; max pooling routes G to each window's first maximum.
 * y is the node, x_i = y's inputs, G = gy is the adjoint of y. */
#include "rule.h"

#include <math.h>
#include <string.h>

/* maxpool: G routed to the first maximum of each window */
sx_status grad_maxpool2d(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                         sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_maxpool2d_backward(g, IN(0), gy, &ATTR->pool);
    DONE();
}

/* Stack the kh*kw strided views of a padded (n, h', w', c) tensor, one per window offset in
 * row-major order (offset (i, j) starts at row i * dilation_h, column j * dilation_w), along a
 * new last axis: (n, oh, ow, c, kh*kw). Concat joins at most SX_CG_MAX_INPUTS inputs per node,
 * so larger windows are joined in groups. */
static sx_cg_node *window_stack(sx_cg_graph *g, sx_cg_node *xp, const sx_pool2d_params *p,
                                int64_t oh, int64_t ow)
{
    int64_t k = (int64_t)p->kernel_h * p->kernel_w, s5[5];
    int64_t dh = p->dilation_h > 1 ? p->dilation_h : 1, dw = p->dilation_w > 1 ? p->dilation_w : 1;
    memcpy(s5, sx_cg_node_shape(xp), 4 * sizeof *s5);
    s5[1] = oh, s5[2] = ow, s5[4] = 1;
    sx_cg_node **parts = sx_calloc((size_t)k, sizeof *parts);
    if (parts == NULL)
        return NULL;
    for (int64_t i = 0; i < k; i++) {
        int64_t di = i / p->kernel_w * dh, dj = i % p->kernel_w * dw;
        sx_slice sl[4] = {SX_SLICE_ALL,
                          {di, di + (oh - 1) * p->stride_h + 1, p->stride_h},
                          {dj, dj + (ow - 1) * p->stride_w + 1, p->stride_w},
                          SX_SLICE_ALL};
        parts[i] = sx_cg_reshape(g, sx_cg_slice(g, xp, sl), 5, s5);
    }
    int64_t m = k;
    while (m > 1) {
        int64_t out = 0;
        for (int64_t i = 0; i < m; i += SX_CG_MAX_INPUTS) {
            int n = (int)(m - i < SX_CG_MAX_INPUTS ? m - i : SX_CG_MAX_INPUTS);
            parts[out++] = n == 1 ? parts[i] : sx_cg_concat(g, n, parts + i, 4);
        }
        m = out;
    }
    sx_cg_node *r = parts[0];
    sx_free(parts);
    return r;
}

/* The padding before an axis of `size` cells pooled to `out` outputs with kernel k, stride st
 * and dilated kernel ke (sx_pool2d_params' rules; `explicit_pad` is pad_top or pad_left). */
static int64_t pool_pad_before(const sx_pool2d_params *p, int64_t size, int64_t out, int64_t st,
                               int64_t ke, int64_t explicit_pad)
{
    int64_t total = (out - 1) * st + ke - size;
    switch (p->padding) {
    case SX_PAD_VALID:
        return 0;
    case SX_PAD_SAME:
        return total > 0 ? total / 2 : 0;
    case SX_PAD_SAME_LOWER:
        return total > 0 ? total - total / 2 : 0;
    case SX_PAD_EXPLICIT:
        return explicit_pad;
    }
    return 0;
}

/* maxpool_backward(x, dy) = P^T dy, where P (x-dependent, piecewise constant) picks each window's
 * first maximum. The x-gradient is zero (almost everywhere); the dy-gradient is P G: G read at
 * each window's first maximum. Built from ops that have rules: pad x with -inf and G with 0 by
 * the pooling's own padding before each axis and as far after as the last (dilated, possibly
 * ceil_mode) window reaches, stack the kh*kw window offsets along a new axis, take argmax (the
 * first maximum in the window's row-major order, as the kernel), and sum G's stack against
 * one_hot(argmax). A window that holds only padding (dilation allows it) picks a padded cell
 * of G, a 0: no gradient, as the kernel. */
sx_status grad_maxpool2d_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                  sx_cg_node **gin)
{
    if (!need[1])
        return SX_OK;
    const sx_pool2d_params *p = &ATTR->pool;
    sx_cg_node *x = IN(0);
    const int64_t *xs = sx_cg_node_shape(x), *ys = sx_cg_node_shape(IN(1));
    int64_t oh = ys[1], ow = ys[2], before[4] = {0}, after[4] = {0};
    int64_t k[2] = {p->kernel_h, p->kernel_w}, st[2] = {p->stride_h, p->stride_w};
    int64_t dil[2] = {p->dilation_h > 1 ? p->dilation_h : 1, p->dilation_w > 1 ? p->dilation_w : 1};
    int64_t pads[2] = {p->pad_top, p->pad_left};
    for (int a = 0; a < 2; a++) {
        int64_t o = a == 0 ? oh : ow, size = xs[1 + a], ke = (k[a] - 1) * dil[a] + 1;
        int64_t pb = pool_pad_before(p, size, o, st[a], ke, pads[a]);
        int64_t reach = (o - 1) * st[a] + ke - pb - size; /* cells past the end the last needs */
        before[1 + a] = pb;
        after[1 + a] = reach > 0 ? reach : 0;
    }
    sx_cg_node *xw = window_stack(g, sx_cg_pad(g, x, before, after, -INFINITY), p, oh, ow);
    sx_cg_node *gw = window_stack(g, sx_cg_pad(g, gy, before, after, 0.0), p, oh, ow);
    sx_cg_node *pick = sx_cg_one_hot(g, sx_cg_argmax(g, xw, SX_AXIS(4), false), k[0] * k[1]);
    gin[1] = sx_cg_sum(g, ad_select(g, pick, gw), SX_AXIS(4), false);
    DONE();
}

/* maxpool_relu_backward(x, dy) = where(x > 0, maxpool_backward(x, dy), 0): the dy-gradient is
 * maxpool_backward's, taken of G where x > 0 (else 0); x is not differentiated (piecewise constant,
 * as there). */
sx_status grad_maxpool2d_relu_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                       const bool *need, sx_cg_node **gin)
{
    sx_cg_node *x = IN(0);
    return grad_maxpool2d_backward(g, y, ad_positive_part(g, x, gy), need, gin);
}

/* avgpool: G spread evenly over each window */
sx_status grad_avgpool2d(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                         sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_avgpool2d_backward(g, gy, &ATTR->pool, sx_cg_node_shape(IN(0)));
    DONE();
}

/* avgpool_backward is linear and the adjoint of avgpool: its adjoint is avgpool */
sx_status grad_avgpool2d_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                  sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_avgpool2d(g, gy, &ATTR->pool);
    DONE();
}

/* adaptive avgpool A is linear: dx = A^T G (its backward op) */
sx_status grad_adaptive_avgpool2d(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                  sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_adaptive_avgpool2d_backward(g, gy, sx_cg_node_shape(IN(0)));
    DONE();
}

/* A^T's adjoint is A, pooling G back to dy's size */
sx_status grad_adaptive_avgpool2d_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                           const bool *need, sx_cg_node **gin)
{
    (void)need;
    const int64_t *dy = sx_cg_node_shape(IN(0));
    gin[0] = sx_cg_adaptive_avgpool2d(g, gy, dy[1], dy[2]);
    DONE();
}
