/* fit.c: what sx_nn_fit adds to the training loop of train.c: the data against the network,
 * evaluation of a source (loss per part, metric, computed in double from the inference graph's
 * outputs), predictions of a whole source, early stopping with the best weights kept and
 * restored, the per-step callback, the per-epoch history (appended to a file as it grows) and
 * the fit's own state next to a checkpoint, so that a resumed fit is the same run. */
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
};

sx_nn_fit_params sx_nn_fit_params_default(void)
{
    sx_nn_fit_params p;
    memset(&p, 0, sizeof p);
    p.train = sx_nn_train_params_default();
    p.metric = SX_METRIC_AUTO;
    p.restore_best = true;
    p.top_k = 5;
    p.train_metric = true;
    p.start_epoch = -1;
    return p;
}

static sx_nn_metric resolve_metric(const sx_nn_net *net, const sx_nn_fit_params *p,
                                   const sx_ds_source *s)
{
    if (p->metric != SX_METRIC_AUTO)
        return p->metric;
    if (p->train.n_heads > 0 || net->n_outputs >= 2)
        return SX_METRIC_LOSS;
    return sx_ds_source_spec(s)->classes > 0 ? SX_METRIC_ACCURACY : SX_METRIC_MSE;
}

static bool higher_is_better(sx_nn_metric m)
{
    return m == SX_METRIC_ACCURACY || m == SX_METRIC_TOP_K || m == SX_METRIC_BINARY_ACCURACY;
}

/* Elements of one example's output, and of its last axis. */
static int64_t out_size(const sx_nn_net *net)
{
    const sx_nn_layer *last = nn_output_layer(net);
    return sx_shape_size(last->rank, last->shape);
}

static int64_t out_last(const sx_nn_net *net)
{
    const sx_nn_layer *last = nn_output_layer(net);
    return last->shape[last->rank - 1];
}

/* One source against the network: x of the input's element count, y of the outputs'. */
static sx_status check_source(const char *who, const sx_nn_net *net, const sx_ds_source *s,
                              const char *what)
{
    const sx_nn_layer *last = nn_output_layer(net);
    const sx_ds_spec *sp = sx_ds_source_spec(s);
    int64_t xs[SX_MAX_RANK];
    int xr = nn_input_shape(net, xs);
    int64_t xn = sx_ds_spec_x_size(sp), in_n = sx_shape_size(xr, xs);
    if (xn != in_n)
        return sx_error(SX_E_SHAPE, "%s: the %s source's x has %lld elements, the input %lld", who,
                        what, (long long)xn, (long long)in_n);
    char a[160];
    sx_shape_str(last->rank, last->shape, a, sizeof a);
    if (sp->classes > 0 && net->n_outputs >= 2)
        return sx_error(SX_E_SHAPE,
                        "%s: the %s source has %lld classes, the network %d outputs: give their "
                        "targets one after another (a source of targets, classes 0)",
                        who, what, (long long)sp->classes, net->n_outputs);
    /* class indices, one per position: the output's last axis holds the classes */
    if (sp->classes > 0 && last->shape[last->rank - 1] != sp->classes)
        return sx_error(SX_E_SHAPE,
                        "%s: the %s source has %lld classes, the network outputs %s: class labels "
                        "need an output whose last axis holds the classes",
                        who, what, (long long)sp->classes, a);
    int64_t want = sp->classes > 0 ? sp->classes * sx_ds_spec_y_size(sp) : sx_ds_spec_y_size(sp);
    if (out_size(net) != want)
        return sx_error(SX_E_SHAPE, "%s: the network has %lld outputs %s, the %s source %lld %s",
                        who, (long long)out_size(net), a, what, (long long)want,
                        sp->classes > 0 ? "classes at its positions" : "targets");
    return SX_OK;
}

