/* 2-d convolution: forward, backward-input and backward-kernel against direct nested loops in
 * double (strides, SAME/VALID, odd sizes, kernels larger than the input, several channel
 * counts, f32 and f64), each run with the full workspace and with exactly the minimum one (the
 * banded units), the adjoint identities between the three, empty shapes, and the error paths.
 * The shapes cover the three implementations (direct kernels for small and medium kdim and
 * Winograd's F(2x2, 5x5) and F(4x4, 3x3) for 5x5 and 3x3 kernels at stride 1 on AVX-512
 * CPUs, im2col + GEMM
 * otherwise), filter counts that leave partial vectors, images larger than one unit,
 * workspaces of every size in between, and the same bits for any thread count. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cfg {
    int64_t n, h, w, c; /* x (n,h,w,c) */
    int64_t kh, kw, f;  /* k (kh,kw,c,f) */
    int sh, sw;
    sx_padding pad;
    int pt, pb, pl, pr; /* SX_PAD_EXPLICIT only: rows above / below, columns left / right */
} cfg;

static sx_conv2d_params params_of(const cfg *q)
{
    return (sx_conv2d_params){.stride_h = q->sh,
                              .stride_w = q->sw,
                              .padding = q->pad,
                              .pad_top = q->pt,
                              .pad_bottom = q->pb,
                              .pad_left = q->pl,
                              .pad_right = q->pr};
}

static const char *pad_name(sx_padding pad)
{
    return pad == SX_PAD_SAME ? "SAME" : pad == SX_PAD_VALID ? "VALID" : "EXPLICIT";
}

/* The test's own geometry, from TensorFlow's definitions: VALID oh = ceil((h - kh + 1) / sh),
 * SAME oh = ceil(h / sh) with total padding max((oh - 1) * sh + kh - h, 0), half before. */
typedef struct geo {
    int64_t oh, ow, pt, pl;
} geo;

static geo geo_of(const cfg *q)
{
    geo g;
    if (q->pad == SX_PAD_VALID) {
        g.oh = (q->h - q->kh + q->sh) / q->sh;
        g.ow = (q->w - q->kw + q->sw) / q->sw;
        g.pt = g.pl = 0;
    } else if (q->pad == SX_PAD_EXPLICIT) { /* PyTorch's: floor over the padded image */
        g.oh = (q->h + q->pt + q->pb - q->kh) / q->sh + 1;
        g.ow = (q->w + q->pl + q->pr - q->kw) / q->sw + 1;
        g.pt = q->pt;
        g.pl = q->pl;
    } else {
        g.oh = (q->h + q->sh - 1) / q->sh;
        g.ow = (q->w + q->sw - 1) / q->sw;
        int64_t th = (g.oh - 1) * q->sh + q->kh - q->h, tw = (g.ow - 1) * q->sw + q->kw - q->w;
        g.pt = th > 0 ? th / 2 : 0;
        g.pl = tw > 0 ? tw / 2 : 0;
    }
    return g;
}

/* Visit every (image, output pixel, kernel tap, channel, filter) whose tap falls inside x:
 * the one loop nest all three references share. xi, ki, yi are flat indices. */
#define FOR_TAPS(q, g, BODY)                                                                       \
    for (int64_t b = 0; b < (q)->n; b++)                                                           \
        for (int64_t oy = 0; oy < (g).oh; oy++)                                                    \
            for (int64_t ox = 0; ox < (g).ow; ox++)                                                \
                for (int64_t ky = 0; ky < (q)->kh; ky++)                                           \
                    for (int64_t kx = 0; kx < (q)->kw; kx++) {                                     \
                        int64_t iy = oy * (q)->sh + ky - (g).pt, ix = ox * (q)->sw + kx - (g).pl;  \
                        if (iy < 0 || iy >= (q)->h || ix < 0 || ix >= (q)->w)                      \
                            continue;                                                              \
                        for (int64_t ci = 0; ci < (q)->c; ci++)                                    \
                            for (int64_t fi = 0; fi < (q)->f; fi++) {                              \
                                int64_t xi = ((b * (q)->h + iy) * (q)->w + ix) * (q)->c + ci;      \
                                int64_t ki = ((ky * (q)->kw + kx) * (q)->c + ci) * (q)->f + fi;    \
                                int64_t yi = ((b * (g).oh + oy) * (g).ow + ox) * (q)->f + fi;      \
                                BODY;                                                              \
                            }                                                                      \
                    }

/* y = conv(x, k); dx = bwd_input(k, dy); dk = bwd_kernel(x, dy); each with the sum of |terms|
 * in mag (the scale of rounding errors). Outputs are zeroed first. */
static void ref_forward(const cfg *q, const sx_tensor *x, const sx_tensor *k, double *y,
                        double *mag, int64_t ny)
{
    geo g = geo_of(q);
    memset(y, 0, (size_t)ny * sizeof *y);
    memset(mag, 0, (size_t)ny * sizeof *mag);
    FOR_TAPS(q, g, {
        double t = sx_tensor_get(x, xi) * sx_tensor_get(k, ki);
        y[yi] += t;
        mag[yi] += fabs(t);
    });
}

static void ref_backward_input(const cfg *q, const sx_tensor *k, const sx_tensor *dy, double *dx,
                               double *mag, int64_t nx)
{
    geo g = geo_of(q);
    memset(dx, 0, (size_t)nx * sizeof *dx);
    memset(mag, 0, (size_t)nx * sizeof *mag);
    FOR_TAPS(q, g, {
        double t = sx_tensor_get(dy, yi) * sx_tensor_get(k, ki);
        dx[xi] += t;
        mag[xi] += fabs(t);
    });
}

static void ref_backward_kernel(const cfg *q, const sx_tensor *x, const sx_tensor *dy, double *dk,
                                double *mag, int64_t nk)
{
    geo g = geo_of(q);
    memset(dk, 0, (size_t)nk * sizeof *dk);
    memset(mag, 0, (size_t)nk * sizeof *mag);
    FOR_TAPS(q, g, {
        double t = sx_tensor_get(x, xi) * sx_tensor_get(dy, yi);
        dk[ki] += t;
        mag[ki] += fabs(t);
    });
}

/* Winograd's F(2x2, 5x5) and F(4x4, 3x3) (5x5 and 3x3 kernels at stride 1 with enough
 * channels, on AVX-512 CPUs) round on the scale of the largest terms of a tile rather than of
 * each sum: on shapes that may run them, results are compared on the scale of the largest sum
 * of |terms| of their group (an image and channel for forward and backward-input, a (channel,
 * filter) pair over the taps for backward-kernel; spread_mag). Measured on that scale (run with
 * ERRSTAT set to print the worst error of each check): F(2x2, 5x5) up to about 15 rounding
 * units (2^-24 or 2^-53) on ordinary shapes and 45 on degenerate ones (one or two output rows,
 * VALID, where the transforms' cancellation is largest), F(4x4, 3x3) up to 12; the tolerance
 * is about 200. */
static bool wino_shape(const cfg *q)
{
    if (q->sh != 1 || q->sw != 1)
        return false;
    if (q->kh == 5 && q->kw == 5)
        return q->c >= 8 && q->f >= 8;
    return q->kh == 3 && q->kw == 3 && q->c >= 4 && q->f >= 4;
}

