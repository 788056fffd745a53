/* sx_nn_fit: training over any data source. Regression on y = A x + b converges to A and b;
 * classification of a linearly separable memory source reaches full validation accuracy;
 * early stopping stops after `patience` epochs without improvement and puts back the weights of
 * the best epoch bit for bit; the history has one row per epoch and is written as CSV; bad input
 * is refused with a message. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"

#define N 256

static const double A[2][3] = {{0.5, -1.25, 2.0}, {1.5, 0.25, -0.75}};
static const double B[2] = {0.3, -0.7};

/* x (N, 3) uniform in [-1, 1), y = A x + b (N, 2). */
static void make_linear(double *x, double *y, uint64_t seed)
{
    sx_rng rng;
    sx_rng_seed(&rng, seed);
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 3; j++)
            x[i * 3 + j] = 2 * sx_rng_uniform(&rng) - 1;
        for (int o = 0; o < 2; o++) {
            y[i * 2 + o] = B[o];
            for (int j = 0; j < 3; j++)
                y[i * 2 + o] += A[o][j] * x[i * 3 + j];
        }
    }
}

static sx_ds_source *memory_source(int xdim, const double *x, int ydim, const void *y,
                                   int64_t classes, int64_t n)
{
    sx_ds_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.x_type = SX_DS_F64;
    sp.x_rank = 1;
    sp.x_shape[0] = xdim;
    sp.classes = classes;
    sp.x_scale = 1;
    if (classes > 0) {
        sp.y_type = SX_DS_I32;
    } else {
        sp.y_type = SX_DS_F64;
        sp.y_rank = 1;
        sp.y_shape[0] = ydim;
    }
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_memory(&sp, n, x, y, &s), SX_OK, "%s", sx_last_error());
    return s;
}

