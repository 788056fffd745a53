/* update.c: optimiser steps fused into one pass over memory (the kernels of the update nodes
 * that optim/ emits). Each loop does the same operations in the same order as the optimiser's
 * formula written as separate element-wise ops, so results agree bit for bit; the gain is
 * one read and one write of each array instead of one per operation. The f32 loops are built
 * for the baseline, AVX2 and AVX-512 (picked at run time, as map.c's): the square roots and
 * divisions of Adagrad, RMSprop and Adam are then no longer what bounds the step. */
#include "tensor_impl.h"
#include "vmath.h"

#include <tgmath.h>

static sx_status check_like(const char *who, const char *name, const sx_tensor *p,
                            const sx_tensor *t)
{
    SX_TRY(sx__check_tensor(who, name, t));
    SX_TRY(sx__check_same_dtype(who, p, t));
    if (!sx_shape_equal(p->rank, p->shape, t->rank, t->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, the parameter %s", who, name,
                        sx_shape_str(t->rank, t->shape, a, sizeof a),
                        sx_shape_str(p->rank, p->shape, b, sizeof b));
    }
    return SX_OK;
}

/* What a step's kernel reads: the parameter, up to two state arrays, the gradient, the learning
 * rate and the optimiser's coefficients (in the order each kernel names them). */
typedef struct upd_args {
    void *p, *s1, *s2, *s3;
    const void *g;
    double lr, c[8];
    bool nesterov;
} upd_args;

typedef void upd_fn(const upd_args *u, int64_t lo, int64_t hi);
enum {
    UPD_SGD,
    UPD_MOMENTUM,
    UPD_ADAGRAD,
    UPD_RMSPROP,
    UPD_ADAM,
    UPD_ADAMW,
    UPD_AMSGRAD,
    UPD_RMSPROP_CENTERED,
    UPD_MOMENTUM_DAMPENED,
    UPD_COUNT
};

#define ISA_TMPL "elementwise/update_tmpl.h"
#include "isa_each.h"
#undef ISA_TMPL
#define T double
#define SFX f64
#include "update_tmpl.h"
#undef T
#undef SFX

#define UPD_SET(s)                                                                                 \
    {                                                                                              \
        sgd_##s, momentum_##s, adagrad_##s, rmsprop_##s, adam_##s, adamw_##s, amsgrad_##s,         \
            rmsprop_centered_##s, momentum_dampened_##s                                            \
    }
static upd_fn *const upd_f32[3][UPD_COUNT] = {UPD_SET(f32),
#if VM_DISPATCH
                                              UPD_SET(f32_avx2), UPD_SET(f32_avx512)
#else
                                              UPD_SET(f32), UPD_SET(f32)
#endif
};
static upd_fn *const upd_f64[UPD_COUNT] = UPD_SET(f64);
#undef UPD_SET

typedef struct upd_ctx {
    upd_fn *fn;
    const upd_args *u;
} upd_ctx;

static void upd_range(void *ctx, int64_t lo, int64_t hi)
{
    const upd_ctx *c = ctx;
    c->fn(c->u, lo, hi);
}

/* Run step `k` over p's elements: f32 with the widest instruction set this CPU has (vm_isa),
 * in ranges split over the pool's threads above SX_PAR_MIN elements (element-wise: the bits do
 * not depend on the split). */
static void upd_run(int k, const sx_tensor *p, const upd_args *u)
{
    upd_ctx c = {p->dtype == SX_F32 ? upd_f32[vm_isa()][k] : upd_f64[k], u};
    sx__par_range(p->size, SX_PAR_MIN / 2, upd_range, &c);
}

sx_status sx_tensor_sgd_step(sx_tensor *p, const sx_tensor *g, double lr)
{
    const char *who = "sx_tensor_sgd_step";
    SX_TRY(sx__check_tensor(who, "p", p));
    SX_TRY(check_like(who, "g", p, g));
    upd_args u = {.p = p->data, .g = g->data, .lr = lr};
    upd_run(UPD_SGD, p, &u);
    return SX_OK;
}

sx_status sx_tensor_momentum_step(sx_tensor *p, sx_tensor *v, const sx_tensor *g, double lr,
                                  double mu, bool nesterov)
{
    const char *who = "sx_tensor_momentum_step";
    SX_TRY(sx__check_tensor(who, "p", p));
    SX_TRY(check_like(who, "v", p, v));
    SX_TRY(check_like(who, "g", p, g));
    upd_args u = {
        .p = p->data, .s1 = v->data, .g = g->data, .lr = lr, .c = {mu}, .nesterov = nesterov};
    upd_run(UPD_MOMENTUM, p, &u);
    return SX_OK;
}

