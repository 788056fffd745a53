/* forward.c: a network's forward pass as graph nodes. One function per layer kind, called in
 * layer order; parameters become graph parameters that borrow the network's tensors, so every
 * graph built from one network shares its weights. */
#include "nn_impl.h"

#include <string.h>

sx_cg_node *nn_param_node(nn_build *b, const sx_nn_net *net, int layer, int param)
{
    (void)net;
    return b->param_nodes ? b->param_nodes[layer * NN_MAX_PARAMS + param] : NULL;
}

static sx_cg_node *param(nn_build *b, int li, sx_nn_layer *l, int k)
{
    sx_cg_node **slot = &b->param_nodes[li * NN_MAX_PARAMS + k];
    if (*slot == NULL)
        *slot = sx_cg_param_borrow(b->g, l->params[k].name, l->params[k].value);
    return *slot;
}

static sx_status push(sx_cg_node ***arr, int *n, int *cap, sx_cg_node *x)
{
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 8;
        sx_cg_node **a = sx_realloc(*arr, (size_t)c * sizeof *a);
        if (a == NULL)
            return SX_E_NOMEM;
        *arr = a;
        *cap = c;
    }
    (*arr)[(*n)++] = x;
    return SX_OK;
}

void nn_build_free(nn_build *b)
{
    sx_free(b->masks);
    sx_free(b->updates);
    sx_free(b->param_nodes);
    b->masks = b->updates = b->param_nodes = NULL;
}

/* y = act(x) */
static sx_cg_node *activate(sx_cg_graph *g, sx_cg_node *x, sx_nn_act act, double param)
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
    case SX_ACT_COUNT:
        break;
    }
    return NULL;
}

/* x with the batch axis and the layer's shape, (batch, ...) */
static int64_t *batch_shape(const sx_cg_node *x, const sx_nn_layer *l, int64_t *buf)
{
    buf[0] = sx_cg_node_shape(x)[0];
    memcpy(buf + 1, l->shape, (size_t)l->rank * sizeof *buf);
    return buf;
}

static sx_cg_node *layer_forward(sx_nn_net *net, nn_build *b, int li, sx_cg_node *const *in,
                                 sx_cg_node **pre_act)
{
    sx_cg_graph *g = b->g;
    sx_nn_layer *l = net->layers[li];
    sx_cg_node *x = in[0], *y = NULL;
    int64_t s[SX_MAX_RANK];
    *pre_act = NULL;
    switch (l->kind) {
    case L_INPUT:
        return x;
    case L_CONV2D: {
        sx_conv2d_params cp = {l->stride, l->stride, l->padding};
        y = sx_cg_add(g, sx_cg_conv2d(g, x, param(b, li, l, 0), &cp), param(b, li, l, 1));
        *pre_act = y;
        return activate(g, y, l->act, l->act_param);
    }
    case L_MAXPOOL:
    case L_AVGPOOL: {
        sx_pool2d_params pp = {l->kh, l->kw, l->stride, l->stride, l->padding};
        return l->kind == L_MAXPOOL ? sx_cg_maxpool2d(g, x, &pp) : sx_cg_avgpool2d(g, x, &pp);
    }
    case L_GMAXPOOL:
        return sx_cg_reduce_max(g, x, SX_AXIS(1) | SX_AXIS(2), false);
    case L_GAVGPOOL:
        return sx_cg_mean(g, x, SX_AXIS(1) | SX_AXIS(2), false);
    case L_DROPOUT: {
        if (b->mode == NN_INFER || l->rate == 0)
            return x;
        sx_cg_node *m =
            sx_cg_dropout_mask(g, b->rng_id, l->rate, sx_cg_node_rank(x), sx_cg_node_shape(x));
        if (m == NULL || (b->err = push(&b->masks, &b->n_masks, &b->cap_masks, m)) != SX_OK)
            return NULL;
        return sx_cg_mul(g, x, m);
    }
    case L_DENSE: {
        sx_cg_node *a = x;
        if (l->flatten && sx_cg_node_rank(x) != 2) {
            int64_t fs[2] = {-1, sx_cg_node_size(x) / sx_cg_node_shape(x)[0]};
            a = sx_cg_reshape(g, x, 2, fs);
        }
        y = sx_cg_matmul(g, a, param(b, li, l, 0), false, false);
        if (l->n_params > 1)
            y = sx_cg_add(g, y, param(b, li, l, 1));
        *pre_act = y;
        return activate(g, y, l->act, l->act_param);
    }
    case L_ACT:
        *pre_act = x;
        return activate(g, x, l->act, l->act_param);
    case L_BATCHNORM: {
        int r = sx_cg_node_rank(x);
        unsigned axes = 0;
        for (int i = 0; i < r - 1; i++)
            axes |= SX_AXIS(i);
        sx_cg_node *gamma = param(b, li, l, 0), *beta = param(b, li, l, 1);
        sx_cg_node *rm = param(b, li, l, 2), *rv = param(b, li, l, 3);
        sx_cg_node *mean, *var;
        if (b->mode == NN_TRAIN) {
            mean = sx_cg_mean(g, x, axes, false);
            var = sx_cg_mean(g, sx_cg_sqr(g, sx_cg_sub(g, x, mean)), axes, false);
            /* running <- m running + (1 - m) batch; the running variance takes the unbiased
             * batch variance (times count / (count - 1)), as PyTorch and Keras do, while the
             * batch is normalised with the biased one */
            double count = (double)(sx_cg_node_size(x) / sx_cg_node_shape(x)[r - 1]);
            double unbias = count > 1 ? count / (count - 1) : 1.0;
            sx_cg_node *um = sx_cg_assign(
                g, rm,
                sx_cg_add(g, sx_cg_mul(g, sx_cg_scalar_like(g, x, l->momentum), rm),
                          sx_cg_mul(g, sx_cg_scalar_like(g, x, 1 - l->momentum), mean)));
            sx_cg_node *uv = sx_cg_assign(
                g, rv,
                sx_cg_add(g, sx_cg_mul(g, sx_cg_scalar_like(g, x, l->momentum), rv),
                          sx_cg_mul(g, sx_cg_scalar_like(g, x, (1 - l->momentum) * unbias), var)));
            if (um == NULL || uv == NULL ||
                (b->err = push(&b->updates, &b->n_updates, &b->cap_updates, um)) != SX_OK ||
                (b->err = push(&b->updates, &b->n_updates, &b->cap_updates, uv)) != SX_OK)
                return NULL;
        } else {
            mean = rm;
            var = rv;
        }
        sx_cg_node *xhat =
            sx_cg_mul(g, sx_cg_sub(g, x, mean),
                      sx_cg_rsqrt(g, sx_cg_add(g, var, sx_cg_scalar_like(g, x, l->eps))));
        return sx_cg_add(g, sx_cg_mul(g, xhat, gamma), beta);
    }
    case L_RESHAPE: {
        batch_shape(x, l, s);
        s[0] = -1;
        return sx_cg_reshape(g, x, l->rank + 1, s);
    }
    case L_PAD2D: {
        int64_t before[4] = {0, l->pads[0], l->pads[2], 0},
                after[4] = {0, l->pads[1], l->pads[3], 0};
        return sx_cg_pad(g, x, before, after, 0);
    }
    case L_UPSAMPLE: {
        int64_t reps[4] = {1, l->up[0], l->up[1], 1};
        return sx_cg_repeat(g, x, reps);
    }
    case L_LAMBDA:
        return l->fn(g, x, l->ctx);
    case L_ADD:
    case L_MUL:
    case L_MAX:
    case L_AVERAGE:
        y = in[0];
        for (int i = 1; i < l->n_in; i++)
            y = l->kind == L_MUL   ? sx_cg_mul(g, y, in[i])
                : l->kind == L_MAX ? sx_cg_max(g, y, in[i])
                                   : sx_cg_add(g, y, in[i]);
        if (l->kind == L_AVERAGE)
            y = sx_cg_mul(g, y, sx_cg_scalar_like(g, y, 1.0 / l->n_in));
        return y;
    case L_CONCAT:
        return sx_cg_concat(g, l->n_in, in, -1);
    case L_KIND_COUNT:
        break;
    }
    return NULL;
}

