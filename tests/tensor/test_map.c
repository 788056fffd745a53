/* Unary element-wise kernels (map): every op of sx_map.def in f32 and f64 against a reference
 * written in double with libm, on inputs drawn from each op's domain; in-place use; the alpha
 * of leaky_relu and elu; special values; large sizes on the parallel path; the fused interpreter
 * giving the map kernels' bits; every error path. (The f32 functions of vmath.h have their own
 * ulp-level suite, test_vmath.c.) */
#include "sx_tensor_kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const sx_map_op all_ops[] = {
#define X(name, lname, expr, ...) SX_MAP_##name,
#include "sx_map.def"
#undef X
};
#define N_OPS ((int)(sizeof all_ops / sizeof all_ops[0]))

/* The op in double: the ref column of its sx_map.def row, written from its mathematical
 * definition with libm (independently of the kernel expression and its vectorised functions). */
static double ref_op(sx_map_op op, double x, double a)
{
    (void)a;
    switch (op) {
#define X(NAME, name, expr, ref, ...)                                                              \
    case SX_MAP_##NAME:                                                                            \
        return (ref);
#include "sx_map.def"
#undef X
    case SX_MAP_COUNT:
        break;
    }
    return (double)NAN;
}

/* An input from op's domain, u uniform in [0, 1). */
static double domain(sx_map_op op, double u)
{
    switch (op) {
    case SX_MAP_SQRT:
    case SX_MAP_RSQRT:
    case SX_MAP_LOG:
        return 0.01 + 20 * u;
    case SX_MAP_LOG1P:
        return -0.9 + 10 * u;
    case SX_MAP_TAN:
        return -1.3 + 2.6 * u;
    case SX_MAP_EXP:
    case SX_MAP_EXPM1:
        return -20 + 40 * u;
    case SX_MAP_RECIPROCAL: /* |x| in [0.05, 5) */
        return (u < 0.5 ? -1 : 1) * (0.05 + 9.9 * fabs(u - 0.5));
    case SX_MAP_SOFTPLUS:
    case SX_MAP_SIGMOID:
        return -60 + 120 * u;
    case SX_MAP_FLOOR:
    case SX_MAP_CEIL:
    case SX_MAP_ROUND: /* include exact halves and integers */
        return u < 0.3 ? floor(u * 60) / 2 - 4.5 : -8 + 16 * u;
    default:
        return -6 + 12 * u;
    }
}

/* f32 results are within an ulp of the exact value (vmath.h) or one f32 libm call; f64 the
 * same libm call or a formula within a couple of ulps of the reference. */
static double rel_tol(sx_dtype dt)
{
    return dt == SX_F32 ? 4e-6 : 1e-14;
}

static double abs_tol(sx_dtype dt)
{
    return dt == SX_F32 ? 1e-6 : 1e-15;
}

/* x filled from op's domain and the reference want (f64) of op over x. */
static sx_tensor *make_input(sx_rng *rng, sx_map_op op, sx_dtype dt, int rank, const int64_t *shape)
{
    sx_tensor *x = tu_zeros(dt, rank, shape);
    for (int64_t i = 0; i < x->size; i++)
        sx_tensor_set(x, i, domain(op, sx_rng_uniform(rng)));
    return x;
}

static sx_tensor *reference(sx_map_op op, double alpha, const sx_tensor *x)
{
    sx_tensor *want = tu_zeros(SX_F64, x->rank, x->shape);
    /* the op parameter is converted to the dtype first */
    double a = x->dtype == SX_F32 ? (double)(float)alpha : alpha;
    for (int64_t i = 0; i < x->size; i++)
        sx_tensor_set(want, i, ref_op(op, sx_tensor_get(x, i), a));
    return want;
}

Test(tensor_map, names)
{
    cr_assert_str_eq(sx_map_name(SX_MAP_NEG), "neg");
    cr_assert_str_eq(sx_map_name(SX_MAP_LEAKY_RELU), "leaky_relu");
    cr_assert_str_eq(sx_map_name(SX_MAP_ERF), "erf");
    cr_assert_str_eq(sx_map_name(SX_MAP_COUNT), "bad-map-op");
    cr_assert_str_eq(sx_map_name((sx_map_op)-1), "bad-map-op");
    for (int i = 0; i < N_OPS; i++)
        for (int j = i + 1; j < N_OPS; j++)
            cr_assert_str_neq(sx_map_name(all_ops[i]), sx_map_name(all_ops[j]));
}

