/* simd.h: the vector abstraction of the hand-vectorised kernel templates (direct and Winograd
 * convolution, depthwise convolution). A template is written once against the names below and
 * included once per instruction set and element type; this header maps the names to that set's
 * intrinsics. Never installed.
 *
 * The includer defines SIMD_ISA (SIMD_AVX512, SIMD_AVX2 or SIMD_NEON), SIMD_BITS (32: float,
 * 64: double) and T (the matching C type), includes this file, then the template, then
 * simd_end.h, which undefines every name below (and SIMD_ISA, SIMD_BITS). Without SIMD_ISA it
 * defines only SIMD_HAVE_X86 and SIMD_HAVE_NEON (what this compiler can target). A set the
 * compiler cannot target here (SIMD_NEON on x86-64, the x86 sets elsewhere) is an #error.
 *
 *   V, VL          the vector type and its lane count
 *   VMASK          a mask of the first n lanes (n in [0, VL]); V_MASK_N(n) (n clamped),
 *                  V_MASK_ALL (all VL lanes)
 *   VATTR          the function attribute that lets the compiler emit the set's instructions:
 *                  every function of the template that uses V carries it
 *   SIMD_REGS      vector registers the set has (16 on AVX2, 32 on AVX-512 and AArch64): register
 *                  tiles size their accumulators by it
 *   V_ZERO()  V_SET1(x)  V_LOAD(p)  V_STORE(p, v)      unaligned loads and stores
 *   V_MLOAD(m, p)  lanes outside m read as 0 and their memory is never touched
 *   V_MSTORE(p, m, v)  writes only the lanes of m
 *   V_STREAM(p, v)  a store past the caches (p aligned to VL * sizeof(T)); V_FENCE() orders the
 *                  streamed stores before the ones that follow (a no-op where there are none)
 *   V_ADD V_SUB V_MUL (a, b);  V_FMA(a, b, c) = a b + c,  V_FNMA(a, b, c) = c - a b,
 *   VSEL           a per-lane condition: V_GT(a, b) (a > b, false with a NaN), V_EQ(a, b),
 *                  V_NAN(a); V_SAND(s, t) both; V_BLEND(s, a, b) = s ? b : a per lane (exact)
 *   V_FNMS(a, b, c) = -(a b) - c, each rounded once;  V_HSUM(v) the sum of the lanes (a fixed
 *   order per set, so the same bits on every call)
 *   V_LOADA(p)  V_STOREA(p, v)  loads and stores of p aligned to VL * sizeof(T)
 *   V_PREFETCH(p)  the line at p into the caches (all levels)
 *   SIMD_HAS_PERM  1 where the lane permutes below exist (AVX-512, AVX2), 0 on NEON:
 *     VI, VIT      a vector of VL lane indices and its element type (int32_t for float, int64_t
 *                  for double); V_ILOAD(p) loads VL of them from p aligned to sizeof(VI)
 *     V_PERM(i, v)  lane l = v[i[l]] (i[l] < VL)
 *     V_PERM2(a, i, b)  lane l = i[l] < VL ? a[i[l]] : b[i[l] - VL] (i[l] < 2 VL)
 *     V_GATHER(m, i, p)  lane l = p[i[l]] for the lanes of m, 0 (memory not read) elsewhere
 *
 * The masks are the sets' own on AVX-512 (k registers). AVX2's masked moves (vmaskmov) are slow
 * stores on AMD's cores, so its VMASK also carries the lane count and a full mask takes the plain
 * move; NEON has no masked moves: its VMASK is the lane count and a partial vector goes through a
 * small buffer (only at the tail of a row). */
#ifndef SX_SIMD_H
#define SX_SIMD_H

#include <stdint.h>
#include <string.h>

#define SIMD_AVX2 1
#define SIMD_AVX512 2
#define SIMD_NEON 3

#if defined(__GNUC__) && defined(__x86_64__)
#define SIMD_HAVE_X86 1
#include <immintrin.h>
#else
#define SIMD_HAVE_X86 0
#endif
#if defined(__GNUC__) && defined(__aarch64__)
#define SIMD_HAVE_NEON 1
#include <arm_neon.h>
#else
#define SIMD_HAVE_NEON 0
#endif

