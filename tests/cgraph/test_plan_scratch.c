/* Kernel scratch planned in the arena (cgraph/plan.c): a node's scratch (its
 * ws_bytes: a convolution's im2col blocks or Winograd's transformed kernel, batch norm's
 * partial sums) is a block of the arena that lives during its node only. Random convolution
 * graphs (Winograd 3x3 and 5x5, dilated im2col, both backward ops, batch norm forward and
 * backward, residual sums) evaluated planned, sequentially and on two engine workers, agree bit
 * for bit with the unplanned frozen graph and with lazy evaluation (a scratch block over a live
 * value would overwrite it); the checker holds, and fails when a scratch block is moved over a
 * live value; scratch shares the values' bytes (the arena grows by less than the scratch). */
#include "testutil.h"

#include <sx_cgraph.h>

#include "cgraph_impl.h" /* ws_planned / ws_offset: to count the planned scratch, to corrupt it */

#include <string.h>

static sx_cg_node *ok_at(sx_cg_node *n, int line)
{
    cr_assert_not_null(n, "line %d: %s", line, sx_last_error());
    return n;
}
#define ok(n) ok_at((n), __LINE__)

static bool same_bits(const sx_tensor *a, const sx_tensor *b)
{
    return a != NULL && b != NULL && a->size == b->size && a->dtype == b->dtype &&
           memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)) == 0;
}

/* ---------------------------------------------------------------- random convolution graphs */

/* Values of one shape (N, H, W, C): 16 channels and 6x6 images, so that 3x3 and 5x5
 * convolutions at stride 1 run Winograd (with their transformed kernels in the scratch), and a
 * dilated 3x3 runs im2col. */
enum { N = 2, H = 6, W = 6, C = 16, POOL = 64, OUTS = 4 };

typedef struct cg_rand {
    sx_cg_graph *g;
    sx_cg_node *x, *pool[POOL];
    int n_pool;
    sx_cg_node *k3, *k5, *gamma, *beta;
    sx_cg_node *outs[OUTS];
    int n_outs;
} cg_rand;

static sx_cg_node *pick(cg_rand *r, sx_rng *rng)
{
    return r->pool[sx_rng_below(rng, (uint64_t)r->n_pool)];
}

/* Recent values more often: long chains, and some values read much later (live across many
 * convolutions, so that their scratch has to go around them). */
static sx_cg_node *recent(cg_rand *r, sx_rng *rng)
{
    int k = r->n_pool < 3 ? r->n_pool : 3;
    return r->pool[r->n_pool - 1 - (int)sx_rng_below(rng, (uint64_t)k)];
}

static sx_cg_node *conv(cg_rand *r, sx_cg_node *x, sx_cg_node *k, int dilation)
{
    sx_conv2d_params p = sx_conv2d_params_default();
    p.padding = SX_PAD_SAME;
    p.dilation_h = p.dilation_w = dilation;
    return ok(sx_cg_conv2d(r->g, x, k, &p));
}

