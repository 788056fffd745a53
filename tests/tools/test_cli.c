/* test_cli.c: the `strix` tool run as a program (its path is STRIX_TOOL, set by CMakeLists.txt)
 * on small real inputs: a model trained here for a few hundred steps on MNIST, .npy files, IDX
 * files of data/mnist, a PNG image; its outputs are checked against the library's own results
 * (predict's .npy against sx_nn_model_predict, bit for bit), and every bad-argument path must
 * exit non-zero with one line on stderr. */
#include "testutil.h"

#include <math.h>
#include <png.h>
#include <sx_nn.h>
#ifdef STRIX_HAVE_ONNX
#include <sx_onnx.h>
#endif
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef STRIX_TOOL
#define STRIX_TOOL ""
#endif

typedef struct run_result {
    int status; /* exit status, or -1 for a signal */
    char out[1 << 16], err[1 << 13];
} run_result;

static char dir[64];

/* A new folder for this test's files. */
static void setup(void)
{
    if (STRIX_TOOL[0] == '\0')
        cr_skip_test("the strix tool is not built (STRIX_BUILD_TOOLS=OFF)");
    snprintf(dir, sizeof dir, "/tmp/sx_test_cli_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (dir[0] != '\0' && system(cmd) != 0)
        cr_log_warn("could not remove %s", dir);
}

static void slurp(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "rb");
    size_t k = f ? fread(buf, 1, n - 1, f) : 0;
    buf[k] = '\0';
    if (f)
        fclose(f);
}

/* Run `strix ARGS` (ARGS a shell word list: paths here have no spaces). */
static void run(run_result *r, const char *args)
{
    char cmd[4096], o[128], e[128];
    snprintf(o, sizeof o, "%s/stdout", dir);
    snprintf(e, sizeof e, "%s/stderr", dir);
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>%s", STRIX_TOOL, args, o, e);
    int st = system(cmd);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    slurp(o, r->out, sizeof r->out);
    slurp(e, r->err, sizeof r->err);
}

static void path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

/* The first `limit` entries of data/mnist's NAME.gz written as a raw IDX file dir/NAME (what
 * the MNIST loader reads when there is no .gz): small inputs that keep the tests fast. */
static void small_idx(const char *name, int64_t limit, char *out, size_t n)
{
    char mnist[512], src[700];
    tu_mnist_dir(mnist, sizeof mnist);
    snprintf(src, sizeof src, "%s/%s.gz", mnist, name);
    sx_ds_idx *x = NULL;
    if (sx_ds_idx_read_raw(src, limit, &x) != SX_OK)
        cr_skip_test("no MNIST: %s", sx_last_error());
    cr_assert_eq(x->type, SX_DS_U8);
    snprintf(out, n, "%s/%s", dir, name);
    FILE *f = fopen(out, "wb");
    cr_assert_not_null(f);
    uint8_t head[4 + 4 * SX_MAX_RANK] = {0, 0, 0x08, (uint8_t)x->rank};
    for (int k = 0; k < x->rank; k++)
        for (int b = 0; b < 4; b++)
            head[4 + 4 * k + b] = (uint8_t)(x->dims[k] >> (24 - 8 * b));
    cr_assert_eq(fwrite(head, 1, 4 + 4 * (size_t)x->rank, f), 4 + 4 * (size_t)x->rank);
    cr_assert_eq(fwrite(x->data, 1, (size_t)x->count, f), (size_t)x->count);
    cr_assert_eq(fclose(f), 0);
    sx_ds_idx_free(x);
}

/* A small CNN trained for 200 steps (1000 MNIST images, batch 5), saved as dir/model.sxm. */
static void train_model(void)
{
    char mnist[512], model[128];
    tu_mnist_dir(mnist, sizeof mnist);
    sx_ds_images *train = NULL;
    if (sx_ds_mnist_load(mnist, SX_DS_TRAIN, 1000, &train) != SX_OK)
        cr_skip_test("no MNIST in %s: %s", mnist, sx_last_error());
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("cli_test", SX_F32, 3, &net), SX_OK);
    sx_nn_net_set_input_scale(net, SX_DS_PIXEL_SCALE);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){28, 28, 1});
    sx_nn_conv2d_params conv = sx_nn_conv2d_params_default(4, 3, 3);
    conv.act = SX_ACT_RELU;
    x = sx_nn_conv2d(net, x, &conv);
    sx_nn_pool2d_params pool = sx_nn_pool2d_params_default(2, 2);
    x = sx_nn_max_pool2d(net, x, &pool);
    x = sx_nn_flatten(net, x);
    x = sx_nn_linear(net, x, 10, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 5;
    p.epochs = 1;
    p.verbose = 0;
    sx_nn_train_report rep;
    cr_assert_eq(sx_nn_train(net, &p, train, NULL, &rep), SX_OK, "%s", sx_last_error());
    cr_assert_eq(rep.steps, 200);
    path(model, sizeof model, "model.sxm");
    cr_assert_eq(sx_nn_save(net, model), SX_OK, "%s", sx_last_error());
    sx_nn_net_free(net);
    sx_ds_images_free(train);
}

/* What the library predicts for x (n, 28, 28, 1) in batches of `batch`: the tool's way. */
static sx_tensor *library_predict(const char *model, const sx_tensor *x, int64_t batch)
{
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(model, batch, &m), SX_OK, "%s", sx_last_error());
    int64_t n = x->shape[0], os[2] = {n, 10};
    sx_tensor *out = tu_zeros(SX_F32, 2, os);
    for (int64_t r0 = 0; r0 < n; r0 += batch) {
        int64_t k = n - r0 < batch ? n - r0 : batch, xs[4] = {k, 28, 28, 1}, ks[2] = {k, 10};
        sx_tensor xv = sx_tensor_view(SX_F32, 4, xs, SX_F32P(x) + r0 * 784);
        sx_tensor ov = sx_tensor_view(SX_F32, 2, ks, SX_F32P(out) + r0 * 10);
        cr_assert_eq(sx_nn_model_predict(m, &xv, &ov), SX_OK, "%s", sx_last_error());
    }
    sx_nn_model_free(m);
    return out;
}

static void assert_same_bits(const sx_tensor *a, const sx_tensor *b)
{
    cr_assert(sx_shape_equal(a->rank, a->shape, b->rank, b->shape), "shapes differ");
    cr_assert_eq(a->dtype, b->dtype);
    cr_assert_eq(memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)), 0,
                 "values differ");
}

TestSuite(tools_cli, .init = setup, .fini = teardown, .timeout = 300);

