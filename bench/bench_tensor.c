/* bench_tensor.c: the tensor benchmark, strix's side. sin against a plain sinf loop
 * compiled in this program (1 and 2 threads); sum over axes and repeat x2 of a 4-d f32 array
 * (time, and peak bytes counted by an allocator hook); conv2d forward and both backwards. Every
 * figure is the median of several timed runs after a warm-up. bench/tensor_peer.py measures
 * the same for NumPy and PyTorch, and bench/compare_tensor runs both and prints one table.
 *
 *     bench_tensor [--raw] [--reps N] [--side N] [--rside N] [--threads LIST] [SECTION...]
 *
 * SECTION: sin, fold, repeat, conv (default: all). --side: side of the array summed (64: 64^4
 * elements); --rside: side of the array repeated (32: 32^4 in, 64^4 out); --threads: thread
 * counts for conv, comma-separated (default 1,2); --reps: timed runs per figure. --raw prints
 * `key sample sample ...` lines for compare_tensor instead of tables. */
#include "sx_tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

enum { MAX_REPS = 101, MAX_THREADS = 8 };

static bool raw; /* print `key samples...` lines instead of tables */

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes);
    if (p == NULL) {
        fprintf(stderr, "bench_tensor: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static void threads(int n)
{
    CHECK(sx_threads_set(n));
}

/* ---------------------------------------------------------------- samples */

typedef struct series {
    double v[MAX_REPS];
    int n;
} series;

static void add(series *s, double v)
{
    if (s->n < MAX_REPS)
        s->v[s->n++] = v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const series *s)
{
    double v[MAX_REPS];
    memcpy(v, s->v, (size_t)s->n * sizeof v[0]);
    qsort(v, (size_t)s->n, sizeof v[0], cmp_double);
    return s->n % 2 ? v[s->n / 2] : 0.5 * (v[s->n / 2 - 1] + v[s->n / 2]);
}

/* In raw mode, one line: the key, then every sample (compare_tensor pools them over rounds). */
static void emit(const char *key, const series *s)
{
    if (!raw)
        return;
    printf("%s", key);
    for (int i = 0; i < s->n; i++)
        printf(" %.9g", s->v[i]);
    printf("\n");
}

static void emit1(const char *key, double v)
{
    series s = {{v}, 1};
    emit(key, &s);
}

/* ---------------------------------------------------------------- counting allocator */

/* Wraps the default allocator: each block carries its size in a header of one max_align_t, so
 * the bytes live and their peak are known at every moment. Installed only around a measured
 * call, so that every block it sees is also freed through it. */
typedef struct counter {
    sx_allocator base;
    size_t cur, peak;
} counter;

enum { HDR = sizeof(max_align_t) };
static counter cnt;

static void *count_alloc(void *ctx, size_t n)
{
    counter *c = ctx;
    unsigned char *p = c->base.alloc(c->base.ctx, n + HDR);
    if (p == NULL)
        return NULL;
    memcpy(p, &n, sizeof n);
    c->cur += n;
    if (c->cur > c->peak)
        c->peak = c->cur;
    return p + HDR;
}

static void *count_realloc(void *ctx, void *p, size_t n)
{
    counter *c = ctx;
    if (p == NULL)
        return count_alloc(ctx, n);
    size_t old;
    memcpy(&old, (unsigned char *)p - HDR, sizeof old);
    unsigned char *q = c->base.realloc(c->base.ctx, (unsigned char *)p - HDR, n + HDR);
    if (q == NULL)
        return NULL;
    memcpy(q, &n, sizeof n);
    c->cur = c->cur - old + n;
    if (c->cur > c->peak)
        c->peak = c->cur;
    return q + HDR;
}

static void count_free(void *ctx, void *p)
{
    counter *c = ctx;
    if (p == NULL)
        return;
    size_t n;
    memcpy(&n, (unsigned char *)p - HDR, sizeof n);
    c->cur -= n;
    c->base.free(c->base.ctx, (unsigned char *)p - HDR);
}

static void count_begin(void)
{
    cnt.base = sx_allocator_get();
    cnt.cur = cnt.peak = 0;
    sx_allocator a = {count_alloc, count_realloc, count_free, &cnt};
    sx_allocator_set(&a);
}

/* The peak of the bytes allocated through the hook since count_begin; restores the allocator.
 * Everything allocated in between must have been freed. */
static size_t count_end(void)
{
    sx_allocator_set(&cnt.base);
    if (cnt.cur != 0)
        fprintf(stderr, "bench_tensor: %zu bytes still allocated after a measured call\n", cnt.cur);
    return cnt.peak;
}

/* ---------------------------------------------------------------- sin */

/* The baseline: what a user writes without strix, built with the same compiler and flags. */
__attribute__((noinline)) static void plain_sin(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = sinf(x[i]);
}

static void bench_sin(int reps)
{
    static const int64_t sizes[] = {100000, 300000, 1000000, 2000000, 5000000};
    const int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
    const int64_t nmax = sizes[n_sizes - 1];
    float *x = xmalloc((size_t)nmax * sizeof *x), *y = xmalloc((size_t)nmax * sizeof *y);
    float *z = xmalloc((size_t)nmax * sizeof *z);
    sx_tensor tx = sx_tensor_view(SX_F32, 1, &nmax, x);
    sx_rng rng;
    sx_rng_seed(&rng, 1);
    CHECK(sx_tensor_rand_uniform(&tx, &rng, -2 * M_PI, 2 * M_PI));

    if (!raw) {
        printf("sin, f32, x uniform in [-2pi, 2pi]: ns per element, median of %d runs\n", reps);
        printf("%10s %10s %10s %10s %12s %12s\n", "elements", "plain C", "strix 1t", "strix 2t",
               "1t vs plain", "2t vs plain");
    }
    for (int si = 0; si < n_sizes; si++) {
        int64_t n = sizes[si];
        sx_tensor a = sx_tensor_view(SX_F32, 1, &n, x), b = sx_tensor_view(SX_F32, 1, &n, y);
        series s[3] = {0};
        /* The three variants alternate within each run, so load changes hit them alike. */
        for (int r = -1; r < reps; r++) {
            double t0 = now();
            plain_sin(x, z, n);
            double t1 = now();
            threads(1);
            double t2 = now();
            CHECK(sx_tensor_map_out(SX_MAP_SIN, 0, &a, &b));
            double t3 = now();
            threads(2);
            double t4 = now();
            CHECK(sx_tensor_map_out(SX_MAP_SIN, 0, &a, &b));
            double t5 = now();
            if (r >= 0) {
                add(&s[0], (t1 - t0) * 1e9 / (double)n);
                add(&s[1], (t3 - t2) * 1e9 / (double)n);
                add(&s[2], (t5 - t4) * 1e9 / (double)n);
            }
        }
        float err = 0;
        for (int64_t i = 0; i < n; i++)
            err = fmaxf(err, fabsf(y[i] - z[i]));
        if (err > 1e-6f)
            fprintf(stderr, "bench_tensor: sin: strix and sinf differ by %g\n", (double)err);
        static const char *const names[] = {"plain", "strix1", "strix2"};
        for (int v = 0; v < 3; v++) {
            char key[64];
            snprintf(key, sizeof key, "sin/%lld/%s", (long long)n, names[v]);
            emit(key, &s[v]);
        }
        if (!raw) {
            double p = median(&s[0]), m1 = median(&s[1]), m2 = median(&s[2]);
            printf("%10lld %10.3f %10.3f %10.3f %11.2fx %11.2fx\n", (long long)n, p, m1, m2, p / m1,
                   p / m2);
        }
    }
    free(x);
    free(y);
    free(z);
}

/* ---------------------------------------------------------------- sum and repeat */

static sx_tensor *random_cube(int64_t side)
{
    int64_t shape[4] = {side, side, side, side};
    sx_tensor *x = NULL;
    CHECK(sx_tensor_new(SX_F32, 4, shape, &x));
    sx_rng rng;
    sx_rng_seed(&rng, 2);
    CHECK(sx_tensor_rand_uniform(x, &rng, 0, 1));
    return x;
}

static double sum_all(const sx_tensor *t)
{
    double s = 0;
    for (int64_t i = 0; i < t->size; i++)
        s += (double)SX_F32P(t)[i];
    return s;
}

static void table_header(const char *what, int64_t side, int64_t in_elems, int reps)
{
    if (raw)
        return;
    printf("\n%s of a (%lld,%lld,%lld,%lld) f32 array (%.1f MB): ms, median of %d runs.\n"
           "new: the call allocates its result (freed outside the timing); out: the _out form\n"
           "into an output already in memory. peak = input + the most bytes live through the\n"
           "allocator hook during the `new` call\n",
           what, (long long)side, (long long)side, (long long)side, (long long)side,
           (double)in_elems * 4e-6, reps);
    printf("%-12s %5s %10s %10s %12s\n", "case", "way", "strix 1t", "strix 2t", "peak MB");
}

static void table_row(const char *name, const char *way, const series *s1, const series *s2,
                      double peak)
{
    if (raw)
        return;
    printf("%-12s %5s %10.2f %10.2f", name, way, median(s1), median(s2));
    if (peak > 0)
        printf(" %12.2f", peak * 1e-6);
    printf("\n");
}

/* Emit the four series of a case (new and out, 1 and 2 threads) and the peak, print the rows. */
static void fold_report(const char *prefix, const char *name, const series s[4], double peak)
{
    static const char *const sfx[] = {"strix1", "strix2", "strix1_out", "strix2_out"};
    char key[64];
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "%s/%s/%s", prefix, name, sfx[i]);
        emit(key, &s[i]);
    }
    snprintf(key, sizeof key, "%s/%s/strix_peak", prefix, name);
    emit1(key, peak);
    table_row(name, "new", &s[0], &s[1], peak);
    table_row(name, "out", &s[2], &s[3], 0);
}

