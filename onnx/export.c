/* export.c: a strix inference model -> an ONNX file. The model's plain inference graph for a
 * batch of 1 (nn_model_infer_graph) is walked in creation order; every node the output needs
 * becomes one or a few ONNX nodes (a convolution or pooling between two Transposes, since ONNX's
 * are NCHW), constants and parameters become initializers, and the batch axis is named "N".
 * The protobuf-c message is assembled in a bag of allocations freed at once, packed and written
 * to a temporary file renamed over the path. */
#include "nn_impl.h"
#include "onnx_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct ex {
    void **bag; /* every allocation, freed at the end */
    int n_bag, cap_bag;
    Onnx__NodeProto **nodes;
    int n_nodes, cap_nodes;
    Onnx__TensorProto **inits;
    int n_inits, cap_inits;
    sx_dtype dt;
    int tmp; /* counter for intermediate names */
    sx_status err;
    const sx_cg_node *node; /* the node being exported, for messages */
    int opset;              /* the model's opset: 13, 17 with a LayerNormalization */
    bool ids;               /* the input is token ids: int64 in the file, cast to the dtype */
} ex;

static void *ex_alloc(ex *e, size_t n)
{
    if (e->err != SX_OK)
        return NULL;
    if (e->n_bag == e->cap_bag) {
        int cap = e->cap_bag ? 2 * e->cap_bag : 256;
        void **b = sx_realloc(e->bag, (size_t)cap * sizeof *b);
        if (b == NULL) {
            e->err = SX_E_NOMEM;
            return NULL;
        }
        e->bag = b;
        e->cap_bag = cap;
    }
    void *p = sx_calloc(1, n ? n : 1);
    if (p == NULL) {
        e->err = SX_E_NOMEM;
        return NULL;
    }
    e->bag[e->n_bag++] = p;
    return p;
}

static char *ex_str(ex *e, const char *s)
{
    char *p = ex_alloc(e, strlen(s) + 1);
    if (p != NULL)
        memcpy(p, s, strlen(s) + 1);
    return p;
}

static bool ex_push(ex *e, void ***arr, int *n, int *cap, void *item)
{
    if (e->err != SX_OK || item == NULL)
        return false;
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 64;
        void **a = sx_realloc(*arr, (size_t)c * sizeof *a);
        if (a == NULL) {
            e->err = SX_E_NOMEM;
            return false;
        }
        *arr = a;
        *cap = c;
    }
    (*arr)[(*n)++] = item;
    return true;
}

/* The name of node n's value in the file. */
static void val_name(const sx_cg_node *n, char *buf, size_t size)
{
    snprintf(buf, size, "v%lld", (long long)sx_cg_node_id(n));
}

static char *fresh(ex *e)
{
    char b[32];
    snprintf(b, sizeof b, "t%d", e->tmp++);
    return ex_str(e, b);
}

/* ---------------------------------------------------------------- building messages */

static Onnx__AttributeProto *attr_new(ex *e, const char *name)
{
    Onnx__AttributeProto *a = ex_alloc(e, sizeof *a);
    if (a == NULL)
        return NULL;
    onnx__attribute_proto__init(a);
    a->name = ex_str(e, name);
    a->has_type = 1;
    return a;
}

static Onnx__AttributeProto *attr_int(ex *e, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = attr_new(e, name);
    if (a != NULL) {
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        a->has_i = 1;
        a->i = v;
    }
    return a;
}

static Onnx__AttributeProto *attr_float(ex *e, const char *name, double v)
{
    Onnx__AttributeProto *a = attr_new(e, name);
    if (a != NULL) {
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        a->has_f = 1;
        a->f = (float)v;
    }
    return a;
}

static Onnx__AttributeProto *attr_ints(ex *e, const char *name, int n, const int64_t *v)
{
    Onnx__AttributeProto *a = attr_new(e, name);
    int64_t *c = ex_alloc(e, (size_t)(n ? n : 1) * sizeof *c);
    if (a == NULL || c == NULL)
        return NULL;
    memcpy(c, v, (size_t)n * sizeof *v);
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    a->n_ints = (size_t)n;
    a->ints = c;
    return a;
}

/* A node op(ins) -> out with attributes (NULL-terminated list, at most 8). */
static void node_add(ex *e, const char *op, int n_in, char *const *ins, const char *out,
                     Onnx__AttributeProto *const *attrs)
{
    Onnx__NodeProto *nd = ex_alloc(e, sizeof *nd);
    char **in = ex_alloc(e, (size_t)(n_in ? n_in : 1) * sizeof *in);
    char **o = ex_alloc(e, sizeof *o);
    int na = 0;
    while (attrs != NULL && attrs[na] != NULL)
        na++;
    Onnx__AttributeProto **at = ex_alloc(e, (size_t)(na ? na : 1) * sizeof *at);
    if (nd == NULL || in == NULL || o == NULL || at == NULL)
        return;
    onnx__node_proto__init(nd);
    for (int i = 0; i < n_in; i++)
        in[i] = ins[i];
    o[0] = ex_str(e, out);
    for (int i = 0; i < na; i++)
        at[i] = attrs[i];
    nd->op_type = ex_str(e, op);
    nd->n_input = (size_t)n_in;
    nd->input = in;
    nd->n_output = 1;
    nd->output = o;
    nd->n_attribute = (size_t)na;
    nd->attribute = at;
    nd->name = ex_str(e, out);
    ex_push(e, (void ***)&e->nodes, &e->n_nodes, &e->cap_nodes, nd);
}

