/* norm.c: the samples of the normalisation ops (cgraph/ops/norm.c): batch norm (per-channel
 * statistics) and layer, group and instance norm, each op's SPEC_, DT_, sample generator and
 * references. Part of ../opsamples.c, which includes it. */

/* ---------------------------------------------------------------- normalisation */

/* Batch norm's cases (the per-channel axes): x (..., c) a matrix, an NHWC batch, one channel;
 * the statistics an independent input with a positive variance row */
static const shp bn_cases[] = {{2, {5, 3}}, {4, {2, 3, 2, 4}}, {2, {4, 1}}};
#define N_BN 3

static shp bn_rows(int v)
{
    return (shp){2, {2, bn_cases[v].d[bn_cases[v].rank - 1]}};
}

static shp bn_channels(int v)
{
    return (shp){1, {bn_cases[v].d[bn_cases[v].rank - 1]}};
}

static sx_norm_axes bn_axes(int v)
{
    return (sx_norm_axes){0, 1, bn_cases[v].d[bn_cases[v].rank - 1]};
}

/* The group kernels' cases: x and its view: layer norm over one and two trailing axes, group
 * norm of NHWC x (2 groups), instance norm (one channel per group), group norm without affine
 * (norm only); batch norm's cases follow them (variants N_NORM - 1 + w or N_NORM + w). */
static const struct {
    shp x;
    sx_norm_axes ax;
    bool affine;
} norm_cases[] = {
    {{2, {3, 4}}, {1, 1, 1}, true},        {{3, {2, 3, 2}}, {1, 2, 1}, true},
    {{4, {2, 2, 2, 4}}, {1, 1, 2}, true},  {{3, {2, 3, 3}}, {1, 1, 3}, true},
    {{4, {2, 2, 2, 4}}, {1, 1, 2}, false},
};
#define N_NORM 5

static shp norm_rows(int v)
{
    shp x = norm_cases[v].x;
    int64_t n = 1;
    for (int i = 0; i < norm_cases[v].ax.lead; i++)
        n *= x.d[i];
    return (shp){2, {2, n * norm_cases[v].ax.groups}};
}

static shp norm_tail(int v)
{
    shp x = norm_cases[v].x, t = {norm_cases[v].ax.tail, {0}};
    for (int i = 0; i < t.rank; i++)
        t.d[i] = x.d[x.rank - t.rank + i];
    return t;
}

#define SPEC_norm_stats N_NORM - 1 + N_BN, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_norm_stats, plain_norm)
static sx_cg_node *sample_norm_stats(GEN_ARGS)
{
    CTX;
    if (v >= N_NORM - 1) {
        int w = v - (N_NORM - 1);
        return sx_cg_batch_norm_stats(g, in(c, bn_cases[w], V_UNIFORM, -2, 2));
    }
    return sx_cg_norm_stats(g, in(c, norm_cases[v].x, V_UNIFORM, -2, 2), norm_cases[v].ax);
}
#define DT_norm_stats GEN(gen_norm, 1)

/* batch norm's cases, then the second of them with a residual added (sx_cg_norm_res) */
static sx_cg_node *sample_batch_norm(sx_cg_graph *g, ctx *c, int v)
{
    int w = v == N_BN ? 1 : v;
    sx_cg_node *x = in(c, bn_cases[w], V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, bn_rows(w), V_UNIFORM, 0.3, 1.5);
    sx_cg_node *gamma = in(c, bn_channels(w), V_UNIFORM, 0.5, 1.5);
    sx_cg_node *beta = in(c, bn_channels(w), V_UNIFORM, -1, 1);
    sx_cg_node *res = v == N_BN ? in(c, bn_cases[w], V_UNIFORM, -2, 2) : NULL;
    return sx_cg_norm_res(g, x, st, gamma, beta, res, bn_axes(w), v == 1 ? 1e-5 : 0.1);
}

