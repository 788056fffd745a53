/* linalg.c: dense linear algebra through LAPACKE (row-major): inverse, solve, determinant and
 * log-determinant, Cholesky, reduced QR, thin SVD and the symmetric eigen-decomposition.
 * This file checks arguments and maps LAPACK's info codes to strix statuses; the per-dtype
 * drivers (linalg_tmpl.h: f32 -> LAPACKE_s*, f64 -> LAPACKE_d*) work on a scratch copy of the
 * input, so outputs are written only on success. Inputs with NaN/Inf are refused (SX_E_RANGE). */
#include "tensor_impl.h"

#include <lapacke.h>
#include <limits.h>
#include <math.h>

/* Map a non-zero LAPACKE info to a status and a message naming the routine and info:
 * memory errors of LAPACKE's own work arrays -> SX_E_NOMEM, info < 0 (an argument LAPACK
 * rejected: a bug in strix) -> SX_E_LAPACK, info > 0 -> `positive` with its meaning. */
static sx_status la_fail(const char *who, const char *routine, lapack_int info, sx_status positive)
{
    const int i = (int)info;
    if (info == LAPACK_WORK_MEMORY_ERROR || info == LAPACK_TRANSPOSE_MEMORY_ERROR)
        return sx_error(SX_E_NOMEM, "%s: %s: out of memory for its work arrays (info %d)", who,
                        routine, i);
    if (info < 0)
        return sx_error(SX_E_LAPACK, "%s: %s: illegal value in argument %d (info %d)", who, routine,
                        -i, i);
    switch (positive) {
    case SX_E_SINGULAR:
        return sx_error(SX_E_SINGULAR,
                        "%s: %s: matrix is singular, U(%d,%d) is exactly zero (info %d)", who,
                        routine, i, i, i);
    case SX_E_NOT_PD:
        return sx_error(SX_E_NOT_PD,
                        "%s: %s: matrix is not positive definite, leading minor of order %d "
                        "(info %d)",
                        who, routine, i, i);
    default:
        return sx_error(positive, "%s: %s: failed to converge (info %d)", who, routine, i);
    }
}

#define T float
#define SFX f32
#define LA(name) LAPACKE_s##name
#define LA_STR "LAPACKE_s"
#include "linalg_tmpl.h"
#undef T
#undef SFX
#undef LA
#undef LA_STR
#define T double
#define SFX f64
#define LA(name) LAPACKE_d##name
#define LA_STR "LAPACKE_d"
#include "linalg_tmpl.h"
#undef T
#undef SFX
#undef LA
#undef LA_STR

/* Dims (and element count) LAPACK's integer type can index. */
static bool lapack_fits(int64_t m, int64_t n)
{
    const int64_t max = sizeof(lapack_int) >= 8 ? INT64_MAX : INT_MAX;
    return m <= max && n <= max && (m == 0 || n <= max / m);
}

/* `t` (named `name`) must be a matrix (rank 2), square when asked. */
static sx_status check_matrix(const char *who, const char *name, const sx_tensor *t, bool square)
{
    char buf[128];
    SX_TRY(sx__check_tensor(who, name, t));
    if (t->rank != 2)
        return sx_error(SX_E_RANK, "%s: %s has shape %s, want a matrix (rank 2)", who, name,
                        sx_shape_str(t->rank, t->shape, buf, sizeof buf));
    if (square && t->shape[0] != t->shape[1])
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want a square matrix", who, name,
                        sx_shape_str(t->rank, t->shape, buf, sizeof buf));
    if (!lapack_fits(t->shape[0], t->shape[1]))
        return sx_error(SX_E_UNSUPPORTED,
                        "%s: %s has shape %s, too large for LAPACK's %zu-byte "
                        "integers",
                        who, name, sx_shape_str(t->rank, t->shape, buf, sizeof buf),
                        sizeof(lapack_int));
    return SX_OK;
}

/* Output `t` (named `name`) must exist with dtype `dt` and the given shape. */
static sx_status check_result(const char *who, const char *name, const sx_tensor *t, sx_dtype dt,
                              int rank, const int64_t *shape)
{
    SX_TRY(sx__check_tensor(who, name, t));
    if (t->dtype != dt)
        return sx_error(SX_E_DTYPE, "%s: %s is %s, want %s", who, name, sx_dtype_name(t->dtype),
                        sx_dtype_name(dt));
    if (!sx_shape_equal(t->rank, t->shape, rank, shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want %s", who, name,
                        sx_shape_str(t->rank, t->shape, a, sizeof a),
                        sx_shape_str(rank, shape, b, sizeof b));
    }
    return SX_OK;
}

sx_status sx_tensor_inv_out(const sx_tensor *a, sx_tensor *out)
{
    const char *who = "sx_tensor_inv_out";
    SX_TRY(check_matrix(who, "a", a, true));
    SX_TRY(check_result(who, "out", out, a->dtype, 2, a->shape));
    return a->dtype == SX_F32 ? inv_f32(who, a, out) : inv_f64(who, a, out);
}

