/* Losses and outputs beyond (batch, classes): binary cross-entropy with logits and label
 * smoothing equal their formulas (the compiled step's loss and the evaluation's, both against a
 * double loop here); several heads each with its own loss and weight; outputs of rank > 1
 * (per-pixel classes, multi-dimensional regression) train; top-k and binary accuracy; the
 * predictions of a whole source. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"

#define N 192

static sx_ds_source *targets_source(int xrank, const int64_t *xshape, const double *x, int yrank,
                                    const int64_t *yshape, const double *y, int64_t n)
{
    sx_ds_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.x_type = sp.y_type = SX_DS_F64;
    sp.x_rank = xrank;
    sp.y_rank = yrank;
    memcpy(sp.x_shape, xshape, (size_t)xrank * sizeof *xshape);
    memcpy(sp.y_shape, yshape, (size_t)yrank * sizeof *yshape);
    sp.x_scale = 1;
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_memory(&sp, n, x, y, &s), SX_OK, "%s", sx_last_error());
    return s;
}

/* input (3) -> linear (k), no activation: outputs are logits. */
static sx_nn_net *logits_net(int64_t k, uint64_t seed)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("losses", SX_F64, seed, &net), SX_OK);
    sx_nn_layer *l = sx_nn_input(net, 1, (int64_t[]){3});
    l = sx_nn_linear(net, l, k, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

/* The linear layer's outputs for x (3) into o (k). */
static void forward(const sx_nn_net *net, const double *x, double *o, int64_t k)
{
    const sx_tensor *w = net->layers[1]->params[0].value, *b = net->layers[1]->params[1].value;
    for (int64_t j = 0; j < k; j++) {
        o[j] = sx_tensor_get(b, j);
        for (int i = 0; i < 3; i++)
            o[j] += x[i] * sx_tensor_get(w, i * k + j);
    }
}

static sx_nn_fit_params params(sx_nn_loss loss, int epochs, int batch)
{
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = epochs;
    p.train.batch = batch;
    p.train.loss = loss;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.train.optim.lr = 0.05;
    p.train.verbose = 0;
    return p;
}

/* x uniform in [-1, 1)^3; two labels: x0 > 0 and x1 + x2 > 0.2 (multi-label, separable). */
static void make_multilabel(double *x, double *y)
{
    sx_rng rng;
    sx_rng_seed(&rng, 31);
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 3; j++)
            x[i * 3 + j] = 2 * sx_rng_uniform(&rng) - 1;
        y[i * 2] = x[i * 3] > 0;
        y[i * 2 + 1] = x[i * 3 + 1] + x[i * 3 + 2] > 0.2;
    }
}

/* The batch's loss from one compiled step (computed before the update) against the formula. */
static double step_loss(sx_nn_net *net, const sx_nn_train_params *tp, double *x, double *y,
                        int64_t k, int64_t n)
{
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, tp, n, &m), SX_OK, "%s", sx_last_error());
    sx_tensor xt = sx_tensor_view(SX_F64, 2, (int64_t[]){n, 3}, x);
    sx_tensor yt = sx_tensor_view(SX_F64, 2, (int64_t[]){n, k}, y);
    double loss = 0;
    cr_assert_eq(sx_nn_model_step(m, &xt, &yt, 1e-9, 1, &loss, NULL), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m);
    return loss;
}

