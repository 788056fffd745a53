/* What a fit reports and keeps: the training metric and learning rate per epoch, the history
 * appended to CSV or JSON-lines files as it grows, the SVG plot (well-formed XML with both
 * panels, parsed by python3's xml module when present), the per-step callback (it sees every
 * step and can stop), the checkpoint calls, and the fit's state next to a checkpoint: a fit
 * stopped and resumed stops early, restores and reports exactly as an uninterrupted one; a fit
 * continued with the same checkpoint path is a run of its own; a state written before monitors
 * resumes with the monitor it watched. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"

#define N 200

static double X[N * 3], Y[N * 2];

/* y = A x + b plus noise: validation stops improving by min_delta after a while. */
static void make_data(void)
{
    sx_rng rng;
    sx_rng_seed(&rng, 77);
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 3; j++)
            X[i * 3 + j] = 2 * sx_rng_uniform(&rng) - 1;
        Y[i * 2] = 0.5 * X[i * 3] - X[i * 3 + 1] + 0.1 * (sx_rng_uniform(&rng) - 0.5);
        Y[i * 2 + 1] = X[i * 3 + 2] + 0.3 + 0.1 * (sx_rng_uniform(&rng) - 0.5);
    }
}

static sx_ds_source *source(int64_t from, int64_t n)
{
    sx_ds_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.x_type = sp.y_type = SX_DS_F64;
    sp.x_rank = sp.y_rank = 1;
    sp.x_shape[0] = 3;
    sp.y_shape[0] = 2;
    sp.x_scale = 1;
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_memory(&sp, n, X + from * 3, Y + from * 2, &s), SX_OK);
    return s;
}

static sx_nn_net *net_new(void)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("hist", SX_F64, 11, &net), SX_OK);
    sx_nn_layer *l = sx_nn_input(net, 1, (int64_t[]){3});
    l = sx_nn_linear(net, l, 8, SX_ACT_TANH);
    l = sx_nn_linear(net, l, 2, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

static sx_nn_fit_params params(int epochs)
{
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = epochs;
    p.train.batch = 32;
    p.train.loss = SX_LOSS_MSE;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.train.optim.lr = 0.02;
    p.train.verbose = 0;
    return p;
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

static void tmp_path(char *buf, size_t size, const char *tag)
{
    snprintf(buf, size, "/tmp/strix_hist_%ld_%s", (long)getpid(), tag);
    remove(buf);
}

static int count_lines(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL)
        n += strncmp(line, prefix, strlen(prefix)) == 0;
    fclose(f);
    return n;
}

Test(nn_history, train_metric_and_learning_rate_per_epoch)
{
    make_data();
    sx_ds_source *tr = source(0, 150), *va = source(150, 50);
    sx_nn_net *net = net_new();
    sx_nn_fit_params p = params(3);
    static const double lrs[3] = {0.03, 0.02, 0.005};
    p.train.schedule.kind = SX_SCHED_EXPLICIT;
    p.train.schedule.values = lrs;
    p.train.schedule.n_values = 3;
    p.restore_best = false;
    sx_nn_history h;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < 3; i++)
        cr_assert_eq(h.rows[i].lr, lrs[i]);
    double loss = 0, mse = 0;
    cr_assert_eq(sx_nn_evaluate_source(net, tr, &p, &loss, &mse), SX_OK);
    cr_assert_eq(h.rows[2].train_metric, mse); /* the same evaluation, after the last epoch */
    cr_assert_neq(h.rows[2].train_metric, h.rows[2].val_metric);
    sx_nn_history_free(&h);
    /* off: NAN */
    p.train_metric = false;
    p.train.epochs = 1;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h), SX_OK);
    cr_assert_eq(h.n, 1);
    cr_assert(isnan(h.rows[0].train_metric));
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
}

