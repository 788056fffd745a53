/* The batch-norm passes (cgraph/opt_bn.c). SX_PASS_BN_FOLD: mul(conv2d(x, k), a) ->
 * conv2d(x, mul(k, a)) for a per-output-channel a; graphs with and without the pass give
 * outputs within the f64 rounding bound stated below; the pass leaves alone what it must not
 * fold, and is off by default. SX_PASS_BN_RECOMPUTE: a training graph's relu(batch_norm) copied
 * for the backward pass gives the same bits, planned with less memory live at once.
 * SX_PASS_BN_RELU: relu in the batch norm's pass, the same bits, and a graph differentiated after
 * it gives the gradients of the unfused graph. */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include <sx_autodiff.h>

#define U 0x1p-53 /* f64's unit roundoff */

static sx_cg_node *rand_input(sx_cg_graph *g, sx_rng *r, const char *name, int rank,
                              const int64_t *shape, double lo, double hi)
{
    sx_cg_node *x = sx_cg_input(g, name, SX_F64, rank, shape);
    sx_tensor *v = tu_rand(r, SX_F64, rank, shape, lo, hi);
    cr_assert_eq(sx_cg_input_set(g, x, v, SX_CG_COPY), SX_OK);
    sx_tensor_free(v);
    return x;
}

static int64_t count_op(sx_cg_graph *g, sx_cg_op op)
{
    int64_t c = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        c += n != NULL && sx_cg_node_op(n) == op;
    }
    return c;
}

typedef struct bn_case {
    int64_t xs[4], ks[4];
    sx_conv2d_params p;
} bn_case;

typedef struct bn_graph {
    sx_cg_graph *g;
    sx_cg_node *x, *k, *a, *b, *y;
} bn_graph;

/* y = relu(conv(x, k) a + b) (inference batch norm after a convolution), the same values for
 * the same seed */
static bn_graph bn_build(const bn_case *c, uint64_t seed)
{
    bn_graph t;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &t.g), SX_OK);
    sx_rng r;
    sx_rng_seed(&r, seed);
    int64_t f[1] = {c->ks[3]};
    t.x = rand_input(t.g, &r, "x", 4, c->xs, -1, 1);
    t.k = rand_input(t.g, &r, "k", 4, c->ks, -1, 1);
    t.a = rand_input(t.g, &r, "a", 1, f, -2, 2);
    t.b = rand_input(t.g, &r, "b", 1, f, -1, 1);
    t.y = sx_cg_relu(t.g,
                     sx_cg_add(t.g, sx_cg_mul(t.g, sx_cg_conv2d(t.g, t.x, t.k, &c->p), t.a), t.b));
    cr_assert_not_null(t.y, "%s", sx_last_error());
    return t;
}

static sx_cg_opt_params with_fold(bool fold)
{
    sx_cg_opt_params p = sx_cg_opt_params_default();
    p.enable[SX_PASS_BN_FOLD] = fold;
    return p;
}

/* The bound: the folded and unfolded outputs are each within (K + 2) u (S + |b|) of the exact
 * value, K = kh kw c/groups products per output, S = conv(|x|, |k|) |a| (the standard dot-product
 * error bound gamma_K plus the product by a and the shift); so they differ by at most twice
 * that (relu only shrinks differences). */
