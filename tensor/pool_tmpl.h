/* pool_tmpl.h: the pooling kernels for one dtype; included by pool.c with T and SFX defined.
 * Every inner loop runs over the channel axis c, which is innermost and contiguous in NHWC, so
 * the compiler vectorises it; the outer loops walk the clamped window (padded cells are never
 * visited). */
#define POOL_CAT_(a, b) a##_##b
#define POOL_CAT(a, b) POOL_CAT_(a, b)

/* y (n,oh,ow,c) = max over each window of x (n,h,w,c). A NaN in a window wins (it propagates),
 * with the same rule as the backward pass uses to pick the cell. */
static void POOL_CAT(maxpool_fwd, SFX)(const pool_geom *g, const T *restrict x, T *restrict y)
{
    const int64_t rows = g->n * g->oh, c = g->c;
#pragma omp parallel for if (pool_work(g) >= SX_OMP_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t b = r / g->oh, oy = r % g->oh;
        int64_t y0, y1;
        pool_range(oy, g->sh, g->pt, g->kh, g->h, &y0, &y1);
        for (int64_t ox = 0; ox < g->ow; ox++) {
            int64_t x0, x1;
            pool_range(ox, g->sw, g->pl, g->kw, g->w, &x0, &x1);
            T *yo = y + (r * g->ow + ox) * c;
            const T *first = x + ((b * g->h + y0) * g->w + x0) * c;
            for (int64_t j = 0; j < c; j++)
                yo[j] = first[j];
            for (int64_t iy = y0; iy < y1; iy++)
                for (int64_t ix = x0; ix < x1; ix++) {
                    const T *xi = x + ((b * g->h + iy) * g->w + ix) * c;
#pragma omp simd
                    for (int64_t j = 0; j < c; j++) {
                        const T v = xi[j], m = yo[j];
                        yo[j] = POOL_TAKES(v, m) ? v : m;
                    }
                }
        }
    }
}

/* dx (n,h,w,c) = dy (n,oh,ow,c) routed to the first maximum of each window of x, in the
 * window's row-major scan order; accumulated where windows overlap. Two vectorised passes per
 * window: find the maximum m as the forward pass does, then give dy to the first cell equal to
 * m (or the first NaN when m is NaN) -- the same cell the forward rule selects. One task owns
 * one image and one block of POOL_CB channels, so every dx element is written by one thread in
 * a fixed order (deterministic for any number of threads). */
static void POOL_CAT(maxpool_bwd, SFX)(const pool_geom *g, const T *restrict x,
                                       const T *restrict dy, T *restrict dx)
{
    const int64_t c = g->c, ncb = (c + POOL_CB - 1) / POOL_CB, tasks = g->n * ncb;
#pragma omp parallel for if (pool_work(g) >= SX_OMP_MIN)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t b = t / ncb, c0 = (t % ncb) * POOL_CB;
        const int64_t cn = c - c0 < POOL_CB ? c - c0 : POOL_CB;
        const T *xb = x + b * g->h * g->w * c + c0;
        const T *dyb = dy + b * g->oh * g->ow * c + c0;
        T *dxb = dx + b * g->h * g->w * c + c0;
        for (int64_t cell = 0; cell < g->h * g->w; cell++)
            for (int64_t j = 0; j < cn; j++)
                dxb[cell * c + j] = 0;
        T m[POOL_CB], left[POOL_CB]; /* left[j] != 0 until lane j has found its maximum */
        for (int64_t oy = 0; oy < g->oh; oy++) {
            int64_t y0, y1;
            pool_range(oy, g->sh, g->pt, g->kh, g->h, &y0, &y1);
            for (int64_t ox = 0; ox < g->ow; ox++) {
                int64_t x0, x1;
                pool_range(ox, g->sw, g->pl, g->kw, g->w, &x0, &x1);
                const T *first = xb + (y0 * g->w + x0) * c;
                for (int64_t j = 0; j < cn; j++) {
                    m[j] = first[j];
                    left[j] = 1;
                }
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++) {
                        const T *xi = xb + (iy * g->w + ix) * c;
#pragma omp simd
                        for (int64_t j = 0; j < cn; j++) {
                            const T v = xi[j];
                            m[j] = POOL_TAKES(v, m[j]) ? v : m[j];
                        }
                    }
                const T *dyo = dyb + (oy * g->ow + ox) * c;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++) {
                        const T *xi = xb + (iy * g->w + ix) * c;
                        T *dxi = dxb + (iy * g->w + ix) * c;
#pragma omp simd
                        for (int64_t j = 0; j < cn; j++) {
                            /* written as selects so that gcc if-converts and vectorises */
                            const T v = xi[j], mj = m[j], lj = left[j], gj = dyo[j];
                            const int is_max = (v == mj) | ((v != v) & (mj != mj));
                            const T add = is_max ? gj : (T)0;
                            dxi[j] += lj != 0 ? add : (T)0;
                            left[j] = lj * (T)(1 - is_max); /* lj is 0 or 1 */
                        }
                    }
            }
        }
    }
}

/* y (n,oh,ow,c) = mean of each window of x over its real (unpadded) cells. */
static void POOL_CAT(avgpool_fwd, SFX)(const pool_geom *g, const T *restrict x, T *restrict y)
{
    const int64_t rows = g->n * g->oh, c = g->c;
#pragma omp parallel for if (pool_work(g) >= SX_OMP_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t b = r / g->oh, oy = r % g->oh;
        int64_t y0, y1;
        pool_range(oy, g->sh, g->pt, g->kh, g->h, &y0, &y1);
        for (int64_t ox = 0; ox < g->ow; ox++) {
            int64_t x0, x1;
            pool_range(ox, g->sw, g->pl, g->kw, g->w, &x0, &x1);
            T *yo = y + (r * g->ow + ox) * c;
            for (int64_t j = 0; j < c; j++)
                yo[j] = 0;
            for (int64_t iy = y0; iy < y1; iy++)
                for (int64_t ix = x0; ix < x1; ix++) {
                    const T *xi = x + ((b * g->h + iy) * g->w + ix) * c;
#pragma omp simd
                    for (int64_t j = 0; j < c; j++)
                        yo[j] += xi[j];
                }
            const T cnt = (T)((y1 - y0) * (x1 - x0));
#pragma omp simd
            for (int64_t j = 0; j < c; j++)
                yo[j] /= cnt;
        }
    }
}

/* dx (n,h,w,c): each window spreads dy / (its number of real cells) over its real cells;
 * accumulated where windows overlap. Same task split as maxpool_bwd (deterministic). */
static void POOL_CAT(avgpool_bwd, SFX)(const pool_geom *g, const T *restrict dy, T *restrict dx)
{
    const int64_t c = g->c, ncb = (c + POOL_CB - 1) / POOL_CB, tasks = g->n * ncb;
#pragma omp parallel for if (pool_work(g) >= SX_OMP_MIN)
    for (int64_t t = 0; t < tasks; t++) {
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
            pool_range(oy, g->sh, g->pt, g->kh, g->h, &y0, &y1);
            for (int64_t ox = 0; ox < g->ow; ox++) {
                int64_t x0, x1;
                pool_range(ox, g->sw, g->pl, g->kw, g->w, &x0, &x1);
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
