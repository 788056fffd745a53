/* The attention layer on the fused attention op: its output and input gradient against the plain
 * composition softmax(Q K^T / sqrt(dh) + M) V built here from the layer's parameters (causal or
 * not, three projections or fused_qkv), to 1e-6 relative; no (T, T) value in a training graph
 * without dropout, a dropout mask over the attention weights with it; a tied GPT-like block
 * (token and position embeddings, layer norm, causal attention with fused QKV and dropout, a
 * residual, a head sharing the embedding's table) trains: the loss falls; its saved model
 * predicts what the network does; the documented errors. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"

enum { N = 2, T = 37, D = 12, H = 3 };

static sx_nn_net *attention_net(sx_dtype dt, bool causal, bool fused, double dropout)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("att", dt, 3, &net), SX_OK);
    int64_t in[2] = {T, D};
    sx_nn_layer *l = sx_nn_input(net, 2, in);
    sx_nn_attention_params p = sx_nn_attention_params_default(H);
    p.causal = causal;
    p.fused_qkv = fused;
    p.dropout = dropout;
    l = sx_nn_attention(net, l, &p);
    cr_assert_not_null(l, "%s", sx_last_error());
    cr_assert_eq(sx_nn_layer_rename(net, l, "att"), SX_OK);
    /* biases away from 0, so that each one's place is checked */
    const char *names[4][2] = {{"att.query_bias", "att.qkv_bias"},
                               {"att.key_bias", NULL},
                               {"att.value_bias", NULL},
                               {"att.out_bias", "att.out_bias"}};
    sx_rng r;
    sx_rng_seed(&r, 4);
    for (int i = 0; i < 4; i++) {
        const char *name = names[i][fused ? 1 : 0];
        if (name == NULL)
            continue;
        sx_tensor *b = sx_nn_net_param(net, name);
        cr_assert_not_null(b, "%s", sx_last_error());
        for (int64_t j = 0; j < b->size; j++)
            sx_tensor_set(b, j, sx_rng_uniform(&r) - 0.5);
    }
    return net;
}

/* A constant of the named parameter's columns [c0, c0 + w) (the layer's weights read as (d, *)). */
static sx_cg_node *param_cols(sx_cg_graph *g, sx_nn_net *net, const char *name, int64_t c0,
                              int64_t w)
{
    const sx_tensor *t = sx_nn_net_param(net, name);
    cr_assert_not_null(t, "%s", sx_last_error());
    const int64_t rows = t->rank == 2 ? t->shape[0] : 1, cols = t->shape[t->rank - 1];
    int64_t s[2] = {rows, w};
    sx_tensor *c = NULL;
    cr_assert_eq(sx_tensor_new(t->dtype, t->rank, t->rank == 2 ? s : s + 1, &c), SX_OK);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < w; j++)
            sx_tensor_set(c, i * w + j, sx_tensor_get(t, i * cols + c0 + j));
    sx_cg_node *n = sx_cg_const(g, c);
    sx_tensor_free(c);
    return n;
}

/* (n T, d) -> (n H, T, dh) */
static sx_cg_node *heads(sx_cg_graph *g, sx_cg_node *x)
{
    int64_t s4[4] = {N, T, H, D / H}, s3[3] = {N * H, T, D / H};
    int perm[4] = {0, 2, 1, 3};
    return sx_cg_reshape(g, sx_cg_permute(g, sx_cg_reshape(g, x, 4, s4), perm), 3, s3);
}

/* The layer by its definition, from x (N, T, D), with plain graph ops. */
static sx_cg_node *composition(sx_cg_graph *g, sx_nn_net *net, sx_cg_node *x, bool causal,
                               bool fused)
{
    int64_t flat[2] = {N * T, D};
    sx_cg_node *x2 = sx_cg_reshape(g, x, 2, flat), *qkv[3];
    const char *w[3] = {"att.query_weight", "att.key_weight", "att.value_weight"};
    const char *b[3] = {"att.query_bias", "att.key_bias", "att.value_bias"};
    for (int i = 0; i < 3; i++) {
        sx_cg_node *wi =
            fused ? param_cols(g, net, "att.qkv_weight", i * D, D) : param_cols(g, net, w[i], 0, D);
        sx_cg_node *bi =
            fused ? param_cols(g, net, "att.qkv_bias", i * D, D) : param_cols(g, net, b[i], 0, D);
        qkv[i] = heads(g, sx_cg_add(g, sx_cg_matmul(g, x2, wi, false, false), bi));
    }
    sx_cg_node *s = sx_cg_gemm(g, qkv[0], qkv[1], false, true, 1 / sqrt((double)(D / H)), NULL, 0);
    if (causal) {
        int64_t ms[2] = {T, T};
        sx_tensor *m = NULL;
        cr_assert_eq(sx_tensor_new(sx_cg_node_dtype(x), 2, ms, &m), SX_OK);
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++)
                sx_tensor_set(m, i * T + j, j > i ? -INFINITY : 0);
        s = sx_cg_add(g, s, sx_cg_const(g, m));
        sx_tensor_free(m);
    }
    sx_cg_node *o = sx_cg_matmul(g, sx_cg_softmax(g, s, -1), qkv[2], false, false);
    int64_t s4[4] = {N, H, T, D / H};
    int perm[4] = {0, 2, 1, 3};
    o = sx_cg_reshape(g, sx_cg_permute(g, sx_cg_reshape(g, o, 4, s4), perm), 2, flat);
    o = sx_cg_add(g, sx_cg_matmul(g, o, param_cols(g, net, "att.out_weight", 0, D), false, false),
                  param_cols(g, net, "att.out_bias", 0, D));
    int64_t s3[3] = {N, T, D};
    return sx_cg_reshape(g, o, 3, s3);
}

