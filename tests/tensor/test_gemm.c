/* strix's GEMM (tensor/gemm.c) against a triple loop in double: every transpose pair, alpha and
 * beta (beta = 0 over NaN, alpha = 0 leaving a and b unread), random sizes and sizes straddling
 * each block size of each kernel set this CPU runs, padded leading dimensions (the padding of a
 * and b holds NaN that must never be read, that of c a sentinel that must not be written), large
 * outputs written with streaming stores, bit-identical results for 1, 2 and 3 threads, calls
 * from concurrent threads, and batched products through sx_tensor_matmul_out. */
#include "testutil.h"

#include "tensor_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Test hooks of gemm.c: sx__gemm_isa selects kernel set 0 (portable), 1 (AVX2), 2 (AVX-512) or 3
 * (NEON) and returns the set in use (unchanged when `want` is not available); sx__gemm_blocks gives
 * a set's blocking {MR, NR, KC, MC, NC} for a dtype. */
extern int sx__gemm_isa(int want);
extern bool sx__gemm_blocks(int isa, sx_dtype dt, int blocks[5]);

#define N_ISA 4

static const sx_dtype dtypes[2] = {SX_F32, SX_F64};
static const double alphas[3] = {1, -0.5, 2};
static const double betas[3] = {0, 1, 0.25};

/* One GEMM problem in plain buffers: a, b with padded rows (NaN in the padding), c with padded
 * rows (a sentinel in the padding), and the c it started from. */
typedef struct prob {
    sx_dtype dt;
    bool ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    double alpha, beta;
    void *a, *b, *c, *c0;
} prob;

static double get(sx_dtype dt, const void *p, int64_t i)
{
    return dt == SX_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static void put(sx_dtype dt, void *p, int64_t i, double v)
{
    if (dt == SX_F32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}

/* Fill rows x cols (row stride ld) with uniform values in [-1, 1) and the padding with `pad`. */
static void fill(sx_rng *rng, sx_dtype dt, void *p, int64_t rows, int64_t cols, int64_t ld,
                 double pad)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < ld; j++)
            put(dt, p, i * ld + j, j < cols ? 2 * sx_rng_uniform(rng) - 1 : pad);
}

static prob prob_new(sx_rng *rng, sx_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     double alpha, double beta, int64_t pad)
{
    prob p = {dt, ta, tb, m, n, k, 0, 0, 0, alpha, beta, NULL, NULL, NULL, NULL};
    size_t es = sx_dtype_size(dt);
    int64_t ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n;
    p.lda = ca + (pad ? (int64_t)sx_rng_below(rng, (uint64_t)pad + 1) : 0);
    p.ldb = cb + (pad ? (int64_t)sx_rng_below(rng, (uint64_t)pad + 1) : 0);
    p.ldc = n + (pad ? (int64_t)sx_rng_below(rng, (uint64_t)pad + 1) : 0);
    p.a = malloc((size_t)(ra * p.lda) * es);
    p.b = malloc((size_t)(rb * p.ldb) * es);
    /* c 64-byte aligned, as strix's large tensors are (the GEMM streams large outputs when
     * their rows are whole cache lines) */
    p.c = aligned_alloc(64, ((size_t)(m * p.ldc) * es + 63) / 64 * 64);
    p.c0 = malloc((size_t)(m * p.ldc) * es);
    cr_assert(p.a && p.b && p.c && p.c0);
    fill(rng, dt, p.a, ra, ca, p.lda, NAN);
    fill(rng, dt, p.b, rb, cb, p.ldb, NAN);
    fill(rng, dt, p.c, m, n, p.ldc, 12345.0);
    if (beta == 0) /* beta = 0 must overwrite NaN */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                put(dt, p.c, i * p.ldc + j, NAN);
    memcpy(p.c0, p.c, (size_t)(m * p.ldc) * es);
    return p;
}

static void prob_free(prob *p)
{
    free(p->a);
    free(p->b);
    free(p->c);
    free(p->c0);
}

static void prob_run(prob *p)
{
    sx__gemm(p->dt, p->ta, p->tb, p->m, p->n, p->k, p->alpha, p->a, p->lda, p->b, p->ldb, p->beta,
             p->c, p->ldc);
}

