/* norm.c: the normalisation graph ops, one self-contained block for batch, layer, group and
 * instance norm: shape rules, evaluators, costs and constructors of norm_stats, norm, norm_sums
 * and norm_dx, and the named constructors built from them, then their gradient rules. attr.norm
 * holds the view of x as (n, s, c) with c in groups (sx_norm_axes) and eps. The per-channel
 * geometry (lead 0, tail 1, groups c) is batch norm: it runs on the batch-norm kernels
 * (tensor/norm/batch_norm.c, with their fused relu, residual, mask and one-pass dx forms and a
 * workspace), every other geometry on the group kernels (tensor/norm/norm.c), so each keeps its
 * speed and its bits. */
#ifndef CG_GRAD_RULES /* the ops; their gradient rules, at the end, build apart (ops/rule.h) */
#include "cgraph_impl.h"

#include <math.h>

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

static sx_norm_axes cg_norm_axes(const sx_cg_attr *a)
{
    return (sx_norm_axes){(int)a->norm.lead, (int)a->norm.tail, a->norm.groups};
}

static sx_cg_attr norm_attr(sx_norm_axes ax, double eps)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.norm.lead = ax.lead, a.norm.tail = ax.tail, a.norm.groups = ax.groups;
    a.norm.eps = eps;
    return a;
}

/* x's view under the node's axes: p = n groups (the statistics' columns). The per-channel
 * geometry's kernels take scratch from the graph's workspace. */
static sx_status norm_want_x(sx_cg_node *n, int64_t *p)
{
    const sx_tensor *x = IN_VALUE(0);
    sx_norm_axes ax = cg_norm_axes(&n->attr);
    char b[128];
    if (ax.lead < 0 || ax.tail < 1 || ax.lead + ax.tail > x->rank)
        return sx_error(SX_E_AXIS,
                        "%s: lead %d, tail %d axes of x %s (want lead >= 0, tail >= 1, "
                        "lead + tail <= rank)",
                        cg_who(n), ax.lead, ax.tail, sx_shape_str(x->rank, x->shape, b, sizeof b));
    int64_t lead = 1, c = 1;
    for (int i = 0; i < x->rank; i++)
        if (i < ax.lead)
            lead *= x->shape[i];
        else if (i >= x->rank - ax.tail)
            c *= x->shape[i];
    if (ax.groups < 1 || c % ax.groups != 0)
        return sx_error(SX_E_ARG, "%s: %lld groups do not divide the %lld channels of x %s",
                        cg_who(n), (long long)ax.groups, (long long)c,
                        sx_shape_str(x->rank, x->shape, b, sizeof b));
    *p = lead * ax.groups;
    OUT->dtype = x->dtype;
    n->ws_bytes = cg_norm_per_channel(n) ? sx_batch_norm_workspace(x->rank, x->shape) : 0;
    return SX_OK;
}

/* Input i has x's dtype and the shape (2, p), or (p < 0) x's shape. */
static sx_status norm_want(sx_cg_node *n, int i, int64_t p, const char *name)
{
    const sx_tensor *x = IN_VALUE(0), *v = IN_VALUE(i);
    if (v->dtype != x->dtype)
        return sx_error(SX_E_DTYPE, "%s: %s is %s, x %s", cg_who(n), name, sx_dtype_name(v->dtype),
                        sx_dtype_name(x->dtype));
    int64_t s2[2] = {2, p};
    int rank = p < 0 ? x->rank : 2;
    const int64_t *want = p < 0 ? x->shape : s2;
    if (!sx_shape_equal(v->rank, v->shape, rank, want)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want %s", cg_who(n), name,
                        sx_shape_str(v->rank, v->shape, a, sizeof a),
                        sx_shape_str(rank, want, b, sizeof b));
    }
    return SX_OK;
}