Test(nn_losses, bce_logits_matches_its_formula_and_learns_two_labels)
{
    static double x[N * 3], y[N * 2];
    make_multilabel(x, y);
    sx_nn_net *net = logits_net(2, 3);
    double want = 0, o[2];
    for (int i = 0; i < 32; i++) {
        forward(net, x + i * 3, o, 2);
        for (int j = 0; j < 2; j++) { /* -y log s(z) - (1 - y) log(1 - s(z)) */
            double s = 1 / (1 + exp(-o[j]));
            want -= y[i * 2 + j] * log(s) + (1 - y[i * 2 + j]) * log(1 - s);
        }
    }
    sx_nn_fit_params p = params(SX_LOSS_BCE_LOGITS, 40, 16);
    cr_assert_float_eq(step_loss(net, &p.train, x, y, 2, 32), want / 64, 1e-12);
    sx_ds_source *all = targets_source(1, (int64_t[]){3}, x, 1, (int64_t[]){2}, y, N);
    double loss = 0, acc = 0;
    p.metric = SX_METRIC_BINARY_ACCURACY;
    cr_assert_eq(sx_nn_evaluate_source(net, all, &p, &loss, &acc), SX_OK, "%s", sx_last_error());
    sx_nn_history h;
    cr_assert_eq(sx_nn_fit(net, &p, all, all, &h), SX_OK, "%s", sx_last_error());
    cr_assert_eq(h.metric, SX_METRIC_BINARY_ACCURACY);
    cr_assert_geq(h.rows[h.n - 1].val_metric, 0.95, "binary accuracy %g",
                  h.rows[h.n - 1].val_metric);
    cr_assert_lt(h.rows[h.n - 1].val_loss, loss);
    /* the predictions are probabilities: sigmoid of the logits */
    sx_tensor *pr = NULL;
    cr_assert_eq(sx_nn_predict_source(net, all, &p, &pr), SX_OK, "%s", sx_last_error());
    cr_assert_eq(pr->shape[0], N);
    cr_assert_eq(pr->shape[1], 2);
    int64_t right = 0;
    for (int i = 0; i < N; i++) {
        forward(net, x + i * 3, o, 2);
        for (int j = 0; j < 2; j++) {
            double s = sx_tensor_get(pr, i * 2 + j);
            cr_assert_float_eq(s, 1 / (1 + exp(-o[j])), 1e-12);
            right += (s > 0.5) == (y[i * 2 + j] > 0.5);
        }
    }
    /* the weights of the best epoch were restored */
    cr_assert_float_eq((double)right / (2 * N), h.rows[h.best_epoch - 1].val_metric, 1e-12);
    sx_tensor_free(pr);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_source_free(all);
}

Test(nn_losses, label_smoothing_matches_its_formula)
{
    static double x[N * 3], y[N * 3];
    sx_rng rng;
    sx_rng_seed(&rng, 5);
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 3; j++)
            x[i * 3 + j] = 2 * sx_rng_uniform(&rng) - 1;
        for (int j = 0; j < 3; j++)
            y[i * 3 + j] = j == i % 3;
    }
    sx_nn_net *net = logits_net(3, 4);
    double e = 0.2, want = 0, plain = 0, o[3];
    for (int i = 0; i < 32; i++) {
        forward(net, x + i * 3, o, 3);
        double mx = fmax(o[0], fmax(o[1], o[2]));
        double lse = mx + log(exp(o[0] - mx) + exp(o[1] - mx) + exp(o[2] - mx));
        for (int j = 0; j < 3; j++) {
            want -= ((1 - e) * y[i * 3 + j] + e / 3) * (o[j] - lse);
            plain -= y[i * 3 + j] * (o[j] - lse);
        }
    }
    sx_nn_fit_params p = params(SX_LOSS_CROSS_ENTROPY, 1, 32);
    p.train.label_smoothing = e;
    cr_assert_float_eq(step_loss(net, &p.train, x, y, 3, 32), want / 32, 1e-12);
    p.train.label_smoothing = 0;
    sx_nn_net *twin = logits_net(3, 4); /* the same weights, before any step */
    cr_assert_float_eq(step_loss(twin, &p.train, x, y, 3, 32), plain / 32, 1e-12);
    sx_nn_net_free(twin);
    sx_nn_net_free(net);
    net = logits_net(3, 4);
    /* the evaluation reports the same smoothed loss */
    sx_ds_source *s = targets_source(1, (int64_t[]){3}, x, 1, (int64_t[]){3}, y, 32);
    p.train.label_smoothing = e;
    double loss = 0, acc = 0;
    cr_assert_eq(sx_nn_evaluate_source(net, s, &p, &loss, &acc), SX_OK, "%s", sx_last_error());
    cr_assert_float_eq(loss, want / 32, 1e-12);
    p.train.label_smoothing = 1;
    cr_assert_eq(sx_nn_evaluate_source(net, s, &p, &loss, &acc), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "smoothing") != NULL, "%s", sx_last_error());
    sx_nn_net_free(net);
    sx_ds_source_free(s);
}

