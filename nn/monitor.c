/* monitor.c: what a fit watches at the end of every epoch of the loop (loop.c): validation
 * (evaluate.c), early stopping with the best weights kept and restored, the per-step callback,
 * the per-epoch history (appended to a file as it grows) and the fit's own state next to a
 * checkpoint, so that a resumed fit is the same run. */
#include "nn_impl.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIST_COLS (7 + 2 * SX_NN_MAX_HEADS) /* a history row as doubles in PATH.fit */
#define HIST_COLS_V1 (7 + SX_NN_MAX_HEADS)  /* before per-head metrics (still read) */

/* A column of the history, as early stopping watches it: head indexes the heads' columns. */
typedef enum {
    COL_NONE,
    COL_TRAIN_LOSS,
    COL_VAL_LOSS,
    COL_VAL_METRIC,
    COL_TRAIN_METRIC,
    COL_HEAD_LOSS,
    COL_HEAD_METRIC
} col_kind;

typedef struct column {
    col_kind kind;
    int head;
} column;

struct nn_fit {
    sx_nn_net *net;
    sx_nn_fit_params p;
    const sx_ds_source *train, *val;
    sx_nn_history h; /* h.best: the best monitored value so far */
    int64_t cap;
    int64_t start; /* the network's epoch count the run started from */
    column col;    /* the monitored column */
    int wait;
    sx_tensor **best_w; /* every parameter's value at the best epoch (NULL when not kept) */
    int n_w;
    bool stateless; /* no PATH.fit, no history line (sx_nn_train's runs) */
};

/* ---------------------------------------------------------------- the monitored column */

/* Column c's name in the history's CSV header (history.c writes the same names). */
static void col_name(const sx_nn_history *h, column c, char *buf, size_t size)
{
    const char *m = sx_nn_metric_name(h->metric);
    switch (c.kind) {
    case COL_NONE:
        snprintf(buf, size, "%s", "");
        break;
    case COL_TRAIN_LOSS:
        snprintf(buf, size, "%s", "train_loss");
        break;
    case COL_VAL_LOSS:
        snprintf(buf, size, "%s", "val_loss");
        break;
    case COL_VAL_METRIC:
        snprintf(buf, size, "val_%s", m);
        break;
    case COL_TRAIN_METRIC:
        snprintf(buf, size, "train_%s", m);
        break;
    case COL_HEAD_LOSS:
        snprintf(buf, size, "val_loss_%s", h->head_names[c.head]);
        break;
    case COL_HEAD_METRIC:
        snprintf(buf, size, "val_%s_%s", sx_nn_metric_name(h->head_metric[c.head]),
                 h->head_names[c.head]);
        break;
    }
}

static double col_value(const sx_nn_epoch *r, column c)
{
    switch (c.kind) {
    case COL_NONE:
        break;
    case COL_TRAIN_LOSS:
        return r->train_loss;
    case COL_VAL_LOSS:
        return r->val_loss;
    case COL_VAL_METRIC:
        return r->val_metric;
    case COL_TRAIN_METRIC:
        return r->train_metric;
    case COL_HEAD_LOSS:
        return r->val_head_loss[c.head];
    case COL_HEAD_METRIC:
        return r->val_head_metric[c.head];
    }
    return (double)NAN;
}

/* The i-th column early stopping may watch (false past the last): every history column but
 * the epoch, the seconds and the learning rate, in the header's order. */
static bool col_at(const sx_nn_history *h, int i, column *c)
{
    static const col_kind fixed[] = {COL_TRAIN_LOSS, COL_VAL_LOSS, COL_VAL_METRIC,
                                     COL_TRAIN_METRIC};
    int nf = (int)(sizeof fixed / sizeof fixed[0]);
    if (i < nf)
        *c = (column){fixed[i], 0};
    else if (i < nf + 2 * h->n_heads)
        *c = (column){i < nf + h->n_heads ? COL_HEAD_LOSS : COL_HEAD_METRIC, (i - nf) % h->n_heads};
    return i < nf + 2 * h->n_heads;
}

