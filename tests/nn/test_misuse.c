/* Misuse of the nn and optim API, each a named regression test: a layer
 * added while a compiled model borrows the network, sizes from user numbers that overflow,
 * NULL handles given to accessors, resuming a checkpoint with another batch size or another
 * optimiser, an output of the wrong shape, a temporary file left by a writer killed mid-write,
 * and the status of an allocation failure while building layers. */
#include "testutil.h"

#include <dirent.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nn_impl.h"
#include "nn_layer_calls.h"

/* ---------------------------------------------------------------- helpers */

/* `call` fails with the status `want` and says why: sx_last_error(), cleared before the call,
 * is not empty after it. */
#define ASSERT_FAILS(call, want)                                                                   \
    do {                                                                                           \
        sx_error_clear();                                                                          \
        sx_status s_ = (call);                                                                     \
        cr_assert_eq(s_, (want), "%s: %s, want %s (%s)", #call, sx_status_str(s_),                 \
                     sx_status_str(want), sx_last_error());                                        \
        cr_assert(sx_last_error()[0] != '\0', "%s: %s without a message", #call,                   \
                  sx_status_str(s_));                                                              \
    } while (0)

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sx_nn_misuse_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

/* Entries of a folder (without . and ..). */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static sx_nn_net *net_new(uint64_t seed)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("misuse", SX_F32, seed, &net), SX_OK, "%s", sx_last_error());
    return net;
}

/* (6,6,1) -> conv 3x3x4 relu -> max pool 2 -> dense 3 softmax */
static sx_nn_net *small_net(uint64_t seed)
{
    sx_nn_net *net = net_new(seed);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){6, 6, 1});
    x = t_conv2d(net, x, 3, 3, 4, 1, SX_PAD_SAME, SX_ACT_RELU);
    x = t_max_pool2d(net, x, 2, 2, 2, SX_PAD_VALID);
    x = sx_nn_fully_connected(net, x, 3, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

/* A synthetic labelled image set (6x6, 3 classes; caller-owned arrays). */
static sx_ds_images images(int64_t n, uint64_t seed)
{
    sx_rng r;
    sx_rng_seed(&r, seed);
    sx_ds_images d = {.n = n, .h = 6, .w = 6, .c = 1, .classes = 3};
    d.pixels = malloc((size_t)(n * 36));
    d.labels = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = (int64_t)sx_rng_below(&r, 3);
        d.labels[i] = (uint8_t)k;
        for (int64_t a = 0; a < 36; a++)
            d.pixels[i * 36 + a] = (uint8_t)(sx_rng_below(&r, 80) + (a / 12 == k ? 150 : 0));
    }
    return d;
}

static void images_free(sx_ds_images *d)
{
    free(d->pixels);
    free(d->labels);
}

/* All parameter values of a network in one array (malloc'd). */
static double *snapshot(const sx_nn_net *net, int64_t *count)
{
    int64_t n = 0, j = 0;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            n += net->layers[i]->params[k].value->size;
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            for (int64_t e = 0; e < net->layers[i]->params[k].value->size; e++)
                v[j++] = sx_tensor_get(net->layers[i]->params[k].value, e);
    *count = n;
    return v;
}

static void assert_msg_has(const char *what)
{
    cr_assert(strstr(sx_last_error(), what) != NULL, "message '%s' lacks '%s'", sx_last_error(),
              what);
}

/* ---------------------------------------------------------------- layers and models */

Test(nn_misuse, adding_a_layer_while_a_compiled_model_lives_is_refused)
{
    sx_nn_net *net = small_net(1);
    sx_nn_layer *last = net->layers[net->n_layers - 1];
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 2, &m), SX_OK, "%s", sx_last_error());
    sx_rng r;
    sx_rng_seed(&r, 3);
    sx_tensor *x = tu_rand(&r, SX_F32, 4, (int64_t[]){2, 6, 6, 1}, 0, 1);
    sx_tensor *a = tu_zeros(SX_F32, 2, (int64_t[]){2, 3}),
              *b = tu_zeros(SX_F32, 2, (int64_t[]){2, 3});
    cr_assert_eq(sx_nn_model_predict(m, x, a), SX_OK, "%s", sx_last_error());

    /* many layers: the model's per-layer tables were sized for the network it was made from */
    int layers = net->n_layers;
    for (int i = 0; i < 40; i++) {
        sx_nn_layer *l = sx_nn_linear(net, last, 3, SX_ACT_NONE);
        cr_assert_null(l, "layer %d added while a model borrows the network", i);
    }
    ASSERT_FAILS(sx_nn_net_status(net), SX_E_STATE);
    assert_msg_has("sx_nn_linear");
    assert_msg_has("compiled model");
    cr_assert_eq(net->n_layers, layers);
    /* the model still predicts what it did */
    cr_assert_eq(sx_nn_model_predict(m, x, b), SX_OK, "%s", sx_last_error());
    cr_assert_eq(memcmp(a->data, b->data, (size_t)a->size * sizeof(float)), 0);
    /* and so does a smaller batch (a graph made on demand from the network) */
    sx_tensor x1 = sx_tensor_view(SX_F32, 4, (int64_t[]){1, 6, 6, 1}, x->data);
    sx_tensor b1 = sx_tensor_view(SX_F32, 2, (int64_t[]){1, 3}, b->data);
    cr_assert_eq(sx_nn_model_predict(m, &x1, &b1), SX_OK, "%s", sx_last_error());
    cr_assert_eq(memcmp(a->data, b->data, 3 * sizeof(float)), 0);
    sx_nn_model_free(m);
    sx_nn_net_free(net);

    /* once the models are freed, the network grows again */
    net = small_net(1);
    cr_assert_eq(sx_nn_compile_infer(net, 2, &m), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m);
    sx_nn_model *t = NULL;
    sx_nn_train_params p = sx_nn_train_params_default();
    cr_assert_eq(sx_nn_compile_train(net, &p, 2, &t), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(t);
    last = net->layers[net->n_layers - 1];
    cr_assert_not_null(sx_nn_activation(net, last, SX_ACT_NONE), "%s", sx_last_error());
    cr_assert_eq(sx_nn_compile_infer(net, 2, &m), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m);
    sx_nn_net_free(net);
    sx_tensor_free(x);
    sx_tensor_free(a);
    sx_tensor_free(b);
}

/* The network is freed with its last model when sx_nn_net_free comes first. */
Test(nn_misuse, freeing_the_network_before_its_models_is_safe)
{
    sx_nn_net *net = small_net(4);
    sx_nn_model *m = NULL, *t = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 2, &m), SX_OK, "%s", sx_last_error());
    sx_nn_train_params p = sx_nn_train_params_default();
    cr_assert_eq(sx_nn_compile_train(net, &p, 2, &t), SX_OK, "%s", sx_last_error());
    sx_nn_net_free(net);
    sx_rng r;
    sx_rng_seed(&r, 5);
    sx_tensor *x = tu_rand(&r, SX_F32, 4, (int64_t[]){2, 6, 6, 1}, 0, 1);
    sx_tensor *y = tu_zeros(SX_F32, 2, (int64_t[]){2, 3});
    sx_tensor_set(y, 0, 1);
    sx_tensor_set(y, 4, 1);
    cr_assert_eq(sx_nn_model_step(t, x, y, 0.01, 1, NULL, NULL), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(t);
    cr_assert_eq(sx_nn_model_predict(m, x, y), SX_OK, "%s", sx_last_error());
    sx_tensor x1 = sx_tensor_view(SX_F32, 4, (int64_t[]){1, 6, 6, 1}, x->data);
    sx_tensor y1 = sx_tensor_view(SX_F32, 2, (int64_t[]){1, 3}, y->data);
    cr_assert_eq(sx_nn_model_predict(m, &x1, &y1), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m); /* frees the network too (ASan: no leak, no use after free) */
    sx_tensor_free(x);
    sx_tensor_free(y);
}