static double tol_of(sx_dtype dt, const cfg *q)
{
    if (wino_shape(q))
        return dt == SX_F32 ? 1.2e-5 : 2.5e-14;
    return dt == SX_F32 ? 4e-6 : 1e-14;
}

/* mag (shape s) = the largest mag of each element's group: with taps, the elements that share
 * the last two indices (kernel (kh,kw,c,f): one (c, f) pair), else those that share the first
 * and the last (images (n,h,w,c): one image and channel). */
static void spread_mag(double *mag, const int64_t *s, bool taps)
{
    const int64_t outer = taps ? 1 : s[0], mid = taps ? s[0] * s[1] : s[1] * s[2];
    const int64_t inner = taps ? s[2] * s[3] : s[3];
    for (int64_t a = 0; a < outer; a++)
        for (int64_t j = 0; j < inner; j++) {
            double m = 0;
            for (int64_t p = 0; p < mid; p++)
                m = fmax(m, mag[(a * mid + p) * inner + j]);
            for (int64_t p = 0; p < mid; p++)
                mag[(a * mid + p) * inner + j] = m;
        }
}

static void expect_ref(const char *what, const cfg *q, const sx_tensor *got, const double *ref,
                       const double *mag)
{
    double tol = tol_of(got->dtype, q), worst = 0;
    for (int64_t i = 0; i < got->size; i++) {
        double v = sx_tensor_get(got, i);
        if (mag[i] > 0 && fabs(v - ref[i]) / mag[i] > worst)
            worst = fabs(v - ref[i]) / mag[i];
        cr_assert(fabs(v - ref[i]) <= tol * mag[i] + 1e-300,
                  "%s %s x(%lld,%lld,%lld,%lld) k(%lld,%lld,%lld,%lld) stride (%d,%d) %s: element "
                  "%lld got %.17g want %.17g",
                  what, sx_dtype_name(got->dtype), (long long)q->n, (long long)q->h,
                  (long long)q->w, (long long)q->c, (long long)q->kh, (long long)q->kw,
                  (long long)q->c, (long long)q->f, q->sh, q->sw, pad_name(q->pad), (long long)i, v,
                  ref[i]);
    }
    if (getenv("ERRSTAT") && wino_shape(q))
        fprintf(stderr, "ERRSTAT %s %s %lld,%lld,%lld,%lld k%lld f%lld %s: %.1f units\n", what,
                sx_dtype_name(got->dtype), (long long)q->n, (long long)q->h, (long long)q->w,
                (long long)q->c, (long long)q->kh, (long long)q->f, pad_name(q->pad),
                worst / (got->dtype == SX_F32 ? 0x1p-24 : 0x1p-53));
}

/* The references of one case: values and the scale of their rounding errors. */
typedef struct refs {
    double *y, *ymag, *dx, *dxmag, *dk, *dkmag;
} refs;

/* The three kernels with a workspace of ws_bytes bytes placed at byte offset `skew` (alignment
 * must not matter) and filled with NaN bytes (no kernel may read scratch it did not write),
 * each into an output pre-filled with NaN, against the references. The results are left in y,
 * dx, dk for the caller to compare across workspaces. */
static void run_case(const cfg *q, size_t ws_bytes, size_t skew, const refs *r, sx_tensor *x,
                     sx_tensor *k, sx_tensor *dy, sx_tensor *y, sx_tensor *dx, sx_tensor *dk)
{
    sx_conv2d_params p = params_of(q);
    /* exactly ws_bytes past the skew, so that ASan sees any write beyond the workspace */
    char *buf = malloc(ws_bytes + skew + (ws_bytes == 0));
    void *ws = ws_bytes == 0 ? buf : buf + skew;

    memset(ws, 0xff, ws_bytes);
    cr_assert_eq(sx_tensor_fill(y, (double)NAN), SX_OK);
    cr_assert_eq(sx_tensor_conv2d_out(x, k, &p, ws, ws_bytes, y), SX_OK, "%s", sx_last_error());
    expect_ref("forward", q, y, r->y, r->ymag);

    memset(ws, 0xff, ws_bytes);
    cr_assert_eq(sx_tensor_fill(dx, (double)NAN), SX_OK);
    cr_assert_eq(sx_tensor_conv2d_backward_input_out(k, dy, &p, ws, ws_bytes, dx), SX_OK, "%s",
                 sx_last_error());
    expect_ref("backward_input", q, dx, r->dx, r->dxmag);

    memset(ws, 0xff, ws_bytes);
    cr_assert_eq(sx_tensor_fill(dk, (double)NAN), SX_OK);
    cr_assert_eq(sx_tensor_conv2d_backward_kernel_out(x, dy, &p, ws, ws_bytes, dk), SX_OK, "%s",
                 sx_last_error());
    expect_ref("backward_kernel", q, dk, r->dk, r->dkmag);
    free(buf);
}

/* Both workspaces give the same numbers: the blocked path is the same computation cut into
 * pieces, so only the order of the GEMMs' sums differs (backward-kernel adds the blocks'
 * products): equal up to rounding on the scale mag of each sum. */
static void expect_same(const char *what, const cfg *q, const sx_tensor *a, const sx_tensor *b,
                        const double *mag)
{
    double tol = wino_shape(q) ? 2 * tol_of(a->dtype, q) : a->dtype == SX_F32 ? 1e-6 : 1e-15;
    for (int64_t i = 0; i < a->size; i++) {
        double u = sx_tensor_get(a, i), v = sx_tensor_get(b, i);
        cr_assert(fabs(u - v) <= tol * mag[i] + 1e-300, "%s: full %.17g, blocked %.17g", what, u,
                  v);
    }
}

static double *dalloc(int64_t n)
{
    double *p = malloc((size_t)(n + 1) * sizeof *p);
    cr_assert_not_null(p);
    return p;
}

/* Run one configuration in both dtypes, with the full and the minimum workspace. Returns true
 * when the minimum workspace really was smaller (the blocked path ran). */
static bool check_cfg(sx_rng *rng, const cfg *q)
{
    geo g = geo_of(q);
    int64_t xs[4] = {q->n, q->h, q->w, q->c}, ks[4] = {q->kh, q->kw, q->c, q->f};
    int64_t ys[4] = {q->n, g.oh, g.ow, q->f};
    sx_conv2d_params p = params_of(q);
    size_t full = sx_conv2d_workspace(xs, ks, &p), min = sx_conv2d_workspace_min(xs, ks, &p);
    cr_assert_leq(min, full);
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = d ? SX_F64 : SX_F32;
        sx_tensor *x = tu_rand(rng, dt, 4, xs, -1, 1), *k = tu_rand(rng, dt, 4, ks, -1, 1);
        sx_tensor *dy = tu_rand(rng, dt, 4, ys, -1, 1);
        int64_t ys_got[4];
        cr_assert_eq(sx_conv2d_shape("t", x, k, &p, ys_got), SX_OK, "%s", sx_last_error());
        cr_assert_eq(memcmp(ys, ys_got, sizeof ys), 0, "output shape");
        refs r = {dalloc(dy->size), dalloc(dy->size), dalloc(x->size),
                  dalloc(x->size),  dalloc(k->size),  dalloc(k->size)};
        ref_forward(q, x, k, r.y, r.ymag, dy->size);
        ref_backward_input(q, k, dy, r.dx, r.dxmag, x->size);
        ref_backward_kernel(q, x, dy, r.dk, r.dkmag, k->size);
        if (wino_shape(q)) {
            spread_mag(r.ymag, ys, false);
            spread_mag(r.dxmag, xs, false);
            spread_mag(r.dkmag, ks, true);
        }
        sx_tensor *y1 = tu_zeros(dt, 4, ys), *dx1 = tu_zeros(dt, 4, xs), *dk1 = tu_zeros(dt, 4, ks);
        sx_tensor *y2 = tu_zeros(dt, 4, ys), *dx2 = tu_zeros(dt, 4, xs), *dk2 = tu_zeros(dt, 4, ks);
        run_case(q, full, 0, &r, x, k, dy, y1, dx1, dk1);
        run_case(q, min, 3, &r, x, k, dy, y2, dx2, dk2);
        expect_same("forward", q, y1, y2, r.ymag);
        expect_same("backward_input", q, dx1, dx2, r.dxmag);
        expect_same("backward_kernel", q, dk1, dk2, r.dkmag);
        sx_tensor *all[] = {x, k, dy, y1, dx1, dk1, y2, dx2, dk2};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            sx_tensor_free(all[i]);
        double *ds[] = {r.y, r.ymag, r.dx, r.dxmag, r.dk, r.dkmag};
        for (size_t i = 0; i < 6; i++)
            free(ds[i]);
    }
    return min < full;
}

