/* Matrix products: sx_tensor_matmul_out against a triple loop in double for every transpose
 * combination, alpha/beta (beta = 0 ignoring NaN), batches with NumPy broadcasting, a shared
 * rank-2 operand on either side, empty dimensions, thread independence, the dot product, and
 * every error path (status, message, output left untouched). */
#include "testutil.h"

#include <math.h>
#include <string.h>

static const sx_dtype dtypes[2] = {SX_F32, SX_F64};

/* Reference: out = alpha * op(a) @ op(b) + beta * old, batch axes broadcast, summed in double;
 * mag receives sum |alpha * a * b| + |beta * old| per element (the scale of rounding errors).
 * Each batch index of out is decoded and mapped into a and b independently. */
static void ref_matmul(const sx_tensor *a, const sx_tensor *b, bool ta, bool tb, double alpha,
                       double beta, const sx_tensor *old, int orank, const int64_t *oshape,
                       double *ref, double *mag)
{
    int ra = a->rank, rb = b->rank, br = orank - 2;
    int64_t ar = a->shape[ra - 2], ac = a->shape[ra - 1];
    int64_t brr = b->shape[rb - 2], bc = b->shape[rb - 1];
    int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? brr : bc;
    int64_t batch = 1;
    for (int i = 0; i < br; i++)
        batch *= oshape[i];
    for (int64_t bi = 0; bi < batch; bi++) {
        /* decode bi into out's batch index, then into a's and b's batch offsets */
        int64_t idx[SX_MAX_RANK], rem = bi;
        for (int d = br - 1; d >= 0; d--) {
            idx[d] = rem % oshape[d];
            rem /= oshape[d];
        }
        int64_t aoff = 0, boff = 0;
        for (int d = 0; d < br; d++) {
            int da = d - (br - (ra - 2)), db = d - (br - (rb - 2));
            if (da >= 0)
                aoff = aoff * a->shape[da] + (a->shape[da] == 1 ? 0 : idx[d]);
            if (db >= 0)
                boff = boff * b->shape[db] + (b->shape[db] == 1 ? 0 : idx[d]);
        }
        aoff *= ar * ac;
        boff *= brr * bc;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0, s_abs = 0;
                for (int64_t l = 0; l < k; l++) {
                    double x = sx_tensor_get(a, aoff + (ta ? l * ac + i : i * ac + l));
                    double y = sx_tensor_get(b, boff + (tb ? j * bc + l : l * bc + j));
                    s += x * y;
                    s_abs += fabs(x * y);
                }
                int64_t o = (bi * m + i) * n + j;
                double prev = beta == 0 ? 0 : beta * sx_tensor_get(old, o);
                ref[o] = alpha * s + prev;
                mag[o] = fabs(alpha) * s_abs + fabs(prev);
            }
    }
}

/* Run matmul_out on a and b into an out pre-filled with `fill` (NaN to check beta = 0) or
 * random values, and compare with the reference. */
static void check_matmul(sx_rng *rng, const sx_tensor *a, const sx_tensor *b, bool ta, bool tb,
                         double alpha, double beta, bool nan_fill)
{
    int orank;
    int64_t oshape[SX_MAX_RANK];
    cr_assert_eq(sx_matmul_shape("test", a, b, ta, tb, &orank, oshape), SX_OK, "%s",
                 sx_last_error());
    sx_tensor *out = tu_rand(rng, a->dtype, orank, oshape, -1, 1);
    if (nan_fill)
        cr_assert_eq(sx_tensor_fill(out, NAN), SX_OK);
    sx_tensor *old = NULL;
    cr_assert_eq(sx_tensor_clone(out, &old), SX_OK);
    double *ref = malloc((size_t)(out->size + 1) * sizeof *ref);
    double *mag = malloc((size_t)(out->size + 1) * sizeof *mag);
    ref_matmul(a, b, ta, tb, alpha, beta, old, orank, oshape, ref, mag);
    cr_assert_eq(sx_tensor_matmul_out(a, b, ta, tb, alpha, beta, out), SX_OK, "%s",
                 sx_last_error());
    double tol = a->dtype == SX_F32 ? 2e-6 : 1e-14;
    char sa[64], sb[64];
    for (int64_t i = 0; i < out->size; i++) {
        double got = sx_tensor_get(out, i);
        cr_assert(fabs(got - ref[i]) <= tol * (mag[i] + 1e-30),
                  "%s a%s%s b%s%s alpha %g beta %g: element %lld got %.17g want %.17g",
                  sx_dtype_name(a->dtype), sx_shape_str(a->rank, a->shape, sa, sizeof sa),
                  ta ? "^T" : "", sx_shape_str(b->rank, b->shape, sb, sizeof sb), tb ? "^T" : "",
                  alpha, beta, (long long)i, got, ref[i]);
    }
    free(ref);
    free(mag);
    sx_tensor_free(out);
    sx_tensor_free(old);
}

