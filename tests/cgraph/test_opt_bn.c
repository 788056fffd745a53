/* SX_PASS_BN_FOLD (cgraph/opt_bn.c): mul(conv2d(x, k), a) -> conv2d(x, mul(k, a)) for a
 * per-output-channel a. Graphs with and without the pass give outputs within the f64 rounding
 * bound stated below; the pass leaves alone what it must not fold, and is off by default. */
#include "testutil.h"

#include <math.h>

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
    bn_case c = {{1, 5, 5, 2}, {3, 3, 2, 4}, sx_conv2d_params_default()};
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
    int64_t ys[4] = {1, 3, 3, 4}, w[1] = {3};
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