sx_status nn_fit_check(const char *who, const sx_nn_net *net, const sx_nn_fit_params *p,
                       const sx_ds_source *train, const sx_ds_source *val)
{
    if (net->status != SX_OK)
        return nn_net_refused(who, net);
    if (net->dtype != SX_F32 && net->dtype != SX_F64)
        return sx_error(SX_E_DTYPE, "%s: network %s is %s (want f32 or f64)", who, net->name,
                        sx_dtype_name(net->dtype));
    const sx_nn_layer *in = nn_input_layer(net), *last = nn_output_layer(net);
    if (in == NULL || last == NULL)
        return sx_error(SX_E_STATE, "%s: the network needs an input layer", who);
    if ((unsigned)p->metric > SX_METRIC_BINARY_ACCURACY || p->patience < 0 ||
        !(p->min_delta >= 0) || !isfinite(p->min_delta) || p->top_k < 1 ||
        !isfinite(p->threshold) || (unsigned)p->mode > SX_MONITOR_MAX || p->start_epoch < -1)
        return sx_error(SX_E_ARG,
                        "%s: metric %d, patience %d, min_delta %g, top_k %d, threshold %g, mode "
                        "%d, start_epoch %lld",
                        who, (int)p->metric, p->patience, p->min_delta, p->top_k, p->threshold,
                        (int)p->mode, (long long)p->start_epoch);
    if (p->patience > 0 && val == NULL && p->monitor == NULL)
        return sx_error(SX_E_ARG,
                        "%s: early stopping (patience %d) needs a validation source, or a "
                        "monitor of a training column (\"train_loss\")",
                        who, p->patience);
    if ((p->train.n_heads > 0 || net->n_outputs >= 2) && higher_is_better(p->metric))
        return sx_error(SX_E_ARG,
                        "%s: with heads or several outputs, judge by the loss, mse or mae, not %s "
                        "over every one (each one's loss and metric are in the history)",
                        who, sx_nn_metric_name(p->metric));
    if ((p->metric == SX_METRIC_ACCURACY || p->metric == SX_METRIC_TOP_K) &&
        sx_ds_source_spec(train)->classes == 0 && last->rank == 1)
        return sx_error(SX_E_ARG, "%s: %s needs a source of classes, not targets", who,
                        sx_nn_metric_name(p->metric));
    SX_TRY(nn_loss_check_net(who, net, &p->train));
    SX_TRY(check_source(who, net, train, "training"));
    if (val == NULL)
        return SX_OK;
    SX_TRY(check_source(who, net, val, "validation"));
    if (sx_ds_source_spec(val)->classes != sx_ds_source_spec(train)->classes)
        return sx_error(SX_E_SHAPE, "%s: the training source has %lld classes, validation %lld",
                        who, (long long)sx_ds_source_spec(train)->classes,
                        (long long)sx_ds_source_spec(val)->classes);
    return SX_OK;
}

/* The metric's sum over one example of e outputs o and targets y (last axis k), and the number
 * of terms it adds (positions or elements). */
static double row_metric(const sx_nn_fit_params *p, sx_nn_metric m, const double *o,
                         const double *y, int64_t e, int64_t k, int64_t *terms)
{
    double sum = 0;
    if (m == SX_METRIC_MSE || m == SX_METRIC_MAE || m == SX_METRIC_BINARY_ACCURACY) {
        for (int64_t j = 0; j < e; j++) {
            double d = o[j] - y[j];
            sum += m == SX_METRIC_MSE   ? d * d
                   : m == SX_METRIC_MAE ? fabs(d)
                                        : (double)((o[j] > p->threshold) == (y[j] > 0.5));
        }
        *terms = e;
        return sum;
    }
    for (int64_t at = 0; at < e; at += k) { /* accuracy, top-k: one class per position */
        int64_t bo = at, by = at, above = 0;
        for (int64_t j = at; j < at + k; j++) {
            bo = o[j] > o[bo] ? j : bo;
            by = y[j] > y[by] ? j : by;
        }
        for (int64_t j = at; j < at + k; j++)
            above += o[j] > o[by];
        sum += m == SX_METRIC_ACCURACY ? (double)(bo == by) : (double)(above < p->top_k);
    }
    *terms = e / k;
    return sum;
}

/* What an evaluation works with: the loader, the inference model and the batch tensors. */
typedef struct evaluation {
    sx_ds_loader *loader;
    sx_nn_model *m;
    sx_tensor *x, *y, *out; /* (B, x_size), (B, e), (B, e) */
    double *row;            /* 2e doubles: one example's outputs, then its targets */
    int64_t e, k;           /* output elements per example, and of the last axis */
} evaluation;

