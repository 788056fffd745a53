/* Pooling (max, average; forward and backward) against direct nested-loop references in double
 * that visit every kernel cell and skip the padded ones; the adjoint identity of average
 * pooling; ties and NaN routed to the first maximum; thread-count independence; every error.
 * Tolerances: max forward is a selection (exact); sums: f32 rtol 1e-5 atol 1e-6, f64 1e-12. */
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
    int64_t n, h, w, c, oh, ow, pt, pl;
    int kh, kw, sh, sw;
} ref_geom;

/* Output size and top/left pad the TensorFlow way, written out with ceil() in double. */
static bool ref_axis(int64_t size, int k, int s, sx_padding pad, int64_t *out, int64_t *before)
{
    if (pad == SX_PAD_VALID) {
        if (size < k)
            return false;
        *out = (int64_t)floor((double)(size - k) / s) + 1;
        *before = 0;
    } else {
        *out = (int64_t)ceil((double)size / s);
        int64_t total = (*out - 1) * s + k - size;
        *before = total > 0 ? total / 2 : 0;
    }
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
                  .sw = p->stride_w};
    cr_assert(ref_axis(g.h, g.kh, g.sh, p->padding, &g.oh, &g.pt));
    cr_assert(ref_axis(g.w, g.kw, g.sw, p->padding, &g.ow, &g.pl));
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
    int64_t iy = oy * g->sh - g->pt + ky, ix = ox * g->sw - g->pl + kx;
    if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
        return -1;
    return at4(b, iy, ix, ch, g->h, g->w, g->c);
}

/* Forward (max or average) and backward of every window, in double. For max, `arg` receives the
 * first maximal cell in row-major window order (strict >), and dx routes dy there. */
