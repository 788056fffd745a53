/* loop.c: the training loop around the compiled model: minibatches from any source through a
 * loader, the learning-rate schedule fed as an input every step, progress, test accuracy per
 * epoch (sx_nn_train's), checkpoints (atomic) with resume, and a clean stop on Ctrl-C. A last
 * partial batch runs on a second compiled graph of its own size that shares the weights: nothing
 * dropped or padded. Validation, early stopping and history are monitor.c's, called at the end
 * of every epoch. fit.c's public calls run it (nn_loop). */
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

/* A view of the first `rows` rows of t. */
static sx_tensor rows_view(const sx_tensor *t, int64_t rows)
{
    return nn_rows_at(t, 0, rows);
}

/* The progress line (or bar) after step i of n; `unit`: what ips counts per second ("images"
 * or "examples"). */
static void progress(const sx_nn_train_params *p, bool tty, int64_t epoch, int64_t i, int64_t n,
                     double loss, double ips, const char *unit, double eta)
{
    if (p->verbose < 1)
        return;
    if (tty) {
        int width = 30, done = n > 0 ? (int)((double)width * (double)i / (double)n) : width;
        char bar[64];
        for (int k = 0; k < width; k++)
            bar[k] = k < done ? '=' : k == done ? '>' : ' ';
        bar[width] = '\0';
        fprintf(stderr, "\repoch %lld [%s] %lld/%lld loss %.4f %.0f %s/s ETA %.0fs   ",
                (long long)epoch + 1, bar, (long long)i, (long long)n, loss, ips, unit, eta);
        if (i == n)
            fputc('\n', stderr);
    } else if (i == n || (p->progress_every > 0 && i % p->progress_every == 0)) {
        fprintf(stderr, "epoch %lld step %lld/%lld loss %.4f %.0f %s/s ETA %.0fs\n",
                (long long)epoch + 1, (long long)i, (long long)n, loss, ips, unit, eta);
    }
}

/* One training run: the network, its parameters, the data and what the steps share. */
typedef struct run {
    const char *who;
    sx_nn_net *net;
    sx_nn_train_params p;
    const sx_ds_images *test;
    sx_nn_model *model;   /* the compiled graph for full batches (NULL when eager) */
    sx_nn_model *partial; /* the graph for the last, smaller batch, made when first needed */
    sx_ds_loader *loader; /* the batches (sx_nn_train's image set as a source) */
    int64_t x_size;       /* a source's x elements (the loader fills x as (batch, x_size)) */
    nn_fit *fit;          /* sx_nn_fit's validation, early stopping and history, or NULL */
    bool stop;            /* early stopping asked to stop */
    bool stop_now;        /* the step callback asked to stop, mid-epoch */
    double lr;            /* the learning rate of the last step */
    sx_tensor *x, *y;     /* (batch, input shape), (batch, classes) */
    int64_t per_epoch;    /* batches per epoch */
    bool tty;
    double train_time;
    sx_nn_train_report rep;
    double plateau_lr, plateau_best; /* reduce-on-plateau: the base rate now, the best value */
    int plateau_bad;                 /* epochs without improvement */
    const sx_nn_comm *comm;          /* data-parallel over these ranks (NULL: alone) */
    int64_t global;                  /* the global batch: ranks x p.batch */
} run;

/* Data-parallel: the run's communicator; on ranks other than 0, no output and no files (rank 0
 * resumes, and its state is broadcast). */
static void run_comm(run *r)
{
    r->comm = sx_nn_comm_of(&r->p);
    r->global = (int64_t)r->p.batch * (r->comm != NULL ? r->comm->size : 1);
    if (r->comm != NULL && r->comm->rank != 0) {
        r->p.verbose = 0;
        r->p.checkpoint_path = NULL;
    }
}

