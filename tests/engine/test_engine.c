/* The dependency engine: random push sequences checked against their serial execution (every
 * operation sees exactly the versions that running the operations one by one in push order
 * gives), real concurrency of reads, WIDE operations alone, failure propagation and recovery,
 * wait_for, out-of-memory at every allocation, and argument errors. */
#include "testutil.h"

#include <sx_engine.h>

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* A short busy loop (the engine must not care how long an operation takes). */
static void spin(int n)
{
    volatile int x = 0;
    for (int i = 0; i < n; i++)
        x = x + i;
}

/* ---------------------------------------------------------------- random sequences */

enum { TAGS = 4, MAX_NAMES = 6, MAX_OPS = 40 };

struct seq;

/* One random operation: the tags it names (with repeats, and tags in both lists), what the
 * serial execution says it must see, and what it saw. */
struct rop {
    struct seq *seq;
    int n_reads, n_muts;
    sx_var reads[MAX_NAMES], muts[MAX_NAMES];
    bool named[TAGS], writes[TAGS];
    int expect[TAGS]; /* version of each named tag in the serial execution */
    int seen[TAGS];
    int pos;  /* where it started in the log */
    int work; /* spin length; negative: yield or sleep */
};

struct seq {
    sx_var tag[TAGS];
    int version[TAGS]; /* plain ints: only the engine's ordering makes their use race-free */
    atomic_int readers[TAGS], writers[TAGS];
    atomic_int log_len;
    atomic_int violations;
    int global_threads; /* sx_threads_get() outside the engine */
    int n_ops;
    struct rop ops[MAX_OPS];
};

static sx_status rop_run(void *arg)
{
    struct rop *op = arg;
    struct seq *s = op->seq;
    /* Enter: a writer must be alone on its tag, a reader must see no writer. */
    for (int t = 0; t < TAGS; t++) {
        if (!op->named[t])
            continue;
        if (op->writes[t]) {
            if (atomic_fetch_add(&s->writers[t], 1) != 0 || atomic_load(&s->readers[t]) != 0)
                atomic_fetch_add(&s->violations, 1);
        } else {
            atomic_fetch_add(&s->readers[t], 1);
            if (atomic_load(&s->writers[t]) != 0)
                atomic_fetch_add(&s->violations, 1);
        }
    }
    op->pos = atomic_fetch_add(&s->log_len, 1);
    for (int t = 0; t < TAGS; t++)
        if (op->named[t])
            op->seen[t] = s->version[t];
    if (op->work >= 0)
        spin(op->work);
    else if (op->work == -1)
        sched_yield();
    else
        sleep_us(20);
    for (int t = 0; t < TAGS; t++) {
        if (!op->named[t])
            continue;
        if (op->writes[t]) {
            s->version[t]++;
            atomic_fetch_sub(&s->writers[t], 1);
        } else {
            atomic_fetch_sub(&s->readers[t], 1);
        }
    }
    int threads = sx_threads_get(); /* 1 beside others, every thread alone */
    if (threads != 1 && threads != s->global_threads)
        atomic_fetch_add(&s->violations, 1000);
    return SX_OK;
}

/* A random sequence over the tags, with the serial execution's expectations filled in. */
static void seq_make(struct seq *s, sx_rng *rng)
{
    int version[TAGS] = {0};
    s->n_ops = 1 + (int)(sx_rng_u64(rng) % MAX_OPS);
    s->global_threads = sx_threads_get();
    atomic_store(&s->log_len, 0);
    for (int i = 0; i < s->n_ops; i++) {
        struct rop *op = &s->ops[i];
        memset(op, 0, sizeof *op);
        op->seq = s;
        op->n_reads = (int)(sx_rng_u64(rng) % 4);
        op->n_muts = (int)(sx_rng_u64(rng) % 3);
        for (int k = 0; k < op->n_reads; k++) {
            int t = (int)(sx_rng_u64(rng) % TAGS);
            op->reads[k] = s->tag[t];
            op->named[t] = true;
        }
        for (int k = 0; k < op->n_muts; k++) {
            int t = (int)(sx_rng_u64(rng) % TAGS);
            op->muts[k] = s->tag[t];
            op->named[t] = op->writes[t] = true;
        }
        for (int t = 0; t < TAGS; t++) {
            op->expect[t] = version[t];
            if (op->writes[t])
                version[t]++;
        }
        uint64_t r = sx_rng_u64(rng) % 64;
        op->work = r == 0 ? -2 : r < 8 ? -1 : (int)(sx_rng_u64(rng) % 400);
    }
}

