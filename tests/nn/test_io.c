/* Model files: sx_nn_save then sx_nn_load gives a model whose predictions equal the original
 * network's bit for bit (lambda layers included, any batch size up to the loaded one), and every
 * bad file (a checkpoint, truncated, one corrupted byte, missing, not a strix file) is a clean
 * error with a message; a save that cannot be written leaves no file behind. */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn_impl.h"
#include "nn_layer_calls.h"

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sx_nn_io_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

static void tmp_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

/* Entries of tmpdir (without . and ..). */
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

/* x * scale + shift with the constants inside the graph: the saved model must keep them. */
static sx_cg_node *affine(sx_cg_graph *g, sx_cg_node *x, void *ctx)
{
    const double *c = ctx;
    return sx_cg_add_scalar(g, sx_cg_mul_scalar(g, x, c[0]), c[1]);
}

static sx_cg_node *square(sx_cg_graph *g, sx_cg_node *x, void *ctx)
{
    (void)ctx;
    return sx_cg_sqr(g, x);
}

static double affine_ctx[2] = {1.0 / 256.0, -0.25};

/* A network of most layer kinds, with two lambdas, a merge and batch norm whose running
 * statistics are not the defaults. */
static sx_nn_net *io_net(sx_dtype dt, uint64_t seed)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("io", dt, seed, &net), SX_OK);
    sx_nn_net_set_input_scale(net, 1.0);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){10, 10, 1});
    x = sx_nn_lambda(net, x, affine, affine_ctx, "affine");
    sx_nn_layer *c = t_conv2d(net, x, 3, 3, 4, 1, SX_PAD_SAME, SX_ACT_RELU);
    sx_nn_layer *bn = t_batch_norm(net, c, 0.9, 1e-3);
    sx_nn_layer *sq = sx_nn_lambda(net, c, square, NULL, "square");
    sx_nn_layer *pair[2] = {bn, sq};
    x = sx_nn_add(net, 2, pair);
    x = t_max_pool2d(net, x, 2, 2, 2, SX_PAD_VALID);
    x = sx_nn_dropout(net, x, 0.3);
    x = sx_nn_padding2d(net, x, 1, 0, 0, 1);
    x = t_avg_pool2d(net, x, 2, 2, 2, SX_PAD_SAME);
    x = sx_nn_fully_connected(net, x, 12, SX_ACT_TANH);
    x = sx_nn_linear(net, x, 5, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_rng r;
    sx_rng_seed(&r, seed + 1);
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            nn_param *p = &net->layers[i]->params[k];
            bool var = strstr(p->name, "running_var") != NULL;
            cr_assert_eq(sx_tensor_rand_uniform(p->value, &r, var ? 0.5 : -0.5, var ? 2 : 0.5),
                         SX_OK);
        }
    return net;
}

static sx_tensor *pixels(sx_rng *r, sx_dtype dt, int64_t n)
{
    int64_t s[4] = {n, 10, 10, 1};
    sx_tensor *x = tu_rand(r, dt, 4, s, 0, 256);
    for (int64_t i = 0; i < x->size; i++)
        sx_tensor_set(x, i, floor(sx_tensor_get(x, i)));
    return x;
}