/* The column named `name` (the first of that name), or SX_E_ARG listing the names. */
static sx_status col_find(const sx_nn_history *h, const char *name, column *c)
{
    char list[1024] = "", one[64];
    size_t used = 0;
    for (int i = 0; col_at(h, i, c); i++) {
        col_name(h, *c, one, sizeof one);
        if (strcmp(one, name) == 0)
            return SX_OK;
        int w = snprintf(list + used, sizeof list - used, "%s%s", i > 0 ? ", " : "", one);
        used = w > 0 && (size_t)w < sizeof list - used ? used + (size_t)w : used;
    }
    return sx_error(SX_E_ARG, "sx_nn_fit: monitor '%s' names no column of this fit's history (%s)",
                    name, list);
}

/* p.monitor and p.mode into f->col and the history's monitor, mode and best (NAN). */
static sx_status monitor_resolve(nn_fit *f)
{
    const sx_nn_fit_params *p = &f->p;
    bool user_loss = p->train.loss_fn != NULL;
    column c = {COL_NONE, 0};
    if (p->monitor != NULL)
        SX_TRY(col_find(&f->h, p->monitor, &c));
    else if (f->val != NULL)
        c.kind = user_loss ? COL_VAL_METRIC : COL_VAL_LOSS;
    col_name(&f->h, c, f->h.monitor, sizeof f->h.monitor);
    bool on_val = c.kind == COL_VAL_LOSS || c.kind == COL_VAL_METRIC || c.kind == COL_HEAD_LOSS ||
                  c.kind == COL_HEAD_METRIC;
    if (on_val && f->val == NULL)
        return sx_error(SX_E_ARG, "sx_nn_fit: monitor %s needs a validation source", f->h.monitor);
    if (c.kind == COL_TRAIN_METRIC && !p->train_metric)
        return sx_error(SX_E_ARG, "sx_nn_fit: monitor %s needs train_metric", f->h.monitor);
    if (c.kind == COL_VAL_LOSS && user_loss)
        return sx_error(SX_E_ARG,
                        "sx_nn_fit: monitor val_loss: the validation loss of a loss_fn is not "
                        "computed (monitor val_%s)",
                        sx_nn_metric_name(f->h.metric));
    bool up = (c.kind == COL_VAL_METRIC || c.kind == COL_TRAIN_METRIC)
                  ? nn_metric_higher_better(f->h.metric)
                  : c.kind == COL_HEAD_METRIC && nn_metric_higher_better(f->h.head_metric[c.head]);
    f->h.mode = c.kind == COL_NONE           ? SX_MONITOR_AUTO
                : p->mode != SX_MONITOR_AUTO ? p->mode
                : up                         ? SX_MONITOR_MAX
                                             : SX_MONITOR_MIN;
    f->col = c;
    f->h.best = (double)NAN;
    return SX_OK;
}

sx_status nn_fit_new(sx_nn_net *net, const sx_nn_fit_params *p, const sx_ds_source *train,
                     const sx_ds_source *val, bool stateless, nn_fit **out)
{
    *out = NULL;
    int64_t start = p->start_epoch >= 0 ? p->start_epoch : net->epoch;
    if (start > INT32_MAX - (int64_t)p->train.epochs)
        return sx_error(SX_E_ARG, "sx_nn_fit: start epoch %lld + %d epochs is past %d",
                        (long long)start, p->train.epochs, INT32_MAX);
    nn_fit *f = sx_calloc(1, sizeof *f);
    if (f == NULL)
        return SX_E_NOMEM;
    f->net = net;
    f->p = *p;
    f->train = train;
    f->val = val;
    f->start = start;
    f->stateless = stateless;
    f->h.metric = val != NULL                   ? nn_metric_resolve(net, p, val)
                  : p->metric == SX_METRIC_AUTO ? SX_METRIC_LOSS
                                                : p->metric;
    if (p->train.n_heads > 0 || net->n_outputs >= 2) { /* each head's or output's columns */
        nn_loss_part parts[SX_NN_MAX_HEADS];
        f->h.n_heads = nn_loss_parts(net, &p->train, parts);
        for (int h = 0; h < f->h.n_heads; h++) {
            snprintf(f->h.head_names[h], sizeof f->h.head_names[h], "%s", parts[h].name);
            f->h.head_metric[h] = nn_part_metric(&parts[h]);
        }
    }
    sx_status s = monitor_resolve(f);
    if (s != SX_OK) {
        nn_fit_free(f);
        return s;
    }
    *out = f;
    return SX_OK;
}

