/* ops/elemwise.c: the element-wise ops' glue: the constructors generated from the rows of
 * include/strix/sx_map.def and sx_binary.def (their family evaluators dispatch on the op table's
 * kernel column, so a new element-wise op is one row there and no code here), fma and where. */
#ifndef CG_GRAD_RULES /* the ops; their gradient rules, at the end, build apart (ops/rule.h) */
#include "cgraph_impl.h"

#include <string.h>

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)
#define KERNEL (sx_cg_ops[n->op].kernel)

/* ---------------------------------------------------------------- constructors */

/* The element-wise constructors, one per row of sx_map.def and sx_binary.def: a row's ALPHA(p)
 * parameter goes to attr.alpha; ops without one pass no attributes (all zero). */
#define MAP_SET_NONE
#define MAP_SET_ALPHA(p)                                                                           \
    sx_cg_attr at = sx_cg_attr_default();                                                          \
    at.alpha = (p);
#define MAP_ATTR_NONE NULL
#define MAP_ATTR_ALPHA(p) &at
#define SX_MAP_ROW(NAME, name, expr, ref, param, dom, at_end, nograd)                              \
    sx_cg_node *sx_cg_##name(sx_cg_graph *g, sx_cg_node *x SX_CG_MAP_PARAM_##param)                \
    {                                                                                              \
        MAP_SET_##param return cg_op1(g, SX_OP_##NAME, x, MAP_ATTR_##param);                       \
    }
#include "sx_map.def"
#undef SX_MAP_ROW
#undef MAP_SET_NONE
#undef MAP_SET_ALPHA
#undef MAP_ATTR_NONE
#undef MAP_ATTR_ALPHA
#define SX_BINARY_ROW(NAME, name, expr, at, nograd)                                                \
    sx_cg_node *sx_cg_##name(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b)                         \
    {                                                                                              \
        return cg_op2(g, SX_OP_##NAME, a, b, NULL);                                                \
    }
#include "sx_binary.def"
#undef SX_BINARY_ROW

sx_cg_node *sx_cg_add_scalar(sx_cg_graph *g, sx_cg_node *a, double s)
{
    return sx_cg_add(g, a, sx_cg_scalar_like(g, a, s));
}

sx_cg_node *sx_cg_mul_scalar(sx_cg_graph *g, sx_cg_node *a, double s)
{
    return sx_cg_mul(g, a, sx_cg_scalar_like(g, a, s));
}

sx_cg_node *sx_cg_fma(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b, sx_cg_node *c)
{
    return cg_op3(g, SX_OP_FMA, a, b, c, NULL);
}

sx_cg_node *sx_cg_where(sx_cg_graph *g, sx_cg_node *cond, sx_cg_node *a, sx_cg_node *b)
{
    return cg_op3(g, SX_OP_WHERE, cond, a, b, NULL);
}

/* ---------------------------------------------------------------- shape rules */

/* where(c, a, b): broadcast; its kernel broadcasts into scratch the operands that have neither
 * the result's size nor one element (cg_eval_where). */
int cg_where_scratch(const sx_cg_node *n)
{
    int k = 0;
    for (int i = 0; i < 3; i++)
        k += IN_VALUE(i)->size != OUT->size && IN_VALUE(i)->size != 1;
    return k;
}

sx_status cg_shape_where(sx_cg_node *n)
{
    SX_TRY(cg_shape_broadcast(n));
    n->ws_bytes = (size_t)cg_where_scratch(n) * (size_t)sx_shape_size(OUT->rank, OUT->shape) *
                  sx_dtype_size(OUT->dtype);
    return SX_OK;
}

/* ---------------------------------------------------------------- evaluators */

sx_status cg_eval_map(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_map_out((sx_map_op)KERNEL, n->attr.alpha, IN_VALUE(0), OUT);
}

sx_status cg_eval_binary(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_binary_out((sx_binary_op)KERNEL, IN_VALUE(0), IN_VALUE(1), OUT);
}

sx_status cg_eval_fma(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_fma_out(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2), OUT);
}

/* where(c, a, b) = c != 0 ? a : b, selected element by element (never b + c (a - b), which
 * would turn an infinite or NaN operand into NaN where it is not chosen). An operand of the
 * result's size is read in place (its elements are in the result's order; it may be the result's
 * own memory: each element is read before it is written), a one-element operand as a scalar, and
 * any other is broadcast into the workspace first (cg_where_scratch counts those). */
