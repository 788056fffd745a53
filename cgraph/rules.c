/* rules.c: the gradient rules' table, one rule per op of include/strix/sx_ops.def from its
 * nograd column (the rules close their families' files, cgraph/ops/<family>.c: ops/rule.h), lent
 * to autodiff's reverse sweep (cgraph_grad.h), and the helpers the rules share. */
#include "ops/rule.h"

/* The rule of an NG_ALL op: no input has a gradient. */
sx_status cg_grad_none(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                       sx_cg_node **gin)
{
    (void)g, (void)y, (void)gy, (void)need, (void)gin;
    return SX_OK;
}

/* The rule of an NG_REFUSED op: it writes state (assign, the fused optimiser steps, collectives)
 * or is made by the optimiser after differentiation (fused chains). */
sx_status cg_grad_refused(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                          sx_cg_node **gin)
{
    (void)g, (void)gy, (void)need, (void)gin;
    return sx_error(SX_E_UNSUPPORTED,
                    "sx_ad_grad: cannot differentiate through %s (it writes state or is made "
                    "after differentiation: differentiate before optimising)",
                    sx_cg_op_name(sx_cg_node_op(y)));
}

static const sx__cg_grad_rule_fn rules[SX_OP_COUNT] = {
#define X(NAME, name, arity, shape, eval, flags, kernel, nograd)                                   \
    [SX_OP_##NAME] = CG_GRAD_RULE(name, nograd),
#include "sx_ops.def"
#undef X
};
_Static_assert(sizeof rules / sizeof rules[0] == SX_OP_COUNT, "one gradient rule per op");

/* The nograd column of sx_ops.def as bit masks. */
static const unsigned no_gradient[SX_OP_COUNT] = {
#define X(NAME, name, arity, shape, eval, flags, kernel, nograd)                                   \
    [SX_OP_##NAME] = CG_GRAD_NOGRAD(nograd),
#include "sx_ops.def"
#undef X
};

sx__cg_grad_rule_fn sx__cg_grad_rule(sx_cg_op op)
{
    return rules[op];
}

unsigned sx__cg_grad_nograd(sx_cg_op op)
{
    return no_gradient[op];
}

sx_cg_node *cg_grad_scale(sx_cg_graph *g, sx_cg_node *x, double s)
{
    return sx_cg_mul(g, x, sx_cg_scalar_like(g, x, s));
}

sx_cg_node *cg_grad_positive_part(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *G)
{
    sx_cg_node *zero = sx_cg_scalar_like(g, x, 0.0);
    return sx_cg_where(g, sx_cg_gt(g, x, zero), G, zero);
}

sx_cg_node *cg_grad_signed_part(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *G)
{
    sx_cg_node *zero = sx_cg_scalar_like(g, x, 0.0);
    return sx_cg_where(g, sx_cg_gt(g, x, zero), G,
                       sx_cg_where(g, sx_cg_lt(g, x, zero), sx_cg_neg(g, G), zero));
}

sx_status sx__cg_grad_status(sx_cg_graph *g)
{
    sx_status s = sx_cg_graph_status(g);
    return s != SX_OK ? s : sx_error(SX_E_STATE, "autodiff: a gradient node could not be made");
}

sx_cg_node *sx__cg_grad_full(sx_cg_graph *g, const sx_cg_node *like, int rank, const int64_t *shape,
                             double v)
{
    if (like == NULL)
        return NULL;
    sx_tensor *t = NULL;
    sx_status s = sx_tensor_full(sx_cg_node_dtype(like), rank, shape, v, &t);
    if (s != SX_OK) {
        sx_cg_graph_fail(g, s);
        return NULL;
    }
    sx_cg_node *c = sx_cg_const(g, t);
    sx_tensor_free(t);
    return c;
}

sx_cg_node *cg_grad_unbroadcast(sx_cg_graph *g, sx_cg_node *grad, const sx_cg_node *x)
{
    if (grad == NULL || x == NULL)
        return NULL;
    int gr = sx_cg_node_rank(grad), xr = sx_cg_node_rank(x);
    const int64_t *gs = sx_cg_node_shape(grad), *xs = sx_cg_node_shape(x);
    if (sx_shape_equal(gr, gs, xr, xs))
        return grad;
    unsigned axes = 0;
    for (int i = 0; i < gr; i++) {
        int xi = i - (gr - xr);
        if (xi < 0 || (xs[xi] == 1 && gs[i] != 1))
            axes |= SX_AXIS(i);
    }
    sx_cg_node *s = axes ? sx_cg_sum(g, grad, axes, false) : grad;
    if (s != NULL && !sx_shape_equal(sx_cg_node_rank(s), sx_cg_node_shape(s), xr, xs))
        s = sx_cg_reshape(g, s, xr, xs);
    return s;
}

sx_cg_node *cg_grad_select(sx_cg_graph *g, sx_cg_node *mask, sx_cg_node *v)
{
    if (mask == NULL || v == NULL)
        return NULL;
    return sx_cg_where(g, mask, v, sx_cg_scalar_like(g, v, 0.0));
}