static sx_cg_node *step(cg_rand *r, sx_rng *rng)
{
    sx_cg_graph *g = r->g;
    sx_cg_node *x = recent(r, rng), *y = pick(r, rng);
    const double eps = 1e-3;
    switch (sx_rng_below(rng, 9)) {
    case 0:
        return conv(r, x, r->k3, 1);
    case 1:
        return conv(r, x, r->k5, 1);
    case 2:
        return conv(r, x, r->k3, 2);
    case 3: { /* the input's gradient: the forward pass over dy with the rotated kernel */
        sx_conv2d_params p = sx_conv2d_params_default();
        p.padding = SX_PAD_SAME;
        int64_t xs[4] = {N, H, W, C};
        return ok(sx_cg_conv2d_backward_input(g, r->k3, x, &p, xs));
    }
    case 4: { /* the kernel's gradient (partial sums in the scratch), used as a kernel */
        sx_conv2d_params p = sx_conv2d_params_default();
        p.padding = SX_PAD_SAME;
        int64_t ks[4] = {3, 3, C, C};
        sx_cg_node *dk = ok(sx_cg_conv2d_backward_kernel(g, x, y, &p, ks));
        return conv(r, x, ok(sx_cg_mul_scalar(g, dk, 1.0 / (N * H * W * 8))), 1);
    }
    case 5: { /* batch norm, forward or backward */
        sx_cg_node *st = ok(sx_cg_batch_norm_stats(g, x));
        if (sx_rng_below(rng, 2) == 0)
            return ok(sx_cg_batch_norm(g, x, st, r->gamma, r->beta, eps));
        sx_norm_axes ax = {0, 1, sx_cg_node_shape(x)[sx_cg_node_rank(x) - 1]};
        sx_cg_node *sums = ok(sx_cg_norm_sums(g, x, st, y, ax));
        return ok(sx_cg_norm_dx(g, x, st, r->gamma, y, sums, NULL, ax, eps));
    }
    case 6:
        return ok(sx_cg_add(g, x, y)); /* a residual sum */
    case 7:
        return ok(sx_cg_relu(g, x));
    default:
        return ok(sx_cg_tanh(g, ok(sx_cg_mul(g, x, y))));
    }
}

static void build(cg_rand *r, sx_cg_graph *g, uint64_t seed)
{
    sx_rng rng;
    sx_rng_seed(&rng, seed);
    memset(r, 0, sizeof *r);
    r->g = g;
    sx_dtype dt = sx_cg_graph_dtype(g);
    int64_t xs[4] = {N, H, W, C}, k3s[4] = {3, 3, C, C}, k5s[4] = {5, 5, C, C}, cs[1] = {C};
    r->pool[r->n_pool++] = r->x = ok(sx_cg_input(g, "x", dt, 4, xs));
    sx_tensor *t = tu_rand(&rng, dt, 4, k3s, -0.08, 0.08);
    r->k3 = ok(sx_cg_param(g, "k3", t));
    sx_tensor_free(t);
    t = tu_rand(&rng, dt, 4, k5s, -0.05, 0.05);
    r->k5 = ok(sx_cg_param(g, "k5", t));
    sx_tensor_free(t);
    t = tu_rand(&rng, dt, 1, cs, 0.5, 1.5);
    r->gamma = ok(sx_cg_param(g, "gamma", t));
    sx_tensor_free(t);
    t = tu_rand(&rng, dt, 1, cs, -0.5, 0.5);
    r->beta = ok(sx_cg_param(g, "beta", t));
    sx_tensor_free(t);
    int steps = 4 + (int)sx_rng_below(&rng, 20);
    for (int i = 0; i < steps; i++) {
        sx_cg_node *n = step(r, &rng); /* reads the pool: not in the same expression */
        r->pool[r->n_pool++] = n;
    }
    r->outs[r->n_outs++] = r->pool[r->n_pool - 1];
    for (int i = (int)sx_rng_below(&rng, OUTS); i > 0; i--)
        r->outs[r->n_outs++] = r->pool[1 + sx_rng_below(&rng, (uint64_t)r->n_pool - 1)];
}

enum { K_LAZY, K_FROZEN, K_PLAN, K_PLAN_PAR, N_KINDS };

/* The scratch blocks of a planned graph: how many, and how many lie (in part) below the
 * values' part of the arena, over bytes that values use at other steps. */
static void count_scratch(const sx_cg_graph *g, const sx_cg_plan_report *rep, int *planned,
                          int *shared)
{
    for (int64_t i = 0; i < g->n_order; i++) {
        const sx_cg_node *x = g->order[i];
        cr_assert(!x->ws_planned || x->ws_bytes > 0);
        *planned += x->ws_planned;
        *shared += x->ws_planned && x->ws_offset < rep->arena_bytes;
    }
}

