/* The graph machinery: lazy vs eager, invalidation that recomputes exactly the dependents,
 * structural hashing, assign ordering, freezing with no allocation, DOT output, errors. */
#include "testutil.h"

#include <sx_cgraph.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sx_cg_graph *new_graph(sx_cg_mode mode)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(mode, SX_F64, &g), SX_OK);
    return g;
}

static void set_input(sx_cg_graph *g, sx_cg_node *n, double v)
{
    int r = sx_cg_node_rank(n);
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_full(SX_F64, r, sx_cg_node_shape(n), v, &t), SX_OK);
    cr_assert_eq(sx_cg_input_set(g, n, t, SX_CG_COPY), SX_OK, "%s", sx_last_error());
    sx_tensor_free(t);
}

static double value0(const sx_cg_node *n)
{
    const sx_tensor *v = sx_cg_value(n);
    cr_assert_not_null(v);
    return sx_tensor_get(v, 0);
}

Test(cgraph_graph, lazy_computes_nothing_until_asked)
{
    sx_cg_graph *g = new_graph(SX_CG_LAZY);
    int64_t s[2] = {2, 2};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 2, s);
    sx_cg_node *y = sx_cg_input(g, "y", SX_F64, 0, NULL);
    sx_cg_node *z = sx_cg_add(g, x, y);
    cr_assert_not_null(z);
    cr_assert_null(sx_cg_value(z));
    cr_assert_eq(sx_cg_eval(g, 1, &z), SX_E_STATE, "inputs without values are an error");
    cr_assert(strstr(sx_last_error(), "no value") != NULL, "%s", sx_last_error());
    set_input(g, x, 1);
    set_input(g, y, 2);
    cr_assert_eq(sx_cg_graph_stats(g).kernel_calls, 0);
    cr_assert_eq(sx_cg_eval(g, 1, &z), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_graph_stats(g).kernel_calls, 1);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(sx_tensor_get(sx_cg_value(z), i), 3.0);
    sx_cg_graph_free(g);
}

Test(cgraph_graph, eager_computes_at_once_and_agrees_with_lazy)
{
    sx_cg_graph *g = new_graph(SX_CG_EAGER), *h = new_graph(SX_CG_LAZY);
    sx_cg_node *res[2];
    sx_cg_graph *gs[2] = {g, h};
    for (int k = 0; k < 2; k++) {
        int64_t s[1] = {5};
        sx_cg_node *x = sx_cg_input(gs[k], "x", SX_F64, 1, s);
        set_input(gs[k], x, 0.5);
        res[k] = sx_cg_exp(gs[k], sx_cg_mul(gs[k], sx_cg_sin(gs[k], x), sx_cg_scalar(gs[k], 3)));
        cr_assert_not_null(res[k]);
    }
    cr_assert_not_null(sx_cg_value(res[0]), "eager: value exists without eval");
    cr_assert_null(sx_cg_value(res[1]));
    cr_assert_eq(sx_cg_eval(h, 1, &res[1]), SX_OK);
    cr_assert_eq(sx_tensor_max_abs_diff(sx_cg_value(res[0]), sx_cg_value(res[1])), 0.0);
    cr_assert_float_eq(value0(res[0]), exp(3 * sin(0.5)), 1e-15);
    sx_cg_graph_free(g);
    sx_cg_graph_free(h);
}

/* Diamond: a -> b, a -> c, (b, c) -> d, plus an independent e. Changing a recomputes b, c, d;
 * changing the other input of e recomputes e only. */
