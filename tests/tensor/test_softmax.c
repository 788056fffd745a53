/* Softmax and log-softmax on every axis of random 1..4-d tensors against a double reference,
 * backward passes against their formulas and against central finite differences (f64),
 * cross-entropy against -sum t * log_softmax, large inputs, thread-count independence and every
 * error (the dropout mask: test_dropout.c). Tolerances: f32 rtol 1e-5 atol 1e-6; f64 rtol 1e-12
 * atol 1e-15; finite differences (f64, step 1e-6) atol 1e-8. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const sx_dtype dtypes[2] = {SX_F32, SX_F64};

static double rtol_of(sx_dtype dt)
{
    return dt == SX_F32 ? 1e-5 : 1e-12;
}

static double atol_of(sx_dtype dt)
{
    return dt == SX_F32 ? 1e-6 : 1e-15;
}

static bool close_to(const sx_tensor *t, const double *want, double rtol, double atol)
{
    for (int64_t i = 0; i < t->size; i++) {
        double got = sx_tensor_get(t, i);
        if (!(fabs(got - want[i]) <= atol + rtol * fabs(want[i]))) {
            cr_log_error("element %lld: got %.17g, want %.17g", (long long)i, got, want[i]);
            return false;
        }
    }
    return true;
}

static bool all_equal(const sx_tensor *t, double v)
{
    for (int64_t i = 0; i < t->size; i++)
        if (sx_tensor_get(t, i) != v)
            return false;
    return true;
}

static double *dalloc(int64_t n)
{
    double *p = calloc((size_t)n + 1, sizeof(double));
    cr_assert_not_null(p);
    return p;
}

/* ---------------------------------------------------------------- references */

/* Flat index of element i along `axis` of lane (o, j) of shape viewed as (outer, len, inner). */
typedef struct lanes {
    int64_t outer, len, inner;
} lanes;

static lanes lanes_of(const sx_tensor *x, int axis)
{
    lanes l = {1, x->shape[axis], 1};
    for (int i = 0; i < axis; i++)
        l.outer *= x->shape[i];
    for (int i = axis + 1; i < x->rank; i++)
        l.inner *= x->shape[i];
    return l;
}

#define LANE_AT(l, o, i, j) (((o) * (l).len + (i)) * (l).inner + (j))

/* softmax / log-softmax of x along axis, straight from the definition (max subtracted). */
static void ref_forward(const sx_tensor *x, int axis, bool log_form, double *out)
{
    lanes l = lanes_of(x, axis);
    for (int64_t o = 0; o < l.outer; o++)
        for (int64_t j = 0; j < l.inner; j++) {
            double m = -INFINITY, s = 0;
            for (int64_t i = 0; i < l.len; i++)
                m = fmax(m, sx_tensor_get(x, LANE_AT(l, o, i, j)));
            for (int64_t i = 0; i < l.len; i++)
                s += exp(sx_tensor_get(x, LANE_AT(l, o, i, j)) - m);
            for (int64_t i = 0; i < l.len; i++) {
                double v = sx_tensor_get(x, LANE_AT(l, o, i, j)) - m;
                out[LANE_AT(l, o, i, j)] = log_form ? v - log(s) : exp(v) / s;
            }
        }
}

/* The backward formulas of the header, from y and dy. */
static void ref_backward(const sx_tensor *y, const sx_tensor *dy, int axis, bool log_form,
                         double *out)
{
    lanes l = lanes_of(y, axis);
    for (int64_t o = 0; o < l.outer; o++)
        for (int64_t j = 0; j < l.inner; j++) {
            double s = 0;
            for (int64_t i = 0; i < l.len; i++) {
                int64_t k = LANE_AT(l, o, i, j);
                s += log_form ? sx_tensor_get(dy, k) : sx_tensor_get(dy, k) * sx_tensor_get(y, k);
            }
            for (int64_t i = 0; i < l.len; i++) {
                int64_t k = LANE_AT(l, o, i, j);
                double yk = sx_tensor_get(y, k), dk = sx_tensor_get(dy, k);
                out[k] = log_form ? dk - exp(yk) * s : yk * (dk - s);
            }
        }
}