/* Two heads: 3 classes (cross-entropy, weight 1) and 2 regression targets (MSE, weight 0.5). */
static const sx_nn_head HEADS[2] = {{"kind", 3, SX_LOSS_CROSS_ENTROPY, 1.0},
                                    {"size", 2, SX_LOSS_MSE, 0.5}};

static void make_heads(double *x, double *y)
{
    sx_rng rng;
    sx_rng_seed(&rng, 9);
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 3; j++)
            x[i * 3 + j] = 2 * sx_rng_uniform(&rng) - 1;
        int c = x[i * 3] > 0.3 ? 0 : x[i * 3 + 1] > 0 ? 1 : 2;
        for (int j = 0; j < 3; j++)
            y[i * 5 + j] = j == c;
        y[i * 5 + 3] = 0.5 * x[i * 3 + 2] - 0.2;
        y[i * 5 + 4] = x[i * 3] + x[i * 3 + 1];
    }
}

Test(nn_losses, heads_each_with_own_loss_and_weight)
{
    static double x[N * 3], y[N * 5];
    make_heads(x, y);
    sx_nn_net *net = logits_net(5, 6);
    double ce = 0, se = 0, o[5];
    for (int i = 0; i < 32; i++) {
        forward(net, x + i * 3, o, 5);
        double mx = fmax(o[0], fmax(o[1], o[2]));
        double lse = mx + log(exp(o[0] - mx) + exp(o[1] - mx) + exp(o[2] - mx));
        for (int j = 0; j < 3; j++)
            ce -= y[i * 5 + j] * (o[j] - lse);
        for (int j = 3; j < 5; j++)
            se += (o[j] - y[i * 5 + j]) * (o[j] - y[i * 5 + j]);
    }
    sx_nn_fit_params p = params(SX_LOSS_MSE, 80, 16);
    p.train.n_heads = 2;
    p.train.heads = HEADS;
    cr_assert_float_eq(step_loss(net, &p.train, x, y, 5, 32), ce / 32 + 0.5 * se / 64, 1e-12);
    sx_ds_source *s = targets_source(1, (int64_t[]){3}, x, 1, (int64_t[]){5}, y, N);
    sx_nn_history h;
    cr_assert_eq(sx_nn_fit(net, &p, s, s, &h), SX_OK, "%s", sx_last_error());
    cr_assert_eq(h.metric, SX_METRIC_LOSS);
    cr_assert_eq(h.n_heads, 2);
    cr_assert_str_eq(h.head_names[1], "size");
    const sx_nn_epoch *r = &h.rows[h.n - 1];
    cr_assert_float_eq(r->val_loss, r->val_head_loss[0] + 0.5 * r->val_head_loss[1], 1e-12);
    cr_assert(isnan(r->val_head_loss[2]));
    cr_assert_lt(r->val_head_loss[1], 0.01, "regression head's MSE %g", r->val_head_loss[1]);
    cr_assert_lt(r->val_head_loss[0], 0.3, "class head's cross-entropy %g", r->val_head_loss[0]);
    /* the predictions: the class head's softmax, the regression head's values */
    sx_tensor *pr = NULL;
    cr_assert_eq(sx_nn_predict_source(net, s, &p, &pr), SX_OK, "%s", sx_last_error());
    forward(net, x, o, 5);
    double sum = 0;
    for (int j = 0; j < 3; j++)
        sum += sx_tensor_get(pr, j);
    cr_assert_float_eq(sum, 1, 1e-12);
    cr_assert_float_eq(sx_tensor_get(pr, 4), o[4], 1e-12);
    sx_tensor_free(pr);
    char path[] = "/tmp/strix_heads_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(sx_nn_history_write_csv(&h, path), SX_OK);
    FILE *f = fopen(path, "r");
    char line[256];
    cr_assert(fgets(line, sizeof line, f) != NULL);
    fclose(f);
    remove(path);
    cr_assert_str_eq(line, "epoch,train_loss,val_loss,val_loss,seconds,train_loss,lr,"
                           "val_loss_kind,val_loss_size,val_accuracy_kind,val_mse_size\n");
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_source_free(s);
}

