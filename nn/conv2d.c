/* conv2d.c: the convolution layers over NHWC data, y = act(conv(x, kernel) + bias): conv2d,
 * depthwise conv2d (conv2d with groups = channels), separable conv2d (depthwise then 1x1) and
 * conv1d (a conv2d over (length, 1, channels)). Their options are the tensor op's own
 * sx_conv2d_params (embedded, so every option the op gains reaches the layers) plus the filters,
 * kernel size, bias and activation. */
#include "nn_impl.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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

/* " dilation 2x1 groups 4 pads 1,0,1,0": the options that are not their defaults */
static void conv_options(const sx_conv2d_params *c, char *buf, size_t size)
{
    int n = 0;
    buf[0] = 0;
    if (c->padding == SX_PAD_EXPLICIT)
        n += snprintf(buf + n, size - (size_t)n, " pads %d,%d,%d,%d", c->pad_top, c->pad_bottom,
                      c->pad_left, c->pad_right);
    if ((c->dilation_h > 1 || c->dilation_w > 1) && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, " dilation %dx%d",
                      c->dilation_h > 1 ? c->dilation_h : 1, c->dilation_w > 1 ? c->dilation_w : 1);
    if (c->groups > 1 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, " groups %d", c->groups);
}

static void conv_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const conv_attr *a = l->attr;
    char opts[96];
    conv_options(&a->p.conv, opts, sizeof opts);
    snprintf(buf, size, "%d filters %dx%d stride %dx%d %s%s%s %s", a->p.filters, a->p.kernel_h,
             a->p.kernel_w, a->p.conv.stride_h, a->p.conv.stride_w, pad_name(a->p.conv.padding),
             opts, a->p.bias ? "" : " no-bias", sx_nn_act_name(a->p.act));
}

const nn_layer_ops nn_conv2d_ops = {"conv2d", sizeof(conv_attr), conv_forward, conv_describe};

/* groups as the op reads it (0 means 1), checked against c channels and `filters`: negative is
 * SX_E_ARG, not dividing both SX_E_SHAPE. */
static sx_status groups_of(const char *name, int groups, int64_t c, int64_t filters, int *out)
{
    if (groups < 0)
        return sx_error(SX_E_ARG, "%s: groups %d (want >= 1)", name, groups);
    *out = groups > 1 ? groups : 1;
    if (c % *out != 0 || filters % *out != 0)
        return sx_error(SX_E_SHAPE,
                        "%s: groups %d must divide the input channels %lld and the filters %lld",
                        name, *out, (long long)c, (long long)filters);
    return SX_OK;
}

/* The output shape (h, w, filters) of conv2d over an (h, w, c) input with kernel ks. */
static sx_status conv_out_shape(sx_nn_net *net, const char *name, const int64_t *in_shape,
                                const int64_t ks[4], const sx_conv2d_params *conv, int64_t ys[4])
{
    if (!nn_shape_fits(4, ks))
        return sx_error(SX_E_SHAPE,
                        "%s: kernel %lld x %lld x %lld channels x %lld filters has too many "
                        "elements",
                        name, (long long)ks[0], (long long)ks[1], (long long)ks[2],
                        (long long)ks[3]);
    /* strides, padding and dilation are judged by the op's own shape rule */
    int64_t xs[4] = {1, in_shape[0], in_shape[1], in_shape[2]};
    sx_tensor xv = sx_tensor_view(net->dtype, 4, xs, NULL);
    sx_tensor kv = sx_tensor_view(net->dtype, 4, ks, NULL);
    return sx_conv2d_shape(name, &xv, &kv, conv, ys);
}

/* The output shape and the parameters of conv layer l over input in. */
static sx_status conv_make(sx_nn_net *net, sx_nn_layer *l, const sx_nn_layer *in,
                           const sx_nn_conv2d_params *p)
{
    int kh = p->kernel_h, kw = p->kernel_w, filters = p->filters, groups = 1;
    if (kh < 1 || kw < 1 || filters < 1 || !nn_act_ok(p->act))
        return sx_error(SX_E_ARG, "%s: bad kernel %dx%d, filters %d or activation %d", l->name, kh,
                        kw, filters, (int)p->act);
    SX_TRY(groups_of(l->name, p->conv.groups, in->shape[2], filters, &groups));
    int64_t ks[4] = {kh, kw, in->shape[2] / groups, filters}, ys[4];
    SX_TRY(conv_out_shape(net, l->name, in->shape, ks, &p->conv, ys));
    conv_attr *a = l->attr;
    a->p = *p;
    a->act_param = nn_act_default_param(p->act);
    l->shape[0] = ys[1], l->shape[1] = ys[2], l->shape[2] = ys[3];
    int64_t fan_in = (int64_t)kh * kw * (in->shape[2] / groups),
            fan_out = (int64_t)kh * kw * (filters / groups);
    int64_t bs[1] = {filters};
    SX_TRY(nn_layer_add_param(net, l, "kernel", 4, ks, (double)NAN, fan_in, fan_out, true, true));
    if (p->bias)
        SX_TRY(nn_layer_add_param(net, l, "bias", 1, bs, 0, 0, 0, true, false));
    return SX_OK;
}

