/* norm.c: LayerNorm, GroupNorm and InstanceNorm layers. Each normalises every example
 * by its own statistics (no running averages: training and inference build the same nodes), one
 * norm_stats and one norm op (cgraph/ops/norm.c), then an optional learned gamma and beta. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>

/* The options the three kinds share once checked: the view of x (batch axis included) and eps. */
typedef struct norm_attr {
    int axes;       /* layer norm: trailing axes normalised; else 0 */
    int64_t groups; /* group norm: groups; instance norm: channels; layer norm: 1 */
    double eps;
    bool affine;
} norm_attr;

sx_nn_layer_norm_params sx_nn_layer_norm_params_default(void)
{
    sx_nn_layer_norm_params p = {.axes = 1, .eps = 1e-5, .affine = true};
    return p;
}

sx_nn_group_norm_params sx_nn_group_norm_params_default(void)
{
    sx_nn_group_norm_params p = {.groups = 32, .eps = 1e-5, .affine = true};
    return p;
}

sx_nn_instance_norm_params sx_nn_instance_norm_params_default(void)
{
    sx_nn_instance_norm_params p = {.eps = 1e-5, .affine = false};
    return p;
}

static sx_cg_node *norm_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    const norm_attr *a = l->attr;
    sx_cg_node *gamma = a->affine ? nn_param_node_of(b, l, 0) : NULL;
    sx_cg_node *beta = a->affine ? nn_param_node_of(b, l, 1) : NULL;
    if (a->affine && (gamma == NULL || beta == NULL))
        return NULL;
    if (l->kind == L_LAYERNORM)
        return sx_cg_layer_norm(b->g, in[0], a->axes, gamma, beta, a->eps);
    return sx_cg_group_norm(b->g, in[0], a->groups, gamma, beta, a->eps);
}

static void norm_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const norm_attr *a = l->attr;
    if (l->kind == L_LAYERNORM)
        snprintf(buf, size, "last %d axes eps %g%s", a->axes, a->eps,
                 a->affine ? "" : " no-affine");
    else
        snprintf(buf, size, "%lld groups eps %g%s", (long long)a->groups, a->eps,
                 a->affine ? "" : " no-affine");
}

const nn_layer_ops nn_layer_norm_ops = {"layer_norm", sizeof(norm_attr), norm_forward,
                                        norm_describe};
const nn_layer_ops nn_group_norm_ops = {"group_norm", sizeof(norm_attr), norm_forward,
                                        norm_describe};
const nn_layer_ops nn_instance_norm_ops = {"instance_norm", sizeof(norm_attr), norm_forward,
                                           norm_describe};

/* Check the options against the input (shape without the batch axis), store them and add gamma
 * (ones) and beta (zeros) of the normalised block's trailing `tail` axes when affine. */
static sx_nn_layer *norm_layer(sx_nn_net *net, const char *who, nn_kind kind, sx_nn_layer *in,
                               norm_attr at, int tail)
{
    sx_nn_layer *l = nn_layer_begin(net, who, kind, 1, &in);
    if (l == NULL)
        return NULL;
    char sb[128];
    int64_t c = in->rank > 0 ? in->shape[in->rank - 1] : 1;
    sx_status s = SX_OK;
    if (!(at.eps > 0) || !isfinite(at.eps))
        s = sx_error(SX_E_ARG, "%s: eps %g (want finite, > 0)", l->name, at.eps);
    else if (kind == L_LAYERNORM && (at.axes < 1 || at.axes > in->rank))
        s = sx_error(SX_E_AXIS, "%s: normalising the last %d axes of an input %s (want 1 to %d)",
                     l->name, at.axes, sx_shape_str(in->rank, in->shape, sb, sizeof sb), in->rank);
    else if (kind != L_LAYERNORM && in->rank < 1)
        s = sx_error(SX_E_RANK, "%s: input of rank 0 (want channels last)", l->name);
    else if (kind == L_GROUPNORM && (at.groups < 1 || c % at.groups != 0))
        s = sx_error(SX_E_ARG, "%s: %lld groups do not divide the %lld channels of an input %s",
                     l->name, (long long)at.groups, (long long)c,
                     sx_shape_str(in->rank, in->shape, sb, sizeof sb));
    if (kind == L_INSTANCENORM)
        at.groups = c;
    *(norm_attr *)l->attr = at;
    const int64_t *ts = in->shape + in->rank - tail;
    if (s == SX_OK && at.affine)
        s = nn_layer_add_param(net, l, "gamma", tail, ts, 1, 0, 0, true, false);
    if (s == SX_OK && at.affine)
        s = nn_layer_add_param(net, l, "beta", tail, ts, 0, 0, 0, true, false);
    return nn_layer_finish(net, who, l, s);
}

sx_nn_layer *sx_nn_layer_norm(sx_nn_net *net, sx_nn_layer *in, const sx_nn_layer_norm_params *p)
{
    sx_nn_layer_norm_params d = sx_nn_layer_norm_params_default();
    if (p == NULL)
        p = &d;
    norm_attr at = {p->axes, 1, p->eps, p->affine};
    int tail = in != NULL && p->axes >= 1 && p->axes <= in->rank ? p->axes : 0;
    return norm_layer(net, "sx_nn_layer_norm", L_LAYERNORM, in, at, tail);
}

sx_nn_layer *sx_nn_group_norm(sx_nn_net *net, sx_nn_layer *in, const sx_nn_group_norm_params *p)
{
    sx_nn_group_norm_params d = sx_nn_group_norm_params_default();
    if (p == NULL)
        p = &d;
    norm_attr at = {0, p->groups, p->eps, p->affine};
    return norm_layer(net, "sx_nn_group_norm", L_GROUPNORM, in, at,
                      in != NULL && in->rank > 0 ? 1 : 0);
}

sx_nn_layer *sx_nn_instance_norm(sx_nn_net *net, sx_nn_layer *in,
                                 const sx_nn_instance_norm_params *p)
{
    sx_nn_instance_norm_params d = sx_nn_instance_norm_params_default();
    if (p == NULL)
        p = &d;
    norm_attr at = {0, 0, p->eps, p->affine};
    return norm_layer(net, "sx_nn_instance_norm", L_INSTANCENORM, in, at,
                      in != NULL && in->rank > 0 ? 1 : 0);
}

int nn_norm_axes(const sx_nn_layer *l)
{
    return l->kind == L_LAYERNORM ? ((const norm_attr *)l->attr)->axes : 0;
}
