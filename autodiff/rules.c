/* rules.c: one gradient rule per op of cgraph/sx_ops.def (grad_<name>), each with its formula.
 * Rules use ordinary graph ops, so gradients of gradients work wherever those ops have rules.
 * y is the node, x_i = y's inputs, G = gy is the adjoint of y. */
#include "autodiff_impl.h"

#include <math.h>
#include <string.h>

#define IN(i) sx_cg_node_input(y, i)
#define ATTR (sx_cg_node_attr(y))
/* Finish a rule: a NULL among the needed gradients means a constructor failed. */
#define DONE()                                                                                     \
    do {                                                                                           \
        for (int k_ = 0; k_ < sx_cg_node_n_inputs(y); k_++)                                        \
            if (need[k_] && gin[k_] == NULL && sx_cg_graph_status(g) != SX_OK)                     \
                return ad_status(g);                                                               \
        return SX_OK;                                                                              \
    } while (0)

static sx_cg_node *scale(sx_cg_graph *g, sx_cg_node *x, double s)
{
    return sx_cg_mul(g, x, sx_cg_scalar_like(g, x, s));
}

/* where(x > 0, G, 0), with one zero constant for the comparison and the choice: the gradient
 * of relu read from x = relu's input or output (ad_select's selection, so an infinite G gives
 * 0 where x <= 0). */
static sx_cg_node *positive_part(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *G)
{
    sx_cg_node *zero = sx_cg_scalar_like(g, x, 0.0);
    return sx_cg_where(g, sx_cg_gt(g, x, zero), G, zero);
}

/* G sign(x) as a selection: G where x > 0, -G where x < 0, 0 where x = 0 (also when G is
 * infinite there; PyTorch's G * sgn(x) gives NaN). The gradient of |x| and of l1norm. */
static sx_cg_node *signed_part(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *G)
{
    sx_cg_node *zero = sx_cg_scalar_like(g, x, 0.0);
    return sx_cg_where(g, sx_cg_gt(g, x, zero), G,
                       sx_cg_where(g, sx_cg_lt(g, x, zero), sx_cg_neg(g, G), zero));
}

/* Rules for ops with no gradient (piecewise constant, index-valued or leaves). */
#define NO_GRAD(name)                                                                              \
    sx_status grad_##name(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,         \
                          sx_cg_node **gin)                                                        \
    {                                                                                              \
        (void)g, (void)y, (void)gy, (void)need, (void)gin;                                         \
        return SX_OK;                                                                              \
    }
NO_GRAD(const)
NO_GRAD(input)
NO_GRAD(param)
NO_GRAD(sign)
NO_GRAD(floor)
NO_GRAD(ceil)
NO_GRAD(round)
NO_GRAD(eq)
NO_GRAD(ne)
NO_GRAD(lt)
NO_GRAD(le)
NO_GRAD(gt)
NO_GRAD(ge)
NO_GRAD(argmax)
NO_GRAD(argmin)
NO_GRAD(one_hot)
NO_GRAD(dropout_mask)
#undef NO_GRAD

/* Element-wise unary rules: gin[0] = G * f'(x), written with y = f(x) where that is cheaper. */
#define UNARY_RULE(name, expr)                                                                     \
    sx_status grad_##name(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,         \
                          sx_cg_node **gin)                                                        \
    {                                                                                              \
        sx_cg_node *x = IN(0);                                                                     \
        (void)x;                                                                                   \
        gin[0] = (expr);                                                                           \
        DONE();                                                                                    \
    }

/* -x */
UNARY_RULE(neg, sx_cg_neg(g, gy))
/* |x|: G where x > 0, -G where x < 0, 0 at 0 (selected, so an infinite G gives 0 at 0) */
UNARY_RULE(abs, signed_part(g, x, gy))
/* x^2: 2x */
UNARY_RULE(sqr, sx_cg_mul(g, gy, scale(g, x, 2.0)))
/* sqrt x: 1 / (2 y) */
UNARY_RULE(sqrt, sx_cg_div(g, gy, scale(g, y, 2.0)))
/* x^-1/2: -y / (2x) */
UNARY_RULE(rsqrt, sx_cg_mul(g, gy, sx_cg_div(g, scale(g, y, -0.5), x)))
/* e^x: y */
UNARY_RULE(exp, sx_cg_mul(g, gy, y))
/* log x: 1/x */
UNARY_RULE(log, sx_cg_div(g, gy, x))
/* log(1+x): 1/(1+x) */
UNARY_RULE(log1p, sx_cg_div(g, gy, sx_cg_add_scalar(g, x, 1.0)))
/* e^x - 1: y + 1 */
UNARY_RULE(expm1, sx_cg_mul(g, gy, sx_cg_add_scalar(g, y, 1.0)))
/* sin: cos x */
UNARY_RULE(sin, sx_cg_mul(g, gy, sx_cg_cos(g, x)))
/* cos: -sin x */
UNARY_RULE(cos, sx_cg_mul(g, gy, sx_cg_neg(g, sx_cg_sin(g, x))))
/* tan: 1 + y^2 */
UNARY_RULE(tan, sx_cg_mul(g, gy, sx_cg_add_scalar(g, sx_cg_sqr(g, y), 1.0)))
/* tanh: 1 - y^2 */
UNARY_RULE(tanh, sx_cg_mul(g, gy, sx_cg_sub(g, sx_cg_scalar_like(g, y, 1.0), sx_cg_sqr(g, y))))
/* sigmoid: y (1 - y) */
UNARY_RULE(sigmoid,
           sx_cg_mul(g, gy, sx_cg_mul(g, y, sx_cg_sub(g, sx_cg_scalar_like(g, y, 1.0), y))))
