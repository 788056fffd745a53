/* run.c: the entry points that evaluate: sx_cg_eval (a lazy graph's invalid nodes in a fresh
 * order, a frozen graph's fixed order, planned or not; sequentially or on the parallel driver)
 * and sx_cg_op_new, which constructs a node (graph.c) and, in an eager graph, evaluates it
 * before linking it. The top of cgraph's evaluation: uses order.c, exec.c, par.c and plan.c,
 * and nothing below calls back into it. */
#include "cgraph_impl.h"

#include <string.h>

/* Evaluate `order` sequentially or in parallel, as the graph's workers say. The kernel pool's
 * idle workers keep spinning across the serial gaps between the kernels' parallel loops
 * (sx__par_hold) instead of falling asleep between two kernels. */
static sx_status run_nodes(sx_cg_graph *g, sx_cg_node *const *order, int64_t len, bool by_need)
{
    int w = sx_cg_workers(g);
    if (w >= 2) {
        bool done = false;
        sx_status s = cg_par_run(g, w, order, len, by_need, &done);
        if (done || s != SX_OK)
            return s;
    }
    const bool hold = len > 1;
    if (hold)
        sx__par_hold();
    sx_status s = cg_run_seq(g, order, len, by_need);
    if (hold)
        sx__par_release();
    return s;
}

/* ---------------------------------------------------------------- evaluation */

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
            sx_cg_node **m = cg_realloc_nodes(g->memo, n);
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
    SX_TRY(cg_check_request("sx_cg_eval", g, n, nodes));

    if (g->frozen) {
        for (int i = 0; i < n; i++)
            if (!nodes[i]->frozen_member)
                return sx_error(SX_E_STATE,
                                "sx_cg_eval: node %lld is not needed by the frozen outputs",
                                (long long)nodes[i]->id);
        g->run_epoch++;
        /* what the request needs (planned or not: a subset runs only its part) */
        sx_status s = cg_plan_select(g, n, nodes);
        if (s == SX_OK)
            s = run_nodes(g, g->order, g->n_order, true);
        for (int64_t i = 0; i < g->n_order; i++)
            g->order[i]->plan_need = false;
        cg_finish_run(g, g->order, g->n_order);
        return s;
    }

    int64_t count = 0, len = 0;
    SX_TRY(cg_mark_needed(g, n, nodes, false, &count));
    sx_cg_node **order = sx_alloc((size_t)count * sizeof *order);
    if (order == NULL)
        return SX_E_NOMEM;
    g->run_epoch++;
    sx_status s = cg_topo_order(g, n, nodes, count, order, &len);
    if (s == SX_OK)
        s = run_nodes(g, order, len, false);
    cg_finish_run(g, order, len);
    sx_free(order);
    return s;
}

/* ---------------------------------------------------------------- construction */

/* Construction is graph.c's; an eager graph computes the node between making and linking it,
 * so that a node whose kernel fails never enters the graph. */
sx_cg_node *sx_cg_op_new(sx_cg_graph *g, sx_cg_op op, int n_in, sx_cg_node *const *in,
                         const sx_cg_attr *attr)
{
    bool fresh = false;
    sx_cg_node *n = cg_op_make(g, op, n_in, in, attr, &fresh);
    if (n == NULL || !fresh)
        return n;
    bool eager = g->mode == SX_CG_EAGER;
    sx_status s = SX_OK;
    if (eager) {
        /* inputs changed since they were computed (or never given a value) come first */
        s = sx_cg_eval(g, n_in, in);
        if (s == SX_OK) {
            g->run_epoch++;
            s = cg_compute(g, n);
        }
    }
    if (s == SX_OK)
        s = cg_op_link(g, n);
    if (s != SX_OK) {
        cg_node_discard(n);
        cg_fail(g, s);
        return NULL;
    }
    if (eager)
        cg_finish_run(g, &n, 1);
    return n;
}
