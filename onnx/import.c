/* import.c: an ONNX model proto -> a lazy strix graph (initializers as constants, graph inputs
 * as input nodes, each node through its mapping in ops.c, checked attribute by attribute), the
 * public graph handle, and sx_onnx_import's model, which rebuilds the graph for each batch size
 * it runs (a model's shapes may depend on the batch through Shape/Reshape chains). */
#include "nn_impl.h"
#include "onnx_impl.h"

#include <stdlib.h>
#include <string.h>

/* Inputs larger than this many elements are refused (a hostile file must not make strix try
 * to allocate terabytes). */
#define OX_MAX_INPUT_ELEMS ((int64_t)1 << 31)

struct sx_onnx_graph {
    ox_ctx c;
    Onnx__ModelProto *model; /* owned when own_model */
    bool own_model;
    char *file;
    int n_in, n_out;
    sx_cg_node **in, **out;
    sx_cg_node *packed; /* sx_onnx_import with several inputs: one (batch, row) input whose
                           columns the inputs read, one after another (in[] then unused) */
    const char **in_names, **out_names; /* borrowed from the model */
};

sx_onnx_import_params sx_onnx_import_params_default(void)
{
    sx_onnx_import_params p;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.dtype = SX_F32;
    p.optimise = true;
    return p;
}

void ox_ctx_free(ox_ctx *c)
{
    for (int i = 0; i < c->n_vals; i++) {
        sx_free(c->vals[i]->ints);
        sx_tensor_free(c->vals[i]->cst);
        sx_free(c->vals[i]);
    }
    sx_free(c->vals);
    sx_cg_graph_free(c->g);
    memset(c, 0, sizeof *c);
}

/* ---------------------------------------------------------------- the graph */

/* Ops whose definition has not changed since an opset older than OX_OPSET_MIN: a model
 * of an older opset whose every node is one of them maps as well (ONNX's InstanceNormalization
 * cases are opset 6). */
static const struct {
    const char *op;
    int since;
} old_ops[] = {{"InstanceNormalization", 6}};

static bool old_opset_ok(const ox_ctx *c)
{
    const Onnx__GraphProto *gr = c->model->graph;
    if (gr == NULL || gr->n_node == 0)
        return false;
    for (size_t i = 0; i < gr->n_node; i++) {
        bool ok = false;
        for (size_t k = 0; k < sizeof old_ops / sizeof old_ops[0] && !ok; k++)
            ok = gr->node[i]->op_type != NULL && strcmp(gr->node[i]->op_type, old_ops[k].op) == 0 &&
                 c->opset >= old_ops[k].since;
        if (!ok)
            return false;
    }
    return true;
}

static sx_status check_opset(ox_ctx *c)
{
    const Onnx__ModelProto *m = c->model;
    c->opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (o->domain == NULL || o->domain[0] == '\0' || strcmp(o->domain, "ai.onnx") == 0)
            c->opset = (int)(o->version < 0 ? -1 : o->version > 1000 ? 1000 : o->version);
    }
    if (c->opset < 0 && m->graph != NULL && m->graph->n_node > 0) { /* name the first node */
        c->node = m->graph->node[0];
        c->node_index = 0;
    }
    if (c->opset < 0)
        return ox_fail(c, SX_E_UNSUPPORTED, "no opset of the default domain (domain '%s')",
                       c->node && c->node->domain ? c->node->domain : "");
    if ((c->opset < OX_OPSET_MIN && !old_opset_ok(c)) || c->opset > OX_OPSET_MAX)
        return ox_fail(c, SX_E_UNSUPPORTED, "opset %d (strix maps opsets %d..%d)", c->opset,
                       OX_OPSET_MIN, OX_OPSET_MAX);
    return SX_OK;
}

static sx_status add_initializers(ox_ctx *c, const Onnx__GraphProto *gr)
{
    for (size_t i = 0; i < gr->n_initializer; i++) {
        Onnx__TensorProto *t = gr->initializer[i];
        SX_TRY(ox_tensor_external(c, t));
        ox_val *v;
        SX_TRY(ox_define(c, t->name, &v));
        SX_TRY(ox_tensor_dims(c, t, &v->rank, v->shape));
        if (ox_dtype_is_float(t->data_type)) {
            SX_TRY(ox_tensor_float(c, t, c->dt, &v->cst));
            v->n = c->trainable ? sx_cg_param(c->g, t->name, v->cst) : sx_cg_const(c->g, v->cst);
            if (v->n == NULL)
                return ox_graph_fail(c);
        } else {
            int64_t n;
            SX_TRY(ox_tensor_ints(c, t, &v->ints, &n));
            v->itype = t->data_type;
        }
    }
    return SX_OK;
}

