/* The convolution and pooling layers under every option: conv2d with groups,
 * dilation and explicit or SAME_LOWER pads; depthwise and separable conv2d; conv1d; max and
 * average pooling with pads, ceil_mode, count_include_pad and dilation. Forward values of small
 * f64 networks against plain loops written here, the initialiser's fans, every documented
 * error, a training step through each layer, and a save/load round trip that keeps every option
 * (the predictions of the loaded model equal the network's bit for bit). */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"

/* ---------------------------------------------------------------- helpers */

static sx_nn_net *net_new(sx_dtype dt, uint64_t seed)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("test", dt, seed, &net), SX_OK, "%s", sx_last_error());
    return net;
}

static sx_nn_layer *image(sx_nn_net *net, int64_t h, int64_t w, int64_t c)
{
    int64_t s[3] = {h, w, c};
    sx_nn_layer *l = sx_nn_input(net, 3, s);
    cr_assert_not_null(l, "%s", sx_last_error());
    return l;
}

static sx_tensor *ptensor(const sx_nn_layer *l, int k)
{
    cr_assert_lt(k, l->n_params, "%s has %d parameters", l->name, l->n_params);
    return l->params[k].value;
}

static void randomise(sx_nn_net *net, sx_rng *r)
{
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            cr_assert_eq(sx_tensor_rand_uniform(net->layers[i]->params[k].value, r, -1, 1), SX_OK);
}

static sx_tensor *predict(sx_nn_net *net, const sx_tensor *x)
{
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, x->shape[0], &m), SX_OK, "%s", sx_last_error());
    int64_t os[2] = {x->shape[0], nn_output_layer(net)->shape[0]};
    sx_tensor *out = tu_zeros(net->dtype, 2, os);
    cr_assert_eq(sx_nn_model_predict(m, x, out), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m);
    return out;
}

static sx_tensor *batch(sx_nn_net *net, sx_rng *r, int64_t n)
{
    const sx_nn_layer *in = nn_input_layer(net);
    int64_t s[SX_MAX_RANK] = {n};
    for (int i = 0; i < in->rank; i++)
        s[i + 1] = in->shape[i];
    return tu_rand(r, net->dtype, in->rank + 1, s, -1, 1);
}

static double *D(const sx_tensor *t)
{
    cr_assert_eq(t->dtype, SX_F64);
    return t->data;
}

static void expect_close(const sx_tensor *got, const double *want, int64_t n, double tol)
{
    cr_assert_eq(got->size, n, "size %lld, want %lld", (long long)got->size, (long long)n);
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(D(got)[i] - want[i]) <= tol * (1 + fabs(want[i])),
                  "[%lld] %.17g, want %.17g", (long long)i, D(got)[i], want[i]);
}

static int at_least_1(int v)
{
    return v > 1 ? v : 1;
}

/* Padding before and after an axis of n cells (dilated window ke, stride s), the header's rules. */
static void pads_of(int64_t n, int64_t ke, int64_t s, sx_padding p, int eb, int ea, int64_t *before,
                    int64_t *after)
{
    int64_t out = (n + s - 1) / s, total = (out - 1) * s + ke - n;
    total = total > 0 ? total : 0;
    *before = *after = 0;
    if (p == SX_PAD_SAME)
        *before = total / 2, *after = total - total / 2;
    else if (p == SX_PAD_SAME_LOWER)
        *before = total - total / 2, *after = total / 2;
    else if (p == SX_PAD_EXPLICIT)
        *before = eb, *after = ea;
}

/* y (n,oh,ow,f) = conv(x (n,h,w,c), k (kh,kw,c/groups,f)) + b (b may be NULL), by definition;
 * oh, ow come from ys. */