#define WHERE_LOOP(T)                                                                              \
    do {                                                                                           \
        const T *cp = src[0], *ap = src[1], *bp = src[2];                                          \
        T *o = OUT->data;                                                                          \
        if (step[0] && step[1] && step[2]) {                                                       \
            for (int64_t i = 0; i < len; i++)                                                      \
                o[i] = cp[i] != 0 ? ap[i] : bp[i];                                                 \
        } else if (step[0] && step[1]) { /* relu-like: where(mask, g, 0) */                        \
            const T b0 = bp[0];                                                                    \
            for (int64_t i = 0; i < len; i++)                                                      \
                o[i] = cp[i] != 0 ? ap[i] : b0;                                                    \
        } else {                                                                                   \
            for (int64_t i = 0; i < len; i++)                                                      \
                o[i] = cp[i * step[0]] != 0 ? ap[i * step[1]] : bp[i * step[2]];                   \
        }                                                                                          \
    } while (0)

sx_status cg_eval_where(sx_cg_graph *g, sx_cg_node *n)
{
    const int64_t len = OUT->size;
    if (len == 0)
        return SX_OK;
    const size_t bytes = (size_t)len * sx_dtype_size(OUT->dtype);
    void *ws = NULL;
    int n_ws = cg_where_scratch(n);
    if (n_ws > 0)
        SX_TRY(cg_workspace(g, (size_t)n_ws * bytes, &ws));
    const void *src[3];
    int64_t step[3];
    for (int k = 0, used = 0; k < 3; k++) {
        const sx_tensor *x = IN_VALUE(k);
        step[k] = x->size == len ? 1 : 0;
        src[k] = x->data;
        if (x->size != len && x->size != 1) {
            sx_tensor t = sx_tensor_view(OUT->dtype, OUT->rank, OUT->shape,
                                         (char *)ws + (size_t)used++ * bytes);
            SX_TRY(sx_tensor_broadcast_out(x, &t));
            src[k] = t.data;
            step[k] = 1;
        }
    }
    if (OUT->dtype == SX_F32)
        WHERE_LOOP(float);
    else
        WHERE_LOOP(double);
    return SX_OK;
}
#undef WHERE_LOOP

/* ---------------------------------------------------------------- flop model */

/* one operation per element: every unary and binary element-wise row (a transcendental counts
 * as one) */
cg_cost cg_eval_map_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, 1);
}

cg_cost cg_eval_binary_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, 1);
}

/* where selects */
cg_cost cg_eval_where_cost(const sx_cg_node *n)
{
    return cg_cost_none(n);
}

cg_cost cg_eval_fma_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, 2);
}

#else
/* ---------------------------------------------------------------- gradient rules */

/* The unary maps of include/strix/sx_map.def (gin = G f'(x), written with y = f(x) where cheaper),
 * the binary ops of sx_binary.def (full-shape gradients summed back over the broadcast axes), fma
 * and where. y is the node, x_i = y's inputs, G = gy is the adjoint of y. */
#include "rule.h"

#include <math.h>

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
UNARY_RULE(abs, cg_grad_signed_part(g, x, gy))
/* x^2: 2x */
UNARY_RULE(sqr, sx_cg_mul(g, gy, cg_grad_scale(g, x, 2.0)))
/* sqrt x: 1 / (2 y) */
UNARY_RULE(sqrt, sx_cg_div(g, gy, cg_grad_scale(g, y, 2.0)))
/* x^-1/2: -y / (2x) */
UNARY_RULE(rsqrt, sx_cg_mul(g, gy, sx_cg_div(g, cg_grad_scale(g, y, -0.5), x)))
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
UNARY_RULE(relu, cg_grad_positive_part(g, y, gy))
/* leaky_relu: 1 where x > 0, else slope */
UNARY_RULE(leaky_relu, sx_cg_where(g, sx_cg_gt(g, x, sx_cg_scalar_like(g, x, 0.0)), gy,
                                   cg_grad_scale(g, gy, ATTR->alpha)))
/* elu: 1 where x > 0, else alpha e^x = y + alpha */
UNARY_RULE(elu, sx_cg_where(g, sx_cg_gt(g, x, sx_cg_scalar_like(g, x, 0.0)), gy,
                            sx_cg_mul(g, gy, sx_cg_add_scalar(g, y, ATTR->alpha))))
/* softplus: sigmoid x */
UNARY_RULE(softplus, sx_cg_mul(g, gy, sx_cg_sigmoid(g, x)))
/* 1/x: -y^2 */
UNARY_RULE(reciprocal, sx_cg_neg(g, sx_cg_mul(g, gy, sx_cg_sqr(g, y))))
/* erf: 2/sqrt(pi) e^(-x^2) */
UNARY_RULE(erf, sx_cg_mul(g, gy,
                          cg_grad_scale(g, sx_cg_exp(g, sx_cg_neg(g, sx_cg_sqr(g, x))),
                                        1.1283791670955125738961589031215452)))
