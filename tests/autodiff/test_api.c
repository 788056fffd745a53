/* The autodiff API: sx_ad_grad / vjp / jacobian / hvp / hessian / differentiable. Their errors
 * (status, message, out-parameters left NULL), zero gradients for unrelated nodes, gradient
 * accumulation over shared nodes, the promise that only on-path nodes get gradient nodes (and
 * that evaluating a gradient computes nothing off the path), eager against lazy graphs, and
 * out-of-memory at every allocation of a gradient build. */
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <sx_autodiff.h>

static sx_cg_graph *graph_new(sx_cg_mode mode)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(mode, SX_F64, &g), SX_OK, "%s", sx_last_error());
    return g;
}

/* An input of the given shape holding uniform values in [lo, hi). */
static sx_cg_node *rand_input(sx_cg_graph *g, sx_rng *r, int rank, const int64_t *shape, double lo,
                              double hi)
{
    sx_tensor *t = tu_rand(r, SX_F64, rank, shape, lo, hi);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, rank, shape);
    cr_assert_not_null(x, "%s", sx_last_error());
    cr_assert_eq(sx_cg_input_set(g, x, t, SX_CG_COPY), SX_OK, "%s", sx_last_error());
    sx_tensor_free(t);
    return x;
}

static const sx_tensor *eval(sx_cg_graph *g, sx_cg_node *n)
{
    cr_assert_not_null(n, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(g, 1, &n), SX_OK, "%s", sx_last_error());
    return sx_cg_value(n);
}

static sx_cg_node *total(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_sum(g, x, SX_AXES_ALL, false);
}

/* A sentinel that an out-parameter must lose on failure. */
#define SENTINEL ((sx_cg_node *)(uintptr_t)0x1)

/* ---------------------------------------------------------------- errors */

Test(autodiff_api, grad_of_non_scalar_is_a_shape_error)
{
    sx_rng r;
    sx_rng_seed(&r, 1);
    sx_cg_graph *g = graph_new(SX_CG_LAZY);
    int64_t s[2] = {2, 3};
    sx_cg_node *x = rand_input(g, &r, 2, s, -1, 1), *y = sx_cg_sin(g, x), *gx = SENTINEL;
    int64_t before = sx_cg_graph_size(g);
    cr_assert_eq(sx_ad_grad(g, y, 1, &x, &gx), SX_E_SHAPE);
    cr_assert_null(gx);
    cr_assert(strstr(sx_last_error(), "sx_ad_vjp") != NULL, "message: %s", sx_last_error());
    cr_assert(strstr(sx_last_error(), "(2,3)") != NULL, "message: %s", sx_last_error());
    cr_assert_eq(sx_cg_graph_size(g), before, "nodes were added");
    /* a single-element non-scalar is fine: (1,1) */
    int64_t one[2] = {1, 1};
    sx_cg_node *y1 = sx_cg_reshape(g, total(g, y), 2, one);
    cr_assert_eq(sx_ad_grad(g, y1, 1, &x, &gx), SX_OK, "%s", sx_last_error());
    const sx_tensor *d = eval(g, gx), *xv = sx_cg_value(x);
    for (int64_t i = 0; i < 6; i++)
        cr_assert_float_eq(sx_tensor_get(d, i), cos(sx_tensor_get(xv, i)), 1e-15);
    sx_cg_graph_free(g);
}

Test(autodiff_api, vjp_seed_errors)
{
    sx_rng r;
    sx_rng_seed(&r, 2);
    sx_cg_graph *g = graph_new(SX_CG_LAZY), *other = graph_new(SX_CG_LAZY);
    int64_t s[2] = {2, 3}, t[2] = {3, 2};
    sx_cg_node *x = rand_input(g, &r, 2, s, -1, 1), *y = sx_cg_exp(g, x), *gx = SENTINEL;
    /* wrong shape (same size) */
    sx_cg_node *bad = rand_input(g, &r, 2, t, -1, 1);
    cr_assert_eq(sx_ad_vjp(g, y, bad, 1, &x, &gx), SX_E_SHAPE);
    cr_assert_null(gx);
    cr_assert(strstr(sx_last_error(), "(3,2)") && strstr(sx_last_error(), "(2,3)"), "%s",
              sx_last_error());
    /* wrong dtype */
    sx_tensor *f32 = NULL;
    cr_assert_eq(sx_tensor_zeros(SX_F32, 2, s, &f32), SX_OK);
    sx_cg_node *seed32 = sx_cg_const(g, f32);
    sx_tensor_free(f32);
    gx = SENTINEL;
    cr_assert_eq(sx_ad_vjp(g, y, seed32, 1, &x, &gx), SX_E_DTYPE);
    cr_assert_null(gx);
    /* NULL seed, seed of another graph */
    gx = SENTINEL;
    cr_assert_eq(sx_ad_vjp(g, y, NULL, 1, &x, &gx), SX_E_ARG);
    cr_assert_null(gx);
    sx_cg_node *foreign = rand_input(other, &r, 2, s, -1, 1);
    gx = SENTINEL;
    cr_assert_eq(sx_ad_vjp(g, y, foreign, 1, &x, &gx), SX_E_ARG);
    cr_assert_null(gx);
    /* a good seed: exp' = exp, times the seed */
    sx_cg_node *seed = rand_input(g, &r, 2, s, -1, 1);
    cr_assert_eq(sx_ad_vjp(g, y, seed, 1, &x, &gx), SX_OK, "%s", sx_last_error());
    const sx_tensor *d = eval(g, gx);
    for (int64_t i = 0; i < 6; i++)
        cr_assert_float_eq(
            sx_tensor_get(d, i),
            exp(sx_tensor_get(sx_cg_value(x), i)) * sx_tensor_get(sx_cg_value(seed), i), 1e-14);
    sx_cg_graph_free(other);
    sx_cg_graph_free(g);
}

Test(autodiff_api, argument_errors_leave_outputs_null)
{
    sx_rng r;
    sx_rng_seed(&r, 3);
    sx_cg_graph *g = graph_new(SX_CG_LAZY), *other = graph_new(SX_CG_LAZY);
    int64_t s[1] = {3};
    sx_cg_node *x = rand_input(g, &r, 1, s, -1, 1), *y = total(g, sx_cg_sqr(g, x));
    sx_cg_node *fx = rand_input(other, &r, 1, s, -1, 1), *fy = total(other, fx);
    sx_cg_node *out[2] = {SENTINEL, SENTINEL}, *xs2[2] = {x, NULL}, *o = SENTINEL;

    cr_assert_eq(sx_ad_grad(NULL, y, 1, &x, out), SX_E_ARG);
    cr_assert_eq(sx_ad_grad(g, NULL, 1, &x, out), SX_E_ARG);
    cr_assert_eq(sx_ad_grad(g, y, 1, &x, NULL), SX_E_ARG);
    cr_assert_eq(sx_ad_grad(g, y, -1, &x, out), SX_E_ARG);
    cr_assert_eq(sx_ad_grad(g, y, 1, NULL, out), SX_E_ARG);
    out[0] = out[1] = SENTINEL;
    cr_assert_eq(sx_ad_grad(g, y, 2, xs2, out), SX_E_ARG); /* a NULL x */
    cr_assert(out[0] == NULL && out[1] == NULL);
    out[0] = SENTINEL;
    cr_assert_eq(sx_ad_grad(g, fy, 1, &x, out), SX_E_ARG); /* y of another graph */
    cr_assert_null(out[0]);
    out[0] = SENTINEL;
    cr_assert_eq(sx_ad_grad(g, y, 1, &fx, out), SX_E_ARG); /* x of another graph */
    cr_assert_null(out[0]);
    cr_assert(strstr(sx_last_error(), "xs[0]") != NULL, "%s", sx_last_error());

    o = SENTINEL;
    cr_assert_eq(sx_ad_jacobian(g, y, fx, &o), SX_E_ARG);
    cr_assert_null(o);
    o = SENTINEL;
    cr_assert_eq(sx_ad_hessian(g, fy, x, &o), SX_E_ARG);
    cr_assert_null(o);
    o = SENTINEL;
    cr_assert_eq(sx_ad_hessian(g, sx_cg_sqr(g, x), x, &o), SX_E_SHAPE); /* not a scalar */
    cr_assert_null(o);
    o = SENTINEL;
    cr_assert_eq(sx_ad_hvp(g, y, x, NULL, &o), SX_E_SHAPE);
    cr_assert_null(o);
    int64_t s4[1] = {4};
    o = SENTINEL;
    cr_assert_eq(sx_ad_hvp(g, y, x, rand_input(g, &r, 1, s4, -1, 1), &o), SX_E_SHAPE);
    cr_assert_null(o);
    /* an empty x: no Jacobian */
    int64_t s0[1] = {0};
    sx_cg_node *e = sx_cg_input(g, "e", SX_F64, 1, s0);
    o = SENTINEL;
    cr_assert_eq(sx_ad_jacobian(g, y, e, &o), SX_E_SHAPE);
    cr_assert_null(o);
    /* n = 0 is a valid (empty) request */
    cr_assert_eq(sx_ad_grad(g, y, 0, NULL, out), SX_OK);
    sx_cg_graph_free(other);
    sx_cg_graph_free(g);
}

