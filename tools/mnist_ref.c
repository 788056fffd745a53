/* mnist_ref.c: the MNIST reference run behind examples/mnist_train and `strix train`: train
 * the reference CNN (Owl's lazy_mnist) on MNIST read straight from the compressed IDX files, then
 * report test accuracy, speed and memory in one line. Both programs call strix_mnist_train with
 * their own name, so their output and their trained bits are the same.
 *
 *   input 28x28x1 -> lambda x/256 -> conv2d 5x5, 32 filters, SAME, relu -> max_pool 2x2
 *   -> dropout 0.1 -> fully_connected 1024 relu -> linear 10 softmax
 *   cross-entropy, Adagrad lr 0.005, minibatch 100, f32
 *
 * Options: --data DIR --epochs N --limit N --batch B --optimiser NAME --lr X --seed S
 *          --threads T --save PATH --eager --dot PATH --checkpoint PATH --quiet
 *          --no-optimise --no-plan (to measure what the graph optimiser and planner buy)
 *          --profile (time per op kind of the compiled training graph)
 * Ends with: result: test_accuracy=A train_seconds=S images_per_second=R peak_rss_mb=M
 *            nodes_before=N1 nodes_after=N2 planned_mb=P naive_mb=Q infer_images_per_second=I
 *            compile_ms=C infer_compile_ms=D edges_before=E1 edges_after=E2
 * (compile_ms: the training graph, 0 with --eager; infer_images_per_second: a separate, timed
 * pass of the test set through a freshly compiled inference graph, bytes converted per batch;
 * bench/compare_torch parses these fields by name.) */
#include "mnist_ref.h"

#include <sx_nn.h>
#ifdef STRIX_HAVE_MPI
#include <sx_mpi.h>
#endif

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#ifndef STRIX_DATA_DIR
#define STRIX_DATA_DIR "data/mnist"
#endif

static int die_sx(const char *prog, const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", prog, what, sx_last_error());
    return 1;
}

/* x / 256: the network scales raw pixel values itself (a lambda only builds graph nodes, so a
 * saved model keeps it). */
static sx_cg_node *scale_input(sx_cg_graph *g, sx_cg_node *x, void *ctx)
{
    (void)ctx;
    return sx_cg_mul_scalar(g, x, 1.0 / 256.0);
}

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (s == NULL || *s == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double *out)
{
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0;
    if (s == NULL || *s == '\0' || *end != '\0' || !isfinite(v) || v <= 0)
        return false;
    *out = v;
    return true;
}

/* Predictions for the first `count` rows of the batch x (B,h,w,c) into out (B,classes). */
static sx_status predict_rows(sx_nn_model *m, const sx_tensor *x, sx_tensor *out, int64_t count)
{
    int64_t xs[4] = {count, x->shape[1], x->shape[2], x->shape[3]}, os[2] = {count, out->shape[1]};
    sx_tensor xv = sx_tensor_view(x->dtype, 4, xs, x->data);
    sx_tensor ov = sx_tensor_view(out->dtype, 2, os, out->data);
    return sx_nn_model_predict(m, &xv, &ov);
}

/* Inference throughput: every image of `set` through a new compiled inference graph, in batches
 * of `batch`, each converted from bytes as in training, and the argmax taken (what a user's
 * prediction loop does). The compile time is measured apart, and one untimed batch goes first:
 * the graph's arena is then touched once, as a warm model's is (bench/torch_mnist.py times a
 * second pass likewise). *accuracy lets the caller check the pass against the evaluation. */