/* The start of every conv layer's constructor: the layer, or NULL with s set. */
static sx_nn_layer *conv_begin(sx_nn_net *net, const char *who, nn_kind kind, sx_nn_layer *in,
                               const void *p, int rank, sx_status *s)
{
    sx_nn_layer *l = nn_layer_begin(net, who, kind, 1, &in);
    *s = SX_OK;
    if (l == NULL)
        return NULL;
    if (p == NULL)
        *s = sx_error(SX_E_ARG, "%s: params are NULL", l->name);
    else if (in->rank != rank)
        *s = sx_error(SX_E_RANK, "%s: input has rank %d, want %s", l->name, in->rank,
                      rank == 3 ? "(h,w,c)" : "(length,channels)");
    return l;
}

sx_nn_layer *sx_nn_conv2d(sx_nn_net *net, sx_nn_layer *in, const sx_nn_conv2d_params *p)
{
    const char *who = "sx_nn_conv2d";
    sx_status s;
    sx_nn_layer *l = conv_begin(net, who, L_CONV2D, in, p, 3, &s);
    if (l == NULL)
        return NULL;
    if (s == SX_OK)
        s = conv_make(net, l, in, p);
    return nn_layer_finish(net, who, l, s);
}

/* ---------------------------------------------------------------- depthwise */

sx_nn_depthwise_conv2d_params sx_nn_depthwise_conv2d_params_default(int kernel_h, int kernel_w)
{
    sx_nn_depthwise_conv2d_params p = {.kernel_h = kernel_h,
                                       .kernel_w = kernel_w,
                                       .depth_multiplier = 1,
                                       .conv = sx_conv2d_params_default(),
                                       .bias = true,
                                       .act = SX_ACT_NONE};
    return p;
}

/* The depthwise step's conv2d parameters over c channels: groups = c (given as 0, 1 or c: the
 * defaults' 0 or 1 mean "not set"). */
static sx_status depthwise_conv(const char *name, const sx_conv2d_params *conv, int64_t c,
                                int multiplier, sx_conv2d_params *out)
{
    if (multiplier < 1)
        return sx_error(SX_E_ARG, "%s: depth_multiplier %d (want >= 1)", name, multiplier);
    if (conv->groups > 1 && conv->groups != c)
        return sx_error(SX_E_ARG, "%s: groups %d (want 0, 1 or the input channels, %lld)", name,
                        conv->groups, (long long)c);
    if (conv->groups < 0)
        return sx_error(SX_E_ARG, "%s: groups %d (want 0, 1 or the input channels, %lld)", name,
                        conv->groups, (long long)c);
    if (c > INT_MAX)
        return sx_error(SX_E_SHAPE, "%s: %lld channels (at most %d)", name, (long long)c, INT_MAX);
    *out = *conv;
    out->groups = (int)c;
    return SX_OK;
}

const nn_layer_ops nn_depthwise_conv2d_ops = {"depthwise_conv2d", sizeof(conv_attr), conv_forward,
                                              conv_describe};

sx_nn_layer *sx_nn_depthwise_conv2d(sx_nn_net *net, sx_nn_layer *in,
                                    const sx_nn_depthwise_conv2d_params *p)
{
    const char *who = "sx_nn_depthwise_conv2d";
    sx_status s;
    sx_nn_layer *l = conv_begin(net, who, L_DWCONV2D, in, p, 3, &s);
    if (l == NULL)
        return NULL;
    sx_nn_conv2d_params cp = {.kernel_h = p ? p->kernel_h : 0,
                              .kernel_w = p ? p->kernel_w : 0,
                              .bias = p ? p->bias : false,
                              .act = p ? p->act : SX_ACT_NONE};
    if (s == SX_OK)
        s = depthwise_conv(l->name, &p->conv, in->shape[2], p->depth_multiplier, &cp.conv);
    if (s == SX_OK && (int64_t)p->depth_multiplier * in->shape[2] > INT_MAX)
        s = sx_error(SX_E_SHAPE, "%s: %lld channels x depth_multiplier %d is too many", l->name,
                     (long long)in->shape[2], p->depth_multiplier);
    if (s == SX_OK) {
        cp.filters = (int)(p->depth_multiplier * in->shape[2]);
        s = conv_make(net, l, in, &cp);
    }
    return nn_layer_finish(net, who, l, s);
}

/* ---------------------------------------------------------------- separable */