Test(nn_misuse, a_training_model_with_another_optimiser_than_a_live_one_is_refused)
{
    sx_nn_net *net = small_net(2);
    sx_nn_train_params adam = sx_nn_train_params_default(), sgd = adam;
    adam.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    sgd.optim = sx_optim_params_default(SX_OPTIM_SGD);
    sx_nn_model *m1 = NULL, *m2 = NULL, *m3 = (sx_nn_model *)1;
    cr_assert_eq(sx_nn_compile_train(net, &adam, 4, &m1), SX_OK, "%s", sx_last_error());
    /* the same optimiser shares the state: fine (the training loop's last partial batch) */
    cr_assert_eq(sx_nn_compile_train(net, &adam, 3, &m2), SX_OK, "%s", sx_last_error());
    /* another one would free the Adam moments the first two models borrow */
    ASSERT_FAILS(sx_nn_compile_train(net, &sgd, 4, &m3), SX_E_STATE);
    cr_assert_null(m3);
    assert_msg_has("adam");
    assert_msg_has("sgd");
    /* the first model still trains */
    sx_rng r;
    sx_rng_seed(&r, 4);
    sx_tensor *x = tu_rand(&r, SX_F32, 4, (int64_t[]){4, 6, 6, 1}, 0, 1);
    sx_tensor *y = tu_zeros(SX_F32, 2, (int64_t[]){4, 3});
    for (int i = 0; i < 4; i++)
        sx_tensor_set(y, i * 3 + i % 3, 1);
    double loss = 0;
    cr_assert_eq(sx_nn_model_step(m1, x, y, 0.01, 1, &loss, NULL), SX_OK, "%s", sx_last_error());
    cr_assert(isfinite(loss));
    /* sx_nn_train with sgd on the same network is refused too, before changing anything */
    sx_ds_images d = images(8, 5);
    sgd.verbose = 0;
    sgd.batch = 4;
    int64_t n0, n1;
    double *w0 = snapshot(net, &n0);
    ASSERT_FAILS(sx_nn_train(net, &sgd, &d, NULL, NULL), SX_E_STATE);
    double *w1 = snapshot(net, &n1);
    cr_assert_eq(memcmp(w0, w1, (size_t)n0 * sizeof *w0), 0);
    sx_nn_model_free(m1);
    sx_nn_model_free(m2);
    /* with none alive, another optimiser is fine */
    cr_assert_eq(sx_nn_compile_train(net, &sgd, 4, &m3), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_step(m3, x, y, 0.01, 2, &loss, NULL), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m3);
    free(w0);
    free(w1);
    images_free(&d);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- sizes */

typedef struct size_case {
    const char *what, *fn, *number; /* the message names the function and a number */
    sx_status want;
} size_case;

static const size_case size_cases[] = {
    {"padding 2e9 on every side", "sx_nn_padding2d", "2000000000", SX_E_SHAPE},
    {"padding INT_MAX on every side", "sx_nn_padding2d", "2147483647", SX_E_SHAPE},
    {"upsampling by 2e9 x 2e9", "sx_nn_upsampling2d", "2000000000", SX_E_SHAPE},
    {"upsampling by INT_MAX x INT_MAX", "sx_nn_upsampling2d", "2147483647", SX_E_SHAPE},
    {"conv kernel and filters INT_MAX", "sx_nn_conv2d", "2147483647", SX_E_SHAPE},
    {"conv 2^20 x 2^20 x 2^21 filters", "sx_nn_conv2d", "1048576", SX_E_SHAPE},
    {"linear of INT64_MAX units", "sx_nn_linear", "9223372036854775807", SX_E_SHAPE},
    {"fully connected of 2^61 units", "sx_nn_fully_connected", "2305843009213693952", SX_E_SHAPE},
    {"linear_nobias of 2^60 units", "sx_nn_linear_nobias", "1152921504606846976", SX_E_SHAPE},
    {"input (2^31, 2^31, 2^31)", "sx_nn_input", "2147483648", SX_E_SHAPE},
    {"reshape to (2^40, 2^40)", "sx_nn_reshape", "1099511627776", SX_E_SHAPE},
    {"concatenate 16 x 2^59 channels", "sx_nn_concatenate", "576460752303423488", SX_E_SHAPE},
    {"activation_ex leaky relu slope NaN", "sx_nn_activation_ex", "nan", SX_E_ARG},
    {"activation_ex elu alpha inf", "sx_nn_activation_ex", "inf", SX_E_ARG},
    {"batch norm eps inf", "sx_nn_batch_norm", "inf", SX_E_ARG},
    {"max pool kernel INT_MAX, stride INT_MAX, VALID", "sx_nn_max_pool2d", "2147483647",
     SX_E_SHAPE},
    {"conv 65536 x 65536 x 65536 filters (fits, but not BLAS's int)", "sx_nn_conv2d", "65536",
     SX_E_UNSUPPORTED},
};

static sx_nn_layer *size_layer(int i, sx_nn_net *net)
{
    sx_nn_layer *img = sx_nn_input(net, 3, (int64_t[]){28, 28, 1});
    sx_nn_layer *vec = sx_nn_flatten(net, img);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    switch (i) {
    case 0:
        return sx_nn_padding2d(net, img, 2000000000, 2000000000, 2000000000, 2000000000);
    case 1:
        return sx_nn_padding2d(net, img, INT_MAX, INT_MAX, INT_MAX, INT_MAX);
    case 2:
        return sx_nn_upsampling2d(net, img, 2000000000, 2000000000);
    case 3:
        return sx_nn_upsampling2d(net, img, INT_MAX, INT_MAX);
    case 4:
        return t_conv2d(net, img, INT_MAX, INT_MAX, INT_MAX, 1, SX_PAD_SAME, SX_ACT_NONE);
    case 5:
        return t_conv2d(net, img, 1 << 20, 1 << 20, 1 << 21, 1, SX_PAD_SAME, SX_ACT_NONE);
    case 6:
        return sx_nn_linear(net, vec, INT64_MAX, SX_ACT_NONE);
    case 7:
        return sx_nn_fully_connected(net, img, (int64_t)1 << 61, SX_ACT_NONE);
    case 8:
        return sx_nn_linear_nobias(net, vec, (int64_t)1 << 60, SX_ACT_NONE);
    case 9: {
        sx_nn_net *fresh = net_new(1); /* an input needs an empty network */
        sx_nn_layer *l = sx_nn_input(
            fresh, 3, (int64_t[]){(int64_t)1 << 31, (int64_t)1 << 31, (int64_t)1 << 31});
        sx_status s = sx_nn_net_status(fresh);
        net->status = s; /* reported through the test's network, with its cause */
        memcpy(net->error, fresh->error, sizeof net->error);
        sx_nn_net_free(fresh);
        return l;
    }
    case 10:
        return sx_nn_reshape(net, vec, 2, (int64_t[]){(int64_t)1 << 40, (int64_t)1 << 40});
    case 11: {
        sx_nn_net *fresh = net_new(1);
        sx_nn_layer *wide = sx_nn_input(fresh, 1, (int64_t[]){(int64_t)1 << 59});
        sx_nn_layer *in[16];
        for (int k = 0; k < 16; k++)
            in[k] = wide;
        sx_nn_layer *l = sx_nn_concatenate(fresh, 16, in);
        sx_status s = sx_nn_net_status(fresh);
        net->status = s;
        memcpy(net->error, fresh->error, sizeof net->error);
        sx_nn_net_free(fresh);
        return l;
    }
    case 12:
        return sx_nn_activation_ex(net, vec, SX_ACT_LEAKY_RELU, (double)NAN);
    case 13:
        return sx_nn_activation_ex(net, vec, SX_ACT_ELU, (double)INFINITY);
    case 14:
        return t_batch_norm(net, img, 0.9, (double)INFINITY);
    case 15:
        return t_max_pool2d(net, img, INT_MAX, INT_MAX, INT_MAX, SX_PAD_VALID);
    case 16:
        return t_conv2d(net, img, 65536, 65536, 65536, 1, SX_PAD_SAME, SX_ACT_NONE);
    }
    cr_assert_fail("no case %d", i);
    return NULL;
}

Test(nn_misuse, sizes_computed_from_user_numbers_are_checked)
{
    int n = (int)(sizeof size_cases / sizeof size_cases[0]);
    for (int i = 0; i < n; i++) {
        sx_nn_net *net = net_new(1);
        sx_error_clear();
        sx_nn_layer *l = size_layer(i, net);
        cr_assert_null(l, "%s: made a layer", size_cases[i].what);
        cr_assert_eq(sx_nn_net_status(net), size_cases[i].want, "%s: %s, want %s (%s)",
                     size_cases[i].what, sx_status_str(sx_nn_net_status(net)),
                     sx_status_str(size_cases[i].want), sx_last_error());
        cr_assert(strstr(sx_last_error(), size_cases[i].fn) != NULL &&
                      strstr(sx_last_error(), size_cases[i].number) != NULL,
                  "%s: message '%s' should name %s and %s", size_cases[i].what, sx_last_error(),
                  size_cases[i].fn, size_cases[i].number);
        sx_nn_net_free(net);
    }
}

/* Padding 2e9 + 2e9 of one axis is large but fits: the shape is exact, not wrapped around. */
Test(nn_misuse, padding_by_2e9_gives_the_exact_shape)
{
    sx_nn_net *net = net_new(1);
    sx_nn_layer *img = sx_nn_input(net, 3, (int64_t[]){28, 28, 1});
    sx_nn_layer *l = sx_nn_padding2d(net, img, 2000000000, 2000000000, 0, 0);
    cr_assert_not_null(l, "%s", sx_last_error());
    cr_assert_eq(sx_nn_layer_shape(l)[0], 4000000028);
    cr_assert_eq(sx_nn_layer_shape(l)[1], 28);
    l = sx_nn_upsampling2d(net, img, 1, 2000000000);
    cr_assert_not_null(l, "%s", sx_last_error());
    cr_assert_eq(sx_nn_layer_shape(l)[1], 56000000000);
    sx_nn_net_free(net);
}

/* Extreme kernels and strides whose results fit: exact shapes, or a clean error, and nothing
 * undefined on the way (the UBSan build checks the arithmetic of the shape code). */
Test(nn_misuse, extreme_kernels_and_strides_give_exact_shapes_or_clean_errors)
{
    for (int i = 0; i < 6; i++) {
        sx_nn_net *net = net_new(1);
        sx_nn_layer *img = sx_nn_input(net, 3, (int64_t[]){28, 28, 1}), *l = NULL;
        int64_t want[3] = {1, 1, 1};
        switch (i) {
        case 0:
            l = t_conv2d(net, img, 1, 1, 1, INT_MAX, SX_PAD_SAME, SX_ACT_NONE);
            break;
        case 1:
            l = t_conv2d(net, img, 28, 28, 1, INT_MAX, SX_PAD_VALID, SX_ACT_NONE);
            break;
        case 2:
            l = t_max_pool2d(net, img, 28, 28, INT_MAX, SX_PAD_VALID);
            break;
        case 3:
            l = t_avg_pool2d(net, img, INT_MAX, INT_MAX, INT_MAX, SX_PAD_SAME);
            break;
        case 4:
            l = t_max_pool2d(net, img, 1, 1, INT_MAX, SX_PAD_SAME);
            break;
        case 5:
            l = sx_nn_upsampling2d(net, img, 1, INT_MAX);
            want[0] = 28, want[1] = 28 * (int64_t)INT_MAX;
            break;
        }
        if (l == NULL) {
            sx_status s = sx_nn_net_status(net);
            cr_assert(s == SX_E_ARG || s == SX_E_SHAPE || s == SX_E_UNSUPPORTED, "case %d: %s: %s",
                      i, sx_status_str(s), sx_last_error());
            cr_assert(strncmp(sx_last_error(), "sx_nn_", 6) == 0, "case %d: %s", i,
                      sx_last_error());
        } else {
            for (int d = 0; d < 3; d++)
                cr_assert_eq(sx_nn_layer_shape(l)[d], want[d], "case %d, axis %d: %lld", i, d,
                             (long long)sx_nn_layer_shape(l)[d]);
        }
        sx_nn_net_free(net);
    }
}

/* Sizes that fit per example but not with the batch axis: compiling says so. */
Test(nn_misuse, a_batch_that_overflows_the_layer_sizes_is_refused)
{
    sx_nn_net *net = net_new(1);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){(int64_t)1 << 20, (int64_t)1 << 20, 1});
    x = sx_nn_global_avg_pool(net, x);
    x = sx_nn_linear(net, x, 2, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_nn_model *m = (sx_nn_model *)1;
    ASSERT_FAILS(sx_nn_compile_infer(net, (int64_t)1 << 30, &m), SX_E_SHAPE);
    cr_assert_null(m);
    assert_msg_has("sx_nn_compile_infer");
    assert_msg_has("1073741824");
    sx_nn_train_params p = sx_nn_train_params_default();
    ASSERT_FAILS(sx_nn_compile_train(net, &p, (int64_t)1 << 30, &m), SX_E_SHAPE);
    cr_assert_null(m);
    assert_msg_has("sx_nn_compile_train");
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- NULL handles */

/* Every function of sx_nn.h and sx_optim.h that takes a pointer, called with NULL ones. Each
 * call is listed under its name; the test then reads both headers and checks that no such
 * function is missing from the list. */
static const char *const null_calls[] = {
    "sx_nn_net_new",
    "sx_nn_net_free",
    "sx_nn_net_status",
    "sx_nn_net_name",
    "sx_nn_net_set_init",
    "sx_nn_net_set_input_scale",
    "sx_nn_net_input_scale",
    "sx_nn_net_set_normalization",
    "sx_nn_net_set_target_scaling",
    "sx_nn_net_set_class_names",
    "sx_nn_net_set_feature_names",
    "sx_nn_net_set_image_resize",
    "sx_nn_net_preprocess",
    "sx_nn_model_preprocess",
    "sx_nn_model_class_name",
    "sx_nn_preprocess_print",
    "sx_nn_net_param_count",
    "sx_nn_net_print",
    "sx_nn_layer_name",
    "sx_nn_layer_rank",
    "sx_nn_layer_shape",
    "sx_nn_net_layer",
    "sx_nn_layer_rename",
    "sx_nn_net_n_params",
    "sx_nn_net_param_info",
    "sx_nn_net_param_get",
    "sx_nn_net_param_set",
    "sx_nn_net_param",
    "sx_nn_share",
    "sx_nn_input",
    "sx_nn_input_add",
    "sx_nn_input_ids",
    "sx_nn_generator_new",
    "sx_nn_generator_free",
    "sx_nn_generator_vocab",
    "sx_nn_generator_batch",
    "sx_nn_generator_max_len",
    "sx_nn_generator_pos",
    "sx_nn_generator_reset",
    "sx_nn_generator_step",
    "sx_nn_generate",
    "sx_nn_sample",
    "sx_nn_conv2d",
    "sx_nn_depthwise_conv2d",
    "sx_nn_separable_conv2d",
    "sx_nn_conv1d",
    "sx_nn_max_pool2d",
    "sx_nn_avg_pool2d",
    "sx_nn_global_max_pool",
    "sx_nn_global_avg_pool",
    "sx_nn_conv_transpose2d",
    "sx_nn_adaptive_avg_pool2d",
    "sx_nn_dropout",
    "sx_nn_fully_connected",
    "sx_nn_linear",
    "sx_nn_linear_nobias",
    "sx_nn_activation",
    "sx_nn_activation_ex",
    "sx_nn_batch_norm",
    "sx_nn_flatten",
    "sx_nn_reshape",
    "sx_nn_padding2d",
    "sx_nn_upsampling2d",
    "sx_nn_lambda",
    "sx_nn_add",
    "sx_nn_mul",
    "sx_nn_max",
    "sx_nn_average",
    "sx_nn_concatenate",
    "sx_nn_compile_train",
    "sx_nn_compile_infer",
    "sx_nn_model_free",
    "sx_nn_model_report",
    "sx_nn_model_graph",
    "sx_nn_model_step",
    "sx_nn_model_predict",
    "sx_nn_model_set_sub_batch",
    "sx_nn_model_sub_batch",
    "sx_nn_predict_eager",
    "sx_nn_train",
    "sx_nn_evaluate",
    "sx_nn_fit",
    "sx_nn_evaluate_source",
    "sx_nn_history_free",
    "sx_nn_history_write_csv",
    "sx_nn_predict_source",
    "sx_nn_history_write_jsonl",
    "sx_nn_history_write_svg",
    "sx_nn_checkpoint_save",
    "sx_nn_checkpoint_load",
    "sx_nn_net_steps",
    "sx_nn_net_epochs",
    "sx_nn_net_epoch_steps",
    "sx_nn_save",
    "sx_nn_load",
    "sx_nn_model_save",
    "sx_nn_model_output_rank",
    "sx_nn_model_output_shape",
    "sx_nn_model_n_outputs",
    "sx_nn_model_output",
    "sx_nn_model_n_inputs",
    "sx_nn_model_input",
    "sx_nn_output",
    "sx_nn_model_input_rank",
    "sx_nn_model_input_shape",
    "sx_nn_model_classes",
    "sx_nn_model_input_scale",
    "sx_nn_model_dtype",
    "sx_optim_parse",
    "sx_optim_update",
    "sx_nn_act_parse",
    "sx_nn_schedule_value",
    "sx_nn_schedule_node",
    "sx_nn_prelu",
    "sx_nn_comm_set_default", /* NULL is allowed: it clears the default */
    "sx_nn_comm_of",
    "sx_nn_model_comm_bytes",
    "sx_nn_layer_norm",
    "sx_nn_group_norm",
    "sx_nn_instance_norm",
    "sx_nn_softmax",
    "sx_nn_embedding",
    "sx_nn_position_embedding",
    "sx_nn_position_embedding_max",
    "sx_nn_lstm",
    "sx_nn_gru",
    "sx_nn_attention",
    "sx_nn_log_softmax",
};

static void call_everything_with_null(void)
{
    sx_nn_net *net = NULL;
    int64_t s3[3] = {4, 4, 1};
    sx_tensor t = sx_tensor_view(SX_F32, 1, (int64_t[]){1}, (float[]){0});

    ASSERT_FAILS(sx_nn_net_new("x", SX_F32, 1, NULL), SX_E_ARG);
    sx_nn_net_free(NULL);
    ASSERT_FAILS(sx_nn_net_status(NULL), SX_E_ARG);
    cr_assert_str_eq(sx_nn_net_name(NULL), "");
    sx_nn_net_set_init(NULL, (sx_nn_init){.kind = SX_INIT_ZEROS});
    sx_nn_net_set_input_scale(NULL, 0.5);
    cr_assert_eq(sx_nn_net_input_scale(NULL), 0);
    double one = 1;
    const char *nm[1] = {"a"};
    cr_assert_eq(sx_nn_net_set_normalization(NULL, 1, &one, &one), SX_E_ARG);
    cr_assert_eq(sx_nn_net_set_target_scaling(NULL, 1, &one, &one), SX_E_ARG);
    cr_assert_eq(sx_nn_net_set_class_names(NULL, 1, nm), SX_E_ARG);
    cr_assert_eq(sx_nn_net_set_feature_names(NULL, 1, nm), SX_E_ARG);
    cr_assert_eq(sx_nn_net_set_image_resize(NULL, SX_DS_RESIZE_NEAREST), SX_E_ARG);
    cr_assert_eq(sx_nn_net_preprocess(NULL).norm_size, 0);
    cr_assert_eq(sx_nn_model_preprocess(NULL).input_scale, 0);
    cr_assert_null(sx_nn_model_class_name(NULL, 0));
    sx_nn_preprocess_print(NULL, stderr);
    cr_assert_eq(sx_nn_net_param_count(NULL), 0);
    sx_nn_net_print(NULL, stderr);
    cr_assert_str_eq(sx_nn_layer_name(NULL), "");
    cr_assert_eq(sx_nn_layer_rank(NULL), 0);
    cr_assert_null(sx_nn_layer_shape(NULL));
    cr_assert_null(sx_nn_net_layer(NULL, "dense_1"));
    ASSERT_FAILS(sx_nn_layer_rename(NULL, NULL, "a"), SX_E_ARG);
    cr_assert_eq(sx_nn_net_n_params(NULL), 0);
    ASSERT_FAILS(sx_nn_net_param_info(NULL, 0, NULL), SX_E_ARG);
    ASSERT_FAILS(sx_nn_net_param_get(NULL, "a", &t), SX_E_ARG);
    ASSERT_FAILS(sx_nn_net_param_set(NULL, "a", &t), SX_E_ARG);
    cr_assert_null(sx_nn_net_param(NULL, "a"));
    ASSERT_FAILS(sx_nn_share(NULL, "a", "b", false), SX_E_ARG);

    cr_assert_null(sx_nn_input(NULL, 3, s3));
    cr_assert_null(sx_nn_input_add(NULL, 3, s3));
    cr_assert_null(sx_nn_input_ids(NULL, 3, s3));
    sx_nn_generator *gen = (sx_nn_generator *)1;
    cr_assert_eq(sx_nn_generator_new(NULL, NULL, &gen), SX_E_ARG);
    cr_assert_null(gen);
    sx_nn_generator_free(NULL);
    cr_assert_eq(sx_nn_generator_vocab(NULL) + sx_nn_generator_batch(NULL) +
                     sx_nn_generator_max_len(NULL) + sx_nn_generator_pos(NULL),
                 0);
    sx_nn_generator_reset(NULL);
    int32_t tok[1] = {0};
    cr_assert_eq(sx_nn_generator_step(NULL, tok, NULL), SX_E_ARG);
    cr_assert_eq(sx_nn_generate(NULL, tok, 1, 1, NULL, tok), SX_E_ARG);
    cr_assert_eq(sx_nn_sample(NULL, NULL, NULL, tok), SX_E_ARG);
    cr_assert_null(sx_nn_conv2d(NULL, NULL, NULL));
    cr_assert_null(sx_nn_depthwise_conv2d(NULL, NULL, NULL));
    cr_assert_null(sx_nn_separable_conv2d(NULL, NULL, NULL));
    cr_assert_null(sx_nn_conv1d(NULL, NULL, NULL));
    cr_assert_null(sx_nn_max_pool2d(NULL, NULL, NULL));
    cr_assert_null(sx_nn_avg_pool2d(NULL, NULL, NULL));
    cr_assert_null(sx_nn_global_max_pool(NULL, NULL));
    cr_assert_null(sx_nn_global_avg_pool(NULL, NULL));
    cr_assert_null(sx_nn_conv_transpose2d(NULL, NULL, NULL));
    cr_assert_null(sx_nn_adaptive_avg_pool2d(NULL, NULL, 2, 2));
    cr_assert_null(sx_nn_dropout(NULL, NULL, 0.1));
    cr_assert_null(sx_nn_fully_connected(NULL, NULL, 3, SX_ACT_NONE));
    cr_assert_null(sx_nn_linear(NULL, NULL, 3, SX_ACT_NONE));
    cr_assert_null(sx_nn_linear_nobias(NULL, NULL, 3, SX_ACT_NONE));
    cr_assert_null(sx_nn_activation(NULL, NULL, SX_ACT_RELU));
    cr_assert_null(sx_nn_activation_ex(NULL, NULL, SX_ACT_RELU, 0));
    cr_assert_null(sx_nn_batch_norm(NULL, NULL, NULL));
    cr_assert_null(sx_nn_flatten(NULL, NULL));
    cr_assert_null(sx_nn_reshape(NULL, NULL, 1, s3));
    cr_assert_null(sx_nn_padding2d(NULL, NULL, 1, 1, 1, 1));
    cr_assert_null(sx_nn_upsampling2d(NULL, NULL, 2, 2));
    cr_assert_null(sx_nn_lambda(NULL, NULL, NULL, NULL, NULL));
    cr_assert_null(sx_nn_add(NULL, 2, NULL));
    cr_assert_null(sx_nn_mul(NULL, 2, NULL));
    cr_assert_null(sx_nn_max(NULL, 2, NULL));
    cr_assert_null(sx_nn_average(NULL, 2, NULL));
    cr_assert_null(sx_nn_concatenate(NULL, 2, NULL));

    /* the same constructors on a real network with NULL inputs and arrays */
    cr_assert_eq(sx_nn_net_new(NULL, SX_F32, 1, &net), SX_OK);
    cr_assert_null(sx_nn_input(net, 3, NULL));
    ASSERT_FAILS(sx_nn_net_status(net), SX_E_ARG);
    sx_nn_net_free(net);
    cr_assert_eq(sx_nn_net_new(NULL, SX_F32, 1, &net), SX_OK);
    sx_nn_layer *in = sx_nn_input(net, 3, s3);
    cr_assert_not_null(in);
    cr_assert_null(sx_nn_reshape(net, in, 1, NULL));
    cr_assert_null(sx_nn_add(net, 2, NULL));
    cr_assert_null(sx_nn_lambda(net, in, NULL, NULL, NULL));
    sx_nn_net_free(net);

    sx_nn_model *m = (sx_nn_model *)1;
    ASSERT_FAILS(sx_nn_compile_train(NULL, NULL, 1, &m), SX_E_ARG);
    cr_assert_null(m);
    ASSERT_FAILS(sx_nn_compile_train(NULL, NULL, 1, NULL), SX_E_ARG);
    m = (sx_nn_model *)1;
    ASSERT_FAILS(sx_nn_compile_infer(NULL, 1, &m), SX_E_ARG);
    cr_assert_null(m);
    ASSERT_FAILS(sx_nn_compile_infer(NULL, 1, NULL), SX_E_ARG);
    sx_nn_model_free(NULL);
    sx_nn_compile_report r = sx_nn_model_report(NULL);
    cr_assert_eq(r.nodes_before, 0);
    cr_assert_eq(r.planned_bytes, 0);
    cr_assert_null(sx_nn_model_graph(NULL));
    ASSERT_FAILS(sx_nn_model_step(NULL, &t, &t, 0.1, 1, NULL, NULL), SX_E_ARG);
    ASSERT_FAILS(sx_nn_model_step(NULL, NULL, NULL, 0.1, 1, NULL, NULL), SX_E_ARG);
    ASSERT_FAILS(sx_nn_model_predict(NULL, &t, &t), SX_E_ARG);
    ASSERT_FAILS(sx_nn_model_predict(NULL, NULL, NULL), SX_E_ARG);
    ASSERT_FAILS(sx_nn_model_set_sub_batch(NULL, 8), SX_E_ARG);
    cr_assert_eq(sx_nn_model_sub_batch(NULL), 0);
    ASSERT_FAILS(sx_nn_predict_eager(NULL, &t, &t), SX_E_ARG);
    ASSERT_FAILS(sx_nn_predict_eager(NULL, NULL, NULL), SX_E_ARG);
    sx_nn_comm_set_default(NULL); /* clears the default */
    cr_assert_null(sx_nn_comm_default());
    cr_assert_null(sx_nn_comm_of(NULL));
    cr_assert_eq(sx_nn_model_comm_bytes(NULL), 0);
    sx_ds_images d = {0};
    ASSERT_FAILS(sx_nn_train(NULL, NULL, NULL, NULL, NULL), SX_E_ARG);
    ASSERT_FAILS(sx_nn_train(NULL, NULL, &d, NULL, NULL), SX_E_ARG);
    double acc = -1;
    ASSERT_FAILS(sx_nn_evaluate(NULL, NULL, 1, NULL), SX_E_ARG);
    ASSERT_FAILS(sx_nn_evaluate(NULL, &d, 1, &acc), SX_E_ARG);
    sx_nn_history hist;
    double loss = -1;
    ASSERT_FAILS(sx_nn_fit(NULL, NULL, NULL, NULL, NULL), SX_E_ARG);
    ASSERT_FAILS(sx_nn_fit(NULL, NULL, NULL, NULL, &hist), SX_E_ARG);
    cr_assert_eq(hist.n, 0);
    ASSERT_FAILS(sx_nn_evaluate_source(NULL, NULL, NULL, &loss, &acc), SX_E_ARG);
    sx_nn_history_free(NULL);
    ASSERT_FAILS(sx_nn_history_write_csv(NULL, "/tmp/x.csv"), SX_E_ARG);
    ASSERT_FAILS(sx_nn_history_write_csv(&hist, NULL), SX_E_ARG);
    ASSERT_FAILS(sx_nn_history_write_jsonl(NULL, "/tmp/x.jsonl"), SX_E_ARG);
    ASSERT_FAILS(sx_nn_history_write_svg(NULL, "/tmp/x.svg", NULL), SX_E_ARG);
    ASSERT_FAILS(sx_nn_history_write_svg(&hist, NULL, NULL), SX_E_ARG);
    sx_tensor *pred = (sx_tensor *)1;
    ASSERT_FAILS(sx_nn_predict_source(NULL, NULL, NULL, &pred), SX_E_ARG);
    cr_assert_null(pred);
    ASSERT_FAILS(sx_nn_predict_source(NULL, NULL, NULL, NULL), SX_E_ARG);
    ASSERT_FAILS(sx_nn_checkpoint_save(NULL, NULL, NULL), SX_E_ARG);
    ASSERT_FAILS(sx_nn_checkpoint_load(NULL, NULL, NULL), SX_E_ARG);
    cr_assert_eq(sx_nn_net_steps(NULL), -1);
    cr_assert_eq(sx_nn_net_epochs(NULL), -1);
    cr_assert_eq(sx_nn_net_epoch_steps(NULL), -1);
    ASSERT_FAILS(sx_nn_save(NULL, NULL), SX_E_ARG);
    ASSERT_FAILS(sx_nn_save(NULL, "/nonexistent/x"), SX_E_ARG);
    sx_nn_model *ld = (sx_nn_model *)1;
    ASSERT_FAILS(sx_nn_load(NULL, 1, &ld), SX_E_ARG);
    cr_assert_null(ld);
    ASSERT_FAILS(sx_nn_load("x", 1, NULL), SX_E_ARG);
    ASSERT_FAILS(sx_nn_model_save(NULL, "/nonexistent/x"), SX_E_ARG);
    sx_nn_model_free(NULL);
    cr_assert_eq(sx_nn_model_output_rank(NULL), 0);
    cr_assert_null(sx_nn_model_output_shape(NULL));
    cr_assert_eq(sx_nn_model_n_outputs(NULL), 0);
    cr_assert_null(sx_nn_model_output(NULL, 0, NULL, NULL));
    cr_assert_eq(sx_nn_model_n_inputs(NULL), 0);
    cr_assert_null(sx_nn_model_input(NULL, 0, NULL));
    cr_assert_null(sx_nn_output(NULL, NULL, NULL));
    cr_assert_eq(sx_nn_model_input_rank(NULL), 0);
    cr_assert_null(sx_nn_model_input_shape(NULL));
    cr_assert_eq(sx_nn_model_classes(NULL), 0);
    cr_assert_eq(sx_nn_model_input_scale(NULL), 0);
    cr_assert_str_eq(sx_dtype_name(sx_nn_model_dtype(NULL)), "bad-dtype");
    ASSERT_FAILS(sx_nn_model_predict(NULL, &t, &t), SX_E_ARG);
    ASSERT_FAILS(sx_nn_model_predict(NULL, NULL, NULL), SX_E_ARG);

    /* the datasets accessors follow the same rule (their header states each value) */
    cr_assert_not(sx_ds_images_compacted(NULL));
    cr_assert_eq(sx_ds_images_bytes(NULL), 0);
    cr_assert_eq(sx_ds_batcher_epoch(NULL), -1);
    cr_assert_eq(sx_ds_batcher_batches(NULL), -1);
    sx_ds_images_free(NULL);
    sx_ds_batcher_free(NULL);
    sx_ds_idx_free(NULL);

    sx_optim_kind k = SX_OPTIM_ADAM;
    ASSERT_FAILS(sx_optim_parse(NULL, &k), SX_E_ARG);
    cr_assert_eq(k, SX_OPTIM_ADAM);
    ASSERT_FAILS(sx_optim_parse("sgd", NULL), SX_E_ARG);
    sx_cg_node *ups[3];
    int nu = -1;
    sx_optim_params op = sx_optim_params_default(SX_OPTIM_SGD);
    ASSERT_FAILS(sx_optim_update(NULL, &op, NULL, NULL, NULL, NULL, NULL, ups, &nu), SX_E_ARG);
    ASSERT_FAILS(sx_optim_update(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), SX_E_ARG);

    /* activations, schedules, PReLU, normalisation, softmax and sequence layers */
    sx_nn_act act = SX_ACT_RELU;
    ASSERT_FAILS(sx_nn_act_parse(NULL, &act), SX_E_ARG);
    cr_assert_eq(act, SX_ACT_RELU);
    ASSERT_FAILS(sx_nn_act_parse("gelu", NULL), SX_E_ARG);
    cr_assert_eq(sx_nn_schedule_value(NULL, 0.25, 3), 0.25);
    cr_assert_null(sx_nn_schedule_node(NULL, NULL, NULL, NULL));
    cr_assert_null(sx_nn_prelu(NULL, NULL, 0.25));
    cr_assert_null(sx_nn_layer_norm(NULL, NULL, NULL));
    cr_assert_null(sx_nn_group_norm(NULL, NULL, NULL));
    cr_assert_null(sx_nn_instance_norm(NULL, NULL, NULL));
    cr_assert_null(sx_nn_softmax(NULL, NULL, -1));
    cr_assert_null(sx_nn_embedding(NULL, NULL, NULL));
    cr_assert_null(sx_nn_position_embedding(NULL, NULL));
    cr_assert_null(sx_nn_position_embedding_max(NULL, NULL, 4));
    cr_assert_null(sx_nn_lstm(NULL, NULL, NULL));
    cr_assert_null(sx_nn_gru(NULL, NULL, NULL));
    cr_assert_null(sx_nn_attention(NULL, NULL, NULL));
    cr_assert_null(sx_nn_log_softmax(NULL, NULL, 0));
}

/* The names of the functions declared in a header that take at least one pointer. */
static int pointer_functions(const char *path, char names[][64], int cap)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    static char text[1 << 18];
    size_t len = fread(text, 1, sizeof text - 1, f);
    cr_assert(feof(f), "%s is larger than this test's buffer (%zu bytes)", path, sizeof text - 1);
    fclose(f);
    text[len] = '\0';
    /* comments out */
    for (char *c = text; (c = strstr(c, "/*")) != NULL;) {
        char *e = strstr(c + 2, "*/");
        cr_assert_not_null(e);
        memset(c, ' ', (size_t)(e + 2 - c));
    }
    for (char *c = text; (c = strstr(c, "//")) != NULL;)
        for (; *c != '\0' && *c != '\n'; c++)
            *c = ' ';
    int n = 0;
    for (char *c = text; (c = strstr(c, "sx_")) != NULL; c++) {
        if (c > text && (c[-1] == '_' || (c[-1] >= 'a' && c[-1] <= 'z')))
            continue;
        if (strncmp(c, "sx_nn_", 6) != 0 && strncmp(c, "sx_optim_", 9) != 0)
            continue;
        size_t k = strspn(c, "abcdefghijklmnopqrstuvwxyz0123456789_");
        const char *p = c + k;
        while (*p == ' ')
            p++;
        if (*p != '(' || k >= 64)
            continue; /* a type, not a declaration */
        const char *close = strchr(p, ')');
        cr_assert_not_null(close);
        bool pointer = memchr(p, '*', (size_t)(close - p)) != NULL;
        if (pointer) {
            cr_assert_lt(n, cap);
            memcpy(names[n], c, k);
            names[n][k] = '\0';
            n++;
        }
    }
    return n;
}

