/* Parallel evaluation (sx_cg_set_workers, the dependency engine under cgraph): for every op of
 * sx_ops.def (opsamples.c), random graphs with the memory planner (blocks reused in place and by
 * best fit), dropout masks from shared generators, and a small training graph (forward,
 * gradients, fused optimiser updates) over several steps, the results with 2 to 4 workers equal
 * the sequential evaluation's bit for bit. Also failures, the setting and out of memory. */
#include "testutil.h"

#include "opsamples.c"

#include <sx_autodiff.h>
#include <sx_optim.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const sx_dtype dtypes[2] = {SX_F32, SX_F64};

static sx_cg_graph *graph_new(sx_dtype dt, int workers)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &g), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_set_workers(g, workers), SX_OK, "%s", sx_last_error());
    return g;
}

/* a and b hold the same bits (both NULL counts as equal); `log`: report the first difference. */
static bool bits_equal(const sx_tensor *a, const sx_tensor *b, bool log)
{
    if (a == NULL || b == NULL)
        return a == b;
    if (a->dtype != b->dtype || !sx_shape_equal(a->rank, a->shape, b->rank, b->shape))
        return false;
    size_t w = sx_dtype_size(a->dtype);
    for (int64_t i = 0; i < a->size; i++)
        if (memcmp((const char *)a->data + (size_t)i * w, (const char *)b->data + (size_t)i * w,
                   w) != 0) {
            if (log)
                cr_log_error("element %lld: %.17g vs %.17g", (long long)i, sx_tensor_get(a, i),
                             sx_tensor_get(b, i));
            return false;
        }
    return true;
}

static bool same_bits(const sx_tensor *a, const sx_tensor *b)
{
    return bits_equal(a, b, true);
}

static void set_input(sx_cg_graph *g, sx_cg_node *in, sx_rng *rng, double lo, double hi)
{
    sx_tensor *t =
        tu_rand(rng, sx_cg_node_dtype(in), sx_cg_node_rank(in), sx_cg_node_shape(in), lo, hi);
    cr_assert_eq(sx_cg_input_set(g, in, t, SX_CG_COPY), SX_OK, "%s", sx_last_error());
    sx_tensor_free(t);
}

/* ---------------------------------------------------------------- every op */

enum { OP_SEEDS = 2, MAX_SAMPLES = 128 }; /* matmul: 12 variants x 2 seeds x (1 + 3 leaves) */

/* Every variant of op, OP_SEEDS times, side by side in one graph; out[] gets the nodes under
 * test and their leaves (a mutating op's result is in its parameter). */
static int build_op_samples(sx_cg_graph *g, sx_cg_op op, sx_dtype dt, sx_cg_node **out)
{
    int n = 0;
    for (int v = 0; v < os_ops[op].n_variants; v++)
        for (int k = 0; k < OP_SEEDS; k++) {
            os_sample s;
            memset(&s, 0, sizeof s);
            uint64_t seed =
                0x9a7aULL + 1000003ULL * (uint64_t)op + 7919ULL * (uint64_t)v + 31ULL * k;
            sx_cg_node *x = os_build(g, op, dt, seed, v, &s);
            cr_assert_not_null(x, "%s variant %d: %s", os_ops[op].name, v, sx_last_error());
            cr_assert_lt(n + 1 + s.n_leaves, MAX_SAMPLES);
            out[n++] = x;
            for (int i = 0; i < s.n_leaves; i++)
                out[n++] = s.leaf[i];
        }
    return n;
}

Test(cgraph_parallel, every_op_equals_sequential)
{
    for (int op = 0; op < SX_OP_COUNT; op++)
        for (int d = 0; d < 2; d++)
            for (int frozen = 0; frozen < 2; frozen++) {
                int workers = 2 + (op + d) % 3;
                sx_cg_graph *gs = graph_new(dtypes[d], 1), *gp = graph_new(dtypes[d], workers);
                sx_cg_node *ns[MAX_SAMPLES], *np[MAX_SAMPLES];
                int n = build_op_samples(gs, (sx_cg_op)op, dtypes[d], ns);
                cr_assert_eq(build_op_samples(gp, (sx_cg_op)op, dtypes[d], np), n);
                if (frozen) {
                    cr_assert_eq(sx_cg_freeze(gs, n, ns), SX_OK, "%s", sx_last_error());
                    cr_assert_eq(sx_cg_freeze(gp, n, np), SX_OK, "%s", sx_last_error());
                }
                cr_assert_eq(sx_cg_eval(gs, n, ns), SX_OK, "%s: %s", os_ops[op].name,
                             sx_last_error());
                cr_assert_eq(sx_cg_eval(gp, n, np), SX_OK, "%s: %s", os_ops[op].name,
                             sx_last_error());
                for (int i = 0; i < n; i++)
                    cr_assert(same_bits(sx_cg_value(ns[i]), sx_cg_value(np[i])),
                              "%s %s %s: node %d differs with %d workers", os_ops[op].name,
                              dtypes[d] == SX_F32 ? "f32" : "f64", frozen ? "frozen" : "lazy", i,
                              workers);
                cr_assert_eq(sx_cg_graph_stats(gs).kernel_calls, sx_cg_graph_stats(gp).kernel_calls,
                             "%s", os_ops[op].name);
                sx_cg_graph_free(gs);
                sx_cg_graph_free(gp);
            }
}

