/* net.c: networks and their layers. Each constructor checks its input, computes the output
 * shape (batch axis excluded), creates and initialises its weights from the network's seeded
 * generator, and appends the layer; a failure leaves the network as it was. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[L_KIND_COUNT] = {"input",
                                                     "conv2d",
                                                     "max_pool2d",
                                                     "avg_pool2d",
                                                     "global_max_pool",
                                                     "global_avg_pool",
                                                     "dropout",
                                                     "dense",
                                                     "activation",
                                                     "batch_norm",
                                                     "reshape",
                                                     "padding2d",
                                                     "upsampling2d",
                                                     "lambda",
                                                     "add",
                                                     "mul",
                                                     "max",
                                                     "average",
                                                     "concatenate"};

static const char *const act_names[SX_ACT_COUNT] = {
    "none",         "relu", "relu6",    "leaky_relu", "elu",    "sigmoid",
    "hard_sigmoid", "tanh", "softplus", "softsign",   "softmax"};

const char *sx_nn_act_name(sx_nn_act a)
{
    return (unsigned)a < SX_ACT_COUNT ? act_names[a] : "bad-activation";
}

sx_status sx_nn_net_new(const char *name, sx_dtype dtype, uint64_t seed, sx_nn_net **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "sx_nn_net_new: out is NULL");
    *out = NULL;
    if (dtype != SX_F32 && dtype != SX_F64)
        return sx_error(SX_E_DTYPE, "sx_nn_net_new: unknown dtype %d", (int)dtype);
    sx_nn_net *n = sx_calloc(1, sizeof *n);
    if (n == NULL)
        return SX_E_NOMEM;
    snprintf(n->name, sizeof n->name, "%s", name ? name : "net");
    n->dtype = dtype;
    n->seed = seed;
    n->input_scale = SX_DS_PIXEL_SCALE;
    sx_rng_seed(&n->init_rng, seed);
    sx_rng_seed(&n->dropout_rng, seed ^ 0x5bd1e9955bd1e995ULL);
    *out = n;
    return SX_OK;
}

static void layer_free(sx_nn_layer *l)
{
    for (int i = 0; i < l->n_params; i++) {
        sx_tensor_free(l->params[i].value);
        for (int k = 0; k < NN_MAX_STATES; k++)
            sx_tensor_free(l->params[i].state[k]);
    }
    sx_free(l);
}

void sx_nn_net_free(sx_nn_net *net)
{
    if (net == NULL)
        return;
    if (net->n_models > 0) { /* the models borrow it: the last one to go frees it */
        net->orphan = true;
        return;
    }
    for (int i = 0; i < net->n_layers; i++)
        layer_free(net->layers[i]);
    sx_free(net->layers);
    sx_free(net);
}

sx_status sx_nn_net_status(const sx_nn_net *net)
{
    return net == NULL ? SX_E_ARG : net->status;
}

const char *sx_nn_net_name(const sx_nn_net *net)
{
    return net != NULL ? net->name : "";
}

void sx_nn_net_set_input_scale(sx_nn_net *net, double scale)
{
    if (net != NULL && isfinite(scale))
        net->input_scale = scale;
}

double sx_nn_net_input_scale(const sx_nn_net *net)
{
    return net != NULL ? net->input_scale : 0;
}

void sx_nn_net_set_init(sx_nn_net *net, sx_nn_init init)
{
    if (net != NULL)
        net->init = init;
}