/* |a - b| <= tol * max |b| element by element */
static void expect_close(const char *what, const sx_tensor *a, const sx_tensor *b, double tol)
{
    cr_assert_eq(a->size, b->size);
    double big = 1e-30;
    for (int64_t i = 0; i < b->size; i++)
        big = fmax(big, fabs(sx_tensor_get(b, i)));
    for (int64_t i = 0; i < b->size; i++)
        cr_assert_leq(fabs(sx_tensor_get(a, i) - sx_tensor_get(b, i)), tol * big,
                      "%s[%lld] = %.9g, want %.9g", what, (long long)i, sx_tensor_get(a, i),
                      sx_tensor_get(b, i));
}

static void check_layer(bool causal, bool fused)
{
    sx_nn_net *net = attention_net(SX_F32, causal, fused, 0);
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    nn_build b = {.g = g, .mode = NN_TRAIN};
    sx_rng r;
    sx_rng_seed(&r, 8);
    int64_t xs[3] = {N, T, D};
    sx_tensor *xv = tu_rand(&r, SX_F32, 3, xs, -1, 1), *dyv = tu_rand(&r, SX_F32, 3, xs, -1, 1);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F32, 3, xs), *y = NULL, *logits = NULL;
    cr_assert_eq(sx_cg_input_set(g, x, xv, SX_CG_COPY), SX_OK);
    cr_assert_eq(nn_forward(net, &b, x, &y, &logits), SX_OK, "%s", sx_last_error());
    sx_cg_node *ref = composition(g, net, x, causal, fused), *dx[2];
    cr_assert_not_null(ref, "%s", sx_last_error());
    cr_assert_eq(sx_ad_vjp(g, y, sx_cg_const(g, dyv), 1, &x, &dx[0]), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ad_vjp(g, ref, sx_cg_const(g, dyv), 1, &x, &dx[1]), SX_OK, "%s",
                 sx_last_error());
    sx_cg_node *want[4] = {y, ref, dx[0], dx[1]};
    cr_assert_eq(sx_cg_eval(g, 4, want), SX_OK, "%s", sx_last_error());
    /* the layer's graph holds the fused op and no (T, T) value */
    bool fused_op = false;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        if (n == NULL)
            continue;
        fused_op = fused_op || sx_cg_node_op(n) == SX_OP_ATTENTION;
    }
    cr_assert(fused_op, "no attention op in the layer's graph");
    char what[64];
    snprintf(what, sizeof what, "y%s%s", causal ? " causal" : "", fused ? " fused_qkv" : "");
    expect_close(what, sx_cg_value(y), sx_cg_value(ref), 1e-6);
    snprintf(what, sizeof what, "dx%s%s", causal ? " causal" : "", fused ? " fused_qkv" : "");
    expect_close(what, sx_cg_value(dx[0]), sx_cg_value(dx[1]), 1e-6);
    nn_build_free(&b);
    sx_cg_graph_free(g);
    sx_tensor_free(xv);
    sx_tensor_free(dyv);
    sx_nn_net_free(net);
}

Test(nn_attention, fused_layer_matches_the_composition)
{
    for (int c = 0; c < 2; c++)
        for (int f = 0; f < 2; f++)
            check_layer(c != 0, f != 0);
}

/* The largest value of a compiled training graph, in elements, and whether it has a dropout mask
 * over the attention weights. */
static int64_t largest_value(sx_nn_net *net, int64_t batch, bool *mask)
{
    sx_nn_train_params p = sx_nn_train_params_default();
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, &p, batch, &m), SX_OK, "%s", sx_last_error());
    sx_cg_graph *g = sx_nn_model_graph(m);
    int64_t big = 0;
    *mask = false;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        if (n == NULL || sx_cg_value(n) == NULL)
            continue;
        const sx_tensor *v = sx_cg_value(n);
        big = v->size > big ? v->size : big;
        *mask = *mask || (sx_cg_node_op(n) == SX_OP_DROPOUT_MASK && v->size == batch * H * T * T);
    }
    sx_nn_model_free(m);
    return big;
}

/* Without dropout nothing of (B H T T) elements exists; with it, a dropout mask of that size. */
Test(nn_attention, scores_are_never_stored_without_dropout)
{
    const int64_t batch = 8;
    bool mask;
    sx_nn_net *net = attention_net(SX_F32, true, true, 0);
    cr_assert_lt(largest_value(net, batch, &mask), batch * H * T * T);
    cr_assert(!mask);
    sx_nn_net_free(net);
    net = attention_net(SX_F32, true, true, 0.2);
    cr_assert_geq(largest_value(net, batch, &mask), batch * H * T * T);
    cr_assert(mask, "no dropout mask over the attention weights");
    sx_nn_net_free(net);
}