/* ---------------------------------------------------------------- random graphs */

enum { RG_INPUTS = 3, RG_PARAMS = 3, RG_POOL = 96, RG_OUTS = 12 };

/* A random graph over values of one shape (a, b): element-wise ops, products with a (b, b)
 * weight, reductions broadcast back, reshapes (views) and permutes, softmax, choices, dropout
 * masks from one generator, and assigns to the parameters; several outputs. Values stay bounded
 * (tanh after products) so that nothing overflows over the steps. */
typedef struct rgraph {
    sx_cg_graph *g;
    sx_cg_node *in[RG_INPUTS], *par[RG_PARAMS + 1];
    sx_cg_node *masks[RG_POOL];
    int n_masks;
    sx_cg_node *outs[RG_OUTS];
    int n_outs;
} rgraph;

static sx_cg_node *rg_pick(sx_rng *r, sx_cg_node **pool, int n)
{
    if (n > 3 && sx_rng_below(r, 2) == 0)
        return pool[n - 1 - (int)sx_rng_below(r, 3)]; /* chains */
    return pool[sx_rng_below(r, (uint64_t)n)];        /* and branches */
}

static void rg_build(rgraph *rg, sx_dtype dt, uint64_t seed, int workers, int64_t a, int64_t b,
                     int max_ops)
{
    sx_rng r;
    sx_rng_seed(&r, seed);
    memset(rg, 0, sizeof *rg);
    sx_cg_graph *g = rg->g = graph_new(dt, workers);
    int64_t shape[2] = {a, b}, wshape[2] = {b, b}, ta[2] = {b, a};
    sx_cg_node *pool[RG_POOL];
    int n = 0;
    for (int i = 0; i < RG_INPUTS; i++)
        pool[n++] = rg->in[i] = sx_cg_input(g, NULL, dt, 2, shape);
    for (int i = 0; i <= RG_PARAMS; i++) {
        sx_tensor *t = tu_rand(&r, dt, 2, i < RG_PARAMS ? shape : wshape, -1, 1);
        rg->par[i] = sx_cg_param(g, NULL, t);
        sx_tensor_free(t);
        if (i < RG_PARAMS)
            pool[n++] = rg->par[i];
    }
    sx_cg_node *w = rg->par[RG_PARAMS];
    int rng_id = -1;
    cr_assert_eq(sx_cg_rng_new(g, seed * 7 + 1, &rng_id), SX_OK);
    int n_ops = 2 + (int)sx_rng_below(&r, (uint64_t)max_ops - 1);
    for (int k = 0; k < n_ops && n < RG_POOL - 1; k++) {
        sx_cg_node *x = rg_pick(&r, pool, n), *y = rg_pick(&r, pool, n), *z = NULL;
        switch (sx_rng_below(&r, 12)) {
        case 0: {
            sx_cg_node *(*const un[6])(sx_cg_graph *, sx_cg_node *) = {
                sx_cg_tanh, sx_cg_sigmoid, sx_cg_relu, sx_cg_sin, sx_cg_neg, sx_cg_abs};
            z = un[sx_rng_below(&r, 6)](g, x);
            break;
        }
        case 1: {
            sx_cg_node *(*const bin[5])(sx_cg_graph *, sx_cg_node *, sx_cg_node *) = {
                sx_cg_add, sx_cg_sub, sx_cg_mul, sx_cg_max, sx_cg_min};
            z = bin[sx_rng_below(&r, 5)](g, x, y);
            break;
        }
        case 2:
            z = sx_cg_fma(g, x, y, rg_pick(&r, pool, n));
            break;
        case 3:
            z = sx_cg_tanh(g, sx_cg_matmul(g, x, w, false, sx_rng_below(&r, 2)));
            break;
        case 4: /* a reduction broadcast back over the other axis */
            z = sx_cg_add(g, y, sx_cg_mean(g, x, 1u << sx_rng_below(&r, 2), true));
            break;
        case 5: /* views */
            z = sx_cg_reshape(g, sx_cg_tanh(g, sx_cg_reshape(g, x, 2, ta)), 2, shape);
            break;
        case 6: {
            sx_cg_node *m = sx_cg_dropout_mask(g, rng_id, 0.3, 2, shape);
            rg->masks[rg->n_masks++] = m;
            z = sx_cg_mul(g, x, m);
            break;
        }
        case 7:
            z = sx_cg_softmax(g, x, (int)sx_rng_below(&r, 2));
            break;
        case 8:
            z = sx_cg_where(g, sx_cg_gt(g, x, y), x, y);
            break;
        case 9:
            z = sx_cg_transpose(g, sx_cg_sigmoid(g, sx_cg_transpose(g, x)));
            break;
        case 10:
            z = sx_cg_add_scalar(g, sx_cg_mul_scalar(g, x, 0.5), 0.25);
            break;
        default:
            z = sx_cg_tanh(g, sx_cg_matmul(g, sx_cg_transpose(g, x), y, false, false));
            z = sx_cg_matmul(g, y, z, false, false); /* (a, b)(b, b) */
            z = sx_cg_tanh(g, z);
            break;
        }
        cr_assert_not_null(z, "seed %llu: %s", (unsigned long long)seed, sx_last_error());
        pool[n++] = z;
    }
    rg->outs[rg->n_outs++] = pool[n - 1];
    for (int i = 0; i < 3; i++)
        rg->outs[rg->n_outs++] = rg_pick(&r, pool, n);
    /* assigns read values that read the parameters: readers before writers, then new values */
    for (int i = 0; i < RG_PARAMS; i++)
        if (sx_rng_below(&r, 2) == 0) {
            sx_cg_node *v = sx_cg_tanh(g, rg_pick(&r, pool, n));
            rg->outs[rg->n_outs++] = sx_cg_assign(g, rg->par[i], v);
            cr_assert_not_null(rg->outs[rg->n_outs - 1], "%s", sx_last_error());
        }
}

