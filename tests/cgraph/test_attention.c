/* The fused attention ops' constructors: shapes of the packed output and gradients, the o and lse
 * slices, and every documented error (recorded on the graph, naming the constructor). The values
 * and gradients are checked from the op samples (test_ops, test_grad, test_higher). */
#include "testutil.h"

#include <sx_autodiff.h>

#include <math.h>
#include <string.h>

static sx_cg_node *leaf(sx_cg_graph *g, sx_dtype dt, int rank, const int64_t *shape)
{
    return sx_cg_input(g, "x", dt, rank, shape);
}

static void expect_error(sx_cg_graph *g, sx_cg_node *n, sx_status want, const char *who)
{
    cr_assert_null(n);
    cr_assert_eq(sx_cg_graph_status(g), want, "%s", sx_last_error());
    cr_assert(strstr(sx_last_error(), who) != NULL, "%s", sx_last_error());
    sx_cg_graph_status_clear(g);
}

Test(cgraph_attention, shapes_of_the_packed_values)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    sx_cg_node *q = leaf(g, SX_F32, 3, (int64_t[]){6, 3, 8}),
               *k = leaf(g, SX_F32, 3, (int64_t[]){6, 5, 8});
    sx_cg_node *y = sx_cg_attention(g, q, k, k, 0.5, true);
    cr_assert_not_null(y, "%s", sx_last_error());
    cr_assert_eq(sx_cg_node_rank(y), 3);
    cr_assert(memcmp(sx_cg_node_shape(y), (int64_t[]){6, 3, 9}, 3 * sizeof(int64_t)) == 0);
    sx_cg_node *o = sx_cg_attention_o(g, y), *lse = sx_cg_attention_lse(g, y);
    cr_assert(memcmp(sx_cg_node_shape(o), (int64_t[]){6, 3, 8}, 3 * sizeof(int64_t)) == 0);
    cr_assert_eq(sx_cg_node_rank(lse), 2);
    cr_assert(memcmp(sx_cg_node_shape(lse), (int64_t[]){6, 3}, 2 * sizeof(int64_t)) == 0);
    sx_cg_node *b = sx_cg_attention_backward(g, q, k, k, y, y, 0.5, true);
    cr_assert_not_null(b, "%s", sx_last_error());
    cr_assert(memcmp(sx_cg_node_shape(b), (int64_t[]){6, 13, 8}, 3 * sizeof(int64_t)) == 0);
    sx_cg_graph_free(g);
}

Test(cgraph_attention, errors_name_the_constructor)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    sx_cg_node *q = leaf(g, SX_F32, 3, (int64_t[]){2, 4, 3}),
               *k = leaf(g, SX_F32, 3, (int64_t[]){2, 3, 3});
    sx_cg_node *q2 = leaf(g, SX_F32, 2, (int64_t[]){4, 3}),
               *qd = leaf(g, SX_F64, 3, (int64_t[]){2, 4, 3});
    sx_cg_node *k4 = leaf(g, SX_F32, 3, (int64_t[]){2, 3, 4});
    expect_error(g, sx_cg_attention(g, q2, k, k, 1, false), SX_E_RANK, "sx_cg_attention");
    expect_error(g, sx_cg_attention(g, q, k4, k4, 1, false), SX_E_SHAPE, "sx_cg_attention");
    expect_error(g, sx_cg_attention(g, q, k, k4, 1, false), SX_E_SHAPE, "sx_cg_attention");
    expect_error(g, sx_cg_attention(g, q, k, k, 1, true), SX_E_SHAPE, "causal");
    expect_error(g, sx_cg_attention(g, q, k, k, NAN, false), SX_E_ARG, "scale");
    expect_error(g, sx_cg_attention(g, qd, k, k, 1, false), SX_E_DTYPE, "sx_cg_attention");
    expect_error(g, sx_cg_attention(g, NULL, k, k, 1, false), SX_E_ARG, "sx_cg_attention");
    sx_cg_node *y = sx_cg_attention(g, q, k, k, 1, false);
    cr_assert_not_null(y, "%s", sx_last_error());
    expect_error(g, sx_cg_attention_backward(g, q, k, k, y, q, 1, false), SX_E_SHAPE, "dy");
    expect_error(g, sx_cg_attention_o(g, q2), SX_E_RANK, "sx_cg_attention_o");
    expect_error(g, sx_cg_attention_lse(g, NULL), SX_E_ARG, "sx_cg_attention_lse");
    sx_cg_graph_free(g);
}