typedef sx_status (*fwd_fn)(const sx_tensor *, int, sx_tensor *);
typedef sx_status (*bwd_fn)(const sx_tensor *, const sx_tensor *, int, sx_tensor *);

/* Forward and backward of one form on one tensor and axis, against the references. */
static void check_axis(sx_rng *r, const sx_tensor *x, int axis, bool log_form)
{
    sx_dtype dt = x->dtype;
    fwd_fn fwd = log_form ? sx_tensor_log_softmax_out : sx_tensor_softmax_out;
    bwd_fn bwd = log_form ? sx_tensor_log_softmax_backward_out : sx_tensor_softmax_backward_out;
    int pos = axis < 0 ? axis + x->rank : axis;
    sx_tensor *y = tu_zeros(dt, x->rank, x->shape), *dx = tu_zeros(dt, x->rank, x->shape);
    sx_tensor *dy = tu_rand(r, dt, x->rank, x->shape, -1, 1);
    double *want = dalloc(x->size);
    cr_assert_eq(fwd(x, axis, y), SX_OK, "%s", sx_last_error());
    ref_forward(x, pos, log_form, want);
    cr_assert(close_to(y, want, rtol_of(dt), atol_of(dt)), "%s forward %s rank %d axis %d",
              log_form ? "log_softmax" : "softmax", sx_dtype_name(dt), x->rank, axis);
    for (int64_t i = 0; i < y->size; i++)
        cr_assert(isfinite(sx_tensor_get(y, i)));
    cr_assert_eq(bwd(y, dy, axis, dx), SX_OK, "%s", sx_last_error());
    ref_backward(y, dy, pos, log_form, want);
    cr_assert(close_to(dx, want, rtol_of(dt), atol_of(dt)), "%s backward %s rank %d axis %d",
              log_form ? "log_softmax" : "softmax", sx_dtype_name(dt), x->rank, axis);
    free(want);
    sx_tensor_free(y);
    sx_tensor_free(dx);
    sx_tensor_free(dy);
}

/* ---------------------------------------------------------------- softmax */

Test(tensor_softmax, every_axis_of_random_tensors)
{
    sx_rng r;
    sx_rng_seed(&r, 21);
    for (int trial = 0; trial < 80; trial++) {
        sx_dtype dt = dtypes[trial % 2];
        int64_t shape[4];
        int rank = tu_rand_shape(&r, 1, 4, 6, shape);
        double scale = trial % 4 < 2 ? 5 : 1000; /* 1000: huge logits must stay finite */
        sx_tensor *x = tu_rand(&r, dt, rank, shape, -scale, scale);
        for (int axis = 0; axis < rank; axis++)
            for (int log_form = 0; log_form < 2; log_form++)
                check_axis(&r, x, (trial + axis) % 3 == 0 ? axis - rank : axis, log_form);
        sx_tensor_free(x);
    }
}

/* Large enough for the parallel path; lanes wider than one block (inner > 64). */
Test(tensor_softmax, large_tensors_and_wide_lanes)
{
    sx_rng r;
    sx_rng_seed(&r, 22);
    int64_t s1[2] = {64, 700}, s2[3] = {5, 40, 150};
    for (int d = 0; d < 2; d++) {
        sx_tensor *a = tu_rand(&r, dtypes[d], 2, s1, -8, 8);
        sx_tensor *b = tu_rand(&r, dtypes[d], 3, s2, -8, 8);
        for (int log_form = 0; log_form < 2; log_form++) {
            check_axis(&r, a, 1, log_form);
            check_axis(&r, a, 0, log_form);
            check_axis(&r, b, 1, log_form);
            check_axis(&r, b, 0, log_form);
        }
        sx_tensor_free(a);
        sx_tensor_free(b);
    }
}