Test(autodiff_api, assign_is_not_differentiated_through)
{
    sx_rng r;
    sx_rng_seed(&r, 4);
    sx_cg_graph *g = graph_new(SX_CG_LAZY);
    int64_t s[1] = {3};
    sx_tensor *t = tu_rand(&r, SX_F64, 1, s, -1, 1);
    sx_cg_node *p = sx_cg_param(g, "p", t), *x = rand_input(g, &r, 1, s, -1, 1);
    sx_cg_node *a = sx_cg_assign(g, p, sx_cg_mul(g, x, x)), *gx = SENTINEL;
    cr_assert_eq(sx_ad_grad(g, total(g, a), 1, &x, &gx), SX_E_UNSUPPORTED);
    cr_assert_null(gx);
    cr_assert(strstr(sx_last_error(), "assign") != NULL, "%s", sx_last_error());
    cr_assert(!sx_ad_differentiable(SX_OP_ASSIGN, 0) && !sx_ad_differentiable(SX_OP_ASSIGN, 1));
    sx_tensor_free(t);
    sx_cg_graph_free(g);
}

Test(autodiff_api, differentiable_table)
{
    cr_assert(sx_ad_differentiable(SX_OP_ADD, 0) && sx_ad_differentiable(SX_OP_ADD, 1));
    cr_assert(!sx_ad_differentiable(SX_OP_GT, 0) && !sx_ad_differentiable(SX_OP_ARGMAX, 0));
    cr_assert(!sx_ad_differentiable(SX_OP_WHERE, 0) && sx_ad_differentiable(SX_OP_WHERE, 2));
    cr_assert(sx_ad_differentiable(SX_OP_GATHER, 0) && !sx_ad_differentiable(SX_OP_GATHER, 1));
    cr_assert(!sx_ad_differentiable(SX_OP_MAXPOOL2D_BACKWARD, 0));
    cr_assert(sx_ad_differentiable(SX_OP_MAXPOOL2D_BACKWARD, 1));
    cr_assert(sx_ad_differentiable(SX_OP_CHOLESKY, 0) && sx_ad_differentiable(SX_OP_SOLVE, 1));
    cr_assert(!sx_ad_differentiable(SX_OP_COUNT, 0));
    cr_assert(!sx_ad_differentiable((sx_cg_op)-1, 0));
    /* the nograd column's other kinds: NG_ALL_BUT (seq, embedding), NG_INPUT (sparse_xent),
     * NG_ALL (allreduce_part, dropout_mask has no inputs), NG_REFUSED (fused, updates) */
    cr_assert(sx_ad_differentiable(SX_OP_SEQ, 0) && !sx_ad_differentiable(SX_OP_SEQ, 1));
    cr_assert(sx_ad_differentiable(SX_OP_EMBEDDING, 0));
    cr_assert(!sx_ad_differentiable(SX_OP_EMBEDDING, 1));
    cr_assert(sx_ad_differentiable(SX_OP_SPARSE_XENT, 0));
    cr_assert(!sx_ad_differentiable(SX_OP_SPARSE_XENT, 1));
    cr_assert(!sx_ad_differentiable(SX_OP_ALLREDUCE_PART, 0));
    cr_assert(!sx_ad_differentiable(SX_OP_FUSED, 0) && !sx_ad_differentiable(SX_OP_FUSED, 40));
    cr_assert(!sx_ad_differentiable(SX_OP_FUSED_UPDATE, 2));
}

/* The typed attribute views read what the constructors store, as the untyped fields the saved
 * form holds (alpha, ints[]). */
Test(autodiff_api, typed_attributes_view_the_saved_fields)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    int64_t ls[2] = {3, 4}, is[1] = {3};
    sx_cg_node *l = sx_cg_input(g, "l", SX_F64, 2, ls), *t = sx_cg_input(g, "t", SX_F64, 1, is);
    sx_cg_node *y = sx_cg_sparse_xent(g, l, t, 2, 0.25);
    cr_assert_not_null(y);
    const sx_cg_attr *a = sx_cg_node_attr(y);
    cr_assert(a->sparse_xent.ignore == 2 && a->sparse_xent.smoothing == 0.25);
    cr_assert(a->ints[0] == 2 && a->alpha == 0.25);
    sx_cg_node *e = sx_cg_embedding(g, l, t, 1);
    cr_assert_not_null(e);
    cr_assert(sx_cg_node_attr(e)->embedding.pad == 1 && sx_cg_node_attr(e)->ints[0] == 1);
    sx_cg_graph_free(g);
}

/* ---------------------------------------------------------------- conventions at kinks */

/* The gradient of sum(f(x) * 1) at the values xs, f built by fn. */
static void grad_at(sx_cg_node *(*fn)(sx_cg_graph *, sx_cg_node *), int rank, const int64_t *shape,
                    const double *xs, double *out)
{
    sx_cg_graph *g = graph_new(SX_CG_EAGER);
    sx_tensor *t = NULL;
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= shape[i];
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, rank, shape, xs, n, &t), SX_OK);
    sx_cg_node *x = sx_cg_param(g, "x", t), *gx = NULL;
    cr_assert_eq(sx_ad_grad(g, total(g, fn(g, x)), 1, &x, &gx), SX_OK, "%s", sx_last_error());
    for (int64_t i = 0; i < n; i++)
        out[i] = sx_tensor_get(sx_cg_value(gx), i);
    sx_tensor_free(t);
    sx_cg_graph_free(g);
}

