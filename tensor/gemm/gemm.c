/* gemm.c: strix's own GEMM, the one every matrix product (matmul, conv2d) goes through.
 * GotoBLAS/BLIS structure: op(b) is packed in KC x NC blocks that stay in L2, op(a) in MC x KC
 * blocks of MR-row micro-panels; one micro-panel stays in L1 while an MR x NR register-blocked
 * micro-kernel streams the B panels past it. The kernels are written once below and instantiated
 * per kernel set (AVX-512, AVX2+FMA, portable C) and dtype by including this file into itself;
 * the set is picked at first use from what the CPU has (the build needs no -march flag).
 *
 * Determinism: every element of c is summed in the same order whatever the thread count. K is
 * cut into blocks that depend on k only (sx__gemm_kblocks); within a block an element is one
 * chain of multiply-adds in k order starting from zero (one vector lane, the same arithmetic in
 * full and edge tiles), and the blocks are added into c in k order. With beta = 0, alpha scales
 * the finished sum (rounded once more), so alpha * A @ B has the bits of A @ B followed by a
 * multiplication by alpha, as separate graph nodes would compute it. Threads split c into
 * rectangles of whole micro-tiles (over M and/or N, never K), so the thread count changes who
 * computes an element, not how. Bits differ between kernel sets (the portable one does not fuse
 * multiply and add) but not between runs or thread counts.
 *
 * Knobs, read at first use: the kernel set is strix's instruction set (sx__isa: the CPU's,
 * capped by SX_ISA for every kernel family); STRIX_GEMM_ISA=avx512|avx2|generic caps it further
 * for the GEMM alone (never above sx__isa); STRIX_GEMM=blas sends every call to OpenBLAS's
 * cblas_?gemm instead, for comparisons only (its results depend on the thread count). Built with
 * -DSTRIX_GEMM_PORTABLE (or on another CPU family) only the portable C kernels exist. Tests use the
 * hooks sx__gemm_isa and sx__gemm_blocks below. Packing buffers are static thread-local storage
 * (640 KB per thread; note that glibc zero-fills static TLS when it creates a thread), so the GEMM
 * never allocates and cannot fail. */
#ifndef GEMM_TEMPLATE

#include "tensor_impl.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) &&                            \
    !defined(STRIX_GEMM_PORTABLE)
#define GEMM_X86 1
#include <immintrin.h>
#else
#define GEMM_X86 0
#endif
#if defined(__aarch64__) && !defined(STRIX_GEMM_PORTABLE)
#define GEMM_ARM 1
#include "simd.h" /* arm_neon.h and the partial moves */
#else
#define GEMM_ARM 0
#endif

/* Test hooks (prototypes here; the tests declare them extern).
 * sx__gemm_isa: select kernel set 0 (portable C), 1 (AVX2+FMA), 2 (AVX-512) or 3 (NEON: the
 * numbers of sx__isa()); want < 0 only queries. A set above sx__isa() (this CPU, capped by SX_ISA)
 * or missing from the build is not selected (STRIX_GEMM_ISA does not limit the hook). Returns the
 * set in use after the call. Call it between GEMMs, not during one.
 * sx__gemm_blocks: the blocking of a kernel set for a dtype: blocks = {MR, NR, KC, MC, NC};
 * returns false for a set this build does not have. */
int sx__gemm_isa(int want);
bool sx__gemm_blocks(int isa, sx_dtype dt, int blocks[5]);

enum { GEMM_GENERIC = 0, GEMM_AVX2 = 1, GEMM_AVX512 = 2, GEMM_NEON = 3, GEMM_ISA_COUNT = 4 };

/* One GEMM, or one thread's rectangle of it: op(a) (m, k), op(b) (k, n), c (m, n). */
typedef struct gemm_job {
    bool ta, tb;
    bool big_c; /* the whole c is over GEMM_STREAM_MIN bytes */
    int64_t m, n, k;
    double alpha, beta;
    const void *a, *b;
    void *c;
    int64_t lda, ldb, ldc;
} gemm_job;

/* A kernel set for one dtype: the blocked product of one rectangle, and its blocking. */
typedef struct gemm_impl {
    void (*run)(const gemm_job *);
    int mr, nr, kc, mc, nc;
} gemm_impl;

/* The packing workspace of a thread: op(b) blocks (KC x NC, or several K blocks of a narrow
 * problem) and op(a) blocks (MC x KC). Shared by both dtypes and every kernel set. */
#define GEMM_WS_B (512 * 1024)
#define GEMM_WS_A (128 * 1024)
/* The K block of every kernel set and dtype (GT_KC): the blocks a product is summed in depend on
 * k alone (sx__gemm_kblocks). */
#define GEMM_KC 256
/* c larger than this (bytes), written once, gets streaming stores */
#define GEMM_STREAM_MIN (8 << 20)
static _Thread_local _Alignas(64) unsigned char ws_b[GEMM_WS_B];
static _Thread_local _Alignas(64) unsigned char ws_a[GEMM_WS_A];

static inline int64_t min64(int64_t x, int64_t y)
{
    return x < y ? x : y;
}

static inline int64_t ceil_div(int64_t x, int64_t y)
{
    return (x + y - 1) / y;
}

/* K blocking, which fixes the order of the sums, so it depends on k and the kernel set's kc
 * only: nkb blocks of nearly equal length, inner boundaries rounded down to multiples of 16
 * (whole vectors for the transposing packs), none longer than kc_max. */
static inline int64_t kblock_count(int64_t k, int64_t kc_max)
{
    int64_t nkb = ceil_div(k, kc_max);
    if (nkb > 1 && ceil_div(k, nkb) + 15 > kc_max)
        nkb = ceil_div(k, kc_max - 16);
    return nkb;
}

static inline int64_t kblock_start(int64_t k, int64_t nkb, int64_t q)
{
    return q == nkb ? k : q * k / nkb / 16 * 16;
}

/* Lines to prefetch while the kernels run: the next block of a to be packed, as rows of `bytes`
 * bytes `stride` apart. The driver fetches `per_tile` lines after each micro-tile, so that reading
 * a from memory overlaps the arithmetic, spread over the block and out of the kernels' loops. */
typedef struct pf_walk {
    const char *row;   /* the current row */
    int64_t off;       /* offset of the next line in it */
    int64_t bytes;     /* bytes per row */
    int64_t stride;    /* bytes between rows */
    int64_t rows_left; /* rows not finished, the current one included */
    int64_t per_tile;  /* lines to fetch per micro-tile */
} pf_walk;

static inline void pf_step(pf_walk *pf)
{
    for (int64_t i = 0; i < pf->per_tile && pf->rows_left > 0; i++) {
        __builtin_prefetch(pf->row + pf->off, 0, 2);
        pf->off += 64;
        if (pf->off >= pf->bytes + 63) { /* past the row's last byte: next row */
            pf->off = 0;
            pf->row += pf->stride;
            pf->rows_left--;
        }
    }
}

#if GEMM_X86
/* Transposes of one vector-square block, for packing op(b) when b is stored transposed: rows
 * src[i * ld ...] (i < VL, VL elements each) become rows dst[j * ds ...]. The usual unpack /
 * lane-shuffle ladders. */
