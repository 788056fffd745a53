/* sx_nn_fit beyond one label per example: class indices per position (a
 * (batch, h, w) label map for a (batch, h, w, classes) output) train and evaluate exactly as
 * the one-hot targets they stand for; networks with several named outputs train each with its
 * own loss and weight and report each one's loss and metric; a resumed fit with AdamW, a cosine
 * schedule or reduce-on-plateau ends bit for bit where the uninterrupted one does. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"

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

/* ---------------------------------------------------------------- per-pixel class indices */

enum { PN = 12, PH = 4, PW = 4, PC = 2, PK = 3 };

/* input (4, 4, 2) -> conv 3x3 same relu (4) -> conv 1x1 (3): per-pixel class scores */
static sx_nn_net *pixel_net(uint64_t seed)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("pix", SX_F64, seed, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){PH, PW, PC});
    sx_nn_conv2d_params cp = sx_nn_conv2d_params_default(4, 3, 3);
    cp.conv.padding = SX_PAD_SAME;
    cp.act = SX_ACT_RELU;
    x = sx_nn_conv2d(net, x, &cp);
    x = sx_nn_conv2d(net, x,
                     &(sx_nn_conv2d_params){.filters = PK,
                                            .kernel_h = 1,
                                            .kernel_w = 1,
                                            .conv = sx_conv2d_params_default(),
                                            .bias = true});
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

typedef struct pixel_data {
    sx_tensor *x, *labels, *onehot; /* (n, h, w, c), (n, h, w), (n, h, w, k) */
    sx_ds_source *by_index, *by_onehot;
} pixel_data;

static pixel_data pixel_data_new(void)
{
    pixel_data d;
    sx_rng r;
    sx_rng_seed(&r, 21);
    d.x = tu_rand(&r, SX_F64, 4, (int64_t[]){PN, PH, PW, PC}, -1, 1);
    d.labels = tu_zeros(SX_F64, 3, (int64_t[]){PN, PH, PW});
    d.onehot = tu_zeros(SX_F64, 4, (int64_t[]){PN, PH, PW, PK});
    for (int64_t i = 0; i < PN * PH * PW; i++) { /* the class: which channel sum bucket */
        double s = sx_tensor_get(d.x, 2 * i) + sx_tensor_get(d.x, 2 * i + 1);
        int k = s < -0.4 ? 0 : s < 0.4 ? 1 : 2;
        sx_tensor_set(d.labels, i, k);
        sx_tensor_set(d.onehot, i * PK + k, 1);
    }
    cr_assert_eq(sx_ds_source_tensors(d.x, d.labels, PK, &d.by_index), SX_OK, "%s",
                 sx_last_error());
    cr_assert_eq(sx_ds_source_tensors(d.x, d.onehot, 0, &d.by_onehot), SX_OK, "%s",
                 sx_last_error());
    return d;
}

static void pixel_data_free(pixel_data *d)
{
    sx_ds_source_free(d->by_index);
    sx_ds_source_free(d->by_onehot);
    sx_tensor_free(d->x);
    sx_tensor_free(d->labels);
    sx_tensor_free(d->onehot);
}

static sx_nn_fit_params pixel_params(void)
{
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = 3;
    p.train.batch = 5; /* a partial last batch of 2 */
    p.train.verbose = 0;
    p.train.label_smoothing = 0.1;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.train.optim.lr = 0.02;
    p.metric = SX_METRIC_ACCURACY;
    return p;
}

/* The loss and per-position accuracy of labels given as indices equal those of the same labels
 * as one-hot targets (f64, 1e-12), before and after training; training on either gives the same
 * weights bit for bit; the accuracy is the mean over every pixel of argmax == label. */
