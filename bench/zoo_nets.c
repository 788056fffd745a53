/* zoo_nets.c: the CNN zoo's networks and runs (see zoo_nets.h). */
#include "zoo_nets.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- layers */

/* A convolution with PyTorch's explicit padding (ph rows top and bottom, pw columns left and
 * right), no bias unless asked. */
static sx_nn_layer *conv(sx_nn_net *net, sx_nn_layer *x, int filters, int kh, int kw, int stride,
                         int ph, int pw, bool bias, sx_nn_act act)
{
    sx_nn_conv2d_params p = sx_nn_conv2d_params_default(filters, kh, kw);
    p.conv.stride_h = p.conv.stride_w = stride;
    p.conv.padding = SX_PAD_EXPLICIT;
    p.conv.pad_top = p.conv.pad_bottom = ph;
    p.conv.pad_left = p.conv.pad_right = pw;
    p.bias = bias;
    p.act = act;
    return sx_nn_conv2d(net, x, &p);
}

static sx_nn_layer *bn(sx_nn_net *net, sx_nn_layer *x, double eps, bool relu)
{
    sx_nn_batch_norm_params p = sx_nn_batch_norm_params_default();
    p.momentum = 0.9; /* PyTorch's 0.1 */
    p.eps = eps;
    x = sx_nn_batch_norm(net, x, &p);
    return relu ? sx_nn_activation(net, x, SX_ACT_RELU) : x;
}

/* conv (no bias) + batch norm (+ relu): PyTorch's Conv2d(bias=False), BatchNorm2d, ReLU */
static sx_nn_layer *cbr(sx_nn_net *net, sx_nn_layer *x, int filters, int kh, int kw, int stride,
                        int ph, int pw, double eps, bool relu)
{
    return bn(net, conv(net, x, filters, kh, kw, stride, ph, pw, false, SX_ACT_NONE), eps, relu);
}

static sx_nn_layer *pool(sx_nn_net *net, sx_nn_layer *x, bool max, int k, int stride, int pad)
{
    sx_nn_pool2d_params p = sx_nn_pool2d_params_default(k, k);
    p.pool.stride_h = p.pool.stride_w = stride;
    if (pad > 0) {
        p.pool.padding = SX_PAD_EXPLICIT;
        p.pool.pad_top = p.pool.pad_bottom = p.pool.pad_left = p.pool.pad_right = pad;
        p.pool.count_include_pad = 1; /* PyTorch's avg_pool2d default */
    }
    return max ? sx_nn_max_pool2d(net, x, &p) : sx_nn_avg_pool2d(net, x, &p);
}

static sx_nn_layer *add_relu(sx_nn_net *net, sx_nn_layer *a, sx_nn_layer *b)
{
    sx_nn_layer *in[2] = {a, b};
    return sx_nn_activation(net, sx_nn_add(net, 2, in), SX_ACT_RELU);
}

static sx_nn_layer *cat(sx_nn_net *net, int n, sx_nn_layer *const *in)
{
    return sx_nn_concatenate(net, n, in);
}

/* ---------------------------------------------------------------- small nets (28x28x1) */

static sx_nn_layer *lenet5(sx_nn_net *net, sx_nn_layer *x)
{
    x = conv(net, x, 6, 5, 5, 1, 2, 2, true, SX_ACT_RELU);
    x = pool(net, x, true, 2, 2, 0);
    x = conv(net, x, 16, 5, 5, 1, 0, 0, true, SX_ACT_RELU);
    x = pool(net, x, true, 2, 2, 0);
    x = sx_nn_fully_connected(net, x, 120, SX_ACT_RELU);
    return sx_nn_fully_connected(net, x, 84, SX_ACT_RELU);
}

