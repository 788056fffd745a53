/* conv_tmpl.h: the per-dtype kernels of conv.c; included by conv.c with T and SFX defined, and
 * with the vector macros V_* (conv.c) when the compiler can build AVX-512 code.
 * Two families: im2col / col2im for the GEMM path, which move whole runs of kw * c contiguous
 * elements (one kernel row of one output pixel), and the direct kernels, which keep a tile of
 * results in vector registers and read a zero-padded copy of one band of the image (so no tap
 * ever tests a border). Every unit function works on one unit (a band of rows of one image, or
 * whole images) and is called by one thread, or splits its rows over threads when `par` is
 * set; the sums never depend on the thread count. */
#define CONV_CAT_(a, b) a##_##b
#define CONV_CAT(a, b) CONV_CAT_(a, b)
#define FN(name) CONV_CAT(name, SFX)

/* Output columns [*ox_a, *ox_b) read kernel rows that lie wholly inside x (no padding on the
 * left or right), so their segments are plain copies of kw * c elements. */
static inline void FN(interior)(const conv_geom *g, int64_t *ox_a, int64_t *ox_b)
{
    int64_t a = (g->pl + g->sw - 1) / g->sw;
    int64_t room = g->w - g->kw + g->pl; /* ox * sw <= room */
    int64_t b = room >= 0 ? room / g->sw + 1 : 0;
    if (a > g->ow)
        a = g->ow;
    if (b > g->ow)
        b = g->ow;
    if (b < a)
        b = a;
    *ox_a = a;
    *ox_b = b;
}

/* col (np * ow, kdim) = the im2col rows of output image rows [p0, p0 + np) (p = img * oh + oy)
 * of x (n,h,w,c); padding reads as zero. With zeros false the padded cells are not written:
 * the caller knows they still hold the zeros of an earlier block with the same layout. */
static void FN(im2col)(const conv_geom *g, const void *xv, int64_t p0, int64_t np, void *colv,
                       bool zeros, bool par)
{
    const T *x = xv;
    T *col = colv;
    const int64_t c = g->c, kw = g->kw, ow = g->ow, kdim = g->kdim, seg = kw * c;
    const size_t segb = (size_t)seg * sizeof(T);
    int64_t ox_a, ox_b;
    FN(interior)(g, &ox_a, &ox_b);
#pragma omp parallel for schedule(static) if (par && np * ow * kdim >= SX_OMP_MIN)
    for (int64_t q = 0; q < np; q++) {
        const int64_t img = (p0 + q) / g->oh, oy = (p0 + q) % g->oh;
        T *row = col + q * ow * kdim;
        for (int64_t ky = 0; ky < g->kh; ky++) {
            const int64_t iy = oy * g->sh - g->pt + ky;
            T *dst = row + ky * seg;
            if (iy < 0 || iy >= g->h) {
                if (zeros)
                    for (int64_t ox = 0; ox < ow; ox++, dst += kdim)
                        memset(dst, 0, segb);
                continue;
            }
            const T *xrow = x + (img * g->h + iy) * g->w * c;
            for (int64_t ox = 0; ox < ow; ox++, dst += kdim) {
                const int64_t ix0 = ox * g->sw - g->pl;
                if (ox >= ox_a && ox < ox_b) {
                    memcpy(dst, xrow + ix0 * c, segb);
                    continue;
                }
                /* an edge column: kx in [lo, hi) falls inside x, the rest is padding */
                const int64_t lo = ix0 < 0 ? -ix0 : 0;
                const int64_t hi = g->w - ix0 < kw ? g->w - ix0 : kw;
                if (zeros) {
                    memset(dst, 0, (size_t)(lo * c) * sizeof(T));
                    memset(dst + hi * c, 0, (size_t)((kw - hi) * c) * sizeof(T));
                }
                if (hi > lo)
                    memcpy(dst + lo * c, xrow + (ix0 + lo) * c,
                           (size_t)((hi - lo) * c) * sizeof(T));
            }
        }
    }
}

