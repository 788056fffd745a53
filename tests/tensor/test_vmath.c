/* The vectorised f32 functions of tensor/vmath.h: their error in ulps against double libm over
 * dense sweeps of each domain (every binade, evenly spaced bit patterns, plus uniform samples
 * of the busy range and the f32 inputs closest to multiples of pi/2); special values (NaN,
 * infinities, signed zeros, overflow, underflow, subnormals); the same bits from the
 * vectorised loops (SSE2, and AVX2 / AVX-512 where the CPU has them) as from scalar calls; and
 * sx_tensor_map, whose instruction set SX_ISA caps, against those scalar calls, including sin,
 * cos and tan of arguments beyond 2^20 (libm) in the middle of a block. */
#include "testutil.h"
#include "vmath.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the functions */

typedef enum {
    F_EXP,
    F_EXPM1,
    F_LOG,
    F_LOG1P,
    F_SIN,
    F_COS,
    F_TAN,
    F_TANH,
    F_SIGMOID,
    F_SOFTPLUS,
    F_ERF,
    F_FLOOR,
    F_CEIL,
    F_ROUND,
    F_COUNT
} fn_id;

static double ref_sigmoid(double x)
{
    return 1 / (1 + exp(-x));
}

static double ref_softplus(double x)
{
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

/* The function's name, its map op, the reference in double, the sweep range [-hi, hi] (or
 * [lo, hi]) and the largest error allowed in ulps: the bound the header states (f32 arithmetic
 * for exp, log, log1p; one rounding of a double result for the others; exact for the
 * roundings). */
static const struct {
    const char *name;
    sx_map_op op;
    double (*ref)(double);
    float lo, hi;
    double max_ulp;
} fns[F_COUNT] = {
    [F_EXP] = {"exp", SX_MAP_EXP, exp, -110, 95, 1.0},
    [F_EXPM1] = {"expm1", SX_MAP_EXPM1, expm1, -30, 95, 0.51},
    [F_LOG] = {"log", SX_MAP_LOG, log, 0, INFINITY, 1.0},
    [F_LOG1P] = {"log1p", SX_MAP_LOG1P, log1p, -1, INFINITY, 1.0},
    [F_SIN] = {"sin", SX_MAP_SIN, sin, -0x1p20f, 0x1p20f, 0.51},
    [F_COS] = {"cos", SX_MAP_COS, cos, -0x1p20f, 0x1p20f, 0.51},
    [F_TAN] = {"tan", SX_MAP_TAN, tan, -0x1p20f, 0x1p20f, 0.51},
    [F_TANH] = {"tanh", SX_MAP_TANH, tanh, -12, 12, 0.51},
    [F_SIGMOID] = {"sigmoid", SX_MAP_SIGMOID, ref_sigmoid, -120, 120, 0.51},
    [F_SOFTPLUS] = {"softplus", SX_MAP_SOFTPLUS, ref_softplus, -120, 120, 0.51},
    [F_ERF] = {"erf", SX_MAP_ERF, erf, -5, 5, 0.51},
    [F_FLOOR] = {"floor", SX_MAP_FLOOR, floor, -0x1p25f, 0x1p25f, 0},
    [F_CEIL] = {"ceil", SX_MAP_CEIL, ceil, -0x1p25f, 0x1p25f, 0},
    [F_ROUND] = {"round", SX_MAP_ROUND, nearbyint, -0x1p25f, 0x1p25f, 0}, /* halves to even */
};

/* One function over an array: a plain loop the compiler vectorises (ranged functions with
 * exact = false: the sweeps stay within 2^20). Instantiated for the default instruction set
 * and, on GCC x86-64, for AVX2 and AVX-512 as the kernels of map.c are. */
#define RUN_BODY                                                                                   \
    switch (f) {                                                                                   \
    case F_EXP:                                                                                    \
        RUN_LOOP(vm_expf(v));                                                                      \
    case F_EXPM1:                                                                                  \
        RUN_LOOP(vm_expm1f(v));                                                                    \
    case F_LOG:                                                                                    \
        RUN_LOOP(vm_logf(v));                                                                      \
    case F_LOG1P:                                                                                  \
        RUN_LOOP(vm_log1pf(v));                                                                    \
    case F_SIN:                                                                                    \
        RUN_LOOP(vm_sinf(v, false));                                                               \
    case F_COS:                                                                                    \
        RUN_LOOP(vm_cosf(v, false));                                                               \
    case F_TAN:                                                                                    \
        RUN_LOOP(vm_tanf(v, false));                                                               \
    case F_TANH:                                                                                   \
        RUN_LOOP(vm_tanhf(v));                                                                     \
    case F_SIGMOID:                                                                                \
        RUN_LOOP(vm_sigmoidf(v));                                                                  \
    case F_SOFTPLUS:                                                                               \
        RUN_LOOP(vm_softplusf(v));                                                                 \
    case F_ERF:                                                                                    \
        RUN_LOOP(vm_erff(v));                                                                      \
    case F_FLOOR:                                                                                  \
        RUN_LOOP(vm_floorf(v));                                                                    \
    case F_CEIL:                                                                                   \
        RUN_LOOP(vm_ceilf(v));                                                                     \
    case F_ROUND:                                                                                  \
        RUN_LOOP(vm_roundf(v));                                                                    \
    case F_COUNT:                                                                                  \
        break;                                                                                     \
    }

#define RUN_LOOP(call)                                                                             \
    _Pragma("omp simd") for (int i = 0; i < n; i++)                                                \
    {                                                                                              \
        const float v = x[i];                                                                      \
        y[i] = call;                                                                               \
    }                                                                                              \
    break

static void run_base(fn_id f, const float *x, float *y, int n)
{
    RUN_BODY
}

#if VM_DISPATCH
#pragma GCC push_options
#pragma GCC target("avx2")
static void run_avx2(fn_id f, const float *x, float *y, int n)
{
    RUN_BODY
}
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f")
static void run_avx512(fn_id f, const float *x, float *y, int n)
{
    RUN_BODY
}
#pragma GCC pop_options
#endif
#undef RUN_LOOP

/* The scalar code: a volatile read per element keeps the loop from being vectorised. */
#define RUN_LOOP(call)                                                                             \
    for (int i = 0; i < n; i++) {                                                                  \
        volatile float w = x[i];                                                                   \
        const float v = w;                                                                         \
        y[i] = call;                                                                               \
    }                                                                                              \
    break

static void run_scalar(fn_id f, const float *x, float *y, int n)
{
    RUN_BODY
}
#undef RUN_LOOP

/* ---------------------------------------------------------------- measuring */

/* |y - ref| in ulps of the f32 result (the spacing of f32 numbers in ref's binade, subnormal
 * spacing below). A result that must be inf or NaN has to be exactly that. */
static double ulp_err(float y, double ref)
{
    if (isnan(ref))
        return isnan(y) ? 0 : INFINITY;
    if (isinf((float)ref) || isinf(y))
        return (float)ref == y ? 0 : INFINITY;
    int e;
    frexp(ref, &e);
    int be = e - 1 < -126 ? -126 : e - 1;
    return fabs((double)y - ref) / ldexp(1.0, be - 23);
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Test inputs of f: n evenly spaced bit patterns over each sign's part of [lo, hi] (every
 * binade, subnormals included), n uniform values over [-8, 8] clipped to the domain, and for
 * the trigonometric functions the f32 values nearest to multiples of pi/2. Returns the count. */
static int inputs(fn_id f, float *x, int n)
{
    int k = 0;
    const float lo = fns[f].lo, hi = fns[f].hi;
    for (int sign = 0; sign < 2; sign++) {
        const float end = sign ? -lo : hi; /* magnitude reached on this side */
        if (end <= 0)
            continue;
        const uint32_t top = to_bits(end), sb = sign ? 0x80000000u : 0;
        for (int i = 0; i < n / 2; i++)
            x[k++] = from_bits(sb | (uint32_t)((uint64_t)top * (uint64_t)i / (uint64_t)(n / 2)));
    }
    sx_rng rng;
    sx_rng_seed(&rng, 99 + (uint64_t)f);
    for (int i = 0; i < n; i++) {
        float v = (float)(-8 + 16 * sx_rng_uniform(&rng));
        x[k++] = v < lo ? lo : v > hi ? hi : v;
    }
    if (f == F_SIN || f == F_COS || f == F_TAN)
        for (int j = 1; j <= 4000; j++) {
            const float m = (float)(j * 331 * (M_PI / 2)); /* multiples up to about 2^21 */
            if (fabsf(m) > 0x1p20f)
                break;
            x[k++] = m;
            x[k++] = nextafterf(m, 0);
            x[k++] = -nextafterf(m, INFINITY);
        }
    return k;
}

/* Same bits, NaN matching NaN (its sign and payload are not specified). */
static bool same(float a, float b)
{
    return to_bits(a) == to_bits(b) || (a != a && b != b);
}

#define N_SWEEP (1 << 17)

Test(tensor_vmath, error_against_double_libm_over_each_domain)
{
    float *x = malloc((2 * N_SWEEP + 20000) * sizeof *x), *y = malloc((2 * N_SWEEP + 20000) * 4);
    cr_assert(x && y);
    for (int f = 0; f < F_COUNT; f++) {
        const int n = inputs((fn_id)f, x, N_SWEEP);
        run_base((fn_id)f, x, y, n);
        double worst = 0;
        float at = 0;
        for (int i = 0; i < n; i++) {
            const double e = ulp_err(y[i], fns[f].ref((double)x[i]));
            if (e > worst) {
                worst = e;
                at = x[i];
            }
        }
        cr_assert(worst <= fns[f].max_ulp, "%s: %.3f ulp at x = %a (allowed %.2f)", fns[f].name,
                  worst, (double)at, fns[f].max_ulp);
    }
    free(x);
    free(y);
}

/* Edges of each domain against the reference: infinities and NaN exactly, zeros with their
 * sign, overflow to inf, underflow into the subnormals, subnormal inputs. */
Test(tensor_vmath, special_values)
{
    const float inf = INFINITY;
    const float edges[] = {
        0.0f,    -0.0f,    0x1p-149f, -0x1p-149f, 0x1p-127f, 0x1p-126f,   -0x1p-126f,
        1,       -1,       0.5f,      -0.5f,      2.5f,      0.49999997f, 0x1.fffffep22f,
        0x1p23f, 0x1p30f,  88.72283f, 88.72284f,  89,        -103,        -103.97f,
        -104,    -100,     100,       3.95f,      -3.95f,    10,          -10,
        0x1p20f, -0x1p20f, FLT_MAX,   -FLT_MAX,   inf,       -inf};
    for (int f = 0; f < F_COUNT; f++)
        for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++) {
            float y;
            const float v = edges[k];
            if ((f == F_SIN || f == F_COS || f == F_TAN) && vm_trig_far(v))
                y = f == F_SIN   ? vm_sinf(v, true)
                    : f == F_COS ? vm_cosf(v, true)
                                 : vm_tanf(v, true);
            else
                run_scalar((fn_id)f, &v, &y, 1);
            const double want = fns[f].ref((double)v);
            cr_assert(ulp_err(y, want) <= fns[f].max_ulp, "%s(%a) = %a, want %a", fns[f].name,
                      (double)v, (double)y, want);
            if (want == 0)
                cr_assert_eq(!signbit(y), !signbit(want), "%s(%a) = %a, want %a", fns[f].name,
                             (double)v, (double)y, want);
        }
    /* NaN in, NaN out, for every function and both signs of NaN */
    for (int f = 0; f < F_COUNT; f++) {
        float v[2] = {NAN, -NAN}, y[2];
        run_base((fn_id)f, v, y, 2);
        cr_assert(isnan(y[0]) && isnan(y[1]), "%s(NaN)", fns[f].name);
    }
}