static void round_trip(sx_dtype dt)
{
    char path[128];
    tmp_path(path, sizeof path, dt == SX_F32 ? "model32.sxm" : "model64.sxm");
    sx_nn_net *net = io_net(dt, 3);
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    cr_assert_eq(dir_entries(tmpdir), 1, "temporary files left behind");

    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(path, 100, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_input_rank(m), 3);
    cr_assert_eq(sx_nn_model_input_shape(m)[0], 10);
    cr_assert_eq(sx_nn_model_input_shape(m)[1], 10);
    cr_assert_eq(sx_nn_model_input_shape(m)[2], 1);
    cr_assert_eq(sx_nn_model_classes(m), 5);
    cr_assert_eq(sx_nn_model_input_scale(m), 1.0);
    cr_assert_eq(sx_nn_model_dtype(m), dt);

    sx_nn_model *orig = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 100, &orig), SX_OK, "%s", sx_last_error());
    sx_rng r;
    sx_rng_seed(&r, 5);
    const int64_t sizes[5] = {1, 7, 100, 7, 1};
    for (int i = 0; i < 5; i++) {
        int64_t n = sizes[i], os[2] = {n, 5};
        sx_tensor *x = pixels(&r, dt, n);
        sx_tensor *a = tu_zeros(dt, 2, os), *b = tu_zeros(dt, 2, os);
        cr_assert_eq(sx_nn_model_predict(orig, x, a), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_nn_model_predict(m, x, b), SX_OK, "%s", sx_last_error());
        cr_assert_eq(memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(dt)), 0,
                     "batch %lld: predictions differ (%.9g vs %.9g)", (long long)n,
                     sx_tensor_get(a, 0), sx_tensor_get(b, 0));
        /* the outputs are probabilities (the network is not trivial) */
        double s = 0;
        for (int k = 0; k < 5; k++)
            s += sx_tensor_get(b, k);
        cr_assert(fabs(s - 1) < 1e-5, "row sum %g", s);
        sx_tensor_free(x);
        sx_tensor_free(a);
        sx_tensor_free(b);
    }
    sx_nn_model_free(orig);
    sx_nn_model_free(m);

    /* loading again after the network changed: the file keeps the saved weights */
    cr_assert_eq(sx_tensor_fill(net->layers[2]->params[0].value, 0.0), SX_OK);
    cr_assert_eq(sx_nn_load(path, 3, &m), SX_OK, "%s", sx_last_error());
    sx_nn_net *fresh = io_net(dt, 3);
    cr_assert_eq(sx_nn_compile_infer(fresh, 3, &orig), SX_OK);
    int64_t os[2] = {3, 5};
    sx_tensor *x = pixels(&r, dt, 3), *a = tu_zeros(dt, 2, os), *b = tu_zeros(dt, 2, os);
    cr_assert_eq(sx_nn_model_predict(orig, x, a), SX_OK);
    cr_assert_eq(sx_nn_model_predict(m, x, b), SX_OK, "%s", sx_last_error());
    cr_assert_eq(memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(dt)), 0);
    /* more examples than the loaded batch, a wrong input shape, a wrong output */
    sx_tensor *x4 = pixels(&r, dt, 4), *o4 = tu_zeros(dt, 2, (int64_t[]){4, 5});
    cr_assert_eq(sx_nn_model_predict(m, x4, o4), SX_E_SHAPE);
    sx_tensor *wrong = tu_zeros(dt, 4, (int64_t[]){3, 10, 9, 1});
    cr_assert_neq(sx_nn_model_predict(m, wrong, b), SX_OK);
    sx_tensor *small = tu_zeros(dt, 2, (int64_t[]){3, 4});
    cr_assert_neq(sx_nn_model_predict(m, x, small), SX_OK);
    cr_assert_eq(sx_nn_model_predict(m, NULL, b), SX_E_ARG);
    cr_assert_eq(sx_nn_model_predict(NULL, x, b), SX_E_ARG);
    sx_tensor_free(x4);
    sx_tensor_free(o4);
    sx_tensor_free(wrong);
    sx_tensor_free(small);
    sx_tensor_free(x);
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_nn_model_free(orig);
    sx_nn_model_free(m);
    sx_nn_net_free(fresh);
    sx_nn_net_free(net);
}

Test(nn_io, save_load_round_trip_f32, .init = make_tmpdir, .fini = remove_tmpdir)
{
    round_trip(SX_F32);
}

Test(nn_io, save_load_round_trip_f64, .init = make_tmpdir, .fini = remove_tmpdir)
{
    round_trip(SX_F64);
}

/* sx_nn_load gives the model type sx_nn_compile_infer gives: the same accessors, the same
 * predict checks, and no training step. */
Test(nn_io, a_loaded_model_is_an_inference_model, .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[128];
    tmp_path(path, sizeof path, "m.sxm");
    sx_nn_net *net = io_net(SX_F32, 4);
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_model *m = NULL, *c = NULL;
    cr_assert_eq(sx_nn_load(path, 4, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_compile_infer(net, 4, &c), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_input_rank(c), sx_nn_model_input_rank(m));
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sx_nn_model_input_shape(c)[i], sx_nn_model_input_shape(m)[i]);
    cr_assert_eq(sx_nn_model_classes(c), 5);
    cr_assert_eq(sx_nn_model_input_scale(c), 1.0);
    cr_assert_eq(sx_nn_model_dtype(c), SX_F32);
    cr_assert_eq(sx_nn_model_report(m).nodes_before, 0);
    cr_assert_not_null(sx_nn_model_graph(m));

    sx_rng r;
    sx_rng_seed(&r, 6);
    sx_tensor *x = pixels(&r, SX_F32, 4), *y = tu_zeros(SX_F32, 2, (int64_t[]){4, 5});
    cr_assert_eq(sx_nn_model_step(m, x, y, 0.1, 1, NULL, NULL), SX_E_ARG);
    /* the same checks of x and out for both */
    sx_tensor *x64 = tu_zeros(SX_F64, 4, (int64_t[]){4, 10, 10, 1});
    sx_tensor *x9 = tu_zeros(SX_F32, 4, (int64_t[]){4, 9, 10, 1});
    sx_tensor *o64 = tu_zeros(SX_F64, 2, (int64_t[]){4, 5});
    sx_tensor *o6 = tu_zeros(SX_F32, 2, (int64_t[]){4, 6});
    sx_nn_model *both[2] = {m, c};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(sx_nn_model_predict(both[i], x64, y), SX_E_DTYPE);
        cr_assert_eq(sx_nn_model_predict(both[i], x9, y), SX_E_SHAPE);
        cr_assert_eq(sx_nn_model_predict(both[i], x, o64), SX_E_DTYPE);
        cr_assert_eq(sx_nn_model_predict(both[i], x, o6), SX_E_SHAPE);
    }
    sx_tensor_free(x64);
    sx_tensor_free(x9);
    sx_tensor_free(o64);
    sx_tensor_free(o6);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_nn_model_free(m);
    sx_nn_model_free(c);
    sx_nn_net_free(net);
}