int64_t sx_nn_net_param_count(const sx_nn_net *net)
{
    int64_t c = 0;
    for (int i = 0; net != NULL && i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            if (net->layers[i]->params[k].trainable)
                c += net->layers[i]->params[k].value->size;
    return c;
}

const char *sx_nn_layer_name(const sx_nn_layer *l)
{
    return l != NULL ? l->name : "";
}

int sx_nn_layer_rank(const sx_nn_layer *l)
{
    return l != NULL ? l->rank : 0;
}

const int64_t *sx_nn_layer_shape(const sx_nn_layer *l)
{
    return l != NULL ? l->shape : NULL;
}

sx_nn_layer *nn_input_layer(const sx_nn_net *net)
{
    return net->n_layers > 0 && net->layers[0]->kind == L_INPUT ? net->layers[0] : NULL;
}

sx_nn_layer *nn_output_layer(const sx_nn_net *net)
{
    return net->n_layers > 0 ? net->layers[net->n_layers - 1] : NULL;
}

void sx_nn_net_print(const sx_nn_net *net, FILE *f)
{
    if (net == NULL || f == NULL)
        return;
    fprintf(f, "network %s\n%-22s %-20s %12s\n", net->name, "layer", "output shape", "params");
    for (int i = 0; i < net->n_layers; i++) {
        const sx_nn_layer *l = net->layers[i];
        char shape[96], full[112];
        int64_t p = 0;
        for (int k = 0; k < l->n_params; k++)
            if (l->params[k].trainable)
                p += l->params[k].value->size;
        sx_shape_str(l->rank, l->shape, shape, sizeof shape);
        snprintf(full, sizeof full, "(batch,%s", shape + 1);
        if (l->rank == 0)
            snprintf(full, sizeof full, "(batch)");
        fprintf(f, "%-22s %-20s %12lld\n", l->name, full, (long long)p);
    }
    fprintf(f, "total parameters: %lld\n", (long long)sx_nn_net_param_count(net));
}

/* ---------------------------------------------------------------- building layers */

/* Record a layer error on the network (the first wins) and return NULL. */
static sx_nn_layer *fail(sx_nn_net *net, sx_status s)
{
    if (net != NULL && net->status == SX_OK)
        net->status = s;
    return NULL;
}

/* Start a layer for the public function `who`: check the net and the inputs (NULL inputs
 * propagate an earlier error). No layer is added while compiled models borrow the network:
 * their graphs and tables were made for the layers it had. */
static sx_nn_layer *begin(sx_nn_net *net, const char *who, nn_kind kind, int n_in,
                          sx_nn_layer *const *in)
{
    if (net == NULL)
        return NULL;
    if (n_in > NN_MAX_IN)
        return fail(net, sx_error(SX_E_ARG, "%s: %d inputs (at most %d)", who, n_in, NN_MAX_IN));
    for (int i = 0; i < n_in; i++)
        if (in == NULL || in[i] == NULL)
            return fail(net, net->status != SX_OK ? net->status
                                                  : sx_error(SX_E_ARG, "%s: input is NULL", who));
    if (net->n_models > 0)
        return fail(net, sx_error(SX_E_STATE,
                                  "%s: network %s has %d compiled model%s alive, which borrow its "
                                  "layers: free them before adding layers",
                                  who, net->name, net->n_models, net->n_models > 1 ? "s" : ""));
    for (int i = 0; i < n_in; i++) {
        bool mine = false;
        for (int k = net->n_layers - 1; k >= 0 && !mine; k--)
            mine = net->layers[k] == in[i];
        if (!mine)
            return fail(net, sx_error(SX_E_ARG, "%s: input %d (%s) is not a layer of network %s",
                                      who, i, in[i]->name, net->name));
    }
    if (kind == L_INPUT && net->n_layers > 0)
        return fail(net, sx_error(SX_E_STATE, "%s: the network already has an input", who));
    if (kind != L_INPUT && net->n_layers == 0)
        return fail(net, sx_error(SX_E_STATE, "%s: add an input layer first", who));
    sx_nn_layer *l = sx_calloc(1, sizeof *l);
    if (l == NULL)
        return fail(net, SX_E_NOMEM);
    l->kind = kind;
    l->n_in = n_in;
    for (int i = 0; i < n_in; i++)
        l->in[i] = in[i];
    snprintf(l->name, sizeof l->name, "%s_%d", kind_names[kind], net->counters[kind] + 1);
    if (n_in > 0) {
        l->rank = in[0]->rank;
        memcpy(l->shape, in[0]->shape, sizeof l->shape);
    }
    return l;
}

/* True when a shape's dims are >= 1 and its element count fits (as sx_shape_check: its bytes
 * in int64, with room for the batch axis to be checked at compile time). */
static bool shape_fits(int rank, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 1 || n > INT64_MAX / 8 / shape[i])
            return false;
        n *= shape[i];
    }
    return true;
}

