/* activation.c: activation functions as graph nodes (shared by the layers that end in one:
 * conv2d, dense) and the activation layer. A softmax at the end of a network is remembered
 * with the node before it, so the cross-entropy loss folds it in. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const act_names[SX_ACT_COUNT] = {
    "none",         "relu", "relu6",    "leaky_relu", "elu",     "sigmoid",
    "hard_sigmoid", "tanh", "softplus", "softsign",   "softmax", "gelu",
    "gelu_tanh",    "silu", "mish",     "hard_swish"};

const char *sx_nn_act_name(sx_nn_act a)
{
    return (unsigned)a < SX_ACT_COUNT ? act_names[a] : "bad-activation";
}

sx_status sx_nn_act_parse(const char *s, sx_nn_act *out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "sx_nn_act_parse: out is NULL");
    for (int k = 0; s != NULL && k < SX_ACT_COUNT; k++)
        if (strcmp(s, act_names[k]) == 0) {
            *out = (sx_nn_act)k;
            return SX_OK;
        }
    if (s != NULL && strcmp(s, "swish") == 0) {
        *out = SX_ACT_SILU;
        return SX_OK;
    }
    return sx_error(SX_E_ARG, "sx_nn_act_parse: unknown activation '%s'", s ? s : "(null)");
}

bool nn_act_ok(sx_nn_act act)
{
    return (unsigned)act < SX_ACT_COUNT;
}

double nn_act_default_param(sx_nn_act act)
{
    return act == SX_ACT_LEAKY_RELU ? 0.01 : act == SX_ACT_ELU ? 1.0 : 0.0;
}

sx_cg_node *nn_activate(sx_cg_graph *g, sx_cg_node *x, sx_nn_act act, double param)
{
    if (x == NULL)
        return NULL;
    switch (act) {
    case SX_ACT_NONE:
        return x;
    case SX_ACT_RELU:
        return sx_cg_relu(g, x);
    case SX_ACT_RELU6:
        return sx_cg_min(g, sx_cg_relu(g, x), sx_cg_scalar_like(g, x, 6));
    case SX_ACT_LEAKY_RELU:
        return sx_cg_leaky_relu(g, x, param);
    case SX_ACT_ELU:
        return sx_cg_elu(g, x, param);
    case SX_ACT_SIGMOID:
        return sx_cg_sigmoid(g, x);
    case SX_ACT_HARD_SIGMOID: /* clip(0.2 x + 0.5, 0, 1) */
        return sx_cg_min(g,
                         sx_cg_max(g,
                                   sx_cg_add(g, sx_cg_mul(g, x, sx_cg_scalar_like(g, x, 0.2)),
                                             sx_cg_scalar_like(g, x, 0.5)),
                                   sx_cg_scalar_like(g, x, 0)),
                         sx_cg_scalar_like(g, x, 1));
    case SX_ACT_TANH:
        return sx_cg_tanh(g, x);
    case SX_ACT_SOFTPLUS:
        return sx_cg_softplus(g, x);
    case SX_ACT_SOFTSIGN:
        return sx_cg_div(g, x, sx_cg_add(g, sx_cg_abs(g, x), sx_cg_scalar_like(g, x, 1)));
    case SX_ACT_SOFTMAX:
        return sx_cg_softmax(g, x, -1);
    case SX_ACT_GELU:
        return sx_cg_gelu(g, x);
    case SX_ACT_GELU_TANH:
        return sx_cg_gelu_tanh(g, x);
    case SX_ACT_SILU:
        return sx_cg_silu(g, x);
    case SX_ACT_MISH:
        return sx_cg_mish(g, x);
    case SX_ACT_HARD_SWISH:
        return sx_cg_hard_swish(g, x);
    case SX_ACT_COUNT:
        break;
    }
    return NULL;
}

sx_cg_node *nn_activate_last(sx_cg_graph *g, sx_cg_node *y, sx_nn_act act, double param,
                             sx_cg_node **pre_softmax)
{
    if (act == SX_ACT_SOFTMAX)
        *pre_softmax = y;
    return nn_activate(g, y, act, param);
}

/* ---------------------------------------------------------------- the activation layer */

typedef struct act_attr {
    sx_nn_act act;
    double param; /* leaky_relu's slope, elu's alpha */
} act_attr;

static sx_cg_node *act_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                               sx_cg_node **pre_softmax)
{
    const act_attr *a = l->attr;
    return nn_activate_last(b->g, in[0], a->act, a->param, pre_softmax);
}

static void act_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const act_attr *a = l->attr;
    if (a->act == SX_ACT_LEAKY_RELU || a->act == SX_ACT_ELU)
        snprintf(buf, size, "%s %g", sx_nn_act_name(a->act), a->param);
    else
        snprintf(buf, size, "%s", sx_nn_act_name(a->act));
}

const nn_layer_ops nn_activation_ops = {"activation", sizeof(act_attr), act_forward, act_describe};

static sx_nn_layer *activation(sx_nn_net *net, const char *who, sx_nn_layer *in, sx_nn_act act,
                               double param)
{
    sx_nn_layer *l = nn_layer_begin(net, who, L_ACT, 1, &in);
    if (l == NULL)
        return NULL;
    act_attr *a = l->attr;
    a->act = act;
    a->param = param;
    sx_status s = !nn_act_ok(act)    ? sx_error(SX_E_ARG, "%s: unknown activation", l->name)
                  : !isfinite(param) ? sx_error(SX_E_ARG, "%s: %s with parameter %g", l->name,
                                                sx_nn_act_name(act), param)
                                     : SX_OK;
    return nn_layer_finish(net, who, l, s);
}

sx_nn_layer *sx_nn_activation_ex(sx_nn_net *net, sx_nn_layer *in, sx_nn_act act, double param)
{
    return activation(net, "sx_nn_activation_ex", in, act, param);
}

sx_nn_layer *sx_nn_activation(sx_nn_net *net, sx_nn_layer *in, sx_nn_act act)
{
    return activation(net, "sx_nn_activation", in, act, nn_act_default_param(act));
}

/* ---------------------------------------------------------------- PReLU */

/* where(x > 0, x, alpha x), alpha (c) broadcast over the last axis of x (batch, ..., c) */
static sx_cg_node *prelu_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                 sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    sx_cg_graph *g = b->g;
    sx_cg_node *x = in[0], *alpha = nn_param_node_of(b, l, 0);
    return sx_cg_where(g, sx_cg_gt(g, x, sx_cg_scalar_like(g, x, 0.0)), x, sx_cg_mul(g, x, alpha));
}

static void prelu_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "%lld slopes", (long long)nn_param_value(&l->params[0])->size);
}

const nn_layer_ops nn_prelu_ops = {"prelu", 0, prelu_forward, prelu_describe};

sx_nn_layer *sx_nn_prelu(sx_nn_net *net, sx_nn_layer *in, double init)
{
    const char *who = "sx_nn_prelu";
    sx_nn_layer *l = nn_layer_begin(net, who, L_PRELU, 1, &in);
    if (l == NULL)
        return NULL;
    int64_t cs[1] = {in->rank > 0 ? in->shape[in->rank - 1] : 1};
    sx_status s = isfinite(init)
                      ? nn_layer_add_param(net, l, "alpha", 1, cs, init, 0, 0, true, false)
                      : sx_error(SX_E_ARG, "%s: initial slope %g", l->name, init);
    return nn_layer_finish(net, who, l, s);
}