Test(nn_fit_outputs, per_pixel_class_indices_match_their_one_hot_targets)
{
    pixel_data d = pixel_data_new();
    sx_nn_fit_params p = pixel_params();
    sx_nn_net *a = pixel_net(3), *b = pixel_net(3);
    double la = 0, ma = 0, lb = 0, mb = 0;
    cr_assert_eq(sx_nn_evaluate_source(a, d.by_index, &p, &la, &ma), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_evaluate_source(b, d.by_onehot, &p, &lb, &mb), SX_OK, "%s", sx_last_error());
    cr_assert_float_eq(la, lb, 1e-12);
    cr_assert_eq(ma, mb);
    sx_nn_history ha, hb;
    cr_assert_eq(sx_nn_fit(a, &p, d.by_index, d.by_index, &ha), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_fit(b, &p, d.by_onehot, d.by_onehot, &hb), SX_OK, "%s", sx_last_error());
    cr_assert(same_weights(a, b), "indices and one-hot targets trained differently");
    for (int64_t e = 0; e < ha.n; e++) {
        cr_assert_float_eq(ha.rows[e].val_loss, hb.rows[e].val_loss, 1e-12);
        cr_assert_eq(ha.rows[e].val_metric, hb.rows[e].val_metric);
    }
    cr_assert_lt(ha.rows[ha.n - 1].train_loss, ha.rows[0].train_loss);
    /* the accuracy by hand: predictions of every pixel against its label */
    sx_tensor *pr = NULL;
    cr_assert_eq(sx_nn_predict_source(a, d.by_index, &p, &pr), SX_OK, "%s", sx_last_error());
    cr_assert_eq(pr->rank, 4);
    int64_t right = 0;
    for (int64_t i = 0; i < PN * PH * PW; i++) {
        int best = 0;
        double sum = 0;
        for (int k = 0; k < PK; k++) {
            sum += sx_tensor_get(pr, i * PK + k);
            if (sx_tensor_get(pr, i * PK + k) > sx_tensor_get(pr, i * PK + best))
                best = k;
        }
        cr_assert_float_eq(sum, 1, 1e-12); /* probabilities per pixel */
        right += best == (int)sx_tensor_get(d.labels, i);
    }
    cr_assert_eq(ha.rows[ha.n - 1].val_metric, (double)right / (PN * PH * PW));
    /* the loss by hand, smoothed: mean over pixels of -sum_k t_k log p_k */
    double want = 0, e = p.train.label_smoothing;
    for (int64_t i = 0; i < PN * PH * PW; i++)
        for (int k = 0; k < PK; k++) {
            double t = (1 - e) * (k == (int)sx_tensor_get(d.labels, i)) + e / PK;
            want -= t * log(sx_tensor_get(pr, i * PK + k));
        }
    double loss = 0, metric = 0;
    cr_assert_eq(sx_nn_evaluate_source(a, d.by_index, &p, &loss, &metric), SX_OK);
    cr_assert_float_eq(loss, want / (PN * PH * PW), 1e-12);
    sx_tensor_free(pr);
    sx_nn_history_free(&ha);
    sx_nn_history_free(&hb);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    pixel_data_free(&d);
}

/* A label that is not a class is SX_E_RANGE naming the example and position; labels of another
 * count than the output's positions, or classes other than its last axis, are SX_E_SHAPE. */
Test(nn_fit_outputs, bad_per_pixel_labels_are_refused)
{
    pixel_data d = pixel_data_new();
    sx_nn_fit_params p = pixel_params();
    sx_nn_net *a = pixel_net(3);
    sx_tensor_set(d.labels, 2 * PH * PW + 5, 3);
    cr_assert_eq(sx_nn_fit(a, &p, d.by_index, NULL, NULL), SX_E_RANGE);
    cr_assert(strstr(sx_last_error(), "example 2") != NULL &&
                  strstr(sx_last_error(), "position 5") != NULL,
              "%s", sx_last_error());
    sx_tensor_set(d.labels, 2 * PH * PW + 5, 1);
    sx_ds_source *four = NULL, *fewer = NULL;
    cr_assert_eq(sx_ds_source_tensors(d.x, d.labels, 4, &four), SX_OK);
    cr_assert_eq(sx_nn_fit(a, &p, four, NULL, NULL), SX_E_SHAPE);
    sx_tensor *half = tu_zeros(SX_F64, 3, (int64_t[]){PN, PH, PW / 2});
    cr_assert_eq(sx_ds_source_tensors(d.x, half, PK, &fewer), SX_OK);
    cr_assert_eq(sx_nn_fit(a, &p, fewer, NULL, NULL), SX_E_SHAPE);
    sx_ds_source_free(four);
    sx_ds_source_free(fewer);
    sx_tensor_free(half);
    sx_nn_net_free(a);
    pixel_data_free(&d);
}

