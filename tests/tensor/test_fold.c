/* Reductions (fold): every op of sx_fold.def over every subset of axes of random shapes, with and
 * without keepdims, in f32 and f64, against a plain reference loop in double; empty reductions,
 * bad arguments, NaN propagation, first-index ties, large inputs on the parallel paths (same bits
 * for any thread count) and the accuracy of f32 sums of millions of elements. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const sx_fold_op all_ops[] = {
#define X(name, str) SX_FOLD_##name,
#include "sx_fold.def"
#undef X
};
#define N_OPS ((int)(sizeof all_ops / sizeof all_ops[0]))

/* ---------------------------------------------------------------- the reference */

/* The reference result of op over the axes in mask, one value per output (K of them, row-major
 * over the kept axes), with a scale per output for the tolerance (the sum of the magnitudes
 * that entered it). Every element of x is visited in row-major order, so for a fixed output the
 * reduced index r grows by one at each visit: the first extreme is the first one met. */
typedef struct ref {
    int64_t K, R;
    double *want, *scale;
} ref;

static ref ref_fold(sx_fold_op op, const sx_tensor *x, unsigned mask)
{
    ref f;
    f.K = 1;
    f.R = 1;
    for (int i = 0; i < x->rank; i++) {
        if ((mask >> i) & 1u)
            f.R *= x->shape[i];
        else
            f.K *= x->shape[i];
    }
    size_t k = (size_t)(f.K > 0 ? f.K : 1);
    f.want = calloc(k, sizeof(double));
    f.scale = calloc(k, sizeof(double));
    double *acc = calloc(k, sizeof(double)), *mag = calloc(k, sizeof(double));
    int64_t *cnt = calloc(k, sizeof(int64_t)), *arg = calloc(k, sizeof(int64_t));
    cr_assert(f.want && f.scale && acc && mag && cnt && arg);
    for (int pass = 0; pass < (op == SX_FOLD_LOGSUMEXP ? 2 : 1); pass++) {
        for (int64_t o = 0; o < f.K; o++) {
            cnt[o] = 0;
            mag[o] = 0;
            acc[o] = op == SX_FOLD_PROD ? 1 : 0;
        }
        for (int64_t i = 0; i < x->size; i++) {
            int64_t rem = i, o = 0, ostride = 1;
            for (int d = x->rank - 1; d >= 0; d--) {
                int64_t id = rem % x->shape[d];
                rem /= x->shape[d];
                if (!((mask >> d) & 1u)) {
                    o += id * ostride;
                    ostride *= x->shape[d];
                }
            }
            double v = sx_tensor_get(x, i);
            int64_t r = cnt[o]++;
            mag[o] += fabs(v);
            switch (op) {
            case SX_FOLD_SUM:
            case SX_FOLD_MEAN:
                acc[o] += v;
                break;
            case SX_FOLD_PROD:
                acc[o] *= v;
                break;
            case SX_FOLD_L1NORM:
                acc[o] += fabs(v);
                break;
            case SX_FOLD_L2NORM:
                acc[o] += v * v;
                break;
            case SX_FOLD_MAX:
            case SX_FOLD_ARGMAX:
                if (r == 0 || (isnan(v) && !isnan(acc[o])) || v > acc[o]) {
                    acc[o] = v;
                    arg[o] = r;
                }
                break;
            case SX_FOLD_MIN:
            case SX_FOLD_ARGMIN:
                if (r == 0 || (isnan(v) && !isnan(acc[o])) || v < acc[o]) {
                    acc[o] = v;
                    arg[o] = r;
                }
                break;
            case SX_FOLD_LOGSUMEXP:
                if (pass == 0) {
                    if (r == 0 || (isnan(v) && !isnan(acc[o])) || v > acc[o])
                        acc[o] = v;
                } else {
                    acc[o] += exp(v - f.want[o]);
                }
                break;
            case SX_FOLD_COUNT:
                break;
            }
        }
        for (int64_t o = 0; o < f.K; o++) {
            double w = acc[o], s = mag[o];
            switch (op) {
            case SX_FOLD_MEAN:
                w = acc[o] / (double)f.R;
                s = mag[o] / (double)f.R;
                break;
            case SX_FOLD_L2NORM:
                w = sqrt(acc[o]);
                s = w;
                break;
            case SX_FOLD_PROD:
                s = fabs(w);
                break;
            case SX_FOLD_ARGMAX:
            case SX_FOLD_ARGMIN:
                w = (double)arg[o];
                break;
            case SX_FOLD_LOGSUMEXP:
                if (pass == 0) {
                    w = f.R == 0 ? -(double)INFINITY : acc[o];
                } else if (isfinite(f.want[o])) {
                    w = f.want[o] + log(acc[o]);
                    s = fabs(w) + 1;
                } else {
                    w = f.want[o];
                }
                break;
            default:
                break;
            }
            f.want[o] = w;
            f.scale[o] = s;
        }
    }
    free(acc);
    free(mag);
    free(cnt);
    free(arg);
    return f;
}

static void ref_free(ref *f)
{
    free(f->want);
    free(f->scale);
}

