/* Layout kernels (repeat, tile, slice, unslice, concat, split, permute, transpose, pad, one-hot,
 * gather, scatter-add) against plain reference loops over multi-indices, in f32 and f64, on
 * random shapes with size-1 and empty axes; adjoint identities; sizes that take the parallel
 * path (compared bit for bit across thread counts); and every error path. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const sx_dtype dtypes[2] = {SX_F32, SX_F64};

/* ---------------------------------------------------------------- helpers */

static void unravel(int64_t i, int rank, const int64_t *shape, int64_t *idx)
{
    for (int a = rank - 1; a >= 0; a--) {
        idx[a] = i % shape[a];
        i /= shape[a];
    }
}

static int64_t ravel(int rank, const int64_t *shape, const int64_t *idx)
{
    int64_t i = 0;
    for (int a = 0; a < rank; a++)
        i = i * shape[a] + idx[a];
    return i;
}

/* A random shape of rank [rmin, rmax]: dims mostly in 2..dmax, often 1, sometimes 0. */
static int corner_shape(sx_rng *r, int rmin, int rmax, int64_t dmax, int64_t *shape)
{
    int rank = rmin + (int)sx_rng_below(r, (uint64_t)(rmax - rmin + 1));
    for (int a = 0; a < rank; a++) {
        uint64_t u = sx_rng_below(r, 20);
        shape[a] = u == 0 ? 0 : u < 6 ? 1 : 2 + (int64_t)sx_rng_below(r, (uint64_t)dmax - 1);
    }
    return rank;
}

static sx_tensor *filled(sx_dtype dt, int rank, const int64_t *shape, double v)
{
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_full(dt, rank, shape, v, &t), SX_OK, "%s", sx_last_error());
    return t;
}

/* Every element of t equals v (outputs of failed calls keep their sentinel). */
static bool all_equal(const sx_tensor *t, double v)
{
    for (int64_t i = 0; i < t->size; i++)
        if (sx_tensor_get(t, i) != v)
            return false;
    return true;
}

static bool bitwise_equal(const sx_tensor *a, const sx_tensor *b)
{
    return a->dtype == b->dtype && a->size == b->size &&
           memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)) == 0;
}

/* Exact equality, bit for bit (signed zeros included): layout kernels only move values. */
static void assert_same(const sx_tensor *got, const sx_tensor *want, const char *what)
{
    cr_assert(sx_shape_equal(got->rank, got->shape, want->rank, want->shape), "%s: shape", what);
    if (bitwise_equal(got, want))
        return;
    cr_assert(tu_close(got, want, 0, 0), "%s", what); /* names the first wrong element */
    cr_assert_fail("%s: equal values with different bits (signed zero)", what);
}

/* Thread counts the large tests run with: serial, and more threads than this machine's cores
 * so that uneven splits are exercised. */
static const int thread_counts[2] = {1, 3};

/* The large tests need outputs of at least 1 MB to take the parallel paths (layout.c's
 * threshold); f64 gets there with half as many elements as f32. */
static int64_t large_dim(sx_dtype dt, int64_t n)
{
    return dt == SX_F64 ? (n + 1) / 2 : n;
}

static double dot(const sx_tensor *a, const sx_tensor *b)
{
    double s = 0;
    for (int64_t i = 0; i < a->size; i++)
        s += sx_tensor_get(a, i) * sx_tensor_get(b, i);
    return s;
}

static double abs_dot(const sx_tensor *a, const sx_tensor *b)
{
    double s = 0;
    for (int64_t i = 0; i < a->size; i++)
        s += fabs(sx_tensor_get(a, i) * sx_tensor_get(b, i));
    return s;
}

/* ---------------------------------------------------------------- repeat and tile */

static sx_tensor *ref_repeat(const sx_tensor *x, const int64_t *reps, bool tile)
{
    int64_t shape[SX_MAX_RANK], o[SX_MAX_RANK], i[SX_MAX_RANK];
    for (int a = 0; a < x->rank; a++)
        shape[a] = x->shape[a] * reps[a];
    sx_tensor *y = tu_zeros(x->dtype, x->rank, shape);
    for (int64_t k = 0; k < y->size; k++) {
        unravel(k, x->rank, shape, o);
        for (int a = 0; a < x->rank; a++)
            i[a] = tile ? o[a] % x->shape[a] : o[a] / reps[a];
        sx_tensor_set(y, k, sx_tensor_get(x, ravel(x->rank, x->shape, i)));
    }
    return y;
}

static void check_repeat_tile(const sx_tensor *x, const int64_t *reps)
{
    for (int tile = 0; tile < 2; tile++) {
        sx_tensor *want = ref_repeat(x, reps, tile);
        sx_tensor *got = filled(x->dtype, want->rank, want->shape, -7);
        sx_status s = tile ? sx_tensor_tile_out(x, reps, got) : sx_tensor_repeat_out(x, reps, got);
        cr_assert_eq(s, SX_OK, "%s", sx_last_error());
        assert_same(got, want, tile ? "tile" : "repeat");
        sx_tensor_free(want);
        sx_tensor_free(got);
    }
}

Test(tensor_layout, repeat_and_tile_small_examples)
{
    /* The header's examples: [a b] x2 -> [a a b b] (repeat), [a b a b] (tile). */
    double v[6] = {1, 2, 3, 4, 5, 6};
    int64_t s2[1] = {2}, s23[2] = {2, 3}, r2[1] = {2}, r12[2] = {1, 2}, r21[2] = {2, 1};
    sx_tensor *x = NULL, *y = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_F32, 1, s2, v, 2, &x), SX_OK);
    int64_t s4[1] = {4};
    y = tu_zeros(SX_F32, 1, s4);
    cr_assert_eq(sx_tensor_repeat_out(x, r2, y), SX_OK);
    float want_r[4] = {1, 1, 2, 2}, want_t[4] = {1, 2, 1, 2};
    cr_assert_eq(memcmp(y->data, want_r, sizeof want_r), 0);
    cr_assert_eq(sx_tensor_tile_out(x, r2, y), SX_OK);
    cr_assert_eq(memcmp(y->data, want_t, sizeof want_t), 0);
    sx_tensor_free(x);
    sx_tensor_free(y);

    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 2, s23, v, 6, &x), SX_OK);
    int64_t s26[2] = {2, 6}, s43[2] = {4, 3};
    y = tu_zeros(SX_F64, 2, s26);
    cr_assert_eq(sx_tensor_repeat_out(x, r12, y), SX_OK);
    double w1[12] = {1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6};
    cr_assert_eq(memcmp(y->data, w1, sizeof w1), 0);
    cr_assert_eq(sx_tensor_tile_out(x, r12, y), SX_OK);
    double w2[12] = {1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6};
    cr_assert_eq(memcmp(y->data, w2, sizeof w2), 0);
    sx_tensor_free(y);
    y = tu_zeros(SX_F64, 2, s43);
    cr_assert_eq(sx_tensor_repeat_out(x, r21, y), SX_OK);
    double w3[12] = {1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6};
    cr_assert_eq(memcmp(y->data, w3, sizeof w3), 0);
    cr_assert_eq(sx_tensor_tile_out(x, r21, y), SX_OK);
    double w4[12] = {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6};
    cr_assert_eq(memcmp(y->data, w4, sizeof w4), 0);
    sx_tensor_free(x);
    sx_tensor_free(y);
}

Test(tensor_layout, repeat_and_tile_random_shapes)
{
    sx_rng r;
    sx_rng_seed(&r, 11);
    const int64_t choices[4] = {0, 1, 3, 2};
    for (int d = 0; d < 2; d++) {
        for (int it = 0; it < 300; it++) {
            int64_t shape[SX_MAX_RANK], reps[SX_MAX_RANK];
            int rank = corner_shape(&r, 0, 5, 4, shape);
            /* Mostly positive reps so that outputs are not all empty; at most ~20k outputs. */
            int64_t n = 1;
            for (int a = 0; a < rank; a++) {
                reps[a] = choices[sx_rng_below(&r, it % 3 == 0 ? 4 : 3) + (it % 3 == 0 ? 0 : 1)];
                n *= shape[a];
            }
            for (int a = 0; a < rank; a++)
                if (n * reps[a] <= 20000)
                    n *= reps[a] > 0 ? reps[a] : 1;
                else
                    reps[a] = 1;
            sx_tensor *x = tu_rand(&r, dtypes[d], rank, shape, -1, 1);
            check_repeat_tile(x, reps);
            sx_tensor_free(x);
        }
    }
}