static sx_status time_inference(sx_nn_net *net, const sx_ds_images *set, int64_t batch,
                                double *images_per_second, double *compile_ms, double *accuracy)
{
    sx_nn_model *m = NULL;
    sx_ds_batcher *b = NULL;
    sx_tensor *x = NULL, *y = NULL, *out = NULL;
    int64_t xs[4] = {batch, set->h, set->w, set->c}, ys[1] = {batch};
    int64_t os[2] = {batch, set->classes}, count = 0, seen = 0, correct = 0, k = set->classes;
    sx_ds_batcher_params bp = sx_ds_batcher_params_default();
    bp.batch_size = batch;
    bp.shuffle = false;
    bp.scale = 1; /* raw bytes: the network scales its input itself */
    double t0 = sx_seconds();
    sx_status s = sx_nn_compile_infer(net, batch, &m);
    *compile_ms = 1e3 * (sx_seconds() - t0);
    if (s == SX_OK)
        s = sx_ds_batcher_new(set, &bp, &b);
    if (s == SX_OK)
        s = sx_tensor_new(SX_F32, 4, xs, &x);
    if (s == SX_OK)
        s = sx_tensor_new(SX_F32, 1, ys, &y);
    if (s == SX_OK)
        s = sx_tensor_new(SX_F32, 2, os, &out);
    if (s == SX_OK && (s = sx_ds_batcher_next(b, x, y, &count)) == SX_OK && count > 0)
        s = predict_rows(m, x, out, count);
    if (s == SX_OK)
        s = sx_ds_batcher_set_epoch(b, 0);
    t0 = sx_seconds();
    while (s == SX_OK && (s = sx_ds_batcher_next(b, x, y, &count)) == SX_OK && count > 0) {
        s = predict_rows(m, x, out, count);
        const float *o = SX_F32P(out), *lab = SX_F32P(y);
        for (int64_t r = 0; s == SX_OK && r < count; r++) {
            int64_t best = 0;
            for (int64_t c = 1; c < k; c++)
                best = o[r * k + c] > o[r * k + best] ? c : best;
            correct += best == (int64_t)lab[r];
        }
        seen += count;
    }
    double el = sx_seconds() - t0;
    if (s == SX_OK) {
        *images_per_second = el > 0 ? (double)seen / el : 0;
        *accuracy = seen > 0 ? (double)correct / (double)seen : 0;
    }
    sx_tensor_free(out);
    sx_tensor_free(y);
    sx_tensor_free(x);
    sx_ds_batcher_free(b);
    sx_nn_model_free(m);
    return s;
}

static void usage(FILE *f, const char *prog)
{
    int pad = (int)strlen(prog) + 8;
    fprintf(f,
            "usage: %s [--data DIR] [--epochs N] [--limit N] [--batch B]\n"
            "%*s[--optimiser adagrad|sgd|momentum|nesterov|rmsprop|adam|\n"
            "%*s adamw|amsgrad|rmsprop_centered|adam_keras]\n"
            "%*s[--lr X] [--seed S] [--threads T] [--save PATH] [--eager]\n"
            "%*s[--dot PATH] [--checkpoint PATH] [--quiet]\n"
            "%*s[--no-optimise] [--no-plan] [--profile]\n",
            prog, pad, "", pad, "", pad, "", pad, "", pad, "");
}

/* The reference network: conv 5x5x32 (SAME, relu), max pool 2x2, dropout 0.1, dense 1024 (relu),
 * dense 10 (softmax), on raw pixels scaled by 1/256 in the graph. */
static sx_status reference_net(uint64_t seed, sx_nn_net **out)
{
    sx_nn_net *net = NULL;
    *out = NULL;
    SX_TRY(sx_nn_net_new("lazy_mnist", SX_F32, seed, &net));
    sx_nn_net_set_input_scale(net, 1.0); /* raw pixel values; the lambda scales them */
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){28, 28, 1});
    x = sx_nn_lambda(net, x, scale_input, NULL, "x/256");
    sx_nn_conv2d_params conv = sx_nn_conv2d_params_default(32, 5, 5);
    conv.conv.padding = SX_PAD_SAME;
    conv.act = SX_ACT_RELU;
    x = sx_nn_conv2d(net, x, &conv);
    sx_nn_pool2d_params pool = sx_nn_pool2d_params_default(2, 2); /* stride 2, VALID */
    x = sx_nn_max_pool2d(net, x, &pool);
    x = sx_nn_dropout(net, x, 0.1);
    x = sx_nn_fully_connected(net, x, 1024, SX_ACT_RELU);
    x = sx_nn_linear(net, x, 10, SX_ACT_SOFTMAX);
    sx_status st = sx_nn_net_status(net);
    if (st != SX_OK) {
        sx_nn_net_free(net);
        return st;
    }
    *out = net;
    return SX_OK;
}

/* mnist_train's options, as parsed. */
typedef struct run_opts {
    const char *data, *save, *dot, *ckpt;
    long epochs, limit, batch, seed, threads;
    double lr;
    bool eager, quiet, no_opt, no_plan, profile;
    sx_optim_kind opt;
} run_opts;