/* The sequential graph and graphs with 2, 3 and 4 workers, planned (in place on) or lazy, over
 * several steps with new inputs and new masks: outputs and parameters agree bit for bit. */
static void run_random(uint64_t seed, bool frozen, int64_t a, int64_t b, int max_ops, int steps)
{
    enum { CONFIGS = 4 };
    sx_dtype dt = seed % 3 == 0 ? SX_F32 : SX_F64;
    rgraph rg[CONFIGS];
    for (int c = 0; c < CONFIGS; c++) {
        rg_build(&rg[c], dt, seed, c == 0 ? 1 : c + 1, a, b, max_ops);
        if (frozen) {
            cr_assert_eq(sx_cg_freeze(rg[c].g, rg[c].n_outs, rg[c].outs), SX_OK, "seed %llu: %s",
                         (unsigned long long)seed, sx_last_error());
            cr_assert_eq(sx_cg_plan_check(rg[c].g), SX_OK, "%s", sx_last_error());
        }
    }
    sx_rng vals;
    sx_rng_seed(&vals, seed ^ 0xabcdefULL);
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < RG_INPUTS; i++) {
            sx_rng v = vals;
            for (int c = 0; c < CONFIGS; c++) {
                vals = v;
                set_input(rg[c].g, rg[c].in[i], &vals, -2, 2);
            }
        }
        for (int c = 0; c < CONFIGS; c++) {
            for (int m = 0; m < rg[c].n_masks; m++)
                cr_assert_eq(sx_cg_invalidate(rg[c].g, rg[c].masks[m]), SX_OK);
            cr_assert_eq(sx_cg_eval(rg[c].g, rg[c].n_outs, rg[c].outs), SX_OK,
                         "seed %llu step %d config %d: %s", (unsigned long long)seed, step, c,
                         sx_last_error());
        }
        for (int c = 1; c < CONFIGS; c++) {
            for (int i = 0; i < rg[0].n_outs; i++)
                cr_assert(same_bits(sx_cg_value(rg[c].outs[i]), sx_cg_value(rg[0].outs[i])),
                          "seed %llu %s step %d: output %d (%s) differs with %d workers",
                          (unsigned long long)seed, frozen ? "planned" : "lazy", step, i,
                          sx_cg_op_name(sx_cg_node_op(rg[0].outs[i])), c + 1);
            for (int i = 0; i < RG_PARAMS; i++)
                cr_assert(same_bits(sx_cg_value(rg[c].par[i]), sx_cg_value(rg[0].par[i])),
                          "seed %llu step %d: parameter %d differs with %d workers",
                          (unsigned long long)seed, step, i, c + 1);
            cr_assert_eq(sx_cg_graph_stats(rg[c].g).kernel_calls,
                         sx_cg_graph_stats(rg[0].g).kernel_calls);
        }
    }
    for (int c = 0; c < CONFIGS; c++)
        sx_cg_graph_free(rg[c].g);
}

Test(cgraph_parallel, random_planned_graphs_equal_sequential)
{
    sx_rng r;
    sx_rng_seed(&r, 99);
    for (uint64_t seed = 1; seed <= 160; seed++)
        run_random(seed, true, 1 + (int64_t)sx_rng_below(&r, 9), 1 + (int64_t)sx_rng_below(&r, 9),
                   44, 4);
}

Test(cgraph_parallel, random_lazy_graphs_equal_sequential)
{
    sx_rng r;
    sx_rng_seed(&r, 98);
    for (uint64_t seed = 1000; seed < 1060; seed++)
        run_random(seed, false, 1 + (int64_t)sx_rng_below(&r, 9), 1 + (int64_t)sx_rng_below(&r, 9),
                   44, 4);
}

