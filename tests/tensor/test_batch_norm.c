/* The fused batch-norm kernels (tensor/batch_norm.c) against plain reference loops in double, in
 * f32 and f64: statistics, normalisation (and with relu in the pass: the bits of the relu kernel
 * after it), backward sums; the same bits on any thread count; the errors. */
#include "sx_tensor_kernels.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

static double at(const sx_tensor *t, int64_t i)
{
    return t->dtype == SX_F32 ? (double)SX_F32P(t)[i] : SX_F64P(t)[i];
}

/* Reference: two passes in double over x (m, c). */
static void ref_stats(const sx_tensor *x, double *mean, double *var)
{
    int64_t c = x->shape[x->rank - 1], m = x->size / c;
    for (int64_t j = 0; j < c; j++) {
        double s = 0, q = 0;
        for (int64_t r = 0; r < m; r++)
            s += at(x, r * c + j);
        mean[j] = m > 0 ? s / (double)m : 0;
        for (int64_t r = 0; r < m; r++)
            q += (at(x, r * c + j) - mean[j]) * (at(x, r * c + j) - mean[j]);
        var[j] = m > 0 ? q / (double)m : 0;
    }
}

static void close_to(double got, double want, double rtol, double atol, const char *what, int64_t i)
{
    cr_assert(fabs(got - want) <= atol + rtol * fabs(want), "%s[%lld]: %.17g, want %.17g", what,
              (long long)i, got, want);
}

static sx_tensor *vec(sx_dtype dt, int64_t n)
{
    return tu_zeros(dt, 1, &n);
}

static sx_tensor *two_rows(sx_dtype dt, int64_t c)
{
    int64_t s[2] = {2, c};
    return tu_zeros(dt, 2, s);
}

/* stats, normalise and sums of one shape against the references */
static void check_shape(sx_dtype dt, int rank, const int64_t *shape, double offset)
{
    sx_rng rng;
    sx_rng_seed(&rng, 11 + (uint64_t)rank);
    double rtol = dt == SX_F32 ? 2e-5 : 1e-11, eps = 1e-3;
    sx_tensor *x = tu_rand(&rng, dt, rank, shape, offset - 2, offset + 3);
    sx_tensor *dy = tu_rand(&rng, dt, rank, shape, -1, 1);
    int64_t c = shape[rank - 1], m = x->size / c;
    sx_tensor *st = two_rows(dt, c), *sums = two_rows(dt, c), *y = tu_zeros(dt, rank, shape);
    sx_tensor *gamma = tu_rand(&rng, dt, 1, &c, 0.5, 1.5), *beta = tu_rand(&rng, dt, 1, &c, -1, 1);
    double *mean = calloc((size_t)c, sizeof *mean), *var = calloc((size_t)c, sizeof *var);
    ref_stats(x, mean, var);
    cr_assert_eq(sx_tensor_batch_norm_stats_out(x, st), SX_OK, "%s", sx_last_error());
    for (int64_t j = 0; j < c; j++) {
        close_to(at(st, j), mean[j], rtol, rtol * (1 + fabs(offset)), "mean", j);
        close_to(at(st, c + j), var[j], rtol, rtol, "var", j);
    }
    cr_assert_eq(sx_tensor_batch_norm_out(x, st, gamma, beta, eps, y), SX_OK, "%s",
                 sx_last_error());
    for (int64_t i = 0; i < x->size; i++) {
        int64_t j = i % c;
        double want =
            (at(x, i) - at(st, j)) / sqrt(at(st, c + j) + eps) * at(gamma, j) + at(beta, j);
        close_to(at(y, i), want, rtol, rtol * (1 + fabs(offset)), "y", i);
    }
    cr_assert_eq(sx_tensor_batch_norm_sums_out(x, st, dy, sums), SX_OK, "%s", sx_last_error());
    for (int64_t j = 0; j < c; j++) {
        double s1 = 0, s2 = 0;
        for (int64_t r = 0; r < m; r++) {
            s1 += at(dy, r * c + j);
            s2 += at(dy, r * c + j) * (at(x, r * c + j) - at(st, j));
        }
        close_to(at(sums, j), s1, rtol, rtol * (double)m, "sum dy", j);
        close_to(at(sums, c + j), s2, rtol, rtol * (double)m, "sum dy (x - mean)", j);
    }
    /* with relu in the pass: the bits of normalise then the relu kernel, out of and in place */
    sx_tensor *yr = tu_zeros(dt, rank, shape), *want_r = tu_zeros(dt, rank, shape);
    size_t bytes = (size_t)x->size * (dt == SX_F32 ? 4 : 8);
    cr_assert_eq(sx_tensor_map_out(SX_MAP_RELU, 0, y, want_r), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_act_ws(x, st, gamma, beta, eps, true, yr, NULL, 0), SX_OK,
                 "%s", sx_last_error());
    cr_assert(memcmp(yr->data, want_r->data, bytes) == 0, "relu in the pass differs");
    int64_t negative = 0;
    for (int64_t i = 0; i < y->size; i++)
        negative += at(y, i) < 0;
    cr_assert(negative > 0 || x->size < 8, "the case has negative outputs to clip");
    sx_tensor *xc = NULL;
    cr_assert_eq(sx_tensor_clone(x, &xc), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_act_ws(xc, st, gamma, beta, eps, true, xc, NULL, 0), SX_OK,
                 "%s", sx_last_error());
    cr_assert(memcmp(xc->data, want_r->data, bytes) == 0, "relu in place differs");
    sx_tensor_free(xc);
    sx_tensor_free(yr);
    sx_tensor_free(want_r);
    /* in place: y = x */
    cr_assert_eq(sx_tensor_batch_norm_out(x, st, gamma, beta, eps, x), SX_OK, "%s",
                 sx_last_error());
    cr_assert(memcmp(x->data, y->data, bytes) == 0);
    free(mean);
    free(var);
    sx_tensor_free(x);
    sx_tensor_free(dy);
    sx_tensor_free(st);
    sx_tensor_free(sums);
    sx_tensor_free(y);
    sx_tensor_free(gamma);
    sx_tensor_free(beta);
}