Test(cgraph_opt_bn, folded_outputs_within_the_f64_rounding_bound)
{
    bn_case cases[3] = {
        {{2, 7, 6, 3}, {3, 3, 3, 5}, sx_conv2d_params_default()},
        {{1, 9, 9, 4}, {1, 1, 4, 8}, sx_conv2d_params_default()},
        {{2, 8, 8, 6}, {3, 3, 2, 6}, sx_conv2d_params_default()},
    };
    cases[0].p.padding = SX_PAD_SAME;
    cases[1].p.stride_h = cases[1].p.stride_w = 2;
    cases[2].p.padding = SX_PAD_SAME;
    cases[2].p.groups = 3;
    for (int ci = 0; ci < 3; ci++) {
        const bn_case *c = &cases[ci];
        bn_graph plain = bn_build(c, 7 + (uint64_t)ci), fold = bn_build(c, 7 + (uint64_t)ci);
        sx_cg_opt_params pp = with_fold(false), pf = with_fold(true);
        sx_cg_opt_report rp, rf;
        cr_assert_eq(sx_cg_optimise(plain.g, 1, &plain.y, &pp, &rp), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_optimise(fold.g, 1, &fold.y, &pf, &rf), SX_OK, "%s", sx_last_error());
        cr_assert_eq(rp.changed[SX_PASS_BN_FOLD], 0);
        cr_assert_eq(rf.changed[SX_PASS_BN_FOLD], 1, "case %d", ci);
        /* the product left the activations: the fused pass reads the convolution and b only */
        cr_assert_eq(count_op(fold.g, SX_OP_CONV2D), 1);
        cr_assert_eq(sx_cg_eval(plain.g, 1, &plain.y), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_eval(fold.g, 1, &fold.y), SX_OK, "%s", sx_last_error());
        /* S + |b| from |x|, |k|, |a|, |b| in an unoptimised graph */
        bn_graph ab = bn_build(c, 7 + (uint64_t)ci);
        sx_cg_node *s = sx_cg_add(
            ab.g,
            sx_cg_mul(ab.g, sx_cg_conv2d(ab.g, sx_cg_abs(ab.g, ab.x), sx_cg_abs(ab.g, ab.k), &c->p),
                      sx_cg_abs(ab.g, ab.a)),
            sx_cg_abs(ab.g, ab.b));
        cr_assert_eq(sx_cg_eval(ab.g, 1, &s), SX_OK, "%s", sx_last_error());
        const sx_tensor *yp = sx_cg_value(plain.y), *yf = sx_cg_value(fold.y), *sv = sx_cg_value(s);
        double kterms = (double)(c->ks[0] * c->ks[1] * c->ks[2]), worst = 0;
        int64_t differ = 0;
        for (int64_t i = 0; i < yp->size; i++) {
            double d = fabs(SX_F64P(yp)[i] - SX_F64P(yf)[i]);
            double bound = 2 * (kterms + 2) * U * SX_F64P(sv)[i];
            cr_assert_leq(d, bound, "case %d element %lld: %g apart, bound %g", ci, (long long)i, d,
                          bound);
            differ += d > 0;
            worst = d / (bound > 0 ? bound : 1) > worst ? d / (bound > 0 ? bound : 1) : worst;
        }
        cr_log_info("case %d: %lld of %lld outputs differ, worst at %.3f of the bound", ci,
                    (long long)differ, (long long)yp->size, worst);
        sx_cg_graph_free(plain.g);
        sx_cg_graph_free(fold.g);
        sx_cg_graph_free(ab.g);
    }
}

/* The pass moves the scale only where it is the convolution's one reader, and only a scale of
 * the output channels (f elements or one). */
Test(cgraph_opt_bn, leaves_shared_convolutions_and_other_operands)
{
    /* (the output, (2,5,3,4), has more elements than the kernel: foldable but for the reason
     * each case names) */
    bn_case c = {{2, 7, 5, 2}, {3, 3, 2, 4}, sx_conv2d_params_default()};
    sx_cg_opt_params pf = with_fold(true);
    sx_cg_opt_report r;
    /* the convolution is also an output */
    bn_graph t = bn_build(&c, 3);
    sx_cg_node *conv = sx_cg_node_input(sx_cg_node_input(sx_cg_node_input(t.y, 0), 0), 0);
    cr_assert_eq(sx_cg_node_op(conv), SX_OP_CONV2D);
    sx_cg_node *outs[2] = {t.y, conv};
    cr_assert_eq(sx_cg_optimise(t.g, 2, outs, &pf, &r), SX_OK, "%s", sx_last_error());
    cr_assert_eq(r.changed[SX_PASS_BN_FOLD], 0);
    sx_cg_graph_free(t.g);
    /* a factor of the output's shape, and one over the width (3 elements, not f = 4) */
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &t.g), SX_OK);
    sx_rng rng;
    sx_rng_seed(&rng, 4);
    int64_t ys[4] = {2, 5, 3, 4}, w[1] = {3};
    t.x = rand_input(t.g, &rng, "x", 4, c.xs, -1, 1);
    t.k = rand_input(t.g, &rng, "k", 4, c.ks, -1, 1);
    sx_cg_node *full = rand_input(t.g, &rng, "full", 4, ys, -1, 1);
    sx_cg_node *col = rand_input(t.g, &rng, "col", 1, w, -1, 1);
    sx_cg_node *o2[2] = {
        sx_cg_mul(t.g, sx_cg_conv2d(t.g, t.x, t.k, &c.p), full),
        sx_cg_mul(t.g, sx_cg_permute(t.g, sx_cg_conv2d(t.g, t.x, t.k, &c.p), (int[]){0, 1, 3, 2}),
                  col)};
    cr_assert_not_null(o2[1], "%s", sx_last_error());
    cr_assert_eq(sx_cg_optimise(t.g, 2, o2, &pf, &r), SX_OK, "%s", sx_last_error());
    cr_assert_eq(r.changed[SX_PASS_BN_FOLD], 0);
    sx_cg_graph_free(t.g);
}