/* Shape of a stored operand so that op(x) is (r, c). */
static void stored(bool t, int64_t r, int64_t c, int64_t *s)
{
    s[0] = t ? c : r;
    s[1] = t ? r : c;
}

Test(tensor_matmul, all_transposes_against_triple_loop)
{
    sx_rng rng;
    sx_rng_seed(&rng, 1);
    for (int d = 0; d < 2; d++)
        for (int t = 0; t < 4; t++)
            for (int rep = 0; rep < 6; rep++) {
                bool ta = t & 1, tb = t & 2;
                int64_t m = 1 + (int64_t)sx_rng_below(&rng, 40);
                int64_t k = 1 + (int64_t)sx_rng_below(&rng, 70);
                int64_t n = 1 + (int64_t)sx_rng_below(&rng, 40);
                int64_t sa[2], sb[2];
                stored(ta, m, k, sa);
                stored(tb, k, n, sb);
                sx_tensor *a = tu_rand(&rng, dtypes[d], 2, sa, -1, 1);
                sx_tensor *b = tu_rand(&rng, dtypes[d], 2, sb, -1, 1);
                check_matmul(&rng, a, b, ta, tb, 1.0, 0.0, false);
                sx_tensor_free(a);
                sx_tensor_free(b);
            }
}

Test(tensor_matmul, alpha_and_beta)
{
    sx_rng rng;
    sx_rng_seed(&rng, 2);
    const double ab[][2] = {{2.5, 0.0}, {1.0, 1.0}, {-0.5, 2.0}, {0.0, 3.0}, {0.0, 0.0}};
    for (int d = 0; d < 2; d++)
        for (int t = 0; t < 4; t++)
            for (size_t i = 0; i < sizeof ab / sizeof ab[0]; i++) {
                bool ta = t & 1, tb = t & 2;
                int64_t sa[2], sb[2];
                stored(ta, 7, 9, sa);
                stored(tb, 9, 5, sb);
                sx_tensor *a = tu_rand(&rng, dtypes[d], 2, sa, -1, 1);
                sx_tensor *b = tu_rand(&rng, dtypes[d], 2, sb, -1, 1);
                check_matmul(&rng, a, b, ta, tb, ab[i][0], ab[i][1], false);
                sx_tensor_free(a);
                sx_tensor_free(b);
            }
}

Test(tensor_matmul, beta_zero_ignores_nan_in_out)
{
    sx_rng rng;
    sx_rng_seed(&rng, 3);
    for (int d = 0; d < 2; d++) {
        /* small and large (BLAS may take different paths), plain and batched, and k = 0 */
        const int64_t dims[][3] = {{3, 4, 5}, {130, 70, 90}, {4, 0, 6}};
        for (int i = 0; i < 3; i++)
            for (int ta = 0; ta < 2; ta++) {
                int64_t sa[3] = {2, 0, 0}, sb[2] = {dims[i][1], dims[i][2]};
                stored(ta, dims[i][0], dims[i][1], sa + 1);
                sx_tensor *a = tu_rand(&rng, dtypes[d], 3, sa, -1, 1);
                sx_tensor *b = tu_rand(&rng, dtypes[d], 2, sb, -1, 1);
                check_matmul(&rng, a, b, ta, false, ta ? 0.5 : 1.0, 0.0, true);
                sx_tensor_free(a);
                sx_tensor_free(b);
            }
    }
}

/* Random batch shapes that broadcast: each batch axis of a and b is the common dim or 1, and
 * one side may have fewer axes. */