Test(nn_misuse, every_accessor_and_function_accepts_null_handles)
{
    call_everything_with_null();

    /* the list above covers every function of the two headers that takes a pointer */
    char root[1024], file[1024], path[1100];
    snprintf(file, sizeof file, "%s", __FILE__); /* tests/nn/test_misuse.c */
    snprintf(root, sizeof root, "%s", dirname(dirname(dirname(file))));
    const char *headers[2] = {"include/strix/sx_nn.h", "include/strix/sx_optim.h"};
    int total = 0;
    for (int h = 0; h < 2; h++) {
        static char names[256][64];
        snprintf(path, sizeof path, "%s/%s", root, headers[h]);
        int n = pointer_functions(path, names, 256);
        cr_assert_gt(n, h == 0 ? 40 : 1, "%s: only %d functions found", path, n);
        for (int i = 0; i < n; i++) {
            bool listed = false;
            for (size_t j = 0; j < sizeof null_calls / sizeof null_calls[0] && !listed; j++)
                listed = strcmp(null_calls[j], names[i]) == 0;
            cr_assert(listed, "%s (%s) takes a pointer but is not called with NULL here", names[i],
                      headers[h]);
        }
        total += n;
    }
    cr_assert_eq(total, (int)(sizeof null_calls / sizeof null_calls[0]),
                 "the list names a function the headers do not declare");
}

