/* ops/update.c: ops that write parameters in place: assign, the fused updates that element-wise
 * fusion makes of assigns of element-wise chains (an optimiser step, sx_optim.h: its formula's
 * program writing the parameter and its states in one pass), the matmul_update the gemm-update
 * pass makes of one whose gradient is a product, and seq (a value ordered after such a write). */
#ifndef CG_GRAD_RULES /* the ops; their gradient rules, at the end, build apart (ops/rule.h) */
#include "cgraph_impl.h"

#include <limits.h>
#include <stdatomic.h>
#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

/* ---------------------------------------------------------------- constructors */

sx_cg_node *sx_cg_assign(sx_cg_graph *g, sx_cg_node *param, sx_cg_node *value)
{
    return cg_op2(g, SX_OP_ASSIGN, param, value, NULL);
}

/* ---------------------------------------------------------------- shape rules */

sx_status cg_shape_assign(sx_cg_node *n)
{
    if (n->in[0]->op != SX_OP_PARAM)
        return sx_error(SX_E_ARG, "%s: node %lld is a %s, not a parameter", cg_who(n),
                        (long long)n->in[0]->id, sx_cg_op_name(n->in[0]->op));
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_want_same_shape(n, 0, 1));
    cg_set_shape(n, IN_VALUE(0)->rank, IN_VALUE(0)->shape);
    return SX_OK;
}

sx_status cg_shape_seq(sx_cg_node *n)
{
    OUT->dtype = IN_VALUE(0)->dtype;
    cg_set_shape(n, IN_VALUE(0)->rank, IN_VALUE(0)->shape);
    return SX_OK;
}

/* The leading k inputs of n, written by its program (over n_ops operands), are parameters of
 * the program's shape (attr.rank/shape, which n takes); inputs k..n_x-1 have its size or repeat
 * over its leading axes. */
static sx_status check_update(sx_cg_node *n, int n_ops, int n_x)
{
    const int64_t k = n->attr.update.stores;
    if (k < 1 || k > n_ops)
        return sx_error(SX_E_ARG, "%s: writes %lld of its %d operands (want 1..%d)", cg_who(n),
                        (long long)k, n_ops, n_ops);
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(sx__fused_check_stores(cg_who(n), &n->attr.prog, n_ops, (int)k));
    SX_TRY(cg_attr_shape(n));
    for (int i = 0; i < n_x; i++) {
        const sx_tensor *x = IN_VALUE(i);
        if (i < k && n->in[i]->op != SX_OP_PARAM)
            return sx_error(SX_E_ARG, "%s: input %d is a %s, not a parameter", cg_who(n), i,
                            sx_cg_op_name(n->in[i]->op));
        if (i < k ? !sx_shape_equal(x->rank, x->shape, n->attr.rank, n->attr.shape)
                  : x->size != OUT->size && !cg_trailing_bcast(x, n->attr.rank, n->attr.shape)) {
            char a[128], b[128];
            return sx_error(SX_E_SHAPE, "%s: input %d has shape %s, the update %s", cg_who(n), i,
                            sx_shape_str(x->rank, x->shape, a, sizeof a),
                            sx_shape_str(n->attr.rank, n->attr.shape, b, sizeof b));
        }
    }
    return SX_OK;
}

/* fused_update(x_0, ..., x_{n-1}): the program over the inputs, storing into the leading
 * attr.update.stores. */
sx_status cg_shape_fused_update(sx_cg_node *n)
{
    return check_update(n, n->n_in, n->n_in);
}

/* matmul_update(x_0, ..., x_{n-1}, a, b): the program over x_0..x_{n-1} and op(a) @ op(b), a
 * matrix of the program's (2-d) shape. */
sx_status cg_shape_matmul_update(sx_cg_node *n)
{
    if (n->n_in < 3)
        return sx_error(SX_E_ARG, "%s: %d inputs (want at least 3)", cg_who(n), n->n_in);
    SX_TRY(check_update(n, n->n_in - 1, n->n_in - 2));
    const sx_tensor *a = IN_VALUE(n->n_in - 2), *b = IN_VALUE(n->n_in - 1);
    if (OUT->rank != 2 || a->rank != 2 || b->rank != 2)
        return sx_error(SX_E_RANK, "%s: the parameter and both factors must be matrices",
                        cg_who(n));
    int64_t m = n->attr.trans_a ? a->shape[1] : a->shape[0];
    int64_t ka = n->attr.trans_a ? a->shape[0] : a->shape[1];
    int64_t kb = n->attr.trans_b ? b->shape[1] : b->shape[0];
    int64_t nn = n->attr.trans_b ? b->shape[0] : b->shape[1];
    if (m != OUT->shape[0] || nn != OUT->shape[1] || ka != kb || ka < 1 || ka > INT_MAX ||
        m > INT_MAX || nn > INT_MAX)
        return sx_error(SX_E_SHAPE, "%s: the product does not have the parameter's shape",
                        cg_who(n));
    const size_t esz = sx_dtype_size(OUT->dtype);
    n->ws_bytes = (size_t)CG_MMU_SLOTS * (size_t)cg_mmu_rows(m, nn, esz) * (size_t)nn * esz;
    return SX_OK;
}