/* relu: G where x > 0, else 0 (relu'(0) = 0), selected (an infinite G stays out of the zeros).
 * Read from y (y > 0 exactly where x > 0): then x dies at the relu, which the planner runs in
 * place, and only y stays for the backward pass. */
UNARY_RULE(relu, positive_part(g, y, gy))
/* leaky_relu: 1 where x > 0, else slope */
UNARY_RULE(leaky_relu, sx_cg_where(g, sx_cg_gt(g, x, sx_cg_scalar_like(g, x, 0.0)), gy,
                                   scale(g, gy, ATTR->alpha)))
/* elu: 1 where x > 0, else alpha e^x = y + alpha */
UNARY_RULE(elu, sx_cg_where(g, sx_cg_gt(g, x, sx_cg_scalar_like(g, x, 0.0)), gy,
                            sx_cg_mul(g, gy, sx_cg_add_scalar(g, y, ATTR->alpha))))
/* softplus: sigmoid x */
UNARY_RULE(softplus, sx_cg_mul(g, gy, sx_cg_sigmoid(g, x)))
/* 1/x: -y^2 */
UNARY_RULE(reciprocal, sx_cg_neg(g, sx_cg_mul(g, gy, sx_cg_sqr(g, y))))
/* erf: 2/sqrt(pi) e^(-x^2) */
UNARY_RULE(erf, sx_cg_mul(g, gy,
                          scale(g, sx_cg_exp(g, sx_cg_neg(g, sx_cg_sqr(g, x))),
                                1.1283791670955125738961589031215452)))
/* softsign x / (1 + |x|): 1 / (1 + |x|)^2 */
UNARY_RULE(softsign, sx_cg_div(g, gy, sx_cg_sqr(g, sx_cg_add_scalar(g, sx_cg_abs(g, x), 1.0))))
/* ---- PyTorch's smooth activations: gelu, gelu_tanh, silu, mish, hard_swish */
/* gelu x Phi(x): Phi(x) + x phi(x) = (1 + erf(x / sqrt 2)) / 2 + x e^(-x^2 / 2) / sqrt(2 pi) */
UNARY_RULE(
    gelu,
    sx_cg_mul(g, gy,
              sx_cg_add(g,
                        scale(g,
                              sx_cg_add_scalar(g, sx_cg_erf(g, scale(g, x, 0.70710678118654752440)),
                                               1.0),
                              0.5),
                        scale(g, sx_cg_mul(g, x, sx_cg_exp(g, scale(g, sx_cg_sqr(g, x), -0.5))),
                              0.39894228040143267794))))
/* gelu_tanh x (1 + t) / 2, t = tanh(k (x + c x^3)): (1 + t) / 2 + x (1 - t^2) k (1 + 3 c x^2) / 2
 */
static sx_cg_node *gelu_tanh_slope(sx_cg_graph *g, sx_cg_node *x)
{
    const double k = 0.79788456080286535588, c = 0.044715;
    sx_cg_node *x2 = sx_cg_sqr(g, x);
    sx_cg_node *t = sx_cg_tanh(g, scale(g, sx_cg_add(g, x, scale(g, sx_cg_mul(g, x2, x), c)), k));
    sx_cg_node *one = sx_cg_scalar_like(g, x, 1.0);
    sx_cg_node *dt = sx_cg_mul(g, sx_cg_sub(g, one, sx_cg_sqr(g, t)),
                               scale(g, sx_cg_add_scalar(g, scale(g, x2, 3 * c), 1.0), k));
    return scale(g, sx_cg_add(g, sx_cg_add(g, t, one), sx_cg_mul(g, x, dt)), 0.5);
}
UNARY_RULE(gelu_tanh, sx_cg_mul(g, gy, gelu_tanh_slope(g, x)))
/* silu y = x s, s = sigmoid(x): s + y (1 - s) */
static sx_cg_node *silu_slope(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *y)
{
    sx_cg_node *s = sx_cg_sigmoid(g, x);
    return sx_cg_add(g, s, sx_cg_mul(g, y, sx_cg_sub(g, sx_cg_scalar_like(g, s, 1.0), s)));
}
UNARY_RULE(silu, sx_cg_mul(g, gy, silu_slope(g, x, y)))
/* mish x t, t = tanh(softplus(x)): t + x (1 - t^2) sigmoid(x) */
static sx_cg_node *mish_slope(sx_cg_graph *g, sx_cg_node *x)
{
    sx_cg_node *t = sx_cg_tanh(g, sx_cg_softplus(g, x));
    sx_cg_node *dt = sx_cg_mul(g, sx_cg_sub(g, sx_cg_scalar_like(g, t, 1.0), sx_cg_sqr(g, t)),
                               sx_cg_sigmoid(g, x));
    return sx_cg_add(g, t, sx_cg_mul(g, x, dt));
}
UNARY_RULE(mish, sx_cg_mul(g, gy, mish_slope(g, x)))
/* hard_swish: 0 below -3, 1 above 3, (2 x + 3) / 6 = x / 3 + 1/2 between (selected) */
static sx_cg_node *hard_swish_grad(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *gy)
{
    sx_cg_node *mid = sx_cg_mul(g, gy, sx_cg_add_scalar(g, scale(g, x, 1.0 / 3), 0.5));
    sx_cg_node *above = sx_cg_where(g, sx_cg_gt(g, x, sx_cg_scalar_like(g, x, 3.0)), gy, mid);
    return sx_cg_where(g, sx_cg_gt(g, x, sx_cg_scalar_like(g, x, -3.0)), above,
                       sx_cg_scalar_like(g, x, 0.0));
}
UNARY_RULE(hard_swish, hard_swish_grad(g, x, gy))
/* ---- end of gelu .. hard_swish */
#undef UNARY_RULE

