/* test_par.c: the parallel runtime (tensor/par.c): every task runs exactly once, nested loops and
 * loops from several threads at once finish, and kernels give the same bits for 1..4 threads. */
#include "par_impl.h"
#include "sx_engine.h"
#include "testutil.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- every task exactly once */

#define N_COUNT 5000

typedef struct counts {
    atomic_int hits[N_COUNT];
    atomic_int max_threads_seen; /* sx__par_threads() inside a task */
} counts;

static void count_task(void *ctx, int64_t t)
{
    counts *c = ctx;
    atomic_fetch_add(&c->hits[t], 1);
    int inner = sx__par_threads();
    int old = atomic_load(&c->max_threads_seen);
    while (inner > old && !atomic_compare_exchange_weak(&c->max_threads_seen, &old, inner)) {
    }
}

Test(tensor_par, every_task_runs_once)
{
    static counts c;
    const int64_t sizes[] = {1, 2, 3, 7, 64, 1000, N_COUNT};
    for (int threads = 1; threads <= 4; threads++) {
        cr_assert_eq(sx_threads_set(threads), SX_OK);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            for (int rep = 0; rep < 20; rep++) {
                memset(&c, 0, sizeof c);
                sx__par_for(sizes[s], count_task, &c);
                for (int64_t t = 0; t < N_COUNT; t++)
                    cr_assert_eq(atomic_load(&c.hits[t]), t < sizes[s] ? 1 : 0,
                                 "threads %d, %lld tasks: task %lld ran %d times", threads,
                                 (long long)sizes[s], (long long)t, atomic_load(&c.hits[t]));
                /* nested loops are serial inside a loop that runs on several threads */
                const int want = threads > 1 && sizes[s] > 1 ? 1 : threads;
                cr_assert_eq(atomic_load(&c.max_threads_seen), want, "%d threads, %lld tasks",
                             threads, (long long)sizes[s]);
            }
        }
        cr_assert_leq(sx__par_workers(), threads - 1, "workers start lazily, as needed");
    }
    cr_assert_eq(sx_threads_set(0), SX_OK);
}

typedef struct cover {
    atomic_int hits[N_COUNT];
    int64_t grain;
    atomic_int short_ranges; /* ranges below the grain (only the last may be) */
    _Atomic int64_t n;
} cover;

static void cover_range(void *ctx, int64_t lo, int64_t hi)
{
    cover *c = ctx;
    if (hi - lo < c->grain && hi != atomic_load(&c->n))
        atomic_fetch_add(&c->short_ranges, 1);
    for (int64_t i = lo; i < hi; i++)
        atomic_fetch_add(&c->hits[i], 1);
}

Test(tensor_par, ranges_cover_every_item_once)
{
    static cover c;
    const int64_t ns[] = {0, 1, 5, 99, 100, 101, 1000, 4999, N_COUNT};
    const int64_t grains[] = {1, 7, 100, 10000};
    for (int threads = 1; threads <= 4; threads++) {
        cr_assert_eq(sx_threads_set(threads), SX_OK);
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) {
                memset(&c, 0, sizeof c);
                c.grain = grains[g];
                atomic_store(&c.n, ns[i]);
                sx__par_range(ns[i], grains[g], cover_range, &c);
                for (int64_t k = 0; k < N_COUNT; k++)
                    cr_assert_eq(atomic_load(&c.hits[k]), k < ns[i] ? 1 : 0,
                                 "n %lld grain %lld: item %lld", (long long)ns[i],
                                 (long long)grains[g], (long long)k);
                cr_assert_eq(atomic_load(&c.short_ranges), 0);
            }
    }
    cr_assert_eq(sx_threads_set(0), SX_OK);
}

typedef struct slots {
    int threads;
    _Atomic(pthread_t *) owner[8];
    atomic_int bad;
    atomic_int hits[N_COUNT];
} slots;

static _Thread_local pthread_t me;

static void slot_task(void *ctx, int64_t t)
{
    slots *s = ctx;
    const int k = sx__par_slot();
    me = pthread_self();
    if (k < 0 || k >= s->threads) {
        atomic_fetch_add(&s->bad, 1);
        return;
    }
    pthread_t *expected = NULL;
    /* the first thread to use slot k owns it for the whole loop */
    if (!atomic_compare_exchange_strong(&s->owner[k], &expected, &me) && expected != &me)
        atomic_fetch_add(&s->bad, 1);
    atomic_fetch_add(&s->hits[t], 1);
}

