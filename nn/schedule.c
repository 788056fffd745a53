/* schedule.c: learning-rate schedules. Step, exponential and explicit schedules change the rate
 * fed to the graph from step to step; warmup, cosine and one-cycle are built into the training
 * graph as nodes over the step counter (sx_nn_schedule_node); reduce-on-plateau scales the base
 * rate after an epoch whose watched metric did not improve. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The learning rate of 0-based step `step` in 0-based epoch `epoch`. */
double nn_schedule_lr(const sx_nn_train_params *p, int64_t step, int64_t epoch)
{
    const sx_nn_schedule *s = &p->schedule;
    double lr = p->optim.lr;
    switch (s->kind) {
    case SX_SCHED_CONSTANT:
        return lr;
    case SX_SCHED_STEP:
        return lr *
               pow(s->gamma, floor((double)step / (double)(s->step_size > 0 ? s->step_size : 1)));
    case SX_SCHED_EXPONENTIAL:
        return lr * pow(s->gamma, (double)step);
    case SX_SCHED_EXPLICIT:
        if (s->n_values < 1 || s->values == NULL)
            return lr;
        return s->values[epoch < s->n_values ? epoch : s->n_values - 1];
    case SX_SCHED_WARMUP: /* the graph schedules from the base rate; the plateau scales it */
    case SX_SCHED_COSINE:
    case SX_SCHED_ONE_CYCLE:
    case SX_SCHED_PLATEAU:
        return lr;
    }
    return lr;
}

sx_nn_schedule sx_nn_schedule_default(sx_nn_schedule_kind kind)
{
    sx_nn_schedule s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    s.gamma = 0.1;
    s.step_size = 1;
    s.pct_start = 0.3;
    s.div_factor = 25;
    s.final_div_factor = 1e4;
    s.factor = 0.1;
    s.patience = 10;
    s.threshold = 1e-4;
    return s;
}

static bool in_graph(sx_nn_schedule_kind k)
{
    return k == SX_SCHED_WARMUP || k == SX_SCHED_COSINE || k == SX_SCHED_ONE_CYCLE;
}

/* An in-graph schedule's fields (T filled in), or the plateau's; SX_OK for the other kinds. */
sx_status nn_schedule_check(const char *who, const sx_nn_schedule *s)
{
    const int64_t W = s->warmup_steps, T = s->total_steps;
    switch (s->kind) {
    case SX_SCHED_CONSTANT:
    case SX_SCHED_STEP:
    case SX_SCHED_EXPONENTIAL:
    case SX_SCHED_EXPLICIT:
        return SX_OK;
    case SX_SCHED_WARMUP:
        if (W < 1)
            return sx_error(SX_E_ARG, "%s: warmup over %lld steps (want >= 1)", who, (long long)W);
        return SX_OK;
    case SX_SCHED_COSINE:
        if (W < 0 || T <= W || !(s->min_lr >= 0) || !isfinite(s->min_lr))
            return sx_error(SX_E_ARG,
                            "%s: cosine over %lld steps with %lld of warmup, min_lr %g (want "
                            "total_steps > warmup_steps >= 0, min_lr >= 0)",
                            who, (long long)T, (long long)W, s->min_lr);
        return SX_OK;
    case SX_SCHED_ONE_CYCLE:
        if (!(s->pct_start > 0 && s->pct_start < 1) || !(s->div_factor > 0) ||
            !(s->final_div_factor > 0) || !isfinite(s->div_factor + s->final_div_factor) ||
            !(s->pct_start * (double)T >= 2) || !((double)T - s->pct_start * (double)T >= 1))
            return sx_error(SX_E_ARG,
                            "%s: one_cycle over %lld steps, pct_start %g, div_factor %g, "
                            "final_div_factor %g (want both phases of at least one step, "
                            "factors > 0)",
                            who, (long long)T, s->pct_start, s->div_factor, s->final_div_factor);
        return SX_OK;
    case SX_SCHED_PLATEAU:
        if (!(s->factor > 0 && s->factor < 1) || s->patience < 0 || !(s->threshold >= 0) ||
            !(s->min_lr >= 0) || !isfinite(s->threshold + s->min_lr))
            return sx_error(SX_E_ARG,
                            "%s: plateau factor %g, patience %d, threshold %g, min_lr %g (want "
                            "0 < factor < 1, the others >= 0)",
                            who, s->factor, s->patience, s->threshold, s->min_lr);
        return SX_OK;
    }
    return sx_error(SX_E_ARG, "%s: unknown schedule %d", who, (int)s->kind);
}

/* v + (u - v) (1 + cos(pi q)) / 2 */
static double anneal(double u, double v, double q)
{
    return v + (u - v) * (1 + cos(3.14159265358979323846 * q)) / 2;
}

