/* dense.c: the dense layer, y = act(x W + b): over the flattened input
 * (sx_nn_fully_connected) or over the last axis (sx_nn_linear, with or without b). */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>

typedef struct dense_attr {
    sx_nn_act act;
    double act_param;
    bool flatten; /* over the flattened input */
    bool bias;
} dense_attr;

/* x (batch, ..., k) -> (batch, ..., units); flattened: (batch, k) -> (batch, units) */
static sx_cg_node *dense_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                 sx_cg_node **pre_softmax)
{
    const dense_attr *a = l->attr;
    sx_cg_graph *g = b->g;
    sx_cg_node *x = in[0];
    if (a->flatten && sx_cg_node_rank(x) != 2) {
        int64_t fs[2] = {-1, sx_cg_node_size(x) / sx_cg_node_shape(x)[0]};
        x = sx_cg_reshape(g, x, 2, fs);
    }
    sx_cg_node *y = sx_cg_matmul(g, x, nn_param_node_of(b, l, 0), false, false);
    if (a->bias)
        y = sx_cg_add(g, y, nn_param_node_of(b, l, 1));
    return nn_activate_last(g, y, a->act, a->act_param, pre_softmax);
}

static void dense_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const dense_attr *a = l->attr;
    snprintf(buf, size, "%s%s%s", a->flatten ? "flatten " : "", a->bias ? "" : "no-bias ",
             sx_nn_act_name(a->act));
}

const nn_layer_ops nn_dense_ops = {"dense", sizeof(dense_attr), dense_forward, dense_describe};

static sx_nn_layer *dense(sx_nn_net *net, const char *who, sx_nn_layer *in, int64_t units,
                          sx_nn_act act, bool flatten, bool bias)
{
    sx_nn_layer *l = nn_layer_begin(net, who, L_DENSE, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    int64_t k = flatten        ? sx_shape_size(in->rank, in->shape)
                : in->rank > 0 ? in->shape[in->rank - 1]
                               : 1;
    int64_t ws[2] = {k, units}, bs[1] = {units};
    if (!flatten && in->rank < 1)
        s = sx_error(SX_E_RANK, "%s: input of rank 0 (a dense layer over the last axis needs one)",
                     l->name);
    else if (units < 1 || !nn_act_ok(act))
        s = sx_error(SX_E_ARG, "%s: %lld units or bad activation", l->name, (long long)units);
    else if (!nn_shape_fits(2, ws))
        s = sx_error(SX_E_SHAPE, "%s: weight of %lld inputs x %lld units has too many elements",
                     l->name, (long long)k, (long long)units);
    if (s == SX_OK) {
        dense_attr *a = l->attr;
        a->flatten = flatten;
        a->bias = bias;
        a->act = act;
        a->act_param = nn_act_default_param(act);
        if (flatten || l->rank == 0) {
            l->rank = 1;
            l->shape[0] = units;
        } else {
            l->shape[l->rank - 1] = units;
        }
        s = nn_layer_add_param(net, l, "weight", 2, ws, (double)NAN, k, units, true, true);
        if (s == SX_OK && bias)
            s = nn_layer_add_param(net, l, "bias", 1, bs, 0, 0, 0, true, false);
    }
    return nn_layer_finish(net, who, l, s);
}

sx_nn_layer *sx_nn_fully_connected(sx_nn_net *net, sx_nn_layer *in, int64_t units, sx_nn_act act)
{
    return dense(net, "sx_nn_fully_connected", in, units, act, true, true);
}

sx_nn_layer *sx_nn_linear(sx_nn_net *net, sx_nn_layer *in, int64_t units, sx_nn_act act)
{
    return dense(net, "sx_nn_linear", in, units, act, false, true);
}

sx_nn_layer *sx_nn_linear_nobias(sx_nn_net *net, sx_nn_layer *in, int64_t units, sx_nn_act act)
{
    return dense(net, "sx_nn_linear_nobias", in, units, act, false, false);
}

bool nn_dense_flattens(const sx_nn_layer *l)
{
    return ((const dense_attr *)l->attr)->flatten;
}
