/* Parameters by name: listing, get and set, layer names, shared (tied) parameters. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sx_nn.h"

enum { T = 4, V = 7, C = 5, B = 3 };

/* tokens (T) -> embedding "wte" (V, C) -> batch norm -> linear "head" (C -> V, no bias); with tied,
 * head.weight is wte.weight transposed. */
static sx_nn_net *lm(uint64_t seed, bool tied)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("lm", SX_F64, seed, &net), SX_OK);
    sx_nn_net_set_input_scale(net, 1);
    int64_t in[1] = {T};
    sx_nn_embedding_params ep = sx_nn_embedding_params_default(V, C);
    sx_nn_layer *e = sx_nn_embedding(net, sx_nn_input(net, 1, in), &ep);
    cr_assert_eq(sx_nn_layer_rename(net, e, "wte"), SX_OK, "%s", sx_last_error());
    sx_nn_layer *h = sx_nn_linear_nobias(net, sx_nn_layer_norm(net, e, NULL), V, SX_ACT_NONE);
    cr_assert_eq(sx_nn_layer_rename(net, h, "head"), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    if (tied)
        cr_assert_eq(sx_nn_share(net, "head.weight", "wte.weight", true), SX_OK, "%s",
                     sx_last_error());
    return net;
}

static sx_tensor *mat(sx_dtype dt, int64_t r, int64_t c)
{
    int64_t s[2] = {r, c};
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_new(dt, 2, s, &t), SX_OK);
    return t;
}

static sx_tensor *get(const sx_nn_net *net, const char *name, int64_t r, int64_t c)
{
    sx_tensor *t = mat(SX_F64, r, c);
    cr_assert_eq(sx_nn_net_param_get(net, name, t), SX_OK, "%s", sx_last_error());
    return t;
}

Test(nn_params, listed_with_names_shapes_and_roles)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("p", SX_F32, 1, &net), SX_OK);
    int64_t in[1] = {6};
    sx_nn_layer *l = sx_nn_linear(net, sx_nn_input(net, 1, in), 4, SX_ACT_RELU);
    sx_nn_batch_norm(net, l, NULL);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    const char *names[] = {"dense_1.weight",
                           "dense_1.bias",
                           "batch_norm_1.gamma",
                           "batch_norm_1.beta",
                           "batch_norm_1.running_mean",
                           "batch_norm_1.running_var"};
    cr_assert_eq(sx_nn_net_n_params(net), 6);
    for (int i = 0; i < 6; i++) {
        sx_nn_param_info pi;
        cr_assert_eq(sx_nn_net_param_info(net, i, &pi), SX_OK);
        cr_assert_str_eq(pi.name, names[i]);
        cr_assert_eq(pi.trainable, i < 4, "%s", pi.name);
        cr_assert_null(pi.shared_from);
        cr_assert_eq(pi.rank, i == 0 ? 2 : 1);
        cr_assert_eq(pi.shape[0], i == 0 ? 6 : 4);
        cr_assert_eq(pi.layer, sx_nn_net_layer(net, i < 2 ? "dense_1" : "batch_norm_1"));
    }
    sx_nn_param_info pi;
    cr_assert_eq(sx_nn_net_param_info(net, 6, &pi), SX_E_RANGE);
    cr_assert_eq(sx_nn_net_param_info(net, -1, &pi), SX_E_RANGE);
    cr_assert_not_null(sx_nn_net_layer(net, "dense_1"));
    cr_assert_null(sx_nn_net_layer(net, "dense_2"));
    sx_nn_net_free(net);
}

