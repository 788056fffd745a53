/* End to end on the real MNIST (skipped when data/mnist of the source tree is absent; run
 * scripts/fetch_mnist): the reference network trained for one epoch on the first
 * 5,000 training images reaches >= 90% test accuracy, and the saved and reloaded model predicts
 * exactly what the trained network predicts on all 10,000 test images. Fashion-MNIST goes
 * through the same loader and trains when the Debian package dataset-fashion-mnist is there. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sx_nn.h>
#include "nn_layer_calls.h"

static bool has_mnist(const char *dir)
{
    static const char *const names[4] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 4; i++) {
        char p[2048];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (stat(p, &st) != 0) {
            /* the loader also takes the decompressed file */
            p[strlen(p) - 3] = '\0';
            if (stat(p, &st) != 0)
                return false;
        }
    }
    return true;
}

static sx_cg_node *over_256(sx_cg_graph *g, sx_cg_node *x, void *ctx)
{
    (void)ctx;
    return sx_cg_mul_scalar(g, x, 1.0 / 256.0);
}

/* Owl's lazy_mnist, as examples/mnist_train builds it. */
static sx_nn_net *reference_net(uint64_t seed)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("lazy_mnist", SX_F32, seed, &net), SX_OK);
    sx_nn_net_set_input_scale(net, 1.0);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){28, 28, 1});
    x = sx_nn_lambda(net, x, over_256, NULL, "x/256");
    x = t_conv2d(net, x, 5, 5, 32, 1, SX_PAD_SAME, SX_ACT_RELU);
    x = t_max_pool2d(net, x, 2, 2, 2, SX_PAD_VALID);
    x = sx_nn_dropout(net, x, 0.1);
    x = sx_nn_fully_connected(net, x, 1024, SX_ACT_RELU);
    x = sx_nn_linear(net, x, 10, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_net_param_count(net), 6434634);
    return net;
}

/* The (n, 10) outputs of a predictor over the whole set, in batches of 100. */
typedef sx_status (*predict_fn)(void *m, const sx_tensor *x, sx_tensor *out);

static sx_status model_predict(void *m, const sx_tensor *x, sx_tensor *out)
{
    return sx_nn_model_predict(m, x, out);
}

static sx_status loaded_predict(void *m, const sx_tensor *x, sx_tensor *out)
{
    return sx_nn_model_predict(m, x, out);
}

static float *predict_all(const sx_ds_images *set, double scale, predict_fn fn, void *m)
{
    const int64_t B = 100;
    float *all = malloc((size_t)set->n * 10 * sizeof *all);
    cr_assert_not_null(all);
    sx_tensor *x = tu_zeros(SX_F32, 4, (int64_t[]){B, 28, 28, 1});
    sx_tensor *out = tu_zeros(SX_F32, 2, (int64_t[]){B, 10});
    int64_t index[100];
    for (int64_t first = 0; first < set->n; first += B) {
        int64_t count = set->n - first < B ? set->n - first : B;
        for (int64_t i = 0; i < count; i++)
            index[i] = first + i;
        cr_assert_eq(sx_ds_images_gather_out(set, index, count, scale, x, NULL), SX_OK, "%s",
                     sx_last_error());
        sx_tensor xv = *x, ov = *out;
        xv.shape[0] = ov.shape[0] = count;
        xv.size = count * 28 * 28;
        ov.size = count * 10;
        cr_assert_eq(fn(m, &xv, &ov), SX_OK, "%s", sx_last_error());
        memcpy(all + first * 10, ov.data, (size_t)count * 10 * sizeof *all);
    }
    sx_tensor_free(x);
    sx_tensor_free(out);
    return all;
}

static double accuracy(const sx_ds_images *set, const float *p)
{
    int64_t right = 0;
    for (int64_t i = 0; i < set->n; i++) {
        int best = 0;
        for (int k = 1; k < 10; k++)
            if (p[i * 10 + k] > p[i * 10 + best])
                best = k;
        right += best == set->labels[i];
    }
    return (double)right / (double)set->n;
}

