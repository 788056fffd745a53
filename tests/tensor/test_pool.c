/* Pooling (max, average; forward and backward; every padding mode, explicit pads, ceil_mode,
 * count_include_pad, dilation; adaptive average pooling) against direct nested-loop references
 * in double that visit every kernel cell and skip the padded ones, written from ONNX's and
 * PyTorch's formulas; gradients by central finite differences in f64; ONNX's worked examples;
 * the adjoint identity of average pooling; ties and NaN routed to the first maximum;
 * thread-count independence; every error.
 * Tolerances: max forward is a selection (exact); sums: f32 rtol 1e-5 atol 1e-6, f64 1e-12;
 * finite differences (step 1e-6, f64): 1e-6 absolute plus 1e-6 relative. */
#include "sx_tensor_kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const sx_dtype dtypes[2] = {SX_F32, SX_F64};

static double rtol_of(sx_dtype dt)
{
    return dt == SX_F32 ? 1e-5 : 1e-12;
}

static double atol_of(sx_dtype dt)
{
    return dt == SX_F32 ? 1e-6 : 1e-14;
}

/* ---------------------------------------------------------------- reference */

typedef struct ref_geom {
    int64_t n, h, w, c, oh, ow, pt, pl, pb, pr;
    int kh, kw, sh, sw, dh, dw;
    bool cip;
} ref_geom;

/* Output size and pads along one axis, ONNX's formulas written out in double: SAME splits
 * max(0, (out - 1) * s + ke - size) evenly (the odd cell after for UPPER, before for LOWER);
 * otherwise out = floor or ceil((size + pads - ke) / s) + 1, less the last window when it would
 * start past the input and the leading pad. False when the window does not fit. */
static bool ref_axis(int64_t size, int k, int d, int s, sx_padding pad, int p0, int p1,
                     bool ceil_mode, int64_t *out, int64_t *before, int64_t *after)
{
    double ke = (double)(k - 1) * d + 1;
    if (pad == SX_PAD_SAME || pad == SX_PAD_SAME_LOWER) {
        *out = (int64_t)ceil((double)size / s);
        double total = fmax(0, (double)(*out - 1) * s + ke - (double)size);
        *before = (int64_t)(pad == SX_PAD_SAME ? floor(total / 2) : ceil(total / 2));
        *after = (int64_t)total - *before;
        return true;
    }
    *before = pad == SX_PAD_EXPLICIT ? p0 : 0;
    *after = pad == SX_PAD_EXPLICIT ? p1 : 0;
    double span = (double)(size + *before + *after) - ke;
    if (span < 0 || size == 0)
        return false;
    *out = (int64_t)(ceil_mode ? ceil(span / s) : floor(span / s)) + 1;
    if (ceil_mode && (double)(*out - 1) * s >= (double)(size + *before))
        *out -= 1;
    return true;
}

static ref_geom ref_geometry(const int64_t xs[4], const sx_pool2d_params *p)
{
    ref_geom g = {.n = xs[0],
                  .h = xs[1],
                  .w = xs[2],
                  .c = xs[3],
                  .kh = p->kernel_h,
                  .kw = p->kernel_w,
                  .sh = p->stride_h,
                  .sw = p->stride_w,
                  .dh = p->dilation_h > 1 ? p->dilation_h : 1,
                  .dw = p->dilation_w > 1 ? p->dilation_w : 1,
                  .cip = p->count_include_pad != 0};
    cr_assert(ref_axis(g.h, g.kh, g.dh, g.sh, p->padding, p->pad_top, p->pad_bottom, p->ceil_mode,
                       &g.oh, &g.pt, &g.pb));
    cr_assert(ref_axis(g.w, g.kw, g.dw, g.sw, p->padding, p->pad_left, p->pad_right, p->ceil_mode,
                       &g.ow, &g.pl, &g.pr));
    return g;
}

static int64_t at4(int64_t a, int64_t b, int64_t c, int64_t d, int64_t B, int64_t C, int64_t D)
{
    return ((a * B + b) * C + c) * D + d;
}

/* The flat input index of kernel cell (ky,kx) of window (b,oy,ox) at channel ch, or -1 if the
 * cell is padding. */
static int64_t ref_cell(const ref_geom *g, int64_t b, int64_t oy, int64_t ox, int ky, int kx,
                        int64_t ch)
{
    int64_t iy = oy * g->sh - g->pt + (int64_t)ky * g->dh;
    int64_t ix = ox * g->sw - g->pl + (int64_t)kx * g->dw;
    if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
        return -1;
    return at4(b, iy, ix, ch, g->h, g->w, g->c);
}

/* Kernel cell (ky,kx) of window (oy,ox) lies inside the padded input [-pt, h + pb) x
 * [-pl, w + pr): the cells count_include_pad counts. */
static bool ref_in_padded(const ref_geom *g, int64_t oy, int64_t ox, int ky, int kx)
{
    int64_t iy = oy * g->sh - g->pt + (int64_t)ky * g->dh;
    int64_t ix = ox * g->sw - g->pl + (int64_t)kx * g->dw;
    return iy >= -g->pt && iy < g->h + g->pb && ix >= -g->pl && ix < g->w + g->pr;
}

/* Forward (max or average) and backward of every window, in double. For max, `arg` receives the
 * first maximal cell in row-major window order (strict >), and dx routes dy there; a window
 * with no real cell (dilation) gives -inf and no gradient. Average divides by the real cells or,
 * with count_include_pad, by the cells inside the padded input. */
static void ref_pool(const ref_geom *g, bool is_max, const sx_tensor *x, const sx_tensor *dy,
                     double *y, double *dx)
{
    memset(dx, 0, sizeof(double) * (size_t)(g->n * g->h * g->w * g->c));
    for (int64_t b = 0; b < g->n; b++)
        for (int64_t oy = 0; oy < g->oh; oy++)
            for (int64_t ox = 0; ox < g->ow; ox++)
                for (int64_t ch = 0; ch < g->c; ch++) {
                    int64_t o = at4(b, oy, ox, ch, g->oh, g->ow, g->c), arg = -1, count = 0;
                    int64_t padded = 0;
                    double acc = 0;
                    for (int ky = 0; ky < g->kh; ky++)
                        for (int kx = 0; kx < g->kw; kx++) {
                            int64_t i = ref_cell(g, b, oy, ox, ky, kx, ch);
                            padded += ref_in_padded(g, oy, ox, ky, kx);
                            if (i < 0)
                                continue;
                            double v = x ? sx_tensor_get(x, i) : 0;
                            count++;
                            if (is_max) {
                                if (arg < 0 || v > acc) {
                                    acc = v;
                                    arg = i;
                                }
                            } else {
                                acc += v;
                            }
                        }
                    cr_assert(count > 0 || (is_max && (g->dh > 1 || g->dw > 1)),
                              "a window with no real cell");
                    double div = (double)(g->cip ? padded : count);
                    y[o] = is_max ? (count ? acc : -HUGE_VAL) : acc / div;
                    double d = dy ? sx_tensor_get(dy, o) : 0;
                    if (is_max) {
                        if (arg >= 0)
                            dx[arg] += d;
                        continue;
                    }
                    for (int ky = 0; ky < g->kh; ky++)
                        for (int kx = 0; kx < g->kw; kx++) {
                            int64_t i = ref_cell(g, b, oy, ox, ky, kx, ch);
                            if (i >= 0)
                                dx[i] += d / div;
                        }
                }
}

static bool close_to(const sx_tensor *t, const double *want, double rtol, double atol)
{
    for (int64_t i = 0; i < t->size; i++) {
        double got = sx_tensor_get(t, i);
        if (!(got == want[i] || fabs(got - want[i]) <= atol + rtol * fabs(want[i]))) {
            cr_log_error("element %lld: got %.17g, want %.17g", (long long)i, got, want[i]);
            return false;
        }
    }
    return true;
}

/* Random values; with `ties` small integers so that windows often hold equal maxima. */
static sx_tensor *rand_input(sx_rng *r, sx_dtype dt, const int64_t xs[4], bool ties)
{
    sx_tensor *x = tu_rand(r, dt, 4, xs, -2, 2);
    if (ties)
        for (int64_t i = 0; i < x->size; i++)
            sx_tensor_set(x, i, floor(sx_tensor_get(x, i)));
    return x;
}

/* The relu form is the plain backward where x > 0 and +0 elsewhere, bit for bit (the two graph
 * steps it replaces: a selection, so an infinite dy gives no NaN); with windows that do not
 * overlap, both forms give the same bits in place (dx = x). */
static void check_relu_and_inplace(sx_dtype dt, const sx_tensor *x, const sx_tensor *dy,
                                   sx_pool2d_params p)
{
    sx_tensor *plain = tu_zeros(dt, 4, x->shape), *masked = tu_zeros(dt, 4, x->shape);
    sx_tensor *relu = tu_zeros(dt, 4, x->shape);
    cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &p, plain), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_maxpool2d_relu_backward_out(x, dy, &p, relu), SX_OK, "%s",
                 sx_last_error());
    for (int64_t i = 0; i < x->size; i++) {
        if (dt == SX_F32) {
            float v = ((const float *)x->data)[i];
            ((float *)masked->data)[i] = v > 0 ? ((const float *)plain->data)[i] : 0.0f;
        } else {
            double v = ((const double *)x->data)[i];
            ((double *)masked->data)[i] = v > 0 ? ((const double *)plain->data)[i] : 0.0;
        }
    }
    size_t bytes = (size_t)x->size * sx_dtype_size(dt);
    cr_assert(memcmp(relu->data, masked->data, bytes) == 0, "relu form %s k%dx%d s%dx%d",
              sx_dtype_name(dt), p.kernel_h, p.kernel_w, p.stride_h, p.stride_w);
    bool disjoint = p.stride_h >= p.kernel_h && p.stride_w >= p.kernel_w && p.dilation_h <= 1 &&
                    p.dilation_w <= 1;
    for (int r = 0; r < 2; r++) {
        sx_tensor *io = tu_zeros(dt, 4, x->shape);
        memcpy(io->data, x->data, bytes);
        sx_status s = r ? sx_tensor_maxpool2d_relu_backward_out(io, dy, &p, io)
                        : sx_tensor_maxpool2d_backward_out(io, dy, &p, io);
        if (disjoint && x->size > 0) {
            cr_assert_eq(s, SX_OK, "in place: %s", sx_last_error());
            cr_assert(memcmp(io->data, (r ? relu : plain)->data, bytes) == 0,
                      "in place %s relu=%d k%dx%d s%dx%d", sx_dtype_name(dt), r, p.kernel_h,
                      p.kernel_w, p.stride_h, p.stride_w);
        } else if (x->size > 0) {
            cr_assert_eq(s, SX_E_ARG, "overlapping windows cannot run in place");
            cr_assert(memcmp(io->data, x->data, bytes) == 0, "refused, yet written");
        }
        sx_tensor_free(io);
    }
    sx_tensor_free(plain);
    sx_tensor_free(masked);
    sx_tensor_free(relu);
}

