/* attention.c: multi-head scaled-dot-product self-attention over (T, d) sequences:
 * softmax(Q K^T / sqrt(d_head) + M) V per head, then the output projection. The projections are
 * dense layers' (x W + b, W (d, d), or one (d, 3d) product for Q, K and V with fused_qkv), heads
 * are split by reshape and permute, and each head's attention is the fused attention op
 * (cgraph/ops/attention.c: tiled, causal mask from the indices, no (T, T) scores). Dropout on the
 * attention weights needs them whole: in training with a dropout rate the layer uses the plain
 * composition (scores by batched matmul, a constant -inf mask, softmax, the dropout mask), and the
 * fused op everywhere else (inference, saved models). Rotary position embedding (rope) rotates Q
 * and K by constant cos / sin tables. In a generation step (b->gen) the layer attends over its
 * key/value cache and records the step's key and value (nn_gen). */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>

typedef struct attention_attr {
    int heads;
    bool causal, bias, fused_qkv, rope;
    double dropout, rope_theta;
} attention_attr;

sx_nn_attention_params sx_nn_attention_params_default(int heads)
{
    sx_nn_attention_params p = {heads, false, true, false, 0, false, 10000};
    return p;
}

bool nn_attention_causal(const sx_nn_layer *l)
{
    return ((const attention_attr *)l->attr)->causal;
}

/* The layer's weights: query, key, value, out (or qkv, out with fused_qkv), then the biases in
 * the same order. */
static int n_weights(const attention_attr *a)
{
    return a->fused_qkv ? 2 : 4;
}

/* x W_k (+ b_k) over (n T, d): k indexes the weights (the out projection is the last) */
static sx_cg_node *project(nn_build *b, sx_nn_layer *l, sx_cg_node *x, int k)
{
    const attention_attr *a = l->attr;
    sx_cg_node *w = nn_param_node_of(b, l, k);
    if (!a->bias)
        return sx_cg_matmul(b->g, x, w, false, false);
    return sx_cg_gemm(b->g, x, w, false, false, 1, nn_param_node_of(b, l, n_weights(a) + k), 1);
}

/* (n T, d) -> (n H, T, d / H) */
static sx_cg_node *split_heads(sx_cg_graph *g, sx_cg_node *x, int64_t T, int64_t H, int64_t dh)
{
    int64_t s4[4] = {-1, T, H, dh}, s3[3] = {-1, T, dh};
    int perm[4] = {0, 2, 1, 3};
    return sx_cg_reshape(g, sx_cg_permute(g, sx_cg_reshape(g, x, 4, s4), perm), 3, s3);
}

/* Q, K, V as (n H, T, dh) each from x (n T, d): three products, or one (n T, 3d) product whose
 * columns are Q, K, V, split as (n, T, 3, H, dh) -> (3, n, H, T, dh). */
static void project_qkv(nn_build *b, sx_nn_layer *l, sx_cg_node *x, int64_t T, int64_t H,
                        int64_t dh, sx_cg_node **qkv)
{
    const attention_attr *a = l->attr;
    sx_cg_graph *g = b->g;
    if (!a->fused_qkv) {
        for (int i = 0; i < 3; i++)
            qkv[i] = split_heads(g, project(b, l, x, i), T, H, dh);
        return;
    }
    int64_t s5[5] = {-1, T, 3, H, dh}, s4[4] = {3, -1, T, dh};
    int perm[5] = {2, 0, 3, 1, 4};
    sx_cg_node *p = sx_cg_reshape(
        g, sx_cg_permute(g, sx_cg_reshape(g, project(b, l, x, 0), 5, s5), perm), 4, s4);
    for (int i = 0; i < 3; i++) {
        sx_slice sl[4] = {{i, i + 1, 1}, SX_SLICE_ALL, SX_SLICE_ALL, SX_SLICE_ALL};
        int64_t s3[3] = {-1, T, dh};
        qkv[i] = sx_cg_reshape(g, sx_cg_slice(g, p, sl), 3, s3);
    }
}

/* softmax(q k^T s + M) v with M a constant -inf above the diagonal when causal, the weights
 * through a dropout mask: (n H, T, dh) */