/* The loader and batch tensors of a source: x (batch, input shape), y (batch, outputs). */
static sx_status run_start_source(run *r, const sx_ds_source *train, const sx_ds_augment *aug)
{
    sx_nn_net *net = r->net;
    const sx_nn_layer *last = nn_output_layer(net);
    int64_t B = r->global, xs[SX_MAX_RANK], ys[SX_MAX_RANK];
    xs[0] = ys[0] = B;
    int xr = nn_input_shape(net, xs + 1); /* (total) with several inputs */
    memcpy(ys + 1, last->shape, (size_t)last->rank * sizeof *ys);
    sx_ds_loader_params lp = sx_ds_loader_params_default();
    lp.batch_size = B;
    lp.shuffle = r->p.shuffle;
    lp.seed = net->seed;
    lp.augment = *aug;
    lp.raw = true; /* the network's graph scales and normalises */
    r->x_size = sx_ds_spec_x_size(sx_ds_source_spec(train));
    SX_TRY(sx_ds_loader_new(train, &lp, &r->loader));
    SX_TRY(sx_tensor_new(net->dtype, xr + 1, xs, &r->x));
    /* class-index targets: one index per position of the output's last axis */
    SX_TRY(sx_tensor_new(net->dtype, last->rank + (r->p.sparse_targets ? 0 : 1), ys, &r->y));
    return SX_OK;
}

/* A checkpoint (with the loop's schedule and plateau state), and sx_nn_fit's state
 * next to it. */
static sx_status run_save(run *r)
{
    nn_run_state rs = {.total_steps = r->p.schedule.total_steps,
                       .plateau = r->p.schedule.kind == SX_SCHED_PLATEAU,
                       .plateau_lr = r->plateau_lr,
                       .plateau_best = r->plateau_best,
                       .plateau_bad = r->plateau_bad};
    SX_TRY(nn_checkpoint_save_state(r->net, &r->p, &rs, r->p.checkpoint_path));
    return r->fit != NULL ? nn_fit_save(r->fit) : SX_OK;
}

/* The resumed checkpoint (when p.checkpoint_path exists) and the compiled model. */
static sx_status run_start(run *r)
{
    sx_nn_net *net = r->net;
    int64_t B = r->p.batch;
    /* a training model of another optimiser alive over net: refused before a checkpoint's
     * optimiser state replaces the one it borrows */
    SX_TRY(nn_check_train_kind(net, r->p.optim.kind, r->who));
    const char *ck = r->p.checkpoint_path;
    nn_run_state rs = {0};
    if (ck != NULL && access(ck, F_OK) == 0) {
        SX_TRY(nn_checkpoint_load_state(net, &r->p, &rs, ck));
        if (r->p.verbose > 0)
            fprintf(stderr, "resuming from %s at epoch %lld, step %lld\n", ck,
                    (long long)net->epoch + 1, (long long)net->step);
    }
    /* in-graph schedules over the whole run: T = epochs x batches per epoch unless given */
    int64_t per_epoch = sx_ds_loader_batches(r->loader);
    if ((r->p.schedule.kind == SX_SCHED_COSINE || r->p.schedule.kind == SX_SCHED_ONE_CYCLE) &&
        r->p.schedule.total_steps == 0)
        r->p.schedule.total_steps = (int64_t)r->p.epochs * per_epoch;
    SX_TRY(nn_schedule_check(r->who, &r->p.schedule));
    if (rs.total_steps > 0 && rs.total_steps != r->p.schedule.total_steps && r->p.verbose > 0)
        fprintf(stderr, "%s: the schedule runs over %lld steps, the checkpoint's run over %lld\n",
                ck, (long long)r->p.schedule.total_steps, (long long)rs.total_steps);
    r->plateau_lr = r->p.optim.lr;
    r->plateau_best = NAN;
    if (rs.plateau && r->p.schedule.kind == SX_SCHED_PLATEAU) { /* the resumed plateau's state */
        r->plateau_lr = rs.plateau_lr;
        r->plateau_best = rs.plateau_best;
        r->plateau_bad = rs.plateau_bad;
    }
    if (!r->p.eager) {
        SX_TRY(sx_nn_compile_train(net, &r->p, B, &r->model));
        r->rep.compile = sx_nn_model_report(r->model);
        if (r->comm != NULL) /* data-parallel: every rank starts from rank 0's state */
            SX_TRY(nn_dp_broadcast(net, r->comm));
        if (r->p.profile)
            sx_cg_profile_enable(sx_nn_model_graph(r->model), true);
    }
    r->per_epoch = sx_ds_loader_batches(r->loader);
    return SX_OK;
}

