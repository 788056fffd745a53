/* pool_tmpl.h: the pooling kernels for one dtype and one instruction set; included by pool.c
 * with T, SFX (dtype and ISA suffix, e.g. f32_avx512), POOL_ATTR (the target attribute) and, for
 * f32 instances that have pool_vec_tmpl.h's 2x2 kernels, POOL_VEC (their lanes) defined. Each
 * kernel does a range [lo, hi) of rows or tasks; pool.c's parallel loops call the instance this CPU
 * runs best. Every inner loop runs over the channel axis c, which is innermost and contiguous in
 * NHWC, so the compiler vectorises it; the outer loops walk the clamped window (padded cells are
 * never visited). Max pooling tracks the winning cell's index next to the running maximum, so the
 * backward pass routes dy in the same single scan. When windows do not overlap (stride >= kernel on
 * both axes: 2x2 stride 2 is the common case) every input cell has at most one window, and the
 * backward passes store each dx cell once instead of zeroing and accumulating. Loads are hoisted
 * into locals and selects written the way gcc if-converts. */
#define POOL_CAT_(a, b) a##_##b
#define POOL_CAT(a, b) POOL_CAT_(a, b)

/* The max-pool rule, written so that gcc vectorises it (a chain of selects that tests NaN on
 * computed values is not): the strict maximum over the ordered values in scan order (the first
 * of equal maxima; a NaN compares false and is skipped), then the first NaN of the window, if
 * any, overrides it (NaN propagates). The backward pass picks its cell by the same rule. */

/* y (n,oh,ow,c) = max over each window of x (n,h,w,c), output rows [lo, hi) of n * oh. */
static POOL_ATTR void POOL_CAT(maxpool_fwd, SFX)(const pool_geom *g, const void *xv, void *yv,
                                                 int64_t lo, int64_t hi)
{
    const T *restrict x = xv;
    T *restrict y = yv;
    const int64_t c = g->c;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t b = r / g->oh, oy = r % g->oh;
        int64_t y0, y1;
        pool_range(oy, g->sh, g->pt, g->kh, g->dh, g->h, &y0, &y1);
        for (int64_t ox = 0; ox < g->ow; ox++) {
            int64_t x0, x1;
            pool_range(ox, g->sw, g->pl, g->kw, g->dw, g->w, &x0, &x1);
            T *yo = y + (r * g->ow + ox) * c;
            const T *xr = x + ((b * g->h + y0) * g->w + x0) * c;
            if (y1 - y0 == 2 && x1 - x0 == 2) { /* the 2x2 window in one pass over c */
                const T *p0 = xr, *p1 = xr + c, *p2 = xr + g->w * c, *p3 = p2 + c;
#ifdef POOL_VEC
                /* whole vectors (the compiler's loop took 20x longer for 16 channels on AVX2,
                 * and runs only its scalar remainder below a vector); the windows after this
                 * one in rows [lo, hi) are written after it */
                POOL_CAT(pool_fwd_2x2_vec, SFX)
                (p0, p1, p2, p3, yo, c, x + g->n * g->h * g->w * c, y + hi * g->ow * c);
                continue;
#endif
#pragma omp simd
                for (int64_t j = 0; j < c; j++) {
                    const T a = p0[j], b1 = p1[j], b2 = p2[j], b3 = p3[j];
                    T m = b1 > a ? b1 : a;
                    m = b2 > m ? b2 : m;
                    m = b3 > m ? b3 : m;
                    m = b3 != b3 ? b3 : m;
                    m = b2 != b2 ? b2 : m;
                    m = b1 != b1 ? b1 : m;
                    yo[j] = a != a ? a : m;
                }
                continue;
            }
            if (y0 == y1 || x0 == x1) { /* every dilated cell in padding */
                for (int64_t j = 0; j < c; j++)
                    yo[j] = -(T)INFINITY;
                continue;
            }
            for (int64_t j = 0; j < c; j++)
                yo[j] = xr[j];
            for (int64_t iy = y0; iy < y1; iy += g->dh)
                for (int64_t ix = x0; ix < x1; ix += g->dw) {
                    const T *xi = x + ((b * g->h + iy) * g->w + ix) * c;
#pragma omp simd
                    for (int64_t j = 0; j < c; j++) {
                        const T v = xi[j], m = yo[j];
                        yo[j] = v > m ? v : m;
                    }
                }
            for (int64_t iy = y1 - 1; iy >= y0; iy -= g->dh) /* the first NaN is written last */
                for (int64_t ix = x1 - 1; ix >= x0; ix -= g->dw) {
                    const T *xi = x + ((b * g->h + iy) * g->w + ix) * c;
#pragma omp simd
                    for (int64_t j = 0; j < c; j++) {
                        const T v = xi[j], m = yo[j];
                        yo[j] = v != v ? v : m;
                    }
                }
        }
    }
}