static sx_cg_node *c_relu(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_relu(g, x);
}
static sx_cg_node *c_abs(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_abs(g, x);
}
static sx_cg_node *c_leaky(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_leaky_relu(g, x, 0.1);
}
static sx_cg_node *c_elu(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_elu(g, x, 0.7);
}
static sx_cg_node *c_sqrt(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_sqrt(g, x);
}
static sx_cg_node *c_round(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_add(g, sx_cg_round(g, x), sx_cg_add(g, sx_cg_floor(g, x), sx_cg_sign(g, x)));
}
/* max(x, x) and min(x, x) over the same values in two nodes: ties everywhere */
static sx_cg_node *c_max_tie(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_max(g, sx_cg_mul_scalar(g, x, 2.0), sx_cg_add(g, x, x));
}
static sx_cg_node *c_min_tie_a(sx_cg_graph *g, sx_cg_node *x) /* x is the first argument */
{
    return sx_cg_min(g, x, sx_cg_mul_scalar(g, sx_cg_add(g, x, x), 0.5));
}
static sx_cg_node *c_reduce_max_rows(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_reduce_max(g, x, SX_AXIS(1), false);
}
static sx_cg_node *c_reduce_max_cols(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_reduce_max(g, x, SX_AXIS(0), true);
}
static sx_cg_node *c_reduce_min_all(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_reduce_min(g, x, SX_AXES_ALL, false);
}
static sx_cg_node *c_maxpool(sx_cg_graph *g, sx_cg_node *x)
{
    sx_pool2d_params p = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    return sx_cg_maxpool2d(g, x, &p);
}

Test(autodiff_api, conventions_at_non_differentiable_points)
{
    int64_t s3[1] = {3};
    double x3[3] = {-1, 0, 2}, d[12];
    grad_at(c_relu, 1, s3, x3, d); /* relu'(0) = 0 */
    cr_assert(d[0] == 0 && d[1] == 0 && d[2] == 1);
    grad_at(c_abs, 1, s3, x3, d); /* abs'(0) = 0 */
    cr_assert(d[0] == -1 && d[1] == 0 && d[2] == 1);
    grad_at(c_leaky, 1, s3, x3, d); /* leaky_relu'(0) = slope (the left derivative) */
    cr_assert(d[0] == 0.1 && d[1] == 0.1 && d[2] == 1);
    grad_at(c_elu, 1, s3, x3, d); /* elu'(0) = alpha (the left derivative) */
    cr_assert_float_eq(d[0], 0.7 * exp(-1.0), 1e-15);
    cr_assert(d[1] == 0.7 && d[2] == 1);
    grad_at(c_sqrt, 1, s3, (double[]){4, 0, 1}, d); /* sqrt'(0) = +inf */
    cr_assert(d[0] == 0.25 && isinf(d[1]) && d[1] > 0 && d[2] == 0.5);
    grad_at(c_round, 1, s3, (double[]){0.5, 0, 1.5}, d); /* round, floor, sign: 0 */
    cr_assert(d[0] == 0 && d[1] == 0 && d[2] == 0);
    /* ties of two arguments go to the first: max(2x, x + x) sends everything to 2x */
    grad_at(c_max_tie, 1, s3, x3, d);
    cr_assert(d[0] == 2 && d[1] == 2 && d[2] == 2, "%g %g %g", d[0], d[1], d[2]);
    grad_at(c_min_tie_a, 1, s3, x3, d);
    cr_assert(d[0] == 1 && d[1] == 1 && d[2] == 1, "%g %g %g", d[0], d[1], d[2]);
    /* reductions: the first extreme in row-major order gets everything */
    int64_t s34[2] = {3, 4};
    double x34[12] = {1, 5, 5,  2, /* row 0: tie at columns 1 and 2 */
                      7, 7, 7,  7, /* row 1: all equal */
                      0, 3, -1, 3};
    grad_at(c_reduce_max_rows, 2, s34, x34, d);
    double want_rows[12] = {0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0};
    for (int i = 0; i < 12; i++)
        cr_assert_eq(d[i], want_rows[i], "rows: element %d", i);
    grad_at(c_reduce_max_cols, 2, s34, x34, d);
    double want_cols[12] = {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0};
    for (int i = 0; i < 12; i++)
        cr_assert_eq(d[i], want_cols[i], "cols: element %d", i);
    double x34b[12] = {1, -2, 5, 2, 7, 7, -2, 7, 0, 3, -1, 3}; /* min -2 at 1 and 6 */
    grad_at(c_reduce_min_all, 2, s34, x34b, d);
    for (int i = 0; i < 12; i++)
        cr_assert_eq(d[i], i == 1 ? 1.0 : 0.0, "min: element %d", i);
    /* max pooling: a 2x2 window of equal values routes to its first cell */
    int64_t s4[4] = {1, 2, 2, 1};
    grad_at(c_maxpool, 4, s4, (double[]){3, 3, 3, 3}, d);
    cr_assert(d[0] == 1 && d[1] == 0 && d[2] == 0 && d[3] == 0);
}

/* ---------------------------------------------------------------- zero and accumulated grads */

Test(autodiff_api, unrelated_nodes_get_zero_constants)
{
    sx_rng r;
    sx_rng_seed(&r, 5);
    for (int mode = 0; mode < 2; mode++) {
        sx_cg_graph *g = graph_new((sx_cg_mode)mode);
        int64_t s[2] = {2, 2}, u[3] = {3, 1, 2};
        sx_cg_node *x = rand_input(g, &r, 2, s, -1, 1), *z = rand_input(g, &r, 3, u, -1, 1);
        /* z is made after y's inputs and also after y: ids above y's */
        sx_cg_node *y = total(g, sx_cg_tanh(g, x));
        sx_cg_node *late = sx_cg_sin(g, z);
        sx_cg_node *xs[3] = {z, x, late}, *gs[3];
        cr_assert_eq(sx_ad_grad(g, y, 3, xs, gs), SX_OK, "%s", sx_last_error());
        for (int i = 0; i < 3; i += 2) {
            cr_assert_eq(sx_cg_node_op(gs[i]), SX_OP_CONST);
            cr_assert(sx_shape_equal(sx_cg_node_rank(gs[i]), sx_cg_node_shape(gs[i]),
                                     sx_cg_node_rank(xs[i]), sx_cg_node_shape(xs[i])));
            const sx_tensor *d = eval(g, gs[i]);
            for (int64_t k = 0; k < d->size; k++)
                cr_assert_eq(sx_tensor_get(d, k), 0.0);
        }
        const sx_tensor *d = eval(g, gs[1]);
        for (int64_t k = 0; k < 4; k++) {
            double t = tanh(sx_tensor_get(sx_cg_value(x), k));
            cr_assert_float_eq(sx_tensor_get(d, k), 1 - t * t, 1e-15);
        }
        sx_cg_graph_free(g);
    }
}

Test(autodiff_api, shared_nodes_accumulate)
{
    /* y = sum(x * x + sin(x) * x): dy/dx = 2x + cos(x) x + sin(x); also with respect to an
     * intermediate node and to y itself */
    sx_rng r;
    sx_rng_seed(&r, 6);
    sx_cg_graph *g = graph_new(SX_CG_LAZY);
    int64_t s[1] = {5};
    sx_cg_node *x = rand_input(g, &r, 1, s, -2, 2), *sx = sx_cg_sin(g, x);
    sx_cg_node *y = total(g, sx_cg_add(g, sx_cg_mul(g, x, x), sx_cg_mul(g, sx, x)));
    sx_cg_node *xs[3] = {x, sx, y}, *gs[3];
    cr_assert_eq(sx_ad_grad(g, y, 3, xs, gs), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(g, 3, gs), SX_OK, "%s", sx_last_error());
    for (int64_t k = 0; k < 5; k++) {
        double v = sx_tensor_get(sx_cg_value(x), k);
        cr_assert_float_eq(sx_tensor_get(sx_cg_value(gs[0]), k), 2 * v + cos(v) * v + sin(v),
                           1e-14);
        cr_assert_float_eq(sx_tensor_get(sx_cg_value(gs[1]), k), v, 1e-15);
    }
    cr_assert_eq(sx_tensor_get(sx_cg_value(gs[2]), 0), 1.0);
    sx_cg_graph_free(g);
}

/* ---------------------------------------------------------------- unused branches */