static void bench_fold(int reps, int64_t side)
{
    static const struct {
        const char *name;
        unsigned axes;
    } cases[] = {{"ax0", SX_AXIS(0)}, {"ax1", SX_AXIS(1)}, {"ax02", SX_AXIS(0) | SX_AXIS(2)}};
    sx_tensor *x = random_cube(side);
    const double total = sum_all(x);
    const size_t in_bytes = (size_t)x->size * sizeof(float);
    table_header("sum", side, x->size, reps);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const unsigned axes = cases[c].axes;
        series s[4] = {0};
        sx_tensor *kept = NULL;
        CHECK(sx_tensor_fold(SX_FOLD_SUM, x, axes, false, &kept));
        for (int r = -1; r < reps; r++) {
            for (int t = 0; t < 2; t++) {
                threads(t + 1);
                sx_tensor *out = NULL;
                double t0 = now();
                CHECK(sx_tensor_fold(SX_FOLD_SUM, x, axes, false, &out));
                double t1 = now();
                CHECK(sx_tensor_fold_out(SX_FOLD_SUM, x, axes, false, kept));
                double t2 = now();
                if (r >= 0) {
                    add(&s[t], (t1 - t0) * 1e3);
                    add(&s[2 + t], (t2 - t1) * 1e3);
                }
                sx_tensor_free(out);
            }
        }
        if (fabs(sum_all(kept) - total) > 1e-4 * total)
            fprintf(stderr, "bench_tensor: sum %s: total %g, want %g\n", cases[c].name,
                    sum_all(kept), total);
        sx_tensor_free(kept);
        count_begin();
        sx_tensor *out = NULL;
        CHECK(sx_tensor_fold(SX_FOLD_SUM, x, axes, false, &out));
        sx_tensor_free(out);
        fold_report("sum", cases[c].name, s, (double)(count_end() + in_bytes));
    }
    sx_tensor_free(x);
}