Test(tensor_matmul, batched_with_broadcasting)
{
    sx_rng rng;
    sx_rng_seed(&rng, 4);
    for (int d = 0; d < 2; d++)
        for (int rep = 0; rep < 40; rep++) {
            bool ta = sx_rng_below(&rng, 2), tb = sx_rng_below(&rng, 2);
            int br = 1 + (int)sx_rng_below(&rng, 3);
            int64_t common[3];
            for (int i = 0; i < br; i++)
                common[i] = 1 + (int64_t)sx_rng_below(&rng, 3);
            int ra = 2 + br - (int)sx_rng_below(&rng, (uint64_t)br + 1);
            int rb = 2 + br - (int)sx_rng_below(&rng, (uint64_t)br + 1);
            int64_t sa[SX_MAX_RANK], sb[SX_MAX_RANK];
            for (int i = 0; i < ra - 2; i++)
                sa[i] = sx_rng_below(&rng, 3) == 0 ? 1 : common[br - (ra - 2) + i];
            for (int i = 0; i < rb - 2; i++)
                sb[i] = sx_rng_below(&rng, 3) == 0 ? 1 : common[br - (rb - 2) + i];
            int64_t m = 1 + (int64_t)sx_rng_below(&rng, 6), k = 1 + (int64_t)sx_rng_below(&rng, 6);
            int64_t n = 1 + (int64_t)sx_rng_below(&rng, 6);
            stored(ta, m, k, sa + ra - 2);
            stored(tb, k, n, sb + rb - 2);
            sx_tensor *a = tu_rand(&rng, dtypes[d], ra, sa, -1, 1);
            sx_tensor *b = tu_rand(&rng, dtypes[d], rb, sb, -1, 1);
            check_matmul(&rng, a, b, ta, tb, 1.5, rep % 2 ? 0.5 : 0.0, false);
            sx_tensor_free(a);
            sx_tensor_free(b);
        }
}

Test(tensor_matmul, shared_rank2_operand_on_either_side)
{
    sx_rng rng;
    sx_rng_seed(&rng, 5);
    for (int d = 0; d < 2; d++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            /* batched @ rank-2 (folded into one GEMM when a is not transposed) */
            int64_t sa[4] = {3, 2, 0, 0}, sb[2];
            stored(ta, 5, 4, sa + 2);
            stored(tb, 4, 6, sb);
            sx_tensor *a = tu_rand(&rng, dtypes[d], 4, sa, -1, 1);
            sx_tensor *b = tu_rand(&rng, dtypes[d], 2, sb, -1, 1);
            check_matmul(&rng, a, b, ta, tb, 1.0, 0.0, false);
            check_matmul(&rng, a, b, ta, tb, -2.0, 0.25, false);
            /* rank-2 @ batched */
            int64_t sc[2];
            stored(tb, 3, 5, sc);
            sx_tensor *c = tu_rand(&rng, dtypes[d], 2, sc, -1, 1);
            check_matmul(&rng, c, a, tb, ta, 1.0, 0.0, t == 0);
            sx_tensor_free(c);
            sx_tensor_free(b);
            /* b with leading unit batch axes is shared too, and widens out's rank */
            int64_t sb4[5] = {1, 1, 1, 0, 0};
            stored(tb, 4, 6, sb4 + 3);
            b = tu_rand(&rng, dtypes[d], 5, sb4, -1, 1);
            check_matmul(&rng, a, b, ta, tb, 1.0, 0.0, false);
            sx_tensor_free(a);
            sx_tensor_free(b);
        }
}

Test(tensor_matmul, empty_dimensions)
{
    sx_rng rng;
    sx_rng_seed(&rng, 6);
    for (int d = 0; d < 2; d++) {
        /* k = 0: out = beta * out (zeros for beta = 0, even over NaN) */
        int64_t sa[2] = {3, 0}, sb[2] = {0, 4};
        sx_tensor *a = tu_rand(&rng, dtypes[d], 2, sa, -1, 1);
        sx_tensor *b = tu_rand(&rng, dtypes[d], 2, sb, -1, 1);
        check_matmul(&rng, a, b, false, false, 1.0, 0.0, true);
        check_matmul(&rng, a, b, false, false, 1.0, 2.0, false);
        check_matmul(&rng, b, a, true, true, 1.0, 1.0, false);
        sx_tensor_free(a);
        sx_tensor_free(b);
        /* m = 0 and a batch of 0: empty outputs, nothing to do */
        int64_t s0[3] = {0, 2, 3}, s1[2] = {3, 2}, s2[2] = {0, 3};
        a = tu_rand(&rng, dtypes[d], 3, s0, -1, 1);
        b = tu_rand(&rng, dtypes[d], 2, s1, -1, 1);
        sx_tensor *c = tu_rand(&rng, dtypes[d], 2, s2, -1, 1);
        check_matmul(&rng, a, b, false, false, 1.0, 0.0, false);
        check_matmul(&rng, c, b, false, false, 1.0, 0.0, false);
        sx_tensor_free(a);
        sx_tensor_free(b);
        sx_tensor_free(c);
    }
}

