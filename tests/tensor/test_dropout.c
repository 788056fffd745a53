/* The inverted-dropout mask: every element against a plain reference of the documented generator
 * (key = one draw of the caller's rng; element i drops when the top 53 bits of SplitMix64's
 * (i+1)-th output from the key, as a uniform in [0, 1), are below p), on every instruction set,
 * for odd sizes and sizes around block boundaries; the fraction of zeros and the independence of
 * neighbouring elements, blocks and successive masks; the same mask for any thread count; one
 * draw per call; every error leaves out and rng untouched. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const sx_dtype dtypes[2] = {SX_F32, SX_F64};

/* The documented generator, written out plainly: SplitMix64 started at the key. */
static uint64_t ref_bits(uint64_t key, int64_t i)
{
    uint64_t z = key + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The mask value the contract asks for, in double: 0 when the element's uniform is below p,
 * else the dtype's 1/(1-p). */
static double ref_value(sx_dtype dt, uint64_t key, int64_t i, double p)
{
    const double u = (double)(ref_bits(key, i) >> 11) * 0x1.0p-53;
    const double keep = dt == SX_F32 ? (double)(float)(1.0 / (1.0 - p)) : 1.0 / (1.0 - p);
    return u < p ? 0.0 : keep;
}

static bool same_rng(const sx_rng *a, const sx_rng *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

static size_t bytes_of(const sx_tensor *t)
{
    return (size_t)t->size * sx_dtype_size(t->dtype);
}

/* Is element i of a mask a zero? */
static bool dropped(const sx_tensor *t, int64_t i)
{
    return t->dtype == SX_F32 ? SX_F32P(t)[i] == 0 : SX_F64P(t)[i] == 0;
}

/* |count - n * q| within 6 standard deviations of a binomial (n, q), plus one for rounding. */
static bool near_binomial(int64_t count, int64_t n, double q)
{
    const double mean = (double)n * q, sd = sqrt((double)n * q * (1 - q));
    return fabs((double)count - mean) <= 6 * sd + 1;
}

/* ---------------------------------------------------------------- exact values */

/* Every element of masks of many sizes (around 4096/8192/16384/65536 boundaries, odd, rank 0,
 * empty) and probabilities (0, the smallest steps of the 53-bit resolution, the largest p below
 * 1) equals the reference, and the call takes exactly one draw. */
static void matches_reference(void)
{
    const int64_t sizes[] = {1,    2,    3,    7,     17,    4095,  4097,
                             8191, 8192, 8193, 16385, 65535, 65537, 100003};
    const double ps[] = {0.0,  0x1.0p-53, 3 * 0x1.0p-53, 1e-3,  0.1,
                         0.25, 0.5,       0.9,           0.999, 1 - 0x1.0p-53};
    sx_rng seeds;
    sx_rng_seed(&seeds, 7);
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
                const double p = ps[k];
                sx_tensor *t = tu_zeros(dtypes[d], 1, &sizes[s]);
                sx_rng r, want_rng;
                sx_rng_seed(&r, sx_rng_u64(&seeds));
                want_rng = r;
                const uint64_t key = sx_rng_u64(&want_rng);
                cr_assert_eq(sx_tensor_dropout_mask(t, &r, p), SX_OK);
                cr_assert(same_rng(&r, &want_rng), "one draw per call (n = %lld, p = %g)",
                          (long long)t->size, p);
                for (int64_t i = 0; i < t->size; i++) {
                    const double got = sx_tensor_get(t, i), want = ref_value(t->dtype, key, i, p);
                    cr_assert_eq(got, want, "%s n = %lld p = %a: element %lld is %g, want %g",
                                 sx_dtype_name(t->dtype), (long long)t->size, p, (long long)i, got,
                                 want);
                }
                sx_tensor_free(t);
            }
}

/* Each Criterion test runs in a process of its own, so SX_ISA set first holds for it: the
 * portable, AVX2 and widest kernels all give the reference's bits. */
Test(tensor_dropout, matches_reference_base)
{
    setenv("SX_ISA", "base", 1);
    matches_reference();
}

Test(tensor_dropout, matches_reference_avx2)
{
    setenv("SX_ISA", "avx2", 1);
    matches_reference();
}

Test(tensor_dropout, matches_reference_widest)
{
    unsetenv("SX_ISA");
    matches_reference();
}

Test(tensor_dropout, rank0_and_empty_take_one_draw)
{
    const int64_t zero = 0;
    for (int d = 0; d < 2; d++) {
        sx_tensor *s = tu_zeros(dtypes[d], 0, NULL), *e = tu_zeros(dtypes[d], 1, &zero);
        sx_rng r, want;
        sx_rng_seed(&r, 3);
        want = r;
        const uint64_t key = sx_rng_u64(&want);
        cr_assert_eq(sx_tensor_dropout_mask(s, &r, 0.5), SX_OK);
        cr_assert(same_rng(&r, &want));
        cr_assert_eq(sx_tensor_get(s, 0), ref_value(s->dtype, key, 0, 0.5));
        (void)sx_rng_u64(&want);
        cr_assert_eq(sx_tensor_dropout_mask(e, &r, 0.5), SX_OK);
        cr_assert(same_rng(&r, &want), "an empty mask still takes its draw");
        sx_tensor_free(s);
        sx_tensor_free(e);
    }
}

/* ---------------------------------------------------------------- reproducibility */

Test(tensor_dropout, same_state_same_mask_other_state_other_mask)
{
    const int64_t shape[3] = {33, 17, 129};
    for (int d = 0; d < 2; d++) {
        sx_tensor *a = tu_zeros(dtypes[d], 3, shape), *b = tu_zeros(dtypes[d], 3, shape);
        sx_rng r1, r2;
        sx_rng_seed(&r1, 99);
        r2 = r1;
        cr_assert_eq(sx_tensor_dropout_mask(a, &r1, 0.3), SX_OK);
        cr_assert_eq(sx_tensor_dropout_mask(b, &r2, 0.3), SX_OK);
        cr_assert_eq(memcmp(a->data, b->data, bytes_of(a)), 0, "same state, same mask");
        cr_assert(same_rng(&r1, &r2));
        /* the advanced generator (the next mask) and another seed give other masks */
        cr_assert_eq(sx_tensor_dropout_mask(b, &r2, 0.3), SX_OK);
        cr_assert_neq(memcmp(a->data, b->data, bytes_of(a)), 0, "the next mask differs");
        sx_rng_seed(&r2, 100);
        cr_assert_eq(sx_tensor_dropout_mask(b, &r2, 0.3), SX_OK);
        cr_assert_neq(memcmp(a->data, b->data, bytes_of(a)), 0, "another seed, another mask");
        sx_tensor_free(a);
        sx_tensor_free(b);
    }
}

/* Large odd sizes run in parallel: 1, 2, 3 (local override) and 4 threads give the same bits,
 * and the same as the reference. */
Test(tensor_dropout, thread_count_does_not_matter)
{
    const int64_t n = (1 << 19) + 12345;
    for (int d = 0; d < 2; d++) {
        sx_tensor *want = tu_zeros(dtypes[d], 1, &n), *got = tu_zeros(dtypes[d], 1, &n);
        sx_rng r0, r;
        sx_rng_seed(&r0, 5);
        cr_assert_eq(sx_threads_set(1), SX_OK);
        r = r0;
        cr_assert_eq(sx_tensor_dropout_mask(want, &r, 0.4), SX_OK);
        sx_rng key_rng = r0;
        const uint64_t key = sx_rng_u64(&key_rng);
        for (int64_t i = 0; i < n; i += 997)
            cr_assert_eq(sx_tensor_get(want, i), ref_value(want->dtype, key, i, 0.4));
        const int counts[3] = {2, 4, 3};
        for (int c = 0; c < 3; c++) {
            if (c < 2)
                cr_assert_eq(sx_threads_set(counts[c]), SX_OK);
            else
                cr_assert_eq(sx_threads_set_local(counts[c]), SX_OK);
            memset(got->data, 0x55, bytes_of(got));
            r = r0;
            cr_assert_eq(sx_tensor_dropout_mask(got, &r, 0.4), SX_OK);
            cr_assert_eq(memcmp(got->data, want->data, bytes_of(got)), 0, "%d threads", counts[c]);
            cr_assert(same_rng(&r, &key_rng));
        }
        cr_assert_eq(sx_threads_set_local(0), SX_OK);
        cr_assert_eq(sx_threads_set(0), SX_OK);
        sx_tensor_free(want);
        sx_tensor_free(got);
    }
}

/* ---------------------------------------------------------------- statistics */

/* The fraction of zeros is p within 6 standard deviations over 2^20 elements, from p = 0 (no
 * zero at all) to p close to 1, and every value is exactly 0 or 1/(1-p) in the dtype. */
Test(tensor_dropout, fraction_of_zeros_is_p)
{
    const int64_t n = 1 << 20;
    const double ps[] = {0.0, 1e-5, 1e-3, 0.1, 0.25, 0.5, 0.75, 0.9, 0.999, 0.99999};
    sx_rng r;
    sx_rng_seed(&r, 2024);
    for (int d = 0; d < 2; d++)
        for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
            const double p = ps[k];
            sx_tensor *t = tu_zeros(dtypes[d], 1, &n);
            cr_assert_eq(sx_tensor_dropout_mask(t, &r, p), SX_OK);
            const double keep =
                dtypes[d] == SX_F32 ? (double)(float)(1.0 / (1.0 - p)) : 1.0 / (1.0 - p);
            int64_t zeros = 0;
            for (int64_t i = 0; i < n; i++) {
                const double v = sx_tensor_get(t, i);
                cr_assert(v == 0 || v == keep, "element %lld is %g (p = %g)", (long long)i, v, p);
                zeros += v == 0;
            }
            if (p == 0)
                cr_assert_eq(zeros, 0, "p = 0 drops nothing");
            else
                cr_assert(near_binomial(zeros, n, p), "%lld zeros of %lld for p = %g",
                          (long long)zeros, (long long)n, p);
            sx_tensor_free(t);
        }
}

