/* Every op of sx_ops.def, every sample variant of tests/cgraph/opsamples.c, in f64: the gradient
 * of L = sum(y * R) (R fixed and random) computed by sx_ad_grad in a lazy graph matches central
 * finite differences element by element, within the op's tolerance from its sample row:
 * |d - fd| <= fd_tol * (1 + |fd|), step h = fd_step * max(1, |x|). Inputs that are not
 * differentiable (indices, conditions, piecewise-constant ops) must get exact zeros. The same
 * gradients computed in an eager graph equal the lazy ones. Extra cases cover what the samples
 * cannot: the lower-triangle convention of cholesky/eigh, and linalg on several shapes. */
#include "testutil.h"

#include "../cgraph/opsamples.c"

#include <math.h>
#include <sx_autodiff.h>

#define MAX_XS (OS_MAX_LEAVES + 1)

static uint64_t seed_of(sx_cg_op op, int variant, int k)
{
    return 0xad0ULL + 1000003ULL * (uint64_t)op + 7919ULL * (uint64_t)variant + 31ULL * k;
}

static sx_cg_graph *graph_new(sx_cg_mode mode)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(mode, SX_F64, &g), SX_OK, "%s", sx_last_error());
    return g;
}

/* R: uniform in [-1, 1), n values from a fixed seed. */
static double *weights(int64_t n, uint64_t seed)
{
    double *w = malloc((size_t)(n > 0 ? n : 1) * sizeof *w);
    cr_assert_not_null(w);
    sx_rng r;
    sx_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++)
        w[i] = 2 * sx_rng_uniform(&r) - 1;
    return w;
}

/* L = sum(y * R) as a scalar node, R a constant of y's shape holding w. */
static sx_cg_node *weighted_sum(sx_cg_graph *g, sx_cg_node *y, const double *w)
{
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_from_doubles(sx_cg_node_dtype(y), sx_cg_node_rank(y),
                                        sx_cg_node_shape(y), w, sx_cg_node_size(y), &t),
                 SX_OK, "%s", sx_last_error());
    sx_cg_node *l = sx_cg_sum(g, sx_cg_mul(g, y, sx_cg_const(g, t)), SX_AXES_ALL, false);
    sx_tensor_free(t);
    cr_assert_not_null(l, "%s", sx_last_error());
    return l;
}

static sx_tensor *clone(const sx_tensor *t)
{
    sx_tensor *c = NULL;
    cr_assert_not_null(t);
    cr_assert_eq(sx_tensor_clone(t, &c), SX_OK, "%s", sx_last_error());
    return c;
}

/* One gradient computation: the sample, L, and the evaluated gradients (cloned) of L with
 * respect to every leaf and to y itself (the last one). */
typedef struct run {
    sx_cg_graph *g;
    os_sample s;
    sx_cg_node *l;
    int n; /* leaves + 1 */
    sx_cg_node *xs[MAX_XS];
    sx_tensor *grad[MAX_XS];
    double *w;
    sx_status status; /* of sx_ad_grad */
} run;

static void run_grad(run *r, sx_cg_mode mode, sx_cg_op op, int v, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    r->g = graph_new(mode);
    sx_cg_node *y = os_build(r->g, op, SX_F64, seed, v, &r->s);
    cr_assert_not_null(y, "%s/%d: build: %s", sx_cg_op_name(op), v, sx_last_error());
    r->w = weights(sx_cg_node_size(y), seed ^ 0x77);
    r->l = weighted_sum(r->g, y, r->w);
    r->n = r->s.n_leaves + 1;
    for (int i = 0; i < r->s.n_leaves; i++)
        r->xs[i] = r->s.leaf[i];
    r->xs[r->s.n_leaves] = y;
    sx_cg_node *gn[MAX_XS];
    r->status = sx_ad_grad(r->g, r->l, r->n, r->xs, gn);
    if (r->status != SX_OK) {
        for (int i = 0; i < r->n; i++)
            cr_assert_null(gn[i], "%s/%d: out-param set on failure", sx_cg_op_name(op), v);
        return;
    }
    cr_assert_eq(sx_cg_eval(r->g, r->n, gn), SX_OK, "%s/%d: eval: %s", sx_cg_op_name(op), v,
                 sx_last_error());
    for (int i = 0; i < r->n; i++) {
        cr_assert(sx_shape_equal(sx_cg_node_rank(gn[i]), sx_cg_node_shape(gn[i]),
                                 sx_cg_node_rank(r->xs[i]), sx_cg_node_shape(r->xs[i])),
                  "%s/%d: gradient %d has the wrong shape", sx_cg_op_name(op), v, i);
        cr_assert_eq(sx_cg_node_dtype(gn[i]), SX_F64);
        r->grad[i] = clone(sx_cg_value(gn[i]));
    }
}

