/* Training options through the neural compiler: a user-defined loss built from graph
 * nodes, parameter groups (rate multiplier, weight decay), in-graph schedules fed only the base
 * rate, and the new activations and PReLU as layers that train, save and load. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"

enum { B = 8, IN = 3, HID = 4, OUT = 2 };

typedef struct data {
    sx_tensor *x, *y;
} data;

static data make_data(uint64_t seed)
{
    sx_rng r;
    sx_rng_seed(&r, seed);
    int64_t xs[2] = {B, IN}, ys[2] = {B, OUT};
    data d = {tu_rand(&r, SX_F64, 2, xs, -1, 1), tu_rand(&r, SX_F64, 2, ys, -1, 1)};
    return d;
}

static void free_data(data *d)
{
    sx_tensor_free(d->x);
    sx_tensor_free(d->y);
}

/* input (3) -> linear (4, act) [-> prelu] -> linear (2) */
static sx_nn_net *make_net(sx_nn_act act, bool prelu)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("t20", SX_F64, 3, &net), SX_OK);
    sx_nn_layer *l = sx_nn_input(net, 1, (int64_t[]){IN});
    l = sx_nn_linear(net, l, HID, act);
    if (prelu)
        l = sx_nn_prelu(net, l, 0.25);
    l = sx_nn_linear(net, l, OUT, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

static sx_nn_train_params base_params(sx_optim_kind k, double lr)
{
    sx_nn_train_params p = sx_nn_train_params_default();
    p.loss = SX_LOSS_MSE;
    p.optim = sx_optim_params_default(k);
    p.optim.lr = lr;
    p.verbose = 0;
    return p;
}

/* `steps` steps on d; lr_of(t) (NULL: p.optim.lr) fed as each step's rate. */
static void train(sx_nn_net *net, const sx_nn_train_params *p, const data *d, int steps,
                  const sx_nn_schedule *host)
{
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, p, B, &m), SX_OK, "%s", sx_last_error());
    for (int t = 1; t <= steps; t++) {
        double lr = host ? sx_nn_schedule_value(host, p->optim.lr, t) : p->optim.lr, loss = 0;
        cr_assert_eq(sx_nn_model_step(m, d->x, d->y, lr, t, &loss, NULL), SX_OK, "%s",
                     sx_last_error());
        cr_assert(isfinite(loss));
    }
    sx_nn_model_free(m);
}

/* Every parameter of the network, in order, into v (returns the count). */
static int weights(const sx_nn_net *net, double *v, int cap)
{
    int n = 0;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            const sx_tensor *t = net->layers[i]->params[k].value;
            for (int64_t j = 0; j < t->size; j++) {
                cr_assert_lt(n, cap);
                v[n++] = sx_tensor_get(t, j);
            }
        }
    return n;
}

/* ---------------------------------------------------------------- user-defined loss */

static sx_cg_node *my_mse(sx_cg_graph *g, sx_cg_node *out, sx_cg_node *target, void *ctx)
{
    int *calls = ctx;
    (*calls)++;
    return sx_cg_mean(g, sx_cg_sqr(g, sx_cg_sub(g, out, target)), SX_AXES_ALL, false);
}

static sx_cg_node *not_a_scalar(sx_cg_graph *g, sx_cg_node *out, sx_cg_node *target, void *ctx)
{
    (void)ctx;
    return sx_cg_sub(g, out, target);
}

Test(optim_training, a_user_loss_built_from_nodes_trains_as_the_builtin_one)
{
    data d = make_data(1);
    double a[64], b[64];
    sx_nn_net *n1 = make_net(SX_ACT_TANH, false), *n2 = make_net(SX_ACT_TANH, false);
    sx_nn_train_params p = base_params(SX_OPTIM_ADAM, 0.01);
    train(n1, &p, &d, 5, NULL);
    int calls = 0;
    p.loss = SX_LOSS_L1; /* replaced by the user's */
    p.loss_fn = my_mse;
    p.loss_ctx = &calls;
    train(n2, &p, &d, 5, NULL);
    cr_assert_eq(calls, 1, "the loss is built once per compiled graph");
    int na = weights(n1, a, 64), nb = weights(n2, b, 64);
    cr_assert_eq(na, nb);
    cr_assert(memcmp(a, b, sizeof(double) * (size_t)na) == 0, "the user's MSE trains differently");
    /* a loss of more than one element is refused, naming it */
    p.loss_fn = not_a_scalar;
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(n2, &p, B, &m), SX_E_SHAPE);
    cr_assert_null(m);
    cr_assert(strstr(sx_last_error(), "user's loss") != NULL, "%s", sx_last_error());
    sx_nn_net_free(n1);
    sx_nn_net_free(n2);
    free_data(&d);
}