Test(tools_cli, predict_npy_equals_model_predict)
{
    train_model();
    char mnist[512], images[600], xp[128], op[128], model[128], args[1024];
    tu_mnist_dir(mnist, sizeof mnist);
    snprintf(images, sizeof images, "%s/t10k-images-idx3-ubyte.gz", mnist);
    sx_tensor *x = NULL;
    cr_assert_eq(sx_ds_idx_read(images, SX_F32, 1.0, 23, &x), SX_OK);
    cr_assert_eq(sx_tensor_reshape(x, 4, (int64_t[]){23, 28, 28, 1}), SX_OK);
    path(xp, sizeof xp, "x.npy");
    path(op, sizeof op, "out.npy");
    path(model, sizeof model, "model.sxm");
    cr_assert_eq(sx_ds_npy_write_tensor(xp, x), SX_OK);
    run_result *r = malloc(sizeof *r);
    snprintf(args, sizeof args, "predict %s --input %s --output %s --batch 8", model, xp, op);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strstr(r->out, "23 predictions of 10 outputs") != NULL, "%s", r->out);
    sx_tensor *got = NULL;
    cr_assert_eq(sx_ds_npy_read(op, SX_F32, &got), SX_OK, "%s", sx_last_error());
    sx_tensor *want = library_predict(model, x, 8);
    assert_same_bits(got, want);
    /* a trained model: most of these are right */
    sx_tensor *lab = NULL;
    snprintf(images, sizeof images, "%s/t10k-labels-idx1-ubyte.gz", mnist);
    cr_assert_eq(sx_ds_idx_read(images, SX_F32, 1.0, 23, &lab), SX_OK);
    int correct = 0;
    for (int i = 0; i < 23; i++) {
        int best = 0;
        for (int c = 1; c < 10; c++)
            best = SX_F32P(want)[i * 10 + c] > SX_F32P(want)[i * 10 + best] ? c : best;
        correct += best == (int)SX_F32P(lab)[i];
    }
    cr_assert_geq(correct, 15, "%d of 23 right", correct);
    /* without --output: one line per example, its best class */
    snprintf(args, sizeof args, "predict %s --input %s", model, xp);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    int lines = 0;
    for (const char *p = r->out; (p = strchr(p, '\n')) != NULL; p++)
        lines++;
    cr_assert_eq(lines, 23);
    cr_assert(strncmp(r->out, "0: class ", 9) == 0, "%s", r->out);
    free(r);
    sx_tensor_free(lab);
    sx_tensor_free(got);
    sx_tensor_free(want);
    sx_tensor_free(x);
}

/* An IDX file of bytes (MNIST's first 300 test images): scaled by the model's input scale, as
 * training scaled them. */
Test(tools_cli, predict_idx_equals_model_predict)
{
    train_model();
    char images[128], op[128], model[128], args[1024];
    small_idx("t10k-images-idx3-ubyte", 300, images, sizeof images);
    path(op, sizeof op, "out.npy");
    path(model, sizeof model, "model.sxm");
    run_result *r = malloc(sizeof *r);
    snprintf(args, sizeof args, "predict %s --input %s --output %s --batch 128", model, images, op);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    sx_tensor *got = NULL, *x = NULL;
    cr_assert_eq(sx_ds_npy_read(op, SX_F32, &got), SX_OK, "%s", sx_last_error());
    cr_assert_eq(got->shape[0], 300);
    cr_assert_eq(sx_ds_idx_read(images, SX_F32, 1.0, 0, &x), SX_OK);
    cr_assert_eq(sx_tensor_reshape(x, 4, (int64_t[]){300, 28, 28, 1}), SX_OK);
    sx_tensor *want = library_predict(model, x, 128);
    assert_same_bits(got, want);
    free(r);
    sx_tensor_free(got);
    sx_tensor_free(want);
    sx_tensor_free(x);
}

/* A 40x40 gray PNG: decoded and resized to the model's 28x28x1. */
static void write_png(const char *file)
{
    FILE *f = fopen(file, "wb");
    cr_assert_not_null(f);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    cr_assert(png && info && setjmp(png_jmpbuf(png)) == 0);
    png_init_io(png, f);
    png_set_IHDR(png, info, 40, 40, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    uint8_t row[40];
    for (int y = 0; y < 40; y++) {
        for (int x = 0; x < 40; x++)
            row[x] = (x >= 18 && x < 23 && y > 5 && y < 35) ? 255 : 0; /* a "1" */
        png_write_row(png, row);
    }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
}

Test(tools_cli, predict_png_image)
{
    train_model();
    char img[128], model[128], args[512];
    path(img, sizeof img, "one.png");
    path(model, sizeof model, "model.sxm");
    write_png(img);
    run_result *r = malloc(sizeof *r);
    snprintf(args, sizeof args, "predict %s --input %s", model, img);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strncmp(r->out, "0: class ", 9) == 0 && strchr(r->out, '\n') == strrchr(r->out, '\n'),
              "%s", r->out);
    free(r);
}

Test(tools_cli, info_model_npy_and_idx)
{
    train_model();
    char mnist[512], labels[600], model[128], args[2048], npy[600];
    tu_mnist_dir(mnist, sizeof mnist);
    snprintf(labels, sizeof labels, "%s/t10k-labels-idx1-ubyte.gz", mnist);
    snprintf(npy, sizeof npy, "%s", __FILE__);
    char *slash = strrchr(npy, '/');
    snprintf(slash, sizeof npy - (size_t)(slash - npy), "/../datasets/npy/be_i2.npy");
    path(model, sizeof model, "model.sxm");
    run_result *r = malloc(sizeof *r);
    snprintf(args, sizeof args, "info %s %s %s", model, npy, labels);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strstr(r->out,
                     "model.sxm: strix model\n  network: cli_test\n  input: f32 (28,28,1)") != NULL,
              "%s", r->out);
    cr_assert(strstr(r->out, "  outputs: 10\n  input_scale: 0.0039215686274509803\n") != NULL, "%s",
              r->out);
    /* the conv kernel 3*3*1*4 + 4, the dense 676*10 + 10, the input scale's constant */
    cr_assert(strstr(r->out, "  weights: 6811 values\n") != NULL, "%s", r->out);
    /* be_i2.npy: make_fixtures.py's (i * 7 + 3) % 23 - 5 for i < 15 */
    cr_assert(strstr(r->out, "be_i2.npy: npy i16 (3,5), 15 elements\n  min=-4 max=17 mean=5.6 ") !=
                  NULL,
              "%s", r->out);
    /* MNIST's test labels: 10000 of them, 0..9, mean 4.4434 */
    cr_assert(strstr(r->out, "t10k-labels-idx1-ubyte.gz: IDX u8 (10000), 10000 elements\n  min=0 "
                             "max=9 mean=4.4434 ") != NULL,
              "%s", r->out);
    free(r);
}

