/* ops_math.c: ONNX element-wise and small math ops written as compositions of graph ops (the
 * inverse and hyperbolic trigonometric functions through exp, log, sqrt and atan2; Mod, Shrink,
 * Celu, IsInf, IsNaN), masks and matrices known at import time (Trilu, CumSum, EyeLike, the
 * window functions) and the selections Hardmax and TopK (argmax and one_hot). */
#include "onnx_impl.h"

#include <math.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* The input's node in its own layout. */
static sx_status in_any(ox_ctx *c, int i, ox_val **v, sx_cg_node **n)
{
    SX_TRY(ox_in_req(c, i, v));
    return ox_node(c, *v, (*v)->lay, n);
}

typedef enum { T_SINH, T_COSH, T_ASINH, T_ACOSH, T_ATANH, T_ASIN, T_ACOS, T_ATAN } trig;

/* sinh x = (e^x - e^-x) / 2, cosh x = (e^x + e^-x) / 2, asinh x = sign(x) log(|x| +
 * sqrt(x^2 + 1)), acosh x = log(x + sqrt(x^2 - 1)), atanh x = log((1 + x) / (1 - x)) / 2,
 * asin x = atan2(x, sqrt(1 - x^2)), acos x = atan2(sqrt(1 - x^2), x), atan x = atan2(x, 1). */
static sx_cg_node *trig_of(sx_cg_graph *g, sx_cg_node *x, trig t)
{
    sx_cg_node *one = sx_cg_scalar_like(g, x, 1);
    switch (t) {
    case T_SINH:
    case T_COSH: {
        sx_cg_node *a = sx_cg_exp(g, x), *b = sx_cg_exp(g, sx_cg_neg(g, x));
        return sx_cg_mul_scalar(g, t == T_SINH ? sx_cg_sub(g, a, b) : sx_cg_add(g, a, b), 0.5);
    }
    case T_ASINH: {
        sx_cg_node *ax = sx_cg_abs(g, x);
        sx_cg_node *r = sx_cg_sqrt(g, sx_cg_add(g, sx_cg_sqr(g, x), one));
        return sx_cg_mul(g, sx_cg_sign(g, x), sx_cg_log(g, sx_cg_add(g, ax, r)));
    }
    case T_ACOSH:
        return sx_cg_log(g, sx_cg_add(g, x, sx_cg_sqrt(g, sx_cg_sub(g, sx_cg_sqr(g, x), one))));
    case T_ATANH:
        return sx_cg_mul_scalar(
            g, sx_cg_log(g, sx_cg_div(g, sx_cg_add(g, one, x), sx_cg_sub(g, one, x))), 0.5);
    case T_ASIN:
    case T_ACOS: {
        sx_cg_node *r = sx_cg_sqrt(g, sx_cg_sub(g, one, sx_cg_sqr(g, x)));
        return t == T_ASIN ? sx_cg_atan2(g, x, r) : sx_cg_atan2(g, r, x);
    }
    case T_ATAN:
        return sx_cg_atan2(g, x, one);
    }
    return NULL;
}

static sx_status trig_op(ox_ctx *c, trig t)
{
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    return ox_out(c, 0, trig_of(c->g, x, t), v->lay);
}

#define TRIG(Name, T)                                                                              \
    sx_status ox_op_##Name(ox_ctx *c)                                                              \
    {                                                                                              \
        return trig_op(c, T);                                                                      \
    }
TRIG(Sinh, T_SINH)
TRIG(Cosh, T_COSH)
TRIG(Asinh, T_ASINH)
TRIG(Acosh, T_ACOSH)
TRIG(Atanh, T_ATANH)
TRIG(Asin, T_ASIN)
TRIG(Acos, T_ACOS)
TRIG(Atan, T_ATAN)
#undef TRIG

/* trunc(y) = y < 0 ? ceil(y) : floor(y) */
static sx_cg_node *trunc_of(sx_cg_graph *g, sx_cg_node *y)
{
    return sx_cg_where(g, sx_cg_lt(g, y, sx_cg_scalar_like(g, y, 0)), sx_cg_ceil(g, y),
                       sx_cg_floor(g, y));
}

