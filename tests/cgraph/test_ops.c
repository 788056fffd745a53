/* Every op of sx_ops.def, every sample variant (opsamples.c), in f32 and f64: a lazy and an
 * eager graph built from the same seed agree bit for bit, and with a direct call of the tensor
 * kernel on the same input values; a plain double reference written here (or, for linear
 * algebra, the defining identities) agrees within rounding; results hold no NaN/Inf; a frozen
 * graph recomputes only after a leaf changes, and nothing when nothing changed. The samples are
 * also checked to be ready for autodiff's finite differences (stable, away from kinks). */
#include "testutil.h"

#include "opsamples.c"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const sx_dtype dtypes[2] = {SX_F32, SX_F64};

static uint64_t seed_of(sx_cg_op op, int variant, int k)
{
    return 0x5eedULL + 1000003ULL * (uint64_t)op + 7919ULL * (uint64_t)variant + 31ULL * k;
}

/* ---------------------------------------------------------------- helpers */

static sx_cg_graph *graph_new(sx_cg_mode mode, sx_dtype dt)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(mode, dt, &g), SX_OK, "%s", sx_last_error());
    return g;
}

/* Build a sample and check what every sample promises: no error, the op and dtype asked for. */
static sx_cg_node *build(sx_cg_graph *g, sx_cg_op op, sx_dtype dt, uint64_t seed, int v,
                         os_sample *s, const char *what)
{
    sx_cg_node *n = os_build(g, op, dt, seed, v, s);
    cr_assert_not_null(n, "%s: build failed: %s", what, sx_last_error());
    cr_assert_eq(sx_cg_graph_status(g), SX_OK, "%s: %s", what, sx_last_error());
    cr_assert_eq(sx_cg_node_op(n), op, "%s: node is a %s", what, sx_cg_op_name(sx_cg_node_op(n)));
    cr_assert_eq(sx_cg_node_dtype(n), dt, "%s: wrong dtype", what);
    return n;
}

static void eval1(sx_cg_graph *g, sx_cg_node *n, const char *what)
{
    cr_assert_eq(sx_cg_eval(g, 1, &n), SX_OK, "%s: eval: %s", what, sx_last_error());
    cr_assert_not_null(sx_cg_value(n), "%s: no value after eval", what);
}

static int64_t kernels(const sx_cg_graph *g)
{
    return sx_cg_graph_stats(g).kernel_calls;
}

static void assert_same_bits(const sx_tensor *a, const sx_tensor *b, const char *what,
                             const char *which)
{
    cr_assert_eq(a->dtype, b->dtype, "%s: %s: dtypes differ", what, which);
    cr_assert(sx_shape_equal(a->rank, a->shape, b->rank, b->shape), "%s: %s: shapes differ", what,
              which);
    size_t bytes = (size_t)a->size * sx_dtype_size(a->dtype);
    if (bytes > 0 && memcmp(a->data, b->data, bytes) != 0) {
        for (int64_t i = 0; i < a->size; i++)
            if (memcmp((const char *)a->data + i * (int64_t)sx_dtype_size(a->dtype),
                       (const char *)b->data + i * (int64_t)sx_dtype_size(a->dtype),
                       sx_dtype_size(a->dtype)) != 0)
                cr_assert_fail("%s: %s: element %lld: %.17g vs %.17g", what, which, (long long)i,
                               sx_tensor_get(a, i), sx_tensor_get(b, i));
    }
}

static void assert_finite(const sx_tensor *t, const char *what)
{
    for (int64_t i = 0; i < t->size; i++)
        cr_assert(isfinite(sx_tensor_get(t, i)), "%s: element %lld is %g", what, (long long)i,
                  sx_tensor_get(t, i));
}

static sx_tensor *clone(const sx_tensor *t)
{
    sx_tensor *c = NULL;
    cr_assert_eq(sx_tensor_clone(t, &c), SX_OK, "%s", sx_last_error());
    return c;
}

static const sx_tensor *in_value(const sx_cg_node *n, int i)
{
    return sx_cg_value(sx_cg_node_input(n, i));
}

static void *xmalloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    cr_assert_not_null(p);
    return p;
}

/* ---------------------------------------------------------------- direct kernel calls */

/* The fused optimiser steps on copies of the inputs' values before the step; the states the
 * node wrote must equal the copies' (bit for bit). */
static sx_status update_ref(const sx_cg_node *n, const sx_tensor *const *xin, sx_tensor *out)
{
    const double *c = sx_cg_node_attr(n)->coef;
    int last = sx_cg_node_n_inputs(n) - 1;
    sx_cg_op op = sx_cg_node_op(n);
    /* matmul_update: the gradient is alpha op(a) @ op(b), computed whole here */
    const sx_tensor *xs[6];
    sx_tensor *gm = NULL;
    const sx_tensor *const *x = xin;
    if (op == SX_OP_MATMUL_UPDATE) {
        const sx_cg_attr *at = sx_cg_node_attr(n);
        op = (sx_cg_op)at->ints[0];
        int k = last - 2;
        gm = clone(xin[0]);
        cr_assert_eq(
            sx_tensor_matmul_out(xin[k], xin[k + 1], at->trans_a, at->trans_b, at->alpha, 0.0, gm),
            SX_OK, "%s", sx_last_error());
        for (int i = 0; i < k; i++)
            xs[i] = xin[i];
        xs[k] = gm;
        xs[k + 1] = xin[last];
        last = k + 1;
        x = xs;
    }
    double lr = sx_tensor_get(x[last], 0), r[3] = {lr, 0, 0};
    for (int64_t i = 1; i < 3 && i < x[last]->size; i++)
        r[i] = sx_tensor_get(x[last], i);
    sx_tensor *p = clone(x[0]), *s1 = last > 2 ? clone(x[1]) : NULL;
    sx_tensor *s2 = last > 3 ? clone(x[2]) : NULL, *s3 = last > 4 ? clone(x[3]) : NULL;
    sx_status st = SX_E_ARG;
    switch (op) {
    case SX_OP_SGD_UPDATE:
        st = sx_tensor_sgd_step(p, x[1], lr);
        break;
    case SX_OP_MOMENTUM_UPDATE:
        st = sx_tensor_momentum_step(p, s1, x[2], lr, c[0], sx_cg_node_attr(n)->nesterov);
        break;
    case SX_OP_ADAGRAD_UPDATE:
        st = sx_tensor_adagrad_step(p, s1, x[2], lr, c[0]);
        break;
    case SX_OP_RMSPROP_UPDATE:
        st = sx_tensor_rmsprop_step(p, s1, x[2], lr, c[0], c[1], c[2]);
        break;
    case SX_OP_ADAM_UPDATE:
        st = sx_tensor_adam_step(p, s1, s2, x[3], lr, c[0], c[1], c[2], c[3], c[4]);
        break;
    case SX_OP_ADAMW_UPDATE:
        st = sx_tensor_adamw_step(p, s1, s2, NULL, x[3], r[0], r[1], r[2], c[0], c[1], c[2], c[3],
                                  c[4]);
        break;
    case SX_OP_AMSGRAD_UPDATE:
        st = sx_tensor_adamw_step(p, s1, s2, s3, x[4], r[0], r[1], r[2], c[0], c[1], c[2], c[3],
                                  c[4]);
        break;
    case SX_OP_RMSPROP_CENTERED_UPDATE:
        st = sx_tensor_rmsprop_centered_step(p, s1, s2, x[3], lr, c[0], c[1], c[2]);
        break;
    case SX_OP_MOMENTUM_DAMPENED_UPDATE:
        st = sx_tensor_momentum_dampened_step(p, s1, x[2], r[0], r[1], c[0],
                                              sx_cg_node_attr(n)->nesterov);
        break;
    default:
        cr_assert_fail("update_ref: not an update");
    }
    if (st == SX_OK)
        st = sx_tensor_copy_out(p, out);
    if (s1 != NULL)
        assert_same_bits(in_value(n, 1), s1, sx_cg_op_name(sx_cg_node_op(n)), "first state");
    if (s2 != NULL)
        assert_same_bits(in_value(n, 2), s2, sx_cg_op_name(sx_cg_node_op(n)), "second state");
    if (s3 != NULL)
        assert_same_bits(in_value(n, 3), s3, sx_cg_op_name(sx_cg_node_op(n)), "third state");
    sx_tensor_free(p);
    sx_tensor_free(gm);
    sx_tensor_free(s1);
    sx_tensor_free(s2);
    sx_tensor_free(s3);
    return st;
}

/* The node's result computed by calling the tensor kernel directly on input values x (the
 * node's inputs' values, or for mutating ops their values before the evaluation); the mapping
 * from op to kernel is written out here, independently of sx_ops.def. `out` has the node's
 * shape and dtype. */
