/* A small CNN end to end, in f64: conv2d (SAME, stride 1) + bias -> relu -> maxpool 2x2 ->
 * conv2d (SAME, stride 2) + bias -> relu -> reshape -> matmul + bias -> softmax cross-entropy
 * against one-hot targets -> mean. The gradient of the loss with respect to every parameter
 * (and the input images) matches central finite differences on every element (step 1e-6,
 * tolerance 1e-6 * (1 + |fd|), as the conv rows of the op samples). The data are drawn from a
 * seed chosen so that no pre-activation lies within 1e-3 of 0 and no pooling window has a
 * maximum within 1e-3 of its runner-up, so that no finite-difference step crosses a kink.
 * Eager and lazy graphs give the same gradients. */
#include "testutil.h"

#include <math.h>
#include <sx_autodiff.h>

enum { N = 2, H = 6, W = 6, C = 2, F1 = 3, F2 = 4, CLASSES = 5, N_PARAMS = 7 };
#define MARGIN 1e-3

typedef struct cnn {
    sx_cg_graph *g;
    sx_cg_node *p[N_PARAMS]; /* x (input), k1, b1, k2, b2, w, b3 */
    sx_cg_node *z1, *a1, *z2, *loss;
} cnn;

static const char *param_names[N_PARAMS] = {"x", "k1", "b1", "k2", "b2", "w", "b3"};

static sx_cg_node *param(sx_cg_graph *g, sx_rng *r, const char *name, int rank,
                         const int64_t *shape, double scale)
{
    sx_tensor *t = tu_rand(r, SX_F64, rank, shape, -scale, scale);
    sx_cg_node *p = sx_cg_param(g, name, t);
    sx_tensor_free(t);
    cr_assert_not_null(p, "%s", sx_last_error());
    return p;
}

static void cnn_build(cnn *m, sx_cg_mode mode, uint64_t seed)
{
    sx_rng r;
    sx_rng_seed(&r, seed);
    cr_assert_eq(sx_cg_graph_new(mode, SX_F64, &m->g), SX_OK);
    sx_cg_graph *g = m->g;
    int64_t xs[4] = {N, H, W, C}, k1s[4] = {3, 3, C, F1}, b1s[1] = {F1};
    int64_t k2s[4] = {3, 3, F1, F2}, b2s[1] = {F2}, ws[2] = {2 * 2 * F2, CLASSES},
            b3s[1] = {CLASSES};
    sx_tensor *xt = tu_rand(&r, SX_F64, 4, xs, -1, 1);
    m->p[0] = sx_cg_input(g, "x", SX_F64, 4, xs);
    cr_assert_eq(sx_cg_input_set(g, m->p[0], xt, SX_CG_COPY), SX_OK);
    sx_tensor_free(xt);
    m->p[1] = param(g, &r, "k1", 4, k1s, 0.5);
    m->p[2] = param(g, &r, "b1", 1, b1s, 0.3);
    m->p[3] = param(g, &r, "k2", 4, k2s, 0.5);
    m->p[4] = param(g, &r, "b2", 1, b2s, 0.3);
    m->p[5] = param(g, &r, "w", 2, ws, 0.5);
    m->p[6] = param(g, &r, "b3", 1, b3s, 0.3);
    /* one-hot targets */
    double tv[N * CLASSES] = {0};
    for (int i = 0; i < N; i++)
        tv[i * CLASSES + sx_rng_below(&r, CLASSES)] = 1;
    int64_t ts[2] = {N, CLASSES};
    sx_tensor *tt = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 2, ts, tv, N * CLASSES, &tt), SX_OK);
    sx_cg_node *target = sx_cg_const(g, tt);
    sx_tensor_free(tt);

    sx_conv2d_params same1 = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME},
                     same2 = {.stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME};
    sx_pool2d_params pool = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    m->z1 = sx_cg_add(g, sx_cg_conv2d(g, m->p[0], m->p[1], &same1), m->p[2]); /* (2,6,6,3) */
    m->a1 = sx_cg_relu(g, m->z1);
    sx_cg_node *pooled = sx_cg_maxpool2d(g, m->a1, &pool);                   /* (2,3,3,3) */
    m->z2 = sx_cg_add(g, sx_cg_conv2d(g, pooled, m->p[3], &same2), m->p[4]); /* (2,2,2,4) */
    int64_t flat[2] = {N, 2 * 2 * F2};
    sx_cg_node *h = sx_cg_reshape(g, sx_cg_relu(g, m->z2), 2, flat);
    sx_cg_node *logits = sx_cg_add(g, sx_cg_matmul(g, h, m->p[5], false, false), m->p[6]);
    m->loss = sx_cg_mean(g, sx_cg_softmax_xent(g, logits, target), SX_AXES_ALL, false);
    cr_assert_not_null(m->loss, "%s", sx_last_error());
}

