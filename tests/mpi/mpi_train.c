/* mpi_train.c: the program tests/mpi/run_mpi_tests runs under mpirun (and alone) to check
 * data-parallel training. A small CNN (with --dropout, a dropout layer of rate 0.3
 * after the convolution; with --bn, batch norm) on synthetic 8x8 images (200 of them: a global
 * batch of 16 leaves a last batch of 8, split over the ranks); with --gpt, a tiny GPT (token and
 * position embeddings, a pre-norm block of causal attention with fused QKV and an MLP, an output
 * layer tied to the token table) on 200 sequences of 8 tokens with class-index targets (the next
 * token), through sx_nn_fit.
 *
 *   mpi_train train --batch B --epochs E --out PATH [--fit] [--optimiser NAME] [--clip]
 *                   [--checkpoint PATH] [--die-at STEP] [--bn] [--dropout] [--gpt]
 *       trains (sx_nn_train, or sx_nn_fit with --fit) and writes every rank's weights to
 *       PATH.RANK (sx_nn_checkpoint_save); --die-at: rank 1 kills itself (SIGKILL) after that step.
 *   mpi_train compare A B TOL
 *       the largest difference between the weights of two such files, absolute and relative to
 *       the largest weight; exit 1 when the relative one is above TOL (0: bit for bit).
 *   mpi_train errors
 *       sx_mpi's documented errors (under mpirun -np 1 or alone). */
#include <sx_mpi.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 200, H = 8, W = 8, CLASSES = 4 };

static uint8_t pixels[N * H * W], labels[N];

/* Class k: a bright k-th quadrant over noise. */
static void make_data(void)
{
    sx_rng r;
    sx_rng_seed(&r, 1234);
    for (int i = 0; i < N; i++) {
        int k = (int)sx_rng_below(&r, CLASSES);
        labels[i] = (uint8_t)k;
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int q = (y >= H / 2) * 2 + (x >= W / 2);
                pixels[(i * H + y) * W + x] = (uint8_t)(sx_rng_below(&r, 96) + (q == k ? 128 : 0));
            }
    }
}

static sx_status make_net(bool bn, bool dropout, sx_nn_net **out)
{
    SX_TRY(sx_nn_net_new("mpi_test", SX_F32, 7, out));
    sx_nn_net *net = *out;
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){H, W, 1});
    sx_nn_conv2d_params conv = sx_nn_conv2d_params_default(4, 3, 3);
    conv.act = bn ? SX_ACT_NONE : SX_ACT_RELU;
    x = sx_nn_conv2d(net, x, &conv);
    if (bn) {
        sx_nn_batch_norm_params bp = sx_nn_batch_norm_params_default();
        x = sx_nn_activation(net, sx_nn_batch_norm(net, x, &bp), SX_ACT_RELU);
    }
    if (dropout)
        x = sx_nn_dropout(net, x, 0.3);
    x = sx_nn_fully_connected(net, x, 16, SX_ACT_RELU);
    x = sx_nn_linear(net, x, CLASSES, SX_ACT_SOFTMAX);
    return sx_nn_net_status(net);
}

/* A tiny GPT over sequences of T tokens of a vocabulary of V. */
enum { T = 8, V = 13, C = 16 };

static sx_status make_gpt(sx_nn_net **out)
{
    SX_TRY(sx_nn_net_new("mpi_gpt", SX_F32, 7, out));
    sx_nn_net *net = *out;
    sx_nn_net_set_input_scale(net, 1);
    sx_nn_net_set_init(net, (sx_nn_init){.kind = SX_INIT_GAUSSIAN, .a = 0, .b = 0.1});
    int64_t t = T;
    sx_nn_embedding_params ep = sx_nn_embedding_params_default(V, C);
    sx_nn_layer *x = sx_nn_embedding(net, sx_nn_input(net, 1, &t), &ep);
    x = sx_nn_position_embedding(net, x);
    sx_nn_attention_params ap = sx_nn_attention_params_default(2);
    ap.causal = true;
    ap.fused_qkv = true;
    sx_nn_layer *h = sx_nn_attention(net, sx_nn_layer_norm(net, x, NULL), &ap);
    x = sx_nn_add(net, 2, (sx_nn_layer *[]){x, h});
    h = sx_nn_linear(net, sx_nn_layer_norm(net, x, NULL), 4 * C, SX_ACT_GELU_TANH);
    x = sx_nn_add(net, 2, (sx_nn_layer *[]){x, sx_nn_linear(net, h, C, SX_ACT_NONE)});
    sx_nn_layer *head = sx_nn_linear_nobias(net, sx_nn_layer_norm(net, x, NULL), V, SX_ACT_NONE);
    SX_TRY(sx_nn_net_status(net));
    SX_TRY(sx_nn_share(net, "dense_3.weight", "embedding_1.weight", true));
    (void)head;
    return SX_OK;
}

