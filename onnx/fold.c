/* fold.c: import-time evaluation of a node whose inputs are all known: integer and boolean values
 * and float constants that are not trainable parameters. The importer builds the graph for one
 * batch size, so the shape arithmetic exporters write (Shape -> Gather -> Unsqueeze -> Concat ->
 * Reshape, Range/Equal/Where masks, a mask written by ScatterND into ConstantOfShape) is plain
 * numbers here: each folded value becomes known integers (ox_val.ints, booleans as 0/1) or a
 * float constant (ox_val.cst and its const node), and the graph never sees it. */
#include "onnx_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A float constant carried through a reshape-like op is copied when it has at most this many
 * elements (the masks and scales of shape arithmetic; weights keep only their graph node). */
#define CARRY_MAX ((int64_t)1 << 18)

/* No folded value (nor a float input read for folding) has more elements than this: a hostile
 * file must not make the importer compute for minutes, and large float constants (weights) are
 * left to the graph. */
#define FOLD_MAX ((int64_t)1 << 22)

/* A known tensor: integers (i) or floats (f), exactly one set; i may be borrowed. */
typedef struct kt {
    int rank;
    int64_t shape[SX_MAX_RANK];
    int64_t n;
    bool isf;
    int32_t type; /* integers: their ONNX element type (0: INT64) */
    int64_t *i;
    double *f;
    bool own_i;
} kt;

static void kt_free(kt *t)
{
    if (t->own_i)
        sx_free(t->i);
    sx_free(t->f);
    memset(t, 0, sizeof *t);
}

/* An empty result of shape (rank, shape): integers or floats. */
static sx_status kt_new(ox_ctx *c, kt *t, bool isf, int rank, const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    t->rank = rank;
    if (rank > 0)
        memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
    t->n = sx_shape_size(rank, shape);
    if (t->n > FOLD_MAX)
        return ox_fail(c, SX_E_UNSUPPORTED, "a folded value of %lld elements (at most %lld)",
                       (long long)t->n, (long long)FOLD_MAX);
    t->isf = isf;
    size_t bytes = (size_t)(t->n ? t->n : 1) * 8;
    if (isf)
        t->f = sx_calloc(1, bytes);
    else
        t->i = sx_calloc(1, bytes);
    t->own_i = !isf;
    return (isf ? (void *)t->f : (void *)t->i) != NULL ? SX_OK : SX_E_NOMEM;
}

static double kt_get(const kt *t, int64_t k)
{
    return t->isf ? t->f[k] : (double)t->i[k];
}

static int64_t kt_int(const kt *t, int64_t k)
{
    return t->isf ? (int64_t)t->f[k] : t->i[k];
}

/* Element k of dst = element s of src (the same kind). */
static void kt_copy1(kt *dst, int64_t k, const kt *src, int64_t s)
{
    if (dst->isf)
        dst->f[k] = kt_get(src, s);
    else
        dst->i[k] = kt_int(src, s);
}

bool ox_known(const ox_val *v)
{
    return v->ints != NULL ||
           (v->cst != NULL && (v->n == NULL || sx_cg_node_op(v->n) != SX_OP_PARAM));
}

/* The known value v as a kt (integers borrowed, floats read out of the constant). */
static sx_status kt_of(ox_ctx *c, const ox_val *v, kt *t)
{
    memset(t, 0, sizeof *t);
    t->rank = v->rank;
    memcpy(t->shape, v->shape, sizeof t->shape);
    t->n = sx_shape_size(v->rank, v->shape);
    if (v->ints != NULL) {
        t->i = v->ints;
        t->type = v->itype;
        return SX_OK;
    }
    if (t->n > FOLD_MAX)
        return ox_fail(c, SX_E_UNSUPPORTED, "input '%s' of %lld elements is too large to fold",
                       v->name, (long long)t->n);
    t->isf = true;
    t->f = sx_alloc((size_t)(t->n ? t->n : 1) * sizeof *t->f);
    if (t->f == NULL)
        return SX_E_NOMEM;
    for (int64_t k = 0; k < t->n; k++)
        t->f[k] = sx_tensor_get(v->cst, k);
    return SX_OK;
}

sx_status ox_out_const(ox_ctx *c, int i, int rank, const int64_t *shape, const double *f)
{
    if (i >= ox_n_out(c) || c->node->output[i][0] == '\0')
        return SX_OK;
    sx_tensor *t = NULL;
    SX_TRY(sx_tensor_new(c->dt, rank, shape, &t));
    for (int64_t k = 0; k < t->size; k++)
        sx_tensor_set(t, k, f[k]);
    sx_cg_node *n = sx_cg_const(c->g, t);
    sx_status s = ox_out(c, i, n, OX_ONNX);
    ox_val *ov = s == SX_OK ? ox_find(c, c->node->output[i]) : NULL;
    if (ov != NULL && ov->n == n)
        ov->cst = t;
    else
        sx_tensor_free(t);
    return s;
}

