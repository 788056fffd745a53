/* Depthwise convolution of multiplier 1 (groups = c = f; tensor/conv/conv_depthwise.c at the AVX2
 * and AVX512 levels, conv_depthwise.c's loops below them): forward, backward-input and
 * backward-kernel against plain loops in double, in f32 and f64, over strides 1-3, kernels 1x1 to
 * 5x5 and non-square ones, dilation, the four padding modes with asymmetric pads, odd image sizes
 * and channel counts that are no multiple of a vector (16 or 8 floats, 8 or 4 doubles); the outputs
 * are NaN-filled first, so every element must be written. Then the same bits for one thread and
 * two, and the mobilenet shapes. Then grouped convolutions of 1-16 channels and filters per group
 * (conv_depthwise.c's grouped kernels, depthwise with a multiplier, and the im2col GEMMs above
 * them) the same way. */
#include "conv/conv_depthwise.h"
#include "tensor_impl.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* cg, fg: channels and filters per group (0 reads as 1: depthwise of multiplier 1). */
typedef struct dcase {
    int64_t n, h, w, c, kh, kw;
    sx_conv2d_params p;
    int64_t cg, fg;
} dcase;

static int64_t cg_of(const dcase *q)
{
    return q->cg == 0 ? 1 : q->cg;
}

static int64_t fg_of(const dcase *q)
{
    return q->fg == 0 ? 1 : q->fg;
}

/* Output channels: groups times the filters per group. */
static int64_t f_of(const dcase *q)
{
    return q->c / cg_of(q) * fg_of(q);
}

/* The geometry derived here: output size and leading pads. */
typedef struct dgeo {
    int64_t oh, ow, pt, pl, sh, sw, dh, dw;
} dgeo;

static void axis(sx_padding mode, int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb,
                 int64_t pe, int64_t *out, int64_t *before)
{
    const int64_t kd = d * (k - 1) + 1;
    if (mode == SX_PAD_VALID || mode == SX_PAD_EXPLICIT) {
        if (mode == SX_PAD_VALID)
            pb = pe = 0;
        *out = (in + pb + pe - kd) / s + 1;
        *before = pb;
        return;
    }
    *out = (in + s - 1) / s;
    int64_t tot = (*out - 1) * s + kd - in;
    tot = tot < 0 ? 0 : tot;
    *before = mode == SX_PAD_SAME_UPPER ? tot / 2 : tot - tot / 2;
}

static dgeo geo_of(const dcase *q)
{
    dgeo g;
    g.sh = q->p.stride_h, g.sw = q->p.stride_w;
    g.dh = q->p.dilation_h == 0 ? 1 : q->p.dilation_h;
    g.dw = q->p.dilation_w == 0 ? 1 : q->p.dilation_w;
    axis(q->p.padding, q->h, q->kh, g.sh, g.dh, q->p.pad_top, q->p.pad_bottom, &g.oh, &g.pt);
    axis(q->p.padding, q->w, q->kw, g.sw, g.dw, q->p.pad_left, q->p.pad_right, &g.ow, &g.pl);
    return g;
}

/* which 0: y[yi] += x[xi] k[ki]; 1: dx[xi] += dy[yi] k[ki]; 2: dk[ki] += x[xi] dy[yi]; with the
 * sums of |terms| in mag and their counts in cnt. */
