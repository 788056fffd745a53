/* ops.c: one mapping per ONNX op, from the current node (c->node) to graph ops. Each reads its
 * inputs through ox_node in the layout it wants: convolutions and pooling NHWC, element-wise
 * ops, Softmax, Concat, Pad and reductions whichever their inputs are in (axes mapped), and the
 * rest (Reshape, Flatten, MatMul, ...) the ONNX order. The table at the end lists each op with
 * the attributes it reads (also those of the families in ops_index.c, ops_loss.c, ops_math.c
 * and ops_quant.c); a node carrying any other attribute is refused by import.c. */
#include "onnx_impl.h"

#include <math.h>
#include <string.h>

/* A value that lives only here (an intermediate of a variadic op). */
static ox_val tmp_val(sx_cg_node *n, ox_layout lay)
{
    ox_val v;
    memset(&v, 0, sizeof v);
    v.name = "(intermediate)";
    v.n = n;
    v.lay = lay;
    v.rank = sx_cg_node_rank(n);
    const int64_t *s = sx_cg_node_shape(n);
    for (int k = 0; k < v.rank; k++)
        v.shape[k] = lay == OX_NHWC ? s[ox_to_nchw[k]] : s[k];
    return v;
}

static sx_status in_node(ox_ctx *c, int i, ox_layout lay, ox_val **v, sx_cg_node **n)
{
    SX_TRY(ox_in_req(c, i, v));
    return ox_node(c, *v, lay, n);
}

/* The value's node in its own layout (no permutation placed). */
static sx_status in_any(ox_ctx *c, int i, ox_val **v, sx_cg_node **n)
{
    SX_TRY(ox_in_req(c, i, v));
    return ox_node(c, *v, (*v)->lay, n);
}

/* Where an ONNX axis of a rank-4 value kept NHWC is. */
static int lay_axis(ox_layout lay, int axis)
{
    return lay == OX_NHWC ? ox_to_nchw[axis] : axis;
}

static sx_status no_extra_outputs(ox_ctx *c, int keep)
{
    for (int i = keep; i < ox_n_out(c); i++)
        if (c->node->output[i][0] != '\0')
            return ox_fail(c, SX_E_UNSUPPORTED, "output %d ('%s') is not computed", i,
                           c->node->output[i]);
    return SX_OK;
}

/* ---------------------------------------------------------------- element-wise */

typedef sx_cg_node *(*unary_fn)(sx_cg_graph *, sx_cg_node *);

static sx_status unary(ox_ctx *c, unary_fn f)
{
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    return ox_out(c, 0, f(c->g, x), v->lay);
}

#define UNARY(Name, fn)                                                                            \
    static sx_status op_##Name(ox_ctx *c)                                                          \
    {                                                                                              \
        return unary(c, sx_cg_##fn);                                                               \
    }
UNARY(Abs, abs)
UNARY(Ceil, ceil)
UNARY(Cos, cos)
UNARY(Erf, erf)
UNARY(Exp, exp)
UNARY(Floor, floor)
UNARY(Log, log)
UNARY(Neg, neg)
UNARY(Reciprocal, reciprocal)
UNARY(Relu, relu)
UNARY(Round, round)
UNARY(Sigmoid, sigmoid)
UNARY(Sign, sign)
UNARY(Sin, sin)
UNARY(Softplus, softplus)
UNARY(Softsign, softsign)
UNARY(Sqrt, sqrt)
UNARY(Tan, tan)
UNARY(Tanh, tanh)
#undef UNARY

static sx_status op_Identity(ox_ctx *c)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    if (v->n == NULL)
        return ox_out_ints_typed(c, 0, v->rank, v->shape, v->ints, v->itype);
    return ox_out(c, 0, v->n, v->lay);
}

static sx_status op_LeakyRelu(ox_ctx *c)
{
    double a;
    SX_TRY(ox_attr_float(c, "alpha", 0.01, &a));
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    return ox_out(c, 0, sx_cg_leaky_relu(c->g, x, a), v->lay);
}

static sx_status op_Elu(ox_ctx *c)
{
    double a;
    SX_TRY(ox_attr_float(c, "alpha", 1.0, &a));
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    return ox_out(c, 0, sx_cg_elu(c->g, x, a), v->lay);
}

/* selu(x) = gamma elu(x, alpha) */
static sx_status op_Selu(ox_ctx *c)
{
    double a, gm;
    SX_TRY(ox_attr_float(c, "alpha", 1.67326319217681884765625, &a));
    SX_TRY(ox_attr_float(c, "gamma", 1.05070102214813232421875, &gm));
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    return ox_out(c, 0, sx_cg_mul_scalar(c->g, sx_cg_elu(c->g, x, a), gm), v->lay);
}

/* hard_sigmoid(x) = max(0, min(1, alpha x + beta)) */
static sx_status op_HardSigmoid(ox_ctx *c)
{
    double a, b;
    SX_TRY(ox_attr_float(c, "alpha", 0.2, &a));
    SX_TRY(ox_attr_float(c, "beta", 0.5, &b));
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    sx_cg_graph *g = c->g;
    sx_cg_node *y = sx_cg_add_scalar(g, sx_cg_mul_scalar(g, x, a), b);
    y = sx_cg_max(g, sx_cg_min(g, y, sx_cg_scalar_like(g, x, 1)), sx_cg_scalar_like(g, x, 0));
    return ox_out(c, 0, y, v->lay);
}

/* hard_swish(x) = x max(0, min(1, x / 6 + 1 / 2)) */
static sx_status op_HardSwish(ox_ctx *c)
{
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    sx_cg_graph *g = c->g;
    sx_cg_node *y = sx_cg_add_scalar(g, sx_cg_mul_scalar(g, x, 1.0 / 6), 0.5);
    y = sx_cg_max(g, sx_cg_min(g, y, sx_cg_scalar_like(g, x, 1)), sx_cg_scalar_like(g, x, 0));
    return ox_out(c, 0, sx_cg_mul(g, x, y), v->lay);
}

/* thresholded_relu(x) = x > alpha ? x : 0 */
static sx_status op_ThresholdedRelu(ox_ctx *c)
{
    double a;
    SX_TRY(ox_attr_float(c, "alpha", 1.0, &a));
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    sx_cg_graph *g = c->g;
    sx_cg_node *y =
        sx_cg_where(g, sx_cg_gt(g, x, sx_cg_scalar_like(g, x, a)), x, sx_cg_scalar_like(g, x, 0));
    return ox_out(c, 0, y, v->lay);
}

/* clip(x, min, max) = min(max(x, min), max): bounds from the optional scalar inputs (opset 11+),
 * constants or values computed by the graph */
static sx_status op_Clip(ox_ctx *c)
{
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    sx_cg_graph *g = c->g;
    for (int i = 1; i <= 2; i++) {
        ox_val *b = ox_in(c, i);
        if (b == NULL)
            continue;
        if (b->rank != 0 && sx_shape_size(b->rank, b->shape) != 1)
            return ox_fail(c, SX_E_FORMAT, "input %d ('%s') is not a scalar", i, b->name);
        sx_cg_node *bn;
        SX_TRY(ox_node(c, b, b->lay, &bn));
        if (b->rank != 0)
            bn = ox_reshape(c, bn, 0, NULL);
        x = i == 1 ? sx_cg_max(g, x, bn) : sx_cg_min(g, x, bn);
    }
    return ox_out(c, 0, x, v->lay);
}

/* Dropout at inference: the identity (training_mode, when given, must be a constant false, or
 * the ratio a constant 0: PyTorch's functional dropout with p = 0 exports training mode). */
static sx_status op_Dropout(ox_ctx *c)
{
    double t = 0, ratio = 0.5;
    bool has_t, has_r;
    SX_TRY(ox_in_scalar(c, 2, &t, &has_t));
    if (t != 0)
        SX_TRY(ox_in_scalar(c, 1, &ratio, &has_r));
    if (t != 0 && ratio != 0)
        return ox_fail(c, SX_E_UNSUPPORTED, "training_mode true (inference only)");
    SX_TRY(no_extra_outputs(c, 2));
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    SX_TRY(ox_out(c, 0, x, v->lay));
    if (ox_n_out(c) < 2 || c->node->output[1][0] == '\0')
        return SX_OK;
    /* the mask: every element kept (1) */
    sx_cg_node *one = sx_cg_scalar_like(c->g, x, 1);
    return ox_out(c, 1, sx_cg_broadcast(c->g, one, sx_cg_node_rank(x), sx_cg_node_shape(x)),
                  v->lay);
}

/* The nodes of a and b in one layout for a broadcasting op: NHWC when either is kept NHWC and
 * the result has rank 4 (a lower-rank operand is first given leading 1s), else the ONNX order. */
static sx_status harmonise(ox_ctx *c, ox_val *a, ox_val *b, sx_cg_node **na, sx_cg_node **nb,
                           ox_layout *lay)
{
    int r = a->rank > b->rank ? a->rank : b->rank;
    *lay = (a->lay == OX_NHWC || b->lay == OX_NHWC) && r == 4 ? OX_NHWC : OX_ONNX;
    ox_val *v[2] = {a, b};
    sx_cg_node **out[2] = {na, nb};
    for (int i = 0; i < 2; i++) {
        if (*lay == OX_ONNX || v[i]->rank == 4 || v[i]->rank == 0) {
            SX_TRY(ox_node(c, v[i], v[i]->rank == 4 ? *lay : OX_ONNX, out[i]));
            continue;
        }
        sx_cg_node *n;
        SX_TRY(ox_node(c, v[i], OX_ONNX, &n));
        int64_t s[4] = {1, 1, 1, 1};
        for (int k = 0; k < v[i]->rank; k++)
            s[4 - v[i]->rank + k] = v[i]->shape[k];
        sx_cg_node *n4 = ox_reshape(c, n, 4, s);
        if (n4 == NULL)
            return ox_graph_fail(c);
        ox_val t = tmp_val(n4, OX_ONNX);
        SX_TRY(ox_node(c, &t, OX_NHWC, out[i]));
    }
    return SX_OK;
}

typedef sx_cg_node *(*binary_fn)(sx_cg_graph *, sx_cg_node *, sx_cg_node *);

static sx_status binary(ox_ctx *c, binary_fn f)
{
    ox_val *a, *b;
    SX_TRY(ox_in_req(c, 0, &a));
    SX_TRY(ox_in_req(c, 1, &b));
    sx_cg_node *na, *nb;
    ox_layout lay;
    SX_TRY(harmonise(c, a, b, &na, &nb, &lay));
    return ox_out(c, 0, f(c->g, na, nb), lay);
}

#define BINARY(Name, fn)                                                                           \
    static sx_status op_##Name(ox_ctx *c)                                                          \
    {                                                                                              \
        return binary(c, sx_cg_##fn);                                                              \
    }
BINARY(Add, add)
BINARY(Sub, sub)
BINARY(Mul, mul)
BINARY(Div, div)

/* a * a: Pow with a known exponent of 2 (LayerNorm's variance as exported), one multiply per
 * element instead of a pow */
static sx_cg_node *square(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b)
{
    (void)b;
    return sx_cg_mul(g, a, a);
}

static sx_status op_Pow(ox_ctx *c)
{
    ox_val *a = ox_in(c, 0), *b = ox_in(c, 1);
    double e = 0;
    bool present = false;
    if (a != NULL && b != NULL && ox_known(b) && b->rank <= a->rank &&
        sx_shape_size(b->rank, b->shape) == 1) {
        SX_TRY(ox_in_scalar(c, 1, &e, &present));
        if (present && e == 2)
            return binary(c, square);
    }
    return binary(c, sx_cg_pow);
}
/* Comparisons and logic on graph values give 1/0 (the booleans of a graph value); and, or and
 * xor read 1/0 inputs. */
BINARY(Equal, eq)
BINARY(Less, lt)
BINARY(LessOrEqual, le)
BINARY(Greater, gt)
BINARY(GreaterOrEqual, ge)
BINARY(And, mul)
BINARY(Or, max)
BINARY(Xor, ne)
#undef BINARY

/* not(x) = 1 - x on 1/0 */
static sx_status op_Not(ox_ctx *c)
{
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    sx_cg_graph *g = c->g;
    return ox_out(c, 0, sx_cg_sub(g, sx_cg_scalar_like(g, x, 1), x), v->lay);
}

/* where(cond, x, y), broadcast in ONNX order; a known condition is a constant of 1/0 */
static sx_status op_Where(ox_ctx *c)
{
    sx_cg_node *n[3];
    for (int i = 0; i < 3; i++) {
        ox_val *v;
        SX_TRY(in_node(c, i, OX_ONNX, &v, &n[i]));
    }
    return ox_out(c, 0, sx_cg_where(c->g, n[0], n[1], n[2]), OX_ONNX);
}

/* Ops strix computes only at import time (fold.c), on known inputs: reaching the mapping means
 * an input is computed by the graph. */
static sx_status op_known_only(ox_ctx *c)
{
    for (int i = 0; i < ox_n_in(c); i++) {
        ox_val *v = ox_in(c, i);
        if (v != NULL && !ox_known(v))
            return ox_fail(c, SX_E_UNSUPPORTED,
                           "input %d ('%s') is computed by the graph (strix evaluates %s only on "
                           "values known at import time)",
                           i, v->name, c->node->op_type);
    }
    for (int i = 0; i < ox_fold_arity(c->node->op_type); i++)
        if (ox_in(c, i) == NULL)
            return ox_fail(c, SX_E_FORMAT, "input %d missing", i);
    return ox_fail(c, SX_E_UNSUPPORTED, "inputs too large to evaluate at import time");
}

/* Size: the element count, a known integer. */
static sx_status op_Size(ox_ctx *c)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    int64_t n = sx_shape_size(v->rank, v->shape);
    return ox_out_ints(c, 0, 0, NULL, &n);
}

