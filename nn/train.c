/* train.c: the training loop around the compiled model: minibatches from the byte images,
 * the learning-rate schedule fed as an input every step, progress, test accuracy per epoch,
 * checkpoints (atomic) with resume, and a clean stop on Ctrl-C. A last partial batch runs on a
 * second compiled graph of its own size that shares the weights: nothing dropped or padded. */
#include "nn_impl.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The learning rate of 0-based step `step` in 0-based epoch `epoch`. */
static double scheduled_lr(const sx_nn_train_params *p, int64_t step, int64_t epoch)
{
    const sx_nn_schedule *s = &p->schedule;
    double lr = p->optim.lr;
    switch (s->kind) {
    case SX_SCHED_CONSTANT:
        return lr;
    case SX_SCHED_STEP:
        return lr *
               pow(s->gamma, floor((double)step / (double)(s->step_size > 0 ? s->step_size : 1)));
    case SX_SCHED_EXPONENTIAL:
        return lr * pow(s->gamma, (double)step);
    case SX_SCHED_EXPLICIT:
        if (s->n_values < 1 || s->values == NULL)
            return lr;
        return s->values[epoch < s->n_values ? epoch : s->n_values - 1];
    }
    return lr;
}

static sx_status check_params(const sx_nn_train_params *p)
{
    const char *who = "sx_nn_train";
    if (p->epochs < 1 || p->batch < 1)
        return sx_error(SX_E_ARG, "%s: epochs %d, batch %d (want >= 1)", who, p->epochs, p->batch);
    if ((unsigned)p->optim.kind >= SX_OPTIM_COUNT)
        return sx_error(SX_E_ARG, "%s: unknown optimiser %d", who, (int)p->optim.kind);
    if (!(p->optim.lr > 0) || !isfinite(p->optim.lr))
        return sx_error(SX_E_ARG, "%s: learning rate %g (want > 0)", who, p->optim.lr);
    if (!(p->l1 >= 0) || !(p->l2 >= 0) || !(p->clip_value >= 0) || !(p->clip_norm >= 0) ||
        !isfinite(p->l1 + p->l2 + p->clip_value + p->clip_norm))
        return sx_error(SX_E_ARG,
                        "%s: regularisation l1 %g, l2 %g or clipping %g, %g (want finite "
                        ">= 0)",
                        who, p->l1, p->l2, p->clip_value, p->clip_norm);
    if (p->checkpoint_every < 0 || p->progress_every < 0)
        return sx_error(SX_E_ARG, "%s: checkpoint_every %lld, progress_every %lld (want >= 0)", who,
                        (long long)p->checkpoint_every, (long long)p->progress_every);
    if (p->schedule.kind == SX_SCHED_EXPLICIT &&
        (p->schedule.values == NULL || p->schedule.n_values < 1))
        return sx_error(SX_E_ARG, "%s: an explicit schedule needs values", who);
    return SX_OK;
}

/* A view of the first `rows` rows of t. */
static sx_tensor rows_view(const sx_tensor *t, int64_t rows)
{
    sx_tensor v = sx_tensor_view(t->dtype, t->rank, t->shape, t->data);
    v.shape[0] = rows;
    v.size = sx_shape_size(v.rank, v.shape);
    return v;
}

static void progress(const sx_nn_train_params *p, bool tty, int64_t epoch, int64_t i, int64_t n,
                     double loss, double ips, double eta)
{
    if (p->verbose < 1)
        return;
    if (tty) {
        int width = 30, done = n > 0 ? (int)((double)width * (double)i / (double)n) : width;
        char bar[64];
        for (int k = 0; k < width; k++)
            bar[k] = k < done ? '=' : k == done ? '>' : ' ';
        bar[width] = '\0';
        fprintf(stderr, "\repoch %lld [%s] %lld/%lld loss %.4f %.0f img/s ETA %.0fs   ",
                (long long)epoch + 1, bar, (long long)i, (long long)n, loss, ips, eta);
        if (i == n)
            fputc('\n', stderr);
    } else if (i == n || (p->progress_every > 0 && i % p->progress_every == 0)) {
        fprintf(stderr, "epoch %lld step %lld/%lld loss %.4f %.0f img/s ETA %.0fs\n",
                (long long)epoch + 1, (long long)i, (long long)n, loss, ips, eta);
    }
}