static const int64_t reps2[4] = {2, 2, 2, 2};

/* repeat x2 on every axis: allocate the result and fill it, as np.repeat does. */
static void repeat2(const sx_tensor *x, sx_tensor **out)
{
    int64_t shape[4];
    for (int i = 0; i < 4; i++)
        shape[i] = 2 * x->shape[i];
    CHECK(sx_tensor_new(SX_F32, 4, shape, out));
    CHECK(sx_tensor_repeat_out(x, reps2, *out));
}

static void bench_repeat(int reps, int64_t side)
{
    sx_tensor *x = random_cube(side);
    const size_t in_bytes = (size_t)x->size * sizeof(float);
    table_header("repeat x2 on every axis", side, x->size, reps);
    series s[4] = {0};
    sx_tensor *kept = NULL;
    repeat2(x, &kept);
    for (int r = -1; r < reps; r++) {
        for (int t = 0; t < 2; t++) {
            threads(t + 1);
            sx_tensor *out = NULL;
            double t0 = now();
            repeat2(x, &out);
            double t1 = now();
            CHECK(sx_tensor_repeat_out(x, reps2, kept));
            double t2 = now();
            if (r >= 0) {
                add(&s[t], (t1 - t0) * 1e3);
                add(&s[2 + t], (t2 - t1) * 1e3);
            }
            sx_tensor_free(out);
        }
    }
    /* spot check: out[i,j,k,l] = x[i/2,j/2,k/2,l/2] at the last element, and the total */
    float got = SX_F32P(kept)[kept->size - 1], want = SX_F32P(x)[x->size - 1];
    if (got != want || fabs(sum_all(kept) - 16 * sum_all(x)) > 1e-4 * sum_all(kept))
        fprintf(stderr, "bench_tensor: repeat gives a wrong result\n");
    sx_tensor_free(kept);
    count_begin();
    sx_tensor *out = NULL;
    repeat2(x, &out);
    sx_tensor_free(out);
    fold_report("repeat", "x2", s, (double)(count_end() + in_bytes));
    sx_tensor_free(x);
}

