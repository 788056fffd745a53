/* Out of memory in nn and optim: the k-th allocation fails, for every k, while building a
 * network, compiling it (training and inference), running a step, predicting, saving, loading,
 * writing and reading checkpoints, building each optimiser's update, and over a whole small
 * training run. Every k must give SX_E_NOMEM (or success once k passes the last allocation),
 * never a crash, a leak or another status. Each scenario runs its whole life (objects made and
 * freed) under the failing allocator, so that the count of live allocations checks leaks. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"
#include "nn_layer_calls.h"

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sx_nn_oom_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

/* An allocator whose k-th allocation fails: with `only`, that one alone (the code goes on with
 * working allocations after the failure: a status lost on the way shows), else every one from
 * the k-th on (tu_fail_after). It counts live blocks for the leak check. */
static long fail_k, n_calls, n_live, n_failed;
static bool fail_only;

static bool fails_now(void)
{
    bool f = fail_only ? n_calls == fail_k : n_calls >= fail_k;
    n_calls++;
    n_failed += f;
    return f;
}

static void *k_alloc(void *ctx, size_t n)
{
    (void)ctx;
    if (fails_now())
        return NULL;
    void *p = malloc(n);
    n_live += p != NULL;
    return p;
}

static void *k_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    if (fails_now())
        return NULL;
    void *q = realloc(p, n);
    n_live += q != NULL && p == NULL;
    return q;
}

static void k_free(void *ctx, void *p)
{
    (void)ctx;
    n_live -= p != NULL;
    free(p);
}

/* What a scenario computed (its results summed), to check that a run which succeeded despite
 * a failed allocation (an optional one: a cache, an optimisation) computed the right thing. */
static double digest;

/* Run `fn` with the k-th allocation failing for k = 0, 1, ... until it runs without a failed
 * allocation, in both modes; every failure must be SX_E_NOMEM and leave nothing allocated, and
 * every success give the results of a run without failures (to `tol`, relative: a skipped
 * optimisation may round differently). */
static void every_k(const char *what, sx_status (*fn)(void *), void *ctx, double tol)
{
    digest = NAN;
    cr_assert_eq(fn(ctx), SX_OK, "%s: %s", what, sx_last_error());
    double want = digest;
    cr_assert(isfinite(want), "%s: no digest", what);
    for (int mode = 0; mode < 2; mode++) {
        fail_only = mode == 1;
        for (long k = 0;; k++) {
            fail_k = k, n_calls = n_live = n_failed = 0;
            digest = NAN;
            sx_allocator a = {k_alloc, k_realloc, k_free, NULL};
            sx_allocator_set(&a);
            sx_status s = fn(ctx);
            sx_allocator_set(NULL);
            const char *how = fail_only ? " alone" : " on";
            cr_assert_eq(n_live, 0, "%s, k=%ld%s: %ld allocations leaked (%s)", what, k, how,
                         n_live, sx_status_str(s));
            if (s == SX_OK) {
                cr_assert(fabs(digest - want) <= tol * fmax(1, fabs(want)),
                          "%s, k=%ld%s: success with results %.17g, want %.17g", what, k, how,
                          digest, want);
                if (n_failed == 0)
                    break;
                continue;
            }
            cr_assert_eq(s, SX_E_NOMEM, "%s, k=%ld%s: %s: %s", what, k, how, sx_status_str(s),
                         sx_last_error());
            cr_assert_lt(k, 100000, "%s: no end", what);
        }
    }
}

/* The sum of every stored tensor of a network (parameters, running statistics, optimiser
 * state) and its step count. */
static double net_digest(const sx_nn_net *net)
{
    double d = (double)net->step + (double)net->epoch;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            const nn_param *p = &net->layers[i]->params[k];
            for (int64_t e = 0; e < p->value->size; e++)
                d += sx_tensor_get(p->value, e);
            for (int j = 0; j < NN_MAX_STATES; j++)
                for (int64_t e = 0; p->state[j] != NULL && e < p->state[j]->size; e++)
                    d += sx_tensor_get(p->state[j], e);
        }
    return d;
}

/* Size and byte sum of a file. */
static double file_digest(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NAN;
    double d = 0;
    for (int c; (c = fgetc(f)) != EOF;)
        d += 1 + c;
    fclose(f);
    return d;
}

