/* conv_tmpl.h: the per-dtype kernels of conv.c; included by conv.c with T and SFX defined, and
 * with the vector macros V_* (conv.c) when the compiler can build AVX-512 code.
 * Three families: im2col / col2im for the GEMM path, which move whole runs of kw * c contiguous
 * elements (one kernel row of one output pixel); the direct kernels, which keep a tile of
 * results in vector registers and read a zero-padded copy of one band of the image (so no tap
 * ever tests a border); and Winograd's F(2x2, 5x5) on the same padded bands. Every unit
 * function works on one unit (a band of rows of one image, or whole images) and is called by
 * one thread, or splits its rows over threads when `par` is set; the sums never depend on the
 * thread count. */
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
typedef struct FN(cols_ctx) {
    const conv_geom *g;
    const void *in; /* x (im2col) or col (col2im) */
    void *out;      /* col (im2col) or dx (col2im) */
    int64_t p0, np;
    bool flag; /* zeros (im2col) or fresh (col2im) */
} FN(cols_ctx);

static void FN(im2col_rows)(void *ctx, int64_t q0, int64_t q1)
{
    const FN(cols_ctx) *cc = ctx;
    const conv_geom *g = cc->g;
    const T *x = cc->in;
    T *col = cc->out;
    const int64_t p0 = cc->p0;
    const bool zeros = cc->flag;
    const int64_t c = g->c, kw = g->kw, ow = g->ow, kdim = g->kdim, seg = kw * c;
    const size_t segb = (size_t)seg * sizeof(T);
    int64_t ox_a, ox_b;
    FN(interior)(g, &ox_a, &ox_b);
    for (int64_t q = q0; q < q1; q++) {
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

static void FN(im2col)(const conv_geom *g, const void *xv, int64_t p0, int64_t np, void *colv,
                       bool zeros, bool par)
{
    FN(cols_ctx) cc = {g, xv, colv, p0, np, zeros};
    if (par && np * g->ow * g->kdim >= SX_PAR_MIN)
        sx__par_range(np, 1, FN(im2col_rows), &cc);
    else
        FN(im2col_rows)(&cc, 0, np);
}

/* dx (n,h,w,c) += the col2im of col (np * ow, kdim), the rows of output rows [p0, p0 + np).
 * Each input row (img, iy) gathers every contribution it receives from the block, in the order
 * oy, ox ascending: threads never write the same row, and the sums do not depend on the number
 * of threads. With `fresh` the block holds whole images: each input row of them is zeroed just
 * before its sums (while it is in cache) instead of by a separate pass over dx. */
static void FN(col2im_rows)(void *ctx, int64_t q0, int64_t q1)
{
    const FN(cols_ctx) *cc = ctx;
    const conv_geom *g = cc->g;
    const T *col = cc->in;
    T *dx = cc->out;
    const int64_t p0 = cc->p0, np = cc->np;
    const bool fresh = cc->flag;
    const int64_t c = g->c, kw = g->kw, kh = g->kh, ow = g->ow, oh = g->oh, kdim = g->kdim;
    const int64_t seg = kw * c;
    int64_t ox_a, ox_b;
    FN(interior)(g, &ox_a, &ox_b);
    const int64_t img0 = p0 / oh;
    for (int64_t q = q0; q < q1; q++) {
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

static void FN(col2im)(const conv_geom *g, const void *colv, int64_t p0, int64_t np, void *dxv,
                       bool fresh, bool par)
{
    FN(cols_ctx) cc = {g, colv, dxv, p0, np, fresh};
    const int64_t img0 = p0 / g->oh, img1 = (p0 + np - 1) / g->oh;
    const int64_t nq = (img1 - img0 + 1) * g->h;
    if (par && np * g->ow * g->kdim >= SX_PAR_MIN)
        sx__par_range(nq, 1, FN(col2im_rows), &cc);
    else
        FN(col2im_rows)(&cc, 0, nq);
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

/* The band of x that output rows [oy0, oy0 + nrows) of image img read, and in *gi the geometry
 * to read it with: x's own rows (wp = w) when the window never leaves x (conv_in_place; 1x1
 * stride-2 layers read every other row and column, and a copy would move them all), else the
 * padded copy in the slot (pad_x). */
static const T *FN(direct_src)(const conv_geom *g, const T *x, int64_t img, int64_t oy0,
                               int64_t nrows, int64_t maxrows, T *slot, bool fresh, conv_geom *gi)
{
    *gi = *g;
    if (conv_in_place(g)) {
        gi->wp = g->w;
        return x + (img * g->h + oy0 * g->sh) * g->w * g->c;
    }
    FN(pad_x)(g, x, img, oy0, nrows, maxrows, slot, fresh);
    return slot;
}

/* Output row band of direct unit u (image, first row, rows). */
static inline void FN(direct_band)(const conv_plan *pl, int64_t rows, int64_t u, int64_t *img,
                                   int64_t *r0, int64_t *nr)
{
    *img = u / pl->bands;
    *r0 = (u % pl->bands) * pl->rpu;
    *nr = rows - *r0 < pl->rpu ? rows - *r0 : pl->rpu;
}

/* One forward tile: np pixels (bases xq) by nv vectors of filters (only the last one masked, m),
 * summed over every tap; inlined with np and nv constant so that the accumulators live in
 * registers. Only the first `real` pixels are stored. */
static inline __attribute__((always_inline)) CONV_VATTR void
FN(fwd_tile)(const conv_geom *g, const T *const *xq, const T *k, T *const *yq, VMASK m,
             int64_t real, const int np, const int nv)
{
    const int64_t c = g->c, f = g->f, wp = g->wp;
    V a[CONV_FP][4];
#pragma GCC unroll 12
    for (int p = 0; p < np; p++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            a[p][v] = V_ZERO();
    const T *kt = k;
    for (int64_t ky = 0; ky < g->kh; ky++)
        for (int64_t j = 0; j < g->kw * c; j++, kt += f) {
            const int64_t o = ky * wp * c + j; /* tap (ky, kx = j / c, ci = j % c) */
            V kv[4];
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                kv[v] = v + 1 < nv ? V_LOAD(kt + v * VL) : V_MLOAD(m, kt + v * VL);
#pragma GCC unroll 12
            for (int p = 0; p < np; p++) {
                const V xv = V_SET1(xq[p][o]);
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++)
                    a[p][v] = V_FMA(xv, kv[v], a[p][v]);
            }
        }
#pragma GCC unroll 12
    for (int p = 0; p < np; p++)
        if (p < real)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                V_MSTORE(yq[p] + v * VL, v + 1 < nv ? (VMASK) ~(VMASK)0 : m, a[p][v]);
}

/* Where the forward tiles read and write: a grid of nrows x ncols pixels, pixel (r, q) reading
 * the taps at x0 + r * xr + q * xc (tap (ky, j) at offset ky * wp * c + j, as fwd_tile) and
 * writing its g->f results at y0 + r * yr + q * yc. A band of the forward pass is the grid of
 * its output pixels; a phase of the strided backward-input (direct_bwdi_phase) is another. */
typedef struct FN(grid) {
    const T *x0;
    int64_t xr, xc;
    T *y0;
    int64_t yr, yc, nrows, ncols;
} FN(grid);

/* The results of grid gd = sum over the taps of the padded band times k: tiles of np pixels
 * by nv vectors of filters (conv_tile_pixels: up to 6, 8 or 12; about 24 accumulators), the
 * pixel's tap values broadcast from the band. A tile may span grid rows (each pixel has its own
 * pointers); the last tile repeats its last pixel and stores only the real ones. */
static CONV_VATTR void FN(direct_grid)(const conv_geom *g, const FN(grid) * gd, const T *k)
{
    const int64_t f = g->f, pw = gd->ncols, npix = gd->nrows * pw;
    for (int64_t f0 = 0; f0 < f; f0 += 4 * VL) {
        const int64_t fl = f - f0 < 4 * VL ? f - f0 : 4 * VL;
        const int nv = (int)((fl + VL - 1) / VL);
        const VMASK m = FN(vmask)(fl - (nv - 1) * VL);
        const int64_t np = conv_tile_pixels(npix, nv);
        for (int64_t q0 = 0; q0 < npix; q0 += np) {
            const T *xq[CONV_FP];
            T *yq[CONV_FP];
            for (int64_t p = 0, r = q0 / pw, q = q0 % pw; p < np; p++) {
                xq[p] = gd->x0 + r * gd->xr + q * gd->xc;
                yq[p] = gd->y0 + r * gd->yr + q * gd->yc + f0;
                if (q0 + p + 1 < npix && ++q == pw) /* the last pixel repeats */
                    q = 0, r++;
            }
            const T *kf = k + f0;
            switch (nv * 16 + np) { /* the cases conv_tile_pixels chooses from */
#define CONV_FP_CASE(v, n)                                                                         \
    case v * 16 + n:                                                                               \
        FN(fwd_tile)(g, xq, kf, yq, m, npix - q0, n, v);                                           \
        break;
                CONV_FP_CASE(1, 12)
                CONV_FP_CASE(1, 11)
                CONV_FP_CASE(1, 10)
                CONV_FP_CASE(1, 9)
                CONV_FP_CASE(2, 12)
                CONV_FP_CASE(2, 11)
                CONV_FP_CASE(2, 10)
                CONV_FP_CASE(2, 9)
                CONV_FP_CASE(3, 8)
                CONV_FP_CASE(3, 7)
                CONV_FP_CASE(4, 6)
                CONV_FP_CASE(4, 5)
#undef CONV_FP_CASE
            default:
                break;
            }
        }
    }
}

/* y (nrows * ow, f) of one band of output rows = the forward pass over the padded band xp
 * (rows of wp * c elements). */
static void FN(direct_fwd_band)(const conv_geom *g, const T *xp, const T *k, T *y, int64_t nrows)
{
    const int64_t c = g->c;
    const FN(grid) gd = {xp, g->sh * g->wp * c, g->sw * c, y, g->ow * g->f, g->f, nrows, g->ow};
    FN(direct_grid)(g, &gd, k);
}

/* One tile of nt consecutive taps of one kernel row (x offsets o0 .. o0 + nt - 1 in the padded
 * band: a kernel row's kw * c taps are contiguous there) by nv vectors of filters, summed over
 * every pixel of the band: per pixel, nv vectors of dy are loaded once and each tap's x value is
 * broadcast against them. Inlined with nt and nv constant so that the accumulators live in
 * registers; only the last vector is masked (m). */
static inline __attribute__((always_inline)) CONV_VATTR void
FN(bwdk_tile)(const conv_geom *g, const T *xp, int64_t o0, const T *dy, int64_t nrows, VMASK m,
              T *dk, bool first, const int nt, const int nv)
{
    const int64_t c = g->c, f = g->f, ow = g->ow, wp = g->wp, xs = g->sw * c;
    V a[CONV_KT][4];
#pragma GCC unroll 12
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            a[t][v] = V_ZERO();
    for (int64_t oy = 0; oy < nrows; oy++) {
        const T *xr = xp + oy * g->sh * wp * c + o0;
        const T *dr = dy + oy * ow * f;
        for (int64_t ox = 0; ox < ow; ox++, xr += xs, dr += f) {
            V d[4];
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                d[v] = v + 1 < nv ? V_LOAD(dr + v * VL) : V_MLOAD(m, dr + v * VL);
#pragma GCC unroll 12
            for (int t = 0; t < nt; t++) {
                const V xv = V_SET1(xr[t]);
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++)
                    a[t][v] = V_FMA(xv, d[v], a[t][v]);
            }
        }
    }
#pragma GCC unroll 12
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            T *d = dk + t * f + v * VL;
            const VMASK mv = v + 1 < nv ? (VMASK) ~(VMASK)0 : m;
            if (!first)
                a[t][v] = V_ADD(a[t][v], V_MLOAD(mv, d));
            V_MSTORE(d, mv, a[t][v]);
        }
}

/* dk (kdim, f) (+)= sum over the pixels of one band of x taps (outer) dy. The filters are cut
 * into chunks of nv <= 4 vectors (only the last one partial), each kernel row's taps into
 * near-equal tiles of at most CONV_KT * 2 / nv taps (nv = 4: 6, 3: 8, 2 or 1: 12): about 24
 * accumulators. */
static CONV_VATTR void FN(direct_bwdk_band)(const conv_geom *g, const T *xp, const T *dy,
                                            int64_t nrows, T *dk, bool first)
{
    const int64_t c = g->c, f = g->f, wp = g->wp, run = g->kw * c;
    for (int64_t f0 = 0; f0 < f; f0 += 4 * VL) {
        const int64_t fl = f - f0 < 4 * VL ? f - f0 : 4 * VL; /* filters in this chunk */
        const int nv = (int)((fl + VL - 1) / VL);
        const VMASK m = FN(vmask)(fl - (nv - 1) * VL);
        const int64_t ntmax = nv <= 2 ? CONV_KT : 2 * CONV_KT / nv;
        const int64_t ntiles = (run + ntmax - 1) / ntmax;
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t i = 0, j0 = 0; i < ntiles; i++) {
                const int nt = (int)((run - j0) / (ntiles - i)); /* balanced tile sizes */
                const int64_t o0 = ky * wp * c + j0;
                T *d = dk + (ky * run + j0) * f + f0;
                const T *dyf = dy + f0;
                /* one case per (nv, nt): nt is at most ntmax for that nv */
                switch (nv * 16 + nt) {
#define CONV_KT_CASE(v, n)                                                                         \
    case v * 16 + n:                                                                               \
        FN(bwdk_tile)(g, xp, o0, dyf, nrows, m, d, first, n, v);                                   \
        break;
#define CONV_KT_CASES6(v)                                                                          \
    CONV_KT_CASE(v, 1)                                                                             \
    CONV_KT_CASE(v, 2)                                                                             \
    CONV_KT_CASE(v, 3) CONV_KT_CASE(v, 4) CONV_KT_CASE(v, 5) CONV_KT_CASE(v, 6)
#define CONV_KT_CASES8(v) CONV_KT_CASES6(v) CONV_KT_CASE(v, 7) CONV_KT_CASE(v, 8)
#define CONV_KT_CASES12(v)                                                                         \
    CONV_KT_CASES8(v) CONV_KT_CASE(v, 9) CONV_KT_CASE(v, 10) CONV_KT_CASE(v, 11) CONV_KT_CASE(v, 12)
                    CONV_KT_CASES12(1)
                    CONV_KT_CASES12(2)
                    CONV_KT_CASES8(3)
                    CONV_KT_CASES6(4)
#undef CONV_KT_CASES12
#undef CONV_KT_CASES8
#undef CONV_KT_CASES6
#undef CONV_KT_CASE
                default:
                    break;
                }
                j0 += nt;
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

/* dyp (nb rows, wq, f) = dy rows [b0, b0 + nb) of image img, zero outside dy, each after ml
 * zero columns. `fresh` (first use of the slot) zeroes maxb rows; afterwards the margins stay
 * zero and only rows outside dy are cleared again. */
static void FN(pad_dy_rows)(const conv_geom *g, const T *dy, int64_t img, int64_t b0, int64_t nb,
                            int64_t maxb, int64_t ml, T *dyp, bool fresh)
{
    const int64_t wq = g->wq, f = g->f;
    if (fresh)
        memset(dyp, 0, (size_t)(maxb * wq * f) * sizeof(T));
    for (int64_t r = 0; r < nb; r++) {
        const int64_t oy = b0 + r;
        T *d = dyp + r * wq * f;
        if (oy < 0 || oy >= g->oh) {
            if (!fresh)
                memset(d, 0, (size_t)(wq * f) * sizeof(T));
            continue;
        }
        memcpy(d + ml * f, dy + ((img * g->oh + oy) * g->ow) * f, (size_t)(g->ow * f) * sizeof(T));
    }
}

/* dyp (nrows + kh - 1 rows, wq, f) = the zero-padded rows of dy that input rows [iy0, iy0 +
 * nrows) gather from (stride 1): padded row r is output row iy0 + r - (kh - 1 - pt), padded
 * column j is output column j - (kw - 1 - pl). `fresh` and maxrows as in pad_x. */
static void FN(pad_dy)(const conv_geom *g, const T *dy, int64_t img, int64_t iy0, int64_t nrows,
                       int64_t maxrows, T *dyp, bool fresh)
{
    FN(pad_dy_rows)
    (g, dy, img, iy0 - (g->kh - 1 - g->pt), nrows + g->kh - 1, maxrows + g->kh - 1,
     g->kw - 1 - g->pl, dyp, fresh);
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
    conv_geom gi;
    const T *xp = FN(direct_src)(g, jb->in0, img, oy0, nr, jb->pl->rpu, slot, fresh, &gi);
    T *y = (T *)jb->out + (img * g->oh + oy0) * g->ow * g->f;
    FN(direct_fwd_band)(&gi, xp, jb->in1, y, nr);
    return xp == slot;
}

static bool FN(direct_bwdk_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                 bool first)
{
    const conv_geom *g = jb->g;
    int64_t img, oy0, nr;
    FN(direct_band)(jb->pl, g->oh, u, &img, &oy0, &nr);
    conv_geom gi;
    const T *xp = FN(direct_src)(g, jb->in0, img, oy0, nr, jb->pl->rpu, slot, fresh, &gi);
    const T *dy = (const T *)jb->in1 + (img * g->oh + oy0) * g->ow * g->f;
    FN(direct_bwdk_band)(&gi, xp, dy, nr, acc, first);
    return xp == slot;
}

/* kr (kh, kw, f, c) = k (kh, kw, c, f) rotated by 180 degrees and transposed:
 * kr[ky][kx][fi][ci] = k[kh - 1 - ky][kw - 1 - kx][ci][fi], for the filters fi in [f0, f1).
 * With stride 1, dx is the forward convolution of dy, padded by kh - 1 - pt rows and kw - 1 -
 * pl columns before, with kr. */
static void FN(rot_k)(const conv_geom *g, const T *k, T *kr, int64_t f0, int64_t f1)
{
    const int64_t c = g->c, f = g->f;
    for (int64_t ky = 0; ky < g->kh; ky++)
        for (int64_t kx = 0; kx < g->kw; kx++) {
            const T *src = k + ((g->kh - 1 - ky) * g->kw + g->kw - 1 - kx) * c * f;
            T *dst = kr + (ky * g->kw + kx) * f * c;
            for (int64_t ci = 0; ci < c; ci++)
                for (int64_t fi = f0; fi < f1; fi++)
                    dst[fi * c + ci] = src[ci * f + fi];
        }
}

/* kp = the sub-kernels of the phases (ry, rx) in order (ry outer), each (nky, nkx, f, c) with
 * nky = phase_taps(kh, sh, ry), nkx = phase_taps(kw, sw, rx): kp[jy][jx][fi][ci] =
 * k[ry + sh * (nky - 1 - jy)][rx + sw * (nkx - 1 - jx)][ci][fi] (the phase's taps in the order
 * of the dy rows and columns they meet). kh * kw * c * f elements in all. */
static void FN(phase_k)(const conv_geom *g, const T *k, T *kp)
{
    const int64_t c = g->c, f = g->f, sh = g->sh, sw = g->sw;
    for (int64_t ry = 0; ry < sh; ry++)
        for (int64_t rx = 0; rx < sw; rx++) {
            const int64_t nky = phase_taps(g->kh, sh, ry), nkx = phase_taps(g->kw, sw, rx);
            for (int64_t jy = 0; jy < nky; jy++)
                for (int64_t jx = 0; jx < nkx; jx++, kp += f * c) {
                    const int64_t ky = ry + sh * (nky - 1 - jy), kx = rx + sw * (nkx - 1 - jx);
                    const T *src = k + (ky * g->kw + kx) * c * f;
                    for (int64_t ci = 0; ci < c; ci++)
                        for (int64_t fi = 0; fi < f; fi++)
                            kp[fi * c + ci] = src[ci * f + fi];
                }
        }
}

/* dyp (nb rows, wq, f) = dy rows [b0, b0 + nb) of image img, each starting after
 * phase_taps(kw, sw, 0) - 1 zero columns (pad_dy_rows). */
static void FN(pad_dys)(const conv_geom *g, const T *dy, int64_t img, int64_t b0, int64_t nb,
                        int64_t maxb, T *dyp, bool fresh)
{
    FN(pad_dy_rows)(g, dy, img, b0, nb, maxb, phase_taps(g->kw, g->sw, 0) - 1, dyp, fresh);
}

/* The dx pixels of phase (ry, rx) in input rows [iy0, iy0 + nr) of an image (dx: its row iy0),
 * from the band of dy rows from b0 (columns offset by ml) with the phase's sub-kernel kq. */
static CONV_VATTR void FN(bwdi_phase)(const conv_geom *g, const T *band, int64_t b0, const T *kq,
                                      T *dx, int64_t iy0, int64_t nr, int64_t ry, int64_t rx)
{
    const int64_t sh = g->sh, sw = g->sw, c = g->c, w = g->w;
    const int64_t nky = phase_taps(g->kh, sh, ry), nkx = phase_taps(g->kw, sw, rx);
    const int64_t iyf = iy0 + ((ry - (iy0 + g->pt)) % sh + sh) % sh; /* its first row, column */
    const int64_t ixf = ((rx - g->pl) % sw + sw) % sw;
    const int64_t rows = iyf < iy0 + nr ? (iy0 + nr - 1 - iyf) / sh + 1 : 0;
    const int64_t cols = ixf < w ? (w - 1 - ixf) / sw + 1 : 0;
    T *y0 = dx + ((iyf - iy0) * w + ixf) * c;
    if (nky == 0 || nkx == 0) { /* no taps: zeros (whole rows once, at rx = 0) */
        for (int64_t r = 0; r < rows; r++) {
            if (nky == 0 && rx == 0)
                memset(dx + (iyf - iy0 + r * sh) * w * c, 0, (size_t)(w * c) * sizeof(T));
            for (int64_t q = 0; q < cols && nky > 0; q++) /* a few vectors: no call */
                for (int64_t e = 0; e < c; e += VL)
                    V_MSTORE(y0 + r * sh * w * c + q * sw * c + e, FN(vmask)(c - e), V_ZERO());
        }
        return;
    }
    if (rows == 0 || cols == 0)
        return;
    const int64_t ay = (iyf + g->pt) / sh, ax = (ixf + g->pl) / sw, wq = g->wq, f = g->f;
    const int64_t ml = phase_taps(g->kw, sw, 0) - 1;
    const FN(grid) gd = {band + ((ay - (nky - 1) - b0) * wq + ax - (nkx - 1) + ml) * f,
                         wq * f,
                         f,
                         y0,
                         sh * w * c,
                         sw * c,
                         rows,
                         cols};
    conv_geom gr = *g; /* the stride-1 correlation: dy's channels in, x's out */
    gr.kh = nky, gr.kw = nkx, gr.c = f, gr.f = c, gr.wp = wq, gr.kdim = nky * nkx * f;
    gr.sh = gr.sw = 1;
    FN(direct_grid)(&gr, &gd, kq);
}

/* Strided backward-input of direct unit u (a band of input rows) by phases: the slot holds the
 * sub-kernels (phase_k), then the padded dy band (none when phase_in_place). */
static bool FN(direct_bwdi_phases)(const conv_job *jb, int64_t u, void *slot, bool fresh)
{
    const conv_geom *g = jb->g;
    int64_t img, iy0, nr;
    FN(direct_band)(jb->pl, g->h, u, &img, &iy0, &nr);
    T *kp = slot, *dyp = kp + CONV_KF_ELEMS(g);
    if (fresh)
        FN(phase_k)(g, jb->in0, kp);
    const int64_t mt = phase_taps(g->kh, g->sh, 0) - 1;
    const int64_t b0 = (iy0 + g->pt) / g->sh - mt, nb = (iy0 + nr - 1 + g->pt) / g->sh + 1 - b0;
    const T *band = dyp;
    if (phase_in_place(g))
        band = (const T *)jb->in1 + (img * g->oh + b0) * g->ow * g->f;
    else
        FN(pad_dys)(g, jb->in1, img, b0, nb, phase_band_rows(g, jb->pl->rpu), dyp, fresh);
    T *dx = (T *)jb->out + (img * g->h + iy0) * g->w * g->c;
    const T *kq = kp;
    for (int64_t ry = 0; ry < g->sh; ry++)
        for (int64_t rx = 0; rx < g->sw; rx++) {
            FN(bwdi_phase)(g, band, b0, kq, dx, iy0, nr, ry, rx);
            kq += phase_taps(g->kh, g->sh, ry) * phase_taps(g->kw, g->sw, rx) * g->c * g->f;
        }
    return true;
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
    if (g->sh != 1 || g->sw != 1)
        return FN(direct_bwdi_phases)(jb, u, slot, fresh);
    const bool rot = g->c >= VL;
    int64_t img, iy0, nr;
    FN(direct_band)(jb->pl, g->h, u, &img, &iy0, &nr);
    T *kp = slot, *dyp = kp + CONV_KF_ELEMS(g);
    if (fresh) {
        if (rot)
            FN(rot_k)(g, jb->in0, kp, 0, g->f);
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

/* ------------------------------------------ Winograd F(2x2, 5x5) and F(4x4, 3x3) */

/* The 1-d transforms of F(2, 5) with the points 0, 1, -1, 2, -1/2, infinity (see conv.c),
 * derived by Toom-Cook and checked in exact arithmetic; each is applied along both axes of a
 * tile, on vectors of VL independent lanes (channels):
 *   B^T = [2 3 -4 -3 2 0; 0 2 5 1 -2 0; 0 2 1 -5 2 0; 0 -1 -2 1 2 0; 0 -2 1 2 -1 0;
 *          0 2 3 -4 -3 2]
 *   G = [1/2 0 0 0 0; 1/6 1/6 1/6 1/6 1/6; 1/6 -1/6 1/6 -1/6 1/6;
 *        1/30 1/15 2/15 4/15 8/15; 16/15 -8/15 4/15 -2/15 1/15; 0 0 0 0 1/2]
 *   A^T = [1 1 1 1 1 0; 0 1 -1 2 -1/2 1]
 * y = A^T [(G k) . (B^T d)] is the correlation of d (6) with k (5) at two positions, and
 * dk = G^T [(A e) . (B^T d)] that of d with e (2) at five (backward-kernel).
 * r (6) = B^T d (6): the input tile. */
static inline __attribute__((always_inline)) CONV_VATTR void FN(wino_bt)(V *r, const V *d)
{
    const V c2 = V_SET1((T)2), c3 = V_SET1((T)3), c4 = V_SET1((T)4);
    const V a = V_SUB(d[1], d[3]), b = V_SUB(d[2], d[4]);
    const V s = V_FMA(c2, a, V_MUL(c3, d[2])), t = V_FMA(c2, b, V_MUL(c3, d[3]));
    r[0] = V_FMA(c2, V_ADD(d[0], d[4]), V_FNMA(c4, d[2], V_MUL(c3, a)));
    r[1] = V_ADD(s, t);
    r[2] = V_SUB(s, t);
    r[3] = V_FNMS(c2, b, a);
    r[4] = V_FNMA(c2, a, b);
    r[5] = V_FMA(c2, V_ADD(d[1], d[5]), V_FNMA(c4, d[3], V_MUL(c3, b)));
}

/* r (2) = A^T m (6): the outputs of a tile. */
static inline __attribute__((always_inline)) CONV_VATTR void FN(wino_at)(V *r, const V *m)
{
    r[0] = V_ADD(V_ADD(m[0], V_ADD(m[1], m[2])), V_ADD(m[3], m[4]));
    r[1] = V_ADD(V_FMA(V_SET1((T)2), m[3], V_FNMA(V_SET1((T)0.5), m[4], V_SUB(m[1], m[2]))), m[5]);
}

/* r (6) = A e (2): a tile of dy (backward-kernel). */
static inline __attribute__((always_inline)) CONV_VATTR void FN(wino_a)(V *r, V e0, V e1)
{
    r[0] = e0;
    r[1] = V_ADD(e0, e1);
    r[2] = V_SUB(e0, e1);
    r[3] = V_FMA(V_SET1((T)2), e1, e0);
    r[4] = V_FNMA(V_SET1((T)0.5), e1, e0);
    r[5] = e1;
}

/* r (6) = G g (5): the kernel. */
static inline __attribute__((always_inline)) CONV_VATTR void FN(wino_g)(V *r, const V *g)
{
    const V c2 = V_SET1((T)2), sixth = V_SET1((T)1 / 6);
    const V e = V_ADD(V_ADD(g[0], g[2]), g[4]), o = V_ADD(g[1], g[3]);
    V h = V_FMA(c2, V_FMA(c2, V_FMA(c2, V_FMA(c2, g[4], g[3]), g[2]), g[1]), g[0]);
    V l = V_FNMA(c2, V_FNMA(c2, V_FNMA(c2, V_FNMA(c2, g[0], g[1]), g[2]), g[3]), g[4]);
    r[0] = V_MUL(V_SET1((T)0.5), g[0]);
    r[1] = V_MUL(sixth, V_ADD(e, o));
    r[2] = V_MUL(sixth, V_SUB(e, o));
    r[3] = V_MUL(V_SET1((T)1 / 30), h);
    r[4] = V_MUL(V_SET1((T)1 / 15), l);
    r[5] = V_MUL(V_SET1((T)0.5), g[4]);
}

/* r (5) = G^T w (6): the transformed kernel gradient back to taps. */
static inline __attribute__((always_inline)) CONV_VATTR void FN(wino_gt)(V *r, const V *w)
{
    const V a = V_MUL(V_SET1((T)1 / 6), V_ADD(w[1], w[2]));
    const V b = V_MUL(V_SET1((T)1 / 6), V_SUB(w[1], w[2]));
    const V p = V_MUL(V_SET1((T)1 / 15), w[3]), q = V_MUL(V_SET1((T)1 / 15), w[4]);
    const V half = V_SET1((T)0.5), c2 = V_SET1((T)2), c4 = V_SET1((T)4), c8 = V_SET1((T)8);
    r[0] = V_FMA(half, V_ADD(w[0], p), V_FMA(V_SET1((T)16), q, a));
    r[1] = V_FNMA(c8, q, V_ADD(b, p));
    r[2] = V_FMA(c2, p, V_FMA(c4, q, a));
    r[3] = V_FMA(c4, p, V_FNMA(c2, q, b));
    r[4] = V_FMA(half, w[5], V_FMA(c8, p, V_ADD(a, q)));
}
/* F(4, 3) on the same points and the same B^T (so the input tiles of both are transformed
 * alike, only their stride differs: 4 instead of 2), also derived by Toom-Cook and checked in
 * exact arithmetic; G's rows are those of F(2, 5) cut to three taps:
 *   G = [1/2 0 0; 1/6 1/6 1/6; 1/6 -1/6 1/6; 1/30 1/15 2/15; 16/15 -8/15 4/15; 0 0 1/2]
 *   A^T = [1 1 1 1 1 0; 0 1 -1 2 -1/2 0; 0 1 1 4 1/4 0; 0 1 -1 8 -1/8 1]
 * r (4) = A^T m (6). */
static inline __attribute__((always_inline)) CONV_VATTR void FN(wino_at4)(V *r, const V *m)
{
    const V p = V_ADD(m[1], m[2]), q = V_SUB(m[1], m[2]);
    r[0] = V_ADD(V_ADD(m[0], p), V_ADD(m[3], m[4]));
    r[1] = V_FMA(V_SET1((T)2), m[3], V_FNMA(V_SET1((T)0.5), m[4], q));
    r[2] = V_FMA(V_SET1((T)4), m[3], V_FMA(V_SET1((T)0.25), m[4], p));
    r[3] = V_ADD(V_FMA(V_SET1((T)8), m[3], V_FNMA(V_SET1((T)0.125), m[4], q)), m[5]);
}

/* r (6) = A e (4): a 4-element column or row of a dy block (backward-kernel). */
static inline __attribute__((always_inline)) CONV_VATTR void FN(wino_a4)(V *r, const V *e)
{
    const V s = V_ADD(e[0], e[2]), t = V_ADD(e[1], e[3]);
    r[0] = e[0];
    r[1] = V_ADD(s, t);
    r[2] = V_SUB(s, t);
    r[3] = V_FMA(V_SET1((T)8), e[3], V_FMA(V_SET1((T)4), e[2], V_FMA(V_SET1((T)2), e[1], e[0])));
    r[4] = V_FNMA(V_SET1((T)0.125), e[3],
                  V_FMA(V_SET1((T)0.25), e[2], V_FNMA(V_SET1((T)0.5), e[1], e[0])));
    r[5] = e[3];
}

/* r (6) = G g (3): the kernel of F(4, 3). */
static inline __attribute__((always_inline)) CONV_VATTR void FN(wino_g3)(V *r, const V *g)
{
    const V sixth = V_SET1((T)1 / 6), e = V_ADD(g[0], g[2]);
    r[0] = V_MUL(V_SET1((T)0.5), g[0]);
    r[1] = V_MUL(sixth, V_ADD(e, g[1]));
    r[2] = V_MUL(sixth, V_SUB(e, g[1]));
    r[3] = V_MUL(V_SET1((T)1 / 30), V_FMA(V_SET1((T)4), g[2], V_FMA(V_SET1((T)2), g[1], g[0])));
    r[4] = V_MUL(V_SET1((T)4 / 15), V_FMA(V_SET1((T)4), g[0], V_FNMA(V_SET1((T)2), g[1], g[2])));
    r[5] = V_MUL(V_SET1((T)0.5), g[2]);
}

/* r (3) = G^T w (6): F(4, 3)'s transformed kernel gradient back to taps. */
static inline __attribute__((always_inline)) CONV_VATTR void FN(wino_gt3)(V *r, const V *w)
{
    const V a = V_MUL(V_SET1((T)1 / 6), V_ADD(w[1], w[2]));
    const V b = V_MUL(V_SET1((T)1 / 6), V_SUB(w[1], w[2]));
    const V p = V_MUL(V_SET1((T)1 / 15), w[3]), q = V_MUL(V_SET1((T)4 / 15), w[4]);
    r[0] = V_FMA(V_SET1((T)0.5), V_ADD(w[0], p), V_FMA(V_SET1((T)4), q, a));
    r[1] = V_FNMA(V_SET1((T)2), q, V_ADD(b, p));
    r[2] = V_FMA(V_SET1((T)0.5), w[5], V_FMA(V_SET1((T)2), p, V_ADD(a, q)));
}

/* The 1-d kernel transform and its adjoint for r = 5 (F(2, 5)) or 3 (F(4, 3)); the output
 * transform A^T and the dy transform A for m = 2 or 4 outputs. */
static inline __attribute__((always_inline)) CONV_VATTR void FN(wino_gr)(V *o, const V *g,
                                                                         const int r)
{
    if (r == 5)
        FN(wino_g)(o, g);
    else
        FN(wino_g3)(o, g);
}

static inline __attribute__((always_inline)) CONV_VATTR void FN(wino_gtr)(V *o, const V *w,
                                                                          const int r)
{
    if (r == 5)
        FN(wino_gt)(o, w);
    else
        FN(wino_gt3)(o, w);
}

static inline __attribute__((always_inline)) CONV_VATTR void FN(wino_atm)(V *o, const V *mm,
                                                                          const int m)
{
    if (m == 2)
        FN(wino_at)(o, mm);
    else
        FN(wino_at4)(o, mm);
}

static inline __attribute__((always_inline)) CONV_VATTR void FN(wino_am)(V *o, const V *e,
                                                                         const int m)
{
    if (m == 2)
        FN(wino_a)(o, e[0], e[1]);
    else
        FN(wino_a4)(o, e);
}

/* u (36, cin, cout) = G g G^T for every (cin, cout) pair of k (r, r, cin, cout): matrix xi =
 * 6 i + j of the transformed 6x6 kernels, us elements apart. Inlined with r constant. */
static inline __attribute__((always_inline)) CONV_VATTR void
FN(wino_kernel_r)(const T *k, int64_t cin, int64_t cout, int64_t us, T *u, int64_t c0, int64_t c1,
                  const int r)
{
    for (int64_t ci = c0; ci < c1; ci++)
        for (int64_t f0 = 0; f0 < cout; f0 += VL) {
            const VMASK m = FN(vmask)(cout - f0);
            V t[6][5];
#pragma GCC unroll 5
            for (int kx = 0; kx < r; kx++) {
                V g[5], o[6];
#pragma GCC unroll 5
                for (int ky = 0; ky < r; ky++)
                    g[ky] = V_MLOAD(m, k + ((ky * r + kx) * cin + ci) * cout + f0);
                FN(wino_gr)(o, g, r);
#pragma GCC unroll 6
                for (int i = 0; i < 6; i++)
                    t[i][kx] = o[i];
            }
#pragma GCC unroll 6
            for (int i = 0; i < 6; i++) {
                V o[6];
                FN(wino_gr)(o, t[i], r);
#pragma GCC unroll 6
                for (int j = 0; j < 6; j++)
                    V_MSTORE(u + (i * 6 + j) * us + ci * cout + f0, m, o[j]);
            }
        }
}

/* The same for the input channels [c0, c1) of k. */
static CONV_VATTR void FN(wino_kernel)(const T *k, int64_t r, int64_t cin, int64_t cout, int64_t us,
                                       T *u, int64_t c0, int64_t c1)
{
    if (r == 5)
        FN(wino_kernel_r)(k, cin, cout, us, u, c0, c1, 5);
    else
        FN(wino_kernel_r)(k, cin, cout, us, u, c0, c1, 3);
}

/* v (36, nt, c; matrices vs elements apart) = B^T d B of tiles [t0, t0 + nt) of a band: tile t
 * (tile row t / tw, column t % tw) is the 6x6 window of the padded band xp (rows of wp * c) at
 * (m (t / tw), m (t % tw)), m = 2 (F(2x2, 5x5)) or 4 (F(4x4, 3x3)). */
static CONV_VATTR void FN(wino_in)(const T *xp, int64_t wp, int64_t c, int64_t m, int64_t tw,
                                   int64_t t0, int64_t nt, int64_t vs, T *v)
{
    for (int64_t q = 0; q < nt; q++) {
        const int64_t ty = (t0 + q) / tw, tx = (t0 + q) % tw;
        const T *base = xp + (m * ty * wp + m * tx) * c;
        for (int64_t c0 = 0; c0 < c; c0 += VL) {
            const VMASK mk = FN(vmask)(c - c0);
            V t[6][6];
#pragma GCC unroll 6
            for (int j = 0; j < 6; j++) {
                V d[6], r[6];
#pragma GCC unroll 6
                for (int i = 0; i < 6; i++)
                    d[i] = V_MLOAD(mk, base + (i * wp + j) * c + c0);
                FN(wino_bt)(r, d);
#pragma GCC unroll 6
                for (int i = 0; i < 6; i++)
                    t[i][j] = r[i];
            }
#pragma GCC unroll 6
            for (int i = 0; i < 6; i++) {
                V r[6];
                FN(wino_bt)(r, t[i]);
#pragma GCC unroll 6
                for (int j = 0; j < 6; j++)
                    V_MSTORE(v + (i * 6 + j) * vs + q * c + c0, mk, r[j]);
            }
        }
    }
}

/* The outputs of tiles [t0, t0 + nt) of a band of nr output rows of width ow: A^T M A of each
 * tile's products mm (36, nt, f; matrices ms elements apart), written to rows m ty .. m ty +
 * m - 1 and columns m tx .. m tx + m - 1 of y (the band's first row) where they exist. Inlined
 * with m constant. */
static inline __attribute__((always_inline)) CONV_VATTR void
FN(wino_out_m)(const T *mm, int64_t f, int64_t tw, int64_t ow, int64_t nr, int64_t t0, int64_t nt,
               int64_t ms, T *y, bool stream, const int m)
{
    for (int64_t q = 0; q < nt; q++) {
        const int64_t ty = (t0 + q) / tw, tx = (t0 + q) % tw;
        const int64_t rows = nr - m * ty < m ? nr - m * ty : m;
        const int64_t cols = ow - m * tx < m ? ow - m * tx : m;
        T *yt = y + (m * ty * ow + m * tx) * f;
        for (int64_t f0 = 0; f0 < f; f0 += VL) {
            const VMASK mk = FN(vmask)(f - f0);
            V s[4][6];
#pragma GCC unroll 6
            for (int j = 0; j < 6; j++) {
                V col[6], r[4];
#pragma GCC unroll 6
                for (int i = 0; i < 6; i++)
                    col[i] = V_MLOAD(mk, mm + (i * 6 + j) * ms + q * f + f0);
                FN(wino_atm)(r, col, m);
#pragma GCC unroll 4
                for (int a = 0; a < m; a++)
                    s[a][j] = r[a];
            }
#pragma GCC unroll 4
            for (int a = 0; a < m; a++) {
                V r[4];
                FN(wino_atm)(r, s[a], m);
                if (a < rows && stream && f0 + VL <= f) {
#pragma GCC unroll 4
                    for (int b = 0; b < m; b++)
                        if (b < cols)
                            V_STREAM(yt + (a * ow + b) * f + f0, r[b]);
                } else if (a < rows) {
#pragma GCC unroll 4
                    for (int b = 0; b < m; b++)
                        if (b < cols)
                            V_MSTORE(yt + (a * ow + b) * f + f0, mk, r[b]);
                }
            }
        }
    }
}

static CONV_VATTR void FN(wino_out)(const T *mm, int64_t f, int64_t m, int64_t tw, int64_t ow,
                                    int64_t nr, int64_t t0, int64_t nt, int64_t ms, T *y,
                                    bool stream)
{
    if (m == 2)
        FN(wino_out_m)(mm, f, tw, ow, nr, t0, nt, ms, y, stream, 2);
    else
        FN(wino_out_m)(mm, f, tw, ow, nr, t0, nt, ms, y, stream, 4);
}

/* d (36, nt, f; matrices ds elements apart) = A e A^T of the m x m blocks e of dy (rows m ty ..
 * m ty + m - 1 and columns m tx .. m tx + m - 1 from the band's first row dy; zero beyond its nr
 * rows or ow columns) of tiles [t0, t0 + nt). Inlined with m constant. */
static inline __attribute__((always_inline)) CONV_VATTR void
FN(wino_dy_m)(const T *dy, int64_t f, int64_t tw, int64_t ow, int64_t nr, int64_t t0, int64_t nt,
              int64_t ds, T *d, const int m)
{
    for (int64_t q = 0; q < nt; q++) {
        const int64_t ty = (t0 + q) / tw, tx = (t0 + q) % tw;
        const int64_t rows = nr - m * ty < m ? nr - m * ty : m;
        const int64_t cols = ow - m * tx < m ? ow - m * tx : m;
        const T *et = dy + (m * ty * ow + m * tx) * f;
        for (int64_t f0 = 0; f0 < f; f0 += VL) {
            const VMASK mk = FN(vmask)(f - f0);
            V e[4][6]; /* e[b] = A (column b of the block) */
#pragma GCC unroll 4
            for (int b = 0; b < m; b++) {
                V col[4];
#pragma GCC unroll 4
                for (int a = 0; a < m; a++)
                    col[a] =
                        b < cols && a < rows ? V_MLOAD(mk, et + (a * ow + b) * f + f0) : V_ZERO();
                FN(wino_am)(e[b], col, m);
            }
#pragma GCC unroll 6
            for (int k = 0; k < 6; k++) {
                V row[4], r[6];
#pragma GCC unroll 4
                for (int b = 0; b < m; b++)
                    row[b] = e[b][k];
                FN(wino_am)(r, row, m);
#pragma GCC unroll 6
                for (int l = 0; l < 6; l++)
                    V_MSTORE(d + (k * 6 + l) * ds + q * f + f0, mk, r[l]);
            }
        }
    }
}

static CONV_VATTR void FN(wino_dy)(const T *dy, int64_t f, int64_t m, int64_t tw, int64_t ow,
                                   int64_t nr, int64_t t0, int64_t nt, int64_t ds, T *d)
{
    if (m == 2)
        FN(wino_dy_m)(dy, f, tw, ow, nr, t0, nt, ds, d, 2);
    else
        FN(wino_dy_m)(dy, f, tw, ow, nr, t0, nt, ds, d, 4);
}

/* dk (r, r, c, f) rows ci in [c0, c1) = G^T w G, w (36, c, f; matrices us elements apart) the
 * sum of the np partial sums at w0 (ps elements apart), added in order. Inlined with r
 * constant. */
static inline __attribute__((always_inline)) CONV_VATTR void
FN(wino_kgrad_r)(const T *w0, int64_t np, size_t ps, int64_t us, int64_t c, int64_t f, int64_t c0,
                 int64_t c1, T *dk, const int r)
{
    for (int64_t ci = c0; ci < c1; ci++)
        for (int64_t f0 = 0; f0 < f; f0 += VL) {
            const VMASK m = FN(vmask)(f - f0);
            V s[5][6];
#pragma GCC unroll 6
            for (int j = 0; j < 6; j++) {
                V col[6], o[5];
#pragma GCC unroll 6
                for (int i = 0; i < 6; i++) {
                    const T *p = w0 + (i * 6 + j) * us + ci * f + f0;
                    col[i] = V_MLOAD(m, p);
                    for (int64_t g = 1; g < np; g++)
                        col[i] = V_ADD(col[i], V_MLOAD(m, p + (size_t)g * ps));
                }
                FN(wino_gtr)(o, col, r);
#pragma GCC unroll 5
                for (int ky = 0; ky < r; ky++)
                    s[ky][j] = o[ky];
            }
#pragma GCC unroll 5
            for (int ky = 0; ky < r; ky++) {
                V o[5];
                FN(wino_gtr)(o, s[ky], r);
#pragma GCC unroll 5
                for (int kx = 0; kx < r; kx++)
                    V_MSTORE(dk + ((ky * r + kx) * c + ci) * f + f0, m, o[kx]);
            }
        }
}

static CONV_VATTR void FN(wino_kgrad)(const T *w0, int64_t np, size_t ps, int64_t us, int64_t c,
                                      int64_t f, int64_t r, int64_t c0, int64_t c1, T *dk)
{
    if (r == 5)
        FN(wino_kgrad_r)(w0, np, ps, us, c, f, c0, c1, dk, 5);
    else
        FN(wino_kgrad_r)(w0, np, ps, us, c, f, c0, c1, dk, 3);
}
/* One register tile of c (nr, nv vectors) = a (nr, k; rows lda apart) @ b (k, nv vectors; rows
 * ldb apart): per step of k, nv vectors of b are loaded once and each row's element of a is
 * broadcast against them. Inlined with nr and nv constant; only the last vector is masked (m). */
static inline __attribute__((always_inline)) CONV_VATTR void
FN(wgemm_tile)(const T *a, int64_t lda, const T *b, int64_t ldb, T *c, int64_t ldc, int64_t k,
               VMASK m, const int nr, const int nv)
{
    V acc[12][4];
#pragma GCC unroll 12
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[i][v] = V_ZERO();
    for (int64_t kk = 0; kk < k; kk++, a++, b += ldb) {
        V bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            bv[v] = v + 1 < nv ? V_LOAD(b + v * VL) : V_MLOAD(m, b + v * VL);
#pragma GCC unroll 12
        for (int i = 0; i < nr; i++) {
            const V x = V_SET1(a[i * lda]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                acc[i][v] = V_FMA(x, bv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            V_MSTORE(c + i * ldc + v * VL, v + 1 < nv ? (VMASK) ~(VMASK)0 : m, acc[i][v]);
}

/* c (rows, n) = a (rows, k) @ b (k, n), all row-major with rows lda, ldb, ldc apart: one of the
 * 36 GEMMs of a forward block (rows: tiles, k: input channels, n: filters). Register tiles of
 * nv <= 4 vectors by near-equal row counts of at most 24 / nv (2 vectors or fewer: 12): about
 * 24 accumulators. */
static CONV_VATTR void FN(wgemm)(const T *a, int64_t lda, const T *b, int64_t ldb, T *c,
                                 int64_t ldc, int64_t rows, int64_t k, int64_t n)
{
    for (int64_t f0 = 0; f0 < n; f0 += 4 * VL) {
        const int64_t fl = n - f0 < 4 * VL ? n - f0 : 4 * VL;
        const int nv = (int)((fl + VL - 1) / VL);
        const VMASK m = FN(vmask)(fl - (nv - 1) * VL);
        const int64_t rmax = nv <= 2 ? 12 : 24 / nv, nblk = (rows + rmax - 1) / rmax;
        for (int64_t i = 0, r0 = 0; i < nblk; i++) {
            const int nr = (int)((rows - r0) / (nblk - i));
            const T *ai = a + r0 * lda;
            T *ci = c + r0 * ldc + f0;
            switch (nv * 16 + nr) {
#define CONV_WG_CASE(v, r)                                                                         \
    case v * 16 + r:                                                                               \
        FN(wgemm_tile)(ai, lda, b + f0, ldb, ci, ldc, k, m, r, v);                                 \
        break;
#define CONV_WG_CASES6(v)                                                                          \
    CONV_WG_CASE(v, 1)                                                                             \
    CONV_WG_CASE(v, 2)                                                                             \
    CONV_WG_CASE(v, 3) CONV_WG_CASE(v, 4) CONV_WG_CASE(v, 5) CONV_WG_CASE(v, 6)
#define CONV_WG_CASES8(v) CONV_WG_CASES6(v) CONV_WG_CASE(v, 7) CONV_WG_CASE(v, 8)
#define CONV_WG_CASES12(v)                                                                         \
    CONV_WG_CASES8(v) CONV_WG_CASE(v, 9) CONV_WG_CASE(v, 10) CONV_WG_CASE(v, 11) CONV_WG_CASE(v, 12)
                CONV_WG_CASES12(1)
                CONV_WG_CASES12(2)
                CONV_WG_CASES8(3)
                CONV_WG_CASES6(4)
#undef CONV_WG_CASES12
#undef CONV_WG_CASES8
#undef CONV_WG_CASES6
#undef CONV_WG_CASE
            default:
                break;
            }
            r0 += nr;
        }
    }
}

/* The geometry of the 1x1 convolution that is one of the 36 GEMMs of a block of nt tiles:
 * pixels = tiles, c input channels, f filters (the direct kernels run it). */
static inline conv_geom FN(wino_gemm_geom)(int64_t c, int64_t f, int64_t nt)
{
    conv_geom g1 = {0};
    g1.n = 1, g1.h = 1, g1.w = nt, g1.c = c;
    g1.kh = g1.kw = 1, g1.f = f;
    g1.oh = 1, g1.ow = nt, g1.sh = g1.sw = 1;
    g1.kdim = c, g1.wp = nt, g1.wq = nt;
    return g1;
}

/* The images and rows of Winograd unit u of a pass with `rows` output rows per image: ipu
 * whole images from *img (the last unit may hold fewer), or one band of one image. */
static inline void FN(wino_unit)(const conv_plan *pl, const conv_geom *gf, int64_t u, int64_t *img,
                                 int64_t *nimg, int64_t *r0, int64_t *nr)
{
    if (pl->bands == 1) {
        *img = u * pl->ipu;
        *nimg = gf->n - *img < pl->ipu ? gf->n - *img : pl->ipu;
        *r0 = 0, *nr = gf->oh;
    } else {
        *nimg = 1;
        FN(direct_band)(pl, gf->oh, u, img, r0, nr);
    }
}

/* Forward and backward-input (stride 1, 5x5 or 3x3): the kernel was transformed into u (36, c,
 * f) at the start of the workspace (wino_prep); the unit pads its band of the source (x, or dy
 * for backward-input: the forward pass of wino_geom), or each of its images, then per block of
 * tb tiles (in image order; a block may span images) transforms the tiles, runs the 36 GEMMs
 * m_xi (nt, f) = v_xi (nt, c) @ u_xi (c, f), and transforms back. Each tile's sums are the same
 * whatever block it falls into. Returns whether the slot holds a full unit's padding zeros. */
static bool FN(wino_fwd_common)(const conv_job *jb, int64_t u, void *slot, bool fresh, bool bwdi)
{
    const conv_plan *pl = jb->pl;
    const conv_geom gf = wino_geom(jb->g, bwdi);
    const int64_t c = gf.c, f = gf.f, ow = gf.ow, m = wino_m(&gf), tw = (ow + m - 1) / m;
    const int64_t tb = pl->tb, vs = wino_ld(tb * c, sizeof(T)), ms = wino_ld(tb * f, sizeof(T));
    const int64_t us = wino_ld(c * f, sizeof(T)), be = wino_band_elems(&gf, pl->rpu);
    int64_t img, nimg, r0, nr;
    FN(wino_unit)(pl, &gf, u, &img, &nimg, &r0, &nr);
    T *xp = slot, *v = xp + pl->ipu * be, *mm = v + 36 * vs;
    const int64_t rr = (nr + m - 1) / m * m, rmax = (pl->rpu + m - 1) / m * m;
    for (int64_t i = 0; i < nimg; i++)
        FN(pad_x)(&gf, bwdi ? jb->in1 : jb->in0, img + i, r0, rr, rmax, xp + i * be, fresh);
    const T *uk = (const T *)(const void *)pl->ws;
    const int64_t ti = rr / m * tw, ntiles = nimg * ti, nb = (ntiles + tb - 1) / tb;
    for (int64_t b = 0, t0 = 0, nt; b < nb; b++, t0 += nt) { /* near-equal blocks */
        nt = (ntiles - t0) / (nb - b);
        for (int64_t q = 0, k; q < nt; q += k) { /* the block's run of tiles of each image */
            const int64_t i = (t0 + q) / ti, lt = (t0 + q) % ti;
            k = ti - lt < nt - q ? ti - lt : nt - q;
            FN(wino_in)(xp + i * be, gf.wp, c, m, tw, lt, k, vs, v + q * c);
        }
        for (int64_t xi = 0; xi < 36; xi++)
            FN(wgemm)(v + xi * vs, c, uk + xi * us, f, mm + xi * ms, f, nt, c, f);
        for (int64_t q = 0, k; q < nt; q += k) {
            const int64_t i = (t0 + q) / ti, lt = (t0 + q) % ti;
            k = ti - lt < nt - q ? ti - lt : nt - q;
            T *y = (T *)jb->out + ((img + i) * gf.oh + r0) * ow * f;
            FN(wino_out)(mm + q * f, f, m, tw, ow, nr, lt, k, ms, y, jb->stream);
        }
    }
    if (jb->stream) /* the streamed stores are visible before the unit counts as done */
        _mm_sfence();
    return !fresh || nimg == pl->ipu;
}

static bool FN(wino_fwd_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                              bool first)
{
    (void)acc, (void)first;
    return FN(wino_fwd_common)(jb, u, slot, fresh, false);
}

static bool FN(wino_bwdi_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                               bool first)
{
    (void)acc, (void)first;
    return FN(wino_fwd_common)(jb, u, slot, fresh, true);
}

/* Backward-kernel (stride 1, 5x5 or 3x3): acc (36, c, f) (+)= per block of tb tiles of the unit's
 * band or images (a block may span images), the 36 GEMMs v_xi (nt, c)^T @ d_xi (nt, f) of the
 * transformed x tiles and dy blocks; the group sums go back to taps at the end (wino_finish). */
static bool FN(wino_bwdk_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                               bool first)
{
    const conv_plan *pl = jb->pl;
    const conv_geom gf = wino_geom(jb->g, false);
    const int64_t c = gf.c, f = gf.f, ow = gf.ow, m = wino_m(&gf), tw = (ow + m - 1) / m;
    const int64_t tb = pl->tb, vs = wino_ld(tb * c, sizeof(T)), ds = wino_ld(tb * f, sizeof(T));
    const int64_t us = wino_ld(c * f, sizeof(T)), be = wino_band_elems(&gf, pl->rpu);
    int64_t img, nimg, r0, nr;
    FN(wino_unit)(pl, &gf, u, &img, &nimg, &r0, &nr);
    T *xp = slot, *v = xp + pl->ipu * be, *d = v + 36 * vs;
    const int64_t rr = (nr + m - 1) / m * m, rmax = (pl->rpu + m - 1) / m * m;
    const T *dy = (const T *)jb->in1 + (img * gf.oh + r0) * ow * f;
    /* the unit's dy rows are read m at a time, tile by tile: ask for all of them now, while
     * the x tiles are transformed (whole images follow one another in dy) */
    for (int64_t i = 0; i < nimg * nr * ow * f; i += 64 / (int64_t)sizeof(T))
        __builtin_prefetch(dy + i, 0, 3);
    for (int64_t i = 0; i < nimg; i++)
        FN(pad_x)(&gf, jb->in0, img + i, r0, rr, rmax, xp + i * be, fresh);
    T *w = acc;
    const int64_t ti = rr / m * tw, ntiles = nimg * ti, nb = (ntiles + tb - 1) / tb;
    for (int64_t b = 0, t0 = 0, nt; b < nb; b++, t0 += nt) { /* near-equal blocks */
        nt = (ntiles - t0) / (nb - b);
        for (int64_t q = 0, k; q < nt; q += k) { /* the block's run of tiles of each image */
            const int64_t i = (t0 + q) / ti, lt = (t0 + q) % ti;
            k = ti - lt < nt - q ? ti - lt : nt - q;
            FN(wino_in)(xp + i * be, gf.wp, c, m, tw, lt, k, vs, v + q * c);
            FN(wino_dy)(dy + i * gf.oh * ow * f, f, m, tw, ow, nr, lt, k, ds, d + q * f);
        }
        const conv_geom g1 = FN(wino_gemm_geom)(c, f, nt);
        for (int64_t xi = 0; xi < 36; xi++)
            FN(direct_bwdk_band)(&g1, v + xi * vs, d + xi * ds, 1, w + xi * us, first && t0 == 0);
    }
    return !fresh || nimg == pl->ipu;
}

/* Before the units of forward or backward-input: the transformed kernel at the start of the
 * workspace (backward-input: of the rotated kernel, built just after it), its input channels
 * (backward-input: the filters) split over threads; each element is computed alone, so the
 * split leaves the bits alone. */
typedef struct FN(wprep_ctx) {
    const conv_job *jb;
    bool bwdi;
} FN(wprep_ctx);

static void FN(wino_prep_chans)(void *ctx, int64_t c0, int64_t c1)
{
    const FN(wprep_ctx) *w = ctx;
    const conv_geom *g = w->jb->g;
    T *uk = (T *)(void *)w->jb->pl->ws;
    const int64_t us = wino_ld(g->c * g->f, sizeof(T));
    if (!w->bwdi) {
        FN(wino_kernel)(w->jb->in1, g->kh, g->c, g->f, us, uk, c0, c1);
        return;
    }
    T *kr = uk + wino_u_elems(g, sizeof(T));
    FN(rot_k)(g, w->jb->in0, kr, c0, c1);
    FN(wino_kernel)(kr, g->kh, g->f, g->c, us, uk, c0, c1);
}

static void FN(wino_prep)(const conv_job *jb, bool bwdi)
{
    const conv_geom *g = jb->g;
    FN(wprep_ctx) w = {jb, bwdi};
    const int64_t cin = bwdi ? g->f : g->c;
    if (36 * g->c * g->f >= SX_PAR_MIN)
        sx__par_range(cin, 1, FN(wino_prep_chans), &w);
    else
        FN(wino_prep_chans)(&w, 0, cin);
}

/* After the units of backward-kernel: dk = G^T (the group partials, summed in order) G, the
 * input channels split over threads. */
typedef struct FN(wfin_ctx) {
    const conv_job *jb;
    const void *parts;
    int64_t groups;
    size_t pstride;
} FN(wfin_ctx);

static void FN(wino_finish_chans)(void *ctx, int64_t c0, int64_t c1)
{
    const FN(wfin_ctx) *w = ctx;
    const conv_geom *g = w->jb->g;
    const int64_t c = g->c, f = g->f;
    FN(wino_kgrad)
    (w->parts, w->groups, w->pstride, wino_ld(c * f, sizeof(T)), c, f, g->kh, c0, c1, w->jb->out);
}

static void FN(wino_finish)(const conv_job *jb, const void *parts, int64_t groups, size_t pstride)
{
    const conv_geom *g = jb->g;
    FN(wfin_ctx) w = {jb, parts, groups, pstride};
    if (36 * g->c * g->f * groups >= SX_PAR_MIN)
        sx__par_range(g->c, 1, FN(wino_finish_chans), &w);
    else
        FN(wino_finish_chans)(&w, 0, g->c);
}

#endif /* V_FMA */

#undef FN
#undef CONV_CAT
#undef CONV_CAT_
