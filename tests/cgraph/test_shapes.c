/* Shape inference at construction, for every op family: result shapes against hand-computed
 * ones, and every error a constructor reports: the status, a message naming the op and the
 * shapes, the graph left unchanged (same node and edge counts) and its status set; NULL inputs
 * propagate (NULL back, no new message, no crash). Lazy graphs: nothing is evaluated here (but for
 * the input limit at its edge). */
#include "testutil.h"

#include <sx_cgraph.h>

#include <string.h>

/* ---------------------------------------------------------------- helpers */

static sx_cg_graph *graph(sx_dtype dt)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &g), SX_OK);
    return g;
}

/* An input of the given shape: `V(g, 3, 4)` is (3,4); `V0(g)` is a rank-0 input. */
static sx_cg_node *var(sx_cg_graph *g, sx_dtype dt, int rank, const int64_t *shape)
{
    sx_cg_node *n = sx_cg_input(g, NULL, dt, rank, shape);
    cr_assert_not_null(n, "%s", sx_last_error());
    return n;
}
#define DIMS(...)                                                                                  \
    (const int64_t[])                                                                              \
    {                                                                                              \
        __VA_ARGS__                                                                                \
    }
#define RANK(...) ((int)(sizeof(DIMS(__VA_ARGS__)) / sizeof(int64_t)))
#define V(g, ...) var(g, SX_F32, RANK(__VA_ARGS__), DIMS(__VA_ARGS__))
#define V64(g, ...) var(g, SX_F64, RANK(__VA_ARGS__), DIMS(__VA_ARGS__))
#define V0(g) var(g, SX_F32, 0, NULL)

static void shape_is(const sx_cg_node *n, int rank, const int64_t *shape, const char *what)
{
    cr_assert_not_null(n, "%s: %s", what, sx_last_error());
    char got[128], want[128];
    sx_shape_str(sx_cg_node_rank(n), sx_cg_node_shape(n), got, sizeof got);
    sx_shape_str(rank, shape, want, sizeof want);
    cr_assert(sx_shape_equal(sx_cg_node_rank(n), sx_cg_node_shape(n), rank, shape),
              "%s: shape %s, want %s", what, got, want);
    int64_t size = 1;
    for (int i = 0; i < rank; i++)
        size *= shape[i];
    cr_assert_eq(sx_cg_node_size(n), size, "%s: size", what);
}
/* SHAPE(node, dims...) and SHAPE0(node) (rank 0). */
#define SHAPE(n, ...) shape_is(n, RANK(__VA_ARGS__), DIMS(__VA_ARGS__), #n)
#define SHAPE0(n) shape_is(n, 0, NULL, #n)

static int64_t nodes_and_edges(const sx_cg_graph *g)
{
    sx_cg_stats s = sx_cg_graph_stats(g);
    return s.nodes * 1000000 + s.edges;
}

/* A constructor call that must fail: NULL back, `code` as the graph's status, every needle in
 * the message, and the graph unchanged: the same edges, and no new node but the inputs that
 * the call's own argument expressions made (nobody reads them); with `strict`, no new node at
 * all (for leaf constructors, whose arguments make no nodes). */
static void failed(sx_cg_graph *g, const sx_cg_node *r, sx_status code, int64_t size, int64_t edges,
                   bool strict, const char *call, const char *const *needles)
{
    cr_assert_null(r, "%s: succeeded", call);
    cr_assert_eq(sx_cg_graph_status(g), code, "%s: graph status %s, want %s (%s)", call,
                 sx_status_str(sx_cg_graph_status(g)), sx_status_str(code), sx_last_error());
    cr_assert_eq(sx_cg_graph_stats(g).edges, edges, "%s: the graph changed", call);
    if (strict)
        cr_assert_eq(sx_cg_graph_size(g), size, "%s: the graph changed", call);
    for (int64_t i = size; i < sx_cg_graph_size(g); i++) {
        const sx_cg_node *n = sx_cg_graph_node(g, i);
        cr_assert(n != NULL && sx_cg_node_op(n) == SX_OP_INPUT && sx_cg_node_n_users(n) == 0,
                  "%s: the graph changed (node %lld)", call, (long long)i);
    }
    for (int i = 0; needles[i] != NULL; i++)
        cr_assert(strstr(sx_last_error(), needles[i]) != NULL, "%s: message \"%s\" lacks \"%s\"",
                  call, sx_last_error(), needles[i]);
}
#define FAILS_(strict, g, code, call, ...)                                                         \
    do {                                                                                           \
        sx_cg_graph_status_clear(g);                                                               \
        int64_t size_ = sx_cg_graph_size(g), edges_ = sx_cg_graph_stats(g).edges;                  \
        const sx_cg_node *r_ = (call);                                                             \
        failed(g, r_, code, size_, edges_, strict, #call,                                          \
               (const char *const[]){__VA_ARGS__, NULL});                                          \
    } while (0)
#define FAILS(g, code, call, ...) FAILS_(false, g, code, call, __VA_ARGS__)
#define FAILS_STRICT(g, code, call, ...) FAILS_(true, g, code, call, __VA_ARGS__)

/* ---------------------------------------------------------------- result shapes */