Test(tensor_map, every_op_against_libm)
{
    sx_rng rng;
    sx_rng_seed(&rng, 31);
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < N_OPS; k++)
            for (int trial = 0; trial < 6; trial++) {
                sx_map_op op = all_ops[k];
                int64_t shape[4];
                int rank = tu_rand_shape(&rng, 0, 4, 9, shape);
                sx_tensor *x = make_input(&rng, op, (sx_dtype)dt, rank, shape);
                sx_tensor *want = reference(op, 0.1, x), *y = NULL;
                sx_tensor *out = tu_zeros((sx_dtype)dt, rank, shape);
                cr_assert_eq(sx_tensor_map_out(op, 0.1, x, out), SX_OK, "%s", sx_last_error());
                cr_assert(tu_close(out, want, rel_tol(x->dtype), abs_tol(x->dtype)), "%s %s",
                          sx_dtype_name(x->dtype), sx_map_name(op));
                cr_assert_eq(sx_tensor_map(op, 0.1, x, &y), SX_OK, "%s", sx_last_error());
                cr_assert(sx_shape_equal(y->rank, y->shape, rank, shape));
                cr_assert_eq(y->dtype, x->dtype);
                cr_assert(tu_close(y, want, rel_tol(x->dtype), abs_tol(x->dtype)));
                sx_tensor_free(y);
                sx_tensor_free(out);
                sx_tensor_free(want);
                sx_tensor_free(x);
            }
}

Test(tensor_map, in_place)
{
    sx_rng rng;
    sx_rng_seed(&rng, 37);
    int64_t shape[2] = {7, 13};
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < N_OPS; k++) {
            sx_tensor *x = make_input(&rng, all_ops[k], (sx_dtype)dt, 2, shape);
            sx_tensor *want = reference(all_ops[k], 0.3, x);
            cr_assert_eq(sx_tensor_map_out(all_ops[k], 0.3, x, x), SX_OK);
            cr_assert(tu_close(x, want, rel_tol(x->dtype), abs_tol(x->dtype)), "%s in place",
                      sx_map_name(all_ops[k]));
            sx_tensor_free(want);
            sx_tensor_free(x);
        }
}

Test(tensor_map, alpha_of_leaky_relu_and_elu)
{
    double v[6] = {-3, -1, -0.25, 0, 0.5, 2};
    int64_t six = 6;
    double alphas[4] = {0.01, 0.2, 1.0, 1.7};
    for (int dt = 0; dt < 2; dt++)
        for (int i = 0; i < 4; i++) {
            sx_tensor *x = NULL, *y = NULL;
            cr_assert_eq(sx_tensor_from_doubles((sx_dtype)dt, 1, &six, v, 6, &x), SX_OK);
            double a = dt == SX_F32 ? (double)(float)alphas[i] : alphas[i];
            cr_assert_eq(sx_tensor_map(SX_MAP_LEAKY_RELU, alphas[i], x, &y), SX_OK);
            for (int j = 0; j < 6; j++) {
                double want = v[j] > 0 ? v[j] : a * v[j];
                cr_assert(fabs(sx_tensor_get(y, j) - want) <= 1e-6 * fabs(want), "leaky %g",
                          alphas[i]);
            }
            sx_tensor_free(y);
            cr_assert_eq(sx_tensor_map(SX_MAP_ELU, alphas[i], x, &y), SX_OK);
            for (int j = 0; j < 6; j++) {
                double want = v[j] > 0 ? v[j] : a * expm1(v[j]);
                cr_assert(fabs(sx_tensor_get(y, j) - want) <= 2e-6 * fabs(want), "elu %g",
                          alphas[i]);
            }
            sx_tensor_free(y);
            /* other ops ignore alpha */
            sx_tensor *y2 = NULL;
            cr_assert_eq(sx_tensor_map(SX_MAP_TANH, alphas[i], x, &y), SX_OK);
            cr_assert_eq(sx_tensor_map(SX_MAP_TANH, 0, x, &y2), SX_OK);
            cr_assert(tu_close(y, y2, 0, 0));
            sx_tensor_free(y);
            sx_tensor_free(y2);
            sx_tensor_free(x);
        }
}

