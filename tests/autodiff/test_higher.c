/* Higher-order derivatives. For every differentiable op of sx_ops.def (every sample variant of
 * tests/cgraph/opsamples.c, f64): the grad of grad, i.e. the Hessian of L = sum(y * R) along a
 * random direction V over all differentiable inputs, d/dx <grad L, V>, matches central finite
 * differences of grad L along V element by element, within the op's sample tolerance
 * (|d - fd| <= fd_tol * (1 + |fd|), step fd_step). Piecewise ops are included: their samples sit
 * away from kinks, where the second derivative exists (often 0). Then exact checks against
 * closed forms: third (and fourth) derivatives of scalar functions, a mixed third partial, the
 * Hessian of a quadratic form and of logsumexp, and a Jacobian against finite differences. */
#include "testutil.h"

#include "../cgraph/opsamples.c"

#include <math.h>
#include <sx_autodiff.h>

static uint64_t seed_of(sx_cg_op op, int variant)
{
    return 0x41d0ULL + 1000003ULL * (uint64_t)op + 7919ULL * (uint64_t)variant;
}

static sx_cg_graph *graph_new(sx_cg_mode mode)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(mode, SX_F64, &g), SX_OK, "%s", sx_last_error());
    return g;
}

static sx_tensor *clone(const sx_tensor *t)
{
    sx_tensor *c = NULL;
    cr_assert_not_null(t);
    cr_assert_eq(sx_tensor_clone(t, &c), SX_OK, "%s", sx_last_error());
    return c;
}

/* A constant of n's shape with uniform values in [-1, 1). */
static sx_cg_node *rand_like(sx_cg_graph *g, const sx_cg_node *n, sx_rng *r, sx_tensor **value)
{
    *value = tu_rand(r, SX_F64, sx_cg_node_rank(n), sx_cg_node_shape(n), -1, 1);
    sx_cg_node *c = sx_cg_const(g, *value);
    cr_assert_not_null(c, "%s", sx_last_error());
    return c;
}

static sx_cg_node *inner(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b)
{
    return sx_cg_sum(g, sx_cg_mul(g, a, b), SX_AXES_ALL, false);
}

/* ---------------------------------------------------------------- every op, second order */

static void check_second(sx_cg_op op)
{
    const os_op *o = &os_ops[op];
    if (o->diff == OS_NONE)
        cr_skip_test("%s is not differentiable", o->name);
    for (int v = 0; v < o->n_variants; v++) {
        sx_cg_graph *g = graph_new(SX_CG_LAZY);
        os_sample s;
        sx_cg_node *y = os_build(g, op, SX_F64, seed_of(op, v), v, &s);
        cr_assert_not_null(y, "%s/%d: build: %s", o->name, v, sx_last_error());
        sx_rng r;
        sx_rng_seed(&r, seed_of(op, v) ^ 0x99);
        sx_tensor *rt = NULL, *vt[OS_MAX_LEAVES] = {0};
        sx_cg_node *l = inner(g, y, rand_like(g, y, &r, &rt));
        /* the differentiable leaves, the gradient, and <grad L, V> */
        int n = 0, idx[OS_MAX_LEAVES];
        sx_cg_node *w[OS_MAX_LEAVES], *gs[OS_MAX_LEAVES], *hv[OS_MAX_LEAVES];
        for (int i = 0; i < s.n_leaves; i++)
            if (s.wrt[i]) {
                idx[n] = i;
                w[n++] = s.leaf[i];
            }
        if (n == 0) {
            sx_tensor_free(rt);
            sx_cg_graph_free(g);
            continue;
        }
        cr_assert_eq(sx_ad_grad(g, l, n, w, gs), SX_OK, "%s/%d: grad: %s", o->name, v,
                     sx_last_error());
        sx_cg_node *gv = NULL;
        for (int j = 0; j < n; j++) {
            sx_cg_node *t = inner(g, gs[j], rand_like(g, w[j], &r, &vt[j]));
            gv = gv == NULL ? t : sx_cg_add(g, gv, t);
        }
        cr_assert_eq(sx_ad_grad(g, gv, n, w, hv), SX_OK, "%s/%d: grad of grad: %s", o->name, v,
                     sx_last_error());
        cr_assert_eq(sx_cg_eval(g, n, hv), SX_OK, "%s/%d: eval: %s", o->name, v, sx_last_error());
        sx_tensor *h_ad[OS_MAX_LEAVES], *base[OS_MAX_LEAVES], *g_fd[2][OS_MAX_LEAVES];
        for (int j = 0; j < n; j++) {
            h_ad[j] = clone(sx_cg_value(hv[j]));
            base[j] = clone(sx_cg_value(w[j]));
        }
        /* grad L at x +- h V */
        const double h = o->fd_step;
        for (int side = 0; side < 2; side++) {
            for (int j = 0; j < n; j++) {
                sx_tensor *moved = clone(base[j]);
                for (int64_t k = 0; k < moved->size; k++)
                    sx_tensor_set(moved, k,
                                  sx_tensor_get(base[j], k) +
                                      (side == 0 ? h : -h) * sx_tensor_get(vt[j], k));
                cr_assert_eq(os_leaf_set(g, &s, idx[j], moved), SX_OK, "%s", sx_last_error());
                sx_tensor_free(moved);
            }
            cr_assert_eq(sx_cg_eval(g, n, gs), SX_OK, "%s/%d: eval: %s", o->name, v,
                         sx_last_error());
            for (int j = 0; j < n; j++)
                g_fd[side][j] = clone(sx_cg_value(gs[j]));
        }
        for (int j = 0; j < n; j++) {
            for (int64_t k = 0; k < h_ad[j]->size; k++) {
                double fd = (sx_tensor_get(g_fd[0][j], k) - sx_tensor_get(g_fd[1][j], k)) / (2 * h);
                double d = sx_tensor_get(h_ad[j], k);
                cr_expect(fabs(d - fd) <= o->fd_tol * (1 + fabs(fd)),
                          "%s variant %d leaf %d element %lld: Hessian-vector %.12g, finite "
                          "differences of the gradient %.12g (tol %g)",
                          o->name, v, idx[j], (long long)k, d, fd, o->fd_tol);
            }
            sx_tensor_free(h_ad[j]);
            sx_tensor_free(base[j]);
            sx_tensor_free(g_fd[0][j]);
            sx_tensor_free(g_fd[1][j]);
            sx_tensor_free(vt[j]);
        }
        sx_tensor_free(rt);
        sx_cg_graph_free(g);
    }
}