/* Each thread of a loop has its own slot index below the thread count (per-thread scratch). */
Test(tensor_par, slots_are_per_thread_and_below_the_count)
{
    static slots s;
    for (int threads = 1; threads <= 4; threads++) {
        cr_assert_eq(sx_threads_set(4), SX_OK);
        for (int rep = 0; rep < 50; rep++) {
            memset(&s, 0, sizeof s);
            s.threads = threads;
            sx__par_for_upto(threads, 1000, slot_task, &s);
            cr_assert_eq(atomic_load(&s.bad), 0, "threads %d", threads);
            for (int t = 0; t < 1000; t++)
                cr_assert_eq(atomic_load(&s.hits[t]), 1);
        }
    }
    cr_assert_eq(sx_threads_set(0), SX_OK);
}

/* With two threads, a loop of at most 24 tasks gives the caller a prefix of them and the worker
 * the rest (the caller claims the lowest task left, the worker the highest), so that consecutive
 * loops over the same rows keep each part on one core; longer loops still run every task once. */
typedef struct sides {
    int64_t n;
    atomic_int slot_of[64];
    atomic_int hits[64];
    atomic_int worker_started;
} sides;

static void side_task(void *ctx, int64_t t)
{
    sides *s = ctx;
    atomic_store(&s->slot_of[t], sx__par_slot());
    atomic_fetch_add(&s->hits[t], 1);
    const double t0 = sx_seconds();
    if (t == 0) { /* the caller's first task: until the worker took one (at most 20 ms) */
        while (atomic_load(&s->worker_started) == 0 && sx_seconds() - t0 < 20e-3) {
        }
        return;
    }
    if (sx__par_slot() != 0)
        atomic_store(&s->worker_started, 1);
    while (sx_seconds() - t0 < 50e-6) { /* long enough for the other thread to claim */
    }
}

Test(tensor_par, two_threads_split_short_loops_into_prefix_and_suffix)
{
    static sides s;
    cr_assert_eq(sx_threads_set(2), SX_OK);
    const int64_t ns[] = {2, 3, 8, 16, 24, 25, 64};
    int joined = 0;
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (int rep = 0; rep < 20; rep++) {
            memset(&s, 0, sizeof s);
            s.n = ns[i];
            sx__par_for(s.n, side_task, &s);
            int64_t first_worker = s.n;
            for (int64_t t = 0; t < s.n; t++) {
                cr_assert_eq(atomic_load(&s.hits[t]), 1, "%lld tasks: task %lld", (long long)s.n,
                             (long long)t);
                if (atomic_load(&s.slot_of[t]) != 0 && first_worker == s.n)
                    first_worker = t;
                if (s.n <= 24 && t > first_worker)
                    cr_assert_neq(atomic_load(&s.slot_of[t]), 0,
                                  "%lld tasks: the caller ran task %lld after the worker's %lld",
                                  (long long)s.n, (long long)t, (long long)first_worker);
            }
            joined += first_worker < s.n;
        }
    cr_log_info("the worker took part in %d of %d loops", joined, 20 * 7);
    cr_assert_eq(sx_threads_set(0), SX_OK);
}

static void nothing_task(void *ctx, int64_t t)
{
    (void)ctx, (void)t;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, us % 1000000 * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* In 20 gaps of four SX__PAR_SPIN_NS between loops: how often the worker was found asleep. */
static int sleeps_in_gaps(void)
{
    int asleep = 0;
    for (int rep = 0; rep < 20; rep++) {
        sx__par_for(64, nothing_task, NULL);
        sleep_us(SX__PAR_SPIN_NS / 1000 * 4);
        asleep += sx__par_sleeping();
    }
    return asleep;
}

/* Holds nest: the longer spin lasts until the last release. */
Test(tensor_par, holds_nest_and_lengthen_the_spin)
{
    cr_assert_eq(sx__par_spin_ns(), SX__PAR_SPIN_NS);
    sx__par_hold();
    sx__par_hold();
    cr_assert_eq(sx__par_spin_ns(), SX__PAR_HOLD_SPIN_NS);
    sx__par_release();
    cr_assert_eq(sx__par_spin_ns(), SX__PAR_HOLD_SPIN_NS);
    sx__par_release();
    cr_assert_eq(sx__par_spin_ns(), SX__PAR_SPIN_NS);
}

/* While the pool is held, a worker spins through gaps far longer than SX__PAR_SPIN_NS (but
 * shorter than SX__PAR_HOLD_SPIN_NS); released, it sleeps in them again. The spin is measured
 * in wall time, so a loaded machine that deschedules the worker for longer than a spin can put
 * it to sleep while held: the comparison is tried up to ten times. */
Test(tensor_par, a_held_pool_keeps_its_worker_awake_between_loops)
{
    cr_assert_eq(sx_threads_set(2), SX_OK);
    sx__par_for(64, nothing_task, NULL); /* starts the worker */
    cr_assert_eq(sx__par_workers(), 1);
    int before = 0, held = 0, after = 0;
    bool ok = false;
    for (int attempt = 0; attempt < 10 && !ok; attempt++) {
        before = sleeps_in_gaps();
        sx__par_hold();
        held = sleeps_in_gaps();
        sx__par_release();
        after = sleeps_in_gaps();
        ok = held * 2 < before && held * 2 < after;
        cr_log_info("attempt %d: asleep in 20 gaps: %d, held %d, released %d", attempt, before,
                    held, after);
    }
    cr_assert(ok, "held: asleep in %d of 20 gaps; not held: %d before, %d after", held, before,
              after);
    cr_assert_eq(sx_threads_set(0), SX_OK);
}

/* Bad arguments are no-ops: no tasks, a negative count, a grain below one. */
Test(tensor_par, empty_and_bad_sizes_do_nothing)
{
    static counts c;
    memset(&c, 0, sizeof c);
    sx__par_for(0, count_task, &c);
    sx__par_for(-5, count_task, &c);
    for (int64_t t = 0; t < N_COUNT; t++)
        cr_assert_eq(atomic_load(&c.hits[t]), 0);
    static cover cv;
    memset(&cv, 0, sizeof cv);
    sx__par_range(-1, 10, cover_range, &cv);
    sx__par_range(0, 10, cover_range, &cv);
    atomic_store(&cv.n, 50);
    sx__par_range(50, 0, cover_range, &cv); /* grain 0 counts as 1 */
    for (int64_t k = 0; k < N_COUNT; k++)
        cr_assert_eq(atomic_load(&cv.hits[k]), k < 50 ? 1 : 0);
    cr_assert_eq(sx_threads_set(-1), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "sx_threads_set") != NULL);
    cr_assert_eq(sx_threads_set(1025), SX_E_ARG);
    cr_assert_eq(sx_threads_set_local(-2), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "sx_threads_set_local") != NULL);
}

