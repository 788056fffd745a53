/* batch_norm_m512.h: batch_norm.c's f32 kernels written out with AVX-512 (included by
 * batch_norm.c under BN_ATTR = the AVX-512 target). The compiler kept the reductions' double
 * accumulators in memory (one store-to-load chain per row) and scalar: these hold the sums of
 * 16 channels in four registers and convert 8 floats to doubles at a time. The same operations
 * per element in the same order as batch_norm_tmpl.h (no FMA: -ffp-contract=off and explicit
 * multiply-then-add), rows in order per channel, so the same bits. Whole groups of 16 channels
 * use plain loads and stores, a channel tail masked ones (masked stores are slow on AMD's cores:
 * all-masked passes ran 1.5-2x slower than the SSE2 loops). */
#include <immintrin.h>

/* lanes [j, min(j + 8, w)) of a group of 8 */
static inline BN_ATTR __mmask8 bn_m8(int64_t j, int64_t w)
{
    return w - j >= 8   ? (__mmask8)0xff
           : w - j <= 0 ? (__mmask8)0
                        : (__mmask8)((1u << (w - j)) - 1u);
}

static inline BN_ATTR __mmask16 bn_m16(int64_t j, int64_t w)
{
    return w - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (w - j)) - 1u);
}

/* 8 floats at p as doubles: all 8 (full) or the lanes of k */
#define BN_LD8(p, full, k)                                                                         \
    _mm512_cvtps_pd((full) ? _mm256_loadu_ps(p) : _mm256_maskz_loadu_ps(k, p))

/* dy's 8 floats at p as doubles, as +0 where the mask's (q, NULL: none) are not > 0 */
static inline BN_ATTR __m512d bn_dy8(const float *p, const float *q, bool full, __mmask8 k)
{
    __m256 g = full ? _mm256_loadu_ps(p) : _mm256_maskz_loadu_ps(k, p);
    if (q != NULL) { /* both loaded, then selected: mask > 0 ? dy : +0 */
        const __m256 mv = full ? _mm256_loadu_ps(q) : _mm256_maskz_loadu_ps(k, q);
        g = _mm256_maskz_mov_ps(_mm256_cmp_ps_mask(mv, _mm256_setzero_ps(), _CMP_GT_OQ), g);
    }
    return _mm512_cvtps_pd(g);
}

/* One group of up to 16 channels from column o (lanes k0, k1; full: all 16) over rows
 * [r0, r1): bn_block's sums into s1[0..16), s2[0..16). */
static inline BN_ATTR void bn_group16(const bn_job *jb, int64_t r0, int64_t r1, int64_t o,
                                      bool full, __mmask8 k0, __mmask8 k1, double *s1, double *s2)
{
    const float *x = jb->x, *dy = jb->dy, *mk = jb->mask;
    const int64_t c = jb->c;
    const __m512d c0 = _mm512_maskz_loadu_pd(k0, jb->center + o),
                  c1 = _mm512_maskz_loadu_pd(k1, jb->center + o + 8);
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, q0 = a0, q1 = a0;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * c + o;
        const __m512d d0 = _mm512_sub_pd(BN_LD8(xr, full, k0), c0);
        const __m512d d1 = _mm512_sub_pd(BN_LD8(xr + 8, full, k1), c1);
        if (dy == NULL) { /* s1 += x - shift, s2 += (x - shift)^2 */
            a0 = _mm512_add_pd(a0, d0);
            a1 = _mm512_add_pd(a1, d1);
            q0 = _mm512_add_pd(q0, _mm512_mul_pd(d0, d0));
            q1 = _mm512_add_pd(q1, _mm512_mul_pd(d1, d1));
            continue;
        }
        /* s1 += dy, s2 += dy (x - mean) */
        const float *mr = mk != NULL ? mk + r * c + o : NULL;
        const __m512d g0 = bn_dy8(dy + r * c + o, mr, full, k0);
        const __m512d g1 = bn_dy8(dy + r * c + o + 8, mr != NULL ? mr + 8 : NULL, full, k1);
        a0 = _mm512_add_pd(a0, g0);
        a1 = _mm512_add_pd(a1, g1);
        q0 = _mm512_add_pd(q0, _mm512_mul_pd(g0, d0));
        q1 = _mm512_add_pd(q1, _mm512_mul_pd(g1, d1));
    }
    _mm512_mask_storeu_pd(s1, k0, a0);
    _mm512_mask_storeu_pd(s1 + 8, k1, a1);
    _mm512_mask_storeu_pd(s2, k0, q0);
    _mm512_mask_storeu_pd(s2 + 8, k1, q1);
}

