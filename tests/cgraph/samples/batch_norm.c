/* ---------------------------------------------------------------- batch norm */

/* x (..., c): a matrix, an NHWC batch, one channel; the statistics an independent input with a
 * positive variance row */
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

#define SPEC_batch_norm_stats                                                                      \
    N_BN, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_batch_norm_stats, plain_batch_norm)
static sx_cg_node *sample_batch_norm_stats(GEN_ARGS)
{
    CTX;
    return sx_cg_batch_norm_stats(g, in(c, bn_cases[v], V_UNIFORM, -2, 2));
}
#define DT_batch_norm_stats GEN(gen_batch_norm, 1)

/* the fourth case: the second's shape with a residual added (sx_cg_batch_norm_res) */
#define SPEC_batch_norm N_BN + 1, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_batch_norm, plain_batch_norm)
static sx_cg_node *sample_batch_norm(GEN_ARGS)
{
    CTX;
    int w = v == N_BN ? 1 : v;
    sx_cg_node *x = in(c, bn_cases[w], V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, bn_rows(w), V_UNIFORM, 0.3, 1.5);
    sx_cg_node *gamma = in(c, bn_channels(w), V_UNIFORM, 0.5, 1.5);
    sx_cg_node *beta = in(c, bn_channels(w), V_UNIFORM, -1, 1);
    if (v == N_BN)
        return sx_cg_batch_norm_res(g, x, st, gamma, beta, in(c, bn_cases[w], V_UNIFORM, -2, 2),
                                    1e-5);
    return sx_cg_batch_norm(g, x, st, gamma, beta, v == 1 ? 1e-5 : 0.1);
}
#define DT_batch_norm GEN(gen_batch_norm, 2)

#define SPEC_batch_norm_sums                                                                       \
    N_BN, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_batch_norm_sums, plain_batch_norm)
static sx_cg_node *sample_batch_norm_sums(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, bn_cases[v], V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, bn_rows(v), V_UNIFORM, -1, 1);
    sx_cg_node *dy = in(c, bn_cases[v], V_UNIFORM, -1, 1);
    if (v == 1) /* a relu mask */
        return sx_cg_batch_norm_sums_mask(g, x, st, dy, in(c, bn_cases[v], V_UNIFORM, -1, 1));
    return sx_cg_batch_norm_sums(g, x, st, dy);
}
#define DT_batch_norm_sums GEN(gen_batch_norm, 1)

/* dx through batch_norm with its own statistics: every input independent (the sums too), a
 * relu mask y in the second case */
#define SPEC_batch_norm_dx N_BN, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_batch_norm_dx, plain_batch_norm)
static sx_cg_node *sample_batch_norm_dx(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, bn_cases[v], V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, bn_rows(v), V_UNIFORM, 0.3, 1.5);
    sx_cg_node *gamma = in(c, bn_channels(v), V_UNIFORM, 0.5, 1.5);
    sx_cg_node *dy = in(c, bn_cases[v], V_UNIFORM, -1, 1);
    sx_cg_node *sums = in(c, bn_rows(v), V_UNIFORM, -1, 1);
    sx_cg_node *y = v == 1 ? in(c, bn_cases[v], V_UNIFORM, -1, 1) : NULL;
    return sx_cg_batch_norm_dx(g, x, st, gamma, dy, sums, y, v == 1 ? 1e-5 : 0.1);
}
#define DT_batch_norm_dx GEN(gen_batch_norm, 2)

static sx_status kernel_batch_norm_dx(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_batch_norm_dx_ws(x[0], x[1], x[2], x[3], x[4],
                                      sx_cg_node_n_inputs(n) == 6 ? x[5] : NULL,
                                      sx_cg_node_attr(n)->alpha, out, NULL, 0);
}

static sx_status kernel_batch_norm_stats(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_batch_norm_stats_out(x[0], out);
}

static sx_status kernel_batch_norm(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_batch_norm_res_ws(x[0], x[1], x[2], x[3], sx_cg_node_attr(n)->alpha,
                                       sx_cg_node_n_inputs(n) == 5 ? x[4] : NULL,
                                       sx_cg_node_attr(n)->ints[1] != 0, out, NULL, 0);
}

static sx_status kernel_batch_norm_sums(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_batch_norm_sums_mask_ws(
        x[0], x[1], x[2], sx_cg_node_n_inputs(n) == 4 ? x[3] : NULL, out, NULL, 0);
}

/* Batch norm over the last axis of x (m, c), in double: the statistics (two passes), the
 * normalisation, or the backward sums (by the node's op). */
static sx_status plain_batch_norm(PLAIN_ARGS)
{
    (void)compare;
    sx_cg_op op = sx_cg_node_op(n);
    double eps = sx_cg_node_attr(n)->alpha;
    int64_t c = x[0]->shape[x[0]->rank - 1], m = x[0]->size / c;
    for (int64_t j = 0; j < c; j++) {
        double s = 0, q = 0, qm = 0;
        for (int64_t r = 0; r < m; r++)
            s += ref_get(x[0], r * c + j);
        double mean = m > 0 ? s / (double)m : 0;
        if (op == SX_OP_BATCH_NORM_STATS) {
            for (int64_t r = 0; r < m; r++) {
                double d = ref_get(x[0], r * c + j) - mean;
                q += d * d;
                qm += fabs(ref_get(x[0], r * c + j)) * fabs(ref_get(x[0], r * c + j));
            }
            want[j] = mean, want[c + j] = m > 0 ? q / (double)m : 0;
            mag[j] = 1 + fabs(mean), mag[c + j] = m > 0 ? qm / (double)m : 0;
        } else if (op == SX_OP_BATCH_NORM_DX) {
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
        } else if (op == SX_OP_BATCH_NORM) {
            double a = ref_get(x[2], j) / sqrt(ref_get(x[1], c + j) + eps);
            for (int64_t r = 0; r < m; r++) {
                double v = ref_get(x[0], r * c + j);
                double res = sx_cg_node_n_inputs(n) == 5 ? ref_get(x[4], r * c + j) : 0;
                want[r * c + j] = (v - ref_get(x[1], j)) * a + ref_get(x[3], j) + res;
                mag[r * c + j] = (fabs(v) + fabs(ref_get(x[1], j))) * fabs(a) +
                                 fabs(ref_get(x[3], j)) + fabs(res);
                if (sx_cg_node_attr(n)->ints[1] != 0 && want[r * c + j] < 0)
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