static double sum(const float *v, int n)
{
    double d = 0;
    for (int i = 0; i < n; i++)
        d += (double)v[i];
    return d;
}

static sx_cg_node *halve(sx_cg_graph *g, sx_cg_node *x, void *ctx)
{
    (void)ctx;
    return sx_cg_mul_scalar(g, x, 0.5);
}

/* A small network with every kind of layer that builds graph nodes of its own kind (dropout
 * masks, batch-norm updates, a lambda); NULL-tolerant. (6,6,1) -> 3 classes. */
static sx_status small_net(sx_nn_net **out)
{
    sx_nn_net *net = NULL;
    *out = NULL;
    SX_TRY(sx_nn_net_new("oom", SX_F32, 3, &net));
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){6, 6, 1});
    x = sx_nn_lambda(net, x, halve, NULL, "halve");
    x = t_conv2d(net, x, 3, 3, 2, 1, SX_PAD_SAME, SX_ACT_RELU);
    x = t_batch_norm(net, x, 0.9, 1e-3);
    x = t_max_pool2d(net, x, 2, 2, 2, SX_PAD_VALID);
    x = sx_nn_dropout(net, x, 0.25);
    x = sx_nn_fully_connected(net, x, 4, SX_ACT_TANH);
    x = sx_nn_linear(net, x, 3, SX_ACT_SOFTMAX);
    sx_status s = sx_nn_net_status(net);
    if (s != SX_OK) {
        sx_nn_net_free(net);
        return s;
    }
    *out = net;
    return SX_OK;
}

/* x (n,6,6,1) in [0,1) and one-hot y (n,3), made with malloc outside the failing allocator. */
typedef struct data {
    float x[8 * 36], y[8 * 3];
} data;

static void data_fill(data *d)
{
    sx_rng r;
    sx_rng_seed(&r, 9);
    for (int i = 0; i < 8 * 36; i++)
        d->x[i] = (float)sx_rng_uniform(&r);
    memset(d->y, 0, sizeof d->y);
    for (int i = 0; i < 8; i++)
        d->y[i * 3 + i % 3] = 1;
}

typedef struct scene {
    data d;
    sx_optim_kind kind;
    bool eager;
    const char *path;  /* a model or checkpoint file */
    sx_nn_net *net;    /* made outside the failing allocator, for the save scenarios */
    sx_ds_images imgs; /* for the training loop */
} scene;

static sx_status train_steps(void *ctx)
{
    scene *c = ctx;
    sx_nn_net *net = NULL;
    sx_nn_model *m = NULL;
    SX_TRY(small_net(&net));
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim = sx_optim_params_default(c->kind);
    p.clip_norm = 1;
    p.l2 = 1e-4;
    sx_tensor x = sx_tensor_view(SX_F32, 4, (int64_t[]){4, 6, 6, 1}, c->d.x);
    sx_tensor y = sx_tensor_view(SX_F32, 2, (int64_t[]){4, 3}, c->d.y);
    double loss = 0;
    sx_status s = SX_OK;
    if (c->eager) {
        s = nn_eager_step(net, &p, &x, &y, 0.01, 1, &loss, NULL); /* builds everything */
    } else {
        s = sx_nn_compile_train(net, &p, 4, &m);
        for (int step = 1; s == SX_OK && step <= 2; step++)
            s = sx_nn_model_step(m, &x, &y, 0.01, step, &loss, NULL);
    }
    if (s == SX_OK)
        digest = loss + net_digest(net);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
    return s;
}

Test(nn_oom, compile_and_train_with_every_optimiser, .timeout = 300)
{
    scene c;
    data_fill(&c.d);
    c.eager = false;
    for (int k = 0; k < SX_OPTIM_COUNT; k++) {
        c.kind = (sx_optim_kind)k;
        every_k(sx_optim_name(c.kind), train_steps, &c, 1e-4);
    }
}

Test(nn_oom, eager_step, .timeout = 300)
{
    scene c;
    data_fill(&c.d);
    c.eager = true;
    c.kind = SX_OPTIM_ADAM;
    every_k("eager adam", train_steps, &c, 1e-4);
}