Test(cgraph_shapes, leaves)
{
    sx_cg_graph *g = graph(SX_F64);
    SHAPE(V(g, 3, 4), 3, 4);
    SHAPE(V(g, 0, 2), 0, 2);
    SHAPE0(V0(g));
    sx_cg_node *s = sx_cg_scalar(g, 2.5);
    SHAPE0(s);
    cr_assert_eq(sx_cg_node_dtype(s), SX_F64, "scalars have the graph's dtype");
    cr_assert_eq(sx_cg_node_op(s), SX_OP_CONST);
    sx_tensor *t = tu_zeros(SX_F32, 2, DIMS(2, 5));
    sx_cg_node *c = sx_cg_const(g, t), *p = sx_cg_param(g, "w", t);
    SHAPE(c, 2, 5);
    SHAPE(p, 2, 5);
    cr_assert_eq(sx_cg_node_dtype(c), SX_F32);
    cr_assert_eq(sx_cg_node_op(p), SX_OP_PARAM);
    cr_assert_str_eq(sx_cg_node_name(p), "w");
    sx_tensor_free(t);
    cr_assert_eq(sx_cg_graph_status(g), SX_OK);
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, elementwise_ops_broadcast)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *a34 = V(g, 3, 4), *a31 = V(g, 3, 1), *a14 = V(g, 1, 4), *s = V0(g);
    SHAPE(sx_cg_exp(g, a34), 3, 4);
    SHAPE0(sx_cg_neg(g, s));
    SHAPE(sx_cg_leaky_relu(g, a31, 0.1), 3, 1);
    SHAPE(sx_cg_add(g, a34, a34), 3, 4);
    SHAPE(sx_cg_mul(g, a31, a14), 3, 4);
    SHAPE(sx_cg_sub(g, s, a31), 3, 1);
    SHAPE0(sx_cg_div(g, s, s));
    SHAPE(sx_cg_pow(g, V(g, 2, 1, 4), V(g, 3, 1)), 2, 3, 4);
    SHAPE(sx_cg_lt(g, V(g, 4), a34), 3, 4);
    SHAPE(sx_cg_max(g, V(g, 0, 3), V(g, 1, 3)), 0, 3);
    SHAPE(sx_cg_add_scalar(g, a14, 1), 1, 4);
    SHAPE0(sx_cg_mul_scalar(g, s, 2));
    SHAPE(sx_cg_fma(g, a31, a14, s), 3, 4);
    SHAPE(sx_cg_fma(g, V(g, 2, 1, 1), a14, a31), 2, 3, 4);
    SHAPE(sx_cg_where(g, a31, s, a14), 3, 4);
    cr_assert_eq(sx_cg_graph_status(g), SX_OK, "%s", sx_last_error());
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, reductions)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *x = V(g, 3, 4, 5);
    SHAPE(sx_cg_sum(g, x, SX_AXIS(1), false), 3, 5);
    SHAPE(sx_cg_mean(g, x, SX_AXIS(1), true), 3, 1, 5);
    SHAPE(sx_cg_prod(g, x, SX_AXIS(0) | SX_AXIS(2), false), 4);
    SHAPE(sx_cg_reduce_max(g, x, SX_AXIS(0) | SX_AXIS(2), true), 1, 4, 1);
    SHAPE0(sx_cg_reduce_min(g, x, SX_AXES_ALL, false));
    SHAPE(sx_cg_argmax(g, x, SX_AXES_ALL, true), 1, 1, 1);
    SHAPE(sx_cg_argmin(g, x, 0, false), 3, 4, 5);
    SHAPE(sx_cg_l1norm(g, x, SX_AXIS(2), false), 3, 4);
    SHAPE0(sx_cg_l2norm(g, V0(g), SX_AXES_ALL, false));
    SHAPE(sx_cg_logsumexp(g, V(g, 0, 3), SX_AXIS(0), false), 3);
    cr_assert_eq(sx_cg_graph_status(g), SX_OK, "%s", sx_last_error());
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, layout)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *x = V(g, 2, 3), *y = V(g, 2, 3, 4);
    SHAPE(sx_cg_repeat(g, x, DIMS(2, 1)), 4, 3);
    SHAPE(sx_cg_tile(g, x, DIMS(1, 3)), 2, 9);
    SHAPE(sx_cg_tile(g, x, DIMS(0, 2)), 0, 6);
    SHAPE(sx_cg_broadcast(g, V(g, 3, 1), 3, DIMS(2, 3, 4)), 2, 3, 4);
    SHAPE(sx_cg_broadcast(g, V0(g), 2, DIMS(2, 2)), 2, 2);
    SHAPE(sx_cg_reshape(g, y, 2, DIMS(6, 4)), 6, 4);
    SHAPE0(sx_cg_reshape(g, V(g, 1, 1), 0, NULL));
    sx_slice s1[2] = {{1, 4, 1}, {0, SX_SLICE_END, 2}};
    SHAPE(sx_cg_slice(g, V(g, 5, 6), s1), 3, 3);
    sx_slice s2[2] = {{4, SX_SLICE_END, -1}, {-2, SX_SLICE_END, 1}};
    SHAPE(sx_cg_slice(g, V(g, 5, 6), s2), 5, 2);
    SHAPE(sx_cg_unslice(g, V(g, 3, 3), s1, 2, DIMS(5, 6)), 5, 6);
    sx_cg_node *parts[3] = {x, V(g, 4, 3), V(g, 1, 3)};
    SHAPE(sx_cg_concat(g, 3, parts, 0), 7, 3);
    sx_cg_node *cols[2] = {x, V(g, 2, 5)};
    SHAPE(sx_cg_concat(g, 2, cols, -1), 2, 8);
    sx_cg_node *perm = sx_cg_permute(g, y, (const int[]){2, 0, 1});
    SHAPE(perm, 4, 2, 3);
    SHAPE(sx_cg_transpose(g, y), 2, 4, 3);
    cr_assert_eq(sx_cg_node_op(sx_cg_transpose(g, x)), SX_OP_PERMUTE);
    SHAPE(sx_cg_pad(g, V(g, 3, 4), DIMS(1, 0), DIMS(2, 3), 0.5), 6, 7);
    SHAPE(sx_cg_one_hot(g, x, 5), 2, 3, 5);
    SHAPE(sx_cg_one_hot(g, V0(g), 4), 4);
    SHAPE(sx_cg_gather(g, V(g, 5, 3), V(g, 4)), 4, 3);
    SHAPE(sx_cg_gather(g, V(g, 6), V(g, 0)), 0);
    SHAPE(sx_cg_scatter_add(g, V(g, 4, 3), V(g, 4), 7), 7, 3);
    cr_assert_eq(sx_cg_graph_status(g), SX_OK, "%s", sx_last_error());
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, matmul_and_dot)
{
    sx_cg_graph *g = graph(SX_F32);
    SHAPE(sx_cg_matmul(g, V(g, 3, 4), V(g, 4, 5), false, false), 3, 5);
    SHAPE(sx_cg_matmul(g, V(g, 4, 3), V(g, 4, 5), true, false), 3, 5);
    SHAPE(sx_cg_matmul(g, V(g, 3, 4), V(g, 5, 4), false, true), 3, 5);
    SHAPE(sx_cg_matmul(g, V(g, 4, 3), V(g, 5, 4), true, true), 3, 5);
    SHAPE(sx_cg_matmul(g, V(g, 2, 3, 4), V(g, 4, 5), false, false), 2, 3, 5);
    SHAPE(sx_cg_matmul(g, V(g, 2, 1, 3, 4), V(g, 3, 4, 2), false, false), 2, 3, 3, 2);
    sx_cg_node *gm = sx_cg_gemm(g, V(g, 3, 4), V(g, 4, 2), false, false, 0.5, V(g, 3, 2), 2);
    SHAPE(gm, 3, 2);
    cr_assert_eq(sx_cg_node_n_inputs(gm), 3);
    cr_assert_eq(sx_cg_node_attr(gm)->alpha, 0.5);
    cr_assert_eq(sx_cg_node_attr(gm)->beta, 2.0);
    SHAPE0(sx_cg_dot(g, V(g, 5), V(g, 5)));
    SHAPE0(sx_cg_dot(g, V(g, 2, 3), V(g, 6)));
    cr_assert_eq(sx_cg_graph_status(g), SX_OK, "%s", sx_last_error());
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, conv_and_pool)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_conv2d_params valid2 = {.stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID},
                     same2 = {.stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME};
    sx_conv2d_params same21 = {.stride_h = 2, .stride_w = 1, .padding = SX_PAD_SAME};
    sx_cg_node *x = V(g, 2, 7, 7, 3), *k = V(g, 3, 3, 3, 8);
    SHAPE(sx_cg_conv2d(g, x, k, &valid2), 2, 3, 3, 8); /* (7 - 3) / 2 + 1 */
    SHAPE(sx_cg_conv2d(g, x, k, &same2), 2, 4, 4, 8);  /* ceil(7 / 2) */
    SHAPE(sx_cg_conv2d(g, V(g, 1, 5, 6, 3), k, &same21), 1, 3, 6, 8);
    SHAPE(sx_cg_conv2d_backward_input(g, k, V(g, 2, 3, 3, 8), &valid2, DIMS(2, 7, 7, 3)), 2, 7, 7,
          3);
    SHAPE(sx_cg_conv2d_backward_kernel(g, x, V(g, 2, 4, 4, 8), &same2, DIMS(3, 3, 3, 8)), 3, 3, 3,
          8);
    sx_pool2d_params
        p22 = {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID},
        p33 = {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME};
    sx_cg_node *img = V(g, 1, 5, 5, 2);
    SHAPE(sx_cg_maxpool2d(g, img, &p22), 1, 2, 2, 2);
    SHAPE(sx_cg_avgpool2d(g, img, &p33), 1, 3, 3, 2);
    SHAPE(sx_cg_maxpool2d_backward(g, img, V(g, 1, 2, 2, 2), &p22), 1, 5, 5, 2);
    SHAPE(sx_cg_avgpool2d_backward(g, V(g, 1, 3, 3, 2), &p33, DIMS(1, 5, 5, 2)), 1, 5, 5, 2);
    cr_assert_eq(sx_cg_graph_status(g), SX_OK, "%s", sx_last_error());
    sx_cg_graph_free(g);
}

/* The general convolution and pooling options reach the graph's shape rules: groups, dilation,
 * explicit pads, SAME_LOWER, ceil_mode; average pooling refuses a dilation when the node is made
 * (its kernels would refuse it only when the graph runs). */