/* v as an integer of ONNX element type `type` (wrapped around as the type's arithmetic does). */
static int64_t wrap(int32_t type, int64_t v)
{
    switch (type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
        return (int8_t)v;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
        return (uint8_t)v;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
        return (int16_t)v;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
        return (uint16_t)v;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
        return (int32_t)v;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
        return (uint32_t)v;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        return v != 0;
    default:
        return v;
    }
}

static sx_status kt_emit(ox_ctx *c, int i, kt *t)
{
    if (t->isf)
        return ox_out_const(c, i, t->rank, t->shape, t->f);
    for (int64_t k = 0; k < t->n; k++)
        t->i[k] = wrap(t->type, t->i[k]);
    return ox_out_ints_typed(c, i, t->rank, t->shape, t->i, t->type);
}

/* The offset in x (right-aligned, broadcast against an output of rank r) of output coords co. */
static int64_t bcast_off(const kt *x, int r, const int64_t *co)
{
    int64_t off = 0;
    for (int k = 0; k < x->rank; k++) {
        int64_t d = x->shape[k], q = co[r - x->rank + k];
        off = off * d + (d == 1 ? 0 : q);
    }
    return off;
}

/* Advance coords co of shape s (rank r) by one, last axis fastest. */
static void next_coord(int r, const int64_t *s, int64_t *co)
{
    for (int k = r - 1; k >= 0; k--) {
        if (++co[k] < s[k])
            return;
        co[k] = 0;
    }
}

/* ---------------------------------------------------------------- element-wise */

typedef enum {
    B_ADD,
    B_SUB,
    B_MUL,
    B_DIV,
    B_MOD,
    B_FMOD,
    B_POW,
    B_MAX,
    B_MIN,
    B_EQ,
    B_LT,
    B_LE,
    B_GT,
    B_GE,
    B_AND,
    B_OR,
    B_XOR
} bin_op;

static const struct {
    const char *name;
    bin_op op;
} bin_ops[] = {{"Add", B_ADD},    {"Sub", B_SUB},           {"Mul", B_MUL}, {"Div", B_DIV},
               {"Mod", B_MOD},    {"Pow", B_POW},           {"Max", B_MAX}, {"Min", B_MIN},
               {"Sum", B_ADD},    {"Equal", B_EQ},          {"Less", B_LT}, {"LessOrEqual", B_LE},
               {"Greater", B_GT}, {"GreaterOrEqual", B_GE}, {"And", B_AND}, {"Or", B_OR},
               {"Xor", B_XOR}};

static bool bin_logical(bin_op op)
{
    return op >= B_EQ;
}

static double bin_f(bin_op op, double a, double b)
{
    switch (op) {
    case B_ADD:
        return a + b;
    case B_SUB:
        return a - b;
    case B_MUL:
        return a * b;
    case B_DIV:
        return a / b;
    case B_MOD: { /* the sign of the divisor */
        double m = fmod(a, b);
        return m != 0 && (m < 0) != (b < 0) ? m + b : m;
    }
    case B_FMOD:
        return fmod(a, b);
    case B_POW:
        return pow(a, b);
    case B_MAX:
        return b > a || b != b ? b : a;
    case B_MIN:
        return b < a || b != b ? b : a;
    case B_EQ:
        return a == b;
    case B_LT:
        return a < b;
    case B_LE:
        return a <= b;
    case B_GT:
        return a > b;
    case B_GE:
        return a >= b;
    case B_AND:
        return a != 0 && b != 0;
    case B_OR:
        return a != 0 || b != 0;
    case B_XOR:
        return (a != 0) != (b != 0);
    }
    return 0;
}

