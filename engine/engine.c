/* engine.c: the dependency engine of sx_engine.h. Every variable keeps a FIFO of the
 * operations waiting for it and counts the reads/write it has granted; every operation counts
 * the variables it still waits for and becomes ready at zero. A pool of pthread workers runs the
 * ready operations. One mutex guards all the bookkeeping: its critical sections are a few dozen
 * instructions, and operation records and claims come from free lists (grown in slabs, or ahead
 * of time by sx_engine_reserve), so a push does not call malloc. */
#include "sx_engine.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    MAX_WORKERS = SX_ENGINE_MAX_WORKERS,
    SLAB_OPS = 64,   /* op records allocated at once */
    SLAB_DEPS = 256, /* claims allocated at once */
};

struct op;

/* One (operation, variable) pair: the operation's claim on the variable. While the claim is
 * not granted it sits in the variable's queue. */
struct dep {
    struct op *op;
    struct dep *next;    /* the variable's queue */
    struct dep *op_next; /* the operation's claims, or the free list */
    sx_var var;
    bool write;
};

/* A pushed operation, from push until it has run (or was skipped); then back on the free list. */
struct op {
    sx_engine_fn fn;
    void *arg;
    unsigned flags;
    int pending;      /* claims not yet granted; ready at 0 */
    uint32_t gen;     /* the engine's failure generation at push */
    struct op *next;  /* ready queue or free list */
    struct dep *deps; /* its claims, linked by op_next */
};

struct op_slab {
    struct op_slab *next;
    struct op ops[SLAB_OPS];
};

struct dep_slab {
    struct dep_slab *next;
    struct dep deps[SLAB_DEPS];
};

/* A variable. The fields above `stamp` are guarded by the engine's mutex; `stamp` and `claim`
 * are only touched by the owner's thread, in push (to merge duplicate names). */
struct var {
    struct dep *head, *tail; /* claims waiting, in push order */
    int32_t reads;           /* granted reads still running */
    bool writing;            /* a granted write is running */
    bool failed;             /* marked by a failed or skipped op of generation fail_gen */
    uint32_t fail_gen;
    uint32_t n_ops;    /* pushed operations naming it that have not finished */
    uint64_t stamp;    /* number of the last push that named it */
    struct dep *claim; /* that push's claim on it */
};

struct sx_engine {
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* workers wait here for ready operations */
    pthread_cond_t done_cv; /* the owner waits here in wait_all / wait_for */
    pthread_t threads[MAX_WORKERS];
    int n_workers, n_started;
    int idle;    /* workers asleep on work_cv */
    int running; /* operations being run */
    bool wide_running;
    bool stop;
    int waiting; /* 0 none, 1 the owner waits for all, 2 for var wait_var */
    sx_var wait_var;
    uint64_t n_pending; /* pushed, not finished */
    struct op *ready_head, *ready_tail;
    int n_ready;
    struct op *free_ops;
    struct dep *free_deps;    /* linked by op_next */
    struct op_slab *op_slabs; /* everything allocated, for sx_engine_free; the owner's thread */
    struct dep_slab *dep_slabs;
    int64_t owned_ops, owned_deps;
    struct var *vars;
    uint32_t n_vars, cap_vars;
    uint64_t push_seq;
    uint32_t gen; /* failure generation: incremented by every wait, which clears the marks */
    sx_status failure;
    char failure_msg[512];
};

/* ---------------------------------------------------------------- dependency tracking */

static bool can_grant(const struct var *v, bool write)
{
    return write ? !v->writing && v->reads == 0 : !v->writing;
}

static void grant(struct var *v, bool write)
{
    if (write)
        v->writing = true;
    else
        v->reads++;
}

static void make_ready(sx_engine *e, struct op *op)
{
    op->next = NULL;
    if (e->ready_tail)
        e->ready_tail->next = op;
    else
        e->ready_head = op;
    e->ready_tail = op;
    e->n_ready++;
}

/* Release one finished claim on v and grant the claims now at the front of its queue: a run of
 * reads together, or one write. Operations whose last claim is granted become ready. */
