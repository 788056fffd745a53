/* embedding.c: the embedding layer (rows of a learned (vocab, dim) table picked by the integer
 * values of the input; PyTorch's nn.Embedding: N(0, 1) initialisation, a padding index whose row
 * is zero and gets no gradient) and the learned position embedding a transformer adds to it. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>

typedef struct embedding_attr {
    int64_t vocab, dim, pad;
} embedding_attr;

sx_nn_embedding_params sx_nn_embedding_params_default(int64_t vocab, int64_t dim)
{
    sx_nn_embedding_params p = {vocab, dim, -1};
    return p;
}

/* idx (batch, s...) -> (batch, s..., dim) */
static sx_cg_node *embedding_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                     sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    const embedding_attr *a = l->attr;
    return sx_cg_embedding(b->g, nn_param_node_of(b, l, 0), in[0], a->pad);
}

static void embedding_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const embedding_attr *a = l->attr;
    if (a->pad >= 0)
        snprintf(buf, size, "%lld x %lld, padding %lld", (long long)a->vocab, (long long)a->dim,
                 (long long)a->pad);
    else
        snprintf(buf, size, "%lld x %lld", (long long)a->vocab, (long long)a->dim);
}

const nn_layer_ops nn_embedding_ops = {"embedding", sizeof(embedding_attr), embedding_forward,
                                       embedding_describe};

sx_nn_layer *sx_nn_embedding(sx_nn_net *net, sx_nn_layer *in, const sx_nn_embedding_params *p)
{
    const char *who = "sx_nn_embedding";
    if (p == NULL) {
        nn_layer_fail(net, sx_error(SX_E_ARG, "%s: params is NULL", who));
        return NULL;
    }
    sx_nn_layer *l = nn_layer_begin(net, who, L_EMBEDDING, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    int64_t ws[2] = {p->vocab, p->dim};
    if (p->vocab < 1 || p->dim < 1)
        s = sx_error(SX_E_ARG, "%s: vocabulary %lld, dimension %lld (want >= 1)", l->name,
                     (long long)p->vocab, (long long)p->dim);
    else if (p->pad < -1 || p->pad >= p->vocab)
        s = sx_error(SX_E_RANGE, "%s: padding index %lld (want -1 for none, or 0..%lld)", l->name,
                     (long long)p->pad, (long long)p->vocab - 1);
    else if (in->rank + 1 > SX_MAX_RANK - 1)
        s = sx_error(SX_E_RANK, "%s: input of rank %d leaves no room for the embedding axis",
                     l->name, in->rank);
    else if (!nn_shape_fits(2, ws))
        s = sx_error(SX_E_SHAPE, "%s: table of %lld x %lld has too many elements", l->name,
                     (long long)p->vocab, (long long)p->dim);
    if (s == SX_OK) {
        embedding_attr *a = l->attr;
        a->vocab = p->vocab;
        a->dim = p->dim;
        a->pad = p->pad;
        l->shape[l->rank++] = p->dim;
        bool own = net->init.kind == SX_INIT_DEFAULT;
        s = nn_layer_add_param(net, l, "weight", 2, ws, own ? 0 : (double)NAN, p->dim, p->vocab,
                               true, true);
        sx_tensor *w = s == SX_OK ? l->params[0].value : NULL;
        if (s == SX_OK && own) /* PyTorch's N(0, 1) */
            s = sx_tensor_rand_normal(w, &net->init_rng, 0, 1);
        for (int64_t k = 0; s == SX_OK && p->pad >= 0 && k < p->dim; k++)
            sx_tensor_set(w, p->pad * p->dim + k, 0);
    }
    return nn_layer_finish(net, who, l, s);
}

/* x (batch, T, d) + P[0:T] (T, d), P (max_len, d); in a generation step x (batch, 1, d) +
 * P[pos] */
static sx_cg_node *position_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                    sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    sx_cg_node *p = nn_param_node_of(b, l, 0);
    if (b->gen != NULL)
        return sx_cg_add(b->g, in[0], sx_cg_embedding(b->g, p, b->gen->pos, -1));
    const int64_t T = l->shape[0];
    if (sx_cg_node_shape(p) != NULL && sx_cg_node_shape(p)[0] != T) {
        sx_slice s[2] = {{0, T, 1}, SX_SLICE_ALL};
        p = sx_cg_slice(b->g, p, s);
    }
    return sx_cg_add(b->g, in[0], p);
}

static void position_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "%lld positions", (long long)nn_param_value(&l->params[0])->shape[0]);
}

const nn_layer_ops nn_position_embedding_ops = {"position_embedding", 0, position_forward,
                                                position_describe};

sx_nn_layer *sx_nn_position_embedding(sx_nn_net *net, sx_nn_layer *in)
{
    return sx_nn_position_embedding_max(net, in, in != NULL && in->rank == 2 ? in->shape[0] : 1);
}

sx_nn_layer *sx_nn_position_embedding_max(sx_nn_net *net, sx_nn_layer *in, int64_t max_len)
{
    const char *who = "sx_nn_position_embedding";
    sx_nn_layer *l = nn_layer_begin(net, who, L_POSITION_EMBEDDING, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    int64_t ts[2] = {max_len, in->rank == 2 ? in->shape[1] : 1};
    if (in->rank != 2)
        s = sx_error(SX_E_RANK, "%s: input of rank %d (want 2: (steps, features))", l->name,
                     in->rank);
    else if (max_len < in->shape[0] || !nn_shape_fits(2, ts))
        s = sx_error(SX_E_SHAPE, "%s: a table of %lld positions for sequences of %lld", l->name,
                     (long long)max_len, (long long)in->shape[0]);
    if (s == SX_OK) {
        bool own = net->init.kind == SX_INIT_DEFAULT;
        s = nn_layer_add_param(net, l, "weight", 2, ts, own ? 0 : (double)NAN, in->shape[1],
                               max_len, true, true);
        if (s == SX_OK && own) /* as an nn.Embedding over the positions: N(0, 1) */
            s = sx_tensor_rand_normal(l->params[0].value, &net->init_rng, 0, 1);
    }
    return nn_layer_finish(net, who, l, s);
}