/* y = sum(tanh^depth_a(a)) + sum(exp(sin^depth_b(b))): returns y; a's and b's branch nodes are
 * recorded as ids in [*b_lo, *b_hi) for b's branch. */
static sx_cg_node *two_branches(sx_cg_graph *g, sx_rng *r, int depth_b, sx_cg_node **a,
                                int64_t *b_lo, int64_t *b_hi)
{
    int64_t s[2] = {3, 4};
    *a = rand_input(g, r, 2, s, -1, 1);
    sx_cg_node *ta = *a;
    for (int i = 0; i < 4; i++)
        ta = sx_cg_tanh(g, sx_cg_mul_scalar(g, ta, 1.5));
    sx_cg_node *sa = total(g, ta);
    *b_lo = sx_cg_graph_size(g);
    sx_cg_node *tb = rand_input(g, r, 2, s, -1, 1);
    for (int i = 0; i < depth_b; i++)
        tb = sx_cg_sin(g, tb);
    sx_cg_node *sb = total(g, sx_cg_exp(g, tb));
    *b_hi = sx_cg_graph_size(g);
    return sx_cg_add(g, sa, sb);
}

Test(autodiff_api, only_on_path_nodes_get_gradients)
{
    int64_t added[2];
    for (int v = 0; v < 2; v++) {
        sx_rng r;
        sx_rng_seed(&r, 7);
        sx_cg_graph *g = graph_new(SX_CG_LAZY);
        sx_cg_node *a, *ga;
        int64_t b_lo, b_hi;
        sx_cg_node *y = two_branches(g, &r, v == 0 ? 3 : 40, &a, &b_lo, &b_hi);
        int64_t before = sx_cg_graph_size(g);
        cr_assert_eq(sx_ad_grad(g, y, 1, &a, &ga), SX_OK, "%s", sx_last_error());
        added[v] = sx_cg_graph_size(g) - before;
        /* no gradient node reads a node of branch b */
        for (int64_t id = before; id < sx_cg_graph_size(g); id++) {
            sx_cg_node *n = sx_cg_graph_node(g, id);
            for (int k = 0; n != NULL && k < sx_cg_node_n_inputs(n); k++) {
                int64_t in = sx_cg_node_id(sx_cg_node_input(n, k));
                cr_assert(in < b_lo || in >= b_hi, "gradient node %lld reads branch-b node %lld",
                          (long long)id, (long long)in);
            }
        }
        /* evaluating the gradient computes nothing of branch b */
        eval(g, ga);
        for (int64_t id = b_lo; id < b_hi; id++) {
            sx_cg_node *n = sx_cg_graph_node(g, id);
            if (n != NULL && sx_cg_node_op(n) != SX_OP_INPUT)
                cr_assert_null(sx_cg_value(n), "branch-b node %lld was computed", (long long)id);
        }
        sx_cg_graph_free(g);
    }
    /* the cost does not depend on the unused branch's size */
    cr_assert_eq(added[0], added[1], "%lld vs %lld nodes", (long long)added[0],
                 (long long)added[1]);
    /* and is small: per tanh layer about 4 nodes (1 - y^2, times G, times 1.5), plus the seed */
    cr_assert_leq(added[0], 4 * 6 + 4, "%lld nodes for a 4-layer branch", (long long)added[0]);
}

/* ---------------------------------------------------------------- jacobian, hvp, hessian */

Test(autodiff_api, jacobian_shape_and_rows)
{
    /* y (2,3) = x[j] * w (elementwise over a broadcast) for x (4): J (6,4); row i is the vjp of
     * the unit seed e_i */
    sx_rng r;
    sx_rng_seed(&r, 8);
    sx_cg_graph *g = graph_new(SX_CG_LAZY);
    int64_t xs[1] = {4}, ws[2] = {2, 3}, one[2] = {1, 1};
    sx_cg_node *x = rand_input(g, &r, 1, xs, -1, 1), *w = rand_input(g, &r, 2, ws, -1, 1);
    sx_cg_node *y =
        sx_cg_mul(g, sx_cg_exp(g, w), sx_cg_reshape(g, total(g, sx_cg_sqr(g, x)), 2, one));
    sx_cg_node *j = NULL;
    cr_assert_eq(sx_ad_jacobian(g, y, x, &j), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_node_rank(j), 2);
    cr_assert_eq(sx_cg_node_shape(j)[0], 6);
    cr_assert_eq(sx_cg_node_shape(j)[1], 4);
    const sx_tensor *jv = eval(g, j);
    for (int i = 0; i < 6; i++)
        for (int k = 0; k < 4; k++) {
            double want =
                exp(sx_tensor_get(sx_cg_value(w), i)) * 2 * sx_tensor_get(sx_cg_value(x), k);
            cr_assert_float_eq(sx_tensor_get(jv, i * 4 + k), want, 1e-14, "J(%d,%d)", i, k);
        }
    /* a scalar y gives a (1,k) Jacobian: the gradient as a row */
    sx_cg_node *j1 = NULL;
    cr_assert_eq(sx_ad_jacobian(g, total(g, y), x, &j1), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_node_shape(j1)[0], 1);
    cr_assert_eq(sx_cg_node_shape(j1)[1], 4);
    /* more than 64 rows (concat is done in groups) */
    int64_t big[1] = {70};
    sx_cg_node *xb = rand_input(g, &r, 1, big, -1, 1), *jb = NULL;
    cr_assert_eq(sx_ad_jacobian(g, sx_cg_sin(g, xb), xb, &jb), SX_OK, "%s", sx_last_error());
    const sx_tensor *jbv = eval(g, jb);
    for (int i = 0; i < 70; i++)
        for (int k = 0; k < 70; k++)
            cr_assert_float_eq(sx_tensor_get(jbv, i * 70 + k),
                               i == k ? cos(sx_tensor_get(sx_cg_value(xb), i)) : 0.0, 1e-15);
    sx_cg_graph_free(g);
}

Test(autodiff_api, hvp_equals_hessian_times_v)
{
    /* f(x) = sum(sin(x) x^2) + (sum x)^3 + sum(x[i] x[i+1 mod n]) via a permuted copy */
    sx_rng r;
    sx_rng_seed(&r, 9);
    for (int mode = 0; mode < 2; mode++) {
        sx_cg_graph *g = graph_new((sx_cg_mode)mode);
        int64_t s[2] = {5, 1}, s1[1] = {5};
        sx_cg_node *x = rand_input(g, &r, 2, s, -1, 1), *v = rand_input(g, &r, 2, s, -1, 1);
        sx_slice rot[2] = {{1, SX_SLICE_END, 1}, SX_SLICE_ALL}, head[2] = {{0, 1, 1}, SX_SLICE_ALL};
        sx_cg_node *parts[2] = {sx_cg_slice(g, x, rot), sx_cg_slice(g, x, head)};
        sx_cg_node *shifted = sx_cg_concat(g, 2, parts, 0);
        sx_cg_node *f =
            sx_cg_add(g,
                      sx_cg_add(g, total(g, sx_cg_mul(g, sx_cg_sin(g, x), sx_cg_sqr(g, x))),
                                sx_cg_pow(g, total(g, x), sx_cg_scalar(g, 3))),
                      total(g, sx_cg_mul(g, x, shifted)));
        sx_cg_node *hv = NULL, *h = NULL;
        cr_assert_eq(sx_ad_hvp(g, f, x, v, &hv), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_ad_hessian(g, f, x, &h), SX_OK, "%s", sx_last_error());
        cr_assert(sx_shape_equal(sx_cg_node_rank(hv), sx_cg_node_shape(hv), 2, s));
        sx_cg_node *hv2 = sx_cg_matmul(g, h, sx_cg_reshape(g, v, 1, s1), false, false);
        (void)hv2;
        int64_t hs[2] = {5, 5};
        cr_assert(sx_shape_equal(sx_cg_node_rank(h), sx_cg_node_shape(h), 2, hs));
        sx_cg_node *hm = sx_cg_matmul(g, h, v, false, false);
        sx_cg_node *outs[2] = {hv, hm};
        cr_assert_eq(sx_cg_eval(g, 2, outs), SX_OK, "%s", sx_last_error());
        cr_assert(tu_close(sx_cg_value(hv), sx_cg_value(hm), 1e-12, 1e-12), "mode %d", mode);
        /* and the Hessian itself, in closed form:
         * diag: 2 sin x + 4 x cos x - x^2 sin x; everywhere 6 sum(x); +1 for cyclic neighbours */
        const sx_tensor *hvv = sx_cg_value(h), *xv = sx_cg_value(x);
        double sum = 0;
        for (int i = 0; i < 5; i++)
            sum += sx_tensor_get(xv, i);
        for (int i = 0; i < 5; i++)
            for (int k = 0; k < 5; k++) {
                double xi = sx_tensor_get(xv, i), want = 6 * sum;
                if (i == k)
                    want += 2 * sin(xi) + 4 * xi * cos(xi) - xi * xi * sin(xi);
                if ((i + 1) % 5 == k || (k + 1) % 5 == i)
                    want += 1;
                cr_assert_float_eq(sx_tensor_get(hvv, i * 5 + k), want, 1e-12, "H(%d,%d)", i, k);
            }
        sx_cg_graph_free(g);
    }
}