/* He et al.'s basic block: relu(bn(conv3x3(relu(bn(conv3x3 s(x))))) + shortcut(x)) */
static sx_nn_layer *basic_block(sx_nn_net *net, sx_nn_layer *x, int filters, int stride)
{
    sx_nn_layer *a = cbr(net, x, filters, 3, 3, stride, 1, 1, 1e-5, true);
    a = cbr(net, a, filters, 3, 3, 1, 1, 1, 1e-5, false);
    bool project = stride != 1 || sx_nn_layer_shape(x)[2] != filters;
    sx_nn_layer *s = project ? cbr(net, x, filters, 1, 1, stride, 0, 0, 1e-5, false) : x;
    return add_relu(net, a, s);
}

static sx_nn_layer *resnet20(sx_nn_net *net, sx_nn_layer *x)
{
    x = cbr(net, x, 16, 3, 3, 1, 1, 1, 1e-5, true);
    for (int stage = 0; stage < 3; stage++)
        for (int b = 0; b < 3; b++)
            x = basic_block(net, x, 16 << stage, stage > 0 && b == 0 ? 2 : 1);
    return sx_nn_global_avg_pool(net, x);
}

static sx_nn_layer *vgg_bn(sx_nn_net *net, sx_nn_layer *x)
{
    static const int ch[4] = {64, 64, 128, 128};
    for (int i = 0; i < 4; i++) {
        x = cbr(net, x, ch[i], 3, 3, 1, 1, 1, 1e-5, true);
        if (i % 2 == 1)
            x = pool(net, x, true, 2, 2, 0);
    }
    return sx_nn_fully_connected(net, x, 256, SX_ACT_RELU);
}

/* Depthwise 3x3 (groups = channels: kernel (3, 3, 1, channels)) + bn relu, pointwise 1x1 + bn
 * relu. */
static sx_nn_layer *separable(sx_nn_net *net, sx_nn_layer *x, int filters, int stride)
{
    if (x == NULL)
        return NULL;
    int c = (int)sx_nn_layer_shape(x)[2];
    sx_nn_conv2d_params p = sx_nn_conv2d_params_default(c, 3, 3);
    p.conv.stride_h = p.conv.stride_w = stride;
    p.conv.padding = SX_PAD_EXPLICIT;
    p.conv.pad_top = p.conv.pad_bottom = p.conv.pad_left = p.conv.pad_right = 1;
    p.conv.groups = c;
    p.bias = false;
    x = bn(net, sx_nn_conv2d(net, x, &p), 1e-5, true);
    return cbr(net, x, filters, 1, 1, 1, 0, 0, 1e-5, true);
}

static sx_nn_layer *mobilenet(sx_nn_net *net, sx_nn_layer *x)
{
    static const int filters[5] = {64, 128, 128, 256, 256}, strides[5] = {1, 2, 1, 2, 1};
    x = cbr(net, x, 32, 3, 3, 1, 1, 1, 1e-5, true);
    for (int i = 0; i < 5; i++)
        x = separable(net, x, filters[i], strides[i]);
    return sx_nn_global_avg_pool(net, x);
}

/* ---------------------------------------------------------------- resnet50 (224x224x3) */

static sx_nn_layer *bottleneck(sx_nn_net *net, sx_nn_layer *x, int planes, int stride)
{
    sx_nn_layer *a = cbr(net, x, planes, 1, 1, 1, 0, 0, 1e-5, true);
    a = cbr(net, a, planes, 3, 3, stride, 1, 1, 1e-5, true); /* torchvision's v1.5: stride here */
    a = cbr(net, a, 4 * planes, 1, 1, 1, 0, 0, 1e-5, false);
    bool project = x != NULL && (stride != 1 || sx_nn_layer_shape(x)[2] != 4 * planes);
    sx_nn_layer *s = project ? cbr(net, x, 4 * planes, 1, 1, stride, 0, 0, 1e-5, false) : x;
    return add_relu(net, a, s);
}

static sx_nn_layer *resnet50(sx_nn_net *net, sx_nn_layer *x)
{
    static const int blocks[4] = {3, 4, 6, 3};
    x = cbr(net, x, 64, 7, 7, 2, 3, 3, 1e-5, true);
    x = pool(net, x, true, 3, 2, 1);
    for (int stage = 0; stage < 4; stage++)
        for (int b = 0; b < blocks[stage]; b++)
            x = bottleneck(net, x, 64 << stage, stage > 0 && b == 0 ? 2 : 1);
    return sx_nn_global_avg_pool(net, x);
}

