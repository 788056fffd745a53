/* Binary element-wise kernels with NumPy broadcasting: every op of sx_binary.def on random
 * broadcastable shapes (size-1 axes, rank mismatch, rank-0 scalars, empty axes) in f32 and f64
 * against a reference loop in double; the scalar forms in both orders; fma with a three-way
 * broadcast; broadcast_out; in-place use; large sizes on the parallel path; every error path. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const sx_binary_op all_ops[] = {
#define X(name, lname, expr, ...) SX_BINARY_##name,
#include "sx_binary.def"
#undef X
};
#define N_OPS ((int)(sizeof all_ops / sizeof all_ops[0]))

/* ---------------------------------------------------------------- the reference */

/* The op in double, written independently of sx_binary.def: min/max are NaN if either side is
 * NaN, comparisons give 1 or 0. */
static double ref_op(sx_binary_op op, double a, double b)
{
    switch (op) {
    case SX_BINARY_ADD:
        return a + b;
    case SX_BINARY_SUB:
        return a - b;
    case SX_BINARY_MUL:
        return a * b;
    case SX_BINARY_DIV:
        return a / b;
    case SX_BINARY_POW:
        return pow(a, b);
    case SX_BINARY_MIN:
        return isnan(a) || isnan(b) ? (double)NAN : a < b ? a : b;
    case SX_BINARY_MAX:
        return isnan(a) || isnan(b) ? (double)NAN : a > b ? a : b;
    case SX_BINARY_ATAN2:
        return atan2(a, b);
    case SX_BINARY_EQ:
        return a == b;
    case SX_BINARY_NE:
        return a != b;
    case SX_BINARY_LT:
        return a < b;
    case SX_BINARY_LE:
        return a <= b;
    case SX_BINARY_GT:
        return a > b;
    case SX_BINARY_GE:
        return a >= b;
    case SX_BINARY_COUNT:
        break;
    }
    return (double)NAN;
}

/* The flat index into t (of rank <= r, aligned right) of the output multi-index idx (rank r),
 * with size-1 axes of t broadcast. */
static int64_t bidx(const sx_tensor *t, int r, const int64_t *idx)
{
    int64_t f = 0;
    for (int i = 0; i < t->rank; i++) {
        int64_t oi = idx[i + r - t->rank];
        f = f * t->shape[i] + (t->shape[i] == 1 ? 0 : oi);
    }
    return f;
}

/* want (f64, out's shape) = a op b (or a * b + c when op < 0), element by element. */
static sx_tensor *ref_eval(int op, const sx_tensor *a, const sx_tensor *b, const sx_tensor *c,
                           int r, const int64_t *shape)
{
    sx_tensor *want = tu_zeros(SX_F64, r, shape);
    int64_t idx[SX_MAX_RANK];
    for (int64_t e = 0; e < want->size; e++) {
        int64_t rem = e;
        for (int d = r - 1; d >= 0; d--) {
            idx[d] = rem % shape[d];
            rem /= shape[d];
        }
        double va = sx_tensor_get(a, bidx(a, r, idx)), vb = sx_tensor_get(b, bidx(b, r, idx));
        double v =
            op < 0 ? va * vb + sx_tensor_get(c, bidx(c, r, idx)) : ref_op((sx_binary_op)op, va, vb);
        sx_tensor_set(want, e, v);
    }
    return want;
}

/* ---------------------------------------------------------------- random shapes */

/* A random output shape (rank 0..5, dims 0..4 with zeros rare) and n operand shapes that
 * broadcast to it: each a suffix of it of random length, each dim replaced by 1 at random. */