/* Input i (gamma or beta) has x's dtype and the shape of x's last tail axes. */
static sx_status norm_want_affine(sx_cg_node *n, int i, const char *name)
{
    const sx_tensor *x = IN_VALUE(0), *v = IN_VALUE(i);
    int tail = (int)n->attr.norm.tail;
    if (v->dtype != x->dtype)
        return sx_error(SX_E_DTYPE, "%s: %s is %s, x %s", cg_who(n), name, sx_dtype_name(v->dtype),
                        sx_dtype_name(x->dtype));
    if (!sx_shape_equal(v->rank, v->shape, tail, x->shape + x->rank - tail)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want x's last %d axes %s", cg_who(n),
                        name, sx_shape_str(v->rank, v->shape, a, sizeof a), tail,
                        sx_shape_str(tail, x->shape + x->rank - tail, b, sizeof b));
    }
    return SX_OK;
}

/* The fused forms (what) need the per-channel geometry. */
static sx_status want_per_channel(const sx_cg_node *n, const char *what)
{
    if (cg_norm_per_channel(n))
        return SX_OK;
    const sx_cg_norm_attr *a = &n->attr.norm;
    return sx_error(SX_E_ARG,
                    "%s: %s needs the per-channel axes (lead 0, tail 1, groups c), not lead %lld, "
                    "tail %lld, groups %lld",
                    cg_who(n), what, (long long)a->lead, (long long)a->tail, (long long)a->groups);
}

static sx_status want_eps(const sx_cg_node *n)
{
    double eps = n->attr.norm.eps;
    if (!(eps >= 0) || !isfinite(eps))
        return sx_error(SX_E_ARG, "%s: eps %g (want finite, >= 0)", cg_who(n), eps);
    return SX_OK;
}

static void out_rows(sx_cg_node *n, int64_t p)
{
    OUT->rank = 2;
    OUT->shape[0] = 2;
    OUT->shape[1] = p;
}

static void out_like_x(sx_cg_node *n)
{
    OUT->rank = IN_VALUE(0)->rank;
    for (int i = 0; i < OUT->rank; i++)
        OUT->shape[i] = IN_VALUE(0)->shape[i];
}

/* norm_stats(x) -> (2, p) */
sx_status cg_shape_norm_stats(sx_cg_node *n)
{
    int64_t p = 0;
    SX_TRY(norm_want_x(n, &p));
    out_rows(n, p);
    return SX_OK;
}

/* norm(x, stats (2,p)[, gamma, beta (x's last tail axes)[, res (x's shape)]]) -> x's shape;
 * res and attr.norm.relu (relu applied last) only per channel; attr.norm.copy marks a copy made
 * by SX_PASS_BN_RECOMPUTE (the same values; it keeps the copy apart from the original) */
sx_status cg_shape_norm(sx_cg_node *n)
{
    if (n->n_in != 2 && n->n_in != 4 && n->n_in != 5)
        return sx_error(SX_E_ARG, "%s: %d inputs (want x, stats and optionally gamma, beta[, res])",
                        cg_who(n), n->n_in);
    int64_t p = 0;
    SX_TRY(norm_want_x(n, &p));
    SX_TRY(norm_want(n, 1, p, "stats"));
    for (int i = 2; i < n->n_in && i < 4; i++)
        SX_TRY(norm_want_affine(n, i, i == 2 ? "gamma" : "beta"));
    if (n->n_in == 5) {
        SX_TRY(want_per_channel(n, "a residual"));
        SX_TRY(norm_want(n, 4, -1, "res"));
    }
    if (n->attr.norm.relu != 0) {
        SX_TRY(want_per_channel(n, "relu"));
        if (n->n_in == 2)
            return sx_error(SX_E_ARG, "%s: relu without gamma and beta", cg_who(n));
    }
    SX_TRY(want_eps(n));
    out_like_x(n);
    return SX_OK;
}

/* norm_sums(x, stats (2,p), dy (x's shape)[, y (x's shape): a relu mask, per channel]) ->
 * (2, p) */
sx_status cg_shape_norm_sums(sx_cg_node *n)
{
    if (n->n_in != 3 && n->n_in != 4)
        return sx_error(SX_E_ARG, "%s: %d inputs (want x, stats, dy[, y])", cg_who(n), n->n_in);
    int64_t p = 0;
    SX_TRY(norm_want_x(n, &p));
    SX_TRY(norm_want(n, 1, p, "stats"));
    SX_TRY(norm_want(n, 2, -1, "dy"));
    if (n->n_in == 4) {
        SX_TRY(want_per_channel(n, "a relu mask"));
        SX_TRY(norm_want(n, 3, -1, "y"));
    }
    out_rows(n, p);
    return SX_OK;
}