/* One window of the max-pool backward pass over channels [0, cn) (stride c between cells):
 * the index of the winning cell in scan order (kept as a T) by the rule above, then dy goes to
 * it. Non-overlapping windows store every cell of the window (the others get 0), each cell
 * after the whole window is read (so dx may be x); with `relu` the stored value is kept where
 * x > 0 and is +0 elsewhere (selected, as relu's gradient: an infinite dy gives 0 there, not
 * NaN). Overlapping ones add to the cell (the selection comes after).
 * m and at are the caller's per-channel scratch. */
static inline POOL_ATTR void POOL_CAT(maxpool_bwd_window,
                                      SFX)(const pool_geom *g, const T *xw, const T *restrict dyo,
                                           T *dxw, int64_t ny, int64_t nx, int64_t cn, bool store,
                                           bool relu, T *restrict m, T *restrict at)
{
    /* cell (iy, ix) of the window (iy-th row tap, ix-th column tap): iy * rs + ix * cs */
    const int64_t rs = g->dh * g->w * g->c, cs = g->dw * g->c;
    for (int64_t j = 0; j < cn; j++) {
        m[j] = xw[j];
        at[j] = 0;
    }
    for (int64_t iy = 0; iy < ny; iy++)
        for (int64_t ix = 0; ix < nx; ix++) {
            const T *xi = xw + iy * rs + ix * cs, cell = (T)(iy * nx + ix);
#pragma omp simd
            for (int64_t j = 0; j < cn; j++) { /* in this form gcc if-converts it */
                const T v = xi[j];
                T mj = m[j], aj = at[j];
                if (v > mj) {
                    mj = v;
                    aj = cell;
                }
                m[j] = mj;
                at[j] = aj;
            }
        }
    for (int64_t iy = ny - 1; iy >= 0; iy--) /* the first NaN is written last */
        for (int64_t ix = nx - 1; ix >= 0; ix--) {
            const T *xi = xw + iy * rs + ix * cs, cell = (T)(iy * nx + ix);
#pragma omp simd
            for (int64_t j = 0; j < cn; j++) {
                const T v = xi[j], aj = at[j];
                at[j] = v != v ? cell : aj;
            }
        }
    for (int64_t iy = 0; iy < ny; iy++)
        for (int64_t ix = 0; ix < nx; ix++) {
            const T *xi = xw + iy * rs + ix * cs;
            T *dxi = dxw + iy * rs + ix * cs;
            const T cell = (T)(iy * nx + ix);
            if (store && relu) {
#pragma omp simd
                for (int64_t j = 0; j < cn; j++) {
                    const T aj = at[j], gj = dyo[j], v = xi[j];
                    const T sel = aj == cell ? gj : (T)0;
                    dxi[j] = v > (T)0 ? sel : (T)0;
                }
            } else if (store) {
#pragma omp simd
                for (int64_t j = 0; j < cn; j++) {
                    const T aj = at[j], gj = dyo[j];
                    dxi[j] = aj == cell ? gj : (T)0;
                }
            } else {
#pragma omp simd
                for (int64_t j = 0; j < cn; j++) {
                    const T aj = at[j], gj = dyo[j];
                    dxi[j] += aj == cell ? gj : (T)0;
                }
            }
        }
}

/* The 2x2 window with store semantics, in one pass over the channels (each lane reads its four
 * cells before it writes them, so dx may be x). */
