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

static bool head_name_ok(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (n < 1 || n > 31)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
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
        if (!head_name_ok(hd->name))
            return sx_error(SX_E_ARG,
                            "%s: head %d's name '%s' (want 1 to 31 letters, digits or '_')", who, h,
                            hd->name ? hd->name : "(null)");
        for (int j = 0; j < h; j++)
            if (strcmp(p->heads[j].name, hd->name) == 0)
                return sx_error(SX_E_ARG, "%s: two heads named %s", who, hd->name);
        if (hd->size < 1 || (unsigned)hd->loss >= SX_LOSS_COUNT || !(hd->weight >= 0) ||
            !isfinite(hd->weight))
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

int nn_loss_parts(const sx_nn_train_params *p, int64_t k, nn_loss_part *parts)
{
    if (p->n_heads == 0) {
        parts[0] = (nn_loss_part){p->loss, 1, 0, k};
        return 1;
    }
    int64_t off = 0;
    for (int h = 0; h < p->n_heads; h++) {
        parts[h] = (nn_loss_part){p->heads[h].loss, p->heads[h].weight, off, p->heads[h].size};
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

sx_cg_node *nn_loss_node(sx_cg_graph *g, const sx_nn_train_params *p, sx_cg_node *out,
                         sx_cg_node *logits, sx_cg_node *y)
{
    if (p->n_heads == 0)
        return part_node(g, p, p->loss, out, logits, y);
    sx_dtype dt = sx_cg_node_dtype(out);
    int64_t k = sx_cg_node_shape(out)[sx_cg_node_rank(out) - 1];
    nn_loss_part parts[SX_NN_MAX_HEADS];
    int np = nn_loss_parts(p, k, parts);
    sx_cg_node *sum = NULL;
    for (int h = 0; h < np; h++) {
        const nn_loss_part *pt = &parts[h];
        sx_cg_node *o = last_slice(g, out, pt->off, pt->size);
        sx_cg_node *z = last_slice(g, logits, pt->off, pt->size);
        sx_cg_node *t = last_slice(g, y, pt->off, pt->size);
        sx_cg_node *l =
            sx_cg_mul(g, sx_cg_scalar_of(g, dt, pt->weight), part_node(g, p, pt->loss, o, z, t));
        sum = sum == NULL || l == NULL ? l : sx_cg_add(g, sum, l);
        if (sum == NULL)
            return NULL;
    }
    return sum;
}

/* ---------------------------------------------------------------- the same in double */

double nn_loss_part_sum(const sx_nn_train_params *p, const nn_loss_part *pt, bool softmax,
                        const double *o, const double *y, int64_t e, int64_t k)
{
    double sum = 0, eps = p->label_smoothing, d0 = p->huber_delta;
    for (int64_t at = 0; at < e; at += k) { /* each position of the last axis */
        const double *oo = o + at + pt->off, *yy = y + at + pt->off;
        int64_t m = pt->size;
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
    int64_t positions = e / k;
    return pt->loss == SX_LOSS_CROSS_ENTROPY ? positions : positions * pt->size;
}