static bool is_initializer(const Onnx__GraphProto *gr, const char *name)
{
    for (size_t i = 0; i < gr->n_initializer; i++)
        if (gr->initializer[i]->name && strcmp(gr->initializer[i]->name, name) == 0)
            return true;
    return false;
}

/* Element types of graph inputs computed as the import dtype: floats, and integers whose values
 * it holds exactly up to 2^24 (f32), e.g. token ids read by Gather. */
static bool input_type_ok(int32_t t)
{
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        return true;
    default:
        return false;
    }
}

/* Point c->node at the first node reading value `name`, so that a refusal of the value names
 * the node and its op. */
static void blame_reader(ox_ctx *c, const char *name)
{
    const Onnx__GraphProto *gr = c->model->graph;
    for (size_t i = 0; gr != NULL && i < gr->n_node && c->node == NULL; i++)
        for (size_t k = 0; k < gr->node[i]->n_input && c->node == NULL; k++)
            if (strcmp(gr->node[i]->input[k], name) == 0 && gr->node[i]->op_type != NULL) {
                c->node = gr->node[i];
                c->node_index = (int)i;
            }
}

/* A graph input: a float or integer tensor of fixed dims but the first, which may be the
 * batch. */
static sx_status add_input(ox_ctx *c, const Onnx__ValueInfoProto *vi, sx_cg_node **out)
{
    const char *name = vi->name ? vi->name : "";
    const Onnx__TypeProto *tp = vi->type;
    bool tensor = tp != NULL && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE &&
                  tp->tensor_type != NULL;
    if (!tensor || !input_type_ok(tp->tensor_type->elem_type))
        blame_reader(c, name);
    if (!tensor)
        return ox_fail(c, SX_E_UNSUPPORTED, "input '%s'%s is not a tensor", name,
                       c->node == NULL ? " (a graph input no node reads)" : "");
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    if (!input_type_ok(tt->elem_type))
        return ox_fail(c, SX_E_UNSUPPORTED,
                       "input '%s'%s of type %s (strix takes FLOAT, DOUBLE, BOOL and integers: "
                       "INT8 to INT64, UINT8, UINT16)",
                       name, c->node == NULL ? " (a graph input no node reads)" : "",
                       ox_dtype_name(tt->elem_type));
    const Onnx__TensorShapeProto *sh = tt->shape;
    if (sh == NULL)
        return ox_fail(c, SX_E_UNSUPPORTED, "input '%s' has no shape", name);
    if (sh->n_dim > SX_MAX_RANK)
        return ox_fail(c, SX_E_UNSUPPORTED, "input '%s' of rank %zu", name, sh->n_dim);
    int64_t s[SX_MAX_RANK], total = 1;
    bool batch0 = false;
    for (size_t k = 0; k < sh->n_dim; k++) {
        const Onnx__TensorShapeProto__Dimension *d = sh->dim[k];
        bool fixed = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                     d->dim_value >= 0;
        if (k == 0 && c->file_batch == 0)
            c->file_batch = fixed ? d->dim_value : -1;
        if (k == 0 && (c->force_batch || !fixed)) {
            s[k] = c->batch;
            batch0 = true;
        } else if (fixed) {
            s[k] = d->dim_value;
        } else
            return ox_fail(c, SX_E_UNSUPPORTED, "input '%s': axis %zu has no fixed size", name, k);
        if (total > 0 && s[k] > OX_MAX_INPUT_ELEMS / total)
            return ox_fail(c, SX_E_UNSUPPORTED, "input '%s' is too large", name);
        total *= s[k];
    }
    ox_val *v;
    SX_TRY(ox_define(c, name, &v));
    v->is_input = true;
    v->batch0 = batch0;
    v->int_graph = !ox_dtype_is_float(tt->elem_type);
    v->n = sx_cg_input(c->g, name, c->dt, (int)sh->n_dim, s);
    if (v->n == NULL)
        return ox_graph_fail(c);
    v->rank = (int)sh->n_dim;
    memcpy(v->shape, s, sizeof s);
    *out = v->n;
    return SX_OK;
}

/* A graph input given its values now (the conformance runner's): integers, or a float
 * constant. */
static sx_status bind_input(ox_ctx *c, const char *name, const Onnx__TensorProto *t)
{
    ox_val *v;
    SX_TRY(ox_define(c, name, &v));
    SX_TRY(ox_tensor_dims(c, t, &v->rank, v->shape));
    if (ox_dtype_is_float(t->data_type)) {
        SX_TRY(ox_tensor_float(c, t, c->dt, &v->cst));
        v->n = sx_cg_const(c->g, v->cst);
        return v->n != NULL ? SX_OK : ox_graph_fail(c);
    }
    int64_t n;
    v->itype = t->data_type;
    return ox_tensor_ints(c, t, &v->ints, &n);
}

