/* profile.c: profiling of evaluations. The kernel time of every node is added to its op's and
 * its own totals when the graph profiles (sx_cg_profile_enable), and printed per op and per
 * scope. Depends on graph.c only; exec.c and par.c feed it through sx_seconds. */
#include "cgraph_impl.h"

#include <string.h>

void sx_cg_profile_enable(sx_cg_graph *g, bool on)
{
    if (g != NULL)
        g->profile = on;
}

bool sx_cg_profile_enabled(const sx_cg_graph *g)
{
    return g != NULL && g->profile;
}

void sx_cg_profile_reset(sx_cg_graph *g)
{
    if (g == NULL)
        return;
    memset(g->prof_seconds, 0, sizeof g->prof_seconds);
    memset(g->prof_calls, 0, sizeof g->prof_calls);
    memset(g->prof_cpu, 0, sizeof g->prof_cpu);
    for (int64_t i = 0; i < g->n_nodes; i++) {
        g->nodes[i]->prof_cpu = 0;
        g->nodes[i]->prof_seconds = 0;
        g->nodes[i]->prof_calls = 0;
    }
}

/* The `top` nodes taking the most time (at most 10 when top <= 0), with their op, shape, input
 * shapes and scope: which product or pass of a layer costs what. */
static void print_top_nodes(const sx_cg_graph *g, int top, double total, FILE *f)
{
    enum { MAX_TOP = 64 };
    const sx_cg_node *best[MAX_TOP];
    int want = top <= 0 ? 10 : top < MAX_TOP ? top : MAX_TOP, n = 0;
    for (int64_t i = 0; i < g->n_nodes; i++) {
        const sx_cg_node *x = g->nodes[i];
        if (x->prof_calls == 0 || (n == want && x->prof_seconds <= best[n - 1]->prof_seconds))
            continue;
        int j = n < want ? n++ : n - 1;
        for (; j > 0 && best[j - 1]->prof_seconds < x->prof_seconds; j--)
            best[j] = best[j - 1];
        best[j] = x;
    }
    if (n == 0)
        return;
    fprintf(f, "%-20s %10s %12s %7s  %s\n", "node", "calls", "ms", "share",
            "shape <- inputs [scope]");
    for (int i = 0; i < n; i++) {
        const sx_cg_node *x = best[i];
        char buf[256];
        size_t k = 0;
        for (int in = -1; in < x->n_in && k < sizeof buf - 40; in++) {
            const sx_tensor *t = in < 0 ? &x->value : &x->in[in]->value;
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s(",
                                  in < 0    ? ""
                                  : in == 0 ? " <- "
                                            : " ");
            for (int d = 0; d < t->rank && k < sizeof buf - 24; d++)
                k += (size_t)snprintf(buf + k, sizeof buf - k, d ? ",%lld" : "%lld",
                                      (long long)t->shape[d]);
            k += (size_t)snprintf(buf + k, sizeof buf - k, ")");
        }
        fprintf(f, "%-20s %10lld %12.1f %6.1f%%  %s [%s]\n", sx_cg_op_name(x->op),
                (long long)x->prof_calls, 1e3 * x->prof_seconds,
                total > 0 ? 100 * x->prof_seconds / total : 0, buf,
                x->scope ? g->scopes[x->scope - 1] : "-");
    }
}

void sx_cg_profile_print(const sx_cg_graph *g, int top, FILE *f)
{
    int idx[SX_OP_COUNT], n = 0;
    double total = 0, cpu = 0;
    for (int i = 0; i < SX_OP_COUNT; i++)
        if (g->prof_calls[i] > 0) {
            idx[n++] = i;
            total += g->prof_seconds[i];
            cpu += g->prof_cpu[i];
        }
    for (int i = 1; i < n; i++) /* by time, descending */
        for (int j = i; j > 0 && g->prof_seconds[idx[j]] > g->prof_seconds[idx[j - 1]]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    fprintf(f, "%-20s %10s %12s %7s %12s\n", "op", "calls", "ms", "share", "cpu_ms");
    for (int i = 0; i < n && (top <= 0 || i < top); i++)
        fprintf(f, "%-20s %10lld %12.1f %6.1f%% %12.1f\n", sx_cg_op_name((sx_cg_op)idx[i]),
                (long long)g->prof_calls[idx[i]], 1e3 * g->prof_seconds[idx[i]],
                total > 0 ? 100 * g->prof_seconds[idx[i]] / total : 0, 1e3 * g->prof_cpu[idx[i]]);
    fprintf(f, "%-20s %10s %12.1f %7s %12.1f\n", "total", "", 1e3 * total, "", 1e3 * cpu);
    /* per scope, in order of first appearance; unscoped nodes last */
    bool any = false;
    for (int sc = 1; sc <= g->n_scopes + 1; sc++) {
        int want = sc <= g->n_scopes ? sc : 0;
        double t = 0, c = 0;
        int64_t calls = 0;
        for (int64_t i = 0; i < g->n_nodes; i++)
            if (g->nodes[i]->scope == want) {
                t += g->nodes[i]->prof_seconds;
                c += g->nodes[i]->prof_cpu;
                calls += g->nodes[i]->prof_calls;
            }
        if (calls == 0)
            continue;
        if (!any)
            fprintf(f, "%-20s %10s %12s %7s %12s\n", "scope", "kernels", "ms", "share", "cpu_ms");
        any = true;
        fprintf(f, "%-20.20s %10lld %12.1f %6.1f%% %12.1f\n", want ? g->scopes[want - 1] : "(none)",
                (long long)calls, 1e3 * t, total > 0 ? 100 * t / total : 0, 1e3 * c);
    }
    print_top_nodes(g, top, total, f);
}
