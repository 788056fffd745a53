/* Training through the neural compiler, on synthetic data. The whole chain (forward, loss,
 * regularisation, autodiff, clipping, optimiser update, optimisation passes, memory plan) is
 * checked against central finite differences of a loss computed here from the inference
 * outputs: one SGD step with rate eta moves every parameter by exactly eta times that gradient.
 * Then: eager and compiled training agree, every optimiser learns, schedules advance inside one
 * compiled graph, the last partial batch is trained, compiled steps allocate nothing, a resumed
 * run equals an uninterrupted one bit for bit, and batch norm keeps its running statistics. */
#include "testutil.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"
#include "nn_layer_calls.h"

/* ---------------------------------------------------------------- helpers */

static sx_nn_net *net_new(sx_dtype dt, uint64_t seed)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("train", dt, seed, &net), SX_OK, "%s", sx_last_error());
    return net;
}

/* One-hot rows (n, k) of the labels. */
static sx_tensor *one_hot(sx_dtype dt, int64_t n, int64_t k, const int *labels)
{
    int64_t s[2] = {n, k};
    sx_tensor *y = tu_zeros(dt, 2, s);
    for (int64_t i = 0; i < n; i++)
        sx_tensor_set(y, i * k + labels[i], 1.0);
    return y;
}

/* Every trainable parameter as (layer, index) pairs, in layer order. */
typedef struct plist {
    nn_param *p[64];
    int n;
    int64_t total;
} plist;

static plist trainables(sx_nn_net *net)
{
    plist l = {.n = 0};
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            if (net->layers[i]->params[k].trainable) {
                cr_assert_lt(l.n, 64);
                l.p[l.n++] = &net->layers[i]->params[k];
                l.total += net->layers[i]->params[k].value->size;
            }
    return l;
}

/* All parameter values (trainable or not) in one array, in layer order. */
static double *snapshot(sx_nn_net *net, int64_t *count)
{
    int64_t n = 0;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            n += net->layers[i]->params[k].value->size;
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    int64_t j = 0;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            const sx_tensor *t = net->layers[i]->params[k].value;
            for (int64_t e = 0; e < t->size; e++)
                v[j++] = sx_tensor_get(t, e);
        }
    *count = n;
    return v;
}

/* Every stored tensor (parameters, optimiser states) of a and b is equal byte for byte. */
static void assert_identical(const sx_nn_net *a, const sx_nn_net *b)
{
    cr_assert_eq(a->n_layers, b->n_layers);
    for (int i = 0; i < a->n_layers; i++)
        for (int k = 0; k < a->layers[i]->n_params; k++) {
            const nn_param *p = &a->layers[i]->params[k], *q = &b->layers[i]->params[k];
            size_t bytes = (size_t)p->value->size * sx_dtype_size(p->value->dtype);
            cr_assert_eq(memcmp(p->value->data, q->value->data, bytes), 0, "%s differs (%.9g %.9g)",
                         p->name, sx_tensor_get(p->value, 0), sx_tensor_get(q->value, 0));
            for (int s = 0; s < NN_MAX_STATES; s++) {
                cr_assert_eq(p->state[s] == NULL, q->state[s] == NULL, "%s state %d", p->name, s);
                if (p->state[s] != NULL)
                    cr_assert_eq(memcmp(p->state[s]->data, q->state[s]->data, bytes), 0,
                                 "%s state %d differs", p->name, s);
            }
        }
    cr_assert_eq(a->step, b->step);
    cr_assert_eq(a->epoch, b->epoch);
    cr_assert_eq(memcmp(&a->dropout_rng, &b->dropout_rng, sizeof a->dropout_rng), 0);
}

/* A synthetic labelled image set (caller-owned arrays): class k brightens band k of the rows,
 * on noise; easy to learn. */
static sx_ds_images images(int64_t n, int64_t h, int64_t w, int64_t classes, uint64_t seed)
{
    sx_rng r;
    sx_rng_seed(&r, seed);
    sx_ds_images d = {.n = n, .h = h, .w = w, .c = 1, .classes = classes};
    d.pixels = malloc((size_t)(n * h * w));
    d.labels = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = (int64_t)sx_rng_below(&r, (uint64_t)classes);
        d.labels[i] = (uint8_t)k;
        for (int64_t a = 0; a < h; a++)
            for (int64_t b = 0; b < w; b++) {
                bool band = a * classes / h == k;
                d.pixels[(i * h + a) * w + b] = (uint8_t)(sx_rng_below(&r, 80) + (band ? 150 : 0));
            }
    }
    return d;
}

static void images_free(sx_ds_images *d)
{
    free(d->pixels);
    free(d->labels);
}

/* ---------------------------------------------------------------- finite differences */

enum { FD_N = 4, FD_H = 5, FD_W = 5, FD_C = 2, FD_K = 4 };

/* conv 3x3 (tanh) -> max pool 2x2 (SAME) -> dense 4 softmax, f64 */
static sx_nn_net *fd_net(uint64_t seed)
{
    sx_nn_net *net = net_new(SX_F64, seed);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){FD_H, FD_W, FD_C});
    x = t_conv2d(net, x, 3, 3, 3, 1, SX_PAD_SAME, SX_ACT_TANH);
    x = t_max_pool2d(net, x, 2, 2, 2, SX_PAD_SAME);
    x = sx_nn_fully_connected(net, x, FD_K, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    /* biases away from zero too */
    sx_rng r;
    sx_rng_seed(&r, seed + 1);
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            cr_assert_eq(sx_tensor_rand_uniform(net->layers[i]->params[k].value, &r, -0.6, 0.6),
                         SX_OK);
    return net;
}

/* The loss of the batch, from the inference outputs (softmax probabilities), computed here:
 * the data loss as the header defines it, plus regularisation of the weights. */
static double test_loss(sx_nn_net *net, sx_nn_model *infer, const sx_tensor *x, const sx_tensor *y,
                        const sx_nn_train_params *p, int64_t *correct)
{
    int64_t s[2] = {FD_N, FD_K};
    sx_tensor *out = tu_zeros(SX_F64, 2, s);
    cr_assert_eq(sx_nn_model_predict(infer, x, out), SX_OK, "%s", sx_last_error());
    const double *o = SX_F64P(out), *t = SX_F64P(y);
    double loss = 0;
    int64_t right = 0;
    for (int i = 0; i < FD_N; i++) {
        int best = 0, label = 0;
        for (int k = 0; k < FD_K; k++) {
            double pk = o[i * FD_K + k], tk = t[i * FD_K + k];
            switch (p->loss) {
            case SX_LOSS_CROSS_ENTROPY: /* mean over the batch of -sum t log p */
                loss -= tk * log(pk) / FD_N;
                break;
            case SX_LOSS_MSE: /* mean over every element */
                loss += (pk - tk) * (pk - tk) / (FD_N * FD_K);
                break;
            case SX_LOSS_L1:
                loss += fabs(pk - tk) / (FD_N * FD_K);
                break;
            case SX_LOSS_HINGE: /* targets as -1 / +1 */
                loss += fmax(0, 1 - (2 * tk - 1) * pk) / (FD_N * FD_K);
                break;
            case SX_LOSS_HUBER: { /* quadratic within delta, linear outside */
                double d = fabs(pk - tk), h = p->huber_delta;
                loss += (d <= h ? 0.5 * d * d : h * (d - 0.5 * h)) / (FD_N * FD_K);
                break;
            }
            case SX_LOSS_BCE_LOGITS: /* reads logits, not these probabilities: tests/nn/test_losses
                                      */
            case SX_LOSS_COUNT:
                cr_assert_fail("loss %d is not a case of this check", (int)p->loss);
                break;
            }
            if (pk > o[i * FD_K + best])
                best = k;
            if (tk > t[i * FD_K + label])
                label = k;
        }
        right += best == label;
    }
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            const nn_param *pr = &net->layers[i]->params[k];
            if (!pr->regularised)
                continue;
            for (int64_t e = 0; e < pr->value->size; e++) {
                double w = sx_tensor_get(pr->value, e);
                loss += p->l2 * w * w + p->l1 * fabs(w);
            }
        }
    if (correct != NULL)
        *correct = right;
    sx_tensor_free(out);
    return loss;
}