Test(cgraph_shapes, conv_and_pool_options)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_conv2d_params grouped = {.stride_h = 2,
                                .stride_w = 1,
                                .padding = SX_PAD_EXPLICIT,
                                .pad_top = 1,
                                .pad_bottom = 0,
                                .pad_left = 2,
                                .pad_right = 1,
                                .dilation_h = 2,
                                .groups = 2};
    /* rows (7 + 1 - 5) / 2 + 1 = 2, columns 6 + 3 - 3 + 1 = 7 */
    SHAPE(sx_cg_conv2d(g, V(g, 1, 7, 6, 4), V(g, 3, 3, 2, 6), &grouped), 1, 2, 7, 6);
    sx_pool2d_params ceil = {.kernel_h = 3,
                             .kernel_w = 2,
                             .stride_h = 2,
                             .stride_w = 2,
                             .dilation_w = 2,
                             .ceil_mode = 1};
    /* rows ceil((6 - 3) / 2) + 1 = 3, columns ceil((7 - 3) / 2) + 1 = 3 */
    SHAPE(sx_cg_maxpool2d(g, V(g, 1, 6, 7, 2), &ceil), 1, 3, 3, 2);
    cr_assert_eq(sx_cg_graph_status(g), SX_OK, "%s", sx_last_error());
    FAILS(g, SX_E_ARG, sx_cg_avgpool2d(g, V(g, 1, 6, 7, 2), &ceil), "avgpool2d",
          "average pooling takes none");
    FAILS(g, SX_E_ARG, sx_cg_avgpool2d_backward(g, V(g, 1, 3, 3, 2), &ceil, DIMS(1, 6, 7, 2)),
          "average pooling takes none");
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, softmax_family_and_dropout)
{
    sx_cg_graph *g = graph(SX_F64);
    sx_cg_node *x = V64(g, 2, 3, 4);
    sx_cg_node *sm = sx_cg_softmax(g, x, -1);
    SHAPE(sm, 2, 3, 4);
    cr_assert_eq(sx_cg_node_attr(sm)->axis, 2, "the axis is stored normalised");
    cr_assert_eq(sx_cg_softmax(g, x, 2), sm, "axis -1 and 2 are the same node");
    SHAPE(sx_cg_log_softmax(g, x, 0), 2, 3, 4);
    SHAPE(sx_cg_softmax_backward(g, x, V64(g, 2, 3, 4), 1), 2, 3, 4);
    SHAPE(sx_cg_log_softmax_backward(g, x, V64(g, 2, 3, 4), -2), 2, 3, 4);
    sx_cg_node *l = V64(g, 4, 5);
    SHAPE(sx_cg_softmax_xent(g, l, V64(g, 4, 5)), 4);
    SHAPE(sx_cg_softmax_xent_backward(g, l, V64(g, 4, 5), V64(g, 4)), 4, 5);
    int id;
    cr_assert_eq(sx_cg_rng_new(g, 42, &id), SX_OK);
    sx_cg_node *m = sx_cg_dropout_mask(g, id, 0.5, 2, DIMS(3, 4));
    SHAPE(m, 3, 4);
    cr_assert_eq(sx_cg_node_dtype(m), SX_F64, "a mask has the graph's dtype");
    cr_assert_neq(sx_cg_dropout_mask(g, id, 0.5, 2, DIMS(3, 4)), m, "masks are never merged");
    cr_assert_eq(sx_cg_graph_status(g), SX_OK, "%s", sx_last_error());
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, linalg)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *a = V(g, 3, 3), *t = V(g, 5, 3), *w = V(g, 3, 5);
    SHAPE(sx_cg_inv(g, a), 3, 3);
    SHAPE(sx_cg_solve(g, a, V(g, 3)), 3);
    SHAPE(sx_cg_solve(g, a, V(g, 3, 2)), 3, 2);
    SHAPE0(sx_cg_det(g, a));
    SHAPE0(sx_cg_logdet(g, a));
    SHAPE(sx_cg_cholesky(g, a), 3, 3);
    SHAPE(sx_cg_qr_q(g, t), 5, 3);
    SHAPE(sx_cg_qr_r(g, t), 3, 3);
    SHAPE(sx_cg_qr_q(g, w), 3, 3);
    SHAPE(sx_cg_qr_r(g, w), 3, 5);
    SHAPE(sx_cg_svd_s(g, t), 3);
    SHAPE(sx_cg_svd_s(g, w), 3);
    SHAPE(sx_cg_eigh_w(g, a), 3);
    SHAPE(sx_cg_eigh_v(g, a), 3, 3);
    cr_assert_eq(sx_cg_graph_status(g), SX_OK, "%s", sx_last_error());
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, assign_and_optimiser_ops)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_tensor *t = tu_zeros(SX_F32, 2, DIMS(3, 4));
    sx_cg_node *p = sx_cg_param(g, "p", t), *m = sx_cg_param(g, "m", t);
    sx_cg_node *v = sx_cg_param(g, "v", t), *grad = V(g, 3, 4), *lr = V0(g);
    SHAPE(sx_cg_assign(g, p, grad), 3, 4);
    sx_cg_node *in2[2] = {grad, lr};
    SHAPE(sx_cg_op_new(g, SX_OP_SEQ, 2, in2, NULL), 3, 4);
    /* p <- p - lr g;  m <- v */
    sx_cg_node *upd[5] = {p, m, v, grad, lr};
    sx_cg_attr ua = sx_cg_attr_default();
    ua.rank = 2, ua.shape[0] = 3, ua.shape[1] = 4, ua.ints[0] = 2;
    ua.prog.n = 4;
    ua.prog.ins[0] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_MUL, 4, 3, 0, 0};
    ua.prog.ins[1] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_SUB, 0, -1, 0, 0};
    ua.prog.ins[2] = (sx_fused_instr){SX_FUSED_STORE, 0, -2, 0, 0, 0};
    ua.prog.n = 3;
    SHAPE(sx_cg_op_new(g, SX_OP_FUSED_UPDATE, 5, upd, &ua), 3, 4);
    sx_cg_attr at = sx_cg_attr_default();
    at.prog.n = 1;
    at.prog.ins[0] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_MUL, 0, 1, 0, 0};
    at.rank = 2;
    at.shape[0] = 3;
    at.shape[1] = 4;
    SHAPE(sx_cg_op_new(g, SX_OP_FUSED, 2, in2, &at), 3, 4);
    sx_tensor_free(t);
    cr_assert_eq(sx_cg_graph_status(g), SX_OK, "%s", sx_last_error());
    sx_cg_graph_free(g);
}

/* In a lazy graph an op's inputs have no values yet: shape rules must not need them. */
Test(cgraph_shapes, rules_never_need_input_values)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_conv2d_params cp = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    sx_pool2d_params pp = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    sx_cg_node *x = sx_cg_relu(g, V(g, 2, 4, 4, 3)), *k = sx_cg_neg(g, V(g, 3, 3, 3, 5));
    sx_cg_node *y = sx_cg_conv2d(g, x, k, &cp);
    SHAPE(y, 2, 4, 4, 5);
    SHAPE(sx_cg_conv2d_backward_input(g, k, y, &cp, DIMS(2, 4, 4, 3)), 2, 4, 4, 3);
    SHAPE(sx_cg_conv2d_backward_kernel(g, x, y, &cp, DIMS(3, 3, 3, 5)), 3, 3, 3, 5);
    sx_cg_node *z = sx_cg_maxpool2d(g, y, &pp);
    SHAPE(z, 2, 2, 2, 5);
    SHAPE(sx_cg_maxpool2d_backward(g, y, z, &pp), 2, 4, 4, 5);
    SHAPE(sx_cg_avgpool2d_backward(g, sx_cg_avgpool2d(g, y, &pp), &pp, DIMS(2, 4, 4, 5)), 2, 4, 4,
          5);
    sx_cg_node *f = sx_cg_reshape(g, z, 2, DIMS(2, 20));
    SHAPE(sx_cg_matmul(g, f, sx_cg_exp(g, V(g, 20, 7)), false, false), 2, 7);
    SHAPE0(sx_cg_dot(g, f, f));
    cr_assert_eq(sx_cg_graph_status(g), SX_OK, "%s", sx_last_error());
    sx_cg_graph_free(g);
}