Test(tensor_layout, repeat_and_tile_rank0_and_merged_axes)
{
    sx_rng r;
    sx_rng_seed(&r, 12);
    for (int d = 0; d < 2; d++) {
        sx_tensor *s = tu_rand(&r, dtypes[d], 0, NULL, -1, 1);
        check_repeat_tile(s, NULL);
        sx_tensor_free(s);
        /* Shapes whose axes merge in each of the ways repeat and tile allow. */
        const int64_t shapes[][4] = {{1, 5, 1, 3}, {4, 1, 3, 1}, {2, 3, 4, 5}, {1, 1, 1, 7}};
        const int64_t repss[][4] = {{3, 1, 2, 1}, {1, 2, 1, 3}, {1, 1, 2, 1},
                                    {2, 3, 1, 1}, {1, 1, 1, 1}, {2, 2, 2, 2}};
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 6; j++) {
                sx_tensor *x = tu_rand(&r, dtypes[d], 4, shapes[i], -1, 1);
                check_repeat_tile(x, repss[j]);
                sx_tensor_free(x);
            }
    }
}

/* Large outputs take the parallel paths; the result must be bit-identical for 1, 2 and 3
 * threads and equal to the reference. */
Test(tensor_layout, repeat_and_tile_large_parallel)
{
    sx_rng r;
    sx_rng_seed(&r, 13);
    const int64_t shapes[][4] = {{12, 10, 16, 12}, {1, 1, 1, 50000},  {3, 1, 12000, 1},
                                 {150, 1, 1, 400}, {1, 1, 1, 300000}, {1, 1, 2, 70000},
                                 {1, 1, 1, 100000}};
    /* Cases 4 and 5 have blocks over 1 MB to replicate (recomputed rather than copied) in
     * repeat and tile respectively, when serial; case 6 merges to one axis. */
    const int64_t repss[][4] = {{2, 2, 2, 2}, {1, 1, 2, 3}, {2, 1, 2, 3}, {1, 3, 1, 2},
                                {2, 1, 1, 1}, {1, 1, 2, 2}, {1, 1, 1, 3}};
    int n0 = sx_threads_get();
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 7; i++) {
            /* Cases 4 and 5 move whole rows with memcpy, whatever the dtype: f64 suffices. */
            if (dtypes[d] == SX_F32 && (i == 4 || i == 5))
                continue;
            int64_t shape[4] = {shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]};
            int big = 0;
            for (int a = 1; a < 4; a++)
                big = shape[a] > shape[big] ? a : big;
            shape[big] = large_dim(dtypes[d], shape[big]);
            sx_tensor *x = tu_rand(&r, dtypes[d], 4, shape, -1, 1);
            for (int tile = 0; tile < 2; tile++) {
                sx_tensor *want = ref_repeat(x, repss[i], tile);
                sx_tensor *prev = NULL;
                for (int nt = 1; nt <= 3; nt += 2) {
                    cr_assert_eq(sx_threads_set(nt), SX_OK);
                    sx_tensor *got = tu_zeros(x->dtype, 4, want->shape);
                    sx_status s = tile ? sx_tensor_tile_out(x, repss[i], got)
                                       : sx_tensor_repeat_out(x, repss[i], got);
                    cr_assert_eq(s, SX_OK, "%s", sx_last_error());
                    if (prev == NULL)
                        assert_same(got, want, "large repeat/tile");
                    else
                        cr_assert(bitwise_equal(got, prev), "thread count changed the result");
                    sx_tensor_free(prev);
                    prev = got;
                }
                sx_tensor_free(prev);
                sx_tensor_free(want);
            }
            sx_tensor_free(x);
        }
    cr_assert_eq(sx_threads_set(n0), SX_OK);
}

Test(tensor_layout, repeat_and_tile_errors)
{
    int64_t s[2] = {2, 3}, good[2] = {2, 1}, neg[2] = {2, -1}, so[2] = {4, 3}, bad[2] = {4, 4};
    sx_tensor *x = filled(SX_F32, 2, s, 1), *out = filled(SX_F32, 2, so, 9);
    sx_tensor *out64 = filled(SX_F64, 2, so, 9), *wrong = filled(SX_F32, 2, bad, 9);
    sx_status (*fns[2])(const sx_tensor *, const int64_t *, sx_tensor *) = {sx_tensor_repeat_out,
                                                                            sx_tensor_tile_out};
    for (int f = 0; f < 2; f++) {
        cr_assert_eq(fns[f](x, neg, out), SX_E_ARG);
        cr_assert(strstr(sx_last_error(), "reps[1]") != NULL, "%s", sx_last_error());
        cr_assert_eq(fns[f](x, NULL, out), SX_E_ARG);
        cr_assert_eq(fns[f](NULL, good, out), SX_E_ARG);
        cr_assert_eq(fns[f](x, good, NULL), SX_E_ARG);
        cr_assert_eq(fns[f](x, good, wrong), SX_E_SHAPE);
        cr_assert(strstr(sx_last_error(), "(4,4)") && strstr(sx_last_error(), "(4,3)"), "%s",
                  sx_last_error());
        cr_assert_eq(fns[f](x, good, out64), SX_E_DTYPE);
        int64_t huge[2] = {INT64_MAX / 2, 3}, over[2] = {1, INT64_MAX};
        cr_assert_eq(fns[f](x, huge, out), SX_E_SHAPE);
        cr_assert_eq(fns[f](x, over, out), SX_E_SHAPE);
        cr_assert(all_equal(out, 9) && all_equal(out64, 9) && all_equal(wrong, 9));
    }
    sx_tensor_free(x);
    sx_tensor_free(out);
    sx_tensor_free(out64);
    sx_tensor_free(wrong);
}

/* ---------------------------------------------------------------- slices */

/* Python's rules written as a walk: the indices x[start:stop:step] visits on an axis of n. */
static int64_t ref_slice_indices(int64_t n, sx_slice s, int64_t *out)
{
    int64_t start = s.start, stop = s.stop, step = s.step, cnt = 0;
    if (step > 0) {
        if (start < 0)
            start += n;
        if (start < 0)
            start = 0;
        if (stop != SX_SLICE_END && stop < 0)
            stop += n;
        if (stop > n)
            stop = n;
        for (int64_t i = start; i<stop; i = step> n ? stop : i + step)
            out[cnt++] = i;
    } else {
        if (start < 0)
            start += n;
        if (start > n - 1)
            start = n - 1;
        if (stop == SX_SLICE_END)
            stop = -1;
        else if (stop < 0 && (stop += n) < 0)
            stop = -1;
        for (int64_t i = start; i > stop && i >= 0; i = step < -n ? stop : i + step)
            out[cnt++] = i;
    }
    return cnt;
}

/* x[s0, s1, ...] by looping over the output and mapping each axis through its index list. */
static sx_tensor *ref_slice(const sx_tensor *x, const sx_slice *s)
{
    int64_t lists[SX_MAX_RANK][128], shape[SX_MAX_RANK], o[SX_MAX_RANK], i[SX_MAX_RANK];
    for (int a = 0; a < x->rank; a++)
        shape[a] = ref_slice_indices(x->shape[a], s[a], lists[a]);
    sx_tensor *y = tu_zeros(x->dtype, x->rank, shape);
    for (int64_t k = 0; k < y->size; k++) {
        unravel(k, x->rank, shape, o);
        for (int a = 0; a < x->rank; a++)
            i[a] = lists[a][o[a]];
        sx_tensor_set(y, k, sx_tensor_get(x, ravel(x->rank, x->shape, i)));
    }
    return y;
}

static int64_t rand_bound(sx_rng *r, int64_t n)
{
    uint64_t u = sx_rng_below(r, 10);
    if (u == 0)
        return SX_SLICE_END;
    if (u == 1)
        return INT64_MIN + 1;
    return -n - 3 + (int64_t)sx_rng_below(r, (uint64_t)(2 * n + 7));
}

