/* conv_depthwise_loops_tmpl.h: the portable depthwise loops of conv_depthwise.c, per dtype;
 * included there with T and SFX defined. Depthwise convolution runs over whole pixels,
 * vectorised (by the compiler) over the channels (NHWC keeps a pixel's channels contiguous).
 * Every element's sum runs in one fixed order, so the bits do not depend on the thread count. */
#define GX_CAT_(a, b) a##_##b
#define GX_CAT(a, b) GX_CAT_(a, b)
#define FN(name) GX_CAT(name, SFX)

/* ---------------------------------------------------------------- depthwise */

/* y rows [r0, r1) of (n * oh) rows: each output pixel is set to 0, then every tap inside x adds
 * x's channels times the tap's filters, taps in order (ky, kx ascending). Filter j reads
 * channel j / m (m = f / c, the multiplier). */
static void FN(dw_fwd_rows)(void *ctx, int64_t r0, int64_t r1)
{
    const gx_job *jb = ctx;
    const gx_geom *g = jb->g;
    const T *x = jb->in0, *k = jb->in1;
    T *y = jb->out;
    const int64_t c = g->c, f = g->f, m = g->fg;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t img = r / g->oh, oy = r % g->oh;
        for (int64_t ox = 0; ox < g->ow; ox++) {
            T *yp = y + (r * g->ow + ox) * f;
            for (int64_t j = 0; j < f; j++)
                yp[j] = 0;
            for (int64_t ky = 0; ky < g->kh; ky++) {
                const int64_t iy = oy * g->sh - g->pt + ky * g->dh;
                if (iy < 0 || iy >= g->h)
                    continue;
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    const int64_t ix = ox * g->sw - g->pl + kx * g->dw;
                    if (ix < 0 || ix >= g->w)
                        continue;
                    const T *xp = x + ((img * g->h + iy) * g->w + ix) * c;
                    const T *kp = k + (ky * g->kw + kx) * f;
                    if (m == 1) {
#pragma omp simd
                        for (int64_t j = 0; j < f; j++)
                            yp[j] += xp[j] * kp[j];
                    } else {
                        for (int64_t ci = 0; ci < c; ci++)
                            for (int64_t mi = 0; mi < m; mi++)
                                yp[ci * m + mi] += xp[ci] * kp[ci * m + mi];
                    }
                }
            }
        }
    }
}

/* dx rows [r0, r1) of (n * h) rows: each input pixel gathers, taps in order, dy times the tap's
 * filters of the output pixels that read it (oy = (iy + pt - ky * dh) / sh when divisible and in
 * range); with a multiplier, channel ci sums its m filters. */
static void FN(dw_bwdi_rows)(void *ctx, int64_t r0, int64_t r1)
{
    const gx_job *jb = ctx;
    const gx_geom *g = jb->g;
    const T *k = jb->in0, *dy = jb->in1;
    T *dx = jb->out;
    const int64_t c = g->c, f = g->f, m = g->fg;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t img = r / g->h, iy = r % g->h;
        for (int64_t ix = 0; ix < g->w; ix++) {
            T *dp = dx + (r * g->w + ix) * c;
            for (int64_t ci = 0; ci < c; ci++)
                dp[ci] = 0;
            for (int64_t ky = 0; ky < g->kh; ky++) {
                const int64_t ty = iy + g->pt - ky * g->dh;
                if (ty < 0 || ty % g->sh != 0 || ty / g->sh >= g->oh)
                    continue;
                const int64_t oy = ty / g->sh;
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    const int64_t tx = ix + g->pl - kx * g->dw;
                    if (tx < 0 || tx % g->sw != 0 || tx / g->sw >= g->ow)
                        continue;
                    const int64_t ox = tx / g->sw;
                    const T *dyp = dy + ((img * g->oh + oy) * g->ow + ox) * f;
                    const T *kp = k + (ky * g->kw + kx) * f;
                    if (m == 1) {
#pragma omp simd
                        for (int64_t j = 0; j < f; j++)
                            dp[j] += dyp[j] * kp[j];
                    } else {
                        for (int64_t ci = 0; ci < c; ci++) {
                            T s = dp[ci];
                            for (int64_t mi = 0; mi < m; mi++)
                                s += dyp[ci * m + mi] * kp[ci * m + mi];
                            dp[ci] = s;
                        }
                    }
                }
            }
        }
    }
}

/* Task t of backward-kernel: one tap and one chunk of GX_DW_CHUNK filters; dk's elements are
 * summed over the images and output pixels in order. */
static void FN(dw_bwdk_task)(void *ctx, int64_t t)
{
    const gx_job *jb = ctx;
    const gx_geom *g = jb->g;
    const T *x = jb->in0, *dy = jb->in1;
    T *dk = jb->out;
    const int64_t c = g->c, f = g->f, m = g->fg, nch = (f + GX_DW_CHUNK - 1) / GX_DW_CHUNK;
    const int64_t tap = t / nch, j0 = t % nch * GX_DW_CHUNK;
    const int64_t j1 = f - j0 < GX_DW_CHUNK ? f : j0 + GX_DW_CHUNK;
    const int64_t ky = tap / g->kw, kx = tap % g->kw;
    T *dkp = dk + tap * f;
    for (int64_t j = j0; j < j1; j++)
        dkp[j] = 0;
    for (int64_t img = 0; img < g->n; img++)
        for (int64_t oy = 0; oy < g->oh; oy++) {
            const int64_t iy = oy * g->sh - g->pt + ky * g->dh;
            if (iy < 0 || iy >= g->h)
                continue;
            for (int64_t ox = 0; ox < g->ow; ox++) {
                const int64_t ix = ox * g->sw - g->pl + kx * g->dw;
                if (ix < 0 || ix >= g->w)
                    continue;
                const T *xp = x + ((img * g->h + iy) * g->w + ix) * c;
                const T *dyp = dy + ((img * g->oh + oy) * g->ow + ox) * f;
                if (m == 1) {
#pragma omp simd
                    for (int64_t j = j0; j < j1; j++)
                        dkp[j] += xp[j] * dyp[j];
                } else {
                    for (int64_t j = j0; j < j1; j++)
                        dkp[j] += xp[j / m] * dyp[j];
                }
            }
        }
}

#undef FN
#undef GX_CAT
#undef GX_CAT_
