/* Inputs of ids (sx_nn_input_ids) and integer batches: token ids and class indices given as i32
 * or i64 tensors train, predict, save and fit exactly as the same numbers given as floats; the
 * preprocessing never touches ids; what a float cannot hold exactly is refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sx_nn.h"

enum { T = 4, V = 9, C = 6, B = 3 };

/* ids (T) -> embedding (V, C) -> layer norm -> linear (C -> V): next-token logits. `ids`: the
 * input is sx_nn_input_ids; else sx_nn_input with the input scale `scale`. */
static sx_nn_net *lm(sx_dtype dt, bool ids, double scale)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("lm", dt, 5, &net), SX_OK);
    if (scale > 0)
        sx_nn_net_set_input_scale(net, scale);
    int64_t in[1] = {T};
    sx_nn_embedding_params ep = sx_nn_embedding_params_default(V, C);
    sx_nn_layer *x = ids ? sx_nn_input_ids(net, 1, in) : sx_nn_input(net, 1, in);
    sx_nn_layer *e = sx_nn_embedding(net, x, &ep);
    sx_nn_linear(net, sx_nn_layer_norm(net, e, NULL), V, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

/* (B, T) tokens of dtype dt: token i is (i * 5 + 2) % V (class targets: (i * 3 + 1) % V). */
static sx_tensor *tokens(sx_dtype dt, int mul, int add)
{
    int64_t s[2] = {B, T};
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_new(dt, 2, s, &t), SX_OK);
    for (int64_t i = 0; i < B * T; i++)
        sx_tensor_set(t, i, (double)((i * mul + add) % V));
    return t;
}

static sx_tensor *logits(sx_dtype dt)
{
    int64_t s[3] = {B, T, V};
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_new(dt, 3, s, &t), SX_OK);
    return t;
}

static sx_nn_train_params sparse_params(void)
{
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim.kind = SX_OPTIM_ADAM;
    p.optim.lr = 0.05;
    p.sparse_targets = true;
    p.verbose = 0;
    return p;
}

/* Two steps and a prediction with (x, y) of the given dtypes; the loss and the outputs. */
static void run(sx_nn_net *net, sx_dtype xdt, sx_dtype ydt, double *loss, sx_tensor *out)
{
    sx_nn_train_params p = sparse_params();
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, &p, B, &m), SX_OK, "%s", sx_last_error());
    sx_tensor *x = tokens(xdt, 5, 2), *y = tokens(ydt, 3, 1);
    for (int s = 1; s <= 2; s++)
        cr_assert_eq(sx_nn_model_step(m, x, y, p.optim.lr, s, loss, NULL), SX_OK, "%s",
                     sx_last_error());
    sx_nn_model_free(m);
    cr_assert_eq(sx_nn_compile_infer(net, B, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(m, x, out), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m);
    sx_tensor_free(x);
    sx_tensor_free(y);
}

Test(nn_ids, integer_batches_train_and_predict_as_float_ones)
{
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = d == 0 ? SX_F32 : SX_F64;
        sx_nn_net *a = lm(dt, true, 0), *b = lm(dt, true, 0), *c = lm(dt, true, 0);
        sx_tensor *oa = logits(dt), *ob = logits(dt), *oc = logits(dt);
        double la = 0, lb = 0, lc = 0;
        run(a, dt, dt, &la, oa);
        run(b, SX_I32, SX_I64, &lb, ob);
        run(c, SX_I64, SX_I32, &lc, oc);
        cr_assert_eq(la, lb, "%s: %.17g vs %.17g", sx_dtype_name(dt), la, lb);
        cr_assert_eq(la, lc);
        cr_assert_eq(sx_tensor_max_abs_diff(oa, ob), 0.0);
        cr_assert_eq(sx_tensor_max_abs_diff(oa, oc), 0.0);
        sx_tensor *outs[] = {oa, ob, oc};
        for (int i = 0; i < 3; i++)
            sx_tensor_free(outs[i]);
        sx_nn_net_free(a);
        sx_nn_net_free(b);
        sx_nn_net_free(c);
    }
}

/* An input scale (1/255, as a byte image would set) leaves ids alone; on a plain input it
 * scales them (the reason ids have their own input). */
Test(nn_ids, the_input_scale_never_touches_ids)
{
    sx_nn_net *a = lm(SX_F64, true, 0), *b = lm(SX_F64, true, 1.0 / 255),
              *c = lm(SX_F64, false, 1.0 / 255);
    sx_tensor *x = tokens(SX_F64, 5, 2), *oa = logits(SX_F64), *ob = logits(SX_F64),
              *oc = logits(SX_F64);
    sx_nn_net *nets[] = {a, b, c};
    sx_tensor *outs[] = {oa, ob, oc};
    for (int i = 0; i < 2; i++)
        cr_assert_eq(sx_nn_predict_eager(nets[i], x, outs[i]), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_max_abs_diff(oa, ob), 0.0);
    /* a plain input scales them: ids / 255 are no rows of the table */
    cr_assert_eq(sx_nn_predict_eager(c, x, oc), SX_E_RANGE);
    cr_assert(strstr(sx_last_error(), "is not an integer") != NULL, "%s", sx_last_error());
    /* normalisation is refused on ids */
    double mean[T] = {1, 1, 1, 1}, std[T] = {2, 2, 2, 2};
    cr_assert_eq(sx_nn_net_set_normalization(a, T, mean, std), SX_E_STATE);
    cr_assert(strstr(sx_last_error(), "an input of ids") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_nn_net_set_normalization(c, T, mean, std), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < 3; i++) {
        sx_nn_net_free(nets[i]);
        sx_tensor_free(outs[i]);
    }
    sx_tensor_free(x);
}

