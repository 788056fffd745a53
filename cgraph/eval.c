/* eval.c: the evaluators of the op table: each calls the tensor kernel of its op on the input
 * values, writing into the node's storage. Family evaluators (map, binary, fold) dispatch on the
 * op table's kernel column, so an element-wise op is one row and no code here. */
#include "cgraph_impl.h"

#include <string.h>

#define IN(i) (&n->in[i]->value)
#define OUT (&n->value)
#define KERNEL (sx_cg_ops[n->op].kernel)
/* The parameters a mutating node writes (its leading inputs' storage). */
#define OUT0(n) (&(n)->in[0]->value)
#define MUT(n, i) (&(n)->in[i]->value)

sx_status cg_eval_leaf(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    (void)n;
    return SX_OK;
}

sx_status cg_eval_map(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_map_out((sx_map_op)KERNEL, n->attr.alpha, IN(0), OUT);
}

sx_status cg_eval_binary(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_binary_out((sx_binary_op)KERNEL, IN(0), IN(1), OUT);
}

sx_status cg_eval_fma(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_fma_out(IN(0), IN(1), IN(2), OUT);
}

/* where(c, a, b) = b + c * (a - b) would lose exactness (inf, nan); compute it directly over
 * the broadcast: out = broadcast(b), then the chosen entries of a. */
sx_status cg_eval_where(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    size_t bytes = (size_t)OUT->size * sx_dtype_size(OUT->dtype);
    SX_TRY(cg_workspace(g, 2 * bytes, &ws));
    sx_tensor c = sx_tensor_view(OUT->dtype, OUT->rank, OUT->shape, ws);
    sx_tensor a = sx_tensor_view(OUT->dtype, OUT->rank, OUT->shape, (char *)ws + bytes);
    SX_TRY(sx_tensor_broadcast_out(IN(0), &c));
    SX_TRY(sx_tensor_broadcast_out(IN(1), &a));
    SX_TRY(sx_tensor_broadcast_out(IN(2), OUT));
    int64_t len = OUT->size;
    if (OUT->dtype == SX_F32) {
        const float *cp = c.data, *ap = a.data;
        float *o = OUT->data;
        for (int64_t i = 0; i < len; i++)
            if (cp[i] != 0)
                o[i] = ap[i];
    } else {
        const double *cp = c.data, *ap = a.data;
        double *o = OUT->data;
        for (int64_t i = 0; i < len; i++)
            if (cp[i] != 0)
                o[i] = ap[i];
    }
    return SX_OK;
}

sx_status cg_eval_fold(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_fold_out((sx_fold_op)KERNEL, IN(0), n->attr.axes, n->attr.keepdims, OUT);
}

sx_status cg_eval_repeat(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    if (n->op == SX_OP_TILE)
        return sx_tensor_tile_out(IN(0), n->attr.ints, OUT);
    return sx_tensor_repeat_out(IN(0), n->attr.ints, OUT);
}

sx_status cg_eval_broadcast(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_broadcast_out(IN(0), OUT);
}

/* Views share their input's memory: nothing moves. */
sx_status cg_eval_view(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    OUT->data = IN(0)->data;
    return SX_OK;
}

sx_status cg_eval_slice(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_slice_out(IN(0), n->attr.slice, OUT);
}

sx_status cg_eval_unslice(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_unslice_out(IN(0), n->attr.slice, OUT);
}

sx_status cg_eval_concat(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    const sx_tensor *xs[64];
    if (n->n_in > 64)
        return sx_error(SX_E_UNSUPPORTED, "%s: more than 64 inputs", cg_who(n));
    for (int i = 0; i < n->n_in; i++)
        xs[i] = IN(i);
    return sx_tensor_concat_out(n->n_in, xs, n->attr.axis, OUT);
}

sx_status cg_eval_permute(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    int perm[SX_MAX_RANK];
    for (int i = 0; i < OUT->rank; i++)
        perm[i] = (int)n->attr.ints[i];
    return sx_tensor_permute_out(IN(0), perm, OUT);
}

