/* testutil.c: shared helpers of the Criterion suites (see testutil.h). */
#include "testutil.h"

#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sx_tensor *tu_rand(sx_rng *rng, sx_dtype dt, int rank, const int64_t *shape, double lo, double hi)
{
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_new(dt, rank, shape, &t), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_rand_uniform(t, rng, lo, hi), SX_OK, "%s", sx_last_error());
    return t;
}

sx_tensor *tu_zeros(sx_dtype dt, int rank, const int64_t *shape)
{
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_zeros(dt, rank, shape, &t), SX_OK, "%s", sx_last_error());
    return t;
}

int tu_rand_shape(sx_rng *rng, int rmin, int rmax, int64_t dmax, int64_t *shape)
{
    int r = rmin + (int)sx_rng_below(rng, (uint64_t)(rmax - rmin + 1));
    for (int i = 0; i < r; i++)
        shape[i] = 1 + (int64_t)sx_rng_below(rng, (uint64_t)dmax);
    return r;
}

double tu_rtol(sx_dtype dt)
{
    return dt == SX_F32 ? 1e-5 : 1e-12;
}

bool tu_close(const sx_tensor *a, const sx_tensor *b, double rtol, double atol)
{
    if (a->size != b->size) {
        cr_log_error("sizes differ: %lld vs %lld", (long long)a->size, (long long)b->size);
        return false;
    }
    for (int64_t i = 0; i < a->size; i++) {
        double x = sx_tensor_get(a, i), y = sx_tensor_get(b, i);
        if (isnan(x) && isnan(y))
            continue;
        if (x == y)
            continue;
        if (!(fabs(x - y) <= atol + rtol * fabs(y))) {
            cr_log_error("element %lld: got %.17g, want %.17g", (long long)i, x, y);
            return false;
        }
    }
    return true;
}

/* ---------------------------------------------------------------- failing allocator */

static long fail_at = -1, count, live;

static void *f_alloc(void *ctx, size_t n)
{
    (void)ctx;
    if (fail_at >= 0 && count >= fail_at)
        return NULL;
    count++;
    void *p = malloc(n);
    if (p)
        live++;
    return p;
}

static void *f_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    if (fail_at >= 0 && count >= fail_at)
        return NULL;
    count++;
    void *q = realloc(p, n);
    if (q && !p)
        live++;
    return q;
}

static void f_free(void *ctx, void *p)
{
    (void)ctx;
    if (p)
        live--;
    free(p);
}

void tu_fail_after(long k)
{
    fail_at = k;
    count = 0;
    live = 0;
    sx_allocator a = {f_alloc, f_realloc, f_free, NULL};
    sx_allocator_set(&a);
}

void tu_fail_reset(void)
{
    fail_at = -1;
    sx_allocator_set(NULL);
}

long tu_alloc_count(void)
{
    return count;
}

long tu_live_allocs(void)
{
    return live;
}

void tu_mnist_dir(char *buf, size_t n)
{
    const char *env = getenv("SX_MNIST_DIR");
    if (env != NULL && env[0] != '\0') {
        snprintf(buf, n, "%s", env);
        return;
    }
    char file[1024]; /* this file is tests/testutil.c: the root is two levels up */
    snprintf(file, sizeof file, "%s", __FILE__);
    snprintf(buf, n, "%s/data/mnist", dirname(dirname(file)));
}

bool tu_emulated(void)
{
    const char *env = getenv("SX_TEST_EMULATED");
    return env != NULL && strcmp(env, "1") == 0;
}

/* ---------------------------------------------------------------- optimiser reference */

static sx_cg_node *ref_state(sx_cg_graph *g, const sx_optim_params *p, sx_cg_node *param,
                             sx_cg_node *const *states, int i)
{
    if (states != NULL)
        return states[i];
    sx_tensor *z =
        tu_zeros(sx_cg_node_dtype(param), sx_cg_node_rank(param), sx_cg_node_shape(param));
    char name[256];
    snprintf(name, sizeof name, "%s.%s", sx_cg_node_name(param), sx_optim_state_name(p->kind, i));
    sx_cg_node *s = sx_cg_param(g, name, z);
    sx_tensor_free(z);
    return s;
}

/* p <- p - lr * dir */
static sx_cg_node *ref_descend(sx_cg_graph *g, sx_cg_node *p, sx_cg_node *lr, sx_cg_node *dir)
{
    return sx_cg_assign(g, p, sx_cg_sub(g, p, sx_cg_mul(g, lr, dir)));
}