/* Pairs of elements at distance d (neighbours, and distances that are common block sizes, where
 * a chunked generator that restarted or shared its stream would show) are both dropped with
 * probability p^2; so are elements at the same index of two successive masks. The first two
 * blocks of each common size also differ. */
Test(tensor_dropout, neighbours_blocks_and_successive_masks_are_independent)
{
    const int64_t n = 1 << 20;
    const int64_t dists[] = {1, 2, 3, 4, 8, 16, 64, 1024, 4096, 8192, 16384, 32768, 65536};
    const double ps[] = {0.1, 0.5};
    sx_rng r;
    sx_rng_seed(&r, 77);
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        const double p = ps[k];
        sx_tensor *a = tu_zeros(SX_F32, 1, &n), *b = tu_zeros(SX_F32, 1, &n);
        cr_assert_eq(sx_tensor_dropout_mask(a, &r, p), SX_OK);
        cr_assert_eq(sx_tensor_dropout_mask(b, &r, p), SX_OK);
        for (size_t j = 0; j < sizeof dists / sizeof dists[0]; j++) {
            const int64_t dist = dists[j];
            int64_t both = 0;
            for (int64_t i = 0; i + dist < n; i++)
                both += dropped(a, i) && dropped(a, i + dist);
            cr_assert(near_binomial(both, n - dist, p * p),
                      "p = %g: %lld pairs at distance %lld both dropped of %lld", p,
                      (long long)both, (long long)dist, (long long)(n - dist));
            if (dist >= 4096)
                cr_assert_neq(memcmp(SX_F32P(a), SX_F32P(a) + dist, (size_t)dist * sizeof(float)),
                              0, "blocks of %lld: block 0 equals block 1", (long long)dist);
        }
        int64_t both = 0;
        for (int64_t i = 0; i < n; i++)
            both += dropped(a, i) && dropped(b, i);
        cr_assert(near_binomial(both, n, p * p), "p = %g: successive masks share %lld zeros", p,
                  (long long)both);
        sx_tensor_free(a);
        sx_tensor_free(b);
    }
}