/* Shapes large enough for WIDE nodes (f32) (products of 2^24 flops and more, element-wise nodes
 * over 2^19 elements) beside small ones: kernels with every thread and with one agree. */
Test(cgraph_parallel, wide_nodes_equal_sequential)
{
    run_random(6, true, 512, 128, 10, 2); /* products of 2 * 512 * 128 * 128 = 2^24 flops */
    run_random(9, true, 60000, 3, 10, 2); /* element-wise over 3 x 180000 elements */
}

/* ---------------------------------------------------------------- dropout */

Test(cgraph_parallel, dropout_masks_are_drawn_in_sequential_order)
{
    enum { MASKS = 8, STEPS = 5 };
    int64_t shape[2] = {256, 300}; /* long enough draws to overlap */
    sx_cg_graph *g[2];
    sx_cg_node *m[2][MASKS];
    int rng[2][2];
    for (int c = 0; c < 2; c++) {
        g[c] = graph_new(SX_F32, c == 0 ? 1 : 4);
        cr_assert_eq(sx_cg_rng_new(g[c], 11, &rng[c][0]), SX_OK);
        cr_assert_eq(sx_cg_rng_new(g[c], 12, &rng[c][1]), SX_OK);
        for (int i = 0; i < MASKS; i++)
            m[c][i] = sx_cg_dropout_mask(g[c], rng[c][i % 3 == 2], 0.5, 2, shape);
        cr_assert_eq(sx_cg_freeze(g[c], MASKS, m[c]), SX_OK);
    }
    for (int step = 0; step < STEPS; step++) {
        for (int c = 0; c < 2; c++) {
            for (int i = 0; i < MASKS; i++)
                cr_assert_eq(sx_cg_invalidate(g[c], m[c][i]), SX_OK);
            cr_assert_eq(sx_cg_eval(g[c], MASKS, m[c]), SX_OK, "%s", sx_last_error());
        }
        for (int i = 0; i < MASKS; i++) {
            cr_assert(same_bits(sx_cg_value(m[0][i]), sx_cg_value(m[1][i])),
                      "step %d: mask %d differs", step, i);
            if (i > 0) /* the masks are draws, not copies of one */
                cr_assert_not(bits_equal(sx_cg_value(m[0][i]), sx_cg_value(m[0][0]), false));
        }
        for (int k = 0; k < 2; k++)
            cr_assert_eq(
                memcmp(sx_cg_rng(g[0], rng[0][k]), sx_cg_rng(g[1], rng[1][k]), sizeof(sx_rng)), 0,
                "generator %d ends in another state", k);
    }
    sx_cg_graph_free(g[0]);
    sx_cg_graph_free(g[1]);
}

/* ---------------------------------------------------------------- training */

/* A small CNN training graph: conv 3x3 -> relu -> max pool -> dropout -> dense -> softmax
 * cross-entropy; gradients by autodiff; Adam updates; optimised (fused updates, fused chains)
 * and planned. */
typedef struct trainer {
    sx_cg_graph *g;
    sx_cg_node *x, *y, *lr, *step, *mask, *loss;
    sx_cg_node *params[3];
    sx_cg_node *outs[16];
    int n_outs;
} trainer;

static void trainer_build(trainer *t, int workers, sx_optim_kind kind)
{
    enum { N = 8, H = 6, W = 6, C = 2, K = 4, CLASSES = 4 };
    sx_dtype dt = SX_F32;
    memset(t, 0, sizeof *t);
    sx_cg_graph *g = t->g = graph_new(dt, workers);
    sx_rng r;
    sx_rng_seed(&r, 5);
    int64_t xs[4] = {N, H, W, C}, ys[2] = {N, CLASSES}, ks[4] = {3, 3, C, K};
    int64_t ws[2] = {(H / 2) * (W / 2) * K, CLASSES}, bs[1] = {CLASSES};
    int64_t flat[2] = {N, (H / 2) * (W / 2) * K}, pooled[4] = {N, H / 2, W / 2, K};
    t->x = sx_cg_input(g, "x", dt, 4, xs);
    t->y = sx_cg_input(g, "y", dt, 2, ys);
    t->lr = sx_cg_input(g, "lr", dt, 0, NULL);
    t->step = sx_cg_input(g, "step", dt, 0, NULL);
    const int64_t *pshapes[3] = {ks, ws, bs};
    const int pranks[3] = {4, 2, 1};
    for (int i = 0; i < 3; i++) {
        sx_tensor *v = tu_rand(&r, dt, pranks[i], pshapes[i], -0.5, 0.5);
        t->params[i] = sx_cg_param(g, NULL, v);
        sx_tensor_free(v);
    }
    int rng_id;
    cr_assert_eq(sx_cg_rng_new(g, 77, &rng_id), SX_OK);
    sx_conv2d_params cp = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    sx_pool2d_params pp = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    sx_cg_node *h = sx_cg_relu(g, sx_cg_conv2d(g, t->x, t->params[0], &cp));
    h = sx_cg_maxpool2d(g, h, &pp);
    t->mask = sx_cg_dropout_mask(g, rng_id, 0.25, 4, pooled);
    h = sx_cg_reshape(g, sx_cg_mul(g, h, t->mask), 2, flat);
    sx_cg_node *logits = sx_cg_add(g, sx_cg_matmul(g, h, t->params[1], false, false), t->params[2]);
    t->loss = sx_cg_mean(g, sx_cg_softmax_xent(g, logits, t->y), 1u, false);
    cr_assert_not_null(t->loss, "%s", sx_last_error());
    sx_cg_node *grads[3];
    cr_assert_eq(sx_ad_grad(g, t->loss, 3, t->params, grads), SX_OK, "%s", sx_last_error());
    t->outs[t->n_outs++] = t->loss;
    sx_optim_params op = sx_optim_params_default(kind);
    for (int i = 0; i < 3; i++) {
        int nu = 0;
        cr_assert_eq(sx_optim_update(g, &op, t->params[i], grads[i], t->lr, t->step, NULL,
                                     t->outs + t->n_outs, &nu),
                     SX_OK, "%s", sx_last_error());
        t->n_outs += nu;
    }
    cr_assert_eq(sx_cg_optimise(g, t->n_outs, t->outs, NULL, NULL), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_freeze(g, t->n_outs, t->outs), SX_OK, "%s", sx_last_error());
}

