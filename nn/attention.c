/* attention.c: multi-head scaled-dot-product self-attention over (T, d) sequences, from ops the
 * graph optimiser and planner handle like any other: projections by matmul, heads by reshape and
 * permute, scores by batched matmul, an optional causal mask added as a constant, softmax over
 * the last axis. softmax(Q K^T / sqrt(d_head) + M) V per head, then the output projection; the
 * projections are dense layers' (x W + b, W (d, d)), so PyTorch's in_proj_weight rows are W^T. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>

typedef struct attention_attr {
    int heads;
    bool causal, bias;
} attention_attr;

sx_nn_attention_params sx_nn_attention_params_default(int heads)
{
    sx_nn_attention_params p = {heads, false, true};
    return p;
}

/* x W_k (+ b_k) over (n T, d) */
static sx_cg_node *project(nn_build *b, sx_nn_layer *l, sx_cg_node *x, int k)
{
    const attention_attr *a = l->attr;
    sx_cg_node *w = nn_param_node_of(b, l, k);
    if (!a->bias)
        return sx_cg_matmul(b->g, x, w, false, false);
    return sx_cg_gemm(b->g, x, w, false, false, 1, nn_param_node_of(b, l, 4 + k), 1);
}

/* (n T, d) -> (n H, T, d / H) */
static sx_cg_node *split_heads(sx_cg_graph *g, sx_cg_node *x, int64_t T, int64_t H, int64_t dh)
{
    int64_t s4[4] = {-1, T, H, dh}, s3[3] = {-1, T, dh};
    int perm[4] = {0, 2, 1, 3};
    return sx_cg_reshape(g, sx_cg_permute(g, sx_cg_reshape(g, x, 4, s4), perm), 3, s3);
}

/* x (n, T, d) -> (n, T, d) */
static sx_cg_node *attention_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                     sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    const attention_attr *a = l->attr;
    sx_cg_graph *g = b->g;
    const int64_t *xs = sx_cg_node_shape(in[0]);
    if (xs == NULL)
        return NULL;
    const int64_t T = xs[1], d = xs[2], H = a->heads, dh = d / H;
    int64_t flat[2] = {-1, d}; /* -1: the batch axis (model files change it) */
    sx_cg_node *x = sx_cg_reshape(g, in[0], 2, flat);
    sx_cg_node *q = split_heads(g, project(b, l, x, 0), T, H, dh);
    sx_cg_node *k = split_heads(g, project(b, l, x, 1), T, H, dh);
    sx_cg_node *v = split_heads(g, project(b, l, x, 2), T, H, dh);
    sx_cg_node *s = sx_cg_gemm(g, q, k, false, true, 1 / sqrt((double)dh), NULL, 0);
    if (a->causal) { /* -inf above the diagonal: position t sees positions <= t */
        int64_t ms[2] = {T, T};
        sx_tensor *m = NULL;
        sx_status st = sx_tensor_new(sx_cg_node_dtype(in[0]), 2, ms, &m);
        if (st != SX_OK) {
            b->err = st;
            return NULL;
        }
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++)
                sx_tensor_set(m, i * T + j, j > i ? -INFINITY : 0);
        sx_cg_node *mask = sx_cg_const(g, m);
        sx_tensor_free(m);
        s = sx_cg_add(g, s, mask);
    }
    sx_cg_node *o = sx_cg_matmul(g, sx_cg_softmax(g, s, -1), v, false, false);
    /* (n H, T, dh) -> (T, H, dh) -> (n T, d) */
    int64_t s4[4] = {-1, H, T, dh};
    int perm[4] = {0, 2, 1, 3};
    o = sx_cg_reshape(g, sx_cg_permute(g, sx_cg_reshape(g, o, 4, s4), perm), 2, flat);
    int64_t out[3] = {-1, T, d};
    return sx_cg_reshape(g, project(b, l, o, 3), 3, out);
}

static void attention_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const attention_attr *a = l->attr;
    snprintf(buf, size, "%d heads%s%s", a->heads, a->causal ? ", causal" : "",
             a->bias ? "" : ", no bias");
}

const nn_layer_ops nn_attention_ops = {"attention", sizeof(attention_attr), attention_forward,
                                       attention_describe};

sx_nn_layer *sx_nn_attention(sx_nn_net *net, sx_nn_layer *in, const sx_nn_attention_params *p)
{
    const char *who = "sx_nn_attention";
    if (p == NULL) {
        nn_layer_fail(net, sx_error(SX_E_ARG, "%s: params is NULL", who));
        return NULL;
    }
    sx_nn_layer *l = nn_layer_begin(net, who, L_ATTENTION, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = SX_OK;
    if (in->rank != 2)
        s = sx_error(SX_E_RANK, "%s: input of rank %d (want 2: (steps, features))", l->name,
                     in->rank);
    else if (p->heads < 1 || in->shape[1] % p->heads != 0)
        s = sx_error(SX_E_ARG, "%s: %d heads do not divide %lld features", l->name, p->heads,
                     (long long)in->shape[1]);
    if (s == SX_OK) {
        attention_attr *a = l->attr;
        a->heads = p->heads;
        a->causal = p->causal;
        a->bias = p->bias;
        const int64_t d = in->shape[1], ws[2] = {d, d}, bs[1] = {d};
        const char *w[4] = {"query", "key", "value", "out"};
        char name[32];
        for (int k = 0; k < 4 && s == SX_OK; k++) {
            snprintf(name, sizeof name, "%s_weight", w[k]);
            s = nn_layer_add_param(net, l, name, 2, ws, (double)NAN, d, d, true, true);
        }
        for (int k = 0; k < 4 && s == SX_OK && p->bias; k++) {
            snprintf(name, sizeof name, "%s_bias", w[k]);
            s = nn_layer_add_param(net, l, name, 1, bs, 0, 0, 0, true, false);
        }
    }
    return nn_layer_finish(net, who, l, s);
}