static void run_free(run *r)
{
    for (int i = 0; i < r->n; i++)
        sx_tensor_free(r->grad[i]);
    free(r->w);
    sx_cg_graph_free(r->g);
}

/* Central differences of L with respect to every element of leaf i, against r->grad[i]. */
static void check_fd(run *r, int i, const os_op *o, int v)
{
    sx_tensor *base = clone(sx_cg_value(r->s.leaf[i])), *moved = clone(base);
    sx_cg_node *y = r->xs[r->s.n_leaves];
    for (int64_t k = 0; k < base->size; k++) {
        double x = sx_tensor_get(base, k), h = o->fd_step * fmax(1.0, fabs(x)), phi[2];
        for (int side = 0; side < 2; side++) {
            sx_tensor_set(moved, k, side == 0 ? x + h : x - h);
            cr_assert_eq(os_leaf_set(r->g, &r->s, i, moved), SX_OK, "%s", sx_last_error());
            cr_assert_eq(os_eval_weighted(r->g, y, r->w, &phi[side]), SX_OK, "%s/%d: eval: %s",
                         o->name, v, sx_last_error());
        }
        sx_tensor_set(moved, k, x);
        double fd = (phi[0] - phi[1]) / (2 * h), d = sx_tensor_get(r->grad[i], k);
        cr_expect(fabs(d - fd) <= o->fd_tol * (1 + fabs(fd)),
                  "%s variant %d leaf %d element %lld: autodiff %.12g, finite differences %.12g "
                  "(tol %g)",
                  o->name, v, i, (long long)k, d, fd, o->fd_tol);
    }
    cr_assert_eq(os_leaf_set(r->g, &r->s, i, base), SX_OK);
    sx_tensor_free(base);
    sx_tensor_free(moved);
}

static void check_zero(const sx_tensor *t, const char *name, int v, int i)
{
    for (int64_t k = 0; k < t->size; k++)
        cr_expect_eq(sx_tensor_get(t, k), 0.0,
                     "%s variant %d leaf %d: non-zero gradient %g at %lld", name, v, i,
                     sx_tensor_get(t, k), (long long)k);
}

/* Which leaf, if any, is input k of y. */
static int leaf_index(const os_sample *s, const sx_cg_node *n)
{
    for (int i = 0; i < s->n_leaves; i++)
        if (s->leaf[i] == n)
            return i;
    return -1;
}

static void check_op(sx_cg_op op)
{
    const os_op *o = &os_ops[op];
    for (int v = 0; v < o->n_variants; v++) {
        uint64_t seed = seed_of(op, v, 0);
        run lazy, eager;
        run_grad(&lazy, SX_CG_LAZY, op, v, seed);
        if ((sx_cg_op_flags(op) & SX_OPF_MUTATES) || op == SX_OP_FUSED) {
            /* documented: mutations and the optimiser's fused ops (made after differentiation)
             * cannot be differentiated through */
            cr_assert_eq(lazy.status, SX_E_UNSUPPORTED, "%s: %s", o->name, sx_last_error());
            cr_assert(strstr(sx_last_error(), o->name) != NULL, "%s", sx_last_error());
            for (int k = 0; k < sx_cg_node_n_inputs(lazy.xs[lazy.n - 1]); k++)
                cr_expect(!sx_ad_differentiable(op, k), "%s: input %d", o->name, k);
            run_free(&lazy);
            continue;
        }
        cr_assert_eq(lazy.status, SX_OK, "%s variant %d: sx_ad_grad: %s", o->name, v,
                     sx_last_error());
        /* dL/dy = R */
        for (int64_t k = 0; k < lazy.grad[lazy.n - 1]->size; k++)
            cr_assert_eq(sx_tensor_get(lazy.grad[lazy.n - 1], k), lazy.w[k]);
        /* the rule's own account of which inputs are differentiable */
        sx_cg_node *y = lazy.xs[lazy.n - 1];
        for (int k = 0; k < sx_cg_node_n_inputs(y); k++) {
            int i = leaf_index(&lazy.s, sx_cg_node_input(y, k));
            if (i >= 0)
                cr_expect_eq(sx_ad_differentiable(op, k), o->diff != OS_NONE && lazy.s.wrt[i],
                             "%s: sx_ad_differentiable(input %d) disagrees with the sample",
                             o->name, k);
        }
        for (int i = 0; i < lazy.s.n_leaves; i++) {
            if (o->diff == OS_NONE || !lazy.s.wrt[i])
                check_zero(lazy.grad[i], o->name, v, i);
            else
                check_fd(&lazy, i, o, v);
        }
        /* eager gradients equal the lazy ones */
        run_grad(&eager, SX_CG_EAGER, op, v, seed);
        cr_assert_eq(eager.status, SX_OK, "%s variant %d: eager sx_ad_grad: %s", o->name, v,
                     sx_last_error());
        for (int i = 0; i < lazy.n; i++)
            cr_expect(tu_close(eager.grad[i], lazy.grad[i], 1e-14, 1e-14),
                      "%s variant %d: eager and lazy gradients of leaf %d differ", o->name, v, i);
        run_free(&eager);
        run_free(&lazy);
    }
}