/* ---------------------------------------------------------------- parameter groups */

Test(optim_training, a_group_with_rate_zero_freezes_its_parameters)
{
    data d = make_data(2);
    sx_nn_net *net = make_net(SX_ACT_RELU, false);
    double before[64], after[64];
    int n = weights(net, before, 64);
    sx_nn_param_group frozen = {SX_GROUP_NOT_WEIGHTS, NULL, 0, 0};
    sx_nn_train_params p = base_params(SX_OPTIM_MOMENTUM, 0.05);
    p.groups = &frozen;
    p.n_groups = 1;
    train(net, &p, &d, 4, NULL);
    weights(net, after, 64);
    int changed_w = 0, changed_b = 0;
    for (int i = 0, at = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            const nn_param *pr = &net->layers[i]->params[k];
            for (int64_t j = 0; j < pr->value->size; j++, at++) {
                bool ch = before[at] != after[at];
                if (pr->regularised)
                    changed_w += ch;
                else
                    changed_b += ch;
            }
        }
    cr_assert_gt(changed_w, 0, "the weights train");
    cr_assert_eq(changed_b, 0, "the biases (rate 0) stay");
    (void)n;
    sx_nn_net_free(net);
    free_data(&d);
}

Test(optim_training, group_weight_decay_is_the_optimisers_for_its_parameters)
{
    data d = make_data(3);
    double a[64], b[64], c[64];
    sx_nn_net *n1 = make_net(SX_ACT_TANH, false), *n2 = make_net(SX_ACT_TANH, false),
              *n3 = make_net(SX_ACT_TANH, false);
    sx_nn_train_params p = base_params(SX_OPTIM_ADAMW, 0.01);
    p.optim.weight_decay = 0.3;
    train(n1, &p, &d, 5, NULL);
    /* the same decay given per group: the same bits */
    sx_nn_param_group both[2] = {{SX_GROUP_NAME, "weight", 1, 0.3},
                                 {SX_GROUP_NAME, "bias", 1, 0.3}};
    p.optim.weight_decay = 0;
    p.groups = both;
    p.n_groups = 2;
    train(n2, &p, &d, 5, NULL);
    /* no decay on biases: another result */
    sx_nn_param_group nobias[1] = {{SX_GROUP_NOT_WEIGHTS, NULL, 1, 0}};
    p.optim.weight_decay = 0.3;
    p.groups = nobias;
    p.n_groups = 1;
    train(n3, &p, &d, 5, NULL);
    int n = weights(n1, a, 64);
    weights(n2, b, 64);
    weights(n3, c, 64);
    cr_assert(memcmp(a, b, sizeof(double) * (size_t)n) == 0);
    cr_assert(memcmp(a, c, sizeof(double) * (size_t)n) != 0);
    /* a bad group is refused before anything runs */
    sx_nn_param_group bad = {SX_GROUP_NAME, NULL, 1, 0};
    p.groups = &bad;
    sx_ds_images none;
    memset(&none, 0, sizeof none);
    cr_assert_eq(sx_nn_train(n1, &p, &none, NULL, NULL), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "parameter group 0") != NULL, "%s", sx_last_error());
    sx_nn_net_free(n1);
    sx_nn_net_free(n2);
    sx_nn_net_free(n3);
    free_data(&d);
}

/* ---------------------------------------------------------------- schedules in the graph */

