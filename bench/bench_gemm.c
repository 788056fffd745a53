/* bench_gemm.c: strix's GEMM (sx__gemm, tensor/gemm/gemm.c) against OpenBLAS's cblas_?gemm on the
 * shapes strix trains with (MNIST dense and conv layers as matmul and conv call them), squares
 * and small sizes, with 1 and 2 threads. Each figure is the median (and best) GFLOP/s of timed
 * runs after a warm-up (c = op(a) @ op(b), beta = 0); both sides get the same buffers and
 * alternate run by run. One thread is timed by the thread's CPU time, more by wall time.
 * STRIX_GEMM_ISA=avx2|generic measures strix's other kernel sets.
 *
 *     bench_gemm [--f64] [--reps N] [--threads LIST] [--quick] [SHAPE-NAME...]
 *
 * --f64 measures dgemm instead of sgemm; --reps: timed runs per figure (default: as many as
 * fit about 0.25 s, 5..60); --threads: comma-separated thread counts (default 1,2); --quick:
 * skip the 2048 square. The last line, `result: ...`, gives the geometric mean of the speed-up
 * over the MNIST shapes and per thread count. */
#include "tensor_impl.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_REPS = 61, MAX_THREADS = 8 };

typedef struct shape {
    const char *name;
    int m, n, k;
    bool ta, tb;
    bool mnist; /* counted in the result line */
} shape;

