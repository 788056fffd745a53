/* cost.c: the flop model of the op table: one cost function per evaluator of sx_ops.def
 * (cost_<eval column>), so an element-wise row shares its family's model (cost_eval_map,
 * cost_eval_binary) and a structural op brings its own; a row whose evaluator has no cost
 * function does not compile. The model counts floating-point operations of one evaluation (a
 * transcendental or a comparison counts as one); it feeds the WIDE rule of parallel evaluation
 * (exec.c) and sx_cg_node_flops. */
#include "cgraph_impl.h"

#define IN(i) (&n->in[i]->value)
#define OUT (&n->value)

typedef cg_cost (*cost_fn)(const sx_cg_node *n);

/* A kernel that moves or selects data without arithmetic (leaves, views, layout, where). */
static cg_cost none(const sx_cg_node *n)
{
    (void)n;
    return (cg_cost){0, false};
}

/* per_elem operations for every element of the result */
static cg_cost per_out(const sx_cg_node *n, double per_elem)
{
    return (cg_cost){per_elem * (double)OUT->size, false};
}

/* per_elem operations for every element of input i */
static cg_cost per_in(const sx_cg_node *n, int i, double per_elem)
{
    return (cg_cost){per_elem * (double)IN(i)->size, false};
}

/* A matrix product of 2 M N K flops, split over threads by rows: the WIDE rule reads it. */
static cg_cost gemm(double out_size, int64_t k)
{
    return (cg_cost){2.0 * out_size * (double)k, true};
}

/* ---------------------------------------------------------------- families */

#define NO_ARITHMETIC(eval)                                                                        \
    static cg_cost cost_##eval(const sx_cg_node *n)                                                \
    {                                                                                              \
        return none(n);                                                                            \
    }
NO_ARITHMETIC(eval_leaf)
NO_ARITHMETIC(eval_view)
NO_ARITHMETIC(eval_where)
NO_ARITHMETIC(eval_repeat)
NO_ARITHMETIC(eval_broadcast)
NO_ARITHMETIC(eval_slice)
NO_ARITHMETIC(eval_unslice)
NO_ARITHMETIC(eval_concat)
NO_ARITHMETIC(eval_permute)
NO_ARITHMETIC(eval_pad)
NO_ARITHMETIC(eval_one_hot)
NO_ARITHMETIC(eval_gather)
NO_ARITHMETIC(eval_assign)
#undef NO_ARITHMETIC

/* one operation per element: every unary and binary element-wise row, a reduction's input,
 * scatter_add's additions, a dropout mask's draws */
static cg_cost cost_eval_map(const sx_cg_node *n)
{
    return per_out(n, 1);
}

static cg_cost cost_eval_binary(const sx_cg_node *n)
{
    return per_out(n, 1);
}

static cg_cost cost_eval_fma(const sx_cg_node *n)
{
    return per_out(n, 2);
}

static cg_cost cost_eval_fold(const sx_cg_node *n)
{
    return per_in(n, 0, 1);
}

static cg_cost cost_eval_scatter_add(const sx_cg_node *n)
{
    return per_in(n, 0, 1);
}

static cg_cost cost_eval_dropout_mask(const sx_cg_node *n)
{
    return per_out(n, 1);
}

/* a fused chain: one operation per instruction per element */
static cg_cost cost_eval_fused(const sx_cg_node *n)
{
    return per_out(n, n->attr.prog.n);
}

/* ---------------------------------------------------------------- matrix products, convolution */

/* alpha op(a) @ op(b): K is a's inner dimension (the addend's beta c is not counted) */
static cg_cost cost_eval_matmul(const sx_cg_node *n)
{
    const sx_tensor *a = IN(0);
    return gemm((double)OUT->size, n->attr.trans_a ? a->shape[a->rank - 2] : a->shape[a->rank - 1]);
}

static cg_cost cost_eval_dot(const sx_cg_node *n)
{
    return per_in(n, 0, 2);
}

/* (p, states..., a, b, lr): the product's flops (the update's are a few per element) */
static cg_cost cost_eval_matmul_update(const sx_cg_node *n)
{
    const sx_tensor *a = IN(n->n_in - 3);
    return gemm((double)OUT->size, n->attr.trans_a ? a->shape[0] : a->shape[1]);
}

/* Every direction of a convolution is one GEMM over (n*ho*wo) x (kh*kw*cin) x cout: 2 flops per
 * output pixel per kernel element. y is the forward output, k the kernel (kh,kw,cin,cout). */
static cg_cost conv(const sx_tensor *y, const sx_tensor *k)
{
    if (k->shape[3] <= 0)
        return (cg_cost){0, true};
    return (cg_cost){2.0 * (double)(y->size / k->shape[3]) * (double)k->size, true};
}

static cg_cost cost_eval_conv2d(const sx_cg_node *n)
{
    return conv(OUT, IN(1));
}

static cg_cost cost_eval_conv2d_backward_input(const sx_cg_node *n)
{
    return conv(IN(1), IN(0));
}

static cg_cost cost_eval_conv2d_backward_kernel(const sx_cg_node *n)
{
    return conv(IN(1), OUT);
}

/* ---------------------------------------------------------------- pooling, softmax */

