/* proto.c: reading what protoc-c unpacked: files, TensorProto data (raw bytes or typed fields,
 * checked against the dims before use), node attributes, and the value table with each value's
 * layout (NCHW values kept as NHWC nodes, permuted back only where an op needs it). */
#include "onnx_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const int ox_to_nhwc[4] = {0, 2, 3, 1}, ox_to_nchw[4] = {0, 3, 1, 2};

static void *pb_alloc(void *ctx, size_t n)
{
    (void)ctx;
    return sx_alloc(n);
}

static void pb_free(void *ctx, void *p)
{
    (void)ctx;
    sx_free(p);
}

ProtobufCAllocator ox_allocator = {pb_alloc, pb_free, NULL};

/* ---------------------------------------------------------------- errors */

static sx_status vfail(ox_ctx *c, sx_status s, const char *fmt, va_list ap)
{
    char msg[400];
    vsnprintf(msg, sizeof msg, fmt, ap);
    const Onnx__NodeProto *nd = c->node;
    if (nd == NULL)
        return sx_error(s, "%s: %s", c->file, msg);
    if (nd->name != NULL && nd->name[0] != '\0')
        return sx_error(s, "%s: node '%s' (%s): %s", c->file, nd->name, nd->op_type, msg);
    return sx_error(s, "%s: node %d (%s): %s", c->file, c->node_index, nd->op_type, msg);
}

sx_status ox_fail(ox_ctx *c, sx_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    s = vfail(c, s, fmt, ap);
    va_end(ap);
    return s;
}

sx_status ox_graph_fail(ox_ctx *c)
{
    sx_status s = sx_cg_graph_status(c->g);
    if (s == SX_OK)
        s = SX_E_STATE;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", sx_last_error());
    sx_cg_graph_status_clear(c->g);
    return ox_fail(c, s, "%s", msg);
}

/* ---------------------------------------------------------------- files */