Test(nn_io, input_scale_is_saved, .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[128];
    tmp_path(path, sizeof path, "scale.sxm");
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("s", SX_F32, 1, &net), SX_OK);
    cr_assert_eq(sx_nn_net_input_scale(net), 0); /* not set: the first data decide */
    sx_nn_net_set_input_scale(net, 0.125);
    cr_assert_eq(sx_nn_net_input_scale(net), 0.125);
    sx_nn_layer *x = sx_nn_input(net, 1, (int64_t[]){3});
    sx_nn_linear(net, x, 2, SX_ACT_NONE);
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(path, 1, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_input_scale(m), 0.125);
    cr_assert_eq(sx_nn_model_input_rank(m), 1);
    cr_assert_eq(sx_nn_model_classes(m), 2);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- bad files */

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void write_all(const char *path, const unsigned char *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(b, 1, len, f), len);
    fclose(f);
}

/* Loading `path` fails with `want` (0: any error), a message naming the file, and no model. */
static void load_fails(const char *path, sx_status want, const char *what)
{
    sx_nn_model *m = (sx_nn_model *)1;
    sx_error_clear();
    sx_status s = sx_nn_load(path, 4, &m);
    cr_assert_neq(s, SX_OK, "%s: loaded", what);
    if (want != SX_OK)
        cr_assert_eq(s, want, "%s: %s, want %s (%s)", what, sx_status_str(s), sx_status_str(want),
                     sx_last_error());
    cr_assert_null(m, "%s", what);
    cr_assert(strstr(sx_last_error(), path) != NULL, "%s: message '%s' does not name the file",
              what, sx_last_error());
}

Test(nn_io, bad_files_are_clean_errors, .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[128], bad[128];
    tmp_path(path, sizeof path, "good.sxm");
    tmp_path(bad, sizeof bad, "bad.sxm");
    sx_nn_net *net = io_net(SX_F32, 4);
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    size_t len;
    unsigned char *b = read_all(path, &len);
    cr_assert_gt(len, 100);

    /* truncated anywhere */
    const size_t cuts[] = {0, 1, 4, 8, 16, 40, len / 3, len / 2, len - 5, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_all(bad, b, cuts[i]);
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu bytes", cuts[i]);
        load_fails(bad, SX_E_FORMAT, what);
    }
    /* one corrupted byte anywhere (header, graph, weights, checksum) */
    const size_t at[] = {0, 3, 9, 20, 64, len / 4, len / 2, 3 * len / 4, len - 9, len - 1};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        b[at[i]] ^= 0x5a;
        write_all(bad, b, len);
        b[at[i]] ^= 0x5a;
        char what[64];
        snprintf(what, sizeof what, "byte %zu of %zu corrupted", at[i], len);
        load_fails(bad, SX_OK, what);
    }
    /* trailing garbage */
    unsigned char *longer = malloc(len + 7);
    memcpy(longer, b, len);
    memset(longer + len, 0xab, 7);
    write_all(bad, longer, len + 7);
    load_fails(bad, SX_E_FORMAT, "trailing bytes");
    free(longer);
    /* not a strix file at all */
    write_all(bad, (const unsigned char *)"P5\n28 28\n255\n", 13);
    load_fails(bad, SX_E_FORMAT, "a PGM file");
    /* missing file, a directory */
    char missing[128];
    tmp_path(missing, sizeof missing, "no-such-model.sxm");
    load_fails(missing, SX_E_IO, "missing file");
    load_fails(tmpdir, SX_E_IO, "a directory");
    /* the intact bytes still load */
    write_all(bad, b, len);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(bad, 4, &m), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m);
    free(b);
    sx_nn_net_free(net);
}

Test(nn_io, a_checkpoint_is_not_a_model, .init = make_tmpdir, .fini = remove_tmpdir)
{
    char ckpt[128];
    tmp_path(ckpt, sizeof ckpt, "run.ckpt");
    /* a few training steps on synthetic 10x10 images write a checkpoint */
    sx_ds_images d = {.n = 8, .h = 10, .w = 10, .c = 1, .classes = 5};
    uint8_t pix[800], lab[8];
    for (int i = 0; i < 800; i++)
        pix[i] = (uint8_t)(i * 37);
    for (int i = 0; i < 8; i++)
        lab[i] = (uint8_t)(i % 5);
    d.pixels = pix;
    d.labels = lab;
    sx_nn_net *net = io_net(SX_F32, 5);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 4;
    p.verbose = 0;
    p.checkpoint_path = ckpt;
    cr_assert_eq(sx_nn_train(net, &p, &d, NULL, NULL), SX_OK, "%s", sx_last_error());
    load_fails(ckpt, SX_E_FORMAT, "a checkpoint");
    cr_assert(strstr(sx_last_error(), "checkpoint") != NULL, "%s", sx_last_error());
    sx_nn_net_free(net);
}