/* Every attribute of the node must be one its mapping reads. */
static sx_status check_attrs(ox_ctx *c, const ox_op *op)
{
    const Onnx__NodeProto *nd = c->node;
    for (size_t i = 0; i < nd->n_attribute; i++) {
        const char *a = nd->attribute[i]->name ? nd->attribute[i]->name : "";
        size_t n = strlen(a);
        const char *p = op->attrs;
        bool ok = false;
        while (!ok && n > 0 && (p = strstr(p, a)) != NULL) {
            ok = (p == op->attrs || p[-1] == ',') && (p[n] == ',' || p[n] == '\0');
            p += n;
        }
        if (!ok)
            return ox_fail(c, SX_E_UNSUPPORTED, "attribute %s is not supported", a);
        if (nd->attribute[i]->ref_attr_name != NULL && nd->attribute[i]->ref_attr_name[0])
            return ox_fail(c, SX_E_UNSUPPORTED, "attribute %s refers to a function attribute", a);
    }
    return SX_OK;
}

/* After a reshape or a Cast to an integer type of a graph value holding integers: the output
 * holds integers too. */
static void keep_int_graph(ox_ctx *c)
{
    static const char *const keep[] = {"Cast",    "Flatten", "Identity",
                                       "Reshape", "Squeeze", "Unsqueeze"};
    ox_val *x = ox_in(c, 0), *y = ox_n_out(c) > 0 ? ox_find(c, c->node->output[0]) : NULL;
    if (x == NULL || y == NULL || !x->int_graph || y->n == NULL)
        return;
    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++)
        if (strcmp(c->node->op_type, keep[i]) == 0)
            y->int_graph = true;
    int64_t to = 0;
    if (strcmp(c->node->op_type, "Cast") == 0 && ox_attr_int(c, "to", 0, &to) == SX_OK &&
        ox_dtype_is_float((int32_t)to))
        y->int_graph = false;
}

static sx_status map_node(ox_ctx *c, const Onnx__NodeProto *nd, int index)
{
    c->node = nd;
    c->node_index = index;
    if (nd->op_type == NULL || nd->op_type[0] == '\0')
        return ox_fail(c, SX_E_FORMAT, "no op_type");
    if (nd->domain != NULL && nd->domain[0] != '\0' && strcmp(nd->domain, "ai.onnx") != 0)
        return ox_fail(c, SX_E_UNSUPPORTED, "domain '%s'", nd->domain);
    const ox_op *op = ox_op_find(nd->op_type);
    if (op == NULL)
        return ox_fail(c, SX_E_UNSUPPORTED, "op %s is not supported", nd->op_type);
    for (size_t i = 0; i < nd->n_input; i++)
        if (nd->input[i][0] != '\0' && ox_find(c, nd->input[i]) == NULL)
            return ox_fail(c, SX_E_FORMAT, "input '%s' is not defined before the node",
                           nd->input[i]);
    SX_TRY(check_attrs(c, op));
    c->no_batch = false;
    bool folded;
    SX_TRY(ox_fold(c, &folded));
    if (!folded)
        SX_TRY(op->fn(c));
    if (sx_cg_graph_status(c->g) != SX_OK)
        return ox_graph_fail(c);
    if (!folded)
        keep_int_graph(c);
    return folded ? SX_OK : ox_fold_after(c);
}

sx_status ox_import_graph(ox_ctx *c)
{
    const Onnx__GraphProto *gr = c->model->graph;
    if (gr == NULL)
        return ox_fail(c, SX_E_FORMAT, "no graph");
    SX_TRY(check_opset(c));
    SX_TRY(add_initializers(c, gr));
    for (size_t i = 0; i < gr->n_node; i++)
        SX_TRY(map_node(c, gr->node[i], (int)i));
    c->node = NULL;
    return SX_OK;
}

/* sx_onnx_import's several inputs as one: a (batch, row) input "x" whose columns hold the
 * inputs one after another (each flattened in ONNX order), as a row of a strix model with
 * several inputs; each input's value becomes its columns, reshaped. */
static sx_status pack_inputs(sx_onnx_graph *og)
{
    ox_ctx *c = &og->c;
    int64_t row = 0;
    for (int k = 0; k < og->n_in; k++) {
        const int64_t *sh = sx_cg_node_shape(og->in[k]);
        row += sx_shape_size(sx_cg_node_rank(og->in[k]) - 1, sh + 1);
    }
    og->packed = sx_cg_input(c->g, "x", c->dt, 2, (int64_t[]){c->batch, row});
    if (og->packed == NULL)
        return ox_graph_fail(c);
    int64_t off = 0;
    for (int k = 0; k < og->n_in; k++) {
        ox_val *v = ox_find(c, og->in_names[k]);
        int64_t size = sx_shape_size(v->rank - 1, v->shape + 1);
        sx_slice sl[2] = {SX_SLICE_ALL, {off, off + size, 1}};
        sx_cg_node *cols = sx_cg_slice(c->g, og->packed, sl);
        v->n = cols != NULL ? ox_reshape(c, cols, v->rank, v->shape) : NULL;
        if (v->n == NULL)
            return ox_graph_fail(c);
        off += size;
    }
    return SX_OK;
}