/* A node's dtype is its inputs' (not the graph's): f64 nodes in an f32 graph. */
Test(cgraph_shapes, dtype_follows_inputs)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *x = V64(g, 2, 2);
    cr_assert_eq(sx_cg_node_dtype(sx_cg_sin(g, x)), SX_F64);
    cr_assert_eq(sx_cg_node_dtype(sx_cg_add_scalar(g, x, 1)), SX_F64);
    cr_assert_eq(sx_cg_node_dtype(sx_cg_sum(g, x, SX_AXES_ALL, false)), SX_F64);
    cr_assert_eq(sx_cg_node_dtype(sx_cg_matmul(g, x, x, false, false)), SX_F64);
    cr_assert_eq(sx_cg_graph_status(g), SX_OK, "%s", sx_last_error());
    sx_cg_graph_free(g);
}

/* ---------------------------------------------------------------- errors */

typedef sx_cg_node *(*binary_fn)(sx_cg_graph *, sx_cg_node *, sx_cg_node *);

Test(cgraph_shapes, mismatched_shapes_name_the_op_and_both_shapes)
{
    static const struct {
        binary_fn f;
        const char *who;
    } bins[] = {
        {sx_cg_add, "sx_cg_add:"}, {sx_cg_sub, "sx_cg_sub:"},     {sx_cg_mul, "sx_cg_mul:"},
        {sx_cg_div, "sx_cg_div:"}, {sx_cg_pow, "sx_cg_pow:"},     {sx_cg_min, "sx_cg_min:"},
        {sx_cg_max, "sx_cg_max:"}, {sx_cg_atan2, "sx_cg_atan2:"}, {sx_cg_eq, "sx_cg_eq:"},
        {sx_cg_ne, "sx_cg_ne:"},   {sx_cg_lt, "sx_cg_lt:"},       {sx_cg_le, "sx_cg_le:"},
        {sx_cg_gt, "sx_cg_gt:"},   {sx_cg_ge, "sx_cg_ge:"},
    };
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *a = V(g, 3, 4), *b = V(g, 5, 4), *c = V(g, 2, 3, 4);
    for (size_t i = 0; i < sizeof bins / sizeof bins[0]; i++)
        FAILS(g, SX_E_SHAPE, bins[i].f(g, a, b), bins[i].who, "(3,4)", "(5,4)");
    FAILS(g, SX_E_SHAPE, sx_cg_add(g, V(g, 4), V(g, 3)), "sx_cg_add:", "(4)", "(3)");
    FAILS(g, SX_E_SHAPE, sx_cg_add(g, c, b), "sx_cg_add", "(2,3,4)", "(5,4)");
    FAILS(g, SX_E_SHAPE, sx_cg_fma(g, a, a, b), "sx_cg_fma:", "(3,4)", "(5,4)");
    FAILS(g, SX_E_SHAPE, sx_cg_where(g, b, a, a), "sx_cg_where:", "(5,4)", "(3,4)");
    FAILS(g, SX_E_SHAPE, sx_cg_broadcast(g, V(g, 3, 2), 2, DIMS(3, 4)), "sx_cg_broadcast:", "(3,2)",
          "(3,4)");
    FAILS(g, SX_E_SHAPE, sx_cg_broadcast(g, a, 1, DIMS(4)), "sx_cg_broadcast:", "(3,4)", "(4)");
    FAILS(g, SX_E_SHAPE, sx_cg_softmax_backward(g, a, b, 0), "sx_cg_softmax_backward:", "(3,4)",
          "(5,4)");
    FAILS(g, SX_E_SHAPE, sx_cg_log_softmax_backward(g, a, b, 0), "sx_cg_log_softmax_backward:");
    FAILS(g, SX_E_SHAPE, sx_cg_dot(g, V(g, 5), V(g, 4)), "sx_cg_dot:", "5", "4");
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, dtype_mismatch)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *a = V(g, 3, 3), *b = V64(g, 3, 3);
    FAILS(g, SX_E_DTYPE, sx_cg_add(g, a, b), "sx_cg_add:", "f32", "f64");
    FAILS(g, SX_E_DTYPE, sx_cg_where(g, a, a, b), "sx_cg_where:", "f64");
    FAILS(g, SX_E_DTYPE, sx_cg_matmul(g, b, a, false, false), "sx_cg_matmul:", "f32", "f64");
    sx_cg_node *parts[2] = {a, b};
    FAILS(g, SX_E_DTYPE, sx_cg_concat(g, 2, parts, 0), "sx_cg_concat:");
    FAILS(g, SX_E_DTYPE, sx_cg_solve(g, a, V64(g, 3)), "sx_cg_solve:");
    FAILS(g, SX_E_DTYPE, sx_cg_gather(g, a, V64(g, 2)), "sx_cg_gather:");
    FAILS(g, SX_E_DTYPE, sx_cg_softmax_xent(g, a, b), "sx_cg_softmax_xent:");
    sx_conv2d_params cp = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID};
    FAILS(g, SX_E_DTYPE, sx_cg_conv2d(g, V(g, 1, 4, 4, 2), V64(g, 3, 3, 2, 2), &cp),
          "sx_cg_conv2d:");
    sx_tensor *t = tu_zeros(SX_F64, 2, DIMS(3, 3));
    sx_cg_node *p = sx_cg_param(g, "p", t);
    FAILS(g, SX_E_DTYPE, sx_cg_assign(g, p, a), "sx_cg_assign:");
    sx_tensor_free(t);
    FAILS_STRICT(g, SX_E_DTYPE, sx_cg_input(g, "x", (sx_dtype)7, 1, DIMS(2)), "sx_cg_input");
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, bad_axes)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *x = V(g, 3, 4);
    FAILS(g, SX_E_AXIS, sx_cg_sum(g, x, SX_AXIS(2), false), "sx_cg_sum:");
    FAILS(g, SX_E_AXIS, sx_cg_argmax(g, x, SX_AXIS(0) | SX_AXIS(5), true), "sx_cg_argmax:");
    FAILS(g, SX_E_AXIS, sx_cg_mean(g, V0(g), SX_AXIS(0), false), "sx_cg_mean:");
    FAILS(g, SX_E_AXIS, sx_cg_softmax(g, x, 2), "sx_cg_softmax:", "2");
    FAILS(g, SX_E_AXIS, sx_cg_log_softmax(g, x, -3), "sx_cg_log_softmax:", "-3");
    FAILS(g, SX_E_AXIS, sx_cg_softmax(g, V0(g), 0), "sx_cg_softmax:");
    FAILS(g, SX_E_AXIS, sx_cg_softmax_backward(g, x, x, 7), "sx_cg_softmax_backward:");
    sx_cg_node *parts[2] = {x, x};
    FAILS(g, SX_E_AXIS, sx_cg_concat(g, 2, parts, 2), "sx_cg_concat:");
    FAILS(g, SX_E_AXIS, sx_cg_concat(g, 2, parts, -3), "sx_cg_concat:");
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, bad_permutation)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *x = V(g, 2, 3, 4);
    FAILS(g, SX_E_AXIS, sx_cg_permute(g, x, (const int[]){0, 0, 1}),
          "sx_cg_permute:", "permutation");
    FAILS(g, SX_E_AXIS, sx_cg_permute(g, x, (const int[]){0, 1, 3}), "sx_cg_permute:");
    FAILS(g, SX_E_AXIS, sx_cg_permute(g, x, (const int[]){-1, 1, 2}), "sx_cg_permute:");
    FAILS(g, SX_E_AXIS, sx_cg_permute(g, V(g, 5), (const int[]){1}), "sx_cg_permute:");
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, bad_rank)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_conv2d_params cp = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID};
    sx_pool2d_params pp = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    FAILS(g, SX_E_RANK, sx_cg_transpose(g, V(g, 5)), "sx_cg_transpose:", "rank 1");
    FAILS(g, SX_E_RANK, sx_cg_matmul(g, V(g, 4), V(g, 4, 2), false, false), "sx_cg_matmul:");
    FAILS(g, SX_E_RANK, sx_cg_conv2d(g, V(g, 5, 5, 2), V(g, 3, 3, 2, 2), &cp),
          "sx_cg_conv2d:", "(5,5,2)");
    FAILS(g, SX_E_RANK, sx_cg_conv2d(g, V(g, 1, 5, 5, 2), V(g, 3, 3, 2), &cp), "sx_cg_conv2d:");
    FAILS(g, SX_E_RANK, sx_cg_maxpool2d(g, V(g, 4, 4), &pp), "sx_cg_maxpool2d:", "(4,4)");
    sx_cg_attr ar = sx_cg_attr_default(); /* the named constructor always passes 4 dims */
    ar.pool = pp;
    ar.rank = 3;
    ar.shape[0] = 1, ar.shape[1] = ar.shape[2] = 4;
    sx_cg_node *dy = V(g, 1, 2, 2, 1);
    FAILS(g, SX_E_RANK, sx_cg_op_new(g, SX_OP_AVGPOOL2D_BACKWARD, 1, &dy, &ar),
          "sx_cg_avgpool2d_backward:");
    FAILS(g, SX_E_RANK, sx_cg_gather(g, V(g, 5, 3), V(g, 2, 2)), "sx_cg_gather:", "(2,2)");
    FAILS(g, SX_E_RANK, sx_cg_gather(g, V0(g), V(g, 2)), "sx_cg_gather:");
    FAILS(g, SX_E_RANK, sx_cg_scatter_add(g, V(g, 4, 3), V(g, 4, 1), 5), "sx_cg_scatter_add:");
    FAILS(g, SX_E_RANK, sx_cg_inv(g, V(g, 3)), "sx_cg_inv:", "(3)");
    FAILS(g, SX_E_RANK, sx_cg_det(g, V(g, 2, 2, 2)), "sx_cg_det:");
    FAILS(g, SX_E_RANK, sx_cg_qr_q(g, V(g, 3)), "sx_cg_qr_q:");
    FAILS(g, SX_E_RANK, sx_cg_svd_s(g, V0(g)), "sx_cg_svd_s:");
    FAILS(g, SX_E_RANK, sx_cg_softmax_xent(g, V(g, 5), V(g, 5)), "sx_cg_softmax_xent:");
    FAILS(g, SX_E_RANK, sx_cg_softmax_xent_backward(g, V(g, 2, 3), V(g, 2, 3), V(g, 2, 1)),
          "sx_cg_softmax_xent_backward:");
    FAILS(g, SX_E_RANK, sx_cg_one_hot(g, V(g, 1, 1, 1, 1, 1, 1, 1, 1), 3), "sx_cg_one_hot:");
    FAILS(g, SX_E_RANK, sx_cg_reshape(g, V(g, 2), 9, DIMS(1, 1, 1, 1, 1, 1, 1, 1, 2)),
          "sx_cg_reshape:");
    FAILS(g, SX_E_RANK, sx_cg_broadcast(g, V(g, 2), -1, NULL), "sx_cg_broadcast:");
    FAILS(g, SX_E_RANK,
          sx_cg_unslice(g, V(g, 2), ((sx_slice[]){SX_SLICE_ALL, SX_SLICE_ALL}), 2, DIMS(2, 2)),
          "sx_cg_unslice:");
    int id;
    cr_assert_eq(sx_cg_rng_new(g, 1, &id), SX_OK);
    FAILS(g, SX_E_RANK, sx_cg_dropout_mask(g, id, 0.5, 9, DIMS(1, 1, 1, 1, 1, 1, 1, 1, 1)),
          "sx_cg_dropout_mask:");
    FAILS_STRICT(g, SX_E_RANK, sx_cg_input(g, "x", SX_F32, 9, DIMS(1, 1, 1, 1, 1, 1, 1, 1, 1)),
                 "sx_cg_input");
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, matmul_inner_mismatch)
{
    sx_cg_graph *g = graph(SX_F32);
    FAILS(g, SX_E_SHAPE, sx_cg_matmul(g, V(g, 3, 4), V(g, 5, 6), false, false),
          "sx_cg_matmul:", "(3,4)", "(5,6)");
    FAILS(g, SX_E_SHAPE, sx_cg_matmul(g, V(g, 3, 4), V(g, 3, 5), true, true), "sx_cg_matmul:");
    FAILS(g, SX_E_SHAPE, sx_cg_matmul(g, V(g, 2, 3, 4), V(g, 3, 4, 5), false, false),
          "sx_cg_matmul:", "(2,3,4)", "(3,4,5)");
    FAILS(g, SX_E_SHAPE, sx_cg_gemm(g, V(g, 3, 4), V(g, 4, 2), false, false, 1, V(g, 2, 3), 1),
          "sx_cg_matmul:", "(2,3)", "(3,2)");
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, conv_errors)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_conv2d_params cp = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID},
                     bad = {.stride_h = 0, .stride_w = 1, .padding = SX_PAD_VALID};
    sx_cg_node *x = V(g, 1, 5, 5, 3), *k = V(g, 3, 3, 2, 4);
    FAILS(g, SX_E_SHAPE, sx_cg_conv2d(g, x, k, &cp), "sx_cg_conv2d:", "(1,5,5,3)", "(3,3,2,4)");
    FAILS(g, SX_E_SHAPE, sx_cg_conv2d(g, V(g, 1, 2, 2, 2), k, &cp), "sx_cg_conv2d:");
    FAILS(g, SX_E_ARG, sx_cg_conv2d(g, V(g, 1, 5, 5, 2), k, &bad), "sx_cg_conv2d:", "stride");
    FAILS(g, SX_E_SHAPE, sx_cg_conv2d_backward_input(g, k, V(g, 1, 2, 2, 4), &cp, DIMS(1, 5, 5, 2)),
          "sx_cg_conv2d_backward_input:", "(1,2,2,4)", "(1,3,3,4)");
    FAILS(g, SX_E_SHAPE, sx_cg_conv2d_backward_input(g, k, V(g, 1, 3, 3, 4), &cp, DIMS(1, 5, 5, 3)),
          "sx_cg_conv2d_backward_input:");
    FAILS(
        g, SX_E_SHAPE,
        sx_cg_conv2d_backward_kernel(g, V(g, 1, 5, 5, 2), V(g, 1, 3, 3, 5), &cp, DIMS(3, 3, 2, 4)),
        "sx_cg_conv2d_backward_kernel:", "(1,3,3,5)");
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, pool_errors)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_pool2d_params
        big = {.kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID},
        zero = {
            .kernel_h = 0, .kernel_w = 2, .stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID};
    sx_pool2d_params p22 = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    sx_cg_node *x = V(g, 1, 2, 2, 1);
    FAILS(g, SX_E_SHAPE, sx_cg_maxpool2d(g, x, &big), "sx_cg_maxpool2d:", "VALID");
    FAILS(g, SX_E_SHAPE, sx_cg_avgpool2d(g, x, &big), "sx_cg_avgpool2d:", "(1,2,2,1)");
    FAILS(g, SX_E_ARG, sx_cg_maxpool2d(g, x, &zero), "sx_cg_maxpool2d:");
    FAILS(g, SX_E_SHAPE, sx_cg_maxpool2d_backward(g, V(g, 1, 4, 4, 1), V(g, 1, 3, 3, 1), &p22),
          "sx_cg_maxpool2d_backward:", "(1,3,3,1)", "(1,2,2,1)");
    FAILS(g, SX_E_SHAPE, sx_cg_avgpool2d_backward(g, V(g, 1, 2, 2, 2), &p22, DIMS(1, 4, 4, 1)),
          "sx_cg_avgpool2d_backward:");
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, concat_mismatch)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *a[2] = {V(g, 2, 3), V(g, 3, 4)}, *b[2] = {V(g, 2, 3), V(g, 2, 3, 1)};
    FAILS(g, SX_E_SHAPE, sx_cg_concat(g, 2, a, 0), "sx_cg_concat:", "(2,3)", "(3,4)");
    FAILS(g, SX_E_SHAPE, sx_cg_concat(g, 2, b, 1), "sx_cg_concat:", "(2,3,1)");
    FAILS(g, SX_E_ARG, sx_cg_concat(g, 0, a, 0), "sx_cg_concat:");
    sx_cg_graph_free(g);
}