/* Integer a op b; false on a division by zero. */
static bool bin_i(bin_op op, int64_t a, int64_t b, int64_t *r)
{
    switch (op) {
    case B_DIV:
    case B_MOD:
    case B_FMOD:
        if (b == 0 || (a == INT64_MIN && b == -1))
            return false;
        *r = op == B_DIV ? a / b : a % b;
        if (op == B_MOD && *r != 0 && (*r < 0) != (b < 0))
            *r += b;
        return true;
    case B_POW: {
        double p = pow((double)a, (double)b);
        *r = fabs(p) < 9.2e18 ? (int64_t)p : 0;
        return true;
    }
    case B_ADD:
        *r = (int64_t)((uint64_t)a + (uint64_t)b);
        return true;
    case B_SUB:
        *r = (int64_t)((uint64_t)a - (uint64_t)b);
        return true;
    case B_MUL:
        *r = (int64_t)((uint64_t)a * (uint64_t)b);
        return true;
    case B_MAX:
        *r = a > b ? a : b;
        return true;
    case B_MIN:
        *r = a < b ? a : b;
        return true;
    case B_EQ:
    case B_LT:
    case B_LE:
    case B_GT:
    case B_GE:
    case B_AND:
    case B_OR:
    case B_XOR:
        *r = (int64_t)bin_f(op, (double)a, (double)b);
        return true;
    }
    return true;
}

static sx_status fold_binary2(ox_ctx *c, bin_op op, const kt *a, const kt *b, kt *out)
{
    int r;
    int64_t s[SX_MAX_RANK], co[SX_MAX_RANK] = {0};
    if (sx_shape_broadcast(c->node->op_type, a->rank, a->shape, b->rank, b->shape, &r, s) != SX_OK)
        return ox_fail(c, SX_E_SHAPE, "%s", sx_last_error());
    bool isf = (a->isf || b->isf) && !bin_logical(op);
    SX_TRY(kt_new(c, out, isf, r, s));
    out->type = bin_logical(op) ? ONNX__TENSOR_PROTO__DATA_TYPE__BOOL : a->type;
    for (int64_t k = 0; k < out->n; k++, next_coord(r, s, co)) {
        int64_t ia = bcast_off(a, r, co), ib = bcast_off(b, r, co);
        if (isf || ((a->isf || b->isf) && bin_logical(op))) {
            double v = bin_f(op, kt_get(a, ia), kt_get(b, ib));
            if (isf)
                out->f[k] = v;
            else
                out->i[k] = (int64_t)v;
        } else if (!bin_i(op, a->i[ia], b->i[ib], &out->i[k])) {
            kt_free(out);
            return ox_fail(c, SX_E_RANGE, "integer division by zero");
        }
    }
    return SX_OK;
}

/* Binary ops, and Sum, Max and Min over 1..n inputs (left to right). */
static sx_status fold_binary(ox_ctx *c, bin_op op, kt *in, int n, kt *out)
{
    int64_t fm = 0;
    if (op == B_MOD)
        SX_TRY(ox_attr_int(c, "fmod", 0, &fm));
    if (fm)
        op = B_FMOD;
    SX_TRY(kt_new(c, out, in[0].isf, in[0].rank, in[0].shape));
    out->type = in[0].type;
    for (int64_t k = 0; k < out->n; k++)
        kt_copy1(out, k, &in[0], k);
    for (int i = 1; i < n; i++) {
        kt acc = *out; /* out is made anew from it (and left empty on failure) */
        memset(out, 0, sizeof *out);
        sx_status s = fold_binary2(c, op, &acc, &in[i], out);
        kt_free(&acc);
        SX_TRY(s);
    }
    return SX_OK;
}

static sx_status fold_where(ox_ctx *c, kt *in, kt *out)
{
    int r, r2;
    int64_t s[SX_MAX_RANK], s2[SX_MAX_RANK], co[SX_MAX_RANK] = {0};
    if (sx_shape_broadcast("Where", in[0].rank, in[0].shape, in[1].rank, in[1].shape, &r2, s2) !=
            SX_OK ||
        sx_shape_broadcast("Where", r2, s2, in[2].rank, in[2].shape, &r, s) != SX_OK)
        return ox_fail(c, SX_E_SHAPE, "%s", sx_last_error());
    SX_TRY(kt_new(c, out, in[1].isf || in[2].isf, r, s));
    out->type = in[1].type;
    for (int64_t k = 0; k < out->n; k++, next_coord(r, s, co)) {
        bool t = kt_get(&in[0], bcast_off(&in[0], r, co)) != 0;
        const kt *x = t ? &in[1] : &in[2];
        kt_copy1(out, k, x, bcast_off(x, r, co));
    }
    return SX_OK;
}

typedef enum { U_NEG, U_ABS, U_NOT, U_SQRT, U_FLOOR, U_CEIL, U_RECIP, U_EXP, U_LOG, U_SIGN } un_op;

static const struct {
    const char *name;
    un_op op;
} un_ops[] = {{"Neg", U_NEG},     {"Abs", U_ABS},   {"Not", U_NOT},          {"Sqrt", U_SQRT},
              {"Floor", U_FLOOR}, {"Ceil", U_CEIL}, {"Reciprocal", U_RECIP}, {"Exp", U_EXP},
              {"Log", U_LOG},     {"Sign", U_SIGN}};