/* ---------------------------------------------------------------- silent problems */

/* A run of one epoch over d with checkpoints every `every` steps at ckpt. */
static void train_with_checkpoints(const sx_ds_images *d, const char *ckpt, sx_optim_kind kind,
                                   int batch, int64_t every)
{
    unlink(ckpt); /* a new run, not a resumed one */
    sx_nn_net *a = small_net(7);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.verbose = 0;
    p.batch = batch;
    p.optim = sx_optim_params_default(kind);
    p.checkpoint_path = ckpt;
    p.checkpoint_every = every;
    cr_assert_eq(sx_nn_train(a, &p, d, NULL, NULL), SX_OK, "%s", sx_last_error());
    sx_nn_net_free(a);
}

/* sx_nn_train(p) on a new network resuming from ckpt fails with `want` and changes nothing. */
static void resume_refused(const sx_ds_images *d, const char *ckpt, const sx_nn_train_params *p,
                           sx_status want)
{
    sx_nn_net *b = small_net(7);
    int64_t n0, n1;
    double *w0 = snapshot(b, &n0);
    sx_nn_train_report rep;
    sx_status s = sx_nn_train(b, p, d, NULL, &rep);
    cr_assert_eq(s, want, "resumed: %s (%s), %lld steps", sx_status_str(s), sx_last_error(),
                 (long long)rep.steps);
    assert_msg_has(ckpt);
    double *w1 = snapshot(b, &n1);
    cr_assert_eq(memcmp(w0, w1, (size_t)n0 * sizeof *w0), 0, "the weights changed");
    cr_assert_eq(b->step, 0);
    cr_assert_eq(b->epoch, 0);
    for (int i = 0; i < b->n_layers; i++)
        for (int k = 0; k < b->layers[i]->n_params; k++)
            cr_assert_null(b->layers[i]->params[k].state[0], "optimiser state made");
    free(w0);
    free(w1);
    sx_nn_net_free(b);
}

