/* tensor.c: the tensor descriptor: shapes, construction, ownership, fills, copies, printing.
 * A tensor is a small open descriptor over row-major data that it owns or borrows. */
#include "tensor_impl.h"

#include <math.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- shapes */

sx_status sx_shape_check(const char *who, int rank, const int64_t *shape)
{
    if (who == NULL)
        who = "sx_shape_check";
    if (rank < 0 || rank > SX_MAX_RANK)
        return sx_error(SX_E_RANK, "%s: rank %d (want 0..%d)", who, rank, SX_MAX_RANK);
    if (rank > 0 && shape == NULL)
        return sx_error(SX_E_ARG, "%s: shape is NULL", who);
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0)
            return sx_error(SX_E_SHAPE, "%s: dimension %d is negative (%lld)", who, i,
                            (long long)shape[i]);
        if (shape[i] > 0 && n > INT64_MAX / 8 / shape[i])
            return sx_error(SX_E_SHAPE, "%s: shape too large (element count overflows)", who);
        n *= shape[i];
    }
    return SX_OK;
}

int64_t sx_shape_size(int rank, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= shape[i];
    return n;
}

char *sx_shape_str(int rank, const int64_t *shape, char *buf, size_t n)
{
    size_t used = 0;
    if (n == 0)
        return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < rank && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, ")");
    return buf;
}

bool sx_shape_equal(int ra, const int64_t *sa, int rb, const int64_t *sb)
{
    if (ra != rb)
        return false;
    for (int i = 0; i < ra; i++)
        if (sa[i] != sb[i])
            return false;
    return true;
}

sx_status sx_shape_broadcast(const char *who, int ra, const int64_t *sa, int rb, const int64_t *sb,
                             int *out_rank, int64_t *out_shape)
{
    if (who == NULL)
        who = "sx_shape_broadcast";
    if (out_rank == NULL || out_shape == NULL)
        return sx_error(SX_E_ARG, "%s: out_rank or out_shape is NULL", who);
    SX_TRY(sx_shape_check(who, ra, sa));
    SX_TRY(sx_shape_check(who, rb, sb));
    int r = ra > rb ? ra : rb;
    int64_t tmp[SX_MAX_RANK];
    for (int i = 0; i < r; i++) {
        int ia = i - (r - ra), ib = i - (r - rb);
        int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char a[128], b[128];
            return sx_error(SX_E_SHAPE, "%s: shapes %s and %s do not broadcast", who,
                            sx_shape_str(ra, sa, a, sizeof a), sx_shape_str(rb, sb, b, sizeof b));
        }
        tmp[i] = da == 1 ? db : da;
    }
    *out_rank = r;
    for (int i = 0; i < r; i++)
        out_shape[i] = tmp[i];
    return SX_OK;
}

/* ---------------------------------------------------------------- construction */

sx_tensor sx_tensor_view(sx_dtype dtype, int rank, const int64_t *shape, void *data)
{
    sx_tensor t;
    memset(&t, 0, sizeof t);
    assert(rank >= 0 && rank <= SX_MAX_RANK);
    t.dtype = dtype;
    t.rank = rank;
    for (int i = 0; i < SX_MAX_RANK; i++)
        t.shape[i] = i < rank ? shape[i] : 1;
    t.size = sx_shape_size(rank, shape);
    t.data = data;
    t.owns = false;
    return t;
}

/* Whether v converts to an integer of dtype d (truncated toward zero) without overflow. */
static bool int_fits(sx_dtype d, double v)
{
    if (d == SX_I32)
        return v > -2147483649.0 && v < 2147483648.0;
    return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
}

/* A value for the integer tensor `out` must be finite and fit its dtype. */
static sx_status check_int_value(const char *who, const sx_tensor *out, double v)
{
    if (sx_dtype_is_int(out->dtype) && !int_fits(out->dtype, v))
        return sx_error(SX_E_RANGE, "%s: %g does not fit %s", who, v, sx_dtype_name(out->dtype));
    return SX_OK;
}