static double un_f(un_op op, double x)
{
    switch (op) {
    case U_NEG:
        return -x;
    case U_ABS:
        return fabs(x);
    case U_NOT:
        return x == 0;
    case U_SQRT:
        return sqrt(x);
    case U_FLOOR:
        return floor(x);
    case U_CEIL:
        return ceil(x);
    case U_RECIP:
        return 1 / x;
    case U_EXP:
        return exp(x);
    case U_LOG:
        return log(x);
    case U_SIGN:
        return (x > 0) - (x < 0);
    }
    return x;
}

static sx_status fold_unary(ox_ctx *c, un_op op, const kt *x, kt *out)
{
    /* integers stay integers through Neg, Abs, Not and Sign (the others are float ops) */
    bool isf = x->isf || !(op == U_NEG || op == U_ABS || op == U_NOT || op == U_SIGN);
    SX_TRY(kt_new(c, out, isf, x->rank, x->shape));
    out->type = op == U_NOT ? ONNX__TENSOR_PROTO__DATA_TYPE__BOOL : x->type;
    for (int64_t k = 0; k < x->n; k++) {
        if (isf)
            out->f[k] = un_f(op, kt_get(x, k));
        else if (op == U_NEG)
            out->i[k] = (int64_t)(0 - (uint64_t)x->i[k]);
        else if (op == U_ABS)
            out->i[k] = x->i[k] < 0 ? (int64_t)(0 - (uint64_t)x->i[k]) : x->i[k];
        else
            out->i[k] = (int64_t)un_f(op, (double)x->i[k]);
    }
    return SX_OK;
}