sx_status sx_nn_evaluate(sx_nn_net *net, const sx_ds_images *set, int64_t batch, double *accuracy)
{
    return nn_evaluate(net, set, batch, NULL, accuracy);
}

sx_status nn_evaluate(sx_nn_net *net, const sx_ds_images *set, int64_t batch,
                      const sx_nn_model *lender, double *accuracy)
{
    if (net == NULL || set == NULL || accuracy == NULL || batch < 1)
        return sx_error(SX_E_ARG, "sx_nn_evaluate: NULL argument or batch < 1");
    sx_nn_layer *last = nn_output_layer(net), *in = nn_input_layer(net);
    if (last == NULL || in == NULL || last->rank != 1)
        return sx_error(SX_E_STATE, "sx_nn_evaluate: the network has no (batch, classes) output");
    if (last->shape[0] != set->classes)
        return sx_error(SX_E_SHAPE,
                        "sx_nn_evaluate: the network has %lld outputs, the data %lld "
                        "classes",
                        (long long)last->shape[0], (long long)set->classes);
    sx_nn_model *m = NULL;
    sx_ds_batcher *b = NULL;
    sx_tensor *x = NULL, *out = NULL;
    int64_t xs[SX_MAX_RANK], os[2] = {batch, last->shape[0]};
    xs[0] = batch;
    memcpy(xs + 1, in->shape, (size_t)in->rank * sizeof *xs);
    sx_ds_batcher_params bp = sx_ds_batcher_params_default();
    bp.batch_size = batch;
    bp.shuffle = false;
    bp.scale = net->input_scale;
    int64_t *labels = NULL;
    sx_status s = nn_compile_infer_lent(net, batch, lender, &m);
    if (s == SX_OK)
        s = sx_ds_batcher_new(set, &bp, &b);
    if (s == SX_OK)
        s = sx_tensor_new(net->dtype, in->rank + 1, xs, &x);
    if (s == SX_OK)
        s = sx_tensor_new(net->dtype, 2, os, &out);
    int64_t correct = 0, seen = 0, count = 0;
    int64_t ys[1] = {batch};
    sx_tensor *yi = NULL;
    if (s == SX_OK)
        s = sx_tensor_new(net->dtype, 1, ys, &yi);
    while (s == SX_OK && (s = sx_ds_batcher_next(b, x, yi, &count)) == SX_OK && count > 0) {
        sx_tensor xv = rows_view(x, count), ov = rows_view(out, count);
        s = sx_nn_model_predict(m, &xv, &ov);
        for (int64_t r = 0; s == SX_OK && r < count; r++) {
            int64_t best = 0, k = last->shape[0];
            for (int64_t c = 1; c < k; c++)
                if (sx_tensor_get(&ov, r * k + c) > sx_tensor_get(&ov, r * k + best))
                    best = c;
            correct += best == (int64_t)sx_tensor_get(yi, r);
        }
        seen += count;
    }
    if (s == SX_OK)
        *accuracy = seen > 0 ? (double)correct / (double)seen : 0;
    sx_free(labels);
    sx_tensor_free(yi);
    sx_tensor_free(x);
    sx_tensor_free(out);
    sx_ds_batcher_free(b);
    sx_nn_model_free(m);
    return s;
}