/* Binary rules compute the full-shape gradients, then sum them back over broadcast axes. */
/* G y log a for a^b, with 0 where a = 0 and b >= 0 (the limit of y log a as a -> 0+). The log
 * reads 1 there, not a: the untaken branch stays finite, so its own gradient (second order) is
 * 0 * log 1, not 0 * log 0 = NaN. */
static sx_cg_node *pow_exponent_grad(sx_cg_graph *g, sx_cg_node *gy, sx_cg_node *a, sx_cg_node *b,
                                     sx_cg_node *y)
{
    sx_cg_node *zero = sx_cg_scalar_like(g, a, 0.0);
    sx_cg_node *at_zero = sx_cg_mul(g, sx_cg_eq(g, a, zero), sx_cg_ge(g, b, zero));
    sx_cg_node *safe = sx_cg_where(g, at_zero, sx_cg_scalar_like(g, a, 1.0), a);
    return sx_cg_where(g, at_zero, zero, sx_cg_mul(g, gy, sx_cg_mul(g, y, sx_cg_log(g, safe))));
}

#define BINARY_RULE(name, ga, gb)                                                                  \
    sx_status grad_##name(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,         \
                          sx_cg_node **gin)                                                        \
    {                                                                                              \
        sx_cg_node *a = IN(0), *b = IN(1);                                                         \
        (void)a, (void)b;                                                                          \
        if (need[0])                                                                               \
            gin[0] = ad_unbroadcast(g, (ga), a);                                                   \
        if (need[1])                                                                               \
            gin[1] = ad_unbroadcast(g, (gb), b);                                                   \
        DONE();                                                                                    \
    }

/* a + b */
BINARY_RULE(add, gy, gy)
/* a - b */
BINARY_RULE(sub, gy, sx_cg_neg(g, gy))
/* a b */
BINARY_RULE(mul, sx_cg_mul(g, gy, b), sx_cg_mul(g, gy, a))
/* a / b: 1/b and -a/b^2 = -y/b */
BINARY_RULE(div, sx_cg_div(g, gy, b), sx_cg_neg(g, sx_cg_div(g, sx_cg_mul(g, gy, y), b)))
/* a^b: b a^(b-1), 0 where b = 0 (0 * 0^-1 would be NaN at a = 0); and y log a, 0 where a = 0
 * and b >= 0 (0 * log 0 would be NaN). The same conventions as PyTorch. */
BINARY_RULE(pow,
            ad_select(g, sx_cg_ne(g, b, sx_cg_scalar_like(g, b, 0.0)),
                      sx_cg_mul(g, gy,
                                sx_cg_mul(g, b, sx_cg_pow(g, a, sx_cg_add_scalar(g, b, -1.0))))),
            pow_exponent_grad(g, gy, a, b, y))
/* min(a, b): G to a where a <= b (ties go to a), else to b (selected) */
BINARY_RULE(min, ad_select(g, sx_cg_le(g, a, b), gy), ad_select(g, sx_cg_gt(g, a, b), gy))
/* max(a, b): G to a where a >= b (ties go to a), else to b (selected) */
BINARY_RULE(max, ad_select(g, sx_cg_ge(g, a, b), gy), ad_select(g, sx_cg_lt(g, a, b), gy))
/* atan2(a, b): b / (a^2 + b^2) and -a / (a^2 + b^2) */
BINARY_RULE(atan2,
            sx_cg_div(g, sx_cg_mul(g, gy, b), sx_cg_add(g, sx_cg_sqr(g, a), sx_cg_sqr(g, b))),
            sx_cg_neg(g, sx_cg_div(g, sx_cg_mul(g, gy, a),
                                   sx_cg_add(g, sx_cg_sqr(g, a), sx_cg_sqr(g, b)))))
#undef BINARY_RULE

/* fma(a, b, c) = a b + c */
sx_status grad_fma(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                   sx_cg_node **gin)
{
    if (need[0])
        gin[0] = ad_unbroadcast(g, sx_cg_mul(g, gy, IN(1)), IN(0));
    if (need[1])
        gin[1] = ad_unbroadcast(g, sx_cg_mul(g, gy, IN(0)), IN(1));
    if (need[2])
        gin[2] = ad_unbroadcast(g, gy, IN(2));
    DONE();
}

/* where(c, a, b): G to a where c != 0, to b elsewhere; the condition has no gradient */
sx_status grad_where(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                     sx_cg_node **gin)
{
    sx_cg_node *zero = sx_cg_scalar_like(g, gy, 0.0);
    if (need[1])
        gin[1] = ad_unbroadcast(g, sx_cg_where(g, IN(0), gy, zero), IN(1));
    if (need[2])
        gin[2] = ad_unbroadcast(g, sx_cg_where(g, IN(0), zero, gy), IN(2));
    DONE();
}

/* ---------------------------------------------------------------- reductions */

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
FOLD_RULE(mean, scale(g, G, 1.0 / reduced_count(y, x)))
/* prod: G times the product of the other elements of x's group: G y / x where x != 0; where
 * x = 0, the product of the group's non-zero elements if x is its only zero, else 0 */