/* softsign x / (1 + |x|): 1 / (1 + |x|)^2 */
UNARY_RULE(softsign, sx_cg_div(g, gy, sx_cg_sqr(g, sx_cg_add_scalar(g, sx_cg_abs(g, x), 1.0))))
/* ---- PyTorch's smooth activations: gelu, gelu_tanh, silu, mish, hard_swish */
/* gelu x Phi(x): Phi(x) + x phi(x) = (1 + erf(x / sqrt 2)) / 2 + x e^(-x^2 / 2) / sqrt(2 pi) */
UNARY_RULE(
    gelu,
    sx_cg_mul(
        g, gy,
        sx_cg_add(
            g,
            cg_grad_scale(
                g,
                sx_cg_add_scalar(g, sx_cg_erf(g, cg_grad_scale(g, x, 0.70710678118654752440)), 1.0),
                0.5),
            cg_grad_scale(g, sx_cg_mul(g, x, sx_cg_exp(g, cg_grad_scale(g, sx_cg_sqr(g, x), -0.5))),
                          0.39894228040143267794))))
/* gelu_tanh x (1 + t) / 2, t = tanh(k (x + c x^3)): (1 + t) / 2 + x (1 - t^2) k (1 + 3 c x^2) / 2
 */
static sx_cg_node *gelu_tanh_slope(sx_cg_graph *g, sx_cg_node *x)
{
    const double k = 0.79788456080286535588, c = 0.044715;
    sx_cg_node *x2 = sx_cg_sqr(g, x);
    sx_cg_node *t = sx_cg_tanh(
        g, cg_grad_scale(g, sx_cg_add(g, x, cg_grad_scale(g, sx_cg_mul(g, x2, x), c)), k));
    sx_cg_node *one = sx_cg_scalar_like(g, x, 1.0);
    sx_cg_node *dt =
        sx_cg_mul(g, sx_cg_sub(g, one, sx_cg_sqr(g, t)),
                  cg_grad_scale(g, sx_cg_add_scalar(g, cg_grad_scale(g, x2, 3 * c), 1.0), k));
    return cg_grad_scale(g, sx_cg_add(g, sx_cg_add(g, t, one), sx_cg_mul(g, x, dt)), 0.5);
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
    sx_cg_node *mid = sx_cg_mul(g, gy, sx_cg_add_scalar(g, cg_grad_scale(g, x, 1.0 / 3), 0.5));
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
            gin[0] = cg_grad_unbroadcast(g, (ga), a);                                              \
        if (need[1])                                                                               \
            gin[1] = cg_grad_unbroadcast(g, (gb), b);                                              \
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
            cg_grad_select(
                g, sx_cg_ne(g, b, sx_cg_scalar_like(g, b, 0.0)),
                sx_cg_mul(g, gy, sx_cg_mul(g, b, sx_cg_pow(g, a, sx_cg_add_scalar(g, b, -1.0))))),
            pow_exponent_grad(g, gy, a, b, y))
/* min(a, b): G to a where a <= b (ties go to a), else to b (selected) */
BINARY_RULE(min, cg_grad_select(g, sx_cg_le(g, a, b), gy), cg_grad_select(g, sx_cg_gt(g, a, b), gy))
/* max(a, b): G to a where a >= b (ties go to a), else to b (selected) */
BINARY_RULE(max, cg_grad_select(g, sx_cg_ge(g, a, b), gy), cg_grad_select(g, sx_cg_lt(g, a, b), gy))
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
        gin[0] = cg_grad_unbroadcast(g, sx_cg_mul(g, gy, IN(1)), IN(0));
    if (need[1])
        gin[1] = cg_grad_unbroadcast(g, sx_cg_mul(g, gy, IN(0)), IN(1));
    if (need[2])
        gin[2] = cg_grad_unbroadcast(g, gy, IN(2));
    DONE();
}

/* where(c, a, b): G to a where c != 0, to b elsewhere; the condition has no gradient */
sx_status grad_where(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                     sx_cg_node **gin)
{
    sx_cg_node *zero = sx_cg_scalar_like(g, gy, 0.0);
    if (need[1])
        gin[1] = cg_grad_unbroadcast(g, sx_cg_where(g, IN(0), gy, zero), IN(1));
    if (need[2])
        gin[2] = cg_grad_unbroadcast(g, sx_cg_where(g, IN(0), zero, gy), IN(2));
    DONE();
}

#endif
