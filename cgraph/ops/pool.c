/* ops/pool.c: 2-d max and average pooling over NHWC (attr.pool) and their backward ops,
 * including the fused gradient of maxpool2d(relu(z)). */
#ifndef CG_GRAD_RULES /* the ops; their gradient rules, at the end, build apart (ops/rule.h) */
#include "cgraph_impl.h"

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

/* ---------------------------------------------------------------- constructors */

sx_cg_node *sx_cg_maxpool2d(sx_cg_graph *g, sx_cg_node *x, const sx_pool2d_params *p)
{
    if (!cg_arg_ok(g, p, "sx_cg_maxpool2d"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.pool = *p;
    return cg_op1(g, SX_OP_MAXPOOL2D, x, &a);
}

/* The two max-pool backward ops: (x, dy) with the pooling's parameters. */
static sx_cg_node *maxpool_backward(sx_cg_graph *g, sx_cg_op op, sx_cg_node *x, sx_cg_node *dy,
                                    const sx_pool2d_params *p, const char *who)
{
    if (!cg_arg_ok(g, p, who))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.pool = *p;
    return cg_op2(g, op, x, dy, &a);
}

sx_cg_node *sx_cg_maxpool2d_backward(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *dy,
                                     const sx_pool2d_params *p)
{
    return maxpool_backward(g, SX_OP_MAXPOOL2D_BACKWARD, x, dy, p, "sx_cg_maxpool2d_backward");
}

sx_cg_node *sx_cg_maxpool2d_relu_backward(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *dy,
                                          const sx_pool2d_params *p)
{
    return maxpool_backward(g, SX_OP_MAXPOOL2D_RELU_BACKWARD, x, dy, p,
                            "sx_cg_maxpool2d_relu_backward");
}

sx_cg_node *sx_cg_avgpool2d(sx_cg_graph *g, sx_cg_node *x, const sx_pool2d_params *p)
{
    if (!cg_arg_ok(g, p, "sx_cg_avgpool2d"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.pool = *p;
    return cg_op1(g, SX_OP_AVGPOOL2D, x, &a);
}

sx_cg_node *sx_cg_avgpool2d_backward(sx_cg_graph *g, sx_cg_node *dy, const sx_pool2d_params *p,
                                     const int64_t x_shape[4])
{
    if (!cg_arg_ok(g, p, "sx_cg_avgpool2d_backward"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.pool = *p;
    if (!cg_set_target_shape(g, &a, 4, x_shape, "sx_cg_avgpool2d_backward"))
        return NULL;
    return cg_op1(g, SX_OP_AVGPOOL2D_BACKWARD, dy, &a);
}

/* ---------------------------------------------------------------- shape rules */

/* Average pooling takes no dilation (its kernels' rule, SX_E_ARG): refused when the node is
 * made rather than when it runs. */
static sx_status avgpool_undilated(const sx_cg_node *n)
{
    const sx_pool2d_params *p = &n->attr.pool;
    if (p->dilation_h > 1 || p->dilation_w > 1)
        return sx_error(SX_E_ARG, "%s: dilation %dx%d (average pooling takes none)", cg_who(n),
                        p->dilation_h, p->dilation_w);
    return SX_OK;
}

sx_status cg_shape_pool2d(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    if (n->op == SX_OP_AVGPOOL2D)
        SX_TRY(avgpool_undilated(n));
    int64_t s[4];
    sx_tensor x = cg_probe_view(IN_VALUE(0));
    SX_TRY(sx_pool2d_shape(cg_who(n), &x, &n->attr.pool, s));
    cg_set_shape(n, 4, s);
    return SX_OK;
}

static sx_status pool_backward_check(sx_cg_node *n, const sx_tensor *x, const sx_tensor *dy)
{
    int64_t s[4];
    sx_tensor xv = cg_probe_view(x);
    SX_TRY(sx_pool2d_shape(cg_who(n), &xv, &n->attr.pool, s));
    if (!sx_shape_equal(4, s, dy->rank, dy->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: dy has shape %s, the pooling gives %s", cg_who(n),
                        sx_shape_str(dy->rank, dy->shape, a, sizeof a),
                        sx_shape_str(4, s, b, sizeof b));
    }
    return SX_OK;
}

sx_status cg_shape_maxpool2d_backward(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(pool_backward_check(n, IN_VALUE(0), IN_VALUE(1)));
    cg_set_shape(n, 4, IN_VALUE(0)->shape);
    return SX_OK;
}

sx_status cg_shape_avgpool2d_backward(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(avgpool_undilated(n));
    SX_TRY(cg_attr_shape(n));
    if (n->attr.rank != 4)
        return sx_error(SX_E_RANK, "%s: result rank %d (want 4)", cg_who(n), n->attr.rank);
    sx_tensor x = sx_tensor_view(OUT->dtype, 4, n->attr.shape, NULL);
    return pool_backward_check(n, &x, IN_VALUE(0));
}

/* ---------------------------------------------------------------- evaluators */

sx_status cg_eval_maxpool2d(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_maxpool2d_out(IN_VALUE(0), &n->attr.pool, OUT);
}

sx_status cg_eval_maxpool2d_backward(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_maxpool2d_backward_out(IN_VALUE(0), IN_VALUE(1), &n->attr.pool, OUT);
}

sx_status cg_eval_maxpool2d_relu_backward(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_maxpool2d_relu_backward_out(IN_VALUE(0), IN_VALUE(1), &n->attr.pool, OUT);
}

sx_status cg_eval_avgpool2d(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_avgpool2d_out(IN_VALUE(0), &n->attr.pool, OUT);
}

sx_status cg_eval_avgpool2d_backward(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_avgpool2d_backward_out(IN_VALUE(0), &n->attr.pool, OUT);
}

/* ---------------------------------------------------------------- flop model */

static double window(const sx_cg_node *n)
{
    return (double)n->attr.pool.kernel_h * (double)n->attr.pool.kernel_w;
}

/* one comparison or addition per window element of every pooled output */
cg_cost cg_eval_maxpool2d_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, window(n));
}

cg_cost cg_eval_avgpool2d_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, window(n));
}

/* the backward passes walk the windows of the pooled gradient dy */
cg_cost cg_eval_maxpool2d_backward_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 1, window(n));
}

