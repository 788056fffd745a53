/* The group-norm kernels (tensor/norm.c) against plain reference loops in double, in
 * f32 and f64: statistics, normalisation (with and without affine, in place), backward sums, for
 * layer-, group- and instance-norm views; the same bits on any thread count (shapes large
 * enough to run in parallel); the errors, which leave the outputs unchanged. */
#include "testutil.h"

#include <math.h>
#include <string.h>

static double at(const sx_tensor *t, int64_t i)
{
    return sx_tensor_get(t, i);
}

/* x's view: n, s, c and k = c / groups. */
static void view(const sx_tensor *x, sx_norm_axes ax, int64_t *n, int64_t *s, int64_t *c)
{
    *n = *s = *c = 1;
    for (int i = 0; i < x->rank; i++) {
        if (i < ax.lead)
            *n *= x->shape[i];
        else if (i >= x->rank - ax.tail)
            *c *= x->shape[i];
        else
            *s *= x->shape[i];
    }
}

/* element (b, t, g, j) of x viewed (n, s, G, k) */
#define IDX(b, t, g, j) (((b)*s + (t)) * c + (g)*k + (j))

static void check(sx_dtype dt, int rank, const int64_t *shape, sx_norm_axes ax, bool affine)
{
    sx_rng rng;
    sx_rng_seed(&rng, 17 + (uint64_t)rank + (uint64_t)ax.groups);
    double rtol = dt == SX_F32 ? 2e-5 : 1e-12, eps = 1e-3;
    sx_tensor *x = tu_rand(&rng, dt, rank, shape, 1, 4),
              *dy = tu_rand(&rng, dt, rank, shape, -1, 1);
    int64_t n, s, c;
    view(x, ax, &n, &s, &c);
    int64_t k = c / ax.groups, p = n * ax.groups, rows[2] = {2, p};
    const int64_t *tail = shape + rank - ax.tail;
    sx_tensor *st = tu_zeros(dt, 2, rows), *sums = tu_zeros(dt, 2, rows);
    sx_tensor *y = tu_zeros(dt, rank, shape), *yi = NULL;
    sx_tensor *gamma = affine ? tu_rand(&rng, dt, ax.tail, tail, 0.5, 1.5) : NULL;
    sx_tensor *beta = affine ? tu_rand(&rng, dt, ax.tail, tail, -1, 1) : NULL;
    cr_assert_eq(sx_tensor_norm_stats_out(x, ax, st), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_norm_out(x, st, gamma, beta, ax, eps, y), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_norm_sums_out(x, st, dy, ax, sums), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_clone(x, &yi), SX_OK);
    cr_assert_eq(sx_tensor_norm_out(yi, st, gamma, beta, ax, eps, yi), SX_OK, "in place: %s",
                 sx_last_error());
    for (int64_t b = 0; b < n; b++)
        for (int64_t g = 0; g < ax.groups; g++) {
            int64_t q = b * ax.groups + g;
            double sum = 0, ss = 0, s0 = 0, s1 = 0, m = (double)(s * k);
            for (int64_t t = 0; t < s; t++)
                for (int64_t j = 0; j < k; j++)
                    sum += at(x, IDX(b, t, g, j));
            double mean = sum / m;
            for (int64_t t = 0; t < s; t++)
                for (int64_t j = 0; j < k; j++) {
                    double d = at(x, IDX(b, t, g, j)) - mean;
                    ss += d * d;
                }
            double var = ss / m;
            cr_assert(fabs(at(st, q) - mean) <= rtol * (1 + fabs(mean)),
                      "mean[%lld]: %.17g vs %.17g", (long long)q, at(st, q), mean);
            cr_assert(fabs(at(st, p + q) - var) <= rtol * (1 + var), "var[%lld]: %.17g vs %.17g",
                      (long long)q, at(st, p + q), var);
            double mq = at(st, q), r = 1 / sqrt(at(st, p + q) + eps);
            for (int64_t t = 0; t < s; t++)
                for (int64_t j = 0; j < k; j++) {
                    int64_t e = IDX(b, t, g, j), ch = g * k + j;
                    double v = (at(x, e) - mq) * r;
                    if (affine)
                        v = v * at(gamma, ch) + at(beta, ch);
                    cr_assert(fabs(at(y, e) - v) <= rtol * (1 + fabs(v)), "y[%lld]: %.17g vs %.17g",
                              (long long)e, at(y, e), v);
                    cr_assert(at(yi, e) == at(y, e), "in place y[%lld]", (long long)e);
                    s0 += at(dy, e);
                    s1 += at(dy, e) * (at(x, e) - mq);
                }
            cr_assert(fabs(at(sums, q) - s0) <= rtol * (1 + fabs(s0)) * m, "S0[%lld]",
                      (long long)q);
            cr_assert(fabs(at(sums, p + q) - s1) <= rtol * (1 + fabs(s1)) * m, "S1[%lld]",
                      (long long)q);
        }
    sx_tensor *all[7] = {x, dy, st, sums, y, yi, gamma};
    for (int i = 0; i < 7; i++)
        sx_tensor_free(all[i]);
    sx_tensor_free(beta);
}

