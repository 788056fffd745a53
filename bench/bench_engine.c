/* bench_engine.c: what the dependency engine buys and costs.
 * (a) A*x + B*y, A, B 2000x2000, x, y 2000x500 f32: two matmuls and an add as engine
 *     operations on 2 workers (one kernel thread each while they run side by side) against the
 *     same calls made directly with one kernel thread (and, for reference, with every thread).
 * (b) A wide graph of many small independent operations (y_i = x + c_i, 1024 f32): wall time
 *     per op of the engine with 1 worker minus the direct calls (the engine's overhead per
 *     pushed op), the owner's CPU time per push, and the speedup of 2 workers over direct calls.
 * (c) The MNIST training step (examples/mnist_train.c's network, batch 100, random data):
 *     sequential graph evaluation against the parallel engine with 2 workers.
 * Minimum over interleaved repetitions (the machine is shared). Ends with one line:
 *     result: axby_speedup=X overhead_ns_per_op=Y mnist_step_speedup=Z
 *     bench_engine [REPS]        (default 5) */
#include <sx_engine.h>
#include <sx_nn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double min2(double a, double b)
{
    return a < b ? a : b;
}

static sx_tensor *rand_tensor(sx_rng *rng, int64_t r, int64_t c)
{
    sx_tensor *t = NULL;
    int64_t shape[2] = {r, c};
    CHECK(sx_tensor_new(SX_F32, 2, shape, &t));
    CHECK(sx_tensor_rand_uniform(t, rng, -1, 1));
    return t;
}

/* ---------------------------------------------------------------- (a) A*x + B*y */

struct mm_op {
    const sx_tensor *a, *b;
    sx_tensor *out;
};

static sx_status mm_run(void *arg)
{
    struct mm_op *m = arg;
    return sx_tensor_matmul_out(m->a, m->b, false, false, 1.0, 0.0, m->out);
}

static sx_status add_run(void *arg)
{
    struct mm_op *m = arg;
    return sx_tensor_binary_out(SX_BINARY_ADD, m->a, m->b, m->out);
}

/* One evaluation of A*x + B*y on engine e; variables A, x, B, y, Ax, By, out. */
static double axby_once(sx_engine *e, const sx_var *v, struct mm_op *ops)
{
    double t0 = now();
    sx_var ax_in[2] = {v[0], v[1]}, by_in[2] = {v[2], v[3]}, sum_in[2] = {v[4], v[5]};
    CHECK(sx_engine_push(e, mm_run, &ops[0], ax_in, 2, &v[4], 1, 0));
    CHECK(sx_engine_push(e, mm_run, &ops[1], by_in, 2, &v[5], 1, 0));
    CHECK(sx_engine_push(e, add_run, &ops[2], sum_in, 2, &v[6], 1, 0));
    CHECK(sx_engine_wait_all(e));
    return now() - t0;
}

/* The three calls directly, with the calling thread's kernel thread count. */
static double axby_direct(struct mm_op *ops)
{
    double t0 = now();
    CHECK(mm_run(&ops[0]));
    CHECK(mm_run(&ops[1]));
    CHECK(add_run(&ops[2]));
    return now() - t0;
}

static double bench_axby(int reps)
{
    sx_rng rng;
    sx_rng_seed(&rng, 1);
    sx_tensor *A = rand_tensor(&rng, 2000, 2000), *B = rand_tensor(&rng, 2000, 2000);
    sx_tensor *x = rand_tensor(&rng, 2000, 500), *y = rand_tensor(&rng, 2000, 500);
    sx_tensor *Ax = rand_tensor(&rng, 2000, 500), *By = rand_tensor(&rng, 2000, 500);
    sx_tensor *out = rand_tensor(&rng, 2000, 500), *ref = rand_tensor(&rng, 2000, 500);
    struct mm_op ops[3] = {{A, x, Ax}, {B, y, By}, {Ax, By, out}};
    struct mm_op direct_ops[3] = {{A, x, Ax}, {B, y, By}, {Ax, By, ref}};
    sx_engine *e = NULL;
    CHECK(sx_engine_new(2, &e));
    sx_var v[7];
    for (int i = 0; i < 7; i++)
        CHECK(sx_engine_var_new(e, &v[i]));
    int all_threads = sx_threads_get();
    double seq = 1e30, wide = 1e30, par = 1e30;
    (void)axby_once(e, v, ops); /* warm up: page faults, packing buffers */
    for (int r = 0; r < reps; r++) {
        CHECK(sx_threads_set_local(1)); /* the sequential baseline: one kernel thread per op */
        seq = min2(seq, axby_direct(direct_ops));
        CHECK(sx_threads_set_local(0));
        wide = min2(wide, axby_direct(direct_ops)); /* every kernel thread, for reference */
        par = min2(par, axby_once(e, v, ops));
    }
    if (memcmp(ref->data, out->data, (size_t)out->size * sizeof(float)) != 0) {
        fprintf(stderr, "bench_engine: A*x + B*y differs between the engine and direct calls\n");
        exit(1);
    }
    printf("(a) A*x + B*y (2000x2000 @ 2000x500, f32), min of %d:\n", reps);
    printf("    direct calls, 1 kernel thread     %8.1f ms\n", 1e3 * seq);
    printf("    direct calls, %d kernel threads    %8.1f ms\n", all_threads, 1e3 * wide);
    printf("    engine, 2 workers                 %8.1f ms   speedup %.2fx (vs %d threads %.2fx)\n",
           1e3 * par, seq / par, all_threads, wide / par);
    sx_engine_free(e);
    sx_tensor *all[8] = {A, B, x, y, Ax, By, out, ref};
    for (int i = 0; i < 8; i++)
        sx_tensor_free(all[i]);
    return seq / par;
}

