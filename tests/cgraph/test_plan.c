/* The memory planner (cgraph/plan.c): random graphs evaluated frozen with planning (in place on
 * and off) agree bit for bit with the unplanned frozen graph and with lazy evaluation over
 * repeated steps; the plan checker holds and can fail; the arena lies between the peak-live
 * bound and the naive sum; kept values never share storage with planned ones; chains fit in
 * one or two blocks; planned evaluation allocates nothing; out-of-memory while freezing fails
 * cleanly. */
#include "testutil.h"

#include <sx_cgraph.h>

#include "cgraph_impl.h" /* only to corrupt a plan, so that the checker is seen to fail */

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sx_cg_node *ok_at(sx_cg_node *n, int line)
{
    cr_assert_not_null(n, "line %d: %s", line, sx_last_error());
    return n;
}
#define ok(n) ok_at((n), __LINE__)

static size_t nbytes(const sx_tensor *t)
{
    return (size_t)t->size * sx_dtype_size(t->dtype);
}

static bool same_bits(const sx_tensor *a, const sx_tensor *b)
{
    return a != NULL && b != NULL && a->size == b->size && a->dtype == b->dtype &&
           memcmp(a->data, b->data, nbytes(a)) == 0;
}

static void set_input(sx_cg_graph *g, sx_cg_node *in, sx_rng *rng, double lo, double hi)
{
    sx_tensor *t =
        tu_rand(rng, sx_cg_node_dtype(in), sx_cg_node_rank(in), sx_cg_node_shape(in), lo, hi);
    cr_assert_eq(sx_cg_input_set(g, in, t, SX_CG_COPY), SX_OK, "%s", sx_last_error());
    sx_tensor_free(t);
}

/* ---------------------------------------------------------------- random graphs */

/* A random graph over values of one shape (a, b): recipes of element-wise ops, broadcasts
 * against reductions, matmuls (with an addend, and with an addend that is also a factor),
 * reshape and identity views, concat + strided slice, fma, where, softmax, transposes. Several
 * outputs (some views, of op nodes and of an input) and parameters updated by assigns. The
 * same seed builds the same graph in any graph object. Assign values are requested as outputs
 * before the assigns, so every node but the assigns runs before the first assign. */
enum { RG_POOL = 96, RG_OUT = 24 };

typedef struct rg {
    sx_cg_graph *g;
    int64_t a, b;
    int n_inputs, n_params, n_outs, n_pool, first_op;
    sx_cg_node *inputs[2], *params[3], *outs[RG_OUT], *pool[RG_POOL];
} rg;

typedef sx_cg_node *(*unary_fn)(sx_cg_graph *, sx_cg_node *);
typedef sx_cg_node *(*binary_fn)(sx_cg_graph *, sx_cg_node *, sx_cg_node *);
static const unary_fn unary_ops[] = {sx_cg_neg, sx_cg_abs,  sx_cg_tanh,   sx_cg_sin,
                                     sx_cg_cos, sx_cg_relu, sx_cg_sigmoid};
static const binary_fn binary_ops[] = {sx_cg_add, sx_cg_sub, sx_cg_mul, sx_cg_max, sx_cg_min};
#define N_UNARY ((uint64_t)(sizeof unary_ops / sizeof unary_ops[0]))
#define N_BINARY ((uint64_t)(sizeof binary_ops / sizeof binary_ops[0]))

static sx_cg_node *pick(rg *r, sx_rng *rng)
{
    if (sx_rng_below(rng, 10) < 6)
        return r->pool[r->n_pool - 1];
    return r->pool[sx_rng_below(rng, (uint64_t)r->n_pool)];
}

static sx_cg_node *pick_op(rg *r, sx_rng *rng)
{
    return r->pool[r->first_op + (int)sx_rng_below(rng, (uint64_t)(r->n_pool - r->first_op))];
}

static sx_cg_node *un_g(sx_cg_graph *g, sx_rng *rng, sx_cg_node *x)
{
    return ok(unary_ops[sx_rng_below(rng, N_UNARY)](g, x));
}

static sx_cg_node *un(rg *r, sx_rng *rng, sx_cg_node *x)
{
    return un_g(r->g, rng, x);
}

static sx_cg_node *bin(rg *r, sx_rng *rng, sx_cg_node *x, sx_cg_node *y)
{
    return ok(binary_ops[sx_rng_below(rng, N_BINARY)](r->g, x, y));
}

/* One recipe: a new (a, b) node from pool nodes (and helper nodes of other shapes). */
static sx_cg_node *recipe(rg *r, sx_rng *rng)
{
    sx_cg_graph *g = r->g;
    sx_cg_node *x = pick(r, rng), *y = pick(r, rng), *z = pick(r, rng);
    int64_t ab[2] = {r->a, r->b}, ba[2] = {r->b, r->a}, flat[1] = {r->a * r->b};
    double k = 1.0 / (double)r->b; /* keeps matmul products bounded */
    bool flip = sx_rng_below(rng, 2) == 0;
    switch (sx_rng_below(rng, 15)) {
    case 0:
        return un(r, rng, x);
    case 1:
        return bin(r, rng, x, y);
    case 2: { /* (a, b) op (1, b) */
        sx_cg_node *row = ok(sx_cg_sum(g, y, SX_AXIS(0), true));
        return flip ? bin(r, rng, row, x) : bin(r, rng, x, row);
    }
    case 3: { /* (a, b) op (a, 1) */
        sx_cg_node *col = ok(sx_cg_reduce_max(g, y, SX_AXIS(1), true));
        return flip ? bin(r, rng, col, x) : bin(r, rng, x, col);
    }
    case 4: /* (a, b) op (b) */
        return bin(r, rng, x, ok(sx_cg_mean(g, y, SX_AXIS(0), false)));
    case 5:
        return flip ? ok(sx_cg_add_scalar(g, x, 0.5)) : ok(sx_cg_mul_scalar(g, x, -0.75));
    case 6: { /* (a, b) (b, a) -> (a, a), times (a, b) */
        sx_cg_node *m = ok(sx_cg_gemm(g, x, y, false, true, k, NULL, 0));
        return ok(sx_cg_gemm(g, m, z, false, false, k, NULL, 0));
    }
    case 7: { /* with an addend that may be written over */
        sx_cg_node *m = ok(sx_cg_gemm(g, x, y, false, true, k, NULL, 0));
        return ok(sx_cg_gemm(g, m, z, false, false, 0.5 * k, pick(r, rng), 0.5));
    }
    case 8: { /* a square matrix that is a factor and the addend: never written over */
        sx_cg_node *s = ok(sx_cg_gemm(g, x, y, false, true, k, NULL, 0));
        sx_cg_node *s2 = ok(sx_cg_gemm(g, s, s, false, false, 0.5, s, 0.25));
        return ok(sx_cg_gemm(g, s2, z, false, false, k, NULL, 0));
    }
    case 9: { /* through views: (b, a) or flat, and back */
        sx_cg_node *v = flip ? ok(sx_cg_reshape(g, x, 2, ba)) : ok(sx_cg_reshape(g, x, 1, flat));
        return ok(sx_cg_reshape(g, un(r, rng, v), 2, ab));
    }
    case 10: {
        sx_cg_node *v = ok(sx_cg_op_new(g, SX_OP_IDENTITY, 1, &x, NULL));
        return flip ? bin(r, rng, v, y) : un(r, rng, v);
    }
    case 11: { /* rows of x and y interleaved, every other one kept */
        sx_cg_node *xy[2] = {x, y};
        sx_cg_node *c = ok(sx_cg_concat(g, 2, xy, 0));
        sx_slice sl[2] = {{flip ? 1 : 0, SX_SLICE_END, 2}, SX_SLICE_ALL};
        return ok(sx_cg_slice(g, c, sl));
    }
    case 12:
        return flip ? ok(sx_cg_fma(g, x, y, z)) : ok(sx_cg_where(g, ok(sx_cg_gt(g, x, y)), y, z));
    case 13:
        return flip ? ok(sx_cg_softmax(g, x, 1)) : ok(sx_cg_log_softmax(g, x, 1));
    default: { /* a transpose round trip */
        sx_cg_node *t = un(r, rng, ok(sx_cg_transpose(g, x)));
        return ok(sx_cg_transpose(g, t));
    }
    }
}