static int rand_shapes(sx_rng *rng, int n, int64_t *out, int *ranks, int64_t (*shapes)[SX_MAX_RANK])
{
    int r = (int)sx_rng_below(rng, 6);
    for (int i = 0; i < r; i++)
        out[i] = sx_rng_below(rng, 12) == 0 ? 0 : 1 + (int64_t)sx_rng_below(rng, 4);
    for (int k = 0; k < n; k++) {
        ranks[k] = (int)sx_rng_below(rng, (uint64_t)r + 1);
        if (sx_rng_below(rng, 2))
            ranks[k] = r; /* full rank half of the time */
        for (int i = 0; i < ranks[k]; i++) {
            int64_t d = out[i + r - ranks[k]];
            shapes[k][i] = sx_rng_below(rng, 3) == 0 ? 1 : d;
        }
    }
    int full = (int)sx_rng_below(rng, (uint64_t)n); /* the output rank is the largest */
    ranks[full] = r;
    for (int i = 0; i < r; i++)
        shapes[full][i] = sx_rng_below(rng, 3) == 0 ? 1 : out[i];
    /* The output is what the operands broadcast to: an axis where every operand has 1 (or is
     * absent) is 1 in the output too. */
    for (int i = 0; i < r; i++) {
        bool any = false;
        for (int k = 0; k < n; k++) {
            int j = i - (r - ranks[k]);
            any = any || (j >= 0 && shapes[k][j] != 1);
        }
        if (!any)
            out[i] = 1;
    }
    return r;
}

/* Values fit for op: divisors and pow bases away from 0; small integers for the comparisons
 * and min/max (so that ties happen); else uniform in [-2, 2). */
static void fill_for(sx_binary_op op, bool second, sx_tensor *t, sx_rng *rng)
{
    for (int64_t i = 0; i < t->size; i++) {
        double u = sx_rng_uniform(rng), v = 4 * u - 2;
        if ((op == SX_BINARY_DIV && second) || (op == SX_BINARY_POW && !second))
            v = 0.5 + 1.5 * u;
        else if (op >= SX_BINARY_EQ || op == SX_BINARY_MIN || op == SX_BINARY_MAX)
            v = floor(5 * u) - 2;
        sx_tensor_set(t, i, v);
    }
}

static double rel_tol(sx_dtype dt)
{
    return dt == SX_F32 ? 2e-6 : 1e-14;
}

static double abs_tol(sx_dtype dt)
{
    return dt == SX_F32 ? 1e-6 : 1e-15;
}

static char *shape_s(const sx_tensor *t, char *buf)
{
    return sx_shape_str(t->rank, t->shape, buf, 64);
}

/* ---------------------------------------------------------------- tests */

Test(tensor_binary, names)
{
    cr_assert_str_eq(sx_binary_name(SX_BINARY_ADD), "add");
    cr_assert_str_eq(sx_binary_name(SX_BINARY_ATAN2), "atan2");
    cr_assert_str_eq(sx_binary_name(SX_BINARY_GE), "ge");
    cr_assert_str_eq(sx_binary_name(SX_BINARY_COUNT), "bad-binary-op");
    cr_assert_str_eq(sx_binary_name((sx_binary_op)-1), "bad-binary-op");
}

Test(tensor_binary, every_op_random_broadcast_shapes)
{
    sx_rng rng;
    sx_rng_seed(&rng, 42);
    for (int dt = 0; dt < 2; dt++)
        for (int trial = 0; trial < 60; trial++) {
            int64_t out_shape[SX_MAX_RANK], shapes[2][SX_MAX_RANK];
            int ranks[2];
            int r = rand_shapes(&rng, 2, out_shape, ranks, shapes);
            sx_tensor *a = tu_zeros((sx_dtype)dt, ranks[0], shapes[0]);
            sx_tensor *b = tu_zeros((sx_dtype)dt, ranks[1], shapes[1]);
            for (int k = 0; k < N_OPS; k++) {
                sx_binary_op op = all_ops[k];
                fill_for(op, false, a, &rng);
                fill_for(op, true, b, &rng);
                char sa[64], sb[64];
                sx_tensor *want = ref_eval((int)op, a, b, NULL, r, out_shape);
                sx_tensor *out = tu_zeros((sx_dtype)dt, r, out_shape), *z = NULL;
                cr_assert_eq(sx_tensor_binary_out(op, a, b, out), SX_OK, "%s", sx_last_error());
                cr_assert(tu_close(out, want, rel_tol(a->dtype), abs_tol(a->dtype)), "%s %s %s %s",
                          sx_dtype_name(a->dtype), sx_binary_name(op), shape_s(a, sa),
                          shape_s(b, sb));
                cr_assert_eq(sx_tensor_binary(op, a, b, &z), SX_OK, "%s", sx_last_error());
                cr_assert(sx_shape_equal(z->rank, z->shape, r, out_shape));
                cr_assert(tu_close(z, want, rel_tol(a->dtype), abs_tol(a->dtype)));
                sx_tensor_free(z);
                sx_tensor_free(out);
                sx_tensor_free(want);
            }
            sx_tensor_free(a);
            sx_tensor_free(b);
        }
}