Test(nn_io, save_errors_leave_no_file, .init = make_tmpdir, .fini = remove_tmpdir)
{
    sx_nn_net *net = io_net(SX_F32, 6);
    char path[160];
    snprintf(path, sizeof path, "%s/no-such-folder/model.sxm", tmpdir);
    sx_error_clear();
    cr_assert_eq(sx_nn_save(net, path), SX_E_IO);
    cr_assert(strstr(sx_last_error(), "no-such-folder") != NULL, "%s", sx_last_error());
    cr_assert_eq(dir_entries(tmpdir), 0, "something was written");
    struct stat st;
    cr_assert_neq(stat(path, &st), 0);

    /* a path that is a directory: nothing replaced */
    char sub[128];
    tmp_path(sub, sizeof sub, "dir.sxm");
    cr_assert_eq(mkdir(sub, 0700), 0);
    cr_assert_neq(sx_nn_save(net, sub), SX_OK);
    cr_assert_eq(stat(sub, &st), 0);
    cr_assert(S_ISDIR(st.st_mode));
    cr_assert_eq(dir_entries(tmpdir), 1);

    /* NULL arguments; networks that are not models */
    cr_assert_eq(sx_nn_save(NULL, path), SX_E_ARG);
    cr_assert_eq(sx_nn_save(net, NULL), SX_E_ARG);
    char p2[128];
    tmp_path(p2, sizeof p2, "empty.sxm");
    sx_nn_net *empty = NULL;
    cr_assert_eq(sx_nn_net_new("empty", SX_F32, 1, &empty), SX_OK);
    cr_assert_neq(sx_nn_save(empty, p2), SX_OK);
    /* an output of rank 3, not (batch, classes): a model file too */
    sx_nn_input(empty, 3, (int64_t[]){4, 4, 1});
    cr_assert_eq(sx_nn_save(empty, p2), SX_OK, "%s", sx_last_error());
    cr_assert_eq(remove(p2), 0);
    sx_nn_dropout(empty, NULL, 0.5); /* a network with an error */
    cr_assert_neq(sx_nn_save(empty, p2), SX_OK);
    cr_assert_eq(dir_entries(tmpdir), 1);
    sx_nn_net_free(empty);

    sx_nn_model *m = (sx_nn_model *)1;
    cr_assert_eq(sx_nn_load(NULL, 1, &m), SX_E_ARG);
    cr_assert_eq(sx_nn_load(path, 1, NULL), SX_E_ARG);
    cr_assert_eq(sx_nn_load(path, 0, &m), SX_E_ARG);
    cr_assert_null(m);
    sx_nn_model_free(NULL);
    sx_nn_net_free(net);
}

/* Saving over an existing model replaces it atomically. */
Test(nn_io, save_replaces_an_existing_file, .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[128];
    tmp_path(path, sizeof path, "m.sxm");
    sx_nn_net *a = io_net(SX_F64, 7), *b = io_net(SX_F64, 8);
    cr_assert_eq(sx_nn_save(a, path), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_save(b, path), SX_OK, "%s", sx_last_error());
    cr_assert_eq(dir_entries(tmpdir), 1);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(path, 2, &m), SX_OK, "%s", sx_last_error());
    sx_nn_model *orig = NULL;
    cr_assert_eq(sx_nn_compile_infer(b, 2, &orig), SX_OK);
    sx_rng r;
    sx_rng_seed(&r, 9);
    sx_tensor *x = pixels(&r, SX_F64, 2), *pa = tu_zeros(SX_F64, 2, (int64_t[]){2, 5}),
              *pb = tu_zeros(SX_F64, 2, (int64_t[]){2, 5});
    cr_assert_eq(sx_nn_model_predict(orig, x, pa), SX_OK);
    cr_assert_eq(sx_nn_model_predict(m, x, pb), SX_OK);
    cr_assert_eq(memcmp(pa->data, pb->data, 10 * sizeof(double)), 0);
    sx_tensor_free(x);
    sx_tensor_free(pa);
    sx_tensor_free(pb);
    sx_nn_model_free(orig);
    sx_nn_model_free(m);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
}

/* ---------------------------------------------------------------- hostile files */

/* Save a graph as a model file: x and y as its outputs, the given metadata. Anyone can write
 * such a file (the checksum is right): the loader must judge what it holds. */
static void save_model_graph(const char *path, sx_cg_graph *g, sx_cg_node *x, sx_cg_node *y,
                             const char *scale, const char *classes)
{
    sx_cg_node *outs[2] = {x, y};
    const char *names[2] = {"x", "y"};
    const char *keys[4] = {"strix.kind", "network", "input_scale", "classes"};
    const char *vals[4] = {"model", "hostile", scale, classes};
    cr_assert_eq(sx_cg_save(g, 2, outs, names, 0, NULL, NULL, 4, keys, vals, path), SX_OK, "%s",
                 sx_last_error());
}