int nn_fit_last_epoch(const nn_fit *f)
{
    return (int)(f->start + f->p.train.epochs);
}

void nn_fit_free(nn_fit *f)
{
    if (f == NULL)
        return;
    for (int i = 0; i < f->n_w; i++)
        sx_tensor_free(f->best_w[i]);
    sx_free(f->best_w);
    sx_free(f->h.rows);
    sx_free(f);
}

/* The parameters the network stores (shared slots skipped), in order: count_params of them;
 * param_at(net, j) is the j-th. */
static int count_params(const sx_nn_net *net)
{
    int n = 0;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            n += nn_param_stored(&net->layers[i]->params[k]);
    return n;
}

static nn_param *param_at(const sx_nn_net *net, int j)
{
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            if (nn_param_stored(&net->layers[i]->params[k]) && j-- == 0)
                return &net->layers[i]->params[k];
    return NULL;
}

static sx_status best_alloc(nn_fit *f)
{
    if (f->best_w != NULL)
        return SX_OK;
    int n = count_params(f->net);
    if ((f->best_w = sx_calloc((size_t)n + 1, sizeof *f->best_w)) == NULL)
        return SX_E_NOMEM;
    f->n_w = n;
    return SX_OK;
}

/* Copy every parameter's value (weights, running statistics) into f->best_w (to_net false), or
 * back into the network (to_net true). */
static sx_status copy_weights(nn_fit *f, bool to_net)
{
    SX_TRY(best_alloc(f));
    for (int j = 0; j < f->n_w; j++) {
        sx_tensor *v = param_at(f->net, j)->value;
        if (to_net)
            SX_TRY(sx_tensor_copy_out(f->best_w[j], v));
        else if (f->best_w[j] == NULL)
            SX_TRY(sx_tensor_clone(v, &f->best_w[j]));
        else
            SX_TRY(sx_tensor_copy_out(v, f->best_w[j]));
    }
    return SX_OK;
}

static bool improved(sx_nn_monitor_mode mode, double v, double best, double min_delta)
{
    if (isnan(best))
        return !isnan(v);
    return mode == SX_MONITOR_MAX ? v > best + min_delta : v < best - min_delta;
}

static sx_status add_row(nn_fit *f, const sx_nn_epoch *row)
{
    if (f->h.n == f->cap) {
        int64_t cap = f->cap ? 2 * f->cap : 16;
        sx_nn_epoch *r = sx_realloc(f->h.rows, (size_t)cap * sizeof *r);
        if (r == NULL)
            return SX_E_NOMEM;
        f->h.rows = r;
        f->cap = cap;
    }
    f->h.rows[f->h.n++] = *row;
    return SX_OK;
}

/* ---------------------------------------------------------------- the fit's state: PATH.fit */

static sx_status state_path(const char *ck, char *buf, size_t size)
{
    if ((size_t)snprintf(buf, size, "%s.fit", ck) >= size)
        return sx_error(SX_E_ARG, "sx_nn_fit: checkpoint path too long: %s", ck);
    return SX_OK;
}

/* A monitor's direction in PATH.fit: "min", "max", or "auto" when nothing is monitored. */
static const char *mode_name(sx_nn_monitor_mode m)
{
    return m == SX_MONITOR_MIN ? "min" : m == SX_MONITOR_MAX ? "max" : "auto";
}

/* The history rows as an (n, HIST_COLS) f64 tensor (new). */
static sx_status rows_tensor(const sx_nn_history *h, sx_tensor **out)
{
    int64_t shape[2] = {h->n > 0 ? h->n : 1, HIST_COLS};
    SX_TRY(sx_tensor_zeros(SX_F64, 2, shape, out));
    double *d = (*out)->data;
    for (int64_t i = 0; i < h->n; i++) {
        const sx_nn_epoch *r = &h->rows[i];
        double *o = d + i * HIST_COLS;
        o[0] = (double)r->epoch;
        o[1] = r->train_loss;
        o[2] = r->val_loss;
        o[3] = r->val_metric;
        o[4] = r->seconds;
        o[5] = r->train_metric;
        o[6] = r->lr;
        memcpy(o + 7, r->val_head_loss, sizeof r->val_head_loss);
        memcpy(o + 7 + SX_NN_MAX_HEADS, r->val_head_metric, sizeof r->val_head_metric);
    }
    return SX_OK;
}