/* Mod on graph values (known ones fold): fmod = 1: a - b trunc(a / b), the sign of a; fmod = 0:
 * a - b floor(a / b), the sign of b. */
sx_status ox_op_Mod(ox_ctx *c)
{
    ox_val *av, *bv;
    sx_cg_node *a, *b;
    int64_t fm;
    SX_TRY(ox_attr_int(c, "fmod", 0, &fm));
    SX_TRY(ox_in_req(c, 0, &av));
    SX_TRY(ox_in_req(c, 1, &bv));
    SX_TRY(ox_node(c, av, OX_ONNX, &a));
    SX_TRY(ox_node(c, bv, OX_ONNX, &b));
    sx_cg_graph *g = c->g;
    sx_cg_node *q = sx_cg_div(g, a, b);
    q = fm ? trunc_of(g, q) : sx_cg_floor(g, q);
    return ox_out(c, 0, sx_cg_sub(g, a, sx_cg_mul(g, b, q)), OX_ONNX);
}

/* shrink(x) = x < -lambd ? x + bias : x > lambd ? x - bias : 0 */
sx_status ox_op_Shrink(ox_ctx *c)
{
    double l, b;
    SX_TRY(ox_attr_float(c, "lambd", 0.5, &l));
    SX_TRY(ox_attr_float(c, "bias", 0.0, &b));
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    sx_cg_graph *g = c->g;
    sx_cg_node *zero = sx_cg_scalar_like(g, x, 0);
    sx_cg_node *y = sx_cg_where(g, sx_cg_gt(g, x, sx_cg_scalar_like(g, x, l)),
                                sx_cg_add_scalar(g, x, -b), zero);
    y = sx_cg_where(g, sx_cg_lt(g, x, sx_cg_scalar_like(g, x, -l)), sx_cg_add_scalar(g, x, b), y);
    return ox_out(c, 0, y, v->lay);
}

/* celu(x) = max(0, x) + min(0, alpha (exp(x / alpha) - 1)) */
sx_status ox_op_Celu(ox_ctx *c)
{
    double a;
    SX_TRY(ox_attr_float(c, "alpha", 1.0, &a));
    if (a == 0)
        return ox_fail(c, SX_E_FORMAT, "attribute alpha 0");
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    sx_cg_graph *g = c->g;
    sx_cg_node *zero = sx_cg_scalar_like(g, x, 0);
    sx_cg_node *e = sx_cg_mul_scalar(g, sx_cg_expm1(g, sx_cg_mul_scalar(g, x, 1 / a)), a);
    return ox_out(c, 0, sx_cg_add(g, sx_cg_relu(g, x), sx_cg_min(g, zero, e)), v->lay);
}

/* IsInf: 1 where x is +inf (detect_positive) or -inf (detect_negative). */
sx_status ox_op_IsInf(ox_ctx *c)
{
    int64_t neg, pos;
    SX_TRY(ox_attr_int(c, "detect_negative", 1, &neg));
    SX_TRY(ox_attr_int(c, "detect_positive", 1, &pos));
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    sx_cg_graph *g = c->g;
    sx_cg_node *y = sx_cg_scalar_like(g, x, 0);
    if (pos)
        y = sx_cg_max(g, y, sx_cg_eq(g, x, sx_cg_scalar_like(g, x, INFINITY)));
    if (neg)
        y = sx_cg_max(g, y, sx_cg_eq(g, x, sx_cg_scalar_like(g, x, -INFINITY)));
    if (!pos && !neg)
        y = sx_cg_mul_scalar(g, x, 0);
    return ox_out(c, 0, y, v->lay);
}

/* IsNaN: x != x. */
sx_status ox_op_IsNaN(ox_ctx *c)
{
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    return ox_out(c, 0, sx_cg_ne(c->g, x, x), v->lay);
}

/* An optional known integer scalar input i (def when absent). */
static sx_status opt_int(ox_ctx *c, int i, int64_t def, int64_t *out)
{
    *out = def;
    if (ox_in(c, i) == NULL)
        return SX_OK;
    const int64_t *v;
    int64_t n;
    SX_TRY(ox_in_ints(c, i, &v, &n));
    if (n != 1)
        return ox_fail(c, SX_E_FORMAT, "input %d of %lld values (want one)", i, (long long)n);
    *out = v[0];
    return SX_OK;
}