/* The parameters in one line, for messages. */
static const char *describe(const sx_pool2d_params *p, char *buf, size_t size)
{
    static const char *const pads[] = {"VALID", "SAME_UPPER", "SAME_LOWER", "EXPLICIT"};
    snprintf(buf, size, "k%dx%d s%dx%d %s pads %d,%d,%d,%d d%dx%d ceil %d cip %d", p->kernel_h,
             p->kernel_w, p->stride_h, p->stride_w,
             (unsigned)p->padding < 4 ? pads[p->padding] : "?", p->pad_top, p->pad_bottom,
             p->pad_left, p->pad_right, p->dilation_h, p->dilation_w, p->ceil_mode,
             p->count_include_pad);
    return buf;
}

/* Run one configuration of both pools, forward and backward, against the reference (average
 * pooling refuses dilation: checked instead). */
static void check_config(sx_rng *r, sx_dtype dt, const int64_t xs[4], sx_pool2d_params p, bool ties)
{
    char desc[160];
    describe(&p, desc, sizeof desc);
    ref_geom g = ref_geometry(xs, &p);
    int64_t ys[4];
    sx_tensor *x = rand_input(r, dt, xs, ties);
    cr_assert_eq(sx_pool2d_shape(NULL, x, &p, ys), SX_OK, "%s", sx_last_error());
    int64_t want[4] = {g.n, g.oh, g.ow, g.c};
    cr_assert_arr_eq(ys, want, sizeof want, "pool2d_shape");
    sx_tensor *dy = tu_rand(r, dt, 4, ys, -1, 1);
    sx_tensor *y = tu_zeros(dt, 4, ys), *dx = tu_zeros(dt, 4, xs);
    double *ry = malloc(sizeof(double) * (size_t)(y->size + 1));
    double *rdx = malloc(sizeof(double) * (size_t)(x->size + 1));
    for (int is_max = 0; is_max < 2; is_max++) {
        if (!is_max && (g.dh > 1 || g.dw > 1)) {
            cr_assert_eq(sx_tensor_avgpool2d_out(x, &p, y), SX_E_ARG, "avg with %s", desc);
            cr_assert_eq(sx_tensor_avgpool2d_backward_out(dy, &p, dx), SX_E_ARG);
            continue;
        }
        ref_pool(&g, is_max, x, dy, ry, rdx);
        if (is_max) {
            cr_assert_eq(sx_tensor_maxpool2d_out(x, &p, y), SX_OK, "%s", sx_last_error());
            cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &p, dx), SX_OK, "%s",
                         sx_last_error());
        } else {
            cr_assert_eq(sx_tensor_avgpool2d_out(x, &p, y), SX_OK, "%s", sx_last_error());
            cr_assert_eq(sx_tensor_avgpool2d_backward_out(dy, &p, dx), SX_OK, "%s",
                         sx_last_error());
        }
        double yr = is_max ? 0 : rtol_of(dt), ya = is_max ? 0 : atol_of(dt);
        cr_assert(close_to(y, ry, yr, ya), "%s forward %s x(%lld,%lld,%lld,%lld) %s ties=%d",
                  is_max ? "max" : "avg", sx_dtype_name(dt), (long long)xs[0], (long long)xs[1],
                  (long long)xs[2], (long long)xs[3], desc, ties);
        cr_assert(close_to(dx, rdx, rtol_of(dt), atol_of(dt)),
                  "%s backward %s x(%lld,%lld,%lld,%lld) %s ties=%d", is_max ? "max" : "avg",
                  sx_dtype_name(dt), (long long)xs[0], (long long)xs[1], (long long)xs[2],
                  (long long)xs[3], desc, ties);
    }
    check_relu_and_inplace(dt, x, dy, p);
    free(ry);
    free(rdx);
    sx_tensor_free(x);
    sx_tensor_free(dy);
    sx_tensor_free(y);
    sx_tensor_free(dx);
}

/* ---------------------------------------------------------------- forward and backward */

Test(tensor_pool, listed_configs_against_reference)
{
    /* kernel 2x2/3x3 (and unequal), strides 1/2 (and unequal), SAME/VALID, odd sizes */
    static const struct {
        int64_t h, w;
        int kh, kw, sh, sw;
    } cases[] = {
        {4, 4, 2, 2, 2, 2}, {5, 7, 2, 2, 2, 2}, {7, 5, 3, 3, 1, 1}, {9, 9, 3, 3, 2, 2},
        {6, 5, 3, 3, 2, 2}, {5, 6, 2, 3, 1, 2}, {7, 4, 3, 2, 2, 1}, {3, 3, 3, 3, 1, 1},
        {1, 1, 1, 1, 1, 1}, {1, 5, 1, 3, 1, 2}, {8, 3, 2, 2, 3, 3}, {5, 5, 1, 1, 2, 2},
    };
    sx_rng r;
    sx_rng_seed(&r, 11);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int pad = 0; pad < 2; pad++)
            for (int d = 0; d < 2; d++)
                for (int ties = 0; ties < 2; ties++) {
                    int64_t xs[4] = {2, cases[i].h, cases[i].w, 3};
                    sx_pool2d_params p = {.kernel_h = cases[i].kh,
                                          .kernel_w = cases[i].kw,
                                          .stride_h = cases[i].sh,
                                          .stride_w = cases[i].sw,
                                          .padding = pad ? SX_PAD_SAME : SX_PAD_VALID};
                    check_config(&r, dtypes[d], xs, p, ties);
                }
}

Test(tensor_pool, random_configs_against_reference)
{
    sx_rng r;
    sx_rng_seed(&r, 12);
    for (int trial = 0; trial < 150; trial++) {
        int64_t xs[4] = {1 + (int64_t)sx_rng_below(&r, 3), 1 + (int64_t)sx_rng_below(&r, 10),
                         1 + (int64_t)sx_rng_below(&r, 10), 1 + (int64_t)sx_rng_below(&r, 6)};
        sx_pool2d_params p = {.kernel_h = 1 + (int)sx_rng_below(&r, 4),
                              .kernel_w = 1 + (int)sx_rng_below(&r, 4),
                              .stride_h = 1 + (int)sx_rng_below(&r, 4),
                              .stride_w = 1 + (int)sx_rng_below(&r, 4),
                              .padding = sx_rng_below(&r, 2) ? SX_PAD_SAME : SX_PAD_VALID};
        if (p.padding == SX_PAD_VALID && (xs[1] < p.kernel_h || xs[2] < p.kernel_w))
            p.padding = SX_PAD_SAME;
        check_config(&r, dtypes[trial % 2], xs, p, trial % 3 == 0);
    }
}

/* Large enough for the parallel path, with more channels than one backward channel block. */
Test(tensor_pool, large_inputs_against_reference)
{
    sx_rng r;
    sx_rng_seed(&r, 13);
    int64_t xs[4] = {3, 17, 20, 70};
    sx_pool2d_params p = {
        .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME};
    for (int d = 0; d < 2; d++)
        check_config(&r, dtypes[d], xs, p, d == 1);
    sx_pool2d_params q = {
        .kernel_h = 2, .kernel_w = 3, .stride_h = 1, .stride_w = 2, .padding = SX_PAD_VALID};
    int64_t x1[4] = {1, 40, 33, 130};
    check_config(&r, SX_F32, x1, q, true);
}

Test(tensor_pool, result_does_not_depend_on_thread_count)
{
    sx_rng r;
    sx_rng_seed(&r, 14);
    int64_t xs[4] = {4, 24, 24, 80};
    sx_pool2d_params p = {
        .kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    int64_t ys[4];
    sx_tensor *x = rand_input(&r, SX_F32, xs, true);
    cr_assert_eq(sx_pool2d_shape("test", x, &p, ys), SX_OK);
    sx_tensor *dy = tu_rand(&r, SX_F32, 4, ys, -1, 1);
    sx_tensor *out[2][4];
    int saved = sx_threads_get();
    for (int t = 0; t < 2; t++) {
        cr_assert_eq(sx_threads_set(t == 0 ? 1 : 4), SX_OK);
        out[t][0] = tu_zeros(SX_F32, 4, ys);
        out[t][1] = tu_zeros(SX_F32, 4, ys);
        out[t][2] = tu_zeros(SX_F32, 4, xs);
        out[t][3] = tu_zeros(SX_F32, 4, xs);
        cr_assert_eq(sx_tensor_maxpool2d_out(x, &p, out[t][0]), SX_OK);
        cr_assert_eq(sx_tensor_avgpool2d_out(x, &p, out[t][1]), SX_OK);
        cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &p, out[t][2]), SX_OK);
        cr_assert_eq(sx_tensor_avgpool2d_backward_out(dy, &p, out[t][3]), SX_OK);
    }
    cr_assert_eq(sx_threads_set(saved), SX_OK);
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(memcmp(out[0][k]->data, out[1][k]->data, (size_t)out[0][k]->size * 4), 0,
                     "output %d differs between 1 and 4 threads", k);
        sx_tensor_free(out[0][k]);
        sx_tensor_free(out[1][k]);
    }
    sx_tensor_free(x);
    sx_tensor_free(dy);
}