Test(cgraph_graph, invalidation_recomputes_exactly_the_dependents)
{
    sx_cg_graph *g = new_graph(SX_CG_LAZY);
    int64_t s[1] = {8};
    sx_cg_node *a = sx_cg_input(g, "a", SX_F64, 1, s);
    sx_cg_node *u = sx_cg_input(g, "u", SX_F64, 1, s);
    sx_cg_node *b = sx_cg_sin(g, a);
    sx_cg_node *c = sx_cg_cos(g, a);
    sx_cg_node *d = sx_cg_add(g, b, c);
    sx_cg_node *e = sx_cg_exp(g, u);
    sx_cg_node *outs[2] = {d, e};
    set_input(g, a, 1);
    set_input(g, u, 2);
    cr_assert_eq(sx_cg_eval(g, 2, outs), SX_OK);
    int64_t k0 = sx_cg_graph_stats(g).kernel_calls;
    cr_assert_eq(k0, 4);
    cr_assert_eq(sx_cg_eval(g, 2, outs), SX_OK);
    cr_assert_eq(sx_cg_graph_stats(g).kernel_calls, k0, "nothing changed, nothing recomputed");

    set_input(g, a, 0.25);
    cr_assert_not(sx_cg_valid(b));
    cr_assert_not(sx_cg_valid(d));
    cr_assert(sx_cg_valid(e));
    cr_assert_eq(sx_cg_eval(g, 2, outs), SX_OK);
    cr_assert_eq(sx_cg_graph_stats(g).kernel_calls, k0 + 3);
    cr_assert_float_eq(value0(d), sin(0.25) + cos(0.25), 1e-15);

    set_input(g, u, 0);
    cr_assert_eq(sx_cg_eval(g, 2, outs), SX_OK);
    cr_assert_eq(sx_cg_graph_stats(g).kernel_calls, k0 + 4);
    cr_assert_eq(value0(e), 1.0);

    /* asking for b alone computes only what b needs */
    set_input(g, a, 2);
    cr_assert_eq(sx_cg_eval(g, 1, &b), SX_OK);
    cr_assert_eq(sx_cg_graph_stats(g).kernel_calls, k0 + 5);
    cr_assert_not(sx_cg_valid(c));
    sx_cg_graph_free(g);
}

Test(cgraph_graph, structural_hashing_reuses_nodes)
{
    sx_cg_graph *g = new_graph(SX_CG_LAZY);
    int64_t s[2] = {3, 4};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 2, s);
    sx_cg_node *y = sx_cg_input(g, "y", SX_F64, 2, s);
    sx_cg_node *first = sx_cg_sum(g, sx_cg_mul(g, sx_cg_sin(g, x), y), SX_AXIS(1), false);
    int64_t nodes = sx_cg_graph_stats(g).nodes;
    for (int i = 0; i < 10; i++) {
        sx_cg_node *again = sx_cg_sum(g, sx_cg_mul(g, sx_cg_sin(g, x), y), SX_AXIS(1), false);
        cr_assert_eq(again, first);
    }
    cr_assert_eq(sx_cg_graph_stats(g).nodes, nodes, "rebuilding did not grow the graph");
    /* different attributes or inputs give different nodes */
    cr_assert_neq(sx_cg_sum(g, sx_cg_mul(g, sx_cg_sin(g, x), y), SX_AXIS(0), false), first);
    cr_assert_neq(sx_cg_mul(g, sx_cg_sin(g, x), x), sx_cg_mul(g, sx_cg_sin(g, x), y));
    /* leaves and random nodes are never merged */
    cr_assert_neq(sx_cg_scalar(g, 1), sx_cg_scalar(g, 1));
    int rng;
    cr_assert_eq(sx_cg_rng_new(g, 5, &rng), SX_OK);
    cr_assert_neq(sx_cg_dropout_mask(g, rng, 0.5, 2, s), sx_cg_dropout_mask(g, rng, 0.5, 2, s));
    sx_cg_graph_free(g);
}

/* A parameter read by two nodes and updated by an assign: both readers see the old value,
 * whatever the order they were built in; afterwards they are stale. */
