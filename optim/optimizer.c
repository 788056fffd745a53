/* optimizer.c: the optimisers as graph builders. Each optimiser is one row of a table: its
 * name, its state tensors, and its formula, a few lines of element-wise graph ops giving the new
 * states and the new parameter, each assigned in place. Nothing here is special to the compiler:
 * element-wise fusion turns the assigns of one step into a single pass over memory that writes
 * the parameter and its states (fused_update, cgraph/opt_fuse.c). */
#include "sx_optim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { OPTIM_MAX_STATES = 3 };

/* What a formula reads: the hyper-parameters, the graph, the parameter p, its states st[], the
 * gradient g, the rate lr and the step; it writes the new states nst[] and the new parameter. */
typedef struct optim_in {
    sx_cg_graph *g;
    const sx_optim_params *hp;
    sx_cg_node *p, *gr, *lr, *step;
    sx_cg_node *const *st;
} optim_in;

typedef sx_cg_node *(*formula_fn)(const optim_in *in, sx_cg_node **nst);

/* One optimiser: its name, states and formula; `needs_step` when the formula reads the step. */
typedef struct optim_row {
    const char *name;
    int n_states;
    const char *states[OPTIM_MAX_STATES];
    formula_fn formula;
    bool needs_step;
} optim_row;

/* A coefficient of the graph's dtype (a f32 graph steps with (float)c). */
static sx_cg_node *k_(const optim_in *in, double c)
{
    return sx_cg_scalar_like(in->g, in->lr, c);
}

#define ADD(a, b) sx_cg_add(in->g, a, b)
#define SUB(a, b) sx_cg_sub(in->g, a, b)
#define MUL(a, b) sx_cg_mul(in->g, a, b)
#define DIV(a, b) sx_cg_div(in->g, a, b)
#define SQRT(a) sx_cg_sqrt(in->g, a)
#define K(c) k_(in, c)

/* p <- p - lr g */
static sx_cg_node *f_sgd(const optim_in *in, sx_cg_node **nst)
{
    (void)nst;
    return SUB(in->p, MUL(in->lr, in->gr));
}

/* v <- mu v + c g (c = 1, or PyTorch's dampening: 1 on the first step, 1 - d after);
 * p <- p - lr v, or (nesterov) p <- p - lr (g + mu v) */
static sx_cg_node *f_momentum(const optim_in *in, sx_cg_node **nst)
{
    const sx_optim_params *hp = in->hp;
    sx_cg_node *mu = K(hp->momentum), *cg = in->gr;
    if (hp->dampening != 0) {
        sx_cg_node *later = sx_cg_min(in->g, SUB(in->step, K(1)), K(1));
        cg = MUL(SUB(K(1), MUL(K(hp->dampening), later)), in->gr);
    }
    sx_cg_node *v = nst[0] = ADD(MUL(mu, in->st[0]), cg);
    if (hp->kind == SX_OPTIM_NESTEROV)
        return SUB(in->p, MUL(in->lr, ADD(in->gr, MUL(mu, v))));
    return SUB(in->p, MUL(in->lr, v));
}

/* a <- a + g g;  p <- p - lr (g / (sqrt(a) + eps)) */
static sx_cg_node *f_adagrad(const optim_in *in, sx_cg_node **nst)
{
    sx_cg_node *g = in->gr;
    sx_cg_node *a = nst[0] = ADD(in->st[0], MUL(g, g));
    return SUB(in->p, MUL(in->lr, DIV(g, ADD(SQRT(a), K(in->hp->eps)))));
}

/* a <- rho a + (1 - rho) (g g), and (centered) ga <- rho ga + (1 - rho) g;
 * p <- p - lr (g / (sqrt(a) + eps)), centered: sqrt(a - ga ga);
 * with momentum mu: b <- mu b + g / (sqrt(a) + eps);  p <- p - lr b */
static sx_cg_node *f_rmsprop(const optim_in *in, sx_cg_node **nst)
{
    const sx_optim_params *hp = in->hp;
    sx_cg_node *g = in->gr, *rho = K(hp->rho), *c = K(1 - hp->rho);
    sx_cg_node *a = nst[0] = ADD(MUL(rho, in->st[0]), MUL(c, MUL(g, g)));
    sx_cg_node *var = a;
    if (hp->kind == SX_OPTIM_RMSPROP_CENTERED) {
        sx_cg_node *ga = nst[1] = ADD(MUL(rho, in->st[1]), MUL(c, g));
        var = SUB(a, MUL(ga, ga));
    }
    sx_cg_node *step = DIV(g, ADD(SQRT(var), K(hp->eps)));
    if (hp->kind == SX_OPTIM_RMSPROP_MOMENTUM)
        step = nst[1] = ADD(MUL(K(hp->momentum), in->st[1]), step);
    return SUB(in->p, MUL(in->lr, step));
}

/* 1 - beta^t, in the graph (the step is an input: it follows it in a compiled graph) */
static sx_cg_node *bias(const optim_in *in, double beta)
{
    return SUB(K(1), sx_cg_pow(in->g, K(beta), in->step));
}