/* dx (n,h,w,c) += the col2im of col (np * ow, kdim), the rows of output rows [p0, p0 + np).
 * Each input row (img, iy) gathers every contribution it receives from the block, in the order
 * oy, ox ascending: threads never write the same row, and the sums do not depend on the number
 * of threads. With `fresh` the block holds whole images: each input row of them is zeroed just
 * before its sums (while it is in cache) instead of by a separate pass over dx. */
static void FN(col2im)(const conv_geom *g, const void *colv, int64_t p0, int64_t np, void *dxv,
                       bool fresh, bool par)
{
    const T *col = colv;
    T *dx = dxv;
    const int64_t c = g->c, kw = g->kw, kh = g->kh, ow = g->ow, oh = g->oh, kdim = g->kdim;
    const int64_t seg = kw * c;
    int64_t ox_a, ox_b;
    FN(interior)(g, &ox_a, &ox_b);
    const int64_t img0 = p0 / oh, img1 = (p0 + np - 1) / oh;
    const int64_t nq = (img1 - img0 + 1) * g->h;
#pragma omp parallel for schedule(static) if (par && np * ow * kdim >= SX_OMP_MIN)
    for (int64_t q = 0; q < nq; q++) {
        const int64_t img = img0 + q / g->h, iy = q % g->h;
        T *drow = dx + (img * g->h + iy) * g->w * c;
        if (fresh)
            memset(drow, 0, (size_t)(g->w * c) * sizeof(T));
        /* output rows of this image inside the block */
        int64_t oy_lo = p0 - img * oh, oy_hi = p0 + np - img * oh; /* [oy_lo, oy_hi) */
        if (oy_lo < 0)
            oy_lo = 0;
        if (oy_hi > oh)
            oy_hi = oh;
        /* oy reads input row iy through kernel row ky = t - oy * sh when 0 <= ky < kh */
        const int64_t t = iy + g->pt;
        const int64_t first = t - kh + 1 <= 0 ? 0 : (t - kh + 1 + g->sh - 1) / g->sh;
        const int64_t last = t / g->sh; /* inclusive */
        if (first > oy_lo)
            oy_lo = first;
        if (last + 1 < oy_hi)
            oy_hi = last + 1;
        for (int64_t oy = oy_lo; oy < oy_hi; oy++) {
            const int64_t ky = t - oy * g->sh;
            const T *src = col + (img * oh + oy - p0) * ow * kdim + ky * seg;
            for (int64_t ox = 0; ox < ow; ox++, src += kdim) {
                const int64_t ix0 = ox * g->sw - g->pl;
                int64_t lo = 0, hi = seg; /* the part of the segment inside x */
                if (ox < ox_a || ox >= ox_b) {
                    lo = ix0 < 0 ? -ix0 * c : 0;
                    hi = (g->w - ix0 < kw ? g->w - ix0 : kw) * c;
                }
                T *d = drow + ix0 * c + lo;
                const T *e = src + lo;
#pragma omp simd
                for (int64_t j = 0; j < hi - lo; j++)
                    d[j] += e[j];
            }
        }
    }
}

/* ---------------------------------------------------------------- GEMM-path units */

/* The output image rows [*p0, *p0 + *np) of GEMM-path unit u: ipu whole images, or one band of
 * rpu rows of one image. */
static inline void FN(unit_rows)(const conv_plan *pl, const conv_geom *g, int64_t u, int64_t *p0,
                                 int64_t *np)
{
    if (pl->bands == 1) {
        int64_t i0 = u * pl->ipu, i1 = i0 + pl->ipu < g->n ? i0 + pl->ipu : g->n;
        *p0 = i0 * g->oh;
        *np = (i1 - i0) * g->oh;
    } else {
        int64_t img = u / pl->bands, oy0 = (u % pl->bands) * pl->rpu;
        *p0 = img * g->oh + oy0;
        *np = g->oh - oy0 < pl->rpu ? g->oh - oy0 : pl->rpu;
    }
}

/* The im2col block of GEMM-path unit u in the slot. Units of whole images share one layout, so
 * the padding zeros are written only until a full unit has put them in place (the last unit
 * may hold fewer images); bands differ and always write them. Returns whether the slot now
 * holds a full unit's zeros. */
