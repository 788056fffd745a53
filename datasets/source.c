/* source.c: sources of examples, one small vtable (get, class_name, drop) over any storage, and
 * the sources over memory the caller keeps: arrays, tensors, an image set, IDX files, a callback.
 * Each of them borrows its data; a get copies one example's elements in their own type, and the
 * loader converts them to the batch's dtype. */
#include "datasets_impl.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- specs and elements */

static bool type_ok(sx_ds_type t)
{
    return sx_ds_type_size(t) != 0;
}

static sx_status shape_ok(const char *who, const char *what, int rank, const int64_t *shape)
{
    if (rank < 0 || rank > SX_MAX_RANK)
        return sx_error(SX_E_ARG, "%s: %s rank %d (want 0..%d)", who, what, rank, SX_MAX_RANK);
    for (int k = 0; k < rank; k++)
        if (shape[k] < 1)
            return sx_error(SX_E_ARG, "%s: %s dim %d is %lld (want >= 1)", who, what, k,
                            (long long)shape[k]);
    if (sx_shape_check(who, rank, shape) != SX_OK)
        return sx_error(SX_E_ARG, "%s: %s size overflows", who, what);
    return SX_OK;
}

sx_status sx__spec_check(const char *who, const sx_ds_spec *spec)
{
    if (spec == NULL)
        return sx_error(SX_E_ARG, "%s: spec is NULL", who);
    if (!type_ok(spec->x_type) || !type_ok(spec->y_type))
        return sx_error(SX_E_ARG, "%s: %s type %d is not an sx_ds_type", who,
                        type_ok(spec->x_type) ? "y" : "x",
                        (int)(type_ok(spec->x_type) ? spec->y_type : spec->x_type));
    SX_TRY(shape_ok(who, "x", spec->x_rank, spec->x_shape));
    SX_TRY(shape_ok(who, "y", spec->y_rank, spec->y_shape));
    if (spec->classes < 0)
        return sx_error(SX_E_ARG, "%s: classes %lld (want >= 0)", who, (long long)spec->classes);
    if (!isfinite(spec->x_scale))
        return sx_error(SX_E_ARG, "%s: x_scale %g is not finite", who, spec->x_scale);
    return SX_OK;
}

int64_t sx_ds_spec_x_size(const sx_ds_spec *spec)
{
    return spec ? sx_shape_size(spec->x_rank, spec->x_shape) : -1;
}

int64_t sx_ds_spec_y_size(const sx_ds_spec *spec)
{
    return spec ? sx_shape_size(spec->y_rank, spec->y_shape) : -1;
}

double sx__elem(const void *row, sx_ds_type t, int64_t k)
{
    switch (t) {
    case SX_DS_U8:
        return ((const uint8_t *)row)[k];
    case SX_DS_I8:
        return ((const int8_t *)row)[k];
    case SX_DS_I16:
        return ((const int16_t *)row)[k];
    case SX_DS_I32:
        return ((const int32_t *)row)[k];
    case SX_DS_F32:
        return ((const float *)row)[k];
    case SX_DS_F64:
        return ((const double *)row)[k];
    case SX_DS_I64:
        return (double)((const int64_t *)row)[k];
    }
    return NAN;
}

/* One loop per (source type, batch dtype): the value is computed in double, then rounded once
 * to the batch's dtype (the byte table of images.c gives the same bits). */
#define CONVERT(S, D)                                                                              \
    do {                                                                                           \
        const S *s_ = src;                                                                         \
        D *d_ = dst;                                                                               \
        for (int64_t k = 0; k < n; k++)                                                            \
            d_[k] = (D)((double)s_[k] * scale);                                                    \
    } while (0)
#define CONVERT_TO(S)                                                                              \
    do {                                                                                           \
        if (dtype == SX_F32)                                                                       \
            CONVERT(S, float);                                                                     \
        else                                                                                       \
            CONVERT(S, double);                                                                    \
    } while (0)

void sx__convert(const void *src, sx_ds_type t, int64_t n, double scale, void *dst, sx_dtype dtype)
{
    switch (t) {
    case SX_DS_U8:
        CONVERT_TO(uint8_t);
        break;
    case SX_DS_I8:
        CONVERT_TO(int8_t);
        break;
    case SX_DS_I16:
        CONVERT_TO(int16_t);
        break;
    case SX_DS_I32:
        CONVERT_TO(int32_t);
        break;
    case SX_DS_F32:
        CONVERT_TO(float);
        break;
    case SX_DS_F64:
        CONVERT_TO(double);
        break;
    case SX_DS_I64:
        CONVERT_TO(int64_t);
        break;
    }
}
#undef CONVERT_TO
#undef CONVERT

/* ---------------------------------------------------------------- the vtable */

