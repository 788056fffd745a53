/* The fused attention ops' constructors: shapes of the packed output and gradients, the o and lse
 * slices, and every documented error (recorded on the graph, naming the constructor). The values
 * and gradients are checked from the op samples (test_ops, test_grad, test_higher). */
#include "testutil.h"

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