Test(nn_misuse, a_mid_epoch_checkpoint_does_not_resume_with_another_batch_size, .init = make_tmpdir,
     .fini = remove_tmpdir, .timeout = 60)
{
    sx_ds_images d = images(50, 11);
    char ckpt[128];
    snprintf(ckpt, sizeof ckpt, "%s/mid.ckpt", tmpdir);
    /* batch 10, checkpoints after steps 2 and 4: the last one 40 images into the epoch */
    train_with_checkpoints(&d, ckpt, SX_OPTIM_ADAGRAD, 10, 2);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.verbose = 0;
    p.epochs = 2;
    p.checkpoint_path = ckpt;
    p.batch = 5; /* 4 steps of 5 would skip 20 images, not 40 */
    resume_refused(&d, ckpt, &p, SX_E_STATE);
    assert_msg_has("batch");
    assert_msg_has("10");
    /* with its own batch size it resumes: the 5th step of the epoch is the first one trained */
    p.batch = 10;
    sx_nn_net *b = small_net(7);
    sx_nn_train_report rep;
    cr_assert_eq(sx_nn_train(b, &p, &d, NULL, &rep), SX_OK, "%s", sx_last_error());
    cr_assert_eq(rep.steps, 1 + 5);
    sx_nn_net_free(b);

    /* at an epoch's end, any batch size continues */
    train_with_checkpoints(&d, ckpt, SX_OPTIM_ADAGRAD, 10, 0);
    b = small_net(7);
    p.batch = 25;
    cr_assert_eq(sx_nn_train(b, &p, &d, NULL, &rep), SX_OK, "%s", sx_last_error());
    cr_assert_eq(rep.steps, 2);
    cr_assert_eq(b->epoch, 2);
    sx_nn_net_free(b);
    images_free(&d);
}

