/* The transposed convolution and adaptive average pooling layers: output shapes
 * against PyTorch's formulas, an SGD step of a small f64 network through both equal to central
 * finite differences of its loss, a save/load round trip giving the same outputs bit for bit,
 * and clear errors for bad arguments. */
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"

static sx_nn_net *net_new(sx_dtype dt, uint64_t seed)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("ct", dt, seed, &net), SX_OK, "%s", sx_last_error());
    return net;
}

static sx_nn_layer *image(sx_nn_net *net, int64_t h, int64_t w, int64_t c)
{
    sx_nn_layer *l = sx_nn_input(net, 3, (int64_t[]){h, w, c});
    cr_assert_not_null(l, "%s", sx_last_error());
    return l;
}

/* PyTorch's ConvTranspose2d output size along one axis. */
static int64_t torch_ct(int64_t in, int k, int s, int pad_a, int pad_b, int d, int op)
{
    return (in - 1) * s - pad_a - pad_b + d * (k - 1) + op + 1;
}

Test(nn_conv_transpose, output_shape_is_pytorchs)
{
    struct {
        int64_t h, w, c;
        int filters, kh, kw, sh, sw, pt, pb, pl, pr, dh, dw, oph, opw, groups;
    } cases[] = {
        {4, 4, 2, 3, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1},
        {5, 3, 4, 6, 3, 2, 2, 3, 1, 1, 0, 1, 1, 1, 1, 2, 2},
        {3, 3, 3, 3, 2, 2, 2, 2, 0, 0, 0, 0, 2, 2, 1, 1, 3},
        {2, 6, 2, 4, 4, 1, 3, 1, 1, 2, 0, 0, 1, 1, 2, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sx_nn_net *net = net_new(SX_F32, 1);
        sx_nn_layer *x = image(net, cases[i].h, cases[i].w, cases[i].c);
        sx_nn_conv_transpose2d_params p =
            sx_nn_conv_transpose2d_params_default(cases[i].filters, cases[i].kh, cases[i].kw);
        p.conv.stride_h = cases[i].sh, p.conv.stride_w = cases[i].sw;
        p.conv.padding = SX_PAD_EXPLICIT;
        p.conv.pad_top = cases[i].pt, p.conv.pad_bottom = cases[i].pb;
        p.conv.pad_left = cases[i].pl, p.conv.pad_right = cases[i].pr;
        p.conv.dilation_h = cases[i].dh, p.conv.dilation_w = cases[i].dw;
        p.conv.output_padding_h = cases[i].oph, p.conv.output_padding_w = cases[i].opw;
        p.conv.groups = cases[i].groups;
        sx_nn_layer *y = sx_nn_conv_transpose2d(net, x, &p);
        cr_assert_not_null(y, "case %zu: %s", i, sx_last_error());
        int64_t oh = torch_ct(cases[i].h, cases[i].kh, cases[i].sh, cases[i].pt, cases[i].pb,
                              cases[i].dh, cases[i].oph);
        int64_t ow = torch_ct(cases[i].w, cases[i].kw, cases[i].sw, cases[i].pl, cases[i].pr,
                              cases[i].dw, cases[i].opw);
        cr_assert_eq(sx_nn_layer_shape(y)[0], oh, "case %zu", i);
        cr_assert_eq(sx_nn_layer_shape(y)[1], ow, "case %zu", i);
        cr_assert_eq(sx_nn_layer_shape(y)[2], cases[i].filters, "case %zu", i);
        /* kernel (kh, kw, filters/groups, c) and a bias */
        cr_assert_eq(sx_nn_net_param_count(net), (int64_t)cases[i].kh * cases[i].kw *
                                                         (cases[i].filters / cases[i].groups) *
                                                         cases[i].c +
                                                     cases[i].filters);
        sx_nn_layer *a = sx_nn_adaptive_avg_pool2d(net, y, 3, 2);
        cr_assert_not_null(a, "%s", sx_last_error());
        cr_assert_eq(sx_nn_layer_shape(a)[0], 3);
        cr_assert_eq(sx_nn_layer_shape(a)[1], 2);
        cr_assert_eq(sx_nn_layer_shape(a)[2], cases[i].filters);
        sx_nn_net_free(net);
    }
}

/* ---------------------------------------------------------------- gradient */

enum { N = 3, H = 3, W = 4, C = 2, K = 3 };

/* conv_transpose2d (stride 2, pads, output padding, two groups, tanh) -> adaptive avg pool to
 * 3x2 (windows of two sizes) -> dense K, f64 */
static sx_nn_net *small_net(uint64_t seed)
{
    sx_nn_net *net = net_new(SX_F64, seed);
    sx_nn_layer *x = image(net, H, W, C);
    sx_nn_conv_transpose2d_params p = sx_nn_conv_transpose2d_params_default(4, 3, 2);
    p.conv.stride_h = 2, p.conv.stride_w = 2;
    p.conv.padding = SX_PAD_EXPLICIT;
    p.conv.pad_top = 1, p.conv.pad_left = 1;
    p.conv.output_padding_h = 1;
    p.conv.groups = 2;
    p.act = SX_ACT_TANH;
    x = sx_nn_conv_transpose2d(net, x, &p);
    x = sx_nn_adaptive_avg_pool2d(net, x, 3, 2);
    x = sx_nn_fully_connected(net, x, K, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_rng r;
    sx_rng_seed(&r, seed + 1);
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            cr_assert_eq(sx_tensor_rand_uniform(net->layers[i]->params[k].value, &r, -0.6, 0.6),
                         SX_OK);
    return net;
}

/* MSE of the inference outputs against y, computed here. */
static double mse(sx_nn_model *m, const sx_tensor *x, const sx_tensor *y)
{
    sx_tensor *out = tu_zeros(SX_F64, 2, (int64_t[]){N, K});
    cr_assert_eq(sx_nn_model_predict(m, x, out), SX_OK, "%s", sx_last_error());
    double loss = 0;
    for (int64_t i = 0; i < N * K; i++) {
        double d = sx_tensor_get(out, i) - sx_tensor_get(y, i);
        loss += d * d / (N * K);
    }
    sx_tensor_free(out);
    return loss;
}

Test(nn_conv_transpose, sgd_step_is_the_finite_difference_gradient)
{
    sx_nn_net *net = small_net(5);
    sx_rng r;
    sx_rng_seed(&r, 9);
    sx_tensor *x = tu_rand(&r, SX_F64, 4, (int64_t[]){N, H, W, C}, -1, 1);
    sx_tensor *y = tu_rand(&r, SX_F64, 2, (int64_t[]){N, K}, -1, 1);
    sx_nn_model *infer = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, N, &infer), SX_OK, "%s", sx_last_error());
    int64_t total = sx_nn_net_param_count(net), j = 0;
    double *g = calloc((size_t)total, sizeof *g), *before = calloc((size_t)total, sizeof *g);
    const double h = 1e-5;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            sx_tensor *v = net->layers[i]->params[k].value;
            for (int64_t e = 0; e < v->size; e++, j++) {
                double *w = &SX_F64P(v)[e], w0 = *w;
                *w = w0 + h;
                double lp = mse(infer, x, y);
                *w = w0 - h;
                double lm = mse(infer, x, y);
                *w = w0;
                g[j] = (lp - lm) / (2 * h);
                before[j] = w0;
            }
        }
    cr_assert_eq(j, total);
    sx_nn_model_free(infer);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.loss = SX_LOSS_MSE;
    p.optim = sx_optim_params_default(SX_OPTIM_SGD);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, &p, N, &m), SX_OK, "%s", sx_last_error());
    const double eta = 0.5;
    cr_assert_eq(sx_nn_model_step(m, x, y, eta, 1, NULL, NULL), SX_OK, "%s", sx_last_error());
    j = 0;
    int64_t nonzero = 0;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            const nn_param *pr = &net->layers[i]->params[k];
            for (int64_t e = 0; e < pr->value->size; e++, j++) {
                double got = (before[j] - SX_F64P(pr->value)[e]) / eta;
                nonzero += fabs(g[j]) > 1e-6;
                cr_assert(fabs(got - g[j]) <= 1e-8 + 1e-6 * fabs(g[j]),
                          "%s %s[%lld]: step/eta %.12g, finite differences %.12g", pr->name,
                          net->layers[i]->name, (long long)e, got, g[j]);
            }
        }
    cr_assert_gt(nonzero, total / 2, "only %lld of %lld gradients nonzero", (long long)nonzero,
                 (long long)total);
    sx_nn_model_free(m);
    free(g);
    free(before);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- save and load */

