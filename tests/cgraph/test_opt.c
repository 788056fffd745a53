/* The graph optimiser: each pass on graphs built to trigger it and on graphs where it must not
 * fire, random graphs with every pass on, off and alone (results equal), the fixed point, and
 * the gemm-update pass on the fused update of every optimiser of optim/ (same results as the
 * optimiser's reference formula; tests/optim/test_update.c checks the update itself). */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include <sx_autodiff.h>
#include <sx_optim.h>

static sx_cg_graph *lazy(void)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    return g;
}

static sx_cg_node *rand_input(sx_cg_graph *g, sx_rng *r, const char *name, int rank,
                              const int64_t *shape, double lo, double hi)
{
    sx_cg_node *x = sx_cg_input(g, name, SX_F64, rank, shape);
    sx_tensor *v = tu_rand(r, SX_F64, rank, shape, lo, hi);
    cr_assert_eq(sx_cg_input_set(g, x, v, SX_CG_COPY), SX_OK);
    sx_tensor_free(v);
    return x;
}

static sx_cg_node *constant(sx_cg_graph *g, int rank, const int64_t *shape, double v)
{
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_full(SX_F64, rank, shape, v, &t), SX_OK);
    sx_cg_node *c = sx_cg_const(g, t);
    sx_tensor_free(t);
    return c;
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

static sx_cg_opt_params only(sx_cg_pass p)
{
    sx_cg_opt_params o = sx_cg_opt_params_default();
    for (int i = 0; i < SX_PASS_COUNT; i++)
        o.enable[i] = i == (int)p;
    return o;
}

/* Optimise with `p`, then check that outputs evaluate to the values they had before. */
static void optimise_and_compare(sx_cg_graph *g, int n, sx_cg_node **outs,
                                 const sx_cg_opt_params *p, double rtol, sx_cg_opt_report *rep)
{
    cr_assert_eq(sx_cg_eval(g, n, outs), SX_OK, "%s", sx_last_error());
    sx_tensor *before[16];
    for (int i = 0; i < n; i++)
        cr_assert_eq(sx_tensor_clone(sx_cg_value(outs[i]), &before[i]), SX_OK);
    sx_cg_opt_report r;
    cr_assert_eq(sx_cg_optimise(g, n, outs, p, &r), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < n; i++)
        cr_assert_not_null(outs[i]);
    cr_assert_eq(sx_cg_eval(g, n, outs), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < n; i++) {
        cr_assert(tu_close(sx_cg_value(outs[i]), before[i], rtol, 0), "output %d differs", i);
        sx_tensor_free(before[i]);
    }
    if (rep != NULL)
        *rep = r;
}

Test(cgraph_opt, dce_removes_what_no_output_needs)
{
    sx_cg_graph *g = lazy();
    sx_rng r;
    sx_rng_seed(&r, 1);
    int64_t s[1] = {6};
    sx_cg_node *x = rand_input(g, &r, "x", 1, s, -1, 1);
    sx_cg_node *keep = sx_cg_sin(g, x);
    sx_cg_node *unused = sx_cg_exp(g, sx_cg_cos(g, x));
    cr_assert_not_null(unused);
    sx_cg_opt_params p = only(SX_PASS_DCE);
    sx_cg_opt_report rep;
    optimise_and_compare(g, 1, &keep, &p, 0, &rep);
    cr_assert_eq(rep.changed[SX_PASS_DCE], 2);
    cr_assert_eq(rep.nodes_after, 2);
    cr_assert_eq(count_op(g, SX_OP_EXP), 0);
    cr_assert_eq(count_op(g, SX_OP_INPUT), 1, "inputs stay: the user holds them");
    sx_cg_graph_free(g);
}

Test(cgraph_opt, simplify_identities)
{
    sx_cg_graph *g = lazy();
    sx_rng r;
    sx_rng_seed(&r, 2);
    int64_t s[2] = {3, 4}, flat[1] = {12}, t[2] = {4, 3};
    sx_cg_node *x = rand_input(g, &r, "x", 2, s, 0.5, 2);
    sx_cg_node *zero = constant(g, 2, s, 0), *one = constant(g, 0, NULL, 1);
    sx_cg_node *outs[8];
    outs[0] = sx_cg_add(g, sx_cg_add(g, x, zero), sx_cg_sub(g, x, zero)); /* x + x */
    outs[1] = sx_cg_div(g, sx_cg_mul(g, one, x), one);                    /* x */
    outs[2] = sx_cg_neg(g, sx_cg_neg(g, sx_cg_pow(g, x, one)));           /* x */
    outs[3] = sx_cg_reshape(g, sx_cg_reshape(g, x, 1, flat), 2, t);       /* one reshape */
    outs[4] = sx_cg_transpose(g, sx_cg_transpose(g, sx_cg_exp(g, x)));    /* exp x */
    outs[5] = sx_cg_exp(g, sx_cg_log(g, sx_cg_exp(g, x)));                /* exp x */
    outs[6] = sx_cg_sum(g, sx_cg_reshape(g, x, 2, (int64_t[]){1, 12}), SX_AXIS(0), false);
    outs[7] = sx_cg_mul(g, sx_cg_sin(g, x), zero); /* zeros (x assumed finite) */
    sx_cg_opt_params p = only(SX_PASS_SIMPLIFY);
    p.enable[SX_PASS_DCE] = true;
    p.enable[SX_PASS_ALGEBRA] = true; /* log(exp x) and x * 0 */
    sx_cg_opt_report rep;
    optimise_and_compare(g, 8, outs, &p, 0, &rep);
    cr_assert_gt(rep.changed[SX_PASS_SIMPLIFY], 6);
    cr_assert_geq(rep.changed[SX_PASS_ALGEBRA], 2);
    cr_assert_eq(count_op(g, SX_OP_NEG), 0);
    cr_assert_eq(count_op(g, SX_OP_POW), 0);
    cr_assert_eq(count_op(g, SX_OP_DIV), 0);
    cr_assert_eq(count_op(g, SX_OP_LOG), 0);
    cr_assert_eq(count_op(g, SX_OP_PERMUTE), 0);
    cr_assert_eq(count_op(g, SX_OP_SIN), 0, "x * 0 no longer needs x");
    cr_assert_eq(count_op(g, SX_OP_SUM), 0, "a sum over a size-1 axis is a reshape");
    sx_cg_graph_free(g);
}

