/* The sequence layers against PyTorch and by their definitions: LSTM and GRU
 * (stacked, last state or whole sequence) and multi-head attention (causal or not), outputs and
 * the gradients of sum(y * dy) with respect to the input and every parameter, in f64 to 1e-10
 * relative to the largest reference value of each tensor. The references are
 * tests/data/torch_rnn.txt, made by torch_rnn.py beside it (its head says how to regenerate and
 * the file format). Also: the embedding layer (rows, padding, gradient), a training step through
 * every sequence layer, a save/load round trip, and the documented errors. */
#include "testutil.h"
#include "torch_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"

#define MAX_T TR_MAX_TENSORS

/* |got - want| <= tol * max(max |want|, 1e-3) over the tensor (the floor for gradients that are
 * zero but for rounding, e.g. of attention's key bias, which softmax cancels) */
static void expect_close(const char *what, const sx_tensor *got, const tr_tensor *want, double tol)
{
    cr_assert_eq(got->size, want->size, "%s: %lld values, want %lld", what, (long long)got->size,
                 (long long)want->size);
    double big = 0;
    for (int64_t i = 0; i < want->size; i++)
        big = fmax(big, fabs(want->v[i]));
    big = fmax(big, 1e-3);
    for (int64_t i = 0; i < want->size; i++)
        cr_assert_leq(fabs(sx_tensor_get(got, i) - want->v[i]), tol * big,
                      "%s[%lld] = %.17g, want %.17g", what, (long long)i, sx_tensor_get(got, i),
                      want->v[i]);
}

/* A case's settings (tests/data/torch_rnn.py): batch, steps, features, units or heads, layers,
 * return sequences or causal. */
static int prm(const tr_case *c, int i)
{
    cr_assert_eq(c->n_num, 6, "%s: %d settings", c->name, c->n_num);
    return (int)c->num[i];
}

/* The case's network: input (T, d), then the layer(s) under test. */
static sx_nn_net *case_net(const tr_case *c)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("ref", SX_F64, 1, &net), SX_OK);
    int64_t in[2] = {prm(c, 1), prm(c, 2)};
    sx_nn_layer *l = sx_nn_input(net, 2, in);
    if (strcmp(c->kind, "attention") == 0) {
        sx_nn_attention_params p = sx_nn_attention_params_default(prm(c, 3));
        p.causal = prm(c, 5) != 0;
        l = sx_nn_attention(net, l, &p);
    } else {
        sx_nn_rnn_params p = sx_nn_rnn_params_default(prm(c, 3));
        p.layers = prm(c, 4);
        p.return_sequences = prm(c, 5) != 0;
        l = strcmp(c->kind, "lstm") == 0 ? sx_nn_lstm(net, l, &p) : sx_nn_gru(net, l, &p);
    }
    cr_assert_not_null(l, "%s: %s", c->name, sx_last_error());
    return net;
}

/* Every trainable parameter of the network in layer order. */
static int net_params(sx_nn_net *net, nn_param **ps, int max)
{
    int n = 0;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            cr_assert_lt(n, max);
            ps[n++] = &net->layers[i]->params[k];
        }
    return n;
}

static void check_case(const tr_case *c)
{
    sx_nn_net *net = case_net(c);
    nn_param *ps[MAX_T];
    int np = net_params(net, ps, MAX_T);
    cr_assert_eq(c->n_t, 4 + 2 * np, "%s: %d tensors for %d parameters", c->name, c->n_t, np);
    for (int k = 0; k < np; k++) {
        const tr_tensor *r = &c->t[1 + k];
        cr_assert(sx_shape_equal(ps[k]->value->rank, ps[k]->value->shape, r->rank, r->shape),
                  "%s: parameter %s has another shape than PyTorch's", c->name, ps[k]->name);
        for (int64_t i = 0; i < r->size; i++)
            sx_tensor_set(ps[k]->value, i, r->v[i]);
    }
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    nn_build b = {.g = g, .mode = NN_INFER};
    sx_tensor *xv = tr_to_tensor(SX_F64, &c->t[0]), *dyv = tr_to_tensor(SX_F64, &c->t[np + 2]);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, xv->rank, xv->shape), *y = NULL, *logits = NULL;
    cr_assert_eq(sx_cg_input_set(g, x, xv, SX_CG_COPY), SX_OK);
    cr_assert_eq(nn_forward(net, &b, x, &y, &logits), SX_OK, "%s: %s", c->name, sx_last_error());
    sx_cg_node *wrt[MAX_T + 1], *grads[MAX_T + 1];
    wrt[0] = x;
    int n = 1;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            wrt[n++] = nn_param_node_of(&b, net->layers[i], k);
    cr_assert_eq(sx_ad_vjp(g, y, sx_cg_const(g, dyv), n, wrt, grads), SX_OK, "%s: %s", c->name,
                 sx_last_error());
    sx_cg_node *want[MAX_T + 2];
    want[0] = y;
    memcpy(want + 1, grads, (size_t)n * sizeof *grads);
    cr_assert_eq(sx_cg_eval(g, n + 1, want), SX_OK, "%s: %s", c->name, sx_last_error());
    char what[256];
    snprintf(what, sizeof what, "%s y", c->name);
    expect_close(what, sx_cg_value(y), &c->t[np + 1], 1e-10);
    snprintf(what, sizeof what, "%s dx", c->name);
    expect_close(what, sx_cg_value(grads[0]), &c->t[np + 3], 1e-10);
    for (int k = 0; k < np; k++) {
        snprintf(what, sizeof what, "%s d%s", c->name, ps[k]->name);
        expect_close(what, sx_cg_value(grads[1 + k]), &c->t[np + 4 + k], 1e-10);
    }
    nn_build_free(&b);
    sx_cg_graph_free(g);
    sx_tensor_free(xv);
    sx_tensor_free(dyv);
    sx_nn_net_free(net);
}

