/* eval.c: the evaluators of the op table: each calls the tensor kernel of its op on the input
 * values, writing into the node's storage. Family evaluators (map, binary, fold) dispatch on the
 * op table's kernel column, so an element-wise op is one row and no code here. */
#include "cgraph_impl.h"

#include <stdatomic.h>
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

/* where(c, a, b) = c != 0 ? a : b, selected element by element (never b + c (a - b), which
 * would turn an infinite or NaN operand into NaN where it is not chosen). An operand of the
 * result's size is read in place (its elements are in the result's order; it may be the result's
 * own memory: each element is read before it is written), a one-element operand as a scalar, and
 * any other is broadcast into the workspace first (cg_where_scratch counts those). */
#define WHERE_LOOP(T)                                                                              \
    do {                                                                                           \
        const T *cp = src[0], *ap = src[1], *bp = src[2];                                          \
        T *o = OUT->data;                                                                          \
        if (step[0] && step[1] && step[2]) {                                                       \
            for (int64_t i = 0; i < len; i++)                                                      \
                o[i] = cp[i] != 0 ? ap[i] : bp[i];                                                 \
        } else if (step[0] && step[1]) { /* relu-like: where(mask, g, 0) */                        \
            const T b0 = bp[0];                                                                    \
            for (int64_t i = 0; i < len; i++)                                                      \
                o[i] = cp[i] != 0 ? ap[i] : b0;                                                    \
        } else {                                                                                   \
            for (int64_t i = 0; i < len; i++)                                                      \
                o[i] = cp[i * step[0]] != 0 ? ap[i * step[1]] : bp[i * step[2]];                   \
        }                                                                                          \
    } while (0)

sx_status cg_eval_where(sx_cg_graph *g, sx_cg_node *n)
{
    const int64_t len = OUT->size;
    if (len == 0)
        return SX_OK;
    const size_t bytes = (size_t)len * sx_dtype_size(OUT->dtype);
    void *ws = NULL;
    int n_ws = cg_where_scratch(n);
    if (n_ws > 0)
        SX_TRY(cg_workspace(g, (size_t)n_ws * bytes, &ws));
    const void *src[3];
    int64_t step[3];
    for (int k = 0, used = 0; k < 3; k++) {
        const sx_tensor *x = IN(k);
        step[k] = x->size == len ? 1 : 0;
        src[k] = x->data;
        if (x->size != len && x->size != 1) {
            sx_tensor t = sx_tensor_view(OUT->dtype, OUT->rank, OUT->shape,
                                         (char *)ws + (size_t)used++ * bytes);
            SX_TRY(sx_tensor_broadcast_out(x, &t));
            src[k] = t.data;
            step[k] = 1;
        }
    }
    if (OUT->dtype == SX_F32)
        WHERE_LOOP(float);
    else
        WHERE_LOOP(double);
    return SX_OK;
}
#undef WHERE_LOOP

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
    const sx_tensor *xs[SX_CG_MAX_INPUTS];
    if (n->n_in > SX_CG_MAX_INPUTS)
        return sx_error(SX_E_UNSUPPORTED, "%s: more than %d inputs", cg_who(n), SX_CG_MAX_INPUTS);
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

/* alpha op(a) op(b) (+ beta c): the product first (the GEMM with beta = 0 rounds alpha times the
 * finished sum), then beta c added element by element over the broadcast (beta c rounded, then
 * the sum): the operations, in the order, of separate matmul, mul and add nodes, so that the
 * gemm-folding pass keeps every bit. Planned over its dying addend (cg_matmul_inplace_ok: alpha
 * = beta = 1, one K block), the GEMM adds c to the product's one sum, rounded once: the same. */
sx_status cg_eval_matmul(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    const bool ta = n->attr.trans_a, tb = n->attr.trans_b;
    if (n->n_in == 3 && IN(2)->data == OUT->data) /* planned in place: c is already there */
        return sx_tensor_matmul_out(IN(0), IN(1), ta, tb, n->attr.alpha, n->attr.beta, OUT);
    SX_TRY(sx_tensor_matmul_out(IN(0), IN(1), ta, tb, n->attr.alpha, 0.0, OUT));
    if (n->n_in < 3 || n->attr.beta == 0.0) /* beta = 0 ignores c, NaN too */
        return SX_OK;
    if (n->attr.beta == 1.0)
        return sx_tensor_binary_out(SX_BINARY_ADD, OUT, IN(2), OUT);
    float bf = (float)n->attr.beta;
    double bd = n->attr.beta;
    int64_t one = 1;
    sx_tensor beta = sx_tensor_view(OUT->dtype, 0, &one, OUT->dtype == SX_F32 ? (void *)&bf : &bd);
    return sx_tensor_fma_out(IN(2), &beta, OUT, OUT);
}