sx_status sx__source_new(const char *who, const sx_ds_spec *spec, int64_t n, const char *name,
                         sx_status (*get)(const sx_ds_source *, int64_t, void *, void *),
                         void *impl, void (*drop)(void *), sx_ds_source **out)
{
    sx_ds_source *s = sx_calloc(1, sizeof *s);
    if (s == NULL) {
        if (drop != NULL)
            drop(impl);
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    }
    s->spec = *spec;
    s->n = n;
    s->x_size = sx_shape_size(spec->x_rank, spec->x_shape);
    s->y_size = sx_shape_size(spec->y_rank, spec->y_shape);
    s->name = name;
    s->get = get;
    s->impl = impl;
    s->drop = drop;
    *out = s;
    return SX_OK;
}

int64_t sx_ds_source_count(const sx_ds_source *s)
{
    return s ? s->n : -1;
}

const sx_ds_spec *sx_ds_source_spec(const sx_ds_source *s)
{
    return s ? &s->spec : NULL;
}

const char *sx_ds_source_class_name(const sx_ds_source *s, int64_t k)
{
    if (s == NULL || s->class_name == NULL || k < 0 || k >= s->spec.classes)
        return NULL;
    return s->class_name(s, k);
}

const char *sx_ds_source_x_name(const sx_ds_source *s, int64_t k)
{
    if (s == NULL || s->x_names == NULL || k < 0 || k >= s->x_size)
        return NULL;
    return s->x_names[k];
}

const char *sx_ds_source_y_name(const sx_ds_source *s)
{
    return s ? s->y_name : NULL;
}

sx_status sx_ds_source_get(const sx_ds_source *s, int64_t i, void *x_row, void *y_row)
{
    if (s == NULL)
        return sx_error(SX_E_ARG, "sx_ds_source_get: the source is NULL");
    if (i < 0 || i >= s->n)
        return sx_error(SX_E_RANGE, "sx_ds_source_get: %s: example %lld is not in 0..%lld", s->name,
                        (long long)i, (long long)s->n - 1);
    return s->get(s, i, x_row, y_row);
}

void sx_ds_source_free(sx_ds_source *s)
{
    if (s == NULL)
        return;
    if (s->drop != NULL)
        s->drop(s->impl);
    sx_free(s);
}

/* ---------------------------------------------------------------- arrays in memory */

typedef struct mem_impl {
    const uint8_t *x, *y; /* borrowed */
} mem_impl;

static sx_status mem_get(const sx_ds_source *s, int64_t i, void *x, void *y)
{
    const mem_impl *m = s->impl;
    size_t xb = (size_t)s->x_size * sx_ds_type_size(s->spec.x_type);
    size_t yb = (size_t)s->y_size * sx_ds_type_size(s->spec.y_type);
    if (x != NULL)
        memcpy(x, m->x + (size_t)i * xb, xb);
    if (y != NULL)
        memcpy(y, m->y + (size_t)i * yb, yb);
    return SX_OK;
}

static sx_status memory_new(const char *who, const sx_ds_spec *spec, int64_t n, const void *x,
                            const void *y, sx_ds_source **out)
{
    mem_impl *m = sx_calloc(1, sizeof *m);
    if (m == NULL)
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    m->x = x;
    m->y = y;
    return sx__source_new(who, spec, n, who, mem_get, m, sx_free, out);
}

static sx_status out_first(const char *who, sx_ds_source **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    return SX_OK;
}

sx_status sx_ds_source_memory(const sx_ds_spec *spec, int64_t n, const void *x, const void *y,
                              sx_ds_source **out)
{
    const char *who = "sx_ds_source_memory";
    SX_TRY(out_first(who, out));
    SX_TRY(sx__spec_check(who, spec));
    if (x == NULL || y == NULL || n < 1)
        return sx_error(SX_E_ARG, "%s: %s", who,
                        n < 1       ? "n < 1"
                        : x == NULL ? "x is NULL"
                                    : "y is NULL");
    int64_t shape[2] = {n, sx_ds_spec_x_size(spec) * (int64_t)sx_ds_type_size(spec->x_type)};
    if (sx_shape_check(who, 2, shape) != SX_OK)
        return sx_error(SX_E_ARG, "%s: n * x size overflows", who);
    return memory_new(who, spec, n, x, y, out);
}

static bool dtype_ok(sx_dtype d)
{
    return d == SX_F32 || d == SX_F64 || sx_dtype_is_int(d);
}

static sx_ds_type tensor_type(sx_dtype d)
{
    switch (d) {
    case SX_F32:
        return SX_DS_F32;
    case SX_I32:
        return SX_DS_I32;
    case SX_I64:
        return SX_DS_I64;
    case SX_F64:
        break;
    }
    return SX_DS_F64;
}