Test(nn_history, history_files_are_appended_per_epoch)
{
    make_data();
    sx_ds_source *tr = source(0, 150), *va = source(150, 50);
    char csv[128], jsonl[128];
    tmp_path(csv, sizeof csv, "a.csv");
    tmp_path(jsonl, sizeof jsonl, "a.jsonl");
    for (int f = 0; f < 2; f++) {
        sx_nn_net *net = net_new();
        sx_nn_fit_params p = params(3);
        p.history_path = f == 0 ? csv : jsonl;
        cr_assert_eq(sx_nn_fit(net, &p, tr, f == 0 ? va : NULL, NULL), SX_OK, "%s",
                     sx_last_error());
        p.train.epochs = 2; /* a second call trains 2 more: it appends epochs 4 and 5 */
        cr_assert_eq(sx_nn_fit(net, &p, tr, f == 0 ? va : NULL, NULL), SX_OK);
        sx_nn_net_free(net);
    }
    cr_assert_eq(count_lines(csv, "epoch,train_loss,val_loss,val_mse,seconds,train_mse,lr\n"), 1);
    cr_assert_eq(count_lines(csv, ""), 6);
    cr_assert_eq(count_lines(jsonl, "{\"epoch\":"), 5);
    cr_assert_eq(count_lines(jsonl, "{\"epoch\":5,"), 1);
    /* no validation: null, never nan (not JSON) */
    FILE *fp = fopen(jsonl, "r");
    char line[1024];
    cr_assert(fgets(line, sizeof line, fp) != NULL);
    fclose(fp);
    cr_assert(strstr(line, "\"val_loss\":null") != NULL, "%s", line);
    cr_assert(strstr(line, "\"val_loss\":null") != NULL, "%s", line);
    cr_assert_null(strstr(line, "nan"), "%s", line);
    remove(csv);
    remove(jsonl);
    /* a directory that does not exist: SX_E_IO, named */
    sx_nn_net *net = net_new();
    sx_nn_fit_params p = params(1);
    p.history_path = "/nonexistent/dir/h.csv";
    cr_assert_eq(sx_nn_fit(net, &p, tr, NULL, NULL), SX_E_IO);
    cr_assert(strstr(sx_last_error(), "/nonexistent/dir/h.csv") != NULL, "%s", sx_last_error());
    sx_nn_net_free(net);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static int occurrences(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p != NULL; p = strstr(p + 1, what))
        n++;
    return n;
}

Test(nn_history, svg_plot_is_well_formed_with_both_curves)
{
    make_data();
    sx_ds_source *tr = source(0, 150), *va = source(150, 50);
    sx_nn_net *net = net_new();
    sx_nn_fit_params p = params(6);
    sx_nn_history h;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    char svg[128], tmp[160];
    tmp_path(svg, sizeof svg, "plot.svg");
    cr_assert_eq(sx_nn_history_write_svg(&h, svg, "a <fit> & its \"curves\""), SX_OK, "%s",
                 sx_last_error());
    snprintf(tmp, sizeof tmp, "%s.tmp", svg);
    cr_assert_neq(access(tmp, F_OK), 0, "the temporary file was left behind");
    const char *s = slurp(svg);
    cr_assert(strncmp(s, "<?xml", 5) == 0);
    cr_assert(strstr(s, "<svg xmlns=\"http://www.w3.org/2000/svg\"") != NULL);
    cr_assert(strstr(s, "a &lt;fit&gt; &amp; its &quot;curves&quot;") != NULL);
    cr_assert_eq(occurrences(s, "<g class=\"panel\">"), 2);
    cr_assert_eq(occurrences(s, "<polyline class=\"train\""), 2);
    cr_assert_eq(occurrences(s, "<polyline class=\"validation\""), 2);
    cr_assert_geq(occurrences(s, "class=\"ytick\""), 6);
    cr_assert_geq(occurrences(s, "class=\"xtick\""), 4);
    cr_assert_eq(occurrences(s, ">epoch</text>"), 2);
    cr_assert(strstr(s, "</svg>\n") != NULL && strstr(s, "</svg>\n")[7] == '\0');
    cr_assert_null(strstr(s, "nan"));
    /* python3's XML parser reads it, and every polyline holds 6 points */
    if (access("/usr/bin/python3", X_OK) == 0) {
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c \"import sys, xml.etree.ElementTree as E; "
                 "r = E.parse(sys.argv[1]).getroot(); ns = '{http://www.w3.org/2000/svg}'; "
                 "p = r.findall('.//' + ns + 'polyline'); "
                 "sys.exit(0 if r.tag == ns + 'svg' and len(p) == 4 and "
                 "all(len(q.get('points').split()) == 6 for q in p) else 1)\" %s",
                 svg);
        cr_assert_eq(system(cmd), 0, "python3's xml module rejects %s", svg);
    }
    /* a gap: a history without validation draws no validation curve */
    for (int64_t i = 0; i < h.n; i++)
        h.rows[i].val_loss = h.rows[i].val_metric = NAN;
    cr_assert_eq(sx_nn_history_write_svg(&h, svg, NULL), SX_OK);
    s = slurp(svg);
    cr_assert_eq(occurrences(s, "<polyline class=\"validation\""), 0);
    cr_assert_eq(occurrences(s, "<polyline class=\"train\""), 2);
    remove(svg);
    cr_assert_eq(sx_nn_history_write_svg(&h, "/nonexistent/dir/p.svg", NULL), SX_E_IO);
    sx_nn_history empty;
    memset(&empty, 0, sizeof empty);
    cr_assert_eq(sx_nn_history_write_svg(&empty, svg, NULL), SX_E_ARG);
    cr_assert_eq(sx_nn_history_write_svg(NULL, svg, NULL), SX_E_ARG);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
}