static sx_status make(const char *who, sx_dtype dtype, int rank, const int64_t *shape, void *data,
                      sx_tensor **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    if (dtype != SX_F32 && dtype != SX_F64 && !sx_dtype_is_int(dtype))
        return sx_error(SX_E_DTYPE, "%s: unknown dtype %d", who, (int)dtype);
    SX_TRY(sx_shape_check(who, rank, shape));
    sx_tensor *t = sx_alloc(sizeof *t);
    if (t == NULL)
        return SX_E_NOMEM;
    *t = sx_tensor_view(dtype, rank, shape, data);
    if (data == NULL) {
        t->data = sx_alloc((size_t)t->size * sx_dtype_size(dtype));
        if (t->data == NULL) {
            sx_free(t);
            return SX_E_NOMEM;
        }
        t->owns = true;
    }
    *out = t;
    return SX_OK;
}

sx_status sx_tensor_new(sx_dtype dtype, int rank, const int64_t *shape, sx_tensor **out)
{
    return make("sx_tensor_new", dtype, rank, shape, NULL, out);
}

sx_status sx_tensor_wrap(sx_dtype dtype, int rank, const int64_t *shape, void *data,
                         sx_tensor **out)
{
    if (data == NULL) {
        if (out != NULL)
            *out = NULL;
        return sx_error(SX_E_ARG, "sx_tensor_wrap: data is NULL");
    }
    return make("sx_tensor_wrap", dtype, rank, shape, data, out);
}

/* A new tensor filled with value, for the public function `who`. */
static sx_status full(const char *who, sx_dtype dtype, int rank, const int64_t *shape, double value,
                      sx_tensor **out)
{
    SX_TRY(make(who, dtype, rank, shape, NULL, out));
    return sx_tensor_fill(*out, value);
}

sx_status sx_tensor_full(sx_dtype dtype, int rank, const int64_t *shape, double value,
                         sx_tensor **out)
{
    return full("sx_tensor_full", dtype, rank, shape, value, out);
}

sx_status sx_tensor_zeros(sx_dtype dtype, int rank, const int64_t *shape, sx_tensor **out)
{
    return full("sx_tensor_zeros", dtype, rank, shape, 0.0, out);
}

sx_status sx_tensor_ones(sx_dtype dtype, int rank, const int64_t *shape, sx_tensor **out)
{
    return full("sx_tensor_ones", dtype, rank, shape, 1.0, out);
}

sx_status sx_tensor_scalar(sx_dtype dtype, double value, sx_tensor **out)
{
    return full("sx_tensor_scalar", dtype, 0, NULL, value, out);
}

sx_status sx_tensor_from_doubles(sx_dtype dtype, int rank, const int64_t *shape,
                                 const double *values, int64_t count, sx_tensor **out)
{
    const char *who = "sx_tensor_from_doubles";
    if (out != NULL)
        *out = NULL;
    SX_TRY(sx_shape_check(who, rank, shape));
    if (count != sx_shape_size(rank, shape) || (count > 0 && values == NULL))
        return sx_error(SX_E_SHAPE, "%s: %lld values for %lld elements", who, (long long)count,
                        (long long)sx_shape_size(rank, shape));
    SX_TRY(make(who, dtype, rank, shape, NULL, out));
    for (int64_t i = 0; i < count; i++) {
        sx_status s = check_int_value(who, *out, values[i]);
        if (s != SX_OK) {
            sx_tensor_free(*out);
            *out = NULL;
            return s;
        }
        sx_tensor_set(*out, i, values[i]);
    }
    return SX_OK;
}

sx_status sx_tensor_clone(const sx_tensor *x, sx_tensor **out)
{
    if (out != NULL)
        *out = NULL;
    SX_TRY(sx__check_any("sx_tensor_clone", "x", x));
    SX_TRY(make("sx_tensor_clone", x->dtype, x->rank, x->shape, NULL, out));
    if (x->size > 0)
        memcpy((*out)->data, x->data, (size_t)x->size * sx_dtype_size(x->dtype));
    return SX_OK;
}

