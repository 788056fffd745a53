/* ops/update.c: ops that write parameters in place: assign, the fused optimiser steps that
 * optim/ emits (sgd, momentum, adagrad, rmsprop, adam; adamw, amsgrad, rmsprop_centered,
 * momentum_dampened with a rate vector), the matmul_update the gemm-update pass
 * makes, and seq (a value ordered after such a write). */
#include "cgraph_impl.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)
/* The parameters a mutating node writes (its leading inputs' storage). */
#define OUT0(n) (&(n)->in[0]->value)
#define MUT(n, i) (&(n)->in[i]->value)

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

/* update(p, states..., g, lr): every tensor has p's shape, lr has cg_update_rates elements, and
 * the parameter and states are parameters (they are written in place). */
sx_status cg_shape_update(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    int last = n->n_in - 1, mutated = cg_mutated(n);
    for (int i = 0; i < mutated; i++)
        if (n->in[i]->op != SX_OP_PARAM)
            return sx_error(SX_E_ARG, "%s: input %d is a %s, not a parameter", cg_who(n), i,
                            sx_cg_op_name(n->in[i]->op));
    for (int i = 1; i < last; i++)
        SX_TRY(cg_want_same_shape(n, 0, i));
    if (IN_VALUE(last)->size != cg_update_rates(n->op))
        return sx_error(SX_E_SHAPE, "%s: the learning rate has %lld elements (want %lld)",
                        cg_who(n), (long long)IN_VALUE(last)->size,
                        (long long)cg_update_rates(n->op));
    cg_set_shape(n, IN_VALUE(0)->rank, IN_VALUE(0)->shape);
    return SX_OK;
}

/* matmul_update(p, states..., a, b, lr): the update op in attr.ints[0] over p and its states,
 * with the gradient op(a) @ op(b) of p's (2-d) shape. */
