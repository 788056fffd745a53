/* ops/pool.c: 2-d max and average pooling over NHWC (attr.pool) and their backward ops,
 * including the fused gradient of maxpool2d(relu(z)). */
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