typedef struct fd_case {
    const char *what;
    sx_nn_loss loss;
    double l1, l2, clip_value, clip_norm_frac; /* clip_norm = frac * |g| */
} fd_case;

static void fd_check(const fd_case *c, uint64_t seed)
{
    sx_nn_net *net = fd_net(seed);
    sx_rng r;
    sx_rng_seed(&r, seed + 2);
    int64_t xs[4] = {FD_N, FD_H, FD_W, FD_C};
    sx_tensor *x = tu_rand(&r, SX_F64, 4, xs, -1, 1);
    int labels[FD_N];
    for (int i = 0; i < FD_N; i++)
        labels[i] = (int)sx_rng_below(&r, FD_K);
    sx_tensor *y = one_hot(SX_F64, FD_N, FD_K, labels);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.loss = c->loss;
    p.huber_delta = 0.2; /* below some |out - y| of the batch: both of Huber's pieces */
    p.optim = sx_optim_params_default(SX_OPTIM_SGD);
    p.l1 = c->l1;
    p.l2 = c->l2;
    p.clip_value = c->clip_value;

    /* the gradient by central differences of test_loss */
    sx_nn_model *infer = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, FD_N, &infer), SX_OK, "%s", sx_last_error());
    int64_t correct0 = 0;
    double loss0 = test_loss(net, infer, x, y, &p, &correct0);
    plist pl = trainables(net);
    double *g = calloc((size_t)pl.total, sizeof *g);
    const double h = 1e-5;
    int64_t j = 0;
    for (int i = 0; i < pl.n; i++)
        for (int64_t e = 0; e < pl.p[i]->value->size; e++, j++) {
            double *w = &SX_F64P(pl.p[i]->value)[e], w0 = *w;
            *w = w0 + h;
            double lp = test_loss(net, infer, x, y, &p, NULL);
            *w = w0 - h;
            double lm = test_loss(net, infer, x, y, &p, NULL);
            *w = w0;
            g[j] = (lp - lm) / (2 * h);
        }
    sx_nn_model_free(infer);
    /* clipping as documented: each element to [-v, v], then the global norm to c */
    double norm = 0;
    int64_t clipped = 0;
    for (j = 0; j < pl.total; j++) {
        clipped += fabs(g[j]) > c->clip_value;
        if (c->clip_value > 0)
            g[j] = fmax(-c->clip_value, fmin(c->clip_value, g[j]));
        norm += g[j] * g[j];
    }
    /* a bound that bites some elements and not others */
    if (c->clip_value > 0)
        cr_assert(clipped > 5 && clipped < pl.total - 5, "%s: %lld of %lld elements clipped",
                  c->what, (long long)clipped, (long long)pl.total);
    norm = sqrt(norm);
    if (c->clip_norm_frac > 0) {
        p.clip_norm = c->clip_norm_frac * norm;
        for (j = 0; j < pl.total; j++)
            g[j] *= p.clip_norm / norm;
    }

    /* one compiled SGD step of rate eta */
    const double eta = 0.25;
    int64_t count = 0;
    double *before = snapshot(net, &count);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, &p, FD_N, &m), SX_OK, "%s", sx_last_error());
    double loss = 0;
    int64_t correct = -1;
    cr_assert_eq(sx_nn_model_step(m, x, y, eta, 1, &loss, &correct), SX_OK, "%s", sx_last_error());
    cr_assert(fabs(loss - loss0) <= 1e-12 * (1 + fabs(loss0)), "%s: loss %.17g, want %.17g",
              c->what, loss, loss0);
    cr_assert_eq(correct, correct0, "%s: %lld correct, want %lld", c->what, (long long)correct,
                 (long long)correct0);
    j = 0;
    int64_t b = 0;
    for (int li = 0; li < net->n_layers; li++)
        for (int k = 0; k < net->layers[li]->n_params; k++) {
            const nn_param *pr = &net->layers[li]->params[k];
            for (int64_t e = 0; e < pr->value->size; e++, b++) {
                double got = (before[b] - SX_F64P(pr->value)[e]) / eta;
                double want = pr->trainable ? g[j++] : 0;
                cr_assert(fabs(got - want) <= 1e-8 + 1e-6 * fabs(want),
                          "%s: %s[%lld]: step/eta %.12g, finite differences %.12g", c->what,
                          pr->name, (long long)e, got, want);
            }
        }
    cr_assert_eq(j, pl.total);
    sx_nn_model_free(m);
    free(before);
    free(g);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_nn_net_free(net);
}

