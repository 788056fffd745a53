/* update.c: optimiser steps fused into one pass over memory (the optimiser-update fusion of
 * cgraph replaces each optimiser's update subgraph with one of these). Each loop does the same
 * operations in the same order as the unfused graph, so results agree bit for bit; the gain is
 * one read and one write of each array instead of one per operation. */
#include "tensor_impl.h"

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

#define STEP_LOOP(T, BODY)                                                                         \
    do {                                                                                           \
        int64_t n_ = p->size;                                                                      \
        _Pragma("omp parallel for simd if (n_ >= SX_OMP_MIN)") for (int64_t i = 0; i < n_; i++)    \
        {                                                                                          \
            BODY;                                                                                  \
        }                                                                                          \
    } while (0)

sx_status sx_tensor_sgd_step(sx_tensor *p, const sx_tensor *g, double lr)
{
    const char *who = "sx_tensor_sgd_step";
    SX_TRY(sx__check_tensor(who, "p", p));
    SX_TRY(check_like(who, "g", p, g));
#define SGD(T)                                                                                     \
    T *pp = p->data;                                                                               \
    const T *gp = g->data;                                                                         \
    const T l = (T)lr;                                                                             \
    STEP_LOOP(T, pp[i] = pp[i] - l * gp[i])
    SX_DISPATCH(p->dtype, SGD);
#undef SGD
    return SX_OK;
}

sx_status sx_tensor_momentum_step(sx_tensor *p, sx_tensor *v, const sx_tensor *g, double lr,
                                  double mu, bool nesterov)
{
    const char *who = "sx_tensor_momentum_step";
    SX_TRY(sx__check_tensor(who, "p", p));
    SX_TRY(check_like(who, "v", p, v));
    SX_TRY(check_like(who, "g", p, g));
#define MOMENTUM(T)                                                                                \
    T *pp = p->data, *vp = v->data;                                                                \
    const T *gp = g->data;                                                                         \
    const T l = (T)lr, m = (T)mu;                                                                  \
    if (nesterov)                                                                                  \
        STEP_LOOP(T, {                                                                             \
            T vn = m * vp[i] + gp[i];                                                              \
            vp[i] = vn;                                                                            \
            pp[i] = pp[i] - l * (gp[i] + m * vn);                                                  \
        });                                                                                        \
    else                                                                                           \
        STEP_LOOP(T, {                                                                             \
            T vn = m * vp[i] + gp[i];                                                              \
            vp[i] = vn;                                                                            \
            pp[i] = pp[i] - l * vn;                                                                \
        })
    SX_DISPATCH(p->dtype, MOMENTUM);
#undef MOMENTUM
    return SX_OK;
}

sx_status sx_tensor_adagrad_step(sx_tensor *p, sx_tensor *a, const sx_tensor *g, double lr,
                                 double eps)
{
    const char *who = "sx_tensor_adagrad_step";
    SX_TRY(sx__check_tensor(who, "p", p));
    SX_TRY(check_like(who, "a", p, a));
    SX_TRY(check_like(who, "g", p, g));
#define ADAGRAD(T)                                                                                 \
    T *pp = p->data, *ap = a->data;                                                                \
    const T *gp = g->data;                                                                         \
    const T l = (T)lr, e = (T)eps;                                                                 \
    STEP_LOOP(T, {                                                                                 \
        T gi = gp[i];                                                                              \
        T an = ap[i] + gi * gi;                                                                    \
        ap[i] = an;                                                                                \
        pp[i] = pp[i] - l * (gi / (sqrt(an) + e));                                                 \
    })
    SX_DISPATCH(p->dtype, ADAGRAD);
#undef ADAGRAD
    return SX_OK;
}

sx_status sx_tensor_rmsprop_step(sx_tensor *p, sx_tensor *a, const sx_tensor *g, double lr,
                                 double rho, double c, double eps)
{
    const char *who = "sx_tensor_rmsprop_step";
    SX_TRY(sx__check_tensor(who, "p", p));
    SX_TRY(check_like(who, "a", p, a));
    SX_TRY(check_like(who, "g", p, g));
#define RMSPROP(T)                                                                                 \
    T *pp = p->data, *ap = a->data;                                                                \
    const T *gp = g->data;                                                                         \
    const T l = (T)lr, r = (T)rho, cc = (T)c, e = (T)eps;                                          \
    STEP_LOOP(T, {                                                                                 \
        T gi = gp[i];                                                                              \
        T an = r * ap[i] + cc * (gi * gi);                                                         \
        ap[i] = an;                                                                                \
        pp[i] = pp[i] - l * (gi / (sqrt(an) + e));                                                 \
    })
    SX_DISPATCH(p->dtype, RMSPROP);
#undef RMSPROP
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
#define ADAM(T)                                                                                    \
    T *pp = p->data, *mp = m->data, *vp = v->data;                                                 \
    const T *gp = g->data;                                                                         \
    const T l = (T)lr, B1 = (T)b1, C1 = (T)c1, B2 = (T)b2, C2 = (T)c2, e = (T)eps;                 \
    STEP_LOOP(T, {                                                                                 \
        T gi = gp[i];                                                                              \
        T mn = B1 * mp[i] + C1 * gi;                                                               \
        T vn = B2 * vp[i] + C2 * (gi * gi);                                                        \
        mp[i] = mn;                                                                                \
        vp[i] = vn;                                                                                \
        pp[i] = pp[i] - l * (mn / (sqrt(vn) + e));                                                 \
    })
    SX_DISPATCH(p->dtype, ADAM);
#undef ADAM
    return SX_OK;
}
