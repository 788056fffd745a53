/* batch_norm.c: the gradient rules of the batch-norm ops (cgraph/ops/batch_norm.c),
 * one self-contained block. Each is exact for its op's inputs taken as independent (the
 * statistics too), so the rules compose: the gradient of batch_norm(x, batch_norm_stats(x), ...)
 * reaches x along both paths. The per-channel work is on (c) vectors; the passes over x are
 * batch_norm_sums (both reductions in one) and element-wise products and fmas. */
#include "rule.h"

/* v where mask > 0, else 0 (mask NULL: v) */
static sx_cg_node *masked(sx_cg_graph *g, sx_cg_node *mask, sx_cg_node *v)
{
    if (mask == NULL || v == NULL)
        return v;
    sx_cg_node *zero = sx_cg_scalar_like(g, v, 0.0);
    return sx_cg_where(g, sx_cg_gt(g, mask, zero), v, zero);
}

/* Row r of a (2,c) node, as (c). */
static sx_cg_node *row(sx_cg_graph *g, sx_cg_node *v, int r)
{
    if (v == NULL)
        return NULL;
    int64_t c = sx_cg_node_shape(v)[1];
    sx_slice s[2] = {{r, r + 1, 1}, SX_SLICE_ALL};
    return sx_cg_reshape(g, sx_cg_slice(g, v, s), 1, &c);
}

/* (2,c) from two (c) rows. */
static sx_cg_node *rows(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b)
{
    if (a == NULL || b == NULL)
        return NULL;
    int64_t s[2] = {1, sx_cg_node_shape(a)[0]};
    sx_cg_node *in[2] = {sx_cg_reshape(g, a, 2, s), sx_cg_reshape(g, b, 2, s)};
    return sx_cg_concat(g, 2, in, 0);
}

static double rows_of(const sx_cg_node *x)
{
    int r = sx_cg_node_rank(x);
    int64_t c = sx_cg_node_shape(x)[r - 1];
    return c > 0 ? (double)(sx_cg_node_size(x) / c) : 0;
}

static sx_status done(sx_cg_graph *g, sx_cg_node *y, const bool *need, sx_cg_node **gin)
{
    for (int k = 0; k < sx_cg_node_n_inputs(y); k++)
        if (need[k] && gin[k] == NULL && sx_cg_graph_status(g) != SX_OK)
            return ad_status(g);
    return SX_OK;
}

/* stats = (mean; var) over m rows: dx = G0 / m + G1 2 (x - mean) / m = x k1 + k0 with
 * k1 = 2 G1 / m, k0 = G0 / m - mean k1 */
sx_status grad_batch_norm_stats(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                sx_cg_node **gin)
{
    if (need[0]) {
        sx_cg_node *x = IN(0);
        double m = rows_of(x), inv = m > 0 ? 1 / m : 0;
        sx_cg_node *k1 = sx_cg_mul_scalar(g, row(g, gy, 1), 2 * inv);
        sx_cg_node *k0 =
            sx_cg_sub(g, sx_cg_mul_scalar(g, row(g, gy, 0), inv), sx_cg_mul(g, row(g, y, 0), k1));
        gin[0] = sx_cg_fma(g, x, k1, k0);
    }
    return done(g, y, need, gin);
}

/* A rank-0 constant zero? */
static bool is_zero(sx_cg_node *n)
{
    return sx_cg_node_op(n) == SX_OP_CONST && sx_cg_node_rank(n) == 0 &&
           sx_tensor_get(sx_cg_value(n), 0) == 0;
}

/* gy = where(gt(r, 0), G, 0) with r = relu(y) (relu's rule on y's only reader): r, and G in *G;
 * else NULL */
static sx_cg_node *relu_mask_of(sx_cg_node *y, sx_cg_node *gy, sx_cg_node **G)
{
    if (gy == NULL || sx_cg_node_op(gy) != SX_OP_WHERE || !is_zero(sx_cg_node_input(gy, 2)))
        return NULL;
    sx_cg_node *cond = sx_cg_node_input(gy, 0);
    if (sx_cg_node_op(cond) != SX_OP_GT || !is_zero(sx_cg_node_input(cond, 1)))
        return NULL;
    sx_cg_node *r = sx_cg_node_input(cond, 0), *v = sx_cg_node_input(gy, 1);
    if (sx_cg_node_op(r) != SX_OP_RELU || sx_cg_node_input(r, 0) != y ||
        sx_cg_node_rank(v) != sx_cg_node_rank(y) || sx_cg_node_size(v) != sx_cg_node_size(y))
        return NULL;
    *G = v;
    return r;
}