sx_status cg_eval_pad(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_pad_out(IN(0), n->attr.ints, n->attr.ints2, n->attr.alpha, OUT);
}

sx_status cg_eval_one_hot(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_one_hot_out(IN(0), n->attr.ints[0], OUT);
}

sx_status cg_eval_gather(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_gather_out(IN(0), IN(1), OUT);
}

sx_status cg_eval_scatter_add(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_scatter_add_out(IN(0), IN(1), OUT);
}

sx_status cg_eval_matmul(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    double beta = 0;
    if (n->n_in == 3) {
        if (IN(2)->data != OUT->data) /* planned in place: already there */
            SX_TRY(sx_tensor_broadcast_out(IN(2), OUT));
        beta = n->attr.beta;
    }
    return sx_tensor_matmul_out(IN(0), IN(1), n->attr.trans_a, n->attr.trans_b, n->attr.alpha, beta,
                                OUT);
}

/* dot takes any two tensors of one size (the shape rule); the kernel takes vectors: flat views. */
sx_status cg_eval_dot(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    int64_t na = IN(0)->size, nb = IN(1)->size;
    sx_tensor a = sx_tensor_view(IN(0)->dtype, 1, &na, IN(0)->data);
    sx_tensor b = sx_tensor_view(IN(1)->dtype, 1, &nb, IN(1)->data);
    return sx_tensor_dot_out(&a, &b, OUT);
}

sx_status cg_eval_conv2d(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_conv2d_out(IN(0), IN(1), &n->attr.conv, ws, n->ws_bytes, OUT);
}

sx_status cg_eval_conv2d_bwd_input(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_conv2d_backward_input_out(IN(0), IN(1), &n->attr.conv, ws, n->ws_bytes, OUT);
}

sx_status cg_eval_conv2d_bwd_kernel(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_conv2d_backward_kernel_out(IN(0), IN(1), &n->attr.conv, ws, n->ws_bytes, OUT);
}

sx_status cg_eval_maxpool2d(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_maxpool2d_out(IN(0), &n->attr.pool, OUT);
}

sx_status cg_eval_maxpool2d_bwd(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_maxpool2d_backward_out(IN(0), IN(1), &n->attr.pool, OUT);
}

sx_status cg_eval_avgpool2d(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_avgpool2d_out(IN(0), &n->attr.pool, OUT);
}

sx_status cg_eval_avgpool2d_bwd(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_avgpool2d_backward_out(IN(0), &n->attr.pool, OUT);
}

sx_status cg_eval_softmax(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_softmax_out(IN(0), n->attr.axis, OUT);
}

sx_status cg_eval_log_softmax(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_log_softmax_out(IN(0), n->attr.axis, OUT);
}

sx_status cg_eval_softmax_bwd(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_softmax_backward_out(IN(0), IN(1), n->attr.axis, OUT);
}

sx_status cg_eval_log_softmax_bwd(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_log_softmax_backward_out(IN(0), IN(1), n->attr.axis, OUT);
}

sx_status cg_eval_softmax_xent(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_softmax_xent_out(IN(0), IN(1), OUT);
}

sx_status cg_eval_softmax_xent_bwd(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_softmax_xent_backward_out(IN(0), IN(1), IN(2), OUT);
}

sx_status cg_eval_dropout_mask(sx_cg_graph *g, sx_cg_node *n)
{
    return sx_tensor_dropout_mask(OUT, &g->rngs[n->attr.rng_id], n->attr.alpha);
}

sx_status cg_eval_inv(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_inv_out(IN(0), OUT);
}

sx_status cg_eval_solve(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_solve_out(IN(0), IN(1), OUT);
}

sx_status cg_eval_det(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_det_out(IN(0), OUT);
}

sx_status cg_eval_logdet(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_logdet_out(IN(0), OUT, NULL);
}

sx_status cg_eval_cholesky(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_cholesky_out(IN(0), OUT);
}

