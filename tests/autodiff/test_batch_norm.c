/* Batch norm's gradient rules composed as a network uses them: y = batch_norm(x,
 * batch_norm_stats(x), gamma, beta), optionally followed by relu, differentiates to one
 * batch_norm_dx (the statistics' path inside it, relu's mask read by it and by the sums). Its
 * first and second derivatives with respect to x, gamma and beta must equal those of the
 * primitive-op formula and central finite differences, in f64. */
#include "testutil.h"

#include <math.h>
#include <sx_autodiff.h>

#define EPS 1e-3

typedef struct bn_net {
    sx_cg_graph *g;
    sx_tensor *xt, *gt; /* x's and gamma's values, borrowed by the graph */
    sx_cg_node *x, *gamma, *beta, *loss_fused, *loss_plain;
} bn_net;

/* loss = sum(a (w + a / 2)), a = act(bn(x)) with act relu or none, built from the batch-norm ops
 * and from primitive ops */
static bn_net make_net(int rank, const int64_t *shape, bool relu)
{
    bn_net k;
    sx_rng rng;
    sx_rng_seed(&rng, 5);
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &k.g), SX_OK);
    sx_cg_graph *g = k.g;
    int64_t c = shape[rank - 1];
    unsigned axes = 0;
    for (int i = 0; i < rank - 1; i++)
        axes |= SX_AXIS(i);
    k.xt = tu_rand(&rng, SX_F64, rank, shape, -1, 2);
    k.gt = tu_rand(&rng, SX_F64, 1, &c, 0.5, 1.5);
    sx_tensor *bt = tu_rand(&rng, SX_F64, 1, &c, -0.5, 0.5);
    sx_tensor *wt = tu_rand(&rng, SX_F64, rank, shape, -1, 1);
    k.x = sx_cg_param_borrow(g, "x", k.xt);
    k.gamma = sx_cg_param_borrow(g, "gamma", k.gt);
    k.beta = sx_cg_param(g, "beta", bt);
    sx_cg_node *w = sx_cg_const(g, wt);
    sx_tensor_free(bt);
    sx_tensor_free(wt);
    sx_cg_node *yf = sx_cg_batch_norm(g, k.x, sx_cg_batch_norm_stats(g, k.x), k.gamma, k.beta, EPS);
    sx_cg_node *mean = sx_cg_mean(g, k.x, axes, false);
    sx_cg_node *var = sx_cg_mean(g, sx_cg_sqr(g, sx_cg_sub(g, k.x, mean)), axes, false);
    sx_cg_node *xhat = sx_cg_mul(g, sx_cg_sub(g, k.x, mean),
                                 sx_cg_rsqrt(g, sx_cg_add(g, var, sx_cg_scalar(g, EPS))));
    sx_cg_node *yp = sx_cg_add(g, sx_cg_mul(g, xhat, k.gamma), k.beta);
    if (relu) {
        yf = sx_cg_relu(g, yf);
        yp = sx_cg_relu(g, yp);
    }
    /* sum(a (w + a / 2)): the output gradient w + a depends on x, gamma and beta */
    sx_cg_node *half = sx_cg_scalar(g, 0.5);
    k.loss_fused =
        sx_cg_sum(g, sx_cg_mul(g, yf, sx_cg_add(g, w, sx_cg_mul(g, yf, half))), SX_AXES_ALL, false);
    k.loss_plain =
        sx_cg_sum(g, sx_cg_mul(g, yp, sx_cg_add(g, w, sx_cg_mul(g, yp, half))), SX_AXES_ALL, false);
    cr_assert_not_null(k.loss_fused, "%s", sx_last_error());
    cr_assert_not_null(k.loss_plain, "%s", sx_last_error());
    return k;
}

static void free_net(bn_net *k)
{
    sx_cg_graph_free(k->g);
    sx_tensor_free(k->xt);
    sx_tensor_free(k->gt);
}

static double scalar(sx_cg_graph *g, sx_cg_node *n)
{
    cr_assert_eq(sx_cg_eval(g, 1, &n), SX_OK, "%s", sx_last_error());
    return SX_F64P(sx_cg_value(n))[0];
}

static int64_t count_op(sx_cg_graph *g, sx_cg_op op, int n_in)
{
    int64_t k = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        k += n != NULL && sx_cg_node_op(n) == op && sx_cg_node_n_inputs(n) == n_in;
    }
    return k;
}