#define SPEC_norm N_NORM + N_BN + 1, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_norm, plain_norm)
static sx_cg_node *sample_norm(GEN_ARGS)
{
    CTX;
    if (v >= N_NORM)
        return sample_batch_norm(g, c, v - N_NORM);
    sx_cg_node *x = in(c, norm_cases[v].x, V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, norm_rows(v), V_UNIFORM, 0.3, 1.5);
    sx_cg_node *gamma = NULL, *beta = NULL;
    if (norm_cases[v].affine) {
        gamma = in(c, norm_tail(v), V_UNIFORM, 0.5, 1.5);
        beta = in(c, norm_tail(v), V_UNIFORM, -1, 1);
    }
    return sx_cg_norm(g, x, st, gamma, beta, norm_cases[v].ax, v == 1 ? 1e-5 : 0.1);
}
#define DT_norm GEN(gen_norm, 2)

/* batch norm's cases, a relu mask in the second */
#define SPEC_norm_sums N_NORM - 1 + N_BN, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_norm_sums, plain_norm)
static sx_cg_node *sample_norm_sums(GEN_ARGS)
{
    CTX;
    if (v >= N_NORM - 1) {
        int w = v - (N_NORM - 1);
        sx_cg_node *x = in(c, bn_cases[w], V_UNIFORM, -2, 2);
        sx_cg_node *st = in(c, bn_rows(w), V_UNIFORM, -1, 1);
        sx_cg_node *dy = in(c, bn_cases[w], V_UNIFORM, -1, 1);
        sx_cg_node *y = w == 1 ? in(c, bn_cases[w], V_UNIFORM, -1, 1) : NULL;
        return sx_cg_norm_sums_mask(g, x, st, dy, y, bn_axes(w));
    }
    sx_cg_node *x = in(c, norm_cases[v].x, V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, norm_rows(v), V_UNIFORM, -1, 1);
    return sx_cg_norm_sums(g, x, st, in(c, norm_cases[v].x, V_UNIFORM, -1, 1), norm_cases[v].ax);
}
#define DT_norm_sums GEN(gen_norm, 1)

/* dx through batch norm with its own statistics: every input independent (the sums too), a
 * relu mask y in the second case */
#define SPEC_norm_dx N_BN, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_norm_dx, plain_norm)
static sx_cg_node *sample_norm_dx(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, bn_cases[v], V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, bn_rows(v), V_UNIFORM, 0.3, 1.5);
    sx_cg_node *gamma = in(c, bn_channels(v), V_UNIFORM, 0.5, 1.5);
    sx_cg_node *dy = in(c, bn_cases[v], V_UNIFORM, -1, 1);
    sx_cg_node *sums = in(c, bn_rows(v), V_UNIFORM, -1, 1);
    sx_cg_node *y = v == 1 ? in(c, bn_cases[v], V_UNIFORM, -1, 1) : NULL;
    return sx_cg_norm_dx(g, x, st, gamma, dy, sums, y, bn_axes(v), v == 1 ? 1e-5 : 0.1);
}
#define DT_norm_dx GEN(gen_norm, 2)

/* The view of a norm op's attributes (attr.norm). */
static sx_norm_axes norm_axes_of(const sx_cg_node *n)
{
    const sx_cg_norm_attr *a = &sx_cg_node_attr(n)->norm;
    return (sx_norm_axes){(int)a->lead, (int)a->tail, a->groups};
}

/* the per-channel axes (batch norm) of the node's x */
static bool norm_per_channel(const sx_cg_node *n)
{
    const sx_cg_norm_attr *a = &sx_cg_node_attr(n)->norm;
    const sx_cg_node *x = sx_cg_node_input(n, 0);
    int r = sx_cg_node_rank(x);
    return a->lead == 0 && a->tail == 1 && r >= 1 && a->groups == sx_cg_node_shape(x)[r - 1];
}

static sx_status kernel_norm_stats(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_norm_stats_out(x[0], norm_axes_of(n), out);
}

/* a residual or relu: the fused batch-norm kernel; else the public entry point */
static sx_status kernel_norm(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_norm_attr *a = &sx_cg_node_attr(n)->norm;
    if (sx_cg_node_n_inputs(n) == 5 || a->relu != 0)
        return sx_tensor_batch_norm_res_ws(x[0], x[1], x[2], x[3], a->eps,
                                           sx_cg_node_n_inputs(n) == 5 ? x[4] : NULL, a->relu != 0,
                                           out, NULL, 0);
    bool affine = sx_cg_node_n_inputs(n) == 4;
    return sx_tensor_norm_out(x[0], x[1], affine ? x[2] : NULL, affine ? x[3] : NULL,
                              norm_axes_of(n), a->eps, out);
}

