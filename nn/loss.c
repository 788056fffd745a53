/* loss.c: every training loss twice, side by side: as graph nodes (the mean the compiled step
 * minimises) and in double over one example's outputs (what sx_nn_fit's evaluation reports), so
 * the two cannot drift apart. A loss is a list of parts, each a slice of the output's last axis
 * with its kind and weight: one part over the whole axis, or one per head (several outputs). */
#include "nn_impl.h"

#include <float.h>
#include <math.h>
#include <string.h>

const char *sx_nn_loss_name(sx_nn_loss l)
{
    static const char *names[] = {"cross_entropy", "mse", "l1", "hinge", "huber", "bce_logits"};
    _Static_assert(sizeof names / sizeof names[0] == SX_LOSS_COUNT, "one name per loss");
    return (unsigned)l < SX_LOSS_COUNT ? names[l] : "?";
}

sx_status nn_loss_check(const char *who, const sx_nn_train_params *p, int64_t last_axis)
{
    if ((unsigned)p->loss >= SX_LOSS_COUNT)
        return sx_error(SX_E_ARG, "%s: unknown loss %d", who, (int)p->loss);
    if (!(p->huber_delta > 0 && isfinite(p->huber_delta)) &&
        (p->loss == SX_LOSS_HUBER || p->n_heads > 0))
        return sx_error(SX_E_ARG, "%s: Huber delta %g (want finite > 0)", who, p->huber_delta);
    if (!(p->label_smoothing >= 0 && p->label_smoothing < 1))
        return sx_error(SX_E_ARG, "%s: label smoothing %g (want 0 <= e < 1)", who,
                        p->label_smoothing);
    if (p->n_heads == 0)
        return SX_OK;
    if (p->n_heads < 0 || p->n_heads > SX_NN_MAX_HEADS || p->heads == NULL)
        return sx_error(SX_E_ARG, "%s: %d heads%s (want 0..%d)", who, p->n_heads,
                        p->heads == NULL ? " and heads NULL" : "", SX_NN_MAX_HEADS);
    int64_t sum = 0;
    for (int h = 0; h < p->n_heads; h++) {
        const sx_nn_head *hd = &p->heads[h];
        if (!nn_name_ok(hd->name, hd->name != NULL ? strlen(hd->name) : 0))
            return sx_error(SX_E_ARG,
                            "%s: head %d's name '%s' (want 1 to 31 letters, digits or '_')", who, h,
                            hd->name ? hd->name : "(null)");
        for (int j = 0; j < h; j++)
            if (strcmp(p->heads[j].name, hd->name) == 0)
                return sx_error(SX_E_ARG, "%s: two heads named %s", who, hd->name);
        /* size 0: a named output's own element count (sx_nn_output) */
        if (hd->size < (last_axis > 0 ? 1 : 0) || (unsigned)hd->loss >= SX_LOSS_COUNT ||
            !(hd->weight >= 0) || !isfinite(hd->weight))
            return sx_error(SX_E_ARG, "%s: head %s: size %lld, loss %d, weight %g", who, hd->name,
                            (long long)hd->size, (int)hd->loss, hd->weight);
        sum += hd->size;
        if (sum > INT64_MAX / 2)
            return sx_error(SX_E_ARG, "%s: head sizes overflow", who);
    }
    if (last_axis > 0 && sum != last_axis)
        return sx_error(SX_E_SHAPE,
                        "%s: the heads take %lld outputs, the output's last axis has %lld", who,
                        (long long)sum, (long long)last_axis);
    return SX_OK;
}

/* The head named `name` in p (NULL: none) */
static const sx_nn_head *head_named(const sx_nn_train_params *p, const char *name)
{
    for (int h = 0; h < p->n_heads; h++)
        if (p->heads[h].name != NULL && strcmp(p->heads[h].name, name) == 0)
            return &p->heads[h];
    return NULL;
}

sx_status nn_loss_check_net(const char *who, const sx_nn_net *net, const sx_nn_train_params *p)
{
    const sx_nn_layer *last = nn_output_layer(net);
    if (net->n_outputs < 2)
        return nn_loss_check(who, p, last->shape[last->rank - 1]);
    SX_TRY(nn_loss_check(who, p, 0)); /* names, kinds, weights */
    for (int h = 0; h < p->n_heads; h++) {
        int k = 0;
        while (k < net->n_outputs && strcmp(net->output_names[k], p->heads[h].name) != 0)
            k++;
        if (k == net->n_outputs)
            return sx_error(SX_E_ARG, "%s: head %s names no output of network %s", who,
                            p->heads[h].name, net->name);
        int64_t size = sx_shape_size(net->outputs[k]->rank, net->outputs[k]->shape);
        if (p->heads[h].size != 0 && p->heads[h].size != size)
            return sx_error(SX_E_SHAPE, "%s: head %s has size %lld, output %s %lld elements", who,
                            p->heads[h].name, (long long)p->heads[h].size, p->heads[h].name,
                            (long long)size);
    }
    return SX_OK;
}

