/* Convolutions with every parameter: strides, dilations, groups (dense, grouped,
 * depthwise with multipliers), the four padding modes with asymmetric explicit pads, and the
 * transposed convolution with output padding. Forward, backward-input and backward-kernel
 * against plain nested loops in double, in f32 and f64, with the full and the minimum
 * workspace (NaN-filled, unaligned); gradients by central finite differences in f64; the
 * output-size rules; parameter sets that are the original ones in disguise giving the same
 * bits as those; the same bits for any thread count; and every documented error. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One case: x (n,h,w,c), k (kh,kw,c/groups,f) for conv2d; for the transposed convolution x
 * (n,h,w,c) is its input and k (kh,kw,f/groups,c) (f: its output channels). */
typedef struct gcfg {
    int64_t n, h, w, c, kh, kw, f;
    sx_conv2d_params p;
    bool transposed;
} gcfg;

/* The conv2d geometry the test derives itself: x (n,h,w,c) -> y (n,oh,ow,f), pads pt, pl. For
 * the transposed case: the conv2d from its output (h, w := the output size) to its input. */
typedef struct geo {
    int64_t h, w, c, f, oh, ow, pt, pl, g, dh, dw;
} geo;

static int64_t dil(int d)
{
    return d == 0 ? 1 : d;
}

static void axis_conv(sx_padding mode, int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb,
                      int64_t pe, int64_t *out, int64_t *before)
{
    int64_t kd = d * (k - 1) + 1;
    if (mode == SX_PAD_VALID || mode == SX_PAD_EXPLICIT) {
        if (mode == SX_PAD_VALID)
            pb = pe = 0;
        *out = (in + pb + pe - kd) / s + 1;
        *before = pb;
        return;
    }
    *out = (in + s - 1) / s;
    int64_t tot = (*out - 1) * s + kd - in;
    if (tot < 0)
        tot = 0;
    *before = mode == SX_PAD_SAME_UPPER ? tot / 2 : tot - tot / 2;
}

/* PyTorch's rule, out = (in-1)*s - pb - pe + d*(k-1) + op + 1, or ONNX's SAME: out = in*s. */
static void axis_tr(sx_padding mode, int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb,
                    int64_t pe, int64_t op, int64_t *out, int64_t *before)
{
    if (mode == SX_PAD_VALID)
        pb = pe = 0;
    if (mode == SX_PAD_VALID || mode == SX_PAD_EXPLICIT) {
        *out = (in - 1) * s - pb - pe + d * (k - 1) + op + 1;
        *before = pb;
        return;
    }
    *out = in * s;
    int64_t tot = (in - 1) * s + d * (k - 1) + 1 + op - *out;
    *before = mode == SX_PAD_SAME_UPPER ? tot / 2 : tot - tot / 2;
}

static geo geo_of(const gcfg *q)
{
    geo g = {0};
    const sx_conv2d_params *p = &q->p;
    g.g = p->groups == 0 ? 1 : p->groups;
    g.dh = dil(p->dilation_h), g.dw = dil(p->dilation_w);
    if (!q->transposed) {
        g.h = q->h, g.w = q->w, g.c = q->c, g.f = q->f;
        axis_conv(p->padding, q->h, q->kh, p->stride_h, g.dh, p->pad_top, p->pad_bottom, &g.oh,
                  &g.pt);
        axis_conv(p->padding, q->w, q->kw, p->stride_w, g.dw, p->pad_left, p->pad_right, &g.ow,
                  &g.pl);
    } else {
        g.oh = q->h, g.ow = q->w, g.f = q->c, g.c = q->f;
        axis_tr(p->padding, q->h, q->kh, p->stride_h, g.dh, p->pad_top, p->pad_bottom,
                p->output_padding_h, &g.h, &g.pt);
        axis_tr(p->padding, q->w, q->kw, p->stride_w, g.dw, p->pad_left, p->pad_right,
                p->output_padding_w, &g.w, &g.pl);
    }
    return g;
}

/* Every (image, output pixel, tap, channel of the group, filter) whose tap lies inside the
 * conv2d input: xi indexes the conv2d input (n,h,w,c), ki the kernel (kh,kw,c/g,f), yi the
 * conv2d output (n,oh,ow,f). */
#define FOR_TAPS(q, G, ...)                                                                        \
    for (int64_t b = 0; b < (q)->n; b++)                                                           \
        for (int64_t oy = 0; oy < (G).oh; oy++)                                                    \
            for (int64_t ox = 0; ox < (G).ow; ox++)                                                \
                for (int64_t ky = 0; ky < (q)->kh; ky++)                                           \
                    for (int64_t kx = 0; kx < (q)->kw; kx++) {                                     \
                        int64_t iy = oy * (q)->p.stride_h - (G).pt + ky * (G).dh;                  \
                        int64_t ix = ox * (q)->p.stride_w - (G).pl + kx * (G).dw;                  \
                        if (iy < 0 || iy >= (G).h || ix < 0 || ix >= (G).w)                        \
                            continue;                                                              \
                        int64_t cg = (G).c / (G).g, fg = (G).f / (G).g;                            \
                        for (int64_t fi = 0; fi < (G).f; fi++)                                     \
                            for (int64_t ci = 0; ci < cg; ci++) {                                  \
                                int64_t xi =                                                       \
                                    ((b * (G).h + iy) * (G).w + ix) * (G).c + fi / fg * cg + ci;   \
                                int64_t ki = ((ky * (q)->kw + kx) * cg + ci) * (G).f + fi;         \
                                int64_t yi = ((b * (G).oh + oy) * (G).ow + ox) * (G).f + fi;       \
                                __VA_ARGS__;                                                       \
                            }                                                                      \
                    }

