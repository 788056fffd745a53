/* bench_gemm.c: strix's GEMM (sx__gemm, tensor/gemm/gemm.c) against the GEMMs a user could link
 * instead: OpenBLAS's cblas_?gemm and, when Debian's libblis4 is installed, BLIS (bli_?gemm,
 * loaded at run time so that its BLAS symbols never meet OpenBLAS's). The shapes are those strix
 * trains with (MNIST dense and conv layers as matmul and conv call them, a GPT-2-small block's
 * products), squares and small sizes, with 1 and 2 threads. Each figure is the median (and best)
 * GFLOP/s of timed runs after a warm-up (c = op(a) @ op(b), beta = 0); every side gets the same
 * buffers and they take turns run by run. One thread is timed by the thread's CPU time, more by
 * wall time, each run after a pause that lets the previous side's worker threads go to sleep
 * (they spin for a while after a call and would take a core from the next side; a program uses
 * one GEMM library, not three in turn) and an untimed call that wakes its own: the figures are
 * those of back-to-back calls, as in training. The machine's FMA peak (independent multiply-adds of
 * the widest vectors strix's GEMM uses, on every thread at once) is measured first, and strix's
 * figure is also given as a fraction of it. STRIX_GEMM_ISA=avx2|generic measures strix's other
 * kernel sets.
 *
 *     bench_gemm [--f64] [--reps N] [--threads LIST] [--quick] [SHAPE-NAME...]
 *
 * --f64 measures dgemm instead of sgemm; --reps: timed runs per figure (default: as many as
 * fit about 0.25 s, 5..60); --threads: comma-separated thread counts (default 1,2); --quick:
 * skip the 2048 square. The last lines, `result: ...`, give the geometric mean of the speed-up
 * over OpenBLAS on the MNIST shapes, and the fraction of the peak on the network shapes. */
#include "tensor_impl.h"

#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* the kernel set in use (tensor/gemm/gemm.c's test hook): 0 portable C, 1 AVX2+FMA, 2 AVX-512,
 * 3 NEON */
int sx__gemm_isa(int want);

enum { MAX_REPS = 61, MAX_THREADS = 8 };
#define SETTLE_NS 150000000L

typedef struct shape {
    const char *name;
    int m, n, k;
    bool ta, tb;
    bool mnist; /* counted in the speed-up line */
    bool net;   /* a network's shape: counted in the peak line */
} shape;