/* n (1, 2 or 4, a constant after inlining: the accumulators stay in registers) whole groups
 * of 16 channels from column o over rows [r0, r1) in one pass: each row's cache lines are read
 * once, in order, instead of once per group */
static inline BN_ATTR void bn_groups16(const bn_job *jb, int64_t r0, int64_t r1, int64_t o,
                                       const int n, double *s1, double *s2)
{
    const float *dy = jb->dy, *mk = jb->mask;
    const int64_t c = jb->c;
    __m512d ct[8], a[8], q[8];
#pragma GCC unroll 8
    for (int h = 0; h < 2 * n; h++) {
        ct[h] = _mm512_loadu_pd(jb->center + o + 8 * h);
        a[h] = q[h] = _mm512_setzero_pd();
    }
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = (const float *)jb->x + r * c + o;
#pragma GCC unroll 8
        for (int h = 0; h < 2 * n; h++) {
            const __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(xr + 8 * h)), ct[h]);
            if (dy == NULL) { /* s1 += x - shift, s2 += (x - shift)^2 */
                a[h] = _mm512_add_pd(a[h], d);
                q[h] = _mm512_add_pd(q[h], _mm512_mul_pd(d, d));
                continue;
            }
            /* s1 += dy, s2 += dy (x - mean) */
            const __m512d g = bn_dy8(dy + r * c + o + 8 * h,
                                     mk != NULL ? mk + r * c + o + 8 * h : NULL, true, 0xff);
            a[h] = _mm512_add_pd(a[h], g);
            q[h] = _mm512_add_pd(q[h], _mm512_mul_pd(g, d));
        }
    }
#pragma GCC unroll 8
    for (int h = 0; h < 2 * n; h++) {
        _mm512_storeu_pd(s1 + 8 * h, a[h]);
        _mm512_storeu_pd(s2 + 8 * h, q[h]);
    }
}

/* bn_block (batch_norm_tmpl.h) for f32: up to 64 channels per pass over the rows [r0, r1) */
static BN_ATTR void bn_block_f32_m512(const bn_job *jb, int64_t r0, int64_t r1, int64_t j0,
                                      int64_t j1, double *s1, double *s2)
{
    const int64_t w = j1 - j0;
    int64_t j = 0;
    for (; j + 64 <= w; j += 64)
        bn_groups16(jb, r0, r1, j0 + j, 4, s1 + j, s2 + j);
    for (; j + 32 <= w; j += 32)
        bn_groups16(jb, r0, r1, j0 + j, 2, s1 + j, s2 + j);
    for (; j + 16 <= w; j += 16)
        bn_groups16(jb, r0, r1, j0 + j, 1, s1 + j, s2 + j);
    if (j < w)
        bn_group16(jb, r0, r1, j0 + j, false, bn_m8(j, w), bn_m8(j + 8, w), s1 + j, s2 + j);
}

/* x a + b (then + the residual *r when r is given, then relu: v < 0 ? 0 : v) of 16 lanes */
static inline BN_ATTR __m512 bn_norm16(__m512 x, __m512 a, __m512 b, const __m512 *r, bool relu)
{
    __m512 v = _mm512_add_ps(_mm512_mul_ps(x, a), b);
    if (r != NULL)
        v = _mm512_add_ps(v, *r);
    if (relu)
        v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ),
                               _mm512_setzero_ps());
    return v;
}

/* bn_norm_rows for rows of exactly n groups of 16 channels (c = 16n, n of 1, 2 or 4), n,
 * has_res and relu constants after inlining: a and b stay in registers and each row is straight
 * code without branches (resnet20's rows of 16-64 channels ran 10-15% slower through the
 * general loop) */