typedef struct sep_attr {
    sx_nn_separable_conv2d_params p;
    sx_conv2d_params depthwise, pointwise;
    double act_param;
} sep_attr;

sx_nn_separable_conv2d_params sx_nn_separable_conv2d_params_default(int filters, int kernel_h,
                                                                    int kernel_w)
{
    sx_nn_separable_conv2d_params p = {.filters = filters,
                                       .kernel_h = kernel_h,
                                       .kernel_w = kernel_w,
                                       .depth_multiplier = 1,
                                       .conv = sx_conv2d_params_default(),
                                       .bias = true,
                                       .act = SX_ACT_NONE};
    return p;
}

/* x (batch, h, w, c) -> depthwise (batch, oh, ow, c * m) -> 1x1 (batch, oh, ow, filters) */
static sx_cg_node *sep_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                               sx_cg_node **pre_softmax)
{
    const sep_attr *a = l->attr;
    sx_cg_graph *g = b->g;
    sx_cg_node *d = sx_cg_conv2d(g, in[0], nn_param_node_of(b, l, 0), &a->depthwise);
    sx_cg_node *y = sx_cg_conv2d(g, d, nn_param_node_of(b, l, 1), &a->pointwise);
    if (a->p.bias)
        y = sx_cg_add(g, y, nn_param_node_of(b, l, 2));
    return nn_activate_last(g, y, a->p.act, a->act_param, pre_softmax);
}

static void sep_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const sep_attr *a = l->attr;
    char opts[96];
    conv_options(&a->p.conv, opts, sizeof opts);
    snprintf(buf, size, "%d filters %dx%d x%d stride %dx%d %s%s%s %s", a->p.filters, a->p.kernel_h,
             a->p.kernel_w, a->p.depth_multiplier, a->p.conv.stride_h, a->p.conv.stride_w,
             pad_name(a->p.conv.padding), opts, a->p.bias ? "" : " no-bias",
             sx_nn_act_name(a->p.act));
}

const nn_layer_ops nn_separable_conv2d_ops = {"separable_conv2d", sizeof(sep_attr), sep_forward,
                                              sep_describe};

static sx_status sep_make(sx_nn_net *net, sx_nn_layer *l, const sx_nn_layer *in,
                          const sx_nn_separable_conv2d_params *p)
{
    int kh = p->kernel_h, kw = p->kernel_w, filters = p->filters, m = p->depth_multiplier;
    if (kh < 1 || kw < 1 || filters < 1 || !nn_act_ok(p->act))
        return sx_error(SX_E_ARG, "%s: bad kernel %dx%d, filters %d or activation %d", l->name, kh,
                        kw, filters, (int)p->act);
    sep_attr *a = l->attr;
    int64_t c = in->shape[2];
    SX_TRY(depthwise_conv(l->name, &p->conv, c, m, &a->depthwise));
    if (c * m > INT_MAX)
        return sx_error(SX_E_SHAPE, "%s: %lld channels x depth_multiplier %d is too many", l->name,
                        (long long)c, m);
    int64_t dks[4] = {kh, kw, 1, c * m}, pks[4] = {1, 1, c * m, filters}, ys[4];
    SX_TRY(conv_out_shape(net, l->name, in->shape, dks, &a->depthwise, ys));
    a->pointwise = sx_conv2d_params_default();
    a->p = *p;
    a->act_param = nn_act_default_param(p->act);
    l->shape[0] = ys[1], l->shape[1] = ys[2], l->shape[2] = filters;
    int64_t bs[1] = {filters};
    if (!nn_shape_fits(4, pks))
        return sx_error(SX_E_SHAPE, "%s: pointwise kernel %lld x %d has too many elements", l->name,
                        (long long)(c * m), filters);
    SX_TRY(nn_layer_add_param(net, l, "depthwise_kernel", 4, dks, (double)NAN, (int64_t)kh * kw,
                              (int64_t)kh * kw * m, true, true));
    SX_TRY(nn_layer_add_param(net, l, "pointwise_kernel", 4, pks, (double)NAN, c * m, filters, true,
                              true));
    if (p->bias)
        SX_TRY(nn_layer_add_param(net, l, "bias", 1, bs, 0, 0, 0, true, false));
    return SX_OK;
}

sx_nn_layer *sx_nn_separable_conv2d(sx_nn_net *net, sx_nn_layer *in,
                                    const sx_nn_separable_conv2d_params *p)
{
    const char *who = "sx_nn_separable_conv2d";
    sx_status s;
    sx_nn_layer *l = conv_begin(net, who, L_SEPCONV2D, in, p, 3, &s);
    if (l == NULL)
        return NULL;
    if (s == SX_OK)
        s = sep_make(net, l, in, p);
    return nn_layer_finish(net, who, l, s);
}

/* ---------------------------------------------------------------- conv1d */

