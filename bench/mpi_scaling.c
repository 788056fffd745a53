/* mpi_scaling: data-parallel training over MPI, one run of one network, alone or
 * under mpirun; bench/mpi_scaling (the script) runs 1 rank x 2 threads against 2 ranks x 1 thread.
 *
 *   mpi_scaling --net mnist|resnet20 [--data DIR] [--limit N] [--epochs E] [--batch B]
 *               [--threads T] [--seed S] [--null-comm 1]
 *
 * --batch is the GLOBAL batch (default: the net's, 100 for mnist, 128 for resnet20): each of
 * the R ranks trains B / R examples of it, so every configuration trains the same batches.
 * mnist is examples/mnist_train's reference network (Adagrad lr 0.005), resnet20 the zoo's
 * (bench/zoo_nets.c; Adam lr 0.001). One line on rank 0's stdout:
 *   result: net=NAME ranks=R threads=T batch=B rank_batch=b steps=S epoch_s=... step_ms=...
 *           params=P comm_bytes_per_step=C allreduce_wait_ms=W hidden_ms=H compute_ms=...
 *           buckets=K loss=...
 * (trained with sx_nn_fit, no validation). epoch_s: the training seconds per epoch (the
 * history's); step_ms: wall time per step after the first (compilation and the start-up
 * broadcast left out); params: every parameter (f32); comm_bytes_per_step: what this rank put
 * into collectives per step (the gradients, the loss, batch-norm statistics); allreduce_wait_ms:
 * the time per step rank 0 spent blocked waiting for collectives to complete (the exposed
 * communication); hidden_ms: the gradient sums' time in flight per step while rank 0 went on
 * computing (the rest of the backward pass), summed over the buckets (sx_mpi_hidden_seconds);
 * compute_ms = step_ms - allreduce_wait_ms; cpu_ms: the process's CPU time per step (all its
 * threads; the figure to compare on a loaded machine).
 * --null-comm 1 (alone, no mpirun): train through the data-parallel path over a communicator of
 * 2 ranks that communicates nothing (the other rank's sum is taken as zero), to measure what the
 * path costs without the network: the packing into buckets and the gemm-update fusion that steps
 * aside (ranks=1 in the line, null_comm=1; it trains rows [0, B) of global batches of 2B: compare
 * step_ms, not epoch_s). */
#include "zoo_nets.h"

#include <sx_mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static sx_cg_node *scale_input(sx_cg_graph *g, sx_cg_node *x, void *ctx)
{
    (void)ctx;
    return sx_cg_mul_scalar(g, x, 1.0 / 256.0);
}

/* examples/mnist_train's network (tools/mnist_ref.c). */
static sx_status mnist_net(uint64_t seed, sx_nn_net **out)
{
    SX_TRY(sx_nn_net_new("lazy_mnist", SX_F32, seed, out));
    sx_nn_net *net = *out;
    sx_nn_net_set_input_scale(net, 1.0);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){28, 28, 1});
    x = sx_nn_lambda(net, x, scale_input, NULL, "x/256");
    sx_nn_conv2d_params conv = sx_nn_conv2d_params_default(32, 5, 5);
    conv.conv.padding = SX_PAD_SAME;
    conv.act = SX_ACT_RELU;
    x = sx_nn_conv2d(net, x, &conv);
    sx_nn_pool2d_params pool = sx_nn_pool2d_params_default(2, 2);
    x = sx_nn_max_pool2d(net, x, &pool);
    x = sx_nn_dropout(net, x, 0.1);
    x = sx_nn_fully_connected(net, x, 1024, SX_ACT_RELU);
    sx_nn_linear(net, x, 10, SX_ACT_SOFTMAX);
    return sx_nn_net_status(net);
}

typedef struct opts {
    const char *net, *data;
    long limit, epochs, batch, threads, seed, null_comm;
} opts;

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){"mnist", "data/mnist", 2000, 1, 0, 0, 42, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            return 2;
        char *end = NULL;
        long n = strtol(v, &end, 10);
        bool num = *v != '\0' && *end == '\0' && n >= 0;
        if (strcmp(a, "--net") == 0)
            o->net = v;
        else if (strcmp(a, "--data") == 0)
            o->data = v;
        else if (strcmp(a, "--limit") == 0 && num)
            o->limit = n;
        else if (strcmp(a, "--epochs") == 0 && num && n > 0)
            o->epochs = n;
        else if (strcmp(a, "--batch") == 0 && num && n > 0)
            o->batch = n;
        else if (strcmp(a, "--threads") == 0 && num)
            o->threads = n;
        else if (strcmp(a, "--seed") == 0 && num)
            o->seed = n;
        else if (strcmp(a, "--null-comm") == 0 && num)
            o->null_comm = n;
        else
            return 2;
        i++;
    }
    return strcmp(o->net, "mnist") == 0 || strcmp(o->net, "resnet20") == 0 ? 0 : 2;
}

/* A communicator of two ranks whose other rank contributes nothing (--null-comm). */
static sx_status null_allreduce(void *ctx, void *buf, int64_t n, sx_dtype dt, bool max)
{
    (void)ctx, (void)buf, (void)n, (void)dt, (void)max;
    return SX_OK;
}

static sx_status null_bcast(void *ctx, void *buf, int64_t bytes, int root)
{
    (void)ctx, (void)buf, (void)bytes, (void)root;
    return SX_OK;
}