sx_status sx_tensor_adagrad_step(sx_tensor *p, sx_tensor *a, const sx_tensor *g, double lr,
                                 double eps)
{
    const char *who = "sx_tensor_adagrad_step";
    SX_TRY(sx__check_tensor(who, "p", p));
    SX_TRY(check_like(who, "a", p, a));
    SX_TRY(check_like(who, "g", p, g));
    upd_args u = {.p = p->data, .s1 = a->data, .g = g->data, .lr = lr, .c = {eps}};
    upd_run(UPD_ADAGRAD, p, &u);
    return SX_OK;
}

sx_status sx_tensor_rmsprop_step(sx_tensor *p, sx_tensor *a, const sx_tensor *g, double lr,
                                 double rho, double c, double eps)
{
    const char *who = "sx_tensor_rmsprop_step";
    SX_TRY(sx__check_tensor(who, "p", p));
    SX_TRY(check_like(who, "a", p, a));
    SX_TRY(check_like(who, "g", p, g));
    upd_args u = {.p = p->data, .s1 = a->data, .g = g->data, .lr = lr, .c = {rho, c, eps}};
    upd_run(UPD_RMSPROP, p, &u);
    return SX_OK;
}

sx_status sx_tensor_adam_step(sx_tensor *p, sx_tensor *m, sx_tensor *v, const sx_tensor *g,
                              double lr, double b1, double c1, double b2, double c2, double eps)
{
    const char *who = "sx_tensor_adam_step";
    SX_TRY(sx__check_tensor(who, "p", p));
    SX_TRY(check_like(who, "m", p, m));
    SX_TRY(check_like(who, "v", p, v));
    SX_TRY(check_like(who, "g", p, g));
    upd_args u = {.p = p->data,
                  .s1 = m->data,
                  .s2 = v->data,
                  .g = g->data,
                  .lr = lr,
                  .c = {b1, c1, b2, c2, eps}};
    upd_run(UPD_ADAM, p, &u);
    return SX_OK;
}

sx_status sx_tensor_adamw_step(sx_tensor *p, sx_tensor *m, sx_tensor *v, sx_tensor *vmax,
                               const sx_tensor *g, double step_size, double bc2_sqrt, double keep,
                               double b1, double c1, double b2, double c2, double eps)
{
    const char *who = "sx_tensor_adamw_step";
    SX_TRY(sx__check_tensor(who, "p", p));
    SX_TRY(check_like(who, "m", p, m));
    SX_TRY(check_like(who, "v", p, v));
    if (vmax != NULL)
        SX_TRY(check_like(who, "vmax", p, vmax));
    SX_TRY(check_like(who, "g", p, g));
    upd_args u = {.p = p->data,
                  .s1 = m->data,
                  .s2 = v->data,
                  .s3 = vmax != NULL ? vmax->data : NULL,
                  .g = g->data,
                  .lr = step_size,
                  .c = {b1, c1, b2, c2, eps, bc2_sqrt, keep}};
    upd_run(vmax != NULL ? UPD_AMSGRAD : UPD_ADAMW, p, &u);
    return SX_OK;
}

sx_status sx_tensor_rmsprop_centered_step(sx_tensor *p, sx_tensor *a, sx_tensor *ga,
                                          const sx_tensor *g, double lr, double rho, double c,
                                          double eps)
{
    const char *who = "sx_tensor_rmsprop_centered_step";
    SX_TRY(sx__check_tensor(who, "p", p));
    SX_TRY(check_like(who, "a", p, a));
    SX_TRY(check_like(who, "ga", p, ga));
    SX_TRY(check_like(who, "g", p, g));
    upd_args u = {
        .p = p->data, .s1 = a->data, .s2 = ga->data, .g = g->data, .lr = lr, .c = {rho, c, eps}};
    upd_run(UPD_RMSPROP_CENTERED, p, &u);
    return SX_OK;
}

sx_status sx_tensor_momentum_dampened_step(sx_tensor *p, sx_tensor *v, const sx_tensor *g,
                                           double lr, double damp, double mu, bool nesterov)
{
    const char *who = "sx_tensor_momentum_dampened_step";
    SX_TRY(sx__check_tensor(who, "p", p));
    SX_TRY(check_like(who, "v", p, v));
    SX_TRY(check_like(who, "g", p, g));
    upd_args u = {
        .p = p->data, .s1 = v->data, .g = g->data, .lr = lr, .c = {mu, damp}, .nesterov = nesterov};
    upd_run(UPD_MOMENTUM_DAMPENED, p, &u);
    return SX_OK;
}
