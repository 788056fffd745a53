/* net.c: networks, and what every layer kind shares: the table of kinds (layers.def), starting
 * and finishing a layer (checks, names, the output shape's limits), parameters initialised
 * from the network's seeded generator, and what a layer's forward function uses in a build (its
 * parameters' nodes, the nodes it records). The kinds themselves live one family per file
 * (conv2d.c, pool.c, dense.c, ...); a failure leaves the network as it was. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The interface of every kind, indexed by nn_kind. */
static const nn_layer_ops *const kind_ops[L_KIND_COUNT] = {
#define X(kind, ops) [L_##kind] = &ops,
#include "layers.def"
#undef X
};

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
    n->prep.resize = SX_DS_RESIZE_BILINEAR;
    n->prep.in_graph = true;
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
    sx_free(l->attr);
    sx_free(l);
}

/* Preprocessing lives in the network: net.c frees it (preprocess.c builds on net.c). */
void nn_prep_free(nn_prep *p)
{
    if (p == NULL)
        return;
    sx_free(p->mean);
    sx_free(p->std);
    sx_free(p->tmean);
    sx_free(p->tstd);
    for (int64_t k = 0; k < p->n_classes; k++)
        sx_free(p->classes[k]);
    sx_free(p->classes);
    for (int64_t k = 0; k < p->n_features; k++)
        sx_free(p->features[k]);
    sx_free(p->features);
    double scale = p->scale;
    sx_ds_resize resize = p->resize;
    bool in_graph = p->in_graph;
    memset(p, 0, sizeof *p);
    p->scale = scale;
    p->resize = resize;
    p->in_graph = in_graph;
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
    nn_prep_free(&net->prep);
    sx_free(net);
}

sx_status sx_nn_net_status(const sx_nn_net *net)
{
    if (net == NULL)
        return sx_error(SX_E_ARG, "sx_nn_net_status: net is NULL");
    return net->status == SX_OK ? SX_OK : nn_net_refused("sx_nn_net_status", net);
}

sx_status nn_net_refused(const char *who, const sx_nn_net *net)
{
    return sx_error(net->status, "%s: network '%s': %s", who, net->name,
                    net->error[0] != '\0' ? net->error : sx_status_str(net->status));
}

const char *sx_nn_net_name(const sx_nn_net *net)
{
    return net != NULL ? net->name : "";
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
            if (net->layers[i]->params[k].trainable && nn_param_stored(&net->layers[i]->params[k]))
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

void sx_nn_net_print(const sx_nn_net *net, FILE *f)
{
    if (net == NULL || f == NULL)
        return;
    fprintf(f, "network %s\n%-22s %-20s %-40s %12s\n", net->name, "layer", "output shape",
            "options", "params");
    for (int i = 0; i < net->n_layers; i++) {
        const sx_nn_layer *l = net->layers[i];
        char shape[96], full[112];
        int64_t p = 0;
        for (int k = 0; k < l->n_params; k++)
            if (l->params[k].trainable && nn_param_stored(&l->params[k]))
                p += l->params[k].value->size;
        sx_shape_str(l->rank, l->shape, shape, sizeof shape);
        snprintf(full, sizeof full, "(batch,%s", shape + 1);
        if (l->rank == 0)
            snprintf(full, sizeof full, "(batch)");
        char opts[128] = "";
        if (l->ops->describe != NULL)
            l->ops->describe(l, opts, sizeof opts);
        fprintf(f, "%-22s %-20s %-40s %12lld\n", l->name, full, opts, (long long)p);
    }
    fprintf(f, "total parameters: %lld\n", (long long)sx_nn_net_param_count(net));
}

/* ---------------------------------------------------------------- building layers */

/* Record a layer error on the network (the first wins) and return NULL. The cause is kept with
 * it: "layer 'NAME' refused: <sx_last_error()>" (the name the layer would have had; NULL when it
 * is not known yet), so that every later call on the network repeats it. */
static sx_nn_layer *net_refuse(sx_nn_net *net, const char *layer, sx_status s)
{
    if (net == NULL || net->status != SX_OK)
        return NULL;
    net->status = s;
    const char *msg = sx_last_error()[0] != '\0' ? sx_last_error() : sx_status_str(s);
    if (layer != NULL)
        snprintf(net->error, sizeof net->error, "layer '%s' refused: %s", layer, msg);
    else
        snprintf(net->error, sizeof net->error, "a layer was refused: %s", msg);
    return NULL;
}

sx_nn_layer *nn_layer_fail(sx_nn_net *net, sx_status s)
{
    return net_refuse(net, NULL, s);
}

/* Start a layer for the public function `who`: check the net and the inputs (NULL inputs
 * propagate an earlier error). No layer is added while compiled models borrow the network:
 * their graphs and tables were made for the layers it had. */
sx_nn_layer *nn_layer_begin(sx_nn_net *net, const char *who, nn_kind kind, int n_in,
                            sx_nn_layer *const *in)
{
    if (net == NULL)
        return NULL;
    const nn_layer_ops *ops = kind_ops[kind];
    char name[sizeof((sx_nn_layer *)0)->name]; /* the layer's name, for the network's error */
    snprintf(name, sizeof name, "%s_%d", ops->name, net->counters[kind] + 1);
    if (n_in > NN_MAX_IN)
        return net_refuse(net, name,
                          sx_error(SX_E_ARG, "%s: %d inputs (at most %d)", who, n_in, NN_MAX_IN));
    for (int i = 0; i < n_in; i++)
        if (in == NULL || in[i] == NULL)
            return net_refuse(net, name,
                              net->status != SX_OK ? net->status
                                                   : sx_error(SX_E_ARG, "%s: input is NULL", who));
    if (net->n_models > 0)
        return net_refuse(net, name,
                          sx_error(SX_E_STATE,
                                   "%s: network %s has %d compiled model%s alive, which borrow its "
                                   "layers: free them before adding layers",
                                   who, net->name, net->n_models, net->n_models > 1 ? "s" : ""));
    for (int i = 0; i < n_in; i++) {
        bool mine = false;
        for (int k = net->n_layers - 1; k >= 0 && !mine; k--)
            mine = net->layers[k] == in[i];
        if (!mine)
            return net_refuse(net, name,
                              sx_error(SX_E_ARG, "%s: input %d (%s) is not a layer of network %s",
                                       who, i, in[i]->name, net->name));
    }
    if (kind == L_INPUT && net->n_layers > 0 && !net->adding_input)
        return net_refuse(net, name,
                          sx_error(SX_E_STATE,
                                   "%s: the network already has an input (sx_nn_input_add "
                                   "adds another)",
                                   who));
    if (kind != L_INPUT && net->n_layers == 0)
        return net_refuse(net, name, sx_error(SX_E_STATE, "%s: add an input layer first", who));
    sx_nn_layer *l = sx_calloc(1, sizeof *l);
    void *attr = ops->attr_size > 0 ? sx_calloc(1, ops->attr_size) : NULL;
    if (l == NULL || (ops->attr_size > 0 && attr == NULL)) {
        sx_free(l);
        sx_free(attr);
        return net_refuse(net, name, SX_E_NOMEM);
    }
    l->kind = kind;
    l->ops = ops;
    l->attr = attr;
    l->n_in = n_in;
    for (int i = 0; i < n_in; i++)
        l->in[i] = in[i];
    snprintf(l->name, sizeof l->name, "%s", name);
    if (n_in > 0) {
        l->rank = in[0]->rank;
        memcpy(l->shape, in[0]->shape, sizeof l->shape);
    }
    return l;
}

/* True when a shape's dims are >= 1 and its element count fits (as sx_shape_check: its bytes
 * in int64, with room for the batch axis to be checked at compile time). */
bool nn_shape_fits(int rank, const int64_t *shape)
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
sx_status nn_user_shape(const char *who, const char *name, int rank, const int64_t *shape)
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
    if (!nn_shape_fits(rank, shape)) {
        char a[200];
        return sx_error(SX_E_SHAPE, "%s: %s: shape %s has too many elements", who, name,
                        sx_shape_str(rank, shape, a, sizeof a));
    }
    return SX_OK;
}

