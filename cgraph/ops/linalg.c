/* ops/linalg.c: linear algebra through LAPACKE: inv, solve, det, logdet, cholesky, QR (either
 * factor), singular values, symmetric eigen-decomposition (values or vectors). */
#include "cgraph_impl.h"

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

/* ---------------------------------------------------------------- constructors */

#define UNARY(NAME, name)                                                                          \
    sx_cg_node *sx_cg_##name(sx_cg_graph *g, sx_cg_node *x)                                        \
    {                                                                                              \
        return cg_op1(g, SX_OP_##NAME, x, NULL);                                                   \
    }
UNARY(INV, inv)
UNARY(DET, det)
UNARY(LOGDET, logdet)
UNARY(CHOLESKY, cholesky)
UNARY(QR_Q, qr_q)
UNARY(QR_R, qr_r)
UNARY(SVD_S, svd_s)
UNARY(EIGH_W, eigh_w)
UNARY(EIGH_V, eigh_v)
#undef UNARY

sx_cg_node *sx_cg_solve(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b)
{
    return cg_op2(g, SX_OP_SOLVE, a, b, NULL);
}

/* ---------------------------------------------------------------- shape rules */

static sx_status want_square(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_want_rank(n, 0, 2));
    if (IN_VALUE(0)->shape[0] != IN_VALUE(0)->shape[1]) {
        char s[128];
        return sx_error(SX_E_SHAPE, "%s: matrix %s is not square", cg_who(n),
                        sx_shape_str(2, IN_VALUE(0)->shape, s, sizeof s));
    }
    return SX_OK;
}

sx_status cg_shape_square(sx_cg_node *n)
{
    SX_TRY(want_square(n));
    cg_set_shape(n, 2, IN_VALUE(0)->shape);
    return SX_OK;
}

sx_status cg_shape_eigh_v(sx_cg_node *n)
{
    SX_TRY(cg_shape_square(n));
    n->ws_bytes = (size_t)IN_VALUE(0)->shape[0] * sx_dtype_size(OUT->dtype); /* the eigenvalues */
    return SX_OK;
}

sx_status cg_shape_square_scalar(sx_cg_node *n)
{
    SX_TRY(want_square(n));
    cg_set_shape(n, 0, NULL);
    return SX_OK;
}

sx_status cg_shape_solve(sx_cg_node *n)
{
    SX_TRY(want_square(n));
    if (IN_VALUE(1)->rank < 1 || IN_VALUE(1)->rank > 2 ||
        IN_VALUE(1)->shape[0] != IN_VALUE(0)->shape[0]) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: cannot solve %s against %s", cg_who(n),
                        sx_shape_str(2, IN_VALUE(0)->shape, a, sizeof a),
                        sx_shape_str(IN_VALUE(1)->rank, IN_VALUE(1)->shape, b, sizeof b));
    }
    cg_set_shape(n, IN_VALUE(1)->rank, IN_VALUE(1)->shape);
    return SX_OK;
}

sx_status cg_shape_qr_q(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_want_rank(n, 0, 2));
    int64_t m = IN_VALUE(0)->shape[0],
            k = IN_VALUE(0)->shape[0] < IN_VALUE(0)->shape[1] ? m : IN_VALUE(0)->shape[1];
    int64_t s[2] = {m, k};
    cg_set_shape(n, 2, s);
    n->ws_bytes = (size_t)(k * IN_VALUE(0)->shape[1]) * sx_dtype_size(OUT->dtype); /* R */
    return SX_OK;
}

sx_status cg_shape_qr_r(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_want_rank(n, 0, 2));
    int64_t m = IN_VALUE(0)->shape[0], c = IN_VALUE(0)->shape[1];
    int64_t s[2] = {m < c ? m : c, c};
    cg_set_shape(n, 2, s);
    n->ws_bytes = (size_t)(m * s[0]) * sx_dtype_size(OUT->dtype); /* Q */
    return SX_OK;
}

sx_status cg_shape_svd_s(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_want_rank(n, 0, 2));
    int64_t m = IN_VALUE(0)->shape[0], c = IN_VALUE(0)->shape[1];
    int64_t s[1] = {m < c ? m : c};
    cg_set_shape(n, 1, s);
    return SX_OK;
}

sx_status cg_shape_eigh_w(sx_cg_node *n)
{
    SX_TRY(want_square(n));
    cg_set_shape(n, 1, IN_VALUE(0)->shape);
    return SX_OK;
}