static void check_all(sx_dtype dt)
{
    check_shape(dt, 1, (int64_t[]){7}, 0);
    check_shape(dt, 2, (int64_t[]){5, 3}, 0);
    check_shape(dt, 4, (int64_t[]){3, 4, 5, 6}, 0);
    /* several row chunks and channel tiles; a large offset (the shift keeps the variance) */
    check_shape(dt, 4, (int64_t[]){8, 12, 15, 130}, 0);
    check_shape(dt, 4, (int64_t[]){16, 28, 28, 16}, 100);
}

Test(tensor_batch_norm, f32_matches_reference)
{
    check_all(SX_F32);
}

Test(tensor_batch_norm, f64_matches_reference)
{
    check_all(SX_F64);
}

/* the same bits with 1, 2 and 3 threads */
Test(tensor_batch_norm, same_bits_on_any_thread_count)
{
    sx_rng rng;
    sx_rng_seed(&rng, 5);
    int64_t shape[4] = {16, 14, 14, 72}, c = 72;
    sx_tensor *x = tu_rand(&rng, SX_F32, 4, shape, -1, 2),
              *dy = tu_rand(&rng, SX_F32, 4, shape, -1, 1);
    sx_tensor *g = tu_rand(&rng, SX_F32, 1, &c, 0.5, 1.5), *b = tu_rand(&rng, SX_F32, 1, &c, -1, 1);
    sx_tensor *st[3], *sm[3], *y[3];
    int before = sx_threads_get();
    for (int t = 0; t < 3; t++) {
        cr_assert_eq(sx_threads_set(t + 1), SX_OK);
        st[t] = two_rows(SX_F32, c), sm[t] = two_rows(SX_F32, c), y[t] = tu_zeros(SX_F32, 4, shape);
        cr_assert_eq(sx_tensor_batch_norm_stats_out(x, st[t]), SX_OK);
        cr_assert_eq(sx_tensor_batch_norm_out(x, st[t], g, b, 1e-5, y[t]), SX_OK);
        cr_assert_eq(sx_tensor_batch_norm_sums_out(x, st[t], dy, sm[t]), SX_OK);
    }
    cr_assert_eq(sx_threads_set(before), SX_OK);
    for (int t = 1; t < 3; t++) {
        cr_assert(memcmp(st[t]->data, st[0]->data, 2 * (size_t)c * 4) == 0, "stats, %d threads",
                  t + 1);
        cr_assert(memcmp(sm[t]->data, sm[0]->data, 2 * (size_t)c * 4) == 0, "sums, %d threads",
                  t + 1);
        cr_assert(memcmp(y[t]->data, y[0]->data, (size_t)x->size * 4) == 0, "y, %d threads", t + 1);
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

Test(tensor_batch_norm, empty_batch_gives_zeros)
{
    int64_t shape[2] = {0, 3}, c = 3;
    sx_tensor *x = tu_zeros(SX_F64, 2, shape), *st = two_rows(SX_F64, c), *sm = two_rows(SX_F64, c);
    sx_tensor *g = vec(SX_F64, c), *b = vec(SX_F64, c), *y = tu_zeros(SX_F64, 2, shape);
    SX_F64P(st)[0] = SX_F64P(sm)[5] = 7;
    cr_assert_eq(sx_tensor_batch_norm_stats_out(x, st), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_out(x, st, g, b, 1e-5, y), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_sums_out(x, st, x, sm), SX_OK);
    for (int j = 0; j < 6; j++)
        cr_assert(SX_F64P(st)[j] == 0 && SX_F64P(sm)[j] == 0);
    sx_tensor_free(x);
    sx_tensor_free(st);
    sx_tensor_free(sm);
    sx_tensor_free(g);
    sx_tensor_free(b);
    sx_tensor_free(y);
}

Test(tensor_batch_norm, errors_name_the_function_and_values)
{
    int64_t shape[2] = {4, 3}, c = 3, bad = 4;
    sx_tensor *x = tu_zeros(SX_F32, 2, shape), *st = two_rows(SX_F32, c);
    sx_tensor *g = vec(SX_F32, c), *b = vec(SX_F32, c), *y = tu_zeros(SX_F32, 2, shape);
    sx_tensor *g4 = vec(SX_F32, bad), *st64 = two_rows(SX_F64, c), *x0 = tu_zeros(SX_F32, 0, NULL);
    cr_assert_eq(sx_tensor_batch_norm_stats_out(x0, st), SX_E_RANK);
    cr_assert(strstr(sx_last_error(), "sx_tensor_batch_norm_stats_out") != NULL);
    cr_assert_eq(sx_tensor_batch_norm_stats_out(x, st64), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_batch_norm_stats_out(x, g), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "(2,c)") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_batch_norm_stats_out(NULL, st), SX_E_ARG);
    cr_assert_eq(sx_tensor_batch_norm_out(x, st, g4, b, 1e-5, y), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "gamma") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_batch_norm_out(x, st, g, b, -1, y), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "eps -1") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_batch_norm_out(x, st, g, b, 1e-5, g), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_batch_norm_sums_out(x, st, g, st), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "dy") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_batch_norm_sums_out(x, st, x, st), SX_E_ARG); /* sums over stats */
    sx_tensor_free(x);
    sx_tensor_free(st);
    sx_tensor_free(g);
    sx_tensor_free(b);
    sx_tensor_free(y);
    sx_tensor_free(g4);
    sx_tensor_free(st64);
    sx_tensor_free(x0);
}