/* The rewrites that change values (log(exp x) -> x, x * 0 -> 0) are off by default: the default
 * passes keep every bit, also of log(exp(0.995)) (found by the differential tester). */
Test(cgraph_opt, algebra_is_off_by_default_so_values_keep_their_bits)
{
    sx_cg_graph *g = lazy();
    int64_t s[1] = {2};
    sx_tensor *v = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 1, s, (double[]){1.01, 0.995}, 2, &v), SX_OK);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 1, s);
    cr_assert_eq(sx_cg_input_set(g, x, v, SX_CG_COPY), SX_OK);
    sx_tensor_free(v);
    sx_cg_node *outs[2] = {sx_cg_log(g, sx_cg_exp(g, x)),
                           sx_cg_mul(g, sx_cg_sin(g, x), constant(g, 1, s, 0))};
    sx_cg_opt_params p = sx_cg_opt_params_default();
    cr_assert_not(p.enable[SX_PASS_ALGEBRA]);
    p.enable[SX_PASS_ELEMWISE_FUSION] = false; /* so that the log and sin nodes can be counted */
    sx_cg_opt_report rep;
    optimise_and_compare(g, 2, outs, &p, 0, &rep);
    cr_assert_eq(rep.changed[SX_PASS_ALGEBRA], 0);
    cr_assert_eq(count_op(g, SX_OP_LOG), 1);
    cr_assert_eq(count_op(g, SX_OP_SIN), 1);
    sx_cg_graph_free(g);
}

Test(cgraph_opt, simplify_keeps_what_is_not_an_identity)
{
    sx_cg_graph *g = lazy();
    sx_rng r;
    sx_rng_seed(&r, 3);
    int64_t s[2] = {3, 4}, row[1] = {4};
    sx_cg_node *x = rand_input(g, &r, "x", 1, row, -2, 2);
    /* x + 0 where 0 is (3,4): broadcasting grows x, so the add stays */
    sx_cg_node *grown = sx_cg_add(g, x, constant(g, 2, s, 0));
    /* exp(log x) for x that may be negative stays (log of a negative is NaN) */
    sx_cg_node *e = sx_cg_exp(g, sx_cg_log(g, x));
    sx_cg_node *outs[2] = {grown, e};
    sx_cg_opt_params p = only(SX_PASS_SIMPLIFY);
    p.enable[SX_PASS_ALGEBRA] = true;
    optimise_and_compare(g, 2, outs, &p, 0, NULL);
    cr_assert_eq(count_op(g, SX_OP_ADD), 1);
    cr_assert_eq(count_op(g, SX_OP_LOG), 1);
    sx_cg_graph_free(g);
}

Test(cgraph_opt, constant_folding_and_cse)
{
    sx_cg_graph *g = lazy();
    sx_rng r;
    sx_rng_seed(&r, 4);
    int64_t s[1] = {5};
    sx_cg_node *x = rand_input(g, &r, "x", 1, s, -1, 1);
    sx_cg_node *c = sx_cg_exp(g, sx_cg_add(g, constant(g, 1, s, 1.5), constant(g, 0, NULL, 2)));
    sx_cg_node *a = sx_cg_mul(g, x, c);
    /* after simplification exp(x * 1) is exp(x): a duplicate that CSE merges */
    sx_cg_node *d1 = sx_cg_exp(g, x);
    sx_cg_node *d2 = sx_cg_exp(g, sx_cg_mul(g, x, constant(g, 0, NULL, 1)));
    sx_cg_node *outs[2] = {a, sx_cg_add(g, d1, d2)};
    sx_cg_opt_report rep;
    sx_cg_opt_params p = sx_cg_opt_params_default();
    p.enable[SX_PASS_ELEMWISE_FUSION] = false;
    p.enable[SX_PASS_FMA] = false;
    optimise_and_compare(g, 2, outs, &p, 0, &rep);
    cr_assert_geq(rep.changed[SX_PASS_CONST_FOLD], 2);
    cr_assert_geq(rep.changed[SX_PASS_CSE], 1);
    cr_assert_eq(count_op(g, SX_OP_EXP), 1, "one exp of x left, the constant exp folded");
    sx_cg_graph_free(g);
}