/* A model whose x and y are (batch, 3) and (batch, 2): y = x @ w. */
static void save_linear_model(const char *path, const char *scale, const char *classes)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F32, 2, (int64_t[]){1, 3});
    sx_tensor *wv = tu_zeros(SX_F32, 2, (int64_t[]){3, 2});
    sx_cg_node *y = sx_cg_matmul(g, x, sx_cg_param(g, "w", wv), false, false);
    sx_tensor_free(wv);
    cr_assert_not_null(y, "%s", sx_last_error());
    save_model_graph(path, g, x, y, scale, classes);
    sx_cg_graph_free(g);
}

/* A model whose x is a rank-0 node. The loader computed the example's rank
 * as -1 and copied its shape with memcpy(..., -8) before checking that x is an input: SIGSEGV
 * in Release. Now x and y are judged before anything is read from them. */
Test(nn_io, rank0_input_is_a_clean_error, .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[128];
    tmp_path(path, sizeof path, "rank0.sxm");
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F32, 0, NULL);
    sx_tensor *yv = tu_zeros(SX_F32, 2, (int64_t[]){1, 2});
    sx_cg_node *y = sx_cg_const(g, yv);
    sx_tensor_free(yv);
    save_model_graph(path, g, x, y, "1", "2");
    /* x a rank-0 constant, x of rank 1 (no example axes), y of rank 0 */
    char p2[128], p3[128], p4[128];
    tmp_path(p2, sizeof p2, "const.sxm");
    tmp_path(p3, sizeof p3, "rank1.sxm");
    tmp_path(p4, sizeof p4, "y0.sxm");
    save_model_graph(p2, g, sx_cg_scalar(g, 1.0), y, "1", "2");
    sx_cg_node *x1 = sx_cg_input(g, "x1", SX_F32, 1, (int64_t[]){1});
    save_model_graph(p3, g, x1, y, "1", "2");
    sx_cg_node *x2 = sx_cg_input(g, "x2", SX_F32, 2, (int64_t[]){1, 4});
    save_model_graph(p4, g, x2, sx_cg_sum(g, x2, SX_AXES_ALL, false), "1", "2");
    sx_cg_graph_free(g);

    load_fails(path, SX_E_FORMAT, "x of rank 0");
    cr_assert(strstr(sx_last_error(), "not a model's x and y: x is input f32 (), y f32 (1,2)") !=
                  NULL,
              "%s", sx_last_error());
    load_fails(p2, SX_E_FORMAT, "x a constant");
    load_fails(p3, SX_E_FORMAT, "x of rank 1");
    load_fails(p4, SX_E_FORMAT, "y of rank 0");
    /* a y that keeps batch 1 whatever the batch: refused for batch 4 */
    char p5[128];
    tmp_path(p5, sizeof p5, "fixed.sxm");
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    x2 = sx_cg_input(g, "x", SX_F32, 2, (int64_t[]){1, 2});
    yv = tu_zeros(SX_F32, 2, (int64_t[]){1, 2});
    y = sx_cg_add(g, sx_cg_const(g, yv), sx_cg_sum(g, x2, SX_AXES_ALL, false));
    sx_tensor_free(yv);
    cr_assert_not_null(y, "%s", sx_last_error());
    save_model_graph(p5, g, x2, y, "1", "2");
    sx_cg_graph_free(g);
    load_fails(p5, SX_E_FORMAT, "y of batch 1");
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(p5, 1, &m), SX_OK, "batch 1 fits: %s", sx_last_error());
    sx_nn_model_free(m);
}

/* A model file whose graph has no output "x", or one that cannot run the asked batch (a
 * reshape to batch 1), is a bad model file: SX_E_FORMAT naming it, not the SX_E_ARG /
 * SX_E_SHAPE of the graph calls underneath (found by fuzz_model). */
Test(nn_io, model_graph_without_x_is_a_format_error, .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[128], p2[128];
    tmp_path(path, sizeof path, "nox.sxm");
    tmp_path(p2, sizeof p2, "fixed.sxm");
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F32, 2, (int64_t[]){1, 4});
    sx_cg_node *y = sx_cg_softmax(g, x, -1);
    sx_cg_node *outs[2] = {x, y};
    const char *names[2] = {"input", "y"};
    const char *keys[4] = {"strix.kind", "network", "input_scale", "classes"};
    const char *vals[4] = {"model", "nox", "1", "4"};
    cr_assert_eq(sx_cg_save(g, 2, outs, names, 0, NULL, NULL, 4, keys, vals, path), SX_OK);
    /* y = reshape(x, (1, 4)): batch 1 only */
    sx_cg_node *r = sx_cg_reshape(g, x, 2, (int64_t[]){1, 4});
    cr_assert_not_null(r, "%s", sx_last_error());
    save_model_graph(p2, g, x, r, "1", "4");
    sx_cg_graph_free(g);
    load_fails(path, SX_E_FORMAT, "no output x");
    cr_assert(strstr(sx_last_error(), "has no output 'x'") != NULL, "%s", sx_last_error());
    load_fails(p2, SX_E_FORMAT, "a fixed batch");
    cr_assert(strstr(sx_last_error(), "not a model's graph for batch 4") != NULL, "%s",
              sx_last_error());
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(p2, 1, &m), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m);
}