/* Compare got (K values) with the reference: argmax/argmin/max/min exactly, the rest within
 * tol times the output's scale (f32: the result is one rounding of an accurate double plus the
 * error of expf/logf; f64: the pairwise and sequential sums differ by a few ulps of the scale). */
static bool check(sx_fold_op op, const sx_tensor *got, const ref *f, const char *what)
{
    double tol = got->dtype == SX_F32 ? 2e-6 : 1e-12;
    if (got->size != f->K) {
        cr_log_error("%s: %lld outputs, want %lld", what, (long long)got->size, (long long)f->K);
        return false;
    }
    for (int64_t o = 0; o < f->K; o++) {
        double g = sx_tensor_get(got, o), w = f->want[o];
        if (isnan(w) && isnan(g))
            continue;
        bool exact =
            op == SX_FOLD_ARGMAX || op == SX_FOLD_ARGMIN || op == SX_FOLD_MAX || op == SX_FOLD_MIN;
        /* the f32 result may also be the exact value rounded (underflow to 0, overflow) */
        double wr = got->dtype == SX_F32 ? (double)(float)w : w;
        bool ok = exact ? g == w : (g == wr || fabs(g - w) <= tol * f->scale[o]);
        if (!ok) {
            cr_log_error("%s: %s output %lld: got %.17g, want %.17g (scale %g)", what,
                         sx_fold_name(op), (long long)o, g, w, f->scale[o]);
            return false;
        }
    }
    return true;
}

static char *axes_str(unsigned mask, int rank, char *buf)
{
    int n = 0;
    buf[n++] = '{';
    for (int i = 0; i < rank; i++)
        if ((mask >> i) & 1u)
            n += sprintf(buf + n, n > 1 ? ",%d" : "%d", i);
    buf[n++] = '}';
    buf[n] = '\0';
    return buf;
}

/* Fold x by op over mask both ways (keepdims on and off, through _out and the allocating form)
 * and compare with the reference. */
static void check_fold(sx_fold_op op, const sx_tensor *x, unsigned mask)
{
    char what[256], s[128], a[64];
    snprintf(what, sizeof what, "%s %s x %s axes %s", sx_dtype_name(x->dtype), sx_fold_name(op),
             sx_shape_str(x->rank, x->shape, s, sizeof s), axes_str(mask, x->rank, a));
    ref f = ref_fold(op, x, mask);
    for (int keep = 0; keep < 2; keep++) {
        int r;
        int64_t shape[SX_MAX_RANK];
        cr_assert_eq(sx_fold_shape(NULL, x->rank, x->shape, mask, keep, &r, shape), SX_OK);
        cr_assert_eq(r, keep ? x->rank : x->rank - __builtin_popcount(mask), "%s", what);
        for (int i = 0, j = 0; i < x->rank; i++) {
            if (!((mask >> i) & 1u))
                cr_assert_eq(shape[j++], x->shape[i], "%s", what);
            else if (keep)
                cr_assert_eq(shape[j++], 1, "%s", what);
        }
        sx_tensor *out = tu_zeros(x->dtype, r, shape);
        cr_assert_eq(sx_tensor_fill(out, 12345), SX_OK);
        cr_assert_eq(sx_tensor_fold_out(op, x, mask, keep, out), SX_OK, "%s: %s", what,
                     sx_last_error());
        cr_assert(check(op, out, &f, what), "%s keepdims=%d", what, keep);
        sx_tensor_free(out);
    }
    sx_tensor *y = NULL;
    cr_assert_eq(sx_tensor_fold(op, x, mask, false, &y), SX_OK, "%s: %s", what, sx_last_error());
    cr_assert(check(op, y, &f, what), "%s (allocating)", what);
    sx_tensor_free(y);
    ref_free(&f);
}

/* Values fit for op: products near 1 (no overflow over thousands of factors); small integers
 * for the extremes (many ties, so "the first extreme" is really tested); else [-2, 2). */
static void fill_for(sx_fold_op op, sx_tensor *x, sx_rng *rng)
{
    for (int64_t i = 0; i < x->size; i++) {
        double u = sx_rng_uniform(rng), v;
        if (op == SX_FOLD_PROD)
            v = 0.8 + 0.45 * u;
        else if (op == SX_FOLD_MAX || op == SX_FOLD_MIN || op == SX_FOLD_ARGMAX ||
                 op == SX_FOLD_ARGMIN)
            v = floor(u * 5) - 2;
        else
            v = 4 * u - 2;
        sx_tensor_set(x, i, v);
    }
}

/* ---------------------------------------------------------------- tests */

Test(tensor_fold, names)
{
    cr_assert_str_eq(sx_fold_name(SX_FOLD_SUM), "sum");
    cr_assert_str_eq(sx_fold_name(SX_FOLD_LOGSUMEXP), "logsumexp");
    cr_assert_str_eq(sx_fold_name(SX_FOLD_COUNT), "bad-fold-op");
    cr_assert_str_eq(sx_fold_name((sx_fold_op)-1), "bad-fold-op");
}