static void release(sx_engine *e, struct var *v, bool write)
{
    if (write)
        v->writing = false;
    else
        v->reads--;
    v->n_ops--;
    while (v->head != NULL && can_grant(v, v->head->write)) {
        struct dep *d = v->head;
        v->head = d->next;
        if (v->head == NULL)
            v->tail = NULL;
        grant(v, d->write);
        if (--d->op->pending == 0)
            make_ready(e, d->op);
        if (d->write)
            break;
    }
}

/* ---------------------------------------------------------------- workers */

/* May a worker start the first ready operation now? A WIDE operation starts only when nothing
 * else runs, and nothing starts beside it. */
static bool can_start(const sx_engine *e)
{
    if (e->ready_head == NULL || e->wide_running)
        return false;
    return !(e->ready_head->flags & SX_ENGINE_WIDE) || e->running == 0;
}

/* Whether op must be skipped: it names a variable marked failed in its own generation. */
static bool must_skip(const sx_engine *e, const struct op *op)
{
    for (const struct dep *d = op->deps; d != NULL; d = d->op_next) {
        const struct var *v = &e->vars[d->var];
        if (v->failed && v->fail_gen == op->gen)
            return true;
    }
    return false;
}

/* Bookkeeping after op has run (ok) or failed/been skipped (!ok). Called with the lock held. */
static void finish(sx_engine *e, struct op *op, bool ok)
{
    struct dep *last = NULL;
    for (struct dep *d = op->deps; d != NULL; d = d->op_next) {
        struct var *v = &e->vars[d->var];
        if (!ok && d->write) {
            v->failed = true;
            v->fail_gen = op->gen;
        }
        release(e, v, d->write);
        last = d;
    }
    if (last != NULL) { /* the claims go back in one piece */
        last->op_next = e->free_deps;
        e->free_deps = op->deps;
        op->deps = NULL;
    }
    e->n_pending--;
    if (e->waiting == 1 ? e->n_pending == 0 : e->waiting == 2 && e->vars[e->wait_var].n_ops == 0)
        pthread_cond_signal(&e->done_cv);
    op->next = e->free_ops;
    e->free_ops = op;
}

static void *worker_main(void *arg)
{
    sx_engine *e = arg;
    int kernel_threads = -1; /* this thread's sx_threads_set_local value */
    char msg[sizeof e->failure_msg];
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stop && !can_start(e)) {
            e->idle++;
            pthread_cond_wait(&e->work_cv, &e->mu);
            e->idle--;
        }
        if (!can_start(e)) /* stopping, nothing left to start */
            break;
        struct op *op = e->ready_head;
        e->ready_head = op->next;
        if (e->ready_head == NULL)
            e->ready_tail = NULL;
        e->n_ready--;
        bool wide = op->flags & SX_ENGINE_WIDE;
        /* alone: nothing else runs or waits to run, so the kernel may use every thread */
        bool alone = wide || (e->running == 0 && e->ready_head == NULL);
        e->running++;
        e->wide_running = wide;
        /* Another worker may start the next ready operation at once. */
        if (e->idle > 0 && can_start(e))
            pthread_cond_signal(&e->work_cv);
        bool skip = must_skip(e, op);
        sx_status st = SX_OK;
        if (!skip) {
            pthread_mutex_unlock(&e->mu);
            int want = alone ? 0 : 1; /* 0: the global count (sx_threads_set) */
            if (want != kernel_threads) {
                if (sx_threads_set_local(want) == SX_OK) /* 0 and 1 are always valid */
                    kernel_threads = want;
            }
            st = op->fn(op->arg);
            if (st != SX_OK)
                snprintf(msg, sizeof msg, "%s", sx_last_error());
            pthread_mutex_lock(&e->mu);
        }
        if (st != SX_OK && e->failure == SX_OK) {
            e->failure = st;
            snprintf(e->failure_msg, sizeof e->failure_msg, "%s", msg);
        }
        e->running--;
        if (wide)
            e->wide_running = false;
        finish(e, op, !skip && st == SX_OK);
        /* This worker takes one ready operation itself; wake others for the rest. */
        int extra = e->n_ready - 1;
        for (int i = 0; i < extra && i < e->idle; i++)
            pthread_cond_signal(&e->work_cv);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---------------------------------------------------------------- public API */