bool cg_matmul_inplace_ok(const sx_cg_node *n)
{
    const sx_tensor *a = IN(0);
    const int64_t k = n->attr.trans_a ? a->shape[a->rank - 2] : a->shape[a->rank - 1];
    return n->n_in == 3 && n->attr.alpha == 1.0 && n->attr.beta == 1.0 && sx__gemm_kblocks(k) <= 1;
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

sx_status cg_eval_conv2d_backward_input(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_conv2d_backward_input_out(IN(0), IN(1), &n->attr.conv, ws, n->ws_bytes, OUT);
}

sx_status cg_eval_conv2d_backward_kernel(sx_cg_graph *g, sx_cg_node *n)
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

sx_status cg_eval_maxpool2d_backward(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_maxpool2d_backward_out(IN(0), IN(1), &n->attr.pool, OUT);
}

sx_status cg_eval_maxpool2d_relu_backward(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_maxpool2d_relu_backward_out(IN(0), IN(1), &n->attr.pool, OUT);
}

sx_status cg_eval_avgpool2d(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_avgpool2d_out(IN(0), &n->attr.pool, OUT);
}

sx_status cg_eval_avgpool2d_backward(sx_cg_graph *g, sx_cg_node *n)
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

sx_status cg_eval_softmax_backward(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_softmax_backward_out(IN(0), IN(1), n->attr.axis, OUT);
}

sx_status cg_eval_log_softmax_backward(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_log_softmax_backward_out(IN(0), IN(1), n->attr.axis, OUT);
}

sx_status cg_eval_softmax_xent(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_softmax_xent_out(IN(0), IN(1), OUT);
}

sx_status cg_eval_softmax_xent_backward(sx_cg_graph *g, sx_cg_node *n)
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
    const sx_tensor *in[SX_CG_MAX_INPUTS];
    if (n->n_in > SX_CG_MAX_INPUTS)
        return sx_error(SX_E_UNSUPPORTED, "%s: more than %d inputs", cg_who(n), SX_CG_MAX_INPUTS);
    for (int i = 0; i < n->n_in; i++)
        in[i] = IN(i);
    return sx_tensor_fused_out(&n->attr.prog, n->n_in, in, OUT);
}

/* An update op's step on p and its states st[] with gradient g and rates r (the rate input's
 * elements, cg_update_rates of them: the learning rate first). */
typedef sx_status (*step_fn)(const sx_cg_attr *a, sx_tensor *p, sx_tensor *const *st,
                             const sx_tensor *g, const double *r);

static sx_status step_sgd(const sx_cg_attr *a, sx_tensor *p, sx_tensor *const *st,
                          const sx_tensor *g, const double *r)
{
    (void)a;
    (void)st;
    return sx_tensor_sgd_step(p, g, r[0]);
}

static sx_status step_momentum(const sx_cg_attr *a, sx_tensor *p, sx_tensor *const *st,
                               const sx_tensor *g, const double *r)
{
    return sx_tensor_momentum_step(p, st[0], g, r[0], a->momentum.mu, a->nesterov);
}

static sx_status step_adagrad(const sx_cg_attr *a, sx_tensor *p, sx_tensor *const *st,
                              const sx_tensor *g, const double *r)
{
    return sx_tensor_adagrad_step(p, st[0], g, r[0], a->adagrad.eps);
}

static sx_status step_rmsprop(const sx_cg_attr *a, sx_tensor *p, sx_tensor *const *st,
                              const sx_tensor *g, const double *r)
{
    return sx_tensor_rmsprop_step(p, st[0], g, r[0], a->rmsprop.rho, a->rmsprop.one_minus_rho,
                                  a->rmsprop.eps);
}