Test(cgraph_opt, broadcast_feeding_a_broadcasting_op_is_dropped)
{
    sx_cg_graph *g = lazy();
    sx_rng r;
    sx_rng_seed(&r, 5);
    int64_t s[2] = {4, 5}, b[1] = {5}, col[2] = {4, 1};
    sx_cg_node *x = rand_input(g, &r, "x", 2, s, -1, 1);
    sx_cg_node *bias = rand_input(g, &r, "b", 1, b, -1, 1);
    sx_cg_node *c = rand_input(g, &r, "c", 2, col, -1, 1);
    sx_cg_node *y1 = sx_cg_add(g, x, sx_cg_broadcast(g, bias, 2, s));
    sx_cg_node *y2 = sx_cg_mul(g, x, sx_cg_repeat(g, c, (int64_t[]){1, 5}));
    /* a repeat of a non-size-1 axis is real data movement: it stays */
    sx_cg_node *y3 =
        sx_cg_add(g, sx_cg_tile(g, x, (int64_t[]){2, 1}), sx_cg_tile(g, x, (int64_t[]){2, 1}));
    sx_cg_node *outs[3] = {y1, y2, y3};
    sx_cg_opt_params p = only(SX_PASS_BROADCAST);
    p.enable[SX_PASS_DCE] = true;
    optimise_and_compare(g, 3, outs, &p, 0, NULL);
    cr_assert_eq(count_op(g, SX_OP_BROADCAST), 0);
    cr_assert_eq(count_op(g, SX_OP_REPEAT), 0);
    cr_assert_eq(count_op(g, SX_OP_TILE), 1);
    sx_cg_graph_free(g);
}

Test(cgraph_opt, fma_fusion_only_when_the_product_is_private)
{
    sx_cg_graph *g = lazy();
    sx_rng r;
    sx_rng_seed(&r, 6);
    int64_t s[2] = {3, 3};
    sx_cg_node *a = rand_input(g, &r, "a", 2, s, -1, 1);
    sx_cg_node *b = rand_input(g, &r, "b", 2, s, -1, 1);
    sx_cg_node *c = rand_input(g, &r, "c", 2, s, -1, 1);
    sx_cg_node *fused = sx_cg_add(g, c, sx_cg_mul(g, a, b));
    sx_cg_node *shared = sx_cg_mul(g, a, c);
    sx_cg_node *not_fused = sx_cg_add(g, shared, b);
    sx_cg_node *outs[3] = {fused, not_fused, sx_cg_sin(g, shared)};
    sx_cg_opt_params p = only(SX_PASS_FMA);
    optimise_and_compare(g, 3, outs, &p, 0, NULL);
    cr_assert_eq(sx_cg_node_op(fused), SX_OP_FMA);
    cr_assert_eq(sx_cg_node_op(not_fused), SX_OP_ADD, "the product has another reader");
    sx_cg_graph_free(g);
}

Test(cgraph_opt, gemm_folding)
{
    sx_cg_graph *g = lazy();
    sx_rng r;
    sx_rng_seed(&r, 7);
    int64_t sa[2] = {6, 4}, sb[2] = {6, 5}, sc[2] = {4, 5}, bias[1] = {5};
    sx_cg_node *a = rand_input(g, &r, "a", 2, sa, -1, 1);
    sx_cg_node *b = rand_input(g, &r, "b", 2, sb, -1, 1);
    sx_cg_node *c = rand_input(g, &r, "c", 2, sc, -1, 1);
    sx_cg_node *bv = rand_input(g, &r, "bias", 1, bias, -1, 1);
    /* 3 * (a^T b) + c and (a^T b) + bias: one matmul call each */
    sx_cg_node *y1 = sx_cg_add(g,
                               sx_cg_mul(g, sx_cg_matmul(g, sx_cg_transpose(g, a), b, false, false),
                                         constant(g, 0, NULL, 3)),
                               c);
    sx_cg_node *y2 = sx_cg_add(g, sx_cg_matmul(g, a, b, true, false), bv);
    sx_cg_node *outs[2] = {y1, y2};
    sx_cg_opt_params p = only(SX_PASS_GEMM_FOLD);
    p.enable[SX_PASS_DCE] = true;
    optimise_and_compare(g, 2, outs, &p, 0, NULL); /* bit for bit */
    cr_assert_eq(count_op(g, SX_OP_PERMUTE), 0);
    cr_assert_eq(count_op(g, SX_OP_MUL), 0);
    cr_assert_eq(count_op(g, SX_OP_ADD), 0);
    cr_assert_eq(count_op(g, SX_OP_MATMUL), 2);
    sx_cg_graph_free(g);
}

/* A transposed product is the product of the transposed factors, swapped: batched, broadcast
 * and with transposed factors, bit for bit; a product read by another node stays. */
