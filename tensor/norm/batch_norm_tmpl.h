/* batch_norm_tmpl.h: the batch-norm kernels of batch_norm.c for one dtype T (suffix SFX) and one
 * instruction set (BN_ATTR: the target attribute, empty for the baseline). x is viewed as (m, c):
 * rows of c channels. Included once per dtype and instruction set: the compiler vectorises the
 * channel loops for each, with the same operations per element in the same order, so every
 * instruction set gives the same bits. */
#define BN_CAT2(a, b) a##_##b
#define BN_CAT(a, b) BN_CAT2(a, b)
#define BN_FN(name) BN_CAT(name, SFX)

/* Rows [r0, r1) of channels [j0, j1) (j1 - j0 <= BN_TILE): stats: s1 += x - shift,
 * s2 += (x - shift)^2 (shift: the first row); sums: s1 += dy, s2 += dy (x - mean) (dy as 0 where
 * a mask is given and not > 0). Double accumulators on the stack, rows in order, written to
 * s1/s2 once at the end: tasks on other threads write the neighbouring chunks' partials, and
 * accumulating there row by row made the two cores fight over shared cache lines (mobilenet's
 * statistics 4-7x slower on 2 threads than on 1). */
static BN_ATTR void BN_FN(bn_block)(const bn_job *jb, int64_t r0, int64_t r1, int64_t j0,
                                    int64_t j1, double *s1, double *s2)
{
    const T *x = jb->x, *dy = jb->dy;
    const int64_t c = jb->c, w = j1 - j0;
    const double *ctr = jb->center + j0;
    double a1[BN_TILE], a2[BN_TILE];
    for (int64_t j = 0; j < w; j++)
        a1[j] = a2[j] = 0;
    if (dy == NULL) {
        for (int64_t r = r0; r < r1; r++) {
            const T *xr = x + r * c + j0;
            for (int64_t j = 0; j < w; j++) {
                double d = (double)xr[j] - ctr[j];
                a1[j] += d;
                a2[j] += d * d;
            }
        }
    } else if (jb->mask != NULL) { /* dy as 0 where the mask is not > 0 (relu's gradient) */
        const T *mk = jb->mask;
        T md[BN_TILE]; /* the row's masked dy: a select that vectorises, then the sums */
        for (int64_t r = r0; r < r1; r++) {
            const T *xr = x + r * c + j0, *gr = dy + r * c + j0, *mr = mk + r * c + j0;
            for (int64_t j = 0; j < w; j++) {
                const T gv = gr[j];
                md[j] = mr[j] > 0 ? gv : (T)0;
            }
            for (int64_t j = 0; j < w; j++) {
                double g = (double)md[j];
                a1[j] += g;
                a2[j] += g * ((double)xr[j] - ctr[j]);
            }
        }
    } else {
        for (int64_t r = r0; r < r1; r++) {
            const T *xr = x + r * c + j0, *gr = dy + r * c + j0;
            for (int64_t j = 0; j < w; j++) {
                double g = (double)gr[j];
                a1[j] += g;
                a2[j] += g * ((double)xr[j] - ctr[j]);
            }
        }
    }
    for (int64_t j = 0; j < w; j++) {
        s1[j] = a1[j];
        s2[j] = a2[j];
    }
}

/* y = x a + b rounded, + res (rounded), then relu when nj->relu: the add and relu kernels'
 * expressions in their order; rows [lo, hi). y may be x or res itself: element j is read before
 * it is written (omp simd: the lanes are independent though the pointers may alias). */
static BN_ATTR void BN_FN(bn_norm_res_rows)(const bn_norm_job *nj, int64_t lo, int64_t hi)
{
    const T *x = nj->x, *a = nj->a, *b = (const T *)nj->a + nj->c, *res = nj->res;
    T *y = nj->y;
    const int64_t c = nj->c;
    for (int64_t r = lo; r < hi; r++) {
        const T *xr = x + r * c, *rr = res + r * c;
        T *yr = y + r * c;
        if (nj->relu) {
#pragma omp simd
            for (int64_t j = 0; j < c; j++) {
                const T v = xr[j] * a[j] + b[j];
                const T w = v + rr[j];
                yr[j] = w < 0 ? (T)0 : w;
            }
            continue;
        }
#pragma omp simd
        for (int64_t j = 0; j < c; j++) {
            const T v = xr[j] * a[j] + b[j];
            yr[j] = v + rr[j];
        }
    }
}

/* y = x a + b per channel (then + res, then relu when nj->relu), rows [lo, hi) */
static BN_ATTR void BN_FN(bn_norm_rows)(void *ctx, int64_t lo, int64_t hi)
{
    const bn_norm_job *nj = ctx;
    const T *x = nj->x, *a = nj->a, *b = (const T *)nj->a + nj->c;
    T *y = nj->y;
    const int64_t c = nj->c;
    if (nj->res != NULL) {
        BN_FN(bn_norm_res_rows)(nj, lo, hi);
        return;
    }
    if (nj->relu) {
        /* relu's expression of sx_map.def on the rounded x a + b */
        for (int64_t r = lo; r < hi; r++) {
            const T *xr = x + r * c;
            T *yr = y + r * c;
            for (int64_t j = 0; j < c; j++) {
                const T v = xr[j] * a[j] + b[j];
                yr[j] = v < 0 ? (T)0 : v;
            }
        }
        return;
    }
    for (int64_t r = lo; r < hi; r++) {
        const T *xr = x + r * c;
        T *yr = y + r * c;
        for (int64_t j = 0; j < c; j++)
            yr[j] = xr[j] * a[j] + b[j];
    }
}

/* dx = dy a + (x - mean) k1 + k0 per channel (dy as 0 where y <= 0 when a mask y is given),
 * rows [lo, hi) */
static BN_ATTR void BN_FN(bn_dx_rows)(void *ctx, int64_t lo, int64_t hi)
{
    const bn_dx_job *dj = ctx;
    const int64_t c = dj->c;
    const T *x = dj->x, *dy = dj->dy, *y = dj->y, *mean = dj->k, *a = mean + c, *k1 = a + c,
            *k0 = k1 + c;
    T *dx = dj->dx;
    for (int64_t r = lo; r < hi; r++) {
        /* dx may be x, dy or y itself: element j is read before it is written, so the lanes are
         * independent (omp simd) though the pointers may alias */
        const T *xr = x + r * c, *gr = dy + r * c;
        T *dr = dx + r * c;
        if (y == NULL) {
#pragma omp simd
            for (int64_t j = 0; j < c; j++)
                dr[j] = gr[j] * a[j] + (xr[j] - mean[j]) * k1[j] + k0[j];
            continue;
        }
        const T *yr = y + r * c;
#pragma omp simd
        for (int64_t j = 0; j < c; j++) {
            /* both loaded, then selected: no branch on the mask */
            const T gv = gr[j], g = yr[j] > 0 ? gv : (T)0;
            dr[j] = g * a[j] + (xr[j] - mean[j]) * k1[j] + k0[j];
        }
    }
}

#undef BN_FN
#undef BN_CAT
#undef BN_CAT2