/* Next-token prediction on sequences counting up modulo V from a random start: token and
 * position embeddings, layer norm, causal attention (fused QKV, dropout), a residual, and a head
 * tied to the embedding's table. */
Test(nn_attention, tied_gpt_block_trains_and_saves)
{
    enum { V = 11, C = 16, S = 12, B = 16 };
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("gpt", SX_F32, 5, &net), SX_OK);
    sx_nn_net_set_input_scale(net, 1);
    int64_t in[1] = {S};
    sx_nn_layer *x = sx_nn_input(net, 1, in);
    sx_nn_embedding_params ep = sx_nn_embedding_params_default(V, C);
    sx_nn_layer *e = sx_nn_embedding(net, x, &ep);
    cr_assert_eq(sx_nn_layer_rename(net, e, "wte"), SX_OK);
    e = sx_nn_position_embedding(net, e);
    sx_nn_layer_norm_params lp = sx_nn_layer_norm_params_default();
    sx_nn_layer *h = sx_nn_layer_norm(net, e, &lp);
    sx_nn_attention_params ap = sx_nn_attention_params_default(2);
    ap.causal = true;
    ap.fused_qkv = true;
    ap.dropout = 0.1;
    h = sx_nn_attention(net, h, &ap);
    sx_nn_layer *sum[2] = {e, h};
    h = sx_nn_add(net, 2, sum);
    h = sx_nn_layer_norm(net, h, &lp);
    sx_nn_layer *head = sx_nn_linear_nobias(net, h, V, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_layer_rename(net, head, "head"), SX_OK);
    cr_assert_eq(sx_nn_share(net, "head.weight", "wte.weight", true), SX_OK, "%s", sx_last_error());
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim.kind = SX_OPTIM_ADAM;
    p.optim.lr = 0.01;
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, &p, B, &m), SX_OK, "%s", sx_last_error());
    int64_t xs[2] = {B, S}, ys[3] = {B, S, V};
    sx_tensor *xt = tu_zeros(SX_F32, 2, xs), *yt = tu_zeros(SX_F32, 3, ys);
    sx_rng r;
    sx_rng_seed(&r, 6);
    double first = 0, last = 0;
    for (int step = 1; step <= 80; step++) {
        cr_assert_eq(sx_tensor_fill(yt, 0), SX_OK);
        for (int64_t b = 0; b < B; b++) {
            int64_t t0 = (int64_t)(sx_rng_u64(&r) % V);
            for (int64_t t = 0; t < S; t++) {
                sx_tensor_set(xt, b * S + t, (double)((t0 + t) % V));
                sx_tensor_set(yt, (b * S + t) * V + (t0 + t + 1) % V, 1);
            }
        }
        double loss = 0;
        cr_assert_eq(sx_nn_model_step(m, xt, yt, p.optim.lr, step, &loss, NULL), SX_OK, "%s",
                     sx_last_error());
        cr_assert(isfinite(loss));
        if (step <= 5)
            first += loss / 5;
        if (step > 75)
            last += loss / 5;
    }
    cr_assert_lt(last, first * 0.3, "loss %g -> %g", first, last);
    sx_nn_model_free(m);
    /* the saved model (the fused op in its inference graph) predicts what the network does */
    char path[64];
    snprintf(path, sizeof path, "/tmp/strix_test_attention_%d.sxm", (int)getpid());
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_model *loaded = NULL, *inf = NULL;
    cr_assert_eq(sx_nn_load(path, B, &loaded), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_compile_infer(net, B, &inf), SX_OK, "%s", sx_last_error());
    sx_tensor *a = tu_zeros(SX_F32, 3, ys), *b2 = tu_zeros(SX_F32, 3, ys);
    cr_assert_eq(sx_nn_model_predict(inf, xt, a), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(loaded, xt, b2), SX_OK, "%s", sx_last_error());
    for (int64_t i = 0; i < a->size; i++)
        cr_assert_float_eq(sx_tensor_get(a, i), sx_tensor_get(b2, i), 1e-6, "prediction %lld",
                           (long long)i);
    unlink(path);
    sx_nn_model_free(inf);
    sx_nn_model_free(loaded);
    sx_tensor_free(a);
    sx_tensor_free(b2);
    sx_tensor_free(xt);
    sx_tensor_free(yt);
    sx_nn_net_free(net);
}

Test(nn_attention, bad_dropout_is_an_error)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("bad", SX_F32, 1, &net), SX_OK);
    int64_t in[2] = {4, 6};
    sx_nn_layer *x = sx_nn_input(net, 2, in);
    sx_nn_attention_params p = sx_nn_attention_params_default(2);
    p.dropout = 1;
    cr_assert_null(sx_nn_attention(net, x, &p));
    cr_assert_eq(sx_nn_net_status(net), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "dropout") != NULL, "%s", sx_last_error());
    sx_nn_net_free(net);
}