Test(tensor_fold, every_op_every_axes_subset_random_shapes)
{
    sx_rng rng;
    sx_rng_seed(&rng, 2002);
    for (int dt = 0; dt < 2; dt++) {
        for (int trial = 0; trial < 10; trial++) {
            int64_t shape[4];
            int rank = tu_rand_shape(&rng, 1, 4, 5, shape);
            if (trial % 3 == 1) /* one long axis: runs longer than the pairwise block */
                shape[sx_rng_below(&rng, (uint64_t)rank)] = 1 + (int64_t)sx_rng_below(&rng, 400);
            sx_tensor *x = tu_zeros((sx_dtype)dt, rank, shape);
            for (int k = 0; k < N_OPS; k++) {
                fill_for(all_ops[k], x, &rng);
                for (unsigned mask = 0; mask < (1u << rank); mask++)
                    check_fold(all_ops[k], x, mask);
            }
            sx_tensor_free(x);
        }
    }
}

Test(tensor_fold, interleaved_kept_and_reduced_axes)
{
    /* Axes that alternate kept / reduced, with size-1 axes in between (dropped by the plan). */
    int64_t shapes[][6] = {{3, 1, 4, 5, 1, 6}, {2, 7, 1, 3, 9, 2}, {1, 1, 5, 1, 1, 130}};
    sx_rng rng;
    sx_rng_seed(&rng, 7);
    for (int dt = 0; dt < 2; dt++)
        for (int s = 0; s < 3; s++) {
            sx_tensor *x = tu_zeros((sx_dtype)dt, 6, shapes[s]);
            for (int k = 0; k < N_OPS; k++) {
                fill_for(all_ops[k], x, &rng);
                for (unsigned mask = 0; mask < 64; mask += 1 + (unsigned)sx_rng_below(&rng, 4))
                    check_fold(all_ops[k], x, mask);
            }
            sx_tensor_free(x);
        }
}

Test(tensor_fold, rank0_and_no_axes)
{
    sx_tensor *x = NULL, *y = NULL;
    for (int dt = 0; dt < 2; dt++) {
        cr_assert_eq(sx_tensor_scalar((sx_dtype)dt, -2.5, &x), SX_OK);
        for (int k = 0; k < N_OPS; k++) {
            sx_fold_op op = all_ops[k];
            double want = op == SX_FOLD_ARGMAX || op == SX_FOLD_ARGMIN   ? 0
                          : op == SX_FOLD_L1NORM || op == SX_FOLD_L2NORM ? 2.5
                                                                         : -2.5;
            cr_assert_eq(sx_tensor_fold(op, x, SX_AXES_ALL, false, &y), SX_OK, "%s",
                         sx_last_error());
            cr_assert_eq(y->rank, 0);
            cr_assert_eq(sx_tensor_get(y, 0), want, "%s of a scalar", sx_fold_name(op));
            sx_tensor_free(y);
            cr_assert_eq(sx_tensor_fold(op, x, 0, true, &y), SX_OK);
            cr_assert_eq(sx_tensor_get(y, 0), want);
            sx_tensor_free(y);
        }
        sx_tensor_free(x);
    }
    /* axes = 0 on a tensor: x itself (|x| for the norms, 0 for arg ops), same shape. */
    int64_t shape[2] = {3, 4};
    sx_rng rng;
    sx_rng_seed(&rng, 1);
    x = tu_rand(&rng, SX_F64, 2, shape, -3, 3);
    for (int k = 0; k < N_OPS; k++) {
        cr_assert_eq(sx_tensor_fold(all_ops[k], x, 0, false, &y), SX_OK);
        cr_assert(sx_shape_equal(y->rank, y->shape, 2, shape));
        for (int64_t i = 0; i < 12; i++) {
            double v = sx_tensor_get(x, i), g = sx_tensor_get(y, i);
            switch (all_ops[k]) {
            case SX_FOLD_ARGMAX:
            case SX_FOLD_ARGMIN:
                cr_assert_eq(g, 0);
                break;
            case SX_FOLD_L1NORM:
            case SX_FOLD_L2NORM:
                cr_assert_eq(g, fabs(v));
                break;
            default:
                cr_assert_eq(g, v, "%s", sx_fold_name(all_ops[k]));
            }
        }
        sx_tensor_free(y);
    }
    sx_tensor_free(x);
}