/* num / (sqrt(a) + eps) */
static sx_cg_node *ref_scaled(sx_cg_graph *g, sx_cg_node *num, sx_cg_node *a, double eps)
{
    return sx_cg_div(g, num, sx_cg_add(g, sx_cg_sqrt(g, a), sx_cg_scalar_like(g, a, eps)));
}

/* b x + c y, with b and c rank-0 constants of y's dtype */
static sx_cg_node *ref_average(sx_cg_graph *g, double b, sx_cg_node *x, double c, sx_cg_node *y)
{
    return sx_cg_add(g, sx_cg_mul(g, sx_cg_scalar_like(g, y, b), x),
                     sx_cg_mul(g, sx_cg_scalar_like(g, y, c), y));
}

int tu_optim_reference(sx_cg_graph *g, const sx_optim_params *p, sx_cg_node *param,
                       sx_cg_node *grad, sx_cg_node *lr, sx_cg_node *step,
                       sx_cg_node *const *states, sx_cg_node **outs)
{
    sx_cg_node *s0 = sx_optim_n_states(p->kind) > 0 ? ref_state(g, p, param, states, 0) : NULL;
    sx_cg_node *s1 = sx_optim_n_states(p->kind) > 1 ? ref_state(g, p, param, states, 1) : NULL;
    sx_cg_node *s2 = sx_optim_n_states(p->kind) > 2 ? ref_state(g, p, param, states, 2) : NULL;
    int k = 0;
    /* weight decay: L2 in the gradient, but AdamW's, decoupled (below) */
    if (p->weight_decay != 0 && p->kind != SX_OPTIM_ADAMW)
        grad = sx_cg_add(g, grad, sx_cg_mul(g, sx_cg_scalar_like(g, grad, p->weight_decay), param));
    switch (p->kind) {
    case SX_OPTIM_SGD:
        outs[k++] = ref_descend(g, param, lr, grad);
        break;
    case SX_OPTIM_MOMENTUM:
    case SX_OPTIM_NESTEROV: {
        sx_cg_node *mu = sx_cg_scalar_like(g, grad, p->momentum);
        sx_cg_node *vn = sx_cg_add(g, sx_cg_mul(g, mu, s0), grad);
        if (p->dampening != 0) { /* c g, c = 1 on the first step, 1 - dampening after */
            sx_cg_node *one = sx_cg_scalar_like(g, lr, 1.0);
            sx_cg_node *c = sx_cg_sub(g, one,
                                      sx_cg_mul(g, sx_cg_scalar_like(g, lr, p->dampening),
                                                sx_cg_min(g, sx_cg_sub(g, step, one), one)));
            vn = sx_cg_add(g, sx_cg_mul(g, mu, s0), sx_cg_mul(g, c, grad));
        }
        outs[k++] = sx_cg_assign(g, s0, vn);
        sx_cg_node *dir =
            p->kind == SX_OPTIM_NESTEROV ? sx_cg_add(g, grad, sx_cg_mul(g, mu, vn)) : vn;
        outs[k++] = ref_descend(g, param, lr, dir);
        break;
    }
    case SX_OPTIM_ADAGRAD: {
        sx_cg_node *an = sx_cg_add(g, s0, sx_cg_mul(g, grad, grad));
        outs[k++] = sx_cg_assign(g, s0, an);
        outs[k++] = ref_descend(g, param, lr, ref_scaled(g, grad, an, p->eps));
        break;
    }
    case SX_OPTIM_RMSPROP: {
        sx_cg_node *an = ref_average(g, p->rho, s0, 1 - p->rho, sx_cg_mul(g, grad, grad));
        outs[k++] = sx_cg_assign(g, s0, an);
        outs[k++] = ref_descend(g, param, lr, ref_scaled(g, grad, an, p->eps));
        break;
    }
    case SX_OPTIM_RMSPROP_CENTERED: {
        sx_cg_node *an = ref_average(g, p->rho, s0, 1 - p->rho, sx_cg_mul(g, grad, grad));
        sx_cg_node *mn = ref_average(g, p->rho, s1, 1 - p->rho, grad);
        outs[k++] = sx_cg_assign(g, s0, an);
        outs[k++] = sx_cg_assign(g, s1, mn);
        sx_cg_node *var = sx_cg_sub(g, an, sx_cg_mul(g, mn, mn));
        outs[k++] = ref_descend(g, param, lr, ref_scaled(g, grad, var, p->eps));
        break;
    }
    case SX_OPTIM_RMSPROP_MOMENTUM: { /* b <- mu b + g / (sqrt(a) + eps); p <- p - lr b */
        sx_cg_node *an = ref_average(g, p->rho, s0, 1 - p->rho, sx_cg_mul(g, grad, grad));
        sx_cg_node *bn = sx_cg_add(g, sx_cg_mul(g, sx_cg_scalar_like(g, grad, p->momentum), s1),
                                   ref_scaled(g, grad, an, p->eps));
        outs[k++] = sx_cg_assign(g, s0, an);
        outs[k++] = sx_cg_assign(g, s1, bn);
        outs[k++] = ref_descend(g, param, lr, bn);
        break;
    }
    case SX_OPTIM_ADAM:
    case SX_OPTIM_ADAMW:
    case SX_OPTIM_AMSGRAD: {
        /* PyTorch's: p <- k p - s (m / (sqrt(v) / q + eps)), s = lr / (1 - b1^t),
         * q = sqrt(1 - b2^t), k = 1 - lr wd for AdamW (else 1) */
        sx_cg_node *mn = ref_average(g, p->beta1, s0, 1 - p->beta1, grad);
        sx_cg_node *vn = ref_average(g, p->beta2, s1, 1 - p->beta2, sx_cg_mul(g, grad, grad));
        sx_cg_node *one = sx_cg_scalar_like(g, lr, 1.0);
        sx_cg_node *bc1 = sx_cg_sub(g, one, sx_cg_pow(g, sx_cg_scalar_like(g, lr, p->beta1), step));
        sx_cg_node *bc2 = sx_cg_sub(g, one, sx_cg_pow(g, sx_cg_scalar_like(g, lr, p->beta2), step));
        sx_cg_node *keep =
            p->kind == SX_OPTIM_ADAMW
                ? sx_cg_sub(g, one, sx_cg_mul(g, lr, sx_cg_scalar_like(g, lr, p->weight_decay)))
                : one;
        outs[k++] = sx_cg_assign(g, s0, mn);
        outs[k++] = sx_cg_assign(g, s1, vn);
        sx_cg_node *vd = vn;
        if (p->kind == SX_OPTIM_AMSGRAD) {
            vd = sx_cg_max(g, s2, vn);
            outs[k++] = sx_cg_assign(g, s2, vd);
        }
        sx_cg_node *den = sx_cg_add(g, sx_cg_div(g, sx_cg_sqrt(g, vd), sx_cg_sqrt(g, bc2)),
                                    sx_cg_scalar_like(g, vn, p->eps));
        sx_cg_node *pk = sx_cg_mul(g, keep, param);
        outs[k++] = sx_cg_assign(
            g, param, sx_cg_sub(g, pk, sx_cg_mul(g, sx_cg_div(g, lr, bc1), sx_cg_div(g, mn, den))));
        break;
    }
    case SX_OPTIM_ADAM_KERAS: {
        sx_cg_node *mn = ref_average(g, p->beta1, s0, 1 - p->beta1, grad);
        sx_cg_node *vn = ref_average(g, p->beta2, s1, 1 - p->beta2, sx_cg_mul(g, grad, grad));
        /* lr_t = lr * (sqrt(1 - b2^t) / (1 - b1^t)) */
        sx_cg_node *one = sx_cg_scalar_like(g, lr, 1.0);
        sx_cg_node *c2 = sx_cg_sqrt(
            g, sx_cg_sub(g, one, sx_cg_pow(g, sx_cg_scalar_like(g, lr, p->beta2), step)));
        sx_cg_node *c1 = sx_cg_sub(g, one, sx_cg_pow(g, sx_cg_scalar_like(g, lr, p->beta1), step));
        sx_cg_node *lrt = sx_cg_mul(g, lr, sx_cg_div(g, c2, c1));
        outs[k++] = sx_cg_assign(g, s0, mn);
        outs[k++] = sx_cg_assign(g, s1, vn);
        outs[k++] = ref_descend(g, param, lrt, ref_scaled(g, mn, vn, p->eps));
        break;
    }
    case SX_OPTIM_COUNT:
        cr_assert_fail("tu_optim_reference: not an optimiser");
    }
    for (int i = 0; i < k; i++)
        cr_assert_not_null(outs[i], "tu_optim_reference: %s", sx_last_error());
    return k;
}