static sx_status eval_start(evaluation *e, sx_nn_net *net, const sx_ds_source *s, int64_t B,
                            const sx_nn_model *lender)
{
    e->e = out_size(net);
    e->k = out_last(net);
    /* y (B, positions, k): one-hot rows per position from a source of classes */
    int64_t xs[2] = {B, sx_ds_spec_x_size(sx_ds_source_spec(s))}, ys[3] = {B, e->e / e->k, e->k};
    sx_ds_loader_params lp = sx_ds_loader_params_default();
    lp.batch_size = B;
    lp.shuffle = false;
    lp.raw = true; /* the network's graph scales and normalises: no crops, no flips */
    SX_TRY(sx_ds_loader_new(s, &lp, &e->loader));
    SX_TRY(nn_compile_infer_lent(net, B, lender, &e->m));
    SX_TRY(sx_tensor_new(net->dtype, 2, xs, &e->x));
    SX_TRY(sx_tensor_new(net->dtype, 3, ys, &e->y));
    SX_TRY(sx_tensor_new(net->dtype, 3, ys, &e->out));
    e->row = sx_calloc((size_t)(2 * e->e), sizeof *e->row);
    return e->row != NULL ? SX_OK : SX_E_NOMEM;
}

static void eval_end(evaluation *e)
{
    sx_ds_loader_free(e->loader);
    sx_nn_model_free(e->m);
    sx_tensor_free(e->x);
    sx_tensor_free(e->y);
    sx_tensor_free(e->out);
    sx_free(e->row);
}

/* The next batch's predictions into e->out (rows 0..*count-1); *count 0 at the end. */
static sx_status eval_next(evaluation *e, int64_t *count)
{
    SX_TRY(sx_ds_loader_next(e->loader, e->x, e->y, count));
    if (*count == 0)
        return SX_OK;
    const sx_nn_model *m = e->m;
    const sx_nn_layer *last = nn_output_layer(m->c.net);
    int64_t xs[SX_MAX_RANK], os[SX_MAX_RANK];
    xs[0] = os[0] = *count;
    memcpy(xs + 1, m->in_shape, (size_t)m->in_rank * sizeof *xs);
    memcpy(os + 1, last->shape, (size_t)last->rank * sizeof *os);
    sx_tensor xv = sx_tensor_view(e->x->dtype, m->in_rank + 1, xs, e->x->data);
    sx_tensor ov = sx_tensor_view(e->out->dtype, last->rank + 1, os, e->out->data);
    return sx_nn_model_predict(e->m, &xv, &ov);
}

/* A source's loss (weighted parts), metric and each part's loss and metric. */
typedef struct judged {
    double loss, metric;
    double part[SX_NN_MAX_HEADS];
    double part_metric[SX_NN_MAX_HEADS];
} judged;

/* Whether part h of model m's output ends in a softmax (its outputs are probabilities). */
static bool part_softmax(const sx_nn_model *m, int h)
{
    return m->c.net->n_outputs >= 2 ? m->c.b.out_softmax[h] : m->c.softmax_out;
}

/* One example's outputs and targets (e each, one after the other in row) in the standardised
 * units the training loss sees, when the network scales its targets. */
static void standardize_row(const nn_prep *pp, double *row, int64_t e)
{
    for (int64_t j = 0; pp->target_n > 0 && j < e; j++) {
        int64_t k = j % pp->target_n;
        row[j] = (row[j] - pp->tmean[k]) / pp->tstd[k];
        row[e + j] = (row[e + j] - pp->tmean[k]) / pp->tstd[k];
    }
}

/* sx_nn_evaluate_source, with the inference graph in `lender`'s arena (NULL: its own). */
static sx_status evaluate(sx_nn_net *net, const sx_ds_source *s, const sx_nn_fit_params *p,
                          const sx_nn_model *lender, judged *out)
{
    sx_nn_metric mk = resolve_metric(net, p, s);
    evaluation e;
    memset(&e, 0, sizeof e);
    sx_status st = eval_start(&e, net, s, p->train.batch, lender);
    nn_loss_part parts[SX_NN_MAX_HEADS];
    int np = nn_loss_parts(net, &p->train, parts);
    double psum[SX_NN_MAX_HEADS] = {0}, pmsum[SX_NN_MAX_HEADS] = {0}, msum = 0;
    int64_t count = 0, n = 0, mterms = 0, pmterms[SX_NN_MAX_HEADS] = {0};
    while (st == SX_OK && (st = eval_next(&e, &count)) == SX_OK && count > 0) {
        for (int64_t r = 0; r < count; r++) {
            for (int64_t j = 0; j < e.e; j++) {
                e.row[j] = sx_tensor_get(e.out, r * e.e + j);
                e.row[e.e + j] = sx_tensor_get(e.y, r * e.e + j);
            }
            /* metrics in the targets' own units; the loss as training computes it (on
             * standardised targets when the network scales them) */
            for (int h = 0; h < np; h++) {
                int64_t t = 0;
                pmsum[h] +=
                    nn_part_metric_sum(&parts[h], p->threshold, e.row, e.row + e.e, e.e, e.k, &t);
                pmterms[h] += t;
            }
            int64_t t = 0;
            if (mk != SX_METRIC_LOSS)
                msum += row_metric(p, mk, e.row, e.row + e.e, e.e, e.k, &t);
            mterms += t;
            standardize_row(&net->prep, e.row, e.e);
            for (int h = 0; h < np; h++)
                psum[h] += nn_loss_part_sum(&p->train, &parts[h], part_softmax(e.m, h), e.row,
                                            e.row + e.e, e.e, e.k);
        }
        n += count;
    }
    eval_end(&e);
    if (st != SX_OK)
        return st;
    out->loss = 0;
    for (int h = 0; h < SX_NN_MAX_HEADS; h++)
        out->part[h] = out->part_metric[h] = NAN;
    for (int h = 0; h < np; h++) { /* each part is a mean over its own terms */
        out->part[h] = psum[h] / ((double)n * (double)nn_loss_part_terms(&parts[h], e.e, e.k));
        out->part_metric[h] = pmsum[h] / (double)pmterms[h];
        out->loss += parts[h].weight * out->part[h];
    }
    if (p->train.loss_fn != NULL) /* a user's loss: not computed here */
        out->loss = (double)NAN;
    out->metric = mk == SX_METRIC_LOSS ? out->loss : msum / (double)mterms;
    return SX_OK;
}

