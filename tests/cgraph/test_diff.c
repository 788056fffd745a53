/* The differential tester (difftest.h) in CI: fixed seeds, one test per check family
 * (values across evaluation modes, gradients against finite differences, optimise then
 * differentiate, Hessian-vector products), each printing a shrunk C reproducer for every distinct
 * failing check and a summary. Programs: SX_DIFFTEST_GRAPHS of them (default 1000; 300 in the
 * sanitizer build), from seed 1. The long mode is fuzz/difftest.
 * Then the op table's coverage, and the minimal programs of the bugs the tester found, each a
 * named test (they fail until the bug is fixed). */
#include "testutil.h"

#include "difftest.c"

#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__)
#define DEFAULT_GRAPHS 300
#else
#define DEFAULT_GRAPHS 1000
#endif

static int64_t ci_graphs(void)
{
    const char *e = getenv("SX_DIFFTEST_GRAPHS");
    int64_t n = e != NULL ? atoll(e) : 0;
    return n > 0 ? n : DEFAULT_GRAPHS;
}

static void run_family(dt_family f)
{
    dt_campaign c;
    memset(&c, 0, sizeof c);
    c.seed0 = 1;
    c.count = ci_graphs();
    c.families[f] = true;
    c.max_reports = 1;
    c.shrink = true;
    c.log = stderr;
    int64_t failures = dt_campaign_run(&c);
    cr_expect_eq(c.programs, c.count, "%lld of %lld programs generated", (long long)c.programs,
                 (long long)c.count);
    cr_expect_eq(failures, 0,
                 "family %s: %lld failing programs, %lld distinct checks (reproducers and the "
                 "summary above)",
                 dt_family_name[f], (long long)failures, (long long)c.distinct);
}

Test(cgraph_diff, values_agree_across_modes, .timeout = 600)
{
    run_family(DT_MODES);
    /* the programs' convolutions with a bias and relu (idiom_conv_bias) reach the epilogue pass,
     * whose results the optimised modes compare bit for bit */
    cr_expect_gt(dt_pass_changed[SX_PASS_CONV_EPILOGUE], 0, "no convolution epilogue made");
    /* their convolutions times a per-channel scale reach the batch-norm fold, checked within a
     * rounding tolerance (modes:bn-fold) */
    cr_expect_gt(dt_pass_changed[SX_PASS_BN_FOLD], 0, "no batch norm folded");
}

Test(cgraph_diff, gradients_match_finite_differences, .timeout = 600)
{
    run_family(DT_GRAD);
}

Test(cgraph_diff, optimise_then_differentiate, .timeout = 600)
{
    run_family(DT_OPTGRAD);
}

Test(cgraph_diff, hessian_vector_products_match, .timeout = 600)
{
    run_family(DT_HVP);
}

/* Every row of sx_ops.def is composed by the generator or excluded with a reason, and every
 * composed op appears in the programs of the first COVERAGE_GRAPHS seeds (a new row needs its
 * DT_<name> to compile at all). Generating is cheap (no evaluation), so this draws more programs
 * than the checks run: a rarely drawn row must not fail only in the sanitizer build. */
#define COVERAGE_GRAPHS 3000

Test(cgraph_diff, every_op_row_covered)
{
    for (int64_t s = 1; s <= COVERAGE_GRAPHS; s++)
        dt_prog_free(dt_generate((uint64_t)s, s % 2 ? SX_F32 : SX_F64, 0));
    for (int op = 0; op < SX_OP_COUNT; op++) {
        const dt_rule *r = &dt_rules[op];
        cr_assert_eq(r->op, (sx_cg_op)op);
        cr_assert_str_eq(r->name, sx_cg_op_name((sx_cg_op)op));
        if (r->excluded != NULL) {
            cr_expect_eq(r->weight, 0, "%s: excluded but drawn", r->name);
            cr_expect_gt(strlen(r->excluded), 10, "%s: give the reason", r->name);
            continue;
        }
        cr_expect_gt(dt_op_made[op], 0, "%s: never made in %d programs", r->name, COVERAGE_GRAPHS);
    }
}