/* ---------------------------------------------------------------- conv2d */

static void bench_conv(int reps, const int *tlist, int n_t)
{
    static const struct {
        const char *name;
        int64_t x[4], k[4];
    } cases[] = {{"c1", {100, 28, 28, 1}, {5, 5, 1, 32}},
                 {"c2", {100, 14, 14, 32}, {5, 5, 32, 64}}};
    const sx_conv2d_params p = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    if (!raw) {
        printf("\nconv2d SAME stride 1, f32, NHWC x [kh,kw,in,out] kernel: ms per call, median "
               "of %d runs\n",
               reps);
        printf("%-28s %7s %8s %8s %8s %8s\n", "shapes", "threads", "fwd", "bwd-in", "bwd-k",
               "total");
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sx_tensor *x = NULL, *k = NULL, *y = NULL, *dy = NULL, *dx = NULL, *dk = NULL;
        int64_t ys[4];
        CHECK(sx_tensor_new(SX_F32, 4, cases[c].x, &x));
        CHECK(sx_tensor_new(SX_F32, 4, cases[c].k, &k));
        CHECK(sx_conv2d_shape("bench_tensor", x, k, &p, ys));
        CHECK(sx_tensor_new(SX_F32, 4, ys, &y));
        CHECK(sx_tensor_new(SX_F32, 4, ys, &dy));
        CHECK(sx_tensor_new(SX_F32, 4, cases[c].x, &dx));
        CHECK(sx_tensor_new(SX_F32, 4, cases[c].k, &dk));
        sx_rng rng;
        sx_rng_seed(&rng, 3);
        CHECK(sx_tensor_rand_normal(x, &rng, 0, 1));
        CHECK(sx_tensor_rand_normal(k, &rng, 0, 0.1));
        CHECK(sx_tensor_rand_normal(dy, &rng, 0, 1));
        size_t ws_bytes = sx_conv2d_workspace(cases[c].x, cases[c].k, &p);
        void *ws = xmalloc(ws_bytes ? ws_bytes : 1);
        for (int ti = 0; ti < n_t; ti++) {
            threads(tlist[ti]);
            series s[4] = {0};
            for (int r = -1; r < reps; r++) {
                double t0 = now();
                CHECK(sx_tensor_conv2d_out(x, k, &p, ws, ws_bytes, y));
                double t1 = now();
                CHECK(sx_tensor_conv2d_backward_input_out(k, dy, &p, ws, ws_bytes, dx));
                double t2 = now();
                CHECK(sx_tensor_conv2d_backward_kernel_out(x, dy, &p, ws, ws_bytes, dk));
                double t3 = now();
                if (r >= 0) {
                    add(&s[0], (t1 - t0) * 1e3);
                    add(&s[1], (t2 - t1) * 1e3);
                    add(&s[2], (t3 - t2) * 1e3);
                    add(&s[3], (t3 - t0) * 1e3);
                }
            }
            static const char *const parts[] = {"fwd", "bwdi", "bwdk", "total"};
            for (int i = 0; i < 4; i++) {
                char key[64];
                snprintf(key, sizeof key, "conv/%s/t%d/strix/%s", cases[c].name, tlist[ti],
                         parts[i]);
                emit(key, &s[i]);
            }
            if (!raw) {
                char shapes[64];
                snprintf(shapes, sizeof shapes, "[%lld,%lld,%lld,%lld]*[%lld,%lld,%lld,%lld]",
                         (long long)cases[c].x[0], (long long)cases[c].x[1],
                         (long long)cases[c].x[2], (long long)cases[c].x[3],
                         (long long)cases[c].k[0], (long long)cases[c].k[1],
                         (long long)cases[c].k[2], (long long)cases[c].k[3]);
                printf("%-28s %7d %8.2f %8.2f %8.2f %8.2f\n", shapes, tlist[ti], median(&s[0]),
                       median(&s[1]), median(&s[2]), median(&s[3]));
            }
        }
        free(ws);
        sx_tensor_free(x);
        sx_tensor_free(k);
        sx_tensor_free(y);
        sx_tensor_free(dy);
        sx_tensor_free(dx);
        sx_tensor_free(dk);
    }
}