/* ---------------------------------------------------------------- named outputs */

enum { ON = 96 };

/* input (3) -> linear 8 tanh -> "cls" linear 3 (logits), "reg" linear 2 */
static sx_nn_net *two_output_net(uint64_t seed, bool softmax)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("two", SX_F64, seed, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 1, (int64_t[]){3});
    sx_nn_layer *h = sx_nn_linear(net, x, 8, SX_ACT_TANH);
    sx_nn_layer *cls = sx_nn_linear(net, h, 3, softmax ? SX_ACT_SOFTMAX : SX_ACT_NONE);
    sx_nn_layer *reg = sx_nn_linear(net, h, 2, SX_ACT_NONE);
    sx_nn_output(net, cls, "cls");
    sx_nn_output(net, reg, "reg");
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

/* y rows (5): a one-hot class of x (3 classes by the sign pattern), then 2 regression values */
static void two_output_data(double *x, double *y)
{
    sx_rng r;
    sx_rng_seed(&r, 31);
    for (int i = 0; i < ON; i++) {
        for (int j = 0; j < 3; j++)
            x[i * 3 + j] = 2 * sx_rng_uniform(&r) - 1;
        double s = x[i * 3] + 0.5 * x[i * 3 + 1];
        int k = s < -0.3 ? 0 : s < 0.3 ? 1 : 2;
        for (int c = 0; c < 3; c++)
            y[i * 5 + c] = c == k;
        y[i * 5 + 3] = 0.5 * x[i * 3] - x[i * 3 + 2];
        y[i * 5 + 4] = 0.3 + 0.2 * x[i * 3 + 1];
    }
}

static sx_ds_source *two_output_source(const double *x, const double *y)
{
    sx_ds_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.x_type = sp.y_type = SX_DS_F64;
    sp.x_rank = sp.y_rank = 1;
    sp.x_shape[0] = 3;
    sp.y_shape[0] = 5;
    sp.x_scale = 1;
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_memory(&sp, ON, x, y, &s), SX_OK, "%s", sx_last_error());
    return s;
}

/* Each output's loss and metric in the history equal a computation by hand from the
 * predictions; the validation loss is their weighted sum; the CSV names the columns after the
 * outputs; the classifier learns. An output ending in a softmax trains as its logits would. */