static void check_all(sx_dtype dt)
{
    check(dt, 2, (int64_t[]){5, 7}, (sx_norm_axes){1, 1, 1}, true);         /* layer norm */
    check(dt, 3, (int64_t[]){3, 4, 5}, (sx_norm_axes){1, 2, 1}, false);     /* over 2 axes */
    check(dt, 4, (int64_t[]){2, 3, 4, 6}, (sx_norm_axes){1, 1, 3}, true);   /* group norm */
    check(dt, 4, (int64_t[]){2, 3, 4, 6}, (sx_norm_axes){1, 1, 6}, false);  /* instance */
    check(dt, 3, (int64_t[]){4, 3, 2}, (sx_norm_axes){0, 1, 2}, true);      /* batch-norm-like */
    check(dt, 4, (int64_t[]){2, 64, 32, 8}, (sx_norm_axes){1, 1, 2}, true); /* parallel */
    check(dt, 3, (int64_t[]){3000, 2, 16}, (sx_norm_axes){1, 2, 1}, true);  /* many groups */
}

Test(tensor_norm, f32_matches_reference)
{
    check_all(SX_F32);
}

Test(tensor_norm, f64_matches_reference)
{
    check_all(SX_F64);
}

/* the same bits with 1, 2 and 3 threads, for a few groups of many elements and many groups of
 * few */
Test(tensor_norm, same_bits_on_any_thread_count)
{
    static const struct {
        int64_t shape[4];
        sx_norm_axes ax;
    } cases[2] = {{{4, 48, 40, 16}, {1, 1, 4}}, {{4096, 3, 2, 8}, {1, 3, 1}}};
    for (int ci = 0; ci < 2; ci++) {
        sx_rng rng;
        sx_rng_seed(&rng, 5);
        const int64_t *shape = cases[ci].shape;
        sx_norm_axes ax = cases[ci].ax;
        sx_tensor *x = tu_rand(&rng, SX_F32, 4, shape, -1, 2),
                  *dy = tu_rand(&rng, SX_F32, 4, shape, -1, 1);
        int64_t n = shape[0] * ax.groups, rows[2] = {2, n};
        const int64_t *tail = shape + 4 - ax.tail;
        sx_tensor *g = tu_rand(&rng, SX_F32, ax.tail, tail, 0.5, 1.5),
                  *b = tu_rand(&rng, SX_F32, ax.tail, tail, -1, 1);
        sx_tensor *st[3], *sm[3], *y[3];
        int before = sx_threads_get();
        for (int t = 0; t < 3; t++) {
            cr_assert_eq(sx_threads_set(t + 1), SX_OK);
            st[t] = tu_zeros(SX_F32, 2, rows), sm[t] = tu_zeros(SX_F32, 2, rows);
            y[t] = tu_zeros(SX_F32, 4, shape);
            cr_assert_eq(sx_tensor_norm_stats_out(x, ax, st[t]), SX_OK);
            cr_assert_eq(sx_tensor_norm_out(x, st[t], g, b, ax, 1e-5, y[t]), SX_OK);
            cr_assert_eq(sx_tensor_norm_sums_out(x, st[t], dy, ax, sm[t]), SX_OK);
        }
        cr_assert_eq(sx_threads_set(before), SX_OK);
        for (int t = 1; t < 3; t++) {
            cr_assert(memcmp(st[t]->data, st[0]->data, 2 * (size_t)n * 4) == 0, "stats, %d threads",
                      t + 1);
            cr_assert(memcmp(sm[t]->data, sm[0]->data, 2 * (size_t)n * 4) == 0, "sums, %d threads",
                      t + 1);
            cr_assert(memcmp(y[t]->data, y[0]->data, (size_t)x->size * 4) == 0, "y, %d threads",
                      t + 1);
        }
        for (int t = 0; t < 3; t++) {
            sx_tensor_free(st[t]);
            sx_tensor_free(sm[t]);
            sx_tensor_free(y[t]);
        }
        sx_tensor_free(x);
        sx_tensor_free(dy);
        sx_tensor_free(g);
        sx_tensor_free(b);
    }
}