/* A shape given by the user (input, reshape): rank 1..SX_MAX_RANK-1 (the batch axis is added),
 * dims >= 1, an element count that fits. */
static sx_status user_shape(const char *who, const char *name, int rank, const int64_t *shape)
{
    if (rank < 1 || rank > SX_MAX_RANK - 1)
        return sx_error(SX_E_RANK, "%s: %s: rank %d (want 1..%d)", who, name, rank,
                        SX_MAX_RANK - 1);
    if (shape == NULL)
        return sx_error(SX_E_ARG, "%s: %s: shape is NULL", who, name);
    for (int i = 0; i < rank; i++)
        if (shape[i] < 1)
            return sx_error(SX_E_SHAPE, "%s: %s: dimension %d is %lld (want >= 1)", who, name, i,
                            (long long)shape[i]);
    if (!shape_fits(rank, shape)) {
        char a[200];
        return sx_error(SX_E_SHAPE, "%s: %s: shape %s has too many elements", who, name,
                        sx_shape_str(rank, shape, a, sizeof a));
    }
    return SX_OK;
}

/* Append a finished layer (or free it and record the error, its message prefixed with the
 * public function's name). The output shape is checked here for every kind. */
static sx_nn_layer *finish(sx_nn_net *net, const char *who, sx_nn_layer *l, sx_status s)
{
    if (s == SX_OK &&
        (l->rank < 0 || l->rank > SX_MAX_RANK - 1 || !shape_fits(l->rank, l->shape))) {
        char a[200];
        s = sx_error(SX_E_SHAPE, "%s: %s: output shape %s is empty or has too many elements", who,
                     l->name, sx_shape_str(l->rank, l->shape, a, sizeof a));
    }
    if (s == SX_OK && net->n_layers == net->cap_layers) {
        int cap = net->cap_layers ? net->cap_layers * 2 : 16;
        sx_nn_layer **a = sx_realloc(net->layers, (size_t)cap * sizeof *a);
        if (a == NULL) {
            s = SX_E_NOMEM;
        } else {
            net->layers = a;
            net->cap_layers = cap;
        }
    }
    if (s != SX_OK) {
        const char *msg = sx_last_error();
        if (strncmp(msg, who, strlen(who)) != 0) {
            char copy[512];
            snprintf(copy, sizeof copy, "%s", msg);
            s = sx_error(s, "%s: %s", who, copy);
        }
        layer_free(l);
        return fail(net, s);
    }
    net->counters[l->kind]++;
    net->layers[net->n_layers++] = l;
    return l;
}

static int64_t prod(int rank, const int64_t *shape)
{
    return sx_shape_size(rank, shape);
}

/* Fill w from the initialiser (fan_in, fan_out as for a dense layer of that many units). */
static sx_status init_tensor(sx_nn_net *net, sx_tensor *w, const sx_nn_init *in, int64_t fan_in,
                             int64_t fan_out)
{
    double fi = (double)fan_in, fo = (double)fan_out;
    switch (in->kind) {
    case SX_INIT_ZEROS:
        return sx_tensor_fill(w, 0);
    case SX_INIT_UNIFORM:
        return sx_tensor_rand_uniform(w, &net->init_rng, in->a, in->b);
    case SX_INIT_GAUSSIAN:
        return sx_tensor_rand_normal(w, &net->init_rng, in->a, in->b);
    case SX_INIT_DEFAULT:
    case SX_INIT_GLOROT_UNIFORM: {
        double l = sqrt(6.0 / (fi + fo));
        return sx_tensor_rand_uniform(w, &net->init_rng, -l, l);
    }
    case SX_INIT_GLOROT_NORMAL:
        return sx_tensor_rand_normal(w, &net->init_rng, 0, sqrt(2.0 / (fi + fo)));
    case SX_INIT_LECUN_NORMAL:
        return sx_tensor_rand_normal(w, &net->init_rng, 0, sqrt(1.0 / fi));
    case SX_INIT_HE_NORMAL:
        return sx_tensor_rand_normal(w, &net->init_rng, 0, sqrt(2.0 / fi));
    case SX_INIT_CUSTOM:
        if (in->fn == NULL)
            return sx_error(SX_E_ARG, "initialiser: custom without a function");
        return in->fn(w, fan_in, fan_out, &net->init_rng, in->ctx);
    }
    return sx_error(SX_E_ARG, "initialiser: unknown kind %d", (int)in->kind);
}