static sx_status step_adam(const sx_cg_attr *a, sx_tensor *p, sx_tensor *const *st,
                           const sx_tensor *g, const double *r)
{
    return sx_tensor_adam_step(p, st[0], st[1], g, r[0], a->adam.beta1, a->adam.one_minus_beta1,
                               a->adam.beta2, a->adam.one_minus_beta2, a->adam.eps);
}

static sx_status step_adamw(const sx_cg_attr *a, sx_tensor *p, sx_tensor *const *st,
                            const sx_tensor *g, const double *r)
{
    return sx_tensor_adamw_step(p, st[0], st[1], st[2], g, r[0], r[1], r[2], a->adam.beta1,
                                a->adam.one_minus_beta1, a->adam.beta2, a->adam.one_minus_beta2,
                                a->adam.eps);
}

static sx_status step_rmsprop_centered(const sx_cg_attr *a, sx_tensor *p, sx_tensor *const *st,
                                       const sx_tensor *g, const double *r)
{
    return sx_tensor_rmsprop_centered_step(p, st[0], st[1], g, r[0], a->rmsprop.rho,
                                           a->rmsprop.one_minus_rho, a->rmsprop.eps);
}

static sx_status step_momentum_dampened(const sx_cg_attr *a, sx_tensor *p, sx_tensor *const *st,
                                        const sx_tensor *g, const double *r)
{
    return sx_tensor_momentum_dampened_step(p, st[0], g, r[0], r[1], a->momentum.mu, a->nesterov);
}

/* The step kernel of each update row (SX_OPF_UPDATE in sx_ops.def); NULL for the other ops. */
static const step_fn update_steps[SX_OP_COUNT] = {
    [SX_OP_SGD_UPDATE] = step_sgd,
    [SX_OP_MOMENTUM_UPDATE] = step_momentum,
    [SX_OP_ADAGRAD_UPDATE] = step_adagrad,
    [SX_OP_RMSPROP_UPDATE] = step_rmsprop,
    [SX_OP_ADAM_UPDATE] = step_adam,
    [SX_OP_ADAMW_UPDATE] = step_adamw,
    [SX_OP_AMSGRAD_UPDATE] = step_adamw,
    [SX_OP_RMSPROP_CENTERED_UPDATE] = step_rmsprop_centered,
    [SX_OP_MOMENTUM_DAMPENED_UPDATE] = step_momentum_dampened};

enum { CG_MAX_RATES = 3 };

/* The rate input's elements (cg_update_rates(op) of them) into r. */
static void read_rates(sx_cg_op op, const sx_tensor *t, double *r)
{
    int64_t k = cg_update_rates(op);
    for (int64_t i = 0; i < CG_MAX_RATES; i++)
        r[i] = i < k ? sx_tensor_get(t, i) : 0;
}

/* One optimiser step of update op `op` (n's own, or the update a matmul_update stands for) on
 * p and its states st[] with gradient g. */
static sx_status run_step(const sx_cg_node *n, sx_cg_op op, sx_tensor *p, sx_tensor *const *st,
                          const sx_tensor *g, const double *r)
{
    if ((unsigned)op >= SX_OP_COUNT || update_steps[op] == NULL)
        return sx_error(SX_E_STATE, "%s: not an update op", cg_who(n));
    return update_steps[op](&n->attr, p, st, g, r);
}

/* The fused optimiser steps; the node's value is the parameter (a view). */
sx_status cg_eval_update(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    int k = cg_mutated(n);
    sx_tensor *st[3] = {k > 1 ? MUT(n, 1) : NULL, k > 2 ? MUT(n, 2) : NULL,
                        k > 3 ? MUT(n, 3) : NULL};
    double r[CG_MAX_RATES];
    read_rates(n->op, IN(n->n_in - 1), r);
    sx_status s = run_step(n, n->op, OUT0(n), st, IN(k), r);
    OUT->data = IN(0)->data;
    return s;
}

/* One matmul-update: its operands, and the first failure of a block (SX_OK if none). */
typedef struct mmu_ctx {
    sx_cg_node *n;
    sx_cg_op op;
    const sx_tensor *a, *b, *p;
    double lr[CG_MAX_RATES];
    bool ta, tb;
    int k;
    int64_t m, cols, kk, lda, ldb, brows;
    size_t esz, slot_bytes;
    void *ws;
    _Atomic int first;
} mmu_ctx;

