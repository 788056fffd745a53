/* bench_gemm_bound: the physical limit of the reference network's MNIST training, as GEMM time.
 * Measures single-precision GEMM on this machine, with cblas_sgemm (OpenBLAS) and with strix's own
 * sx__gemm, at square sizes and at the GEMM shapes of one training step of the reference network
 * (batch 100), counts the step's FLOPs, and prints the lower bound for one epoch (600 steps):
 * the sum over the shapes of the measured time at that shape (the faster kernel of the two), and
 * FLOPs / peak square GFLOP/s. Everything else a step does (im2col, pooling, the optimiser) is
 * left out: the bound is what the GEMMs alone cost. A second bound adds the optimiser's memory
 * floor: an update reads and writes every parameter and its state (Adagrad: 4 streams of P
 * floats, the gradient being in cache when the gemm-update pass makes it block by block), timed
 * as a streaming loop of that pattern; no schedule can overlap it entirely with the GEMMs, which
 * need the same memory bus for the weights.
 *
 *     bench_gemm_bound [--threads T] [--steps N] [--min-seconds S]
 *
 * Each figure is the median (and minimum) of at least 9 timed calls and --min-seconds (0.4 s)
 * of calls per shape and kernel, in 3 blocks with the two kernels taking turns. A warning
 * is printed where sx__gemm's result differs from cblas_sgemm's (relative 1e-4). Threads:
 * sx_threads_set(T) and openblas_set_num_threads(T), T = 2 by default. Ends with: result:
 * gemm_bound_s=X peak_gflops=Y step_gflop=Z cblas_bound_s=A sx_gemm_bound_s=B flop_bound_s=C
 * gemm_bound_min_s=D mem_floor_s=E gemm_mem_bound_s=F */
#include "par_impl.h" /* strix's pool, for the streaming loop */
#include "sx_tensor.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

/* The one GEMM of strix (tensor/gemm/gemm.c), declared as in tensor/tensor_impl.h: internal to the
 * library, linked here from the static strix_tensor. */
void sx__gemm(sx_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
              const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
              int64_t ldc);

#define MAX_SAMPLES 4096
#define ROUNDS 3    /* blocks of calls per kernel and shape */
#define MIN_CALLS 3 /* timed calls per block at least */

/* One GEMM shape: c (m,n) = op(a) (m,k) @ op(b) (k,n); `per_step` calls in one training step
 * (0 for the square reference sizes). */
typedef struct shape {
    const char *name;
    bool ta, tb;
    int64_t m, n, k;
    int per_step;
} shape;

/* The training step of the reference network, batch 100 (NHWC, im2col + GEMM for the conv):
 * conv 5x5 1->32 SAME over 100 images of 28x28 is (100*28*28, 32, 5*5*1) forward and its weight
 * gradient (5*5*1, 32, 78400) with the im2col matrix transposed (no input gradient: the input
 * needs none); dense 6272->1024 forward, weight gradient x^T dy, input gradient dy W^T; dense
 * 1024->10 the same three. */
static const shape shapes[] = {
    {"square 1024", false, false, 1024, 1024, 1024, 0},
    {"square 2048", false, false, 2048, 2048, 2048, 0},
    {"conv fwd (im2col)", false, false, 78400, 32, 25, 1},
    {"conv dW", true, false, 25, 32, 78400, 1},
    {"dense fwd", false, false, 100, 1024, 6272, 1},
    {"dense dW", true, false, 6272, 1024, 100, 1},
    {"dense dX", false, true, 100, 6272, 1024, 1},
    {"out fwd", false, false, 100, 10, 1024, 1},
    {"out dW", true, false, 1024, 10, 100, 1},
    {"out dX", false, true, 100, 1024, 10, 1},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* Forward-pass shapes (for the forward FLOP count): those named "... fwd ...". */
static bool is_forward(const shape *s)
{
    return strstr(s->name, "fwd") != NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long arg_long(const char *s, long lo, long hi)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi) {
        fprintf(stderr, "bench_gemm_bound: bad value %s (expected %ld..%ld)\n", s, lo, hi);
        exit(2);
    }
    return v;
}