/* The conv2d of the geometry in its three forms, into out (zeroed first) with the sums of
 * |terms| in mag: which 0 = forward out[yi] += A[xi] K[ki]; 1 = backward-input out[xi] +=
 * A[yi] K[ki]; 2 = backward-kernel out[ki] += A[xi] B[yi] (A, B: the first and second tensor). */
static void ref_conv(int which, const gcfg *q, const sx_tensor *a, const sx_tensor *b2, double *out,
                     double *mag, int64_t n_out)
{
    geo G = geo_of(q);
    memset(out, 0, (size_t)n_out * sizeof *out);
    memset(mag, 0, (size_t)n_out * sizeof *mag);
    FOR_TAPS(q, G, {
        double t;
        int64_t o;
        if (which == 0)
            t = sx_tensor_get(a, xi) * sx_tensor_get(b2, ki), o = yi;
        else if (which == 1)
            t = sx_tensor_get(a, yi) * sx_tensor_get(b2, ki), o = xi;
        else
            t = sx_tensor_get(a, xi) * sx_tensor_get(b2, yi), o = ki;
        out[o] += t;
        mag[o] += fabs(t);
    });
}

static double *dalloc(int64_t n)
{
    double *p = malloc((size_t)(n + 1) * sizeof *p);
    cr_assert_not_null(p);
    return p;
}

static const char *pad_name(sx_padding m)
{
    return m == SX_PAD_VALID        ? "VALID"
           : m == SX_PAD_SAME       ? "SAME_UPPER"
           : m == SX_PAD_SAME_LOWER ? "SAME_LOWER"
                                    : "EXPLICIT";
}

static void describe(const gcfg *q, char *buf, size_t n)
{
    const sx_conv2d_params *p = &q->p;
    snprintf(buf, n,
             "%s x(%lld,%lld,%lld,%lld) k(%lld,%lld) f %lld stride (%d,%d) %s pads (%d,%d,%d,%d) "
             "dilation (%d,%d) groups %d output padding (%d,%d)",
             q->transposed ? "transposed" : "conv2d", (long long)q->n, (long long)q->h,
             (long long)q->w, (long long)q->c, (long long)q->kh, (long long)q->kw, (long long)q->f,
             p->stride_h, p->stride_w, pad_name(p->padding), p->pad_top, p->pad_bottom, p->pad_left,
             p->pad_right, p->dilation_h, p->dilation_w, p->groups, p->output_padding_h,
             p->output_padding_w);
}

static void expect_ref(const char *what, const gcfg *q, const sx_tensor *got, const double *ref,
                       const double *mag)
{
    double tol = got->dtype == SX_F32 ? 4e-6 : 1e-14;
    for (int64_t i = 0; i < got->size; i++) {
        double v = sx_tensor_get(got, i);
        if (!(fabs(v - ref[i]) <= tol * mag[i] + 1e-300)) {
            char d[400];
            describe(q, d, sizeof d);
            cr_assert_fail("%s %s %s: element %lld got %.17g want %.17g", what,
                           sx_dtype_name(got->dtype), d, (long long)i, v, ref[i]);
        }
    }
}

/* The kernel shapes and the three calls of a case, conv2d or transposed. */
typedef struct shapes {
    int64_t xs[4], ks[4], ys[4];
} shapes;

static shapes shapes_of(const gcfg *q)
{
    geo G = geo_of(q);
    int64_t g = G.g;
    shapes s;
    if (!q->transposed) {
        int64_t xs[4] = {q->n, q->h, q->w, q->c}, ks[4] = {q->kh, q->kw, q->c / g, q->f};
        int64_t ys[4] = {q->n, G.oh, G.ow, q->f};
        memcpy(s.xs, xs, sizeof xs), memcpy(s.ks, ks, sizeof ks), memcpy(s.ys, ys, sizeof ys);
    } else {
        int64_t xs[4] = {q->n, q->h, q->w, q->c}, ks[4] = {q->kh, q->kw, q->f / g, q->c};
        int64_t ys[4] = {q->n, G.h, G.w, q->f};
        memcpy(s.xs, xs, sizeof xs), memcpy(s.ks, ks, sizeof ks), memcpy(s.ys, ys, sizeof ys);
    }
    return s;
}

static size_t ws_of(const gcfg *q, bool best)
{
    shapes s = shapes_of(q);
    if (q->transposed)
        return best ? sx_conv_transpose2d_workspace(s.xs, s.ks, &q->p)
                    : sx_conv_transpose2d_workspace_min(s.xs, s.ks, &q->p);
    return best ? sx_conv2d_workspace(s.xs, s.ks, &q->p)
                : sx_conv2d_workspace_min(s.xs, s.ks, &q->p);
}

static sx_status call_fwd(const gcfg *q, const sx_tensor *x, const sx_tensor *k, void *ws,
                          size_t wsb, sx_tensor *y)
{
    return q->transposed ? sx_tensor_conv_transpose2d_out(x, k, &q->p, ws, wsb, y)
                         : sx_tensor_conv2d_out(x, k, &q->p, ws, wsb, y);
}

static sx_status call_bwdi(const gcfg *q, const sx_tensor *k, const sx_tensor *dy, void *ws,
                           size_t wsb, sx_tensor *dx)
{
    return q->transposed ? sx_tensor_conv_transpose2d_backward_input_out(k, dy, &q->p, ws, wsb, dx)
                         : sx_tensor_conv2d_backward_input_out(k, dy, &q->p, ws, wsb, dx);
}

static sx_status call_bwdk(const gcfg *q, const sx_tensor *x, const sx_tensor *dy, void *ws,
                           size_t wsb, sx_tensor *dk)
{
    return q->transposed ? sx_tensor_conv_transpose2d_backward_kernel_out(x, dy, &q->p, ws, wsb, dk)
                         : sx_tensor_conv2d_backward_kernel_out(x, dy, &q->p, ws, wsb, dk);
}

/* The three kernels with ws_bytes of NaN-filled workspace at byte offset skew, each into an
 * output pre-filled with NaN, against the references. */
