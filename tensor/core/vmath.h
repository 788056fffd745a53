/* vmath.h: f32 elementary functions written for the vectoriser (exp, expm1, log, log1p, sin,
 * cos, tan, tanh, sigmoid, softplus, erf, floor, ceil, round), the type-generic names that
 * sx_map.def uses, and the instruction-set dispatch of the kernels that use them. Each function is
 * branch-free scalar code (polynomials, bit-blend selects, integer operations on the bits) that gcc
 * -O3 turns into SIMD code in a `#pragma omp simd` loop at any vector width. They need
 * -ffp-contract=off (the build sets it): the error-free sums below rely on it, and so do the SSE2,
 * AVX2 and AVX-512 builds of a loop giving the scalar code's bits. Never installed. */
#ifndef SX_VMATH_H
#define SX_VMATH_H

#include "tensor_impl.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The larger functions (erf, log1p, softplus) are inlined wherever they are used: out of line,
 * a kernel's loop makes a scalar call per element (and a block scan calls it once more, as the
 * compiler cannot see the call is pure), where inlined it vectorises. */
#if defined(__GNUC__)
#define VM_HEAVY static inline __attribute__((always_inline))
#else
#define VM_HEAVY static inline
#endif

/* Accuracy: the largest error against double libm, in ulps of the f32 result, measured over
 * every f32 input for exp, log, log1p and over every 5th (sin, cos, tan: |x| <= 2^20) or 7th
 * bit pattern for the others (tests/tensor/test_vmath.c checks dense samples of each domain):
 * exp 0.764, log 0.840, log1p 0.865 (f32 arithmetic); expm1 0.501, tanh 0.501, sigmoid 0.5002,
 * softplus 0.5002, erf 0.501, sin, cos, tan 0.5001 (double arithmetic rounded once); floor,
 * ceil, round exact (round: halves to even). Special values as C99 Annex F: NaN gives NaN;
 * exp(-inf) = 0, exp(inf) = inf; log(0) = -inf, log(x < 0) = NaN; sin(inf) = NaN; odd functions
 * keep -0; overflow gives inf and underflow rounds once into the subnormals. sin, cos and tan hold
 * this for |x| <= 2^20 only: they are "ranged" (see VM_SIN below), and their callers send larger
 * |x| to libm. */

/* ---------------------------------------------------------------- bits and selects */