static sx_status kernel_ref(const sx_cg_node *n, const os_sample *s, const sx_tensor *const *x,
                            sx_tensor *out)
{
    const sx_cg_attr *a = sx_cg_node_attr(n);
    sx_dtype dt = out->dtype;
    sx_status st = SX_OK;
    void *ws = NULL;
#define MAP(OP)                                                                                    \
    case SX_OP_##OP:                                                                               \
        return sx_tensor_map_out(SX_MAP_##OP, a->alpha, x[0], out);
#define BIN(OP)                                                                                    \
    case SX_OP_##OP:                                                                               \
        return sx_tensor_binary_out(SX_BINARY_##OP, x[0], x[1], out);
#define FOLD(OP, KERNEL)                                                                           \
    case SX_OP_##OP:                                                                               \
        return sx_tensor_fold_out(SX_FOLD_##KERNEL, x[0], a->axes, a->keepdims, out);
    switch (sx_cg_node_op(n)) {
    case SX_OP_CONST:
    case SX_OP_INPUT:
    case SX_OP_PARAM:
        return sx_tensor_copy_out(sx_cg_value(n), out);
#define SX_MAP_ROW(NAME, ...) MAP(NAME)
#include "sx_map.def"
#undef SX_MAP_ROW
#define SX_BINARY_ROW(NAME, ...) BIN(NAME)
#include "sx_binary.def"
#undef SX_BINARY_ROW
    case SX_OP_FMA:
        return sx_tensor_fma_out(x[0], x[1], x[2], out);
    case SX_OP_WHERE: {
        /* no where kernel: broadcast the three operands and choose */
        sx_tensor *c = tu_zeros(dt, out->rank, out->shape),
                  *t = tu_zeros(dt, out->rank, out->shape);
        st = sx_tensor_broadcast_out(x[0], c);
        if (st == SX_OK)
            st = sx_tensor_broadcast_out(x[1], t);
        if (st == SX_OK)
            st = sx_tensor_broadcast_out(x[2], out);
        for (int64_t i = 0; st == SX_OK && i < out->size; i++)
            if (sx_tensor_get(c, i) != 0)
                sx_tensor_set(out, i, sx_tensor_get(t, i));
        sx_tensor_free(c);
        sx_tensor_free(t);
        return st;
    }
        FOLD(SUM, SUM)
        FOLD(MEAN, MEAN)
        FOLD(PROD, PROD)
        FOLD(REDUCE_MAX, MAX)
        FOLD(REDUCE_MIN, MIN)
        FOLD(ARGMAX, ARGMAX)
        FOLD(ARGMIN, ARGMIN)
        FOLD(L1NORM, L1NORM)
        FOLD(L2NORM, L2NORM)
        FOLD(LOGSUMEXP, LOGSUMEXP)
    case SX_OP_REPEAT:
        return sx_tensor_repeat_out(x[0], a->ints, out);
    case SX_OP_TILE:
        return sx_tensor_tile_out(x[0], a->ints, out);
    case SX_OP_BROADCAST:
        return sx_tensor_broadcast_out(x[0], out);
    case SX_OP_RESHAPE:
    case SX_OP_IDENTITY:
        return sx_tensor_copy_out(x[0], out);
    case SX_OP_SLICE:
        return sx_tensor_slice_out(x[0], a->slice, out);
    case SX_OP_UNSLICE:
        return sx_tensor_unslice_out(x[0], a->slice, out);
    case SX_OP_CONCAT:
        return sx_tensor_concat_out(sx_cg_node_n_inputs(n), x, a->axis, out);
    case SX_OP_PERMUTE: {
        int perm[SX_MAX_RANK];
        for (int i = 0; i < out->rank; i++)
            perm[i] = (int)a->ints[i];
        return sx_tensor_permute_out(x[0], perm, out);
    }
    case SX_OP_PAD:
        return sx_tensor_pad_out(x[0], a->ints, a->ints2, a->alpha, out);
    case SX_OP_ONE_HOT:
        return sx_tensor_one_hot_out(x[0], a->ints[0], out);
    case SX_OP_GATHER:
        return sx_tensor_gather_out(x[0], x[1], out);
    case SX_OP_SCATTER_ADD:
        return sx_tensor_scatter_add_out(x[0], x[1], out);
    case SX_OP_MATMUL:
        if (sx_cg_node_n_inputs(n) == 3) {
            st = sx_tensor_broadcast_out(x[2], out); /* the addend broadcasts */
            if (st != SX_OK)
                return st;
            return sx_tensor_matmul_out(x[0], x[1], a->trans_a, a->trans_b, a->alpha, a->beta, out);
        }
        return sx_tensor_matmul_out(x[0], x[1], a->trans_a, a->trans_b, a->alpha, 0, out);
    case SX_OP_DOT: {
        /* the kernel takes vectors: flat views of the operands */
        int64_t na = x[0]->size, nb = x[1]->size;
        sx_tensor va = sx_tensor_view(dt, 1, &na, x[0]->data);
        sx_tensor vb = sx_tensor_view(dt, 1, &nb, x[1]->data);
        return sx_tensor_dot_out(&va, &vb, out);
    }
    case SX_OP_CONV2D: {
        size_t bytes = sx_conv2d_workspace(x[0]->shape, x[1]->shape, &a->conv);
        ws = xmalloc(bytes);
        st = sx_tensor_conv2d_out(x[0], x[1], &a->conv, ws, bytes, out);
        free(ws);
        return st;
    }
    case SX_OP_CONV2D_BACKWARD_INPUT: {
        size_t bytes = sx_conv2d_workspace(out->shape, x[0]->shape, &a->conv);
        ws = xmalloc(bytes);
        st = sx_tensor_conv2d_backward_input_out(x[0], x[1], &a->conv, ws, bytes, out);
        free(ws);
        return st;
    }
    case SX_OP_CONV2D_BACKWARD_KERNEL: {
        size_t bytes = sx_conv2d_workspace(x[0]->shape, out->shape, &a->conv);
        ws = xmalloc(bytes);
        st = sx_tensor_conv2d_backward_kernel_out(x[0], x[1], &a->conv, ws, bytes, out);
        free(ws);
        return st;
    }
    case SX_OP_CONV_TRANSPOSE2D: {
        size_t bytes = sx_conv_transpose2d_workspace(x[0]->shape, x[1]->shape, &a->conv);
        ws = xmalloc(bytes);
        st = sx_tensor_conv_transpose2d_out(x[0], x[1], &a->conv, ws, bytes, out);
        free(ws);
        return st;
    }
    case SX_OP_CONV_TRANSPOSE2D_BACKWARD_INPUT: {
        size_t bytes = sx_conv_transpose2d_workspace(out->shape, x[0]->shape, &a->conv);
        ws = xmalloc(bytes);
        st = sx_tensor_conv_transpose2d_backward_input_out(x[0], x[1], &a->conv, ws, bytes, out);
        free(ws);
        return st;
    }
    case SX_OP_CONV_TRANSPOSE2D_BACKWARD_KERNEL: {
        size_t bytes = sx_conv_transpose2d_workspace(x[0]->shape, out->shape, &a->conv);
        ws = xmalloc(bytes);
        st = sx_tensor_conv_transpose2d_backward_kernel_out(x[0], x[1], &a->conv, ws, bytes, out);
        free(ws);
        return st;
    }
    case SX_OP_ADAPTIVE_AVGPOOL2D:
        return sx_tensor_adaptive_avgpool2d_out(x[0], out);
    case SX_OP_ADAPTIVE_AVGPOOL2D_BACKWARD:
        return sx_tensor_adaptive_avgpool2d_backward_out(x[0], out);
    case SX_OP_MAXPOOL2D:
        return sx_tensor_maxpool2d_out(x[0], &a->pool, out);
    case SX_OP_MAXPOOL2D_BACKWARD:
        return sx_tensor_maxpool2d_backward_out(x[0], x[1], &a->pool, out);
    case SX_OP_MAXPOOL2D_RELU_BACKWARD:
        return sx_tensor_maxpool2d_relu_backward_out(x[0], x[1], &a->pool, out);
    case SX_OP_AVGPOOL2D:
        return sx_tensor_avgpool2d_out(x[0], &a->pool, out);
    case SX_OP_AVGPOOL2D_BACKWARD:
        return sx_tensor_avgpool2d_backward_out(x[0], &a->pool, out);
    case SX_OP_SOFTMAX:
        return sx_tensor_softmax_out(x[0], a->axis, out);
    case SX_OP_LOG_SOFTMAX:
        return sx_tensor_log_softmax_out(x[0], a->axis, out);
    case SX_OP_SOFTMAX_BACKWARD:
        return sx_tensor_softmax_backward_out(x[0], x[1], a->axis, out);
    case SX_OP_LOG_SOFTMAX_BACKWARD:
        return sx_tensor_log_softmax_backward_out(x[0], x[1], a->axis, out);
    case SX_OP_BATCH_NORM_STATS:
        return sx_tensor_batch_norm_stats_out(x[0], out);
    case SX_OP_BATCH_NORM:
        return sx_tensor_batch_norm_out(x[0], x[1], x[2], x[3], a->alpha, out);
    case SX_OP_BATCH_NORM_SUMS:
        return sx_tensor_batch_norm_sums_out(x[0], x[1], x[2], out);
    case SX_OP_SOFTMAX_XENT:
        return sx_tensor_softmax_xent_out(x[0], x[1], out);
    case SX_OP_SOFTMAX_XENT_BACKWARD:
        return sx_tensor_softmax_xent_backward_out(x[0], x[1], x[2], out);
    case SX_OP_DROPOUT_MASK: {
        /* the first mask the graph's generator draws */
        sx_rng r;
        sx_rng_seed(&r, s->rng_seed);
        return sx_tensor_dropout_mask(out, &r, a->alpha);
    }
    case SX_OP_INV:
        return sx_tensor_inv_out(x[0], out);
    case SX_OP_SOLVE:
        return sx_tensor_solve_out(x[0], x[1], out);
    case SX_OP_DET:
        return sx_tensor_det_out(x[0], out);
    case SX_OP_LOGDET:
        return sx_tensor_logdet_out(x[0], out, NULL);
    case SX_OP_CHOLESKY:
        return sx_tensor_cholesky_out(x[0], out);
    case SX_OP_QR_Q: {
        int64_t rs[2] = {out->shape[1], x[0]->shape[1]};
        sx_tensor *r = tu_zeros(dt, 2, rs);
        st = sx_tensor_qr_out(x[0], out, r);
        sx_tensor_free(r);
        return st;
    }
    case SX_OP_QR_R: {
        int64_t qs[2] = {x[0]->shape[0], out->shape[0]};
        sx_tensor *q = tu_zeros(dt, 2, qs);
        st = sx_tensor_qr_out(x[0], q, out);
        sx_tensor_free(q);
        return st;
    }
    case SX_OP_SVD_S:
        return sx_tensor_svd_out(x[0], NULL, out, NULL);
    case SX_OP_EIGH_W:
        return sx_tensor_eigh_out(x[0], out, NULL);
    case SX_OP_EIGH_V: {
        int64_t wn = out->shape[0];
        sx_tensor *w = tu_zeros(dt, 1, &wn);
        st = sx_tensor_eigh_out(x[0], w, out);
        sx_tensor_free(w);
        return st;
    }
    case SX_OP_ASSIGN:
        return sx_tensor_copy_out(x[1], out);
    case SX_OP_SEQ:
        return sx_tensor_copy_out(x[0], out);
    case SX_OP_FUSED:
        return sx_tensor_fused_out(&a->prog, sx_cg_node_n_inputs(n), x, out);
    case SX_OP_SGD_UPDATE:
    case SX_OP_MOMENTUM_UPDATE:
    case SX_OP_ADAGRAD_UPDATE:
    case SX_OP_RMSPROP_UPDATE:
    case SX_OP_ADAM_UPDATE:
    case SX_OP_ADAMW_UPDATE:
    case SX_OP_AMSGRAD_UPDATE:
    case SX_OP_RMSPROP_CENTERED_UPDATE:
    case SX_OP_MOMENTUM_DAMPENED_UPDATE:
    case SX_OP_MATMUL_UPDATE:
        return update_ref(n, x, out);
    case SX_OP_COUNT:
        break;
    }
#undef MAP
#undef BIN
#undef FOLD
    return sx_error(SX_E_ARG, "kernel_ref: unknown op");
}

/* ---------------------------------------------------------------- plain references */

static void unravel(int64_t i, int rank, const int64_t *shape, int64_t *idx)
{
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

/* The flat index into x (right-aligned, size-1 axes broadcast) of an output multi-index. */
static int64_t bcast_at(const sx_tensor *x, int out_rank, const int64_t *oidx)
{
    int64_t k = 0;
    for (int d = 0; d < x->rank; d++) {
        int64_t id = x->shape[d] == 1 ? 0 : oidx[d + out_rank - x->rank];
        k = k * x->shape[d] + id;
    }
    return k;
}

static double get(const sx_tensor *t, int64_t i)
{
    return sx_tensor_get(t, i);
}

/* The unary map op in double: the ref column of its sx_map.def row (libm, from the definition;
 * independent of the kernel expression). NaN for an op that is not a map. */
static double map_plain(sx_cg_op op, double x, double a)
{
    (void)a;
#define SX_MAP_ROW(NAME, name, expr, ref, ...)                                                     \
    if (op == SX_OP_##NAME)                                                                        \
        return (ref);
#include "sx_map.def"
#undef SX_MAP_ROW
    return nan(""); /* not a map op */
}

/* The binary kernel of a graph op (SX_BINARY_COUNT for an op that is not binary). */
static sx_binary_op binary_kernel(sx_cg_op op)
{
#define SX_BINARY_ROW(NAME, ...)                                                                   \
    if (op == SX_OP_##NAME)                                                                        \
        return SX_BINARY_##NAME;
#include "sx_binary.def"
#undef SX_BINARY_ROW
    return SX_BINARY_COUNT;
}

/* The binary op in double, written here from its definition (an exhaustive switch: a new row
 * of sx_binary.def without its case here does not compile). */
static double binary_plain(sx_binary_op op, double a, double b)
{
    switch (op) {
    case SX_BINARY_ADD:
        return a + b;
    case SX_BINARY_SUB:
        return a - b;
    case SX_BINARY_MUL:
        return a * b;
    case SX_BINARY_DIV:
        return a / b;
    case SX_BINARY_POW:
        return pow(a, b);
    case SX_BINARY_MIN:
        return a < b ? a : b;
    case SX_BINARY_MAX:
        return a > b ? a : b;
    case SX_BINARY_ATAN2:
        return atan2(a, b);
    case SX_BINARY_EQ:
        return a == b;
    case SX_BINARY_NE:
        return a != b;
    case SX_BINARY_LT:
        return a < b;
    case SX_BINARY_LE:
        return a <= b;
    case SX_BINARY_GT:
        return a > b;
    case SX_BINARY_GE:
        return a >= b;
    case SX_BINARY_COUNT:
        break;
    }
    return nan(""); /* not a binary op */
}

/* Reductions: every element of x goes to the output cell of its kept axes; `r` is its
 * row-major index within the reduced axes (what argmax reports). */
static void fold_plain(sx_cg_op op, const sx_tensor *x, unsigned axes, int64_t n_out, double *want,
                       double *mag)
{
    unsigned mask = axes == SX_AXES_ALL ? (1u << x->rank) - 1u : axes;
    int64_t count = 1;
    for (int d = 0; d < x->rank; d++)
        if (mask >> d & 1u)
            count *= x->shape[d];
    double *best = xmalloc((size_t)n_out * sizeof *best), *m = xmalloc((size_t)n_out * sizeof *m);
    for (int64_t o = 0; o < n_out; o++) {
        m[o] = -HUGE_VAL;
        want[o] = op == SX_OP_PROD         ? 1
                  : op == SX_OP_REDUCE_MAX ? -HUGE_VAL
                  : op == SX_OP_REDUCE_MIN ? HUGE_VAL
                                           : 0;
        best[o] = op == SX_OP_ARGMAX ? -HUGE_VAL : HUGE_VAL;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < x->size; i++) {
            int64_t idx[SX_MAX_RANK], o = 0, r = 0;
            unravel(i, x->rank, x->shape, idx);
            for (int d = 0; d < x->rank; d++) {
                if (mask >> d & 1u)
                    r = r * x->shape[d] + idx[d];
                else
                    o = o * x->shape[d] + idx[d];
            }
            double v = get(x, i);
            if (pass == 0) { /* the maxima, for logsumexp */
                m[o] = v > m[o] ? v : m[o];
                continue;
            }
            mag[o] += fabs(v);
            switch (op) {
            case SX_OP_SUM:
            case SX_OP_MEAN:
                want[o] += v;
                break;
            case SX_OP_PROD:
                want[o] *= v;
                break;
            case SX_OP_REDUCE_MAX:
                want[o] = v > want[o] ? v : want[o];
                break;
            case SX_OP_REDUCE_MIN:
                want[o] = v < want[o] ? v : want[o];
                break;
            case SX_OP_ARGMAX:
            case SX_OP_ARGMIN:
                if (op == SX_OP_ARGMAX ? v > best[o] : v < best[o]) {
                    best[o] = v;
                    want[o] = (double)r;
                }
                break;
            case SX_OP_L1NORM:
                want[o] += fabs(v);
                break;
            case SX_OP_L2NORM:
                want[o] += v * v;
                break;
            case SX_OP_LOGSUMEXP:
                want[o] += exp(v - m[o]);
                break;
            default:
                cr_assert_fail("fold_plain: not a fold");
            }
        }
    for (int64_t o = 0; o < n_out; o++) {
        if (op == SX_OP_MEAN)
            want[o] /= (double)count;
        if (op == SX_OP_L2NORM)
            want[o] = sqrt(want[o]);
        if (op == SX_OP_LOGSUMEXP)
            want[o] = m[o] + log(want[o]);
        if (op == SX_OP_PROD || op == SX_OP_LOGSUMEXP)
            mag[o] = fabs(want[o]) * (double)count; /* relative error grows with the count */
        if (op == SX_OP_ARGMAX || op == SX_OP_ARGMIN)
            mag[o] = 0;
    }
    free(best);
    free(m);
}

/* Batched matmul with broadcasting batch axes and optional transposes, and the gemm addend. */
static void matmul_plain(const sx_cg_node *n, const sx_tensor *y, double *want, double *mag)
{
    const sx_cg_attr *at = sx_cg_node_attr(n);
    const sx_tensor *a = in_value(n, 0), *b = in_value(n, 1);
    const sx_tensor *c = sx_cg_node_n_inputs(n) == 3 ? in_value(n, 2) : NULL;
    int ro = y->rank;
    int64_t ar = a->shape[a->rank - 2], ac = a->shape[a->rank - 1];
    int64_t br = b->shape[b->rank - 2], bc = b->shape[b->rank - 1];
    int64_t kk = at->trans_a ? ar : ac;
    for (int64_t o = 0; o < y->size; o++) {
        int64_t idx[SX_MAX_RANK], abase = 0, bbase = 0;
        unravel(o, ro, y->shape, idx);
        for (int d = 0; d < a->rank - 2; d++)
            abase = abase * a->shape[d] + (a->shape[d] == 1 ? 0 : idx[d + ro - a->rank]);
        for (int d = 0; d < b->rank - 2; d++)
            bbase = bbase * b->shape[d] + (b->shape[d] == 1 ? 0 : idx[d + ro - b->rank]);
        int64_t i = idx[ro - 2], j = idx[ro - 1];
        double acc = 0, m = 0;
        for (int64_t k = 0; k < kk; k++) {
            double va = get(a, abase * ar * ac + (at->trans_a ? k * ac + i : i * ac + k));
            double vb = get(b, bbase * br * bc + (at->trans_b ? j * bc + k : k * bc + j));
            acc += va * vb;
            m += fabs(va * vb);
        }
        double vc = c ? get(c, bcast_at(c, ro, idx)) : 0; /* the addend broadcasts */
        want[o] = at->alpha * acc + at->beta * vc;
        mag[o] = fabs(at->alpha) * m + fabs(at->beta * vc);
    }
}

/* The padding before (top/left) and after an axis of n cells with the dilated window ke,
 * and stride s (the header's rules: SAME splits the total with the odd cell after,
 * SAME_LOWER before; EXPLICIT gives both). */
static void pads_of(int64_t n, int64_t ke, int64_t s, sx_padding p, int64_t eb, int64_t ea,
                    int64_t *before, int64_t *after)
{
    int64_t same = (n + s - 1) / s, total = (same - 1) * s + ke - n;
    total = total > 0 ? total : 0;
    *before = *after = 0;
    if (p == SX_PAD_SAME)
        *before = total / 2, *after = total - total / 2;
    else if (p == SX_PAD_SAME_LOWER)
        *before = total - total / 2, *after = total / 2;
    else if (p == SX_PAD_EXPLICIT)
        *before = eb, *after = ea;
}

static int64_t at_least_1(int v)
{
    return v > 1 ? v : 1;
}

/* Convolution by its definition, any stride, padding, dilation and groups. mode 0: y from
 * (x, k); 1: dx from (k, dy); 2: dk from (x, dy). xs (n,h,w,c), ks (kh,kw,c/groups,f),
 * ys (n,oh,ow,f). */
static void conv_plain(int mode, const int64_t *xs, const int64_t *ks, const int64_t *ys,
                       const sx_conv2d_params *p, const sx_tensor *A, const sx_tensor *B,
                       double *out, double *mag)
{
    int64_t dh = at_least_1(p->dilation_h), dw = at_least_1(p->dilation_w), pt, pl, unused;
    int64_t fg = ks[3] / at_least_1(p->groups); /* filters per group */
    pads_of(xs[1], dh * (ks[0] - 1) + 1, p->stride_h, p->padding, p->pad_top, p->pad_bottom, &pt,
            &unused);
    pads_of(xs[2], dw * (ks[1] - 1) + 1, p->stride_w, p->padding, p->pad_left, p->pad_right, &pl,
            &unused);
    for (int64_t b = 0; b < ys[0]; b++)
        for (int64_t oy = 0; oy < ys[1]; oy++)
            for (int64_t ox = 0; ox < ys[2]; ox++)
                for (int64_t ky = 0; ky < ks[0]; ky++)
                    for (int64_t kx = 0; kx < ks[1]; kx++) {
                        int64_t iy = oy * p->stride_h + ky * dh - pt;
                        int64_t ix = ox * p->stride_w + kx * dw - pl;
                        if (iy < 0 || iy >= xs[1] || ix < 0 || ix >= xs[2])
                            continue;
                        for (int64_t c = 0; c < ks[2]; c++)
                            for (int64_t f = 0; f < ks[3]; f++) {
                                int64_t xc = (f / fg) * ks[2] + c; /* f's group's channel c */
                                int64_t xi = ((b * xs[1] + iy) * xs[2] + ix) * xs[3] + xc;
                                int64_t ki = ((ky * ks[1] + kx) * ks[2] + c) * ks[3] + f;
                                int64_t yi = ((b * ys[1] + oy) * ys[2] + ox) * ys[3] + f;
                                int64_t at = mode == 0 ? yi : mode == 1 ? xi : ki;
                                double v = mode == 0   ? get(A, xi) * get(B, ki)
                                           : mode == 1 ? get(A, ki) * get(B, yi)
                                                       : get(A, xi) * get(B, yi);
                                out[at] += v;
                                mag[at] += fabs(v);
                            }
                    }
}

/* Transposed convolution by its definition (each x pixel scatters into y). mode 0: y from
 * (x, k); 1: dx from (k, dy); 2: dk from (x, dy). xs (n,h,w,ci), ks (kh,kw,co/groups,ci),
 * ys (n,oh,ow,co). */
static void ct_plain(int mode, const int64_t *xs, const int64_t *ks, const int64_t *ys,
                     const sx_conv2d_params *p, const sx_tensor *A, const sx_tensor *B, double *out,
                     double *mag)
{
    int64_t dh = p->dilation_h > 0 ? p->dilation_h : 1, dw = p->dilation_w > 0 ? p->dilation_w : 1;
    int64_t groups = p->groups > 0 ? p->groups : 1, cig = xs[3] / groups, cog = ks[2];
    int64_t pt = 0, pl = 0;
    if (p->padding == SX_PAD_EXPLICIT) {
        pt = p->pad_top;
        pl = p->pad_left;
    } else if (p->padding != SX_PAD_VALID) { /* SAME: oh = h * sh */
        int64_t ph = (xs[1] - 1) * p->stride_h + dh * (ks[0] - 1) + 1 + p->output_padding_h - ys[1];
        int64_t pw = (xs[2] - 1) * p->stride_w + dw * (ks[1] - 1) + 1 + p->output_padding_w - ys[2];
        pt = p->padding == SX_PAD_SAME_LOWER ? ph - ph / 2 : ph / 2;
        pl = p->padding == SX_PAD_SAME_LOWER ? pw - pw / 2 : pw / 2;
    }
    for (int64_t b = 0; b < xs[0]; b++)
        for (int64_t iy = 0; iy < xs[1]; iy++)
            for (int64_t ix = 0; ix < xs[2]; ix++)
                for (int64_t ky = 0; ky < ks[0]; ky++)
                    for (int64_t kx = 0; kx < ks[1]; kx++) {
                        int64_t oy = iy * p->stride_h - pt + ky * dh;
                        int64_t ox = ix * p->stride_w - pl + kx * dw;
                        if (oy < 0 || oy >= ys[1] || ox < 0 || ox >= ys[2])
                            continue;
                        for (int64_t ci = 0; ci < xs[3]; ci++)
                            for (int64_t co = 0; co < cog; co++) {
                                int64_t xi = ((b * xs[1] + iy) * xs[2] + ix) * xs[3] + ci;
                                int64_t ki = ((ky * ks[1] + kx) * ks[2] + co) * ks[3] + ci;
                                int64_t yi =
                                    ((b * ys[1] + oy) * ys[2] + ox) * ys[3] + (ci / cig) * cog + co;
                                int64_t at = mode == 0 ? yi : mode == 1 ? xi : ki;
                                double v = mode == 0   ? get(A, xi) * get(B, ki)
                                           : mode == 1 ? get(A, ki) * get(B, yi)
                                                       : get(A, xi) * get(B, yi);
                                out[at] += v;
                                mag[at] += fabs(v);
                            }
                    }
}

/* Adaptive average pooling by its definition: window (i, j) averages rows
 * [floor(i h / oh), ceil((i + 1) h / oh)) and the columns likewise. mode 0: y from x; 1: dx
 * from dy. xs (n,h,w,c), ys (n,oh,ow,c). */
static void adaptive_plain(int mode, const int64_t *xs, const int64_t *ys, const sx_tensor *A,
                           double *out, double *mag)
{
    for (int64_t b = 0; b < xs[0]; b++)
        for (int64_t i = 0; i < ys[1]; i++)
            for (int64_t j = 0; j < ys[2]; j++) {
                int64_t r0 = i * xs[1] / ys[1], r1 = ((i + 1) * xs[1] + ys[1] - 1) / ys[1];
                int64_t c0 = j * xs[2] / ys[2], c1 = ((j + 1) * xs[2] + ys[2] - 1) / ys[2];
                double cnt = (double)((r1 - r0) * (c1 - c0));
                for (int64_t c = 0; c < xs[3]; c++) {
                    int64_t yi = ((b * ys[1] + i) * ys[2] + j) * ys[3] + c;
                    for (int64_t r = r0; r < r1; r++)
                        for (int64_t q = c0; q < c1; q++) {
                            int64_t xi = ((b * xs[1] + r) * xs[2] + q) * xs[3] + c;
                            int64_t at = mode == 0 ? yi : xi;
                            double v = (mode == 0 ? get(A, xi) : get(A, yi)) / cnt;
                            out[at] += v;
                            mag[at] += fabs(v);
                        }
                }
            }
}

/* Pooling by its definition, any padding, dilation, ceil_mode (through ys) and
 * count_include_pad. mode 0: max, 1: avg, 2: max backward (dy to the first maximum of each
 * window), 3: avg backward. */
static void pool_plain(int mode, const int64_t *xs, const int64_t *ys, const sx_pool2d_params *p,
                       const sx_tensor *x, const sx_tensor *dy, double *out, double *mag)
{
    int64_t dh = at_least_1(p->dilation_h), dw = at_least_1(p->dilation_w), pt, pb, pl, pr;
    pads_of(xs[1], dh * (p->kernel_h - 1) + 1, p->stride_h, p->padding, p->pad_top, p->pad_bottom,
            &pt, &pb);
    pads_of(xs[2], dw * (p->kernel_w - 1) + 1, p->stride_w, p->padding, p->pad_left, p->pad_right,
            &pl, &pr);
    for (int64_t b = 0; b < ys[0]; b++)
        for (int64_t oy = 0; oy < ys[1]; oy++)
            for (int64_t ox = 0; ox < ys[2]; ox++)
                for (int64_t c = 0; c < ys[3]; c++) {
                    int64_t yi = ((b * ys[1] + oy) * ys[2] + ox) * ys[3] + c, arg = -1, cnt = 0;
                    int64_t padded = 0; /* window cells inside the padded input */
                    double best = -HUGE_VAL, sum = 0;
                    for (int pass = 0; pass < 2; pass++)
                        for (int64_t ky = 0; ky < p->kernel_h; ky++)
                            for (int64_t kx = 0; kx < p->kernel_w; kx++) {
                                int64_t iy = oy * p->stride_h + ky * dh - pt;
                                int64_t ix = ox * p->stride_w + kx * dw - pl;
                                if (pass == 0 && iy >= -pt && iy < xs[1] + pb && ix >= -pl &&
                                    ix < xs[2] + pr)
                                    padded++;
                                if (iy < 0 || iy >= xs[1] || ix < 0 || ix >= xs[2])
                                    continue;
                                int64_t xi = ((b * xs[1] + iy) * xs[2] + ix) * xs[3] + c;
                                double div = (double)(p->count_include_pad ? padded : cnt);
                                if (pass == 0) {
                                    cnt++;
                                    if (x != NULL && get(x, xi) > best) {
                                        best = get(x, xi);
                                        arg = xi;
                                    }
                                    if (x != NULL)
                                        sum += get(x, xi);
                                } else if (mode == 3) {
                                    out[xi] += get(dy, yi) / div;
                                    mag[xi] += fabs(get(dy, yi));
                                }
                            }
                    double div = (double)(p->count_include_pad ? padded : cnt);
                    if (mode == 0)
                        out[yi] = best;
                    if (mode == 1) {
                        out[yi] = sum / div;
                        mag[yi] = fabs(sum);
                    }
                    if (mode == 2 && arg >= 0) {
                        out[arg] += get(dy, yi);
                        mag[arg] += fabs(get(dy, yi));
                    }
                }
}

/* Softmax family along `axis`: (outer, len, inner) blocks. */
static void softmax_plain(sx_cg_op op, const sx_tensor *x, const sx_tensor *dy, int axis,
                          double *want, double *mag)
{
    int64_t outer = 1, len = x->shape[axis], inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= x->shape[d];
    for (int d = axis + 1; d < x->rank; d++)
        inner *= x->shape[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
#define AT(j) ((o * len + (j)) * inner + i)
            double m = -HUGE_VAL, se = 0, sdy = 0, sdyy = 0;
            for (int64_t j = 0; j < len; j++)
                m = get(x, AT(j)) > m ? get(x, AT(j)) : m;
            for (int64_t j = 0; j < len; j++) {
                se += exp(get(x, AT(j)) - m);
                if (dy != NULL) {
                    sdy += get(dy, AT(j));
                    sdyy += get(dy, AT(j)) * get(x, AT(j));
                }
            }
            for (int64_t j = 0; j < len; j++) {
                double v = get(x, AT(j));
                switch (op) {
                case SX_OP_SOFTMAX:
                    want[AT(j)] = exp(v - m) / se;
                    break;
                case SX_OP_LOG_SOFTMAX:
                    want[AT(j)] = v - m - log(se);
                    mag[AT(j)] = fabs(v) + fabs(m) + fabs(log(se));
                    break;
                case SX_OP_SOFTMAX_BACKWARD: /* x is y */
                    want[AT(j)] = v * (get(dy, AT(j)) - sdyy);
                    mag[AT(j)] = fabs(v) * (fabs(get(dy, AT(j))) + (double)len);
                    break;
                case SX_OP_LOG_SOFTMAX_BACKWARD:
                    want[AT(j)] = get(dy, AT(j)) - exp(v) * sdy;
                    mag[AT(j)] = (double)len;
                    break;
                default:
                    cr_assert_fail("softmax_plain: not a softmax op");
                }
            }
#undef AT
        }
}

/* Cross-entropy of softmax(logits) against target per row, and its backward pass. */
static void xent_plain(const sx_tensor *l, const sx_tensor *t, const sx_tensor *dout, double *want,
                       double *mag)
{
    int64_t rows = l->shape[0], k = l->shape[1];
    for (int64_t i = 0; i < rows; i++) {
        double m = -HUGE_VAL, se = 0, sum = 0, ms = 0;
        for (int64_t j = 0; j < k; j++)
            m = get(l, i * k + j) > m ? get(l, i * k + j) : m;
        for (int64_t j = 0; j < k; j++)
            se += exp(get(l, i * k + j) - m);
        for (int64_t j = 0; j < k; j++) {
            double ls = get(l, i * k + j) - m - log(se);
            if (dout != NULL) {
                want[i * k + j] = get(dout, i) * (exp(ls) - get(t, i * k + j));
                mag[i * k + j] = fabs(get(dout, i));
            }
            sum -= get(t, i * k + j) * ls;
            ms += fabs(get(t, i * k + j) * ls) + fabs(get(t, i * k + j)) * (fabs(m) + 1);
        }
        if (dout == NULL) {
            want[i] = sum;
            mag[i] = ms;
        }
    }
}

/* Batch norm (issue 18) over the last axis of x (m, c), in double: the statistics (two
 * passes), the normalisation, or the backward sums (op). */
static void bn_plain(sx_cg_op op, const sx_tensor *const *x, double eps, double *want, double *mag)
{
    int64_t c = x[0]->shape[x[0]->rank - 1], m = x[0]->size / c;
    for (int64_t j = 0; j < c; j++) {
        double s = 0, q = 0, qm = 0;
        for (int64_t r = 0; r < m; r++)
            s += get(x[0], r * c + j);
        double mean = m > 0 ? s / (double)m : 0;
        if (op == SX_OP_BATCH_NORM_STATS) {
            for (int64_t r = 0; r < m; r++) {
                double d = get(x[0], r * c + j) - mean;
                q += d * d;
                qm += fabs(get(x[0], r * c + j)) * fabs(get(x[0], r * c + j));
            }
            want[j] = mean, want[c + j] = m > 0 ? q / (double)m : 0;
            mag[j] = 1 + fabs(mean), mag[c + j] = m > 0 ? qm / (double)m : 0;
        } else if (op == SX_OP_BATCH_NORM) {
            double a = get(x[2], j) / sqrt(get(x[1], c + j) + eps);
            for (int64_t r = 0; r < m; r++) {
                double v = get(x[0], r * c + j);
                want[r * c + j] = (v - get(x[1], j)) * a + get(x[3], j);
                mag[r * c + j] = (fabs(v) + fabs(get(x[1], j))) * fabs(a) + fabs(get(x[3], j));
            }
        } else {
            double s0 = 0, s1 = 0, m0 = 0, m1 = 0;
            for (int64_t r = 0; r < m; r++) {
                double g = get(x[2], r * c + j), d = get(x[0], r * c + j) - get(x[1], j);
                s0 += g, s1 += g * d, m0 += fabs(g), m1 += fabs(g * d);
            }
            want[j] = s0, want[c + j] = s1, mag[j] = m0, mag[c + j] = m1;
        }
    }
}

/* ---------------------------------------------------------------- linear algebra identities */

static double *mat(const sx_tensor *t)
{
    double *m = xmalloc((size_t)t->size * sizeof *m);
    for (int64_t i = 0; i < t->size; i++)
        m[i] = get(t, i);
    return m;
}

static double la_tol(sx_dtype dt)
{
    return dt == SX_F32 ? 1e-4 : 1e-10;
}

/* |p - q| <= tol (1 + |q|) for matrices of `count` entries. */
static void assert_near(const double *p, const double *q, int64_t count, double tol,
                        const char *what, const char *which)
{
    for (int64_t i = 0; i < count; i++)
        cr_assert(fabs(p[i] - q[i]) <= tol * (1 + fabs(q[i])), "%s: %s: entry %lld: %.10g vs %.10g",
                  what, which, (long long)i, p[i], q[i]);
}

/* c (m,n) = op(a) (m,k) @ op(b) (k,n); a is (m,k) or (k,m) when ta; b is (k,n) or (n,k). */
static void mm(const double *a, bool ta, const double *b, bool tb, int64_t m, int64_t k, int64_t n,
               double *c)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t l = 0; l < k; l++)
                s += (ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
            c[i * n + j] = s;
        }
}

static double *eye(int64_t n)
{
    double *e = xmalloc((size_t)(n * n) * sizeof *e);
    for (int64_t i = 0; i < n; i++)
        e[i * n + i] = 1;
    return e;
}

/* det by Gaussian elimination with partial pivoting (a is overwritten). */
static double det_plain(double *a, int64_t n)
{
    double det = 1;
    for (int64_t c = 0; c < n; c++) {
        int64_t p = c;
        for (int64_t r = c + 1; r < n; r++)
            if (fabs(a[r * n + c]) > fabs(a[p * n + c]))
                p = r;
        if (p != c) {
            det = -det;
            for (int64_t j = 0; j < n; j++) {
                double t = a[c * n + j];
                a[c * n + j] = a[p * n + j];
                a[p * n + j] = t;
            }
        }
        det *= a[c * n + c];
        for (int64_t r = c + 1; r < n; r++) {
            double f = a[r * n + c] / a[c * n + c];
            for (int64_t j = c; j < n; j++)
                a[r * n + j] -= f * a[c * n + j];
        }
    }
    return det;
}

static int cmp_double(const void *p, const void *q)
{
    double a = *(const double *)p, b = *(const double *)q;
    return (a > b) - (a < b);
}

/* The eigenvalues of a symmetric matrix (a is overwritten), ascending: cyclic Jacobi. */
static void eig_plain(double *a, int64_t n, double *w)
{
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++)
                off += a[p * n + q] * a[p * n + q];
        if (off < 1e-30)
            break;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++) {
                if (a[p * n + q] == 0)
                    continue;
                double th = (a[q * n + q] - a[p * n + p]) / (2 * a[p * n + q]);
                double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int64_t k = 0; k < n; k++) { /* columns p, q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int64_t k = 0; k < n; k++) { /* rows p, q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
    }
    for (int64_t i = 0; i < n; i++)
        w[i] = a[i * n + i];
    qsort(w, (size_t)n, sizeof *w, cmp_double);
}

/* Check a linear-algebra result through the identities that define it. */
static void linalg_check(const sx_cg_node *n, const char *what)
{
    const sx_tensor *y = sx_cg_value(n), *x = in_value(n, 0);
    double tol = la_tol(y->dtype);
    double *a = mat(x), *r = mat(y);
    int64_t m = x->shape[0], c = x->shape[1];
    switch (sx_cg_node_op(n)) {
    case SX_OP_INV: { /* a @ inv(a) = I */
        double *p = xmalloc((size_t)(m * m) * sizeof *p), *e = eye(m);
        mm(a, false, r, false, m, m, m, p);
        assert_near(p, e, m * m, tol, what, "a @ inv(a) = I");
        free(p);
        free(e);
        break;
    }
    case SX_OP_SOLVE: { /* a @ x = b */
        const sx_tensor *b = in_value(n, 1);
        int64_t k = b->rank == 1 ? 1 : b->shape[1];
        double *p = xmalloc((size_t)(m * k) * sizeof *p), *bb = mat(b);
        mm(a, false, r, false, m, m, k, p);
        assert_near(p, bb, m * k, tol, what, "a @ solve(a, b) = b");
        free(p);
        free(bb);
        break;
    }
    case SX_OP_DET:
    case SX_OP_LOGDET: {
        double d = det_plain(a, m);
        double want = sx_cg_node_op(n) == SX_OP_DET ? d : log(fabs(d));
        assert_near(r, &want, 1, tol, what, "det by elimination");
        break;
    }
    case SX_OP_CHOLESKY: { /* lower triangular, l @ l^T = a */
        double *p = xmalloc((size_t)(m * m) * sizeof *p);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = i + 1; j < m; j++)
                cr_assert_eq(r[i * m + j], 0.0, "%s: l[%lld,%lld] above the diagonal", what,
                             (long long)i, (long long)j);
        mm(r, false, r, true, m, m, m, p);
        assert_near(p, a, m * m, tol, what, "l @ l^T = a");
        free(p);
        break;
    }
    case SX_OP_QR_Q: { /* orthonormal columns spanning a's columns: q^T q = I, q q^T a = a */
        int64_t k = y->shape[1];
        double *p = xmalloc((size_t)(k * k) * sizeof *p), *e = eye(k);
        double *qa = xmalloc((size_t)(k * c) * sizeof *qa),
               *qqa = xmalloc((size_t)(m * c) * sizeof(double));
        mm(r, true, r, false, k, m, k, p);
        assert_near(p, e, k * k, tol, what, "q^T q = I");
        mm(r, true, a, false, k, m, c, qa);
        mm(r, false, qa, false, m, k, c, qqa);
        assert_near(qqa, a, m * c, tol, what, "q q^T a = a");
        free(p);
        free(e);
        free(qa);
        free(qqa);
        break;
    }
    case SX_OP_QR_R: { /* upper triangular, r^T r = a^T a */
        int64_t k = y->shape[0];
        double *p = xmalloc((size_t)(c * c) * sizeof *p),
               *ata = xmalloc((size_t)(c * c) * sizeof(double));
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < i && j < c; j++)
                cr_assert_eq(r[i * c + j], 0.0, "%s: r[%lld,%lld] below the diagonal", what,
                             (long long)i, (long long)j);
        mm(r, true, r, false, c, k, c, p);
        mm(a, true, a, false, c, m, c, ata);
        assert_near(p, ata, c * c, tol, what, "r^T r = a^T a");
        free(p);
        free(ata);
        break;
    }
    case SX_OP_SVD_S: { /* descending, the square roots of the eigenvalues of the Gram matrix */
        int64_t k = m < c ? m : c;
        double *gm = xmalloc((size_t)(k * k) * sizeof *gm),
               *w = xmalloc((size_t)k * sizeof(double));
        if (m < c)
            mm(a, false, a, true, k, c, k, gm);
        else
            mm(a, true, a, false, k, m, k, gm);
        eig_plain(gm, k, w);
        for (int64_t i = 0; i < k; i++) {
            double want = sqrt(w[k - 1 - i]);
            assert_near(&r[i], &want, 1, tol, what, "singular value");
        }
        free(gm);
        free(w);
        break;
    }
    case SX_OP_EIGH_W: {
        double *w = xmalloc((size_t)m * sizeof *w);
        eig_plain(a, m, w);
        assert_near(r, w, m, tol, what, "eigenvalues (ascending)");
        free(w);
        break;
    }
    case SX_OP_EIGH_V: { /* v^T v = I, v^T a v = diag(w) with w ascending */
        double *w = xmalloc((size_t)m * sizeof *w), *av = xmalloc((size_t)(m * m) * sizeof(double));
        double *vav = xmalloc((size_t)(m * m) * sizeof(double)), *a2 = mat(x), *e = eye(m);
        eig_plain(a2, m, w);
        mm(r, true, r, false, m, m, m, vav);
        assert_near(vav, e, m * m, tol, what, "v^T v = I");
        mm(a, false, r, false, m, m, m, av);
        mm(r, true, av, false, m, m, m, vav);
        for (int64_t i = 0; i < m; i++)
            e[i * m + i] = w[i];
        assert_near(vav, e, m * m, tol, what, "v^T a v = diag(w)");
        free(w);
        free(av);
        free(vav);
        free(a2);
        free(e);
        break;
    }
    default:
        cr_assert_fail("linalg_check: not a linear-algebra op");
    }
    free(a);
    free(r);
}

/* The op of sx_ops.def that a map / binary kernel implements (for fused programs). */
static sx_cg_op op_of_map(int k)
{
    static const sx_cg_op ops[SX_MAP_COUNT] = {
#define SX_MAP_ROW(NAME, ...) [SX_MAP_##NAME] = SX_OP_##NAME,
#include "sx_map.def"
#undef SX_MAP_ROW
    };
    return ops[k];
}

/* A fused program interpreted element by element in double. */
static void fused_plain(const sx_fused_prog *p, int n_in, const sx_tensor *const *x, int64_t N,
                        double *want, double *mag)
{
    for (int64_t i = 0; i < N; i++) {
        double reg[SX_FUSED_MAX] = {0};
#define SRC(s) ((s) >= 0 ? get(x[(s)], x[(s)]->size == 1 ? 0 : i) : reg[-1 - (s)])
        for (int k = 0; k < p->n; k++) {
            const sx_fused_instr *in = &p->ins[k];
            switch ((sx_fused_kind)in->kind) {
            case SX_FUSED_MAP:
                reg[k] = map_plain(op_of_map(in->op), SRC(in->a), in->alpha);
                break;
            case SX_FUSED_BINARY:
                reg[k] = binary_plain((sx_binary_op)in->op, SRC(in->a), SRC(in->b));
                break;
            case SX_FUSED_FMA:
                reg[k] = SRC(in->a) * SRC(in->b) + SRC(in->c);
                break;
            case SX_FUSED_WHERE:
                reg[k] = SRC(in->a) != 0 ? SRC(in->b) : SRC(in->c);
                break;
            }
            mag[i] += fabs(reg[k]); /* rounding accumulates along the chain */
        }
#undef SRC
        want[i] = reg[p->n - 1];
    }
    (void)n_in;
}

/* The optimiser steps of sx_tensor.h, in double, from the values before the step. */
static void update_plain(sx_cg_op op, const sx_cg_attr *at, int n_in, const sx_tensor *const *x,
                         int64_t N, double *want, double *mag)
{
    const double *c = at->coef;
    double lr = get(x[n_in - 1], 0), r[3] = {lr, 0, 0};
    for (int64_t i = 1; i < 3 && i < x[n_in - 1]->size; i++)
        r[i] = get(x[n_in - 1], i);
    const sx_tensor *g = x[n_in - 2];
    sx_tensor *gm = NULL;
    if (op == SX_OP_MATMUL_UPDATE) { /* g = alpha op(a) @ op(b), in double */
        op = (sx_cg_op)at->ints[0];
        const sx_tensor *a = x[n_in - 3], *b = x[n_in - 2];
        int64_t m = x[0]->shape[0], cols = x[0]->shape[1];
        int64_t kk = at->trans_a ? a->shape[0] : a->shape[1];
        gm = tu_zeros(SX_F64, 2, x[0]->shape);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < cols; j++) {
                double s = 0;
                for (int64_t l = 0; l < kk; l++)
                    s += get(a, at->trans_a ? l * a->shape[1] + i : i * a->shape[1] + l) *
                         get(b, at->trans_b ? j * b->shape[1] + l : l * b->shape[1] + j);
                sx_tensor_set(gm, i * cols + j, at->alpha * s);
            }
        g = gm;
    }
    for (int64_t i = 0; i < N; i++) {
        double p = get(x[0], i), gi = get(g, i), step = 0;
        switch (op) {
        case SX_OP_SGD_UPDATE:
            step = gi;
            break;
        case SX_OP_MOMENTUM_UPDATE: {
            double v = c[0] * get(x[1], i) + gi;
            step = at->keepdims ? gi + c[0] * v : v;
            break;
        }
        case SX_OP_ADAGRAD_UPDATE:
            step = gi / (sqrt(get(x[1], i) + gi * gi) + c[0]);
            break;
        case SX_OP_RMSPROP_UPDATE:
            step = gi / (sqrt(c[0] * get(x[1], i) + c[1] * gi * gi) + c[2]);
            break;
        case SX_OP_ADAM_UPDATE:
            step = (c[0] * get(x[1], i) + c[1] * gi) /
                   (sqrt(c[2] * get(x[2], i) + c[3] * gi * gi) + c[4]);
            break;
        case SX_OP_ADAMW_UPDATE:
        case SX_OP_AMSGRAD_UPDATE: { /* p scaled by r[2] first; eps after the correction r[1] */
            double v = c[2] * get(x[2], i) + c[3] * gi * gi;
            if (op == SX_OP_AMSGRAD_UPDATE && get(x[3], i) > v)
                v = get(x[3], i);
            step = (c[0] * get(x[1], i) + c[1] * gi) / (sqrt(v) / r[1] + c[4]);
            p *= r[2];
            break;
        }
        case SX_OP_RMSPROP_CENTERED_UPDATE: {
            double a = c[0] * get(x[1], i) + c[1] * gi * gi, m = c[0] * get(x[2], i) + c[1] * gi;
            step = gi / (sqrt(a - m * m) + c[2]);
            break;
        }
        case SX_OP_MOMENTUM_DAMPENED_UPDATE: {
            double v = c[0] * get(x[1], i) + r[1] * gi;
            step = at->keepdims ? gi + c[0] * v : v;
            break;
        }
        default:
            cr_assert_fail("update_plain: not an update");
        }
        want[i] = p - lr * step;
        mag[i] = fabs(p) + fabs(lr * step);
    }
    sx_tensor_free(gm);
}

/* Compare a node's value with a plain double reference (per element, |got - want| <=
 * tol (1 + |want| + mag), mag bounding the rounding of sums), or with the identities that
 * define it. */
static void plain_check(const sx_cg_node *n, const sx_tensor *const *x, const char *what)
{
    const sx_tensor *y = sx_cg_value(n);
    const sx_cg_attr *at = sx_cg_node_attr(n);
    int64_t N = y->size, oidx[SX_MAX_RANK];
    double *want = xmalloc((size_t)(N + 1) * sizeof *want);
    double *mag = xmalloc((size_t)(N + 1) * sizeof *mag);
    bool compare = true;
    sx_cg_op op = sx_cg_node_op(n);
    switch (op) {
    case SX_OP_CONST:
    case SX_OP_INPUT:
    case SX_OP_PARAM:
        compare = false; /* leaves: lazy = eager = the values set is all there is */
        break;
#define SX_MAP_ROW(NAME, ...) case SX_OP_##NAME:
#include "sx_map.def"
#undef SX_MAP_ROW
        for (int64_t i = 0; i < N; i++)
            want[i] = map_plain(op, get(x[0], i), at->alpha);
        break;
#define SX_BINARY_ROW(NAME, ...) case SX_OP_##NAME:
#include "sx_binary.def"
#undef SX_BINARY_ROW
        for (int64_t i = 0; i < N; i++) {
            unravel(i, y->rank, y->shape, oidx);
            double va = get(x[0], bcast_at(x[0], y->rank, oidx));
            double vb = get(x[1], bcast_at(x[1], y->rank, oidx));
            want[i] = binary_plain(binary_kernel(op), va, vb);
            mag[i] = op == SX_OP_ADD || op == SX_OP_SUB ? fabs(va) + fabs(vb) : 0;
        }
        break;
    case SX_OP_FMA:
    case SX_OP_WHERE:
        for (int64_t i = 0; i < N; i++) {
            unravel(i, y->rank, y->shape, oidx);
            double v0 = get(x[0], bcast_at(x[0], y->rank, oidx));
            double v1 = get(x[1], bcast_at(x[1], y->rank, oidx));
            double v2 = get(x[2], bcast_at(x[2], y->rank, oidx));
            want[i] = op == SX_OP_FMA ? v0 * v1 + v2 : v0 != 0 ? v1 : v2;
            mag[i] = op == SX_OP_FMA ? fabs(v0 * v1) + fabs(v2) : 0;
        }
        break;
    case SX_OP_SUM:
    case SX_OP_MEAN:
    case SX_OP_PROD:
    case SX_OP_REDUCE_MAX:
    case SX_OP_REDUCE_MIN:
    case SX_OP_ARGMAX:
    case SX_OP_ARGMIN:
    case SX_OP_L1NORM:
    case SX_OP_L2NORM:
    case SX_OP_LOGSUMEXP:
        fold_plain(op, x[0], at->axes, N, want, mag);
        break;
    case SX_OP_REPEAT:
    case SX_OP_TILE:
    case SX_OP_BROADCAST:
    case SX_OP_PERMUTE:
    case SX_OP_PAD:
        for (int64_t i = 0; i < N; i++) {
            int64_t xi = 0;
            bool inside = true;
            unravel(i, y->rank, y->shape, oidx);
            if (op == SX_OP_BROADCAST) {
                xi = bcast_at(x[0], y->rank, oidx);
            } else {
                int64_t xidx[SX_MAX_RANK] = {0};
                for (int d = 0; d < y->rank; d++) {
                    if (op == SX_OP_REPEAT)
                        xidx[d] = oidx[d] / at->ints[d];
                    else if (op == SX_OP_TILE)
                        xidx[d] = oidx[d] % x[0]->shape[d];
                    else if (op == SX_OP_PERMUTE)
                        xidx[at->ints[d]] = oidx[d];
                    else
                        xidx[d] = oidx[d] - at->ints[d];
                }
                for (int d = 0; d < x[0]->rank; d++) {
                    inside = inside && xidx[d] >= 0 && xidx[d] < x[0]->shape[d];
                    xi = xi * x[0]->shape[d] + xidx[d];
                }
            }
            want[i] = inside ? get(x[0], xi) : at->alpha;
        }
        break;
    case SX_OP_RESHAPE:
    case SX_OP_IDENTITY:
    case SX_OP_SEQ:
    case SX_OP_ASSIGN:
        for (int64_t i = 0; i < N; i++)
            want[i] = get(x[op == SX_OP_ASSIGN ? 1 : 0], i);
        if (op == SX_OP_ASSIGN) /* the parameter holds the value now */
            assert_same_bits(in_value(n, 0), x[1], what, "parameter after assign");
        break;
    case SX_OP_FUSED:
        fused_plain(&at->prog, sx_cg_node_n_inputs(n), x, N, want, mag);
        break;
    case SX_OP_SGD_UPDATE:
    case SX_OP_MOMENTUM_UPDATE:
    case SX_OP_ADAGRAD_UPDATE:
    case SX_OP_RMSPROP_UPDATE:
    case SX_OP_ADAM_UPDATE:
    case SX_OP_ADAMW_UPDATE:
    case SX_OP_AMSGRAD_UPDATE:
    case SX_OP_RMSPROP_CENTERED_UPDATE:
    case SX_OP_MOMENTUM_DAMPENED_UPDATE:
    case SX_OP_MATMUL_UPDATE:
        update_plain(op, at, sx_cg_node_n_inputs(n), x, N, want, mag);
        break;
    case SX_OP_SLICE:
    case SX_OP_UNSLICE: {
        /* out[first + i * step] = in[i] (unslice), in[first + i * step] (slice) */
        const sx_tensor *full = op == SX_OP_SLICE ? x[0] : y, *part = op == SX_OP_SLICE ? y : x[0];
        int64_t len[SX_MAX_RANK], first[SX_MAX_RANK];
        cr_assert_eq(sx_slice_shape("test", full->rank, full->shape, at->slice, len, first), SX_OK);
        for (int64_t i = 0; i < part->size; i++) {
            int64_t pidx[SX_MAX_RANK], fi = 0;
            unravel(i, part->rank, part->shape, pidx);
            for (int d = 0; d < full->rank; d++)
                fi = fi * full->shape[d] + first[d] + pidx[d] * at->slice[d].step;
            if (op == SX_OP_SLICE)
                want[i] = get(full, fi);
            else
                want[fi] = get(part, i);
        }
        break;
    }
    case SX_OP_CONCAT:
        for (int64_t i = 0; i < N; i++) {
            int64_t xidx[SX_MAX_RANK] = {0}, xi = 0;
            int t = 0;
            unravel(i, y->rank, y->shape, xidx);
            while (xidx[at->axis] >= x[t]->shape[at->axis])
                xidx[at->axis] -= x[t++]->shape[at->axis];
            for (int d = 0; d < y->rank; d++)
                xi = xi * x[t]->shape[d] + xidx[d];
            want[i] = get(x[t], xi);
        }
        break;
    case SX_OP_ONE_HOT:
        for (int64_t i = 0; i < N; i++)
            want[i] = get(x[0], i / at->ints[0]) == (double)(i % at->ints[0]);
        break;
    case SX_OP_GATHER:
    case SX_OP_SCATTER_ADD: {
        int64_t row = 1;
        for (int d = 1; d < y->rank; d++)
            row *= y->shape[d];
        for (int64_t i = 0; i < x[1]->size; i++)
            for (int64_t k = 0; k < row; k++) {
                int64_t j = (int64_t)get(x[1], i);
                if (op == SX_OP_GATHER) {
                    want[i * row + k] = get(x[0], j * row + k);
                } else {
                    want[j * row + k] += get(x[0], i * row + k);
                    mag[j * row + k] += fabs(get(x[0], i * row + k));
                }
            }
        break;
    }
    case SX_OP_MATMUL:
        matmul_plain(n, y, want, mag);
        break;
    case SX_OP_DOT:
        want[0] = 0;
        for (int64_t i = 0; i < x[0]->size; i++) {
            want[0] += get(x[0], i) * get(x[1], i);
            mag[0] += fabs(get(x[0], i) * get(x[1], i));
        }
        break;
    case SX_OP_CONV2D:
        conv_plain(0, x[0]->shape, x[1]->shape, y->shape, &at->conv, x[0], x[1], want, mag);
        break;
    case SX_OP_CONV2D_BACKWARD_INPUT:
        conv_plain(1, y->shape, x[0]->shape, x[1]->shape, &at->conv, x[0], x[1], want, mag);
        break;
    case SX_OP_CONV2D_BACKWARD_KERNEL:
        conv_plain(2, x[0]->shape, y->shape, x[1]->shape, &at->conv, x[0], x[1], want, mag);
        break;
    case SX_OP_CONV_TRANSPOSE2D:
        ct_plain(0, x[0]->shape, x[1]->shape, y->shape, &at->conv, x[0], x[1], want, mag);
        break;
    case SX_OP_CONV_TRANSPOSE2D_BACKWARD_INPUT:
        ct_plain(1, y->shape, x[0]->shape, x[1]->shape, &at->conv, x[0], x[1], want, mag);
        break;
    case SX_OP_CONV_TRANSPOSE2D_BACKWARD_KERNEL:
        ct_plain(2, x[0]->shape, y->shape, x[1]->shape, &at->conv, x[0], x[1], want, mag);
        break;
    case SX_OP_ADAPTIVE_AVGPOOL2D:
        adaptive_plain(0, x[0]->shape, y->shape, x[0], want, mag);
        break;
    case SX_OP_ADAPTIVE_AVGPOOL2D_BACKWARD:
        adaptive_plain(1, y->shape, x[0]->shape, x[0], want, mag);
        break;
    case SX_OP_MAXPOOL2D:
    case SX_OP_AVGPOOL2D:
        pool_plain(op == SX_OP_MAXPOOL2D ? 0 : 1, x[0]->shape, y->shape, &at->pool, x[0], NULL,
                   want, mag);
        break;
    case SX_OP_MAXPOOL2D_BACKWARD:
        pool_plain(2, x[0]->shape, x[1]->shape, &at->pool, x[0], x[1], want, mag);
        break;
    case SX_OP_MAXPOOL2D_RELU_BACKWARD: /* then zero where x <= 0 */
        pool_plain(2, x[0]->shape, x[1]->shape, &at->pool, x[0], x[1], want, mag);
        for (int64_t i = 0; i < x[0]->size; i++)
            if (!(get(x[0], i) > 0))
                want[i] = 0;
        break;
    case SX_OP_AVGPOOL2D_BACKWARD:
        pool_plain(3, y->shape, x[0]->shape, &at->pool, NULL, x[0], want, mag);
        break;
    case SX_OP_SOFTMAX:
    case SX_OP_LOG_SOFTMAX:
    case SX_OP_SOFTMAX_BACKWARD:
    case SX_OP_LOG_SOFTMAX_BACKWARD:
        softmax_plain(op, x[0], x[1], at->axis, want, mag);
        break;
    case SX_OP_BATCH_NORM_STATS:
    case SX_OP_BATCH_NORM:
    case SX_OP_BATCH_NORM_SUMS:
        bn_plain(op, x, at->alpha, want, mag);
        break;
    case SX_OP_SOFTMAX_XENT:
    case SX_OP_SOFTMAX_XENT_BACKWARD:
        xent_plain(x[0], x[1], op == SX_OP_SOFTMAX_XENT_BACKWARD ? x[2] : NULL, want, mag);
        break;
    case SX_OP_DROPOUT_MASK: {
        /* every entry is 0 or the dtype's 1/(1-p) */
        sx_tensor *keep = tu_zeros(y->dtype, 0, NULL);
        sx_tensor_set(keep, 0, 1 / (1 - at->alpha));
        for (int64_t i = 0; i < N; i++)
            cr_assert(get(y, i) == 0 || get(y, i) == get(keep, 0), "%s: mask entry %g", what,
                      get(y, i));
        sx_tensor_free(keep);
        compare = false;
        break;
    }
    case SX_OP_INV:
    case SX_OP_SOLVE:
    case SX_OP_DET:
    case SX_OP_LOGDET:
    case SX_OP_CHOLESKY:
    case SX_OP_QR_Q:
    case SX_OP_QR_R:
    case SX_OP_SVD_S:
    case SX_OP_EIGH_W:
    case SX_OP_EIGH_V:
        linalg_check(n, what);
        compare = false;
        break;
    case SX_OP_COUNT:
        cr_assert_fail("not an op");
    }
    double tol = y->dtype == SX_F32 ? 1e-5 : 1e-12;
    for (int64_t i = 0; compare && i < N; i++) {
        double got = get(y, i);
        cr_assert(fabs(got - want[i]) <= tol * (1 + fabs(want[i]) + mag[i]),
                  "%s: plain reference: element %lld is %.17g, want %.17g", what, (long long)i, got,
                  want[i]);
    }
    free(want);
    free(mag);
}

/* ---------------------------------------------------------------- the per-op checks */

static void what_of(char *buf, size_t n, sx_cg_op op, int v, sx_dtype dt, const char *tail)
{
    snprintf(buf, n, "%s variant %d %s%s", sx_cg_op_name(op), v, sx_dtype_name(dt), tail);
}

/* The input values a reference computes from: the inputs' current values, except for ops
 * that write their inputs, whose values are copied before the evaluation (`before`). */
typedef struct inputs {
    const sx_tensor *x[8];
    sx_tensor *copy[8];
} inputs;

static bool mutates(const sx_cg_node *n)
{
    return sx_cg_op_flags(sx_cg_node_op(n)) & SX_OPF_MUTATES;
}

/* A fused optimiser update reads the tensors it writes: every evaluation is one more step (the
 * node is stale after it runs). An assign only writes: evaluated once. */
static bool is_step(sx_cg_op op)
{
    return (sx_cg_op_flags(op) & SX_OPF_MUTATES) && op != SX_OP_ASSIGN;
}

/* Call before an evaluation that will run n. */
static void inputs_before(const sx_cg_node *n, inputs *v)
{
    memset(v, 0, sizeof *v);
    for (int i = 0; mutates(n) && i < sx_cg_node_n_inputs(n); i++)
        v->x[i] = v->copy[i] = clone(in_value(n, i)); /* mutating ops read leaves only */
}

/* Call after the evaluation. */
static void inputs_after(const sx_cg_node *n, inputs *v)
{
    for (int i = 0; !mutates(n) && i < sx_cg_node_n_inputs(n); i++)
        v->x[i] = in_value(n, i);
}

static void inputs_free(inputs *v)
{
    for (int i = 0; i < 8; i++)
        sx_tensor_free(v->copy[i]);
}

/* The node's value against a direct kernel call on its inputs: bit for bit. */
static void assert_kernel_equal(const sx_cg_node *n, const os_sample *s, const inputs *v,
                                const char *what)
{
    const sx_tensor *y = sx_cg_value(n);
    sx_tensor *want = tu_zeros(y->dtype, y->rank, y->shape);
    cr_assert_eq(kernel_ref(n, s, v->x, want), SX_OK, "%s: kernel: %s", what, sx_last_error());
    assert_same_bits(y, want, what, "graph vs direct kernel call");
    sx_tensor_free(want);
}

/* Lazy and eager graphs, the direct kernel, the plain reference, no NaN/Inf. */
static void check_lazy_eager(sx_cg_op op, int v, sx_dtype dt)
{
    char what[96];
    what_of(what, sizeof what, op, v, dt, "");
    bool leaf = sx_cg_op_flags(op) & SX_OPF_LEAF;
    uint64_t seed = seed_of(op, v, 0);

    sx_cg_graph *lz = graph_new(SX_CG_LAZY, dt), *eg = graph_new(SX_CG_EAGER, dt);
    os_sample sl, se;
    sx_cg_node *nl = build(lz, op, dt, seed, v, &sl, what);
    if (!leaf) { /* nothing computed until asked */
        cr_assert_not(sx_cg_valid(nl), "%s: lazy node valid before eval", what);
        cr_assert_eq(kernels(lz), 0, "%s: lazy graph ran kernels while building", what);
    }
    inputs in;
    inputs_before(nl, &in);
    eval1(lz, nl, what);
    inputs_after(nl, &in);
    cr_assert(sx_cg_valid(nl) != is_step(op), "%s: valid after eval: %d", what, sx_cg_valid(nl));

    sx_cg_node *ne = build(eg, op, dt, seed, v, &se, what);
    cr_assert_not_null(sx_cg_value(ne), "%s: eager node not computed when made", what);
    int64_t k = kernels(eg);
    if (!leaf)
        cr_assert_gt(k, 0, "%s: eager graph ran no kernel", what);
    if (!is_step(op)) { /* (evaluating a step again would take another step) */
        cr_assert(sx_cg_valid(ne), "%s: eager node not valid", what);
        eval1(eg, ne, what);
        cr_assert_eq(kernels(eg), k, "%s: eval of an eager graph recomputed", what);
    }

    assert_same_bits(sx_cg_value(nl), sx_cg_value(ne), what, "lazy vs eager");
    cr_assert_eq(sx_cg_graph_stats(lz).nodes, sx_cg_graph_stats(eg).nodes, "%s", what);
    assert_finite(sx_cg_value(nl), what);
    assert_kernel_equal(nl, &sl, &in, what);
    plain_check(nl, in.x, what);
    for (int i = 0; mutates(nl) && i < sx_cg_node_n_inputs(nl); i++) /* the written states */
        assert_same_bits(in_value(nl, i), in_value(ne, i), what, "lazy vs eager input");
    inputs_free(&in);
    sx_cg_graph_free(lz);
    sx_cg_graph_free(eg);
}

/* Evaluate n again with nothing changed: nothing runs and the value stays, or for a step, the
 * step alone runs once more, giving the kernel's result on the values before it. */
static void check_again(sx_cg_graph *g, sx_cg_node *n, const os_sample *s, const char *what)
{
    int64_t before = kernels(g);
    if (is_step(sx_cg_node_op(n))) {
        inputs in;
        inputs_before(n, &in);
        eval1(g, n, what);
        inputs_after(n, &in);
        cr_assert_eq(kernels(g), before + 1, "%s: another step ran %lld kernels", what,
                     (long long)(kernels(g) - before));
        assert_kernel_equal(n, s, &in, what);
        inputs_free(&in);
        return;
    }
    sx_tensor *was = clone(sx_cg_value(n));
    eval1(g, n, what);
    cr_assert_eq(kernels(g), before, "%s: nothing changed, kernels ran", what);
    assert_same_bits(sx_cg_value(n), was, what, "evaluation with nothing changed");
    sx_tensor_free(was);
}

/* Freeze a lazy graph on the sample: evaluating twice runs kernels once; changing one leaf
 * (to the values of a sample with another seed) recomputes, and gives the kernel's result on
 * the new values; nothing changed, nothing runs (steps: one more step). */
static void check_frozen(sx_cg_op op, int v, sx_dtype dt)
{
    char what[96];
    what_of(what, sizeof what, op, v, dt, " (frozen)");
    bool leaf = sx_cg_op_flags(op) & SX_OPF_LEAF;
    sx_cg_graph *g = graph_new(SX_CG_LAZY, dt);
    os_sample s;
    sx_cg_node *n = build(g, op, dt, seed_of(op, v, 0), v, &s, what);
    cr_assert_eq(sx_cg_freeze(g, 1, &n), SX_OK, "%s: %s", what, sx_last_error());
    cr_assert(sx_cg_frozen(g));
    int64_t nodes = sx_cg_graph_stats(g).nodes;

    inputs in;
    inputs_before(n, &in);
    eval1(g, n, what);
    inputs_after(n, &in);
    int64_t k1 = kernels(g);
    if (!leaf)
        cr_assert_gt(k1, 0, "%s: nothing ran", what);
    assert_kernel_equal(n, &s, &in, what);
    inputs_free(&in);
    check_again(g, n, &s, what);

    for (int i = 0; i < s.n_leaves; i++) {
        sx_cg_graph *donor = graph_new(SX_CG_LAZY, dt);
        os_sample ds;
        build(donor, op, dt, seed_of(op, v, 1 + i), v, &ds, what);
        cr_assert_eq(os_leaf_set(g, &s, i, sx_cg_value(ds.leaf[i])), SX_OK, "%s: %s", what,
                     sx_last_error());
        int64_t before = kernels(g);
        inputs_before(n, &in);
        eval1(g, n, what);
        inputs_after(n, &in);
        if (!leaf)
            cr_assert_gt(kernels(g), before, "%s: leaf %d changed, nothing recomputed", what, i);
        assert_kernel_equal(n, &s, &in, what);
        inputs_free(&in);
        check_again(g, n, &s, what);
        sx_cg_graph_free(donor);
    }
    if (op == SX_OP_DROPOUT_MASK) { /* invalidated: the generator's next mask */
        int64_t before = kernels(g);
        cr_assert_eq(sx_cg_invalidate(g, n), SX_OK);
        eval1(g, n, what);
        cr_assert_eq(kernels(g), before + 1, "%s: an invalidated mask is drawn once", what);
        sx_rng r;
        sx_tensor *want = tu_zeros(dt, sx_cg_node_rank(n), sx_cg_node_shape(n));
        sx_rng_seed(&r, s.rng_seed);
        cr_assert_eq(sx_tensor_dropout_mask(want, &r, sx_cg_node_attr(n)->alpha), SX_OK);
        cr_assert_eq(sx_tensor_dropout_mask(want, &r, sx_cg_node_attr(n)->alpha), SX_OK);
        assert_same_bits(sx_cg_value(n), want, what, "second mask");
        sx_tensor_free(want);
    }
    cr_assert_eq(sx_cg_graph_stats(g).nodes, nodes, "%s: a frozen graph grew", what);
    sx_cg_graph_free(g);
}

static void check_op(sx_cg_op op)
{
    cr_assert_geq(os_ops[op].n_variants, 1);
    for (int t = 0; t < 2; t++)
        for (int v = 0; v < os_ops[op].n_variants; v++) {
            check_lazy_eager(op, v, dtypes[t]);
            check_frozen(op, v, dtypes[t]);
        }
}

/* ---------------------------------------------------------------- finite-difference readiness */

/* For each variant in f64: the directional central difference along a random direction of the
 * differentiated leaves, with steps h and h/2, agrees to a tenth of the stated tolerance
 * (the samples sit away from kinks, and the tolerance leaves room for rounding); for ops that
 * are not differentiable the difference is exactly 0 (the samples sit away from jumps). The
 * leaves get their values back. */
static void check_fd(sx_cg_op op)
{
    const os_op *o = &os_ops[op];
    for (int v = 0; v < o->n_variants; v++) {
        char what[96];
        what_of(what, sizeof what, op, v, SX_F64, " (fd)");
        sx_cg_graph *g = graph_new(SX_CG_LAZY, SX_F64);
        os_sample s;
        sx_cg_node *n = build(g, op, SX_F64, seed_of(op, v, 0), v, &s, what);
        sx_rng r;
        sx_rng_seed(&r, seed_of(op, v, 7));
        double *dir[OS_MAX_LEAVES] = {0};
        bool any = false;
        for (int i = 0; i < s.n_leaves; i++) {
            if (!s.wrt[i])
                continue;
            int64_t size = sx_cg_node_size(s.leaf[i]);
            dir[i] = xmalloc((size_t)(size + 1) * sizeof **dir);
            for (int64_t k = 0; k < size; k++)
                dir[i][k] = 2 * sx_rng_uniform(&r) - 1;
            any = true;
        }
        if (o->diff != OS_NONE)
            cr_assert(any || s.n_leaves == 0, "%s: differentiable, with nothing to move", what);
        double *w = xmalloc((size_t)(sx_cg_node_size(n) + 1) * sizeof *w);
        for (int64_t k = 0; k < sx_cg_node_size(n); k++)
            w[k] = 2 * sx_rng_uniform(&r) - 1;
        eval1(g, n, what);
        sx_tensor *before = clone(sx_cg_value(n));
        if (any) {
            double d1, d2;
            cr_assert_eq(
                os_fd_directional(g, &s, n, (const double *const *)dir, w, o->fd_step, &d1), SX_OK,
                "%s: %s", what, sx_last_error());
            cr_assert_eq(
                os_fd_directional(g, &s, n, (const double *const *)dir, w, o->fd_step / 2, &d2),
                SX_OK, "%s: %s", what, sx_last_error());
            if (o->diff == OS_NONE)
                cr_assert(d1 == 0 && d2 == 0, "%s: a jump within the step: %g, %g", what, d1, d2);
            else
                cr_assert(fabs(d1 - d2) <= o->fd_tol / 10 * (1 + fabs(d1)),
                          "%s: central differences %.12g (h) and %.12g (h/2) disagree", what, d1,
                          d2);
            eval1(g, n, what);
            assert_same_bits(sx_cg_value(n), before, what, "value after the leaves came back");
        }
        sx_tensor_free(before);
        for (int i = 0; i < OS_MAX_LEAVES; i++)
            free(dir[i]);
        free(w);
        sx_cg_graph_free(g);
    }
}

/* ---------------------------------------------------------------- cost */

/* The flop model (cgraph/ops/, cost.c) on every variant: finite and not negative; at least one
 * operation per element for element-wise ops; exactly 2 M N K for matrix products and
 * 2 (output pixels) (kernel elements) for the convolutions, recomputed here from the shapes. */
static void check_cost(sx_cg_op op)
{
    for (int v = 0; v < os_ops[op].n_variants; v++) {
        char what[96];
        what_of(what, sizeof what, op, v, SX_F64, " (cost)");
        sx_cg_graph *g = graph_new(SX_CG_LAZY, SX_F64);
        os_sample s;
        sx_cg_node *n = build(g, op, SX_F64, seed_of(op, v, 0), v, &s, what);
        double f = sx_cg_node_flops(n), size = (double)sx_cg_node_size(n);
        cr_assert(isfinite(f) && f >= 0, "%s: %g flops", what, f);
        if (sx_cg_op_flags(op) & SX_OPF_ELEMWISE && op != SX_OP_WHERE)
            cr_assert_geq(f, size, "%s: %g flops for %g elements", what, f, size);
        const int64_t *a =
            sx_cg_node_n_inputs(n) > 0 ? sx_cg_node_shape(sx_cg_node_input(n, 0)) : NULL;
        if (op == SX_OP_MATMUL) {
            int ra = sx_cg_node_rank(sx_cg_node_input(n, 0));
            double k = (double)a[sx_cg_node_attr(n)->trans_a ? ra - 2 : ra - 1];
            cr_assert_eq(f, 2 * size * k, "%s", what);
        }
        if (op == SX_OP_CONV2D) { /* a group's filters read c / groups channels */
            const int64_t *k = sx_cg_node_shape(sx_cg_node_input(n, 1));
            int groups = sx_cg_node_attr(n)->conv.groups > 1 ? sx_cg_node_attr(n)->conv.groups : 1;
            cr_assert_eq(f,
                         2 * (size / (double)k[3]) * (double)(k[0] * k[1] * (a[3] / groups) * k[3]),
                         "%s", what);
        }
        cr_assert_eq(sx_cg_node_flops(NULL), 0);
        sx_cg_graph_free(g);
    }
}

/* ---------------------------------------------------------------- renamed ops */

/* tests/cgraph/data/renamed_ops_v1.sxg was saved by strix before issue 15 renamed the _bwd ops
 * to _backward (built by renamed_graph below with the old constructors, sx_cg_conv2d_bwd_input
 * ...): its nodes name the old ops. It loads, into the new ops, with the same values as the
 * graph built today. */
static sx_cg_node *cst(sx_cg_graph *g, int rank, const int64_t *shape, double scale)
{
    sx_tensor *t = NULL;
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= shape[i];
    double v[64];
    for (int64_t i = 0; i < n; i++)
        v[i] = scale * (double)((i * 7) % 11 - 5) / 5.0 + 0.01 * (double)i;
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, rank, shape, v, n, &t), SX_OK);
    sx_cg_node *c = sx_cg_const(g, t);
    sx_tensor_free(t);
    return c;
}