/* Push a sequence, wait, and check it against the serial execution. */
static void seq_check(sx_engine *e, struct seq *s, int seq_no)
{
    for (int t = 0; t < TAGS; t++)
        s->version[t] = 0;
    for (int i = 0; i < s->n_ops; i++) {
        struct rop *op = &s->ops[i];
        cr_assert_eq(
            sx_engine_push(e, rop_run, op, op->reads, op->n_reads, op->muts, op->n_muts, 0), SX_OK,
            "%s", sx_last_error());
    }
    cr_assert_eq(sx_engine_wait_all(e), SX_OK);
    cr_assert_eq(atomic_load(&s->violations), 0, "sequence %d: exclusion violated", seq_no);
    cr_assert_eq(atomic_load(&s->log_len), s->n_ops, "sequence %d: not every op ran", seq_no);
    int final[TAGS] = {0};
    for (int i = 0; i < s->n_ops; i++) {
        const struct rop *op = &s->ops[i];
        for (int t = 0; t < TAGS; t++) {
            if (!op->named[t])
                continue;
            cr_assert_eq(op->seen[t], op->expect[t],
                         "sequence %d op %d tag %d: saw version %d, serial order gives %d", seq_no,
                         i, t, op->seen[t], op->expect[t]);
            final[t] += op->writes[t];
        }
        /* conflicting operations started in push order */
        for (int j = i + 1; j < s->n_ops; j++) {
            const struct rop *later = &s->ops[j];
            for (int t = 0; t < TAGS; t++)
                if (op->named[t] && later->named[t] && (op->writes[t] || later->writes[t]))
                    cr_assert_lt(op->pos, later->pos, "sequence %d: op %d started after op %d",
                                 seq_no, i, j);
        }
    }
    for (int t = 0; t < TAGS; t++)
        cr_assert_eq(s->version[t], final[t]);
}

Test(engine_engine, random_sequences_equal_serial_execution)
{
    static struct seq s;
    sx_rng rng;
    sx_rng_seed(&rng, 2024);
    int seq_no = 0;
    /* Engines of 1 to 4 workers; each runs many sequences (reuse after wait_all). */
    for (int round = 0; round < 24; round++) {
        sx_engine *e = NULL;
        cr_assert_eq(sx_engine_new(1 + round % 4, &e), SX_OK);
        cr_assert_eq(sx_engine_workers(e), 1 + round % 4);
        for (int t = 0; t < TAGS; t++)
            cr_assert_eq(sx_engine_var_new(e, &s.tag[t]), SX_OK);
        for (int k = 0; k < 100; k++, seq_no++) {
            seq_make(&s, &rng);
            seq_check(e, &s, seq_no);
        }
        sx_engine_free(e);
    }
    cr_assert_geq(seq_no, 2000);
}

/* Many sequences pushed back to back with no wait between them: the same checks over one long
 * stream of operations (the expectations carry over from one sequence to the next). */
