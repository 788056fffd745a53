/* softmax.c: softmax and log-softmax along any axis (forward and backward) and cross-entropy
 * with softmax folded in (the dropout mask is in dropout.c). The tensor is viewed as (outer, len,
 * inner) around the axis; each (outer, block of inner lanes) is one independent task, so results
 * never depend on the thread count. Stable: the maximum along the axis is subtracted before exp.
 */
#include "tensor_impl.h"
#include "vmath.h"

#include <tgmath.h>

/* x viewed as (outer, len, inner) with `len` the reduced axis. */
typedef struct sm_geom {
    int64_t outer, len, inner;
} sm_geom;

/* Lanes per task: the running maxima and sums live on the stack. */
#define SM_CB 64

#define T float
#define SFX f32
#include "softmax_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "softmax_tmpl.h"
#undef T
#undef SFX
#define ISA_TMPL "elementwise/sxent_tmpl.h"
#include "isa_each.h"
#undef ISA_TMPL
#define T double
#define SFX f64
#include "sxent_tmpl.h"
#undef T
#undef SFX

typedef void sxent_fn(int64_t n, int64_t k, const void *x, const void *idx, int64_t ignore,
                      double e, const void *dout, void *out);
/* f32 with the widest instruction set this CPU has (vm_isa), f64 once */
static void sxent_run(const sx_tensor *logits, const sx_tensor *idx, int64_t ignore, double e,
                      const sx_tensor *dout, sx_tensor *out)
{
#if VM_DISPATCH
    sxent_fn *const f32[3] = {sxent_run_f32, sxent_run_f32_avx2, sxent_run_f32_avx512};
#else
    sxent_fn *const f32[3] = {sxent_run_f32, sxent_run_f32, sxent_run_f32};
#endif
    sxent_fn *f = logits->dtype == SX_F32 ? f32[vm_isa()] : sxent_run_f64;
    f(logits->shape[0], logits->shape[1], logits->data, idx->data, ignore, e,
      dout != NULL ? dout->data : NULL, out->data);
}

static sm_geom sm_geometry(const sx_tensor *x, int axis)
{
    sm_geom g = {1, x->shape[axis], 1};
    for (int i = 0; i < axis; i++)
        g.outer *= x->shape[i];
    for (int i = axis + 1; i < x->rank; i++)
        g.inner *= x->shape[i];
    return g;
}

/* `t` (named `name`) must exist and have `ref`'s dtype and shape. */
static sx_status check_like(const char *who, const char *name, const sx_tensor *t,
                            const sx_tensor *ref)
{
    SX_TRY(sx__check_tensor(who, name, t));
    if (t->dtype != ref->dtype)
        return sx_error(SX_E_DTYPE, "%s: %s is %s, want %s", who, name, sx_dtype_name(t->dtype),
                        sx_dtype_name(ref->dtype));
    if (!sx_shape_equal(t->rank, t->shape, ref->rank, ref->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want %s", who, name,
                        sx_shape_str(t->rank, t->shape, a, sizeof a),
                        sx_shape_str(ref->rank, ref->shape, b, sizeof b));
    }
    return SX_OK;
}

/* Shared body of the four softmax entry points: a is x (forward) or y (backward). */
static sx_status softmax_any(const char *who, const sx_tensor *a, const sx_tensor *dy, int axis,
                             sx_tensor *out, bool backward, bool log_form)
{
    int ax = 0;
    SX_TRY(sx__check_tensor(who, backward ? "y" : "x", a));
    SX_TRY(sx__axis(who, axis, a->rank, &ax));
    if (backward)
        SX_TRY(check_like(who, "dy", dy, a));
    SX_TRY(check_like(who, backward ? "dx" : "out", out, a));
    SX_TRY(sx__check_apart(who, backward ? "y" : "x", a, backward ? "dx" : "out", out));
    if (backward)
        SX_TRY(sx__check_apart(who, "dy", dy, "dx", out));
    sm_geom g = sm_geometry(a, ax);
    const void *d = backward ? dy->data : NULL;
    if (a->dtype == SX_F32)
        sm_run_f32(&g, a->data, d, out->data, log_form);
    else
        sm_run_f64(&g, a->data, d, out->data, log_form);
    return SX_OK;
}

sx_status sx_tensor_softmax_out(const sx_tensor *x, int axis, sx_tensor *out)
{
    return softmax_any("sx_tensor_softmax_out", x, NULL, axis, out, false, false);
}

sx_status sx_tensor_log_softmax_out(const sx_tensor *x, int axis, sx_tensor *out)
{
    return softmax_any("sx_tensor_log_softmax_out", x, NULL, axis, out, false, true);
}

sx_status sx_tensor_softmax_backward_out(const sx_tensor *y, const sx_tensor *dy, int axis,
                                         sx_tensor *dx)
{
    return softmax_any("sx_tensor_softmax_backward_out", y, dy, axis, dx, true, false);
}

sx_status sx_tensor_log_softmax_backward_out(const sx_tensor *y, const sx_tensor *dy, int axis,
                                             sx_tensor *dx)
{
    return softmax_any("sx_tensor_log_softmax_backward_out", y, dy, axis, dx, true, true);
}

/* ---------------------------------------------------------------- cross-entropy */