Test(cgraph_opt, transposed_product_swaps_its_factors)
{
    sx_cg_graph *g = lazy();
    sx_rng r;
    sx_rng_seed(&r, 9);
    int64_t sa[3] = {2, 3, 300}, sb[2] = {7, 300}, sc[3] = {2, 300, 3}, sd[4] = {2, 1, 5, 3};
    sx_cg_node *a = rand_input(g, &r, "a", 3, sa, -1, 1);
    sx_cg_node *b = rand_input(g, &r, "b", 2, sb, -1, 1);
    sx_cg_node *c = rand_input(g, &r, "c", 3, sc, -1, 1);
    sx_cg_node *d = rand_input(g, &r, "d", 4, sd, -1, 1);
    sx_cg_node *shared = sx_cg_matmul(g, c, a, true, true); /* (2, 3, 3), read twice */
    sx_cg_node *outs[4] = {
        sx_cg_transpose(g, sx_cg_gemm(g, a, b, false, true, 0.5, NULL, 0)), /* (2, 7, 3) */
        sx_cg_transpose(g, sx_cg_matmul(g, d, c, false, true)),             /* (2, 2, 300, 5) */
        sx_cg_transpose(g, shared), shared};
    for (int i = 0; i < 4; i++)
        cr_assert_not_null(outs[i], "%s", sx_last_error());
    sx_cg_opt_params p = only(SX_PASS_GEMM_FOLD);
    p.enable[SX_PASS_DCE] = true;
    optimise_and_compare(g, 4, outs, &p, 0, NULL); /* bit for bit */
    cr_assert_eq(count_op(g, SX_OP_PERMUTE), 1, "only the transpose of the shared product");
    cr_assert_eq(count_op(g, SX_OP_MATMUL), 3);
    sx_cg_graph_free(g);
}

/* Folding keeps the bits of the unfolded nodes for inner sizes of one GEMM K block and of
 * several: the addend is added after the product, a scalar scales the finished sum. A scalar
 * times a product that already has a factor or an addend is left alone (one rounding fewer
 * would change the bits). */
Test(cgraph_opt, gemm_folding_keeps_bits_past_one_k_block)
{
    for (int q = 0; q < 2; q++) {
        const int64_t k = q == 0 ? 7 : 700;
        sx_cg_graph *g = lazy();
        sx_rng r;
        sx_rng_seed(&r, 8);
        int64_t sa[2] = {9, k}, sb[2] = {k, 11}, sc[2] = {9, 11}, bias[1] = {11};
        sx_cg_node *a = rand_input(g, &r, "a", 2, sa, -1, 1), *b[5];
        for (int i = 0; i < 5; i++) /* one product each (equal ones would be one node) */
            b[i] =
                rand_input(g, &r, (const char *[]){"b0", "b1", "b2", "b3", "b4"}[i], 2, sb, -1, 1);
        sx_cg_node *c = rand_input(g, &r, "c", 2, sc, -1, 1);
        sx_cg_node *bv = rand_input(g, &r, "bias", 1, bias, -1, 1);
        sx_cg_node *three = constant(g, 0, NULL, 3), *tenth = constant(g, 0, NULL, 0.1);
        sx_cg_node *outs[5] = {
            /* 0.1 (a b) + bias: alpha 0.1, then the addend (2 folds) */
            sx_cg_add(g, sx_cg_mul(g, sx_cg_matmul(g, a, b[0], false, false), tenth), bv),
            /* (a b) + c, then * 3: the addend folds, the scalar does not (1) */
            sx_cg_mul(g, sx_cg_add(g, sx_cg_matmul(g, a, b[1], false, false), c), three),
            /* 3 * gemm(a, b, 0.1): not folded (0) */
            sx_cg_mul(g, three, sx_cg_gemm(g, a, b[2], false, false, 0.1, NULL, 0)),
            /* c + (b^T a^T)^T: the inner transposes go into the flags, the outer one swaps
             * the factors back, then c becomes the addend (4) */
            sx_cg_add(g, c,
                      sx_cg_transpose(g, sx_cg_matmul(g, sx_cg_transpose(g, b[3]),
                                                      sx_cg_transpose(g, a), false, false))),
            /* a gemm with an addend scaled by beta (0) */
            sx_cg_gemm(g, a, b[4], false, false, 0.1, c, -1.5)};
        for (int i = 0; i < 5; i++)
            cr_assert_not_null(outs[i], "%s", sx_last_error());
        sx_cg_opt_params p = only(SX_PASS_GEMM_FOLD);
        p.enable[SX_PASS_DCE] = true;
        sx_cg_opt_report rep;
        optimise_and_compare(g, 5, outs, &p, 0, &rep);
        cr_assert_eq(rep.changed[SX_PASS_GEMM_FOLD], 7, "k %lld: %lld folds", (long long)k,
                     (long long)rep.changed[SX_PASS_GEMM_FOLD]);
        cr_assert_eq(count_op(g, SX_OP_MUL), 2, "the two scalars over a gemm stay");
        cr_assert_eq(count_op(g, SX_OP_PERMUTE), 0);
        cr_assert_eq(count_op(g, SX_OP_ADD), 0);
        sx_cg_graph_free(g);
    }
}

Test(cgraph_opt, elementwise_chain_runs_as_one_node)
{
    sx_cg_graph *g = lazy();
    sx_rng r;
    sx_rng_seed(&r, 8);
    int64_t s[2] = {37, 129};
    sx_cg_node *x = rand_input(g, &r, "x", 2, s, -1, 1);
    sx_cg_node *y = rand_input(g, &r, "y", 2, s, -1, 1);
    /* tanh(exp(x) * y - 0.5) + relu(x) * 2 */
    sx_cg_node *z =
        sx_cg_add(g, sx_cg_tanh(g, sx_cg_add_scalar(g, sx_cg_mul(g, sx_cg_exp(g, x), y), -0.5)),
                  sx_cg_mul_scalar(g, sx_cg_relu(g, x), 2));
    sx_cg_opt_params p = only(SX_PASS_ELEMWISE_FUSION);
    sx_cg_opt_report rep;
    optimise_and_compare(g, 1, &z, &p, 0, &rep);
    cr_assert_eq(sx_cg_node_op(z), SX_OP_FUSED);
    cr_assert_eq(rep.changed[SX_PASS_ELEMWISE_FUSION], 6);
    cr_assert_eq(rep.nodes_after, 5, "x, y, two scalars and the fused node");
    sx_cg_graph_free(g);
}