/* Sequences of a noisy counter (each token the previous one plus 1 or 2, mod V) and the next
 * tokens as class indices. */
static sx_status gpt_source(sx_tensor **x, sx_tensor **y, sx_ds_source **out)
{
    int64_t s[2] = {N, T};
    SX_TRY(sx_tensor_new(SX_F32, 2, s, x));
    SX_TRY(sx_tensor_new(SX_F32, 2, s, y));
    sx_rng r;
    sx_rng_seed(&r, 99);
    for (int i = 0; i < N; i++) {
        int v = (int)sx_rng_below(&r, V);
        for (int t = 0; t <= T; t++) {
            if (t < T)
                sx_tensor_set(*x, i * T + t, v);
            if (t > 0)
                sx_tensor_set(*y, i * T + t - 1, v);
            v = (v + 1 + (int)sx_rng_below(&r, 2)) % V;
        }
    }
    return sx_ds_source_tensors(*x, *y, V, out);
}

typedef struct opts {
    int batch, epochs;
    const char *out, *ckpt;
    bool fit, clip, bn, dropout, gpt;
    long die_at;
    sx_optim_kind opt;
} opts;

static bool die_cb(const sx_nn_step_info *info, void *ctx)
{
    const opts *o = ctx;
    const sx_nn_comm *c = sx_nn_comm_default();
    if (c != NULL && c->rank == 1 && info->step == o->die_at) {
        fprintf(stderr, "mpi_train: rank 1 kills itself after step %lld\n", (long long)info->step);
        raise(SIGKILL);
    }
    return false;
}

static int train(const opts *o)
{
    make_data();
    sx_ds_images set = {N, H, W, 1, CLASSES, pixels, labels, NULL, NULL, NULL, NULL};
    sx_nn_net *net = NULL;
    sx_ds_source *src = NULL;
    sx_tensor *gx = NULL, *gy = NULL;
    sx_status s = o->gpt ? make_gpt(&net) : make_net(o->bn, o->dropout, &net);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.epochs = o->epochs;
    p.batch = o->batch;
    p.optim = sx_optim_params_default(o->opt);
    p.optim.lr = o->opt == SX_OPTIM_ADAGRAD ? 0.05 : 0.01;
    p.clip_norm = o->clip ? 0.5 : 0;
    p.checkpoint_path = o->ckpt;
    p.sparse_targets = o->gpt;
    if (s == SX_OK && o->gpt) {
        sx_nn_fit_params fp = sx_nn_fit_params_default();
        fp.train = p;
        fp.train_metric = false;
        s = gpt_source(&gx, &gy, &src);
        if (s == SX_OK)
            s = sx_nn_fit(net, &fp, src, NULL, NULL);
    } else if (s == SX_OK && o->fit) {
        sx_nn_fit_params fp = sx_nn_fit_params_default();
        fp.train = p;
        fp.train_metric = false;
        fp.on_step = die_cb;
        fp.on_step_ctx = (void *)(uintptr_t)o; /* read only */
        s = sx_ds_source_images(&set, &src);
        if (s == SX_OK)
            s = sx_nn_fit(net, &fp, src, NULL, NULL);
    } else if (s == SX_OK) {
        s = sx_nn_train(net, &p, &set, NULL, NULL);
    }
    const sx_nn_comm *c = sx_nn_comm_default();
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", o->out, c != NULL ? c->rank : 0);
    if (s == SX_OK)
        s = sx_nn_checkpoint_save(net, &p, path);
    if (s != SX_OK)
        fprintf(stderr, "mpi_train: %s\n", sx_last_error());
    sx_ds_source_free(src);
    sx_tensor_free(gx);
    sx_tensor_free(gy);
    sx_nn_net_free(net);
    return s == SX_OK ? 0 : 1;
}

