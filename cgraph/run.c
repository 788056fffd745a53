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