Test(tensor_matmul, shape_of_result)
{
    int64_t sa[4] = {2, 1, 3, 4}, sb[3] = {5, 4, 6};
    sx_tensor *a = tu_zeros(SX_F32, 4, sa), *b = tu_zeros(SX_F32, 3, sb);
    int rank;
    int64_t s[SX_MAX_RANK];
    cr_assert_eq(sx_matmul_shape("t", a, b, false, false, &rank, s), SX_OK);
    cr_assert_eq(rank, 4);
    cr_assert(s[0] == 2 && s[1] == 5 && s[2] == 3 && s[3] == 6);
    cr_assert_eq(sx_matmul_shape("t", b, b, true, false, &rank, s), SX_OK);
    cr_assert(rank == 3 && s[0] == 5 && s[1] == 6 && s[2] == 6);
    sx_tensor_free(a);
    sx_tensor_free(b);
}

Test(tensor_matmul, allocating_form_and_out_of_memory)
{
    sx_rng rng;
    sx_rng_seed(&rng, 7);
    int64_t sa[3] = {2, 3, 4}, sb[2] = {4, 5};
    sx_tensor *a = tu_rand(&rng, SX_F64, 3, sa, -1, 1), *b = tu_rand(&rng, SX_F64, 2, sb, -1, 1);
    sx_tensor *y = NULL;
    cr_assert_eq(sx_tensor_matmul(a, b, false, false, &y), SX_OK);
    cr_assert(y->rank == 3 && y->shape[0] == 2 && y->shape[1] == 3 && y->shape[2] == 5);
    double ref[30], mag[30];
    ref_matmul(a, b, false, false, 1, 0, y, 3, y->shape, ref, mag);
    for (int i = 0; i < 30; i++)
        cr_assert_float_eq(sx_tensor_get(y, i), ref[i], 1e-14 * (mag[i] + 1));
    sx_tensor_free(y);
    for (long k = 0; k < 2; k++) {
        tu_fail_after(k);
        y = (sx_tensor *)1;
        sx_status s = sx_tensor_matmul(a, b, false, false, &y);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(s, SX_E_NOMEM);
        cr_assert_null(y);
        cr_assert_eq(live, 0, "nothing leaks after a failed allocation");
    }
    cr_assert_eq(sx_tensor_matmul(a, b, false, false, NULL), SX_E_ARG);
    sx_tensor_free(a);
    sx_tensor_free(b);
}

/* Two calls with the same thread count give the same bits. (Across thread counts OpenBLAS's
 * GEMM blocking changes and with it the rounding, so that is not asked of matmul.) The dot
 * product is strix's own and gives the same bits for any thread count. */