Test(engine_engine, long_streams_equal_serial_execution)
{
    enum { STREAMS = 40, PER = 8 };
    static struct seq s[PER];
    sx_rng rng;
    sx_rng_seed(&rng, 7);
    for (int st = 0; st < STREAMS; st++) {
        sx_engine *e = NULL;
        cr_assert_eq(sx_engine_new(2 + st % 3, &e), SX_OK);
        sx_var tag[TAGS];
        for (int t = 0; t < TAGS; t++)
            cr_assert_eq(sx_engine_var_new(e, &tag[t]), SX_OK);
        int version[TAGS] = {0};
        for (int k = 0; k < PER; k++) {
            memcpy(s[k].tag, tag, sizeof tag);
            seq_make(&s[k], &rng);
            atomic_store(&s[k].violations, 0);
            /* shift the expectations by the writes of the earlier sequences */
            for (int i = 0; i < s[k].n_ops; i++)
                for (int t = 0; t < TAGS; t++)
                    s[k].ops[i].expect[t] += version[t];
            for (int i = 0; i < s[k].n_ops; i++)
                for (int t = 0; t < TAGS; t++)
                    version[t] += s[k].ops[i].writes[t];
        }
        /* every sequence shares one set of versions: point all ops at s[0]'s counters */
        for (int t = 0; t < TAGS; t++)
            s[0].version[t] = 0;
        for (int k = 0; k < PER; k++)
            for (int i = 0; i < s[k].n_ops; i++) {
                s[k].ops[i].seq = &s[0];
                struct rop *op = &s[k].ops[i];
                cr_assert_eq(
                    sx_engine_push(e, rop_run, op, op->reads, op->n_reads, op->muts, op->n_muts, 0),
                    SX_OK);
            }
        cr_assert_eq(sx_engine_wait_all(e), SX_OK);
        cr_assert_eq(atomic_load(&s[0].violations), 0);
        for (int k = 0; k < PER; k++)
            for (int i = 0; i < s[k].n_ops; i++)
                for (int t = 0; t < TAGS; t++)
                    if (s[k].ops[i].named[t])
                        cr_assert_eq(s[k].ops[i].seen[t], s[k].ops[i].expect[t],
                                     "stream %d seq %d op %d tag %d", st, k, i, t);
        for (int t = 0; t < TAGS; t++)
            cr_assert_eq(s[0].version[t], version[t]);
        sx_engine_free(e);
    }
}

/* ---------------------------------------------------------------- concurrency */

struct meet {
    atomic_int entered; /* never decremented: an operation leaves only after seeing 2 */
    atomic_int met;
};

/* Wait (up to 5 s) until the other operation has entered too: since neither leaves before
 * that, both were inside at the same time when both count as met. */
static sx_status meet_run(void *arg)
{
    struct meet *m = arg;
    atomic_fetch_add(&m->entered, 1);
    double t0 = sx_seconds();
    while (atomic_load(&m->entered) < 2 && sx_seconds() - t0 < 5.0)
        sleep_us(100);
    if (atomic_load(&m->entered) >= 2)
        atomic_fetch_add(&m->met, 1);
    return SX_OK;
}

Test(engine_engine, reads_of_one_tag_run_at_the_same_time)
{
    for (int workers = 2; workers <= 3; workers++) {
        sx_engine *e = NULL;
        cr_assert_eq(sx_engine_new(workers, &e), SX_OK);
        sx_var a, b, c;
        cr_assert_eq(sx_engine_var_new(e, &a), SX_OK);
        cr_assert_eq(sx_engine_var_new(e, &b), SX_OK);
        cr_assert_eq(sx_engine_var_new(e, &c), SX_OK);
        struct meet m = {0};
        cr_assert_eq(sx_engine_push(e, meet_run, &m, &a, 1, &b, 1, 0), SX_OK);
        cr_assert_eq(sx_engine_push(e, meet_run, &m, &a, 1, &c, 1, 0), SX_OK);
        cr_assert_eq(sx_engine_wait_all(e), SX_OK);
        cr_assert_eq(atomic_load(&m.met), 2, "two reads of one tag did not overlap");
        sx_engine_free(e);
    }
}

/* ---------------------------------------------------------------- WIDE */

