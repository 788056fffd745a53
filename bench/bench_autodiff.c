/* bench_autodiff.c: the cost of reverse mode as a graph transformation, on an MLP-like chain
 * x -> tanh(x W_1 + b_1) -> ... -> tanh(x W_d + b_d) -> sum, for depths 10, 20, 50, 100: time to
 * build the forward graph, time of sx_ad_grad (gradients of all 2d parameters), nodes and edges
 * the gradient adds (must grow linearly with the forward graph: the constant is printed), the
 * bytes of values held after one forward+backward evaluation, and that evaluation's time.
 * Usage: bench_autodiff [batch] [width] (default 32 64). */
#include "sx_autodiff.h"
#include "sx_cgraph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_util.h"

enum { MAX_DEPTH = 100, REPS = 7 };

static sx_cg_node *checked(sx_cg_node *n, const char *what)
{
    if (n == NULL) {
        fprintf(stderr, "bench_autodiff: %s: %s\n", what, sx_last_error());
        exit(1);
    }
    return n;
}

typedef struct chain {
    sx_cg_graph *g;
    sx_cg_node *x, *loss;
    sx_cg_node *params[2 * MAX_DEPTH];
    int n_params;
} chain;

/* The forward graph of depth d: parameters drawn uniformly in +-1/sqrt(width). */
static void chain_build(chain *c, int depth, int64_t batch, int64_t width, sx_rng *rng)
{
    CHECK(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &c->g));
    int64_t xs[2] = {batch, width}, ws[2] = {width, width}, bs[1] = {width};
    sx_tensor *xt = NULL, *wt = NULL, *bt = NULL;
    CHECK(sx_tensor_new(SX_F32, 2, xs, &xt));
    CHECK(sx_tensor_new(SX_F32, 2, ws, &wt));
    CHECK(sx_tensor_new(SX_F32, 1, bs, &bt));
    CHECK(sx_tensor_rand_uniform(xt, rng, -1, 1));
    c->x = checked(sx_cg_input(c->g, "x", SX_F32, 2, xs), "input");
    CHECK(sx_cg_input_set(c->g, c->x, xt, SX_CG_COPY));
    double r = 1 / sqrt((double)width);
    sx_cg_node *h = c->x;
    c->n_params = 0;
    for (int i = 0; i < depth; i++) {
        CHECK(sx_tensor_rand_uniform(wt, rng, -r, r));
        CHECK(sx_tensor_rand_uniform(bt, rng, -r, r));
        sx_cg_node *w = checked(sx_cg_param(c->g, "w", wt), "w");
        sx_cg_node *b = checked(sx_cg_param(c->g, "b", bt), "b");
        c->params[c->n_params++] = w;
        c->params[c->n_params++] = b;
        h = sx_cg_tanh(c->g, sx_cg_add(c->g, sx_cg_matmul(c->g, h, w, false, false), b));
    }
    c->loss = checked(sx_cg_sum(c->g, h, SX_AXES_ALL, false), "forward");
    sx_tensor_free(xt);
    sx_tensor_free(wt);
    sx_tensor_free(bt);
}

typedef struct row {
    int depth;
    int64_t fwd_nodes, fwd_ops, grad_nodes, grad_edges;
    double t_build, t_grad, t_eval;
    int64_t bytes;
} row;