Test(tensor_fold, axes_all_and_bad_axes)
{
    int64_t shape[3] = {2, 3, 4};
    sx_rng rng;
    sx_rng_seed(&rng, 3);
    sx_tensor *x = tu_rand(&rng, SX_F32, 3, shape, -1, 1);
    int64_t one = 1;
    sx_tensor *s = tu_zeros(SX_F32, 0, NULL), *k = tu_zeros(SX_F32, 1, &one);
    cr_assert_eq(sx_tensor_fold_out(SX_FOLD_SUM, x, SX_AXES_ALL, false, s), SX_OK);
    cr_assert_eq(sx_tensor_fold_out(SX_FOLD_SUM, x, 7, true, k), SX_E_SHAPE,
                 "keepdims of rank 3 gives (1,1,1)");
    int64_t k3[3] = {1, 1, 1};
    sx_tensor *kk = tu_zeros(SX_F32, 3, k3);
    cr_assert_eq(sx_tensor_fold_out(SX_FOLD_SUM, x, SX_AXES_ALL, true, kk), SX_OK);
    cr_assert_eq(sx_tensor_get(kk, 0), sx_tensor_get(s, 0));
    /* Bits at or above the rank: SX_E_AXIS, output untouched. */
    cr_assert_eq(sx_tensor_fill(s, 99), SX_OK);
    unsigned bad[] = {SX_AXIS(3), SX_AXIS(0) | SX_AXIS(5), 0x100, 0xFFFFFFFFu};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(sx_tensor_fold_out(SX_FOLD_SUM, x, bad[i], false, s), SX_E_AXIS, "0x%x",
                     bad[i]);
        cr_assert(strstr(sx_last_error(), "sx_tensor_fold_out") != NULL, "%s", sx_last_error());
        cr_assert_eq(sx_tensor_get(s, 0), 99);
        sx_tensor *y = (sx_tensor *)1;
        cr_assert_eq(sx_tensor_fold(SX_FOLD_MAX, x, bad[i], false, &y), SX_E_AXIS);
        cr_assert_null(y);
    }
    int r;
    int64_t out_shape[SX_MAX_RANK];
    cr_assert_eq(sx_fold_shape("me", 3, shape, SX_AXIS(3), false, &r, out_shape), SX_E_AXIS);
    cr_assert(strncmp(sx_last_error(), "me:", 3) == 0, "%s", sx_last_error());
    cr_assert_eq(sx_fold_shape("me", 3, shape, SX_AXIS(1), false, NULL, out_shape), SX_E_ARG);
    cr_assert_eq(sx_fold_shape("me", 3, shape, SX_AXIS(1), false, &r, NULL), SX_E_ARG);
    int64_t neg[2] = {2, -1};
    cr_assert_eq(sx_fold_shape("me", 2, neg, 0, false, &r, out_shape), SX_E_SHAPE);
    cr_assert_eq(sx_fold_shape("me", 9, shape, 0, false, &r, out_shape), SX_E_RANK);
    cr_assert_eq(sx_fold_shape("me", 3, shape, SX_AXIS(0) | SX_AXIS(2), false, &r, out_shape),
                 SX_OK);
    cr_assert_eq(r, 1);
    cr_assert_eq(out_shape[0], 3);
    sx_tensor_free(x);
    sx_tensor_free(s);
    sx_tensor_free(k);
    sx_tensor_free(kk);
}

Test(tensor_fold, argument_errors_leave_out_unchanged)
{
    int64_t shape[2] = {3, 4}, three = 3, four = 4;
    sx_rng rng;
    sx_rng_seed(&rng, 4);
    sx_tensor *x = tu_rand(&rng, SX_F64, 2, shape, -1, 1);
    sx_tensor *o3 = tu_zeros(SX_F64, 1, &three), *o4 = tu_zeros(SX_F64, 1, &four);
    sx_tensor *o3f = tu_zeros(SX_F32, 1, &three);
    cr_assert_eq(sx_tensor_fill(o4, 7), SX_OK);
    cr_assert_eq(sx_tensor_fill(o3f, 7), SX_OK);
    /* wrong out shape (reducing axis 1 gives (3)), wrong dtype, NULLs, bad op */
    cr_assert_eq(sx_tensor_fold_out(SX_FOLD_SUM, x, SX_AXIS(1), false, o4), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "(4)") && strstr(sx_last_error(), "(3)"), "%s",
              sx_last_error());
    cr_assert_eq(sx_tensor_fold_out(SX_FOLD_SUM, x, SX_AXIS(1), false, o3f), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_fold_out(SX_FOLD_SUM, NULL, SX_AXIS(1), false, o3), SX_E_ARG);
    cr_assert_eq(sx_tensor_fold_out(SX_FOLD_SUM, x, SX_AXIS(1), false, NULL), SX_E_ARG);
    cr_assert_eq(sx_tensor_fold_out(SX_FOLD_COUNT, x, SX_AXIS(1), false, o3), SX_E_ARG);
    cr_assert_eq(sx_tensor_fold_out((sx_fold_op)-3, x, SX_AXIS(1), false, o3), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "unknown op") != NULL, "%s", sx_last_error());
    for (int i = 0; i < 4; i++)
        cr_assert_eq(sx_tensor_get(o4, i), 7);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sx_tensor_get(o3f, i), 7);
    sx_tensor *y = (sx_tensor *)1;
    cr_assert_eq(sx_tensor_fold(SX_FOLD_SUM, NULL, 0, false, &y), SX_E_ARG);
    cr_assert_null(y);
    y = (sx_tensor *)1;
    cr_assert_eq(sx_tensor_fold(SX_FOLD_COUNT, x, 0, false, &y), SX_E_ARG);
    cr_assert_null(y);
    cr_assert_eq(sx_tensor_fold(SX_FOLD_SUM, x, 0, false, NULL), SX_E_ARG);
    /* out of memory in the allocating form: an error, nothing leaked */
    tu_fail_after(0);
    y = (sx_tensor *)1;
    cr_assert_eq(sx_tensor_fold(SX_FOLD_SUM, x, SX_AXIS(0), false, &y), SX_E_NOMEM);
    cr_assert_null(y);
    cr_assert_eq(tu_live_allocs(), 0);
    tu_fail_reset();
    sx_tensor_free(x);
    sx_tensor_free(o3);
    sx_tensor_free(o4);
    sx_tensor_free(o3f);
}