/* ---------------------------------------------------------------- evaluators */

sx_status cg_eval_inv(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_inv_out(IN_VALUE(0), OUT);
}

sx_status cg_eval_solve(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_solve_out(IN_VALUE(0), IN_VALUE(1), OUT);
}

sx_status cg_eval_det(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_det_out(IN_VALUE(0), OUT);
}

sx_status cg_eval_logdet(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_logdet_out(IN_VALUE(0), OUT, NULL);
}

sx_status cg_eval_cholesky(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_cholesky_out(IN_VALUE(0), OUT);
}

/* QR and the eigen-decomposition produce two results; each node computes the pair and keeps
 * its half (the other half goes to scratch). */
sx_status cg_eval_qr_q(sx_cg_graph *g, sx_cg_node *n)
{
    int64_t k = OUT->shape[1], c = IN_VALUE(0)->shape[1];
    int64_t rs[2] = {k, c};
    void *ws;
    SX_TRY(cg_workspace(g, (size_t)(k * c) * sx_dtype_size(OUT->dtype), &ws));
    sx_tensor r = sx_tensor_view(OUT->dtype, 2, rs, ws);
    return sx_tensor_qr_out(IN_VALUE(0), OUT, &r);
}

sx_status cg_eval_qr_r(sx_cg_graph *g, sx_cg_node *n)
{
    int64_t m = IN_VALUE(0)->shape[0], k = OUT->shape[0];
    int64_t qs[2] = {m, k};
    void *ws;
    SX_TRY(cg_workspace(g, (size_t)(m * k) * sx_dtype_size(OUT->dtype), &ws));
    sx_tensor q = sx_tensor_view(OUT->dtype, 2, qs, ws);
    return sx_tensor_qr_out(IN_VALUE(0), &q, OUT);
}

sx_status cg_eval_svd_s(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_svd_out(IN_VALUE(0), NULL, OUT, NULL);
}

sx_status cg_eval_eigh_w(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_eigh_out(IN_VALUE(0), OUT, NULL);
}

sx_status cg_eval_eigh_v(sx_cg_graph *g, sx_cg_node *n)
{
    int64_t ws_shape[1] = {OUT->shape[0]};
    void *ws;
    SX_TRY(cg_workspace(g, (size_t)OUT->shape[0] * sx_dtype_size(OUT->dtype), &ws));
    sx_tensor w = sx_tensor_view(OUT->dtype, 1, ws_shape, ws);
    return sx_tensor_eigh_out(IN_VALUE(0), &w, OUT);
}

/* ---------------------------------------------------------------- flop model */

/* n of the last (square) axis of input 0, and the batch of such matrices */
static double cube(const sx_cg_node *n, double c)
{
    const sx_tensor *a = IN_VALUE(0);
    double m = a->rank > 0 ? (double)a->shape[a->rank - 1] : 1;
    double batch = m > 0 ? (double)a->size / (m * m) : 0;
    return c * batch * m * m * m;
}

#define LAPACK_COST(eval, c)                                                                       \
    cg_cost cg_##eval##_cost(const sx_cg_node *n)                                                  \
    {                                                                                              \
        return (cg_cost){cube(n, c), false};                                                       \
    }
LAPACK_COST(eval_inv, 2.0)     /* LU and the inverse from it */
LAPACK_COST(eval_det, 2.0 / 3) /* LU */
LAPACK_COST(eval_logdet, 2.0 / 3)
LAPACK_COST(eval_cholesky, 1.0 / 3)
LAPACK_COST(eval_qr_q, 4.0 / 3) /* Householder QR, then Q */
LAPACK_COST(eval_qr_r, 4.0 / 3)
LAPACK_COST(eval_svd_s, 4.0) /* bidiagonalisation and the singular values */
LAPACK_COST(eval_eigh_w, 4.0 / 3)
LAPACK_COST(eval_eigh_v, 9.0)
#undef LAPACK_COST

/* LU of a (n,n), then forward and back substitution for each of b's columns */
cg_cost cg_eval_solve_cost(const sx_cg_node *n)
{
    const sx_tensor *a = IN_VALUE(0);
    double m = (double)a->shape[a->rank - 1];
    return (cg_cost){2.0 / 3 * m * m * m + 2.0 * m * (double)IN_VALUE(1)->size, false};
}