Test(nn_train, sgd_step_is_the_finite_difference_gradient, .timeout = 120)
{
    const fd_case cases[] = {
        {"cross-entropy", SX_LOSS_CROSS_ENTROPY, 0, 0, 0, 0},
        {"mse", SX_LOSS_MSE, 0, 0, 0, 0},
        {"l1", SX_LOSS_L1, 0, 0, 0, 0},
        {"hinge", SX_LOSS_HINGE, 0, 0, 0, 0},
        {"huber", SX_LOSS_HUBER, 0, 0, 0, 0},
        {"l2 regularisation", SX_LOSS_CROSS_ENTROPY, 0, 0.03, 0, 0},
        {"l1 regularisation", SX_LOSS_CROSS_ENTROPY, 0.02, 0, 0, 0},
        {"l1 + l2 with mse", SX_LOSS_MSE, 0.01, 0.02, 0, 0},
        {"clip by value", SX_LOSS_CROSS_ENTROPY, 0, 0, 0.02, 0},
        {"clip by norm", SX_LOSS_CROSS_ENTROPY, 0, 0, 0, 0.3},
        {"clip by value then norm", SX_LOSS_MSE, 0, 0.01, 0.01, 0.5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        fd_check(&cases[i], 100 + i);
}

/* ---------------------------------------------------------------- optimisers */

/* The first step of each optimiser from zero state, against its formula with the gradient g
 * found by an SGD step of a twin network. */
Test(nn_train, first_step_of_every_optimiser_follows_its_formula)
{
    sx_rng r;
    sx_rng_seed(&r, 31);
    int64_t xs[4] = {FD_N, FD_H, FD_W, FD_C};
    sx_tensor *x = tu_rand(&r, SX_F64, 4, xs, -1, 1);
    int labels[FD_N] = {3, 1, 0, 2};
    sx_tensor *y = one_hot(SX_F64, FD_N, FD_K, labels);
    const double lr = 0.01;

    sx_nn_net *ref = fd_net(40);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim = sx_optim_params_default(SX_OPTIM_SGD);
    int64_t count;
    double *w0 = snapshot(ref, &count);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(ref, &p, FD_N, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_step(m, x, y, 1.0, 1, NULL, NULL), SX_OK, "%s", sx_last_error());
    double *w1 = snapshot(ref, &count);
    sx_nn_model_free(m);
    sx_nn_net_free(ref);

    for (int k = 0; k < SX_OPTIM_COUNT; k++) {
        sx_nn_net *net = fd_net(40);
        p.optim = sx_optim_params_default((sx_optim_kind)k);
        const sx_optim_params *o = &p.optim;
        cr_assert_eq(sx_nn_compile_train(net, &p, FD_N, &m), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_nn_model_step(m, x, y, lr, 1, NULL, NULL), SX_OK, "%s", sx_last_error());
        double *w = snapshot(net, &count);
        for (int64_t i = 0; i < count; i++) {
            double g = w0[i] - w1[i], d;
            switch ((sx_optim_kind)k) {
            case SX_OPTIM_SGD:
            case SX_OPTIM_MOMENTUM:
                d = lr * g;
                break;
            case SX_OPTIM_NESTEROV:
                d = lr * (1 + o->momentum) * g;
                break;
            case SX_OPTIM_ADAGRAD:
                d = lr * g / (fabs(g) + o->eps);
                break;
            case SX_OPTIM_RMSPROP:
            case SX_OPTIM_RMSPROP_MOMENTUM: /* a zero buffer: b = the step of RMSprop */
                d = lr * g / (sqrt(1 - o->rho) * fabs(g) + o->eps);
                break;
            case SX_OPTIM_ADAM_KERAS: { /* eps beside the bias-corrected rate (strix's old Adam) */
                double lrt = lr * sqrt(1 - o->beta2) / (1 - o->beta1);
                d = lrt * (1 - o->beta1) * g / (sqrt(1 - o->beta2) * fabs(g) + o->eps);
                break;
            }
            case SX_OPTIM_ADAM: /* PyTorch's: eps after the bias correction; amsgrad's vmax = v */
            case SX_OPTIM_AMSGRAD:
                d = lr * g / (fabs(g) + o->eps);
                break;
            case SX_OPTIM_ADAMW: /* the parameter first scaled by 1 - lr wd */
                d = lr * o->weight_decay * w0[i] + lr * g / (fabs(g) + o->eps);
                break;
            case SX_OPTIM_RMSPROP_CENTERED: /* variance (1 - rho) g^2 - ((1 - rho) g)^2 */
                d = lr * g / (sqrt((1 - o->rho) * o->rho) * fabs(g) + o->eps);
                break;
            default:
                d = 0;
            }
            cr_assert(fabs((w0[i] - w[i]) - d) <= 1e-9 * (fabs(d) + 1e-6),
                      "%s: element %lld moved %.12g, want %.12g", sx_optim_name((sx_optim_kind)k),
                      (long long)i, w0[i] - w[i], d);
        }
        free(w);
        sx_nn_model_free(m);
        sx_nn_net_free(net);
    }
    free(w0);
    free(w1);
    sx_tensor_free(x);
    sx_tensor_free(y);
}

/* A small CNN in f32 with two dropouts, for the learning and equivalence tests. */
static sx_nn_net *small_cnn(uint64_t seed, sx_dtype dt, bool bn)
{
    sx_nn_net *net = net_new(dt, seed);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){6, 6, 1});
    x = t_conv2d(net, x, 3, 3, 4, 1, SX_PAD_SAME, SX_ACT_RELU);
    if (bn)
        x = t_batch_norm(net, x, 0.9, 1e-3);
    x = t_max_pool2d(net, x, 2, 2, 2, SX_PAD_VALID);
    x = sx_nn_dropout(net, x, 0.25);
    x = sx_nn_fully_connected(net, x, 16, SX_ACT_RELU);
    x = sx_nn_dropout(net, x, 0.1);
    x = sx_nn_linear(net, x, 3, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

/* Batch i of a fixed set as tensors (x scaled to [0, 1]). */
static void set_batch(const sx_ds_images *d, int64_t first, int64_t n, sx_dtype dt, sx_tensor **x,
                      sx_tensor **y)
{
    int64_t xs[4] = {n, d->h, d->w, d->c};
    *x = tu_zeros(dt, 4, xs);
    int labels[256];
    for (int64_t i = 0; i < n; i++) {
        int64_t e = (first + i) % d->n;
        for (int64_t q = 0; q < d->h * d->w * d->c; q++)
            sx_tensor_set(*x, i * d->h * d->w * d->c + q,
                          d->pixels[e * d->h * d->w * d->c + q] / 255.0);
        labels[i] = d->labels[e];
    }
    *y = one_hot(dt, n, d->classes, labels);
}

Test(nn_train, every_optimiser_lowers_the_loss, .timeout = 120)
{
    sx_ds_images d = images(64, 6, 6, 3, 5);
    /* sgd, momentum, nesterov, adagrad, rmsprop, adam, adamw, amsgrad, rmsprop_centered,
     * adam_keras, rmsprop_momentum (mu 0.9: a tenth of RMSprop's rate) */
    const double lrs[SX_OPTIM_COUNT] = {0.2,   0.05,  0.05,  0.05,  0.005, 0.005,
                                        0.005, 0.005, 0.005, 0.005, 0.0005};
    for (int k = 0; k < SX_OPTIM_COUNT; k++) {
        sx_nn_net *net = small_cnn(9, SX_F32, false);
        sx_nn_train_params p = sx_nn_train_params_default();
        p.optim = sx_optim_params_default((sx_optim_kind)k);
        sx_nn_model *m = NULL;
        cr_assert_eq(sx_nn_compile_train(net, &p, 16, &m), SX_OK, "%s", sx_last_error());
        double first = 0, last = 0;
        for (int s = 0; s < 60; s++) {
            sx_tensor *x, *y;
            set_batch(&d, (s % 4) * 16, 16, SX_F32, &x, &y);
            double loss = 0;
            cr_assert_eq(sx_nn_model_step(m, x, y, lrs[k], s + 1, &loss, NULL), SX_OK, "%s",
                         sx_last_error());
            cr_assert(isfinite(loss));
            if (s < 4)
                first += loss / 4;
            if (s >= 56)
                last += loss / 4;
            sx_tensor_free(x);
            sx_tensor_free(y);
        }
        cr_log_info("%s: loss %.4f -> %.4f", sx_optim_name((sx_optim_kind)k), first, last);
        cr_assert(last < 0.5 * first, "%s: loss %.4f -> %.4f", sx_optim_name((sx_optim_kind)k),
                  first, last);
        sx_nn_model_free(m);
        double acc = 0;
        cr_assert_eq(sx_nn_evaluate(net, &d, 32, &acc), SX_OK, "%s", sx_last_error());
        cr_assert(acc > 0.9, "%s: accuracy %.3f", sx_optim_name((sx_optim_kind)k), acc);
        sx_nn_net_free(net);
    }
    images_free(&d);
}

/* ---------------------------------------------------------------- eager against compiled */

Test(nn_train, eager_steps_give_the_compiled_loss_curve, .timeout = 120)
{
    sx_ds_images d = images(64, 6, 6, 3, 6);
    for (int k = 0; k < 2; k++) {
        sx_nn_net *a = small_cnn(17, SX_F32, k == 1), *b = small_cnn(17, SX_F32, k == 1);
        sx_nn_train_params p = sx_nn_train_params_default();
        p.optim = sx_optim_params_default(k == 0 ? SX_OPTIM_ADAGRAD : SX_OPTIM_ADAM);
        sx_nn_model *m = NULL;
        cr_assert_eq(sx_nn_compile_train(a, &p, 16, &m), SX_OK, "%s", sx_last_error());
        for (int s = 0; s < 12; s++) {
            sx_tensor *x, *y;
            set_batch(&d, (s % 4) * 16, 16, SX_F32, &x, &y);
            double la = 0, lb = 0;
            int64_t ca = 0, cb = 0;
            cr_assert_eq(sx_nn_model_step(m, x, y, 0.01, s + 1, &la, &ca), SX_OK, "%s",
                         sx_last_error());
            cr_assert_eq(nn_eager_step(b, &p, x, y, 0.01, s + 1, &lb, &cb), SX_OK, "%s",
                         sx_last_error());
            cr_assert(fabs(la - lb) <= 1e-5 * fabs(lb), "step %d: compiled %.9g, eager %.9g", s, la,
                      lb);
            cr_assert_eq(ca, cb, "step %d", s);
            sx_tensor_free(x);
            sx_tensor_free(y);
        }
        /* the dropout generators moved in step */
        cr_assert_eq(memcmp(&a->dropout_rng, &b->dropout_rng, sizeof a->dropout_rng), 0);
        sx_nn_model_free(m);
        sx_nn_net_free(a);
        sx_nn_net_free(b);
    }
    images_free(&d);
}

Test(nn_train, eager_training_loop_matches_compiled_per_epoch, .timeout = 120)
{
    /* 70 examples in batches of 16: a last batch of 6 in every epoch; shuffled; dropout */
    sx_ds_images d = images(70, 6, 6, 3, 7);
    sx_nn_net *a = small_cnn(23, SX_F32, false), *b = small_cnn(23, SX_F32, false);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 16;
    p.verbose = 0;
    p.optim = sx_optim_params_default(SX_OPTIM_MOMENTUM);
    for (int e = 1; e <= 3; e++) {
        sx_nn_train_report ra, rb;
        p.epochs = e;
        p.eager = false;
        cr_assert_eq(sx_nn_train(a, &p, &d, NULL, &ra), SX_OK, "%s", sx_last_error());
        p.eager = true;
        cr_assert_eq(sx_nn_train(b, &p, &d, NULL, &rb), SX_OK, "%s", sx_last_error());
        cr_assert_eq(ra.steps, 5);
        cr_assert_eq(rb.steps, 5);
        cr_assert(fabs(ra.last_loss - rb.last_loss) <= 1e-5 * fabs(rb.last_loss),
                  "epoch %d: compiled %.9g, eager %.9g", e, ra.last_loss, rb.last_loss);
        cr_assert_eq(ra.test_accuracy, -1);
    }
    int64_t na, nb;
    double *wa = snapshot(a, &na), *wb = snapshot(b, &nb);
    for (int64_t i = 0; i < na; i++)
        cr_assert(fabs(wa[i] - wb[i]) <= 1e-4 * (1 + fabs(wb[i])), "weight %lld: %g vs %g",
                  (long long)i, wa[i], wb[i]);
    free(wa);
    free(wb);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    images_free(&d);
}

/* The evaluation between epochs plans its graph in the idle training graph's arena: training
 * with a test set (3 epochs, batch norm, dropout, a last partial batch in both sets) ends with
 * the weights of training without one, bit for bit, and the reported accuracy is what a
 * separate evaluation gives. */
Test(nn_train, evaluation_between_epochs_leaves_training_unchanged, .timeout = 120)
{
    sx_ds_images d = images(70, 6, 6, 3, 9), t = images(45, 6, 6, 3, 10);
    sx_nn_net *a = small_cnn(31, SX_F32, true), *b = small_cnn(31, SX_F32, true);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 16;
    p.verbose = 0;
    p.epochs = 3;
    sx_nn_train_report ra, rb;
    cr_assert_eq(sx_nn_train(a, &p, &d, &t, &ra), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_train(b, &p, &d, NULL, &rb), SX_OK, "%s", sx_last_error());
    cr_assert_eq(ra.last_loss, rb.last_loss);
    int64_t na, nb;
    double *wa = snapshot(a, &na), *wb = snapshot(b, &nb);
    cr_assert_eq(na, nb);
    for (int64_t i = 0; i < na; i++)
        cr_assert_eq(wa[i], wb[i], "weight %lld: %.9g vs %.9g", (long long)i, wa[i], wb[i]);
    double acc = -1;
    cr_assert_eq(sx_nn_evaluate(a, &t, 16, &acc), SX_OK, "%s", sx_last_error());
    cr_assert_eq(ra.test_accuracy, acc, "%.6f vs %.6f", ra.test_accuracy, acc);
    free(wa);
    free(wb);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    images_free(&d);
    images_free(&t);
}

/* ---------------------------------------------------------------- schedules */

/* input (2,2,1) -> dense 1, L1 loss against target 1 on constant white images: while the output
 * stays below 1, the gradient of every weight is exactly -1, so an SGD step adds lr to it. */
static sx_nn_net *lr_probe(void)
{
    sx_nn_net *net = net_new(SX_F64, 3);
    sx_nn_net_set_init(net, (sx_nn_init){.kind = SX_INIT_UNIFORM, .a = -10, .b = -9});
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){2, 2, 1});
    sx_nn_fully_connected(net, x, 1, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

static double probe_weight(sx_nn_net *net)
{
    return sx_tensor_get(net->layers[1]->params[0].value, 0);
}

Test(nn_train, compiled_steps_take_each_steps_learning_rate)
{
    sx_nn_net *net = lr_probe();
    sx_nn_train_params p = sx_nn_train_params_default();
    p.loss = SX_LOSS_L1;
    p.optim = sx_optim_params_default(SX_OPTIM_SGD);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, &p, 2, &m), SX_OK, "%s", sx_last_error());
    int64_t xs[4] = {2, 2, 2, 1}, ys[2] = {2, 1};
    sx_tensor *x = NULL, *y = NULL;
    cr_assert_eq(sx_tensor_full(SX_F64, 4, xs, 1.0, &x), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F64, 2, ys, 1.0, &y), SX_OK);
    const double lrs[5] = {0.1, 0.01, 0.3, 0.3, 0.002};
    for (int s = 0; s < 5; s++) {
        double w0 = probe_weight(net);
        cr_assert_eq(sx_nn_model_step(m, x, y, lrs[s], s + 1, NULL, NULL), SX_OK, "%s",
                     sx_last_error());
        double dw = probe_weight(net) - w0;
        cr_assert(fabs(dw - lrs[s]) < 1e-12, "step %d: moved %.15g, lr %.15g", s, dw, lrs[s]);
    }
    sx_nn_model_free(m);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_nn_net_free(net);
}