/* Are all pre-activations at least MARGIN from 0, and every pooling window's maximum at least
 * MARGIN above the runner-up (when positive: windows of zeros have relu' = 0 everywhere)? */
static bool away_from_kinks(cnn *m)
{
    sx_cg_node *outs[2] = {m->z1, m->z2};
    cr_assert_eq(sx_cg_eval(m->g, 2, outs), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < 2; i++) {
        const sx_tensor *z = sx_cg_value(outs[i]);
        for (int64_t k = 0; k < z->size; k++)
            if (fabs(sx_tensor_get(z, k)) < MARGIN)
                return false;
    }
    const sx_tensor *z1 = sx_cg_value(m->z1);
    for (int n = 0; n < N; n++)
        for (int oy = 0; oy < H / 2; oy++)
            for (int ox = 0; ox < W / 2; ox++)
                for (int c = 0; c < F1; c++) {
                    double best = 0, second = 0; /* relu outputs are >= 0 */
                    for (int dy = 0; dy < 2; dy++)
                        for (int dx = 0; dx < 2; dx++) {
                            int64_t at = ((n * H + 2 * oy + dy) * W + 2 * ox + dx) * F1 + c;
                            double v = fmax(sx_tensor_get(z1, at), 0);
                            if (v > best) {
                                second = best;
                                best = v;
                            } else if (v > second) {
                                second = v;
                            }
                        }
                    if (best > 0 && best - second < MARGIN)
                        return false;
                }
    return true;
}

static uint64_t good_seed(void)
{
    for (uint64_t seed = 1; seed < 200; seed++) {
        cnn m;
        cnn_build(&m, SX_CG_LAZY, seed);
        bool ok = away_from_kinks(&m);
        sx_cg_graph_free(m.g);
        if (ok)
            return seed;
    }
    cr_assert_fail("no seed in [1, 200) keeps the CNN away from kinks");
    return 0;
}

static double loss_value(cnn *m)
{
    cr_assert_eq(sx_cg_eval(m->g, 1, &m->loss), SX_OK, "%s", sx_last_error());
    return sx_tensor_get(sx_cg_value(m->loss), 0);
}

static sx_status leaf_set(cnn *m, int i, const sx_tensor *v)
{
    return i == 0 ? sx_cg_input_set(m->g, m->p[0], v, SX_CG_COPY)
                  : sx_cg_leaf_set(m->g, m->p[i], v);
}

Test(autodiff_cnn, gradients_match_finite_differences)
{
    const double h = 1e-6, tol = 1e-6;
    uint64_t seed = good_seed();
    cnn m;
    cnn_build(&m, SX_CG_LAZY, seed);
    sx_cg_node *grads[N_PARAMS];
    cr_assert_eq(sx_ad_grad(m.g, m.loss, N_PARAMS, m.p, grads), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(m.g, N_PARAMS, grads), SX_OK, "%s", sx_last_error());
    double l0 = loss_value(&m);
    cr_assert(isfinite(l0) && l0 > 0);
    int64_t checked = 0;
    for (int i = 0; i < N_PARAMS; i++) {
        sx_tensor *d = NULL, *base = NULL, *moved = NULL;
        cr_assert_eq(sx_tensor_clone(sx_cg_value(grads[i]), &d), SX_OK);
        cr_assert_eq(sx_tensor_clone(sx_cg_value(m.p[i]), &base), SX_OK);
        cr_assert_eq(sx_tensor_clone(base, &moved), SX_OK);
        double norm = 0;
        for (int64_t k = 0; k < base->size; k++) {
            double x0 = sx_tensor_get(base, k), step = h * fmax(1, fabs(x0)), phi[2];
            for (int side = 0; side < 2; side++) {
                sx_tensor_set(moved, k, side == 0 ? x0 + step : x0 - step);
                cr_assert_eq(leaf_set(&m, i, moved), SX_OK, "%s", sx_last_error());
                phi[side] = loss_value(&m);
            }
            sx_tensor_set(moved, k, x0);
            double fd = (phi[0] - phi[1]) / (2 * step), dk = sx_tensor_get(d, k);
            cr_expect(fabs(dk - fd) <= tol * (1 + fabs(fd)),
                      "d loss / d %s[%lld]: autodiff %.12g, finite differences %.12g",
                      param_names[i], (long long)k, dk, fd);
            norm += dk * dk;
            checked++;
        }
        cr_assert_eq(leaf_set(&m, i, base), SX_OK);
        /* every parameter takes part: a gradient that is all zero would test nothing */
        cr_assert_gt(norm, 1e-12, "the gradient of %s is zero", param_names[i]);
        sx_tensor_free(d);
        sx_tensor_free(base);
        sx_tensor_free(moved);
    }
    cr_assert_eq(checked, N * H * W * C + 3 * 3 * C * F1 + F1 + 3 * 3 * F1 * F2 + F2 +
                              4 * F2 * CLASSES + CLASSES);
    cr_assert_float_eq(loss_value(&m), l0, 0, "the parameters were not restored");
    sx_cg_graph_free(m.g);
}