static sx_status fold_cast(ox_ctx *c, const kt *x, kt *out)
{
    int64_t to;
    SX_TRY(ox_attr_int(c, "to", 0, &to));
    bool isf = ox_dtype_is_float((int32_t)to) || to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
    if (!isf &&
        (to < ONNX__TENSOR_PROTO__DATA_TYPE__UINT8 || to > ONNX__TENSOR_PROTO__DATA_TYPE__UINT64 ||
         to == ONNX__TENSOR_PROTO__DATA_TYPE__STRING ||
         to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16))
        return ox_fail(c, SX_E_UNSUPPORTED, "attribute to = %s", ox_dtype_name((int32_t)to));
    SX_TRY(kt_new(c, out, isf, x->rank, x->shape));
    out->type = (int32_t)to;
    for (int64_t k = 0; k < x->n; k++) {
        double v = kt_get(x, k);
        if (isf) {
            out->f[k] = v;
        } else if (to == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL) {
            out->i[k] = v != 0;
        } else if (!x->isf) {
            out->i[k] = x->i[k];
        } else if (!(fabs(v) < 9.2e18)) {
            kt_free(out);
            return ox_fail(c, SX_E_RANGE, "%g does not convert to %s", v,
                           ox_dtype_name((int32_t)to));
        } else {
            out->i[k] = (int64_t)v;
        }
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- shapes and indexing */

static sx_status fold_gather(ox_ctx *c, const kt *x, const kt *idx, kt *out)
{
    int64_t a;
    SX_TRY(ox_attr_int(c, "axis", 0, &a));
    int axis;
    SX_TRY(ox_axis(c, a, x->rank, "attribute axis", &axis));
    int r = x->rank - 1 + idx->rank;
    if (idx->isf || r > SX_MAX_RANK)
        return ox_fail(c, SX_E_UNSUPPORTED, "indices of %s, rank %d", idx->isf ? "floats" : "ints",
                       idx->rank);
    int64_t s[SX_MAX_RANK], d = x->shape[axis];
    int64_t outer = sx_shape_size(axis, x->shape),
            inner = sx_shape_size(x->rank - axis - 1, x->shape + axis + 1);
    memcpy(s, x->shape, (size_t)axis * sizeof *s);
    memcpy(s + axis, idx->shape, (size_t)idx->rank * sizeof *s);
    memcpy(s + axis + idx->rank, x->shape + axis + 1, (size_t)(x->rank - axis - 1) * sizeof *s);
    for (int64_t j = 0; j < idx->n; j++)
        if (idx->i[j] < -d || idx->i[j] >= d)
            return ox_fail(c, SX_E_RANGE, "index %lld out of range for axis %d of size %lld",
                           (long long)idx->i[j], axis, (long long)d);
    SX_TRY(kt_new(c, out, x->isf, r, s));
    out->type = x->type;
    int64_t k = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < idx->n; j++) {
            int64_t q = idx->i[j] < 0 ? idx->i[j] + d : idx->i[j];
            for (int64_t in = 0; in < inner; in++)
                kt_copy1(out, k++, x, (o * d + q) * inner + in);
        }
    return SX_OK;
}

/* The ints of input i of the node as a list (NULL, 0 when the input is absent). */
static sx_status list_of(ox_ctx *c, const kt *in, int nin, int i, const int64_t **v, int64_t *n)
{
    *v = NULL;
    *n = 0;
    if (i >= nin || in[i].n < 0 || ox_in(c, i) == NULL)
        return SX_OK;
    if (in[i].isf || in[i].rank > 1)
        return ox_fail(c, SX_E_FORMAT, "input %d is not a list of integers", i);
    *v = in[i].i;
    *n = in[i].n;
    return SX_OK;
}

/* Slice (opset 10+: starts, ends, axes, steps as inputs; before, attributes). */
static sx_status fold_slice(ox_ctx *c, kt *in, int nin, kt *out)
{
    const kt *x = &in[0];
    const int64_t *st, *en, *ax = NULL, *sp = NULL;
    int64_t n, m, na = 0, ns = 0;
    if (c->opset >= 10) {
        SX_TRY(list_of(c, in, nin, 1, &st, &n));
        SX_TRY(list_of(c, in, nin, 2, &en, &m));
        SX_TRY(list_of(c, in, nin, 3, &ax, &na));
        SX_TRY(list_of(c, in, nin, 4, &sp, &ns));
    } else {
        int a, b, d;
        SX_TRY(ox_attr_ints(c, "starts", &st, &a));
        SX_TRY(ox_attr_ints(c, "ends", &en, &b));
        SX_TRY(ox_attr_ints(c, "axes", &ax, &d));
        n = a;
        m = b;
        na = d;
    }
    if (n != m || n > x->rank || (ax != NULL && na != n) || (sp != NULL && ns != n))
        return ox_fail(c, SX_E_FORMAT, "%lld starts, %lld ends, %lld axes, %lld steps",
                       (long long)n, (long long)m, (long long)na, (long long)ns);
    int64_t start[SX_MAX_RANK], step[SX_MAX_RANK], s[SX_MAX_RANK];
    for (int k = 0; k < x->rank; k++) {
        start[k] = 0;
        step[k] = 1;
        s[k] = x->shape[k];
    }
    for (int64_t i = 0; i < n; i++) {
        int a = (int)i;
        if (ax != NULL)
            SX_TRY(ox_axis(c, ax[i], x->rank, "axis", &a));
        int64_t d = x->shape[a], p = sp ? sp[i] : 1, b = st[i], e = en[i];
        if (p == 0)
            return ox_fail(c, SX_E_FORMAT, "step 0");
        b = b < 0 ? (b < -d ? -d : b) + d : b;
        e = e < 0 ? (e < -d - 1 ? -d - 1 : e) + d : e;
        if (p > 0) {
            b = b > d ? d : b;
            e = e > d ? d : e;
            s[a] = e > b ? (e - b + p - 1) / p : 0;
        } else {
            b = b > d - 1 ? d - 1 : b;
            e = e > d - 1 ? d - 1 : e;
            s[a] = b > e ? (b - e + (-p) - 1) / (-p) : 0;
        }
        start[a] = b;
        step[a] = p;
    }
    SX_TRY(kt_new(c, out, x->isf, x->rank, s));
    out->type = x->type;
    int64_t co[SX_MAX_RANK] = {0};
    for (int64_t k = 0; k < out->n; k++, next_coord(x->rank, s, co)) {
        int64_t off = 0;
        for (int j = 0; j < x->rank; j++)
            off = off * x->shape[j] + start[j] + co[j] * step[j];
        kt_copy1(out, k, x, off);
    }
    return SX_OK;
}

static sx_status fold_concat(ox_ctx *c, kt *in, int nin, kt *out)
{
    int64_t a;
    SX_TRY(ox_attr_int(c, "axis", 0, &a));
    int axis;
    SX_TRY(ox_axis(c, a, in[0].rank, "attribute axis", &axis));
    int64_t s[SX_MAX_RANK];
    memcpy(s, in[0].shape, sizeof s);
    s[axis] = 0;
    bool isf = false;
    for (int i = 0; i < nin; i++) {
        for (int k = 0; k < in[0].rank; k++)
            if (in[i].rank != in[0].rank || (k != axis && in[i].shape[k] != in[0].shape[k]))
                return ox_fail(c, SX_E_SHAPE, "input %d of another shape", i);
        s[axis] += in[i].shape[axis];
        isf |= in[i].isf;
    }
    SX_TRY(kt_new(c, out, isf, in[0].rank, s));
    out->type = in[0].type;
    int64_t outer = sx_shape_size(axis, s), k = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < nin; i++) {
            int64_t row = sx_shape_size(in[i].rank - axis, in[i].shape + axis);
            for (int64_t j = 0; j < row; j++)
                kt_copy1(out, k++, &in[i], o * row + j);
        }
    return SX_OK;
}