Test(tensor_map, special_values)
{
    /* Values at the edges of the domains: NaN passes through the smooth functions; the stable
     * forms of sigmoid and softplus neither overflow nor lose the tails. */
    double v[8] = {0, -0.0, 1, -1, (double)INFINITY, -(double)INFINITY, (double)NAN, 1e30};
    int64_t eight = 8;
    for (int dt = 0; dt < 2; dt++) {
        sx_tensor *x = NULL, *y = NULL;
        cr_assert_eq(sx_tensor_from_doubles((sx_dtype)dt, 1, &eight, v, 8, &x), SX_OK);
        sx_map_op ops[] = {SX_MAP_NEG,     SX_MAP_ABS,      SX_MAP_SQRT,      SX_MAP_EXP,
                           SX_MAP_LOG,     SX_MAP_TANH,     SX_MAP_FLOOR,     SX_MAP_ERF,
                           SX_MAP_SIGMOID, SX_MAP_SOFTPLUS, SX_MAP_RECIPROCAL};
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            cr_assert_eq(sx_tensor_map(ops[k], 0, x, &y), SX_OK);
            for (int j = 0; j < 8; j++) {
                double xv = sx_tensor_get(x, j), g = sx_tensor_get(y, j), w = ref_op(ops[k], xv, 0);
                if (dt == SX_F32)
                    w = (double)(float)w;
                cr_assert((isnan(g) && isnan(w)) || g == w || fabs(g - w) <= 4e-6 * fabs(w),
                          "%s(%g) = %g, want %g", sx_map_name(ops[k]), xv, g, w);
            }
            sx_tensor_free(y);
        }
        /* the far tails of sigmoid and softplus, where a naive formula overflows */
        double t[4] = {-100, 100, -700, 700};
        int64_t four = 4;
        sx_tensor *z = NULL;
        cr_assert_eq(sx_tensor_from_doubles(SX_F64, 1, &four, t, 4, &z), SX_OK);
        cr_assert_eq(sx_tensor_map(SX_MAP_SIGMOID, 0, z, &y), SX_OK);
        cr_assert(fabs(sx_tensor_get(y, 0) - exp(-100.0)) <= 1e-14 * exp(-100.0));
        cr_assert_eq(sx_tensor_get(y, 1), 1);
        cr_assert(sx_tensor_get(y, 2) > 0 && sx_tensor_get(y, 3) == 1);
        sx_tensor_free(y);
        cr_assert_eq(sx_tensor_map(SX_MAP_SOFTPLUS, 0, z, &y), SX_OK);
        cr_assert(fabs(sx_tensor_get(y, 0) - exp(-100.0)) <= 1e-14 * exp(-100.0));
        cr_assert_eq(sx_tensor_get(y, 1), 100);
        cr_assert_eq(sx_tensor_get(y, 3), 700);
        sx_tensor_free(y);
        sx_tensor_free(z);
        sx_tensor_free(x);
    }
}

Test(tensor_map, empty_and_scalar)
{
    int64_t zero[2] = {3, 0};
    sx_tensor *e = tu_zeros(SX_F32, 2, zero), *y = NULL, *s = NULL;
    for (int k = 0; k < N_OPS; k++) {
        cr_assert_eq(sx_tensor_map_out(all_ops[k], 0.1, e, e), SX_OK);
        cr_assert_eq(sx_tensor_map(all_ops[k], 0.1, e, &y), SX_OK);
        cr_assert_eq(y->size, 0);
        sx_tensor_free(y);
    }
    cr_assert_eq(sx_tensor_scalar(SX_F64, 0.5, &s), SX_OK);
    cr_assert_eq(sx_tensor_map(SX_MAP_EXP, 0, s, &y), SX_OK);
    cr_assert_eq(y->rank, 0);
    cr_assert_eq(sx_tensor_get(y, 0), exp(0.5));
    sx_tensor_free(y);
    sx_tensor_free(s);
    sx_tensor_free(e);
}

/* Above the parallel thresholds (65536 f32 elements, 4096 f64), out of place and in place, and
 * the same bits with 1 and 2 threads. The sizes split into two halves of a multiple of 16
 * elements plus one: the last element belongs to the second thread's range. */
Test(tensor_map, large_parallel)
{
    sx_rng rng;
    sx_rng_seed(&rng, 41);
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < N_OPS; k++) {
            int64_t n = dt == SX_F32 ? 2 * 65536 + 1 : 2 * 4096 + 1;
            sx_map_op op = all_ops[k];
            sx_tensor *x = make_input(&rng, op, (sx_dtype)dt, 1, &n);
            sx_tensor *want = reference(op, 0.05, x), *y1 = NULL, *y2 = NULL;
            cr_assert_eq(sx_threads_set(1), SX_OK);
            cr_assert_eq(sx_tensor_map(op, 0.05, x, &y1), SX_OK);
            cr_assert_eq(sx_threads_set(2), SX_OK);
            cr_assert_eq(sx_tensor_map(op, 0.05, x, &y2), SX_OK);
            cr_assert(tu_close(y2, want, rel_tol(x->dtype), abs_tol(x->dtype)), "%s large",
                      sx_map_name(op));
            cr_assert_eq(memcmp(y1->data, y2->data, (size_t)n * sx_dtype_size(x->dtype)), 0);
            cr_assert_eq(sx_tensor_map_out(op, 0.05, x, x), SX_OK);
            cr_assert(tu_close(x, want, rel_tol(x->dtype), abs_tol(x->dtype)), "%s in place",
                      sx_map_name(op));
            sx_tensor_free(y1);
            sx_tensor_free(y2);
            sx_tensor_free(want);
            sx_tensor_free(x);
        }
}

