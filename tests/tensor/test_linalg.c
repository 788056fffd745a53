/* Linear algebra through LAPACKE checked against identities computed here in double:
 * A inv(A) = I, A solve(A,B) = B, det against cofactor expansion and Gaussian elimination and
 * det(AB) = det(A) det(B), logdet/sign, L L^T = A, Q R = A with orthonormal Q, U diag(S) Vt = A,
 * A V = V diag(W); plus singular / not positive definite / shape / NaN / out-of-memory errors
 * with outputs untouched. Tolerances (max abs error over O(1) entries, relative for det):
 * f32 2e-4, f64 1e-10. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const sx_dtype dtypes[2] = {SX_F32, SX_F64};

static double tol(sx_dtype dt)
{
    return dt == SX_F32 ? 2e-4 : 1e-10;
}

static sx_tensor *mat(sx_dtype dt, int64_t m, int64_t n)
{
    int64_t s[2] = {m, n};
    return tu_zeros(dt, 2, s);
}

static sx_tensor *vec(sx_dtype dt, int64_t n)
{
    int64_t s[1] = {n};
    return tu_zeros(dt, 1, s);
}

static double at(const sx_tensor *t, int64_t i, int64_t j)
{
    return sx_tensor_get(t, i * t->shape[1] + j);
}

/* A random (n,n) matrix with entries in [-1,1) plus `shift` on the diagonal. */
static sx_tensor *rand_square(sx_rng *r, sx_dtype dt, int64_t n, double shift)
{
    int64_t s[2] = {n, n};
    sx_tensor *a = tu_rand(r, dt, 2, s, -1, 1);
    for (int64_t i = 0; i < n; i++)
        sx_tensor_set(a, i * n + i, at(a, i, i) + shift);
    return a;
}

/* A random symmetric matrix; SPD when `spd` (M M^T + I). */
static sx_tensor *rand_sym(sx_rng *r, sx_dtype dt, int64_t n, bool spd)
{
    int64_t s[2] = {n, n};
    sx_tensor *m = tu_rand(r, SX_F64, 2, s, -1, 1), *a = mat(dt, n, n);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = 0;
            if (spd) {
                for (int64_t k = 0; k < n; k++)
                    v += at(m, i, k) * at(m, j, k);
                v += i == j ? 1.0 : 0.0;
            } else {
                v = at(m, i < j ? i : j, i < j ? j : i);
            }
            sx_tensor_set(a, i * n + j, v);
        }
    sx_tensor_free(m);
    return a;
}

/* max |(op(A) op(B))[i,j] - C[i,j]|, where op transposes when asked; C NULL means identity. */
static double prod_err(const sx_tensor *a, bool ta, const sx_tensor *b, bool tb, const sx_tensor *c)
{
    int64_t m = ta ? a->shape[1] : a->shape[0], k = ta ? a->shape[0] : a->shape[1];
    int64_t n = tb ? b->shape[0] : b->shape[1];
    cr_assert_eq(k, tb ? b->shape[1] : b->shape[0], "inner dimensions");
    double err = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = 0;
            for (int64_t p = 0; p < k; p++)
                v += (ta ? at(a, p, i) : at(a, i, p)) * (tb ? at(b, j, p) : at(b, p, j));
            double want = c ? at(c, i, j) : (i == j ? 1.0 : 0.0);
            err = fmax(err, fabs(v - want));
        }
    return err;
}

static bool all_equal(const sx_tensor *t, double v)
{
    for (int64_t i = 0; i < t->size; i++)
        if (sx_tensor_get(t, i) != v)
            return false;
    return true;
}

static void free_all(sx_tensor **ts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sx_tensor_free(ts[i]);
}
#define FREE_ALL(...)                                                                              \
    free_all((sx_tensor *[]){__VA_ARGS__},                                                         \
             sizeof((sx_tensor *[]){__VA_ARGS__}) / sizeof(sx_tensor *))

/* ---------------------------------------------------------------- determinant references */