/* The same seed gives the same program; shrinking keeps a failure's check. */
Test(cgraph_diff, generator_deterministic)
{
    for (uint64_t s = 1; s <= 20; s++) {
        dt_prog *a = dt_generate(s, SX_F64, 0), *b = dt_generate(s, SX_F64, 0);
        cr_assert_not_null(a);
        cr_assert_not_null(b);
        cr_assert_eq(a->n, b->n);
        cr_assert_eq(a->out, b->out);
        for (int i = 0; i < a->n; i++) {
            cr_assert_eq(a->node[i].op, b->node[i].op);
            cr_assert_eq(a->node[i].kind, b->node[i].kind);
            cr_assert_eq(a->node[i].n_in, b->node[i].n_in);
            cr_assert(sx_shape_equal(a->node[i].rank, a->node[i].shape, b->node[i].rank,
                                     b->node[i].shape));
        }
        dt_prog_free(a);
        dt_prog_free(b);
    }
}

/* ---------------------------------------------------------------- the bugs it found */

/* Check program p in family f; on failure print the reproducer. */
static void expect_pass(dt_prog *p, dt_family f)
{
    cr_assert_eq(dt_infer(p), SX_OK, "the program does not build: %s", sx_last_error());
    dt_result r;
    dt_check(p, f, &r);
    cr_expect(!r.skipped, "the program is outside the checks' domain");
    if (r.failed)
        dt_print_c(p, f, &r, stderr);
    cr_expect(!r.failed, "%s: %s", r.check, r.msg);
    dt_prog_free(p);
}

static int leaf1(dt_prog *p, dt_kind k, int64_t n, const double *v)
{
    return dt_leaf(p, k, 1, &n, v);
}

static int leaf2(dt_prog *p, dt_kind k, int64_t r, int64_t c, const double *v)
{
    int64_t s[2] = {r, c};
    return dt_leaf(p, k, 2, s, v);
}

static sx_cg_attr gemm_attr(double alpha, double beta, bool ta, bool tb)
{
    sx_cg_attr at = sx_cg_attr_default();
    at.alpha = alpha;
    at.beta = beta;
    at.trans_a = ta;
    at.trans_b = tb;
    return at;
}

/* The generator's reshape of an empty value (fuzz/difftest --seed 20000 --family modes, the
 * program of seed 28367): factor_shape found no divisor of 0 and divided by an uninitialised
 * one (SIGFPE). It now draws a shape with a 0. */
Test(cgraph_diff, bug_reshape_of_an_empty_value_in_the_generator)
{
    dt_campaign c;
    memset(&c, 0, sizeof c);
    c.seed0 = 28367;
    c.count = 1;
    c.families[DT_MODES] = true;
    c.max_reports = 1;
    c.log = stderr;
    cr_expect_eq(dt_campaign_run(&c), 0);
    cr_expect_eq(c.programs, 1);
}

/* Regression (difftest seed 2): gemm with an addend that broadcasts: dL/dc has the
 * result's shape (1,1) instead of c's (). */
Test(cgraph_diff, bug_gemm_broadcast_addend_grad_shape)
{
    dt_prog *p = dt_prog_new(SX_F64);
    int a = leaf2(p, DT_CONST, 3, 1, (double[]){0.5, 1, 0.7});
    int b = leaf2(p, DT_CONST, 3, 1, (double[]){0.3, -0.3, 1});
    int c = dt_leaf(p, DT_PARAM, 0, NULL, (double[]){0.5});
    sx_cg_attr at = gemm_attr(-1.5, -0.5, true, false);
    dt_op(p, SX_OP_MATMUL, 3, (int[]){a, b, c}, &at);
    expect_pass(p, DT_GRAD);
}

/* The same, where the wrong-shaped gradient makes differentiation fail (difftest seed 45):
 * "sx_ad_grad: sx_cg_reshape: cannot reshape (1,2) to ()". */
Test(cgraph_diff, bug_gemm_broadcast_addend_grad_fails)
{
    dt_prog *p = dt_prog_new(SX_F32);
    int x = dt_leaf(p, DT_INPUT, 0, NULL, (double[]){3});
    sx_cg_attr rs = sx_cg_attr_default();
    rs.rank = 2;
    rs.shape[0] = rs.shape[1] = 1;
    int x11 = dt_op(p, SX_OP_RESHAPE, 1, &x, &rs);
    int b = leaf2(p, DT_CONST, 2, 1, (double[]){0.7, -0.8});
    sx_cg_attr at = gemm_attr(1, -0.5, true, true);
    dt_op(p, SX_OP_MATMUL, 3, (int[]){x11, b, x11}, &at);
    expect_pass(p, DT_GRAD);
}