sx_status sx_nn_train(sx_nn_net *net, const sx_nn_train_params *params, const sx_ds_images *train,
                      const sx_ds_images *test, sx_nn_train_report *report)
{
    const char *who = "sx_nn_train";
    if (net == NULL || train == NULL)
        return sx_error(SX_E_ARG, "%s: NULL network or training set", who);
    sx_nn_train_params p = params ? *params : sx_nn_train_params_default();
    SX_TRY(check_params(&p));
    sx_nn_layer *in = nn_input_layer(net), *last = nn_output_layer(net);
    if (in == NULL || last == NULL || last->rank != 1)
        return sx_error(SX_E_STATE, "%s: the network needs an input and a (batch, classes) output",
                        who);
    if (last->shape[0] != train->classes)
        return sx_error(SX_E_SHAPE, "%s: the network has %lld outputs, the data %lld classes", who,
                        (long long)last->shape[0], (long long)train->classes);
    if (in->rank != 3 || in->shape[0] != train->h || in->shape[1] != train->w ||
        in->shape[2] != train->c)
        return sx_error(SX_E_SHAPE,
                        "%s: the network takes (%lld,%lld,%lld) images, the data has "
                        "(%lld,%lld,%lld)",
                        who, (long long)in->shape[0], (long long)in->shape[1],
                        (long long)in->shape[2], (long long)train->h, (long long)train->w,
                        (long long)train->c);

    sx_nn_train_report rep;
    memset(&rep, 0, sizeof rep);
    rep.test_accuracy = -1;
    int64_t B = p.batch;
    sx_nn_model *model = NULL, *partial = NULL;
    sx_ds_batcher *batches = NULL;
    sx_tensor *x = NULL, *y = NULL;
    int64_t xs[4] = {B, train->h, train->w, train->c}, ys[2] = {B, train->classes};
    sx_ds_batcher_params bp = sx_ds_batcher_params_default();
    bp.batch_size = B;
    bp.shuffle = p.shuffle;
    bp.seed = net->seed;
    bp.scale = net->input_scale;
    sx_status s = sx_ds_batcher_new(train, &bp, &batches);
    if (s == SX_OK)
        s = sx_tensor_new(net->dtype, 4, xs, &x);
    if (s == SX_OK)
        s = sx_tensor_new(net->dtype, 2, ys, &y);
    /* a training model of another optimiser alive over net: refused before a checkpoint's
     * optimiser state replaces the one it borrows */
    if (s == SX_OK)
        s = nn_check_train_kind(net, p.optim.kind, who);
    /* resume */
    if (s == SX_OK && p.checkpoint_path != NULL && access(p.checkpoint_path, F_OK) == 0) {
        s = nn_checkpoint_load(net, &p, p.checkpoint_path);
        if (s == SX_OK && p.verbose > 0)
            fprintf(stderr, "resuming from %s at epoch %lld, step %lld\n", p.checkpoint_path,
                    (long long)net->epoch + 1, (long long)net->step);
    }
    if (s == SX_OK && !p.eager) {
        s = sx_nn_compile_train(net, &p, B, &model);
        if (s == SX_OK)
            rep.compile = sx_nn_model_report(model);
        if (s == SX_OK && p.profile)
            sx_cg_profile_enable(sx_nn_model_graph(model), true);
    }
    struct sigaction old, sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    interrupted = 0;
    sigaction(SIGINT, &sa, &old);
    bool tty = isatty(STDERR_FILENO);
    int64_t per_epoch = batches ? sx_ds_batcher_batches(batches) : 0;
    double train_time = 0;

    while (s == SX_OK && net->epoch < p.epochs) {
        s = sx_ds_batcher_set_epoch(batches, net->epoch);
        /* mid-epoch resume: skip the batches already trained on */
        int64_t done_in_epoch = net->epoch_step, count = 0;
        if (s == SX_OK && done_in_epoch > per_epoch)
            s = sx_error(SX_E_STATE,
                         "%s: the network stopped %lld steps into an epoch of %lld: resume with "
                         "the data and batch size it was trained with",
                         who, (long long)done_in_epoch, (long long)per_epoch);
        for (int64_t k = 0; s == SX_OK && k < done_in_epoch; k++)
            s = sx_ds_batcher_next(batches, NULL, NULL, &count);
        double t0 = now(), loss_sum = 0;
        int64_t i = done_in_epoch, seen = 0;
        while (s == SX_OK && (s = sx_ds_batcher_next(batches, x, y, &count)) == SX_OK &&
               count > 0) {
            double lr = scheduled_lr(&p, net->step, net->epoch), loss = 0;
            int64_t step = net->step + 1;
            sx_tensor xv = rows_view(x, count), yv = rows_view(y, count);
            if (p.eager) {
                s = nn_eager_step(net, &p, &xv, &yv, lr, step, &loss, NULL);
            } else if (count == B) {
                s = sx_nn_model_step(model, &xv, &yv, lr, step, &loss, NULL);
            } else {
                if (partial == NULL)
                    s = sx_nn_compile_train(net, &p, count, &partial);
                if (s == SX_OK)
                    s = sx_nn_model_step(partial, &xv, &yv, lr, step, &loss, NULL);
            }
            if (s != SX_OK)
                break;
            if (!isfinite(loss)) {
                s = sx_error(SX_E_RANGE,
                             "%s: the loss became %g at step %lld (lower the "
                             "learning rate?)",
                             who, loss, (long long)step);
                break;
            }
            net->step = step;
            net->epoch_step++;
            rep.steps++;
            i++;
            seen += count;
            loss_sum += loss * (double)count;
            double el = now() - t0, ips = el > 0 ? (double)seen / el : 0;
            double eta = ips > 0 ? (double)(per_epoch - i) * (double)B / ips : 0;
            progress(&p, tty, net->epoch, i, per_epoch, loss_sum / (double)seen, ips, eta);
            if (p.checkpoint_path != NULL && p.checkpoint_every > 0 &&
                net->step % p.checkpoint_every == 0) {
                double c0 = now();
                s = nn_checkpoint_save(net, &p, p.checkpoint_path);
                t0 += now() - c0;
            }
            if (s == SX_OK && interrupted) {
                if (p.checkpoint_path != NULL)
                    s = nn_checkpoint_save(net, &p, p.checkpoint_path);
                if (s == SX_OK)
                    s = sx_error(SX_E_INTERRUPTED, "%s: interrupted at step %lld%s%s", who,
                                 (long long)net->step,
                                 p.checkpoint_path ? "; checkpoint written to " : "",
                                 p.checkpoint_path ? p.checkpoint_path : "");
            }
        }
        train_time += now() - t0;
        if (s != SX_OK)
            break;
        net->epoch++;
        net->epoch_step = 0;
        rep.last_loss = seen > 0 ? loss_sum / (double)seen : 0;
        if (p.checkpoint_path != NULL && p.checkpoint_every == 0)
            s = nn_checkpoint_save(net, &p, p.checkpoint_path);
        if (s == SX_OK && test != NULL) {
            /* the training graph is idle: the evaluation plans in its arena */
            s = nn_evaluate(net, test, B, model, &rep.test_accuracy);
            if (s == SX_OK && p.verbose > 0)
                fprintf(stderr, "epoch %lld: loss %.4f, test accuracy %.2f%%\n",
                        (long long)net->epoch, rep.last_loss, 100 * rep.test_accuracy);
        }
    }
    sigaction(SIGINT, &old, NULL);
    if (model != NULL && p.profile) {
        fprintf(stderr, "time per op kind (compiled training graph):\n");
        sx_cg_profile_print(sx_nn_model_graph(model), 10, stderr);
    }
    rep.train_seconds = train_time;
    if (report != NULL)
        *report = rep;
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_ds_batcher_free(batches);
    sx_nn_model_free(partial);
    sx_nn_model_free(model);
    return s;
}
