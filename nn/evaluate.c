/* evaluate.c: a network judged on data through an inference model: the data against the
 * network, a source's loss per part and metric (computed in double from the inference graph's
 * outputs), the accuracy on an image set, and the predictions of a whole source. */
#include "nn_impl.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (last == NULL || in == NULL || last->rank != 1 || net->n_outputs >= 2)
        return sx_error(SX_E_STATE, "sx_nn_evaluate: the network has no (batch, classes) output");
    if (last->shape[0] != set->classes)
        return sx_error(SX_E_SHAPE,
                        "sx_nn_evaluate: the network has %lld outputs, the data %lld "
                        "classes",
                        (long long)last->shape[0], (long long)set->classes);
    int64_t is[3] = {set->h, set->w, set->c};
    if (!sx_shape_equal(in->rank, in->shape, 3, is)) {
        char a[160], c[160];
        return sx_error(SX_E_SHAPE, "sx_nn_evaluate: images %s, the network's input %s",
                        sx_shape_str(3, is, a, sizeof a),
                        sx_shape_str(in->rank, in->shape, c, sizeof c));
    }
    sx_nn_model *m = NULL;
    sx_ds_source *src = NULL;
    sx_ds_loader *b = NULL;
    sx_tensor *x = NULL, *out = NULL;
    int64_t xs[2] = {batch, set->h * set->w * set->c}, os[2] = {batch, last->shape[0]};
    sx_ds_loader_params lp = sx_ds_loader_params_default();
    lp.batch_size = batch;
    lp.shuffle = false;
    lp.raw = true; /* raw bytes: the graph scales them */
    sx_status s = nn_compile_infer_lent(net, batch, lender, &m);
    if (s == SX_OK)
        s = sx_ds_source_images(set, &src);
    if (s == SX_OK)
        s = sx_ds_loader_new(src, &lp, &b);
    if (s == SX_OK)
        s = sx_tensor_new(net->dtype, 2, xs, &x);
    if (s == SX_OK)
        s = sx_tensor_new(net->dtype, 2, os, &out);
    int64_t correct = 0, seen = 0, count = 0;
    int64_t ys[1] = {batch};
    sx_tensor *yi = NULL;
    if (s == SX_OK)
        s = sx_tensor_new(net->dtype, 1, ys, &yi);
    while (s == SX_OK && (s = sx_ds_loader_next(b, x, yi, &count)) == SX_OK && count > 0) {
        int64_t vs[SX_MAX_RANK] = {count}; /* the rows as (count, input shape) */
        memcpy(vs + 1, in->shape, (size_t)in->rank * sizeof *vs);
        sx_tensor xv = sx_tensor_view(x->dtype, in->rank + 1, vs, x->data);
        sx_tensor ov = nn_rows_at(out, 0, count);
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
    sx_tensor_free(yi);
    sx_tensor_free(x);
    sx_tensor_free(out);
    sx_ds_loader_free(b);
    sx_ds_source_free(src);
    sx_nn_model_free(m);
    return s;
}

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

sx_nn_metric nn_metric_resolve(const sx_nn_net *net, const sx_nn_fit_params *p,
                               const sx_ds_source *s)
{
    if (p->metric != SX_METRIC_AUTO)
        return p->metric;
    if (p->train.n_heads > 0 || net->n_outputs >= 2)
        return SX_METRIC_LOSS;
    return sx_ds_source_spec(s)->classes > 0 ? SX_METRIC_ACCURACY : SX_METRIC_MSE;
}

bool nn_metric_higher_better(sx_nn_metric m)
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
    if ((p->train.n_heads > 0 || net->n_outputs >= 2) && nn_metric_higher_better(p->metric))
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
sx_status nn_judge(sx_nn_net *net, const sx_ds_source *s, const sx_nn_fit_params *p,
                   const sx_nn_model *lender, nn_judged *out)
{
    sx_nn_metric mk = nn_metric_resolve(net, p, s);
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
    nn_judged j;
    SX_TRY(nn_judge(net, s, &fp, NULL, &j));
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