/* Sum, Mean, Max, Min over 1..n inputs, folded left to right. */
static sx_status variadic(ox_ctx *c, binary_fn f, bool mean)
{
    int n = ox_n_in(c);
    if (n < 1)
        return ox_fail(c, SX_E_FORMAT, "no inputs");
    ox_val *a;
    SX_TRY(ox_in_req(c, 0, &a));
    ox_val acc = *a;
    for (int i = 1; i < n; i++) {
        ox_val *b;
        SX_TRY(ox_in_req(c, i, &b));
        sx_cg_node *na, *nb;
        ox_layout lay;
        SX_TRY(harmonise(c, &acc, b, &na, &nb, &lay));
        sx_cg_node *r = f(c->g, na, nb);
        if (r == NULL)
            return ox_graph_fail(c);
        acc = tmp_val(r, lay);
    }
    sx_cg_node *r;
    SX_TRY(ox_node(c, &acc, acc.lay, &r));
    if (mean && n > 1)
        r = sx_cg_div(c->g, r, sx_cg_scalar_like(c->g, r, n));
    return ox_out(c, 0, r, acc.lay);
}

static sx_status op_Sum(ox_ctx *c)
{
    return variadic(c, sx_cg_add, false);
}

static sx_status op_Mean(ox_ctx *c)
{
    return variadic(c, sx_cg_add, true);
}

static sx_status op_Max(ox_ctx *c)
{
    return variadic(c, sx_cg_max, false);
}

static sx_status op_Min(ox_ctx *c)
{
    return variadic(c, sx_cg_min, false);
}

/* prelu(x, slope) = x < 0 ? slope x : x */
static sx_status op_PRelu(ox_ctx *c)
{
    ox_val *a, *b;
    SX_TRY(ox_in_req(c, 0, &a));
    SX_TRY(ox_in_req(c, 1, &b));
    sx_cg_node *x, *s;
    ox_layout lay;
    SX_TRY(harmonise(c, a, b, &x, &s, &lay));
    sx_cg_graph *g = c->g;
    sx_cg_node *y =
        sx_cg_where(g, sx_cg_lt(g, x, sx_cg_scalar_like(g, x, 0)), sx_cg_mul(g, s, x), x);
    return ox_out(c, 0, y, lay);
}

/* ---------------------------------------------------------------- convolution and pooling */

/* The window attributes of Conv and the pools: kernel (2), strides, dilations, pads and
 * auto_pad into the strix fields; only 2-d windows. */
typedef struct window {
    int kh, kw, sh, sw, dh, dw;
    sx_padding padding;
    int pt, pl, pb, pr;
} window;

static sx_status window_attrs(ox_ctx *c, int64_t kh, int64_t kw, window *w)
{
    const int64_t *v;
    int n;
    int64_t big = 1 << 20;
    w->kh = (int)kh;
    w->kw = (int)kw;
    w->sh = w->sw = w->dh = w->dw = 1;
    SX_TRY(ox_attr_ints(c, "strides", &v, &n));
    if (n != 0 && (n != 2 || v[0] < 1 || v[1] < 1 || v[0] > big || v[1] > big))
        return ox_fail(c, SX_E_UNSUPPORTED, "attribute strides: want 2 values >= 1");
    if (n == 2) {
        w->sh = (int)v[0];
        w->sw = (int)v[1];
    }
    SX_TRY(ox_attr_ints(c, "dilations", &v, &n));
    if (n != 0 && (n != 2 || v[0] < 1 || v[1] < 1 || v[0] > big || v[1] > big))
        return ox_fail(c, SX_E_UNSUPPORTED, "attribute dilations: want 2 values >= 1");
    if (n == 2) {
        w->dh = (int)v[0];
        w->dw = (int)v[1];
    }
    char ap[32];
    SX_TRY(ox_attr_str(c, "auto_pad", "NOTSET", ap, sizeof ap));
    SX_TRY(ox_attr_ints(c, "pads", &v, &n));
    w->pt = w->pl = w->pb = w->pr = 0;
    if (strcmp(ap, "NOTSET") == 0) {
        if (n != 0 && n != 4)
            return ox_fail(c, SX_E_UNSUPPORTED, "attribute pads: %d values (want 4)", n);
        for (int i = 0; i < n; i++)
            if (v[i] < 0 || v[i] > big)
                return ox_fail(c, SX_E_UNSUPPORTED, "attribute pads: %lld", (long long)v[i]);
        w->padding = n == 4 ? SX_PAD_EXPLICIT : SX_PAD_VALID;
        if (n == 4) { /* ONNX: x1_begin, x2_begin, x1_end, x2_end */
            w->pt = (int)v[0];
            w->pl = (int)v[1];
            w->pb = (int)v[2];
            w->pr = (int)v[3];
        }
    } else if (strcmp(ap, "VALID") == 0) {
        w->padding = SX_PAD_VALID;
    } else if (strcmp(ap, "SAME_UPPER") == 0) {
        w->padding = SX_PAD_SAME_UPPER;
    } else if (strcmp(ap, "SAME_LOWER") == 0) {
        w->padding = SX_PAD_SAME_LOWER;
    } else {
        return ox_fail(c, SX_E_UNSUPPORTED, "attribute auto_pad '%s'", ap);
    }
    return SX_OK;
}

/* The 2-d kernel size from kernel_shape (pools require it; Conv checks it against W). */
static sx_status kernel_shape(ox_ctx *c, bool required, int64_t *kh, int64_t *kw)
{
    const int64_t *v;
    int n;
    SX_TRY(ox_attr_ints(c, "kernel_shape", &v, &n));
    if (n == 0 && !required)
        return SX_OK;
    if (n != 2)
        return ox_fail(c, SX_E_UNSUPPORTED,
                       "attribute kernel_shape of %d values (only 2-d windows)", n);
    if (v[0] < 1 || v[1] < 1 || v[0] > (1 << 20) || v[1] > (1 << 20))
        return ox_fail(c, SX_E_FORMAT, "attribute kernel_shape (%lld, %lld)", (long long)v[0],
                       (long long)v[1]);
    *kh = v[0];
    *kw = v[1];
    return SX_OK;
}

static sx_status need_rank4(ox_ctx *c, const ox_val *v, const char *what)
{
    if (v->rank != 4)
        return ox_fail(c, SX_E_UNSUPPORTED, "%s '%s' of rank %d (only 2-d: rank 4, NCHW)", what,
                       v->name, v->rank);
    return SX_OK;
}

static sx_status op_Conv(ox_ctx *c)
{
    ox_val *xv, *wv;
    SX_TRY(ox_in_req(c, 0, &xv));
    SX_TRY(ox_in_req(c, 1, &wv));
    SX_TRY(need_rank4(c, xv, "input X"));
    SX_TRY(need_rank4(c, wv, "weight W"));
    int64_t kh = wv->shape[2], kw = wv->shape[3];
    SX_TRY(kernel_shape(c, false, &kh, &kw));
    if (kh != wv->shape[2] || kw != wv->shape[3])
        return ox_fail(c, SX_E_FORMAT, "attribute kernel_shape (%lld, %lld) but W is %lldx%lld",
                       (long long)kh, (long long)kw, (long long)wv->shape[2],
                       (long long)wv->shape[3]);
    window w;
    SX_TRY(window_attrs(c, kh, kw, &w));
    int64_t group;
    SX_TRY(ox_attr_int(c, "group", 1, &group));
    if (group < 1 || group > xv->shape[1])
        return ox_fail(c, SX_E_FORMAT, "attribute group %lld", (long long)group);
    sx_conv2d_params p = sx_conv2d_params_default();
    p.stride_h = w.sh;
    p.stride_w = w.sw;
    p.dilation_h = w.dh;
    p.dilation_w = w.dw;
    p.padding = w.padding;
    p.pad_top = w.pt;
    p.pad_left = w.pl;
    p.pad_bottom = w.pb;
    p.pad_right = w.pr;
    p.groups = (int)group;
    sx_cg_node *x, *k;
    SX_TRY(ox_node(c, xv, OX_NHWC, &x));
    SX_TRY(ox_node(c, wv, OX_ONNX, &k));
    static const int to_hwio[4] = {2, 3, 1, 0}; /* (f, c/g, kh, kw) -> (kh, kw, c/g, f) */
    k = sx_cg_permute(c->g, k, to_hwio);
    sx_cg_node *y = sx_cg_conv2d(c->g, x, k, &p);
    ox_val *bv = ox_in(c, 2);
    if (bv != NULL && y != NULL) {
        if (bv->rank != 1)
            return ox_fail(c, SX_E_FORMAT, "bias B of rank %d", bv->rank);
        sx_cg_node *b;
        SX_TRY(ox_node(c, bv, OX_ONNX, &b));
        y = sx_cg_add(c->g, y, b); /* (f) over (n, oh, ow, f) */
    }
    return ox_out(c, 0, y, OX_NHWC);
}

static sx_status pool(ox_ctx *c, bool max)
{
    ox_val *xv;
    SX_TRY(ox_in_req(c, 0, &xv));
    SX_TRY(need_rank4(c, xv, "input X"));
    SX_TRY(no_extra_outputs(c, 1));
    int64_t kh = 0, kw = 0, ceil_mode, cip = 0, order = 0;
    SX_TRY(kernel_shape(c, true, &kh, &kw));
    window w;
    SX_TRY(window_attrs(c, kh, kw, &w));
    SX_TRY(ox_attr_int(c, "ceil_mode", 0, &ceil_mode));
    if (!max)
        SX_TRY(ox_attr_int(c, "count_include_pad", 0, &cip));
    else
        SX_TRY(ox_attr_int(c, "storage_order", 0, &order));
    if (order != 0)
        return ox_fail(c, SX_E_UNSUPPORTED, "attribute storage_order %lld (indices output only)",
                       (long long)order);
    if (!max && (w.dh != 1 || w.dw != 1))
        return ox_fail(c, SX_E_UNSUPPORTED, "attribute dilations in AveragePool");
    sx_pool2d_params p = sx_pool2d_params_default(w.kh, w.kw);
    p.stride_h = w.sh;
    p.stride_w = w.sw;
    p.dilation_h = w.dh;
    p.dilation_w = w.dw;
    p.padding = w.padding;
    p.pad_top = w.pt;
    p.pad_left = w.pl;
    p.pad_bottom = w.pb;
    p.pad_right = w.pr;
    p.ceil_mode = ceil_mode != 0;
    p.count_include_pad = cip != 0;
    sx_cg_node *x;
    SX_TRY(ox_node(c, xv, OX_NHWC, &x));
    sx_cg_node *y = max ? sx_cg_maxpool2d(c->g, x, &p) : sx_cg_avgpool2d(c->g, x, &p);
    return ox_out(c, 0, y, OX_NHWC);
}

static sx_status op_MaxPool(ox_ctx *c)
{
    return pool(c, true);
}

static sx_status op_AveragePool(ox_ctx *c)
{
    return pool(c, false);
}

static sx_status global_pool(ox_ctx *c, bool max)
{
    ox_val *xv;
    SX_TRY(ox_in_req(c, 0, &xv));
    SX_TRY(need_rank4(c, xv, "input X"));
    sx_cg_node *x;
    SX_TRY(ox_node(c, xv, OX_NHWC, &x));
    unsigned axes = SX_AXIS(1) | SX_AXIS(2);
    sx_cg_node *y = max ? sx_cg_reduce_max(c->g, x, axes, true) : sx_cg_mean(c->g, x, axes, true);
    return ox_out(c, 0, y, OX_NHWC);
}

static sx_status op_GlobalAveragePool(ox_ctx *c)
{
    return global_pool(c, false);
}

static sx_status op_GlobalMaxPool(ox_ctx *c)
{
    return global_pool(c, true);
}

/* y = (x - mean) * (scale / sqrt(var + eps)) + B over the channel axis (1 in ONNX order). */
static sx_status op_BatchNormalization(ox_ctx *c)
{
    double eps, momentum;
    int64_t training;
    SX_TRY(ox_attr_float(c, "epsilon", 1e-5, &eps));
    SX_TRY(ox_attr_float(c, "momentum", 0.9, &momentum));
    SX_TRY(ox_attr_int(c, "training_mode", 0, &training));
    if (training != 0)
        return ox_fail(c, SX_E_UNSUPPORTED, "attribute training_mode 1 (inference only)");
    SX_TRY(no_extra_outputs(c, 1));
    ox_val *xv;
    SX_TRY(ox_in_req(c, 0, &xv));
    if (xv->rank < 2)
        return ox_fail(c, SX_E_FORMAT, "input X of rank %d", xv->rank);
    sx_cg_node *x, *prm[4];
    SX_TRY(ox_node(c, xv, xv->lay, &x));
    int64_t ch = xv->shape[1];
    /* the per-channel parameters shaped to broadcast over x in its layout */
    int64_t s[SX_MAX_RANK];
    for (int k = 0; k < xv->rank; k++)
        s[k] = 1;
    s[xv->lay == OX_NHWC ? 3 : 1] = ch;
    for (int i = 0; i < 4; i++) {
        ox_val *pv;
        sx_cg_node *n;
        SX_TRY(ox_in_req(c, i + 1, &pv));
        if (pv->rank != 1 || pv->shape[0] != ch)
            return ox_fail(c, SX_E_SHAPE, "input %d ('%s') is not (%lld)", i + 1, pv->name,
                           (long long)ch);
        SX_TRY(ox_node(c, pv, OX_ONNX, &n));
        prm[i] = ox_reshape(c, n, xv->rank, s);
    }
    sx_cg_graph *g = c->g;
    sx_cg_node *inv = sx_cg_div(g, prm[0], sx_cg_sqrt(g, sx_cg_add_scalar(g, prm[3], eps)));
    sx_cg_node *y = sx_cg_add(g, sx_cg_mul(g, sx_cg_sub(g, x, prm[2]), inv), prm[1]);
    return ox_out(c, 0, y, xv->lay);
}

/* ---------------------------------------------------------------- layer / instance norm */
/* LayerNormalization (opset 17) and InstanceNormalization map onto the norm
 * ops (norm_stats + norm, cgraph/ops/norm.c). */

/* LayerNormalization(X, Scale[, B]) over the axes from `axis` on; optional outputs Mean and
 * InvStdDev of shape X[:axis] + 1s. Scale and B of exactly those axes' shape are the op's gamma
 * and beta; other (broadcastable) shapes are applied by Mul and Add after it. */
