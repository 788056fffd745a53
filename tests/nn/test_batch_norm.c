/* Batch norm as fused graph ops: batch_norm(x, batch_norm_stats(x), gamma, beta) computes
 * what the primitive-op formula computes (as nn/batch_norm.c once built it), and so do
 * its gradients with respect to x, gamma and beta (through both paths into x), which also match
 * central finite differences of the loss. f64 throughout. Inference: a compiled model folds each
 * batch norm's scale into the convolution before it (SX_PASS_BN_FOLD) and predicts what the
 * unfolded eager graph predicts, within a stated bound. */
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <sx_autodiff.h>

#include "nn_impl.h"

#define EPS 1e-3

typedef struct bn_case {
    sx_cg_graph *g;
    sx_tensor *xt; /* x's values, borrowed by the graph (changed for the differences) */
    sx_cg_node *x, *gamma, *beta, *loss_fused, *loss_plain;
} bn_case;

static sx_cg_node *param_rand(sx_cg_graph *g, const char *name, sx_rng *rng, int rank,
                              const int64_t *shape, double lo, double hi)
{
    sx_tensor *t = tu_rand(rng, SX_F64, rank, shape, lo, hi);
    sx_cg_node *p = sx_cg_param(g, name, t);
    sx_tensor_free(t);
    cr_assert_not_null(p, "%s", sx_last_error());
    return p;
}

/* loss = sum(bn(x) * w) for a fixed random w, built both ways */
static bn_case make_case(int rank, const int64_t *shape)
{
    bn_case k;
    sx_rng rng;
    sx_rng_seed(&rng, 77);
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &k.g), SX_OK);
    sx_cg_graph *g = k.g;
    int64_t c = shape[rank - 1];
    unsigned axes = 0;
    for (int i = 0; i < rank - 1; i++)
        axes |= SX_AXIS(i);
    k.xt = tu_rand(&rng, SX_F64, rank, shape, -1, 2);
    k.x = sx_cg_param_borrow(g, "x", k.xt);
    k.gamma = param_rand(g, "gamma", &rng, 1, &c, 0.5, 1.5);
    k.beta = param_rand(g, "beta", &rng, 1, &c, -1, 1);
    sx_tensor *wt = tu_rand(&rng, SX_F64, rank, shape, -1, 1);
    sx_cg_node *w = sx_cg_const(g, wt);
    sx_tensor_free(wt);
    sx_cg_node *yf = sx_cg_batch_norm(g, k.x, sx_cg_batch_norm_stats(g, k.x), k.gamma, k.beta, EPS);
    sx_cg_node *mean = sx_cg_mean(g, k.x, axes, false);
    sx_cg_node *var = sx_cg_mean(g, sx_cg_sqr(g, sx_cg_sub(g, k.x, mean)), axes, false);
    sx_cg_node *xhat = sx_cg_mul(g, sx_cg_sub(g, k.x, mean),
                                 sx_cg_rsqrt(g, sx_cg_add(g, var, sx_cg_scalar(g, EPS))));
    sx_cg_node *yp = sx_cg_add(g, sx_cg_mul(g, xhat, k.gamma), k.beta);
    k.loss_fused = sx_cg_sum(g, sx_cg_mul(g, yf, w), SX_AXES_ALL, false);
    k.loss_plain = sx_cg_sum(g, sx_cg_mul(g, yp, w), SX_AXES_ALL, false);
    cr_assert_not_null(k.loss_fused, "%s", sx_last_error());
    cr_assert_not_null(k.loss_plain, "%s", sx_last_error());
    return k;
}

static double scalar(sx_cg_graph *g, sx_cg_node *n)
{
    cr_assert_eq(sx_cg_eval(g, 1, &n), SX_OK, "%s", sx_last_error());
    return SX_F64P(sx_cg_value(n))[0];
}