/* Add a parameter tensor of the given shape to l, filled with `fill` (or initialised when
 * fill is NAN). */
static sx_status add_param(sx_nn_net *net, sx_nn_layer *l, const char *what, int rank,
                           const int64_t *shape, double fill, int64_t fan_in, int64_t fan_out,
                           bool trainable, bool regularised)
{
    nn_param *p = &l->params[l->n_params];
    SX_TRY(sx_tensor_new(net->dtype, rank, shape, &p->value));
    l->n_params++;
    snprintf(p->name, sizeof p->name, "%s.%s", l->name, what);
    p->trainable = trainable;
    p->regularised = regularised;
    if (isnan(fill))
        return init_tensor(net, p->value, &net->init, fan_in, fan_out);
    return sx_tensor_fill(p->value, fill);
}

static bool act_ok(sx_nn_act act)
{
    return (unsigned)act < SX_ACT_COUNT;
}

/* The parameter an activation takes when none is given: leaky_relu's slope, elu's alpha. */
static double act_default_param(sx_nn_act act)
{
    return act == SX_ACT_LEAKY_RELU ? 0.01 : act == SX_ACT_ELU ? 1.0 : 0.0;
}

sx_nn_layer *sx_nn_input(sx_nn_net *net, int rank, const int64_t *shape)
{
    const char *who = "sx_nn_input";
    sx_nn_layer *l = begin(net, who, L_INPUT, 0, NULL);
    if (l == NULL)
        return NULL;
    sx_status s = user_shape(who, l->name, rank, shape);
    if (s == SX_OK) {
        l->rank = rank;
        memcpy(l->shape, shape, (size_t)rank * sizeof *shape);
    }
    return finish(net, who, l, s);
}