struct wide_ctx {
    atomic_int running;
    atomic_int wide_on;
    atomic_int violations;
    atomic_int ran;
    int global_threads;
};

struct wide_op {
    struct wide_ctx *c;
    bool wide;
};

static sx_status wide_run(void *arg)
{
    struct wide_op *op = arg;
    struct wide_ctx *c = op->c;
    int others = atomic_fetch_add(&c->running, 1);
    if (op->wide) {
        atomic_store(&c->wide_on, 1);
        if (others != 0)
            atomic_fetch_add(&c->violations, 1);
        if (sx_threads_get() != c->global_threads)
            atomic_fetch_add(&c->violations, 100);
        spin(3000);
        if (atomic_load(&c->running) != 1)
            atomic_fetch_add(&c->violations, 1);
        atomic_store(&c->wide_on, 0);
    } else {
        if (atomic_load(&c->wide_on))
            atomic_fetch_add(&c->violations, 1);
        int threads = sx_threads_get();
        if (threads != 1 && threads != c->global_threads)
            atomic_fetch_add(&c->violations, 100);
        spin(2000);
        if (atomic_load(&c->wide_on))
            atomic_fetch_add(&c->violations, 1);
    }
    atomic_fetch_add(&c->ran, 1);
    atomic_fetch_sub(&c->running, 1);
    return SX_OK;
}

Test(engine_engine, wide_operations_run_alone_with_every_thread)
{
    enum { N = 400, VARS = 8 };
    static struct wide_op ops[N];
    struct wide_ctx c = {.global_threads = sx_threads_get()};
    sx_engine *e = NULL;
    cr_assert_eq(sx_engine_new(3, &e), SX_OK);
    sx_var v[VARS];
    for (int i = 0; i < VARS; i++)
        cr_assert_eq(sx_engine_var_new(e, &v[i]), SX_OK);
    sx_rng rng;
    sx_rng_seed(&rng, 3);
    for (int i = 0; i < N; i++) {
        ops[i] = (struct wide_op){.c = &c, .wide = sx_rng_u64(&rng) % 5 == 0};
        /* independent variables: only the WIDE rule keeps these apart */
        sx_var w = v[i % VARS];
        cr_assert_eq(
            sx_engine_push(e, wide_run, &ops[i], NULL, 0, &w, 1, ops[i].wide ? SX_ENGINE_WIDE : 0),
            SX_OK);
    }
    cr_assert_eq(sx_engine_wait_all(e), SX_OK);
    cr_assert_eq(atomic_load(&c.ran), N);
    cr_assert_eq(atomic_load(&c.violations), 0);
    sx_engine_free(e);
}

/* Kernel threads: an operation that starts while another runs gets one thread; one that starts
 * alone (a chain: each waits for the previous) gets every thread. */
struct threads_op {
    atomic_int *gate;
    int seen;
};

static sx_status threads_run(void *arg)
{
    struct threads_op *t = arg;
    t->seen = sx_threads_get();
    while (t->gate != NULL && atomic_load(t->gate) == 0)
        sleep_us(200);
    return SX_OK;
}

Test(engine_engine, kernel_threads_one_beside_others_all_alone)
{
    cr_assert_eq(sx_threads_set(3), SX_OK); /* a global count distinct from 1 on any machine */
    sx_engine *e = NULL;
    cr_assert_eq(sx_engine_new(2, &e), SX_OK);
    sx_var a, b, v;
    cr_assert_eq(sx_engine_var_new(e, &a), SX_OK);
    cr_assert_eq(sx_engine_var_new(e, &b), SX_OK);
    cr_assert_eq(sx_engine_var_new(e, &v), SX_OK);
    atomic_int gate = 0;
    struct threads_op held = {.gate = &gate}, beside = {0};
    cr_assert_eq(sx_engine_push(e, threads_run, &held, NULL, 0, &a, 1, 0), SX_OK);
    cr_assert_eq(sx_engine_push(e, threads_run, &beside, NULL, 0, &b, 1, 0), SX_OK);
    cr_assert_eq(sx_engine_wait_for(e, b), SX_OK);
    cr_assert_eq(beside.seen, 1, "an operation beside another got %d threads", beside.seen);
    atomic_store(&gate, 1);
    cr_assert_eq(sx_engine_wait_all(e), SX_OK);
    struct threads_op chain[20];
    memset(chain, 0, sizeof chain);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(sx_engine_push(e, threads_run, &chain[i], NULL, 0, &v, 1, 0), SX_OK);
    cr_assert_eq(sx_engine_wait_all(e), SX_OK);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(chain[i].seen, 3, "link %d of a chain got %d threads", i, chain[i].seen);
    sx_engine_free(e);
}