static void rg_build(rg *r, sx_cg_graph *g, uint64_t seed)
{
    sx_rng rng;
    sx_rng_seed(&rng, seed);
    memset(r, 0, sizeof *r);
    r->g = g;
    sx_dtype dt = sx_cg_graph_dtype(g);
    r->a = 1 + (int64_t)sx_rng_below(&rng, 5);
    r->b = 1 + (int64_t)sx_rng_below(&rng, 5);
    int64_t ab[2] = {r->a, r->b};
    r->n_inputs = 1 + (int)sx_rng_below(&rng, 2);
    for (int i = 0; i < r->n_inputs; i++)
        r->pool[r->n_pool++] = r->inputs[i] = ok(sx_cg_input(g, i ? "y" : "x", dt, 2, ab));
    r->n_params = (int)sx_rng_below(&rng, 3);
    for (int i = 0; i < r->n_params; i++) {
        sx_tensor *t = tu_rand(&rng, dt, 2, ab, -1, 1);
        r->pool[r->n_pool++] = r->params[i] = ok(sx_cg_param(g, "p", t));
        sx_tensor_free(t);
    }
    if (sx_rng_below(&rng, 2) == 0) {
        sx_tensor *t = tu_rand(&rng, dt, 2, ab, -1, 1);
        r->pool[r->n_pool++] = ok(sx_cg_const(g, t));
        sx_tensor_free(t);
    }
    r->first_op = r->n_pool;
    int steps = 3 + (int)sx_rng_below(&rng, 30);
    for (int i = 0; i < steps; i++) {
        sx_cg_node *n = recipe(r, &rng); /* reads the pool: not in the same expression */
        r->pool[r->n_pool++] = n;
    }

    int64_t ba[2] = {r->b, r->a};
    r->outs[r->n_outs++] = r->pool[r->n_pool - 1];
    for (int i = (int)sx_rng_below(&rng, 3); i > 0; i--)
        r->outs[r->n_outs++] = pick(r, &rng);
    if (sx_rng_below(&rng, 3) == 0) /* a view of an op node: its root is kept */
        r->outs[r->n_outs++] = ok(sx_cg_reshape(g, pick_op(r, &rng), 2, ba));
    if (sx_rng_below(&rng, 4) == 0) /* a view of a leaf */
        r->outs[r->n_outs++] = ok(sx_cg_reshape(g, r->inputs[0], 2, ba));
    sx_cg_node *values[3], *targets[3];
    int n_assign = 0;
    for (int i = 0; i < r->n_params; i++)
        if (sx_rng_below(&rng, 3) != 0) {
            targets[n_assign] = r->params[i];
            values[n_assign] = pick_op(r, &rng);
            r->outs[r->n_outs++] = values[n_assign++];
        }
    for (int i = 0; i < n_assign; i++)
        r->outs[r->n_outs++] = ok(sx_cg_assign(g, targets[i], values[i]));
}

enum { C_LAZY, C_FROZEN, C_PLAN, C_PLAN_NOIP, N_CONFIGS };

/* Nodes sharing no bytes with the kept values: every leaf, output and root of an output view
 * against every other op node that has storage. Uses only the public API. */
static void check_kept_apart(const rg *r)
{
    sx_cg_graph *g = r->g;
    int64_t n = sx_cg_graph_size(g);
    bool *kept = calloc((size_t)n, sizeof *kept);
    cr_assert_not_null(kept);
    for (int i = 0; i < r->n_outs; i++) {
        sx_cg_node *x = r->outs[i];
        while (sx_cg_op_flags(sx_cg_node_op(x)) & SX_OPF_VIEW)
            x = sx_cg_node_input(x, 0);
        kept[sx_cg_node_id(x)] = true;
    }
    for (int64_t i = 0; i < n; i++) {
        sx_cg_node *k = sx_cg_graph_node(g, i);
        if (k == NULL || !(kept[i] || (sx_cg_op_flags(sx_cg_node_op(k)) & SX_OPF_LEAF)))
            continue;
        const sx_tensor *kv = sx_cg_value(k);
        if (kv == NULL || kv->data == NULL)
            continue;
        const char *k0 = kv->data, *k1 = k0 + nbytes(kv);
        for (int64_t j = 0; j < n; j++) {
            sx_cg_node *o = sx_cg_graph_node(g, j);
            if (o == NULL || j == i || kept[j] ||
                (sx_cg_op_flags(sx_cg_node_op(o)) & (SX_OPF_LEAF | SX_OPF_VIEW)))
                continue;
            const sx_tensor *ov = sx_cg_value(o);
            if (ov == NULL || ov->data == NULL || ov->size == 0)
                continue;
            const char *o0 = ov->data, *o1 = o0 + nbytes(ov);
            cr_assert(o1 <= k0 || k1 <= o0, "kept node %lld (%s) shares bytes with node %lld (%s)",
                      (long long)i, sx_cg_op_name(sx_cg_node_op(k)), (long long)j,
                      sx_cg_op_name(sx_cg_node_op(o)));
        }
    }
    free(kept);
}