/* A per-channel bias (trailing axes) joins the chain as a repeating operand: relu(x + b) * 2
 * over NHWC is one node with the same values; an operand that broadcasts otherwise ((4,1) over
 * (2,3,4,5): not a repetition of whole rows) stays outside, and its add runs on its own. */
Test(cgraph_opt, elementwise_chain_takes_a_bias_over_the_channels)
{
    for (int c = 0; c < 2; c++) {
        sx_cg_graph *g = lazy();
        sx_rng r;
        sx_rng_seed(&r, 9);
        int64_t xs[4] = {2, 3, 4, 5}, bs[2] = {c == 0 ? 1 : 4, c == 0 ? 5 : 1};
        sx_cg_node *x = rand_input(g, &r, "x", 4, xs, -1, 1);
        sx_cg_node *b = rand_input(g, &r, "b", 2, bs, -1, 1);
        sx_cg_node *z = sx_cg_mul_scalar(g, sx_cg_relu(g, sx_cg_add(g, x, b)), 2);
        sx_cg_opt_params p = only(SX_PASS_ELEMWISE_FUSION);
        sx_cg_opt_report rep;
        optimise_and_compare(g, 1, &z, &p, 0, &rep);
        cr_assert_eq(sx_cg_node_op(z), SX_OP_FUSED);
        cr_assert_eq(count_op(g, SX_OP_ADD), c == 0 ? 0 : 1, "case %d", c);
        cr_assert_eq(count_op(g, SX_OP_RELU), 0);
        sx_cg_graph_free(g);
    }
}

/* ---------------------------------------------------------------- training steps */

/* Three training steps: lr = lr0 / step (a decaying schedule fed as an input), step = 1, 2, 3. */
static void three_steps(sx_cg_graph *g, sx_dtype dt, double lr0, sx_cg_node *lr, sx_cg_node *step,
                        int n, sx_cg_node *const *outs)
{
    for (int it = 1; it <= 3; it++) {
        sx_tensor *lv = NULL, *sv = NULL;
        cr_assert_eq(sx_tensor_scalar(dt, lr0 / it, &lv), SX_OK);
        cr_assert_eq(sx_tensor_scalar(dt, it, &sv), SX_OK);
        cr_assert_eq(sx_cg_input_set(g, lr, lv, SX_CG_COPY), SX_OK);
        cr_assert_eq(sx_cg_input_set(g, step, sv, SX_CG_COPY), SX_OK);
        cr_assert_eq(sx_cg_eval(g, n, outs), SX_OK, "%s", sx_last_error());
        sx_tensor_free(lv);
        sx_tensor_free(sv);
    }
}

/* Every parameter of g (weights and optimiser states), concatenated in node order. */
static sx_tensor *params_of(const sx_cg_graph *g, sx_dtype dt)
{
    int64_t total = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *nd = sx_cg_graph_node(g, i);
        if (nd && sx_cg_node_op(nd) == SX_OP_PARAM)
            total += sx_cg_node_size(nd);
    }
    sx_tensor *all = NULL;
    cr_assert_eq(sx_tensor_new(dt, 1, &total, &all), SX_OK);
    int64_t at = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *nd = sx_cg_graph_node(g, i);
        if (nd && sx_cg_node_op(nd) == SX_OP_PARAM)
            for (int64_t j = 0; j < sx_cg_node_size(nd); j++)
                sx_tensor_set(all, at++, sx_tensor_get(sx_cg_value(nd), j));
    }
    return all;
}

/* d/dz of sum(maxpool2d(relu(z)) * w) in dtype dt, through the pool-relu pass (on or off),
 * frozen with a memory plan. Returns the gradient; *fused counts maxpool2d_relu_backward nodes and
 * *inplace the planner's in-place nodes. `cut` != 0 compares with 0.5 instead of 0 (no rewrite);
 * `reuse` adds relu(z) to the result, so relu's output lives past the pooling's backward. */