/* ---------------------------------------------------------------- failures */

struct flag_op {
    atomic_int ran;
    sx_status ret;
    const char *msg;
};

static sx_status flag_run(void *arg)
{
    struct flag_op *f = arg;
    atomic_fetch_add(&f->ran, 1);
    if (f->ret != SX_OK)
        return sx_error(f->ret, "%s", f->msg);
    return SX_OK;
}

static void push_ok(sx_engine *e, struct flag_op *f, const sx_var *r, int nr, const sx_var *m,
                    int nm)
{
    cr_assert_eq(sx_engine_push(e, flag_run, f, r, nr, m, nm, 0), SX_OK, "%s", sx_last_error());
}

Test(engine_engine, a_failure_skips_dependents_and_is_reported_once)
{
    for (int workers = 1; workers <= 3; workers++) {
        sx_engine *e = NULL;
        cr_assert_eq(sx_engine_new(workers, &e), SX_OK);
        sx_var v, w, x, y, u;
        sx_var *all[5] = {&v, &w, &x, &y, &u};
        for (int i = 0; i < 5; i++)
            cr_assert_eq(sx_engine_var_new(e, all[i]), SX_OK);
        struct flag_op fail = {.ret = SX_E_RANGE, .msg = "op A: value 7 out of range"};
        struct flag_op rd_v = {0}, mut_v = {0}, w_from_v = {0}, rd_w = {0}, indep = {0};
        struct flag_op rd_u = {0};
        sx_var vu[2] = {v, u};
        push_ok(e, &fail, &u, 1, &v, 1);     /* fails, marks v */
        push_ok(e, &rd_v, &v, 1, &x, 0);     /* reads v: skipped */
        push_ok(e, &mut_v, NULL, 0, &v, 1);  /* mutates v: skipped, v stays marked */
        push_ok(e, &w_from_v, &v, 1, &w, 1); /* skipped, marks w */
        push_ok(e, &rd_w, &w, 1, NULL, 0);   /* skipped through w */
        push_ok(e, &indep, &x, 1, &y, 1);    /* independent: runs */
        push_ok(e, &rd_u, &u, 1, NULL, 0);   /* u was only read by the failure: runs */
        sx_error_clear();
        cr_assert_eq(sx_engine_wait_all(e), SX_E_RANGE);
        cr_assert(strstr(sx_last_error(), "value 7 out of range") != NULL, "%s", sx_last_error());
        cr_assert_eq(atomic_load(&fail.ran), 1);
        cr_assert_eq(atomic_load(&rd_v.ran), 0);
        cr_assert_eq(atomic_load(&mut_v.ran), 0);
        cr_assert_eq(atomic_load(&w_from_v.ran), 0);
        cr_assert_eq(atomic_load(&rd_w.ran), 0);
        cr_assert_eq(atomic_load(&indep.ran), 1);
        cr_assert_eq(atomic_load(&rd_u.ran), 1);
        /* reported once; then the engine and the marked variables are usable again */
        cr_assert_eq(sx_engine_wait_all(e), SX_OK);
        push_ok(e, &rd_v, vu, 2, &w, 1);
        push_ok(e, &rd_w, &w, 1, NULL, 0);
        cr_assert_eq(sx_engine_wait_for(e, w), SX_OK);
        cr_assert_eq(atomic_load(&rd_v.ran), 1);
        cr_assert_eq(atomic_load(&rd_w.ran), 1);
        sx_engine_free(e);
    }
}