static void ref_conv(const double *x, const int64_t xs[4], const double *k, const int64_t ks[4],
                     const double *b, const sx_conv2d_params *p, const int64_t ys[4], double *y)
{
    int64_t dh = at_least_1(p->dilation_h), dw = at_least_1(p->dilation_w), pt, pl, unused;
    int64_t fg = ks[3] / at_least_1(p->groups);
    pads_of(xs[1], dh * (ks[0] - 1) + 1, p->stride_h, p->padding, p->pad_top, p->pad_bottom, &pt,
            &unused);
    pads_of(xs[2], dw * (ks[1] - 1) + 1, p->stride_w, p->padding, p->pad_left, p->pad_right, &pl,
            &unused);
    for (int64_t i = 0; i < ys[0]; i++)
        for (int64_t oy = 0; oy < ys[1]; oy++)
            for (int64_t ox = 0; ox < ys[2]; ox++)
                for (int64_t f = 0; f < ys[3]; f++) {
                    double sum = b ? b[f] : 0;
                    for (int64_t u = 0; u < ks[0]; u++)
                        for (int64_t v = 0; v < ks[1]; v++) {
                            int64_t iy = oy * p->stride_h - pt + u * dh;
                            int64_t ix = ox * p->stride_w - pl + v * dw;
                            if (iy < 0 || iy >= xs[1] || ix < 0 || ix >= xs[2])
                                continue;
                            for (int64_t q = 0; q < ks[2]; q++)
                                sum += x[((i * xs[1] + iy) * xs[2] + ix) * xs[3] +
                                         (f / fg) * ks[2] + q] *
                                       k[((u * ks[1] + v) * ks[2] + q) * ks[3] + f];
                        }
                    y[((i * ys[1] + oy) * ys[2] + ox) * ys[3] + f] = sum;
                }
}

/* max or average pooling by definition, every option; oh, ow from ys */
static void ref_pool(bool max, const double *x, const int64_t xs[4], const sx_pool2d_params *p,
                     const int64_t ys[4], double *y)
{
    int64_t dh = at_least_1(p->dilation_h), dw = at_least_1(p->dilation_w), pt, pb, pl, pr;
    pads_of(xs[1], dh * (p->kernel_h - 1) + 1, p->stride_h, p->padding, p->pad_top, p->pad_bottom,
            &pt, &pb);
    pads_of(xs[2], dw * (p->kernel_w - 1) + 1, p->stride_w, p->padding, p->pad_left, p->pad_right,
            &pl, &pr);
    for (int64_t i = 0; i < ys[0]; i++)
        for (int64_t oy = 0; oy < ys[1]; oy++)
            for (int64_t ox = 0; ox < ys[2]; ox++)
                for (int64_t q = 0; q < ys[3]; q++) {
                    double acc = max ? -INFINITY : 0;
                    int real = 0, padded = 0;
                    for (int u = 0; u < p->kernel_h; u++)
                        for (int v = 0; v < p->kernel_w; v++) {
                            int64_t iy = oy * p->stride_h - pt + u * dh;
                            int64_t ix = ox * p->stride_w - pl + v * dw;
                            if (iy >= -pt && iy < xs[1] + pb && ix >= -pl && ix < xs[2] + pr)
                                padded++;
                            if (iy < 0 || iy >= xs[1] || ix < 0 || ix >= xs[2])
                                continue;
                            double e = x[((i * xs[1] + iy) * xs[2] + ix) * xs[3] + q];
                            acc = max ? fmax(acc, e) : acc + e;
                            real++;
                        }
                    y[((i * ys[1] + oy) * ys[2] + ox) * ys[3] + q] =
                        max ? acc : acc / (p->count_include_pad ? padded : real);
                }
}

static void layer_shape4(const sx_nn_layer *l, int64_t n, int64_t ys[4])
{
    cr_assert_eq(l->rank, 3);
    ys[0] = n, ys[1] = l->shape[0], ys[2] = l->shape[1], ys[3] = l->shape[2];
}

/* ---------------------------------------------------------------- conv2d */

static const sx_conv2d_params conv_cases[] = {
    {.stride_h = 1, .stride_w = 1, .groups = 2},
    {.stride_h = 2, .stride_w = 1, .groups = 4, .padding = SX_PAD_SAME},
    {.stride_h = 1, .stride_w = 1, .dilation_h = 2, .dilation_w = 3, .padding = SX_PAD_SAME},
    {.stride_h = 2,
     .stride_w = 2,
     .padding = SX_PAD_EXPLICIT,
     .pad_top = 1,
     .pad_bottom = 1,
     .pad_left = 1,
     .pad_right = 1},
    {.stride_h = 1,
     .stride_w = 2,
     .padding = SX_PAD_EXPLICIT,
     .pad_top = 2,
     .pad_bottom = 0,
     .pad_left = 0,
     .pad_right = 3,
     .dilation_h = 2,
     .groups = 2},
    {.stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME_LOWER},
};