Test(nn_losses, bad_heads_are_refused)
{
    static double x[N * 3], y[N * 5];
    make_heads(x, y);
    sx_ds_source *s = targets_source(1, (int64_t[]){3}, x, 1, (int64_t[]){5}, y, N);
    sx_nn_net *net = logits_net(5, 6);
    sx_nn_fit_params p = params(SX_LOSS_MSE, 1, 16);
    sx_nn_head bad[2] = {HEADS[0], HEADS[1]};
    p.train.n_heads = 2;
    p.train.heads = bad;
    bad[1].size = 3; /* 6 outputs in all, the network has 5 */
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "heads take 6") != NULL, "%s", sx_last_error());
    bad[1].size = 2;
    bad[1].name = "two words";
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_E_ARG);
    bad[1].name = "kind";
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "two heads named kind") != NULL, "%s", sx_last_error());
    bad[1].name = "size";
    bad[1].weight = -1;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_E_ARG);
    bad[1].weight = 0.5;
    p.train.n_heads = SX_NN_MAX_HEADS + 1;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_E_ARG);
    p.train.n_heads = 2;
    p.metric = SX_METRIC_ACCURACY; /* over every head: meaningless */
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "with heads") != NULL, "%s", sx_last_error());
    p.metric = SX_METRIC_AUTO;
    cr_assert_eq(net->epoch, 0);
    sx_nn_net_free(net);
    /* heads read logits: a network ending in a softmax is refused */
    cr_assert_eq(sx_nn_net_new("sm", SX_F64, 1, &net), SX_OK);
    sx_nn_layer *l = sx_nn_input(net, 1, (int64_t[]){3});
    l = sx_nn_linear(net, l, 5, SX_ACT_SOFTMAX);
    sx_nn_model *m = NULL;
    p.train.n_heads = 2;
    cr_assert_eq(sx_nn_compile_train(net, &p.train, 4, &m), SX_E_ARG);
    cr_assert_null(m);
    cr_assert(strstr(sx_last_error(), "softmax") != NULL, "%s", sx_last_error());
    sx_nn_net_free(net);
    sx_ds_source_free(s);
}

/* A segmentation-like task: (4, 4, 1) images, per-pixel class "bright" (x > 0.5) against "dark"
 * as one-hot (4, 4, 2) targets; a 1x1 convolution to 2 channels learns it with cross-entropy
 * over every pixel. Then a multi-dimensional regression: (4, 4, 1) targets 2x - 1 with MSE. */
Test(nn_losses, outputs_of_rank_above_one_train)
{
    static double x[N * 16], y[N * 32], yr[N * 16];
    sx_rng rng;
    sx_rng_seed(&rng, 12);
    for (int i = 0; i < N * 16; i++) {
        x[i] = sx_rng_uniform(&rng);
        y[2 * i] = x[i] <= 0.5;
        y[2 * i + 1] = x[i] > 0.5;
        yr[i] = 2 * x[i] - 1;
    }
    int64_t img[3] = {4, 4, 1}, seg[3] = {4, 4, 2};
    sx_ds_source *s = targets_source(3, img, x, 3, seg, y, N);
    sx_ds_source *sr = targets_source(3, img, x, 3, img, yr, N);
    for (int task = 0; task < 2; task++) {
        sx_nn_net *net = NULL;
        cr_assert_eq(sx_nn_net_new("seg", SX_F64, 2, &net), SX_OK);
        sx_nn_layer *l = sx_nn_input(net, 3, img);
        sx_nn_conv2d_params cp = sx_nn_conv2d_params_default(task == 0 ? 2 : 1, 1, 1);
        l = sx_nn_conv2d(net, l, &cp);
        cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
        sx_nn_fit_params p = params(task == 0 ? SX_LOSS_CROSS_ENTROPY : SX_LOSS_MSE, 60, 32);
        p.train.optim.lr = 0.1;
        if (task == 0)
            p.metric = SX_METRIC_ACCURACY; /* per pixel, from one-hot targets */
        sx_nn_history h;
        cr_assert_eq(sx_nn_fit(net, &p, task == 0 ? s : sr, task == 0 ? s : sr, &h), SX_OK, "%s",
                     sx_last_error());
        double v = h.rows[h.n - 1].val_metric;
        if (task == 0)
            cr_assert_geq(v, 0.97, "per-pixel accuracy %g", v);
        else
            cr_assert_lt(v, 1e-4, "per-element MSE %g", v);
        /* predictions come back in the output's shape */
        sx_tensor *pr = NULL;
        cr_assert_eq(sx_nn_predict_source(net, task == 0 ? s : sr, &p, &pr), SX_OK);
        cr_assert_eq(pr->rank, 4);
        cr_assert_eq(pr->shape[3], task == 0 ? 2 : 1);
        sx_tensor_free(pr);
        sx_nn_history_free(&h);
        sx_nn_net_free(net);
    }
    sx_ds_source_free(s);
    sx_ds_source_free(sr);
}

