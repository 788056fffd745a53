/* zoo_nets.h: the CNN zoo (bench/zoo, tests/bench/test_zoo.c): each network built by
 * name from include/strix/sx_nn.h layers, and one run of it (training on MNIST-like data, or
 * inference on random ImageNet-sized images) summarised in one `result:` line.
 *
 * Networks (NHWC; every stride-2 or padded convolution with PyTorch's explicit padding, so that
 * bench/zoo_torch.py computes the same network; weights Glorot-uniform, biases 0, batch-norm
 * scale 1 and shift 0, running statistics 0 and 1, momentum 0.9 (PyTorch's 0.1) and eps 1e-5
 * (1e-3 in inception_v3), as zoo_torch.py initialises its side):
 *   lenet5     28x28x1: conv 5x5x6 pad 2 relu, max pool 2, conv 5x5x16 relu, max pool 2,
 *              dense 120 relu, dense 84 relu, dense 10; SGD momentum 0.9 lr 0.01, batch 64.
 *   resnet20   28x28x1: He et al.'s CIFAR ResNet: conv 3x3x16 bn relu, 3 stages x 3 basic
 *              blocks (16, 32, 64 channels; the first block of stages 2 and 3 of stride 2 with a
 *              1x1 stride-2 projection + bn on the shortcut: option B), global average pool,
 *              dense 10; Adam lr 0.001, batch 128.
 *   vgg_bn     28x28x1: [conv 3x3 pad 1 bn relu] x 64, 64, max pool 2, x 128, 128, max pool 2,
 *              dense 256 relu, dense 10; RMSprop lr 0.001, batch 100.
 *   mobilenet  28x28x1: conv 3x3x32 bn relu, 5 depthwise-separable blocks (depthwise 3x3 pad 1
 *              bn relu, pointwise 1x1 bn relu: 64; 128 s2; 128; 256 s2; 256), global average
 *              pool, dense 10; Adam lr 0.001, batch 128 (grouped convolutions).
 *   resnet50   224x224x3, inference only (torchvision's resnet50, 1000 classes).
 *   inception_v3 299x299x3, inference only (torchvision's inception_v3 without the auxiliary
 *              head, 1000 classes).
 * The networks end in a softmax (folded into the cross-entropy when training). */
#ifndef STRIX_ZOO_NETS_H
#define STRIX_ZOO_NETS_H

#include "sx_nn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct zoo_info {
    const char *name;
    bool train;               /* trained on MNIST-like data; else inference on random images */
    int64_t h, w, c, classes; /* input and output */
    sx_optim_kind optim;
    double lr;
    int batch;            /* the default batch (the throughput batch for inference nets) */
    int64_t torch_params; /* trainable parameters of the torch network (zoo_torch.py --params) */
} zoo_info;

/* The table entry of `name`, or NULL. zoo_names: the names, NULL-terminated. */
const zoo_info *zoo_find(const char *name);
extern const char *const zoo_names[];

/* Build network `name` (weights drawn from seed) into *out. Errors: SX_E_ARG (unknown name),
 * the network's first layer error; *out NULL. */
sx_status zoo_build(const char *name, uint64_t seed, sx_nn_net **out);

typedef struct zoo_opts {
    const char *net;
    const char *data;   /* NULL: Fashion-MNIST when installed, else data/mnist */
    int64_t limit;      /* training images, 0 = all */
    int64_t test_limit; /* test images, 0 = all */
    int epochs;
    int batch;   /* 0: the net's default */
    int threads; /* 0: strix's default */
    int reps;    /* timed inference batches of the ImageNet nets (batch 1 and batch) */
    uint64_t seed;
    bool eager, profile, quiet;
    int64_t sub_batch;     /* rows per sub-batch of inference (sx_nn_model_set_sub_batch; 0:
                              automatic, 1 or more than the batch: whole batches) */
    const char *ops_scope; /* training nets: list the compiled training graph's kernels of this
                              scope (a layer name, e.g. batch_norm_3) on stderr; NULL: none */
} zoo_opts;

zoo_opts zoo_opts_default(void);

typedef struct zoo_result {
    char net[32];
    char data[16];      /* "mnist", "fashion" or "random" */
    double train_s;     /* the training loop (0 for inference nets) */
    double img_per_s;   /* training images per second */
    double test_acc;    /* after training; -1 for inference nets */
    double loss;        /* mean loss of the last epoch; -1 for inference nets */
    double peak_rss_mb; /* getrusage's ru_maxrss: the whole process */
    double infer_ips;   /* inference images per second at the batch */
    double latency_ms;  /* batch-1 inference, median (ImageNet nets; 0 otherwise) */
    double first_ms;    /* ImageNet nets: compile + first batch-1 evaluation (eager: one eager
                           evaluation): Owl's "build + evaluate" */
    double out_sum;     /* mean over rows of the sum of the outputs (softmax: 1) */
    double arena_mb;    /* the planned arena of the training (or batch-1 inference) graph */
    double naive_mb;    /* the same graph unplanned */
    double live_mb;     /* the most bytes live at once in the planned order (no plan beats it) */
    double compile_ms;  /* compile + optimise + plan of that graph */
    int64_t nodes_before, nodes_after, params;
    int batch, threads;
    bool eager;
} zoo_result;

/* One run as o asks; the figures in *r. Errors: SX_E_ARG (bad options), the data loader's, the
 * network's or the run's error (sx_last_error() says which). */
sx_status zoo_run(const zoo_opts *o, zoo_result *r);

/* The one `result:` line (no newline) into buf. */
void zoo_result_format(const zoo_result *r, char *buf, size_t size);

#endif