static inline uint32_t vm_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float vm_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline uint64_t vm_bits64(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline double vm_double(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* c ? a : b as a bit blend. Both sides are computed in any case, and the compiler must keep it
 * so: with `?:` it may sink one side's arithmetic under a branch (which -ftrapping-math then
 * forbids it to if-convert) or thread jumps through a constant, and the loop stays scalar. */
static inline float vm_sel(bool c, float a, float b)
{
    const uint32_t m = (uint32_t)0 - (uint32_t)c;
    return vm_float((vm_bits(a) & m) | (vm_bits(b) & ~m));
}

static inline int32_t vm_seli(bool c, int32_t a, int32_t b)
{
    const uint32_t m = (uint32_t)0 - (uint32_t)c;
    return (int32_t)(((uint32_t)a & m) | ((uint32_t)b & ~m));
}

static inline double vm_seld(bool c, double a, double b)
{
    const uint64_t m = (uint64_t)0 - (uint64_t)c;
    return vm_double((vm_bits64(a) & m) | (vm_bits64(b) & ~m));
}

/* |x| with the sign bit of s. */
static inline float vm_copysign(float x, float s)
{
    return vm_float((vm_bits(x) & 0x7fffffffu) | (vm_bits(s) & 0x80000000u));
}

/* ---------------------------------------------------------------- exp (f32) */

/* ln2 = VM_LN2_HI + VM_LN2_LO, VM_LN2_HI of 9 bits: n VM_LN2_HI and x - n VM_LN2_HI are exact
 * for |n| < 2^15. x + VM_MAGIC - VM_MAGIC rounds |x| < 2^22 to an integer. */
#define VM_LN2_HI 0x1.63p-1f
#define VM_LN2_LO -0x1.bd0106p-13f
#define VM_MAGIC 0x1.8p23f

/* x = n ln2 + r + rl, n = rint(x / ln2), |r| <= ln2/2 (and a rounding), rl the exact rounding
 * error of r (two-sum); |x| < 2^22. */
static inline float vm_exp_reduce(float x, int32_t *n, float *rl)
{
    const float k = x * 0x1.715476p0f + VM_MAGIC;
    const float j = k - VM_MAGIC;
    *n = (int32_t)(vm_bits(k) - vm_bits(VM_MAGIC));
    const float a = x - j * VM_LN2_HI, b = -(j * VM_LN2_LO);
    const float r = a + b, bb = r - a;
    *rl = (a - (r - bb)) + (b - bb);
    return r;
}

/* e^r - 1 - r for |r| <= 0.35: r^2 (1/2 + r/6 + ...), minimax for the relative error of e^r - 1
 * (2.8e-10 before the coefficients are rounded to f32). */
static inline float vm_expm1_tail(float r)
{
    float e = 0.0001996358f;
    e = 0.0013943841f + r * e;
    e = 0.0083332174f + r * e;
    e = 0.041666318f + r * e;
    e = 0.16666667f + r * e;
    e = 0.5f + r * e;
    return r * r * e;
}

/* p 2^n with 2^n as two factors, each a normal float for n in [-252, 254], so the product
 * rounds once even when it is subnormal or overflows (n >> 1: arithmetic shift in GCC, Clang). */
static inline float vm_scale2(float p, int32_t n)
{
    const int32_t h = n >> 1;
    const float a = vm_float((uint32_t)(h + 127) << 23);
    const float b = vm_float((uint32_t)(n - h + 127) << 23);
    return p * a * b;
}

/* e^x = 2^n (1 + r + rl + tail): 1 + r split exactly (fast two-sum), so the last addition is the
 * one rounding that matters. x beyond (-104, 89) is selected at the end (a clamp before the
 * arithmetic would let the compiler fold constants through a branch). */
static inline float vm_expf(float x)
{
    int32_t n;
    float rl;
    const float r = vm_exp_reduce(x, &n, &rl);
    const float h = 1.0f + r, hl = (1.0f - h) + r;
    const float p = h + ((hl + rl) + vm_expm1_tail(r));
    const float y = vm_sel(x > 89.0f, INFINITY, vm_scale2(p, n));
    return vm_sel(x < -104.0f, 0.0f, y);
}

/* ---------------------------------------------------------------- log, log1p (f32) */

/* x = m 2^e, m in [sqrt(1/2), sqrt(2)), for positive normal x (the bits of sqrt(1/2) are the
 * boundary of the split). */
static inline float vm_log_split(float x, int32_t *e)
{
    const uint32_t t = vm_bits(x) - 0x3f3504f3u;
    *e = (int32_t)t >> 23;
    return vm_float((t & 0x007fffffu) + 0x3f3504f3u);
}

/* log(m 2^e) + c for m in [sqrt(1/2), sqrt(2)) and a small correction c: with f = m - 1 (exact)
 * and s = f / (2 + f), log m = 2 atanh(s) = f - (f^2/2 - s (f^2/2 + R)), R = 2s^2/3 + 2s^4/5 + ...
 * (minimax, 1.6e-9), summed small terms first and e ln2 in two pieces. */
static inline float vm_log_kernel(float m, int32_t e, float c)
{
    const float ef = (float)e, f = m - 1.0f;
    const float s = f / (2.0f + f), z = s * s;
    const float r = z * (0.66666776f + z * (0.39977539f + z * 0.29871839f));
    const float hfsq = 0.5f * f * f;
    return ef * VM_LN2_HI - ((hfsq - (s * (hfsq + r) + (ef * VM_LN2_LO + c))) - f);
}

/* log x; subnormal x is scaled by 2^23 first. */
static inline float vm_logf(float x)
{
    const bool sub = x < 0x1p-126f;
    int32_t e;
    const float m = vm_log_split(vm_sel(sub, x * 0x1p23f, x), &e);
    float y = vm_log_kernel(m, e - vm_seli(sub, 23, 0), 0.0f);
    y = vm_sel(x == INFINITY, x, y);
    y = vm_sel(x == 0, -INFINITY, y);
    y = vm_sel(x < 0, NAN, y);
    return vm_sel(x != x, x, y);
}

/* log(1 + x) = log u + c/u, u = 1 + x rounded and c its rounding error, exact (Sterbenz) as
 * 1 - (u - x) for x >= 1 and x - (u - 1) below; so x near 0 keeps all its digits. */
VM_HEAVY float vm_log1pf(float x)
{
    const float u = 1.0f + x;
    int32_t e;
    const float m = vm_log_split(u, &e);
    const float c = vm_sel(x >= 1.0f, 1.0f - (u - x), x - (u - 1.0f)) / u;
    float y = vm_log_kernel(m, e, c);
    y = vm_sel(x == INFINITY, x, y);
    y = vm_sel(x == -1.0f, -INFINITY, y);
    y = vm_sel(x < -1.0f, NAN, y);
    y = vm_sel(x != x, x, y);
    return vm_sel(fabsf(x) < 0x1p-24f, x, y); /* log1p(x) rounds to x there; keeps -0 */
}

/* ---------------------------------------------------------------- double kernels */

/* The functions below compose several roundings (an exponential, a sum, a division, a
 * reduction near a multiple of pi/2): in f32 their errors add up to 2-3 ulps where the result
 * falls low in its binade. They run in double on kernels accurate to about 1e-10 and round to
 * f32 once: 0.5 ulp and a hair. Still branch-free and vectorised (with half the lanes). Their
 * selects take conditions from f32 comparisons of the input: SSE2 cannot turn the mask of a
 * double comparison into a 64-bit lane mask, and the loop would stay scalar. */

/* e^r - 1 for |r| <= ln2/2: r + r^2 P(r), minimax (5e-11 relative). */
static inline double vm_em1_d(double r)
{
    double e = 1.9323515695988643e-05;
    e = 0.0001989923734727557 + r * e;
    e = 0.0013900479178972905 + r * e;
    e = 0.00833329853880307 + r * e;
    e = 0.04166659700671223 + r * e;
    e = 0.1666666671883204 + r * e;
    e = 0.5000000010440626 + r * e;
    return r + r * r * e;
}

/* x = n ln2 + r, |x| <= 1000: ln2 = hi + lo with hi of 44 bits (n hi and x - n hi exact). */
static inline double vm_exp_reduce_d(double x, int64_t *n)
{
    const double k = x * 1.4426950408889634 + 0x1.8p52;
    const double j = k - 0x1.8p52;
    *n = (int64_t)(vm_bits64(k) - vm_bits64(0x1.8p52));
    return (x - j * 0x1.62e42fefa38p-1) - j * 5.497923018708371e-14;
}

/* e^x for x in [-700, 700]. */
static inline double vm_exp_d(double x)
{
    int64_t n;
    const double p = 1.0 + vm_em1_d(vm_exp_reduce_d(x, &n));
    return vm_double(vm_bits64(p) + ((uint64_t)n << 52));
}

/* e^x - 1 for x in [-700, 700]: (2^n - 1) + 2^n expm1(r), 2^n - 1 exact where the -1 matters. */
static inline double vm_expm1_d(double x)
{
    int64_t n;
    const double m = vm_em1_d(vm_exp_reduce_d(x, &n));
    const double t = vm_double((uint64_t)(n + 1023) << 52);
    return (t - 1.0) + t * m;
}

/* log(1 + e) for e in [0, 1]: u = 1 + e and its exact rounding error c = e - (u - 1); log u =
 * k ln2 + log m (m = u, or u/2 when k: u > sqrt(2), about) by the atanh series of s = f / (2 + f)
 * (minimax, 1e-11), plus c / u. */
static inline double vm_log1p01_d(double e, bool k)
{
    const double u = 1.0 + e;
    const double c = (e - (u - 1.0)) / u;
    const double f = vm_seld(k, 0.5 * u, u) - 1.0;
    const double s = f / (2.0 + f), z = s * s;
    const double r =
        z * (0.6666666564544974 +
             z * (0.4000033519247748 + z * (0.28537308434709535 + z * 0.23582153450132562)));
    const double hfsq = 0.5 * f * f;
    return (vm_seld(k, 0.6931471805599453, 0.0) + c) + (f - (hfsq - s * (hfsq + r)));
}

/* ---------------------------------------------------------------- expm1, tanh, sigmoid, ... */

/* e^x - 1: -1 below -20, inf above 100. */
static inline float vm_expm1f(float x)
{
    const double xd = vm_seld(x < -20.0f, -20.0, vm_seld(x > 100.0f, 100.0, (double)x));
    return vm_sel(x == 0, x, (float)vm_expm1_d(xd)); /* keeps -0 */
}

/* tanh x = E / (E + 2), E = e^2|x| - 1: no cancellation at any x; 1 for |x| > 10. */
static inline float vm_tanhf(float x)
{
    const double e = vm_expm1_d(2.0 * vm_seld(fabsf(x) > 10.0f, 10.0, fabs((double)x)));
    return vm_copysign((float)(e / (e + 2.0)), x);
}

/* 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below: one e^-|x|, one division, no overflow;
 * the left tail keeps its subnormals. */
static inline float vm_sigmoidf(float x)
{
    const double e = vm_exp_d(-vm_seld(fabsf(x) > 200.0f, 200.0, fabs((double)x)));
    return (float)(vm_seld(x >= 0, 1.0, e) / (1.0 + e));
}

/* log(1 + e^x) = max(x, 0) + log1p(e^-|x|); 1 + e^-|x| > sqrt(2) for |x| < asinh(1). */
VM_HEAVY float vm_softplusf(float x)
{
    const double e = vm_exp_d(-vm_seld(fabsf(x) > 200.0f, 200.0, fabs((double)x)));
    const double l = vm_log1p01_d(e, fabsf(x) < 0.88137359f);
    return (float)((double)vm_sel(x > 0, x, 0.0f) + l);
}

/* erf x: x P(x^2) for |x| < 1 (minimax, 3e-11); above, 1 - e^-x^2 Q(t) with t = 1 / (1 + |x|/2)
 * and Q minimax for erfc(x) e^x^2 on [1, 3.95] (1.2e-10; x^2 is exact in double); +-1 beyond. */
VM_HEAVY float vm_erff(float x)
{
    const double xd = (double)x, a = vm_seld(fabsf(x) > 3.95f, 3.95, fabs(xd)), z = xd * xd;
    double p = -9.641519445188179e-06;
    p = 0.00011256949086253336 + z * p;
    p = -0.0008482829007357586 + z * p;
    p = 0.005220945443888021 + z * p;
    p = -0.026865400046030406 + z * p;
    p = 0.11283781974170608 + z * p;
    p = -0.37612638434655143 + z * p;
    p = 1.1283791670580228 + z * p;
    const double t = 1.0 / (1.0 + 0.5 * a);
    double q = 0.015942748564507496;
    q = 0.05662803577523901 + t * q;
    q = -0.3642278797306179 + t * q;
    q = 0.4599743581622673 + t * q;
    q = -0.04184880146493505 + t * q;
    q = 0.3243856353544841 + t * q;
    q = 0.2651860961503107 + t * q;
    q = 0.2841814017534567 + t * q;
    q = -0.00011202387864089483 + t * q;
    const double big = 1.0 - vm_exp_d(-a * a) * q;
    return vm_copysign((float)vm_seld(fabsf(x) < 1.0f, fabs(xd) * p, big), x);
}

/* ---------------------------------------------------------------- floor, ceil, round */

/* x rounded toward zero, with x's sign: through int32 for |x| < 2^23 (SSE2 has no rounding
 * instruction); larger |x|, infinities and NaN are their own value. */
static inline float vm_truncf(float x)
{
    const bool small = fabsf(x) < 0x1p23f;
    const float t = (float)(int32_t)vm_sel(small, x, 0.0f);
    return vm_copysign(vm_sel(small, t, x), x);
}

static inline float vm_floorf(float x)
{
    const float t = vm_truncf(x);
    return vm_sel(t > x, t - 1.0f, t);
}

static inline float vm_ceilf(float x)
{
    const float t = vm_truncf(x);
    return vm_sel(t < x, t + 1.0f, t);
}

/* To the nearest integer, halves to the even one (as NumPy, PyTorch and ONNX; IEEE's
 * roundTiesToEven, whatever the current rounding mode): t = x rounded toward zero, d = |x - t|
 * (exact, so 0.49999997 rounds to 0), one step away from zero when d > 1/2, or d = 1/2 and t is
 * odd. |x| >= 2^23 is an integer already. Keeps the sign: -0.5 gives -0. */
static inline float vm_roundf(float x)
{
    const bool small = fabsf(x) < 0x1p23f;
    const int32_t i = (int32_t)vm_sel(small, x, 0.0f);
    const float t = vm_copysign(vm_sel(small, (float)i, x), x);
    const float d = fabsf(x - t);
    const bool up = (d > 0.5f) | ((d == 0.5f) & ((i & 1) != 0));
    return vm_sel(up, t + vm_copysign(1.0f, x), t);
}

/* The same in double (libm's trunc, exact; t odd when t/2, exact, is not an integer). */
static inline double vm_round_f64(double x)
{
    const double t = trunc(x), d = fabs(x - t), h = t * 0.5;
    const bool up = (d > 0.5) | ((d == 0.5) & (h != trunc(h)));
    return up ? t + copysign(1.0, x) : t;
}

/* ---------------------------------------------------------------- sin, cos, tan */

/* The reduction below is exact for |x| <= 2^20; larger finite |x| is "far". */
#define VM_TRIG_MAX 0x1p20f

static inline int vm_trig_far(float x)
{
    const float a = fabsf(x);
    return a > VM_TRIG_MAX && a < INFINITY;
}

/* sin x (odd = 0), cos x (odd = 1) or tan x (tan), |x| <= 2^20, in double: x = j pi/2 + r with
 * pi/2 = P1 + P2, P1 of 33 bits so that j P1 (j < 2^20) and x - j P1 are exact; r keeps a
 * relative error near 2^-53 even next to a multiple of pi/2 (the closest f32 below 2^20 is
 * about 2^-30 away). Minimax polynomials on |r| <= pi/4 (5e-12, 4e-13), one rounding to f32.
 * Infinities and NaN give NaN. */
static inline float vm_trig(float x, uint64_t odd, bool tan)
{
    const double xd = (double)x;
    const double k = xd * 0x1.45f306dc9c883p-1 + 0x1.8p52;
    const double j = k - 0x1.8p52;
    const uint64_t q = vm_bits64(k) + odd; /* the low two bits: the quadrant */
    const double r = (xd - j * 0x1.921fb544p0) - j * 0x1.0b4611a626331p-34;
    const double z = r * r;
    const double s = r + r * z *
                             (-0.16666666640796779 +
                              z * (0.0083333293048116458 +
                                   z * (-0.00019839312259504106 + z * 2.7181215323770248e-6)));
    const double c = 1.0 - 0.5 * z +
                     z * z *
                         (0.041666666647934558 +
                          z * (-0.0013888885547457507 +
                               z * (0.000024799911660932658 + z * -2.7237166642141451e-7)));
    const uint64_t swap = (uint64_t)0 - (q & 1); /* odd quadrant: cos for sin, sin for cos */
    const uint64_t sb = vm_bits64(s), cb = vm_bits64(c);
    const uint64_t num = (sb & ~swap) | (cb & swap);
    if (tan) /* even quadrant s/c, odd -c/s */
        return (float)(vm_double(num ^ (swap << 63)) / vm_double((cb & ~swap) | (sb & swap)));
    return (float)vm_double(num ^ ((q & 2) << 62));
}

/* `exact` is false in vectorised loops (|x| <= VM_TRIG_MAX is assumed: the caller found no far
 * element) and true in the scalar redo of a block that has one (libm for those). */
static inline float vm_sinf(float x, bool exact)
{
    if (exact && vm_trig_far(x))
        return sinf(x);
    return vm_sel(x == 0, x, vm_trig(x, 0, false)); /* keeps -0 */
}

static inline float vm_cosf(float x, bool exact)
{
    if (exact && vm_trig_far(x))
        return cosf(x);
    return vm_trig(x, 1, false);
}

static inline float vm_tanf(float x, bool exact)
{
    if (exact && vm_trig_far(x))
        return tanf(x);
    return vm_sel(x == 0, x, vm_trig(x, 0, true));
}

/* ---------------------------------------------------------------- names for sx_map.def */

/* VM_EXP(x) etc.: the function of vmath.h for a float x, libm (or the same formula) for a
 * double x. The ranged ones (VM_SIN, VM_COS, VM_TAN) also read two names of the caller's scope:
 * `vm_exact` (a const bool, see vm_sinf) and `vm_far` (an int they OR with "x is far"). A loop
 * that expands them runs over a block with vm_exact = false, first only to find vm_far (the
 * compiler drops the unused arithmetic, and the whole loop for rows without ranged functions),
 * then for the values; if vm_far was set, a scalar loop with vm_exact = true does the block
 * instead. In place works too: each element is read before it is written. */
static inline double vm_sigmoid_f64(double x)
{
    return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
}

static inline double vm_softplus_f64(double x)
{
    return (x > 0 ? x : 0) + log1p(exp(-fabs(x)));
}

static inline double vm_sin_f64(double x, bool exact)
{
    (void)exact;
    return sin(x);
}

static inline double vm_cos_f64(double x, bool exact)
{
    (void)exact;
    return cos(x);
}

static inline double vm_tan_f64(double x, bool exact)
{
    (void)exact;
    return tan(x);
}

static inline int vm_never_far(double x)
{
    (void)x;
    return 0;
}

/* c ? a : b for sx_map.def rows whose two sides are both cheap to compute (bit blend in f32) */
static inline double vm_if_f64(bool c, double a, double b)
{
    return c ? a : b;
}

#define VM_IF(c, a, b) _Generic((a), float : vm_sel, double : vm_if_f64)((c), (a), (b))
#define VM_FLOOR(x) _Generic((x), float : vm_floorf, double : floor)(x)
#define VM_CEIL(x) _Generic((x), float : vm_ceilf, double : ceil)(x)
#define VM_ROUND(x) _Generic((x), float : vm_roundf, double : vm_round_f64)(x)
#define VM_EXP(x) _Generic((x), float : vm_expf, double : exp)(x)
#define VM_EXPM1(x) _Generic((x), float : vm_expm1f, double : expm1)(x)
#define VM_LOG(x) _Generic((x), float : vm_logf, double : log)(x)
#define VM_LOG1P(x) _Generic((x), float : vm_log1pf, double : log1p)(x)
#define VM_TANH(x) _Generic((x), float : vm_tanhf, double : tanh)(x)
#define VM_SIGMOID(x) _Generic((x), float : vm_sigmoidf, double : vm_sigmoid_f64)(x)
#define VM_SOFTPLUS(x) _Generic((x), float : vm_softplusf, double : vm_softplus_f64)(x)
#define VM_ERF(x) _Generic((x), float : vm_erff, double : erf)(x)
#define VM_FAR(x) (vm_far |= _Generic((x), float : vm_trig_far, double : vm_never_far)(x))
#define VM_SIN(x) (VM_FAR(x), _Generic((x), float : vm_sinf, double : vm_sin_f64)((x), vm_exact))
#define VM_COS(x) (VM_FAR(x), _Generic((x), float : vm_cosf, double : vm_cos_f64)((x), vm_exact))
#define VM_TAN(x) (VM_FAR(x), _Generic((x), float : vm_tanf, double : vm_tan_f64)((x), vm_exact))

/* ---------------------------------------------------------------- instruction sets */

/* The kernels that use these functions are compiled once per instruction set on GCC for
 * x86-64 (VM_DISPATCH; `#pragma GCC target` around a second and third instance of a template)
 * and picked at run time by sx__isa() (tensor/core/isa.c), strix's one switch for every kernel
 * family: the widest the CPU and OS support, capped by the environment variable
 * SX_ISA=base|avx2|avx512 (read once; other values are ignored). The default build still runs
 * on any x86-64. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define VM_DISPATCH 1
#else
#define VM_DISPATCH 0
#endif

enum { VM_ISA_BASE = SX__ISA_BASE, VM_ISA_AVX2 = SX__ISA_AVX2, VM_ISA_AVX512 = SX__ISA_AVX512 };

/* The instruction set of this process's kernels: sx__isa(), or the baseline in a build without
 * the per-ISA instances. (Cached by sx__isa; vm_isa_detect is the same, kept for the tests.) */
static inline int vm_isa(void)
{
    return VM_DISPATCH ? sx__isa() : VM_ISA_BASE;
}

static inline int vm_isa_detect(void)
{
    return vm_isa();
}

/* The body of one sx_map.def row's case over src[0..len) into dst (dst == src allowed), for the
 * map kernel and the fused interpreter alike: `expr` reads `x` (and `a`, defined by the caller).
 * A row with a ranged function (sin, cos, tan) first scans the block for far elements (vm_far);
 * a block with one runs a scalar loop with vm_exact set, which sends those elements to libm.
 * Elsewhere the scan is dead code. Use it as a whole case: it ends with break. */
#define VM_MAP_CASE(T, expr, src, dst, len)                                                        \
    {                                                                                              \
        int vm_far = 0;                                                                            \
        {                                                                                          \
            const bool vm_exact = false;                                                           \
            (void)vm_exact;                                                                        \
            _Pragma("omp simd reduction(|:vm_far)") for (int64_t i = 0; i < (len); i++)            \
            {                                                                                      \
                const T x = (src)[i];                                                              \
                (void)(expr);                                                                      \
            }                                                                                      \
            if (!vm_far) {                                                                         \
                _Pragma("omp simd reduction(|:vm_far)") for (int64_t i = 0; i < (len); i++)        \
                {                                                                                  \
                    const T x = (src)[i];                                                          \
                    (dst)[i] = (T)(expr);                                                          \
                }                                                                                  \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
        const bool vm_exact = true;                                                                \
        (void)vm_exact;                                                                            \
        for (int64_t i = 0; i < (len); i++) {                                                      \
            const T x = (src)[i];                                                                  \
            (dst)[i] = (T)(expr);                                                                  \
        }                                                                                          \
        break;                                                                                     \
    }

#endif