/* ---------------------------------------------------------------- eager and lazy */

/* A small network-like function of (x, w, b): sum(softmax(tanh(x w + b)) * log1p(x w ^ 2)). */
static void network(sx_cg_graph *g, uint64_t seed, sx_cg_node *leaves[3], sx_cg_node **loss)
{
    sx_rng r;
    sx_rng_seed(&r, seed);
    int64_t xs[2] = {4, 3}, ws[2] = {3, 5}, bs[1] = {5};
    sx_tensor *wt = tu_rand(&r, SX_F64, 2, ws, -1, 1), *bt = tu_rand(&r, SX_F64, 1, bs, -1, 1);
    leaves[0] = rand_input(g, &r, 2, xs, -1, 1);
    leaves[1] = sx_cg_param(g, "w", wt);
    leaves[2] = sx_cg_param(g, "b", bt);
    sx_cg_node *z = sx_cg_matmul(g, leaves[0], leaves[1], false, false);
    sx_cg_node *h = sx_cg_softmax(g, sx_cg_tanh(g, sx_cg_add(g, z, leaves[2])), -1);
    *loss = total(g, sx_cg_mul(g, h, sx_cg_log1p(g, sx_cg_sqr(g, z))));
    sx_tensor_free(wt);
    sx_tensor_free(bt);
}

Test(autodiff_api, eager_and_lazy_agree)
{
    sx_cg_graph *gl = graph_new(SX_CG_LAZY), *ge = graph_new(SX_CG_EAGER);
    sx_cg_node *ll[3], *le[3], *yl, *ye, *dl[3], *de[3];
    network(gl, 10, ll, &yl);
    network(ge, 10, le, &ye);
    cr_assert_eq(sx_ad_grad(gl, yl, 3, ll, dl), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ad_grad(ge, ye, 3, le, de), SX_OK, "%s", sx_last_error());
    /* eager: values exist at once; lazy: only after eval */
    for (int i = 0; i < 3; i++) {
        cr_assert_not_null(sx_cg_value(de[i]), "eager gradient %d has no value", i);
        cr_assert_null(sx_cg_value(dl[i]), "lazy gradient %d computed before eval", i);
    }
    cr_assert_eq(sx_cg_eval(gl, 3, dl), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < 3; i++)
        cr_assert(tu_close(sx_cg_value(de[i]), sx_cg_value(dl[i]), 1e-14, 1e-14), "leaf %d", i);
    cr_assert_eq(sx_cg_graph_size(gl), sx_cg_graph_size(ge), "same graphs");
    /* a lazy gradient follows new input values */
    sx_rng r;
    sx_rng_seed(&r, 11);
    sx_tensor *x2 = tu_rand(&r, SX_F64, 2, sx_cg_node_shape(ll[0]), -1, 1);
    cr_assert_eq(sx_cg_input_set(gl, ll[0], x2, SX_CG_COPY), SX_OK);
    cr_assert_eq(sx_cg_input_set(ge, le[0], x2, SX_CG_COPY), SX_OK);
    cr_assert_eq(sx_cg_eval(gl, 3, dl), SX_OK);
    cr_assert_eq(sx_cg_eval(ge, 3, de), SX_OK);
    for (int i = 0; i < 3; i++)
        cr_assert(tu_close(sx_cg_value(de[i]), sx_cg_value(dl[i]), 1e-14, 1e-14), "leaf %d", i);
    sx_tensor_free(x2);
    sx_cg_graph_free(gl);
    sx_cg_graph_free(ge);
}

/* ---------------------------------------------------------------- out of memory */

/* The functions differentiated under allocation failures: a tanh layer, and a sum of linalg
 * ops of one symmetric positive definite A (every linalg rule's nodes and masks). */
static sx_status oom_build(sx_cg_graph *g, int which, sx_cg_node **leaves, int *n, sx_cg_node **y)
{
    static const double spd[9] = {4, 1, 0.5, 1, 3, 0.2, 0.5, 0.2, 2};
    sx_rng r;
    sx_rng_seed(&r, 12);
    int64_t xs[2] = {3, 2}, ws[2] = {2, 2}, as[2] = {3, 3};
    sx_tensor *xt = NULL, *wt = NULL;
    sx_status s = SX_OK;
    if (which == 0) {
        s = sx_tensor_new(SX_F64, 2, xs, &xt);
        if (s == SX_OK)
            s = sx_tensor_new(SX_F64, 2, ws, &wt);
        if (s == SX_OK)
            s = sx_tensor_rand_uniform(xt, &r, -1, 1);
        if (s == SX_OK)
            s = sx_tensor_rand_uniform(wt, &r, -1, 1);
        if (s == SX_OK) {
            leaves[0] = sx_cg_param(g, "x", xt);
            leaves[1] = sx_cg_param(g, "w", wt);
            *n = 2;
            *y = total(g, sx_cg_tanh(g, sx_cg_matmul(g, leaves[0], leaves[1], false, false)));
        }
    } else {
        s = sx_tensor_from_doubles(SX_F64, 2, as, spd, 9, &xt);
        if (s == SX_OK) {
            sx_cg_node *a = leaves[0] = sx_cg_param(g, "a", xt);
            *n = 1;
            sx_cg_node *terms[9] = {total(g, sx_cg_cholesky(g, a)),
                                    total(g, sx_cg_sin(g, sx_cg_eigh_v(g, a))),
                                    total(g, sx_cg_eigh_w(g, a)),
                                    total(g, sx_cg_svd_s(g, a)),
                                    total(g, sx_cg_qr_q(g, a)),
                                    total(g, sx_cg_qr_r(g, a)),
                                    total(g, sx_cg_inv(g, a)),
                                    sx_cg_add(g, sx_cg_det(g, a), sx_cg_logdet(g, a)),
                                    total(g, sx_cg_solve(g, a, sx_cg_sqr(g, a)))};
            *y = terms[0];
            for (int i = 1; i < 9; i++)
                *y = sx_cg_add(g, *y, terms[i]);
        }
    }
    sx_tensor_free(xt);
    sx_tensor_free(wt);
    if (s == SX_OK && *y == NULL)
        s = sx_cg_graph_status(g);
    return s;
}

