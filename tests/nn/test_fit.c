/* sx_nn_fit: training over any data source. Regression on y = A x + b converges to A and b;
 * classification of a linearly separable memory source reaches full validation accuracy;
 * early stopping stops after `patience` epochs without improvement and puts back the weights of
 * the best epoch bit for bit (weights and batch-norm running statistics: evaluating the network
 * gives the best epoch's row); the monitor picks the column and its direction; a second fit
 * trains more epochs and equals one longer fit; the history has one row per epoch and is written
 * as CSV; bad input is refused with a message. */
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
    /* the best epoch's weights (by val_loss, the default monitor) are restored: their loss is
     * the lowest in the history, and evaluating them gives that epoch's row */
    cr_assert_str_eq(h.monitor, "val_loss");
    cr_assert_eq(h.mode, SX_MONITOR_MIN);
    const sx_nn_epoch *b = &h.rows[h.best_epoch - 1];
    for (int64_t i = 0; i < h.n; i++)
        cr_assert_geq(h.rows[i].val_loss, b->val_loss);
    cr_assert_eq(loss, b->val_loss);
    cr_assert_eq(acc, b->val_metric);
    cr_assert_eq(h.best, b->val_loss);
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
    /* a second call trains 2 more epochs, continuing the network's count: 5 and 6 */
    sx_nn_history h2;
    p.train.epochs = 2;
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

/* A second fit trains `epochs` more, as Keras' fit: the network's count goes on (2 + 2 = 4),
 * the rows continue it, the loss keeps falling, and the weights equal one fit of 4 epochs bit
 * for bit (the shuffling depends on the seed and the epoch only; the optimiser state and step
 * count carry on). start_epoch sets the run's start instead. */
Test(nn_fit, second_fit_trains_more_epochs)
{
    static double x[N * 3], y[N * 2];
    make_linear(x, y, 17);
    sx_ds_source *all = memory_source(3, x, 2, y, 0, N), *tr = NULL, *va = NULL;
    cr_assert_eq(sx_ds_split(all, 0.25, 3, &tr, &va), SX_OK);
    sx_nn_fit_params p = regression_params(SX_LOSS_MSE, 2);
    p.restore_best = false;
    sx_nn_net *net = linear_net(10), *ref = linear_net(10);
    sx_nn_history h1, h2, hr;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h1), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h2), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_net_epochs(net), 4);
    cr_assert_eq(h2.n, 2); /* the call's own rows */
    cr_assert_eq(h2.rows[0].epoch, 3);
    cr_assert_eq(h2.rows[1].epoch, 4);
    cr_assert_geq(h2.best_epoch, 3); /* early stopping's state is the call's */
    cr_assert_lt(h2.rows[0].train_loss, h1.rows[1].train_loss);
    cr_assert_lt(h2.rows[1].train_loss, h2.rows[0].train_loss);
    cr_assert_lt(h2.rows[1].val_loss, h1.rows[1].val_loss);
    p.train.epochs = 4;
    cr_assert_eq(sx_nn_fit(ref, &p, tr, va, &hr), SX_OK);
    cr_assert(same_weights(net, ref));
    cr_assert_eq(hr.rows[3].val_loss, h2.rows[1].val_loss);
    /* start_epoch 0: epochs counts from the network's first epoch (sx_nn_train's rule) */
    sx_nn_history h3;
    p.start_epoch = 0;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h3), SX_OK, "%s", sx_last_error());
    cr_assert_eq(h3.n, 0);
    sx_nn_history_free(&h3);
    p.train.epochs = 5;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h3), SX_OK, "%s", sx_last_error());
    cr_assert_eq(h3.n, 1);
    cr_assert_eq(h3.rows[0].epoch, 5);
    /* bad starts: refused, nothing trained */
    p.start_epoch = 9;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, NULL), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "epoch 9") != NULL, "%s", sx_last_error());
    p.start_epoch = -2;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, NULL), SX_E_ARG);
    p.start_epoch = -1;
    p.train.epochs = INT32_MAX;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, NULL), SX_E_ARG);
    cr_assert_eq(sx_nn_net_epochs(net), 5);
    sx_nn_history_free(&h1);
    sx_nn_history_free(&h2);
    sx_nn_history_free(&h3);
    sx_nn_history_free(&hr);
    sx_nn_net_free(net);
    sx_nn_net_free(ref);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
    sx_ds_source_free(all);
}