/* A kernel with as many elements as the output or more (batch 1's late layers) stays: its
 * product, run at each evaluation, would cost more than the one it removes. */
Test(cgraph_opt_bn, leaves_kernels_larger_than_their_output)
{
    bn_case big = {{1, 3, 3, 8}, {3, 3, 8, 16}, sx_conv2d_params_default()};
    big.p.padding = SX_PAD_SAME; /* output (1,3,3,16): 144 elements, kernel 1152 */
    sx_cg_opt_params pf = with_fold(true);
    sx_cg_opt_report r;
    bn_graph t = bn_build(&big, 5);
    cr_assert_eq(sx_cg_optimise(t.g, 1, &t.y, &pf, &r), SX_OK, "%s", sx_last_error());
    cr_assert_eq(r.changed[SX_PASS_BN_FOLD], 0);
    sx_cg_graph_free(t.g);
    /* the same layer over a batch of 16: output 2304 elements, folded */
    big.xs[0] = 16;
    t = bn_build(&big, 5);
    cr_assert_eq(sx_cg_optimise(t.g, 1, &t.y, &pf, &r), SX_OK, "%s", sx_last_error());
    cr_assert_eq(r.changed[SX_PASS_BN_FOLD], 1);
    sx_cg_graph_free(t.g);
}

/* Off by default (it changes rounding): the default optimiser keeps every value's bits. */
Test(cgraph_opt_bn, off_by_default)
{
    cr_assert(!sx_cg_opt_params_default().enable[SX_PASS_BN_FOLD]);
    cr_assert_str_eq(sx_cg_pass_name(SX_PASS_BN_FOLD), "bn fold");
    bn_case c = {{1, 5, 5, 2}, {3, 3, 2, 4}, sx_conv2d_params_default()};
    bn_graph t = bn_build(&c, 5);
    sx_cg_opt_report r;
    cr_assert_eq(sx_cg_optimise(t.g, 1, &t.y, NULL, &r), SX_OK, "%s", sx_last_error());
    cr_assert_eq(r.changed[SX_PASS_BN_FOLD], 0);
    sx_cg_graph_free(t.g);
}

/* ---------------------------------------------------------------- recompute */

#define LAYERS 5

typedef struct train_graph {
    sx_cg_graph *g;
    sx_cg_node *outs[1 + LAYERS]; /* loss, then the kernels' gradients, the last layer's first */
    sx_cg_node *r;                /* the first relu(batch_norm(conv(x, k1))) */
} train_graph;

/* loss = sum(conv(cbr(...cbr(x, k1)..., k4), k5) w), cbr = relu(batch_norm(conv)) with batch
 * statistics, and its gradients with respect to the kernels, the last layer's first (as sx_nn
 * orders its updates) */
