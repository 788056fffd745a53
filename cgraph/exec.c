/* exec.c: evaluation. Need-based recomputation (seed 003): nodes carry a valid flag, changes
 * invalidate only dependents, and sx_cg_eval computes the invalid nodes the requested ones need,
 * in a topological order where every other reader of a parameter runs before an assign to it.
 * Freezing fixes that order and the storage once, so later evaluations allocate nothing. */
#include "cgraph_impl.h"

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

sx_status cg_workspace(sx_cg_graph *g, size_t bytes, void **ws)
{
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

sx_status cg_compute(sx_cg_graph *g, sx_cg_node *n)
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
    if (g->profile) {
        double t0 = cg_seconds();
        SX_TRY(sx_cg_ops[n->op].eval(g, n));
        double dt = cg_seconds() - t0;
        g->prof_seconds[n->op] += dt;
        g->prof_calls[n->op]++;
        n->prof_seconds += dt;
        n->prof_calls++;
    } else {
        SX_TRY(sx_cg_ops[n->op].eval(g, n));
    }
    g->kernel_calls++;
    n->valid = true;
    n->ran = g->run_epoch;
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

static sx_status run_order(sx_cg_graph *g, sx_cg_node *const *order, int64_t len)
{
    for (int64_t i = 0; i < len; i++) {
        sx_cg_node *x = order[i];
        if (!x->valid)
            SX_TRY(cg_compute(g, x));
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
        sx_status s =
            g->n_planned > 0 ? cg_plan_run(g, n, nodes) : run_order(g, g->order, g->n_order);
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
        s = run_order(g, order, len);
    cg_finish_run(g, order, len);
    sx_free(order);
    return s;
}

/* ---------------------------------------------------------------- freezing */

sx_cg_freeze_params sx_cg_freeze_params_default(void)
{
    sx_cg_freeze_params p = {true, true};
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