/* Append a finished layer (or free it and record the error, its message prefixed with the
 * public function's name). The output shape is checked here for every kind. */
sx_nn_layer *nn_layer_finish(sx_nn_net *net, const char *who, sx_nn_layer *l, sx_status s)
{
    if (s == SX_OK &&
        (l->rank < 0 || l->rank > SX_MAX_RANK - 1 || !nn_shape_fits(l->rank, l->shape))) {
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
        char name[sizeof l->name];
        snprintf(name, sizeof name, "%s", l->name);
        layer_free(l);
        return net_refuse(net, name, s);
    }
    net->counters[l->kind]++;
    l->index = net->n_layers;
    net->layers[net->n_layers++] = l;
    return l;
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
sx_status nn_layer_add_param(sx_nn_net *net, sx_nn_layer *l, const char *what, int rank,
                             const int64_t *shape, double fill, int64_t fan_in, int64_t fan_out,
                             bool trainable, bool regularised)
{
    if (l->n_params == NN_MAX_PARAMS) /* a layer kind's bug: raise NN_MAX_PARAMS */
        return sx_error(SX_E_STATE, "%s: a layer keeps at most %d tensors (NN_MAX_PARAMS)", l->name,
                        NN_MAX_PARAMS);
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

/* ---------------------------------------------------------------- what layers record in a build
 *
 * A layer's forward function reads its parameters as graph nodes and records the nodes the
 * step must know (dropout masks, running-statistics assigns) in the build (forward.c). */

sx_cg_node *nn_param_node(nn_build *b, const sx_nn_net *net, int layer, int param)
{
    (void)net;
    return b->param_nodes ? b->param_nodes[layer * NN_MAX_PARAMS + param] : NULL;
}

/* A shared slot reads its source's node (one node per parameter, so that the gradients of every
 * use are summed into it), transposed when asked (the optimiser folds the transpose into the
 * matrix products that read it). */
sx_cg_node *nn_param_node_of(nn_build *b, const sx_nn_layer *l, int k)
{
    sx_cg_node **slot = &b->param_nodes[l->index * NN_MAX_PARAMS + k];
    const nn_param *p = &l->params[k];
    if (*slot == NULL && nn_param_stored(p))
        *slot = sx_cg_param_borrow(b->g, p->name, p->value);
    else if (*slot == NULL) {
        sx_cg_node *src = nn_param_node_of(b, p->src_layer, p->src_k);
        *slot = p->transposed ? sx_cg_transpose(b->g, src) : src;
    }
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

sx_status nn_build_add_mask(nn_build *b, sx_cg_node *mask)
{
    return b->err = push(&b->masks, &b->n_masks, &b->cap_masks, mask);
}

sx_status nn_build_add_update(nn_build *b, sx_cg_node *assign)
{
    return b->err = push(&b->updates, &b->n_updates, &b->cap_updates, assign);
}

void nn_build_free(nn_build *b)
{
    sx_free(b->masks);
    sx_free(b->updates);
    sx_free(b->param_nodes);
    b->masks = b->updates = b->param_nodes = NULL;
}