Test(nn_train, schedules_advance_within_one_compiled_run)
{
    /* 4 white images, batch 2: 2 steps per epoch, 3 epochs, 6 steps in one sx_nn_train */
    sx_ds_images d = {.n = 4, .h = 2, .w = 2, .c = 1, .classes = 1};
    uint8_t pix[16], lab[4] = {0};
    memset(pix, 255, sizeof pix);
    d.pixels = pix;
    d.labels = lab;
    const double vals[3] = {0.1, 0.02, 0.005};
    struct {
        sx_nn_schedule s;
        double total; /* sum of the 6 rates, in units of lr (0.1) or absolute for explicit */
    } cases[] = {
        {{.kind = SX_SCHED_CONSTANT}, 6 * 0.1},
        {{.kind = SX_SCHED_STEP, .gamma = 0.5, .step_size = 2},
         0.1 * (1 + 1 + .5 + .5 + .25 + .25)},
        {{.kind = SX_SCHED_EXPONENTIAL, .gamma = 0.5},
         0.1 * (1 + .5 + .25 + .125 + .0625 + .03125)},
        {{.kind = SX_SCHED_EXPLICIT, .values = vals, .n_values = 3}, 2 * (0.1 + 0.02 + 0.005)},
        {{.kind = SX_SCHED_EXPLICIT, .values = vals, .n_values = 2}, 2 * (0.1 + 0.02 + 0.02)},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int eager = 0; eager < 2; eager++) {
            sx_nn_net *net = lr_probe();
            sx_nn_train_params p = sx_nn_train_params_default();
            p.loss = SX_LOSS_L1;
            p.optim = sx_optim_params_default(SX_OPTIM_SGD);
            p.optim.lr = 0.1;
            p.schedule = cases[c].s;
            p.epochs = 3;
            p.batch = 2;
            p.verbose = 0;
            p.eager = eager;
            p.shuffle = false;
            double w0 = probe_weight(net);
            sx_nn_train_report rep;
            cr_assert_eq(sx_nn_train(net, &p, &d, NULL, &rep), SX_OK, "%s", sx_last_error());
            cr_assert_eq(rep.steps, 6);
            double moved = probe_weight(net) - w0;
            cr_assert(fabs(moved - cases[c].total) < 1e-12,
                      "schedule %zu (%s): the weight moved %.15g, want %.15g", c,
                      eager ? "eager" : "compiled", moved, cases[c].total);
            sx_nn_net_free(net);
        }
    }
}