/* Laplace (cofactor) expansion along the first row; for small n only. */
static double det_cofactor(const double *a, int n)
{
    if (n == 1)
        return a[0];
    double d = 0, minor[36];
    for (int c = 0; c < n; c++) {
        for (int i = 1; i < n; i++)
            for (int j = 0, k = 0; j < n; j++)
                if (j != c)
                    minor[(i - 1) * (n - 1) + k++] = a[i * n + j];
        d += (c % 2 ? -1 : 1) * a[c] * det_cofactor(minor, n - 1);
    }
    return d;
}

/* Gaussian elimination with partial pivoting, in double. */
static double det_gauss(const sx_tensor *t)
{
    int64_t n = t->shape[0];
    double *a = malloc(sizeof(double) * (size_t)(n * n + 1)), d = 1;
    for (int64_t i = 0; i < n * n; i++)
        a[i] = sx_tensor_get(t, i);
    for (int64_t c = 0; c < n; c++) {
        int64_t p = c;
        for (int64_t i = c + 1; i < n; i++)
            if (fabs(a[i * n + c]) > fabs(a[p * n + c]))
                p = i;
        if (p != c) {
            for (int64_t j = 0; j < n; j++) {
                double tmp = a[c * n + j];
                a[c * n + j] = a[p * n + j];
                a[p * n + j] = tmp;
            }
            d = -d;
        }
        d *= a[c * n + c];
        if (a[c * n + c] == 0)
            break;
        for (int64_t i = c + 1; i < n; i++) {
            double f = a[i * n + c] / a[c * n + c];
            for (int64_t j = c; j < n; j++)
                a[i * n + j] -= f * a[c * n + j];
        }
    }
    free(a);
    return d;
}

static double det_of(const sx_tensor *a)
{
    sx_tensor *d = NULL;
    cr_assert_eq(sx_tensor_zeros(a->dtype, 0, NULL, &d), SX_OK);
    cr_assert_eq(sx_tensor_det_out(a, d), SX_OK, "%s", sx_last_error());
    double v = sx_tensor_get(d, 0);
    sx_tensor_free(d);
    return v;
}

/* ---------------------------------------------------------------- inverse and solve */

Test(tensor_linalg, inverse_times_matrix_is_identity)
{
    sx_rng r;
    sx_rng_seed(&r, 31);
    const int64_t sizes[] = {1, 2, 3, 5, 8, 17, 40};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            int64_t n = sizes[i];
            sx_tensor *a = rand_square(&r, dtypes[d], n, 2 + sqrt((double)n));
            sx_tensor *inv = mat(dtypes[d], n, n);
            cr_assert_eq(sx_tensor_inv_out(a, inv), SX_OK, "%s", sx_last_error());
            cr_assert_leq(prod_err(a, false, inv, false, NULL), tol(dtypes[d]), "n=%lld %s",
                          (long long)n, sx_dtype_name(dtypes[d]));
            cr_assert_leq(prod_err(inv, false, a, false, NULL), tol(dtypes[d]));
            FREE_ALL(a, inv);
        }
}

Test(tensor_linalg, solve_satisfies_the_system)
{
    sx_rng r;
    sx_rng_seed(&r, 32);
    for (int d = 0; d < 2; d++)
        for (int trial = 0; trial < 12; trial++) {
            sx_dtype dt = dtypes[d];
            int64_t n = 1 + (int64_t)sx_rng_below(&r, 12), m = (int64_t)sx_rng_below(&r, 4);
            sx_tensor *a = rand_square(&r, dt, n, 2 + sqrt((double)n));
            int64_t bs[2] = {n, m};
            bool vector = trial % 3 == 0;
            sx_tensor *b = tu_rand(&r, dt, vector ? 1 : 2, bs, -1, 1);
            sx_tensor *x = tu_zeros(dt, vector ? 1 : 2, bs);
            cr_assert_eq(sx_tensor_solve_out(a, b, x), SX_OK, "%s", sx_last_error());
            /* view vectors as (n,1) for the product */
            int64_t cs[2] = {n, vector ? 1 : m};
            sx_tensor bv = sx_tensor_view(dt, 2, cs, b->data),
                      xv = sx_tensor_view(dt, 2, cs, x->data);
            cr_assert_leq(prod_err(a, false, &xv, false, &bv), tol(dt), "n=%lld m=%lld",
                          (long long)n, (long long)m);
            FREE_ALL(a, b, x);
        }
}