Test(tensor_fold, empty_reductions)
{
    /* (0, 3) over axis 0: nothing is folded into each of the 3 outputs. */
    int64_t shape[2] = {0, 3}, three = 3, zero = 0;
    for (int dt = 0; dt < 2; dt++) {
        sx_tensor *x = tu_zeros((sx_dtype)dt, 2, shape), *o = tu_zeros((sx_dtype)dt, 1, &three);
        for (int k = 0; k < N_OPS; k++) {
            sx_fold_op op = all_ops[k];
            cr_assert_eq(sx_tensor_fill(o, 5), SX_OK);
            sx_status s = sx_tensor_fold_out(op, x, SX_AXIS(0), false, o);
            if (op == SX_FOLD_MAX || op == SX_FOLD_MIN || op == SX_FOLD_ARGMAX ||
                op == SX_FOLD_ARGMIN) {
                cr_assert_eq(s, SX_E_SHAPE, "%s of nothing", sx_fold_name(op));
                cr_assert(strstr(sx_last_error(), "empty") != NULL, "%s", sx_last_error());
                for (int i = 0; i < 3; i++)
                    cr_assert_eq(sx_tensor_get(o, i), 5, "out untouched");
                continue;
            }
            cr_assert_eq(s, SX_OK, "%s", sx_last_error());
            double want = op == SX_FOLD_PROD        ? 1
                          : op == SX_FOLD_LOGSUMEXP ? -(double)INFINITY
                          : op == SX_FOLD_MEAN      ? (double)NAN
                                                    : 0;
            for (int i = 0; i < 3; i++) {
                double g = sx_tensor_get(o, i);
                cr_assert(g == want || (isnan(g) && isnan(want)), "%s of nothing: %g",
                          sx_fold_name(op), g);
            }
        }
        /* Reducing the non-empty axis gives an empty result: fine for every op, even max. A
         * full reduction of an empty tensor is an empty set again. */
        sx_tensor *e = tu_zeros((sx_dtype)dt, 1, &zero), *s0 = tu_zeros((sx_dtype)dt, 0, NULL);
        for (int k = 0; k < N_OPS; k++) {
            sx_fold_op op = all_ops[k];
            bool ident = op != SX_FOLD_MAX && op != SX_FOLD_MIN && op != SX_FOLD_ARGMAX &&
                         op != SX_FOLD_ARGMIN;
            cr_assert_eq(sx_tensor_fold_out(op, x, SX_AXIS(1), false, e), SX_OK);
            cr_assert_eq(sx_tensor_fold_out(op, x, SX_AXES_ALL, false, s0),
                         ident ? SX_OK : SX_E_SHAPE, "%s", sx_fold_name(op));
        }
        cr_assert_eq(sx_tensor_fold_out(SX_FOLD_SUM, x, SX_AXES_ALL, false, s0), SX_OK);
        cr_assert_eq(sx_tensor_get(s0, 0), 0);
        sx_tensor_free(x);
        sx_tensor_free(o);
        sx_tensor_free(e);
        sx_tensor_free(s0);
    }
}

/* NaN anywhere in a reduction: max/min/sum/... give NaN, argmax/argmin the first NaN. Checked
 * on the contiguous-run path (axis 1 reduced) and the whole-row path (axis 0 reduced), with
 * the NaN inside the vector lanes and in the tail. */
Test(tensor_fold, nan_propagation_and_first_nan_index)
{
    int64_t shape[2] = {37, 301};
    sx_rng rng;
    sx_rng_seed(&rng, 5);
    for (int dt = 0; dt < 2; dt++) {
        sx_tensor *x = tu_rand(&rng, (sx_dtype)dt, 2, shape, -1, 1);
        /* row 3: NaNs at columns 17 and 250; row 5: one NaN in the tail; column 8: two NaNs */
        sx_tensor_set(x, 3 * 301 + 17, (double)NAN);
        sx_tensor_set(x, 3 * 301 + 250, (double)NAN);
        sx_tensor_set(x, 5 * 301 + 300, (double)NAN);
        sx_tensor_set(x, 20 * 301 + 8, (double)NAN);
        sx_tensor_set(x, 30 * 301 + 8, (double)NAN);
        for (int k = 0; k < N_OPS; k++)
            for (unsigned mask = 1; mask < 4; mask++)
                check_fold(all_ops[k], x, mask);
        sx_tensor *y = NULL;
        cr_assert_eq(sx_tensor_fold(SX_FOLD_ARGMAX, x, SX_AXIS(1), false, &y), SX_OK);
        cr_assert_eq(sx_tensor_get(y, 3), 17);
        cr_assert_eq(sx_tensor_get(y, 5), 300);
        sx_tensor_free(y);
        cr_assert_eq(sx_tensor_fold(SX_FOLD_ARGMIN, x, SX_AXIS(0), false, &y), SX_OK);
        cr_assert_eq(sx_tensor_get(y, 8), 20);
        sx_tensor_free(y);
        cr_assert_eq(sx_tensor_fold(SX_FOLD_MIN, x, SX_AXES_ALL, false, &y), SX_OK);
        cr_assert(isnan(sx_tensor_get(y, 0)));
        sx_tensor_free(y);
        cr_assert_eq(sx_tensor_fold(SX_FOLD_ARGMAX, x, SX_AXES_ALL, false, &y), SX_OK);
        cr_assert_eq(sx_tensor_get(y, 0), 3 * 301 + 17);
        sx_tensor_free(y);
        sx_tensor_free(x);
    }
}