/* ---------------------------------------------------------------- partial batches */

Test(nn_train, last_partial_batch_is_trained_like_eager, .timeout = 120)
{
    sx_ds_images d = images(250, 6, 6, 3, 8);
    sx_nn_net *a = small_cnn(29, SX_F64, false), *b = small_cnn(29, SX_F64, false);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 100;
    p.verbose = 0;
    sx_nn_train_report ra, rb;
    cr_assert_eq(sx_nn_train(a, &p, &d, NULL, &ra), SX_OK, "%s", sx_last_error());
    p.eager = true;
    cr_assert_eq(sx_nn_train(b, &p, &d, NULL, &rb), SX_OK, "%s", sx_last_error());
    cr_assert_eq(ra.steps, 3);
    cr_assert_eq(rb.steps, 3);
    cr_assert_eq(a->step, 3);
    cr_assert(fabs(ra.last_loss - rb.last_loss) <= 1e-12 * fabs(rb.last_loss), "%.17g vs %.17g",
              ra.last_loss, rb.last_loss);
    int64_t na, nb;
    double *wa = snapshot(a, &na), *wb = snapshot(b, &nb);
    for (int64_t i = 0; i < na; i++)
        cr_assert(fabs(wa[i] - wb[i]) <= 1e-10 * (1 + fabs(wb[i])), "weight %lld: %.17g vs %.17g",
                  (long long)i, wa[i], wb[i]);
    free(wa);
    free(wb);

    /* dropping the last 50 examples gives other weights: they were trained on */
    sx_nn_net *c = small_cnn(29, SX_F64, false);
    sx_ds_images d200 = d;
    d200.n = 200;
    p.eager = false;
    p.shuffle = false;
    sx_nn_net *e = small_cnn(29, SX_F64, false);
    cr_assert_eq(sx_nn_train(c, &p, &d200, NULL, &ra), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_train(e, &p, &d, NULL, &rb), SX_OK, "%s", sx_last_error());
    cr_assert_eq(ra.steps, 2);
    cr_assert_eq(rb.steps, 3);
    double *wc = snapshot(c, &na), *we = snapshot(e, &nb);
    bool differ = false;
    for (int64_t i = 0; i < na; i++)
        differ |= wc[i] != we[i];
    cr_assert(differ);
    free(wc);
    free(we);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    sx_nn_net_free(c);
    sx_nn_net_free(e);
    images_free(&d);
}

/* ---------------------------------------------------------------- no allocation per step */

static long n_allocs;
static sx_allocator base_alloc;

static void *count_alloc(void *ctx, size_t n)
{
    (void)ctx;
    n_allocs++;
    return base_alloc.alloc(base_alloc.ctx, n);
}

static void *count_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    n_allocs++;
    return base_alloc.realloc(base_alloc.ctx, p, n);
}

static void count_free(void *ctx, void *p)
{
    (void)ctx;
    base_alloc.free(base_alloc.ctx, p);
}

static void counting_on(void)
{
    base_alloc = sx_allocator_get();
    n_allocs = 0;
    sx_allocator a = {count_alloc, count_realloc, count_free, NULL};
    sx_allocator_set(&a);
}

static void counting_off(void)
{
    sx_allocator_set(&base_alloc);
}

Test(nn_train, compiled_steps_2_to_n_allocate_nothing)
{
    sx_ds_images d = images(64, 6, 6, 3, 9);
    for (int k = 0; k < SX_OPTIM_COUNT; k++) {
        sx_nn_net *net = small_cnn(31, SX_F32, true); /* dropout and batch norm */
        sx_nn_train_params p = sx_nn_train_params_default();
        p.optim = sx_optim_params_default((sx_optim_kind)k);
        p.l2 = 1e-4;
        p.clip_norm = 5;
        sx_nn_model *m = NULL;
        cr_assert_eq(sx_nn_compile_train(net, &p, 16, &m), SX_OK, "%s", sx_last_error());
        sx_tensor *x[4], *y[4];
        for (int b = 0; b < 4; b++)
            set_batch(&d, b * 16, 16, SX_F32, &x[b], &y[b]);
        double loss;
        int64_t correct;
        cr_assert_eq(sx_nn_model_step(m, x[0], y[0], 0.01, 1, &loss, &correct), SX_OK);
        counting_on();
        sx_status s = SX_OK;
        for (int i = 2; i <= 9 && s == SX_OK; i++)
            s = sx_nn_model_step(m, x[i % 4], y[i % 4], 0.01 / i, i, &loss, &correct);
        counting_off();
        cr_assert_eq(s, SX_OK, "%s", sx_last_error());
        cr_assert_eq(n_allocs, 0, "%s: %ld allocations in steps 2..9",
                     sx_optim_name((sx_optim_kind)k), n_allocs);
        sx_nn_model_free(m);

        /* inference: predictions 2..n of the compiled batch size allocate nothing either */
        cr_assert_eq(sx_nn_compile_infer(net, 16, &m), SX_OK, "%s", sx_last_error());
        int64_t os[2] = {16, 3};
        sx_tensor *out = tu_zeros(SX_F32, 2, os);
        cr_assert_eq(sx_nn_model_predict(m, x[0], out), SX_OK);
        counting_on();
        for (int i = 1; i < 4 && s == SX_OK; i++)
            s = sx_nn_model_predict(m, x[i], out);
        counting_off();
        cr_assert_eq(s, SX_OK, "%s", sx_last_error());
        cr_assert_eq(n_allocs, 0, "%ld allocations in predictions 2..4", n_allocs);
        sx_tensor_free(out);
        sx_nn_model_free(m);
        for (int b = 0; b < 4; b++) {
            sx_tensor_free(x[b]);
            sx_tensor_free(y[b]);
        }
        sx_nn_net_free(net);
    }
    images_free(&d);
}

/* ---------------------------------------------------------------- checkpoints and resume */

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sx_nn_train_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

static void resume_case(sx_optim_kind kind, sx_dtype dt, int64_t every)
{
    sx_ds_images d = images(250, 6, 6, 3, 10);
    char ckpt[128];
    snprintf(ckpt, sizeof ckpt, "%s/run.ckpt", tmpdir);
    unlink(ckpt);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 100;
    p.verbose = 0;
    p.optim = sx_optim_params_default(kind);
    p.optim.lr = 0.01;
    p.schedule = (sx_nn_schedule){.kind = SX_SCHED_EXPONENTIAL, .gamma = 0.9};

    /* two epochs in one go */
    sx_nn_net *a = small_cnn(37, dt, true);
    p.epochs = 2;
    sx_nn_train_report ra;
    cr_assert_eq(sx_nn_train(a, &p, &d, NULL, &ra), SX_OK, "%s", sx_last_error());
    cr_assert_eq(ra.steps, 6);

    /* one epoch with checkpoints (every epoch, or every `every` steps) */
    sx_nn_net *b = small_cnn(37, dt, true);
    p.epochs = 1;
    p.checkpoint_path = ckpt;
    p.checkpoint_every = every;
    cr_assert_eq(sx_nn_train(b, &p, &d, NULL, NULL), SX_OK, "%s", sx_last_error());
    cr_assert_eq(access(ckpt, F_OK), 0, "no checkpoint written");
    sx_nn_net_free(b);

    /* a new network object of the same definition resumes from the checkpoint */
    sx_nn_net *c = small_cnn(37, dt, true);
    p.epochs = 2;
    p.checkpoint_every = 0;
    sx_nn_train_report rc;
    cr_assert_eq(sx_nn_train(c, &p, &d, NULL, &rc), SX_OK, "%s", sx_last_error());
    cr_assert_eq(rc.steps, every > 0 ? 6 - every : 3);
    assert_identical(a, c);
    sx_nn_net_free(a);
    sx_nn_net_free(c);
    images_free(&d);
}