Test(optim_training, an_in_graph_schedule_trains_as_its_rates_fed_from_the_host)
{
    data d = make_data(4);
    const sx_nn_schedule_kind kinds[3] = {SX_SCHED_WARMUP, SX_SCHED_COSINE, SX_SCHED_ONE_CYCLE};
    for (int k = 0; k < 3; k++) {
        sx_nn_schedule s = sx_nn_schedule_default(kinds[k]);
        s.warmup_steps = kinds[k] == SX_SCHED_ONE_CYCLE ? 0 : 3;
        s.total_steps = 12;
        double a[64], b[64], c[64];
        sx_nn_net *n1 = make_net(SX_ACT_TANH, false), *n2 = make_net(SX_ACT_TANH, false),
                  *n3 = make_net(SX_ACT_TANH, false);
        sx_nn_train_params p = base_params(SX_OPTIM_SGD, 0.2);
        train(n1, &p, &d, 12, &s); /* constant schedule, the rates fed */
        p.schedule = s;
        train(n2, &p, &d, 12, NULL); /* the graph schedules from the base rate */
        p.schedule.kind = SX_SCHED_CONSTANT;
        train(n3, &p, &d, 12, NULL);
        int n = weights(n1, a, 64);
        weights(n2, b, 64);
        weights(n3, c, 64);
        double e = 0, e3 = 0;
        for (int i = 0; i < n; i++) {
            e = fmax(e, fabs(a[i] - b[i]));
            e3 = fmax(e3, fabs(a[i] - c[i]));
        }
        cr_assert_lt(e, 1e-12, "schedule %d: in the graph %.3g from the host's", (int)kinds[k], e);
        cr_assert_gt(e3, 1e-6, "schedule %d: no different from a constant rate", (int)kinds[k]);
        sx_nn_net_free(n1);
        sx_nn_net_free(n2);
        sx_nn_net_free(n3);
    }
    free_data(&d);
}

/* ---------------------------------------------------------------- activations */

/* The network's outputs for d.x: compiled for inference, and loaded back from a saved file. */
static void outputs(sx_nn_net *net, const data *d, double *live, double *loaded)
{
    sx_nn_model *m = NULL;
    int64_t os[2] = {B, OUT};
    sx_tensor *o = tu_zeros(SX_F64, 2, os);
    cr_assert_eq(sx_nn_compile_infer(net, B, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(m, d->x, o), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < B * OUT; i++)
        live[i] = sx_tensor_get(o, i);
    sx_nn_model_free(m);
    char path[128];
    snprintf(path, sizeof path, "/tmp/sx_training_act_%ld.sxm", (long)getpid());
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_load(path, B, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(m, d->x, o), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < B * OUT; i++)
        loaded[i] = sx_tensor_get(o, i);
    sx_nn_model_free(m);
    sx_tensor_free(o);
    remove(path);
}

Test(optim_training, new_activations_and_prelu_train_save_and_load_by_name)
{
    data d = make_data(5);
    const sx_nn_act acts[5] = {SX_ACT_GELU, SX_ACT_GELU_TANH, SX_ACT_SILU, SX_ACT_MISH,
                               SX_ACT_HARD_SWISH};
    for (int k = 0; k < 6; k++) {
        bool prelu = k == 5;
        sx_nn_act act = prelu ? SX_ACT_NONE : acts[k];
        sx_nn_act parsed = SX_ACT_COUNT;
        cr_assert_eq(sx_nn_act_parse(sx_nn_act_name(act), &parsed), SX_OK);
        cr_assert_eq(parsed, act);
        sx_nn_net *net = make_net(act, prelu);
        double before[64], after[64], live[B * OUT], loaded[B * OUT];
        int n = weights(net, before, 64);
        sx_nn_train_params p = base_params(SX_OPTIM_ADAM, 0.05);
        train(net, &p, &d, 5, NULL);
        weights(net, after, 64);
        int changed = 0;
        for (int i = 0; i < n; i++)
            changed += before[i] != after[i];
        cr_assert_eq(changed, n, "%s: every parameter trains",
                     prelu ? "prelu" : sx_nn_act_name(act));
        outputs(net, &d, live, loaded);
        cr_assert(memcmp(live, loaded, sizeof live) == 0, "%s: the loaded model differs",
                  prelu ? "prelu" : sx_nn_act_name(act));
        sx_nn_net_free(net);
    }
    sx_nn_act a = SX_ACT_RELU;
    cr_assert_eq(sx_nn_act_parse("swish", &a), SX_OK);
    cr_assert_eq(a, SX_ACT_SILU);
    cr_assert_eq(sx_nn_act_parse("gleu", &a), SX_E_ARG);
    cr_assert_eq(a, SX_ACT_SILU);
    free_data(&d);
}

/* PReLU's forward pass is max(0, x) + alpha min(0, x) per channel; a non-finite slope is refused */
Test(optim_training, prelu_is_relu_with_a_slope_per_channel)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("p", SX_F64, 1, &net), SX_OK);
    sx_nn_layer *l = sx_nn_input(net, 1, (int64_t[]){3});
    l = sx_nn_prelu(net, l, 0.25);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_tensor *alpha = net->layers[1]->params[0].value;
    cr_assert_eq(alpha->size, 3);
    sx_tensor_set(alpha, 1, -0.5);
    sx_tensor_set(alpha, 2, 2.0);
    double xv[6] = {-2, -2, -2, 1.5, 1.5, 1.5};
    sx_tensor *x = NULL, *o = NULL;
    int64_t s[2] = {2, 3};
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 2, s, xv, 6, &x), SX_OK);
    o = tu_zeros(SX_F64, 2, s);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 2, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(m, x, o), SX_OK, "%s", sx_last_error());
    const double want[6] = {-0.5, 1, -4, 1.5, 1.5, 1.5};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(sx_tensor_get(o, i), want[i], "element %d", i);
    sx_nn_model_free(m);
    sx_tensor_free(x);
    sx_tensor_free(o);
    cr_assert_null(sx_nn_prelu(net, l, (double)NAN));
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- gradient accumulation */