Test(tensor_softmax, result_does_not_depend_on_thread_count)
{
    sx_rng r;
    sx_rng_seed(&r, 23);
    int64_t s[3] = {16, 30, 100};
    sx_tensor *x = tu_rand(&r, SX_F32, 3, s, -5, 5), *dy = tu_rand(&r, SX_F32, 3, s, -1, 1);
    sx_tensor *out[2][4];
    int saved = sx_threads_get();
    for (int t = 0; t < 2; t++) {
        cr_assert_eq(sx_threads_set(t == 0 ? 1 : 4), SX_OK);
        for (int k = 0; k < 4; k++)
            out[t][k] = tu_zeros(SX_F32, 3, s);
        cr_assert_eq(sx_tensor_softmax_out(x, 1, out[t][0]), SX_OK);
        cr_assert_eq(sx_tensor_log_softmax_out(x, -1, out[t][1]), SX_OK);
        cr_assert_eq(sx_tensor_softmax_backward_out(out[t][0], dy, 1, out[t][2]), SX_OK);
        cr_assert_eq(sx_tensor_log_softmax_backward_out(out[t][1], dy, -1, out[t][3]), SX_OK);
    }
    cr_assert_eq(sx_threads_set(saved), SX_OK);
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(memcmp(out[0][k]->data, out[1][k]->data, (size_t)x->size * 4), 0);
        sx_tensor_free(out[0][k]);
        sx_tensor_free(out[1][k]);
    }
    sx_tensor_free(x);
    sx_tensor_free(dy);
}

Test(tensor_softmax, huge_logits_stay_finite)
{
    int64_t s[1] = {3};
    double v[3] = {1000, 1000, -1000};
    double sm[3] = {0.5, 0.5, 0}, lsm[3] = {-M_LN2, -M_LN2, -2000 - M_LN2};
    for (int d = 0; d < 2; d++) {
        sx_tensor *x = NULL, *y = tu_zeros(dtypes[d], 1, s);
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 1, s, v, 3, &x), SX_OK);
        cr_assert_eq(sx_tensor_softmax_out(x, 0, y), SX_OK);
        cr_assert(close_to(y, sm, 1e-7, 0));
        cr_assert_eq(sx_tensor_log_softmax_out(x, -1, y), SX_OK);
        cr_assert(close_to(y, lsm, 1e-7, 0));
        sx_tensor_free(x);
        sx_tensor_free(y);
    }
}

/* Finite differences of L(x) = sum(w * f(x)) in f64 against the backward passes. */
Test(tensor_softmax, backward_matches_finite_differences)
{
    sx_rng r;
    sx_rng_seed(&r, 24);
    const double h = 1e-6;
    for (int trial = 0; trial < 12; trial++) {
        int64_t shape[3];
        int rank = tu_rand_shape(&r, 1, 3, 4, shape);
        int axis = (int)sx_rng_below(&r, (uint64_t)rank);
        bool log_form = trial % 2;
        fwd_fn fwd = log_form ? sx_tensor_log_softmax_out : sx_tensor_softmax_out;
        bwd_fn bwd = log_form ? sx_tensor_log_softmax_backward_out : sx_tensor_softmax_backward_out;
        sx_tensor *x = tu_rand(&r, SX_F64, rank, shape, -3, 3);
        sx_tensor *w = tu_rand(&r, SX_F64, rank, shape, -1, 1);
        sx_tensor *y = tu_zeros(SX_F64, rank, shape), *dx = tu_zeros(SX_F64, rank, shape);
        cr_assert_eq(fwd(x, axis, y), SX_OK);
        cr_assert_eq(bwd(y, w, axis, dx), SX_OK);
        for (int64_t i = 0; i < x->size; i++) {
            double x0 = sx_tensor_get(x, i), l[2];
            for (int side = 0; side < 2; side++) {
                sx_tensor_set(x, i, x0 + (side ? -h : h));
                cr_assert_eq(fwd(x, axis, y), SX_OK);
                l[side] = 0;
                for (int64_t k = 0; k < y->size; k++)
                    l[side] += sx_tensor_get(w, k) * sx_tensor_get(y, k);
            }
            sx_tensor_set(x, i, x0);
            double fd = (l[0] - l[1]) / (2 * h);
            cr_assert_float_eq(sx_tensor_get(dx, i), fd, 1e-8, "log=%d axis %d element %lld",
                               log_form, axis, (long long)i);
        }
        sx_tensor_free(x);
        sx_tensor_free(w);
        sx_tensor_free(y);
        sx_tensor_free(dx);
    }
}