/* ---------------------------------------------------------------- (b) many small ops */

enum { WIDE_OPS = 20000, WIDE_ELEMS = 1024 };

struct small_op {
    const sx_tensor *x, *c;
    sx_tensor *y;
};

static sx_status small_run(void *arg)
{
    struct small_op *s = arg;
    return sx_tensor_binary_out(SX_BINARY_ADD, s->x, s->c, s->y);
}

/* Push the wide graph on e: every op reads x and c_i and mutates y_i. Wall time; *push_cpu
 * gets the owner's CPU time spent in the pushes. */
static double wide_once(sx_engine *e, const sx_var *v, struct small_op *ops, double *push_cpu)
{
    double t0 = now(), c0 = cpu_now();
    for (int i = 0; i < WIDE_OPS; i++) {
        sx_var in[2] = {v[0], v[1 + i]};
        CHECK(sx_engine_push(e, small_run, &ops[i], in, 2, &v[1 + WIDE_OPS + i], 1, 0));
    }
    *push_cpu = cpu_now() - c0;
    CHECK(sx_engine_wait_all(e));
    return now() - t0;
}

static double bench_wide(int reps, double *speedup)
{
    sx_rng rng;
    sx_rng_seed(&rng, 2);
    int64_t shape[1] = {WIDE_ELEMS};
    sx_tensor *x = NULL;
    CHECK(sx_tensor_new(SX_F32, 1, shape, &x));
    CHECK(sx_tensor_rand_uniform(x, &rng, -1, 1));
    sx_tensor **c = calloc(WIDE_OPS, sizeof *c), **y = calloc(WIDE_OPS, sizeof *y);
    struct small_op *ops = calloc(WIDE_OPS, sizeof *ops);
    sx_var *v1 = calloc(1 + 2 * WIDE_OPS, sizeof *v1), *v2 = calloc(1 + 2 * WIDE_OPS, sizeof *v2);
    if (c == NULL || y == NULL || ops == NULL || v1 == NULL || v2 == NULL) {
        fprintf(stderr, "bench_engine: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < WIDE_OPS; i++) {
        CHECK(sx_tensor_new(SX_F32, 1, shape, &c[i]));
        CHECK(sx_tensor_rand_uniform(c[i], &rng, -1, 1));
        CHECK(sx_tensor_new(SX_F32, 1, shape, &y[i]));
        ops[i] = (struct small_op){x, c[i], y[i]};
    }
    sx_engine *e1 = NULL, *e2 = NULL;
    CHECK(sx_engine_new(1, &e1));
    CHECK(sx_engine_new(2, &e2));
    for (int i = 0; i < 1 + 2 * WIDE_OPS; i++) {
        CHECK(sx_engine_var_new(e1, &v1[i]));
        CHECK(sx_engine_var_new(e2, &v2[i]));
    }
    CHECK(sx_threads_set_local(1)); /* the direct calls: one kernel thread, like an op */
    double direct = 1e30, one = 1e30, two = 1e30, push = 1e30, cpu;
    (void)wide_once(e1, v1, ops, &cpu);
    (void)wide_once(e2, v2, ops, &cpu);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        for (int i = 0; i < WIDE_OPS; i++)
            CHECK(small_run(&ops[i]));
        direct = min2(direct, now() - t0);
        one = min2(one, wide_once(e1, v1, ops, &cpu));
        push = min2(push, cpu);
        two = min2(two, wide_once(e2, v2, ops, &cpu));
    }
    CHECK(sx_threads_set_local(0));
    double overhead = (one - direct) / WIDE_OPS;
    *speedup = direct / two;
    printf("(b) %d independent adds of %d f32, min of %d:\n", WIDE_OPS, WIDE_ELEMS, reps);
    printf("    direct calls                      %8.3f ms  (%.0f ns per op)\n", 1e3 * direct,
           1e9 * direct / WIDE_OPS);
    printf("    engine, 1 worker                  %8.3f ms  overhead %.0f ns per op\n", 1e3 * one,
           1e9 * overhead);
    printf("    owner's CPU time per push         %8.0f ns\n", 1e9 * push / WIDE_OPS);
    printf("    engine, 2 workers                 %8.3f ms  speedup %.2fx over direct calls\n",
           1e3 * two, *speedup);
    sx_engine_free(e1);
    sx_engine_free(e2);
    for (int i = 0; i < WIDE_OPS; i++) {
        sx_tensor_free(c[i]);
        sx_tensor_free(y[i]);
    }
    sx_tensor_free(x);
    free(c);
    free(y);
    free(ops);
    free(v1);
    free(v2);
    return overhead;
}