FOLD_RULE(prod, sx_cg_mul(g, G, prod_of_others(g, y, x)))
/* l1norm = sum |x|: G sign x (selected: 0 at x = 0) */
FOLD_RULE(l1norm, signed_part(g, x, G))
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
    sx_cg_node *t = ad_select(g, sx_cg_one_hot(g, idx, groups), sx_cg_reshape(g, gy, nk + 1, kept));
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

/* ---------------------------------------------------------------- layout */

/* Sum G of shape (.., a*b, ..) over the factor `b` (inner) or `a` (outer) of axis i: reshape
 * to (pre, a, b, post) and sum one of the middle axes. */
static sx_cg_node *fold_axis(sx_cg_graph *g, sx_cg_node *G, int axis, int64_t outer, int64_t inner,
                             bool sum_inner)
{
    int r = sx_cg_node_rank(G);
    const int64_t *s = sx_cg_node_shape(G);
    int64_t pre = 1, post = 1;
    for (int i = 0; i < axis; i++)
        pre *= s[i];
    for (int i = axis + 1; i < r; i++)
        post *= s[i];
    int64_t four[4] = {pre, outer, inner, post};
    sx_cg_node *t = sx_cg_sum(g, sx_cg_reshape(g, G, 4, four), SX_AXIS(sum_inner ? 2 : 1), false);
    int64_t back[SX_MAX_RANK];
    memcpy(back, s, (size_t)r * sizeof *back);
    back[axis] = sum_inner ? outer : inner;
    return sx_cg_reshape(g, t, r, back);
}

/* repeat: each element was copied reps[i] times in place: sum the copies (inner factor) */
sx_status grad_repeat(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    (void)need;
    sx_cg_node *G = gy, *x = IN(0);
    for (int i = 0; i < sx_cg_node_rank(x) && G != NULL; i++)
        if (ATTR->ints[i] != 1)
            G = fold_axis(g, G, i, sx_cg_node_shape(x)[i], ATTR->ints[i], true);
    gin[0] = G;
    DONE();
}

/* tile: the whole tensor was copied reps[i] times: sum the copies (outer factor) */
sx_status grad_tile(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                    sx_cg_node **gin)
{
    (void)need;
    sx_cg_node *G = gy, *x = IN(0);
    for (int i = 0; i < sx_cg_node_rank(x) && G != NULL; i++)
        if (ATTR->ints[i] != 1)
            G = fold_axis(g, G, i, ATTR->ints[i], sx_cg_node_shape(x)[i], false);
    gin[0] = G;
    DONE();
}

/* broadcast: sum over the broadcast axes */
sx_status grad_broadcast(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                         sx_cg_node **gin)
{
    (void)need;
    gin[0] = ad_unbroadcast(g, gy, IN(0));
    DONE();
}

/* reshape: G in the input's shape */
sx_status grad_reshape(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                       sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_reshape(g, gy, sx_cg_node_rank(IN(0)), sx_cg_node_shape(IN(0)));
    DONE();
}

sx_status grad_identity(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                        sx_cg_node **gin)
{
    (void)g, (void)y, (void)need;
    gin[0] = gy;
    return SX_OK;
}

/* slice: G placed back into zeros of the input's shape */
sx_status grad_slice(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                     sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_unslice(g, gy, ATTR->slice, sx_cg_node_rank(IN(0)), sx_cg_node_shape(IN(0)));
    DONE();
}

/* unslice: the slice of G */
sx_status grad_unslice(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                       sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_slice(g, gy, ATTR->slice);
    DONE();
}

/* concat: each input gets its slab of G */
sx_status grad_concat(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    int axis = ATTR->axis, r = sx_cg_node_rank(y);
    int64_t at = 0;
    for (int i = 0; i < sx_cg_node_n_inputs(y); i++) {
        int64_t len = sx_cg_node_shape(IN(i))[axis];
        if (need[i]) {
            sx_slice s[SX_MAX_RANK];
            for (int d = 0; d < r; d++)
                s[d] = SX_SLICE_ALL;
            s[axis] = (sx_slice){at, at + len, 1};
            gin[i] = sx_cg_slice(g, gy, s);
        }
        at += len;
    }
    DONE();
}

/* permute: G permuted back by the inverse permutation */
sx_status grad_permute(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                       sx_cg_node **gin)
{
    (void)need;
    int inv[SX_MAX_RANK];
    for (int i = 0; i < sx_cg_node_rank(y); i++)
        inv[ATTR->ints[i]] = i;
    gin[0] = sx_cg_permute(g, gy, inv);
    DONE();
}

/* pad: the interior of G */
sx_status grad_pad(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                   sx_cg_node **gin)
{
    (void)need;
    sx_slice s[SX_MAX_RANK];
    for (int i = 0; i < sx_cg_node_rank(y); i++)
        s[i] = (sx_slice){ATTR->ints[i], ATTR->ints[i] + sx_cg_node_shape(IN(0))[i], 1};
    gin[0] = sx_cg_slice(g, gy, s);
    DONE();
}

/* gather(x, idx): rows of G added back at idx; the index has no gradient */
sx_status grad_gather(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    if (need[0])
        gin[0] = sx_cg_scatter_add(g, gy, IN(1), sx_cg_node_shape(IN(0))[0]);
    DONE();
}

/* scatter_add(h, idx): the rows of G at idx */
sx_status grad_scatter_add(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                           sx_cg_node **gin)
{
    if (need[0])
        gin[0] = sx_cg_gather(g, gy, IN(1));
    DONE();
}