/* Regression: a concat of 65 inputs used to build, then fail at evaluation ("more
 * than 64 inputs"); the limit is SX_CG_MAX_INPUTS, checked at construction. At the limit a
 * concat builds and evaluates, lazily and eagerly. */
Test(cgraph_shapes, concat_over_max_inputs_fails_at_construction)
{
    for (int eager = 0; eager <= 1; eager++) {
        sx_cg_graph *g = NULL;
        cr_assert_eq(sx_cg_graph_new(eager ? SX_CG_EAGER : SX_CG_LAZY, SX_F32, &g), SX_OK);
        sx_cg_node *xs[SX_CG_MAX_INPUTS + 1];
        for (int i = 0; i <= SX_CG_MAX_INPUTS; i++) {
            float v[2] = {(float)i, (float)-i};
            sx_tensor t = sx_tensor_view(SX_F32, 2, DIMS(1, 2), v);
            xs[i] = sx_cg_const(g, &t);
            cr_assert_not_null(xs[i], "%s", sx_last_error());
        }
        FAILS(g, SX_E_ARG, sx_cg_concat(g, SX_CG_MAX_INPUTS + 1, xs, 0),
              "sx_cg_concat:", "65 inputs", "SX_CG_MAX_INPUTS");
        sx_cg_graph_status_clear(g);
        sx_cg_node *y = sx_cg_concat(g, SX_CG_MAX_INPUTS, xs, 0);
        SHAPE(y, SX_CG_MAX_INPUTS, 2);
        cr_assert_eq(sx_cg_eval(g, 1, &y), SX_OK, "%s", sx_last_error());
        const float *out = sx_cg_value(y)->data;
        for (int i = 0; i < SX_CG_MAX_INPUTS; i++)
            cr_assert(out[2 * i] == (float)i && out[2 * i + 1] == (float)-i, "row %d", i);
        sx_cg_graph_free(g);
    }
}