Test(nn_conv_transpose, save_load_round_trip_gives_the_same_outputs)
{
    sx_nn_net *net = small_net(11);
    sx_rng r;
    sx_rng_seed(&r, 12);
    sx_tensor *x = tu_rand(&r, SX_F64, 4, (int64_t[]){N, H, W, C}, -1, 1);
    sx_tensor *a = tu_zeros(SX_F64, 2, (int64_t[]){N, K}),
              *b = tu_zeros(SX_F64, 2, (int64_t[]){N, K});
    sx_nn_model *m = NULL, *loaded = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, N, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(m, x, a), SX_OK, "%s", sx_last_error());
    char path[] = "/tmp/sx_nn_ct_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_load(path, N, &loaded), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(loaded, x, b), SX_OK, "%s", sx_last_error());
    cr_assert_eq(memcmp(a->data, b->data, (size_t)(N * K) * sizeof(double)), 0,
                 "the loaded model's outputs differ");
    remove(path);
    sx_nn_model_free(loaded);
    sx_nn_model_free(m);
    sx_tensor_free(x);
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- errors */

/* A constructor that fails returns NULL, records status `want` on the network, and names the
 * layer in the message. */
static void expect_error(sx_nn_net *net, sx_nn_layer *l, sx_status want, const char *part)
{
    cr_assert_null(l);
    cr_assert_eq(sx_nn_net_status(net), want, "status %s, want %s (%s)",
                 sx_status_str(sx_nn_net_status(net)), sx_status_str(want), sx_last_error());
    cr_assert_not_null(strstr(sx_last_error(), part), "message \"%s\" lacks \"%s\"",
                       sx_last_error(), part);
}