typedef struct watch {
    int64_t calls, stop_at, last_step, last_batch;
    double last_lr;
    bool ordered;
} watch;

static bool on_step(const sx_nn_step_info *in, void *ctx)
{
    watch *w = ctx;
    w->ordered = w->ordered && in->step == w->last_step + 1 && in->batches == 5 &&
                 in->batch == (in->step - 1) % 5 + 1 && in->epoch == (in->step - 1) / 5 + 1 &&
                 isfinite(in->loss) && in->examples == (in->batch == 5 ? 22 : 32);
    w->calls++;
    w->last_step = in->step;
    w->last_lr = in->lr;
    return w->stop_at > 0 && in->step == w->stop_at;
}

Test(nn_history, step_callback_sees_every_step_and_stops)
{
    make_data();
    sx_ds_source *tr = source(0, 150), *va = source(150, 50);
    sx_nn_net *net = net_new();
    sx_nn_fit_params p = params(2);
    watch w = {.ordered = true};
    p.on_step = on_step;
    p.on_step_ctx = &w;
    sx_nn_history h;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_assert_eq(w.calls, 10); /* 150 examples in batches of 32: 5 a epoch */
    cr_assert(w.ordered);
    cr_assert_eq(w.last_lr, 0.02);
    cr_assert_not(h.stopped_by_callback);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    /* stop mid-epoch at step 7: no row for epoch 2, the network 7 steps in */
    net = net_new();
    w = (watch){.ordered = true, .stop_at = 7};
    p.train.epochs = 4;
    cr_assert_eq(sx_nn_fit(net, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_assert(h.stopped_by_callback);
    cr_assert_eq(h.n, 1);
    cr_assert_eq(w.calls, 7);
    cr_assert_eq(sx_nn_net_steps(net), 7);
    cr_assert_eq(sx_nn_net_epochs(net), 1);
    cr_assert_eq(sx_nn_net_epoch_steps(net), 2);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
}

/* Stopped by the callback in the middle of epoch 3 with a checkpoint, then resumed: the same
 * run as an uninterrupted one (weights bit for bit; the early stop at the same epoch; the same
 * history rows but for the seconds). */
Test(nn_history, resumed_fit_continues_early_stopping_state)
{
    make_data();
    sx_ds_source *tr = source(0, 150), *va = source(150, 50);
    char ck[128], st[160];
    tmp_path(ck, sizeof ck, "ck");
    snprintf(st, sizeof st, "%s.fit", ck);
    remove(st);
    sx_nn_fit_params p = params(60);
    p.patience = 3;
    p.min_delta = 2e-4;
    sx_nn_net *ref = net_new(), *a = net_new();
    sx_nn_history hr, h;
    cr_assert_eq(sx_nn_fit(ref, &p, tr, va, &hr), SX_OK, "%s", sx_last_error());
    cr_assert(hr.stopped_early, "the reference run should stop early (%lld epochs)",
              (long long)hr.n);
    cr_assert_lt(hr.best_epoch, hr.n);
    /* the interrupted run: stopped by the callback a few steps before the reference's best
     * epoch ends, then resumed by a second call */
    watch w = {.ordered = true, .stop_at = (hr.best_epoch - 1) * 5 + 2};
    p.train.checkpoint_path = ck;
    p.on_step = on_step;
    p.on_step_ctx = &w;
    cr_assert_eq(sx_nn_fit(a, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_assert(h.stopped_by_callback);
    sx_nn_history_free(&h);
    sx_nn_net_free(a);
    a = net_new(); /* a new process would start from a fresh network */
    p.on_step = NULL;
    cr_assert_eq(sx_nn_fit(a, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_assert_eq(h.n, hr.n);
    cr_assert(h.stopped_early);
    cr_assert_eq(h.best_epoch, hr.best_epoch);
    for (int64_t i = 0; i < h.n; i++) {
        cr_assert_eq(h.rows[i].epoch, hr.rows[i].epoch);
        cr_assert_eq(h.rows[i].val_loss, hr.rows[i].val_loss, "epoch %lld", (long long)i + 1);
        cr_assert_eq(h.rows[i].train_metric, hr.rows[i].train_metric);
    }
    cr_assert(same_weights(a, ref)); /* the best epoch's weights, restored in both */
    /* the same call once more: the run had ended, nothing trains, the best weights come back */
    sx_nn_net *d = net_new();
    sx_nn_history hd;
    cr_assert_eq(sx_nn_fit(d, &p, tr, va, &hd), SX_OK, "%s", sx_last_error());
    cr_assert_eq(hd.n, hr.n);
    cr_assert(hd.stopped_early);
    cr_assert_eq(sx_nn_net_epochs(d), hr.n);
    cr_assert(same_weights(d, ref));
    sx_nn_history_free(&hd);
    sx_nn_net_free(d);
    /* a fit state of another epoch than the checkpoint is refused, naming both */
    sx_nn_net *b = net_new();
    p.train.epochs = 1;
    p.patience = 0;
    p.train.checkpoint_path = NULL;
    cr_assert_eq(sx_nn_fit(b, &p, tr, va, NULL), SX_OK);
    cr_assert_eq(sx_nn_checkpoint_save(b, &p.train, ck), SX_OK, "%s", sx_last_error());
    p.train.checkpoint_path = ck;
    p.train.epochs = 60;
    sx_nn_net *c = net_new();
    cr_assert_eq(sx_nn_fit(c, &p, tr, va, NULL), SX_E_STATE);
    cr_assert(strstr(sx_last_error(), "epoch 1") != NULL, "%s", sx_last_error());
    remove(ck);
    remove(st);
    sx_nn_history_free(&h);
    sx_nn_history_free(&hr);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    sx_nn_net_free(c);
    sx_nn_net_free(ref);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
}

/* The checkpoint calls: a loop of one's own saves and a fresh network loads the same state. */
Test(nn_history, checkpoint_calls_round_trip)
{
    make_data();
    sx_ds_source *tr = source(0, 150);
    char ck[128];
    tmp_path(ck, sizeof ck, "calls");
    sx_nn_net *a = net_new(), *b = net_new();
    sx_nn_fit_params p = params(2);
    cr_assert_eq(sx_nn_fit(a, &p, tr, NULL, NULL), SX_OK);
    cr_assert_not(same_weights(a, b));
    cr_assert_eq(sx_nn_checkpoint_save(a, &p.train, ck), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_checkpoint_load(b, &p.train, ck), SX_OK, "%s", sx_last_error());
    cr_assert(same_weights(a, b));
    cr_assert_eq(sx_nn_net_steps(b), 10);
    cr_assert_eq(sx_nn_net_epochs(b), 2);
    /* both continue identically, one epoch more */
    p.train.epochs = 1;
    cr_assert_eq(sx_nn_fit(a, &p, tr, NULL, NULL), SX_OK);
    cr_assert_eq(sx_nn_fit(b, &p, tr, NULL, NULL), SX_OK);
    cr_assert(same_weights(a, b));
    /* another optimiser's run: refused before anything changes */
    sx_nn_train_params q = p.train;
    q.optim = sx_optim_params_default(SX_OPTIM_SGD);
    cr_assert_eq(sx_nn_checkpoint_load(b, &q, ck), SX_E_STATE);
    cr_assert_eq(sx_nn_net_epochs(b), 3);
    cr_assert_eq(sx_nn_checkpoint_save(NULL, NULL, ck), SX_E_ARG);
    cr_assert_eq(sx_nn_checkpoint_load(b, NULL, NULL), SX_E_ARG);
    cr_assert_eq(sx_nn_checkpoint_load(b, &p.train, "/nonexistent/ck"), SX_E_IO);
    cr_assert_eq(sx_nn_net_steps(NULL), -1);
    remove(ck);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    sx_ds_source_free(tr);
}

/* A network continued with the same checkpoint path is a run of its own: the first run's
 * PATH.fit is not resumed (the second call's history holds its rows; early stopping starts
 * afresh), the weights equal one fit of 4 epochs, and PATH.fit records the second run's start,
 * monitor and mode. A new network resuming the second run (start_epoch 2) reads back its rows;
 * another monitor than the state's is refused, naming both. */
Test(nn_history, continued_fit_with_a_checkpoint_is_a_run_of_its_own)
{
    make_data();
    sx_ds_source *tr = source(0, 150), *va = source(150, 50);
    char ck[128], st[160];
    tmp_path(ck, sizeof ck, "cont");
    snprintf(st, sizeof st, "%s.fit", ck);
    remove(st);
    sx_nn_fit_params p = params(2);
    p.restore_best = false;
    p.train.checkpoint_path = ck;
    sx_nn_net *a = net_new(), *ref = net_new();
    sx_nn_history h1, h2, h;
    cr_assert_eq(sx_nn_fit(a, &p, tr, va, &h1), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_fit(a, &p, tr, va, &h2), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_net_epochs(a), 4);
    cr_assert_eq(h2.n, 2);
    cr_assert_eq(h2.rows[0].epoch, 3);
    cr_assert_geq(h2.best_epoch, 3);
    p.train.checkpoint_path = NULL;
    p.train.epochs = 4;
    cr_assert_eq(sx_nn_fit(ref, &p, tr, va, NULL), SX_OK);
    cr_assert(same_weights(a, ref));
    sx_cg_file *fl = NULL;
    cr_assert_eq(sx_cg_file_read(st, &fl), SX_OK, "%s", sx_last_error());
    cr_assert_str_eq(sx_cg_file_meta(fl, "fit_state_version"), "2");
    cr_assert_str_eq(sx_cg_file_meta(fl, "start_epoch"), "2");
    cr_assert_str_eq(sx_cg_file_meta(fl, "monitor"), "val_loss");
    cr_assert_str_eq(sx_cg_file_meta(fl, "mode"), "min");
    sx_cg_file_free(fl);
    /* a new network resuming the second run: nothing left to train, its rows back */
    sx_nn_net *b = net_new();
    p.train.checkpoint_path = ck;
    p.train.epochs = 2;
    p.start_epoch = 2;
    cr_assert_eq(sx_nn_fit(b, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_assert_eq(h.n, 2);
    cr_assert_eq(h.best_epoch, h2.best_epoch);
    for (int64_t i = 0; i < 2; i++) {
        cr_assert_eq(h.rows[i].epoch, i + 3);
        cr_assert_eq(h.rows[i].val_loss, h2.rows[i].val_loss);
    }
    cr_assert(same_weights(b, a));
    sx_nn_history_free(&h);
    /* another monitor than the state's */
    sx_nn_net *c = net_new();
    p.monitor = "train_loss";
    cr_assert_eq(sx_nn_fit(c, &p, tr, va, NULL), SX_E_STATE);
    cr_assert(strstr(sx_last_error(), "watches val_loss (min), this fit train_loss (min)") != NULL,
              "%s", sx_last_error());
    remove(ck);
    remove(st);
    sx_nn_history_free(&h1);
    sx_nn_history_free(&h2);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    sx_nn_net_free(c);
    sx_nn_net_free(ref);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
}

/* Write PATH.fit as strix wrote it before monitors: no start epoch, monitor or mode; history
 * rows of 7 + SX_NN_MAX_HEADS columns; the best weights (net's) under the parameters' names. */
static void write_old_state(const char *path, const sx_nn_net *net, const sx_nn_epoch *r)
{
    int64_t shape[2] = {1, 7 + SX_NN_MAX_HEADS};
    sx_tensor *rows = NULL;
    cr_assert_eq(sx_tensor_zeros(SX_F64, 2, shape, &rows), SX_OK);
    double *d = rows->data;
    double v[7] = {(double)r->epoch, r->train_loss,   r->val_loss, r->val_metric,
                   r->seconds,       r->train_metric, r->lr};
    memcpy(d, v, sizeof v);
    for (int k = 0; k < SX_NN_MAX_HEADS; k++)
        d[7 + k] = NAN;
    const char *names[16] = {"fit.history"};
    const sx_tensor *ts[16] = {rows};
    int nt = 1;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++, nt++) {
            names[nt] = net->layers[i]->params[k].name;
            ts[nt] = net->layers[i]->params[k].value;
        }
    char best[40];
    snprintf(best, sizeof best, "%.17g", r->val_metric);
    const char *keys[] = {"strix.kind", "epoch",      "rows", "metric",
                          "best",       "best_epoch", "wait", "stopped_early"};
    const char *vals[] = {"fit_state", "1", "1", "mse", best, "1", "0", "0"};
    cr_assert_eq(sx_cg_save(NULL, 0, NULL, NULL, nt, names, ts, 8, keys, vals, path), SX_OK, "%s",
                 sx_last_error());
    sx_tensor_free(rows);
}

/* A PATH.fit written before monitors watched val_<metric>: it resumes with that monitor (the
 * same run as an uninterrupted one) and is refused with the new default, saying what to set. */
Test(nn_history, fit_state_written_before_monitors)
{
    make_data();
    sx_ds_source *tr = source(0, 150), *va = source(150, 50);
    char ck[128], st[160];
    tmp_path(ck, sizeof ck, "old");
    snprintf(st, sizeof st, "%s.fit", ck);
    remove(st);
    sx_nn_fit_params p = params(1);
    p.train.checkpoint_path = ck;
    p.monitor = "val_mse";
    sx_nn_net *a = net_new(), *b = net_new(), *c = net_new(), *ref = net_new();
    sx_nn_history h, hr;
    cr_assert_eq(sx_nn_fit(a, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    write_old_state(st, a, &h.rows[0]);
    sx_nn_history_free(&h);
    p.train.epochs = 4;
    p.monitor = NULL; /* val_loss */
    cr_assert_eq(sx_nn_fit(b, &p, tr, va, NULL), SX_E_STATE);
    cr_assert(strstr(sx_last_error(), "resume with monitor \"val_mse\"") != NULL, "%s",
              sx_last_error());
    p.monitor = "val_mse";
    cr_assert_eq(sx_nn_fit(c, &p, tr, va, &h), SX_OK, "%s", sx_last_error());
    cr_assert_eq(h.n, 4);
    p.train.checkpoint_path = NULL;
    cr_assert_eq(sx_nn_fit(ref, &p, tr, va, &hr), SX_OK);
    cr_assert_eq(h.best_epoch, hr.best_epoch);
    for (int64_t i = 0; i < 4; i++)
        cr_assert_eq(h.rows[i].val_metric, hr.rows[i].val_metric, "epoch %lld", (long long)i + 1);
    cr_assert(same_weights(c, ref));
    remove(ck);
    remove(st);
    sx_nn_history_free(&h);
    sx_nn_history_free(&hr);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
    sx_nn_net_free(c);
    sx_nn_net_free(ref);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
}