Test(nn_train, resume_from_an_epoch_checkpoint_is_bit_identical, .init = make_tmpdir,
     .fini = remove_tmpdir, .timeout = 120)
{
    resume_case(SX_OPTIM_ADAGRAD, SX_F32, 0);
    resume_case(SX_OPTIM_ADAM, SX_F32, 0);
}

Test(nn_train, resume_from_a_mid_epoch_checkpoint_is_bit_identical, .init = make_tmpdir,
     .fini = remove_tmpdir, .timeout = 120)
{
    /* checkpoints after steps 2 (mid-epoch, the last one written) */
    resume_case(SX_OPTIM_MOMENTUM, SX_F32, 2);
}

Test(nn_train, resume_from_a_checkpoint_at_an_epochs_last_step_is_bit_identical,
     .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 120)
{
    /* checkpoints every 3 steps: the last one after the epoch's last step, before its end */
    resume_case(SX_OPTIM_RMSPROP, SX_F32, 3);
}

/* sx_nn_train is sx_nn_fit's run over its image set as a source, epochs counted from the
 * network's start (start_epoch 0): the same weights, optimiser state and counters bit for bit,
 * a network already trained counting towards p.epochs, and no fit state of its own (no
 * PATH.fit next to its checkpoint). */
Test(nn_train, train_is_fit_over_the_image_source, .init = make_tmpdir, .fini = remove_tmpdir,
     .timeout = 120)
{
    sx_ds_images d = images(250, 6, 6, 3, 10);
    char ckpt[128], state[160];
    snprintf(ckpt, sizeof ckpt, "%s/train.ckpt", tmpdir);
    snprintf(state, sizeof state, "%s.fit", ckpt);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 64; /* a last partial batch */
    p.verbose = 0;
    p.epochs = 2;
    p.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.optim.lr = 0.01;
    p.schedule = (sx_nn_schedule){.kind = SX_SCHED_COSINE};
    sx_nn_net *a = small_cnn(41, SX_F32, true), *b = small_cnn(41, SX_F32, true);
    p.checkpoint_path = ckpt;
    cr_assert_eq(sx_nn_train(a, &p, &d, NULL, NULL), SX_OK, "%s", sx_last_error());
    cr_assert_eq(access(ckpt, F_OK), 0, "no checkpoint written");
    cr_assert_neq(access(state, F_OK), 0, "sx_nn_train wrote a fit state");
    p.checkpoint_path = NULL;
    sx_ds_source *src = NULL;
    cr_assert_eq(sx_ds_source_images(&d, &src), SX_OK);
    sx_nn_fit_params fp = sx_nn_fit_params_default();
    fp.train = p;
    fp.train_metric = false;
    fp.start_epoch = 0;
    cr_assert_eq(sx_nn_fit(b, &fp, src, NULL, NULL), SX_OK, "%s", sx_last_error());
    assert_identical(a, b);
    /* p.epochs is the network's total: nothing more to train */
    sx_nn_train_report r;
    cr_assert_eq(sx_nn_train(a, &p, &d, NULL, &r), SX_OK, "%s", sx_last_error());
    cr_assert_eq(r.steps, 0);
    assert_identical(a, b);
    sx_ds_source_free(src);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    images_free(&d);
}

Test(nn_train, training_on_other_data_starts_at_its_first_batch)
{
    sx_ds_images a = images(100, 6, 6, 3, 14), b = images(30, 6, 6, 3, 15);
    sx_nn_net *net = small_cnn(53, SX_F32, false);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 10;
    p.verbose = 0;
    sx_nn_train_report r;
    cr_assert_eq(sx_nn_train(net, &p, &a, NULL, &r), SX_OK, "%s", sx_last_error());
    cr_assert_eq(r.steps, 10);
    /* epochs counts the network's epochs: a second one, on the other set, is all of it */
    p.epochs = 2;
    cr_assert_eq(sx_nn_train(net, &p, &b, NULL, &r), SX_OK, "%s", sx_last_error());
    cr_assert_eq(r.steps, 3);
    cr_assert_eq(net->epoch, 2);
    cr_assert_eq(net->step, 13);
    /* a network already trained for p.epochs does nothing more */
    cr_assert_eq(sx_nn_train(net, &p, &b, NULL, &r), SX_OK, "%s", sx_last_error());
    cr_assert_eq(r.steps, 0);
    sx_nn_net_free(net);
    images_free(&a);
    images_free(&b);
}

/* A copy of checkpoint `from` without its tensor `drop`. */
static void copy_without(const char *from, const char *to, const char *drop)
{
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(from, &f), SX_OK, "%s", sx_last_error());
    int nt = sx_cg_file_n_tensors(f), nm = sx_cg_file_n_meta(f), k = 0;
    const char **names = malloc((size_t)nt * sizeof *names);
    const sx_tensor **ts = malloc((size_t)nt * sizeof *ts);
    const char **keys = malloc((size_t)nm * sizeof *keys),
               **vals = malloc((size_t)nm * sizeof *vals);
    for (int i = 0; i < nt; i++) {
        const char *n = sx_cg_file_tensor_name(f, i);
        if (strcmp(n, drop) == 0)
            continue;
        names[k] = n;
        ts[k++] = sx_cg_file_tensor(f, n);
    }
    cr_assert_eq(k, nt - 1, "no tensor %s", drop);
    for (int i = 0; i < nm; i++) {
        keys[i] = sx_cg_file_meta_key(f, i);
        vals[i] = sx_cg_file_meta(f, keys[i]);
    }
    cr_assert_eq(sx_cg_save(NULL, 0, NULL, NULL, k, names, ts, nm, keys, vals, to), SX_OK, "%s",
                 sx_last_error());
    free(names);
    free(ts);
    free(keys);
    free(vals);
    sx_cg_file_free(f);
}

Test(nn_train, checkpoint_without_an_optimiser_state_changes_nothing, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    sx_ds_images d = images(40, 6, 6, 3, 16);
    char ckpt[128], cut[128];
    snprintf(ckpt, sizeof ckpt, "%s/full.ckpt", tmpdir);
    snprintf(cut, sizeof cut, "%s/cut.ckpt", tmpdir);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 20;
    p.verbose = 0;
    p.checkpoint_path = ckpt;
    sx_nn_net *a = small_cnn(59, SX_F32, false);
    cr_assert_eq(sx_nn_train(a, &p, &d, NULL, NULL), SX_OK, "%s", sx_last_error());
    copy_without(ckpt, cut, "dense_2.weight.sum_sq");

    sx_nn_net *b = small_cnn(59, SX_F32, false);
    int64_t n0, n1;
    double *w0 = snapshot(b, &n0);
    p.checkpoint_path = cut;
    p.epochs = 2;
    cr_assert_eq(sx_nn_train(b, &p, &d, NULL, NULL), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), "dense_2.weight.sum_sq") != NULL, "%s", sx_last_error());
    double *w1 = snapshot(b, &n1);
    cr_assert_eq(memcmp(w0, w1, (size_t)n0 * sizeof *w0), 0, "the weights changed");
    cr_assert_eq(b->step, 0);
    cr_assert_eq(b->epoch, 0);
    free(w0);
    free(w1);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    images_free(&d);
}