/* Trilu(x, k): x where column - row >= k (upper) or <= k (lower) over the last two axes, else
 * 0: a where with a constant mask. */
sx_status ox_op_Trilu(ox_ctx *c)
{
    int64_t upper, k;
    SX_TRY(ox_attr_int(c, "upper", 1, &upper));
    SX_TRY(opt_int(c, 1, 0, &k));
    ox_val *v;
    sx_cg_node *x, *m;
    SX_TRY(ox_in_req(c, 0, &v));
    if (v->rank < 2)
        return ox_fail(c, SX_E_SHAPE, "input of rank %d (want >= 2)", v->rank);
    SX_TRY(ox_node(c, v, OX_ONNX, &x));
    int64_t r = v->shape[v->rank - 2], cl = v->shape[v->rank - 1], s[2] = {r, cl};
    double *f = sx_alloc((size_t)(r * cl > 0 ? r * cl : 1) * sizeof *f);
    if (f == NULL)
        return SX_E_NOMEM;
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < cl; j++)
            f[i * cl + j] = upper ? j - i >= k : j - i <= k;
    sx_status st = ox_const(c, 2, s, f, &m);
    sx_free(f);
    SX_TRY(st);
    return ox_out(c, 0, sx_cg_where(c->g, m, x, sx_cg_scalar_like(c->g, x, 0)), OX_ONNX);
}

/* x with axis moved last and flattened to (rows, len): *perm gets the permutation used. */
static sx_cg_node *axis_last(ox_ctx *c, sx_cg_node *x, const ox_val *v, int axis, int *perm)
{
    for (int i = 0, k = 0; i < v->rank; i++)
        if (i != axis)
            perm[k++] = i;
    perm[v->rank - 1] = axis;
    sx_cg_node *p = sx_cg_permute(c->g, x, perm);
    int64_t len = v->shape[axis], s[2] = {len ? sx_shape_size(v->rank, v->shape) / len : 0, len};
    return sx_cg_reshape(c->g, p, 2, s);
}

/* y (rows, len) back to v's shape with its last axis of size len at axis. */
static sx_cg_node *axis_back(ox_ctx *c, sx_cg_node *y, const ox_val *v, const int *perm,
                             int64_t len)
{
    int64_t s[SX_MAX_RANK];
    int back[SX_MAX_RANK];
    for (int i = 0; i < v->rank; i++)
        s[i] = i == v->rank - 1 ? len : v->shape[perm[i]];
    for (int i = 0; i < v->rank; i++)
        back[perm[i]] = i;
    return sx_cg_permute(c->g, sx_cg_reshape(c->g, y, v->rank, s), back);
}

/* CumSum(x, axis, exclusive, reverse): a product with a constant triangular (len, len) matrix
 * along the axis. */
sx_status ox_op_CumSum(ox_ctx *c)
{
    int64_t ex, rev, a;
    SX_TRY(ox_attr_int(c, "exclusive", 0, &ex));
    SX_TRY(ox_attr_int(c, "reverse", 0, &rev));
    SX_TRY(opt_int(c, 1, 0, &a));
    ox_val *v;
    sx_cg_node *x, *m;
    SX_TRY(ox_in_req(c, 0, &v));
    int axis, perm[SX_MAX_RANK];
    SX_TRY(ox_axis(c, a, v->rank, "input axis", &axis));
    SX_TRY(ox_node(c, v, OX_ONNX, &x));
    int64_t n = v->shape[axis], s[2] = {n, n};
    double *f = sx_alloc((size_t)(n * n > 0 ? n * n : 1) * sizeof *f);
    if (f == NULL)
        return SX_E_NOMEM;
    for (int64_t j = 0; j < n; j++) /* y[i] = sum_j x[j] m[j][i] */
        for (int64_t i = 0; i < n; i++)
            f[j * n + i] = (rev ? j > i : j < i) || (j == i && !ex);
    sx_status st = ox_const(c, 2, s, f, &m);
    sx_free(f);
    SX_TRY(st);
    sx_cg_node *y = sx_cg_matmul(c->g, axis_last(c, x, v, axis, perm), m, false, false);
    return ox_out(c, 0, axis_back(c, y, v, perm, n), OX_ONNX);
}

