/* test_bits.c: training gives the same bits however the graph is run. A network with the
 * reference one's layer kinds (conv 5x5 + bias + relu, 2x2 max pooling, dropout, dense + relu,
 * dense + softmax cross-entropy) trains a few steps with each optimiser, and the losses, weights
 * and optimiser states must equal those of the plain lazy graph bit for bit: with every
 * optimiser pass, with each pass alone and with all but one, eager, lazy and frozen (planned or
 * not), on 1 or 2 kernel threads and 1 or 2 engine workers; and through the nn layer, as
 * examples/mnist_train runs it (--no-optimise, --no-plan, --eager, --threads). The dense layers
 * are large enough for every path of the passes: the first product's inner size (1568) spans
 * several GEMM K blocks, the second's (320) two, and the first weight's gradient (1568 x 320,
 * 2 MB) several row blocks of matmul_update. */
#include "testutil.h"

#include <sx_autodiff.h>
#include <sx_optim.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn_impl.h"
#include "nn_layer_calls.h"

#define BATCH 8
#define SIDE 28                  /* input SIDE x SIDE x 1 */
#define FILTERS 8                /* conv 5x5, SAME */
#define FLAT (14 * 14 * FILTERS) /* after the 2x2 pooling */
#define HIDDEN 320               /* dense relu */
#define CLASSES 10               /* dense, softmax cross-entropy */
#define STEPS 3                  /* differences between paths once showed from step 2 on */
#define NP 6                     /* conv kernel, conv bias, w1, b1, w2, b2 */

static const int p_rank[NP] = {4, 1, 2, 1, 2, 1};
static const int64_t p_shape[NP][4] = {{5, 5, 1, FILTERS}, {FILTERS},         {FLAT, HIDDEN},
                                       {HIDDEN},           {HIDDEN, CLASSES}, {CLASSES}};

/* ---------------------------------------------------------------- the data */

/* STEPS fixed batches: pixels in [0, 1), one-hot labels. */
typedef struct data {
    sx_tensor *x[STEPS], *y[STEPS];
} data;

static data data_new(void)
{
    data d;
    sx_rng rng;
    sx_rng_seed(&rng, 11);
    int64_t xs[4] = {BATCH, SIDE, SIDE, 1}, ys[2] = {BATCH, CLASSES};
    for (int s = 0; s < STEPS; s++) {
        d.x[s] = tu_rand(&rng, SX_F32, 4, xs, 0, 1);
        d.y[s] = tu_zeros(SX_F32, 2, ys);
        for (int i = 0; i < BATCH; i++)
            sx_tensor_set(d.y[s], i * CLASSES + (int64_t)sx_rng_below(&rng, CLASSES), 1.0);
    }
    return d;
}

static void data_free(data *d)
{
    for (int s = 0; s < STEPS; s++) {
        sx_tensor_free(d->x[s]);
        sx_tensor_free(d->y[s]);
    }
}

/* ---------------------------------------------------------------- a run's state */

/* What training changes: the weights, the optimiser states, the dropout generator, and the
 * loss of every step. */
typedef struct run {
    sx_optim_kind kind;
    sx_tensor *p[NP], *st[NP][3];
    sx_rng drop;
    float loss[STEPS];
    sx_cg_opt_report rep;
} run;

static run run_new(sx_optim_kind kind)
{
    run r;
    memset(&r, 0, sizeof r);
    r.kind = kind;
    sx_rng rng;
    sx_rng_seed(&rng, 5);
    for (int i = 0; i < NP; i++) {
        double a = p_rank[i] == 1 ? 0.05 : i == 0 ? 0.3 : 0.06;
        r.p[i] = tu_rand(&rng, SX_F32, p_rank[i], p_shape[i], -a, a);
        for (int k = 0; k < sx_optim_n_states(kind); k++)
            r.st[i][k] = tu_zeros(SX_F32, p_rank[i], p_shape[i]);
    }
    sx_rng_seed(&r.drop, 99);
    return r;
}