Test(engine_engine, the_first_failure_wins)
{
    sx_engine *e = NULL;
    cr_assert_eq(sx_engine_new(2, &e), SX_OK);
    sx_var u, v;
    cr_assert_eq(sx_engine_var_new(e, &u), SX_OK);
    cr_assert_eq(sx_engine_var_new(e, &v), SX_OK);
    struct flag_op a = {.ret = SX_E_SHAPE, .msg = "first"};
    struct flag_op b = {.ret = SX_E_DTYPE, .msg = "second"};
    push_ok(e, &a, &u, 1, &v, 1);   /* reads u, fails */
    push_ok(e, &b, NULL, 0, &u, 1); /* waits for a (it mutates u), not failed: runs, fails */
    cr_assert_eq(sx_engine_wait_for(e, u), SX_E_SHAPE);
    cr_assert_str_eq(sx_last_error(), "first");
    cr_assert_eq(atomic_load(&b.ran), 1);
    cr_assert_eq(sx_engine_wait_all(e), SX_OK);
    sx_engine_free(e);
}

/* ---------------------------------------------------------------- wait_for */

struct gate_op {
    atomic_int *gate;
    atomic_int done;
};

static sx_status gate_run(void *arg)
{
    struct gate_op *g = arg;
    while (g->gate != NULL && atomic_load(g->gate) == 0)
        sleep_us(200);
    spin(1000);
    atomic_store(&g->done, 1);
    return SX_OK;
}

Test(engine_engine, wait_for_waits_only_for_its_variable)
{
    sx_engine *e = NULL;
    cr_assert_eq(sx_engine_new(2, &e), SX_OK);
    sx_var a, b;
    cr_assert_eq(sx_engine_var_new(e, &a), SX_OK);
    cr_assert_eq(sx_engine_var_new(e, &b), SX_OK);
    atomic_int gate = 0;
    struct gate_op slow = {.gate = &gate};
    struct gate_op chain[5] = {0};
    cr_assert_eq(sx_engine_push(e, gate_run, &slow, NULL, 0, &a, 1, 0), SX_OK);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(sx_engine_push(e, gate_run, &chain[i], i % 2 ? &b : NULL, i % 2,
                                    i % 2 ? NULL : &b, 1 - i % 2, 0),
                     SX_OK);
    cr_assert_eq(sx_engine_wait_for(e, b), SX_OK);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(atomic_load(&chain[i].done), 1, "op %d on b has not finished", i);
    cr_assert_eq(atomic_load(&slow.done), 0, "wait_for(b) waited for a");
    atomic_store(&gate, 1);
    cr_assert_eq(sx_engine_wait_for(e, a), SX_OK);
    cr_assert_eq(atomic_load(&slow.done), 1);
    /* wait_for on a variable nothing touched returns at once */
    sx_var c;
    cr_assert_eq(sx_engine_var_new(e, &c), SX_OK);
    cr_assert_eq(sx_engine_wait_for(e, c), SX_OK);
    sx_engine_free(e);
}

Test(engine_engine, free_waits_for_pending_operations)
{
    enum { N = 20 };
    struct gate_op ops[N] = {0};
    sx_engine *e = NULL;
    cr_assert_eq(sx_engine_new(2, &e), SX_OK);
    sx_var v;
    cr_assert_eq(sx_engine_var_new(e, &v), SX_OK);
    for (int i = 0; i < N; i++)
        cr_assert_eq(sx_engine_push(e, gate_run, &ops[i], NULL, 0, &v, 1, 0), SX_OK);
    sx_engine_free(e);
    for (int i = 0; i < N; i++)
        cr_assert_eq(atomic_load(&ops[i].done), 1);
    sx_engine_free(NULL);
}