#define X(NAME, name, arity, shape, eval, flags, kernel, nograd)                                   \
    Test(autodiff_higher, name)                                                                    \
    {                                                                                              \
        check_second(SX_OP_##NAME);                                                                \
    }
#include "sx_ops.def"
#undef X

/* ---------------------------------------------------------------- closed forms */

/* An input x (5) holding xs, in a graph of the given mode. */
static sx_cg_node *vec_input(sx_cg_graph *g, int n, const double *xs)
{
    int64_t shape[1] = {n};
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 1, shape, xs, n, &t), SX_OK);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 1, shape);
    cr_assert_eq(sx_cg_input_set(g, x, t, SX_CG_COPY), SX_OK);
    sx_tensor_free(t);
    return x;
}

/* The order-th derivative of an element-wise f at each x[i]: differentiate sum(.) repeatedly
 * (the Hessian of an element-wise function is diagonal, so each sum's gradient is the next
 * derivative element by element). */
typedef sx_cg_node *(*fn1)(sx_cg_graph *g, sx_cg_node *x);

static void derivatives(sx_cg_mode mode, fn1 f, int order, int n, const double *xs, double *out)
{
    sx_cg_graph *g = graph_new(mode);
    sx_cg_node *x = vec_input(g, n, xs), *d = f(g, x);
    cr_assert_not_null(d, "%s", sx_last_error());
    for (int k = 0; k < order; k++) {
        sx_cg_node *s = sx_cg_sum(g, d, SX_AXES_ALL, false);
        cr_assert_eq(sx_ad_grad(g, s, 1, &x, &d), SX_OK, "order %d: %s", k + 1, sx_last_error());
    }
    cr_assert_eq(sx_cg_eval(g, 1, &d), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < n; i++)
        out[i] = sx_tensor_get(sx_cg_value(d), i);
    sx_cg_graph_free(g);
}