/* <avgpool(x), g> == <x, avgpool_backward(g)>: the backward pass is the adjoint. */
Test(tensor_pool, avgpool_backward_is_the_adjoint)
{
    sx_rng r;
    sx_rng_seed(&r, 15);
    for (int trial = 0; trial < 40; trial++) {
        sx_dtype dt = dtypes[trial % 2];
        int64_t xs[4] = {1 + (int64_t)sx_rng_below(&r, 2), 2 + (int64_t)sx_rng_below(&r, 9),
                         2 + (int64_t)sx_rng_below(&r, 9), 1 + (int64_t)sx_rng_below(&r, 4)};
        sx_pool2d_params p = {.kernel_h = 1 + (int)sx_rng_below(&r, 3),
                              .kernel_w = 1 + (int)sx_rng_below(&r, 3),
                              .stride_h = 1 + (int)sx_rng_below(&r, 3),
                              .stride_w = 1 + (int)sx_rng_below(&r, 3),
                              .padding = trial % 4 < 2 ? SX_PAD_SAME : SX_PAD_VALID};
        if (xs[1] < p.kernel_h || xs[2] < p.kernel_w)
            p.padding = SX_PAD_SAME;
        int64_t ys[4];
        sx_tensor *x = tu_rand(&r, dt, 4, xs, -1, 1);
        cr_assert_eq(sx_pool2d_shape("test", x, &p, ys), SX_OK);
        sx_tensor *g = tu_rand(&r, dt, 4, ys, -1, 1);
        sx_tensor *y = tu_zeros(dt, 4, ys), *dx = tu_zeros(dt, 4, xs);
        cr_assert_eq(sx_tensor_avgpool2d_out(x, &p, y), SX_OK);
        cr_assert_eq(sx_tensor_avgpool2d_backward_out(g, &p, dx), SX_OK);
        double lhs = 0, rhs = 0, scale = 0;
        for (int64_t i = 0; i < y->size; i++) {
            lhs += sx_tensor_get(y, i) * sx_tensor_get(g, i);
            scale += fabs(sx_tensor_get(y, i) * sx_tensor_get(g, i));
        }
        for (int64_t i = 0; i < x->size; i++)
            rhs += sx_tensor_get(x, i) * sx_tensor_get(dx, i);
        cr_assert_leq(fabs(lhs - rhs), (dt == SX_F32 ? 1e-5 : 1e-13) * (scale + 1), "%g vs %g", lhs,
                      rhs);
        sx_tensor_free(x);
        sx_tensor_free(g);
        sx_tensor_free(y);
        sx_tensor_free(dx);
    }
}

/* ---------------------------------------------------------------- worked examples */

Test(tensor_pool, worked_example_3x3)
{
    int64_t xs[4] = {1, 3, 3, 1}, ys[4] = {1, 2, 2, 1};
    double v[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int d = 0; d < 2; d++) {
        sx_tensor *x = NULL, *y = tu_zeros(dtypes[d], 4, ys);
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 4, xs, v, 9, &x), SX_OK);
        /* 2x2 stride 1 VALID */
        sx_pool2d_params p = {
            .kernel_h = 2, .kernel_w = 2, .stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID};
        double max1[4] = {5, 6, 8, 9}, avg1[4] = {3, 4, 6, 7};
        cr_assert_eq(sx_tensor_maxpool2d_out(x, &p, y), SX_OK);
        cr_assert(close_to(y, max1, 0, 0));
        cr_assert_eq(sx_tensor_avgpool2d_out(x, &p, y), SX_OK);
        cr_assert(close_to(y, avg1, 0, 0));
        /* 2x2 stride 2 SAME: pad 0 before, 1 after; average over real cells only */
        sx_pool2d_params q = {
            .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME};
        double max2[4] = {5, 6, 8, 9}, avg2[4] = {3, 4.5, 7.5, 9};
        cr_assert_eq(sx_tensor_maxpool2d_out(x, &q, y), SX_OK);
        cr_assert(close_to(y, max2, 0, 0));
        cr_assert_eq(sx_tensor_avgpool2d_out(x, &q, y), SX_OK);
        cr_assert(close_to(y, avg2, 0, 0));
        /* 3x3 stride 1 SAME: pad 1 each side; corner windows hold 4 real cells */
        sx_pool2d_params s = {
            .kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
        int64_t s3[4] = {1, 3, 3, 1};
        sx_tensor *y3 = tu_zeros(dtypes[d], 4, s3);
        double avg3[9] = {3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7};
        double max3[9] = {5, 6, 6, 8, 9, 9, 8, 9, 9};
        cr_assert_eq(sx_tensor_avgpool2d_out(x, &s, y3), SX_OK);
        cr_assert(close_to(y3, avg3, 1e-7, 0));
        cr_assert_eq(sx_tensor_maxpool2d_out(x, &s, y3), SX_OK);
        cr_assert(close_to(y3, max3, 0, 0));
        sx_tensor_free(x);
        sx_tensor_free(y);
        sx_tensor_free(y3);
    }
}

/* All-equal windows: the gradient goes to the first cell of each window in scan order. */
Test(tensor_pool, maxpool_ties_route_to_first_cell)
{
    int64_t xs[4] = {1, 2, 2, 1};
    for (int d = 0; d < 2; d++) {
        sx_tensor *x = NULL, *dx = tu_zeros(dtypes[d], 4, xs), *dy = NULL;
        cr_assert_eq(sx_tensor_full(dtypes[d], 4, xs, 1.0, &x), SX_OK);
        /* one VALID window: everything to cell (0,0) */
        sx_pool2d_params p = {
            .kernel_h = 2, .kernel_w = 2, .stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID};
        int64_t s1[4] = {1, 1, 1, 1};
        double g1 = 3, want1[4] = {3, 0, 0, 0};
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 4, s1, &g1, 1, &dy), SX_OK);
        cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &p, dx), SX_OK);
        cr_assert(close_to(dx, want1, 0, 0));
        sx_tensor_free(dy);
        /* SAME 2x2 stride 1 (pad after only): window (i,j) starts at cell (i,j) */
        sx_pool2d_params q = {
            .kernel_h = 2, .kernel_w = 2, .stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
        double g2[4] = {1, 2, 3, 4};
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 4, xs, g2, 4, &dy), SX_OK);
        cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &q, dx), SX_OK);
        cr_assert(close_to(dx, g2, 0, 0));
        sx_tensor_free(dy);
        /* 3x3 SAME stride 1 (pad 1 before and after): each of the four windows covers all four
         * cells, so cell (0,0), first in every window, collects the whole gradient. */
        sx_pool2d_params s = {
            .kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 4, xs, g2, 4, &dy), SX_OK);
        cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &s, dx), SX_OK);
        double want3[4] = {10, 0, 0, 0};
        cr_assert(close_to(dx, want3, 0, 0));
        sx_tensor_free(dy);
        sx_tensor_free(x);
        sx_tensor_free(dx);
    }
}

/* Padding never takes part: all-negative inputs stay negative under max; average of ones is 1. */
Test(tensor_pool, padding_is_ignored)
{
    sx_rng r;
    sx_rng_seed(&r, 16);
    int64_t xs[4] = {2, 7, 6, 3};
    sx_pool2d_params p = {
        .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME};
    int64_t ys[4];
    for (int d = 0; d < 2; d++) {
        sx_tensor *x = tu_rand(&r, dtypes[d], 4, xs, -3, -1);
        cr_assert_eq(sx_pool2d_shape("t", x, &p, ys), SX_OK);
        sx_tensor *y = tu_zeros(dtypes[d], 4, ys), *one = NULL;
        cr_assert_eq(sx_tensor_maxpool2d_out(x, &p, y), SX_OK);
        for (int64_t i = 0; i < y->size; i++)
            cr_assert_lt(sx_tensor_get(y, i), -1.0);
        cr_assert_eq(sx_tensor_ones(dtypes[d], 4, xs, &one), SX_OK);
        cr_assert_eq(sx_tensor_avgpool2d_out(one, &p, y), SX_OK);
        for (int64_t i = 0; i < y->size; i++)
            cr_assert_eq(sx_tensor_get(y, i), 1.0);
        sx_tensor_free(x);
        sx_tensor_free(y);
        sx_tensor_free(one);
    }
}

Test(tensor_pool, maxpool_propagates_nan_and_routes_to_it)
{
    int64_t xs[4] = {1, 4, 4, 2}, ys[4] = {1, 2, 2, 2};
    for (int d = 0; d < 2; d++) {
        sx_tensor *x = NULL, *y = tu_zeros(dtypes[d], 4, ys), *dx = tu_zeros(dtypes[d], 4, xs);
        sx_tensor *dy = NULL;
        cr_assert_eq(sx_tensor_full(dtypes[d], 4, xs, 1.0, &x), SX_OK);
        cr_assert_eq(sx_tensor_full(dtypes[d], 4, ys, 1.0, &dy), SX_OK);
        /* channel 0: a NaN at (1,1) after a larger value at (0,0) of the first window */
        sx_tensor_set(x, 0, 5.0);
        sx_tensor_set(x, (1 * 4 + 1) * 2, NAN);
        sx_pool2d_params p = {
            .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
        cr_assert_eq(sx_tensor_maxpool2d_out(x, &p, y), SX_OK);
        cr_assert(isnan(sx_tensor_get(y, 0)));
        cr_assert_eq(sx_tensor_get(y, 1), 1.0, "channel 1 is unaffected");
        cr_assert_eq(sx_tensor_get(y, 2), 1.0, "other windows are unaffected");
        cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &p, dx), SX_OK);
        cr_assert_eq(sx_tensor_get(dx, (1 * 4 + 1) * 2), 1.0, "routed to the NaN");
        cr_assert_eq(sx_tensor_get(dx, 0), 0.0);
        cr_assert_eq(sx_tensor_get(dx, 1), 1.0, "channel 1: first cell of the window");
        sx_tensor_free(x);
        sx_tensor_free(y);
        sx_tensor_free(dx);
        sx_tensor_free(dy);
    }
}