Test(nn_rnn, outputs_and_gradients_match_pytorch)
{
    FILE *f = tr_open("torch_rnn.txt");
    static tr_case c;
    int n = 0;
    while (tr_read(f, &c)) {
        check_case(&c);
        tr_free(&c);
        n++;
    }
    fclose(f);
    cr_assert_eq(n, 6);
}

/* ---------------------------------------------------------------- embedding */

Test(nn_rnn, embedding_picks_rows_and_zeroes_the_padding_index)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("emb", SX_F64, 3, &net), SX_OK);
    int64_t in[1] = {4};
    sx_nn_embedding_params p = sx_nn_embedding_params_default(5, 3);
    p.pad = 2;
    sx_nn_layer *l = sx_nn_embedding(net, sx_nn_input(net, 1, in), &p);
    cr_assert_not_null(l, "%s", sx_last_error());
    cr_assert_eq(l->rank, 2);
    cr_assert_eq(l->shape[1], 3);
    const sx_tensor *w = l->params[0].value;
    for (int k = 0; k < 3; k++)
        cr_assert_eq(sx_tensor_get(w, 2 * 3 + k), 0.0, "the padding row starts at zero");
    double idx[8] = {0, 2, 4, 4, 1, 3, 2, 0};
    int64_t xs[2] = {2, 4}, ys[3] = {2, 4, 3};
    sx_tensor *x = NULL, *y = NULL;
    cr_assert_eq(sx_tensor_new(SX_F64, 2, xs, &x), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F64, 3, ys, &y), SX_OK);
    for (int i = 0; i < 8; i++)
        sx_tensor_set(x, i, idx[i]);
    /* a non-zero padding row still reads as zeros */
    sx_tensor_set(l->params[0].value, 2 * 3 + 1, 7);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 2, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(m, x, y), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < 3; k++)
            cr_assert_eq(sx_tensor_get(y, i * 3 + k),
                         idx[i] == 2 ? 0 : sx_tensor_get(w, (int64_t)idx[i] * 3 + k));
    /* an index out of range fails with SX_E_RANGE */
    sx_tensor_set(x, 3, 5);
    cr_assert_eq(sx_nn_model_predict(m, x, y), SX_E_RANGE);
    cr_assert(strstr(sx_last_error(), "idx[3] = 5") != NULL, "%s", sx_last_error());
    sx_nn_model_free(m);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_nn_net_free(net);
}

Test(nn_rnn, embedding_gradient_adds_rows_and_skips_the_padding_index)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    int64_t ts[2] = {4, 2}, is[1] = {5};
    sx_tensor *t = NULL, *i = NULL;
    cr_assert_eq(sx_tensor_new(SX_F64, 2, ts, &t), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F64, 1, is, &i), SX_OK);
    for (int k = 0; k < 8; k++)
        sx_tensor_set(t, k, k + 1);
    double iv[5] = {1, 3, 1, 0, 3};
    for (int k = 0; k < 5; k++)
        sx_tensor_set(i, k, iv[k]);
    sx_cg_node *table = sx_cg_param(g, "t", t), *idx = sx_cg_const(g, i);
    sx_cg_node *y = sx_cg_sum(g, sx_cg_embedding(g, table, idx, 3), SX_AXES_ALL, false), *gt;
    cr_assert_eq(sx_ad_grad(g, y, 1, &table, &gt), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(g, 1, &gt), SX_OK, "%s", sx_last_error());
    /* rows 0 once, 1 twice, 2 never, 3 the padding index */
    double want[8] = {1, 1, 2, 2, 0, 0, 0, 0};
    for (int k = 0; k < 8; k++)
        cr_assert_eq(sx_tensor_get(sx_cg_value(gt), k), want[k], "d table[%d]", k);
    /* a padding index outside [-1, vocab) */
    cr_assert_null(sx_cg_embedding(g, table, idx, 4));
    cr_assert_eq(sx_cg_graph_status(g), SX_E_RANGE);
    cr_assert(strstr(sx_last_error(), "padding index 4") != NULL, "%s", sx_last_error());
    sx_cg_graph_free(g);
    sx_tensor_free(t);
    sx_tensor_free(i);
}