static const shape shapes[] = {
    {"dense_fwd", 100, 1024, 6272, false, false, true, true},
    {"dense_dw", 6272, 1024, 100, true, false, true, true},
    {"dense_dx", 100, 6272, 1024, false, true, true, true},
    {"last_fwd", 100, 10, 1024, false, false, true, false},
    {"last_dw", 1024, 10, 100, true, false, true, false},
    {"last_dx", 100, 1024, 10, false, true, true, false},
    {"conv1_fwd", 78400, 32, 25, false, false, true, false},
    {"conv1_dk", 25, 32, 78400, true, false, true, false},
    {"conv2_fwd", 19600, 64, 800, false, false, true, true},
    {"conv2_dx", 19600, 800, 64, false, true, true, true},
    {"conv2_dk", 800, 64, 19600, true, false, true, true},
    /* GPT-2 small, 4 x 128 tokens: attention's qkv, the MLP up and down, a weight gradient */
    {"gpt_qkv", 512, 2304, 768, false, false, false, true},
    {"gpt_fc", 512, 3072, 768, false, false, false, true},
    {"gpt_proj", 512, 768, 3072, false, false, false, true},
    {"gpt_dw", 768, 3072, 512, true, false, false, true},
    {"sq1024", 1024, 1024, 1024, false, false, false, false},
    {"sq1024_tt", 1024, 1024, 1024, true, true, false, false},
    {"sq2048", 2048, 2048, 2048, false, false, false, false},
    {"small8", 8, 8, 8, false, false, false, false},
    {"small15", 15, 13, 11, false, true, false, false},
    {"small16", 16, 16, 16, true, false, false, false},
    {"small32", 32, 32, 32, false, false, false, false},
    {"small64", 64, 64, 64, false, false, false, false},
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

/* ---------------------------------------------------------------- BLIS, loaded at run time */

/* bli_?gemm's typed API: trans_t values (BLIS_NO_TRANSPOSE = 0), dim_t and inc_t are 64-bit;
 * op(a) and op(b) are given by their row and column strides, so no transpose flag is needed. */
typedef void (*blis_sgemm_fn)(int, int, int64_t, int64_t, int64_t, const float *, const float *,
                              int64_t, int64_t, const float *, int64_t, int64_t, const float *,
                              float *, int64_t, int64_t);
typedef void (*blis_dgemm_fn)(int, int, int64_t, int64_t, int64_t, const double *, const double *,
                              int64_t, int64_t, const double *, int64_t, int64_t, const double *,
                              double *, int64_t, int64_t);
static blis_sgemm_fn blis_sgemm;
static blis_dgemm_fn blis_dgemm;
static void (*blis_set_threads)(int64_t);
static const char *blis_path;

/* Debian's libblis4-openmp (or -pthread, -serial) keeps libblis.so.4 outside the default path. */
static void blis_load(void)
{
    static const char *const paths[] = {
        "libblis.so.4",
        "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4",
        "/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4",
        "/usr/lib/aarch64-linux-gnu/blis-openmp/libblis.so.4",
        "/usr/lib/aarch64-linux-gnu/blis-pthread/libblis.so.4",
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        if (h == NULL)
            continue;
        *(void **)&blis_sgemm = dlsym(h, "bli_sgemm");
        *(void **)&blis_dgemm = dlsym(h, "bli_dgemm");
        *(void **)&blis_set_threads = dlsym(h, "bli_thread_set_num_threads");
        if (blis_sgemm && blis_dgemm && blis_set_threads) {
            blis_path = paths[i];
            return;
        }
        blis_sgemm = NULL;
        dlclose(h);
    }
}

/* ---------------------------------------------------------------- the FMA peak */

/* Independent multiply-adds on 12 accumulators (more than latency x ports on these CPUs) of the
 * widest vectors of strix's GEMM kernel set; flops per call returned. */
enum { PEAK_ITERS = 20000000 };
static volatile double peak_sink;
#define PEAK_BODY(V, SET1, FMA, STORE, T, VL)                                                      \
    V acc[12], x = SET1((T)0.999999), y = SET1((T)1e-7);                                           \
    for (int i = 0; i < 12; i++)                                                                   \
        acc[i] = SET1((T)(i + 1));                                                                 \
    for (long n = 0; n < PEAK_ITERS; n++) {                                                        \
        for (int i = 0; i < 12; i++)                                                               \
            acc[i] = FMA(acc[i], x, y);                                                            \
    }                                                                                              \
    for (int i = 1; i < 12; i++)                                                                   \
        acc[0] = FMA(acc[i], x, acc[0]);                                                           \
    T out[64 / sizeof(T)];                                                                         \
    STORE(out, acc[0]);                                                                            \
    peak_sink += (double)out[0];                                                                   \
    return 2.0 * 12 * (VL)*PEAK_ITERS;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
__attribute__((target("avx2,fma"))) static double peak_avx2_f32(void)
{
    PEAK_BODY(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_storeu_ps, float, 8)
}
__attribute__((target("avx2,fma"))) static double peak_avx2_f64(void)
{
    PEAK_BODY(__m256d, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_storeu_pd, double, 4)
}
__attribute__((target("avx512f"))) static double peak_avx512_f32(void)
{
    PEAK_BODY(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_storeu_ps, float, 16)
}
__attribute__((target("avx512f"))) static double peak_avx512_f64(void)
{
    PEAK_BODY(__m512d, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_storeu_pd, double, 8)
}
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#define NEON_FMA_F32(a, x, y) vfmaq_f32(y, a, x)
#define NEON_FMA_F64(a, x, y) vfmaq_f64(y, a, x)
static double peak_neon_f32(void)
{
    PEAK_BODY(float32x4_t, vdupq_n_f32, NEON_FMA_F32, vst1q_f32, float, 4)
}
static double peak_neon_f64(void)
{
    PEAK_BODY(float64x2_t, vdupq_n_f64, NEON_FMA_F64, vst1q_f64, double, 2)
}
#endif

typedef struct peak_arg {
    sx_dtype dt;
    int isa;
    pthread_barrier_t *start;
    double flops;
} peak_arg;

/* One thread's share: the kernel of strix's GEMM set (0 portable: none, no peak). */
static void *peak_thread(void *p)
{
    peak_arg *pa = p;
    pthread_barrier_wait(pa->start);
    pa->flops = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (pa->isa == 1)
        pa->flops = pa->dt == SX_F32 ? peak_avx2_f32() : peak_avx2_f64();
    else if (pa->isa == 2)
        pa->flops = pa->dt == SX_F32 ? peak_avx512_f32() : peak_avx512_f64();
#endif
#if defined(__aarch64__)
    if (pa->isa == 3)
        pa->flops = pa->dt == SX_F32 ? peak_neon_f32() : peak_neon_f64();
#endif
    return NULL;
}

/* GFLOP/s of nt threads running the peak loop at once (wall time), best of 5; 0 when the set has
 * no vector kernel. */
static double fma_peak(sx_dtype dt, int isa, int nt)
{
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        pthread_t th[MAX_THREADS];
        peak_arg pa[MAX_THREADS];
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, (unsigned)nt + 1);
        for (int i = 0; i < nt; i++) {
            pa[i] = (peak_arg){dt, isa, &start, 0};
            pthread_create(&th[i], NULL, peak_thread, &pa[i]);
        }
        struct timespec t0, t1;
        pthread_barrier_wait(&start);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        double flops = 0;
        for (int i = 0; i < nt; i++) {
            pthread_join(th[i], NULL);
            flops += pa[i].flops;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        pthread_barrier_destroy(&start);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (flops / s * 1e-9 > best)
            best = flops / s * 1e-9;
    }
    return best;
}