static sx_cg_node *f_sin_exp(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_mul(g, sx_cg_sin(g, x), sx_cg_exp(g, x));
}
static sx_cg_node *f_tanh(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_tanh(g, x);
}
static sx_cg_node *f_sigmoid(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_sigmoid(g, x);
}
static sx_cg_node *f_log(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_log(g, x);
}
static sx_cg_node *f_pow(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_pow(g, x, sx_cg_scalar(g, 2.5));
}
static sx_cg_node *f_sqrt(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_sqrt(g, x);
}
static sx_cg_node *f_erf(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_erf(g, x);
}
static sx_cg_node *f_softplus(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_softplus(g, x);
}
static sx_cg_node *f_reciprocal(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_reciprocal(g, x);
}
static sx_cg_node *f_exp_sin(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_exp(g, sx_cg_sin(g, x));
}
static sx_cg_node *f_div(sx_cg_graph *g, sx_cg_node *x) /* 1 / (1 + x^2) through div */
{
    return sx_cg_div(g, sx_cg_scalar(g, 1.0), sx_cg_add_scalar(g, sx_cg_sqr(g, x), 1.0));
}

static double sig(double x)
{
    return 1 / (1 + exp(-x));
}

static double d3_sin_exp(double x)
{
    return 2 * exp(x) * (cos(x) - sin(x));
}
static double d3_tanh(double x)
{
    double t = tanh(x);
    return (1 - t * t) * (6 * t * t - 2);
}
static double d3_sigmoid(double x)
{
    double s = sig(x);
    return s * (1 - s) * (1 - 6 * s + 6 * s * s);
}
static double d3_log(double x)
{
    return 2 / (x * x * x);
}
static double d3_pow(double x)
{
    return 2.5 * 1.5 * 0.5 / sqrt(x);
}
static double d3_sqrt(double x)
{
    return 0.375 * pow(x, -2.5);
}
static double d3_erf(double x)
{
    return 1.1283791670955125738961589031215452 * (4 * x * x - 2) * exp(-x * x);
}
static double d3_softplus(double x)
{
    double s = sig(x);
    return s * (1 - s) * (1 - 2 * s);
}
static double d3_reciprocal(double x)
{
    return -6 / (x * x * x * x);
}
static double d3_exp_sin(double x)
{
    return cos(x) * (cos(x) * cos(x) - 3 * sin(x) - 1) * exp(sin(x));
}
static double d3_div(double x) /* (1 + x^2)^-1: 24 x (1 - x^2) / (1 + x^2)^4 */
{
    double q = 1 + x * x;
    return 24 * x * (1 - x * x) / (q * q * q * q);
}

Test(autodiff_higher, third_derivative_sin_exp)
{
    const double xs[7] = {-2.5, -1, -0.3, 0, 0.4, 1.3, 2.2};
    for (int mode = 0; mode < 2; mode++) {
        double d[7];
        derivatives((sx_cg_mode)mode, f_sin_exp, 3, 7, xs, d);
        for (int i = 0; i < 7; i++) {
            double want = d3_sin_exp(xs[i]);
            cr_expect(fabs(d[i] - want) <= 1e-12 * (1 + fabs(want)),
                      "mode %d: d3/dx3 sin(x)e^x at %g = %.17g, want %.17g", mode, xs[i], d[i],
                      want);
        }
        /* and the fourth: -4 e^x sin x */
        derivatives((sx_cg_mode)mode, f_sin_exp, 4, 7, xs, d);
        for (int i = 0; i < 7; i++) {
            double want = -4 * exp(xs[i]) * sin(xs[i]);
            cr_expect(fabs(d[i] - want) <= 1e-12 * (1 + fabs(want)), "d4 at %g: %.17g vs %.17g",
                      xs[i], d[i], want);
        }
    }
}

Test(autodiff_higher, third_derivatives_closed_forms)
{
    static const struct {
        const char *name;
        fn1 f;
        double (*d3)(double);
        bool positive; /* domain x > 0 */
    } cases[] = {
        {"tanh", f_tanh, d3_tanh, false},
        {"sigmoid", f_sigmoid, d3_sigmoid, false},
        {"log", f_log, d3_log, true},
        {"pow(x, 2.5)", f_pow, d3_pow, true},
        {"sqrt", f_sqrt, d3_sqrt, true},
        {"erf", f_erf, d3_erf, false},
        {"softplus", f_softplus, d3_softplus, false},
        {"reciprocal", f_reciprocal, d3_reciprocal, true},
        {"exp(sin x)", f_exp_sin, d3_exp_sin, false},
        {"1/(1+x^2)", f_div, d3_div, false},
    };
    const double any[6] = {-2.1, -0.9, -0.2, 0.35, 1.1, 2.4};
    const double pos[6] = {0.3, 0.7, 1.0, 1.6, 2.5, 4.0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const double *xs = cases[c].positive ? pos : any;
        double d[6];
        derivatives(SX_CG_LAZY, cases[c].f, 3, 6, xs, d);
        for (int i = 0; i < 6; i++) {
            double want = cases[c].d3(xs[i]);
            cr_expect(fabs(d[i] - want) <= 1e-11 * (1 + fabs(want)),
                      "%s: d3 at %g = %.17g, want %.17g", cases[c].name, xs[i], d[i], want);
        }
    }
}