#define N_RENAMED 8
static void renamed_graph(sx_cg_graph *g, sx_cg_node **outs)
{
    const int64_t xs[4] = {1, 4, 4, 2}, ks[4] = {3, 3, 2, 3}, ys[4] = {1, 4, 4, 3},
                  ps[4] = {1, 2, 2, 2}, ls[2] = {3, 4};
    sx_conv2d_params cp = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    sx_pool2d_params pp = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    sx_cg_node *x = cst(g, 4, xs, 1), *k = cst(g, 4, ks, 0.5), *dy = cst(g, 4, ys, 2);
    sx_cg_node *dp = cst(g, 4, ps, 1.5), *l = cst(g, 2, ls, 1), *t = cst(g, 2, ls, 0.25);
    sx_cg_node *dl = cst(g, 1, ls, 1);
    sx_cg_node *y = sx_cg_softmax(g, l, 1);
    outs[0] = sx_cg_conv2d_backward_input(g, k, dy, &cp, xs);
    outs[1] = sx_cg_conv2d_backward_kernel(g, x, dy, &cp, ks);
    outs[2] = sx_cg_maxpool2d_backward(g, x, dp, &pp);
    outs[3] = sx_cg_maxpool2d_relu_backward(g, x, dp, &pp);
    outs[4] = sx_cg_avgpool2d_backward(g, dp, &pp, xs);
    outs[5] = sx_cg_softmax_backward(g, y, l, 1);
    outs[6] = sx_cg_log_softmax_backward(g, y, l, 1);
    outs[7] = sx_cg_softmax_xent_backward(g, l, t, dl);
}