static const shape shapes[] = {
    {"dense_fwd", 100, 1024, 6272, false, false, true},
    {"dense_dw", 6272, 1024, 100, true, false, true},
    {"dense_dx", 100, 6272, 1024, false, true, true},
    {"last_fwd", 100, 10, 1024, false, false, true},
    {"last_dw", 1024, 10, 100, true, false, true},
    {"last_dx", 100, 1024, 10, false, true, true},
    {"conv1_fwd", 78400, 32, 25, false, false, true},
    {"conv1_dk", 25, 32, 78400, true, false, true},
    {"conv2_fwd", 19600, 64, 800, false, false, true},
    {"conv2_dx", 19600, 800, 64, false, true, true},
    {"conv2_dk", 800, 64, 19600, true, false, true},
    {"sq1024", 1024, 1024, 1024, false, false, false},
    {"sq1024_tt", 1024, 1024, 1024, true, true, false},
    {"sq2048", 2048, 2048, 2048, false, false, false},
    {"small8", 8, 8, 8, false, false, false},
    {"small15", 15, 13, 11, false, true, false},
    {"small16", 16, 16, 16, true, false, false},
    {"small32", 32, 32, 32, false, false, false},
    {"small64", 64, 64, 64, false, false, false},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* With one thread the calling thread's CPU time (both sides then run in it), which a busy
 * machine disturbs less than wall time; with more, wall time. */
static bool cpu_clock;

static double now(void)
{
    struct timespec ts;
    clock_gettime(cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == NULL) {
        fprintf(stderr, "bench_gemm: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* One call of either side on the shape's buffers (c overwritten: beta = 0). */
static void call(bool strix, sx_dtype dt, const shape *s, const void *a, const void *b, void *c)
{
    int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    if (strix) {
        sx__gemm(dt, s->ta, s->tb, s->m, s->n, s->k, 1.0, a, lda, b, ldb, 0.0, c, s->n);
        return;
    }
    enum CBLAS_TRANSPOSE opa = s->ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE opb = s->tb ? CblasTrans : CblasNoTrans;
    if (dt == SX_F32)
        cblas_sgemm(CblasRowMajor, opa, opb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
    else
        cblas_dgemm(CblasRowMajor, opa, opb, s->m, s->n, s->k, 1.0, a, lda, b, ldb, 0.0, c, s->n);
}

/* Largest |x - y| / (|y| + 1) between the two sides' results: a sanity check, not a test. */
static double max_diff(sx_dtype dt, const void *x, const void *y, size_t count)
{
    double d = 0;
    for (size_t i = 0; i < count; i++) {
        double a = dt == SX_F32 ? (double)((const float *)x)[i] : ((const double *)x)[i];
        double b = dt == SX_F32 ? (double)((const float *)y)[i] : ((const double *)y)[i];
        double e = fabs(a - b) / (fabs(b) + 1);
        d = e > d ? e : d;
    }
    return d;
}

/* Median and best GFLOP/s of both sides on one shape with nt threads. */
static void bench_shape(sx_dtype dt, const shape *s, int nt, int reps_opt, double gf[2][2])
{
    size_t es = sx_dtype_size(dt);
    size_t na = (size_t)s->m * (size_t)s->k, nb = (size_t)s->k * (size_t)s->n;
    size_t nc = (size_t)s->m * (size_t)s->n;
    /* 64-byte aligned, as strix's tensors of 4 MB and more are (2 MB aligned) */
    unsigned char *a = xmalloc(na * es), *b = xmalloc(nb * es);
    unsigned char *c0 = xmalloc(nc * es), *c1 = xmalloc(nc * es);
    for (size_t i = 0; i < na; i++)
        if (dt == SX_F32)
            ((float *)a)[i] = (float)((int)(i * 7 % 13) - 6) * 0.125f;
        else
            ((double *)a)[i] = (double)((int)(i * 7 % 13) - 6) * 0.125;
    for (size_t i = 0; i < nb; i++)
        if (dt == SX_F32)
            ((float *)b)[i] = (float)((int)(i * 5 % 11) - 5) * 0.25f;
        else
            ((double *)b)[i] = (double)((int)(i * 5 % 11) - 5) * 0.25;
    if (sx_threads_set(nt) != SX_OK) {
        fprintf(stderr, "bench_gemm: %s\n", sx_last_error());
        exit(1);
    }
    openblas_set_num_threads(
        nt); /* the peer's count, after sx_threads_set (strix keeps OpenBLAS at one) */
    cpu_clock = nt == 1;
    double flops = 2.0 * s->m * s->n * s->k;
    /* warm-up (and the sanity check), then a rep count that fits about 0.25 s */
    double t0 = now();
    call(true, dt, s, a, b, c0);
    call(false, dt, s, a, b, c1);
    double once = (now() - t0) / 2;
    double diff = max_diff(dt, c0, c1, nc);
    if (diff > (dt == SX_F32 ? 1e-3 : 1e-9))
        fprintf(stderr, "bench_gemm: %s: results differ by %.3g\n", s->name, diff);
    int reps = reps_opt ? reps_opt : (int)(0.25 / (once + 1e-9));
    reps = reps < 5 ? 5 : reps > MAX_REPS ? MAX_REPS : reps;
    /* small shapes: time batches of calls (1 ms) so the clock's cost and resolution do not
     * matter */
    int inner = once < 1e-3 ? (int)(1e-3 / (once + 1e-9)) + 1 : 1;
    double t[2][MAX_REPS];
    for (int r = 0; r < reps; r++)
        for (int side = 0; side < 2; side++) {
            int who = (r & 1) ? 1 - side : side; /* alternate which goes first */
            double t1 = now();
            for (int i = 0; i < inner; i++)
                call(who == 0, dt, s, a, b, who == 0 ? c0 : c1);
            t[who][r] = (now() - t1) / inner;
        }
    for (int who = 0; who < 2; who++) {
        qsort(t[who], (size_t)reps, sizeof(double), cmp_double);
        gf[who][0] = flops / t[who][reps / 2] * 1e-9;
        gf[who][1] = flops / t[who][0] * 1e-9;
    }
    free(a);
    free(b);
    free(c0);
    free(c1);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_gemm [--f64] [--reps N] [--threads LIST] [--quick] [SHAPE...]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    sx_dtype dt = SX_F32;
    int reps = 0, tlist[MAX_THREADS] = {1, 2}, n_t = 2;
    bool quick = false, want[N_SHAPES] = {false}, any = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--f64") == 0) {
            dt = SX_F64;
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
            if (reps < 1 || reps > MAX_REPS)
                usage();
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            n_t = 0;
            for (char *tok = strtok(argv[++i], ","); tok && n_t < MAX_THREADS;
                 tok = strtok(NULL, ","))
                if ((tlist[n_t++] = atoi(tok)) < 1)
                    usage();
            if (n_t == 0)
                usage();
        } else {
            int k = 0;
            while (k < N_SHAPES && strcmp(argv[i], shapes[k].name) != 0)
                k++;
            if (k == N_SHAPES)
                usage();
            want[k] = any = true;
        }
    }
    const char *core = getenv("OPENBLAS_CORETYPE");
    printf("%s GEMM, GFLOP/s median (best); OPENBLAS_CORETYPE=%s\n", dt == SX_F32 ? "f32" : "f64",
           core ? core : "(unset)");
    printf("%-11s %5s %5s %5s %2s %2s", "shape", "m", "n", "k", "ta", "tb");
    for (int ti = 0; ti < n_t; ti++)
        printf(" | %dT strix        openblas       ratio", tlist[ti]);
    printf("\n");
    double logsum[MAX_THREADS] = {0};
    int count = 0;
    for (int si = 0; si < N_SHAPES; si++) {
        const shape *s = &shapes[si];
        if (any ? !want[si] : (quick && s->m == 2048))
            continue;
        printf("%-11s %5d %5d %5d %2d %2d", s->name, s->m, s->n, s->k, s->ta, s->tb);
        fflush(stdout);
        for (int ti = 0; ti < n_t; ti++) {
            double gf[2][2];
            bench_shape(dt, s, tlist[ti], reps, gf);
            double ratio = gf[0][0] / gf[1][0];
            printf(" | %6.1f (%6.1f) %6.1f (%6.1f) %5.2fx", gf[0][0], gf[0][1], gf[1][0], gf[1][1],
                   ratio);
            fflush(stdout);
            if (s->mnist)
                logsum[ti] += log(ratio);
        }
        count += s->mnist;
        printf("\n");
    }
    printf("result: strix/OpenBLAS %s GEMM speed-up on the MNIST shapes (geometric mean of "
           "medians):",
           dt == SX_F32 ? "f32" : "f64");
    for (int ti = 0; ti < n_t; ti++)
        printf(" %dT %.2fx", tlist[ti], count ? exp(logsum[ti] / count) : 0.0);
    printf("\n");
    return 0;
}