static int compare(const char *a, const char *b, double tol)
{
    sx_cg_file *fa = NULL, *fb = NULL;
    if (sx_cg_file_read(a, &fa) != SX_OK || sx_cg_file_read(b, &fb) != SX_OK) {
        fprintf(stderr, "mpi_train: %s\n", sx_last_error());
        sx_cg_file_free(fa);
        return 1;
    }
    double diff = 0, big = 0;
    int n = sx_cg_file_n_tensors(fa), bad = n != sx_cg_file_n_tensors(fb);
    for (int i = 0; i < n && !bad; i++) {
        const char *name = sx_cg_file_tensor_name(fa, i);
        const sx_tensor *ta = sx_cg_file_tensor(fa, name), *tb = sx_cg_file_tensor(fb, name);
        bad = tb == NULL || tb->size != ta->size;
        for (int64_t j = 0; !bad && j < ta->size; j++) {
            double x = sx_tensor_get(ta, j), y = sx_tensor_get(tb, j);
            diff = fmax(diff, fabs(x - y));
            big = fmax(big, fabs(x));
            bad = tol == 0 && memcmp(&x, &y, sizeof x) != 0;
        }
    }
    sx_cg_file_free(fa);
    sx_cg_file_free(fb);
    double rel = big > 0 ? diff / big : diff;
    printf("compare %s %s: max abs diff %.3g, relative to the largest weight (%.3g) %.3g%s\n", a, b,
           diff, big, rel, bad ? " (differ)" : "");
    return bad || rel > tol ? 1 : 0;
}

/* sx_mpi's documented errors. */
static int errors(void)
{
    int fails = 0;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "mpi_train errors: failed: %s\n", #cond);                              \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)
    CHECK(sx_mpi_init(NULL, NULL, NULL) == SX_E_ARG);
    sx_mpi *m = (sx_mpi *)&fails; /* must come back NULL */
    setenv("SX_MPI_TIMEOUT", "soon", 1);
    CHECK(sx_mpi_init(NULL, NULL, &m) == SX_E_IO && m == NULL);
    CHECK(strstr(sx_last_error(), "SX_MPI_TIMEOUT") != NULL);
    setenv("SX_MPI_TIMEOUT", "30", 1);
    CHECK(sx_mpi_init(NULL, NULL, &m) == SX_OK && m != NULL);
    const sx_nn_comm *c = sx_mpi_comm(m);
    double v[2] = {1, 2};
    CHECK(c->bcast(c->ctx, v, 16, c->size) == SX_E_ARG);
    CHECK(c->bcast(c->ctx, v, -1, 0) == SX_E_ARG);
    CHECK(c->allreduce(c->ctx, v, 2, (sx_dtype)7, false) == SX_E_ARG);
    CHECK(c->allreduce(c->ctx, NULL, 2, SX_F64, false) == SX_E_ARG);
    CHECK(v[0] == 1 && v[1] == 2);
    CHECK(c->allreduce(c->ctx, v, 2, SX_F64, true) == SX_OK && v[1] == 2);
    CHECK(sx_mpi_size(NULL) == 1 && sx_mpi_rank(NULL) == 0 && sx_mpi_comm(NULL) == NULL);
    sx_mpi_finalize(m, true);
    sx_mpi_finalize(NULL, true);
    printf("mpi_train errors: %d failed\n", fails);
    return fails > 0;
}

static int parse_train(int argc, char **argv, opts *o)
{
    *o = (opts){8, 2, NULL, NULL, false, false, false, false, false, 0, SX_OPTIM_ADAGRAD};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (strcmp(a, "--batch") == 0)
            o->batch = atoi(v), i++;
        else if (strcmp(a, "--epochs") == 0)
            o->epochs = atoi(v), i++;
        else if (strcmp(a, "--out") == 0)
            o->out = v, i++;
        else if (strcmp(a, "--checkpoint") == 0)
            o->ckpt = v, i++;
        else if (strcmp(a, "--die-at") == 0)
            o->die_at = atol(v), i++;
        else if (strcmp(a, "--optimiser") == 0) {
            if (sx_optim_parse(v, &o->opt) != SX_OK)
                return 2;
            i++;
        } else if (strcmp(a, "--fit") == 0)
            o->fit = true;
        else if (strcmp(a, "--clip") == 0)
            o->clip = true;
        else if (strcmp(a, "--bn") == 0)
            o->bn = true;
        else if (strcmp(a, "--dropout") == 0)
            o->dropout = true;
        else if (strcmp(a, "--gpt") == 0)
            o->gpt = true;
        else
            return 2;
    }
    return o->out != NULL && o->batch > 0 && o->epochs > 0 ? 0 : 2;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "compare") == 0)
        return compare(argv[2], argv[3], atof(argv[4]));
    if (argc == 2 && strcmp(argv[1], "errors") == 0)
        return errors();
    opts o;
    if (argc < 2 || strcmp(argv[1], "train") != 0 || parse_train(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: mpi_train train --batch B --epochs E --out PATH [...] | compare "
                        "A B TOL | errors\n");
        return 2;
    }
    sx_mpi *m = NULL;
    if (sx_mpi_launched() && sx_mpi_init(&argc, &argv, &m) != SX_OK) {
        fprintf(stderr, "mpi_train: %s\n", sx_last_error());
        return 1;
    }
    int rc = train(&o);
    sx_mpi_finalize(m, rc == 0);
    return rc;
}