Test(tensor_matmul, reproducible_results)
{
    sx_rng rng;
    sx_rng_seed(&rng, 8);
    int n0 = sx_threads_get();
    int64_t sa[3] = {3, 150, 120}, sb[2] = {120, 170}, sv[1] = {300001};
    sx_tensor *a = tu_rand(&rng, SX_F32, 3, sa, -1, 1), *b = tu_rand(&rng, SX_F32, 2, sb, -1, 1);
    sx_tensor *u = tu_rand(&rng, SX_F32, 1, sv, -1, 1), *v = tu_rand(&rng, SX_F32, 1, sv, -1, 1);
    int64_t so[3] = {3, 150, 170};
    sx_tensor *y1 = tu_zeros(SX_F32, 3, so), *y2 = tu_zeros(SX_F32, 3, so);
    sx_tensor *d1 = tu_zeros(SX_F32, 0, NULL), *d2 = tu_zeros(SX_F32, 0, NULL);
    cr_assert_eq(sx_threads_set(2), SX_OK);
    cr_assert_eq(sx_tensor_matmul_out(a, b, false, false, 1, 0, y1), SX_OK);
    cr_assert_eq(sx_tensor_matmul_out(a, b, false, false, 1, 0, y2), SX_OK);
    cr_assert_eq(sx_tensor_dot_out(u, v, d1), SX_OK);
    cr_assert_eq(sx_threads_set(1), SX_OK);
    cr_assert_eq(sx_tensor_dot_out(u, v, d2), SX_OK);
    cr_assert_eq(sx_threads_set(n0), SX_OK);
    cr_assert_eq(memcmp(y1->data, y2->data, (size_t)y1->size * 4), 0);
    cr_assert_eq(sx_tensor_get(d1, 0), sx_tensor_get(d2, 0));
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_tensor_free(u);
    sx_tensor_free(v);
    sx_tensor_free(y1);
    sx_tensor_free(y2);
    sx_tensor_free(d1);
    sx_tensor_free(d2);
}

Test(tensor_matmul, dot_against_double_loop)
{
    sx_rng rng;
    sx_rng_seed(&rng, 9);
    const int64_t sizes[] = {0, 1, 7, 1000, 8192 * 3 + 5, 1 << 20};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            int64_t s[1] = {sizes[i]};
            sx_tensor *a = tu_rand(&rng, dtypes[d], 1, s, -1, 1);
            sx_tensor *b = tu_rand(&rng, dtypes[d], 1, s, -1, 1);
            sx_tensor *out = tu_zeros(dtypes[d], 0, NULL);
            cr_assert_eq(sx_tensor_fill(out, NAN), SX_OK);
            cr_assert_eq(sx_tensor_dot_out(a, b, out), SX_OK, "%s", sx_last_error());
            double ref = 0, mag = 0;
            for (int64_t j = 0; j < sizes[i]; j++) {
                ref += sx_tensor_get(a, j) * sx_tensor_get(b, j);
                mag += fabs(sx_tensor_get(a, j) * sx_tensor_get(b, j));
            }
            /* f32 is summed in double, so only the final rounding to float remains */
            double tol = dtypes[d] == SX_F32 ? 1e-7 * fabs(ref) + 1e-12 * mag : 1e-14 * mag;
            cr_assert(fabs(sx_tensor_get(out, 0) - ref) <= tol, "n %lld: got %.17g want %.17g",
                      (long long)sizes[i], sx_tensor_get(out, 0), ref);
            sx_tensor_free(a);
            sx_tensor_free(b);
            sx_tensor_free(out);
        }
}

/* ---------------------------------------------------------------- errors */

/* out must be left bit-for-bit as it was */
static void assert_unchanged(const sx_tensor *out, const sx_tensor *copy)
{
    cr_assert_eq(memcmp(out->data, copy->data, (size_t)out->size * sx_dtype_size(out->dtype)), 0,
                 "a failed call left out unchanged");
}

static void expect_fail(const sx_tensor *a, const sx_tensor *b, bool ta, bool tb, sx_tensor *out,
                        sx_status want, const char *s1, const char *s2)
{
    sx_tensor *copy = NULL;
    cr_assert_eq(sx_tensor_clone(out, &copy), SX_OK);
    sx_status s = sx_tensor_matmul_out(a, b, ta, tb, 1.0, 0.0, out);
    cr_assert_eq(s, want, "status %s (%s), want %s", sx_status_str(s), sx_last_error(),
                 sx_status_str(want));
    if (s1)
        cr_assert(strstr(sx_last_error(), s1) != NULL, "'%s' lacks '%s'", sx_last_error(), s1);
    if (s2)
        cr_assert(strstr(sx_last_error(), s2) != NULL, "'%s' lacks '%s'", sx_last_error(), s2);
    assert_unchanged(out, copy);
    sx_tensor_free(copy);
}