static sx_slice rand_slice(sx_rng *r, int64_t n)
{
    sx_slice s = {rand_bound(r, n), rand_bound(r, n), 0};
    uint64_t u = sx_rng_below(r, 12);
    s.step = u < 3 ? 1 : u < 5 ? -1 : u < 7 ? 2 : u < 9 ? -2 : u < 10 ? 3 : u < 11 ? -3 : 0;
    if (s.step == 0)
        s.step = sx_rng_below(r, 2) ? INT64_MAX : INT64_MIN;
    if (sx_rng_below(r, 6) == 0)
        s = SX_SLICE_ALL;
    return s;
}

Test(tensor_layout, slice_shape_matches_python)
{
    /* (n, start, stop, step) -> length and first index, from Python's list(range(n))[a:b:c];
     * E stands for an omitted bound. */
    const int64_t E = SX_SLICE_END;
    const struct {
        int64_t n, start, stop, step, len, first;
    } cases[] = {
        {10, 2, 8, 3, 2, 2},  {10, -3, 2, -2, 3, 7},   {10, E, E, -1, 10, 9},
        {10, 0, E, 2, 5, 0},  {5, -100, 100, 1, 5, 0}, {5, 100, -100, -1, 5, 4},
        {5, 3, 3, 1, 0, -1},  {0, E, E, -1, 0, -1},    {0, 0, 5, 1, 0, -1},
        {7, -1, E, -3, 3, 6}, {7, E, -8, -1, 7, 6},    {7, 6, -9, -2, 4, 6},
        {1, E, E, -5, 1, 0},  {4, -5, E, 1, 4, 0},     {9, 8, 0, -4, 2, 8},
        {6, -2, -1, 1, 1, 4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sx_slice s = {cases[c].start, cases[c].stop, cases[c].step};
        int64_t len = -1, first = -1;
        cr_assert_eq(sx_slice_shape("t", 1, &cases[c].n, &s, &len, &first), SX_OK);
        cr_assert_eq(len, cases[c].len, "case %zu: len %lld", c, (long long)len);
        if (len > 0)
            cr_assert_eq(first, cases[c].first, "case %zu: first %lld", c, (long long)first);
        int64_t list[64];
        cr_assert_eq(ref_slice_indices(cases[c].n, s, list), cases[c].len, "reference, case %zu",
                     c);
    }
    /* Extreme steps: one element at most. */
    int64_t n = 5, len, first;
    sx_slice big = {1, E, INT64_MAX}, small = {3, E, INT64_MIN};
    cr_assert_eq(sx_slice_shape("t", 1, &n, &big, &len, &first), SX_OK);
    cr_assert(len == 1 && first == 1);
    cr_assert_eq(sx_slice_shape("t", 1, &n, &small, &len, &first), SX_OK);
    cr_assert(len == 1 && first == 3);
    /* Rank 0: nothing to resolve, slices may be NULL. */
    cr_assert_eq(sx_slice_shape("t", 0, NULL, NULL, NULL, NULL), SX_OK);
    /* Without a caller name the message names sx_slice_shape. */
    sx_slice zero = {0, 1, 0};
    cr_assert_eq(sx_slice_shape(NULL, 1, &n, &zero, &len, &first), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "sx_slice_shape") != NULL, "%s", sx_last_error());
}

Test(tensor_layout, slice_random)
{
    sx_rng r;
    sx_rng_seed(&r, 21);
    for (int d = 0; d < 2; d++)
        for (int it = 0; it < 400; it++) {
            int64_t shape[SX_MAX_RANK], len[SX_MAX_RANK], first[SX_MAX_RANK];
            sx_slice s[SX_MAX_RANK];
            int rank = corner_shape(&r, 0, 5, 6, shape);
            for (int a = 0; a < rank; a++)
                s[a] = rand_slice(&r, shape[a]);
            sx_tensor *x = tu_rand(&r, dtypes[d], rank, shape, -1, 1);
            sx_tensor *want = ref_slice(x, s);
            cr_assert_eq(sx_slice_shape("t", rank, shape, s, len, first), SX_OK);
            cr_assert(sx_shape_equal(rank, len, want->rank, want->shape), "slice shape");
            sx_tensor *got = filled(x->dtype, rank, len, -7);
            cr_assert_eq(sx_tensor_slice_out(x, s, got), SX_OK, "%s", sx_last_error());
            assert_same(got, want, "slice");
            sx_tensor_free(x);
            sx_tensor_free(want);
            sx_tensor_free(got);
        }
}

/* unslice is the adjoint of slice: <slice(x), g> == <x, unslice(g)>, and unslice(g) is g at the
 * sliced positions and zero elsewhere. */
Test(tensor_layout, unslice_is_adjoint_of_slice)
{
    sx_rng r;
    sx_rng_seed(&r, 22);
    for (int d = 0; d < 2; d++)
        for (int it = 0; it < 300; it++) {
            int64_t shape[SX_MAX_RANK], len[SX_MAX_RANK], first[SX_MAX_RANK];
            sx_slice s[SX_MAX_RANK];
            int rank = corner_shape(&r, 0, 5, 6, shape);
            for (int a = 0; a < rank; a++)
                s[a] = rand_slice(&r, shape[a]);
            cr_assert_eq(sx_slice_shape("t", rank, shape, s, len, first), SX_OK);
            sx_tensor *x = tu_rand(&r, dtypes[d], rank, shape, -1, 1);
            sx_tensor *g = tu_rand(&r, dtypes[d], rank, len, -1, 1);
            sx_tensor *sx = filled(dtypes[d], rank, len, -7);
            sx_tensor *ug = filled(dtypes[d], rank, shape, -7);
            cr_assert_eq(sx_tensor_slice_out(x, s, sx), SX_OK);
            cr_assert_eq(sx_tensor_unslice_out(g, s, ug), SX_OK, "%s", sx_last_error());
            double lhs = dot(sx, g), rhs = dot(x, ug);
            cr_assert(fabs(lhs - rhs) <= 1e-12 * (1 + abs_dot(sx, g)), "%g vs %g", lhs, rhs);
            /* Direct: scatter g by the reference index lists into zeros. */
            int64_t lists[SX_MAX_RANK][64], o[SX_MAX_RANK], i[SX_MAX_RANK];
            for (int a = 0; a < rank; a++)
                ref_slice_indices(shape[a], s[a], lists[a]);
            sx_tensor *want = tu_zeros(dtypes[d], rank, shape);
            for (int64_t k = 0; k < g->size; k++) {
                unravel(k, rank, len, o);
                for (int a = 0; a < rank; a++)
                    i[a] = lists[a][o[a]];
                sx_tensor_set(want, ravel(rank, shape, i), sx_tensor_get(g, k));
            }
            assert_same(ug, want, "unslice");
            sx_tensor_free(x);
            sx_tensor_free(g);
            sx_tensor_free(sx);
            sx_tensor_free(ug);
            sx_tensor_free(want);
        }
}

Test(tensor_layout, slice_and_unslice_large_parallel)
{
    sx_rng r;
    sx_rng_seed(&r, 23);
    int64_t shape[3] = {64, 90, 96};
    const sx_slice cases[][3] = {
        {SX_SLICE_ALL, {5, -5, 1}, SX_SLICE_ALL},
        {{SX_SLICE_END, SX_SLICE_END, -1}, SX_SLICE_ALL, {SX_SLICE_END, SX_SLICE_END, -1}},
        {{SX_SLICE_END, SX_SLICE_END, -1}, {0, SX_SLICE_END, 2}, {1, SX_SLICE_END, 1}},
        {SX_SLICE_ALL, SX_SLICE_ALL, {0, SX_SLICE_END, 2}},
    };
    int n0 = sx_threads_get();
    for (int d = 0; d < 2; d++) {
        shape[0] = large_dim(dtypes[d], 64);
        sx_tensor *x = tu_rand(&r, dtypes[d], 3, shape, -1, 1);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            sx_tensor *want = ref_slice(x, cases[c]);
            sx_tensor *got1 = tu_zeros(dtypes[d], 3, want->shape);
            sx_tensor *got2 = tu_zeros(dtypes[d], 3, want->shape);
            cr_assert_eq(sx_threads_set(1), SX_OK);
            cr_assert_eq(sx_tensor_slice_out(x, cases[c], got1), SX_OK);
            cr_assert_eq(sx_threads_set(3), SX_OK);
            cr_assert_eq(sx_tensor_slice_out(x, cases[c], got2), SX_OK);
            assert_same(got1, want, "large slice");
            cr_assert(bitwise_equal(got1, got2));
            /* Unslice back: the slice of the unsliced tensor is the original slice. */
            sx_tensor *u = filled(dtypes[d], 3, shape, 5);
            cr_assert_eq(sx_tensor_unslice_out(want, cases[c], u), SX_OK);
            cr_assert_eq(sx_tensor_slice_out(u, cases[c], got2), SX_OK);
            assert_same(got2, want, "slice of unslice");
            double zeros = 0;
            for (int64_t i = 0; i < u->size; i++)
                zeros += sx_tensor_get(u, i) == 0;
            cr_assert_eq((int64_t)zeros, u->size - want->size, "everything else is zeroed");
            sx_tensor_free(want);
            sx_tensor_free(got1);
            sx_tensor_free(got2);
            sx_tensor_free(u);
        }
        sx_tensor_free(x);
    }
    cr_assert_eq(sx_threads_set(n0), SX_OK);
}

