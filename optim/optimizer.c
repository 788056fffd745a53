/* optimizer.c: the optimisers as graph builders. Each writes its update in one canonical form
 * (the forms documented in sx_optim.h and recognised by cgraph's update fusion): scalar
 * coefficients are rank-0 constants on the left of a product, g*g is mul(g, g). */
#include "sx_optim.h"

#include <stdio.h>
#include <string.h>

static const char *const names[SX_OPTIM_COUNT] = {"sgd",     "momentum", "nesterov",
                                                  "adagrad", "rmsprop",  "adam"};

const char *sx_optim_name(sx_optim_kind k)
{
    return (unsigned)k < SX_OPTIM_COUNT ? names[k] : "bad-optimiser";
}

sx_status sx_optim_parse(const char *s, sx_optim_kind *out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "sx_optim_parse: out is NULL");
    for (int k = 0; s != NULL && k < SX_OPTIM_COUNT; k++)
        if (strcmp(s, names[k]) == 0) {
            *out = (sx_optim_kind)k;
            return SX_OK;
        }
    return sx_error(SX_E_ARG,
                    "unknown optimiser '%s' (want sgd, momentum, nesterov, adagrad, rmsprop or "
                    "adam)",
                    s ? s : "(null)");
}

sx_optim_params sx_optim_params_default(sx_optim_kind kind)
{
    sx_optim_params p = {kind, 0.01, 0.9, 0.99, 0.9, 0.999, 1e-8};
    if (kind == SX_OPTIM_ADAM)
        p.lr = 0.001;
    if (kind == SX_OPTIM_ADAGRAD)
        p.eps = 1e-10;
    return p;
}

int sx_optim_n_states(sx_optim_kind k)
{
    return k == SX_OPTIM_SGD ? 0 : k == SX_OPTIM_ADAM ? 2 : (unsigned)k < SX_OPTIM_COUNT ? 1 : 0;
}

const char *sx_optim_state_name(sx_optim_kind k, int i)
{
    switch (k) {
    case SX_OPTIM_MOMENTUM:
    case SX_OPTIM_NESTEROV:
        return i == 0 ? "velocity" : "";
    case SX_OPTIM_ADAGRAD:
        return i == 0 ? "sum_sq" : "";
    case SX_OPTIM_RMSPROP:
        return i == 0 ? "mean_sq" : "";
    case SX_OPTIM_ADAM:
        return i == 0 ? "m" : i == 1 ? "v" : "";
    default:
        return "";
    }
}

/* State i: the caller's, or a new zero-initialised parameter shaped like p, "<p>.<name>".
 * NULL on failure, with *err the status when the graph does not hold it (an allocation). */
static sx_cg_node *state(sx_cg_graph *g, sx_cg_node *p, sx_cg_node *const *given, sx_optim_kind k,
                         int i, sx_status *err)
{
    if (given != NULL)
        return given[i];
    const char *what = sx_optim_state_name(k, i);
    sx_tensor *z = NULL;
    sx_status st =
        sx_tensor_zeros(sx_cg_node_dtype(p), sx_cg_node_rank(p), sx_cg_node_shape(p), &z);
    if (st != SX_OK) {
        *err = st;
        return NULL;
    }
    char name[256];
    snprintf(name, sizeof name, "%s.%s", sx_cg_node_name(p), what);
    sx_cg_node *s = sx_cg_param(g, name, z);
    sx_tensor_free(z);
    return s;
}

/* p <- p - lr * step */
static sx_cg_node *descend(sx_cg_graph *g, sx_cg_node *p, sx_cg_node *lr, sx_cg_node *step)
{
    return sx_cg_assign(g, p, sx_cg_sub(g, p, sx_cg_mul(g, lr, step)));
}

/* g / (sqrt(a) + eps) */
static sx_cg_node *scaled(sx_cg_graph *g, sx_cg_node *num, sx_cg_node *a, double eps)
{
    return sx_cg_div(g, num, sx_cg_add(g, sx_cg_sqrt(g, a), sx_cg_scalar_like(g, a, eps)));
}