Test(tensor_matmul, errors)
{
    sx_rng rng;
    sx_rng_seed(&rng, 10);
    int64_t s23[2] = {2, 3}, s43[2] = {4, 3}, s34[2] = {3, 4}, s24[2] = {2, 4};
    int64_t sb1[3] = {2, 3, 4}, sb2[3] = {3, 4, 5}, so[3] = {2, 2, 4}, s3[1] = {3};
    sx_tensor *a = tu_rand(&rng, SX_F32, 2, s23, -1, 1);
    sx_tensor *b = tu_rand(&rng, SX_F32, 2, s43, -1, 1);
    sx_tensor *good = tu_rand(&rng, SX_F32, 2, s34, -1, 1);
    sx_tensor *out = tu_rand(&rng, SX_F32, 2, s24, -1, 1);
    sx_tensor *b64 = tu_rand(&rng, SX_F64, 2, s34, -1, 1);
    sx_tensor *out64 = tu_rand(&rng, SX_F64, 2, s24, -1, 1);
    sx_tensor *x1 = tu_rand(&rng, SX_F32, 3, sb1, -1, 1),
              *x2 = tu_rand(&rng, SX_F32, 3, sb2, -1, 1);
    sx_tensor *outb = tu_rand(&rng, SX_F32, 3, so, -1, 1);
    sx_tensor *v = tu_rand(&rng, SX_F32, 1, s3, -1, 1);

    /* inner dimensions: (2,3) @ (4,3) names both shapes */
    expect_fail(a, b, false, false, out, SX_E_SHAPE, "(2,3)", "(4,3)");
    expect_fail(a, good, true, false, out, SX_E_SHAPE, "(2,3)^T", "(3,4)");
    /* batch dims 2 and 3 do not broadcast */
    expect_fail(x1, x2, false, false, outb, SX_E_SHAPE, "(2,3,4)", "(3,4,5)");
    cr_assert(strstr(sx_last_error(), "broadcast") != NULL, "%s", sx_last_error());
    /* rank < 2, dtype mismatch, wrong out shape and dtype, NULLs, overlap */
    expect_fail(v, good, false, false, out, SX_E_RANK, "rank 1", NULL);
    expect_fail(a, b64, false, false, out, SX_E_DTYPE, "f32", "f64");
    expect_fail(a, good, false, false, outb, SX_E_SHAPE, "(2,2,4)", "(2,4)");
    expect_fail(a, good, false, false, out64, SX_E_DTYPE, NULL, NULL);
    expect_fail(NULL, good, false, false, out, SX_E_ARG, "a is NULL", NULL);
    cr_assert_eq(sx_tensor_matmul_out(a, good, false, false, 1, 0, NULL), SX_E_ARG);
    sx_tensor alias = sx_tensor_view(SX_F32, 2, s24, good->data);
    expect_fail(a, good, false, false, &alias, SX_E_ARG, "overlap", NULL);
    int rank;
    int64_t shape[SX_MAX_RANK];
    cr_assert_eq(sx_matmul_shape("who", a, b, false, false, &rank, shape), SX_E_SHAPE);
    cr_assert(strncmp(sx_last_error(), "who:", 4) == 0, "%s", sx_last_error());
    sx_tensor *y = (sx_tensor *)1;
    cr_assert_eq(sx_tensor_matmul(a, b64, false, false, &y), SX_E_DTYPE);
    cr_assert_null(y);

    /* dot: rank, size, dtype, out shape */
    sx_tensor *d = tu_zeros(SX_F32, 0, NULL), *d64 = tu_zeros(SX_F64, 0, NULL);
    int64_t s4[1] = {4};
    sx_tensor *v4 = tu_rand(&rng, SX_F32, 1, s4, -1, 1), *v64 = tu_rand(&rng, SX_F64, 1, s3, -1, 1);
    cr_assert_eq(sx_tensor_fill(d, 7), SX_OK);
    cr_assert_eq(sx_tensor_dot_out(v, a, d), SX_E_RANK);
    cr_assert_eq(sx_tensor_dot_out(v, v4, d), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "(3)") && strstr(sx_last_error(), "(4)"), "%s",
              sx_last_error());
    cr_assert_eq(sx_tensor_dot_out(v, v64, d), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_dot_out(v, v, d64), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_dot_out(v, v, v4), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_dot_out(v, NULL, d), SX_E_ARG);
    cr_assert_eq(sx_tensor_get(d, 0), 7.0, "a failed dot left out unchanged");

    sx_tensor *all[] = {a, b, good, out, b64, out64, x1, x2, outb, v, d, d64, v4, v64};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sx_tensor_free(all[i]);
}