Test(tensor_map, errors_leave_out_unchanged)
{
    int64_t s34[2] = {3, 4}, s43[2] = {4, 3}, s12[1] = {12};
    sx_tensor *x = tu_zeros(SX_F32, 2, s34), *o43 = tu_zeros(SX_F32, 2, s43);
    sx_tensor *o12 = tu_zeros(SX_F32, 1, s12), *od = tu_zeros(SX_F64, 2, s34);
    cr_assert_eq(sx_tensor_fill(o43, 4), SX_OK);
    cr_assert_eq(sx_tensor_fill(o12, 4), SX_OK);
    cr_assert_eq(sx_tensor_fill(od, 4), SX_OK);
    cr_assert_eq(sx_tensor_map_out(SX_MAP_EXP, 0, x, o43), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "(4,3)") && strstr(sx_last_error(), "(3,4)"), "%s",
              sx_last_error());
    cr_assert_eq(sx_tensor_map_out(SX_MAP_EXP, 0, x, o12), SX_E_SHAPE, "same size, other shape");
    cr_assert_eq(sx_tensor_map_out(SX_MAP_EXP, 0, x, od), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_map_out(SX_MAP_EXP, 0, NULL, o43), SX_E_ARG);
    cr_assert_eq(sx_tensor_map_out(SX_MAP_EXP, 0, x, NULL), SX_E_ARG);
    cr_assert_eq(sx_tensor_map_out(SX_MAP_COUNT, 0, x, x), SX_E_ARG);
    cr_assert_eq(sx_tensor_map_out((sx_map_op)-1, 0, x, x), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "unknown op") != NULL, "%s", sx_last_error());
    for (int64_t i = 0; i < 12; i++) {
        cr_assert_eq(sx_tensor_get(o43, i), 4);
        cr_assert_eq(sx_tensor_get(o12, i), 4);
        cr_assert_eq(sx_tensor_get(od, i), 4);
    }
    sx_tensor *y = (sx_tensor *)1;
    cr_assert_eq(sx_tensor_map(SX_MAP_EXP, 0, NULL, &y), SX_E_ARG);
    cr_assert_null(y);
    y = (sx_tensor *)1;
    cr_assert_eq(sx_tensor_map(SX_MAP_COUNT, 0, x, &y), SX_E_ARG);
    cr_assert_null(y);
    cr_assert_eq(sx_tensor_map(SX_MAP_EXP, 0, x, NULL), SX_E_ARG);
    for (long k = 0; k < 2; k++) { /* each allocation of the allocating form fails in turn */
        tu_fail_after(k);
        y = (sx_tensor *)1;
        cr_assert_eq(sx_tensor_map(SX_MAP_EXP, 0, x, &y), SX_E_NOMEM);
        cr_assert_null(y);
        cr_assert_eq(tu_live_allocs(), 0);
        tu_fail_reset();
    }
    sx_tensor_free(x);
    sx_tensor_free(o43);
    sx_tensor_free(o12);
    sx_tensor_free(od);
}

/* A one-instruction fused program computes what sx_tensor_map computes, bit for bit, in f32
 * and f64, out of place and with the output aliasing the operand; sin/cos/tan with arguments
 * beyond 2^20 (libm's path) in the middle of the data. */
Test(tensor_map, fused_map_instructions_match_the_map_kernels)
{
    sx_rng rng;
    sx_rng_seed(&rng, 43);
    int64_t n = 3000;
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < N_OPS; k++) {
            sx_map_op op = all_ops[k];
            sx_tensor *x = make_input(&rng, op, (sx_dtype)dt, 1, &n), *y = NULL;
            sx_tensor_set(x, 700, 1e9);
            sx_tensor_set(x, 1500, -3e7);
            sx_tensor *z = tu_zeros((sx_dtype)dt, 1, &n);
            cr_assert_eq(sx_tensor_map(op, 0.25, x, &y), SX_OK);
            sx_fused_prog prog = {.n = 1};
            prog.ins[0] =
                (sx_fused_instr){.kind = SX_FUSED_MAP, .op = (uint8_t)op, .a = 0, .alpha = 0.25};
            const sx_tensor *in[1] = {x};
            cr_assert_eq(sx_tensor_fused_out(&prog, 1, in, z), SX_OK, "%s", sx_last_error());
            size_t bytes = (size_t)n * sx_dtype_size((sx_dtype)dt);
            cr_assert_eq(memcmp(y->data, z->data, bytes), 0, "%s %s", sx_dtype_name(x->dtype),
                         sx_map_name(op));
            cr_assert_eq(sx_tensor_fused_out(&prog, 1, in, x), SX_OK); /* in place */
            cr_assert_eq(memcmp(y->data, x->data, bytes), 0, "%s %s in place",
                         sx_dtype_name(x->dtype), sx_map_name(op));
            sx_tensor_free(x);
            sx_tensor_free(y);
            sx_tensor_free(z);
        }
}

/* Operands smaller than the result repeat over its leading axes (a bias over the channels): a
 * fused relu(x + bias) * s gives the bits of the broadcasting binary kernel, the map kernel and
 * the scalar product run one after the other, for channel counts below, at and across the
 * fused block; an operand whose size does not divide the result's is refused. */
