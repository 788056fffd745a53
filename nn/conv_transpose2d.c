/* conv_transpose2d.c: the transposed convolution layer ("deconvolution"), y =
 * act(conv_transpose2d(x, kernel) + bias) over NHWC images, as PyTorch's ConvTranspose2d. Its
 * options embed the tensor op's sx_conv2d_params (strides, padding, dilation, groups and output
 * padding) beside the filters, kernel size, bias and activation. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>

typedef struct conv_transpose_attr {
    sx_nn_conv_transpose2d_params p;
    double act_param;
} conv_transpose_attr;

sx_nn_conv_transpose2d_params sx_nn_conv_transpose2d_params_default(int filters, int kernel_h,
                                                                    int kernel_w)
{
    sx_nn_conv_transpose2d_params p = {.filters = filters,
                                       .kernel_h = kernel_h,
                                       .kernel_w = kernel_w,
                                       .conv = sx_conv2d_params_default(),
                                       .bias = true,
                                       .act = SX_ACT_NONE};
    return p;
}

/* x (batch, h, w, c) -> (batch, oh, ow, filters) */
static sx_cg_node *conv_transpose_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                          sx_cg_node **pre_softmax)
{
    const conv_transpose_attr *a = l->attr;
    sx_cg_graph *g = b->g;
    sx_cg_node *y = sx_cg_conv_transpose2d(g, in[0], nn_param_node_of(b, l, 0), &a->p.conv);
    if (a->p.bias)
        y = sx_cg_add(g, y, nn_param_node_of(b, l, 1));
    return nn_activate_last(g, y, a->p.act, a->act_param, pre_softmax);
}

static void conv_transpose_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const conv_transpose_attr *a = l->attr;
    const sx_conv2d_params *c = &a->p.conv;
    snprintf(buf, size, "%d filters %dx%d stride %dx%d out-pad %dx%d groups %d%s %s", a->p.filters,
             a->p.kernel_h, a->p.kernel_w, c->stride_h, c->stride_w, c->output_padding_h,
             c->output_padding_w, c->groups > 1 ? c->groups : 1, a->p.bias ? "" : " no-bias",
             sx_nn_act_name(a->p.act));
}

const nn_layer_ops nn_conv_transpose2d_ops = {"conv_transpose2d", sizeof(conv_transpose_attr),
                                              conv_transpose_forward, conv_transpose_describe};

/* The output shape and the parameters of layer l over input in: the kernel
 * (kh, kw, filters / groups, c), the bias (filters). */
static sx_status conv_transpose_make(sx_nn_net *net, sx_nn_layer *l, const sx_nn_layer *in,
                                     const sx_nn_conv_transpose2d_params *p)
{
    int kh = p->kernel_h, kw = p->kernel_w, filters = p->filters;
    int groups = p->conv.groups > 1 ? p->conv.groups : 1;
    if (kh < 1 || kw < 1 || filters < 1 || !nn_act_ok(p->act))
        return sx_error(SX_E_ARG, "%s: bad kernel %dx%d, filters %d or activation %d", l->name, kh,
                        kw, filters, (int)p->act);
    if (filters % groups != 0)
        return sx_error(SX_E_SHAPE, "%s: %d groups do not divide %d filters", l->name, groups,
                        filters);
    int64_t ks[4] = {kh, kw, filters / groups, in->shape[2]};
    if (!nn_shape_fits(4, ks))
        return sx_error(SX_E_SHAPE, "%s: kernel %d x %d x %d x %lld has too many elements", l->name,
                        kh, kw, filters / groups, (long long)ks[3]);
    /* strides, padding, output padding, dilation and groups are judged by the op's shape rule */
    int64_t xs[4] = {1, in->shape[0], in->shape[1], in->shape[2]}, ys[4];
    sx_tensor xv = sx_tensor_view(net->dtype, 4, xs, NULL);
    sx_tensor kv = sx_tensor_view(net->dtype, 4, ks, NULL);
    SX_TRY(sx_conv_transpose2d_shape(l->name, &xv, &kv, &p->conv, ys));
    if (!nn_shape_fits(3, ys + 1))
        return sx_error(SX_E_SHAPE, "%s: output has too many elements", l->name);
    conv_transpose_attr *a = l->attr;
    a->p = *p;
    a->act_param = nn_act_default_param(p->act);
    l->shape[0] = ys[1], l->shape[1] = ys[2], l->shape[2] = ys[3];
    /* fans as PyTorch's weight (c_in, c_out/groups, kh, kw): in = c_out/groups * kh * kw */
    int64_t fan_in = (int64_t)kh * kw * (filters / groups),
            fan_out = (int64_t)kh * kw * in->shape[2];
    int64_t bs[1] = {filters};
    SX_TRY(nn_layer_add_param(net, l, "kernel", 4, ks, (double)NAN, fan_in, fan_out, true, true));
    if (p->bias)
        SX_TRY(nn_layer_add_param(net, l, "bias", 1, bs, 0, 0, 0, true, false));
    return SX_OK;
}

sx_nn_layer *sx_nn_conv_transpose2d(sx_nn_net *net, sx_nn_layer *in,
                                    const sx_nn_conv_transpose2d_params *p)
{
    const char *who = "sx_nn_conv_transpose2d";
    sx_nn_layer *l = nn_layer_begin(net, who, L_CONV_TRANSPOSE2D, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    if (p == NULL)
        s = sx_error(SX_E_ARG, "%s: params are NULL", l->name);
    else if (in->rank != 3)
        s = sx_error(SX_E_RANK, "%s: input has rank %d, want (h,w,c)", l->name, in->rank);
    else
        s = conv_transpose_make(net, l, in, p);
    return nn_layer_finish(net, who, l, s);
}