/* ---------------------------------------------------------------- products */

/* y = alpha op(a) op(b) (+ beta c). With op(a) = A, op(b) = B: dA = alpha G B^T, dB = alpha
 * A^T G, written with transpose flags so no transpose is materialised; batch axes that were
 * broadcast are summed back, and so are the axes over which the addend c was broadcast
 * (dc = beta G summed to c's shape, as for add). */
sx_status grad_matmul(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    sx_cg_node *a = IN(0), *b = IN(1);
    bool ta = ATTR->trans_a, tb = ATTR->trans_b;
    double alpha = ATTR->alpha;
    if (need[0]) {
        /* da = alpha G B^T (ta = 0) or alpha B G^T (ta = 1) */
        sx_cg_node *d = ta ? sx_cg_gemm(g, b, gy, tb, true, alpha, NULL, 0)
                           : sx_cg_gemm(g, gy, b, false, !tb, alpha, NULL, 0);
        gin[0] = ad_unbroadcast(g, d, a);
    }
    if (need[1]) {
        /* db = alpha A^T G (tb = 0) or alpha G^T A (tb = 1) */
        sx_cg_node *d = tb ? sx_cg_gemm(g, gy, a, true, ta, alpha, NULL, 0)
                           : sx_cg_gemm(g, a, gy, !ta, false, alpha, NULL, 0);
        gin[1] = ad_unbroadcast(g, d, b);
    }
    if (sx_cg_node_n_inputs(y) == 3 && need[2]) /* beta G, summed over c's broadcast axes */
        gin[2] = ad_unbroadcast(g, scale(g, gy, ATTR->beta), IN(2));
    DONE();
}

/* dot(a, b) = sum a b: G b and G a (in each other's shapes) */
sx_status grad_dot(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                   sx_cg_node **gin)
{
    sx_cg_node *a = IN(0), *b = IN(1);
    if (need[0])
        gin[0] = sx_cg_mul(g, gy, sx_cg_reshape(g, b, sx_cg_node_rank(a), sx_cg_node_shape(a)));
    if (need[1])
        gin[1] = sx_cg_mul(g, gy, sx_cg_reshape(g, a, sx_cg_node_rank(b), sx_cg_node_shape(b)));
    DONE();
}