Test(tensor_binary, broadcasting_corner_cases)
{
    /* (a, b) shape pairs: rank mismatch, size-1 on both sides, scalars, empty axes, rank 8. */
    struct {
        int ra, rb;
        int64_t sa[8], sb[8];
    } cases[] = {
        {2, 1, {3, 4}, {4}},
        {2, 2, {3, 1}, {1, 4}},
        {0, 3, {0}, {2, 3, 4}},
        {3, 0, {2, 3, 4}, {0}},
        {0, 0, {0}, {0}},
        {3, 2, {5, 1, 7}, {6, 1}},
        {2, 1, {0, 3}, {3}},
        {2, 2, {0, 1}, {1, 5}},
        {1, 1, {1}, {0}},
        {4, 4, {2, 1, 3, 1}, {1, 4, 1, 5}},
        {8, 3, {2, 1, 2, 1, 2, 1, 2, 3}, {1, 2, 3}},
        {3, 3, {4, 1, 1}, {4, 1, 1}},
    };
    sx_rng rng;
    sx_rng_seed(&rng, 9);
    for (int dt = 0; dt < 2; dt++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            sx_tensor *a = tu_rand(&rng, (sx_dtype)dt, cases[c].ra, cases[c].sa, -2, 2);
            sx_tensor *b = tu_rand(&rng, (sx_dtype)dt, cases[c].rb, cases[c].sb, -2, 2);
            int r;
            int64_t shape[SX_MAX_RANK];
            cr_assert_eq(sx_shape_broadcast("t", a->rank, a->shape, b->rank, b->shape, &r, shape),
                         SX_OK);
            for (int k = 0; k < N_OPS; k++) {
                sx_tensor *want = ref_eval((int)all_ops[k], a, b, NULL, r, shape), *z = NULL;
                cr_assert_eq(sx_tensor_binary(all_ops[k], a, b, &z), SX_OK, "%s", sx_last_error());
                cr_assert(tu_close(z, want, rel_tol(a->dtype), abs_tol(a->dtype)), "case %zu %s", c,
                          sx_binary_name(all_ops[k]));
                sx_tensor_free(z);
                sx_tensor_free(want);
            }
            sx_tensor_free(a);
            sx_tensor_free(b);
        }
}

Test(tensor_binary, nan_in_min_max_and_comparisons)
{
    double va[4] = {(double)NAN, 1, (double)NAN, 2}, vb[4] = {1, (double)NAN, (double)NAN, 3};
    int64_t four = 4;
    for (int dt = 0; dt < 2; dt++) {
        sx_tensor *a = NULL, *b = NULL;
        cr_assert_eq(sx_tensor_from_doubles((sx_dtype)dt, 1, &four, va, 4, &a), SX_OK);
        cr_assert_eq(sx_tensor_from_doubles((sx_dtype)dt, 1, &four, vb, 4, &b), SX_OK);
        for (int k = 0; k < N_OPS; k++) {
            sx_tensor *z = NULL, *want = ref_eval((int)all_ops[k], a, b, NULL, 1, &four);
            cr_assert_eq(sx_tensor_binary(all_ops[k], a, b, &z), SX_OK);
            cr_assert(tu_close(z, want, rel_tol(a->dtype), 0), "%s", sx_binary_name(all_ops[k]));
            sx_tensor_free(z);
            sx_tensor_free(want);
        }
        sx_tensor_free(a);
        sx_tensor_free(b);
    }
}