/* The fused 2x2 paths (forward and the one-pass backward) and the non-overlapping store path of
 * the general window: MNIST's shape, odd sizes (SAME pads the last row and column, VALID drops
 * them, so some cells belong to no window), more channels than one backward block, stride >
 * kernel, and dx filled with garbage first (every cell must be written). */
Test(tensor_pool, non_overlapping_windows_against_reference)
{
    static const struct {
        int64_t n, h, w, c;
        int kh, kw, sh, sw;
    } cases[] = {
        {3, 28, 28, 32, 2, 2, 2, 2}, {2, 15, 13, 70, 2, 2, 2, 2}, {2, 9, 11, 5, 3, 3, 3, 3},
        {2, 10, 9, 3, 2, 3, 3, 4},   {1, 7, 7, 130, 2, 2, 2, 2},  {2, 6, 8, 4, 1, 2, 1, 2},
    };
    sx_rng r;
    sx_rng_seed(&r, 21);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int pad = 0; pad < 2; pad++)
            for (int d = 0; d < 2; d++) {
                int64_t xs[4] = {cases[i].n, cases[i].h, cases[i].w, cases[i].c};
                sx_pool2d_params p = {.kernel_h = cases[i].kh,
                                      .kernel_w = cases[i].kw,
                                      .stride_h = cases[i].sh,
                                      .stride_w = cases[i].sw,
                                      .padding = pad ? SX_PAD_SAME : SX_PAD_VALID};
                check_config(&r, dtypes[d], xs, p, (i + (size_t)pad) % 2 == 0);
                /* dx over garbage: the backward passes must not rely on a zeroed output */
                ref_geom g = ref_geometry(xs, &p);
                int64_t ys[4] = {g.n, g.oh, g.ow, g.c};
                sx_tensor *x = rand_input(&r, dtypes[d], xs, false);
                sx_tensor *dy = tu_rand(&r, dtypes[d], 4, ys, -1, 1);
                sx_tensor *dx = tu_rand(&r, dtypes[d], 4, xs, 5, 9);
                double *ry = malloc(sizeof(double) * (size_t)(dy->size + 1));
                double *rdx = malloc(sizeof(double) * (size_t)(x->size + 1));
                ref_pool(&g, true, x, dy, ry, rdx);
                cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &p, dx), SX_OK);
                cr_assert(close_to(dx, rdx, 0, 0), "max backward over garbage, case %zu", i);
                cr_assert_eq(sx_tensor_fill(dx, 7.0), SX_OK);
                ref_pool(&g, false, x, dy, ry, rdx);
                cr_assert_eq(sx_tensor_avgpool2d_backward_out(dy, &p, dx), SX_OK);
                cr_assert(close_to(dx, rdx, rtol_of(dtypes[d]), atol_of(dtypes[d])),
                          "avg backward over garbage, case %zu", i);
                free(ry);
                free(rdx);
                sx_tensor_free(x);
                sx_tensor_free(dy);
                sx_tensor_free(dx);
            }
}

/* 2x2 windows at lenet5's channel counts and around one AVX-512 vector (the masked kernels of
 * pool.c when c is not a multiple of 16), ties included, against the reference (check_config
 * also checks the relu form and in place, bit for bit). */
Test(tensor_pool, two_by_two_windows_at_small_channel_counts)
{
    static const int64_t cs[] = {1, 6, 15, 16, 17, 20, 33, 64, 70};
    sx_rng r;
    sx_rng_seed(&r, 23);
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (int d = 0; d < 2; d++) {
            int64_t xs[4] = {2, 10, 9, cs[i]};
            sx_pool2d_params p = sx_pool2d_params_default(2, 2);
            check_config(&r, dtypes[d], xs, p, (i + (size_t)d) % 2 == 0);
        }
}

/* NaN at each cell of a 2x2 window (fused path) and of a 3x3 one (general path), alone and
 * after an earlier NaN: the forward result is NaN and the gradient goes to the first NaN in
 * scan order; the other channel (no NaN) routes to its maximum as usual. */
Test(tensor_pool, nan_in_every_window_cell)
{
    for (int d = 0; d < 2; d++)
        for (int k = 2; k <= 3; k++)
            for (int first = 0; first < k * k; first++)
                for (int second = -1; second < k * k; second++) {
                    if (second == first)
                        continue;
                    int64_t xs[4] = {1, k, k, 2}, ys[4] = {1, 1, 1, 2};
                    sx_pool2d_params p = {.kernel_h = k,
                                          .kernel_w = k,
                                          .stride_h = k,
                                          .stride_w = k,
                                          .padding = SX_PAD_VALID};
                    sx_tensor *x = tu_zeros(dtypes[d], 4, xs), *y = tu_zeros(dtypes[d], 4, ys);
                    sx_tensor *dx = tu_zeros(dtypes[d], 4, xs), *dy = NULL;
                    cr_assert_eq(sx_tensor_full(dtypes[d], 4, ys, 2.0, &dy), SX_OK);
                    for (int cell = 0; cell < k * k; cell++) {
                        sx_tensor_set(x, cell * 2, cell == 1 ? 9.0 : (double)cell);
                        sx_tensor_set(x, cell * 2 + 1, cell == k * k - 2 ? 8.0 : -1.0);
                    }
                    sx_tensor_set(x, first * 2, NAN);
                    if (second >= 0)
                        sx_tensor_set(x, second * 2, NAN);
                    int want = second >= 0 && second < first ? second : first;
                    cr_assert_eq(sx_tensor_maxpool2d_out(x, &p, y), SX_OK);
                    cr_assert(isnan(sx_tensor_get(y, 0)), "k %d NaN at %d, %d", k, first, second);
                    cr_assert_eq(sx_tensor_get(y, 1), 8.0);
                    cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &p, dx), SX_OK);
                    for (int cell = 0; cell < k * k; cell++) {
                        cr_assert_eq(sx_tensor_get(dx, cell * 2), cell == want ? 2.0 : 0.0,
                                     "k %d NaN at %d, %d: cell %d", k, first, second, cell);
                        cr_assert_eq(sx_tensor_get(dx, cell * 2 + 1),
                                     cell == k * k - 2 ? 2.0 : 0.0);
                    }
                    sx_tensor_free(x);
                    sx_tensor_free(y);
                    sx_tensor_free(dx);
                    sx_tensor_free(dy);
                }
}

/* ---------------------------------------------------------------- shapes and errors */

Test(tensor_pool, output_shape_follows_tensorflow)
{
    for (int64_t h = 1; h <= 12; h++)
        for (int k = 1; k <= 4; k++)
            for (int s = 1; s <= 4; s++) {
                static float buf[2 * 6 * 7 * 3];
                int64_t xs[4] = {2, h, 13 - h, 3};
                sx_tensor x = sx_tensor_view(SX_F32, 4, xs, buf);
                int64_t ys[4];
                sx_pool2d_params same = {.kernel_h = k,
                                         .kernel_w = 1,
                                         .stride_h = s,
                                         .stride_w = 1,
                                         .padding = SX_PAD_SAME};
                cr_assert_eq(sx_pool2d_shape("t", &x, &same, ys), SX_OK);
                cr_assert_eq(ys[1], (int64_t)ceil((double)h / s));
                cr_assert_eq(ys[2], 13 - h);
                sx_pool2d_params valid = {.kernel_h = k,
                                          .kernel_w = 1,
                                          .stride_h = s,
                                          .stride_w = 1,
                                          .padding = SX_PAD_VALID};
                if (h < k) {
                    cr_assert_eq(sx_pool2d_shape("t", &x, &valid, ys), SX_E_SHAPE);
                    cr_assert(strstr(sx_last_error(), "t:") == sx_last_error());
                } else {
                    cr_assert_eq(sx_pool2d_shape("t", &x, &valid, ys), SX_OK);
                    cr_assert_eq(ys[1], (h - k) / s + 1);
                    cr_assert_eq(ys[0], 2);
                    cr_assert_eq(ys[3], 3);
                }
            }
}

Test(tensor_pool, empty_tensors_do_nothing)
{
    int64_t shapes[3][4] = {{0, 4, 4, 2}, {2, 4, 4, 0}, {1, 0, 3, 2}};
    for (int i = 0; i < 3; i++)
        for (int pad = 0; pad < 2; pad++) {
            sx_pool2d_params p = {.kernel_h = 2,
                                  .kernel_w = 2,
                                  .stride_h = 2,
                                  .stride_w = 2,
                                  .padding = pad ? SX_PAD_SAME : SX_PAD_VALID};
            sx_tensor *x = tu_zeros(SX_F64, 4, shapes[i]);
            int64_t ys[4];
            if (shapes[i][1] == 0 && !pad) { /* as conv2d: a VALID window cannot fit h = 0 */
                cr_assert_eq(sx_pool2d_shape("t", x, &p, ys), SX_E_SHAPE);
                sx_tensor_free(x);
                continue;
            }
            cr_assert_eq(sx_pool2d_shape("t", x, &p, ys), SX_OK, "%s", sx_last_error());
            sx_tensor *y = tu_zeros(SX_F64, 4, ys), *dx = tu_zeros(SX_F64, 4, shapes[i]);
            cr_assert_eq(y->size, 0);
            cr_assert_eq(sx_tensor_maxpool2d_out(x, &p, y), SX_OK);
            cr_assert_eq(sx_tensor_avgpool2d_out(x, &p, y), SX_OK);
            cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, y, &p, dx), SX_OK);
            cr_assert_eq(sx_tensor_avgpool2d_backward_out(y, &p, dx), SX_OK);
            sx_tensor_free(x);
            sx_tensor_free(y);
            sx_tensor_free(dx);
        }
}

static bool all_equal(const sx_tensor *t, double v)
{
    for (int64_t i = 0; i < t->size; i++)
        if (sx_tensor_get(t, i) != v)
            return false;
    return true;
}

