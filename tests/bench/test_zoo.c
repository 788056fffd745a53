/* The CNN zoo (bench/zoo_nets.c, compiled in here) on tiny settings: each network
 * builds with exactly the trainable parameter count of its PyTorch twin (bench/zoo_torch.py
 * --net all --params, held in the zoo's table), each run prints a well-formed result line with
 * finite figures, and eager inference computes what the compiled graph computes. The training
 * runs read MNIST (skipped when absent: scripts/fetch_mnist). */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../bench/zoo_nets.c"

/* The number after " key=" in a result line, NaN when the key is absent or not a number. */
static double field(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    if (p == NULL)
        return (double)NAN;
    char *end = NULL;
    double v = strtod(p + strlen(pat), &end);
    return end != p + strlen(pat) && (*end == ' ' || *end == '\0') ? v : (double)NAN;
}

static bool have_mnist(char *dir, size_t n)
{
    tu_mnist_dir(dir, n);
    char p[2048];
    struct stat st;
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    return stat(p, &st) == 0;
}

/* Run o, format its line and check the fields every run has. */
static void run_line(const zoo_opts *o, char *line, size_t n)
{
    zoo_result r;
    sx_status s = zoo_run(o, &r);
    cr_assert_eq(s, SX_OK, "zoo_run %s: %s", o->net, sx_last_error());
    zoo_result_format(&r, line, n);
    cr_log_info("%s", line);
    char head[64];
    snprintf(head, sizeof head, "result: net=%s data=", o->net);
    cr_assert(strncmp(line, head, strlen(head)) == 0, "%s", line);
    cr_assert(strchr(line, '\n') == NULL);
    static const char *const keys[] = {"train_s",     "img_per_s",   "test_acc",   "loss",
                                       "peak_rss_mb", "infer_ips",   "latency_ms", "arena_mb",
                                       "compile_ms",  "nodes_after", "params",     "out_sum"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cr_assert(isfinite(field(line, keys[i])), "%s: %s", keys[i], line);
    cr_assert_eq((int64_t)field(line, "params"), zoo_find(o->net)->torch_params, "%s", line);
    cr_assert_gt(field(line, "peak_rss_mb"), 0);
    /* printed with 6 significant digits: > 0 even for a slow (sanitizer) run */
    cr_assert_gt(field(line, "infer_ips"), 0, "%s", line);
    cr_assert_lt(fabs(field(line, "out_sum") - 1), 1e-3, "%s", line);
}

static void train_run(const char *net, bool eager)
{
    char dir[1024], line[1024];
    if (!have_mnist(dir, sizeof dir))
        cr_skip_test("no MNIST in %s (scripts/fetch_mnist)", dir);
    zoo_opts o = zoo_opts_default();
    o.net = net;
    o.data = dir;
    o.limit = 256;
    o.test_limit = 256;
    o.eager = eager;
    o.quiet = true;
    run_line(&o, line, sizeof line);
    double acc = field(line, "test_acc"), loss = field(line, "loss");
    cr_assert(acc >= 0 && acc <= 1, "%s", line);
    cr_assert(loss > 0, "%s", line);
    cr_assert_gt(field(line, "train_s"), 0);
    if (!eager) {
        cr_assert_gt(field(line, "arena_mb"), 0);
        cr_assert_gt(field(line, "nodes_after"), 0);
    }
}

Test(bench_zoo, params_match_torch)
{
    for (int i = 0; zoo_names[i] != NULL; i++) {
        sx_nn_net *net = NULL;
        sx_status s = zoo_build(zoo_names[i], 1, &net);
        cr_assert_eq(s, SX_OK, "%s: %s", zoo_names[i], sx_last_error());
        cr_assert_eq(sx_nn_net_param_count(net), zoo_find(zoo_names[i])->torch_params, "%s",
                     zoo_names[i]);
        sx_nn_net_free(net);
    }
}

Test(bench_zoo, unknown_net_is_an_error)
{
    sx_nn_net *net = (sx_nn_net *)1;
    cr_assert_eq(zoo_build("resnet21", 1, &net), SX_E_ARG);
    cr_assert_null(net);
    cr_assert(strstr(sx_last_error(), "resnet21") != NULL);
    zoo_opts o = zoo_opts_default();
    zoo_result r;
    o.net = "nonet";
    cr_assert_eq(zoo_run(&o, &r), SX_E_ARG);
    o.net = "lenet5";
    o.epochs = 0;
    cr_assert_eq(zoo_run(&o, &r), SX_E_ARG);
}

Test(bench_zoo, lenet5_trains)
{
    train_run("lenet5", false);
}

Test(bench_zoo, lenet5_trains_eagerly)
{
    train_run("lenet5", true);
}

Test(bench_zoo, resnet20_trains)
{
    train_run("resnet20", false);
}

Test(bench_zoo, mobilenet_trains)
{
    train_run("mobilenet", false);
}

Test(bench_zoo, vgg_bn_trains)
{
    train_run("vgg_bn", false);
}

static void infer_run(const char *net)
{
    char line[1024];
    zoo_opts o = zoo_opts_default();
    o.net = net;
    o.batch = 1;
    o.reps = 1;
    o.quiet = true;
    run_line(&o, line, sizeof line);
    cr_assert_eq(field(line, "test_acc"), -1);
    cr_assert_gt(field(line, "latency_ms"), 0);
    cr_assert_gt(field(line, "first_ms"), 0);
    cr_assert_gt(field(line, "arena_mb"), 0);
    cr_assert_gt(field(line, "compile_ms"), 0);
}

Test(bench_zoo, resnet50_infers_one_image)
{
    infer_run("resnet50");
}

Test(bench_zoo, inception_v3_infers_one_image)
{
    infer_run("inception_v3");
}

/* sx_nn_predict_eager (the zoo's --eager column) computes what the compiled inference graph
 * does, on a network with batch norm, projections and a softmax. */
Test(bench_zoo, eager_inference_matches_compiled)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(zoo_build("resnet20", 3, &net), SX_OK, "%s", sx_last_error());
    int64_t xs[4] = {3, 28, 28, 1}, os[2] = {3, 10};
    sx_tensor *x = NULL, *a = NULL, *b = NULL;
    sx_rng rng;
    sx_rng_seed(&rng, 9);
    cr_assert_eq(sx_tensor_new(SX_F32, 4, xs, &x), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F32, 2, os, &a), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F32, 2, os, &b), SX_OK);
    cr_assert_eq(sx_tensor_rand_uniform(x, &rng, 0, 1), SX_OK);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 3, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(m, x, a), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m);
    cr_assert_eq(sx_nn_predict_eager(net, x, b), SX_OK, "%s", sx_last_error());
    cr_assert(tu_close(b, a, 1e-5, 1e-6));
    /* a wrong output shape is an error naming both shapes, out untouched */
    int64_t bad_s[2] = {3, 9};
    sx_tensor *bad = NULL;
    cr_assert_eq(sx_tensor_new(SX_F32, 2, bad_s, &bad), SX_OK);
    cr_assert_eq(sx_nn_predict_eager(net, x, bad), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "sx_nn_predict_eager") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_nn_predict_eager(NULL, x, b), SX_E_ARG);
    sx_tensor_free(bad);
    sx_tensor_free(x);
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_nn_net_free(net);
}