Test(nn_params, get_and_set_convert_and_check)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("p", SX_F32, 1, &net), SX_OK);
    int64_t in[1] = {3};
    sx_nn_linear(net, sx_nn_input(net, 1, in), 2, SX_ACT_NONE);
    sx_tensor *w = mat(SX_F64, 3, 2);
    for (int i = 0; i < 6; i++)
        sx_tensor_set(w, i, 0.25 * i - 0.5);
    cr_assert_eq(sx_nn_net_param_set(net, "dense_1.weight", w), SX_OK, "%s", sx_last_error());
    const sx_tensor *v = sx_nn_net_param(net, "dense_1.weight");
    cr_assert_not_null(v);
    cr_assert_eq(v->dtype, SX_F32);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(sx_tensor_get(v, i), 0.25 * i - 0.5);
    sx_tensor *back = get(net, "dense_1.weight", 3, 2);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(sx_tensor_get(back, i), 0.25 * i - 0.5);
    /* errors: unknown name, wrong shape, NULL */
    cr_assert_eq(sx_nn_net_param_set(net, "dense_1.kernel", w), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "no parameter named 'dense_1.kernel'") != NULL, "%s",
              sx_last_error());
    cr_assert_null(sx_nn_net_param(net, "nope"));
    sx_tensor *wrong = mat(SX_F64, 2, 3);
    cr_assert_eq(sx_nn_net_param_set(net, "dense_1.weight", wrong), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "dense_1.weight is (3,2), the tensor (2,3)") != NULL, "%s",
              sx_last_error());
    cr_assert_eq(sx_nn_net_param_get(net, "dense_1.weight", wrong), SX_E_SHAPE);
    cr_assert_eq(sx_nn_net_param_get(net, "dense_1.weight", NULL), SX_E_ARG);
    cr_assert_eq(sx_nn_net_param_set(NULL, "dense_1.weight", w), SX_E_ARG);
    sx_tensor_free(wrong);
    sx_tensor_free(back);
    sx_tensor_free(w);
    sx_nn_net_free(net);
}

Test(nn_params, rename_renames_parameters_and_refuses_clashes)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("p", SX_F32, 1, &net), SX_OK);
    int64_t in[1] = {3};
    sx_nn_layer *a = sx_nn_linear(net, sx_nn_input(net, 1, in), 3, SX_ACT_NONE);
    sx_nn_layer *b = sx_nn_linear(net, a, 2, SX_ACT_NONE);
    cr_assert_eq(sx_nn_layer_rename(net, a, "h.0.mlp.c_fc"), SX_OK, "%s", sx_last_error());
    cr_assert_not_null(sx_nn_net_param(net, "h.0.mlp.c_fc.weight"), "%s", sx_last_error());
    cr_assert_not_null(sx_nn_net_param(net, "h.0.mlp.c_fc.bias"));
    cr_assert_null(sx_nn_net_param(net, "dense_1.weight"));
    cr_assert_str_eq(sx_nn_layer_name(a), "h.0.mlp.c_fc");
    cr_assert_eq(sx_nn_net_layer(net, "h.0.mlp.c_fc"), a);
    cr_assert_eq(sx_nn_layer_rename(net, b, "h.0.mlp.c_fc"), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "already has a layer named") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_nn_layer_rename(net, b, ""), SX_E_ARG);
    cr_assert_eq(sx_nn_layer_rename(net, b, "a b"), SX_E_ARG);
    char longname[64];
    memset(longname, 'x', 48);
    longname[48] = 0;
    cr_assert_eq(sx_nn_layer_rename(net, b, longname), SX_E_ARG);
    longname[47] = 0;
    cr_assert_eq(sx_nn_layer_rename(net, b, longname), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_layer_rename(net, a, "h.0.mlp.c_fc"), SX_OK, "its own name again");
    /* a layer added later still gets a fresh default name */
    sx_nn_layer *c = sx_nn_linear(net, b, 2, SX_ACT_NONE);
    cr_assert_str_eq(sx_nn_layer_name(c), "dense_3");
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 1, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_layer_rename(net, c, "out"), SX_E_STATE, "a model knows the old names");
    sx_nn_model_free(m);
    sx_nn_net_free(net);
}

/* One SGD step (MSE) on a batch of fixed tokens and targets. */
static void sgd_step(sx_nn_net *net)
{
    sx_nn_train_params p = sx_nn_train_params_default();
    p.loss = SX_LOSS_MSE;
    p.optim.kind = SX_OPTIM_SGD;
    p.optim.lr = 0.5;
    p.verbose = 0;
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, &p, B, &m), SX_OK, "%s", sx_last_error());
    int64_t xs[2] = {B, T}, ys[3] = {B, T, V};
    sx_tensor *x = NULL, *y = NULL;
    cr_assert_eq(sx_tensor_new(SX_F64, 2, xs, &x), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F64, 3, ys, &y), SX_OK);
    for (int64_t i = 0; i < B * T; i++)
        sx_tensor_set(x, i, (double)((i * 5 + 2) % V));
    for (int64_t i = 0; i < B * T * V; i++)
        sx_tensor_set(y, i, sin(0.7 * (double)i));
    double loss = 0;
    cr_assert_eq(sx_nn_model_step(m, x, y, p.optim.lr, 1, &loss, NULL), SX_OK, "%s",
                 sx_last_error());
    sx_nn_model_free(m);
    sx_tensor_free(x);
    sx_tensor_free(y);
}