/* An initializer: float values of t (in the model's dtype), or int64 values. */
static Onnx__TensorProto *tensor_new(ex *e, const char *name, int rank, const int64_t *shape)
{
    Onnx__TensorProto *t = ex_alloc(e, sizeof *t);
    int64_t *dims = ex_alloc(e, (size_t)(rank ? rank : 1) * sizeof *dims);
    if (t == NULL || dims == NULL)
        return NULL;
    onnx__tensor_proto__init(t);
    memcpy(dims, shape, (size_t)rank * sizeof *dims);
    t->n_dims = (size_t)rank;
    t->dims = dims;
    t->name = ex_str(e, name);
    t->has_data_type = 1;
    return t;
}

static void init_float(ex *e, const char *name, const sx_tensor *v)
{
    Onnx__TensorProto *t = tensor_new(e, name, v->rank, v->shape);
    size_t bytes = (size_t)v->size * sx_dtype_size(v->dtype);
    uint8_t *raw = ex_alloc(e, bytes);
    if (t == NULL || raw == NULL)
        return;
    memcpy(raw, v->data, bytes); /* little-endian hosts, as ONNX stores raw data */
    t->data_type = v->dtype == SX_F32 ? ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
                                      : ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
    t->has_raw_data = 1;
    t->raw_data.len = bytes;
    t->raw_data.data = raw;
    ex_push(e, (void ***)&e->inits, &e->n_inits, &e->cap_inits, t);
}

static char *init_ints(ex *e, int n, const int64_t *v)
{
    char *name = fresh(e);
    int64_t len = n;
    Onnx__TensorProto *t = tensor_new(e, name ? name : "", 1, &len);
    int64_t *d = ex_alloc(e, (size_t)(n ? n : 1) * sizeof *d);
    if (t == NULL || d == NULL)
        return NULL;
    memcpy(d, v, (size_t)n * sizeof *v);
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    t->n_int64_data = (size_t)n;
    t->int64_data = d;
    ex_push(e, (void ***)&e->inits, &e->n_inits, &e->cap_inits, t);
    return name;
}

static char *init_scalar(ex *e, double v)
{
    char *name = fresh(e);
    sx_tensor *t = NULL;
    if (name == NULL || sx_tensor_scalar(e->dt, v, &t) != SX_OK) {
        e->err = SX_E_NOMEM;
        return NULL;
    }
    init_float(e, name, t);
    sx_tensor_free(t);
    return name;
}

/* A one-input node writing a fresh name (or out when given). */
static char *unary(ex *e, const char *op, char *in, const char *out,
                   Onnx__AttributeProto *const *attrs)
{
    char *o = out ? ex_str(e, out) : fresh(e);
    if (o != NULL)
        node_add(e, op, 1, &in, o, attrs);
    return o;
}

static char *transpose(ex *e, char *in, const int *perm, const char *out)
{
    int64_t p[4] = {perm[0], perm[1], perm[2], perm[3]};
    Onnx__AttributeProto *a[2] = {attr_ints(e, "perm", 4, p), NULL};
    return unary(e, "Transpose", in, out, a);
}

/* ---------------------------------------------------------------- ops */

static sx_status unsupported(ex *e, const sx_cg_node *n, const char *why)
{
    return e->err = sx_error(SX_E_UNSUPPORTED, "sx_onnx_export: node %lld (%s): %s",
                             (long long)sx_cg_node_id(n), sx_cg_op_name(sx_cg_node_op(n)), why);
}

/* The window attributes of a conv or pool (NHWC fields -> ONNX's). */
static int window_attrs(ex *e, Onnx__AttributeProto **a, int sh, int sw, int dh, int dw,
                        sx_padding pad, int pt, int pl, int pb, int pr)
{
    int k = 0;
    a[k++] = attr_ints(e, "strides", 2, (int64_t[]){sh, sw});
    if (dh > 1 || dw > 1)
        a[k++] = attr_ints(e, "dilations", 2, (int64_t[]){dh ? dh : 1, dw ? dw : 1});
    if (pad == SX_PAD_EXPLICIT)
        a[k++] = attr_ints(e, "pads", 4, (int64_t[]){pt, pl, pb, pr});
    else
        a[k++] = attr_new(e, "auto_pad");
    if (pad != SX_PAD_EXPLICIT && a[k - 1] != NULL) {
        const char *s = pad == SX_PAD_VALID        ? "VALID"
                        : pad == SX_PAD_SAME_LOWER ? "SAME_LOWER"
                                                   : "SAME_UPPER";
        a[k - 1]->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        a[k - 1]->has_s = 1;
        a[k - 1]->s.data = (uint8_t *)ex_str(e, s);
        a[k - 1]->s.len = strlen(s);
    }
    return k;
}

static void export_conv(ex *e, const sx_cg_node *n, char **in, const char *out)
{
    const sx_cg_attr *at = sx_cg_node_attr(n);
    const sx_conv2d_params *p = &at->conv;
    char *x = transpose(e, in[0], ox_to_nchw, NULL);
    static const int to_oihw[4] = {3, 2, 0, 1}; /* (kh, kw, c/g, f) -> (f, c/g, kh, kw) */
    char *w = transpose(e, in[1], to_oihw, NULL);
    Onnx__AttributeProto *a[8] = {NULL};
    const int64_t *ks = sx_cg_node_shape(sx_cg_node_input(n, 1));
    int k = window_attrs(e, a, p->stride_h, p->stride_w, p->dilation_h, p->dilation_w, p->padding,
                         p->pad_top, p->pad_left, p->pad_bottom, p->pad_right);
    a[k++] = attr_int(e, "group", p->groups > 0 ? p->groups : 1);
    a[k++] = attr_ints(e, "kernel_shape", 2, ks);
    char *y = fresh(e), *xs[2] = {x, w};
    if (y != NULL)
        node_add(e, "Conv", 2, xs, y, a);
    transpose(e, y, ox_to_nhwc, out);
}