/* Top-k accuracy against a count over sx_nn_predict_source's probabilities. */
Test(nn_losses, top_k_accuracy_counts_the_class_among_the_k_largest)
{
    static double x[N * 3];
    static int32_t c[N];
    sx_rng rng;
    sx_rng_seed(&rng, 17);
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 3; j++)
            x[i * 3 + j] = 2 * sx_rng_uniform(&rng) - 1;
        c[i] = (int32_t)(i % 6);
    }
    sx_ds_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.x_type = SX_DS_F64;
    sp.x_rank = 1;
    sp.x_shape[0] = 3;
    sp.y_type = SX_DS_I32;
    sp.classes = 6;
    sp.x_scale = 1;
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_memory(&sp, N, x, c, &s), SX_OK);
    sx_nn_net *net = logits_net(6, 8);
    sx_nn_fit_params p = params(SX_LOSS_CROSS_ENTROPY, 1, 50);
    sx_tensor *pr = NULL;
    cr_assert_eq(sx_nn_predict_source(net, s, &p, &pr), SX_OK, "%s", sx_last_error());
    for (int k = 1; k <= 6; k++) {
        int64_t hits = 0;
        for (int i = 0; i < N; i++) {
            int above = 0;
            for (int j = 0; j < 6; j++)
                above += sx_tensor_get(pr, i * 6 + j) > sx_tensor_get(pr, i * 6 + c[i]);
            hits += above < k;
        }
        p.metric = SX_METRIC_TOP_K;
        p.top_k = k;
        double loss = 0, m = 0;
        cr_assert_eq(sx_nn_evaluate_source(net, s, &p, &loss, &m), SX_OK);
        cr_assert_eq(m, (double)hits / N, "top-%d: %g, counted %lld", k, m, (long long)hits);
        if (k == 6)
            cr_assert_eq(m, 1);
    }
    p.top_k = 0;
    double loss = 0, m = 0;
    cr_assert_eq(sx_nn_evaluate_source(net, s, &p, &loss, &m), SX_E_ARG);
    sx_tensor *none = (sx_tensor *)1;
    cr_assert_eq(sx_nn_predict_source(NULL, s, &p, &none), SX_E_ARG);
    cr_assert_null(none);
    sx_tensor_free(pr);
    sx_nn_net_free(net);
    sx_ds_source_free(s);
}

/* Several inputs: input a (3) and input b (2, 2) flattened, concatenated, then a linear layer
 * to two heads. A source's x row is a's 3 values then b's 4; the network computes the same as a
 * linear layer over the 7 values in that order (checked against a loop over its weights), fits
 * both heads, and its saved model takes the same flat rows. */