static void run_random_graph(uint64_t seed)
{
    sx_dtype dt = seed % 4 == 3 ? SX_F32 : SX_F64;
    rg r[N_CONFIGS];
    for (int c = 0; c < N_CONFIGS; c++) {
        sx_cg_graph *g = NULL;
        cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &g), SX_OK);
        rg_build(&r[c], g, seed);
        cr_assert_eq(r[c].n_outs, r[0].n_outs);
        if (c == C_LAZY)
            continue;
        sx_cg_freeze_params p = sx_cg_freeze_params_default();
        p.plan_memory = c != C_FROZEN;
        p.inplace = c == C_PLAN;
        sx_cg_plan_report rep;
        memset(&rep, 0xff, sizeof rep);
        cr_assert_eq(sx_cg_freeze_ex(g, r[c].n_outs, r[c].outs, &p, &rep), SX_OK, "seed %llu: %s",
                     (unsigned long long)seed, sx_last_error());
        cr_assert_eq(sx_cg_plan_check(g), SX_OK, "seed %llu config %d: %s",
                     (unsigned long long)seed, c, sx_last_error());
        cr_assert_leq(rep.peak_live_bytes, rep.naive_bytes, "seed %llu", (unsigned long long)seed);
        if (c == C_FROZEN) {
            cr_assert_eq(rep.arena_bytes, 0);
            cr_assert_eq(rep.planned_nodes, 0);
            cr_assert_eq(rep.inplace_nodes, 0);
        } else {
            cr_assert_leq(rep.arena_bytes, rep.naive_bytes, "seed %llu: arena %zu > naive %zu",
                          (unsigned long long)seed, rep.arena_bytes, rep.naive_bytes);
            cr_assert_geq(rep.arena_bytes, rep.peak_live_bytes, "seed %llu: arena %zu < peak %zu",
                          (unsigned long long)seed, rep.arena_bytes, rep.peak_live_bytes);
            cr_assert_eq(rep.arena_bytes == 0, rep.planned_nodes == 0);
            if (c == C_PLAN_NOIP)
                cr_assert_eq(rep.inplace_nodes, 0);
        }
        cr_assert(rep.seconds >= 0 && rep.seconds < 1);
    }

    /* steps: all inputs new; only the first; all; none */
    sx_rng vals;
    sx_rng_seed(&vals, seed ^ 0x5eedULL);
    for (int step = 0; step < 4; step++) {
        for (int i = 0; i < r[0].n_inputs; i++) {
            if (step == 3 || (step == 1 && i > 0))
                continue;
            sx_rng v = vals;
            for (int c = 0; c < N_CONFIGS; c++) {
                vals = v;
                set_input(r[c].g, r[c].inputs[i], &vals, -2, 2);
            }
        }
        for (int c = 0; c < N_CONFIGS; c++)
            cr_assert_eq(sx_cg_eval(r[c].g, r[c].n_outs, r[c].outs), SX_OK,
                         "seed %llu step %d config %d: %s", (unsigned long long)seed, step, c,
                         sx_last_error());
        for (int c = 1; c < N_CONFIGS; c++) {
            for (int i = 0; i < r[0].n_outs; i++)
                cr_assert(same_bits(sx_cg_value(r[c].outs[i]), sx_cg_value(r[0].outs[i])),
                          "seed %llu step %d: output %d (%s) of config %d differs from lazy",
                          (unsigned long long)seed, step, i,
                          sx_cg_op_name(sx_cg_node_op(r[0].outs[i])), c);
            for (int i = 0; i < r[0].n_params; i++)
                cr_assert(same_bits(sx_cg_value(r[c].params[i]), sx_cg_value(r[0].params[i])),
                          "seed %llu step %d: parameter %d of config %d differs",
                          (unsigned long long)seed, step, i, c);
        }
    }
    check_kept_apart(&r[C_PLAN]);
    check_kept_apart(&r[C_PLAN_NOIP]);
    for (int c = 0; c < N_CONFIGS; c++)
        sx_cg_graph_free(r[c].g);
}

Test(cgraph_plan, random_graphs_agree_with_unplanned_and_lazy)
{
    for (uint64_t seed = 1; seed <= 300; seed++)
        run_random_graph(seed);
}

/* Vectors of widely varied lengths (unary ops, concat, slices, reductions broadcast back),
 * many alive at once: many free ranges of different sizes, splits and merges. */
static sx_cg_node *vec_node(sx_cg_graph *g, sx_cg_node **pool, int n, sx_rng *rng)
{
    sx_cg_node *x = pool[n - 1 - (int)sx_rng_below(rng, (uint64_t)(n < 6 ? n : 6))];
    sx_cg_node *y = pool[sx_rng_below(rng, (uint64_t)n)];
    int64_t lx = sx_cg_node_shape(x)[0], ly = sx_cg_node_shape(y)[0];
    switch (sx_rng_below(rng, 5)) {
    case 0:
        return un_g(g, rng, x);
    case 1: { /* x op (y, x)[:len x] */
        sx_cg_node *xy[2] = {y, x};
        sx_slice sl[1] = {{0, lx, 1}};
        sx_cg_node *c = ok(sx_cg_slice(g, ok(sx_cg_concat(g, 2, xy, 0)), sl));
        return ok(binary_ops[sx_rng_below(rng, N_BINARY)](g, x, c));
    }
    case 2: { /* longer */
        sx_cg_node *xy[2] = {x, y};
        return ok(sx_cg_concat(g, 2, xy, 0));
    }
    case 3: { /* shorter */
        int64_t k = 1 + (int64_t)sx_rng_below(rng, (uint64_t)lx);
        sx_slice sl[1] = {{lx - k, SX_SLICE_END, 1}};
        return ok(sx_cg_slice(g, x, sl));
    }
    default: /* x - max(y) */
        (void)ly;
        return ok(sx_cg_sub(g, x, ok(sx_cg_reduce_max(g, y, SX_AXES_ALL, false))));
    }
}

Test(cgraph_plan, varied_sizes_stress_the_allocator)
{
    for (uint64_t seed = 1; seed <= 24; seed++) {
        sx_cg_graph *gs[2];
        sx_cg_node *outs[2][4], *xs[2];
        int n_outs = 0;
        for (int k = 0; k < 2; k++) {
            sx_rng rng;
            sx_rng_seed(&rng, seed);
            cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &gs[k]), SX_OK);
            sx_cg_graph *g = gs[k];
            int64_t len = 1 + (int64_t)sx_rng_below(&rng, 1500);
            sx_cg_node *pool[400];
            int n = 0;
            pool[n++] = xs[k] = ok(sx_cg_input(g, "x", SX_F32, 1, &len));
            int steps = 60 + (int)sx_rng_below(&rng, 200);
            for (int i = 0; i < steps; i++) {
                sx_cg_node *v = vec_node(g, pool, n, &rng);
                if (sx_cg_node_shape(v)[0] > 6000) { /* keep sizes bounded */
                    sx_slice sl[1] = {{0, 1 + (int64_t)sx_rng_below(&rng, 6000), 1}};
                    v = ok(sx_cg_slice(g, v, sl));
                }
                pool[n++] = v;
            }
            n_outs = 0;
            outs[k][n_outs++] = pool[n - 1];
            for (int i = 0; i < 3; i++)
                outs[k][n_outs++] = pool[sx_rng_below(&rng, (uint64_t)n)];
            sx_cg_freeze_params p = sx_cg_freeze_params_default();
            p.plan_memory = k == 0;
            sx_cg_plan_report rep;
            cr_assert_eq(sx_cg_freeze_ex(g, n_outs, outs[k], &p, &rep), SX_OK, "%s",
                         sx_last_error());
            cr_assert_eq(sx_cg_plan_check(g), SX_OK, "seed %llu: %s", (unsigned long long)seed,
                         sx_last_error());
            if (k == 0) {
                cr_assert_leq(rep.arena_bytes, rep.naive_bytes);
                cr_assert_geq(rep.arena_bytes, rep.peak_live_bytes);
            }
        }
        sx_rng vals;
        for (int k = 0; k < 2; k++) {
            sx_rng_seed(&vals, seed + 99);
            set_input(gs[k], xs[k], &vals, -3, 3);
            cr_assert_eq(sx_cg_eval(gs[k], n_outs, outs[k]), SX_OK, "%s", sx_last_error());
        }
        for (int i = 0; i < n_outs; i++)
            cr_assert(same_bits(sx_cg_value(outs[0][i]), sx_cg_value(outs[1][i])),
                      "seed %llu output %d", (unsigned long long)seed, i);
        sx_cg_graph_free(gs[0]);
        sx_cg_graph_free(gs[1]);
    }
}