Test(cgraph_ops, old_op_names_load)
{
    static const sx_cg_op want[N_RENAMED] = {
        SX_OP_CONV2D_BACKWARD_INPUT,   SX_OP_CONV2D_BACKWARD_KERNEL, SX_OP_MAXPOOL2D_BACKWARD,
        SX_OP_MAXPOOL2D_RELU_BACKWARD, SX_OP_AVGPOOL2D_BACKWARD,     SX_OP_SOFTMAX_BACKWARD,
        SX_OP_LOG_SOFTMAX_BACKWARD,    SX_OP_SOFTMAX_XENT_BACKWARD,
    };
    const char *names[N_RENAMED] = {"o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7"};
    char path[4096];
    const char *file = __FILE__, *slash = strrchr(file, '/');
    cr_assert_not_null(slash, "__FILE__ is %s", file);
    snprintf(path, sizeof path, "%.*s/data/renamed_ops_v1.sxg", (int)(slash - file), file);
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK, "%s", sx_last_error());
    sx_cg_graph *old = NULL, *now = graph_new(SX_CG_LAZY, SX_F64);
    sx_cg_node *a[N_RENAMED], *b[N_RENAMED];
    cr_assert_eq(sx_cg_file_graph(f, N_RENAMED, names, &old, a), SX_OK, "%s", sx_last_error());
    renamed_graph(now, b);
    cr_assert_eq(sx_cg_eval(old, N_RENAMED, a), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(now, N_RENAMED, b), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < N_RENAMED; i++) {
        cr_assert_eq(sx_cg_node_op(a[i]), want[i], "%s: loaded as %s", names[i],
                     sx_cg_op_name(sx_cg_node_op(a[i])));
        cr_assert_eq(sx_cg_node_op(b[i]), want[i]);
        cr_assert_not_null(strstr(sx_cg_op_name(want[i]), "_backward"));
        assert_same_bits(sx_cg_value(a[i]), sx_cg_value(b[i]), names[i], "loaded value");
    }
    sx_cg_graph_free(old);
    sx_cg_graph_free(now);
    sx_cg_file_free(f);
}

