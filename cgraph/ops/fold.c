/* ops/fold.c: the reductions (sum, mean, prod, max/min, arg-max/min, norms, logsumexp): one
 * shape rule, evaluator and cost for all, dispatching on the op table's kernel column
 * (sx_fold_op), over an axes mask with keepdims. */
#ifndef CG_GRAD_RULES /* the ops; their gradient rules, at the end, build apart (ops/rule.h) */
#include "cgraph_impl.h"

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)
#define KERNEL (sx_cg_ops[n->op].kernel)

/* ---------------------------------------------------------------- constructors */

#define FOLD(NAME, name)                                                                           \
    sx_cg_node *sx_cg_##name(sx_cg_graph *g, sx_cg_node *x, unsigned axes, bool keepdims)          \
    {                                                                                              \
        sx_cg_attr a = sx_cg_attr_default();                                                       \
        a.axes = axes;                                                                             \
        a.keepdims = keepdims;                                                                     \
        return cg_op1(g, SX_OP_##NAME, x, &a);                                                     \
    }
FOLD(SUM, sum)
FOLD(MEAN, mean)
FOLD(PROD, prod)
FOLD(REDUCE_MAX, reduce_max)
FOLD(REDUCE_MIN, reduce_min)
FOLD(ARGMAX, argmax)
FOLD(ARGMIN, argmin)
FOLD(L1NORM, l1norm)
FOLD(L2NORM, l2norm)
FOLD(LOGSUMEXP, logsumexp)
#undef FOLD

/* ---------------------------------------------------------------- shape rules */

sx_status cg_shape_fold(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    int r;
    int64_t s[SX_MAX_RANK];
    SX_TRY(sx_fold_shape(cg_who(n), IN_VALUE(0)->rank, IN_VALUE(0)->shape, n->attr.axes,
                         n->attr.keepdims, &r, s));
    cg_set_shape(n, r, s);
    return SX_OK;
}

/* ---------------------------------------------------------------- evaluators */

sx_status cg_eval_fold(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_fold_out((sx_fold_op)KERNEL, IN_VALUE(0), n->attr.axes, n->attr.keepdims, OUT);
}

/* ---------------------------------------------------------------- flop model */

/* one operation per input element */
cg_cost cg_eval_fold_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, 1);
}

#else
/* ---------------------------------------------------------------- gradient rules */

/* The adjoint brought back
 * to the input's shape (reshape to keepdims form, broadcast), times the reduction's derivative.
 * y is the node, x_i = y's inputs, G = gy is the adjoint of y. */
#include "rule.h"

#include <string.h>

/* A reduction's adjoint (or result) brought back to the input's shape: reshape to keepdims
 * form, then broadcast. */
static sx_cg_node *expand(sx_cg_graph *g, sx_cg_node *r, sx_cg_node *y, const sx_cg_node *x)
{
    int xr = sx_cg_node_rank(x);
    const int64_t *xs = sx_cg_node_shape(x);
    unsigned axes = sx_cg_node_attr(y)->axes;
    int64_t kd[SX_MAX_RANK];
    for (int i = 0; i < xr; i++)
        kd[i] = (axes & SX_AXIS(i)) ? 1 : xs[i];
    sx_cg_node *k = r;
    if (!sx_shape_equal(sx_cg_node_rank(r), sx_cg_node_shape(r), xr, kd))
        k = sx_cg_reshape(g, r, xr, kd);
    if (k != NULL && sx_shape_equal(xr, kd, xr, xs))
        return k;
    return sx_cg_broadcast(g, k, xr, xs);
}

static double reduced_count(const sx_cg_node *y, const sx_cg_node *x)
{
    double c = 1;
    for (int i = 0; i < sx_cg_node_rank(x); i++)
        if (sx_cg_node_attr(y)->axes & SX_AXIS(i))
            c *= (double)sx_cg_node_shape(x)[i];
    return c;
}

/* For y = prod(x) over y's axes: each element's product of the others in its group, without
 * dividing by zero (y / x away from zeros; the non-zero product where x is the group's only
 * zero; 0 where the group has another zero). */