static train_graph train_build(sx_dtype dt)
{
    train_graph t;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &t.g), SX_OK);
    sx_cg_graph *g = t.g;
    sx_rng r;
    sx_rng_seed(&r, 11);
    int64_t xs[4] = {4, 8, 8, 8}, ks[4] = {3, 3, 8, 8}, c[1] = {8};
    sx_tensor *xv = tu_rand(&r, dt, 4, xs, -1, 1), *wv = tu_rand(&r, dt, 4, xs, -1, 1);
    sx_cg_node *x = sx_cg_input(g, "x", dt, 4, xs), *h = x, *k[LAYERS];
    cr_assert_eq(sx_cg_input_set(g, x, xv, SX_CG_COPY), SX_OK);
    sx_cg_node *w = sx_cg_const(g, wv);
    sx_tensor_free(xv);
    sx_tensor_free(wv);
    sx_conv2d_params p = sx_conv2d_params_default();
    p.padding = SX_PAD_SAME;
    for (int l = 0; l < LAYERS; l++) {
        sx_tensor *kv = tu_rand(&r, dt, 4, ks, -0.5, 0.5), *gv = tu_rand(&r, dt, 1, c, 0.5, 1.5),
                  *bv = tu_rand(&r, dt, 1, c, -1, 1);
        k[l] = sx_cg_param(g, "k", kv);
        h = sx_cg_conv2d(g, h, k[l], &p);
        if (l < LAYERS - 1) {
            sx_cg_node *gamma = sx_cg_param(g, "gamma", gv), *beta = sx_cg_param(g, "beta", bv);
            h = sx_cg_relu(g,
                           sx_cg_batch_norm(g, h, sx_cg_batch_norm_stats(g, h), gamma, beta, 1e-3));
            if (l == 0)
                t.r = h;
        }
        sx_tensor_free(kv);
        sx_tensor_free(gv);
        sx_tensor_free(bv);
    }
    sx_cg_node *loss = sx_cg_sum(g, sx_cg_mul(g, h, w), SX_AXES_ALL, false), *wrt[LAYERS];
    for (int l = 0; l < LAYERS; l++)
        wrt[l] = k[LAYERS - 1 - l];
    t.outs[0] = loss;
    cr_assert_eq(sx_ad_grad(g, loss, LAYERS, wrt, t.outs + 1), SX_OK, "%s", sx_last_error());
    return t;
}

Test(cgraph_opt_bn, recompute_gives_the_same_bits_with_less_memory_live)
{
    for (int dt = 0; dt < 2; dt++) {
        train_graph a = train_build((sx_dtype)dt), b = train_build((sx_dtype)dt);
        sx_cg_opt_params off = sx_cg_opt_params_default(), on = off;
        cr_assert(on.enable[SX_PASS_BN_RECOMPUTE], "on by default: it keeps every bit");
        off.enable[SX_PASS_BN_RECOMPUTE] = false;
        off.enable[SX_PASS_BN_RELU] = false;
        sx_cg_opt_report ra, rb;
        cr_assert_eq(sx_cg_optimise(a.g, 1 + LAYERS, a.outs, &off, &ra), SX_OK, "%s",
                     sx_last_error());
        cr_assert_eq(sx_cg_optimise(b.g, 1 + LAYERS, b.outs, &on, &rb), SX_OK, "%s",
                     sx_last_error());
        cr_assert_eq(ra.changed[SX_PASS_BN_RECOMPUTE], 0);
        cr_assert_eq(rb.changed[SX_PASS_BN_RECOMPUTE], LAYERS - 1);
        /* relu went into every batch norm, the copies' too */
        cr_assert_eq(rb.changed[SX_PASS_BN_RELU], 2 * (LAYERS - 1));
        cr_assert_eq(count_op(b.g, SX_OP_RELU), 0);
        cr_assert_eq(count_op(a.g, SX_OP_RELU), LAYERS - 1);
        /* each forward batch norm (relu now in it) keeps only its forward reader; its copy
         * serves the gradient (the next convolution's backward-kernel op, and as relu's mask the
         * batch norm's own backward sums and dx: relu's rule runs inside them) */
        int64_t one = 0, three = 0;
        for (int64_t i = 0; i < sx_cg_graph_size(b.g); i++) {
            sx_cg_node *n = sx_cg_graph_node(b.g, i);
            if (n != NULL && sx_cg_node_op(n) == SX_OP_NORM) {
                one += sx_cg_node_n_users(n) == 1;
                three += sx_cg_node_n_users(n) == 3;
            }
        }
        cr_assert_eq(one, LAYERS - 1);
        cr_assert_eq(three, LAYERS - 1);
        cr_assert_gt(sx_cg_node_n_users(a.r), 1);
        cr_assert_eq(count_op(a.g, SX_OP_NORM), LAYERS - 1);
        cr_assert_eq(count_op(b.g, SX_OP_NORM), 2 * (LAYERS - 1));
        sx_cg_plan_report pa, pb;
        sx_cg_freeze_params fp = sx_cg_freeze_params_default();
        cr_assert_eq(sx_cg_freeze_ex(a.g, 1 + LAYERS, a.outs, &fp, &pa), SX_OK, "%s",
                     sx_last_error());
        cr_assert_eq(sx_cg_freeze_ex(b.g, 1 + LAYERS, b.outs, &fp, &pb), SX_OK, "%s",
                     sx_last_error());
        cr_assert_eq(sx_cg_plan_check(b.g), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_eval(a.g, 1 + LAYERS, a.outs), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_eval(b.g, 1 + LAYERS, b.outs), SX_OK, "%s", sx_last_error());
        for (int i = 0; i < 1 + LAYERS; i++) {
            const sx_tensor *va = sx_cg_value(a.outs[i]), *vb = sx_cg_value(b.outs[i]);
            cr_assert_eq(va->size, vb->size);
            cr_assert_eq(memcmp(va->data, vb->data, (size_t)va->size * sx_dtype_size(va->dtype)), 0,
                         "%s output %d differs", sx_dtype_name((sx_dtype)dt), i);
        }
        cr_log_info("%s: peak live %zu -> %zu bytes, arena %zu -> %zu", sx_dtype_name((sx_dtype)dt),
                    pa.peak_live_bytes, pb.peak_live_bytes, pa.arena_bytes, pb.arena_bytes);
        cr_assert_lt(pb.peak_live_bytes, pa.peak_live_bytes);
        sx_cg_graph_free(a.g);
        sx_cg_graph_free(b.g);
    }
}