Test(tensor_softmax, empty_tensors_do_nothing)
{
    int64_t shapes[3][2] = {{0, 3}, {3, 0}, {0, 0}};
    for (int i = 0; i < 3; i++)
        for (int axis = 0; axis < 2; axis++) {
            sx_tensor *x = tu_zeros(SX_F32, 2, shapes[i]), *y = tu_zeros(SX_F32, 2, shapes[i]);
            cr_assert_eq(sx_tensor_softmax_out(x, axis, y), SX_OK);
            cr_assert_eq(sx_tensor_log_softmax_out(x, axis, y), SX_OK);
            cr_assert_eq(sx_tensor_softmax_backward_out(x, x, axis, y), SX_OK);
            cr_assert_eq(sx_tensor_log_softmax_backward_out(x, x, axis, y), SX_OK);
            sx_tensor_free(x);
            sx_tensor_free(y);
        }
}

Test(tensor_softmax, errors_leave_outputs_untouched)
{
    int64_t s[2] = {3, 4}, s2[2] = {4, 3};
    sx_tensor *x = NULL, *y = NULL, *yd = NULL, *yb = NULL, *sc = NULL, *sco = NULL;
    cr_assert_eq(sx_tensor_full(SX_F32, 2, s, 1.0, &x), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 2, s, 7.0, &y), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F64, 2, s, 7.0, &yd), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 2, s2, 7.0, &yb), SX_OK);
    cr_assert_eq(sx_tensor_scalar(SX_F32, 1.0, &sc), SX_OK);
    cr_assert_eq(sx_tensor_scalar(SX_F32, 7.0, &sco), SX_OK);
    for (int log_form = 0; log_form < 2; log_form++) {
        fwd_fn fwd = log_form ? sx_tensor_log_softmax_out : sx_tensor_softmax_out;
        bwd_fn bwd = log_form ? sx_tensor_log_softmax_backward_out : sx_tensor_softmax_backward_out;
        cr_assert_eq(fwd(x, 2, y), SX_E_AXIS);
        cr_assert(strstr(sx_last_error(), "axis 2"), "%s", sx_last_error());
        cr_assert_eq(fwd(x, -3, y), SX_E_AXIS);
        cr_assert_eq(fwd(sc, 0, sco), SX_E_AXIS);
        cr_assert_eq(fwd(x, 1, yb), SX_E_SHAPE);
        cr_assert(strstr(sx_last_error(), "(4,3)") && strstr(sx_last_error(), "(3,4)"), "%s",
                  sx_last_error());
        cr_assert_eq(fwd(x, 1, yd), SX_E_DTYPE);
        cr_assert_eq(fwd(NULL, 1, y), SX_E_ARG);
        cr_assert_eq(fwd(x, 1, NULL), SX_E_ARG);
        cr_assert_eq(bwd(x, yb, 1, y), SX_E_SHAPE);
        cr_assert(strstr(sx_last_error(), "dy"), "%s", sx_last_error());
        cr_assert_eq(bwd(x, yd, 1, y), SX_E_DTYPE);
        cr_assert_eq(bwd(x, NULL, 1, y), SX_E_ARG);
        cr_assert_eq(bwd(x, x, 5, y), SX_E_AXIS);
        cr_assert_eq(bwd(x, x, 0, yb), SX_E_SHAPE);
        /* outputs must not overlap inputs */
        cr_assert_eq(fwd(y, 1, y), SX_E_ARG);
        cr_assert(strstr(sx_last_error(), "overlaps"), "%s", sx_last_error());
        cr_assert_eq(bwd(x, y, 1, y), SX_E_ARG);
        cr_assert_eq(bwd(y, x, 1, y), SX_E_ARG);
    }
    cr_assert(all_equal(y, 7) && all_equal(yd, 7) && all_equal(yb, 7) && all_equal(sco, 7));
    sx_tensor *ts[] = {x, y, yd, yb, sc, sco};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        sx_tensor_free(ts[i]);
}

/* ---------------------------------------------------------------- cross-entropy */

/* -sum_j t * log_softmax(x) per row, and its gradient dout * (softmax(x) * sum_j t - t)
 * (= dout * (softmax - t) for probability rows), via ref_forward. */