/* Every error sx_cgraph.h states for the embedding ops, each naming the constructor. */
Test(nn_rnn, embedding_op_errors)
{
    const struct {
        sx_status want;
        const char *who;
    } cases[] = {{SX_E_RANK, "sx_cg_embedding"},         {SX_E_RANGE, "sx_cg_embedding"},
                 {SX_E_DTYPE, "sx_cg_embedding"},        {SX_E_SHAPE, "sx_cg_embedding_backward"},
                 {SX_E_ARG, "sx_cg_embedding_backward"}, {SX_E_RANGE, "sx_cg_embedding_backward"}};
    int64_t ts[2] = {4, 3}, t3[3] = {4, 3, 1}, is[1] = {5}, gs[2] = {5, 3}, bad[2] = {6, 3};
    for (int k = 0; k < 6; k++) { /* a fresh graph each: a graph keeps its first error */
        sx_cg_graph *g = NULL;
        cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
        sx_cg_node *t = sx_cg_input(g, "t", SX_F32, 2, ts),
                   *t3n = sx_cg_input(g, "t3", SX_F32, 3, t3);
        sx_cg_node *idx = sx_cg_input(g, "i", SX_F32, 1, is),
                   *gr = sx_cg_input(g, "g", SX_F32, 2, gs);
        sx_cg_node *gbad = sx_cg_input(g, "gb", SX_F32, 2, bad);
        sx_cg_node *i64 = sx_cg_input(g, "i64", SX_F64, 1, is);
        sx_cg_node *n = k == 0   ? sx_cg_embedding(g, t3n, idx, -1)
                        : k == 1 ? sx_cg_embedding(g, t, idx, -2)
                        : k == 2 ? sx_cg_embedding(g, t, i64, -1)
                        : k == 3 ? sx_cg_embedding_backward(g, gbad, idx, -1, 4)
                        : k == 4 ? sx_cg_embedding_backward(g, gr, idx, -1, 0)
                                 : sx_cg_embedding_backward(g, gr, idx, 4, 4);
        cr_assert_null(n);
        cr_assert_eq(sx_cg_graph_status(g), cases[k].want, "case %d: %s", k, sx_last_error());
        cr_assert(strstr(sx_last_error(), cases[k].who) != NULL, "case %d: %s", k, sx_last_error());
        sx_cg_graph_free(g);
    }
}

/* ---------------------------------------------------------------- training, save and load */

/* A tiny sequence classifier: embedding -> lstm or gru (2 layers) -> attention -> linear over
 * the last step; trained on "is token 1 in the sequence"; the loss falls, and a saved model
 * predicts what the compiled network does (to 1e-6). */