/* Block blk of rows on scratch slot `slot`. */
static void mmu_block(mmu_ctx *c, int64_t blk, int slot)
{
    sx_cg_node *n = c->n;
    const sx_tensor *p = c->p;
    const size_t esz = c->esz;
    char *gbuf = (char *)c->ws + (size_t)slot * c->slot_bytes;
    const int64_t r0 = blk * c->brows, cols = c->cols;
    const int64_t rows = c->m - r0 < c->brows ? c->m - r0 : c->brows;
    const char *ap = (const char *)c->a->data + (size_t)(c->ta ? r0 : r0 * c->lda) * esz;
    sx__gemm(p->dtype, c->ta, c->tb, rows, cols, c->kk, n->attr.alpha, ap, c->lda, c->b->data,
             c->ldb, 0.0, gbuf, cols);
    int64_t shape[2] = {rows, cols};
    const size_t off = (size_t)(r0 * cols) * esz;
    sx_tensor pv = sx_tensor_view(p->dtype, 2, shape, (char *)p->data + off);
    sx_tensor sv[3], gv = sx_tensor_view(p->dtype, 2, shape, gbuf);
    sx_tensor *st[3] = {NULL, NULL, NULL};
    for (int i = 1; i < c->k; i++) {
        sv[i - 1] = sx_tensor_view(p->dtype, 2, shape, (char *)MUT(n, i)->data + off);
        st[i - 1] = &sv[i - 1];
    }
    sx_status s = run_step(n, c->op, &pv, st, &gv, c->lr);
    int ok = SX_OK;
    if (s != SX_OK)
        atomic_compare_exchange_strong(&c->first, &ok, (int)s);
}

static void mmu_task(void *ctx, int64_t blk)
{
    mmu_block(ctx, blk, sx__par_slot());
}

/* The step with gradient op(a) @ op(b), a block of rows at a time (cg_mmu_rows): each block's
 * gradient is made in a scratch slot (cache-sized) and applied to the same rows of the parameter
 * and its states at once. Blocks run in parallel, one slot per thread; the GEMM and the step inside
 * a block run on that thread alone. Every element sees the same operations as the unfused matmul +
 * update, so the results agree bit for bit. */
sx_status cg_eval_matmul_update(sx_cg_graph *g, sx_cg_node *n)
{
    const int k = cg_mutated(n);
    const sx_cg_op op = (sx_cg_op)n->attr.ints[0];
    const sx_tensor *a = IN(k), *b = IN(k + 1), *p = IN(0);
    const bool ta = n->attr.trans_a, tb = n->attr.trans_b;
    const int64_t m = p->shape[0], cols = p->shape[1];
    const int64_t kk = ta ? a->shape[0] : a->shape[1];
    const int64_t lda = a->shape[1], ldb = b->shape[1];
    const size_t esz = sx_dtype_size(p->dtype);
    const int64_t brows = cg_mmu_rows(m, cols, esz);
    const size_t slot_bytes = (size_t)brows * (size_t)cols * esz;
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    const int64_t blocks = (m + brows - 1) / brows;
    int threads = sx__par_threads();
    if (threads > CG_MMU_SLOTS)
        threads = CG_MMU_SLOTS;
    if (threads > blocks)
        threads = (int)blocks;
    mmu_ctx c = {.n = n,
                 .op = op,
                 .a = a,
                 .b = b,
                 .p = p,
                 .ta = ta,
                 .tb = tb,
                 .k = k,
                 .m = m,
                 .cols = cols,
                 .kk = kk,
                 .lda = lda,
                 .ldb = ldb,
                 .brows = brows,
                 .esz = esz,
                 .slot_bytes = slot_bytes,
                 .ws = ws};
    read_rates(op, IN(k + 2), c.lr);
    atomic_init(&c.first, SX_OK);
    if (threads <= 1) /* on this thread, in order; the GEMMs may use threads inside */
        for (int64_t blk = 0; blk < blocks; blk++)
            mmu_block(&c, blk, 0);
    else
        sx__par_for_upto(threads, blocks, mmu_task, &c);
    OUT->data = IN(0)->data;
    return (sx_status)atomic_load(&c.first);
}