static void run_free(run *r)
{
    for (int i = 0; i < NP; i++) {
        sx_tensor_free(r->p[i]);
        for (int k = 0; k < 3; k++)
            sx_tensor_free(r->st[i][k]);
    }
}

static bool same(const sx_tensor *a, const sx_tensor *b)
{
    return memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)) == 0;
}

/* How many elements differ, and by how much at most (for the failure message). */
static int64_t count_diff(const sx_tensor *a, const sx_tensor *b, double *max)
{
    int64_t n = 0;
    *max = 0;
    for (int64_t i = 0; i < a->size; i++) {
        double u = sx_tensor_get(a, i), v = sx_tensor_get(b, i);
        if (memcmp((const float *)a->data + i, (const float *)b->data + i, sizeof(float)) != 0) {
            n++;
            *max = fabs(u - v) > *max ? fabs(u - v) : *max;
        }
    }
    return n;
}

static void assert_same_run(const run *want, const run *got, const char *what)
{
    const char *opt = sx_optim_name(want->kind);
    for (int s = 0; s < STEPS; s++)
        cr_assert(memcmp(&want->loss[s], &got->loss[s], sizeof(float)) == 0,
                  "%s, %s: loss of step %d is %.9g, want %.9g", opt, what, s + 1,
                  (double)got->loss[s], (double)want->loss[s]);
    for (int i = 0; i < NP; i++) {
        double max;
        int64_t n = count_diff(want->p[i], got->p[i], &max);
        cr_assert(n == 0, "%s, %s: %lld of %lld elements of parameter %d differ (by up to %.3g)",
                  opt, what, (long long)n, (long long)want->p[i]->size, i, max);
        for (int k = 0; k < sx_optim_n_states(want->kind); k++)
            cr_assert(same(want->st[i][k], got->st[i][k]), "%s, %s: state %d of parameter %d", opt,
                      what, k, i);
    }
    cr_assert(memcmp(&want->drop, &got->drop, sizeof want->drop) == 0, "%s, %s: dropout generator",
              opt, what);
}

/* ---------------------------------------------------------------- the graph */

/* How a run evaluates its graph. */
typedef struct config {
    const char *name;
    bool eager;
    bool optimise;
    bool enable[SX_PASS_COUNT]; /* with optimise */
    bool freeze, plan;
    int threads, workers;
    bool reference; /* the optimisers' reference formula in plain ops, not optim/'s update */
} config;

typedef struct tgraph {
    sx_cg_graph *g;
    sx_cg_node *x, *y, *lr, *step, *mask, *loss, *ps[NP], *states[NP][2];
    int rng;
} tgraph;

static sx_cg_node *ok(sx_cg_node *n)
{
    cr_assert(n != NULL, "%s", sx_last_error());
    return n;
}

static sx_cg_node *scalar_input(sx_cg_graph *g, const char *name, bool eager, double v)
{
    sx_cg_node *n = ok(sx_cg_input(g, name, SX_F32, 0, NULL));
    if (eager) {
        float f = (float)v;
        sx_tensor t = sx_tensor_view(SX_F32, 0, NULL, &f);
        cr_assert_eq(sx_cg_input_set(g, n, &t, SX_CG_COPY), SX_OK, "%s", sx_last_error());
    }
    return n;
}

/* The forward pass and the mean loss, in the graph's mode (eager: on step s's batch), with the
 * weights borrowed from r, as nn/conv2d.c, nn/pool.c and nn/dense.c build these layers. */
