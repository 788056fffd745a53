/* SX_PASS_CONV_EPILOGUE (cgraph/opt_conv.c): a conv2d whose only reader is element-wise becomes
 * one conv2d running the reader's program on its output. The outputs with and without the pass
 * have the same bits (f32 and f64, every reader form: a fused chain, a single binary op, a
 * single map, fma, where; per-channel, scalar and residual operands; batch norm folded by
 * SX_PASS_BN_FOLD, then its shift and relu); what it must not take stays as it was; a graph
 * optimised this way cannot be differentiated through the epilogue (a clear error). */
#include "testutil.h"

#include <string.h>

#include <sx_autodiff.h>

static sx_cg_node *rand_input(sx_cg_graph *g, sx_rng *r, sx_dtype dt, const char *name, int rank,
                              const int64_t *shape, double lo, double hi)
{
    sx_cg_node *x = sx_cg_input(g, name, dt, rank, shape);
    sx_tensor *v = tu_rand(r, dt, rank, shape, lo, hi);
    cr_assert_eq(sx_cg_input_set(g, x, v, SX_CG_COPY), SX_OK);
    sx_tensor_free(v);
    return x;
}

static int64_t count_op(sx_cg_graph *g, sx_cg_op op)
{
    int64_t c = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        c += n != NULL && sx_cg_node_op(n) == op;
    }
    return c;
}

enum { F_BIAS_RELU, F_BIAS, F_RELU, F_BN_RESIDUAL, F_FMA, F_WHERE, F_BN_FOLDED, F_FORMS };

typedef struct built {
    sx_cg_graph *g;
    sx_cg_node *y;
} built;

/* Form `form` over conv2d(x, k) (x (2, h, w, c), k (3, 3, c, f) SAME, stride s), the same values
 * for the same seed. */
static built build(int form, sx_dtype dt, int64_t h, int64_t c, int64_t f, int s, uint64_t seed)
{
    built t;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &t.g), SX_OK);
    sx_rng r;
    sx_rng_seed(&r, seed);
    const int64_t xs[4] = {2, h, h, c}, ks[4] = {3, 3, c, f}, fs[1] = {f};
    sx_conv2d_params p = sx_conv2d_params_default();
    p.padding = SX_PAD_SAME;
    p.stride_h = p.stride_w = s;
    sx_cg_graph *g = t.g;
    sx_cg_node *x = rand_input(g, &r, dt, "x", 4, xs, -1, 1);
    sx_cg_node *k = rand_input(g, &r, dt, "k", 4, ks, -1, 1);
    sx_cg_node *a = rand_input(g, &r, dt, "a", 1, fs, -2, 2);
    sx_cg_node *b = rand_input(g, &r, dt, "b", 1, fs, -1, 1);
    sx_cg_node *y = sx_cg_conv2d(g, x, k, &p);
    const int64_t oh = (h + s - 1) / s, ys[4] = {2, oh, oh, f};
    sx_cg_node *res = rand_input(g, &r, dt, "res", 4, ys, -1, 1);
    switch (form) {
    case F_BIAS_RELU:
        y = sx_cg_relu(g, sx_cg_add(g, y, b));
        break;
    case F_BIAS:
        y = sx_cg_add(g, b, y);
        break;
    case F_RELU:
        y = sx_cg_relu(g, y);
        break;
    case F_BN_RESIDUAL:
        y = sx_cg_relu(g, sx_cg_add(g, sx_cg_add(g, sx_cg_mul(g, y, a), b), res));
        break;
    case F_FMA:
        y = sx_cg_fma(g, a, y, b);
        break;
    case F_WHERE:
        y = sx_cg_where(g, sx_cg_gt(g, res, sx_cg_scalar(g, 0)), y, b);
        break;
    default: /* mul by a (folded into k by SX_PASS_BN_FOLD), then the shift and relu */
        y = sx_cg_relu(g, sx_cg_add(g, sx_cg_mul(g, y, a), b));
        break;
    }
    cr_assert_not_null(y, "%s", sx_last_error());
    t.y = y;
    return t;
}

static sx_cg_opt_params params(bool epilogue, bool fold)
{
    sx_cg_opt_params p = sx_cg_opt_params_default();
    p.enable[SX_PASS_CONV_EPILOGUE] = epilogue;
    p.enable[SX_PASS_BN_FOLD] = fold;
    return p;
}