/* a caller's workspace (what compiled graphs pass): the same bits; too small is an error */
Test(tensor_batch_norm, workspace_forms_match_and_check_size)
{
    sx_rng rng;
    sx_rng_seed(&rng, 3);
    int64_t shape[3] = {40, 30, 20}, c = 20;
    size_t bytes = sx_batch_norm_workspace(3, shape);
    cr_assert_gt(bytes, 3 * (size_t)c * sizeof(double));
    double *ws = malloc(bytes);
    sx_tensor *x = tu_rand(&rng, SX_F32, 3, shape, -1, 1),
              *dy = tu_rand(&rng, SX_F32, 3, shape, -1, 1);
    sx_tensor *g = tu_rand(&rng, SX_F32, 1, &c, 0.5, 1.5), *b = tu_rand(&rng, SX_F32, 1, &c, -1, 1);
    sx_tensor *s0 = two_rows(SX_F32, c), *s1 = two_rows(SX_F32, c), *u0 = two_rows(SX_F32, c);
    sx_tensor *u1 = two_rows(SX_F32, c), *y0 = tu_zeros(SX_F32, 3, shape),
              *y1 = tu_zeros(SX_F32, 3, shape);
    cr_assert_eq(sx_tensor_batch_norm_stats_out(x, s0), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_stats_ws(x, s1, ws, bytes), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_out(x, s0, g, b, 1e-5, y0), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_ws(x, s1, g, b, 1e-5, y1, ws, bytes), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_sums_out(x, s0, dy, u0), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_sums_ws(x, s1, dy, u1, ws, bytes), SX_OK);
    cr_assert(memcmp(s0->data, s1->data, 2 * (size_t)c * 4) == 0);
    cr_assert(memcmp(u0->data, u1->data, 2 * (size_t)c * 4) == 0);
    cr_assert(memcmp(y0->data, y1->data, (size_t)x->size * 4) == 0);
    cr_assert_eq(sx_tensor_batch_norm_stats_ws(x, s1, ws, bytes - 8), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "workspace") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_batch_norm_workspace(0, shape), 0);
    free(ws);
    sx_tensor_free(x);
    sx_tensor_free(dy);
    sx_tensor_free(g);
    sx_tensor_free(b);
    sx_tensor_free(s0);
    sx_tensor_free(s1);
    sx_tensor_free(u0);
    sx_tensor_free(u1);
    sx_tensor_free(y0);
    sx_tensor_free(y1);
}

