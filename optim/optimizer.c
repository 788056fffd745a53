/* optimizer.c: the optimisers as graph builders. Each optimiser is one row of a table: its
 * name, its state tensors, the fused update op of cgraph/sx_ops.def it emits (one pass over
 * memory, sx_tensor_*_step) and how its hyper-parameters become that op's named coefficients.
 * The graph holds the update op from the start, optimised or not: nothing has to recognise it. */
#include "sx_optim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { OPTIM_MAX_STATES = 3 };

/* One optimiser: the update op it emits, with inputs (param, states..., grad, rate) where
 * rate is `lr` or, when `rate` is set, what it builds from lr and step. */
typedef struct optim_row {
    const char *name;
    sx_cg_op op;
    int n_states;
    const char *states[OPTIM_MAX_STATES];
    void (*coef)(const sx_optim_params *p, sx_dtype dt, sx_cg_attr *a);
    sx_cg_node *(*rate)(sx_cg_graph *g, const sx_optim_params *p, sx_cg_node *lr, sx_cg_node *step);
} optim_row;

/* A coefficient as the kernel of dtype dt sees it (it computes in dt): stored rounded, so the
 * attribute says exactly what runs and is the value a rank-0 constant of dt would hold. */
static double in_dtype(sx_dtype dt, double v)
{
    return dt == SX_F32 ? (double)(float)v : v;
}

static void coef_none(const sx_optim_params *p, sx_dtype dt, sx_cg_attr *a)
{
    (void)p;
    (void)dt;
    (void)a;
}

static void coef_momentum(const sx_optim_params *p, sx_dtype dt, sx_cg_attr *a)
{
    a->momentum.mu = in_dtype(dt, p->momentum);
}

static void coef_nesterov(const sx_optim_params *p, sx_dtype dt, sx_cg_attr *a)
{
    coef_momentum(p, dt, a);
    a->nesterov = true;
}

static void coef_adagrad(const sx_optim_params *p, sx_dtype dt, sx_cg_attr *a)
{
    a->adagrad.eps = in_dtype(dt, p->eps);
}

static void coef_rmsprop(const sx_optim_params *p, sx_dtype dt, sx_cg_attr *a)
{
    a->rmsprop.rho = in_dtype(dt, p->rho);
    a->rmsprop.one_minus_rho = in_dtype(dt, 1 - p->rho);
    a->rmsprop.eps = in_dtype(dt, p->eps);
}

static void coef_rmsprop_momentum(const sx_optim_params *p, sx_dtype dt, sx_cg_attr *a)
{
    a->rmsprop_momentum.rho = in_dtype(dt, p->rho);
    a->rmsprop_momentum.one_minus_rho = in_dtype(dt, 1 - p->rho);
    a->rmsprop_momentum.eps = in_dtype(dt, p->eps);
    a->rmsprop_momentum.mu = in_dtype(dt, p->momentum);
}

static void coef_adam(const sx_optim_params *p, sx_dtype dt, sx_cg_attr *a)
{
    a->adam.beta1 = in_dtype(dt, p->beta1);
    a->adam.one_minus_beta1 = in_dtype(dt, 1 - p->beta1);
    a->adam.beta2 = in_dtype(dt, p->beta2);
    a->adam.one_minus_beta2 = in_dtype(dt, 1 - p->beta2);
    a->adam.eps = in_dtype(dt, p->eps);
}

/* Adam's bias-corrected rate lr_t = lr * (sqrt(1 - b2^t) / (1 - b1^t)), one element, in the
 * graph (step is an input: the rate follows it in a compiled graph). */
static sx_cg_node *rate_adam(sx_cg_graph *g, const sx_optim_params *p, sx_cg_node *lr,
                             sx_cg_node *step)
{
    sx_cg_node *one = sx_cg_scalar_like(g, lr, 1.0);
    sx_cg_node *c2 =
        sx_cg_sqrt(g, sx_cg_sub(g, one, sx_cg_pow(g, sx_cg_scalar_like(g, lr, p->beta2), step)));
    sx_cg_node *c1 = sx_cg_sub(g, one, sx_cg_pow(g, sx_cg_scalar_like(g, lr, p->beta1), step));
    return sx_cg_mul(g, lr, sx_cg_div(g, c2, c1));
}

