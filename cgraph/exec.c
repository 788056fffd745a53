/* exec.c: evaluation. Need-based recomputation (seed 003): nodes carry a valid flag, changes
 * invalidate only dependents, and sx_cg_eval computes the invalid nodes the requested ones need,
 * in a topological order where every other reader of a parameter runs before an assign to it.
 * Freezing fixes that order and the storage once, so later evaluations allocate nothing. With
 * workers (sx_cg_set_workers) the same nodes, in the same order, are pushed to a dependency
 * engine (seed 001) whose read/mutate tags keep every result equal to the sequential one. */
#include "cgraph_impl.h"
#include "sx_engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ST_NONE = 0, ST_OPEN = 1, ST_DONE = 2 };

double cg_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void sx_cg_profile_enable(sx_cg_graph *g, bool on)
{
    if (g != NULL)
        g->profile = on;
}

void sx_cg_profile_reset(sx_cg_graph *g)
{
    if (g == NULL)
        return;
    memset(g->prof_seconds, 0, sizeof g->prof_seconds);
    memset(g->prof_calls, 0, sizeof g->prof_calls);
    for (int64_t i = 0; i < g->n_nodes; i++) {
        g->nodes[i]->prof_seconds = 0;
        g->nodes[i]->prof_calls = 0;
    }
}

void sx_cg_profile_print(const sx_cg_graph *g, int top, FILE *f)
{
    int idx[SX_OP_COUNT], n = 0;
    double total = 0;
    for (int i = 0; i < SX_OP_COUNT; i++)
        if (g->prof_calls[i] > 0) {
            idx[n++] = i;
            total += g->prof_seconds[i];
        }
    for (int i = 1; i < n; i++) /* by time, descending */
        for (int j = i; j > 0 && g->prof_seconds[idx[j]] > g->prof_seconds[idx[j - 1]]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    fprintf(f, "%-20s %10s %12s %7s\n", "op", "calls", "ms", "share");
    for (int i = 0; i < n && (top <= 0 || i < top); i++)
        fprintf(f, "%-20s %10lld %12.1f %6.1f%%\n", sx_cg_op_name((sx_cg_op)idx[i]),
                (long long)g->prof_calls[idx[i]], 1e3 * g->prof_seconds[idx[i]],
                total > 0 ? 100 * g->prof_seconds[idx[i]] / total : 0);
    fprintf(f, "%-20s %10s %12.1f\n", "total", "", 1e3 * total);
    /* per scope, in order of first appearance; unscoped nodes last */
    bool any = false;
    for (int sc = 1; sc <= g->n_scopes + 1; sc++) {
        int want = sc <= g->n_scopes ? sc : 0;
        double t = 0;
        int64_t calls = 0;
        for (int64_t i = 0; i < g->n_nodes; i++)
            if (g->nodes[i]->scope == want) {
                t += g->nodes[i]->prof_seconds;
                calls += g->nodes[i]->prof_calls;
            }
        if (calls == 0)
            continue;
        if (!any)
            fprintf(f, "%-20s %10s %12s %7s\n", "scope", "kernels", "ms", "share");
        any = true;
        fprintf(f, "%-20.20s %10lld %12.1f %6.1f%%\n", want ? g->scopes[want - 1] : "(none)",
                (long long)calls, 1e3 * t, total > 0 ? 100 * t / total : 0);
    }
}

/* ---------------------------------------------------------------- storage and compute */

/* The scratch of the node an engine worker is running (parallel evaluation), else unset. */
static _Thread_local struct {
    bool on;
    void *p;
    size_t bytes;
} worker_ws;

sx_status cg_workspace(sx_cg_graph *g, size_t bytes, void **ws)
{
    if (worker_ws.on) {
        if (bytes > worker_ws.bytes)
            return sx_error(SX_E_STATE,
                            "cgraph: a node needs %zu scratch bytes, its worker has %zu", bytes,
                            worker_ws.bytes);
        *ws = worker_ws.p;
        return SX_OK;
    }
    if (bytes > g->ws_bytes) {
        if (g->frozen)
            return sx_error(SX_E_STATE, "cgraph: frozen graph needs %zu scratch bytes, has %zu",
                            bytes, g->ws_bytes);
        void *p = sx_alloc(bytes);
        if (p == NULL)
            return SX_E_NOMEM;
        sx_free(g->ws);
        g->ws = p;
        g->ws_bytes = bytes;
        g->par = NULL; /* it lived in the old allocation */
    }
    *ws = g->ws;
    return SX_OK;
}

sx_status cg_storage(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    if (n->value.data != NULL || (sx_cg_ops[n->op].flags & SX_OPF_VIEW))
        return SX_OK;
    size_t bytes = (size_t)n->value.size * sx_dtype_size(n->value.dtype);
    n->own = sx_alloc(bytes);
    if (n->own == NULL)
        return SX_E_NOMEM;
    n->value.data = n->own;
    return SX_OK;
}

/* The part of computing a node that touches only the node: checks, storage, the kernel (timed
 * into *seconds when profiling), the valid flag. Engine workers run this (storage is then given
 * beforehand); the graph's counters are the caller's. */
static sx_status compute_node(sx_cg_graph *g, sx_cg_node *n, double *seconds)
{
    if (sx_cg_ops[n->op].flags & SX_OPF_LEAF) {
        if (n->op == SX_OP_INPUT && !n->valid)
            return sx_error(SX_E_STATE, "sx_cg_eval: input %lld '%s' has no value",
                            (long long)n->id, sx_cg_node_name(n));
        return SX_OK;
    }
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->value.data == NULL && n->in[i]->value.size > 0)
            return sx_error(SX_E_STATE, "%s: input %d (node %lld) has not been computed", cg_who(n),
                            i, (long long)n->in[i]->id);
    SX_TRY(cg_storage(g, n));
    double t0 = g->profile ? cg_seconds() : 0;
    SX_TRY(sx_cg_ops[n->op].eval(g, n));
    *seconds = g->profile ? cg_seconds() - t0 : 0;
    n->valid = true;
    n->ran = g->run_epoch;
    return SX_OK;
}