Test(autodiff_api, out_of_memory_at_every_allocation)
{
    for (int which = 0; which < 2; which++)
        for (int mode = 0; mode < 2; mode++) {
            long k;
            for (k = 0;; k++) {
                tu_fail_after(k);
                sx_cg_graph *g = NULL;
                sx_status s = sx_cg_graph_new((sx_cg_mode)mode, SX_F64, &g);
                sx_cg_node *leaves[2] = {0}, *y = NULL, *d[2] = {SENTINEL, SENTINEL};
                int n = 0;
                if (s == SX_OK)
                    s = oom_build(g, which, leaves, &n, &y);
                if (s == SX_OK) {
                    s = sx_ad_grad(g, y, n, leaves, d);
                    if (s != SX_OK)
                        cr_assert(d[0] == NULL && (n < 2 || d[1] == NULL),
                                  "k=%ld: outputs not NULL", k);
                }
                if (s == SX_OK && mode == SX_CG_LAZY)
                    s = sx_cg_eval(g, n, d);
                sx_cg_graph_free(g);
                long live = tu_live_allocs();
                tu_fail_reset();
                cr_assert_eq(live, 0, "function %d mode %d k=%ld leaked %ld allocations", which,
                             mode, k, live);
                if (s == SX_OK)
                    break;
                cr_assert_eq(s, SX_E_NOMEM, "function %d mode %d k=%ld: %s: %s", which, mode, k,
                             sx_status_str(s), sx_last_error());
                cr_assert_lt(k, 20000);
            }
            cr_assert_gt(k, 10, "mode %d: the build needs only %ld allocations?", mode, k);
        }
}

/* Gradient nodes belong to the scope of the node they differentiate; the caller's scope is
 * restored afterwards. */
Test(autodiff_api, gradient_nodes_take_the_forward_scope)
{
    sx_cg_graph *g = graph_new(SX_CG_LAZY);
    int64_t s[2] = {2, 3};
    sx_rng r;
    sx_rng_seed(&r, 5);
    sx_cg_node *x = rand_input(g, &r, 2, s, -1, 1);
    cr_assert_eq(sx_cg_scope_set(g, "first"), SX_OK);
    sx_cg_node *a = sx_cg_sin(g, x);
    cr_assert_eq(sx_cg_scope_set(g, "second"), SX_OK);
    sx_cg_node *y = sx_cg_sum(g, sx_cg_sqr(g, a), SX_AXES_ALL, false);
    cr_assert_eq(sx_cg_scope_set(g, "caller"), SX_OK);
    int64_t before = sx_cg_graph_size(g);
    sx_cg_node *gx = NULL;
    cr_assert_eq(sx_ad_grad(g, y, 1, &x, &gx), SX_OK, "%s", sx_last_error());
    cr_assert_str_eq(sx_cg_scope_get(g), "caller");
    /* sin's rule (cos(x) * adjoint) runs in scope "first": the final gradient node is there */
    cr_assert_str_eq(sx_cg_node_scope(gx), "first");
    int firsts = 0, seconds = 0;
    for (int64_t i = before; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        if (n == NULL)
            continue;
        firsts += strcmp(sx_cg_node_scope(n), "first") == 0;
        seconds += strcmp(sx_cg_node_scope(n), "second") == 0;
    }
    cr_assert(firsts > 0 && seconds > 0, "first %d second %d", firsts, seconds);
    sx_cg_graph_free(g);
}

/* ---------------------------------------------------------------- regressions */

/* A node holding the values v (shape given): an input, or a parameter when `param`. */
static sx_cg_node *leaf_of(sx_cg_graph *g, const char *name, int rank, const int64_t *shape,
                           const double *v, bool param)
{
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, rank, shape, v, sx_shape_size(rank, shape), &t),
                 SX_OK, "%s", sx_last_error());
    sx_cg_node *x;
    if (param) {
        x = sx_cg_param(g, name, t);
    } else {
        x = sx_cg_input(g, name, SX_F64, rank, shape);
        cr_assert_not_null(x, "%s", sx_last_error());
        cr_assert_eq(sx_cg_input_set(g, x, t, SX_CG_COPY), SX_OK, "%s", sx_last_error());
    }
    cr_assert_not_null(x, "%s", sx_last_error());
    sx_tensor_free(t);
    return x;
}

static int64_t count_op(const sx_cg_graph *g, sx_cg_op op)
{
    int64_t c = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        c += n != NULL && sx_cg_node_op(n) == op;
    }
    return c;
}

static bool same_shape(const sx_cg_node *a, const sx_cg_node *b)
{
    return sx_shape_equal(sx_cg_node_rank(a), sx_cg_node_shape(a), sx_cg_node_rank(b),
                          sx_cg_node_shape(b));
}

/* Regression: gemm(a, b, c) with an addend c that broadcasts to the product (a bias row, a bias
 * vector, a scalar, a column over a batch): the gradient with respect to c had the product's
 * shape (sum(gemm(a, b, c)) gave dc = [1 1 1 1] for c (1,2), not [2 2]). It is beta G summed to
 * c's shape: every element of c gets beta times the number of result elements it feeds. */
Test(autodiff_api, gemm_addend_that_broadcasts_gets_a_gradient_of_its_shape)
{
    static const struct {
        int ra;
        int64_t a[3];
        int rc;
        int64_t c[2];
    } cases[] = {{2, {2, 3}, 2, {1, 2}}, {2, {2, 3}, 1, {2}},       {2, {2, 3}, 0, {0}},
                 {2, {2, 3}, 2, {2, 1}}, {3, {2, 2, 3}, 2, {2, 1}}, {2, {2, 3}, 2, {2, 2}}};
    const double beta = 1.5;
    sx_rng r;
    sx_rng_seed(&r, 140);
    for (int mode = 0; mode < 2; mode++)
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            sx_cg_graph *g = graph_new(mode ? SX_CG_EAGER : SX_CG_LAZY);
            int64_t bs[2] = {3, 2};
            sx_cg_node *a = rand_input(g, &r, cases[k].ra, cases[k].a, -1, 1);
            sx_cg_node *b = rand_input(g, &r, 2, bs, -1, 1);
            sx_cg_node *c = rand_input(g, &r, cases[k].rc, cases[k].c, -1, 1);
            sx_cg_node *y = sx_cg_gemm(g, a, b, false, false, 0.5, c, beta);
            cr_assert_not_null(y, "%s", sx_last_error());
            sx_cg_node *xs[3] = {a, b, c}, *d[3];
            cr_assert_eq(sx_ad_grad(g, total(g, y), 3, xs, d), SX_OK, "case %zu: %s", k,
                         sx_last_error());
            for (int i = 0; i < 3; i++)
                cr_assert(same_shape(d[i], xs[i]), "case %zu: gradient %d has the wrong shape", k,
                          i);
            const sx_tensor *dc = eval(g, d[2]);
            double feeds = (double)(sx_cg_node_size(y) / sx_cg_node_size(c));
            for (int64_t i = 0; i < dc->size; i++)
                cr_assert_eq(sx_tensor_get(dc, i), beta * feeds, "case %zu: dc[%lld] = %g", k,
                             (long long)i, sx_tensor_get(dc, i));
            sx_cg_graph_free(g);
        }
}

/* The same, further up: with c = log_softmax(z) (1,2) broadcast over a (2,2) product,
 * differentiating failed ("sx_cg_log_softmax_backward: shapes (1,2) and (2,2) differ"). With
 * G = dL/dc = [2 beta, 2 beta]: dz_j = G_j - softmax(z)_j sum(G) = 2 beta - 4 beta s_j. */