Test(tensor_layout, slice_errors)
{
    int64_t s[2] = {4, 5}, s2[2] = {2, 5}, bad[2] = {3, 5};
    sx_slice ok[2] = {{0, 2, 1}, SX_SLICE_ALL}, zero[2] = {{0, 2, 0}, SX_SLICE_ALL};
    sx_tensor *x = filled(SX_F64, 2, s, 1), *out = filled(SX_F64, 2, s2, 9);
    sx_tensor *wrong = filled(SX_F64, 2, bad, 9), *out32 = filled(SX_F32, 2, s2, 9);
    sx_tensor *full = filled(SX_F64, 2, s, 9), *full32 = filled(SX_F32, 2, s, 9);
    cr_assert_eq(sx_tensor_slice_out(x, zero, out), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "step") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_slice_out(x, NULL, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_slice_out(NULL, ok, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_slice_out(x, ok, wrong), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_slice_out(x, ok, out32), SX_E_DTYPE);
    cr_assert(all_equal(out, 9) && all_equal(wrong, 9) && all_equal(out32, 9));
    /* unslice: g must have the slice's shape and out's dtype. */
    cr_assert_eq(sx_tensor_unslice_out(wrong, ok, full), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "(3,5)") && strstr(sx_last_error(), "(2,5)"), "%s",
              sx_last_error());
    cr_assert_eq(sx_tensor_unslice_out(out, zero, full), SX_E_ARG);
    cr_assert_eq(sx_tensor_unslice_out(out, ok, full32), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_unslice_out(out, NULL, full), SX_E_ARG);
    cr_assert_eq(sx_tensor_unslice_out(NULL, ok, full), SX_E_ARG);
    cr_assert_eq(sx_tensor_unslice_out(out, ok, NULL), SX_E_ARG);
    cr_assert(all_equal(full, 9) && all_equal(full32, 9));
    int64_t neg[1] = {-1}, len;
    cr_assert_eq(sx_slice_shape("t", 1, neg, ok, &len, NULL), SX_E_SHAPE);
    cr_assert_eq(sx_slice_shape("t", 9, s, ok, &len, NULL), SX_E_RANK);
    sx_tensor_free(x);
    sx_tensor_free(out);
    sx_tensor_free(wrong);
    sx_tensor_free(out32);
    sx_tensor_free(full);
    sx_tensor_free(full32);
}

/* ---------------------------------------------------------------- concat and split */

static sx_tensor *ref_concat(int n, sx_tensor *const *xs, int ax)
{
    int64_t shape[SX_MAX_RANK], o[SX_MAX_RANK];
    const int rank = xs[0]->rank;
    memcpy(shape, xs[0]->shape, sizeof shape);
    shape[ax] = 0;
    for (int i = 0; i < n; i++)
        shape[ax] += xs[i]->shape[ax];
    sx_tensor *y = tu_zeros(xs[0]->dtype, rank, shape);
    for (int64_t k = 0; k < y->size; k++) {
        unravel(k, rank, shape, o);
        int i = 0;
        while (o[ax] >= xs[i]->shape[ax]) {
            o[ax] -= xs[i]->shape[ax];
            i++;
        }
        sx_tensor_set(y, k, sx_tensor_get(xs[i], ravel(rank, xs[i]->shape, o)));
    }
    return y;
}

/* Concat n random tensors of shape `base` with a random size along `axis` (0..5, or about
 * base[axis] when `large`), compare with the reference, split back and compare with the parts. */
static void check_concat_split(sx_rng *r, sx_dtype dt, int rank, const int64_t *base, int n,
                               int axis, bool large)
{
    sx_tensor *xs[128], *back[128];
    cr_assert(n >= 1 && n <= 128);
    const int ax = axis < 0 ? axis + rank : axis;
    for (int i = 0; i < n; i++) {
        int64_t shape[SX_MAX_RANK];
        memcpy(shape, base, sizeof(int64_t) * (size_t)rank);
        uint64_t u = sx_rng_below(r, 8);
        shape[ax] = u == 0 ? 0 : u < 3 ? 1 : (int64_t)sx_rng_below(r, 5) + 1;
        if (large)
            shape[ax] = base[ax] + (int64_t)sx_rng_below(r, 3);
        xs[i] = tu_rand(r, dt, rank, shape, -1, 1);
    }
    sx_tensor *want = ref_concat(n, xs, ax);
    sx_tensor *got = filled(dt, rank, want->shape, -7);
    const int n0 = sx_threads_get();
    for (int t = 0; t < (large ? 2 : 1); t++) {
        if (large)
            cr_assert_eq(sx_threads_set(thread_counts[t]), SX_OK);
        cr_assert_eq(sx_tensor_concat_out(n, (const sx_tensor *const *)xs, axis, got), SX_OK, "%s",
                     sx_last_error());
        assert_same(got, want, "concat");
        for (int i = 0; i < n; i++)
            back[i] = filled(dt, rank, xs[i]->shape, -7);
        cr_assert_eq(sx_tensor_split_out(got, axis, n, back), SX_OK, "%s", sx_last_error());
        for (int i = 0; i < n; i++) {
            assert_same(back[i], xs[i], "split");
            sx_tensor_free(back[i]);
        }
    }
    cr_assert_eq(sx_threads_set(n0), SX_OK);
    for (int i = 0; i < n; i++)
        sx_tensor_free(xs[i]);
    sx_tensor_free(want);
    sx_tensor_free(got);
}

Test(tensor_layout, concat_and_split_round_trip)
{
    sx_rng r;
    sx_rng_seed(&r, 31);
    for (int d = 0; d < 2; d++)
        for (int it = 0; it < 200; it++) {
            int64_t shape[SX_MAX_RANK];
            int rank = corner_shape(&r, 1, 5, 4, shape);
            int n = 1 + (int)sx_rng_below(&r, 4);
            int axis = (int)sx_rng_below(&r, (uint64_t)rank);
            if (sx_rng_below(&r, 3) == 0)
                axis -= rank; /* negative axes count from the end */
            check_concat_split(&r, dtypes[d], rank, shape, n, axis, false);
        }
}