static void run_ws(const gcfg *q, size_t ws_bytes, size_t skew, sx_tensor *x, sx_tensor *k,
                   sx_tensor *dy, const double *const *ref)
{
    shapes s = shapes_of(q);
    sx_dtype dt = x->dtype;
    char *buf = malloc(ws_bytes + skew + 1);
    void *ws = buf + skew;
    sx_tensor *y = tu_zeros(dt, 4, s.ys), *dx = tu_zeros(dt, 4, s.xs), *dk = tu_zeros(dt, 4, s.ks);
    char d[400];
    describe(q, d, sizeof d);

    memset(ws, 0xff, ws_bytes);
    cr_assert_eq(sx_tensor_fill(y, (double)NAN), SX_OK);
    cr_assert_eq(call_fwd(q, x, k, ws, ws_bytes, y), SX_OK, "%s: %s", d, sx_last_error());
    expect_ref("forward", q, y, ref[0], ref[1]);

    memset(ws, 0xff, ws_bytes);
    cr_assert_eq(sx_tensor_fill(dx, (double)NAN), SX_OK);
    cr_assert_eq(call_bwdi(q, k, dy, ws, ws_bytes, dx), SX_OK, "%s: %s", d, sx_last_error());
    expect_ref("backward_input", q, dx, ref[2], ref[3]);

    memset(ws, 0xff, ws_bytes);
    cr_assert_eq(sx_tensor_fill(dk, (double)NAN), SX_OK);
    cr_assert_eq(call_bwdk(q, x, dy, ws, ws_bytes, dk), SX_OK, "%s: %s", d, sx_last_error());
    expect_ref("backward_kernel", q, dk, ref[4], ref[5]);

    sx_tensor_free(y), sx_tensor_free(dx), sx_tensor_free(dk);
    free(buf);
}

/* One case in both dtypes, with the full and the minimum workspace. */
static void check_case(sx_rng *rng, const gcfg *q)
{
    shapes s = shapes_of(q);
    char d[400];
    describe(q, d, sizeof d);
    /* the shape functions agree with the test's own rule */
    for (int dd = 0; dd < 2; dd++) {
        sx_dtype dt = dd ? SX_F64 : SX_F32;
        sx_tensor *x = tu_rand(rng, dt, 4, s.xs, -1, 1), *k = tu_rand(rng, dt, 4, s.ks, -1, 1);
        sx_tensor *dy = tu_rand(rng, dt, 4, s.ys, -1, 1);
        int64_t got[4];
        sx_status st = q->transposed ? sx_conv_transpose2d_shape("t", x, k, &q->p, got)
                                     : sx_conv2d_shape("t", x, k, &q->p, got);
        cr_assert_eq(st, SX_OK, "%s: %s", d, sx_last_error());
        cr_assert_eq(memcmp(got, s.ys, sizeof got), 0, "%s: output shape (%lld,%lld,%lld,%lld)", d,
                     (long long)got[0], (long long)got[1], (long long)got[2], (long long)got[3]);
        double *ref[6] = {dalloc(dy->size), dalloc(dy->size), dalloc(x->size),
                          dalloc(x->size),  dalloc(k->size),  dalloc(k->size)};
        /* in conv2d terms: the transposed forward is conv2d's backward-input, and so on */
        if (!q->transposed) {
            ref_conv(0, q, x, k, ref[0], ref[1], dy->size);
            ref_conv(1, q, dy, k, ref[2], ref[3], x->size);
            ref_conv(2, q, x, dy, ref[4], ref[5], k->size);
        } else {
            ref_conv(1, q, x, k, ref[0], ref[1], dy->size);
            ref_conv(0, q, dy, k, ref[2], ref[3], x->size);
            ref_conv(2, q, dy, x, ref[4], ref[5], k->size);
        }
        size_t full = ws_of(q, true), min = ws_of(q, false);
        cr_assert_leq(min, full, "%s", d);
        run_ws(q, full, 0, x, k, dy, (const double *const *)ref);
        run_ws(q, min, 3, x, k, dy, (const double *const *)ref);
        for (int i = 0; i < 6; i++)
            free(ref[i]);
        sx_tensor_free(x), sx_tensor_free(k), sx_tensor_free(dy);
    }
}

static sx_conv2d_params prm(int sh, int sw, sx_padding pad, int pt, int pb, int pl, int pr, int dh,
                            int dw, int groups)
{
    sx_conv2d_params p = sx_conv2d_params_default();
    p.stride_h = sh, p.stride_w = sw, p.padding = pad;
    p.pad_top = pt, p.pad_bottom = pb, p.pad_left = pl, p.pad_right = pr;
    p.dilation_h = dh, p.dilation_w = dw, p.groups = groups;
    return p;
}

/* Hand-picked cases for each implementation: depthwise (multipliers 1 and 3, strided, dilated,
 * asymmetric pads, many channels for the vector loops), grouped 1x1 (one GEMM per group),
 * grouped and dilated im2col, dense with explicit pads that no original mode has (PyTorch's
 * stride-2 padding 1), and pads larger than the window. */