__attribute__((target("avx512f"))) static void tr_avx512_f32(const float *src, int64_t ld,
                                                             float *dst, int64_t ds)
{
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_ps(src + i * ld);
    for (int i = 0; i < 8; i++) { /* per 128-bit lane: a0 b0 a1 b1 / a2 b2 a3 b3 */
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) { /* r[4g+q], lane L: element 4L+q of rows 4g..4g+3 */
        __m512d x0 = _mm512_castps_pd(t[4 * g]), x1 = _mm512_castps_pd(t[4 * g + 1]);
        __m512d x2 = _mm512_castps_pd(t[4 * g + 2]), x3 = _mm512_castps_pd(t[4 * g + 3]);
        r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(x0, x2));
        r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x0, x2));
        r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(x1, x3));
        r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(x1, x3));
    }
    for (int q = 0; q < 4; q++) {
        t[q] = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x88);
        t[4 + q] = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xdd);
        t[8 + q] = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x88);
        t[12 + q] = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xdd);
    }
    for (int q = 0; q < 4; q++) {
        _mm512_store_ps(dst + q * ds, _mm512_shuffle_f32x4(t[q], t[8 + q], 0x88));
        _mm512_store_ps(dst + (8 + q) * ds, _mm512_shuffle_f32x4(t[q], t[8 + q], 0xdd));
        _mm512_store_ps(dst + (4 + q) * ds, _mm512_shuffle_f32x4(t[4 + q], t[12 + q], 0x88));
        _mm512_store_ps(dst + (12 + q) * ds, _mm512_shuffle_f32x4(t[4 + q], t[12 + q], 0xdd));
    }
}

__attribute__((target("avx512f"))) static void tr_avx512_f64(const double *src, int64_t ld,
                                                             double *dst, int64_t ds)
{
    __m512d r[8], t[8], s[4];
    for (int i = 0; i < 8; i++)
        r[i] = _mm512_loadu_pd(src + i * ld);
    for (int i = 0; i < 4; i++) { /* lane L: element 2L (lo) or 2L+1 (hi) of rows 2i, 2i+1 */
        t[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
    }
    for (int q = 0; q < 2; q++) {
        s[0] = _mm512_shuffle_f64x2(t[q], t[2 + q], 0x88);
        s[1] = _mm512_shuffle_f64x2(t[q], t[2 + q], 0xdd);
        s[2] = _mm512_shuffle_f64x2(t[4 + q], t[6 + q], 0x88);
        s[3] = _mm512_shuffle_f64x2(t[4 + q], t[6 + q], 0xdd);
        _mm512_store_pd(dst + q * ds, _mm512_shuffle_f64x2(s[0], s[2], 0x88));
        _mm512_store_pd(dst + (4 + q) * ds, _mm512_shuffle_f64x2(s[0], s[2], 0xdd));
        _mm512_store_pd(dst + (2 + q) * ds, _mm512_shuffle_f64x2(s[1], s[3], 0x88));
        _mm512_store_pd(dst + (6 + q) * ds, _mm512_shuffle_f64x2(s[1], s[3], 0xdd));
    }
}

__attribute__((target("avx2"))) static void tr_avx2_f32(const float *src, int64_t ld, float *dst,
                                                        int64_t ds)
{
    __m256 r[8], t[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(src + i * ld);
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; g++) { /* r[4g+q], lane L: element 4L+q of rows 4g..4g+3 */
        __m256d x0 = _mm256_castps_pd(t[4 * g]), x1 = _mm256_castps_pd(t[4 * g + 1]);
        __m256d x2 = _mm256_castps_pd(t[4 * g + 2]), x3 = _mm256_castps_pd(t[4 * g + 3]);
        r[4 * g] = _mm256_castpd_ps(_mm256_unpacklo_pd(x0, x2));
        r[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(x0, x2));
        r[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(x1, x3));
        r[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(x1, x3));
    }
    for (int q = 0; q < 4; q++) {
        _mm256_store_ps(dst + q * ds, _mm256_permute2f128_ps(r[q], r[4 + q], 0x20));
        _mm256_store_ps(dst + (4 + q) * ds, _mm256_permute2f128_ps(r[q], r[4 + q], 0x31));
    }
}

__attribute__((target("avx2"))) static void tr_avx2_f64(const double *src, int64_t ld, double *dst,
                                                        int64_t ds)
{
    __m256d r[4], t[4];
    for (int i = 0; i < 4; i++)
        r[i] = _mm256_loadu_pd(src + i * ld);
    t[0] = _mm256_unpacklo_pd(r[0], r[1]);
    t[1] = _mm256_unpackhi_pd(r[0], r[1]);
    t[2] = _mm256_unpacklo_pd(r[2], r[3]);
    t[3] = _mm256_unpackhi_pd(r[2], r[3]);
    _mm256_store_pd(dst, _mm256_permute2f128_pd(t[0], t[2], 0x20));
    _mm256_store_pd(dst + ds, _mm256_permute2f128_pd(t[1], t[3], 0x20));
    _mm256_store_pd(dst + 2 * ds, _mm256_permute2f128_pd(t[0], t[2], 0x31));
    _mm256_store_pd(dst + 3 * ds, _mm256_permute2f128_pd(t[1], t[3], 0x31));
}
#endif

/* ---------------------------------------------------------------- kernel sets */

#define GEMM_CAT2(x, y) x##_##y
#define GEMM_CAT(x, y) GEMM_CAT2(x, y)
#define GEMM_TEMPLATE

/* Each instance defines: GT_SUF (name suffix), GT_T (element), GT_V (vector of GT_VL elements)
 * and its operations (GT_LOADN / GT_STOREN: the first n < GT_VL lanes, the others read as 0 and
 * not written; GT_STREAM: a store that bypasses the caches, GT_FENCE orders those), GT_NV vectors
 * per tile row (NR = GT_NV * GT_VL), GT_MR rows per tile, the cache blocks GT_KC / GT_MC / GT_NC,
 * GT_TARGET (the function attribute), GT_TRANSPOSE (a GT_VL square block), and GT_MASKED when
 * edge tiles can use masked loads and stores. */

/* Portable C: scalar "vectors", 4 x 8 tiles the compiler vectorises as it can. */
#define GT_SUF generic_f32
#define GT_T float
#define GT_V float
#define GT_VL 1
#define GT_NV 8
#define GT_MR 4
#define GT_KC 256
#define GT_MC 128
#define GT_NC 512
#define GT_TARGET
#define GT_ZERO() 0.0f
#define GT_LOAD(p) (*(p))
#define GT_LOADU(p) (*(p))
#define GT_LOADN(p, n) (*(p))
#define GT_STOREU(p, v) (*(p) = (v))
#define GT_STOREN(p, v, n) (*(p) = (v))
#define GT_SET1(x) (x)
#define GT_MUL(x, y) ((x) * (y))
#define GT_FMA(x, y, z) ((x) * (y) + (z))
#define GT_STREAM(p, v) (*(p) = (v))
#define GT_FENCE() ((void)0)
#define GT_TRANSPOSE(src, ld, dst, ds) (*(dst) = *(src))
#include "gemm.c"

#define GT_SUF generic_f64
#define GT_T double
#define GT_V double
#define GT_VL 1
#define GT_NV 8
#define GT_MR 4
#define GT_KC 256
#define GT_MC 64
#define GT_NC 256
#define GT_TARGET
#define GT_ZERO() 0.0
#define GT_LOAD(p) (*(p))
#define GT_LOADU(p) (*(p))
#define GT_LOADN(p, n) (*(p))
#define GT_STOREU(p, v) (*(p) = (v))
#define GT_STOREN(p, v, n) (*(p) = (v))
#define GT_SET1(x) (x)
#define GT_MUL(x, y) ((x) * (y))
#define GT_FMA(x, y, z) ((x) * (y) + (z))
#define GT_STREAM(p, v) (*(p) = (v))
#define GT_FENCE() ((void)0)
#define GT_TRANSPOSE(src, ld, dst, ds) (*(dst) = *(src))
#include "gemm.c"

#if GEMM_X86
#define GEMM_M8(n)                                                                                 \
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define GEMM_M4(n) _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3))