static double window(const sx_cg_node *n)
{
    return (double)n->attr.pool.kernel_h * (double)n->attr.pool.kernel_w;
}

/* one comparison or addition per window element of every pooled output */
static cg_cost cost_eval_maxpool2d(const sx_cg_node *n)
{
    return per_out(n, window(n));
}

static cg_cost cost_eval_avgpool2d(const sx_cg_node *n)
{
    return per_out(n, window(n));
}

/* the backward passes walk the windows of the pooled gradient dy */
static cg_cost cost_eval_maxpool2d_backward(const sx_cg_node *n)
{
    return per_in(n, 1, window(n));
}

static cg_cost cost_eval_maxpool2d_relu_backward(const sx_cg_node *n)
{
    return per_in(n, 1, window(n));
}

static cg_cost cost_eval_avgpool2d_backward(const sx_cg_node *n)
{
    return per_in(n, 0, window(n));
}

/* max, exp, sum and a division (or log) per element */
static cg_cost cost_eval_softmax(const sx_cg_node *n)
{
    return per_out(n, 4);
}

static cg_cost cost_eval_log_softmax(const sx_cg_node *n)
{
    return per_out(n, 4);
}

/* a dot product along the axis and a multiply-add per element */
static cg_cost cost_eval_softmax_backward(const sx_cg_node *n)
{
    return per_out(n, 4);
}

static cg_cost cost_eval_log_softmax_backward(const sx_cg_node *n)
{
    return per_out(n, 4);
}

/* a log-softmax and a dot with the target per logit */
static cg_cost cost_eval_softmax_xent(const sx_cg_node *n)
{
    return per_in(n, 0, 6);
}

static cg_cost cost_eval_softmax_xent_backward(const sx_cg_node *n)
{
    return per_out(n, 6);
}

/* batch norm (issue 18): statistics 3 flops per element, normalise 2, backward sums 3 */
static cg_cost cost_eval_bn_stats(const sx_cg_node *n)
{
    return per_in(n, 0, 3);
}

static cg_cost cost_eval_bn(const sx_cg_node *n)
{
    return per_out(n, 2);
}

static cg_cost cost_eval_bn_sums(const sx_cg_node *n)
{
    return per_in(n, 0, 3);
}

/* ---------------------------------------------------------------- linear algebra */

/* n of the last (square) axis of input 0, and the batch of such matrices */
static double cube(const sx_cg_node *n, double c)
{
    const sx_tensor *a = IN(0);
    double m = a->rank > 0 ? (double)a->shape[a->rank - 1] : 1;
    double batch = m > 0 ? (double)a->size / (m * m) : 0;
    return c * batch * m * m * m;
}

#define LAPACK_COST(eval, c)                                                                       \
    static cg_cost cost_##eval(const sx_cg_node *n)                                                \
    {                                                                                              \
        return (cg_cost){cube(n, c), false};                                                       \
    }
LAPACK_COST(eval_inv, 2.0)     /* LU and the inverse from it */
LAPACK_COST(eval_det, 2.0 / 3) /* LU */
LAPACK_COST(eval_logdet, 2.0 / 3)
LAPACK_COST(eval_cholesky, 1.0 / 3)
LAPACK_COST(eval_qr_q, 4.0 / 3) /* Householder QR, then Q */
LAPACK_COST(eval_qr_r, 4.0 / 3)
LAPACK_COST(eval_svd_s, 4.0) /* bidiagonalisation and the singular values */
LAPACK_COST(eval_eigh_w, 4.0 / 3)
LAPACK_COST(eval_eigh_v, 9.0)
#undef LAPACK_COST

/* LU of a (n,n), then forward and back substitution for each of b's columns */
static cg_cost cost_eval_solve(const sx_cg_node *n)
{
    const sx_tensor *a = IN(0);
    double m = (double)a->shape[a->rank - 1];
    return (cg_cost){2.0 / 3 * m * m * m + 2.0 * m * (double)IN(1)->size, false};
}

/* ---------------------------------------------------------------- optimiser steps */

/* a few operations per parameter element: sgd 2, momentum 4, adagrad 5, rmsprop 7, adam 12 */
static cg_cost cost_eval_update(const sx_cg_node *n)
{
    double per = n->op == SX_OP_SGD_UPDATE        ? 2
                 : n->op == SX_OP_MOMENTUM_UPDATE ? 4
                 : n->op == SX_OP_ADAGRAD_UPDATE  ? 5
                 : n->op == SX_OP_RMSPROP_UPDATE  ? 7
                                                  : 12;
    return per_out(n, per);
}

/* ---------------------------------------------------------------- the table */

static const cost_fn costs[SX_OP_COUNT] = {
#define X(NAME, name, arity, shape, eval, flags, kernel) [SX_OP_##NAME] = cost_##eval,
#include "sx_ops.def"
#undef X
};
_Static_assert(sizeof costs / sizeof costs[0] == SX_OP_COUNT, "one cost per op");

cg_cost cg_node_cost(const sx_cg_node *n)
{
    return costs[n->op](n);
}

double sx_cg_node_flops(const sx_cg_node *n)
{
    return n != NULL && (unsigned)n->op < SX_OP_COUNT ? costs[n->op](n).flops : 0;
}