/* Import model (borrowed unless own) for batch: inputs, nodes, outputs. */
static sx_status check_params(const char *who, const sx_onnx_import_params *p);

/* Import model (borrowed unless own) for batch: inputs (those named in bound taken as known
 * integers), nodes, outputs. */
static sx_status graph_import_bound(Onnx__ModelProto *model, bool own, const char *file,
                                    const sx_onnx_import_params *p, int64_t batch, bool force,
                                    Onnx__TensorProto *const *bound, int n_bound,
                                    sx_onnx_graph **out)
{
    sx_onnx_graph *og = sx_calloc(1, sizeof *og);
    if (og == NULL) {
        if (own)
            onnx__model_proto__free_unpacked(model, &ox_allocator);
        return SX_E_NOMEM;
    }
    og->model = model;
    og->own_model = own;
    ox_ctx *c = &og->c;
    size_t fl = strlen(file);
    og->file = sx_alloc(fl + 1);
    sx_status s = og->file ? SX_OK : SX_E_NOMEM;
    if (s == SX_OK) {
        memcpy(og->file, file, fl + 1);
        c->file = og->file;
        c->model = model;
        c->dt = p->dtype;
        c->batch = batch;
        c->force_batch = force;
        c->trainable = p->trainable;
        c->bound = bound;
        c->n_bound = n_bound;
        s = sx_cg_graph_new(SX_CG_LAZY, p->dtype, &c->g);
    }
    const Onnx__GraphProto *gr = model->graph;
    if (s == SX_OK && gr == NULL)
        s = ox_fail(c, SX_E_FORMAT, "no graph");
    if (s == SX_OK) {
        og->in = sx_calloc(gr->n_input + 1, sizeof *og->in);
        og->in_names = sx_calloc(gr->n_input + 1, sizeof *og->in_names);
        og->out = sx_calloc(gr->n_output + 1, sizeof *og->out);
        og->out_names = sx_calloc(gr->n_output + 1, sizeof *og->out_names);
        if (!og->in || !og->in_names || !og->out || !og->out_names)
            s = SX_E_NOMEM;
    }
    if (s == SX_OK)
        s = check_opset(c);
    for (size_t i = 0; s == SX_OK && i < gr->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gr->input[i];
        if (vi->name != NULL && is_initializer(gr, vi->name))
            continue; /* a default value (IR < 4 listed initializers as inputs) */
        const Onnx__TensorProto *b = NULL;
        for (int k = 0; vi->name != NULL && k < c->n_bound; k++)
            if (c->bound[k]->name != NULL && strcmp(c->bound[k]->name, vi->name) == 0)
                b = c->bound[k];
        if (b != NULL) {
            s = bind_input(c, vi->name, b);
            continue;
        }
        s = add_input(c, vi, &og->in[og->n_in]);
        if (s == SX_OK)
            og->in_names[og->n_in++] = vi->name;
    }
    if (s == SX_OK && force && og->n_in > 1)
        s = pack_inputs(og);
    if (s == SX_OK)
        s = ox_import_graph(c);
    for (size_t i = 0; s == SX_OK && i < gr->n_output; i++) {
        const char *name = gr->output[i]->name ? gr->output[i]->name : "";
        ox_val *v = ox_find(c, name);
        if (v == NULL)
            s = ox_fail(c, SX_E_FORMAT, "output '%s' is not computed by any node", name);
        else /* known integers become a constant of their values */
            s = ox_node(c, v, OX_ONNX, &og->out[og->n_out]);
        if (s == SX_OK)
            og->out_names[og->n_out++] = name;
    }
    if (s == SX_OK && og->n_out == 0)
        s = ox_fail(c, SX_E_FORMAT, "the graph has no outputs");
    if (s != SX_OK) {
        sx_onnx_graph_free(og);
        return s;
    }
    *out = og;
    return SX_OK;
}

static sx_status graph_import(Onnx__ModelProto *model, bool own, const char *file,
                              const sx_onnx_import_params *p, int64_t batch, bool force,
                              sx_onnx_graph **out)
{
    return graph_import_bound(model, own, file, p, batch, force, NULL, 0, out);
}

static sx_status check_params(const char *who, const sx_onnx_import_params *p)
{
    if (p->batch < 1)
        return sx_error(SX_E_ARG, "%s: batch %lld (want >= 1)", who, (long long)p->batch);
    if (p->dtype != SX_F32 && p->dtype != SX_F64)
        return sx_error(SX_E_ARG, "%s: dtype %d is not f32 or f64", who, (int)p->dtype);
    return SX_OK;
}