void sx_tensor_free(sx_tensor *t)
{
    if (t == NULL)
        return;
    if (t->owns)
        sx_free(t->data);
    sx_free(t);
}

sx_status sx_tensor_reshape(sx_tensor *t, int rank, const int64_t *shape)
{
    const char *who = "sx_tensor_reshape";
    SX_TRY(sx__check_any(who, "t", t));
    SX_TRY(sx_shape_check(who, rank, shape));
    if (sx_shape_size(rank, shape) != t->size) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: cannot reshape %s to %s", who,
                        sx_shape_str(t->rank, t->shape, a, sizeof a),
                        sx_shape_str(rank, shape, b, sizeof b));
    }
    int64_t s[SX_MAX_RANK];
    memcpy(s, shape, (size_t)rank * sizeof *s);
    t->rank = rank;
    for (int i = 0; i < SX_MAX_RANK; i++)
        t->shape[i] = i < rank ? s[i] : 1;
    return SX_OK;
}

double sx_tensor_get(const sx_tensor *t, int64_t i)
{
    assert(i >= 0 && i < t->size);
    switch (t->dtype) {
    case SX_F32:
        return (double)SX_F32P(t)[i];
    case SX_I32:
        return (double)SX_I32P(t)[i];
    case SX_I64:
        return (double)SX_I64P(t)[i];
    case SX_F64:
        break;
    }
    return SX_F64P(t)[i];
}

void sx_tensor_set(sx_tensor *t, int64_t i, double v)
{
    assert(i >= 0 && i < t->size);
    switch (t->dtype) {
    case SX_F32:
        SX_F32P(t)[i] = (float)v;
        return;
    case SX_I32:
        assert(int_fits(SX_I32, v));
        SX_I32P(t)[i] = (int32_t)v;
        return;
    case SX_I64:
        assert(int_fits(SX_I64, v));
        SX_I64P(t)[i] = (int64_t)v;
        return;
    case SX_F64:
        break;
    }
    SX_F64P(t)[i] = v;
}

/* ---------------------------------------------------------------- fills */

typedef struct fill_ctx {
    void *p;
    sx_dtype dtype;
    double value;
} fill_ctx;

static void fill_range(void *c, int64_t lo, int64_t hi)
{
    const fill_ctx *f = c;
#define FILL(T)                                                                                    \
    T *p = (T *)f->p;                                                                              \
    const T v = (T)f->value;                                                                       \
    _Pragma("omp simd") for (int64_t i = lo; i < hi; i++) p[i] = v
    if (f->dtype == SX_I32) {
        FILL(int32_t);
    } else if (f->dtype == SX_I64) {
        FILL(int64_t);
    } else {
        SX_DISPATCH(f->dtype, FILL);
    }
#undef FILL
}

sx_status sx_tensor_fill(sx_tensor *out, double value)
{
    SX_TRY(sx__check_any("sx_tensor_fill", "out", out));
    SX_TRY(check_int_value("sx_tensor_fill", out, value));
    fill_ctx f = {out->data, out->dtype, value};
    sx__par_range(out->size, SX_PAR_MIN / 2, fill_range, &f);
    return SX_OK;
}

sx_status sx_tensor_arange(sx_tensor *out, double start, double step)
{
    SX_TRY(sx__check_any("sx_tensor_arange", "out", out));
    if (out->size > 0) {
        SX_TRY(check_int_value("sx_tensor_arange", out, start));
        SX_TRY(check_int_value("sx_tensor_arange", out, start + (double)(out->size - 1) * step));
    }
    for (int64_t i = 0; i < out->size; i++)
        sx_tensor_set(out, i, start + (double)i * step);
    return SX_OK;
}