sx_status nn_fit_save(const nn_fit *f)
{
    const char *ck = f->p.train.checkpoint_path;
    if (ck == NULL || f->stateless)
        return SX_OK;
    char path[4200];
    SX_TRY(state_path(ck, path, sizeof path));
    int nt = 1 + (f->best_w != NULL ? f->n_w : 0);
    const char **names = sx_calloc((size_t)nt, sizeof *names);
    const sx_tensor **ts = sx_calloc((size_t)nt, sizeof *ts);
    sx_tensor *rows = NULL;
    sx_status s = names && ts ? rows_tensor(&f->h, &rows) : SX_E_NOMEM;
    if (s == SX_OK) {
        names[0] = "fit.history";
        ts[0] = rows;
        for (int j = 1; j < nt; j++) {
            names[j] = param_at(f->net, j - 1)->name;
            ts[j] = f->best_w[j - 1];
        }
        char epoch[32], n[32], best[40], best_epoch[32], wait[32], start[32];
        snprintf(epoch, sizeof epoch, "%lld", (long long)f->net->epoch);
        snprintf(n, sizeof n, "%lld", (long long)f->h.n);
        snprintf(best, sizeof best, "%.17g", f->h.best);
        snprintf(best_epoch, sizeof best_epoch, "%lld", (long long)f->h.best_epoch);
        snprintf(wait, sizeof wait, "%d", f->wait);
        snprintf(start, sizeof start, "%lld", (long long)f->start);
        const char *keys[] = {"strix.kind",    "fit_state_version",
                              "epoch",         "rows",
                              "metric",        "best",
                              "best_epoch",    "wait",
                              "stopped_early", "start_epoch",
                              "monitor",       "mode"};
        const char *vals[] = {"fit_state",
                              "2",
                              epoch,
                              n,
                              sx_nn_metric_name(f->h.metric),
                              best,
                              best_epoch,
                              wait,
                              f->h.stopped_early ? "1" : "0",
                              start,
                              f->h.monitor,
                              mode_name(f->h.mode)};
        s = sx_cg_save(NULL, 0, NULL, NULL, nt, names, ts, 12, keys, vals, path);
    }
    sx_tensor_free(rows);
    sx_free(names);
    sx_free(ts);
    return s;
}

/* A count in a PATH.fit entry. */
static sx_status meta_i64(const sx_cg_file *fl, const char *path, const char *key, int64_t *out)
{
    const char *v = sx_cg_file_meta(fl, key);
    char *end = NULL;
    long long x = v != NULL ? strtoll(v, &end, 10) : -1;
    if (v == NULL || end == v || *end != '\0' || x < 0)
        return sx_error(SX_E_FORMAT, "%s: bad or missing '%s'", path, key);
    *out = (int64_t)x;
    return SX_OK;
}

/* PATH.fit's monitor against this run's: a state written before monitors (no "monitor" entry)
 * watched val_<metric> in its metric's direction, when it watched anything (best_epoch > 0). */
static sx_status state_monitor(const nn_fit *f, const sx_cg_file *fl, const char *path,
                               int64_t best_epoch)
{
    const char *mon = sx_cg_file_meta(fl, "monitor"), *mode = sx_cg_file_meta(fl, "mode");
    const char *m = sx_nn_metric_name(f->h.metric), *want = mode_name(f->h.mode);
    if (mon == NULL) {
        char old[64];
        snprintf(old, sizeof old, "val_%s", m);
        const char *dir = nn_metric_higher_better(f->h.metric) ? "max" : "min";
        if (best_epoch == 0 || (strcmp(old, f->h.monitor) == 0 && strcmp(dir, want) == 0))
            return SX_OK;
        return sx_error(SX_E_STATE,
                        "%s: the fit state, written before monitors, watches %s (%s), this fit "
                        "%s (%s): resume with monitor \"%s\", or remove %s to start the fit's "
                        "state afresh",
                        path, old, dir, f->h.monitor[0] ? f->h.monitor : "nothing", want, old,
                        path);
    }
    if (mode == NULL || strcmp(mon, f->h.monitor) != 0 || strcmp(mode, want) != 0)
        return sx_error(SX_E_STATE,
                        "%s: the fit state watches %s (%s), this fit %s (%s): remove %s to start "
                        "the fit's state afresh",
                        path, mon[0] ? mon : "nothing", mode ? mode : "?",
                        f->h.monitor[0] ? f->h.monitor : "nothing", want, path);
    return SX_OK;
}