static sx_status null_start(void *ctx, void *buf, int64_t n, sx_dtype dt)
{
    (void)ctx, (void)buf, (void)n, (void)dt;
    return SX_OK;
}

static sx_status null_wait(void *ctx, void *buf)
{
    (void)ctx, (void)buf;
    return SX_OK;
}

/* What the steps after the first measure: the first step (compilation, the start-up
 * broadcast) is left out of every per-step figure. */
typedef struct meter {
    sx_mpi *mpi;
    int64_t steps, bytes0, bytes1;
    double t0, t1, wait0, wait1, hidden0, hidden1, cpu0, cpu1;
} meter;

/* This process's CPU time (every thread), seconds. */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool on_step(const sx_nn_step_info *info, void *ctx)
{
    meter *m = ctx;
    m->t1 = sx_seconds();
    m->bytes1 = sx_mpi_bytes(m->mpi);
    m->wait1 = sx_mpi_wait_seconds(m->mpi);
    m->hidden1 = sx_mpi_hidden_seconds(m->mpi);
    m->cpu1 = cpu_seconds();
    if (m->steps++ == 0) {
        m->cpu0 = m->cpu1;
        m->t0 = m->t1;
        m->bytes0 = m->bytes1;
        m->wait0 = m->wait1;
        m->hidden0 = m->hidden1;
    }
    (void)info;
    return false;
}

static int run(const opts *o, sx_mpi *mpi)
{
    bool mnist = strcmp(o->net, "mnist") == 0;
    int ranks = sx_mpi_size(mpi), rank = sx_mpi_rank(mpi);
    long batch = o->batch > 0 ? o->batch : mnist ? 100 : 128;
    if (batch % ranks != 0) {
        fprintf(stderr, "mpi_scaling: batch %ld is not a multiple of %d ranks\n", batch, ranks);
        return 2;
    }
    if (o->threads > 0 && sx_threads_set((int)o->threads) != SX_OK)
        return 1;
    sx_ds_images *train = NULL;
    sx_ds_source *src = NULL;
    sx_nn_net *net = NULL;
    sx_status s = sx_ds_mnist_load(o->data, SX_DS_TRAIN, o->limit, &train);
    if (s == SX_OK)
        s = sx_ds_source_images(train, &src);
    if (s == SX_OK)
        s = mnist ? mnist_net((uint64_t)o->seed, &net)
                  : zoo_build("resnet20", (uint64_t)o->seed, &net);
    meter m = {mpi, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    sx_nn_comm null = {0, 2, NULL, null_allreduce, null_bcast, null_start, NULL, null_wait};
    sx_nn_fit_params fp = sx_nn_fit_params_default();
    fp.train.epochs = (int)o->epochs;
    fp.train.batch = (int)(batch / ranks);
    fp.train.optim = sx_optim_params_default(mnist ? SX_OPTIM_ADAGRAD : SX_OPTIM_ADAM);
    fp.train.optim.lr = mnist ? 0.005 : 0.001;
    fp.train.verbose = 0;
    fp.train_metric = false;
    fp.on_step = on_step;
    fp.on_step_ctx = &m;
    if (o->null_comm)
        fp.train.comm = &null;
    sx_nn_history h;
    memset(&h, 0, sizeof h);
    if (s == SX_OK)
        s = sx_nn_fit(net, &fp, src, NULL, &h);
    if (s != SX_OK) {
        fprintf(stderr, "mpi_scaling: %s\n", sx_last_error());
    } else if (rank == 0) {
        double n = m.steps > 1 ? (double)(m.steps - 1) : 1, epoch_s = 0;
        for (int64_t i = 0; i < h.n; i++)
            epoch_s += h.rows[i].seconds / (double)h.n;
        double step_ms = 1e3 * (m.t1 - m.t0) / n, wait_ms = 1e3 * (m.wait1 - m.wait0) / n;
        double hidden_ms = 1e3 * (m.hidden1 - m.hidden0) / n;
        printf("result: net=%s ranks=%d threads=%d batch=%ld rank_batch=%d steps=%lld "
               "epoch_s=%.3f step_ms=%.2f params=%lld comm_bytes_per_step=%.0f "
               "allreduce_wait_ms=%.2f hidden_ms=%.2f compute_ms=%.2f cpu_ms=%.2f null_comm=%ld "
               "loss=%.4f\n",
               o->net, ranks, sx_threads_get(), batch, fp.train.batch, (long long)m.steps, epoch_s,
               step_ms, (long long)sx_nn_net_param_count(net), (double)(m.bytes1 - m.bytes0) / n,
               wait_ms, hidden_ms, step_ms - wait_ms, 1e3 * (m.cpu1 - m.cpu0) / n, o->null_comm,
               h.n > 0 ? h.rows[h.n - 1].train_loss : 0.0);
    }
    sx_nn_history_free(&h);
    sx_ds_source_free(src);
    sx_nn_net_free(net);
    sx_ds_images_free(train);
    return s == SX_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: mpi_scaling --net mnist|resnet20 [--data DIR] [--limit N] "
                        "[--epochs E] [--batch B] [--threads T] [--seed S] [--null-comm 1]\n");
        return 2;
    }
    sx_mpi *mpi = NULL;
    if (sx_mpi_launched() && sx_mpi_init(&argc, &argv, &mpi) != SX_OK) {
        fprintf(stderr, "mpi_scaling: %s\n", sx_last_error());
        return 1;
    }
    int rc = run(&o, mpi);
    sx_mpi_finalize(mpi, rc == 0);
    return rc;
}