/* Compare p->c with the triple loop in double. The bound is 2 (k + 4) units of rounding of the
 * dtype times the magnitude |alpha| sum |a b| + |beta c0| (a sum of k products where each
 * multiply and add rounds at most once, and the reference's own rounding in f64). The padding
 * of c must hold its sentinel. */
static void prob_check(const prob *p, const char *what)
{
    const sx_dtype dt = p->dt;
    const double u = dt == SX_F32 ? 0x1p-24 : 0x1p-53;
    for (int64_t i = 0; i < p->m; i++) {
        for (int64_t j = 0; j < p->n; j++) {
            double s = 0, mag = 0;
            for (int64_t l = 0; l < p->k; l++) {
                double x = get(dt, p->a, p->ta ? l * p->lda + i : i * p->lda + l);
                double y = get(dt, p->b, p->tb ? j * p->ldb + l : l * p->ldb + j);
                s += x * y;
                mag += fabs(x * y);
            }
            double old = p->beta == 0 ? 0 : get(dt, p->c0, i * p->ldc + j);
            double want = p->alpha * s + p->beta * old;
            mag = fabs(p->alpha) * mag + fabs(p->beta * old);
            double got = get(dt, p->c, i * p->ldc + j);
            double tol = 2.0 * (double)(p->k + 4) * u * mag + 1e-300;
            if (!(fabs(got - want) <= tol))
                cr_assert_fail(
                    "%s: %s ta=%d tb=%d m=%lld n=%lld k=%lld alpha=%g beta=%g: c[%lld,%lld] "
                    "= %.17g, want %.17g (tol %.3g)",
                    what, dt == SX_F32 ? "f32" : "f64", p->ta, p->tb, (long long)p->m,
                    (long long)p->n, (long long)p->k, p->alpha, p->beta, (long long)i, (long long)j,
                    got, want, tol);
        }
        for (int64_t j = p->n; j < p->ldc; j++)
            cr_assert_eq(get(dt, p->c, i * p->ldc + j), 12345.0, "%s: padding of c written", what);
    }
}

/* One checked GEMM. */
static void check_one(sx_rng *rng, sx_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      double alpha, double beta, int64_t pad, const char *what)
{
    prob p = prob_new(rng, dt, ta, tb, m, n, k, alpha, beta, pad);
    prob_run(&p);
    prob_check(&p, what);
    prob_free(&p);
}

Test(tensor_gemm, isa_hook_selects_only_available_sets)
{
    int best = sx__gemm_isa(-1), blocks[5];
    cr_assert(best >= 0 && best < N_ISA);
    cr_assert(sx__gemm_blocks(best, SX_F32, blocks), "the set in use is in the build");
    for (int isa = 0; isa < N_ISA; isa++) {
        const int before = sx__gemm_isa(-1);
        const int got = sx__gemm_isa(isa);
        const bool here = isa <= best && sx__gemm_blocks(isa, SX_F32, blocks);
        cr_assert_eq(got, here ? isa : before, "set %d", isa);
        cr_assert_eq(sx__gemm_isa(-1), got);
    }
    cr_assert_eq(sx__gemm_isa(N_ISA), sx__gemm_isa(-1), "an unknown set changes nothing");
}

Test(tensor_gemm, random_sizes_every_flag_alpha_beta_and_isa)
{
    sx_rng rng;
    sx_rng_seed(&rng, 11);
    int best = sx__gemm_isa(-1);
    for (int isa = 0; isa <= best; isa++) {
        if (!sx__gemm_blocks(isa, SX_F32, (int[5]){0})) /* not in this build (x86 on ARM) */
            continue;
        cr_assert_eq(sx__gemm_isa(isa), isa);
        for (int d = 0; d < 2; d++)
            for (int t = 0; t < 4; t++)
                for (int ia = 0; ia < 3; ia++)
                    for (int ib = 0; ib < 3; ib++) {
                        int64_t m = 1 + (int64_t)sx_rng_below(&rng, 80);
                        int64_t n = 1 + (int64_t)sx_rng_below(&rng, 80);
                        int64_t k = 1 + (int64_t)sx_rng_below(&rng, 80);
                        check_one(&rng, dtypes[d], t & 1, t & 2, m, n, k, alphas[ia], betas[ib], 3,
                                  "random");
                    }
    }
}