double sx_nn_schedule_value(const sx_nn_schedule *s, double lr, int64_t t)
{
    if (s == NULL || !in_graph(s->kind))
        return lr;
    const double W = (double)s->warmup_steps, T = (double)s->total_steps, tt = (double)t;
    if (s->kind == SX_SCHED_WARMUP)
        return lr * fmin(1, tt / W);
    if (s->kind == SX_SCHED_COSINE) {
        if (tt <= W)
            return lr * (tt / W);
        return anneal(lr, s->min_lr, fmin(1, fmax(0, (tt - W - 1) / (T - W))));
    }
    const double st = tt - 1, e = s->pct_start * T - 1, a = lr / s->div_factor;
    if (st <= e)
        return anneal(a, lr, st / e);
    return anneal(lr, a / s->final_div_factor, (st - e) / (T - 1 - e));
}

/* anneal(u, v, q) as nodes: v + (u - v) (1 + cos(pi q)) / 2 */
static sx_cg_node *anneal_node(sx_cg_graph *g, sx_cg_node *u, sx_cg_node *v, sx_cg_node *q)
{
    sx_cg_node *c =
        sx_cg_add_scalar(g, sx_cg_cos(g, sx_cg_mul_scalar(g, q, 3.14159265358979323846)), 1.0);
    return sx_cg_add(g, v, sx_cg_mul_scalar(g, sx_cg_mul(g, sx_cg_sub(g, u, v), c), 0.5));
}

sx_cg_node *sx_nn_schedule_node(sx_cg_graph *g, const sx_nn_schedule *s, sx_cg_node *lr,
                                sx_cg_node *t)
{
    if (g == NULL || s == NULL || lr == NULL || t == NULL) {
        sx_error(SX_E_ARG, "sx_nn_schedule_node: NULL argument");
        return NULL;
    }
    if (!in_graph(s->kind))
        return lr;
    if (nn_schedule_check("sx_nn_schedule_node", s) != SX_OK)
        return NULL;
    const double W = (double)s->warmup_steps, T = (double)s->total_steps;
    sx_cg_node *one = sx_cg_scalar_like(g, lr, 1.0), *zero = sx_cg_scalar_like(g, lr, 0.0);
    if (s->kind == SX_SCHED_WARMUP)
        return sx_cg_mul(g, lr, sx_cg_min(g, one, sx_cg_mul_scalar(g, t, 1 / W)));
    if (s->kind == SX_SCHED_COSINE) {
        sx_cg_node *q = sx_cg_mul_scalar(g, sx_cg_add_scalar(g, t, -W - 1), 1 / (T - W));
        q = sx_cg_min(g, one, sx_cg_max(g, zero, q));
        sx_cg_node *cosv = anneal_node(g, lr, sx_cg_scalar_like(g, lr, s->min_lr), q);
        if (s->warmup_steps == 0)
            return cosv;
        sx_cg_node *warm = sx_cg_mul(g, lr, sx_cg_mul_scalar(g, t, 1 / W));
        return sx_cg_where(g, sx_cg_gt(g, t, sx_cg_scalar_like(g, t, W)), cosv, warm);
    }
    const double e = s->pct_start * T - 1;
    sx_cg_node *st = sx_cg_add_scalar(g, t, -1.0);
    sx_cg_node *a = sx_cg_mul_scalar(g, lr, 1 / s->div_factor);
    sx_cg_node *z = sx_cg_mul_scalar(g, a, 1 / s->final_div_factor);
    sx_cg_node *up = anneal_node(g, a, lr, sx_cg_mul_scalar(g, st, 1 / e));
    sx_cg_node *down =
        anneal_node(g, lr, z, sx_cg_mul_scalar(g, sx_cg_add_scalar(g, st, -e), 1 / (T - 1 - e)));
    return sx_cg_where(g, sx_cg_gt(g, st, sx_cg_scalar_like(g, st, e)), down, up);
}

/* Reduce-on-plateau after an epoch whose watched value is v (higher_better for accuracy):
 * PyTorch's ReduceLROnPlateau in its 'rel' threshold mode, no cooldown; *lr is the base rate
 * fed from the next step on. */
void nn_plateau_epoch(const sx_nn_schedule *s, double *lr, double *best, int *bad, double v,
                      bool higher_better, int verbose)
{
    if (s->kind != SX_SCHED_PLATEAU || isnan(v))
        return;
    bool better = isnan(*best) ||
                  (higher_better ? v > *best * (1 + s->threshold) : v < *best * (1 - s->threshold));
    if (better) {
        *best = v;
        *bad = 0;
        return;
    }
    if (++*bad <= s->patience)
        return;
    double next = fmax(*lr * s->factor, s->min_lr);
    if (next < *lr) {
        if (verbose > 0)
            fprintf(stderr, "plateau: learning rate %.6g -> %.6g\n", *lr, next);
        *lr = next;
    }
    *bad = 0;
}
