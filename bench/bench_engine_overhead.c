/* bench_engine_overhead.c: what the graph engine costs per node above the
 * kernels it calls. Two graphs of 1000 tiny ops (adds of 8 f32 elements): a chain
 * a_i = a_{i-1} + x (one output, a_1000) and a wide graph w_i = x + c_i (1000 outputs), each
 * lazy and frozen. Every iteration sets the input x (which invalidates all 1000 ops) and
 * evaluates; the same 1000 sx_tensor_binary_out calls made directly are the bare cost. Also the
 * cost of sx_cg_eval when nothing is invalid. Medians over many iterations, all variants
 * interleaved so that load changes hit them alike.
 *     bench_engine_overhead [ITERATIONS]      (default 2000)
 */
#include "sx_cgraph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

enum { N_OPS = 1000, ELEMS = 8, WARMUP = 20, NOCHANGE_BATCH = 1000 };

static const int64_t shape1[1] = {ELEMS};

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (p == NULL) {
        fprintf(stderr, "bench_engine_overhead: out of memory\n");
        exit(1);
    }
    return p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static sx_cg_node *checked(sx_cg_node *n, const char *what)
{
    if (n == NULL) {
        fprintf(stderr, "bench_engine_overhead: %s: %s\n", what, sx_last_error());
        exit(1);
    }
    return n;
}

/* ---------------------------------------------------------------- the graphs */

/* One graph under test: its input, the nodes evaluated, and the samples of each iteration. */
typedef struct gcase {
    const char *name;
    sx_cg_graph *g;
    sx_cg_node *x;
    sx_cg_node **outs;
    int n_outs;
    bool wide, frozen;
    double *t_set, *t_eval; /* per iteration, seconds */
    double *t_nochange;     /* per call of a no-change batch, seconds */
    int n, n_nochange;
} gcase;

static void build(gcase *c, bool wide, bool frozen)
{
    c->wide = wide;
    c->frozen = frozen;
    CHECK(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &c->g));
    c->x = checked(sx_cg_input(c->g, "x", SX_F32, 1, shape1), "input");
    c->outs = xcalloc(N_OPS, sizeof *c->outs);
    if (wide) {
        float v[ELEMS];
        for (int i = 0; i < N_OPS; i++) {
            for (int e = 0; e < ELEMS; e++)
                v[e] = (float)(i + 1);
            sx_tensor t = sx_tensor_view(SX_F32, 1, shape1, v);
            sx_cg_node *ci = checked(sx_cg_const(c->g, &t), "const");
            c->outs[i] = checked(sx_cg_add(c->g, c->x, ci), "add");
        }
        c->n_outs = N_OPS;
    } else {
        sx_cg_node *a = c->x;
        for (int i = 0; i < N_OPS; i++)
            a = checked(sx_cg_add(c->g, a, c->x), "add");
        c->outs[0] = a;
        c->n_outs = 1;
    }
    if (frozen)
        CHECK(sx_cg_freeze(c->g, c->n_outs, c->outs));
}

/* The values after evaluating with x: chain a_1000 = 1001 x; wide w_i = x + (i + 1). */
static void verify(const gcase *c, const float *x)
{
    for (int o = 0; o < c->n_outs; o++) {
        const sx_tensor *v = sx_cg_value(c->outs[o]);
        for (int e = 0; e < ELEMS; e++) {
            float want = c->wide ? x[e] + (float)(o + 1) : 1001.0f * x[e];
            float got = SX_F32P(v)[e];
            if (fabsf(got - want) > 1e-3f * fabsf(want)) {
                fprintf(stderr, "bench_engine_overhead: %s: output %d[%d] = %g, want %g\n", c->name,
                        o, e, (double)got, (double)want);
                exit(1);
            }
        }
    }
}

/* One iteration: set x (invalidating every op) and evaluate; the engine must run 1000
 * kernels. */