Test(tools_cli, dot_and_bench)
{
    train_model();
    char model[128], dot[128], args[512];
    path(model, sizeof model, "model.sxm");
    path(dot, sizeof dot, "model.dot");
    run_result *r = malloc(sizeof *r);
    snprintf(args, sizeof args, "dot %s", model);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strncmp(r->out, "digraph", 7) == 0 && strstr(r->out, "conv2d") != NULL, "%s", r->out);
    snprintf(args, sizeof args, "dot %s --output %s --batch 4", model, dot);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    char text[4096];
    slurp(dot, text, sizeof text);
    cr_assert(strncmp(text, "digraph", 7) == 0);
    snprintf(args, sizeof args, "bench %s --batch 4 --runs 3", model);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    double lat = 0, bms = 0, ips = 0;
    cr_assert_eq(sscanf(r->out,
                        "result: batch=4 runs=3 latency_ms=%lf batch_ms=%lf "
                        "images_per_second=%lf",
                        &lat, &bms, &ips),
                 3, "%s", r->out);
    cr_assert(lat > 0 && bms > 0 && ips > 0, "%s", r->out);
    /* --profile: the same result line, then the profile on stderr, down to the costliest
     * nodes with their shapes */
    snprintf(args, sizeof args, "bench %s --batch 4 --runs 2 --profile", model);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strncmp(r->out, "result: batch=4 runs=2 ", 23) == 0, "%s", r->out);
    cr_assert(strstr(r->err, "conv2d") && strstr(r->err, "\nnode ") && strstr(r->err, "(4,"), "%s",
              r->err);
    free(r);
}

/* A fully convolutional net (6,6,2) -> conv 3x3, 4 filters, relu: (4,4,4) -> conv 1x1, 3
 * filters: (4,4,3), saved as a version-2 .sxm (an output of rank 3: results (n,4,4,3)). With
 * two: both convolutions are outputs, "features" (4,4,4) then "map" (4,4,3). */
static void save_fcn(const char *file, bool two)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("fcn", SX_F32, 11, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){6, 6, 2});
    sx_nn_conv2d_params c1 = sx_nn_conv2d_params_default(4, 3, 3), c2 = c1;
    c1.act = SX_ACT_RELU;
    c2.filters = 3, c2.kernel_h = c2.kernel_w = 1;
    sx_nn_layer *f = sx_nn_conv2d(net, x, &c1), *y = sx_nn_conv2d(net, f, &c2);
    if (two) {
        sx_nn_output(net, f, "features");
        sx_nn_output(net, y, "map");
    }
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_save(net, file), SX_OK, "%s", sx_last_error());
    sx_nn_net_free(net);
}

/* The library's results for x (n, ...) from model m in batches of `batch`: (n, result shape). */
static sx_tensor *model_results(sx_nn_model *m, const sx_tensor *x, int64_t batch)
{
    int q = sx_nn_model_output_rank(m);
    int64_t n = x->shape[0], os[SX_MAX_RANK + 1] = {n}, xrow = x->size / n;
    memcpy(os + 1, sx_nn_model_output_shape(m), (size_t)q * sizeof *os);
    sx_tensor *out = tu_zeros(SX_F32, q + 1, os);
    int64_t orow = out->size / n;
    for (int64_t r0 = 0; r0 < n; r0 += batch) {
        int64_t k = n - r0 < batch ? n - r0 : batch, xs[SX_MAX_RANK + 1], ks[SX_MAX_RANK + 1];
        memcpy(xs, x->shape, sizeof xs);
        memcpy(ks, os, sizeof ks);
        xs[0] = ks[0] = k;
        sx_tensor xv = sx_tensor_view(SX_F32, x->rank, xs, SX_F32P(x) + r0 * xrow);
        sx_tensor ov = sx_tensor_view(SX_F32, q + 1, ks, SX_F32P(out) + r0 * orow);
        cr_assert_eq(sx_nn_model_predict(m, &xv, &ov), SX_OK, "%s", sx_last_error());
    }
    return out;
}

static sx_tensor *sxm_results(const char *model, const sx_tensor *x, int64_t batch)
{
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(model, batch, &m), SX_OK, "%s", sx_last_error());
    sx_tensor *out = model_results(m, x, batch);
    sx_nn_model_free(m);
    return out;
}

/* Columns [off, off + size) of each row of t, as (n, shape...). */
static sx_tensor *columns(const sx_tensor *t, int64_t off, int rank, const int64_t *shape)
{
    int64_t n = t->shape[0], row = t->size / n, s[SX_MAX_RANK + 1] = {n};
    memcpy(s + 1, shape, (size_t)rank * sizeof *s);
    sx_tensor *c = tu_zeros(SX_F32, rank + 1, s);
    int64_t size = c->size / n;
    for (int64_t i = 0; i < n; i++)
        memcpy(SX_F32P(c) + i * size, SX_F32P(t) + i * row + off, (size_t)size * sizeof(float));
    return c;
}

static sx_tensor *read_npy(const char *file)
{
    sx_tensor *t = NULL;
    cr_assert_eq(sx_ds_npy_read(file, SX_F32, &t), SX_OK, "%s", sx_last_error());
    return t;
}

/* No file of the test's folder is a temporary one left behind (name.tmpXXXXXX). */
static void assert_no_temporary(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", dir);
    cr_assert_neq(system(cmd), 0, "a temporary file was left in %s", dir);
}

/* An output of rank 3 per example ((n,4,4,3) results) through info, predict and
 * bench; predict's .npy is the library's (n,4,4,3) array bit for bit. */
Test(tools_cli, rank4_results_through_info_predict_bench)
{
    char model[128], xp[128], op[128], args[1024];
    path(model, sizeof model, "fcn.sxm");
    path(xp, sizeof xp, "x.npy");
    path(op, sizeof op, "out.npy");
    save_fcn(model, false);
    sx_rng rng;
    sx_rng_seed(&rng, 21);
    sx_tensor *x = tu_rand(&rng, SX_F32, 4, (int64_t[]){7, 6, 6, 2}, -1, 1);
    cr_assert_eq(sx_ds_npy_write_tensor(xp, x), SX_OK);
    run_result *r = malloc(sizeof *r);
    snprintf(args, sizeof args, "info %s", model);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strstr(r->out, "  input 0 'x': (6,6,2)\n  output 0 'y': (4,4,3)\n") != NULL, "%s",
              r->out);
    cr_assert(strstr(r->out, "  outputs:") == NULL, "not an (n, classes) model: %s", r->out);
    snprintf(args, sizeof args, "predict %s --input %s --output %s --batch 3", model, xp, op);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strstr(r->out, "output 'y' (7,4,4,3)") != NULL, "%s", r->out);
    sx_tensor *got = read_npy(op), *want = sxm_results(model, x, 3);
    cr_assert_eq(got->rank, 4);
    assert_same_bits(got, want);
    assert_no_temporary();
    /* without --output: a summary per output, no classes */
    snprintf(args, sizeof args, "predict %s --input %s", model, xp);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strncmp(r->out, "output 'y' (7,4,4,3): min=", 26) == 0, "%s", r->out);
    snprintf(args, sizeof args, "bench %s --batch 3 --runs 2", model);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strncmp(r->out, "result: batch=3 runs=2 latency_ms=", 34) == 0, "%s", r->out);
    free(r);
    sx_tensor_free(got);
    sx_tensor_free(want);
    sx_tensor_free(x);
}