Test(nn_fit_outputs, named_outputs_each_with_own_loss_weight_and_metrics)
{
    static double x[ON * 3], y[ON * 5];
    two_output_data(x, y);
    sx_ds_source *s = two_output_source(x, y);
    sx_nn_head heads[2] = {{"reg", 0, SX_LOSS_MSE, 0.5}, {"cls", 3, SX_LOSS_CROSS_ENTROPY, 1}};
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = 40;
    p.train.batch = 16;
    p.train.verbose = 0;
    p.train.heads = heads;
    p.train.n_heads = 2;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.train.optim.lr = 0.03;
    sx_nn_net *net = two_output_net(6, false);
    sx_nn_history h;
    cr_assert_eq(sx_nn_fit(net, &p, s, s, &h), SX_OK, "%s", sx_last_error());
    cr_assert_eq(h.metric, SX_METRIC_LOSS);
    cr_assert_eq(h.n_heads, 2);
    cr_assert_str_eq(h.head_names[0], "cls");
    cr_assert_str_eq(h.head_names[1], "reg");
    cr_assert_eq(h.head_metric[0], SX_METRIC_ACCURACY);
    cr_assert_eq(h.head_metric[1], SX_METRIC_MSE);
    const sx_nn_epoch *last = &h.rows[h.n - 1];
    cr_assert_float_eq(last->val_loss, last->val_head_loss[0] + 0.5 * last->val_head_loss[1],
                       1e-12);
    cr_assert_gt(last->val_head_metric[0], 0.8, "cls accuracy %g", last->val_head_metric[0]);
    cr_assert_lt(last->val_head_metric[1], h.rows[0].val_head_metric[1]);
    /* by hand from the predictions: softmax probabilities of cls, values of reg */
    sx_tensor *pr = NULL;
    cr_assert_eq(sx_nn_predict_source(net, s, &p, &pr), SX_OK, "%s", sx_last_error());
    cr_assert(pr->rank == 2 && pr->shape[1] == 5);
    double ce = 0, mse = 0, right = 0;
    for (int i = 0; i < ON; i++) {
        int best = 0, want = 0;
        for (int c = 0; c < 3; c++) {
            ce -= y[i * 5 + c] * log(sx_tensor_get(pr, i * 5 + c));
            best = sx_tensor_get(pr, i * 5 + c) > sx_tensor_get(pr, i * 5 + best) ? c : best;
            want = y[i * 5 + c] > 0.5 ? c : want;
        }
        right += best == want;
        for (int c = 3; c < 5; c++) {
            double dd = sx_tensor_get(pr, i * 5 + c) - y[i * 5 + c];
            mse += dd * dd;
        }
    }
    cr_assert_float_eq(last->val_head_loss[0], ce / ON, 1e-10);
    cr_assert_float_eq(last->val_head_loss[1], mse / (2 * ON), 1e-12);
    cr_assert_float_eq(last->val_head_metric[1], mse / (2 * ON), 1e-12);
    cr_assert_eq(last->val_head_metric[0], right / ON);
    /* the CSV's columns */
    char path[] = "/tmp/strix_outputs_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(sx_nn_history_write_csv(&h, path), SX_OK, "%s", sx_last_error());
    FILE *f = fopen(path, "r");
    char line[512];
    cr_assert_not_null(fgets(line, sizeof line, f));
    fclose(f);
    remove(path);
    cr_assert_str_eq(line, "epoch,train_loss,val_loss,val_loss,seconds,train_loss,lr,"
                           "val_loss_cls,val_loss_reg,val_accuracy_cls,val_mse_reg\n");
    /* cls ending in a softmax: the same training (the softmax folded into the loss) */
    sx_nn_net *soft = two_output_net(6, true);
    sx_nn_history hs;
    cr_assert_eq(sx_nn_fit(soft, &p, s, s, &hs), SX_OK, "%s", sx_last_error());
    cr_assert_float_eq(hs.rows[0].train_loss, h.rows[0].train_loss, 1e-12);
    cr_assert_float_eq(hs.rows[hs.n - 1].val_head_loss[0], last->val_head_loss[0], 1e-6);
    sx_nn_history_free(&hs);
    sx_nn_net_free(soft);
    sx_tensor_free(pr);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_source_free(s);
}

/* Without heads every output takes p.loss with weight 1; a head naming no output, or of another
 * size, is refused; a source of class labels does not fit several outputs. */