static sx_status kernel_norm_sums(KERNEL_ARGS)
{
    (void)s;
    if (sx_cg_node_n_inputs(n) == 4)
        return sx_tensor_batch_norm_sums_mask_ws(x[0], x[1], x[2], x[3], out, NULL, 0);
    return sx_tensor_norm_sums_out(x[0], x[1], x[2], norm_axes_of(n), out);
}

static sx_status kernel_norm_dx(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_batch_norm_dx_ws(x[0], x[1], x[2], x[3], x[4],
                                      sx_cg_node_n_inputs(n) == 6 ? x[5] : NULL,
                                      sx_cg_node_attr(n)->norm.eps, out, NULL, 0);
}

/* Batch norm over the last axis of x (m, c), in double: the statistics (two passes), the
 * normalisation, the backward sums or the one-pass dx (by the node's op). */
static sx_status plain_batch_norm(PLAIN_ARGS)
{
    (void)compare;
    sx_cg_op op = sx_cg_node_op(n);
    double eps = sx_cg_node_attr(n)->norm.eps;
    int64_t c = x[0]->shape[x[0]->rank - 1], m = x[0]->size / c;
    for (int64_t j = 0; j < c; j++) {
        double s = 0, q = 0, qm = 0;
        for (int64_t r = 0; r < m; r++)
            s += ref_get(x[0], r * c + j);
        double mean = m > 0 ? s / (double)m : 0;
        if (op == SX_OP_NORM_STATS) {
            for (int64_t r = 0; r < m; r++) {
                double d = ref_get(x[0], r * c + j) - mean;
                q += d * d;
                qm += fabs(ref_get(x[0], r * c + j)) * fabs(ref_get(x[0], r * c + j));
            }
            want[j] = mean, want[c + j] = m > 0 ? q / (double)m : 0;
            mag[j] = 1 + fabs(mean), mag[c + j] = m > 0 ? qm / (double)m : 0;
        } else if (op == SX_OP_NORM_DX) {
            /* dx = md gamma r + (x - mean) k1 + k0, k1 = -gamma r^3 S1 / m, k0 = -gamma r S0 / m */
            double r = 1 / sqrt(ref_get(x[1], c + j) + eps), gm = ref_get(x[2], j);
            double k1 = -gm * r * r * r * ref_get(x[4], c + j) / (double)m;
            double k0 = -gm * r * ref_get(x[4], j) / (double)m;
            for (int64_t row = 0; row < m; row++) {
                int64_t i = row * c + j;
                double d = ref_get(x[3], i), xm = ref_get(x[0], i) - ref_get(x[1], j);
                if (sx_cg_node_n_inputs(n) == 6 && !(ref_get(x[5], i) > 0))
                    d = 0;
                want[i] = d * gm * r + xm * k1 + k0;
                mag[i] = fabs(d * gm * r) +
                         (fabs(ref_get(x[0], i)) + fabs(ref_get(x[1], j))) * fabs(k1) + fabs(k0);
            }
        } else if (op == SX_OP_NORM) {
            double a = ref_get(x[2], j) / sqrt(ref_get(x[1], c + j) + eps);
            for (int64_t r = 0; r < m; r++) {
                double v = ref_get(x[0], r * c + j);
                double res = sx_cg_node_n_inputs(n) == 5 ? ref_get(x[4], r * c + j) : 0;
                want[r * c + j] = (v - ref_get(x[1], j)) * a + ref_get(x[3], j) + res;
                mag[r * c + j] = (fabs(v) + fabs(ref_get(x[1], j))) * fabs(a) +
                                 fabs(ref_get(x[3], j)) + fabs(res);
                if (sx_cg_node_attr(n)->norm.relu != 0 && want[r * c + j] < 0)
                    want[r * c + j] = 0;
            }
        } else {
            double s0 = 0, s1 = 0, m0 = 0, m1 = 0;
            for (int64_t r = 0; r < m; r++) {
                double g = ref_get(x[2], r * c + j),
                       d = ref_get(x[0], r * c + j) - ref_get(x[1], j);
                if (sx_cg_node_n_inputs(n) == 4 && !(ref_get(x[3], r * c + j) > 0))
                    g = 0;
                s0 += g, s1 += g * d, m0 += fabs(g), m1 += fabs(g * d);
            }
            want[j] = s0, want[c + j] = s1, mag[j] = m0, mag[c + j] = m1;
        }
    }
    return SX_OK;
}