Test(cgraph_shapes, assign_errors)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_tensor *t = tu_zeros(SX_F32, 2, DIMS(3, 4));
    sx_cg_node *p = sx_cg_param(g, "p", t), *c = sx_cg_const(g, t), *x = V(g, 3, 4);
    FAILS(g, SX_E_ARG, sx_cg_assign(g, x, x), "sx_cg_assign:", "not a parameter");
    FAILS(g, SX_E_ARG, sx_cg_assign(g, c, x), "sx_cg_assign:", "not a parameter");
    sx_cg_node *np = sx_cg_neg(g, p);
    FAILS(g, SX_E_ARG, sx_cg_assign(g, np, x), "sx_cg_assign:", "neg");
    FAILS(g, SX_E_SHAPE, sx_cg_assign(g, p, V(g, 4, 3)), "sx_cg_assign:", "(3,4)", "(4,3)");
    sx_tensor_free(t);
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, reshape_and_layout_errors)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *x = V(g, 2, 6);
    FAILS(g, SX_E_SHAPE, sx_cg_reshape(g, x, 1, DIMS(5)), "sx_cg_reshape:", "(2,6)", "(5)");
    FAILS(g, SX_E_SHAPE, sx_cg_reshape(g, x, 2, DIMS(3, -4)), "sx_cg_reshape");
    FAILS(g, SX_E_ARG, sx_cg_repeat(g, x, DIMS(1, -2)), "sx_cg_repeat:", "-2");
    FAILS(g, SX_E_ARG, sx_cg_tile(g, x, DIMS(-1, 1)), "sx_cg_tile:");
    FAILS(g, SX_E_ARG, sx_cg_pad(g, x, DIMS(0, -1), DIMS(0, 0), 0), "sx_cg_pad:");
    FAILS(g, SX_E_ARG, sx_cg_slice(g, x, ((sx_slice[]){{0, 2, 1}, {0, 6, 0}})), "sx_cg_slice:");
    FAILS(g, SX_E_SHAPE,
          sx_cg_unslice(g, V(g, 2, 2), ((sx_slice[]){{0, 2, 1}, {0, 6, 2}}), 2, DIMS(2, 6)),
          "sx_cg_unslice:", "(2,3)", "(2,2)");
    FAILS(g, SX_E_ARG, sx_cg_one_hot(g, V(g, 3), 0), "sx_cg_one_hot:", "depth");
    FAILS(g, SX_E_SHAPE, sx_cg_scatter_add(g, V(g, 4, 3), V(g, 5), 7), "sx_cg_scatter_add:");
    FAILS(g, SX_E_ARG, sx_cg_scatter_add(g, V(g, 4, 3), V(g, 4), -1), "sx_cg_scatter_add:");
    FAILS_STRICT(g, SX_E_SHAPE, sx_cg_input(g, "x", SX_F32, 2, DIMS(2, -1)), "sx_cg_input");
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, softmax_xent_linalg_and_dropout_errors)
{
    sx_cg_graph *g = graph(SX_F32);
    FAILS(g, SX_E_SHAPE, sx_cg_softmax_xent(g, V(g, 4, 5), V(g, 4, 6)),
          "sx_cg_softmax_xent:", "(4,5)", "(4,6)");
    FAILS(g, SX_E_SHAPE, sx_cg_softmax_xent_backward(g, V(g, 4, 5), V(g, 4, 5), V(g, 3)),
          "sx_cg_softmax_xent_backward:");
    FAILS(g, SX_E_SHAPE, sx_cg_inv(g, V(g, 3, 4)), "sx_cg_inv:", "(3,4)");
    FAILS(g, SX_E_SHAPE, sx_cg_cholesky(g, V(g, 2, 3)), "sx_cg_cholesky:");
    FAILS(g, SX_E_SHAPE, sx_cg_eigh_v(g, V(g, 2, 3)), "sx_cg_eigh_v:");
    FAILS(g, SX_E_SHAPE, sx_cg_logdet(g, V(g, 1, 2)), "sx_cg_logdet:");
    FAILS(g, SX_E_SHAPE, sx_cg_solve(g, V(g, 3, 3), V(g, 4)), "sx_cg_solve:", "(3,3)", "(4)");
    FAILS(g, SX_E_SHAPE, sx_cg_solve(g, V(g, 3, 3), V(g, 3, 2, 1)), "sx_cg_solve:");
    int id;
    cr_assert_eq(sx_cg_rng_new(g, 1, &id), SX_OK);
    FAILS(g, SX_E_ARG, sx_cg_dropout_mask(g, id, 1.0, 1, DIMS(3)), "sx_cg_dropout_mask:");
    FAILS(g, SX_E_ARG, sx_cg_dropout_mask(g, id, -0.1, 1, DIMS(3)), "sx_cg_dropout_mask:");
    FAILS(g, SX_E_ARG, sx_cg_dropout_mask(g, id + 1, 0.5, 1, DIMS(3)),
          "sx_cg_dropout_mask:", "generator");
    sx_cg_graph_free(g);
}