/* conv2d(x, k): dx = conv2d_backward_input(k, G), dk = conv2d_backward_kernel(x, G) */
sx_status grad_conv2d(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    if (ATTR->prog.n != 0) /* an optimised graph's epilogue (SX_PASS_CONV_EPILOGUE) */
        return sx_error(SX_E_UNSUPPORTED,
                        "sx_ad_grad: cannot differentiate a conv2d with an epilogue (optimise "
                        "after differentiating)");
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv2d_backward_input(g, IN(1), gy, p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv2d_backward_kernel(g, IN(0), gy, p, sx_cg_node_shape(IN(1)));
    DONE();
}

/* conv2d_backward_input(k, dy) is bilinear: <backward_input(k, dy), G> = <conv2d(G, k), dy>, so
 * d(dy) = conv2d(G, k) and dk = conv2d_backward_kernel(G, dy). */
sx_status grad_conv2d_backward_input(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                     const bool *need, sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv2d_backward_kernel(g, gy, IN(1), p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv2d(g, gy, IN(0), p);
    DONE();
}

/* conv2d_backward_kernel(x, dy): <backward_kernel(x, dy), G> = <conv2d(x, G), dy>, so
 * d(dy) = conv2d(x, G) and dx = conv2d_backward_input(G, dy). */
sx_status grad_conv2d_backward_kernel(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                      const bool *need, sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv2d_backward_input(g, gy, IN(1), p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv2d(g, IN(0), gy, p);
    DONE();
}

/* conv_transpose2d(x, k) = T(x, k), bilinear: dx = conv_transpose2d_backward_input(k, G),
 * dk = conv_transpose2d_backward_kernel(x, G) */
sx_status grad_conv_transpose2d(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv_transpose2d_backward_input(g, IN(1), gy, p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv_transpose2d_backward_kernel(g, IN(0), gy, p, sx_cg_node_shape(IN(1)));
    DONE();
}

/* conv_transpose2d_backward_input(k, dy) is bilinear: <backward_input(k, dy), G> = <T(G, k), dy>,
 * so d(dy) = T(G, k) and dk = conv_transpose2d_backward_kernel(G, dy). */
sx_status grad_conv_transpose2d_backward_input(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                               const bool *need, sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv_transpose2d_backward_kernel(g, gy, IN(1), p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv_transpose2d(g, gy, IN(0), p);
    DONE();
}

/* conv_transpose2d_backward_kernel(x, dy): <backward_kernel(x, dy), G> = <T(x, G), dy>, so
 * d(dy) = T(x, G) and dx = conv_transpose2d_backward_input(G, dy). */
sx_status grad_conv_transpose2d_backward_kernel(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                                const bool *need, sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv_transpose2d_backward_input(g, gy, IN(1), p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv_transpose2d(g, IN(0), gy, p);
    DONE();
}

/* ---------------------------------------------------------------- pooling */

/* maxpool: G routed to the first maximum of each window */
sx_status grad_maxpool2d(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                         sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_maxpool2d_backward(g, IN(0), gy, &ATTR->pool);
    DONE();
}

/* Stack the kh*kw strided views of a padded (n, h', w', c) tensor, one per window offset in
 * row-major order (offset (i, j) starts at row i * dilation_h, column j * dilation_w), along a
 * new last axis: (n, oh, ow, c, kh*kw). Concat joins at most SX_CG_MAX_INPUTS inputs per node,
 * so larger windows are joined in groups. */
static sx_cg_node *window_stack(sx_cg_graph *g, sx_cg_node *xp, const sx_pool2d_params *p,
                                int64_t oh, int64_t ow)
{
    int64_t k = (int64_t)p->kernel_h * p->kernel_w, s5[5];
    int64_t dh = p->dilation_h > 1 ? p->dilation_h : 1, dw = p->dilation_w > 1 ? p->dilation_w : 1;
    memcpy(s5, sx_cg_node_shape(xp), 4 * sizeof *s5);
    s5[1] = oh, s5[2] = ow, s5[4] = 1;
    sx_cg_node **parts = sx_calloc((size_t)k, sizeof *parts);
    if (parts == NULL)
        return NULL;
    for (int64_t i = 0; i < k; i++) {
        int64_t di = i / p->kernel_w * dh, dj = i % p->kernel_w * dw;
        sx_slice sl[4] = {SX_SLICE_ALL,
                          {di, di + (oh - 1) * p->stride_h + 1, p->stride_h},
                          {dj, dj + (ow - 1) * p->stride_w + 1, p->stride_w},
                          SX_SLICE_ALL};
        parts[i] = sx_cg_reshape(g, sx_cg_slice(g, xp, sl), 5, s5);
    }
    int64_t m = k;
    while (m > 1) {
        int64_t out = 0;
        for (int64_t i = 0; i < m; i += SX_CG_MAX_INPUTS) {
            int n = (int)(m - i < SX_CG_MAX_INPUTS ? m - i : SX_CG_MAX_INPUTS);
            parts[out++] = n == 1 ? parts[i] : sx_cg_concat(g, n, parts + i, 4);
        }
        m = out;
    }
    sx_cg_node *r = parts[0];
    sx_free(parts);
    return r;
}

/* The padding before an axis of `size` cells pooled to `out` outputs with kernel k, stride st
 * and dilated kernel ke (sx_pool2d_params' rules; `explicit_pad` is pad_top or pad_left). */
static int64_t pool_pad_before(const sx_pool2d_params *p, int64_t size, int64_t out, int64_t st,
                               int64_t ke, int64_t explicit_pad)
{
    int64_t total = (out - 1) * st + ke - size;
    switch (p->padding) {
    case SX_PAD_VALID:
        return 0;
    case SX_PAD_SAME:
        return total > 0 ? total / 2 : 0;
    case SX_PAD_SAME_LOWER:
        return total > 0 ? total - total / 2 : 0;
    case SX_PAD_EXPLICIT:
        return explicit_pad;
    }
    return 0;
}

/* maxpool_backward(x, dy) = P^T dy, where P (x-dependent, piecewise constant) picks each window's
 * first maximum. The x-gradient is zero (almost everywhere); the dy-gradient is P G: G read at
 * each window's first maximum. Built from ops that have rules: pad x with -inf and G with 0 by
 * the pooling's own padding before each axis and as far after as the last (dilated, possibly
 * ceil_mode) window reaches, stack the kh*kw window offsets along a new axis, take argmax (the
 * first maximum in the window's row-major order, as the kernel), and sum G's stack against
 * one_hot(argmax). A window that holds only padding (dilation allows it) picks a padded cell
 * of G, a 0: no gradient, as the kernel. */
sx_status grad_maxpool2d_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                  sx_cg_node **gin)
{
    if (!need[1])
        return SX_OK;
    const sx_pool2d_params *p = &ATTR->pool;
    sx_cg_node *x = IN(0);
    const int64_t *xs = sx_cg_node_shape(x), *ys = sx_cg_node_shape(IN(1));
    int64_t oh = ys[1], ow = ys[2], before[4] = {0}, after[4] = {0};
    int64_t k[2] = {p->kernel_h, p->kernel_w}, st[2] = {p->stride_h, p->stride_w};
    int64_t dil[2] = {p->dilation_h > 1 ? p->dilation_h : 1, p->dilation_w > 1 ? p->dilation_w : 1};
    int64_t pads[2] = {p->pad_top, p->pad_left};
    for (int a = 0; a < 2; a++) {
        int64_t o = a == 0 ? oh : ow, size = xs[1 + a], ke = (k[a] - 1) * dil[a] + 1;
        int64_t pb = pool_pad_before(p, size, o, st[a], ke, pads[a]);
        int64_t reach = (o - 1) * st[a] + ke - pb - size; /* cells past the end the last needs */
        before[1 + a] = pb;
        after[1 + a] = reach > 0 ? reach : 0;
    }
    sx_cg_node *xw = window_stack(g, sx_cg_pad(g, x, before, after, -INFINITY), p, oh, ow);
    sx_cg_node *gw = window_stack(g, sx_cg_pad(g, gy, before, after, 0.0), p, oh, ow);
    sx_cg_node *pick = sx_cg_one_hot(g, sx_cg_argmax(g, xw, SX_AXIS(4), false), k[0] * k[1]);
    gin[1] = sx_cg_sum(g, ad_select(g, pick, gw), SX_AXIS(4), false);
    DONE();
}

/* maxpool_relu_backward(x, dy) = where(x > 0, maxpool_backward(x, dy), 0): the dy-gradient is
 * maxpool_backward's, taken of G where x > 0 (else 0); x is not differentiated (piecewise constant,
 * as there). */
sx_status grad_maxpool2d_relu_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                       const bool *need, sx_cg_node **gin)
{
    sx_cg_node *x = IN(0);
    return grad_maxpool2d_backward(g, y, positive_part(g, x, gy), need, gin);
}

/* avgpool: G spread evenly over each window */
sx_status grad_avgpool2d(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                         sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_avgpool2d_backward(g, gy, &ATTR->pool, sx_cg_node_shape(IN(0)));
    DONE();
}

/* avgpool_backward is linear and the adjoint of avgpool: its adjoint is avgpool */
sx_status grad_avgpool2d_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                  sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_avgpool2d(g, gy, &ATTR->pool);
    DONE();
}

/* adaptive avgpool A is linear: dx = A^T G (its backward op) */
sx_status grad_adaptive_avgpool2d(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                  sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_adaptive_avgpool2d_backward(g, gy, sx_cg_node_shape(IN(0)));
    DONE();
}

/* A^T's adjoint is A, pooling G back to dy's size */
sx_status grad_adaptive_avgpool2d_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                           const bool *need, sx_cg_node **gin)
{
    (void)need;
    const int64_t *dy = sx_cg_node_shape(IN(0));
    gin[0] = sx_cg_adaptive_avgpool2d(g, gy, dy[1], dy[2]);
    DONE();
}

/* ---------------------------------------------------------------- softmax family */

static sx_cg_node *sum_axis(sx_cg_graph *g, sx_cg_node *x, int axis)
{
    return sx_cg_sum(g, x, SX_AXIS(axis), true);
}

/* softmax: dx = y (G - sum(G y)) */
sx_status grad_softmax(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                       sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_softmax_backward(g, y, gy, ATTR->axis);
    DONE();
}

/* log_softmax: dx = G - exp(y) sum(G) */
sx_status grad_log_softmax(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                           sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_log_softmax_backward(g, y, gy, ATTR->axis);
    DONE();
}

/* out = s (d - <d, s>) with s = softmax output, d = dy; t = <G, s>:
 * d(d) = s (G - t) = softmax_backward(s, G); d(s) = G (d - <d, s>) - t d */
sx_status grad_softmax_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                sx_cg_node **gin)
{
    sx_cg_node *s = IN(0), *d = IN(1);
    int axis = ATTR->axis;
    if (need[0]) {
        sx_cg_node *ds = sum_axis(g, sx_cg_mul(g, d, s), axis);
        sx_cg_node *t = sum_axis(g, sx_cg_mul(g, gy, s), axis);
        gin[0] = sx_cg_sub(g, sx_cg_mul(g, gy, sx_cg_sub(g, d, ds)), sx_cg_mul(g, t, d));
    }
    if (need[1])
        gin[1] = sx_cg_softmax_backward(g, s, gy, axis);
    DONE();
}

/* out = d - exp(l) sum(d) with l = log-softmax output:
 * d(d) = G - sum(G exp(l)); d(l) = -G exp(l) sum(d) */
sx_status grad_log_softmax_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                    sx_cg_node **gin)
{
    sx_cg_node *l = IN(0), *d = IN(1);
    int axis = ATTR->axis;
    sx_cg_node *e = sx_cg_exp(g, l);
    if (need[0])
        gin[0] = sx_cg_neg(g, sx_cg_mul(g, sx_cg_mul(g, gy, e), sum_axis(g, d, axis)));
    if (need[1])
        gin[1] = sx_cg_sub(g, gy, sum_axis(g, sx_cg_mul(g, gy, e), axis));
    DONE();
}