int nn_loss_parts(const sx_nn_net *net, const sx_nn_train_params *p, nn_loss_part *parts)
{
    const sx_nn_layer *last = nn_output_layer(net);
    int64_t k = last->shape[last->rank - 1];
    if (net->n_outputs >= 2) { /* one part per output, in its own shape */
        int64_t off = 0;
        for (int o = 0; o < net->n_outputs; o++) {
            const sx_nn_layer *l = net->outputs[o];
            const sx_nn_head *hd = head_named(p, net->output_names[o]);
            nn_loss_part *pt = &parts[o];
            memset(pt, 0, sizeof *pt);
            pt->loss = hd != NULL ? hd->loss : p->loss;
            pt->weight = hd != NULL ? hd->weight : 1;
            pt->off = off;
            pt->size = sx_shape_size(l->rank, l->shape);
            pt->rank = l->rank;
            memcpy(pt->shape, l->shape, (size_t)l->rank * sizeof *pt->shape);
            snprintf(pt->name, sizeof pt->name, "%s", net->output_names[o]);
            off += pt->size;
        }
        return net->n_outputs;
    }
    if (p->n_heads == 0) {
        memset(&parts[0], 0, sizeof parts[0]);
        parts[0] = (nn_loss_part){.loss = p->loss, .weight = 1, .off = 0, .size = k, .whole = true};
        if (net->n_outputs == 1)
            snprintf(parts[0].name, sizeof parts[0].name, "%s", net->output_names[0]);
        return 1;
    }
    int64_t off = 0;
    for (int h = 0; h < p->n_heads; h++) {
        parts[h] = (nn_loss_part){.loss = p->heads[h].loss,
                                  .weight = p->heads[h].weight,
                                  .off = off,
                                  .size = p->heads[h].size};
        snprintf(parts[h].name, sizeof parts[h].name, "%s", p->heads[h].name);
        off += p->heads[h].size;
    }
    return p->n_heads;
}

/* The mean loss of one kind over out (or logits) against y, both (batch, ..., k). */
static sx_cg_node *part_node(sx_cg_graph *g, const sx_nn_train_params *p, sx_nn_loss kind,
                             sx_cg_node *out, sx_cg_node *logits, sx_cg_node *y)
{
    sx_dtype dt = sx_cg_node_dtype(out);
    switch (kind) {
    case SX_LOSS_CROSS_ENTROPY: {
        int r = sx_cg_node_rank(logits);
        int64_t k = sx_cg_node_shape(logits)[r - 1], flat[2] = {-1, k};
        if (r > 2) { /* every position of the last axis is a row */
            logits = sx_cg_reshape(g, logits, 2, flat);
            y = sx_cg_reshape(g, y, 2, flat);
        }
        if (p->label_smoothing > 0)
            y = sx_cg_add(g, sx_cg_mul(g, y, sx_cg_scalar_of(g, dt, 1 - p->label_smoothing)),
                          sx_cg_scalar_of(g, dt, p->label_smoothing / (double)k));
        return sx_cg_mean(g, sx_cg_softmax_xent(g, logits, y), SX_AXES_ALL, false);
    }
    case SX_LOSS_MSE:
        return sx_cg_mean(g, sx_cg_sqr(g, sx_cg_sub(g, out, y)), SX_AXES_ALL, false);
    case SX_LOSS_L1:
        return sx_cg_mean(g, sx_cg_abs(g, sx_cg_sub(g, out, y)), SX_AXES_ALL, false);
    case SX_LOSS_HINGE: {
        /* targets t in {0, 1} (one-hot) as s = 2t - 1: mean(max(0, 1 - s * out)) */
        sx_cg_node *sgn =
            sx_cg_sub(g, sx_cg_mul(g, y, sx_cg_scalar_of(g, dt, 2)), sx_cg_scalar_of(g, dt, 1));
        return sx_cg_mean(
            g, sx_cg_relu(g, sx_cg_sub(g, sx_cg_scalar_of(g, dt, 1), sx_cg_mul(g, sgn, out))),
            SX_AXES_ALL, false);
    }
    case SX_LOSS_HUBER: {
        /* q = min(|d|, delta): q^2 / 2 + delta (|d| - q), both branches in one expression */
        sx_cg_node *a = sx_cg_abs(g, sx_cg_sub(g, out, y));
        sx_cg_node *delta = sx_cg_scalar_of(g, dt, p->huber_delta);
        sx_cg_node *q = sx_cg_min(g, a, delta);
        sx_cg_node *h = sx_cg_add(g, sx_cg_mul(g, sx_cg_scalar_of(g, dt, 0.5), sx_cg_sqr(g, q)),
                                  sx_cg_mul(g, delta, sx_cg_sub(g, a, q)));
        return sx_cg_mean(g, h, SX_AXES_ALL, false);
    }
    case SX_LOSS_BCE_LOGITS: {
        /* max(z, 0) - z y + softplus(-|z|) */
        sx_cg_node *z = logits;
        sx_cg_node *t = sx_cg_sub(g, sx_cg_relu(g, z), sx_cg_mul(g, z, y));
        sx_cg_node *h = sx_cg_add(g, t, sx_cg_softplus(g, sx_cg_neg(g, sx_cg_abs(g, z))));
        return sx_cg_mean(g, h, SX_AXES_ALL, false);
    }
    case SX_LOSS_COUNT:
        break;
    }
    sx_error(SX_E_ARG, "nn: unknown loss %d", (int)kind);
    return NULL;
}