static inline POOL_ATTR void POOL_CAT(maxpool_bwd_2x2, SFX)(const pool_geom *g, const T *xw,
                                                            const T *restrict dyo, T *dxw,
                                                            int64_t cn)
{
    const int64_t c = g->c, rs = g->w * c;
    const T *p0 = xw, *p1 = xw + c, *p2 = xw + rs, *p3 = p2 + c;
    T *d0 = dxw, *d1 = dxw + c, *d2 = dxw + rs, *d3 = d2 + c;
/* the first maximum of the lane's four cells, by the rule above */
#define POOL_ARG_2X2                                                                               \
    const T a = p0[j], b1 = p1[j], b2 = p2[j], b3 = p3[j];                                         \
    T m = a, at = 0;                                                                               \
    at = b1 > m ? (T)1 : at;                                                                       \
    m = b1 > m ? b1 : m;                                                                           \
    at = b2 > m ? (T)2 : at;                                                                       \
    m = b2 > m ? b2 : m;                                                                           \
    at = b3 > m ? (T)3 : at;                                                                       \
    at = b3 != b3 ? (T)3 : at;                                                                     \
    at = b2 != b2 ? (T)2 : at;                                                                     \
    at = b1 != b1 ? (T)1 : at;                                                                     \
    at = a != a ? (T)0 : at;                                                                       \
    const T gj = dyo[j];
#pragma omp simd
    for (int64_t j = 0; j < cn; j++) {
        POOL_ARG_2X2
        d0[j] = at == 0 ? gj : (T)0;
        d1[j] = at == 1 ? gj : (T)0;
        d2[j] = at == 2 ? gj : (T)0;
        d3[j] = at == 3 ? gj : (T)0;
    }
}

/* The same with relu's selection: the bits of the unfused where(x > 0, v, 0). */
static inline POOL_ATTR void POOL_CAT(maxpool_relu_bwd_2x2, SFX)(const pool_geom *g, const T *xw,
                                                                 const T *restrict dyo, T *dxw,
                                                                 int64_t cn)
{
    const int64_t c = g->c, rs = g->w * c;
    const T *p0 = xw, *p1 = xw + c, *p2 = xw + rs, *p3 = p2 + c;
    T *d0 = dxw, *d1 = dxw + c, *d2 = dxw + rs, *d3 = d2 + c;
#pragma omp simd
    for (int64_t j = 0; j < cn; j++) {
        POOL_ARG_2X2
        /* two selects, not (at == i) & (v > 0): gcc does not if-convert the conjunction */
        const T g0 = at == 0 ? gj : (T)0, g1 = at == 1 ? gj : (T)0;
        const T g2 = at == 2 ? gj : (T)0, g3 = at == 3 ? gj : (T)0;
        d0[j] = a > (T)0 ? g0 : (T)0;
        d1[j] = b1 > (T)0 ? g1 : (T)0;
        d2[j] = b2 > (T)0 ? g2 : (T)0;
        d3[j] = b3 > (T)0 ? g3 : (T)0;
    }
}
#undef POOL_ARG_2X2

/* Zero the cells of one task (cn channels from dxb) that no window covers, for windows that do
 * not overlap: whole rows between or after the windows' rows, and inside covered rows the
 * columns between or after the windows' columns. Run after the windows, so that dx may be x. */
static inline POOL_ATTR void POOL_CAT(maxpool_bwd_gaps, SFX)(const pool_geom *g, T *dxb, int64_t cn)
{
    const int64_t c = g->c;
    int64_t yprev = 0;
    for (int64_t oy = 0; oy <= g->oh; oy++) {
        int64_t y0 = g->h, y1 = g->h;
        if (oy < g->oh)
            pool_range(oy, g->sh, g->pt, g->kh, g->dh, g->h, &y0, &y1);
        for (int64_t iy = yprev; iy < y0; iy++) /* a row no window reaches */
            for (int64_t cell = iy * g->w; cell < (iy + 1) * g->w; cell++)
                for (int64_t j = 0; j < cn; j++)
                    dxb[cell * c + j] = 0;
        for (int64_t iy = y0; iy < y1; iy++) {
            int64_t xprev = 0;
            for (int64_t ox = 0; ox <= g->ow; ox++) {
                int64_t x0 = g->w, x1 = g->w;
                if (ox < g->ow)
                    pool_range(ox, g->sw, g->pl, g->kw, g->dw, g->w, &x0, &x1);
                for (int64_t ix = xprev; ix < x0; ix++)
                    for (int64_t j = 0; j < cn; j++)
                        dxb[(iy * g->w + ix) * c + j] = 0;
                xprev = x1;
            }
        }
        yprev = y1;
    }
}