static void set_scalar(sx_cg_graph *g, sx_cg_node *in, double v)
{
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_scalar(sx_cg_node_dtype(in), v, &t), SX_OK);
    cr_assert_eq(sx_cg_input_set(g, in, t, SX_CG_COPY), SX_OK);
    sx_tensor_free(t);
}

Test(cgraph_parallel, training_steps_equal_sequential)
{
    enum { CONFIGS = 3, STEPS = 6 };
    const sx_optim_kind kinds[2] = {SX_OPTIM_ADAM, SX_OPTIM_MOMENTUM};
    for (int kk = 0; kk < 2; kk++) {
        trainer t[CONFIGS];
        for (int c = 0; c < CONFIGS; c++)
            trainer_build(&t[c], c == 0 ? 1 : c + 1, kinds[kk]);
        sx_rng data;
        sx_rng_seed(&data, 31);
        for (int step = 1; step <= STEPS; step++) {
            sx_rng d0 = data;
            for (int c = 0; c < CONFIGS; c++) {
                data = d0;
                set_input(t[c].g, t[c].x, &data, 0, 1);
                set_input(t[c].g, t[c].y, &data, 0, 1); /* soft targets */
                set_scalar(t[c].g, t[c].lr, 0.05);
                set_scalar(t[c].g, t[c].step, step);
                cr_assert_eq(sx_cg_invalidate(t[c].g, t[c].mask), SX_OK);
                cr_assert_eq(sx_cg_eval(t[c].g, t[c].n_outs, t[c].outs), SX_OK, "%s",
                             sx_last_error());
            }
            for (int c = 1; c < CONFIGS; c++) {
                cr_assert(same_bits(sx_cg_value(t[c].loss), sx_cg_value(t[0].loss)),
                          "step %d: loss differs with %d workers", step, c + 1);
                for (int i = 0; i < 3; i++)
                    cr_assert(same_bits(sx_cg_value(t[c].params[i]), sx_cg_value(t[0].params[i])),
                              "step %d: parameter %d differs with %d workers", step, i, c + 1);
            }
        }
        double first = sx_tensor_get(sx_cg_value(t[0].loss), 0);
        cr_assert(first == first, "the loss is a number");
        for (int c = 0; c < CONFIGS; c++)
            sx_cg_graph_free(t[c].g);
    }
}

/* Collectives under the engine: a communicator that stands for two ranks holding the
 * same values (a sum doubles the bucket), safe from any thread, recording the order of the
 * starts (ranks must start their sums in one order, whatever the workers). */
typedef struct two_ranks {
    pthread_mutex_t mu;
    const void *order[16]; /* the buffers started, in order */
    int starts, bad_waits;
} two_ranks;

static sx_status two_start(void *arg, void *buf, int64_t n, sx_dtype dt)
{
    two_ranks *t = arg;
    pthread_mutex_lock(&t->mu);
    if (t->starts < 16)
        t->order[t->starts] = buf;
    t->starts++;
    pthread_mutex_unlock(&t->mu);
    for (int64_t i = 0; i < n; i++)
        if (dt == SX_F32)
            ((float *)buf)[i] *= 2;
        else
            ((double *)buf)[i] *= 2;
    return SX_OK;
}

static sx_status two_wait(void *arg, void *buf)
{
    (void)arg, (void)buf;
    return SX_OK;
}

enum { CBUCKETS = 4, CPER = 2 };

