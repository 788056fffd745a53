/* batch_norm.c: the batch-norm graph ops, one self-contained block: shape rules,
 * evaluators, costs and constructors of batch_norm_stats, batch_norm, batch_norm_sums and
 * batch_norm_dx (their
 * gradient rules are in autodiff/rules/batch_norm.c). The kernels:
 * tensor/norm/batch_norm.c. x (..., c) has its channels last. */
#include "cgraph_impl.h"

#include <math.h>

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

/* Input i of n has input 0's dtype and, when rank > 0, the shape (c) (rank 1) or (2, c). */
static sx_status bn_want(sx_cg_node *n, int i, int rank, const char *name)
{
    const sx_tensor *x = IN_VALUE(0), *v = IN_VALUE(i);
    if (v->dtype != x->dtype)
        return sx_error(SX_E_DTYPE, "%s: %s is %s, x %s", cg_who(n), name, sx_dtype_name(v->dtype),
                        sx_dtype_name(x->dtype));
    int64_t c = x->shape[x->rank - 1], s[2] = {2, c};
    if (!sx_shape_equal(v->rank, v->shape, rank, rank == 2 ? s : s + 1)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want %s for x %s", cg_who(n), name,
                        sx_shape_str(v->rank, v->shape, a, sizeof a), rank == 2 ? "(2,c)" : "(c)",
                        sx_shape_str(x->rank, x->shape, b, sizeof b));
    }
    return SX_OK;
}

static sx_status bn_want_x(sx_cg_node *n)
{
    if (IN_VALUE(0)->rank < 1)
        return sx_error(SX_E_RANK, "%s: x has rank 0 (want a channel axis last)", cg_who(n));
    OUT->dtype = IN_VALUE(0)->dtype;
    return SX_OK;
}

/* Input i of n has input 0's dtype and shape. */
static sx_status bn_want_like_x(sx_cg_node *n, int i, const char *name)
{
    const sx_tensor *x = IN_VALUE(0), *v = IN_VALUE(i);
    if (v->dtype != x->dtype)
        return sx_error(SX_E_DTYPE, "%s: %s is %s, x %s", cg_who(n), name, sx_dtype_name(v->dtype),
                        sx_dtype_name(x->dtype));
    if (!sx_shape_equal(v->rank, v->shape, x->rank, x->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, x %s", cg_who(n), name,
                        sx_shape_str(v->rank, v->shape, a, sizeof a),
                        sx_shape_str(x->rank, x->shape, b, sizeof b));
    }
    return SX_OK;
}

/* batch_norm_stats(x (..., c)) -> (2, c) */
sx_status cg_shape_batch_norm_stats(sx_cg_node *n)
{
    SX_TRY(bn_want_x(n));
    OUT->rank = 2;
    OUT->shape[0] = 2;
    OUT->shape[1] = IN_VALUE(0)->shape[IN_VALUE(0)->rank - 1];
    n->ws_bytes = sx_batch_norm_workspace(IN_VALUE(0)->rank, IN_VALUE(0)->shape);
    return SX_OK;
}

/* batch_norm(x, stats (2,c), gamma (c), beta (c)[, res (x's shape)]) -> x's shape; attr.alpha =
 * eps; res: a residual added to the rounded result (SX_PASS_BN_ADD); attr.ints[1] nonzero: relu
 * applied last in the same pass (SX_PASS_BN_RELU, SX_PASS_BN_ADD); attr.ints[0] nonzero marks a
 * copy made by SX_PASS_BN_RECOMPUTE (the same values; it keeps the copy apart from the
 * original) */
sx_status cg_shape_batch_norm(sx_cg_node *n)
{
    if (n->n_in != 4 && n->n_in != 5)
        return sx_error(SX_E_ARG, "%s: %d inputs (want x, stats, gamma, beta[, res])", cg_who(n),
                        n->n_in);
    SX_TRY(bn_want_x(n));
    SX_TRY(bn_want(n, 1, 2, "stats"));
    SX_TRY(bn_want(n, 2, 1, "gamma"));
    SX_TRY(bn_want(n, 3, 1, "beta"));
    if (n->n_in == 5)
        SX_TRY(bn_want_like_x(n, 4, "res"));
    if (!(n->attr.alpha >= 0) || !isfinite(n->attr.alpha))
        return sx_error(SX_E_ARG, "%s: eps %g (want finite, >= 0)", cg_who(n), n->attr.alpha);
    OUT->rank = IN_VALUE(0)->rank;
    for (int i = 0; i < OUT->rank; i++)
        OUT->shape[i] = IN_VALUE(0)->shape[i];
    n->ws_bytes = sx_batch_norm_workspace(IN_VALUE(0)->rank, IN_VALUE(0)->shape);
    return SX_OK;
}

/* batch_norm_sums(x, stats (2,c), dy (x's shape)[, y (x's shape): a relu mask]) -> (2, c) */
sx_status cg_shape_batch_norm_sums(sx_cg_node *n)
{
    if (n->n_in != 3 && n->n_in != 4)
        return sx_error(SX_E_ARG, "%s: %d inputs (want x, stats, dy[, y])", cg_who(n), n->n_in);
    SX_TRY(bn_want_x(n));
    SX_TRY(bn_want(n, 1, 2, "stats"));
    for (int i = 2; i < n->n_in; i++)
        SX_TRY(bn_want_like_x(n, i, i == 2 ? "dy" : "y"));
    return cg_shape_batch_norm_stats(n);
}