static const cfg fixed[] = {
    {3, 11, 9, 3, 3, 3, 4, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {3, 11, 9, 3, 3, 3, 4, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
    {2, 13, 10, 2, 5, 4, 3, 2, 2, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 13, 10, 2, 5, 4, 3, 2, 2, SX_PAD_VALID, 0, 0, 0, 0},
    {3, 12, 17, 1, 3, 5, 5, 1, 2, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 15, 14, 4, 4, 2, 3, 3, 2, SX_PAD_VALID, 0, 0, 0, 0},
    {2, 16, 15, 3, 2, 3, 2, 2, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {3, 14, 13, 3, 2, 2, 5, 3, 3, SX_PAD_VALID, 0, 0, 0, 0},
    {2, 9, 9, 16, 3, 3, 8, 2, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {1, 28, 28, 1, 5, 5, 4, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {6, 10, 12, 6, 3, 3, 7, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {4, 8, 8, 5, 4, 4, 3, 2, 2, SX_PAD_SAME, 0, 0, 0, 0},
};

/* Shapes where one whole image row of im2col is already bigger than the minimum block, or the
 * input is smaller than the kernel, or the special cases where x is the im2col matrix. */
static const cfg corners[] = {
    {4, 2, 3, 3, 5, 4, 2, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},   /* input smaller than the kernel */
    {3, 3, 2, 2, 5, 5, 3, 2, 3, SX_PAD_SAME, 0, 0, 0, 0},   /* ... with strides */
    {2, 1, 1, 3, 3, 3, 2, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},   /* a single pixel */
    {2, 10, 11, 8, 1, 1, 6, 1, 1, SX_PAD_SAME, 0, 0, 0, 0}, /* 1x1 stride 1: x is the matrix */
    {2, 10, 11, 8, 1, 1, 6, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
    {2, 10, 11, 8, 1, 1, 6, 2, 2, SX_PAD_VALID, 0, 0, 0, 0}, /* 1x1 strided: im2col subsamples */
    {5, 6, 7, 3, 6, 7, 4, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},   /* window = image: x is the matrix */
    {5, 6, 7, 3, 6, 7, 4, 7, 7, SX_PAD_SAME, 0, 0, 0, 0},    /* the same through SAME */
    {3, 6, 7, 3, 6, 7, 4, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},    /* window = image, padded */
    {2, 5, 40, 2, 3, 3, 3, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},   /* ow > minimum block rows */
    {2, 7, 7, 1, 7, 1, 2, 1, 3, SX_PAD_VALID, 0, 0, 0, 0},   /* tall kernel */
};

Test(tensor_conv, fixed_shapes_full_and_blocked_workspace)
{
    sx_rng rng;
    sx_rng_seed(&rng, 11);
    int blocked = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        blocked += check_cfg(&rng, &fixed[i]);
    cr_assert_geq(blocked, 8, "the minimum workspace forced the blocked path (%d)", blocked);
}

Test(tensor_conv, corner_shapes)
{
    sx_rng rng;
    sx_rng_seed(&rng, 12);
    for (size_t i = 0; i < sizeof corners / sizeof corners[0]; i++)
        check_cfg(&rng, &corners[i]);
}

Test(tensor_conv, random_shapes)
{
    sx_rng rng;
    sx_rng_seed(&rng, 13);
    for (int rep = 0; rep < 30; rep++) {
        cfg q;
        q.n = 1 + (int64_t)sx_rng_below(&rng, 3);
        q.h = 1 + (int64_t)sx_rng_below(&rng, 12);
        q.w = 1 + (int64_t)sx_rng_below(&rng, 12);
        q.c = 1 + (int64_t)sx_rng_below(&rng, 5);
        q.kh = 1 + (int64_t)sx_rng_below(&rng, 5);
        q.kw = 1 + (int64_t)sx_rng_below(&rng, 5);
        q.f = 1 + (int64_t)sx_rng_below(&rng, 5);
        q.sh = 1 + (int)sx_rng_below(&rng, 3);
        q.sw = 1 + (int)sx_rng_below(&rng, 3);
        q.pad = sx_rng_below(&rng, 2) ? SX_PAD_SAME : SX_PAD_VALID;
        if (q.pad == SX_PAD_VALID && (q.kh > q.h || q.kw > q.w))
            q.pad = SX_PAD_SAME;
        check_cfg(&rng, &q);
    }
}

/* Winograd's F(2x2, 5x5): 5x5 kernels at stride 1, images of odd and even sizes, smaller than
 * the kernel, a single pixel, one output row; channel counts that leave partial vectors; and
 * shapes where only some of the three kernels qualify (their GEMMs must sum over at least 16
 * channels and produce at least 8). */
static const cfg wino[] = {
    {2, 14, 14, 16, 5, 5, 16, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {1, 9, 11, 17, 5, 5, 20, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
    {2, 7, 6, 33, 5, 5, 70, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {3, 1, 1, 16, 5, 5, 16, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 3, 2, 24, 5, 5, 18, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {1, 5, 9, 16, 5, 5, 16, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
    {2, 13, 4, 20, 5, 5, 9, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 10, 10, 8, 5, 5, 40, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {1, 6, 5, 16, 5, 5, 8, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
};

/* Winograd's F(4x4, 3x3): 3x3 kernels at stride 1, images of sizes that leave partial tiles or
 * none, smaller than the kernel, one output row; channel counts that leave partial vectors; and
 * shapes where only some of the three kernels qualify (their GEMMs must sum over at least 8
 * channels and produce at least 4, on images of at least 25 output pixels, backward-kernel
 * 36). */
static const cfg wino3[] = {
    {2, 14, 14, 16, 3, 3, 16, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {1, 9, 11, 17, 3, 3, 20, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
    {2, 7, 6, 33, 3, 3, 70, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {3, 2, 2, 16, 3, 3, 16, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 8, 8, 8, 3, 3, 8, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {7, 7, 7, 12, 3, 3, 20, 1, 1, SX_PAD_SAME, 0, 0, 0, 0}, /* several images per unit */
    {11, 6, 9, 8, 3, 3, 8, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {1, 5, 5, 12, 3, 3, 4, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 13, 4, 20, 3, 3, 9, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 10, 10, 4, 3, 3, 40, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {1, 3, 30, 16, 3, 3, 8, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
    {1, 6, 7, 16, 3, 3, 16, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
    {2, 25, 17, 24, 3, 3, 20, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
};

/* <conv(x,k), g> == <x, bwd_input(k,g)> == <k, bwd_kernel(x,g)>: the backward rules are the
 * adjoints of the forward map, in each argument; with the minimum and the full workspace (the
 * latter runs Winograd on its shapes). */
Test(tensor_conv, backward_rules_are_adjoints)
{
    sx_rng rng;
    sx_rng_seed(&rng, 14);
    const cfg all[] = {fixed[2], fixed[4], fixed[5], corners[0], corners[5], corners[8],
                       wino[0],  wino[2],  wino[6],  wino3[0],   wino3[2],   wino3[8]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        for (int d = 0; d < 4; d++) {
            const cfg *q = &all[i];
            sx_dtype dt = d % 2 ? SX_F64 : SX_F32;
            geo g = geo_of(q);
            int64_t xs[4] = {q->n, q->h, q->w, q->c}, ks[4] = {q->kh, q->kw, q->c, q->f};
            int64_t ys[4] = {q->n, g.oh, g.ow, q->f};
            sx_conv2d_params p = params_of(q);
            size_t wsb =
                d < 2 ? sx_conv2d_workspace_min(xs, ks, &p) : sx_conv2d_workspace(xs, ks, &p);
            void *ws = malloc(wsb + 1);
            sx_tensor *x = tu_rand(&rng, dt, 4, xs, -1, 1), *k = tu_rand(&rng, dt, 4, ks, -1, 1);
            sx_tensor *gy = tu_rand(&rng, dt, 4, ys, -1, 1);
            sx_tensor *y = tu_zeros(dt, 4, ys), *dx = tu_zeros(dt, 4, xs),
                      *dk = tu_zeros(dt, 4, ks);
            cr_assert_eq(sx_tensor_conv2d_out(x, k, &p, ws, wsb, y), SX_OK);
            cr_assert_eq(sx_tensor_conv2d_backward_input_out(k, gy, &p, ws, wsb, dx), SX_OK);
            cr_assert_eq(sx_tensor_conv2d_backward_kernel_out(x, gy, &p, ws, wsb, dk), SX_OK);
            double a = 0, b = 0, c = 0, scale = 0;
            for (int64_t j = 0; j < y->size; j++) {
                a += sx_tensor_get(y, j) * sx_tensor_get(gy, j);
                scale += fabs(sx_tensor_get(y, j) * sx_tensor_get(gy, j));
            }
            for (int64_t j = 0; j < x->size; j++)
                b += sx_tensor_get(x, j) * sx_tensor_get(dx, j);
            for (int64_t j = 0; j < k->size; j++)
                c += sx_tensor_get(k, j) * sx_tensor_get(dk, j);
            double tol = (dt == SX_F32 ? 1e-5 : 1e-13) * (scale + 1);
            cr_assert(fabs(a - b) <= tol && fabs(a - c) <= tol,
                      "case %zu %s: <y,g> %.17g <x,dx> %.17g <k,dk> %.17g", i, sx_dtype_name(dt), a,
                      b, c);
            sx_tensor *ts[] = {x, k, gy, y, dx, dk};
            for (size_t j = 0; j < 6; j++)
                sx_tensor_free(ts[j]);
            free(ws);
        }
}

/* Empty batches, no channels, no filters, an empty image with SAME: outputs of the right shape,
 * zeros where a sum is empty (over NaN). */
Test(tensor_conv, empty_shapes)
{
    sx_rng rng;
    sx_rng_seed(&rng, 15);
    const cfg empty[] = {
        {0, 5, 5, 2, 3, 3, 2, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
        {2, 5, 5, 0, 3, 3, 2, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
        {2, 5, 5, 2, 3, 3, 0, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
        {2, 0, 5, 2, 3, 3, 2, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
        {2, 5, 5, 0, 1, 1, 2, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++)
        check_cfg(&rng, &empty[i]);
}

Test(tensor_conv, allocating_form_and_out_of_memory)
{
    sx_rng rng;
    sx_rng_seed(&rng, 16);
    const cfg *q = &fixed[0];
    geo g = geo_of(q);
    int64_t xs[4] = {q->n, q->h, q->w, q->c}, ks[4] = {q->kh, q->kw, q->c, q->f};
    sx_conv2d_params p = params_of(q);
    sx_tensor *x = tu_rand(&rng, SX_F64, 4, xs, -1, 1), *k = tu_rand(&rng, SX_F64, 4, ks, -1, 1);
    sx_tensor *y = NULL;
    cr_assert_eq(sx_tensor_conv2d(x, k, &p, &y), SX_OK, "%s", sx_last_error());
    cr_assert(y->rank == 4 && y->shape[1] == g.oh && y->shape[2] == g.ow && y->shape[3] == q->f);
    double *ref = malloc((size_t)y->size * sizeof *ref), *mag = malloc((size_t)y->size * 8);
    ref_forward(q, x, k, ref, mag, y->size);
    expect_ref("allocating forward", q, y, ref, mag);
    free(ref);
    free(mag);
    sx_tensor_free(y);
    for (long n = 0; n < 3; n++) { /* workspace, descriptor, data */
        tu_fail_after(n);
        y = (sx_tensor *)1;
        sx_status s = sx_tensor_conv2d(x, k, &p, &y);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(s, SX_E_NOMEM, "failing allocation %ld", n);
        cr_assert_null(y);
        cr_assert_eq(live, 0, "nothing leaks after a failed allocation");
    }
    cr_assert_eq(sx_tensor_conv2d(x, k, &p, NULL), SX_E_ARG);
    sx_tensor_free(x);
    sx_tensor_free(k);
}

/* Two runs give the same bits (col2im gathers per input row in a fixed order). */
Test(tensor_conv, reproducible_results)
{
    sx_rng rng;
    sx_rng_seed(&rng, 17);
    int64_t xs[4] = {8, 20, 20, 6}, ks[4] = {5, 5, 6, 8}, ys[4] = {8, 10, 10, 8};
    sx_conv2d_params p = {.stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME};
    size_t wsb = sx_conv2d_workspace(xs, ks, &p);
    void *ws = malloc(wsb);
    sx_tensor *k = tu_rand(&rng, SX_F32, 4, ks, -1, 1), *dy = tu_rand(&rng, SX_F32, 4, ys, -1, 1);
    sx_tensor *a = tu_zeros(SX_F32, 4, xs), *b = tu_zeros(SX_F32, 4, xs);
    cr_assert_eq(sx_tensor_conv2d_backward_input_out(k, dy, &p, ws, wsb, a), SX_OK);
    cr_assert_eq(sx_tensor_conv2d_backward_input_out(k, dy, &p, ws, wsb, b), SX_OK);
    cr_assert_eq(memcmp(a->data, b->data, (size_t)a->size * 4), 0);
    sx_tensor_free(k);
    sx_tensor_free(dy);
    sx_tensor_free(a);
    sx_tensor_free(b);
    free(ws);
}

/* Winograd writes outputs of 4 MB or more past the caches (streaming stores, when the output is
 * 64-byte aligned and its rows whole vectors): the same bits as the ordinary stores it uses for
 * the same output one element off alignment. Forward and backward-input, f32 and f64, at two
 * threads (each thread's streamed stores are complete before the kernel returns). */
Test(tensor_conv, streamed_outputs_equal_cached_ones, .timeout = 120)
{
    sx_rng rng;
    sx_rng_seed(&rng, 23);
    cr_assert_eq(sx_threads_set(2), SX_OK);
    const sx_dtype dts[2] = {SX_F32, SX_F64};
    for (int d = 0; d < 2; d++) {
        const size_t esz = sx_dtype_size(dts[d]);
        int64_t xs[4] = {4, 64, 64, 64}, ks[4] = {3, 3, 64, 64};
        sx_conv2d_params p = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
        const size_t wsb = sx_conv2d_workspace(xs, ks, &p), bytes = 4 * 64 * 64 * 64 * esz;
        void *ws = malloc(wsb);
        char *buf = aligned_alloc(64, 2 * bytes + 128);
        cr_assert(ws != NULL && buf != NULL);
        sx_tensor *x = tu_rand(&rng, dts[d], 4, xs, -1, 1),
                  *k = tu_rand(&rng, dts[d], 4, ks, -1, 1);
        sx_tensor a = sx_tensor_view(dts[d], 4, xs, buf);
        sx_tensor b = sx_tensor_view(dts[d], 4, xs, buf + bytes + 64 + esz);
        cr_assert_eq(sx_tensor_conv2d_out(x, k, &p, ws, wsb, &a), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_tensor_conv2d_out(x, k, &p, ws, wsb, &b), SX_OK, "%s", sx_last_error());
        cr_assert_eq(memcmp(a.data, b.data, bytes), 0, "forward, %s", sx_dtype_name(dts[d]));
        /* backward-input of the same shape: dy = x */
        cr_assert_eq(sx_tensor_conv2d_backward_input_out(k, x, &p, ws, wsb, &a), SX_OK, "%s",
                     sx_last_error());
        cr_assert_eq(sx_tensor_conv2d_backward_input_out(k, x, &p, ws, wsb, &b), SX_OK, "%s",
                     sx_last_error());
        cr_assert_eq(memcmp(a.data, b.data, bytes), 0, "backward-input, %s", sx_dtype_name(dts[d]));
        sx_tensor_free(x);
        sx_tensor_free(k);
        free(buf);
        free(ws);
    }
    cr_assert_eq(sx_threads_set(0), SX_OK);
}

Test(tensor_conv, workspace_sizes)
{
    sx_conv2d_params p = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    /* 1x1 stride 1 needs none */
    int64_t xs[4] = {100, 28, 28, 1}, k1[4] = {1, 1, 1, 32}, k5[4] = {5, 5, 1, 32};
    cr_assert_eq(sx_conv2d_workspace(xs, k1, &p), 0);
    cr_assert_eq(sx_conv2d_workspace_min(xs, k1, &p), 0);
    /* MNIST's first layer: some scratch, the minimum no more than the full size, and far below
     * the whole im2col matrix (100 * 784 rows of 25) */
    size_t full = sx_conv2d_workspace(xs, k5, &p), min = sx_conv2d_workspace_min(xs, k5, &p);
    cr_assert(min > 0 && min <= full, "min %zu full %zu", min, full);
    cr_assert_lt(full, (size_t)100 * 784 * 25 * 4 / 4);
    /* a layer with many channels: the minimum is well below the full size */
    int64_t xc[4] = {100, 28, 28, 64}, kc[4] = {5, 5, 64, 64};
    cr_assert_lt(sx_conv2d_workspace_min(xc, kc, &p), sx_conv2d_workspace(xc, kc, &p) / 2);
    /* a huge problem: the workspace stays well below the whole matrix */
    int64_t big[4] = {1000, 64, 64, 64}, kb[4] = {3, 3, 64, 64};
    size_t whole = (size_t)1000 * 64 * 64 * 9 * 64 * 4;
    cr_assert_lt(sx_conv2d_workspace(big, kb, &p), whole / 100);
    cr_assert_geq(sx_conv2d_workspace(big, kb, &p), sx_conv2d_workspace_min(big, kb, &p));
    /* invalid input: 0 (the kernels then report the error), and the last message is kept */
    int64_t bad[4] = {1, 5, 5, 2};
    (void)sx_error(SX_E_IO, "earlier message");
    cr_assert_eq(sx_conv2d_workspace(bad, k5, &p), 0);
    cr_assert_eq(sx_conv2d_workspace_min(bad, k5, &p), 0);
    cr_assert_str_eq(sx_last_error(), "earlier message");
    cr_assert_eq(sx_conv2d_workspace(xs, k5, NULL), 0);
}

/* Larger shapes, around the choices between the two implementations: kdim 25 (MNIST's first
 * layer, filters = two vectors), up to and above the direct backward-input limit (128) and the
 * direct limit (2048), filter counts that leave a partial vector in f32 and f64, strides with
 * small kdim (direct forward and backward-kernel, GEMM backward-input), and images too large
 * for one unit even with the full workspace (bands). */
static const cfg larger[] = {
    {2, 28, 28, 1, 5, 5, 32, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 11, 10, 14, 3, 3, 40, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 9, 9, 24, 3, 3, 21, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
    {3, 17, 13, 5, 4, 3, 20, 2, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 16, 15, 6, 5, 5, 9, 2, 2, SX_PAD_VALID, 0, 0, 0, 0},
    {1, 5, 6, 240, 3, 3, 3, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {1, 72, 72, 40, 3, 3, 4, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {1, 80, 80, 2, 3, 3, 40, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 7, 7, 8, 7, 7, 17, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
};

Test(tensor_conv, larger_shapes_both_paths, .timeout = 120)
{
    sx_rng rng;
    sx_rng_seed(&rng, 19);
    for (size_t i = 0; i < sizeof larger / sizeof larger[0]; i++)
        check_cfg(&rng, &larger[i]);
}

/* The shapes of Winograd's F(2x2, 5x5) and F(4x4, 3x3) against the references, in both dtypes,
 * with the full workspace (Winograd) and the minimum (the direct kernels). */
Test(tensor_conv, winograd_shapes, .timeout = 120)
{
    sx_rng rng;
    sx_rng_seed(&rng, 21);
    for (size_t i = 0; i < sizeof wino / sizeof wino[0]; i++)
        check_cfg(&rng, &wino[i]);
    for (size_t i = 0; i < sizeof wino3 / sizeof wino3[0]; i++)
        check_cfg(&rng, &wino3[i]);
}

/* Winograd's transformed kernel (36 c f elements) is read whole by every block of tiles: too
 * large for the last-level cache (1024 channels: 151 MB), the best workspace leaves it out and
 * the direct kernels run (still against the references); a small one keeps it where the CPU
 * has Winograd. */
Test(tensor_conv, winograd_only_while_its_kernel_stays_in_cache, .timeout = 120)
{
    sx_conv2d_params p = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    const int64_t xs[4] = {1, 5, 5, 1024}, ks[4] = {3, 3, 1024, 1024};
    const size_t big = (size_t)36 * 1024 * 1024 * sizeof(float);
    size_t ws = sx_conv2d_workspace(xs, ks, &p);
    cr_assert(ws > 0 && ws < big, "best workspace %zu holds the transformed kernel (%zu)", ws, big);
    const int64_t xs2[4] = {1, 8, 8, 64}, ks2[4] = {3, 3, 64, 64};
    if (strcmp(sx_isa_name(), "avx512") == 0 || strcmp(sx_isa_name(), "avx2") == 0)
        cr_assert_geq(sx_conv2d_workspace(xs2, ks2, &p), (size_t)36 * 64 * 64 * sizeof(double));
    sx_rng rng;
    sx_rng_seed(&rng, 25);
    const cfg big_c = {1, 5, 5, 1024, 3, 3, 40, 1, 1, SX_PAD_SAME, 0, 0, 0, 0};
    check_cfg(&rng, &big_c);
}

/* Explicit pads smaller than the window (PyTorch's Conv2d(padding=p)) run conv.c's dense kernels
 * like SAME: resnet's stride-2 3x3 convolutions with one pad on every side (direct forward and
 * backward-kernel, backward-input by phases), pads on one side only, Winograd's shapes
 * at stride 1, 5x5 kernels, 1x1 strided, images smaller than the window, the backward-input
 * gather (few channels), and the identity 1x1 (x is the im2col matrix). */
static const cfg explicit_pads[] = {
    {3, 28, 28, 16, 3, 3, 32, 2, 2, SX_PAD_EXPLICIT, 1, 1, 1, 1},
    {2, 14, 14, 32, 3, 3, 64, 2, 2, SX_PAD_EXPLICIT, 1, 1, 1, 1},
    {2, 13, 11, 8, 3, 3, 8, 1, 1, SX_PAD_EXPLICIT, 1, 1, 1, 1},
    {2, 12, 10, 12, 3, 3, 6, 1, 1, SX_PAD_EXPLICIT, 2, 0, 0, 2},
    {2, 12, 10, 5, 3, 3, 6, 1, 1, SX_PAD_EXPLICIT, 0, 2, 2, 0},
    {2, 10, 9, 16, 5, 5, 16, 1, 1, SX_PAD_EXPLICIT, 2, 2, 2, 2},
    {2, 9, 10, 3, 5, 5, 4, 2, 1, SX_PAD_EXPLICIT, 4, 1, 0, 3},
    {2, 10, 11, 8, 1, 1, 6, 2, 2, SX_PAD_EXPLICIT, 0, 0, 0, 0},
    {2, 10, 11, 8, 1, 1, 6, 1, 1, SX_PAD_EXPLICIT, 0, 0, 0, 0},
    {2, 9, 8, 3, 3, 3, 20, 1, 1, SX_PAD_EXPLICIT, 1, 0, 2, 1},
    {2, 2, 2, 3, 3, 3, 4, 1, 1, SX_PAD_EXPLICIT, 1, 1, 1, 1},
    {2, 7, 7, 4, 4, 4, 5, 3, 3, SX_PAD_EXPLICIT, 3, 3, 3, 3},
    {2, 15, 14, 6, 3, 3, 9, 2, 3, SX_PAD_EXPLICIT, 0, 1, 2, 0},
};

Test(tensor_conv, explicit_pads_run_the_dense_kernels, .timeout = 120)
{
    sx_rng rng;
    sx_rng_seed(&rng, 23);
    for (size_t i = 0; i < sizeof explicit_pads / sizeof explicit_pads[0]; i++)
        check_cfg(&rng, &explicit_pads[i]);
}

/* Strided backward-input runs by phases (each phase of dx a stride-1 correlation of dy with a
 * sub-kernel) when dx's channels fill a vector (16 in f32, 8 in f64; f32 with 8 channels takes
 * the GEMM path), and the direct forward and backward-kernel read x in place when no window
 * leaves it: resnet's 3x3 and 1x1 stride-2 layers, odd and even sizes, pads 0, 1 and
 * asymmetric, SAME's split, stride 3 and mixed strides, kernels smaller than the stride (phases
 * without taps are zeros), filters leaving partial vectors, phase grids whose last tile is
 * partial, and an image cut into bands of unequal height (f64) even with the full workspace. */
static const cfg strided[] = {
    {3, 28, 28, 16, 3, 3, 32, 2, 2, SX_PAD_EXPLICIT, 1, 1, 1, 1},
    {2, 15, 13, 16, 3, 3, 20, 2, 2, SX_PAD_EXPLICIT, 1, 1, 1, 1},
    {2, 14, 15, 32, 3, 3, 17, 2, 2, SX_PAD_VALID, 0, 0, 0, 0},
    {2, 13, 12, 16, 3, 3, 9, 2, 2, SX_PAD_EXPLICIT, 0, 1, 1, 0},
    {2, 12, 13, 24, 3, 3, 8, 2, 2, SX_PAD_EXPLICIT, 2, 0, 0, 2},
    {2, 15, 16, 16, 3, 3, 16, 2, 2, SX_PAD_SAME, 0, 0, 0, 0},
    {3, 14, 14, 32, 1, 1, 64, 2, 2, SX_PAD_EXPLICIT, 0, 0, 0, 0},
    {2, 13, 11, 16, 1, 1, 24, 2, 2, SX_PAD_VALID, 0, 0, 0, 0},
    {2, 12, 12, 8, 1, 1, 5, 2, 2, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 11, 12, 16, 3, 3, 8, 2, 1, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 13, 14, 16, 5, 4, 8, 3, 2, SX_PAD_SAME, 0, 0, 0, 0},
    {2, 10, 11, 16, 2, 2, 8, 3, 3, SX_PAD_VALID, 0, 0, 0, 0},
    {2, 9, 10, 8, 4, 4, 12, 3, 3, SX_PAD_EXPLICIT, 3, 1, 2, 3},
    {1, 49, 49, 16, 3, 3, 128, 2, 2, SX_PAD_EXPLICIT, 1, 1, 1, 1},
};

Test(tensor_conv, strided_backward_input_by_phases, .timeout = 120)
{
    sx_rng rng;
    sx_rng_seed(&rng, 24);
    for (size_t i = 0; i < sizeof strided / sizeof strided[0]; i++)
        check_cfg(&rng, &strided[i]);
}

/* Workspaces between the minimum and the full size: each either runs the direct kernels or
 * Winograd with fewer slots, fewer partial sums of backward-kernel, and bands of an even number
 * of rows (one image of 30 rows does not fit the smaller ones whole), and for the stride-2
 * shapes the phases of backward-input on bands of every height; all agree with the
 * references. The workspace is filled with NaN bytes: nothing may be read before it is
 * written. */
Test(tensor_conv, winograd_any_workspace, .timeout = 120)
{
    static const cfg cases[] = {{3, 30, 9, 16, 5, 5, 16, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
                                {2, 11, 30, 16, 5, 5, 24, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
                                {3, 30, 9, 16, 3, 3, 16, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
                                {2, 13, 30, 12, 3, 3, 24, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
                                {9, 7, 7, 16, 3, 3, 24, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
                                {3, 31, 9, 16, 3, 3, 16, 2, 2, SX_PAD_EXPLICIT, 1, 0, 1, 1},
                                {2, 29, 30, 16, 1, 1, 24, 2, 2, SX_PAD_VALID, 0, 0, 0, 0}};
    sx_rng rng;
    sx_rng_seed(&rng, 22);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int d = 0; d < 2; d++) {
            const cfg *q = &cases[i];
            const sx_dtype dt = d ? SX_F64 : SX_F32;
            geo g = geo_of(q);
            int64_t xs[4] = {q->n, q->h, q->w, q->c}, ks[4] = {q->kh, q->kw, q->c, q->f};
            int64_t ys[4] = {q->n, g.oh, g.ow, q->f};
            sx_conv2d_params p = params_of(q);
            size_t full = sx_conv2d_workspace(xs, ks, &p),
                   min = sx_conv2d_workspace_min(xs, ks, &p);
            sx_tensor *x = tu_rand(&rng, dt, 4, xs, -1, 1), *k = tu_rand(&rng, dt, 4, ks, -1, 1);
            sx_tensor *dy = tu_rand(&rng, dt, 4, ys, -1, 1);
            refs r = {dalloc(dy->size), dalloc(dy->size), dalloc(x->size),
                      dalloc(x->size),  dalloc(k->size),  dalloc(k->size)};
            ref_forward(q, x, k, r.y, r.ymag, dy->size);
            ref_backward_input(q, k, dy, r.dx, r.dxmag, x->size);
            ref_backward_kernel(q, x, dy, r.dk, r.dkmag, k->size);
            spread_mag(r.ymag, ys, false);
            spread_mag(r.dxmag, xs, false);
            spread_mag(r.dkmag, ks, true);
            sx_tensor *y = tu_zeros(dt, 4, ys), *dx = tu_zeros(dt, 4, xs),
                      *dk = tu_zeros(dt, 4, ks);
            /* geometric steps from min to full; every fourth under emulation */
            for (int s = 0; s <= 16; s += tu_emulated() ? 4 : 1) {
                size_t wsb = (size_t)((double)min * pow((double)full / (double)min, s / 16.0));
                wsb = s == 16 ? full : wsb < min ? min : wsb;
                run_case(q, wsb, (size_t)s % 5, &r, x, k, dy, y, dx, dk);
            }
            sx_tensor *ts[] = {x, k, dy, y, dx, dk};
            for (size_t j = 0; j < 6; j++)
                sx_tensor_free(ts[j]);
            double *ds[] = {r.y, r.ymag, r.dx, r.dxmag, r.dk, r.dkmag};
            for (size_t j = 0; j < 6; j++)
                free(ds[j]);
        }
}

/* Units run in parallel, one thread each, and backward-kernel adds them in a fixed number of
 * groups: 1, 2 and 3 threads give the same bits, on shapes big enough to run in parallel, for
 * the direct kernels (small kdim), the GEMM path (backward-input with kdim > 128), strides,
 * images cut into bands of unequal height even with the full workspace (forward, backward-kernel
 * and the backward-input gather), and the minimum workspace (bands, one group). The workspace
 * holds NaN bytes before every call: no kernel may read scratch it did not write. */
Test(tensor_conv, same_bits_for_any_thread_count, .timeout = 120)
{
    static const cfg cases[] = {
        {24, 20, 20, 3, 5, 5, 32, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
        {6, 12, 12, 16, 3, 3, 24, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
        {4, 37, 35, 6, 3, 3, 40, 2, 2, SX_PAD_VALID, 0, 0, 0, 0},
        {2, 75, 75, 40, 3, 3, 8, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
        {2, 75, 75, 4, 3, 3, 48, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
        {8, 14, 14, 16, 5, 5, 24, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
        {3, 33, 31, 24, 5, 5, 16, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
        {3, 33, 31, 24, 3, 3, 16, 1, 1, SX_PAD_VALID, 0, 0, 0, 0},
        {21, 7, 7, 32, 3, 3, 32, 1, 1, SX_PAD_SAME, 0, 0, 0, 0},
        {8, 28, 28, 16, 3, 3, 32, 2, 2, SX_PAD_EXPLICIT, 1, 1, 1, 1},
        {8, 14, 14, 32, 3, 3, 32, 1, 1, SX_PAD_EXPLICIT, 1, 1, 1, 1},
        {8, 28, 28, 16, 1, 1, 32, 2, 2, SX_PAD_EXPLICIT, 0, 0, 0, 0},
        {2, 75, 75, 16, 3, 3, 128, 2, 2, SX_PAD_SAME, 0, 0, 0, 0},
    };
    sx_rng rng;
    sx_rng_seed(&rng, 20);
    int saved = sx_threads_get();
    /* every second case under emulation: the same kernels and band rules, 30x slower there */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i += tu_emulated() ? 2 : 1)
        for (int minws = 0; minws < 2; minws++) {
            const cfg *q = &cases[i];
            geo g = geo_of(q);
            int64_t xs[4] = {q->n, q->h, q->w, q->c}, ks[4] = {q->kh, q->kw, q->c, q->f};
            int64_t ys[4] = {q->n, g.oh, g.ow, q->f};
            sx_conv2d_params p = params_of(q);
            size_t wsb =
                minws ? sx_conv2d_workspace_min(xs, ks, &p) : sx_conv2d_workspace(xs, ks, &p);
            void *ws = malloc(wsb + 1);
            sx_tensor *x = tu_rand(&rng, SX_F32, 4, xs, -1, 1),
                      *k = tu_rand(&rng, SX_F32, 4, ks, -1, 1);
            sx_tensor *dy = tu_rand(&rng, SX_F32, 4, ys, -1, 1);
            sx_tensor *out[3][3];
            for (int t = 0; t < 3; t++) {
                cr_assert_eq(sx_threads_set(t + 1), SX_OK);
                out[t][0] = tu_zeros(SX_F32, 4, ys);
                out[t][1] = tu_zeros(SX_F32, 4, xs);
                out[t][2] = tu_zeros(SX_F32, 4, ks);
                memset(ws, 0xff, wsb);
                cr_assert_eq(sx_tensor_conv2d_out(x, k, &p, ws, wsb, out[t][0]), SX_OK);
                memset(ws, 0xff, wsb);
                cr_assert_eq(sx_tensor_conv2d_backward_input_out(k, dy, &p, ws, wsb, out[t][1]),
                             SX_OK);
                memset(ws, 0xff, wsb);
                cr_assert_eq(sx_tensor_conv2d_backward_kernel_out(x, dy, &p, ws, wsb, out[t][2]),
                             SX_OK);
                for (int j = 0; j < 3; j++)
                    for (int64_t e = 0; e < out[t][j]->size; e++)
                        cr_assert(isfinite(sx_tensor_get(out[t][j], e)),
                                  "case %zu kernel %d: element %lld is not finite", i, j,
                                  (long long)e);
            }
            for (int t = 1; t < 3; t++)
                for (int j = 0; j < 3; j++)
                    cr_assert_eq(
                        memcmp(out[0][j]->data, out[t][j]->data, (size_t)out[0][j]->size * 4), 0,
                        "case %zu ws %s kernel %d: 1 and %d threads differ", i,
                        minws ? "min" : "full", j, t + 1);
            for (int t = 0; t < 3; t++)
                for (int j = 0; j < 3; j++)
                    sx_tensor_free(out[t][j]);
            sx_tensor_free(x);
            sx_tensor_free(k);
            sx_tensor_free(dy);
            free(ws);
        }
    cr_assert_eq(sx_threads_set(saved), SX_OK);
}

/* ---------------------------------------------------------------- errors */

typedef enum { FWD, BWD_IN, BWD_K } which;

/* Call one kernel; the output must be unchanged on failure. a and b are its two inputs in the
 * order of its signature. */
static void expect_fail(which wh, const sx_tensor *a, const sx_tensor *b, const sx_conv2d_params *p,
                        void *ws, size_t wsb, sx_tensor *out, sx_status want, const char *needle)
{
    sx_tensor *copy = NULL;
    cr_assert_eq(sx_tensor_clone(out, &copy), SX_OK);
    sx_status s = wh == FWD      ? sx_tensor_conv2d_out(a, b, p, ws, wsb, out)
                  : wh == BWD_IN ? sx_tensor_conv2d_backward_input_out(a, b, p, ws, wsb, out)
                                 : sx_tensor_conv2d_backward_kernel_out(a, b, p, ws, wsb, out);
    cr_assert_eq(s, want, "kernel %d: status %s (%s), want %s", (int)wh, sx_status_str(s),
                 sx_last_error(), sx_status_str(want));
    if (needle)
        cr_assert(strstr(sx_last_error(), needle) != NULL, "'%s' lacks '%s'", sx_last_error(),
                  needle);
    cr_assert_eq(memcmp(out->data, copy->data, (size_t)out->size * sx_dtype_size(out->dtype)), 0,
                 "a failed call left its output unchanged");
    sx_tensor_free(copy);
}

Test(tensor_conv, errors)
{
    sx_rng rng;
    sx_rng_seed(&rng, 18);
    int64_t xs[4] = {2, 7, 6, 3}, ks[4] = {3, 2, 3, 4}, ys[4] = {2, 7, 6, 4};
    int64_t k4c[4] = {3, 2, 4, 4}, ybad[4] = {2, 7, 5, 4}, x3[3] = {7, 6, 3},
            kbig[4] = {8, 2, 3, 4};
    sx_conv2d_params p = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    size_t wsb = sx_conv2d_workspace(xs, ks, &p), wmin = sx_conv2d_workspace_min(xs, ks, &p);
    cr_assert_gt(wmin, 0);
    char *ws = malloc(wsb);
    sx_tensor *x = tu_rand(&rng, SX_F32, 4, xs, -1, 1), *k = tu_rand(&rng, SX_F32, 4, ks, -1, 1);
    sx_tensor *dy = tu_rand(&rng, SX_F32, 4, ys, -1, 1), *y = tu_rand(&rng, SX_F32, 4, ys, -1, 1);
    sx_tensor *dx = tu_rand(&rng, SX_F32, 4, xs, -1, 1), *dk = tu_rand(&rng, SX_F32, 4, ks, -1, 1);
    sx_tensor *k64 = tu_rand(&rng, SX_F64, 4, ks, -1, 1),
              *y64 = tu_rand(&rng, SX_F64, 4, ys, -1, 1);
    sx_tensor *kc = tu_rand(&rng, SX_F32, 4, k4c, -1, 1),
              *yb = tu_rand(&rng, SX_F32, 4, ybad, -1, 1);
    sx_tensor *xr = tu_rand(&rng, SX_F32, 3, x3, -1, 1),
              *kb = tu_rand(&rng, SX_F32, 4, kbig, -1, 1);

    /* channel mismatch names both shapes */
    expect_fail(FWD, x, kc, &p, ws, wsb, y, SX_E_SHAPE, "(2,7,6,3)");
    cr_assert(strstr(sx_last_error(), "(3,2,4,4)") != NULL, "%s", sx_last_error());
    expect_fail(BWD_IN, kc, dy, &p, ws, wsb, dx, SX_E_SHAPE, "channels");
    /* bad strides and padding, NULL params */
    sx_conv2d_params bad[3] = {{.stride_h = 0, .stride_w = 1, .padding = SX_PAD_SAME},
                               {.stride_h = 1, .stride_w = -2, .padding = SX_PAD_VALID},
                               {.stride_h = 1, .stride_w = 1, .padding = (sx_padding)7}};
    for (int i = 0; i < 3; i++) {
        expect_fail(FWD, x, k, &bad[i], ws, wsb, y, SX_E_ARG, NULL);
        expect_fail(BWD_IN, k, dy, &bad[i], ws, wsb, dx, SX_E_ARG, NULL);
        expect_fail(BWD_K, x, dy, &bad[i], ws, wsb, dk, SX_E_ARG, NULL);
    }
    expect_fail(FWD, x, k, NULL, ws, wsb, y, SX_E_ARG, NULL);
    /* rank != 4 */
    expect_fail(FWD, xr, k, &p, ws, wsb, y, SX_E_RANK, "rank 4");
    expect_fail(BWD_K, xr, dy, &p, ws, wsb, dk, SX_E_RANK, NULL);
    /* workspace below the minimum, or NULL */
    expect_fail(FWD, x, k, &p, ws, wmin - 1, y, SX_E_ARG, "workspace");
    expect_fail(BWD_IN, k, dy, &p, ws, wmin - 1, dx, SX_E_ARG, "workspace");
    expect_fail(BWD_K, x, dy, &p, ws, wmin - 1, dk, SX_E_ARG, "workspace");
    expect_fail(FWD, x, k, &p, NULL, wsb, y, SX_E_ARG, "NULL");
    /* dtype mismatch, of an input or of the output */
    expect_fail(FWD, x, k64, &p, ws, wsb, y, SX_E_DTYPE, NULL);
    expect_fail(FWD, x, k, &p, ws, wsb, y64, SX_E_DTYPE, NULL);
    expect_fail(BWD_IN, k64, dy, &p, ws, wsb, dx, SX_E_DTYPE, NULL);
    expect_fail(BWD_K, x, dy, &p, ws, wsb, k64, SX_E_DTYPE, NULL);
    /* wrong output shape; dy not of the conv's output shape */
    expect_fail(FWD, x, k, &p, ws, wsb, yb, SX_E_SHAPE, "(2,7,5,4)");
    expect_fail(BWD_IN, k, yb, &p, ws, wsb, dx, SX_E_SHAPE, "dy");
    expect_fail(BWD_K, x, yb, &p, ws, wsb, dk, SX_E_SHAPE, "dy");
    /* VALID with a kernel taller than the input */
    sx_conv2d_params valid = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID};
    expect_fail(FWD, x, kb, &valid, ws, wsb, y, SX_E_SHAPE, "VALID");
    /* the workspace or the output overlapping an input */
    expect_fail(FWD, x, k, &p, x->data, wsb, y, SX_E_ARG, "overlap");
    sx_tensor dx_over_dy = sx_tensor_view(SX_F32, 4, xs, dy->data);
    expect_fail(BWD_IN, k, dy, &p, ws, wsb, &dx_over_dy, SX_E_ARG, "overlap");
    /* NULL tensors */
    expect_fail(FWD, NULL, k, &p, ws, wsb, y, SX_E_ARG, "x is NULL");
    cr_assert_eq(sx_tensor_conv2d_out(x, k, &p, ws, wsb, NULL), SX_E_ARG);
    int64_t s[4];
    cr_assert_eq(sx_conv2d_shape("who", x, kc, &p, s), SX_E_SHAPE);
    cr_assert(strncmp(sx_last_error(), "who:", 4) == 0, "%s", sx_last_error());
    sx_tensor *yy = (sx_tensor *)1;
    cr_assert_eq(sx_tensor_conv2d(x, k64, &p, &yy), SX_E_DTYPE);
    cr_assert_null(yy);

    sx_tensor *all[] = {x, k, dy, y, dx, dk, k64, y64, kc, yb, xr, kb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sx_tensor_free(all[i]);
    free(ws);
}