/* QR and the eigen-decomposition produce two results; each node computes the pair and keeps
 * its half (the other half goes to scratch). */
sx_status cg_eval_qr_q(sx_cg_graph *g, sx_cg_node *n)
{
    int64_t k = OUT->shape[1], c = IN(0)->shape[1];
    int64_t rs[2] = {k, c};
    void *ws;
    SX_TRY(cg_workspace(g, (size_t)(k * c) * sx_dtype_size(OUT->dtype), &ws));
    sx_tensor r = sx_tensor_view(OUT->dtype, 2, rs, ws);
    return sx_tensor_qr_out(IN(0), OUT, &r);
}

sx_status cg_eval_qr_r(sx_cg_graph *g, sx_cg_node *n)
{
    int64_t m = IN(0)->shape[0], k = OUT->shape[0];
    int64_t qs[2] = {m, k};
    void *ws;
    SX_TRY(cg_workspace(g, (size_t)(m * k) * sx_dtype_size(OUT->dtype), &ws));
    sx_tensor q = sx_tensor_view(OUT->dtype, 2, qs, ws);
    return sx_tensor_qr_out(IN(0), &q, OUT);
}

sx_status cg_eval_svd_s(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_svd_out(IN(0), NULL, OUT, NULL);
}

sx_status cg_eval_eigh_w(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_eigh_out(IN(0), OUT, NULL);
}

sx_status cg_eval_eigh_v(sx_cg_graph *g, sx_cg_node *n)
{
    int64_t ws_shape[1] = {OUT->shape[0]};
    void *ws;
    SX_TRY(cg_workspace(g, (size_t)OUT->shape[0] * sx_dtype_size(OUT->dtype), &ws));
    sx_tensor w = sx_tensor_view(OUT->dtype, 1, ws_shape, ws);
    return sx_tensor_eigh_out(IN(0), &w, OUT);
}

/* The assign's value is the parameter itself (a view), after the copy. */
sx_status cg_eval_assign(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    SX_TRY(sx_tensor_copy_out(IN(1), IN(0)));
    OUT->data = IN(0)->data;
    return SX_OK;
}

sx_status cg_eval_fused(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    const sx_tensor *in[64];
    if (n->n_in > 64)
        return sx_error(SX_E_UNSUPPORTED, "%s: more than 64 inputs", cg_who(n));
    for (int i = 0; i < n->n_in; i++)
        in[i] = IN(i);
    return sx_tensor_fused_out(&n->attr.prog, n->n_in, in, OUT);
}

/* The fused optimiser steps; the node's value is the parameter (a view). */
sx_status cg_eval_update(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    const double *c = n->attr.coef;
    double lr = sx_tensor_get(IN(n->n_in - 1), 0);
    sx_status s;
    switch (n->op) {
    case SX_OP_SGD_UPDATE:
        s = sx_tensor_sgd_step(OUT0(n), IN(1), lr);
        break;
    case SX_OP_MOMENTUM_UPDATE:
        s = sx_tensor_momentum_step(OUT0(n), MUT(n, 1), IN(2), lr, c[0], n->attr.keepdims);
        break;
    case SX_OP_ADAGRAD_UPDATE:
        s = sx_tensor_adagrad_step(OUT0(n), MUT(n, 1), IN(2), lr, c[0]);
        break;
    case SX_OP_RMSPROP_UPDATE:
        s = sx_tensor_rmsprop_step(OUT0(n), MUT(n, 1), IN(2), lr, c[0], c[1], c[2]);
        break;
    case SX_OP_ADAM_UPDATE:
        s = sx_tensor_adam_step(OUT0(n), MUT(n, 1), MUT(n, 2), IN(3), lr, c[0], c[1], c[2], c[3],
                                c[4]);
        break;
    default:
        return sx_error(SX_E_STATE, "%s: not an update op", cg_who(n));
    }
    OUT->data = IN(0)->data;
    return s;
}