/* norm_dx(x, stats (2,c), gamma (c), dy, sums (2,c)[, y]) -> x's shape, per channel only; dy
 * and the relu mask y (optional) of x's shape */
sx_status cg_shape_norm_dx(sx_cg_node *n)
{
    if (n->n_in != 5 && n->n_in != 6)
        return sx_error(SX_E_ARG, "%s: %d inputs (want x, stats, gamma, dy, sums[, y])", cg_who(n),
                        n->n_in);
    int64_t p = 0;
    SX_TRY(norm_want_x(n, &p));
    SX_TRY(want_per_channel(n, "norm_dx"));
    SX_TRY(norm_want(n, 1, p, "stats"));
    SX_TRY(norm_want_affine(n, 2, "gamma"));
    SX_TRY(norm_want(n, 4, p, "sums"));
    for (int i = 3; i < n->n_in; i += 2)
        SX_TRY(norm_want(n, i, -1, i == 3 ? "dy" : "y"));
    SX_TRY(want_eps(n));
    out_like_x(n);
    return SX_OK;
}

/* Per channel: the batch-norm kernels with the scratch the shape rule sized (n->ws_bytes) from
 * the graph's workspace; else the group kernels. */
sx_status cg_eval_norm_stats(sx_cg_graph *g, sx_cg_node *n)
{
    if (!cg_norm_per_channel(n))
        return sx_tensor_norm_stats_out(IN_VALUE(0), cg_norm_axes(&n->attr), OUT);
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_batch_norm_stats_ws(IN_VALUE(0), OUT, ws, n->ws_bytes);
}

sx_status cg_eval_norm(sx_cg_graph *g, sx_cg_node *n)
{
    if (!cg_norm_per_channel(n) || n->n_in == 2)
        return sx_tensor_norm_out(IN_VALUE(0), IN_VALUE(1), n->n_in >= 4 ? IN_VALUE(2) : NULL,
                                  n->n_in >= 4 ? IN_VALUE(3) : NULL, cg_norm_axes(&n->attr),
                                  n->attr.norm.eps, OUT);
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_batch_norm_res_ws(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2), IN_VALUE(3),
                                       n->attr.norm.eps, n->n_in == 5 ? IN_VALUE(4) : NULL,
                                       n->attr.norm.relu != 0, OUT, ws, n->ws_bytes);
}

sx_status cg_eval_norm_sums(sx_cg_graph *g, sx_cg_node *n)
{
    if (!cg_norm_per_channel(n))
        return sx_tensor_norm_sums_out(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2),
                                       cg_norm_axes(&n->attr), OUT);
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_batch_norm_sums_mask_ws(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2),
                                             n->n_in == 4 ? IN_VALUE(3) : NULL, OUT, ws,
                                             n->ws_bytes);
}

sx_status cg_eval_norm_dx(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_batch_norm_dx_ws(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2), IN_VALUE(3),
                                      IN_VALUE(4), n->n_in == 6 ? IN_VALUE(5) : NULL,
                                      n->attr.norm.eps, OUT, ws, n->ws_bytes);
}

/* Per channel (one pass each): statistics 3 flops per element of x, normalising 2 per output
 * element (one more with relu, one more with a residual), backward sums 3 per element of x, dx 5
 * (6 with the mask). Groups: statistics 4 per element (two passes), normalising 2 (4 with
 * affine), sums 3. */
cg_cost cg_eval_norm_stats_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, cg_norm_per_channel(n) ? 3 : 4);
}

cg_cost cg_eval_norm_cost(const sx_cg_node *n)
{
    if (cg_norm_per_channel(n) && n->n_in >= 4)
        return cg_cost_per_out(n, 2 + (n->attr.norm.relu != 0) + (n->n_in == 5));
    return cg_cost_per_out(n, n->n_in == 4 ? 4 : 2);
}

cg_cost cg_eval_norm_sums_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, 3);
}