typedef struct conv1d_attr {
    sx_nn_conv1d_params p;
    sx_conv2d_params conv; /* the 2-d convolution over (length, 1, channels) */
    int64_t ks[4];         /* the kernel as a 2-d one: (kernel, 1, channels / groups, filters) */
    double act_param;
} conv1d_attr;

sx_nn_conv1d_params sx_nn_conv1d_params_default(int filters, int kernel)
{
    sx_nn_conv1d_params p = {.filters = filters,
                             .kernel = kernel,
                             .stride = 1,
                             .padding = SX_PAD_VALID,
                             .dilation = 1,
                             .groups = 1,
                             .bias = true,
                             .act = SX_ACT_NONE};
    return p;
}

/* x (batch, length, c) -> (batch, length, 1, c) -> conv2d -> (batch, ol, 1, f) -> (batch, ol, f) */
static sx_cg_node *conv1d_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                  sx_cg_node **pre_softmax)
{
    const conv1d_attr *a = l->attr;
    sx_cg_graph *g = b->g;
    const int64_t *xs = sx_cg_node_shape(in[0]);
    if (xs == NULL)
        return NULL;
    int64_t x4[4] = {xs[0], xs[1], 1, xs[2]}, y3[3] = {xs[0], l->shape[0], l->shape[1]};
    sx_cg_node *k = sx_cg_reshape(g, nn_param_node_of(b, l, 0), 4, a->ks);
    sx_cg_node *y = sx_cg_conv2d(g, sx_cg_reshape(g, in[0], 4, x4), k, &a->conv);
    y = sx_cg_reshape(g, y, 3, y3);
    if (a->p.bias)
        y = sx_cg_add(g, y, nn_param_node_of(b, l, 1));
    return nn_activate_last(g, y, a->p.act, a->act_param, pre_softmax);
}

static void conv1d_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const conv1d_attr *a = l->attr;
    char opts[96];
    conv_options(&a->conv, opts, sizeof opts);
    snprintf(buf, size, "%d filters %d stride %d %s%s%s %s", a->p.filters, a->p.kernel, a->p.stride,
             pad_name(a->p.padding), opts, a->p.bias ? "" : " no-bias", sx_nn_act_name(a->p.act));
}

const nn_layer_ops nn_conv1d_ops = {"conv1d", sizeof(conv1d_attr), conv1d_forward, conv1d_describe};

static sx_status conv1d_make(sx_nn_net *net, sx_nn_layer *l, const sx_nn_layer *in,
                             const sx_nn_conv1d_params *p)
{
    int k = p->kernel, filters = p->filters, groups = 1;
    if (k < 1 || filters < 1 || p->stride < 1 || p->dilation < 1 || !nn_act_ok(p->act))
        return sx_error(SX_E_ARG,
                        "%s: bad kernel %d, filters %d, stride %d, dilation %d or activation %d",
                        l->name, k, filters, p->stride, p->dilation, (int)p->act);
    SX_TRY(groups_of(l->name, p->groups, in->shape[1], filters, &groups));
    conv1d_attr *a = l->attr;
    a->conv = (sx_conv2d_params){.stride_h = p->stride,
                                 .stride_w = 1,
                                 .padding = p->padding,
                                 .pad_top = p->pad_before,
                                 .pad_bottom = p->pad_after,
                                 .dilation_h = p->dilation,
                                 .dilation_w = 1,
                                 .groups = groups};
    int64_t ks[4] = {k, 1, in->shape[1] / groups, filters}, ys[4];
    int64_t in3[3] = {in->shape[0], 1, in->shape[1]};
    SX_TRY(conv_out_shape(net, l->name, in3, ks, &a->conv, ys));
    memcpy(a->ks, ks, sizeof ks);
    a->p = *p;
    a->act_param = nn_act_default_param(p->act);
    l->shape[0] = ys[1], l->shape[1] = ys[3];
    int64_t k3[3] = {k, ks[2], filters}, bs[1] = {filters};
    SX_TRY(nn_layer_add_param(net, l, "kernel", 3, k3, (double)NAN, (int64_t)k * ks[2],
                              (int64_t)k * (filters / groups), true, true));
    if (p->bias)
        SX_TRY(nn_layer_add_param(net, l, "bias", 1, bs, 0, 0, 0, true, false));
    return SX_OK;
}

sx_nn_layer *sx_nn_conv1d(sx_nn_net *net, sx_nn_layer *in, const sx_nn_conv1d_params *p)
{
    const char *who = "sx_nn_conv1d";
    sx_status s;
    sx_nn_layer *l = conv_begin(net, who, L_CONV1D, in, p, 2, &s);
    if (l == NULL)
        return NULL;
    if (s == SX_OK)
        s = conv1d_make(net, l, in, p);
    return nn_layer_finish(net, who, l, s);
}