/* The backward pass with relu's mask read inside: the masked sums and dx give the bits
 * of the unmasked kernels on where(y > 0, dy, 0) (an infinite dy where y <= 0 adds nothing), dx
 * matches a plain loop in double, and neither depends on the thread count. */
Test(tensor_batch_norm, masked_backward_matches_the_mask_applied_first)
{
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = d == 0 ? SX_F32 : SX_F64;
        sx_rng rng;
        sx_rng_seed(&rng, 21);
        int64_t shape[4] = {6, 9, 9, 20}, c = 20;
        sx_tensor *x = tu_rand(&rng, dt, 4, shape, -1, 2), *dy = tu_rand(&rng, dt, 4, shape, -1, 1),
                  *y = tu_rand(&rng, dt, 4, shape, -1, 1), *md = tu_zeros(dt, 4, shape);
        sx_tensor *gamma = tu_rand(&rng, dt, 1, &c, 0.5, 1.5), *st = two_rows(dt, c);
        cr_assert_eq(sx_tensor_batch_norm_stats_out(x, st), SX_OK);
        for (int64_t i = 0; i < x->size; i++) {
            if (at(y, i) <= 0 && i % 7 == 0) /* never read: the mask selects */
                sx_tensor_set(dy, i, INFINITY);
            sx_tensor_set(md, i, at(y, i) > 0 ? at(dy, i) : 0);
        }
        sx_tensor *s_mask = two_rows(dt, c), *s_plain = two_rows(dt, c);
        sx_tensor *dx_mask[3], *dx_plain = tu_zeros(dt, 4, shape);
        cr_assert_eq(sx_tensor_batch_norm_sums_out(x, st, md, s_plain), SX_OK);
        cr_assert_eq(
            sx_tensor_batch_norm_dx_ws(x, st, gamma, md, s_plain, NULL, 1e-3, dx_plain, NULL, 0),
            SX_OK, "%s", sx_last_error());
        int before = sx_threads_get();
        for (int t = 0; t < 3; t++) {
            cr_assert_eq(sx_threads_set(t + 1), SX_OK);
            dx_mask[t] = tu_zeros(dt, 4, shape);
            cr_assert_eq(sx_tensor_batch_norm_sums_mask_ws(x, st, dy, y, s_mask, NULL, 0), SX_OK,
                         "%s", sx_last_error());
            cr_assert(memcmp(s_mask->data, s_plain->data, 2 * (size_t)c * sx_dtype_size(dt)) == 0,
                      "sums, %d threads", t + 1);
            cr_assert_eq(
                sx_tensor_batch_norm_dx_ws(x, st, gamma, dy, s_mask, y, 1e-3, dx_mask[t], NULL, 0),
                SX_OK, "%s", sx_last_error());
            cr_assert(
                memcmp(dx_mask[t]->data, dx_plain->data, (size_t)x->size * sx_dtype_size(dt)) == 0,
                "dx, %d threads", t + 1);
        }
        cr_assert_eq(sx_threads_set(before), SX_OK);
        /* dx against the formula in double */
        int64_t m = x->size / c;
        for (int64_t j = 0; j < c; j++) {
            double r = 1 / sqrt(at(st, c + j) + 1e-3), gm = at(gamma, j);
            double k1 = -gm * r * r * r * at(s_plain, c + j) / (double)m,
                   k0 = -gm * r * at(s_plain, j) / (double)m;
            for (int64_t q = 0; q < m; q++) {
                int64_t i = q * c + j;
                double want = at(md, i) * gm * r + (at(x, i) - at(st, j)) * k1 + k0;
                close_to(at(dx_mask[0], i), want, dt == SX_F32 ? 1e-5 : 1e-12,
                         dt == SX_F32 ? 1e-5 : 1e-12, "dx", i);
            }
        }
        /* the in-place form: dx written over dy */
        sx_tensor *dy2 = tu_zeros(dt, 4, shape);
        cr_assert_eq(sx_tensor_copy_out(dy, dy2), SX_OK);
        cr_assert_eq(sx_tensor_batch_norm_dx_ws(x, st, gamma, dy2, s_mask, y, 1e-3, dy2, NULL, 0),
                     SX_OK, "%s", sx_last_error());
        cr_assert(memcmp(dy2->data, dx_plain->data, (size_t)x->size * sx_dtype_size(dt)) == 0);
        for (int t = 0; t < 3; t++)
            sx_tensor_free(dx_mask[t]);
        sx_tensor *bad[] = {x, dy, y, md, gamma, st, s_mask, s_plain, dx_plain, dy2};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            sx_tensor_free(bad[i]);
    }
}