/* Copy every stored parameter of `from` into `to` by name (the tied head through its share). */
static void copy_params(const sx_nn_net *from, sx_nn_net *to)
{
    for (int i = 0; i < sx_nn_net_n_params(to); i++) {
        sx_nn_param_info pi;
        cr_assert_eq(sx_nn_net_param_info(to, i, &pi), SX_OK);
        int64_t *s = pi.shape;
        sx_tensor *t = NULL;
        cr_assert_eq(sx_tensor_new(SX_F64, pi.rank, s, &t), SX_OK);
        cr_assert_eq(sx_nn_net_param_get(from, pi.name, t), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_nn_net_param_set(to, pi.name, t), SX_OK, "%s", sx_last_error());
        sx_tensor_free(t);
    }
}

/* The tied table's step is the sum of the untied embedding's and head's steps (SGD is linear in
 * the gradient): the gradients of both uses are summed into the one tensor. */
Test(nn_params, tied_weights_sum_the_gradients_of_both_uses)
{
    sx_nn_net *tied = lm(1, true), *free_ = lm(2, false);
    sx_nn_param_info pi;
    cr_assert_eq(sx_nn_net_n_params(tied), 4); /* wte, gamma, beta, head */
    cr_assert_eq(sx_nn_net_param_info(tied, 3, &pi), SX_OK);
    cr_assert_str_eq(pi.name, "head.weight");
    cr_assert_str_eq(pi.shared_from, "wte.weight");
    cr_assert(pi.transposed);
    cr_assert_eq(pi.rank, 2);
    cr_assert_eq(pi.shape[0], C);
    cr_assert_eq(pi.shape[1], V);
    cr_assert_eq(sx_nn_net_param_count(tied), sx_nn_net_param_count(free_) - C * V);
    copy_params(tied, free_);
    /* the head reads the table transposed */
    sx_tensor *w0 = get(tied, "wte.weight", V, C), *h0 = get(tied, "head.weight", C, V);
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++)
            cr_assert_eq(sx_tensor_get(h0, c * V + v), sx_tensor_get(w0, v * C + c));
    sx_tensor *fw0 = get(free_, "wte.weight", V, C), *fh0 = get(free_, "head.weight", C, V);
    sgd_step(tied);
    sgd_step(free_);
    sx_tensor *w1 = get(tied, "wte.weight", V, C);
    sx_tensor *fw1 = get(free_, "wte.weight", V, C), *fh1 = get(free_, "head.weight", C, V);
    double moved = 0;
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++) {
            double d = sx_tensor_get(w1, v * C + c) - sx_tensor_get(w0, v * C + c);
            double de = sx_tensor_get(fw1, v * C + c) - sx_tensor_get(fw0, v * C + c);
            double dh = sx_tensor_get(fh1, c * V + v) - sx_tensor_get(fh0, c * V + v);
            cr_assert_float_eq(d, de + dh, 1e-12, "(%d,%d): %g vs %g + %g", v, c, d, de, dh);
            moved += fabs(dh);
        }
    cr_assert_gt(moved, 1e-3, "the head's own gradient is not negligible");
    sx_tensor *tensors[] = {w0, h0, fw0, fh0, w1, fw1, fh1};
    for (size_t i = 0; i < sizeof tensors / sizeof *tensors; i++)
        sx_tensor_free(tensors[i]);
    sx_nn_net_free(tied);
    sx_nn_net_free(free_);
}

static sx_tensor *predict(sx_nn_net *net)
{
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 2, &m), SX_OK, "%s", sx_last_error());
    int64_t xs[2] = {2, T}, ys[3] = {2, T, V};
    sx_tensor *x = NULL, *y = NULL;
    cr_assert_eq(sx_tensor_new(SX_F64, 2, xs, &x), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F64, 3, ys, &y), SX_OK);
    for (int64_t i = 0; i < 2 * T; i++)
        sx_tensor_set(x, i, (double)((i * 3 + 1) % V));
    cr_assert_eq(sx_nn_model_predict(m, x, y), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m);
    sx_tensor_free(x);
    return y;
}