static sx_cg_node *prod_of_others(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *x)
{
    const sx_cg_attr *at = sx_cg_node_attr(y);
    sx_cg_node *zero = sx_cg_scalar_like(g, x, 0.0), *one = sx_cg_scalar_like(g, x, 1.0);
    sx_cg_node *is0 = sx_cg_eq(g, x, zero);
    sx_cg_node *nz = sx_cg_where(g, is0, one, x); /* x with its zeros made ones */
    sx_cg_node *zeros = expand(g, sx_cg_sum(g, is0, at->axes, false), y, x);
    sx_cg_node *rest = expand(g, sx_cg_prod(g, nz, at->axes, false), y, x);
    sx_cg_node *lone = sx_cg_where(g, sx_cg_eq(g, zeros, one), rest, zero);
    return sx_cg_where(g, is0, lone, sx_cg_div(g, expand(g, y, y, x), nz));
}

#define FOLD_RULE(name, expr)                                                                      \
    sx_status grad_##name(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,         \
                          sx_cg_node **gin)                                                        \
    {                                                                                              \
        sx_cg_node *x = IN(0);                                                                     \
        sx_cg_node *G = expand(g, gy, y, x);                                                       \
        (void)need;                                                                                \
        gin[0] = (expr);                                                                           \
        DONE();                                                                                    \
    }
/* sum: G broadcast */
FOLD_RULE(sum, G)
/* mean: G / count */
FOLD_RULE(mean, cg_grad_scale(g, G, 1.0 / reduced_count(y, x)))
/* prod: G times the product of the other elements of x's group: G y / x where x != 0; where
 * x = 0, the product of the group's non-zero elements if x is its only zero, else 0 */
FOLD_RULE(prod, sx_cg_mul(g, G, prod_of_others(g, y, x)))
/* l1norm = sum |x|: G sign x (selected: 0 at x = 0) */
FOLD_RULE(l1norm, cg_grad_signed_part(g, x, G))
/* l2norm = sqrt(sum x^2): G x / y */
FOLD_RULE(l2norm, sx_cg_div(g, sx_cg_mul(g, G, x), expand(g, y, y, x)))
/* logsumexp: G exp(x - y) */
FOLD_RULE(logsumexp, sx_cg_mul(g, G, sx_cg_exp(g, sx_cg_sub(g, x, expand(g, y, y, x)))))
#undef FOLD_RULE

/* reduce_max/reduce_min: G goes to the first extreme element of each reduced group, in
 * row-major order within the reduced axes (the header's convention, and argmax's): with the
 * reduced axes moved last and flattened to R entries, the mask is one_hot(argmax(x), R). */
static sx_status first_extreme(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                               sx_cg_node **gin, bool is_max)
{
    sx_cg_node *x = IN(0);
    int r = sx_cg_node_rank(x), nk = 0, perm[SX_MAX_RANK], inv[SX_MAX_RANK];
    const int64_t *xs = sx_cg_node_shape(x);
    int64_t kept[SX_MAX_RANK + 1], moved[SX_MAX_RANK], groups = 1;
    for (int i = 0; i < r; i++)
        if (!(ATTR->axes & SX_AXIS(i))) {
            kept[nk] = xs[i];
            perm[nk++] = i;
        }
    for (int i = 0, k = nk; i < r; i++)
        if (ATTR->axes & SX_AXIS(i)) {
            groups *= xs[i];
            perm[k++] = i;
        }
    if (nk == r) { /* nothing reduced: every element is its own extreme */
        gin[0] = sx_cg_reshape(g, gy, r, xs);
        DONE();
    }
    bool identity = true;
    for (int i = 0; i < r; i++) {
        moved[i] = xs[perm[i]];
        inv[perm[i]] = i;
        identity &= perm[i] == i;
    }
    sx_cg_node *idx =
        is_max ? sx_cg_argmax(g, x, ATTR->axes, false) : sx_cg_argmin(g, x, ATTR->axes, false);
    kept[nk] = 1;
    sx_cg_node *t =
        cg_grad_select(g, sx_cg_one_hot(g, idx, groups), sx_cg_reshape(g, gy, nk + 1, kept));
    t = sx_cg_reshape(g, t, r, moved);
    gin[0] = identity ? t : sx_cg_permute(g, t, inv);
    DONE();
}

sx_status grad_reduce_max(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                          sx_cg_node **gin)
{
    return first_extreme(g, y, gy, need, gin, true);
}

sx_status grad_reduce_min(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                          sx_cg_node **gin)
{
    return first_extreme(g, y, gy, need, gin, false);
}

#endif