cg_cost cg_eval_norm_dx_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, n->n_in == 6 ? 6 : 5);
}

sx_cg_node *sx_cg_norm_stats(sx_cg_graph *g, sx_cg_node *x, sx_norm_axes ax)
{
    sx_cg_attr a = norm_attr(ax, 0);
    return sx_cg_op_new(g, SX_OP_NORM_STATS, 1, &x, &a);
}

sx_cg_node *sx_cg_norm_res(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *gamma,
                           sx_cg_node *beta, sx_cg_node *res, sx_norm_axes ax, double eps)
{
    sx_cg_attr a = norm_attr(ax, eps);
    sx_cg_node *in[5] = {x, stats, gamma, beta, res};
    if ((gamma == NULL) != (beta == NULL) || (res != NULL && gamma == NULL)) {
        sx_cg_graph_fail(g, sx_error(SX_E_ARG,
                                     "sx_cg_norm: gamma %s, beta %s, res %s (want gamma and "
                                     "beta both or neither, and both with res)",
                                     gamma ? "given" : "NULL", beta ? "given" : "NULL",
                                     res ? "given" : "NULL"));
        return NULL;
    }
    return sx_cg_op_new(g, SX_OP_NORM, res != NULL ? 5 : gamma != NULL ? 4 : 2, in, &a);
}

sx_cg_node *sx_cg_norm(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *gamma,
                       sx_cg_node *beta, sx_norm_axes ax, double eps)
{
    return sx_cg_norm_res(g, x, stats, gamma, beta, NULL, ax, eps);
}

sx_cg_node *sx_cg_norm_sums_mask(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *dy,
                                 sx_cg_node *y, sx_norm_axes ax)
{
    sx_cg_attr a = norm_attr(ax, 0);
    sx_cg_node *in[4] = {x, stats, dy, y};
    return sx_cg_op_new(g, SX_OP_NORM_SUMS, y != NULL ? 4 : 3, in, &a);
}

sx_cg_node *sx_cg_norm_sums(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *dy,
                            sx_norm_axes ax)
{
    return sx_cg_norm_sums_mask(g, x, stats, dy, NULL, ax);
}

sx_cg_node *sx_cg_norm_dx(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *gamma,
                          sx_cg_node *dy, sx_cg_node *sums, sx_cg_node *y, sx_norm_axes ax,
                          double eps)
{
    sx_cg_attr a = norm_attr(ax, eps);
    sx_cg_node *in[6] = {x, stats, gamma, dy, sums, y};
    return sx_cg_op_new(g, SX_OP_NORM_DX, y != NULL ? 6 : 5, in, &a);
}

/* norm(x, norm_stats(x)) with the given axes: the statistics node is shared by CSE when built
 * twice. */
static sx_cg_node *normalise(sx_cg_graph *g, sx_cg_node *x, sx_norm_axes ax, sx_cg_node *gamma,
                             sx_cg_node *beta, double eps)
{
    sx_cg_node *st = sx_cg_norm_stats(g, x, ax); /* NULL x: recorded there */
    return st != NULL ? sx_cg_norm(g, x, st, gamma, beta, ax, eps) : NULL;
}

/* The per-channel axes of x (..., c); rank 0 is refused here, before groups would be made up. */
static bool batch_axes(sx_cg_graph *g, sx_cg_node *x, const char *who, sx_norm_axes *ax)
{
    int r = x != NULL ? sx_cg_node_rank(x) : 1;
    if (r < 1) {
        sx_cg_graph_fail(g,
                         sx_error(SX_E_RANK, "%s: x has rank 0 (want a channel axis last)", who));
        return false;
    }
    *ax = (sx_norm_axes){0, 1, x != NULL ? sx_cg_node_shape(x)[r - 1] : 1};
    return true;
}

sx_cg_node *sx_cg_batch_norm_stats(sx_cg_graph *g, sx_cg_node *x)
{
    sx_norm_axes ax;
    return batch_axes(g, x, "sx_cg_batch_norm_stats", &ax) ? sx_cg_norm_stats(g, x, ax) : NULL;
}