sx_status sx_tensor_linspace(sx_tensor *out, double lo, double hi)
{
    SX_TRY(sx__check_tensor("sx_tensor_linspace", "out", out));
    int64_t n = out->size;
    for (int64_t i = 0; i < n; i++)
        sx_tensor_set(out, i, n == 1 ? lo : lo + (hi - lo) * (double)i / (double)(n - 1));
    return SX_OK;
}

sx_status sx_tensor_rand_uniform(sx_tensor *out, sx_rng *rng, double lo, double hi)
{
    SX_TRY(sx__check_tensor("sx_tensor_rand_uniform", "out", out));
    if (rng == NULL)
        return sx_error(SX_E_ARG, "sx_tensor_rand_uniform: rng is NULL");
    if (!(lo <= hi) || !isfinite(lo) || !isfinite(hi))
        return sx_error(SX_E_ARG, "sx_tensor_rand_uniform: bad range [%g, %g)", lo, hi);
    for (int64_t i = 0; i < out->size; i++)
        sx_tensor_set(out, i, lo + (hi - lo) * sx_rng_uniform(rng));
    return SX_OK;
}

sx_status sx_tensor_rand_normal(sx_tensor *out, sx_rng *rng, double mean, double std)
{
    SX_TRY(sx__check_tensor("sx_tensor_rand_normal", "out", out));
    if (rng == NULL)
        return sx_error(SX_E_ARG, "sx_tensor_rand_normal: rng is NULL");
    if (!(std >= 0) || !isfinite(mean) || !isfinite(std))
        return sx_error(SX_E_ARG, "sx_tensor_rand_normal: bad mean %g / std %g", mean, std);
    for (int64_t i = 0; i < out->size; i++)
        sx_tensor_set(out, i, mean + std * sx_rng_normal(rng));
    return SX_OK;
}

/* ---------------------------------------------------------------- copies */

sx_status sx_tensor_copy_out(const sx_tensor *x, sx_tensor *out)
{
    const char *who = "sx_tensor_copy_out";
    SX_TRY(sx__check_any(who, "x", x));
    SX_TRY(sx__check_any(who, "out", out));
    SX_TRY(sx__check_same_dtype(who, x, out));
    if (x->size != out->size)
        return sx_error(SX_E_SHAPE, "%s: %lld elements into %lld", who, (long long)x->size,
                        (long long)out->size);
    if (x->data != out->data && x->size > 0)
        memmove(out->data, x->data, (size_t)x->size * sx_dtype_size(x->dtype));
    return SX_OK;
}

typedef struct cast_ctx {
    const void *x;
    void *out;
    bool up; /* f32 -> f64, else f64 -> f32 */
} cast_ctx;

static void cast_range(void *ctx, int64_t lo, int64_t hi)
{
    const cast_ctx *c = ctx;
    if (c->up) {
        const float *s = c->x;
        double *d = c->out;
#pragma omp simd
        for (int64_t i = lo; i < hi; i++)
            d[i] = (double)s[i];
    } else {
        const double *s = c->x;
        float *d = c->out;
#pragma omp simd
        for (int64_t i = lo; i < hi; i++)
            d[i] = (float)s[i];
    }
}

/* Element i of an integer tensor as int64. */
static int64_t int_at(const sx_tensor *t, int64_t i)
{
    return t->dtype == SX_I32 ? (int64_t)SX_I32P(t)[i] : SX_I64P(t)[i];
}