/* sx_nn_evaluate_source's and sx_nn_predict_source's checks; *fp the parameters to use. */
static sx_status source_call(const char *who, sx_nn_net *net, const sx_ds_source **s,
                             const sx_nn_fit_params *p, sx_nn_fit_params *fp)
{
    *fp = p ? *p : sx_nn_fit_params_default();
    if (fp->train.batch < 1)
        return sx_error(SX_E_ARG, "%s: batch %d (want >= 1)", who, fp->train.batch);
    fp->patience = 0;
    SX_TRY(nn_fit_check(who, net, fp, *s, NULL));
    return nn_prep_sources(who, net, fp, s, NULL, false);
}

sx_status sx_nn_evaluate_source(sx_nn_net *net, const sx_ds_source *s, const sx_nn_fit_params *p,
                                double *loss, double *metric)
{
    const char *who = "sx_nn_evaluate_source";
    if (net == NULL || s == NULL || loss == NULL || metric == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument", who);
    sx_nn_fit_params fp;
    SX_TRY(source_call(who, net, &s, p, &fp));
    judged j;
    SX_TRY(evaluate(net, s, &fp, NULL, &j));
    *loss = j.loss;
    *metric = j.metric;
    return SX_OK;
}

/* Probabilities in place over one example's e outputs: softmax over each position's part, or
 * the sigmoid of every element, where the part's loss defines them. */
static void to_probabilities(const nn_loss_part *parts, int np, const sx_nn_model *m, double *o,
                             int64_t e, int64_t k)
{
    for (int h = 0; h < np; h++) {
        const nn_loss_part *pt = &parts[h];
        int64_t first, seg, stride, count;
        nn_part_segments(pt, e, k, &first, &seg, &stride, &count);
        for (int64_t c = 0; c < count; c++) {
            double *v = o + first + c * stride;
            if (pt->loss == SX_LOSS_BCE_LOGITS) {
                for (int64_t j = 0; j < seg; j++)
                    v[j] = v[j] >= 0 ? 1 / (1 + exp(-v[j])) : exp(v[j]) / (1 + exp(v[j]));
            } else if (pt->loss == SX_LOSS_CROSS_ENTROPY && !part_softmax(m, h)) {
                double mx = v[0], sum = 0;
                for (int64_t j = 1; j < seg; j++)
                    mx = fmax(mx, v[j]);
                for (int64_t j = 0; j < seg; j++)
                    sum += (v[j] = exp(v[j] - mx));
                for (int64_t j = 0; j < seg; j++)
                    v[j] /= sum;
            }
        }
    }
}

sx_status sx_nn_predict_source(sx_nn_net *net, const sx_ds_source *s, const sx_nn_fit_params *p,
                               sx_tensor **out)
{
    const char *who = "sx_nn_predict_source";
    if (out != NULL)
        *out = NULL;
    if (net == NULL || s == NULL || out == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument", who);
    sx_nn_fit_params fp;
    SX_TRY(source_call(who, net, &s, p, &fp));
    const sx_nn_layer *last = nn_output_layer(net);
    int64_t shape[SX_MAX_RANK], n = sx_ds_source_count(s);
    shape[0] = n;
    memcpy(shape + 1, last->shape, (size_t)last->rank * sizeof *shape);
    nn_loss_part parts[SX_NN_MAX_HEADS];
    int np = nn_loss_parts(net, &fp.train, parts);
    evaluation e;
    memset(&e, 0, sizeof e);
    sx_tensor *res = NULL;
    sx_status st = sx_tensor_new(net->dtype, last->rank + 1, shape, &res);
    if (st == SX_OK)
        st = eval_start(&e, net, s, fp.train.batch, NULL);
    int64_t count = 0, done = 0;
    while (st == SX_OK && (st = eval_next(&e, &count)) == SX_OK && count > 0) {
        for (int64_t r = 0; r < count; r++, done++) {
            for (int64_t j = 0; j < e.e; j++)
                e.row[j] = sx_tensor_get(e.out, r * e.e + j);
            to_probabilities(parts, np, e.m, e.row, e.e, e.k);
            for (int64_t j = 0; j < e.e; j++)
                sx_tensor_set(res, done * e.e + j, e.row[j]);
        }
    }
    eval_end(&e);
    if (st != SX_OK) {
        sx_tensor_free(res);
        return st;
    }
    *out = res;
    return SX_OK;
}

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
                  ? higher_is_better(f->h.metric)
                  : c.kind == COL_HEAD_METRIC && higher_is_better(f->h.head_metric[c.head]);
    f->h.mode = c.kind == COL_NONE           ? SX_MONITOR_AUTO
                : p->mode != SX_MONITOR_AUTO ? p->mode
                : up                         ? SX_MONITOR_MAX
                                             : SX_MONITOR_MIN;
    f->col = c;
    f->h.best = (double)NAN;
    return SX_OK;
}

sx_status nn_fit_new(sx_nn_net *net, const sx_nn_fit_params *p, const sx_ds_source *train,
                     const sx_ds_source *val, nn_fit **out)
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
    f->h.metric = val != NULL                   ? resolve_metric(net, p, val)
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
    if (ck == NULL)
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
        const char *dir = higher_is_better(f->h.metric) ? "max" : "min";
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
    if (ck == NULL || (f->net->epoch == 0 && f->net->epoch_step == 0))
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
        judged j;
        SX_TRY(evaluate(f->net, f->val, &q, lender, &j));
        row.val_loss = j.loss;
        row.val_metric = j.metric;
        for (int h = 0; h < f->h.n_heads; h++) {
            row.val_head_loss[h] = j.part[h];
            row.val_head_metric[h] = j.part_metric[h];
        }
    }
    if (f->p.train_metric) {
        judged j;
        SX_TRY(evaluate(f->net, f->train, &q, lender, &j));
        row.train_metric = j.metric;
    }
    SX_TRY(add_row(f, &row));
    if (f->p.train.verbose > 0)
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

