/* ops/linalg.c: linear algebra through LAPACKE: inv, solve, det, logdet, cholesky, QR (either
 * factor), singular values, symmetric eigen-decomposition (values or vectors). */
#ifndef CG_GRAD_RULES /* the ops; their gradient rules, at the end, build apart (ops/rule.h) */
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

#else
/* ---------------------------------------------------------------- gradient rules */

/* The standard matrix-calculus results.
 * Every rule is written with ordinary graph ops (matmul, solve, inv, eigh, masks as constants),
 * so the gradients are themselves differentiable (second order through a factorisation works).
 * Ops that read only the lower triangle of A (cholesky, eigh) get gradients that are zero in the
 * strict upper triangle: exactly what finite differences on each element of A give.
 * Notation: A = input 0, Y = the op's result, G = the adjoint of Y, tril/triu = triangles. */
#include "rule.h"

/* Constant (n,n) masks of like's dtype. */
typedef enum {
    MASK_PHI, /* 1 in the strict lower triangle, 1/2 on the diagonal, 0 above (Murray's Phi) */
    MASK_OFF, /* 1 off the diagonal, 0 on it */
    MASK_EYE, /* the identity */
} mask_kind;

static sx_cg_node *mask(sx_cg_graph *g, const sx_cg_node *like, int64_t n, mask_kind kind)
{
    int64_t shape[2] = {n, n};
    sx_tensor *t = NULL;
    if (like == NULL)
        return NULL;
    sx_status s = sx_tensor_zeros(sx_cg_node_dtype(like), 2, shape, &t);
    if (s != SX_OK) {
        sx_cg_graph_fail(g, s);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = 0;
            switch (kind) {
            case MASK_PHI:
                v = i > j ? 1.0 : i == j ? 0.5 : 0.0;
                break;
            case MASK_OFF:
                v = i != j;
                break;
            case MASK_EYE:
                v = i == j;
                break;
            }
            sx_tensor_set(t, i * n + j, v);
        }
    sx_cg_node *c = sx_cg_const(g, t);
    sx_tensor_free(t);
    return c;
}

/* Rows of a matrix node; 0 for NULL (a failed constructor), which mask() then passes on. */
static int64_t rows(const sx_cg_node *n)
{
    return n == NULL ? 0 : sx_cg_node_shape(n)[0];
}

/* The gradient with respect to the elements of A when the op reads only the lower triangle and
 * S is the gradient with respect to a symmetric A (<S, dA> for symmetric dA). A perturbation E
 * of the lower triangle changes A by E + E^T - diag(E), so dL/dE = tril(S + S^T) - diag(S),
 * i.e. Phi(S + S^T). */
static sx_cg_node *lower_grad(sx_cg_graph *g, sx_cg_node *s)
{
    sx_cg_node *phi = mask(g, s, rows(s), MASK_PHI);
    return sx_cg_mul(g, phi, sx_cg_add(g, s, sx_cg_transpose(g, s)));
}

/* copyltu(M) = tril(M) + tril(M, -1)^T, the symmetric matrix with M's lower triangle:
 * X + X^T with X = Phi(M). */
static sx_cg_node *copyltu(sx_cg_graph *g, sx_cg_node *m)
{
    sx_cg_node *x = sx_cg_mul(g, mask(g, m, rows(m), MASK_PHI), m);
    return sx_cg_add(g, x, sx_cg_transpose(g, x));
}

/* A vector v (n) as a row (1,n) or a column (n,1). */
static sx_cg_node *as_row(sx_cg_graph *g, sx_cg_node *v)
{
    if (v == NULL)
        return NULL;
    int64_t s[2] = {1, sx_cg_node_shape(v)[0]};
    return sx_cg_reshape(g, v, 2, s);
}

static sx_cg_node *as_col(sx_cg_graph *g, sx_cg_node *v)
{
    if (v == NULL)
        return NULL;
    int64_t s[2] = {sx_cg_node_shape(v)[0], 1};
    return sx_cg_reshape(g, v, 2, s);
}

/* P diag(d) P^T for a square P and a vector d: (P * d_row) @ P^T. */
static sx_cg_node *congruence_diag(sx_cg_graph *g, sx_cg_node *p, sx_cg_node *d)
{
    return sx_cg_matmul(g, sx_cg_mul(g, p, as_row(g, d)), p, false, true);
}

/* A rule is done: a needed gradient that is NULL means a constructor failed. */
static sx_status finish(sx_cg_graph *g, const sx_cg_node *y, const bool *need, sx_cg_node **gin)
{
    for (int k = 0; k < sx_cg_node_n_inputs(y); k++)
        if (need[k] && gin[k] == NULL)
            return sx__cg_grad_status(g);
    return SX_OK;
}

/* ---------------------------------------------------------------- inverse, solve, det */

/* Y = A^-1: dY = -Y dA Y, so dA = -Y^T G Y^T. */
sx_status grad_inv(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                   sx_cg_node **gin)
{
    gin[0] = sx_cg_gemm(g, sx_cg_matmul(g, y, gy, true, false), y, false, true, -1.0, NULL, 0);
    return finish(g, y, need, gin);
}