/* The metadata is parsed strictly (what sx_nn_save writes): a finite scale, a plain decimal
 * class count that fits (strtoll took signs, spaces and saturated on overflow). */
Test(nn_io, bad_model_metadata_is_a_clean_error, .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[128];
    tmp_path(path, sizeof path, "meta.sxm");
    const char *scales[] = {"nan", "inf", "-inf", "", "1x", "1e999"};
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
        save_linear_model(path, scales[i], "2");
        load_fails(path, SX_E_FORMAT, scales[i]);
        cr_assert(strstr(sx_last_error(), "input_scale") != NULL, "%s", sx_last_error());
    }
    const char *classes[] = {"+2", " 2", "2 ", "0", "-2", "0x2", "99999999999999999999", ""};
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
        save_linear_model(path, "0.5", classes[i]);
        load_fails(path, SX_E_FORMAT, classes[i]);
        cr_assert(strstr(sx_last_error(), "classes") != NULL, "%s", sx_last_error());
    }
    save_linear_model(path, "0.5", "2");
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(path, 3, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_input_scale(m), 0.5);
    cr_assert_eq(sx_nn_model_classes(m), 2);
    sx_nn_model_free(m);
}

/* The checkpoint `from` written again as `to` with metadata `key` set to `value` (NULL: kept)
 * and, when `tensor` is not NULL, its element 0 set to x: a damaged checkpoint with a right
 * checksum. */
static void resave_checkpoint(const char *from, const char *to, const char *key, const char *value,
                              const char *tensor, double x)
{
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(from, &f), SX_OK, "%s", sx_last_error());
    int nt = sx_cg_file_n_tensors(f), nm = sx_cg_file_n_meta(f);
    const char **tn = calloc((size_t)nt, sizeof *tn), *keys[32], *vals[32];
    const sx_tensor **tv = calloc((size_t)nt, sizeof *tv);
    sx_tensor *changed = NULL;
    for (int i = 0; i < nt; i++) {
        tn[i] = sx_cg_file_tensor_name(f, i);
        tv[i] = sx_cg_file_tensor(f, tn[i]);
        if (tensor != NULL && strcmp(tn[i], tensor) == 0) {
            cr_assert_eq(sx_tensor_clone(tv[i], &changed), SX_OK);
            sx_tensor_set(changed, 0, x);
            tv[i] = changed;
        }
    }
    cr_assert(tensor == NULL || changed != NULL, "no tensor %s", tensor);
    cr_assert_leq(nm, 32);
    int nk = 0;
    for (int i = 0; i < nm; i++) {
        keys[nk] = sx_cg_file_meta_key(f, i);
        vals[nk] = key != NULL && strcmp(keys[nk], key) == 0 ? value : sx_cg_file_meta(f, keys[nk]);
        /* a key whose value is "-": left out (a file of an older version) */
        nk += strcmp(vals[nk], "-") != 0;
    }
    nm = nk;
    cr_assert_eq(sx_cg_save(NULL, 0, NULL, NULL, nt, tn, tv, nm, keys, vals, to), SX_OK, "%s",
                 sx_last_error());
    sx_tensor_free(changed);
    free(tn);
    free(tv);
    sx_cg_file_free(f);
}

/* The checkpoint loader's audit: counters are plain decimal digits that fit (strtoll
 * took signs, spaces and saturated on overflow), the dropout generator 64 hex digits not all
 * zero (strtoull took "-", spaces and 0x), the optimiser a known name (SX_E_FORMAT naming the
 * file, not SX_E_ARG), and a squared-gradient state (Adam's v) never negative or NaN. Each
 * failure changes nothing in the network. */