Test(tensor_fold, argmax_ties_pick_the_first)
{
    /* All equal: index 0; the max repeated at 2 and 5: index 2; over axis 0 of a (4, 3) whose
     * columns repeat their max. Also infinities, which must still be found. */
    double v1[6] = {1, 1, 1, 1, 1, 1}, v2[6] = {0, -1, 4, 2, 3, 4},
           v3[6] = {-(double)INFINITY, -(double)INFINITY, -(double)INFINITY, 0, 0, 0};
    int64_t six = 6;
    double *vs[3] = {v1, v2, v3};
    double want_max[3] = {0, 2, 3}, want_min[3] = {0, 1, 0};
    for (int dt = 0; dt < 2; dt++)
        for (int c = 0; c < 3; c++) {
            sx_tensor *x = NULL, *y = NULL;
            cr_assert_eq(sx_tensor_from_doubles((sx_dtype)dt, 1, &six, vs[c], 6, &x), SX_OK);
            cr_assert_eq(sx_tensor_fold(SX_FOLD_ARGMAX, x, SX_AXES_ALL, false, &y), SX_OK);
            cr_assert_eq(sx_tensor_get(y, 0), want_max[c], "case %d", c);
            sx_tensor_free(y);
            cr_assert_eq(sx_tensor_fold(SX_FOLD_ARGMIN, x, SX_AXES_ALL, false, &y), SX_OK);
            cr_assert_eq(sx_tensor_get(y, 0), want_min[c], "case %d", c);
            sx_tensor_free(y);
            sx_tensor_free(x);
        }
    double m[12] = {1, 5, 2, 3, 5, 2, 3, 0, 2, 1, 5, 2};
    int64_t shape[2] = {4, 3};
    sx_tensor *x = NULL, *y = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_F32, 2, shape, m, 12, &x), SX_OK);
    cr_assert_eq(sx_tensor_fold(SX_FOLD_ARGMAX, x, SX_AXIS(0), false, &y), SX_OK);
    cr_assert_eq(sx_tensor_get(y, 0), 1);
    cr_assert_eq(sx_tensor_get(y, 1), 0);
    cr_assert_eq(sx_tensor_get(y, 2), 0);
    sx_tensor_free(y);
    cr_assert_eq(sx_tensor_fold(SX_FOLD_ARGMIN, x, SX_AXIS(0), false, &y), SX_OK);
    cr_assert_eq(sx_tensor_get(y, 0), 0);
    cr_assert_eq(sx_tensor_get(y, 1), 2);
    cr_assert_eq(sx_tensor_get(y, 2), 0);
    sx_tensor_free(y);
    sx_tensor_free(x);
}

Test(tensor_fold, logsumexp_is_stable)
{
    /* Large values would overflow exp(x); the max shift keeps the result finite and exact. */
    double v[4] = {1000, 1000, -(double)INFINITY, 999};
    int64_t four = 4;
    for (int dt = 0; dt < 2; dt++) {
        sx_tensor *x = NULL, *y = NULL;
        cr_assert_eq(sx_tensor_from_doubles((sx_dtype)dt, 1, &four, v, 4, &x), SX_OK);
        cr_assert_eq(sx_tensor_fold(SX_FOLD_LOGSUMEXP, x, SX_AXES_ALL, false, &y), SX_OK);
        double want = 1000 + log(2 + exp(-1.0));
        cr_assert(fabs(sx_tensor_get(y, 0) - want) < 1e-4, "%.9g", sx_tensor_get(y, 0));
        sx_tensor_free(y);
        sx_tensor_free(x);
        /* all -inf: -inf; one +inf: +inf */
        double w[3] = {-(double)INFINITY, -(double)INFINITY, -(double)INFINITY},
               u[3] = {1, (double)INFINITY, 2};
        int64_t three = 3;
        cr_assert_eq(sx_tensor_from_doubles((sx_dtype)dt, 1, &three, w, 3, &x), SX_OK);
        cr_assert_eq(sx_tensor_fold(SX_FOLD_LOGSUMEXP, x, SX_AXES_ALL, false, &y), SX_OK);
        cr_assert_eq(sx_tensor_get(y, 0), -(double)INFINITY);
        sx_tensor_free(y);
        sx_tensor_free(x);
        cr_assert_eq(sx_tensor_from_doubles((sx_dtype)dt, 1, &three, u, 3, &x), SX_OK);
        cr_assert_eq(sx_tensor_fold(SX_FOLD_LOGSUMEXP, x, SX_AXES_ALL, false, &y), SX_OK);
        cr_assert_eq(sx_tensor_get(y, 0), (double)INFINITY);
        sx_tensor_free(y);
        sx_tensor_free(x);
    }
}