/* X = solve(A, B) = A^-1 B: dB = A^-T G = solve(A^T, G), dA = -dB X^T (an outer product when
 * b is a vector). */
sx_status grad_solve(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                     sx_cg_node **gin)
{
    sx_cg_node *a = sx_cg_node_input(y, 0);
    sx_cg_node *db = sx_cg_solve(g, sx_cg_transpose(g, a), gy);
    if (need[1])
        gin[1] = db;
    if (need[0]) {
        if (sx_cg_node_rank(y) == 1)
            gin[0] = sx_cg_gemm(g, as_col(g, db), as_row(g, y), false, false, -1.0, NULL, 0);
        else
            gin[0] = sx_cg_gemm(g, db, y, false, true, -1.0, NULL, 0);
    }
    return finish(g, y, need, gin);
}

/* d = det A: dA = G d A^-T (A invertible). */
sx_status grad_det(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                   sx_cg_node **gin)
{
    sx_cg_node *a = sx_cg_node_input(y, 0);
    gin[0] = sx_cg_mul(g, sx_cg_mul(g, gy, y), sx_cg_transpose(g, sx_cg_inv(g, a)));
    return finish(g, y, need, gin);
}

/* log|det A|: dA = G A^-T (for either sign of det A). */
sx_status grad_logdet(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    sx_cg_node *a = sx_cg_node_input(y, 0);
    gin[0] = sx_cg_mul(g, gy, sx_cg_transpose(g, sx_cg_inv(g, a)));
    return finish(g, y, need, gin);
}

/* ---------------------------------------------------------------- cholesky */

/* L = chol(A), reading tril(A) (Murray 2016, "Differentiation of the Cholesky decomposition").
 * dL = L Phi(L^-1 dA L^-T) for symmetric dA; Phi is self-adjoint, so with P = Phi(L^T G) the
 * symmetric-A gradient is S = L^-T P L^-1, and the lower-triangle gradient is
 * dA = Phi(S + S^T): zero above the diagonal. */
sx_status grad_cholesky(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                        sx_cg_node **gin)
{
    sx_cg_node *p =
        sx_cg_mul(g, mask(g, y, rows(y), MASK_PHI), sx_cg_matmul(g, y, gy, true, false));
    sx_cg_node *linv = sx_cg_inv(g, y);
    sx_cg_node *s = sx_cg_matmul(g, sx_cg_matmul(g, linv, p, true, false), linv, false, false);
    gin[0] = lower_grad(g, s);
    return finish(g, y, need, gin);
}

/* ---------------------------------------------------------------- QR */

/* Reduced QR backward for A (m,n) = Q R with m >= n, R (n,n) invertible (Walter and Lehmann
 * 2018; Liao et al. 2019): with M = R Rbar^T - Qbar^T Q,
 *   Abar = [Qbar + Q copyltu(M)] R^-T,
 * computed as solve(R, B^T)^T. qb or rb may be NULL (a zero adjoint). */
static sx_cg_node *qr_tall_backward(sx_cg_graph *g, sx_cg_node *q, sx_cg_node *r, sx_cg_node *qb,
                                    sx_cg_node *rb)
{
    sx_cg_node *m = NULL;
    if (rb != NULL)
        m = sx_cg_matmul(g, r, rb, false, true);
    if (qb != NULL) {
        sx_cg_node *t = sx_cg_matmul(g, qb, q, true, false);
        m = m == NULL ? sx_cg_neg(g, t) : sx_cg_sub(g, m, t);
    }
    sx_cg_node *b = sx_cg_matmul(g, q, copyltu(g, m), false, false);
    if (qb != NULL)
        b = sx_cg_add(g, qb, b);
    return sx_cg_transpose(g, sx_cg_solve(g, r, sx_cg_transpose(g, b)));
}

/* QR backward for any shape. m >= n: qr_tall_backward. m < n: A = [U | V] with U (m,m), and
 * R = [X | Y] with Q X = U, Y = Q^T V. Through Y, Q receives V Ybar^T and V receives Q Ybar;
 * U gets the square backward with Qbar + V Ybar^T and Xbar. */