static sx_status fold_transpose(ox_ctx *c, const kt *x, kt *out)
{
    const int64_t *pv;
    int n, perm[SX_MAX_RANK];
    bool seen[SX_MAX_RANK] = {false};
    SX_TRY(ox_attr_ints(c, "perm", &pv, &n));
    if (n != 0 && n != x->rank)
        return ox_fail(c, SX_E_FORMAT, "attribute perm of %d values for rank %d", n, x->rank);
    int64_t s[SX_MAX_RANK], st[SX_MAX_RANK], co[SX_MAX_RANK] = {0};
    for (int i = 0; i < x->rank; i++) {
        if (n && (pv[i] < 0 || pv[i] >= x->rank || seen[pv[i]]))
            return ox_fail(c, SX_E_FORMAT, "attribute perm is not a permutation");
        perm[i] = n ? (int)pv[i] : x->rank - 1 - i;
        seen[perm[i]] = true;
        s[i] = x->shape[perm[i]];
    }
    for (int i = x->rank - 1, m = 1; i >= 0; m *= (int)x->shape[i], i--)
        st[i] = m;
    SX_TRY(kt_new(c, out, x->isf, x->rank, s));
    out->type = x->type;
    for (int64_t k = 0; k < out->n; k++, next_coord(x->rank, s, co)) {
        int64_t off = 0;
        for (int i = 0; i < x->rank; i++)
            off += co[i] * st[perm[i]];
        kt_copy1(out, k, x, off);
    }
    return SX_OK;
}

/* Expand (to a broadcast shape) and Tile (repeats per axis). */
static sx_status fold_expand(ox_ctx *c, const kt *x, const kt *shape, bool tile, kt *out)
{
    int r = x->rank;
    int64_t s[SX_MAX_RANK], co[SX_MAX_RANK] = {0};
    if (shape->isf || shape->rank != 1 || shape->n > SX_MAX_RANK)
        return ox_fail(c, SX_E_FORMAT, "input 1 is not a list of up to %d integers", SX_MAX_RANK);
    if (tile) {
        if (shape->n != r)
            return ox_fail(c, SX_E_FORMAT, "%lld repeats for rank %d", (long long)shape->n, r);
        for (int k = 0; k < r; k++) {
            if (shape->i[k] < 0)
                return ox_fail(c, SX_E_FORMAT, "repeats %lld", (long long)shape->i[k]);
            s[k] = x->shape[k] * shape->i[k];
        }
    } else if (sx_shape_broadcast("Expand", r, x->shape, (int)shape->n, shape->i, &r, s) != SX_OK) {
        return ox_fail(c, SX_E_SHAPE, "%s", sx_last_error());
    }
    SX_TRY(kt_new(c, out, x->isf, r, s));
    out->type = x->type;
    for (int64_t k = 0; k < out->n; k++, next_coord(r, s, co)) {
        int64_t off = 0;
        for (int j = 0; tile && j < r; j++)
            off = off * x->shape[j] + co[j] % x->shape[j];
        kt_copy1(out, k, x, tile ? off : bcast_off(x, r, co));
    }
    return SX_OK;
}

/* Range(start, limit, delta): max(ceil((limit - start) / delta), 0) values. */
static sx_status fold_range(ox_ctx *c, kt *in, kt *out)
{
    for (int i = 0; i < 3; i++)
        if (in[i].n != 1)
            return ox_fail(c, SX_E_FORMAT, "input %d is not a scalar", i);
    bool isf = in[0].isf || in[1].isf || in[2].isf;
    double a = kt_get(&in[0], 0), b = kt_get(&in[1], 0), d = kt_get(&in[2], 0);
    if (d == 0 || !isfinite(a) || !isfinite(b) || !isfinite(d))
        return ox_fail(c, SX_E_FORMAT, "range(%g, %g, %g)", a, b, d);
    double cnt = ceil((b - a) / d);
    int64_t n = cnt > 0 ? (cnt > (double)FOLD_MAX ? FOLD_MAX + 1 : (int64_t)cnt) : 0;
    SX_TRY(kt_new(c, out, isf, 1, &n));
    out->type = in[0].type;
    for (int64_t k = 0; k < n; k++) {
        if (isf)
            out->f[k] = a + (double)k * d;
        else
            out->i[k] = in[0].i[0] + k * in[2].i[0];
    }
    return SX_OK;
}