static bool FN(unit_col)(const conv_job *jb, int64_t u, void *slot, bool fresh, int64_t *p0,
                         int64_t *np)
{
    const conv_plan *pl = jb->pl;
    FN(unit_rows)(pl, jb->g, u, p0, np);
    const bool banded = pl->bands > 1;
    FN(im2col)(jb->g, jb->in0, *p0, *np, slot, fresh || banded, jb->par);
    return !banded && (!fresh || *np == pl->ipu * jb->g->oh);
}

/* y rows of unit u (np * ow, f) = col (np * ow, kdim) @ k (kdim, f). */
static bool FN(gemm_fwd_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                              bool first)
{
    (void)acc, (void)first;
    const conv_geom *g = jb->g;
    int64_t p0, np;
    const bool ready = FN(unit_col)(jb, u, slot, fresh, &p0, &np);
    T *y = (T *)jb->out + p0 * g->ow * g->f;
    sx__gemm(jb->dt, false, false, np * g->ow, g->f, g->kdim, 1.0, slot, g->kdim, jb->in1, g->f,
             0.0, y, g->f);
    return ready;
}

/* acc (kdim, f) (+)= col (np * ow, kdim)^T @ dy rows (np * ow, f); the first unit of a group
 * overwrites. */
static bool FN(gemm_bwdk_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                               bool first)
{
    const conv_geom *g = jb->g;
    int64_t p0, np;
    const bool ready = FN(unit_col)(jb, u, slot, fresh, &p0, &np);
    const T *dy = (const T *)jb->in1 + p0 * g->ow * g->f;
    sx__gemm(jb->dt, true, false, g->kdim, g->f, np * g->ow, 1.0, slot, g->kdim, dy, g->f,
             first ? 0.0 : 1.0, acc, g->f);
    return ready;
}

/* dx of the images of unit u: dcol (np * ow, kdim) = dy rows (np * ow, f) @ k^T, then col2im.
 * Units of whole images zero their dx rows as col2im reaches them; banded images are zeroed
 * first and their bands run in order (neighbouring bands share input rows). */
static bool FN(gemm_bwdi_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                               bool first)
{
    (void)fresh, (void)acc, (void)first;
    const conv_geom *g = jb->g;
    const conv_plan *pl = jb->pl;
    int64_t b0 = 0, b1 = 1; /* bands of this unit */
    if (pl->bands > 1) {
        memset((T *)jb->out + u * g->h * g->w * g->c, 0, (size_t)(g->h * g->w * g->c) * sizeof(T));
        b1 = pl->bands;
    }
    for (int64_t b = b0; b < b1; b++) {
        int64_t p0, np;
        FN(unit_rows)(pl, g, pl->bands > 1 ? u * pl->bands + b : u, &p0, &np);
        const T *dy = (const T *)jb->in1 + p0 * g->ow * g->f;
        sx__gemm(jb->dt, false, true, np * g->ow, g->kdim, g->f, 1.0, dy, g->f, jb->in0, g->f, 0.0,
                 slot, g->kdim);
        FN(col2im)(g, slot, p0, np, jb->out, pl->bands == 1, jb->par);
    }
    return true; /* the GEMM writes every element of dcol */
}

/* ---------------------------------------------------------------- direct kernels (AVX-512) */
#ifdef V_FMA

/* Lanes of a mask for n of the VL lanes of one vector (n clamped to [0, VL]). */
static inline VMASK FN(vmask)(int64_t n)
{
    return n <= 0 ? (VMASK)0 : n >= VL ? (VMASK) ~(VMASK)0 : (VMASK)((1u << n) - 1u);
}

/* xp ((nrows - 1) * sh + kh rows, wp, c) = the zero-padded rows of image img that output rows
 * [oy0, oy0 + nrows) read: padded row r is input row oy0 * sh + r - pt, padded column j is
 * input column j - pl. `fresh` (first use of the slot in this call) zeroes the buffer for the
 * tallest band, maxrows output rows; afterwards the margins stay zero, and only rows that fall
 * outside x are cleared again. */