Test(tensor_gemm, tiny_sizes)
{
    sx_rng rng;
    sx_rng_seed(&rng, 12);
    static const int64_t sz[] = {1, 2, 3, 7, 15, 16, 17};
    const int ns = (int)(sizeof sz / sizeof sz[0]);
    for (int d = 0; d < 2; d++)
        for (int t = 0; t < 4; t++)
            for (int x = 0; x < ns; x++)
                for (int y = 0; y < ns; y++)
                    for (int z = 0; z < ns; z += 2)
                        check_one(&rng, dtypes[d], t & 1, t & 2, sz[x], sz[y], sz[z],
                                  alphas[(x + y) % 3], betas[(y + z) % 3], 2, "tiny");
}

/* Sizes one below, at and one above MR, NR, KC, MC and NC of every kernel set: partial and full
 * micro-tiles, several K blocks (summed in order), the K grouping of narrow problems, several
 * NC column blocks. */
Test(tensor_gemm, sizes_straddling_block_sizes)
{
    sx_rng rng;
    sx_rng_seed(&rng, 13);
    int best = sx__gemm_isa(-1);
    for (int isa = 0; isa <= best; isa++) {
        if (!sx__gemm_blocks(isa, SX_F32, (int[5]){0})) /* not in this build (x86 on ARM) */
            continue;
        cr_assert_eq(sx__gemm_isa(isa), isa);
        for (int d = 0; d < 2; d++) {
            int bs[5];
            cr_assert(sx__gemm_blocks(isa, dtypes[d], bs));
            const int64_t mr = bs[0], nr = bs[1], kc = bs[2], mc = bs[3], nc = bs[4];
            const int64_t shapes[][3] = {
                {mr - 1, nr + 1, kc + 1},     {mr, nr, kc},         {mr + 1, nr - 1, kc - 1},
                {mc + 1, 2 * nr + 3, 40},     {mc - 1, nr / 2, 70}, {2 * mr + 1, nc + 1, 9},
                {5, nc - 1, 2 * kc + 1},      {mc, 3, 3 * kc + 7},  {3, nc + nr + 2, 5},
                {mr + 2, 2 * nr, 5 * kc + 3}, {1, 1, 2 * kc + 5},   {mc + mr + 1, 1, 31},
            };
            const int nshape = (int)(sizeof shapes / sizeof shapes[0]);
            for (int s = 0; s < nshape; s++)
                for (int t = 0; t < 4; t++)
                    check_one(&rng, dtypes[d], t & 1, t & 2, shapes[s][0], shapes[s][1],
                              shapes[s][2], alphas[(s + t) % 3], betas[(s + 2 * t) % 3], 4,
                              "edges");
        }
    }
}

/* Outputs over 8 MB written once (beta = 0, k in one K block) go out through streaming
 * stores: rows of whole aligned cache lines, a partial last vector, padding left alone. */
Test(tensor_gemm, large_output_written_once)
{
    sx_rng rng;
    sx_rng_seed(&rng, 18);
    int best = sx__gemm_isa(-1);
    for (int isa = 0; isa <= best; isa++) {
        if (!sx__gemm_blocks(isa, SX_F32, (int[5]){0})) /* not in this build (x86 on ARM) */
            continue;
        cr_assert_eq(sx__gemm_isa(isa), isa);
        for (int d = 0; d < 2; d++) {
            /* 2100 x 1008 (ldc) elements: 8.5 MB in f32; 16 columns of padding per row */
            const int64_t m = d == 0 ? 2100 : 1100, n = 1000, k = 2 + isa;
            prob p = prob_new(&rng, dtypes[d], isa == 1, d == 1, m, n, k, 1.0, 0.0, 0);
            p.ldc = 1008; /* rows of whole cache lines in both dtypes */
            free(p.c);
            free(p.c0);
            size_t bytes = (size_t)(m * p.ldc) * sx_dtype_size(p.dt);
            p.c = aligned_alloc(64, bytes);
            p.c0 = malloc(bytes);
            cr_assert(p.c && p.c0);
            fill(&rng, p.dt, p.c, m, n, p.ldc, 12345.0);
            memcpy(p.c0, p.c, bytes);
            prob_run(&p);
            prob_check(&p, "streamed");
            prob_free(&p);
        }
    }
}