/* logits must be rank 2 (n,k) and target alike. */
static sx_status xent_check(const char *who, const sx_tensor *logits, const sx_tensor *target)
{
    SX_TRY(sx__check_tensor(who, "logits", logits));
    if (logits->rank != 2) {
        char a[128];
        return sx_error(SX_E_RANK, "%s: logits has shape %s, want rank 2 (n,k)", who,
                        sx_shape_str(logits->rank, logits->shape, a, sizeof a));
    }
    return check_like(who, "target", target, logits);
}

sx_status sx_tensor_softmax_xent_out(const sx_tensor *logits, const sx_tensor *target,
                                     sx_tensor *out)
{
    const char *who = "sx_tensor_softmax_xent_out";
    SX_TRY(xent_check(who, logits, target));
    SX_TRY(sx__check_out(who, out, logits->dtype, 1, logits->shape));
    SX_TRY(sx__check_apart(who, "logits", logits, "out", out));
    SX_TRY(sx__check_apart(who, "target", target, "out", out));
    const int64_t n = logits->shape[0], k = logits->shape[1];
    if (logits->dtype == SX_F32)
        xent_run_f32(n, k, logits->data, target->data, NULL, out->data);
    else
        xent_run_f64(n, k, logits->data, target->data, NULL, out->data);
    return SX_OK;
}

sx_status sx_tensor_softmax_xent_backward_out(const sx_tensor *logits, const sx_tensor *target,
                                              const sx_tensor *dout, sx_tensor *dlogits)
{
    const char *who = "sx_tensor_softmax_xent_backward_out";
    SX_TRY(xent_check(who, logits, target));
    const sx_tensor rows = {.dtype = logits->dtype, .rank = 1, .shape = {logits->shape[0]}};
    SX_TRY(check_like(who, "dout", dout, &rows)); /* dout (n) */
    SX_TRY(check_like(who, "dlogits", dlogits, logits));
    SX_TRY(sx__check_apart(who, "logits", logits, "dlogits", dlogits));
    SX_TRY(sx__check_apart(who, "target", target, "dlogits", dlogits));
    SX_TRY(sx__check_apart(who, "dout", dout, "dlogits", dlogits));
    const int64_t n = logits->shape[0], k = logits->shape[1];
    if (logits->dtype == SX_F32)
        xent_run_f32(n, k, logits->data, target->data, dout->data, dlogits->data);
    else
        xent_run_f64(n, k, logits->data, target->data, dout->data, dlogits->data);
    return SX_OK;
}

/* ---------------------------------------------------------------- cross-entropy, class indices */

/* logits (n,k) with k >= 1, idx (n) of its dtype holding integers in [0, k) or `ignore`,
 * 0 <= e < 1. */
static sx_status sxent_check(const char *who, const sx_tensor *logits, const sx_tensor *idx,
                             int64_t ignore, double e)
{
    SX_TRY(sx__check_tensor(who, "logits", logits));
    if (logits->rank != 2 || logits->shape[1] < 1) {
        char a[128];
        return sx_error(SX_E_RANK, "%s: logits has shape %s, want (n,k) with k >= 1", who,
                        sx_shape_str(logits->rank, logits->shape, a, sizeof a));
    }
    const sx_tensor rows = {.dtype = logits->dtype, .rank = 1, .shape = {logits->shape[0]}};
    SX_TRY(check_like(who, "idx", idx, &rows));
    if (!(e >= 0 && e < 1))
        return sx_error(SX_E_ARG, "%s: label smoothing %g (want 0 <= e < 1)", who, e);
    const int64_t k = logits->shape[1];
    for (int64_t i = 0; i < idx->size; i++) {
        double v = sx_tensor_get(idx, i);
        if (v != (double)ignore && !(v >= 0 && v < (double)k && v == floor(v)))
            return sx_error(SX_E_RANGE, "%s: idx[%lld] = %g (want a class in 0..%lld or %lld)", who,
                            (long long)i, v, (long long)k - 1, (long long)ignore);
    }
    return SX_OK;
}

sx_status sx_tensor_sparse_xent_out(const sx_tensor *logits, const sx_tensor *idx, int64_t ignore,
                                    double smoothing, sx_tensor *out)
{
    const char *who = "sx_tensor_sparse_xent_out";
    SX_TRY(sxent_check(who, logits, idx, ignore, smoothing));
    SX_TRY(sx__check_out(who, out, logits->dtype, 1, logits->shape));
    SX_TRY(sx__check_apart(who, "logits", logits, "out", out));
    SX_TRY(sx__check_apart(who, "idx", idx, "out", out));
    sxent_run(logits, idx, ignore, smoothing, NULL, out);
    return SX_OK;
}

sx_status sx_tensor_sparse_xent_backward_out(const sx_tensor *logits, const sx_tensor *idx,
                                             const sx_tensor *dout, int64_t ignore,
                                             double smoothing, sx_tensor *dlogits)
{
    const char *who = "sx_tensor_sparse_xent_backward_out";
    SX_TRY(sxent_check(who, logits, idx, ignore, smoothing));
    const sx_tensor rows = {.dtype = logits->dtype, .rank = 1, .shape = {logits->shape[0]}};
    SX_TRY(check_like(who, "dout", dout, &rows));
    SX_TRY(check_like(who, "dlogits", dlogits, logits));
    SX_TRY(sx__check_apart(who, "logits", logits, "dlogits", dlogits));
    SX_TRY(sx__check_apart(who, "idx", idx, "dlogits", dlogits));
    SX_TRY(sx__check_apart(who, "dout", dout, "dlogits", dlogits));
    sxent_run(logits, idx, ignore, smoothing, dout, dlogits);
    return SX_OK;
}