static void step(gcase *c, const sx_tensor *xv, bool keep)
{
    int64_t calls = sx_cg_graph_stats(c->g).kernel_calls;
    double t0 = now();
    CHECK(sx_cg_input_set(c->g, c->x, xv, SX_CG_COPY));
    double t1 = now();
    CHECK(sx_cg_eval(c->g, c->n_outs, c->outs));
    double t2 = now();
    if (sx_cg_graph_stats(c->g).kernel_calls - calls != N_OPS) {
        fprintf(stderr, "bench_engine_overhead: %s: %lld kernels ran, want %d\n", c->name,
                (long long)(sx_cg_graph_stats(c->g).kernel_calls - calls), N_OPS);
        exit(1);
    }
    if (keep) {
        c->t_set[c->n] = t1 - t0;
        c->t_eval[c->n] = t2 - t1;
        c->n++;
    }
}

/* A batch of evaluations with nothing invalid: no kernel may run. */
static void nochange(gcase *c)
{
    int64_t calls = sx_cg_graph_stats(c->g).kernel_calls;
    double t0 = now();
    for (int i = 0; i < NOCHANGE_BATCH; i++)
        CHECK(sx_cg_eval(c->g, c->n_outs, c->outs));
    double t1 = now();
    if (sx_cg_graph_stats(c->g).kernel_calls != calls) {
        fprintf(stderr, "bench_engine_overhead: %s: a no-change evaluation ran kernels\n", c->name);
        exit(1);
    }
    c->t_nochange[c->n_nochange++] = (t1 - t0) / NOCHANGE_BATCH;
}

/* ---------------------------------------------------------------- the bare kernels */

/* The same 1000 adds as the graphs, on tensors made once: chain t[i+1] = t[i] + x, wide
 * w[i] = x + c[i]. */
typedef struct bare {
    float *buf;
    sx_tensor x, t[N_OPS + 1], c[N_OPS], w[N_OPS];
} bare;

static void bare_init(bare *b)
{
    b->buf = xcalloc((size_t)(3 * N_OPS + 2) * ELEMS, sizeof(float));
    float *p = b->buf;
    b->x = sx_tensor_view(SX_F32, 1, shape1, p);
    p += ELEMS;
    for (int i = 0; i <= N_OPS; i++, p += ELEMS)
        b->t[i] = sx_tensor_view(SX_F32, 1, shape1, p);
    for (int i = 0; i < N_OPS; i++, p += ELEMS) {
        b->c[i] = sx_tensor_view(SX_F32, 1, shape1, p);
        for (int e = 0; e < ELEMS; e++)
            p[e] = (float)(i + 1);
    }
    for (int i = 0; i < N_OPS; i++, p += ELEMS)
        b->w[i] = sx_tensor_view(SX_F32, 1, shape1, p);
}