/* ---------------------------------------------------------------- chains and reports */

/* x -> u1 -> ... -> un (element-wise, n bytes each), un requested: u1..u(n-1) are planned. */
static sx_cg_graph *chain(int len, int64_t size, bool binary, sx_cg_node **x, sx_cg_node **out)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    *x = ok(sx_cg_input(g, "x", SX_F64, 1, &size));
    sx_cg_node *u = *x;
    for (int i = 0; i < len; i++)
        u = binary ? ok(sx_cg_add(g, u, *x)) : ok(i % 2 ? sx_cg_sin(g, u) : sx_cg_tanh(g, u));
    *out = u;
    return g;
}

Test(cgraph_plan, chain_fits_in_two_blocks_or_one_in_place)
{
    for (int binary = 0; binary < 2; binary++)
        for (int inplace = 0; inplace < 2; inplace++) {
            int64_t size = 1000; /* 8000 bytes: a whole number of 64-byte blocks */
            sx_cg_node *x, *out;
            sx_cg_graph *g = chain(20, size, binary, &x, &out);
            sx_cg_freeze_params p = sx_cg_freeze_params_default();
            p.inplace = inplace;
            sx_cg_plan_report rep;
            cr_assert_eq(sx_cg_freeze_ex(g, 1, &out, &p, &rep), SX_OK, "%s", sx_last_error());
            cr_assert_eq(rep.planned_nodes, 19);
            cr_assert_eq(rep.naive_bytes, 19 * 8000);
            cr_assert_eq(rep.arena_bytes, (inplace ? 1 : 2) * 8000, "arena %zu", rep.arena_bytes);
            cr_assert_eq(rep.peak_live_bytes, rep.arena_bytes);
            cr_assert_eq(rep.inplace_nodes, inplace ? 18 : 0);
            cr_assert_eq(sx_cg_plan_check(g), SX_OK, "%s", sx_last_error());
            sx_rng rng;
            sx_rng_seed(&rng, 7);
            sx_tensor *xv = tu_rand(&rng, SX_F64, 1, &size, -1, 1);
            cr_assert_eq(sx_cg_input_set(g, x, xv, SX_CG_COPY), SX_OK);
            cr_assert_eq(sx_cg_eval(g, 1, &out), SX_OK, "%s", sx_last_error());
            for (int64_t i = 0; i < size; i++) {
                double u = sx_tensor_get(xv, i);
                for (int k = 0; k < 20; k++)
                    u = binary ? u + sx_tensor_get(xv, i) : (k % 2 ? sin(u) : tanh(u));
                double got = sx_tensor_get(sx_cg_value(out), i);
                cr_assert(fabs(got - u) <= 1e-13 * (1 + fabs(u)), "element %lld: %g vs %g",
                          (long long)i, got, u);
            }
            sx_tensor_free(xv);
            sx_cg_graph_free(g);
        }
}

Test(cgraph_plan, unplanned_report_measures_without_placing)
{
    sx_cg_node *x, *out;
    sx_cg_graph *g = chain(10, 100, false, &x, &out);
    sx_cg_freeze_params p = {false, true, NULL, 0};
    sx_cg_plan_report rep;
    cr_assert_eq(sx_cg_freeze_ex(g, 1, &out, &p, &rep), SX_OK, "%s", sx_last_error());
    cr_assert_eq(rep.arena_bytes, 0);
    cr_assert_eq(rep.planned_nodes, 0);
    cr_assert_eq(rep.inplace_nodes, 0);
    cr_assert_eq(rep.naive_bytes, 9 * 832); /* 800 bytes rounded up to 64 */
    cr_assert_eq(rep.peak_live_bytes, 2 * 832);
    cr_assert_eq(sx_cg_plan_check(g), SX_OK);
    sx_cg_graph_free(g);
}

/* The gemm writes over its dying addend only when that keeps the bits of adding the addend
 * after the product: alpha = beta = 1 and an inner size summed in one GEMM block. Otherwise it
 * gets memory of its own; either way planned and unplanned results agree bit for bit. */
Test(cgraph_plan, matmul_writes_over_its_dying_addend)
{
    static const struct {
        double alpha, beta;
        int64_t k;
        bool inplace;
    } cases[] = {{1, 1, 6, true}, {0.5, 1, 6, false}, {1, 2, 6, false}, {1, 1, 600, false}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        sx_cg_graph *gs[2] = {NULL, NULL};
        sx_cg_node *outs[2];
        int64_t as[2] = {6, cases[t].k}, cs[2] = {6, 6};
        for (int k = 0; k < 2; k++) {
            cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &gs[k]), SX_OK);
            sx_cg_node *a = ok(sx_cg_input(gs[k], "a", SX_F64, 2, as));
            sx_cg_node *d = ok(sx_cg_input(gs[k], "d", SX_F64, 2, cs));
            sx_cg_node *c = ok(sx_cg_tanh(gs[k], d)); /* dies at the gemm */
            sx_cg_node *y =
                ok(sx_cg_gemm(gs[k], a, a, false, true, cases[t].alpha, c, cases[t].beta));
            outs[k] = ok(sx_cg_sum(gs[k], y, SX_AXIS(0), false));
            sx_cg_freeze_params p = sx_cg_freeze_params_default();
            p.plan_memory = k == 0;
            sx_cg_plan_report rep;
            cr_assert_eq(sx_cg_freeze_ex(gs[k], 1, &outs[k], &p, &rep), SX_OK, "%s",
                         sx_last_error());
            if (k == 0) {
                cr_assert_eq(rep.planned_nodes, 2);
                cr_assert_eq(rep.inplace_nodes, cases[t].inplace ? 1 : 0, "case %zu", t);
                cr_assert_eq(sx_cg_plan_check(gs[0]), SX_OK, "%s", sx_last_error());
            }
            sx_rng rng;
            sx_rng_seed(&rng, 3);
            set_input(gs[k], a, &rng, -1, 1);
            set_input(gs[k], d, &rng, -1, 1);
            cr_assert_eq(sx_cg_eval(gs[k], 1, &outs[k]), SX_OK, "%s", sx_last_error());
        }
        cr_assert(same_bits(sx_cg_value(outs[0]), sx_cg_value(outs[1])), "case %zu", t);
        sx_cg_graph_free(gs[0]);
        sx_cg_graph_free(gs[1]);
    }
}