/* ---------------------------------------------------------------- evaluators */

/* The assign's value is the parameter itself (a view), after the copy. */
sx_status cg_eval_assign(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    SX_TRY(sx_tensor_copy_out(IN_VALUE(1), IN_VALUE(0)));
    OUT->data = IN_VALUE(0)->data;
    return SX_OK;
}

/* The program over the inputs, writing the parameter and its states in place; the node's value
 * is the parameter (a view). */
sx_status cg_eval_fused_update(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    sx_tensor *in[SX_CG_MAX_INPUTS];
    for (int i = 0; i < n->n_in; i++)
        in[i] = IN_VALUE(i);
    sx_status s = sx_tensor_fused_update(&n->attr.prog, n->n_in, in);
    OUT->data = IN_VALUE(0)->data;
    return s;
}

/* One matmul-update: its operands, and the first failure of a block (SX_OK if none). */
typedef struct mmu_ctx {
    sx_cg_node *n;
    const sx_tensor *a, *b, *p;
    bool ta, tb;
    int n_ops; /* program operands: n->n_in - 2 inputs, then the product */
    int64_t m, cols, kk, lda, ldb, brows;
    size_t esz, slot_bytes;
    void *ws;
    _Atomic int first;
} mmu_ctx;

/* Block blk of rows on scratch slot `slot`: its product, then the program over the same rows
 * of every full-size operand (a repeated one, whose period divides a row, whole). */
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
    sx_tensor v[SX_CG_MAX_INPUTS];
    sx_tensor *ops[SX_CG_MAX_INPUTS];
    for (int i = 0; i < c->n_ops - 1; i++) {
        sx_tensor *x = IN_VALUE(i);
        v[i] = x->size == p->size ? sx_tensor_view(p->dtype, 2, shape, (char *)x->data + off) : *x;
        ops[i] = &v[i];
    }
    v[c->n_ops - 1] = sx_tensor_view(p->dtype, 2, shape, gbuf);
    ops[c->n_ops - 1] = &v[c->n_ops - 1];
    sx_status s = sx_tensor_fused_update(&n->attr.prog, c->n_ops, ops);
    int ok = SX_OK;
    if (s != SX_OK)
        atomic_compare_exchange_strong(&c->first, &ok, (int)s);
}

static void mmu_task(void *ctx, int64_t blk)
{
    mmu_block(ctx, blk, sx__par_slot());
}

/* The update with operand op(a) @ op(b), a block of rows at a time (cg_mmu_rows): each block's
 * product is made in a scratch slot (cache-sized) and the program runs on the same rows of the
 * parameter and its states at once. Blocks run in parallel, one slot per thread; the GEMM and the
 * program inside a block run on that thread alone. Every element sees the same operations as the
 * unfused matmul + fused_update, so the results agree bit for bit. */
sx_status cg_eval_matmul_update(sx_cg_graph *g, sx_cg_node *n)
{
    const sx_tensor *a = IN_VALUE(n->n_in - 2), *b = IN_VALUE(n->n_in - 1), *p = IN_VALUE(0);
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
                 .a = a,
                 .b = b,
                 .p = p,
                 .ta = ta,
                 .tb = tb,
                 .n_ops = n->n_in - 1,
                 .m = m,
                 .cols = cols,
                 .kk = kk,
                 .lda = lda,
                 .ldb = ldb,
                 .brows = brows,
                 .esz = esz,
                 .slot_bytes = slot_bytes,
                 .ws = ws};
    atomic_init(&c.first, SX_OK);
    if (threads <= 1) /* on this thread, in order; the GEMMs may use threads inside */
        for (int64_t blk = 0; blk < blocks; blk++)
            mmu_block(&c, blk, 0);
    else
        sx__par_for_upto(threads, blocks, mmu_task, &c);
    OUT->data = IN_VALUE(0)->data;
    return (sx_status)atomic_load(&c.first);
}

/* ---------------------------------------------------------------- flop model */

/* assign copies */
cg_cost cg_eval_assign_cost(const sx_cg_node *n)
{
    return cg_cost_none(n);
}

/* (x..., a, b): the product's flops (the program's are a few per element) */
cg_cost cg_eval_matmul_update_cost(const sx_cg_node *n)
{
    const sx_tensor *a = IN_VALUE(n->n_in - 2);
    return cg_cost_gemm((double)OUT->size, n->attr.trans_a ? a->shape[0] : a->shape[1]);
}

/* one operation per instruction per element (the stores are copies) */
cg_cost cg_eval_fused_update_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, n->attr.prog.n);
}

#else
/* ---------------------------------------------------------------- gradient rules */

/* Only seq, a view of its first
 * input, passes a gradient; assign and the fused optimiser steps are NG_REFUSED in sx_ops.def
 * (sx_ad_grad refuses to differentiate through them: they write state, and the optimiser makes
 * the steps after differentiation). */
#include "rule.h"

/* seq(x, after) = x */
sx_status grad_seq(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                   sx_cg_node **gin)
{
    (void)g, (void)y;
    if (need[0])
        gin[0] = gy;
    return SX_OK;
}

#endif
