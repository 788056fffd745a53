/* build.c: the named node constructors. Each fills the attributes of its op and calls the
 * generic sx_cg_op_new, which checks shapes, hashes and links; nothing here knows more. */
#include "cgraph_impl.h"

#include <string.h>

static sx_cg_node *op1(sx_cg_graph *g, sx_cg_op op, sx_cg_node *x, const sx_cg_attr *a)
{
    return sx_cg_op_new(g, op, 1, &x, a);
}

static sx_cg_node *op2(sx_cg_graph *g, sx_cg_op op, sx_cg_node *x, sx_cg_node *y,
                       const sx_cg_attr *a)
{
    sx_cg_node *in[2] = {x, y};
    return sx_cg_op_new(g, op, 2, in, a);
}

static sx_cg_node *op3(sx_cg_graph *g, sx_cg_op op, sx_cg_node *x, sx_cg_node *y, sx_cg_node *z,
                       const sx_cg_attr *a)
{
    sx_cg_node *in[3] = {x, y, z};
    return sx_cg_op_new(g, op, 3, in, a);
}

/* The element-wise constructors, one per row of sx_map.def and sx_binary.def: a row's ALPHA(p)
 * parameter goes to attr.alpha; ops without one pass no attributes (all zero). */
#define MAP_SET_NONE
#define MAP_SET_ALPHA(p)                                                                           \
    sx_cg_attr at = sx_cg_attr_default();                                                          \
    at.alpha = (p);
#define MAP_ATTR_NONE NULL
#define MAP_ATTR_ALPHA(p) &at
#define SX_MAP_ROW(NAME, name, expr, ref, param, dom, at_end)                                      \
    sx_cg_node *sx_cg_##name(sx_cg_graph *g, sx_cg_node *x SX_CG_MAP_PARAM_##param)                \
    {                                                                                              \
        MAP_SET_##param return op1(g, SX_OP_##NAME, x, MAP_ATTR_##param);                          \
    }
