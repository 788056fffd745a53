/* adaptive_pool.c: adaptive average pooling, (h,w,c) -> (out_h,out_w,c) for any output size, as
 * PyTorch's AdaptiveAvgPool2d: output (i, j) averages rows [floor(i h / out_h),
 * ceil((i + 1) h / out_h)) and the columns likewise (windows of varying size). */
#include "nn_impl.h"

#include <stdio.h>

typedef struct adaptive_attr {
    int64_t out_h, out_w;
} adaptive_attr;

/* x (batch, h, w, c) -> (batch, out_h, out_w, c) */
static sx_cg_node *adaptive_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                    sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    const adaptive_attr *a = l->attr;
    return sx_cg_adaptive_avgpool2d(b->g, in[0], a->out_h, a->out_w);
}

static void adaptive_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const adaptive_attr *a = l->attr;
    snprintf(buf, size, "to %lldx%lld", (long long)a->out_h, (long long)a->out_w);
}

const nn_layer_ops nn_adaptive_avg_pool2d_ops = {"adaptive_avg_pool2d", sizeof(adaptive_attr),
                                                 adaptive_forward, adaptive_describe};

sx_nn_layer *sx_nn_adaptive_avg_pool2d(sx_nn_net *net, sx_nn_layer *in, int64_t out_h,
                                       int64_t out_w)
{
    const char *who = "sx_nn_adaptive_avg_pool2d";
    sx_nn_layer *l = nn_layer_begin(net, who, L_ADAPTIVE_AVGPOOL, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    if (in->rank != 3)
        s = sx_error(SX_E_RANK, "%s: input has rank %d, want (h,w,c)", l->name, in->rank);
    else if (out_h < 1 || out_w < 1 || in->shape[0] < 1 || in->shape[1] < 1)
        s = sx_error(SX_E_SHAPE, "%s: cannot pool %lldx%lld to %lldx%lld (want sizes >= 1)",
                     l->name, (long long)in->shape[0], (long long)in->shape[1], (long long)out_h,
                     (long long)out_w);
    else if (!nn_shape_fits(3, (int64_t[]){out_h, out_w, in->shape[2]}))
        s = sx_error(SX_E_SHAPE, "%s: output %lldx%lld has too many elements", l->name,
                     (long long)out_h, (long long)out_w);
    if (s == SX_OK) {
        adaptive_attr *a = l->attr;
        a->out_h = out_h;
        a->out_w = out_w;
        l->shape[0] = out_h, l->shape[1] = out_w, l->shape[2] = in->shape[2];
    }
    return nn_layer_finish(net, who, l, s);
}