/* ---------------------------------------------------------------- inception_v3 (299x299x3) */

#define IEPS 1e-3 /* torchvision's BasicConv2d */

static sx_nn_layer *bc(sx_nn_net *net, sx_nn_layer *x, int f, int kh, int kw, int s, int ph, int pw)
{
    return cbr(net, x, f, kh, kw, s, ph, pw, IEPS, true);
}

static sx_nn_layer *inception_a(sx_nn_net *net, sx_nn_layer *x, int pool_features)
{
    sx_nn_layer *b[4];
    b[0] = bc(net, x, 64, 1, 1, 1, 0, 0);
    b[1] = bc(net, bc(net, x, 48, 1, 1, 1, 0, 0), 64, 5, 5, 1, 2, 2);
    b[2] = bc(net, bc(net, bc(net, x, 64, 1, 1, 1, 0, 0), 96, 3, 3, 1, 1, 1), 96, 3, 3, 1, 1, 1);
    b[3] = bc(net, pool(net, x, false, 3, 1, 1), pool_features, 1, 1, 1, 0, 0);
    return cat(net, 4, b);
}

static sx_nn_layer *inception_b(sx_nn_net *net, sx_nn_layer *x)
{
    sx_nn_layer *b[3];
    b[0] = bc(net, x, 384, 3, 3, 2, 0, 0);
    b[1] = bc(net, bc(net, bc(net, x, 64, 1, 1, 1, 0, 0), 96, 3, 3, 1, 1, 1), 96, 3, 3, 2, 0, 0);
    b[2] = pool(net, x, true, 3, 2, 0);
    return cat(net, 3, b);
}

static sx_nn_layer *inception_c(sx_nn_net *net, sx_nn_layer *x, int c7)
{
    sx_nn_layer *b[4], *t;
    b[0] = bc(net, x, 192, 1, 1, 1, 0, 0);
    t = bc(net, x, c7, 1, 1, 1, 0, 0);
    t = bc(net, t, c7, 1, 7, 1, 0, 3);
    b[1] = bc(net, t, 192, 7, 1, 1, 3, 0);
    t = bc(net, x, c7, 1, 1, 1, 0, 0);
    t = bc(net, t, c7, 7, 1, 1, 3, 0);
    t = bc(net, t, c7, 1, 7, 1, 0, 3);
    t = bc(net, t, c7, 7, 1, 1, 3, 0);
    b[2] = bc(net, t, 192, 1, 7, 1, 0, 3);
    b[3] = bc(net, pool(net, x, false, 3, 1, 1), 192, 1, 1, 1, 0, 0);
    return cat(net, 4, b);
}

static sx_nn_layer *inception_d(sx_nn_net *net, sx_nn_layer *x)
{
    sx_nn_layer *b[3], *t;
    b[0] = bc(net, bc(net, x, 192, 1, 1, 1, 0, 0), 320, 3, 3, 2, 0, 0);
    t = bc(net, x, 192, 1, 1, 1, 0, 0);
    t = bc(net, t, 192, 1, 7, 1, 0, 3);
    t = bc(net, t, 192, 7, 1, 1, 3, 0);
    b[1] = bc(net, t, 192, 3, 3, 2, 0, 0);
    b[2] = pool(net, x, true, 3, 2, 0);
    return cat(net, 3, b);
}