/* y (rows, len) = one_hot(argmax over the last axis) */
static sx_cg_node *hardmax_rows(sx_cg_graph *g, sx_cg_node *x)
{
    int64_t len = sx_cg_node_shape(x)[1];
    return sx_cg_one_hot(g, sx_cg_argmax(g, x, SX_AXIS(1), false), len);
}

/* Hardmax: 1 at the first maximum along axis (opset 13), or of the input flattened to 2-d at
 * axis (before). */
sx_status ox_op_Hardmax(ox_ctx *c)
{
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(ox_in_req(c, 0, &v));
    int64_t a;
    int axis, perm[SX_MAX_RANK];
    SX_TRY(ox_attr_int(c, "axis", c->opset >= 13 ? -1 : 1, &a));
    SX_TRY(ox_axis(c, a, v->rank, "attribute axis", &axis));
    SX_TRY(ox_node(c, v, OX_ONNX, &x));
    if (c->opset >= 13) {
        sx_cg_node *y = hardmax_rows(c->g, axis_last(c, x, v, axis, perm));
        return ox_out(c, 0, axis_back(c, y, v, perm, v->shape[axis]), OX_ONNX);
    }
    int64_t s[2] = {sx_shape_size(axis, v->shape), sx_shape_size(v->rank - axis, v->shape + axis)};
    sx_cg_node *y = hardmax_rows(c->g, sx_cg_reshape(c->g, x, 2, s));
    return ox_out(c, 0, sx_cg_reshape(c->g, y, v->rank, v->shape), OX_ONNX);
}

/* TopK(x, k, axis, largest, sorted): k rounds of max and argmax along the axis, each masking
 * its pick out (ties go to the lower index, as ONNX orders them). */
sx_status ox_op_TopK(ox_ctx *c)
{
    int64_t a, largest, k;
    SX_TRY(ox_attr_int(c, "axis", -1, &a));
    SX_TRY(ox_attr_int(c, "largest", 1, &largest));
    SX_TRY(opt_int(c, 1, 1, &k));
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(ox_in_req(c, 0, &v));
    int axis, perm[SX_MAX_RANK];
    SX_TRY(ox_axis(c, a, v->rank, "attribute axis", &axis));
    if (k < 0 || k > v->shape[axis] || k > 64)
        return ox_fail(c, SX_E_UNSUPPORTED, "k = %lld (at most 64 and the axis' size)",
                       (long long)k);
    SX_TRY(ox_node(c, v, OX_ONNX, &x));
    sx_cg_graph *g = c->g;
    x = axis_last(c, x, v, axis, perm);
    if (!largest)
        x = sx_cg_neg(g, x);
    int64_t rows = sx_cg_node_shape(x)[0], len = v->shape[axis], col[2] = {rows, 1};
    sx_cg_node *vals[64], *idx[64], *low = sx_cg_scalar_like(g, x, -INFINITY);
    for (int64_t i = 0; i < k; i++) {
        sx_cg_node *am = sx_cg_argmax(g, x, SX_AXIS(1), false);
        vals[i] = sx_cg_reshape(g, sx_cg_reduce_max(g, x, SX_AXIS(1), false), 2, col);
        idx[i] = sx_cg_reshape(g, am, 2, col);
        x = sx_cg_where(g, sx_cg_one_hot(g, am, len), low, x);
    }
    sx_cg_node *y = sx_cg_concat(g, (int)k, vals, 1), *ix = sx_cg_concat(g, (int)k, idx, 1);
    if (!largest)
        y = sx_cg_neg(g, y);
    c->no_batch = axis == 0;
    SX_TRY(ox_out(c, 0, axis_back(c, y, v, perm, k), OX_ONNX));
    return ox_out(c, 1, axis_back(c, ix, v, perm, k), OX_ONNX);
}