static sx_status check(const sx_optim_params *p, sx_cg_node *param, sx_cg_node *grad,
                       sx_cg_node *lr, sx_cg_node *step)
{
    const char *who = "sx_optim_update";
    if (p == NULL || param == NULL || grad == NULL || lr == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument", who);
    if ((unsigned)p->kind >= SX_OPTIM_COUNT)
        return sx_error(SX_E_ARG, "%s: unknown optimiser %d", who, (int)p->kind);
    if (sx_cg_node_op(param) != SX_OP_PARAM)
        return sx_error(SX_E_ARG, "%s: node %lld is a %s, not a parameter", who,
                        (long long)sx_cg_node_id(param), sx_cg_op_name(sx_cg_node_op(param)));
    if (sx_cg_node_size(lr) != 1 || (step != NULL && sx_cg_node_size(step) != 1))
        return sx_error(SX_E_SHAPE, "%s: lr and step must hold one element", who);
    if (p->kind == SX_OPTIM_ADAM && step == NULL)
        return sx_error(SX_E_ARG, "%s: adam needs the step node for its bias correction", who);
    if (!(p->eps >= 0) || !(p->momentum >= 0 && p->momentum < 1) || !(p->rho >= 0 && p->rho < 1) ||
        !(p->beta1 >= 0 && p->beta1 < 1) || !(p->beta2 >= 0 && p->beta2 < 1))
        return sx_error(SX_E_ARG, "%s: hyper-parameter out of range", who);
    return SX_OK;
}

sx_status sx_optim_update(sx_cg_graph *g, const sx_optim_params *p, sx_cg_node *param,
                          sx_cg_node *grad, sx_cg_node *lr, sx_cg_node *step,
                          sx_cg_node *const *states, sx_cg_node **updates, int *n)
{
    if (g == NULL || updates == NULL || n == NULL)
        return sx_error(SX_E_ARG, "sx_optim_update: NULL argument");
    *n = 0;
    SX_TRY(check(p, param, grad, lr, step));
    for (int i = 0; states != NULL && i < sx_optim_n_states(p->kind); i++)
        if (states[i] == NULL)
            return sx_error(SX_E_ARG, "sx_optim_update: state %d (%s) is NULL", i,
                            sx_optim_state_name(p->kind, i));
    /* the states first: a failed one stops before any node is built on it */
    sx_cg_node *st[2] = {NULL, NULL};
    for (int i = 0; i < sx_optim_n_states(p->kind); i++) {
        sx_status err = SX_OK;
        if ((st[i] = state(g, param, states, p->kind, i, &err)) == NULL) {
            sx_status gs = sx_cg_graph_status(g);
            return err != SX_OK  ? err
                   : gs != SX_OK ? gs
                                 : sx_error(SX_E_STATE, "sx_optim_update: state %d failed", i);
        }
    }
    sx_cg_node *out[3] = {NULL, NULL, NULL};
    int k = 0;
    switch (p->kind) {
    case SX_OPTIM_SGD:
        out[k++] = descend(g, param, lr, grad);
        break;
    case SX_OPTIM_MOMENTUM:
    case SX_OPTIM_NESTEROV: {
        sx_cg_node *v = st[0];
        sx_cg_node *mu = sx_cg_scalar_like(g, grad, p->momentum);
        sx_cg_node *vn = sx_cg_add(g, sx_cg_mul(g, mu, v), grad);
        out[k++] = sx_cg_assign(g, v, vn);
        sx_cg_node *dir =
            p->kind == SX_OPTIM_NESTEROV ? sx_cg_add(g, grad, sx_cg_mul(g, mu, vn)) : vn;
        out[k++] = descend(g, param, lr, dir);
        break;
    }
    case SX_OPTIM_ADAGRAD: {
        sx_cg_node *a = st[0];
        sx_cg_node *an = sx_cg_add(g, a, sx_cg_mul(g, grad, grad));
        out[k++] = sx_cg_assign(g, a, an);
        out[k++] = descend(g, param, lr, scaled(g, grad, an, p->eps));
        break;
    }
    case SX_OPTIM_RMSPROP: {
        sx_cg_node *a = st[0];
        sx_cg_node *an = sx_cg_add(
            g, sx_cg_mul(g, sx_cg_scalar_like(g, grad, p->rho), a),
            sx_cg_mul(g, sx_cg_scalar_like(g, grad, 1 - p->rho), sx_cg_mul(g, grad, grad)));
        out[k++] = sx_cg_assign(g, a, an);
        out[k++] = descend(g, param, lr, scaled(g, grad, an, p->eps));
        break;
    }
    case SX_OPTIM_ADAM: {
        sx_cg_node *m = st[0];
        sx_cg_node *v = st[1];
        sx_cg_node *mn = sx_cg_add(g, sx_cg_mul(g, sx_cg_scalar_like(g, grad, p->beta1), m),
                                   sx_cg_mul(g, sx_cg_scalar_like(g, grad, 1 - p->beta1), grad));
        sx_cg_node *vn = sx_cg_add(
            g, sx_cg_mul(g, sx_cg_scalar_like(g, grad, p->beta2), v),
            sx_cg_mul(g, sx_cg_scalar_like(g, grad, 1 - p->beta2), sx_cg_mul(g, grad, grad)));
        /* lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t) */
        sx_cg_node *one = sx_cg_scalar_like(g, lr, 1.0);
        sx_cg_node *c2 = sx_cg_sqrt(
            g, sx_cg_sub(g, one, sx_cg_pow(g, sx_cg_scalar_like(g, lr, p->beta2), step)));
        sx_cg_node *c1 = sx_cg_sub(g, one, sx_cg_pow(g, sx_cg_scalar_like(g, lr, p->beta1), step));
        sx_cg_node *lrt = sx_cg_mul(g, lr, sx_cg_div(g, c2, c1));
        out[k++] = sx_cg_assign(g, m, mn);
        out[k++] = sx_cg_assign(g, v, vn);
        out[k++] = descend(g, param, lrt, scaled(g, mn, vn, p->eps));
        break;
    }
    case SX_OPTIM_COUNT:
        break;
    }
    for (int i = 0; i < k; i++)
        if (out[i] == NULL) {
            sx_status s = sx_cg_graph_status(g);
            return s != SX_OK ? s : sx_error(SX_E_STATE, "sx_optim_update: a node failed");
        }
    for (int i = 0; i < k; i++)
        updates[i] = out[i];
    *n = k;
    return SX_OK;
}