/* input (3) -> linear (2): the model of y = A x + b. */
static sx_nn_net *linear_net(uint64_t seed)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("fit", SX_F64, seed, &net), SX_OK);
    sx_nn_layer *l = sx_nn_input(net, 1, (int64_t[]){3});
    l = sx_nn_linear(net, l, 2, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

static sx_nn_fit_params regression_params(sx_nn_loss loss, int epochs)
{
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = epochs;
    p.train.batch = 32;
    p.train.loss = loss;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.train.optim.lr = 0.05;
    p.train.verbose = 0;
    return p;
}

/* The dense layer's weight (3, 2) and bias (2) against A and b. */
static double max_error(const sx_nn_net *net)
{
    const sx_tensor *w = net->layers[1]->params[0].value, *b = net->layers[1]->params[1].value;
    double e = 0;
    for (int j = 0; j < 3; j++)
        for (int o = 0; o < 2; o++)
            e = fmax(e, fabs(sx_tensor_get(w, j * 2 + o) - A[o][j]));
    for (int o = 0; o < 2; o++)
        e = fmax(e, fabs(sx_tensor_get(b, o) - B[o]));
    return e;
}

static void regression_converges(sx_nn_loss loss, double tol)
{
    static double x[N * 3], y[N * 2];
    make_linear(x, y, 11);
    sx_ds_source *all = memory_source(3, x, 2, y, 0, N), *tr = NULL, *va = NULL;
    cr_assert_eq(sx_ds_split(all, 0.25, 3, &tr, &va), SX_OK);
    sx_nn_net *net = linear_net(5);
    sx_nn_fit_params p = regression_params(loss, 150);
    p.train.huber_delta = 0.5;
    sx_nn_history h;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_assert_eq(h.n, 150);
    cr_assert_eq(h.metric, SX_METRIC_MSE);
    double err = max_error(net);
    cr_assert_lt(err, tol, "loss %d: max |w - A|, |b - B| = %g (tolerance %g)", (int)loss, err,
                 tol);
    cr_assert_lt(h.rows[h.n - 1].val_metric, tol * tol);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
    sx_ds_source_free(all);
}

Test(nn_fit, regression_mse_converges_on_affine_map)
{
    regression_converges(SX_LOSS_MSE, 1e-3);
}

Test(nn_fit, regression_huber_and_l1_converge_on_affine_map)
{
    regression_converges(SX_LOSS_HUBER, 1e-2);
    regression_converges(SX_LOSS_L1, 2e-2);
}

/* The Huber loss sx_nn_evaluate_source reports equals the formula computed here. */
Test(nn_fit, huber_loss_matches_its_formula)
{
    static double x[N * 3], y[N * 2];
    make_linear(x, y, 12);
    sx_ds_source *s = memory_source(3, x, 2, y, 0, N);
    sx_nn_net *net = linear_net(6);
    sx_nn_fit_params p = regression_params(SX_LOSS_HUBER, 1);
    p.train.huber_delta = 0.3;
    double loss = 0, mae = 0, want = 0, want_mae = 0;
    p.metric = SX_METRIC_MAE;
    cr_assert_eq(sx_nn_evaluate_source(net, s, &p, &loss, &mae), SX_OK, "%s", sx_last_error());
    const sx_tensor *w = net->layers[1]->params[0].value, *b = net->layers[1]->params[1].value;
    for (int i = 0; i < N; i++)
        for (int o = 0; o < 2; o++) {
            double out = sx_tensor_get(b, o);
            for (int j = 0; j < 3; j++)
                out += x[i * 3 + j] * sx_tensor_get(w, j * 2 + o);
            double a = fabs(out - y[i * 2 + o]);
            want += a <= 0.3 ? 0.5 * a * a : 0.3 * (a - 0.15);
            want_mae += a;
        }
    cr_assert_float_eq(loss, want / (2 * N), 1e-12);
    cr_assert_float_eq(mae, want_mae / (2 * N), 1e-12);
    sx_nn_net_free(net);
    sx_ds_source_free(s);
}

/* Two classes split by the line x0 + 2 x1 = 0.1. */
static void make_classes(double *x, int32_t *y, uint64_t seed)
{
    sx_rng rng;
    sx_rng_seed(&rng, seed);
    for (int i = 0; i < N; i++) {
        x[2 * i] = 2 * sx_rng_uniform(&rng) - 1;
        x[2 * i + 1] = 2 * sx_rng_uniform(&rng) - 1;
        y[i] = x[2 * i] + 2 * x[2 * i + 1] > 0.1;
    }
}

static sx_nn_net *classifier(uint64_t seed)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("cls", SX_F32, seed, &net), SX_OK);
    sx_nn_layer *l = sx_nn_input(net, 1, (int64_t[]){2});
    l = sx_nn_linear(net, l, 16, SX_ACT_TANH);
    l = sx_nn_linear(net, l, 2, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

Test(nn_fit, classification_on_memory_source)
{
    static double x[N * 2];
    static int32_t y[N];
    make_classes(x, y, 21);
    sx_ds_source *all = memory_source(2, x, 0, y, 2, N), *tr = NULL, *va = NULL;
    cr_assert_eq(sx_ds_split(all, 0.2, 4, &tr, &va), SX_OK);
    sx_nn_net *net = classifier(8);
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = 60;
    p.train.batch = 16;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.train.optim.lr = 0.02;
    p.train.verbose = 0;
    sx_nn_history h;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_assert_eq(h.metric, SX_METRIC_ACCURACY);
    cr_assert_eq(h.n, 60);
    double acc = 0, loss = 0;
    cr_assert_eq(sx_nn_evaluate_source(net, va, &p, &loss, &acc), SX_OK);
    /* the best epoch's weights are restored: their accuracy is the best in the history */
    double best = 0;
    for (int64_t i = 0; i < h.n; i++)
        best = fmax(best, h.rows[i].val_metric);
    cr_assert_eq(acc, best);
    cr_assert_geq(acc, 0.95, "validation accuracy %g", acc);
    cr_assert_lt(h.rows[h.n - 1].train_loss, h.rows[0].train_loss);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
    sx_ds_source_free(all);
}

static bool same_weights(const sx_nn_net *a, const sx_nn_net *b)
{
    for (int i = 0; i < a->n_layers; i++)
        for (int k = 0; k < a->layers[i]->n_params; k++) {
            const sx_tensor *u = a->layers[i]->params[k].value, *v = b->layers[i]->params[k].value;
            if (memcmp(u->data, v->data, (size_t)u->size * sx_dtype_size(u->dtype)) != 0)
                return false;
        }
    return true;
}

/* With min_delta larger than any change, only the first epoch improves: the fit stops after
 * 1 + patience epochs and the weights equal those of a run of one epoch, bit for bit. Then a
 * real run: the weights after an early stop equal a run to its best epoch. */
Test(nn_fit, early_stopping_restores_best_weights)
{
    static double x[N * 3], y[N * 2];
    make_linear(x, y, 13);
    sx_ds_source *all = memory_source(3, x, 2, y, 0, N), *tr = NULL, *va = NULL;
    cr_assert_eq(sx_ds_split(all, 0.25, 3, &tr, &va), SX_OK);
    sx_nn_fit_params p = regression_params(SX_LOSS_MSE, 50);
    p.patience = 2;
    p.min_delta = 1e9;
    sx_nn_net *net = linear_net(7), *ref = linear_net(7);
    sx_nn_history h, hr;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_assert(h.stopped_early);
    cr_assert_eq(h.n, 3);
    cr_assert_eq(h.best_epoch, 1);
    cr_assert_eq(net->epoch, 3);
    p.train.epochs = 1;
    cr_assert_eq(sx_nn_fit(ref, &p, tr, va, &hr), SX_OK);
    cr_assert(same_weights(net, ref));
    cr_assert_eq(h.rows[0].val_metric, hr.rows[0].val_metric);
    sx_nn_history_free(&h);
    sx_nn_history_free(&hr);
    sx_nn_net_free(ref);
    sx_nn_net_free(net);

    /* a learning rate too large to settle: the metric stops improving at some epoch */
    p = regression_params(SX_LOSS_MSE, 200);
    p.train.optim = sx_optim_params_default(SX_OPTIM_SGD);
    p.train.optim.lr = 0.9;
    p.patience = 3;
    net = linear_net(9);
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_log_info("early stop: %lld epochs, best %lld", (long long)h.n, (long long)h.best_epoch);
    cr_assert(h.stopped_early);
    cr_assert_eq(h.n, h.best_epoch + 3);
    cr_assert_gt(h.best_epoch, 1);
    ref = linear_net(9);
    p.train.epochs = (int)h.best_epoch;
    p.patience = 0;
    cr_assert_eq(sx_nn_fit(ref, &p, tr, va, &hr), SX_OK);
    cr_assert(same_weights(net, ref), "best epoch %lld of %lld", (long long)h.best_epoch,
              (long long)h.n);
    sx_nn_history_free(&h);
    sx_nn_history_free(&hr);
    sx_nn_net_free(ref);
    sx_nn_net_free(net);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
    sx_ds_source_free(all);
}

Test(nn_fit, history_has_one_row_per_epoch_and_writes_csv)
{
    static double x[N * 3], y[N * 2];
    make_linear(x, y, 14);
    sx_ds_source *s = memory_source(3, x, 2, y, 0, N);
    sx_nn_net *net = linear_net(3);
    sx_nn_fit_params p = regression_params(SX_LOSS_MSE, 4);
    sx_nn_history h;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, &h), SX_OK, "%s", sx_last_error());
    cr_assert_eq(h.n, 4);
    cr_assert_eq(h.best_epoch, 0);
    for (int64_t i = 0; i < h.n; i++) {
        cr_assert_eq(h.rows[i].epoch, i + 1);
        cr_assert(isnan(h.rows[i].val_loss));
        cr_assert(isfinite(h.rows[i].train_loss));
    }
    /* a second call continues the network's epochs: 5 and 6 */
    sx_nn_history h2;
    p.train.epochs = 6;
    cr_assert_eq(sx_nn_fit(net, &p, s, s, &h2), SX_OK);
    cr_assert_eq(h2.n, 2);
    cr_assert_eq(h2.rows[0].epoch, 5);
    char path[] = "/tmp/strix_fit_history_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(sx_nn_history_write_csv(&h2, path), SX_OK);
    FILE *f = fopen(path, "r");
    char line[256];
    int lines = 0;
    cr_assert(fgets(line, sizeof line, f) != NULL);
    cr_assert_str_eq(line, "epoch,train_loss,val_loss,val_mse,seconds,train_mse,lr\n");
    lines++;
    while (fgets(line, sizeof line, f) != NULL)
        lines++;
    fclose(f);
    remove(path);
    cr_assert_eq(lines, 3);
    cr_assert_eq(sx_nn_history_write_csv(&h2, "/nonexistent/dir/h.csv"), SX_E_IO);
    sx_nn_history_free(&h);
    sx_nn_history_free(&h2);
    sx_nn_history_free(NULL);
    sx_nn_net_free(net);
    sx_ds_source_free(s);
}

