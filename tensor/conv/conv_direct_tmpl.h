/* conv_direct_tmpl.h: the direct kernels of the dense convolution (tensor/conv/conv_direct.c),
 * written once over simd.h's vectors and included (by conv_vec.h) once per instruction set and
 * dtype. They keep a tile of results in vector registers (its size set by the set's register count)
 * and read a zero-padded copy of one band of the image, so no tap ever tests a border. Every unit
 * function works on one unit and is called by one thread; the sums never depend on the thread
 * count. */
#define CONV_CAT_(a, b) a##_##b
#define CONV_CAT(a, b) CONV_CAT_(a, b)
#define FN(name) CONV_CAT(name, SFX)

/* Pixels per forward tile of nv vectors of filters over a grid of npix pixels: at most
 * CONV_TILE(nv), or up to a quarter fewer (one fewer below 12) when that wastes fewer of the
 * last tile's slots (a 7x7 grid in tiles of 12: 5 tiles of 10 pixels instead of 5 of 12, 18%
 * fewer multiplies; a pixel's sum is the same in any tile). CONV_FP_CASES lists the results. */
static inline int64_t FN(tile_pixels)(int64_t npix, int nv)
{
    const int64_t top = CONV_TILE(nv), low = top >= 12 ? top - 3 : top - 1;
    int64_t best = top;
    for (int64_t np = top - 1; np >= low; np--)
        if ((npix + np - 1) / np * np < (npix + best - 1) / best * best)
            best = np;
    return best;
}

/* xp ((nrows - 1) * sh + kh rows, wp, c) = the zero-padded rows of image img that output rows
 * [oy0, oy0 + nrows) read: padded row r is input row oy0 * sh + r - pt, padded column j is
 * input column j - pl. `fresh` (first use of the slot in this call) zeroes the buffer for the
 * tallest band, maxrows output rows; afterwards the margins stay zero, and only rows that fall
 * outside x are cleared again. */
void FN(sx__conv_pad_x)(const conv_geom *g, const T *x, int64_t img, int64_t oy0, int64_t nrows,
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
    FN(sx__conv_pad_x)(g, x, img, oy0, nrows, maxrows, slot, fresh);
    return slot;
}

/* One forward tile: np pixels (bases xq) by nv vectors of filters (only the last one masked, m),
 * summed over every tap; inlined with np and nv constant so that the accumulators live in
 * registers. Only the first `real` pixels are stored. Masked moves are slow on some CPUs (AVX2's
 * vmaskmov on AMD's cores; NEON has none), so the last vector is read whole for the first
 * `kfull` taps (whose row of k is followed by at least a vector's worth of k: the extra lanes sum
 * products that are never stored) and stored whole for the first `yfull` pixels (whose extra
 * lanes fall on later pixels of the grid, which overwrite them: see direct_grid). */
