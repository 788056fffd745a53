/* bench_plan.c: the memory planner on a hand-built graph shaped like the MNIST training step of
 * the reference network (conv 5x5x32 SAME, relu, maxpool, dropout mask, dense 6272x1024, relu,
 * dense 1024x10, softmax cross-entropy, gradients by sx_ad_grad, Adagrad updates by assigns),
 * frozen with and without planning: nodes, arena vs naive vs peak-live bytes, planning time,
 * and one training step of each, which must agree bit for bit.
 * Usage: bench_plan [batch] (default 100). */
#include "sx_autodiff.h"
#include "sx_cgraph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

#define NODE(expr) node_ok((expr), #expr, __LINE__)

enum { N_PARAMS = 6 };

typedef struct net {
    sx_cg_graph *g;
    sx_cg_node *x, *y, *mask, *loss;
    sx_cg_node *outs[1 + 2 * N_PARAMS];
    int n_outs;
} net;

static sx_cg_node *node_ok(sx_cg_node *n, const char *what, int line)
{
    if (n == NULL) {
        fprintf(stderr, "bench_plan.c:%d: %s: %s\n", line, what, sx_last_error());
        exit(1);
    }
    return n;
}

static sx_cg_node *param(sx_cg_graph *g, const char *name, sx_rng *rng, int rank,
                         const int64_t *shape, double scale)
{
    sx_tensor *t = NULL;
    CHECK(sx_tensor_new(SX_F32, rank, shape, &t));
    if (scale > 0)
        CHECK(sx_tensor_rand_uniform(t, rng, -scale, scale));
    else
        CHECK(sx_tensor_fill(t, 0.0));
    sx_cg_node *p = NODE(sx_cg_param(g, name, t));
    sx_tensor_free(t);
    return p;
}

/* The training step of batch n: forward, loss, gradients and Adagrad updates. */
static void build(net *m, int64_t n, uint64_t seed)
{
    sx_rng rng;
    sx_rng_seed(&rng, seed);
    CHECK(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &m->g));
    sx_cg_graph *g = m->g;
    int64_t xs[4] = {n, 28, 28, 1}, ys[2] = {n, 10};
    m->x = NODE(sx_cg_input(g, "x", SX_F32, 4, xs));
    m->y = NODE(sx_cg_input(g, "y", SX_F32, 2, ys));

    int64_t ks[4] = {5, 5, 1, 32}, bcs[1] = {32}, w1s[2] = {6272, 1024}, b1s[1] = {1024},
            w2s[2] = {1024, 10}, b2s[1] = {10};
    sx_cg_node *p[N_PARAMS] = {
        param(g, "conv_k", &rng, 4, ks, 0.2),  param(g, "conv_b", &rng, 1, bcs, 0.01),
        param(g, "fc1_w", &rng, 2, w1s, 0.03), param(g, "fc1_b", &rng, 1, b1s, 0.01),
        param(g, "fc2_w", &rng, 2, w2s, 0.07), param(g, "fc2_b", &rng, 1, b2s, 0.01),
    };

    sx_conv2d_params cp = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    sx_pool2d_params pp = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    sx_cg_node *h = NODE(sx_cg_div(g, m->x, NODE(sx_cg_scalar(g, 256.0))));
    h = NODE(sx_cg_conv2d(g, h, p[0], &cp));
    h = NODE(sx_cg_relu(g, NODE(sx_cg_add(g, h, p[1]))));
    h = NODE(sx_cg_maxpool2d(g, h, &pp));
    int rng_id = 0;
    CHECK(sx_cg_rng_new(g, seed + 1, &rng_id));
    m->mask = NODE(sx_cg_dropout_mask(g, rng_id, 0.25, 4, sx_cg_node_shape(h)));
    h = NODE(sx_cg_mul(g, h, m->mask));
    int64_t flat[2] = {n, 6272};
    h = NODE(sx_cg_reshape(g, h, 2, flat));
    h = NODE(sx_cg_relu(g, NODE(sx_cg_add(g, NODE(sx_cg_matmul(g, h, p[2], false, false)), p[3]))));
    h = NODE(sx_cg_add(g, NODE(sx_cg_matmul(g, h, p[4], false, false)), p[5]));
    m->loss = NODE(sx_cg_mean(g, NODE(sx_cg_softmax_xent(g, h, m->y)), SX_AXES_ALL, false));

    sx_cg_node *grad[N_PARAMS];
    CHECK(sx_ad_grad(g, m->loss, N_PARAMS, p, grad));

    /* Adagrad: acc = acc + g*g; p = p - lr * g / (sqrt(acc) + eps), acc read after its assign */
    m->n_outs = 0;
    m->outs[m->n_outs++] = m->loss;
    for (int i = 0; i < N_PARAMS; i++) {
        sx_cg_node *acc = param(g, "acc", &rng, sx_cg_node_rank(p[i]), sx_cg_node_shape(p[i]), 0);
        sx_cg_node *acc_new = NODE(
            sx_cg_assign(g, acc, NODE(sx_cg_add(g, acc, NODE(sx_cg_mul(g, grad[i], grad[i]))))));
        sx_cg_node *den = NODE(sx_cg_add_scalar(g, NODE(sx_cg_sqrt(g, acc_new)), 1e-8));
        sx_cg_node *step = NODE(sx_cg_div(g, NODE(sx_cg_mul_scalar(g, grad[i], 0.01)), den));
        m->outs[m->n_outs++] = acc_new;
        m->outs[m->n_outs++] = NODE(sx_cg_assign(g, p[i], NODE(sx_cg_sub(g, p[i], step))));
    }
}