/* ---------------------------------------------------------------- determinants */

Test(tensor_linalg, det_against_cofactor_and_elimination)
{
    sx_rng r;
    sx_rng_seed(&r, 33);
    for (int d = 0; d < 2; d++)
        for (int64_t n = 1; n <= 12; n++) {
            sx_dtype dt = dtypes[d];
            sx_tensor *a = rand_square(&r, dt, n, 0.5);
            double got = det_of(a), want = det_gauss(a);
            if (n <= 6) {
                double vals[36];
                for (int64_t i = 0; i < n * n; i++)
                    vals[i] = sx_tensor_get(a, i);
                double cof = det_cofactor(vals, (int)n);
                cr_assert_leq(fabs(cof - want), 1e-12 * (1 + fabs(want)), "two references agree");
            }
            cr_assert_leq(fabs(got - want), tol(dt) * (1 + fabs(want)), "n=%lld %s: %g vs %g",
                          (long long)n, sx_dtype_name(dt), got, want);
            /* logdet and its sign agree with det */
            sx_tensor *ld = NULL;
            double sign = 7;
            cr_assert_eq(sx_tensor_zeros(dt, 0, NULL, &ld), SX_OK);
            cr_assert_eq(sx_tensor_logdet_out(a, ld, &sign), SX_OK);
            cr_assert_eq(sign, want > 0 ? 1.0 : -1.0);
            cr_assert_leq(fabs(sx_tensor_get(ld, 0) - log(fabs(want))), tol(dt) * 10);
            cr_assert_eq(sx_tensor_logdet_out(a, ld, NULL), SX_OK, "sign may be NULL");
            FREE_ALL(a, ld);
        }
}

Test(tensor_linalg, det_of_product_is_product_of_dets)
{
    sx_rng r;
    sx_rng_seed(&r, 34);
    for (int d = 0; d < 2; d++)
        for (int64_t n = 1; n <= 9; n += 2) {
            sx_dtype dt = dtypes[d];
            sx_tensor *a = rand_square(&r, dt, n, 1), *b = rand_square(&r, dt, n, -1);
            sx_tensor *ab = mat(dt, n, n);
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++) {
                    double v = 0;
                    for (int64_t k = 0; k < n; k++)
                        v += at(a, i, k) * at(b, k, j);
                    sx_tensor_set(ab, i * n + j, v);
                }
            double da = det_of(a), db = det_of(b), dab = det_of(ab);
            cr_assert_leq(fabs(dab - da * db), 10 * tol(dt) * (1 + fabs(da * db)),
                          "n=%lld: %g vs %g", (long long)n, dab, da * db);
            FREE_ALL(a, b, ab);
        }
}

Test(tensor_linalg, det_signs_permutations_and_scaling)
{
    /* two disjoint swaps (even), and a 3-cycle (even) */
    double p_odd[16] = {0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0};
    double p_even[9] = {0, 1, 0, 0, 0, 1, 1, 0, 0};
    int64_t s4[2] = {4, 4}, s3[2] = {3, 3};
    for (int d = 0; d < 2; d++) {
        sx_tensor *a = NULL, *b = NULL;
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 2, s4, p_odd, 16, &a), SX_OK);
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 2, s3, p_even, 9, &b), SX_OK);
        cr_assert_eq(det_of(a), 1.0, "two swaps");
        cr_assert_eq(det_of(b), 1.0, "a 3-cycle is even");
        sx_tensor_set(a, 1, -1.0);
        cr_assert_eq(det_of(a), -1.0);
        FREE_ALL(a, b);
    }
    /* pivots 1e-200, 1e-200, 1e200, 1e200: a naive running product underflows to 0 */
    sx_tensor *dg = mat(SX_F64, 4, 4), *ld = NULL;
    const double diag[4] = {1e-200, 1e-200, 1e200, 1e200};
    for (int i = 0; i < 4; i++)
        sx_tensor_set(dg, i * 5, diag[i]);
    cr_assert_float_eq(det_of(dg), 1.0, 1e-12);
    /* det overflows to inf legitimately; logdet does not */
    sx_tensor *big = mat(SX_F64, 400, 400);
    for (int i = 0; i < 400; i++)
        sx_tensor_set(big, i * 401, i % 2 ? -10.0 : 10.0);
    cr_assert(isinf(det_of(big)));
    cr_assert_eq(sx_tensor_zeros(SX_F64, 0, NULL, &ld), SX_OK);
    double sign = 0;
    cr_assert_eq(sx_tensor_logdet_out(big, ld, &sign), SX_OK);
    cr_assert_float_eq(sx_tensor_get(ld, 0), 400 * log(10.0), 1e-9);
    cr_assert_eq(sign, 1.0, "200 negative pivots");
    FREE_ALL(dg, big, ld);
}