/* The first epoch with the best value of column `col` (0 train_loss, 1 val_loss, 2 val_metric),
 * higher or lower. */
static int64_t best_row(const sx_nn_history *h, int col, bool higher)
{
    int64_t best = 0;
    for (int64_t i = 1; i < h->n; i++) {
        const sx_nn_epoch *r = &h->rows[i], *b = &h->rows[best];
        double v = col == 0 ? r->train_loss : col == 1 ? r->val_loss : r->val_metric;
        double w = col == 0 ? b->train_loss : col == 1 ? b->val_loss : b->val_metric;
        best = (higher ? v > w : v < w) ? i : best;
    }
    return best + 1;
}

/* Early stopping, restoring and best_epoch follow the monitored column in its direction; a
 * name that is no column, or one the fit does not compute, is refused. */
Test(nn_fit, monitor_picks_the_column_and_its_direction)
{
    static double x[N * 3], y[N * 2];
    make_linear(x, y, 18);
    sx_ds_source *all = memory_source(3, x, 2, y, 0, N), *tr = NULL, *va = NULL;
    cr_assert_eq(sx_ds_split(all, 0.25, 3, &tr, &va), SX_OK);
    sx_nn_net *net = linear_net(11);
    sx_nn_fit_params p = regression_params(SX_LOSS_MSE, 6);
    p.monitor = "val_acc";
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, NULL), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "'val_acc'") != NULL, "%s", sx_last_error());
    cr_assert(strstr(sx_last_error(), "train_loss, val_loss, val_mse, train_mse") != NULL, "%s",
              sx_last_error());
    p.monitor = "val_loss";
    cr_assert_eq(sx_nn_fit(net, &p, tr, NULL, NULL), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "validation") != NULL, "%s", sx_last_error());
    p.monitor = "train_mse";
    p.train_metric = false;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, NULL), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "train_metric") != NULL, "%s", sx_last_error());
    p.train_metric = true;
    p.mode = (sx_nn_monitor_mode)7;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, NULL), SX_E_ARG);
    p.mode = SX_MONITOR_AUTO;
    cr_assert_eq(net->epoch, 0);

    /* the training loss, without validation: patience and restoring work on it */
    sx_nn_history h;
    p.monitor = "train_loss";
    p.min_delta = 1e9; /* only the first epoch improves */
    p.patience = 2;
    cr_assert_eq(sx_nn_fit(net, &p, tr, NULL, &h), SX_OK, "%s", sx_last_error());
    cr_assert_str_eq(h.monitor, "train_loss");
    cr_assert_eq(h.mode, SX_MONITOR_MIN);
    cr_assert(h.stopped_early);
    cr_assert_eq(h.n, 3);
    cr_assert_eq(h.best_epoch, 1);
    cr_assert_eq(h.best, h.rows[0].train_loss);
    sx_nn_net *ref = linear_net(11);
    p.train.epochs = 1;
    cr_assert_eq(sx_nn_fit(ref, &p, tr, NULL, NULL), SX_OK, "%s", sx_last_error());
    cr_assert(same_weights(net, ref));
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_nn_net_free(ref);

    /* val_loss upwards: the worst epoch of a falling loss counts as the best */
    p = regression_params(SX_LOSS_MSE, 6);
    p.monitor = "val_loss";
    p.mode = SX_MONITOR_MAX;
    net = linear_net(12);
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_assert_eq(h.mode, SX_MONITOR_MAX);
    cr_assert_eq(h.best_epoch, best_row(&h, 1, true));
    cr_assert_neq(h.best_epoch, best_row(&h, 1, false));
    double loss = 0, mse = 0;
    cr_assert_eq(sx_nn_evaluate_source(net, va, &p, &loss, &mse), SX_OK);
    cr_assert_eq(loss, h.rows[h.best_epoch - 1].val_loss);
    cr_assert_eq(mse, h.rows[h.best_epoch - 1].val_metric);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
    sx_ds_source_free(all);
}

/* val_accuracy goes upwards by itself (SX_MONITOR_AUTO), and the restored weights are those of
 * its first best epoch, whatever the loss did. */