Test(tensor_batch_norm, dx_errors_name_the_function_and_values)
{
    int64_t shape[2] = {4, 3}, c = 3, other[2] = {4, 2};
    sx_tensor *x = tu_zeros(SX_F32, 2, shape), *dy = tu_zeros(SX_F32, 2, shape),
              *bad = tu_zeros(SX_F32, 2, other), *g = vec(SX_F32, c), *st = two_rows(SX_F32, c),
              *dx = tu_zeros(SX_F32, 2, shape);
    cr_assert_eq(sx_tensor_batch_norm_dx_ws(x, st, g, bad, st, NULL, 1e-3, dx, NULL, 0),
                 SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "sx_tensor_batch_norm_dx_ws") != NULL, "%s", sx_last_error());
    cr_assert(strstr(sx_last_error(), "dy") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_batch_norm_dx_ws(x, st, g, dy, st, bad, 1e-3, dx, NULL, 0), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_batch_norm_dx_ws(x, st, g, dy, st, NULL, -1, dx, NULL, 0), SX_E_ARG);
    cr_assert_eq(sx_tensor_batch_norm_sums_mask_ws(x, st, dy, bad, st, NULL, 0), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "y has shape") != NULL, "%s", sx_last_error());
    sx_tensor *all[] = {x, dy, bad, g, st, dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sx_tensor_free(all[i]);
}