static sx_status op_LayerNormalization(ox_ctx *c)
{
    double eps;
    int64_t a, stash;
    SX_TRY(ox_attr_float(c, "epsilon", 1e-5, &eps));
    SX_TRY(ox_attr_int(c, "axis", -1, &a));
    SX_TRY(ox_attr_int(c, "stash_type", 1, &stash));
    ox_val *xv, *sv, *bv = ox_in(c, 2);
    sx_cg_node *x, *scale, *bias = NULL;
    SX_TRY(in_node(c, 0, OX_ONNX, &xv, &x));
    SX_TRY(in_node(c, 1, OX_ONNX, &sv, &scale));
    if (bv != NULL)
        SX_TRY(ox_node(c, bv, OX_ONNX, &bias));
    int axis;
    SX_TRY(ox_axis(c, a, xv->rank, "attribute axis", &axis));
    sx_cg_graph *g = c->g;
    int tail = xv->rank - axis;
    sx_norm_axes ax = {axis, tail, 1};
    const int64_t *ts = xv->shape + axis;
    bool fused = sx_shape_equal(sv->rank, sv->shape, tail, ts) &&
                 (bv == NULL || sx_shape_equal(bv->rank, bv->shape, tail, ts));
    if (fused && bias == NULL)
        bias = sx_cg_mul_scalar(g, scale, 0.0);
    sx_cg_node *st = sx_cg_norm_stats(g, x, ax);
    sx_cg_node *y = sx_cg_norm(g, x, st, fused ? scale : NULL, fused ? bias : NULL, ax, eps);
    if (!fused) {
        y = sx_cg_mul(g, y, scale);
        if (bias != NULL)
            y = sx_cg_add(g, y, bias);
    }
    SX_TRY(ox_out(c, 0, y, OX_ONNX));
    int64_t ms[SX_MAX_RANK], p = sx_shape_size(axis, xv->shape);
    for (int k = 0; k < xv->rank; k++)
        ms[k] = k < axis ? xv->shape[k] : 1;
    for (int i = 1; i < ox_n_out(c) && i < 3; i++) {
        if (c->node->output[i][0] == '\0')
            continue;
        sx_slice sl[2] = {{i - 1, i, 1}, SX_SLICE_ALL};
        sx_cg_node *r = sx_cg_reshape(g, sx_cg_slice(g, st, sl), 1, &p);
        if (i == 2)
            r = sx_cg_rsqrt(g, sx_cg_add_scalar(g, r, eps));
        SX_TRY(ox_out(c, i, sx_cg_reshape(g, r, xv->rank, ms), OX_ONNX));
    }
    return no_extra_outputs(c, 3);
}

/* InstanceNormalization(input (N, C, D...), scale (C), B (C)): a rank-4 value kept NHWC is
 * normalised there (instance norm over channels last, gamma and beta fused); else in ONNX's
 * order, each (n, c) over the D axes, then scale and B broadcast as (C, 1, ...). */
static sx_status op_InstanceNormalization(ox_ctx *c)
{
    double eps;
    SX_TRY(ox_attr_float(c, "epsilon", 1e-5, &eps));
    SX_TRY(no_extra_outputs(c, 1));
    ox_val *xv, *pv[2];
    SX_TRY(ox_in_req(c, 0, &xv));
    if (xv->rank < 3)
        return ox_fail(c, SX_E_FORMAT, "input of rank %d (want N, C and spatial axes)", xv->rank);
    int64_t ch = xv->shape[1];
    sx_cg_node *prm[2];
    for (int i = 0; i < 2; i++) {
        SX_TRY(in_node(c, i + 1, OX_ONNX, &pv[i], &prm[i]));
        if (pv[i]->rank != 1 || pv[i]->shape[0] != ch)
            return ox_fail(c, SX_E_SHAPE, "input %d ('%s') is not (%lld)", i + 1, pv[i]->name,
                           (long long)ch);
    }
    sx_cg_graph *g = c->g;
    sx_cg_node *x, *y;
    if (xv->lay == OX_NHWC) {
        SX_TRY(ox_node(c, xv, OX_NHWC, &x));
        return ox_out(c, 0, sx_cg_instance_norm(g, x, prm[0], prm[1], eps), OX_NHWC);
    }
    SX_TRY(ox_node(c, xv, OX_ONNX, &x));
    sx_norm_axes ax = {2, xv->rank - 2, 1};
    y = sx_cg_norm(g, x, sx_cg_norm_stats(g, x, ax), NULL, NULL, ax, eps);
    int64_t s[SX_MAX_RANK];
    for (int k = 0; k < xv->rank - 1; k++)
        s[k] = k == 0 ? ch : 1;
    for (int i = 0; i < 2; i++)
        prm[i] = sx_cg_reshape(g, prm[i], xv->rank - 1, s);
    return ox_out(c, 0, sx_cg_add(g, sx_cg_mul(g, y, prm[0]), prm[1]), OX_ONNX);
}

/* ---------------------------------------------------------------- matrix products */

static sx_status op_Gemm(ox_ctx *c)
{
    double alpha, beta;
    int64_t ta, tb;
    SX_TRY(ox_attr_float(c, "alpha", 1.0, &alpha));
    SX_TRY(ox_attr_float(c, "beta", 1.0, &beta));
    SX_TRY(ox_attr_int(c, "transA", 0, &ta));
    SX_TRY(ox_attr_int(c, "transB", 0, &tb));
    ox_val *av, *bv, *cv = ox_in(c, 2);
    sx_cg_node *a, *b, *cn = NULL;
    SX_TRY(in_node(c, 0, OX_ONNX, &av, &a));
    SX_TRY(in_node(c, 1, OX_ONNX, &bv, &b));
    if (av->rank != 2 || bv->rank != 2)
        return ox_fail(c, SX_E_FORMAT, "A and B of ranks %d and %d (want 2)", av->rank, bv->rank);
    if (cv != NULL)
        SX_TRY(ox_node(c, cv, OX_ONNX, &cn));
    sx_cg_node *y;
    if (cn == NULL)
        y = alpha == 1 ? sx_cg_matmul(c->g, a, b, ta != 0, tb != 0)
                       : sx_cg_gemm(c->g, a, b, ta != 0, tb != 0, alpha, NULL, 0);
    else
        y = sx_cg_gemm(c->g, a, b, ta != 0, tb != 0, alpha, cn, beta);
    return ox_out(c, 0, y, OX_ONNX);
}

/* NumPy matmul: 1-d operands get a 1 prepended (a) or appended (b), removed from the result. */
static sx_status op_MatMul(ox_ctx *c)
{
    ox_val *av, *bv;
    sx_cg_node *a, *b;
    SX_TRY(in_node(c, 0, OX_ONNX, &av, &a));
    SX_TRY(in_node(c, 1, OX_ONNX, &bv, &b));
    if (av->rank < 1 || bv->rank < 1)
        return ox_fail(c, SX_E_FORMAT, "a scalar operand");
    sx_cg_graph *g = c->g;
    if (av->rank == 1)
        a = ox_reshape(c, a, 2, (int64_t[]){1, av->shape[0]});
    if (bv->rank == 1)
        b = ox_reshape(c, b, 2, (int64_t[]){bv->shape[0], 1});
    sx_cg_node *y = sx_cg_matmul(g, a, b, false, false);
    if (y != NULL && (av->rank == 1 || bv->rank == 1)) {
        int r = sx_cg_node_rank(y), k = 0;
        int64_t s[SX_MAX_RANK];
        const int64_t *ys = sx_cg_node_shape(y);
        for (int i = 0; i < r; i++) {
            if ((av->rank == 1 && i == r - 2) || (bv->rank == 1 && i == r - 1))
                continue;
            s[k++] = ys[i];
        }
        y = ox_reshape(c, y, k, s);
    }
    return ox_out(c, 0, y, OX_ONNX);
}

/* ---------------------------------------------------------------- softmax */

/* Opset 13+: along one axis. Before: over the axes from `axis` on, flattened (the input
 * coerced to 2-d), which is one axis when axis is the last. */
static sx_status softmax(ox_ctx *c, bool log)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    int64_t a;
    SX_TRY(ox_attr_int(c, "axis", c->opset >= 13 ? -1 : 1, &a));
    int axis;
    SX_TRY(ox_axis(c, a, v->rank, "attribute axis", &axis));
    sx_cg_graph *g = c->g;
    sx_cg_node *x, *y;
    if (c->opset >= 13 || axis == v->rank - 1) {
        SX_TRY(ox_node(c, v, v->lay, &x));
        int ax = lay_axis(v->lay, axis);
        y = log ? sx_cg_log_softmax(g, x, ax) : sx_cg_softmax(g, x, ax);
        return ox_out(c, 0, y, v->lay);
    }
    SX_TRY(ox_node(c, v, OX_ONNX, &x));
    /* rows: the batch axis stays symbolic (-1) when axis 0 is the batch */
    int64_t rows = v->batch0 && axis >= 1 ? -1 : sx_shape_size(axis, v->shape),
            cols = sx_shape_size(v->rank - axis, v->shape + axis);
    x = ox_reshape(c, x, 2, (int64_t[]){rows, cols});
    y = log ? sx_cg_log_softmax(g, x, 1) : sx_cg_softmax(g, x, 1);
    return ox_out(c, 0, ox_reshape(c, y, v->rank, v->shape), OX_ONNX);
}

static sx_status op_Softmax(ox_ctx *c)
{
    return softmax(c, false);
}

static sx_status op_LogSoftmax(ox_ctx *c)
{
    return softmax(c, true);
}

/* ---------------------------------------------------------------- reductions */

typedef sx_cg_node *(*fold_fn)(sx_cg_graph *, sx_cg_node *, unsigned, bool);

static sx_cg_node *sum_square(sx_cg_graph *g, sx_cg_node *x, unsigned axes, bool keep)
{
    return sx_cg_sum(g, sx_cg_sqr(g, x), axes, keep);
}

static sx_cg_node *log_sum(sx_cg_graph *g, sx_cg_node *x, unsigned axes, bool keep)
{
    return sx_cg_log(g, sx_cg_sum(g, x, axes, keep));
}

static sx_status reduce(ox_ctx *c, fold_fn f)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    int64_t keep, noop;
    SX_TRY(ox_attr_int(c, "keepdims", 1, &keep));
    SX_TRY(ox_attr_int(c, "noop_with_empty_axes", 0, &noop));
    const int64_t *axes;
    int64_t n = 0;
    int na = 0;
    if (strcmp(c->node->op_type, "ReduceSum") == 0 && c->opset >= 13) {
        if (ox_in(c, 1) != NULL)
            SX_TRY(ox_in_ints(c, 1, &axes, &n));
        else
            axes = NULL;
        na = (int)n;
    } else {
        SX_TRY(ox_attr_ints(c, "axes", &axes, &na));
    }
    sx_cg_node *x;
    ox_layout lay = keep ? v->lay : OX_ONNX;
    SX_TRY(ox_node(c, v, lay, &x));
    if (na == 0 && noop)
        return ox_out(c, 0, x, lay);
    unsigned mask = 0;
    for (int i = 0; i < na; i++) {
        int ax;
        SX_TRY(ox_axis(c, axes[i], v->rank, "axis", &ax));
        mask |= SX_AXIS(lay_axis(lay, ax));
    }
    if (na == 0)
        mask = v->rank > 0 ? (1u << v->rank) - 1 : 0;
    c->no_batch = (mask & SX_AXIS(0)) != 0;
    return ox_out(c, 0, f(c->g, x, mask, keep != 0), lay);
}

#define REDUCE(Name, fn)                                                                           \
    static sx_status op_##Name(ox_ctx *c)                                                          \
    {                                                                                              \
        return reduce(c, fn);                                                                      \
    }
REDUCE(ReduceMean, sx_cg_mean)
REDUCE(ReduceSum, sx_cg_sum)
REDUCE(ReduceMax, sx_cg_reduce_max)
REDUCE(ReduceMin, sx_cg_reduce_min)
REDUCE(ReduceProd, sx_cg_prod)
REDUCE(ReduceL1, sx_cg_l1norm)
REDUCE(ReduceL2, sx_cg_l2norm)
REDUCE(ReduceLogSumExp, sx_cg_logsumexp)
REDUCE(ReduceSumSquare, sum_square)
REDUCE(ReduceLogSum, log_sum)
#undef REDUCE

/* ---------------------------------------------------------------- layout */

static sx_status reshape_to(ox_ctx *c, ox_val *v, int rank, const int64_t *shape)
{
    if (v->n == NULL) { /* integers: the same numbers in another shape */
        if (sx_shape_size(rank, shape) != sx_shape_size(v->rank, v->shape))
            return ox_fail(c, SX_E_SHAPE, "cannot reshape %lld values",
                           (long long)sx_shape_size(v->rank, v->shape));
        return ox_out_ints_typed(c, 0, rank, shape, v->ints, v->itype);
    }
    sx_cg_node *x;
    SX_TRY(ox_node(c, v, OX_ONNX, &x));
    /* the batch axis survives when axis 0 keeps its size and the example its element count */
    c->no_batch = !(v->batch0 && rank > 0 && shape[0] == v->shape[0] &&
                    sx_shape_size(rank - 1, shape + 1) == sx_shape_size(v->rank - 1, v->shape + 1));
    return ox_out(c, 0, ox_reshape(c, x, rank, shape), OX_ONNX);
}

static sx_status op_Flatten(ox_ctx *c)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    int64_t a;
    SX_TRY(ox_attr_int(c, "axis", 1, &a));
    int axis;
    if (a == v->rank)
        axis = v->rank;
    else
        SX_TRY(ox_axis(c, a, v->rank, "attribute axis", &axis));
    int64_t s[2] = {sx_shape_size(axis, v->shape), sx_shape_size(v->rank - axis, v->shape + axis)};
    return reshape_to(c, v, 2, s);
}