static void export_pool(ex *e, const sx_cg_node *n, char **in, const char *out, bool max)
{
    const sx_pool2d_params *p = &sx_cg_node_attr(n)->pool;
    char *x = transpose(e, in[0], ox_to_nchw, NULL);
    Onnx__AttributeProto *a[8] = {NULL};
    int k = window_attrs(e, a, p->stride_h, p->stride_w, max ? p->dilation_h : 1,
                         max ? p->dilation_w : 1, p->padding, p->pad_top, p->pad_left,
                         p->pad_bottom, p->pad_right);
    a[k++] = attr_ints(e, "kernel_shape", 2, (int64_t[]){p->kernel_h, p->kernel_w});
    a[k++] = attr_int(e, "ceil_mode", p->ceil_mode);
    if (!max)
        a[k++] = attr_int(e, "count_include_pad", p->count_include_pad);
    char *y = unary(e, max ? "MaxPool" : "AveragePool", x, NULL, a);
    transpose(e, y, ox_to_nhwc, out);
}

static void export_matmul(ex *e, const sx_cg_node *n, char **in, const char *out)
{
    const sx_cg_attr *at = sx_cg_node_attr(n);
    int n_in = sx_cg_node_n_inputs(n);
    if (sx_cg_node_rank(n) == 2) {
        Onnx__AttributeProto *a[5] = {
            attr_float(e, "alpha", at->alpha), attr_float(e, "beta", n_in == 3 ? at->beta : 0),
            attr_int(e, "transA", at->trans_a), attr_int(e, "transB", at->trans_b), NULL};
        node_add(e, "Gemm", n_in, in, out, a);
        return;
    }
    if (at->trans_a || at->trans_b || at->alpha != 1) {
        unsupported(e, n, "a batched product with a transpose or a factor");
        return;
    }
    if (n_in == 2) {
        node_add(e, "MatMul", 2, in, out, NULL);
        return;
    }
    char *p = fresh(e), *c = in[2];
    node_add(e, "MatMul", 2, in, p, NULL);
    if (at->beta != 1) {
        char *b[2] = {in[2], init_scalar(e, at->beta)};
        c = fresh(e);
        node_add(e, "Mul", 2, b, c, NULL);
    }
    char *s[2] = {p, c};
    node_add(e, "Add", 2, s, out, NULL);
}

static void export_reduce(ex *e, const sx_cg_node *n, char **in, const char *out, const char *op)
{
    const sx_cg_attr *at = sx_cg_node_attr(n);
    int r = sx_cg_node_rank(sx_cg_node_input(n, 0)), k = 0;
    int64_t axes[SX_MAX_RANK];
    for (int i = 0; i < r; i++)
        if (at->axes & SX_AXIS(i))
            axes[k++] = i;
    Onnx__AttributeProto *a[3] = {attr_int(e, "keepdims", at->keepdims), NULL, NULL};
    if (strcmp(op, "ReduceSum") == 0) { /* opset 13: axes as an input */
        char *ins[2] = {in[0], init_ints(e, k, axes)};
        node_add(e, op, 2, ins, out, a);
        return;
    }
    a[1] = attr_ints(e, "axes", k, axes);
    node_add(e, op, 1, in, out, a);
}

/* conv_transpose2d: ConvTranspose between Transposes; k (kh, kw, c_out/g, c_in) -> ONNX's
 * (c_in, c_out/g, kh, kw). */
static void export_conv_transpose(ex *e, const sx_cg_node *n, char **in, const char *out)
{
    const sx_conv2d_params *p = &sx_cg_node_attr(n)->conv;
    char *x = transpose(e, in[0], ox_to_nchw, NULL);
    static const int to_w[4] = {3, 2, 0, 1};
    char *w = transpose(e, in[1], to_w, NULL);
    Onnx__AttributeProto *a[9] = {NULL};
    const int64_t *ks = sx_cg_node_shape(sx_cg_node_input(n, 1));
    int k = window_attrs(e, a, p->stride_h, p->stride_w, p->dilation_h, p->dilation_w, p->padding,
                         p->pad_top, p->pad_left, p->pad_bottom, p->pad_right);
    a[k++] = attr_int(e, "group", p->groups > 0 ? p->groups : 1);
    a[k++] = attr_ints(e, "kernel_shape", 2, ks);
    if (p->output_padding_h || p->output_padding_w)
        a[k++] = attr_ints(e, "output_padding", 2,
                           (int64_t[]){p->output_padding_h, p->output_padding_w});
    char *y = fresh(e), *xs[2] = {x, w};
    if (y != NULL)
        node_add(e, "ConvTranspose", 2, xs, y, a);
    transpose(e, y, ox_to_nhwc, out);
}

/* gather of rows by constant indices (what the importer makes of Resize's nearest modes):
 * Gather on axis 0 with the indices as an int64 initializer. */
static void export_gather(ex *e, const sx_cg_node *n, char **in, const char *out)
{
    const sx_cg_node *ix = sx_cg_node_input(n, 1);
    const sx_tensor *v = sx_cg_value(ix);
    if (sx_cg_node_op(ix) != SX_OP_CONST || v == NULL || v->data == NULL || v->rank != 1) {
        unsupported(e, n, "indices that are not a constant vector");
        return;
    }
    int64_t *idx = ex_alloc(e, (size_t)(v->size ? v->size : 1) * sizeof *idx);
    if (idx == NULL)
        return;
    for (int64_t i = 0; i < v->size; i++)
        idx[i] = (int64_t)sx_tensor_get(v, i);
    Onnx__AttributeProto *a[2] = {attr_int(e, "axis", 0), NULL};
    char *xs[2] = {in[0], init_ints(e, (int)v->size, idx)};
    node_add(e, "Gather", 2, xs, out, a);
}

/* embedding: Gather of the table's rows at the indices cast to int64 (PyTorch's nn.Embedding
 * exports a Gather too); a padding index reads zeros: the rows times (idx != pad). */