Test(tensor_linalg, singular_det_is_zero_not_an_error)
{
    double v[9] = {1, 2, 3, 2, 4, 6, 1, 0, 1};
    int64_t s[2] = {3, 3};
    for (int d = 0; d < 2; d++) {
        sx_tensor *a = NULL, *ld = NULL;
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 2, s, v, 9, &a), SX_OK);
        cr_assert_eq(det_of(a), 0.0);
        cr_assert_eq(sx_tensor_zeros(dtypes[d], 0, NULL, &ld), SX_OK);
        double sign = 7;
        cr_assert_eq(sx_tensor_logdet_out(a, ld, &sign), SX_OK);
        cr_assert_eq(sign, 0.0);
        cr_assert(isinf(sx_tensor_get(ld, 0)) && sx_tensor_get(ld, 0) < 0);
        FREE_ALL(a, ld);
    }
}

/* ---------------------------------------------------------------- factorisations */

Test(tensor_linalg, cholesky_reconstructs_and_ignores_upper_triangle)
{
    sx_rng r;
    sx_rng_seed(&r, 35);
    const int64_t sizes[] = {1, 2, 4, 7, 20};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            int64_t n = sizes[i];
            sx_dtype dt = dtypes[d];
            sx_tensor *a = rand_sym(&r, dt, n, true), *junk = NULL, *l = mat(dt, n, n);
            cr_assert_eq(sx_tensor_clone(a, &junk), SX_OK);
            for (int64_t p = 0; p < n; p++)
                for (int64_t q = p + 1; q < n; q++)
                    sx_tensor_set(junk, p * n + q, NAN); /* upper triangle is not read */
            cr_assert_eq(sx_tensor_cholesky_out(junk, l), SX_OK, "%s", sx_last_error());
            for (int64_t p = 0; p < n; p++) {
                cr_assert_gt(at(l, p, p), 0.0);
                for (int64_t q = p + 1; q < n; q++)
                    cr_assert_eq(at(l, p, q), 0.0, "upper triangle of l is zero");
            }
            cr_assert_leq(prod_err(l, false, l, true, a), tol(dt) * (double)n, "n=%lld",
                          (long long)n);
            FREE_ALL(a, junk, l);
        }
}

Test(tensor_linalg, qr_reconstructs_with_orthonormal_q)
{
    sx_rng r;
    sx_rng_seed(&r, 36);
    const int64_t shapes[][2] = {{5, 3}, {3, 5}, {4, 4}, {1, 6}, {6, 1}, {30, 20}, {1, 1}};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            sx_dtype dt = dtypes[d];
            int64_t m = shapes[i][0], n = shapes[i][1], k = m < n ? m : n;
            sx_tensor *a = tu_rand(&r, dt, 2, shapes[i], -1, 1);
            sx_tensor *q = mat(dt, m, k), *rr = mat(dt, k, n);
            cr_assert_eq(sx_tensor_qr_out(a, q, rr), SX_OK, "%s", sx_last_error());
            cr_assert_leq(prod_err(q, false, rr, false, a), tol(dt), "QR = A (%lld,%lld)",
                          (long long)m, (long long)n);
            cr_assert_leq(prod_err(q, true, q, false, NULL), tol(dt), "Q^T Q = I");
            for (int64_t p = 0; p < k; p++)
                for (int64_t c = 0; c < p; c++)
                    cr_assert_eq(at(rr, p, c), 0.0, "R is upper triangular");
            FREE_ALL(a, q, rr);
        }
}

