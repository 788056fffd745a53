/* strix against PyTorch: Conv2d / MaxPool2d / AvgPool2d outputs and the gradients of
 * sum(y * dy) with respect to the input (and the kernel), for stride 2 pad 1, groups, depthwise
 * with a multiplier, dilation, asymmetric pads, SAME_LOWER, ceil_mode and count_include_pad.
 * The reference values are tests/data/torch_conv_pool.txt, made by torch_conv_pool.py beside it
 * (its head says how to regenerate and the file format). Each case runs as a lazy graph
 * (conv2d / pooling node, then sx_ad_vjp with dy as the seed) in f64 (agreement within 1e-10
 * relative to the largest reference value of the tensor) and f32 (1e-5). */
#include "testutil.h"
#include "torch_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sx_autodiff.h>

static sx_cg_node *leaf(sx_cg_graph *g, sx_dtype dt, const tr_tensor *t, bool param)
{
    sx_tensor *v = tr_to_tensor(dt, t);
    sx_cg_node *n;
    if (param) {
        n = sx_cg_param(g, t->name, v);
    } else {
        n = sx_cg_input(g, t->name, dt, t->rank, t->shape);
        cr_assert_not_null(n, "%s", sx_last_error());
        cr_assert_eq(sx_cg_input_set(g, n, v, SX_CG_COPY), SX_OK, "%s", sx_last_error());
    }
    sx_tensor_free(v);
    cr_assert_not_null(n, "%s", sx_last_error());
    return n;
}

/* The case's op with `padding` (SX_PAD_EXPLICIT with the file's pads, or another mode that
 * gives the same pads). */
static void run_case(const tr_case *c, sx_dtype dt, sx_padding padding, double tol)
{
    int q[13];
    cr_assert_eq(c->n_num, 13, "%s: %d settings", c->name, c->n_num);
    for (int i = 0; i < 13; i++)
        q[i] = (int)c->num[i];
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &g), SX_OK);
    bool conv = strcmp(c->kind, "conv") == 0;
    sx_cg_node *x = leaf(g, dt, tr_tensor_of(c, "x"), true), *k = NULL, *y;
    sx_cg_node *dy = leaf(g, dt, tr_tensor_of(c, "dy"), false);
    if (conv) {
        k = leaf(g, dt, tr_tensor_of(c, "k"), true);
        sx_conv2d_params p = {.stride_h = q[0],
                              .stride_w = q[1],
                              .padding = padding,
                              .dilation_h = q[6],
                              .dilation_w = q[7],
                              .groups = q[8]};
        if (padding == SX_PAD_EXPLICIT)
            p.pad_top = q[2], p.pad_bottom = q[3], p.pad_left = q[4], p.pad_right = q[5];
        y = sx_cg_conv2d(g, x, k, &p);
    } else {
        sx_pool2d_params p = {.kernel_h = q[9],
                              .kernel_w = q[10],
                              .stride_h = q[0],
                              .stride_w = q[1],
                              .padding = padding,
                              .pad_top = q[2],
                              .pad_bottom = q[3],
                              .pad_left = q[4],
                              .pad_right = q[5],
                              .dilation_h = q[6],
                              .dilation_w = q[7],
                              .ceil_mode = q[11],
                              .count_include_pad = q[12]};
        y = strcmp(c->kind, "maxpool") == 0 ? sx_cg_maxpool2d(g, x, &p) : sx_cg_avgpool2d(g, x, &p);
    }
    cr_assert_not_null(y, "%s: %s", c->name, sx_last_error());
    sx_cg_node *wrt[2] = {x, k}, *grads[2] = {NULL, NULL};
    cr_assert_eq(sx_ad_vjp(g, y, dy, conv ? 2 : 1, wrt, grads), SX_OK, "%s: %s", c->name,
                 sx_last_error());
    sx_cg_node *outs[3] = {y, grads[0], grads[1]};
    cr_assert_eq(sx_cg_eval(g, conv ? 3 : 2, outs), SX_OK, "%s: %s", c->name, sx_last_error());
    tr_expect(c, "y", sx_cg_value(y), tr_tensor_of(c, "y"), tol);
    tr_expect(c, "dx", sx_cg_value(grads[0]), tr_tensor_of(c, "dx"), tol);
    if (conv)
        tr_expect(c, "dk", sx_cg_value(grads[1]), tr_tensor_of(c, "dk"), tol);
    sx_cg_graph_free(g);
}

Test(autodiff_torch, conv_and_pool_match_pytorch)
{
    FILE *f = tr_open("torch_conv_pool.txt");
    tr_case c;
    int cases = 0, same_lower = 0;
    while (tr_read(f, &c)) {
        for (int d = 0; d < 2; d++)
            run_case(&c, d ? SX_F64 : SX_F32, SX_PAD_EXPLICIT, d ? 1e-10 : 1e-5);
        if (strstr(c.name, "same_lower") != NULL) { /* the same pads from the mode */
            run_case(&c, SX_F64, SX_PAD_SAME_LOWER, 1e-10);
            same_lower++;
        }
        tr_free(&c);
        cases++;
    }
    fclose(f);
    cr_assert_geq(cases, 14, "%d cases read", cases);
    cr_assert_eq(same_lower, 1);
}
