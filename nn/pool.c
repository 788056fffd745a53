/* pool.c: pooling layers over NHWC images: max and average pooling over windows (the tensor
 * op's sx_pool2d_params embedded, so every option the op gains reaches the layers: pads,
 * ceil_mode, count_include_pad, dilation), and global
 * max and average pooling over the two spatial axes, (h,w,c) -> (c). */
#include "nn_impl.h"

#include <stdio.h>

sx_nn_pool2d_params sx_nn_pool2d_params_default(int kernel_h, int kernel_w)
{
    sx_nn_pool2d_params p = {.pool = {.kernel_h = kernel_h,
                                      .kernel_w = kernel_w,
                                      .stride_h = kernel_h,
                                      .stride_w = kernel_w,
                                      .padding = SX_PAD_VALID}};
    return p;
}

/* x (batch, h, w, c) -> (batch, oh, ow, c) */
static sx_cg_node *max_pool_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                    sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    const sx_nn_pool2d_params *p = l->attr;
    return sx_cg_maxpool2d(b->g, in[0], &p->pool);
}

static sx_cg_node *avg_pool_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                    sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    const sx_nn_pool2d_params *p = l->attr;
    return sx_cg_avgpool2d(b->g, in[0], &p->pool);
}

/* "2x2 stride 2x2 valid", then the options that are not their defaults */
static void pool_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const sx_pool2d_params *p = &((const sx_nn_pool2d_params *)l->attr)->pool;
    int n = snprintf(buf, size, "%dx%d stride %dx%d %s", p->kernel_h, p->kernel_w, p->stride_h,
                     p->stride_w,
                     p->padding == SX_PAD_VALID        ? "valid"
                     : p->padding == SX_PAD_SAME       ? "same"
                     : p->padding == SX_PAD_SAME_LOWER ? "same_lower"
                     : p->padding == SX_PAD_EXPLICIT   ? "explicit"
                                                       : "other padding");
    if (p->padding == SX_PAD_EXPLICIT && n >= 0 && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, " pads %d,%d,%d,%d", p->pad_top, p->pad_bottom,
                      p->pad_left, p->pad_right);
    if ((p->dilation_h > 1 || p->dilation_w > 1) && n >= 0 && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, " dilation %dx%d",
                      p->dilation_h > 1 ? p->dilation_h : 1, p->dilation_w > 1 ? p->dilation_w : 1);
    if (p->ceil_mode && n >= 0 && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, " ceil");
    if (p->count_include_pad && n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, " count-pad");
}

const nn_layer_ops nn_max_pool2d_ops = {"max_pool2d", sizeof(sx_nn_pool2d_params), max_pool_forward,
                                        pool_describe};
const nn_layer_ops nn_avg_pool2d_ops = {"avg_pool2d", sizeof(sx_nn_pool2d_params), avg_pool_forward,
                                        pool_describe};

static sx_nn_layer *pool(sx_nn_net *net, const char *who, nn_kind kind, sx_nn_layer *in,
                         const sx_nn_pool2d_params *p)
{
    sx_nn_layer *l = nn_layer_begin(net, who, kind, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    if (p == NULL)
        s = sx_error(SX_E_ARG, "%s: params are NULL", l->name);
    else if (in->rank != 3)
        s = sx_error(SX_E_RANK, "%s: input has rank %d, want (h,w,c)", l->name, in->rank);
    else if (kind == L_AVGPOOL && (p->pool.dilation_h > 1 || p->pool.dilation_w > 1))
        s = sx_error(SX_E_ARG, "%s: dilation %dx%d (average pooling takes none)", l->name,
                     p->pool.dilation_h, p->pool.dilation_w);
    if (s == SX_OK) {
        /* kernel, strides, padding and the rest are judged by the op's own shape rule */
        int64_t xs[4] = {1, in->shape[0], in->shape[1], in->shape[2]}, ys[4];
        sx_tensor xv = sx_tensor_view(net->dtype, 4, xs, NULL);
        s = sx_pool2d_shape(l->name, &xv, &p->pool, ys);
        if (s == SX_OK) {
            *(sx_nn_pool2d_params *)l->attr = *p;
            l->shape[0] = ys[1], l->shape[1] = ys[2], l->shape[2] = ys[3];
        }
    }
    return nn_layer_finish(net, who, l, s);
}

sx_nn_layer *sx_nn_max_pool2d(sx_nn_net *net, sx_nn_layer *in, const sx_nn_pool2d_params *p)
{
    return pool(net, "sx_nn_max_pool2d", L_MAXPOOL, in, p);
}

sx_nn_layer *sx_nn_avg_pool2d(sx_nn_net *net, sx_nn_layer *in, const sx_nn_pool2d_params *p)
{
    return pool(net, "sx_nn_avg_pool2d", L_AVGPOOL, in, p);
}

/* ---------------------------------------------------------------- global pooling */

/* x (batch, h, w, c) -> (batch, c) */
static sx_cg_node *global_max_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                      sx_cg_node **pre_softmax)
{
    (void)l, (void)pre_softmax;
    return sx_cg_reduce_max(b->g, in[0], SX_AXIS(1) | SX_AXIS(2), false);
}

static sx_cg_node *global_avg_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                      sx_cg_node **pre_softmax)
{
    (void)l, (void)pre_softmax;
    return sx_cg_mean(b->g, in[0], SX_AXIS(1) | SX_AXIS(2), false);
}

const nn_layer_ops nn_global_max_pool_ops = {"global_max_pool", 0, global_max_forward, NULL};
const nn_layer_ops nn_global_avg_pool_ops = {"global_avg_pool", 0, global_avg_forward, NULL};

static sx_nn_layer *global_pool(sx_nn_net *net, const char *who, nn_kind kind, sx_nn_layer *in)
{
    sx_nn_layer *l = nn_layer_begin(net, who, kind, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    if (in->rank != 3)
        s = sx_error(SX_E_RANK, "%s: input has rank %d, want (h,w,c)", l->name, in->rank);
    l->rank = 1;
    l->shape[0] = in->shape[in->rank > 0 ? in->rank - 1 : 0];
    return nn_layer_finish(net, who, l, s);
}

sx_nn_layer *sx_nn_global_max_pool(sx_nn_net *net, sx_nn_layer *in)
{
    return global_pool(net, "sx_nn_global_max_pool", L_GMAXPOOL, in);
}

sx_nn_layer *sx_nn_global_avg_pool(sx_nn_net *net, sx_nn_layer *in)
{
    return global_pool(net, "sx_nn_global_avg_pool", L_GAVGPOOL, in);
}