/* ---------------------------------------------------------------- main */

static void usage(void)
{
    fprintf(stderr, "usage: bench_tensor [--raw] [--reps N] [--side N] [--rside N] "
                    "[--threads LIST] [sin|fold|repeat|conv]...\n");
    exit(2);
}

static long arg_long(const char *s, long lo, long hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi)
        usage();
    return v;
}

int main(int argc, char **argv)
{
    int reps = 0, n_t = 2, tlist[MAX_THREADS] = {1, 2};
    int64_t side = 64, rside = 32;
    bool want[4] = {false, false, false, false}, any = false;
    static const char *const sections[] = {"sin", "fold", "repeat", "conv"};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--raw") == 0) {
            raw = true;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = (int)arg_long(argv[++i], 1, MAX_REPS);
        } else if (strcmp(argv[i], "--side") == 0 && i + 1 < argc) {
            side = arg_long(argv[++i], 1, 256);
        } else if (strcmp(argv[i], "--rside") == 0 && i + 1 < argc) {
            rside = arg_long(argv[++i], 1, 128);
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            n_t = 0;
            for (char *tok = strtok(argv[++i], ","); tok != NULL; tok = strtok(NULL, ",")) {
                if (n_t == MAX_THREADS)
                    usage();
                tlist[n_t++] = (int)arg_long(tok, 1, 1024);
            }
            if (n_t == 0)
                usage();
        } else {
            int k = 0;
            while (k < 4 && strcmp(argv[i], sections[k]) != 0)
                k++;
            if (k == 4)
                usage();
            want[k] = any = true;
        }
    }
    if (raw) {
        printf("info/strix_default_threads %d\n", sx_threads_get());
        const char *core = getenv("OPENBLAS_CORETYPE");
        printf("info/OPENBLAS_CORETYPE %s\n", core ? core : "(unset)");
    }
    if (!any || want[0])
        bench_sin(reps ? reps : 15);
    if (!any || want[1])
        bench_fold(reps ? reps : 9, side);
    if (!any || want[2])
        bench_repeat(reps ? reps : 9, rside);
    if (!any || want[3])
        bench_conv(reps ? reps : 5, tlist, n_t);
    return 0;
}