static inline BN_ATTR void bn_norm_whole(const bn_norm_job *nj, int64_t lo, int64_t hi, const int n,
                                         const bool has_res, const bool relu)
{
    const float *x = nj->x, *a = nj->a, *res = nj->res;
    float *y = nj->y;
    const int64_t c = 16 * n;
    __m512 av[4], bv[4];
#pragma GCC unroll 4
    for (int h = 0; h < n; h++) {
        av[h] = _mm512_loadu_ps(a + 16 * h);
        bv[h] = _mm512_loadu_ps(a + c + 16 * h);
    }
    for (int64_t i = lo * c; i < hi * c; i += c) {
#pragma GCC unroll 4
        for (int h = 0; h < n; h++) {
            __m512 rv = has_res ? _mm512_loadu_ps(res + i + 16 * h) : _mm512_setzero_ps();
            _mm512_storeu_ps(y + i + 16 * h, bn_norm16(_mm512_loadu_ps(x + i + 16 * h), av[h],
                                                       bv[h], has_res ? &rv : NULL, relu));
        }
    }
}

/* bn_norm_whole for n groups (a constant), with the residual and relu as constants */
static inline BN_ATTR void bn_norm_whole_n(const bn_norm_job *nj, int64_t lo, int64_t hi,
                                           const int n)
{
    if (nj->res != NULL) {
        if (nj->relu)
            bn_norm_whole(nj, lo, hi, n, true, true);
        else
            bn_norm_whole(nj, lo, hi, n, true, false);
    } else if (nj->relu) {
        bn_norm_whole(nj, lo, hi, n, false, true);
    } else {
        bn_norm_whole(nj, lo, hi, n, false, false);
    }
}

/* bn_norm_rows for f32: y = x a + b (then + res, then relu). Each group of 16 is read before it
 * is written: y may be x or res. */
static BN_ATTR void bn_norm_rows_f32_m512(void *ctx, int64_t lo, int64_t hi)
{
    const bn_norm_job *nj = ctx;
    switch (nj->c) {
    case 16:
        bn_norm_whole_n(nj, lo, hi, 1);
        return;
    case 32:
        bn_norm_whole_n(nj, lo, hi, 2);
        return;
    case 64:
        bn_norm_whole_n(nj, lo, hi, 4);
        return;
    default:
        break;
    }
    const float *x = nj->x, *a = nj->a, *b = a + nj->c, *res = nj->res;
    float *y = nj->y;
    const int64_t c = nj->c, cf = c / 16 * 16;
    const bool relu = nj->relu;
    const __mmask16 kt = bn_m16(cf, c);
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * c, *rr = res != NULL ? res + r * c : NULL;
        float *yr = y + r * c;
        for (int64_t j = 0; j < cf; j += 16) {
            __m512 rv = rr != NULL ? _mm512_loadu_ps(rr + j) : _mm512_setzero_ps();
            _mm512_storeu_ps(yr + j,
                             bn_norm16(_mm512_loadu_ps(xr + j), _mm512_loadu_ps(a + j),
                                       _mm512_loadu_ps(b + j), rr != NULL ? &rv : NULL, relu));
        }
        if (cf < c) {
            __m512 rv = rr != NULL ? _mm512_maskz_loadu_ps(kt, rr + cf) : _mm512_setzero_ps();
            _mm512_mask_storeu_ps(
                yr + cf, kt,
                bn_norm16(_mm512_maskz_loadu_ps(kt, xr + cf), _mm512_maskz_loadu_ps(kt, a + cf),
                          _mm512_maskz_loadu_ps(kt, b + cf), rr != NULL ? &rv : NULL, relu));
        }
    }
}

/* dy a + (x - mean) k1 + k0 of 16 lanes, dy as +0 where y (when given) is not > 0 */
static inline BN_ATTR __m512 bn_dx16(__m512 g, const __m512 *yv, __m512 x, __m512 mean, __m512 a,
                                     __m512 k1, __m512 k0)
{
    if (yv != NULL)
        g = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(*yv, _mm512_setzero_ps(), _CMP_GT_OQ), g);
    return _mm512_add_ps(
        _mm512_add_ps(_mm512_mul_ps(g, a), _mm512_mul_ps(_mm512_sub_ps(x, mean), k1)), k0);
}

/* bn_dx_rows for rows of exactly n groups of 16 channels (c = 16n; n and has_y constants after
 * inlining): the coefficients in registers, each row straight code (as bn_norm_whole) */
