/* conv_im2col_tmpl.h: the im2col + GEMM kernels of conv_im2col.c, per dtype; included there with
 * T and SFX (f32, f64) defined. The dense units: im2col and col2im move whole runs of kw * c
 * contiguous elements (one kernel row of one output pixel); the unit functions run one unit (a band
 * of rows of one image, or whole images) through sx__gemm, on one thread, or split their rows over
 * threads when `par` is set; the sums never depend on the thread count. */
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
bool FN(sx__conv_im2col_fwd_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
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
bool FN(sx__conv_im2col_bwdk_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
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
bool FN(sx__conv_im2col_bwdi_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
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

/* ---------------------------------------------------------------- im2col per group */

/* ---------------------------------------------------------------- im2col per group */

/* col (np * ow, kdim) = the im2col rows of output rows [p0 + q0, p0 + q1) (p = img * oh + oy)
 * of group gi's channels of x; taps in the padding read 0. */
static void FN(gx_im2col_rows)(void *ctx, int64_t q0, int64_t q1)
{
    const gx_cols *cc = ctx;
    const gx_geom *g = cc->g;
    const T *x = cc->x;
    T *col = cc->col;
    const int64_t cg = g->cg, kdim = g->kdim;
    const size_t segb = (size_t)cg * sizeof(T);
    for (int64_t q = q0; q < q1; q++) {
        const int64_t p = cc->p0 + q, img = p / g->oh, oy = p % g->oh;
        for (int64_t ox = 0; ox < g->ow; ox++) {
            T *dst = col + (q * g->ow + ox) * kdim;
            for (int64_t ky = 0; ky < g->kh; ky++) {
                const int64_t iy = oy * g->sh - g->pt + ky * g->dh;
                for (int64_t kx = 0; kx < g->kw; kx++, dst += cg) {
                    const int64_t ix = ox * g->sw - g->pl + kx * g->dw;
                    if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
                        memset(dst, 0, segb);
                    else
                        memcpy(dst, x + ((img * g->h + iy) * g->w + ix) * g->c + cc->gi * cg, segb);
                }
            }
        }
    }
}

/* dx (group gi's channels) += the col2im of col (np * ow, kdim), rows of output rows
 * [p0, p0 + np), in the order of the rows. */
static void FN(gx_col2im)(const gx_cols *cc, int64_t np)
{
    const gx_geom *g = cc->g;
    const T *col = cc->col;
    T *dx = cc->dx;
    const int64_t cg = g->cg, kdim = g->kdim;
    for (int64_t q = 0; q < np; q++) {
        const int64_t p = cc->p0 + q, img = p / g->oh, oy = p % g->oh;
        for (int64_t ox = 0; ox < g->ow; ox++) {
            const T *src = col + (q * g->ow + ox) * kdim;
            for (int64_t ky = 0; ky < g->kh; ky++) {
                const int64_t iy = oy * g->sh - g->pt + ky * g->dh;
                for (int64_t kx = 0; kx < g->kw; kx++, src += cg) {
                    const int64_t ix = ox * g->sw - g->pl + kx * g->dw;
                    if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
                        continue;
                    T *d = dx + ((img * g->h + iy) * g->w + ix) * g->c + cc->gi * cg;
#pragma omp simd
                    for (int64_t ci = 0; ci < cg; ci++)
                        d[ci] += src[ci];
                }
            }
        }
    }
}

#undef FN
#undef CONV_CAT
#undef CONV_CAT_