Test(tensor_pool, errors_leave_outputs_untouched)
{
    int64_t xs[4] = {2, 5, 5, 3}, ys[4] = {2, 2, 2, 3}, bad[4] = {2, 3, 2, 3}, r3[3] = {5, 5, 3};
    sx_pool2d_params p = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    sx_tensor *x = NULL, *x3 = NULL, *xd = NULL, *dy = NULL, *dyb = NULL;
    cr_assert_eq(sx_tensor_full(SX_F32, 4, xs, 1.0, &x), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 3, r3, 1.0, &x3), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F64, 4, xs, 1.0, &xd), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 4, ys, 1.0, &dy), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 4, bad, 1.0, &dyb), SX_OK);
    sx_tensor *y = NULL, *yb = NULL, *yd = NULL, *dx = NULL;
    cr_assert_eq(sx_tensor_full(SX_F32, 4, ys, 42.0, &y), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 4, bad, 42.0, &yb), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F64, 4, ys, 42.0, &yd), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 4, xs, 42.0, &dx), SX_OK);

    sx_pool2d_params
        k0 = {.kernel_h = 0, .kernel_w = 2, .stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID},
        s0 = {.kernel_h = 2, .kernel_w = 2, .stride_h = 1, .stride_w = 0, .padding = SX_PAD_VALID};
    sx_pool2d_params pbad = {.kernel_h = 2,
                             .kernel_w = 2,
                             .stride_h = 1,
                             .stride_w = 1,
                             .padding = (sx_padding)7},
                     big = {.kernel_h = 6,
                            .kernel_w = 2,
                            .stride_h = 1,
                            .stride_w = 1,
                            .padding = SX_PAD_VALID};
    int64_t ys2[4];
    cr_assert_eq(sx_pool2d_shape("t", x, NULL, ys2), SX_E_ARG);
    cr_assert_eq(sx_pool2d_shape("t", NULL, &p, ys2), SX_E_ARG);
    cr_assert_eq(sx_pool2d_shape("t", x, &p, NULL), SX_E_ARG);

    for (int which = 0; which < 2; which++) {
        sx_status (*fwd)(const sx_tensor *, const sx_pool2d_params *, sx_tensor *) =
            which ? sx_tensor_maxpool2d_out : sx_tensor_avgpool2d_out;
        cr_assert_eq(fwd(NULL, &p, y), SX_E_ARG);
        cr_assert_eq(fwd(x, NULL, y), SX_E_ARG);
        cr_assert_eq(fwd(x, &p, NULL), SX_E_ARG);
        cr_assert_eq(fwd(x, &k0, y), SX_E_ARG);
        cr_assert(strstr(sx_last_error(), "kernel 0x2"), "%s", sx_last_error());
        cr_assert_eq(fwd(x, &s0, y), SX_E_ARG);
        cr_assert_eq(fwd(x, &pbad, y), SX_E_ARG);
        cr_assert_eq(fwd(x, &big, y), SX_E_SHAPE);
        cr_assert_eq(fwd(x3, &p, y), SX_E_RANK);
        cr_assert(strstr(sx_last_error(), "(5,5,3)"), "%s", sx_last_error());
        cr_assert_eq(fwd(x, &p, yb), SX_E_SHAPE);
        cr_assert(strstr(sx_last_error(), "(2,3,2,3)") && strstr(sx_last_error(), "(2,2,2,3)"),
                  "%s", sx_last_error());
        cr_assert_eq(fwd(x, &p, yd), SX_E_DTYPE);
        cr_assert(all_equal(y, 42) && all_equal(yb, 42) && all_equal(yd, 42));
    }
    cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dyb, &p, dx), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "dy"), "%s", sx_last_error());
    cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &p, yb), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_maxpool2d_backward_out(xd, dy, &p, dx), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, NULL, &p, dx), SX_E_ARG);
    cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &big, dx), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_avgpool2d_backward_out(dyb, &p, dx), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_avgpool2d_backward_out(dy, &p, xd), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_avgpool2d_backward_out(dy, &p, x3), SX_E_RANK);
    cr_assert_eq(sx_tensor_avgpool2d_backward_out(dy, NULL, dx), SX_E_ARG);
    cr_assert(all_equal(dx, 42) && all_equal(yb, 42) && all_equal(x3, 1) && all_equal(xd, 1));

    /* outputs must not overlap inputs */
    sx_tensor y_on_x = sx_tensor_view(SX_F32, 4, ys, x->data);
    cr_assert_eq(sx_tensor_maxpool2d_out(x, &p, &y_on_x), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "overlaps"), "%s", sx_last_error());
    cr_assert_eq(sx_tensor_avgpool2d_out(x, &p, &y_on_x), SX_E_ARG);
    /* in place needs windows that do not overlap, and the very same memory */
    sx_pool2d_params q = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID};
    int64_t qs[4] = {2, 4, 4, 3};
    sx_tensor *dyq = NULL, *xbig = NULL;
    cr_assert_eq(sx_tensor_full(SX_F32, 4, qs, 1.0, &dyq), SX_OK);
    cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dyq, &q, x), SX_E_ARG);
    cr_assert_eq(sx_tensor_maxpool2d_relu_backward_out(x, dyq, &q, x), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "overlaps"), "%s", sx_last_error());
    int64_t big2[4] = {4, 5, 5, 3};
    cr_assert_eq(sx_tensor_full(SX_F32, 4, big2, 1.0, &xbig), SX_OK);
    sx_tensor xa = sx_tensor_view(SX_F32, 4, xs, xbig->data);
    sx_tensor xshift = sx_tensor_view(SX_F32, 4, xs, (float *)xbig->data + 3);
    cr_assert_eq(sx_tensor_maxpool2d_relu_backward_out(&xa, dy, &p, &xshift), SX_E_ARG);
    cr_assert(all_equal(xbig, 1));
    sx_tensor_free(dyq);
    sx_tensor_free(xbig);
    sx_tensor dy_on_dx = sx_tensor_view(SX_F32, 4, ys, (float *)dx->data + 5);
    cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, &dy_on_dx, &p, dx), SX_E_ARG);
    cr_assert_eq(sx_tensor_avgpool2d_backward_out(&dy_on_dx, &p, dx), SX_E_ARG);
    cr_assert(all_equal(x, 1) && all_equal(dx, 42));

    sx_tensor *ts[] = {x, x3, xd, dy, dyb, y, yb, yd, dx};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        sx_tensor_free(ts[i]);
}

/* Regression: the relu form multiplied the routed gradient by (x > 0), so an infinite dy gave
 * NaN (inf * 0) where x <= 0; it selects now, as relu's gradient does (+0 there). Windows of
 * 2x2 (the fast path), 3x3 (the general store path) and overlapping 3x3 stride 1 (accumulate,
 * then select), f32 and f64, dy all infinite: dx is +inf at each window's first maximum when
 * that is positive, and +0 everywhere else. */
Test(tensor_pool, relu_backward_selects_so_an_infinite_dy_gives_zeros)
{
    static const sx_pool2d_params ps[3] = {
        {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID},
        {.kernel_h = 3, .kernel_w = 3, .stride_h = 3, .stride_w = 3, .padding = SX_PAD_VALID},
        {.kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID}};
    int64_t xs[4] = {2, 6, 6, 3};
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < 3; k++) {
            sx_rng r;
            sx_rng_seed(&r, 1400 + k);
            sx_tensor *x = tu_rand(&r, (sx_dtype)dt, 4, xs, -1, 0.3), *dy = NULL, *dx = NULL;
            for (int64_t i = 0; i < x->size; i += 5) /* relu's exact zeros */
                sx_tensor_set(x, i, 0.0);
            int64_t ys[4];
            cr_assert_eq(sx_pool2d_shape(NULL, x, &ps[k], ys), SX_OK);
            cr_assert_eq(sx_tensor_full((sx_dtype)dt, 4, ys, HUGE_VAL, &dy), SX_OK);
            cr_assert_eq(sx_tensor_zeros((sx_dtype)dt, 4, xs, &dx), SX_OK);
            cr_assert_eq(sx_tensor_maxpool2d_relu_backward_out(x, dy, &ps[k], dx), SX_OK, "%s",
                         sx_last_error());
            for (int64_t i = 0; i < x->size; i++) {
                double v = sx_tensor_get(dx, i), xi = sx_tensor_get(x, i);
                if (xi > 0)
                    cr_assert(v == 0 || v == HUGE_VAL, "%s case %d: dx[%lld] = %g",
                              sx_dtype_name((sx_dtype)dt), k, (long long)i, v);
                else
                    cr_assert(v == 0 && !signbit(v), "%s case %d: dx[%lld] = %g at x = %g",
                              sx_dtype_name((sx_dtype)dt), k, (long long)i, v, xi);
            }
            sx_tensor_free(x);
            sx_tensor_free(dy);
            sx_tensor_free(dx);
        }
}

/* ---------------------------------------------------------------- ONNX's options */

/* A random configuration of every option: padding mode, explicit pads (each smaller than the
 * dilated kernel), ceil_mode, count_include_pad, dilation up to 3 (average pooling gets 1). */
