/* conv2d.c: the 2-d convolution layer, y = act(conv2d(x, kernel) + bias) over NHWC images.
 * Its options are the tensor op's own sx_conv2d_params (embedded, so every option the op gains
 * reaches the layer) plus the filters, kernel size, bias and activation. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>

typedef struct conv_attr {
    sx_nn_conv2d_params p;
    double act_param;
} conv_attr;

sx_nn_conv2d_params sx_nn_conv2d_params_default(int filters, int kernel_h, int kernel_w)
{
    sx_nn_conv2d_params p = {.filters = filters,
                             .kernel_h = kernel_h,
                             .kernel_w = kernel_w,
                             .conv = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID},
                             .bias = true,
                             .act = SX_ACT_NONE};
    return p;
}

/* x (batch, h, w, c) -> (batch, oh, ow, filters) */
static sx_cg_node *conv_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                sx_cg_node **pre_softmax)
{
    const conv_attr *a = l->attr;
    sx_cg_graph *g = b->g;
    sx_cg_node *y;
    if (a->p.bias)
        y = sx_cg_add(g, sx_cg_conv2d(g, in[0], nn_param_node_of(b, l, 0), &a->p.conv),
                      nn_param_node_of(b, l, 1));
    else
        y = sx_cg_conv2d(g, in[0], nn_param_node_of(b, l, 0), &a->p.conv);
    return nn_activate_last(g, y, a->p.act, a->act_param, pre_softmax);
}

static const char *pad_name(sx_padding p)
{
    switch (p) {
    case SX_PAD_VALID:
        return "valid";
    case SX_PAD_SAME:
        return "same";
    case SX_PAD_SAME_LOWER:
        return "same_lower";
    case SX_PAD_EXPLICIT:
        return "explicit";
    }
    return "bad-padding";
}

static void conv_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const conv_attr *a = l->attr;
    snprintf(buf, size, "%d filters %dx%d stride %dx%d %s%s %s", a->p.filters, a->p.kernel_h,
             a->p.kernel_w, a->p.conv.stride_h, a->p.conv.stride_w, pad_name(a->p.conv.padding),
             a->p.bias ? "" : " no-bias", sx_nn_act_name(a->p.act));
}

const nn_layer_ops nn_conv2d_ops = {"conv2d", sizeof(conv_attr), conv_forward, conv_describe};

/* The output shape and the parameters of conv layer l over input in. */
static sx_status conv_make(sx_nn_net *net, sx_nn_layer *l, const sx_nn_layer *in,
                           const sx_nn_conv2d_params *p)
{
    int kh = p->kernel_h, kw = p->kernel_w, filters = p->filters;
    int64_t ks[4] = {kh, kw, in->shape[2], filters};
    if (kh < 1 || kw < 1 || filters < 1 || !nn_act_ok(p->act))
        return sx_error(SX_E_ARG, "%s: bad kernel %dx%d, filters %d or activation %d", l->name, kh,
                        kw, filters, (int)p->act);
    if (!nn_shape_fits(4, ks))
        return sx_error(SX_E_SHAPE,
                        "%s: kernel %d x %d x %lld channels x %d filters has too many elements",
                        l->name, kh, kw, (long long)ks[2], filters);
    /* strides and padding are judged by the op's own shape rule */
    int64_t xs[4] = {1, in->shape[0], in->shape[1], in->shape[2]}, ys[4];
    sx_tensor xv = sx_tensor_view(net->dtype, 4, xs, NULL);
    sx_tensor kv = sx_tensor_view(net->dtype, 4, ks, NULL);
    SX_TRY(sx_conv2d_shape(l->name, &xv, &kv, &p->conv, ys));
    conv_attr *a = l->attr;
    a->p = *p;
    a->act_param = nn_act_default_param(p->act);
    l->shape[0] = ys[1], l->shape[1] = ys[2], l->shape[2] = ys[3];
    int64_t fan_in = (int64_t)kh * kw * in->shape[2], fan_out = (int64_t)kh * kw * filters;
    int64_t bs[1] = {filters};
    SX_TRY(nn_layer_add_param(net, l, "kernel", 4, ks, (double)NAN, fan_in, fan_out, true, true));
    if (p->bias)
        SX_TRY(nn_layer_add_param(net, l, "bias", 1, bs, 0, 0, 0, true, false));
    return SX_OK;
}

sx_nn_layer *sx_nn_conv2d(sx_nn_net *net, sx_nn_layer *in, const sx_nn_conv2d_params *p)
{
    const char *who = "sx_nn_conv2d";
    sx_nn_layer *l = nn_layer_begin(net, who, L_CONV2D, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    if (p == NULL)
        s = sx_error(SX_E_ARG, "%s: params are NULL", l->name);
    else if (in->rank != 3)
        s = sx_error(SX_E_RANK, "%s: input has rank %d, want (h,w,c)", l->name, in->rank);
    else
        s = conv_make(net, l, in, p);
    return nn_layer_finish(net, who, l, s);
}