static void train_and_save(bool gru)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("seq", SX_F32, 11, &net), SX_OK);
    sx_nn_net_set_input_scale(net, 1);
    int64_t in[1] = {6};
    sx_nn_layer *l = sx_nn_input(net, 1, in);
    sx_nn_embedding_params ep = sx_nn_embedding_params_default(4, 8);
    ep.pad = 0;
    l = sx_nn_embedding(net, l, &ep);
    sx_nn_rnn_params rp = sx_nn_rnn_params_default(8);
    rp.layers = 2;
    rp.return_sequences = true;
    l = gru ? sx_nn_gru(net, l, &rp) : sx_nn_lstm(net, l, &rp);
    sx_nn_attention_params ap = sx_nn_attention_params_default(2);
    ap.causal = true;
    l = sx_nn_attention(net, l, &ap);
    l = sx_nn_flatten(net, l);
    l = sx_nn_linear(net, l, 2, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim.kind = SX_OPTIM_ADAM;
    p.optim.lr = 0.01;
    const int64_t B = 16;
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, &p, B, &m), SX_OK, "%s", sx_last_error());
    int64_t xs[2] = {B, 6}, ys[2] = {B, 2};
    sx_tensor *x = NULL, *y = NULL;
    cr_assert_eq(sx_tensor_new(SX_F32, 2, xs, &x), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F32, 2, ys, &y), SX_OK);
    sx_rng r;
    sx_rng_seed(&r, 5);
    double first = 0, last = 0;
    for (int step = 1; step <= 60; step++) {
        for (int64_t e = 0; e < B; e++) {
            bool has = false;
            for (int k = 0; k < 6; k++) {
                double v = (double)(sx_rng_u64(&r) % 4);
                has = has || v == 1;
                sx_tensor_set(x, e * 6 + k, v);
            }
            sx_tensor_set(y, e * 2, has ? 0 : 1);
            sx_tensor_set(y, e * 2 + 1, has ? 1 : 0);
        }
        double loss = 0;
        cr_assert_eq(sx_nn_model_step(m, x, y, p.optim.lr, step, &loss, NULL), SX_OK, "%s",
                     sx_last_error());
        cr_assert(isfinite(loss));
        if (step <= 5)
            first += loss / 5;
        if (step > 55)
            last += loss / 5;
    }
    cr_assert_lt(last, first * 0.7, "loss %g -> %g", first, last);
    sx_nn_model_free(m);
    /* save and load: the same predictions */
    char path[64];
    snprintf(path, sizeof path, "/tmp/strix_test_rnn_%d_%d.sxm", (int)getpid(), gru);
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_model *loaded = NULL;
    cr_assert_eq(sx_nn_load(path, B, &loaded), SX_OK, "%s", sx_last_error());
    sx_tensor *a = NULL, *b2 = NULL;
    cr_assert_eq(sx_tensor_new(SX_F32, 2, ys, &a), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F32, 2, ys, &b2), SX_OK);
    sx_nn_model *inf = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, B, &inf), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(inf, x, a), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(inf);
    cr_assert_eq(sx_nn_model_predict(loaded, x, b2), SX_OK, "%s", sx_last_error());
    for (int64_t i = 0; i < a->size; i++)
        cr_assert_float_eq(sx_tensor_get(a, i), sx_tensor_get(b2, i), 1e-6, "prediction %lld",
                           (long long)i);
    unlink(path);
    sx_nn_model_free(loaded);
    sx_tensor_free(a);
    sx_tensor_free(b2);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_nn_net_free(net);
}

Test(nn_rnn, lstm_trains_and_saves)
{
    train_and_save(false);
}

Test(nn_rnn, gru_trains_and_saves)
{
    train_and_save(true);
}

/* ---------------------------------------------------------------- errors */

Test(nn_rnn, bad_arguments_are_errors)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("bad", SX_F32, 1, &net), SX_OK);
    int64_t in[2] = {5, 3};
    sx_nn_layer *x = sx_nn_input(net, 2, in);
    sx_nn_rnn_params rp = sx_nn_rnn_params_default(0);
    cr_assert_null(sx_nn_lstm(net, x, &rp));
    cr_assert_eq(sx_nn_net_status(net), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "0 units") != NULL, "%s", sx_last_error());
    sx_nn_net_free(net);

    cr_assert_eq(sx_nn_net_new("bad", SX_F32, 1, &net), SX_OK);
    x = sx_nn_input(net, 2, in);
    rp = sx_nn_rnn_params_default(4);
    rp.layers = 0;
    cr_assert_null(sx_nn_gru(net, x, &rp));
    cr_assert_eq(sx_nn_net_status(net), SX_E_ARG);
    sx_nn_net_free(net);

    cr_assert_eq(sx_nn_net_new("bad", SX_F32, 1, &net), SX_OK);
    int64_t in1[1] = {5};
    x = sx_nn_input(net, 1, in1);
    rp = sx_nn_rnn_params_default(4);
    cr_assert_null(sx_nn_lstm(net, x, &rp));
    cr_assert_eq(sx_nn_net_status(net), SX_E_RANK);
    sx_nn_net_free(net);

    cr_assert_eq(sx_nn_net_new("bad", SX_F32, 1, &net), SX_OK);
    x = sx_nn_input(net, 2, in);
    sx_nn_attention_params ap = sx_nn_attention_params_default(2); /* 2 does not divide 3 */
    cr_assert_null(sx_nn_attention(net, x, &ap));
    cr_assert_eq(sx_nn_net_status(net), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "2 heads do not divide 3") != NULL, "%s", sx_last_error());
    sx_nn_net_free(net);

    cr_assert_eq(sx_nn_net_new("bad", SX_F32, 1, &net), SX_OK);
    x = sx_nn_input(net, 2, in);
    sx_nn_embedding_params ep = sx_nn_embedding_params_default(4, 2);
    ep.pad = 4;
    cr_assert_null(sx_nn_embedding(net, x, &ep));
    cr_assert_eq(sx_nn_net_status(net), SX_E_RANGE);
    cr_assert_null(sx_nn_lstm(net, x, NULL));
    sx_nn_net_free(net);
}