Test(nn_losses, several_inputs_read_their_part_of_x)
{
    static double x[N * 7], y[N * 5];
    sx_rng rng;
    sx_rng_seed(&rng, 23);
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 7; j++)
            x[i * 7 + j] = 2 * sx_rng_uniform(&rng) - 1;
        int c = x[i * 7] > 0.3 ? 0 : x[i * 7 + 1] > 0 ? 1 : 2; /* from a */
        for (int j = 0; j < 3; j++)
            y[i * 5 + j] = j == c;
        y[i * 5 + 3] = x[i * 7 + 3] - x[i * 7 + 6]; /* from b */
        y[i * 5 + 4] = 0.5 * x[i * 7 + 5];
    }
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("two_in", SX_F64, 3, &net), SX_OK);
    sx_nn_layer *a = sx_nn_input(net, 1, (int64_t[]){3});
    sx_nn_layer *b = sx_nn_input_add(net, 2, (int64_t[]){2, 2});
    sx_nn_layer *both[2] = {a, sx_nn_flatten(net, b)};
    sx_nn_layer *l = sx_nn_concatenate(net, 2, both);
    l = sx_nn_linear(net, l, 5, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_nn_net *bad = NULL; /* sx_nn_input first; a second sx_nn_input is still refused */
    cr_assert_eq(sx_nn_net_new("bad", SX_F64, 3, &bad), SX_OK);
    cr_assert_null(sx_nn_input_add(bad, 1, (int64_t[]){3}));
    cr_assert_eq(sx_nn_net_status(bad), SX_E_STATE);
    sx_nn_net_free(bad);
    cr_assert_null(sx_nn_input(net, 1, (int64_t[]){3}));
    cr_assert(strstr(sx_last_error(), "sx_nn_input_add") != NULL, "%s", sx_last_error());
    sx_nn_net_free(net);
    cr_assert_eq(sx_nn_net_new("two_in", SX_F64, 3, &net), SX_OK);
    a = sx_nn_input(net, 1, (int64_t[]){3});
    b = sx_nn_input_add(net, 2, (int64_t[]){2, 2});
    both[0] = a;
    both[1] = sx_nn_flatten(net, b);
    l = sx_nn_linear(net, sx_nn_concatenate(net, 2, both), 5, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_ds_source *s = targets_source(1, (int64_t[]){7}, x, 1, (int64_t[]){5}, y, N);
    sx_nn_fit_params p = params(SX_LOSS_MSE, 60, 16);
    p.train.n_heads = 2;
    p.train.heads = HEADS;
    sx_nn_history h;
    cr_assert_eq(sx_nn_fit(net, &p, s, s, &h), SX_OK, "%s", sx_last_error());
    const sx_nn_epoch *r = &h.rows[h.best_epoch - 1];
    cr_assert_lt(r->val_head_loss[1], 0.01, "b's regression head %g", r->val_head_loss[1]);
    cr_assert_lt(r->val_head_loss[0], 0.35, "a's class head %g", r->val_head_loss[0]);
    /* the raw outputs (MSE everywhere: values) against the weights applied to the row */
    p.train.n_heads = 0;
    sx_tensor *pr = NULL;
    cr_assert_eq(sx_nn_predict_source(net, s, &p, &pr), SX_OK, "%s", sx_last_error());
    const sx_nn_layer *lin = net->layers[net->n_layers - 1];
    const sx_tensor *w = lin->params[0].value, *bias = lin->params[1].value;
    for (int i = 0; i < N; i += 17)
        for (int k = 0; k < 5; k++) {
            double want = sx_tensor_get(bias, k);
            for (int j = 0; j < 7; j++)
                want += x[i * 7 + j] * sx_tensor_get(w, j * 5 + k);
            cr_assert_float_eq(sx_tensor_get(pr, i * 5 + k), want, 1e-12, "row %d out %d", i, k);
        }
    /* saved and loaded: the model takes the flat rows (batch, 7) */
    char path[] = "/tmp/strix_two_in_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(path, 4, &m), SX_OK, "%s", sx_last_error());
    remove(path);
    cr_assert_eq(sx_nn_model_input_rank(m), 1);
    cr_assert_eq(sx_nn_model_input_shape(m)[0], 7);
    sx_tensor xv = sx_tensor_view(SX_F64, 2, (int64_t[]){4, 7}, x);
    sx_tensor *o = tu_zeros(SX_F64, 2, (int64_t[]){4, 5});
    cr_assert_eq(sx_nn_model_predict(m, &xv, o), SX_OK, "%s", sx_last_error());
    for (int k = 0; k < 20; k++)
        cr_assert_float_eq(sx_tensor_get(o, k), sx_tensor_get(pr, k), 1e-12);
    sx_tensor_free(o);
    sx_nn_model_free(m);
    sx_tensor_free(pr);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_source_free(s);
}

/* The gradients the compiled step takes (one SGD step of lr 1 moves every weight by minus its
 * gradient) against central differences of the loss sx_nn_evaluate_source computes in double:
 * binary cross-entropy, smoothed cross-entropy, and two weighted heads. */
static void gradient_check(sx_nn_loss loss, double smoothing, int n_heads, int64_t k)
{
    static double x[32 * 3], y[32 * 5];
    sx_rng rng;
    sx_rng_seed(&rng, 41);
    for (int i = 0; i < 32; i++) {
        for (int j = 0; j < 3; j++)
            x[i * 3 + j] = 2 * sx_rng_uniform(&rng) - 1;
        for (int j = 0; j < k; j++) /* one-hot for cross-entropy, else values in [0, 1] */
            y[i * k + j] =
                loss == SX_LOSS_CROSS_ENTROPY ? (double)(j == i % k) : sx_rng_uniform(&rng);
        if (n_heads > 0) { /* heads: 3 one-hot classes, then 2 values */
            for (int j = 0; j < 3; j++)
                y[i * 5 + j] = j == i % 3;
        }
    }
    sx_ds_source *s = targets_source(1, (int64_t[]){3}, x, 1, (int64_t[]){k}, y, 32);
    sx_nn_fit_params p = params(loss, 1, 32);
    p.train.optim = sx_optim_params_default(SX_OPTIM_SGD);
    p.train.optim.lr = 1;
    p.train.label_smoothing = smoothing;
    p.train.n_heads = n_heads;
    p.train.heads = HEADS;
    p.train.shuffle = false;
    p.train_metric = false;
    sx_nn_net *net = logits_net(k, 7), *moved = logits_net(k, 7);
    cr_assert_eq(sx_nn_fit(moved, &p, s, NULL, NULL), SX_OK, "%s", sx_last_error());
    double m = 0;
    p.metric = SX_METRIC_LOSS;
    for (int q = 0; q < 2; q++) {
        sx_tensor *w = net->layers[1]->params[q].value;
        const sx_tensor *w1 = moved->layers[1]->params[q].value;
        for (int64_t e = 0; e < w->size; e++) {
            double w0 = sx_tensor_get(w, e), h = 1e-5, up = 0, down = 0;
            sx_tensor_set(w, e, w0 + h);
            cr_assert_eq(sx_nn_evaluate_source(net, s, &p, &up, &m), SX_OK);
            sx_tensor_set(w, e, w0 - h);
            cr_assert_eq(sx_nn_evaluate_source(net, s, &p, &down, &m), SX_OK);
            sx_tensor_set(w, e, w0);
            double fd = (up - down) / (2 * h), g = w0 - sx_tensor_get(w1, e);
            cr_assert(fabs(fd - g) <= 1e-7 + 1e-6 * fabs(fd),
                      "loss %d: param %d[%lld]: step gradient %.12g, central difference %.12g",
                      (int)loss, q, (long long)e, g, fd);
        }
    }
    sx_nn_net_free(net);
    sx_nn_net_free(moved);
    sx_ds_source_free(s);
}

Test(nn_losses, gradients_match_central_differences)
{
    gradient_check(SX_LOSS_BCE_LOGITS, 0, 0, 2);
    gradient_check(SX_LOSS_CROSS_ENTROPY, 0.15, 0, 4);
    gradient_check(SX_LOSS_MSE, 0.1, 2, 5); /* heads: smoothed cross-entropy and MSE */
}