/* Count a kernel run of n that took `seconds` (profiling). */
static void count_run(sx_cg_graph *g, sx_cg_node *n, double seconds)
{
    if (g->profile) {
        g->prof_seconds[n->op] += seconds;
        g->prof_calls[n->op]++;
        n->prof_seconds += seconds;
        n->prof_calls++;
    }
    g->kernel_calls++;
}

sx_status cg_compute(sx_cg_graph *g, sx_cg_node *n)
{
    double seconds = 0;
    SX_TRY(compute_node(g, n, &seconds));
    if (!(sx_cg_ops[n->op].flags & SX_OPF_LEAF))
        count_run(g, n, seconds);
    return SX_OK;
}

/* After an evaluation: what read a parameter that a mutating node wrote during it is stale.
 * Done at the end, not when the mutation runs, so that everything computed in one evaluation
 * sees the state from before its mutations, and valid nodes only ever read valid ones. A fused
 * update reads the tensors it writes, so it is stale itself; an assign only writes. */
void cg_finish_run(sx_cg_graph *g, sx_cg_node *const *order, int64_t len)
{
    for (int64_t i = 0; i < len; i++) {
        sx_cg_node *x = order[i];
        if (x->ran != g->run_epoch || cg_mutated(x) == 0)
            continue;
        for (int k = 0; k < cg_mutated(x); k++) {
            sx_cg_node *p = x->in[k];
            for (int u = 0; u < p->n_users; u++)
                if (p->users[u] != x)
                    cg_invalidate(g, p->users[u]);
        }
        if (x->op != SX_OP_ASSIGN)
            cg_invalidate(g, x);
    }
}

/* ---------------------------------------------------------------- invalidation */

sx_status cg_reserve_stack(sx_cg_graph *g, int64_t need)
{
    if (need <= g->cap_stack)
        return SX_OK;
    int64_t cap = g->cap_stack ? g->cap_stack : 64;
    while (cap < need)
        cap *= 2;
    sx_cg_node **s = sx_realloc(g->stack, (size_t)cap * sizeof *s);
    if (s == NULL)
        return SX_E_NOMEM;
    g->stack = s;
    g->cap_stack = cap;
    return SX_OK;
}

/* Iterative, with the graph's stack (kept at least as large as the graph by node_link), so it
 * cannot fail. A node is pushed once: it is marked invalid when pushed. */
void cg_invalidate(sx_cg_graph *g, sx_cg_node *n)
{
    g->version++;
    if (!n->valid || n->dead)
        return;
    int64_t top = 0;
    if (sx_cg_ops[n->op].flags & SX_OPF_LEAF) {
        /* a leaf stays valid (its value is what was set): only its readers go stale */
        for (int i = 0; i < n->n_users; i++)
            if (n->users[i]->valid) {
                n->users[i]->valid = false;
                g->stack[top++] = n->users[i];
            }
    } else {
        n->valid = false;
        g->stack[top++] = n;
    }
    while (top > 0) {
        sx_cg_node *x = g->stack[--top];
        for (int i = 0; i < x->n_users; i++)
            if (x->users[i]->valid) {
                x->users[i]->valid = false;
                g->stack[top++] = x->users[i];
            }
    }
}

sx_status sx_cg_invalidate(sx_cg_graph *g, sx_cg_node *node)
{
    if (g == NULL || node == NULL || node->graph != g)
        return sx_error(SX_E_ARG, "sx_cg_invalidate: NULL argument or foreign node");
    cg_invalidate(g, node);
    return SX_OK;
}

/* ---------------------------------------------------------------- ordering */

/* The dependencies of n that must run before it in this traversal: its inputs, and for a
 * mutating node the other readers of the parameters it writes (only those in the current set,
 * i.e. marked with this epoch; a reader that reads the mutating node itself, like seq, sees the
 * new value by definition). Runs BODY with `dep` bound to each. */