static void check(int rank, const int64_t *shape)
{
    bn_case k = make_case(rank, shape);
    sx_cg_graph *g = k.g;
    sx_cg_node *wrt[3] = {k.x, k.gamma, k.beta}, *gf[3], *gp[3];
    cr_assert_eq(sx_ad_grad(g, k.loss_fused, 3, wrt, gf), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ad_grad(g, k.loss_plain, 3, wrt, gp), SX_OK, "%s", sx_last_error());
    double lf = scalar(g, k.loss_fused), lp = scalar(g, k.loss_plain);
    cr_assert(fabs(lf - lp) <= 1e-10 * (1 + fabs(lp)), "loss %.17g vs %.17g", lf, lp);
    cr_assert_eq(sx_cg_eval(g, 3, gf), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(g, 3, gp), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < 3; i++)
        cr_assert(tu_close(sx_cg_value(gf[i]), sx_cg_value(gp[i]), 1e-9, 1e-10), "gradient %d", i);
    /* central differences of the fused loss at a few entries of x */
    sx_tensor *xv = k.xt;
    const sx_tensor *dx = sx_cg_value(gf[0]);
    for (int64_t i = 0; i < xv->size; i += xv->size / 7 + 1) {
        double keep = SX_F64P(xv)[i], h = 1e-6;
        SX_F64P(xv)[i] = keep + h;
        cr_assert_eq(sx_cg_invalidate(g, k.x), SX_OK);
        double up = scalar(g, k.loss_fused);
        SX_F64P(xv)[i] = keep - h;
        cr_assert_eq(sx_cg_invalidate(g, k.x), SX_OK);
        double down = scalar(g, k.loss_fused);
        SX_F64P(xv)[i] = keep;
        cr_assert_eq(sx_cg_invalidate(g, k.x), SX_OK);
        double fd = (up - down) / (2 * h), an = SX_F64P(dx)[i];
        cr_assert(fabs(fd - an) <= 1e-6 * (1 + fabs(an)), "dx[%lld]: %.10g, differences %.10g",
                  (long long)i, an, fd);
    }
    sx_cg_graph_free(g);
    sx_tensor_free(k.xt);
}

Test(nn_batch_norm, fused_ops_match_the_formula_and_differences_nhwc)
{
    check(4, (int64_t[]){3, 4, 5, 6});
}

Test(nn_batch_norm, fused_ops_match_the_formula_and_differences_dense)
{
    check(2, (int64_t[]){9, 4});
}

/* conv (no bias) -> batch norm -> relu, twice (the second with a stride), then a dense head, with
 * random weights and running statistics */
static sx_nn_net *fold_net(sx_dtype dt)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("fold", dt, 3, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){9, 9, 3});
    for (int i = 0; i < 2; i++) {
        sx_nn_conv2d_params cp = sx_nn_conv2d_params_default(6 + 2 * i, 3, 3);
        cp.conv.padding = SX_PAD_SAME;
        cp.conv.stride_h = cp.conv.stride_w = 1 + i;
        cp.bias = false;
        x = sx_nn_conv2d(net, x, &cp);
        x = sx_nn_batch_norm(net, x, NULL);
        x = sx_nn_activation(net, x, SX_ACT_RELU);
    }
    sx_nn_linear(net, sx_nn_flatten(net, x), 5, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_rng r;
    sx_rng_seed(&r, 17);
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            nn_param *p = &net->layers[i]->params[k];
            bool var = strstr(p->name, "running_var") != NULL;
            bool gamma = strstr(p->name, "gamma") != NULL;
            cr_assert_eq(sx_tensor_rand_uniform(p->value, &r,
                                                var     ? 0.2
                                                : gamma ? 0.5
                                                        : -1,
                                                var     ? 3
                                                : gamma ? 2
                                                        : 1),
                         SX_OK);
        }
    return net;
}

/* compiled (folded) against eager (unfolded): f32 within 1e-5 (1 + max |output|) (each output a
 * few roundings of sum |x k s| apart), f64 within 1e-13 of it */
Test(nn_batch_norm, inference_folds_the_scale_into_the_convolution)
{
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = d == 0 ? SX_F32 : SX_F64;
        sx_nn_net *net = fold_net(dt);
        sx_rng r;
        sx_rng_seed(&r, 4);
        int64_t n = 4, xs[4] = {n, 9, 9, 3}, os[2] = {n, 5};
        sx_tensor *x = tu_rand(&r, dt, 4, xs, -1, 1), *a = tu_zeros(dt, 2, os),
                  *b = tu_zeros(dt, 2, os);
        sx_nn_model *m = NULL;
        cr_assert_eq(sx_nn_compile_infer(net, n, &m), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_nn_model_report(m).opt.changed[SX_PASS_BN_FOLD], 2,
                     "both batch norms folded");
        cr_assert_eq(sx_nn_model_predict(m, x, a), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_nn_predict_eager(net, x, b), SX_OK, "%s", sx_last_error());
        double big = 0, worst = 0;
        for (int64_t i = 0; i < b->size; i++)
            big = fmax(big, fabs(sx_tensor_get(b, i)));
        for (int64_t i = 0; i < b->size; i++)
            worst = fmax(worst, fabs(sx_tensor_get(a, i) - sx_tensor_get(b, i)));
        double bound = (dt == SX_F32 ? 1e-5 : 1e-13) * (1 + big);
        cr_log_info("%s: folded vs unfolded: max difference %.3g (bound %.3g)", sx_dtype_name(dt),
                    worst, bound);
        cr_assert(worst <= bound, "%s: max difference %g, bound %g", sx_dtype_name(dt), worst,
                  bound);
        cr_assert_gt(big, 0.1);
        sx_nn_model_free(m);
        sx_tensor_free(x);
        sx_tensor_free(a);
        sx_tensor_free(b);
        sx_nn_net_free(net);
    }
}