static void FN(pad_x)(const conv_geom *g, const T *x, int64_t img, int64_t oy0, int64_t nrows,
                      int64_t maxrows, T *xp, bool fresh)
{
    const int64_t wp = g->wp, c = g->c, rows = (nrows - 1) * g->sh + g->kh;
    const int64_t ncol = g->w < wp - g->pl ? g->w : wp - g->pl;
    if (fresh)
        memset(xp, 0, (size_t)(((maxrows - 1) * g->sh + g->kh) * wp * c) * sizeof(T));
    for (int64_t r = 0; r < rows; r++) {
        const int64_t iy = oy0 * g->sh + r - g->pt;
        T *d = xp + r * wp * c;
        if (iy < 0 || iy >= g->h) {
            if (!fresh)
                memset(d, 0, (size_t)(wp * c) * sizeof(T));
            continue;
        }
        memcpy(d + g->pl * c, x + ((img * g->h + iy) * g->w) * c, (size_t)(ncol * c) * sizeof(T));
    }
}

/* Output row band of direct unit u (image, first row, rows). */
static inline void FN(direct_band)(const conv_plan *pl, int64_t rows, int64_t u, int64_t *img,
                                   int64_t *r0, int64_t *nr)
{
    *img = u / pl->bands;
    *r0 = (u % pl->bands) * pl->rpu;
    *nr = rows - *r0 < pl->rpu ? rows - *r0 : pl->rpu;
}

/* One forward tile: np pixels (bases xq) by nv vectors of filters from f0 (masks m0, m1), summed
 * over every tap; inlined with np and nv constant so the accumulators live in registers. Only
 * the first `real` pixels are stored. */
static inline __attribute__((always_inline)) CONV_VATTR void
FN(fwd_tile)(const conv_geom *g, const T *const *xq, const T *k, T *y, VMASK m0, VMASK m1,
             int64_t real, const int np, const int nv)
{
    const int64_t c = g->c, f = g->f, wp = g->wp;
    V a0[CONV_FP], a1[CONV_FP];
#pragma GCC unroll 12
    for (int p = 0; p < np; p++) {
        a0[p] = V_ZERO();
        if (nv == 2)
            a1[p] = V_ZERO();
    }
    const T *kt = k;
    for (int64_t ky = 0; ky < g->kh; ky++)
        for (int64_t j = 0; j < g->kw * c; j++, kt += f) {
            const int64_t o = ky * wp * c + j; /* tap (ky, kx = j / c, ci = j % c) */
            const V k0 = V_MLOAD(m0, kt);
            const V k1 = nv == 2 ? V_MLOAD(m1, kt + VL) : V_ZERO();
#pragma GCC unroll 12
            for (int p = 0; p < np; p++) {
                const V xv = V_SET1(xq[p][o]);
                a0[p] = V_FMA(xv, k0, a0[p]);
                if (nv == 2)
                    a1[p] = V_FMA(xv, k1, a1[p]);
            }
        }
        /* constant trip counts everywhere, so that the accumulators stay in registers */
#pragma GCC unroll 12
    for (int p = 0; p < np; p++)
        if (p < real) {
            V_MSTORE(y + p * f, m0, a0[p]);
            if (nv == 2)
                V_MSTORE(y + p * f + VL, m1, a1[p]);
        }
}

/* y (npix, f) of one band = sum over the taps of the padded band xp times k: tiles of CONV_FP
 * pixels by two vectors of filters (by one for the last filters when at most one vector is
 * left; more pixels would need more base pointers than there are registers), the pixel's tap
 * values broadcast from xp. A tile may span
 * output rows (each pixel has its own base pointer); the last tile repeats its last pixel and
 * stores only the real ones. */
static CONV_VATTR void FN(direct_fwd_band)(const conv_geom *g, const T *xp, const T *k, T *y,
                                           int64_t nrows)
{
    const int64_t c = g->c, f = g->f, ow = g->ow, wp = g->wp, npix = nrows * ow;
    for (int64_t f0 = 0; f0 < f; f0 += 2 * VL) {
        const bool one = f - f0 <= VL;
        const VMASK m0 = FN(vmask)(f - f0), m1 = FN(vmask)(f - f0 - VL);
        for (int64_t q0 = 0; q0 < npix; q0 += CONV_FP) {
            const T *xq[CONV_FP];
            for (int64_t p = 0, oy = q0 / ow, ox = q0 % ow; p < CONV_FP; p++) {
                xq[p] = xp + (oy * g->sh * wp + ox * g->sw) * c;
                if (q0 + p + 1 < npix && ++ox == ow) /* the last pixel repeats */
                    ox = 0, oy++;
            }
            if (one)
                FN(fwd_tile)(g, xq, k + f0, y + q0 * f + f0, m0, m1, npix - q0, CONV_FP, 1);
            else
                FN(fwd_tile)(g, xq, k + f0, y + q0 * f + f0, m0, m1, npix - q0, CONV_FP, 2);
        }
    }
}