#define FOR_EACH_DEP(g, n, dep, BODY)                                                              \
    do {                                                                                           \
        for (int di_ = 0; di_ < (n)->n_in; di_++) {                                                \
            sx_cg_node *dep = (n)->in[di_];                                                        \
            BODY;                                                                                  \
        }                                                                                          \
        for (int mi_ = 0; mi_ < cg_mutated(n); mi_++) {                                            \
            sx_cg_node *p_ = (n)->in[mi_];                                                         \
            for (int di_ = 0; di_ < p_->n_users; di_++) {                                          \
                sx_cg_node *dep = p_->users[di_];                                                  \
                if (dep == (n) || cg_mutated(dep) > 0 || dep->mark != (g)->epoch ||                \
                    cg_reads(dep, (n)))                                                            \
                    continue;                                                                      \
                BODY;                                                                              \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Mark (with a new epoch) every node the roots need: all ancestors when `all`, otherwise only
 * invalid ones (valid nodes are not entered). Returns how many were marked. */
static sx_status mark_needed(sx_cg_graph *g, int n, sx_cg_node *const *roots, bool all,
                             int64_t *count)
{
    g->epoch++;
    SX_TRY(cg_reserve_stack(g, g->n_nodes + n));
    int64_t top = 0, marked = 0;
    for (int i = 0; i < n; i++) {
        sx_cg_node *r = roots[i];
        if ((all || !r->valid) && r->mark != g->epoch) {
            r->mark = g->epoch;
            g->stack[top++] = r;
        }
    }
    while (top > 0) {
        sx_cg_node *x = g->stack[--top];
        x->state = ST_NONE;
        marked++;
        for (int i = 0; i < x->n_in; i++) {
            sx_cg_node *d = x->in[i];
            if ((all || !d->valid) && d->mark != g->epoch) {
                d->mark = g->epoch;
                g->stack[top++] = d;
            }
        }
    }
    *count = marked;
    return SX_OK;
}

/* Post-order DFS over the marked set, honouring the extra dependencies of mutating nodes.
 * Writes the order into out (room for `count` nodes). Uses g->stack as the DFS stack. */
static sx_status topo_order(sx_cg_graph *g, int n, sx_cg_node *const *roots, int64_t count,
                            sx_cg_node **out, int64_t *n_out)
{
    SX_TRY(cg_reserve_stack(g, count + 1));
    int64_t len = 0;
    /* roots first in the order given; every marked node is reachable from a root */
    for (int r = 0; r < n; r++) {
        sx_cg_node *root = roots[r];
        if (root->mark != g->epoch || root->state != ST_NONE)
            continue;
        int64_t top = 0;
        g->stack[top++] = root;
        root->state = ST_OPEN;
        while (top > 0) {
            sx_cg_node *x = g->stack[top - 1];
            sx_cg_node *next = NULL;
            FOR_EACH_DEP(g, x, dep, {
                if (next == NULL && dep->mark == g->epoch) {
                    if (dep->state == ST_OPEN)
                        return sx_error(SX_E_STATE,
                                        "sx_cg_eval: cycle through node %lld (%s): a node reads "
                                        "both a parameter and an assign to it",
                                        (long long)dep->id, sx_cg_op_name(dep->op));
                    if (dep->state == ST_NONE)
                        next = dep;
                }
            });
            if (next != NULL) {
                next->state = ST_OPEN;
                g->stack[top++] = next;
            } else {
                x->state = ST_DONE;
                out[len++] = x;
                top--;
            }
        }
    }
    *n_out = len;
    return SX_OK;
}

/* ---------------------------------------------------------------- parallel evaluation */

/* The WIDE rule (sx_cgraph.h): matrix products and convolutions of at least WIDE_FLOPS flops,
 * and nodes whose inputs and result hold WIDE_ELEMS elements together, run alone with every
 * kernel thread: their kernels split well over the cores, and one thread would leave cores idle
 * in a chain of such nodes. Smaller nodes run one kernel thread each, side by side (the engine
 * gives every thread to one that starts alone). */
enum { WIDE_FLOPS = 1 << 24, WIDE_ELEMS = 1 << 19 };

static bool node_wide(const sx_cg_node *n)
{
    unsigned f = sx_cg_ops[n->op].flags;
    if ((f & SX_OPF_VIEW) && !(f & SX_OPF_MUTATES))
        return false; /* a view sets a pointer */
    const sx_tensor *out = &n->value;
    double flops = 0;
    if (n->op == SX_OP_MATMUL) {
        const sx_tensor *a = &n->in[0]->value;
        flops = 2.0 * (double)out->size *
                (double)(n->attr.trans_a ? a->shape[a->rank - 2] : a->shape[a->rank - 1]);
    } else if (n->op == SX_OP_MATMUL_UPDATE) {
        const sx_tensor *a = &n->in[n->n_in - 3]->value;
        flops = 2.0 * (double)out->size * (double)(n->attr.trans_a ? a->shape[0] : a->shape[1]);
    } else if (n->op == SX_OP_CONV2D || n->op == SX_OP_CONV2D_BWD_INPUT ||
               n->op == SX_OP_CONV2D_BWD_KERNEL) {
        /* one GEMM over (n*ho*wo) x (kh*kw*cin) x cout in every direction */
        const sx_tensor *y = n->op == SX_OP_CONV2D ? out : &n->in[1]->value;
        const sx_tensor *k = n->op == SX_OP_CONV2D             ? &n->in[1]->value
                             : n->op == SX_OP_CONV2D_BWD_INPUT ? &n->in[0]->value
                                                               : out;
        if (k->shape[3] > 0)
            flops = 2.0 * (double)(y->size / k->shape[3]) * (double)k->size;
    }
    if (flops >= WIDE_FLOPS)
        return true;
    int64_t elems = out->size;
    for (int i = 0; i < n->n_in; i++)
        elems += n->in[i]->value.size;
    return elems >= WIDE_ELEMS;
}

/* Engines are shared by every graph of the process: an evaluation takes an idle engine of its
 * worker count (starting one when there is none and a slot is free) and gives it back when it
 * returns. A graph cannot own one: nothing would stop its threads when the graph is freed.
 * Variables are tags that mean something only during one evaluation (node id, then one per
 * random generator), so an engine's variables serve every graph. Idle engines are stopped at
 * exit; a forked child forgets its parent's (their threads do not exist there). */
enum { POOL_MAX = 8 };

typedef struct pooled {
    sx_engine *e;
    int workers;
    uint32_t vars; /* variables made so far: 0..vars-1 */
    bool busy;
} pooled;

static pooled pool[POOL_MAX];
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void pool_stop_idle(void)
{
    pthread_mutex_lock(&pool_mu);
    for (int i = 0; i < POOL_MAX; i++)
        if (pool[i].e != NULL && !pool[i].busy) {
            sx_engine_free(pool[i].e);
            pool[i] = (pooled){0};
        }
    pthread_mutex_unlock(&pool_mu);
}

static void pool_lock(void)
{
    pthread_mutex_lock(&pool_mu);
}

static void pool_unlock(void)
{
    pthread_mutex_unlock(&pool_mu);
}

static void pool_forget(void)
{
    memset(pool, 0, sizeof pool);
    pthread_mutex_unlock(&pool_mu);
}

static void pool_init(void)
{
    atexit(pool_stop_idle);
    pthread_atfork(pool_lock, pool_unlock, pool_forget);
}

/* An engine of `workers` workers with at least `vars` variables, for this thread alone until
 * engine_give. *out = NULL (and SX_OK) when every slot is busy: evaluate sequentially. */
static sx_status engine_take(int workers, uint32_t vars, pooled **out)
{
    pthread_once(&pool_once, pool_init);
    *out = NULL;
    pthread_mutex_lock(&pool_mu);
    pooled *pick = NULL, *empty = NULL, *other = NULL;
    for (int i = 0; i < POOL_MAX && pick == NULL; i++) {
        if (pool[i].e == NULL)
            empty = empty ? empty : &pool[i];
        else if (!pool[i].busy && pool[i].workers == workers)
            pick = &pool[i];
        else if (!pool[i].busy)
            other = other ? other : &pool[i];
    }
    if (pick == NULL && (pick = empty ? empty : other) != NULL) {
        sx_engine_free(pick->e); /* an idle engine of another size, when no slot is empty */
        *pick = (pooled){0};
        sx_status s = sx_engine_new(workers, &pick->e);
        if (s != SX_OK) {
            pthread_mutex_unlock(&pool_mu);
            return s;
        }
        pick->workers = workers;
    }
    if (pick != NULL)
        pick->busy = true;
    pthread_mutex_unlock(&pool_mu);
    if (pick == NULL)
        return SX_OK;
    while (pick->vars < vars) {
        sx_var v;
        sx_status s = sx_engine_var_new(pick->e, &v);
        if (s != SX_OK) {
            pthread_mutex_lock(&pool_mu);
            pick->busy = false;
            pthread_mutex_unlock(&pool_mu);
            return s;
        }
        pick->vars++;
    }
    *out = pick;
    return SX_OK;
}

static void engine_give(pooled *p)
{
    pthread_mutex_lock(&pool_mu);
    p->busy = false;
    pthread_mutex_unlock(&pool_mu);
}

/* A pushed node and its kernel time (profiling), read back after the wait. */
struct par_item {
    sx_cg_node *node;
    double seconds;
};

/* Arena bytes [lo, hi) last written by the node whose variable is `owner` (this evaluation). */
struct par_seg {
    size_t lo, hi;
    sx_var owner;
};

/* The parallel state, laid out in the graph's execution scratch after the sequential kernel
 * scratch: a scratch buffer per worker (a running node claims a free one), the pushed nodes,
 * the arena's last writers, and room for one push's variable lists. */
struct cg_par {
    int slots;      /* worker scratch buffers */
    size_t ws_each; /* bytes in each */
    char *ws;
    atomic_int *busy; /* per buffer */
    struct par_item *items;
    int64_t cap_items;
    struct par_seg *segs;
    int64_t cap_segs;
    int max_in; /* inputs of a node: vars holds 2 * max_in reads, then the mutations */
    sx_var *vars;
    int64_t cap_vars;
};

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Make g->par hold at least the given sizes (keeping the sequential scratch in front). */
static sx_status par_layout(sx_cg_graph *g, int slots, size_t ws_each, int64_t items, int64_t segs,
                            int max_in)
{
    struct cg_par *p = g->par;
    if (p != NULL && p->slots >= slots && p->ws_each >= ws_each && p->cap_items >= items &&
        p->cap_segs >= segs && p->max_in >= max_in)
        return SX_OK;
    if (p != NULL) { /* grow every part to at least what it had */
        slots = slots > p->slots ? slots : p->slots;
        ws_each = ws_each > p->ws_each ? ws_each : p->ws_each;
        items = items > p->cap_items ? items : p->cap_items;
        segs = segs > p->cap_segs ? segs : p->cap_segs;
        max_in = max_in > p->max_in ? max_in : p->max_in;
    }
    ws_each = round64(ws_each);
    if (ws_each > (SIZE_MAX / 4) / (size_t)slots || items > INT64_MAX / 64 ||
        segs > INT64_MAX / 64 || max_in > INT32_MAX / 8)
        return sx_error(SX_E_NOMEM, "sx_cg_eval: parallel scratch too large");
    /* a push: 2 reads per input; mutations: itself, 2 per written input, its generator, and
     * the last writers of its arena bytes (at most every segment) */
    int64_t vars = 4 * (int64_t)max_in + 2 + segs;
    size_t sz_par = round64(sizeof *p), sz_busy = round64((size_t)slots * sizeof *p->busy);
    size_t sz_items = round64((size_t)items * sizeof *p->items);
    size_t sz_segs = round64((size_t)segs * sizeof *p->segs);
    size_t sz_vars = round64((size_t)vars * sizeof *p->vars);
    size_t total = g->ws_bytes + 64 + sz_par + sz_busy + sz_items + sz_segs + sz_vars +
                   (size_t)slots * ws_each;
    char *block = sx_alloc(total);
    if (block == NULL)
        return SX_E_NOMEM;
    char *at = (char *)(((uintptr_t)block + g->ws_bytes + 63) & ~(uintptr_t)63);
    p = (struct cg_par *)at;
    at += sz_par;
    p->busy = (atomic_int *)at;
    at += sz_busy;
    p->items = (struct par_item *)at;
    at += sz_items;
    p->segs = (struct par_seg *)at;
    at += sz_segs;
    p->vars = (sx_var *)at;
    at += sz_vars;
    p->ws = at;
    p->slots = slots;
    p->ws_each = ws_each;
    p->cap_items = items;
    p->cap_segs = segs;
    p->max_in = max_in;
    p->cap_vars = vars;
    for (int i = 0; i < slots; i++)
        atomic_init(&p->busy[i], 0);
    sx_free(g->ws); /* the sequential scratch holds nothing between kernels */
    g->ws = block;
    g->par = p;
    return SX_OK;
}

/* An engine operation: compute one node with a free worker scratch buffer. */
static sx_status node_run(void *arg)
{
    struct par_item *it = arg;
    sx_cg_node *n = it->node;
    sx_cg_graph *g = n->graph;
    struct cg_par *p = g->par;
    /* at most `slots` nodes run at once, so one buffer is always free */
    int s = 0;
    while (atomic_exchange(&p->busy[s], 1) != 0)
        s = (s + 1) % p->slots;
    worker_ws.on = true;
    worker_ws.p = p->ws + (size_t)s * p->ws_each;
    worker_ws.bytes = p->ws_each;
    sx_status st = compute_node(g, n, &it->seconds);
    worker_ws.on = false;
    atomic_store(&p->busy[s], 0);
    return st;
}

/* The node whose storage n's value is (n itself unless n is a view). */
static const sx_cg_node *storage_root(const sx_cg_node *n)
{
    while ((sx_cg_ops[n->op].flags & SX_OPF_VIEW) && n->n_in > 0)
        n = n->in[0];
    return n;
}

/* Mark arena bytes [lo, hi) as written by `owner`; append to out the variables of the nodes that
 * wrote any of them last, and return how many. segs is sorted and disjoint; it grows by at most
 * two entries. */
static int paint(struct par_seg *segs, int64_t *n, size_t lo, size_t hi, sx_var owner, sx_var *out)
{
    int64_t a = 0, b = *n;
    while (a < b) { /* the first segment ending after lo */
        int64_t m = a + (b - a) / 2;
        if (segs[m].hi <= lo)
            a = m + 1;
        else
            b = m;
    }
    int64_t i = a, j = a;
    int k = 0;
    for (; j < *n && segs[j].lo < hi; j++)
        out[k++] = segs[j].owner;
    struct par_seg rep[3];
    int r = 0;
    if (i < j && segs[i].lo < lo)
        rep[r++] = (struct par_seg){segs[i].lo, lo, segs[i].owner};
    rep[r++] = (struct par_seg){lo, hi, owner};
    if (i < j && segs[j - 1].hi > hi)
        rep[r++] = (struct par_seg){hi, segs[j - 1].hi, segs[j - 1].owner};
    memmove(&segs[i + r], &segs[j], (size_t)(*n - j) * sizeof *segs);
    memcpy(&segs[i], rep, (size_t)r * sizeof *segs);
    *n += r - (j - i);
    return k;
}

/* Does the node at order position x run in this evaluation? */
static bool runs(const sx_cg_node *x, bool by_need)
{
    return by_need ? x->plan_need : !x->valid;
}

/* Does the evaluation push the node at order position x: every op node (all: a frozen graph's
 * layout, made once for any evaluation), or those that run? */
static bool pushes(const sx_cg_node *x, bool all, bool by_need)
{
    return !(sx_cg_ops[x->op].flags & SX_OPF_LEAF) && (all || runs(x, by_need));
}

/* Lay out the parallel state for evaluating `order` (see pushes). n_planned < 0: count the
 * planned nodes from the nodes themselves (else the plan is not committed yet). */
static sx_status par_reserve(sx_cg_graph *g, int workers, sx_cg_node *const *order, int64_t len,
                             bool all, bool by_need, int64_t n_planned)
{
    int64_t n_run = 0, planned = 0;
    int max_in = 0;
    size_t ws_need = g->ws_bytes;
    for (int64_t i = 0; i < len; i++) {
        const sx_cg_node *x = order[i];
        if (!pushes(x, all, by_need))
            continue;
        n_run++;
        planned += x->planned;
        max_in = x->n_in > max_in ? x->n_in : max_in;
        ws_need = x->ws_bytes > ws_need ? x->ws_bytes : ws_need;
    }
    if (n_planned >= 0)
        planned = n_planned;
    return par_layout(g, workers, ws_need, n_run, 2 * planned + 1, max_in);
}

/* The engine variables a graph's evaluation names: one per node, one per generator. */
static sx_status graph_vars(const sx_cg_graph *g, uint32_t *vars)
{
    if ((uint64_t)g->n_nodes + (uint64_t)g->n_rngs >= UINT32_MAX)
        return sx_error(SX_E_UNSUPPORTED, "sx_cg_eval: too many nodes for the engine");
    *vars = (uint32_t)(g->n_nodes + g->n_rngs);
    return SX_OK;
}

/* What op node x reads and mutates (the rules of sx_cgraph.h): its inputs and, through views,
 * their storage; itself, the parameters it writes (and their storage), its generator, and the
 * nodes that last wrote the arena bytes of its block (from segs, which its block then joins). */
static void node_claims(const sx_cg_graph *g, struct cg_par *p, int64_t *n_segs,
                        const sx_cg_node *x, int *nr, int *nm)
{
    sx_var *reads = p->vars, *muts = p->vars + 2 * p->max_in;
    *nr = *nm = 0;
    for (int j = 0; j < x->n_in; j++) {
        reads[(*nr)++] = (sx_var)x->in[j]->id;
        reads[(*nr)++] = (sx_var)storage_root(x->in[j])->id;
    }
    muts[(*nm)++] = (sx_var)x->id;
    for (int k = 0; k < cg_mutated(x); k++) {
        muts[(*nm)++] = (sx_var)x->in[k]->id;
        muts[(*nm)++] = (sx_var)storage_root(x->in[k])->id;
    }
    if (sx_cg_ops[x->op].flags & SX_OPF_RANDOM)
        muts[(*nm)++] = (sx_var)(g->n_nodes + x->attr.rng_id);
    if (x->planned)
        *nm += paint(p->segs, n_segs, x->plan_offset,
                     x->plan_offset + (size_t)x->value.size * sx_dtype_size(x->value.dtype),
                     (sx_var)x->id, muts + *nm);
}

/* Make the engine hold records and claims for pushing the nodes of `order` (see pushes), so
 * that the pushes allocate nothing: a dry run of the claims. */
static sx_status engine_room(const sx_cg_graph *g, sx_engine *e, sx_cg_node *const *order,
                             int64_t len, bool all, bool by_need)
{
    int64_t ops = 0, claims = 0, n_segs = 0;
    for (int64_t i = 0; i < len; i++) {
        if (!pushes(order[i], all, by_need))
            continue;
        int nr, nm;
        node_claims(g, g->par, &n_segs, order[i], &nr, &nm);
        ops++;
        claims += nr + nm;
    }
    return sx_engine_reserve(e, ops, claims);
}

/* Set up what a frozen graph's parallel evaluations use (its scratch layout, the engine, its
 * variables, and room in it for every node), so that they allocate nothing. Before the plan is
 * committed (n_planned >= 0), the engine's room is made at the first evaluation instead. */
static sx_status par_prepare_frozen(sx_cg_graph *g, int workers, sx_cg_node *const *order,
                                    int64_t len, int64_t n_planned)
{
    uint32_t vars = 0;
    SX_TRY(graph_vars(g, &vars));
    SX_TRY(par_reserve(g, workers, order, len, true, false, n_planned));
    pooled *eng = NULL;
    SX_TRY(engine_take(workers, vars, &eng));
    if (eng == NULL)
        return SX_OK;
    sx_status s = n_planned < 0 ? engine_room(g, eng->e, order, len, true, false) : SX_OK;
    engine_give(eng);
    return s;
}

/* Evaluate the nodes of `order` that run (plan_need when by_need, else the invalid ones) on an
 * engine of `workers` workers: in order, each pushed with its tags (see sx_cgraph.h), leaves
 * checked here. *done = false when no engine is free (nothing happened: run sequentially). */
static sx_status par_run(sx_cg_graph *g, int workers, sx_cg_node *const *order, int64_t len,
                         bool by_need, bool *done)
{
    *done = false;
    uint32_t vars = 0;
    SX_TRY(graph_vars(g, &vars));
    SX_TRY(par_reserve(g, workers, order, len, g->frozen, by_need, -1));
    pooled *eng = NULL;
    SX_TRY(engine_take(workers, vars, &eng));
    if (eng == NULL)
        return SX_OK;
    *done = true;
    sx_status st = engine_room(g, eng->e, order, len, false, by_need);

    struct cg_par *p = g->par;
    int64_t n_items = 0, n_segs = 0;
    char leaf_msg[512] = "";
    for (int64_t i = 0; i < len && st == SX_OK; i++) {
        sx_cg_node *x = order[i];
        if (!runs(x, by_need))
            continue;
        if (sx_cg_ops[x->op].flags & SX_OPF_LEAF) { /* a check, here */
            st = cg_compute(g, x);
            if (st != SX_OK)
                snprintf(leaf_msg, sizeof leaf_msg, "%s", sx_last_error());
            continue;
        }
        st = cg_storage(g, x); /* the owner allocates (lazy graphs), never a worker */
        if (st != SX_OK)
            break;
        int nr, nm;
        node_claims(g, p, &n_segs, x, &nr, &nm);
        p->items[n_items] = (struct par_item){x, 0};
        st = sx_engine_push(eng->e, node_run, &p->items[n_items], p->vars, nr,
                            p->vars + 2 * p->max_in, nm, node_wide(x) ? SX_ENGINE_WIDE : 0);
        n_items += st == SX_OK;
    }
    sx_status est = sx_engine_wait_all(eng->e);
    engine_give(eng);
    for (int64_t k = 0; k < n_items; k++) {
        sx_cg_node *x = p->items[k].node;
        if (x->ran == g->run_epoch)
            count_run(g, x, p->items[k].seconds);
    }
    if (est != SX_OK)
        return est; /* a node's failure came before the owner's (it was pushed earlier) */
    if (st != SX_OK && leaf_msg[0] != '\0')
        sx_error(st, "%s", leaf_msg); /* the wait may have overwritten the message */
    return st;
}

/* Evaluate `order` sequentially or in parallel, as the graph's workers say. */
static sx_status run_nodes(sx_cg_graph *g, sx_cg_node *const *order, int64_t len, bool by_need)
{
    int w = sx_cg_workers(g);
    if (w >= 2) {
        bool done = false;
        sx_status s = par_run(g, w, order, len, by_need, &done);
        if (done || s != SX_OK)
            return s;
    }
    for (int64_t i = 0; i < len; i++)
        if (runs(order[i], by_need))
            SX_TRY(cg_compute(g, order[i]));
    return SX_OK;
}

sx_status sx_cg_set_workers(sx_cg_graph *g, int n)
{
    if (g == NULL)
        return sx_error(SX_E_ARG, "sx_cg_set_workers: graph is NULL");
    if (n < 0 || n > 256)
        return sx_error(SX_E_ARG, "sx_cg_set_workers: %d workers (want 0..256)", n);
    int old = g->workers;
    g->workers = n;
    int w = sx_cg_workers(g);
    if (g->frozen && w >= 2) {
        sx_status s = par_prepare_frozen(g, w, g->order, g->n_order, -1);
        if (s != SX_OK) {
            g->workers = old;
            return s;
        }
    }
    return SX_OK;
}

int sx_cg_workers(const sx_cg_graph *g)
{
    if (g == NULL)
        return 1;
    int n = g->workers;
    if (n == 0) {
        const char *env = getenv("SX_ENGINE_WORKERS");
        n = env != NULL ? atoi(env) : 1;
        n = n >= 2 && n <= 256 ? n : 1;
    }
    return n;
}

/* ---------------------------------------------------------------- evaluation */

static sx_status check_request(const char *who, sx_cg_graph *g, int n, sx_cg_node *const *nodes)
{
    if (g == NULL)
        return sx_error(SX_E_ARG, "%s: graph is NULL", who);
    if (n < 0 || (n > 0 && nodes == NULL))
        return sx_error(SX_E_ARG, "%s: bad node list", who);
    for (int i = 0; i < n; i++) {
        if (nodes[i] == NULL || nodes[i]->graph != g || nodes[i]->dead)
            return sx_error(SX_E_ARG, "%s: node %d is NULL, removed or of another graph", who, i);
    }
    return SX_OK;
}

static sx_cg_node **realloc_nodes(sx_cg_node **p, int n)
{
    sx_cg_node **q = sx_realloc(p, (size_t)n * sizeof *q);
    if (q == NULL)
        sx_error_clear(); /* remembering a request is optional */
    return q;
}

sx_status sx_cg_eval(sx_cg_graph *g, int n, sx_cg_node *const *nodes)
{
    /* a graph asked again for what it last found valid, with nothing invalidated since:
     * one comparison of the request */
    if (g != NULL && n > 0 && n == g->memo_n && g->memo_version == g->version && nodes != NULL &&
        memcmp(nodes, g->memo, (size_t)n * sizeof *nodes) == 0)
        return SX_OK;
    /* the common case first, in one pass: every requested node is valid */
    bool all_valid = g != NULL && n >= 0 && (n == 0 || nodes != NULL);
    for (int i = 0; i < n && all_valid; i++) {
        const sx_cg_node *x = nodes[i];
        all_valid = x != NULL && x->valid && x->graph == g && !x->dead;
    }
    if (all_valid) {
        if (!g->frozen && n > g->memo_cap) { /* a lazy graph may grow its memo */
            sx_cg_node **m = realloc_nodes(g->memo, n);
            if (m != NULL) {
                g->memo = m;
                g->memo_cap = n;
            }
        }
        if (n > 0 && n <= g->memo_cap) {
            memcpy(g->memo, nodes, (size_t)n * sizeof *nodes);
            g->memo_n = n;
            g->memo_version = g->version;
        }
        return SX_OK;
    }
    SX_TRY(check_request("sx_cg_eval", g, n, nodes));

    if (g->frozen) {
        for (int i = 0; i < n; i++)
            if (!nodes[i]->frozen_member)
                return sx_error(SX_E_STATE,
                                "sx_cg_eval: node %lld is not needed by the frozen outputs",
                                (long long)nodes[i]->id);
        g->run_epoch++;
        sx_status s;
        if (g->n_planned > 0) {
            s = cg_plan_select(g, n, nodes);
            if (s == SX_OK)
                s = run_nodes(g, g->order, g->n_order, true);
            for (int64_t i = 0; i < g->n_order; i++)
                g->order[i]->plan_need = false;
        } else {
            s = run_nodes(g, g->order, g->n_order, false);
        }
        cg_finish_run(g, g->order, g->n_order);
        return s;
    }

    int64_t count = 0, len = 0;
    SX_TRY(mark_needed(g, n, nodes, false, &count));
    sx_cg_node **order = sx_alloc((size_t)count * sizeof *order);
    if (order == NULL)
        return SX_E_NOMEM;
    g->run_epoch++;
    sx_status s = topo_order(g, n, nodes, count, order, &len);
    if (s == SX_OK)
        s = run_nodes(g, order, len, false);
    cg_finish_run(g, order, len);
    sx_free(order);
    return s;
}

/* ---------------------------------------------------------------- freezing */

sx_cg_freeze_params sx_cg_freeze_params_default(void)
{
    sx_cg_freeze_params p = {true, true, NULL, 0};
    return p;
}

sx_status sx_cg_freeze(sx_cg_graph *g, int n, sx_cg_node *const *outputs)
{
    sx_cg_freeze_params p = sx_cg_freeze_params_default();
    return sx_cg_freeze_ex(g, n, outputs, &p, NULL);
}

/* Order, plan (plan.c), then every allocation (arena, own buffers of the kept nodes, scratch);
 * the graph changes only once all of them succeeded. Own buffers made before a failure stay
 * with their nodes (as after a lazy evaluation) and are freed with the graph. */
sx_status sx_cg_freeze_ex(sx_cg_graph *g, int n, sx_cg_node *const *outputs,
                          const sx_cg_freeze_params *p, sx_cg_plan_report *report)
{
    double t0 = cg_seconds();
    SX_TRY(check_request("sx_cg_freeze", g, n, outputs));
    if (g->frozen)
        return sx_error(SX_E_STATE, "sx_cg_freeze: the graph is already frozen");
    if (n == 0)
        return sx_error(SX_E_ARG, "sx_cg_freeze: no outputs");
    sx_cg_freeze_params def = sx_cg_freeze_params_default();
    if (p == NULL)
        p = &def;
    int64_t count = 0, len = 0;
    SX_TRY(mark_needed(g, n, outputs, true, &count));
    sx_cg_node **order = sx_alloc((size_t)count * sizeof *order);
    sx_cg_node **outs = sx_alloc((size_t)n * sizeof *outs);
    sx_cg_node **memo = realloc_nodes(g->memo, n); /* room to remember one request */
    cg_plan plan;
    memset(&plan, 0, sizeof plan);
    if (memo != NULL) {
        g->memo = memo;
        g->memo_cap = n;
        g->memo_n = 0;
    }
    sx_status s = order && outs && memo ? SX_OK : SX_E_NOMEM;
    if (s == SX_OK)
        s = topo_order(g, n, outputs, count, order, &len);
    if (s == SX_OK)
        s = cg_plan_make(g, order, len, n, outputs, p, &plan);
    size_t ws = 0;
    for (int64_t i = 0; s == SX_OK && i < len; i++) {
        if (!cg_plan_planned(&plan, i))
            s = cg_storage(g, order[i]);
        if (order[i]->ws_bytes > ws)
            ws = order[i]->ws_bytes;
    }
    void *wsp = NULL;
    if (s == SX_OK && ws > 0)
        s = cg_workspace(g, ws, &wsp);
    if (s == SX_OK && sx_cg_workers(g) >= 2) {
        int64_t n_planned = 0;
        for (int64_t i = 0; i < len; i++)
            n_planned += cg_plan_planned(&plan, i);
        s = par_prepare_frozen(g, sx_cg_workers(g), order, len, n_planned);
    }
    if (s != SX_OK) {
        cg_plan_discard(&plan);
        sx_free(order);
        sx_free(outs);
        return s;
    }
    sx_cg_plan_report rep = plan.report;
    cg_plan_commit(g, order, len, &plan);
    for (int64_t i = 0; i < len; i++)
        order[i]->frozen_member = true;
    memcpy(outs, outputs, (size_t)n * sizeof *outs);
    g->order = order;
    g->n_order = len;
    g->outputs = outs;
    g->n_outputs = n;
    g->memo_cap = n;
    g->memo_n = 0;
    g->frozen = true;
    if (sx_cg_workers(g) >= 2 &&
        par_prepare_frozen(g, sx_cg_workers(g), g->order, g->n_order, -1) != SX_OK)
        sx_error_clear(); /* room in the engine is made at the first evaluation instead */
    if (report != NULL) {
        rep.workspace_bytes = g->ws_bytes;
        rep.seconds = cg_seconds() - t0;
        *report = rep;
    }
    return SX_OK;
}

bool sx_cg_frozen(const sx_cg_graph *g)
{
    return g != NULL && g->frozen;
}