Test(cgraph_graph, assign_runs_after_every_reader)
{
    sx_cg_graph *g = new_graph(SX_CG_LAZY);
    sx_tensor *init = NULL;
    int64_t s[1] = {3};
    cr_assert_eq(sx_tensor_full(SX_F64, 1, s, 2.0, &init), SX_OK);
    sx_cg_node *p = sx_cg_param(g, "p", init);
    sx_cg_node *r1 = sx_cg_mul_scalar(g, p, 10);                     /* 20 */
    sx_cg_node *upd = sx_cg_assign(g, p, sx_cg_add_scalar(g, p, 1)); /* p = 3 */
    sx_cg_node *r2 = sx_cg_add_scalar(g, p, 100); /* built after the assign: still 102 */
    cr_assert_not_null(upd);
    sx_cg_node *outs[3] = {upd, r1, r2}; /* the assign asked for first on purpose */
    cr_assert_eq(sx_cg_eval(g, 3, outs), SX_OK, "%s", sx_last_error());
    cr_assert_eq(value0(r1), 20.0);
    cr_assert_eq(value0(r2), 102.0);
    cr_assert_eq(value0(p), 3.0);
    cr_assert_eq(value0(upd), 3.0);
    cr_assert_not(sx_cg_valid(r1), "readers of a changed parameter are stale");
    /* a second step sees the new value */
    cr_assert_eq(sx_cg_eval(g, 3, outs), SX_OK);
    cr_assert_eq(value0(r1), 30.0);
    cr_assert_eq(value0(p), 4.0);
    /* assign only to parameters */
    cr_assert_null(sx_cg_assign(g, r1, r2));
    cr_assert_eq(sx_cg_graph_status(g), SX_E_ARG);
    sx_tensor_free(init);
    sx_cg_graph_free(g);
}

/* A reader through views (a reshape of a reshape of the parameter) reads the parameter's
 * storage: it too runs before the assign, lazy or frozen (the order once ignored views, and a
 * layer norm's gamma, read as a reshape, was overwritten by its update before the backward pass
 * read it). */
Test(cgraph_graph, assign_runs_after_readers_through_views)
{
    for (int frozen = 0; frozen < 2; frozen++) {
        sx_cg_graph *g = new_graph(SX_CG_LAZY);
        sx_tensor *init = NULL;
        int64_t s[2] = {2, 3}, flat[1] = {6}, col[2] = {6, 1};
        cr_assert_eq(sx_tensor_full(SX_F64, 2, s, 2.0, &init), SX_OK);
        sx_cg_node *p = sx_cg_param(g, "p", init);
        sx_cg_node *v = sx_cg_reshape(g, sx_cg_reshape(g, p, 1, flat), 2, col);
        sx_cg_node *upd = sx_cg_assign(g, p, sx_cg_add_scalar(g, p, 1)); /* p = 3 */
        sx_cg_node *r = sx_cg_mul_scalar(g, v, 10);                      /* 20, not 30 */
        sx_cg_node *outs[2] = {upd, r}; /* the assign asked for first */
        if (frozen)
            cr_assert_eq(sx_cg_freeze(g, 2, outs), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_eval(g, 2, outs), SX_OK, "%s", sx_last_error());
        cr_assert_eq(value0(r), 20.0, "frozen %d: the reader saw %g", frozen, value0(r));
        cr_assert_eq(value0(p), 3.0);
        sx_tensor_free(init);
        sx_cg_graph_free(g);
    }
}

static long allocs;
static void *count_alloc(void *ctx, size_t n)
{
    (void)ctx;
    allocs++;
    return malloc(n);
}
static void *count_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    allocs++;
    return realloc(p, n);
}
static void count_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