/* EyeLike(x, k): ones on the k-th diagonal of x's (rows, cols) shape, a constant. */
sx_status ox_op_EyeLike(ox_ctx *c)
{
    int64_t k;
    SX_TRY(ox_attr_int(c, "k", 0, &k));
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    if (v->rank != 2)
        return ox_fail(c, SX_E_SHAPE, "input of rank %d (want 2)", v->rank);
    int64_t n = sx_shape_size(2, v->shape);
    double *f = sx_calloc((size_t)(n ? n : 1), sizeof *f);
    if (f == NULL)
        return SX_E_NOMEM;
    for (int64_t i = 0; i < v->shape[0]; i++)
        if (i + k >= 0 && i + k < v->shape[1])
            f[i * v->shape[1] + i + k] = 1;
    sx_status s = ox_out_const(c, 0, 2, v->shape, f);
    sx_free(f);
    return s;
}

/* The window functions of size N (a known input): w[n] = a0 - a1 cos(2 pi n / d) + a2 cos(4 pi
 * n / d) with d = N (periodic) or N - 1 (symmetric). */
static sx_status window_fn(ox_ctx *c, double a0, double a1, double a2)
{
    int64_t n, per;
    SX_TRY(opt_int(c, 0, -1, &n));
    SX_TRY(ox_attr_int(c, "periodic", 1, &per));
    if (n < 0 || n > (1 << 24))
        return ox_fail(c, SX_E_FORMAT, "size %lld", (long long)n);
    double *f = sx_alloc((size_t)(n ? n : 1) * sizeof *f), d = per ? (double)n : (double)n - 1;
    if (f == NULL)
        return SX_E_NOMEM;
    for (int64_t i = 0; i < n; i++)
        f[i] = a0 - a1 * cos(2 * M_PI * (double)i / d) + a2 * cos(4 * M_PI * (double)i / d);
    sx_status s = ox_out_const(c, 0, 1, &n, f);
    sx_free(f);
    return s;
}

sx_status ox_op_HannWindow(ox_ctx *c)
{
    return window_fn(c, 0.5, 0.5, 0);
}

sx_status ox_op_HammingWindow(ox_ctx *c)
{
    return window_fn(c, 25.0 / 46, 21.0 / 46, 0);
}

sx_status ox_op_BlackmanWindow(ox_ctx *c)
{
    return window_fn(c, 0.42, 0.5, 0.08);
}

/* Det over the last two axes (a batch of square matrices taken one by one). */
sx_status ox_op_Det(ox_ctx *c)
{
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(ox_in_req(c, 0, &v));
    if (v->rank < 2 || v->shape[v->rank - 1] != v->shape[v->rank - 2])
        return ox_fail(c, SX_E_SHAPE, "input of rank %d is not square matrices", v->rank);
    SX_TRY(ox_node(c, v, OX_ONNX, &x));
    sx_cg_graph *g = c->g;
    if (v->rank == 2)
        return ox_out(c, 0, sx_cg_det(g, x), OX_ONNX);
    int64_t m = v->shape[v->rank - 1], b = sx_shape_size(v->rank - 2, v->shape);
    if (b > 256)
        return ox_fail(c, SX_E_UNSUPPORTED, "a batch of %lld matrices (at most 256)", (long long)b);
    int64_t s3[3] = {b, m, m}, one = 1;
    x = sx_cg_reshape(g, x, 3, s3);
    sx_cg_node *d[256];
    for (int64_t i = 0; i < b; i++) {
        sx_slice sl[3] = {{i, i + 1, 1}, SX_SLICE_ALL, SX_SLICE_ALL};
        sx_cg_node *a = sx_cg_reshape(g, sx_cg_slice(g, x, sl), 2, s3 + 1);
        d[i] = sx_cg_reshape(g, sx_cg_det(g, a), 1, &one);
    }
    sx_cg_node *y = sx_cg_concat(g, (int)b, d, 0);
    c->no_batch = true;
    return ox_out(c, 0, sx_cg_reshape(g, y, v->rank - 2, v->shape), OX_ONNX);
}

/* BitShift on known integers: x << y or x >> y in x's unsigned type (the graph holds no
 * integers to shift). */