/* Per-row G (n) as an (n,1) column that broadcasts over the classes. */
static sx_cg_node *column(sx_cg_graph *g, sx_cg_node *v)
{
    int64_t s[2] = {sx_cg_node_shape(v)[0], 1};
    return sx_cg_reshape(g, v, 2, s);
}

/* loss_i = -sum_j t_ij log_softmax(l)_ij: dl = G_i (softmax(l) - t), dt = -G_i log_softmax(l) */
sx_status grad_softmax_xent(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                            sx_cg_node **gin)
{
    if (need[0])
        gin[0] = sx_cg_softmax_xent_backward(g, IN(0), IN(1), gy);
    if (need[1])
        gin[1] = sx_cg_neg(g, sx_cg_mul(g, column(g, gy), sx_cg_log_softmax(g, IN(0), 1)));
    DONE();
}

/* out = d_i (s T_i - t), s = softmax(l), T_i = sum_j t_ij (the exact gradient of the loss for
 * targets that need not sum to 1, as the kernel computes it):
 * d(d)_i = sum_j G_ij (s_ij T_i - t_ij); dt_ij = d_i (sum_k G_ik s_ik - G_ij);
 * dl = softmax_backward(s, G d_i T_i) */
sx_status grad_softmax_xent_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                     const bool *need, sx_cg_node **gin)
{
    sx_cg_node *l = IN(0), *t = IN(1), *d = column(g, IN(2));
    sx_cg_node *s = sx_cg_softmax(g, l, 1), *tsum = sum_axis(g, t, 1);
    if (need[0])
        gin[0] = sx_cg_softmax_backward(g, s, sx_cg_mul(g, gy, sx_cg_mul(g, d, tsum)), 1);
    if (need[1])
        gin[1] = sx_cg_mul(g, d, sx_cg_sub(g, sum_axis(g, sx_cg_mul(g, gy, s), 1), gy));
    if (need[2])
        gin[2] = sx_cg_sum(g, sx_cg_mul(g, gy, sx_cg_sub(g, sx_cg_mul(g, s, tsum), t)), SX_AXIS(1),
                           false);
    DONE();
}