/* attention over a key count read at run time: the count changes between evaluations with no
 * rebuild, each result equal to the attention over that many keys alone; a count that is not an
 * integer in 0..tk fails the evaluation; the count must be one element; no gradient through it. */
Test(cgraph_attention, key_count_read_at_run_time)
{
    const int64_t bh = 2, tk = 70, dh = 4, qs[3] = {bh, 1, dh}, ks[3] = {bh, tk, dh};
    sx_rng rng;
    sx_rng_seed(&rng, 3);
    sx_tensor *qt = tu_rand(&rng, SX_F32, 3, qs, -1, 1), *kt = tu_rand(&rng, SX_F32, 3, ks, -1, 1);
    sx_tensor *vt = tu_rand(&rng, SX_F32, 3, ks, -1, 1), *ct = tu_zeros(SX_F32, 0, NULL);
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    sx_cg_node *q = sx_cg_const(g, qt), *k = sx_cg_const(g, kt), *v = sx_cg_const(g, vt);
    sx_cg_node *c = sx_cg_input(g, "n", SX_F32, 0, NULL);
    cr_assert_eq(sx_cg_input_set(g, c, ct, SX_CG_BORROW), SX_OK);
    sx_cg_node *y = sx_cg_attention_keys(g, q, k, v, c, 0.5, false);
    cr_assert_not_null(y, "%s", sx_last_error());
    const int64_t counts[] = {5, 70, 64, 0, 1};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        const int64_t n = counts[i];
        sx_tensor_set(ct, 0, (double)n);
        cr_assert_eq(sx_cg_invalidate(g, c), SX_OK);
        cr_assert_eq(sx_cg_eval(g, 1, &y), SX_OK, "%s", sx_last_error());
        const sx_tensor *got = sx_cg_value(y);
        sx_tensor *want = tu_zeros(SX_F32, 3, (int64_t[]){bh, 1, dh + 1});
        if (n > 0) {
            const int64_t ns[3] = {bh, n, dh};
            sx_tensor *kn = tu_zeros(SX_F32, 3, ns), *vn = tu_zeros(SX_F32, 3, ns);
            for (int64_t h = 0; h < bh; h++)
                for (int64_t j = 0; j < n * dh; j++) {
                    sx_tensor_set(kn, h * n * dh + j, sx_tensor_get(kt, h * tk * dh + j));
                    sx_tensor_set(vn, h * n * dh + j, sx_tensor_get(vt, h * tk * dh + j));
                }
            cr_assert_eq(sx_tensor_attention_out(qt, kn, vn, 0.5, false, want), SX_OK);
            sx_tensor_free(kn);
            sx_tensor_free(vn);
        } else {
            for (int64_t h = 0; h < bh; h++)
                sx_tensor_set(want, h * (dh + 1) + dh, -HUGE_VAL);
        }
        cr_assert(memcmp(got->data, want->data, (size_t)want->size * sizeof(float)) == 0,
                  "count %lld", (long long)n);
        sx_tensor_free(want);
    }
    const double bad[] = {71, -1, 2.5, NAN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sx_tensor_set(ct, 0, bad[i]);
        cr_assert_eq(sx_cg_invalidate(g, c), SX_OK);
        cr_assert_eq(sx_cg_eval(g, 1, &y), SX_E_RANGE, "count %g", bad[i]);
        cr_assert(strstr(sx_last_error(), "key count") != NULL, "%s", sx_last_error());
        sx_cg_graph_status_clear(g);
    }
    sx_cg_node *two = sx_cg_input(g, "two", SX_F32, 1, (int64_t[]){2});
    expect_error(g, sx_cg_attention_keys(g, q, k, v, two, 0.5, false), SX_E_SHAPE, "key count");
    sx_cg_node *wrt = q, *gq = NULL;
    sx_cg_node *loss = sx_cg_sum(g, y, SX_AXES_ALL, false);
    cr_assert_neq(sx_ad_grad(g, loss, 1, &wrt, &gq), SX_OK);
    cr_assert(strstr(sx_last_error(), "key count") != NULL, "%s", sx_last_error());
    sx_cg_graph_free(g);
    sx_tensor_free(qt);
    sx_tensor_free(kt);
    sx_tensor_free(vt);
    sx_tensor_free(ct);
}