/* relu(batch_norm(x, stats(x), gamma, beta)) fused by SX_PASS_BN_RELU, then differentiated: the
 * gradient rule of the fused op (relu's selection, then batch norm's) gives the bits of the
 * unfused graph's gradients, f32 and f64. */
Test(cgraph_opt_bn, relu_in_batch_norm_keeps_values_and_gradients)
{
    for (int dt = 0; dt < 2; dt++) {
        sx_cg_node *outs[2][4];
        sx_cg_graph *gs[2];
        for (int fused = 0; fused < 2; fused++) {
            sx_cg_graph *g = NULL;
            cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, (sx_dtype)dt, &g), SX_OK);
            sx_rng r;
            sx_rng_seed(&r, 21);
            int64_t xs[4] = {3, 5, 5, 7}, c[1] = {7};
            sx_tensor *v[4] = {
                tu_rand(&r, (sx_dtype)dt, 4, xs, -2, 2), tu_rand(&r, (sx_dtype)dt, 1, c, 0.5, 1.5),
                tu_rand(&r, (sx_dtype)dt, 1, c, -1, 1), tu_rand(&r, (sx_dtype)dt, 4, xs, -1, 1)};
            sx_cg_node *x = sx_cg_param(g, "x", v[0]), *gamma = sx_cg_param(g, "gamma", v[1]);
            sx_cg_node *beta = sx_cg_param(g, "beta", v[2]), *w = sx_cg_const(g, v[3]);
            for (int i = 0; i < 4; i++)
                sx_tensor_free(v[i]);
            sx_cg_node *y = sx_cg_relu(
                g, sx_cg_batch_norm(g, x, sx_cg_batch_norm_stats(g, x), gamma, beta, 1e-3));
            if (fused) {
                sx_cg_opt_params p = sx_cg_opt_params_default();
                for (int k = 0; k < SX_PASS_COUNT; k++)
                    p.enable[k] = k == SX_PASS_BN_RELU;
                sx_cg_opt_report rep;
                cr_assert_eq(sx_cg_optimise(g, 1, &y, &p, &rep), SX_OK, "%s", sx_last_error());
                cr_assert_eq(rep.changed[SX_PASS_BN_RELU], 1);
                cr_assert_eq(count_op(g, SX_OP_RELU), 0);
            }
            sx_cg_node *loss = sx_cg_sum(g, sx_cg_mul(g, y, w), SX_AXES_ALL, false);
            sx_cg_node *wrt[3] = {x, gamma, beta};
            outs[fused][0] = loss;
            cr_assert_eq(sx_ad_grad(g, loss, 3, wrt, outs[fused] + 1), SX_OK, "%s",
                         sx_last_error());
            cr_assert_eq(sx_cg_eval(g, 4, outs[fused]), SX_OK, "%s", sx_last_error());
            gs[fused] = g;
        }
        for (int i = 0; i < 4; i++) {
            const sx_tensor *a = sx_cg_value(outs[0][i]), *b = sx_cg_value(outs[1][i]);
            cr_assert_eq(a->size, b->size);
            cr_assert_eq(memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)), 0,
                         "%s: output %d differs", sx_dtype_name((sx_dtype)dt), i);
        }
        sx_cg_graph_free(gs[0]);
        sx_cg_graph_free(gs[1]);
    }
}