static sx_pool2d_params rand_params(sx_rng *r, const int64_t xs[4], bool dilate)
{
    sx_pool2d_params p = {
        .kernel_h = 1 + (int)sx_rng_below(r, 4),
        .kernel_w = 1 + (int)sx_rng_below(r, 4),
        .stride_h = 1 + (int)sx_rng_below(r, 3),
        .stride_w = 1 + (int)sx_rng_below(r, 3),
        .padding = (sx_padding)sx_rng_below(r, 4),
        .dilation_h = dilate ? 1 + (int)sx_rng_below(r, 3) : (int)sx_rng_below(r, 2),
        .dilation_w = dilate ? 1 + (int)sx_rng_below(r, 3) : (int)sx_rng_below(r, 2),
        .ceil_mode = (int)sx_rng_below(r, 2),
        .count_include_pad = (int)sx_rng_below(r, 2)};
    int keh = (p.kernel_h - 1) * (p.dilation_h > 1 ? p.dilation_h : 1) + 1;
    int kew = (p.kernel_w - 1) * (p.dilation_w > 1 ? p.dilation_w : 1) + 1;
    if (p.padding == SX_PAD_EXPLICIT) {
        p.pad_top = (int)sx_rng_below(r, (uint64_t)keh);
        p.pad_bottom = (int)sx_rng_below(r, (uint64_t)keh);
        p.pad_left = (int)sx_rng_below(r, (uint64_t)kew);
        p.pad_right = (int)sx_rng_below(r, (uint64_t)kew);
    }
    if (p.padding == SX_PAD_VALID || p.padding == SX_PAD_EXPLICIT) { /* make the kernel fit */
        if (xs[1] + p.pad_top + p.pad_bottom < keh)
            p.padding = SX_PAD_SAME_LOWER, p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 0;
        else if (xs[2] + p.pad_left + p.pad_right < kew)
            p.padding = SX_PAD_SAME, p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 0;
    }
    return p;
}

Test(tensor_pool, every_option_against_reference)
{
    sx_rng r;
    sx_rng_seed(&r, 1701);
    for (int trial = 0; trial < 400; trial++) {
        int64_t xs[4] = {1 + (int64_t)sx_rng_below(&r, 2), 1 + (int64_t)sx_rng_below(&r, 9),
                         1 + (int64_t)sx_rng_below(&r, 9), 1 + (int64_t)sx_rng_below(&r, 5)};
        sx_pool2d_params p = rand_params(&r, xs, trial % 2 == 0);
        check_config(&r, dtypes[(trial / 2) % 2], xs, p, trial % 5 == 0);
    }
}

/* Larger inputs (the parallel path, several channel blocks) with each option alone. */
Test(tensor_pool, each_option_on_large_inputs)
{
    sx_rng r;
    sx_rng_seed(&r, 1702);
    int64_t xs[4] = {2, 19, 17, 70};
    sx_pool2d_params ps[] = {
        {.kernel_h = 3,
         .kernel_w = 3,
         .stride_h = 2,
         .stride_w = 2,
         .padding = SX_PAD_EXPLICIT,
         .pad_top = 1,
         .pad_bottom = 2,
         .pad_left = 0,
         .pad_right = 1},
        {.kernel_h = 3,
         .kernel_w = 2,
         .stride_h = 2,
         .stride_w = 2,
         .padding = SX_PAD_VALID,
         .ceil_mode = 1},
        {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 1, .padding = SX_PAD_SAME_LOWER},
        {.kernel_h = 3,
         .kernel_w = 3,
         .stride_h = 1,
         .stride_w = 1,
         .padding = SX_PAD_SAME,
         .count_include_pad = 1},
        {.kernel_h = 2,
         .kernel_w = 3,
         .stride_h = 1,
         .stride_w = 2,
         .padding = SX_PAD_VALID,
         .dilation_h = 2,
         .dilation_w = 3},
        {.kernel_h = 2,
         .kernel_w = 2,
         .stride_h = 2,
         .stride_w = 2,
         .padding = SX_PAD_EXPLICIT,
         .pad_top = 1,
         .pad_bottom = 1,
         .pad_left = 1,
         .pad_right = 1,
         .ceil_mode = 1,
         .count_include_pad = 1},
    };
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        for (int d = 0; d < 2; d++)
            check_config(&r, dtypes[d], xs, ps[i], i % 2 == 0);
}

/* sum(w * pool(x)) differentiated by central differences in f64 against the backward pass, for
 * inputs whose window maxima are unique and well apart (so a step never changes the winner). */
Test(tensor_pool, gradients_match_finite_differences)
{
    sx_rng r;
    sx_rng_seed(&r, 1703);
    for (int trial = 0; trial < 60; trial++) {
        int64_t xs[4] = {1, 2 + (int64_t)sx_rng_below(&r, 6), 2 + (int64_t)sx_rng_below(&r, 6),
                         1 + (int64_t)sx_rng_below(&r, 2)};
        bool is_max = trial % 2 == 0;
        sx_pool2d_params p = rand_params(&r, xs, is_max);
        char desc[160];
        int64_t ys[4];
        sx_tensor *x = tu_zeros(SX_F64, 4, xs);
        for (int64_t i = 0; i < x->size; i++) /* distinct, spaced 0.01 apart, shuffled */
            sx_tensor_set(x, i, 0.01 * (double)((i * 7919) % x->size) - 1);
        cr_assert_eq(sx_pool2d_shape(NULL, x, &p, ys), SX_OK, "%s", sx_last_error());
        sx_tensor *w = tu_rand(&r, SX_F64, 4, ys, -1, 1), *y = tu_zeros(SX_F64, 4, ys);
        sx_tensor *dx = tu_zeros(SX_F64, 4, xs);
        sx_status (*fwd)(const sx_tensor *, const sx_pool2d_params *, sx_tensor *) =
            is_max ? sx_tensor_maxpool2d_out : sx_tensor_avgpool2d_out;
        if (is_max)
            cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, w, &p, dx), SX_OK);
        else
            cr_assert_eq(sx_tensor_avgpool2d_backward_out(w, &p, dx), SX_OK);
        const double h = 1e-6;
        for (int64_t i = 0; i < x->size; i++) {
            double v = sx_tensor_get(x, i), f[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                sx_tensor_set(x, i, v + (sgn ? -h : h));
                cr_assert_eq(fwd(x, &p, y), SX_OK);
                f[sgn] = 0;
                for (int64_t j = 0; j < y->size; j++) {
                    double yj = sx_tensor_get(y, j);
                    f[sgn] += isinf(yj) ? 0 : yj * sx_tensor_get(w, j);
                }
            }
            sx_tensor_set(x, i, v);
            double num = (f[0] - f[1]) / (2 * h), got = sx_tensor_get(dx, i);
            cr_assert_leq(fabs(num - got), 1e-6 + 1e-6 * fabs(num),
                          "%s %s: dx[%lld] %.12g, fd %.12g", is_max ? "max" : "avg",
                          describe(&p, desc, sizeof desc), (long long)i, got, num);
        }
        sx_tensor_free(x);
        sx_tensor_free(w);
        sx_tensor_free(y);
        sx_tensor_free(dx);
    }
}

/* One f32/f64 image (1,h,w,1) from values, pooled, compared exactly (to 1e-6 for averages). */
static void check_example(bool is_max, int64_t h, int64_t w, const double *v, sx_pool2d_params p,
                          int64_t oh, int64_t ow, const double *want, double tol)
{
    int64_t xs[4] = {1, h, w, 1}, ys[4] = {1, oh, ow, 1}, got[4];
    char desc[160];
    for (int d = 0; d < 2; d++) {
        sx_tensor *x = NULL, *y = tu_zeros(dtypes[d], 4, ys);
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 4, xs, v, h * w, &x), SX_OK);
        cr_assert_eq(sx_pool2d_shape(NULL, x, &p, got), SX_OK, "%s", sx_last_error());
        cr_assert_arr_eq(got, ys, sizeof ys, "shape of %s", describe(&p, desc, sizeof desc));
        cr_assert_eq(is_max ? sx_tensor_maxpool2d_out(x, &p, y) : sx_tensor_avgpool2d_out(x, &p, y),
                     SX_OK, "%s", sx_last_error());
        cr_assert(close_to(y, want, 0, tol), "%s %s", is_max ? "max" : "avg",
                  describe(&p, desc, sizeof desc));
        sx_tensor_free(x);
        sx_tensor_free(y);
    }
}

/* The examples of ONNX's operator documentation (MaxPool, AveragePool): 1..16 in 4x4 and 1..25 in
 * 5x5. */
Test(tensor_pool, onnx_examples)
{
    double v16[16], v25[25];
    for (int i = 0; i < 25; i++)
        v25[i] = i + 1, v16[i % 16] = i % 16 + 1;
    /* maxpool_2d_ceil and averagepool_2d_ceil: 3x3 stride 2, ceil_mode */
    sx_pool2d_params ceil3 = {
        .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .ceil_mode = 1};
    check_example(true, 4, 4, v16, ceil3, 2, 2, (double[]){11, 12, 15, 16}, 0);
    check_example(false, 4, 4, v16, ceil3, 2, 2, (double[]){6, 7.5, 12, 13.5}, 1e-6);
    ceil3.ceil_mode = 0; /* floor: one window */
    check_example(true, 4, 4, v16, ceil3, 1, 1, (double[]){11}, 0);
    /* maxpool_2d_dilations: 2x2, dilation 2, stride 1 */
    sx_pool2d_params dil = {.kernel_h = 2,
                            .kernel_w = 2,
                            .stride_h = 1,
                            .stride_w = 1,
                            .dilation_h = 2,
                            .dilation_w = 2};
    check_example(true, 4, 4, v16, dil, 2, 2, (double[]){11, 12, 15, 16}, 0);
    /* averagepool_2d_precomputed_pads(_count_include_pad): 5x5, pads 2 */
    sx_pool2d_params pads = {.kernel_h = 5,
                             .kernel_w = 5,
                             .stride_h = 1,
                             .stride_w = 1,
                             .padding = SX_PAD_EXPLICIT,
                             .pad_top = 2,
                             .pad_bottom = 2,
                             .pad_left = 2,
                             .pad_right = 2};
    check_example(false, 5, 5, v25, pads, 5, 5,
                  (double[]){7,  7.5,  8,  8.5,  9,  9.5,  10, 10.5, 11, 11.5, 12, 12.5, 13, 13.5,
                             14, 14.5, 15, 15.5, 16, 16.5, 17, 17.5, 18, 18.5, 19},
                  1e-6);
    pads.count_include_pad = 1;
    check_example(false, 5, 5, v25, pads, 5, 5,
                  (double[]){2.52,  3.6,  4.8,  4.08, 3.24, 4.56, 6.4,  8.4, 7.04,
                             5.52,  7.2,  10,   13,   10.8, 8.4,  6.96, 9.6, 12.4,
                             10.24, 7.92, 6.12, 8.4,  10.8, 8.88, 6.84},
                  1e-5);
    /* maxpool_2d_precomputed_pads: the same pads */
    check_example(true, 5, 5, v25, pads, 5, 5,
                  (double[]){13, 14, 15, 15, 15, 18, 19, 20, 20, 20, 23, 24, 25,
                             25, 25, 23, 24, 25, 25, 25, 23, 24, 25, 25, 25},
                  0);
    /* maxpool_2d_same_lower and _same_upper: 2x2 stride 1 over 5x5: LOWER pads before, so each
     * window ends at its output cell (y = x); UPPER pads after */
    sx_pool2d_params lower = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME_LOWER};
    check_example(true, 5, 5, v25, lower, 5, 5, v25, 0);
    double upper[25];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++)
            upper[i * 5 + j] = v25[(i < 4 ? i + 1 : 4) * 5 + (j < 4 ? j + 1 : 4)];
    lower.padding = SX_PAD_SAME_UPPER;
    check_example(true, 5, 5, v25, lower, 5, 5, upper, 0);
    /* averagepool_2d_same_lower: 2x2 over 5x5, the first row and column average fewer cells */
    lower.padding = SX_PAD_SAME_LOWER;
    double avg_lower[25];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            double sum = 0, n = 0;
            for (int a = i - 1; a <= i; a++)
                for (int b = j - 1; b <= j; b++)
                    if (a >= 0 && b >= 0)
                        sum += v25[a * 5 + b], n++;
            avg_lower[i * 5 + j] = sum / n;
        }
    check_example(false, 5, 5, v25, lower, 5, 5, avg_lower, 1e-5);
}