Test(nn_conv, conv2d_groups_dilation_and_pads_against_a_loop)
{
    sx_rng r;
    sx_rng_seed(&r, 40);
    const int64_t n = 2, h = 7, w = 6, c = 4, f = 4;
    for (size_t t = 0; t < sizeof conv_cases / sizeof conv_cases[0]; t++) {
        sx_nn_net *net = net_new(SX_F64, 1);
        sx_nn_layer *x = image(net, h, w, c);
        sx_nn_conv2d_params p = sx_nn_conv2d_params_default((int)f, 3, 2);
        p.conv = conv_cases[t];
        sx_nn_layer *cv = sx_nn_conv2d(net, x, &p);
        cr_assert_not_null(cv, "case %zu: %s", t, sx_last_error());
        int g = at_least_1(p.conv.groups);
        int64_t ks[4] = {3, 2, c / g, f}, xs[4] = {n, h, w, c}, ys[4];
        cr_assert(sx_shape_equal(4, ptensor(cv, 0)->shape, 4, ks), "case %zu: kernel shape", t);
        sx_nn_flatten(net, cv);
        cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
        randomise(net, &r);
        sx_tensor *xb = batch(net, &r, n), *y = predict(net, xb);
        layer_shape4(cv, n, ys);
        double *want = calloc((size_t)(ys[0] * ys[1] * ys[2] * ys[3]), sizeof *want);
        ref_conv(D(xb), xs, D(ptensor(cv, 0)), ks, D(ptensor(cv, 1)), &p.conv, ys, want);
        expect_close(y, want, ys[0] * ys[1] * ys[2] * ys[3], 1e-12);
        free(want);
        sx_tensor_free(xb);
        sx_tensor_free(y);
        sx_nn_net_free(net);
    }
}

/* The initialiser sees the fans of one group: fan_in kh * kw * c / groups. */
typedef struct fans {
    int64_t fan_in[4], fan_out[4];
    int calls;
} fans;

static sx_status record_fans(sx_tensor *w, int64_t fan_in, int64_t fan_out, sx_rng *rng, void *ctx)
{
    fans *f = ctx;
    if (f->calls < 4) {
        f->fan_in[f->calls] = fan_in;
        f->fan_out[f->calls] = fan_out;
    }
    f->calls++;
    return sx_tensor_rand_uniform(w, rng, -1, 1);
}