Test(nn_params, tied_weights_predict_save_and_load)
{
    sx_nn_net *tied = lm(3, true), *free_ = lm(4, false);
    copy_params(tied, free_);
    sx_tensor *a = predict(tied), *b = predict(free_);
    cr_assert_eq(sx_tensor_max_abs_diff(a, b), 0.0);
    /* setting the head sets the table */
    sx_tensor *h = get(tied, "head.weight", C, V);
    sx_tensor_set(h, 1 * V + 6, 42); /* head (1, 6) is wte (6, 1) */
    cr_assert_eq(sx_nn_net_param_set(tied, "head.weight", h), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_get(sx_nn_net_param(tied, "wte.weight"), 6 * C + 1), 42);
    /* a checkpoint holds the table once and restores the tie's values */
    char path[] = "/tmp/sx_params_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    sx_nn_train_params tp = sx_nn_train_params_default();
    tp.optim.kind = SX_OPTIM_SGD;
    sx_tensor *before = predict(tied);
    cr_assert_eq(sx_nn_checkpoint_save(tied, &tp, path), SX_OK, "%s", sx_last_error());
    sx_nn_net *again = lm(5, true);
    cr_assert_eq(sx_nn_checkpoint_load(again, &tp, path), SX_OK, "%s", sx_last_error());
    sx_tensor *after = predict(again);
    cr_assert_eq(sx_tensor_max_abs_diff(before, after), 0.0);
    /* a model file predicts what the tied network does */
    cr_assert_eq(sx_nn_save(tied, path), SX_OK, "%s", sx_last_error());
    sx_nn_model *lm_file = NULL;
    cr_assert_eq(sx_nn_load(path, 2, &lm_file), SX_OK, "%s", sx_last_error());
    int64_t xs[2] = {2, T}, ys[3] = {2, T, V};
    sx_tensor *x = NULL, *y = NULL;
    cr_assert_eq(sx_tensor_new(SX_F64, 2, xs, &x), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F64, 3, ys, &y), SX_OK);
    for (int64_t i = 0; i < 2 * T; i++)
        sx_tensor_set(x, i, (double)((i * 3 + 1) % V));
    cr_assert_eq(sx_nn_model_predict(lm_file, x, y), SX_OK, "%s", sx_last_error());
    cr_assert_leq(sx_tensor_max_abs_diff(before, y), 1e-12);
    sx_nn_model_free(lm_file);
    sx_tensor_free(x);
    sx_tensor_free(y);
    cr_assert_eq(sx_nn_checkpoint_save(tied, &tp, path), SX_OK, "%s", sx_last_error());
    /* an untied network does not load it: its head is missing from the file */
    cr_assert_neq(sx_nn_checkpoint_load(free_, &tp, path), SX_OK);
    cr_assert(strstr(sx_last_error(), "head.weight") != NULL, "%s", sx_last_error());
    unlink(path);
    sx_tensor *tensors[] = {a, b, h, before, after};
    for (size_t i = 0; i < sizeof tensors / sizeof *tensors; i++)
        sx_tensor_free(tensors[i]);
    sx_nn_net_free(tied);
    sx_nn_net_free(free_);
    sx_nn_net_free(again);
}

Test(nn_params, share_refuses_what_cannot_be_tied)
{
    sx_nn_net *net = lm(6, false);
    struct {
        const char *name, *source;
        bool t;
        sx_status want;
        const char *msg;
    } cases[] = {
        {"head.weight", "wte.weight", false, SX_E_SHAPE, "want equal shapes"},
        {"head.weight", "layer_norm_1.gamma", true, SX_E_ARG, "both must be 2-d"},
        {"head.weight", "head.weight", true, SX_E_ARG, "its own tensor"},
        {"head.weight", "wte.bias", true, SX_E_ARG, "no parameter named 'wte.bias'"},
        {NULL, "wte.weight", true, SX_E_ARG, "NULL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cr_assert_eq(sx_nn_share(net, cases[i].name, cases[i].source, cases[i].t), cases[i].want,
                     "case %zu", i);
        cr_assert(strstr(sx_last_error(), cases[i].msg) != NULL, "case %zu: %s", i,
                  sx_last_error());
    }
    cr_assert_eq(sx_nn_share(net, "head.weight", "wte.weight", true), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_share(net, "head.weight", "wte.weight", true), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "already uses wte.weight") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_nn_share(net, "wte.weight", "head.weight", true), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "head.weight uses wte.weight itself") != NULL, "%s",
              sx_last_error());
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 1, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_share(net, "layer_norm_1.beta", "layer_norm_1.gamma", false), SX_E_STATE);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
}