Test(nn_misuse, a_checkpoint_does_not_resume_with_another_optimiser, .init = make_tmpdir,
     .fini = remove_tmpdir, .timeout = 60)
{
    sx_ds_images d = images(20, 12);
    char ckpt[128];
    snprintf(ckpt, sizeof ckpt, "%s/adam.ckpt", tmpdir);
    train_with_checkpoints(&d, ckpt, SX_OPTIM_ADAM, 10, 0);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.verbose = 0;
    p.epochs = 2;
    p.batch = 10;
    p.checkpoint_path = ckpt;
    /* Adam into SGD, and into every other kind */
    for (int k = 0; k < SX_OPTIM_COUNT; k++) {
        if (k == SX_OPTIM_ADAM)
            continue;
        p.optim = sx_optim_params_default((sx_optim_kind)k);
        resume_refused(&d, ckpt, &p, SX_E_STATE);
        assert_msg_has("adam");
        assert_msg_has(sx_optim_name((sx_optim_kind)k));
    }
    /* Adam with other moments' decay: the state means something else */
    p.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.optim.beta2 = 0.99;
    resume_refused(&d, ckpt, &p, SX_E_STATE);
    assert_msg_has("beta2");
    assert_msg_has("0.999");
    /* the same optimiser with another learning rate resumes (a new rate is a choice) */
    p.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.optim.lr = 0.0005;
    sx_nn_net *b = small_net(7);
    sx_nn_train_report rep;
    cr_assert_eq(sx_nn_train(b, &p, &d, NULL, &rep), SX_OK, "%s", sx_last_error());
    cr_assert_eq(rep.steps, 2);
    sx_nn_net_free(b);

    /* SGD keeps no state, yet its checkpoint does not resume into Adam either */
    snprintf(ckpt, sizeof ckpt, "%s/sgd.ckpt", tmpdir);
    p.checkpoint_path = ckpt;
    train_with_checkpoints(&d, ckpt, SX_OPTIM_SGD, 10, 0);
    p.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    resume_refused(&d, ckpt, &p, SX_E_STATE);
    assert_msg_has("sgd");
    assert_msg_has("adam");
    images_free(&d);
}

