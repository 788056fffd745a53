/* copy.c: copying a graph, optionally for another batch size. Every node is made again through
 * the ordinary constructors, so shape inference re-checks the whole graph for the new shapes. */
#include "cgraph_impl.h"

#include <string.h>

/* The copy, its leaves sharing g's values when `share` (sx_cg_graph_copy_shared). */
static sx_status copy(const char *who, const sx_cg_graph *g, int n, sx_cg_node *const *outs,
                      int64_t batch, bool share, sx_cg_graph **out, sx_cg_node **new_outs)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    if (g == NULL || n < 1 || outs == NULL || new_outs == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument or no outputs", who);
    for (int i = 0; i < n; i++)
        if (outs[i] == NULL || outs[i]->graph != g || outs[i]->dead)
            return sx_error(SX_E_ARG, "%s: output %d is NULL, removed or of another graph", who, i);
    /* which nodes the outputs need (ids are a topological order) */
    int64_t top = 0;
    for (int i = 0; i < n; i++)
        if (outs[i]->id > top)
            top = outs[i]->id;
    bool *need = sx_calloc((size_t)top + 1, sizeof *need);
    sx_cg_node **map = sx_calloc((size_t)top + 1, sizeof *map);
    sx_cg_graph *c = NULL;
    sx_status s = need && map ? sx_cg_graph_new(SX_CG_LAZY, g->dtype, &c) : SX_E_NOMEM;
    if (s == SX_OK)
        c->workers = g->workers; /* the copy evaluates as the original does */
    for (int i = 0; i < n; i++)
        if (s == SX_OK)
            need[outs[i]->id] = true;
    for (int64_t id = top; s == SX_OK && id >= 0; id--) {
        sx_cg_node *x = g->nodes[id];
        if (!need[id] || x->dead)
            continue;
        for (int k = 0; k < x->n_in; k++)
            need[x->in[k]->id] = true;
    }
    for (int r = 0; s == SX_OK && r < g->n_rngs; r++) {
        int id;
        s = sx_cg_rng_new(c, 0, &id);
        if (s == SX_OK)
            c->rngs[id] = g->rngs[r];
    }
    for (int64_t id = 0; s == SX_OK && id <= top; id++) {
        sx_cg_node *x = g->nodes[id], *y = NULL;
        if (!need[id] || x->dead)
            continue;
        const sx_tensor *v = &x->value;
        s = sx_cg_scope_set(c, sx_cg_node_scope(x));
        if (s != SX_OK)
            break;
        if (x->op == SX_OP_INPUT) {
            int64_t shape[SX_MAX_RANK];
            memcpy(shape, v->shape, sizeof shape);
            if (batch > 0 && v->rank > 0)
                shape[0] = batch;
            y = sx_cg_input(c, x->name, v->dtype, v->rank, shape);
        } else if (x->op == SX_OP_CONST || x->op == SX_OP_PARAM) {
            if (v->data == NULL && v->size > 0) {
                s = sx_error(SX_E_STATE, "%s: leaf %lld has no value", who, (long long)id);
                break;
            }
            y = share && v->data != NULL ? cg_leaf_share(c, x)
                : x->op == SX_OP_CONST   ? sx_cg_const(c, v)
                                         : sx_cg_param(c, x->name, v);
        } else {
            sx_cg_node *in[SX_CG_MAX_INPUTS]; /* a node has at most that many */
            for (int k = 0; k < x->n_in; k++)
                in[k] = map[x->in[k]->id];
            y = sx_cg_op_new(c, x->op, x->n_in, in, &x->attr);
            if (y != NULL && x->name != NULL)
                s = sx_cg_node_set_name(c, y, x->name);
        }
        if (y == NULL && s == SX_OK)
            s = sx_cg_graph_status(c) != SX_OK ? sx_cg_graph_status(c) : SX_E_NOMEM;
        map[id] = y;
    }
    if (s == SX_OK) {
        for (int i = 0; i < n; i++)
            new_outs[i] = map[outs[i]->id];
        *out = c;
    } else {
        sx_cg_graph_free(c);
    }
    sx_free(need);
    sx_free(map);
    return s;
}

sx_status sx_cg_graph_copy(const sx_cg_graph *g, int n, sx_cg_node *const *outs, int64_t batch,
                           sx_cg_graph **out, sx_cg_node **new_outs)
{
    return copy("sx_cg_graph_copy", g, n, outs, batch, false, out, new_outs);
}

sx_status sx_cg_graph_copy_shared(const sx_cg_graph *g, int n, sx_cg_node *const *outs,
                                  int64_t batch, sx_cg_graph **out, sx_cg_node **new_outs)
{
    return copy("sx_cg_graph_copy_shared", g, n, outs, batch, true, out, new_outs);
}