Test(cgraph_shapes, optimiser_op_errors)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_tensor *t = tu_zeros(SX_F32, 2, DIMS(3, 4));
    sx_cg_node *p = sx_cg_param(g, "p", t), *x = V(g, 3, 4), *lr = V0(g);
    sx_cg_node *not_param[3] = {x, x, lr}, *bad_lr[3] = {p, x, V(g, 2)};
    sx_cg_node *bad_g[3] = {p, V(g, 4, 4), lr}, *good[3] = {p, x, lr};
    /* p <- p - lr g over (p, g, lr) */
    sx_cg_attr ua = sx_cg_attr_default();
    ua.rank = 2, ua.shape[0] = 3, ua.shape[1] = 4, ua.ints[0] = 1;
    ua.prog.n = 3;
    ua.prog.ins[0] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_MUL, 2, 1, 0, 0};
    ua.prog.ins[1] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_SUB, 0, -1, 0, 0};
    ua.prog.ins[2] = (sx_fused_instr){SX_FUSED_STORE, 0, -2, 0, 0, 0};
    FAILS(g, SX_E_ARG, sx_cg_op_new(g, SX_OP_FUSED_UPDATE, 3, not_param, &ua),
          "sx_cg_fused_update:", "not a parameter");
    FAILS(g, SX_E_SHAPE, sx_cg_op_new(g, SX_OP_FUSED_UPDATE, 3, bad_lr, &ua),
          "sx_cg_fused_update:");
    FAILS(g, SX_E_SHAPE, sx_cg_op_new(g, SX_OP_FUSED_UPDATE, 3, bad_g, &ua),
          "sx_cg_fused_update:", "(4,4)", "(3,4)");
    sx_cg_attr bad = ua;
    bad.prog.ins[2].b = 1; /* a store into an operand it does not write */
    FAILS(g, SX_E_ARG, sx_cg_op_new(g, SX_OP_FUSED_UPDATE, 3, good, &bad),
          "sx_cg_fused_update:", "stores");
    sx_cg_attr at = sx_cg_attr_default();
    at.prog.n = 1;
    at.rank = 1;
    at.shape[0] = 5;
    sx_cg_node *two[2] = {x, lr};
    FAILS(g, SX_E_SHAPE, sx_cg_op_new(g, SX_OP_FUSED, 2, two, &at), "sx_cg_fused:");
    sx_tensor_free(t);
    sx_cg_graph_free(g);
}

/* The generic constructor: leaves and unknown ops are not operations, arity is checked, inputs
 * must belong to the graph. */
Test(cgraph_shapes, generic_constructor_errors)
{
    sx_cg_graph *g = graph(SX_F32), *h = graph(SX_F32);
    sx_cg_node *x = V(g, 3), *y = V(h, 3), *xs[3] = {x, x, x};
    FAILS(g, SX_E_ARG, sx_cg_op_new(g, SX_OP_INPUT, 0, NULL, NULL), "sx_cg_op_new:");
    FAILS(g, SX_E_ARG, sx_cg_op_new(g, SX_OP_COUNT, 1, xs, NULL), "sx_cg_op_new:");
    FAILS(g, SX_E_ARG, sx_cg_op_new(g, SX_OP_ADD, 3, xs, NULL), "sx_cg_add:", "3 inputs");
    FAILS(g, SX_E_ARG, sx_cg_op_new(g, SX_OP_SIN, 0, NULL, NULL), "sx_cg_sin:");
    FAILS(g, SX_E_ARG, sx_cg_op_new(g, SX_OP_ADD, 2, NULL, NULL), "sx_cg_op_new:");
    FAILS(g, SX_E_ARG, sx_cg_op_new(g, SX_OP_MATMUL, 1, xs, NULL), "sx_cg_matmul:", "1 inputs");
    FAILS(g, SX_E_ARG, sx_cg_add(g, x, y), "sx_cg_add:", "another graph");
    sx_cg_graph_free(g);
    sx_cg_graph_free(h);
}

Test(cgraph_shapes, null_arguments)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *x = V(g, 2, 3), *img = V(g, 1, 4, 4, 1);
    FAILS(g, SX_E_ARG, sx_cg_repeat(g, x, NULL), "sx_cg_repeat:");
    FAILS(g, SX_E_ARG, sx_cg_tile(g, x, NULL), "sx_cg_tile:");
    FAILS(g, SX_E_ARG, sx_cg_slice(g, x, NULL), "sx_cg_slice:");
    FAILS(g, SX_E_ARG, sx_cg_unslice(g, x, NULL, 2, DIMS(2, 3)), "sx_cg_unslice:");
    FAILS(g, SX_E_ARG, sx_cg_permute(g, x, NULL), "sx_cg_permute:");
    FAILS(g, SX_E_ARG, sx_cg_pad(g, x, NULL, DIMS(0, 0), 0), "sx_cg_pad:");
    FAILS(g, SX_E_RANK, sx_cg_reshape(g, x, 2, NULL), "sx_cg_reshape:");
    FAILS(g, SX_E_ARG, sx_cg_conv2d(g, img, img, NULL), "sx_cg_conv2d:");
    FAILS(g, SX_E_ARG, sx_cg_maxpool2d(g, img, NULL), "sx_cg_maxpool2d:");
    FAILS(g, SX_E_ARG, sx_cg_avgpool2d_backward(g, img, NULL, DIMS(1, 4, 4, 1)),
          "sx_cg_avgpool2d_backward:");
    FAILS(g, SX_E_ARG, sx_cg_concat(g, 2, NULL, 0), "sx_cg_op_new:");
    FAILS_STRICT(g, SX_E_ARG, sx_cg_const(g, NULL), "sx_cg_const:");
    FAILS_STRICT(g, SX_E_ARG, sx_cg_param(g, "p", NULL), "sx_cg_param:");
    sx_cg_graph_free(g);
}

/* After freezing, no node can be added: leaves or ops. */
Test(cgraph_shapes, frozen_graph_refuses_new_nodes)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *x = V(g, 2, 2), *y = sx_cg_sin(g, x);
    cr_assert_eq(sx_cg_freeze(g, 1, &y), SX_OK, "%s", sx_last_error());
    sx_tensor *t = tu_zeros(SX_F32, 1, DIMS(2));
    int id;
    cr_assert_eq(sx_cg_rng_new(g, 1, &id), SX_OK);
    FAILS_STRICT(g, SX_E_STATE, sx_cg_add(g, x, y), "sx_cg_add:", "frozen");
    FAILS_STRICT(g, SX_E_STATE, sx_cg_cos(g, x), "sx_cg_cos:", "frozen");
    FAILS_STRICT(g, SX_E_STATE, sx_cg_sum(g, y, SX_AXES_ALL, false), "sx_cg_sum:");
    FAILS_STRICT(g, SX_E_STATE, sx_cg_add_scalar(g, x, 1), "frozen");
    FAILS_STRICT(g, SX_E_STATE, sx_cg_input(g, "z", SX_F32, 1, DIMS(2)), "sx_cg_input", "frozen");
    FAILS_STRICT(g, SX_E_STATE, sx_cg_const(g, t), "frozen");
    FAILS_STRICT(g, SX_E_STATE, sx_cg_param(g, "p", t), "frozen");
    FAILS_STRICT(g, SX_E_STATE, sx_cg_scalar(g, 1), "frozen");
    FAILS_STRICT(g, SX_E_STATE, sx_cg_dropout_mask(g, id, 0.5, 1, DIMS(2)), "sx_cg_dropout_mask:");
    sx_tensor_free(t);
    sx_cg_graph_free(g);
}