static inline __attribute__((always_inline)) VATTR void
FN(fwd_tile)(const conv_geom *g, const T *const *xq, const T *k, T *const *yq, VMASK m,
             int64_t real, int64_t kfull, int64_t yfull, const int np, const int nv)
{
    const int64_t c = g->c, f = g->f, wp = g->wp;
    V a[CONV_TILE_MAX][4];
#pragma GCC unroll 12
    for (int p = 0; p < np; p++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            a[p][v] = V_ZERO();
    const T *kt = k;
    for (int64_t ky = 0, t = 0; ky < g->kh; ky++)
        for (int64_t j = 0; j < g->kw * c; j++, t++, kt += f) {
            const int64_t o = ky * wp * c + j; /* tap (ky, kx = j / c, ci = j % c) */
            V kv[4];
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                kv[v] = v + 1 < nv || t < kfull ? V_LOAD(kt + v * VL) : V_MLOAD(m, kt + v * VL);
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
            for (int v = 0; v < nv; v++) {
                if (v + 1 < nv || p < yfull)
                    V_STORE(yq[p] + v * VL, a[p][v]);
                else
                    V_MSTORE(yq[p] + v * VL, m, a[p][v]);
            }
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
 * by nv vectors of filters (tile_pixels: up to CONV_TILE(nv), about CONV_ACC accumulators), the
 * pixel's tap values broadcast from the band. A tile may span grid rows (each pixel has its own
 * pointers); the last tile repeats its last pixel and stores only the real ones. When all the
 * filters are one chunk and the grid's results are contiguous (a band of the forward pass), the
 * pixels are stored in order and a whole last vector spills only onto later pixels' results:
 * every pixel but those within a vector of the grid's end stores it whole. */
static VATTR void FN(direct_grid)(const conv_geom *g, const FN(grid) * gd, const T *k)
{
    const int64_t f = g->f, pw = gd->ncols, npix = gd->nrows * pw, krows = g->kh * g->kw * g->c;
    const bool dense = f <= CONV_NVMAX * VL && gd->yc == f && gd->yr == pw * f;
    for (int64_t f0 = 0; f0 < f; f0 += CONV_NVMAX * VL) {
        const int64_t fl = f - f0 < CONV_NVMAX * VL ? f - f0 : CONV_NVMAX * VL;
        const int nv = (int)((fl + VL - 1) / VL);
        const VMASK m = V_MASK_N(fl - (nv - 1) * VL);
        const int64_t np = FN(tile_pixels)(npix, nv);
        /* taps t with t * f + f0 + nv * VL <= krows * f, pixels i with i * f + nv * VL <= npix * f
         */
        const int64_t kr = krows * f - f0 - nv * VL, yr = npix * f - nv * VL;
        const int64_t kfull = kr < 0 ? 0 : kr / f + 1, yfull = !dense || yr < 0 ? 0 : yr / f + 1;
        for (int64_t q0 = 0; q0 < npix; q0 += np) {
            const T *xq[CONV_TILE_MAX];
            T *yq[CONV_TILE_MAX];
            for (int64_t p = 0, r = q0 / pw, q = q0 % pw; p < np; p++) {
                xq[p] = gd->x0 + r * gd->xr + q * gd->xc;
                yq[p] = gd->y0 + r * gd->yr + q * gd->yc + f0;
                if (q0 + p + 1 < npix && ++q == pw) /* the last pixel repeats */
                    q = 0, r++;
            }
            const T *kf = k + f0;
            switch (nv * 16 + np) { /* the cases tile_pixels chooses from */
#define CONV_FP_CASE(v, n)                                                                         \
    case v * 16 + n:                                                                               \
        FN(fwd_tile)(g, xq, kf, yq, m, npix - q0, kfull, yfull - q0, n, v);                        \
        break;
                CONV_FP_CASES(CONV_FP_CASE)
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
static inline __attribute__((always_inline)) VATTR void
FN(bwdk_tile)(const conv_geom *g, const T *xp, int64_t o0, const T *dy, int64_t nrows, VMASK m,
              int64_t dfull, T *dk, bool first, const int nt, const int nv)
{
    const int64_t c = g->c, f = g->f, ow = g->ow, wp = g->wp, xs = g->sw * c;
    V a[CONV_TILE_MAX][4];
#pragma GCC unroll 12
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            a[t][v] = V_ZERO();
    for (int64_t oy = 0; oy < nrows; oy++) {
        const T *xr = xp + oy * g->sh * wp * c + o0;
        const T *dr = dy + oy * ow * f;
        for (int64_t ox = 0; ox < ow; ox++, xr += xs, dr += f) {
            const bool whole = oy * ow + ox < dfull;
            V d[4];
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                d[v] = v + 1 < nv || whole ? V_LOAD(dr + v * VL) : V_MLOAD(m, dr + v * VL);
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
            const VMASK mv = v + 1 < nv ? V_MASK_ALL : m;
            if (!first)
                a[t][v] = V_ADD(a[t][v], V_MLOAD(mv, d));
            V_MSTORE(d, mv, a[t][v]);
        }
}

/* dk (kdim, f) (+)= sum over the pixels of one band of x taps (outer) dy. The filters are cut
 * into chunks of nv <= CONV_NVMAX vectors (only the last one partial), each kernel row's taps into
 * near-equal tiles of at most CONV_TILE(nv) taps: about CONV_ACC accumulators. */
VATTR void FN(sx__conv_direct_bwdk_band)(const conv_geom *g, const T *xp, const T *dy,
                                         int64_t nrows, T *dk, bool first)
{
    const int64_t c = g->c, f = g->f, wp = g->wp, run = g->kw * c;
    for (int64_t f0 = 0; f0 < f; f0 += CONV_NVMAX * VL) {
        const int64_t fl =
            f - f0 < CONV_NVMAX * VL ? f - f0 : CONV_NVMAX * VL; /* filters in this chunk */
        const int nv = (int)((fl + VL - 1) / VL);
        const VMASK m = V_MASK_N(fl - (nv - 1) * VL);
        const int64_t ntmax = CONV_TILE(nv);
        const int64_t ntiles = (run + ntmax - 1) / ntmax;
        /* pixels whose last vector of dy may be read whole (see fwd_tile): i f + f0 + nv VL
         * within the band's dy; the extra lanes' sums are never stored */
        const int64_t dr = nrows * g->ow * f - f0 - nv * VL, dfull = dr < 0 ? 0 : dr / f + 1;
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
        FN(bwdk_tile)(g, xp, o0, dyf, nrows, m, dfull, d, first, n, v);                            \
        break;
                    CONV_TILE_CASES(CONV_KT_CASE)
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
static VATTR void FN(direct_bwdi_band)(const conv_geom *g, const T *dyp, const T *kf, T *dx,
                                       int64_t nrows)
{
    const int64_t c = g->c, f = g->f, w = g->w, wq = g->wq, n = nrows * w;
    const int64_t run = g->kw * f, rv = run / VL * VL; /* whole vectors; the rest masked */
    const VMASK mt = V_MASK_N(run - rv);
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

bool FN(sx__conv_direct_fwd_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                  bool first)
{
    (void)acc, (void)first;
    const conv_geom *g = jb->g;
    int64_t img, oy0, nr;
    conv_unit_band(jb->pl, g->oh, u, &img, &oy0, &nr);
    conv_geom gi;
    const T *xp = FN(direct_src)(g, jb->in0, img, oy0, nr, jb->pl->rpu, slot, fresh, &gi);
    T *y = (T *)jb->out + (img * g->oh + oy0) * g->ow * g->f;
    FN(direct_fwd_band)(&gi, xp, jb->in1, y, nr);
    return xp == slot;
}

bool FN(sx__conv_direct_bwdk_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                   bool first)
{
    const conv_geom *g = jb->g;
    int64_t img, oy0, nr;
    conv_unit_band(jb->pl, g->oh, u, &img, &oy0, &nr);
    conv_geom gi;
    const T *xp = FN(direct_src)(g, jb->in0, img, oy0, nr, jb->pl->rpu, slot, fresh, &gi);
    const T *dy = (const T *)jb->in1 + (img * g->oh + oy0) * g->ow * g->f;
    FN(sx__conv_direct_bwdk_band)(&gi, xp, dy, nr, acc, first);
    return xp == slot;
}

/* kr (kh, kw, f, c) = k (kh, kw, c, f) rotated by 180 degrees and transposed:
 * kr[ky][kx][fi][ci] = k[kh - 1 - ky][kw - 1 - kx][ci][fi], for the filters fi in [f0, f1).
 * With stride 1, dx is the forward convolution of dy, padded by kh - 1 - pt rows and kw - 1 -
 * pl columns before, with kr. */
void FN(sx__conv_rot_k)(const conv_geom *g, const T *k, T *kr, int64_t f0, int64_t f1)
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
static VATTR void FN(bwdi_phase)(const conv_geom *g, const T *band, int64_t b0, const T *kq, T *dx,
                                 int64_t iy0, int64_t nr, int64_t ry, int64_t rx)
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
                    V_MSTORE(y0 + r * sh * w * c + q * sw * c + e, V_MASK_N(c - e), V_ZERO());
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
    conv_unit_band(jb->pl, g->h, u, &img, &iy0, &nr);
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
bool FN(sx__conv_direct_bwdi_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                   bool first)
{
    (void)acc, (void)first;
    const conv_geom *g = jb->g;
    if (g->sh != 1 || g->sw != 1)
        return FN(direct_bwdi_phases)(jb, u, slot, fresh);
    const bool rot = g->c >= VL;
    int64_t img, iy0, nr;
    conv_unit_band(jb->pl, g->h, u, &img, &iy0, &nr);
    T *kp = slot, *dyp = kp + CONV_KF_ELEMS(g);
    if (fresh) {
        if (rot)
            FN(sx__conv_rot_k)(g, jb->in0, kp, 0, g->f);
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

#undef FN
#undef CONV_CAT
#undef CONV_CAT_
