/* fit.c: what sx_nn_fit adds to the training loop of train.c: the data against the network,
 * evaluation of a source (loss and metric, computed in double from the inference graph's
 * outputs), early stopping with the best weights kept and restored, and the per-epoch history. */
#include "nn_impl.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

struct nn_fit {
    sx_nn_net *net;
    sx_nn_fit_params p;
    const sx_ds_source *val;
    sx_nn_history h;
    int64_t cap;
    double best;
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
    return p;
}

const char *sx_nn_metric_name(sx_nn_metric m)
{
    static const char *names[] = {"auto", "accuracy", "mse", "mae", "loss"};
    return (unsigned)m <= SX_METRIC_LOSS ? names[m] : "?";
}

static sx_nn_metric resolve_metric(sx_nn_metric m, const sx_ds_source *s)
{
    if (m != SX_METRIC_AUTO)
        return m;
    return sx_ds_source_spec(s)->classes > 0 ? SX_METRIC_ACCURACY : SX_METRIC_MSE;
}

/* One source against the network: x of the input's element count, y of the outputs'. */
static sx_status check_source(const char *who, const sx_nn_net *net, const sx_ds_source *s,
                              const char *what)
{
    const sx_nn_layer *in = nn_input_layer(net), *last = nn_output_layer(net);
    const sx_ds_spec *sp = sx_ds_source_spec(s);
    int64_t xn = sx_ds_spec_x_size(sp), in_n = sx_shape_size(in->rank, in->shape);
    if (xn != in_n)
        return sx_error(SX_E_SHAPE, "%s: the %s source's x has %lld elements, the input %lld", who,
                        what, (long long)xn, (long long)in_n);
    int64_t want = sp->classes > 0 ? sp->classes : sx_ds_spec_y_size(sp);
    if (last->shape[0] != want)
        return sx_error(SX_E_SHAPE, "%s: the network has %lld outputs, the %s source %lld %s", who,
                        (long long)last->shape[0], what, (long long)want,
                        sp->classes > 0 ? "classes" : "targets");
    return SX_OK;
}