static const gcfg fixed[] = {
    {2, 7, 9, 5, 3, 3, 5, {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME, .groups = 5}, 0},
    {2,
     8,
     6,
     3,
     3,
     2,
     9,
     {.stride_h = 2, .stride_w = 1, .padding = SX_PAD_SAME_LOWER, .groups = 3},
     0},
    {1,
     9,
     10,
     37,
     3,
     3,
     37,
     {.stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 2,
      .pad_left = 0,
      .pad_right = 1,
      .dilation_h = 2,
      .dilation_w = 1,
      .groups = 37},
     0},
    {2, 5, 6, 6, 1, 1, 9, {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID, .groups = 3}, 0},
    {1, 5, 4, 4, 1, 1, 4, {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID, .groups = 2}, 0},
    {2,
     9,
     8,
     6,
     3,
     3,
     4,
     {.stride_h = 1,
      .stride_w = 2,
      .padding = SX_PAD_SAME,
      .dilation_h = 2,
      .dilation_w = 3,
      .groups = 2},
     0},
    {2,
     8,
     8,
     3,
     3,
     3,
     4,
     {.stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 1,
      .pad_left = 1,
      .pad_right = 1},
     0},
    {1,
     4,
     5,
     2,
     2,
     3,
     3,
     {.stride_h = 1,
      .stride_w = 3,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 4,
      .pad_bottom = 0,
      .pad_left = 5,
      .pad_right = 6},
     0},
    {1, 6, 6, 4, 3, 3, 6, {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME_LOWER}, 0},
    /* transposed: upsampling by 2, with output padding, groups, dilation, SAME */
    {2, 4, 5, 3, 2, 2, 4, {.stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID}, 1},
    {1,
     3,
     4,
     4,
     3,
     3,
     6,
     {.stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 1,
      .pad_left = 1,
      .pad_right = 0,
      .output_padding_h = 1,
      .output_padding_w = 1,
      .groups = 2},
     1},
    {1,
     4,
     3,
     6,
     3,
     2,
     6,
     {.stride_h = 1, .stride_w = 2, .padding = SX_PAD_SAME_LOWER, .dilation_h = 2, .groups = 6},
     1},
    {2,
     3,
     3,
     2,
     3,
     3,
     3,
     {.stride_h = 2,
      .stride_w = 3,
      .padding = SX_PAD_SAME_UPPER,
      .output_padding_h = 1,
      .output_padding_w = 2},
     1},
    {1,
     3,
     3,
     2,
     2,
     2,
     2,
     {.stride_h = 1,
      .stride_w = 1,
      .padding = SX_PAD_VALID,
      .dilation_h = 3,
      .dilation_w = 2,
      .output_padding_h = 2,
      .output_padding_w = 1},
     1},
    /* a band of many rows (the minimum workspace runs one output row at a time) */
    {3,
     20,
     17,
     4,
     3,
     3,
     8,
     {.stride_h = 1,
      .stride_w = 1,
      .padding = SX_PAD_SAME,
      .dilation_h = 2,
      .dilation_w = 2,
      .groups = 2},
     0},
};

Test(tensor_conv_general, fixed_cases)
{
    sx_rng rng;
    sx_rng_seed(&rng, 31);
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        check_case(&rng, &fixed[i]);
}

static int64_t rb(sx_rng *r, uint64_t n)
{
    return (int64_t)sx_rng_below(r, n);
}

/* A random case with every parameter drawn; retried until its output is non-empty. Channels
 * stay below Winograd's minimum (conv.c's dense kernels then sum directly: the tolerance). */
static gcfg rand_case(sx_rng *r, bool transposed)
{
    for (;;) {
        gcfg q = {0};
        q.transposed = transposed;
        int groups = 1 + (int)rb(r, 3);
        int kind = (int)rb(r, 4); /* 0: dense, 1: grouped, 2: depthwise, 3: depthwise x m */
        q.n = 1 + rb(r, 2);
        q.h = 1 + rb(r, 9);
        q.w = 1 + rb(r, 9);
        if (kind == 0) {
            groups = 1;
            q.c = 1 + rb(r, 4);
            q.f = 1 + rb(r, 4);
        } else if (kind == 1) {
            q.c = groups * (1 + rb(r, 2));
            q.f = groups * (1 + rb(r, 2));
        } else {
            q.c = 1 + rb(r, 6);
            groups = (int)q.c;
            q.f = q.c * (kind == 2 ? 1 : 2 + rb(r, 2));
        }
        if (transposed && kind >= 2) { /* depthwise of the conv2d: groups = its c = f here */
            int64_t t = q.c;
            q.c = q.f, q.f = t;
        }
        q.kh = 1 + rb(r, 4);
        q.kw = 1 + rb(r, 4);
        sx_conv2d_params *p = &q.p;
        p->stride_h = 1 + (int)rb(r, 3);
        p->stride_w = 1 + (int)rb(r, 3);
        p->dilation_h = (int)rb(r, 3); /* 0 reads as 1 */
        p->dilation_w = (int)rb(r, 3);
        p->groups = groups;
        p->padding = (sx_padding)rb(r, 4);
        if (p->padding == SX_PAD_EXPLICIT) {
            p->pad_top = (int)rb(r, 4), p->pad_bottom = (int)rb(r, 4);
            p->pad_left = (int)rb(r, 4), p->pad_right = (int)rb(r, 4);
        }
        if (transposed) {
            int mh = p->stride_h > dil(p->dilation_h) ? p->stride_h : dil(p->dilation_h);
            int mw = p->stride_w > dil(p->dilation_w) ? p->stride_w : dil(p->dilation_w);
            p->output_padding_h = (int)rb(r, (uint64_t)mh);
            p->output_padding_w = (int)rb(r, (uint64_t)mw);
        }
        geo G = geo_of(&q);
        int64_t kdh = G.dh * (q.kh - 1) + 1, kdw = G.dw * (q.kw - 1) + 1;
        if (!transposed) {
            bool ok = true;
            if (p->padding == SX_PAD_VALID)
                ok = q.h >= kdh && q.w >= kdw;
            if (p->padding == SX_PAD_EXPLICIT)
                ok = q.h + p->pad_top + p->pad_bottom >= kdh &&
                     q.w + p->pad_left + p->pad_right >= kdw;
            if (ok)
                return q;
        } else {
            bool ok = G.h >= 1 && G.w >= 1;
            if (p->padding == SX_PAD_SAME_UPPER || p->padding == SX_PAD_SAME_LOWER)
                ok = ok && (q.h - 1) * p->stride_h + kdh + p->output_padding_h >= G.h &&
                     (q.w - 1) * p->stride_w + kdw + p->output_padding_w >= G.w;
            if (ok)
                return q;
        }
    }
}