Test(nn_conv_transpose, bad_arguments_give_clear_errors)
{
    struct {
        int filters, kh, groups, stride, out_pad;
        sx_status want;
        const char *part;
    } cases[] = {
        {0, 3, 1, 1, 0, SX_E_ARG, "filters 0"},
        {4, 0, 1, 1, 0, SX_E_ARG, "kernel 0x"},
        {3, 3, 2, 1, 0, SX_E_SHAPE, "groups"},
        {4, 3, 1, 2, 2, SX_E_ARG, "conv_transpose2d"}, /* output padding not below the stride */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sx_nn_net *net = net_new(SX_F32, 1);
        sx_nn_layer *x = image(net, 4, 4, 2);
        sx_nn_conv_transpose2d_params p =
            sx_nn_conv_transpose2d_params_default(cases[i].filters, cases[i].kh, 3);
        p.conv.groups = cases[i].groups;
        p.conv.stride_h = p.conv.stride_w = cases[i].stride;
        p.conv.output_padding_h = cases[i].out_pad;
        expect_error(net, sx_nn_conv_transpose2d(net, x, &p), cases[i].want, cases[i].part);
        sx_nn_net_free(net);
    }
    sx_nn_net *net = net_new(SX_F32, 1);
    sx_nn_layer *x = image(net, 4, 4, 2);
    expect_error(net, sx_nn_conv_transpose2d(net, x, NULL), SX_E_ARG, "params are NULL");
    sx_nn_net_free(net);
    net = net_new(SX_F32, 1);
    x = image(net, 4, 4, 2);
    expect_error(net, sx_nn_adaptive_avg_pool2d(net, x, 0, 2), SX_E_SHAPE, "to 0x2");
    sx_nn_net_free(net);
    net = net_new(SX_F32, 1);
    x = sx_nn_input(net, 1, (int64_t[]){8});
    expect_error(net, sx_nn_adaptive_avg_pool2d(net, x, 2, 2), SX_E_RANK, "adaptive_avg_pool2d");
    sx_nn_net_free(net);
    net = net_new(SX_F32, 1);
    x = sx_nn_input(net, 1, (int64_t[]){8});
    sx_nn_conv_transpose2d_params p = sx_nn_conv_transpose2d_params_default(2, 2, 2);
    expect_error(net, sx_nn_conv_transpose2d(net, x, &p), SX_E_RANK, "want (h,w,c)");
    sx_nn_net_free(net);
}