static void forward(tgraph *t, run *r, const data *d, int s, bool eager)
{
    sx_cg_graph *g = t->g;
    int64_t xs[4] = {BATCH, SIDE, SIDE, 1}, ys[2] = {BATCH, CLASSES};
    cr_assert_eq(sx_cg_rng_new(g, 0, &t->rng), SX_OK);
    *sx_cg_rng(g, t->rng) = r->drop;
    t->x = ok(sx_cg_input(g, "x", SX_F32, 4, xs));
    t->y = ok(sx_cg_input(g, "y", SX_F32, 2, ys));
    if (eager) {
        cr_assert_eq(sx_cg_input_set(g, t->x, d->x[s], SX_CG_BORROW), SX_OK);
        cr_assert_eq(sx_cg_input_set(g, t->y, d->y[s], SX_CG_BORROW), SX_OK);
    }
    for (int i = 0; i < NP; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        t->ps[i] = ok(sx_cg_param_borrow(g, name, r->p[i]));
    }
    sx_conv2d_params cp = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    sx_pool2d_params pp = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    sx_cg_node *h = sx_cg_relu(g, sx_cg_add(g, sx_cg_conv2d(g, t->x, t->ps[0], &cp), t->ps[1]));
    h = sx_cg_maxpool2d(g, h, &pp);
    int64_t hs[4] = {BATCH, 14, 14, FILTERS}, fs[2] = {-1, FLAT};
    t->mask = ok(sx_cg_dropout_mask(g, t->rng, 0.1, 4, hs));
    h = sx_cg_reshape(g, sx_cg_mul(g, h, t->mask), 2, fs);
    h = sx_cg_relu(g, sx_cg_add(g, sx_cg_matmul(g, h, t->ps[2], false, false), t->ps[3]));
    sx_cg_node *logits = sx_cg_add(g, sx_cg_matmul(g, h, t->ps[4], false, false), t->ps[5]);
    t->loss = ok(sx_cg_mean(g, sx_cg_softmax_xent(g, logits, t->y), SX_AXES_ALL, false));
}

/* The updates of every parameter in g (the states borrowed from r), into outs; returns how many. */
static int updates(sx_cg_graph *g, run *r, sx_cg_node *const *ps, sx_cg_node *const *grads,
                   sx_cg_node *lr, sx_cg_node *step, bool reference, sx_cg_node **outs)
{
    sx_optim_params op = sx_optim_params_default(r->kind);
    int n = 0;
    for (int i = 0; i < NP; i++) {
        sx_cg_node *st[3] = {NULL, NULL, NULL};
        for (int k = 0; k < sx_optim_n_states(r->kind); k++) {
            char name[16];
            snprintf(name, sizeof name, "s%d.%d", i, k);
            st[k] = ok(sx_cg_param_borrow(g, name, r->st[i][k]));
        }
        int nu = 0;
        if (reference)
            nu = tu_optim_reference(g, &op, ps[i], grads[i], lr, step, st, outs + n);
        else
            cr_assert_eq(sx_optim_update(g, &op, ps[i], grads[i], lr, step, st, outs + n, &nu),
                         SX_OK, "%s", sx_last_error());
        n += nu;
    }
    return n;
}

static float value_f32(const sx_cg_node *n)
{
    return *(const float *)sx_cg_value(n)->data;
}

/* One eager step, as nn's eager path takes it: forward pass and gradients computed as they are
 * built, then the updates from the gradients' values in a small lazy graph evaluated once (an
 * eager graph would recompute later gradients from half-updated weights). */
static void eager_step(run *r, const data *d, int s)
{
    tgraph t;
    memset(&t, 0, sizeof t);
    cr_assert_eq(sx_cg_graph_new(SX_CG_EAGER, SX_F32, &t.g), SX_OK);
    forward(&t, r, d, s, true);
    sx_cg_node *grads[NP];
    cr_assert_eq(sx_ad_grad(t.g, t.loss, NP, t.ps, grads), SX_OK, "%s", sx_last_error());
    r->loss[s] = value_f32(t.loss);
    r->drop = *sx_cg_rng(t.g, t.rng);

    sx_cg_graph *u = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &u), SX_OK);
    sx_cg_node *ps[NP], *gs[NP], *outs[4 * NP];
    for (int i = 0; i < NP; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        ps[i] = ok(sx_cg_param_borrow(u, name, r->p[i]));
        gs[i] = ok(sx_cg_const(u, sx_cg_value(grads[i])));
    }
    const sx_optim_params op = sx_optim_params_default(r->kind);
    sx_cg_node *lr = scalar_input(u, "lr", true, op.lr);
    sx_cg_node *step = scalar_input(u, "step", true, s + 1);
    int n = updates(u, r, ps, gs, lr, step, false, outs);
    cr_assert_eq(sx_cg_eval(u, n, outs), SX_OK, "%s", sx_last_error());
    sx_cg_graph_free(u);
    sx_cg_graph_free(t.g);
}