Test(tensor_conv_general, random_conv2d)
{
    sx_rng rng;
    sx_rng_seed(&rng, 32);
    for (int rep = 0; rep < 60; rep++) {
        gcfg q = rand_case(&rng, false);
        check_case(&rng, &q);
    }
}

Test(tensor_conv_general, random_transposed)
{
    sx_rng rng;
    sx_rng_seed(&rng, 33);
    for (int rep = 0; rep < 60; rep++) {
        gcfg q = rand_case(&rng, true);
        check_case(&rng, &q);
    }
}

/* L = <fwd(x, k), r>: dL/dx = bwd_input(k, r), dL/dk = bwd_kernel(x, r), against central
 * differences in f64 of every element (L is bilinear: the differences are exact up to
 * rounding, tolerance 1e-8 relative to the gradient's scale). */
static void check_fd(sx_rng *rng, const gcfg *q)
{
    shapes s = shapes_of(q);
    sx_tensor *x = tu_rand(rng, SX_F64, 4, s.xs, -1, 1), *k = tu_rand(rng, SX_F64, 4, s.ks, -1, 1);
    sx_tensor *r = tu_rand(rng, SX_F64, 4, s.ys, -1, 1), *y = tu_zeros(SX_F64, 4, s.ys);
    sx_tensor *dx = tu_zeros(SX_F64, 4, s.xs), *dk = tu_zeros(SX_F64, 4, s.ks);
    size_t wsb = ws_of(q, true);
    void *ws = malloc(wsb + 1);
    char d[400];
    describe(q, d, sizeof d);
    cr_assert_eq(call_bwdi(q, k, r, ws, wsb, dx), SX_OK, "%s: %s", d, sx_last_error());
    cr_assert_eq(call_bwdk(q, x, r, ws, wsb, dk), SX_OK, "%s: %s", d, sx_last_error());
    const double eps = 1e-3;
    for (int which = 0; which < 2; which++) {
        sx_tensor *v = which ? k : x, *grad = which ? dk : dx;
        for (int64_t i = 0; i < v->size; i++) {
            double old = sx_tensor_get(v, i), l[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                sx_tensor_set(v, i, old + (sgn ? -eps : eps));
                cr_assert_eq(call_fwd(q, x, k, ws, wsb, y), SX_OK);
                double acc = 0;
                for (int64_t j = 0; j < y->size; j++)
                    acc += sx_tensor_get(y, j) * sx_tensor_get(r, j);
                l[sgn] = acc;
            }
            sx_tensor_set(v, i, old);
            double fd = (l[0] - l[1]) / (2 * eps), g = sx_tensor_get(grad, i);
            cr_assert(fabs(fd - g) <= 1e-8 * (1 + fabs(g)), "%s: d%s[%lld] fd %.17g, kernel %.17g",
                      d, which ? "k" : "x", (long long)i, fd, g);
        }
    }
    sx_tensor_free(x), sx_tensor_free(k), sx_tensor_free(r), sx_tensor_free(y);
    sx_tensor_free(dx), sx_tensor_free(dk);
    free(ws);
}

Test(tensor_conv_general, finite_differences_f64)
{
    sx_rng rng;
    sx_rng_seed(&rng, 34);
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (fixed[i].n * fixed[i].h * fixed[i].w * fixed[i].c <= 300)
            check_fd(&rng, &fixed[i]);
    for (int rep = 0; rep < 12; rep++) {
        gcfg q = rand_case(&rng, rep % 2 == 1);
        check_fd(&rng, &q);
    }
}

/* The three results of conv2d with parameters p on x, k, dy (full workspace). */
static void run3(const sx_conv2d_params *p, const sx_tensor *x, const sx_tensor *k,
                 const sx_tensor *dy, sx_tensor *y, sx_tensor *dx, sx_tensor *dk)
{
    size_t wsb = sx_conv2d_workspace(x->shape, k->shape, p);
    void *ws = malloc(wsb + 1);
    cr_assert_eq(sx_tensor_conv2d_out(x, k, p, ws, wsb, y), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_conv2d_backward_input_out(k, dy, p, ws, wsb, dx), SX_OK, "%s",
                 sx_last_error());
    cr_assert_eq(sx_tensor_conv2d_backward_kernel_out(x, dy, p, ws, wsb, dk), SX_OK, "%s",
                 sx_last_error());
    free(ws);
}

static void expect_bits(const char *what, const sx_tensor *a, const sx_tensor *b)
{
    cr_assert_eq(a->size, b->size);
    cr_assert_eq(memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)), 0,
                 "%s: the bits differ", what);
}

/* Parameters that describe an original geometry (the default constructor's explicit dilation 1
 * and groups 1, EXPLICIT pads equal to SAME's split, SAME_LOWER where the total padding is
 * even, EXPLICIT zero pads for VALID) run the original kernels: the same bits, Winograd and
 * the direct kernels included (3x3 and 5x5 with 16 channels). */