/* Reshape of a value whose axis 0 is the batch to a target that keeps it: target[0] is 0 (copy),
 * -1, the batch size, or the batch size the file declares for its input (an exporter that
 * traced at batch 1 writes (1, -1) for "x.view(x.size(0), -1)"), and the other entries (0 and
 * one -1 resolved against the example) hold the example's element count. Then the reshape keeps
 * the batch axis at any batch; *done when it mapped the node. */
static sx_status keeps_batch(ox_ctx *c, ox_val *v, const int64_t *t, int n, bool allowzero,
                             bool *done)
{
    *done = false;
    if (!v->batch0 || v->n == NULL || n < 1 || v->rank < 1)
        return SX_OK;
    int64_t t0 = t[0];
    if (!((t0 == 0 && !allowzero) || t0 == -1 || t0 == v->shape[0] ||
          (c->file_batch > 0 && t0 == c->file_batch)))
        return SX_OK;
    int64_t ex = sx_shape_size(v->rank - 1, v->shape + 1), known = 1, s[SX_MAX_RANK];
    int infer = -1;
    for (int i = 1; i < n; i++) {
        s[i] = t[i] == 0 && !allowzero && i < v->rank ? v->shape[i] : t[i];
        if (s[i] == -1 && infer < 0 && t0 != -1)
            infer = i;
        else if (s[i] <= 0 || known > INT64_MAX / s[i])
            return SX_OK;
        else
            known *= s[i];
    }
    if (infer >= 0) {
        if (ex % known != 0)
            return SX_OK;
        s[infer] = ex / known;
    } else if (known != ex) {
        return SX_OK;
    }
    if (ex <= 0)
        return SX_OK;
    s[0] = v->shape[0];
    *done = true;
    return reshape_to(c, v, n, s);
}

static sx_status op_Reshape(ox_ctx *c)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    const int64_t *t;
    int64_t n, allowzero;
    SX_TRY(ox_in_ints(c, 1, &t, &n));
    SX_TRY(ox_attr_int(c, "allowzero", 0, &allowzero));
    if (n > SX_MAX_RANK)
        return ox_fail(c, SX_E_UNSUPPORTED, "shape of rank %lld", (long long)n);
    bool done;
    SX_TRY(keeps_batch(c, v, t, (int)n, allowzero != 0, &done));
    if (done)
        return SX_OK;
    int64_t s[SX_MAX_RANK], known = 1;
    int infer = -1;
    for (int i = 0; i < n; i++) {
        s[i] = t[i];
        if (t[i] == 0 && !allowzero) {
            if (i >= v->rank)
                return ox_fail(c, SX_E_SHAPE, "shape[%d] = 0 copies a missing axis", i);
            s[i] = v->shape[i];
        }
        if (s[i] == -1) {
            if (infer >= 0)
                return ox_fail(c, SX_E_SHAPE, "two -1 in the shape");
            infer = i;
        } else if (s[i] < 0 || (s[i] > 0 && known > INT64_MAX / s[i])) {
            return ox_fail(c, SX_E_SHAPE, "shape[%d] = %lld", i, (long long)s[i]);
        } else {
            known *= s[i];
        }
    }
    int64_t total = sx_shape_size(v->rank, v->shape);
    if (infer >= 0) {
        if (known == 0 || total % known != 0)
            return ox_fail(c, SX_E_SHAPE, "cannot infer the -1 axis (%lld elements)",
                           (long long)total);
        s[infer] = total / known;
    }
    return reshape_to(c, v, (int)n, s);
}

/* Unsqueeze / Squeeze: the axes from the attribute (opset < 13) or the input (13+). */
static sx_status axes_of(ox_ctx *c, const int64_t **axes, int *n)
{
    if (c->opset >= 13) {
        *axes = NULL;
        *n = 0;
        if (ox_in(c, 1) == NULL)
            return SX_OK;
        int64_t cnt;
        SX_TRY(ox_in_ints(c, 1, axes, &cnt));
        *n = (int)cnt;
        return SX_OK;
    }
    return ox_attr_ints(c, "axes", axes, n);
}

static sx_status op_Unsqueeze(ox_ctx *c)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    const int64_t *axes;
    int n;
    SX_TRY(axes_of(c, &axes, &n));
    int r = v->rank + n;
    if (n == 0 || r > SX_MAX_RANK)
        return ox_fail(c, SX_E_UNSUPPORTED, "%d axes on rank %d", n, v->rank);
    bool ins[SX_MAX_RANK] = {false};
    for (int i = 0; i < n; i++) {
        int a;
        SX_TRY(ox_axis(c, axes[i], r, "axis", &a));
        if (ins[a])
            return ox_fail(c, SX_E_FORMAT, "axis %d repeated", a);
        ins[a] = true;
    }
    int64_t s[SX_MAX_RANK];
    for (int i = 0, k = 0; i < r; i++)
        s[i] = ins[i] ? 1 : v->shape[k++];
    return reshape_to(c, v, r, s);
}

static sx_status op_Squeeze(ox_ctx *c)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    const int64_t *axes;
    int n;
    SX_TRY(axes_of(c, &axes, &n));
    bool drop[SX_MAX_RANK] = {false};
    for (int i = 0; i < n; i++) {
        int a;
        SX_TRY(ox_axis(c, axes[i], v->rank, "axis", &a));
        if (v->shape[a] != 1)
            return ox_fail(c, SX_E_SHAPE, "axis %d has size %lld", a, (long long)v->shape[a]);
        drop[a] = true;
    }
    int64_t s[SX_MAX_RANK];
    int r = 0;
    for (int i = 0; i < v->rank; i++)
        if (!(n == 0 ? v->shape[i] == 1 : drop[i]))
            s[r++] = v->shape[i];
    return reshape_to(c, v, r, s);
}

static sx_status op_Transpose(ox_ctx *c)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    const int64_t *pv;
    int n;
    SX_TRY(ox_attr_ints(c, "perm", &pv, &n));
    int perm[SX_MAX_RANK];
    bool seen[SX_MAX_RANK] = {false};
    if (n != 0 && n != v->rank)
        return ox_fail(c, SX_E_FORMAT, "attribute perm of %d values for rank %d", n, v->rank);
    for (int i = 0; i < v->rank; i++) {
        perm[i] = n ? (int)pv[i] : v->rank - 1 - i;
        if (n && (pv[i] < 0 || pv[i] >= v->rank || seen[pv[i]]))
            return ox_fail(c, SX_E_FORMAT, "attribute perm is not a permutation");
        seen[perm[i]] = true;
    }
    if (v->n == NULL)
        return ox_fail(c, SX_E_UNSUPPORTED, "transpose of an integer tensor");
    sx_cg_node *x;
    SX_TRY(ox_node(c, v, v->lay, &x));
    c->no_batch = perm[0] != 0;
    if (v->lay == OX_NHWC) /* one permutation from the NHWC node: out[j] = onnx[perm[j]] */
        for (int j = 0; j < 4; j++)
            perm[j] = ox_to_nchw[perm[j]];
    return ox_out(c, 0, sx_cg_permute(c->g, x, perm), OX_ONNX);
}

static sx_status concat_ints(ox_ctx *c, int n, int axis)
{
    int64_t total = 0, buf[256];
    for (int i = 0; i < n; i++) {
        ox_val *v;
        SX_TRY(ox_in_req(c, i, &v));
        if (v->ints == NULL || v->rank != 1)
            return ox_fail(c, SX_E_UNSUPPORTED, "concatenation of integer tensors of rank != 1");
        if (total + v->shape[0] > 256)
            return ox_fail(c, SX_E_UNSUPPORTED, "more than 256 integers");
        memcpy(buf + total, v->ints, (size_t)v->shape[0] * sizeof *buf);
        total += v->shape[0];
    }
    (void)axis;
    return ox_out_ints(c, 0, 1, &total, buf);
}

static sx_status op_Concat(ox_ctx *c)
{
    int n = ox_n_in(c);
    if (n < 1 || n > SX_CG_MAX_INPUTS)
        return ox_fail(c, SX_E_UNSUPPORTED, "%d inputs", n);
    ox_val *v0;
    SX_TRY(ox_in_req(c, 0, &v0));
    int64_t a;
    SX_TRY(ox_attr_int(c, "axis", 0, &a));
    int axis;
    SX_TRY(ox_axis(c, a, v0->rank, "attribute axis", &axis));
    if (v0->n == NULL)
        return concat_ints(c, n, axis);
    ox_layout lay = v0->lay;
    sx_cg_node *xs[SX_CG_MAX_INPUTS];
    for (int i = 0; i < n; i++) {
        ox_val *v;
        SX_TRY(ox_in_req(c, i, &v));
        if (v->lay != lay)
            lay = OX_ONNX;
    }
    for (int i = 0; i < n; i++) {
        ox_val *v;
        SX_TRY(ox_in_req(c, i, &v));
        SX_TRY(ox_node(c, v, lay, &xs[i]));
    }
    c->no_batch = axis == 0;
    return ox_out(c, 0, sx_cg_concat(c->g, n, xs, lay_axis(lay, axis)), lay);
}

/* Split into outputs along axis: sizes from the input (opset 13+) or attribute, else equal. */
static sx_status op_Split(ox_ctx *c)
{
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    int64_t a;
    SX_TRY(ox_attr_int(c, "axis", 0, &a));
    int axis, n = ox_n_out(c);
    SX_TRY(ox_axis(c, a, v->rank, "attribute axis", &axis));
    const int64_t *sz = NULL;
    int nsz = 0;
    if (c->opset >= 13 && ox_in(c, 1) != NULL) {
        int64_t cnt;
        SX_TRY(ox_in_ints(c, 1, &sz, &cnt));
        nsz = (int)cnt;
    } else if (c->opset < 13) {
        SX_TRY(ox_attr_ints(c, "split", &sz, &nsz));
    }
    int64_t len = v->shape[axis], start = 0;
    c->no_batch = axis == 0;
    if ((nsz != 0 && nsz != n) || n < 1 || (nsz == 0 && len % n != 0))
        return ox_fail(c, SX_E_UNSUPPORTED, "split of %lld into %d outputs (%d sizes)",
                       (long long)len, n, nsz);
    for (int i = 0; i < n; i++) {
        int64_t s = nsz ? sz[i] : len / n;
        if (s < 0 || start + s > len)
            return ox_fail(c, SX_E_SHAPE, "split sizes exceed the axis (%lld)", (long long)len);
        sx_slice sl[SX_MAX_RANK];
        for (int k = 0; k < v->rank; k++)
            sl[k] = SX_SLICE_ALL;
        sl[lay_axis(v->lay, axis)] = (sx_slice){start, start + s, 1};
        SX_TRY(ox_out(c, i, sx_cg_slice(c->g, x, sl), v->lay));
        start += s;
    }
    return SX_OK;
}

/* Slice v with starts, ends, axes (may be NULL) and steps (may be NULL), n of each. */
static sx_status slice_with(ox_ctx *c, ox_val *v, const int64_t *st, const int64_t *en,
                            const int64_t *ax, const int64_t *sp, int64_t n)
{
    sx_slice sl[SX_MAX_RANK];
    for (int k = 0; k < v->rank; k++)
        sl[k] = SX_SLICE_ALL;
    for (int i = 0; i < n; i++) {
        int a = i;
        if (ax != NULL)
            SX_TRY(ox_axis(c, ax[i], v->rank, "axis", &a));
        int64_t step = sp ? sp[i] : 1, d = v->shape[a];
        if (step == 0)
            return ox_fail(c, SX_E_FORMAT, "step 0");
        int64_t s = st[i], e = en[i];
        /* ONNX clamps: starts to [0, d] ([0, d-1] for negative steps), ends to [-1, d] */
        if (s < 0)
            s += d;
        if (e < 0 && e > INT64_MIN / 2)
            e += d;
        if (step > 0) {
            s = s < 0 ? 0 : s > d ? d : s;
            e = e < 0 ? 0 : e > d ? d : e;
            if (e < s)
                e = s;
        } else {
            s = s < 0 ? -1 : s > d - 1 ? d - 1 : s;
            e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
            if (s < 0 || e >= s) {
                s = 0; /* empty */
                e = 0;
                step = 1;
            }
        }
        if (step < 0 && e == -1) /* through the first element: strix's open end */
            e = SX_SLICE_END;
        if (s == 0 && e == d && step == 1) /* the whole axis (at any batch, for axis 0) */
            e = SX_SLICE_END;
        sl[a] = (sx_slice){s, e, step};
        if (a == 0 && !(s == 0 && e == SX_SLICE_END && step == 1))
            c->no_batch = true;
    }
    if (v->n == NULL) { /* known integers of rank 1 (a shape): pick them here */
        if (v->rank != 1 || v->shape[0] > 256)
            return ox_fail(c, SX_E_UNSUPPORTED, "slice of an integer tensor of rank %d", v->rank);
        int64_t out[256], k = 0, d = v->shape[0];
        sx_slice q = sl[0];
        int64_t stop = q.stop == SX_SLICE_END ? (q.step > 0 ? d : -1) : q.stop;
        for (int64_t i = q.start; q.step > 0 ? i < stop : i > stop; i += q.step)
            out[k++] = v->ints[i];
        return ox_out_ints(c, 0, 1, &k, out);
    }
    sx_cg_node *x;
    SX_TRY(ox_node(c, v, v->lay, &x));
    if (v->lay == OX_NHWC) {
        sx_slice t[4];
        for (int k = 0; k < 4; k++)
            t[k] = sl[ox_to_nhwc[k]];
        memcpy(sl, t, sizeof t);
    }
    return ox_out(c, 0, sx_cg_slice(c->g, x, sl), v->lay);
}

/* Slice with starts, ends, axes, steps known (opset 10+: inputs). */
static sx_status op_Slice(ox_ctx *c)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    const int64_t *st, *en, *ax = NULL, *sp = NULL;
    int64_t n, m;
    SX_TRY(ox_in_ints(c, 1, &st, &n));
    SX_TRY(ox_in_ints(c, 2, &en, &m));
    if (m != n || n > v->rank)
        return ox_fail(c, SX_E_FORMAT, "%lld starts, %lld ends", (long long)n, (long long)m);
    if (ox_in(c, 3) != NULL) {
        SX_TRY(ox_in_ints(c, 3, &ax, &m));
        if (m != n)
            return ox_fail(c, SX_E_FORMAT, "%lld axes for %lld starts", (long long)m, (long long)n);
    }
    if (ox_in(c, 4) != NULL) {
        SX_TRY(ox_in_ints(c, 4, &sp, &m));
        if (m != n)
            return ox_fail(c, SX_E_FORMAT, "%lld steps for %lld starts", (long long)m,
                           (long long)n);
    }
    return slice_with(c, v, st, en, ax, sp, n);
}