/* y = (x - mean) a + beta (+ res when a fifth input is given: its gradient is gy) (then relu
 * when attr.ints[1]: gy is first zeroed where y <= 0, as
 * relu's rule does), a = gamma r, r = 1 / sqrt(var + eps); with S0 = sum(gy) and
 * S1 = sum(gy (x - mean)) (batch_norm_sums): dx = gy a, dmean = -a S0,
 * dvar = -gamma r^3 S1 / 2, dgamma = r S1, dbeta = S0. When stats = batch_norm_stats(x), x's
 * gradient along both paths is one batch_norm_dx (dx = gy a + (x - mean) k1 + k0 with
 * k1 = -gamma r^3 S1 / m, k0 = -gamma r S0 / m: the two rules composed) and stats gets none. */
sx_status grad_batch_norm(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                          sx_cg_node **gin)
{
    /* G and a relu mask: gy = where(mask > 0, G, 0) (relu in the op: relu's rule first, from y;
     * or relu's rule already ran on relu(y)); the sums and dx read G and the mask */
    sx_cg_node *G = gy, *mask = NULL;
    if (sx_cg_node_attr(y)->ints[1] != 0) {
        sx_cg_node *zero = sx_cg_scalar_like(g, y, 0.0);
        mask = y;
        gy = sx_cg_where(g, sx_cg_gt(g, y, zero), gy, zero);
    } else {
        mask = relu_mask_of(y, gy, &G);
    }
    sx_cg_node *x = IN(0), *st = IN(1), *gamma = IN(2);
    double eps = sx_cg_node_attr(y)->alpha;
    /* the statistics of x itself (a network's training graph): batch_norm_dx gives x's whole
     * gradient, the statistics' path included, in one pass, and the statistics get none from y */
    bool own =
        need[0] && sx_cg_node_op(st) == SX_OP_BATCH_NORM_STATS && sx_cg_node_input(st, 0) == x;
    sx_cg_node *var = row(g, st, 1);
    sx_cg_node *r = sx_cg_rsqrt(g, sx_cg_add(g, var, sx_cg_scalar_like(g, var, eps)));
    sx_cg_node *a = sx_cg_mul(g, gamma, r);
    sx_cg_node *sums =
        own || need[1] || need[2] || need[3] ? sx_cg_batch_norm_sums_mask(g, x, st, G, mask) : NULL;
    if (own) {
        gin[0] = sx_cg_batch_norm_dx(g, x, st, gamma, G, sums, mask, eps);
    } else if (need[0]) {
        gin[0] = sx_cg_mul(g, gy, a);
    }
    if (need[1] && !own) {
        sx_cg_node *dm = sx_cg_neg(g, sx_cg_mul(g, a, row(g, sums, 0)));
        sx_cg_node *dv = sx_cg_mul_scalar(
            g, sx_cg_mul(g, sx_cg_mul(g, a, sx_cg_mul(g, r, r)), row(g, sums, 1)), -0.5);
        gin[1] = rows(g, dm, dv);
    }
    if (need[2])
        gin[2] = sx_cg_mul(g, r, row(g, sums, 1));
    if (need[3])
        gin[3] = row(g, sums, 0);
    if (sx_cg_node_n_inputs(y) == 5 && need[4]) /* the residual: gy (after relu's selection) */
        gin[4] = gy;
    return done(g, y, need, gin);
}

/* (S0; S1) = (sum md; sum md (x - mean)), md = dy (or where(y > 0, dy, 0) with a mask y):
 * dx = md G1, dmean = -G1 S0 (dvar 0), ddy = G0 + G1 (x - mean) = x G1 + (G0 - mean G1)
 * (masked), the mask none */
sx_status grad_batch_norm_sums(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                               sx_cg_node **gin)
{
    sx_cg_node *x = IN(0), *st = IN(1), *dy = IN(2);
    sx_cg_node *mask = sx_cg_node_n_inputs(y) == 4 ? IN(3) : NULL;
    sx_cg_node *g0 = row(g, gy, 0), *g1 = row(g, gy, 1);
    if (need[0])
        gin[0] = sx_cg_mul(g, masked(g, mask, dy), g1);
    if (need[1]) {
        int64_t c = sx_cg_node_shape(y)[1];
        gin[1] = rows(g, sx_cg_neg(g, sx_cg_mul(g, g1, row(g, y, 0))), ad_full(g, y, 1, &c, 0));
    }
    if (need[2])
        gin[2] =
            masked(g, mask, sx_cg_fma(g, x, g1, sx_cg_sub(g, g0, sx_cg_mul(g, row(g, st, 0), g1))));
    return done(g, y, need, gin);
}

/* Sum over every axis but the last: (c). */
static sx_cg_node *per_channel(sx_cg_graph *g, sx_cg_node *v)
{
    int r = sx_cg_node_rank(v);
    unsigned axes = 0;
    for (int i = 0; i < r - 1; i++)
        axes |= SX_AXIS(i);
    return r > 1 ? sx_cg_sum(g, v, axes, false) : v;
}