static void set_batch(net *m, int64_t n, uint64_t seed)
{
    sx_rng rng;
    sx_rng_seed(&rng, seed);
    int64_t xs[4] = {n, 28, 28, 1}, ys[2] = {n, 10};
    sx_tensor *x = NULL, *y = NULL;
    CHECK(sx_tensor_new(SX_F32, 4, xs, &x));
    CHECK(sx_tensor_rand_uniform(x, &rng, 0, 255));
    CHECK(sx_tensor_new(SX_F32, 2, ys, &y));
    CHECK(sx_tensor_fill(y, 0.0));
    for (int64_t i = 0; i < n; i++)
        sx_tensor_set(y, i * 10 + (int64_t)(sx_rng_uniform(&rng) * 10) % 10, 1.0);
    CHECK(sx_cg_input_set(m->g, m->x, x, SX_CG_COPY));
    CHECK(sx_cg_input_set(m->g, m->y, y, SX_CG_COPY));
    CHECK(sx_cg_invalidate(m->g, m->mask));
    sx_tensor_free(x);
    sx_tensor_free(y);
}

static double mb(size_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

int main(int argc, char **argv)
{
    int64_t n = argc > 1 ? atoll(argv[1]) : 100;
    if (n < 1) {
        fprintf(stderr, "usage: bench_plan [batch >= 1]\n");
        return 2;
    }
    net plain, planned;
    build(&plain, n, 42);
    build(&planned, n, 42);

    sx_cg_freeze_params off = sx_cg_freeze_params_default(), on = off;
    off.plan_memory = false;
    sx_cg_plan_report r_off, r_on;
    CHECK(sx_cg_freeze_ex(plain.g, plain.n_outs, plain.outs, &off, &r_off));
    CHECK(sx_cg_freeze_ex(planned.g, planned.n_outs, planned.outs, &on, &r_on));
    CHECK(sx_cg_plan_check(planned.g));

    sx_cg_stats st = sx_cg_graph_stats(planned.g);
    printf("MNIST-shaped training step, batch %lld, f32\n", (long long)n);
    printf("  nodes %lld, edges %lld, planned nodes %lld (in place %lld)\n", (long long)st.nodes,
           (long long)st.edges, (long long)r_on.planned_nodes, (long long)r_on.inplace_nodes);
    printf("  naive (one buffer per planned node) %9.2f MB\n", mb(r_on.naive_bytes));
    printf("  planned arena                       %9.2f MB   naive/arena %.2f  (target >= 4)\n",
           mb(r_on.arena_bytes), (double)r_on.naive_bytes / (double)r_on.arena_bytes);
    printf("  peak live (lower bound)             %9.2f MB   arena/peak  %.2f  (target <= 1.5)\n",
           mb(r_on.peak_live_bytes), (double)r_on.arena_bytes / (double)r_on.peak_live_bytes);
    printf("  peak live without in-place          %9.2f MB\n", mb(r_off.peak_live_bytes));
    printf("  kernel scratch in the arena         %9.2f MB\n", mb(r_on.scratch_bytes));
    printf("  kernel scratch outside it           %9.2f MB\n", mb(r_on.workspace_bytes));
    printf("  freeze time: planned %.3f ms, unplanned %.3f ms (target well under 20 ms)\n",
           1e3 * r_on.seconds, 1e3 * r_off.seconds);

    /* One step each, timed after a warm-up step: the planned graph must agree bit for bit. */
    double t[2] = {0, 0};
    net *ms[2] = {&plain, &planned};
    int steps = 3;
    for (int it = 0; it < steps; it++)
        for (int k = 0; k < 2; k++) {
            set_batch(ms[k], n, 1000 + (uint64_t)it);
            double t0 = now();
            CHECK(sx_cg_eval(ms[k]->g, ms[k]->n_outs, ms[k]->outs));
            if (it > 0)
                t[k] += now() - t0;
        }
    float a = *(const float *)sx_cg_value(plain.loss)->data;
    float b = *(const float *)sx_cg_value(planned.loss)->data;
    bool same = memcmp(&a, &b, sizeof a) == 0;
    for (int i = 1; i < plain.n_outs; i++) {
        const sx_tensor *u = sx_cg_value(plain.outs[i]), *v = sx_cg_value(planned.outs[i]);
        same = same && memcmp(u->data, v->data, (size_t)u->size * sizeof(float)) == 0;
    }
    printf("  step time: planned %.1f ms, unplanned %.1f ms; loss %.6f vs %.6f, results %s\n",
           1e3 * t[1] / (steps - 1), 1e3 * t[0] / (steps - 1), (double)a, (double)b,
           same ? "identical" : "DIFFERENT");
    sx_cg_graph_free(plain.g);
    sx_cg_graph_free(planned.g);
    return same ? 0 : 1;
}