static sx_tensor *pool_relu_grad(sx_dtype dt, sx_pool2d_params pp, bool pass_on, bool cut,
                                 bool reuse, int64_t *fused, int64_t *inplace, size_t *arena)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &g), SX_OK);
    sx_rng r;
    sx_rng_seed(&r, 21);
    int64_t zs[4] = {2, 7, 6, 5}, ys[4];
    sx_tensor *z0 = tu_rand(&r, dt, 4, zs, -1, 1);
    for (int64_t i = 0; i < z0->size; i += 7) /* exact zeros: relu'(0) = 0 on both paths */
        sx_tensor_set(z0, i, 0.0);
    sx_cg_node *z = sx_cg_param(g, "z", z0);
    sx_cg_node *k = sx_cg_relu(g, z), *p = sx_cg_maxpool2d(g, k, &pp);
    memcpy(ys, sx_cg_node_shape(p), sizeof ys);
    sx_tensor *w0 = tu_rand(&r, dt, 4, ys, -1, 1);
    sx_cg_node *loss = sx_cg_sum(g, sx_cg_mul(g, p, sx_cg_const(g, w0)), SX_AXES_ALL, false);
    sx_cg_node *gz = NULL;
    if (cut) { /* the same shape of graph with a mask that is not relu's */
        sx_cg_node *gp = sx_cg_const(g, w0);
        sx_cg_node *gt = sx_cg_gt(g, k, sx_cg_scalar_like(g, k, 0.5));
        gz =
            sx_cg_where(g, gt, sx_cg_maxpool2d_backward(g, k, gp, &pp), sx_cg_scalar_like(g, k, 0));
    } else {
        cr_assert_eq(sx_ad_grad(g, loss, 1, &z, &gz), SX_OK, "%s", sx_last_error());
    }
    gz = sx_cg_mul_scalar(g, gz, 2.0); /* exact; leaves the gradient to the planner */
    if (reuse)
        gz = sx_cg_add(g, gz, k);
    sx_cg_opt_params op = sx_cg_opt_params_default();
    op.enable[SX_PASS_POOL_RELU] = pass_on;
    cr_assert_eq(sx_cg_optimise(g, 1, &gz, &op, NULL), SX_OK, "%s", sx_last_error());
    *fused = count_op(g, SX_OP_MAXPOOL2D_RELU_BACKWARD);
    sx_cg_freeze_params fp = sx_cg_freeze_params_default();
    sx_cg_plan_report rep;
    cr_assert_eq(sx_cg_freeze_ex(g, 1, &gz, &fp, &rep), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_plan_check(g), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(g, 1, &gz), SX_OK, "%s", sx_last_error());
    *inplace = rep.inplace_nodes;
    *arena = rep.arena_bytes;
    sx_tensor *out = NULL;
    cr_assert_eq(sx_tensor_clone(sx_cg_value(gz), &out), SX_OK);
    sx_tensor_free(z0);
    sx_tensor_free(w0);
    sx_cg_graph_free(g);
    return out;
}

Test(cgraph_opt, pool_relu_fuses_the_backward_pass_and_runs_it_in_place)
{
    sx_pool2d_params disjoint = {.kernel_h = 2,
                                 .kernel_w = 2,
                                 .stride_h = 2,
                                 .stride_w = 2,
                                 .padding = SX_PAD_SAME},
                     overlap = {.kernel_h = 3,
                                .kernel_w = 3,
                                .stride_h = 1,
                                .stride_w = 1,
                                .padding = SX_PAD_SAME};
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = d ? SX_F64 : SX_F32;
        size_t bytes = 2 * 7 * 6 * 5 * sx_dtype_size(dt);
        for (int c = 0; c < 4; c++) {
            sx_pool2d_params pp = c == 1 ? overlap : disjoint;
            bool cut = c == 2, reuse = c == 3;
            int64_t f_on, f_off, ip_on, ip_off;
            size_t a_on, a_off;
            sx_tensor *on = pool_relu_grad(dt, pp, true, cut, reuse, &f_on, &ip_on, &a_on);
            sx_tensor *off = pool_relu_grad(dt, pp, false, cut, reuse, &f_off, &ip_off, &a_off);
            cr_assert(memcmp(on->data, off->data, bytes) == 0, "case %d %s: results differ", c,
                      sx_dtype_name(dt));
            cr_assert_eq(f_off, 0);
            cr_assert_eq(f_on, cut ? 0 : 1, "case %d: %lld fused nodes", c, (long long)f_on);
            if (c == 0) { /* relu's output dies at the fused op, which takes its block */
                cr_assert_gt(ip_on, ip_off, "case %d: in place %lld vs %lld", c, (long long)ip_on,
                             (long long)ip_off);
                cr_assert_lt(a_on, a_off, "case %d: arena %zu vs %zu", c, a_on, a_off);
            } else {
                cr_assert_leq(a_on, a_off, "case %d: arena %zu vs %zu", c, a_on, a_off);
            }
            sx_tensor_free(on);
            sx_tensor_free(off);
        }
    }
}

/* A dense layer tanh(x @ w) trained for three steps with optimiser k: the optimiser's reference
 * formula in plain ops, unoptimised (pass = -1), optim's fused update unoptimised (pass = -2),
 * with every pass (SX_PASS_COUNT), or every pass but one. The weight gradient is x^T @ dy, a
 * matmul that the gemm-update pass folds into the update. Returns w and its states. */