/* ---------------------------------------------------------------- (c) the MNIST step */

/* x / 256 inside the network, as examples/mnist_train.c does. */
static sx_cg_node *scale_input(sx_cg_graph *g, sx_cg_node *x, void *ctx)
{
    (void)ctx;
    return sx_cg_mul_scalar(g, x, 1.0 / 256.0);
}

static double step_time(sx_nn_model *m, const sx_tensor *x, const sx_tensor *y, int64_t *step,
                        int steps)
{
    double t0 = now(), loss;
    for (int i = 0; i < steps; i++)
        CHECK(sx_nn_model_step(m, x, y, 0.005, ++*step, &loss, NULL));
    return (now() - t0) / steps;
}

static double bench_mnist(int reps, int workers)
{
    enum { BATCH = 100, STEPS = 1 };
    sx_nn_net *net = NULL;
    CHECK(sx_nn_net_new("lazy_mnist", SX_F32, 42, &net));
    sx_nn_net_set_input_scale(net, 1.0);
    sx_nn_layer *l = sx_nn_input(net, 3, (int64_t[]){28, 28, 1});
    l = sx_nn_lambda(net, l, scale_input, NULL, "x/256");
    sx_nn_conv2d_params conv = sx_nn_conv2d_params_default(32, 5, 5);
    conv.conv.padding = SX_PAD_SAME;
    conv.act = SX_ACT_RELU;
    l = sx_nn_conv2d(net, l, &conv);
    sx_nn_pool2d_params pool = sx_nn_pool2d_params_default(2, 2); /* stride 2, VALID */
    l = sx_nn_max_pool2d(net, l, &pool);
    l = sx_nn_dropout(net, l, 0.1);
    l = sx_nn_fully_connected(net, l, 1024, SX_ACT_RELU);
    l = sx_nn_linear(net, l, 10, SX_ACT_SOFTMAX);
    CHECK(sx_nn_net_status(net));
    sx_nn_train_params p = sx_nn_train_params_default();
    sx_nn_model *m = NULL;
    CHECK(sx_nn_compile_train(net, &p, BATCH, &m));
    sx_cg_graph *g = sx_nn_model_graph(m);

    sx_rng rng;
    sx_rng_seed(&rng, 3);
    sx_tensor *x = NULL, *y = NULL;
    CHECK(sx_tensor_new(SX_F32, 4, (int64_t[]){BATCH, 28, 28, 1}, &x));
    CHECK(sx_tensor_rand_uniform(x, &rng, 0, 255));
    CHECK(sx_tensor_zeros(SX_F32, 2, (int64_t[]){BATCH, 10}, &y));
    for (int64_t i = 0; i < BATCH; i++)
        sx_tensor_set(y, i * 10 + (int64_t)sx_rng_below(&rng, 10), 1.0);

    int64_t step = 0;
    double seq = 1e30, par = 1e30;
    for (int r = 0; r < 4 * reps + 1; r++) { /* the first round warms up */
        CHECK(sx_cg_set_workers(g, 1));
        double s = step_time(m, x, y, &step, STEPS);
        CHECK(sx_cg_set_workers(g, workers));
        double q = step_time(m, x, y, &step, STEPS);
        if (r > 0) {
            seq = min2(seq, s);
            par = min2(par, q);
        }
    }
    printf("(c) MNIST training step (lazy_mnist, batch %d, Adagrad), min of %d steps:\n", BATCH,
           4 * reps * STEPS);
    printf("    sequential graph evaluation       %8.1f ms\n", 1e3 * seq);
    printf("    engine, %d workers                 %8.1f ms   speedup %.2fx\n", workers, 1e3 * par,
           seq / par);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
    return seq / par;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1) {
        fprintf(stderr, "usage: bench_engine [REPS]\n");
        return 2;
    }
    double axby = bench_axby(reps);
    double wide_speedup = 0;
    double overhead = bench_wide(reps, &wide_speedup);
    double mnist = bench_mnist(reps, 2);
    printf("result: axby_speedup=%.2f overhead_ns_per_op=%.0f mnist_step_speedup=%.2f\n", axby,
           1e9 * overhead, mnist);
    return 0;
}