/* ceil_mode's rule: the last window must start inside the input or the leading pad. h = 5,
 * kernel 2, stride 2, pads 1 and 1: floor gives 3 windows; ceil would give 4, but the fourth
 * starts at 6 - 1 = 5 >= h: dropped (ONNX and PyTorch agree). With pad 0 after, ceil adds a
 * window starting at cell 3 that holds real cells: 3 windows against floor's 2. */
Test(tensor_pool, ceil_mode_drops_a_window_starting_in_the_trailing_pad)
{
    static float buf[5];
    int64_t xs[4] = {1, 5, 1, 1}, ys[4];
    sx_tensor x = sx_tensor_view(SX_F32, 4, xs, buf);
    sx_pool2d_params p = {.kernel_h = 2,
                          .kernel_w = 1,
                          .stride_h = 2,
                          .stride_w = 1,
                          .padding = SX_PAD_EXPLICIT,
                          .pad_top = 1,
                          .pad_bottom = 1};
    cr_assert_eq(sx_pool2d_shape(NULL, &x, &p, ys), SX_OK);
    cr_assert_eq(ys[1], 3);
    p.ceil_mode = 1;
    cr_assert_eq(sx_pool2d_shape(NULL, &x, &p, ys), SX_OK);
    cr_assert_eq(ys[1], 3, "the window starting in the trailing pad is dropped");
    p.pad_top = 0, p.pad_bottom = 0, p.padding = SX_PAD_VALID;
    cr_assert_eq(sx_pool2d_shape(NULL, &x, &p, ys), SX_OK);
    cr_assert_eq(ys[1], 3);
    p.ceil_mode = 0;
    cr_assert_eq(sx_pool2d_shape(NULL, &x, &p, ys), SX_OK);
    cr_assert_eq(ys[1], 2);
}

/* A dilated window whose cells all fall in padding: -inf, and no gradient. h = 1, kernel 2,
 * dilation 2 (3 cells wide), pads 1 and 1: the one window reads cells -1 and 1. */
Test(tensor_pool, dilated_window_in_padding_gives_minus_infinity)
{
    int64_t xs[4] = {1, 1, 1, 2}, ys[4] = {1, 1, 1, 2};
    sx_pool2d_params p = {.kernel_h = 2,
                          .kernel_w = 1,
                          .stride_h = 1,
                          .stride_w = 1,
                          .padding = SX_PAD_EXPLICIT,
                          .pad_top = 1,
                          .pad_bottom = 1,
                          .dilation_h = 2};
    for (int d = 0; d < 2; d++) {
        sx_tensor *x = NULL, *y = tu_zeros(dtypes[d], 4, ys), *dy = NULL, *dx = NULL;
        cr_assert_eq(sx_tensor_full(dtypes[d], 4, xs, 3.0, &x), SX_OK);
        cr_assert_eq(sx_tensor_full(dtypes[d], 4, ys, 1.0, &dy), SX_OK);
        cr_assert_eq(sx_tensor_full(dtypes[d], 4, xs, 5.0, &dx), SX_OK);
        cr_assert_eq(sx_tensor_maxpool2d_out(x, &p, y), SX_OK, "%s", sx_last_error());
        cr_assert(all_equal(y, -HUGE_VAL));
        cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &p, dx), SX_OK);
        cr_assert(all_equal(dx, 0));
        sx_tensor_free(x);
        sx_tensor_free(y);
        sx_tensor_free(dy);
        sx_tensor_free(dx);
    }
}

/* Today's cases keep their bits: zero-initialised new fields, sx_pool2d_params_default, dilation
 * 0 or 1, and explicit pads equal to SAME's all give the same bits. */
Test(tensor_pool, equivalent_params_give_the_same_bits)
{
    sx_rng r;
    sx_rng_seed(&r, 1704);
    int64_t xs[4] = {2, 9, 8, 5};
    sx_pool2d_params d = sx_pool2d_params_default(2, 3);
    cr_assert(d.kernel_h == 2 && d.kernel_w == 3 && d.stride_h == 2 && d.stride_w == 3 &&
              d.padding == SX_PAD_VALID && d.dilation_h == 1 && d.dilation_w == 1 &&
              d.pad_top == 0 && d.pad_right == 0 && d.ceil_mode == 0 && d.count_include_pad == 0);
    /* SAME 3x3 stride 2 over 9x8: pads (1,1) rows and (0,1) columns */
    sx_pool2d_params same = {
        .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME};
    sx_pool2d_params expl = {.kernel_h = 3,
                             .kernel_w = 3,
                             .stride_h = 2,
                             .stride_w = 2,
                             .padding = SX_PAD_EXPLICIT,
                             .pad_top = 1,
                             .pad_bottom = 1,
                             .pad_left = 0,
                             .pad_right = 1,
                             .dilation_h = 1,
                             .dilation_w = 0};
    sx_pool2d_params zero = {.kernel_h = 2, .kernel_w = 3, .stride_h = 2, .stride_w = 3};
    const sx_pool2d_params *pairs[2][2] = {{&same, &expl}, {&zero, &d}};
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < 2; k++) {
            sx_tensor *x = tu_rand(&r, dtypes[dt], 4, xs, -1, 1), *out[2][4];
            int64_t ys[4];
            cr_assert_eq(sx_pool2d_shape(NULL, x, pairs[k][0], ys), SX_OK);
            sx_tensor *dy = tu_rand(&r, dtypes[dt], 4, ys, -1, 1);
            for (int j = 0; j < 2; j++) {
                const sx_pool2d_params *p = pairs[k][j];
                int64_t ys2[4];
                cr_assert_eq(sx_pool2d_shape(NULL, x, p, ys2), SX_OK);
                cr_assert_arr_eq(ys, ys2, sizeof ys);
                out[j][0] = tu_zeros(dtypes[dt], 4, ys);
                out[j][1] = tu_zeros(dtypes[dt], 4, ys);
                out[j][2] = tu_zeros(dtypes[dt], 4, xs);
                out[j][3] = tu_zeros(dtypes[dt], 4, xs);
                cr_assert_eq(sx_tensor_maxpool2d_out(x, p, out[j][0]), SX_OK);
                cr_assert_eq(sx_tensor_avgpool2d_out(x, p, out[j][1]), SX_OK);
                cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, p, out[j][2]), SX_OK);
                cr_assert_eq(sx_tensor_avgpool2d_backward_out(dy, p, out[j][3]), SX_OK);
            }
            for (int m = 0; m < 4; m++) {
                cr_assert_eq(memcmp(out[0][m]->data, out[1][m]->data,
                                    (size_t)out[0][m]->size * sx_dtype_size(dtypes[dt])),
                             0, "pair %d output %d", k, m);
                sx_tensor_free(out[0][m]);
                sx_tensor_free(out[1][m]);
            }
            sx_tensor_free(x);
            sx_tensor_free(dy);
        }
}