static void ref_pool(const ref_geom *g, bool is_max, const sx_tensor *x, const sx_tensor *dy,
                     double *y, double *dx)
{
    memset(dx, 0, sizeof(double) * (size_t)(g->n * g->h * g->w * g->c));
    for (int64_t b = 0; b < g->n; b++)
        for (int64_t oy = 0; oy < g->oh; oy++)
            for (int64_t ox = 0; ox < g->ow; ox++)
                for (int64_t ch = 0; ch < g->c; ch++) {
                    int64_t o = at4(b, oy, ox, ch, g->oh, g->ow, g->c), arg = -1, count = 0;
                    double acc = 0;
                    for (int ky = 0; ky < g->kh; ky++)
                        for (int kx = 0; kx < g->kw; kx++) {
                            int64_t i = ref_cell(g, b, oy, ox, ky, kx, ch);
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
                    cr_assert_gt(count, 0, "a window with no real cell");
                    y[o] = is_max ? acc : acc / (double)count;
                    double d = dy ? sx_tensor_get(dy, o) : 0;
                    if (is_max) {
                        dx[arg] += d;
                        continue;
                    }
                    for (int ky = 0; ky < g->kh; ky++)
                        for (int kx = 0; kx < g->kw; kx++) {
                            int64_t i = ref_cell(g, b, oy, ox, ky, kx, ch);
                            if (i >= 0)
                                dx[i] += d / (double)count;
                        }
                }
}

static bool close_to(const sx_tensor *t, const double *want, double rtol, double atol)
{
    for (int64_t i = 0; i < t->size; i++) {
        double got = sx_tensor_get(t, i);
        if (!(fabs(got - want[i]) <= atol + rtol * fabs(want[i]))) {
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
    bool disjoint = p.stride_h >= p.kernel_h && p.stride_w >= p.kernel_w;
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

/* Run one configuration of both pools, forward and backward, against the reference. */
static void check_config(sx_rng *r, sx_dtype dt, const int64_t xs[4], sx_pool2d_params p, bool ties)
{
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
        cr_assert(close_to(y, ry, yr, ya),
                  "%s forward %s x(%lld,%lld,%lld,%lld) k%dx%d s%dx%d %s ties=%d",
                  is_max ? "max" : "avg", sx_dtype_name(dt), (long long)xs[0], (long long)xs[1],
                  (long long)xs[2], (long long)xs[3], p.kernel_h, p.kernel_w, p.stride_h,
                  p.stride_w, p.padding == SX_PAD_SAME ? "SAME" : "VALID", ties);
        cr_assert(close_to(dx, rdx, rtol_of(dt), atol_of(dt)),
                  "%s backward %s x(%lld,%lld,%lld,%lld) k%dx%d s%dx%d %s ties=%d",
                  is_max ? "max" : "avg", sx_dtype_name(dt), (long long)xs[0], (long long)xs[1],
                  (long long)xs[2], (long long)xs[3], p.kernel_h, p.kernel_w, p.stride_h,
                  p.stride_w, p.padding == SX_PAD_SAME ? "SAME" : "VALID", ties);
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
                    sx_pool2d_params p = {cases[i].kh, cases[i].kw, cases[i].sh, cases[i].sw,
                                          pad ? SX_PAD_SAME : SX_PAD_VALID};
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
        sx_pool2d_params p = {1 + (int)sx_rng_below(&r, 4), 1 + (int)sx_rng_below(&r, 4),
                              1 + (int)sx_rng_below(&r, 4), 1 + (int)sx_rng_below(&r, 4),
                              sx_rng_below(&r, 2) ? SX_PAD_SAME : SX_PAD_VALID};
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
    sx_pool2d_params p = {3, 3, 2, 2, SX_PAD_SAME};
    for (int d = 0; d < 2; d++)
        check_config(&r, dtypes[d], xs, p, d == 1);
    sx_pool2d_params q = {2, 3, 1, 2, SX_PAD_VALID};
    int64_t x1[4] = {1, 40, 33, 130};
    check_config(&r, SX_F32, x1, q, true);
}

Test(tensor_pool, result_does_not_depend_on_thread_count)
{
    sx_rng r;
    sx_rng_seed(&r, 14);
    int64_t xs[4] = {4, 24, 24, 80};
    sx_pool2d_params p = {3, 3, 1, 1, SX_PAD_SAME};
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
        sx_pool2d_params p = {1 + (int)sx_rng_below(&r, 3), 1 + (int)sx_rng_below(&r, 3),
                              1 + (int)sx_rng_below(&r, 3), 1 + (int)sx_rng_below(&r, 3),
                              trial % 4 < 2 ? SX_PAD_SAME : SX_PAD_VALID};
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
        sx_pool2d_params p = {2, 2, 1, 1, SX_PAD_VALID};
        double max1[4] = {5, 6, 8, 9}, avg1[4] = {3, 4, 6, 7};
        cr_assert_eq(sx_tensor_maxpool2d_out(x, &p, y), SX_OK);
        cr_assert(close_to(y, max1, 0, 0));
        cr_assert_eq(sx_tensor_avgpool2d_out(x, &p, y), SX_OK);
        cr_assert(close_to(y, avg1, 0, 0));
        /* 2x2 stride 2 SAME: pad 0 before, 1 after; average over real cells only */
        sx_pool2d_params q = {2, 2, 2, 2, SX_PAD_SAME};
        double max2[4] = {5, 6, 8, 9}, avg2[4] = {3, 4.5, 7.5, 9};
        cr_assert_eq(sx_tensor_maxpool2d_out(x, &q, y), SX_OK);
        cr_assert(close_to(y, max2, 0, 0));
        cr_assert_eq(sx_tensor_avgpool2d_out(x, &q, y), SX_OK);
        cr_assert(close_to(y, avg2, 0, 0));
        /* 3x3 stride 1 SAME: pad 1 each side; corner windows hold 4 real cells */
        sx_pool2d_params s = {3, 3, 1, 1, SX_PAD_SAME};
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
        sx_pool2d_params p = {2, 2, 1, 1, SX_PAD_VALID};
        int64_t s1[4] = {1, 1, 1, 1};
        double g1 = 3, want1[4] = {3, 0, 0, 0};
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 4, s1, &g1, 1, &dy), SX_OK);
        cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &p, dx), SX_OK);
        cr_assert(close_to(dx, want1, 0, 0));
        sx_tensor_free(dy);
        /* SAME 2x2 stride 1 (pad after only): window (i,j) starts at cell (i,j) */
        sx_pool2d_params q = {2, 2, 1, 1, SX_PAD_SAME};
        double g2[4] = {1, 2, 3, 4};
        cr_assert_eq(sx_tensor_from_doubles(dtypes[d], 4, xs, g2, 4, &dy), SX_OK);
        cr_assert_eq(sx_tensor_maxpool2d_backward_out(x, dy, &q, dx), SX_OK);
        cr_assert(close_to(dx, g2, 0, 0));
        sx_tensor_free(dy);
        /* 3x3 SAME stride 1 (pad 1 before and after): each of the four windows covers all four
         * cells, so cell (0,0), first in every window, collects the whole gradient. */
        sx_pool2d_params s = {3, 3, 1, 1, SX_PAD_SAME};
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
    sx_pool2d_params p = {3, 3, 2, 2, SX_PAD_SAME};
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
        sx_pool2d_params p = {2, 2, 2, 2, SX_PAD_VALID};
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
                sx_pool2d_params p = {cases[i].kh, cases[i].kw, cases[i].sh, cases[i].sw,
                                      pad ? SX_PAD_SAME : SX_PAD_VALID};
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
                    sx_pool2d_params p = {k, k, k, k, SX_PAD_VALID};
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
                sx_pool2d_params same = {k, 1, s, 1, SX_PAD_SAME};
                cr_assert_eq(sx_pool2d_shape("t", &x, &same, ys), SX_OK);
                cr_assert_eq(ys[1], (int64_t)ceil((double)h / s));
                cr_assert_eq(ys[2], 13 - h);
                sx_pool2d_params valid = {k, 1, s, 1, SX_PAD_VALID};
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
            sx_pool2d_params p = {2, 2, 2, 2, pad ? SX_PAD_SAME : SX_PAD_VALID};
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
    sx_pool2d_params p = {2, 2, 2, 2, SX_PAD_VALID};
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

    sx_pool2d_params k0 = {0, 2, 1, 1, SX_PAD_VALID}, s0 = {2, 2, 1, 0, SX_PAD_VALID};
    sx_pool2d_params pbad = {2, 2, 1, 1, (sx_padding)7}, big = {6, 2, 1, 1, SX_PAD_VALID};
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
    sx_pool2d_params q = {2, 2, 1, 1, SX_PAD_VALID};
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

/* Issue 14: the relu form multiplied the routed gradient by (x > 0), so an infinite dy gave
 * NaN (inf * 0) where x <= 0; it selects now, as relu's gradient does (+0 there). Windows of
 * 2x2 (the fast path), 3x3 (the general store path) and overlapping 3x3 stride 1 (accumulate,
 * then select), f32 and f64, dy all infinite: dx is +inf at each window's first maximum when
 * that is positive, and +0 everywhere else. */
Test(tensor_pool, relu_backward_selects_so_an_infinite_dy_gives_zeros)
{
    static const sx_pool2d_params ps[3] = {
        {2, 2, 2, 2, SX_PAD_VALID}, {3, 3, 3, 3, SX_PAD_VALID}, {3, 3, 1, 1, SX_PAD_VALID}};
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
