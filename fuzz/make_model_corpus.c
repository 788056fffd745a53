/* make_model_corpus.c: writes the seed corpus of fuzz_model (fuzz/corpus_model/, run by
 * make_corpus.sh): real files of every kind the loader reads, each a few KB.
 *   model_cnn_f32.sxm    fuzz_nets.h's CNN after a few Adam steps, sx_nn_save
 *   model_fused_f32.sxm  the same model file with its graph run through the optimiser (fused
 *                        element-wise chains), still loadable by sx_nn_load
 *   model_mlp_f64.sxm    an f64 MLP with a lambda layer and preprocessing (normalisation,
 *                        class and feature names), sx_nn_save
 *   ckpt_adam.sxm        the checkpoint sx_nn_train wrote (Adam: m and v for every weight)
 *   ckpt_adagrad.sxm     the same run with Adagrad, a checkpoint in the middle of an epoch
 *   ckpt_momentum.sxm    and with momentum
 *   graph_train.sxm      a hand-built training graph (dropout, softmax cross-entropy, gradients,
 *                        Adam updates) after the optimiser fused it, by sx_cg_save; with named
 *                        tensors and metadata
 * and hostile files that once crashed the loader, as regressions (checksums right):
 * (legacy_v1_*.sxm, kept by hand: model files of before version 3, whose x is already scaled)
 *   hostile_rank0_x.sxm        a model whose x is a rank-0 input (once a memcpy of -8 bytes)
 *   hostile_fused_unused_b.sxm a model whose fused tanh has unused source b = 1000 (once the
 *                              interpreter read period[1000], a stack overflow)
 * Deterministic for a given machine (fixed seeds). Usage: make_model_corpus DIR */
#include "fuzz_nets.h"
#include "nn_impl.h" /* nn_checkpoint_load */