/* ---------------------------------------------------------------- out of memory */

static sx_status count_run(void *arg)
{
    atomic_fetch_add((atomic_int *)arg, 1);
    return SX_OK;
}

/* Build an engine, make enough variables and push enough operations to grow every table (the
 * variable array, the op-record slabs, a record's claim array), failing the k-th allocation for
 * every k: each failure is SX_E_NOMEM, queues nothing and leaks nothing. */
Test(engine_engine, out_of_memory_at_every_allocation)
{
    enum { VARS = 70, OPS = 150 };
    for (long k = 0;; k++) {
        atomic_int ran = 0;
        int pushed = 0;
        tu_fail_after(k);
        sx_engine *e = NULL;
        sx_var v[VARS];
        sx_status s = sx_engine_new(2, &e);
        if (s != SX_OK)
            cr_assert_null(e);
        for (int i = 0; i < VARS && s == SX_OK; i++)
            s = sx_engine_var_new(e, &v[i]);
        for (int i = 0; i < OPS && s == SX_OK; i++) {
            int n = i % 10 == 9 ? 12 : 2; /* some ops name more than a record holds inline */
            sx_var names[12];
            for (int j = 0; j < n; j++)
                names[j] = v[(i * 7 + j * 3) % VARS];
            s = sx_engine_push(e, count_run, &ran, names, n / 2, names + n / 2, n - n / 2, 0);
            pushed += s == SX_OK;
        }
        if (e != NULL)
            cr_assert_eq(sx_engine_wait_all(e), SX_OK);
        cr_assert_eq(atomic_load(&ran), pushed, "k=%ld: a failed push queued something", k);
        sx_engine_free(e);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(live, 0, "k=%ld leaked %ld allocations", k, live);
        if (s == SX_OK)
            break;
        cr_assert_eq(s, SX_E_NOMEM, "k=%ld: %s: %s", k, sx_status_str(s), sx_last_error());
        cr_assert_lt(k, 1000);
    }
}

/* After sx_engine_reserve, pushes within the reservation allocate nothing (the failing
 * allocator fails every allocation), also when the operations name many variables. */
Test(engine_engine, reserved_pushes_allocate_nothing)
{
    enum { OPS = 300, NAMES = 9 };
    sx_engine *e = NULL;
    cr_assert_eq(sx_engine_new(2, &e), SX_OK);
    sx_var v[NAMES];
    for (int i = 0; i < NAMES; i++)
        cr_assert_eq(sx_engine_var_new(e, &v[i]), SX_OK);
    cr_assert_eq(sx_engine_reserve(e, OPS, (int64_t)OPS * NAMES), SX_OK);
    for (int round = 0; round < 3; round++) {
        atomic_int ran = 0;
        tu_fail_after(0);
        for (int i = 0; i < OPS; i++) {
            int n = 1 + i % NAMES;
            cr_assert_eq(sx_engine_push(e, count_run, &ran, v, n / 2, v + n / 2, n - n / 2, 0),
                         SX_OK, "round %d op %d: %s", round, i, sx_last_error());
        }
        cr_assert_eq(sx_engine_wait_all(e), SX_OK);
        tu_fail_reset();
        cr_assert_eq(atomic_load(&ran), OPS);
    }
    /* beyond the reservation, pushes grow the engine */
    atomic_int ran = 0;
    for (int i = 0; i < 3 * OPS; i++)
        cr_assert_eq(sx_engine_push(e, count_run, &ran, v, NAMES, NULL, 0, 0), SX_OK);
    cr_assert_eq(sx_engine_wait_all(e), SX_OK);
    cr_assert_eq(atomic_load(&ran), 3 * OPS);
    cr_assert_eq(sx_engine_reserve(NULL, 1, 1), SX_E_ARG);
    cr_assert_eq(sx_engine_reserve(e, -1, 1), SX_E_ARG);
    cr_assert_eq(sx_engine_reserve(e, 1, -1), SX_E_ARG);
    tu_fail_after(0);
    cr_assert_eq(sx_engine_reserve(e, 100000, 1), SX_E_NOMEM);
    tu_fail_reset();
    sx_engine_free(e);
}