Test(autodiff_api, gemm_addend_from_log_softmax_differentiates)
{
    const double beta = -0.75, zv[2] = {0.3, -1.1};
    int64_t as[2] = {2, 3}, bs[2] = {3, 2}, zs[2] = {1, 2};
    sx_rng r;
    sx_rng_seed(&r, 141);
    for (int mode = 0; mode < 2; mode++) {
        sx_cg_graph *g = graph_new(mode ? SX_CG_EAGER : SX_CG_LAZY);
        sx_cg_node *a = rand_input(g, &r, 2, as, -1, 1), *b = rand_input(g, &r, 2, bs, -1, 1);
        sx_cg_node *z = leaf_of(g, "z", 2, zs, zv, false), *dz = NULL;
        sx_cg_node *y = sx_cg_gemm(g, a, b, false, false, 1.0, sx_cg_log_softmax(g, z, 1), beta);
        cr_assert_eq(sx_ad_grad(g, total(g, y), 1, &z, &dz), SX_OK, "%s", sx_last_error());
        cr_assert(same_shape(dz, z));
        const sx_tensor *d = eval(g, dz);
        double e0 = exp(zv[0]), e1 = exp(zv[1]), s[2] = {e0 / (e0 + e1), e1 / (e0 + e1)};
        for (int j = 0; j < 2; j++)
            cr_assert_float_eq(sx_tensor_get(d, j), 2 * beta - 4 * beta * s[j], 1e-14,
                               "dz[%d] = %.17g", j, sx_tensor_get(d, j));
        sx_cg_graph_free(g);
    }
}

/* L = sum(log_softmax(x @ w + bias) * t), x (4,3), w (3,2), bias (2): the gemm-fold pass turns
 * add(matmul(x, w), bias) into a gemm whose addend broadcasts. Leaves: x, w, bias. */
static sx_cg_node *dense_loss(sx_cg_graph *g, sx_cg_node **leaves)
{
    static const double xv[12] = {0.1, -0.4, 0.7, 1.2, -0.3, 0.5, -0.9, 0.2, 0.05, 0.6, 0.8, -1};
    static const double wv[6] = {0.3, -0.2, 0.9, 0.4, -0.6, 0.1}, bv[2] = {0.25, -0.5};
    static const double tv[8] = {1, 0, 0, 1, 0.5, 0.5, 1, 0};
    int64_t xs[2] = {4, 3}, ws[2] = {3, 2}, bs[1] = {2}, ts[2] = {4, 2};
    leaves[0] = leaf_of(g, "x", 2, xs, xv, false);
    leaves[1] = leaf_of(g, "w", 2, ws, wv, true);
    leaves[2] = leaf_of(g, "bias", 1, bs, bv, true);
    sx_cg_node *t = leaf_of(g, "t", 2, ts, tv, false);
    sx_cg_node *z = sx_cg_add(g, sx_cg_matmul(g, leaves[0], leaves[1], false, false), leaves[2]);
    sx_cg_node *l = total(g, sx_cg_mul(g, sx_cg_log_softmax(g, z, 1), t));
    cr_assert_not_null(l, "%s", sx_last_error());
    return l;
}

/* The gradients of dense_loss in a plain lazy graph (no optimiser), cloned. */
static void dense_reference(sx_tensor **ref)
{
    sx_cg_graph *g = graph_new(SX_CG_LAZY);
    sx_cg_node *leaves[3], *d[3], *l = dense_loss(g, leaves);
    cr_assert_eq(sx_ad_grad(g, l, 3, leaves, d), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(g, 3, d), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sx_tensor_clone(sx_cg_value(d[i]), &ref[i]), SX_OK);
    sx_cg_graph_free(g);
}

/* Regression: optimising first folds the bias into a gemm with a broadcasting addend; the gradients
 * then taken of the optimised graph must have the leaves' shapes and the unoptimised values
 * (the bias gradient had the product's shape). Where the optimiser made ops that have no
 * gradient rule (fused element-wise chains), differentiating refuses with a clear error. */
Test(autodiff_api, optimise_then_differentiate_a_folded_gemm_bias)
{
    sx_tensor *ref[3];
    dense_reference(ref);
    sx_cg_graph *g = graph_new(SX_CG_LAZY);
    sx_cg_node *leaves[3], *d[3], *l = dense_loss(g, leaves);
    cr_assert_eq(sx_cg_optimise(g, 1, &l, NULL, NULL), SX_OK, "%s", sx_last_error());
    cr_assert_eq(count_op(g, SX_OP_ADD), 0, "the bias was not folded into the gemm");
    cr_assert_eq(sx_ad_grad(g, l, 3, leaves, d), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(g, 3, d), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < 3; i++) {
        cr_assert(same_shape(d[i], leaves[i]), "gradient %d has the wrong shape", i);
        cr_assert(tu_close(sx_cg_value(d[i]), ref[i], 1e-13, 1e-14), "gradient %d differs", i);
        sx_tensor_free(ref[i]);
    }
    sx_cg_graph_free(g);
    /* a chain the optimiser fuses: sum(tanh(x @ w + bias) * 2) */
    g = graph_new(SX_CG_LAZY);
    sx_cg_node *x = NULL;
    dense_loss(g, leaves);
    x = sx_cg_add(g, sx_cg_matmul(g, leaves[0], leaves[1], false, false), leaves[2]);
    l = total(g, sx_cg_mul_scalar(g, sx_cg_tanh(g, x), 2.0));
    cr_assert_eq(sx_cg_optimise(g, 1, &l, NULL, NULL), SX_OK, "%s", sx_last_error());
    cr_assert_gt(count_op(g, SX_OP_FUSED), 0);
    d[0] = SENTINEL;
    cr_assert_eq(sx_ad_grad(g, l, 3, leaves, d), SX_E_UNSUPPORTED);
    cr_assert_null(d[0]);
    cr_assert(strstr(sx_last_error(), "fused") && strstr(sx_last_error(), "before optimising"),
              "%s", sx_last_error());
    sx_cg_graph_free(g);
}

/* The folded bias, the other order: differentiate, then optimise the loss and its gradients
 * together (the training path): the gradients keep their values. */
Test(autodiff_api, differentiate_then_optimise_a_folded_gemm_bias)
{
    sx_tensor *ref[3];
    dense_reference(ref);
    sx_cg_graph *g = graph_new(SX_CG_LAZY);
    sx_cg_node *leaves[3], *out[4], *l = dense_loss(g, leaves);
    cr_assert_eq(sx_ad_grad(g, l, 3, leaves, out + 1), SX_OK, "%s", sx_last_error());
    out[0] = l;
    cr_assert_eq(sx_cg_optimise(g, 4, out, NULL, NULL), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(g, 4, out), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < 3; i++) {
        cr_assert(same_shape(out[1 + i], leaves[i]), "gradient %d has the wrong shape", i);
        cr_assert(tu_close(sx_cg_value(out[1 + i]), ref[i], 1e-13, 1e-14), "gradient %d", i);
        sx_tensor_free(ref[i]);
    }
    sx_cg_graph_free(g);
}

/* The vector-Jacobian product of fn at x (shape given) with every seed element `seed`, in a
 * lazy graph, optimised first when `optimise` (then *fused counts maxpool2d_relu_backward nodes).
 */