Test(tensor_binary, scalar_forms_both_orders)
{
    sx_rng rng;
    sx_rng_seed(&rng, 11);
    int64_t shape[3] = {3, 1, 5};
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < N_OPS; k++) {
            sx_binary_op op = all_ops[k];
            sx_tensor *t = tu_zeros((sx_dtype)dt, 3, shape);
            fill_for(op, false, t, &rng);
            double s = op == SX_BINARY_POW ? 1.7 : op >= SX_BINARY_EQ ? 0.0 : 0.6;
            /* the scalar is converted to the dtype first */
            double sd = dt == SX_F32 ? (double)(float)s : s;
            sx_tensor *sv = NULL, *out = tu_zeros((sx_dtype)dt, 3, shape);
            cr_assert_eq(sx_tensor_scalar(SX_F64, sd, &sv), SX_OK);
            sx_tensor *want = ref_eval((int)op, t, sv, NULL, 3, shape);
            cr_assert_eq(sx_tensor_binary_scalar_out(op, t, s, out), SX_OK, "%s", sx_last_error());
            cr_assert(tu_close(out, want, rel_tol(t->dtype), abs_tol(t->dtype)), "%s a op s",
                      sx_binary_name(op));
            sx_tensor_free(want);
            if (op == SX_BINARY_POW) { /* s ** t with a positive base */
                s = 1.3;
                sd = dt == SX_F32 ? (double)(float)s : s;
                sx_tensor_set(sv, 0, sd);
            }
            want = ref_eval((int)op, sv, t, NULL, 3, shape);
            cr_assert_eq(sx_tensor_scalar_binary_out(op, s, t, out), SX_OK, "%s", sx_last_error());
            cr_assert(tu_close(out, want, rel_tol(t->dtype), abs_tol(t->dtype)), "%s s op b",
                      sx_binary_name(op));
            /* in place */
            cr_assert_eq(sx_tensor_scalar_binary_out(op, s, t, t), SX_OK);
            cr_assert(tu_close(t, want, rel_tol(t->dtype), abs_tol(t->dtype)), "%s in place",
                      sx_binary_name(op));
            sx_tensor_free(want);
            sx_tensor_free(sv);
            sx_tensor_free(out);
            sx_tensor_free(t);
        }
    /* Errors of the scalar forms: out shape, dtypes, NULLs, bad op; out untouched. */
    sx_tensor *a = tu_zeros(SX_F32, 3, shape), *o = tu_zeros(SX_F32, 2, shape);
    sx_tensor *od = tu_zeros(SX_F64, 3, shape);
    cr_assert_eq(sx_tensor_fill(o, 3), SX_OK);
    cr_assert_eq(sx_tensor_binary_scalar_out(SX_BINARY_ADD, a, 1, o), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_scalar_binary_out(SX_BINARY_ADD, 1, a, o), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_binary_scalar_out(SX_BINARY_ADD, a, 1, od), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_scalar_binary_out(SX_BINARY_ADD, 1, a, od), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_binary_scalar_out(SX_BINARY_ADD, NULL, 1, o), SX_E_ARG);
    cr_assert_eq(sx_tensor_scalar_binary_out(SX_BINARY_ADD, 1, a, NULL), SX_E_ARG);
    cr_assert_eq(sx_tensor_binary_scalar_out(SX_BINARY_COUNT, a, 1, a), SX_E_ARG);
    cr_assert_eq(sx_tensor_scalar_binary_out((sx_binary_op)-1, 1, a, a), SX_E_ARG);
    for (int64_t i = 0; i < o->size; i++)
        cr_assert_eq(sx_tensor_get(o, i), 3);
    for (int64_t i = 0; i < od->size; i++)
        cr_assert_eq(sx_tensor_get(od, i), 0);
    sx_tensor_free(a);
    sx_tensor_free(o);
    sx_tensor_free(od);
}