/* Two named outputs: one .npy per output (FILE_NAME.npy), or the one --output-name picks;
 * each the library's columns of that output bit for bit; a wrong name is a clear error. */
Test(tools_cli, two_outputs_one_file_each_or_by_name)
{
    char model[128], xp[128], op[128], f1[128], f2[128], one[128], args[1024];
    path(model, sizeof model, "two.sxm");
    path(xp, sizeof xp, "x.npy");
    path(op, sizeof op, "out.npy");
    path(f1, sizeof f1, "out_features.npy");
    path(f2, sizeof f2, "out_map.npy");
    path(one, sizeof one, "map.npy");
    save_fcn(model, true);
    sx_rng rng;
    sx_rng_seed(&rng, 22);
    sx_tensor *x = tu_rand(&rng, SX_F32, 4, (int64_t[]){5, 6, 6, 2}, -1, 1);
    cr_assert_eq(sx_ds_npy_write_tensor(xp, x), SX_OK);
    run_result *r = malloc(sizeof *r);
    snprintf(args, sizeof args, "info %s", model);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strstr(r->out, "  output 0 'features': (4,4,4)\n  output 1 'map': (4,4,3)\n") != NULL,
              "%s", r->out);
    snprintf(args, sizeof args, "predict %s --input %s --output %s --batch 2", model, xp, op);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    sx_tensor *all = sxm_results(model, x, 2);
    cr_assert_eq(all->size, 5 * (64 + 48));
    sx_tensor *wf = columns(all, 0, 3, (int64_t[]){4, 4, 4});
    sx_tensor *wm = columns(all, 64, 3, (int64_t[]){4, 4, 3});
    sx_tensor *gf = read_npy(f1), *gm = read_npy(f2);
    assert_same_bits(gf, wf);
    assert_same_bits(gm, wm);
    cr_assert(access(op, F_OK) != 0, "no %s with several outputs", op);
    snprintf(args, sizeof args, "predict %s --input %s --output %s --output-name map --batch 2",
             model, xp, one);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    sx_tensor *g1 = read_npy(one);
    assert_same_bits(g1, wm);
    assert_no_temporary();
    snprintf(args, sizeof args, "predict %s --input %s --output-name nope", model, xp);
    run(r, args);
    cr_assert_eq(r->status, 1);
    cr_assert(strstr(r->err, "has no output named 'nope' (its outputs: 'features', 'map')") != NULL,
              "%s", r->err);
    snprintf(args, sizeof args, "bench %s --batch 2 --runs 2", model);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    free(r);
    sx_tensor *ts[] = {x, all, wf, wm, gf, gm, g1};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++)
        sx_tensor_free(ts[k]);
}

/* The ONNX models of tests/tools/make_onnx.py (Debian's python3-onnx) written into dir: NULL, or
 * why a test cannot run (strix without ONNX support, no python3-onnx). */
static const char *make_onnx_models(run_result *r)
{
    run(r, "--version");
    if (strstr(r->out, "onnx: yes") == NULL)
        return "strix is built without ONNX support";
    char script[600], cmd[1024];
    snprintf(script, sizeof script, "%s", __FILE__);
    snprintf(strrchr(script, '/'), sizeof script - (size_t)(strrchr(script, '/') - script),
             "/make_onnx.py");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s 2>/dev/null", script, dir);
    return system(cmd) != 0 ? "no python3-onnx to write the models" : NULL;
}

/* An ONNX model with an NCHW output (n,3,5,5) written by tests/tools/make_onnx.py (Debian's
 * python3-onnx): info names it, predict writes the whole (n,3,5,5) array, equal to the library's
 * (sx_onnx_import) bit for bit and to numpy's reference to f32 rounding; bench runs it. */
Test(tools_cli, onnx_nchw_output_through_info_predict_bench)
{
    run_result *r = malloc(sizeof *r);
    const char *why = make_onnx_models(r);
    if (why != NULL) {
        free(r);
        cr_skip_test("%s", why);
    }
    char model[128], xp[128], ref[128], op[128], args[1024];
    path(model, sizeof model, "conv_nchw.onnx");
    path(xp, sizeof xp, "conv_x.npy");
    path(ref, sizeof ref, "conv_ref.npy");
    path(op, sizeof op, "out.npy");
    snprintf(args, sizeof args, "info %s", model);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strstr(r->out, "  input 0 'x': (2,5,5)\n  output 0 'y': (3,5,5)\n") != NULL, "%s",
              r->out);
    snprintf(args, sizeof args, "predict %s --input %s --output %s --batch 3", model, xp, op);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    sx_tensor *got = read_npy(op), *x = read_npy(xp), *want = read_npy(ref);
    cr_assert(sx_shape_equal(got->rank, got->shape, 4, (int64_t[]){4, 3, 5, 5}));
    cr_assert(tu_close(got, want, 1e-5, 1e-5));
#ifdef STRIX_HAVE_ONNX
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.batch = 3;
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_onnx_import(model, &p, &m), SX_OK, "%s", sx_last_error());
    sx_tensor *lib = model_results(m, x, 3); /* (4, 75): the model's own flattened rows */
    cr_assert_eq(sx_tensor_reshape(lib, 4, (int64_t[]){4, 3, 5, 5}), SX_OK);
    assert_same_bits(got, lib);
    sx_tensor_free(lib);
    sx_nn_model_free(m);
#endif
    snprintf(args, sizeof args, "bench %s --batch 3 --runs 2", model);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    free(r);
    sx_tensor_free(got);
    sx_tensor_free(x);
    sx_tensor_free(want);
}

/* An ONNX model with two outputs, y (n,3,5,5) and pooled (n,3): sx_onnx_import names both
 * (sx_nn_model_output) and a row of its result holds them one after another; the tool writes one
 * .npy per output, each equal to the library's columns bit for bit and to numpy's reference to
 * f32 rounding (sx_onnx_import refused any model with more than one output before). */