/* batch_norm_dx(x, stats (2,c), gamma (c), dy, sums (2,c)[, y]) -> x's shape, attr.alpha = eps;
 * dy and the relu mask y (optional) of x's shape */
sx_status cg_shape_batch_norm_dx(sx_cg_node *n)
{
    if (n->n_in != 5 && n->n_in != 6)
        return sx_error(SX_E_ARG, "%s: %d inputs (want x, stats, gamma, dy, sums[, y])", cg_who(n),
                        n->n_in);
    SX_TRY(bn_want_x(n));
    SX_TRY(bn_want(n, 1, 2, "stats"));
    SX_TRY(bn_want(n, 2, 1, "gamma"));
    SX_TRY(bn_want(n, 4, 2, "sums"));
    for (int i = 3; i < n->n_in; i += 3)
        SX_TRY(bn_want_like_x(n, i, i == 3 ? "dy" : "y"));
    const sx_tensor *x = IN_VALUE(0);
    if (!(n->attr.alpha >= 0) || !isfinite(n->attr.alpha))
        return sx_error(SX_E_ARG, "%s: eps %g (want finite, >= 0)", cg_who(n), n->attr.alpha);
    OUT->rank = x->rank;
    for (int i = 0; i < OUT->rank; i++)
        OUT->shape[i] = x->shape[i];
    n->ws_bytes = sx_batch_norm_workspace(x->rank, x->shape);
    return SX_OK;
}

/* the kernels' scratch (n->ws_bytes, set by the shape rules) from the graph's workspace */
sx_status cg_eval_batch_norm_stats(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_batch_norm_stats_ws(IN_VALUE(0), OUT, ws, n->ws_bytes);
}

sx_status cg_eval_batch_norm(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_batch_norm_res_ws(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2), IN_VALUE(3),
                                       n->attr.alpha, n->n_in == 5 ? IN_VALUE(4) : NULL,
                                       n->attr.ints[1] != 0, OUT, ws, n->ws_bytes);
}

sx_status cg_eval_batch_norm_sums(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_batch_norm_sums_mask_ws(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2),
                                             n->n_in == 4 ? IN_VALUE(3) : NULL, OUT, ws,
                                             n->ws_bytes);
}

sx_status cg_eval_batch_norm_dx(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_batch_norm_dx_ws(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2), IN_VALUE(3),
                                      IN_VALUE(4), n->n_in == 6 ? IN_VALUE(5) : NULL, n->attr.alpha,
                                      OUT, ws, n->ws_bytes);
}

sx_cg_node *sx_cg_batch_norm_stats(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_op_new(g, SX_OP_BATCH_NORM_STATS, 1, &x, NULL);
}

sx_cg_node *sx_cg_batch_norm(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *gamma,
                             sx_cg_node *beta, double eps)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.alpha = eps;
    sx_cg_node *in[4] = {x, stats, gamma, beta};
    return sx_cg_op_new(g, SX_OP_BATCH_NORM, 4, in, &a);
}

sx_cg_node *sx_cg_batch_norm_res(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats,
                                 sx_cg_node *gamma, sx_cg_node *beta, sx_cg_node *res, double eps)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.alpha = eps;
    sx_cg_node *in[5] = {x, stats, gamma, beta, res};
    return sx_cg_op_new(g, SX_OP_BATCH_NORM, res != NULL ? 5 : 4, in, &a);
}

sx_cg_node *sx_cg_batch_norm_sums(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *dy)
{
    sx_cg_node *in[3] = {x, stats, dy};
    return sx_cg_op_new(g, SX_OP_BATCH_NORM_SUMS, 3, in, NULL);
}

sx_cg_node *sx_cg_batch_norm_sums_mask(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats,
                                       sx_cg_node *dy, sx_cg_node *y)
{
    sx_cg_node *in[4] = {x, stats, dy, y};
    return sx_cg_op_new(g, SX_OP_BATCH_NORM_SUMS, y != NULL ? 4 : 3, in, NULL);
}

sx_cg_node *sx_cg_batch_norm_dx(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *gamma,
                                sx_cg_node *dy, sx_cg_node *sums, sx_cg_node *y, double eps)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.alpha = eps;
    sx_cg_node *in[6] = {x, stats, gamma, dy, sums, y};
    return sx_cg_op_new(g, SX_OP_BATCH_NORM_DX, y != NULL ? 6 : 5, in, &a);
}

/* statistics 3 flops per element of x, normalise 2 per output element (one more with relu, one
 * more with a residual), backward
 * sums 3 per element of x */
cg_cost cg_eval_batch_norm_stats_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, 3);
}

cg_cost cg_eval_batch_norm_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, 2 + (n->attr.ints[1] != 0) + (n->n_in == 5));
}

cg_cost cg_eval_batch_norm_sums_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, 3);
}

/* dx: 5 flops per element (6 with the mask) */
cg_cost cg_eval_batch_norm_dx_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, n->n_in == 6 ? 6 : 5);
}