Test(tensor_layout, concat_many_and_large)
{
    sx_rng r;
    sx_rng_seed(&r, 32);
    int64_t small[3] = {3, 2, 4}, big[3] = {40, 50, 40}, one[2] = {1, 600000};
    int n0 = sx_threads_get();
    for (int d = 0; d < 2; d++) {
        big[0] = large_dim(dtypes[d], 40);
        one[1] = large_dim(dtypes[d], 600000);
        check_concat_split(&r, dtypes[d], 3, small, 100, 1, false); /* many parts */
        check_concat_split(&r, dtypes[d], 3, big, 4, 0, true);
        check_concat_split(&r, dtypes[d], 3, big, 4, 2, true);
        check_concat_split(&r, dtypes[d], 3, big, 4, -2, true);
        /* Two huge pieces: each copy is split over the threads. The result is a on top of b. */
        cr_assert_eq(sx_threads_set(3), SX_OK);
        sx_tensor *a = tu_rand(&r, dtypes[d], 2, one, -1, 1),
                  *b = tu_rand(&r, dtypes[d], 2, one, -1, 1);
        sx_tensor *xs[2] = {a, b};
        int64_t two[2] = {2, one[1]};
        sx_tensor *got = tu_zeros(dtypes[d], 2, two);
        cr_assert_eq(sx_tensor_concat_out(2, (const sx_tensor *const *)xs, 0, got), SX_OK);
        const size_t half = (size_t)a->size * sx_dtype_size(a->dtype);
        cr_assert(memcmp(got->data, a->data, half) == 0, "huge concat, first part");
        cr_assert(memcmp((char *)got->data + half, b->data, half) == 0, "huge concat, second");
        sx_tensor *back[2] = {filled(dtypes[d], 2, one, 0), filled(dtypes[d], 2, one, 0)};
        cr_assert_eq(sx_tensor_split_out(got, 0, 2, back), SX_OK);
        assert_same(back[0], a, "huge split");
        assert_same(back[1], b, "huge split");
        sx_tensor_free(a);
        sx_tensor_free(b);
        sx_tensor_free(got);
        sx_tensor_free(back[0]);
        sx_tensor_free(back[1]);
    }
    cr_assert_eq(sx_threads_set(n0), SX_OK);
}