cg_cost cg_eval_maxpool2d_relu_backward_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 1, window(n));
}

cg_cost cg_eval_avgpool2d_backward_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, window(n));
}

/* ---------------------------------------------------------------- adaptive average pooling */

/* adaptive_avgpool2d(x) to attr.adaptive_pool.out_h x out_w (sx_tensor_adaptive_avgpool2d_out);
 * adaptive_avgpool2d_backward(dy) -> attr.rank/shape, x's shape. */
sx_cg_node *sx_cg_adaptive_avgpool2d(sx_cg_graph *g, sx_cg_node *x, int64_t out_h, int64_t out_w)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.adaptive_pool.out_h = out_h;
    a.adaptive_pool.out_w = out_w;
    return cg_op1(g, SX_OP_ADAPTIVE_AVGPOOL2D, x, &a);
}

sx_cg_node *sx_cg_adaptive_avgpool2d_backward(sx_cg_graph *g, sx_cg_node *dy,
                                              const int64_t x_shape[4])
{
    sx_cg_attr a = sx_cg_attr_default();
    if (!cg_set_target_shape(g, &a, 4, x_shape, "sx_cg_adaptive_avgpool2d_backward"))
        return NULL;
    return cg_op1(g, SX_OP_ADAPTIVE_AVGPOOL2D_BACKWARD, dy, &a);
}

/* x (n,h,w,c) and y (n,oh,ow,c) of one adaptive pooling: rank 4, the same n and c, and h, w,
 * oh, ow >= 1. */
static sx_status adaptive_check(const sx_cg_node *n, const int64_t *x, const int64_t *y)
{
    if (x[0] != y[0] || x[3] != y[3] || x[1] < 1 || x[2] < 1 || y[1] < 1 || y[2] < 1) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE,
                        "%s: cannot pool %s to %s (want the same n and c, and h, w, out_h, out_w "
                        ">= 1)",
                        cg_who(n), sx_shape_str(4, x, a, sizeof a),
                        sx_shape_str(4, y, b, sizeof b));
    }
    return SX_OK;
}

sx_status cg_shape_adaptive_avgpool2d(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_want_rank(n, 0, 4));
    const int64_t *x = IN_VALUE(0)->shape;
    int64_t s[4] = {x[0], n->attr.adaptive_pool.out_h, n->attr.adaptive_pool.out_w, x[3]};
    SX_TRY(adaptive_check(n, x, s));
    SX_TRY(sx_shape_check(cg_who(n), 4, s));
    cg_set_shape(n, 4, s);
    return SX_OK;
}

sx_status cg_shape_adaptive_avgpool2d_backward(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_want_rank(n, 0, 4));
    SX_TRY(cg_attr_shape(n));
    if (n->attr.rank != 4)
        return sx_error(SX_E_RANK, "%s: result rank %d (want 4)", cg_who(n), n->attr.rank);
    return adaptive_check(n, n->attr.shape, IN_VALUE(0)->shape);
}

sx_status cg_eval_adaptive_avgpool2d(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_adaptive_avgpool2d_out(IN_VALUE(0), OUT);
}

sx_status cg_eval_adaptive_avgpool2d_backward(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_adaptive_avgpool2d_backward_out(IN_VALUE(0), OUT);
}

/* The largest window along an axis of `in` cells pooled to `out`: ceil(in / out), plus one
 * when the windows straddle (in not a multiple of out). */
static double adaptive_span(int64_t in, int64_t out)
{
    return out < 1 ? 0 : (double)((in + out - 1) / out + (in % out != 0));
}

/* one addition per cell of every (largest) window, for every pooled output */
cg_cost cg_eval_adaptive_avgpool2d_cost(const sx_cg_node *n)
{
    const int64_t *x = IN_VALUE(0)->shape, *y = OUT->shape;
    return cg_cost_per_out(n, adaptive_span(x[1], y[1]) * adaptive_span(x[2], y[2]));
}

cg_cost cg_eval_adaptive_avgpool2d_backward_cost(const sx_cg_node *n)
{
    const int64_t *x = OUT->shape, *y = IN_VALUE(0)->shape;
    return cg_cost_per_in(n, 0, adaptive_span(x[1], y[1]) * adaptive_span(x[2], y[2]));
}

#else
/* ---------------------------------------------------------------- gradient rules */

/* Linear pools have their
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
    gin[1] = sx_cg_sum(g, cg_grad_select(g, pick, gw), SX_AXIS(4), false);
    DONE();
}

/* maxpool_relu_backward(x, dy) = where(x > 0, maxpool_backward(x, dy), 0): the dy-gradient is
 * maxpool_backward's, taken of G where x > 0 (else 0); x is not differentiated (piecewise constant,
 * as there). */
sx_status grad_maxpool2d_relu_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                       const bool *need, sx_cg_node **gin)
{
    sx_cg_node *x = IN(0);
    return grad_maxpool2d_backward(g, y, cg_grad_positive_part(g, x, gy), need, gin);
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

#endif