/* A one-element node of shape (1), for a rate vector. */
static sx_cg_node *as_1(sx_cg_graph *g, sx_cg_node *x)
{
    const int64_t one[1] = {1};
    return sx_cg_reshape(g, x, 1, one);
}

/* The rate vector (n elements) from rank-0 nodes: one concat. */
static sx_cg_node *rates(sx_cg_graph *g, int n, sx_cg_node *const *r)
{
    sx_cg_node *v[3];
    for (int i = 0; i < n; i++)
        v[i] = as_1(g, r[i]);
    return sx_cg_concat(g, n, v, 0);
}

/* PyTorch's Adam/AdamW rates (lr / (1 - b1^t), sqrt(1 - b2^t), 1 - lr wd), wd the decoupled
 * weight decay (AdamW's; 0 for Adam and AMSGrad, whose weight decay is in the gradient). */
static sx_cg_node *rate_adamw(sx_cg_graph *g, const sx_optim_params *p, sx_cg_node *lr,
                              sx_cg_node *step)
{
    sx_cg_node *one = sx_cg_scalar_like(g, lr, 1.0);
    sx_cg_node *bc1 = sx_cg_sub(g, one, sx_cg_pow(g, sx_cg_scalar_like(g, lr, p->beta1), step));
    sx_cg_node *bc2 = sx_cg_sub(g, one, sx_cg_pow(g, sx_cg_scalar_like(g, lr, p->beta2), step));
    sx_cg_node *keep =
        p->kind == SX_OPTIM_ADAMW
            ? sx_cg_sub(g, one, sx_cg_mul(g, lr, sx_cg_scalar_like(g, lr, p->weight_decay)))
            : one;
    sx_cg_node *r[3] = {sx_cg_div(g, lr, bc1), sx_cg_sqrt(g, bc2), keep};
    return rates(g, 3, r);
}

/* SGD with dampening: (lr, 1 - dampening min(t - 1, 1)): the whole gradient on the first
 * step, 1 - dampening of it after, as PyTorch's. */
static sx_cg_node *rate_dampened(sx_cg_graph *g, const sx_optim_params *p, sx_cg_node *lr,
                                 sx_cg_node *step)
{
    sx_cg_node *one = sx_cg_scalar_like(g, lr, 1.0);
    sx_cg_node *later = sx_cg_min(g, sx_cg_sub(g, step, one), one);
    sx_cg_node *r[2] = {
        lr, sx_cg_sub(g, one, sx_cg_mul(g, sx_cg_scalar_like(g, lr, p->dampening), later))};
    return rates(g, 2, r);
}

/* The rows by kind; then momentum's dampened form (row_of picks it; nesterov takes no
 * dampening, as PyTorch's). */
enum { ROW_MOMENTUM_DAMPENED = SX_OPTIM_COUNT, N_ROWS };

