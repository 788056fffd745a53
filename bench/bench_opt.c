/* bench_opt: what the fused optimiser update buys. An Adagrad step on a
 * 6.4M-parameter tensor (the reference network's dense layer, 6272 x 1024): the fused update
 * node optim/ emits (one pass over memory), the same step written as plain element-wise graph
 * ops (five passes; the form optim/ built before it emitted fused updates) optimised
 * with every default pass, and a plain memcpy moving the same number of bytes. Prints medians
 * and one line:
 *   result: fused_ms=.. unfused_ms=.. memcpy_ms=.. fused_over_memcpy=.. speedup=..
 * Run: build/bench/bench_opt [repeats] */
#include <sx_optim.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

static void check(sx_status s, const char *what)
{
    if (s != SX_OK) {
        fprintf(stderr, "bench_opt: %s: %s\n", what, sx_last_error());
        exit(1);
    }
}

/* Adagrad as plain graph ops: a <- a + g g;  w <- w - lr (g / (sqrt(a) + eps)). outs gets the
 * two assigns (state first), as optim/ hands out the handles of its fused update. */
static int plain_adagrad(sx_cg_graph *g, sx_cg_node *w, sx_cg_node *gr, sx_cg_node *lr, double eps,
                         sx_cg_node **outs)
{
    sx_tensor *z = NULL;
    check(sx_tensor_zeros(SX_F32, sx_cg_node_rank(w), sx_cg_node_shape(w), &z), "state");
    sx_cg_node *a = sx_cg_param(g, "w.sum_sq", z);
    sx_tensor_free(z);
    sx_cg_node *an = sx_cg_add(g, a, sx_cg_mul(g, gr, gr));
    sx_cg_node *den = sx_cg_add(g, sx_cg_sqrt(g, an), sx_cg_scalar_like(g, an, eps));
    outs[0] = sx_cg_assign(g, a, an);
    outs[1] = sx_cg_assign(g, w, sx_cg_sub(g, w, sx_cg_mul(g, lr, sx_cg_div(g, gr, den))));
    if (outs[0] == NULL || outs[1] == NULL)
        check(sx_cg_graph_status(g), "plain adagrad");
    return 2;
}

/* Build w (rows x cols), its gradient input g, lr, and the Adagrad update, fused (optim/) or
 * as plain ops; optimise with the default passes; freeze. */
static sx_cg_graph *build(bool fuse, sx_cg_node **outs, int *n_outs, sx_cg_node **gin,
                          sx_cg_node **lrin, int64_t *nodes)
{
    sx_cg_graph *g = NULL;
    check(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), "graph");
    int64_t s[2] = {6272, 1024};
    sx_tensor *w0 = NULL;
    sx_rng r;
    sx_rng_seed(&r, 1);
    check(sx_tensor_new(SX_F32, 2, s, &w0), "w");
    check(sx_tensor_rand_uniform(w0, &r, -0.1, 0.1), "w");
    sx_cg_node *w = sx_cg_param(g, "w", w0);
    *gin = sx_cg_input(g, "g", SX_F32, 2, s);
    *lrin = sx_cg_input(g, "lr", SX_F32, 0, NULL);
    sx_optim_params p = sx_optim_params_default(SX_OPTIM_ADAGRAD);
    if (fuse)
        check(sx_optim_update(g, &p, w, *gin, *lrin, NULL, NULL, outs, n_outs), "update");
    else
        *n_outs = plain_adagrad(g, w, *gin, *lrin, p.eps, outs);
    sx_cg_opt_params op = sx_cg_opt_params_default();
    sx_cg_opt_report rep;
    check(sx_cg_optimise(g, *n_outs, outs, &op, &rep), "optimise");
    *nodes = rep.nodes_after;
    check(sx_cg_freeze(g, *n_outs, outs), "freeze");
    sx_tensor_free(w0);
    return g;
}

static double time_steps(bool fuse, int reps, int64_t *nodes)
{
    sx_cg_node *outs[3], *gin, *lrin;
    int n = 0;
    sx_cg_graph *g = build(fuse, outs, &n, &gin, &lrin, nodes);
    int64_t s[2] = {6272, 1024};
    sx_tensor *gv = NULL;
    sx_rng r;
    sx_rng_seed(&r, 2);
    check(sx_tensor_new(SX_F32, 2, s, &gv), "g");
    check(sx_tensor_rand_normal(gv, &r, 0, 0.01), "g");
    float lr = 0.005f;
    sx_tensor lrv = sx_tensor_view(SX_F32, 0, NULL, &lr);
    check(sx_cg_input_set(g, lrin, &lrv, SX_CG_COPY), "lr");
    double *t = malloc((size_t)reps * sizeof *t);
    for (int i = -2; i < reps; i++) {
        check(sx_cg_input_set(g, gin, gv, SX_CG_BORROW), "g");
        double t0 = now();
        check(sx_cg_eval(g, n, outs), "eval");
        if (i >= 0)
            t[i] = now() - t0;
    }
    double m = median(t, reps);
    free(t);
    sx_tensor_free(gv);
    sx_cg_graph_free(g);
    return m;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 3)
        reps = 3;
    int64_t nf = 0, nu = 0;
    double fused = time_steps(true, reps, &nf);
    double unfused = time_steps(false, reps, &nu);
    /* the fused step reads p, a, g and writes p, a: 5 x 25.7 MB; a memcpy of 2.5 arrays moves
     * the same bytes (read + write) */
    size_t n = (size_t)6272 * 1024, bytes = n * sizeof(float) * 5 / 2;
    char *src = malloc(bytes), *dst = malloc(bytes);
    memset(src, 1, bytes);
    memset(dst, 0, bytes);
    double *t = malloc((size_t)reps * sizeof *t);
    for (int i = -2; i < reps; i++) {
        double t0 = now();
        memcpy(dst, src, bytes);
        if (i >= 0)
            t[i] = now() - t0;
    }
    double mc = median(t, reps);
    printf("Adagrad step on 6272 x 1024 f32 (6.4M parameters), %d threads, median of %d\n",
           sx_threads_get(), reps);
    printf("%-28s %10s %8s %12s\n", "variant", "ms", "nodes", "GB/s moved");
    double moved = (double)n * 4 * 5 / 1e9;
    printf("%-28s %10.2f %8lld %12s\n", "plain ops (passes on)", 1e3 * unfused, (long long)nu, "-");
    printf("%-28s %10.2f %8lld %12.1f\n", "fused update node", 1e3 * fused, (long long)nf,
           moved / fused);
    printf("%-28s %10.2f %8s %12.1f\n", "memcpy, same bytes", 1e3 * mc, "-", moved / mc);
    printf("result: fused_ms=%.2f unfused_ms=%.2f memcpy_ms=%.2f fused_over_memcpy=%.2f "
           "speedup=%.2f\n",
           1e3 * fused, 1e3 * unfused, 1e3 * mc, fused / mc, unfused / fused);
    free(t);
    free(src);
    free(dst);
    return 0;
}