/* ---------------------------------------------------------------- batch norm + residual */

typedef struct res_graph {
    sx_cg_graph *g;
    sx_cg_node *outs[1 + 6]; /* loss, then the gradients of the kernels, gammas and betas */
} res_graph;

/* cbn(h) = batch_norm(conv(h, k), stats, gamma, beta) with batch statistics; its parameters in
 * p[0..2] */
static sx_cg_node *cbn(sx_cg_graph *g, sx_rng *r, sx_cg_node *h, int64_t ci, int64_t co, int64_t kk,
                       sx_cg_node **p)
{
    sx_dtype dt = sx_cg_node_dtype(h);
    int64_t ks[4] = {kk, kk, ci, co}, c[1] = {co};
    sx_tensor *kv = tu_rand(r, dt, 4, ks, -0.5, 0.5), *gv = tu_rand(r, dt, 1, c, 0.5, 1.5),
              *bv = tu_rand(r, dt, 1, c, -1, 1);
    p[0] = sx_cg_param(g, "k", kv);
    p[1] = sx_cg_param(g, "gamma", gv);
    p[2] = sx_cg_param(g, "beta", bv);
    sx_tensor_free(kv);
    sx_tensor_free(gv);
    sx_tensor_free(bv);
    sx_conv2d_params cp = sx_conv2d_params_default();
    cp.padding = SX_PAD_SAME;
    sx_cg_node *y = sx_cg_conv2d(g, h, p[0], &cp);
    return sx_cg_batch_norm(g, y, sx_cg_batch_norm_stats(g, y), p[1], p[2], 1e-3);
}

/* Two residual blocks on x (4,6,6,8): an identity block relu(cbn(relu(cbn(x))) + x), then a
 * projection block relu(cbn(relu(cbn(h))) + cbn1x1(h)) to 12 channels whose sum puts the
 * shortcut's batch norm first (add(shortcut, main)); a third, add(cbn(z), z) without relu, read
 * twice; loss = sum(out w); the gradients of the first block's and the shortcut's parameters. */
static res_graph res_build(sx_dtype dt)
{
    res_graph t;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &t.g), SX_OK);
    sx_cg_graph *g = t.g;
    sx_rng r;
    sx_rng_seed(&r, 31);
    int64_t xs[4] = {4, 6, 6, 8}, os[4] = {4, 6, 6, 12};
    sx_tensor *xv = tu_rand(&r, dt, 4, xs, -1, 1), *wv = tu_rand(&r, dt, 4, os, -1, 1);
    sx_cg_node *x = sx_cg_input(g, "x", dt, 4, xs), *w = sx_cg_const(g, wv);
    cr_assert_eq(sx_cg_input_set(g, x, xv, SX_CG_COPY), SX_OK);
    sx_tensor_free(xv);
    sx_tensor_free(wv);
    sx_cg_node *p1[3], *p2[3], *p3[3], *p4[3], *p5[3], *p6[3];
    sx_cg_node *h = sx_cg_relu(g, cbn(g, &r, x, 8, 8, 3, p1));
    h = sx_cg_relu(g, sx_cg_add(g, cbn(g, &r, h, 8, 8, 3, p2), x));
    sx_cg_node *m = sx_cg_relu(g, cbn(g, &r, h, 8, 12, 3, p3));
    sx_cg_node *s = cbn(g, &r, h, 8, 12, 1, p4);
    h = sx_cg_relu(g, sx_cg_add(g, s, cbn(g, &r, m, 12, 12, 3, p5)));
    sx_cg_node *z = sx_cg_add(g, cbn(g, &r, h, 12, 12, 3, p6), h);
    sx_cg_node *out = sx_cg_mul(g, sx_cg_add(g, z, sx_cg_exp(g, z)), w);
    sx_cg_node *loss = sx_cg_sum(g, out, SX_AXES_ALL, false);
    sx_cg_node *wrt[6] = {p1[0], p2[1], p2[2], p4[0], p4[1], p6[2]};
    t.outs[0] = loss;
    cr_assert_eq(sx_ad_grad(g, loss, 6, wrt, t.outs + 1), SX_OK, "%s", sx_last_error());
    return t;
}