/* AVX2 + FMA: 16 ymm registers, 6 x 2-vector tiles (12 accumulators), edge columns masked. */
#define GT_SUF avx2_f32
#define GT_T float
#define GT_V __m256
#define GT_VL 8
#define GT_NV 2
#define GT_MR 6
#define GT_KC 256
#define GT_MC 120
#define GT_NC 512
#define GT_TARGET __attribute__((target("avx2,fma")))
#define GT_ZERO() _mm256_setzero_ps()
#define GT_LOAD(p) _mm256_load_ps(p)
#define GT_LOADU(p) _mm256_loadu_ps(p)
#define GT_LOADN(p, n) _mm256_maskload_ps(p, GEMM_M8(n))
#define GT_STOREU(p, v) _mm256_storeu_ps(p, v)
#define GT_STOREN(p, v, n) _mm256_maskstore_ps(p, GEMM_M8(n), v)
#define GT_SET1(x) _mm256_set1_ps(x)
#define GT_MUL(x, y) _mm256_mul_ps(x, y)
#define GT_FMA(x, y, z) _mm256_fmadd_ps(x, y, z)
#define GT_STREAM(p, v) _mm256_stream_ps(p, v)
#define GT_FENCE() _mm_sfence()
#define GT_TRANSPOSE(src, ld, dst, ds) tr_avx2_f32(src, ld, dst, ds)
#define GT_MASKED
#include "gemm.c"

#define GT_SUF avx2_f64
#define GT_T double
#define GT_V __m256d
#define GT_VL 4
#define GT_NV 2
#define GT_MR 6
#define GT_KC 256
#define GT_MC 60
#define GT_NC 256
#define GT_TARGET __attribute__((target("avx2,fma")))
#define GT_ZERO() _mm256_setzero_pd()
#define GT_LOAD(p) _mm256_load_pd(p)
#define GT_LOADU(p) _mm256_loadu_pd(p)
#define GT_LOADN(p, n) _mm256_maskload_pd(p, GEMM_M4(n))
#define GT_STOREU(p, v) _mm256_storeu_pd(p, v)
#define GT_STOREN(p, v, n) _mm256_maskstore_pd(p, GEMM_M4(n), v)
#define GT_SET1(x) _mm256_set1_pd(x)
#define GT_MUL(x, y) _mm256_mul_pd(x, y)
#define GT_FMA(x, y, z) _mm256_fmadd_pd(x, y, z)
#define GT_STREAM(p, v) _mm256_stream_pd(p, v)
#define GT_FENCE() _mm_sfence()
#define GT_TRANSPOSE(src, ld, dst, ds) tr_avx2_f64(src, ld, dst, ds)
#define GT_MASKED
#include "gemm.c"

/* AVX-512: 32 zmm registers, 14 x 2-vector tiles (28 accumulators, 2 for b; the broadcasts of a
 * are folded into the FMAs), edge columns masked. */
#define GT_SUF avx512_f32
#define GT_T float
#define GT_V __m512
#define GT_VL 16
#define GT_NV 2
#define GT_MR 14
#define GT_KC 256
#define GT_MC 112
#define GT_NC 512
#define GT_TARGET __attribute__((target("avx512f,avx2,fma")))
#define GT_ZERO() _mm512_setzero_ps()
#define GT_LOAD(p) _mm512_load_ps(p)
#define GT_LOADU(p) _mm512_loadu_ps(p)
#define GT_LOADN(p, n) _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1), p)
#define GT_STOREU(p, v) _mm512_storeu_ps(p, v)
#define GT_STOREN(p, v, n) _mm512_mask_storeu_ps(p, (__mmask16)((1u << (n)) - 1), v)
#define GT_SET1(x) _mm512_set1_ps(x)
#define GT_MUL(x, y) _mm512_mul_ps(x, y)
#define GT_FMA(x, y, z) _mm512_fmadd_ps(x, y, z)
#define GT_STREAM(p, v) _mm512_stream_ps(p, v)
#define GT_FENCE() _mm_sfence()
#define GT_TRANSPOSE(src, ld, dst, ds) tr_avx512_f32(src, ld, dst, ds)
#define GT_MASKED
#include "gemm.c"

#define GT_SUF avx512_f64
#define GT_T double
#define GT_V __m512d
#define GT_VL 8
#define GT_NV 2
#define GT_MR 14
#define GT_KC 256
#define GT_MC 56
#define GT_NC 256
#define GT_TARGET __attribute__((target("avx512f,avx2,fma")))
#define GT_ZERO() _mm512_setzero_pd()
#define GT_LOAD(p) _mm512_load_pd(p)
#define GT_LOADU(p) _mm512_loadu_pd(p)
#define GT_LOADN(p, n) _mm512_maskz_loadu_pd((__mmask8)((1u << (n)) - 1), p)
#define GT_STOREU(p, v) _mm512_storeu_pd(p, v)
#define GT_STOREN(p, v, n) _mm512_mask_storeu_pd(p, (__mmask8)((1u << (n)) - 1), v)
#define GT_SET1(x) _mm512_set1_pd(x)
#define GT_MUL(x, y) _mm512_mul_pd(x, y)
#define GT_FMA(x, y, z) _mm512_fmadd_pd(x, y, z)
#define GT_STREAM(p, v) _mm512_stream_pd(p, v)
#define GT_FENCE() _mm_sfence()
#define GT_TRANSPOSE(src, ld, dst, ds) tr_avx512_f64(src, ld, dst, ds)
#define GT_MASKED
#include "gemm.c"
#endif /* GEMM_X86 */

#if GEMM_ARM
/* NEON (AArch64): 32 registers of 128 bits, 8 x 3-vector tiles (24 accumulators, 3 for b, one
 * for the broadcast of a); edge tiles through the scratch tile. Partial vectors go through
 * simd.h's small buffers (NEON has no masked moves). */