/* Test hook of batch_norm.c: the kernel set in use (want < 0 only queries). */
extern int sx__batch_norm_isa(int want);

#define N_KERNEL_OUTS 10

/* Every kernel of one shape with the kernel set `isa`, outputs concatenated into out (stats,
 * y and relu(y), sums unmasked and masked, dx unmasked and masked, dx in place, y + mk and
 * relu(y + mk) with mk as the residual). */
static void run_all_kernels(int isa, const sx_tensor *x, const sx_tensor *dy, const sx_tensor *mk,
                            const sx_tensor *g, const sx_tensor *b, sx_tensor *out[N_KERNEL_OUTS])
{
    cr_assert_eq(sx__batch_norm_isa(isa), isa);
    sx_dtype dt = x->dtype;
    int64_t c = x->shape[x->rank - 1];
    for (int i = 0; i < N_KERNEL_OUTS; i++)
        out[i] = i == 0 || i == 3 || i == 4 ? two_rows(dt, c) : tu_zeros(dt, x->rank, x->shape);
    cr_assert_eq(sx_tensor_batch_norm_stats_out(x, out[0]), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_act_ws(x, out[0], g, b, 1e-3, false, out[1], NULL, 0), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_act_ws(x, out[0], g, b, 1e-3, true, out[2], NULL, 0), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_sums_mask_ws(x, out[0], dy, NULL, out[3], NULL, 0), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_sums_mask_ws(x, out[0], dy, mk, out[4], NULL, 0), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_dx_ws(x, out[0], g, dy, out[3], NULL, 1e-3, out[5], NULL, 0),
                 SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_dx_ws(x, out[0], g, dy, out[4], mk, 1e-3, out[6], NULL, 0),
                 SX_OK);
    /* in place over dy's copy */
    cr_assert_eq(sx_tensor_copy_out(dy, out[7]), SX_OK);
    cr_assert_eq(
        sx_tensor_batch_norm_dx_ws(x, out[0], g, out[7], out[4], mk, 1e-3, out[7], NULL, 0), SX_OK);
    for (int relu = 0; relu < 2; relu++)
        cr_assert_eq(
            sx_tensor_batch_norm_res_ws(x, out[0], g, b, 1e-3, mk, relu, out[8 + relu], NULL, 0),
            SX_OK, "%s", sx_last_error());
}

/* The baseline, AVX2 and AVX-512 kernels (those this CPU runs) give the same bits: the AVX-512
 * f32 kernels are written out with intrinsics, the others compiled from one template. Channel
 * counts with a masked tail, whole groups of 16, several tiles; masks with +0, -0, NaN and
 * negative values (each selects dy's +0). */
Test(tensor_batch_norm, same_bits_on_every_instruction_set)
{
    const int64_t cs[] = {1, 5, 16, 21, 32, 64, 70, 150};
    const int best = sx__batch_norm_isa(-1);
    for (int d = 0; d < 2; d++)
        for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
            sx_dtype dt = d == 0 ? SX_F32 : SX_F64;
            sx_rng rng;
            sx_rng_seed(&rng, 40 + ci);
            int64_t c = cs[ci], shape[3] = {37, 9, c};
            sx_tensor *x = tu_rand(&rng, dt, 3, shape, -1, 2),
                      *dy = tu_rand(&rng, dt, 3, shape, -1, 1),
                      *mk = tu_rand(&rng, dt, 3, shape, -1, 1);
            sx_tensor *g = tu_rand(&rng, dt, 1, &c, -1.5, 1.5),
                      *b = tu_rand(&rng, dt, 1, &c, -1, 1);
            const double odd[4] = {0.0, -0.0, NAN, -1};
            for (int64_t i = 0; i < mk->size; i += 3)
                sx_tensor_set(mk, i, odd[(i / 3) % 4]);
            sx_tensor *want[N_KERNEL_OUTS], *got[N_KERNEL_OUTS];
            run_all_kernels(0, x, dy, mk, g, b, want);
            for (int isa = 1; isa <= best; isa++) {
                run_all_kernels(isa, x, dy, mk, g, b, got);
                for (int i = 0; i < N_KERNEL_OUTS; i++) {
                    cr_assert(memcmp(got[i]->data, want[i]->data,
                                     (size_t)got[i]->size * sx_dtype_size(dt)) == 0,
                              "output %d, %s, c = %lld, kernel set %d", i, sx_dtype_name(dt),
                              (long long)c, isa);
                    sx_tensor_free(got[i]);
                }
            }
            for (int i = 0; i < N_KERNEL_OUTS; i++)
                sx_tensor_free(want[i]);
            sx_tensor *all[] = {x, dy, mk, g, b};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                sx_tensor_free(all[i]);
        }
    sx__batch_norm_isa(best);
}