Test(cgraph_opt_conv, same_bits_with_and_without_the_pass)
{
    static const struct {
        int64_t h, c, f;
        int s;
    } shapes[] = {{9, 3, 5, 1}, {14, 16, 16, 1}, {14, 16, 32, 2}, {7, 32, 32, 1}};
    for (int form = 0; form < F_FORMS; form++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int d = 0; d < 2; d++) {
                const sx_dtype dt = d ? SX_F64 : SX_F32;
                const uint64_t seed = 100 + (uint64_t)(form * 10) + si;
                built off =
                    build(form, dt, shapes[si].h, shapes[si].c, shapes[si].f, shapes[si].s, seed);
                built on =
                    build(form, dt, shapes[si].h, shapes[si].c, shapes[si].f, shapes[si].s, seed);
                const bool fold = form == F_BN_FOLDED;
                sx_cg_opt_params po = params(false, fold), pn = params(true, fold);
                sx_cg_opt_report ro, rn;
                cr_assert_eq(sx_cg_optimise(off.g, 1, &off.y, &po, &ro), SX_OK, "%s",
                             sx_last_error());
                cr_assert_eq(sx_cg_optimise(on.g, 1, &on.y, &pn, &rn), SX_OK, "%s",
                             sx_last_error());
                cr_assert_eq(ro.changed[SX_PASS_CONV_EPILOGUE], 0);
                cr_assert_eq(rn.changed[SX_PASS_CONV_EPILOGUE], 1, "form %d shape %zu", form, si);
                /* the reader went into the convolution: nothing element-wise is left */
                cr_assert_eq(count_op(on.g, SX_OP_FUSED), 0, "form %d", form);
                cr_assert_eq(count_op(on.g, SX_OP_RELU), 0, "form %d", form);
                cr_assert_eq(count_op(on.g, SX_OP_CONV2D), 1);
                cr_assert_eq(sx_cg_node_op(on.y), SX_OP_CONV2D, "form %d", form);
                cr_assert_eq(sx_cg_eval(off.g, 1, &off.y), SX_OK, "%s", sx_last_error());
                cr_assert_eq(sx_cg_eval(on.g, 1, &on.y), SX_OK, "%s", sx_last_error());
                const sx_tensor *a = sx_cg_value(off.y), *b = sx_cg_value(on.y);
                cr_assert_eq(a->size, b->size);
                cr_assert(memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(dt)) == 0,
                          "form %d shape %zu %s: the epilogue changed the bits", form, si,
                          sx_dtype_name(dt));
                sx_cg_graph_free(off.g);
                sx_cg_graph_free(on.g);
            }
}

/* A convolution that is also an output, or that two nodes read, or whose reader broadcasts an
 * operand the kernel cannot repeat (not over the leading axes), stays as it was. */
Test(cgraph_opt_conv, leaves_what_it_must_not_take)
{
    sx_cg_opt_params pn = params(true, false);
    sx_cg_opt_report r;
    /* the convolution is also an output */
    built t = build(F_BIAS_RELU, SX_F32, 6, 2, 3, 1, 1);
    sx_cg_node *conv = sx_cg_node_input(sx_cg_node_input(t.y, 0), 0);
    cr_assert_eq(sx_cg_node_op(conv), SX_OP_CONV2D);
    sx_cg_node *outs[2] = {t.y, conv};
    cr_assert_eq(sx_cg_optimise(t.g, 2, outs, &pn, &r), SX_OK, "%s", sx_last_error());
    cr_assert_eq(r.changed[SX_PASS_CONV_EPILOGUE], 0);
    sx_cg_graph_free(t.g);
    /* two readers (not element-wise both: chain fusion would make them one) */
    t = build(F_RELU, SX_F32, 6, 2, 3, 1, 2);
    conv = sx_cg_node_input(t.y, 0);
    sx_cg_node *two[2] = {t.y, sx_cg_sum(t.g, conv, SX_AXES_ALL, false)};
    cr_assert_eq(sx_cg_optimise(t.g, 2, two, &pn, &r), SX_OK, "%s", sx_last_error());
    cr_assert_eq(r.changed[SX_PASS_CONV_EPILOGUE], 0);
    sx_cg_graph_free(t.g);
    /* an operand (2, 1, 1, f): repeated over the middle axes, not the leading ones */
    t = build(F_RELU, SX_F32, 6, 2, 3, 1, 3);
    conv = sx_cg_node_input(t.y, 0);
    sx_rng rng;
    sx_rng_seed(&rng, 4);
    const int64_t ms[4] = {2, 1, 1, 3};
    sx_cg_node *m = rand_input(t.g, &rng, SX_F32, "m", 4, ms, -1, 1);
    sx_cg_node *y = sx_cg_add(t.g, conv, m);
    cr_assert_not_null(y, "%s", sx_last_error());
    /* the relu is not an output: y alone */
    cr_assert_eq(sx_cg_optimise(t.g, 1, &y, &pn, &r), SX_OK, "%s", sx_last_error());
    cr_assert_eq(r.changed[SX_PASS_CONV_EPILOGUE], 0);
    cr_assert_eq(sx_cg_node_op(y), SX_OP_ADD);
    sx_cg_graph_free(t.g);
}