static inline int64_t simd_clamp(int64_t n, int64_t vl)
{
    return n <= 0 ? 0 : n >= vl ? vl : n;
}

#if SIMD_HAVE_X86
#define SIMD_AVX2_ATTR __attribute__((target("avx2,fma")))
#define SIMD_AVX512_ATTR __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))

typedef struct simd_m8 {
    __m256i bits;
    int lanes;
} simd_m8; /* the first n of 8 float lanes */

typedef struct simd_m4 {
    __m256i bits;
    int lanes;
} simd_m4; /* the first n of 4 double lanes */

static inline SIMD_AVX2_ATTR simd_m8 simd_m8_n(int64_t n)
{
    const int k = (int)simd_clamp(n, 8);
    const simd_m8 r = {
        _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), k};
    return r;
}

static inline SIMD_AVX2_ATTR simd_m4 simd_m4_n(int64_t n)
{
    const int k = (int)simd_clamp(n, 4);
    const simd_m4 r = {_mm256_cmpgt_epi64(_mm256_set1_epi64x(k), _mm256_setr_epi64x(0, 1, 2, 3)),
                       k};
    return r;
}

/* Pairwise: (l0 + l4) + (l2 + l6) + ... as the halves, then their halves. */
static inline SIMD_AVX2_ATTR float simd_hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline SIMD_AVX2_ATTR double simd_hsum4(__m256d v)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
}

/* AVX2's two-vector permute: lane l = i[l] < 8 ? a[i[l]] : b[i[l] - 8]. */
static inline SIMD_AVX2_ATTR __m256 simd_perm2x8(__m256 a, __m256i i, __m256 b)
{
    const __m256 hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(7)));
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(a, i), _mm256_permutevar8x32_ps(b, i), hi);
}

/* 4 double lane indices (64-bit) as the 8 float lanes' (2 i, 2 i + 1) that move the same bytes
 * (AVX2 permutes doubles across its halves only through the float permute). */
static inline SIMD_AVX2_ATTR __m256i simd_pidx4(__m256i i)
{
    const __m256i d = _mm256_shuffle_epi32(i, 0xa0);
    return _mm256_add_epi32(_mm256_add_epi32(d, d), _mm256_setr_epi32(0, 1, 0, 1, 0, 1, 0, 1));
}

static inline SIMD_AVX512_ATTR __mmask16 simd_k16(int64_t n)
{
    const int64_t k = simd_clamp(n, 16);
    return (__mmask16)(k == 16 ? 0xffffu : (1u << k) - 1u);
}

static inline SIMD_AVX512_ATTR __mmask8 simd_k8(int64_t n)
{
    const int64_t k = simd_clamp(n, 8);
    return (__mmask8)(k == 8 ? 0xffu : (1u << k) - 1u);
}
#endif /* SIMD_HAVE_X86 */

#if SIMD_HAVE_NEON
static inline float32x4_t simd_nload4(int64_t n, const float *p)
{
    if (n >= 4)
        return vld1q_f32(p);
    float b[4] = {0};
    if (n > 0)
        memcpy(b, p, (size_t)n * sizeof *b);
    return vld1q_f32(b);
}

static inline void simd_nstore4(float *p, int64_t n, float32x4_t v)
{
    if (n >= 4) {
        vst1q_f32(p, v);
        return;
    }
    float b[4];
    vst1q_f32(b, v);
    if (n > 0)
        memcpy(p, b, (size_t)n * sizeof *b);
}

static inline float64x2_t simd_nload2(int64_t n, const double *p)
{
    if (n >= 2)
        return vld1q_f64(p);
    double b[2] = {0};
    if (n > 0)
        b[0] = p[0];
    return vld1q_f64(b);
}

static inline void simd_nstore2(double *p, int64_t n, float64x2_t v)
{
    if (n >= 2)
        vst1q_f64(p, v);
    else if (n > 0)
        p[0] = vgetq_lane_f64(v, 0);
}

/* (l0 + l2) + (l1 + l3), as AVX's halves. */
static inline float simd_nhsum4(float32x4_t v)
{
    const float32x2_t s = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(s, 0) + vget_lane_f32(s, 1);
}
#endif /* SIMD_HAVE_NEON */

