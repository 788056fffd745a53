/* norm.c: the gradient rules of the group-normalisation ops (cgraph/ops/norm.c), one
 * self-contained block, built as rules/batch_norm.c's: each rule is exact for its op's inputs taken
 * as independent (the statistics too), so the gradient of norm(x, norm_stats(x), ...) reaches x
 * along both paths, and the rules use only norm_sums, norm, sums over axes and broadcasting
 * element-wise ops, whose rules exist: every order of derivative follows. Per-group values (p)
 * broadcast against x through the 4-d view (n, s, G, k) of x as (n, 1, G, 1); per-channel values
 * (gamma) as (1, 1, G, k). */
#include "rule.h"

/* The view (n, s, G, k) of x under y's attributes (ints[0..2] = lead, tail, groups). */
typedef struct view {
    int64_t d[4];
} view;

static view view_of(const sx_cg_node *y)
{
    const sx_cg_node *x = sx_cg_node_input(y, 0);
    const sx_cg_attr *a = sx_cg_node_attr(y);
    int r = sx_cg_node_rank(x), lead = (int)a->ints[0], tail = (int)a->ints[1];
    const int64_t *sh = sx_cg_node_shape(x);
    view v = {{1, 1, a->ints[2], 1}};
    int64_t c = 1;
    for (int i = 0; i < r; i++)
        if (i < lead)
            v.d[0] *= sh[i];
        else if (i >= r - tail)
            c *= sh[i];
        else
            v.d[1] *= sh[i];
    v.d[3] = c / v.d[2];
    return v;
}

static sx_norm_axes axes_of(const sx_cg_node *y)
{
    const sx_cg_attr *a = sx_cg_node_attr(y);
    return (sx_norm_axes){(int)a->ints[0], (int)a->ints[1], a->ints[2]};
}

/* x-shaped v as (n, s, G, k) */
static sx_cg_node *as4(sx_cg_graph *g, sx_cg_node *v, const view *w)
{
    return v != NULL ? sx_cg_reshape(g, v, 4, w->d) : NULL;
}

/* a per-group (p) vector as (n, 1, G, 1) */
static sx_cg_node *per_group(sx_cg_graph *g, sx_cg_node *v, const view *w)
{
    int64_t s[4] = {w->d[0], 1, w->d[2], 1};
    return v != NULL ? sx_cg_reshape(g, v, 4, s) : NULL;
}

/* a per-channel tensor (x's last tail axes) as (1, 1, G, k) */
static sx_cg_node *per_channel(sx_cg_graph *g, sx_cg_node *v, const view *w)
{
    int64_t s[4] = {1, 1, w->d[2], w->d[3]};
    return v != NULL ? sx_cg_reshape(g, v, 4, s) : NULL;
}

/* v (any shape of `like`'s size) as like's shape */
static sx_cg_node *like(sx_cg_graph *g, sx_cg_node *v, const sx_cg_node *l)
{
    return v != NULL ? sx_cg_reshape(g, v, sx_cg_node_rank(l), sx_cg_node_shape(l)) : NULL;
}

/* Row r of a (2,p) node, as (p). */
static sx_cg_node *row(sx_cg_graph *g, sx_cg_node *v, int r)
{
    if (v == NULL)
        return NULL;
    int64_t p = sx_cg_node_shape(v)[1];
    sx_slice s[2] = {{r, r + 1, 1}, SX_SLICE_ALL};
    return sx_cg_reshape(g, sx_cg_slice(g, v, s), 1, &p);
}

/* (2,p) from two (p) rows. */
static sx_cg_node *rows(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b)
{
    if (a == NULL || b == NULL)
        return NULL;
    int64_t s[2] = {1, sx_cg_node_shape(a)[0]};
    sx_cg_node *in[2] = {sx_cg_reshape(g, a, 2, s), sx_cg_reshape(g, b, 2, s)};
    return sx_cg_concat(g, 2, in, 0);
}

static sx_status done(sx_cg_graph *g, sx_cg_node *y, const bool *need, sx_cg_node **gin)
{
    for (int k = 0; k < sx_cg_node_n_inputs(y); k++)
        if (need[k] && gin[k] == NULL && sx_cg_graph_status(g) != SX_OK)
            return ad_status(g);
    return SX_OK;
}

/* stats = (mean; var) over the M = s k elements of each group: dx = G0 / M + G1 2 (x - mean) / M
 * = x k1 + k0 with k1 = 2 G1 / M, k0 = G0 / M - mean k1 (per group) */