Test(tensor_linalg, svd_reconstructs_with_descending_values)
{
    sx_rng r;
    sx_rng_seed(&r, 37);
    const int64_t shapes[][2] = {{5, 3}, {3, 5}, {4, 4}, {1, 6}, {6, 1}, {40, 25}, {1, 1}};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            sx_dtype dt = dtypes[d];
            int64_t m = shapes[i][0], n = shapes[i][1], k = m < n ? m : n;
            sx_tensor *a = tu_rand(&r, dt, 2, shapes[i], -1, 1);
            sx_tensor *u = mat(dt, m, k), *s = vec(dt, k), *vt = mat(dt, k, n);
            sx_tensor *us = mat(dt, m, k), *s2 = vec(dt, k), *s3 = vec(dt, k);
            cr_assert_eq(sx_tensor_svd_out(a, u, s, vt), SX_OK, "%s", sx_last_error());
            for (int64_t p = 0; p < k; p++) {
                cr_assert_geq(sx_tensor_get(s, p), 0.0);
                if (p > 0)
                    cr_assert_geq(sx_tensor_get(s, p - 1), sx_tensor_get(s, p), "descending");
                for (int64_t row = 0; row < m; row++)
                    sx_tensor_set(us, row * k + p, at(u, row, p) * sx_tensor_get(s, p));
            }
            cr_assert_leq(prod_err(us, false, vt, false, a), tol(dt), "U S Vt = A");
            cr_assert_leq(prod_err(u, true, u, false, NULL), tol(dt), "U^T U = I");
            cr_assert_leq(prod_err(vt, false, vt, true, NULL), tol(dt), "Vt Vt^T = I");
            /* values only, and one factor only */
            cr_assert_eq(sx_tensor_svd_out(a, NULL, s2, NULL), SX_OK, "%s", sx_last_error());
            cr_assert(tu_close(s2, s, tol(dt), tol(dt)));
            cr_assert_eq(sx_tensor_svd_out(a, us, s3, NULL), SX_OK, "%s", sx_last_error());
            cr_assert(tu_close(s3, s, tol(dt), tol(dt)));
            cr_assert_eq(sx_tensor_svd_out(a, NULL, s3, vt), SX_OK, "%s", sx_last_error());
            FREE_ALL(a, u, s, vt, us, s2, s3);
        }
    /* known values: singular values of diag(3, -4) are 4 and 3 */
    double v[4] = {3, 0, 0, -4}, want[2] = {4, 3};
    int64_t s22[2] = {2, 2};
    sx_tensor *a = NULL, *s = vec(SX_F64, 2), *w = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 2, s22, v, 4, &a), SX_OK);
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 1, s22, want, 2, &w), SX_OK);
    cr_assert_eq(sx_tensor_svd_out(a, NULL, s, NULL), SX_OK);
    cr_assert(tu_close(s, w, 1e-14, 1e-14));
    FREE_ALL(a, s, w);
}

