/* norm.c: the group-normalisation graph ops, one self-contained block: shape rules,
 * evaluators, costs and constructors of norm_stats, norm and norm_sums, and the LayerNorm,
 * GroupNorm and InstanceNorm constructors built from them (gradient rules:
 * autodiff/rules/norm.c; kernels: tensor/norm/norm.c). attr.ints[0..2] = lead, tail, groups (the
 * view of x as (n, s, c) with c in groups, sx_norm_axes), attr.alpha = eps. */
#include "cgraph_impl.h"

#include <math.h>

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

static sx_norm_axes cg_norm_axes(const sx_cg_attr *a)
{
    return (sx_norm_axes){(int)a->ints[0], (int)a->ints[1], a->ints[2]};
}

static sx_cg_attr norm_attr(sx_norm_axes ax, double eps)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.ints[0] = ax.lead, a.ints[1] = ax.tail, a.ints[2] = ax.groups;
    a.alpha = eps;
    return a;
}

/* x's view under the node's axes: p = n groups (the statistics' columns). */
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
    return SX_OK;
}

/* Input i has x's dtype and the shape (2, p), or (rank -1) x's shape. */
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

static void out_rows(sx_cg_node *n, int64_t p)
{
    OUT->rank = 2;
    OUT->shape[0] = 2;
    OUT->shape[1] = p;
}

/* norm_stats(x) -> (2, p) */
sx_status cg_shape_norm_stats(sx_cg_node *n)
{
    int64_t p = 0;
    SX_TRY(norm_want_x(n, &p));
    out_rows(n, p);
    return SX_OK;
}

/* norm(x, stats (2,p)[, gamma, beta (x's last tail axes)]) -> x's shape; attr.alpha = eps */
sx_status cg_shape_norm(sx_cg_node *n)
{
    if (n->n_in != 2 && n->n_in != 4)
        return sx_error(SX_E_ARG, "%s: %d inputs (want x, stats and optionally gamma, beta)",
                        cg_who(n), n->n_in);
    int64_t p = 0;
    SX_TRY(norm_want_x(n, &p));
    SX_TRY(norm_want(n, 1, p, "stats"));
    const sx_tensor *x = IN_VALUE(0);
    int tail = (int)n->attr.ints[1];
    for (int i = 2; i < n->n_in; i++) {
        const sx_tensor *v = IN_VALUE(i);
        const char *name = i == 2 ? "gamma" : "beta";
        if (v->dtype != x->dtype)
            return sx_error(SX_E_DTYPE, "%s: %s is %s, x %s", cg_who(n), name,
                            sx_dtype_name(v->dtype), sx_dtype_name(x->dtype));
        if (!sx_shape_equal(v->rank, v->shape, tail, x->shape + x->rank - tail)) {
            char a[128], b[128];
            return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want x's last %d axes %s", cg_who(n),
                            name, sx_shape_str(v->rank, v->shape, a, sizeof a), tail,
                            sx_shape_str(tail, x->shape + x->rank - tail, b, sizeof b));
        }
    }
    if (!(n->attr.alpha >= 0) || !isfinite(n->attr.alpha))
        return sx_error(SX_E_ARG, "%s: eps %g (want finite, >= 0)", cg_who(n), n->attr.alpha);
    OUT->rank = x->rank;
    for (int i = 0; i < x->rank; i++)
        OUT->shape[i] = x->shape[i];
    return SX_OK;
}

/* norm_sums(x, stats (2,p), dy (x's shape)) -> (2, p) */
sx_status cg_shape_norm_sums(sx_cg_node *n)
{
    int64_t p = 0;
    SX_TRY(norm_want_x(n, &p));
    SX_TRY(norm_want(n, 1, p, "stats"));
    SX_TRY(norm_want(n, 2, -1, "dy"));
    out_rows(n, p);
    return SX_OK;
}

sx_status cg_eval_norm_stats(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_norm_stats_out(IN_VALUE(0), cg_norm_axes(&n->attr), OUT);
}

sx_status cg_eval_norm(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_norm_out(IN_VALUE(0), IN_VALUE(1), n->n_in == 4 ? IN_VALUE(2) : NULL,
                              n->n_in == 4 ? IN_VALUE(3) : NULL, cg_norm_axes(&n->attr),
                              n->attr.alpha, OUT);
}

sx_status cg_eval_norm_sums(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_norm_sums_out(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2), cg_norm_axes(&n->attr),
                                   OUT);
}

/* statistics 4 flops per element of x (two passes), normalising 2 (4 with affine) per output
 * element, backward sums 3 per element of x */
cg_cost cg_eval_norm_stats_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, 4);
}

cg_cost cg_eval_norm_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, n->n_in == 4 ? 4 : 2);
}

cg_cost cg_eval_norm_sums_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, 3);
}

sx_cg_node *sx_cg_norm_stats(sx_cg_graph *g, sx_cg_node *x, sx_norm_axes ax)
{
    sx_cg_attr a = norm_attr(ax, 0);
    return sx_cg_op_new(g, SX_OP_NORM_STATS, 1, &x, &a);
}

sx_cg_node *sx_cg_norm(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *gamma,
                       sx_cg_node *beta, sx_norm_axes ax, double eps)
{
    sx_cg_attr a = norm_attr(ax, eps);
    sx_cg_node *in[4] = {x, stats, gamma, beta};
    if ((gamma == NULL) != (beta == NULL)) {
        sx_cg_graph_fail(g, sx_error(SX_E_ARG,
                                     "sx_cg_norm: gamma %s but beta %s (want both or "
                                     "neither)",
                                     gamma ? "given" : "NULL", beta ? "given" : "NULL"));
        return NULL;
    }
    return sx_cg_op_new(g, SX_OP_NORM, gamma != NULL ? 4 : 2, in, &a);
}

sx_cg_node *sx_cg_norm_sums(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *dy,
                            sx_norm_axes ax)
{
    sx_cg_attr a = norm_attr(ax, 0);
    sx_cg_node *in[3] = {x, stats, dy};
    return sx_cg_op_new(g, SX_OP_NORM_SUMS, 3, in, &a);
}

/* norm(x, norm_stats(x)) with the given axes: the statistics node is shared by CSE when built
 * twice. */
static sx_cg_node *normalise(sx_cg_graph *g, sx_cg_node *x, sx_norm_axes ax, sx_cg_node *gamma,
                             sx_cg_node *beta, double eps)
{
    sx_cg_node *st = sx_cg_norm_stats(g, x, ax); /* NULL x: recorded there */
    return st != NULL ? sx_cg_norm(g, x, st, gamma, beta, ax, eps) : NULL;
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