Test(tensor_map, fused_periodic_operands_match_broadcasting_kernels)
{
    sx_rng rng;
    sx_rng_seed(&rng, 44);
    const int64_t chans[] = {1, 3, 37, 512, 700};
    for (int dt = 0; dt < 2; dt++)
        for (size_t k = 0; k < sizeof chans / sizeof chans[0]; k++) {
            int64_t xs[4] = {3, 5, 7, chans[k]}, bs[1] = {chans[k]}, one[1] = {1};
            sx_tensor *x = tu_rand(&rng, (sx_dtype)dt, 4, xs, -2, 2);
            sx_tensor *b = tu_rand(&rng, (sx_dtype)dt, 1, bs, -1, 1);
            sx_tensor *s = tu_rand(&rng, (sx_dtype)dt, 1, one, 0.5, 2);
            sx_tensor *want = tu_zeros((sx_dtype)dt, 4, xs), *got = tu_zeros((sx_dtype)dt, 4, xs);
            cr_assert_eq(sx_tensor_binary_out(SX_BINARY_ADD, x, b, want), SX_OK);
            cr_assert_eq(sx_tensor_map_out(SX_MAP_RELU, 0, want, want), SX_OK);
            cr_assert_eq(sx_tensor_binary_out(SX_BINARY_MUL, want, s, want), SX_OK);
            sx_fused_prog prog = {.n = 3};
            prog.ins[0] = (sx_fused_instr){
                .kind = SX_FUSED_BINARY, .op = (uint8_t)SX_BINARY_ADD, .a = 0, .b = 1};
            prog.ins[1] =
                (sx_fused_instr){.kind = SX_FUSED_MAP, .op = (uint8_t)SX_MAP_RELU, .a = -1};
            prog.ins[2] = (sx_fused_instr){
                .kind = SX_FUSED_BINARY, .op = (uint8_t)SX_BINARY_MUL, .a = -2, .b = 2};
            const sx_tensor *in[3] = {x, b, s};
            cr_assert_eq(sx_tensor_fused_out(&prog, 3, in, got), SX_OK, "%s", sx_last_error());
            size_t bytes = (size_t)x->size * sx_dtype_size((sx_dtype)dt);
            cr_assert_eq(memcmp(want->data, got->data, bytes), 0, "%s, %lld channels",
                         sx_dtype_name((sx_dtype)dt), (long long)chans[k]);
            sx_tensor_free(x);
            sx_tensor_free(b);
            sx_tensor_free(s);
            sx_tensor_free(want);
            sx_tensor_free(got);
        }
    int64_t xs[2] = {4, 6}, bad[1] = {5};
    sx_tensor *x = tu_zeros(SX_F32, 2, xs), *b = tu_zeros(SX_F32, 1, bad);
    sx_tensor *out = NULL;
    cr_assert_eq(sx_tensor_full(SX_F32, 2, xs, 3.0, &out), SX_OK);
    sx_fused_prog prog = {.n = 1};
    prog.ins[0] =
        (sx_fused_instr){.kind = SX_FUSED_BINARY, .op = (uint8_t)SX_BINARY_ADD, .a = 0, .b = 1};
    const sx_tensor *in[2] = {x, b};
    cr_assert_eq(sx_tensor_fused_out(&prog, 2, in, out), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "5 elements"), "%s", sx_last_error());
    for (int64_t i = 0; i < out->size; i++)
        cr_assert_eq(sx_tensor_get(out, i), 3.0);
    sx_tensor_free(x);
    sx_tensor_free(b);
    sx_tensor_free(out);
}

/* Regression: round sent halves away from zero (C's round); NumPy, PyTorch and ONNX send them to
 * the even integer. Exact halves, their neighbours, the largest f32 halves below 2^23, signed
 * zeros and special values, repeated past the vector width so that every instruction set's
 * vector body and tail run them (ctest runs this suite again under SX_ISA=avx2 and base), in f32
 * and f64, through the map kernel and a fused program. */