/* The gradient rule of conv2d knows no epilogue: differentiating after the pass is refused. */
Test(cgraph_opt_conv, no_gradient_through_an_epilogue)
{
    sx_cg_opt_params pn = params(true, false);
    built t = build(F_BIAS_RELU, SX_F64, 5, 2, 3, 1, 5);
    cr_assert_eq(sx_cg_optimise(t.g, 1, &t.y, &pn, NULL), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_node_op(t.y), SX_OP_CONV2D);
    sx_cg_node *loss = sx_cg_sum(t.g, t.y, SX_AXES_ALL, false);
    sx_cg_node *x = sx_cg_node_input(t.y, 0), *gx = NULL;
    cr_assert_eq(sx_ad_grad(t.g, loss, 1, &x, &gx), SX_E_UNSUPPORTED);
    cr_assert(strstr(sx_last_error(), "epilogue") != NULL, "%s", sx_last_error());
    sx_cg_graph_free(t.g);
}

/* conv2d(x, k) with explicit pads (pt, pb, pl, pr), stride s, then relu(+ b) over a random x
 * (2, h, h, c) and k (kh, kh, c, f), into *t. */
static void build_explicit(built *t, sx_dtype dt, int64_t h, int64_t kh, int s, int pt, int pb,
                           uint64_t seed)
{
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &t->g), SX_OK);
    sx_rng r;
    sx_rng_seed(&r, seed);
    const int64_t c = 3, f = 5, xs[4] = {2, h, h, c}, ks[4] = {kh, kh, c, f}, fs[1] = {f};
    sx_conv2d_params p = sx_conv2d_params_default();
    p.padding = SX_PAD_EXPLICIT;
    p.pad_top = p.pad_left = pt;
    p.pad_bottom = p.pad_right = pb;
    p.stride_h = p.stride_w = s;
    sx_cg_node *x = rand_input(t->g, &r, dt, "x", 4, xs, -1, 1);
    sx_cg_node *k = rand_input(t->g, &r, dt, "k", 4, ks, -1, 1);
    sx_cg_node *b = rand_input(t->g, &r, dt, "b", 1, fs, -1, 1);
    t->y = sx_cg_relu(t->g, sx_cg_add(t->g, sx_cg_conv2d(t->g, x, k, &p), b));
    cr_assert_not_null(t->y, "%s", sx_last_error());
}

/* Explicit pads that the dense kernels compute as SAME or VALID (PyTorch's padding (k - 1) / 2
 * at stride 1, none for a 1x1 kernel at stride 2) become those in the fused convolution, so that
 * the epilogue runs on each unit's rows (the general path runs it over all of y afterwards);
 * others (pads 1 at stride 2 over an even size: the leading pad differs from SAME's) stay
 * explicit. The bits are those of the graph without the pass either way. */
Test(cgraph_opt_conv, explicit_pads_equal_to_same_or_valid_become_those)
{
    static const struct {
        int64_t h, kh;
        int s, pt, pb;
        sx_padding want;
    } cases[] = {{9, 3, 1, 1, 1, SX_PAD_SAME},     {8, 5, 1, 2, 2, SX_PAD_SAME},
                 {8, 1, 2, 0, 0, SX_PAD_VALID},    {9, 3, 1, 0, 0, SX_PAD_VALID},
                 {8, 3, 2, 1, 1, SX_PAD_EXPLICIT}, {9, 3, 1, 1, 0, SX_PAD_EXPLICIT},
                 {9, 3, 1, 2, 2, SX_PAD_EXPLICIT}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int d = 0; d < 2; d++) {
            const sx_dtype dt = d ? SX_F64 : SX_F32;
            built off, on;
            build_explicit(&off, dt, cases[i].h, cases[i].kh, cases[i].s, cases[i].pt, cases[i].pb,
                           70 + i);
            build_explicit(&on, dt, cases[i].h, cases[i].kh, cases[i].s, cases[i].pt, cases[i].pb,
                           70 + i);
            sx_cg_opt_params po = params(false, false), pn = params(true, false);
            cr_assert_eq(sx_cg_optimise(off.g, 1, &off.y, &po, NULL), SX_OK, "%s", sx_last_error());
            cr_assert_eq(sx_cg_optimise(on.g, 1, &on.y, &pn, NULL), SX_OK, "%s", sx_last_error());
            cr_assert_eq(sx_cg_node_op(on.y), SX_OP_CONV2D, "case %zu", i);
            const sx_conv2d_params *got = &sx_cg_node_attr(on.y)->conv;
            cr_assert_eq(got->padding, cases[i].want, "case %zu: padding %d, want %d", i,
                         (int)got->padding, (int)cases[i].want);
            cr_assert_eq(got->stride_h, cases[i].s);
            cr_assert_eq(got->stride_w, cases[i].s);
            cr_assert_eq(sx_cg_eval(off.g, 1, &off.y), SX_OK, "%s", sx_last_error());
            cr_assert_eq(sx_cg_eval(on.g, 1, &on.y), SX_OK, "%s", sx_last_error());
            const sx_tensor *a = sx_cg_value(off.y), *b = sx_cg_value(on.y);
            cr_assert(sx_shape_equal(a->rank, a->shape, b->rank, b->shape), "case %zu", i);
            cr_assert(memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(dt)) == 0,
                      "case %zu %s: other bits", i, sx_dtype_name(dt));
            sx_cg_graph_free(off.g);
            sx_cg_graph_free(on.g);
        }
}