/* A step with class-index targets gives the loss, accuracy count and weights of the same step
 * with one-hot targets (label smoothing too); an ignored position adds nothing. */
static void lm_step(sx_nn_net *net, bool sparse, double smoothing, int64_t ignore_at, double *loss,
                    int64_t *correct)
{
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim.kind = SX_OPTIM_ADAM;
    p.optim.lr = 0.05;
    p.label_smoothing = smoothing;
    p.sparse_targets = sparse;
    p.ignore_index = -1;
    p.verbose = 0;
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, &p, B, &m), SX_OK, "%s", sx_last_error());
    int64_t xs[2] = {B, T}, ys[3] = {B, T, V};
    sx_tensor *x = NULL, *y = NULL;
    cr_assert_eq(sx_tensor_new(SX_F64, 2, xs, &x), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F64, sparse ? 2 : 3, sparse ? xs : ys, &y), SX_OK);
    cr_assert_eq(sx_tensor_fill(y, 0), SX_OK);
    for (int64_t i = 0; i < B * T; i++) {
        sx_tensor_set(x, i, (double)((i * 5 + 2) % V));
        int64_t cls = (i * 3 + 1) % V;
        if (sparse)
            sx_tensor_set(y, i, i == ignore_at ? -1 : (double)cls);
        else
            sx_tensor_set(y, i * V + cls, 1);
    }
    cr_assert_eq(sx_nn_model_step(m, x, y, p.optim.lr, 1, loss, correct), SX_OK, "%s",
                 sx_last_error());
    sx_nn_model_free(m);
    sx_tensor_free(x);
    sx_tensor_free(y);
}

Test(nn_params, sparse_targets_step_as_one_hot_targets)
{
    for (int k = 0; k < 2; k++) {
        double e = k == 0 ? 0 : 0.1;
        sx_nn_net *a = lm(7, true), *b = lm(7, true);
        double la = 0, lb = 0;
        int64_t ca = 0, cb = 0;
        lm_step(a, false, e, -1, &la, &ca);
        lm_step(b, true, e, -1, &lb, &cb);
        cr_assert_float_eq(la, lb, 1e-12 * fabs(la), "smoothing %g: %.17g vs %.17g", e, la, lb);
        cr_assert_eq(ca, cb);
        sx_tensor *wa = get(a, "wte.weight", V, C), *wb = get(b, "wte.weight", V, C);
        cr_assert_leq(sx_tensor_max_abs_diff(wa, wb), 1e-12);
        sx_tensor_free(wa);
        sx_tensor_free(wb);
        sx_nn_net_free(a);
        sx_nn_net_free(b);
    }
    /* one ignored position: the mean over the others */
    sx_nn_net *a = lm(8, true), *b = lm(8, true);
    double l_all = 0, l_ign = 0;
    lm_step(a, true, 0, -1, &l_all, NULL);
    lm_step(b, true, 0, 0, &l_ign, NULL);
    cr_assert(fabs(l_all - l_ign) > 1e-9, "the ignored position changed nothing");
    sx_nn_net_free(a);
    sx_nn_net_free(b);
}

/* A position table longer than the sequence: the first T rows are added and trained, the rest
 * untouched; a table shorter than the sequence is refused. */