sx_status ox_op_BitShift(ox_ctx *c)
{
    ox_val *a, *b;
    SX_TRY(ox_in_req(c, 0, &a));
    SX_TRY(ox_in_req(c, 1, &b));
    char dir[8];
    SX_TRY(ox_attr_str(c, "direction", "", dir, sizeof dir));
    bool left = strcmp(dir, "LEFT") == 0;
    if (!left && strcmp(dir, "RIGHT") != 0)
        return ox_fail(c, SX_E_FORMAT, "attribute direction '%s'", dir);
    if (a->ints == NULL || b->ints == NULL)
        return ox_fail(c, SX_E_UNSUPPORTED,
                       "an input is computed by the graph (strix shifts only integers known at "
                       "import time)");
    int64_t n = sx_shape_size(a->rank, a->shape), nb = sx_shape_size(b->rank, b->shape);
    if (nb != n && nb != 1)
        return ox_fail(c, SX_E_UNSUPPORTED, "shift amounts of %lld elements for %lld",
                       (long long)nb, (long long)n);
    int64_t *r = sx_alloc((size_t)(n ? n : 1) * sizeof *r);
    if (r == NULL)
        return SX_E_NOMEM;
    for (int64_t i = 0; i < n; i++) {
        uint64_t x = (uint64_t)a->ints[i], s = (uint64_t)b->ints[nb == 1 ? 0 : i];
        r[i] = (int64_t)(s >= 64 ? 0 : left ? x << s : x >> s);
    }
    sx_status s = ox_out_ints_typed(c, 0, a->rank, a->shape, r, a->itype);
    sx_free(r);
    return s;
}

/* LRN over the channels (axis 1): y = x / (bias + alpha / size * sum of x^2 over the
 * window [c - (size - 1) / 2, c + size / 2])^beta, the sum a sum of shifted slices. */
sx_status ox_op_LRN(ox_ctx *c)
{
    double al, be, bias;
    int64_t size;
    SX_TRY(ox_attr_float(c, "alpha", 1e-4, &al));
    SX_TRY(ox_attr_float(c, "beta", 0.75, &be));
    SX_TRY(ox_attr_float(c, "bias", 1.0, &bias));
    SX_TRY(ox_attr_int(c, "size", 0, &size));
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(ox_in_req(c, 0, &v));
    if (size < 1 || size > 64 || v->rank < 3)
        return ox_fail(c, SX_E_FORMAT, "attribute size %lld, input of rank %d", (long long)size,
                       v->rank);
    SX_TRY(ox_node(c, v, OX_ONNX, &x));
    sx_cg_graph *g = c->g;
    int64_t lo[SX_MAX_RANK] = {0}, hi[SX_MAX_RANK] = {0}, ch = v->shape[1];
    lo[1] = (size - 1) / 2;
    hi[1] = size - 1 - lo[1];
    sx_cg_node *sq = sx_cg_pad(g, sx_cg_sqr(g, x), lo, hi, 0), *sum = NULL;
    for (int64_t i = 0; i < size; i++) {
        sx_slice sl[SX_MAX_RANK];
        for (int k = 0; k < v->rank; k++)
            sl[k] = k == 1 ? (sx_slice){i, i + ch, 1} : SX_SLICE_ALL;
        sx_cg_node *p = sx_cg_slice(g, sq, sl);
        sum = sum ? sx_cg_add(g, sum, p) : p;
    }
    sx_cg_node *d = sx_cg_add_scalar(g, sx_cg_mul_scalar(g, sum, al / (double)size), bias);
    d = sx_cg_pow(g, d, sx_cg_scalar_like(g, d, be));
    return ox_out(c, 0, sx_cg_div(g, x, d), OX_ONNX);
}

/* MeanVarianceNormalization over axes (default 0, 2, 3): (x - mean) / (sqrt(E[x^2] - mean^2) +
 * 1e-9). */
sx_status ox_op_MeanVarianceNormalization(ox_ctx *c)
{
    const int64_t *ax;
    int na;
    SX_TRY(ox_attr_ints(c, "axes", &ax, &na));
    static const int64_t def[3] = {0, 2, 3};
    if (na == 0) {
        ax = def;
        na = 3;
    }
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(ox_in_req(c, 0, &v));
    SX_TRY(ox_node(c, v, OX_ONNX, &x));
    unsigned mask = 0;
    for (int i = 0; i < na; i++) {
        int a;
        SX_TRY(ox_axis(c, ax[i], v->rank, "attribute axes", &a));
        mask |= SX_AXIS(a);
    }
    sx_cg_graph *g = c->g;
    sx_cg_node *m = sx_cg_mean(g, x, mask, true);
    sx_cg_node *var = sx_cg_sub(g, sx_cg_mean(g, sx_cg_sqr(g, x), mask, true), sx_cg_sqr(g, m));
    sx_cg_node *sd = sx_cg_add_scalar(g, sx_cg_sqrt(g, var), 1e-9);
    return ox_out(c, 0, sx_cg_div(g, sx_cg_sub(g, x, m), sd), OX_ONNX);
}