/* ---------------------------------------------------------------- errors */

Test(tensor_dropout, errors_leave_out_and_rng_untouched)
{
    const int64_t s[1] = {10};
    sx_tensor *a = NULL;
    cr_assert_eq(sx_tensor_full(SX_F32, 1, s, 7.0, &a), SX_OK);
    sx_rng r, r0;
    sx_rng_seed(&r, 1);
    r0 = r;
    const double bad[] = {-0.1, -INFINITY, 1.0, 1.5, INFINITY, NAN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(sx_tensor_dropout_mask(a, &r, bad[i]), SX_E_ARG, "p = %g", bad[i]);
        cr_assert(strstr(sx_last_error(), "sx_tensor_dropout_mask"), "%s", sx_last_error());
        cr_assert(strstr(sx_last_error(), "p ="), "%s", sx_last_error());
    }
    cr_assert_eq(sx_tensor_dropout_mask(a, NULL, 0.5), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "rng"), "%s", sx_last_error());
    cr_assert_eq(sx_tensor_dropout_mask(NULL, &r, 0.5), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "out"), "%s", sx_last_error());
    /* a descriptor without data, one with a bad dtype and one with a bad rank */
    sx_tensor nodata = sx_tensor_view(SX_F32, 1, s, NULL);
    cr_assert_eq(sx_tensor_dropout_mask(&nodata, &r, 0.5), SX_E_ARG);
    sx_tensor bad_dtype = *a, bad_rank = *a;
    bad_dtype.dtype = (sx_dtype)7;
    bad_rank.rank = SX_MAX_RANK + 1;
    cr_assert_eq(sx_tensor_dropout_mask(&bad_dtype, &r, 0.5), SX_E_ARG);
    cr_assert_eq(sx_tensor_dropout_mask(&bad_rank, &r, 0.5), SX_E_ARG);
    for (int64_t i = 0; i < a->size; i++)
        cr_assert_eq(sx_tensor_get(a, i), 7.0, "out was written");
    cr_assert(same_rng(&r, &r0), "a failed call took a draw");
    sx_tensor_free(a);
}