Test(tensor_gemm, alpha_zero_scales_c_without_reading_a_b)
{
    sx_rng rng;
    sx_rng_seed(&rng, 14);
    for (int d = 0; d < 2; d++) {
        for (int ib = 0; ib < 3; ib++) {
            prob p = prob_new(&rng, dtypes[d], false, true, 40, 50, 60, 0.0, betas[ib], 2);
            put(p.dt, p.a, 0, NAN); /* not read when alpha = 0 */
            prob_run(&p);
            for (int64_t i = 0; i < p.m; i++)
                for (int64_t j = 0; j < p.n; j++) {
                    double old = get(p.dt, p.c0, i * p.ldc + j);
                    double want = betas[ib] == 0 ? 0 : betas[ib] * old;
                    cr_assert_eq(get(p.dt, p.c, i * p.ldc + j), want);
                }
            prob_free(&p);
        }
    }
}

/* Run p with nt threads into a fresh copy of its starting c; returns the result (malloc). */
static void *run_threads(prob *p, int nt)
{
    cr_assert_eq(sx_threads_set(nt), SX_OK);
    size_t bytes = (size_t)(p->m * p->ldc) * sx_dtype_size(p->dt);
    memcpy(p->c, p->c0, bytes);
    prob_run(p);
    void *out = malloc(bytes);
    cr_assert(out);
    memcpy(out, p->c, bytes);
    return out;
}

Test(tensor_gemm, same_bits_for_one_two_and_three_threads)
{
    sx_rng rng;
    sx_rng_seed(&rng, 15);
    /* tall, wide and odd shapes, large enough for three threads (over 12 Mflop) */
    static const int64_t shapes[][3] = {
        {700, 60, 150}, {40, 900, 200}, {157, 203, 200}, {99, 131, 500}};
    int best = sx__gemm_isa(-1);
    for (int isa = 0; isa <= best; isa++) {
        if (!sx__gemm_blocks(isa, SX_F32, (int[5]){0})) /* not in this build (x86 on ARM) */
            continue;
        cr_assert_eq(sx__gemm_isa(isa), isa);
        for (int d = 0; d < 2; d++)
            for (int s = 0; s < 4; s++) {
                /* every transpose pair per shape, over the kernel sets and dtypes */
                const int t = (s + d + 2 * isa) % 4;
                prob p = prob_new(&rng, dtypes[d], t & 1, t & 2, shapes[s][0], shapes[s][1],
                                  shapes[s][2], alphas[t % 3], betas[(s + t) % 3], 3);
                size_t bytes = (size_t)(p.m * p.ldc) * sx_dtype_size(p.dt);
                void *r1 = run_threads(&p, 1);
                if (s == d) /* some of them against the reference too */
                    prob_check(&p, "threads");
                void *r2 = run_threads(&p, 2);
                void *r3 = run_threads(&p, 3);
                cr_assert(memcmp(r1, r2, bytes) == 0, "isa %d shape %d flags %d: 1 vs 2 threads",
                          isa, s, t);
                cr_assert(memcmp(r1, r3, bytes) == 0, "isa %d shape %d flags %d: 1 vs 3 threads",
                          isa, s, t);
                free(r1);
                free(r2);
                free(r3);
                prob_free(&p);
            }
    }
}

typedef struct concurrent_call {
    prob *p;
    int threads;
    sx_status st[2];
} concurrent_call;

static void *concurrent_main(void *arg)
{
    concurrent_call *c = arg;
    c->st[0] = sx_threads_set_local(c->threads);
    prob_run(c->p);
    c->st[1] = sx_threads_set_local(0);
    return NULL;
}

/* A short op(a) (one row block: every b panel is packed just before its tiles) with several K
 * blocks, wide (over NC: two panels) and narrow n, edge tiles, every flag, alpha and beta, in every
 * kernel set, against the reference. */
Test(tensor_gemm, short_a_with_several_k_blocks)
{
    sx_rng rng;
    sx_rng_seed(&rng, 31);
    static const int64_t shapes[][3] = {{50, 600, 600}, {7, 45, 1000}, {1, 600, 513}};
    int best = sx__gemm_isa(-1);
    for (int isa = 0; isa <= best; isa++) {
        if (!sx__gemm_blocks(isa, SX_F32, (int[5]){0}))
            continue;
        cr_assert_eq(sx__gemm_isa(isa), isa);
        for (int d = 0; d < 2; d++)
            for (int t = 0; t < 4; t++)
                for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; q++)
                    check_one(&rng, dtypes[d], t & 1, t & 2, shapes[q][0], shapes[q][1],
                              shapes[q][2], q == 1 ? 1.0 : -0.5, q == 2 ? 0.25 : 0.0, 3, "short a");
    }
    sx__gemm_isa(best);
}