Test(autodiff_cnn, eager_equals_lazy)
{
    uint64_t seed = good_seed();
    cnn lazy, eager;
    cnn_build(&lazy, SX_CG_LAZY, seed);
    cnn_build(&eager, SX_CG_EAGER, seed);
    sx_cg_node *gl[N_PARAMS], *ge[N_PARAMS];
    cr_assert_eq(sx_ad_grad(lazy.g, lazy.loss, N_PARAMS, lazy.p, gl), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ad_grad(eager.g, eager.loss, N_PARAMS, eager.p, ge), SX_OK, "%s",
                 sx_last_error());
    cr_assert_eq(sx_cg_eval(lazy.g, N_PARAMS, gl), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < N_PARAMS; i++)
        cr_assert(tu_close(sx_cg_value(ge[i]), sx_cg_value(gl[i]), 1e-14, 1e-15), "%s",
                  param_names[i]);
    sx_cg_graph_free(lazy.g);
    sx_cg_graph_free(eager.g);
}

Test(autodiff_cnn, hessian_vector_product_through_maxpool)
{
    /* second order through the whole network (maxpool's backward differentiated in dy): the
     * Hessian-vector product for the last conv kernel against finite differences of the
     * gradient along v */
    const double h = 1e-6, tol = 1e-6;
    uint64_t seed = good_seed();
    cnn m;
    cnn_build(&m, SX_CG_LAZY, seed);
    sx_rng r;
    sx_rng_seed(&r, 77);
    sx_cg_node *k = m.p[1], *gk = NULL, *hv = NULL;
    sx_tensor *vt = tu_rand(&r, SX_F64, 4, sx_cg_node_shape(k), -1, 1);
    sx_cg_node *v = sx_cg_const(m.g, vt);
    cr_assert_eq(sx_ad_grad(m.g, m.loss, 1, &k, &gk), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ad_hvp(m.g, m.loss, k, v, &hv), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(m.g, 1, &hv), SX_OK, "%s", sx_last_error());
    sx_tensor *hvt = NULL, *base = NULL, *moved = NULL, *gside[2];
    cr_assert_eq(sx_tensor_clone(sx_cg_value(hv), &hvt), SX_OK);
    cr_assert_eq(sx_tensor_clone(sx_cg_value(k), &base), SX_OK);
    cr_assert_eq(sx_tensor_clone(base, &moved), SX_OK);
    for (int side = 0; side < 2; side++) {
        for (int64_t i = 0; i < base->size; i++)
            sx_tensor_set(moved, i,
                          sx_tensor_get(base, i) + (side == 0 ? h : -h) * sx_tensor_get(vt, i));
        cr_assert_eq(sx_cg_leaf_set(m.g, k, moved), SX_OK);
        cr_assert_eq(sx_cg_eval(m.g, 1, &gk), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_tensor_clone(sx_cg_value(gk), &gside[side]), SX_OK);
    }
    double norm = 0;
    for (int64_t i = 0; i < base->size; i++) {
        double fd = (sx_tensor_get(gside[0], i) - sx_tensor_get(gside[1], i)) / (2 * h);
        double d = sx_tensor_get(hvt, i);
        cr_expect(fabs(d - fd) <= tol * (1 + fabs(fd)), "Hv[%lld]: %.12g vs %.12g", (long long)i, d,
                  fd);
        norm += d * d;
    }
    cr_assert_gt(norm, 1e-12, "the Hessian-vector product is zero");
    sx_tensor_free(vt);
    sx_tensor_free(hvt);
    sx_tensor_free(base);
    sx_tensor_free(moved);
    sx_tensor_free(gside[0]);
    sx_tensor_free(gside[1]);
    sx_cg_graph_free(m.g);
}