/* Max-pool backward writes over its dying x only when no two windows share a cell: stride >=
 * kernel and no dilation (a dilated 2x2 window at stride 2 spans 3x3 cells and overlaps its
 * neighbours, and the kernel refuses dx = x there). Pads and ceil_mode keep the windows apart.
 * Planned and unplanned results agree bit for bit in every case. */
Test(cgraph_plan, pool_backward_in_place_only_for_disjoint_windows)
{
    static const struct {
        sx_pool2d_params p;
        bool inplace;
    } cases[] = {
        {{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2}, true},
        {{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .dilation_h = 2}, false},
        {{.kernel_h = 2, .kernel_w = 2, .stride_h = 3, .stride_w = 2, .dilation_w = 2}, false},
        {{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 1}, false},
        {{.kernel_h = 2,
          .kernel_w = 3,
          .stride_h = 2,
          .stride_w = 3,
          .padding = SX_PAD_EXPLICIT,
          .pad_top = 1,
          .pad_left = 2,
          .pad_right = 1,
          .ceil_mode = 1},
         true},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        sx_cg_graph *gs[2] = {NULL, NULL};
        sx_cg_node *outs[2];
        int64_t xs[4] = {2, 7, 7, 3}, ys[4];
        sx_tensor xv = sx_tensor_view(SX_F64, 4, xs, NULL);
        cr_assert_eq(sx_pool2d_shape("test", &xv, &cases[t].p, ys), SX_OK, "%s", sx_last_error());
        for (int k = 0; k < 2; k++) {
            cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &gs[k]), SX_OK);
            sx_cg_node *a = ok(sx_cg_input(gs[k], "a", SX_F64, 4, xs));
            sx_cg_node *d = ok(sx_cg_input(gs[k], "d", SX_F64, 4, ys));
            sx_cg_node *x = ok(sx_cg_tanh(gs[k], a)); /* dies at the pooling's backward op */
            sx_cg_node *dx = ok(sx_cg_maxpool2d_backward(gs[k], x, d, &cases[t].p));
            outs[k] = ok(sx_cg_sum(gs[k], dx, SX_AXIS(1) | SX_AXIS(2), false));
            sx_cg_freeze_params p = sx_cg_freeze_params_default();
            p.plan_memory = k == 0;
            sx_cg_plan_report rep;
            cr_assert_eq(sx_cg_freeze_ex(gs[k], 1, &outs[k], &p, &rep), SX_OK, "%s",
                         sx_last_error());
            if (k == 0) {
                cr_assert_eq(rep.inplace_nodes, cases[t].inplace ? 1 : 0, "case %zu", t);
                cr_assert_eq(sx_cg_plan_check(gs[0]), SX_OK, "%s", sx_last_error());
            }
            sx_rng rng;
            sx_rng_seed(&rng, 5);
            set_input(gs[k], a, &rng, -1, 1);
            set_input(gs[k], d, &rng, -1, 1);
            cr_assert_eq(sx_cg_eval(gs[k], 1, &outs[k]), SX_OK, "case %zu: %s", t, sx_last_error());
        }
        cr_assert(same_bits(sx_cg_value(outs[0]), sx_cg_value(outs[1])), "case %zu", t);
        sx_cg_graph_free(gs[0]);
        sx_cg_graph_free(gs[1]);
    }
}

/* ---------------------------------------------------------------- evaluation */

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

Test(cgraph_plan, planned_evaluation_allocates_nothing)
{
    for (uint64_t seed = 1000; seed < 1020; seed++) {
        sx_cg_graph *g = NULL;
        cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
        rg r;
        rg_build(&r, g, seed);
        cr_assert_eq(sx_cg_freeze(g, r.n_outs, r.outs), SX_OK, "%s", sx_last_error());
        sx_rng rng;
        sx_rng_seed(&rng, seed);
        int64_t ab[2] = {r.a, r.b};
        sx_tensor *v = tu_rand(&rng, SX_F64, 2, ab, -1, 1);
        sx_allocator counting = {count_alloc, count_realloc, count_free, NULL};
        allocs = 0;
        for (int it = 0; it < 3; it++) {
            sx_tensor_set(v, 0, 0.25 * it);
            for (int i = 0; i < r.n_inputs; i++)
                cr_assert_eq(sx_cg_input_set(g, r.inputs[i], v, SX_CG_COPY), SX_OK);
            sx_allocator_set(&counting);
            sx_status s = sx_cg_eval(g, r.n_outs, r.outs);
            sx_allocator_set(NULL);
            cr_assert_eq(s, SX_OK, "%s", sx_last_error());
        }
        cr_assert_eq(allocs, 0, "seed %llu: %ld allocations while evaluating",
                     (unsigned long long)seed, allocs);
        sx_tensor_free(v);
        sx_cg_graph_free(g);
    }
}

/* Evaluate a built random graph on inputs from `seed` (0: the inputs it has) and copy its
 * outputs. */
static void rg_eval(rg *r, uint64_t seed, sx_tensor **outs)
{
    sx_rng rng;
    sx_rng_seed(&rng, seed);
    for (int i = 0; seed != 0 && i < r->n_inputs; i++)
        set_input(r->g, r->inputs[i], &rng, -1, 1);
    cr_assert_eq(sx_cg_eval(r->g, r->n_outs, r->outs), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < r->n_outs; i++)
        cr_assert_eq(sx_tensor_clone(sx_cg_value(r->outs[i]), &outs[i]), SX_OK);
}

/* A graph planned in memory lent by another frozen graph (or by the caller) computes what it
 * computes in its own arena, and so does the lender, evaluated in turns; a loan too small
 * after alignment is not taken. */