Test(tensor_map, round_halves_to_even)
{
    static const double cases[][2] = {{0.5, 0},
                                      {1.5, 2},
                                      {2.5, 2},
                                      {3.5, 4},
                                      {-0.5, -0.0},
                                      {-1.5, -2},
                                      {-2.5, -2},
                                      {-3.5, -4},
                                      {0.49999997, 0},
                                      {0.50000006, 1},
                                      {2.4999998, 2},
                                      {2.5000002, 3},
                                      {-2.5000002, -3},
                                      {1e6 + 0.5, 1e6},
                                      {8388607.5, 8388608},
                                      {-8388606.5, -8388606},
                                      {8388608, 8388608},
                                      {-0.0, -0.0},
                                      {0.0, 0.0},
                                      {7, 7},
                                      {-7.25, -7},
                                      {HUGE_VAL, HUGE_VAL},
                                      {-HUGE_VAL, -HUGE_VAL},
                                      {1e30, 1e30}};
    const int nc = (int)(sizeof cases / sizeof cases[0]);
    int64_t n = 5 * nc + 3; /* several vectors and a tail */
    for (int dt = 0; dt < 2; dt++) {
        sx_tensor *x = tu_zeros((sx_dtype)dt, 1, &n), *y = tu_zeros((sx_dtype)dt, 1, &n);
        sx_tensor *z = tu_zeros((sx_dtype)dt, 1, &n);
        for (int64_t i = 0; i < n; i++)
            sx_tensor_set(x, i, cases[i % nc][0]);
        sx_tensor_set(x, n - 1, (double)NAN);
        cr_assert_eq(sx_tensor_map_out(SX_MAP_ROUND, 0, x, y), SX_OK, "%s", sx_last_error());
        sx_fused_prog prog = {.n = 1};
        prog.ins[0] = (sx_fused_instr){.kind = SX_FUSED_MAP, .op = SX_MAP_ROUND, .a = 0};
        const sx_tensor *in[1] = {x};
        cr_assert_eq(sx_tensor_fused_out(&prog, 1, in, z), SX_OK, "%s", sx_last_error());
        for (int64_t i = 0; i < n - 1; i++) {
            double want = cases[i % nc][1];
            if (dt == SX_F32)
                want = (float)want;
            for (int k = 0; k < 2; k++) {
                double got = sx_tensor_get(k ? z : y, i);
                cr_expect(got == want && signbit(got) == signbit(want),
                          "%s %s round(%.9g) = %.9g, want %.9g", sx_dtype_name((sx_dtype)dt),
                          k ? "fused" : "map", sx_tensor_get(x, i), got, want);
            }
        }
        cr_expect(isnan(sx_tensor_get(y, n - 1)) && isnan(sx_tensor_get(z, n - 1)));
        sx_tensor_free(x);
        sx_tensor_free(y);
        sx_tensor_free(z);
    }
}

/* Many repeated operands in one program: a chain x + b_0 + ... + b_11 of periods 1 (a scalar), 2,
 * 3, 5, 16, 45, 100, 256 (the fused interpreter lays out a few once per call), 480, 512 (copied
 * per block past those) and 1000, 1125 (longer than a block: read in place where a block does
 * not wrap around them) over 2^9 * 9 * 125 elements (the parallel path), gives the bits of the
 * broadcasting binary kernel run twelve times, in f32 and f64. */
Test(tensor_map, fused_many_repeated_operands_match_broadcasting_kernels)
{
    sx_rng rng;
    sx_rng_seed(&rng, 45);
    enum { N_CHAIN = 12 };
    static const int64_t periods[N_CHAIN] = {1, 2, 3, 5, 16, 45, 100, 256, 480, 512, 1000, 1125};
    for (int dt = 0; dt < 2; dt++) {
        int64_t xs[1] = {512 * 9 * 125};
        sx_tensor *x = tu_rand(&rng, (sx_dtype)dt, 1, xs, -2, 2);
        sx_tensor *want = tu_zeros((sx_dtype)dt, 1, xs), *got = tu_zeros((sx_dtype)dt, 1, xs);
        cr_assert_eq(sx_tensor_copy_out(x, want), SX_OK);
        const sx_tensor *in[N_CHAIN + 1] = {x};
        sx_tensor *b[N_CHAIN];
        sx_fused_prog prog = {.n = N_CHAIN};
        for (int k = 0; k < N_CHAIN; k++) {
            /* the period as a trailing axis: want (n / p, p) + b */
            int64_t bs[1] = {periods[k]}, ws[2] = {xs[0] / periods[k], periods[k]};
            b[k] = tu_rand(&rng, (sx_dtype)dt, 1, bs, -1, 1);
            in[k + 1] = b[k];
            sx_tensor w2 = sx_tensor_view((sx_dtype)dt, 2, ws, want->data);
            cr_assert_eq(sx_tensor_binary_out(SX_BINARY_ADD, &w2, b[k], &w2), SX_OK, "%s",
                         sx_last_error());
            prog.ins[k] = (sx_fused_instr){.kind = SX_FUSED_BINARY,
                                           .op = (uint8_t)SX_BINARY_ADD,
                                           .a = (int16_t)(k == 0 ? 0 : -k),
                                           .b = (int16_t)(k + 1)};
        }
        cr_assert_eq(sx_tensor_fused_out(&prog, N_CHAIN + 1, in, got), SX_OK, "%s",
                     sx_last_error());
        size_t bytes = (size_t)x->size * sx_dtype_size((sx_dtype)dt);
        cr_assert_eq(memcmp(want->data, got->data, bytes), 0, "%s", sx_dtype_name((sx_dtype)dt));
        for (int k = 0; k < N_CHAIN; k++)
            sx_tensor_free(b[k]);
        sx_tensor_free(x);
        sx_tensor_free(want);
        sx_tensor_free(got);
    }
}
/* Every field of every instruction is checked before anything runs: a map
 * whose unused source b is 1000 used to send the interpreter to period[1000] and ops[1000]
 * (a stack overflow); now it, and each other bad field, is SX_E_ARG naming the instruction
 * and the field, and out is untouched. */