Test(tensor_linalg, eigh_diagonalises_and_reads_lower_triangle)
{
    sx_rng r;
    sx_rng_seed(&r, 38);
    const int64_t sizes[] = {1, 2, 3, 6, 25};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            sx_dtype dt = dtypes[d];
            int64_t n = sizes[i];
            sx_tensor *a = rand_sym(&r, dt, n, false), *junk = NULL;
            sx_tensor *w = vec(dt, n), *v = mat(dt, n, n), *w2 = vec(dt, n);
            sx_tensor *av = mat(dt, n, n), *vw = mat(dt, n, n);
            cr_assert_eq(sx_tensor_clone(a, &junk), SX_OK);
            for (int64_t p = 0; p < n; p++)
                for (int64_t q = p + 1; q < n; q++)
                    sx_tensor_set(junk, p * n + q, NAN);
            cr_assert_eq(sx_tensor_eigh_out(junk, w, v), SX_OK, "%s", sx_last_error());
            for (int64_t p = 1; p < n; p++)
                cr_assert_leq(sx_tensor_get(w, p - 1), sx_tensor_get(w, p), "ascending");
            /* A V = V diag(W): compare column p of A V with W[p] times column p of V */
            for (int64_t p = 0; p < n; p++)
                for (int64_t c = 0; c < n; c++)
                    sx_tensor_set(vw, p * n + c, at(v, p, c) * sx_tensor_get(w, c));
            cr_assert_leq(prod_err(a, false, v, false, vw), tol(dt), "A V = V W, n=%lld",
                          (long long)n);
            cr_assert_leq(prod_err(v, true, v, false, NULL), tol(dt), "V^T V = I");
            cr_assert_eq(sx_tensor_eigh_out(junk, w2, NULL), SX_OK);
            cr_assert(tu_close(w2, w, tol(dt), tol(dt)));
            FREE_ALL(a, junk, w, v, w2, av, vw);
        }
    double m[4] = {2, 1, 1, 2}, want[2] = {1, 3};
    int64_t s22[2] = {2, 2};
    sx_tensor *a = NULL, *w = vec(SX_F64, 2), *ww = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 2, s22, m, 4, &a), SX_OK);
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 1, s22, want, 2, &ww), SX_OK);
    cr_assert_eq(sx_tensor_eigh_out(a, w, NULL), SX_OK);
    cr_assert(tu_close(w, ww, 1e-14, 1e-14));
    FREE_ALL(a, w, ww);
}

Test(tensor_linalg, empty_matrices)
{
    sx_tensor *e = mat(SX_F64, 0, 0), *e2 = mat(SX_F64, 0, 0), *d = NULL, *z = vec(SX_F64, 0);
    cr_assert_eq(sx_tensor_zeros(SX_F64, 0, NULL, &d), SX_OK);
    cr_assert_eq(sx_tensor_inv_out(e, e2), SX_OK);
    cr_assert_eq(sx_tensor_cholesky_out(e, e2), SX_OK);
    cr_assert_eq(sx_tensor_solve_out(e, z, z), SX_OK);
    cr_assert_eq(sx_tensor_det_out(e, d), SX_OK);
    cr_assert_eq(sx_tensor_get(d, 0), 1.0, "det of the empty matrix is 1");
    double sign = 0;
    cr_assert_eq(sx_tensor_logdet_out(e, d, &sign), SX_OK);
    cr_assert_eq(sx_tensor_get(d, 0), 0.0);
    cr_assert_eq(sign, 1.0);
    cr_assert_eq(sx_tensor_eigh_out(e, z, e2), SX_OK);
    sx_tensor *a = mat(SX_F64, 3, 0), *q = mat(SX_F64, 3, 0), *r = mat(SX_F64, 0, 0);
    cr_assert_eq(sx_tensor_qr_out(a, q, r), SX_OK);
    cr_assert_eq(sx_tensor_svd_out(a, q, z, r), SX_OK);
    /* solve with no right-hand side */
    sx_tensor *i2 = rand_square(&(sx_rng){{1, 2, 3, 4}}, SX_F64, 2, 3), *b0 = mat(SX_F64, 2, 0);
    sx_tensor *x0 = mat(SX_F64, 2, 0);
    cr_assert_eq(sx_tensor_solve_out(i2, b0, x0), SX_OK, "%s", sx_last_error());
    FREE_ALL(e, e2, d, z, a, q, r, i2, b0, x0);
}

/* ---------------------------------------------------------------- errors */

Test(tensor_linalg, singular_matrix_is_an_error_with_outputs_untouched)
{
    double v[9] = {1, 2, 3, 2, 4, 6, 1, 0, 1};
    int64_t s[2] = {3, 3};
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = dtypes[d];
        sx_tensor *a = NULL, *out = NULL, *b = NULL, *x = NULL, *zero = mat(dt, 3, 3);
        cr_assert_eq(sx_tensor_from_doubles(dt, 2, s, v, 9, &a), SX_OK);
        cr_assert_eq(sx_tensor_full(dt, 2, s, 7.0, &out), SX_OK);
        cr_assert_eq(sx_tensor_full(dt, 2, s, 1.0, &b), SX_OK);
        cr_assert_eq(sx_tensor_full(dt, 2, s, 7.0, &x), SX_OK);
        cr_assert_eq(sx_tensor_inv_out(a, out), SX_E_SINGULAR);
        cr_assert(strstr(sx_last_error(), "sx_tensor_inv_out") &&
                      strstr(sx_last_error(), "getrf") && strstr(sx_last_error(), "info 3"),
                  "%s", sx_last_error());
        cr_assert_eq(sx_tensor_inv_out(zero, out), SX_E_SINGULAR);
        cr_assert_eq(sx_tensor_solve_out(a, b, x), SX_E_SINGULAR);
        cr_assert(strstr(sx_last_error(), "gesv"), "%s", sx_last_error());
        cr_assert(all_equal(out, 7) && all_equal(x, 7));
        FREE_ALL(a, out, b, x, zero);
    }
}

