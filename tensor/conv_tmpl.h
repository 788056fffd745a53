/* conv_tmpl.h: im2col and col2im for one dtype; included by conv.c with T and SFX defined.
 * Both work on a block of output image rows [p0, p0 + np) (p = img * oh + oy), each of which is
 * ow rows of the im2col matrix. A kernel row (ky) of one output pixel reads kw * c contiguous
 * elements of x, so both loops move whole segments rather than single elements. */
#define CONV_CAT_(a, b) a##_##b
#define CONV_CAT(a, b) CONV_CAT_(a, b)

/* Output columns [*ox_a, *ox_b) read kernel rows that lie wholly inside x (no padding on the
 * left or right), so their segments are plain copies of kw * c elements. */
static inline void CONV_CAT(interior, SFX)(const conv_geom *g, int64_t *ox_a, int64_t *ox_b)
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

/* col (np * ow, kdim) = the im2col rows of output rows [p0, p0 + np) of x (n,h,w,c); padding
 * reads as zero. Output rows are independent, so they are filled in parallel. */
static void CONV_CAT(im2col, SFX)(const conv_geom *g, const void *xv, int64_t p0, int64_t np,
                                  void *colv)
{
    const T *x = xv;
    T *col = colv;
    const int64_t c = g->c, kw = g->kw, ow = g->ow, kdim = g->kdim, seg = kw * c;
    int64_t ox_a, ox_b;
    CONV_CAT(interior, SFX)(g, &ox_a, &ox_b);
#pragma omp parallel for schedule(static) if (np * ow * kdim >= SX_OMP_MIN)
    for (int64_t q = 0; q < np; q++) {
        const int64_t img = (p0 + q) / g->oh, oy = (p0 + q) % g->oh;
        T *row = col + q * ow * kdim;
        for (int64_t ky = 0; ky < g->kh; ky++) {
            const int64_t iy = oy * g->sh - g->pt + ky;
            T *dst = row + ky * seg;
            if (iy < 0 || iy >= g->h) {
                for (int64_t ox = 0; ox < ow; ox++, dst += kdim)
                    memset(dst, 0, (size_t)seg * sizeof(T));
                continue;
            }
            const T *xrow = x + (img * g->h + iy) * g->w * c;
            for (int64_t ox = 0; ox < ow; ox++, dst += kdim) {
                const int64_t ix0 = ox * g->sw - g->pl;
                if (ox >= ox_a && ox < ox_b) {
                    const T *src = xrow + ix0 * c;
                    for (int64_t j = 0; j < seg; j++)
                        dst[j] = src[j];
                    continue;
                }
                /* an edge column: kx in [lo, hi) falls inside x, the rest is padding */
                const int64_t lo = ix0 < 0 ? -ix0 : 0;
                const int64_t hi = g->w - ix0 < kw ? g->w - ix0 : kw;
                for (int64_t j = 0; j < seg; j++)
                    dst[j] = 0;
                for (int64_t j = lo * c; j < hi * c; j++)
                    dst[j] = xrow[ix0 * c + j];
            }
        }
    }
}

/* dx (n,h,w,c) += the col2im of col (np * ow, kdim), the rows of output rows [p0, p0 + np).
 * Each input row (img, iy) gathers every contribution it receives from the block, in the order
 * oy, ox ascending: threads never write the same row, and the sums do not depend on the number
 * of threads, nor on how the output rows are cut into blocks. */
static void CONV_CAT(col2im, SFX)(const conv_geom *g, const void *colv, int64_t p0, int64_t np,
                                  void *dxv)
{
    const T *col = colv;
    T *dx = dxv;
    const int64_t c = g->c, kw = g->kw, kh = g->kh, ow = g->ow, oh = g->oh, kdim = g->kdim;
    const int64_t seg = kw * c;
    int64_t ox_a, ox_b;
    CONV_CAT(interior, SFX)(g, &ox_a, &ox_b);
    const int64_t img0 = p0 / oh, img1 = (p0 + np - 1) / oh;
    const int64_t nq = (img1 - img0 + 1) * g->h;
#pragma omp parallel for schedule(static) if (np * ow * kdim >= SX_OMP_MIN)
    for (int64_t q = 0; q < nq; q++) {
        const int64_t img = img0 + q / g->h, iy = q % g->h;
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
        T *drow = dx + (img * g->h + iy) * g->w * c;
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

#undef CONV_CAT
#undef CONV_CAT_
