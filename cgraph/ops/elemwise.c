/* ops/elemwise.c: the element-wise ops' glue: the constructors generated from the rows of
 * include/strix/sx_map.def and sx_binary.def (their family evaluators dispatch on the op table's
 * kernel column, so a new element-wise op is one row there and no code here), fma and where. */
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