/* x[..., off:off+size] of a node whose last axis is sliced. */
static sx_cg_node *last_slice(sx_cg_graph *g, sx_cg_node *x, int64_t off, int64_t size)
{
    sx_slice s[SX_MAX_RANK];
    int r = sx_cg_node_rank(x);
    for (int i = 0; i < r; i++)
        s[i] = SX_SLICE_ALL;
    s[r - 1] = (sx_slice){off, off + size, 1};
    return sx_cg_slice(g, x, s);
}

sx_cg_node *nn_part_node(sx_cg_graph *g, const nn_loss_part *pt, sx_cg_node *x)
{
    if (pt->whole)
        return x;
    if (pt->rank == 0) /* a head: a slice of the last axis */
        return last_slice(g, x, pt->off, pt->size);
    int64_t shape[SX_MAX_RANK];
    shape[0] = -1;
    memcpy(shape + 1, pt->shape, (size_t)pt->rank * sizeof *shape);
    return sx_cg_reshape(g, last_slice(g, x, pt->off, pt->size), pt->rank + 1, shape);
}

/* Cross-entropy of logits (batch, ..., k) against class indices y (batch, ...): the mean over
 * the positions whose index is not ignored (0 when all are). */
static sx_cg_node *sparse_loss(sx_cg_graph *g, const sx_nn_train_params *p, sx_cg_node *logits,
                               sx_cg_node *y)
{
    int r = sx_cg_node_rank(logits);
    int64_t k = sx_cg_node_shape(logits)[r - 1], flat[2] = {-1, k}, col[1] = {-1};
    sx_cg_node *z = sx_cg_reshape(g, logits, 2, flat), *t = sx_cg_reshape(g, y, 1, col);
    sx_cg_node *rows = sx_cg_sparse_xent(g, z, t, p->ignore_index, p->label_smoothing);
    sx_cg_node *n = sx_cg_sum(g, sx_cg_ne(g, t, sx_cg_scalar_like(g, t, (double)p->ignore_index)),
                              SX_AXES_ALL, false);
    n = sx_cg_max(g, n, sx_cg_scalar_like(g, t, 1));
    return sx_cg_div(g, sx_cg_sum(g, rows, SX_AXES_ALL, false), n);
}

sx_cg_node *nn_loss_node(sx_cg_graph *g, const sx_nn_train_params *p, const nn_loss_part *parts,
                         int np, sx_cg_node *out, sx_cg_node *logits, sx_cg_node *y)
{
    if (p->sparse_targets)
        return sparse_loss(g, p, logits, y);
    if (np == 1 && parts[0].whole) /* one loss over the whole output */
        return part_node(g, p, parts[0].loss, out, logits, y);
    sx_dtype dt = sx_cg_node_dtype(out);
    sx_cg_node *sum = NULL;
    for (int h = 0; h < np; h++) {
        const nn_loss_part *pt = &parts[h];
        sx_cg_node *o = nn_part_node(g, pt, out);
        sx_cg_node *z = nn_part_node(g, pt, logits);
        sx_cg_node *t = nn_part_node(g, pt, y);
        sx_cg_node *l = o && z && t ? part_node(g, p, pt->loss, o, z, t) : NULL;
        l = sx_cg_mul(g, sx_cg_scalar_of(g, dt, pt->weight), l);
        sum = sum == NULL || l == NULL ? l : sx_cg_add(g, sum, l);
        if (sum == NULL)
            return NULL;
    }
    return sum;
}

/* ---------------------------------------------------------------- the same in double */