/* loss_i = lse_i - (1 - e) l_{i,t_i} - e/k sum_j l_ij: dl = sparse_xent_backward(l, t, G); the
 * indices have no gradient */
sx_status grad_sparse_xent(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                           sx_cg_node **gin)
{
    const sx_cg_attr *a = sx_cg_node_attr(y);
    if (need[0])
        gin[0] = sx_cg_sparse_xent_backward(g, IN(0), IN(1), gy, a->ints[0], a->alpha);
    DONE();
}

/* out_ij = d_i v_i (s_ij - q_ij), s = softmax(l), q the smoothed one-hot row, v_i = [t_i is not
 * ignored]: dl = softmax_backward(s, G d_i v_i); dd_i = sum_j G_ij v_i (s_ij - q_ij), which is
 * this op again with v as dout */
sx_status grad_sparse_xent_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                    sx_cg_node **gin)
{
    const sx_cg_attr *a = sx_cg_node_attr(y);
    sx_cg_node *l = IN(0), *t = IN(1), *d = IN(2);
    sx_cg_node *v = sx_cg_ne(g, t, sx_cg_scalar_like(g, t, (double)a->ints[0]));
    if (need[0])
        gin[0] = sx_cg_softmax_backward(g, sx_cg_softmax(g, l, 1),
                                        sx_cg_mul(g, gy, column(g, sx_cg_mul(g, d, v))), 1);
    if (need[2])
        gin[2] = sx_cg_sum(
            g, sx_cg_mul(g, gy, sx_cg_sparse_xent_backward(g, l, t, v, a->ints[0], a->alpha)),
            SX_AXIS(1), false);
    DONE();
}

/* ---------------------------------------------------------------- mutation */

sx_status grad_assign(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    (void)g, (void)y, (void)gy, (void)need, (void)gin;
    return sx_error(SX_E_UNSUPPORTED, "sx_ad_grad: cannot differentiate through an assign");
}

/* The inputs of each op that have no gradient, bit i for input i (bit 31 for inputs 31 and
 * up); every other input of every op is differentiable (its rule above gives its gradient). */
#define ALL_INPUTS (~0u)
#define BUT_INPUT0 (~1u)
#define BUT_INPUT1 (~2u)
static const unsigned no_gradient[SX_OP_COUNT] = {
    /* leaves, piecewise constant or index-valued results, random draws */
    [SX_OP_CONST] = ALL_INPUTS,
    [SX_OP_INPUT] = ALL_INPUTS,
    [SX_OP_PARAM] = ALL_INPUTS,
    [SX_OP_SIGN] = ALL_INPUTS,
    [SX_OP_FLOOR] = ALL_INPUTS,
    [SX_OP_CEIL] = ALL_INPUTS,
    [SX_OP_ROUND] = ALL_INPUTS,
    [SX_OP_EQ] = ALL_INPUTS,
    [SX_OP_NE] = ALL_INPUTS,
    [SX_OP_LT] = ALL_INPUTS,
    [SX_OP_LE] = ALL_INPUTS,
    [SX_OP_GT] = ALL_INPUTS,
    [SX_OP_GE] = ALL_INPUTS,
    [SX_OP_ARGMAX] = ALL_INPUTS,
    [SX_OP_ARGMIN] = ALL_INPUTS,
    [SX_OP_ONE_HOT] = ALL_INPUTS,
    [SX_OP_DROPOUT_MASK] = ALL_INPUTS,
    [SX_OP_ASSIGN] = ALL_INPUTS,
    /* the condition of where, the indices of gather and scatter_add */
    [SX_OP_WHERE] = 1u,
    [SX_OP_GATHER] = BUT_INPUT0,
    [SX_OP_SCATTER_ADD] = BUT_INPUT0,
    [SX_OP_EMBEDDING] = BUT_INPUT0, /* the indices of embedding and its adjoint */
    [SX_OP_EMBEDDING_BACKWARD] = BUT_INPUT0,
    [SX_OP_SPARSE_XENT] = 1u << 1, /* the class indices */
    [SX_OP_SPARSE_XENT_BACKWARD] = 1u << 1,
    /* piecewise constant in x, linear in dy */
    [SX_OP_MAXPOOL2D_BACKWARD] = BUT_INPUT1,
    [SX_OP_MAXPOOL2D_RELU_BACKWARD] = BUT_INPUT1,
    /* x itself, merely ordered after its second input */
    [SX_OP_SEQ] = BUT_INPUT0,
    /* made by the optimiser after differentiation: no rules */
    [SX_OP_FUSED] = ALL_INPUTS,
    [SX_OP_FUSED_UPDATE] = ALL_INPUTS,
    [SX_OP_MATMUL_UPDATE] = ALL_INPUTS,
    /* collectives: made after differentiation */
    [SX_OP_ALLREDUCE_START] = ALL_INPUTS,
    [SX_OP_ALLREDUCE_PART] = ALL_INPUTS,
};

bool sx_ad_differentiable(sx_cg_op op, int input)
{
    if ((unsigned)op >= SX_OP_COUNT || input < 0)
        return false;
    return !((no_gradient[op] >> (input < 31 ? input : 31)) & 1u);
}
#undef ALL_INPUTS
#undef BUT_INPUT0
#undef BUT_INPUT1