Test(cgraph_graph, frozen_graph_runs_without_allocating)
{
    sx_cg_graph *g = new_graph(SX_CG_LAZY);
    int64_t s[2] = {16, 16};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 2, s);
    sx_tensor *init = NULL;
    cr_assert_eq(sx_tensor_full(SX_F64, 2, s, 0.5, &init), SX_OK);
    sx_cg_node *w = sx_cg_param(g, "w", init);
    sx_cg_node *y =
        sx_cg_sum(g, sx_cg_tanh(g, sx_cg_matmul(g, x, w, false, false)), SX_AXES_ALL, false);
    sx_cg_node *step = sx_cg_assign(g, w, sx_cg_mul_scalar(g, w, 0.5));
    sx_cg_node *outs[2] = {y, step};
    cr_assert_eq(sx_cg_freeze(g, 2, outs), SX_OK, "%s", sx_last_error());
    cr_assert(sx_cg_frozen(g));
    cr_assert_null(sx_cg_exp(g, x), "no new nodes after freezing");
    cr_assert_eq(sx_cg_graph_status(g), SX_E_STATE);

    sx_allocator counting = {count_alloc, count_realloc, count_free, NULL};
    sx_tensor *xv = NULL;
    cr_assert_eq(sx_tensor_full(SX_F64, 2, s, 0.1, &xv), SX_OK);
    double prev = 0;
    for (int it = 0; it < 5; it++) {
        sx_tensor_set(xv, 0, 0.1 * it);
        cr_assert_eq(sx_cg_input_set(g, x, xv, SX_CG_COPY), SX_OK);
        if (it == 1)
            sx_allocator_set(&counting); /* steps 2..N must not allocate */
        cr_assert_eq(sx_cg_eval(g, 2, outs), SX_OK, "%s", sx_last_error());
        double v = value0(y);
        cr_assert(it == 0 || v != prev, "the weights changed, so the output changes");
        prev = v;
    }
    sx_allocator_set(NULL);
    cr_assert_eq(allocs, 0, "%ld allocations during frozen steps", allocs);
    /* w halves each step: 0.5 * 2^-5 */
    cr_assert_float_eq(value0(w), 0.5 / 32, 1e-15);
    sx_tensor_free(xv);
    sx_tensor_free(init);
    sx_cg_graph_free(g);
}

Test(cgraph_graph, borrowed_input_reads_caller_memory)
{
    sx_cg_graph *g = new_graph(SX_CG_LAZY);
    double buf[3] = {1, 2, 3};
    int64_t s[1] = {3};
    sx_tensor t = sx_tensor_view(SX_F64, 1, s, buf);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 1, s);
    sx_cg_node *y = sx_cg_sum(g, x, SX_AXES_ALL, false);
    cr_assert_eq(sx_cg_input_set(g, x, &t, SX_CG_BORROW), SX_OK);
    cr_assert_eq(sx_cg_value(x)->data, (void *)buf);
    cr_assert_eq(sx_cg_eval(g, 1, &y), SX_OK);
    cr_assert_eq(value0(y), 6.0);
    buf[0] = 10; /* not seen until the input is set again */
    cr_assert_eq(sx_cg_input_set(g, x, &t, SX_CG_BORROW), SX_OK);
    cr_assert_eq(sx_cg_eval(g, 1, &y), SX_OK);
    cr_assert_eq(value0(y), 15.0);
    sx_cg_graph_free(g);
}

Test(cgraph_graph, input_set_errors_leave_input_unchanged)
{
    sx_cg_graph *g = new_graph(SX_CG_LAZY);
    int64_t s[1] = {3}, s4[1] = {4};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 1, s);
    set_input(g, x, 7);
    sx_tensor *bad = NULL, *f32 = NULL;
    cr_assert_eq(sx_tensor_zeros(SX_F64, 1, s4, &bad), SX_OK);
    cr_assert_eq(sx_tensor_zeros(SX_F32, 1, s, &f32), SX_OK);
    cr_assert_eq(sx_cg_input_set(g, x, bad, SX_CG_COPY), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "(4)") && strstr(sx_last_error(), "(3)"), "%s",
              sx_last_error());
    cr_assert_eq(sx_cg_input_set(g, x, f32, SX_CG_COPY), SX_E_DTYPE);
    cr_assert_eq(value0(x), 7.0);
    cr_assert(sx_cg_valid(x));
    sx_cg_node *y = sx_cg_exp(g, x);
    cr_assert_eq(sx_cg_input_set(g, y, f32, SX_CG_COPY), SX_E_ARG, "only inputs take values");
    sx_tensor_free(bad);
    sx_tensor_free(f32);
    sx_cg_graph_free(g);
}