/* Pad's modes: constant (a value), reflect (mirrored without the edge: 3 2 | 1 2 3 | 2 1) and edge
 * (the edge repeated: 1 1 | 1 2 3 | 3 3). Wrap and the axes input came in opsets 18-19, past
 * OX_OPSET_MAX. */
typedef enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE } pad_mode;
static const char *const pad_modes[] = {"constant", "reflect", "edge"};

static sx_status pad_with(ox_ctx *c, const int64_t *pads, int64_t n, pad_mode mode, double value);

static sx_status pad_mode_of(ox_ctx *c, pad_mode *mode)
{
    char m[32];
    SX_TRY(ox_attr_str(c, "mode", "constant", m, sizeof m));
    for (int i = 0; i < 3; i++)
        if (strcmp(m, pad_modes[i]) == 0) {
            *mode = (pad_mode)i;
            return SX_OK;
        }
    return ox_fail(c, SX_E_UNSUPPORTED, "attribute mode '%s'", m);
}

/* Pad (opset 11+): pads and the constant value are inputs, known at import. */
static sx_status op_Pad(ox_ctx *c)
{
    pad_mode mode = PAD_CONSTANT;
    SX_TRY(pad_mode_of(c, &mode));
    const int64_t *pads;
    int64_t n;
    SX_TRY(ox_in_ints(c, 1, &pads, &n));
    if (ox_in(c, 3) != NULL)
        return ox_fail(c, SX_E_UNSUPPORTED, "input axes");
    double value = 0;
    bool has;
    SX_TRY(ox_in_scalar(c, 2, &value, &has));
    return pad_with(c, pads, n, mode, value);
}

/* The part of x (n long on axis a) that reflect or edge puts before it (after: false) or after
 * it, k long: a slice of x, tiled for edge. */
static sx_cg_node *pad_part(sx_cg_graph *g, sx_cg_node *x, int rank, int a, int64_t n, int64_t k,
                            pad_mode mode, bool after)
{
    sx_slice sl[SX_MAX_RANK];
    for (int i = 0; i < rank; i++)
        sl[i] = SX_SLICE_ALL;
    if (mode == PAD_REFLECT) /* before: k .. 1; after: n-2 .. n-1-k */
        sl[a] = after ? (sx_slice){n - 2, n - 2 - k < 0 ? SX_SLICE_END : n - 2 - k, -1}
                      : (sx_slice){k, 0, -1};
    else /* edge: the one element, k times */
        sl[a] = after ? (sx_slice){n - 1, n, 1} : (sx_slice){0, 1, 1};
    sx_cg_node *y = sx_cg_slice(g, x, sl);
    if (mode == PAD_EDGE && k > 1) {
        int64_t reps[SX_MAX_RANK];
        for (int i = 0; i < rank; i++)
            reps[i] = i == a ? k : 1;
        y = sx_cg_tile(g, y, reps);
    }
    return y;
}

/* Pad input 0 by pads (n of them: begins then ends, ONNX order) in mode (value: constant's). */
static sx_status pad_with(ox_ctx *c, const int64_t *pads, int64_t n, pad_mode mode, double value)
{
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    if (n != 2 * v->rank)
        return ox_fail(c, SX_E_FORMAT, "%lld pads for rank %d", (long long)n, v->rank);
    int64_t before[SX_MAX_RANK], after[SX_MAX_RANK];
    for (int k = 0; k < v->rank; k++) {
        int a = lay_axis(v->lay, k);
        if (pads[k] < 0 || pads[k + v->rank] < 0)
            return ox_fail(c, SX_E_UNSUPPORTED, "negative pads");
        before[a] = pads[k];
        after[a] = pads[k + v->rank];
        /* reflect mirrors without the edge element: fewer pads than elements; edge needs an
         * element to repeat */
        const int64_t dim = v->shape[k];
        const bool padded = pads[k] > 0 || pads[k + v->rank] > 0;
        if (padded && ((mode == PAD_REFLECT && (pads[k] >= dim || pads[k + v->rank] >= dim)) ||
                       (mode == PAD_EDGE && dim == 0)))
            return ox_fail(c, SX_E_SHAPE, "mode %s: pads %lld and %lld on axis %d of size %lld",
                           pad_modes[mode], (long long)pads[k], (long long)pads[k + v->rank], k,
                           (long long)dim);
    }
    c->no_batch = v->rank > 0 && (pads[0] != 0 || pads[v->rank] != 0);
    if (mode == PAD_CONSTANT)
        return ox_out(c, 0, sx_cg_pad(c->g, x, before, after, value), v->lay);
    /* one axis after the other, each a concatenation of slices of the padded-so-far value */
    sx_cg_node *y = x;
    for (int k = 0; k < v->rank && y != NULL; k++) {
        const int a = lay_axis(v->lay, k);
        if (before[a] == 0 && after[a] == 0)
            continue;
        sx_cg_node *parts[3];
        int np = 0;
        if (before[a] > 0)
            parts[np++] = pad_part(c->g, y, v->rank, a, v->shape[k], before[a], mode, false);
        parts[np++] = y;
        if (after[a] > 0)
            parts[np++] = pad_part(c->g, y, v->rank, a, v->shape[k], after[a], mode, true);
        y = sx_cg_concat(c->g, np, parts, a);
    }
    return ox_out(c, 0, y, v->lay);
}

static sx_status op_Expand(ox_ctx *c)
{
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_node(c, 0, OX_ONNX, &v, &x));
    const int64_t *t;
    int64_t n;
    SX_TRY(ox_in_ints(c, 1, &t, &n));
    int r;
    int64_t s[SX_MAX_RANK];
    if (n > SX_MAX_RANK)
        return ox_fail(c, SX_E_UNSUPPORTED, "shape of rank %lld", (long long)n);
    if (sx_shape_broadcast("Expand", v->rank, v->shape, (int)n, t, &r, s) != SX_OK)
        return ox_fail(c, SX_E_SHAPE, "%s", sx_last_error());
    return ox_out(c, 0, sx_cg_broadcast(c->g, x, r, s), OX_ONNX);
}

static sx_status op_Tile(ox_ctx *c)
{
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_node(c, 0, OX_ONNX, &v, &x));
    const int64_t *t;
    int64_t n;
    SX_TRY(ox_in_ints(c, 1, &t, &n));
    if (n != v->rank)
        return ox_fail(c, SX_E_FORMAT, "%lld repeats for rank %d", (long long)n, v->rank);
    return ox_out(c, 0, sx_cg_tile(c->g, x, t), OX_ONNX);
}

/* The indices of Gather's input 1 as a rank-1 node of the import dtype, d the gathered axis's
 * size: known indices checked and made non-negative; indices the graph computes (a model's
 * integer input, token ids) flattened, checked when evaluated (they must be in [0, d)). */
static sx_status gather_indices(ox_ctx *c, ox_val *iv, int64_t d, sx_cg_node **out)
{
    int64_t ni = sx_shape_size(iv->rank, iv->shape);
    if (iv->ints == NULL) {
        sx_cg_node *n;
        SX_TRY(ox_node(c, iv, OX_ONNX, &n));
        *out = ox_reshape(c, n, 1, &ni);
        return *out != NULL ? SX_OK : ox_graph_fail(c);
    }
    const int64_t *idx = iv->ints;
    for (int64_t i = 0; i < ni; i++)
        if (idx[i] < -d || idx[i] >= d)
            return ox_fail(c, SX_E_RANGE, "index %lld out of range for an axis of size %lld",
                           (long long)idx[i], (long long)d);
    sx_tensor *it = NULL;
    SX_TRY(sx_tensor_new(c->dt, 1, &ni, &it));
    for (int64_t i = 0; i < ni; i++)
        sx_tensor_set(it, i, (double)(idx[i] < 0 ? idx[i] + d : idx[i]));
    *out = sx_cg_const(c->g, it);
    sx_tensor_free(it);
    return *out != NULL ? SX_OK : ox_graph_fail(c);
}

/* Gather along an axis: rows of the axis brought to the front (known integer data is folded
 * before this mapping: fold.c). */
static sx_status op_Gather(ox_ctx *c)
{
    ox_val *v, *iv;
    SX_TRY(ox_in_req(c, 0, &v));
    SX_TRY(ox_in_req(c, 1, &iv));
    int64_t a;
    SX_TRY(ox_attr_int(c, "axis", 0, &a));
    int axis;
    SX_TRY(ox_axis(c, a, v->rank, "attribute axis", &axis));
    /* the result's ONNX shape: data's with the axis replaced by the indices' shape */
    int r = v->rank - 1 + iv->rank;
    if (r > SX_MAX_RANK)
        return ox_fail(c, SX_E_UNSUPPORTED, "result of rank %d", r);
    int64_t s[SX_MAX_RANK];
    memcpy(s, v->shape, (size_t)axis * sizeof *s);
    memcpy(s + axis, iv->shape, (size_t)iv->rank * sizeof *s);
    memcpy(s + axis + iv->rank, v->shape + axis + 1, (size_t)(v->rank - axis - 1) * sizeof *s);
    sx_cg_graph *g = c->g;
    sx_cg_node *x, *in;
    SX_TRY(ox_node(c, v, OX_ONNX, &x));
    SX_TRY(gather_indices(c, iv, v->shape[axis], &in));
    /* axis 0 of the result is the indices' first axis when axis is 0: the batch of token ids */
    c->no_batch = axis == 0 && !(iv->batch0 && iv->rank > 0);
    int perm[SX_MAX_RANK];
    perm[0] = axis;
    for (int i = 0, k = 1; i < v->rank; i++)
        if (i != axis)
            perm[k++] = i;
    sx_cg_node *y = sx_cg_gather(g, axis ? sx_cg_permute(g, x, perm) : x, in);
    if (axis && y != NULL) { /* back: the gathered axis to its place */
        int back[SX_MAX_RANK];
        for (int i = 0; i < v->rank; i++)
            back[perm[i]] = i;
        y = sx_cg_permute(g, y, back);
    }
    return ox_out(c, 0, ox_reshape(c, y, r, s), OX_ONNX);
}

/* ---------------------------------------------------------------- constants and shapes */

static sx_status const_tensor(ox_ctx *c, const Onnx__TensorProto *t)
{
    if (ox_dtype_is_float(t->data_type)) {
        sx_tensor *v = NULL;
        SX_TRY(ox_tensor_float(c, t, c->dt, &v));
        sx_cg_node *n = sx_cg_const(c->g, v);
        sx_status s = ox_out(c, 0, n, OX_ONNX);
        ox_val *ov = s == SX_OK && ox_n_out(c) > 0 ? ox_find(c, c->node->output[0]) : NULL;
        if (ov != NULL && ov->n == n)
            ov->cst = v;
        else
            sx_tensor_free(v);
        return s;
    }
    int64_t *v = NULL, n;
    int rank;
    int64_t shape[SX_MAX_RANK];
    SX_TRY(ox_tensor_dims(c, t, &rank, shape));
    SX_TRY(ox_tensor_ints(c, t, &v, &n));
    sx_status s = ox_out_ints_typed(c, 0, rank, shape, v, t->data_type);
    sx_free(v);
    return s;
}

static sx_status op_Constant(ox_ctx *c)
{
    const Onnx__AttributeProto *a;
    if ((a = ox_attr(c, "value")) != NULL && a->t != NULL)
        return const_tensor(c, a->t);
    if ((a = ox_attr(c, "value_float")) != NULL || (a = ox_attr(c, "value_floats")) != NULL) {
        bool one = a->n_floats == 0;
        int64_t n = one ? 1 : (int64_t)a->n_floats;
        sx_tensor *v = NULL;
        SX_TRY(sx_tensor_new(c->dt, one ? 0 : 1, &n, &v));
        for (int64_t i = 0; i < n; i++)
            sx_tensor_set(v, i, (double)(one ? a->f : a->floats[i]));
        sx_cg_node *nd = sx_cg_const(c->g, v);
        sx_status s = ox_out(c, 0, nd, OX_ONNX);
        ox_val *ov = s == SX_OK ? ox_find(c, c->node->output[0]) : NULL;
        if (ov != NULL && ov->n == nd)
            ov->cst = v;
        else
            sx_tensor_free(v);
        return s;
    }
    if ((a = ox_attr(c, "value_int")) != NULL)
        return ox_out_ints(c, 0, 0, NULL, &a->i);
    if ((a = ox_attr(c, "value_ints")) != NULL) {
        int64_t n = (int64_t)a->n_ints;
        return ox_out_ints(c, 0, 1, &n, a->ints);
    }
    return ox_fail(c, SX_E_UNSUPPORTED, "no value, value_float(s) or value_int(s) attribute");
}

static sx_status op_Shape(ox_ctx *c)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    int64_t start, end;
    SX_TRY(ox_attr_int(c, "start", 0, &start));
    SX_TRY(ox_attr_int(c, "end", v->rank, &end));
    if (start < 0)
        start += v->rank;
    if (end < 0)
        end += v->rank;
    start = start < 0 ? 0 : start > v->rank ? v->rank : start;
    end = end < start ? start : end > v->rank ? v->rank : end;
    int64_t n = end - start;
    return ox_out_ints(c, 0, 1, &n, v->shape + start);
}