Test(tensor_binary, in_place)
{
    sx_rng rng;
    sx_rng_seed(&rng, 13);
    int64_t sa[3] = {4, 3, 5}, sb[2] = {1, 5};
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < N_OPS; k++) {
            sx_binary_op op = all_ops[k];
            sx_tensor *a = tu_zeros((sx_dtype)dt, 3, sa), *b = tu_zeros((sx_dtype)dt, 2, sb);
            fill_for(op, false, a, &rng);
            fill_for(op, true, b, &rng);
            /* out = a (b broadcast) */
            sx_tensor *want = ref_eval((int)op, a, b, NULL, 3, sa);
            cr_assert_eq(sx_tensor_binary_out(op, a, b, a), SX_OK);
            cr_assert(tu_close(a, want, rel_tol(a->dtype), abs_tol(a->dtype)), "%s out=a",
                      sx_binary_name(op));
            sx_tensor_free(want);
            /* out = b (a broadcast) */
            sx_tensor *c = tu_zeros((sx_dtype)dt, 3, sa);
            fill_for(op, true, c, &rng);
            fill_for(op, false, b, &rng);
            want = ref_eval((int)op, b, c, NULL, 3, sa);
            cr_assert_eq(sx_tensor_binary_out(op, b, c, c), SX_OK);
            cr_assert(tu_close(c, want, rel_tol(a->dtype), abs_tol(a->dtype)), "%s out=b",
                      sx_binary_name(op));
            sx_tensor_free(want);
            /* out = a = b */
            fill_for(op, op == SX_BINARY_DIV, c, &rng);
            if (op == SX_BINARY_POW)
                fill_for(op, false, c, &rng);
            want = ref_eval((int)op, c, c, NULL, 3, sa);
            cr_assert_eq(sx_tensor_binary_out(op, c, c, c), SX_OK);
            cr_assert(tu_close(c, want, rel_tol(a->dtype), abs_tol(a->dtype)), "%s x op x in place",
                      sx_binary_name(op));
            sx_tensor_free(want);
            sx_tensor_free(a);
            sx_tensor_free(b);
            sx_tensor_free(c);
        }
}