static sx_cg_node *qr_backward(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *q, sx_cg_node *r,
                               sx_cg_node *qb, sx_cg_node *rb)
{
    int64_t m = sx_cg_node_shape(a)[0], n = sx_cg_node_shape(a)[1];
    if (m >= n)
        return qr_tall_backward(g, q, r, qb, rb);
    sx_slice left[2] = {SX_SLICE_ALL, {0, m, 1}}, right[2] = {SX_SLICE_ALL, {m, SX_SLICE_END, 1}};
    sx_cg_node *x = sx_cg_slice(g, r, left);
    if (rb == NULL) {
        /* Ybar = 0: V gets nothing; pad U's gradient with n - m zero columns */
        int64_t before[2] = {0, 0}, after[2] = {0, n - m};
        return sx_cg_pad(g, qr_tall_backward(g, q, x, qb, NULL), before, after, 0.0);
    }
    sx_cg_node *v = sx_cg_slice(g, a, right);
    sx_cg_node *xb = sx_cg_slice(g, rb, left), *yb = sx_cg_slice(g, rb, right);
    sx_cg_node *vy = sx_cg_matmul(g, v, yb, false, true);
    sx_cg_node *qb2 = qb == NULL ? vy : sx_cg_add(g, qb, vy);
    sx_cg_node *parts[2] = {qr_tall_backward(g, q, x, qb2, xb),
                            sx_cg_matmul(g, q, yb, false, false)};
    if (parts[0] == NULL || parts[1] == NULL)
        return NULL;
    return sx_cg_concat(g, 2, parts, 1);
}

/* Q of the reduced QR: the QR backward with Rbar = 0 (R rebuilt as qr_r(A)). */
sx_status grad_qr_q(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                    sx_cg_node **gin)
{
    sx_cg_node *a = sx_cg_node_input(y, 0);
    gin[0] = qr_backward(g, a, y, sx_cg_qr_r(g, a), gy, NULL);
    return finish(g, y, need, gin);
}

/* R of the reduced QR: the QR backward with Qbar = 0 (Q rebuilt as qr_q(A)). */
sx_status grad_qr_r(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                    sx_cg_node **gin)
{
    sx_cg_node *a = sx_cg_node_input(y, 0);
    gin[0] = qr_backward(g, a, sx_cg_qr_q(g, a), y, NULL, gy);
    return finish(g, y, need, gin);
}

/* ---------------------------------------------------------------- SVD and eigh */

/* s = singular values of A (m,n), descending, k = min(m,n): ds_i = u_i^T dA v_i, so
 * dA = U diag(G) V^T. The op table has no U or V, so they come from a symmetric
 * eigendecomposition (ascending eigenvalues s_i^2, hence the reversal r(.)):
 *   m >= n: V = eigh_v(A^T A), U = A V diag(1/s):  dA = A V diag(r(G/s)) V^T;
 *   m <  n: U = eigh_v(A A^T), V = A^T U diag(1/s): dA = U diag(r(G/s)) U^T A.
 * Valid for distinct, non-zero singular values (where s is differentiable); the eigenvector
 * signs cancel in V diag(.) V^T. */
sx_status grad_svd_s(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                     sx_cg_node **gin)
{
    sx_cg_node *a = sx_cg_node_input(y, 0);
    sx_slice rev[1] = {{-1, SX_SLICE_END, -1}};
    sx_cg_node *d = sx_cg_slice(g, sx_cg_div(g, gy, y), rev);
    if (sx_cg_node_shape(a)[0] >= sx_cg_node_shape(a)[1]) {
        sx_cg_node *v = sx_cg_eigh_v(g, sx_cg_matmul(g, a, a, true, false));
        gin[0] = sx_cg_matmul(g, a, congruence_diag(g, v, d), false, false);
    } else {
        sx_cg_node *u = sx_cg_eigh_v(g, sx_cg_matmul(g, a, a, false, true));
        gin[0] = sx_cg_matmul(g, congruence_diag(g, u, d), a, false, false);
    }
    return finish(g, y, need, gin);
}

/* w = eigenvalues of symmetric A (lower triangle read), V its eigenvectors: dw_i = v_i^T dA v_i,
 * so the symmetric gradient is S = V diag(G) V^T, and dA = Phi(S + S^T). */
sx_status grad_eigh_w(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    sx_cg_node *v = sx_cg_eigh_v(g, sx_cg_node_input(y, 0));
    gin[0] = lower_grad(g, congruence_diag(g, v, gy));
    return finish(g, y, need, gin);
}

/* V = eigenvectors of symmetric A (lower triangle read), eigenvalues w (distinct):
 * dV = V (F o (V^T dA V)) with F_ij = 1/(w_j - w_i) for i != j and F_ii = 0, so the symmetric
 * gradient is S = V (F o (V^T G)) V^T and dA = Phi(S + S^T). F is built as
 * off-diagonal-mask o 1/(w_row - w_col + I). */
sx_status grad_eigh_v(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    sx_cg_node *a = sx_cg_node_input(y, 0);
    sx_cg_node *w = sx_cg_eigh_w(g, a);
    int64_t n = rows(y);
    sx_cg_node *diff = sx_cg_sub(g, as_row(g, w), as_col(g, w));
    sx_cg_node *f = sx_cg_mul(g, mask(g, y, n, MASK_OFF),
                              sx_cg_reciprocal(g, sx_cg_add(g, diff, mask(g, y, n, MASK_EYE))));
    sx_cg_node *inner = sx_cg_mul(g, f, sx_cg_matmul(g, y, gy, true, false));
    sx_cg_node *s = sx_cg_matmul(g, sx_cg_matmul(g, y, inner, false, false), y, false, true);
    gin[0] = lower_grad(g, s);
    return finish(g, y, need, gin);
}

#endif