/* dx = md a + (x - mean) k1 + k0 (md = dy, or dy where the mask y > 0, else 0) with a = gamma r,
 * k1 = -gamma r^3 S1 / m, k0 = -gamma r S0 / m, r = (var + eps)^-1/2. For the output gradient G,
 * with Ga = sum(G md), (Gk0; Gk1) = batch_norm_sums(x, stats, G) = (sum G; sum G (x - mean)):
 * dx = G k1, ddy = G a (masked), dmean = -Gk0 k1, dgamma = Ga r + Gk1 k1 / gamma + Gk0 k0 / gamma
 * (written without dividing), dr = Ga gamma - 3 Gk1 gamma r^2 S1 / m - Gk0 gamma S0 / m,
 * dvar = -dr r^3 / 2, dS0 = -Gk0 gamma r / m, dS1 = -Gk1 gamma r^3 / m; the mask gets none. */
sx_status grad_batch_norm_dx(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                             sx_cg_node **gin)
{
    sx_cg_node *x = IN(0), *st = IN(1), *gamma = IN(2), *dy = IN(3), *sums = IN(4);
    sx_cg_node *mask = sx_cg_node_n_inputs(y) == 6 ? IN(5) : NULL;
    double m = rows_of(x), inv = m > 0 ? 1 / m : 0;
    sx_cg_node *var = row(g, st, 1);
    sx_cg_node *r =
        sx_cg_rsqrt(g, sx_cg_add(g, var, sx_cg_scalar_like(g, var, sx_cg_node_attr(y)->alpha)));
    sx_cg_node *r2 = sx_cg_mul(g, r, r), *r3 = sx_cg_mul(g, r2, r);
    sx_cg_node *s0 = row(g, sums, 0), *s1 = row(g, sums, 1);
    /* k1 = -gamma r^3 S1 / m */
    sx_cg_node *k1 = sx_cg_mul_scalar(g, sx_cg_mul(g, sx_cg_mul(g, gamma, r3), s1), -inv);
    sx_cg_node *md = masked(g, mask, dy);
    if (need[0])
        gin[0] = sx_cg_mul(g, gy, k1);
    if (need[3]) {
        gin[3] = masked(g, mask, sx_cg_mul(g, gy, sx_cg_mul(g, gamma, r)));
    }
    if (need[1] || need[2] || need[4]) {
        sx_cg_node *gs = sx_cg_batch_norm_sums(g, x, st, gy);
        sx_cg_node *gk0 = row(g, gs, 0), *gk1 = row(g, gs, 1);
        sx_cg_node *gsa = need[1] || need[2] ? per_channel(g, sx_cg_mul(g, gy, md)) : NULL;
        if (need[1]) {
            sx_cg_node *dmean = sx_cg_neg(g, sx_cg_mul(g, gk0, k1));
            /* dr = gamma (Ga - 3 Gk1 r^2 S1 / m - Gk0 S0 / m) */
            sx_cg_node *inner = sx_cg_sub(
                g,
                sx_cg_sub(g, gsa,
                          sx_cg_mul_scalar(g, sx_cg_mul(g, sx_cg_mul(g, gk1, r2), s1), 3 * inv)),
                sx_cg_mul_scalar(g, sx_cg_mul(g, gk0, s0), inv));
            sx_cg_node *dr = sx_cg_mul(g, gamma, inner);
            sx_cg_node *dvar = sx_cg_mul_scalar(g, sx_cg_mul(g, dr, r3), -0.5);
            gin[1] = rows(g, dmean, dvar);
        }
        if (need[2]) {
            /* dgamma = Ga r - Gk1 r^3 S1 / m - Gk0 r S0 / m */
            sx_cg_node *t1 = sx_cg_mul_scalar(g, sx_cg_mul(g, sx_cg_mul(g, gk1, r3), s1), inv);
            sx_cg_node *t0 = sx_cg_mul_scalar(g, sx_cg_mul(g, sx_cg_mul(g, gk0, r), s0), inv);
            gin[2] = sx_cg_sub(g, sx_cg_sub(g, sx_cg_mul(g, gsa, r), t1), t0);
        }
        if (need[4]) {
            sx_cg_node *ds0 = sx_cg_mul_scalar(g, sx_cg_mul(g, sx_cg_mul(g, gk0, gamma), r), -inv);
            sx_cg_node *ds1 = sx_cg_mul_scalar(g, sx_cg_mul(g, sx_cg_mul(g, gk1, gamma), r3), -inv);
            gin[4] = rows(g, ds0, ds1);
        }
    }
    return done(g, y, need, gin);
}