Test(autodiff_higher, mixed_third_partial)
{
    /* f(x, y) = x^2 y^3: d3f / dx dy dy = 12 x y; d3f / dx dx dy = 6 y^2 */
    sx_cg_graph *g = graph_new(SX_CG_LAZY);
    double xv = 1.3, yv = -0.7;
    sx_cg_node *x = vec_input(g, 1, &xv), *y = vec_input(g, 1, &yv);
    sx_cg_node *f = sx_cg_sum(g, sx_cg_mul(g, sx_cg_sqr(g, x), sx_cg_pow(g, y, sx_cg_scalar(g, 3))),
                              SX_AXES_ALL, false);
    sx_cg_node *fx, *fxy, *fxyy, *fxx, *fxxy;
    cr_assert_eq(sx_ad_grad(g, f, 1, &x, &fx), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ad_grad(g, sx_cg_sum(g, fx, SX_AXES_ALL, false), 1, &y, &fxy), SX_OK);
    cr_assert_eq(sx_ad_grad(g, sx_cg_sum(g, fxy, SX_AXES_ALL, false), 1, &y, &fxyy), SX_OK);
    cr_assert_eq(sx_ad_grad(g, sx_cg_sum(g, fx, SX_AXES_ALL, false), 1, &x, &fxx), SX_OK);
    cr_assert_eq(sx_ad_grad(g, sx_cg_sum(g, fxx, SX_AXES_ALL, false), 1, &y, &fxxy), SX_OK);
    sx_cg_node *outs[2] = {fxyy, fxxy};
    cr_assert_eq(sx_cg_eval(g, 2, outs), SX_OK, "%s", sx_last_error());
    cr_expect(fabs(sx_tensor_get(sx_cg_value(fxyy), 0) - 12 * xv * yv) < 1e-12);
    cr_expect(fabs(sx_tensor_get(sx_cg_value(fxxy), 0) - 6 * yv * yv) < 1e-12);
    sx_cg_graph_free(g);
}

/* A (n,n) constant with uniform values. */
static sx_cg_node *rand_matrix(sx_cg_graph *g, sx_rng *r, int64_t m, int64_t n, sx_tensor **t)
{
    int64_t s[2] = {m, n};
    *t = tu_rand(r, SX_F64, 2, s, -1, 1);
    return sx_cg_const(g, *t);
}

Test(autodiff_higher, hessian_of_quadratic_form)
{
    /* x^T A x with A not symmetric: the Hessian is A + A^T, in both modes, several sizes */
    sx_rng r;
    sx_rng_seed(&r, 5);
    for (int mode = 0; mode < 2; mode++)
        for (int64_t n = 1; n <= 6; n++) {
            sx_cg_graph *g = graph_new((sx_cg_mode)mode);
            sx_tensor *at = NULL;
            sx_cg_node *a = rand_matrix(g, &r, n, n, &at);
            int64_t xs[2] = {n, 1};
            sx_tensor *xt = tu_rand(&r, SX_F64, 2, xs, -1, 1);
            sx_cg_node *x = sx_cg_param(g, "x", xt);
            sx_cg_node *q = inner(g, x, sx_cg_matmul(g, a, x, false, false)), *h = NULL;
            cr_assert_eq(sx_ad_hessian(g, q, x, &h), SX_OK, "%s", sx_last_error());
            cr_assert_eq(sx_cg_node_rank(h), 2);
            cr_assert_eq(sx_cg_node_shape(h)[0], n);
            cr_assert_eq(sx_cg_node_shape(h)[1], n);
            cr_assert_eq(sx_cg_eval(g, 1, &h), SX_OK, "%s", sx_last_error());
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++) {
                    double want = sx_tensor_get(at, i * n + j) + sx_tensor_get(at, j * n + i);
                    cr_expect(fabs(sx_tensor_get(sx_cg_value(h), i * n + j) - want) < 1e-12,
                              "n %lld (%lld,%lld)", (long long)n, (long long)i, (long long)j);
                }
            sx_tensor_free(at);
            sx_tensor_free(xt);
            sx_cg_graph_free(g);
        }
}