Test(nn_train, checkpoint_of_another_network_is_refused, .init = make_tmpdir, .fini = remove_tmpdir)
{
    sx_ds_images d = images(40, 6, 6, 3, 11);
    char ckpt[128];
    snprintf(ckpt, sizeof ckpt, "%s/other.ckpt", tmpdir);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 20;
    p.verbose = 0;
    p.checkpoint_path = ckpt;
    sx_nn_net *a = small_cnn(41, SX_F32, false);
    cr_assert_eq(sx_nn_train(a, &p, &d, NULL, NULL), SX_OK, "%s", sx_last_error());
    /* a different network (batch norm adds tensors; other widths) cannot resume from it */
    sx_nn_net *b = net_new(SX_F32, 41);
    sx_nn_layer *x = sx_nn_input(b, 3, (int64_t[]){6, 6, 1});
    x = t_conv2d(b, x, 3, 3, 5, 1, SX_PAD_SAME, SX_ACT_RELU);
    x = sx_nn_fully_connected(b, x, 3, SX_ACT_SOFTMAX);
    int64_t n0;
    double *w0 = snapshot(b, &n0);
    p.epochs = 2;
    cr_assert_eq(sx_nn_train(b, &p, &d, NULL, NULL), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), ckpt) != NULL, "%s", sx_last_error());
    /* nothing was changed */
    int64_t n1;
    double *w1 = snapshot(b, &n1);
    cr_assert_eq(memcmp(w0, w1, (size_t)n0 * sizeof *w0), 0);
    cr_assert_eq(b->step, 0);
    free(w0);
    free(w1);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    images_free(&d);
}

/* ---------------------------------------------------------------- batch norm */

Test(nn_train, batch_norm_training_updates_running_statistics)
{
    const int64_t n = 5, h = 2, w = 2, c = 3;
    const double mom = 0.8;
    for (int eager = 0; eager < 2; eager++) {
        sx_nn_net *net = net_new(SX_F64, 2);
        sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){h, w, c});
        sx_nn_layer *bn = t_batch_norm(net, x, mom, 1e-3);
        sx_nn_linear(net, sx_nn_flatten(net, bn), 2, SX_ACT_SOFTMAX);
        cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
        sx_nn_train_params p = sx_nn_train_params_default();
        sx_nn_model *m = NULL;
        if (!eager)
            cr_assert_eq(sx_nn_compile_train(net, &p, n, &m), SX_OK, "%s", sx_last_error());
        sx_rng r;
        sx_rng_seed(&r, 3);
        double rm[3] = {0, 0, 0}, rv[3] = {1, 1, 1};
        for (int s = 1; s <= 3; s++) {
            int64_t xs[4] = {n, h, w, c};
            sx_tensor *xb = tu_rand(&r, SX_F64, 4, xs, -2 + s, 3 * s);
            int labels[5] = {0, 1, 1, 0, 1};
            sx_tensor *y = one_hot(SX_F64, n, 2, labels);
            if (eager)
                cr_assert_eq(nn_eager_step(net, &p, xb, y, 0.01, s, NULL, NULL), SX_OK, "%s",
                             sx_last_error());
            else
                cr_assert_eq(sx_nn_model_step(m, xb, y, 0.01, s, NULL, NULL), SX_OK, "%s",
                             sx_last_error());
            for (int64_t q = 0; q < c; q++) {
                double mean = 0, var = 0;
                for (int64_t i = 0; i < n * h * w; i++)
                    mean += SX_F64P(xb)[i * c + q] / (double)(n * h * w);
                for (int64_t i = 0; i < n * h * w; i++)
                    var += pow(SX_F64P(xb)[i * c + q] - mean, 2) / (double)(n * h * w);
                rm[q] = mom * rm[q] + (1 - mom) * mean;
                double cnt = (double)(n * h * w); /* the unbiased variance is averaged */
                rv[q] = mom * rv[q] + (1 - mom) * var * cnt / (cnt - 1);
                double gm = sx_tensor_get(bn->params[2].value, q),
                       gv = sx_tensor_get(bn->params[3].value, q);
                cr_assert(fabs(gm - rm[q]) < 1e-12 * (1 + fabs(rm[q])),
                          "%s step %d channel %lld: running mean %.15g, want %.15g",
                          eager ? "eager" : "compiled", s, (long long)q, gm, rm[q]);
                cr_assert(fabs(gv - rv[q]) < 1e-12 * (1 + fabs(rv[q])),
                          "%s step %d channel %lld: running var %.15g, want %.15g",
                          eager ? "eager" : "compiled", s, (long long)q, gv, rv[q]);
            }
            sx_tensor_free(xb);
            sx_tensor_free(y);
        }
        sx_nn_model_free(m);
        sx_nn_net_free(net);
    }
}

/* ---------------------------------------------------------------- argument errors */

Test(nn_train, bad_arguments_are_errors)
{
    sx_ds_images d = images(20, 6, 6, 3, 12);
    sx_nn_net *net = small_cnn(43, SX_F32, false);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.verbose = 0;
    sx_nn_train_params bad = p;
    bad.epochs = 0;
    cr_assert_eq(sx_nn_train(net, &bad, &d, NULL, NULL), SX_E_ARG);
    bad = p;
    bad.batch = 0;
    cr_assert_eq(sx_nn_train(net, &bad, &d, NULL, NULL), SX_E_ARG);
    bad = p;
    bad.optim.lr = -1;
    cr_assert_eq(sx_nn_train(net, &bad, &d, NULL, NULL), SX_E_ARG);
    bad = p;
    bad.optim.lr = (double)NAN;
    cr_assert_eq(sx_nn_train(net, &bad, &d, NULL, NULL), SX_E_ARG);
    bad = p;
    bad.l2 = -1;
    cr_assert_eq(sx_nn_train(net, &bad, &d, NULL, NULL), SX_E_ARG);
    bad = p;
    bad.schedule.kind = SX_SCHED_EXPLICIT;
    cr_assert_eq(sx_nn_train(net, &bad, &d, NULL, NULL), SX_E_ARG);
    cr_assert_eq(sx_nn_train(NULL, &p, &d, NULL, NULL), SX_E_ARG);
    cr_assert_eq(sx_nn_train(net, &p, NULL, NULL, NULL), SX_E_ARG);
    /* data of another shape or class count */
    sx_ds_images other = images(20, 5, 6, 3, 12);
    cr_assert_eq(sx_nn_train(net, &p, &other, NULL, NULL), SX_E_SHAPE);
    images_free(&other);
    other = images(20, 6, 6, 4, 12);
    cr_assert_eq(sx_nn_train(net, &p, &other, NULL, NULL), SX_E_SHAPE);
    double acc = -1;
    cr_assert_eq(sx_nn_evaluate(net, &other, 10, &acc), SX_E_SHAPE);
    images_free(&other);
    other = images(20, 6, 5, 3, 12);
    cr_assert_eq(sx_nn_evaluate(net, &other, 10, &acc), SX_E_SHAPE);
    cr_assert_eq(sx_nn_evaluate(net, &d, 0, &acc), SX_E_ARG);
    cr_assert_eq(sx_nn_evaluate(net, NULL, 10, &acc), SX_E_ARG);
    cr_assert_eq(acc, -1);
    images_free(&other);
    cr_assert_eq(net->step, 0);

    /* step: wrong batch shapes, dtypes, a model for inference */
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, &p, 4, &m), SX_OK, "%s", sx_last_error());
    sx_tensor *x, *y, *x5, *y5;
    set_batch(&d, 0, 4, SX_F32, &x, &y);
    set_batch(&d, 0, 5, SX_F32, &x5, &y5);
    cr_assert_eq(sx_nn_model_step(m, x5, y, 0.1, 1, NULL, NULL), SX_E_SHAPE);
    cr_assert_eq(sx_nn_model_step(m, x, y5, 0.1, 1, NULL, NULL), SX_E_SHAPE);
    cr_assert_eq(sx_nn_model_step(m, y, x, 0.1, 1, NULL, NULL), SX_E_SHAPE);
    cr_assert_eq(sx_nn_model_step(m, NULL, y, 0.1, 1, NULL, NULL), SX_E_ARG);
    cr_assert_eq(sx_nn_model_step(NULL, x, y, 0.1, 1, NULL, NULL), SX_E_ARG);
    sx_tensor *x64 = NULL;
    cr_assert_eq(sx_tensor_zeros(SX_F64, x->rank, x->shape, &x64), SX_OK);
    cr_assert_eq(sx_nn_model_step(m, x64, y, 0.1, 1, NULL, NULL), SX_E_DTYPE);
    int64_t os[2] = {4, 3};
    sx_tensor *out = tu_zeros(SX_F32, 2, os);
    cr_assert_eq(sx_nn_model_predict(m, x, out), SX_E_ARG); /* a training model */
    sx_nn_model_free(m);
    cr_assert_eq(sx_nn_compile_train(net, &p, 0, &m), SX_E_ARG);
    cr_assert_null(m);
    cr_assert_eq(sx_nn_compile_infer(net, 4, &m), SX_OK);
    cr_assert_eq(sx_nn_model_step(m, x, y, 0.1, 1, NULL, NULL), SX_E_ARG);
    cr_assert_eq(sx_nn_model_predict(m, x5, out), SX_E_SHAPE); /* more than the batch */
    cr_assert_eq(sx_nn_model_predict(m, x64, out), SX_E_DTYPE);
    cr_assert_eq(sx_nn_model_predict(m, x, NULL), SX_E_ARG);
    sx_nn_model_free(m);
    sx_nn_model_free(NULL);
    sx_tensor_free(out);
    sx_tensor_free(x64);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_tensor_free(x5);
    sx_tensor_free(y5);
    sx_nn_net_free(net);
    images_free(&d);
}