#define X(NAME, name, arity, shape, eval, flags, kernel, nograd)                                   \
    Test(autodiff_grad, name)                                                                      \
    {                                                                                              \
        check_op(SX_OP_##NAME);                                                                    \
    }
#include "sx_ops.def"
#undef X

/* ---------------------------------------------------------------- beyond the samples */

/* f(A) for an op that reads only the lower triangle of A, differentiated with respect to the
 * raw elements of a symmetric A: finite differences on every element, one at a time, give zero
 * in the strict upper triangle (not read) and the full effect below. */
typedef sx_cg_node *(*mat_fn)(sx_cg_graph *g, sx_cg_node *a);

static sx_cg_node *f_cholesky(sx_cg_graph *g, sx_cg_node *a)
{
    return sx_cg_cholesky(g, a);
}
static sx_cg_node *f_eigh_w(sx_cg_graph *g, sx_cg_node *a)
{
    return sx_cg_eigh_w(g, a);
}
static sx_cg_node *f_eigh_v(sx_cg_graph *g, sx_cg_node *a)
{
    return sx_cg_eigh_v(g, a);
}
static sx_cg_node *f_inv(sx_cg_graph *g, sx_cg_node *a)
{
    return sx_cg_inv(g, a);
}
static sx_cg_node *f_det(sx_cg_graph *g, sx_cg_node *a)
{
    return sx_cg_det(g, a);
}
static sx_cg_node *f_logdet(sx_cg_graph *g, sx_cg_node *a)
{
    return sx_cg_logdet(g, a);
}
static sx_cg_node *f_qr_q(sx_cg_graph *g, sx_cg_node *a)
{
    return sx_cg_qr_q(g, a);
}
static sx_cg_node *f_qr_r(sx_cg_graph *g, sx_cg_node *a)
{
    return sx_cg_qr_r(g, a);
}
static sx_cg_node *f_svd_s(sx_cg_graph *g, sx_cg_node *a)
{
    return sx_cg_svd_s(g, a);
}
/* Q and R together (both adjoints at once): y = [vec(sin Q), vec(R^2)]. */
static sx_cg_node *f_qr_both(sx_cg_graph *g, sx_cg_node *a)
{
    sx_cg_node *q = sx_cg_qr_q(g, a), *r = sx_cg_qr_r(g, a);
    if (q == NULL || r == NULL)
        return NULL;
    int64_t nq = sx_cg_node_size(q), nr = sx_cg_node_size(r);
    sx_cg_node *parts[2] = {sx_cg_reshape(g, sx_cg_sin(g, q), 1, &nq),
                            sx_cg_reshape(g, sx_cg_sqr(g, r), 1, &nr)};
    return sx_cg_concat(g, 2, parts, 0);
}

/* Gradient of sum(f(A) * R) with respect to an input A (m,n) holding a, against central
 * differences on each element (step h, tolerance tol as the linalg samples: 1e-6, 1e-5). */
static void check_matrix_fn(mat_fn f, const char *name, int m, int n, const double *a)
{
    const double h = 1e-6, tol = 1e-5;
    sx_cg_graph *g = graph_new(SX_CG_LAZY);
    int64_t shape[2] = {m, n};
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 2, shape, a, (int64_t)m * n, &t), SX_OK);
    sx_cg_node *x = sx_cg_input(g, "a", SX_F64, 2, shape);
    cr_assert_eq(sx_cg_input_set(g, x, t, SX_CG_COPY), SX_OK);
    sx_cg_node *y = f(g, x);
    cr_assert_not_null(y, "%s: %s", name, sx_last_error());
    double *w = weights(sx_cg_node_size(y), 99);
    sx_cg_node *l = weighted_sum(g, y, w), *gx = NULL;
    cr_assert_eq(sx_ad_grad(g, l, 1, &x, &gx), SX_OK, "%s: %s", name, sx_last_error());
    cr_assert_eq(sx_cg_eval(g, 1, &gx), SX_OK, "%s: %s", name, sx_last_error());
    sx_tensor *d = clone(sx_cg_value(gx)), *moved = clone(t);
    for (int64_t k = 0; k < t->size; k++) {
        double x0 = sx_tensor_get(t, k), phi[2];
        for (int side = 0; side < 2; side++) {
            sx_tensor_set(moved, k, side == 0 ? x0 + h : x0 - h);
            cr_assert_eq(sx_cg_input_set(g, x, moved, SX_CG_COPY), SX_OK);
            cr_assert_eq(os_eval_weighted(g, y, w, &phi[side]), SX_OK, "%s", sx_last_error());
        }
        sx_tensor_set(moved, k, x0);
        double fd = (phi[0] - phi[1]) / (2 * h), dk = sx_tensor_get(d, k);
        cr_expect(fabs(dk - fd) <= tol * (1 + fabs(fd)),
                  "%s (%d,%d) element (%lld,%lld): autodiff %.12g, finite differences %.12g", name,
                  m, n, (long long)(k / n), (long long)(k % n), dk, fd);
    }
    free(w);
    sx_tensor_free(d);
    sx_tensor_free(moved);
    sx_tensor_free(t);
    sx_cg_graph_free(g);
}

