/* order.c: what an evaluation or a freeze runs, and in which order. A request is checked,
 * the nodes it needs are marked (every ancestor, or only the invalid ones), and a post-order
 * DFS writes a topological order where every other reader of a parameter runs before an assign
 * to it. Depends on graph.c only. */
#include "cgraph_impl.h"

enum { ST_NONE = 0, ST_OPEN = 1, ST_DONE = 2 };

/* The dependencies of n that must run before it in this traversal: its inputs, and for a
 * mutating node the other readers of the parameters it writes (only those in the current set,
 * i.e. marked with this epoch; a reader that reads the mutating node itself, like seq, sees the
 * new value by definition). A reader through views (a reshape of the parameter, a reshape of
 * that) reads the same storage, so the readers of a view are readers too, up to CG_VIEW_DEPTH
 * views deep (deeper chains: the evaluation refuses the graph rather than risk reading a value
 * the mutation already overwrote). Runs BODY with `dep` bound to each. */
#define CG_VIEW_DEPTH 16
#define FOR_EACH_DEP(g, n, dep, BODY)                                                              \
    do {                                                                                           \
        for (int di_ = 0; di_ < (n)->n_in; di_++) {                                                \
            sx_cg_node *dep = (n)->in[di_];                                                        \
            BODY;                                                                                  \
        }                                                                                          \
        for (int mi_ = 0; mi_ < cg_mutated(n); mi_++) {                                            \
            sx_cg_node *at_[CG_VIEW_DEPTH + 1];                                                    \
            int ui_[CG_VIEW_DEPTH + 1], top_ = 1;                                                  \
            at_[0] = (n)->in[mi_];                                                                 \
            ui_[0] = 0;                                                                            \
            while (top_ > 0) {                                                                     \
                if (ui_[top_ - 1] == at_[top_ - 1]->n_users) {                                     \
                    top_--;                                                                        \
                    continue;                                                                      \
                }                                                                                  \
                sx_cg_node *dep = at_[top_ - 1]->users[ui_[top_ - 1]++];                           \
                if (dep == (n) || cg_mutated(dep) > 0 || dep->mark != (g)->epoch ||                \
                    cg_reads(dep, (n)))                                                            \
                    continue;                                                                      \
                if (sx_cg_ops[dep->op].flags & SX_OPF_VIEW) {                                      \
                    if (top_ > CG_VIEW_DEPTH)                                                      \
                        return sx_error(SX_E_STATE,                                                \
                                        "sx_cg_eval: node %lld (%s) reads a parameter through "    \
                                        "more than %d views",                                      \
                                        (long long)dep->id, sx_cg_op_name(dep->op),                \
                                        CG_VIEW_DEPTH);                                            \
                    at_[top_] = dep;                                                               \
                    ui_[top_++] = 0;                                                               \
                }                                                                                  \
                BODY;                                                                              \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Mark (with a new epoch) every node the roots need: all ancestors when `all`, otherwise only
 * invalid ones (valid nodes are not entered). Returns how many were marked. */
sx_status cg_mark_needed(sx_cg_graph *g, int n, sx_cg_node *const *roots, bool all, int64_t *count)
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
sx_status cg_topo_order(sx_cg_graph *g, int n, sx_cg_node *const *roots, int64_t count,
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

/* ---------------------------------------------------------------- requests */

sx_status cg_check_request(const char *who, sx_cg_graph *g, int n, sx_cg_node *const *nodes)
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

sx_cg_node **cg_realloc_nodes(sx_cg_node **p, int n)
{
    sx_cg_node **q = sx_realloc(p, (size_t)n * sizeof *q);
    if (q == NULL)
        sx_error_clear(); /* remembering a request is optional */
    return q;
}