sx_status ox_read_file(const char *path, uint8_t **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return sx_error(SX_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return sx_error(SX_E_IO, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = sx_alloc(n ? n : 1);
    if (buf == NULL) {
        fclose(f);
        return SX_E_NOMEM;
    }
    if (n > 0 && fread(buf, 1, n, f) != n) {
        sx_free(buf);
        fclose(f);
        return sx_error(SX_E_IO, "%s: short read", path);
    }
    fclose(f);
    *data = buf;
    *size = n;
    return SX_OK;
}

/* ---------------------------------------------------------------- tensors */

/* Whether path has a ".." component. */
static bool has_parent(const char *path)
{
    for (const char *p = path; (p = strstr(p, "..")) != NULL; p += 2)
        if ((p == path || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
            return true;
    return false;
}

/* The external_data entries of t: location, offset and length (-1 when absent). */
static sx_status external_entries(ox_ctx *c, const Onnx__TensorProto *t, const char **loc,
                                  long long *off, long long *len)
{
    *loc = NULL;
    *off = 0;
    *len = -1;
    const char *name = t->name ? t->name : "";
    for (size_t i = 0; i < t->n_external_data; i++) {
        const Onnx__StringStringEntryProto *kv = t->external_data[i];
        if (kv->key == NULL || kv->value == NULL)
            continue;
        char *end = NULL;
        if (strcmp(kv->key, "location") == 0)
            *loc = kv->value;
        else if (strcmp(kv->key, "offset") == 0)
            *off = strtoll(kv->value, &end, 10);
        else if (strcmp(kv->key, "length") == 0)
            *len = strtoll(kv->value, &end, 10);
        if (end != NULL && (*end != '\0' || end == kv->value || *off < 0))
            return ox_fail(c, SX_E_FORMAT, "tensor '%s': external data %s '%s'", name, kv->key,
                           kv->value);
    }
    if (*loc == NULL || (*loc)[0] == '\0')
        return ox_fail(c, SX_E_FORMAT, "tensor '%s': external data without a location", name);
    if ((*loc)[0] == '/' || has_parent(*loc))
        return ox_fail(c, SX_E_FORMAT,
                       "tensor '%s': external data location '%s' outside the "
                       "model's folder",
                       name, *loc);
    return SX_OK;
}

/* Bytes [off, off + len) of the file at path (len -1: to its end) into *buf, *n. */
static sx_status read_range(ox_ctx *c, const char *path, long long off, long long len,
                            uint8_t **buf, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return ox_fail(c, SX_E_IO, "external data '%s': cannot open: %s", path, strerror(errno));
    struct stat st;
    sx_status s = SX_OK;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || off > (long long)st.st_size ||
        (len >= 0 && len > (long long)st.st_size - off))
        s = ox_fail(c, SX_E_FORMAT, "external data '%s': bytes %lld..%lld beyond the file", path,
                    off, len < 0 ? -1 : off + len);
    *n = s == SX_OK ? (size_t)(len >= 0 ? len : (long long)st.st_size - off) : 0;
    if (s == SX_OK && (*buf = sx_alloc(*n ? *n : 1)) == NULL)
        s = SX_E_NOMEM;
    if (s == SX_OK && (fseeko(f, (off_t)off, SEEK_SET) != 0 || fread(*buf, 1, *n, f) != *n)) {
        sx_free(*buf);
        s = ox_fail(c, SX_E_IO, "external data '%s': short read", path);
    }
    fclose(f);
    return s;
}

sx_status ox_tensor_external(ox_ctx *c, Onnx__TensorProto *t)
{
    if (!t->has_data_location || t->data_location != ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return SX_OK;
    const char *loc;
    long long off, len;
    SX_TRY(external_entries(c, t, &loc, &off, &len));
    const char *slash = strrchr(c->file, '/');
    int dir = slash ? (int)(slash - c->file) + 1 : 0;
    size_t size = (size_t)dir + strlen(loc) + 1;
    char *path = sx_alloc(size);
    if (path == NULL)
        return SX_E_NOMEM;
    snprintf(path, size, "%.*s%s", dir, c->file, loc);
    uint8_t *buf = NULL;
    size_t n = 0;
    sx_status s = read_range(c, path, off, len, &buf, &n);
    sx_free(path);
    if (s != SX_OK)
        return s;
    sx_free(t->raw_data.data); /* (the unpacked bytes are ox_allocator's) */
    t->raw_data.data = buf;
    t->raw_data.len = n;
    t->has_raw_data = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT;
    return SX_OK;
}

bool ox_dtype_is_float(int32_t t)
{
    return t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || t == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
}

const char *ox_dtype_name(int32_t t)
{
    static const char *names[] = {"UNDEFINED",  "FLOAT",   "UINT8",  "INT8",   "UINT16",
                                  "INT16",      "INT32",   "INT64",  "STRING", "BOOL",
                                  "FLOAT16",    "DOUBLE",  "UINT32", "UINT64", "COMPLEX64",
                                  "COMPLEX128", "BFLOAT16"};
    return t >= 0 && t < (int32_t)(sizeof names / sizeof *names) ? names[t] : "an unknown type";
}

sx_status ox_tensor_dims(ox_ctx *c, const Onnx__TensorProto *t, int *rank, int64_t *shape)
{
    if (t->n_dims > SX_MAX_RANK)
        return ox_fail(c, SX_E_UNSUPPORTED, "tensor '%s' of rank %zu (strix: at most %d)",
                       t->name ? t->name : "", t->n_dims, SX_MAX_RANK);
    for (size_t i = 0; i < t->n_dims; i++)
        shape[i] = t->dims[i];
    *rank = (int)t->n_dims;
    if (sx_shape_check("onnx", *rank, shape) != SX_OK)
        return ox_fail(c, SX_E_FORMAT, "tensor '%s' has bad dims", t->name ? t->name : "");
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return ox_fail(c, SX_E_UNSUPPORTED, "tensor '%s' has external data",
                       t->name ? t->name : "");
    return SX_OK;
}

/* The element count of t and the number of elements its data holds (raw bytes of elem bytes,
 * or the typed field's length): they must agree. */
static sx_status check_count(ox_ctx *c, const Onnx__TensorProto *t, int64_t count, size_t elem,
                             size_t typed)
{
    size_t have = t->has_raw_data ? t->raw_data.len / elem : typed;
    if ((t->has_raw_data && t->raw_data.len % elem != 0) || (int64_t)have != count)
        return ox_fail(c, SX_E_FORMAT, "tensor '%s': %lld elements by its dims, %zu in its data",
                       t->name ? t->name : "", (long long)count, have);
    return SX_OK;
}

sx_status ox_tensor_float(ox_ctx *c, const Onnx__TensorProto *t, sx_dtype dt, sx_tensor **out)
{
    *out = NULL;
    int rank;
    int64_t shape[SX_MAX_RANK];
    SX_TRY(ox_tensor_dims(c, t, &rank, shape));
    int32_t type = t->data_type;
    if (!ox_dtype_is_float(type))
        return ox_fail(c, SX_E_UNSUPPORTED, "tensor '%s' of type %s (want FLOAT or DOUBLE)",
                       t->name ? t->name : "", ox_dtype_name(type));
    int64_t count = sx_shape_size(rank, shape);
    bool f32 = type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    SX_TRY(check_count(c, t, count, f32 ? 4 : 8, f32 ? t->n_float_data : t->n_double_data));
    SX_TRY(sx_tensor_new(dt, rank, shape, out));
    const uint8_t *raw = t->has_raw_data ? t->raw_data.data : NULL;
    for (int64_t i = 0; i < count; i++) {
        double v;
        if (f32) {
            float f;
            if (raw != NULL)
                memcpy(&f, raw + 4 * i, 4); /* little-endian, as ONNX stores it */
            else
                f = t->float_data[i];
            v = (double)f;
        } else if (raw != NULL) {
            memcpy(&v, raw + 8 * i, 8);
        } else {
            v = t->double_data[i];
        }
        sx_tensor_set(*out, i, v);
    }
    return SX_OK;
}

sx_status ox_tensor_ints(ox_ctx *c, const Onnx__TensorProto *t, int64_t **out, int64_t *n)
{
    *out = NULL;
    int rank;
    int64_t shape[SX_MAX_RANK];
    SX_TRY(ox_tensor_dims(c, t, &rank, shape));
    int64_t count = sx_shape_size(rank, shape);
    size_t elem = 0, typed = t->n_int32_data;
    switch (t->data_type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        elem = 8;
        typed = t->n_int64_data;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
        elem = 4;
        typed = t->n_uint64_data;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: /* up to 2^63 - 1 (checked below) */
        elem = 8;
        typed = t->n_uint64_data;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
        elem = 4;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
        elem = 2;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        elem = 1;
        break;
    default:
        return ox_fail(c, SX_E_UNSUPPORTED, "tensor '%s' of type %s (want an integer type)",
                       t->name ? t->name : "", ox_dtype_name(t->data_type));
    }
    SX_TRY(check_count(c, t, count, elem, typed));
    int64_t *v = sx_alloc((size_t)(count ? count : 1) * sizeof *v);
    if (v == NULL)
        return SX_E_NOMEM;
    const uint8_t *raw = t->has_raw_data ? t->raw_data.data : NULL;
    int32_t type = t->data_type;
    for (int64_t i = 0; i < count; i++) {
        if (raw == NULL) {
            bool u64 = type == ONNX__TENSOR_PROTO__DATA_TYPE__UINT32 ||
                       type == ONNX__TENSOR_PROTO__DATA_TYPE__UINT64;
            v[i] = type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ? t->int64_data[i]
                   : u64                                        ? (int64_t)t->uint64_data[i]
                                                                : t->int32_data[i];
        } else if (type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ||
                   type == ONNX__TENSOR_PROTO__DATA_TYPE__UINT64) {
            memcpy(&v[i], raw + (size_t)i * elem, 8);
        }
        if (type == ONNX__TENSOR_PROTO__DATA_TYPE__UINT64 && v[i] < 0) {
            sx_free(v);
            return ox_fail(c, SX_E_UNSUPPORTED, "tensor '%s': a UINT64 value above 2^63 - 1",
                           t->name ? t->name : "");
        }
        if (raw == NULL || elem == 8)
            continue;
        const uint8_t *p = raw + (size_t)i * elem;
        if (type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64) {
            memcpy(&v[i], p, 8);
        } else if (type == ONNX__TENSOR_PROTO__DATA_TYPE__INT32) {
            int32_t x;
            memcpy(&x, p, 4);
            v[i] = x;
        } else if (type == ONNX__TENSOR_PROTO__DATA_TYPE__UINT32) {
            uint32_t x;
            memcpy(&x, p, 4);
            v[i] = x;
        } else if (type == ONNX__TENSOR_PROTO__DATA_TYPE__INT16) {
            int16_t x;
            memcpy(&x, p, 2);
            v[i] = x;
        } else if (type == ONNX__TENSOR_PROTO__DATA_TYPE__UINT16) {
            uint16_t x;
            memcpy(&x, p, 2);
            v[i] = x;
        } else if (type == ONNX__TENSOR_PROTO__DATA_TYPE__INT8) {
            v[i] = (int8_t)p[0];
        } else {
            v[i] = p[0];
        }
    }
    *out = v;
    *n = count;
    return SX_OK;
}

/* ---------------------------------------------------------------- values */

ox_val *ox_find(ox_ctx *c, const char *name)
{
    for (int i = c->n_vals - 1; i >= 0; i--)
        if (strcmp(c->vals[i]->name, name) == 0)
            return c->vals[i];
    return NULL;
}

sx_status ox_define(ox_ctx *c, const char *name, ox_val **out)
{
    if (name == NULL || name[0] == '\0')
        return ox_fail(c, SX_E_FORMAT, "a value with an empty name");
    if (ox_find(c, name) != NULL)
        return ox_fail(c, SX_E_FORMAT, "value '%s' defined twice", name);
    if (c->n_vals == c->cap_vals) {
        int cap = c->cap_vals ? 2 * c->cap_vals : 64;
        ox_val **vs = sx_realloc(c->vals, (size_t)cap * sizeof *vs);
        if (vs == NULL)
            return SX_E_NOMEM;
        c->vals = vs;
        c->cap_vals = cap;
    }
    ox_val *v = sx_calloc(1, sizeof *v);
    if (v == NULL)
        return SX_E_NOMEM;
    c->vals[c->n_vals++] = v;
    v->name = name;
    *out = v;
    return SX_OK;
}

int ox_n_in(ox_ctx *c)
{
    return (int)c->node->n_input;
}

int ox_n_out(ox_ctx *c)
{
    return (int)c->node->n_output;
}

ox_val *ox_in(ox_ctx *c, int i)
{
    const Onnx__NodeProto *nd = c->node;
    if (i >= (int)nd->n_input || nd->input[i][0] == '\0')
        return NULL;
    return ox_find(c, nd->input[i]);
}

sx_status ox_in_req(ox_ctx *c, int i, ox_val **out)
{
    *out = ox_in(c, i);
    if (*out == NULL)
        return ox_fail(c, SX_E_FORMAT, "input %d missing", i);
    return SX_OK;
}

/* Is perm (of a tensor of shape s) a reshape: do the axes of size > 1 keep their order? */
static bool perm_is_reshape(const int *perm, const int64_t *s, int r)
{
    int last = -1;
    for (int i = 0; i < r; i++) {
        if (s[perm[i]] == 1)
            continue;
        if (perm[i] < last)
            return false;
        last = perm[i];
    }
    return true;
}

/* A constant of the import dtype holding known integers (a fresh node at each use: the
 * value stays integers for the mappings that read it as such). */
static sx_status ints_node(ox_ctx *c, const ox_val *v, sx_cg_node **out)
{
    sx_tensor *t = NULL;
    SX_TRY(sx_tensor_new(c->dt, v->rank, v->shape, &t));
    for (int64_t k = 0; k < t->size; k++)
        sx_tensor_set(t, k, (double)v->ints[k]);
    *out = sx_cg_const(c->g, t);
    sx_tensor_free(t);
    return *out != NULL ? SX_OK : ox_graph_fail(c);
}

bool ox_int_graph_ok(ox_ctx *c, int slot)
{
    static const char *const ok[] = {"Cast",           "Equal",    "Flatten",  "Greater",
                                     "GreaterOrEqual", "Identity", "Less",     "LessOrEqual",
                                     "Reshape",        "Squeeze",  "Unsqueeze"};
    const char *op = c->node != NULL ? c->node->op_type : "";
    if ((strcmp(op, "Gather") == 0 && slot == 1) || (strcmp(op, "Where") == 0 && slot == 0))
        return true;
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (strcmp(op, ok[i]) == 0)
            return true;
    return false;
}

/* The input slot of the current node that reads v (-1 when none does). */
static int slot_of(ox_ctx *c, const ox_val *v)
{
    for (int i = 0; c->node != NULL && i < ox_n_in(c); i++)
        if (ox_in(c, i) == v)
            return i;
    return -1;
}

sx_status ox_node(ox_ctx *c, ox_val *v, ox_layout want, sx_cg_node **out)
{
    *out = NULL;
    if (v->n == NULL && v->ints == NULL)
        return ox_fail(c, SX_E_FORMAT, "value '%s' has no values", v->name);
    if (v->int_graph && !ox_int_graph_ok(c, slot_of(c, v)))
        return ox_fail(c, SX_E_UNSUPPORTED,
                       "value '%s' holds integers computed by the graph (strix reads them only "
                       "as Gather's indices, Where's condition, in comparisons, casts and "
                       "reshapes)",
                       v->name);
    sx_cg_node *n = v->n;
    ox_layout lay = v->lay;
    if (n == NULL) { /* known integers (or booleans as 0/1) read as data: a constant */
        SX_TRY(ints_node(c, v, &n));
        lay = OX_ONNX;
    }
    if (lay == want || sx_cg_node_rank(n) != 4) {
        *out = n;
        return SX_OK;
    }
    const int *perm = want == OX_NHWC ? ox_to_nhwc : ox_to_nchw;
    const int64_t *s = sx_cg_node_shape(n);
    sx_cg_node *r;
    if (perm_is_reshape(perm, s, 4)) {
        int64_t t[4];
        for (int i = 0; i < 4; i++)
            t[i] = s[perm[i]];
        r = ox_reshape(c, n, 4, t);
    } else {
        r = sx_cg_permute(c->g, n, perm);
    }
    if (r == NULL)
        return ox_graph_fail(c);
    *out = r;
    return SX_OK;
}

sx_cg_node *ox_reshape(ox_ctx *c, sx_cg_node *x, int rank, const int64_t *shape)
{
    if (x == NULL)
        return NULL;
    int xr = sx_cg_node_rank(x);
    const int64_t *xs = sx_cg_node_shape(x);
    int64_t t[SX_MAX_RANK];
    if (rank < 1 || rank > SX_MAX_RANK || xr < 1 || shape[0] != xs[0] ||
        sx_shape_size(rank - 1, shape + 1) != sx_shape_size(xr - 1, xs + 1) ||
        sx_shape_size(xr - 1, xs + 1) <= 0)
        return sx_cg_reshape(c->g, x, rank, shape);
    memcpy(t, shape, (size_t)rank * sizeof *t);
    t[0] = -1;
    return sx_cg_reshape(c->g, x, rank, t);
}

static sx_status out_val(ox_ctx *c, int i, ox_val **v)
{
    const Onnx__NodeProto *nd = c->node;
    *v = NULL;
    if (i >= (int)nd->n_output || nd->output[i][0] == '\0')
        return SX_OK; /* an output nobody asked for */
    return ox_define(c, nd->output[i], v);
}

sx_status ox_out(ox_ctx *c, int i, sx_cg_node *n, ox_layout lay)
{
    if (n == NULL)
        return ox_graph_fail(c);
    ox_val *v;
    SX_TRY(out_val(c, i, &v));
    if (v == NULL)
        return SX_OK;
    v->n = n;
    v->rank = sx_cg_node_rank(n);
    const int64_t *s = sx_cg_node_shape(n);
    /* axis 0 stays the batch axis when an input's was and the size is the same (the mapping
     * says so otherwise: c->no_batch) */
    v->batch0 = false;
    for (int k = 0; !c->no_batch && v->rank > 0 && k < ox_n_in(c); k++) {
        const ox_val *in = ox_in(c, k);
        if (in != NULL && in->batch0 && in->n != NULL && s[0] == in->shape[0])
            v->batch0 = true;
    }
    if (lay == OX_NHWC && v->rank != 4)
        lay = OX_ONNX; /* a bug guard: only rank 4 values are kept permuted */
    v->lay = lay;
    for (int k = 0; k < v->rank; k++)
        v->shape[k] = lay == OX_NHWC ? s[ox_to_nchw[k]] : s[k];
    return SX_OK;
}

sx_status ox_out_ints(ox_ctx *c, int i, int rank, const int64_t *shape, const int64_t *ints)
{
    return ox_out_ints_typed(c, i, rank, shape, ints, 0);
}

sx_status ox_out_ints_typed(ox_ctx *c, int i, int rank, const int64_t *shape, const int64_t *ints,
                            int32_t type)
{
    ox_val *v;
    SX_TRY(out_val(c, i, &v));
    if (v == NULL)
        return SX_OK;
    int64_t n = sx_shape_size(rank, shape);
    v->ints = sx_alloc((size_t)(n ? n : 1) * sizeof *v->ints);
    if (v->ints == NULL)
        return SX_E_NOMEM;
    if (n > 0)
        memcpy(v->ints, ints, (size_t)n * sizeof *ints);
    v->itype = type;
    v->rank = rank;
    if (rank > 0) /* (a scalar's shape may be NULL) */
        memcpy(v->shape, shape, (size_t)rank * sizeof *shape);
    return SX_OK;
}

sx_status ox_in_ints(ox_ctx *c, int i, const int64_t **ints, int64_t *count)
{
    ox_val *v;
    SX_TRY(ox_in_req(c, i, &v));
    if (v->ints == NULL)
        return ox_fail(c, SX_E_UNSUPPORTED,
                       "input %d ('%s') must be an integer tensor known at import time", i,
                       v->name);
    *ints = v->ints;
    *count = sx_shape_size(v->rank, v->shape);
    return SX_OK;
}

sx_status ox_in_scalar(ox_ctx *c, int i, double *out, bool *present)
{
    ox_val *v = ox_in(c, i);
    *present = v != NULL;
    if (v == NULL)
        return SX_OK;
    if (sx_shape_size(v->rank, v->shape) != 1)
        return ox_fail(c, SX_E_UNSUPPORTED, "input %d ('%s') must be a single value", i, v->name);
    if (v->cst != NULL)
        *out = sx_tensor_get(v->cst, 0);
    else if (v->ints != NULL)
        *out = (double)v->ints[0];
    else
        return ox_fail(c, SX_E_UNSUPPORTED, "input %d ('%s') must be a constant", i, v->name);
    return SX_OK;
}

/* ---------------------------------------------------------------- attributes */

const Onnx__AttributeProto *ox_attr(ox_ctx *c, const char *name)
{
    const Onnx__NodeProto *nd = c->node;
    for (size_t i = 0; i < nd->n_attribute; i++)
        if (nd->attribute[i]->name != NULL && strcmp(nd->attribute[i]->name, name) == 0)
            return nd->attribute[i];
    return NULL;
}

static sx_status attr_type(ox_ctx *c, const Onnx__AttributeProto *a,
                           Onnx__AttributeProto__AttributeType want)
{
    if (a->type != want)
        return ox_fail(c, SX_E_FORMAT, "attribute %s has type %d (want %d)", a->name, (int)a->type,
                       (int)want);
    return SX_OK;
}

sx_status ox_attr_int(ox_ctx *c, const char *name, int64_t def, int64_t *out)
{
    const Onnx__AttributeProto *a = ox_attr(c, name);
    *out = def;
    if (a == NULL)
        return SX_OK;
    SX_TRY(attr_type(c, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT));
    *out = a->i;
    return SX_OK;
}

sx_status ox_attr_float(ox_ctx *c, const char *name, double def, double *out)
{
    const Onnx__AttributeProto *a = ox_attr(c, name);
    *out = def;
    if (a == NULL)
        return SX_OK;
    SX_TRY(attr_type(c, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT));
    *out = (double)a->f;
    return SX_OK;
}

sx_status ox_attr_ints(ox_ctx *c, const char *name, const int64_t **v, int *n)
{
    const Onnx__AttributeProto *a = ox_attr(c, name);
    *v = NULL;
    *n = 0;
    if (a == NULL)
        return SX_OK;
    SX_TRY(attr_type(c, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS));
    if (a->n_ints > 64)
        return ox_fail(c, SX_E_UNSUPPORTED, "attribute %s has %zu values", name, a->n_ints);
    *v = a->ints;
    *n = (int)a->n_ints;
    return SX_OK;
}

sx_status ox_attr_str(ox_ctx *c, const char *name, const char *def, char *buf, size_t size)
{
    const Onnx__AttributeProto *a = ox_attr(c, name);
    snprintf(buf, size, "%s", def);
    if (a == NULL)
        return SX_OK;
    SX_TRY(attr_type(c, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING));
    size_t n = a->s.len < size - 1 ? a->s.len : size - 1;
    if (n > 0) /* an empty string may have no data pointer */
        memcpy(buf, a->s.data, n);
    buf[n] = '\0';
    return SX_OK;
}

sx_status ox_axis(ox_ctx *c, int64_t axis, int rank, const char *what, int *out)
{
    if (axis < -rank || axis >= (rank > 0 ? rank : 1))
        return ox_fail(c, SX_E_FORMAT, "%s %lld out of range for rank %d", what, (long long)axis,
                       rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return SX_OK;
}