/* Train STEPS steps of r's optimiser on d, evaluating as c says. */
static void train(run *r, const data *d, const config *c)
{
    const int threads0 = sx_threads_get();
    cr_assert_eq(sx_threads_set(c->threads), SX_OK);
    if (c->eager) {
        for (int s = 0; s < STEPS; s++)
            eager_step(r, d, s);
        cr_assert_eq(sx_threads_set(threads0), SX_OK);
        return;
    }
    tgraph t;
    memset(&t, 0, sizeof t);
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &t.g), SX_OK);
    forward(&t, r, d, 0, false);
    sx_cg_node *grads[NP], *outs[1 + 4 * NP];
    cr_assert_eq(sx_ad_grad(t.g, t.loss, NP, t.ps, grads), SX_OK, "%s", sx_last_error());
    t.lr = scalar_input(t.g, "lr", false, 0);
    t.step = scalar_input(t.g, "step", false, 0);
    outs[0] = t.loss;
    int n = 1 + updates(t.g, r, t.ps, grads, t.lr, t.step, c->reference, outs + 1);
    if (c->optimise) {
        sx_cg_opt_params op = sx_cg_opt_params_default();
        memcpy(op.enable, c->enable, sizeof op.enable);
        cr_assert_eq(sx_cg_optimise(t.g, n, outs, &op, &r->rep), SX_OK, "%s", sx_last_error());
    }
    if (c->freeze) {
        sx_cg_freeze_params fp = sx_cg_freeze_params_default();
        fp.plan_memory = c->plan;
        cr_assert_eq(sx_cg_freeze_ex(t.g, n, outs, &fp, NULL), SX_OK, "%s", sx_last_error());
    }
    cr_assert_eq(sx_cg_set_workers(t.g, c->workers), SX_OK, "%s", sx_last_error());
    const sx_optim_params op = sx_optim_params_default(r->kind);
    for (int s = 0; s < STEPS; s++) {
        float lr = (float)op.lr, step = (float)(s + 1);
        sx_tensor lt = sx_tensor_view(SX_F32, 0, NULL, &lr),
                  st = sx_tensor_view(SX_F32, 0, NULL, &step);
        cr_assert_eq(sx_cg_input_set(t.g, t.x, d->x[s], SX_CG_BORROW), SX_OK);
        cr_assert_eq(sx_cg_input_set(t.g, t.y, d->y[s], SX_CG_BORROW), SX_OK);
        cr_assert_eq(sx_cg_input_set(t.g, t.lr, &lt, SX_CG_COPY), SX_OK);
        cr_assert_eq(sx_cg_input_set(t.g, t.step, &st, SX_CG_COPY), SX_OK);
        cr_assert_eq(sx_cg_invalidate(t.g, t.mask), SX_OK); /* a new dropout mask */
        cr_assert_eq(sx_cg_eval(t.g, n, outs), SX_OK, "%s: %s", c->name, sx_last_error());
        r->loss[s] = value_f32(t.loss);
    }
    r->drop = *sx_cg_rng(t.g, t.rng);
    sx_cg_graph_free(t.g);
    cr_assert_eq(sx_threads_set(threads0), SX_OK);
}

static config cfg(const char *name, bool eager, bool optimise, bool freeze, bool plan, int threads,
                  int workers)
{
    config c = {name, eager, optimise, {false}, freeze, plan, threads, workers, false};
    for (int p = 0; p < SX_PASS_COUNT; p++)
        c.enable[p] = true;
    return c;
}

/* Every optimiser; against the plain lazy graph with the optimisers' reference formula in
 * plain ops (tu_optim_reference): lazy with optim/'s fused updates, eager, lazy optimised, frozen
 * with and without a plan and the passes, threads and workers, each pass alone and all but
 * each. */