static sx_nn_layer *inception_e(sx_nn_net *net, sx_nn_layer *x)
{
    sx_nn_layer *b[6], *t;
    b[0] = bc(net, x, 320, 1, 1, 1, 0, 0);
    t = bc(net, x, 384, 1, 1, 1, 0, 0);
    b[1] = bc(net, t, 384, 1, 3, 1, 0, 1);
    b[2] = bc(net, t, 384, 3, 1, 1, 1, 0);
    t = bc(net, bc(net, x, 448, 1, 1, 1, 0, 0), 384, 3, 3, 1, 1, 1);
    b[3] = bc(net, t, 384, 1, 3, 1, 0, 1);
    b[4] = bc(net, t, 384, 3, 1, 1, 1, 0);
    b[5] = bc(net, pool(net, x, false, 3, 1, 1), 192, 1, 1, 1, 0, 0);
    return cat(net, 6, b); /* torch's order: 1x1, 3x3 (two), 3x3dbl (two), pool */
}

static sx_nn_layer *inception_v3(sx_nn_net *net, sx_nn_layer *x)
{
    x = bc(net, x, 32, 3, 3, 2, 0, 0);
    x = bc(net, x, 32, 3, 3, 1, 0, 0);
    x = bc(net, x, 64, 3, 3, 1, 1, 1);
    x = pool(net, x, true, 3, 2, 0);
    x = bc(net, x, 80, 1, 1, 1, 0, 0);
    x = bc(net, x, 192, 3, 3, 1, 0, 0);
    x = pool(net, x, true, 3, 2, 0);
    x = inception_a(net, x, 32);
    x = inception_a(net, x, 64);
    x = inception_a(net, x, 64);
    x = inception_b(net, x);
    x = inception_c(net, x, 128);
    x = inception_c(net, x, 160);
    x = inception_c(net, x, 160);
    x = inception_c(net, x, 192);
    x = inception_d(net, x);
    x = inception_e(net, x);
    x = inception_e(net, x);
    return sx_nn_global_avg_pool(net, x);
}

/* ---------------------------------------------------------------- the table */

typedef sx_nn_layer *(*zoo_body)(sx_nn_net *net, sx_nn_layer *x);

static const struct {
    zoo_info info;
    zoo_body body;
} zoo_table[] = {
    {{"lenet5", true, 28, 28, 1, 10, SX_OPTIM_MOMENTUM, 0.01, 64, 61706}, lenet5},
    {{"resnet20", true, 28, 28, 1, 10, SX_OPTIM_ADAM, 0.001, 128, 272186}, resnet20},
    {{"vgg_bn", true, 28, 28, 1, 10, SX_OPTIM_RMSPROP, 0.001, 100, 1867850}, vgg_bn},
    {{"mobilenet", true, 28, 28, 1, 10, SX_OPTIM_ADAM, 0.001, 128, 136202}, mobilenet},
    {{"resnet50", false, 224, 224, 3, 1000, SX_OPTIM_SGD, 0, 16, 25557032}, resnet50},
    {{"inception_v3", false, 299, 299, 3, 1000, SX_OPTIM_SGD, 0, 16, 23834568}, inception_v3},
};
enum { ZOO_N = sizeof zoo_table / sizeof zoo_table[0] };

const char *const zoo_names[] = {"lenet5",   "resnet20",     "vgg_bn", "mobilenet",
                                 "resnet50", "inception_v3", NULL};

const zoo_info *zoo_find(const char *name)
{
    for (int i = 0; name != NULL && i < ZOO_N; i++)
        if (strcmp(zoo_table[i].info.name, name) == 0)
            return &zoo_table[i].info;
    return NULL;
}

sx_status zoo_build(const char *name, uint64_t seed, sx_nn_net **out)
{
    *out = NULL;
    int k = -1;
    for (int i = 0; name != NULL && i < ZOO_N; i++)
        if (strcmp(zoo_table[i].info.name, name) == 0)
            k = i;
    if (k < 0)
        return sx_error(SX_E_ARG, "zoo_build: unknown network '%s'", name ? name : "(null)");
    const zoo_info *z = &zoo_table[k].info;
    sx_nn_net *net = NULL;
    SX_TRY(sx_nn_net_new(z->name, SX_F32, seed, &net));
    const int64_t shape[3] = {z->h, z->w, z->c};
    sx_nn_layer *x = zoo_table[k].body(net, sx_nn_input(net, 3, shape));
    sx_nn_fully_connected(net, x, z->classes, SX_ACT_SOFTMAX);
    sx_status s = sx_nn_net_status(net);
    if (s != SX_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", sx_last_error());
        sx_nn_net_free(net);
        return sx_error(s, "zoo_build: network %s: %s", z->name, msg);
    }
    *out = net;
    return SX_OK;
}