/* ---------------------------------------------------------------- checkpoints as calls */

sx_status sx_nn_checkpoint_save(sx_nn_net *net, const sx_nn_train_params *p, const char *path)
{
    if (net == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_nn_checkpoint_save: NULL argument");
    sx_nn_train_params tp = p ? *p : sx_nn_train_params_default();
    return nn_checkpoint_save(net, &tp, path);
}

sx_status sx_nn_checkpoint_load(sx_nn_net *net, const sx_nn_train_params *p, const char *path)
{
    if (net == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_nn_checkpoint_load: NULL argument");
    sx_nn_train_params tp = p ? *p : sx_nn_train_params_default();
    SX_TRY(nn_check_train_kind(net, tp.optim.kind, "sx_nn_checkpoint_load"));
    return nn_checkpoint_load(net, &tp, path);
}

int64_t sx_nn_net_steps(const sx_nn_net *net)
{
    return net != NULL ? net->step : -1;
}

int64_t sx_nn_net_epochs(const sx_nn_net *net)
{
    return net != NULL ? net->epoch : -1;
}

int64_t sx_nn_net_epoch_steps(const sx_nn_net *net)
{
    return net != NULL ? net->epoch_step : -1;
}

/* The value reduce-on-plateau watches (train.c): the last epoch's validation metric, or its
 * training loss without a validation source; *higher_better for an accuracy-like metric
 * (accuracy, top_k, binary_accuracy). */
void nn_fit_last_metric(const nn_fit *f, double *v, bool *higher_better)
{
    if (f->val == NULL || f->h.n == 0)
        return;
    *v = f->h.rows[f->h.n - 1].val_metric;
    *higher_better = higher_is_better(f->h.metric);
}