Test(nn_bits, every_pass_and_evaluation_mode_trains_the_same_bits, .timeout = 240)
{
    data d = data_new();
    config cs[11 + 2 * SX_PASS_COUNT];
    int nc = 0;
    cs[nc++] = cfg("lazy, fused updates", false, false, false, false, 1, 1);
    cs[nc++] = cfg("eager", true, false, false, false, 1, 1);
    cs[nc++] = cfg("lazy, optimised", false, true, false, false, 1, 1);
    cs[nc++] = cfg("frozen, planned", false, false, true, true, 1, 1);
    cs[nc++] = cfg("frozen, optimised", false, true, true, false, 1, 1);
    cs[nc++] = cfg("frozen, optimised, planned", false, true, true, true, 1, 1);
    cs[nc++] = cfg("frozen, optimised, planned, 2 threads", false, true, true, true, 2, 1);
    cs[nc++] = cfg("frozen, optimised, planned, 2 workers", false, true, true, true, 1, 2);
    cs[nc++] =
        cfg("frozen, optimised, planned, 2 threads, 2 workers", false, true, true, true, 2, 2);
    cs[nc++] = cfg("eager, 2 threads", true, false, false, false, 2, 1);
    static char names[2 * SX_PASS_COUNT][64];
    for (int p = 0; p < SX_PASS_COUNT; p++) {
        config only = cfg(names[2 * p], false, true, true, true, 1, 1);
        config but = cfg(names[2 * p + 1], false, true, true, true, 1, 1);
        snprintf(names[2 * p], sizeof names[0], "only pass %s", sx_cg_pass_name((sx_cg_pass)p));
        snprintf(names[2 * p + 1], sizeof names[0], "all passes but %s",
                 sx_cg_pass_name((sx_cg_pass)p));
        for (int q = 0; q < SX_PASS_COUNT; q++)
            only.enable[q] = q == p;
        but.enable[p] = false;
        cs[nc++] = only;
        cs[nc++] = but;
    }
    for (int k = 0; k < SX_OPTIM_COUNT; k++) {
        run base = run_new((sx_optim_kind)k);
        train(
            &base, &d,
            &(config){"lazy, reference formula", false, false, {false}, false, false, 1, 1, true});
        for (int i = 0; i < nc; i++) {
            run r = run_new((sx_optim_kind)k);
            train(&r, &d, &cs[i]);
            assert_same_run(&base, &r, cs[i].name);
            if (i == 5) { /* the passes this test is about did fire */
                for (int q = 0; q < SX_PASS_COUNT; q++)
                    cr_log_info("%s: pass %s changed %lld", sx_optim_name((sx_optim_kind)k),
                                sx_cg_pass_name((sx_cg_pass)q), (long long)r.rep.changed[q]);
                cr_assert_gt(r.rep.changed[SX_PASS_GEMM_FOLD], 0);
                cr_assert_gt(r.rep.changed[SX_PASS_GEMM_UPDATE], 0);
                cr_assert_gt(r.rep.changed[SX_PASS_ELEMWISE_FUSION], 0);
                cr_assert_gt(r.rep.changed[SX_PASS_POOL_RELU], 0);
            }
            run_free(&r);
        }
        run_free(&base);
    }
    data_free(&d);
}

/* ---------------------------------------------------------------- through the nn layer */