static sx_status op_ConstantOfShape(ox_ctx *c)
{
    const int64_t *t;
    int64_t n;
    SX_TRY(ox_in_ints(c, 0, &t, &n));
    if (n > SX_MAX_RANK)
        return ox_fail(c, SX_E_UNSUPPORTED, "shape of rank %lld", (long long)n);
    const Onnx__AttributeProto *a = ox_attr(c, "value");
    double value = 0;
    bool is_float = true;
    if (a != NULL && a->t != NULL) {
        is_float = ox_dtype_is_float(a->t->data_type);
        if (is_float) {
            sx_tensor *v = NULL;
            SX_TRY(ox_tensor_float(c, a->t, c->dt, &v));
            value = v->size == 1 ? sx_tensor_get(v, 0) : (double)NAN;
            sx_tensor_free(v);
        } else {
            int64_t *iv = NULL, cnt;
            SX_TRY(ox_tensor_ints(c, a->t, &iv, &cnt));
            value = cnt == 1 ? (double)iv[0] : (double)NAN;
            sx_free(iv);
        }
        if (isnan(value))
            return ox_fail(c, SX_E_FORMAT, "attribute value is not one element");
    }
    if (sx_shape_check("ConstantOfShape", (int)n, t) != SX_OK)
        return ox_fail(c, SX_E_SHAPE, "bad shape");
    if (sx_shape_size((int)n, t) > ((int64_t)1 << 28)) /* no file makes strix allocate GBs */
        return ox_fail(c, SX_E_UNSUPPORTED, "a constant of %lld elements",
                       (long long)sx_shape_size((int)n, t));
    if (!is_float) {
        int64_t cnt = sx_shape_size((int)n, t);
        if (cnt > 256)
            return ox_fail(c, SX_E_UNSUPPORTED, "an integer tensor of %lld elements",
                           (long long)cnt);
        int64_t buf[256];
        for (int64_t i = 0; i < cnt; i++)
            buf[i] = (int64_t)value;
        return ox_out_ints(c, 0, (int)n, t, buf);
    }
    sx_tensor *v = NULL;
    SX_TRY(sx_tensor_full(c->dt, (int)n, t, value, &v));
    sx_status s = ox_out(c, 0, sx_cg_const(c->g, v), OX_ONNX);
    sx_tensor_free(v);
    return s;
}

/* Cast between float types (the identity in strix's dtype) or between integer types. */
static sx_status op_Cast(ox_ctx *c)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    int64_t to;
    SX_TRY(ox_attr_int(c, "to", 0, &to));
    bool to_float = ox_dtype_is_float((int32_t)to);
    /* a graph value holding integers cast to another integer type: the same numbers (a
     * narrower type's wrapping is not computed) */
    bool int_to_int =
        v->int_graph && !to_float &&
        (to == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 || to == ONNX__TENSOR_PROTO__DATA_TYPE__INT32);
    if (v->n != NULL && (to_float || int_to_int))
        return ox_out(c, 0, v->n, v->lay);
    bool to_int = !to_float && to != ONNX__TENSOR_PROTO__DATA_TYPE__STRING &&
                  to != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 &&
                  to != ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    if (v->n == NULL && to_int)
        return ox_out_ints_typed(c, 0, v->rank, v->shape, v->ints, (int32_t)to);
    if (to_int) { /* floats to integers: toward zero (bool: x != 0); out of range not wrapped */
        sx_cg_graph *g = c->g;
        sx_cg_node *zero = sx_cg_scalar_like(g, v->n, 0), *y;
        if (to == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL)
            y = sx_cg_ne(g, v->n, zero);
        else
            y = sx_cg_where(g, sx_cg_lt(g, v->n, zero), sx_cg_ceil(g, v->n), sx_cg_floor(g, v->n));
        return ox_out(c, 0, y, v->lay);
    }
    return ox_fail(c, SX_E_UNSUPPORTED, "attribute to = %s from a %s tensor",
                   ox_dtype_name((int32_t)to), v->n ? "float" : "integer");
}

/* ---------------------------------------------------------------- arg extremes */

/* ArgMax / ArgMin along one axis: the index as a float value of the import dtype (exact below
 * 2^24 in f32); select_last_index takes the last extreme (the first of the reversed axis). */
static sx_status arg_extreme(ox_ctx *c, bool max)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    int64_t a, keep, last;
    SX_TRY(ox_attr_int(c, "axis", 0, &a));
    SX_TRY(ox_attr_int(c, "keepdims", 1, &keep));
    SX_TRY(ox_attr_int(c, "select_last_index", 0, &last));
    int axis;
    SX_TRY(ox_axis(c, a, v->rank, "attribute axis", &axis));
    ox_layout lay = keep ? v->lay : OX_ONNX;
    sx_cg_node *x;
    SX_TRY(ox_node(c, v, lay, &x));
    sx_cg_graph *g = c->g;
    int ax = lay_axis(lay, axis);
    int64_t d = v->shape[axis];
    if (last && d > 1) {
        sx_slice sl[SX_MAX_RANK];
        for (int k = 0; k < v->rank; k++)
            sl[k] = SX_SLICE_ALL;
        sl[ax] = (sx_slice){d - 1, SX_SLICE_END, -1};
        x = sx_cg_slice(g, x, sl);
    }
    sx_cg_node *y = max ? sx_cg_argmax(g, x, SX_AXIS(ax), keep != 0)
                        : sx_cg_argmin(g, x, SX_AXIS(ax), keep != 0);
    if (last && d > 1) /* index i of the reversed axis is d - 1 - i */
        y = sx_cg_add_scalar(g, sx_cg_neg(g, y), (double)(d - 1));
    c->no_batch = axis == 0;
    return ox_out(c, 0, y, lay);
}

static sx_status op_ArgMax(ox_ctx *c)
{
    return arg_extreme(c, true);
}

static sx_status op_ArgMin(ox_ctx *c)
{
    return arg_extreme(c, false);
}

/* ---------------------------------------------------------------- transposed convolution */

/* ConvTranspose (2-d): strix's conv_transpose2d has ONNX's sizes; output_shape becomes the
 * padding (and output padding) that gives it, as ONNX's reference computes them. */
static sx_status op_ConvTranspose(ox_ctx *c)
{
    ox_val *xv, *wv;
    SX_TRY(ox_in_req(c, 0, &xv));
    SX_TRY(ox_in_req(c, 1, &wv));
    SX_TRY(need_rank4(c, xv, "input X"));
    SX_TRY(need_rank4(c, wv, "weight W"));
    int64_t kh = wv->shape[2], kw = wv->shape[3], group;
    SX_TRY(kernel_shape(c, false, &kh, &kw));
    if (kh != wv->shape[2] || kw != wv->shape[3])
        return ox_fail(c, SX_E_FORMAT, "attribute kernel_shape (%lld, %lld) but W is %lldx%lld",
                       (long long)kh, (long long)kw, (long long)wv->shape[2],
                       (long long)wv->shape[3]);
    window w;
    SX_TRY(window_attrs(c, kh, kw, &w));
    SX_TRY(ox_attr_int(c, "group", 1, &group));
    if (group < 1 || group > xv->shape[1] || xv->shape[1] != wv->shape[0])
        return ox_fail(c, SX_E_FORMAT, "attribute group %lld, X of %lld channels, W of %lld",
                       (long long)group, (long long)xv->shape[1], (long long)wv->shape[0]);
    const int64_t *op, *os;
    int nop, nos;
    SX_TRY(ox_attr_ints(c, "output_padding", &op, &nop));
    SX_TRY(ox_attr_ints(c, "output_shape", &os, &nos));
    if ((nop != 0 && nop != 2) || (nos != 0 && nos != 2))
        return ox_fail(c, SX_E_UNSUPPORTED,
                       "attributes output_padding (%d values), output_shape (%d): want 2", nop,
                       nos);
    sx_conv2d_params p = sx_conv2d_params_default();
    p.stride_h = w.sh;
    p.stride_w = w.sw;
    p.dilation_h = w.dh;
    p.dilation_w = w.dw;
    p.padding = w.padding;
    p.pad_top = w.pt;
    p.pad_left = w.pl;
    p.pad_bottom = w.pb;
    p.pad_right = w.pr;
    p.groups = (int)group;
    int64_t opad[2] = {nop ? op[0] : 0, nop ? op[1] : 0};
    for (int i = 0; i < 2; i++)
        if (opad[i] < 0 || opad[i] > (1 << 20))
            return ox_fail(c, SX_E_FORMAT, "attribute output_padding %lld", (long long)opad[i]);
    if (nos == 2) { /* pads from the wanted size: total P = (in-1) s + K + op - out */
        bool upper = w.padding == SX_PAD_SAME_UPPER;
        int64_t in[2] = {xv->shape[2], xv->shape[3]}, st[2] = {w.sh, w.sw},
                k[2] = {(int64_t)w.dh * (kh - 1) + 1, (int64_t)w.dw * (kw - 1) + 1}, b[2], e[2];
        for (int i = 0; i < 2; i++) {
            if (os[i] < 1 || os[i] > (1 << 24))
                return ox_fail(c, SX_E_FORMAT, "attribute output_shape %lld", (long long)os[i]);
            int64_t P = (in[i] - 1) * st[i] + k[i] + opad[i] - os[i];
            int64_t half = P >= 0 ? P / 2 : -((-P + 1) / 2); /* Python's P // 2 */
            b[i] = upper ? half : P - half;
            e[i] = upper ? P - half : half;
            if (b[i] < 0)
                return ox_fail(c, SX_E_UNSUPPORTED,
                               "attribute output_shape %lld needs a "
                               "negative leading pad",
                               (long long)os[i]);
            if (e[i] < 0) { /* rows past the end: output padding */
                opad[i] -= e[i];
                e[i] = 0;
            }
        }
        p.padding = SX_PAD_EXPLICIT;
        p.pad_top = (int)b[0];
        p.pad_bottom = (int)e[0];
        p.pad_left = (int)b[1];
        p.pad_right = (int)e[1];
    }
    p.output_padding_h = (int)opad[0];
    p.output_padding_w = (int)opad[1];
    sx_cg_node *x, *k;
    SX_TRY(ox_node(c, xv, OX_NHWC, &x));
    SX_TRY(ox_node(c, wv, OX_ONNX, &k));
    static const int to_k[4] = {2, 3, 1,
                                0}; /* (c_in, c_out/g, kh, kw) -> (kh, kw, c_out/g, c_in) */
    k = sx_cg_permute(c->g, k, to_k);
    sx_cg_node *y = sx_cg_conv_transpose2d(c->g, x, k, &p);
    ox_val *bv = ox_in(c, 2);
    if (bv != NULL && y != NULL) {
        if (bv->rank != 1)
            return ox_fail(c, SX_E_FORMAT, "bias B of rank %d", bv->rank);
        sx_cg_node *bn;
        SX_TRY(ox_node(c, bv, OX_ONNX, &bn));
        y = sx_cg_add(c->g, y, bn);
    }
    return ox_out(c, 0, y, OX_NHWC);
}

/* ---------------------------------------------------------------- resizing */

/* Resize and Upsample, separable: each resized axis is a fixed linear map of that axis, its
 * weights computed here as ONNX's reference computes them (coordinate transformation, the n
 * nearest input positions of the edge-padded axis, their coefficients). Nearest modes gather
 * the chosen rows (exact); linear and cubic multiply by the (out, in) weight matrix. */
typedef enum { RS_NEAREST, RS_LINEAR, RS_CUBIC } rs_mode;
typedef enum {
    RS_HALF_PIXEL,
    RS_PYTORCH_HALF_PIXEL,
    RS_ALIGN_CORNERS,
    RS_ASYMMETRIC,
    RS_TF_HALF_PIXEL_FOR_NN,
    RS_TF_CROP_AND_RESIZE
} rs_coord;
typedef enum { RS_PREFER_FLOOR, RS_PREFER_CEIL, RS_FLOOR, RS_CEIL } rs_nearest;

typedef struct rs_spec {
    rs_mode mode;
    rs_coord coord;
    rs_nearest nearest;
    double cubic_a;
    bool exclude_outside;
    double extrapolation;
} rs_spec;

/* The input position output x reads (ONNX's x_original); *inside false when a crop puts it
 * outside the input (the extrapolation value). */
static double rs_source(const rs_spec *r, int64_t x, int64_t in, double scale, double roi_a,
                        double roi_b, bool *inside)
{
    double out_w = scale * (double)in, xo;
    *inside = true;
    switch (r->coord) {
    case RS_HALF_PIXEL:
        return ((double)x + 0.5) / scale - 0.5;
    case RS_PYTORCH_HALF_PIXEL:
        return out_w == 1 ? -0.5 : ((double)x + 0.5) / scale - 0.5;
    case RS_ALIGN_CORNERS:
        return out_w == 1 ? 0 : (double)x * (double)(in - 1) / (out_w - 1);
    case RS_ASYMMETRIC:
        return (double)x / scale;
    case RS_TF_HALF_PIXEL_FOR_NN:
        return ((double)x + 0.5) / scale;
    case RS_TF_CROP_AND_RESIZE:
        xo = out_w == 1 ? (roi_b - roi_a) * (double)(in - 1) / 2
                        : (double)x * (roi_b - roi_a) * (double)(in - 1) / (out_w - 1);
        xo += roi_a * (double)(in - 1);
        *inside = xo >= 0 && xo <= (double)(in - 1);
        return xo;
    }
    return 0;
}