Test(tools_cli, onnx_two_outputs_through_import_and_predict)
{
    run_result *r = malloc(sizeof *r);
    const char *why = make_onnx_models(r);
    if (why != NULL) {
        free(r);
        cr_skip_test("%s", why);
    }
    char model[128], xp[128], op[128], f1[128], f2[128], args[1024];
    path(model, sizeof model, "two_out.onnx");
    path(xp, sizeof xp, "conv_x.npy");
    path(op, sizeof op, "out.npy");
    path(f1, sizeof f1, "out_y.npy");
    path(f2, sizeof f2, "out_pooled.npy");
    snprintf(args, sizeof args, "predict %s --input %s --output %s --batch 3", model, xp, op);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    char yr[128], pr[128];
    path(yr, sizeof yr, "conv_ref.npy");
    path(pr, sizeof pr, "pooled_ref.npy");
    sx_tensor *gy = read_npy(f1), *gp = read_npy(f2), *wy = read_npy(yr), *wp = read_npy(pr);
    cr_assert(sx_shape_equal(gy->rank, gy->shape, 4, (int64_t[]){4, 3, 5, 5}));
    cr_assert(sx_shape_equal(gp->rank, gp->shape, 2, (int64_t[]){4, 3}));
    cr_assert(tu_close(gy, wy, 1e-5, 1e-5));
    cr_assert(tu_close(gp, wp, 1e-5, 1e-5));
    /* converted to .sxm, the model keeps both outputs (a version-2 file) and their bits */
    char sxm[128], c1[128], c2[128], cp[128];
    path(sxm, sizeof sxm, "two_out.sxm");
    path(cp, sizeof cp, "conv.npy");
    path(c1, sizeof c1, "conv_y.npy");
    path(c2, sizeof c2, "conv_pooled.npy");
    snprintf(args, sizeof args, "convert %s %s", model, sxm);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    snprintf(args, sizeof args, "predict %s --input %s --output %s --batch 3", sxm, xp, cp);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    sx_tensor *cy = read_npy(c1), *cpo = read_npy(c2);
    assert_same_bits(cy, gy);
    assert_same_bits(cpo, gp);
    sx_tensor_free(cy);
    sx_tensor_free(cpo);
#ifdef STRIX_HAVE_ONNX
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.batch = 3;
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_onnx_import(model, &p, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_n_outputs(m), 2);
    int rk = 0;
    const int64_t *sh = NULL;
    cr_assert_str_eq(sx_nn_model_output(m, 0, &rk, &sh), "y");
    cr_assert(sx_shape_equal(rk, sh, 3, (int64_t[]){3, 5, 5}));
    cr_assert_str_eq(sx_nn_model_output(m, 1, &rk, &sh), "pooled");
    cr_assert(sx_shape_equal(rk, sh, 1, (int64_t[]){3}));
    sx_tensor *x = read_npy(xp), *all = model_results(m, x, 3);
    cr_assert_eq(all->size, 4 * (75 + 3));
    sx_tensor *ly = columns(all, 0, 3, (int64_t[]){3, 5, 5}),
              *lp = columns(all, 75, 1, (int64_t[]){3});
    assert_same_bits(gy, ly);
    assert_same_bits(gp, lp);
    sx_tensor *ts[] = {x, all, ly, lp};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++)
        sx_tensor_free(ts[k]);
    sx_nn_model_free(m);
#endif
    free(r);
    sx_tensor *ts2[] = {gy, gp, wy, wp};
    for (size_t k = 0; k < sizeof ts2 / sizeof ts2[0]; k++)
        sx_tensor_free(ts2[k]);
}

/* An ONNX model with two inputs, token ids "ids" (n,4) of int64 and floats "feat" (n,3), and two
 * outputs (tests/tools/make_onnx.py): predict takes one .npy per input by name (in either order,
 * or unnamed in the inputs' order) and writes one .npy per output, equal to numpy's reference to
 * f32 rounding; bench runs it on random inputs (0s for the ids) and on the given ones; a missing,
 * unknown, repeated or mis-shaped input is one clear line and exit 1. */
Test(tools_cli, onnx_named_inputs_int64_ids_one_file_each)
{
    run_result *r = malloc(sizeof *r);
    const char *why = make_onnx_models(r);
    if (why != NULL) {
        free(r);
        cr_skip_test("%s", why);
    }
    char model[128], ids[128], feat[128], op[128], f1[128], f2[128], args[1024];
    path(model, sizeof model, "two_in.onnx");
    path(ids, sizeof ids, "ids.npy");
    path(feat, sizeof feat, "feat.npy");
    path(op, sizeof op, "out.npy");
    path(f1, sizeof f1, "out_emb.npy");
    path(f2, sizeof f2, "out_y.npy");
    char er[128], yr[128];
    path(er, sizeof er, "emb_ref.npy");
    path(yr, sizeof yr, "y_ref.npy");
    sx_tensor *we = read_npy(er), *wy = read_npy(yr);
    const char *forms[] = {"--input ids=%s --input feat=%s", "--input feat=%2$s --input ids=%1$s",
                           "--input %s --input %s"};
    for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++) {
        char ins[400];
        snprintf(ins, sizeof ins, forms[k], ids, feat);
        snprintf(args, sizeof args, "predict %s %s --output %s --batch 2", model, ins, op);
        remove(f1);
        remove(f2);
        run(r, args);
        cr_assert_eq(r->status, 0, "%s: %s", args, r->err);
        sx_tensor *ge = read_npy(f1), *gy = read_npy(f2);
        cr_assert(sx_shape_equal(ge->rank, ge->shape, 3, (int64_t[]){5, 4, 3}));
        cr_assert(sx_shape_equal(gy->rank, gy->shape, 2, (int64_t[]){5, 3}));
        cr_assert(tu_close(ge, we, 1e-6, 1e-6), "%s", args);
        cr_assert(tu_close(gy, wy, 1e-5, 1e-5), "%s", args);
        sx_tensor_free(ge);
        sx_tensor_free(gy);
    }
    snprintf(args, sizeof args, "bench %s --batch 3 --runs 2", model);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    snprintf(args, sizeof args, "bench %s --batch 8 --runs 2 --input ids=%s --input feat=%s", model,
             ids, feat);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strstr(r->out, "result: batch=8 runs=2") != NULL, "%s", r->out);
    const struct {
        const char *ins, *msg;
    } bad[] = {
        {"--input feat=FEAT", "no --input for 'ids' (MODEL's inputs: 'ids' (4), 'feat' (3);"},
        {"--input feat=FEAT --input idz=IDS", "has no input named 'idz' (its inputs: 'ids' (4), "
                                              "'feat' (3))"},
        {"--input feat=FEAT --input feat=IDS", "input 'feat' given twice"},
        {"--input ids=FEAT --input feat=IDS",
         "input 'ids': FEAT has shape (5,3), want (n,4) or (4)"},
        {"--input ids=IDS --input feat=FEAT --input IDS", "3 inputs given, MODEL takes 2"},
        {"--input ids=IDS --input feat=ONE", "input 'feat' has 1 examples, 'ids' 5"},
    };
    char one[128];
    path(one, sizeof one, "one.npy");
    sx_tensor *t = tu_zeros(SX_F32, 1, (int64_t[]){3});
    cr_assert_eq(sx_ds_npy_write_tensor(one, t), SX_OK);
    sx_tensor_free(t);
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char ins[600] = "", msg[600] = "";
        for (const char *c = bad[k].ins; *c; c++) { /* IDS, FEAT, ONE: the files */
            bool i = strncmp(c, "IDS", 3) == 0, f = strncmp(c, "FEAT", 4) == 0,
                 o = strncmp(c, "ONE", 3) == 0;
            snprintf(ins + strlen(ins), sizeof ins - strlen(ins), "%s",
                     i   ? ids
                     : f ? feat
                     : o ? one
                         : (char[]){*c, 0});
            c += i || o ? 2 : f ? 3 : 0;
        }
        for (const char *c = bad[k].msg; *c; c++) {
            bool f = strncmp(c, "FEAT", 4) == 0, m = strncmp(c, "MODEL", 5) == 0;
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "%s",
                     f   ? feat
                     : m ? model
                         : (char[]){*c, 0});
            c += f ? 3 : m ? 4 : 0;
        }
        snprintf(args, sizeof args, "predict %s %s", model, ins);
        run(r, args);
        cr_assert_eq(r->status, 1, "%s", args);
        cr_assert(strstr(r->err, msg) != NULL, "%s: want '%s', got %s", args, msg, r->err);
        cr_assert_eq(strchr(r->err, '\n'), r->err + strlen(r->err) - 1, "one line: %s", r->err);
    }
    free(r);
    sx_tensor_free(we);
    sx_tensor_free(wy);
}