static sx_status fold_constant_of_shape(ox_ctx *c, const kt *shape, kt *out)
{
    if (shape->isf || shape->rank != 1 || shape->n > SX_MAX_RANK)
        return ox_fail(c, SX_E_FORMAT, "input is not a list of up to %d integers", SX_MAX_RANK);
    if (sx_shape_check("ConstantOfShape", (int)shape->n, shape->i) != SX_OK)
        return ox_fail(c, SX_E_SHAPE, "%s", sx_last_error());
    const Onnx__AttributeProto *a = ox_attr(c, "value");
    bool isf = true;
    double value = 0;
    if (a != NULL && a->t != NULL) {
        isf = ox_dtype_is_float(a->t->data_type);
        int64_t *iv = NULL, cnt = 0;
        sx_tensor *fv = NULL;
        SX_TRY(isf ? ox_tensor_float(c, a->t, SX_F64, &fv) : ox_tensor_ints(c, a->t, &iv, &cnt));
        if (isf)
            cnt = fv->size;
        if (cnt == 1)
            value = isf ? sx_tensor_get(fv, 0) : (double)iv[0];
        sx_tensor_free(fv);
        int64_t first = iv != NULL ? iv[0] : 0;
        sx_free(iv);
        if (cnt != 1)
            return ox_fail(c, SX_E_FORMAT, "attribute value is not one element");
        if (!isf) {
            SX_TRY(kt_new(c, out, false, (int)shape->n, shape->i));
            out->type = a->t->data_type;
            for (int64_t k = 0; k < out->n; k++)
                out->i[k] = first;
            return SX_OK;
        }
    }
    SX_TRY(kt_new(c, out, true, (int)shape->n, shape->i));
    for (int64_t k = 0; k < out->n; k++)
        out->f[k] = value;
    return SX_OK;
}

/* ScatterND(data, indices, updates) without reduction: data with the slices that indices
 * (..., q) name replaced by updates. */