/* Data-parallel: this rank's rows [lo, lo + n) of a global batch of `count` rows (split as evenly
 * as it goes), its model (r->model with weight 0 when it has no rows), the step (which sums the
 * gradients), and the loss averaged over the global batch with the untrained parameters' mean
 * over the ranks (one message). */
static sx_status run_step_shard(run *r, sx_tensor *x, sx_tensor *y, int64_t count, double lr,
                                int64_t step, double *loss)
{
    const sx_nn_comm *c = r->comm;
    int64_t lo = count * c->rank / c->size, hi = count * (c->rank + 1) / c->size, n = hi - lo;
    /* no rows (a last batch smaller than the ranks): the first rows of the batch tensors, whose
     * gradients are zeroed */
    sx_tensor xv = n > 0 ? nn_rows_at(x, lo, n) : nn_rows_at(r->x, 0, r->p.batch);
    sx_tensor yv = n > 0 ? nn_rows_at(y, lo, n) : nn_rows_at(r->y, 0, r->p.batch);
    sx_nn_model *m = r->model;
    if (n > 0 && n != r->p.batch) {
        if (r->partial == NULL || r->partial->batch != n) {
            sx_nn_model_free(r->partial);
            r->partial = NULL;
            SX_TRY(sx_nn_compile_train(r->net, &r->p, n, &r->partial));
        }
        m = r->partial;
    }
    m->train->dp->weight = (double)n / (double)count;
    m->train->dp->first_row = lo; /* its rows of the global batch's dropout masks */
    double mine = 0;
    SX_TRY(sx_nn_model_step(m, &xv, &yv, lr, step, &mine, NULL));
    double sum = n > 0 ? mine * (double)n : 0;
    SX_TRY(nn_dp_after_step(r->net, c, &sum));
    *loss = sum / (double)count;
    return SX_OK;
}

/* One step on the batch x, y of `count` rows: the compiled graph (or, for a smaller last
 * batch, one of its size; or an eager graph), then the step counters. Over a communicator, x
 * and y hold the global batch (run_step_shard). */
static sx_status run_step(run *r, sx_tensor *x, sx_tensor *y, int64_t count, double *loss)
{
    sx_nn_net *net = r->net;
    double lr = nn_schedule_lr(&r->p, net->step, net->epoch);
    if (r->p.schedule.kind == SX_SCHED_PLATEAU)
        lr = r->plateau_lr;
    r->lr = lr;
    int64_t step = net->step + 1;
    if (r->comm != NULL) {
        SX_TRY(run_step_shard(r, x, y, count, lr, step, loss));
    } else if (r->p.eager) {
        SX_TRY(nn_eager_step(net, &r->p, x, y, lr, step, loss, NULL));
    } else if (count == r->p.batch) {
        SX_TRY(sx_nn_model_step(r->model, x, y, lr, step, loss, NULL));
    } else {
        if (r->partial == NULL)
            SX_TRY(sx_nn_compile_train(net, &r->p, count, &r->partial));
        SX_TRY(sx_nn_model_step(r->partial, x, y, lr, step, loss, NULL));
    }
    if (!isfinite(*loss))
        return sx_error(SX_E_RANGE,
                        "%s: the loss became %g at step %lld (lower the learning rate?)", r->who,
                        *loss, (long long)step);
    net->step = step;
    net->epoch_step++;
    r->rep.steps++;
    return SX_OK;
}

/* After a step: a checkpoint every p.checkpoint_every steps (its time not counted in *t0's
 * epoch), and on Ctrl-C a last checkpoint and SX_E_INTERRUPTED. */
static sx_status run_after_step(run *r, double *t0)
{
    sx_nn_net *net = r->net;
    const char *ck = r->p.checkpoint_path;
    if (ck != NULL && r->p.checkpoint_every > 0 && net->step % r->p.checkpoint_every == 0) {
        double c0 = sx_seconds();
        sx_status s = run_save(r);
        *t0 += sx_seconds() - c0;
        SX_TRY(s);
    }
    if (!interrupted)
        return SX_OK;
    if (ck != NULL)
        SX_TRY(run_save(r));
    return sx_error(SX_E_INTERRUPTED, "%s: interrupted at step %lld%s%s", r->who,
                    (long long)net->step, ck ? "; checkpoint written to " : "", ck ? ck : "");
}