/* The vectorised loops give the scalar code's bits on every instruction set this CPU has. */
Test(tensor_vmath, vector_and_scalar_bits_agree)
{
    float *x = malloc((2 * N_SWEEP + 20000) * sizeof *x), *ys = malloc((2 * N_SWEEP + 20000) * 4),
          *yv = malloc((2 * N_SWEEP + 20000) * 4);
    cr_assert(x && ys && yv);
    for (int f = 0; f < F_COUNT; f++) {
        const int n = inputs((fn_id)f, x, N_SWEEP / 4);
        run_scalar((fn_id)f, x, ys, n);
        for (int isa = VM_ISA_BASE; isa <= VM_ISA_AVX512; isa++) {
            if (isa > vm_isa_detect())
                break;
            if (isa == VM_ISA_BASE)
                run_base((fn_id)f, x, yv, n);
#if VM_DISPATCH
            else if (isa == VM_ISA_AVX2)
                run_avx2((fn_id)f, x, yv, n);
            else
                run_avx512((fn_id)f, x, yv, n);
#endif
            for (int i = 0; i < n; i++)
                cr_assert(same(yv[i], ys[i]), "%s isa %d x = %a: vector %a, scalar %a", fns[f].name,
                          isa, (double)x[i], (double)yv[i], (double)ys[i]);
        }
    }
    free(x);
    free(ys);
    free(yv);
}