static int default_workers(void)
{
    const char *env = getenv("SX_ENGINE_WORKERS");
    if (env != NULL) {
        int n = atoi(env);
        if (n >= 1 && n <= MAX_WORKERS)
            return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_WORKERS ? MAX_WORKERS : (int)n;
}

static void stop_workers(sx_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_broadcast(&e->work_cv);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < e->n_started; i++)
        pthread_join(e->threads[i], NULL);
    e->n_started = 0;
}

sx_status sx_engine_new(int workers, sx_engine **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "sx_engine_new: out is NULL");
    *out = NULL;
    if (workers < 0 || workers > MAX_WORKERS)
        return sx_error(SX_E_ARG, "sx_engine_new: %d workers (want 0..%d)", workers, MAX_WORKERS);
    sx_engine *e = sx_calloc(1, sizeof *e);
    if (e == NULL)
        return SX_E_NOMEM;
    e->n_workers = workers == 0 ? default_workers() : workers;
    (void)sx_threads_get(); /* settle the global count before workers read it */
    if (pthread_mutex_init(&e->mu, NULL) != 0)
        goto fail_mutex;
    if (pthread_cond_init(&e->work_cv, NULL) != 0)
        goto fail_work_cv;
    if (pthread_cond_init(&e->done_cv, NULL) != 0)
        goto fail_done_cv;
    for (; e->n_started < e->n_workers; e->n_started++)
        if (pthread_create(&e->threads[e->n_started], NULL, worker_main, e) != 0)
            goto fail_threads;
    *out = e;
    return SX_OK;

fail_threads:
    stop_workers(e);
    pthread_cond_destroy(&e->done_cv);
fail_done_cv:
    pthread_cond_destroy(&e->work_cv);
fail_work_cv:
    pthread_mutex_destroy(&e->mu);
fail_mutex:;
    int n = e->n_workers;
    sx_free(e);
    return sx_error(SX_E_NOMEM, "sx_engine_new: cannot start %d worker threads", n);
}

void sx_engine_free(sx_engine *e)
{
    if (e == NULL)
        return;
    (void)sx_engine_wait_all(e);
    stop_workers(e);
    for (struct op_slab *s = e->op_slabs, *next; s != NULL; s = next) {
        next = s->next;
        sx_free(s);
    }
    for (struct dep_slab *s = e->dep_slabs, *next; s != NULL; s = next) {
        next = s->next;
        sx_free(s);
    }
    sx_free(e->vars);
    pthread_cond_destroy(&e->done_cv);
    pthread_cond_destroy(&e->work_cv);
    pthread_mutex_destroy(&e->mu);
    sx_free(e);
}

int sx_engine_workers(const sx_engine *e)
{
    return e == NULL ? 0 : e->n_workers;
}

sx_status sx_engine_var_new(sx_engine *e, sx_var *out)
{
    if (e == NULL || out == NULL)
        return sx_error(SX_E_ARG, "sx_engine_var_new: %s is NULL", e == NULL ? "e" : "out");
    if (e->n_vars == UINT32_MAX)
        return sx_error(SX_E_RANGE, "sx_engine_var_new: too many variables");
    if (e->n_vars == e->cap_vars) {
        uint32_t cap = e->cap_vars < 64               ? 64
                       : e->cap_vars > UINT32_MAX / 2 ? UINT32_MAX
                                                      : 2 * e->cap_vars;
        /* Workers read the table under the lock, so it moves under the lock. */
        pthread_mutex_lock(&e->mu);
        struct var *vars = sx_realloc(e->vars, (size_t)cap * sizeof *vars);
        if (vars != NULL) {
            e->vars = vars;
            e->cap_vars = cap;
        }
        pthread_mutex_unlock(&e->mu);
        if (vars == NULL)
            return SX_E_NOMEM;
    }
    e->vars[e->n_vars] = (struct var){0}; /* no worker looks at it before a push names it */
    *out = e->n_vars++;
    return SX_OK;
}