Test(cgraph_graph, dot_output_has_every_node_and_edge)
{
    sx_cg_graph *g = new_graph(SX_CG_LAZY);
    int64_t s[2] = {8, 4}, b[2] = {1, 4};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 2, s);
    sx_cg_node *y = sx_cg_input(g, "y \"quoted\"", SX_F64, 2, b);
    sx_cg_node *z = sx_cg_sin(g, sx_cg_mul(g, x, y));
    cr_assert_not_null(z);
    char path[] = "/tmp/strix_dot_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(sx_cg_dot_save(g, path), SX_OK, "%s", sx_last_error());
    FILE *f = fopen(path, "r");
    char text[4096] = {0};
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    cr_assert_gt(len, 0);
    cr_assert(strncmp(text, "digraph", 7) == 0);
    cr_assert(strstr(text, "#2 mul") && strstr(text, "#3 sin"), "%s", text);
    cr_assert(strstr(text, "(8,4)") && strstr(text, "refs=1"), "%s", text);
    cr_assert(strstr(text, "n0 -> n2;") && strstr(text, "n1 -> n2;") && strstr(text, "n2 -> n3;"),
              "%s", text);
    cr_assert(strstr(text, "y \\\"quoted\\\"") != NULL, "names are escaped: %s", text);
    /* balanced braces: a cheap structural parse when graphviz is absent */
    int depth = 0;
    for (char *p = text; *p; p++)
        if ((*p == '{' || *p == '}') && p[-1] != '\\')
            depth += *p == '{' ? 1 : -1;
    cr_assert_eq(depth, 0);
    if (system("command -v dot >/dev/null 2>&1") == 0) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "dot -Tsvg %s -o /dev/null", path);
        cr_assert_eq(system(cmd), 0, "graphviz rejects the DOT file");
    }
    unlink(path);
    sx_cg_graph_free(g);
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        sx_status s_ = (expr);                                                                     \
        if (s_ != SX_OK)                                                                           \
            return s_;                                                                             \
    } while (0)

/* Fail the k-th allocation for every k over building, evaluating and freezing a graph: each
 * failure is reported (NULL node or SX_E_NOMEM), the graph keeps its node count, nothing leaks,
 * and the sequence completes once k passes its allocation count. */
static sx_status build_sequence(sx_cg_graph **out, sx_cg_mode mode)
{
    sx_cg_graph *g = NULL;
    TRY(sx_cg_graph_new(mode, SX_F64, &g));
    *out = g;
    int64_t sh[2] = {4, 4};
    double data[16] = {0};
    sx_tensor v = sx_tensor_view(SX_F64, 2, sh, data);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 2, sh);
    if (x == NULL)
        return sx_cg_graph_status(g);
    TRY(sx_cg_input_set(g, x, &v, SX_CG_COPY));
    sx_cg_node *p = sx_cg_param(g, "p", &v);
    int64_t before = sx_cg_graph_stats(g).nodes;
    sx_cg_node *y = sx_cg_matmul(g, sx_cg_sin(g, x), p, false, true);
    sx_cg_node *z = sx_cg_sum(g, sx_cg_mul(g, y, sx_cg_scalar(g, 2)), SX_AXIS(0), true);
    sx_cg_node *a = sx_cg_assign(g, p, sx_cg_add(g, p, z));
    if (a == NULL) {
        cr_assert_neq(sx_cg_graph_status(g), SX_OK);
        cr_assert_leq(sx_cg_graph_stats(g).nodes, before + 7);
        return sx_cg_graph_status(g);
    }
    sx_cg_node *outs[2] = {z, a};
    TRY(sx_cg_eval(g, 2, outs));
    TRY(sx_cg_freeze(g, 2, outs));
    TRY(sx_cg_input_set(g, x, &v, SX_CG_COPY));
    return sx_cg_eval(g, 2, outs);
}

