/* par.c: the thread pool behind every parallel loop of strix (par_impl.h).
 *
 * One word holds the current loop: its epoch (39 bits, +1 per loop), a mode bit and 24 bits of
 * tasks not yet claimed: for a loop of at most 24 tasks a mask of them (the caller claims the
 * lowest, workers the highest: with two threads the caller runs a prefix of the tasks and the
 * worker the rest, so that consecutive loops over the same rows keep them on the core that
 * touched them last), else their number (claimed in order). Caller and workers claim a task by a
 * compare-and-swap on the word of the same epoch, so a worker that wakes late can never take a
 * task of a newer loop it did not check in for; the loop's function, context and size are read
 * only after a claim succeeded, when the loop cannot end before that task does. A completion
 * counter tells the caller when every task has run; it waits only for tasks that were claimed. */
#define _GNU_SOURCE /* pthread_sigmask, clock_gettime */
#include "par_impl.h"
#include "sx_tensor.h"

#include <assert.h>
#include <pthread.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#define COUNT_BITS 24
#define COUNT_MASK ((UINT64_C(1) << COUNT_BITS) - 1)
#define MASK_MODE (UINT64_C(1) << COUNT_BITS) /* the low bits are a mask of unclaimed tasks */
#define EPOCH_SHIFT (COUNT_BITS + 1)
#define EPOCH_MASK ((UINT64_C(1) << (64 - EPOCH_SHIFT)) - 1)

typedef struct worker {
    alignas(64) pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int sleeping; /* 1 while the worker waits (or is about to wait) on cv */
    int index;
    uint64_t seen; /* the epoch the worker has last looked at (read at its start only) */
} worker;

static struct {
    atomic_flag busy;      /* held by the thread whose loop uses the pool */
    _Atomic uint64_t word; /* epoch << EPOCH_SHIFT | mode | tasks not yet claimed */
    atomic_int seats;      /* workers 0 .. seats-1 may join the current loop */
    _Atomic int64_t done;  /* tasks of the current loop that have run */
    atomic_int waiting;    /* 1 while the caller sleeps on cv for `done` */
    sx__par_task_fn fn;    /* the current loop; written by the owner of `busy` before the */
    void *ctx;             /* epoch is published, read by a worker after a successful claim */
    int64_t n;
    uint64_t epoch; /* the owner's copy */
    int n_workers;  /* started; changed by the owner of `busy` only */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    worker workers[SX__PAR_MAX_WORKERS];
} pool = {
    .busy = ATOMIC_FLAG_INIT, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static atomic_int holds; /* sx__par_hold() calls not yet released */

static _Thread_local bool in_task; /* this thread runs a task of a parallel loop (or is a worker) */
static _Thread_local int slot;     /* sx__par_slot() */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("pause");
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

double sx_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Claim a task of the loop of `epoch`: its index, or -1 when none is left (or a newer loop has
 * started). A mask: the lowest unclaimed task (the caller) or the highest (high: workers); a
 * count: tasks in order 0, 1, ..., n-1. */
static int64_t claim(uint64_t epoch, bool high)
{
    uint64_t w = atomic_load_explicit(&pool.word, memory_order_acquire);
    while ((w >> EPOCH_SHIFT) == epoch && (w & COUNT_MASK) != 0) {
        const uint64_t left = w & COUNT_MASK;
        int bit = 0;
        if (w & MASK_MODE)
            bit = high ? 63 - __builtin_clzll(left) : __builtin_ctzll(left);
        const uint64_t next = w & MASK_MODE ? w & ~(UINT64_C(1) << bit) : w - 1;
        if (atomic_compare_exchange_weak_explicit(&pool.word, &w, next, memory_order_acq_rel,
                                                  memory_order_acquire))
            return w & MASK_MODE ? bit : pool.n - (int64_t)left;
    }
    return -1;
}

/* Run tasks of the loop of `epoch` until none is left to claim (the caller: lowest first);
 * return how many ran. */
static int64_t run_tasks(uint64_t epoch)
{
    int64_t ran = 0, t;
    while ((t = claim(epoch, false)) >= 0) {
        pool.fn(pool.ctx, t);
        ran++;
    }
    return ran;
}

/* A worker: wait for a new epoch (spin, then sleep), join the loop if seated, repeat. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    uint64_t seen = w->seen;
    in_task = true; /* loops inside tasks run serially */
    const int my_slot = w->index + 1;
    for (;;) {
        uint64_t word = atomic_load_explicit(&pool.word, memory_order_acquire);
        if ((word >> EPOCH_SHIFT) == seen) {
            const int64_t t0 = now_ns();
            for (int i = 1; (word >> EPOCH_SHIFT) == seen; i++) {
                cpu_relax();
                word = atomic_load_explicit(&pool.word, memory_order_acquire);
                if ((i & 63) == 0 && now_ns() - t0 > sx__par_spin_ns())
                    break;
            }
        }
        if ((word >> EPOCH_SHIFT) == seen) {
            pthread_mutex_lock(&w->mu);
            atomic_store(&w->sleeping, 1);
            while (((word = atomic_load(&pool.word)) >> EPOCH_SHIFT) == seen)
                pthread_cond_wait(&w->cv, &w->mu);
            atomic_store(&w->sleeping, 0);
            pthread_mutex_unlock(&w->mu);
        }
        seen = word >> EPOCH_SHIFT;
        if (w->index >= atomic_load_explicit(&pool.seats, memory_order_relaxed))
            continue;
        int64_t t;
        while ((t = claim(seen, true)) >= 0) {
            /* the loop cannot end before this task does: its fields are stable */
            const int64_t n = pool.n;
            slot = my_slot;
            pool.fn(pool.ctx, t);
            if (atomic_fetch_add(&pool.done, 1) + 1 == n && atomic_load(&pool.waiting)) {
                pthread_mutex_lock(&pool.mu);
                pthread_cond_signal(&pool.cv);
                pthread_mutex_unlock(&pool.mu);
            }
        }
    }
    return NULL;
}