/* Row x of the weights (w[0..in)), ONNX's _interpolate_1d_with_x. */
static void rs_row(const rs_spec *r, double xo, int64_t in, double *w)
{
    int n = r->mode == RS_CUBIC ? 4 : 2;
    double fl = floor(xo), ratio = xo == fl ? 1 : xo - fl, cf[4];
    if (r->mode == RS_NEAREST) {
        bool second = ratio == 1 || r->nearest == RS_CEIL ||
                      (r->nearest == RS_PREFER_FLOOR && ratio > 0.5) ||
                      (r->nearest == RS_PREFER_CEIL && ratio >= 0.5);
        if (r->nearest == RS_FLOOR && ratio != 1)
            second = false;
        cf[0] = second ? 0 : 1;
        cf[1] = second ? 1 : 0;
    } else if (r->mode == RS_LINEAR) {
        cf[0] = 1 - ratio;
        cf[1] = ratio;
    } else {
        double A = r->cubic_a, t = ratio + 1, u = 1 - ratio, v = 2 - ratio;
        cf[0] = ((A * t - 5 * A) * t + 8 * A) * t - 4 * A;
        cf[1] = ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1;
        cf[2] = ((A + 2) * u - (A + 3)) * u * u + 1;
        cf[3] = ((A * v - 5 * A) * v + 8 * A) * v - 4 * A;
    }
    /* the n nearest positions of the axis edge-padded by ceil(n/2), ties to the lower: those
     * around floor(xo) (xo - 1 and xo for a whole xo), kept within the padded axis */
    int64_t pad = (n + 1) / 2, lim = in + 2 * pad;
    double xp = xo + (double)pad;
    double base = (xp == floor(xp) ? xp - 1 : floor(xp)) - (n / 2 - 1);
    if (base > (double)(lim - n))
        base = (double)(lim - n);
    if (base < 0)
        base = 0;
    int64_t first = (int64_t)base;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        int64_t at = first + i - pad;
        if (r->exclude_outside && (at < 0 || at >= in))
            cf[i] = 0;
        sum += cf[i];
    }
    for (int64_t i = 0; i < in; i++)
        w[i] = 0;
    for (int i = 0; i < n; i++) {
        int64_t at = first + i - pad;
        at = at < 0 ? 0 : at >= in ? in - 1 : at;
        w[at] += r->exclude_outside && sum != 0 ? cf[i] / sum : cf[i];
    }
}

/* Resize node axis ax of x (ONNX axis of length in) to out. */
static sx_status rs_axis(ox_ctx *c, const rs_spec *r, sx_cg_node **x, int ax, int64_t in,
                         int64_t out, double scale, double roi_a, double roi_b, bool *inside)
{
    sx_cg_graph *g = c->g;
    int rank = sx_cg_node_rank(*x);
    if (in < 1 || out < 1 || in > (1 << 20) || out > (1 << 20) || in * out > ((int64_t)1 << 26))
        return ox_fail(c, SX_E_UNSUPPORTED, "resize of an axis from %lld to %lld", (long long)in,
                       (long long)out);
    double *w = sx_alloc((size_t)in * sizeof *w);
    sx_tensor *t = NULL;
    sx_status s = w ? SX_OK : SX_E_NOMEM;
    bool ident = in == out;
    if (s == SX_OK)
        s = r->mode == RS_NEAREST ? sx_tensor_new(c->dt, 1, &out, &t)
                                  : sx_tensor_new(c->dt, 2, (int64_t[]){in, out}, &t);
    for (int64_t o = 0; s == SX_OK && o < out; o++) {
        double xo = rs_source(r, o, in, scale, roi_a, roi_b, &inside[o]);
        rs_row(r, xo, in, w);
        if (!inside[o]) /* the extrapolation value goes in later */
            for (int64_t i = 0; i < in; i++)
                w[i] = 0;
        int64_t pick = 0;
        for (int64_t i = 0; i < in; i++) {
            if (w[i] != 0 && (pick == 0 && w[0] == 0))
                pick = i;
            if (w[i] != (i == o ? 1 : 0))
                ident = false;
            if (r->mode != RS_NEAREST)
                sx_tensor_set(t, i * out + o, w[i]); /* (in, out): x @ t */
        }
        if (r->mode == RS_NEAREST) {
            for (int64_t i = 0; i < in; i++)
                if (w[i] != 0 && w[i] != 1)
                    s = ox_fail(c, SX_E_UNSUPPORTED, "nearest resize without one source");
            sx_tensor_set(t, o, (double)pick);
        }
    }
    sx_free(w);
    if (s != SX_OK || ident) {
        sx_tensor_free(t);
        return s;
    }
    sx_cg_node *k = sx_cg_const(g, t);
    sx_tensor_free(t);
    int perm[SX_MAX_RANK], back[SX_MAX_RANK];
    /* nearest: axis ax to the front, gather rows; else axis ax last, times the matrix */
    int dst = r->mode == RS_NEAREST ? 0 : rank - 1;
    perm[dst] = ax;
    for (int i = 0, j = 0; i < rank; i++) {
        if (j == dst)
            j++;
        if (i != ax)
            perm[j++] = i;
    }
    for (int i = 0; i < rank; i++)
        back[perm[i]] = i;
    bool moved = ax != dst;
    sx_cg_node *y = moved ? sx_cg_permute(g, *x, perm) : *x;
    y = r->mode == RS_NEAREST ? sx_cg_gather(g, y, k) : sx_cg_matmul(g, y, k, false, false);
    if (moved)
        y = sx_cg_permute(g, y, back);
    if (y == NULL)
        return ox_graph_fail(c);
    *x = y;
    return SX_OK;
}

/* Resize v's axes to out[k] with scale[k] (ONNX order) and map the node's output. */
static sx_status resize_to(ox_ctx *c, const rs_spec *r, ox_val *v, const int64_t *out,
                           const double *scale, const double *roi)
{
    sx_cg_node *x;
    SX_TRY(ox_node(c, v, v->lay, &x));
    int64_t ms[SX_MAX_RANK]; /* the extrapolation mask's shape, node order */
    bool any_out = false, *inside[SX_MAX_RANK] = {NULL};
    sx_status s = SX_OK;
    for (int k = 0; k < v->rank; k++)
        ms[k] = 1;
    for (int k = 0; s == SX_OK && k < v->rank; k++) {
        int ax = lay_axis(v->lay, k);
        inside[k] = sx_calloc((size_t)(out[k] > 0 ? out[k] : 1), sizeof *inside[k]);
        if (inside[k] == NULL) {
            s = SX_E_NOMEM;
            break;
        }
        if (k == 0 && (out[0] != v->shape[0] || scale[0] != 1))
            c->no_batch = true;
        s = rs_axis(c, r, &x, ax, v->shape[k], out[k], scale[k], roi ? roi[k] : 0,
                    roi ? roi[k + v->rank] : 1, inside[k]);
        for (int64_t o = 0; s == SX_OK && o < out[k]; o++)
            any_out |= !inside[k][o];
        ms[ax] = out[k];
    }
    if (s == SX_OK && any_out && r->extrapolation != 0) { /* y + e (1 - mask) where outside */
        sx_tensor *e = NULL;
        s = sx_tensor_new(c->dt, v->rank, ms, &e);
        int64_t idx[SX_MAX_RANK] = {0};
        for (int64_t i = 0; s == SX_OK && i < e->size; i++) {
            bool in_all = true;
            for (int k = 0; k < v->rank; k++)
                in_all &= inside[k][idx[lay_axis(v->lay, k)]];
            sx_tensor_set(e, i, in_all ? 0 : r->extrapolation);
            for (int k = v->rank - 1; k >= 0 && ++idx[k] == ms[k]; k--)
                idx[k] = 0;
        }
        if (s == SX_OK)
            x = sx_cg_add(c->g, x, sx_cg_const(c->g, e));
        sx_tensor_free(e);
    }
    for (int k = 0; k < v->rank; k++)
        sx_free(inside[k]);
    SX_TRY(s);
    return ox_out(c, 0, x, v->lay);
}

/* The float values of input i known at import (a constant or a bound input); *n of them. */
static sx_status in_floats(ox_ctx *c, int i, double *out, int max, int *n)
{
    ox_val *v = ox_in(c, i);
    *n = 0;
    if (v == NULL)
        return SX_OK;
    int64_t cnt = sx_shape_size(v->rank, v->shape);
    if (v->cst == NULL && v->ints == NULL)
        return ox_fail(c, SX_E_UNSUPPORTED, "input %d ('%s') must be known at import time", i,
                       v->name);
    if (cnt > max)
        return ox_fail(c, SX_E_UNSUPPORTED, "input %d ('%s') of %lld values", i, v->name,
                       (long long)cnt);
    for (int64_t k = 0; k < cnt; k++)
        out[k] = v->cst ? sx_tensor_get(v->cst, k) : (double)v->ints[k];
    *n = (int)cnt;
    return SX_OK;
}

static sx_status op_Resize(ox_ctx *c)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    char mode[32], ctm[32], nm[32];
    rs_spec r = {0};
    SX_TRY(ox_attr_str(c, "mode", "nearest", mode, sizeof mode));
    SX_TRY(ox_attr_str(c, "coordinate_transformation_mode", "half_pixel", ctm, sizeof ctm));
    SX_TRY(ox_attr_str(c, "nearest_mode", "round_prefer_floor", nm, sizeof nm));
    SX_TRY(ox_attr_float(c, "cubic_coeff_a", -0.75, &r.cubic_a));
    SX_TRY(ox_attr_float(c, "extrapolation_value", 0, &r.extrapolation));
    int64_t excl;
    SX_TRY(ox_attr_int(c, "exclude_outside", 0, &excl));
    r.exclude_outside = excl != 0;
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const ctms[] = {"half_pixel", "pytorch_half_pixel",   "align_corners",
                                       "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
    static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    int mi = -1, ci = -1, ni = -1;
    for (int i = 0; i < 6; i++) {
        if (i < 3 && strcmp(mode, modes[i]) == 0)
            mi = i;
        if (strcmp(ctm, ctms[i]) == 0)
            ci = i;
        if (i < 4 && strcmp(nm, nms[i]) == 0)
            ni = i;
    }
    if (mi < 0 || ci < 0 || ni < 0)
        return ox_fail(c, SX_E_UNSUPPORTED,
                       "attributes mode '%s', coordinate_transformation_mode '%s', "
                       "nearest_mode '%s'",
                       mode, ctm, nm);
    r.mode = (rs_mode)mi;
    r.coord = (rs_coord)ci;
    r.nearest = (rs_nearest)ni;
    if (c->opset < 11) { /* Resize-10: X, scales; asymmetric, nearest rounds down */
        r.coord = RS_ASYMMETRIC;
        r.nearest = RS_FLOOR;
    }
    double roi[2 * SX_MAX_RANK], sc[SX_MAX_RANK], sz[SX_MAX_RANK];
    int nroi = 0, nsc = 0, nsz = 0;
    int si = c->opset < 11 ? 1 : 2;
    if (r.coord == RS_TF_CROP_AND_RESIZE)
        SX_TRY(in_floats(c, 1, roi, 2 * SX_MAX_RANK, &nroi));
    SX_TRY(in_floats(c, si, sc, SX_MAX_RANK, &nsc));
    if (c->opset >= 11)
        SX_TRY(in_floats(c, 3, sz, SX_MAX_RANK, &nsz));
    if ((nsc == 0) == (nsz == 0) || (nsc && nsc != v->rank) || (nsz && nsz != v->rank) ||
        (r.coord == RS_TF_CROP_AND_RESIZE && nroi != 2 * v->rank))
        return ox_fail(c, SX_E_FORMAT, "%d scales, %d sizes, %d roi values for rank %d", nsc, nsz,
                       nroi, v->rank);
    int64_t out[SX_MAX_RANK];
    for (int k = 0; k < v->rank; k++) {
        if (nsz) {
            out[k] = (int64_t)sz[k];
            sc[k] = (double)out[k] / (double)v->shape[k];
        } else {
            if (!(sc[k] > 0) || sc[k] * (double)v->shape[k] > (double)(1 << 20))
                return ox_fail(c, SX_E_FORMAT, "scale %g", sc[k]);
            out[k] = (int64_t)(sc[k] * (double)v->shape[k]);
        }
        if (out[k] < 1 || v->shape[k] < 1)
            return ox_fail(c, SX_E_UNSUPPORTED, "axis %d resized from %lld to %lld", k,
                           (long long)v->shape[k], (long long)out[k]);
    }
    return resize_to(c, &r, v, out, sc, nroi ? roi : NULL);
}

/* Upsample (opsets 7-10; deprecated in 10): scales from the attribute (7) or input 1 (9+),
 * asymmetric coordinates, nearest rounding down. */
static sx_status op_Upsample(ox_ctx *c)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    char mode[32];
    SX_TRY(ox_attr_str(c, "mode", "nearest", mode, sizeof mode));
    rs_spec r = {0};
    r.coord = RS_ASYMMETRIC;
    r.nearest = RS_FLOOR;
    if (strcmp(mode, "nearest") == 0)
        r.mode = RS_NEAREST;
    else if (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0)
        r.mode = RS_LINEAR;
    else
        return ox_fail(c, SX_E_UNSUPPORTED, "attribute mode '%s'", mode);
    double sc[SX_MAX_RANK];
    int nsc = 0;
    const Onnx__AttributeProto *a = ox_attr(c, "scales");
    if (a != NULL) {
        if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS || a->n_floats > SX_MAX_RANK)
            return ox_fail(c, SX_E_FORMAT, "attribute scales");
        nsc = (int)a->n_floats;
        for (int k = 0; k < nsc; k++)
            sc[k] = (double)a->floats[k];
    } else {
        SX_TRY(in_floats(c, 1, sc, SX_MAX_RANK, &nsc));
    }
    if (nsc != v->rank)
        return ox_fail(c, SX_E_FORMAT, "%d scales for rank %d", nsc, v->rank);
    int64_t out[SX_MAX_RANK];
    for (int k = 0; k < v->rank; k++) {
        if (!(sc[k] >= 1) || sc[k] * (double)v->shape[k] > (double)(1 << 20))
            return ox_fail(c, SX_E_FORMAT, "scale %g (want >= 1)", sc[k]);
        out[k] = (int64_t)(sc[k] * (double)v->shape[k]);
    }
    return resize_to(c, &r, v, out, sc, NULL);
}

/* ---------------------------------------------------------------- older opsets */

/* Opsets before 11 moved some attributes to inputs later; these read either, by the model's
 * opset, and refuse the other spelling. Opsets 1-6 differ where an op's default was training
 * (Dropout, BatchNormalization before 7), Cast named its type with a string, Concat's axis
 * defaulted to 1 and Tile took tiles and an axis: those are refused or read as they were. */
static sx_status no_attr(ox_ctx *c, const char *name, int below)
{
    if (ox_attr(c, name) != NULL)
        return ox_fail(c, SX_E_FORMAT, "attribute %s (an input since opset %d)", name, below);
    return SX_OK;
}