static sx_status fold_scatter_nd(ox_ctx *c, kt *in, kt *out)
{
    char red[16];
    SX_TRY(ox_attr_str(c, "reduction", "none", red, sizeof red));
    if (strcmp(red, "none") != 0)
        return ox_fail(c, SX_E_UNSUPPORTED, "attribute reduction '%s'", red);
    const kt *x = &in[0], *idx = &in[1], *up = &in[2];
    int q = idx->rank > 0 ? (int)idx->shape[idx->rank - 1] : 0;
    if (idx->isf || idx->rank < 1 || q < 1 || q > x->rank)
        return ox_fail(c, SX_E_FORMAT, "indices of shape rank %d, last axis %d for data of rank %d",
                       idx->rank, q, x->rank);
    int64_t slice = sx_shape_size(x->rank - q, x->shape + q), rows = idx->n / q;
    if (up->n != rows * slice)
        return ox_fail(c, SX_E_SHAPE, "updates of %lld elements, want %lld", (long long)up->n,
                       (long long)(rows * slice));
    SX_TRY(kt_new(c, out, x->isf, x->rank, x->shape));
    out->type = x->type;
    for (int64_t k = 0; k < x->n; k++)
        kt_copy1(out, k, x, k);
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0;
        for (int j = 0; j < q; j++) {
            int64_t d = x->shape[j], v = idx->i[r * q + j];
            if (v < -d || v >= d) {
                kt_free(out);
                return ox_fail(c, SX_E_RANGE, "index %lld out of range for axis %d of size %lld",
                               (long long)v, j, (long long)d);
            }
            off = off * d + (v < 0 ? v + d : v);
        }
        for (int64_t j = 0; j < slice; j++)
            kt_copy1(out, off * slice + j, up, r * slice + j);
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- dispatch */

/* Ops whose output keeps the input's numbers in another shape: their mappings in ops.c fold
 * integers; a float constant's numbers are carried to the output here. */
static const char *const reshapes[] = {"Flatten", "Identity", "Reshape", "Squeeze", "Unsqueeze"};

static bool is_reshape(const char *op)
{
    for (size_t i = 0; i < sizeof reshapes / sizeof *reshapes; i++)
        if (strcmp(reshapes[i], op) == 0)
            return true;
    return false;
}

static sx_status fold_run(ox_ctx *c, const char *op, kt *in, int nin, kt *out, bool *done)
{
    *done = true;
    for (size_t i = 0; i < sizeof bin_ops / sizeof *bin_ops; i++)
        if (strcmp(op, bin_ops[i].name) == 0)
            return nin < 1 ? ox_fail(c, SX_E_FORMAT, "no inputs")
                           : fold_binary(c, bin_ops[i].op, in, nin, out);
    for (size_t i = 0; i < sizeof un_ops / sizeof *un_ops; i++)
        if (strcmp(op, un_ops[i].name) == 0)
            return fold_unary(c, un_ops[i].op, &in[0], out);
    if (strcmp(op, "Cast") == 0)
        return fold_cast(c, &in[0], out);
    if (strcmp(op, "Where") == 0)
        return fold_where(c, in, out);
    if (strcmp(op, "Gather") == 0)
        return fold_gather(c, &in[0], &in[1], out);
    if (strcmp(op, "Slice") == 0)
        return fold_slice(c, in, nin, out);
    if (strcmp(op, "Concat") == 0)
        return fold_concat(c, in, nin, out);
    if (strcmp(op, "Transpose") == 0)
        return fold_transpose(c, &in[0], out);
    if (strcmp(op, "Expand") == 0 || strcmp(op, "Tile") == 0)
        return fold_expand(c, &in[0], &in[1], op[0] == 'T', out);
    if (strcmp(op, "Range") == 0)
        return fold_range(c, in, out);
    if (strcmp(op, "ConstantOfShape") == 0)
        return fold_constant_of_shape(c, &in[0], out);
    if (strcmp(op, "ScatterND") == 0)
        return fold_scatter_nd(c, in, out);
    *done = false;
    return SX_OK;
}

int ox_fold_arity(const char *op)
{
    if (strcmp(op, "Where") == 0 || strcmp(op, "Range") == 0 || strcmp(op, "ScatterND") == 0)
        return 3;
    if (strcmp(op, "Gather") == 0 || strcmp(op, "Expand") == 0 || strcmp(op, "Tile") == 0)
        return 2;
    return 1;
}

/* After a reshape-like op mapped a known float input: its output gets the same numbers. */
static sx_status carry_const(ox_ctx *c)
{
    ox_val *x = ox_in(c, 0), *y = ox_n_out(c) > 0 ? ox_find(c, c->node->output[0]) : NULL;
    if (x == NULL || y == NULL || x->cst == NULL || !ox_known(x) || y->cst != NULL ||
        y->ints != NULL || sx_shape_size(y->rank, y->shape) != x->cst->size)
        return SX_OK;
    sx_tensor *t = NULL;
    SX_TRY(sx_tensor_new(c->dt, y->rank, y->shape, &t));
    for (int64_t k = 0; k < t->size; k++)
        sx_tensor_set(t, k, sx_tensor_get(x->cst, k));
    y->cst = t;
    return SX_OK;
}

sx_status ox_fold_after(ox_ctx *c)
{
    if (c->node == NULL || !is_reshape(c->node->op_type))
        return SX_OK;
    ox_val *x = ox_in(c, 0);
    if (x == NULL || x->cst == NULL || sx_shape_size(x->rank, x->shape) > CARRY_MAX)
        return SX_OK;
    return carry_const(c);
}

sx_status ox_fold(ox_ctx *c, bool *done)
{
    *done = false;
    const char *op = c->node->op_type;
    int nin = ox_n_in(c);
    if (nin < 1 || nin > 64 || is_reshape(op))
        return SX_OK;
    for (int i = 0; i < nin; i++) {
        ox_val *v = ox_in(c, i);
        if (v == NULL ? i < ox_fold_arity(op) : !ox_known(v))
            return SX_OK;
        if (v != NULL && v->ints == NULL && sx_shape_size(v->rank, v->shape) > FOLD_MAX)
            return SX_OK; /* a large float constant: the graph computes it */
    }
    if (nin < ox_fold_arity(op))
        return SX_OK;
    kt in[64], out;
    memset(&out, 0, sizeof out);
    sx_status s = SX_OK;
    int got = 0;
    for (; s == SX_OK && got < nin; got++) {
        ox_val *v = ox_in(c, got);
        if (v != NULL) {
            s = kt_of(c, v, &in[got]);
        } else {
            memset(&in[got], 0, sizeof in[got]);
            in[got].n = -1; /* an absent optional input */
        }
    }
    if (s == SX_OK)
        s = fold_run(c, op, in, nin, &out, done);
    if (s == SX_OK && *done)
        s = kt_emit(c, 0, &out);
    kt_free(&out);
    for (int i = 0; i < got; i++)
        kt_free(&in[i]);
    return s;
}