/* The next batch into r->x, r->y (*count 0 at the epoch's end); x or y NULL: skipped. */
static sx_status run_next(run *r, bool fill, int64_t *count)
{
    /* the loader fills x as (batch, x_size): the input's shape may differ from the source's */
    int64_t fs[2] = {r->x->shape[0], r->x_size};
    sx_tensor flat = sx_tensor_view(r->x->dtype, 2, fs, r->x->data);
    return sx_ds_loader_next(r->loader, fill ? &flat : NULL, fill ? r->y : NULL, count);
}

/* The batches of the network's current epoch (after those a mid-epoch checkpoint has done);
 * *loss_sum and *seen: the loss summed over the examples, and their number. */
static sx_status run_epoch_batches(run *r, double *loss_sum, int64_t *seen)
{
    sx_nn_net *net = r->net;
    SX_TRY(sx_ds_loader_set_epoch(r->loader, net->epoch));
    /* mid-epoch resume: skip the batches already trained on */
    int64_t done_in_epoch = net->epoch_step, count = 0;
    if (done_in_epoch > r->per_epoch)
        return sx_error(SX_E_STATE,
                        "%s: the network stopped %lld steps into an epoch of %lld: resume with "
                        "the data and batch size it was trained with",
                        r->who, (long long)done_in_epoch, (long long)r->per_epoch);
    for (int64_t k = 0; k < done_in_epoch; k++)
        SX_TRY(run_next(r, false, &count));
    double t0 = sx_seconds();
    int64_t i = done_in_epoch;
    const sx_nn_layer *in = nn_input_layer(net); /* (h, w, c): images; else examples */
    const char *unit = in != NULL && in->rank == 3 ? "images" : "examples";
    sx_status s;
    while ((s = run_next(r, true, &count)) == SX_OK && count > 0) {
        sx_tensor xv = rows_view(r->x, count), yv = rows_view(r->y, count);
        double loss = 0;
        if ((s = run_step(r, &xv, &yv, count, &loss)) != SX_OK)
            break;
        i++;
        *seen += count;
        *loss_sum += loss * (double)count;
        double el = sx_seconds() - t0, ips = el > 0 ? (double)*seen / el : 0;
        double eta = ips > 0 ? (double)(r->per_epoch - i) * (double)r->global / ips : 0;
        progress(&r->p, r->tty, net->epoch, i, r->per_epoch, *loss_sum / (double)*seen, ips, unit,
                 eta);
        if ((s = run_after_step(r, &t0)) != SX_OK)
            break;
        sx_nn_step_info info = {
            net->step, net->epoch + 1, i, r->per_epoch, count, loss, *loss_sum / (double)*seen,
            r->lr};
        if (r->fit != NULL && nn_fit_step(r->fit, &info)) {
            r->stop = r->stop_now = true;
            break;
        }
    }
    r->train_time += sx_seconds() - t0;
    return s;
}

/* One epoch: its batches, then the epoch's checkpoint (when checkpoint_every is 0) and the
 * test accuracy. */