/* Large inputs on every parallel path: many outputs (parallel over outputs / tiles), few
 * outputs with long reductions (parallel over chunks), in both cases (innermost axis reduced
 * or kept). Results must match the reference and be bit-identical with 1 and 2 threads. */
Test(tensor_fold, large_parallel_paths_and_thread_independence)
{
    struct {
        int rank;
        int64_t shape[3];
        unsigned mask;
    } cases[] = {
        {1, {200001}, SX_AXIS(0)},                   /* A, one output, chunks in parallel */
        {2, {3, 50001}, SX_AXIS(1)},                 /* A, few outputs */
        {2, {5000, 37}, SX_AXIS(1)},                 /* A, many outputs */
        {2, {12000, 33}, SX_AXIS(0)},                /* B, one tile, chunks in parallel */
        {3, {20, 300, 40}, SX_AXIS(1)},              /* B, many tiles */
        {3, {200, 40, 21}, SX_AXIS(0) | SX_AXIS(2)}, /* A with outer reduced axes */
        {3, {1100, 3, 20}, SX_AXIS(0)},              /* B with small rows */
    };
    sx_rng rng;
    sx_rng_seed(&rng, 6);
    sx_fold_op ops[] = {SX_FOLD_SUM, SX_FOLD_MEAN,   SX_FOLD_L2NORM,
                        SX_FOLD_MAX, SX_FOLD_ARGMIN, SX_FOLD_LOGSUMEXP};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int dt = 0; dt < 2; dt++) {
            sx_tensor *x = tu_zeros((sx_dtype)dt, cases[c].rank, cases[c].shape);
            /* three of the six ops per case and dtype, in rotation */
            for (size_t k = (c + (size_t)dt) % 2; k < sizeof ops / sizeof ops[0]; k += 2) {
                char what[64];
                snprintf(what, sizeof what, "case %zu", c);
                fill_for(ops[k], x, &rng);
                ref f = ref_fold(ops[k], x, cases[c].mask);
                sx_tensor *y1 = NULL, *y2 = NULL;
                cr_assert_eq(sx_threads_set(1), SX_OK);
                cr_assert_eq(sx_tensor_fold(ops[k], x, cases[c].mask, false, &y1), SX_OK);
                cr_assert_eq(sx_threads_set(2), SX_OK);
                cr_assert_eq(sx_tensor_fold(ops[k], x, cases[c].mask, false, &y2), SX_OK);
                cr_assert(check(ops[k], y2, &f, what));
                ref_free(&f);
                cr_assert_eq(
                    memcmp(y1->data, y2->data, (size_t)y1->size * sx_dtype_size(y1->dtype)), 0,
                    "case %zu %s: results differ with the thread count", c, sx_fold_name(ops[k]));
                sx_tensor_free(y1);
                sx_tensor_free(y2);
            }
            sx_tensor_free(x);
        }
}

/* A naive f32 sum of 4M values in [0, 1) loses about 3 digits; the pairwise double
 * accumulation must stay within a couple of f32 ulps of the exact sum. */
Test(tensor_fold, f32_sum_of_4M_elements_is_accurate)
{
    int64_t n = INT64_C(1) << 22, shape2[2] = {INT64_C(1) << 18, 16};
    sx_rng rng;
    sx_rng_seed(&rng, 8);
    sx_tensor *x = tu_rand(&rng, SX_F32, 1, &n, 0, 1);
    const float *p = x->data;
    double want = 0;
    for (int64_t i = 0; i < n; i++)
        want += (double)p[i];
    sx_tensor *y = NULL;
    for (int s = 0; s < 2; s++) { /* as a vector (runs) and as (2^18, 16) over both axes */
        if (s == 1)
            cr_assert_eq(sx_tensor_reshape(x, 2, shape2), SX_OK);
        cr_assert_eq(sx_tensor_fold(SX_FOLD_SUM, x, SX_AXES_ALL, false, &y), SX_OK);
        double got = sx_tensor_get(y, 0);
        cr_assert(fabs(got - want) <= 2.5e-7 * want, "sum %.10g, want %.10g (rel %.3g)", got, want,
                  fabs(got - want) / want);
        sx_tensor_free(y);
    }
    /* Column sums over 2^18 rows (whole-row path). */
    cr_assert_eq(sx_tensor_fold(SX_FOLD_SUM, x, SX_AXIS(0), false, &y), SX_OK);
    for (int j = 0; j < 16; j++) {
        double w = 0;
        for (int64_t i = 0; i < shape2[0]; i++)
            w += (double)p[i * 16 + j];
        double got = sx_tensor_get(y, j);
        cr_assert(fabs(got - w) <= 2.5e-7 * w, "column %d: %.10g, want %.10g", j, got, w);
    }
    sx_tensor_free(y);
    sx_tensor_free(x);
}