sx_status ox_graph_import_bound(Onnx__ModelProto *model, const char *file,
                                const sx_onnx_import_params *p, Onnx__TensorProto *const *bound,
                                int n_bound, sx_onnx_graph **out)
{
    *out = NULL;
    SX_TRY(check_params("ox_graph_import_bound", p));
    return graph_import_bound(model, false, file, p, p->batch, false, bound, n_bound, out);
}

static sx_status unpack(const uint8_t *data, size_t size, const char *name, Onnx__ModelProto **out)
{
    *out = onnx__model_proto__unpack(&ox_allocator, size, data);
    if (*out == NULL)
        return sx_error(SX_E_FORMAT, "%s: not an ONNX model (the protobuf does not parse)", name);
    return SX_OK;
}

sx_status sx_onnx_graph_import_buffer(const void *data, size_t size, const char *name,
                                      const sx_onnx_import_params *p, sx_onnx_graph **out)
{
    if (out != NULL)
        *out = NULL;
    if (out == NULL || (data == NULL && size > 0))
        return sx_error(SX_E_ARG, "sx_onnx_graph_import_buffer: NULL argument");
    sx_onnx_import_params d = sx_onnx_import_params_default();
    if (p == NULL)
        p = &d;
    SX_TRY(check_params("sx_onnx_graph_import_buffer", p));
    if (name == NULL)
        name = "<buffer>";
    Onnx__ModelProto *m;
    SX_TRY(unpack(data, size, name, &m));
    return graph_import(m, true, name, p, p->batch, false, out);
}