static double bare_sweep(bare *b, bool wide, const sx_tensor *xv)
{
    double t0 = now();
    memcpy(b->x.data, xv->data, ELEMS * sizeof(float));
    if (wide) {
        for (int i = 0; i < N_OPS; i++)
            CHECK(sx_tensor_binary_out(SX_BINARY_ADD, &b->x, &b->c[i], &b->w[i]));
    } else {
        memcpy(b->t[0].data, xv->data, ELEMS * sizeof(float));
        for (int i = 0; i < N_OPS; i++)
            CHECK(sx_tensor_binary_out(SX_BINARY_ADD, &b->t[i], &b->x, &b->t[i + 1]));
    }
    return now() - t0;
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    if (iters < 1 || iters > 1000000) {
        fprintf(stderr, "usage: bench_engine_overhead [ITERATIONS]\n");
        return 2;
    }
    gcase cases[4] = {{.name = "chain lazy"},
                      {.name = "chain frozen"},
                      {.name = "wide lazy"},
                      {.name = "wide frozen"}};
    for (int k = 0; k < 4; k++) {
        build(&cases[k], k >= 2, k % 2 == 1);
        cases[k].t_set = xcalloc((size_t)iters, sizeof(double));
        cases[k].t_eval = xcalloc((size_t)iters, sizeof(double));
        cases[k].t_nochange = xcalloc((size_t)iters, sizeof(double));
    }
    bare b;
    bare_init(&b);
    double *t_bare[2] = {xcalloc((size_t)iters, sizeof(double)),
                         xcalloc((size_t)iters, sizeof(double))};

    /* Two input values, alternated, so that every iteration really changes x. */
    float xa[ELEMS], xb[ELEMS];
    for (int e = 0; e < ELEMS; e++) {
        xa[e] = 0.5f + (float)e;
        xb[e] = 0.25f - (float)e;
    }
    const sx_tensor va = sx_tensor_view(SX_F32, 1, shape1, xa);
    const sx_tensor vb = sx_tensor_view(SX_F32, 1, shape1, xb);

    /* The first iteration also allocates node storage of the lazy graphs: a warm-up. */
    for (int it = -WARMUP; it < iters; it++) {
        const sx_tensor *xv = (it & 1) ? &vb : &va;
        for (int w = 0; w < 2; w++) {
            double t = bare_sweep(&b, w == 1, xv);
            if (it >= 0)
                t_bare[w][it] = t;
            for (int f = 0; f < 2; f++)
                step(&cases[2 * w + f], xv, it >= 0);
        }
        if (it == -1)
            for (int k = 0; k < 4; k++)
                verify(&cases[k], xb);
        /* a no-change batch every 20 iterations, once everything is valid */
        if (it >= 0 && it % 20 == 0)
            for (int k = 0; k < 4; k++)
                nochange(&cases[k]);
    }
    for (int k = 0; k < 4; k++)
        verify(&cases[k], (iters - 1) & 1 ? xb : xa);

    printf("engine overhead: %d adds of %d f32 elements per graph; medians of %d iterations "
           "(ns)\n",
           N_OPS, ELEMS, iters);
    printf("chain: a_i = a_{i-1} + x, 1 output; wide: w_i = x + c_i, %d outputs. One iteration:\n"
           "sx_cg_input_set(x) (invalidates all %d ops), then sx_cg_eval. bare = the same %d\n"
           "sx_tensor_binary_out calls made directly. overhead = (set + eval - bare) / %d.\n"
           "no-change = one sx_cg_eval of the same outputs with nothing invalid (whole graph).\n",
           N_OPS, N_OPS, N_OPS, N_OPS);
    printf("%-13s %11s %11s %11s %11s %11s %11s\n", "graph", "bare/op", "set", "eval", "eval/node",
           "overhead", "no-change");
    char result[512];
    int len = snprintf(result, sizeof result, "result: overhead per node (target < 100 ns):");
    char result2[256];
    int len2 = snprintf(result2, sizeof result2, " | no-change eval (target < 1000 ns):");
    for (int k = 0; k < 4; k++) {
        gcase *c = &cases[k];
        double bare_op = median(t_bare[k / 2], iters) * 1e9 / N_OPS;
        double set = median(c->t_set, c->n) * 1e9, eval = median(c->t_eval, c->n) * 1e9;
        double per = eval / N_OPS, over = (set + eval) / N_OPS - bare_op;
        double nc = median(c->t_nochange, c->n_nochange) * 1e9;
        printf("%-13s %11.1f %11.0f %11.0f %11.1f %11.1f %11.1f\n", c->name, bare_op, set, eval,
               per, over, nc);
        len += snprintf(result + len, sizeof result - (size_t)len, " %s %.1f", c->name, over);
        len2 += snprintf(result2 + len2, sizeof result2 - (size_t)len2, " %s %.0f", c->name, nc);
    }
    printf("%s%s\n", result, result2);

    for (int k = 0; k < 4; k++) {
        sx_cg_graph_free(cases[k].g);
        free(cases[k].outs);
        free(cases[k].t_set);
        free(cases[k].t_eval);
        free(cases[k].t_nochange);
    }
    free(t_bare[0]);
    free(t_bare[1]);
    free(b.buf);
    return 0;
}