sx_status sx_ds_source_tensors(const sx_tensor *x, const sx_tensor *y, int64_t classes,
                               sx_ds_source **out)
{
    const char *who = "sx_ds_source_tensors";
    SX_TRY(out_first(who, out));
    if (x == NULL || y == NULL || classes < 0)
        return sx_error(SX_E_ARG, "%s: %s", who,
                        classes < 0 ? "classes < 0"
                        : x == NULL ? "x is NULL"
                                    : "y is NULL");
    if (x->rank < 1 || y->rank < 1 || !dtype_ok(x->dtype) || !dtype_ok(y->dtype) || x->shape[0] < 1)
        return sx_error(
            SX_E_ARG, "%s: x and y must be tensors (f32, f64, i32 or i64) of rank >= 1 with n >= 1",
            who);
    char a[160], b[160];
    if (x->shape[0] != y->shape[0])
        return sx_error(SX_E_SHAPE, "%s: x %s and y %s (want the same first dim)", who,
                        sx_shape_str(x->rank, x->shape, a, sizeof a),
                        sx_shape_str(y->rank, y->shape, b, sizeof b));
    sx_ds_spec spec = {.x_type = tensor_type(x->dtype),
                       .x_rank = x->rank - 1,
                       .y_type = tensor_type(y->dtype),
                       .y_rank = y->rank - 1,
                       .classes = classes,
                       .x_scale = 1.0};
    memcpy(spec.x_shape, x->shape + 1, sizeof(int64_t) * (size_t)(x->rank - 1));
    memcpy(spec.y_shape, y->shape + 1, sizeof(int64_t) * (size_t)(y->rank - 1));
    SX_TRY(sx__spec_check(who, &spec));
    return memory_new(who, &spec, x->shape[0], x->data, y->data, out);
}

sx_status sx_ds_source_idx(const sx_ds_idx *x, const sx_ds_idx *y, int64_t classes,
                           sx_ds_source **out)
{
    const char *who = "sx_ds_source_idx";
    SX_TRY(out_first(who, out));
    if (x == NULL || y == NULL || classes < 0)
        return sx_error(SX_E_ARG, "%s: %s", who,
                        classes < 0 ? "classes < 0"
                        : x == NULL ? "x is NULL"
                                    : "y is NULL");
    char a[160], b[160];
    if (x->dims[0] != y->dims[0])
        return sx_error(SX_E_SHAPE, "%s: x %s and y %s (want the same first dim)", who,
                        sx_shape_str(x->rank, x->dims, a, sizeof a),
                        sx_shape_str(y->rank, y->dims, b, sizeof b));
    sx_ds_spec spec = {.x_type = x->type,
                       .x_rank = x->rank - 1,
                       .y_type = y->type,
                       .y_rank = y->rank - 1,
                       .classes = classes,
                       .x_scale = 1.0};
    memcpy(spec.x_shape, x->dims + 1, sizeof(int64_t) * (size_t)(x->rank - 1));
    memcpy(spec.y_shape, y->dims + 1, sizeof(int64_t) * (size_t)(y->rank - 1));
    SX_TRY(sx__spec_check(who, &spec));
    return memory_new(who, &spec, x->dims[0], x->data, y->data, out);
}

/* ---------------------------------------------------------------- an image set */

static sx_status images_get(const sx_ds_source *s, int64_t i, void *x, void *y)
{
    const sx_ds_images *d = s->impl;
    if (x != NULL)
        sx__image_bytes(d, i, x);
    if (y != NULL && d->labels != NULL)
        *(uint8_t *)y = d->labels[i];
    else if (y != NULL)
        *(int32_t *)y = d->labels32[i];
    return SX_OK;
}

static const char *images_class_name(const sx_ds_source *s, int64_t k)
{
    const sx_ds_images *d = s->impl;
    return d->class_names ? d->class_names[k] : NULL;
}

sx_status sx_ds_source_images(const sx_ds_images *d, sx_ds_source **out)
{
    const char *who = "sx_ds_source_images";
    SX_TRY(out_first(who, out));
    SX_TRY(sx__check_images(who, d));
    sx_ds_spec spec = {.x_type = SX_DS_U8,
                       .x_rank = 3,
                       .x_shape = {d->h, d->w, d->c},
                       .y_type = d->labels != NULL ? SX_DS_U8 : SX_DS_I32,
                       .y_rank = 0,
                       .classes = d->classes,
                       .x_scale = SX_DS_PIXEL_SCALE};
    /* The set is borrowed: impl is the set itself, and nothing is dropped. */
    SX_TRY(sx__source_new(who, &spec, d->n, who, images_get, (void *)(uintptr_t)d, NULL, out));
    (*out)->class_name = images_class_name;
    return SX_OK;
}

/* ---------------------------------------------------------------- a callback */

typedef struct cb_impl {
    sx_ds_get_fn get;
    void *ctx;
} cb_impl;

static sx_status cb_get(const sx_ds_source *s, int64_t i, void *x, void *y)
{
    const cb_impl *c = s->impl;
    return c->get(i, x, y, c->ctx);
}

sx_status sx_ds_source_callback(const sx_ds_spec *spec, int64_t n, sx_ds_get_fn get, void *ctx,
                                sx_ds_source **out)
{
    const char *who = "sx_ds_source_callback";
    SX_TRY(out_first(who, out));
    SX_TRY(sx__spec_check(who, spec));
    if (get == NULL || n < 1)
        return sx_error(SX_E_ARG, "%s: %s", who, n < 1 ? "n < 1" : "get is NULL");
    cb_impl *c = sx_calloc(1, sizeof *c);
    if (c == NULL)
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    c->get = get;
    c->ctx = ctx;
    return sx__source_new(who, spec, n, who, cb_get, c, sx_free, out);
}