#endif /* SX_SIMD_H */

/* ---------------------------------------------------------------- the includer's set */
/* Included without SIMD_ISA, the file gives only the capability tests and helpers above. */
#ifdef SIMD_ISA
#ifndef SIMD_BITS
#error "simd.h: define SIMD_BITS (32 or 64) with SIMD_ISA"
#endif

#if SIMD_ISA == SIMD_AVX512
#if !SIMD_HAVE_X86
#error "simd.h: AVX-512 needs GNU C on x86-64"
#endif
#define VATTR SIMD_AVX512_ATTR
#define SIMD_REGS 32
#define V_FENCE() _mm_sfence()
#define V_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define SIMD_HAS_PERM 1
#define VI __m512i
#define V_ILOAD(p) _mm512_load_si512((const void *)(p))
#if SIMD_BITS == 32
#define V __m512
#define VL 16
#define VMASK __mmask16
#define V_MASK_N(n) simd_k16(n)
#define V_MASK_ALL ((__mmask16)0xffff)
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_storeu_ps(p, v)
#define V_MLOAD(m, p) _mm512_maskz_loadu_ps(m, p)
#define V_MSTORE(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define V_STREAM(p, v) _mm512_stream_ps(p, v)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm512_fnmadd_ps(a, b, c)
#define V_FNMS(a, b, c) _mm512_fnmsub_ps(a, b, c)
#define V_HSUM(v) _mm512_reduce_add_ps(v)
#define VSEL __mmask16
#define V_GT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define V_EQ(a, b) _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ)
#define V_NAN(a) _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q)
#define V_SAND(s, t) ((__mmask16)((s) & (t)))
#define V_BLEND(s, a, b) _mm512_mask_blend_ps(s, a, b)
#define V_LOADA(p) _mm512_load_ps(p)
#define V_STOREA(p, v) _mm512_store_ps(p, v)
#define VIT int32_t
#define V_PERM(i, v) _mm512_permutexvar_ps(i, v)
#define V_PERM2(a, i, b) _mm512_permutex2var_ps(a, i, b)
#define V_GATHER(m, i, p) _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, i, p, 4)
#else
#define V __m512d
#define VL 8
#define VMASK __mmask8
#define V_MASK_N(n) simd_k8(n)
#define V_MASK_ALL ((__mmask8)0xff)
#define V_ZERO() _mm512_setzero_pd()
#define V_SET1(x) _mm512_set1_pd(x)
#define V_LOAD(p) _mm512_loadu_pd(p)
#define V_STORE(p, v) _mm512_storeu_pd(p, v)
#define V_MLOAD(m, p) _mm512_maskz_loadu_pd(m, p)
#define V_MSTORE(p, m, v) _mm512_mask_storeu_pd(p, m, v)
#define V_STREAM(p, v) _mm512_stream_pd(p, v)
#define V_ADD(a, b) _mm512_add_pd(a, b)
#define V_SUB(a, b) _mm512_sub_pd(a, b)
#define V_MUL(a, b) _mm512_mul_pd(a, b)
#define V_FMA(a, b, c) _mm512_fmadd_pd(a, b, c)
#define V_FNMA(a, b, c) _mm512_fnmadd_pd(a, b, c)
#define V_FNMS(a, b, c) _mm512_fnmsub_pd(a, b, c)
#define V_HSUM(v) _mm512_reduce_add_pd(v)
#define VSEL __mmask8
#define V_GT(a, b) _mm512_cmp_pd_mask(a, b, _CMP_GT_OQ)
#define V_EQ(a, b) _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ)
#define V_NAN(a) _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q)
#define V_SAND(s, t) ((__mmask8)((s) & (t)))
#define V_BLEND(s, a, b) _mm512_mask_blend_pd(s, a, b)
#define V_LOADA(p) _mm512_load_pd(p)
#define V_STOREA(p, v) _mm512_store_pd(p, v)
#define VIT int64_t
#define V_PERM(i, v) _mm512_permutexvar_pd(i, v)
#define V_PERM2(a, i, b) _mm512_permutex2var_pd(a, i, b)
#define V_GATHER(m, i, p) _mm512_mask_i64gather_pd(_mm512_setzero_pd(), m, i, p, 8)
#endif