/* In a child after fork() the workers are gone: start again from none. */
static void after_fork_child(void)
{
    pool.n_workers = 0;
    atomic_flag_clear(&pool.busy);
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.cv, NULL);
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void register_fork(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
}

/* Start workers until there are `want` (owner of `busy` only); return how many there are, at
 * most `want` (fewer if a thread cannot be started: the loop then uses fewer). Workers block
 * every signal, which go to the program's own threads. */
static int ensure_workers(int want)
{
    if (want > SX__PAR_MAX_WORKERS)
        want = SX__PAR_MAX_WORKERS;
    if (pool.n_workers < want) {
        pthread_once(&fork_once, register_fork);
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        while (pool.n_workers < want) {
            worker *w = &pool.workers[pool.n_workers];
            w->index = pool.n_workers;
            w->seen = pool.epoch;
            atomic_store(&w->sleeping, 0);
            if (pthread_mutex_init(&w->mu, NULL) != 0)
                break;
            if (pthread_cond_init(&w->cv, NULL) != 0) {
                pthread_mutex_destroy(&w->mu);
                break;
            }
            pthread_attr_t attr;
            bool ok = pthread_attr_init(&attr) == 0;
            if (ok) {
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                ok = pthread_create(&w->thread, &attr, worker_main, w) == 0;
                pthread_attr_destroy(&attr);
            }
            if (!ok) {
                pthread_cond_destroy(&w->cv);
                pthread_mutex_destroy(&w->mu);
                break;
            }
            pool.n_workers++;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    return pool.n_workers < want ? pool.n_workers : want;
}

void sx__par_hold(void)
{
    atomic_fetch_add_explicit(&holds, 1, memory_order_relaxed);
}

void sx__par_release(void)
{
    atomic_fetch_sub_explicit(&holds, 1, memory_order_relaxed);
}

int64_t sx__par_spin_ns(void)
{
    return atomic_load_explicit(&holds, memory_order_relaxed) > 0 ? SX__PAR_HOLD_SPIN_NS
                                                                  : SX__PAR_SPIN_NS;
}

int sx__par_threads(void)
{
    return in_task ? 1 : sx_threads_get();
}

int sx__par_workers(void)
{
    bool mine = !atomic_flag_test_and_set_explicit(&pool.busy, memory_order_acquire);
    int n = pool.n_workers;
    if (mine)
        atomic_flag_clear_explicit(&pool.busy, memory_order_release);
    return mine ? n : -1;
}

int sx__par_sleeping(void)
{
    int n = 0;
    for (int i = 0; i < SX__PAR_MAX_WORKERS; i++)
        n += atomic_load(&pool.workers[i].sleeping);
    return n;
}

int sx__par_slot(void)
{
    return slot;
}

void sx__par_for(int64_t n_tasks, sx__par_task_fn fn, void *ctx)
{
    sx__par_for_upto(SX__PAR_MAX_WORKERS + 1, n_tasks, fn, ctx);
}

void sx__par_for_upto(int max_threads, int64_t n_tasks, sx__par_task_fn fn, void *ctx)
{
    if (n_tasks <= 0)
        return;
    assert(fn != NULL && n_tasks <= SX__PAR_MAX_TASKS);
    int64_t t = n_tasks <= SX__PAR_MAX_TASKS ? sx__par_threads() : 1; /* the count's 24 bits */
    if (t > max_threads)
        t = max_threads;
    if (t > n_tasks)
        t = n_tasks;
    int seats = 0;
    if (t > 1 && !atomic_flag_test_and_set_explicit(&pool.busy, memory_order_acquire)) {
        seats = ensure_workers((int)t - 1);
        if (seats == 0)
            atomic_flag_clear_explicit(&pool.busy, memory_order_release);
    }
    if (seats == 0) { /* one thread, inside a task, or the pool is someone else's */
        const int outer = slot;
        slot = 0;
        for (int64_t i = 0; i < n_tasks; i++)
            fn(ctx, i);
        slot = outer;
        return;
    }

    /* publish the loop, then wake the seated workers that sleep */
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n_tasks;
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.seats, seats, memory_order_relaxed);
    const uint64_t epoch = pool.epoch = (pool.epoch + 1) & EPOCH_MASK;
    const uint64_t left =
        n_tasks <= COUNT_BITS ? MASK_MODE | ((UINT64_C(1) << n_tasks) - 1) : (uint64_t)n_tasks;
    atomic_store(&pool.word, epoch << EPOCH_SHIFT | left);
    for (int i = 0; i < seats; i++) {
        worker *w = &pool.workers[i];
        if (atomic_load(&w->sleeping)) {
            pthread_mutex_lock(&w->mu);
            pthread_cond_signal(&w->cv);
            pthread_mutex_unlock(&w->mu);
        }
    }

    /* take part, then wait for the tasks that workers claimed: spin briefly, then sleep */
    const int outer = slot;
    in_task = true;
    slot = 0;
    const int64_t mine = run_tasks(epoch);
    in_task = false;
    slot = outer;
    if (atomic_fetch_add(&pool.done, mine) + mine != n_tasks) {
        const int64_t t0 = now_ns();
        for (int i = 1; atomic_load_explicit(&pool.done, memory_order_acquire) != n_tasks; i++) {
            cpu_relax();
            if ((i & 63) == 0 && now_ns() - t0 > SX__PAR_SPIN_NS) {
                pthread_mutex_lock(&pool.mu);
                atomic_store(&pool.waiting, 1);
                while (atomic_load(&pool.done) != n_tasks)
                    pthread_cond_wait(&pool.cv, &pool.mu);
                atomic_store(&pool.waiting, 0);
                pthread_mutex_unlock(&pool.mu);
                break;
            }
        }
    }
    atomic_flag_clear_explicit(&pool.busy, memory_order_release);
}

typedef struct range_ctx {
    sx__par_range_fn fn;
    void *ctx;
    int64_t n, chunk;
} range_ctx;

static void range_task(void *c, int64_t t)
{
    const range_ctx *r = c;
    const int64_t lo = t * r->chunk, hi = lo + r->chunk < r->n ? lo + r->chunk : r->n;
    r->fn(r->ctx, lo, hi);
}

void sx__par_range(int64_t n, int64_t grain, sx__par_range_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    const int64_t t = sx__par_threads();
    int64_t tasks = n / grain;
    if (tasks > 4 * t)
        tasks = 4 * t;
    if (t <= 1 || tasks <= 1) {
        const int outer = slot;
        slot = 0;
        fn(ctx, 0, n);
        slot = outer;
        return;
    }
    range_ctx r = {fn, ctx, n, (n + tasks - 1) / tasks};
    sx__par_for((n + r.chunk - 1) / r.chunk, range_task, &r);
}