sx_cg_node *sx_cg_batch_norm(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *gamma,
                             sx_cg_node *beta, double eps)
{
    sx_norm_axes ax;
    return batch_axes(g, x, "sx_cg_batch_norm", &ax) ? sx_cg_norm(g, x, stats, gamma, beta, ax, eps)
                                                     : NULL;
}

sx_cg_node *sx_cg_layer_norm(sx_cg_graph *g, sx_cg_node *x, int axes, sx_cg_node *gamma,
                             sx_cg_node *beta, double eps)
{
    int r = x != NULL ? sx_cg_node_rank(x) : 0;
    return normalise(g, x, (sx_norm_axes){r - axes, axes, 1}, gamma, beta, eps);
}

sx_cg_node *sx_cg_group_norm(sx_cg_graph *g, sx_cg_node *x, int64_t groups, sx_cg_node *gamma,
                             sx_cg_node *beta, double eps)
{
    return normalise(g, x, (sx_norm_axes){1, 1, groups}, gamma, beta, eps);
}

sx_cg_node *sx_cg_instance_norm(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *gamma, sx_cg_node *beta,
                                double eps)
{
    int r = x != NULL ? sx_cg_node_rank(x) : 0;
    int64_t c = r > 0 ? sx_cg_node_shape(x)[r - 1] : 1;
    return normalise(g, x, (sx_norm_axes){1, 1, c}, gamma, beta, eps);
}

#else
/* ---------------------------------------------------------------- gradient rules */

/* The gradient rules, one self-contained block. Each rule is exact for its op's inputs taken as
 * independent (the statistics too), so the gradient of norm(x, norm_stats(x), ...) reaches x along
 * both paths, and the rules use only the family's ops, sums over axes and broadcasting element-wise
 * ops, whose rules exist: every order of derivative follows. Two forms, as the evaluator has two
 * kernel families:
 * - the per-channel geometry (batch norm: lead 0, tail 1, groups c): the per-channel work on (c)
 *   vectors; the passes over x are norm_sums (both reductions in one, relu's mask read in it)
 *   and, for x's own statistics (a network's training graph), one norm_dx: x's whole gradient;
 * - every other geometry (layer, group, instance norm): per-group values (p) broadcast against
 *   x through the 4-d view (n, s, G, k) of x as (n, 1, G, 1), per-channel values (gamma) as
 *   (1, 1, G, k). */
#include "rule.h"

/* ---------------------------------------------------------------- shared */

static sx_norm_axes axes_of(const sx_cg_node *y)
{
    const sx_cg_norm_attr *a = &sx_cg_node_attr(y)->norm;
    return (sx_norm_axes){(int)a->lead, (int)a->tail, a->groups};
}

/* y's axes are the per-channel ones of its x (..., c): batch norm */
static bool per_channel(const sx_cg_node *y)
{
    const sx_cg_node *x = sx_cg_node_input(y, 0);
    const sx_cg_norm_attr *a = &sx_cg_node_attr(y)->norm;
    int r = sx_cg_node_rank(x);
    return a->lead == 0 && a->tail == 1 && r >= 1 && a->groups == sx_cg_node_shape(x)[r - 1];
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
            return sx__cg_grad_status(g);
    return SX_OK;
}

/* ---------------------------------------------------------------- per channel (batch norm) */

/* v where mask > 0, else 0 (mask NULL: v) */
static sx_cg_node *masked(sx_cg_graph *g, sx_cg_node *mask, sx_cg_node *v)
{
    if (mask == NULL || v == NULL)
        return v;
    sx_cg_node *zero = sx_cg_scalar_like(g, v, 0.0);
    return sx_cg_where(g, sx_cg_gt(g, mask, zero), v, zero);
}

/* the rows m of x (..., c) viewed as (m, c) */
static double rows_of(const sx_cg_node *x)
{
    int r = sx_cg_node_rank(x);
    int64_t c = sx_cg_node_shape(x)[r - 1];
    return c > 0 ? (double)(sx_cg_node_size(x) / c) : 0;
}

/* stats = (mean; var) over m rows: dx = G0 / m + G1 2 (x - mean) / m = x k1 + k0 with
 * k1 = 2 G1 / m, k0 = G0 / m - mean k1 */