/* The batch's step from k micro-batches equals the whole batch's (to rounding: the gradient's
 * sums are split), for micro-batches of equal and of unequal sizes. */
Test(optim_training, accumulating_micro_batches_takes_the_whole_batchs_step)
{
    data d = make_data(6);
    double a[64], b[64];
    sx_nn_net *n1 = make_net(SX_ACT_TANH, false);
    sx_nn_train_params p = base_params(SX_OPTIM_ADAM, 0.02);
    p.l2 = 0.01;
    train(n1, &p, &d, 4, NULL);
    int n = weights(n1, a, 64);
    const int ks[3] = {2, 3, 8};
    for (int c = 0; c < 3; c++) {
        sx_nn_net *n2 = make_net(SX_ACT_TANH, false);
        p.accumulate = ks[c];
        train(n2, &p, &d, 4, NULL);
        weights(n2, b, 64);
        double e = 0;
        for (int i = 0; i < n; i++)
            e = fmax(e, fabs(a[i] - b[i]));
        cr_assert_lt(e, 1e-12, "accumulate %d: %.3g from the whole batch's step", ks[c], e);
        cr_assert_gt(e, 0, "accumulate %d: not split at all?", ks[c]);
        sx_nn_net_free(n2);
    }
    sx_nn_net_free(n1);
    free_data(&d);
}

/* A small conv net whose memory is its activations: input (12,12,1) -> conv 3x3 x 16 (relu) ->
 * conv 3x3 x 16 (relu) -> flatten -> linear (2). */
static sx_nn_net *make_conv_net(void)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("acc", SX_F64, 5, &net), SX_OK);
    sx_nn_layer *l = sx_nn_input(net, 3, (int64_t[]){12, 12, 1});
    sx_nn_conv2d_params c = sx_nn_conv2d_params_default(16, 3, 3);
    c.act = SX_ACT_RELU;
    l = sx_nn_conv2d(net, l, &c);
    l = sx_nn_conv2d(net, l, &c);
    l = sx_nn_linear(net, sx_nn_flatten(net, l), OUT, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

/* The point of accumulating: k micro-batches run one after another, so the planned arena holds
 * one micro-batch's activations, not the batch's (it failed, 1.03x, while the frozen order mixed
 * the micro-batches: 1136640 bytes against 1099776; now 383808); the step stays the whole
 * batch's. */
Test(optim_training, accumulation_plans_one_micro_batch_at_a_time)
{
    enum { NB = 32, NW = 6000 };
    sx_rng r;
    sx_rng_seed(&r, 3);
    int64_t xs[4] = {NB, 12, 12, 1}, ys[2] = {NB, OUT};
    sx_tensor *x = tu_rand(&r, SX_F64, 4, xs, -1, 1), *y = tu_rand(&r, SX_F64, 2, ys, -1, 1);
    size_t bytes[2];
    static double w[2][NW];
    int nw = 0;
    const int ks[2] = {1, 4};
    for (int c = 0; c < 2; c++) {
        sx_nn_net *net = make_conv_net();
        sx_nn_train_params p = base_params(SX_OPTIM_SGD, 0.05);
        p.accumulate = ks[c];
        sx_nn_model *m = NULL;
        cr_assert_eq(sx_nn_compile_train(net, &p, NB, &m), SX_OK, "%s", sx_last_error());
        bytes[c] = sx_nn_model_report(m).planned_bytes;
        for (int t = 1; t <= 2; t++)
            cr_assert_eq(sx_nn_model_step(m, x, y, p.optim.lr, t, NULL, NULL), SX_OK, "%s",
                         sx_last_error());
        sx_nn_model_free(m);
        nw = weights(net, w[c], NW);
        sx_nn_net_free(net);
    }
    cr_assert_lt((double)bytes[1], 0.5 * (double)bytes[0],
                 "accumulate 4 plans %zu bytes, the whole batch %zu", bytes[1], bytes[0]);
    double e = 0;
    for (int i = 0; i < nw; i++)
        e = fmax(e, fabs(w[0][i] - w[1][i]));
    cr_assert_lt(e, 1e-12, "accumulate 4: %.3g from the whole batch's step", e);
    cr_assert_gt(e, 0, "accumulate 4: not split at all?");
    sx_tensor_free(x);
    sx_tensor_free(y);
}

Test(optim_training, accumulation_refuses_batch_norm)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("bn", SX_F64, 1, &net), SX_OK);
    sx_nn_layer *l = sx_nn_input(net, 1, (int64_t[]){IN});
    l = sx_nn_batch_norm(net, sx_nn_linear(net, l, HID, SX_ACT_NONE), NULL);
    l = sx_nn_linear(net, l, OUT, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_nn_train_params p = base_params(SX_OPTIM_SGD, 0.1);
    p.accumulate = 2;
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, &p, B, &m), SX_E_UNSUPPORTED);
    cr_assert_null(m);
    cr_assert(strstr(sx_last_error(), "batch norm") != NULL, "%s", sx_last_error());
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- reduce-on-plateau in a fit */