/* Grow the free lists until the engine owns `ops` records and `deps` claims. Only the owner's
 * thread allocates, so the allocator hook is never called from a worker. */
static sx_status grow(sx_engine *e, int64_t ops, int64_t deps)
{
    while (e->owned_ops < ops) {
        struct op_slab *s = sx_alloc(sizeof *s);
        if (s == NULL)
            return SX_E_NOMEM;
        s->next = e->op_slabs;
        e->op_slabs = s;
        pthread_mutex_lock(&e->mu);
        for (int i = 0; i < SLAB_OPS; i++) {
            s->ops[i].next = e->free_ops;
            e->free_ops = &s->ops[i];
        }
        pthread_mutex_unlock(&e->mu);
        e->owned_ops += SLAB_OPS;
    }
    while (e->owned_deps < deps) {
        struct dep_slab *s = sx_alloc(sizeof *s);
        if (s == NULL)
            return SX_E_NOMEM;
        s->next = e->dep_slabs;
        e->dep_slabs = s;
        pthread_mutex_lock(&e->mu);
        for (int i = 0; i < SLAB_DEPS; i++) {
            s->deps[i].op_next = e->free_deps;
            e->free_deps = &s->deps[i];
        }
        pthread_mutex_unlock(&e->mu);
        e->owned_deps += SLAB_DEPS;
    }
    return SX_OK;
}

sx_status sx_engine_reserve(sx_engine *e, int64_t ops, int64_t claims)
{
    if (e == NULL || ops < 0 || claims < 0 || ops > INT64_MAX / 2 || claims > INT64_MAX / 2)
        return sx_error(SX_E_ARG, "sx_engine_reserve: %s", e == NULL ? "e is NULL" : "bad counts");
    if (grow(e, ops, claims) != SX_OK)
        return sx_error(SX_E_NOMEM,
                        "sx_engine_reserve: out of memory for %lld operations and "
                        "%lld claims",
                        (long long)ops, (long long)claims);
    return SX_OK;
}

/* Take a free record and n free claims (chained by op_next), growing the lists when they run
 * short; NULL when out of memory (nothing taken). */
static struct op *op_get(sx_engine *e, int n)
{
    for (;;) {
        pthread_mutex_lock(&e->mu);
        struct op *op = e->free_ops;
        struct dep *d = e->free_deps;
        int k = 0;
        for (; d != NULL && k < n - 1; k++)
            d = d->op_next;
        if (op != NULL && (n == 0 || d != NULL)) {
            e->free_ops = op->next;
            op->deps = n > 0 ? e->free_deps : NULL;
            if (n > 0) {
                e->free_deps = d->op_next;
                d->op_next = NULL;
            }
            pthread_mutex_unlock(&e->mu);
            return op;
        }
        pthread_mutex_unlock(&e->mu);
        /* Short: what is free plus one more slab of each is enough (workers only add). */
        if (grow(e, e->owned_ops + (op == NULL), e->owned_deps + (n - k)) != SX_OK)
            return NULL;
    }
}

/* Add op's claim on v, taking a claim from *spare (merging a second naming of v into the first),
 * at *tail of op's list. */
static void add_claim(sx_engine *e, struct op *op, sx_var v, bool write, struct dep **spare,
                      struct dep ***tail)
{
    struct var *var = &e->vars[v];
    if (var->stamp == e->push_seq) {
        var->claim->write |= write;
        return;
    }
    struct dep *d = *spare;
    *spare = d->op_next;
    *d = (struct dep){.op = op, .var = v, .write = write};
    var->stamp = e->push_seq;
    var->claim = d;
    **tail = d;
    *tail = &d->op_next;
}