static sx_status infer(void *ctx)
{
    scene *c = ctx;
    sx_nn_net *net = NULL;
    sx_nn_model *m = NULL;
    SX_TRY(small_net(&net));
    float out[8 * 3];
    sx_tensor x = sx_tensor_view(SX_F32, 4, (int64_t[]){4, 6, 6, 1}, c->d.x);
    sx_tensor y = sx_tensor_view(SX_F32, 2, (int64_t[]){4, 3}, out);
    sx_tensor x3 = sx_tensor_view(SX_F32, 4, (int64_t[]){3, 6, 6, 1}, c->d.x);
    sx_tensor y3 = sx_tensor_view(SX_F32, 2, (int64_t[]){3, 3}, out);
    sx_status s = sx_nn_compile_infer(net, 4, &m);
    if (s == SX_OK)
        s = sx_nn_model_predict(m, &x, &y);
    double d = 0;
    if (s == SX_OK) {
        d = sum(out, 12);
        /* a smaller batch: a graph made on demand in m's arena */
        s = sx_nn_model_predict(m, &x3, &y3);
    }
    if (s == SX_OK)
        digest = d + sum(out, 9);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
    return s;
}

Test(nn_oom, compile_for_inference_and_predict)
{
    scene c;
    data_fill(&c.d);
    every_k("inference", infer, &c, 1e-5);
}

static sx_status save(void *ctx)
{
    scene *c = ctx;
    unlink(c->path);
    sx_status s = sx_nn_save(c->net, c->path);
    if (s == SX_OK)
        digest = file_digest(c->path);
    return s;
}

static sx_status load(void *ctx)
{
    scene *c = ctx;
    sx_nn_model *m = NULL;
    SX_TRY(sx_nn_load(c->path, 4, &m));
    float out[8 * 3];
    sx_tensor x = sx_tensor_view(SX_F32, 4, (int64_t[]){2, 6, 6, 1}, c->d.x);
    sx_tensor y = sx_tensor_view(SX_F32, 2, (int64_t[]){2, 3}, out);
    sx_status s = sx_nn_model_predict(m, &x, &y);
    if (s == SX_OK)
        digest = sum(out, 6);
    sx_nn_model_free(m);
    return s;
}

Test(nn_oom, save_and_load_a_model, .init = make_tmpdir, .fini = remove_tmpdir)
{
    scene c;
    data_fill(&c.d);
    char path[128];
    snprintf(path, sizeof path, "%s/m.sxm", tmpdir);
    c.path = path;
    cr_assert_eq(small_net(&c.net), SX_OK, "%s", sx_last_error());
    every_k("save", save, &c, 0);
    every_k("load", load, &c, 1e-5);
    sx_nn_net_free(c.net);
}

static sx_status checkpoint_save(void *ctx)
{
    scene *c = ctx;
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    unlink(c->path);
    sx_status s = nn_checkpoint_save(c->net, &p, c->path);
    if (s == SX_OK)
        digest = file_digest(c->path);
    return s;
}

static sx_status checkpoint_load(void *ctx)
{
    scene *c = ctx;
    sx_nn_net *net = NULL;
    SX_TRY(small_net(&net));
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.verbose = 0;
    sx_status s = nn_checkpoint_load(net, &p, c->path);
    if (s == SX_OK)
        digest = net_digest(net);
    sx_nn_net_free(net);
    return s;
}

Test(nn_oom, write_and_read_a_checkpoint, .init = make_tmpdir, .fini = remove_tmpdir)
{
    scene c;
    data_fill(&c.d);
    char path[128];
    snprintf(path, sizeof path, "%s/c.ckpt", tmpdir);
    c.path = path;
    /* a network with Adam's state, after one step */
    cr_assert_eq(small_net(&c.net), SX_OK, "%s", sx_last_error());
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    sx_tensor x = sx_tensor_view(SX_F32, 4, (int64_t[]){4, 6, 6, 1}, c.d.x);
    sx_tensor y = sx_tensor_view(SX_F32, 2, (int64_t[]){4, 3}, c.d.y);
    cr_assert_eq(nn_eager_step(c.net, &p, &x, &y, 0.01, 1, NULL, NULL), SX_OK, "%s",
                 sx_last_error());
    every_k("checkpoint save", checkpoint_save, &c, 0);
    every_k("checkpoint load", checkpoint_load, &c, 0);
    sx_nn_net_free(c.net);
}

/* Each optimiser's update of a (3,2) parameter, with states made by the builder and given by
 * the caller, evaluated once. */