/* ---------------------------------------------------------------- the kernels used below */

#define NK 5 /* results compared bit for bit */

static sx_tensor *kernels_run(void)
{
    sx_rng rng;
    sx_rng_seed(&rng, 7);
    const int64_t xs[] = {300, 257}, as[] = {260, 200}, bs[] = {200, 330}; /* 34 Mflop */
    const int64_t cx[] = {4, 20, 20, 8}, ck[] = {3, 3, 8, 16};
    sx_tensor *x = tu_rand(&rng, SX_F32, 2, xs, -3, 3);
    sx_tensor *a = tu_rand(&rng, SX_F32, 2, as, -1, 1);
    sx_tensor *b = tu_rand(&rng, SX_F32, 2, bs, -1, 1);
    sx_tensor *img = tu_rand(&rng, SX_F32, 4, cx, -1, 1);
    sx_tensor *ker = tu_rand(&rng, SX_F32, 4, ck, -1, 1);
    sx_tensor *out = NULL;
    const int64_t total = 300 * 257 + 257 + 1 + 260 * 330 + 4 * 20 * 20 * 16;
    cr_assert_eq(sx_tensor_new(SX_F32, 1, &total, &out), SX_OK);
    float *o = SX_F32P(out);
    sx_tensor m = sx_tensor_view(SX_F32, 2, xs, o);
    cr_assert_eq(sx_tensor_map_out(SX_MAP_EXP, 0, x, &m), SX_OK);
    o += 300 * 257;
    sx_tensor f = sx_tensor_view(SX_F32, 1, &xs[1], o);
    cr_assert_eq(sx_tensor_fold_out(SX_FOLD_SUM, x, SX_AXIS(0), false, &f), SX_OK);
    o += 257;
    sx_tensor s = sx_tensor_view(SX_F32, 0, NULL, o);
    cr_assert_eq(sx_tensor_fold_out(SX_FOLD_SUM, x, SX_AXES_ALL, false, &s), SX_OK);
    o += 1;
    const int64_t ms[] = {260, 330};
    sx_tensor mm = sx_tensor_view(SX_F32, 2, ms, o);
    cr_assert_eq(sx_tensor_matmul_out(a, b, false, false, 1, 0, &mm), SX_OK);
    o += 260 * 330;
    const int64_t ys[] = {4, 20, 20, 16};
    sx_tensor y = sx_tensor_view(SX_F32, 4, ys, o);
    sx_conv2d_params p = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    size_t wsb = sx_conv2d_workspace(cx, ck, &p);
    void *ws = malloc(wsb);
    cr_assert_eq(sx_tensor_conv2d_out(img, ker, &p, ws, wsb, &y), SX_OK);
    free(ws);
    sx_tensor_free(x);
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_tensor_free(img);
    sx_tensor_free(ker);
    return out;
}

static void assert_same_bits(const sx_tensor *a, const sx_tensor *b, const char *what)
{
    cr_assert_eq(a->size, b->size);
    cr_assert(memcmp(a->data, b->data, (size_t)a->size * sizeof(float)) == 0, "%s: different bits",
              what);
}