/* m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) (g g) */
static void moments(const optim_in *in, sx_cg_node **nst)
{
    const sx_optim_params *hp = in->hp;
    sx_cg_node *g = in->gr;
    nst[0] = ADD(MUL(K(hp->beta1), in->st[0]), MUL(K(1 - hp->beta1), g));
    nst[1] = ADD(MUL(K(hp->beta2), in->st[1]), MUL(K(1 - hp->beta2), MUL(g, g)));
}

/* PyTorch's Adam, AdamW and AMSGrad: p <- k p (AdamW: k = 1 - lr wd);  vmax <- max(vmax, v)
 * (AMSGrad, read below in place of v);  p <- p - s (m / (sqrt(v) / q + eps)),
 * s = lr / (1 - b1^t), q = sqrt(1 - b2^t) */
static sx_cg_node *f_adam(const optim_in *in, sx_cg_node **nst)
{
    const sx_optim_params *hp = in->hp;
    sx_cg_node *s = DIV(in->lr, bias(in, hp->beta1)), *q = SQRT(bias(in, hp->beta2));
    sx_cg_node *p = in->p;
    if (hp->kind == SX_OPTIM_ADAMW)
        p = MUL(SUB(K(1), MUL(in->lr, K(hp->weight_decay))), p);
    moments(in, nst);
    sx_cg_node *v = nst[1];
    if (hp->kind == SX_OPTIM_AMSGRAD)
        v = nst[2] = sx_cg_max(in->g, in->st[2], v);
    return SUB(p, MUL(s, DIV(nst[0], ADD(DIV(SQRT(v), q), K(hp->eps)))));
}

/* Keras's Adam: p <- p - lr_t (m / (sqrt(v) + eps)),  lr_t = lr (sqrt(1 - b2^t) / (1 - b1^t)) */
static sx_cg_node *f_adam_keras(const optim_in *in, sx_cg_node **nst)
{
    const sx_optim_params *hp = in->hp;
    sx_cg_node *lr_t = MUL(in->lr, DIV(SQRT(bias(in, hp->beta2)), bias(in, hp->beta1)));
    moments(in, nst);
    return SUB(in->p, MUL(lr_t, DIV(nst[0], ADD(SQRT(nst[1]), K(hp->eps)))));
}

#undef ADD
#undef SUB
#undef MUL
#undef DIV
#undef SQRT
#undef K

static const optim_row rows[SX_OPTIM_COUNT] = {
    [SX_OPTIM_SGD] = {"sgd", 0, {NULL, NULL, NULL}, f_sgd, false},
    [SX_OPTIM_MOMENTUM] = {"momentum", 1, {"velocity", NULL, NULL}, f_momentum, false},
    [SX_OPTIM_NESTEROV] = {"nesterov", 1, {"velocity", NULL, NULL}, f_momentum, false},
    [SX_OPTIM_ADAGRAD] = {"adagrad", 1, {"sum_sq", NULL, NULL}, f_adagrad, false},
    [SX_OPTIM_RMSPROP] = {"rmsprop", 1, {"mean_sq", NULL, NULL}, f_rmsprop, false},
    [SX_OPTIM_ADAM] = {"adam", 2, {"m", "v", NULL}, f_adam, true},
    [SX_OPTIM_ADAMW] = {"adamw", 2, {"m", "v", NULL}, f_adam, true},
    [SX_OPTIM_AMSGRAD] = {"amsgrad", 3, {"m", "v", "v_max"}, f_adam, true},
    [SX_OPTIM_RMSPROP_CENTERED] =
        {"rmsprop_centered", 2, {"mean_sq", "mean_grad", NULL}, f_rmsprop, false},
    [SX_OPTIM_ADAM_KERAS] = {"adam_keras", 2, {"m", "v", NULL}, f_adam_keras, true},
    [SX_OPTIM_RMSPROP_MOMENTUM] =
        {"rmsprop_momentum", 2, {"mean_sq", "momentum_buffer", NULL}, f_rmsprop, false},
};

/* The row that p's update uses, and whether it reads the step (dampening does). */
static const optim_row *row_of(const sx_optim_params *p)
{
    return &rows[p->kind];
}

static bool needs_step(const sx_optim_params *p)
{
    return rows[p->kind].needs_step || (p->dampening != 0 && p->kind == SX_OPTIM_MOMENTUM);
}

const char *sx_optim_name(sx_optim_kind k)
{
    return (unsigned)k < SX_OPTIM_COUNT ? rows[k].name : "bad-optimiser";
}

sx_status sx_optim_parse(const char *s, sx_optim_kind *out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "sx_optim_parse: out is NULL");
    for (int k = 0; s != NULL && k < SX_OPTIM_COUNT; k++)
        if (strcmp(s, rows[k].name) == 0) {
            *out = (sx_optim_kind)k;
            return SX_OK;
        }
    return sx_error(SX_E_ARG,
                    "unknown optimiser '%s' (want sgd, momentum, nesterov, adagrad, rmsprop, "
                    "rmsprop_centered, rmsprop_momentum, adam, adamw, amsgrad or adam_keras)",
                    s ? s : "(null)");
}