static sx_cg_node *composed(nn_build *b, const attention_attr *a, sx_cg_node *q, sx_cg_node *k,
                            sx_cg_node *v, int64_t T, double scale)
{
    sx_cg_graph *g = b->g;
    sx_cg_node *s = sx_cg_gemm(g, q, k, false, true, scale, NULL, 0);
    if (a->causal) { /* -inf above the diagonal: position t sees positions <= t */
        int64_t ms[2] = {T, T};
        sx_tensor *m = NULL;
        sx_status st = sx_tensor_new(sx_cg_node_dtype(q), 2, ms, &m);
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
    sx_cg_node *p = sx_cg_softmax(g, s, -1);
    sx_cg_node *dm =
        sx_cg_dropout_mask(g, b->rng_id, a->dropout, sx_cg_node_rank(p), sx_cg_node_shape(p));
    if (dm == NULL || nn_build_add_mask(b, dm) != SX_OK)
        return NULL;
    return sx_cg_matmul(g, sx_cg_mul(g, p, dm), v, false, false);
}

/* The rope table of cos (or sin) of the angles, (rows, dh): row t, column i: the angle
 * t theta^(-2 (i mod h) / dh), h = dh / 2, computed in double and rounded to dt. */
static sx_cg_node *rope_table(nn_build *b, sx_dtype dt, int64_t rows, int64_t dh, double theta,
                              bool cosine)
{
    int64_t ts[2] = {rows, dh}, h = dh / 2;
    sx_tensor *t = NULL;
    sx_status st = sx_tensor_new(dt, 2, ts, &t);
    if (st != SX_OK) {
        b->err = st;
        return NULL;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < dh; i++) {
            double a = (double)r * pow(theta, -2.0 * (double)(i % h) / (double)dh);
            sx_tensor_set(t, r * dh + i, cosine ? cos(a) : sin(a));
        }
    sx_cg_node *n = sx_cg_const(b->g, t);
    sx_tensor_free(t);
    return n;
}

/* x (m, T, dh) rotated: x cos + rotate_half(x) sin, rotate_half(x) = (-x[h:], x[:h]); c and s
 * broadcast to x: (T, dh), or (1, 1, dh) in a generation step */
static sx_cg_node *rotate(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *c, sx_cg_node *s, int64_t dh)
{
    sx_slice lo[3] = {SX_SLICE_ALL, SX_SLICE_ALL, {0, dh / 2, 1}};
    sx_slice hi[3] = {SX_SLICE_ALL, SX_SLICE_ALL, {dh / 2, dh, 1}};
    sx_cg_node *halves[2] = {sx_cg_neg(g, sx_cg_slice(g, x, hi)), sx_cg_slice(g, x, lo)};
    sx_cg_node *r = sx_cg_concat(g, 2, halves, -1);
    return sx_cg_add(g, sx_cg_mul(g, x, c), sx_cg_mul(g, r, s));
}

/* Q and K (qk[0], qk[1]: (n H, T, dh)) rotated at positions 0..T-1, or at the step's position
 * in a generation step (the tables' row gen->pos) */
static void rope(nn_build *b, const attention_attr *a, sx_cg_node **qk, int64_t T, int64_t dh)
{
    if (qk[0] == NULL || qk[1] == NULL)
        return;
    sx_dtype dt = sx_cg_node_dtype(qk[0]);
    sx_cg_node *cs[2];
    for (int c = 0; c < 2; c++) {
        cs[c] = rope_table(b, dt, b->gen ? b->gen->max_len : T, dh, a->rope_theta, c == 0);
        if (b->gen != NULL)
            cs[c] = sx_cg_embedding(b->g, cs[c], b->gen->pos, -1);
    }
    for (int i = 0; i < 2; i++)
        qk[i] = rotate(b->g, qk[i], cs[0], cs[1], dh);
}

/* A generation step: q, k, v (n H, 1, dh) of the new position. Attention over the cache's first
 * pos keys (the filled part; the cost grows with the position, not with max_len) gives o_c and
 * its log-sum-exp l_c (-inf at position 0), the step's own key the score s; the two softmax
 * parts combine as o = (e^(l_c - m) o_c + e^(s - m) v) / (e^(l_c - m) + e^(s - m)), m their
 * maximum: (n H, 1, dh). The caches are made here (zeros) and borrowed by the graph; k and v are
 * recorded for the generator. */
static sx_cg_node *cached(nn_build *b, sx_nn_layer *l, sx_cg_node **qkv, int64_t dh, double scale)
{
    nn_gen *gen = b->gen;
    sx_cg_graph *g = b->g;
    const attention_attr *a = l->attr;
    const int i = l->index;
    if (qkv[0] == NULL || qkv[1] == NULL || qkv[2] == NULL)
        return NULL;
    int64_t cs[3] = {gen->batch * a->heads, gen->max_len, dh};
    sx_status st = sx_tensor_zeros(sx_cg_node_dtype(qkv[0]), 3, cs, &gen->k_cache[i]);
    if (st == SX_OK)
        st = sx_tensor_zeros(sx_cg_node_dtype(qkv[0]), 3, cs, &gen->v_cache[i]);
    if (st != SX_OK) {
        b->err = st;
        return NULL;
    }
    char kn[96], vn[96];
    snprintf(kn, sizeof kn, "%s.key_cache", l->name);
    snprintf(vn, sizeof vn, "%s.value_cache", l->name);
    sx_cg_node *kc = sx_cg_param_borrow(g, kn, gen->k_cache[i]);
    sx_cg_node *vc = sx_cg_param_borrow(g, vn, gen->v_cache[i]);
    gen->k_new[i] = qkv[1];
    gen->v_new[i] = qkv[2];
    sx_cg_node *y = sx_cg_attention_keys(g, qkv[0], kc, vc, gen->pos, scale, false);
    const int64_t s3[3] = {cs[0], 1, 1};
    sx_cg_node *lc = sx_cg_reshape(g, sx_cg_attention_lse(g, y), 3, s3);
    sx_cg_node *sn =
        sx_cg_mul_scalar(g, sx_cg_sum(g, sx_cg_mul(g, qkv[0], qkv[1]), SX_AXIS(2), true), scale);
    sx_cg_node *m = sx_cg_max(g, lc, sn);
    sx_cg_node *wc = sx_cg_exp(g, sx_cg_sub(g, lc, m)), *wn = sx_cg_exp(g, sx_cg_sub(g, sn, m));
    sx_cg_node *num =
        sx_cg_add(g, sx_cg_mul(g, wc, sx_cg_attention_o(g, y)), sx_cg_mul(g, wn, qkv[2]));
    return sx_cg_div(g, num, sx_cg_add(g, wc, wn));
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
    const double scale = 1 / sqrt((double)dh);
    int64_t flat[2] = {-1, d}; /* -1: the batch axis (model files change it) */
    sx_cg_node *x = sx_cg_reshape(g, in[0], 2, flat), *qkv[3];
    project_qkv(b, l, x, T, H, dh, qkv);
    if (a->rope)
        rope(b, a, qkv, T, dh);
    sx_cg_node *o;
    if (b->gen != NULL)
        o = cached(b, l, qkv, dh, scale);
    else if (b->mode == NN_TRAIN && a->dropout > 0)
        o = composed(b, a, qkv[0], qkv[1], qkv[2], T, scale);
    else
        o = sx_cg_attention_o(g, sx_cg_attention(g, qkv[0], qkv[1], qkv[2], scale, a->causal));
    if (o == NULL)
        return NULL;
    /* (n H, T, dh) -> (T, H, dh) -> (n T, d) */
    int64_t s4[4] = {-1, H, T, dh};
    int perm[4] = {0, 2, 1, 3};
    o = sx_cg_reshape(g, sx_cg_permute(g, sx_cg_reshape(g, o, 4, s4), perm), 2, flat);
    int64_t out[3] = {-1, T, d};
    return sx_cg_reshape(g, project(b, l, o, n_weights(a) - 1), 3, out);
}

static void attention_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const attention_attr *a = l->attr;
    int n = snprintf(buf, size, "%d heads%s%s%s%s", a->heads, a->causal ? ", causal" : "",
                     a->bias ? "" : ", no bias", a->fused_qkv ? ", fused qkv" : "",
                     a->rope ? ", rope" : "");
    if (a->dropout > 0 && n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, ", dropout %g", a->dropout);
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
    else if (!(p->dropout >= 0 && p->dropout < 1))
        s = sx_error(SX_E_ARG, "%s: dropout %g (want 0 <= rate < 1)", l->name, p->dropout);
    else if (p->rope && (in->shape[1] / p->heads) % 2 != 0)
        s = sx_error(SX_E_ARG, "%s: rope rotates pairs: a head size of %lld is odd", l->name,
                     (long long)(in->shape[1] / p->heads));
    else if (p->rope && !(isfinite(p->rope_theta) && p->rope_theta > 0))
        s = sx_error(SX_E_ARG, "%s: rope base %g (want finite > 0)", l->name, p->rope_theta);
    if (s == SX_OK) {
        attention_attr *a = l->attr;
        a->heads = p->heads;
        a->causal = p->causal;
        a->bias = p->bias;
        a->fused_qkv = p->fused_qkv;
        a->dropout = p->dropout;
        a->rope = p->rope;
        a->rope_theta = p->rope_theta;
        /* Q, K, V, out; or QKV (d, 3d), out */
        const int64_t d = in->shape[1], wide = p->fused_qkv ? 3 * d : d;
        const char *sep[4] = {"query", "key", "value", "out"}, *fused[2] = {"qkv", "out"};
        const char *const *w = p->fused_qkv ? fused : sep;
        char name[32];
        for (int k = 0; k < n_weights(a) && s == SX_OK; k++) {
            const int64_t ws[2] = {d, k + 1 < n_weights(a) ? wide : d};
            snprintf(name, sizeof name, "%s_weight", w[k]);
            s = nn_layer_add_param(net, l, name, 2, ws, (double)NAN, d, d, true, true);
        }
        for (int k = 0; k < n_weights(a) && s == SX_OK && p->bias; k++) {
            const int64_t bs[1] = {k + 1 < n_weights(a) ? wide : d};
            snprintf(name, sizeof name, "%s_bias", w[k]);
            s = nn_layer_add_param(net, l, name, 1, bs, 0, 0, 0, true, false);
        }
    }
    return nn_layer_finish(net, who, l, s);
}