Test(tensor_pool, option_errors_leave_outputs_untouched)
{
    int64_t xs[4] = {1, 5, 5, 2}, ys[4] = {1, 2, 2, 2};
    sx_tensor *x = NULL, *y = NULL, *dy = NULL, *dx = NULL;
    cr_assert_eq(sx_tensor_full(SX_F32, 4, xs, 1.0, &x), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 4, ys, 42.0, &y), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 4, ys, 1.0, &dy), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 4, xs, 42.0, &dx), SX_OK);
    sx_pool2d_params base = sx_pool2d_params_default(2, 2);
    sx_pool2d_params bad[6];
    for (int i = 0; i < 6; i++)
        bad[i] = base;
    bad[0].pad_top = 1;                                    /* pads without EXPLICIT */
    bad[1].padding = SX_PAD_EXPLICIT, bad[1].pad_left = 2; /* pad >= kernel */
    bad[2].padding = SX_PAD_EXPLICIT, bad[2].pad_bottom = -1;
    bad[3].dilation_w = -1;
    bad[4].ceil_mode = 2;
    bad[5].count_include_pad = -1;
    const char *want[6] = {"EXPLICIT", "pads", "pads", "dilation", "ceil_mode", "ceil_mode"};
    int64_t got[4];
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(sx_pool2d_shape("t", x, &bad[i], got), SX_E_ARG, "case %d", i);
        cr_assert(strstr(sx_last_error(), want[i]), "case %d: %s", i, sx_last_error());
        cr_assert_eq(sx_tensor_maxpool2d_out(x, &bad[i], y), SX_E_ARG);
        cr_assert_eq(sx_tensor_avgpool2d_out(x, &bad[i], y), SX_E_ARG);
        cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &bad[i], dx), SX_E_ARG);
        cr_assert_eq(sx_tensor_avgpool2d_backward_out(dy, &bad[i], dx), SX_E_ARG);
    }
    /* a dilated kernel allows larger pads (3 cells wide: pads up to 2) */
    sx_pool2d_params dil = base;
    dil.dilation_h = 2, dil.padding = SX_PAD_EXPLICIT, dil.pad_top = 2;
    cr_assert_eq(sx_pool2d_shape("t", x, &dil, got), SX_OK, "%s", sx_last_error());
    /* average pooling has no dilation */
    dil.pad_top = 0;
    cr_assert_eq(sx_pool2d_shape("t", x, &dil, got), SX_OK);
    sx_tensor *yd = tu_zeros(SX_F32, 4, got);
    cr_assert_eq(sx_tensor_avgpool2d_out(x, &dil, yd), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "dilation"), "%s", sx_last_error());
    cr_assert_eq(sx_tensor_maxpool2d_out(x, &dil, yd), SX_OK);
    /* an explicit pad that does not let the kernel fit: 5 + 0 + 0 < 3 * 2 */
    sx_pool2d_params big = {.kernel_h = 3,
                            .kernel_w = 1,
                            .stride_h = 1,
                            .stride_w = 1,
                            .padding = SX_PAD_EXPLICIT,
                            .dilation_h = 3};
    cr_assert_eq(sx_pool2d_shape("t", x, &big, got), SX_E_SHAPE);
    cr_assert(all_equal(y, 42) && all_equal(dx, 42) && all_equal(x, 1));
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_tensor_free(yd);
    sx_tensor_free(dy);
    sx_tensor_free(dx);
}

/* ---------------------------------------------------------------- adaptive average pooling */

/* The reference, from PyTorch's index rule in double: start floor(i * h / oh), end
 * ceil((i + 1) * h / oh). */
static void ref_adaptive(const sx_tensor *x, const sx_tensor *dy, const int64_t ys[4], double *y,
                         double *dx)
{
    const int64_t n = x->shape[0], h = x->shape[1], w = x->shape[2], c = x->shape[3];
    memset(dx, 0, sizeof(double) * (size_t)(x->size + 1));
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < ys[1]; i++)
            for (int64_t j = 0; j < ys[2]; j++)
                for (int64_t ch = 0; ch < c; ch++) {
                    int64_t y0 = (int64_t)floor((double)(i * h) / (double)ys[1]);
                    int64_t y1 = (int64_t)ceil((double)((i + 1) * h) / (double)ys[1]);
                    int64_t x0 = (int64_t)floor((double)(j * w) / (double)ys[2]);
                    int64_t x1 = (int64_t)ceil((double)((j + 1) * w) / (double)ys[2]);
                    double sum = 0, cnt = (double)((y1 - y0) * (x1 - x0));
                    int64_t o = at4(b, i, j, ch, ys[1], ys[2], c);
                    for (int64_t a = y0; a < y1; a++)
                        for (int64_t e = x0; e < x1; e++)
                            sum += sx_tensor_get(x, at4(b, a, e, ch, h, w, c));
                    y[o] = sum / cnt;
                    for (int64_t a = y0; a < y1; a++)
                        for (int64_t e = x0; e < x1; e++)
                            dx[at4(b, a, e, ch, h, w, c)] += sx_tensor_get(dy, o) / cnt;
                }
}

Test(tensor_pool, adaptive_avgpool_against_reference)
{
    sx_rng r;
    sx_rng_seed(&r, 1705);
    for (int trial = 0; trial < 120; trial++) {
        sx_dtype dt = dtypes[trial % 2];
        bool large = trial >= 116;
        int64_t xs[4] = {1 + (int64_t)sx_rng_below(&r, 2),
                         1 + (int64_t)sx_rng_below(&r, large ? 40 : 12),
                         1 + (int64_t)sx_rng_below(&r, large ? 40 : 12),
                         1 + (int64_t)sx_rng_below(&r, large ? 140 : 5)};
        int64_t ys[4] = {xs[0], 1 + (int64_t)sx_rng_below(&r, 14),
                         1 + (int64_t)sx_rng_below(&r, 14), xs[3]};
        sx_tensor *x = tu_rand(&r, dt, 4, xs, -2, 2), *dy = tu_rand(&r, dt, 4, ys, -1, 1);
        sx_tensor *y = tu_zeros(dt, 4, ys), *dx = tu_rand(&r, dt, 4, xs, 5, 9); /* garbage */
        double *ry = malloc(sizeof(double) * (size_t)(y->size + 1));
        double *rdx = malloc(sizeof(double) * (size_t)(x->size + 1));
        ref_adaptive(x, dy, ys, ry, rdx);
        cr_assert_eq(sx_tensor_adaptive_avgpool2d_out(x, y), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_tensor_adaptive_avgpool2d_backward_out(dy, dx), SX_OK, "%s",
                     sx_last_error());
        cr_assert(close_to(y, ry, rtol_of(dt), atol_of(dt)),
                  "forward %s (%lld,%lld) -> (%lld,%lld)", sx_dtype_name(dt), (long long)xs[1],
                  (long long)xs[2], (long long)ys[1], (long long)ys[2]);
        cr_assert(close_to(dx, rdx, rtol_of(dt), atol_of(dt)),
                  "backward %s (%lld,%lld) -> (%lld,%lld)", sx_dtype_name(dt), (long long)xs[1],
                  (long long)xs[2], (long long)ys[1], (long long)ys[2]);
        free(ry);
        free(rdx);
        sx_tensor_free(x);
        sx_tensor_free(dy);
        sx_tensor_free(y);
        sx_tensor_free(dx);
    }
}

/* h = 5 to 3 rows: windows [0,2), [1,4), [3,5) (overlapping); w = 1 to 2 columns: the one
 * column twice. Gradient by central differences in f64. */
Test(tensor_pool, adaptive_avgpool_worked_example_and_gradient)
{
    int64_t xs[4] = {1, 5, 1, 1}, ys[4] = {1, 3, 2, 1};
    double v[5] = {1, 2, 4, 8, 16};
    double want[6] = {1.5, 1.5, 14.0 / 3, 14.0 / 3, 12, 12};
    sx_tensor *x = NULL, *y = tu_zeros(SX_F64, 4, ys), *dx = tu_zeros(SX_F64, 4, xs), *w = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 4, xs, v, 5, &x), SX_OK);
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_out(x, y), SX_OK, "%s", sx_last_error());
    cr_assert(close_to(y, want, 1e-15, 0));
    sx_rng r;
    sx_rng_seed(&r, 1706);
    w = tu_rand(&r, SX_F64, 4, ys, -1, 1);
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_backward_out(w, dx), SX_OK);
    for (int64_t i = 0; i < 5; i++) {
        double f[2], h = 1e-6;
        for (int sgn = 0; sgn < 2; sgn++) {
            sx_tensor_set(x, i, v[i] + (sgn ? -h : h));
            cr_assert_eq(sx_tensor_adaptive_avgpool2d_out(x, y), SX_OK);
            f[sgn] = 0;
            for (int64_t j = 0; j < y->size; j++)
                f[sgn] += sx_tensor_get(y, j) * sx_tensor_get(w, j);
        }
        sx_tensor_set(x, i, v[i]);
        double num = (f[0] - f[1]) / (2 * h);
        cr_assert_leq(fabs(num - sx_tensor_get(dx, i)), 1e-6 + 1e-6 * fabs(num));
    }
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_tensor_free(dx);
    sx_tensor_free(w);
}

Test(tensor_pool, adaptive_avgpool_errors)
{
    int64_t xs[4] = {2, 4, 4, 3}, ys[4] = {2, 2, 2, 3}, yn[4] = {1, 2, 2, 3}, y0[4] = {2, 0, 2, 3};
    int64_t x0[4] = {2, 0, 4, 3}, r3[3] = {2, 2, 3};
    sx_tensor *x = NULL, *y = NULL, *ybad = NULL, *yzero = NULL, *xzero = NULL, *y3 = NULL;
    sx_tensor *yd = NULL;
    cr_assert_eq(sx_tensor_full(SX_F32, 4, xs, 1.0, &x), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 4, ys, 42.0, &y), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 4, yn, 42.0, &ybad), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 4, y0, 42.0, &yzero), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 4, x0, 42.0, &xzero), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F32, 3, r3, 42.0, &y3), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F64, 4, ys, 42.0, &yd), SX_OK);
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_out(NULL, y), SX_E_ARG);
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_out(x, NULL), SX_E_ARG);
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_out(x, ybad), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "(1,2,2,3)"), "%s", sx_last_error());
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_out(x, yzero), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_out(xzero, y), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_out(x, y3), SX_E_RANK);
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_out(x, yd), SX_E_DTYPE);
    sx_tensor y_on_x = sx_tensor_view(SX_F32, 4, ys, x->data);
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_out(x, &y_on_x), SX_E_ARG);
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_backward_out(ybad, x), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_backward_out(yd, x), SX_E_DTYPE);
    cr_assert(all_equal(x, 1) && all_equal(y, 42) && all_equal(ybad, 42) && all_equal(yd, 42));
    cr_assert(all_equal(yzero, 42) && all_equal(y3, 42));
    /* n or c of 0: nothing to do */
    int64_t e[4] = {0, 4, 4, 3}, ey[4] = {0, 3, 5, 3};
    sx_tensor *ex = tu_zeros(SX_F32, 4, e), *eyt = tu_zeros(SX_F32, 4, ey);
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_out(ex, eyt), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_adaptive_avgpool2d_backward_out(eyt, ex), SX_OK);
    sx_tensor *ts[] = {x, y, ybad, yzero, xzero, y3, yd, ex, eyt};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        sx_tensor_free(ts[i]);
}