/* The vector-square transposes of op(b)'s packing (see tr_avx2_f32). */
static inline void tr_neon_f32(const float *src, int64_t ld, float *dst, int64_t ds)
{
    float32x4x2_t t01 = vtrnq_f32(vld1q_f32(src), vld1q_f32(src + ld));
    float32x4x2_t t23 = vtrnq_f32(vld1q_f32(src + 2 * ld), vld1q_f32(src + 3 * ld));
    vst1q_f32(dst, vcombine_f32(vget_low_f32(t01.val[0]), vget_low_f32(t23.val[0])));
    vst1q_f32(dst + ds, vcombine_f32(vget_low_f32(t01.val[1]), vget_low_f32(t23.val[1])));
    vst1q_f32(dst + 2 * ds, vcombine_f32(vget_high_f32(t01.val[0]), vget_high_f32(t23.val[0])));
    vst1q_f32(dst + 3 * ds, vcombine_f32(vget_high_f32(t01.val[1]), vget_high_f32(t23.val[1])));
}
static inline void tr_neon_f64(const double *src, int64_t ld, double *dst, int64_t ds)
{
    float64x2_t r0 = vld1q_f64(src), r1 = vld1q_f64(src + ld);
    vst1q_f64(dst, vzip1q_f64(r0, r1));
    vst1q_f64(dst + ds, vzip2q_f64(r0, r1));
}

#define GT_SUF neon_f32
#define GT_T float
#define GT_V float32x4_t
#define GT_VL 4
#define GT_NV 3
#define GT_MR 8
#define GT_KC 256
#define GT_MC 128
#define GT_NC 504
#define GT_TARGET
#define GT_ZERO() vdupq_n_f32(0.0f)
#define GT_LOAD(p) vld1q_f32(p)
#define GT_LOADU(p) vld1q_f32(p)
#define GT_LOADN(p, n) simd_nload4(n, p)
#define GT_STOREU(p, v) vst1q_f32(p, v)
#define GT_STOREN(p, v, n) simd_nstore4(p, n, v)
#define GT_SET1(x) vdupq_n_f32(x)
#define GT_MUL(x, y) vmulq_f32(x, y)
#define GT_FMA(x, y, z) vfmaq_f32(z, x, y)
#define GT_STREAM(p, v) vst1q_f32(p, v)
#define GT_FENCE() ((void)0)
#define GT_TRANSPOSE(src, ld, dst, ds) tr_neon_f32(src, ld, dst, ds)
#include "gemm.c"

#define GT_SUF neon_f64
#define GT_T double
#define GT_V float64x2_t
#define GT_VL 2
#define GT_NV 3
#define GT_MR 8
#define GT_KC 256
#define GT_MC 64
#define GT_NC 252
#define GT_TARGET
#define GT_ZERO() vdupq_n_f64(0.0)
#define GT_LOAD(p) vld1q_f64(p)
#define GT_LOADU(p) vld1q_f64(p)
#define GT_LOADN(p, n) simd_nload2(n, p)
#define GT_STOREU(p, v) vst1q_f64(p, v)
#define GT_STOREN(p, v, n) simd_nstore2(p, n, v)
#define GT_SET1(x) vdupq_n_f64(x)
#define GT_MUL(x, y) vmulq_f64(x, y)
#define GT_FMA(x, y, z) vfmaq_f64(z, x, y)
#define GT_STREAM(p, v) vst1q_f64(p, v)
#define GT_FENCE() ((void)0)
#define GT_TRANSPOSE(src, ld, dst, ds) tr_neon_f64(src, ld, dst, ds)
#include "gemm.c"
#endif /* GEMM_ARM */
#undef GEMM_TEMPLATE

/* The kernel sets by GEMM_GENERIC... and dtype (0: f32, 1: f64); NULL where the build has none. */
static const gemm_impl *const impls[GEMM_ISA_COUNT][2] = {
    [GEMM_GENERIC] = {&impl_generic_f32, &impl_generic_f64},
#if GEMM_X86
    [GEMM_AVX2] = {&impl_avx2_f32, &impl_avx2_f64},
    [GEMM_AVX512] = {&impl_avx512_f32, &impl_avx512_f64},
#endif
#if GEMM_ARM
    [GEMM_NEON] = {&impl_neon_f32, &impl_neon_f64},
#endif
};

/* ---------------------------------------------------------------- selection */

/* The widest kernel set this process may run: sx__isa() (the CPU's, capped by SX_ISA), where
 * this build has the set. */
static int isa_best(void)
{
#if GEMM_X86
    switch (sx__isa()) {
    case SX__ISA_AVX512:
        return GEMM_AVX512;
    case SX__ISA_AVX2:
        return GEMM_AVX2;
    default:
        break;
    }
#endif
#if GEMM_ARM
    if (sx__isa() == SX__ISA_NEON)
        return GEMM_NEON;
#endif
    return GEMM_GENERIC;
}

/* Whether kernel set `isa` may run here: in the build, and no wider than isa_best() (the x86
 * sets nest: AVX-512 machines run AVX2 too). */
static bool isa_allowed(int isa)
{
    return isa >= 0 && isa < GEMM_ISA_COUNT && impls[isa][0] != NULL && isa <= isa_best();
}

/* -1 until first use, then the kernel set in use; use_blas: STRIX_GEMM=blas. */
static atomic_int isa_cur = -1;
static atomic_int use_blas = 0;

static int isa_get(void)
{
    int isa = atomic_load_explicit(&isa_cur, memory_order_relaxed);
    if (isa >= 0)
        return isa;
    isa = isa_best();
    const char *env = getenv("STRIX_GEMM_ISA");
    if (env != NULL) {
        int cap = strcmp(env, "generic") == 0 ? GEMM_GENERIC
                  : strcmp(env, "avx2") == 0  ? GEMM_AVX2
                                              : isa;
        isa = cap < isa && isa_allowed(cap) ? cap : isa;
    }
    env = getenv("STRIX_GEMM");
    atomic_store_explicit(&use_blas, env != NULL && strcmp(env, "blas") == 0, memory_order_relaxed);
    atomic_store_explicit(&isa_cur, isa, memory_order_relaxed);
    return isa;
}

int sx__gemm_isa(int want)
{
    int isa = isa_get();
    if (isa_allowed(want)) {
        atomic_store_explicit(&isa_cur, want, memory_order_relaxed);
        isa = want;
    }
    return isa;
}

bool sx__gemm_blocks(int isa, sx_dtype dt, int blocks[5])
{
    if (isa < 0 || isa >= GEMM_ISA_COUNT || impls[isa][dt == SX_F64] == NULL)
        return false;
    const gemm_impl *im = impls[isa][dt == SX_F64];
    const int b[5] = {im->mr, im->nr, im->kc, im->mc, im->nc};
    memcpy(blocks, b, sizeof b);
    return true;
}

/* ---------------------------------------------------------------- driver */

/* A second thread pays off from about this many flops per thread (waking a sleeping pool worker
 * costs some microseconds). */
#define GEMM_FLOPS_PER_THREAD 4e6
/* Rectangles per thread for products of at least 2 * this * GEMM_FLOPS_PER_THREAD flops per
 * thread (the grid never changes the bits: each element is computed by the same operations). */