static sx_status optimiser(void *ctx)
{
    const scene *c = ctx;
    sx_cg_graph *g = NULL;
    SX_TRY(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g));
    double w[6] = {1, -2, 3, 0.5, -0.25, 2}, gr[6] = {0.1, 0.2, -0.3, 0.4, 0.5, -0.6};
    sx_tensor wt = sx_tensor_view(SX_F64, 2, (int64_t[]){3, 2}, w);
    sx_tensor gt = sx_tensor_view(SX_F64, 2, (int64_t[]){3, 2}, gr);
    sx_cg_node *p = sx_cg_param(g, "w", &wt), *q = sx_cg_param(g, "q", &wt);
    sx_cg_node *grad = sx_cg_const(g, &gt);
    sx_cg_node *lr = sx_cg_scalar_of(g, SX_F64, 0.1), *step = sx_cg_scalar_of(g, SX_F64, 1);
    double sv[6] = {0.5, 0.25, 1, 2, 0.125, 4}; /* states >= 0 (sums of squares among them) */
    /* a centered RMSprop's mean gradient: its square below the mean square, so the variance
     * stays positive */
    double mg[6] = {0.1, 0.2, -0.3, 0.4, 0.1, -0.5};
    sx_tensor st = sx_tensor_view(SX_F64, 2, (int64_t[]){3, 2}, sv);
    sx_tensor st1 = sx_tensor_view(SX_F64, 2, (int64_t[]){3, 2},
                                   c->kind == SX_OPTIM_RMSPROP_CENTERED ? mg : sv);
    sx_cg_node *states[3] = {sx_cg_param(g, "s0", &st), sx_cg_param(g, "s1", &st1),
                             sx_cg_param(g, "s2", &st)};
    sx_status s = sx_cg_graph_status(g);
    sx_optim_params op = sx_optim_params_default(c->kind);
    sx_cg_node *ups[8];
    int n1 = 0, n2 = 0;
    if (s == SX_OK)
        s = sx_optim_update(g, &op, p, grad, lr, step, NULL, ups, &n1);
    if (s == SX_OK)
        s = sx_optim_update(g, &op, q, grad, lr, step, states, ups + n1, &n2);
    if (s == SX_OK)
        s = sx_cg_eval(g, n1 + n2, ups);
    if (s == SX_OK) {
        digest = 0;
        for (int i = 0; i < n1 + n2; i++)
            for (int64_t e = 0; e < sx_cg_value(ups[i])->size; e++)
                digest += sx_tensor_get(sx_cg_value(ups[i]), e);
    }
    sx_cg_graph_free(g);
    return s;
}

Test(nn_oom, every_optimiser_builds_its_update)
{
    scene c;
    for (int k = 0; k < SX_OPTIM_COUNT; k++) {
        c.kind = (sx_optim_kind)k;
        every_k(sx_optim_name(c.kind), optimiser, &c, 1e-12);
    }
}

/* A whole run: batches, the compiled model and the one of the last partial batch, the test set
 * evaluated, a checkpoint written (reading one: write_and_read_a_checkpoint). */
static sx_status training_run(void *ctx)
{
    scene *c = ctx;
    sx_nn_net *net = NULL;
    SX_TRY(small_net(&net));
    sx_nn_train_params p = sx_nn_train_params_default();
    p.verbose = 0;
    p.batch = 4;
    p.checkpoint_path = c->path;
    unlink(c->path);
    sx_nn_train_report r;
    sx_status s = sx_nn_train(net, &p, &c->imgs, &c->imgs, &r);
    if (s == SX_OK)
        digest = net_digest(net) + r.test_accuracy + file_digest(c->path) * 1e-9;
    sx_nn_net_free(net);
    return s;
}

Test(nn_oom, a_small_training_run_with_checkpoints, .init = make_tmpdir, .fini = remove_tmpdir,
     .timeout = 300)
{
    scene c;
    char path[128];
    snprintf(path, sizeof path, "%s/run.ckpt", tmpdir);
    c.path = path;
    uint8_t pixels[6 * 36], labels[6];
    for (int i = 0; i < 6 * 36; i++)
        pixels[i] = (uint8_t)(i * 37 % 251);
    for (int i = 0; i < 6; i++)
        labels[i] = (uint8_t)(i % 3);
    c.imgs = (sx_ds_images){.n = 6, .h = 6, .w = 6, .c = 1, .classes = 3};
    c.imgs.pixels = pixels;
    c.imgs.labels = labels;
    every_k("training run", training_run, &c, 1e-4);
}