Test(tensor_linalg, cholesky_of_indefinite_matrix_is_not_pd)
{
    /* lower triangle [[4],[2,1],[1,3,-5]]: the leading minor of order 2 is 4*1 - 2*2 = 0 */
    double v[9] = {4, 0, 0, 2, 1, 0, 1, 3, -5};
    int64_t s[2] = {3, 3};
    for (int d = 0; d < 2; d++) {
        sx_tensor *a = NULL, *l = NULL;
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 2, s, v, 9, &a), SX_OK);
        cr_assert_eq(sx_tensor_full(dtypes[d], 2, s, 7.0, &l), SX_OK);
        cr_assert_eq(sx_tensor_cholesky_out(a, l), SX_E_NOT_PD);
        cr_assert(strstr(sx_last_error(), "potrf") && strstr(sx_last_error(), "info 2"), "%s",
                  sx_last_error());
        cr_assert(all_equal(l, 7));
        FREE_ALL(a, l);
    }
}

Test(tensor_linalg, shape_rank_dtype_and_value_errors)
{
    int64_t s23[2] = {2, 3}, s33[2] = {3, 3}, s3[1] = {3}, s333[3] = {3, 3, 1};
    sx_tensor *ns = NULL, *a = NULL, *ad = NULL, *a3 = NULL, *o = NULL, *o23 = NULL, *v3 = NULL;
    sx_tensor *nan = NULL, *d = NULL, *b3 = NULL;
    cr_assert_eq(sx_tensor_full(SX_F32, 2, s23, 1.0, &ns), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 2, s33, 1.0, &a), SX_OK);
    for (int i = 0; i < 3; i++)
        sx_tensor_set(a, i * 4, 5.0);
    cr_assert_eq(sx_tensor_full(SX_F64, 2, s33, 1.0, &ad), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 3, s333, 1.0, &a3), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 2, s33, 7.0, &o), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 2, s23, 7.0, &o23), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 1, s3, 7.0, &v3), SX_OK);
    cr_assert_eq(sx_tensor_clone(a, &nan), SX_OK);
    sx_tensor_set(nan, 3, NAN);
    cr_assert_eq(sx_tensor_full(SX_F32, 0, NULL, 7.0, &d), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 1, s3, 1.0, &b3), SX_OK);
    double sign = 7;

    /* non-square where square is needed */
    cr_assert_eq(sx_tensor_inv_out(ns, o23), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "(2,3)") && strstr(sx_last_error(), "square"), "%s",
              sx_last_error());
    cr_assert_eq(sx_tensor_solve_out(ns, v3, v3), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_det_out(ns, d), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_logdet_out(ns, d, &sign), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_cholesky_out(ns, o23), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_eigh_out(ns, v3, NULL), SX_E_SHAPE);
    /* not a matrix */
    cr_assert_eq(sx_tensor_inv_out(a3, o), SX_E_RANK);
    cr_assert_eq(sx_tensor_qr_out(v3, o, o), SX_E_RANK);
    cr_assert_eq(sx_tensor_solve_out(a, a3, o), SX_E_RANK);
    /* dtypes */
    cr_assert_eq(sx_tensor_inv_out(ad, o), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_solve_out(a, ad, o), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_det_out(ad, d), SX_E_DTYPE);
    /* wrong output shapes and missing outputs */
    cr_assert_eq(sx_tensor_inv_out(a, o23), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_det_out(a, v3), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_solve_out(a, ns, o23), SX_E_SHAPE, "b (2,3) does not match a (3,3)");
    cr_assert_eq(sx_tensor_solve_out(a, v3, o), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_qr_out(ns, o23, o), SX_E_SHAPE, "q must be (2,2)");
    cr_assert_eq(sx_tensor_qr_out(a, NULL, o), SX_E_ARG);
    cr_assert_eq(sx_tensor_qr_out(a, o, NULL), SX_E_ARG);
    cr_assert_eq(sx_tensor_svd_out(a, NULL, NULL, NULL), SX_E_ARG);
    cr_assert_eq(sx_tensor_svd_out(a, o23, v3, NULL), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_svd_out(a, NULL, v3, o23), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_eigh_out(a, NULL, o), SX_E_ARG);
    cr_assert_eq(sx_tensor_eigh_out(a, v3, o23), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_inv_out(NULL, o), SX_E_ARG);
    /* NaN / Inf are refused before LAPACK sees them */
    cr_assert_eq(sx_tensor_inv_out(nan, o), SX_E_RANGE);
    cr_assert(strstr(sx_last_error(), "a[1,0]"), "%s", sx_last_error());
    cr_assert_eq(sx_tensor_logdet_out(nan, d, &sign), SX_E_RANGE);
    cr_assert_eq(sx_tensor_cholesky_out(nan, o), SX_E_RANGE, "the NaN is in the lower triangle");
    cr_assert_eq(sx_tensor_eigh_out(nan, v3, o), SX_E_RANGE);
    cr_assert_eq(sx_tensor_svd_out(nan, NULL, v3, NULL), SX_E_RANGE);
    cr_assert_eq(sx_tensor_qr_out(nan, o, o), SX_E_RANGE);
    sx_tensor_set(a, 0, INFINITY);
    cr_assert_eq(sx_tensor_solve_out(a, b3, v3), SX_E_RANGE);

    cr_assert(all_equal(o, 7) && all_equal(o23, 7) && all_equal(v3, 7) && all_equal(d, 7));
    cr_assert_eq(sign, 7.0, "sign is untouched on error");
    FREE_ALL(ns, a, ad, a3, o, o23, v3, nan, d, b3);
}