#define GEMM_PARTS_PER_THREAD 2
/* Packing one element costs about as much kernel time as this many flops. */
#define GEMM_PACK_COST 24.0

/* Split c into a tm x tn grid of rectangles of whole micro-tiles, tm * tn <= nt, choosing the
 * grid whose largest rectangle costs least: its flops plus its packing (a once per NC-wide
 * column block, b once). Ties go to fewer rectangles. */
static void choose_grid(const gemm_job *jb, const gemm_impl *im, int nt, int *tm, int *tn)
{
    const int64_t pm = ceil_div(jb->m, im->mr), pn = ceil_div(jb->n, im->nr);
    const double k = (double)jb->k;
    double best = 0;
    *tm = *tn = 1;
    for (int gm = 1; gm <= nt && gm <= pm; gm++)
        for (int gn = 1; gm * gn <= nt && gn <= pn; gn++) {
            int64_t rows = min64(ceil_div(pm, gm) * im->mr, jb->m);
            int64_t cols = min64(ceil_div(pn, gn) * im->nr, jb->n);
            double cost =
                2.0 * (double)rows * (double)cols * k +
                GEMM_PACK_COST * k * ((double)rows * (double)ceil_div(cols, im->nc) + (double)cols);
            if ((gm == 1 && gn == 1) || cost < best) {
                best = cost;
                *tm = gm;
                *tn = gn;
            }
        }
}

/* Rectangle `part` of a tm x tn grid over c: whole micro-tiles, as even as they go. */
static void run_part(const gemm_impl *im, size_t esz, const gemm_job *jb, int tm, int tn, int part)
{
    const int64_t pm = ceil_div(jb->m, im->mr), pn = ceil_div(jb->n, im->nr);
    const int gi = part / tn, gj = part % tn;
    const int64_t i0 = min64(pm * gi / tm * im->mr, jb->m);
    const int64_t i1 = min64(pm * (gi + 1) / tm * im->mr, jb->m);
    const int64_t j0 = min64(pn * gj / tn * im->nr, jb->n);
    const int64_t j1 = min64(pn * (gj + 1) / tn * im->nr, jb->n);
    if (i0 >= i1 || j0 >= j1)
        return;
    gemm_job sub = *jb;
    sub.m = i1 - i0;
    sub.n = j1 - j0;
    sub.a = (const char *)jb->a + (size_t)(jb->ta ? i0 : i0 * jb->lda) * esz;
    sub.b = (const char *)jb->b + (size_t)(jb->tb ? j0 * jb->ldb : j0) * esz;
    sub.c = (char *)jb->c + (size_t)(i0 * jb->ldc + j0) * esz;
    im->run(&sub);
}

typedef struct gemm_parts_ctx {
    const gemm_impl *im;
    size_t esz;
    const gemm_job *jb;
    int tm, tn;
} gemm_parts_ctx;

static void gemm_part_task(void *ctx, int64_t part)
{
    const gemm_parts_ctx *c = ctx;
    run_part(c->im, c->esz, c->jb, c->tm, c->tn, (int)part);
}

/* alpha = 0 (or k = 0): c = beta * c (zeros when beta = 0), a and b unread, as BLAS does. */
static void scale_c(sx_dtype dt, const gemm_job *jb)
{
    for (int64_t i = 0; i < jb->m; i++) {
        if (dt == SX_F32) {
            float *cr = (float *)jb->c + i * jb->ldc;
            for (int64_t j = 0; j < jb->n; j++)
                cr[j] = jb->beta == 0.0 ? 0.0f : (float)jb->beta * cr[j];
        } else {
            double *cr = (double *)jb->c + i * jb->ldc;
            for (int64_t j = 0; j < jb->n; j++)
                cr[j] = jb->beta == 0.0 ? 0.0 : jb->beta * cr[j];
        }
    }
}

static void blas_gemm(sx_dtype dt, const gemm_job *jb)
{
    enum CBLAS_TRANSPOSE opa = jb->ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE opb = jb->tb ? CblasTrans : CblasNoTrans;
    if (dt == SX_F32)
        cblas_sgemm(CblasRowMajor, opa, opb, (int)jb->m, (int)jb->n, (int)jb->k, (float)jb->alpha,
                    jb->a, (int)jb->lda, jb->b, (int)jb->ldb, (float)jb->beta, jb->c, (int)jb->ldc);
    else
        cblas_dgemm(CblasRowMajor, opa, opb, (int)jb->m, (int)jb->n, (int)jb->k, jb->alpha, jb->a,
                    (int)jb->lda, jb->b, (int)jb->ldb, jb->beta, jb->c, (int)jb->ldc);
}

int64_t sx__gemm_kblocks(int64_t k)
{
    return k > 0 ? kblock_count(k, GEMM_KC) : 0;
}

void sx__gemm(sx_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
              const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
              int64_t ldc)
{
    const size_t esz = sx_dtype_size(dt);
    const gemm_job jb = {.ta = ta,
                         .tb = tb,
                         .m = m,
                         .n = n,
                         .k = k,
                         .alpha = alpha,
                         .beta = beta,
                         .a = a,
                         .b = b,
                         .c = c,
                         .lda = lda,
                         .ldb = ldb,
                         .ldc = ldc,
                         .big_c = m * n * (int64_t)esz >= GEMM_STREAM_MIN};
    const gemm_impl *im = impls[isa_get()][dt == SX_F64];
    if (atomic_load_explicit(&use_blas, memory_order_relaxed)) {
        blas_gemm(dt, &jb);
        return;
    }
    if (m == 0 || n == 0)
        return;
    if (alpha == 0.0 || k == 0) {
        scale_c(dt, &jb);
        return;
    }
    int nt = sx__par_threads(); /* 1 inside a task of a parallel loop */
    const double flops = 2.0 * (double)m * (double)n * (double)k;
    if (nt > 1 && flops < GEMM_FLOPS_PER_THREAD * nt)
        nt = flops < 2 * GEMM_FLOPS_PER_THREAD ? 1 : (int)(flops / GEMM_FLOPS_PER_THREAD);
    /* Big products get up to GEMM_PARTS_PER_THREAD rectangles per thread, so that a thread
     * descheduled while it holds one delays the caller by a fraction of its share. */
    int tasks = nt;
    if (nt > 1 && flops >= 2.0 * GEMM_PARTS_PER_THREAD * GEMM_FLOPS_PER_THREAD * nt)
        tasks = GEMM_PARTS_PER_THREAD * nt;
    int tm = 1, tn = 1;
    if (nt > 1)
        choose_grid(&jb, im, tasks, &tm, &tn);
    const int parts = tm * tn;
    if (parts == 1) {
        im->run(&jb);
        return;
    }
    gemm_parts_ctx pc = {im, esz, &jb, tm, tn};
    sx__par_for(parts, gemm_part_task, &pc);
}

#else /* GEMM_TEMPLATE: one kernel set for one dtype ------------------------------------------ */