/* Regression (difftest seed 3): add(matmul(a, b), bias) with a bias row; the gemm-folding
 * pass makes it a gemm with a broadcast addend, and the gradient of the optimised graph with
 * respect to the bias has shape (2,2). */
Test(cgraph_diff, bug_gemm_fold_bias_grad)
{
    dt_prog *p = dt_prog_new(SX_F64);
    int a = leaf2(p, DT_INPUT, 2, 3, (double[]){1, 2, 3, 4, 5, 6});
    int b = leaf2(p, DT_INPUT, 3, 2, (double[]){1, -1, 0.5, 2, 1, 1});
    int c = leaf1(p, DT_INPUT, 2, (double[]){0.1, 0.2});
    sx_cg_attr at = gemm_attr(1, 0, false, false);
    int m = dt_op(p, SX_OP_MATMUL, 2, (int[]){a, b}, &at);
    dt_op(p, SX_OP_ADD, 2, (int[]){m, c}, NULL);
    expect_pass(p, DT_OPTGRAD);
}

/* Regression (difftest seed 3): d/dx sum(sqrt(relu(x))) at x = (0.3, -0.6) gives NaN at
 * the negative entry: relu's rule multiplies the infinite upstream gradient by its 0 mask. */
Test(cgraph_diff, bug_relu_grad_nan_under_infinite_upstream)
{
    dt_prog *p = dt_prog_new(SX_F32);
    int x = leaf1(p, DT_INPUT, 2, (double[]){0.3, -0.6});
    int r = dt_op(p, SX_OP_RELU, 1, &x, NULL);
    dt_op(p, SX_OP_SQRT, 1, &r, NULL);
    expect_pass(p, DT_GRAD);
}

/* The same through abs: d/dx sqrt(abs(r)) with r exactly 0 (relu of a negative). */
Test(cgraph_diff, bug_abs_grad_nan_under_infinite_upstream)
{
    dt_prog *p = dt_prog_new(SX_F64);
    int x = leaf1(p, DT_INPUT, 2, (double[]){0.3, -0.6});
    int r = dt_op(p, SX_OP_RELU, 1, &x, NULL);
    int a = dt_op(p, SX_OP_ABS, 1, &r, NULL);
    dt_op(p, SX_OP_SQRT, 1, &a, NULL);
    expect_pass(p, DT_GRAD);
}

/* The folded bias through the broadcast pass (difftest seed 76): add(broadcast(s), matmul(a, b))
 * with s a scalar: the broadcast is dropped, the add folded into a gemm with a scalar addend, and
 * the gradient of the optimised graph with respect to s has shape (2,3). */
Test(cgraph_diff, bug_broadcast_then_gemm_fold_grad)
{
    dt_prog *p = dt_prog_new(SX_F64);
    int a = leaf2(p, DT_CONST, 2, 1, (double[]){-0.9, -1});
    int b = leaf2(p, DT_PARAM, 1, 3, (double[]){0.03, 0.9, 0.6});
    sx_cg_attr at = gemm_attr(1, 0, false, false);
    int m = dt_op(p, SX_OP_MATMUL, 2, (int[]){a, b}, &at);
    int s = dt_leaf(p, DT_INPUT, 0, NULL, (double[]){0.4});
    sx_cg_attr bc = sx_cg_attr_default();
    bc.rank = 2;
    bc.shape[0] = 2;
    bc.shape[1] = 3;
    int sb = dt_op(p, SX_OP_BROADCAST, 1, &s, &bc);
    dt_op(p, SX_OP_ADD, 2, (int[]){sb, m}, NULL);
    expect_pass(p, DT_OPTGRAD);
}

/* New (difftest seed 39): d/db sum(pow(a, b)) with a = (1, 1, 0) and b = 2 is NaN: the rule's
 * a^b * log(a) is 0 * -inf at a = 0, where the derivative is 0 (PyTorch gives 0). The same NaN
 * reaches the exponent when a = relu(x) has zeros (seed 369). */