static sx_status run_epoch(run *r)
{
    sx_nn_net *net = r->net;
    double loss_sum = 0, t0 = r->train_time;
    int64_t seen = 0;
    SX_TRY(run_epoch_batches(r, &loss_sum, &seen));
    /* the callback stopped mid-epoch: no epoch end, a mid-epoch checkpoint */
    if (r->stop_now && net->epoch_step < r->per_epoch)
        return r->p.checkpoint_path != NULL ? run_save(r) : SX_OK;
    net->epoch++;
    net->epoch_step = 0;
    r->rep.last_loss = seen > 0 ? loss_sum / (double)seen : 0;
    /* sx_nn_fit's epoch end first: its state is saved with the checkpoint */
    double watched = r->rep.last_loss;
    bool higher_better = false;
    if (r->fit != NULL) {
        SX_TRY(nn_fit_epoch_end(r->fit, r->model, r->rep.last_loss, r->train_time - t0, r->lr,
                                &r->stop));
        nn_fit_last_metric(r->fit, &watched, &higher_better);
        if (r->comm != NULL) { /* rank 0's decision (its fit state was resumed) */
            unsigned char stop = r->stop;
            SX_TRY(r->comm->bcast(r->comm->ctx, &stop, 1, 0));
            r->stop = stop != 0;
        }
    }
    nn_plateau_epoch(&r->p.schedule, &r->plateau_lr, &r->plateau_best, &r->plateau_bad, watched,
                     higher_better, r->p.verbose);
    if (r->p.checkpoint_path != NULL && r->p.checkpoint_every == 0)
        SX_TRY(run_save(r));
    if (r->test != NULL) {
        /* the training graph is idle: the evaluation plans in its arena */
        SX_TRY(nn_evaluate(net, r->test, r->p.batch, r->model, &r->rep.test_accuracy));
        if (r->p.verbose > 0)
            fprintf(stderr, "epoch %lld: loss %.4f, test accuracy %.2f%%\n", (long long)net->epoch,
                    r->rep.last_loss, 100 * r->rep.test_accuracy);
    }
    return SX_OK;
}

/* The epochs up to p.epochs (or early stopping) with Ctrl-C caught, then the report; frees
 * what run_start* made. s: the status of the start. */
static sx_status run_loop(run *r, sx_status s, sx_nn_train_report *report)
{
    struct sigaction old, sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    interrupted = 0;
    sigaction(SIGINT, &sa, &old);
    r->tty = isatty(STDERR_FILENO);
    while (s == SX_OK && !r->stop && r->net->epoch < r->p.epochs)
        s = run_epoch(r);
    sigaction(SIGINT, &old, NULL);
    if (r->model != NULL && r->p.profile) {
        fprintf(stderr, "time per op kind (compiled training graph):\n");
        sx_cg_profile_print(sx_nn_model_graph(r->model), 10, stderr);
    }
    r->rep.train_seconds = r->train_time;
    if (report != NULL)
        *report = r->rep;
    sx_tensor_free(r->x);
    sx_tensor_free(r->y);
    sx_ds_loader_free(r->loader);
    sx_nn_model_free(r->partial);
    sx_nn_model_free(r->model);
    return s;
}

/* A resumed fit whose run had stopped early trains no more (rank 0's state decides). */
static sx_status run_resumed_stop(run *r)
{
    unsigned char stop = nn_fit_stopped_early(r->fit);
    if (r->comm != NULL)
        SX_TRY(r->comm->bcast(r->comm->ctx, &stop, 1, 0));
    r->stop = stop != 0;
    return SX_OK;
}

sx_status nn_loop(const nn_loop_args *a, sx_nn_history *history, sx_nn_train_report *report)
{
    sx_nn_fit_params fp = a->fp;
    run r;
    memset(&r, 0, sizeof r);
    r.who = a->who;
    r.net = a->net;
    r.p = fp.train;
    r.test = a->test;
    r.rep.test_accuracy = -1;
    run_comm(&r);
    if (r.comm != NULL && r.comm->rank != 0) { /* data-parallel: rank 0 alone writes */
        fp.train = r.p;
        fp.history_path = NULL;
    }
    sx_status s = nn_fit_new(a->net, &fp, a->train, a->val, a->stateless, &r.fit);
    if (s == SX_OK) /* the call's epochs, from the run's start (monitor.c) */
        r.p.epochs = nn_fit_last_epoch(r.fit);
    if (s == SX_OK)
        s = run_start_source(&r, a->train, &fp.augment);
    if (s == SX_OK)
        s = run_start(&r);
    if (s == SX_OK)
        s = nn_fit_resume(r.fit);
    if (s == SX_OK)
        s = run_resumed_stop(&r);
    const sx_nn_comm *comm = r.comm;
    s = run_loop(&r, s, report);
    sx_status f = nn_fit_finish(r.fit, s == SX_OK, history);
    nn_fit_free(r.fit);
    if (s == SX_OK && f == SX_OK && comm != NULL && fp.restore_best)
        f = nn_dp_broadcast(a->net, comm); /* rank 0's restored best weights */
    return s != SX_OK ? s : f;
}