#elif SIMD_ISA == SIMD_AVX2
#if !SIMD_HAVE_X86
#error "simd.h: AVX2 needs GNU C on x86-64"
#endif
#define VATTR SIMD_AVX2_ATTR
#define SIMD_REGS 16
#define V_FENCE() _mm_sfence()
#define V_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define SIMD_HAS_PERM 1
#define VI __m256i
#define V_ILOAD(p) _mm256_load_si256((const __m256i *)(const void *)(p))
#if SIMD_BITS == 32
#define V __m256
#define VL 8
#define VMASK simd_m8
#define V_MASK_N(n) simd_m8_n(n)
#define V_MASK_ALL simd_m8_n(8)
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_storeu_ps(p, v)
#define V_MLOAD(m, p) ((m).lanes == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, (m).bits))
#define V_MSTORE(p, m, v)                                                                          \
    ((m).lanes == 8 ? _mm256_storeu_ps(p, v) : _mm256_maskstore_ps(p, (m).bits, v))
#define V_STREAM(p, v) _mm256_stream_ps(p, v)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define V_FNMS(a, b, c) _mm256_fnmsub_ps(a, b, c)
#define V_HSUM(v) simd_hsum8(v)
#define VSEL __m256
#define V_GT(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define V_EQ(a, b) _mm256_cmp_ps(a, b, _CMP_EQ_OQ)
#define V_NAN(a) _mm256_cmp_ps(a, a, _CMP_UNORD_Q)
#define V_SAND(s, t) _mm256_and_ps(s, t)
#define V_BLEND(s, a, b) _mm256_blendv_ps(a, b, s)
#define V_LOADA(p) _mm256_load_ps(p)
#define V_STOREA(p, v) _mm256_store_ps(p, v)
#define VIT int32_t
#define V_PERM(i, v) _mm256_permutevar8x32_ps(v, i)
#define V_PERM2(a, i, b) simd_perm2x8(a, i, b)
#define V_GATHER(k, i, p)                                                                          \
    _mm256_mask_i32gather_ps(_mm256_setzero_ps(), p, i, _mm256_castsi256_ps((k).bits), 4)
#else
#define V __m256d
#define VL 4
#define VMASK simd_m4
#define V_MASK_N(n) simd_m4_n(n)
#define V_MASK_ALL simd_m4_n(4)
#define V_ZERO() _mm256_setzero_pd()
#define V_SET1(x) _mm256_set1_pd(x)
#define V_LOAD(p) _mm256_loadu_pd(p)
#define V_STORE(p, v) _mm256_storeu_pd(p, v)
#define V_MLOAD(m, p) ((m).lanes == 4 ? _mm256_loadu_pd(p) : _mm256_maskload_pd(p, (m).bits))
#define V_MSTORE(p, m, v)                                                                          \
    ((m).lanes == 4 ? _mm256_storeu_pd(p, v) : _mm256_maskstore_pd(p, (m).bits, v))
#define V_STREAM(p, v) _mm256_stream_pd(p, v)
#define V_ADD(a, b) _mm256_add_pd(a, b)
#define V_SUB(a, b) _mm256_sub_pd(a, b)
#define V_MUL(a, b) _mm256_mul_pd(a, b)
#define V_FMA(a, b, c) _mm256_fmadd_pd(a, b, c)
#define V_FNMA(a, b, c) _mm256_fnmadd_pd(a, b, c)
#define V_FNMS(a, b, c) _mm256_fnmsub_pd(a, b, c)
#define V_HSUM(v) simd_hsum4(v)
#define VSEL __m256d
#define V_GT(a, b) _mm256_cmp_pd(a, b, _CMP_GT_OQ)
#define V_EQ(a, b) _mm256_cmp_pd(a, b, _CMP_EQ_OQ)
#define V_NAN(a) _mm256_cmp_pd(a, a, _CMP_UNORD_Q)
#define V_SAND(s, t) _mm256_and_pd(s, t)
#define V_BLEND(s, a, b) _mm256_blendv_pd(a, b, s)
#define V_LOADA(p) _mm256_load_pd(p)
#define V_STOREA(p, v) _mm256_store_pd(p, v)
#define VIT int64_t
#define V_PERM(i, v) _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(v), simd_pidx4(i)))
#define V_PERM2(a, i, b)                                                                           \
    _mm256_castps_pd(simd_perm2x8(_mm256_castpd_ps(a), simd_pidx4(i), _mm256_castpd_ps(b)))