/* With beta = 0, alpha scales the finished sum: alpha A B has the bits of A B (alpha = 1)
 * followed by a multiplication by alpha, as the graph's matmul and mul nodes compute it, for an
 * inner size of one K block or several, in every kernel set (edge tiles too: n is not a multiple
 * of any NR). And alpha = beta = 1 over one K block gives P + c rounded once, the bits of the
 * product followed by an addition. */
Test(tensor_gemm, alpha_scales_the_finished_sum_bit_for_bit)
{
    sx_rng rng;
    sx_rng_seed(&rng, 21);
    static const int64_t ks[] = {7, 256, 300, 1000};
    int best = sx__gemm_isa(-1);
    for (int isa = 0; isa <= best; isa++) {
        if (!sx__gemm_blocks(isa, SX_F32, (int[5]){0})) /* not in this build (x86 on ARM) */
            continue;
        cr_assert_eq(sx__gemm_isa(isa), isa);
        for (int d = 0; d < 2; d++)
            for (int t = 0; t < 4; t++)
                for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++) {
                    const sx_dtype dt = dtypes[d];
                    const size_t es = sx_dtype_size(dt);
                    prob p = prob_new(&rng, dt, t & 1, t & 2, 19, 37, ks[q], -0.3, 0, 2);
                    const size_t bytes = (size_t)(p.m * p.ldc) * es;
                    prob_run(&p); /* alpha A B */
                    void *want = malloc(bytes), *sum = malloc(bytes);
                    cr_assert(want && sum);
                    memcpy(sum, p.c0, bytes);
                    sx__gemm(dt, p.ta, p.tb, p.m, p.n, p.k, 1.0, p.a, p.lda, p.b, p.ldb, 0.0, sum,
                             p.ldc); /* A B, then alpha times it */
                    memcpy(want, sum, bytes);
                    for (int64_t i = 0; i < p.m; i++)
                        for (int64_t j = 0; j < p.n; j++) {
                            const int64_t e = i * p.ldc + j;
                            if (dt == SX_F32)
                                ((float *)want)[e] = (float)-0.3 * ((float *)sum)[e];
                            else
                                ((double *)want)[e] = -0.3 * ((double *)sum)[e];
                        }
                    cr_assert(memcmp(p.c, want, bytes) == 0,
                              "isa %d %s flags %d k %lld: alpha A B is not alpha times A B", isa,
                              dt == SX_F32 ? "f32" : "f64", t, (long long)ks[q]);
                    if (sx__gemm_kblocks(p.k) == 1) { /* c + A B, rounded once */
                        fill(&rng, dt, p.c, p.m, p.n, p.ldc, 12345.0);
                        memcpy(want, p.c, bytes);
                        sx__gemm(dt, p.ta, p.tb, p.m, p.n, p.k, 1.0, p.a, p.lda, p.b, p.ldb, 1.0,
                                 p.c, p.ldc);
                        for (int64_t i = 0; i < p.m; i++)
                            for (int64_t j = 0; j < p.n; j++) {
                                const int64_t e = i * p.ldc + j;
                                if (dt == SX_F32)
                                    ((float *)want)[e] += ((float *)sum)[e];
                                else
                                    ((double *)want)[e] += ((double *)sum)[e];
                            }
                        cr_assert(memcmp(p.c, want, bytes) == 0,
                                  "isa %d %s flags %d k %lld: c + A B is not A B then + c", isa,
                                  dt == SX_F32 ? "f32" : "f64", t, (long long)ks[q]);
                    }
                    free(want);
                    free(sum);
                    prob_free(&p);
                }
    }
}

/* Several threads calling the GEMM at once (as the dependency engine does), each with a local
 * thread count: each thread's packing buffers are its own, and each result matches the one
 * computed alone. */