/* A random (m,n) matrix U diag(sv) V^T (opsamples' spectral), or a symmetric one when sym. */
static void spectral_matrix(uint64_t seed, int m, int n, const double *sv, bool sym, double *a)
{
    sx_rng r;
    sx_rng_seed(&r, seed);
    spectral(&r, m, n, sv, sym, a);
}

Test(autodiff_grad, lower_triangle_convention)
{
    /* raw symmetric inputs (not symmetrised by a graph node): each element alone is perturbed */
    for (int n = 1; n <= 5; n++) {
        double w[8], a[64];
        for (int i = 0; i < n; i++)
            w[i] = 1 + 0.7 * i + 0.1 * n; /* SPD, distinct eigenvalues */
        spectral_matrix(40 + (uint64_t)n, n, n, w, true, a);
        check_matrix_fn(f_cholesky, "cholesky", n, n, a);
        check_matrix_fn(f_eigh_w, "eigh_w", n, n, a);
        check_matrix_fn(f_eigh_v, "eigh_v", n, n, a);
        /* and the strict upper triangle of the gradient is exactly zero */
        sx_cg_graph *g = graph_new(SX_CG_EAGER);
        int64_t shape[2] = {n, n};
        sx_tensor *t = NULL;
        cr_assert_eq(sx_tensor_from_doubles(SX_F64, 2, shape, a, n * n, &t), SX_OK);
        sx_cg_node *x = sx_cg_param(g, "a", t);
        mat_fn fs[3] = {f_cholesky, f_eigh_w, f_eigh_v};
        for (int f = 0; f < 3; f++) {
            sx_cg_node *y = fs[f](g, x), *gx = NULL;
            double *wt = weights(sx_cg_node_size(y), 5);
            cr_assert_eq(sx_ad_grad(g, weighted_sum(g, y, wt), 1, &x, &gx), SX_OK, "%s",
                         sx_last_error());
            const sx_tensor *d = sx_cg_value(gx);
            for (int i = 0; i < n; i++)
                for (int j = i + 1; j < n; j++)
                    cr_expect_eq(sx_tensor_get(d, i * n + j), 0.0, "fn %d: (%d,%d) not zero", f, i,
                                 j);
            free(wt);
        }
        sx_tensor_free(t);
        sx_cg_graph_free(g);
    }
}