/* ---------------------------------------------------------------- Einsum */

/* One term of the equation: its labels, the ellipsis axes spelled '0' + their place among the
 * 8 rightmost axes any ellipsis can hold (so that they line up across operands). */
typedef struct es_term {
    char lab[SX_MAX_RANK + 1];
    int n;
} es_term;

static bool is_letter(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

/* Parse [t, end) for an operand of rank r (r < 0: the output, whose ellipsis has *ell axes;
 * an operand's raises *ell to its own). */
static sx_status es_parse(ox_ctx *c, const char *t, const char *end, int r, int *ell, es_term *out)
{
    int letters = 0;
    for (const char *p = t; p < end; p++)
        letters += is_letter(*p);
    int e = r >= 0 ? r - letters : *ell;
    out->n = 0;
    for (const char *p = t; p < end; p++) {
        if (*p == ' ')
            continue;
        if (end - p >= 3 && strncmp(p, "...", 3) == 0 && e >= 0 && out->n + e <= SX_MAX_RANK) {
            for (int k = 0; k < e; k++)
                out->lab[out->n++] = (char)('0' + SX_MAX_RANK - e + k);
            p += 2;
            continue;
        }
        if (!is_letter(*p) || out->n == SX_MAX_RANK)
            return ox_fail(c, SX_E_FORMAT, "attribute equation: '%c' or too many axes", *p);
        out->lab[out->n++] = *p;
    }
    out->lab[out->n] = '\0';
    if (r >= 0 && out->n != r)
        return ox_fail(c, SX_E_SHAPE, "attribute equation: %d labels for an input of rank %d",
                       out->n, r);
    if (r >= 0 && e > *ell)
        *ell = e;
    return SX_OK;
}

/* x (labels t) with each repeated label reduced to its diagonal: labels u, shape us. */
static sx_status es_diagonal(ox_ctx *c, sx_cg_node **x, const es_term *t, char *u, int *nu,
                             int64_t *us)
{
    const int64_t *xs = sx_cg_node_shape(*x);
    int64_t st[SX_MAX_RANK], acc = 1;
    for (int k = t->n - 1; k >= 0; k--) {
        st[k] = acc;
        acc *= xs[k];
    }
    *nu = 0;
    u[0] = '\0';
    for (int k = 0; k < t->n; k++)
        if (strchr(u, t->lab[k]) == NULL) {
            us[*nu] = xs[k];
            u[(*nu)++] = t->lab[k];
            u[*nu] = '\0';
        }
    if (*nu == t->n)
        return SX_OK;
    int64_t n = sx_shape_size(*nu, us), co[SX_MAX_RANK];
    int64_t *map = sx_alloc((size_t)(n ? n : 1) * sizeof *map);
    if (map == NULL)
        return SX_E_NOMEM;
    for (int64_t p = 0; p < n; p++) {
        for (int k = *nu - 1, q = 0; k >= 0; k--, q++) /* p's coordinates in us */
            co[k] = p / sx_shape_size(q, us + k + 1) % us[k];
        map[p] = 0;
        for (int k = 0; k < t->n; k++)
            map[p] += co[strchr(u, t->lab[k]) - u] * st[k];
    }
    sx_status e = ox_gather_flat(c, *x, map, *nu, us, x);
    sx_free(map);
    return e;
}

/* The operand's axes permuted and reshaped to the global labels gl (size 1 where absent). */
static sx_status es_align(ox_ctx *c, sx_cg_node *x, const es_term *t, const char *gl,
                          sx_cg_node **out)
{
    char u[SX_MAX_RANK + 1];
    int nu, perm[SX_MAX_RANK], np = 0, ng = (int)strlen(gl);
    int64_t us[SX_MAX_RANK], shape[SX_MAX_RANK];
    SX_TRY(es_diagonal(c, &x, t, u, &nu, us));
    for (int k = 0; k < ng; k++) {
        const char *q = strchr(u, gl[k]);
        if (q != NULL)
            perm[np++] = (int)(q - u);
        shape[k] = q != NULL ? us[q - u] : 1;
    }
    *out = sx_cg_reshape(c->g, sx_cg_permute(c->g, x, perm), ng, shape);
    return *out != NULL ? SX_OK : ox_graph_fail(c);
}

/* The output labels of an implicit equation: the ellipsis, then the letters seen once, sorted. */
static void es_implicit(const es_term *in, int n, es_term *out)
{
    out->n = 0;
    for (char ch = '0'; ch < '0' + SX_MAX_RANK; ch++)
        for (int i = 0; i < n; i++)
            if (strchr(in[i].lab, ch) != NULL && strchr(out->lab, ch) == NULL) {
                out->lab[out->n++] = ch;
                out->lab[out->n] = '\0';
            }
    for (char ch = 'A'; ch <= 'z'; ch++) {
        int seen = 0;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < in[i].n; k++)
                seen += in[i].lab[k] == ch;
        if (is_letter(ch) && seen == 1 && out->n < SX_MAX_RANK)
            out->lab[out->n++] = ch;
    }
    out->lab[out->n] = '\0';
}