/* sx_tensor_map (with the instruction set the environment allows) against the scalar code:
 * same bits, also when a block holds sin/cos/tan arguments beyond 2^20, which go to libm;
 * out of place and in place. */
static void map_matches_scalar(void)
{
    const int64_t n = 5000;
    sx_tensor *x = tu_zeros(SX_F32, 1, &n), *y = tu_zeros(SX_F32, 1, &n);
    float *xp = x->data, *yp = y->data, *ys = malloc((size_t)n * sizeof *ys);
    cr_assert(ys);
    for (int f = 0; f < F_COUNT; f++) {
        sx_rng rng;
        sx_rng_seed(&rng, 7);
        for (int64_t i = 0; i < n; i++)
            xp[i] = (float)(fns[f].lo > -8 ? (double)fns[f].lo + 8 * sx_rng_uniform(&rng)
                                           : -8 + 16 * sx_rng_uniform(&rng));
        xp[17] = 1e30f; /* far arguments in the first and in the third block */
        xp[2500] = -3e6f;
        xp[2501] = 0x1.000002p20f;
        xp[n - 1] = NAN;
        for (int64_t i = 0; i < n; i++) {
            const float v = xp[i];
            if (f == F_SIN || f == F_COS || f == F_TAN)
                ys[i] = f == F_SIN   ? vm_sinf(v, true)
                        : f == F_COS ? vm_cosf(v, true)
                                     : vm_tanf(v, true);
            else
                run_scalar((fn_id)f, &xp[i], &ys[i], 1);
        }
        cr_assert_eq(sx_tensor_map_out(fns[f].op, 0, x, y), SX_OK);
        for (int64_t i = 0; i < n; i++)
            cr_assert(same(yp[i], ys[i]), "%s(%a): map %a, scalar %a", fns[f].name, (double)xp[i],
                      (double)yp[i], (double)ys[i]);
        if (f == F_SIN) {
            cr_assert_eq(yp[17], sinf(1e30f));
            cr_assert_eq(yp[2500], sinf(-3e6f));
        }
        cr_assert_eq(sx_tensor_map_out(fns[f].op, 0, x, x), SX_OK);
        for (int64_t i = 0; i < n; i++)
            cr_assert(same(xp[i], ys[i]), "%s in place", fns[f].name);
    }
    free(ys);
    sx_tensor_free(x);
    sx_tensor_free(y);
}

/* Each Criterion test runs in a process of its own, so SX_ISA set first holds for it. */
Test(tensor_vmath, map_kernels_base)
{
    setenv("SX_ISA", "base", 1);
    map_matches_scalar();
}

Test(tensor_vmath, map_kernels_avx2)
{
    setenv("SX_ISA", "avx2", 1);
    map_matches_scalar();
}

Test(tensor_vmath, map_kernels_widest)
{
    unsetenv("SX_ISA");
    map_matches_scalar();
}