Test(tensor_map, fused_unused_source_out_of_range_is_refused)
{
    int64_t n = 5;
    sx_tensor *x = NULL, *out = NULL;
    cr_assert_eq(sx_tensor_full(SX_F32, 1, &n, 0.5, &x), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 1, &n, 3.0, &out), SX_OK);
    const sx_tensor *in[2] = {x, x};
    const sx_fused_instr map = {.kind = SX_FUSED_MAP, .op = (uint8_t)SX_MAP_EXP, .a = 0};
    const sx_fused_instr add = {
        .kind = SX_FUSED_BINARY, .op = (uint8_t)SX_BINARY_ADD, .a = 0, .b = -1};
    struct {
        sx_fused_instr ins;
        int at; /* the instruction's place: 0 alone, 1 after map */
        const char *msg;
    } cases[] = {
        {{.kind = SX_FUSED_MAP, .op = (uint8_t)SX_MAP_EXP, .a = 0, .b = 1000},
         0,
         "instruction 0 (map) has source b = 1000, which it does not read (want 0)"},
        {{.kind = SX_FUSED_MAP, .op = (uint8_t)SX_MAP_EXP, .a = 0, .c = -1000},
         0,
         "instruction 0 (map) has source c = -1000"},
        {{.kind = SX_FUSED_BINARY, .op = (uint8_t)SX_BINARY_ADD, .a = 0, .b = 1, .c = 7},
         0,
         "instruction 0 (binary) has source c = 7"},
        {{.kind = SX_FUSED_BINARY, .op = (uint8_t)SX_BINARY_ADD, .a = 0, .b = 2},
         0,
         "instruction 0 (binary) reads source b = 2, which is not there (2 operands"},
        {{.kind = SX_FUSED_FMA, .a = 0, .b = -1, .c = -2},
         1,
         "instruction 1 (fma) reads source c = -2, which is not there (2 operands, 1 earlier"},
        {{.kind = SX_FUSED_WHERE, .op = 1, .a = 0, .b = 0, .c = 0},
         0,
         "instruction 0 (where) has op 1 (want 0..0)"},
        {{.kind = SX_FUSED_MAP, .op = (uint8_t)SX_MAP_COUNT, .a = 0},
         0,
         "instruction 0 (map) has op"},
        {{.kind = SX_FUSED_BINARY, .op = (uint8_t)SX_BINARY_COUNT, .a = 0, .b = 1},
         0,
         "instruction 0 (binary) has op"},
        {{.kind = 5, .a = 0}, 0, "instruction 0 has kind 5 (want 0..4)"},
        /* a store only in sx_tensor_fused_update's programs */
        {{.kind = SX_FUSED_STORE, .a = -1, .b = 0}, 1, "instruction 1 stores source -1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sx_fused_prog prog = {.n = cases[i].at + 1};
        prog.ins[0] = map;
        prog.ins[cases[i].at] = cases[i].ins;
        sx_error_clear();
        cr_assert_eq(sx_tensor_fused_out(&prog, 2, in, out), SX_E_ARG, "case %zu", i);
        cr_assert(strstr(sx_last_error(), cases[i].msg) != NULL, "case %zu: '%s' not in '%s'", i,
                  cases[i].msg, sx_last_error());
        for (int64_t k = 0; k < n; k++)
            cr_assert_eq(sx_tensor_get(out, k), 3.0, "case %zu: out changed", i);
    }
    /* no operands, a NULL operand list */
    sx_fused_prog one = {.n = 1, .ins = {map}};
    cr_assert_eq(sx_tensor_fused_out(&one, 0, in, out), SX_E_ARG);
    cr_assert_eq(sx_tensor_fused_out(&one, 1, NULL, out), SX_E_ARG);
    /* the same programs with their unused sources 0 run */
    sx_fused_prog two = {.n = 2, .ins = {map, add}};
    cr_assert_eq(sx_tensor_fused_out(&two, 2, in, out), SX_OK, "%s", sx_last_error());
    for (int64_t k = 0; k < n; k++)
        cr_assert_float_eq(sx_tensor_get(out, k), 0.5 + exp(0.5), 1e-6);
    sx_tensor_free(x);
    sx_tensor_free(out);
}

/* A program of stores: v <- mu v + g;  p <- p - lr v, in place, over 1300 elements (several
 * blocks), gives the separate kernels' bits; a store into an operand of another size, or into
 * one that overlaps another, is refused with nothing written. */
/* A store whose operand a later instruction still reads (by its own index, or another index of
 * the same memory) waits for the end of the block: the program reads old values. */