sx_status sx_onnx_graph_import(const char *path, const sx_onnx_import_params *p,
                               sx_onnx_graph **out)
{
    if (out != NULL)
        *out = NULL;
    if (out == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_onnx_graph_import: NULL argument");
    sx_onnx_import_params d = sx_onnx_import_params_default();
    if (p == NULL)
        p = &d;
    SX_TRY(check_params("sx_onnx_graph_import", p));
    uint8_t *data;
    size_t size;
    SX_TRY(ox_read_file(path, &data, &size));
    sx_status s = sx_onnx_graph_import_buffer(data, size, path, p, out);
    sx_free(data);
    return s;
}

void sx_onnx_graph_free(sx_onnx_graph *og)
{
    if (og == NULL)
        return;
    ox_ctx_free(&og->c);
    if (og->own_model && og->model != NULL)
        onnx__model_proto__free_unpacked(og->model, &ox_allocator);
    sx_free(og->in);
    sx_free(og->out);
    sx_free(og->in_names);
    sx_free(og->out_names);
    sx_free(og->file);
    sx_free(og);
}

sx_cg_graph *sx_onnx_graph_cg(const sx_onnx_graph *og)
{
    return og != NULL ? og->c.g : NULL;
}

int sx_onnx_graph_n_inputs(const sx_onnx_graph *og)
{
    return og != NULL ? og->n_in : 0;
}

sx_cg_node *sx_onnx_graph_input(const sx_onnx_graph *og, int i)
{
    return og != NULL && i >= 0 && i < og->n_in ? og->in[i] : NULL;
}

const char *sx_onnx_graph_input_name(const sx_onnx_graph *og, int i)
{
    return og != NULL && i >= 0 && i < og->n_in ? og->in_names[i] : NULL;
}

/* The i-th float initializer's value (a parameter when trainable), or NULL. */
static const ox_val *param_val(const sx_onnx_graph *og, int i)
{
    if (og == NULL || !og->c.trainable || i < 0)
        return NULL;
    for (int k = 0; k < og->c.n_vals; k++) {
        const ox_val *v = og->c.vals[k];
        if (v->cst != NULL && v->n != NULL && sx_cg_node_op(v->n) == SX_OP_PARAM && i-- == 0)
            return v;
    }
    return NULL;
}

int sx_onnx_graph_n_params(const sx_onnx_graph *og)
{
    int n = 0;
    while (param_val(og, n) != NULL)
        n++;
    return n;
}

sx_cg_node *sx_onnx_graph_param(const sx_onnx_graph *og, int i)
{
    const ox_val *v = param_val(og, i);
    return v != NULL ? v->n : NULL;
}

const char *sx_onnx_graph_param_name(const sx_onnx_graph *og, int i)
{
    const ox_val *v = param_val(og, i);
    return v != NULL ? v->name : NULL;
}

int sx_onnx_graph_n_outputs(const sx_onnx_graph *og)
{
    return og != NULL ? og->n_out : 0;
}

sx_cg_node *sx_onnx_graph_output(const sx_onnx_graph *og, int i)
{
    return og != NULL && i >= 0 && i < og->n_out ? og->out[i] : NULL;
}

const char *sx_onnx_graph_output_name(const sx_onnx_graph *og, int i)
{
    return og != NULL && i >= 0 && i < og->n_out ? og->out_names[i] : NULL;
}

/* ---------------------------------------------------------------- models */

typedef struct model_src {
    Onnx__ModelProto *model;
    char *file;
    sx_onnx_import_params p;
    /* the outputs a row of the model's result holds one after another (names, shapes without
     * the batch axis), from the first build */
    int n_parts;
    char names[SX_NN_MAX_HEADS][32];
    int ranks[SX_NN_MAX_HEADS];
    int64_t shapes[SX_NN_MAX_HEADS][SX_MAX_RANK];
    /* the inputs a row of the model's input holds one after another (shapes without the batch) */
    int n_in;
    int in_ranks[SX_NN_MAX_HEADS];
    int64_t in_shapes[SX_NN_MAX_HEADS][SX_MAX_RANK];
    /* the file's graph inputs and outputs as it names them, with their ranks without the batch
     * axis (0 for a (batch) tensor; shapes above), for sx_onnx_model_input / _output */
    char *in_names[SX_NN_MAX_HEADS], *out_names[SX_NN_MAX_HEADS];
    int onnx_in_rank[SX_NN_MAX_HEADS], onnx_out_rank[SX_NN_MAX_HEADS];
    bool in_int[SX_NN_MAX_HEADS]; /* an input of an integer type (token ids) */
} model_src;

static void src_free(void *ctx)
{
    model_src *ms = ctx;
    if (ms == NULL)
        return;
    if (ms->model != NULL)
        onnx__model_proto__free_unpacked(ms->model, &ox_allocator);
    for (int k = 0; k < SX_NN_MAX_HEADS; k++) {
        sx_free(ms->in_names[k]);
        sx_free(ms->out_names[k]);
    }
    sx_free(ms->file);
    sx_free(ms);
}

/* Output k of og as (n, its size) for a row of the result; its shape without the batch axis
 * into ms (the first build). */
static sx_status src_output(model_src *ms, sx_onnx_graph *og, int k, int64_t n, sx_cg_node **flat)
{
    sx_cg_node *out = og->out[k];
    int r = sx_cg_node_rank(out);
    const int64_t *os = sx_cg_node_shape(out);
    if (r < 1 || os[0] != n) {
        char b[128];
        return sx_error(SX_E_UNSUPPORTED,
                        "%s: output '%s' of shape %s has no batch axis of %lld (use "
                        "sx_onnx_graph_import)",
                        ms->file, og->out_names[k], sx_shape_str(r, os, b, sizeof b), (long long)n);
    }
    /* (n, the other axes' size): a (n) output, one value per example, becomes (n, 1) */
    *flat = r == 2 ? out : ox_reshape(&og->c, out, 2, (int64_t[]){n, sx_shape_size(r - 1, os + 1)});
    if (*flat == NULL)
        return sx_cg_graph_status(og->c.g);
    snprintf(ms->names[k], sizeof ms->names[k], "%s", og->out_names[k]);
    /* one example's part: the output's shape without the batch axis, or (1) for a (n) output */
    ms->ranks[k] = r > 1 ? r - 1 : 1;
    memcpy(ms->shapes[k], r > 1 ? os + 1 : sx_cg_node_shape(*flat) + 1,
           (size_t)ms->ranks[k] * sizeof *os);
    return SX_OK;
}

/* A copy of name into *slot unless it holds one (the names are the same at every build). */
static sx_status keep_name(char **slot, const char *name)
{
    if (*slot != NULL)
        return SX_OK;
    if (name == NULL)
        name = "?";
    size_t len = strlen(name);
    if ((*slot = sx_alloc(len + 1)) == NULL)
        return SX_E_NOMEM;
    memcpy(*slot, name, len + 1);
    return SX_OK;
}

/* The file's names of og's inputs and outputs and their ranks without the batch axis into ms. */
static sx_status src_names(model_src *ms, sx_onnx_graph *og)
{
    for (int k = 0; k < og->n_in; k++) {
        SX_TRY(keep_name(&ms->in_names[k], og->in_names[k]));
        ms->onnx_in_rank[k] = sx_cg_node_rank(og->in[k]) - 1;
        const ox_val *v = ox_find(&og->c, og->in_names[k]);
        ms->in_int[k] = v != NULL && v->int_graph;
    }
    for (int k = 0; k < og->n_out; k++) {
        SX_TRY(keep_name(&ms->out_names[k], og->out_names[k]));
        ms->onnx_out_rank[k] = sx_cg_node_rank(og->out[k]) - 1;
    }
    return SX_OK;
}

/* The model's graph for batches of n: one input (n, ...) and one output (n, k): the model's
 * outputs, each flattened in ONNX order, one after another. */
static sx_status src_build(void *ctx, int64_t n, sx_cg_graph **g, sx_cg_node **x, sx_cg_node **y)
{
    model_src *ms = ctx;
    sx_onnx_graph *og;
    SX_TRY(graph_import(ms->model, false, ms->file, &ms->p, n, true, &og));
    sx_status s = SX_OK;
    if (og->n_in < 1 || og->n_in > SX_NN_MAX_HEADS || og->n_out > SX_NN_MAX_HEADS)
        s = sx_error(SX_E_UNSUPPORTED,
                     "%s: %d inputs and %d outputs (sx_onnx_import takes 1 to %d of each; "
                     "sx_onnx_graph_import any number)",
                     ms->file, og->n_in, og->n_out, SX_NN_MAX_HEADS);
    if (s == SX_OK && og->n_in == 1 && sx_cg_node_rank(og->in[0]) < 2)
        s = sx_error(SX_E_UNSUPPORTED, "%s: input '%s' has no axis besides the batch", ms->file,
                     og->in_names[0]);
    for (int k = 0; s == SX_OK && k < og->n_in; k++) {
        int r = sx_cg_node_rank(og->in[k]);
        ms->in_ranks[k] = r > 1 ? r - 1 : 1;
        if (r > 1)
            memcpy(ms->in_shapes[k], sx_cg_node_shape(og->in[k]) + 1,
                   (size_t)(r - 1) * sizeof(int64_t));
        else
            ms->in_shapes[k][0] = 1;
    }
    ms->n_in = og->n_in;
    sx_cg_node *flat[SX_NN_MAX_HEADS] = {NULL}, *out = NULL;
    for (int k = 0; s == SX_OK && k < og->n_out; k++)
        s = src_output(ms, og, k, n, &flat[k]);
    if (s == SX_OK)
        s = src_names(ms, og);
    if (s == SX_OK) {
        ms->n_parts = og->n_out;
        out = og->n_out == 1 ? flat[0] : sx_cg_concat(og->c.g, og->n_out, flat, 1);
        if (out == NULL)
            s = sx_cg_graph_status(og->c.g);
    }
    if (s != SX_OK) {
        sx_onnx_graph_free(og);
        return s;
    }
    *g = og->c.g;
    *x = og->packed != NULL ? og->packed : og->in[0];
    *y = out;
    og->c.g = NULL; /* handed to the caller */
    sx_onnx_graph_free(og);
    return SX_OK;
}

/* An ONNX model's metadata_props value for key, or NULL. */
static const char *model_meta(const void *ctx, const char *key)
{
    const Onnx__ModelProto *mp = ctx;
    for (size_t i = 0; i < mp->n_metadata_props; i++) {
        const Onnx__StringStringEntryProto *kv = mp->metadata_props[i];
        if (kv != NULL && kv->key != NULL && kv->value != NULL && strcmp(kv->key, key) == 0)
            return kv->value;
    }
    return NULL;
}

sx_status sx_onnx_import(const char *path, const sx_onnx_import_params *p, sx_nn_model **out)
{
    if (out != NULL)
        *out = NULL;
    if (out == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_onnx_import: NULL argument");
    sx_onnx_import_params d = sx_onnx_import_params_default();
    if (p == NULL)
        p = &d;
    SX_TRY(check_params("sx_onnx_import", p));
    uint8_t *data;
    size_t size;
    SX_TRY(ox_read_file(path, &data, &size));
    model_src *ms = sx_calloc(1, sizeof *ms);
    size_t fl = strlen(path);
    char *file = ms != NULL ? sx_alloc(fl + 1) : NULL;
    sx_status s = file != NULL ? SX_OK : SX_E_NOMEM;
    if (s == SX_OK) {
        memcpy(file, path, fl + 1);
        ms->file = file;
        ms->p = *p;
        s = unpack(data, size, path, &ms->model);
    }
    sx_free(data);
    if (s != SX_OK) {
        if (ms != NULL && file == NULL)
            sx_free(ms);
        else
            src_free(ms);
        return s;
    }
    nn_model_source src = {src_build, src_free, ms, p->optimise};
    SX_TRY(nn_model_from_source(&src, p->batch, out));
    sx_nn_model *m = *out;
    /* a strix export's description of its preprocessing (class and feature names...) */
    nn_meta_src meta = {model_meta, ms->model};
    nn_prep_free(&m->file->prep);
    sx_status ps = nn_prep_meta_read_from(path, &meta, &m->file->prep);
    /* informative only: the graph applies it (1 for a model from elsewhere) */
    const char *sc = model_meta(ms->model, "input_scale");
    m->file->prep.scale = sc != NULL && strtod(sc, NULL) > 0 ? strtod(sc, NULL) : 1;
    if (ps == SX_OK)
        ps = nn_model_prep_check(path, m);
    if (ps != SX_OK) {
        sx_nn_model_free(m);
        *out = NULL;
        return ps;
    }
    if (ms->n_parts > 1) { /* the outputs by name (one output keeps the name "y") */
        m->file->n_parts = ms->n_parts;
        memcpy(m->file->part_names, ms->names, sizeof ms->names);
        memcpy(m->file->part_rank, ms->ranks, sizeof ms->ranks);
        memcpy(m->file->part_shape, ms->shapes, sizeof ms->shapes);
    }
    m->ids_in = ms->n_in > 0; /* integer inputs (token ids) take integer batches as well */
    for (int k = 0; k < ms->n_in; k++)
        m->ids_in = m->ids_in && ms->in_int[k];
    if (ms->n_in > 1) { /* a row of the input holds the inputs one after another */
        m->file->n_in_parts = ms->n_in;
        memcpy(m->file->in_part_rank, ms->in_ranks, sizeof ms->in_ranks);
        memcpy(m->file->in_part_shape, ms->in_shapes, sizeof ms->in_shapes);
    }
    return SX_OK;
}

/* The source of a model sx_onnx_import made (NULL for any other model). */
static const model_src *imported(const sx_nn_model *m)
{
    return m != NULL && m->file != NULL && m->file->src != NULL && m->file->src->build == src_build
               ? m->file->src->ctx
               : NULL;
}

const char *sx_onnx_model_input(const sx_nn_model *m, int k, int *rank, const int64_t **shape)
{
    const model_src *ms = imported(m);
    if (ms == NULL || k < 0 || k >= ms->n_in)
        return NULL;
    if (rank != NULL)
        *rank = ms->onnx_in_rank[k];
    if (shape != NULL)
        *shape = ms->in_shapes[k];
    return ms->in_names[k];
}

bool sx_onnx_model_input_integer(const sx_nn_model *m, int k)
{
    const model_src *ms = imported(m);
    return ms != NULL && k >= 0 && k < ms->n_in && ms->in_int[k];
}

const char *sx_onnx_model_output(const sx_nn_model *m, int k, int *rank, const int64_t **shape)
{
    const model_src *ms = imported(m);
    if (ms == NULL || k < 0 || k >= ms->n_parts)
        return NULL;
    if (rank != NULL)
        *rank = ms->onnx_out_rank[k];
    if (shape != NULL)
        *shape = ms->shapes[k];
    return ms->out_names[k];
}

/* ---------------------------------------------------------------- tensors */

sx_status sx_onnx_tensor_read(const char *path, sx_dtype dtype, sx_tensor **out, char **name)
{
    if (out != NULL)
        *out = NULL;
    if (name != NULL)
        *name = NULL;
    if (out == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_onnx_tensor_read: NULL argument");
    if (dtype != SX_F32 && dtype != SX_F64)
        return sx_error(SX_E_ARG, "sx_onnx_tensor_read: dtype %d", (int)dtype);
    uint8_t *data;
    size_t size;
    SX_TRY(ox_read_file(path, &data, &size));
    Onnx__TensorProto *t = onnx__tensor_proto__unpack(&ox_allocator, size, data);
    sx_free(data);
    if (t == NULL)
        return sx_error(SX_E_FORMAT, "%s: not a TensorProto (the protobuf does not parse)", path);
    ox_ctx c;
    memset(&c, 0, sizeof c);
    c.file = path;
    sx_status s;
    if (ox_dtype_is_float(t->data_type)) {
        s = ox_tensor_float(&c, t, dtype, out);
    } else { /* integers (an ArgMax's expected indices) as numbers of dtype */
        int rank;
        int64_t shape[SX_MAX_RANK], cnt, *iv = NULL;
        s = ox_tensor_dims(&c, t, &rank, shape);
        if (s == SX_OK)
            s = ox_tensor_ints(&c, t, &iv, &cnt);
        if (s == SX_OK)
            s = sx_tensor_new(dtype, rank, shape, out);
        for (int64_t i = 0; s == SX_OK && i < cnt; i++)
            sx_tensor_set(*out, i, (double)iv[i]);
        sx_free(iv);
    }
    if (s == SX_OK && name != NULL) {
        const char *nm = t->name ? t->name : "";
        *name = sx_alloc(strlen(nm) + 1);
        if (*name == NULL) {
            sx_tensor_free(*out);
            *out = NULL;
            s = SX_E_NOMEM;
        } else {
            memcpy(*name, nm, strlen(nm) + 1);
        }
    }
    onnx__tensor_proto__free_unpacked(t, &ox_allocator);
    return s;
}