Test(cgraph_plan, lent_arena_gives_the_same_results)
{
    for (uint64_t seed = 1100; seed < 1112; seed++) {
        sx_cg_graph *gs[4] = {NULL, NULL, NULL, NULL};
        rg r[4];
        for (int i = 0; i < 4; i++) {
            cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &gs[i]), SX_OK);
            rg_build(&r[i], gs[i], seed + (uint64_t)(i % 2) * 1000); /* A, B, A', B' */
        }
        sx_cg_plan_report ra, rb;
        sx_cg_freeze_params fp = sx_cg_freeze_params_default();
        cr_assert_eq(sx_cg_freeze_ex(gs[0], r[0].n_outs, r[0].outs, &fp, &ra), SX_OK);
        size_t a_bytes = 0;
        void *a_arena = sx_cg_arena(gs[0], &a_bytes);
        cr_assert_eq(a_bytes, ra.arena_bytes + ra.scratch_bytes);
        cr_assert_eq(a_arena == NULL, ra.arena_bytes == 0);
        fp.arena = a_arena;
        fp.arena_bytes = a_bytes;
        cr_assert_eq(sx_cg_freeze_ex(gs[1], r[1].n_outs, r[1].outs, &fp, &rb), SX_OK);
        cr_assert_eq(rb.arena_lent, a_arena != NULL && rb.arena_bytes + rb.scratch_bytes <= a_bytes,
                     "seed %llu: lent %d, needs %zu, has %zu", (unsigned long long)seed,
                     rb.arena_lent, rb.arena_bytes + rb.scratch_bytes, a_bytes);
        size_t b_bytes = 0;
        char *b_arena = sx_cg_arena(gs[1], &b_bytes);
        if (rb.arena_lent)
            cr_assert(b_arena == (char *)a_arena, "the loan starts aligned already");
        cr_assert_eq(sx_cg_freeze(gs[2], r[2].n_outs, r[2].outs), SX_OK);
        cr_assert_eq(sx_cg_freeze(gs[3], r[3].n_outs, r[3].outs), SX_OK);
        /* the two sharers in turns, each against its twin; every other turn runs without
         * setting the inputs, on what the graph saw before the other wrote the arena */
        for (int it = 0; it < 4; it++)
            for (int k = 0; k < 2; k++) {
                sx_tensor *got[RG_OUT], *want[RG_OUT];
                uint64_t in_seed = seed + 10 * (uint64_t)it + (uint64_t)k;
                rg_eval(&r[k], it % 2 ? 0 : in_seed, got);
                rg_eval(&r[k + 2], it % 2 ? 0 : in_seed, want);
                for (int i = 0; i < r[k].n_outs; i++) {
                    cr_assert(same_bits(got[i], want[i]), "seed %llu graph %d output %d",
                              (unsigned long long)seed, k, i);
                    sx_tensor_free(got[i]);
                    sx_tensor_free(want[i]);
                }
            }
        /* a caller's buffer: taken when the plan fits after aligning its start, else not */
        size_t need = rb.arena_bytes + rb.scratch_bytes;
        char *buf = aligned_alloc(64, (need + 128 + 63) / 64 * 64); /* buf + 1: 63 to skip */
        for (int c = 0; c < 3 && need > 0; c++) {
            sx_cg_graph *g = NULL;
            cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
            rg rr;
            rg_build(&rr, g, seed + 1000);
            sx_cg_freeze_params q = sx_cg_freeze_params_default();
            q.arena = buf + 1;                              /* misaligned: 63 bytes go */
            q.arena_bytes = c == 0 ? need + 63 : need + 62; /* fits; one byte short */
            if (c == 2)
                q.arena = NULL, q.arena_bytes = need + 100; /* no memory: no loan */
            sx_cg_plan_report rq;
            cr_assert_eq(sx_cg_freeze_ex(g, rr.n_outs, rr.outs, &q, &rq), SX_OK);
            cr_assert_eq(rq.arena_lent, c == 0, "case %d", c);
            size_t got_bytes = 0;
            char *ar = sx_cg_arena(g, &got_bytes);
            cr_assert_eq(got_bytes, need);
            cr_assert_eq(ar >= buf && ar < buf + need + 128, c == 0, "case %d", c);
            sx_tensor *got[RG_OUT];
            rg_eval(&rr, seed, got);
            for (int i = 0; i < rr.n_outs; i++)
                sx_tensor_free(got[i]);
            sx_cg_graph_free(g);
        }
        free(buf);
        for (int i = 0; i < 4; i++)
            sx_cg_graph_free(gs[i]);
    }
    size_t none = 7;
    cr_assert_null(sx_cg_arena(NULL, &none));
    cr_assert_eq(none, 0);
}

/* A planned node whose block was reused is recomputed when a reader needs it again, and only
 * then: nodes whose readers are all up to date stay untouched. */
Test(cgraph_plan, transient_values_are_recomputed_when_read)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    int64_t s[1] = {64};
    sx_cg_node *x = ok(sx_cg_input(g, "x", SX_F64, 1, s));
    sx_cg_node *y = ok(sx_cg_input(g, "y", SX_F64, 1, s));
    sx_cg_node *a = ok(sx_cg_tanh(g, x));                            /* planned */
    sx_cg_node *b = ok(sx_cg_exp(g, ok(sx_cg_sin(g, y))));           /* sin(y) planned */
    sx_cg_node *c = ok(sx_cg_add(g, a, b));                          /* output */
    sx_cg_node *d = ok(sx_cg_cos(g, ok(sx_cg_mul_scalar(g, x, 3)))); /* reuses a's block */
    sx_cg_node *outs[3] = {c, d, b};
    sx_cg_plan_report rep;
    cr_assert_eq(sx_cg_freeze_ex(g, 3, outs, NULL, &rep), SX_OK, "%s", sx_last_error());
    cr_assert_eq(rep.planned_nodes, 3);
    cr_assert_eq(sx_cg_plan_check(g), SX_OK, "%s", sx_last_error());

    sx_rng rng;
    sx_rng_seed(&rng, 11);
    set_input(g, x, &rng, -1, 1);
    set_input(g, y, &rng, -1, 1);
    cr_assert_eq(sx_cg_eval(g, 3, outs), SX_OK, "%s", sx_last_error());
    int64_t calls = sx_cg_graph_stats(g).kernel_calls;
    cr_assert_eq(calls, 6);
    cr_assert_eq(sx_cg_eval(g, 3, outs), SX_OK);
    cr_assert_eq(sx_cg_graph_stats(g).kernel_calls, calls, "nothing changed, nothing runs");

    /* y changes: sin, exp, add run; add needs tanh(x) again, whose block holds 3x by now */
    set_input(g, y, &rng, -1, 1);
    cr_assert_eq(sx_cg_eval(g, 3, outs), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_graph_stats(g).kernel_calls, calls + 4);
    const sx_tensor *xv = sx_cg_value(x), *yv = sx_cg_value(y);
    for (int64_t i = 0; i < s[0]; i++) {
        double want = tanh(sx_tensor_get(xv, i)) + exp(sin(sx_tensor_get(yv, i)));
        double got = sx_tensor_get(sx_cg_value(c), i);
        cr_assert(fabs(got - want) <= 1e-13 * (1 + fabs(want)), "%g vs %g", got, want);
        want = cos(sx_tensor_get(xv, i) * 3);
        got = sx_tensor_get(sx_cg_value(d), i);
        cr_assert(fabs(got - want) <= 1e-13 * (1 + fabs(want)), "%g vs %g", got, want);
    }

    /* a planned node is no result: asking for it is an error */
    set_input(g, x, &rng, -1, 1);
    cr_assert_eq(sx_cg_eval(g, 1, &a), SX_E_STATE);
    cr_assert(strstr(sx_last_error(), "planned") != NULL, "%s", sx_last_error());
    sx_cg_graph_free(g);
}