typedef struct coll {
    sx_cg_graph *g;
    sx_cg_node *x, *starts[CBUCKETS], *outs[CBUCKETS + CBUCKETS * CPER];
} coll;

/* Eight products tanh(x w_i) in four buckets, each bucket's start ordered after the previous one
 * (as nn/ makes them), every part read by a sum; the starts are outputs before the sums. */
static void coll_build(coll *c, sx_dtype dt, int workers, two_ranks *t)
{
    c->g = graph_new(dt, workers);
    sx_cg_comm comm = {t, two_start, two_wait};
    cr_assert_eq(sx_cg_set_comm(c->g, &comm), SX_OK);
    const int64_t xs[2] = {32, 48}, ws[2] = {48, 40};
    c->x = sx_cg_input(c->g, "x", dt, 2, xs);
    sx_cg_node *scale = sx_cg_scalar_of(c->g, dt, 0.5);
    sx_rng r;
    sx_rng_seed(&r, 77);
    int n_out = CBUCKETS;
    for (int b = 0; b < CBUCKETS; b++) {
        sx_cg_node *ys[CPER];
        for (int k = 0; k < CPER; k++) {
            sx_tensor *w = tu_rand(&r, dt, 2, ws, -0.5, 0.5);
            ys[k] =
                sx_cg_tanh(c->g, sx_cg_matmul(c->g, c->x, sx_cg_param(c->g, "w", w), false, false));
            sx_tensor_free(w);
        }
        sx_cg_node *sc = scale;
        if (b > 0) {
            sx_cg_node *after[2] = {scale, c->starts[b - 1]};
            sc = sx_cg_op_new(c->g, SX_OP_SEQ, 2, after, NULL);
        }
        c->starts[b] = sx_cg_allreduce_start(c->g, sc, CPER, ys);
        c->outs[b] = c->starts[b];
        for (int k = 0; k < CPER; k++)
            c->outs[n_out++] = sx_cg_sum(
                c->g, sx_cg_allreduce_part(c->g, c->starts[b], k * 32 * 40, 2, (int64_t[]){32, 40}),
                SX_AXIS(1), false);
    }
    cr_assert_eq(sx_cg_graph_status(c->g), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_freeze(c->g, n_out, c->outs), SX_OK, "%s", sx_last_error());
}

Test(cgraph_parallel, collectives_start_in_order_and_equal_sequential)
{
    for (int d = 0; d < 2; d++) {
        two_ranks t[3];
        coll c[3];
        for (int k = 0; k < 3; k++) {
            memset(&t[k], 0, sizeof t[k]);
            pthread_mutex_init(&t[k].mu, NULL);
            coll_build(&c[k], dtypes[d], k == 0 ? 1 : k + 1, &t[k]);
        }
        sx_rng data;
        sx_rng_seed(&data, 5);
        for (int step = 1; step <= 3; step++) {
            sx_rng d0 = data;
            for (int k = 0; k < 3; k++) {
                data = d0;
                set_input(c[k].g, c[k].x, &data, -1, 1);
                cr_assert_eq(sx_cg_eval(c[k].g, CBUCKETS + CBUCKETS * CPER, c[k].outs), SX_OK, "%s",
                             sx_last_error());
                cr_assert_eq(t[k].starts, CBUCKETS * step, "one start per bucket and step");
                for (int b = 0; b < CBUCKETS; b++)
                    cr_assert_eq(t[k].order[(CBUCKETS * (step - 1) + b) % 16],
                                 sx_cg_value(c[k].starts[b])->data,
                                 "%d workers: bucket %d started out of order", k + 1, b);
            }
            for (int k = 1; k < 3; k++)
                for (int i = 0; i < CBUCKETS + CBUCKETS * CPER; i++)
                    cr_assert(same_bits(sx_cg_value(c[k].outs[i]), sx_cg_value(c[0].outs[i])),
                              "step %d: output %d differs with %d workers", step, i, k + 1);
        }
        /* the sums: 2 x 0.5 x tanh(x w): within (-1, 1) per element, not all zero */
        double any = 0;
        for (int64_t i = 0; i < 32; i++)
            any += fabs(sx_tensor_get(sx_cg_value(c[0].outs[CBUCKETS]), i));
        cr_assert_gt(any, 0);
        for (int k = 0; k < 3; k++) {
            sx_cg_graph_free(c[k].g);
            pthread_mutex_destroy(&t[k].mu);
        }
    }
}

/* Frozen parallel evaluations allocate nothing, from the first: freezing lays out the scratch
 * and makes room in the engine. */