Test(tensor_map, fused_update_later_readers_see_old_values)
{
    int64_t n = 1100;
    for (int alias = 0; alias < 2; alias++) {
        sx_tensor *x = tu_zeros(SX_F32, 1, &n), *y = tu_zeros(SX_F32, 1, &n);
        for (int64_t i = 0; i < n; i++)
            SX_F32P(x)[i] = (float)i;
        sx_fused_prog prog = {.n = 4};
        /* r0 = x + x (stored into x), r1 = x * x (x old: operand 0, or 2 naming the same x) */
        prog.ins[0] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_ADD, 0, 0, 0, 0};
        const int16_t src = alias ? 2 : 0;
        prog.ins[1] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_MUL, src, src, 0, 0};
        prog.ins[2] = (sx_fused_instr){SX_FUSED_STORE, 0, -1, 0, 0, 0};
        prog.ins[3] = (sx_fused_instr){SX_FUSED_STORE, 0, -2, 1, 0, 0};
        sx_tensor *ops[3] = {x, y, x};
        cr_assert_eq(sx_tensor_fused_update(&prog, 3, ops), SX_OK, "%s", sx_last_error());
        for (int64_t i = 0; i < n; i++) {
            cr_assert_eq(SX_F32P(x)[i], (float)(2 * i));
            cr_assert_eq(SX_F32P(y)[i], (float)i * (float)i, "alias %d, element %lld", alias,
                         (long long)i);
        }
        sx_tensor_free(x);
        sx_tensor_free(y);
    }
}

Test(tensor_map, fused_update_stores_into_its_operands_in_place)
{
    sx_rng rng;
    sx_rng_seed(&rng, 3);
    int64_t n = 1300, one = 1;
    for (int dt = 0; dt < 2; dt++) {
        sx_tensor *p = tu_rand(&rng, (sx_dtype)dt, 1, &n, -1, 1);
        sx_tensor *v = tu_rand(&rng, (sx_dtype)dt, 1, &n, -1, 1);
        sx_tensor *g = tu_rand(&rng, (sx_dtype)dt, 1, &n, -1, 1);
        sx_tensor *lr = tu_rand(&rng, (sx_dtype)dt, 1, &one, 0.01, 0.1);
        sx_tensor *mu = tu_rand(&rng, (sx_dtype)dt, 1, &one, 0.5, 0.9);
        sx_tensor *wp = NULL, *wv = NULL, *t = NULL;
        cr_assert_eq(sx_tensor_clone(p, &wp), SX_OK);
        cr_assert_eq(sx_tensor_clone(v, &wv), SX_OK);
        cr_assert_eq(sx_tensor_clone(v, &t), SX_OK);
        cr_assert_eq(sx_tensor_binary_out(SX_BINARY_MUL, mu, v, wv), SX_OK);
        cr_assert_eq(sx_tensor_binary_out(SX_BINARY_ADD, wv, g, wv), SX_OK);
        cr_assert_eq(sx_tensor_binary_out(SX_BINARY_MUL, lr, wv, t), SX_OK);
        cr_assert_eq(sx_tensor_binary_out(SX_BINARY_SUB, wp, t, wp), SX_OK);
        sx_fused_prog prog = {.n = 6};
        prog.ins[0] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_MUL, 4, 1, 0, 0};
        prog.ins[1] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_ADD, -1, 2, 0, 0};
        prog.ins[2] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_MUL, 3, -2, 0, 0};
        prog.ins[3] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_SUB, 0, -3, 0, 0};
        prog.ins[4] = (sx_fused_instr){SX_FUSED_STORE, 0, -4, 0, 0, 0};
        prog.ins[5] = (sx_fused_instr){SX_FUSED_STORE, 0, -2, 1, 0, 0};
        sx_tensor *ops[5] = {p, v, g, lr, mu};
        cr_assert_eq(sx_tensor_fused_update(&prog, 5, ops), SX_OK, "%s", sx_last_error());
        size_t bytes = (size_t)n * sx_dtype_size((sx_dtype)dt);
        cr_assert_eq(memcmp(p->data, wp->data, bytes), 0, "p, dtype %d", dt);
        cr_assert_eq(memcmp(v->data, wv->data, bytes), 0, "v, dtype %d", dt);
        /* into the one-element lr: refused, nothing written */
        prog.ins[5].b = 3;
        cr_assert_eq(sx_tensor_fused_update(&prog, 5, ops), SX_E_ARG);
        cr_assert(strstr(sx_last_error(), "stores into operand 3") != NULL, "%s", sx_last_error());
        cr_assert_eq(memcmp(p->data, wp->data, bytes), 0, "nothing written");
        /* g the parameter itself (read and written element by element); a g of n - 1 elements */
        prog.ins[5].b = 1;
        sx_tensor *bad[5] = {p, v, v, lr, mu};
        bad[2] = p;
        cr_assert_eq(sx_tensor_fused_update(&prog, 5, bad), SX_OK); /* p itself: element-wise */
        sx_tensor half = sx_tensor_view((sx_dtype)dt, 1, (int64_t[]){n - 1},
                                        (char *)v->data + sx_dtype_size((sx_dtype)dt));
        bad[2] = &half;
        bad[2]->size = n - 1;
        cr_assert_eq(sx_tensor_fused_update(&prog, 5, bad), SX_E_SHAPE); /* n - 1 divides not n */
        sx_tensor *all[] = {p, v, g, lr, mu, wp, wv, t};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            sx_tensor_free(all[i]);
    }
}