static void ref(int which, const dcase *q, const sx_tensor *a, const sx_tensor *b, double *out,
                double *mag, double *cnt, int64_t n_out)
{
    const dgeo G = geo_of(q);
    const int64_t c = q->c, cg = cg_of(q), fg = fg_of(q), f = f_of(q);
    for (int64_t i = 0; i < n_out; i++)
        out[i] = mag[i] = cnt[i] = 0;
    for (int64_t im = 0; im < q->n; im++)
        for (int64_t oy = 0; oy < G.oh; oy++)
            for (int64_t ox = 0; ox < G.ow; ox++)
                for (int64_t ky = 0; ky < q->kh; ky++)
                    for (int64_t kx = 0; kx < q->kw; kx++) {
                        const int64_t iy = oy * G.sh - G.pt + ky * G.dh;
                        const int64_t ix = ox * G.sw - G.pl + kx * G.dw;
                        if (iy < 0 || iy >= q->h || ix < 0 || ix >= q->w)
                            continue;
                        for (int64_t j = 0; j < f * cg; j++) { /* filter j / cg, its channel */
                            const int64_t fo = j / cg, ci = fo / fg * cg + j % cg;
                            const int64_t xi = ((im * q->h + iy) * q->w + ix) * c + ci;
                            const int64_t yi = ((im * G.oh + oy) * G.ow + ox) * f + fo;
                            const int64_t ki = ((ky * q->kw + kx) * cg + j % cg) * f + fo;
                            const int64_t o = which == 0 ? yi : which == 1 ? xi : ki;
                            const double t =
                                which == 0   ? sx_tensor_get(a, xi) * sx_tensor_get(b, ki)
                                : which == 1 ? sx_tensor_get(b, yi) * sx_tensor_get(a, ki)
                                             : sx_tensor_get(a, xi) * sx_tensor_get(b, yi);
                            out[o] += t;
                            mag[o] += fabs(t);
                            cnt[o] += 1;
                        }
                    }
}

static void describe(const dcase *q, char *buf, size_t n)
{
    const sx_conv2d_params *p = &q->p;
    snprintf(buf, n,
             "x(%lld,%lld,%lld,%lld) k(%lld,%lld) stride (%d,%d) padding %d pads (%d,%d,%d,%d) "
             "dilation (%d,%d) groups of %lld channels, %lld filters",
             (long long)q->n, (long long)q->h, (long long)q->w, (long long)q->c, (long long)q->kh,
             (long long)q->kw, p->stride_h, p->stride_w, (int)p->padding, p->pad_top, p->pad_bottom,
             p->pad_left, p->pad_right, p->dilation_h, p->dilation_w, (long long)cg_of(q),
             (long long)fg_of(q));
}

/* got against the reference: a sum of m terms in order, each rounded once, is within
 * (m + 1) units of roundoff of the sum of |terms| (checked with 2 units per term). */
static void expect_ref(const char *what, const dcase *q, const sx_tensor *got, const double *want,
                       const double *mag, const double *cnt)
{
    const double u = got->dtype == SX_F32 ? 0x1p-24 : 0x1p-53;
    for (int64_t i = 0; i < got->size; i++) {
        const double v = sx_tensor_get(got, i);
        if (!(fabs(v - want[i]) <= 2 * (cnt[i] + 1) * u * mag[i])) {
            char d[300];
            describe(q, d, sizeof d);
            cr_assert_fail("%s %s %s: element %lld got %.17g want %.17g", what,
                           sx_dtype_name(got->dtype), d, (long long)i, v, want[i]);
        }
    }
}

typedef struct dshapes {
    int64_t xs[4], ks[4], ys[4];
} dshapes;

static dshapes shapes_of(const dcase *q)
{
    const dgeo G = geo_of(q);
    dshapes s = {
        {q->n, q->h, q->w, q->c}, {q->kh, q->kw, cg_of(q), f_of(q)}, {q->n, G.oh, G.ow, f_of(q)}};
    return s;
}

static sx_conv2d_params params_of(const dcase *q)
{
    sx_conv2d_params p = q->p;
    p.groups = (int)(q->c / cg_of(q));
    return p;
}

static sx_tensor *nans(sx_dtype dt, const int64_t *shape)
{
    sx_tensor *t = tu_zeros(dt, 4, shape);
    cr_assert_eq(sx_tensor_fill(t, NAN), SX_OK);
    return t;
}