/* Whether PATH.fit is this run's (*same; another start epoch: another run's, not resumed), and
 * then that it matches: the checkpoint's epoch, the metric, the monitor. */
static sx_status state_matches(const nn_fit *f, const sx_cg_file *fl, const char *path, bool *same)
{
    const char *kind = sx_cg_file_meta(fl, "strix.kind"), *m = sx_cg_file_meta(fl, "metric");
    if (kind == NULL || strcmp(kind, "fit_state") != 0)
        return sx_error(SX_E_FORMAT, "%s: not a strix fit state", path);
    int64_t start = 0, epoch = 0, best_epoch = 0;
    if (sx_cg_file_meta(fl, "start_epoch") != NULL) /* none before runs had starts: 0 */
        SX_TRY(meta_i64(fl, path, "start_epoch", &start));
    SX_TRY(meta_i64(fl, path, "epoch", &epoch));
    SX_TRY(meta_i64(fl, path, "best_epoch", &best_epoch));
    *same = start == f->start;
    if (!*same)
        return SX_OK;
    if (epoch != f->net->epoch)
        return sx_error(SX_E_STATE,
                        "%s: the fit state is of epoch %lld, the checkpoint of epoch %lld: "
                        "remove %s to start the fit's state afresh",
                        path, (long long)epoch, (long long)f->net->epoch, path);
    if (m == NULL || strcmp(m, sx_nn_metric_name(f->h.metric)) != 0)
        return sx_error(SX_E_STATE, "%s: the fit state judges by %s, this fit by %s", path,
                        m ? m : "?", sx_nn_metric_name(f->h.metric));
    return state_monitor(f, fl, path, best_epoch);
}

/* The best weights of PATH.fit, when it has them: checked against the network, then copied;
 * restore_best needs them once an epoch was the best. */
static sx_status load_best(nn_fit *f, const sx_cg_file *fl, const char *path, int64_t best_epoch)
{
    bool have = best_epoch > 0 && sx_cg_file_tensor(fl, param_at(f->net, 0)->name) != NULL;
    if (best_epoch > 0 && !have && f->p.restore_best)
        return sx_error(SX_E_STATE,
                        "%s: the fit state keeps no best weights (written with restore_best "
                        "false): resume without restore_best, or remove %s to start afresh",
                        path, path);
    for (int j = 0; have && j < count_params(f->net); j++) {
        const nn_param *pr = param_at(f->net, j);
        const sx_tensor *t = sx_cg_file_tensor(fl, pr->name);
        if (t == NULL || t->dtype != pr->value->dtype ||
            !sx_shape_equal(t->rank, t->shape, pr->value->rank, pr->value->shape))
            return sx_error(SX_E_FORMAT, "%s: best weight %s missing or of another shape", path,
                            pr->name);
    }
    if (!have || !f->p.restore_best)
        return SX_OK;
    SX_TRY(best_alloc(f));
    for (int j = 0; j < f->n_w; j++) {
        const sx_tensor *t = sx_cg_file_tensor(fl, param_at(f->net, j)->name);
        if (f->best_w[j] == NULL)
            SX_TRY(sx_tensor_clone(t, &f->best_w[j]));
        else
            SX_TRY(sx_tensor_copy_out(t, f->best_w[j]));
    }
    return SX_OK;
}

/* Read PATH.fit into f (the checkpoint is already loaded: net->epoch is its epoch); *same false
 * (nothing read) for another run's state. */
