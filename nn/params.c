/* params.c: a network's parameters by name (list, get, set), shared parameters, layer names. */
#include <string.h>

#include "nn_impl.h"

sx_nn_layer *sx_nn_net_layer(const sx_nn_net *net, const char *name)
{
    for (int i = 0; net != NULL && name != NULL && i < net->n_layers; i++)
        if (strcmp(net->layers[i]->name, name) == 0)
            return net->layers[i];
    return NULL;
}

static bool layer_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 47)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-' || s[i] == '.'))
            return false;
    return true;
}

static sx_status no_models(const char *who, const sx_nn_net *net)
{
    if (net->n_models > 0)
        return sx_error(SX_E_STATE,
                        "%s: network %s has %d compiled model%s alive, which know its "
                        "parameters: free them first",
                        who, net->name, net->n_models, net->n_models > 1 ? "s" : "");
    return SX_OK;
}

static bool layer_of(const sx_nn_net *net, const sx_nn_layer *l)
{
    return l != NULL && l->index >= 0 && l->index < net->n_layers && net->layers[l->index] == l;
}

sx_status sx_nn_layer_rename(sx_nn_net *net, sx_nn_layer *l, const char *name)
{
    const char *who = "sx_nn_layer_rename";
    if (net == NULL || l == NULL || name == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument", who);
    if (!layer_of(net, l))
        return sx_error(SX_E_ARG, "%s: layer %s is not a layer of network %s", who, l->name,
                        net->name);
    if (!layer_name_ok(name))
        return sx_error(SX_E_ARG, "%s: name '%.60s' (want 1..47 letters, digits, '_', '-' or '.')",
                        who, name);
    const sx_nn_layer *o = sx_nn_net_layer(net, name);
    if (o != NULL && o != l)
        return sx_error(SX_E_ARG, "%s: network %s already has a layer named %s", who, net->name,
                        name);
    SX_TRY(no_models(who, net));
    for (int k = 0; k < l->n_params; k++) {
        nn_param *p = &l->params[k];
        const char *what = p->name + strlen(l->name) + 1; /* "<layer>.<what>" */
        char full[sizeof p->name];
        snprintf(full, sizeof full, "%s.%s", name, what);
        memcpy(p->name, full, sizeof full);
    }
    snprintf(l->name, sizeof l->name, "%s", name);
    return SX_OK;
}

/* The parameter named `name` (its layer in *lo, slot in *ko), or NULL with SX_E_ARG set. */
static nn_param *find(const char *who, const sx_nn_net *net, const char *name, sx_nn_layer **lo,
                      int *ko)
{
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            if (strcmp(net->layers[i]->params[k].name, name) == 0) {
                if (lo != NULL)
                    *lo = net->layers[i];
                if (ko != NULL)
                    *ko = k;
                return &net->layers[i]->params[k];
            }
    sx_error(SX_E_ARG, "%s: network %s has no parameter named '%.100s'", who, net->name, name);
    return NULL;
}

/* The tensor that stores p (its source's for a shared slot). */
static sx_tensor *stored(const nn_param *p)
{
    return nn_param_stored(p) ? p->value : p->src_layer->params[p->src_k].value;
}

/* p's shape as its layer reads it. */
static void shape_of(const nn_param *p, int *rank, int64_t *shape)
{
    const sx_tensor *v = stored(p);
    *rank = v->rank;
    memcpy(shape, v->shape, sizeof v->shape);
    if (p->transposed) {
        shape[0] = v->shape[1];
        shape[1] = v->shape[0];
    }
}

int sx_nn_net_n_params(const sx_nn_net *net)
{
    int n = 0;
    for (int i = 0; net != NULL && i < net->n_layers; i++)
        n += net->layers[i]->n_params;
    return n;
}

sx_status sx_nn_net_param_info(const sx_nn_net *net, int i, sx_nn_param_info *out)
{
    const char *who = "sx_nn_net_param_info";
    if (net == NULL || out == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument", who);
    int n = sx_nn_net_n_params(net);
    if (i < 0 || i >= n)
        return sx_error(SX_E_RANGE, "%s: parameter %d of network %s (it has %d)", who, i, net->name,
                        n);
    for (int j = 0; j < net->n_layers; j++) {
        sx_nn_layer *l = net->layers[j];
        if (i >= l->n_params) {
            i -= l->n_params;
            continue;
        }
        nn_param *p = &l->params[i];
        *out = (sx_nn_param_info){
            .name = p->name,
            .layer = l,
            .trainable = p->trainable,
            .shared_from = nn_param_stored(p) ? NULL : p->src_layer->params[p->src_k].name,
            .transposed = p->transposed};
        shape_of(p, &out->rank, out->shape);
        return SX_OK;
    }
    return sx_error(SX_E_STATE, "%s: parameter count changed", who);
}

sx_tensor *sx_nn_net_param(sx_nn_net *net, const char *name)
{
    if (net == NULL || name == NULL) {
        sx_error(SX_E_ARG, "sx_nn_net_param: NULL argument");
        return NULL;
    }
    nn_param *p = find("sx_nn_net_param", net, name, NULL, NULL);
    return p != NULL ? stored(p) : NULL;
}

/* A user's tensor u against p's shape as its layer reads it: *rank, shape. */
static sx_status check_user(const char *who, const nn_param *p, const sx_tensor *u, int *rank,
                            int64_t *shape)
{
    shape_of(p, rank, shape);
    if (u->data == NULL && u->size > 0)
        return sx_error(SX_E_ARG, "%s: the tensor has no data", who);
    if (!sx_shape_equal(u->rank, u->shape, *rank, shape)) {
        char a[200], b[200];
        return sx_error(SX_E_SHAPE, "%s: %s is %s, the tensor %s", who, p->name,
                        sx_shape_str(*rank, shape, a, sizeof a),
                        sx_shape_str(u->rank, u->shape, b, sizeof b));
    }
    return SX_OK;
}

sx_status sx_nn_net_param_get(const sx_nn_net *net, const char *name, sx_tensor *out)
{
    const char *who = "sx_nn_net_param_get";
    if (net == NULL || name == NULL || out == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument", who);
    const nn_param *p = find(who, net, name, NULL, NULL);
    if (p == NULL)
        return SX_E_ARG;
    int rank;
    int64_t shape[SX_MAX_RANK];
    SX_TRY(check_user(who, p, out, &rank, shape));
    const sx_tensor *v = stored(p);
    if (!p->transposed)
        return sx_tensor_cast_out(v, out);
    sx_tensor *t = NULL; /* v transposed, in v's dtype */
    SX_TRY(sx_tensor_new(v->dtype, rank, shape, &t));
    sx_status s = sx_tensor_transpose_out(v, t);
    if (s == SX_OK)
        s = sx_tensor_cast_out(t, out);
    sx_tensor_free(t);
    return s;
}

sx_status sx_nn_net_param_set(sx_nn_net *net, const char *name, const sx_tensor *value)
{
    const char *who = "sx_nn_net_param_set";
    if (net == NULL || name == NULL || value == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument", who);
    const nn_param *p = find(who, net, name, NULL, NULL);
    if (p == NULL)
        return SX_E_ARG;
    int rank;
    int64_t shape[SX_MAX_RANK];
    SX_TRY(check_user(who, p, value, &rank, shape));
    sx_tensor *v = stored(p);
    if (!p->transposed)
        return sx_tensor_cast_out(value, v);
    sx_tensor *t = NULL; /* value in v's dtype, then transposed into v */
    SX_TRY(sx_tensor_new(v->dtype, rank, shape, &t));
    sx_status s = sx_tensor_cast_out(value, t);
    if (s == SX_OK)
        s = sx_tensor_transpose_out(t, v);
    sx_tensor_free(t);
    return s;
}

sx_status sx_nn_share(sx_nn_net *net, const char *name, const char *source, bool transposed)
{
    const char *who = "sx_nn_share";
    if (net == NULL || name == NULL || source == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument", who);
    sx_nn_layer *ld = NULL, *ls = NULL;
    int kd = 0, ks = 0;
    nn_param *d = find(who, net, name, &ld, &kd);
    if (d == NULL)
        return SX_E_ARG;
    nn_param *src = find(who, net, source, &ls, &ks);
    if (src == NULL)
        return SX_E_ARG;
    if (d == src)
        return sx_error(SX_E_ARG, "%s: %s cannot share its own tensor", who, name);
    if (!nn_param_stored(d))
        return sx_error(SX_E_ARG, "%s: %s already uses %s", who, name,
                        d->src_layer->params[d->src_k].name);
    if (!nn_param_stored(src))
        return sx_error(SX_E_ARG, "%s: %s uses %s itself: share that one", who, source,
                        src->src_layer->params[src->src_k].name);
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            if (net->layers[i]->params[k].src_layer == ld && net->layers[i]->params[k].src_k == kd)
                return sx_error(SX_E_ARG, "%s: %s is used by %s: it cannot use another", who, name,
                                net->layers[i]->params[k].name);
    SX_TRY(no_models(who, net));
    if (d->trainable != src->trainable)
        return sx_error(SX_E_STATE, "%s: %s is %strained and %s is %strained", who, name,
                        d->trainable ? "" : "not ", source, src->trainable ? "" : "not ");
    const sx_tensor *a = d->value, *b = src->value;
    if (transposed && (a->rank != 2 || b->rank != 2))
        return sx_error(SX_E_ARG, "%s: %s transposed: both must be 2-d (ranks %d and %d)", who,
                        source, a->rank, b->rank);
    bool same = transposed ? a->shape[0] == b->shape[1] && a->shape[1] == b->shape[0]
                           : sx_shape_equal(a->rank, a->shape, b->rank, b->shape);
    if (!same) {
        char sa[200], sb[200];
        return sx_error(SX_E_SHAPE, "%s: %s is %s and %s is %s (want %s)", who, name,
                        sx_shape_str(a->rank, a->shape, sa, sizeof sa), source,
                        sx_shape_str(b->rank, b->shape, sb, sizeof sb),
                        transposed ? "the one the other transposed" : "equal shapes");
    }
    sx_tensor_free(d->value);
    for (int j = 0; j < NN_MAX_STATES; j++) {
        sx_tensor_free(d->state[j]);
        d->state[j] = NULL;
    }
    d->value = NULL;
    d->src_layer = ls;
    d->src_k = ks;
    d->transposed = transposed;
    return SX_OK;
}

const sx_tensor *nn_param_value(const nn_param *p)
{
    return stored(p);
}