static void ref_xent(const sx_tensor *x, const sx_tensor *t, const sx_tensor *dout, double *out,
                     double *dlogits)
{
    int64_t n = x->shape[0], k = x->shape[1];
    double *ls = dalloc(x->size);
    ref_forward(x, 1, true, ls);
    for (int64_t i = 0; i < n; i++) {
        double tsum = 0;
        out[i] = 0;
        for (int64_t j = 0; j < k; j++) {
            double tj = sx_tensor_get(t, i * k + j);
            out[i] -= tj * ls[i * k + j];
            tsum += tj;
        }
        for (int64_t j = 0; j < k; j++) {
            double tj = sx_tensor_get(t, i * k + j);
            dlogits[i * k + j] = sx_tensor_get(dout, i) * (exp(ls[i * k + j]) * tsum - tj);
        }
    }
    free(ls);
}

Test(tensor_softmax, xent_against_reference)
{
    sx_rng r;
    sx_rng_seed(&r, 25);
    for (int trial = 0; trial < 40; trial++) {
        sx_dtype dt = dtypes[trial % 2];
        int64_t s[2] = {1 + (int64_t)sx_rng_below(&r, 9), 1 + (int64_t)sx_rng_below(&r, 12)};
        if (trial == 39) {
            s[0] = 200; /* parallel path */
            s[1] = 100;
        }
        double scale = trial % 3 == 2 ? 1000 : 6;
        sx_tensor *x = tu_rand(&r, dt, 2, s, -scale, scale), *t = tu_zeros(dt, 2, s);
        for (int64_t i = 0; i < s[0]; i++) {
            if (trial % 2) { /* one-hot */
                sx_tensor_set(t, i * s[1] + (int64_t)sx_rng_below(&r, (uint64_t)s[1]), 1.0);
                continue;
            }
            double sum = 0, row[16 * 8];
            for (int64_t j = 0; j < s[1]; j++)
                sum += row[j] = sx_rng_uniform(&r);
            for (int64_t j = 0; j < s[1]; j++)
                sx_tensor_set(t, i * s[1] + j, row[j] / sum);
        }
        sx_tensor *dout = tu_rand(&r, dt, 1, s, -2, 2);
        sx_tensor *out = tu_zeros(dt, 1, s), *dx = tu_zeros(dt, 2, s);
        double *want = dalloc(s[0]), *wantd = dalloc(x->size);
        ref_xent(x, t, dout, want, wantd);
        cr_assert_eq(sx_tensor_softmax_xent_out(x, t, out), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_tensor_softmax_xent_backward_out(x, t, dout, dx), SX_OK, "%s",
                     sx_last_error());
        cr_assert(close_to(out, want, rtol_of(dt), scale * atol_of(dt)), "xent trial %d", trial);
        cr_assert(close_to(dx, wantd, rtol_of(dt), atol_of(dt)), "xent backward trial %d", trial);
        for (int64_t i = 0; i < out->size; i++)
            cr_assert(isfinite(sx_tensor_get(out, i)));
        free(want);
        free(wantd);
        sx_tensor_free(x);
        sx_tensor_free(t);
        sx_tensor_free(dout);
        sx_tensor_free(out);
        sx_tensor_free(dx);
    }
}

/* A logit of -inf with zero target contributes nothing (no 0 * inf = NaN). */
Test(tensor_softmax, xent_ignores_zero_targets)
{
    int64_t s[2] = {1, 3};
    double v[3] = {-INFINITY, 0, 0}, tv[3] = {0, 1, 0};
    sx_tensor *x = NULL, *t = NULL, *out = tu_zeros(SX_F64, 1, s);
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 2, s, v, 3, &x), SX_OK);
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 2, s, tv, 3, &t), SX_OK);
    cr_assert_eq(sx_tensor_softmax_xent_out(x, t, out), SX_OK);
    cr_assert_float_eq(sx_tensor_get(out, 0), M_LN2, 1e-15);
    sx_tensor_free(x);
    sx_tensor_free(t);
    sx_tensor_free(out);
}