Test(nn_fit, bad_input_is_refused)
{
    static double x[N * 3], y[N * 2];
    static int32_t c[N];
    make_linear(x, y, 15);
    sx_ds_source *s = memory_source(3, x, 2, y, 0, N), *k3 = memory_source(3, x, 0, c, 3, N);
    sx_nn_net *net = linear_net(3);
    sx_nn_fit_params p = regression_params(SX_LOSS_MSE, 1);
    sx_nn_history h;
    memset(&h, 0xff, sizeof h);
    cr_assert_eq(sx_nn_fit(NULL, &p, s, NULL, &h), SX_E_ARG);
    cr_assert_eq(h.n, 0);
    cr_assert_null(h.rows);
    cr_assert_eq(sx_nn_fit(net, &p, NULL, NULL, NULL), SX_E_ARG);
    p.patience = 1;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "validation") != NULL, "%s", sx_last_error());
    p.patience = 0;
    p.metric = SX_METRIC_ACCURACY;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_E_ARG);
    p.metric = SX_METRIC_AUTO;
    cr_assert_eq(sx_nn_fit(net, &p, k3, NULL, NULL), SX_E_SHAPE); /* 3 classes, 2 outputs */
    cr_assert(strstr(sx_last_error(), "3 classes") != NULL, "%s", sx_last_error());
    p.train.loss = SX_LOSS_HUBER;
    p.train.huber_delta = 0;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_E_ARG);
    p.train.loss = (sx_nn_loss)99;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_E_ARG);
    cr_assert_eq(net->epoch, 0);
    sx_nn_net_free(net);
    sx_ds_source_free(s);
    sx_ds_source_free(k3);
}