Test(cgraph_diff, bug_pow_exponent_grad_nan_at_zero_base)
{
    dt_prog *p = dt_prog_new(SX_F32);
    int a = leaf1(p, DT_CONST, 3, (double[]){1, 1, 0});
    int b = dt_leaf(p, DT_INPUT, 0, NULL, (double[]){2});
    dt_op(p, SX_OP_POW, 2, (int[]){a, b}, NULL);
    expect_pass(p, DT_GRAD);
}

/* New (difftest seeds 185, 607, 1503; 1310 through qr_r, whose zeros below the diagonal make
 * the gradient NaN and then solve refuse it): the gradient of prod is prod / x, 0 / 0 = NaN at
 * a zero element; d/dx prod(0, 2, 3) = (6, 0, 0). */
Test(cgraph_diff, bug_prod_grad_nan_at_zero)
{
    dt_prog *p = dt_prog_new(SX_F64);
    int x = leaf1(p, DT_INPUT, 3, (double[]){0, 2, 3});
    sx_cg_attr at = sx_cg_attr_default();
    at.axes = SX_AXES_ALL;
    dt_op(p, SX_OP_PROD, 1, &x, &at);
    expect_pass(p, DT_GRAD);
}

/* New (difftest seeds 40, 58, 373, ...): sx_cgraph.h promises that the optimiser keeps values
 * bit for bit, but its simplification log(exp(x)) -> x changes them: log(exp(0.995)) is
 * 0.99500000000000011 in a lazy graph and 0.995 once optimised (likewise exp(log x)). */
Test(cgraph_diff, bug_log_exp_simplification_not_bit_exact)
{
    dt_prog *p = dt_prog_new(SX_F64);
    int x = leaf1(p, DT_INPUT, 2, (double[]){1.01, 0.995});
    int e = dt_op(p, SX_OP_EXP, 1, &x, NULL);
    dt_op(p, SX_OP_LOG, 1, &e, NULL);
    expect_pass(p, DT_MODES);
}

/* New (difftest seeds 100452, 100986; fixed on main by c8f7ecd): maxpool2d_relu_backward(x, x) (x
 * also the upstream gradient, here a reshape view of a comparison) with windows that do not
 * overlap: the frozen graph failed "sx_tensor_maxpool2d_relu_backward_out: dx overlaps dy" (the
 * planner put the result over x's storage although dy is x too); lazily it evaluates. */
Test(cgraph_diff, bug_frozen_maxpool_relu_backward_same_input)
{
    dt_prog *p = dt_prog_new(SX_F64);
    int c = leaf2(p, DT_CONST, 2, 1, (double[]){-0.7, 0.3});
    int t = dt_leaf(p, DT_CONST, 0, NULL, (double[]){0.7});
    int gt = dt_op(p, SX_OP_GT, 2, (int[]){c, t}, NULL);
    sx_cg_attr rs = sx_cg_attr_default();
    rs.rank = 4;
    rs.shape[0] = rs.shape[1] = rs.shape[2] = 1;
    rs.shape[3] = 2;
    int x = dt_op(p, SX_OP_RESHAPE, 1, &gt, &rs); /* (1,1,1,2) */
    sx_cg_attr at = sx_cg_attr_default();
    at.pool = (sx_pool2d_params){.kernel_h = 1,
                                 .kernel_w = 2,
                                 .stride_h = 1,
                                 .stride_w = 2,
                                 .padding = SX_PAD_SAME}; /* one window: dy has x's shape */
    int y = dt_op(p, SX_OP_MAXPOOL2D_RELU_BACKWARD, 2, (int[]){x, x}, &at);
    sx_cg_attr am = sx_cg_attr_default();
    am.axes = SX_AXIS(2) | SX_AXIS(3);
    dt_op(p, SX_OP_ARGMAX, 1, &y, &am); /* y is not an output: the planner may put it over x */
    expect_pass(p, DT_MODES);
}

/* The same with maxpool2d_backward (difftest seed 301810, before c8f7ecd:
 * "sx_tensor_maxpool2d_backward_out: dx overlaps dy"). */