/* The same network through sx_nn, as examples/mnist_train builds it. */
static sx_nn_net *nn_net(void)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("bits", SX_F32, 3, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){SIDE, SIDE, 1});
    x = t_conv2d(net, x, 5, 5, FILTERS, 1, SX_PAD_SAME, SX_ACT_RELU);
    x = t_max_pool2d(net, x, 2, 2, 2, SX_PAD_VALID);
    x = sx_nn_dropout(net, x, 0.1);
    x = sx_nn_fully_connected(net, x, HIDDEN, SX_ACT_RELU);
    x = sx_nn_linear(net, x, CLASSES, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

typedef struct nn_config {
    const char *name;
    bool eager, optimise, plan;
    int threads, workers;
} nn_config;

/* STEPS steps of `kind` on d as c says; the losses into loss. */
static sx_nn_net *nn_train(sx_optim_kind kind, const data *d, const nn_config *c, double *loss)
{
    sx_nn_net *net = nn_net();
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim = sx_optim_params_default(kind);
    p.eager = c->eager;
    p.optimise = c->optimise;
    p.plan_memory = c->plan;
    const int threads0 = sx_threads_get();
    cr_assert_eq(sx_threads_set(c->threads), SX_OK);
    sx_nn_model *m = NULL;
    if (!c->eager) {
        cr_assert_eq(sx_nn_compile_train(net, &p, BATCH, &m), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_set_workers(sx_nn_model_graph(m), c->workers), SX_OK);
    }
    for (int s = 0; s < STEPS; s++)
        cr_assert_eq(
            c->eager ? nn_eager_step(net, &p, d->x[s], d->y[s], p.optim.lr, s + 1, &loss[s], NULL)
                     : sx_nn_model_step(m, d->x[s], d->y[s], p.optim.lr, s + 1, &loss[s], NULL),
            SX_OK, "%s: %s", c->name, sx_last_error());
    sx_nn_model_free(m);
    cr_assert_eq(sx_threads_set(threads0), SX_OK);
    return net;
}

static void assert_same_net(const sx_nn_net *a, const sx_nn_net *b, const char *what)
{
    for (int i = 0; i < a->n_layers; i++)
        for (int k = 0; k < a->layers[i]->n_params; k++) {
            const nn_param *p = &a->layers[i]->params[k], *q = &b->layers[i]->params[k];
            double max;
            int64_t n = count_diff(p->value, q->value, &max);
            cr_assert(n == 0, "%s: %lld of %lld elements of %s differ (by up to %.3g)", what,
                      (long long)n, (long long)p->value->size, p->name, max);
            for (int s = 0; s < NN_MAX_STATES; s++)
                if (p->state[s] != NULL)
                    cr_assert(q->state[s] != NULL && same(p->state[s], q->state[s]),
                              "%s: %s state %d", what, p->name, s);
        }
    cr_assert(memcmp(&a->dropout_rng, &b->dropout_rng, sizeof a->dropout_rng) == 0,
              "%s: dropout generator", what);
}

/* mnist_train's switches (--no-optimise, --no-plan, --eager, --threads) and engine workers give
 * the weights of the unoptimised compiled graph, bit for bit, with every optimiser. */
Test(nn_bits, compiled_eager_and_unoptimised_training_agree_bit_for_bit, .timeout = 240)
{
    data d = data_new();
    static const nn_config cs[] = {
        {"optimised, planned", false, true, true, 1, 1},
        {"optimised, not planned", false, true, false, 1, 1},
        {"not optimised, not planned", false, false, false, 1, 1},
        {"eager", true, false, false, 1, 1},
        {"optimised, planned, 2 threads", false, true, true, 2, 1},
        {"optimised, planned, 2 workers", false, true, true, 1, 2},
        {"eager, 2 threads", true, false, false, 2, 1},
    };
    const nn_config base = {"not optimised, planned", false, false, true, 1, 1};
    for (int k = 0; k < SX_OPTIM_COUNT; k++) {
        double want[STEPS], got[STEPS];
        sx_nn_net *a = nn_train((sx_optim_kind)k, &d, &base, want);
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
            char what[128];
            snprintf(what, sizeof what, "%s, %s", sx_optim_name((sx_optim_kind)k), cs[i].name);
            sx_nn_net *b = nn_train((sx_optim_kind)k, &d, &cs[i], got);
            for (int s = 0; s < STEPS; s++)
                cr_assert(got[s] == want[s], "%s: loss of step %d is %.9g, want %.9g", what, s + 1,
                          got[s], want[s]);
            assert_same_net(a, b, what);
            sx_nn_net_free(b);
        }
        sx_nn_net_free(a);
    }
    data_free(&d);
}