/* dx (n,h,w,c) = dy (n,oh,ow,c) routed to the first maximum of each window of x, in the
 * window's row-major scan order; accumulated where windows overlap; with `relu` kept only where
 * x > 0 (+0 elsewhere) afterwards. One task owns one image and one block of POOL_CB channels (tasks
 * [lo, hi) of n * ceil(c / POOL_CB)), so every dx element is written by one thread in a fixed order
 * (deterministic for any number of threads). Without overlap each window stores its cells and
 * the cells outside every window are zeroed afterwards (dx may be x: every cell is read before
 * it is written); with overlap the image is zeroed and the windows add. */
static POOL_ATTR void POOL_CAT(maxpool_bwd, SFX)(const pool_geom *g, const void *xv,
                                                 const void *dyv, void *dxv, bool relu, int64_t lo,
                                                 int64_t hi)
{
    const T *x = xv, *restrict dy = dyv;
    T *dx = dxv;
    const int64_t c = g->c, ncb = (c + POOL_CB - 1) / POOL_CB;
    const bool store = pool_disjoint(g);
    for (int64_t t = lo; t < hi; t++) {
        const int64_t b = t / ncb, c0 = (t % ncb) * POOL_CB;
        const int64_t cn = c - c0 < POOL_CB ? c - c0 : POOL_CB;
        const T *xb = x + b * g->h * g->w * c + c0;
        const T *dyb = dy + b * g->oh * g->ow * c + c0;
        T *dxb = dx + b * g->h * g->w * c + c0;
        if (!store)
            for (int64_t cell = 0; cell < g->h * g->w; cell++)
                for (int64_t j = 0; j < cn; j++)
                    dxb[cell * c + j] = 0;
        T m[POOL_CB], at[POOL_CB];
        for (int64_t oy = 0; oy < g->oh; oy++) {
            int64_t y0, y1;
            pool_range(oy, g->sh, g->pt, g->kh, g->dh, g->h, &y0, &y1);
            for (int64_t ox = 0; ox < g->ow; ox++) {
                int64_t x0, x1;
                pool_range(ox, g->sw, g->pl, g->kw, g->dw, g->w, &x0, &x1);
                const int64_t off = (y0 * g->w + x0) * c;
                const int64_t ny = (y1 - y0 + g->dh - 1) / g->dh,
                              nx = (x1 - x0 + g->dw - 1) / g->dw;
                if (ny == 0 || nx == 0) /* every dilated cell in padding: no gradient */
                    continue;
                const T *xw = xb + off, *dyo = dyb + (oy * g->ow + ox) * c;
                T *dxw = dxb + off;
#ifdef POOL_VEC
                if (store && ny == 2 && nx == 2) {
                    POOL_CAT(pool_bwd_2x2_vec, SFX)(xw, dyo, dxw, c, g->w * c, cn, relu);
                    continue;
                }
#endif
                if (store && ny == 2 && nx == 2 && relu) {
                    POOL_CAT(maxpool_relu_bwd_2x2, SFX)(g, xw, dyo, dxw, cn);
                    continue;
                }
                if (store && ny == 2 && nx == 2) {
                    POOL_CAT(maxpool_bwd_2x2, SFX)(g, xw, dyo, dxw, cn);
                    continue;
                }
                POOL_CAT(maxpool_bwd_window, SFX)(g, xw, dyo, dxw, ny, nx, cn, store, relu, m, at);
            }
        }
        if (store && !pool_covers(g))
            POOL_CAT(maxpool_bwd_gaps, SFX)(g, dxb, cn);
        if (!store && relu)
            for (int64_t cell = 0; cell < g->h * g->w; cell++)
#pragma omp simd
                for (int64_t j = 0; j < cn; j++) {
                    const T v = xb[cell * c + j], d = dxb[cell * c + j];
                    dxb[cell * c + j] = v > (T)0 ? d : (T)0;
                }
    }
}