/* ---------------------------------------------------------------- arguments */

Test(engine_engine, bad_arguments_are_errors_and_queue_nothing)
{
    sx_engine *e = (sx_engine *)1;
    cr_assert_eq(sx_engine_new(-1, &e), SX_E_ARG);
    cr_assert_null(e);
    cr_assert_eq(sx_engine_new(257, &e), SX_E_ARG);
    cr_assert_eq(sx_engine_new(1, NULL), SX_E_ARG);
    cr_assert_eq(sx_engine_new(1, &e), SX_OK);
    sx_var v, w = 99;
    cr_assert_eq(sx_engine_var_new(e, &v), SX_OK);
    cr_assert_eq(sx_engine_var_new(NULL, &v), SX_E_ARG);
    cr_assert_eq(sx_engine_var_new(e, NULL), SX_E_ARG);
    atomic_int ran = 0;
    cr_assert_eq(sx_engine_push(NULL, count_run, &ran, &v, 1, NULL, 0, 0), SX_E_ARG);
    cr_assert_eq(sx_engine_push(e, NULL, &ran, &v, 1, NULL, 0, 0), SX_E_ARG);
    cr_assert_eq(sx_engine_push(e, count_run, &ran, &w, 1, NULL, 0, 0), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "unknown variable 99") != NULL, "%s", sx_last_error());
    sx_var vw[2] = {v, w};
    cr_assert_eq(sx_engine_push(e, count_run, &ran, &v, 1, vw, 2, 0), SX_E_ARG);
    cr_assert_eq(sx_engine_push(e, count_run, &ran, &v, -1, NULL, 0, 0), SX_E_ARG);
    cr_assert_eq(sx_engine_push(e, count_run, &ran, NULL, 1, NULL, 0, 0), SX_E_ARG);
    cr_assert_eq(sx_engine_push(e, count_run, &ran, NULL, 0, NULL, 1, 0), SX_E_ARG);
    cr_assert_eq(sx_engine_push(e, count_run, &ran, &v, 1, NULL, 0, 4u), SX_E_ARG);
    cr_assert_eq(sx_engine_wait_for(e, w), SX_E_ARG);
    cr_assert_eq(sx_engine_wait_for(NULL, v), SX_E_ARG);
    cr_assert_eq(sx_engine_wait_all(NULL), SX_E_ARG);
    cr_assert_eq(sx_engine_wait_all(e), SX_OK);
    cr_assert_eq(atomic_load(&ran), 0, "a rejected push ran");
    /* an operation naming nothing runs too */
    cr_assert_eq(sx_engine_push(e, count_run, &ran, NULL, 0, NULL, 0, 0), SX_OK);
    cr_assert_eq(sx_engine_wait_all(e), SX_OK);
    cr_assert_eq(atomic_load(&ran), 1);
    cr_assert_eq(sx_engine_workers(NULL), 0);
    sx_engine_free(e);
}

Test(engine_engine, default_worker_count_comes_from_the_environment)
{
    cr_assert_eq(setenv("SX_ENGINE_WORKERS", "3", 1), 0);
    sx_engine *e = NULL;
    cr_assert_eq(sx_engine_new(0, &e), SX_OK);
    cr_assert_eq(sx_engine_workers(e), 3);
    sx_engine_free(e);
    cr_assert_eq(setenv("SX_ENGINE_WORKERS", "nonsense", 1), 0);
    cr_assert_eq(sx_engine_new(0, &e), SX_OK);
    cr_assert_geq(sx_engine_workers(e), 1);
    sx_engine_free(e);
}