Test(nn_misuse, loaded_predict_refuses_an_output_of_the_wrong_shape, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    char path[128];
    snprintf(path, sizeof path, "%s/m.sxm", tmpdir);
    sx_nn_net *net = small_net(3);
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(path, 4, &m), SX_OK, "%s", sx_last_error());
    sx_rng r;
    sx_rng_seed(&r, 8);
    sx_tensor *x = tu_rand(&r, SX_F32, 4, (int64_t[]){4, 6, 6, 1}, 0, 1);
    /* 12 elements as the (4,3) result, in another shape */
    const int64_t shapes[3][2] = {{3, 4}, {12, 1}, {2, 6}};
    for (int i = 0; i < 3; i++) {
        sx_tensor *out = tu_zeros(SX_F32, 2, shapes[i]);
        cr_assert_eq(sx_nn_model_predict(m, x, out), SX_E_SHAPE, "(%lld,%lld) accepted",
                     (long long)shapes[i][0], (long long)shapes[i][1]);
        assert_msg_has("(4,3)");
        char s[64];
        snprintf(s, sizeof s, "(%lld,%lld)", (long long)shapes[i][0], (long long)shapes[i][1]);
        assert_msg_has(s);
        for (int64_t e = 0; e < out->size; e++)
            cr_assert_eq(sx_tensor_get(out, e), 0, "out written");
        sx_tensor_free(out);
    }
    sx_tensor *flat = tu_zeros(SX_F32, 1, (int64_t[]){12});
    ASSERT_FAILS(sx_nn_model_predict(m, x, flat), SX_E_SHAPE);
    sx_tensor *f64 = tu_zeros(SX_F64, 2, (int64_t[]){4, 3});
    ASSERT_FAILS(sx_nn_model_predict(m, x, f64), SX_E_DTYPE);
    sx_tensor *ok = tu_zeros(SX_F32, 2, (int64_t[]){4, 3});
    cr_assert_eq(sx_nn_model_predict(m, x, ok), SX_OK, "%s", sx_last_error());
    sx_tensor_free(flat);
    sx_tensor_free(f64);
    sx_tensor_free(ok);
    sx_tensor_free(x);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
}

/* Run fn in a child process killed (SIGXFSZ) once it has written `limit` bytes to a file. */
static void killed_while_writing(void (*fn)(void *), void *ctx, rlim_t limit)
{
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        struct rlimit fs = {limit, limit}, core = {0, 0};
        setrlimit(RLIMIT_CORE, &core);
        setrlimit(RLIMIT_FSIZE, &fs);
        signal(SIGXFSZ, SIG_DFL);
        fn(ctx);
        _exit(0); /* not reached: the write is killed */
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ, "the writer was not killed");
}

typedef struct big_net {
    sx_nn_net *net;
    const char *path;
    const sx_ds_images *d;
} big_net;

static void save_it(void *ctx)
{
    big_net *b = ctx;
    sx_status s = sx_nn_save(b->net, b->path);
    (void)s;
}

static void train_it(void *ctx)
{
    big_net *b = ctx;
    sx_nn_train_params p = sx_nn_train_params_default();
    p.verbose = 0;
    p.batch = 10;
    p.checkpoint_path = b->path;
    sx_status s = sx_nn_train(b->net, &p, b->d, NULL, NULL);
    (void)s;
}