static void run_seed(uint64_t seed, int *planned, int *shared)
{
    sx_dtype dt = seed % 2 ? SX_F32 : SX_F64;
    cg_rand r[N_KINDS];
    sx_cg_plan_report rep[N_KINDS];
    for (int c = 0; c < N_KINDS; c++) {
        sx_cg_graph *g = NULL;
        cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &g), SX_OK);
        build(&r[c], g, seed);
        if (c == K_PLAN_PAR)
            cr_assert_eq(sx_cg_set_workers(g, 2), SX_OK);
        if (c == K_LAZY)
            continue;
        sx_cg_freeze_params p = sx_cg_freeze_params_default();
        p.plan_memory = c != K_FROZEN;
        cr_assert_eq(sx_cg_freeze_ex(g, r[c].n_outs, r[c].outs, &p, &rep[c]), SX_OK,
                     "seed %llu: %s", (unsigned long long)seed, sx_last_error());
        cr_assert_eq(sx_cg_plan_check(g), SX_OK, "seed %llu kind %d: %s", (unsigned long long)seed,
                     c, sx_last_error());
        size_t bytes = 0;
        (void)sx_cg_arena(g, &bytes);
        cr_assert_eq(bytes, rep[c].arena_bytes + rep[c].scratch_bytes);
        if (c == K_FROZEN) {
            cr_assert_eq(rep[c].scratch_bytes, 0);
            for (int64_t i = 0; i < g->n_order; i++)
                cr_assert(!g->order[i]->ws_planned);
        } else {
            /* every node's scratch is in the arena: none outside it */
            cr_assert_eq(rep[c].workspace_bytes, 0, "seed %llu: %zu bytes of scratch outside",
                         (unsigned long long)seed, rep[c].workspace_bytes);
        }
    }
    count_scratch(r[K_PLAN].g, &rep[K_PLAN], planned, shared);
    sx_rng vals;
    sx_rng_seed(&vals, seed ^ 0xc0ffeeULL);
    for (int it = 0; it < 2; it++) {
        int64_t xs[4] = {N, H, W, C};
        sx_tensor *in = tu_rand(&vals, dt, 4, xs, -1, 1);
        for (int c = 0; c < N_KINDS; c++) {
            cr_assert_eq(sx_cg_input_set(r[c].g, r[c].x, in, SX_CG_COPY), SX_OK);
            cr_assert_eq(sx_cg_eval(r[c].g, r[c].n_outs, r[c].outs), SX_OK, "seed %llu kind %d: %s",
                         (unsigned long long)seed, c, sx_last_error());
        }
        sx_tensor_free(in);
        for (int c = 1; c < N_KINDS; c++)
            for (int i = 0; i < r[0].n_outs; i++)
                cr_assert(same_bits(sx_cg_value(r[c].outs[i]), sx_cg_value(r[0].outs[i])),
                          "seed %llu step %d: output %d (%s) of kind %d differs from lazy",
                          (unsigned long long)seed, it, i,
                          sx_cg_op_name(sx_cg_node_op(r[0].outs[i])), c);
    }
    for (int c = 0; c < N_KINDS; c++)
        sx_cg_graph_free(r[c].g);
}

Test(cgraph_plan_scratch, random_conv_graphs_agree_with_unplanned_and_lazy)
{
    int planned = 0, shared = 0;
    for (uint64_t seed = 1; seed <= 60; seed++)
        run_seed(seed, &planned, &shared);
    /* the graphs did plan scratch, and much of it over bytes that values use at other steps */
    cr_assert_gt(planned, 200, "%d scratch blocks planned", planned);
    cr_assert_gt(shared, planned / 4, "%d of %d scratch blocks share the values' bytes", shared,
                 planned);
}

/* ---------------------------------------------------------------- the checker */

/* A chain where a convolution's input lives on past it (a residual sum reads it again): its
 * scratch must go around the input, the convolution's result and the sum's other operand. The
 * checker holds for the plan and fails when the scratch is moved over any of them. */