static row measure(int depth, int64_t batch, int64_t width)
{
    row r = {.depth = depth, .t_build = 1e30, .t_grad = 1e30, .t_eval = 1e30};
    for (int rep = 0; rep < REPS; rep++) {
        sx_rng rng;
        sx_rng_seed(&rng, 42);
        chain c;
        double t0 = now();
        chain_build(&c, depth, batch, width, &rng);
        double t1 = now();
        sx_cg_stats before = sx_cg_graph_stats(c.g);
        sx_cg_node *grads[2 * MAX_DEPTH];
        CHECK(sx_ad_grad(c.g, c.loss, c.n_params, c.params, grads));
        double t2 = now();
        sx_cg_stats after = sx_cg_graph_stats(c.g);
        /* one forward+backward evaluation (allocating), then a timed one after the input
         * changes (everything recomputed) */
        CHECK(sx_cg_eval(c.g, c.n_params, grads));
        CHECK(sx_cg_invalidate(c.g, c.x));
        double t3 = now();
        CHECK(sx_cg_eval(c.g, c.n_params, grads));
        double t4 = now();
        r.t_build = fmin(r.t_build, t1 - t0);
        r.t_grad = fmin(r.t_grad, t2 - t1);
        r.t_eval = fmin(r.t_eval, t4 - t3);
        r.fwd_nodes = before.nodes;
        r.fwd_ops = before.nodes - (1 + c.n_params);
        r.grad_nodes = after.nodes - before.nodes;
        r.grad_edges = after.edges - before.edges;
        r.bytes = sx_cg_graph_stats(c.g).bytes;
        sx_cg_graph_free(c.g);
    }
    return r;
}

int main(int argc, char **argv)
{
    int64_t batch = argc > 1 ? atoll(argv[1]) : 32, width = argc > 2 ? atoll(argv[2]) : 64;
    if (batch < 1 || width < 1) {
        fprintf(stderr, "usage: bench_autodiff [batch] [width]\n");
        return 2;
    }
    static const int depths[] = {10, 20, 50, 100};
    enum { N_DEPTHS = sizeof depths / sizeof depths[0] };
    row rows[N_DEPTHS];
    for (int i = 0; i < N_DEPTHS; i++)
        rows[i] = measure(depths[i], batch, width);

    printf("autodiff on x -> tanh(x W_i + b_i) x depth -> sum: f32, batch %lld, width %lld, best "
           "of %d\n",
           (long long)batch, (long long)width, REPS);
    printf("%5s %9s %8s %10s %10s %9s %10s %11s %10s %10s %10s\n", "depth", "fwd nodes", "fwd ops",
           "grad nodes", "grad edges", "grad/fwd", "grad/layer", "build (us)", "grad (us)",
           "eval (ms)", "bytes (KiB)");
    for (int i = 0; i < N_DEPTHS; i++) {
        const row *r = &rows[i];
        printf("%5d %9lld %8lld %10lld %10lld %9.3f %10.2f %11.1f %10.1f %10.3f %10.1f\n", r->depth,
               (long long)r->fwd_nodes, (long long)r->fwd_ops, (long long)r->grad_nodes,
               (long long)r->grad_edges, (double)r->grad_nodes / (double)r->fwd_nodes,
               (double)r->grad_nodes / r->depth, 1e6 * r->t_build, 1e6 * r->t_grad, 1e3 * r->t_eval,
               (double)r->bytes / 1024);
    }
    /* the linear law: the increment per layer between the smallest and largest depth, and the
     * fixed part it leaves */
    const row *a = &rows[0], *b = &rows[N_DEPTHS - 1];
    double per_layer = (double)(b->grad_nodes - a->grad_nodes) / (b->depth - a->depth);
    double fixed = (double)a->grad_nodes - per_layer * a->depth;
    double fwd_per_layer = (double)(b->fwd_nodes - a->fwd_nodes) / (b->depth - a->depth);
    bool linear = true;
    for (int i = 0; i < N_DEPTHS; i++)
        linear &= fabs((double)rows[i].grad_nodes - (fixed + per_layer * rows[i].depth)) < 0.5;
    printf("gradient nodes = %.0f + %.0f per layer (%s); the forward graph has %.0f nodes per "
           "layer: %.2f gradient nodes per forward node (%.2f per forward op)\n",
           fixed, per_layer, linear ? "exactly linear" : "NOT linear", fwd_per_layer,
           per_layer / fwd_per_layer, per_layer / 3);
    printf("sx_ad_grad time per forward node: %.2f us at depth %d, %.2f us at depth %d\n",
           1e6 * a->t_grad / (double)a->fwd_nodes, a->depth, 1e6 * b->t_grad / (double)b->fwd_nodes,
           b->depth);
    return linear ? 0 : 1;
}