Test(autodiff_grad, linalg_shapes)
{
    /* general (non-symmetric) matrices, square and rectangular, tall and wide; singular values
     * distinct and away from 0 */
    static const int shapes[][2] = {{1, 1}, {2, 2}, {3, 3}, {6, 2}, {5, 4},
                                    {2, 6}, {3, 7}, {1, 4}, {4, 1}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int m = shapes[c][0], n = shapes[c][1];
        double sv[8], a[64];
        for (int i = 0; i < 8; i++)
            sv[i] = 3.5 - 0.4 * i;
        spectral_matrix(1000 + c, m, n, sv, false, a);
        check_matrix_fn(f_qr_q, "qr_q", m, n, a);
        check_matrix_fn(f_qr_r, "qr_r", m, n, a);
        check_matrix_fn(f_qr_both, "qr_q+qr_r", m, n, a);
        check_matrix_fn(f_svd_s, "svd_s", m, n, a);
        if (m == n) {
            check_matrix_fn(f_inv, "inv", m, n, a);
            check_matrix_fn(f_det, "det", m, n, a);
            check_matrix_fn(f_logdet, "logdet", m, n, a);
        }
    }
}

Test(autodiff_grad, solve_vector_and_matrix_rhs)
{
    /* solve(A, b) with b a vector and a matrix, with respect to A and b at once, via a sum */
    for (int rhs = 0; rhs < 3; rhs++) {
        sx_cg_graph *g = graph_new(SX_CG_LAZY);
        int n = 4;
        double sv[4] = {1.5, 2, 2.5, 3}, a[16];
        spectral_matrix(7 + (uint64_t)rhs, n, n, sv, false, a);
        int64_t as[2] = {n, n}, bs[2] = {n, rhs};
        sx_tensor *ta = NULL, *tb = NULL;
        cr_assert_eq(sx_tensor_from_doubles(SX_F64, 2, as, a, n * n, &ta), SX_OK);
        sx_rng r;
        sx_rng_seed(&r, 3);
        tb = rhs == 0 ? tu_rand(&r, SX_F64, 1, bs, -2, 2) : tu_rand(&r, SX_F64, 2, bs, -2, 2);
        sx_cg_node *pa = sx_cg_param(g, "a", ta), *pb = sx_cg_param(g, "b", tb);
        sx_cg_node *y = sx_cg_solve(g, pa, pb);
        double *w = weights(sx_cg_node_size(y), 11);
        sx_cg_node *l = weighted_sum(g, y, w), *xs[2] = {pa, pb}, *gs[2];
        cr_assert_eq(sx_ad_grad(g, l, 2, xs, gs), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_eval(g, 2, gs), SX_OK, "%s", sx_last_error());
        for (int i = 0; i < 2; i++) {
            sx_tensor *d = clone(sx_cg_value(gs[i])), *base = clone(sx_cg_value(xs[i]));
            sx_tensor *moved = clone(base);
            for (int64_t k = 0; k < base->size; k++) {
                double x0 = sx_tensor_get(base, k), h = 1e-6, phi[2];
                for (int side = 0; side < 2; side++) {
                    sx_tensor_set(moved, k, side == 0 ? x0 + h : x0 - h);
                    cr_assert_eq(sx_cg_leaf_set(g, xs[i], moved), SX_OK);
                    cr_assert_eq(os_eval_weighted(g, y, w, &phi[side]), SX_OK);
                }
                sx_tensor_set(moved, k, x0);
                cr_assert_eq(sx_cg_leaf_set(g, xs[i], moved), SX_OK);
                double fd = (phi[0] - phi[1]) / (2 * h);
                cr_expect(fabs(sx_tensor_get(d, k) - fd) <= 1e-5 * (1 + fabs(fd)),
                          "rhs %d input %d element %lld: %.12g vs %.12g", rhs, i, (long long)k,
                          sx_tensor_get(d, k), fd);
            }
            sx_tensor_free(d);
            sx_tensor_free(base);
            sx_tensor_free(moved);
        }
        free(w);
        sx_tensor_free(ta);
        sx_tensor_free(tb);
        sx_cg_graph_free(g);
    }
}