/* A fit resumed from its checkpoint (written at each epoch's end) continues the network's
 * epochs and ends with the weights of an uninterrupted fit, bit for bit. */
Test(nn_fit, resume_from_checkpoint_equals_uninterrupted_fit)
{
    static double x[N * 3], y[N * 2];
    make_linear(x, y, 16);
    sx_ds_source *s = memory_source(3, x, 2, y, 0, N);
    char ck[] = "/tmp/strix_fit_ckpt_XXXXXX";
    int fd = mkstemp(ck);
    cr_assert_geq(fd, 0);
    close(fd);
    remove(ck); /* a missing file: a fresh start */
    sx_nn_fit_params p = regression_params(SX_LOSS_MSE, 3);
    p.train.checkpoint_path = ck;
    sx_nn_net *a = linear_net(4), *b = linear_net(4), *ref = linear_net(4);
    sx_nn_history h;
    cr_assert_eq(sx_nn_fit(a, &p, s, NULL, NULL), SX_OK, "%s", sx_last_error());
    p.train.epochs = 5;
    cr_assert_eq(sx_nn_fit(b, &p, s, NULL, &h), SX_OK, "%s", sx_last_error());
    /* the resumed fit reports the whole run: epochs 1..3 from CK.fit, then 4 and 5 */
    cr_assert_eq(h.n, 5);
    cr_assert_eq(h.rows[3].epoch, 4);
    p.train.checkpoint_path = NULL;
    sx_nn_history hr;
    cr_assert_eq(sx_nn_fit(ref, &p, s, NULL, &hr), SX_OK);
    cr_assert_eq(hr.n, 5);
    for (int64_t i = 0; i < 5; i++) {
        cr_assert_eq(h.rows[i].epoch, i + 1);
        cr_assert_eq(h.rows[i].train_loss, hr.rows[i].train_loss, "epoch %lld", (long long)i + 1);
        cr_assert_eq(h.rows[i].train_metric, hr.rows[i].train_metric);
    }
    sx_nn_history_free(&hr);
    cr_assert(same_weights(b, ref));
    cr_assert_not(same_weights(a, ref));
    remove(ck);
    char st[64];
    snprintf(st, sizeof st, "%s.fit", ck);
    remove(st);
    sx_nn_history_free(&h);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    sx_nn_net_free(ref);
    sx_ds_source_free(s);
}