/* ---------------------------------------------------------------- whole-row sums (case B) */

/* The error bound of whole-row f32 sums (fold.c): 32-row blocks of 4 sequential additions of
 * depth-3 pairwise trees in f32, blocks added in double, one final rounding: within
 * 8 * 2^-24 of the sum of the magnitudes, for any number of rows. f64: the same in 2^-53. */
static double b_bound(sx_dtype dt, double mag)
{
    return 8 * (dt == SX_F32 ? 0x1p-24 : 0x1p-53) * mag;
}

/* Sum over `mask` of x against a double reference within b_bound, and the same bits with 1
 * and 2 threads. */
static void check_b_sum(const sx_tensor *x, unsigned mask, const char *what)
{
    ref f = ref_fold(SX_FOLD_SUM, x, mask);
    sx_tensor *y1 = NULL, *y2 = NULL;
    cr_assert_eq(sx_threads_set(1), SX_OK);
    cr_assert_eq(sx_tensor_fold(SX_FOLD_SUM, x, mask, false, &y1), SX_OK);
    cr_assert_eq(sx_threads_set(2), SX_OK);
    cr_assert_eq(sx_tensor_fold(SX_FOLD_SUM, x, mask, false, &y2), SX_OK);
    cr_assert_eq(y1->size, f.K);
    for (int64_t o = 0; o < f.K; o++) {
        double g = sx_tensor_get(y1, o);
        cr_assert(fabs(g - f.want[o]) <= b_bound(x->dtype, f.scale[o]),
                  "%s %s output %lld: %.10g, want %.10g (bound %.3g)", what,
                  sx_dtype_name(x->dtype), (long long)o, g, f.want[o],
                  b_bound(x->dtype, f.scale[o]));
    }
    cr_assert_eq(memcmp(y1->data, y2->data, (size_t)y1->size * sx_dtype_size(y1->dtype)), 0,
                 "%s: results differ with the thread count", what);
    sx_tensor_free(y1);
    sx_tensor_free(y2);
    ref_free(&f);
}

/* A million rows of 1 + small values, in 3 columns (one task: the rows are cut into chunks run
 * in parallel). Adding them one by one in f32 loses the small parts once the sum passes 2^20
 * (about 2.5e-4 relative); the block scheme stays within its bound, which the naive sum misses. */
Test(tensor_fold, f32_column_sums_of_a_million_rows_do_not_drift)
{
    int64_t shape[2] = {1000037, 3};
    sx_rng rng;
    sx_rng_seed(&rng, 11);
    sx_tensor *x = tu_zeros(SX_F32, 2, shape);
    float *p = x->data;
    for (int64_t i = 0; i < x->size; i++)
        p[i] = 1 + 1e-3f * (float)sx_rng_uniform(&rng);
    check_b_sum(x, SX_AXIS(0), "1e6 rows");
    for (int j = 0; j < 3; j++) { /* the naive f32 sum would fail the bound */
        double exact = 0, mag = 0;
        float naive = 0;
        for (int64_t i = 0; i < shape[0]; i++) {
            exact += (double)p[i * 3 + j];
            mag += fabs((double)p[i * 3 + j]);
            naive += p[i * 3 + j];
        }
        cr_assert(fabs((double)naive - exact) > b_bound(SX_F32, mag), "the test is too weak");
    }
    sx_tensor_free(x);
}

/* Many tasks (no row chunks; wide tiles of 4096 columns and their remainders), rows that are
 * not a multiple of the 8-row groups or the 32-row blocks, reduced axes around kept ones (the
 * row odometer carries between them), in f32 and f64. */
Test(tensor_fold, whole_row_sums_on_wide_tiles)
{
    struct {
        int rank;
        int64_t shape[4];
        unsigned mask;
    } cases[] = {
        {3, {64, 11, 1030}, SX_AXIS(1)},               /* 64 tasks of 1030 columns, 11 rows */
        {3, {13, 37, 5000}, SX_AXIS(1)},               /* tiles of 4096 and 904 columns */
        {4, {3, 64, 13, 80}, SX_AXIS(0) | SX_AXIS(2)}, /* 39 rows over two axes */
        {2, {3, 70000}, SX_AXIS(0)},                   /* 3 rows: no group of 8 */
    };
    sx_rng rng;
    sx_rng_seed(&rng, 12);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int dt = 0; dt < 2; dt++) {
            sx_tensor *x = tu_rand(&rng, (sx_dtype)dt, cases[c].rank, cases[c].shape, -2, 2);
            char what[32];
            snprintf(what, sizeof what, "case %zu", c);
            check_b_sum(x, cases[c].mask, what);
            sx_tensor_free(x);
        }
}