Test(tensor_binary, fma_three_way_broadcast)
{
    sx_rng rng;
    sx_rng_seed(&rng, 17);
    for (int dt = 0; dt < 2; dt++)
        for (int trial = 0; trial < 80; trial++) {
            int64_t out_shape[SX_MAX_RANK], shapes[3][SX_MAX_RANK];
            int ranks[3];
            int r = rand_shapes(&rng, 3, out_shape, ranks, shapes);
            sx_tensor *a = tu_rand(&rng, (sx_dtype)dt, ranks[0], shapes[0], -2, 2);
            sx_tensor *b = tu_rand(&rng, (sx_dtype)dt, ranks[1], shapes[1], -2, 2);
            sx_tensor *c = tu_rand(&rng, (sx_dtype)dt, ranks[2], shapes[2], -2, 2);
            sx_tensor *want = ref_eval(-1, a, b, c, r, out_shape);
            sx_tensor *out = tu_zeros((sx_dtype)dt, r, out_shape);
            cr_assert_eq(sx_tensor_fma_out(a, b, c, out), SX_OK, "%s", sx_last_error());
            char s1[64], s2[64], s3[64];
            cr_assert(tu_close(out, want, rel_tol(a->dtype), 4 * abs_tol(a->dtype)), "fma %s %s %s",
                      shape_s(a, s1), shape_s(b, s2), shape_s(c, s3));
            /* in place over whichever operand has the full shape */
            sx_tensor *ops[3] = {a, b, c};
            for (int k = 0; k < 3; k++)
                if (sx_shape_equal(ops[k]->rank, ops[k]->shape, r, out_shape)) {
                    cr_assert_eq(sx_tensor_fma_out(a, b, c, ops[k]), SX_OK);
                    cr_assert(tu_close(ops[k], want, rel_tol(a->dtype), 4 * abs_tol(a->dtype)),
                              "fma in place over operand %d", k);
                    break;
                }
            sx_tensor_free(want);
            sx_tensor_free(out);
            sx_tensor_free(a);
            sx_tensor_free(b);
            sx_tensor_free(c);
        }
    /* The explicit three-way case (4,1,3) * (5,1) + (3): all three broadcast. */
    int64_t s1[3] = {4, 1, 3}, s2[2] = {5, 1}, s3[1] = {3}, so[3] = {4, 5, 3};
    sx_tensor *a = tu_rand(&rng, SX_F32, 3, s1, -1, 1), *b = tu_rand(&rng, SX_F32, 2, s2, -1, 1);
    sx_tensor *c = tu_rand(&rng, SX_F32, 1, s3, -1, 1), *out = tu_zeros(SX_F32, 3, so);
    sx_tensor *want = ref_eval(-1, a, b, c, 3, so);
    cr_assert_eq(sx_tensor_fma_out(a, b, c, out), SX_OK);
    cr_assert(tu_close(out, want, 2e-6, 4e-6));
    sx_tensor_free(want);
    /* errors: the message names all three shapes; dtype mismatch; NULLs; out untouched */
    int64_t s4[1] = {4};
    sx_tensor *d = tu_zeros(SX_F32, 1, s4), *cd = tu_zeros(SX_F64, 1, s3);
    cr_assert_eq(sx_tensor_fill(out, 8), SX_OK);
    cr_assert_eq(sx_tensor_fma_out(a, b, d, out), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "(4,1,3)") && strstr(sx_last_error(), "(5,1)") &&
                  strstr(sx_last_error(), "(4)"),
              "%s", sx_last_error());
    cr_assert_eq(sx_tensor_fma_out(a, b, cd, out), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_fma_out(a, NULL, c, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_fma_out(a, b, NULL, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_fma_out(a, b, c, NULL), SX_E_ARG);
    cr_assert_eq(sx_tensor_fma_out(a, b, c, d), SX_E_SHAPE);
    for (int64_t i = 0; i < out->size; i++)
        cr_assert_eq(sx_tensor_get(out, i), 8);
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_tensor_free(c);
    sx_tensor_free(d);
    sx_tensor_free(cd);
    sx_tensor_free(out);
}

Test(tensor_binary, broadcast_out)
{
    sx_rng rng;
    sx_rng_seed(&rng, 19);
    for (int dt = 0; dt < 2; dt++)
        for (int trial = 0; trial < 60; trial++) {
            int64_t out_shape[SX_MAX_RANK], shapes[1][SX_MAX_RANK];
            int ranks[1];
            int r = rand_shapes(&rng, 1, out_shape, ranks, shapes);
            /* rand_shapes shrinks the output to what x broadcasts to; widen it back to test a
             * real broadcast_to: every axis where x has 1 may become larger. */
            for (int i = 0; i < r; i++) {
                int j = i - (r - ranks[0]);
                if ((j < 0 || shapes[0][j] == 1) && out_shape[i] == 1)
                    out_shape[i] = 1 + (int64_t)sx_rng_below(&rng, 3);
            }
            sx_tensor *x = tu_rand(&rng, (sx_dtype)dt, ranks[0], shapes[0], -2, 2);
            sx_tensor *zero = tu_zeros(SX_F64, 0, NULL);
            sx_tensor *want = ref_eval(SX_BINARY_ADD, x, zero, NULL, r, out_shape);
            sx_tensor *out = tu_zeros((sx_dtype)dt, r, out_shape);
            cr_assert_eq(sx_tensor_broadcast_out(x, out), SX_OK, "%s", sx_last_error());
            cr_assert(tu_close(out, want, 0, 0));
            sx_tensor_free(zero);
            sx_tensor_free(want);
            sx_tensor_free(out);
            sx_tensor_free(x);
        }
    /* same shape (a copy, also onto itself), and the errors */
    int64_t s34[2] = {3, 4}, s24[2] = {2, 4}, s14[2] = {1, 4}, s4[1] = {4}, s31[2] = {3, 1};
    sx_tensor *x = tu_rand(&rng, SX_F64, 2, s34, -1, 1), *y = tu_zeros(SX_F64, 2, s34);
    cr_assert_eq(sx_tensor_broadcast_out(x, y), SX_OK);
    cr_assert(tu_close(y, x, 0, 0));
    cr_assert_eq(sx_tensor_broadcast_out(x, x), SX_OK);
    cr_assert(tu_close(y, x, 0, 0));
    sx_tensor *o24 = tu_zeros(SX_F64, 2, s24), *o4 = tu_zeros(SX_F64, 1, s4);
    sx_tensor *x14 = tu_rand(&rng, SX_F64, 2, s14, -1, 1),
              *x31 = tu_rand(&rng, SX_F64, 2, s31, -1, 1);
    sx_tensor *o34f = tu_zeros(SX_F32, 2, s34);
    cr_assert_eq(sx_tensor_broadcast_out(x, o24), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "(3,4)") && strstr(sx_last_error(), "(2,4)"), "%s",
              sx_last_error());
    cr_assert_eq(sx_tensor_broadcast_out(x14, o4), SX_E_SHAPE, "rank may not shrink");
    cr_assert_eq(sx_tensor_broadcast_out(x31, o24), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_broadcast_out(x31, o34f), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_broadcast_out(NULL, y), SX_E_ARG);
    cr_assert_eq(sx_tensor_broadcast_out(x, NULL), SX_E_ARG);
    for (int64_t i = 0; i < 8; i++)
        cr_assert_eq(sx_tensor_get(o24, i), 0);
    cr_assert_eq(sx_tensor_broadcast_out(x31, y), SX_OK);
    for (int64_t i = 0; i < 12; i++)
        cr_assert_eq(sx_tensor_get(y, i), sx_tensor_get(x31, i / 4));
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_tensor_free(o24);
    sx_tensor_free(o4);
    sx_tensor_free(x14);
    sx_tensor_free(x31);
    sx_tensor_free(o34f);
}

