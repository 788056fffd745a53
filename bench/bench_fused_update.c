/* bench_fused_update: the optimisers' fused programs run by the block interpreter against their
 * compiled kernels (tensor/elementwise/fused_known.c) and a hand-written loop, as matmul_update
 * runs them: a 6272 x 1024 f32 parameter and its states in memory, the program over one block
 * of 64 rows at a time with that block's gradient in cache. Adagrad and Adam, their programs
 * taken from the table of known programs (the matmul_update forms), every scalar operand 0.5
 * (Adagrad 0.01), so the hand loops need not know which scalar is which. One thread; CPU time
 * of this thread; the median of the rounds; the three results must agree bit for bit. Prints
 * one line per optimiser:
 *   adagrad: interpreter_ms=.. compiled_ms=.. hand_ms=.. compiled_over_hand=.. same_bits=1
 * Run: build/bench/bench_fused_update [rounds] [steps per round] */
#include "tensor_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

enum { M = 6272, N = 1024, R = 64, MAX_OPS = 16 };

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

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

/* One program over the whole parameter: its operands' memory (full ones M x N, the last, the
 * gradient, R x N; scalars one element). */
typedef struct run {
    sx_fused_prog prog;
    int n_ops;
    uint64_t scalar;
    float *mem[MAX_OPS];
} run;

static float *filled(int64_t n, int seed)
{
    float *p = malloc((size_t)n * sizeof *p);
    if (p == NULL) {
        fprintf(stderr, "bench_fused_update: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)(seed == 0 ? 0.1 * sin(3.0 * (double)i)
                                 : 0.5 + 0.25 * cos((double)(i + seed)) * cos((double)i));
    return p;
}

static run make_run(const char *name, float k)
{
    run r;
    memset(&r, 0, sizeof r);
    const char *got = NULL;
    int i = 0;
    while (sx__fused_known_entry(i, &got, &r.prog, &r.n_ops, &r.scalar) && strcmp(got, name) != 0)
        i++;
    if (got == NULL || strcmp(got, name) != 0 || r.n_ops > MAX_OPS) {
        fprintf(stderr, "bench_fused_update: no known program '%s'\n", name);
        exit(1);
    }
    for (int j = 0; j < r.n_ops; j++) {
        if (r.scalar >> j & 1) {
            r.mem[j] = filled(1, 1);
            r.mem[j][0] = k;
        } else {
            r.mem[j] = filled(j == r.n_ops - 1 ? (int64_t)R * N : (int64_t)M * N, j);
        }
    }
    return r;
}

static void free_run(run *r)
{
    for (int j = 0; j < r->n_ops; j++)
        free(r->mem[j]);
}

/* One step: the program over each block of R rows (the gradient block reused). */
static void step(run *r)
{
    const int64_t shape[2] = {R, N}, one[1] = {1};
    for (int64_t r0 = 0; r0 < M; r0 += R) {
        sx_tensor v[MAX_OPS], *ops[MAX_OPS];
        for (int j = 0; j < r->n_ops; j++) {
            const bool s = r->scalar >> j & 1, grad = j == r->n_ops - 1;
            float *p = s || grad ? r->mem[j] : r->mem[j] + r0 * N;
            v[j] = s ? sx_tensor_view(SX_F32, 1, one, p) : sx_tensor_view(SX_F32, 2, shape, p);
            ops[j] = &v[j];
        }
        CHECK(sx_tensor_fused_update(&r->prog, r->n_ops, ops));
    }
}

/* The hand loops, in the programs' order of operations (every scalar k). */
static void hand_adagrad(float *p, float *h, const float *g, float k)
{
    for (int64_t r0 = 0; r0 < M; r0 += R) {
        float *pp = p + r0 * N, *hh = h + r0 * N;
        for (int64_t i = 0; i < (int64_t)R * N; i++) {
            const float gi = g[i], a = hh[i] + gi * gi;
            hh[i] = a;
            pp[i] = pp[i] - k * (gi / (sqrtf(a) + k));
        }
    }
}

static void hand_adam(float *p, float *m, float *v, const float *g, float k)
{
    for (int64_t r0 = 0; r0 < M; r0 += R) {
        float *pp = p + r0 * N, *mm = m + r0 * N, *vv = v + r0 * N;
        for (int64_t i = 0; i < (int64_t)R * N; i++) {
            const float gi = g[i];
            const float mi = k * mm[i] + k * gi, vi = k * vv[i] + k * (gi * gi);
            mm[i] = mi;
            vv[i] = vi;
            pp[i] = pp[i] - k * (mi / (sqrtf(vi) / k + k));
        }
    }
}

/* Every full-size operand of a equal to b's, bit for bit. */
static bool same(const run *a, const run *b)
{
    for (int j = 0; j < a->n_ops; j++)
        if (!(a->scalar >> j & 1) &&
            memcmp(a->mem[j], b->mem[j],
                   (size_t)(j == a->n_ops - 1 ? (int64_t)R * N : (int64_t)M * N) * 4) != 0)
            return false;
    return true;
}

static void bench(const char *label, const char *name, float k, int rounds, int steps)
{
    run in = make_run(name, k), co = make_run(name, k), ha = make_run(name, k);
    const bool adam = strncmp(name, "adam", 4) == 0;
    /* the hand loops' operands: the parameter is operand 0, the states 1.. (the programs'
     * stores), the gradient the last */
    double t_in[64], t_co[64], t_ha[64];
    for (int rd = 0; rd < rounds; rd++) {
        double t0 = cpu_now();
        sx__fused_known_enable(false);
        for (int s = 0; s < steps; s++)
            step(&in);
        sx__fused_known_enable(true);
        double t1 = cpu_now();
        for (int s = 0; s < steps; s++)
            step(&co);
        double t2 = cpu_now();
        for (int s = 0; s < steps; s++)
            if (adam)
                hand_adam(ha.mem[0], ha.mem[1], ha.mem[2], ha.mem[ha.n_ops - 1], k);
            else
                hand_adagrad(ha.mem[0], ha.mem[1], ha.mem[ha.n_ops - 1], k);
        double t3 = cpu_now();
        t_in[rd] = (t1 - t0) * 1e3 / steps;
        t_co[rd] = (t2 - t1) * 1e3 / steps;
        t_ha[rd] = (t3 - t2) * 1e3 / steps;
    }
    const double mi = median(t_in, rounds), mc = median(t_co, rounds), mh = median(t_ha, rounds);
    printf("%s: interpreter_ms=%.2f compiled_ms=%.2f hand_ms=%.2f compiled_over_hand=%.3f "
           "same_bits=%d\n",
           label, mi, mc, mh, mc / mh, same(&in, &co) && same(&co, &ha));
    free_run(&in);
    free_run(&co);
    free_run(&ha);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 7, steps = argc > 2 ? atoi(argv[2]) : 5;
    if (rounds < 1 || rounds > 64 || steps < 1) {
        fprintf(stderr, "usage: bench_fused_update [rounds 1..64] [steps per round]\n");
        return 1;
    }
    CHECK(sx_threads_set(1));
    bench("adagrad", "adagrad (matmul_update)", 0.01f, rounds, steps);
    bench("adam", "adam (matmul_update)", 0.5f, rounds, steps);
    return 0;
}