Test(cgraph_parallel, frozen_steps_allocate_nothing)
{
    trainer t;
    trainer_build(&t, 2, SX_OPTIM_ADAM);
    sx_rng data;
    sx_rng_seed(&data, 3);
    for (int step = 1; step <= 4; step++) {
        set_input(t.g, t.x, &data, 0, 1);
        set_input(t.g, t.y, &data, 0, 1);
        set_scalar(t.g, t.lr, 0.01);
        set_scalar(t.g, t.step, step);
        cr_assert_eq(sx_cg_invalidate(t.g, t.mask), SX_OK);
        tu_fail_after(1L << 40); /* counts */
        sx_status s = sx_cg_eval(t.g, t.n_outs, t.outs);
        long n = tu_alloc_count();
        tu_fail_reset();
        cr_assert_eq(s, SX_OK, "%s", sx_last_error());
        cr_assert_eq(n, 0, "step %d: %ld allocations", step, n);
    }
    sx_cg_graph_free(t.g);
}

/* ---------------------------------------------------------------- failures */

/* A kernel failing on a worker: the status and message reach the caller, what depends on the
 * failed node stays invalid, and the graph evaluates again once the input is fixed. */
Test(cgraph_parallel, a_failing_node_is_reported_and_the_graph_recovers)
{
    int64_t sq[2] = {4, 4};
    sx_cg_graph *g[2];
    sx_cg_node *m[2], *x[2], *outs[2][3];
    sx_status st[2];
    for (int c = 0; c < 2; c++) {
        g[c] = graph_new(SX_F64, c == 0 ? 1 : 3);
        m[c] = sx_cg_input(g[c], "m", SX_F64, 2, sq);
        x[c] = sx_cg_input(g[c], "x", SX_F64, 2, sq);
        sx_cg_node *ch = sx_cg_cholesky(g[c], m[c]);
        outs[c][0] = sx_cg_add_scalar(g[c], ch, 1.0); /* depends on the failure */
        outs[c][1] = sx_cg_tanh(g[c], x[c]);          /* independent */
        outs[c][2] = sx_cg_mul(g[c], outs[c][1], outs[c][1]);
        cr_assert_eq(sx_cg_freeze(g[c], 3, outs[c]), SX_OK);
        sx_tensor *bad = tu_zeros(SX_F64, 2, sq); /* not positive definite */
        sx_tensor_set(bad, 0, -1.0);
        cr_assert_eq(sx_cg_input_set(g[c], m[c], bad, SX_CG_COPY), SX_OK);
        sx_tensor_free(bad);
        sx_rng r;
        sx_rng_seed(&r, 4);
        set_input(g[c], x[c], &r, -1, 1);
        sx_error_clear();
        st[c] = sx_cg_eval(g[c], 3, outs[c]);
        cr_assert_neq(st[c], SX_OK);
        cr_assert_neq(sx_last_error()[0], '\0', "no message");
        cr_assert_not(sx_cg_valid(outs[c][0]));
    }
    cr_assert_eq(st[1], st[0], "%s vs %s", sx_status_str(st[1]), sx_status_str(st[0]));
    for (int c = 0; c < 2; c++) {
        sx_tensor *spd = tu_zeros(SX_F64, 2, sq);
        for (int i = 0; i < 4; i++)
            sx_tensor_set(spd, i * 5, 2.0 + i);
        cr_assert_eq(sx_cg_input_set(g[c], m[c], spd, SX_CG_COPY), SX_OK);
        sx_tensor_free(spd);
        cr_assert_eq(sx_cg_eval(g[c], 3, outs[c]), SX_OK, "%s", sx_last_error());
    }
    for (int i = 0; i < 3; i++)
        cr_assert(same_bits(sx_cg_value(outs[0][i]), sx_cg_value(outs[1][i])));
    /* an input without a value: the same error as sequentially */
    for (int c = 0; c < 2; c++) {
        sx_cg_graph *h = graph_new(SX_F32, c == 0 ? 1 : 2);
        sx_cg_node *in = sx_cg_input(h, "never", SX_F32, 2, sq);
        sx_cg_node *o = sx_cg_neg(h, in);
        cr_assert_eq(sx_cg_eval(h, 1, &o), SX_E_STATE);
        cr_assert(strstr(sx_last_error(), "has no value") != NULL, "%s", sx_last_error());
        sx_cg_graph_free(h);
        sx_cg_graph_free(g[c]);
    }
}

/* ---------------------------------------------------------------- the setting */