/* Large operands: every op above the parallel thresholds, in the common layouts (same shape,
 * row vector, column vector, scalar), out of place and in place, and the same bits with 1 and
 * 2 threads. */
Test(tensor_binary, large_parallel)
{
    sx_rng rng;
    sx_rng_seed(&rng, 23);
    int64_t big[2] = {300, 129}, row[1] = {129}, col[2] = {300, 1};
    const int64_t *bshapes[4] = {big, row, col, NULL};
    int branks[4] = {2, 1, 2, 0};
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < N_OPS; k++) {
            /* two of the four layouts per op and dtype, in rotation */
            for (int l = (k + dt) % 4; l < 4; l += 2) {
                sx_binary_op op = all_ops[k];
                sx_tensor *a = tu_zeros((sx_dtype)dt, 2, big);
                sx_tensor *b = tu_zeros((sx_dtype)dt, branks[l], bshapes[l]);
                fill_for(op, false, a, &rng);
                fill_for(op, true, b, &rng);
                sx_tensor *want = ref_eval((int)op, a, b, NULL, 2, big);
                sx_tensor *out = tu_zeros((sx_dtype)dt, 2, big), *out1 = NULL;
                cr_assert_eq(sx_tensor_binary_out(op, a, b, out), SX_OK);
                cr_assert(tu_close(out, want, rel_tol(a->dtype), abs_tol(a->dtype)), "%s layout %d",
                          sx_binary_name(op), l);
                cr_assert_eq(sx_threads_set(1), SX_OK);
                cr_assert_eq(sx_tensor_binary(op, a, b, &out1), SX_OK);
                cr_assert_eq(sx_threads_set(2), SX_OK);
                cr_assert_eq(
                    memcmp(out->data, out1->data, (size_t)out->size * sx_dtype_size(out->dtype)),
                    0);
                cr_assert_eq(sx_tensor_binary_out(op, a, b, a), SX_OK);
                cr_assert(tu_close(a, want, rel_tol(a->dtype), abs_tol(a->dtype)), "%s in place",
                          sx_binary_name(op));
                sx_tensor_free(want);
                sx_tensor_free(out);
                sx_tensor_free(out1);
                sx_tensor_free(a);
                sx_tensor_free(b);
            }
        }
    /* a column against a row: the output is larger than either input */
    int64_t r1[2] = {1, 513}, c1[2] = {257, 1}, o[2] = {257, 513};
    sx_tensor *a = tu_rand(&rng, SX_F32, 2, c1, -1, 1), *b = tu_rand(&rng, SX_F32, 2, r1, -1, 1);
    sx_tensor *want = ref_eval(SX_BINARY_MUL, a, b, NULL, 2, o), *z = NULL;
    cr_assert_eq(sx_tensor_binary(SX_BINARY_MUL, a, b, &z), SX_OK);
    cr_assert(tu_close(z, want, 2e-6, 1e-7));
    sx_tensor_free(want);
    sx_tensor_free(z);
    sx_tensor_free(a);
    sx_tensor_free(b);
}

