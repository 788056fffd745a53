/* ---------------------------------------------------------------- group norm */

/* x and its view: layer norm over one and two trailing axes, group norm of NHWC x (2 groups),
 * instance norm (one channel per group), group norm without affine (norm only) */
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

#define SPEC_norm_stats N_NORM - 1, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_norm_stats, plain_norm)
static sx_cg_node *sample_norm_stats(GEN_ARGS)
{
    CTX;
    return sx_cg_norm_stats(g, in(c, norm_cases[v].x, V_UNIFORM, -2, 2), norm_cases[v].ax);
}
#define DT_norm_stats GEN(gen_norm, 1)

#define SPEC_norm N_NORM, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_norm, plain_norm)
static sx_cg_node *sample_norm(GEN_ARGS)
{
    CTX;
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

#define SPEC_norm_sums N_NORM - 1, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_norm_sums, plain_norm)
static sx_cg_node *sample_norm_sums(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, norm_cases[v].x, V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, norm_rows(v), V_UNIFORM, -1, 1);
    return sx_cg_norm_sums(g, x, st, in(c, norm_cases[v].x, V_UNIFORM, -1, 1), norm_cases[v].ax);
}
#define DT_norm_sums GEN(gen_norm, 1)

/* The group-norm view of a norm op's attributes (attr.ints[0..2] = lead, tail, groups). */
static sx_norm_axes norm_axes_of(const sx_cg_node *n)
{
    const sx_cg_attr *a = sx_cg_node_attr(n);
    return (sx_norm_axes){(int)a->ints[0], (int)a->ints[1], a->ints[2]};
}

static sx_status kernel_norm_stats(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_norm_stats_out(x[0], norm_axes_of(n), out);
}

static sx_status kernel_norm(KERNEL_ARGS)
{
    (void)s;
    bool affine = sx_cg_node_n_inputs(n) == 4;
    return sx_tensor_norm_out(x[0], x[1], affine ? x[2] : NULL, affine ? x[3] : NULL,
                              norm_axes_of(n), sx_cg_node_attr(n)->alpha, out);
}

static sx_status kernel_norm_sums(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_norm_sums_out(x[0], x[1], x[2], norm_axes_of(n), out);
}

/* Group norm by its definition, in double: x as (n, s, c) with c in G groups of k; group
 * q = (i, g) holds x[i, t, g k + j] for every t < s, j < k. The statistics (two passes), the
 * normalisation (with gamma, beta when there are 4 inputs) or the backward sums (by the op). */
static sx_status plain_norm(PLAIN_ARGS)
{
    (void)compare;
    sx_cg_op op = sx_cg_node_op(n);
    const sx_cg_attr *at = sx_cg_node_attr(n);
    const sx_tensor *t = x[0];
    bool affine = sx_cg_node_n_inputs(n) == 4;
    int lead = (int)at->ints[0], tail = (int)at->ints[1];
    int64_t G = at->ints[2], nb = 1, s = 1, c = 1;
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
                        double r = 1 / sqrt(ref_get(x[1], p + q) + at->alpha);
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