/* y (n,oh,ow,c) = mean of each window of x over its real (unpadded) cells; rows [lo, hi). */
static POOL_ATTR void POOL_CAT(avgpool_fwd, SFX)(const pool_geom *g, const void *xv, void *yv,
                                                 int64_t lo, int64_t hi)
{
    const T *restrict x = xv;
    T *restrict y = yv;
    const int64_t c = g->c;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t b = r / g->oh, oy = r % g->oh;
        int64_t y0, y1;
        pool_range(oy, g->sh, g->pt, g->kh, g->dh, g->h, &y0, &y1);
        for (int64_t ox = 0; ox < g->ow; ox++) {
            int64_t x0, x1;
            pool_range(ox, g->sw, g->pl, g->kw, g->dw, g->w, &x0, &x1);
            T *yo = y + (r * g->ow + ox) * c;
            const T *xr = x + ((b * g->h + y0) * g->w + x0) * c;
            const T cnt = (T)pool_count(g, oy, ox, y0, y1, x0, x1);
            if (y1 - y0 == 2 && x1 - x0 == 2) { /* the 2x2 window, summed in scan order */
                const T *p0 = xr, *p1 = xr + c, *p2 = xr + g->w * c, *p3 = p2 + c;
#pragma omp simd
                for (int64_t j = 0; j < c; j++)
                    yo[j] = (((p0[j] + p1[j]) + p2[j]) + p3[j]) / cnt;
                continue;
            }
            for (int64_t j = 0; j < c; j++)
                yo[j] = 0;
            for (int64_t iy = y0; iy < y1; iy++)
                for (int64_t ix = x0; ix < x1; ix++) {
                    const T *xi = x + ((b * g->h + iy) * g->w + ix) * c;
#pragma omp simd
                    for (int64_t j = 0; j < c; j++)
                        yo[j] += xi[j];
                }
#pragma omp simd
            for (int64_t j = 0; j < c; j++)
                yo[j] /= cnt;
        }
    }
}

/* dx (n,h,w,c): each window spreads dy / (its number of real cells) over its real cells;
 * accumulated where windows overlap, stored once where they do not. Same task split as
 * maxpool_bwd (deterministic). */
static POOL_ATTR void POOL_CAT(avgpool_bwd, SFX)(const pool_geom *g, const void *dyv, void *dxv,
                                                 int64_t lo, int64_t hi)
{
    const T *restrict dy = dyv;
    T *restrict dx = dxv;
    const int64_t c = g->c, ncb = (c + POOL_CB - 1) / POOL_CB;
    const bool store = pool_disjoint(g), zero = !store || !pool_covers(g);
    for (int64_t t = lo; t < hi; t++) {
        const int64_t b = t / ncb, c0 = (t % ncb) * POOL_CB;
        const int64_t cn = c - c0 < POOL_CB ? c - c0 : POOL_CB;
        const T *dyb = dy + b * g->oh * g->ow * c + c0;
        T *dxb = dx + b * g->h * g->w * c + c0;
        if (zero)
            for (int64_t cell = 0; cell < g->h * g->w; cell++)
                for (int64_t j = 0; j < cn; j++)
                    dxb[cell * c + j] = 0;
        T share[POOL_CB];
        for (int64_t oy = 0; oy < g->oh; oy++) {
            int64_t y0, y1;
            pool_range(oy, g->sh, g->pt, g->kh, g->dh, g->h, &y0, &y1);
            for (int64_t ox = 0; ox < g->ow; ox++) {
                int64_t x0, x1;
                pool_range(ox, g->sw, g->pl, g->kw, g->dw, g->w, &x0, &x1);
                const T cnt = (T)pool_count(g, oy, ox, y0, y1, x0, x1);
                const T *dyo = dyb + (oy * g->ow + ox) * c;
                for (int64_t j = 0; j < cn; j++)
                    share[j] = dyo[j] / cnt;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++) {
                        T *dxi = dxb + (iy * g->w + ix) * c;
                        if (store) {
#pragma omp simd
                            for (int64_t j = 0; j < cn; j++)
                                dxi[j] = share[j];
                        } else {
#pragma omp simd
                            for (int64_t j = 0; j < cn; j++)
                                dxi[j] += share[j];
                        }
                    }
            }
        }
    }
}