Test(nn_fit_outputs, named_outputs_default_loss_and_errors)
{
    static double x[ON * 3], y[ON * 5];
    two_output_data(x, y);
    sx_ds_source *s = two_output_source(x, y);
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = 1;
    p.train.batch = 32;
    p.train.verbose = 0;
    p.train.loss = SX_LOSS_MSE;
    sx_nn_net *net = two_output_net(6, false);
    double loss = 0, metric = 0;
    cr_assert_eq(sx_nn_evaluate_source(net, s, &p, &loss, &metric), SX_OK, "%s", sx_last_error());
    sx_tensor *pr = NULL;
    cr_assert_eq(sx_nn_predict_source(net, s, &p, &pr), SX_OK);
    double a = 0, b = 0;
    for (int i = 0; i < ON; i++)
        for (int c = 0; c < 5; c++) {
            double dd = sx_tensor_get(pr, i * 5 + c) - y[i * 5 + c];
            *(c < 3 ? &a : &b) += dd * dd;
        }
    cr_assert_float_eq(loss, a / (3 * ON) + b / (2 * ON), 1e-12);
    sx_tensor_free(pr);
    sx_nn_head bad[1] = {{"box", 0, SX_LOSS_MSE, 1}};
    p.train.heads = bad;
    p.train.n_heads = 1;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "box") != NULL, "%s", sx_last_error());
    sx_nn_head wrong[1] = {{"reg", 3, SX_LOSS_MSE, 1}};
    p.train.heads = wrong;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_E_SHAPE);
    p.train.n_heads = 0;
    p.metric = SX_METRIC_ACCURACY;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_E_ARG);
    p.metric = SX_METRIC_AUTO;
    int32_t labels[ON] = {0};
    sx_ds_spec sp = *sx_ds_source_spec(s);
    sp.y_type = SX_DS_I32;
    sp.y_rank = 0;
    sp.classes = 5;
    sx_ds_source *cls = NULL;
    cr_assert_eq(sx_ds_source_memory(&sp, ON, x, labels, &cls), SX_OK);
    cr_assert_eq(sx_nn_fit(net, &p, cls, NULL, NULL), SX_E_SHAPE);
    sx_ds_source_free(cls);
    /* sx_nn_train and sx_nn_evaluate take one (batch, classes) output */
    uint8_t pix[4 * 3] = {0}, lab[4] = {0};
    sx_ds_images d = {.n = 4, .h = 1, .w = 3, .c = 1, .classes = 5, .pixels = pix, .labels = lab};
    cr_assert_eq(sx_nn_train(net, &p.train, &d, NULL, NULL), SX_E_STATE);
    cr_assert(strstr(sx_last_error(), "sx_nn_fit") != NULL, "%s", sx_last_error());
    double acc = 0;
    cr_assert_eq(sx_nn_evaluate(net, &d, 2, &acc), SX_E_STATE);
    sx_nn_net_free(net);
    sx_ds_source_free(s);
}

/* ---------------------------------------------------------------- resuming the optimiser */

enum { RN = 64 };

static sx_nn_net *small_net(uint64_t seed)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("small", SX_F64, seed, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 1, (int64_t[]){3});
    x = sx_nn_linear(net, x, 6, SX_ACT_TANH);
    x = sx_nn_linear(net, x, 2, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK);
    return net;
}

static sx_ds_source *small_source(double *x, double *y)
{
    sx_rng r;
    sx_rng_seed(&r, 41);
    for (int i = 0; i < RN; i++) {
        for (int j = 0; j < 3; j++)
            x[i * 3 + j] = 2 * sx_rng_uniform(&r) - 1;
        y[i * 2] = sin(2 * x[i * 3]) + x[i * 3 + 1];
        y[i * 2 + 1] = x[i * 3 + 2] * x[i * 3];
    }
    sx_ds_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.x_type = sp.y_type = SX_DS_F64;
    sp.x_rank = sp.y_rank = 1;
    sp.x_shape[0] = 3;
    sp.y_shape[0] = 2;
    sp.x_scale = 1;
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_memory(&sp, RN, x, y, &s), SX_OK);
    return s;
}

static void remove_checkpoint(const char *ck)
{
    char st[128];
    snprintf(st, sizeof st, "%s.fit", ck);
    remove(ck);
    remove(st);
}

/* 2 + 2 epochs (a checkpoint between) against 4 in one go: the same weights bit for bit. */
static void resume_equals_uninterrupted(const sx_nn_fit_params *base, const char *what)
{
    static double x[RN * 3], y[RN * 2];
    sx_ds_source *s = small_source(x, y);
    char ck[64];
    snprintf(ck, sizeof ck, "/tmp/strix_resume_%d.ckpt", (int)getpid());
    remove_checkpoint(ck);
    sx_nn_fit_params p = *base;
    sx_nn_net *a = small_net(2), *ref = small_net(2);
    p.train.epochs = 4;
    cr_assert_eq(sx_nn_fit(ref, &p, s, s, NULL), SX_OK, "%s", sx_last_error());
    p.train.checkpoint_path = ck;
    p.train.epochs = 2;
    cr_assert_eq(sx_nn_fit(a, &p, s, s, NULL), SX_OK, "%s", sx_last_error());
    cr_assert_not(same_weights(a, ref));
    sx_nn_net *b = small_net(2); /* a new process would build the network again */
    p.train.epochs = 4;
    cr_assert_eq(sx_nn_fit(b, &p, s, s, NULL), SX_OK, "%s", sx_last_error());
    cr_assert(same_weights(b, ref), "%s: the resumed fit ends elsewhere", what);
    remove_checkpoint(ck);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    sx_nn_net_free(ref);
    sx_ds_source_free(s);
}