Test(cgraph_plan, freezing_after_lazy_evaluation_drops_planned_buffers)
{
    for (uint64_t seed = 2000; seed < 2030; seed++) {
        sx_cg_graph *g = NULL, *h = NULL;
        cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
        cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &h), SX_OK);
        rg r, q;
        rg_build(&r, g, seed);
        rg_build(&q, h, seed);
        sx_rng rng, rng2;
        sx_rng_seed(&rng, seed);
        rng2 = rng;
        for (int i = 0; i < r.n_inputs; i++) {
            set_input(g, r.inputs[i], &rng, -1, 1);
            set_input(h, q.inputs[i], &rng2, -1, 1);
        }
        /* a view that no output needs, of a node that will be planned, evaluated now */
        int64_t flat[1] = {r.a * r.b};
        sx_cg_node *t = ok(sx_cg_mul_scalar(g, r.inputs[0], 0.125)),
                   *v = ok(sx_cg_reshape(g, t, 1, flat));
        sx_cg_node *tv[2] = {t, ok(sx_cg_sin(g, v))};
        cr_assert_eq(sx_cg_eval(g, 2, tv), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_eval(g, r.n_outs, r.outs), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_eval(h, q.n_outs, q.outs), SX_OK, "%s", sx_last_error());
        sx_cg_node *fouts[RG_OUT + 1];
        memcpy(fouts, r.outs, (size_t)r.n_outs * sizeof *fouts);
        fouts[r.n_outs] = ok(sx_cg_cos(g, t)); /* t is planned, v is not frozen */
        cr_assert_eq(sx_cg_freeze(g, r.n_outs + 1, fouts), SX_OK, "%s", sx_last_error());
        cr_assert_null(sx_cg_value(v), "a view of a dropped buffer has no value");
        cr_assert_not_null(sx_cg_value(tv[1]), "a non-view keeps its own buffer");
        cr_assert_eq(sx_cg_plan_check(g), SX_OK, "%s", sx_last_error());
        for (int step = 0; step < 2; step++) {
            for (int i = 0; i < r.n_inputs; i++) {
                set_input(g, r.inputs[i], &rng, -1, 1);
                set_input(h, q.inputs[i], &rng2, -1, 1);
            }
            cr_assert_eq(sx_cg_eval(g, r.n_outs, r.outs), SX_OK, "%s", sx_last_error());
            cr_assert_eq(sx_cg_eval(h, q.n_outs, q.outs), SX_OK, "%s", sx_last_error());
            for (int i = 0; i < r.n_outs; i++)
                cr_assert(same_bits(sx_cg_value(r.outs[i]), sx_cg_value(q.outs[i])),
                          "seed %llu step %d output %d", (unsigned long long)seed, step, i);
        }
        sx_cg_graph_free(g);
        sx_cg_graph_free(h);
    }
}

/* ---------------------------------------------------------------- the checker */

Test(cgraph_plan, checker_finds_shared_bytes)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    int64_t s[1] = {16};
    sx_cg_node *x = ok(sx_cg_input(g, "x", SX_F64, 1, s));
    sx_cg_node *a = ok(sx_cg_tanh(g, x));
    sx_cg_node *b = ok(sx_cg_sin(g, x));
    sx_cg_node *c = ok(sx_cg_add(g, a, b));
    sx_cg_node *out = ok(sx_cg_exp(g, c));
    cr_assert_eq(sx_cg_freeze(g, 1, &out), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_plan_check(g), SX_OK, "%s", sx_last_error());
    cr_assert(a->planned && b->planned && c->planned);
    cr_assert(c->plan_from == a || c->plan_from == b, "add writes over a dying input");

    /* a and b are live together: put b over a */
    size_t off = b->plan_offset;
    void *data = b->value.data;
    b->plan_offset = a->plan_offset;
    b->value.data = a->value.data;
    cr_assert_eq(sx_cg_plan_check(g), SX_E_STATE);
    char want[64];
    snprintf(want, sizeof want, "nodes %lld (tanh", (long long)a->id);
    cr_assert(strstr(sx_last_error(), want) != NULL, "%s", sx_last_error());
    snprintf(want, sizeof want, "%lld (sin", (long long)b->id);
    cr_assert(strstr(sx_last_error(), want) != NULL, "%s", sx_last_error());
    b->plan_offset = off;
    b->value.data = data;

    /* an in-place pair the planner did not make */
    sx_cg_node *from = c->plan_from;
    c->plan_from = NULL;
    cr_assert_eq(sx_cg_plan_check(g), SX_E_STATE);
    c->plan_from = from;

    /* a block out of the arena, and a kept value inside it */
    b->plan_offset = g->arena_bytes;
    cr_assert_eq(sx_cg_plan_check(g), SX_E_STATE);
    b->plan_offset = off;
    void *od = out->value.data;
    out->value.data = g->arena;
    cr_assert_eq(sx_cg_plan_check(g), SX_E_STATE);
    cr_assert(strstr(sx_last_error(), "not planned") != NULL, "%s", sx_last_error());
    out->value.data = od;
    cr_assert_eq(sx_cg_plan_check(g), SX_OK, "%s", sx_last_error());
    sx_cg_graph_free(g);
}

Test(cgraph_plan, argument_errors)
{
    cr_assert_eq(sx_cg_plan_check(NULL), SX_E_ARG);
    cr_assert_eq(sx_cg_freeze_ex(NULL, 0, NULL, NULL, NULL), SX_E_ARG);
    sx_cg_node *x, *out;
    sx_cg_graph *g = chain(3, 10, false, &x, &out);
    cr_assert_eq(sx_cg_plan_check(g), SX_E_STATE, "not frozen");
    sx_cg_plan_report rep;
    memset(&rep, 0x5a, sizeof rep);
    sx_cg_plan_report untouched = rep;
    cr_assert_eq(sx_cg_freeze_ex(g, 0, &out, NULL, &rep), SX_E_ARG);
    cr_assert_eq(memcmp(&rep, &untouched, sizeof rep), 0, "report untouched on error");
    cr_assert_not(sx_cg_frozen(g));
    cr_assert_eq(sx_cg_freeze_ex(g, 1, &out, NULL, NULL), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_freeze_ex(g, 1, &out, NULL, &rep), SX_E_STATE, "already frozen");
    cr_assert_eq(memcmp(&rep, &untouched, sizeof rep), 0);
    sx_cg_freeze_params d = sx_cg_freeze_params_default();
    cr_assert(d.plan_memory && d.inplace);
    sx_cg_graph_free(g);
}

/* ---------------------------------------------------------------- out of memory */

/* A small graph with every kind of node the planner treats apart; NULL-tolerant (builds under
 * a failing allocator). */