#include <sx_autodiff.h>
#include <sx_optim.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != SX_OK) {                                                                     \
            fprintf(stderr, "make_model_corpus: %s failed: %s\n", #call, sx_last_error());         \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define CHECK_NODE(n)                                                                              \
    do {                                                                                           \
        if ((n) == NULL) {                                                                         \
            fprintf(stderr, "make_model_corpus: %s is NULL: %s\n", #n, sx_last_error());           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static char dir[512];

static const char *at(const char *name)
{
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* 16 synthetic 6x6 images of 3 classes (a bright stripe whose row is the class). */
static uint8_t pixels[16 * 36], labels[16];

static sx_ds_images images(void)
{
    for (int i = 0; i < 16; i++) {
        labels[i] = (uint8_t)(i % 3);
        for (int k = 0; k < 36; k++)
            pixels[i * 36 + k] = (uint8_t)(k / 6 == 2 * labels[i] ? 200 + i : (k * 37 + i) % 60);
    }
    return (sx_ds_images){
        .n = 16, .h = 6, .w = 6, .c = 1, .classes = 3, .pixels = pixels, .labels = labels};
}

/* Train fuzz_net for `steps` steps of 4 images with optimiser `kind`, writing a checkpoint. */
static sx_nn_net *trained(sx_optim_kind kind, int epochs, int64_t every, const char *ckpt)
{
    sx_nn_net *net = NULL;
    CHECK(fuzz_net(SX_F32, 7, &net));
    sx_ds_images d = images();
    sx_nn_train_params p = sx_nn_train_params_default();
    p.epochs = epochs;
    p.batch = 4;
    p.optim = sx_optim_params_default(kind);
    p.checkpoint_every = every;
    p.checkpoint_path = ckpt;
    p.verbose = 0;
    remove(ckpt);
    CHECK(sx_nn_train(net, &p, &d, NULL, NULL));
    return net;
}

static int64_t count_fused(const sx_cg_graph *g)
{
    int64_t c = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        c += n != NULL && sx_cg_node_op(n) == SX_OP_FUSED;
    }
    return c;
}

/* The model file `from` with its graph optimised, metadata kept, saved as `to`. */
static void optimised_model(const char *from, const char *to)
{
    sx_cg_file *f = NULL;
    CHECK(sx_cg_file_read(from, &f));
    const char *names[2] = {"x", "y"};
    sx_cg_graph *g = NULL;
    sx_cg_node *o[2];
    CHECK(sx_cg_file_graph(f, 2, names, &g, o));
    CHECK(sx_cg_optimise(g, 2, o, NULL, NULL));
    if (count_fused(g) == 0) {
        fprintf(stderr, "make_model_corpus: the optimiser fused nothing in %s\n", from);
        exit(1);
    }
    int n = sx_cg_file_n_meta(f);
    const char *keys[16], *vals[16];
    for (int i = 0; i < n && i < 16; i++) {
        keys[i] = sx_cg_file_meta_key(f, i);
        vals[i] = sx_cg_file_meta(f, keys[i]);
    }
    CHECK(sx_cg_save(g, 2, o, names, 0, NULL, NULL, n < 16 ? n : 16, keys, vals, to));
    sx_cg_graph_free(g);
    sx_cg_file_free(f);
}

static sx_cg_node *affine(sx_cg_graph *g, sx_cg_node *x, void *ctx)
{
    (void)ctx;
    return sx_cg_add_scalar(g, sx_cg_mul_scalar(g, x, 0.5), -0.25);
}

static void mlp_f64(const char *path)
{
    sx_nn_net *net = NULL;
    CHECK(sx_nn_net_new("mlp", SX_F64, 3, &net));
    sx_nn_net_set_input_scale(net, 0.125);
    sx_nn_layer *x = sx_nn_input(net, 1, (const int64_t[]){5});
    x = sx_nn_lambda(net, x, affine, NULL, "affine");
    x = sx_nn_fully_connected(net, x, 4, SX_ACT_RELU);
    sx_nn_linear(net, x, 2, SX_ACT_SOFTMAX);
    CHECK(sx_nn_net_status(net));
    /* the preprocessing a model file describes: statistics, class and feature names */
    const double mean[5] = {1, 2, 3, 4, 5}, sd[5] = {0.5, 1, 2, 4, 8};
    const char *cls[2] = {"no\\pe", "ye\ns"}, *feat[5] = {"a", "b", "c", "d", "e"};
    CHECK(sx_nn_net_set_normalization(net, 5, mean, sd));
    CHECK(sx_nn_net_set_class_names(net, 2, cls));
    CHECK(sx_nn_net_set_feature_names(net, 5, feat));
    CHECK(sx_nn_save(net, path));
    sx_nn_net_free(net);
}

/* loss = mean cross-entropy of softmax(dropout(tanh(x w1 + b1)) w2) against t; Adam updates
 * of w1, b1, w2; optimised (fused chains and fused updates); saved with the updates, the loss
 * and the inputs as outputs. */
static void train_graph(const char *path)
{
    sx_cg_graph *g = NULL;
    CHECK(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g));
    sx_rng r;
    sx_rng_seed(&r, 11);
    sx_tensor *w1v = NULL, *b1v = NULL, *w2v = NULL;
    CHECK(sx_tensor_new(SX_F32, 2, (const int64_t[]){3, 4}, &w1v));
    CHECK(sx_tensor_new(SX_F32, 1, (const int64_t[]){4}, &b1v));
    CHECK(sx_tensor_new(SX_F32, 2, (const int64_t[]){4, 2}, &w2v));
    CHECK(sx_tensor_rand_uniform(w1v, &r, -0.5, 0.5));
    CHECK(sx_tensor_rand_uniform(b1v, &r, -0.1, 0.1));
    CHECK(sx_tensor_rand_uniform(w2v, &r, -0.5, 0.5));
    sx_cg_node *x = sx_cg_input(g, "x", SX_F32, 2, (const int64_t[]){4, 3});
    sx_cg_node *t = sx_cg_input(g, "t", SX_F32, 2, (const int64_t[]){4, 2});
    sx_cg_node *lr = sx_cg_input(g, "lr", SX_F32, 0, NULL);
    sx_cg_node *step = sx_cg_input(g, "step", SX_F32, 0, NULL);
    sx_cg_node *w[3] = {sx_cg_param(g, "w1", w1v), sx_cg_param(g, "b1", b1v),
                        sx_cg_param(g, "w2", w2v)};
    int rng = 0;
    CHECK(sx_cg_rng_new(g, 5, &rng));
    sx_cg_node *h = sx_cg_tanh(g, sx_cg_add(g, sx_cg_matmul(g, x, w[0], false, false), w[1]));
    sx_cg_node *mask = sx_cg_dropout_mask(g, rng, 0.25, 2, (const int64_t[]){4, 4});
    h = sx_cg_mul(g, h, mask);
    sx_cg_node *ls = sx_cg_log_softmax(g, sx_cg_matmul(g, h, w[2], false, false), -1);
    sx_cg_node *loss =
        sx_cg_mul_scalar(g, sx_cg_sum(g, sx_cg_mul(g, t, ls), SX_AXES_ALL, false), -0.25);
    CHECK_NODE(loss);
    sx_cg_node *grads[3];
    CHECK(sx_ad_grad(g, loss, 3, w, grads));
    sx_optim_params op = sx_optim_params_default(SX_OPTIM_ADAM);
    sx_cg_node *outs[16];
    const char *names[16] = {"loss", "x", "t", "lr", "step"};
    char buf[16][32];
    int n = 0;
    outs[n++] = loss;
    outs[n++] = x;
    outs[n++] = t;
    outs[n++] = lr;
    outs[n++] = step;
    for (int i = 0; i < 3; i++) {
        sx_cg_node *u[3];
        int k = 0;
        CHECK(sx_optim_update(g, &op, w[i], grads[i], lr, step, NULL, u, &k));
        for (int j = 0; j < k; j++) {
            snprintf(buf[n], sizeof buf[n], "update%d.%d", i, j);
            names[n] = buf[n];
            outs[n++] = u[j];
        }
    }
    CHECK(sx_cg_optimise(g, n, outs, NULL, NULL));
    if (count_fused(g) == 0) {
        fprintf(stderr, "make_model_corpus: the optimiser fused nothing in the training graph\n");
        exit(1);
    }
    const char *tn[1] = {"w1.initial"};
    const sx_tensor *tv[1] = {w1v};
    const char *keys[2] = {"strix.kind", "step"}, *vals[2] = {"training graph", "0"};
    CHECK(sx_cg_save(g, n, outs, names, 1, tn, tv, 2, keys, vals, path));
    sx_tensor_free(w1v);
    sx_tensor_free(b1v);
    sx_tensor_free(w2v);
    sx_cg_graph_free(g);
}

static void save_model(const char *path, sx_cg_graph *g, sx_cg_node *x, sx_cg_node *y)
{
    sx_cg_node *outs[2] = {x, y};
    const char *names[2] = {"x", "y"};
    const char *keys[4] = {"strix.kind", "network", "input_scale", "classes"};
    const char *vals[4] = {"model", "hostile", "1", "2"};
    CHECK(sx_cg_save(g, 2, outs, names, 0, NULL, NULL, 4, keys, vals, path));
}

static void hostile_rank0_x(const char *path)
{
    sx_cg_graph *g = NULL;
    CHECK(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g));
    sx_cg_node *x = sx_cg_input(g, "x", SX_F32, 0, NULL);
    sx_tensor *yv = NULL;
    CHECK(sx_tensor_zeros(SX_F32, 2, (const int64_t[]){1, 2}, &yv));
    sx_cg_node *y = sx_cg_const(g, yv);
    CHECK_NODE(y);
    save_model(path, g, x, y);
    sx_tensor_free(yv);
    sx_cg_graph_free(g);
}

/* y = fused [t = a + b; tanh(t)] over (x @ w, bias), then the tanh's unused source b set to
 * 1000 in the file's bytes and the checksum recomputed. */
static void hostile_fused_unused_b(const char *path)
{
    sx_cg_graph *g = NULL;
    CHECK(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g));
    sx_tensor *wv = NULL, *bv = NULL;
    CHECK(sx_tensor_full(SX_F32, 2, (const int64_t[]){3, 2}, 0.25, &wv));
    CHECK(sx_tensor_full(SX_F32, 1, (const int64_t[]){2}, 0.5, &bv));
    sx_cg_node *x = sx_cg_input(g, "x", SX_F32, 2, (const int64_t[]){1, 3});
    sx_cg_node *in[2] = {sx_cg_matmul(g, x, sx_cg_param(g, "w", wv), false, false),
                         sx_cg_param(g, "b", bv)};
    sx_cg_attr a = sx_cg_attr_default();
    a.rank = 2;
    a.shape[0] = 1;
    a.shape[1] = 2;
    a.prog.n = 2;
    a.prog.ins[0] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_ADD, 0, 1, 0, 0};
    a.prog.ins[1] = (sx_fused_instr){SX_FUSED_MAP, SX_MAP_TANH, -1, 0, 0, 0};
    sx_cg_node *y = sx_cg_op_new(g, SX_OP_FUSED, 2, in, &a);
    CHECK_NODE(y);
    save_model(path, g, x, y);
    sx_tensor_free(wv);
    sx_tensor_free(bv);
    sx_cg_graph_free(g);
    /* kind 0 (map), the name "tanh", then i16 a, b, c */
    FILE *f = fopen(path, "r+b");
    static unsigned char b[1 << 16];
    size_t n = f ? fread(b, 1, sizeof b, f) : 0;
    static const unsigned char ins[9] = {0, 4, 0, 0, 0, 't', 'a', 'n', 'h'};
    size_t at = 0;
    while (at + 15 <= n && memcmp(b + at, ins, 9) != 0)
        at++;
    if (f == NULL || n < 36 || n == sizeof b || at + 15 > n) {
        fprintf(stderr, "make_model_corpus: no tanh instruction in %s\n", path);
        exit(1);
    }
    b[at + 11] = 1000 & 255; /* b, little-endian */
    b[at + 12] = 1000 >> 8;
    uLong crc = crc32(0, b, (uInt)(n - 20));
    for (int i = 0; i < 4; i++)
        b[n - 8 + i] = (unsigned char)(crc >> (8 * i));
    if (fseek(f, 0, SEEK_SET) != 0 || fwrite(b, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "make_model_corpus: cannot write %s\n", path);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_model_corpus DIR\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "make_model_corpus: cannot make %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char model[600];
    snprintf(model, sizeof model, "%s", at("model_cnn_f32.sxm"));
    sx_nn_net *net = trained(SX_OPTIM_ADAM, 1, 0, at("ckpt_adam.sxm"));
    CHECK(sx_nn_save(net, model));
    sx_nn_net_free(net);
    optimised_model(model, at("model_fused_f32.sxm"));
    sx_nn_net_free(trained(SX_OPTIM_ADAGRAD, 1, 3, at("ckpt_adagrad.sxm")));
    sx_nn_net_free(trained(SX_OPTIM_MOMENTUM, 1, 0, at("ckpt_momentum.sxm")));
    mlp_f64(at("model_mlp_f64.sxm"));
    train_graph(at("graph_train.sxm"));
    hostile_rank0_x(at("hostile_rank0_x.sxm"));
    hostile_fused_unused_b(at("hostile_fused_unused_b.sxm"));
    /* every file loads as what it is */
    const char *models[3] = {"model_cnn_f32.sxm", "model_fused_f32.sxm", "model_mlp_f64.sxm"};
    for (int i = 0; i < 3; i++) {
        sx_nn_model *m = NULL;
        CHECK(sx_nn_load(at(models[i]), 1, &m)); /* the fused one: only the saved batch */
        sx_nn_model_free(m);
    }
    const char *ckpts[3] = {"ckpt_adam.sxm", "ckpt_adagrad.sxm", "ckpt_momentum.sxm"};
    const sx_optim_kind kinds[3] = {SX_OPTIM_ADAM, SX_OPTIM_ADAGRAD, SX_OPTIM_MOMENTUM};
    for (int i = 0; i < 3; i++) {
        sx_nn_net *net2 = NULL;
        CHECK(fuzz_net(SX_F32, 1, &net2));
        sx_nn_train_params p = sx_nn_train_params_default();
        p.batch = 4;
        p.optim = sx_optim_params_default(kinds[i]);
        CHECK(nn_checkpoint_load(net2, &p, at(ckpts[i])));
        sx_nn_net_free(net2);
    }
    sx_cg_file *f = NULL;
    CHECK(sx_cg_file_read(at("graph_train.sxm"), &f));
    sx_cg_file_free(f);
    /* and the hostile ones are refused */
    const char *hostile[2] = {"hostile_rank0_x.sxm", "hostile_fused_unused_b.sxm"};
    for (int i = 0; i < 2; i++) {
        sx_nn_model *m = NULL;
        if (sx_nn_load(at(hostile[i]), 1, &m) != SX_E_FORMAT) {
            fprintf(stderr, "make_model_corpus: %s is not refused: %s\n", hostile[i],
                    sx_last_error());
            return 1;
        }
    }
    return 0;
}