/* Parse argv into *o: -1 to go on, else the exit status (0 after --help, 2 for a bad option). */
static int parse_opts(const char *prog, int argc, char **argv, run_opts *o)
{
    *o = (run_opts){.data = STRIX_DATA_DIR,
                    .epochs = 1,
                    .batch = 100,
                    .seed = 42,
                    .lr = -1,
                    .opt = SX_OPTIM_ADAGRAD};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true, takes = true;
        if (strcmp(a, "--data") == 0)
            ok = v != NULL, o->data = v;
        else if (strcmp(a, "--epochs") == 0)
            ok = parse_long(v, 1, 1000, &o->epochs);
        else if (strcmp(a, "--limit") == 0)
            ok = parse_long(v, 1, 60000, &o->limit);
        else if (strcmp(a, "--batch") == 0)
            ok = parse_long(v, 1, 60000, &o->batch);
        else if (strcmp(a, "--seed") == 0)
            ok = parse_long(v, 0, 2147483647L, &o->seed);
        else if (strcmp(a, "--threads") == 0)
            ok = parse_long(v, 1, 1024, &o->threads);
        else if (strcmp(a, "--lr") == 0)
            ok = parse_double(v, &o->lr);
        else if (strcmp(a, "--optimiser") == 0 || strcmp(a, "--optimizer") == 0)
            ok = v != NULL && sx_optim_parse(v, &o->opt) == SX_OK;
        else if (strcmp(a, "--save") == 0)
            ok = v != NULL, o->save = v;
        else if (strcmp(a, "--dot") == 0)
            ok = v != NULL, o->dot = v;
        else if (strcmp(a, "--checkpoint") == 0)
            ok = v != NULL, o->ckpt = v;
        else if (strcmp(a, "--eager") == 0)
            o->eager = true, takes = false;
        else if (strcmp(a, "--quiet") == 0)
            o->quiet = true, takes = false;
        else if (strcmp(a, "--no-optimise") == 0)
            o->no_opt = true, takes = false;
        else if (strcmp(a, "--no-plan") == 0)
            o->no_plan = true, takes = false;
        else if (strcmp(a, "--profile") == 0)
            o->profile = true, takes = false;
        else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout, prog);
            return 0;
        } else {
            fprintf(stderr, "%s: unknown option %s\n", prog, a);
            usage(stderr, prog);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "%s: bad or missing value for %s%s%s\n", prog, a, v ? ": " : "",
                    v ? v : "");
            return 2;
        }
        i += takes;
    }
    return -1;
}