/* Central differences of node f (a scalar) in leaf t's element i (t's values `tv`). */
static double diff(sx_cg_graph *g, sx_cg_node *f, sx_cg_node *t, sx_tensor *tv, int64_t i)
{
    double keep = SX_F64P(tv)[i], h = 1e-6;
    SX_F64P(tv)[i] = keep + h;
    cr_assert_eq(sx_cg_invalidate(g, t), SX_OK);
    double up = scalar(g, f);
    SX_F64P(tv)[i] = keep - h;
    cr_assert_eq(sx_cg_invalidate(g, t), SX_OK);
    double down = scalar(g, f);
    SX_F64P(tv)[i] = keep;
    cr_assert_eq(sx_cg_invalidate(g, t), SX_OK);
    return (up - down) / (2 * h);
}

/* first order: fused = plain = differences; second order: the gradient of
 * L2 = sum(dL/dx u) + sum(dL/dgamma v) with respect to x and gamma, fused = plain = differences
 * of L2 (the fused rule of batch_norm_dx and of the masked sums against primitive ops' rules) */
static void check(int rank, const int64_t *shape, bool relu)
{
    bn_net k = make_net(rank, shape, relu);
    sx_cg_graph *g = k.g;
    sx_cg_node *wrt[3] = {k.x, k.gamma, k.beta}, *gf[3], *gp[3];
    cr_assert_eq(sx_ad_grad(g, k.loss_fused, 3, wrt, gf), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ad_grad(g, k.loss_plain, 3, wrt, gp), SX_OK, "%s", sx_last_error());
    /* the whole dx is one op; relu's mask goes into it and into the sums */
    cr_assert_eq(count_op(g, SX_OP_NORM_DX, relu ? 6 : 5), 1);
    cr_assert_eq(count_op(g, SX_OP_NORM_SUMS, relu ? 4 : 3), 1);
    cr_assert_eq(sx_cg_eval(g, 3, gf), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(g, 3, gp), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < 3; i++)
        cr_assert(tu_close(sx_cg_value(gf[i]), sx_cg_value(gp[i]), 1e-9, 1e-10), "gradient %d", i);
    const sx_tensor *dx = sx_cg_value(gf[0]);
    for (int64_t i = 0; i < k.xt->size; i += k.xt->size / 5 + 1) {
        double fd = diff(g, k.loss_fused, k.x, k.xt, i), an = SX_F64P(dx)[i];
        cr_assert(fabs(fd - an) <= 1e-6 * (1 + fabs(an)), "dx[%lld]: %.10g, differences %.10g",
                  (long long)i, an, fd);
    }
    /* second order */
    sx_rng rng;
    sx_rng_seed(&rng, 9);
    sx_tensor *ut = tu_rand(&rng, SX_F64, rank, shape, -1, 1);
    sx_tensor *vt = tu_rand(&rng, SX_F64, 1, shape + rank - 1, -1, 1);
    sx_cg_node *u = sx_cg_const(g, ut), *v = sx_cg_const(g, vt);
    sx_tensor_free(ut);
    sx_tensor_free(vt);
    sx_cg_node *l2[2];
    sx_cg_node *const *grads[2] = {gf, gp};
    for (int j = 0; j < 2; j++)
        l2[j] = sx_cg_add(g, sx_cg_sum(g, sx_cg_mul(g, grads[j][0], u), SX_AXES_ALL, false),
                          sx_cg_sum(g, sx_cg_mul(g, grads[j][1], v), SX_AXES_ALL, false));
    sx_cg_node *h2[2][2];
    for (int j = 0; j < 2; j++) {
        cr_assert_eq(sx_ad_grad(g, l2[j], 2, wrt, h2[j]), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_eval(g, 2, h2[j]), SX_OK, "%s", sx_last_error());
    }
    for (int i = 0; i < 2; i++)
        cr_assert(tu_close(sx_cg_value(h2[0][i]), sx_cg_value(h2[1][i]), 1e-8, 1e-9),
                  "second order, input %d", i);
    sx_tensor *tv[2] = {k.xt, k.gt};
    for (int t = 0; t < 2; t++) {
        const sx_tensor *an = sx_cg_value(h2[0][t]);
        for (int64_t i = 0; i < tv[t]->size; i += tv[t]->size / 4 + 1) {
            double fd = diff(g, l2[0], wrt[t], tv[t], i), a = SX_F64P(an)[i];
            cr_assert(fabs(fd - a) <= 1e-5 * (1 + fabs(a)),
                      "second order, input %d [%lld]: %.10g, differences %.10g", t, (long long)i, a,
                      fd);
        }
    }
    free_net(&k);
}

Test(autodiff_batch_norm, fused_first_and_second_order_nhwc)
{
    check(4, (int64_t[]){2, 3, 4, 5}, false);
}

Test(autodiff_batch_norm, fused_with_relu_first_and_second_order_nhwc)
{
    check(4, (int64_t[]){2, 3, 4, 5}, true);
}

Test(autodiff_batch_norm, fused_with_relu_first_and_second_order_dense)
{
    check(2, (int64_t[]){7, 3}, true);
}