sx_status grad_norm_stats(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                          sx_cg_node **gin)
{
    if (need[0]) {
        sx_cg_node *x = IN(0);
        view w = view_of(y);
        double m = (double)(w.d[1] * w.d[3]), inv = m > 0 ? 1 / m : 0;
        sx_cg_node *k1 = sx_cg_mul_scalar(g, row(g, gy, 1), 2 * inv);
        sx_cg_node *k0 =
            sx_cg_sub(g, sx_cg_mul_scalar(g, row(g, gy, 0), inv), sx_cg_mul(g, row(g, y, 0), k1));
        gin[0] =
            like(g, sx_cg_fma(g, as4(g, x, &w), per_group(g, k1, &w), per_group(g, k0, &w)), x);
    }
    return done(g, y, need, gin);
}

/* y = (x - mean) r gamma + beta, r = 1 / sqrt(var + eps) per group; with gg = gy gamma,
 * S0 = sum(gg) and S1 = sum(gg (x - mean)) per group (norm_sums): dx = gg r, dmean = -r S0,
 * dvar = -r^3 S1 / 2; per channel dgamma = sum(gy xhat), dbeta = sum(gy) over (n, s), xhat the
 * op without affine */
sx_status grad_norm(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                    sx_cg_node **gin)
{
    sx_cg_node *x = IN(0), *st = IN(1);
    bool affine = sx_cg_node_n_inputs(y) == 4;
    sx_cg_node *gamma = affine ? IN(2) : NULL;
    view w = view_of(y);
    sx_norm_axes ax = axes_of(y);
    sx_cg_node *var = row(g, st, 1);
    sx_cg_node *r =
        sx_cg_rsqrt(g, sx_cg_add(g, var, sx_cg_scalar_like(g, var, sx_cg_node_attr(y)->alpha)));
    sx_cg_node *gy4 = as4(g, gy, &w);
    sx_cg_node *gg4 = affine ? sx_cg_mul(g, gy4, per_channel(g, gamma, &w)) : gy4;
    if (need[0])
        gin[0] = like(g, sx_cg_mul(g, gg4, per_group(g, r, &w)), x);
    if (need[1]) {
        sx_cg_node *sums = sx_cg_norm_sums(g, x, st, like(g, gg4, x), ax);
        sx_cg_node *dm = sx_cg_neg(g, sx_cg_mul(g, r, row(g, sums, 0)));
        sx_cg_node *dv = sx_cg_mul_scalar(
            g, sx_cg_mul(g, sx_cg_mul(g, r, sx_cg_mul(g, r, r)), row(g, sums, 1)), -0.5);
        gin[1] = rows(g, dm, dv);
    }
    unsigned ns = SX_AXIS(0) | SX_AXIS(1);
    if (affine && need[2]) {
        sx_cg_node *xhat = sx_cg_norm(g, x, st, NULL, NULL, ax, sx_cg_node_attr(y)->alpha);
        gin[2] = like(g, sx_cg_sum(g, sx_cg_mul(g, gy4, as4(g, xhat, &w)), ns, false), gamma);
    }
    if (affine && need[3])
        gin[3] = like(g, sx_cg_sum(g, gy4, ns, false), IN(3));
    return done(g, y, need, gin);
}

/* (S0; S1) = (sum dy; sum dy (x - mean)) per group: dx = dy G1, dmean = -G1 S0 (dvar 0),
 * ddy = G0 + G1 (x - mean) = x G1 + (G0 - mean G1) */
sx_status grad_norm_sums(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                         sx_cg_node **gin)
{
    sx_cg_node *x = IN(0), *st = IN(1), *dy = IN(2);
    view w = view_of(y);
    sx_cg_node *g0 = row(g, gy, 0), *g1 = row(g, gy, 1);
    if (need[0])
        gin[0] = like(g, sx_cg_mul(g, as4(g, dy, &w), per_group(g, g1, &w)), x);
    if (need[1]) {
        int64_t p = sx_cg_node_shape(y)[1];
        gin[1] = rows(g, sx_cg_neg(g, sx_cg_mul(g, g1, row(g, y, 0))), ad_full(g, y, 1, &p, 0));
    }
    if (need[2]) {
        sx_cg_node *k0 = sx_cg_sub(g, g0, sx_cg_mul(g, row(g, st, 0), g1));
        gin[2] =
            like(g, sx_cg_fma(g, as4(g, x, &w), per_group(g, g1, &w), per_group(g, k0, &w)), dy);
    }
    return done(g, y, need, gin);
}