/* ---------------------------------------------------------------- the sides */

enum { SIDE_STRIX, SIDE_OPENBLAS, SIDE_BLIS, N_SIDES };

/* One call of a side on the shape's buffers (c overwritten: beta = 0). */
static void call(int side, sx_dtype dt, const shape *s, const void *a, const void *b, void *c)
{
    int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    if (side == SIDE_STRIX) {
        sx__gemm(dt, s->ta, s->tb, s->m, s->n, s->k, 1.0, a, lda, b, ldb, 0.0, c, s->n);
        return;
    }
    if (side == SIDE_BLIS) { /* op(a)(i, p) at i * rsa + p * csa, row-major c */
        int64_t rsa = s->ta ? 1 : lda, csa = s->ta ? lda : 1;
        int64_t rsb = s->tb ? 1 : ldb, csb = s->tb ? ldb : 1;
        if (dt == SX_F32) {
            const float one = 1, zero = 0;
            blis_sgemm(0, 0, s->m, s->n, s->k, &one, a, rsa, csa, b, rsb, csb, &zero, c, s->n, 1);
        } else {
            const double one = 1, zero = 0;
            blis_dgemm(0, 0, s->m, s->n, s->k, &one, a, rsa, csa, b, rsb, csb, &zero, c, s->n, 1);
        }
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

/* Median and best GFLOP/s of every side (gf[side][0..1]; zeros for a side not loaded) on one
 * shape with nt threads. */
static void bench_shape(sx_dtype dt, const shape *s, int nt, int reps_opt, double gf[N_SIDES][2])
{
    size_t es = sx_dtype_size(dt);
    size_t na = (size_t)s->m * (size_t)s->k, nb = (size_t)s->k * (size_t)s->n;
    size_t nc = (size_t)s->m * (size_t)s->n;
    const int sides = blis_sgemm ? N_SIDES : SIDE_BLIS;
    /* 64-byte aligned, as strix's tensors of 4 MB and more are (2 MB aligned) */
    unsigned char *a = xmalloc(na * es), *b = xmalloc(nb * es), *c[N_SIDES];
    for (int side = 0; side < sides; side++)
        c[side] = xmalloc(nc * es);
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
    /* the peers' counts, after sx_threads_set (strix keeps OpenBLAS at one) */
    openblas_set_num_threads(nt);
    if (blis_set_threads)
        blis_set_threads(nt);
    cpu_clock = nt == 1;
    double flops = 2.0 * s->m * s->n * s->k;
    /* warm-up (and the sanity check), then a rep count that fits about 0.25 s */
    double t0 = now();
    for (int side = 0; side < sides; side++)
        call(side, dt, s, a, b, c[side]);
    double once = (now() - t0) / sides;
    for (int side = 1; side < sides; side++) {
        double diff = max_diff(dt, c[0], c[side], nc);
        if (diff > (dt == SX_F32 ? 1e-3 : 1e-9))
            fprintf(stderr, "bench_gemm: %s: results of side %d differ by %.3g\n", s->name, side,
                    diff);
    }
    int reps = reps_opt ? reps_opt : (int)(0.25 / (once + 1e-9));
    reps = reps < 5 ? 5 : reps > MAX_REPS ? MAX_REPS : reps;
    /* small shapes: time batches of calls (1 ms) so the clock's cost and resolution do not
     * matter */
    int inner = once < 1e-3 ? (int)(1e-3 / (once + 1e-9)) + 1 : 1;
    double t[N_SIDES][MAX_REPS];
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < sides; i++) {
            int who = (r + i) % sides; /* rotate which goes first */
            if (nt > 1) { /* let the previous side's workers stop spinning (OpenBLAS's spin
                             for up to 2^28 cycles after a call, OpenMP's for a while), then
                             wake this side's with an untimed call */
                nanosleep(&(struct timespec){0, SETTLE_NS}, NULL);
                call(who, dt, s, a, b, c[who]);
            }
            double t1 = now();
            for (int j = 0; j < inner; j++)
                call(who, dt, s, a, b, c[who]);
            t[who][r] = (now() - t1) / inner;
        }
    memset(gf, 0, sizeof(double) * N_SIDES * 2);
    for (int who = 0; who < sides; who++) {
        qsort(t[who], (size_t)reps, sizeof(double), cmp_double);
        gf[who][0] = flops / t[who][reps / 2] * 1e-9;
        gf[who][1] = flops / t[who][0] * 1e-9;
        free(c[who]);
    }
    free(a);
    free(b);
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
    blis_load();
    const char *core = getenv("OPENBLAS_CORETYPE");
    static const char *const isa_names[] = {"portable C", "AVX2+FMA", "AVX-512", "NEON"};
    const int isa = sx__gemm_isa(-1);
    printf("%s GEMM, GFLOP/s median (best); strix kernel set %s; OPENBLAS_CORETYPE=%s; BLIS %s\n",
           dt == SX_F32 ? "f32" : "f64", isa_names[isa], core ? core : "(unset)",
           blis_path ? blis_path : "not installed (scripts/setup --bench)");
    double peak[MAX_THREADS];
    printf("FMA peak (%s, all threads at once):", isa_names[isa]);
    for (int ti = 0; ti < n_t; ti++) {
        peak[ti] = fma_peak(dt, isa, tlist[ti]);
        printf(" %dT %.1f GFLOP/s", tlist[ti], peak[ti]);
    }
    printf("\n%-10s %5s %5s %5s %2s %2s", "shape", "m", "n", "k", "ta", "tb");
    for (int ti = 0; ti < n_t; ti++)
        printf(" | %dT strix   %%peak openblas  blis    vs best", tlist[ti]);
    printf("\n");
    double logsum[MAX_THREADS] = {0}, peak_min[MAX_THREADS], peak_log[MAX_THREADS] = {0};
    int count = 0, net_count = 0;
    for (int ti = 0; ti < n_t; ti++)
        peak_min[ti] = 1e9;
    for (int si = 0; si < N_SHAPES; si++) {
        const shape *s = &shapes[si];
        if (any ? !want[si] : (quick && s->m == 2048))
            continue;
        printf("%-10s %5d %5d %5d %2d %2d", s->name, s->m, s->n, s->k, s->ta, s->tb);
        fflush(stdout);
        for (int ti = 0; ti < n_t; ti++) {
            double gf[N_SIDES][2];
            bench_shape(dt, s, tlist[ti], reps, gf);
            double best_peer =
                gf[SIDE_OPENBLAS][0] > gf[SIDE_BLIS][0] ? gf[SIDE_OPENBLAS][0] : gf[SIDE_BLIS][0];
            double frac = peak[ti] > 0 ? gf[SIDE_STRIX][0] / peak[ti] : 0;
            printf(" | %6.1f %5.1f%% %6.1f %6.1f %6.2fx", gf[SIDE_STRIX][0], 100 * frac,
                   gf[SIDE_OPENBLAS][0], gf[SIDE_BLIS][0], gf[SIDE_STRIX][0] / best_peer);
            fflush(stdout);
            if (s->mnist)
                logsum[ti] += log(gf[SIDE_STRIX][0] / gf[SIDE_OPENBLAS][0]);
            if (s->net) {
                peak_log[ti] += log(frac > 0 ? frac : 1e-9);
                peak_min[ti] = frac < peak_min[ti] ? frac : peak_min[ti];
            }
        }
        count += s->mnist;
        net_count += s->net;
        printf("\n");
    }
    printf("result: strix/OpenBLAS %s GEMM speed-up on the MNIST shapes (geometric mean of "
           "medians):",
           dt == SX_F32 ? "f32" : "f64");
    for (int ti = 0; ti < n_t; ti++)
        printf(" %dT %.2fx", tlist[ti], count ? exp(logsum[ti] / count) : 0.0);
    printf("\nresult: strix's fraction of the FMA peak on the network shapes (geometric mean, "
           "worst):");
    for (int ti = 0; ti < n_t; ti++)
        printf(" %dT %.1f%% %.1f%%", tlist[ti],
               net_count ? 100 * exp(peak_log[ti] / net_count) : 0.0,
               net_count ? 100 * peak_min[ti] : 0.0);
    printf("\n");
    return 0;
}