Test(tensor_layout, concat_and_split_errors)
{
    int64_t s23[2] = {2, 3}, s24[2] = {2, 4}, s33[2] = {3, 3}, s43[2] = {4, 3}, s53[2] = {5, 3};
    int64_t s3[1] = {3}, s13[2] = {1, 3};
    sx_tensor *a = filled(SX_F32, 2, s23, 1), *b = filled(SX_F32, 2, s23, 2);
    sx_tensor *c = filled(SX_F32, 2, s24, 3), *d64 = filled(SX_F64, 2, s23, 4);
    sx_tensor *v = filled(SX_F32, 1, s3, 5), *sc = filled(SX_F32, 0, NULL, 6);
    sx_tensor *out = filled(SX_F32, 2, s43, 9), *wrong = filled(SX_F32, 2, s53, 9);
    const sx_tensor *ab[2] = {a, b}, *ac[2] = {a, c}, *ad[2] = {a, d64}, *av[2] = {a, v};
    const sx_tensor *an[2] = {a, NULL}, *ss[2] = {sc, sc};
    cr_assert_eq(sx_tensor_concat_out(2, ac, 0, out), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "(2,3)") && strstr(sx_last_error(), "(2,4)"), "%s",
              sx_last_error());
    cr_assert_eq(sx_tensor_concat_out(2, ad, 0, out), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_concat_out(2, av, 0, out), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_concat_out(2, an, 0, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_concat_out(2, ab, 2, out), SX_E_AXIS);
    cr_assert_eq(sx_tensor_concat_out(2, ab, -3, out), SX_E_AXIS);
    cr_assert_eq(sx_tensor_concat_out(2, ss, 0, out), SX_E_AXIS);
    cr_assert_eq(sx_tensor_concat_out(0, ab, 0, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_concat_out(2, NULL, 0, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_concat_out(2, ab, 0, wrong), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_concat_out(2, ab, 1, out), SX_E_SHAPE);
    /* A result too large to describe (views over a dummy buffer that is never read). */
    float dummy = 0;
    int64_t huge[1] = {INT64_MAX / 12};
    sx_tensor h = sx_tensor_view(SX_F32, 1, huge, &dummy);
    const sx_tensor *hh[2] = {&h, &h};
    cr_assert_eq(sx_tensor_concat_out(2, hh, 0, out), SX_E_SHAPE);
    cr_assert(all_equal(out, 9) && all_equal(wrong, 9));

    /* split: sizes must add up, other dims agree, same dtype. */
    sx_tensor *p1 = filled(SX_F32, 2, s13, 9), *p3 = filled(SX_F32, 2, s33, 9);
    sx_tensor *p2 = filled(SX_F32, 2, s23, 9), *q64 = filled(SX_F64, 2, s33, 9);
    sx_tensor *q4 = filled(SX_F32, 2, s24, 9);
    sx_tensor *short_[2] = {p1, p2}, *long_[2] = {p3, p2}, *mixed[2] = {p1, q64};
    sx_tensor *badw[2] = {p1, q4}, *nul[2] = {p1, NULL};
    cr_assert_eq(sx_tensor_split_out(out, 0, 2, short_), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "add up") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_split_out(out, 0, 2, long_), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_split_out(out, 0, 2, mixed), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_split_out(out, 0, 2, badw), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_split_out(out, 0, 2, nul), SX_E_ARG);
    cr_assert_eq(sx_tensor_split_out(out, 2, 2, short_), SX_E_AXIS);
    cr_assert_eq(sx_tensor_split_out(out, 0, 0, short_), SX_E_ARG);
    cr_assert_eq(sx_tensor_split_out(out, 0, 2, NULL), SX_E_ARG);
    cr_assert_eq(sx_tensor_split_out(NULL, 0, 2, short_), SX_E_ARG);
    cr_assert_eq(sx_tensor_split_out(sc, 0, 1, short_), SX_E_AXIS);
    cr_assert(all_equal(p1, 9) && all_equal(p2, 9) && all_equal(p3, 9) && all_equal(q64, 9) &&
              all_equal(q4, 9));
    sx_tensor *ts[] = {a, b, c, d64, v, sc, out, wrong, p1, p2, p3, q64, q4};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        sx_tensor_free(ts[i]);
}

/* ---------------------------------------------------------------- permute and transpose */

static sx_tensor *ref_permute(const sx_tensor *x, const int *perm)
{
    int64_t shape[SX_MAX_RANK], o[SX_MAX_RANK], i[SX_MAX_RANK];
    for (int a = 0; a < x->rank; a++)
        shape[a] = x->shape[perm[a]];
    sx_tensor *y = tu_zeros(x->dtype, x->rank, shape);
    for (int64_t k = 0; k < y->size; k++) {
        unravel(k, x->rank, shape, o);
        for (int a = 0; a < x->rank; a++)
            i[perm[a]] = o[a];
        sx_tensor_set(y, k, sx_tensor_get(x, ravel(x->rank, x->shape, i)));
    }
    return y;
}

static void rand_perm(sx_rng *r, int rank, int *perm)
{
    for (int a = 0; a < rank; a++)
        perm[a] = a;
    for (int a = rank - 1; a > 0; a--) {
        int j = (int)sx_rng_below(r, (uint64_t)a + 1), t = perm[a];
        perm[a] = perm[j];
        perm[j] = t;
    }
}

/* permute (or transpose, when `transpose`) against the reference; `large` runs it with each of
 * thread_counts. */
static void check_permute(const sx_tensor *x, const int *perm, bool transpose, bool large)
{
    sx_tensor *want = ref_permute(x, perm);
    sx_tensor *got = filled(x->dtype, x->rank, want->shape, -7);
    const int n0 = sx_threads_get();
    for (int t = 0; t < (large ? 2 : 1); t++) {
        if (large)
            cr_assert_eq(sx_threads_set(thread_counts[t]), SX_OK);
        sx_status s =
            transpose ? sx_tensor_transpose_out(x, got) : sx_tensor_permute_out(x, perm, got);
        cr_assert_eq(s, SX_OK, "%s", sx_last_error());
        assert_same(got, want, transpose ? "transpose" : "permute");
    }
    cr_assert_eq(sx_threads_set(n0), SX_OK);
    sx_tensor_free(want);
    sx_tensor_free(got);
}

Test(tensor_layout, permute_random)
{
    sx_rng r;
    sx_rng_seed(&r, 41);
    for (int d = 0; d < 2; d++)
        for (int it = 0; it < 300; it++) {
            int64_t shape[SX_MAX_RANK];
            int perm[SX_MAX_RANK];
            int rank = corner_shape(&r, 0, 5, 5, shape);
            rand_perm(&r, rank, perm);
            sx_tensor *x = tu_rand(&r, dtypes[d], rank, shape, -1, 1);
            check_permute(x, perm, false, false);
            if (rank >= 2) {
                int pt[SX_MAX_RANK];
                for (int a = 0; a < rank; a++)
                    pt[a] = a;
                pt[rank - 2] = rank - 1;
                pt[rank - 1] = rank - 2;
                check_permute(x, pt, true, false);
            }
            sx_tensor_free(x);
        }
}

Test(tensor_layout, permute_large_and_transpose)
{
    sx_rng r;
    sx_rng_seed(&r, 42);
    int64_t s2[2] = {533, 517}, s4[4] = {8, 30, 40, 33}, s3[3] = {5, 130, 457};
    const int p2[2] = {1, 0}, p4a[4] = {0, 3, 1, 2}, p4b[4] = {0, 2, 3, 1}, p4c[4] = {3, 2, 1, 0};
    const int pt[3] = {0, 2, 1};
    for (int d = 0; d < 2; d++) {
        s2[0] = large_dim(dtypes[d], 533);
        s4[0] = large_dim(dtypes[d], 8);
        s3[0] = large_dim(dtypes[d], 5);
        sx_tensor *x2 = tu_rand(&r, dtypes[d], 2, s2, -1, 1);
        sx_tensor *x4 = tu_rand(&r, dtypes[d], 4, s4, -1, 1);
        sx_tensor *x3 = tu_rand(&r, dtypes[d], 3, s3, -1, 1);
        check_permute(x2, p2, true, true);
        check_permute(x3, pt, true, true);
        check_permute(x4, p4a, false, true); /* NHWC -> NCHW */
        check_permute(x4, p4b, false, true); /* NCHW -> NHWC */
        check_permute(x4, p4c, false, true);
        /* an image's 3 channels moved last and back (a short innermost axis: rows along the
         * long one) */
        int64_t si[4] = {2, 3, 67, 45};
        sx_tensor *xi = tu_rand(&r, dtypes[d], 4, si, -1, 1);
        check_permute(xi, p4b, false, true);
        int64_t sj[4] = {2, 67, 45, 3};
        sx_tensor *xj = tu_rand(&r, dtypes[d], 4, sj, -1, 1);
        check_permute(xj, p4a, false, true);
        sx_tensor_free(xi);
        sx_tensor_free(xj);
        sx_tensor_free(x2);
        sx_tensor_free(x3);
        sx_tensor_free(x4);
    }
}

Test(tensor_layout, permute_errors)
{
    int64_t s[3] = {2, 3, 4}, so[3] = {4, 3, 2}, s1[1] = {5};
    sx_tensor *x = filled(SX_F32, 3, s, 1), *out = filled(SX_F32, 3, so, 9);
    sx_tensor *out64 = filled(SX_F64, 3, so, 9), *v = filled(SX_F32, 1, s1, 1);
    const int good[3] = {2, 1, 0}, dup[3] = {0, 0, 1}, range[3] = {0, 1, 3}, neg[3] = {-1, 0, 1};
    cr_assert_eq(sx_tensor_permute_out(x, dup, out), SX_E_AXIS);
    cr_assert(strstr(sx_last_error(), "permutation") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_permute_out(x, range, out), SX_E_AXIS);
    cr_assert_eq(sx_tensor_permute_out(x, neg, out), SX_E_AXIS);
    cr_assert_eq(sx_tensor_permute_out(x, NULL, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_permute_out(NULL, good, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_permute_out(x, good, out64), SX_E_DTYPE);
    const int id[3] = {0, 1, 2};
    cr_assert_eq(sx_tensor_permute_out(x, id, out), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_transpose_out(v, out), SX_E_RANK);
    cr_assert_eq(sx_tensor_transpose_out(x, out), SX_E_SHAPE);
    cr_assert(all_equal(out, 9) && all_equal(out64, 9));
    sx_tensor_free(x);
    sx_tensor_free(out);
    sx_tensor_free(out64);
    sx_tensor_free(v);
}

/* ---------------------------------------------------------------- pad */

static sx_tensor *ref_pad(const sx_tensor *x, const int64_t *b, const int64_t *e, double value)
{
    int64_t shape[SX_MAX_RANK], o[SX_MAX_RANK];
    for (int a = 0; a < x->rank; a++)
        shape[a] = b[a] + x->shape[a] + e[a];
    sx_tensor *y = tu_zeros(x->dtype, x->rank, shape);
    for (int64_t k = 0; k < y->size; k++) {
        unravel(k, x->rank, shape, o);
        bool inside = true;
        for (int a = 0; a < x->rank; a++) {
            o[a] -= b[a];
            inside = inside && o[a] >= 0 && o[a] < x->shape[a];
        }
        sx_tensor_set(y, k, inside ? sx_tensor_get(x, ravel(x->rank, x->shape, o)) : value);
    }
    return y;
}

/* pad against the reference; `large` runs it with each of thread_counts. */
static void check_pad(const sx_tensor *x, const int64_t *b, const int64_t *e, double value,
                      bool large)
{
    sx_tensor *want = ref_pad(x, b, e, value);
    sx_tensor *got = filled(x->dtype, x->rank, want->shape, -7);
    const int n0 = sx_threads_get();
    for (int t = 0; t < (large ? 2 : 1); t++) {
        if (large)
            cr_assert_eq(sx_threads_set(thread_counts[t]), SX_OK);
        cr_assert_eq(sx_tensor_pad_out(x, b, e, value, got), SX_OK, "%s", sx_last_error());
        assert_same(got, want, "pad");
    }
    cr_assert_eq(sx_threads_set(n0), SX_OK);
    sx_tensor_free(want);
    sx_tensor_free(got);
}

Test(tensor_layout, pad_random)
{
    sx_rng r;
    sx_rng_seed(&r, 51);
    for (int d = 0; d < 2; d++)
        for (int it = 0; it < 300; it++) {
            int64_t shape[SX_MAX_RANK], b[SX_MAX_RANK], e[SX_MAX_RANK];
            int rank = corner_shape(&r, 0, 5, 4, shape);
            for (int a = 0; a < rank; a++) {
                b[a] = sx_rng_below(&r, 2) ? 0 : (int64_t)sx_rng_below(&r, 3);
                e[a] = sx_rng_below(&r, 2) ? 0 : (int64_t)sx_rng_below(&r, 3);
            }
            sx_tensor *x = tu_rand(&r, dtypes[d], rank, shape, -1, 1);
            check_pad(x, b, e, it % 4 == 0 ? 0.0 : it % 4 == 1 ? -0.0 : 2.5, false);
            sx_tensor_free(x);
        }
}

Test(tensor_layout, pad_large_parallel)
{
    sx_rng r;
    sx_rng_seed(&r, 52);
    int64_t s4[4] = {6, 60, 50, 16}, s1[1] = {100000};
    const int64_t b4[4] = {0, 2, 1, 0}, e4[4] = {0, 1, 2, 0}, b1[1] = {3}, e1[1] = {7000};
    const int64_t bz[4] = {0, 0, 0, 0}, bc[4] = {1, 0, 0, 3};
    for (int d = 0; d < 2; d++) {
        s4[0] = large_dim(dtypes[d], 6);
        sx_tensor *x4 = tu_rand(&r, dtypes[d], 4, s4, -1, 1);
        sx_tensor *x1 = tu_rand(&r, dtypes[d], 1, s1, -1, 1);
        check_pad(x4, b4, e4, 0, true);
        check_pad(x4, bc, bz, -1.5, true);
        check_pad(x4, bz, bz, 3, true); /* no padding at all: a copy */
        check_pad(x1, b1, e1, 1, true);
        /* An empty source: the whole (large) output is the value. */
        int64_t s0[2] = {0, 1000}, b0[2] = {large_dim(dtypes[d], 300), 0}, e0[2] = {0, 0};
        sx_tensor *x0 = tu_zeros(dtypes[d], 2, s0);
        check_pad(x0, b0, e0, 4, true);
        sx_tensor_free(x0);
        sx_tensor_free(x4);
        sx_tensor_free(x1);
    }
}

Test(tensor_layout, pad_errors)
{
    int64_t s[2] = {2, 3}, so[2] = {4, 4}, bad[2] = {4, 5};
    int64_t b[2] = {1, 0}, e[2] = {1, 1}, neg[2] = {1, -1};
    sx_tensor *x = filled(SX_F32, 2, s, 1), *out = filled(SX_F32, 2, so, 9);
    sx_tensor *wrong = filled(SX_F32, 2, bad, 9), *out64 = filled(SX_F64, 2, so, 9);
    cr_assert_eq(sx_tensor_pad_out(x, neg, e, 0, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_pad_out(x, b, neg, 0, out), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "negative") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_pad_out(x, NULL, e, 0, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_pad_out(x, b, NULL, 0, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_pad_out(NULL, b, e, 0, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_pad_out(x, b, e, 0, wrong), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_pad_out(x, b, e, 0, out64), SX_E_DTYPE);
    int64_t huge[2] = {INT64_MAX - 1, 0};
    cr_assert_eq(sx_tensor_pad_out(x, huge, e, 0, out), SX_E_SHAPE);
    cr_assert(all_equal(out, 9) && all_equal(wrong, 9) && all_equal(out64, 9));
    cr_assert_eq(sx_tensor_pad_out(x, b, e, 0, out), SX_OK);
    sx_tensor_free(x);
    sx_tensor_free(out);
    sx_tensor_free(wrong);
    sx_tensor_free(out64);
}

/* ---------------------------------------------------------------- one-hot, gather, scatter */

static sx_tensor *rand_index(sx_rng *r, sx_dtype dt, int rank, const int64_t *shape, int64_t lim)
{
    sx_tensor *t = tu_zeros(dt, rank, shape);
    for (int64_t i = 0; i < t->size; i++)
        sx_tensor_set(t, i, (double)sx_rng_below(r, (uint64_t)lim));
    return t;
}

Test(tensor_layout, one_hot_random)
{
    sx_rng r;
    sx_rng_seed(&r, 61);
    for (int d = 0; d < 2; d++)
        for (int it = 0; it < 100; it++) {
            int64_t shape[SX_MAX_RANK], o[SX_MAX_RANK];
            int rank = corner_shape(&r, 0, 4, 4, shape);
            int64_t depth = 1 + (int64_t)sx_rng_below(&r, 6);
            sx_tensor *idx = rand_index(&r, dtypes[d], rank, shape, depth);
            shape[rank] = depth;
            sx_tensor *got = filled(dtypes[d], rank + 1, shape, -7);
            cr_assert_eq(sx_tensor_one_hot_out(idx, depth, got), SX_OK, "%s", sx_last_error());
            for (int64_t k = 0; k < got->size; k++) {
                unravel(k, rank + 1, shape, o);
                double want = sx_tensor_get(idx, ravel(rank, shape, o)) == (double)o[rank];
                cr_assert_eq(sx_tensor_get(got, k), want);
            }
            sx_tensor_free(idx);
            sx_tensor_free(got);
        }
}

Test(tensor_layout, gather_and_scatter_add_are_adjoint)
{
    sx_rng r;
    sx_rng_seed(&r, 62);
    for (int d = 0; d < 2; d++)
        for (int it = 0; it < 200; it++) {
            int64_t shape[SX_MAX_RANK], gshape[SX_MAX_RANK];
            int rank = corner_shape(&r, 1, 5, 4, shape);
            if (shape[0] == 0 && it % 2)
                shape[0] = 3;
            int64_t m = (int64_t)sx_rng_below(&r, 8); /* indices repeat often */
            if (shape[0] == 0)
                m = 0;
            int64_t ishape[1] = {m};
            sx_tensor *idx = rand_index(&r, dtypes[d], 1, ishape, shape[0] > 0 ? shape[0] : 1);
            memcpy(gshape, shape, sizeof gshape);
            gshape[0] = m;
            sx_tensor *x = tu_rand(&r, dtypes[d], rank, shape, -1, 1);
            sx_tensor *g = tu_rand(&r, dtypes[d], rank, gshape, -1, 1);
            sx_tensor *gx = filled(dtypes[d], rank, gshape, -7);
            sx_tensor *sg = filled(dtypes[d], rank, shape, -7);
            cr_assert_eq(sx_tensor_gather_out(x, idx, gx), SX_OK, "%s", sx_last_error());
            cr_assert_eq(sx_tensor_scatter_add_out(g, idx, sg), SX_OK, "%s", sx_last_error());
            /* References: gathered rows, and sums of g rows per target in double. */
            const int64_t row = m > 0 ? g->size / m : 0;
            sx_tensor *want = tu_zeros(dtypes[d], rank, shape);
            double *acc = calloc((size_t)x->size + 1, sizeof *acc);
            for (int64_t i = 0; i < m; i++) {
                int64_t t = (int64_t)sx_tensor_get(idx, i);
                for (int64_t c = 0; c < row; c++) {
                    cr_assert_eq(sx_tensor_get(gx, i * row + c), sx_tensor_get(x, t * row + c));
                    acc[t * row + c] += sx_tensor_get(g, i * row + c);
                }
            }
            for (int64_t k = 0; k < want->size; k++)
                sx_tensor_set(want, k, acc[k]);
            cr_assert(tu_close(sg, want, tu_rtol(dtypes[d]), 1e-6), "scatter_add");
            double lhs = dot(gx, g), rhs = dot(x, sg);
            cr_assert(fabs(lhs - rhs) <= tu_rtol(dtypes[d]) * (1 + abs_dot(gx, g)) * 4, "%g vs %g",
                      lhs, rhs);
            free(acc);
            sx_tensor *ts[] = {idx, x, g, gx, sg, want};
            for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
                sx_tensor_free(ts[i]);
        }
}

/* Repeated indices accumulate; exact small integers make the sums exact in f32 too. */
Test(tensor_layout, scatter_add_accumulates_repeats)
{
    double iv[5] = {2, 0, 2, 2, 1}, gv[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    int64_t is[1] = {5}, gs[2] = {5, 2}, os[2] = {4, 2};
    for (int d = 0; d < 2; d++) {
        sx_tensor *idx = NULL, *g = NULL, *out = filled(dtypes[d], 2, os, -7);
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 1, is, iv, 5, &idx), SX_OK);
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 2, gs, gv, 10, &g), SX_OK);
        cr_assert_eq(sx_tensor_scatter_add_out(g, idx, out), SX_OK);
        double want[8] = {3, 4, 9, 10, 1 + 5 + 7, 2 + 6 + 8, 0, 0};
        for (int i = 0; i < 8; i++)
            cr_assert_eq(sx_tensor_get(out, i), want[i], "element %d", i);
        sx_tensor_free(idx);
        sx_tensor_free(g);
        sx_tensor_free(out);
    }
}

/* Long rows (threads own columns) and short rows (threads own output rows): the same sums, bit
 * for bit, whatever the thread count. */
Test(tensor_layout, gather_scatter_large_parallel)
{
    sx_rng r;
    sx_rng_seed(&r, 63);
    int64_t xs[2][2] = {{50, 4000}, {4000, 24}};
    int n0 = sx_threads_get();
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < 2; c++) {
            xs[c][0] = large_dim(dtypes[d], c == 0 ? 50 : 4000);
            int64_t m = xs[c][0] * 3, ish[1] = {m}, gsh[2] = {m, xs[c][1]};
            sx_tensor *idx = rand_index(&r, dtypes[d], 1, ish, xs[c][0]);
            sx_tensor *x = tu_rand(&r, dtypes[d], 2, xs[c], -1, 1);
            sx_tensor *g = tu_rand(&r, dtypes[d], 2, gsh, -1, 1);
            sx_tensor *gx[2], *sg[2];
            for (int k = 0; k < 2; k++) {
                cr_assert_eq(sx_threads_set(k == 0 ? 1 : 3), SX_OK);
                gx[k] = tu_zeros(dtypes[d], 2, gsh);
                sg[k] = tu_zeros(dtypes[d], 2, xs[c]);
                cr_assert_eq(sx_tensor_gather_out(x, idx, gx[k]), SX_OK);
                cr_assert_eq(sx_tensor_scatter_add_out(g, idx, sg[k]), SX_OK);
            }
            cr_assert(bitwise_equal(gx[0], gx[1]) && bitwise_equal(sg[0], sg[1]));
            for (int64_t i = 0; i < m; i += 37) {
                int64_t t = (int64_t)sx_tensor_get(idx, i);
                for (int64_t j = 0; j < xs[c][1]; j++)
                    cr_assert_eq(sx_tensor_get(gx[0], i * xs[c][1] + j),
                                 sx_tensor_get(x, t * xs[c][1] + j));
            }
            double lhs = dot(gx[0], g), rhs = dot(x, sg[0]);
            cr_assert(fabs(lhs - rhs) <= tu_rtol(dtypes[d]) * abs_dot(gx[0], g) * 4, "%g vs %g",
                      lhs, rhs);
            sx_tensor *ts[] = {idx, x, g, gx[0], gx[1], sg[0], sg[1]};
            for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
                sx_tensor_free(ts[i]);
        }
    cr_assert_eq(sx_threads_set(n0), SX_OK);
}

Test(tensor_layout, index_errors_leave_outputs_unchanged)
{
    int64_t s3[1] = {3}, s2x4[2] = {2, 4}, x_s[2] = {4, 2}, g_s[2] = {3, 2}, bad_s[2] = {3, 3};
    int64_t s1x3[2] = {1, 3}, s3x4[2] = {3, 4}, s3x5[2] = {3, 5};
    double bad_vals[][3] = {{0, 4, 1}, {0, -1, 1}, {0, 1.5, 1}, {0, NAN, 1}, {0, INFINITY, 1}};
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = dtypes[d], other = dtypes[1 - d];
        sx_tensor *x = filled(dt, 2, x_s, 1), *out = filled(dt, 2, g_s, 9);
        sx_tensor *acc = filled(dt, 2, x_s, 9), *g = filled(dt, 2, g_s, 1);
        sx_tensor *oh = filled(dt, 2, s3x4, 9);
        for (size_t k = 0; k < sizeof bad_vals / sizeof bad_vals[0]; k++) {
            sx_tensor *idx = NULL;
            cr_assert_eq(sx_tensor_from_doubles(dt, 1, s3, bad_vals[k], 3, &idx), SX_OK);
            cr_assert_eq(sx_tensor_gather_out(x, idx, out), SX_E_RANGE, "case %zu", k);
            cr_assert(strstr(sx_last_error(), "idx[1]") != NULL, "%s", sx_last_error());
            cr_assert_eq(sx_tensor_scatter_add_out(g, idx, acc), SX_E_RANGE, "case %zu", k);
            cr_assert_eq(sx_tensor_one_hot_out(idx, 4, oh), SX_E_RANGE, "case %zu", k);
            sx_tensor_free(idx);
        }
        cr_assert(all_equal(out, 9) && all_equal(acc, 9) && all_equal(oh, 9));

        /* Shapes, ranks, dtypes. */
        double ok[3] = {0, 1, 3};
        sx_tensor *idx = NULL, *idx2 = NULL, *idx_o = NULL, *wrong = filled(dt, 2, bad_s, 9);
        sx_tensor *out_o = filled(other, 2, g_s, 9), *sc = filled(dt, 0, NULL, 0);
        cr_assert_eq(sx_tensor_from_doubles(dt, 1, s3, ok, 3, &idx), SX_OK);
        cr_assert_eq(sx_tensor_from_doubles(dt, 2, s1x3, ok, 3, &idx2), SX_OK);
        cr_assert_eq(sx_tensor_from_doubles(other, 1, s3, ok, 3, &idx_o), SX_OK);
        cr_assert_eq(sx_tensor_gather_out(x, idx, wrong), SX_E_SHAPE);
        cr_assert_eq(sx_tensor_gather_out(x, idx2, out), SX_E_RANK);
        cr_assert_eq(sx_tensor_gather_out(sc, idx, out), SX_E_RANK);
        cr_assert_eq(sx_tensor_gather_out(x, idx_o, out), SX_E_DTYPE);
        cr_assert_eq(sx_tensor_gather_out(x, idx, out_o), SX_E_DTYPE);
        cr_assert_eq(sx_tensor_gather_out(NULL, idx, out), SX_E_ARG);
        cr_assert_eq(sx_tensor_gather_out(x, NULL, out), SX_E_ARG);
        cr_assert_eq(sx_tensor_gather_out(x, idx, NULL), SX_E_ARG);
        cr_assert_eq(sx_tensor_scatter_add_out(wrong, idx, acc), SX_E_SHAPE);
        cr_assert_eq(sx_tensor_scatter_add_out(g, idx2, acc), SX_E_RANK);
        cr_assert_eq(sx_tensor_scatter_add_out(g, idx, sc), SX_E_RANK);
        cr_assert_eq(sx_tensor_scatter_add_out(g, idx_o, acc), SX_E_DTYPE);
        cr_assert_eq(sx_tensor_scatter_add_out(out_o, idx, acc), SX_E_DTYPE);
        cr_assert_eq(sx_tensor_scatter_add_out(NULL, idx, acc), SX_E_ARG);
        sx_tensor *oh5 = filled(dt, 2, s3x5, 9), *oh24 = filled(dt, 2, s2x4, 9);
        cr_assert_eq(sx_tensor_one_hot_out(idx, 4, oh5), SX_E_SHAPE);
        cr_assert_eq(sx_tensor_one_hot_out(idx, 4, oh24), SX_E_SHAPE);
        cr_assert_eq(sx_tensor_one_hot_out(idx, -1, oh), SX_E_ARG);
        cr_assert_eq(sx_tensor_one_hot_out(idx, 3, oh), SX_E_SHAPE);
        cr_assert_eq(sx_tensor_one_hot_out(NULL, 4, oh), SX_E_ARG);
        int64_t eight[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        sx_tensor *i8 = filled(dt, 8, eight, 0);
        cr_assert_eq(sx_tensor_one_hot_out(i8, 4, oh), SX_E_RANK);
        cr_assert(all_equal(out, 9) && all_equal(acc, 9) && all_equal(oh, 9) &&
                  all_equal(wrong, 9) && all_equal(out_o, 9) && all_equal(oh5, 9) &&
                  all_equal(oh24, 9));
        /* A valid call works with the same tensors (the checks above were not spurious). */
        cr_assert_eq(sx_tensor_gather_out(x, idx, out), SX_OK);
        cr_assert_eq(sx_tensor_scatter_add_out(g, idx, acc), SX_OK);
        cr_assert_eq(sx_tensor_one_hot_out(idx, 4, oh), SX_OK);
        sx_tensor *ts[] = {x, out, acc, g, oh, idx, idx2, idx_o, wrong, out_o, sc, oh5, oh24, i8};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            sx_tensor_free(ts[i]);
    }
}

/* Empty index sets and empty tables are fine: nothing to gather, all-zero scatters. */
Test(tensor_layout, gather_scatter_one_hot_empty)
{
    int64_t s0[1] = {0}, x_s[2] = {3, 2}, g0[2] = {0, 2}, oh0[2] = {0, 5}, e2[2] = {3, 0};
    for (int d = 0; d < 2; d++) {
        sx_tensor *idx = filled(dtypes[d], 1, s0, 0), *x = filled(dtypes[d], 2, x_s, 1);
        sx_tensor *out = filled(dtypes[d], 2, g0, 0), *acc = filled(dtypes[d], 2, x_s, 9);
        sx_tensor *oh = filled(dtypes[d], 2, oh0, 0), *ghost = filled(dtypes[d], 2, e2, 0);
        cr_assert_eq(sx_tensor_gather_out(x, idx, out), SX_OK);
        cr_assert_eq(sx_tensor_scatter_add_out(out, idx, acc), SX_OK);
        cr_assert(all_equal(acc, 0), "scatter of nothing zeroes out");
        cr_assert_eq(sx_tensor_one_hot_out(idx, 5, oh), SX_OK);
        /* one_hot of depth 0 with no indices is fine */
        int64_t z2[2] = {0, 0};
        sx_tensor *oh00 = filled(dtypes[d], 2, z2, 0);
        cr_assert_eq(sx_tensor_one_hot_out(idx, 0, oh00), SX_OK);
        /* a table with empty rows: gathering copies nothing, scatter leaves an empty out */
        int64_t ge[2] = {0, 0};
        sx_tensor *gempty = filled(dtypes[d], 2, ge, 0);
        cr_assert_eq(sx_tensor_gather_out(ghost, idx, gempty), SX_OK);
        cr_assert_eq(sx_tensor_scatter_add_out(gempty, idx, ghost), SX_OK);
        sx_tensor_free(gempty);
        sx_tensor *ts[] = {idx, x, out, acc, oh, ghost, oh00};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            sx_tensor_free(ts[i]);
    }
}