Test(nn_ids, what_a_float_cannot_hold_and_integers_elsewhere_are_refused)
{
    sx_nn_net *net = lm(SX_F32, true, 0), *plain = lm(SX_F32, false, 1);
    sx_nn_model *m = NULL, *mp = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, B, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_compile_infer(plain, B, &mp), SX_OK, "%s", sx_last_error());
    sx_tensor *x = tokens(SX_I64, 5, 2), *out = logits(SX_F32);
    SX_I64P(x)[5] = ((int64_t)1 << 24) + 1; /* rounds to 2^24 in f32 */
    cr_assert_eq(sx_nn_model_predict(m, x, out), SX_E_RANGE);
    cr_assert(strstr(sx_last_error(), "element 5 is 16777217") != NULL, "%s", sx_last_error());
    SX_I64P(x)[5] = V; /* held exactly, but not a row of the table */
    cr_assert_eq(sx_nn_model_predict(m, x, out), SX_E_RANGE);
    SX_I64P(x)[5] = 1;
    cr_assert_eq(sx_nn_model_predict(m, x, out), SX_OK, "%s", sx_last_error());
    /* a network without ids takes floats only */
    cr_assert_eq(sx_nn_model_predict(mp, x, out), SX_E_DTYPE);
    cr_assert(strstr(sx_last_error(), "integer batches are for inputs of ids") != NULL, "%s",
              sx_last_error());
    sx_nn_model_free(m);
    /* integer targets only with sparse_targets */
    sx_nn_train_params p = sparse_params();
    p.sparse_targets = false;
    cr_assert_eq(sx_nn_compile_train(net, &p, B, &m), SX_OK, "%s", sx_last_error());
    int64_t ys[3] = {B, T, V};
    sx_tensor *y = NULL;
    cr_assert_eq(sx_tensor_zeros(SX_I32, 3, ys, &y), SX_OK);
    cr_assert_eq(sx_nn_model_step(m, x, y, 0.1, 1, NULL, NULL), SX_E_DTYPE);
    cr_assert(strstr(sx_last_error(), "y is i32") != NULL, "%s", sx_last_error());
    sx_nn_model_free(m);
    sx_nn_model_free(mp);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_tensor_free(out);
    sx_nn_net_free(net);
    sx_nn_net_free(plain);
}

/* A saved model of ids takes integer batches after loading, and after saving again. */
Test(nn_ids, a_saved_model_keeps_its_ids)
{
    sx_nn_net *net = lm(SX_F32, true, 0);
    char path[] = "/tmp/strix_ids_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_tensor *xi = tokens(SX_I32, 5, 2), *xf = tokens(SX_F32, 5, 2), *o1 = logits(SX_F32),
              *o2 = logits(SX_F32);
    cr_assert_eq(sx_nn_predict_eager(net, xf, o1), SX_OK, "%s", sx_last_error());
    for (int round = 0; round < 2; round++) {
        sx_nn_model *m = NULL;
        cr_assert_eq(sx_nn_load(path, B, &m), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_nn_model_predict(m, xi, o2), SX_OK, "%s", sx_last_error());
        cr_assert_leq(sx_tensor_max_abs_diff(o1, o2), 1e-6);
        if (round == 0)
            cr_assert_eq(sx_nn_model_save(m, path), SX_OK, "%s", sx_last_error());
        sx_nn_model_free(m);
    }
    unlink(path);
    sx_tensor *ts[] = {xi, xf, o1, o2};
    for (int i = 0; i < 4; i++)
        sx_tensor_free(ts[i]);
    sx_nn_net_free(net);
}

/* sx_nn_fit over a source of i64 ids and i32 class indices trains as over float tensors. */
Test(nn_ids, fit_from_integer_tensors)
{
    enum { N = 12 };
    int64_t s[2] = {N, T};
    sx_tensor *x[2], *y[2];
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(sx_tensor_new(k ? SX_I64 : SX_F64, 2, s, &x[k]), SX_OK);
        cr_assert_eq(sx_tensor_new(k ? SX_I32 : SX_F64, 2, s, &y[k]), SX_OK);
        for (int64_t i = 0; i < N * T; i++) {
            sx_tensor_set(x[k], i, (double)((i * 5 + 2) % V));
            sx_tensor_set(y[k], i, (double)((i * 3 + 1) % V));
        }
    }
    double loss[2];
    for (int k = 0; k < 2; k++) {
        sx_ds_source *src = NULL;
        cr_assert_eq(sx_ds_source_tensors(x[k], y[k], V, &src), SX_OK, "%s", sx_last_error());
        sx_nn_net *net = lm(SX_F64, true, 0);
        sx_nn_fit_params fp = sx_nn_fit_params_default();
        fp.train = sparse_params();
        fp.train.batch = 5;
        fp.train.epochs = 2;
        fp.train.shuffle = false;
        sx_nn_history h = {0};
        cr_assert_eq(sx_nn_fit(net, &fp, src, NULL, &h), SX_OK, "%s", sx_last_error());
        loss[k] = h.rows[1].train_loss;
        sx_nn_history_free(&h);
        sx_nn_net_free(net);
        sx_ds_source_free(src);
    }
    cr_assert_eq(loss[0], loss[1], "%.17g vs %.17g", loss[0], loss[1]);
    for (int k = 0; k < 2; k++) {
        sx_tensor_free(x[k]);
        sx_tensor_free(y[k]);
    }
}