/* ---------------------------------------------------------------- runs */

zoo_opts zoo_opts_default(void)
{
    zoo_opts o = {.epochs = 1, .reps = 5, .seed = 42};
    return o;
}

static double peak_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024;
}

static bool has_file(const char *dir, const char *name)
{
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* FNV-1a over the bytes of n floats, continuing from h. */
static uint64_t fnv_floats(uint64_t h, const float *v, int64_t n)
{
    const unsigned char *b = (const unsigned char *)v;
    for (size_t i = 0; i < (size_t)n * sizeof *v; i++)
        h = (h ^ b[i]) * UINT64_C(1099511628211);
    return h;
}

/* Inference throughput over `set` in batches of `batch` through a new compiled inference graph,
 * after one untimed batch (as bench/torch_mnist.py and examples/mnist_train.c). With `profile`:
 * the inference graph's time per op kind, and a hash of every output bit of the timed pass, on
 * stderr (to check that a change keeps the results). */
static sx_status time_set_inference(sx_nn_net *net, const sx_ds_images *set, int64_t batch,
                                    const zoo_opts *o, double *ips)
{
    uint64_t hash = UINT64_C(14695981039346656037);
    sx_nn_model *m = NULL;
    sx_ds_batcher *b = NULL;
    sx_tensor *x = NULL, *y = NULL, *out = NULL;
    int64_t xs[4] = {batch, set->h, set->w, set->c}, ys[1] = {batch}, seen = 0, count = 0;
    int64_t os[2] = {batch, set->classes};
    sx_ds_batcher_params bp = sx_ds_batcher_params_default();
    bp.batch_size = batch;
    bp.shuffle = false;
    bp.scale = 1; /* raw bytes: the network scales its input itself */
    const bool profile = o->profile;
    sx_status s = sx_nn_compile_infer(net, batch, &m);
    if (s == SX_OK)
        s = sx_nn_model_set_sub_batch(m, o->sub_batch);
    if (s == SX_OK)
        s = sx_ds_batcher_new(set, &bp, &b);
    if (s == SX_OK)
        s = sx_tensor_new(SX_F32, 4, xs, &x);
    if (s == SX_OK)
        s = sx_tensor_new(SX_F32, 1, ys, &y);
    if (s == SX_OK)
        s = sx_tensor_new(SX_F32, 2, os, &out);
    if (s == SX_OK && profile)
        sx_cg_profile_enable(sx_nn_model_graph(m), true);
    bool warm = false;
    double t0 = sx_seconds();
    while (s == SX_OK && (s = sx_ds_batcher_next(b, x, y, &count)) == SX_OK && count > 0) {
        int64_t xv_s[4] = {count, set->h, set->w, set->c}, ov_s[2] = {count, set->classes};
        sx_tensor xv = sx_tensor_view(SX_F32, 4, xv_s, x->data);
        sx_tensor ov = sx_tensor_view(SX_F32, 2, ov_s, out->data);
        s = sx_nn_model_predict(m, &xv, &ov);
        if (!warm) { /* the untimed first batch; then the whole set, timed */
            warm = true;
            if (s == SX_OK)
                s = sx_ds_batcher_set_epoch(b, 0);
            if (profile)
                sx_cg_profile_reset(sx_nn_model_graph(m));
            t0 = sx_seconds();
            continue;
        }
        if (s == SX_OK)
            hash = fnv_floats(hash, SX_F32P(&ov), ov.size);
        seen += count;
    }
    double el = sx_seconds() - t0;
    if (s == SX_OK)
        *ips = el > 0 ? (double)seen / el : 0;
    if (s == SX_OK && profile) {
        fprintf(stderr,
                "zoo: inference, batch %lld, profile of the full batches of %lld images "
                "(outputs' bits: fnv %016llx):\n",
                (long long)batch, (long long)seen, (unsigned long long)hash);
        sx_cg_profile_print(sx_nn_model_graph(m), 15, stderr);
    } else if (s == SX_OK && !o->quiet) {
        fprintf(stderr, "zoo: inference, batch %lld, %lld images (outputs' bits: fnv %016llx)\n",
                (long long)batch, (long long)seen, (unsigned long long)hash);
    }
    sx_tensor_free(out);
    sx_tensor_free(y);
    sx_tensor_free(x);
    sx_ds_batcher_free(b);
    sx_nn_model_free(m);
    return s;
}

static sx_status load_data(const zoo_opts *o, zoo_result *r, sx_ds_images **train,
                           sx_ds_images **test)
{
    const char *dir = o->data;
    bool fashion = false;
    if (dir == NULL) {
        fashion = has_file(SX_DS_FASHION_MNIST_DIR, "train-images-idx3-ubyte.gz");
        dir = fashion ? SX_DS_FASHION_MNIST_DIR : "data/mnist";
    } else {
        fashion = strstr(dir, "fashion") != NULL;
    }
    snprintf(r->data, sizeof r->data, "%s", fashion ? "fashion" : "mnist");
    SX_TRY(sx_ds_mnist_load(dir, SX_DS_TRAIN, o->limit, train));
    SX_TRY(sx_ds_mnist_load(dir, SX_DS_TEST, o->test_limit, test));
    SX_TRY(sx_ds_images_compact(*train));
    return sx_ds_images_compact(*test);
}

/* The kernels of one scope of the compiled training graph, on stderr: op and shape of each
 * non-leaf, non-view node, and how many read or write a tensor of the scope's largest output
 * size (full passes over the activations). */
static sx_status list_scope(sx_nn_net *net, const sx_nn_train_params *p, const char *scope)
{
    sx_nn_model *m = NULL;
    SX_TRY(sx_nn_compile_train(net, p, p->batch, &m));
    sx_cg_graph *g = sx_nn_model_graph(m);
    int64_t kernels = 0, full = 0, biggest = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
            sx_cg_node *n = sx_cg_graph_node(g, i);
            if (n == NULL || strcmp(sx_cg_node_scope(n), scope) != 0)
                continue;
            sx_cg_op op = sx_cg_node_op(n);
            if (sx_cg_op_flags(op) & (SX_OPF_LEAF | SX_OPF_VIEW))
                continue;
            int64_t size = sx_cg_node_size(n);
            if (pass == 0) {
                biggest = size > biggest ? size : biggest;
                continue;
            }
            char shape[128];
            bool reads_full = false;
            for (int k = 0; k < sx_cg_node_n_inputs(n); k++)
                reads_full |= sx_cg_node_size(sx_cg_node_input(n, k)) == biggest;
            kernels++;
            full += size == biggest || reads_full;
            fprintf(stderr, "  %-24s %s\n", sx_cg_op_name(op),
                    sx_shape_str(sx_cg_node_rank(n), sx_cg_node_shape(n), shape, sizeof shape));
        }
    fprintf(stderr,
            "zoo: scope %s: %lld kernels per step, %lld of them passes over (reading or writing) "
            "%lld elements\n",
            scope, (long long)kernels, (long long)full, (long long)biggest);
    sx_nn_model_free(m);
    return SX_OK;
}