Test(nn_io, damaged_checkpoint_fields_are_clean_errors, .init = make_tmpdir, .fini = remove_tmpdir)
{
    char ckpt[128], bad[128];
    tmp_path(ckpt, sizeof ckpt, "run.ckpt");
    tmp_path(bad, sizeof bad, "bad.ckpt");
    sx_ds_images d = {.n = 8, .h = 10, .w = 10, .c = 1, .classes = 5};
    uint8_t pix[800], lab[8];
    for (int i = 0; i < 800; i++)
        pix[i] = (uint8_t)(i * 37);
    for (int i = 0; i < 8; i++)
        lab[i] = (uint8_t)(i % 5);
    d.pixels = pix;
    d.labels = lab;
    sx_nn_net *net = io_net(SX_F32, 5);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 4;
    p.verbose = 0;
    p.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.checkpoint_path = ckpt;
    cr_assert_eq(sx_nn_train(net, &p, &d, NULL, NULL), SX_OK, "%s", sx_last_error());
    sx_nn_net *fresh = io_net(SX_F32, 6);
    cr_assert_eq(nn_checkpoint_load(fresh, &p, ckpt), SX_OK, "%s", sx_last_error());
    cr_assert_eq(fresh->step, 2);

    char v_name[160];
    snprintf(v_name, sizeof v_name, "%s.v", net->layers[2]->params[0].name);
    struct {
        const char *key, *value, *tensor;
        double x;
        const char *msg;
    } cases[] = {
        {"step", "+2", NULL, 0, "bad or missing 'step' ('+2')"},
        {"step", " 2", NULL, 0, "bad or missing 'step'"},
        {"step", "-1", NULL, 0, "bad or missing 'step'"},
        {"step", "99999999999999999999", NULL, 0, "bad or missing 'step'"},
        {"epoch", "1x", NULL, 0, "bad or missing 'epoch'"},
        {"dropout_rng", "-000000000000001000000000000000100000000000000010000000000000001", NULL, 0,
         "bad or missing 'dropout_rng'"},
        {"dropout_rng", "0x00000000000001000000000000000100000000000000010000000000000001", NULL, 0,
         "bad or missing 'dropout_rng'"},
        {"dropout_rng", "0000000000000000000000000000000000000000000000000000000000000000", NULL, 0,
         "not all zero"},
        {"optimiser", "lamb", NULL, 0, "unknown optimiser 'lamb'"},
        {NULL, NULL, v_name, -1.0, ".v[0] is -1; a sum of squared gradients is >= 0"},
        {NULL, NULL, v_name, NAN, ".v[0] is nan"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        resave_checkpoint(ckpt, bad, cases[i].key, cases[i].value, cases[i].tensor, cases[i].x);
        sx_nn_net *other = io_net(SX_F32, 7);
        float w0 = ((float *)other->layers[2]->params[0].value->data)[0];
        sx_status s = nn_checkpoint_load(other, &p, bad);
        cr_assert_eq(s, SX_E_FORMAT, "case %zu: %s (%s)", i, sx_status_str(s), sx_last_error());
        cr_assert(strstr(sx_last_error(), bad) != NULL && strstr(sx_last_error(), cases[i].msg),
                  "case %zu: '%s' not in '%s'", i, cases[i].msg, sx_last_error());
        cr_assert_eq(((float *)other->layers[2]->params[0].value->data)[0], w0,
                     "case %zu: the network changed", i);
        cr_assert_eq(other->step, 0);
        sx_nn_net_free(other);
    }
    /* the same file written again unchanged still loads */
    resave_checkpoint(ckpt, bad, NULL, NULL, NULL, 0);
    cr_assert_eq(nn_checkpoint_load(fresh, &p, bad), SX_OK, "%s", sx_last_error());
    sx_nn_net_free(fresh);
    sx_nn_net_free(net);
}

/* A version-2 checkpoint (before weight decay, dampening and the schedule's state were
 * recorded) still loads, with the same weights and optimiser state. */
Test(nn_io, version_2_checkpoints_still_load, .init = make_tmpdir, .fini = remove_tmpdir)
{
    char ckpt[128], old[128];
    tmp_path(ckpt, sizeof ckpt, "v3.ckpt");
    tmp_path(old, sizeof old, "v2.ckpt");
    sx_ds_images d = {.n = 8, .h = 10, .w = 10, .c = 1, .classes = 5};
    uint8_t pix[800], lab[8];
    for (int i = 0; i < 800; i++)
        pix[i] = (uint8_t)(i * 37);
    for (int i = 0; i < 8; i++)
        lab[i] = (uint8_t)(i % 5);
    d.pixels = pix;
    d.labels = lab;
    sx_nn_net *net = io_net(SX_F32, 5);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 4;
    p.verbose = 0;
    p.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.checkpoint_path = ckpt;
    cr_assert_eq(sx_nn_train(net, &p, &d, NULL, NULL), SX_OK, "%s", sx_last_error());
    resave_checkpoint(ckpt, old, "optim.weight_decay", "-", NULL, 0);
    resave_checkpoint(old, old, "optim.dampening", "-", NULL, 0);
    resave_checkpoint(old, old, "schedule.total_steps", "-", NULL, 0);
    resave_checkpoint(old, old, "checkpoint_version", "2", NULL, 0);
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(old, &f), SX_OK);
    cr_assert_null(sx_cg_file_meta(f, "optim.weight_decay"));
    cr_assert_str_eq(sx_cg_file_meta(f, "checkpoint_version"), "2");
    sx_cg_file_free(f);
    sx_nn_net *fresh = io_net(SX_F32, 6);
    cr_assert_eq(nn_checkpoint_load(fresh, &p, old), SX_OK, "%s", sx_last_error());
    cr_assert_eq(fresh->step, 2);
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            const nn_param *a = &net->layers[i]->params[k], *b = &fresh->layers[i]->params[k];
            cr_assert_eq(
                memcmp(a->value->data, b->value->data, (size_t)a->value->size * sizeof(float)), 0,
                "%s", a->name);
            for (int j = 0; j < NN_MAX_STATES; j++)
                cr_assert((a->state[j] == NULL) == (b->state[j] == NULL) &&
                              (a->state[j] == NULL ||
                               memcmp(a->state[j]->data, b->state[j]->data,
                                      (size_t)a->state[j]->size * sizeof(float)) == 0),
                          "%s state %d", a->name, j);
        }
    sx_nn_net_free(fresh);
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- a loaded model's memory */