#define V_GATHER(k, i, p)                                                                          \
    _mm256_mask_i64gather_pd(_mm256_setzero_pd(), p, i, _mm256_castsi256_pd((k).bits), 8)
#endif

#elif SIMD_ISA == SIMD_NEON
#if !SIMD_HAVE_NEON
#error "simd.h: NEON needs GNU C on AArch64"
#endif
#define VATTR
#define SIMD_REGS 32
#define V_FENCE() ((void)0)
#define V_PREFETCH(p) __builtin_prefetch(p)
#define SIMD_HAS_PERM 0
#define VMASK int64_t
#define V_MASK_N(n) simd_clamp(n, VL)
#define V_MASK_ALL ((int64_t)VL)
#if SIMD_BITS == 32
#define V float32x4_t
#define VL 4
#define V_ZERO() vdupq_n_f32(0.0f)
#define V_SET1(x) vdupq_n_f32(x)
#define V_LOAD(p) vld1q_f32(p)
#define V_STORE(p, v) vst1q_f32(p, v)
#define V_MLOAD(m, p) simd_nload4(m, p)
#define V_MSTORE(p, m, v) simd_nstore4(p, m, v)
#define V_STREAM(p, v) vst1q_f32(p, v)
#define V_ADD(a, b) vaddq_f32(a, b)
#define V_SUB(a, b) vsubq_f32(a, b)
#define V_MUL(a, b) vmulq_f32(a, b)
#define V_FMA(a, b, c) vfmaq_f32(c, a, b)
#define V_FNMA(a, b, c) vfmsq_f32(c, a, b)
#define V_FNMS(a, b, c) vnegq_f32(vfmaq_f32(c, a, b))
#define V_HSUM(v) simd_nhsum4(v)
#define VSEL uint32x4_t
#define V_GT(a, b) vcgtq_f32(a, b)
#define V_EQ(a, b) vceqq_f32(a, b)
#define V_NAN(a) vmvnq_u32(vceqq_f32(a, a))
#define V_SAND(s, t) vandq_u32(s, t)
#define V_BLEND(s, a, b) vbslq_f32(s, b, a)
#define V_LOADA(p) vld1q_f32(p)
#define V_STOREA(p, v) vst1q_f32(p, v)
#else
#define V float64x2_t
#define VL 2
#define V_ZERO() vdupq_n_f64(0.0)
#define V_SET1(x) vdupq_n_f64(x)
#define V_LOAD(p) vld1q_f64(p)
#define V_STORE(p, v) vst1q_f64(p, v)
#define V_MLOAD(m, p) simd_nload2(m, p)
#define V_MSTORE(p, m, v) simd_nstore2(p, m, v)
#define V_STREAM(p, v) vst1q_f64(p, v)
#define V_ADD(a, b) vaddq_f64(a, b)
#define V_SUB(a, b) vsubq_f64(a, b)
#define V_MUL(a, b) vmulq_f64(a, b)
#define V_FMA(a, b, c) vfmaq_f64(c, a, b)
#define V_FNMA(a, b, c) vfmsq_f64(c, a, b)
#define V_FNMS(a, b, c) vnegq_f64(vfmaq_f64(c, a, b))
#define V_HSUM(v) vaddvq_f64(v)
#define VSEL uint64x2_t
#define V_GT(a, b) vcgtq_f64(a, b)
#define V_EQ(a, b) vceqq_f64(a, b)
#define V_NAN(a) veorq_u64(vceqq_f64(a, a), vdupq_n_u64(~(uint64_t)0))
#define V_SAND(s, t) vandq_u64(s, t)
#define V_BLEND(s, a, b) vbslq_f64(s, b, a)
#define V_LOADA(p) vld1q_f64(p)
#define V_STOREA(p, v) vst1q_f64(p, v)
#endif

#else
#error "simd.h: SIMD_ISA is not SIMD_AVX512, SIMD_AVX2 or SIMD_NEON"
#endif
#endif /* SIMD_ISA */