/* The graph keeps its first error until cleared, so an expression can be checked once. */
Test(cgraph_shapes, first_error_is_kept)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *a = V(g, 3, 4), *b = V(g, 5, 4);
    int64_t before = nodes_and_edges(g);
    sx_cg_node *r = sx_cg_exp(g, sx_cg_add(g, sx_cg_mul(g, a, b), a));
    cr_assert_null(r);
    cr_assert_eq(sx_cg_graph_status(g), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "sx_cg_mul:") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_cg_sum(g, a, SX_AXIS(4), false), NULL);
    cr_assert_eq(sx_cg_graph_status(g), SX_E_SHAPE, "the first error stays");
    cr_assert_eq(nodes_and_edges(g), before);
    sx_cg_graph_status_clear(g);
    cr_assert_eq(sx_cg_graph_status(g), SX_OK);
    cr_assert_not_null(sx_cg_add(g, a, a));
    cr_assert_eq(sx_cg_graph_status(g), SX_OK);
    sx_cg_graph_free(g);
}

/* A NULL node argument (an earlier failure): NULL back, no new message, graph unchanged, the
 * graph's first error kept. Every constructor, every node argument; and a NULL graph. */
Test(cgraph_shapes, null_inputs_propagate)
{
    sx_cg_graph *g = graph(SX_F32);
    sx_cg_node *x = V(g, 2, 2), *k = V(g, 1, 1, 2, 2), *img = V(g, 1, 2, 2, 2);
    sx_cg_node *N = NULL;
    sx_slice sl[2] = {SX_SLICE_ALL, SX_SLICE_ALL};
    sx_conv2d_params cp = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID};
    sx_pool2d_params pp = {
        .kernel_h = 1, .kernel_w = 1, .stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID};
    int id;
    cr_assert_eq(sx_cg_rng_new(g, 1, &id), SX_OK);
    (void)sx_cg_add(g, x, V(g, 3)); /* the first error */
    cr_assert_eq(sx_cg_graph_status(g), SX_E_SHAPE);
    (void)sx_error(SX_E_IO, "sentinel");
    int64_t before = nodes_and_edges(g);
#define NUL(call)                                                                                  \
    do {                                                                                           \
        cr_assert_null(call, "%s", #call);                                                         \
        cr_assert_str_eq(sx_last_error(), "sentinel", "%s set a message", #call);                  \
        cr_assert_eq(nodes_and_edges(g), before, "%s changed the graph", #call);                   \
        cr_assert_eq(sx_cg_graph_status(g), SX_E_SHAPE, "%s replaced the first error", #call);     \
    } while (0)
    NUL(sx_cg_neg(g, N));
    NUL(sx_cg_sin(g, N));
    NUL(sx_cg_leaky_relu(g, N, 0.1));
    NUL(sx_cg_elu(g, N, 1));
    NUL(sx_cg_add(g, N, x));
    NUL(sx_cg_add(g, x, N));
    NUL(sx_cg_ge(g, N, N));
    NUL(sx_cg_add_scalar(g, N, 1));
    NUL(sx_cg_mul_scalar(g, N, 2));
    NUL(sx_cg_fma(g, N, x, x));
    NUL(sx_cg_fma(g, x, N, x));
    NUL(sx_cg_fma(g, x, x, N));
    NUL(sx_cg_where(g, x, x, N));
    NUL(sx_cg_sum(g, N, SX_AXES_ALL, false));
    NUL(sx_cg_argmax(g, N, 0, true));
    NUL(sx_cg_repeat(g, N, DIMS(1, 1)));
    NUL(sx_cg_tile(g, N, DIMS(1, 1)));
    NUL(sx_cg_broadcast(g, N, 2, DIMS(2, 2)));
    NUL(sx_cg_reshape(g, N, 1, DIMS(4)));
    NUL(sx_cg_slice(g, N, sl));
    NUL(sx_cg_unslice(g, N, sl, 2, DIMS(2, 2)));
    NUL(sx_cg_concat(g, 2, ((sx_cg_node *[]){x, N}), 0));
    NUL(sx_cg_permute(g, N, (const int[]){1, 0}));
    NUL(sx_cg_transpose(g, N));
    NUL(sx_cg_pad(g, N, DIMS(0, 0), DIMS(1, 1), 0));
    NUL(sx_cg_one_hot(g, N, 3));
    NUL(sx_cg_gather(g, N, x));
    NUL(sx_cg_gather(g, x, N));
    NUL(sx_cg_scatter_add(g, N, x, 2));
    NUL(sx_cg_scatter_add(g, x, N, 2));
    NUL(sx_cg_matmul(g, N, x, false, false));
    NUL(sx_cg_matmul(g, x, N, false, false));
    NUL(sx_cg_gemm(g, N, x, false, false, 1, x, 1));
    NUL(sx_cg_dot(g, x, N));
    NUL(sx_cg_conv2d(g, N, k, &cp));
    NUL(sx_cg_conv2d(g, img, N, &cp));
    NUL(sx_cg_conv2d_backward_input(g, N, img, &cp, DIMS(1, 2, 2, 2)));
    NUL(sx_cg_conv2d_backward_input(g, k, N, &cp, DIMS(1, 2, 2, 2)));
    NUL(sx_cg_conv2d_backward_kernel(g, N, img, &cp, DIMS(1, 1, 2, 2)));
    NUL(sx_cg_conv2d_backward_kernel(g, img, N, &cp, DIMS(1, 1, 2, 2)));
    NUL(sx_cg_maxpool2d(g, N, &pp));
    NUL(sx_cg_maxpool2d_backward(g, N, img, &pp));
    NUL(sx_cg_maxpool2d_backward(g, img, N, &pp));
    NUL(sx_cg_avgpool2d(g, N, &pp));
    NUL(sx_cg_avgpool2d_backward(g, N, &pp, DIMS(1, 2, 2, 2)));
    NUL(sx_cg_softmax(g, N, 0));
    NUL(sx_cg_log_softmax(g, N, 0));
    NUL(sx_cg_softmax_backward(g, N, x, 0));
    NUL(sx_cg_log_softmax_backward(g, x, N, 0));
    NUL(sx_cg_softmax_xent(g, N, x));
    NUL(sx_cg_softmax_xent(g, x, N));
    NUL(sx_cg_softmax_xent_backward(g, x, x, N));
    NUL(sx_cg_inv(g, N));
    NUL(sx_cg_solve(g, x, N));
    NUL(sx_cg_det(g, N));
    NUL(sx_cg_logdet(g, N));
    NUL(sx_cg_cholesky(g, N));
    NUL(sx_cg_qr_q(g, N));
    NUL(sx_cg_qr_r(g, N));
    NUL(sx_cg_svd_s(g, N));
    NUL(sx_cg_eigh_w(g, N));
    NUL(sx_cg_eigh_v(g, N));
    NUL(sx_cg_assign(g, N, x));
    NUL(sx_cg_assign(g, x, N));
    /* the generic constructor, every op of the table with every input NULL */
    sx_cg_node *nulls[8] = {0};
    for (int op = 0; op < SX_OP_COUNT; op++) {
        int arity = sx_cg_op_arity((sx_cg_op)op);
        if (arity > 0 && !(sx_cg_op_flags((sx_cg_op)op) & SX_OPF_LEAF))
            NUL(sx_cg_op_new(g, (sx_cg_op)op, arity, nulls, NULL));
    }
#undef NUL
    /* a NULL graph */
    cr_assert_null(sx_cg_add(NULL, x, x));
    cr_assert_null(sx_cg_sin(NULL, x));
    cr_assert_null(sx_cg_transpose(NULL, x));
    cr_assert_null(sx_cg_input(NULL, "x", SX_F32, 0, NULL));
    cr_assert_null(sx_cg_scalar(NULL, 1));
    cr_assert_null(sx_cg_op_new(NULL, SX_OP_ADD, 2, ((sx_cg_node *[]){x, x}), NULL));
    cr_assert_eq(nodes_and_edges(g), before);
    sx_cg_graph_free(g);
}