/* Train on MNIST-like data, then time inference over the test set. */
static sx_status run_train(const zoo_opts *o, const zoo_info *z, sx_nn_net *net, zoo_result *r)
{
    sx_ds_images *train = NULL, *test = NULL;
    sx_status s = load_data(o, r, &train, &test);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.epochs = o->epochs;
    p.batch = r->batch;
    p.optim = sx_optim_params_default(z->optim);
    p.optim.lr = z->lr;
    p.eager = o->eager;
    p.profile = o->profile;
    p.verbose = o->quiet ? 0 : 1;
    sx_nn_train_report tr;
    if (s == SX_OK && o->ops_scope != NULL)
        s = list_scope(net, &p, o->ops_scope);
    if (s == SX_OK)
        s = sx_nn_train(net, &p, train, test, &tr);
    if (s == SX_OK) {
        r->train_s = tr.train_seconds;
        r->img_per_s = tr.train_seconds > 0 ? (double)train->n * o->epochs / tr.train_seconds : 0;
        r->test_acc = tr.test_accuracy;
        r->loss = tr.last_loss;
        r->arena_mb = (double)tr.compile.planned_bytes / 1048576;
        r->naive_mb = (double)tr.compile.naive_bytes / 1048576;
        r->live_mb = (double)tr.compile.peak_live_bytes / 1048576;
        r->compile_ms = 1e3 * tr.compile.compile_seconds;
        r->nodes_before = tr.compile.nodes_before;
        r->nodes_after = tr.compile.nodes_after;
        r->out_sum = 1;
        s = time_set_inference(net, test, r->batch, o, &r->infer_ips);
    }
    sx_ds_images_free(train);
    sx_ds_images_free(test);
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* `reps` timed predictions of the batch x (compiled model m, or eager when m is NULL); the
 * median seconds per call in *sec, the outputs in out. */
static sx_status time_predict(sx_nn_net *net, sx_nn_model *m, const sx_tensor *x, sx_tensor *out,
                              int reps, double *sec)
{
    double t[64];
    reps = reps < 1 ? 1 : reps > 64 ? 64 : reps;
    for (int i = 0; i < reps; i++) {
        double t0 = sx_seconds();
        SX_TRY(m != NULL ? sx_nn_model_predict(m, x, out) : sx_nn_predict_eager(net, x, out));
        t[i] = sx_seconds() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    *sec = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    return SX_OK;
}

/* One batch size of an inference net: random images of batch n, the first call (compile + one
 * evaluation, or one eager evaluation) timed apart, then `reps` timed calls. */
static sx_status infer_batch(const zoo_opts *o, const zoo_info *z, sx_nn_net *net, int64_t n,
                             zoo_result *r, double *first_s, double *call_s)
{
    int64_t xs[4] = {n, z->h, z->w, z->c}, os[2] = {n, z->classes};
    sx_tensor *x = NULL, *out = NULL;
    sx_nn_model *m = NULL;
    sx_rng rng;
    sx_rng_seed(&rng, o->seed + 1);
    sx_status s = sx_tensor_new(SX_F32, 4, xs, &x);
    if (s == SX_OK)
        s = sx_tensor_new(SX_F32, 2, os, &out);
    if (s == SX_OK)
        s = sx_tensor_rand_normal(x, &rng, 0, 1);
    double t0 = sx_seconds();
    if (s == SX_OK && !o->eager) {
        s = sx_nn_compile_infer(net, n, &m);
        if (s == SX_OK)
            s = sx_nn_model_set_sub_batch(m, o->sub_batch);
        if (s == SX_OK && n == 1) {
            sx_nn_compile_report cr = sx_nn_model_report(m);
            r->compile_ms = 1e3 * cr.compile_seconds;
            r->arena_mb = (double)cr.planned_bytes / 1048576;
            r->naive_mb = (double)cr.naive_bytes / 1048576;
            r->live_mb = (double)cr.peak_live_bytes / 1048576;
            r->nodes_before = cr.nodes_before;
            r->nodes_after = cr.nodes_after;
        }
        if (s == SX_OK && o->profile)
            sx_cg_profile_enable(sx_nn_model_graph(m), true);
    }
    if (s == SX_OK)
        s = m != NULL ? sx_nn_model_predict(m, x, out) : sx_nn_predict_eager(net, x, out);
    *first_s = sx_seconds() - t0;
    if (s == SX_OK)
        s = time_predict(net, m, x, out, o->reps, call_s);
    if (s == SX_OK && n == 1) {
        double sum = 0;
        for (int64_t i = 0; i < n * z->classes; i++)
            sum += (double)SX_F32P(out)[i];
        r->out_sum = sum / (double)n;
    }
    if (s == SX_OK && m != NULL && o->profile) {
        fprintf(stderr, "zoo: %s inference, batch %lld, profile of %d+1 calls:\n", z->name,
                (long long)n, o->reps);
        sx_cg_profile_print(sx_nn_model_graph(m), 15, stderr);
    }
    sx_nn_model_free(m);
    sx_tensor_free(out);
    sx_tensor_free(x);
    return s;
}

/* Batch-1 latency, then the throughput at r->batch (when > 1). */
static sx_status run_infer(const zoo_opts *o, const zoo_info *z, sx_nn_net *net, zoo_result *r)
{
    double first = 0, call = 0;
    snprintf(r->data, sizeof r->data, "random");
    r->test_acc = r->loss = -1;
    SX_TRY(infer_batch(o, z, net, 1, r, &first, &call));
    r->first_ms = 1e3 * first;
    r->latency_ms = 1e3 * call;
    r->infer_ips = call > 0 ? 1 / call : 0;
    if (r->batch > 1) {
        SX_TRY(infer_batch(o, z, net, r->batch, r, &first, &call));
        r->infer_ips = call > 0 ? r->batch / call : 0;
    }
    return SX_OK;
}

sx_status zoo_run(const zoo_opts *o, zoo_result *r)
{
    memset(r, 0, sizeof *r);
    const zoo_info *z = o != NULL ? zoo_find(o->net) : NULL;
    if (z == NULL)
        return sx_error(SX_E_ARG, "zoo: unknown network '%s'", o && o->net ? o->net : "(null)");
    if (o->epochs < 1 || o->batch < 0 || o->threads < 0 || o->limit < 0 || o->test_limit < 0 ||
        o->reps < 1)
        return sx_error(SX_E_ARG,
                        "zoo: epochs %d, reps %d (want >= 1), batch %d, threads %d, "
                        "limits %lld %lld (want >= 0)",
                        o->epochs, o->reps, o->batch, o->threads, (long long)o->limit,
                        (long long)o->test_limit);
    if (o->threads > 0)
        SX_TRY(sx_threads_set(o->threads));
    snprintf(r->net, sizeof r->net, "%s", z->name);
    r->batch = o->batch > 0 ? o->batch : z->batch;
    r->threads = sx_threads_get();
    r->eager = o->eager;
    sx_nn_net *net = NULL;
    SX_TRY(zoo_build(z->name, o->seed, &net));
    r->params = sx_nn_net_param_count(net);
    if (!o->quiet)
        sx_nn_net_print(net, stderr);
    sx_status s = z->train ? run_train(o, z, net, r) : run_infer(o, z, net, r);
    sx_nn_net_free(net);
    r->peak_rss_mb = peak_rss_mb();
    return s;
}

void zoo_result_format(const zoo_result *r, char *buf, size_t size)
{
    snprintf(
        buf, size,
        "result: net=%s data=%s train_s=%.3f img_per_s=%.1f test_acc=%.4f loss=%.5f "
        "peak_rss_mb=%.1f infer_ips=%.6g latency_ms=%.3f first_ms=%.2f arena_mb=%.2f "
        "naive_mb=%.2f live_mb=%.2f compile_ms=%.2f nodes_before=%lld nodes_after=%lld params=%lld "
        "out_sum=%.5f batch=%d threads=%d eager=%d",
        r->net, r->data, r->train_s, r->img_per_s, r->test_acc, r->loss, r->peak_rss_mb,
        r->infer_ips, r->latency_ms, r->first_ms, r->arena_mb, r->naive_mb, r->live_mb,
        r->compile_ms, (long long)r->nodes_before, (long long)r->nodes_after, (long long)r->params,
        r->out_sum, r->batch, r->threads, (int)r->eager);
}