static sx_cg_node *bn_stats_dx(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy)
{
    sx_cg_node *x = IN(0);
    double m = rows_of(x), inv = m > 0 ? 1 / m : 0;
    sx_cg_node *k1 = sx_cg_mul_scalar(g, row(g, gy, 1), 2 * inv);
    sx_cg_node *k0 =
        sx_cg_sub(g, sx_cg_mul_scalar(g, row(g, gy, 0), inv), sx_cg_mul(g, row(g, y, 0), k1));
    return sx_cg_fma(g, x, k1, k0);
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
 * when attr.norm.relu: gy is first zeroed where y <= 0, as relu's rule does), a = gamma r,
 * r = 1 / sqrt(var + eps); with S0 = sum(gy) and S1 = sum(gy (x - mean)) (norm_sums):
 * dx = gy a, dmean = -a S0, dvar = -gamma r^3 S1 / 2, dgamma = r S1, dbeta = S0. When
 * stats = norm_stats(x) (per channel too), x's gradient along both paths is one norm_dx
 * (dx = gy a + (x - mean) k1 + k0 with k1 = -gamma r^3 S1 / m, k0 = -gamma r S0 / m: the two rules
 * composed) and stats gets none. */
static sx_status bn_grad(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                         sx_cg_node **gin)
{
    /* G and a relu mask: gy = where(mask > 0, G, 0) (relu in the op: relu's rule first, from y;
     * or relu's rule already ran on relu(y)); the sums and dx read G and the mask */
    sx_cg_node *G = gy, *mask = NULL;
    if (sx_cg_node_attr(y)->norm.relu != 0) {
        sx_cg_node *zero = sx_cg_scalar_like(g, y, 0.0);
        mask = y;
        gy = sx_cg_where(g, sx_cg_gt(g, y, zero), gy, zero);
    } else {
        mask = relu_mask_of(y, gy, &G);
    }
    sx_cg_node *x = IN(0), *st = IN(1), *gamma = IN(2);
    sx_norm_axes ax = axes_of(y);
    double eps = sx_cg_node_attr(y)->norm.eps;
    /* the statistics of x itself (a network's training graph): norm_dx gives x's whole
     * gradient, the statistics' path included, in one pass, and the statistics get none from y */
    bool own = need[0] && sx_cg_node_op(st) == SX_OP_NORM_STATS && sx_cg_node_input(st, 0) == x &&
               per_channel(st);
    sx_cg_node *var = row(g, st, 1);
    sx_cg_node *r = sx_cg_rsqrt(g, sx_cg_add(g, var, sx_cg_scalar_like(g, var, eps)));
    sx_cg_node *a = sx_cg_mul(g, gamma, r);
    sx_cg_node *sums =
        own || need[1] || need[2] || need[3] ? sx_cg_norm_sums_mask(g, x, st, G, mask, ax) : NULL;
    if (own) {
        gin[0] = sx_cg_norm_dx(g, x, st, gamma, G, sums, mask, ax, eps);
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
static sx_status bn_sums_grad(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                              sx_cg_node **gin)
{
    sx_cg_node *x = IN(0), *st = IN(1), *dy = IN(2);
    sx_cg_node *mask = sx_cg_node_n_inputs(y) == 4 ? IN(3) : NULL;
    sx_cg_node *g0 = row(g, gy, 0), *g1 = row(g, gy, 1);
    if (need[0])
        gin[0] = sx_cg_mul(g, masked(g, mask, dy), g1);
    if (need[1]) {
        int64_t c = sx_cg_node_shape(y)[1];
        gin[1] =
            rows(g, sx_cg_neg(g, sx_cg_mul(g, g1, row(g, y, 0))), sx__cg_grad_full(g, y, 1, &c, 0));
    }
    if (need[2])
        gin[2] =
            masked(g, mask, sx_cg_fma(g, x, g1, sx_cg_sub(g, g0, sx_cg_mul(g, row(g, st, 0), g1))));
    return done(g, y, need, gin);
}

/* Sum over every axis but the last: (c). */
static sx_cg_node *sum_but_last(sx_cg_graph *g, sx_cg_node *v)
{
    int r = sx_cg_node_rank(v);
    unsigned axes = 0;
    for (int i = 0; i < r - 1; i++)
        axes |= SX_AXIS(i);
    return r > 1 ? sx_cg_sum(g, v, axes, false) : v;
}

/* dx = md a + (x - mean) k1 + k0 (md = dy, or dy where the mask y > 0, else 0) with a = gamma r,
 * k1 = -gamma r^3 S1 / m, k0 = -gamma r S0 / m, r = (var + eps)^-1/2. For the output gradient G,
 * with Ga = sum(G md), (Gk0; Gk1) = norm_sums(x, stats, G) = (sum G; sum G (x - mean)):
 * dx = G k1, ddy = G a (masked), dmean = -Gk0 k1, dgamma = Ga r + Gk1 k1 / gamma + Gk0 k0 / gamma
 * (written without dividing), dr = Ga gamma - 3 Gk1 gamma r^2 S1 / m - Gk0 gamma S0 / m,
 * dvar = -dr r^3 / 2, dS0 = -Gk0 gamma r / m, dS1 = -Gk1 gamma r^3 / m; the mask gets none. */
sx_status grad_norm_dx(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                       sx_cg_node **gin)
{
    sx_cg_node *x = IN(0), *st = IN(1), *gamma = IN(2), *dy = IN(3), *sums = IN(4);
    sx_cg_node *mask = sx_cg_node_n_inputs(y) == 6 ? IN(5) : NULL;
    double m = rows_of(x), inv = m > 0 ? 1 / m : 0;
    sx_cg_node *var = row(g, st, 1);
    sx_cg_node *r =
        sx_cg_rsqrt(g, sx_cg_add(g, var, sx_cg_scalar_like(g, var, sx_cg_node_attr(y)->norm.eps)));
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
        sx_cg_node *gs = sx_cg_norm_sums(g, x, st, gy, axes_of(y));
        sx_cg_node *gk0 = row(g, gs, 0), *gk1 = row(g, gs, 1);
        sx_cg_node *gsa = need[1] || need[2] ? sum_but_last(g, sx_cg_mul(g, gy, md)) : NULL;
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

/* ---------------------------------------------------------------- groups */

/* The view (n, s, G, k) of x under y's axes. */
typedef struct view {
    int64_t d[4];
} view;

static view view_of(const sx_cg_node *y)
{
    const sx_cg_node *x = sx_cg_node_input(y, 0);
    sx_norm_axes ax = axes_of(y);
    int r = sx_cg_node_rank(x);
    const int64_t *sh = sx_cg_node_shape(x);
    view v = {{1, 1, ax.groups, 1}};
    int64_t c = 1;
    for (int i = 0; i < r; i++)
        if (i < ax.lead)
            v.d[0] *= sh[i];
        else if (i >= r - ax.tail)
            c *= sh[i];
        else
            v.d[1] *= sh[i];
    v.d[3] = c / v.d[2];
    return v;
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
static sx_cg_node *per_channel4(sx_cg_graph *g, sx_cg_node *v, const view *w)
{
    int64_t s[4] = {1, 1, w->d[2], w->d[3]};
    return v != NULL ? sx_cg_reshape(g, v, 4, s) : NULL;
}

/* v (any shape of `like`'s size) as like's shape */
static sx_cg_node *like(sx_cg_graph *g, sx_cg_node *v, const sx_cg_node *l)
{
    return v != NULL ? sx_cg_reshape(g, v, sx_cg_node_rank(l), sx_cg_node_shape(l)) : NULL;
}

/* stats = (mean; var) over the M = s k elements of each group: dx = G0 / M + G1 2 (x - mean) / M
 * = x k1 + k0 with k1 = 2 G1 / M, k0 = G0 / M - mean k1 (per group) */
static sx_cg_node *group_stats_dx(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy)
{
    sx_cg_node *x = IN(0);
    view w = view_of(y);
    double m = (double)(w.d[1] * w.d[3]), inv = m > 0 ? 1 / m : 0;
    sx_cg_node *k1 = sx_cg_mul_scalar(g, row(g, gy, 1), 2 * inv);
    sx_cg_node *k0 =
        sx_cg_sub(g, sx_cg_mul_scalar(g, row(g, gy, 0), inv), sx_cg_mul(g, row(g, y, 0), k1));
    return like(g, sx_cg_fma(g, as4(g, x, &w), per_group(g, k1, &w), per_group(g, k0, &w)), x);
}

/* y = (x - mean) r gamma + beta, r = 1 / sqrt(var + eps) per group; with gg = gy gamma,
 * S0 = sum(gg) and S1 = sum(gg (x - mean)) per group (norm_sums): dx = gg r, dmean = -r S0,
 * dvar = -r^3 S1 / 2; per channel dgamma = sum(gy xhat), dbeta = sum(gy) over (n, s), xhat the
 * op without affine */
static sx_status group_grad(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                            sx_cg_node **gin)
{
    sx_cg_node *x = IN(0), *st = IN(1);
    bool affine = sx_cg_node_n_inputs(y) == 4;
    sx_cg_node *gamma = affine ? IN(2) : NULL;
    view w = view_of(y);
    sx_norm_axes ax = axes_of(y);
    double eps = sx_cg_node_attr(y)->norm.eps;
    sx_cg_node *var = row(g, st, 1);
    sx_cg_node *r = sx_cg_rsqrt(g, sx_cg_add(g, var, sx_cg_scalar_like(g, var, eps)));
    sx_cg_node *gy4 = as4(g, gy, &w);
    sx_cg_node *gg4 = affine ? sx_cg_mul(g, gy4, per_channel4(g, gamma, &w)) : gy4;
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
        sx_cg_node *xhat = sx_cg_norm(g, x, st, NULL, NULL, ax, eps);
        gin[2] = like(g, sx_cg_sum(g, sx_cg_mul(g, gy4, as4(g, xhat, &w)), ns, false), gamma);
    }
    if (affine && need[3])
        gin[3] = like(g, sx_cg_sum(g, gy4, ns, false), IN(3));
    return done(g, y, need, gin);
}

/* (S0; S1) = (sum dy; sum dy (x - mean)) per group: dx = dy G1, dmean = -G1 S0 (dvar 0),
 * ddy = G0 + G1 (x - mean) = x G1 + (G0 - mean G1) */
static sx_status group_sums_grad(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                 sx_cg_node **gin)
{
    sx_cg_node *x = IN(0), *st = IN(1), *dy = IN(2);
    view w = view_of(y);
    sx_cg_node *g0 = row(g, gy, 0), *g1 = row(g, gy, 1);
    if (need[0])
        gin[0] = like(g, sx_cg_mul(g, as4(g, dy, &w), per_group(g, g1, &w)), x);
    if (need[1]) {
        int64_t p = sx_cg_node_shape(y)[1];
        gin[1] =
            rows(g, sx_cg_neg(g, sx_cg_mul(g, g1, row(g, y, 0))), sx__cg_grad_full(g, y, 1, &p, 0));
    }
    if (need[2]) {
        sx_cg_node *k0 = sx_cg_sub(g, g0, sx_cg_mul(g, row(g, st, 0), g1));
        gin[2] =
            like(g, sx_cg_fma(g, as4(g, x, &w), per_group(g, g1, &w), per_group(g, k0, &w)), dy);
    }
    return done(g, y, need, gin);
}

/* ---------------------------------------------------------------- the rules */

sx_status grad_norm_stats(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                          sx_cg_node **gin)
{
    if (need[0])
        gin[0] = per_channel(y) ? bn_stats_dx(g, y, gy) : group_stats_dx(g, y, gy);
    return done(g, y, need, gin);
}

/* per channel with gamma and beta: batch norm's rule (its fused forms); else the groups' */
sx_status grad_norm(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                    sx_cg_node **gin)
{
    if (per_channel(y) && sx_cg_node_n_inputs(y) >= 4)
        return bn_grad(g, y, gy, need, gin);
    return group_grad(g, y, gy, need, gin);
}

sx_status grad_norm_sums(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                         sx_cg_node **gin)
{
    return per_channel(y) ? bn_sums_grad(g, y, gy, need, gin)
                          : group_sums_grad(g, y, gy, need, gin);
}

#endif