Test(cgraph_plan_scratch, checker_finds_scratch_over_a_live_value)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    int64_t xs[4] = {N, H, W, C}, ks[4] = {3, 3, C, C};
    sx_rng rng;
    sx_rng_seed(&rng, 7);
    sx_cg_node *x = ok(sx_cg_input(g, "x", SX_F32, 4, xs));
    sx_tensor *t = tu_rand(&rng, SX_F32, 4, ks, -0.1, 0.1);
    sx_cg_node *k = ok(sx_cg_param(g, "k", t));
    sx_tensor_free(t);
    sx_conv2d_params p = sx_conv2d_params_default();
    p.padding = SX_PAD_SAME;
    sx_cg_node *a = ok(sx_cg_relu(g, x));
    sx_cg_node *b = ok(sx_cg_conv2d(g, a, k, &p));
    sx_cg_node *c = ok(sx_cg_conv2d(g, ok(sx_cg_tanh(g, b)), k, &p));
    sx_cg_node *out = ok(sx_cg_add(g, ok(sx_cg_add(g, c, a)), b));
    sx_cg_plan_report rep;
    cr_assert_eq(sx_cg_freeze_ex(g, 1, &out, NULL, &rep), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_plan_check(g), SX_OK, "%s", sx_last_error());
    cr_assert(a->planned && b->planned && b->ws_planned && c->ws_planned && b->ws_bytes > 0);
    cr_assert_eq(rep.workspace_bytes, 0);

    /* c's scratch over a (read by the sum after c), over b (read after c), over c itself */
    const sx_cg_node *over[3] = {a, b, c};
    const char *names[3] = {"relu", "conv2d", "conv2d"};
    size_t off = c->ws_offset;
    for (int i = 0; i < 3; i++) {
        c->ws_offset = over[i]->plan_offset;
        cr_assert_eq(sx_cg_plan_check(g), SX_E_STATE, "case %d", i);
        char want[96];
        snprintf(want, sizeof want, "scratch of node %lld (conv2d", (long long)c->id);
        cr_assert(strstr(sx_last_error(), want) != NULL, "%s", sx_last_error());
        snprintf(want, sizeof want, "value of node %lld (%s", (long long)over[i]->id, names[i]);
        cr_assert(strstr(sx_last_error(), want) != NULL, "%s", sx_last_error());
    }
    /* out of the arena, misaligned */
    c->ws_offset = g->arena_bytes - c->ws_bytes + 64;
    cr_assert_eq(sx_cg_plan_check(g), SX_E_STATE);
    cr_assert(strstr(sx_last_error(), "outside") != NULL, "%s", sx_last_error());
    c->ws_offset = off + 8;
    cr_assert_eq(sx_cg_plan_check(g), SX_E_STATE);
    c->ws_offset = off;
    cr_assert_eq(sx_cg_plan_check(g), SX_OK, "%s", sx_last_error());
    sx_cg_graph_free(g);
}

/* Without a memory plan, or with nothing planned, the scratch stays the graph's own. */
Test(cgraph_plan_scratch, unplanned_graphs_keep_their_scratch_apart)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    int64_t xs[4] = {N, H, W, C}, ks[4] = {3, 3, C, C};
    sx_rng rng;
    sx_rng_seed(&rng, 8);
    sx_cg_node *x = ok(sx_cg_input(g, "x", SX_F32, 4, xs));
    sx_tensor *t = tu_rand(&rng, SX_F32, 4, ks, -0.1, 0.1);
    sx_cg_node *k = ok(sx_cg_param(g, "k", t));
    sx_tensor_free(t);
    sx_conv2d_params p = sx_conv2d_params_default();
    p.padding = SX_PAD_SAME;
    sx_cg_node *y = ok(sx_cg_conv2d(g, x, k, &p)); /* the output: nothing to plan */
    sx_cg_plan_report rep;
    cr_assert_eq(sx_cg_freeze_ex(g, 1, &y, NULL, &rep), SX_OK, "%s", sx_last_error());
    cr_assert_eq(rep.planned_nodes, 0);
    cr_assert_eq(rep.scratch_bytes, 0);
    cr_assert(!y->ws_planned);
    cr_assert_eq(rep.workspace_bytes, y->ws_bytes);
    size_t bytes = 7;
    cr_assert_null(sx_cg_arena(g, &bytes));
    cr_assert_eq(bytes, 0);
    sx_cg_graph_free(g);
}