Test(nn_misuse, a_temporary_file_left_by_a_killed_writer_is_removed_by_the_next_write,
     .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 60)
{
    /* a model of about 1 MB, its writer killed after 64 KB */
    sx_nn_net *net = net_new(5);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){6, 6, 1});
    x = sx_nn_fully_connected(net, x, 4096, SX_ACT_RELU);
    x = sx_nn_linear(net, x, 3, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    char path[128];
    snprintf(path, sizeof path, "%s/big.sxm", tmpdir);
    big_net b = {net, path, NULL};
    killed_while_writing(save_it, &b, 65536);
    cr_assert_eq(access(path, F_OK), -1, "the killed write made the file");
    cr_assert_eq(dir_entries(tmpdir), 1, "no temporary file left to clean");
    /* the next write of the same path removes it */
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    cr_assert_eq(dir_entries(tmpdir), 1, "the stale temporary file is still there");
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(path, 1, &m), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m);
    /* a killed checkpoint writer too, then a training run that writes the same checkpoint */
    sx_ds_images d = images(20, 13);
    char ckpt[128];
    snprintf(ckpt, sizeof ckpt, "%s/run.ckpt", tmpdir);
    big_net c = {net, ckpt, &d};
    killed_while_writing(train_it, &c, 65536);
    cr_assert_eq(access(ckpt, F_OK), -1);
    cr_assert_eq(dir_entries(tmpdir), 2);
    train_it(&c);
    cr_assert_eq(access(ckpt, F_OK), 0, "%s", sx_last_error());
    cr_assert_eq(dir_entries(tmpdir), 2, "the stale temporary checkpoint is still there");
    images_free(&d);
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- out of memory */

static sx_cg_node *halve(sx_cg_graph *g, sx_cg_node *x, void *ctx)
{
    (void)ctx;
    return sx_cg_mul_scalar(g, x, 0.5);
}

/* Every layer kind; NULL-tolerant (builds under a failing allocator). */
static sx_status every_layer(sx_nn_net *net)
{
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){6, 6, 2});
    x = sx_nn_lambda(net, x, halve, NULL, "halve");
    x = t_conv2d(net, x, 3, 3, 4, 1, SX_PAD_SAME, SX_ACT_RELU);
    x = t_batch_norm(net, x, 0.9, 1e-3);
    sx_nn_layer *p = t_max_pool2d(net, x, 2, 2, 2, SX_PAD_VALID);
    sx_nn_layer *q = t_avg_pool2d(net, x, 2, 2, 2, SX_PAD_VALID);
    sx_nn_layer *pq[2] = {p, q};
    x = sx_nn_add(net, 2, pq);
    x = sx_nn_padding2d(net, x, 1, 0, 0, 1);
    x = sx_nn_upsampling2d(net, x, 2, 1);
    sx_nn_layer *g1 = sx_nn_global_max_pool(net, x), *g2 = sx_nn_global_avg_pool(net, x);
    sx_nn_layer *gs[2] = {g1, g2};
    sx_nn_layer *c = sx_nn_concatenate(net, 2, gs);
    sx_nn_layer *m = sx_nn_mul(net, 2, gs), *mx = sx_nn_max(net, 2, gs);
    sx_nn_layer *mm[2] = {m, mx};
    sx_nn_layer *av = sx_nn_average(net, 2, mm);
    sx_nn_layer *f = sx_nn_fully_connected(net, x, 8, SX_ACT_TANH);
    f = sx_nn_dropout(net, f, 0.25);
    sx_nn_layer *all[3] = {f, sx_nn_linear_nobias(net, c, 8, SX_ACT_NONE),
                           sx_nn_linear(net, av, 8, SX_ACT_NONE)};
    x = sx_nn_concatenate(net, 3, all);
    x = sx_nn_activation_ex(net, x, SX_ACT_LEAKY_RELU, 0.1);
    x = sx_nn_reshape(net, x, 2, (int64_t[]){4, 6});
    x = sx_nn_flatten(net, x);
    x = sx_nn_activation(net, x, SX_ACT_NONE);
    x = sx_nn_linear(net, x, 3, SX_ACT_SOFTMAX);
    return sx_nn_net_status(net);
}

Test(nn_misuse, an_allocation_failure_while_building_layers_is_nomem, .timeout = 120)
{
    for (long k = 0;; k++) {
        sx_nn_net *net = NULL;
        tu_fail_after(k);
        sx_nn_model *m = NULL;
        sx_error_clear();
        sx_status s = sx_nn_net_new("oom", SX_F32, 1, &net);
        if (s == SX_OK)
            s = every_layer(net);
        /* and building the layers' graph nodes: dropout masks, batch-norm updates */
        if (s == SX_OK)
            s = sx_nn_compile_train(net, NULL, 2, &m);
        sx_nn_model_free(m);
        sx_nn_net_free(net);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(live, 0, "k=%ld leaked %ld allocations", k, live);
        if (s == SX_OK)
            break;
        cr_assert_eq(s, SX_E_NOMEM, "k=%ld: %s: %s", k, sx_status_str(s), sx_last_error());
        cr_assert(sx_last_error()[0] != '\0', "k=%ld: out of memory without a message", k);
        cr_assert_lt(k, 20000);
    }
}

/* A network that refused a layer says why in every later error: which layer, and the first
 * message, kept in the network (later layers on the NULL it returned add nothing). */
Test(nn_misuse, a_refused_layer_is_named_in_every_later_error)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("mlp", SX_F32, 1, &net), SX_OK, "%s", sx_last_error());
    sx_nn_layer *x = sx_nn_input(net, 1, (int64_t[]){4});
    x = sx_nn_linear(net, x, 8, SX_ACT_RELU);
    x = sx_nn_linear(net, x, 8, SX_ACT_RELU);
    sx_error_clear();
    sx_nn_layer *bad = sx_nn_linear(net, x, 0, SX_ACT_NONE); /* dense_3: 0 units */
    cr_assert_null(bad);
    char first[512];
    snprintf(first, sizeof first, "%s", sx_last_error());
    cr_assert(strstr(first, "sx_nn_linear") != NULL && strstr(first, "0 units") != NULL, "%s",
              first);
    cr_assert_null(sx_nn_linear(net, bad, 2, SX_ACT_SOFTMAX));
    cr_assert_null(sx_nn_dropout(net, x, 2.0)); /* a second refusal: the first cause stays */

    char want[1024];
    snprintf(want, sizeof want, "network 'mlp': layer 'dense_3' refused: %s", first);
    ASSERT_FAILS(sx_nn_net_status(net), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), want) != NULL, "%s\nwant: %s", sx_last_error(), want);
    cr_assert_eq(strncmp(sx_last_error(), "sx_nn_net_status: ", 18), 0, "%s", sx_last_error());

    sx_nn_model *m = NULL;
    ASSERT_FAILS(sx_nn_compile_infer(net, 2, &m), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), want) != NULL, "%s", sx_last_error());
    cr_assert_eq(strncmp(sx_last_error(), "sx_nn_compile_infer: ", 21), 0, "%s", sx_last_error());
    sx_nn_train_params tp = sx_nn_train_params_default();
    ASSERT_FAILS(sx_nn_compile_train(net, &tp, 2, &m), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), want) != NULL, "%s", sx_last_error());

    make_tmpdir();
    char path[128];
    snprintf(path, sizeof path, "%s/mlp.sxm", tmpdir);
    ASSERT_FAILS(sx_nn_save(net, path), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), want) != NULL, "%s", sx_last_error());
    remove_tmpdir();

    sx_tensor *xs = tu_zeros(SX_F32, 2, (int64_t[]){4, 4}),
              *ys = tu_zeros(SX_F32, 2, (int64_t[]){4, 8});
    sx_ds_source *src = NULL;
    cr_assert_eq(sx_ds_source_tensors(xs, ys, 0, &src), SX_OK, "%s", sx_last_error());
    sx_nn_fit_params fp = sx_nn_fit_params_default();
    fp.train.verbose = 0;
    ASSERT_FAILS(sx_nn_fit(net, &fp, src, NULL, NULL), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), want) != NULL, "%s", sx_last_error());
    sx_ds_source_free(src);
    sx_tensor_free(xs);
    sx_tensor_free(ys);
    sx_nn_net_free(net);
}
