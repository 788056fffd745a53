/* binary.c: element-wise kernels of two or three operands with NumPy broadcasting (binary ops
 * of sx_binary.def, their scalar forms, fma, broadcast_to). The idea: turn the shapes into a
 * plan of per-operand strides (0 on broadcast axes), merge adjacent axes that are contiguous for
 * every operand, and run a vectorisable row kernel along the last merged axis; the pool's threads
 * share the blocks of the flat output range. */
#include "tensor_impl.h"

#include <tgmath.h>

static const char *const binary_names[] = {
#define X(NAME, name, expr, ...) #name,
#include "sx_binary.def"
#undef X
};
_Static_assert(sizeof binary_names / sizeof binary_names[0] == SX_BINARY_COUNT,
               "one name per binary op");

const char *sx_binary_name(sx_binary_op op)
{
    return (unsigned)op < SX_BINARY_COUNT ? binary_names[op] : "bad-binary-op";
}

/* A broadcast plan: the output shape reduced to m merged axes (m >= 1) and, for each of the
 * nin inputs, its stride in elements along each merged axis (0 where it is broadcast). The
 * output itself is contiguous. Along the last merged axis every input stride is 0 or 1. */
typedef struct bplan {
    int m, nin;
    int64_t dim[SX_MAX_RANK];
    int64_t st[3][SX_MAX_RANK];
} bplan;

enum { KIND_BINARY, KIND_FMA, KIND_COPY };

/* Build the plan of `nin` inputs broadcast to the output shape (r, oshape), which the caller has
 * checked. Axes of output size 1 are dropped; axis i merges into the previous merged axis when,
 * for every input, stride(prev) == stride(i) * dim(i). */
static void bplan_make(int r, const int64_t *oshape, int nin, const sx_tensor *const *in, bplan *p)
{
    int64_t st[3][SX_MAX_RANK];
    for (int k = 0; k < nin; k++) {
        int lead = r - in[k]->rank;
        int64_t stride = 1;
        for (int i = r - 1; i >= 0; i--) {
            int64_t d = i >= lead ? in[k]->shape[i - lead] : 1;
            st[k][i] = d == 1 ? 0 : stride;
            stride *= d;
        }
    }
    p->nin = nin;
    p->m = 0;
    for (int i = 0; i < r; i++) {
        if (oshape[i] == 1)
            continue;
        int m = p->m;
        bool merge = m > 0;
        for (int k = 0; k < nin && merge; k++)
            merge = p->st[k][m - 1] == st[k][i] * oshape[i];
        if (merge) {
            p->dim[m - 1] *= oshape[i];
            for (int k = 0; k < nin; k++)
                p->st[k][m - 1] = st[k][i];
        } else {
            p->dim[m] = oshape[i];
            for (int k = 0; k < nin; k++)
                p->st[k][m] = st[k][i];
            p->m = m + 1;
        }
    }
    if (p->m == 0) { /* every axis has size 1: one element */
        p->m = 1;
        p->dim[0] = 1;
        for (int k = 0; k < nin; k++)
            p->st[k][0] = 0;
    }
    for (int k = nin; k < 3; k++)
        for (int i = 0; i < p->m; i++)
            p->st[k][i] = 0;
}

#define T float
#define SFX f32
#include "binary_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "binary_tmpl.h"
#undef T
#undef SFX

/* Plan and run `nin` checked inputs into a checked, non-empty output. */
static void execute(int kind, int op, int nin, const sx_tensor *const *in, sx_tensor *out,
                    int64_t thr)
{
    bplan p;
    bplan_make(out->rank, out->shape, nin, in, &p);
    const void *data[3];
    for (int k = 0; k < nin; k++)
        data[k] = in[k]->data;
    if (out->dtype == SX_F32)
        drive_f32(&p, kind, op, data, out->data, out->size, thr);
    else
        drive_f64(&p, kind, op, data, out->data, out->size, thr);
}

/* Ops whose expression calls libm run in parallel from a lower size. */
static int64_t binary_threshold(sx_binary_op op)
{
    return op == SX_BINARY_POW || op == SX_BINARY_ATAN2 ? SX_PAR_MIN_HEAVY : SX_PAR_MIN;
}

/* Everything after the op check, shared by the tensor-tensor and scalar forms. */
static sx_status binary_core(const char *who, sx_binary_op op, const sx_tensor *a,
                             const sx_tensor *b, sx_tensor *out)
{
    if ((unsigned)op >= SX_BINARY_COUNT)
        return sx_error(SX_E_ARG, "%s: unknown op %d", who, (int)op);
    SX_TRY(sx__check_tensor(who, "a", a));
    SX_TRY(sx__check_tensor(who, "b", b));
    SX_TRY(sx__check_same_dtype(who, a, b));
    int r;
    int64_t shape[SX_MAX_RANK];
    SX_TRY(sx_shape_broadcast(who, a->rank, a->shape, b->rank, b->shape, &r, shape));
    SX_TRY(sx__check_out(who, out, a->dtype, r, shape));
    if (out->size == 0)
        return SX_OK;
    const sx_tensor *in[2] = {a, b};
    execute(KIND_BINARY, (int)op, 2, in, out, binary_threshold(op));
    return SX_OK;
}

sx_status sx_tensor_binary_out(sx_binary_op op, const sx_tensor *a, const sx_tensor *b,
                               sx_tensor *out)
{
    return binary_core("sx_tensor_binary_out", op, a, b, out);
}