/* Group norm by its definition, in double: x as (n, s, c) with c in G groups of k; group
 * q = (i, g) holds x[i, t, g k + j] for every t < s, j < k. The statistics (two passes), the
 * normalisation (with gamma, beta when there are 4 inputs) or the backward sums (by the op). */
static sx_status plain_group_norm(PLAIN_ARGS)
{
    (void)compare;
    sx_cg_op op = sx_cg_node_op(n);
    const sx_cg_attr *at = sx_cg_node_attr(n);
    const sx_tensor *t = x[0];
    bool affine = sx_cg_node_n_inputs(n) == 4;
    int lead = (int)at->norm.lead, tail = (int)at->norm.tail;
    int64_t G = at->norm.groups, nb = 1, s = 1, c = 1;
    for (int i = 0; i < t->rank; i++) {
        if (i < lead)
            nb *= t->shape[i];
        else if (i >= t->rank - tail)
            c *= t->shape[i];
        else
            s *= t->shape[i];
    }
    int64_t k = c / G, p = nb * G, m = s * k;
    for (int64_t i = 0; i < nb; i++)
        for (int64_t g = 0; g < G; g++) {
            int64_t q = i * G + g;
            double sum = 0, ss = 0, sa = 0, s0 = 0, s1 = 0, m0 = 0, m1 = 0;
            for (int64_t u = 0; u < s; u++)
                for (int64_t j = 0; j < k; j++)
                    sum += ref_get(t, (i * s + u) * c + g * k + j);
            double mean = sum / (double)m;
            for (int64_t u = 0; u < s; u++)
                for (int64_t j = 0; j < k; j++) {
                    int64_t e = (i * s + u) * c + g * k + j;
                    double d = ref_get(t, e) - mean;
                    ss += d * d, sa += ref_get(t, e) * ref_get(t, e);
                    if (op == SX_OP_NORM_SUMS) {
                        double gy = ref_get(x[2], e), dm = ref_get(t, e) - ref_get(x[1], q);
                        s0 += gy, s1 += gy * dm, m0 += fabs(gy), m1 += fabs(gy * dm);
                    } else if (op == SX_OP_NORM) {
                        int64_t ch = g * k + j;
                        double r = 1 / sqrt(ref_get(x[1], p + q) + at->norm.eps);
                        double v = (ref_get(t, e) - ref_get(x[1], q)) * r;
                        double vm = (fabs(ref_get(t, e)) + fabs(ref_get(x[1], q))) * r;
                        want[e] = affine ? v * ref_get(x[2], ch) + ref_get(x[3], ch) : v;
                        mag[e] =
                            affine ? vm * fabs(ref_get(x[2], ch)) + fabs(ref_get(x[3], ch)) : vm;
                    }
                }
            if (op == SX_OP_NORM_STATS) {
                want[q] = mean, want[p + q] = ss / (double)m;
                mag[q] = 1 + fabs(mean), mag[p + q] = sa / (double)m;
            } else if (op == SX_OP_NORM_SUMS) {
                want[q] = s0, want[p + q] = s1, mag[q] = m0, mag[p + q] = m1;
            }
        }
    return SX_OK;
}

/* batch norm's geometry by its own reference (the fused forms too), the rest as groups */
static sx_status plain_norm(PLAIN_ARGS)
{
    (void)compare;
    return norm_per_channel(n) ? plain_batch_norm(n, x, want, mag, compare)
                               : plain_group_norm(n, x, want, mag, compare);
}