/* ---------------------------------------------------------------- the tests */

Test(cgraph_ops, table_has_one_sample_per_op)
{
    for (int op = 0; op < SX_OP_COUNT; op++) {
        const os_op *o = &os_ops[op];
        cr_assert_eq((int)o->op, op);
        cr_assert_str_eq(o->name, sx_cg_op_name((sx_cg_op)op));
        cr_assert_not_null(o->gen);
        cr_assert_geq(o->n_variants, 1, "%s", o->name);
        cr_assert(o->diff == OS_SMOOTH || o->diff == OS_PIECEWISE || o->diff == OS_NONE);
        if (o->diff != OS_NONE)
            cr_assert(o->fd_step > 0 && o->fd_tol > 0, "%s: no finite-difference step/tol",
                      o->name);
    }
    os_sample s;
    sx_cg_graph *g = graph_new(SX_CG_LAZY, SX_F64);
    cr_assert_null(os_build(g, SX_OP_ADD, SX_F64, 1, os_ops[SX_OP_ADD].n_variants, &s));
    cr_assert_eq(s.status, SX_E_ARG);
    cr_assert_null(os_build(g, SX_OP_COUNT, SX_F64, 1, 0, &s));
    cr_assert_eq(sx_cg_graph_stats(g).nodes, 0);
    sx_cg_graph_free(g);
}

/* One test case per row of the op table: forward (lazy = eager = kernel = reference, frozen
 * re-evaluation), finite-difference readiness and cost. */
#define X(NAME, name, arity, shape, eval, flags, kernel)                                           \
    Test(cgraph_ops, name)                                                                         \
    {                                                                                              \
        check_op(SX_OP_##NAME);                                                                    \
        check_fd(SX_OP_##NAME);                                                                    \
        check_cost(SX_OP_##NAME);                                                                  \
    }
#include "sx_ops.def"
#undef X