Test(nn_conv, initialiser_fans_count_one_group)
{
    fans f = {0};
    sx_nn_net *net = net_new(SX_F64, 5);
    sx_nn_net_set_init(net, (sx_nn_init){.kind = SX_INIT_CUSTOM, .fn = record_fans, .ctx = &f});
    sx_nn_layer *x = image(net, 6, 6, 6);
    sx_nn_conv2d_params p = sx_nn_conv2d_params_default(9, 3, 2);
    p.conv.groups = 3;
    cr_assert_not_null(sx_nn_conv2d(net, x, &p), "%s", sx_last_error());
    cr_assert_eq(f.fan_in[0], 3 * 2 * 2);
    cr_assert_eq(f.fan_out[0], 3 * 2 * 3);
    sx_nn_depthwise_conv2d_params d = sx_nn_depthwise_conv2d_params_default(3, 3);
    d.depth_multiplier = 2;
    cr_assert_not_null(sx_nn_depthwise_conv2d(net, x, &d), "%s", sx_last_error());
    cr_assert_eq(f.fan_in[1], 3 * 3);
    cr_assert_eq(f.fan_out[1], 3 * 3 * 2);
    sx_nn_separable_conv2d_params s = sx_nn_separable_conv2d_params_default(5, 3, 3);
    s.depth_multiplier = 2;
    cr_assert_not_null(sx_nn_separable_conv2d(net, x, &s), "%s", sx_last_error());
    cr_assert_eq(f.calls, 4);
    cr_assert_eq(f.fan_in[2], 3 * 3);
    cr_assert_eq(f.fan_out[2], 3 * 3 * 2);
    cr_assert_eq(f.fan_in[3], 6 * 2);
    cr_assert_eq(f.fan_out[3], 5);
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- depthwise, separable */

Test(nn_conv, depthwise_is_conv2d_with_groups_equal_to_channels)
{
    sx_rng r;
    sx_rng_seed(&r, 41);
    const int64_t n = 2, h = 6, w = 7, c = 3;
    for (int m = 1; m <= 2; m++) {
        sx_nn_net *net = net_new(SX_F64, 1);
        sx_nn_layer *x = image(net, h, w, c);
        sx_nn_depthwise_conv2d_params p = sx_nn_depthwise_conv2d_params_default(3, 3);
        p.depth_multiplier = m;
        p.conv.stride_h = p.conv.stride_w = 2;
        p.conv.padding = SX_PAD_EXPLICIT;
        p.conv.pad_top = p.conv.pad_bottom = p.conv.pad_left = p.conv.pad_right = 1;
        p.conv.dilation_w = m; /* dilation 2 on one axis in the second case */
        p.act = SX_ACT_RELU;
        sx_nn_layer *dw = sx_nn_depthwise_conv2d(net, x, &p);
        cr_assert_not_null(dw, "%s", sx_last_error());
        cr_assert_str_eq(sx_nn_layer_name(dw), "depthwise_conv2d_1");
        int64_t ks[4] = {3, 3, 1, c * m}, xs[4] = {n, h, w, c}, ys[4];
        cr_assert(sx_shape_equal(4, ptensor(dw, 0)->shape, 4, ks));
        cr_assert_eq(ptensor(dw, 1)->size, c * m);
        sx_nn_flatten(net, dw);
        randomise(net, &r);
        sx_tensor *xb = batch(net, &r, n), *y = predict(net, xb);
        layer_shape4(dw, n, ys);
        cr_assert_eq(ys[3], c * m);
        sx_conv2d_params cp = p.conv;
        cp.groups = (int)c;
        double want[2 * 3 * 4 * 6];
        cr_assert_leq(ys[0] * ys[1] * ys[2] * ys[3], 2 * 3 * 4 * 6);
        ref_conv(D(xb), xs, D(ptensor(dw, 0)), ks, D(ptensor(dw, 1)), &cp, ys, want);
        for (int64_t i = 0; i < ys[0] * ys[1] * ys[2] * ys[3]; i++)
            want[i] = want[i] > 0 ? want[i] : 0;
        expect_close(y, want, ys[0] * ys[1] * ys[2] * ys[3], 1e-12);
        sx_tensor_free(xb);
        sx_tensor_free(y);
        sx_nn_net_free(net);
    }
}

Test(nn_conv, separable_is_depthwise_then_pointwise)
{
    sx_rng r;
    sx_rng_seed(&r, 42);
    const int64_t n = 2, h = 5, w = 6, c = 2, f = 3, m = 2;
    sx_nn_net *net = net_new(SX_F64, 1);
    sx_nn_layer *x = image(net, h, w, c);
    sx_nn_separable_conv2d_params p = sx_nn_separable_conv2d_params_default((int)f, 3, 2);
    p.depth_multiplier = (int)m;
    p.conv.padding = SX_PAD_SAME;
    p.conv.dilation_h = 2;
    sx_nn_layer *sp = sx_nn_separable_conv2d(net, x, &p);
    cr_assert_not_null(sp, "%s", sx_last_error());
    cr_assert_eq(sp->n_params, 3);
    cr_assert(strstr(sp->params[0].name, "depthwise_kernel") != NULL);
    cr_assert(strstr(sp->params[1].name, "pointwise_kernel") != NULL);
    sx_nn_flatten(net, sp);
    randomise(net, &r);
    sx_tensor *xb = batch(net, &r, n), *y = predict(net, xb);
    int64_t xs[4] = {n, h, w, c}, dks[4] = {3, 2, 1, c * m}, pks[4] = {1, 1, c * m, f};
    int64_t ds[4] = {n, h, w, c * m}, ys[4] = {n, h, w, f};
    sx_conv2d_params dp = p.conv, pp = sx_conv2d_params_default();
    dp.groups = (int)c;
    double mid[2 * 5 * 6 * 4], want[2 * 5 * 6 * 3];
    ref_conv(D(xb), xs, D(ptensor(sp, 0)), dks, NULL, &dp, ds, mid);
    ref_conv(mid, ds, D(ptensor(sp, 1)), pks, D(ptensor(sp, 2)), &pp, ys, want);
    expect_close(y, want, n * h * w * f, 1e-12);
    sx_tensor_free(xb);
    sx_tensor_free(y);
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- conv1d */

Test(nn_conv, conv1d_against_a_loop)
{
    sx_rng r;
    sx_rng_seed(&r, 43);
    const int64_t n = 2, len = 9, c = 4, f = 6;
    static const struct {
        int k, stride, dilation, groups, before, after;
        sx_padding padding;
    } cases[] = {{3, 1, 1, 1, 0, 0, SX_PAD_VALID},    {3, 2, 1, 1, 1, 1, SX_PAD_EXPLICIT},
                 {2, 1, 2, 2, 0, 0, SX_PAD_SAME},     {4, 3, 1, 1, 0, 0, SX_PAD_SAME_LOWER},
                 {3, 2, 2, 2, 3, 0, SX_PAD_EXPLICIT}, {1, 1, 1, 2, 0, 0, SX_PAD_VALID}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        sx_nn_net *net = net_new(SX_F64, 1);
        int64_t is[2] = {len, c};
        sx_nn_layer *x = sx_nn_input(net, 2, is);
        sx_nn_conv1d_params p = sx_nn_conv1d_params_default((int)f, cases[t].k);
        p.stride = cases[t].stride;
        p.dilation = cases[t].dilation;
        p.groups = cases[t].groups;
        p.padding = cases[t].padding;
        p.pad_before = cases[t].before;
        p.pad_after = cases[t].after;
        p.act = SX_ACT_TANH;
        sx_nn_layer *cv = sx_nn_conv1d(net, x, &p);
        cr_assert_not_null(cv, "case %zu: %s", t, sx_last_error());
        cr_assert_eq(cv->rank, 2);
        int64_t k3[3] = {cases[t].k, c / cases[t].groups, f};
        cr_assert(sx_shape_equal(3, ptensor(cv, 0)->shape, 3, k3), "case %zu", t);
        sx_nn_flatten(net, cv);
        randomise(net, &r);
        sx_tensor *xb = batch(net, &r, n), *y = predict(net, xb);
        /* the 1-d loop */
        int64_t ol = cv->shape[0], kd = (int64_t)cases[t].dilation * (cases[t].k - 1) + 1, pb, pa;
        pads_of(len, kd, cases[t].stride, p.padding, p.pad_before, p.pad_after, &pb, &pa);
        cr_assert_eq(ol, (len + pb + pa - kd) / cases[t].stride + 1, "case %zu", t);
        double want[2 * 9 * 6];
        int64_t cg = c / cases[t].groups, fg = f / cases[t].groups;
        const double *X = D(xb), *K = D(ptensor(cv, 0)), *B = D(ptensor(cv, 1));
        for (int64_t i = 0; i < n; i++)
            for (int64_t o = 0; o < ol; o++)
                for (int64_t j = 0; j < f; j++) {
                    double s = B[j];
                    for (int64_t u = 0; u < cases[t].k; u++) {
                        int64_t at = o * cases[t].stride - pb + u * cases[t].dilation;
                        if (at < 0 || at >= len)
                            continue;
                        for (int64_t q = 0; q < cg; q++)
                            s +=
                                X[(i * len + at) * c + (j / fg) * cg + q] * K[(u * cg + q) * f + j];
                    }
                    want[(i * ol + o) * f + j] = tanh(s);
                }
        expect_close(y, want, n * ol * f, 1e-12);
        sx_tensor_free(xb);
        sx_tensor_free(y);
        sx_nn_net_free(net);
    }
}

/* ---------------------------------------------------------------- pooling */

Test(nn_conv, pools_with_every_option_against_a_loop)
{
    sx_rng r;
    sx_rng_seed(&r, 44);
    const int64_t n = 2, h = 7, w = 6, c = 2;
    static const struct {
        bool max;
        sx_pool2d_params p;
    } cases[] = {
        {true,
         {.kernel_h = 3,
          .kernel_w = 3,
          .stride_h = 2,
          .stride_w = 2,
          .padding = SX_PAD_EXPLICIT,
          .pad_top = 1,
          .pad_bottom = 1,
          .pad_left = 1,
          .pad_right = 1}},
        {true, {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .ceil_mode = 1}},
        {true,
         {.kernel_h = 2,
          .kernel_w = 3,
          .stride_h = 1,
          .stride_w = 2,
          .dilation_h = 2,
          .dilation_w = 2,
          .ceil_mode = 1}},
        {true,
         {.kernel_h = 2,
          .kernel_w = 3,
          .stride_h = 2,
          .stride_w = 2,
          .padding = SX_PAD_SAME_LOWER}},
        {false,
         {.kernel_h = 3,
          .kernel_w = 3,
          .stride_h = 2,
          .stride_w = 2,
          .padding = SX_PAD_EXPLICIT,
          .pad_top = 1,
          .pad_bottom = 1,
          .pad_left = 1,
          .pad_right = 1,
          .count_include_pad = 1}},
        {false,
         {.kernel_h = 3,
          .kernel_w = 3,
          .stride_h = 2,
          .stride_w = 2,
          .padding = SX_PAD_EXPLICIT,
          .pad_top = 1,
          .pad_bottom = 1,
          .pad_left = 1,
          .pad_right = 1}},
        {false,
         {.kernel_h = 2,
          .kernel_w = 2,
          .stride_h = 2,
          .stride_w = 2,
          .padding = SX_PAD_EXPLICIT,
          .pad_top = 1,
          .pad_left = 0,
          .pad_right = 1,
          .ceil_mode = 1,
          .count_include_pad = 1}},
        {false,
         {.kernel_h = 3,
          .kernel_w = 2,
          .stride_h = 2,
          .stride_w = 1,
          .padding = SX_PAD_SAME_LOWER}},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        sx_nn_net *net = net_new(SX_F64, 1);
        sx_nn_layer *x = image(net, h, w, c);
        sx_nn_pool2d_params p = {.pool = cases[t].p};
        sx_nn_layer *pl =
            cases[t].max ? sx_nn_max_pool2d(net, x, &p) : sx_nn_avg_pool2d(net, x, &p);
        cr_assert_not_null(pl, "case %zu: %s", t, sx_last_error());
        sx_nn_flatten(net, pl);
        sx_tensor *xb = batch(net, &r, n), *y = predict(net, xb);
        int64_t xs[4] = {n, h, w, c}, ys[4];
        layer_shape4(pl, n, ys);
        double want[2 * 7 * 6 * 2];
        cr_assert_leq(ys[0] * ys[1] * ys[2] * ys[3], 2 * 7 * 6 * 2);
        ref_pool(cases[t].max, D(xb), xs, &p.pool, ys, want);
        expect_close(y, want, ys[0] * ys[1] * ys[2] * ys[3], 1e-12);
        sx_tensor_free(xb);
        sx_tensor_free(y);
        sx_nn_net_free(net);
    }
}

/* ---------------------------------------------------------------- errors */

Test(nn_conv, bad_options_are_errors_that_name_the_numbers)
{
    int64_t is[2] = {6, 6};
    struct {
        sx_status want;
        const char *says;
    } expect[] = {{SX_E_SHAPE, "groups 4 must divide the input channels 6"},
                  {SX_E_SHAPE, "groups 3 must divide the input channels 6 and the filters 4"},
                  {SX_E_ARG, "groups -1"},
                  {SX_E_ARG, "params are NULL"},
                  {SX_E_ARG, "depth_multiplier 0"},
                  {SX_E_ARG, "groups 2 (want 0, 1 or the input channels, 6)"},
                  {SX_E_RANK, "input has rank 2"},
                  {SX_E_ARG, "filters 0"},
                  {SX_E_RANK, "input has rank 3"},
                  {SX_E_SHAPE, "groups 4 must divide the input channels 6"},
                  {SX_E_ARG, "dilation 0"},
                  {SX_E_ARG, "average pooling takes none"},
                  {SX_E_SHAPE, "sx_nn_conv1d"}};
    for (int i = 0; i < (int)(sizeof expect / sizeof expect[0]); i++) {
        sx_nn_net *n2 = net_new(SX_F32, 1);
        bool seq = i == 6 || i == 9 || i == 10 || i == 12; /* a (length, channels) input */
        sx_nn_layer *in = seq ? sx_nn_input(n2, 2, is) : image(n2, 6, 6, 6), *l = NULL;
        sx_nn_layer *x2 = in, *s2 = in;
        sx_nn_conv2d_params cp = sx_nn_conv2d_params_default(6, 3, 3);
        sx_nn_depthwise_conv2d_params dp = sx_nn_depthwise_conv2d_params_default(3, 3);
        sx_nn_separable_conv2d_params sp = sx_nn_separable_conv2d_params_default(4, 3, 3);
        sx_nn_conv1d_params op = sx_nn_conv1d_params_default(4, 3);
        sx_nn_pool2d_params pp = sx_nn_pool2d_params_default(2, 2);
        switch (i) {
        case 0:
            cp.conv.groups = 4;
            l = sx_nn_conv2d(n2, x2, &cp);
            break;
        case 1:
            cp.filters = 4;
            cp.conv.groups = 3;
            l = sx_nn_conv2d(n2, x2, &cp);
            break;
        case 2:
            cp.conv.groups = -1;
            l = sx_nn_conv2d(n2, x2, &cp);
            break;
        case 3:
            l = sx_nn_depthwise_conv2d(n2, x2, NULL);
            break;
        case 4:
            dp.depth_multiplier = 0;
            l = sx_nn_depthwise_conv2d(n2, x2, &dp);
            break;
        case 5:
            sp.conv.groups = 2;
            l = sx_nn_separable_conv2d(n2, x2, &sp);
            break;
        case 6:
            l = sx_nn_separable_conv2d(n2, s2, &sp);
            break;
        case 7:
            sp.filters = 0;
            l = sx_nn_separable_conv2d(n2, x2, &sp);
            break;
        case 8:
            l = sx_nn_conv1d(n2, x2, &op);
            break;
        case 9:
            op.groups = 4;
            l = sx_nn_conv1d(n2, s2, &op);
            break;
        case 10:
            op.dilation = 0;
            l = sx_nn_conv1d(n2, s2, &op);
            break;
        case 11: /* average pooling takes no dilation */
            pp.pool.dilation_h = 2;
            l = sx_nn_avg_pool2d(n2, x2, &pp);
            break;
        case 12: /* a window longer than the input */
            op.kernel = 7;
            l = sx_nn_conv1d(n2, s2, &op);
            break;
        }
        cr_assert_null(l, "case %d", i);
        cr_assert_eq(sx_nn_net_status(n2), expect[i].want, "case %d: %s (%s)", i,
                     sx_status_str(sx_nn_net_status(n2)), sx_last_error());
        cr_assert(strstr(sx_last_error(), expect[i].says) != NULL, "case %d: \"%s\"", i,
                  sx_last_error());
        cr_assert_eq(n2->n_layers, 1, "case %d: nothing added", i);
        sx_nn_net_free(n2);
    }
}

/* ---------------------------------------------------------------- training, save and load */

/* A network using every option: grouped dilated conv, depthwise, separable, pools with pads,
 * ceil_mode, count_include_pad and dilation, then a dense classifier. */
static sx_nn_net *option_net(sx_dtype dt, uint64_t seed)
{
    sx_nn_net *net = net_new(dt, seed);
    sx_nn_layer *x = image(net, 10, 10, 1);
    sx_nn_conv2d_params c1 = sx_nn_conv2d_params_default(4, 3, 3);
    c1.conv.padding = SX_PAD_EXPLICIT;
    c1.conv.pad_top = 2, c1.conv.pad_left = 1, c1.conv.pad_right = 1;
    c1.act = SX_ACT_RELU;
    x = sx_nn_conv2d(net, x, &c1);
    sx_nn_pool2d_params mp = sx_nn_pool2d_params_default(2, 2);
    mp.pool.dilation_h = 2;
    mp.pool.stride_h = mp.pool.stride_w = 1;
    mp.pool.ceil_mode = 1;
    x = sx_nn_max_pool2d(net, x, &mp);
    sx_nn_conv2d_params c2 = sx_nn_conv2d_params_default(4, 3, 3);
    c2.conv.groups = 2;
    c2.conv.dilation_h = c2.conv.dilation_w = 2;
    c2.conv.padding = SX_PAD_SAME_LOWER;
    c2.act = SX_ACT_TANH;
    x = sx_nn_conv2d(net, x, &c2);
    sx_nn_depthwise_conv2d_params d = sx_nn_depthwise_conv2d_params_default(3, 3);
    d.depth_multiplier = 2;
    d.conv.stride_h = d.conv.stride_w = 2;
    d.conv.padding = SX_PAD_EXPLICIT;
    d.conv.pad_top = d.conv.pad_bottom = d.conv.pad_left = d.conv.pad_right = 1;
    x = sx_nn_depthwise_conv2d(net, x, &d);
    sx_nn_separable_conv2d_params s = sx_nn_separable_conv2d_params_default(6, 2, 2);
    s.conv.padding = SX_PAD_SAME;
    s.act = SX_ACT_RELU;
    x = sx_nn_separable_conv2d(net, x, &s);
    sx_nn_pool2d_params ap = sx_nn_pool2d_params_default(3, 3);
    ap.pool.stride_h = ap.pool.stride_w = 2;
    ap.pool.padding = SX_PAD_EXPLICIT;
    ap.pool.pad_top = ap.pool.pad_bottom = ap.pool.pad_left = ap.pool.pad_right = 1;
    ap.pool.count_include_pad = 1;
    ap.pool.ceil_mode = 1;
    x = sx_nn_avg_pool2d(net, x, &ap);
    sx_nn_fully_connected(net, x, 3, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

static sx_tensor *pixels(sx_rng *r, sx_dtype dt, int64_t n)
{
    int64_t s[4] = {n, 10, 10, 1};
    return tu_rand(r, dt, 4, s, 0, 1);
}

Test(nn_conv, every_option_trains_and_survives_save_and_load)
{
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = d ? SX_F64 : SX_F32;
        sx_nn_net *net = option_net(dt, 3);
        sx_nn_net_set_input_scale(net, 1.0);
        /* a few training steps move the weights (the gradients reach every layer) */
        sx_nn_train_params tp = sx_nn_train_params_default();
        tp.verbose = 0;
        sx_nn_model *tm = NULL;
        cr_assert_eq(sx_nn_compile_train(net, &tp, 4, &tm), SX_OK, "%s", sx_last_error());
        sx_rng r;
        sx_rng_seed(&r, 9);
        sx_tensor *xb = pixels(&r, dt, 4);
        int64_t ls[2] = {4, 3};
        sx_tensor *lab = tu_zeros(dt, 2, ls);
        for (int i = 0; i < 4; i++)
            sx_tensor_set(lab, i * 3 + i % 3, 1);
        sx_tensor *before = NULL;
        cr_assert_eq(sx_tensor_clone(ptensor(net->layers[3], 0), &before), SX_OK);
        double loss = 0;
        for (int i = 0; i < 3; i++)
            cr_assert_eq(sx_nn_model_step(tm, xb, lab, 0.05, i + 1, &loss, NULL), SX_OK, "%s",
                         sx_last_error());
        cr_assert(isfinite(loss));
        sx_tensor *after = ptensor(net->layers[3], 0);
        bool moved = false;
        for (int64_t i = 0; i < after->size; i++)
            moved |= sx_tensor_get(after, i) != sx_tensor_get(before, i);
        cr_assert(moved, "the grouped conv's kernel did not train");
        sx_nn_model_free(tm);

        char path[256];
        snprintf(path, sizeof path, "/tmp/strix_nn_conv_%d_%d.sxm", (int)getpid(), d);
        cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
        sx_nn_model *m = NULL, *orig = NULL;
        cr_assert_eq(sx_nn_load(path, 5, &m), SX_OK, "%s", sx_last_error());
        remove(path);
        cr_assert_eq(sx_nn_compile_infer(net, 5, &orig), SX_OK, "%s", sx_last_error());
        sx_tensor *x = pixels(&r, dt, 5);
        int64_t os[2] = {5, 3};
        sx_tensor *a = tu_zeros(dt, 2, os), *b = tu_zeros(dt, 2, os);
        cr_assert_eq(sx_nn_model_predict(orig, x, a), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_nn_model_predict(m, x, b), SX_OK, "%s", sx_last_error());
        cr_assert_eq(memcmp(a->data, b->data, (size_t)a->size * (d ? 8 : 4)), 0,
                     "the loaded model predicts other values");
        sx_tensor_free(x);
        sx_tensor_free(a);
        sx_tensor_free(b);
        sx_tensor_free(before);
        sx_tensor_free(xb);
        sx_tensor_free(lab);
        sx_nn_model_free(m);
        sx_nn_model_free(orig);
        sx_nn_net_free(net);
    }
}

Test(nn_conv, print_shows_the_new_options)
{
    sx_nn_net *net = option_net(SX_F32, 1);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sx_nn_net_print(net, f);
    fclose(f);
    cr_assert(strstr(buf, "pads 2,0,1,1") != NULL, "%s", buf);
    cr_assert(strstr(buf, "dilation 2x2 groups 2") != NULL, "%s", buf);
    cr_assert(strstr(buf, "same_lower") != NULL, "%s", buf);
    cr_assert(strstr(buf, "depthwise_conv2d_1") != NULL, "%s", buf);
    cr_assert(strstr(buf, "separable_conv2d_1") != NULL, "%s", buf);
    cr_assert(strstr(buf, "dilation 2x1 ceil") != NULL, "%s", buf);
    cr_assert(strstr(buf, "ceil count-pad") != NULL, "%s", buf);
    free(buf);
    sx_nn_net_free(net);
}