/* ---------------------------------------------------------------- Ctrl-C */

/* An allocator that raises SIGINT at the k-th allocation: eager training allocates in every
 * step, so this interrupts a run in the middle of an epoch. */
static long sig_at;

static void *sig_alloc(void *ctx, size_t n)
{
    (void)ctx;
    if (++n_allocs >= sig_at && sig_at > 0) {
        sig_at = 0; /* once */
        raise(SIGINT);
    }
    return base_alloc.alloc(base_alloc.ctx, n);
}

Test(nn_train, sigint_writes_a_checkpoint_and_resume_completes_the_run, .init = make_tmpdir,
     .fini = remove_tmpdir, .timeout = 120)
{
    sx_ds_images d = images(120, 6, 6, 3, 13);
    char ckpt[128];
    snprintf(ckpt, sizeof ckpt, "%s/int.ckpt", tmpdir);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 20;
    p.verbose = 0;
    p.eager = true;
    p.epochs = 2;
    sx_nn_net *a = small_cnn(47, SX_F32, false);
    cr_assert_eq(sx_nn_train(a, &p, &d, NULL, NULL), SX_OK, "%s", sx_last_error());

    /* the same run, interrupted early in the first epoch */
    sx_nn_net *b = small_cnn(47, SX_F32, false);
    p.checkpoint_path = ckpt;
    struct sigaction before;
    sigaction(SIGINT, NULL, &before);
    base_alloc = sx_allocator_get();
    n_allocs = 0;
    sig_at = 1000;
    sx_allocator sa = {sig_alloc, count_realloc, count_free, NULL};
    sx_allocator_set(&sa);
    sx_status s = sx_nn_train(b, &p, &d, NULL, NULL);
    sx_allocator_set(&base_alloc);
    cr_assert_eq(s, SX_E_INTERRUPTED, "%s (%ld allocations)", sx_status_str(s), n_allocs);
    cr_assert(strstr(sx_last_error(), ckpt) != NULL, "%s", sx_last_error());
    cr_assert_gt(b->step, 0);
    cr_assert_lt(b->step, 12);
    cr_assert_eq(access(ckpt, F_OK), 0);
    /* the SIGINT disposition of before the run is back */
    struct sigaction now;
    sigaction(SIGINT, NULL, &now);
    cr_assert(now.sa_handler == before.sa_handler);
    sx_nn_net_free(b);

    sx_nn_net *c = small_cnn(47, SX_F32, false);
    cr_assert_eq(sx_nn_train(c, &p, &d, NULL, NULL), SX_OK, "%s", sx_last_error());
    assert_identical(a, c);
    sx_nn_net_free(a);
    sx_nn_net_free(c);
    images_free(&d);
}

/* ---------------------------------------------------------------- progress output */

/* What verbose training writes to stderr, into a malloc'ed string: train on a network of
 * input shape (in_rank: 1 -> (4), 3 -> (2,2,1)) from a tensor source (sx_nn_fit) or an image set
 * (sx_nn_train). */
static char *progress_text(int in_rank, bool image_set)
{
    char path[] = "/tmp/sx_progress_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_neq(fd, -1);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    cr_assert_neq(dup2(fd, STDERR_FILENO), -1);
    sx_nn_net *net = net_new(SX_F32, 1);
    int64_t shape[3] = {in_rank == 1 ? 4 : 2, 2, 1};
    sx_nn_layer *x = sx_nn_input(net, in_rank, shape);
    sx_nn_fully_connected(net, x, 3, SX_ACT_SOFTMAX);
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.verbose = 1;
    p.train.batch = 4;
    sx_status s;
    if (image_set) {
        sx_ds_images d = images(8, 2, 2, 3, 1);
        s = sx_nn_train(net, &p.train, &d, NULL, NULL);
        images_free(&d);
    } else {
        sx_tensor *xs = tu_zeros(SX_F32, in_rank + 1, (int64_t[]){8, shape[0], 2, 1});
        sx_tensor *ys = tu_zeros(SX_F32, 2, (int64_t[]){8, 3});
        sx_ds_source *src = NULL;
        cr_assert_eq(sx_ds_source_tensors(xs, ys, 0, &src), SX_OK, "%s", sx_last_error());
        p.train_metric = false;
        s = sx_nn_fit(net, &p, src, NULL, NULL);
        sx_ds_source_free(src);
        sx_tensor_free(xs);
        sx_tensor_free(ys);
    }
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    cr_assert_eq(s, SX_OK, "%s", sx_last_error());
    sx_nn_net_free(net);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char *text = calloc(1, 1 << 16);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = '\0';
    fclose(f);
    close(fd);
    unlink(path);
    return text;
}

/* The progress line counts images for image data and examples for the rest. */
Test(nn_train, progress_counts_images_or_examples)
{
    struct {
        int in_rank;
        bool image_set;
        const char *want, *not ;
    } cases[] = {{1, false, " examples/s ", "images/s"},
                 {3, false, " images/s ", "examples/s"},
                 {3, true, " images/s ", "examples/s"}};
    for (int i = 0; i < 3; i++) {
        char *text = progress_text(cases[i].in_rank, cases[i].image_set);
        cr_assert(strstr(text, cases[i].want) != NULL && strstr(text, cases[i].not ) == NULL,
                  "case %d: want '%s' in:\n%s", i, cases[i].want, text);
        free(text);
    }
}