#define GT_NR (GT_NV * GT_VL)
#define GT_NAME(x) GEMM_CAT(x, GT_SUF)
/* this instance's functions */
#define KERNEL GT_NAME(kernel)
#define KERNEL_R GT_NAME(kernel_r)
#define MICRO GT_NAME(micro)
#define TILE GT_NAME(tile)
#define PACK_A GT_NAME(pack_a)
#define PACK_B GT_NAME(pack_b)
#define RUN GT_NAME(run)

_Static_assert(GT_KC == GEMM_KC, "one K block for every kernel set");
_Static_assert(sizeof(GT_T) * GT_KC * GT_NC <= GEMM_WS_B, "b block fits the workspace");
_Static_assert(sizeof(GT_T) * GT_MC * GT_KC <= GEMM_WS_A, "a block fits the workspace");
_Static_assert(GT_MR == 4 || GT_MR == 6 || GT_MR == 8 || GT_MR == 14,
               "MICRO has a case for every tile height up to GT_MR");
_Static_assert(GT_MC % GT_MR == 0 && GT_NC % GT_NR == 0 && GT_KC % 16 == 0,
               "blocks of whole micro-tiles");

/* Edge columns: with GT_MASKED the last vector of a tile is loaded and stored under a mask (the
 * kernel gets the number of columns in it, rem); otherwise narrow tiles go through a scratch
 * tile. Both compute each element exactly as a full tile does. */
#ifdef GT_MASKED
_Static_assert(GT_NV == 2, "masked tiles are one or two vectors wide");
#define GT_REM_PARAM , int rem
#define GT_REM_ARG , rem
#define GT_LAST_FULL (rem == GT_VL)
#define GT_CLOAD(v, p) ((v) == nv - 1 ? GT_LOADN(p, rem) : GT_LOADU(p))
#define GT_CSTORE(v, p, x)                                                                         \
    do {                                                                                           \
        if ((v) == nv - 1)                                                                         \
            GT_STOREN(p, x, rem);                                                                  \
        else                                                                                       \
            GT_STOREU(p, x);                                                                       \
    } while (0)
#else
#define GT_REM_PARAM
#define GT_REM_ARG
#define GT_LAST_FULL 1
#define GT_CLOAD(v, p) GT_LOADU(p)
#define GT_CSTORE(v, p, x) GT_STOREU(p, x)
#endif

/* The micro-kernel: c (mr, nv vectors) = alpha * A @ B + beta * c (mode 0), or = alpha * A @ B
 * with c unread (mode 1: beta = 0 overwrites NaN; mode 2: the same with streaming stores of the
 * full vectors, for a large c written once and 64-byte aligned rows), or = alpha * (A @ B + c)
 * (mode 3: the last K block of a product with beta = 0, alpha applied to the whole sum, rounded
 * once as the sum and once as the product). A is an a micro-panel of mr
 * rows and kc columns: row-major with row stride GT_KC when arow ([i][p]), else p-major with stride
 * GT_MR ([p][i]); B is a b panel, p-major with stride GT_NR (64-byte aligned). mr, nv and arow are
 * constants at every call (always inlined), so the accumulators live in registers. */
static GT_TARGET inline __attribute__((always_inline)) void
KERNEL(const int mr, const int nv, const int arow, int64_t kc, const GT_T *restrict a,
       const GT_T *restrict b, GT_T *restrict c, int64_t ldc, GT_T alpha, GT_T beta,
       int mode GT_REM_PARAM)
{
    GT_V acc[GT_MR][GT_NV];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++)
            acc[i][v] = GT_ZERO();
    for (int64_t p = 0; p < kc; p++) {
        GT_V bv[GT_NV];
        for (int v = 0; v < nv; v++)
            bv[v] = GT_LOAD(b + p * GT_NR + v * GT_VL);
        for (int i = 0; i < mr; i++) {
            GT_V av = GT_SET1(arow ? a[i * GT_KC + p] : a[p * GT_MR + i]);
            for (int v = 0; v < nv; v++)
                acc[i][v] = GT_FMA(av, bv[v], acc[i][v]);
        }
    }
    GT_V va = GT_SET1(alpha);
    if (mode == 2) {
        for (int i = 0; i < mr; i++)
            for (int v = 0; v < nv; v++)
                if (v < nv - 1 || GT_LAST_FULL)
                    GT_STREAM(c + i * ldc + v * GT_VL, GT_MUL(va, acc[i][v]));
                else
                    GT_CSTORE(v, c + i * ldc + v * GT_VL, GT_MUL(va, acc[i][v]));
    } else if (mode == 1) {
        for (int i = 0; i < mr; i++)
            for (int v = 0; v < nv; v++)
                GT_CSTORE(v, c + i * ldc + v * GT_VL, GT_MUL(va, acc[i][v]));
    } else if (mode == 3) {
        const GT_V one = GT_SET1((GT_T)1);
        for (int i = 0; i < mr; i++)
            for (int v = 0; v < nv; v++) {
                GT_T *cp = c + i * ldc + v * GT_VL;
                GT_CSTORE(v, cp, GT_MUL(va, GT_FMA(one, acc[i][v], GT_CLOAD(v, cp))));
            }
    } else {
        GT_V vb = GT_SET1(beta);
        for (int i = 0; i < mr; i++)
            for (int v = 0; v < nv; v++) {
                GT_T *cp = c + i * ldc + v * GT_VL;
                GT_CSTORE(v, cp, GT_FMA(va, acc[i][v], GT_MUL(vb, GT_CLOAD(v, cp))));
            }
    }
}

/* The kernel for a constant mr: picks nv (1 or GT_NV vectors) and the a layout. */
static GT_TARGET inline __attribute__((always_inline)) void
KERNEL_R(const int mr, int nv, bool arow, int64_t kc, const GT_T *a, const GT_T *b, GT_T *c,
         int64_t ldc, GT_T alpha, GT_T beta, int mode GT_REM_PARAM)
{
    if (nv == GT_NV && arow)
        KERNEL(mr, GT_NV, 1, kc, a, b, c, ldc, alpha, beta, mode GT_REM_ARG);
    else if (nv == GT_NV)
        KERNEL(mr, GT_NV, 0, kc, a, b, c, ldc, alpha, beta, mode GT_REM_ARG);
#if GT_NV > 1
    else if (arow)
        KERNEL(mr, 1, 1, kc, a, b, c, ldc, alpha, beta, mode GT_REM_ARG);
    else
        KERNEL(mr, 1, 0, kc, a, b, c, ldc, alpha, beta, mode GT_REM_ARG);
#endif
}

/* One tile of mr rows (1..GT_MR): one instance of the kernel per height. */
static GT_TARGET void MICRO(int mr, int nv, bool arow, int64_t kc, const GT_T *a, const GT_T *b,
                            GT_T *c, int64_t ldc, GT_T alpha, GT_T beta, int mode GT_REM_PARAM)
{
#define GT_CASE(R)                                                                                 \
    case R:                                                                                        \
        KERNEL_R(R, nv, arow, kc, a, b, c, ldc, alpha, beta, mode GT_REM_ARG);                     \
        return;
    switch (mr) {
        GT_CASE(1)
        GT_CASE(2)
        GT_CASE(3)
        GT_CASE(4)
#if GT_MR > 4
        GT_CASE(5)
        GT_CASE(6)
#endif
#if GT_MR > 6
        GT_CASE(7)
        GT_CASE(8)
#endif
#if GT_MR > 8
        GT_CASE(9)
        GT_CASE(10)
        GT_CASE(11)
        GT_CASE(12)
        GT_CASE(13)
        GT_CASE(14)
#endif
    default:
        assert(0 && "tile height out of range");
    }
#undef GT_CASE
}