/* One tile of nt taps (offsets toff into the padded band) by two filter vectors, summed over
 * every pixel of the band; inlined with nt constant so the accumulators live in registers. */
static inline __attribute__((always_inline)) CONV_VATTR void
FN(bwdk_tile)(const conv_geom *g, const T *xp, const int64_t *toff, const T *dy, int64_t nrows,
              VMASK m0, VMASK m1, T *dk, bool first, const int nt)
{
    const int64_t c = g->c, f = g->f, ow = g->ow, wp = g->wp;
    V a0[CONV_KT], a1[CONV_KT];
    int64_t o[CONV_KT];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        a0[t] = a1[t] = V_ZERO();
        o[t] = toff[t];
    }
    for (int64_t oy = 0; oy < nrows; oy++) {
        const T *xr = xp + oy * g->sh * wp * c;
        const T *dr = dy + oy * ow * f;
        for (int64_t ox = 0; ox < ow; ox++, xr += g->sw * c, dr += f) {
            const V d0 = V_MLOAD(m0, dr), d1 = V_MLOAD(m1, dr + VL);
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) {
                const V xv = V_SET1(xr[o[t]]);
                a0[t] = V_FMA(xv, d0, a0[t]);
                a1[t] = V_FMA(xv, d1, a1[t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        T *d = dk + t * f;
        if (!first) {
            a0[t] = V_ADD(a0[t], V_MLOAD(m0, d));
            a1[t] = V_ADD(a1[t], V_MLOAD(m1, d + VL));
        }
        V_MSTORE(d, m0, a0[t]);
        V_MSTORE(d + VL, m1, a1[t]);
    }
}

/* dk (kdim, f) (+)= sum over the pixels of one band of x taps (outer) dy: the taps are cut into
 * near-equal tiles of at most CONV_KT, the filters into pairs of vectors. */
static CONV_VATTR void FN(direct_bwdk_band)(const conv_geom *g, const T *xp, const T *dy,
                                            int64_t nrows, T *dk, bool first)
{
    const int64_t c = g->c, f = g->f, wp = g->wp, kdim = g->kdim;
    const int64_t ntiles = (kdim + CONV_KT - 1) / CONV_KT;
    for (int64_t f0 = 0; f0 < f; f0 += 2 * VL) {
        const VMASK m0 = FN(vmask)(f - f0), m1 = FN(vmask)(f - f0 - VL);
        for (int64_t i = 0, t0 = 0; i < ntiles; i++) {
            const int nt = (int)((kdim - t0) / (ntiles - i)); /* balanced tile sizes */
            int64_t toff[CONV_KT];
            for (int t = 0; t < nt; t++) {
                const int64_t tap = t0 + t, ky = tap / (g->kw * c), j = tap % (g->kw * c);
                toff[t] = ky * wp * c + j;
            }
            T *d = dk + t0 * f + f0;
            switch (nt) {
#define CONV_KT_CASE(n)                                                                            \
    case n:                                                                                        \
        FN(bwdk_tile)(g, xp, toff, dy + f0, nrows, m0, m1, d, first, n);                           \
        break;
                CONV_KT_CASE(1)
                CONV_KT_CASE(2)
                CONV_KT_CASE(3)
                CONV_KT_CASE(4)
                CONV_KT_CASE(5)
                CONV_KT_CASE(6)
                CONV_KT_CASE(7)
                CONV_KT_CASE(8)
#undef CONV_KT_CASE
            default:
                break;
            }
            t0 += nt;
        }
    }
}

/* kf (c, kh, kw, f) = k (kh, kw, c, f) flipped along kx: kf[ci][ky][kw - 1 - kx] = k[ky][kx][ci],
 * so that one kernel row of the backward-input gather is one contiguous run of kw * f. */
static void FN(flip_k)(const conv_geom *g, const T *k, T *kf)
{
    const int64_t c = g->c, f = g->f, kw = g->kw;
    for (int64_t ci = 0; ci < c; ci++)
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < kw; kx++)
                memcpy(kf + ((ci * g->kh + ky) * kw + kw - 1 - kx) * f,
                       k + ((ky * kw + kx) * c + ci) * f, (size_t)f * sizeof(T));
}

/* dyp (nrows + kh - 1 rows, wq, f) = the zero-padded rows of dy that input rows [iy0, iy0 +
 * nrows) gather from (stride 1): padded row r is output row iy0 + r - (kh - 1 - pt), padded
 * column j is output column j - (kw - 1 - pl). `fresh` and maxrows as in pad_x. */
static void FN(pad_dy)(const conv_geom *g, const T *dy, int64_t img, int64_t iy0, int64_t nrows,
                       int64_t maxrows, T *dyp, bool fresh)
{
    const int64_t wq = g->wq, f = g->f, rows = nrows + g->kh - 1, ml = g->kw - 1 - g->pl;
    if (fresh)
        memset(dyp, 0, (size_t)((maxrows + g->kh - 1) * wq * f) * sizeof(T));
    for (int64_t r = 0; r < rows; r++) {
        const int64_t oy = iy0 + r - (g->kh - 1 - g->pt);
        T *d = dyp + r * wq * f;
        if (oy < 0 || oy >= g->oh) {
            if (!fresh)
                memset(d, 0, (size_t)(wq * f) * sizeof(T));
            continue;
        }
        memcpy(d + ml * f, dy + ((img * g->oh + oy) * g->ow) * f, (size_t)(g->ow * f) * sizeof(T));
    }
}

/* dx of one band of input rows (stride 1), a gather: element (iy, ix, ci) is the sum over the
 * kernel rows ky of the dot product of dyp row iy + kh - 1 - ky, columns [ix, ix + kw), all
 * filters (one run of kw * f) with kf[ci][ky] (the flipped kernel row, the same length).
 * Vectors run along that run; a tile holds CONV_IP elements of one channel (one accumulator
 * each, sharing the kernel loads), reduced by one horizontal sum each (a fixed order). */
static CONV_VATTR void FN(direct_bwdi_band)(const conv_geom *g, const T *dyp, const T *kf, T *dx,
                                            int64_t nrows)
{
    const int64_t c = g->c, f = g->f, w = g->w, wq = g->wq, n = nrows * w;
    const int64_t run = g->kw * f, rv = run / VL * VL; /* whole vectors; the rest masked */
    const VMASK mt = FN(vmask)(run - rv);
    for (int64_t ci = 0; ci < c; ci++)
        for (int64_t q0 = 0; q0 < n; q0 += CONV_IP) {
            const T *dr[CONV_IP]; /* element p's run for ky = 0 */
            for (int64_t p = 0, iy = q0 / w, ix = q0 % w; p < CONV_IP; p++) {
                dr[p] = dyp + ((iy + g->kh - 1) * wq + ix) * f;
                if (q0 + p + 1 < n && ++ix == w) /* the last element repeats */
                    ix = 0, iy++;
            }
            V a[CONV_IP];
#pragma GCC unroll 8
            for (int p = 0; p < CONV_IP; p++)
                a[p] = V_ZERO();
            for (int64_t ky = 0; ky < g->kh; ky++) {
                const T *kr = kf + (ci * g->kh + ky) * run;
                const int64_t o = -ky * wq * f;
                int64_t j = 0;
                for (; j < rv; j += VL) {
                    const V kv = V_LOAD(kr + j);
#pragma GCC unroll 8
                    for (int p = 0; p < CONV_IP; p++)
                        a[p] = V_FMA(V_LOAD(dr[p] + o + j), kv, a[p]);
                }
                if (j < run) {
                    const V kv = V_MLOAD(mt, kr + j);
#pragma GCC unroll 8
                    for (int p = 0; p < CONV_IP; p++)
                        a[p] = V_FMA(V_MLOAD(mt, dr[p] + o + j), kv, a[p]);
                }
            }
            const int64_t np = n - q0;
#pragma GCC unroll 8
            for (int p = 0; p < CONV_IP; p++)
                if (p < np)
                    dx[(q0 + p) * c + ci] = V_HSUM(a[p]);
        }
}

static bool FN(direct_fwd_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                bool first)
{
    (void)acc, (void)first;
    const conv_geom *g = jb->g;
    int64_t img, oy0, nr;
    FN(direct_band)(jb->pl, g->oh, u, &img, &oy0, &nr);
    FN(pad_x)(g, jb->in0, img, oy0, nr, jb->pl->rpu, slot, fresh);
    T *y = (T *)jb->out + (img * g->oh + oy0) * g->ow * g->f;
    FN(direct_fwd_band)(g, slot, jb->in1, y, nr);
    return true;
}

static bool FN(direct_bwdk_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                 bool first)
{
    const conv_geom *g = jb->g;
    int64_t img, oy0, nr;
    FN(direct_band)(jb->pl, g->oh, u, &img, &oy0, &nr);
    FN(pad_x)(g, jb->in0, img, oy0, nr, jb->pl->rpu, slot, fresh);
    const T *dy = (const T *)jb->in1 + (img * g->oh + oy0) * g->ow * g->f;
    FN(direct_bwdk_band)(g, slot, dy, nr, acc, first);
    return true;
}

/* kr (kh, kw, f, c) = k (kh, kw, c, f) rotated by 180 degrees and transposed:
 * kr[ky][kx][fi][ci] = k[kh - 1 - ky][kw - 1 - kx][ci][fi]. With stride 1, dx is the forward
 * convolution of dy, padded by kh - 1 - pt rows and kw - 1 - pl columns before, with kr. */
static void FN(rot_k)(const conv_geom *g, const T *k, T *kr)
{
    const int64_t c = g->c, f = g->f;
    for (int64_t ky = 0; ky < g->kh; ky++)
        for (int64_t kx = 0; kx < g->kw; kx++) {
            const T *src = k + ((g->kh - 1 - ky) * g->kw + g->kw - 1 - kx) * c * f;
            T *dst = kr + (ky * g->kw + kx) * f * c;
            for (int64_t ci = 0; ci < c; ci++)
                for (int64_t fi = 0; fi < f; fi++)
                    dst[fi * c + ci] = src[ci * f + fi];
        }
}

/* Backward-input, stride 1. With at least one vector of input channels it runs the forward
 * kernel over the padded dy band with the rotated kernel (the band has exactly the layout that
 * kernel reads: dy's channels are its input channels, x's its filters); with fewer it gathers
 * over the filters. The slot holds the prepared kernel, then the padded band. */
static bool FN(direct_bwdi_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                 bool first)
{
    (void)acc, (void)first;
    const conv_geom *g = jb->g;
    const bool rot = g->c >= VL;
    int64_t img, iy0, nr;
    FN(direct_band)(jb->pl, g->h, u, &img, &iy0, &nr);
    T *kp = slot, *dyp = kp + CONV_KF_ELEMS(g);
    if (fresh) {
        if (rot)
            FN(rot_k)(g, jb->in0, kp);
        else
            FN(flip_k)(g, jb->in0, kp);
    }
    FN(pad_dy)(g, jb->in1, img, iy0, nr, jb->pl->rpu, dyp, fresh);
    T *dx = (T *)jb->out + (img * g->h + iy0) * g->w * g->c;
    if (rot) { /* the geometry of that forward pass: dy's (h, w) = (oh, ow) padded into wq */
        conv_geom gr = *g;
        gr.c = g->f, gr.f = g->c, gr.ow = g->w, gr.wp = g->wq, gr.kdim = g->kh * g->kw * g->f;
        FN(direct_fwd_band)(&gr, dyp, kp, dx, nr);
    } else {
        FN(direct_bwdi_band)(g, dyp, kp, dx, nr);
    }
    return true;
}

#endif /* V_FMA */

#undef FN
#undef CONV_CAT
#undef CONV_CAT_