/* An allocator that counts the bytes live (each block carries its size in front). */
static int64_t bytes_live;

typedef union {
    size_t n;
    max_align_t align;
} block_head;

static void *count_alloc(void *ctx, size_t n)
{
    (void)ctx;
    block_head *h = malloc(sizeof *h + n);
    if (h == NULL)
        return NULL;
    h->n = n;
    bytes_live += (int64_t)n;
    return h + 1;
}

static void count_free(void *ctx, void *p)
{
    (void)ctx;
    if (p == NULL)
        return;
    block_head *h = (block_head *)p - 1;
    bytes_live -= (int64_t)h->n;
    free(h);
}

static void *count_realloc(void *ctx, void *p, size_t n)
{
    if (p == NULL)
        return count_alloc(ctx, n);
    block_head *h = (block_head *)p - 1;
    size_t old = h->n;
    block_head *q = realloc(h, sizeof *q + n);
    if (q == NULL)
        return NULL;
    q->n = n;
    bytes_live += (int64_t)n - (int64_t)old;
    return q + 1;
}

/* x (n, 256) times a constant (256, 1024) (a lambda: constants are weights too, as in an
 * imported model) */
static float big_const[256 * 1024];

static sx_cg_node *times_const(sx_cg_graph *g, sx_cg_node *x, void *ctx)
{
    (void)ctx;
    sx_tensor c = sx_tensor_view(SX_F32, 2, (int64_t[]){256, 1024}, big_const);
    return sx_cg_matmul(g, x, sx_cg_const(g, &c), false, false);
}

/* Loading used to keep the file's bytes (every weight) besides the graph's copy, and each graph
 * for a smaller batch copied the weights again: a model with 2 MB of weights held 6 MB after
 * predicting at two batch sizes. Now the weights live once, and the smaller batch's results
 * are those of a model loaded for that batch, bit for bit. */
Test(nn_io, a_loaded_model_holds_its_weights_once, .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[128];
    tmp_path(path, sizeof path, "big.sxm");
    for (int i = 0; i < 256 * 1024; i++)
        big_const[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("big", SX_F32, 9, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 1, (int64_t[]){256});
    x = sx_nn_lambda(net, x, times_const, NULL, "times_const");
    x = sx_nn_fully_connected(net, x, 256, SX_ACT_RELU); /* 1 MB of weights */
    x = sx_nn_linear(net, x, 10, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_net_free(net);
    const int64_t weights = (256 * 1024 + 1024 * 256 + 256 * 10) * 4;

    sx_rng r;
    sx_rng_seed(&r, 2);
    sx_tensor *x8 = tu_rand(&r, SX_F32, 2, (int64_t[]){8, 256}, -1, 1);
    sx_tensor *x3 = tu_rand(&r, SX_F32, 2, (int64_t[]){3, 256}, -1, 1);
    sx_tensor *o8 = tu_zeros(SX_F32, 2, (int64_t[]){8, 10}),
              *o3 = tu_zeros(SX_F32, 2, (int64_t[]){3, 10});
    sx_tensor *want3 = tu_zeros(SX_F32, 2, (int64_t[]){3, 10});
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(path, 3, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(m, x3, want3), SX_OK, "%s", sx_last_error());
    sx_nn_model_free(m);

    sx_allocator counting = {count_alloc, count_realloc, count_free, NULL};
    sx_allocator_set(&counting);
    cr_assert_eq(sx_nn_load(path, 8, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(m, x8, o8), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(m, x3, o3), SX_OK, "%s", sx_last_error());
    int64_t held = bytes_live;
    sx_nn_model_free(m);
    int64_t left = bytes_live;
    sx_allocator_set(NULL);
    cr_assert(held >= weights && held < weights + weights / 4,
              "the model holds %lld bytes for %lld bytes of weights", (long long)held,
              (long long)weights);
    cr_assert_eq(left, 0, "%lld bytes leaked", (long long)left);
    cr_assert_eq(memcmp(o3->data, want3->data, (size_t)o3->size * sizeof(float)), 0);
    sx_tensor_free(x8);
    sx_tensor_free(x3);
    sx_tensor_free(o8);
    sx_tensor_free(o3);
    sx_tensor_free(want3);
}