/* One tile of c, mr x nr (nr <= GT_NR). */
static GT_TARGET void TILE(int mr, int nr, bool arow, int64_t kc, const GT_T *a, const GT_T *b,
                           GT_T *c, int64_t ldc, GT_T alpha, GT_T beta, int mode)
{
#ifdef GT_MASKED
    const int nv = nr > GT_VL ? 2 : 1;
    MICRO(mr, nv, arow, kc, a, b, c, ldc, alpha, beta, mode, nr - (nv - 1) * GT_VL);
#else
    const int nv = nr > GT_VL ? GT_NV : 1;
    if (nr == nv * GT_VL) {
        MICRO(mr, nv, arow, kc, a, b, c, ldc, alpha, beta, mode);
        return;
    }
    _Alignas(64) GT_T t[GT_MR * GT_NR];
    const bool reads_c = mode == 0 || mode == 3;
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < GT_NR; j++)
            t[i * GT_NR + j] = !reads_c || j >= nr ? 0 : c[i * ldc + j];
    MICRO(mr, nv, arow, kc, a, b, t, GT_NR, alpha, beta, mode == 2 ? 1 : mode); /* no streaming */
    for (int i = 0; i < mr; i++)
        memcpy(c + i * ldc, t + i * GT_NR, (size_t)nr * sizeof(GT_T));
#endif
}

/* Pack op(a) rows [0, mc) x columns [0, kc) (a points at op(a)(0, 0)) into micro-panels of GT_MR
 * rows, panel q at q * GT_MR * GT_KC. The rows of the stored a are contiguous when !ta, and the
 * panel keeps them as rows ([i][p], stride GT_KC); when ta its rows are op(a)'s columns and the
 * panel is p-major ([p][i], stride GT_MR). Either way a copy of contiguous runs. */
static GT_TARGET void PACK_A(bool ta, int64_t mc, int64_t kc, const GT_T *a, int64_t lda,
                             GT_T *restrict buf)
{
    if (!ta) {
        for (int64_t i = 0; i < mc; i++) { /* the last vector partial: rows have room */
            const GT_T *src = a + i * lda;
            GT_T *dst = buf + (i / GT_MR) * GT_MR * GT_KC + (i % GT_MR) * GT_KC;
            int64_t p = 0;
            for (; p + GT_VL <= kc; p += GT_VL)
                GT_STOREU(dst + p, GT_LOADU(src + p));
            if (p < kc)
                GT_STOREU(dst + p, GT_LOADN(src + p, (int)(kc - p)));
        }
        return;
    }
    for (int64_t p = 0; p < kc; p++) {
        const GT_T *src = a + p * lda;
        if (p + 8 < kc) /* rows are far apart: fetch ahead what the hardware would not */
            for (int64_t i = 0; i < mc; i += 64 / (int64_t)sizeof(GT_T))
                __builtin_prefetch(src + 8 * lda + i, 0, 3);
        for (int64_t i0 = 0; i0 < mc; i0 += GT_MR) {
            GT_T *dst = buf + i0 * GT_KC + p * GT_MR;
            const int64_t mr = min64(GT_MR, mc - i0);
            for (int64_t e = 0; e < mr; e += GT_VL) { /* the last vector partial */
                if (mr - e >= GT_VL)
                    GT_STOREU(dst + e, GT_LOADU(src + i0 + e));
                else
                    GT_STOREN(dst + e, GT_LOADN(src + i0 + e, (int)(mr - e)), (int)(mr - e));
            }
        }
    }
}

/* Pack op(b) rows [0, kc) x columns [0, nc) into panels of GT_NR columns, panel q at
 * q * GT_NR * kc, p-major (GT_NR elements per p), the last panel zero-padded to GT_NR. */
static GT_TARGET void PACK_B(bool tb, int64_t kc, int64_t nc, const GT_T *b, int64_t ldb,
                             GT_T *restrict buf)
{
    const int64_t nfull = nc / GT_NR * GT_NR;
    if (!tb) { /* row by row of the stored b (contiguous reads), cut into the panels */
        for (int64_t p = 0; p < kc; p++) {
            const GT_T *src = b + p * ldb;
            for (int64_t j0 = 0; j0 < nfull; j0 += GT_NR) {
                GT_T *dst = buf + j0 * kc + p * GT_NR;
                for (int v = 0; v < GT_NV; v++) /* vectors: a copy loop would become memmove */
                    GT_STOREU(dst + v * GT_VL, GT_LOADU(src + j0 + v * GT_VL));
            }
            if (nfull < nc) {
                GT_T *dst = buf + nfull * kc + p * GT_NR;
                for (int v = 0; v < GT_NV; v++) {
                    const int64_t cnt = nc - nfull - v * GT_VL, j = nfull + v * GT_VL;
                    GT_STOREU(dst + v * GT_VL, cnt >= GT_VL ? GT_LOADU(src + j)
                                               : cnt > 0    ? GT_LOADN(src + j, (int)cnt)
                                                            : GT_ZERO());
                }
            }
        }
        return;
    }
    /* op(b)(p, j) = b[j * ldb + p]: GT_VL-square blocks are transposed in registers; the rest
     * (a partial panel, kc % GT_VL rows) is zeroed by vectors, then copied element by element */
    for (int64_t j0 = 0; j0 < nc; j0 += GT_NR) {
        const int64_t nr = min64(GT_NR, nc - j0);
        const int64_t jv = nr / GT_VL * GT_VL, pv = kc / GT_VL * GT_VL;
        GT_T *dst = buf + j0 * kc;
        for (int64_t j = 0; j < jv; j += GT_VL)
            for (int64_t p = 0; p < pv; p += GT_VL)
                GT_TRANSPOSE(b + (j0 + j) * ldb + p, ldb, dst + p * GT_NR + j, GT_NR);
        for (int64_t p = 0; p < kc; p++) {
            int64_t j = p < pv ? jv : 0;
            for (int64_t z = j; z < GT_NR; z += GT_VL)
                GT_STOREU(dst + p * GT_NR + z, GT_ZERO());
            for (; j < nr; j++)
                dst[p * GT_NR + j] = b[(j0 + j) * ldb + p];
        }
    }
}

/* The blocked product of one rectangle. For each NC-wide column block of c and each group of K
 * blocks whose packed b fits the workspace (one block, or all of K for a narrow c): pack b; then
 * for each MC-row block, for each K block in order: pack a, and run every micro-panel of a
 * against every b panel, so the a micro-panel stays in L1 and a narrow c block stays in cache
 * while all of its K blocks are summed into it. */