/* SX_PASS_BN_ADD on two residual blocks' training graph (identity and projection shortcuts, a
 * sum without relu): the same bits as without it, f32 and f64; every residual add and the relus
 * after them gone into batch norms; the planned arena no larger. */
Test(cgraph_opt_bn, residual_add_in_batch_norm_keeps_every_bit)
{
    for (int dt = 0; dt < 2; dt++) {
        res_graph a = res_build((sx_dtype)dt), b = res_build((sx_dtype)dt);
        sx_cg_opt_params off = sx_cg_opt_params_default(), on = off;
        cr_assert(on.enable[SX_PASS_BN_ADD], "on by default: it keeps every bit");
        off.enable[SX_PASS_BN_ADD] = false;
        sx_cg_opt_report ra, rb;
        cr_assert_eq(sx_cg_optimise(a.g, 7, a.outs, &off, &ra), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_optimise(b.g, 7, b.outs, &on, &rb), SX_OK, "%s", sx_last_error());
        cr_assert_eq(ra.changed[SX_PASS_BN_ADD], 0);
        cr_assert_eq(rb.changed[SX_PASS_BN_ADD], 3);
        int64_t with_res = 0, with_both = 0;
        for (int64_t i = 0; i < sx_cg_graph_size(b.g); i++) {
            sx_cg_node *n = sx_cg_graph_node(b.g, i);
            if (n == NULL || sx_cg_node_op(n) != SX_OP_NORM || sx_cg_node_n_inputs(n) != 5)
                continue;
            with_res++;
            with_both += sx_cg_node_attr(n)->norm.relu != 0;
        }
        cr_assert_eq(with_res, 3);
        cr_assert_eq(with_both, 2, "relu went in where the sum's only reader is relu");
        sx_cg_plan_report pa, pb;
        sx_cg_freeze_params fp = sx_cg_freeze_params_default();
        cr_assert_eq(sx_cg_freeze_ex(a.g, 7, a.outs, &fp, &pa), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_freeze_ex(b.g, 7, b.outs, &fp, &pb), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_plan_check(b.g), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_eval(a.g, 7, a.outs), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_eval(b.g, 7, b.outs), SX_OK, "%s", sx_last_error());
        for (int i = 0; i < 7; i++) {
            const sx_tensor *va = sx_cg_value(a.outs[i]), *vb = sx_cg_value(b.outs[i]);
            cr_assert_eq(va->size, vb->size);
            cr_assert_eq(memcmp(va->data, vb->data, (size_t)va->size * sx_dtype_size(va->dtype)), 0,
                         "%s output %d differs", sx_dtype_name((sx_dtype)dt), i);
        }
        cr_log_info("%s: arena %zu -> %zu bytes", sx_dtype_name((sx_dtype)dt), pa.arena_bytes,
                    pb.arena_bytes);
        cr_assert_leq(pb.arena_bytes, pa.arena_bytes);
        sx_cg_graph_free(a.g);
        sx_cg_graph_free(b.g);
    }
}

/* batch_norm(x, ..., res) made by the pass, then differentiated: the residual's gradient (and
 * relu's selection before it) gives the bits of the unfused graph's gradients; with relu and
 * without, f32 and f64. */