Test(tensor_softmax, xent_backward_matches_finite_differences)
{
    sx_rng r;
    sx_rng_seed(&r, 26);
    int64_t s[2] = {4, 5};
    const double h = 1e-6;
    sx_tensor *x = tu_rand(&r, SX_F64, 2, s, -3, 3), *t = tu_rand(&r, SX_F64, 2, s, 0, 1);
    sx_tensor *dout = tu_rand(&r, SX_F64, 1, s, -1, 1);
    sx_tensor *out = tu_zeros(SX_F64, 1, s), *dx = tu_zeros(SX_F64, 2, s);
    cr_assert_eq(sx_tensor_softmax_xent_backward_out(x, t, dout, dx), SX_OK);
    for (int64_t i = 0; i < x->size; i++) {
        double x0 = sx_tensor_get(x, i), l[2];
        for (int side = 0; side < 2; side++) {
            sx_tensor_set(x, i, x0 + (side ? -h : h));
            cr_assert_eq(sx_tensor_softmax_xent_out(x, t, out), SX_OK);
            l[side] = 0;
            for (int64_t k = 0; k < s[0]; k++)
                l[side] += sx_tensor_get(dout, k) * sx_tensor_get(out, k);
        }
        sx_tensor_set(x, i, x0);
        cr_assert_float_eq(sx_tensor_get(dx, i), (l[0] - l[1]) / (2 * h), 1e-8);
    }
    sx_tensor_free(x);
    sx_tensor_free(t);
    sx_tensor_free(dout);
    sx_tensor_free(out);
    sx_tensor_free(dx);
}

Test(tensor_softmax, xent_errors_leave_outputs_untouched)
{
    int64_t s[2] = {3, 4}, s3[3] = {3, 4, 1}, sb[2] = {3, 5}, n[1] = {3}, nb[1] = {4};
    sx_tensor *x = NULL, *x3 = NULL, *tb = NULL, *td = NULL, *out = NULL, *outb = NULL;
    sx_tensor *dout = NULL, *doutb = NULL, *dx = NULL, *e = NULL, *eo = NULL;
    cr_assert_eq(sx_tensor_full(SX_F32, 2, s, 1.0, &x), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 3, s3, 1.0, &x3), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 2, sb, 1.0, &tb), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F64, 2, s, 1.0, &td), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 1, n, 7.0, &out), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 1, nb, 7.0, &outb), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 1, n, 1.0, &dout), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 1, nb, 1.0, &doutb), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 2, s, 7.0, &dx), SX_OK);
    cr_assert_eq(sx_tensor_softmax_xent_out(x3, x3, out), SX_E_RANK);
    cr_assert(strstr(sx_last_error(), "(3,4,1)"), "%s", sx_last_error());
    cr_assert_eq(sx_tensor_softmax_xent_out(x, tb, out), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "target"), "%s", sx_last_error());
    cr_assert_eq(sx_tensor_softmax_xent_out(x, td, out), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_softmax_xent_out(x, x, outb), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_softmax_xent_out(x, NULL, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_softmax_xent_backward_out(x, x, doutb, dx), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "dout"), "%s", sx_last_error());
    cr_assert_eq(sx_tensor_softmax_xent_backward_out(x, x, NULL, dx), SX_E_ARG);
    cr_assert_eq(sx_tensor_softmax_xent_backward_out(x, tb, dout, dx), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_softmax_xent_backward_out(x, x, dout, tb), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_softmax_xent_backward_out(x, x, dout, td), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_softmax_xent_backward_out(dx, x, dout, dx), SX_E_ARG);
    cr_assert_eq(sx_tensor_softmax_xent_backward_out(x, dx, dout, dx), SX_E_ARG);
    sx_tensor out_on_x = sx_tensor_view(SX_F32, 1, n, x->data);
    cr_assert_eq(sx_tensor_softmax_xent_out(x, x, &out_on_x), SX_E_ARG);
    cr_assert(all_equal(out, 7) && all_equal(outb, 7) && all_equal(dx, 7) && all_equal(tb, 1));
    /* empty rows: zero classes give zero loss; zero rows do nothing */
    int64_t s0[2] = {2, 0}, n2[1] = {2};
    cr_assert_eq(sx_tensor_zeros(SX_F64, 2, s0, &e), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F64, 1, n2, 7.0, &eo), SX_OK);
    cr_assert_eq(sx_tensor_softmax_xent_out(e, e, eo), SX_OK);
    cr_assert(all_equal(eo, 0));
    sx_tensor *ts[] = {x, x3, tb, td, out, outb, dout, doutb, dx, e, eo};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        sx_tensor_free(ts[i]);
}