/* Each error names the function and the values, and leaves the output as it was. */
Test(tensor_norm, errors_name_the_function_and_values)
{
    int64_t xs[3] = {2, 3, 6}, rows[2] = {2, 6}, c6 = 6;
    sx_tensor *x = tu_zeros(SX_F64, 3, xs), *st = tu_zeros(SX_F64, 2, rows);
    sx_tensor *y = tu_zeros(SX_F64, 3, xs), *g = tu_zeros(SX_F64, 1, &c6);
    sx_tensor *x32 = tu_zeros(SX_F32, 3, xs), *bad = tu_zeros(SX_F64, 2, (int64_t[]){2, 5});
    cr_assert_eq(sx_tensor_fill(st, 7), SX_OK);
    cr_assert_eq(sx_tensor_fill(y, 7), SX_OK);
    sx_norm_axes gn = {1, 1, 3};
    struct {
        sx_status got, want;
        const char *text;
    } cases[] = {
        {sx_tensor_norm_stats_out(x, (sx_norm_axes){2, 2, 1}, st), SX_E_AXIS,
         "sx_tensor_norm_stats_out: lead 2, tail 2 axes of x (2,3,6)"},
        {sx_tensor_norm_stats_out(x, (sx_norm_axes){1, 1, 4}, st), SX_E_ARG,
         "4 groups do not divide the 6 channels"},
        {sx_tensor_norm_stats_out(x, gn, bad), SX_E_SHAPE, "stats has shape (2,5), want (2,6)"},
        {sx_tensor_norm_stats_out(x32, gn, st), SX_E_DTYPE, ""},
        {sx_tensor_norm_out(x, st, g, NULL, gn, 1e-5, y), SX_E_ARG, "gamma given but beta NULL"},
        {sx_tensor_norm_out(x, st, bad, bad, gn, 1e-5, y), SX_E_SHAPE,
         "gamma has shape (2,5), want x's last 1 axes (6)"},
        {sx_tensor_norm_out(x, st, NULL, NULL, gn, -1, y), SX_E_ARG, "eps -1"},
        {sx_tensor_norm_out(x, st, NULL, NULL, gn, 1e-5, st), SX_E_SHAPE, ""},
        {sx_tensor_norm_sums_out(x, st, bad, gn, st), SX_E_SHAPE, "dy has shape (2,5), x (2,3,6)"},
        {sx_tensor_norm_sums_out(x, st, x, gn, st), SX_E_ARG, "stats"},
        {sx_tensor_norm_stats_out(NULL, gn, st), SX_E_ARG, "x"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(cases[i].got, cases[i].want, "case %zu: %d", i, (int)cases[i].got);
        (void)cases[i].text;
    }
    /* the last message, and nothing written */
    cr_assert_not_null(strstr(sx_last_error(), "sx_tensor_norm_stats_out"), "%s", sx_last_error());
    for (int64_t i = 0; i < st->size; i++)
        cr_assert_eq(SX_F64P(st)[i], 7.0);
    for (int64_t i = 0; i < y->size; i++)
        cr_assert_eq(SX_F64P(y)[i], 7.0);
    /* each message in turn */
    cr_assert_eq(sx_tensor_norm_stats_out(x, (sx_norm_axes){2, 2, 1}, st), SX_E_AXIS);
    cr_assert_not_null(strstr(sx_last_error(), cases[0].text), "%s", sx_last_error());
    for (size_t i = 1; i < 3; i++) {
        sx_status s = i == 1 ? sx_tensor_norm_stats_out(x, (sx_norm_axes){1, 1, 4}, st)
                             : sx_tensor_norm_stats_out(x, gn, bad);
        cr_assert_eq(s, cases[i].want);
        cr_assert_not_null(strstr(sx_last_error(), cases[i].text), "%s", sx_last_error());
    }
    cr_assert_eq(sx_tensor_norm_out(x, st, bad, bad, gn, 1e-5, y), SX_E_SHAPE);
    cr_assert_not_null(strstr(sx_last_error(), cases[5].text), "%s", sx_last_error());
    cr_assert_eq(sx_tensor_norm_sums_out(x, st, bad, gn, st), SX_E_SHAPE);
    cr_assert_not_null(strstr(sx_last_error(), cases[8].text), "%s", sx_last_error());
    sx_tensor *all[6] = {x, st, y, g, x32, bad};
    for (int i = 0; i < 6; i++)
        sx_tensor_free(all[i]);
}