Test(tensor_gemm, concurrent_calls_from_several_threads)
{
    sx_rng rng;
    sx_rng_seed(&rng, 16);
    enum { NP = 4 };
    prob ps[NP];
    void *alone[NP];
    for (int i = 0; i < NP; i++) {
        ps[i] = prob_new(&rng, dtypes[i % 2], i & 1, i & 2, 150 + 13 * i, 170 - 11 * i, 300, 1.0,
                         0.0, 1);
        alone[i] = run_threads(&ps[i], 1 + i % 2);
        memcpy(ps[i].c, ps[i].c0, (size_t)(ps[i].m * ps[i].ldc) * sx_dtype_size(ps[i].dt));
    }
    cr_assert_eq(sx_threads_set(2), SX_OK);
    concurrent_call calls[NP]; /* checked after the join: no assertion inside a thread */
    pthread_t th[NP];
    for (int i = 0; i < NP; i++) {
        calls[i] = (concurrent_call){&ps[i], 1 + i % 2, {SX_OK, SX_OK}};
        cr_assert_eq(pthread_create(&th[i], NULL, concurrent_main, &calls[i]), 0);
    }
    for (int i = 0; i < NP; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < NP; i++) {
        const sx_status *st = calls[i].st;
        cr_assert(st[0] == SX_OK && st[1] == SX_OK);
        size_t bytes = (size_t)(ps[i].m * ps[i].ldc) * sx_dtype_size(ps[i].dt);
        cr_assert(memcmp(alone[i], ps[i].c, bytes) == 0, "problem %d", i);
        free(alone[i]);
        prob_free(&ps[i]);
    }
}

/* Batched products through the public matmul: a batch folded into one GEMM, a transposed batch
 * against a broadcast matrix, compared with the reference per batch entry. */
Test(tensor_gemm, batched_matmul_goes_through_gemm)
{
    sx_rng rng;
    sx_rng_seed(&rng, 17);
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = dtypes[d];
        const int64_t sa[3] = {3, 37, 45}, sb[2] = {45, 29}, so[3] = {3, 37, 29};
        sx_tensor *a = tu_rand(&rng, dt, 3, sa, -1, 1), *b = tu_rand(&rng, dt, 2, sb, -1, 1);
        sx_tensor *o = tu_rand(&rng, dt, 3, so, -1, 1), *o0 = NULL;
        cr_assert_eq(sx_tensor_clone(o, &o0), SX_OK);
        cr_assert_eq(sx_tensor_matmul_out(a, b, false, false, -0.5, 0.25, o), SX_OK, "%s",
                     sx_last_error());
        for (int64_t bi = 0; bi < 3; bi++) {
            prob p = {dt, false, false, 37, 29, 45, 45, 29, 29, -0.5, 0.25, NULL, NULL, NULL, NULL};
            size_t es = sx_dtype_size(dt);
            p.a = (char *)a->data + (size_t)(bi * 37 * 45) * es;
            p.b = b->data;
            p.c = (char *)o->data + (size_t)(bi * 37 * 29) * es;
            p.c0 = (char *)o0->data + (size_t)(bi * 37 * 29) * es;
            prob_check(&p, "matmul fold");
        }
        /* (2,45,37)^T @ (1,45,29)-broadcast: one GEMM per batch entry */
        const int64_t sa2[3] = {2, 45, 37}, sb2[3] = {1, 45, 29}, so2[3] = {2, 37, 29};
        sx_tensor *a2 = tu_rand(&rng, dt, 3, sa2, -1, 1), *b2 = tu_rand(&rng, dt, 3, sb2, -1, 1);
        sx_tensor *o2 = tu_rand(&rng, dt, 3, so2, -1, 1);
        cr_assert_eq(sx_tensor_fill(o2, NAN), SX_OK);
        cr_assert_eq(sx_tensor_matmul_out(a2, b2, true, false, 2.0, 0.0, o2), SX_OK, "%s",
                     sx_last_error());
        for (int64_t bi = 0; bi < 2; bi++) {
            size_t es = sx_dtype_size(dt);
            prob p = {dt, true, false, 37, 29, 45, 37, 29, 29, 2.0, 0.0, NULL, NULL, NULL, NULL};
            p.a = (char *)a2->data + (size_t)(bi * 45 * 37) * es;
            p.b = b2->data;
            p.c = (char *)o2->data + (size_t)(bi * 37 * 29) * es;
            p.c0 = p.c; /* not read: beta = 0 */
            prob_check(&p, "matmul batch");
        }
        sx_tensor_free(a);
        sx_tensor_free(b);
        sx_tensor_free(o);
        sx_tensor_free(o0);
        sx_tensor_free(a2);
        sx_tensor_free(b2);
        sx_tensor_free(o2);
    }
}