/* The three kernels of case q in dtype dt against the reference. */
static void check_case(sx_rng *rng, const dcase *q, sx_dtype dt)
{
    const dshapes s = shapes_of(q);
    const sx_conv2d_params p = params_of(q);
    sx_tensor *x = tu_rand(rng, dt, 4, s.xs, -1, 1), *k = tu_rand(rng, dt, 4, s.ks, -1, 1);
    sx_tensor *dy = tu_rand(rng, dt, 4, s.ys, -1, 1);
    sx_tensor *y = nans(dt, s.ys), *dx = nans(dt, s.xs), *dk = nans(dt, s.ks);
    const size_t wsb = sx_conv2d_workspace(s.xs, s.ks, &p);
    void *ws = wsb > 0 ? malloc(wsb) : NULL;
    cr_assert_eq(sx_tensor_conv2d_out(x, k, &p, ws, wsb, y), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_conv2d_backward_input_out(k, dy, &p, ws, wsb, dx), SX_OK, "%s",
                 sx_last_error());
    cr_assert_eq(sx_tensor_conv2d_backward_kernel_out(x, dy, &p, ws, wsb, dk), SX_OK, "%s",
                 sx_last_error());
    const sx_tensor *got[3] = {y, dx, dk};
    const sx_tensor *in[3][2] = {{x, k}, {k, dy}, {x, dy}};
    static const char *const names[3] = {"forward", "backward-input", "backward-kernel"};
    for (int which = 0; which < 3; which++) {
        const int64_t no = got[which]->size;
        double *want = malloc((size_t)(3 * no + 1) * sizeof(double));
        cr_assert_not_null(want);
        ref(which, q, in[which][0], in[which][1], want, want + no, want + 2 * no, no);
        expect_ref(names[which], q, got[which], want, want + no, want + 2 * no);
        free(want);
    }
    free(ws);
    sx_tensor *ts[6] = {x, k, dy, y, dx, dk};
    for (int i = 0; i < 6; i++)
        sx_tensor_free(ts[i]);
}

static sx_conv2d_params prm(int sh, int sw, sx_padding pad, int pt, int pb, int pl, int pr, int dh,
                            int dw)
{
    sx_conv2d_params p = sx_conv2d_params_default();
    p.stride_h = sh, p.stride_w = sw, p.padding = pad;
    p.pad_top = pt, p.pad_bottom = pb, p.pad_left = pl, p.pad_right = pr;
    p.dilation_h = dh, p.dilation_w = dw;
    return p;
}