/* A plateau that never sees an improvement after the first epoch (threshold 1e9) with patience 0
 * halves the rate from the third epoch on: sx_nn_fit trains as with those rates given
 * explicitly per epoch, bit for bit, watching the validation metric. */
Test(optim_training, reduce_on_plateau_scales_the_rate_between_epochs_of_a_fit)
{
    enum { NS = 64 };
    static double x[NS * IN], y[NS * OUT];
    sx_rng r;
    sx_rng_seed(&r, 9);
    for (int i = 0; i < NS * IN; i++)
        x[i] = 2 * sx_rng_uniform(&r) - 1;
    for (int i = 0; i < NS * OUT; i++)
        y[i] = 2 * sx_rng_uniform(&r) - 1;
    sx_ds_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.x_type = SX_DS_F64;
    sp.x_rank = 1;
    sp.x_shape[0] = IN;
    sp.x_scale = 1;
    sp.y_type = SX_DS_F64;
    sp.y_rank = 1;
    sp.y_shape[0] = OUT;
    sx_ds_source *src = NULL;
    cr_assert_eq(sx_ds_source_memory(&sp, NS, x, y, &src), SX_OK, "%s", sx_last_error());
    double rates[4] = {0.05, 0.05, 0.05 * 0.5, 0.05 * 0.5 * 0.5}, a[64], b[64];
    sx_nn_net *n1 = make_net(SX_ACT_TANH, false), *n2 = make_net(SX_ACT_TANH, false);
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train = base_params(SX_OPTIM_SGD, 0.05);
    p.train.epochs = 4;
    p.train.batch = 16;
    p.restore_best = false;
    p.train.schedule = sx_nn_schedule_default(SX_SCHED_PLATEAU);
    p.train.schedule.factor = 0.5;
    p.train.schedule.patience = 0;
    p.train.schedule.threshold = 1e9;
    cr_assert_eq(sx_nn_fit(n1, &p, src, src, NULL), SX_OK, "%s", sx_last_error());
    p.train.schedule = sx_nn_schedule_default(SX_SCHED_EXPLICIT);
    p.train.schedule.values = rates;
    p.train.schedule.n_values = 4;
    cr_assert_eq(sx_nn_fit(n2, &p, src, src, NULL), SX_OK, "%s", sx_last_error());
    int n = weights(n1, a, 64);
    weights(n2, b, 64);
    cr_assert(memcmp(a, b, sizeof(double) * (size_t)n) == 0, "plateau differs from its rates");
    /* and it did reduce: a constant rate trains differently */
    sx_nn_net *n3 = make_net(SX_ACT_TANH, false);
    p.train.schedule = sx_nn_schedule_default(SX_SCHED_CONSTANT);
    cr_assert_eq(sx_nn_fit(n3, &p, src, src, NULL), SX_OK, "%s", sx_last_error());
    weights(n3, b, 64);
    cr_assert(memcmp(a, b, sizeof(double) * (size_t)n) != 0);
    sx_nn_net_free(n1);
    sx_nn_net_free(n2);
    sx_nn_net_free(n3);
    sx_ds_source_free(src);
}