/* Einsum: every operand aligned to all the labels, multiplied (broadcast), summed over the
 * labels not in the output, permuted to the output's order. */
sx_status ox_op_Einsum(ox_ctx *c)
{
    char eq[256], gl[SX_MAX_RANK + 1] = "";
    SX_TRY(ox_attr_str(c, "equation", "", eq, sizeof eq));
    int n = ox_n_in(c), ell = 0, ng = 0;
    if (n < 1 || n > 8)
        return ox_fail(c, SX_E_UNSUPPORTED, "%d operands (1 to 8)", n);
    es_term t[8], o;
    const char *arrow = strstr(eq, "->"), *p = eq, *end = arrow ? arrow : eq + strlen(eq);
    for (int i = 0; i < n; i++) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        ox_val *v;
        SX_TRY(ox_in_req(c, i, &v));
        if ((comma == NULL) != (i == n - 1))
            return ox_fail(c, SX_E_FORMAT, "attribute equation '%s' for %d operands", eq, n);
        SX_TRY(es_parse(c, p, comma ? comma : end, v->rank, &ell, &t[i]));
        p = comma ? comma + 1 : end;
        for (int k = 0; k < t[i].n; k++)
            if (strchr(gl, t[i].lab[k]) == NULL) {
                if (ng == SX_MAX_RANK)
                    return ox_fail(c, SX_E_UNSUPPORTED, "more than %d labels", SX_MAX_RANK);
                gl[ng++] = t[i].lab[k];
                gl[ng] = '\0';
            }
    }
    if (arrow)
        SX_TRY(es_parse(c, arrow + 2, eq + strlen(eq), -1, &ell, &o));
    else
        es_implicit(t, n, &o);
    sx_cg_graph *g = c->g;
    sx_cg_node *y = NULL, *x;
    for (int i = 0; i < n; i++) {
        ox_val *v = ox_in(c, i);
        SX_TRY(ox_node(c, v, OX_ONNX, &x));
        SX_TRY(es_align(c, x, &t[i], gl, &x));
        y = y ? sx_cg_mul(g, y, x) : x;
    }
    unsigned mask = 0;
    char kept[SX_MAX_RANK + 1];
    int nk = 0, perm[SX_MAX_RANK];
    for (int k = 0; k < ng; k++)
        if (strchr(o.lab, gl[k]) == NULL)
            mask |= SX_AXIS(k);
        else
            kept[nk++] = gl[k];
    kept[nk] = '\0';
    if (nk != o.n)
        return ox_fail(c, SX_E_FORMAT, "attribute equation '%s': an output label twice or unknown",
                       eq);
    if (mask != 0)
        y = sx_cg_sum(g, y, mask, false);
    for (int k = 0; k < o.n; k++)
        perm[k] = (int)(strchr(kept, o.lab[k]) - kept);
    c->no_batch = true;
    return ox_out(c, 0, o.n > 1 ? sx_cg_permute(g, y, perm) : y, OX_ONNX);
}