/* An ONNX output of rank 1, (n): one value per example, the model's output (1); info shows the
 * file's shape () without the batch axis, predict writes the (n) array, the library's results bit
 * for bit (at the batch and at the smaller last batch) and numpy's reference to f32 rounding. */
Test(tools_cli, onnx_rank1_output_is_one_value_per_example)
{
    run_result *r = malloc(sizeof *r);
    const char *why = make_onnx_models(r);
    if (why != NULL) {
        free(r);
        cr_skip_test("%s", why);
    }
    char model[128], xp[128], ref[128], op[128], args[1024];
    path(model, sizeof model, "rank1.onnx");
    path(xp, sizeof xp, "conv_x.npy");
    path(ref, sizeof ref, "score_ref.npy");
    path(op, sizeof op, "score.npy");
    snprintf(args, sizeof args, "info %s", model);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strstr(r->out, "  input 0 'x': (2,5,5)\n  output 0 'score': ()\n") != NULL, "%s",
              r->out);
    snprintf(args, sizeof args, "predict %s --input %s --output %s --batch 3", model, xp, op);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    sx_tensor *got = read_npy(op), *want = read_npy(ref);
    cr_assert(sx_shape_equal(got->rank, got->shape, 1, (int64_t[]){4}));
    cr_assert(tu_close(got, want, 1e-5, 1e-5));
#ifdef STRIX_HAVE_ONNX
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.batch = 3;
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_onnx_import(model, &p, &m), SX_OK, "%s", sx_last_error());
    cr_assert(
        sx_shape_equal(sx_nn_model_output_rank(m), sx_nn_model_output_shape(m), 1, (int64_t[]){1}));
    sx_tensor *x = read_npy(xp), *all = model_results(m, x, 3);
    cr_assert(sx_shape_equal(all->rank, all->shape, 2, (int64_t[]){4, 1}));
    cr_assert_eq(memcmp(all->data, got->data, 4 * sizeof(float)), 0);
    sx_tensor_free(x);
    sx_tensor_free(all);
    sx_nn_model_free(m);
#endif
    sx_tensor_free(got);
    sx_tensor_free(want);
    free(r);
}

/* .sxm -> .sxm: the loaded model's graph saved again predicts the same bits;
 * .sxm -> .onnx needs the onnx module. */
Test(tools_cli, convert)
{
    train_model();
    char model[128], again[128], onnx[128], args[512];
    path(model, sizeof model, "model.sxm");
    path(again, sizeof again, "again.sxm");
    path(onnx, sizeof onnx, "model.onnx");
    run_result *r = malloc(sizeof *r);
    snprintf(args, sizeof args, "convert %s %s", model, again);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    sx_rng rng;
    sx_rng_seed(&rng, 5);
    sx_tensor *x = tu_rand(&rng, SX_F32, 4, (int64_t[]){6, 28, 28, 1}, 0, 1);
    sx_tensor *a = library_predict(model, x, 6), *b = library_predict(again, x, 6);
    assert_same_bits(b, a);
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_tensor_free(x);
    run(r, "--version");
    bool onnx_built = strstr(r->out, "onnx: yes") != NULL;
    snprintf(args, sizeof args, "convert %s %s", model, onnx);
    run(r, args);
    if (onnx_built) {
        cr_assert_eq(r->status, 0, "%s", r->err);
        snprintf(args, sizeof args, "convert %s %s", onnx, again);
        run(r, args);
        cr_assert_eq(r->status, 0, "%s", r->err);
        /* .sxm -> .onnx -> .sxm: the same outputs (to f32 rounding: the layout changes), at
         * batch 1 and at batch 6 (the importer keeps the batch axis symbolic in its reshapes,
         * so the converted model loads for any batch) */
        sx_tensor *x2 = tu_rand(&rng, SX_F32, 4, (int64_t[]){6, 28, 28, 1}, 0, 1);
        sx_tensor *a2 = library_predict(model, x2, 6), *b2 = library_predict(again, x2, 1);
        cr_assert(tu_close(b2, a2, 1e-5, 1e-6));
        sx_tensor_free(b2);
        b2 = library_predict(again, x2, 6);
        cr_assert(tu_close(b2, a2, 1e-5, 1e-6));
        sx_tensor_free(a2);
        sx_tensor_free(b2);
        sx_tensor_free(x2);
    } else {
        cr_assert_eq(r->status, 1);
        cr_assert(strstr(r->err, "built without ONNX support") != NULL, "%s", r->err);
    }
    free(r);
}

/* strix train is mnist_train: the same options and the same trained bits (on a small MNIST: 200
 * training and 100 test images, raw IDX files in the test's folder). */