Test(tensor_conv_general, original_geometry_same_bits)
{
    sx_rng rng;
    sx_rng_seed(&rng, 35);
    struct {
        int64_t n, h, w, c, kh, kw, f;
        int s;
        sx_padding old;
        sx_conv2d_params p;
    } cs[] = {
        {2, 9, 9, 16, 3, 3, 16, 1, SX_PAD_SAME, prm(1, 1, SX_PAD_EXPLICIT, 1, 1, 1, 1, 1, 1, 1)},
        {2, 9, 9, 16, 3, 3, 16, 1, SX_PAD_SAME, prm(1, 1, SX_PAD_SAME_LOWER, 0, 0, 0, 0, 1, 1, 1)},
        {2, 9, 9, 16, 3, 3, 16, 1, SX_PAD_SAME, prm(1, 1, SX_PAD_SAME, 0, 0, 0, 0, 1, 1, 1)},
        {1, 11, 10, 16, 5, 5, 16, 1, SX_PAD_SAME, prm(1, 1, SX_PAD_EXPLICIT, 2, 2, 2, 2, 1, 1, 1)},
        {2, 8, 9, 3, 3, 3, 5, 2, SX_PAD_SAME, prm(2, 2, SX_PAD_EXPLICIT, 0, 1, 1, 1, 1, 1, 1)},
        {2, 8, 9, 3, 3, 2, 5, 2, SX_PAD_VALID, prm(2, 2, SX_PAD_EXPLICIT, 0, 0, 0, 0, 1, 1, 0)},
        {1, 6, 6, 4, 1, 1, 8, 1, SX_PAD_VALID, prm(1, 1, SX_PAD_EXPLICIT, 0, 0, 0, 0, 2, 3, 1)},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (int d = 0; d < 2; d++) {
            sx_dtype dt = d ? SX_F64 : SX_F32;
            int64_t xs[4] = {cs[i].n, cs[i].h, cs[i].w, cs[i].c};
            int64_t ks[4] = {cs[i].kh, cs[i].kw, cs[i].c, cs[i].f};
            sx_conv2d_params old = {.stride_h = cs[i].s, .stride_w = cs[i].s, .padding = cs[i].old};
            sx_tensor *x = tu_rand(&rng, dt, 4, xs, -1, 1), *k = tu_rand(&rng, dt, 4, ks, -1, 1);
            int64_t ys[4], ys2[4];
            cr_assert_eq(sx_conv2d_shape(NULL, x, k, &old, ys), SX_OK);
            cr_assert_eq(sx_conv2d_shape(NULL, x, k, &cs[i].p, ys2), SX_OK, "%s", sx_last_error());
            cr_assert_eq(memcmp(ys, ys2, sizeof ys), 0, "case %zu: shapes", i);
            cr_assert_eq(sx_conv2d_workspace(xs, ks, &old), sx_conv2d_workspace(xs, ks, &cs[i].p));
            cr_assert_eq(sx_conv2d_workspace_min(xs, ks, &old),
                         sx_conv2d_workspace_min(xs, ks, &cs[i].p));
            sx_tensor *dy = tu_rand(&rng, dt, 4, ys, -1, 1);
            sx_tensor *t[6] = {tu_zeros(dt, 4, ys), tu_zeros(dt, 4, xs), tu_zeros(dt, 4, ks),
                               tu_zeros(dt, 4, ys), tu_zeros(dt, 4, xs), tu_zeros(dt, 4, ks)};
            run3(&old, x, k, dy, t[0], t[1], t[2]);
            run3(&cs[i].p, x, k, dy, t[3], t[4], t[5]);
            expect_bits("forward", t[0], t[3]);
            expect_bits("backward_input", t[1], t[4]);
            expect_bits("backward_kernel", t[2], t[5]);
            for (int j = 0; j < 6; j++)
                sx_tensor_free(t[j]);
            sx_tensor_free(x), sx_tensor_free(k), sx_tensor_free(dy);
        }
}

/* The new kernels give the same bits on one thread and on two, with the full and the minimum
 * workspace each (depthwise, grouped im2col with several bands, grouped 1x1, transposed). */
Test(tensor_conv_general, same_bits_for_any_thread_count)
{
    sx_rng rng;
    sx_rng_seed(&rng, 36);
    const int saved = sx_threads_get();
    const gcfg cs[] = {
        {4,
         30,
         30,
         64,
         3,
         3,
         64,
         {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME, .groups = 64},
         0},
        {4,
         24,
         24,
         16,
         3,
         3,
         16,
         {.stride_h = 1,
          .stride_w = 1,
          .padding = SX_PAD_SAME,
          .dilation_h = 2,
          .dilation_w = 2,
          .groups = 4},
         0},
        {4, 20, 20, 32, 1, 1, 32, {.stride_h = 1, .stride_w = 1, .groups = 4}, 0},
        {2,
         12,
         12,
         16,
         4,
         4,
         8,
         {.stride_h = 2,
          .stride_w = 2,
          .padding = SX_PAD_EXPLICIT,
          .pad_top = 1,
          .pad_bottom = 1,
          .pad_left = 1,
          .pad_right = 1,
          .groups = 2},
         1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        shapes s = shapes_of(&cs[i]);
        sx_tensor *x = tu_rand(&rng, SX_F32, 4, s.xs, -1, 1);
        sx_tensor *k = tu_rand(&rng, SX_F32, 4, s.ks, -1, 1);
        sx_tensor *dy = tu_rand(&rng, SX_F32, 4, s.ys, -1, 1);
        sx_tensor *r[2][3];
        for (int w = 0; w < 2; w++) {
            size_t wsb = ws_of(&cs[i], w == 0);
            void *ws = malloc(wsb + 1);
            for (int th = 0; th < 2; th++) {
                cr_assert_eq(sx_threads_set(th + 1), SX_OK);
                sx_tensor *y = tu_zeros(SX_F32, 4, s.ys), *dx = tu_zeros(SX_F32, 4, s.xs);
                sx_tensor *dk = tu_zeros(SX_F32, 4, s.ks);
                cr_assert_eq(call_fwd(&cs[i], x, k, ws, wsb, y), SX_OK, "%s", sx_last_error());
                cr_assert_eq(call_bwdi(&cs[i], k, dy, ws, wsb, dx), SX_OK);
                cr_assert_eq(call_bwdk(&cs[i], x, dy, ws, wsb, dk), SX_OK);
                if (th == 0) {
                    r[w][0] = y, r[w][1] = dx, r[w][2] = dk;
                    continue;
                }
                expect_bits("forward", r[w][0], y);
                expect_bits("backward_input", r[w][1], dx);
                expect_bits("backward_kernel", r[w][2], dk);
                sx_tensor_free(y), sx_tensor_free(dx), sx_tensor_free(dk);
            }
            free(ws);
        }
        /* forward and backward-input do not depend on the workspace either */
        expect_bits("forward, workspaces", r[0][0], r[1][0]);
        expect_bits("backward_input, workspaces", r[0][1], r[1][1]);
        for (int w = 0; w < 2; w++)
            for (int j = 0; j < 3; j++)
                sx_tensor_free(r[w][j]);
        sx_tensor_free(x), sx_tensor_free(k), sx_tensor_free(dy);
    }
    cr_assert_eq(sx_threads_set(saved), SX_OK);
}

/* A call that must fail with `want` and a message holding `needle`, leaving out unchanged.
 * which: 0..2 conv2d forward / backward-input / backward-kernel, 3..5 the transposed ones. */
static void expect_fail(int which, const sx_tensor *a, const sx_tensor *b,
                        const sx_conv2d_params *p, sx_tensor *out, sx_status want,
                        const char *needle)
{
    static char ws[1 << 16];
    sx_tensor *copy = NULL;
    cr_assert_eq(sx_tensor_clone(out, &copy), SX_OK);
    sx_status s;
    switch (which) {
    case 0:
        s = sx_tensor_conv2d_out(a, b, p, ws, sizeof ws, out);
        break;
    case 1:
        s = sx_tensor_conv2d_backward_input_out(a, b, p, ws, sizeof ws, out);
        break;
    case 2:
        s = sx_tensor_conv2d_backward_kernel_out(a, b, p, ws, sizeof ws, out);
        break;
    case 3:
        s = sx_tensor_conv_transpose2d_out(a, b, p, ws, sizeof ws, out);
        break;
    case 4:
        s = sx_tensor_conv_transpose2d_backward_input_out(a, b, p, ws, sizeof ws, out);
        break;
    default:
        s = sx_tensor_conv_transpose2d_backward_kernel_out(a, b, p, ws, sizeof ws, out);
    }
    cr_assert_eq(s, want, "kernel %d: %s (%s), want %s", which, sx_status_str(s), sx_last_error(),
                 sx_status_str(want));
    cr_assert(strstr(sx_last_error(), needle) != NULL, "'%s' lacks '%s'", sx_last_error(), needle);
    cr_assert_eq(memcmp(out->data, copy->data, (size_t)out->size * sx_dtype_size(out->dtype)), 0,
                 "a failed call left its output unchanged");
    sx_tensor_free(copy);
}

static sx_tensor *rt(sx_rng *r, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t s[4] = {a, b, c, d};
    return tu_rand(r, SX_F32, 4, s, -1, 1);
}

Test(tensor_conv_general, errors)
{
    sx_rng rng;
    sx_rng_seed(&rng, 37);
    /* x (2,7,6,6), groups 3: k (3,3,2,9), y (2,7,6,9) with SAME */
    sx_tensor *x = rt(&rng, 2, 7, 6, 6), *k = rt(&rng, 3, 3, 2, 9), *y = rt(&rng, 2, 7, 6, 9);
    sx_tensor *k3 = rt(&rng, 3, 3, 3, 9), *k8 = rt(&rng, 3, 3, 2, 8), *dx = rt(&rng, 2, 7, 6, 6);
    sx_tensor *dk = rt(&rng, 3, 3, 2, 9), *kbig = rt(&rng, 4, 3, 2, 9);
    sx_conv2d_params p = prm(1, 1, SX_PAD_SAME, 0, 0, 0, 0, 1, 1, 3);
    int64_t s[4];
    cr_assert_eq(sx_conv2d_shape(NULL, x, k, &p, s), SX_OK, "%s", sx_last_error());

    /* kernel channels not c / groups; groups not dividing c, or f */
    expect_fail(0, x, k3, &p, y, SX_E_SHAPE, "expects 2");
    sx_conv2d_params g4 = p;
    g4.groups = 4;
    expect_fail(0, x, k, &g4, y, SX_E_SHAPE, "do not divide");
    expect_fail(1, k8, y, &p, dx, SX_E_SHAPE, "do not divide");
    /* negative groups, dilation; stride 0; unknown padding; negative explicit pads */
    sx_conv2d_params bad = p;
    bad.groups = -1;
    expect_fail(0, x, k, &bad, y, SX_E_ARG, "groups -1");
    bad = p, bad.dilation_w = -2;
    expect_fail(2, x, y, &bad, dk, SX_E_ARG, "dilation");
    bad = p, bad.stride_h = 0;
    expect_fail(0, x, k, &bad, y, SX_E_ARG, "stride");
    bad = p, bad.padding = (sx_padding)9;
    expect_fail(1, k, y, &bad, dx, SX_E_ARG, "unknown padding 9");
    bad = prm(1, 1, SX_PAD_EXPLICIT, 1, -1, 0, 0, 1, 1, 3);
    expect_fail(0, x, k, &bad, y, SX_E_ARG, "explicit pads");
    /* output padding is for the transposed convolution only */
    bad = p, bad.output_padding_h = 1;
    expect_fail(0, x, k, &bad, y, SX_E_ARG, "output padding");
    /* the dilated window larger than the padded input: 4 rows at dilation 3 span 10 > 7 + 2 */
    sx_conv2d_params dv = prm(1, 1, SX_PAD_EXPLICIT, 1, 1, 0, 0, 3, 1, 3);
    expect_fail(0, x, kbig, &dv, y, SX_E_SHAPE, "dilated window");
    cr_assert_eq(sx_conv2d_shape("who", x, kbig, &dv, s), SX_E_SHAPE);
    cr_assert(strncmp(sx_last_error(), "who:", 4) == 0, "%s", sx_last_error());
    dv.padding = SX_PAD_VALID;
    expect_fail(0, x, kbig, &dv, y, SX_E_SHAPE, "larger than the padded input");
    /* wrong output and dy shapes; the workspace below the minimum */
    sx_conv2d_params dil = prm(1, 1, SX_PAD_SAME, 0, 0, 0, 0, 2, 2, 3);
    expect_fail(0, x, k, &dil, dk, SX_E_SHAPE, "(3,3,2,9)");
    expect_fail(2, x, k, &dil, dk, SX_E_SHAPE, "dy");
    size_t need = sx_conv2d_workspace_min(x->shape, k->shape, &dil);
    cr_assert_gt(need, 0);
    char *ws = malloc(need);
    cr_assert_eq(sx_tensor_conv2d_out(x, k, &dil, ws, need - 1, y), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "workspace") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_conv2d_out(x, k, &dil, NULL, need, y), SX_E_ARG);
    cr_assert_eq(sx_tensor_conv2d_out(x, k, &dil, x->data, need, y), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "overlap") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_conv2d_out(x, k, &dil, ws, need, y), SX_OK, "%s", sx_last_error());
    free(ws);
    cr_assert_eq(sx_conv2d_workspace(x->shape, k3->shape, &p), 0, "invalid input: 0 bytes");

    /* transposed: x (2,3,3,6) -> c_out 4 with groups 2, k (2,2,2,6), stride 2 -> y (2,6,6,4) */
    sx_tensor *tx = rt(&rng, 2, 3, 3, 6), *tk = rt(&rng, 2, 2, 2, 6), *ty = rt(&rng, 2, 6, 6, 4);
    sx_tensor *tk5 = rt(&rng, 2, 2, 2, 5), *tdk = rt(&rng, 2, 2, 2, 6), *tdx = rt(&rng, 2, 3, 3, 6);
    sx_conv2d_params tp = prm(2, 2, SX_PAD_VALID, 0, 0, 0, 0, 1, 1, 2);
    cr_assert_eq(sx_conv_transpose2d_shape(NULL, tx, tk, &tp, s), SX_OK, "%s", sx_last_error());
    cr_assert(s[0] == 2 && s[1] == 6 && s[2] == 6 && s[3] == 4);
    expect_fail(3, tx, tk5, &tp, ty, SX_E_SHAPE, "c_in 5");
    sx_conv2d_params t4 = tp;
    t4.groups = 4;
    expect_fail(3, tx, tk, &t4, ty, SX_E_SHAPE, "do not divide");
    /* output padding: negative, or not below the stride nor the dilation */
    sx_conv2d_params top = tp;
    top.output_padding_w = 2;
    expect_fail(3, tx, tk, &top, ty, SX_E_ARG, "output padding 2");
    top.output_padding_w = -1;
    expect_fail(4, tk, ty, &top, tdx, SX_E_ARG, "output padding -1");
    top = tp, top.stride_h = 1, top.dilation_h = 3, top.output_padding_h = 2; /* below d: fine */
    cr_assert_eq(sx_conv_transpose2d_shape(NULL, tx, tk, &top, s), SX_OK, "%s", sx_last_error());
    cr_assert_eq(s[1], 2 * 1 + 3 * 1 + 2 + 1);
    /* SAME needing negative padding; an output size below 1 */
    sx_conv2d_params ts = prm(3, 3, SX_PAD_SAME_LOWER, 0, 0, 0, 0, 1, 1, 2);
    expect_fail(3, tx, tk, &ts, ty, SX_E_SHAPE, "use EXPLICIT");
    sx_conv2d_params tn = prm(1, 1, SX_PAD_EXPLICIT, 3, 3, 0, 0, 1, 1, 2);
    expect_fail(5, tx, ty, &tn, tdk, SX_E_SHAPE, "want >= 1");
    /* dy of the wrong shape */
    expect_fail(5, tx, tdx, &tp, tdk, SX_E_SHAPE, "dy");
    cr_assert_eq(sx_conv_transpose2d_workspace(tx->shape, tk5->shape, &tp), 0);

    sx_tensor *all[] = {x, k, y, k3, k8, dx, dk, kbig, tx, tk, ty, tk5, tdk, tdx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sx_tensor_free(all[i]);
}

/* Fields left 0 keep their old meaning: a dilation and groups of 0 read as 1, so a struct
 * with only stride and padding set is the default constructor's with those set. */
Test(tensor_conv_general, zero_fields_keep_their_meaning)
{
    sx_conv2d_params d = sx_conv2d_params_default();
    cr_assert(d.stride_h == 1 && d.stride_w == 1 && d.padding == SX_PAD_VALID);
    cr_assert(d.dilation_h == 1 && d.dilation_w == 1 && d.groups == 1);
    cr_assert(d.output_padding_h == 0 && d.output_padding_w == 0 && d.pad_top == 0);
    sx_rng rng;
    sx_rng_seed(&rng, 38);
    sx_tensor *x = rt(&rng, 1, 6, 5, 3), *k = rt(&rng, 3, 2, 3, 4), *dy = rt(&rng, 1, 3, 3, 4);
    sx_conv2d_params zero = {.stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME};
    d.stride_h = d.stride_w = 2, d.padding = SX_PAD_SAME;
    sx_tensor *t[6];
    int64_t ys[4] = {1, 3, 3, 4};
    for (int i = 0; i < 6; i++)
        t[i] = tu_zeros(SX_F32, 4, i % 3 == 0 ? ys : i % 3 == 1 ? x->shape : k->shape);
    run3(&zero, x, k, dy, t[0], t[1], t[2]);
    run3(&d, x, k, dy, t[3], t[4], t[5]);
    expect_bits("forward", t[0], t[3]);
    expect_bits("backward_input", t[1], t[4]);
    expect_bits("backward_kernel", t[2], t[5]);
    for (int i = 0; i < 6; i++)
        sx_tensor_free(t[i]);
    sx_tensor_free(x), sx_tensor_free(k), sx_tensor_free(dy);
}