#include "sx_map.def"
#undef SX_MAP_ROW
#undef MAP_SET_NONE
#undef MAP_SET_ALPHA
#undef MAP_ATTR_NONE
#undef MAP_ATTR_ALPHA
#define SX_BINARY_ROW(NAME, name, expr, at)                                                        \
    sx_cg_node *sx_cg_##name(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b)                         \
    {                                                                                              \
        return op2(g, SX_OP_##NAME, a, b, NULL);                                                   \
    }
#include "sx_binary.def"
#undef SX_BINARY_ROW

#define UNARY(NAME, name)                                                                          \
    sx_cg_node *sx_cg_##name(sx_cg_graph *g, sx_cg_node *x)                                        \
    {                                                                                              \
        return op1(g, SX_OP_##NAME, x, NULL);                                                      \
    }
UNARY(INV, inv)
UNARY(DET, det)
UNARY(LOGDET, logdet)
UNARY(CHOLESKY, cholesky)
UNARY(QR_Q, qr_q)
UNARY(QR_R, qr_r)
UNARY(SVD_S, svd_s)
UNARY(EIGH_W, eigh_w)
UNARY(EIGH_V, eigh_v)
#undef UNARY

#define BINARY(NAME, name)                                                                         \
    sx_cg_node *sx_cg_##name(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b)                         \
    {                                                                                              \
        return op2(g, SX_OP_##NAME, a, b, NULL);                                                   \
    }
BINARY(DOT, dot)
BINARY(SOLVE, solve)
BINARY(GATHER, gather)
#undef BINARY

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
    return op3(g, SX_OP_FMA, a, b, c, NULL);
}

sx_cg_node *sx_cg_where(sx_cg_graph *g, sx_cg_node *cond, sx_cg_node *a, sx_cg_node *b)
{
    return op3(g, SX_OP_WHERE, cond, a, b, NULL);
}

#define FOLD(NAME, name)                                                                           \
    sx_cg_node *sx_cg_##name(sx_cg_graph *g, sx_cg_node *x, unsigned axes, bool keepdims)          \
    {                                                                                              \
        sx_cg_attr a = sx_cg_attr_default();                                                       \
        a.axes = axes;                                                                             \
        a.keepdims = keepdims;                                                                     \
        return op1(g, SX_OP_##NAME, x, &a);                                                        \
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

/* Copy up to the input's rank of a caller array into attr.ints (the input fixes the count). */
static void copy_ints(int64_t *dst, const int64_t *src, const sx_cg_node *x)
{
    if (x != NULL && src != NULL)
        memcpy(dst, src, (size_t)x->value.rank * sizeof *dst);
}

static bool arg_ok(sx_cg_graph *g, const void *p, const char *who)
{
    if (p == NULL && g != NULL) {
        cg_fail(g, sx_error(SX_E_ARG, "%s: NULL argument", who));
        return false;
    }
    return true;
}

sx_cg_node *sx_cg_repeat(sx_cg_graph *g, sx_cg_node *x, const int64_t *reps)
{
    if (!arg_ok(g, reps, "sx_cg_repeat"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    copy_ints(a.ints, reps, x);
    return op1(g, SX_OP_REPEAT, x, &a);
}

sx_cg_node *sx_cg_tile(sx_cg_graph *g, sx_cg_node *x, const int64_t *reps)
{
    if (!arg_ok(g, reps, "sx_cg_tile"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    copy_ints(a.ints, reps, x);
    return op1(g, SX_OP_TILE, x, &a);
}

static bool shape_attr(sx_cg_graph *g, sx_cg_attr *a, int rank, const int64_t *shape,
                       const char *who)
{
    if (rank < 0 || rank > SX_MAX_RANK || (rank > 0 && shape == NULL)) {
        if (g != NULL)
            cg_fail(g, sx_error(SX_E_RANK, "%s: bad target rank %d", who, rank));
        return false;
    }
    a->rank = rank;
    if (rank > 0)
        memcpy(a->shape, shape, (size_t)rank * sizeof *shape);
    return true;
}

sx_cg_node *sx_cg_broadcast(sx_cg_graph *g, sx_cg_node *x, int rank, const int64_t *shape)
{
    sx_cg_attr a = sx_cg_attr_default();
    if (!shape_attr(g, &a, rank, shape, "sx_cg_broadcast"))
        return NULL;
    return op1(g, SX_OP_BROADCAST, x, &a);
}

sx_cg_node *sx_cg_reshape(sx_cg_graph *g, sx_cg_node *x, int rank, const int64_t *shape)
{
    sx_cg_attr a = sx_cg_attr_default();
    if (!shape_attr(g, &a, rank, shape, "sx_cg_reshape"))
        return NULL;
    return op1(g, SX_OP_RESHAPE, x, &a);
}

sx_cg_node *sx_cg_slice(sx_cg_graph *g, sx_cg_node *x, const sx_slice *s)
{
    if (!arg_ok(g, s, "sx_cg_slice"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    if (x != NULL)
        memcpy(a.slice, s, (size_t)x->value.rank * sizeof *s);
    return op1(g, SX_OP_SLICE, x, &a);
}

sx_cg_node *sx_cg_unslice(sx_cg_graph *g, sx_cg_node *x, const sx_slice *s, int rank,
                          const int64_t *shape)
{
    if (!arg_ok(g, s, "sx_cg_unslice"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    if (!shape_attr(g, &a, rank, shape, "sx_cg_unslice"))
        return NULL;
    memcpy(a.slice, s, (size_t)rank * sizeof *s);
    return op1(g, SX_OP_UNSLICE, x, &a);
}

/* A negative axis counted from the end, resolved here so that structural hashing sees one form
 * of the attributes (the shape rule checks the range). */
static int norm_axis(const sx_cg_node *x, int axis)
{
    return x != NULL && axis < 0 && axis >= -x->value.rank ? axis + x->value.rank : axis;
}

sx_cg_node *sx_cg_concat(sx_cg_graph *g, int n, sx_cg_node *const *xs, int axis)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.axis = norm_axis(n > 0 && xs != NULL ? xs[0] : NULL, axis);
    return sx_cg_op_new(g, SX_OP_CONCAT, n, xs, &a);
}

sx_cg_node *sx_cg_permute(sx_cg_graph *g, sx_cg_node *x, const int *perm)
{
    if (!arg_ok(g, perm, "sx_cg_permute"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    for (int i = 0; x != NULL && i < x->value.rank; i++)
        a.ints[i] = perm[i];
    return op1(g, SX_OP_PERMUTE, x, &a);
}

sx_cg_node *sx_cg_transpose(sx_cg_graph *g, sx_cg_node *x)
{
    if (x == NULL)
        return NULL;
    int r = x->value.rank, perm[SX_MAX_RANK];
    if (r < 2) {
        cg_fail(g, sx_error(SX_E_RANK, "sx_cg_transpose: rank %d (want >= 2)", r));
        return NULL;
    }
    for (int i = 0; i < r; i++)
        perm[i] = i;
    perm[r - 2] = r - 1;
    perm[r - 1] = r - 2;
    return sx_cg_permute(g, x, perm);
}

sx_cg_node *sx_cg_pad(sx_cg_graph *g, sx_cg_node *x, const int64_t *before, const int64_t *after,
                      double value)
{
    if (!arg_ok(g, before, "sx_cg_pad") || !arg_ok(g, after, "sx_cg_pad"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    copy_ints(a.ints, before, x);
    copy_ints(a.ints2, after, x);
    a.alpha = value;
    return op1(g, SX_OP_PAD, x, &a);
}

sx_cg_node *sx_cg_one_hot(sx_cg_graph *g, sx_cg_node *idx, int64_t depth)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.ints[0] = depth;
    return op1(g, SX_OP_ONE_HOT, idx, &a);
}

sx_cg_node *sx_cg_scatter_add(sx_cg_graph *g, sx_cg_node *grad, sx_cg_node *idx, int64_t x_rows)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.ints[0] = x_rows;
    return op2(g, SX_OP_SCATTER_ADD, grad, idx, &a);
}

sx_cg_node *sx_cg_gemm(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b, bool trans_a, bool trans_b,
                       double alpha, sx_cg_node *c, double beta)
{
    sx_cg_attr at = sx_cg_attr_default();
    at.trans_a = trans_a;
    at.trans_b = trans_b;
    at.alpha = alpha;
    if (c == NULL)
        return op2(g, SX_OP_MATMUL, a, b, &at);
    at.beta = beta;
    return op3(g, SX_OP_MATMUL, a, b, c, &at);
}

sx_cg_node *sx_cg_matmul(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b, bool trans_a, bool trans_b)
{
    return sx_cg_gemm(g, a, b, trans_a, trans_b, 1.0, NULL, 0.0);
}

static bool params_ok(sx_cg_graph *g, const void *p, const char *who)
{
    return arg_ok(g, p, who);
}

sx_cg_node *sx_cg_conv2d(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *k, const sx_conv2d_params *p)
{
    if (!params_ok(g, p, "sx_cg_conv2d"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.conv = *p;
    return op2(g, SX_OP_CONV2D, x, k, &a);
}

sx_cg_node *sx_cg_conv2d_backward_input(sx_cg_graph *g, sx_cg_node *k, sx_cg_node *dy,
                                        const sx_conv2d_params *p, const int64_t x_shape[4])
{
    if (!params_ok(g, p, "sx_cg_conv2d_backward_input"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.conv = *p;
    if (!shape_attr(g, &a, 4, x_shape, "sx_cg_conv2d_backward_input"))
        return NULL;
    return op2(g, SX_OP_CONV2D_BACKWARD_INPUT, k, dy, &a);
}

sx_cg_node *sx_cg_conv2d_backward_kernel(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *dy,
                                         const sx_conv2d_params *p, const int64_t k_shape[4])
{
    if (!params_ok(g, p, "sx_cg_conv2d_backward_kernel"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.conv = *p;
    if (!shape_attr(g, &a, 4, k_shape, "sx_cg_conv2d_backward_kernel"))
        return NULL;
    return op2(g, SX_OP_CONV2D_BACKWARD_KERNEL, x, dy, &a);
}

sx_cg_node *sx_cg_maxpool2d(sx_cg_graph *g, sx_cg_node *x, const sx_pool2d_params *p)
{
    if (!params_ok(g, p, "sx_cg_maxpool2d"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.pool = *p;
    return op1(g, SX_OP_MAXPOOL2D, x, &a);
}

/* The two max-pool backward ops: (x, dy) with the pooling's parameters. */
static sx_cg_node *maxpool_backward(sx_cg_graph *g, sx_cg_op op, sx_cg_node *x, sx_cg_node *dy,
                                    const sx_pool2d_params *p, const char *who)
{
    if (!params_ok(g, p, who))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.pool = *p;
    return op2(g, op, x, dy, &a);
}

sx_cg_node *sx_cg_maxpool2d_backward(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *dy,
                                     const sx_pool2d_params *p)
{
    return maxpool_backward(g, SX_OP_MAXPOOL2D_BACKWARD, x, dy, p, "sx_cg_maxpool2d_backward");
}

sx_cg_node *sx_cg_maxpool2d_relu_backward(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *dy,
                                          const sx_pool2d_params *p)
{
    return maxpool_backward(g, SX_OP_MAXPOOL2D_RELU_BACKWARD, x, dy, p,
                            "sx_cg_maxpool2d_relu_backward");
}

sx_cg_node *sx_cg_avgpool2d(sx_cg_graph *g, sx_cg_node *x, const sx_pool2d_params *p)
{
    if (!params_ok(g, p, "sx_cg_avgpool2d"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.pool = *p;
    return op1(g, SX_OP_AVGPOOL2D, x, &a);
}

sx_cg_node *sx_cg_avgpool2d_backward(sx_cg_graph *g, sx_cg_node *dy, const sx_pool2d_params *p,
                                     const int64_t x_shape[4])
{
    if (!params_ok(g, p, "sx_cg_avgpool2d_backward"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.pool = *p;
    if (!shape_attr(g, &a, 4, x_shape, "sx_cg_avgpool2d_backward"))
        return NULL;
    return op1(g, SX_OP_AVGPOOL2D_BACKWARD, dy, &a);
}

static sx_cg_node *axis_op(sx_cg_graph *g, sx_cg_op op, int n_in, sx_cg_node *x, sx_cg_node *y,
                           int axis)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.axis = norm_axis(x, axis);
    return n_in == 1 ? op1(g, op, x, &a) : op2(g, op, x, y, &a);
}

sx_cg_node *sx_cg_softmax(sx_cg_graph *g, sx_cg_node *x, int axis)
{
    return axis_op(g, SX_OP_SOFTMAX, 1, x, NULL, axis);
}

sx_cg_node *sx_cg_log_softmax(sx_cg_graph *g, sx_cg_node *x, int axis)
{
    return axis_op(g, SX_OP_LOG_SOFTMAX, 1, x, NULL, axis);
}

sx_cg_node *sx_cg_softmax_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *dy, int axis)
{
    return axis_op(g, SX_OP_SOFTMAX_BACKWARD, 2, y, dy, axis);
}

sx_cg_node *sx_cg_log_softmax_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *dy, int axis)
{
    return axis_op(g, SX_OP_LOG_SOFTMAX_BACKWARD, 2, y, dy, axis);
}

sx_cg_node *sx_cg_softmax_xent(sx_cg_graph *g, sx_cg_node *logits, sx_cg_node *target)
{
    return op2(g, SX_OP_SOFTMAX_XENT, logits, target, NULL);
}

sx_cg_node *sx_cg_softmax_xent_backward(sx_cg_graph *g, sx_cg_node *logits, sx_cg_node *target,
                                        sx_cg_node *dout)
{
    return op3(g, SX_OP_SOFTMAX_XENT_BACKWARD, logits, target, dout, NULL);
}

sx_cg_node *sx_cg_dropout_mask(sx_cg_graph *g, int rng_id, double p, int rank, const int64_t *shape)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.alpha = p;
    a.rng_id = rng_id;
    if (!shape_attr(g, &a, rank, shape, "sx_cg_dropout_mask"))
        return NULL;
    return sx_cg_op_new(g, SX_OP_DROPOUT_MASK, 0, NULL, &a);
}

sx_cg_node *sx_cg_assign(sx_cg_graph *g, sx_cg_node *param, sx_cg_node *value)
{
    return op2(g, SX_OP_ASSIGN, param, value, NULL);
}