static int mnist_run(const char *prog, int argc, char **argv)
{
    run_opts o;
    int rc = parse_opts(prog, argc, argv, &o);
    if (rc >= 0)
        return rc;
    const char *data = o.data, *save = o.save, *dot = o.dot, *ckpt = o.ckpt;
    long epochs = o.epochs, limit = o.limit, batch = o.batch, seed = o.seed, threads = o.threads;
    double lr = o.lr;
    bool eager = o.eager, quiet = o.quiet, no_opt = o.no_opt, no_plan = o.no_plan,
         profile = o.profile;
    sx_optim_kind opt = o.opt;
    if (threads > 0 && sx_threads_set((int)threads) != SX_OK)
        return die_sx(prog, "--threads");
    /* under mpirun, sx_nn_train runs data-parallel; rank 0 alone prints and writes */
    const sx_nn_comm *comm = sx_nn_comm_default();
    int rank = comm != NULL ? comm->rank : 0, ranks = comm != NULL ? comm->size : 1;
    if (rank != 0)
        quiet = true, save = NULL, dot = NULL;

    /* data: the four *-ubyte.gz files, kept as bytes and converted per batch */
    sx_ds_images *train = NULL, *test = NULL;
    if (sx_ds_mnist_load(data, SX_DS_TRAIN, limit, &train) != SX_OK ||
        sx_ds_mnist_load(data, SX_DS_TEST, 0, &test) != SX_OK) {
        fprintf(stderr, "%s: %s\n(run scripts/fetch_mnist to get the data)\n", prog,
                sx_last_error());
        return 1;
    }
    /* run-length coded: 55 MB of bytes become 15 MB, decoded batch by batch */
    if (sx_ds_images_compact(train) != SX_OK || sx_ds_images_compact(test) != SX_OK)
        return die_sx(prog, "compacting the data");

    /* the reference network */
    sx_nn_net *net = NULL;
    if (reference_net((uint64_t)seed, &net) != SX_OK)
        return die_sx(prog, "network");
    if (!quiet)
        sx_nn_net_print(net, stderr);

    sx_nn_train_params p = sx_nn_train_params_default();
    p.epochs = (int)epochs;
    p.batch = (int)batch;
    p.optim = sx_optim_params_default(opt);
    p.optim.lr = lr > 0 ? lr : opt == SX_OPTIM_ADAGRAD ? 0.005 : p.optim.lr;
    p.eager = eager;
    p.optimise = !no_opt;
    p.plan_memory = !no_plan;
    p.profile = profile;
    p.verbose = quiet ? 0 : 1;
    p.checkpoint_path = ckpt;

    if (dot != NULL) {
        sx_nn_model *m = NULL;
        if (sx_nn_compile_train(net, &p, batch, &m) != SX_OK ||
            sx_cg_dot_save(sx_nn_model_graph(m), dot) != SX_OK)
            return die_sx(prog, "--dot");
        sx_nn_model_free(m);
    }

    sx_nn_train_report r;
    sx_status s = sx_nn_train(net, &p, train, test, &r);
    if (s == SX_OK && rank != 0) { /* the result is rank 0's to print */
        sx_nn_net_free(net);
        sx_ds_images_free(train);
        sx_ds_images_free(test);
        return 0;
    }
    if (s == SX_E_INTERRUPTED) {
        fprintf(stderr, "%s: %s\n", prog, sx_last_error());
        return 130;
    }
    if (s != SX_OK)
        return die_sx(prog, "training");
    if (save != NULL && sx_nn_save(net, save) != SX_OK)
        return die_sx(prog, "--save");

    double infer_ips = 0, infer_compile_ms = 0, infer_acc = 0;
    if (time_inference(net, test, batch, &infer_ips, &infer_compile_ms, &infer_acc) != SX_OK)
        return die_sx(prog, "inference");
    if (r.test_accuracy >= 0 && fabs(infer_acc - r.test_accuracy) > 1e-9)
        fprintf(stderr, "%s: the timed inference pass scored %.4f, the evaluation %.4f\n", prog,
                infer_acc, r.test_accuracy);

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int64_t images = r.steps > 0 ? (int64_t)train->n * epochs : 0;
    printf("result: test_accuracy=%.4f train_seconds=%.2f images_per_second=%.0f "
           "peak_rss_mb=%.0f nodes_before=%lld nodes_after=%lld planned_mb=%.1f naive_mb=%.1f "
           "infer_images_per_second=%.0f compile_ms=%.1f infer_compile_ms=%.1f "
           "edges_before=%lld edges_after=%lld ranks=%d\n",
           r.test_accuracy, r.train_seconds,
           r.train_seconds > 0 ? (double)images / r.train_seconds : 0, (double)ru.ru_maxrss / 1024,
           (long long)r.compile.nodes_before, (long long)r.compile.nodes_after,
           (double)r.compile.planned_bytes / 1048576, (double)r.compile.naive_bytes / 1048576,
           infer_ips, 1e3 * r.compile.compile_seconds, infer_compile_ms,
           (long long)r.compile.edges_before, (long long)r.compile.edges_after, ranks);
    sx_nn_net_free(net);
    sx_ds_images_free(train);
    sx_ds_images_free(test);
    return 0;
}

int strix_mnist_train(const char *prog, int argc, char **argv)
{
#ifdef STRIX_HAVE_MPI
    /* MPI only when a launcher started this process: a plain run never initialises it */
    if (!sx_mpi_launched())
        return mnist_run(prog, argc, argv);
    sx_mpi *mpi = NULL;
    if (sx_mpi_init(NULL, NULL, &mpi) != SX_OK)
        return die_sx(prog, "MPI");
    int rc = mnist_run(prog, argc, argv);
    sx_mpi_finalize(mpi, rc == 0);
    return rc;
#else
    return mnist_run(prog, argc, argv);
#endif
}