static sx_tensor *train_dense(sx_optim_kind k, int pass_off, sx_dtype dt, int64_t *n_mm)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &g), SX_OK);
    sx_rng r;
    sx_rng_seed(&r, 7);
    int64_t ws[2] = {37, 9}, xs[2] = {6, 37}, ys[2] = {6, 9};
    sx_tensor *w0 = tu_rand(&r, dt, 2, ws, -0.3, 0.3);
    sx_cg_node *w = sx_cg_param(g, "w", w0);
    sx_cg_node *x = sx_cg_input(g, "x", dt, 2, xs);
    sx_cg_node *y = sx_cg_input(g, "y", dt, 2, ys);
    sx_cg_node *lr = sx_cg_input(g, "lr", dt, 0, NULL);
    sx_cg_node *step = sx_cg_input(g, "step", dt, 0, NULL);
    sx_cg_node *loss = sx_cg_sum(
        g, sx_cg_sqr(g, sx_cg_sub(g, sx_cg_tanh(g, sx_cg_matmul(g, x, w, false, false)), y)),
        SX_AXES_ALL, false);
    sx_cg_node *gw = NULL;
    cr_assert_eq(sx_ad_grad(g, loss, 1, &w, &gw), SX_OK, "%s", sx_last_error());
    sx_optim_params op = sx_optim_params_default(k);
    sx_cg_node *outs[5] = {loss};
    int n = 0;
    if (pass_off == -1)
        n = tu_optim_reference(g, &op, w, gw, lr, step, NULL, outs + 1);
    else
        cr_assert_eq(sx_optim_update(g, &op, w, gw, lr, step, NULL, outs + 1, &n), SX_OK, "%s",
                     sx_last_error());
    *n_mm = 0;
    if (pass_off >= 0) {
        sx_cg_opt_params p = sx_cg_opt_params_default();
        if (pass_off < SX_PASS_COUNT)
            p.enable[pass_off] = false;
        cr_assert_eq(sx_cg_optimise(g, n + 1, outs, &p, NULL), SX_OK, "%s", sx_last_error());
        *n_mm = count_op(g, SX_OP_MATMUL_UPDATE);
    }
    sx_tensor *xv = tu_rand(&r, dt, 2, xs, -1, 1), *yv = tu_rand(&r, dt, 2, ys, -1, 1);
    cr_assert_eq(sx_cg_input_set(g, x, xv, SX_CG_COPY), SX_OK);
    cr_assert_eq(sx_cg_input_set(g, y, yv, SX_CG_COPY), SX_OK);
    three_steps(g, dt, 0.05, lr, step, n + 1, outs);
    sx_tensor *all = params_of(g, dt);
    sx_tensor_free(w0);
    sx_tensor_free(xv);
    sx_tensor_free(yv);
    sx_cg_graph_free(g);
    return all;
}

Test(cgraph_opt, gemm_update_folds_the_weight_gradient_with_equal_results)
{
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < SX_OPTIM_COUNT; k++) {
            int64_t mm_plain, mm_all, mm_off, mm_unopt;
            sx_tensor *plain = train_dense((sx_optim_kind)k, -1, (sx_dtype)dt, &mm_plain);
            sx_tensor *unopt = train_dense((sx_optim_kind)k, -2, (sx_dtype)dt, &mm_unopt);
            sx_tensor *all = train_dense((sx_optim_kind)k, SX_PASS_COUNT, (sx_dtype)dt, &mm_all);
            sx_tensor *off =
                train_dense((sx_optim_kind)k, SX_PASS_GEMM_UPDATE, (sx_dtype)dt, &mm_off);
            cr_assert_eq(mm_all, 1, "%s: %lld matmul_update nodes", sx_optim_name(k),
                         (long long)mm_all);
            cr_assert_eq(mm_off, 0);
            size_t bytes = (size_t)plain->size * sx_dtype_size(plain->dtype);
            cr_assert_eq(memcmp(plain->data, all->data, bytes), 0, "%s %s: fused differs",
                         sx_optim_name(k), sx_dtype_name(dt));
            cr_assert_eq(memcmp(plain->data, off->data, bytes), 0, "%s %s: without the pass",
                         sx_optim_name(k), sx_dtype_name(dt));
            cr_assert_eq(memcmp(plain->data, unopt->data, bytes), 0, "%s %s: unoptimised",
                         sx_optim_name(k), sx_dtype_name(dt));
            sx_tensor_free(plain);
            sx_tensor_free(unopt);
            sx_tensor_free(all);
            sx_tensor_free(off);
        }
}

/* ---------------------------------------------------------------- random graphs */

/* A random graph of mixed ops over (4,5) tensors, built the same way for a given seed. */
static int build_random(sx_cg_graph *g, uint64_t seed, sx_cg_node **outs)
{
    sx_rng r;
    sx_rng_seed(&r, seed);
    int64_t s[2] = {4, 5}, row[1] = {5}, sq[2] = {5, 5};
    sx_cg_node *pool[64];
    int n = 0;
    pool[n++] = rand_input(g, &r, "x", 2, s, 0.2, 1);
    pool[n++] = rand_input(g, &r, "y", 2, s, -1, 1);
    sx_cg_node *b = rand_input(g, &r, "b", 1, row, -1, 1);
    sx_cg_node *w = rand_input(g, &r, "w", 2, sq, -0.5, 0.5);
    sx_cg_node *zero = constant(g, 2, s, 0), *one = constant(g, 0, NULL, 1);
    sx_cg_node *two = constant(g, 0, NULL, 2);
    for (int step = 0; step < 24; step++) {
        sx_cg_node *a = pool[sx_rng_below(&r, (uint64_t)n)];
        sx_cg_node *c = pool[sx_rng_below(&r, (uint64_t)n)];
        sx_cg_node *y = NULL;
        switch (sx_rng_below(&r, 14)) {
        case 0:
            y = sx_cg_add(g, a, c);
            break;
        case 1:
            y = sx_cg_mul(g, a, c);
            break;
        case 2:
            y = sx_cg_sub(g, sx_cg_tanh(g, a), c);
            break;
        case 3:
            y = sx_cg_add(g, sx_cg_mul(g, a, c), pool[0]);
            break;
        case 4:
            y = sx_cg_add(g, a, zero);
            break;
        case 5:
            y = sx_cg_mul(g, sx_cg_mul(g, a, one), two);
            break;
        case 6:
            y = sx_cg_add(g, a, sx_cg_broadcast(g, b, 2, s));
            break;
        case 7:
            y = sx_cg_add(g, sx_cg_mul(g, sx_cg_matmul(g, a, w, false, false), two), c);
            break;
        case 8:
            y = sx_cg_matmul(g, sx_cg_transpose(g, sx_cg_transpose(g, a)), w, false, true);
            break;
        case 9:
            y = sx_cg_sin(g, sx_cg_neg(g, sx_cg_neg(g, a)));
            break;
        case 10:
            y = sx_cg_sum(g, sx_cg_mul(g, a, c), SX_AXIS(1), true);
            break;
        case 11:
            y = sx_cg_exp(g, sx_cg_log(g, sx_cg_sqr(g, a)));
            break;
        case 12:
            y = sx_cg_relu(g, sx_cg_sub(g, a, sx_cg_add(g, one, one)));
            break;
        default:
            y = sx_cg_reshape(
                g, sx_cg_reshape(g, sx_cg_sqrt(g, sx_cg_abs(g, a)), 1, (int64_t[]){20}), 2, s);
            break;
        }
        cr_assert_not_null(y, "%s", sx_last_error());
        if (sx_cg_node_size(y) == 20 && sx_cg_node_rank(y) == 2)
            pool[n++] = y;
        else
            pool[n++] = sx_cg_add(g, sx_cg_broadcast(g, y, 2, s), zero);
    }
    outs[0] = pool[n - 1];
    outs[1] = pool[n - 2];
    outs[2] = pool[2 + sx_rng_below(&r, (uint64_t)(n - 2))];
    return 3;
}