Test(cgraph_parallel, workers_setting_and_environment)
{
    cr_assert_eq(unsetenv("SX_ENGINE_WORKERS"), 0);
    sx_cg_graph *g = graph_new(SX_F32, 0);
    cr_assert_eq(sx_cg_workers(g), 1, "sequential by default");
    cr_assert_eq(sx_cg_set_workers(NULL, 2), SX_E_ARG);
    cr_assert_eq(sx_cg_set_workers(g, -1), SX_E_ARG);
    cr_assert_eq(sx_cg_set_workers(g, 257), SX_E_ARG);
    cr_assert_eq(sx_cg_workers(g), 1, "a rejected setting changes nothing");
    cr_assert_eq(sx_cg_set_workers(g, 3), SX_OK);
    cr_assert_eq(sx_cg_workers(g), 3);
    cr_assert_eq(setenv("SX_ENGINE_WORKERS", "4", 1), 0);
    cr_assert_eq(sx_cg_workers(g), 3, "an explicit setting wins");
    cr_assert_eq(sx_cg_set_workers(g, 0), SX_OK);
    cr_assert_eq(sx_cg_workers(g), 4, "0 follows the environment");
    cr_assert_eq(sx_cg_set_workers(g, 1), SX_OK);
    cr_assert_eq(sx_cg_workers(g), 1);
    cr_assert_eq(setenv("SX_ENGINE_WORKERS", "1000", 1), 0);
    cr_assert_eq(sx_cg_set_workers(g, 0), SX_OK);
    cr_assert_eq(sx_cg_workers(g), 1, "a bad value means sequential");
    cr_assert_eq(sx_cg_workers(NULL), 1);
    sx_cg_graph_free(g);
}

/* Changing the workers of a frozen graph between evaluations keeps the results. */
Test(cgraph_parallel, workers_change_between_evaluations)
{
    trainer a, b;
    trainer_build(&a, 1, SX_OPTIM_SGD);
    trainer_build(&b, 1, SX_OPTIM_SGD);
    const int plan[6] = {2, 1, 4, 3, 1, 2};
    sx_rng data;
    sx_rng_seed(&data, 8);
    for (int step = 1; step <= 6; step++) {
        cr_assert_eq(sx_cg_set_workers(b.g, plan[step - 1]), SX_OK);
        sx_rng d0 = data;
        trainer *ts[2] = {&a, &b};
        for (int c = 0; c < 2; c++) {
            data = d0;
            set_input(ts[c]->g, ts[c]->x, &data, 0, 1);
            set_input(ts[c]->g, ts[c]->y, &data, 0, 1);
            set_scalar(ts[c]->g, ts[c]->lr, 0.1);
            set_scalar(ts[c]->g, ts[c]->step, step);
            cr_assert_eq(sx_cg_invalidate(ts[c]->g, ts[c]->mask), SX_OK);
            cr_assert_eq(sx_cg_eval(ts[c]->g, ts[c]->n_outs, ts[c]->outs), SX_OK);
        }
        cr_assert(same_bits(sx_cg_value(a.loss), sx_cg_value(b.loss)), "step %d", step);
        for (int i = 0; i < 3; i++)
            cr_assert(same_bits(sx_cg_value(a.params[i]), sx_cg_value(b.params[i])));
    }
    sx_cg_graph_free(a.g);
    sx_cg_graph_free(b.g);
}

/* ---------------------------------------------------------------- out of memory */

/* Freezing and evaluating a parallel graph under the failing allocator, failing each allocation
 * in turn: SX_E_NOMEM, nothing leaks. The process-wide engine is started first (it lives until
 * exit, so its allocations are not the graph's). */
Test(cgraph_parallel, out_of_memory_everywhere)
{
    trainer warm;
    trainer_build(&warm, 3, SX_OPTIM_ADAM);
    sx_rng data;
    sx_rng_seed(&data, 1);
    set_input(warm.g, warm.x, &data, 0, 1);
    set_input(warm.g, warm.y, &data, 0, 1);
    set_scalar(warm.g, warm.lr, 0.01);
    set_scalar(warm.g, warm.step, 1);
    cr_assert_eq(sx_cg_eval(warm.g, warm.n_outs, warm.outs), SX_OK);
    for (long k = 0;; k++) {
        tu_fail_after(k);
        int64_t shape[2] = {5, 6};
        sx_cg_graph *g = NULL;
        sx_status s = sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g);
        sx_cg_node *outs[2] = {NULL, NULL};
        if (s == SX_OK)
            s = sx_cg_set_workers(g, 3);
        if (s == SX_OK) {
            sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 2, shape);
            sx_cg_node *a = sx_cg_tanh(g, x), *b = sx_cg_exp(g, x);
            outs[0] = sx_cg_add(g, a, b);
            outs[1] = sx_cg_mul(g, a, sx_cg_sin(g, b));
            s = outs[0] && outs[1] ? SX_OK : sx_cg_graph_status(g);
            if (s == SX_OK)
                s = sx_cg_freeze(g, 2, outs);
            sx_tensor *v = NULL;
            if (s == SX_OK)
                s = sx_tensor_zeros(SX_F64, 2, shape, &v);
            if (s == SX_OK)
                s = sx_cg_input_set(g, x, v, SX_CG_COPY);
            sx_tensor_free(v);
            if (s == SX_OK)
                s = sx_cg_eval(g, 2, outs);
        }
        sx_cg_graph_free(g);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(live, 0, "k=%ld leaked %ld allocations", k, live);
        if (s == SX_OK)
            break;
        cr_assert_eq(s, SX_E_NOMEM, "k=%ld: %s: %s", k, sx_status_str(s), sx_last_error());
        cr_assert_lt(k, 1000);
    }
    sx_cg_graph_free(warm.g);
}