static double arg_seconds(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || !(v >= 0 && v <= 60)) {
        fprintf(stderr, "bench_gemm_bound: bad value %s (expected seconds in 0..60)\n", s);
        exit(2);
    }
    return v;
}

static float *random_floats(int64_t count, unsigned *seed)
{
    float *p = malloc((size_t)count * sizeof *p);
    if (p == NULL) {
        fprintf(stderr, "bench_gemm_bound: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < count; i++) {
        *seed = *seed * 1103515245u + 12345u;
        p[i] = (float)((*seed >> 8) & 0xFFFF) / 65536.0f - 0.5f;
    }
    return p;
}

/* One call of the kernel on the shape: 0 = cblas_sgemm, 1 = sx__gemm. Row-major; a is stored
 * (m,k) or, transposed, (k,m); b (k,n) or (n,k). */
static void gemm(int kernel, const shape *s, const float *a, const float *b, float *c)
{
    int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    if (kernel == 0)
        cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                    s->tb ? CblasTrans : CblasNoTrans, (int)s->m, (int)s->n, (int)s->k, 1.0f, a,
                    (int)lda, b, (int)ldb, 0.0f, c, (int)s->n);
    else
        sx__gemm(SX_F32, s->ta, s->tb, s->m, s->n, s->k, 1.0, a, lda, b, ldb, 0.0, c, s->n);
}

/* max |c_sx - c_cblas| / max |c_cblas| at the shape: the two kernels must agree before the
 * faster one sets the bound. c is scratch of m*n floats. */
static double kernels_differ(const shape *s, const float *a, const float *b, float *c)
{
    size_t count = (size_t)(s->m * s->n);
    float *ref = malloc(count * sizeof *ref);
    if (ref == NULL)
        return 0;
    gemm(0, s, a, b, ref);
    gemm(1, s, a, b, c);
    double dmax = 0, cmax = 0;
    for (size_t i = 0; i < count; i++) {
        double d = fabs((double)c[i] - (double)ref[i]), r = fabs((double)ref[i]);
        dmax = d > dmax || d != d ? d : dmax;
        cmax = r > cmax ? r : cmax;
    }
    free(ref);
    return cmax > 0 ? dmax / cmax : dmax;
}

static double median_of(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Median and minimum seconds of one call of each kernel. The kernels take turns in blocks of
 * calls (ROUNDS blocks each, the first kernel alternating), so that a change of load on a shared
 * machine hits both; each block starts with an untimed call, which absorbs what the other
 * kernel's threads leave behind (OpenBLAS's workers spin for a while after a call, strix's go
 * to sleep) and the first touch of c. */
static void time_gemm(const shape *s, const float *a, const float *b, float *c, double min_seconds,
                      double median[2], double best[2])
{
    static double t[2][MAX_SAMPLES];
    int n[2] = {0, 0};
    for (int round = 0; round < ROUNDS; round++) {
        for (int j = 0; j < 2; j++) {
            int kernel = round % 2 ? 1 - j : j, calls = 0;
            gemm(kernel, s, a, b, c);
            double start = now();
            while (n[kernel] < MAX_SAMPLES &&
                   (calls < MIN_CALLS || now() - start < min_seconds / ROUNDS)) {
                double t0 = now();
                gemm(kernel, s, a, b, c);
                t[kernel][n[kernel]++] = now() - t0;
                calls++;
            }
        }
    }
    for (int kernel = 0; kernel < 2; kernel++) {
        median[kernel] = median_of(t[kernel], n[kernel]);
        best[kernel] = t[kernel][0];
    }
}

typedef struct stream_ctx {
    float *p, *a;
} stream_ctx;

static void stream_range(void *ctx, int64_t lo, int64_t hi)
{
    const stream_ctx *c = ctx;
    for (int64_t i = lo; i < hi; i++) {
        float ai = c->a[i] + 1e-9f;
        c->a[i] = ai;
        c->p[i] -= 1e-9f * ai;
    }
}