/* A conversion with an integer side, element by element (index data is small; no threads). */
static sx_status cast_int(const char *who, const sx_tensor *x, sx_tensor *out)
{
    for (int64_t i = 0; i < x->size; i++) {
        if (!sx_dtype_is_int(x->dtype)) { /* float -> integer */
            double v = sx_tensor_get(x, i);
            if (!isfinite(v) || !int_fits(out->dtype, v))
                return sx_error(SX_E_RANGE, "%s: element %lld (%g) does not fit %s", who,
                                (long long)i, v, sx_dtype_name(out->dtype));
            sx_tensor_set(out, i, v);
        } else if (!sx_dtype_is_int(out->dtype)) { /* integer -> float */
            sx_tensor_set(out, i, (double)int_at(x, i));
        } else if (out->dtype == SX_I64) {
            SX_I64P(out)[i] = int_at(x, i);
        } else { /* i64 -> i32 */
            int64_t v = int_at(x, i);
            if (v < INT32_MIN || v > INT32_MAX)
                return sx_error(SX_E_RANGE, "%s: element %lld (%lld) does not fit i32", who,
                                (long long)i, (long long)v);
            SX_I32P(out)[i] = (int32_t)v;
        }
    }
    return SX_OK;
}

sx_status sx_tensor_cast_out(const sx_tensor *x, sx_tensor *out)
{
    const char *who = "sx_tensor_cast_out";
    SX_TRY(sx__check_any(who, "x", x));
    SX_TRY(sx__check_any(who, "out", out));
    if (!sx_shape_equal(x->rank, x->shape, out->rank, out->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: out has shape %s, want %s", who,
                        sx_shape_str(out->rank, out->shape, a, sizeof a),
                        sx_shape_str(x->rank, x->shape, b, sizeof b));
    }
    if (x->dtype == out->dtype)
        return sx_tensor_copy_out(x, out);
    if (sx_dtype_is_int(x->dtype) || sx_dtype_is_int(out->dtype))
        return cast_int(who, x, out);
    cast_ctx c = {x->data, out->data, x->dtype == SX_F32};
    sx__par_range(x->size, SX_PAR_MIN / 2, cast_range, &c);
    return SX_OK;
}

double sx_tensor_max_abs_diff(const sx_tensor *a, const sx_tensor *b)
{
    if (a == NULL || b == NULL || a->size != b->size)
        return INFINITY;
    double m = 0;
    for (int64_t i = 0; i < a->size; i++) {
        double x = sx_tensor_get(a, i), y = sx_tensor_get(b, i);
        if (isnan(x) || isnan(y)) {
            if (isnan(x) != isnan(y))
                return INFINITY;
            continue;
        }
        if (x == y) /* equal infinities */
            continue;
        double d = fabs(x - y);
        if (!(d <= m))
            m = d;
    }
    return m;
}

/* ---------------------------------------------------------------- printing */

static void print_elem(const sx_tensor *t, FILE *f, int64_t i)
{
    if (sx_dtype_is_int(t->dtype))
        fprintf(f, "%lld", (long long)int_at(t, i));
    else
        fprintf(f, "%.6g", sx_tensor_get(t, i));
}

static void print_rec(const sx_tensor *t, FILE *f, int axis, int64_t offset, int64_t stride,
                      bool summarise, int indent)
{
    int64_t n = t->shape[axis];
    int64_t inner = stride / (n ? n : 1);
    fputc('[', f);
    for (int64_t i = 0; i < n; i++) {
        if (summarise && n > 6 && i == 3) {
            fputs(axis == t->rank - 1 ? "..., " : "...,\n", f);
            if (axis != t->rank - 1)
                fprintf(f, "%*s", indent + 1, "");
            i = n - 4;
            continue;
        }
        if (axis == t->rank - 1)
            print_elem(t, f, offset + i);
        else
            print_rec(t, f, axis + 1, offset + i * inner, inner, summarise, indent + 1);
        if (i + 1 < n) {
            if (axis == t->rank - 1) {
                fputs(", ", f);
            } else {
                fputs(",\n", f);
                fprintf(f, "%*s", indent + 1, "");
            }
        }
    }
    fputc(']', f);
}