Test(nn_fit, monitor_of_accuracy_goes_upwards)
{
    static double x[N * 2];
    static int32_t y[N];
    make_classes(x, y, 22);
    sx_ds_source *all = memory_source(2, x, 0, y, 2, N), *tr = NULL, *va = NULL;
    cr_assert_eq(sx_ds_split(all, 0.2, 4, &tr, &va), SX_OK);
    sx_nn_net *net = classifier(9);
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = 12;
    p.train.batch = 16;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.train.optim.lr = 0.02;
    p.train.verbose = 0;
    p.monitor = "val_accuracy";
    sx_nn_history h;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_assert_str_eq(h.monitor, "val_accuracy");
    cr_assert_eq(h.mode, SX_MONITOR_MAX);
    cr_assert_eq(h.best_epoch, best_row(&h, 2, true));
    cr_assert_lt(h.best_epoch, h.n, "the test wants a best epoch before the last");
    double loss = 0, acc = 0;
    cr_assert_eq(sx_nn_evaluate_source(net, va, &p, &loss, &acc), SX_OK);
    cr_assert_eq(acc, h.best);
    cr_assert_eq(loss, h.rows[h.best_epoch - 1].val_loss);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
    sx_ds_source_free(all);
}

/* input (2) -> linear (16) -> batch norm -> tanh -> linear (2) softmax: running statistics
 * among the parameters. */
static sx_nn_net *bn_classifier(uint64_t seed)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("bn", SX_F32, seed, &net), SX_OK);
    sx_nn_layer *l = sx_nn_input(net, 1, (int64_t[]){2});
    l = sx_nn_linear(net, l, 16, SX_ACT_NONE);
    l = sx_nn_batch_norm(net, l, NULL);
    l = sx_nn_activation(net, l, SX_ACT_TANH);
    l = sx_nn_linear(net, l, 2, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

static bool stop_at_step(const sx_nn_step_info *in, void *ctx)
{
    return in->step == *(const int64_t *)ctx;
}

/* The network after a fit that restores holds the best epoch's weights and batch-norm running
 * statistics: evaluating it gives that epoch's history row exactly. Also when the step callback
 * stops a few steps into the epoch after the best: those steps are undone. */
Test(nn_fit, restore_best_puts_back_weights_and_running_statistics)
{
    static double x[N * 2];
    static int32_t y[N];
    make_classes(x, y, 23);
    sx_ds_source *all = memory_source(2, x, 0, y, 2, N), *tr = NULL, *va = NULL;
    cr_assert_eq(sx_ds_split(all, 0.2, 4, &tr, &va), SX_OK);
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = 5;
    p.train.batch = 16;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.train.optim.lr = 0.02;
    p.train.verbose = 0;
    p.min_delta = 1e9; /* the first epoch is the best */
    sx_nn_net *net = bn_classifier(4), *ref = bn_classifier(4), *last = bn_classifier(4);
    sx_nn_history h;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_assert_eq(h.n, 5);
    cr_assert_eq(h.best_epoch, 1);
    double loss = 0, acc = 0;
    cr_assert_eq(sx_nn_evaluate_source(net, va, &p, &loss, &acc), SX_OK);
    cr_assert_eq(loss, h.rows[0].val_loss);
    cr_assert_eq(acc, h.rows[0].val_metric);
    sx_nn_history_free(&h);
    p.restore_best = false;
    cr_assert_eq(sx_nn_fit(last, &p, tr, va, NULL), SX_OK);
    cr_assert_not(same_weights(net, last));
    p.train.epochs = 1;
    cr_assert_eq(sx_nn_fit(ref, &p, tr, va, NULL), SX_OK);
    cr_assert(same_weights(net, ref)); /* weights and running statistics */
    sx_nn_net_free(net);

    /* stopped 2 steps into epoch 2 (13 batches of 16 in 205 examples) */
    net = bn_classifier(4);
    int64_t stop = 13 + 2;
    p.train.epochs = 5;
    p.restore_best = true;
    p.on_step = stop_at_step;
    p.on_step_ctx = &stop;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_assert(h.stopped_by_callback);
    cr_assert_eq(sx_nn_net_epoch_steps(net), 2);
    cr_assert_eq(h.best_epoch, 1);
    cr_assert(same_weights(net, ref), "the steps after the best epoch were kept");
    cr_assert_eq(sx_nn_evaluate_source(net, va, &p, &loss, &acc), SX_OK);
    cr_assert_eq(loss, h.rows[0].val_loss);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_nn_net_free(ref);
    sx_nn_net_free(last);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
    sx_ds_source_free(all);
}