Test(cgraph_graph, out_of_memory_everywhere)
{
    for (int mode = 0; mode < 2; mode++) {
        for (long k = 0;; k++) {
            tu_fail_after(k);
            sx_cg_graph *g = NULL;
            sx_status s = build_sequence(&g, (sx_cg_mode)mode);
            sx_cg_graph_free(g);
            long live = tu_live_allocs();
            tu_fail_reset();
            cr_assert_eq(live, 0, "mode %d k=%ld leaked %ld allocations", mode, k, live);
            if (s == SX_OK)
                break;
            cr_assert_eq(s, SX_E_NOMEM, "mode %d k=%ld: status %s: %s", mode, k, sx_status_str(s),
                         sx_last_error());
            cr_assert_lt(k, 1000);
        }
    }
}

/* Scopes: kept per node, reused by name, kept by copies and by the optimiser's rewrites, and
 * summed per scope by the profile. */
Test(cgraph_graph, scopes_follow_nodes_through_copy_and_optimiser)
{
    sx_cg_graph *g = new_graph(SX_CG_LAZY);
    int64_t s[2] = {3, 4};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 2, s);
    cr_assert_str_eq(sx_cg_scope_get(g), "");
    cr_assert_eq(sx_cg_scope_set(g, "layer_a"), SX_OK);
    cr_assert_str_eq(sx_cg_scope_get(g), "layer_a");
    /* exp(x) + 0 * x: the simplifier and the fusion pass rewrite it */
    sx_cg_node *e = sx_cg_exp(g, x);
    sx_cg_node *y = sx_cg_add(g, sx_cg_sin(g, e), sx_cg_mul(g, sx_cg_scalar_like(g, x, 0), x));
    cr_assert_eq(sx_cg_scope_set(g, "layer_b"), SX_OK);
    sx_cg_node *z = sx_cg_sum(g, y, SX_AXES_ALL, false);
    cr_assert_eq(sx_cg_scope_set(g, NULL), SX_OK);
    sx_cg_node *w = sx_cg_neg(g, z);
    cr_assert_not_null(w);
    cr_assert_str_eq(sx_cg_node_scope(x), "");
    cr_assert_str_eq(sx_cg_node_scope(e), "layer_a");
    cr_assert_str_eq(sx_cg_node_scope(y), "layer_a");
    cr_assert_str_eq(sx_cg_node_scope(z), "layer_b");
    cr_assert_str_eq(sx_cg_node_scope(w), "");
    cr_assert_eq(sx_cg_scope_set(g, "layer_a"), SX_OK); /* known name: same string */
    cr_assert_eq(sx_cg_scope_get(g), sx_cg_node_scope(e));
    cr_assert_eq(sx_cg_scope_set(g, ""), SX_OK);

    sx_cg_node *outs[2] = {w, z}, *copies[2];
    sx_cg_graph *c = NULL;
    cr_assert_eq(sx_cg_graph_copy(g, 2, outs, 0, &c, copies), SX_OK, "%s", sx_last_error());
    cr_assert_str_eq(sx_cg_node_scope(copies[0]), "");
    cr_assert_str_eq(sx_cg_node_scope(copies[1]), "layer_b");

    cr_assert_eq(sx_cg_optimise(g, 1, &w, NULL, NULL), SX_OK, "%s", sx_last_error());
    /* every live op node of the rewritten graph still belongs to one of the scopes, and the
     * nodes that replaced the layer_a chain kept layer_a */
    bool seen_a = false, seen_b = false;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        if (n == NULL || sx_cg_node_n_inputs(n) == 0)
            continue;
        const char *sc = sx_cg_node_scope(n);
        seen_a |= strcmp(sc, "layer_a") == 0;
        seen_b |= strcmp(sc, "layer_b") == 0;
    }
    cr_assert(seen_a && seen_b, "the optimiser lost a scope (a %d, b %d)", seen_a, seen_b);

    set_input(g, x, 0.5);
    sx_cg_profile_enable(g, true);
    cr_assert_eq(sx_cg_eval(g, 1, &w), SX_OK, "%s", sx_last_error());
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    cr_assert_not_null(f);
    sx_cg_profile_print(g, 0, f);
    fclose(f);
    cr_assert(strstr(buf, "layer_a") && strstr(buf, "layer_b") && strstr(buf, "(none)"), "%s", buf);
    /* then the nodes by time, each with its shape, its inputs' and its scope */
    const char *top = strstr(buf, "\nnode ");
    cr_assert(top && strstr(top, " <- (") && strstr(top, "[layer_"), "%s", buf);
    sx_cg_graph_free(c);
    sx_cg_graph_free(g);
}