sx_status cg_shape_matmul_update(sx_cg_node *n)
{
    int64_t u = n->attr.ints[0];
    if (u < 0 || u >= SX_OP_COUNT || !(sx_cg_ops[u].flags & SX_OPF_UPDATE))
        return sx_error(SX_E_ARG, "%s: attr.ints[0] = %lld is not an update op", cg_who(n),
                        (long long)u);
    int k = cg_mutated(n);
    if (n->n_in != k + 3)
        return sx_error(SX_E_ARG, "%s: %d inputs (want %d for %s)", cg_who(n), n->n_in, k + 3,
                        sx_cg_op_name((sx_cg_op)u));
    SX_TRY(cg_same_dtypes(n));
    for (int i = 0; i < k; i++) {
        if (n->in[i]->op != SX_OP_PARAM)
            return sx_error(SX_E_ARG, "%s: input %d is a %s, not a parameter", cg_who(n), i,
                            sx_cg_op_name(n->in[i]->op));
        SX_TRY(cg_want_same_shape(n, 0, i));
    }
    const sx_tensor *p = IN_VALUE(0), *a = IN_VALUE(k), *b = IN_VALUE(k + 1);
    if (p->rank != 2 || a->rank != 2 || b->rank != 2)
        return sx_error(SX_E_RANK, "%s: the parameter and both factors must be matrices",
                        cg_who(n));
    int64_t m = n->attr.trans_a ? a->shape[1] : a->shape[0];
    int64_t ka = n->attr.trans_a ? a->shape[0] : a->shape[1];
    int64_t kb = n->attr.trans_b ? b->shape[1] : b->shape[0];
    int64_t nn = n->attr.trans_b ? b->shape[0] : b->shape[1];
    if (m != p->shape[0] || nn != p->shape[1] || ka != kb || ka < 1 || ka > INT_MAX ||
        m > INT_MAX || nn > INT_MAX)
        return sx_error(SX_E_SHAPE, "%s: the product does not have the parameter's shape",
                        cg_who(n));
    if (IN_VALUE(k + 2)->size != cg_update_rates((sx_cg_op)u))
        return sx_error(SX_E_SHAPE, "%s: the learning rate has %lld elements (want %lld)",
                        cg_who(n), (long long)IN_VALUE(k + 2)->size,
                        (long long)cg_update_rates((sx_cg_op)u));
    cg_set_shape(n, p->rank, p->shape);
    n->ws_bytes = (size_t)CG_MMU_SLOTS * (size_t)cg_mmu_rows(m, nn, sx_dtype_size(p->dtype)) *
                  (size_t)nn * sx_dtype_size(p->dtype);
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

/* RMSprop with momentum (PyTorch's RMSprop(momentum=mu)) in one pass, in the parameter's dtype:
 * a <- rho a + (1 - rho) g g;  b <- mu b + g / (sqrt(a) + eps);  p <- p - lr b. The operations
 * and their order are those of the formula written as separate element-wise ops. */
#define RMSPROP_MOMENTUM_LOOP(T, SQRT)                                                             \
    do {                                                                                           \
        T *pp = p->data, *ap = st[0]->data, *bp = st[1]->data;                                     \
        const T *gp = g->data;                                                                     \
        const T l = (T)r[0], rho = (T)c->rho, cc = (T)c->one_minus_rho, e = (T)c->eps,             \
                mu = (T)c->mu;                                                                     \
        for (int64_t i = 0; i < p->size; i++) {                                                    \
            T gi = gp[i];                                                                          \
            T an = rho * ap[i] + cc * (gi * gi);                                                   \
            T bn = mu * bp[i] + gi / (SQRT(an) + e);                                               \
            ap[i] = an;                                                                            \
            bp[i] = bn;                                                                            \
            pp[i] = pp[i] - l * bn;                                                                \
        }                                                                                          \
    } while (0)

static sx_status step_rmsprop_momentum(const sx_cg_attr *a, sx_tensor *p, sx_tensor *const *st,
                                       const sx_tensor *g, const double *r)
{
    const sx_cg_rmsprop_momentum_coef *c = &a->rmsprop_momentum;
    if (p->dtype == SX_F32)
        RMSPROP_MOMENTUM_LOOP(float, sqrtf);
    else
        RMSPROP_MOMENTUM_LOOP(double, sqrt);
    return SX_OK;
}
#undef RMSPROP_MOMENTUM_LOOP

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
    [SX_OP_MOMENTUM_DAMPENED_UPDATE] = step_momentum_dampened,
    [SX_OP_RMSPROP_MOMENTUM_UPDATE] = step_rmsprop_momentum};

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
    read_rates(n->op, IN_VALUE(n->n_in - 1), r);
    sx_status s = run_step(n, n->op, OUT0(n), st, IN_VALUE(k), r);
    OUT->data = IN_VALUE(0)->data;
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
    const sx_tensor *a = IN_VALUE(k), *b = IN_VALUE(k + 1), *p = IN_VALUE(0);
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
    read_rates(op, IN_VALUE(k + 2), c.lr);
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

/* (p, states..., a, b, lr): the product's flops (the update's are a few per element) */
cg_cost cg_eval_matmul_update_cost(const sx_cg_node *n)
{
    const sx_tensor *a = IN_VALUE(n->n_in - 3);
    return cg_cost_gemm((double)OUT->size, n->attr.trans_a ? a->shape[0] : a->shape[1]);
}

/* a few operations per parameter element: sgd 2, momentum 4, adagrad 5, rmsprop 7, adam 12 */
cg_cost cg_eval_update_cost(const sx_cg_node *n)
{
    double per = n->op == SX_OP_SGD_UPDATE                ? 2
                 : n->op == SX_OP_MOMENTUM_UPDATE         ? 4
                 : n->op == SX_OP_ADAGRAD_UPDATE          ? 5
                 : n->op == SX_OP_RMSPROP_UPDATE          ? 7
                 : n->op == SX_OP_RMSPROP_MOMENTUM_UPDATE ? 9
                                                          : 12;
    return cg_cost_per_out(n, per);
}