sx_status nn_fit_check(const char *who, const sx_nn_net *net, const sx_nn_fit_params *p,
                       const sx_ds_source *train, const sx_ds_source *val)
{
    if (net->status != SX_OK)
        return sx_error(net->status, "%s: network %s has an error", who, net->name);
    if (net->dtype != SX_F32 && net->dtype != SX_F64)
        return sx_error(SX_E_DTYPE, "%s: network %s is %s (want f32 or f64)", who, net->name,
                        sx_dtype_name(net->dtype));
    const sx_nn_layer *in = nn_input_layer(net), *last = nn_output_layer(net);
    if (in == NULL || last == NULL || last->rank != 1)
        return sx_error(SX_E_STATE, "%s: the network needs an input and a (batch, outputs) output",
                        who);
    if ((unsigned)p->metric > SX_METRIC_LOSS || p->patience < 0 || !(p->min_delta >= 0) ||
        !isfinite(p->min_delta))
        return sx_error(SX_E_ARG, "%s: metric %d, patience %d, min_delta %g", who, (int)p->metric,
                        p->patience, p->min_delta);
    if (p->patience > 0 && val == NULL)
        return sx_error(SX_E_ARG, "%s: early stopping (patience %d) needs a validation source", who,
                        p->patience);
    if (p->metric == SX_METRIC_ACCURACY && sx_ds_source_spec(train)->classes == 0)
        return sx_error(SX_E_ARG, "%s: accuracy needs a source of classes, not targets", who);
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

/* The loss of one example (summed over its k outputs; the caller divides) from outputs o and
 * targets y. Cross-entropy reads o as probabilities after a softmax layer, else as logits. */
static double row_loss(const sx_nn_train_params *p, bool softmax, const double *o, const double *y,
                       int64_t k)
{
    double sum = 0, lse = 0;
    if (p->loss == SX_LOSS_CROSS_ENTROPY && !softmax) {
        double mx = o[0], e = 0;
        for (int64_t j = 1; j < k; j++)
            mx = fmax(mx, o[j]);
        for (int64_t j = 0; j < k; j++)
            e += exp(o[j] - mx);
        lse = mx + log(e);
    }
    for (int64_t j = 0; j < k; j++) {
        double d = o[j] - y[j], a = fabs(d), q = fmin(a, p->huber_delta);
        switch (p->loss) {
        case SX_LOSS_CROSS_ENTROPY:
            sum -= y[j] * (softmax ? log(fmax(o[j], DBL_MIN)) : o[j] - lse);
            break;
        case SX_LOSS_MSE:
            sum += d * d;
            break;
        case SX_LOSS_L1:
            sum += a;
            break;
        case SX_LOSS_HINGE:
            sum += fmax(0, 1 - (2 * y[j] - 1) * o[j]);
            break;
        case SX_LOSS_HUBER:
            sum += 0.5 * q * q + p->huber_delta * (a - q);
            break;
        }
    }
    return sum;
}

/* The metric's sum over one example (per element for MSE and MAE, 0/1 for accuracy). */
static double row_metric(sx_nn_metric m, const double *o, const double *y, int64_t k)
{
    double sum = 0;
    int64_t bo = 0, by = 0;
    for (int64_t j = 0; j < k; j++) {
        double d = o[j] - y[j];
        sum += m == SX_METRIC_MSE ? d * d : fabs(d);
        bo = o[j] > o[bo] ? j : bo;
        by = y[j] > y[by] ? j : by;
    }
    return m == SX_METRIC_ACCURACY ? (double)(bo == by) : sum;
}

/* What an evaluation works with: the loader, the inference model and the batch tensors. */
typedef struct evaluation {
    sx_ds_loader *loader;
    sx_nn_model *m;
    sx_tensor *x, *y, *out;
    double *row; /* 2k doubles: one example's outputs, then its targets */
} evaluation;

static sx_status eval_start(evaluation *e, sx_nn_net *net, const sx_ds_source *s, int64_t B,
                            const sx_ds_augment *aug, const sx_nn_model *lender)
{
    const sx_nn_layer *last = nn_output_layer(net);
    int64_t k = last->shape[0], xs[2] = {B, sx_ds_spec_x_size(sx_ds_source_spec(s))};
    int64_t ys[2] = {B, k};
    sx_ds_loader_params lp = sx_ds_loader_params_default();
    lp.batch_size = B;
    lp.shuffle = false;
    lp.augment.mean = aug->mean; /* the normalisation only: no crops, no flips */
    lp.augment.std = aug->std;
    SX_TRY(sx_ds_loader_new(s, &lp, &e->loader));
    SX_TRY(nn_compile_infer_lent(net, B, lender, &e->m));
    SX_TRY(sx_tensor_new(net->dtype, 2, xs, &e->x));
    SX_TRY(sx_tensor_new(net->dtype, 2, ys, &e->y));
    SX_TRY(sx_tensor_new(net->dtype, 2, ys, &e->out));
    e->row = sx_calloc((size_t)(2 * k), sizeof *e->row);
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

/* The predictions of one batch of `count` examples, summed into *loss and *metric. */
static sx_status eval_batch(evaluation *e, const sx_nn_fit_params *p, sx_nn_metric metric,
                            int64_t count, double *loss, double *msum)
{
    const sx_nn_model *m = e->m;
    int64_t xs[SX_MAX_RANK], k = m->classes, os[2] = {count, k};
    xs[0] = count;
    memcpy(xs + 1, m->in_shape, (size_t)m->in_rank * sizeof *xs);
    sx_tensor xv = sx_tensor_view(e->x->dtype, m->in_rank + 1, xs, e->x->data);
    sx_tensor ov = sx_tensor_view(e->out->dtype, 2, os, e->out->data);
    SX_TRY(sx_nn_model_predict(e->m, &xv, &ov));
    for (int64_t r = 0; r < count; r++) {
        for (int64_t j = 0; j < k; j++) {
            e->row[j] = sx_tensor_get(&ov, r * k + j);
            e->row[k + j] = sx_tensor_get(e->y, r * k + j);
        }
        *loss += row_loss(&p->train, m->softmax_out, e->row, e->row + k, k);
        if (metric != SX_METRIC_LOSS)
            *msum += row_metric(metric, e->row, e->row + k, k);
    }
    return SX_OK;
}

/* sx_nn_evaluate_source, with the inference graph in `lender`'s arena (NULL: its own). */
static sx_status evaluate(sx_nn_net *net, const sx_ds_source *s, const sx_nn_fit_params *p,
                          const sx_nn_model *lender, double *loss, double *metric)
{
    sx_nn_metric mk = resolve_metric(p->metric, s);
    evaluation e;
    memset(&e, 0, sizeof e);
    sx_status st = eval_start(&e, net, s, p->train.batch, &p->augment, lender);
    double lsum = 0, msum = 0;
    int64_t count = 0, n = 0, k = nn_output_layer(net)->shape[0];
    while (st == SX_OK && (st = sx_ds_loader_next(e.loader, e.x, e.y, &count)) == SX_OK &&
           count > 0) {
        st = eval_batch(&e, p, mk, count, &lsum, &msum);
        n += count;
    }
    eval_end(&e);
    if (st != SX_OK)
        return st;
    /* cross-entropy is a mean over the examples, the others over every element */
    double per_ex = (double)n, per_el = (double)n * (double)k;
    *loss = lsum / (p->train.loss == SX_LOSS_CROSS_ENTROPY ? per_ex : per_el);
    if (p->train.loss_fn != NULL) /* a user's loss: not computed here (optim20) */
        *loss = (double)NAN;
    *metric = mk == SX_METRIC_LOSS       ? *loss
              : mk == SX_METRIC_ACCURACY ? msum / per_ex
                                         : msum / per_el;
    return SX_OK;
}

sx_status sx_nn_evaluate_source(sx_nn_net *net, const sx_ds_source *s, const sx_nn_fit_params *p,
                                double *loss, double *metric)
{
    const char *who = "sx_nn_evaluate_source";
    if (net == NULL || s == NULL || loss == NULL || metric == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument", who);
    sx_nn_fit_params fp = p ? *p : sx_nn_fit_params_default();
    if (fp.train.batch < 1 || (unsigned)fp.train.loss > SX_LOSS_HUBER)
        return sx_error(SX_E_ARG, "%s: batch %d, loss %d", who, fp.train.batch, (int)fp.train.loss);
    fp.patience = 0;
    SX_TRY(nn_fit_check(who, net, &fp, s, NULL));
    return evaluate(net, s, &fp, NULL, loss, metric);
}

sx_status nn_fit_new(sx_nn_net *net, const sx_nn_fit_params *p, const sx_ds_source *val,
                     nn_fit **out)
{
    nn_fit *f = sx_calloc(1, sizeof *f);
    if (f == NULL)
        return SX_E_NOMEM;
    f->net = net;
    f->p = *p;
    f->val = val;
    f->h.metric = val != NULL                   ? resolve_metric(p->metric, val)
                  : p->metric == SX_METRIC_AUTO ? SX_METRIC_LOSS
                                                : p->metric;
    f->best = NAN;
    *out = f;
    return SX_OK;
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

/* Copy every parameter's value (weights, running statistics) into f->best_w (to_net false), or
 * back into the network (to_net true). */
static sx_status copy_weights(nn_fit *f, bool to_net)
{
    sx_nn_net *net = f->net;
    int n = 0;
    for (int i = 0; i < net->n_layers; i++)
        n += net->layers[i]->n_params;
    if (f->best_w == NULL) {
        if ((f->best_w = sx_calloc((size_t)n + 1, sizeof *f->best_w)) == NULL)
            return SX_E_NOMEM;
        f->n_w = n;
    }
    int j = 0;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++, j++) {
            sx_tensor *v = net->layers[i]->params[k].value;
            if (to_net)
                SX_TRY(sx_tensor_copy_out(f->best_w[j], v));
            else if (f->best_w[j] == NULL)
                SX_TRY(sx_tensor_clone(v, &f->best_w[j]));
            else
                SX_TRY(sx_tensor_copy_out(v, f->best_w[j]));
        }
    return SX_OK;
}

static bool improved(sx_nn_metric m, double v, double best, double min_delta)
{
    if (isnan(best))
        return !isnan(v);
    return m == SX_METRIC_ACCURACY ? v > best + min_delta : v < best - min_delta;
}

static sx_status add_row(nn_fit *f, sx_nn_epoch row)
{
    if (f->h.n == f->cap) {
        int64_t cap = f->cap ? 2 * f->cap : 16;
        sx_nn_epoch *r = sx_realloc(f->h.rows, (size_t)cap * sizeof *r);
        if (r == NULL)
            return SX_E_NOMEM;
        f->h.rows = r;
        f->cap = cap;
    }
    f->h.rows[f->h.n++] = row;
    return SX_OK;
}

sx_status nn_fit_epoch_end(nn_fit *f, const sx_nn_model *lender, double train_loss, double seconds,
                           bool *stop)
{
    sx_nn_epoch row = {f->net->epoch, train_loss, NAN, NAN, seconds};
    if (f->val != NULL)
        SX_TRY(evaluate(f->net, f->val, &f->p, lender, &row.val_loss, &row.val_metric));
    SX_TRY(add_row(f, row));
    if (f->p.train.verbose > 0)
        fprintf(stderr, "epoch %lld: loss %.6g, val loss %.6g, val %s %.6g\n", (long long)row.epoch,
                train_loss, row.val_loss, sx_nn_metric_name(f->h.metric), row.val_metric);
    if (f->val == NULL)
        return SX_OK;
    if (improved(f->h.metric, row.val_metric, f->best, f->p.min_delta)) {
        f->best = row.val_metric;
        f->h.best_epoch = row.epoch;
        f->wait = 0;
        if (f->p.restore_best)
            SX_TRY(copy_weights(f, false));
        return SX_OK;
    }
    if (f->p.patience > 0 && ++f->wait >= f->p.patience) {
        *stop = true;
        f->h.stopped_early = true;
        if (f->p.train.verbose > 0)
            fprintf(stderr, "early stop after epoch %lld: best val %s %.6g at epoch %lld\n",
                    (long long)row.epoch, sx_nn_metric_name(f->h.metric), f->best,
                    (long long)f->h.best_epoch);
    }
    return SX_OK;
}

sx_status nn_fit_finish(nn_fit *f, bool ok, sx_nn_history *h)
{
    if (f == NULL)
        return SX_OK;
    sx_status s = SX_OK;
    if (ok && f->best_w != NULL && f->h.best_epoch != f->net->epoch)
        s = copy_weights(f, true);
    if (h != NULL) {
        *h = f->h;
        memset(&f->h, 0, sizeof f->h);
    }
    return s;
}

void sx_nn_history_free(sx_nn_history *h)
{
    if (h == NULL)
        return;
    sx_free(h->rows);
    memset(h, 0, sizeof *h);
}

sx_status sx_nn_history_write_csv(const sx_nn_history *h, const char *path)
{
    if (h == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_nn_history_write_csv: NULL argument");
    FILE *fp = fopen(path, "w");
    if (fp == NULL)
        return sx_error(SX_E_IO, "%s: cannot open for writing", path);
    fprintf(fp, "epoch,train_loss,val_loss,val_%s,seconds\n", sx_nn_metric_name(h->metric));
    for (int64_t i = 0; i < h->n; i++) {
        const sx_nn_epoch *r = &h->rows[i];
        fprintf(fp, "%lld,%.17g,%.17g,%.17g,%.17g\n", (long long)r->epoch, r->train_loss,
                r->val_loss, r->val_metric, r->seconds);
    }
    bool bad = ferror(fp) != 0;
    if (fclose(fp) != 0 || bad)
        return sx_error(SX_E_IO, "%s: write failed", path);
    return SX_OK;
}

/* The value reduce-on-plateau watches (train.c): the last epoch's validation metric, or its
 * training loss without a validation source; *higher_better for accuracy. (optim20, issue 20) */
void nn_fit_last_metric(const nn_fit *f, double *v, bool *higher_better)
{
    if (f->val == NULL || f->h.n == 0)
        return;
    *v = f->h.rows[f->h.n - 1].val_metric;
    *higher_better = f->h.metric == SX_METRIC_ACCURACY;
}