Test(cgraph_diff, bug_frozen_maxpool_backward_same_input)
{
    dt_prog *p = dt_prog_new(SX_F64);
    int c = leaf2(p, DT_CONST, 2, 1, (double[]){-0.7, 0.3});
    int t = dt_leaf(p, DT_CONST, 0, NULL, (double[]){0.7});
    int gt = dt_op(p, SX_OP_GT, 2, (int[]){c, t}, NULL);
    sx_cg_attr rs = sx_cg_attr_default();
    rs.rank = 4;
    rs.shape[0] = rs.shape[1] = rs.shape[2] = 1;
    rs.shape[3] = 2;
    int x = dt_op(p, SX_OP_RESHAPE, 1, &gt, &rs); /* (1,1,1,2) */
    sx_cg_attr at = sx_cg_attr_default();
    at.pool = (sx_pool2d_params){.kernel_h = 1,
                                 .kernel_w = 2,
                                 .stride_h = 1,
                                 .stride_w = 2,
                                 .padding = SX_PAD_SAME}; /* one window: dy has x's shape */
    int y = dt_op(p, SX_OP_MAXPOOL2D_BACKWARD, 2, (int[]){x, x}, &at);
    sx_cg_attr am = sx_cg_attr_default();
    am.axes = SX_AXIS(2) | SX_AXIS(3);
    dt_op(p, SX_OP_ARGMAX, 1, &y, &am); /* y is not an output: the planner may put it over x */
    expect_pass(p, DT_MODES);
}

/* New (difftest seeds 100359, 101435): gemm folding changes values in the last bits, against
 * sx_cgraph.h's bit-for-bit promise: (a @ b) * s folded into alpha and beta, or gemm(...) + c
 * folded into the addend. f32. */
Test(cgraph_diff, bug_gemm_fold_not_bit_exact)
{
    dt_prog *p = dt_prog_new(SX_F32);
    int a = leaf2(p, DT_CONST, 1, 4, (double[]){1.814092, 1.3750972, 0.11740706, -1.0469054});
    int b = leaf2(p, DT_INPUT, 4, 1, (double[]){0.3521668, -0.7390083, -0.023101192, 0.6920766});
    int s = dt_leaf(p, DT_CONST, 0, NULL, (double[]){0.21819632});
    sx_cg_attr at = gemm_attr(1, -0.5, false, false);
    int m = dt_op(p, SX_OP_MATMUL, 3, (int[]){a, b, s}, &at);
    dt_op(p, SX_OP_MUL, 2, (int[]){m, s}, NULL);
    expect_pass(p, DT_MODES);
}

/* Regression (difftest seed 5): round rounds halves away from zero: round(2.5) is 3, where
 * NumPy, PyTorch, ONNX (and C's nearbyint) give 2. */
Test(cgraph_diff, bug_round_half_away_from_zero)
{
    dt_prog *p = dt_prog_new(SX_F32);
    int c = leaf1(p, DT_CONST, 6, (double[]){2.5, -2.5, 0.5, -0.5, 1.5, 3.5});
    dt_op(p, SX_OP_ROUND, 1, &c, NULL);
    expect_pass(p, DT_MODES);
}

/* The exponent's gradient of a^b at a = 0 (0 there) was where(a = 0, 0, G y log a): its own
 * gradient (a Hessian-vector product) sent the untaken branch's zero through mul(y, log a) as
 * 0 * log 0 = NaN. The log now reads 1 where a = 0. */
Test(cgraph_diff, bug_pow_exponent_hvp_nan_at_zero_base)
{
    dt_prog *p = dt_prog_new(SX_F64);
    int in[2] = {leaf2(p, DT_CONST, 1, 3, (double[]){1, 1, 0}),
                 dt_leaf(p, DT_INPUT, 0, NULL, (double[]){1})};
    int y = dt_op(p, SX_OP_POW, 2, in, NULL); /* difftest seed 242, shrunk */
    sx_cg_attr at = gemm_attr(1, 0, false, true);
    int m = dt_op(p, SX_OP_MATMUL, 2, (int[]){y, y}, &at);
    dt_op(p, SX_OP_QR_R, 1, &m, NULL);
    expect_pass(p, DT_HVP);
}