static void export_embedding(ex *e, const sx_cg_node *n, char **in, const char *out)
{
    int64_t pad = sx_cg_node_attr(n)->ints[0];
    Onnx__AttributeProto *c[2] = {attr_int(e, "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT64), NULL};
    char *ids = unary(e, "Cast", in[1], NULL, c);
    Onnx__AttributeProto *a[2] = {attr_int(e, "axis", 0), NULL};
    char *xs[2] = {in[0], ids};
    if (pad < 0) {
        node_add(e, "Gather", 2, xs, out, a);
        return;
    }
    char *rows = fresh(e), *eq = fresh(e), *keep_f = fresh(e), *keep = fresh(e);
    node_add(e, "Gather", 2, xs, rows, a);
    char *q[2] = {ids, init_ints(e, 1, &pad)};
    node_add(e, "Equal", 2, q, eq, NULL);
    char *keep_b = unary(e, "Not", eq, NULL, NULL);
    Onnx__AttributeProto *f[2] = {attr_int(e, "to",
                                           e->dt == SX_F32 ? ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
                                                           : ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE),
                                  NULL};
    unary(e, "Cast", keep_b, keep_f, f);
    int64_t last = -1;
    char *u[2] = {keep_f, init_ints(e, 1, &last)};
    node_add(e, "Unsqueeze", 2, u, keep, NULL);
    char *m[2] = {rows, keep};
    node_add(e, "Mul", 2, m, out, NULL);
}

/* argmax / argmin over one axis: ArgMax / ArgMin (int64), then a Cast to the model's dtype. */
static void export_arg(ex *e, const sx_cg_node *n, char **in, const char *out, bool max)
{
    const sx_cg_attr *at = sx_cg_node_attr(n);
    int r = sx_cg_node_rank(sx_cg_node_input(n, 0)), axis = -1, count = 0;
    for (int i = 0; i < r; i++)
        if (at->axes & SX_AXIS(i)) {
            axis = i;
            count++;
        }
    if (count != 1) {
        unsupported(e, n, "an arg extreme over several axes");
        return;
    }
    Onnx__AttributeProto *a[3] = {attr_int(e, "axis", axis), attr_int(e, "keepdims", at->keepdims),
                                  NULL};
    char *i = unary(e, max ? "ArgMax" : "ArgMin", in[0], NULL, a);
    Onnx__AttributeProto *c[2] = {attr_int(e, "to",
                                           e->dt == SX_F32 ? ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
                                                           : ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE),
                                  NULL};
    unary(e, "Cast", i, out, c);
}

/* slice: Slice with starts, ends, axes and steps as initializers (an open end of a backward
 * slice is INT64_MIN: through the first element). */
static void export_slice(ex *e, const sx_cg_node *n, char **in, const char *out)
{
    const sx_cg_attr *at = sx_cg_node_attr(n);
    int r = sx_cg_node_rank(sx_cg_node_input(n, 0));
    int64_t st[SX_MAX_RANK], en[SX_MAX_RANK], ax[SX_MAX_RANK], sp[SX_MAX_RANK];
    for (int i = 0; i < r; i++) {
        const sx_slice *sl = &at->slice[i];
        st[i] = sl->start;
        en[i] = sl->stop == SX_SLICE_END && sl->step < 0 ? INT64_MIN : sl->stop;
        ax[i] = i;
        sp[i] = sl->step;
    }
    char *xs[5] = {in[0], init_ints(e, r, st), init_ints(e, r, en), init_ints(e, r, ax),
                   init_ints(e, r, sp)};
    node_add(e, "Slice", 5, xs, out, NULL);
}

/* conv_transpose2d, gather, argmax/argmin, slice: true when n is one of them (exported). */
static bool export_layout_op(ex *e, const sx_cg_node *n, char **in, const char *out)
{
    sx_cg_op op = sx_cg_node_op(n);
    if (op == SX_OP_CONV_TRANSPOSE2D)
        export_conv_transpose(e, n, in, out);
    else if (op == SX_OP_GATHER)
        export_gather(e, n, in, out);
    else if (op == SX_OP_EMBEDDING)
        export_embedding(e, n, in, out);
    else if (op == SX_OP_ARGMAX || op == SX_OP_ARGMIN)
        export_arg(e, n, in, out, op == SX_OP_ARGMAX);
    else if (op == SX_OP_SLICE)
        export_slice(e, n, in, out);
    else
        return false;
    return true;
}

typedef struct simple {
    sx_cg_op op;
    const char *onnx;
} simple;

/* Ops with an ONNX twin taking the same inputs and no attributes. */
static const simple simples[] = {
    {SX_OP_ADD, "Add"},   {SX_OP_SUB, "Sub"},           {SX_OP_MUL, "Mul"},
    {SX_OP_DIV, "Div"},   {SX_OP_POW, "Pow"},           {SX_OP_MAX, "Max"},
    {SX_OP_MIN, "Min"},   {SX_OP_NEG, "Neg"},           {SX_OP_ABS, "Abs"},
    {SX_OP_SIGN, "Sign"}, {SX_OP_SQRT, "Sqrt"},         {SX_OP_EXP, "Exp"},
    {SX_OP_LOG, "Log"},   {SX_OP_SIN, "Sin"},           {SX_OP_COS, "Cos"},
    {SX_OP_TAN, "Tan"},   {SX_OP_TANH, "Tanh"},         {SX_OP_SIGMOID, "Sigmoid"},
    {SX_OP_RELU, "Relu"}, {SX_OP_SOFTPLUS, "Softplus"}, {SX_OP_FLOOR, "Floor"},
    {SX_OP_CEIL, "Ceil"}, {SX_OP_ROUND, "Round"},       {SX_OP_RECIPROCAL, "Reciprocal"},
    {SX_OP_ERF, "Erf"},   {SX_OP_SOFTSIGN, "Softsign"}, {SX_OP_IDENTITY, "Identity"},
};

/* Node n (inputs named in[]) as ONNX nodes writing `out`. */
/* ---------------------------------------------------------------- norm */

/* A constant of the model's dtype and the given shape filled with v. */
static char *init_full(ex *e, int rank, const int64_t *shape, double v)
{
    char *name = fresh(e);
    sx_tensor *t = NULL;
    if (name == NULL || sx_tensor_full(e->dt, rank, shape, v, &t) != SX_OK) {
        e->err = SX_E_NOMEM;
        return NULL;
    }
    init_float(e, name, t);
    sx_tensor_free(t);
    return name;
}

/* norm(x, norm_stats(x)[, gamma, beta]) (its statistics are not exported on their own): layer
 * norm (one group, no axes between lead and tail) as LayerNormalization (opset 17); any other
 * grouping as x viewed (n, G, s k) through Reshape and Transpose, InstanceNormalization with unit
 * scale, back to x's shape, then * gamma + beta. */
static void export_norm(ex *e, const sx_cg_node *n, char **in, const char *out, bool batch_dep)
{
    const sx_cg_attr *at = sx_cg_node_attr(n);
    const sx_cg_node *x = sx_cg_node_input(n, 0), *st = sx_cg_node_input(n, 1);
    const sx_cg_attr *sa = sx_cg_node_attr(st);
    if (sx_cg_node_op(st) != SX_OP_NORM_STATS || sx_cg_node_input(st, 0) != x ||
        sa->norm.lead != at->norm.lead || sa->norm.tail != at->norm.tail ||
        sa->norm.groups != at->norm.groups) {
        unsupported(e, n, "statistics that are not norm_stats of the normalised value");
        return;
    }
    if (sx_cg_node_n_inputs(n) == 5 || at->norm.relu != 0) {
        unsupported(e, n,
                    "batch norm with a residual or relu fused in (export the unoptimised "
                    "graph)");
        return;
    }
    int r = sx_cg_node_rank(x), lead = (int)at->norm.lead, tail = (int)at->norm.tail;
    int64_t groups = at->norm.groups;
    const int64_t *xs = sx_cg_node_shape(x);
    bool affine = sx_cg_node_n_inputs(n) == 4;
    Onnx__AttributeProto *a[3] = {NULL, NULL, NULL};
    if (groups == 1 && lead + tail == r) {
        e->opset = 17;
        a[0] = attr_int(e, "axis", lead);
        a[1] = attr_float(e, "epsilon", at->alpha);
        char *ins[3] = {affine ? in[2] : init_full(e, tail, xs + lead, 1.0), affine ? in[3] : NULL};
        char *li[3] = {in[0], ins[0], ins[1]};
        node_add(e, "LayerNormalization", affine ? 3 : 2, li, out, a);
        return;
    }
    if (r == 4 && lead == 1 && tail == 1 && groups == xs[3]) { /* instance norm of NHWC */
        a[0] = attr_float(e, "epsilon", at->alpha);
        char *ii[3] = {transpose(e, in[0], ox_to_nchw, NULL),
                       affine ? in[2] : init_full(e, 1, &groups, 1.0),
                       affine ? in[3] : init_full(e, 1, &groups, 0.0)};
        char *yn = fresh(e);
        node_add(e, "InstanceNormalization", 3, ii, yn, a);
        transpose(e, yn, ox_to_nhwc, out);
        return;
    }
    int64_t s = 1, c = 1;
    for (int i = lead; i < r; i++)
        *(i < r - tail ? &s : &c) *= xs[i];
    int64_t k = c / groups;
    int64_t v4[4] = {lead == 0   ? 1
                     : lead == 1 ? (batch_dep ? 0 : xs[0])
                                 : -1,
                     lead == 0 ? -1 : s, groups, k};
    static const int swap[4] = {0, 2, 1, 3};
    char *r4[2] = {in[0], init_ints(e, 4, v4)};
    char *x4 = fresh(e);
    node_add(e, "Reshape", 2, r4, x4, NULL);
    char *xg = transpose(e, x4, swap, NULL);
    char *f3[2] = {xg, init_ints(e, 3, (int64_t[]){0, 0, -1})};
    char *x3 = fresh(e);
    node_add(e, "Reshape", 2, f3, x3, NULL);
    a[0] = attr_float(e, "epsilon", at->alpha);
    char *inn[3] = {x3, init_full(e, 1, &groups, 1.0), init_full(e, 1, &groups, 0.0)};
    char *y3 = fresh(e);
    node_add(e, "InstanceNormalization", 3, inn, y3, a);
    char *b4[2] = {y3, init_ints(e, 4, (int64_t[]){0, 0, -1, k})};
    char *y4 = fresh(e);
    node_add(e, "Reshape", 2, b4, y4, NULL);
    char *yg = transpose(e, y4, swap, NULL);
    int64_t back[SX_MAX_RANK];
    for (int i = 0; i < r; i++)
        back[i] = xs[i];
    if (batch_dep)
        back[0] = lead == 1 ? 0 : -1;
    char *bx[2] = {yg, init_ints(e, r, back)};
    char *y = affine ? fresh(e) : ex_str(e, out);
    node_add(e, "Reshape", 2, bx, y, NULL);
    if (affine) {
        char *m[2] = {y, in[2]}, *p = fresh(e), *ad[2] = {p, in[3]};
        node_add(e, "Mul", 2, m, p, NULL);
        node_add(e, "Add", 2, ad, out, NULL);
    }
}

/* The reductions: one ONNX op each, attributes from export_reduce. */
static const struct {
    sx_cg_op op;
    const char *onnx;
} reductions[] = {
    {SX_OP_SUM, "ReduceSum"},        {SX_OP_MEAN, "ReduceMean"},
    {SX_OP_REDUCE_MAX, "ReduceMax"}, {SX_OP_REDUCE_MIN, "ReduceMin"},
    {SX_OP_PROD, "ReduceProd"},      {SX_OP_L1NORM, "ReduceL1"},
    {SX_OP_L2NORM, "ReduceL2"},      {SX_OP_LOGSUMEXP, "ReduceLogSumExp"},
};

/* Reshape; the batch axis (first) of a value computed from the input copies its size (0). */
static void export_reshape(ex *e, const sx_cg_node *n, char **in, const char *out, bool batch_dep)
{
    const sx_cg_attr *at = sx_cg_node_attr(n);
    int r = sx_cg_node_rank(n);
    int64_t s[SX_MAX_RANK];
    bool any_infer = false;
    for (int i = 0; i < r; i++) {
        s[i] = at->shape[i];
        any_infer |= s[i] == -1;
    }
    if (batch_dep && !any_infer && r > 0 && sx_cg_node_shape(sx_cg_node_input(n, 0))[0] == s[0])
        s[0] = 0;
    char *xs[2] = {in[0], init_ints(e, r, s)};
    node_add(e, "Reshape", 2, xs, out, NULL);
}

/* Pad (constant mode): ONNX's pads list all starts, then all ends. */
static void export_pad(ex *e, const sx_cg_node *n, char **in, const char *out)
{
    const sx_cg_attr *at = sx_cg_node_attr(n);
    int r = sx_cg_node_rank(n);
    int64_t p[2 * SX_MAX_RANK];
    memcpy(p, at->ints, (size_t)r * sizeof *p);
    memcpy(p + r, at->ints2, (size_t)r * sizeof *p);
    char *xs[3] = {in[0], init_ints(e, 2 * r, p), init_scalar(e, at->alpha)};
    node_add(e, "Pad", 3, xs, out, NULL);
}

/* attention(q, k, v) (o and the log-sum-exp packed) as its composition: S = scale q k^T, plus a
 * constant -inf above the diagonal when causal, o = Softmax(S) v, lse = ReduceLogSumExp(S) on
 * the last axis, the two concatenated. ONNX has no fused attention at opset 13; a runtime
 * materialises the (tq, tk) scores. */
static void export_attention(ex *e, const sx_cg_node *n, char **in, const char *out)
{
    const sx_cg_attr *at = sx_cg_node_attr(n);
    const int64_t tq = sx_cg_node_shape(n)[1], tk = sx_cg_node_shape(sx_cg_node_input(n, 1))[1];
    Onnx__AttributeProto *a[3] = {attr_ints(e, "perm", 3, (const int64_t[]){0, 2, 1}), NULL, NULL};
    char *qk[2] = {in[0], unary(e, "Transpose", in[1], NULL, a)}, *p = fresh(e);
    node_add(e, "MatMul", 2, qk, p, NULL);
    char *sc[2] = {p, init_scalar(e, at->attention.scale)}, *s = fresh(e);
    node_add(e, "Mul", 2, sc, s, NULL);
    if (at->attention.causal != 0) {
        const int64_t ms[2] = {tq, tk};
        char *name = fresh(e), *masked = fresh(e);
        sx_tensor *m = NULL;
        if (name == NULL || sx_tensor_zeros(e->dt, 2, ms, &m) != SX_OK) {
            e->err = SX_E_NOMEM;
            return;
        }
        for (int64_t i = 0; i < tq; i++)
            for (int64_t j = i + tk - tq + 1; j < tk; j++)
                sx_tensor_set(m, i * tk + j, -INFINITY);
        init_float(e, name, m);
        sx_tensor_free(m);
        char *ad[2] = {s, name};
        node_add(e, "Add", 2, ad, masked, NULL);
        s = masked;
    }
    a[0] = attr_int(e, "axis", 2);
    char *pv[2] = {unary(e, "Softmax", s, NULL, a), in[2]}, *o = fresh(e);
    node_add(e, "MatMul", 2, pv, o, NULL);
    a[0] = attr_int(e, "keepdims", 1);
    a[1] = attr_ints(e, "axes", 1, (const int64_t[]){2});
    char *cat[2] = {o, unary(e, "ReduceLogSumExp", s, NULL, a)};
    a[0] = attr_int(e, "axis", 2);
    a[1] = NULL;
    node_add(e, "Concat", 2, cat, out, a);
}

static void export_node(ex *e, const sx_cg_node *n, char **in, const char *out, bool batch_dep)
{
    sx_cg_op op = sx_cg_node_op(n);
    const sx_cg_attr *at = sx_cg_node_attr(n);
    for (size_t i = 0; i < sizeof simples / sizeof *simples; i++)
        if (simples[i].op == op) {
            node_add(e, simples[i].onnx, sx_cg_node_n_inputs(n), in, out, NULL);
            return;
        }
    Onnx__AttributeProto *a[3] = {NULL, NULL, NULL};
    if (op == SX_OP_SQR) {
        char *xs[2] = {in[0], in[0]};
        node_add(e, "Mul", 2, xs, out, NULL);
        return;
    }
    if (op == SX_OP_RSQRT) {
        unary(e, "Reciprocal", unary(e, "Sqrt", in[0], NULL, NULL), out, NULL);
        return;
    }
    if (op == SX_OP_LEAKY_RELU || op == SX_OP_ELU) {
        a[0] = attr_float(e, "alpha", at->alpha);
        unary(e, op == SX_OP_ELU ? "Elu" : "LeakyRelu", in[0], out, a);
        return;
    }
    if (op == SX_OP_FMA) {
        char *p = fresh(e), *s[2] = {p, in[2]};
        node_add(e, "Mul", 2, in, p, NULL);
        node_add(e, "Add", 2, s, out, NULL);
        return;
    }
    if (op == SX_OP_WHERE) {
        a[0] = attr_int(e, "to", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL);
        char *s[3] = {unary(e, "Cast", in[0], NULL, a), in[1], in[2]};
        node_add(e, "Where", 3, s, out, NULL);
        return;
    }
    for (size_t i = 0; i < sizeof reductions / sizeof *reductions; i++)
        if (reductions[i].op == op) {
            export_reduce(e, n, in, out, reductions[i].onnx);
            return;
        }
    if (op == SX_OP_RESHAPE) {
        export_reshape(e, n, in, out, batch_dep);
        return;
    }
    if (op == SX_OP_PERMUTE) {
        int r = sx_cg_node_rank(n);
        a[0] = attr_ints(e, "perm", r, at->ints);
        unary(e, "Transpose", in[0], out, a);
        return;
    }
    if (op == SX_OP_CONCAT) {
        a[0] = attr_int(e, "axis", at->axis);
        node_add(e, "Concat", sx_cg_node_n_inputs(n), in, out, a);
        return;
    }
    if (op == SX_OP_PAD) {
        export_pad(e, n, in, out);
        return;
    }
    if (op == SX_OP_MATMUL) {
        export_matmul(e, n, in, out);
        return;
    }
    if (op == SX_OP_CONV2D && at->prog.n != 0) {
        unsupported(e, n, "a convolution with an epilogue (export the graph before optimising)");
        return;
    }
    if (op == SX_OP_CONV2D) {
        export_conv(e, n, in, out);
        return;
    }
    if (op == SX_OP_MAXPOOL2D || op == SX_OP_AVGPOOL2D) {
        export_pool(e, n, in, out, op == SX_OP_MAXPOOL2D);
        return;
    }
    if (export_layout_op(e, n, in, out))
        return;
    if (op == SX_OP_NORM) { /* LayerNormalization, or InstanceNormalization over a view */
        export_norm(e, n, in, out, batch_dep);
        return;
    }
    if (op == SX_OP_SOFTMAX || op == SX_OP_LOG_SOFTMAX) {
        a[0] = attr_int(e, "axis", at->axis);
        unary(e, op == SX_OP_SOFTMAX ? "Softmax" : "LogSoftmax", in[0], out, a);
        return;
    }
    if (op == SX_OP_ATTENTION) {
        export_attention(e, n, in, out);
        return;
    }
    unsupported(e, n, "no ONNX counterpart in the exporter");
}

/* ---------------------------------------------------------------- the model */

static Onnx__ValueInfoProto *value_info(ex *e, const char *name, const sx_cg_node *n)
{
    Onnx__ValueInfoProto *vi = ex_alloc(e, sizeof *vi);
    Onnx__TypeProto *tp = ex_alloc(e, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = ex_alloc(e, sizeof *tt);
    Onnx__TensorShapeProto *sh = ex_alloc(e, sizeof *sh);
    int r = sx_cg_node_rank(n);
    Onnx__TensorShapeProto__Dimension **dims = ex_alloc(e, (size_t)(r ? r : 1) * sizeof *dims);
    if (vi == NULL || tp == NULL || tt == NULL || sh == NULL || dims == NULL)
        return NULL;
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    for (int i = 0; i < r; i++) {
        Onnx__TensorShapeProto__Dimension *d = ex_alloc(e, sizeof *d);
        if (d == NULL)
            return NULL;
        onnx__tensor_shape_proto__dimension__init(d);
        if (i == 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = ex_str(e, "N");
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = sx_cg_node_shape(n)[i];
        }
        dims[i] = d;
    }
    sh->n_dim = (size_t)r;
    sh->dim = dims;
    tt->has_elem_type = 1;
    tt->elem_type = e->dt == SX_F32 ? ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
                                    : ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
    if (e->ids && strcmp(name, "x") == 0)
        tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->name = ex_str(e, name);
    vi->type = tp;
    return vi;
}

static void export_ids_cast(ex *e)
{
    Onnx__AttributeProto *c[2] = {attr_int(e, "to",
                                           e->dt == SX_F32 ? ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
                                                           : ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE),
                                  NULL};
    unary(e, "Cast", ex_str(e, "x"), "x_value", c);
}

/* Every node of g that y needs, in creation order, as ONNX nodes and initializers. */
static sx_status export_graph(ex *e, sx_cg_graph *g, sx_cg_node *x, sx_cg_node *y)
{
    int64_t size = sx_cg_graph_size(g);
    bool *need = sx_calloc((size_t)size + 1, sizeof *need);
    bool *dep = sx_calloc((size_t)size + 1, sizeof *dep); /* computed from x */
    if (need == NULL || dep == NULL) {
        sx_free(need);
        sx_free(dep);
        return SX_E_NOMEM;
    }
    need[sx_cg_node_id(y)] = true;
    for (int64_t i = size - 1; i >= 0; i--) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        if (n == NULL || !need[i])
            continue;
        for (int k = 0; k < sx_cg_node_n_inputs(n); k++)
            if (!(sx_cg_node_op(n) == SX_OP_NORM && k == 1)) /* norm: its statistics within */
                need[sx_cg_node_id(sx_cg_node_input(n, k))] = true;
    }
    for (int64_t i = 0; i < size && e->err == SX_OK; i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        if (n == NULL || !need[i])
            continue;
        char name[32], *in[SX_CG_MAX_INPUTS];
        val_name(n, name, sizeof name);
        const char *out = n == y ? "y" : name;
        sx_cg_op op = sx_cg_node_op(n);
        if (op == SX_OP_INPUT) {
            if (n != x)
                unsupported(e, n, "a second input");
            else if (e->ids) /* int64 ids as the graph's values: "x" -> Cast -> "x_value" */
                export_ids_cast(e);
            dep[i] = true;
            continue;
        }
        if (op == SX_OP_CONST || op == SX_OP_PARAM) {
            init_float(e, out, sx_cg_value(n));
            continue;
        }
        for (int k = 0; k < sx_cg_node_n_inputs(n); k++) {
            sx_cg_node *a = sx_cg_node_input(n, k);
            char b[32];
            val_name(a, b, sizeof b);
            in[k] = ex_str(e, a != x ? b : e->ids ? "x_value" : "x");
            dep[i] |= dep[sx_cg_node_id(a)];
        }
        export_node(e, n, in, out, dep[i]);
    }
    if (e->err == SX_OK && sx_cg_node_op(y) == SX_OP_INPUT)
        unsupported(e, y, "the output is the input");
    sx_free(need);
    sx_free(dep);
    return e->err;
}

static sx_status write_packed(const Onnx__ModelProto *m, const char *path)
{
    size_t n = onnx__model_proto__get_packed_size(m);
    uint8_t *buf = sx_alloc(n ? n : 1);
    if (buf == NULL)
        return SX_E_NOMEM;
    onnx__model_proto__pack(m, buf);
    size_t pl = strlen(path);
    char *tmp = sx_alloc(pl + 32);
    if (tmp == NULL) {
        sx_free(buf);
        return SX_E_NOMEM;
    }
    snprintf(tmp, pl + 32, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    sx_status s = SX_OK;
    if (f == NULL) {
        s = sx_error(SX_E_IO, "sx_onnx_export: %s: %s", tmp, strerror(errno));
    } else {
        bool ok = fwrite(buf, 1, n, f) == n;
        ok = (fclose(f) == 0) && ok;
        if (!ok || rename(tmp, path) != 0) {
            s = sx_error(SX_E_IO, "sx_onnx_export: %s: %s", path, strerror(errno));
            remove(tmp);
        }
    }
    sx_free(tmp);
    sx_free(buf);
    return s;
}

/* The model's preprocessing description as metadata_props (keys as in a model file). */
static void export_prep_meta(ex *e, const sx_nn_model *m, Onnx__ModelProto *mp)
{
    const nn_prep *p = nn_model_prep(m);
    nn_prep_meta pm = {0};
    if (p == NULL || !p->in_graph)
        return;
    if (nn_prep_meta_make(p, &pm) != SX_OK) {
        e->err = SX_E_NOMEM;
        return;
    }
    Onnx__StringStringEntryProto **props = ex_alloc(e, (size_t)(pm.n + 1) * sizeof *props);
    char scale[40];
    snprintf(scale, sizeof scale, "%.17g", p->scale);
    for (int i = 0; props != NULL && i <= pm.n; i++) {
        Onnx__StringStringEntryProto *kv = ex_alloc(e, sizeof *kv);
        if (kv == NULL)
            break;
        onnx__string_string_entry_proto__init(kv);
        kv->key = ex_str(e, i < pm.n ? pm.keys[i] : "input_scale");
        kv->value = ex_str(e, i < pm.n ? pm.vals[i] : scale);
        props[i] = kv;
    }
    if (props != NULL && e->err == SX_OK) {
        mp->n_metadata_props = (size_t)pm.n + 1;
        mp->metadata_props = props;
    }
    nn_prep_meta_free(&pm);
}

sx_status sx_onnx_export(sx_nn_model *m, const char *path)
{
    if (m == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_onnx_export: NULL argument");
    sx_cg_graph *g = NULL;
    sx_cg_node *x = NULL, *y = NULL;
    SX_TRY(nn_model_infer_graph(m, 1, &g, &x, &y));
    ex e;
    memset(&e, 0, sizeof e);
    e.dt = sx_cg_node_dtype(y);
    e.opset = 13;
    e.ids = m->ids_in && sx_nn_model_n_inputs(m) <= 1;
    sx_status s = export_graph(&e, g, x, y);
    Onnx__ModelProto *mp = ex_alloc(&e, sizeof *mp);
    Onnx__GraphProto *gp = ex_alloc(&e, sizeof *gp);
    Onnx__OperatorSetIdProto *os = ex_alloc(&e, sizeof *os);
    Onnx__OperatorSetIdProto **osl = ex_alloc(&e, sizeof *osl);
    Onnx__ValueInfoProto **ins = ex_alloc(&e, sizeof *ins), **outs = ex_alloc(&e, sizeof *outs);
    if (s == SX_OK && e.err == SX_OK && mp && gp && os && osl && ins && outs) {
        onnx__model_proto__init(mp);
        onnx__graph_proto__init(gp);
        onnx__operator_set_id_proto__init(os);
        os->domain = ex_str(&e, "");
        os->has_version = 1;
        os->version = e.opset;
        osl[0] = os;
        ins[0] = value_info(&e, "x", x);
        outs[0] = value_info(&e, "y", y);
        gp->name = ex_str(&e, "strix");
        gp->n_node = (size_t)e.n_nodes;
        gp->node = e.nodes;
        gp->n_initializer = (size_t)e.n_inits;
        gp->initializer = e.inits;
        gp->n_input = 1;
        gp->input = ins;
        gp->n_output = 1;
        gp->output = outs;
        mp->has_ir_version = 1;
        mp->ir_version = 7;
        mp->n_opset_import = 1;
        mp->opset_import = osl;
        mp->producer_name = ex_str(&e, "strix");
        mp->producer_version = ex_str(&e, "0.1");
        mp->graph = gp;
        /* the graph holds the preprocessing; its description (class and feature names, the
         * image resize) travels as metadata, which sx_onnx_import reads back */
        if (e.err == SX_OK)
            export_prep_meta(&e, m, mp);
        if (e.err == SX_OK)
            s = write_packed(mp, path);
    }
    if (s == SX_OK)
        s = e.err;
    for (int i = 0; i < e.n_bag; i++)
        sx_free(e.bag[i]);
    sx_free(e.bag);
    sx_free(e.nodes);
    sx_free(e.inits);
    sx_cg_graph_free(g);
    return s;
}