Test(tensor_binary, errors_leave_out_unchanged)
{
    int64_t s34[2] = {3, 4}, s54[2] = {5, 4}, s4[1] = {4};
    sx_tensor *a = tu_zeros(SX_F32, 2, s34), *b = tu_zeros(SX_F32, 2, s54);
    sx_tensor *bd = tu_zeros(SX_F64, 1, s4), *out = tu_zeros(SX_F32, 2, s34);
    sx_tensor *outd = tu_zeros(SX_F64, 2, s34), *o4 = tu_zeros(SX_F32, 1, s4);
    cr_assert_eq(sx_tensor_fill(out, 6), SX_OK);
    cr_assert_eq(sx_tensor_binary_out(SX_BINARY_ADD, a, b, out), SX_E_SHAPE);
    cr_assert_str_eq(sx_last_error(),
                     "sx_tensor_binary_out: shapes (3,4) and (5,4) do not broadcast");
    sx_tensor *z = (sx_tensor *)1;
    cr_assert_eq(sx_tensor_binary(SX_BINARY_ADD, a, b, &z), SX_E_SHAPE);
    cr_assert_null(z);
    cr_assert(strstr(sx_last_error(), "(3,4) and (5,4)") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_binary_out(SX_BINARY_ADD, a, bd, out), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_binary_out(SX_BINARY_ADD, a, a, outd), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_binary_out(SX_BINARY_ADD, a, a, o4), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "out has shape (4)") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_binary_out(SX_BINARY_ADD, NULL, a, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_binary_out(SX_BINARY_ADD, a, NULL, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_binary_out(SX_BINARY_ADD, a, a, NULL), SX_E_ARG);
    cr_assert_eq(sx_tensor_binary_out(SX_BINARY_COUNT, a, a, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_binary_out((sx_binary_op)99, a, a, out), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "unknown op") != NULL, "%s", sx_last_error());
    for (int64_t i = 0; i < 12; i++)
        cr_assert_eq(sx_tensor_get(out, i), 6);
    for (int64_t i = 0; i < 12; i++)
        cr_assert_eq(sx_tensor_get(outd, i), 0);
    z = (sx_tensor *)1;
    cr_assert_eq(sx_tensor_binary((sx_binary_op)-1, a, a, &z), SX_E_ARG);
    cr_assert_null(z);
    z = (sx_tensor *)1;
    cr_assert_eq(sx_tensor_binary(SX_BINARY_ADD, a, bd, &z), SX_E_DTYPE);
    cr_assert_null(z);
    cr_assert_eq(sx_tensor_binary(SX_BINARY_ADD, a, a, NULL), SX_E_ARG);
    /* out of memory in the allocating form */
    tu_fail_after(0);
    z = (sx_tensor *)1;
    cr_assert_eq(sx_tensor_binary(SX_BINARY_ADD, a, a, &z), SX_E_NOMEM);
    cr_assert_null(z);
    cr_assert_eq(tu_live_allocs(), 0);
    tu_fail_after(1);
    cr_assert_eq(sx_tensor_binary(SX_BINARY_ADD, a, a, &z), SX_E_NOMEM);
    cr_assert_eq(tu_live_allocs(), 0);
    tu_fail_reset();
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_tensor_free(bd);
    sx_tensor_free(out);
    sx_tensor_free(outd);
    sx_tensor_free(o4);
}
