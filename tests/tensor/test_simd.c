/* simd.h, the vector abstraction of the hand-vectorised kernel templates: a small template (a
 * masked axpy, y += a x, whose tail goes through V_MLOAD / V_MSTORE; the three fused forms; the
 * lane sum) instantiated for every instruction set this build has (AVX2 and AVX-512 on x86-64,
 * NEON on AArch64) in f32 and f64, and compared with plain loops: FMA forms bit for bit (each
 * rounds once, as fma() does), nothing written past n, the lane sum to rounding. The x86 sets run
 * where the CPU has them. */
#include "testutil.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* The template, expanded where simd.h has defined V, VL, ... for one set and element type. */
#define SIMD_TEST_FNS(SFX)                                                                         \
    static VATTR void axpy_##SFX(int64_t n, T a, const T *x, T *y)                                 \
    {                                                                                              \
        const V va = V_SET1(a);                                                                    \
        int64_t i = 0;                                                                             \
        for (; i + VL <= n; i += VL)                                                               \
            V_STORE(y + i, V_FMA(va, V_LOAD(x + i), V_LOAD(y + i)));                               \
        const VMASK m = V_MASK_N(n - i);                                                           \
        V_MSTORE(y + i, m, V_FMA(va, V_MLOAD(m, x + i), V_MLOAD(m, y + i)));                       \
    }                                                                                              \
    /* out[0..VL) = a b + c, out[VL..2VL) = c - a b, out[2VL..3VL) = -(a b) - c */                 \
    static VATTR void fused_##SFX(const T *a, const T *b, const T *c, T *out)                      \
    {                                                                                              \
        const V va = V_LOAD(a), vb = V_LOAD(b), vc = V_LOAD(c);                                    \
        V_STORE(out, V_FMA(va, vb, vc));                                                           \
        V_STORE(out + VL, V_FNMA(va, vb, vc));                                                     \
        V_STORE(out + 2 * VL, V_FNMS(va, vb, vc));                                                 \
        V_STORE(out + 3 * VL, V_ADD(V_SUB(va, vb), V_MUL(vb, vc)));                                \
    }                                                                                              \
    static VATTR T hsum_##SFX(const T *x)                                                          \
    {                                                                                              \
        return V_HSUM(V_LOAD(x));                                                                  \
    }                                                                                              \
    static const int vl_##SFX = VL;

#if defined(__GNUC__) && defined(__x86_64__)
#define HAVE_X86 1
#define SIMD_ISA SIMD_AVX2
#define SIMD_BITS 32
#define T float
#include "simd.h"
SIMD_TEST_FNS(avx2_f32)
#include "simd_end.h"
#undef T
#define SIMD_ISA SIMD_AVX2
#define SIMD_BITS 64
#define T double
#include "simd.h"
SIMD_TEST_FNS(avx2_f64)
#include "simd_end.h"
#undef T
#define SIMD_ISA SIMD_AVX512
#define SIMD_BITS 32
#define T float
#include "simd.h"
SIMD_TEST_FNS(avx512_f32)
#include "simd_end.h"
#undef T
#define SIMD_ISA SIMD_AVX512
#define SIMD_BITS 64
#define T double
#include "simd.h"
SIMD_TEST_FNS(avx512_f64)
#include "simd_end.h"
#undef T
#else
#define HAVE_X86 0
#endif

#if defined(__GNUC__) && defined(__aarch64__)
#define HAVE_NEON 1
#define SIMD_ISA SIMD_NEON
#define SIMD_BITS 32
#define T float
#include "simd.h"
SIMD_TEST_FNS(neon_f32)
#include "simd_end.h"
#undef T
#define SIMD_ISA SIMD_NEON
#define SIMD_BITS 64
#define T double
#include "simd.h"
SIMD_TEST_FNS(neon_f64)
#include "simd_end.h"
#undef T
#else
#define HAVE_NEON 0
#endif

/* One instance of the template, f32 and f64. */
typedef struct simd_set {
    const char *name;
    bool (*runs)(void);
    void (*axpy32)(int64_t, float, const float *, float *);
    void (*fused32)(const float *, const float *, const float *, float *);
    float (*hsum32)(const float *);
    int vl32;
    void (*axpy64)(int64_t, double, const double *, double *);
    void (*fused64)(const double *, const double *, const double *, double *);
    double (*hsum64)(const double *);
    int vl64;
} simd_set;

#if HAVE_X86
static bool cpu_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static bool cpu_avx512(void)
{
    return cpu_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
}
#endif
#if HAVE_NEON
static bool cpu_neon(void)
{
    return true; /* part of every AArch64 CPU */
}
#endif

#define SET(NAME, RUNS, S)                                                                         \
    {                                                                                              \
        NAME, RUNS, axpy_##S##_f32, fused_##S##_f32, hsum_##S##_f32, vl_##S##_f32, axpy_##S##_f64, \
            fused_##S##_f64, hsum_##S##_f64, vl_##S##_f64                                          \
    }

static const simd_set sets[] = {
#if HAVE_X86
    SET("avx2", cpu_avx2, avx2),
    SET("avx512", cpu_avx512, avx512),
#endif
#if HAVE_NEON
    SET("neon", cpu_neon, neon),
#endif
    {NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, 0},
};