/* sx_cg_graph_copy_shared: the copy's constants and parameters read the original's values in
 * place (one set of weights for graphs of several batch sizes), the copy computes what a full
 * copy computes, and freeing it leaves the original whole. */
Test(cgraph_graph, shared_copy_reads_the_originals_weights)
{
    sx_cg_graph *g = new_graph(SX_CG_LAZY);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 2, (int64_t[]){2, 3});
    sx_tensor *wt = NULL, *ct = NULL;
    cr_assert_eq(sx_tensor_full(SX_F64, 1, (int64_t[]){3}, 2.0, &wt), SX_OK);
    cr_assert_eq(sx_tensor_full(SX_F64, 1, (int64_t[]){3}, 0.25, &ct), SX_OK);
    sx_cg_node *w = sx_cg_param(g, "w", wt), *c = sx_cg_const(g, ct);
    sx_cg_node *y = sx_cg_add(g, sx_cg_mul(g, x, w), c);
    cr_assert_not_null(y, "%s", sx_last_error());
    sx_cg_node *outs[3] = {y, w, c}, *sh[3], *full[3];
    sx_cg_graph *s = NULL, *f = NULL;
    cr_assert_eq(sx_cg_graph_copy_shared(g, 3, outs, 5, &s, sh), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_graph_copy(g, 3, outs, 5, &f, full), SX_OK, "%s", sx_last_error());
    for (int i = 1; i < 3; i++) {
        cr_assert_eq(sx_cg_value(sh[i])->data, sx_cg_value(outs[i])->data, "leaf %d copied", i);
        cr_assert_neq(sx_cg_value(full[i])->data, sx_cg_value(outs[i])->data);
    }
    cr_assert_str_eq(sx_cg_node_name(sh[1]), "w");
    cr_assert_eq(sx_cg_node_shape(sh[0])[0], 5);
    sx_cg_node *xs = sx_cg_graph_node(s, 0), *xf = sx_cg_graph_node(f, 0);
    set_input(s, xs, 1.5);
    set_input(f, xf, 1.5);
    cr_assert_eq(sx_cg_eval(s, 1, sh), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(f, 1, full), SX_OK, "%s", sx_last_error());
    for (int64_t i = 0; i < 15; i++)
        cr_assert_eq(sx_tensor_get(sx_cg_value(sh[0]), i), 3.25);
    cr_assert_eq(memcmp(sx_cg_value(sh[0])->data, sx_cg_value(full[0])->data, 15 * sizeof(double)),
                 0);
    sx_cg_graph_free(s);
    sx_cg_graph_free(f);
    set_input(g, x, 1.0); /* the original's weights outlive the copies */
    cr_assert_eq(sx_cg_eval(g, 1, &y), SX_OK, "%s", sx_last_error());
    cr_assert_eq(value0(y), 2.25);
    cr_assert_eq(sx_cg_graph_copy_shared(g, 3, outs, 5, NULL, sh), SX_E_ARG);
    sx_tensor_free(wt);
    sx_tensor_free(ct);
    sx_cg_graph_free(g);
}