static sx_status small_build(sx_cg_graph *g, sx_cg_node **outs, sx_cg_node **x)
{
    int64_t s[2] = {4, 3}, t[2] = {3, 4};
    double pv[12] = {1, -2, 3, 0.5, 0.25, -1, 2, 1, -0.5, 0.75, 1.5, -1.25};
    sx_tensor pt = sx_tensor_view(SX_F64, 2, s, pv);
    *x = sx_cg_input(g, "x", SX_F64, 2, s);
    sx_cg_node *p = sx_cg_param(g, "p", &pt);
    sx_cg_node *m = sx_cg_mul(g, sx_cg_tanh(g, *x), p);
    sx_cg_node *d = sx_cg_sub(g, m, sx_cg_sum(g, m, SX_AXIS(0), true));
    sx_cg_node *e = sx_cg_exp(g, sx_cg_reshape(g, d, 2, t));
    sx_cg_node *mm = sx_cg_gemm(g, e, *x, false, false, 0.5, NULL, 0);
    outs[0] = sx_cg_sum(g, mm, SX_AXES_ALL, false);
    outs[1] = sx_cg_add(g, p, sx_cg_mul_scalar(g, d, 0.1));
    outs[2] = sx_cg_assign(g, p, outs[1]);
    return sx_cg_graph_status(g);
}

Test(cgraph_plan, out_of_memory_while_freezing)
{
    /* everything under the failing allocator: each failure is clean and leaks nothing */
    long k = 0;
    for (;; k++) {
        tu_fail_after(k);
        sx_cg_graph *g = NULL;
        sx_cg_node *outs[3], *x;
        sx_status s = sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g);
        if (s == SX_OK)
            s = small_build(g, outs, &x);
        bool built = s == SX_OK;
        if (built) {
            sx_cg_plan_report rep;
            s = sx_cg_freeze_ex(g, 3, outs, NULL, &rep);
            cr_assert_eq(sx_cg_frozen(g), s == SX_OK);
        }
        sx_cg_graph_free(g);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(live, 0, "k=%ld leaked %ld allocations", k, live);
        if (s == SX_OK)
            break;
        cr_assert_eq(s, SX_E_NOMEM, "k=%ld: %s: %s", k, sx_status_str(s), sx_last_error());
        cr_assert_lt(k, 5000);
    }

    /* a failed freeze leaves a graph that freezes and evaluates correctly afterwards, also
     * when its nodes were evaluated (own buffers) before */
    sx_cg_graph *ref = NULL;
    sx_cg_node *rout[3], *rx;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &ref), SX_OK);
    cr_assert_eq(small_build(ref, rout, &rx), SX_OK);
    sx_rng rng;
    sx_rng_seed(&rng, 5);
    set_input(ref, rx, &rng, -1, 1);
    cr_assert_eq(sx_cg_eval(ref, 3, rout), SX_OK);
    set_input(ref, rx, &rng, -1, 1);
    cr_assert_eq(sx_cg_eval(ref, 3, rout), SX_OK);
    for (long j = 0;; j++) {
        sx_cg_graph *g = NULL;
        sx_cg_node *outs[3], *x;
        cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
        cr_assert_eq(small_build(g, outs, &x), SX_OK);
        sx_rng_seed(&rng, 5);
        set_input(g, x, &rng, -1, 1);
        cr_assert_eq(sx_cg_eval(g, 3, outs), SX_OK);
        tu_fail_after(j);
        sx_status s = sx_cg_freeze_ex(g, 3, outs, NULL, NULL);
        tu_fail_reset();
        if (s != SX_OK) {
            cr_assert_eq(s, SX_E_NOMEM);
            cr_assert_not(sx_cg_frozen(g));
            cr_assert_eq(sx_cg_freeze_ex(g, 3, outs, NULL, NULL), SX_OK, "%s", sx_last_error());
        }
        cr_assert_eq(sx_cg_plan_check(g), SX_OK, "%s", sx_last_error());
        set_input(g, x, &rng, -1, 1);
        cr_assert_eq(sx_cg_eval(g, 3, outs), SX_OK, "%s", sx_last_error());
        for (int i = 0; i < 3; i++)
            cr_assert(same_bits(sx_cg_value(outs[i]), sx_cg_value(rout[i])), "j=%ld output %d", j,
                      i);
        sx_cg_graph_free(g);
        if (s == SX_OK)
            break;
        cr_assert_lt(j, 1000);
    }
    sx_cg_graph_free(ref);
}

/* Regression (inference memory): best fit in the order of the steps left the arena
 * above the peak of live bytes when a large value came after a small hole. Steps (units of 8000
 * bytes, in place off): A=tanh(x1) 1 unit, B=tanh(x2) 2, C=sin(A) 1, D=cos(B) 2, then E=concat(C,
 * C) 2 and the output D+E. Best fit in order puts D above C (A's unit is too small), an arena of
 * 6 units for a peak of 5 live units; placing the largest blocks first fits the peak. */
Test(cgraph_plan, arena_fits_the_peak_when_a_large_value_follows_a_small_hole)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    int64_t n1 = 1000, n2 = 2000;
    sx_cg_node *x1 = ok(sx_cg_input(g, "x1", SX_F64, 1, &n1));
    sx_cg_node *x2 = ok(sx_cg_input(g, "x2", SX_F64, 1, &n2));
    sx_cg_node *a = ok(sx_cg_tanh(g, x1)), *b = ok(sx_cg_tanh(g, x2));
    sx_cg_node *c = ok(sx_cg_sin(g, a)), *d = ok(sx_cg_cos(g, b));
    sx_cg_node *e = ok(sx_cg_concat(g, 2, (sx_cg_node *[]){c, c}, 0));
    sx_cg_node *out = ok(sx_cg_add(g, d, e));
    sx_cg_freeze_params p = sx_cg_freeze_params_default();
    p.inplace = false;
    sx_cg_plan_report rep;
    cr_assert_eq(sx_cg_freeze_ex(g, 1, &out, &p, &rep), SX_OK, "%s", sx_last_error());
    cr_assert_eq(rep.planned_nodes, 5);
    cr_assert_eq(rep.peak_live_bytes, 5 * 8000, "peak %zu", rep.peak_live_bytes);
    cr_assert_eq(rep.arena_bytes, rep.peak_live_bytes, "arena %zu", rep.arena_bytes);
    cr_assert_eq(sx_cg_plan_check(g), SX_OK, "%s", sx_last_error());
    sx_rng rng;
    sx_rng_seed(&rng, 18);
    set_input(g, x1, &rng, -1, 1);
    set_input(g, x2, &rng, -1, 1);
    cr_assert_eq(sx_cg_eval(g, 1, &out), SX_OK, "%s", sx_last_error());
    const sx_tensor *v1 = sx_cg_value(x1), *v2 = sx_cg_value(x2), *o = sx_cg_value(out);
    for (int64_t i = 0; i < n2; i++) {
        double want = cos(tanh(sx_tensor_get(v2, i))) + sin(tanh(sx_tensor_get(v1, i % n1)));
        cr_assert_eq(sx_tensor_get(o, i), want, "element %lld", (long long)i);
    }
    sx_cg_graph_free(g);
}