/* Where part pt lies in one example's e outputs (last axis k): `count` segments of `seg`
 * elements, the first at `first`, one every `stride` (a head: a slice at every position of the
 * last axis; an output: its own positions, one after another). */
void nn_part_segments(const nn_loss_part *pt, int64_t e, int64_t k, int64_t *first, int64_t *seg,
                      int64_t *stride, int64_t *count)
{
    if (pt->rank == 0) {
        *first = pt->off;
        *seg = pt->size;
        *stride = k;
        *count = e / k;
        return;
    }
    *first = pt->off;
    *seg = pt->shape[pt->rank - 1];
    *stride = *seg;
    *count = pt->size / *seg;
}

double nn_loss_part_sum(const sx_nn_train_params *p, const nn_loss_part *pt, bool softmax,
                        const double *o, const double *y, int64_t e, int64_t k)
{
    double sum = 0, eps = p->label_smoothing, d0 = p->huber_delta;
    int64_t first, m, stride, count;
    nn_part_segments(pt, e, k, &first, &m, &stride, &count);
    for (int64_t c = 0; c < count; c++) { /* each position of the part's last axis */
        const double *oo = o + first + c * stride, *yy = y + first + c * stride;
        double lse = 0;
        if (pt->loss == SX_LOSS_CROSS_ENTROPY && !softmax) {
            double mx = oo[0], ex = 0;
            for (int64_t j = 1; j < m; j++)
                mx = fmax(mx, oo[j]);
            for (int64_t j = 0; j < m; j++)
                ex += exp(oo[j] - mx);
            lse = mx + log(ex);
        }
        for (int64_t j = 0; j < m; j++) {
            double d = oo[j] - yy[j], a = fabs(d), q = fmin(a, d0), z = oo[j];
            switch (pt->loss) {
            case SX_LOSS_CROSS_ENTROPY: {
                double t = (1 - eps) * yy[j] + eps / (double)m;
                sum -= t * (softmax ? log(fmax(oo[j], DBL_MIN)) : oo[j] - lse);
                break;
            }
            case SX_LOSS_MSE:
                sum += d * d;
                break;
            case SX_LOSS_L1:
                sum += a;
                break;
            case SX_LOSS_HINGE:
                sum += fmax(0, 1 - (2 * yy[j] - 1) * oo[j]);
                break;
            case SX_LOSS_HUBER:
                sum += 0.5 * q * q + d0 * (a - q);
                break;
            case SX_LOSS_BCE_LOGITS:
                sum += fmax(z, 0) - z * yy[j] + log1p(exp(-fabs(z)));
                break;
            case SX_LOSS_COUNT:
                break;
            }
        }
    }
    return sum;
}

int64_t nn_loss_part_terms(const nn_loss_part *pt, int64_t e, int64_t k)
{
    int64_t first, seg, stride, count;
    nn_part_segments(pt, e, k, &first, &seg, &stride, &count);
    return pt->loss == SX_LOSS_CROSS_ENTROPY ? count : count * seg;
}

/* The metric a part is judged by in the history (per head or output): accuracy for
 * cross-entropy and hinge, binary accuracy for binary cross-entropy, MSE for the others. */
sx_nn_metric nn_part_metric(const nn_loss_part *pt)
{
    return pt->loss == SX_LOSS_CROSS_ENTROPY || pt->loss == SX_LOSS_HINGE ? SX_METRIC_ACCURACY
           : pt->loss == SX_LOSS_BCE_LOGITS ? SX_METRIC_BINARY_ACCURACY
                                            : SX_METRIC_MSE;
}

/* The part's metric summed over one example (threshold: binary accuracy's), and its terms. */
double nn_part_metric_sum(const nn_loss_part *pt, double threshold, const double *o,
                          const double *y, int64_t e, int64_t k, int64_t *terms)
{
    int64_t first, m, stride, count;
    nn_part_segments(pt, e, k, &first, &m, &stride, &count);
    sx_nn_metric mk = nn_part_metric(pt);
    double sum = 0;
    for (int64_t c = 0; c < count; c++) {
        const double *oo = o + first + c * stride, *yy = y + first + c * stride;
        if (mk == SX_METRIC_ACCURACY) {
            int64_t bo = 0, by = 0;
            for (int64_t j = 1; j < m; j++) {
                bo = oo[j] > oo[bo] ? j : bo;
                by = yy[j] > yy[by] ? j : by;
            }
            sum += (double)(bo == by);
            continue;
        }
        for (int64_t j = 0; j < m; j++)
            sum += mk == SX_METRIC_MSE ? (oo[j] - yy[j]) * (oo[j] - yy[j])
                                       : (double)((oo[j] > threshold) == (yy[j] > 0.5));
    }
    *terms = mk == SX_METRIC_ACCURACY ? count : count * m;
    return sum;
}