Test(tensor_par, same_bits_for_one_to_four_threads)
{
    cr_assert_eq(sx_threads_set(1), SX_OK);
    sx_tensor *ref = kernels_run();
    for (int threads = 2; threads <= 4; threads++) {
        cr_assert_eq(sx_threads_set(threads), SX_OK);
        for (int rep = 0; rep < 3; rep++) {
            sx_tensor *r = kernels_run();
            assert_same_bits(ref, r, "threads 2..4");
            sx_tensor_free(r);
        }
    }
    cr_assert_eq(sx_threads_set(0), SX_OK);
    sx_tensor_free(ref);
}

/* ---------------------------------------------------------------- nested loops */

typedef struct nested {
    sx_tensor *ref;
    atomic_int bad;
    counts inner[4];
} nested;

static void nested_task(void *ctx, int64_t t)
{
    nested *n = ctx;
    sx_tensor *r = kernels_run(); /* kernels inside a task: their loops run serially */
    if (memcmp(r->data, n->ref->data, (size_t)r->size * sizeof(float)) != 0)
        atomic_fetch_add(&n->bad, 1);
    sx_tensor_free(r);
    sx__par_for(100, count_task, &n->inner[t]);
}

Test(tensor_par, nested_loops_finish_with_same_bits)
{
    static nested n;
    memset(&n, 0, sizeof n);
    cr_assert_eq(sx_threads_set(1), SX_OK);
    n.ref = kernels_run();
    cr_assert_eq(sx_threads_set(3), SX_OK);
    sx__par_for(4, nested_task, &n);
    cr_assert_eq(atomic_load(&n.bad), 0);
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < N_COUNT; i++)
            cr_assert_eq(atomic_load(&n.inner[t].hits[i]), i < 100 ? 1 : 0);
    cr_assert_eq(sx_threads_set(0), SX_OK);
    sx_tensor_free(n.ref);
}

/* ---------------------------------------------------------------- several callers at once */

typedef struct caller {
    const sx_tensor *ref;
    int threads;
    int bad;
} caller;

static void *caller_main(void *arg)
{
    caller *c = arg;
    if (sx_threads_set_local(c->threads) != SX_OK)
        c->bad++;
    for (int rep = 0; rep < 3; rep++) {
        sx_tensor *r = kernels_run();
        if (memcmp(r->data, c->ref->data, (size_t)r->size * sizeof(float)) != 0)
            c->bad++;
        sx_tensor_free(r);
    }
    return NULL;
}

Test(tensor_par, threads_calling_at_once_get_same_bits)
{
    cr_assert_eq(sx_threads_set(1), SX_OK);
    sx_tensor *ref = kernels_run();
    cr_assert_eq(sx_threads_set(2), SX_OK);
    pthread_t th[4];
    caller c[4];
    for (int i = 0; i < 4; i++) {
        c[i] = (caller){ref, 1 + i % 3, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, caller_main, &c[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(c[i].bad, 0, "caller %d", i);
    }
    cr_assert_eq(sx_threads_set(0), SX_OK);
    sx_tensor_free(ref);
}

typedef struct engine_op {
    const sx_tensor *ref;
    atomic_int *bad;
} engine_op;

static sx_status engine_kernels(void *arg)
{
    engine_op *op = arg;
    sx_tensor *r = kernels_run();
    if (memcmp(r->data, op->ref->data, (size_t)r->size * sizeof(float)) != 0)
        atomic_fetch_add(op->bad, 1);
    sx_tensor_free(r);
    return SX_OK;
}

/* Engine workers call kernels at once (each with one kernel thread), and WIDE operations use
 * the pool alone; all finish with the same bits. */
Test(tensor_par, engine_workers_at_once)
{
    cr_assert_eq(sx_threads_set(1), SX_OK);
    sx_tensor *ref = kernels_run();
    cr_assert_eq(sx_threads_set(3), SX_OK);
    sx_engine *e = NULL;
    cr_assert_eq(sx_engine_new(3, &e), SX_OK);
    atomic_int bad = 0;
    engine_op ops[8];
    sx_var v[8];
    for (int i = 0; i < 8; i++) {
        ops[i] = (engine_op){ref, &bad};
        cr_assert_eq(sx_engine_var_new(e, &v[i]), SX_OK);
        cr_assert_eq(sx_engine_push(e, engine_kernels, &ops[i], NULL, 0, &v[i], 1,
                                    i % 4 == 3 ? SX_ENGINE_WIDE : 0),
                     SX_OK);
    }
    cr_assert_eq(sx_engine_wait_all(e), SX_OK);
    sx_engine_free(e);
    cr_assert_eq(atomic_load(&bad), 0);
    cr_assert_eq(sx_threads_set(0), SX_OK);
    sx_tensor_free(ref);
}