/* Adaptive average pooling, y (n,oh,ow,c): output (oy, ox) is the mean of rows [y0, y1) and
 * columns [x0, x1) (adaptive_range), summed in scan order; rows [lo, hi) of n * oh. */
static POOL_ATTR void POOL_CAT(adaptive_fwd, SFX)(const pool_geom *g, const void *xv, void *yv,
                                                  int64_t lo, int64_t hi)
{
    const T *restrict x = xv;
    T *restrict y = yv;
    const int64_t c = g->c;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t b = r / g->oh, oy = r % g->oh;
        int64_t y0, y1;
        adaptive_range(oy, g->h, g->oh, &y0, &y1);
        for (int64_t ox = 0; ox < g->ow; ox++) {
            int64_t x0, x1;
            adaptive_range(ox, g->w, g->ow, &x0, &x1);
            T *yo = y + (r * g->ow + ox) * c;
            const T cnt = (T)((y1 - y0) * (x1 - x0));
            for (int64_t j = 0; j < c; j++)
                yo[j] = 0;
            for (int64_t iy = y0; iy < y1; iy++)
                for (int64_t ix = x0; ix < x1; ix++) {
                    const T *xi = x + ((b * g->h + iy) * g->w + ix) * c;
#pragma omp simd
                    for (int64_t j = 0; j < c; j++)
                        yo[j] += xi[j];
                }
#pragma omp simd
            for (int64_t j = 0; j < c; j++)
                yo[j] /= cnt;
        }
    }
}

/* dx (n,h,w,c): zeroed, then each window adds dy / (its cell count) to its cells, windows in
 * row-major order; tasks of one image and one block of POOL_CB channels (deterministic). */
static POOL_ATTR void POOL_CAT(adaptive_bwd, SFX)(const pool_geom *g, const void *dyv, void *dxv,
                                                  int64_t lo, int64_t hi)
{
    const T *restrict dy = dyv;
    T *restrict dx = dxv;
    const int64_t c = g->c, ncb = (c + POOL_CB - 1) / POOL_CB;
    for (int64_t t = lo; t < hi; t++) {
        const int64_t b = t / ncb, c0 = (t % ncb) * POOL_CB;
        const int64_t cn = c - c0 < POOL_CB ? c - c0 : POOL_CB;
        const T *dyb = dy + b * g->oh * g->ow * c + c0;
        T *dxb = dx + b * g->h * g->w * c + c0;
        for (int64_t cell = 0; cell < g->h * g->w; cell++)
            for (int64_t j = 0; j < cn; j++)
                dxb[cell * c + j] = 0;
        T share[POOL_CB];
        for (int64_t oy = 0; oy < g->oh; oy++) {
            int64_t y0, y1;
            adaptive_range(oy, g->h, g->oh, &y0, &y1);
            for (int64_t ox = 0; ox < g->ow; ox++) {
                int64_t x0, x1;
                adaptive_range(ox, g->w, g->ow, &x0, &x1);
                const T cnt = (T)((y1 - y0) * (x1 - x0));
                const T *dyo = dyb + (oy * g->ow + ox) * c;
                for (int64_t j = 0; j < cn; j++)
                    share[j] = dyo[j] / cnt;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++) {
                        T *dxi = dxb + (iy * g->w + ix) * c;
#pragma omp simd
                        for (int64_t j = 0; j < cn; j++)
                            dxi[j] += share[j];
                    }
            }
        }
    }
}

#undef POOL_CAT
#undef POOL_CAT_