static sx_nn_fit_params adamw_params(sx_nn_schedule_kind kind)
{
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.batch = 16;
    p.train.verbose = 0;
    p.train.loss = SX_LOSS_MSE;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAMW);
    p.train.optim.lr = 0.05;
    p.train.optim.weight_decay = 0.05;
    p.train.schedule = sx_nn_schedule_default(kind);
    p.train_metric = false;
    return p;
}

Test(nn_fit_outputs, resumed_adamw_cosine_fit_ends_as_the_uninterrupted_one)
{
    sx_nn_fit_params p = adamw_params(SX_SCHED_COSINE);
    p.train.schedule.total_steps = 4 * (RN / 16); /* the 4 epochs' steps, in both runs */
    p.train.schedule.warmup_steps = 2;
    static const sx_nn_param_group groups[1] = {{SX_GROUP_NOT_WEIGHTS, NULL, 1, 0}};
    p.train.groups = groups;
    p.train.n_groups = 1;
    resume_equals_uninterrupted(&p, "adamw + cosine");
}

/* Reduce-on-plateau's state (the reduced rate, the best value, the epochs without improvement)
 * is in the checkpoint: before, the resumed run started again from the base rate. */
Test(nn_fit_outputs, resumed_plateau_fit_ends_as_the_uninterrupted_one)
{
    sx_nn_fit_params p = adamw_params(SX_SCHED_PLATEAU);
    p.train.schedule.patience = 0;
    p.train.schedule.factor = 0.5;
    p.train.schedule.threshold = 0.5; /* improvements of less than half count as none */
    resume_equals_uninterrupted(&p, "adamw + plateau");
    p.train.optim = sx_optim_params_default(SX_OPTIM_RMSPROP_MOMENTUM);
    p.train.optim.lr = 0.01;
    p.train.optim.momentum = 0.5;
    resume_equals_uninterrupted(&p, "rmsprop_momentum + plateau");
}

/* The checkpoint records the weight decay and dampening: another dampening (the velocity's
 * meaning) is refused; another weight decay resumes (a choice, like the rate). */
Test(nn_fit_outputs, checkpoint_records_weight_decay_and_dampening)
{
    static double x[RN * 3], y[RN * 2];
    sx_ds_source *s = small_source(x, y);
    char ck[64];
    snprintf(ck, sizeof ck, "/tmp/strix_damp_%d.ckpt", (int)getpid());
    remove_checkpoint(ck);
    sx_nn_fit_params p = adamw_params(SX_SCHED_CONSTANT);
    p.train.optim = sx_optim_params_default(SX_OPTIM_MOMENTUM);
    p.train.optim.dampening = 0.3;
    p.train.optim.weight_decay = 0.01;
    p.train.checkpoint_path = ck;
    p.train.epochs = 1;
    sx_nn_net *a = small_net(2);
    cr_assert_eq(sx_nn_fit(a, &p, s, NULL, NULL), SX_OK, "%s", sx_last_error());
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(ck, &f), SX_OK);
    cr_assert_str_eq(sx_cg_file_meta(f, "optim.dampening"), "0.29999999999999999");
    cr_assert_str_eq(sx_cg_file_meta(f, "optim.weight_decay"), "0.01");
    cr_assert_str_eq(sx_cg_file_meta(f, "checkpoint_version"), "3");
    sx_cg_file_free(f);
    sx_nn_net *b = small_net(2);
    p.train.epochs = 2;
    p.train.optim.dampening = 0.1;
    cr_assert_eq(sx_nn_fit(b, &p, s, NULL, NULL), SX_E_STATE);
    cr_assert(strstr(sx_last_error(), "dampening") != NULL, "%s", sx_last_error());
    p.train.optim.dampening = 0.3;
    p.train.optim.weight_decay = 0.02;
    cr_assert_eq(sx_nn_fit(b, &p, s, NULL, NULL), SX_OK, "%s", sx_last_error());
    remove_checkpoint(ck);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    sx_ds_source_free(s);
}