static sx_status load_state(nn_fit *f, const sx_cg_file *fl, const char *path, bool *same)
{
    SX_TRY(state_matches(f, fl, path, same));
    if (!*same)
        return SX_OK;
    int64_t n = 0, best_epoch = 0, wait = 0;
    SX_TRY(meta_i64(fl, path, "rows", &n));
    SX_TRY(meta_i64(fl, path, "best_epoch", &best_epoch));
    SX_TRY(meta_i64(fl, path, "wait", &wait));
    const sx_tensor *rows = sx_cg_file_tensor(fl, "fit.history");
    if (rows == NULL || rows->dtype != SX_F64 || rows->rank != 2 ||
        (rows->shape[1] != HIST_COLS && rows->shape[1] != HIST_COLS_V1) || rows->shape[0] < n ||
        wait > INT32_MAX)
        return sx_error(SX_E_FORMAT, "%s: bad fit.history", path);
    const char *b = sx_cg_file_meta(fl, "best");
    char *end = NULL;
    double best = b != NULL ? strtod(b, &end) : 0;
    if (b == NULL || end == b || *end != '\0')
        return sx_error(SX_E_FORMAT, "%s: bad or missing 'best'", path);
    SX_TRY(load_best(f, fl, path, best_epoch));
    const double *d = rows->data;
    int64_t cols = rows->shape[1];
    for (int64_t i = 0; i < n; i++) {
        const double *o = d + i * cols;
        sx_nn_epoch r = {(int64_t)o[0], o[1], o[2], o[3], o[4], o[5], o[6], {0}, {0}};
        memcpy(r.val_head_loss, o + 7, sizeof r.val_head_loss);
        for (int h = 0; h < SX_NN_MAX_HEADS; h++) /* a state written before per-head metrics */
            r.val_head_metric[h] = cols == HIST_COLS ? o[7 + SX_NN_MAX_HEADS + h] : (double)NAN;
        SX_TRY(add_row(f, &r));
    }
    f->h.best = best;
    f->h.best_epoch = best_epoch;
    f->wait = (int)wait;
    const char *se = sx_cg_file_meta(fl, "stopped_early");
    f->h.stopped_early = se != NULL && strcmp(se, "1") == 0;
    return SX_OK;
}

sx_status nn_fit_resume(nn_fit *f)
{
    if (f->start > f->net->epoch)
        return sx_error(SX_E_ARG,
                        "sx_nn_fit: the run starts from epoch %lld (start_epoch, or the "
                        "network's count when the call began), past the network's %lld epochs",
                        (long long)f->start, (long long)f->net->epoch);
    const char *ck = f->p.train.checkpoint_path;
    if (ck == NULL || f->stateless || (f->net->epoch == 0 && f->net->epoch_step == 0))
        return SX_OK;
    char path[4200];
    SX_TRY(state_path(ck, path, sizeof path));
    FILE *probe = fopen(path, "rb");
    if (probe == NULL) /* a checkpoint of sx_nn_train, or the state removed: start afresh */
        return SX_OK;
    fclose(probe);
    sx_cg_file *fl = NULL;
    SX_TRY(sx_cg_file_read(path, &fl));
    bool same = false;
    sx_status s = load_state(f, fl, path, &same);
    sx_cg_file_free(fl);
    if (s == SX_OK && f->p.train.verbose > 0 && same)
        fprintf(stderr,
                "resuming the fit's state from %s: %lld epochs, best %s %.6g at epoch %lld\n", path,
                (long long)f->h.n, f->h.monitor[0] ? f->h.monitor : "(none)", f->h.best,
                (long long)f->h.best_epoch);
    else if (s == SX_OK && f->p.train.verbose > 0)
        fprintf(stderr,
                "%s is another run's state (of another start epoch): this run starts "
                "its own\n",
                path);
    return s;
}

bool nn_fit_stopped_early(const nn_fit *f)
{
    return f->h.stopped_early;
}

/* ---------------------------------------------------------------- per step, per epoch */

bool nn_fit_step(nn_fit *f, const sx_nn_step_info *info)
{
    if (f->p.on_step == NULL || !f->p.on_step(info, f->p.on_step_ctx))
        return false;
    f->h.stopped_by_callback = true;
    if (f->p.train.verbose > 0)
        fprintf(stderr, "stopped by the step callback after step %lld\n", (long long)info->step);
    return true;
}

static void print_row(const nn_fit *f, const sx_nn_epoch *row)
{
    const char *m = sx_nn_metric_name(f->h.metric);
    fprintf(stderr, "epoch %lld: loss %.6g, train %s %.6g, val loss %.6g, val %s %.6g",
            (long long)row->epoch, row->train_loss, m, row->train_metric, row->val_loss, m,
            row->val_metric);
    for (int h = 0; f->val != NULL && h < f->h.n_heads; h++)
        fprintf(stderr, "; %s: loss %.6g, %s %.6g", f->h.head_names[h], row->val_head_loss[h],
                sx_nn_metric_name(f->h.head_metric[h]), row->val_head_metric[h]);
    fputc('\n', stderr);
}

