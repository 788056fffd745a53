/* exec.c: running nodes. A node is computed once its inputs are valid: its storage is made
 * if it has none, its kernel runs with its own block of the arena when the plan gave it one,
 * else with the graph's scratch (or, on an engine worker, that worker's), and it is marked valid;
 * an order of nodes runs by need-based recomputation (only the invalid ones, or those a
 * planned evaluation selected). After a run, what read a parameter a node wrote is invalidated.
 * Uses graph.c and profile.c only. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "cgraph_impl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- storage and compute */

/* The scratch of the node this thread is running when it is not the graph's: its block of the
 * arena (a planned graph, plan.c), or the buffer of the engine worker running it (par.c). */
typedef struct node_ws {
    bool on;
    void *p;
    size_t bytes;
} node_ws;

static _Thread_local node_ws worker_ws;

sx_status cg_workspace(sx_cg_graph *g, size_t bytes, void **ws)
{
    if (worker_ws.on) {
        if (bytes > worker_ws.bytes)
            return sx_error(SX_E_STATE, "cgraph: a node needs %zu scratch bytes, its block has %zu",
                            bytes, worker_ws.bytes);
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

/* CPU seconds of every thread of the process (profiling: with the kernels' thread pool, the
 * extra CPU time two threads take over one is their spinning, waiting and duplicated work). */
static double process_cpu_seconds(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The part of computing a node that touches only the node: checks, storage, the kernel (timed
 * into *seconds when profiling, and its process CPU time into *cpu when cpu is not NULL), the
 * valid flag. Engine workers run this (storage is then given beforehand); the graph's counters
 * are the caller's. */
static sx_status compute_node(sx_cg_graph *g, sx_cg_node *n, double *seconds, double *cpu)
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
    node_ws saved = worker_ws;
    if (n->ws_planned)
        worker_ws = (node_ws){true, g->arena + n->ws_offset, n->ws_bytes};
    const bool cpu_on = g->profile && cpu != NULL;
    double c0 = cpu_on ? process_cpu_seconds() : 0, t0 = g->profile ? sx_seconds() : 0;
    sx_status st = sx_cg_ops[n->op].eval(g, n);
    *seconds = g->profile ? sx_seconds() - t0 : 0;
    if (cpu_on)
        *cpu = process_cpu_seconds() - c0;
    worker_ws = saved;
    SX_TRY(st);
    n->valid = true;
    n->ran = g->run_epoch;
    return SX_OK;
}

void cg_count_run(sx_cg_graph *g, sx_cg_node *n, double seconds, double cpu)
{
    if (g->profile) {
        g->prof_seconds[n->op] += seconds;
        g->prof_calls[n->op]++;
        g->prof_cpu[n->op] += cpu;
        n->prof_cpu += cpu;
        n->prof_seconds += seconds;
        n->prof_calls++;
    }
    g->kernel_calls++;
}

sx_status cg_compute(sx_cg_graph *g, sx_cg_node *n)
{
    double seconds = 0, cpu = 0;
    SX_TRY(compute_node(g, n, &seconds, &cpu));
    if (!(sx_cg_ops[n->op].flags & SX_OPF_LEAF))
        cg_count_run(g, n, seconds, cpu);
    return SX_OK;
}

sx_status cg_compute_on(sx_cg_graph *g, sx_cg_node *n, void *ws, size_t ws_bytes, double *seconds)
{
    worker_ws.on = true;
    worker_ws.p = ws;
    worker_ws.bytes = ws_bytes;
    sx_status st = compute_node(g, n, seconds, NULL);
    worker_ws.on = false;
    return st;
}

sx_status cg_run_seq(sx_cg_graph *g, sx_cg_node *const *order, int64_t len, bool by_need)
{
    for (int64_t i = 0; i < len; i++)
        if (cg_runs(order[i], by_need))
            SX_TRY(cg_compute(g, order[i]));
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