Test(cgraph_opt, random_graphs_same_results_with_any_passes)
{
    for (uint64_t seed = 1; seed <= 60; seed++) {
        /* reference: no optimisation */
        sx_cg_graph *g0 = lazy();
        sx_cg_node *o0[3];
        int n = build_random(g0, seed, o0);
        cr_assert_eq(sx_cg_eval(g0, n, o0), SX_OK, "%s", sx_last_error());
        for (int cfg = -3; cfg < SX_PASS_COUNT; cfg++) {
            sx_cg_opt_params p = cfg <= -2 ? sx_cg_opt_params_default() : only((sx_cg_pass)cfg);
            if (cfg == -1)
                for (int i = 0; i < SX_PASS_COUNT; i++)
                    p.enable[i] = false;
            if (cfg == -3)
                p.enable[SX_PASS_SIMPLIFY] = false;
            sx_cg_graph *g = lazy();
            sx_cg_node *o[3];
            build_random(g, seed, o);
            sx_cg_opt_report rep;
            cr_assert_eq(sx_cg_optimise(g, n, o, &p, &rep), SX_OK, "seed %llu cfg %d: %s",
                         (unsigned long long)seed, cfg, sx_last_error());
            cr_assert_eq(sx_cg_eval(g, n, o), SX_OK, "%s", sx_last_error());
            /* every pass keeps the bits but algebra (off by default), whose exp(log x) -> x
               is more exact than the two roundings it replaces: values within 1e-12 */
            bool simplify = cfg == SX_PASS_ALGEBRA;
            for (int i = 0; i < n; i++) {
                const sx_tensor *got = sx_cg_value(o[i]), *want = sx_cg_value(o0[i]);
                cr_assert(simplify ? tu_close(got, want, 1e-12, 1e-12)
                                   : memcmp(got->data, want->data,
                                            (size_t)got->size * sx_dtype_size(got->dtype)) == 0,
                          "seed %llu pass %s output %d", (unsigned long long)seed,
                          cfg == -3 ? "all but simplify"
                          : cfg < 0 ? "all/none"
                                    : sx_cg_pass_name(cfg),
                          i);
            }
            if (cfg == -2) {
                /* a second run finds nothing more to do */
                sx_cg_opt_report again;
                cr_assert_eq(sx_cg_optimise(g, n, o, NULL, &again), SX_OK);
                for (int ps = 0; ps < SX_PASS_COUNT; ps++)
                    cr_assert_eq(again.changed[ps], 0, "seed %llu: pass %s changed %lld again",
                                 (unsigned long long)seed, sx_cg_pass_name(ps),
                                 (long long)again.changed[ps]);
                cr_assert_leq(rep.nodes_after, rep.nodes_before);
            }
            sx_cg_graph_free(g);
        }
        sx_cg_graph_free(g0);
    }
}

Test(cgraph_opt, errors)
{
    sx_cg_graph *g = lazy();
    int64_t s[1] = {3};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 1, s);
    sx_cg_node *y = sx_cg_exp(g, x);
    cr_assert_eq(sx_cg_optimise(g, 0, &y, NULL, NULL), SX_E_ARG);
    cr_assert_eq(sx_cg_optimise(NULL, 1, &y, NULL, NULL), SX_E_ARG);
    cr_assert_eq(sx_cg_freeze(g, 1, &y), SX_OK);
    cr_assert_eq(sx_cg_optimise(g, 1, &y, NULL, NULL), SX_E_STATE);
    sx_cg_graph *e = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_EAGER, SX_F64, &e), SX_OK);
    sx_cg_node *z = sx_cg_scalar(e, 1);
    cr_assert_eq(sx_cg_optimise(e, 1, &z, NULL, NULL), SX_E_STATE);
    sx_cg_graph_free(g);
    sx_cg_graph_free(e);
}