/* Every driver's scratch copy comes from the allocator hook: a failure there is SX_E_NOMEM,
 * outputs stay untouched and nothing leaks. */
Test(tensor_linalg, out_of_memory_leaves_outputs_untouched)
{
    sx_rng r;
    sx_rng_seed(&r, 39);
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = dtypes[d];
        sx_tensor *a = rand_sym(&r, dt, 4, true), *o = NULL, *o2 = NULL, *v = NULL, *s = NULL;
        int64_t s44[2] = {4, 4}, s4[1] = {4};
        cr_assert_eq(sx_tensor_full(dt, 2, s44, 7.0, &o), SX_OK);
        cr_assert_eq(sx_tensor_full(dt, 2, s44, 7.0, &o2), SX_OK);
        cr_assert_eq(sx_tensor_full(dt, 1, s4, 7.0, &v), SX_OK);
        cr_assert_eq(sx_tensor_full(dt, 0, NULL, 7.0, &s), SX_OK);
        double sign = 7;
        tu_fail_after(0);
        sx_status st[9] = {
            sx_tensor_inv_out(a, o),        sx_tensor_solve_out(a, v, v),
            sx_tensor_det_out(a, s),        sx_tensor_logdet_out(a, s, &sign),
            sx_tensor_cholesky_out(a, o),   sx_tensor_qr_out(a, o, o2),
            sx_tensor_svd_out(a, o, v, o2), sx_tensor_svd_out(a, NULL, v, NULL),
            sx_tensor_eigh_out(a, v, o),
        };
        long live = tu_live_allocs();
        tu_fail_reset();
        for (int i = 0; i < 9; i++)
            cr_assert_eq(st[i], SX_E_NOMEM, "call %d", i);
        cr_assert_eq(live, 0);
        cr_assert(all_equal(o, 7) && all_equal(o2, 7) && all_equal(v, 7) && all_equal(s, 7));
        cr_assert_eq(sign, 7.0);
        FREE_ALL(a, o, o2, v, s);
    }
}