Test(nn_mnist, reference_network_5000_images_one_epoch, .timeout = 550)
{
    char dir[1100];
    tu_mnist_dir(dir, sizeof dir);
    if (!has_mnist(dir))
        cr_skip_test("MNIST not found in %s (run scripts/fetch_mnist)", dir);
    sx_ds_images *train = NULL, *test = NULL;
    cr_assert_eq(sx_ds_mnist_load(dir, SX_DS_TRAIN, 5000, &train), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_mnist_load(dir, SX_DS_TEST, 0, &test), SX_OK, "%s", sx_last_error());
    cr_assert_eq(train->n, 5000);
    cr_assert_eq(test->n, 10000);

    sx_nn_net *net = reference_net(42);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.epochs = 1;
    p.batch = 100;
    p.optim = sx_optim_params_default(SX_OPTIM_ADAGRAD);
    p.optim.lr = 0.005;
    p.verbose = 0;
    sx_nn_train_report rep;
    cr_assert_eq(sx_nn_train(net, &p, train, NULL, &rep), SX_OK, "%s", sx_last_error());
    cr_assert_eq(rep.steps, 50);
    cr_assert_eq(rep.test_accuracy, -1);
    cr_assert(rep.last_loss > 0 && rep.last_loss < 1.0, "mean training loss %g", rep.last_loss);
    cr_assert_lt(rep.compile.nodes_after, rep.compile.nodes_before);
    cr_assert_lt(rep.compile.planned_bytes, rep.compile.naive_bytes);

    /* the trained network on the 10k test images */
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 100, &m), SX_OK, "%s", sx_last_error());
    float *pa = predict_all(test, sx_nn_net_input_scale(net), model_predict, m);
    sx_nn_model_free(m);
    double acc = accuracy(test, pa);
    cr_log_info("test accuracy after 5000 images: %.4f", acc);
    cr_assert(acc >= 0.90, "test accuracy %.4f < 0.90", acc);

    /* sx_nn_evaluate agrees on the first 1000 test images */
    sx_ds_images head = *test;
    head.n = 1000;
    double eval = 0;
    cr_assert_eq(sx_nn_evaluate(net, &head, 100, &eval), SX_OK, "%s", sx_last_error());
    cr_assert_eq(eval, accuracy(&head, pa));

    /* save, reload, predict: exactly the same outputs */
    char tmp[] = "/tmp/sx_nn_mnist_XXXXXX";
    cr_assert_not_null(mkdtemp(tmp));
    char path[64];
    snprintf(path, sizeof path, "%s/lazy_mnist.sxm", tmp);
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_net_free(net); /* the loaded model does not need the network */
    sx_nn_model *lm = NULL;
    cr_assert_eq(sx_nn_load(path, 100, &lm), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_classes(lm), 10);
    cr_assert_eq(sx_nn_model_input_scale(lm), 1.0);
    float *pb = predict_all(test, sx_nn_model_input_scale(lm), loaded_predict, lm);
    for (int64_t i = 0; i < test->n * 10; i++)
        cr_assert(pa[i] == pb[i], "test image %lld, class %lld: %.9g after loading, %.9g before",
                  (long long)(i / 10), (long long)(i % 10), (double)pb[i], (double)pa[i]);
    sx_nn_model_free(lm);
    unlink(path);
    rmdir(tmp);
    free(pa);
    free(pb);
    sx_ds_images_free(train);
    sx_ds_images_free(test);
}

Test(nn_mnist, fashion_mnist_through_the_same_loader, .timeout = 300)
{
    sx_ds_images *train = NULL, *test = NULL;
    sx_status s = sx_ds_fashion_mnist_load(NULL, SX_DS_TRAIN, 2000, &train);
    if (s == SX_E_IO)
        cr_skip_test("Fashion-MNIST not in " SX_DS_FASHION_MNIST_DIR
                     " (Debian package dataset-fashion-mnist)");
    cr_assert_eq(s, SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_fashion_mnist_load(NULL, SX_DS_TEST, 0, &test), SX_OK, "%s",
                 sx_last_error());
    cr_assert_eq(train->n, 2000);
    cr_assert_eq(test->n, 10000);
    cr_assert(train->h == 28 && train->w == 28 && train->c == 1 && train->classes == 10);
    int64_t hist[10] = {0};
    for (int64_t i = 0; i < test->n; i++)
        hist[test->labels[i]]++;
    for (int k = 0; k < 10; k++)
        cr_assert_eq(hist[k], 1000, "class %d (%s): %lld test images", k,
                     sx_ds_fashion_mnist_class_name(k), (long long)hist[k]);

    /* a small CNN learns it: far above chance after two epochs of 2000 images */
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("fashion", SX_F32, 7, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){28, 28, 1});
    x = t_conv2d(net, x, 5, 5, 8, 2, SX_PAD_SAME, SX_ACT_RELU);
    x = t_max_pool2d(net, x, 2, 2, 2, SX_PAD_VALID);
    x = sx_nn_fully_connected(net, x, 64, SX_ACT_RELU);
    x = sx_nn_linear(net, x, 10, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.optim.lr = 0.003;
    p.epochs = 2;
    p.verbose = 0;
    sx_ds_images head = *test;
    head.n = 2000;
    sx_nn_train_report rep;
    cr_assert_eq(sx_nn_train(net, &p, train, &head, &rep), SX_OK, "%s", sx_last_error());
    cr_log_info("Fashion-MNIST accuracy after 2 x 2000 images: %.4f", rep.test_accuracy);
    cr_assert(rep.test_accuracy > 0.6, "accuracy %.4f", rep.test_accuracy);
    sx_nn_net_free(net);
    sx_ds_images_free(train);
    sx_ds_images_free(test);
}
