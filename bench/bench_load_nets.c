/* bench_load_nets.c: the LeNet-5 and small ResNet-style networks that bench/under_load trains
 * with and without competing processes (stand-ins until the CNN zoo lands), built from
 * include/strix/sx_nn.h layers and trained on MNIST with the compiled training loop; one `result:`
 * line.
 *
 *     bench_load_nets --net lenet|resnet [--data DIR] [--limit N] [--threads T] [--seed S]
 *
 * lenet: conv 5x5x6 SAME relu, max pool 2, conv 5x5x16 VALID relu, max pool 2, dense 120 relu,
 *   dense 84 relu, dense 10 softmax; SGD with momentum (lr 0.01, mu 0.9).
 * resnet: conv 3x3x16 + batch norm + relu; two residual blocks (conv-bn-relu-conv-bn + the
 *   input, relu), the second at 32 channels after a stride-2 conv with a 1x1 stride-2
 *   projection on the shortcut; global average pool, dense 10 softmax; Adam (lr 0.001).
 * Batch 100, one epoch over the first --limit images (default 10000), no test pass.
 * Result: net=NAME train_seconds=X images_per_second=Y last_loss=Z threads=T */
#include "sx_datasets.h"
#include "sx_nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

static sx_nn_layer *conv_bn(sx_nn_net *net, sx_nn_layer *in, int k, int filters, int stride,
                            bool relu)
{
    sx_nn_conv2d_params cp = sx_nn_conv2d_params_default(filters, k, k);
    cp.conv.stride_h = cp.conv.stride_w = stride;
    cp.conv.padding = SX_PAD_SAME;
    sx_nn_layer *c = sx_nn_conv2d(net, in, &cp);
    sx_nn_batch_norm_params bp = sx_nn_batch_norm_params_default();
    bp.momentum = 0.9;
    bp.eps = 1e-5;
    sx_nn_layer *b = sx_nn_batch_norm(net, c, &bp);
    return relu ? sx_nn_activation(net, b, SX_ACT_RELU) : b;
}

/* One residual block: relu(conv-bn-relu-conv-bn(x) + shortcut(x)). */
static sx_nn_layer *res_block(sx_nn_net *net, sx_nn_layer *in, int filters, int stride)
{
    sx_nn_layer *a = conv_bn(net, in, 3, filters, stride, true);
    sx_nn_layer *b = conv_bn(net, a, 3, filters, 1, false);
    sx_nn_layer *s = stride == 1 ? in : conv_bn(net, in, 1, filters, stride, false);
    sx_nn_layer *sum[2] = {b, s};
    return sx_nn_activation(net, sx_nn_add(net, 2, sum), SX_ACT_RELU);
}

static sx_nn_net *build(const char *name, uint64_t seed, sx_nn_train_params *p)
{
    sx_nn_net *net = NULL;
    CHECK(sx_nn_net_new(name, SX_F32, seed, &net));
    const int64_t shape[3] = {28, 28, 1};
    sx_nn_layer *x = sx_nn_input(net, 3, shape);
    if (strcmp(name, "lenet") == 0) {
        sx_nn_conv2d_params c1 = sx_nn_conv2d_params_default(6, 5, 5);
        c1.conv.padding = SX_PAD_SAME;
        c1.act = SX_ACT_RELU;
        sx_nn_conv2d_params c2 = sx_nn_conv2d_params_default(16, 5, 5); /* VALID */
        c2.act = SX_ACT_RELU;
        sx_nn_pool2d_params pool = sx_nn_pool2d_params_default(2, 2);
        x = sx_nn_conv2d(net, x, &c1);
        x = sx_nn_max_pool2d(net, x, &pool);
        x = sx_nn_conv2d(net, x, &c2);
        x = sx_nn_max_pool2d(net, x, &pool);
        x = sx_nn_fully_connected(net, x, 120, SX_ACT_RELU);
        x = sx_nn_fully_connected(net, x, 84, SX_ACT_RELU);
        p->optim = sx_optim_params_default(SX_OPTIM_MOMENTUM);
        p->optim.lr = 0.01;
    } else {
        x = conv_bn(net, x, 3, 16, 1, true);
        x = res_block(net, x, 16, 1);
        x = res_block(net, x, 32, 2);
        x = sx_nn_global_avg_pool(net, x);
        p->optim = sx_optim_params_default(SX_OPTIM_ADAM);
    }
    sx_nn_fully_connected(net, x, 10, SX_ACT_SOFTMAX);
    CHECK(sx_nn_net_status(net));
    return net;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_load_nets --net lenet|resnet [--data DIR] [--limit N] "
                    "[--threads T] [--seed S]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *name = NULL, *data = "data/mnist";
    long limit = 10000, threads = 0, seed = 42;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            usage();
        if (strcmp(a, "--net") == 0)
            name = v;
        else if (strcmp(a, "--data") == 0)
            data = v;
        else if (strcmp(a, "--limit") == 0)
            limit = strtol(v, NULL, 10);
        else if (strcmp(a, "--threads") == 0)
            threads = strtol(v, NULL, 10);
        else if (strcmp(a, "--seed") == 0)
            seed = strtol(v, NULL, 10);
        else
            usage();
        i++;
    }
    if (name == NULL || (strcmp(name, "lenet") != 0 && strcmp(name, "resnet") != 0) ||
        limit < 100 || threads < 0 || threads > 1024)
        usage();
    CHECK(sx_threads_set((int)threads));
    sx_ds_images *train = NULL;
    CHECK(sx_ds_mnist_load(data, SX_DS_TRAIN, limit, &train));
    sx_nn_train_params p = sx_nn_train_params_default();
    sx_nn_net *net = build(name, (uint64_t)seed, &p);
    sx_nn_train_report r;
    CHECK(sx_nn_train(net, &p, train, NULL, &r));
    const double images = (double)r.steps * p.batch;
    printf("result: net=%s train_seconds=%.3f images_per_second=%.0f last_loss=%.4f threads=%d\n",
           name, r.train_seconds, images / r.train_seconds, r.last_loss, sx_threads_get());
    sx_nn_net_free(net);
    sx_ds_images_free(train);
    return 0;
}