#define N_MAX 40
#define GUARD 8

/* Every length 0..N_MAX (full vectors and every tail): y += a x against fma(), and the GUARD
 * elements after y[n) keep their value. */
static void check_axpy(const simd_set *s)
{
    for (int64_t n = 0; n <= N_MAX; n++) {
        float x32[N_MAX + GUARD], y32[N_MAX + GUARD], r32[N_MAX + GUARD];
        double x64[N_MAX + GUARD], y64[N_MAX + GUARD], r64[N_MAX + GUARD];
        for (int i = 0; i < N_MAX + GUARD; i++) {
            x64[i] = 0.37 * i - 3.1 + 1.0 / (i + 3);
            y64[i] = 1.3 - 0.11 * i * i / (i + 1.0);
            x32[i] = (float)x64[i];
            y32[i] = (float)y64[i];
        }
        for (int i = 0; i < N_MAX + GUARD; i++) {
            r32[i] = i < n ? fmaf(1.7f, x32[i], y32[i]) : y32[i];
            r64[i] = i < n ? fma(1.7, x64[i], y64[i]) : y64[i];
        }
        s->axpy32(n, 1.7f, x32, y32);
        s->axpy64(n, 1.7, x64, y64);
        cr_assert(memcmp(y32, r32, sizeof y32) == 0, "%s f32 axpy, n = %lld", s->name,
                  (long long)n);
        cr_assert(memcmp(y64, r64, sizeof y64) == 0, "%s f64 axpy, n = %lld", s->name,
                  (long long)n);
    }
}

static void check_fused(const simd_set *s)
{
    float a32[16], b32[16], c32[16], o32[64];
    double a64[8], b64[8], c64[8], o64[32];
    for (int i = 0; i < 16; i++) {
        a32[i] = 0.1f * (float)i - 0.7f;
        b32[i] = 1.0f / (float)(i + 1);
        c32[i] = 0.3f * (float)(i % 5) - 0.5f;
        if (i < 8) {
            a64[i] = 0.1 * i - 0.7;
            b64[i] = 1.0 / (i + 3);
            c64[i] = 0.3 * (i % 3) - 0.5;
        }
    }
    s->fused32(a32, b32, c32, o32);
    s->fused64(a64, b64, c64, o64);
    const int v = s->vl32, w = s->vl64;
    for (int i = 0; i < v; i++) {
        cr_assert_eq(o32[i], fmaf(a32[i], b32[i], c32[i]), "%s f32 V_FMA lane %d", s->name, i);
        cr_assert_eq(o32[v + i], fmaf(-a32[i], b32[i], c32[i]), "%s f32 V_FNMA lane %d", s->name,
                     i);
        cr_assert_eq(o32[2 * v + i], -fmaf(a32[i], b32[i], c32[i]), "%s f32 V_FNMS lane %d",
                     s->name, i);
        cr_assert_eq(o32[3 * v + i], (a32[i] - b32[i]) + b32[i] * c32[i], "%s f32 lane %d", s->name,
                     i);
    }
    for (int i = 0; i < w; i++) {
        cr_assert_eq(o64[i], fma(a64[i], b64[i], c64[i]), "%s f64 V_FMA lane %d", s->name, i);
        cr_assert_eq(o64[w + i], fma(-a64[i], b64[i], c64[i]), "%s f64 V_FNMA lane %d", s->name, i);
        cr_assert_eq(o64[2 * w + i], -fma(a64[i], b64[i], c64[i]), "%s f64 V_FNMS lane %d", s->name,
                     i);
        cr_assert_eq(o64[3 * w + i], (a64[i] - b64[i]) + b64[i] * c64[i], "%s f64 lane %d", s->name,
                     i);
    }
    float x32[16];
    double x64[8], s64 = 0.0;
    float s32 = 0.0f;
    for (int i = 0; i < 16; i++)
        x32[i] = 0.25f * (float)i + 1.0f / (float)(i + 2);
    for (int i = 0; i < 8; i++)
        x64[i] = 0.25 * i + 1.0 / (i + 2);
    for (int i = 0; i < v; i++)
        s32 += x32[i];
    for (int i = 0; i < w; i++)
        s64 += x64[i];
    cr_assert_float_eq(s->hsum32(x32), s32, 1e-5f * s32, "%s f32 V_HSUM", s->name);
    cr_assert_float_eq(s->hsum64(x64), s64, 1e-13 * s64, "%s f64 V_HSUM", s->name);
}

/* Each set the build has and the CPU runs. */
Test(tensor_simd, every_set_matches_plain_loops)
{
    int ran = 0;
    for (const simd_set *s = sets; s->name != NULL; s++) {
        if (!s->runs())
            continue;
        cr_assert_eq(s->vl32, 2 * s->vl64, "%s: lanes", s->name);
        check_axpy(s);
        check_fused(s);
        cr_log_info("simd.h %s: f32 x %d, f64 x %d", s->name, s->vl32, s->vl64);
        ran++;
    }
#if HAVE_NEON
    cr_assert_geq(ran, 1, "NEON runs on every AArch64 CPU");
#endif
    if (ran == 0)
        cr_skip_test("no vector set of simd.h on this CPU");
}