Test(nn_params, position_table_of_a_maximum_length)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("pos", SX_F64, 1, &net), SX_OK);
    sx_nn_net_set_input_scale(net, 1);
    int64_t in[2] = {T, C};
    sx_nn_layer *x = sx_nn_input(net, 2, in);
    sx_nn_layer *p = sx_nn_position_embedding_max(net, x, 10);
    cr_assert_not_null(p, "%s", sx_last_error());
    sx_nn_param_info pi;
    cr_assert_eq(sx_nn_net_param_info(net, 0, &pi), SX_OK);
    cr_assert_eq(pi.shape[0], 10);
    cr_assert_eq(pi.shape[1], C);
    sx_tensor *w0 = get(net, pi.name, 10, C);
    int64_t xs[3] = {B, T, C};
    sx_tensor *xt = NULL, *y = NULL, *out = NULL;
    cr_assert_eq(sx_tensor_new(SX_F64, 3, xs, &xt), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F64, 3, xs, &y), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F64, 3, xs, &out), SX_OK);
    for (int64_t i = 0; i < B * T * C; i++) {
        sx_tensor_set(xt, i, cos((double)i));
        sx_tensor_set(y, i, 0);
    }
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, B, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(m, xt, out), SX_OK, "%s", sx_last_error());
    for (int64_t i = 0; i < B * T * C; i++)
        cr_assert_eq(sx_tensor_get(out, i), sx_tensor_get(xt, i) + sx_tensor_get(w0, i % (T * C)));
    sx_nn_model_free(m);
    sx_nn_train_params tp = sx_nn_train_params_default();
    tp.loss = SX_LOSS_MSE;
    tp.optim.kind = SX_OPTIM_SGD;
    tp.verbose = 0;
    cr_assert_eq(sx_nn_compile_train(net, &tp, B, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_step(m, xt, y, 0.1, 1, NULL, NULL), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m);
    sx_tensor *w1 = get(net, pi.name, 10, C);
    for (int64_t i = 0; i < 10 * C; i++) {
        bool used = i < T * C;
        cr_assert_eq(sx_tensor_get(w1, i) != sx_tensor_get(w0, i), used, "row %lld",
                     (long long)(i / C));
    }
    cr_assert_null(sx_nn_position_embedding_max(net, x, T - 1));
    cr_assert_eq(sx_nn_net_status(net), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "a table of 3 positions for sequences of 4") != NULL, "%s",
              sx_last_error());
    sx_tensor *tensors[] = {w0, w1, xt, y, out};
    for (size_t i = 0; i < sizeof tensors / sizeof *tensors; i++)
        sx_tensor_free(tensors[i]);
    sx_nn_net_free(net);
}

/* sx_nn_fit over a source of class indices trains with index targets as with one-hot ones. */
Test(nn_params, fit_with_sparse_targets_as_with_one_hot)
{
    enum { N = 24 };
    int64_t xs[2] = {N, T}, ys[2] = {N, T};
    sx_tensor *x = NULL, *y = NULL;
    cr_assert_eq(sx_tensor_new(SX_F64, 2, xs, &x), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F64, 2, ys, &y), SX_OK);
    for (int64_t i = 0; i < N * T; i++) {
        sx_tensor_set(x, i, (double)((i * 5 + 2) % V));
        sx_tensor_set(y, i, (double)((i * 3 + 1) % V));
    }
    sx_ds_source *src = NULL;
    cr_assert_eq(sx_ds_source_tensors(x, y, V, &src), SX_OK, "%s", sx_last_error());
    double loss[2];
    sx_tensor *w[2];
    for (int k = 0; k < 2; k++) {
        sx_nn_net *net = lm(10, true);
        sx_nn_fit_params fp = sx_nn_fit_params_default();
        fp.train.sparse_targets = k == 1;
        fp.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
        fp.train.optim.lr = 0.01;
        fp.train.batch = 5; /* a last batch of 4 */
        fp.train.epochs = 2;
        fp.train.verbose = 0;
        fp.train.shuffle = false;
        sx_nn_history h = {0};
        cr_assert_eq(sx_nn_fit(net, &fp, src, NULL, &h), SX_OK, "%s", sx_last_error());
        cr_assert_eq(h.n, 2);
        loss[k] = h.rows[1].train_loss;
        w[k] = get(net, "wte.weight", V, C);
        sx_nn_history_free(&h);
        sx_nn_net_free(net);
    }
    cr_assert_float_eq(loss[0], loss[1], 1e-10, "%.17g vs %.17g", loss[0], loss[1]);
    cr_assert_leq(sx_tensor_max_abs_diff(w[0], w[1]), 1e-10);
    sx_tensor_free(w[0]);
    sx_tensor_free(w[1]);
    sx_ds_source_free(src);
    sx_tensor_free(x);
    sx_tensor_free(y);
}