sx_status sx_tensor_solve_out(const sx_tensor *a, const sx_tensor *b, sx_tensor *out)
{
    const char *who = "sx_tensor_solve_out";
    char sa[128], sb[128];
    SX_TRY(check_matrix(who, "a", a, true));
    SX_TRY(sx__check_tensor(who, "b", b));
    SX_TRY(sx__check_same_dtype(who, a, b));
    if (b->rank != 1 && b->rank != 2)
        return sx_error(SX_E_RANK, "%s: b has shape %s, want (n,) or (n,m)", who,
                        sx_shape_str(b->rank, b->shape, sb, sizeof sb));
    if (b->shape[0] != a->shape[0])
        return sx_error(SX_E_SHAPE, "%s: a %s and b %s do not match", who,
                        sx_shape_str(a->rank, a->shape, sa, sizeof sa),
                        sx_shape_str(b->rank, b->shape, sb, sizeof sb));
    if (!lapack_fits(b->shape[0], b->rank == 2 ? b->shape[1] : 1))
        return sx_error(SX_E_UNSUPPORTED, "%s: b has shape %s, too large for LAPACK", who,
                        sx_shape_str(b->rank, b->shape, sb, sizeof sb));
    SX_TRY(check_result(who, "out", out, a->dtype, b->rank, b->shape));
    return a->dtype == SX_F32 ? solve_f32(who, a, b, out) : solve_f64(who, a, b, out);
}

/* The LU of a: sign, mantissa/exponent of |det| and log|det|. */
static sx_status lu_det(const char *who, const sx_tensor *a, const sx_tensor *out, double *sign,
                        double *mant, int64_t *e, double *logabs)
{
    SX_TRY(check_matrix(who, "a", a, true));
    SX_TRY(check_result(who, "out", out, a->dtype, 0, NULL));
    return a->dtype == SX_F32 ? lu_det_f32(who, a, sign, mant, e, logabs)
                              : lu_det_f64(who, a, sign, mant, e, logabs);
}

sx_status sx_tensor_det_out(const sx_tensor *a, sx_tensor *out)
{
    double sign = 0, mant = 0, logabs = 0;
    int64_t e = 0;
    SX_TRY(lu_det("sx_tensor_det_out", a, out, &sign, &mant, &e, &logabs));
    /* ldexp saturates to inf / 0 on its own; keep e within int first */
    int ei = e > 100000 ? 100000 : e < -100000 ? -100000 : (int)e;
    sx_tensor_set(out, 0, sign * ldexp(mant, ei));
    return SX_OK;
}

sx_status sx_tensor_logdet_out(const sx_tensor *a, sx_tensor *out, double *sign)
{
    double sg = 0, mant = 0, logabs = 0;
    int64_t e = 0;
    SX_TRY(lu_det("sx_tensor_logdet_out", a, out, &sg, &mant, &e, &logabs));
    sx_tensor_set(out, 0, logabs);
    if (sign != NULL)
        *sign = sg;
    return SX_OK;
}

sx_status sx_tensor_cholesky_out(const sx_tensor *a, sx_tensor *l)
{
    const char *who = "sx_tensor_cholesky_out";
    SX_TRY(check_matrix(who, "a", a, true));
    SX_TRY(check_result(who, "l", l, a->dtype, 2, a->shape));
    return a->dtype == SX_F32 ? cholesky_f32(who, a, l) : cholesky_f64(who, a, l);
}

sx_status sx_tensor_qr_out(const sx_tensor *a, sx_tensor *q, sx_tensor *r)
{
    const char *who = "sx_tensor_qr_out";
    SX_TRY(check_matrix(who, "a", a, false));
    const int64_t m = a->shape[0], n = a->shape[1], k = m < n ? m : n;
    const int64_t qs[2] = {m, k}, rs[2] = {k, n};
    SX_TRY(check_result(who, "q", q, a->dtype, 2, qs));
    SX_TRY(check_result(who, "r", r, a->dtype, 2, rs));
    return a->dtype == SX_F32 ? qr_f32(who, a, q, r) : qr_f64(who, a, q, r);
}

sx_status sx_tensor_svd_out(const sx_tensor *a, sx_tensor *u, sx_tensor *s, sx_tensor *vt)
{
    const char *who = "sx_tensor_svd_out";
    SX_TRY(check_matrix(who, "a", a, false));
    const int64_t m = a->shape[0], n = a->shape[1], k = m < n ? m : n;
    const int64_t us[2] = {m, k}, ss[1] = {k}, vs[2] = {k, n};
    SX_TRY(check_result(who, "s", s, a->dtype, 1, ss));
    if (u != NULL)
        SX_TRY(check_result(who, "u", u, a->dtype, 2, us));
    if (vt != NULL)
        SX_TRY(check_result(who, "vt", vt, a->dtype, 2, vs));
    return a->dtype == SX_F32 ? svd_f32(who, a, u, s, vt) : svd_f64(who, a, u, s, vt);
}

sx_status sx_tensor_eigh_out(const sx_tensor *a, sx_tensor *w, sx_tensor *v)
{
    const char *who = "sx_tensor_eigh_out";
    SX_TRY(check_matrix(who, "a", a, true));
    SX_TRY(check_result(who, "w", w, a->dtype, 1, a->shape));
    if (v != NULL)
        SX_TRY(check_result(who, "v", v, a->dtype, 2, a->shape));
    return a->dtype == SX_F32 ? eigh_f32(who, a, w, v) : eigh_f64(who, a, w, v);
}