static GT_TARGET void RUN(const gemm_job *jb)
{
    GT_T *bbuf = (GT_T *)ws_b, *abuf = (GT_T *)ws_a;
    const GT_T *a = jb->a, *b = jb->b;
    GT_T *c = jb->c;
    const bool ta = jb->ta, tb = jb->tb;
    const int64_t m = jb->m, n = jb->n, k = jb->k, lda = jb->lda, ldb = jb->ldb, ldc = jb->ldc;
    const int64_t es = (int64_t)sizeof(GT_T);
    const GT_T alpha = (GT_T)jb->alpha, beta = (GT_T)jb->beta;
    const int64_t nkb = kblock_count(k, GT_KC);
    /* beta = 0 with several K blocks: the blocks are summed with alpha = 1 and alpha scales the
     * whole sum at the end, so that the result is round(alpha * P) for P the product (the bits
     * of a product followed by a scaling) */
    const bool defer = jb->beta == 0.0 && nkb > 1 && alpha != (GT_T)1;
    /* c written once (one K block, beta = 0), large, rows of whole aligned lines: streaming
     * stores save reading it into the cache first */
    const bool stream =
        nkb == 1 && jb->beta == 0.0 && jb->big_c && (uintptr_t)c % 64 == 0 && ldc * es % 64 == 0;
    /* one row block (a short a, as a dense layer's batch): every b panel is used by it alone, so
     * it is packed right before its tiles, into L1, instead of with the whole b block through L2
     * (dense_fwd 100 x 1024 x 6272) */
    const bool b_late = m <= GT_MC;
    for (int64_t jc = 0; jc < n; jc += GT_NC) {
        const int64_t nc = min64(GT_NC, n - jc), ncr = ceil_div(nc, GT_NR) * GT_NR;
        const int64_t gmax = (int64_t)(GEMM_WS_B / sizeof(GT_T)) / (GT_KC * ncr);
        for (int64_t q0 = 0; q0 < nkb; q0 += gmax) {
            const int64_t q1 = min64(q0 + gmax, nkb), kg = kblock_start(k, nkb, q0);
            for (int64_t q = q0; q < q1 && !b_late; q++) {
                const int64_t k0 = kblock_start(k, nkb, q), k1 = kblock_start(k, nkb, q + 1);
                PACK_B(tb, k1 - k0, nc, tb ? b + jc * ldb + k0 : b + k0 * ldb + jc, ldb,
                       bbuf + (k0 - kg) * ncr);
            }
            for (int64_t ic = 0; ic < m; ic += GT_MC) {
                const int64_t mc = min64(GT_MC, m - ic);
                for (int64_t q = q0; q < q1; q++) {
                    const int64_t k0 = kblock_start(k, nkb, q), k1 = kblock_start(k, nkb, q + 1);
                    const int64_t kc = k1 - k0;
                    const GT_T *ap = ta ? a + k0 * lda + ic : a + ic * lda + k0;
                    PACK_A(ta, mc, kc, ap, lda, abuf);
                    /* the first K block applies beta, the others add; with beta = 0 and
                     * several K blocks, alpha waits for the last one (mode 3) */
                    const GT_T bq = q == 0 ? beta : 1;
                    const bool last = q == nkb - 1;
                    const GT_T aq = defer && !last ? 1 : alpha;
                    const int mode = defer && last              ? 3
                                     : q > 0 || jb->beta != 0.0 ? 0
                                     : stream                   ? 2
                                                                : 1;
                    const GT_T *bblk = bbuf + (k0 - kg) * ncr;
                    /* the next a block (same K block), fetched during this one's kernels */
                    pf_walk pf = {NULL, 0, 0, 0, 0, 0};
                    if (ic + GT_MC < m) {
                        const int64_t nmc = min64(GT_MC, m - ic - GT_MC);
                        pf.row = (const char *)(ta ? ap + GT_MC : ap + GT_MC * lda);
                        pf.bytes = (ta ? nmc : kc) * es;
                        pf.stride = lda * es;
                        pf.rows_left = ta ? kc : nmc;
                        const int64_t lines = pf.rows_left * (pf.bytes / 64 + 2);
                        pf.per_tile = ceil_div(lines, ceil_div(mc, GT_MR) * ceil_div(nc, GT_NR));
                    }
                    for (int64_t jr = 0; jr < nc; jr += GT_NR) {
                        const int nr = (int)min64(GT_NR, nc - jr);
                        const GT_T *bpan = bblk + jr * kc;
                        if (b_late) {
                            const int64_t j = jc + jr;
                            PACK_B(tb, kc, nr, tb ? b + j * ldb + k0 : b + k0 * ldb + j, ldb, bbuf);
                            bpan = bbuf;
                            /* the next panel (of this K block, or the next one's first), from
                             * memory during these tiles: its rows are far apart */
                            const int64_t jn = jr + GT_NR < nc ? jr + GT_NR : 0;
                            const int64_t qn = jr + GT_NR < nc ? q : q + 1;
                            pf.rows_left = 0;
                            if (qn < nkb) {
                                const int64_t n0 = kblock_start(k, nkb, qn);
                                const int64_t nk = kblock_start(k, nkb, qn + 1) - n0;
                                const int64_t nw = min64(GT_NR, nc - jn);
                                pf.row = (const char *)(tb ? b + (jc + jn) * ldb + n0
                                                           : b + n0 * ldb + jc + jn);
                                pf.off = 0;
                                pf.bytes = (tb ? nk : nw) * es;
                                pf.rows_left = tb ? nw : nk;
                                pf.stride = ldb * es;
                                pf.per_tile = ceil_div(pf.rows_left * (pf.bytes / 64 + 2),
                                                       ceil_div(mc, GT_MR));
                            }
                        }
                        for (int64_t ir = 0; ir < mc; ir += GT_MR) {
                            TILE((int)min64(GT_MR, mc - ir), nr, !ta, kc, abuf + ir * GT_KC, bpan,
                                 c + (ic + ir) * ldc + jc + jr, ldc, aq, bq, mode);
                            pf_step(&pf);
                        }
                    }
                }
            }
        }
    }
    if (stream)
        GT_FENCE();
}

static const gemm_impl GT_NAME(impl) = {RUN, GT_MR, GT_NR, GT_KC, GT_MC, GT_NC};

#undef GT_NR
#undef GT_NAME
#undef KERNEL
#undef KERNEL_R
#undef MICRO
#undef TILE
#undef PACK_A
#undef PACK_B
#undef RUN
#undef GT_REM_PARAM
#undef GT_REM_ARG
#undef GT_LAST_FULL
#undef GT_CLOAD
#undef GT_CSTORE
#undef GT_SUF
#undef GT_T
#undef GT_V
#undef GT_VL
#undef GT_NV
#undef GT_MR
#undef GT_KC
#undef GT_MC
#undef GT_NC
#undef GT_TARGET
#undef GT_ZERO
#undef GT_LOAD
#undef GT_LOADU
#undef GT_LOADN
#undef GT_STOREU
#undef GT_STOREN
#undef GT_SET1
#undef GT_MUL
#undef GT_FMA
#undef GT_TRANSPOSE
#undef GT_STREAM
#undef GT_FENCE
#ifdef GT_MASKED
#undef GT_MASKED
#endif

#endif /* GEMM_TEMPLATE */