sx_nn_layer *sx_nn_conv2d(sx_nn_net *net, sx_nn_layer *in, int kh, int kw, int filters, int stride,
                          sx_padding padding, sx_nn_act act)
{
    const char *who = "sx_nn_conv2d";
    sx_nn_layer *l = begin(net, who, L_CONV2D, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    int64_t ks[4] = {kh, kw, in->rank == 3 ? in->shape[2] : 1, filters};
    if (in->rank != 3)
        s = sx_error(SX_E_RANK, "%s: input has rank %d, want (h,w,c)", l->name, in->rank);
    else if (kh < 1 || kw < 1 || filters < 1 || stride < 1 || !act_ok(act) ||
             (padding != SX_PAD_SAME && padding != SX_PAD_VALID))
        s = sx_error(SX_E_ARG, "%s: bad kernel %dx%d, filters %d, stride %d or activation", l->name,
                     kh, kw, filters, stride);
    else if (!shape_fits(4, ks))
        s = sx_error(SX_E_SHAPE,
                     "%s: kernel %d x %d x %lld channels x %d filters has too many "
                     "elements",
                     l->name, kh, kw, (long long)ks[2], filters);
    if (s == SX_OK) {
        int64_t xs[4] = {1, in->shape[0], in->shape[1], in->shape[2]}, ys[4];
        sx_tensor xv = sx_tensor_view(net->dtype, 4, xs, NULL);
        sx_tensor kv = sx_tensor_view(net->dtype, 4, ks, NULL);
        sx_conv2d_params cp = {stride, stride, padding};
        s = sx_conv2d_shape(l->name, &xv, &kv, &cp, ys);
        if (s == SX_OK) {
            l->kh = kh, l->kw = kw, l->stride = stride, l->padding = padding, l->act = act;
            l->act_param = act_default_param(act);
            l->rank = 3;
            l->shape[0] = ys[1], l->shape[1] = ys[2], l->shape[2] = ys[3];
            int64_t fan_in = (int64_t)kh * kw * in->shape[2], fan_out = (int64_t)kh * kw * filters;
            int64_t bs[1] = {filters};
            s = add_param(net, l, "kernel", 4, ks, (double)NAN, fan_in, fan_out, true, true);
            if (s == SX_OK)
                s = add_param(net, l, "bias", 1, bs, 0, 0, 0, true, false);
        }
    }
    return finish(net, who, l, s);
}

static sx_nn_layer *pool(sx_nn_net *net, const char *who, nn_kind kind, sx_nn_layer *in, int kh,
                         int kw, int stride, sx_padding padding)
{
    sx_nn_layer *l = begin(net, who, kind, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    if (in->rank != 3)
        s = sx_error(SX_E_RANK, "%s: input has rank %d, want (h,w,c)", l->name, in->rank);
    if (s == SX_OK) {
        int64_t xs[4] = {1, in->shape[0], in->shape[1], in->shape[2]}, ys[4];
        sx_tensor xv = sx_tensor_view(net->dtype, 4, xs, NULL);
        sx_pool2d_params pp = {kh, kw, stride, stride, padding};
        s = sx_pool2d_shape(l->name, &xv, &pp, ys);
        if (s == SX_OK) {
            l->kh = kh, l->kw = kw, l->stride = stride, l->padding = padding;
            l->shape[0] = ys[1], l->shape[1] = ys[2], l->shape[2] = ys[3];
        }
    }
    return finish(net, who, l, s);
}

sx_nn_layer *sx_nn_max_pool2d(sx_nn_net *net, sx_nn_layer *in, int kh, int kw, int stride,
                              sx_padding padding)
{
    return pool(net, "sx_nn_max_pool2d", L_MAXPOOL, in, kh, kw, stride, padding);
}

sx_nn_layer *sx_nn_avg_pool2d(sx_nn_net *net, sx_nn_layer *in, int kh, int kw, int stride,
                              sx_padding padding)
{
    return pool(net, "sx_nn_avg_pool2d", L_AVGPOOL, in, kh, kw, stride, padding);
}

static sx_nn_layer *global_pool(sx_nn_net *net, const char *who, nn_kind kind, sx_nn_layer *in)
{
    sx_nn_layer *l = begin(net, who, kind, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    if (in->rank != 3)
        s = sx_error(SX_E_RANK, "%s: input has rank %d, want (h,w,c)", l->name, in->rank);
    l->rank = 1;
    l->shape[0] = in->shape[in->rank > 0 ? in->rank - 1 : 0];
    return finish(net, who, l, s);
}

sx_nn_layer *sx_nn_global_max_pool(sx_nn_net *net, sx_nn_layer *in)
{
    return global_pool(net, "sx_nn_global_max_pool", L_GMAXPOOL, in);
}

sx_nn_layer *sx_nn_global_avg_pool(sx_nn_net *net, sx_nn_layer *in)
{
    return global_pool(net, "sx_nn_global_avg_pool", L_GAVGPOOL, in);
}

sx_nn_layer *sx_nn_dropout(sx_nn_net *net, sx_nn_layer *in, double rate)
{
    const char *who = "sx_nn_dropout";
    sx_nn_layer *l = begin(net, who, L_DROPOUT, 1, &in);
    if (l == NULL)
        return NULL;
    l->rate = rate;
    sx_status s = rate >= 0 && rate < 1
                      ? SX_OK
                      : sx_error(SX_E_ARG, "%s: rate %g (want 0 <= rate < 1)", l->name, rate);
    return finish(net, who, l, s);
}

static sx_nn_layer *dense(sx_nn_net *net, const char *who, sx_nn_layer *in, int64_t units,
                          sx_nn_act act, bool flatten, bool bias)
{
    sx_nn_layer *l = begin(net, who, L_DENSE, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    int64_t k = flatten ? prod(in->rank, in->shape) : in->rank > 0 ? in->shape[in->rank - 1] : 1;
    int64_t ws[2] = {k, units}, bs[1] = {units};
    if (!flatten && in->rank < 1)
        s = sx_error(SX_E_RANK, "%s: input of rank 0 (a dense layer over the last axis needs one)",
                     l->name);
    else if (units < 1 || !act_ok(act))
        s = sx_error(SX_E_ARG, "%s: %lld units or bad activation", l->name, (long long)units);
    else if (!shape_fits(2, ws))
        s = sx_error(SX_E_SHAPE, "%s: weight of %lld inputs x %lld units has too many elements",
                     l->name, (long long)k, (long long)units);
    if (s == SX_OK) {
        l->flatten = flatten;
        l->act = act;
        l->act_param = act_default_param(act);
        if (flatten || l->rank == 0) {
            l->rank = 1;
            l->shape[0] = units;
        } else {
            l->shape[l->rank - 1] = units;
        }
        s = add_param(net, l, "weight", 2, ws, (double)NAN, k, units, true, true);
        if (s == SX_OK && bias)
            s = add_param(net, l, "bias", 1, bs, 0, 0, 0, true, false);
    }
    return finish(net, who, l, s);
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

static sx_nn_layer *activation(sx_nn_net *net, const char *who, sx_nn_layer *in, sx_nn_act act,
                               double param)
{
    sx_nn_layer *l = begin(net, who, L_ACT, 1, &in);
    if (l == NULL)
        return NULL;
    l->act = act;
    l->act_param = param;
    sx_status s = !act_ok(act)       ? sx_error(SX_E_ARG, "%s: unknown activation", l->name)
                  : !isfinite(param) ? sx_error(SX_E_ARG, "%s: %s with parameter %g", l->name,
                                                sx_nn_act_name(act), param)
                                     : SX_OK;
    return finish(net, who, l, s);
}

sx_nn_layer *sx_nn_activation_ex(sx_nn_net *net, sx_nn_layer *in, sx_nn_act act, double param)
{
    return activation(net, "sx_nn_activation_ex", in, act, param);
}

sx_nn_layer *sx_nn_activation(sx_nn_net *net, sx_nn_layer *in, sx_nn_act act)
{
    return activation(net, "sx_nn_activation", in, act, act_default_param(act));
}

sx_nn_layer *sx_nn_batch_norm(sx_nn_net *net, sx_nn_layer *in, double momentum, double eps)
{
    const char *who = "sx_nn_batch_norm";
    sx_nn_layer *l = begin(net, who, L_BATCHNORM, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = in->rank < 1
                      ? sx_error(SX_E_RANK, "%s: input of rank 0 (no channel axis)", l->name)
                  : momentum >= 0 && momentum < 1 && eps > 0 && isfinite(eps)
                      ? SX_OK
                      : sx_error(SX_E_ARG, "%s: momentum %g (want 0 <= m < 1), eps %g (want > 0)",
                                 l->name, momentum, eps);
    l->momentum = momentum;
    l->eps = eps;
    int64_t c[1] = {in->rank > 0 ? in->shape[in->rank - 1] : 1};
    if (s == SX_OK)
        s = add_param(net, l, "gamma", 1, c, 1, 0, 0, true, false);
    if (s == SX_OK)
        s = add_param(net, l, "beta", 1, c, 0, 0, 0, true, false);
    if (s == SX_OK)
        s = add_param(net, l, "running_mean", 1, c, 0, 0, 0, false, false);
    if (s == SX_OK)
        s = add_param(net, l, "running_var", 1, c, 1, 0, 0, false, false);
    return finish(net, who, l, s);
}

static sx_nn_layer *reshape(sx_nn_net *net, const char *who, sx_nn_layer *in, int rank,
                            const int64_t *shape)
{
    sx_nn_layer *l = begin(net, who, L_RESHAPE, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = user_shape(who, l->name, rank, shape);
    if (s == SX_OK && prod(rank, shape) != prod(in->rank, in->shape)) {
        char a[96], b[96];
        s = sx_error(SX_E_SHAPE, "%s: cannot reshape %s to %s", l->name,
                     sx_shape_str(in->rank, in->shape, a, sizeof a),
                     sx_shape_str(rank, shape, b, sizeof b));
    }
    if (s == SX_OK) {
        l->rank = rank;
        memcpy(l->shape, shape, (size_t)rank * sizeof *shape);
    }
    return finish(net, who, l, s);
}

sx_nn_layer *sx_nn_reshape(sx_nn_net *net, sx_nn_layer *in, int rank, const int64_t *shape)
{
    return reshape(net, "sx_nn_reshape", in, rank, shape);
}

sx_nn_layer *sx_nn_flatten(sx_nn_net *net, sx_nn_layer *in)
{
    int64_t n[1] = {in != NULL ? prod(in->rank, in->shape) : 1};
    return reshape(net, "sx_nn_flatten", in, 1, n);
}

sx_nn_layer *sx_nn_padding2d(sx_nn_net *net, sx_nn_layer *in, int top, int bottom, int left,
                             int right)
{
    const char *who = "sx_nn_padding2d";
    sx_nn_layer *l = begin(net, who, L_PAD2D, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = in->rank != 3
                      ? sx_error(SX_E_RANK, "%s: input rank %d, want (h,w,c)", l->name, in->rank)
                  : top < 0 || bottom < 0 || left < 0 || right < 0
                      ? sx_error(SX_E_ARG, "%s: negative padding", l->name)
                      : SX_OK;
    l->pads[0] = top, l->pads[1] = bottom, l->pads[2] = left, l->pads[3] = right;
    if (s == SX_OK) {
        /* in int64, from int pads and dims that fit: no overflow */
        l->shape[0] = in->shape[0] + (int64_t)top + bottom;
        l->shape[1] = in->shape[1] + (int64_t)left + right;
        if (!shape_fits(3, l->shape)) {
            char a[96], b[96];
            s = sx_error(SX_E_SHAPE,
                         "%s: padding %s by top %d, bottom %d, left %d, right %d gives %s: too "
                         "many elements",
                         l->name, sx_shape_str(in->rank, in->shape, a, sizeof a), top, bottom, left,
                         right, sx_shape_str(3, l->shape, b, sizeof b));
        }
    }
    return finish(net, who, l, s);
}

sx_nn_layer *sx_nn_upsampling2d(sx_nn_net *net, sx_nn_layer *in, int fh, int fw)
{
    const char *who = "sx_nn_upsampling2d";
    sx_nn_layer *l = begin(net, who, L_UPSAMPLE, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = in->rank != 3
                      ? sx_error(SX_E_RANK, "%s: input rank %d, want (h,w,c)", l->name, in->rank)
                  : fh < 1 || fw < 1 ? sx_error(SX_E_ARG, "%s: factors %d x %d", l->name, fh, fw)
                                     : SX_OK;
    l->up[0] = fh, l->up[1] = fw;
    if (s == SX_OK) {
        bool fits = in->shape[0] <= INT64_MAX / fh && in->shape[1] <= INT64_MAX / fw;
        if (fits) {
            l->shape[0] = in->shape[0] * fh;
            l->shape[1] = in->shape[1] * fw;
            fits = shape_fits(3, l->shape);
        }
        if (!fits) {
            char a[96];
            s = sx_error(SX_E_SHAPE, "%s: upsampling %s by %d x %d gives too many elements",
                         l->name, sx_shape_str(in->rank, in->shape, a, sizeof a), fh, fw);
        }
    }
    return finish(net, who, l, s);
}

sx_nn_layer *sx_nn_lambda(sx_nn_net *net, sx_nn_layer *in, sx_nn_lambda_fn fn, void *ctx,
                          const char *name)
{
    const char *who = "sx_nn_lambda";
    sx_nn_layer *l = begin(net, who, L_LAMBDA, 1, &in);
    if (l == NULL)
        return NULL;
    l->fn = fn;
    l->ctx = ctx;
    if (name != NULL)
        snprintf(l->name, sizeof l->name, "%s", name);
    sx_status s = fn ? SX_OK : sx_error(SX_E_ARG, "%s: no function", l->name);
    if (s == SX_OK) {
        /* find the output shape by building the function once on a throwaway graph */
        sx_cg_graph *g = NULL;
        s = sx_cg_graph_new(SX_CG_LAZY, net->dtype, &g);
        if (s == SX_OK) {
            int64_t xs[SX_MAX_RANK];
            xs[0] = 1;
            memcpy(xs + 1, in->shape, (size_t)in->rank * sizeof *xs);
            sx_cg_node *x = sx_cg_input(g, "x", net->dtype, in->rank + 1, xs);
            sx_cg_node *y = x ? fn(g, x, ctx) : NULL;
            if (y == NULL) {
                s = sx_cg_graph_status(g) != SX_OK
                        ? sx_cg_graph_status(g)
                        : sx_error(SX_E_ARG, "%s: the function returned NULL", l->name);
            } else if (sx_cg_node_rank(y) < 1 || sx_cg_node_shape(y)[0] != 1) {
                s = sx_error(SX_E_SHAPE, "%s: the function must keep the batch axis first",
                             l->name);
            } else {
                l->rank = sx_cg_node_rank(y) - 1;
                memcpy(l->shape, sx_cg_node_shape(y) + 1, (size_t)l->rank * sizeof *l->shape);
            }
            sx_cg_graph_free(g);
        }
    }
    return finish(net, who, l, s);
}

static sx_nn_layer *merge(sx_nn_net *net, const char *who, nn_kind kind, int n,
                          sx_nn_layer *const *in)
{
    if (n < 2) {
        if (net != NULL)
            fail(net, sx_error(SX_E_ARG, "%s: %d inputs (want >= 2)", who, n));
        return NULL;
    }
    sx_nn_layer *l = begin(net, who, kind, n, in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    int last = in[0]->rank - 1;
    if (kind == L_CONCAT && last < 0)
        s = sx_error(SX_E_RANK, "%s: inputs of rank 0 (nothing to concatenate along)", l->name);
    for (int i = 1; i < n && s == SX_OK; i++) {
        bool ok = in[i]->rank == in[0]->rank;
        for (int d = 0; ok && d < in[0]->rank; d++)
            ok = in[i]->shape[d] == in[0]->shape[d] || (kind == L_CONCAT && d == last);
        if (!ok) {
            char a[96], b[96];
            s = sx_error(SX_E_SHAPE, "%s: inputs of shapes %s and %s", l->name,
                         sx_shape_str(in[0]->rank, in[0]->shape, a, sizeof a),
                         sx_shape_str(in[i]->rank, in[i]->shape, b, sizeof b));
        } else if (kind == L_CONCAT && last >= 0) {
            if (l->shape[last] > INT64_MAX / 8 - in[i]->shape[last])
                s = sx_error(SX_E_SHAPE, "%s: last axes of %lld + %lld: too many elements", l->name,
                             (long long)l->shape[last], (long long)in[i]->shape[last]);
            else
                l->shape[last] += in[i]->shape[last];
        }
    }
    return finish(net, who, l, s);
}

sx_nn_layer *sx_nn_add(sx_nn_net *net, int n, sx_nn_layer *const *in)
{
    return merge(net, "sx_nn_add", L_ADD, n, in);
}

sx_nn_layer *sx_nn_mul(sx_nn_net *net, int n, sx_nn_layer *const *in)
{
    return merge(net, "sx_nn_mul", L_MUL, n, in);
}

sx_nn_layer *sx_nn_max(sx_nn_net *net, int n, sx_nn_layer *const *in)
{
    return merge(net, "sx_nn_max", L_MAX, n, in);
}

sx_nn_layer *sx_nn_average(sx_nn_net *net, int n, sx_nn_layer *const *in)
{
    return merge(net, "sx_nn_average", L_AVERAGE, n, in);
}

sx_nn_layer *sx_nn_concatenate(sx_nn_net *net, int n, sx_nn_layer *const *in)
{
    return merge(net, "sx_nn_concatenate", L_CONCAT, n, in);
}