sx_optim_params sx_optim_params_default(sx_optim_kind kind)
{
    sx_optim_params p = {kind, 0.01, 0.9, 0.99, 0.9, 0.999, 1e-8, 0, 0};
    if (kind == SX_OPTIM_ADAM || kind == SX_OPTIM_ADAMW || kind == SX_OPTIM_AMSGRAD ||
        kind == SX_OPTIM_ADAM_KERAS)
        p.lr = 0.001;
    if (kind == SX_OPTIM_ADAMW)
        p.weight_decay = 0.01;
    if (kind == SX_OPTIM_ADAGRAD)
        p.eps = 1e-10;
    return p;
}

int sx_optim_n_states(sx_optim_kind k)
{
    return (unsigned)k < SX_OPTIM_COUNT ? rows[k].n_states : 0;
}

const char *sx_optim_state_name(sx_optim_kind k, int i)
{
    if ((unsigned)k >= SX_OPTIM_COUNT || i < 0 || i >= rows[k].n_states)
        return "";
    return rows[k].states[i];
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
    if (needs_step(p) && step == NULL)
        return sx_error(SX_E_ARG, "%s: %s needs the step node (bias correction, dampening)", who,
                        rows[p->kind].name);
    if (!(p->eps >= 0) || !(p->momentum >= 0 && p->momentum < 1) || !(p->rho >= 0 && p->rho < 1) ||
        !(p->beta1 >= 0 && p->beta1 < 1) || !(p->beta2 >= 0 && p->beta2 < 1) ||
        !(p->weight_decay >= 0) || !isfinite(p->weight_decay) ||
        !(p->dampening >= 0 && p->dampening <= 1))
        return sx_error(SX_E_ARG,
                        "%s: hyper-parameter out of range (eps %g, momentum %g, rho %g, beta1 %g, "
                        "beta2 %g, weight_decay %g, dampening %g)",
                        who, p->eps, p->momentum, p->rho, p->beta1, p->beta2, p->weight_decay,
                        p->dampening);
    if (p->dampening != 0 && p->kind == SX_OPTIM_NESTEROV)
        return sx_error(SX_E_ARG, "%s: nesterov with dampening %g (want 0, as PyTorch)", who,
                        p->dampening);
    return SX_OK;
}

/* The status of a failed node: the graph's, or a generic one when it has none. */
static sx_status failed(sx_cg_graph *g, const char *what)
{
    sx_status s = sx_cg_graph_status(g);
    return s != SX_OK ? s : sx_error(SX_E_STATE, "sx_optim_update: %s failed", what);
}

/* The formula's new states and parameter (out: states, then the parameter), each assigned in
 * place. An eager graph computes each node as it is made and recomputes what an assign made
 * stale, so there the new values are taken as constants first: every assign writes what the
 * formula computed from the old values. */
static sx_status emit(const optim_in *in, sx_cg_node **out)
{
    sx_cg_graph *g = in->g;
    const optim_row *r = row_of(in->hp);
    sx_cg_node *val[OPTIM_MAX_STATES + 1] = {NULL};
    val[r->n_states] = r->formula(in, val);
    for (int i = 0; i <= r->n_states; i++)
        if (val[i] == NULL)
            return failed(g, "the formula");
    if (sx_cg_graph_mode(g) == SX_CG_EAGER)
        for (int i = 0; i <= r->n_states; i++)
            if ((val[i] = sx_cg_const(g, sx_cg_value(val[i]))) == NULL)
                return failed(g, "the new value");
    for (int i = 0; i <= r->n_states; i++) {
        out[i] = sx_cg_assign(g, i < r->n_states ? in->st[i] : in->p, val[i]);
        if (out[i] == NULL)
            return failed(g, "assign");
    }
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
    const optim_row *r = row_of(p);
    for (int i = 0; states != NULL && i < r->n_states; i++)
        if (states[i] == NULL)
            return sx_error(SX_E_ARG, "sx_optim_update: state %d (%s) is NULL", i, r->states[i]);
    /* the states first: a failed one stops before any node is built on it */
    sx_cg_node *st[OPTIM_MAX_STATES] = {NULL, NULL};
    for (int i = 0; i < r->n_states; i++) {
        sx_status err = SX_OK;
        if ((st[i] = state(g, param, states, p->kind, i, &err)) == NULL)
            return err != SX_OK ? err : failed(g, "a state");
    }
    /* weight decay as an L2 term in the gradient, g + wd p (PyTorch's weight_decay); AdamW's
     * is decoupled, in its rate */
    if (p->weight_decay != 0 && p->kind != SX_OPTIM_ADAMW) {
        grad = sx_cg_add(g, grad, sx_cg_mul(g, sx_cg_scalar_like(g, grad, p->weight_decay), param));
        if (grad == NULL)
            return failed(g, "the weight decay");
    }
    const optim_in in = {g, p, param, grad, lr, step, st};
    sx_cg_node *out[OPTIM_MAX_STATES + 1];
    SX_TRY(emit(&in, out));
    for (int i = 0; i <= r->n_states; i++)
        updates[i] = out[i];
    *n = r->n_states + 1;
    return SX_OK;
}
