/* The gradient of maxpool(relu(z)) under every pooling option, built by autodiff, then
 * optimised (the pool-relu pass fuses relu's selection into the pooling's backward op) and
 * planned (the fused op may write over relu's dying output only when no two windows share a
 * cell): the same bits as the graph evaluated as built, for pads, ceil_mode, dilation,
 * SAME_LOWER and overlapping windows, in f32 and f64. */
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <sx_autodiff.h>

static const struct {
    sx_pool2d_params p;
    bool disjoint; /* no two windows share a cell */
} cases[] = {
    {{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2}, true},
    {{.kernel_h = 3,
      .kernel_w = 3,
      .stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 1,
      .pad_left = 1,
      .pad_right = 1},
     false},
    {{.kernel_h = 2, .kernel_w = 3, .stride_h = 2, .stride_w = 3, .ceil_mode = 1}, true},
    {{.kernel_h = 2,
      .kernel_w = 2,
      .stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_left = 1,
      .ceil_mode = 1},
     true},
    {{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .dilation_h = 2, .dilation_w = 2},
     false},
    {{.kernel_h = 2, .kernel_w = 2, .stride_h = 3, .stride_w = 3, .dilation_h = 2, .dilation_w = 2},
     false},
    {{.kernel_h = 3, .kernel_w = 2, .stride_h = 3, .stride_w = 2, .padding = SX_PAD_SAME_LOWER},
     true},
};

/* (grad of sum(maxpool(relu(z)) * w) with respect to z)^2; optimised and planned or not */
static sx_tensor *grad_of(sx_dtype dt, const sx_pool2d_params *p, bool compiled, int64_t *fused,
                          int64_t *inplace)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &g), SX_OK);
    int64_t zs[4] = {2, 8, 7, 3}, ys[4];
    sx_tensor zv = sx_tensor_view(dt, 4, zs, NULL);
    cr_assert_eq(sx_pool2d_shape("test", &zv, p, ys), SX_OK, "%s", sx_last_error());
    sx_rng r;
    sx_rng_seed(&r, 17);
    sx_tensor *zt = tu_rand(&r, dt, 4, zs, -1, 1), *wt = tu_rand(&r, dt, 4, ys, -1, 1);
    sx_cg_node *z = sx_cg_param(g, "z", zt), *w = sx_cg_param(g, "w", wt);
    sx_tensor_free(zt);
    sx_tensor_free(wt);
    sx_cg_node *y = sx_cg_maxpool2d(g, sx_cg_relu(g, z), p);
    sx_cg_node *loss =
        sx_cg_sum(g, sx_cg_mul(g, y, w), SX_AXIS(0) | SX_AXIS(1) | SX_AXIS(2) | SX_AXIS(3), false);
    cr_assert_not_null(loss, "%s", sx_last_error());
    sx_cg_node *dz = NULL;
    cr_assert_eq(sx_ad_grad(g, loss, 1, &z, &dz), SX_OK, "%s", sx_last_error());
    dz = sx_cg_mul(g, dz, dz); /* a requested output is never planned: read dz instead */
    if (compiled) {
        sx_cg_opt_report orep;
        cr_assert_eq(sx_cg_optimise(g, 1, &dz, NULL, &orep), SX_OK, "%s", sx_last_error());
        *fused = orep.changed[SX_PASS_POOL_RELU];
        sx_cg_freeze_params fp = sx_cg_freeze_params_default();
        sx_cg_plan_report prep;
        cr_assert_eq(sx_cg_freeze_ex(g, 1, &dz, &fp, &prep), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_plan_check(g), SX_OK, "%s", sx_last_error());
        *inplace = prep.inplace_nodes;
    }
    cr_assert_eq(sx_cg_eval(g, 1, &dz), SX_OK, "%s", sx_last_error());
    sx_tensor *out = NULL;
    cr_assert_eq(sx_tensor_clone(sx_cg_value(dz), &out), SX_OK);
    sx_cg_graph_free(g);
    return out;
}

Test(autodiff_pool_relu, fused_and_planned_gradient_keeps_the_bits_under_every_option)
{
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = d ? SX_F64 : SX_F32;
        int64_t inplace_disjoint = -1, inplace_overlap = -1;
        for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
            int64_t fused = 0, inplace = 0;
            sx_tensor *plain = grad_of(dt, &cases[t].p, false, NULL, NULL);
            sx_tensor *fast = grad_of(dt, &cases[t].p, true, &fused, &inplace);
            cr_assert_eq(fused, 1, "case %zu: the pool-relu pass did not fire", t);
            cr_assert_eq(memcmp(plain->data, fast->data, (size_t)plain->size * (d ? 8 : 4)), 0,
                         "case %zu (%s): the compiled gradient differs", t, sx_dtype_name(dt));
            /* the fused op's in-place write is the one difference between the two kinds of
             * case: every other node plans alike */
            if (cases[t].disjoint && inplace_disjoint < 0)
                inplace_disjoint = inplace;
            if (!cases[t].disjoint && inplace_overlap < 0)
                inplace_overlap = inplace;
            sx_tensor_free(plain);
            sx_tensor_free(fast);
        }
        cr_assert_eq(inplace_disjoint, inplace_overlap + 1, "in place: %lld disjoint, %lld not",
                     (long long)inplace_disjoint, (long long)inplace_overlap);
    }
}