static int layer_index(const sx_nn_net *net, const sx_nn_layer *l)
{
    for (int i = 0; i < net->n_layers; i++)
        if (net->layers[i] == l)
            return i;
    return -1;
}

sx_status nn_forward(sx_nn_net *net, nn_build *b, sx_cg_node *x, sx_cg_node **out,
                     sx_cg_node **logits)
{
    if (nn_input_layer(net) == NULL)
        return sx_error(SX_E_STATE, "network %s has no input layer", net->name);
    int n = net->n_layers;
    b->param_nodes = sx_calloc((size_t)n * NN_MAX_PARAMS, sizeof *b->param_nodes);
    sx_cg_node **vals = sx_calloc((size_t)n, sizeof *vals);
    if (b->param_nodes == NULL || vals == NULL) {
        sx_free(vals);
        return SX_E_NOMEM;
    }
    sx_status s = SX_OK;
    sx_cg_node *pre = NULL;
    for (int i = 0; i < n && s == SX_OK; i++) {
        sx_nn_layer *l = net->layers[i];
        sx_cg_node *in[NN_MAX_IN] = {x};
        for (int k = 0; k < l->n_in; k++) {
            int j = layer_index(net, l->in[k]);
            if (j < 0 || j >= i) {
                s = sx_error(SX_E_ARG, "%s: input %d is not an earlier layer of %s", l->name, k,
                             net->name);
                break;
            }
            in[k] = vals[j];
        }
        if (s != SX_OK)
            break;
        s = sx_cg_scope_set(b->g, l->name); /* the profile's time per layer */
        if (s != SX_OK)
            break;
        vals[i] = layer_forward(net, b, i, in, &pre);
        if (vals[i] == NULL) {
            s = sx_cg_graph_status(b->g);
            if (s == SX_OK)
                s = b->err;
            if (s == SX_OK)
                s = sx_error(SX_E_STATE, "%s: the layer could not be built", l->name);
        }
    }
    if (s == SX_OK)
        s = sx_cg_scope_set(b->g, NULL);
    if (s == SX_OK) {
        sx_nn_layer *last = net->layers[n - 1];
        *out = vals[n - 1];
        *logits = last->act == SX_ACT_SOFTMAX && pre != NULL &&
                          (last->kind == L_DENSE || last->kind == L_CONV2D || last->kind == L_ACT)
                      ? pre
                      : vals[n - 1];
    }
    sx_free(vals);
    return s;
}