/* Early stopping after the epoch of `row`: a better monitored value keeps the epoch's
 * parameters (when restore_best); patience epochs in a row without one set *stop. */
static sx_status watch_row(nn_fit *f, const sx_nn_epoch *row, bool *stop)
{
    if (f->col.kind == COL_NONE)
        return SX_OK;
    double v = col_value(row, f->col);
    if (improved(f->h.mode, v, f->h.best, f->p.min_delta)) {
        f->h.best = v;
        f->h.best_epoch = row->epoch;
        f->wait = 0;
        if (f->p.restore_best)
            SX_TRY(copy_weights(f, false));
    } else if (f->p.patience > 0 && ++f->wait >= f->p.patience) {
        *stop = true;
        f->h.stopped_early = true;
        if (f->p.train.verbose > 0)
            fprintf(stderr, "early stop after epoch %lld: best %s %.6g at epoch %lld\n",
                    (long long)row->epoch, f->h.monitor, f->h.best, (long long)f->h.best_epoch);
    }
    return SX_OK;
}

sx_status nn_fit_epoch_end(nn_fit *f, const sx_nn_model *lender, double train_loss, double seconds,
                           double lr, bool *stop)
{
    sx_nn_epoch row = {f->net->epoch, train_loss, NAN, NAN, seconds, NAN, lr, {0}, {0}};
    for (int h = 0; h < SX_NN_MAX_HEADS; h++)
        row.val_head_loss[h] = row.val_head_metric[h] = NAN;
    sx_nn_fit_params q = f->p;
    q.metric = f->h.metric;
    if (f->val != NULL) {
        nn_judged j;
        SX_TRY(nn_judge(f->net, f->val, &q, lender, &j));
        row.val_loss = j.loss;
        row.val_metric = j.metric;
        for (int h = 0; h < f->h.n_heads; h++) {
            row.val_head_loss[h] = j.part[h];
            row.val_head_metric[h] = j.part_metric[h];
        }
    }
    if (f->p.train_metric) {
        nn_judged j;
        SX_TRY(nn_judge(f->net, f->train, &q, lender, &j));
        row.train_metric = j.metric;
    }
    SX_TRY(add_row(f, &row));
    if (f->p.train.verbose > 0 && !f->stateless)
        print_row(f, &row);
    SX_TRY(watch_row(f, &row, stop));
    if (f->p.history_path != NULL)
        SX_TRY(nn_history_append(f->p.history_path, &f->h, &row));
    return SX_OK;
}

/* The network holds the best epoch's parameters unless it has moved on: a later epoch ended,
 * or steps of one the step callback cut short. */
static bool holds_best(const nn_fit *f)
{
    return f->h.best_epoch == f->net->epoch && f->net->epoch_step == 0;
}

sx_status nn_fit_finish(nn_fit *f, bool ok, sx_nn_history *h)
{
    if (f == NULL)
        return SX_OK;
    sx_status s = SX_OK;
    if (ok && f->best_w != NULL && f->h.best_epoch > 0 && !holds_best(f)) {
        s = copy_weights(f, true);
        if (s == SX_OK && f->p.train.verbose > 0)
            fprintf(stderr, "restored the parameters of epoch %lld (%s %.6g)\n",
                    (long long)f->h.best_epoch, f->h.monitor, f->h.best);
    }
    if (h != NULL) {
        *h = f->h;
        memset(&f->h, 0, sizeof f->h);
    }
    return s;
}

/* The value reduce-on-plateau watches (loop.c): the last epoch's validation metric, or its
 * training loss without a validation source; *higher_better for an accuracy-like metric
 * (accuracy, top_k, binary_accuracy). */
void nn_fit_last_metric(const nn_fit *f, double *v, bool *higher_better)
{
    if (f->val == NULL || f->h.n == 0)
        return;
    *v = f->h.rows[f->h.n - 1].val_metric;
    *higher_better = nn_metric_higher_better(f->h.metric);
}