static sx_status op_Slice_any(ox_ctx *c)
{
    if (c->opset >= 10) {
        SX_TRY(no_attr(c, "starts", 10));
        SX_TRY(no_attr(c, "ends", 10));
        SX_TRY(no_attr(c, "axes", 10));
        return op_Slice(c);
    }
    ox_val *v;
    SX_TRY(ox_in_req(c, 0, &v));
    const int64_t *st, *en, *ax;
    int n, m, na;
    SX_TRY(ox_attr_ints(c, "starts", &st, &n));
    SX_TRY(ox_attr_ints(c, "ends", &en, &m));
    SX_TRY(ox_attr_ints(c, "axes", &ax, &na));
    if (m != n || n > v->rank || (na != 0 && na != n) || n == 0)
        return ox_fail(c, SX_E_FORMAT, "attributes: %d starts, %d ends, %d axes for rank %d", n, m,
                       na, v->rank);
    return slice_with(c, v, st, en, na ? ax : NULL, NULL, n);
}

static sx_status op_Pad_any(ox_ctx *c)
{
    if (c->opset >= 11) {
        SX_TRY(no_attr(c, "pads", 11));
        SX_TRY(no_attr(c, "value", 11));
        return op_Pad(c);
    }
    pad_mode mode = PAD_CONSTANT;
    SX_TRY(pad_mode_of(c, &mode));
    const int64_t *pads;
    int n;
    double value;
    SX_TRY(ox_attr_ints(c, "pads", &pads, &n));
    SX_TRY(ox_attr_float(c, "value", 0, &value));
    return pad_with(c, pads, n, mode, value);
}

/* Clip before 11: min and max attributes (absent: unbounded). */
static sx_status op_Clip_any(ox_ctx *c)
{
    if (c->opset >= 11) {
        SX_TRY(no_attr(c, "min", 11));
        SX_TRY(no_attr(c, "max", 11));
        return op_Clip(c);
    }
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(in_any(c, 0, &v, &x));
    sx_cg_graph *g = c->g;
    double lo, hi;
    SX_TRY(ox_attr_float(c, "min", -INFINITY, &lo));
    SX_TRY(ox_attr_float(c, "max", INFINITY, &hi));
    if (isfinite(lo))
        x = sx_cg_max(g, x, sx_cg_scalar_like(g, x, lo));
    if (isfinite(hi))
        x = sx_cg_min(g, x, sx_cg_scalar_like(g, x, hi));
    return ox_out(c, 0, x, v->lay);
}

/* Dropout: before 7 training unless is_test; 7-11 a ratio attribute (inference: the identity
 * whatever the ratio). */
static sx_status op_Dropout_any(ox_ctx *c)
{
    if (c->opset < 7)
        return ox_fail(c, SX_E_UNSUPPORTED, "opset %d (training mode by default)", c->opset);
    if (c->opset >= 12)
        SX_TRY(no_attr(c, "ratio", 12));
    return op_Dropout(c);
}

/* BatchNormalization: before 7 training by default; 7-8 a spatial attribute (1: per channel,
 * the only kind mapped). */
static sx_status op_BatchNormalization_any(ox_ctx *c)
{
    if (c->opset < 7)
        return ox_fail(c, SX_E_UNSUPPORTED, "opset %d (training mode by default)", c->opset);
    int64_t spatial;
    SX_TRY(ox_attr_int(c, "spatial", 1, &spatial));
    if (c->opset >= 9)
        SX_TRY(no_attr(c, "spatial", 9));
    if (spatial != 1)
        return ox_fail(c, SX_E_UNSUPPORTED, "attribute spatial %lld", (long long)spatial);
    return op_BatchNormalization(c);
}

static sx_status op_Cast_any(ox_ctx *c)
{
    if (c->opset < 6)
        return ox_fail(c, SX_E_UNSUPPORTED, "opset %d (attribute to as a string)", c->opset);
    return op_Cast(c);
}

static sx_status op_Concat_any(ox_ctx *c)
{
    if (c->opset < 4 && ox_attr(c, "axis") == NULL)
        return ox_fail(c, SX_E_UNSUPPORTED, "opset %d without axis (1 by default then)", c->opset);
    return op_Concat(c);
}

static sx_status op_Tile_any(ox_ctx *c)
{
    if (c->opset < 6)
        return ox_fail(c, SX_E_UNSUPPORTED, "opset %d (tiles and axis inputs)", c->opset);
    return op_Tile(c);
}

static sx_status op_Upsample_any(ox_ctx *c)
{
    if (c->opset < 7 || c->opset > 10)
        return ox_fail(c, SX_E_UNSUPPORTED, "Upsample of opset %d (opsets 7-10; Resize after)",
                       c->opset);
    if (c->opset >= 9)
        SX_TRY(no_attr(c, "scales", 9));
    return op_Upsample(c);
}

/* ---------------------------------------------------------------- the table */

/* Alphabetical (sx_onnx_op_name lists them in this order). */
static const ox_op ops[] = {
    {"Abs", op_Abs, ""},
    {"Acos", ox_op_Acos, ""},
    {"Acosh", ox_op_Acosh, ""},
    {"Add", op_Add, ""},
    {"And", op_And, ""},
    {"ArgMax", op_ArgMax, "axis,keepdims,select_last_index"},
    {"ArgMin", op_ArgMin, "axis,keepdims,select_last_index"},
    {"Asin", ox_op_Asin, ""},
    {"Asinh", ox_op_Asinh, ""},
    {"Atan", ox_op_Atan, ""},
    {"Atanh", ox_op_Atanh, ""},
    {"AveragePool", op_AveragePool,
     "auto_pad,ceil_mode,count_include_pad,kernel_shape,pads,strides"},
    {"BatchNormalization", op_BatchNormalization_any, "epsilon,momentum,spatial,training_mode"},
    {"BitShift", ox_op_BitShift, "direction"},
    {"BlackmanWindow", ox_op_BlackmanWindow, "output_datatype,periodic"},
    {"Cast", op_Cast_any, "to"},
    {"Ceil", op_Ceil, ""},
    {"Celu", ox_op_Celu, "alpha"},
    {"Clip", op_Clip_any, "max,min"},
    {"Compress", ox_op_Compress, "axis"},
    {"Concat", op_Concat_any, "axis"},
    {"Constant", op_Constant, "value,value_float,value_floats,value_int,value_ints"},
    {"ConstantOfShape", op_ConstantOfShape, "value"},
    {"Conv", op_Conv, "auto_pad,dilations,group,kernel_shape,pads,strides"},
    {"ConvTranspose", op_ConvTranspose,
     "auto_pad,dilations,group,kernel_shape,output_padding,output_shape,pads,strides"},
    {"Cos", op_Cos, ""},
    {"Cosh", ox_op_Cosh, ""},
    {"CumSum", ox_op_CumSum, "exclusive,reverse"},
    {"DepthToSpace", ox_op_DepthToSpace, "blocksize,mode"},
    {"DequantizeLinear", ox_op_DequantizeLinear, "axis"},
    {"Det", ox_op_Det, ""},
    {"Div", op_Div, ""},
    {"Dropout", op_Dropout_any, "ratio,seed"},
    {"DynamicQuantizeLinear", ox_op_DynamicQuantizeLinear, ""},
    {"Einsum", ox_op_Einsum, "equation"},
    {"Elu", op_Elu, "alpha"},
    {"Equal", op_Equal, ""},
    {"Erf", op_Erf, ""},
    {"Exp", op_Exp, ""},
    {"Expand", op_Expand, ""},
    {"EyeLike", ox_op_EyeLike, "dtype,k"},
    {"Flatten", op_Flatten, "axis"},
    {"Floor", op_Floor, ""},
    {"Gather", op_Gather, "axis"},
    {"GatherElements", ox_op_GatherElements, "axis"},
    {"GatherND", ox_op_GatherND, "batch_dims"},
    {"Gemm", op_Gemm, "alpha,beta,transA,transB"},
    {"GlobalAveragePool", op_GlobalAveragePool, ""},
    {"GlobalMaxPool", op_GlobalMaxPool, ""},
    {"Greater", op_Greater, ""},
    {"GreaterOrEqual", op_GreaterOrEqual, ""},
    {"HammingWindow", ox_op_HammingWindow, "output_datatype,periodic"},
    {"HannWindow", ox_op_HannWindow, "output_datatype,periodic"},
    {"HardSigmoid", op_HardSigmoid, "alpha,beta"},
    {"HardSwish", op_HardSwish, ""},
    {"Hardmax", ox_op_Hardmax, "axis"},
    {"Identity", op_Identity, ""},
    {"InstanceNormalization", op_InstanceNormalization, "epsilon"},
    {"IsInf", ox_op_IsInf, "detect_negative,detect_positive"},
    {"IsNaN", ox_op_IsNaN, ""},
    {"LRN", ox_op_LRN, "alpha,beta,bias,size"},
    {"LayerNormalization", op_LayerNormalization, "axis,epsilon,stash_type"},
    {"LeakyRelu", op_LeakyRelu, "alpha"},
    {"Less", op_Less, ""},
    {"LessOrEqual", op_LessOrEqual, ""},
    {"Log", op_Log, ""},
    {"LogSoftmax", op_LogSoftmax, "axis"},
    {"MatMul", op_MatMul, ""},
    {"Max", op_Max, ""},
    {"MaxPool", op_MaxPool, "auto_pad,ceil_mode,dilations,kernel_shape,pads,storage_order,strides"},
    {"Mean", op_Mean, ""},
    {"MeanVarianceNormalization", ox_op_MeanVarianceNormalization, "axes"},
    {"Min", op_Min, ""},
    {"Mod", ox_op_Mod, "fmod"},
    {"Mul", op_Mul, ""},
    {"Neg", op_Neg, ""},
    {"NegativeLogLikelihoodLoss", ox_op_NegativeLogLikelihoodLoss, "ignore_index,reduction"},
    {"Not", op_Not, ""},
    {"OneHot", ox_op_OneHot, "axis"},
    {"Or", op_Or, ""},
    {"PRelu", op_PRelu, ""},
    {"Pad", op_Pad_any, "mode,pads,value"},
    {"Pow", op_Pow, ""},
    {"QuantizeLinear", ox_op_QuantizeLinear, "axis"},
    {"Range", op_known_only, ""},
    {"Reciprocal", op_Reciprocal, ""},
    {"ReduceL1", op_ReduceL1, "axes,keepdims"},
    {"ReduceL2", op_ReduceL2, "axes,keepdims"},
    {"ReduceLogSum", op_ReduceLogSum, "axes,keepdims"},
    {"ReduceLogSumExp", op_ReduceLogSumExp, "axes,keepdims"},
    {"ReduceMax", op_ReduceMax, "axes,keepdims"},
    {"ReduceMean", op_ReduceMean, "axes,keepdims"},
    {"ReduceMin", op_ReduceMin, "axes,keepdims"},
    {"ReduceProd", op_ReduceProd, "axes,keepdims"},
    {"ReduceSum", op_ReduceSum, "axes,keepdims,noop_with_empty_axes"},
    {"ReduceSumSquare", op_ReduceSumSquare, "axes,keepdims"},
    {"Relu", op_Relu, ""},
    {"Reshape", op_Reshape, "allowzero"},
    {"Resize", op_Resize,
     "coordinate_transformation_mode,cubic_coeff_a,exclude_outside,extrapolation_value,mode,"
     "nearest_mode"},
    {"ReverseSequence", ox_op_ReverseSequence, "batch_axis,time_axis"},
    {"Round", op_Round, ""},
    {"Scatter", ox_op_ScatterElements, "axis"},
    {"ScatterElements", ox_op_ScatterElements, "axis,reduction"},
    {"ScatterND", ox_op_ScatterND, "reduction"},
    {"Selu", op_Selu, "alpha,gamma"},
    {"Shape", op_Shape, "start,end"},
    {"Shrink", ox_op_Shrink, "bias,lambd"},
    {"Sigmoid", op_Sigmoid, ""},
    {"Sign", op_Sign, ""},
    {"Sin", op_Sin, ""},
    {"Sinh", ox_op_Sinh, ""},
    {"Size", op_Size, ""},
    {"Slice", op_Slice_any, "axes,ends,starts"},
    {"Softmax", op_Softmax, "axis"},
    {"SoftmaxCrossEntropyLoss", ox_op_SoftmaxCrossEntropyLoss, "ignore_index,reduction"},
    {"Softplus", op_Softplus, ""},
    {"Softsign", op_Softsign, ""},
    {"SpaceToDepth", ox_op_SpaceToDepth, "blocksize"},
    {"Split", op_Split, "axis,split"},
    {"Sqrt", op_Sqrt, ""},
    {"Squeeze", op_Squeeze, "axes"},
    {"Sub", op_Sub, ""},
    {"Sum", op_Sum, ""},
    {"Tan", op_Tan, ""},
    {"Tanh", op_Tanh, ""},
    {"ThresholdedRelu", op_ThresholdedRelu, "alpha"},
    {"Tile", op_Tile_any, ""},
    {"TopK", ox_op_TopK, "axis,largest,sorted"},
    {"Transpose", op_Transpose, "perm"},
    {"Trilu", ox_op_Trilu, "upper"},
    {"Unsqueeze", op_Unsqueeze, "axes"},
    {"Upsample", op_Upsample_any, "mode,scales"},
    {"Where", op_Where, ""},
    {"Xor", op_Xor, ""},
};

bool ox_static_input(const char *op_type, int slot)
{
    return (strcmp(op_type, "Resize") == 0 && slot >= 1) ||
           (strcmp(op_type, "OneHot") == 0 && slot <= 1) || strcmp(op_type, "Range") == 0 ||
           (strcmp(op_type, "Upsample") == 0 && slot == 1);
}

const ox_op *ox_op_find(const char *op_type)
{
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (strcmp(ops[i].name, op_type) == 0)
            return &ops[i];
    return NULL;
}

bool sx_onnx_op_supported(const char *op_type)
{
    return op_type != NULL && ox_op_find(op_type) != NULL;
}

const char *sx_onnx_op_name(int i)
{
    return i >= 0 && i < (int)(sizeof ops / sizeof *ops) ? ops[i].name : NULL;
}