Test(tools_cli, train_is_mnist_train)
{
    char file[128], model[128], args[1024];
    small_idx("train-images-idx3-ubyte", 200, file, sizeof file);
    small_idx("train-labels-idx1-ubyte", 200, file, sizeof file);
    small_idx("t10k-images-idx3-ubyte", 100, file, sizeof file);
    small_idx("t10k-labels-idx1-ubyte", 100, file, sizeof file);
    path(model, sizeof model, "m.sxm");
    run_result *r = malloc(sizeof *r);
    snprintf(args, sizeof args, "train --data %s --batch 50 --seed 3 --quiet --save %s --threads 2",
             dir, model);
    run(r, args);
    cr_assert_eq(r->status, 0, "%s", r->err);
    cr_assert(strncmp(r->out, "result: test_accuracy=0.", 24) == 0, "%s", r->out);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(model, 2, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_classes(m), 10);
    sx_nn_model_free(m);
#ifdef STRIX_MNIST_TRAIN
    /* examples/mnist_train with the same options writes the same file, byte for byte */
    char cmd[2048], other[128];
    path(other, sizeof other, "other.sxm");
    snprintf(cmd, sizeof cmd,
             "%s --data %s --batch 50 --seed 3 --quiet --save %s --threads 2 >/dev/null",
             STRIX_MNIST_TRAIN, dir, other);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", model, other);
    cr_assert_eq(system(cmd), 0, "strix train and mnist_train saved different models");
#endif
    run(r, "train --help");
    cr_assert_eq(r->status, 0);
    cr_assert(strncmp(r->out, "usage: strix train [--data DIR]", 31) == 0, "%s", r->out);
    free(r);
}

/* Every bad argument: the stated exit status and exactly one line "strix ..." on stderr. */
Test(tools_cli, bad_arguments_exit_non_zero_with_one_line)
{
    char model[128], npy[128], txt[128];
    path(model, sizeof model, "model.sxm");
    path(npy, sizeof npy, "x.npy");
    path(txt, sizeof txt, "notes.txt");
    FILE *f = fopen(txt, "w");
    cr_assert(f != NULL && fputs("hello\n", f) >= 0 && fclose(f) == 0);
    float v[3] = {1, 2, 3};
    cr_assert_eq(sx_ds_npy_write(npy, SX_DS_NPY_F32, 1, (int64_t[]){3}, v), SX_OK);
    cr_assert_eq(sx_ds_npy_write(model, SX_DS_NPY_F32, 1, (int64_t[]){3}, v), SX_OK);
    const struct {
        const char *args;
        int status;
        const char *err; /* a piece of the message */
    } cases[] = {
        {"", 2, "usage: strix COMMAND"},
        {"frobnicate", 2, "unknown command 'frobnicate'"},
        {"info", 2, "no FILE given"},
        {"info --what", 2, "unknown option --what"},
        {"info /nonexistent.npy", 1, "/nonexistent.npy: cannot open"},
        {"info TXT", 1, "not a .npy or IDX file"},
        {"predict", 2, "no MODEL"},
        {"predict MODEL", 2, "no --input FILE"},
        {"predict MODEL --input", 2, "bad or missing value for --input"},
        {"predict MODEL --input NPY --batch 0", 2, "bad or missing value for --batch"},
        {"predict MODEL --input NPY --batch x", 2, "--batch"},
        {"predict MODEL --input NPY --scale nan", 2, "--scale"},
        {"predict MODEL --input NPY --output out.txt", 2, "must end in .npy"},
        {"predict MODEL --input NPY --output-name", 2, "bad or missing value for --output-name"},
        {"predict MODEL --input NPY --bogus", 2, "unknown option --bogus"},
        {"predict MODEL NPY --input NPY", 2, "unexpected argument"},
        {"predict /nonexistent.sxm --input NPY", 1, "/nonexistent.sxm"},
        {"predict NPY --input NPY", 1, "not a model file"},
        {"convert", 2, "want IN and OUT"},
        {"convert MODEL", 2, "want IN and OUT"},
        {"convert MODEL out.txt", 2, "must end in .sxm or .onnx"},
        {"convert a.onnx b.onnx", 2, "both .onnx"},
        {"convert MODEL a.sxm extra", 2, "unexpected argument"},
        {"convert /nonexistent.sxm out.sxm", 1, "/nonexistent.sxm"},
        {"dot", 2, "no MODEL"},
        {"dot MODEL --batch -1", 2, "--batch"},
        {"dot MODEL --output", 2, "--output"},
        {"dot /nonexistent.sxm", 1, "/nonexistent.sxm"},
        {"bench", 2, "no MODEL"},
        {"bench MODEL --runs 0", 2, "--runs"},
        {"bench MODEL --what", 2, "unknown option"},
        {"bench /nonexistent.sxm", 1, "/nonexistent.sxm"},
        {"train --epochs 0", 2, "--epochs"},
        {"train --what", 2, "unknown option --what"},
        {"train --data /nonexistent", 1, "/nonexistent"},
        {"onnx-test", 2, "no DIR"},
        {"onnx-test --what", 2, "unknown option"},
        {"onnx-test /nonexistent-dir", 1, "onnx-test"},
        {"onnx-test DIR --rtol -1", 2, "--rtol"},
    };
    run_result *r = malloc(sizeof *r);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char args[1024] = "", *p = args;
        /* MODEL and NPY stand for the files made above (MODEL is an .npy file named .sxm) */
        for (const char *s = cases[k].args; *s;) {
            if (strncmp(s, "MODEL", 5) == 0)
                p += sprintf(p, "%s", model), s += 5;
            else if (strncmp(s, "NPY", 3) == 0)
                p += sprintf(p, "%s", npy), s += 3;
            else if (strncmp(s, "TXT", 3) == 0)
                p += sprintf(p, "%s", txt), s += 3;
            else
                *p++ = *s++, *p = '\0';
        }
        run(r, args);
        cr_expect_eq(r->status, cases[k].status, "strix %s: status %d, want %d (%s)", args,
                     r->status, cases[k].status, r->err);
        const char *nl = strchr(r->err, '\n');
        bool one_line = nl != NULL && nl[1] == '\0' && strncmp(r->err, "strix", 5) == 0;
        if (cases[k].status == 2 && cases[k].args[0] == '\0')
            one_line = strncmp(r->err, "usage: strix", 12) == 0; /* the command list */
        if (strncmp(cases[k].args, "train", 5) == 0) /* mnist_train's messages: the first line */
            one_line = strncmp(r->err, "strix train: ", 13) == 0;
        cr_expect(one_line, "strix %s: stderr is not one 'strix ...' line: '%s'", args, r->err);
        cr_expect(strstr(r->err, cases[k].err) != NULL, "strix %s: stderr '%s' lacks '%s'", args,
                  r->err, cases[k].err);
    }
    free(r);
}