static void vjp_at(sx_cg_node *(*fn)(sx_cg_graph *, sx_cg_node *), int rank, const int64_t *shape,
                   const double *xs, double seed, bool optimise, double *out, int64_t *fused)
{
    sx_cg_graph *g = graph_new(SX_CG_LAZY);
    sx_cg_node *x = leaf_of(g, "x", rank, shape, xs, true), *y = fn(g, x), *gx = NULL;
    cr_assert_not_null(y, "%s", sx_last_error());
    sx_tensor *st = NULL;
    cr_assert_eq(sx_tensor_full(SX_F64, sx_cg_node_rank(y), sx_cg_node_shape(y), seed, &st), SX_OK);
    sx_cg_node *s = sx_cg_const(g, st);
    sx_tensor_free(st);
    cr_assert_eq(sx_ad_vjp(g, y, s, 1, &x, &gx), SX_OK, "%s", sx_last_error());
    if (optimise)
        cr_assert_eq(sx_cg_optimise(g, 1, &gx, NULL, NULL), SX_OK, "%s", sx_last_error());
    if (fused != NULL)
        *fused = count_op(g, SX_OP_MAXPOOL2D_RELU_BACKWARD);
    const sx_tensor *d = eval(g, gx);
    for (int64_t i = 0; i < d->size; i++)
        out[i] = sx_tensor_get(d, i);
    sx_cg_graph_free(g);
}

static sx_cg_node *c_sqrt_relu(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_sqrt(g, sx_cg_relu(g, x));
}
static sx_cg_node *c_max0(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_max(g, x, sx_cg_scalar_like(g, x, 0.0));
}
static sx_cg_node *c_0max(sx_cg_graph *g, sx_cg_node *x) /* x second: it wins the ties' loss */
{
    return sx_cg_max(g, sx_cg_scalar_like(g, x, 0.0), x);
}
static sx_cg_node *c_min0(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_min(g, x, sx_cg_scalar_like(g, x, 0.0));
}
static sx_cg_node *c_0min(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_min(g, sx_cg_scalar_like(g, x, 0.0), x);
}
static sx_cg_node *c_reduce_min_rows(sx_cg_graph *g, sx_cg_node *x)
{
    return sx_cg_reduce_min(g, x, SX_AXIS(1), false);
}
static sx_cg_node *c_pool_relu(sx_cg_graph *g, sx_cg_node *x)
{
    sx_pool2d_params p = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    return sx_cg_maxpool2d(g, sx_cg_relu(g, x), &p);
}
static sx_cg_node *c_pool_relu_3x3(sx_cg_graph *g, sx_cg_node *x) /* the kernel's general path */
{
    sx_pool2d_params p = {
        .kernel_h = 3, .kernel_w = 3, .stride_h = 3, .stride_w = 3, .padding = SX_PAD_VALID};
    return sx_cg_maxpool2d(g, sx_cg_relu(g, x), &p);
}
/* maxpool2d_backward(x0, x) for a fixed x0 (4,4): differentiated with respect to its dy = x */
static sx_cg_node *c_pool_backward(sx_cg_graph *g, sx_cg_node *x)
{
    static const double x0[16] = {1, 5, 2, 0, 3, 4, 9, 8, 7, 6, 5, 4, 0, 1, 2, 3};
    int64_t s[4] = {1, 4, 4, 1};
    sx_pool2d_params p = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    return sx_cg_maxpool2d_backward(g, leaf_of(g, "x0", 4, s, x0, false), x, &p);
}

/* Regression: relu's gradient multiplied G by the mask, so an infinite G gave NaN where the
 * gradient is 0: d/dx sum(sqrt(relu(x))) at (-1, 2, -3) was (nan, 0.354, nan); PyTorch gives (0,
 * 0.354, 0). Every rule that routes a gradient by a choice selects it (where(mask, G, 0)): relu,
 * max and min (either argument), reduce_max/min, max pooling through relu (unfused, and the
 * pool-relu pass's kernel, in its 2x2 and general paths), and the dy-gradient of
 * maxpool2d_backward. G = inf or NaN must give exact zeros where the choice went elsewhere. */
/* the element that a choice routed G to holds G (inf, or NaN: k) */
#define WINS(v) (k ? isnan(v) : (v) == HUGE_VAL)

Test(autodiff_api, choices_keep_an_infinite_gradient_out_of_their_zeros)
{
    int64_t s3[1] = {3};
    double x3[3] = {-1, 2, -3}, d[36];
    grad_at(c_sqrt_relu, 1, s3, x3, d);
    cr_assert(d[0] == 0 && d[2] == 0, "%g %g %g", d[0], d[1], d[2]);
    cr_assert_float_eq(d[1], 0.25 * sqrt(2.0), 1e-15);
    for (int opt = 0; opt < 2; opt++)
        for (int k = 0; k < 2; k++) {
            double seed = k ? (double)NAN : HUGE_VAL;
            sx_cg_node *(*fns[5])(sx_cg_graph *, sx_cg_node *) = {c_relu, c_max0, c_0max, c_min0,
                                                                  c_0min};
            for (int f = 0; f < 5; f++) {
                vjp_at(fns[f], 1, s3, x3, seed, opt, d, NULL);
                bool pos = f < 3; /* the x > 0 element wins for relu and max, x < 0 for min */
                for (int i = 0; i < 3; i++) {
                    bool wins = (x3[i] > 0) == pos;
                    cr_assert(wins ? WINS(d[i]) : d[i] == 0, "fn %d seed %g opt %d: d[%d] = %g", f,
                              seed, opt, i, d[i]);
                }
            }
            /* reductions: the first extreme of each row gets G, the others exact zeros */
            int64_t s34[2] = {3, 4};
            double x34[12] = {1, 5, 5, 2, 7, 7, 7, 7, 0, 3, -1, 3};
            vjp_at(c_reduce_max_rows, 2, s34, x34, seed, opt, d, NULL);
            for (int i = 0; i < 12; i++)
                cr_assert(i == 1 || i == 4 || i == 9 ? WINS(d[i]) : d[i] == 0,
                          "reduce_max seed %g: d[%d] = %g", seed, i, d[i]);
            vjp_at(c_reduce_min_rows, 2, s34, x34, seed, opt, d, NULL);
            for (int i = 0; i < 12; i++)
                cr_assert(i == 0 || i == 4 || i == 10 ? WINS(d[i]) : d[i] == 0,
                          "reduce_min seed %g: d[%d] = %g", seed, i, d[i]);
            /* max pooling through relu: a window with nothing positive gets zeros */
            int64_t s4[4] = {1, 4, 4, 1}, s6[4] = {1, 6, 6, 1};
            double x4[16] = {-1, -2, 3, -1, -4, -1, 0.5, 2, 1, 0, 0, 0, 2, 1, 0, 0};
            int64_t fused = 0;
            vjp_at(c_pool_relu, 4, s4, x4, seed, opt, d, &fused);
            cr_assert_eq(fused, opt, "the pool-relu pass did not run");
            for (int i = 0; i < 16; i++) /* winners: 2 (3) and 12 (2) */
                cr_assert(i == 2 || i == 12 ? WINS(d[i]) : d[i] == 0,
                          "pool relu seed %g opt %d: d[%d] = %g", seed, opt, i, d[i]);
            double x6[36];
            for (int i = 0; i < 36; i++)
                x6[i] = i < 18 ? -1 - i : i == 20 ? 4 : -(double)i;
            vjp_at(c_pool_relu_3x3, 4, s6, x6, seed, opt, d, &fused);
            cr_assert_eq(fused, opt, "the pool-relu pass did not run (3x3)");
            for (int i = 0; i < 36; i++)
                cr_assert(i == 20 ? WINS(d[i]) : d[i] == 0,
                          "pool relu 3x3 seed %g opt %d: d[%d] = %g", seed, opt, i, d[i]);
            /* maxpool2d_backward's dy-gradient reads G at each window's maximum only */
            int64_t s2[4] = {1, 2, 2, 1};
            double dy[4] = {1, 1, 1, 1};
            vjp_at(c_pool_backward, 4, s2, dy, seed, opt, d, NULL);
            for (int i = 0; i < 4; i++)
                cr_assert(WINS(d[i]), "pool backward seed %g: d[%d] = %g", seed, i, d[i]);
        }
}
#undef WINS