static const optim_row rows[N_ROWS] = {
    [SX_OPTIM_SGD] = {"sgd", SX_OP_SGD_UPDATE, 0, {NULL, NULL, NULL}, coef_none, NULL},
    [SX_OPTIM_MOMENTUM] =
        {"momentum", SX_OP_MOMENTUM_UPDATE, 1, {"velocity", NULL, NULL}, coef_momentum, NULL},
    [SX_OPTIM_NESTEROV] =
        {"nesterov", SX_OP_MOMENTUM_UPDATE, 1, {"velocity", NULL, NULL}, coef_nesterov, NULL},
    [SX_OPTIM_ADAGRAD] =
        {"adagrad", SX_OP_ADAGRAD_UPDATE, 1, {"sum_sq", NULL, NULL}, coef_adagrad, NULL},
    [SX_OPTIM_RMSPROP] =
        {"rmsprop", SX_OP_RMSPROP_UPDATE, 1, {"mean_sq", NULL, NULL}, coef_rmsprop, NULL},
    [SX_OPTIM_ADAM] = {"adam", SX_OP_ADAMW_UPDATE, 2, {"m", "v", NULL}, coef_adam, rate_adamw},
    [SX_OPTIM_ADAMW] = {"adamw", SX_OP_ADAMW_UPDATE, 2, {"m", "v", NULL}, coef_adam, rate_adamw},
    [SX_OPTIM_AMSGRAD] =
        {"amsgrad", SX_OP_AMSGRAD_UPDATE, 3, {"m", "v", "v_max"}, coef_adam, rate_adamw},
    [SX_OPTIM_RMSPROP_CENTERED] = {"rmsprop_centered",
                                   SX_OP_RMSPROP_CENTERED_UPDATE,
                                   2,
                                   {"mean_sq", "mean_grad", NULL},
                                   coef_rmsprop,
                                   NULL},
    [SX_OPTIM_ADAM_KERAS] =
        {"adam_keras", SX_OP_ADAM_UPDATE, 2, {"m", "v", NULL}, coef_adam, rate_adam},
    [SX_OPTIM_RMSPROP_MOMENTUM] = {"rmsprop_momentum",
                                   SX_OP_RMSPROP_MOMENTUM_UPDATE,
                                   2,
                                   {"mean_sq", "momentum_buffer", NULL},
                                   coef_rmsprop_momentum,
                                   NULL},
    [ROW_MOMENTUM_DAMPENED] = {"momentum",
                               SX_OP_MOMENTUM_DAMPENED_UPDATE,
                               1,
                               {"velocity", NULL, NULL},
                               coef_momentum,
                               rate_dampened},
};

/* The row that p's update uses: its kind's, or momentum's dampened form. */
static const optim_row *row_of(const sx_optim_params *p)
{
    if (p->dampening != 0 && p->kind == SX_OPTIM_MOMENTUM)
        return &rows[ROW_MOMENTUM_DAMPENED];
    return &rows[p->kind];
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
    if (row_of(p)->rate != NULL && step == NULL)
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

/* The update node u = op(param, states..., grad, rate) and, per state, seq(state, u): the
 * state's handle, ordered after the step that writes it. out gets the seqs, then u. In an eager
 * graph u has run when it is made and is stale at once (it reads what it wrote): a seq would
 * run it again, so the states themselves are the handles. */
static sx_status emit(sx_cg_graph *g, const sx_optim_params *p, sx_cg_node *param, sx_cg_node *grad,
                      sx_cg_node *rate, sx_cg_node *const *st, sx_cg_node **out)
{
    const optim_row *r = row_of(p);
    sx_cg_node *ins[OPTIM_MAX_STATES + 3];
    int n = 0;
    ins[n++] = param;
    for (int i = 0; i < r->n_states; i++)
        ins[n++] = st[i];
    ins[n++] = grad;
    ins[n++] = rate;
    sx_cg_attr a = sx_cg_attr_default();
    r->coef(p, sx_cg_node_dtype(param), &a);
    sx_cg_node *u = sx_cg_op_new(g, r->op, n, ins, &a);
    if (u == NULL)
        return failed(g, sx_cg_op_name(r->op));
    const sx_cg_attr none = sx_cg_attr_default();
    const bool eager = sx_cg_graph_mode(g) == SX_CG_EAGER;
    for (int i = 0; i < r->n_states; i++) {
        sx_cg_node *seq_in[2] = {st[i], u};
        out[i] = eager ? st[i] : sx_cg_op_new(g, SX_OP_SEQ, 2, seq_in, &none);
        if (out[i] == NULL)
            return failed(g, "seq");
    }
    out[r->n_states] = u;
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
    sx_cg_node *rate = r->rate != NULL ? r->rate(g, p, lr, step) : lr;
    if (rate == NULL)
        return failed(g, "the learning rate");
    sx_cg_node *out[OPTIM_MAX_STATES + 1];
    SX_TRY(emit(g, p, param, grad, rate, st, out));
    for (int i = 0; i <= r->n_states; i++)
        updates[i] = out[i];
    *n = r->n_states + 1;
    return SX_OK;
}