Test(tensor_conv_depthwise, fixed_cases)
{
    sx_rng rng;
    sx_rng_seed(&rng, 18);
    const dcase cs[] = {
        /* mobilenet's: 3x3, pads 1, strides 1 and 2 (small batch) */
        {2, 28, 28, 32, 3, 3, prm(1, 1, SX_PAD_EXPLICIT, 1, 1, 1, 1, 1, 1), 0, 0},
        {2, 28, 28, 64, 3, 3, prm(2, 2, SX_PAD_EXPLICIT, 1, 1, 1, 1, 1, 1), 0, 0},
        {3, 7, 7, 256, 3, 3, prm(1, 1, SX_PAD_EXPLICIT, 1, 1, 1, 1, 1, 1), 0, 0},
        /* channels no multiple of a vector, odd sizes */
        {2, 9, 11, 17, 3, 3, prm(1, 1, SX_PAD_SAME, 0, 0, 0, 0, 1, 1), 0, 0},
        {1, 13, 10, 5, 3, 3, prm(2, 2, SX_PAD_SAME_LOWER, 0, 0, 0, 0, 1, 1), 0, 0},
        {2, 6, 5, 33, 3, 3, prm(1, 1, SX_PAD_VALID, 0, 0, 0, 0, 1, 1), 0, 0},
        {1, 3, 3, 1, 3, 3, prm(1, 1, SX_PAD_VALID, 0, 0, 0, 0, 1, 1), 0, 0},
        {1, 2, 1, 9, 3, 3, prm(2, 2, SX_PAD_SAME, 0, 0, 0, 0, 1, 1), 0, 0},
        /* other kernels, strides 3, mixed strides, asymmetric pads, dilation */
        {2, 12, 15, 24, 5, 5, prm(1, 1, SX_PAD_SAME, 0, 0, 0, 0, 1, 1), 0, 0},
        {2, 12, 15, 24, 5, 5, prm(2, 2, SX_PAD_EXPLICIT, 2, 1, 0, 3, 1, 1), 0, 0},
        {2, 11, 14, 7, 3, 3, prm(3, 1, SX_PAD_EXPLICIT, 0, 2, 2, 0, 1, 1), 0, 0},
        {2, 11, 14, 19, 2, 4, prm(1, 2, SX_PAD_SAME, 0, 0, 0, 0, 1, 1), 0, 0},
        {2, 10, 10, 16, 1, 1, prm(1, 1, SX_PAD_EXPLICIT, 1, 0, 0, 1, 1, 1), 0, 0},
        {2, 10, 10, 48, 1, 1, prm(2, 2, SX_PAD_VALID, 0, 0, 0, 0, 1, 1), 0, 0},
        {2, 13, 12, 20, 3, 3, prm(1, 1, SX_PAD_SAME, 0, 0, 0, 0, 2, 2), 0, 0},
        {2, 13, 12, 20, 3, 3, prm(2, 1, SX_PAD_EXPLICIT, 3, 1, 2, 2, 3, 2), 0, 0},
        {1, 9, 30, 3, 3, 7, prm(1, 3, SX_PAD_SAME_LOWER, 0, 0, 0, 0, 2, 1), 0, 0},
        /* strides beyond the window (rows and columns no tap reads) */
        {2, 11, 11, 18, 2, 2, prm(3, 3, SX_PAD_VALID, 0, 0, 0, 0, 1, 1), 0, 0},
        {1, 12, 12, 8, 1, 1, prm(4, 4, SX_PAD_EXPLICIT, 1, 2, 2, 1, 1, 1), 0, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        check_case(&rng, &cs[i], SX_F32);
        check_case(&rng, &cs[i], SX_F64);
    }
}

static int64_t rb(sx_rng *r, int64_t n)
{
    return (int64_t)sx_rng_below(r, (uint64_t)n);
}

Test(tensor_conv_depthwise, random_cases)
{
    sx_rng rng;
    sx_rng_seed(&rng, 1818);
    for (int it = 0; it < 60; it++) {
        dcase q = {1 + rb(&rng, 3),
                   1 + rb(&rng, 14),
                   1 + rb(&rng, 14),
                   1 + rb(&rng, 40),
                   1 + rb(&rng, 5),
                   1 + rb(&rng, 5),
                   sx_conv2d_params_default(),
                   0,
                   0};
        sx_conv2d_params *p = &q.p;
        p->stride_h = 1 + (int)rb(&rng, 3), p->stride_w = 1 + (int)rb(&rng, 3);
        p->dilation_h = 1 + (int)rb(&rng, 2), p->dilation_w = 1 + (int)rb(&rng, 2);
        p->padding = (sx_padding)rb(&rng, 4);
        p->pad_top = (int)rb(&rng, 3), p->pad_bottom = (int)rb(&rng, 3);
        p->pad_left = (int)rb(&rng, 3), p->pad_right = (int)rb(&rng, 3);
        const int64_t kdh = p->dilation_h * (q.kh - 1) + 1, kdw = p->dilation_w * (q.kw - 1) + 1;
        if (p->padding == SX_PAD_VALID && (q.h < kdh || q.w < kdw))
            p->padding = SX_PAD_SAME;
        if (p->padding == SX_PAD_EXPLICIT &&
            (q.h + p->pad_top + p->pad_bottom < kdh || q.w + p->pad_left + p->pad_right < kdw))
            p->padding = SX_PAD_SAME_LOWER;
        check_case(&rng, &q, rb(&rng, 2) == 0 ? SX_F32 : SX_F64);
    }
}

/* One thread and two give the same bits in every kernel of each case (backward-kernel sums each
 * block of channels over every image on one thread). */
static void same_bits(sx_rng *rng, const dcase *cs, size_t n)
{
    const int saved = sx_threads_get();
    for (size_t i = 0; i < n; i++)
        for (int d = 0; d < 2; d++) {
            const sx_dtype dt = d == 0 ? SX_F32 : SX_F64;
            const dshapes s = shapes_of(&cs[i]);
            const sx_conv2d_params p = params_of(&cs[i]);
            sx_tensor *x = tu_rand(rng, dt, 4, s.xs, -1, 1), *k = tu_rand(rng, dt, 4, s.ks, -1, 1);
            sx_tensor *dy = tu_rand(rng, dt, 4, s.ys, -1, 1);
            const size_t wsb = sx_conv2d_workspace(s.xs, s.ks, &p);
            void *ws = wsb > 0 ? malloc(wsb) : NULL;
            sx_tensor *r[2][3];
            for (int th = 0; th < 2; th++) {
                cr_assert_eq(sx_threads_set(th + 1), SX_OK);
                r[th][0] = nans(dt, s.ys), r[th][1] = nans(dt, s.xs), r[th][2] = nans(dt, s.ks);
                cr_assert_eq(sx_tensor_conv2d_out(x, k, &p, ws, wsb, r[th][0]), SX_OK, "%s",
                             sx_last_error());
                cr_assert_eq(sx_tensor_conv2d_backward_input_out(k, dy, &p, ws, wsb, r[th][1]),
                             SX_OK);
                cr_assert_eq(sx_tensor_conv2d_backward_kernel_out(x, dy, &p, ws, wsb, r[th][2]),
                             SX_OK);
            }
            for (int j = 0; j < 3; j++) {
                cr_assert(memcmp(r[0][j]->data, r[1][j]->data,
                                 (size_t)r[0][j]->size * sx_dtype_size(dt)) == 0,
                          "case %zu %s output %d differs between 1 and 2 threads", i,
                          sx_dtype_name(dt), j);
                sx_tensor_free(r[0][j]);
                sx_tensor_free(r[1][j]);
            }
            free(ws);
            sx_tensor_free(x);
            sx_tensor_free(k);
            sx_tensor_free(dy);
        }
    cr_assert_eq(sx_threads_set(saved), SX_OK);
}

Test(tensor_conv_depthwise, same_bits_for_any_thread_count)
{
    sx_rng rng;
    sx_rng_seed(&rng, 7);
    const dcase cs[] = {
        {16, 28, 28, 64, 3, 3, prm(2, 2, SX_PAD_EXPLICIT, 1, 1, 1, 1, 1, 1), 0, 0},
        {16, 14, 14, 40, 3, 3, prm(1, 1, SX_PAD_SAME, 0, 0, 0, 0, 1, 1), 0, 0},
        {8, 15, 13, 37, 5, 3, prm(1, 2, SX_PAD_SAME, 0, 0, 0, 0, 2, 1), 0, 0},
    };
    same_bits(&rng, cs, sizeof cs / sizeof cs[0]);
}

static dcase grp(dcase q, int64_t cg, int64_t fg)
{
    q.cg = cg, q.fg = fg;
    return q;
}

/* Grouped: ResNeXt's 3x3 groups of 4 (strides 1 and 2), groups of 2, 8, 12 and 16 channels
 * (a 28-wide row of 12 or 16 expansions takes more than the depthwise ring), unequal channels
 * and filters per group (groups that straddle vectors: two-vector permutes and gathers),
 * depthwise with a multiplier, 1x1 and 5x5 kernels, dilation, odd channel counts; cg = fg = 16
 * runs conv_im2col.c's grouped GEMMs. */
Test(tensor_conv_depthwise, grouped_fixed_cases)
{
    sx_rng rng;
    sx_rng_seed(&rng, 1819);
    const sx_conv2d_params p1 = prm(1, 1, SX_PAD_EXPLICIT, 1, 1, 1, 1, 1, 1);
    const sx_conv2d_params p2 = prm(2, 2, SX_PAD_EXPLICIT, 1, 1, 1, 1, 1, 1);
    const dcase cs[] = {
        grp((dcase){2, 14, 14, 128, 3, 3, p1, 0, 0}, 4, 4),
        grp((dcase){2, 14, 14, 64, 3, 3, p2, 0, 0}, 4, 4),
        grp((dcase){2, 9, 9, 32, 3, 3, p1, 0, 0}, 2, 2),
        grp((dcase){2, 10, 11, 64, 3, 3, p1, 0, 0}, 8, 8),
        grp((dcase){1, 28, 28, 48, 3, 3, p1, 0, 0}, 12, 12),
        grp((dcase){1, 28, 28, 32, 3, 3, p2, 0, 0}, 16, 4),
        grp((dcase){1, 28, 28, 32, 3, 3, p1, 0, 0}, 16, 16),
        grp((dcase){2, 7, 7, 30, 3, 3, p1, 0, 0}, 3, 5),
        grp((dcase){2, 7, 9, 21, 3, 3, p2, 0, 0}, 3, 1),
        grp((dcase){2, 7, 9, 20, 3, 3, p1, 0, 0}, 5, 1),
        grp((dcase){2, 8, 8, 12, 3, 3, p1, 0, 0}, 1, 3),
        grp((dcase){2, 9, 8, 7, 3, 3, p2, 0, 0}, 1, 16),
        grp((dcase){2, 8, 8, 36, 1, 1, prm(1, 1, SX_PAD_VALID, 0, 0, 0, 0, 1, 1), 0, 0}, 6, 6),
        grp((dcase){2, 8, 8, 36, 1, 1, prm(2, 2, SX_PAD_VALID, 0, 0, 0, 0, 1, 1), 0, 0}, 4, 9),
        grp((dcase){2, 12, 11, 24, 5, 5, prm(2, 1, SX_PAD_SAME, 0, 0, 0, 0, 1, 1), 0, 0}, 6, 2),
        grp((dcase){2, 13, 12, 20, 3, 3, prm(1, 2, SX_PAD_EXPLICIT, 3, 1, 2, 2, 2, 3), 0, 0}, 10,
            7),
        grp((dcase){1, 6, 5, 33, 2, 4, prm(3, 1, SX_PAD_SAME_LOWER, 0, 0, 0, 0, 1, 2), 0, 0}, 11,
            13),
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        check_case(&rng, &cs[i], SX_F32);
        check_case(&rng, &cs[i], SX_F64);
    }
}

Test(tensor_conv_depthwise, grouped_random_cases)
{
    sx_rng rng;
    sx_rng_seed(&rng, 1820);
    for (int it = 0; it < 80; it++) {
        const int64_t cg = 1 + rb(&rng, 16), fg = 1 + rb(&rng, 16), groups = 1 + rb(&rng, 5);
        dcase q = {1 + rb(&rng, 2),
                   1 + rb(&rng, 12),
                   1 + rb(&rng, 12),
                   groups * cg,
                   1 + rb(&rng, 4),
                   1 + rb(&rng, 4),
                   sx_conv2d_params_default(),
                   cg,
                   fg};
        sx_conv2d_params *p = &q.p;
        p->stride_h = 1 + (int)rb(&rng, 3), p->stride_w = 1 + (int)rb(&rng, 3);
        p->dilation_h = 1 + (int)rb(&rng, 2), p->dilation_w = 1 + (int)rb(&rng, 2);
        p->padding = (sx_padding)rb(&rng, 4);
        p->pad_top = (int)rb(&rng, 3), p->pad_bottom = (int)rb(&rng, 3);
        p->pad_left = (int)rb(&rng, 3), p->pad_right = (int)rb(&rng, 3);
        const int64_t kdh = p->dilation_h * (q.kh - 1) + 1, kdw = p->dilation_w * (q.kw - 1) + 1;
        if (p->padding == SX_PAD_VALID && (q.h < kdh || q.w < kdw))
            p->padding = SX_PAD_SAME;
        if (p->padding == SX_PAD_EXPLICIT &&
            (q.h + p->pad_top + p->pad_bottom < kdh || q.w + p->pad_left + p->pad_right < kdw))
            p->padding = SX_PAD_SAME_LOWER;
        check_case(&rng, &q, rb(&rng, 2) == 0 ? SX_F32 : SX_F64);
    }
}

Test(tensor_conv_depthwise, grouped_same_bits_for_any_thread_count)
{
    sx_rng rng;
    sx_rng_seed(&rng, 1821);
    const dcase cs[] = {
        grp((dcase){16, 14, 14, 128, 3, 3, prm(1, 1, SX_PAD_EXPLICIT, 1, 1, 1, 1, 1, 1), 0, 0}, 4,
            4),
        grp((dcase){8, 15, 13, 60, 3, 3, prm(2, 2, SX_PAD_SAME, 0, 0, 0, 0, 1, 1), 0, 0}, 3, 5),
        grp((dcase){8, 9, 9, 48, 1, 1, prm(1, 1, SX_PAD_VALID, 0, 0, 0, 0, 1, 1), 0, 0}, 8, 2),
    };
    same_bits(&rng, cs, sizeof cs / sizeof cs[0]);
}

/* conv_depthwise.c's kernels called directly, so that the test knows they ran: on a CPU with AVX2
 * (the AVX2 instances, or AVX-512's where it has it; ctest's _avx2 run caps it at AVX2) they take
 * every case below and match the plain loops, and one thread and two give the same bits; at the
 * baseline they decline, touching nothing. Odd channel counts (masked tail vectors in both
 * widths), strides 1 and 2, asymmetric pads, the 3x3 kernels' constant-geometry instances and
 * the run-time ones (5x3, dilation), multipliers 1, 2 and 3. */
static void direct_case(sx_rng *rng, const dcase *q, sx_dtype dt, bool avail)
{
    const dgeo G = geo_of(q);
    const dshapes s = shapes_of(q);
    const sx__dw_geom g = {q->n, q->h, q->w, q->c, q->kh, q->kw,   G.oh,     G.ow,    G.sh,
                           G.sw, G.dh, G.dw, G.pt, G.pl,  f_of(q), cg_of(q), fg_of(q)};
    sx_tensor *x = tu_rand(rng, dt, 4, s.xs, -1, 1), *k = tu_rand(rng, dt, 4, s.ks, -1, 1);
    sx_tensor *dy = tu_rand(rng, dt, 4, s.ys, -1, 1);
    const sx_tensor *in[3][2] = {{x, k}, {k, dy}, {x, dy}};
    const int64_t *os[3] = {s.ys, s.xs, s.ks};
    static const char *const names[3] = {"forward", "backward-input", "backward-kernel"};
    const int saved = sx_threads_get();
    for (int which = 0; which < 3; which++) {
        sx_tensor *r[2];
        for (int th = 0; th < 2; th++) {
            cr_assert_eq(sx_threads_set(th + 1), SX_OK);
            r[th] = nans(dt, os[which]);
            const bool ran = sx__dw_direct(&g, (sx__dw_kind)which, dt, in[which][0]->data,
                                           in[which][1]->data, r[th]->data, th == 1);
            cr_assert_eq(ran, avail, "%s %s: the direct kernels %s", names[which],
                         sx_dtype_name(dt), avail ? "declined" : "ran below AVX2");
        }
        const int64_t no = r[0]->size;
        if (avail) {
            double *want = malloc((size_t)(3 * no + 1) * sizeof(double));
            cr_assert_not_null(want);
            ref(which, q, in[which][0], in[which][1], want, want + no, want + 2 * no, no);
            expect_ref(names[which], q, r[0], want, want + no, want + 2 * no);
            free(want);
        } else {
            for (int64_t i = 0; i < no; i++)
                cr_assert(isnan(sx_tensor_get(r[0], i)), "%s: declined but wrote", names[which]);
        }
        cr_assert(memcmp(r[0]->data, r[1]->data, (size_t)no * sx_dtype_size(dt)) == 0,
                  "%s %s: 1 and 2 threads differ", names[which], sx_dtype_name(dt));
        sx_tensor_free(r[0]);
        sx_tensor_free(r[1]);
    }
    cr_assert_eq(sx_threads_set(saved), SX_OK);
    sx_tensor_free(x);
    sx_tensor_free(k);
    sx_tensor_free(dy);
}

Test(tensor_conv_depthwise, direct_kernels_match_loops)
{
    sx_rng rng;
    sx_rng_seed(&rng, 1822);
    const bool avail = sx__isa() == SX__ISA_AVX2 || sx__isa() == SX__ISA_AVX512; /* not NEON yet */
    /* sizes that pass conv_depthwise.c's threshold for the pool (2^18 multiply-adds) */
    const dcase cs[] = {
        {16, 19, 19, 37, 3, 3, prm(2, 2, SX_PAD_EXPLICIT, 1, 1, 1, 1, 1, 1), 0, 0},
        {12, 14, 15, 13, 3, 3, prm(1, 1, SX_PAD_EXPLICIT, 1, 2, 0, 1, 1, 1), 0, 0},
        {10, 17, 16, 11, 5, 3, prm(2, 1, SX_PAD_EXPLICIT, 2, 1, 1, 2, 1, 2), 0, 0},
        {16, 19, 19, 13, 3, 3, prm(2, 2, SX_PAD_EXPLICIT, 1, 1, 1, 1, 1, 1), 1, 3},
        {16, 15, 14, 7, 3, 3, prm(1, 1, SX_PAD_EXPLICIT, 1, 1, 2, 0, 1, 1), 1, 2},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        direct_case(&rng, &cs[i], SX_F32, avail);
        direct_case(&rng, &cs[i], SX_F64, avail);
    }
}
