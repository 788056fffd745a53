/* norm.c: the normalisation graph ops, one self-contained block for batch, layer, group and
 * instance norm: shape rules, evaluators, costs and constructors of norm_stats, norm, norm_sums
 * and norm_dx, and the named constructors built from them (gradient rules:
 * autodiff/rules/norm.c). attr.norm holds the view of x as (n, s, c) with c in groups
 * (sx_norm_axes) and eps. The per-channel geometry (lead 0, tail 1, groups c) is batch norm: it
 * runs on the batch-norm kernels (tensor/norm/batch_norm.c, with their fused relu, residual,
 * mask and one-pass dx forms and a workspace), every other geometry on the group kernels
 * (tensor/norm/norm.c), so each keeps its speed and its bits. */
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