/* One case of the residual form: the bits of the normalise, add and (relu) kernels run one after
 * the other, out of place, over x and over res. */
static void check_residual(sx_dtype dt, int rank, const int64_t *shape, bool relu)
{
    sx_rng rng;
    sx_rng_seed(&rng, 70 + (uint64_t)rank);
    int64_t c = shape[rank - 1];
    sx_tensor *x = tu_rand(&rng, dt, rank, shape, -2, 3),
              *res = tu_rand(&rng, dt, rank, shape, -2, 2);
    sx_tensor *gamma = tu_rand(&rng, dt, 1, &c, -1.5, 1.5), *beta = tu_rand(&rng, dt, 1, &c, -1, 1);
    sx_tensor *st = two_rows(dt, c), *y = tu_zeros(dt, rank, shape),
              *want = tu_zeros(dt, rank, shape);
    sx_tensor *got = tu_zeros(dt, rank, shape), *xc = NULL, *rc = NULL;
    /* exact ties y + res = 0 (relu's -0 and +0), and a NaN and infinities through the add */
    sx_tensor_set(res, 0, NAN);
    if (x->size > 3)
        sx_tensor_set(res, 3, INFINITY);
    cr_assert_eq(sx_tensor_batch_norm_stats_out(x, st), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_out(x, st, gamma, beta, 1e-3, y), SX_OK);
    for (int64_t i = 1; i < x->size; i += 5)
        sx_tensor_set(res, i, -at(y, i));
    cr_assert_eq(sx_tensor_binary_out(SX_BINARY_ADD, y, res, want), SX_OK, "%s", sx_last_error());
    if (relu)
        cr_assert_eq(sx_tensor_map_out(SX_MAP_RELU, 0, want, want), SX_OK, "%s", sx_last_error());
    size_t bytes = (size_t)x->size * sx_dtype_size(dt);
    cr_assert_eq(sx_tensor_batch_norm_res_ws(x, st, gamma, beta, 1e-3, res, relu, got, NULL, 0),
                 SX_OK, "%s", sx_last_error());
    cr_assert(memcmp(got->data, want->data, bytes) == 0, "%s relu %d: out of place differs",
              sx_dtype_name(dt), relu);
    cr_assert_eq(sx_tensor_clone(x, &xc), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_res_ws(xc, st, gamma, beta, 1e-3, res, relu, xc, NULL, 0),
                 SX_OK, "%s", sx_last_error());
    cr_assert(memcmp(xc->data, want->data, bytes) == 0, "over x differs");
    cr_assert_eq(sx_tensor_clone(res, &rc), SX_OK);
    cr_assert_eq(sx_tensor_batch_norm_res_ws(x, st, gamma, beta, 1e-3, rc, relu, rc, NULL, 0),
                 SX_OK, "%s", sx_last_error());
    cr_assert(memcmp(rc->data, want->data, bytes) == 0, "over res differs");
    /* and against a plain loop in double: y + res (then relu) */
    for (int64_t i = 0; i < x->size; i++) {
        double v = at(y, i) + at(res, i), w = relu && v < 0 ? 0 : v;
        if (isfinite(w))
            close_to(at(got, i), w, dt == SX_F32 ? 1e-6 : 1e-15, 1e-6, "res", i);
        else
            cr_assert(isnan(w) ? isnan(at(got, i)) : at(got, i) == w);
    }
    sx_tensor *all[] = {x, res, gamma, beta, st, y, want, got, xc, rc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sx_tensor_free(all[i]);
}

/* relu(batch_norm(x) + res) in one pass (a residual block's end, SX_PASS_BN_ADD): f32 and f64,
 * channel tails, several threads' row ranges */
Test(tensor_batch_norm, residual_gives_the_bits_of_normalise_add_relu)
{
    for (int d = 0; d < 2; d++)
        for (int relu = 0; relu < 2; relu++) {
            sx_dtype dt = d == 0 ? SX_F32 : SX_F64;
            check_residual(dt, 1, (int64_t[]){7}, relu);
            check_residual(dt, 2, (int64_t[]){5, 3}, relu);
            check_residual(dt, 4, (int64_t[]){8, 12, 15, 21}, relu);
            check_residual(dt, 4, (int64_t[]){16, 14, 14, 32}, relu);
        }
}

Test(tensor_batch_norm, residual_errors_name_the_function_and_values)
{
    int64_t shape[2] = {4, 3}, c = 3, other[2] = {4, 2}, row[1] = {3};
    sx_tensor *x = tu_zeros(SX_F32, 2, shape), *st = two_rows(SX_F32, c), *g = vec(SX_F32, c),
              *b = vec(SX_F32, c), *y = tu_zeros(SX_F32, 2, shape),
              *bad = tu_zeros(SX_F32, 2, other), *r1 = tu_zeros(SX_F32, 1, row),
              *r64 = tu_zeros(SX_F64, 2, shape);
    cr_assert_eq(sx_tensor_batch_norm_res_ws(x, st, g, b, 1e-3, bad, true, y, NULL, 0), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "sx_tensor_batch_norm_res_ws") != NULL, "%s",
              sx_last_error());
    cr_assert(strstr(sx_last_error(), "res has shape (4,2)") != NULL, "%s", sx_last_error());
    /* no broadcast: a row of c is refused */
    cr_assert_eq(sx_tensor_batch_norm_res_ws(x, st, g, b, 1e-3, r1, false, y, NULL, 0), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_batch_norm_res_ws(x, st, g, b, 1e-3, r64, true, y, NULL, 0), SX_E_DTYPE);
    sx_tensor nul = *y;
    nul.data = NULL;
    cr_assert_eq(sx_tensor_batch_norm_res_ws(x, st, g, b, 1e-3, &nul, true, y, NULL, 0), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "res") != NULL, "%s", sx_last_error());
    /* y overlapping res without being it */
    int64_t part[2] = {2, 3};
    sx_tensor half = sx_tensor_view(SX_F32, 2, part, SX_F32P(y) + 6);
    sx_tensor yh = sx_tensor_view(SX_F32, 2, part, SX_F32P(y)),
              xh = sx_tensor_view(SX_F32, 2, part, SX_F32P(x));
    cr_assert_eq(sx_tensor_batch_norm_res_ws(&xh, st, g, b, 1e-3, &half, true, &yh, NULL, 0),
                 SX_OK);
    sx_tensor yo = sx_tensor_view(SX_F32, 2, part, SX_F32P(y) + 1);
    cr_assert_eq(sx_tensor_batch_norm_res_ws(&xh, st, g, b, 1e-3, &half, true, &yo, NULL, 0),
                 SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "res") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_batch_norm_res_ws(x, st, g, b, -1, y, true, y, NULL, 0), SX_E_ARG);
    sx_tensor *all[] = {x, st, g, b, y, bad, r1, r64};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sx_tensor_free(all[i]);
}