sx_status sx_engine_push(sx_engine *e, sx_engine_fn fn, void *arg, const sx_var *reads, int n_reads,
                         const sx_var *mutates, int n_mutates, unsigned flags)
{
    if (e == NULL || fn == NULL)
        return sx_error(SX_E_ARG, "sx_engine_push: %s is NULL", e == NULL ? "e" : "fn");
    if (n_reads < 0 || n_mutates < 0 || (n_reads > 0 && reads == NULL) ||
        (n_mutates > 0 && mutates == NULL) || n_reads > (1 << 30) - n_mutates)
        return sx_error(SX_E_ARG, "sx_engine_push: bad variable lists (%d reads, %d mutates)",
                        n_reads, n_mutates);
    if (flags & ~(unsigned)SX_ENGINE_WIDE)
        return sx_error(SX_E_ARG, "sx_engine_push: unknown flags 0x%x", flags);
    for (int i = 0; i < n_reads + n_mutates; i++) {
        sx_var v = i < n_reads ? reads[i] : mutates[i - n_reads];
        if (v >= e->n_vars)
            return sx_error(SX_E_ARG, "sx_engine_push: unknown variable %u (%u exist)", (unsigned)v,
                            (unsigned)e->n_vars);
    }
    struct op *op = op_get(e, n_reads + n_mutates);
    if (op == NULL)
        return sx_error(SX_E_NOMEM, "sx_engine_push: out of memory");
    op->fn = fn;
    op->arg = arg;
    op->flags = flags;
    e->push_seq++;
    /* Mutations first, so that a variable named in both lists is one write claim. */
    struct dep *spare = op->deps, **tail = &op->deps;
    op->deps = NULL;
    for (int i = 0; i < n_mutates; i++)
        add_claim(e, op, mutates[i], true, &spare, &tail);
    for (int i = 0; i < n_reads; i++)
        add_claim(e, op, reads[i], false, &spare, &tail);

    pthread_mutex_lock(&e->mu);
    if (spare != NULL) { /* claims left over by merged names */
        struct dep *last = spare;
        while (last->op_next != NULL)
            last = last->op_next;
        last->op_next = e->free_deps;
        e->free_deps = spare;
    }
    op->gen = e->gen;
    op->pending = 0;
    for (struct dep *d = op->deps; d != NULL; d = d->op_next) {
        struct var *v = &e->vars[d->var];
        v->n_ops++;
        d->next = NULL;
        if (v->head == NULL && can_grant(v, d->write)) {
            grant(v, d->write);
        } else {
            if (v->tail)
                v->tail->next = d;
            else
                v->head = d;
            v->tail = d;
            op->pending++;
        }
    }
    e->n_pending++;
    if (op->pending == 0) {
        make_ready(e, op);
        if (e->idle > 0 && can_start(e))
            pthread_cond_signal(&e->work_cv);
    }
    pthread_mutex_unlock(&e->mu);
    return SX_OK;
}

/* Wait (lock held) until `waiting`'s condition holds, then hand back and clear the failure. */
static sx_status wait_until(sx_engine *e, int waiting, sx_var v)
{
    e->waiting = waiting;
    e->wait_var = v;
    while (waiting == 1 ? e->n_pending > 0 : e->vars[v].n_ops > 0)
        pthread_cond_wait(&e->done_cv, &e->mu);
    e->waiting = 0;
    sx_status st = e->failure;
    char msg[sizeof e->failure_msg];
    memcpy(msg, e->failure_msg, sizeof msg);
    e->failure = SX_OK;
    e->failure_msg[0] = '\0';
    e->gen++; /* clears every failed mark */
    pthread_mutex_unlock(&e->mu);
    if (st != SX_OK)
        return sx_error(st, "%s", msg[0] ? msg : "sx_engine: an operation failed");
    return SX_OK;
}

sx_status sx_engine_wait_all(sx_engine *e)
{
    if (e == NULL)
        return sx_error(SX_E_ARG, "sx_engine_wait_all: e is NULL");
    pthread_mutex_lock(&e->mu);
    return wait_until(e, 1, 0);
}

sx_status sx_engine_wait_for(sx_engine *e, sx_var v)
{
    if (e == NULL)
        return sx_error(SX_E_ARG, "sx_engine_wait_for: e is NULL");
    if (v >= e->n_vars)
        return sx_error(SX_E_ARG, "sx_engine_wait_for: unknown variable %u (%u exist)", (unsigned)v,
                        (unsigned)e->n_vars);
    pthread_mutex_lock(&e->mu);
    return wait_until(e, 2, v);
}