Test(autodiff_higher, hessian_of_logsumexp)
{
    /* H = diag(p) - p p^T with p = softmax(x) */
    const double xs[4] = {0.3, -1.2, 2.0, 0.7};
    sx_cg_graph *g = graph_new(SX_CG_LAZY);
    sx_cg_node *x = vec_input(g, 4, xs), *h = NULL;
    cr_assert_eq(sx_ad_hessian(g, sx_cg_logsumexp(g, x, SX_AXES_ALL, false), x, &h), SX_OK, "%s",
                 sx_last_error());
    cr_assert_eq(sx_cg_eval(g, 1, &h), SX_OK, "%s", sx_last_error());
    double p[4], z = 0;
    for (int i = 0; i < 4; i++)
        z += p[i] = exp(xs[i]);
    for (int i = 0; i < 4; i++)
        p[i] /= z;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            double want = (i == j ? p[i] : 0) - p[i] * p[j];
            cr_expect(fabs(sx_tensor_get(sx_cg_value(h), i * 4 + j) - want) < 1e-12,
                      "(%d,%d): %.17g vs %.17g", i, j, sx_tensor_get(sx_cg_value(h), i * 4 + j),
                      want);
        }
    sx_cg_graph_free(g);
}

Test(autodiff_higher, jacobian_against_finite_differences)
{
    /* y (4,1) = tanh(W x) * sum(x^2) + exp(x[0]) for x (3,1): J (4,3) */
    sx_rng r;
    sx_rng_seed(&r, 17);
    sx_cg_graph *g = graph_new(SX_CG_LAZY);
    sx_tensor *wt = NULL;
    sx_cg_node *w = rand_matrix(g, &r, 4, 3, &wt);
    int64_t xs[2] = {3, 1};
    sx_tensor *xt = tu_rand(&r, SX_F64, 2, xs, -1, 1);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 2, xs);
    cr_assert_eq(sx_cg_input_set(g, x, xt, SX_CG_COPY), SX_OK);
    sx_slice first[2] = {{0, 1, 1}, {0, 1, 1}};
    sx_cg_node *y = sx_cg_add(g,
                              sx_cg_mul(g, sx_cg_tanh(g, sx_cg_matmul(g, w, x, false, false)),
                                        sx_cg_sum(g, sx_cg_sqr(g, x), SX_AXES_ALL, false)),
                              sx_cg_exp(g, sx_cg_slice(g, x, first)));
    sx_cg_node *j = NULL;
    cr_assert_eq(sx_ad_jacobian(g, y, x, &j), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_node_shape(j)[0], 4);
    cr_assert_eq(sx_cg_node_shape(j)[1], 3);
    cr_assert_eq(sx_cg_eval(g, 1, &j), SX_OK, "%s", sx_last_error());
    sx_tensor *jt = clone(sx_cg_value(j)), *moved = clone(xt);
    const double h = 1e-6;
    for (int c = 0; c < 3; c++) {
        sx_tensor *ys[2];
        for (int side = 0; side < 2; side++) {
            sx_tensor_set(moved, c, sx_tensor_get(xt, c) + (side == 0 ? h : -h));
            cr_assert_eq(sx_cg_input_set(g, x, moved, SX_CG_COPY), SX_OK);
            cr_assert_eq(sx_cg_eval(g, 1, &y), SX_OK);
            ys[side] = clone(sx_cg_value(y));
        }
        sx_tensor_set(moved, c, sx_tensor_get(xt, c));
        for (int i = 0; i < 4; i++) {
            double fd = (sx_tensor_get(ys[0], i) - sx_tensor_get(ys[1], i)) / (2 * h);
            cr_expect(fabs(sx_tensor_get(jt, i * 3 + c) - fd) <= 1e-6 * (1 + fabs(fd)),
                      "J(%d,%d) = %.12g, finite differences %.12g", i, c,
                      sx_tensor_get(jt, i * 3 + c), fd);
        }
        sx_tensor_free(ys[0]);
        sx_tensor_free(ys[1]);
    }
    sx_tensor_free(jt);
    sx_tensor_free(moved);
    sx_tensor_free(xt);
    sx_tensor_free(wt);
    sx_cg_graph_free(g);
}