static inline BN_ATTR void bn_dx_whole(const bn_dx_job *dj, int64_t lo, int64_t hi, const int n,
                                       const bool has_y)
{
    const int64_t c = 16 * n;
    const float *x = dj->x, *dy = dj->dy, *y = dj->y, *k = dj->k;
    float *dx = dj->dx;
    __m512 mv[4], av[4], k1v[4], k0v[4];
#pragma GCC unroll 4
    for (int h = 0; h < n; h++) {
        mv[h] = _mm512_loadu_ps(k + 16 * h);
        av[h] = _mm512_loadu_ps(k + c + 16 * h);
        k1v[h] = _mm512_loadu_ps(k + 2 * c + 16 * h);
        k0v[h] = _mm512_loadu_ps(k + 3 * c + 16 * h);
    }
    for (int64_t i = lo * c; i < hi * c; i += c) {
#pragma GCC unroll 4
        for (int h = 0; h < n; h++) {
            const int64_t e = i + 16 * h;
            __m512 yv = has_y ? _mm512_loadu_ps(y + e) : _mm512_setzero_ps();
            _mm512_storeu_ps(dx + e, bn_dx16(_mm512_loadu_ps(dy + e), has_y ? &yv : NULL,
                                             _mm512_loadu_ps(x + e), mv[h], av[h], k1v[h], k0v[h]));
        }
    }
}

/* bn_dx_whole for n groups (a constant), with or without the mask */
static inline BN_ATTR void bn_dx_whole_n(const bn_dx_job *dj, int64_t lo, int64_t hi, const int n)
{
    if (dj->y != NULL)
        bn_dx_whole(dj, lo, hi, n, true);
    else
        bn_dx_whole(dj, lo, hi, n, false);
}

/* bn_dx_rows for f32: dx = dy a + (x - mean) k1 + k0 (dy as +0 where y is not > 0). Each group
 * of 16 is read before it is written: dx may be x, dy or y. */
static BN_ATTR void bn_dx_rows_f32_m512(void *ctx, int64_t lo, int64_t hi)
{
    const bn_dx_job *dj = ctx;
    switch (dj->c) {
    case 16:
        bn_dx_whole_n(dj, lo, hi, 1);
        return;
    case 32:
        bn_dx_whole_n(dj, lo, hi, 2);
        return;
    case 64:
        bn_dx_whole_n(dj, lo, hi, 4);
        return;
    default:
        break;
    }
    const int64_t c = dj->c, cf = c / 16 * 16;
    const float *x = dj->x, *dy = dj->dy, *y = dj->y, *mean = dj->k, *a = mean + c, *k1 = a + c,
                *k0 = k1 + c;
    float *dx = dj->dx;
    const __mmask16 kt = bn_m16(cf, c);
    for (int64_t r = lo; r < hi; r++) {
        for (int64_t j = 0; j < cf; j += 16) {
            const int64_t i = r * c + j;
            __m512 yv = y != NULL ? _mm512_loadu_ps(y + i) : _mm512_setzero_ps();
            _mm512_storeu_ps(dx + i, bn_dx16(_mm512_loadu_ps(dy + i), y != NULL ? &yv : NULL,
                                             _mm512_loadu_ps(x + i), _mm512_loadu_ps(mean + j),
                                             _mm512_loadu_ps(a + j), _mm512_loadu_ps(k1 + j),
                                             _mm512_loadu_ps(k0 + j)));
        }
        if (cf < c) {
            const int64_t i = r * c + cf;
            __m512 yv = y != NULL ? _mm512_maskz_loadu_ps(kt, y + i) : _mm512_setzero_ps();
            _mm512_mask_storeu_ps(
                dx + i, kt,
                bn_dx16(_mm512_maskz_loadu_ps(kt, dy + i), y != NULL ? &yv : NULL,
                        _mm512_maskz_loadu_ps(kt, x + i), _mm512_maskz_loadu_ps(kt, mean + cf),
                        _mm512_maskz_loadu_ps(kt, a + cf), _mm512_maskz_loadu_ps(kt, k1 + cf),
                        _mm512_maskz_loadu_ps(kt, k0 + cf)));
        }
    }
}