void sx_tensor_print(const sx_tensor *t, FILE *f)
{
    char s[128];
    if (t == NULL) {
        fputs("tensor(NULL)\n", f);
        return;
    }
    fprintf(f, "tensor %s %s\n", sx_dtype_name(t->dtype),
            sx_shape_str(t->rank, t->shape, s, sizeof s));
    if (t->rank == 0)
        print_elem(t, f, 0);
    else
        print_rec(t, f, 0, 0, t->size, t->size > 1000, 0);
    fputc('\n', f);
}

/* ---------------------------------------------------------------- checks (tensor_impl.h) */

sx_status sx__check_any(const char *who, const char *name, const sx_tensor *t)
{
    if (t == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, name);
    if ((t->dtype != SX_F32 && t->dtype != SX_F64 && !sx_dtype_is_int(t->dtype)) || t->rank < 0 ||
        t->rank > SX_MAX_RANK)
        return sx_error(SX_E_ARG, "%s: %s is not a valid tensor", who, name);
    if (t->data == NULL && t->size > 0)
        return sx_error(SX_E_ARG, "%s: %s has no data", who, name);
    return SX_OK;
}

sx_status sx__check_desc(const char *who, const char *name, const sx_tensor *t)
{
    if (t == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, name);
    if (sx_dtype_is_int(t->dtype))
        return sx_error(SX_E_DTYPE,
                        "%s: %s is an integer tensor (%s); this function takes f32 or f64", who,
                        name, sx_dtype_name(t->dtype));
    if ((t->dtype != SX_F32 && t->dtype != SX_F64) || t->rank < 0 || t->rank > SX_MAX_RANK)
        return sx_error(SX_E_ARG, "%s: %s is not a valid tensor", who, name);
    return SX_OK;
}

sx_status sx__check_tensor(const char *who, const char *name, const sx_tensor *t)
{
    SX_TRY(sx__check_desc(who, name, t));
    if (t->data == NULL && t->size > 0)
        return sx_error(SX_E_ARG, "%s: %s has no data", who, name);
    return SX_OK;
}

sx_status sx__check_same_dtype(const char *who, const sx_tensor *a, const sx_tensor *b)
{
    if (a->dtype != b->dtype)
        return sx_error(SX_E_DTYPE, "%s: dtypes %s and %s differ", who, sx_dtype_name(a->dtype),
                        sx_dtype_name(b->dtype));
    return SX_OK;
}

sx_status sx__check_out(const char *who, const sx_tensor *out, sx_dtype dtype, int rank,
                        const int64_t *shape)
{
    SX_TRY(sx__check_tensor(who, "out", out));
    if (out->dtype != dtype)
        return sx_error(SX_E_DTYPE, "%s: out is %s, result is %s", who, sx_dtype_name(out->dtype),
                        sx_dtype_name(dtype));
    if (!sx_shape_equal(out->rank, out->shape, rank, shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: out has shape %s, result has shape %s", who,
                        sx_shape_str(out->rank, out->shape, a, sizeof a),
                        sx_shape_str(rank, shape, b, sizeof b));
    }
    return SX_OK;
}

sx_status sx__check_apart(const char *who, const char *in_name, const sx_tensor *in,
                          const char *out_name, const sx_tensor *out)
{
    uintptr_t a = (uintptr_t)in->data, b = (uintptr_t)out->data;
    uintptr_t na = (uintptr_t)in->size * sx_dtype_size(in->dtype);
    uintptr_t nb = (uintptr_t)out->size * sx_dtype_size(out->dtype);
    if (na > 0 && nb > 0 && a < b + nb && b < a + na)
        return sx_error(SX_E_ARG, "%s: %s overlaps %s", who, out_name, in_name);
    return SX_OK;
}

sx_status sx__axis(const char *who, int axis, int rank, int *out)
{
    int a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank)
        return sx_error(SX_E_AXIS, "%s: axis %d out of range for rank %d", who, axis, rank);
    *out = a;
    return SX_OK;
}

sx_status sx__new_like(sx_dtype dtype, int rank, const int64_t *shape, sx_tensor **out)
{
    return sx_tensor_new(dtype, rank, shape, out);
}