Test(tools_cli, help_and_version)
{
    const char *cmds[] = {"info", "predict", "convert", "dot", "bench", "train", "onnx-test"};
    run_result *r = malloc(sizeof *r);
    for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++) {
        char args[64];
        snprintf(args, sizeof args, "%s --help", cmds[k]);
        run(r, args);
        cr_assert_eq(r->status, 0, "%s", args);
        char want[64];
        snprintf(want, sizeof want, "usage: strix %s", cmds[k]);
        cr_assert(strncmp(r->out, want, strlen(want)) == 0, "%s: %s", args, r->out);
        cr_assert_eq(r->err[0], '\0');
    }
    run(r, "--help");
    cr_assert(r->status == 0 && strstr(r->out, "onnx-test") != NULL);
    run(r, "--version");
    cr_assert(r->status == 0 && strncmp(r->out, "strix 0.", 8) == 0, "%s", r->out);
    free(r);
}

/* sx_nn_model_save (what `convert` calls): NULL arguments and training models are refused; a
 * compiled inference model saves its network. */
Test(tools_cli, model_save_errors_and_compiled_models)
{
    cr_assert_eq(sx_nn_model_save(NULL, "/tmp/x.sxm"), SX_E_ARG);
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("save_test", SX_F32, 1, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 1, (int64_t[]){4});
    x = sx_nn_linear(net, x, 3, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK);
    sx_nn_model *train = NULL, *infer = NULL;
    cr_assert_eq(sx_nn_compile_train(net, NULL, 2, &train), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_save(train, "/tmp/x.sxm"), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "training model") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_save(train, NULL), SX_E_ARG);
    cr_assert_eq(sx_nn_compile_infer(net, 2, &infer), SX_OK);
    char file[128];
    path(file, sizeof file, "compiled.sxm");
    cr_assert_eq(sx_nn_model_save(infer, file), SX_OK, "%s", sx_last_error());
    sx_nn_model *loaded = NULL;
    cr_assert_eq(sx_nn_load(file, 2, &loaded), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_classes(loaded), 3);
    sx_nn_model_free(loaded);
    sx_nn_model_free(infer);
    sx_nn_model_free(train);
    sx_nn_net_free(net);
}

/* onnx-test on one ONNX backend node test (Abs) when strix has its onnx module; else a clear
 * refusal. */
Test(tools_cli, onnx_test_one_case)
{
    const char *abs_case = "/usr/include/onnx/backend/test/data/node/test_abs";
    run_result *r = malloc(sizeof *r);
    run(r, "--version");
    bool onnx_built = strstr(r->out, "onnx: yes") != NULL;
    char args[256];
    snprintf(args, sizeof args, "onnx-test %s", abs_case);
    if (onnx_built && access(abs_case, F_OK) == 0) {
        run(r, args);
        cr_assert_eq(r->status, 0, "%s", r->err);
        cr_assert(strstr(r->out, "result: cases=1 supported=1 passed=1 failed=0") != NULL, "%s",
                  r->out);
    } else if (!onnx_built) {
        run(r, args);
        cr_assert_eq(r->status, 1);
        cr_assert(strstr(r->err, "built without ONNX support") != NULL, "%s", r->err);
    }
    free(r);
}

/* A table model: strix predict reads a CSV file's columns by the model's feature names (any
 * order, a label column ignored), prints class names for a classifier and each row's values
 * for a regression, equal to the library's predictions of the raw rows. */
Test(tools_cli, predict_csv_by_feature_names)
{
    const char *feat[3] = {"a", "b", "c"}, *cls[2] = {"no", "yes"};
    double rows[4][3] = {{1, 20, 300}, {-1, 5, 100}, {0.5, -7, 250}, {2, 0, -40}};
    double mean[3] = {0.5, 5, 150}, sd[3] = {1, 10, 100};
    for (int reg = 0; reg < 2; reg++) {
        sx_nn_net *net = NULL;
        cr_assert_eq(sx_nn_net_new("table", SX_F64, 5, &net), SX_OK);
        sx_nn_layer *x = sx_nn_input(net, 1, (int64_t[]){3});
        x = sx_nn_linear(net, x, 6, SX_ACT_TANH);
        sx_nn_linear(net, x, reg ? 1 : 2, reg ? SX_ACT_NONE : SX_ACT_SOFTMAX);
        cr_assert_eq(sx_nn_net_set_feature_names(net, 3, feat), SX_OK);
        cr_assert_eq(sx_nn_net_set_normalization(net, 3, mean, sd), SX_OK);
        double tm = 1000, ts = 50;
        cr_assert_eq(reg ? sx_nn_net_set_target_scaling(net, 1, &tm, &ts)
                         : sx_nn_net_set_class_names(net, 2, cls),
                     SX_OK);
        char model[128], csv[128], args[512];
        path(model, sizeof model, "table.sxm");
        path(csv, sizeof csv, "table.csv");
        cr_assert_eq(sx_nn_save(net, model), SX_OK, "%s", sx_last_error());
        FILE *f = fopen(csv, "w");
        cr_assert_not_null(f);
        fprintf(f, "c,label,a,b\n"); /* another order, with a label column */
        for (int i = 0; i < 4; i++)
            fprintf(f, "%g,%s,%g,%g\n", rows[i][2], i % 2 ? "yes" : "no", rows[i][0], rows[i][1]);
        fclose(f);
        sx_nn_model *m = NULL;
        cr_assert_eq(sx_nn_load(model, 4, &m), SX_OK, "%s", sx_last_error());
        sx_tensor *xt = tu_zeros(SX_F64, 2, (int64_t[]){4, 3});
        memcpy(xt->data, rows, sizeof rows);
        sx_tensor *o = tu_zeros(SX_F64, 2, (int64_t[]){4, reg ? 1 : 2});
        cr_assert_eq(sx_nn_model_predict(m, xt, o), SX_OK, "%s", sx_last_error());
        char want[1024] = "";
        for (int i = 0; i < 4; i++) {
            size_t at = strlen(want);
            const double *v = SX_F64P(o) + i * (reg ? 1 : 2);
            if (reg)
                snprintf(want + at, sizeof want - at, "%d: %.9g\n", i, v[0]);
            else
                snprintf(want + at, sizeof want - at, "%d: class %d %s (%.6g)\n", i, v[1] > v[0],
                         cls[v[1] > v[0]], v[1] > v[0] ? v[1] : v[0]);
        }
        run_result *r = malloc(sizeof *r);
        snprintf(args, sizeof args, "predict %s --input %s", model, csv);
        run(r, args);
        cr_assert_eq(r->status, 0, "%s", r->err);
        cr_assert_str_eq(r->out, want);
        if (reg) /* in the targets' units */
            cr_assert(fabs(SX_F64P(o)[0] - 1000) < 200, "%g", SX_F64P(o)[0]);
        free(r);
        sx_tensor_free(o);
        sx_tensor_free(xt);
        sx_nn_model_free(m);
        sx_nn_net_free(net);
    }
}