sx_status sx_tensor_binary(sx_binary_op op, const sx_tensor *a, const sx_tensor *b, sx_tensor **out)
{
    const char *who = "sx_tensor_binary";
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    if ((unsigned)op >= SX_BINARY_COUNT)
        return sx_error(SX_E_ARG, "%s: unknown op %d", who, (int)op);
    SX_TRY(sx__check_tensor(who, "a", a));
    SX_TRY(sx__check_tensor(who, "b", b));
    SX_TRY(sx__check_same_dtype(who, a, b));
    int r;
    int64_t shape[SX_MAX_RANK];
    SX_TRY(sx_shape_broadcast(who, a->rank, a->shape, b->rank, b->shape, &r, shape));
    sx_tensor *z = NULL;
    SX_TRY(sx_tensor_new(a->dtype, r, shape, &z));
    sx_status s = binary_core(who, op, a, b, z);
    if (s != SX_OK) {
        sx_tensor_free(z);
        return s;
    }
    *out = z;
    return SX_OK;
}

/* The scalar forms broadcast a rank-0 view of `s`, converted to the tensor's dtype. */
static sx_status binary_scalar(const char *who, sx_binary_op op, const sx_tensor *t, double s,
                               bool scalar_first, sx_tensor *out)
{
    SX_TRY(sx__check_tensor(who, scalar_first ? "b" : "a", t));
    float f = (float)s;
    double d = s;
    sx_tensor v = sx_tensor_view(t->dtype, 0, NULL, t->dtype == SX_F32 ? (void *)&f : (void *)&d);
    SX_TRY(sx__check_out(who, out, t->dtype, t->rank, t->shape));
    return scalar_first ? binary_core(who, op, &v, t, out) : binary_core(who, op, t, &v, out);
}

sx_status sx_tensor_binary_scalar_out(sx_binary_op op, const sx_tensor *a, double s, sx_tensor *out)
{
    const char *who = "sx_tensor_binary_scalar_out";
    if ((unsigned)op >= SX_BINARY_COUNT)
        return sx_error(SX_E_ARG, "%s: unknown op %d", who, (int)op);
    return binary_scalar(who, op, a, s, false, out);
}

sx_status sx_tensor_scalar_binary_out(sx_binary_op op, double s, const sx_tensor *b, sx_tensor *out)
{
    const char *who = "sx_tensor_scalar_binary_out";
    if ((unsigned)op >= SX_BINARY_COUNT)
        return sx_error(SX_E_ARG, "%s: unknown op %d", who, (int)op);
    return binary_scalar(who, op, b, s, true, out);
}

sx_status sx_tensor_fma_out(const sx_tensor *a, const sx_tensor *b, const sx_tensor *c,
                            sx_tensor *out)
{
    const char *who = "sx_tensor_fma_out";
    SX_TRY(sx__check_tensor(who, "a", a));
    SX_TRY(sx__check_tensor(who, "b", b));
    SX_TRY(sx__check_tensor(who, "c", c));
    SX_TRY(sx__check_same_dtype(who, a, b));
    SX_TRY(sx__check_same_dtype(who, a, c));
    int r1, r;
    int64_t s1[SX_MAX_RANK], shape[SX_MAX_RANK];
    if (sx_shape_broadcast(who, a->rank, a->shape, b->rank, b->shape, &r1, s1) != SX_OK ||
        sx_shape_broadcast(who, r1, s1, c->rank, c->shape, &r, shape) != SX_OK) {
        char sa[128], sb[128], sc[128];
        return sx_error(SX_E_SHAPE, "%s: shapes %s, %s and %s do not broadcast", who,
                        sx_shape_str(a->rank, a->shape, sa, sizeof sa),
                        sx_shape_str(b->rank, b->shape, sb, sizeof sb),
                        sx_shape_str(c->rank, c->shape, sc, sizeof sc));
    }
    SX_TRY(sx__check_out(who, out, a->dtype, r, shape));
    if (out->size == 0)
        return SX_OK;
    const sx_tensor *in[3] = {a, b, c};
    execute(KIND_FMA, 0, 3, in, out, SX_PAR_MIN);
    return SX_OK;
}

sx_status sx_tensor_broadcast_out(const sx_tensor *x, sx_tensor *out)
{
    const char *who = "sx_tensor_broadcast_out";
    SX_TRY(sx__check_tensor(who, "x", x));
    SX_TRY(sx__check_tensor(who, "out", out));
    SX_TRY(sx__check_out(who, out, x->dtype, out->rank, out->shape));
    int r;
    int64_t shape[SX_MAX_RANK];
    if (x->rank > out->rank ||
        sx_shape_broadcast(who, x->rank, x->shape, out->rank, out->shape, &r, shape) != SX_OK ||
        !sx_shape_equal(r, shape, out->rank, out->shape)) {
        char sx[128], so[128];
        return sx_error(SX_E_SHAPE, "%s: shape %s does not broadcast to %s", who,
                        sx_shape_str(x->rank, x->shape, sx, sizeof sx),
                        sx_shape_str(out->rank, out->shape, so, sizeof so));
    }
    if (out->size == 0)
        return SX_OK;
    const sx_tensor *in[1] = {x};
    execute(KIND_COPY, 0, 1, in, out, SX_PAR_MIN);
    return SX_OK;
}