/* Best time of one pass of the optimiser's memory pattern over `count` parameters: p and its
 * state a, each read and written once (p -= c * a', a' = a + d), split over the threads. */
static double update_floor(int64_t count, double min_seconds)
{
    float *p = malloc((size_t)count * sizeof *p), *a = malloc((size_t)count * sizeof *a);
    if (p == NULL || a == NULL) {
        fprintf(stderr, "bench_gemm_bound: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < count; i++)
        p[i] = 0.5f, a[i] = 1.0f;
    double best = INFINITY, start = now();
    for (int rep = 0; rep < 9 || now() - start < min_seconds; rep++) {
        double t0 = now();
        stream_ctx sc = {p, a};
        sx__par_range(count, 65536, stream_range, &sc);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    if (!(p[count / 2] < 1.0f)) /* keep the loop's result alive */
        printf("(check %g)\n", (double)p[count / 2]);
    free(p);
    free(a);
    return best;
}

int main(int argc, char **argv)
{
    long threads = 2, steps = 600;
    double min_seconds = 0.4;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--threads") == 0 && v != NULL)
            threads = arg_long(v, 1, 1024), i++;
        else if (strcmp(argv[i], "--steps") == 0 && v != NULL)
            steps = arg_long(v, 1, 100000000L), i++;
        else if (strcmp(argv[i], "--min-seconds") == 0 && v != NULL)
            min_seconds = arg_seconds(v), i++;
        else {
            fprintf(stderr, "usage: bench_gemm_bound [--threads T] [--steps N] "
                            "[--min-seconds S]\n");
            return 2;
        }
    }
    if (sx_threads_set((int)threads) != SX_OK) {
        fprintf(stderr, "bench_gemm_bound: %s\n", sx_last_error());
        return 1;
    }
    openblas_set_num_threads(
        (int)threads); /* the peer's count, after sx_threads_set (strix keeps OpenBLAS at one) */
    const char *core = getenv("OPENBLAS_CORETYPE");
    printf("GEMM bound of one MNIST training step (batch 100), f32, %d threads\n",
           sx_threads_get());
    printf("OPENBLAS_CORETYPE=%s; %s\n", core ? core : "(unset)", openblas_get_config());
    const char *sxg = getenv("STRIX_GEMM"), *isa = getenv("STRIX_GEMM_ISA");
    printf("sx__gemm: strix's GEMM (tensor/gemm.c)%s%s%s%s\n", sxg ? "; STRIX_GEMM=" : "",
           sxg ? sxg : "", isa ? "; STRIX_GEMM_ISA=" : "", isa ? isa : "");
    printf("ms per call: median (min) of >= %d calls and %.2f s per cell, in %d blocks per "
           "kernel taking turns\n",
           ROUNDS * MIN_CALLS, min_seconds, ROUNDS);
    printf("%-18s %2s %6s %5s %6s %8s %9s %9s %8s %9s %9s %8s\n", "shape", "op", "m", "n", "k",
           "MFLOP", "cblas ms", "(min)", "GFLOP/s", "sx ms", "(min)", "GFLOP/s");

    unsigned seed = 12345u;
    double step_flop = 0, fwd_flop = 0, peak[2] = {0, 0}, step_s[2] = {0, 0}, step_best = 0,
           step_min = 0;
    for (int i = 0; i < N_SHAPES; i++) {
        const shape *s = &shapes[i];
        float *a = random_floats(s->m * s->k, &seed), *b = random_floats(s->k * s->n, &seed);
        float *c = random_floats(s->m * s->n, &seed);
        double flop = 2.0 * (double)s->m * (double)s->n * (double)s->k, med[2], best[2];
        time_gemm(s, a, b, c, min_seconds, med, best);
        double diff = kernels_differ(s, a, b, c);
        if (diff > 1e-4) /* a fast but wrong kernel must not set the bound */
            printf("WARNING: at %s, sx__gemm differs from cblas_sgemm by %.3g (max |difference| "
                   "/ max |c|)\n",
                   s->name, diff);
        printf("%-18s %c%c %6lld %5lld %6lld %8.1f %9.3f %9.3f %8.1f %9.3f %9.3f %8.1f\n", s->name,
               s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', (long long)s->m, (long long)s->n,
               (long long)s->k, flop * 1e-6, med[0] * 1e3, best[0] * 1e3, flop / med[0] * 1e-9,
               med[1] * 1e3, best[1] * 1e3, flop / med[1] * 1e-9);
        for (int kernel = 0; kernel < 2; kernel++) {
            double gflops = flop / med[kernel] * 1e-9;
            if (s->per_step == 0 && gflops > peak[kernel])
                peak[kernel] = gflops;
            step_s[kernel] += s->per_step * med[kernel];
        }
        /* the bound takes, shape by shape, the faster of the two kernels */
        step_best += s->per_step * (med[0] < med[1] ? med[0] : med[1]);
        step_min += s->per_step * (best[0] < best[1] ? best[0] : best[1]);
        step_flop += s->per_step * flop;
        if (s->per_step > 0 && is_forward(s))
            fwd_flop += s->per_step * flop;
        free(a);
        free(b);
        free(c);
    }
    int peak_kernel = peak[1] > peak[0] ? 1 : 0;
    const char *kname[2] = {"cblas_sgemm", "sx__gemm"};
    double images = 100, best_peak = peak[peak_kernel];
    double flop_bound = step_flop * (double)steps / (best_peak * 1e9);
    printf("\none step: %.3f GFLOP in GEMMs = %.1f MFLOP per image (forward %.1f)\n",
           step_flop * 1e-9, step_flop / images * 1e-6, fwd_flop / images * 1e-6);
    printf("GEMM time of one step: cblas_sgemm %.1f ms, sx__gemm %.1f ms, faster of the two at "
           "each shape %.1f ms\n",
           step_s[0] * 1e3, step_s[1] * 1e3, step_best * 1e3);
    printf("peak square GFLOP/s: cblas_sgemm %.1f, sx__gemm %.1f\n", peak[0], peak[1]);
    printf("epoch (%ld steps) GEMM-bound lower bound:\n", steps);
    printf("  from the times at the step's shapes: %.2f s (cblas_sgemm %.2f s, sx__gemm %.2f s)\n",
           step_best * (double)steps, step_s[0] * (double)steps, step_s[1] * (double)steps);
    printf("  the same from the fastest call of each shape (a machine without load): %.2f s\n",
           step_min * (double)steps);
    printf("  from FLOPs / peak square GFLOP/s (%s, %.1f): %.2f s\n", kname[peak_kernel], best_peak,
           flop_bound);
    /* the parameters: each weight gradient (dW) shape is a weight, and its n a bias */
    int64_t params = 0;
    for (int i = 0; i < N_SHAPES; i++)
        if (shapes[i].per_step > 0 && strstr(shapes[i].name, "dW") != NULL)
            params += shapes[i].m * shapes[i].n + shapes[i].n;
    double floor_s = update_floor(params, min_seconds), bytes = 16.0 * (double)params;
    printf("optimiser memory floor: %lld parameters, p and its state read and written = %.1f MB "
           "per step: %.2f ms (%.1f GB/s), %.2f s per epoch\n",
           (long long)params, bytes * 1e-6, floor_s * 1e3, bytes / floor_s * 1e-9,
           floor_s * (double)steps);
    printf("  GEMM bound + memory floor: %.2f s\n", (step_best + floor_s) * (double)steps);
    printf("result: gemm_bound_s=%.2f peak_gflops=%.1f step_gflop=%.3f cblas_bound_s=%.2f "
           "sx_gemm_bound_s=%.2f flop_bound_s=%.2f gemm_bound_min_s=%.2f mem_floor_s=%.2f "
           "gemm_mem_bound_s=%.2f\n",
           step_best * (double)steps, best_peak, step_flop * 1e-9, step_s[0] * (double)steps,
           step_s[1] * (double)steps, flop_bound, step_min * (double)steps, floor_s * (double)steps,
           (step_best + floor_s) * (double)steps);
    return 0;
}