Test(cgraph_opt_bn, residual_in_batch_norm_keeps_gradients)
{
    for (int dt = 0; dt < 2; dt++)
        for (int relu = 0; relu < 2; relu++) {
            sx_cg_node *outs[2][6];
            sx_cg_graph *gs[2];
            for (int fused = 0; fused < 2; fused++) {
                sx_cg_graph *g = NULL;
                cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, (sx_dtype)dt, &g), SX_OK);
                sx_rng r;
                sx_rng_seed(&r, 23);
                int64_t xs[4] = {3, 5, 5, 7}, c[1] = {7};
                sx_dtype d = (sx_dtype)dt;
                sx_tensor *v[5] = {tu_rand(&r, d, 4, xs, -2, 2), tu_rand(&r, d, 1, c, 0.5, 1.5),
                                   tu_rand(&r, d, 1, c, -1, 1), tu_rand(&r, d, 4, xs, -1, 1),
                                   tu_rand(&r, d, 4, xs, -1.5, 1.5)};
                sx_cg_node *x = sx_cg_param(g, "x", v[0]), *gamma = sx_cg_param(g, "gamma", v[1]);
                sx_cg_node *beta = sx_cg_param(g, "beta", v[2]), *w = sx_cg_const(g, v[3]);
                sx_cg_node *res = sx_cg_param(g, "res", v[4]);
                for (int i = 0; i < 5; i++)
                    sx_tensor_free(v[i]);
                sx_cg_node *y = sx_cg_add(
                    g, res,
                    sx_cg_batch_norm(g, x, sx_cg_batch_norm_stats(g, x), gamma, beta, 1e-3));
                if (relu)
                    y = sx_cg_relu(g, y);
                if (fused) {
                    sx_cg_opt_params p = sx_cg_opt_params_default();
                    for (int k = 0; k < SX_PASS_COUNT; k++)
                        p.enable[k] = k == SX_PASS_BN_ADD;
                    sx_cg_opt_report rep;
                    cr_assert_eq(sx_cg_optimise(g, 1, &y, &p, &rep), SX_OK, "%s", sx_last_error());
                    cr_assert_eq(rep.changed[SX_PASS_BN_ADD], 1);
                    cr_assert_eq(count_op(g, SX_OP_RELU) + count_op(g, SX_OP_ADD), 0);
                }
                sx_cg_node *loss = sx_cg_sum(g, sx_cg_mul(g, y, w), SX_AXES_ALL, false);
                sx_cg_node *wrt[4] = {x, gamma, beta, res};
                outs[fused][0] = loss;
                outs[fused][5] = y;
                cr_assert_eq(sx_ad_grad(g, loss, 4, wrt, outs[fused] + 1), SX_OK, "%s",
                             sx_last_error());
                cr_assert_eq(sx_cg_eval(g, 6, outs[fused]), SX_OK, "%s", sx_last_error());
                gs[fused] = g;
            }
            for (int i = 0; i < 6; i++) {
                const sx_tensor *a = sx_cg_value(outs[0][i]), *b = sx_cg_value(outs[1][i]);
                cr_assert_eq(a->size, b->size);
                cr_assert_eq(memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)), 0,
                             "%s relu %d: output %d differs", sx_dtype_name((sx_dtype)dt), relu, i);
            }
            sx_cg_graph_free(gs[0]);
            sx_cg_graph_free(gs[1]);
        }
}

/* The graph-level errors of a residual: shape and dtype (no broadcast), named */
Test(cgraph_opt_bn, residual_of_another_shape_is_refused)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    int64_t xs[2] = {4, 3}, c[1] = {3}, s2[2] = {2, 3};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F32, 2, xs), *st = sx_cg_input(g, "st", SX_F32, 2, s2);
    sx_cg_node *gm = sx_cg_input(g, "g", SX_F32, 1, c), *bt = sx_cg_input(g, "b", SX_F32, 1, c);
    cr_assert_null(sx_cg_norm_res(g, x, st, gm, bt, gm, (sx_norm_axes){0, 1, 3}, 1e-3));
    cr_assert(strstr(sx_last_error(), "res has shape (3)") != NULL, "%s", sx_last_error());
    sx_cg_graph_free(g);
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    x = sx_cg_input(g, "x", SX_F32, 2, xs), st = sx_cg_input(g, "st", SX_F32, 2, s2);
    gm = sx_cg_input(g, "g", SX_F32, 1, c), bt = sx_cg_input(g, "b", SX_F32, 1, c);
    sx_cg_node *r64 = sx_cg_input(g, "r", SX_F64, 2, xs);
    cr_assert_null(sx_cg_norm_res(g, x, st, gm, bt, r64, (sx_norm_axes){0, 1, 3}, 1e-3));
    cr_assert(strstr(sx_last_error(), "res is f64") != NULL, "%s", sx_last_error());
    sx_cg_graph_free(g);
}
