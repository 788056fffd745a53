/* par.c: the parallel driver. With workers (sx_cg_set_workers) an evaluation pushes the nodes
 * it runs, in the sequential order, to a dependency engine whose read/mutate tags
 * (inputs, written parameters, generators, reused arena bytes) keep every result equal to the
 * sequential one. Engines are pooled per process; the driver's state lives in the graph's
 * scratch. Uses exec.c (running one node) and graph.c. */
#include "cgraph_impl.h"
#include "sx_engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    cg_cost c = cg_node_cost(n); /* cost.c */
    if (c.gemm && c.flops >= WIDE_FLOPS)
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
     * its scratch and the last writers of its arena bytes, value and scratch (at most every
     * segment, twice) */
    int64_t vars = 4 * (int64_t)max_in + 3 + 2 * segs;
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
    sx_status st = cg_compute_on(g, n, p->ws + (size_t)s * p->ws_each, p->ws_each, &it->seconds);
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

/* Does the evaluation push the node at order position x: every op node (all: a frozen graph's
 * layout, made once for any evaluation), or those that run? */
static bool pushes(const sx_cg_node *x, bool all, bool by_need)
{
    return !(sx_cg_ops[x->op].flags & SX_OPF_LEAF) && (all || cg_runs(x, by_need));
}

/* Lay out the parallel state for evaluating `order` (see pushes). n_planned < 0: count the
 * planned nodes from the nodes themselves (else the plan is not committed yet). */
static sx_status par_reserve(sx_cg_graph *g, int workers, sx_cg_node *const *order, int64_t len,
                             bool all, bool by_need, int64_t n_planned)
{
    int64_t n_run = 0, planned = 0, n_ws = 0;
    int max_in = 0;
    size_t ws_need = g->ws_bytes;
    for (int64_t i = 0; i < len; i++) {
        const sx_cg_node *x = order[i];
        if (!pushes(x, all, by_need))
            continue;
        n_run++;
        planned += x->planned;
        max_in = x->n_in > max_in ? x->n_in : max_in;
        if (x->ws_planned) /* its scratch is in the arena: painted like a value */
            n_ws++;
        else
            ws_need = x->ws_bytes > ws_need ? x->ws_bytes : ws_need;
    }
    if (n_planned >= 0)
        planned = n_planned;
    return par_layout(g, workers, ws_need, n_run, 2 * (planned + n_ws) + 1, max_in);
}

/* The engine variables a graph's evaluation names: one per node, one per generator, then one
 * per node for its scratch block in the arena. */
static sx_status graph_vars(const sx_cg_graph *g, uint32_t *vars)
{
    if (2 * (uint64_t)g->n_nodes + (uint64_t)g->n_rngs >= UINT32_MAX)
        return sx_error(SX_E_UNSUPPORTED, "sx_cg_eval: too many nodes for the engine");
    *vars = (uint32_t)(2 * g->n_nodes + g->n_rngs);
    return SX_OK;
}

/* What op node x reads and mutates (the rules of sx_cgraph.h): its inputs and, through views,
 * their storage; itself, the parameters it writes (and their storage), its generator, and the
 * nodes that last wrote the arena bytes of its block and of its scratch block (from segs, which
 * its blocks then join). */
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
    if (x->ws_planned) { /* its scratch: a variable of its own, so that what overlaps it later
                            waits for x's run alone, not for x's readers */
        sx_var ws = (sx_var)(g->n_nodes + g->n_rngs + x->id);
        muts[(*nm)++] = ws;
        *nm += paint(p->segs, n_segs, x->ws_offset, x->ws_offset + x->ws_bytes, ws, muts + *nm);
    }
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
sx_status cg_par_prepare_frozen(sx_cg_graph *g, int workers, sx_cg_node *const *order, int64_t len,
                                int64_t n_planned)
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
sx_status cg_par_run(sx_cg_graph *g, int workers, sx_cg_node *const *order, int64_t len,
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
        if (!cg_runs(x, by_need))
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
            cg_count_run(g, x, p->items[k].seconds, 0);
    }
    if (est != SX_OK)
        return est; /* a node's failure came before the owner's (it was pushed earlier) */
    if (st != SX_OK && leaf_msg[0] != '\0')
        sx_error(st, "%s", leaf_msg); /* the wait may have overwritten the message */
    return st;
}

sx_status sx_cg_set_workers(sx_cg_graph *g, int n)
{
    if (g == NULL)
        return sx_error(SX_E_ARG, "sx_cg_set_workers: graph is NULL");
    if (n < 0 || n > SX_ENGINE_MAX_WORKERS)
        return sx_error(SX_E_ARG, "sx_cg_set_workers: %d workers (want 0..%d)", n,
                        SX_ENGINE_MAX_WORKERS);
    int old = g->workers;
    g->workers = n;
    int w = sx_cg_workers(g);
    if (g->frozen && w >= 2) {
        sx_status s = cg_par_prepare_frozen(g, w, g->order, g->n_order, -1);
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
        n = n >= 2 && n <= SX_ENGINE_MAX_WORKERS ? n : 1;
    }
    return n;
}
