/* LayerNorm, GroupNorm and InstanceNorm against PyTorch: outputs and the gradients of
 * sum(y * dy) with respect to x, gamma and beta. The reference values are
 * tests/data/torch_norm.txt, made by torch_norm.py beside it (its head says how to regenerate and
 * the file format). Each case runs as a lazy graph (sx_cg_layer_norm / group_norm /
 * instance_norm, then sx_ad_vjp with dy as the seed) and through the nn layer (inference output;
 * gamma and beta gradients from one compiled SGD step), in f64 (within 1e-10 relative to the
 * largest reference value of the tensor) and f32 (1e-5). Then the layers' save/load round trip
 * and their errors. */
#include "testutil.h"
#include "torch_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sx_autodiff.h>
#include <unistd.h>

#include "nn_impl.h"

/* A case's settings (tests/data/torch_norm.py): axes (layer) or groups (group) or 0, eps,
 * affine. */
static int case_arg(const tr_case *c)
{
    cr_assert_eq(c->n_num, 3, "%s: %d settings", c->name, c->n_num);
    return (int)c->num[0];
}

static bool case_affine(const tr_case *c)
{
    cr_assert_eq(c->n_num, 3, "%s: %d settings", c->name, c->n_num);
    return c->num[2] != 0;
}

static sx_cg_node *leaf(sx_cg_graph *g, sx_dtype dt, const tr_tensor *t)
{
    sx_tensor *v = tr_to_tensor(dt, t);
    sx_cg_node *n = sx_cg_param(g, t->name, v);
    sx_tensor_free(v);
    cr_assert_not_null(n, "%s", sx_last_error());
    return n;
}

static sx_cg_node *case_op(sx_cg_graph *g, const tr_case *c, sx_cg_node *x, sx_cg_node *gamma,
                           sx_cg_node *beta)
{
    if (strcmp(c->kind, "layer") == 0)
        return sx_cg_layer_norm(g, x, case_arg(c), gamma, beta, c->num[1]);
    if (strcmp(c->kind, "group") == 0)
        return sx_cg_group_norm(g, x, case_arg(c), gamma, beta, c->num[1]);
    return sx_cg_instance_norm(g, x, gamma, beta, c->num[1]);
}

/* The graph ops: y and the vector-Jacobian products with dy. */
static void run_graph(const tr_case *c, sx_dtype dt, double tol)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &g), SX_OK);
    sx_cg_node *x = leaf(g, dt, tr_tensor_of(c, "x")), *dy = leaf(g, dt, tr_tensor_of(c, "dy"));
    sx_cg_node *gamma = case_affine(c) ? leaf(g, dt, tr_tensor_of(c, "gamma")) : NULL;
    sx_cg_node *beta = case_affine(c) ? leaf(g, dt, tr_tensor_of(c, "beta")) : NULL;
    sx_cg_node *y = case_op(g, c, x, gamma, beta);
    cr_assert_not_null(y, "%s: %s", c->name, sx_last_error());
    sx_cg_node *wrt[3] = {x, gamma, beta}, *grads[3] = {NULL, NULL, NULL};
    int n = case_affine(c) ? 3 : 1;
    cr_assert_eq(sx_ad_vjp(g, y, dy, n, wrt, grads), SX_OK, "%s: %s", c->name, sx_last_error());
    sx_cg_node *outs[4] = {y, grads[0], grads[1], grads[2]};
    cr_assert_eq(sx_cg_eval(g, 1 + n, outs), SX_OK, "%s: %s", c->name, sx_last_error());
    tr_expect(c, "y", sx_cg_value(y), tr_tensor_of(c, "y"), tol);
    tr_expect(c, "dx", sx_cg_value(grads[0]), tr_tensor_of(c, "dx"), tol);
    if (case_affine(c)) {
        tr_expect(c, "dgamma", sx_cg_value(grads[1]), tr_tensor_of(c, "dgamma"), tol);
        tr_expect(c, "dbeta", sx_cg_value(grads[2]), tr_tensor_of(c, "dbeta"), tol);
    }
    sx_cg_graph_free(g);
}

/* A network of the case's layer alone, gamma and beta from the file. */
static sx_nn_net *case_net(const tr_case *c, sx_dtype dt)
{
    const tr_tensor *x = tr_tensor_of(c, "x");
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("norm", dt, 1, &net), SX_OK);
    sx_nn_layer *l = sx_nn_input(net, x->rank - 1, x->shape + 1);
    if (strcmp(c->kind, "layer") == 0) {
        sx_nn_layer_norm_params p = sx_nn_layer_norm_params_default();
        p.axes = case_arg(c), p.eps = c->num[1], p.affine = case_affine(c);
        l = sx_nn_layer_norm(net, l, &p);
    } else if (strcmp(c->kind, "group") == 0) {
        sx_nn_group_norm_params p = sx_nn_group_norm_params_default();
        p.groups = case_arg(c), p.eps = c->num[1], p.affine = case_affine(c);
        l = sx_nn_group_norm(net, l, &p);
    } else {
        sx_nn_instance_norm_params p = sx_nn_instance_norm_params_default();
        p.eps = c->num[1], p.affine = case_affine(c);
        l = sx_nn_instance_norm(net, l, &p);
    }
    cr_assert_not_null(l, "%s: %s", c->name, sx_last_error());
    cr_assert_eq(l->n_params, case_affine(c) ? 2 : 0);
    for (int k = 0; k < l->n_params; k++) {
        sx_tensor *v = tr_to_tensor(dt, tr_tensor_of(c, k == 0 ? "gamma" : "beta"));
        cr_assert(
            sx_shape_equal(v->rank, v->shape, l->params[k].value->rank, l->params[k].value->shape),
            "%s: parameter %d's shape", c->name, k);
        cr_assert_eq(sx_tensor_copy_out(v, l->params[k].value), SX_OK, "%s", sx_last_error());
        sx_tensor_free(v);
    }
    return net;
}

/* The nn layer: the inference output; then one compiled SGD step (rate 1) on the MSE loss with
 * targets y - dy N / 2 (N output elements), whose gradient with respect to the output is dy, so
 * each parameter moves by its PyTorch gradient. */
static void run_layer(const tr_case *c, sx_dtype dt, double tol)
{
    const tr_tensor *xr = tr_tensor_of(c, "x"), *yr = tr_tensor_of(c, "y"),
                    *dyr = tr_tensor_of(c, "dy");
    sx_nn_net *net = case_net(c, dt);
    sx_tensor *x = tr_to_tensor(dt, xr), *out = tu_zeros(dt, yr->rank, yr->shape);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, xr->shape[0], &m), SX_OK, "%s: %s", c->name,
                 sx_last_error());
    cr_assert_eq(sx_nn_model_predict(m, x, out), SX_OK, "%s: %s", c->name, sx_last_error());
    tr_expect(c, "layer y", out, yr, tol);
    sx_nn_model_free(m);
    if (case_affine(c)) {
        double *t = malloc((size_t)yr->size * sizeof *t);
        cr_assert_not_null(t);
        for (int64_t i = 0; i < yr->size; i++)
            t[i] = yr->v[i] - dyr->v[i] * (double)yr->size / 2;
        sx_tensor *target = NULL;
        cr_assert_eq(sx_tensor_from_doubles(dt, yr->rank, yr->shape, t, yr->size, &target), SX_OK);
        free(t);
        sx_nn_train_params p = sx_nn_train_params_default();
        p.loss = SX_LOSS_MSE;
        p.optim = sx_optim_params_default(SX_OPTIM_SGD);
        cr_assert_eq(sx_nn_compile_train(net, &p, xr->shape[0], &m), SX_OK, "%s: %s", c->name,
                     sx_last_error());
        sx_nn_layer *l = net->layers[1];
        sx_tensor *before[2];
        for (int k = 0; k < 2; k++)
            cr_assert_eq(sx_tensor_clone(l->params[k].value, &before[k]), SX_OK);
        double loss = 0;
        cr_assert_eq(sx_nn_model_step(m, x, target, 1.0, 1, &loss, NULL), SX_OK, "%s: %s", c->name,
                     sx_last_error());
        cr_assert(isfinite(loss), "%s: loss %g", c->name, loss);
        for (int k = 0; k < 2; k++) {
            sx_tensor *d = before[k];
            for (int64_t i = 0; i < d->size; i++)
                sx_tensor_set(d, i, sx_tensor_get(d, i) - sx_tensor_get(l->params[k].value, i));
            /* the step's difference of two numbers near 1: the dtype's rounding of them */
            tr_expect(c, k == 0 ? "layer dgamma" : "layer dbeta", d,
                      tr_tensor_of(c, k == 0 ? "dgamma" : "dbeta"), dt == SX_F64 ? 1e-10 : 1e-4);
            sx_tensor_free(d);
        }
        sx_nn_model_free(m);
        sx_tensor_free(target);
    }
    sx_tensor_free(x);
    sx_tensor_free(out);
    sx_nn_net_free(net);
}

Test(nn_norm, graph_ops_match_pytorch)
{
    FILE *f = tr_open("torch_norm.txt");
    tr_case c;
    int cases = 0, kinds[3] = {0, 0, 0};
    while (tr_read(f, &c)) {
        for (int d = 0; d < 2; d++)
            run_graph(&c, d ? SX_F64 : SX_F32, d ? 1e-10 : 1e-5);
        kinds[c.kind[0] == 'l' ? 0 : c.kind[0] == 'g' ? 1 : 2] += 1 + case_affine(&c);
        tr_free(&c);
        cases++;
    }
    fclose(f);
    cr_assert_eq(cases, 16, "%d cases", cases);
    for (int k = 0; k < 3; k++) /* each kind with and without affine */
        cr_assert(kinds[k] >= 3, "kind %d: %d", k, kinds[k]);
}

Test(nn_norm, layers_match_pytorch)
{
    FILE *f = tr_open("torch_norm.txt");
    tr_case c;
    int cases = 0;
    while (tr_read(f, &c)) {
        for (int d = 0; d < 2; d++)
            run_layer(&c, d ? SX_F64 : SX_F32, d ? 1e-10 : 1e-5);
        tr_free(&c);
        cases++;
    }
    fclose(f);
    cr_assert_eq(cases, 16, "%d cases", cases);
}

/* A network with the three layers (learned parameters not the defaults; instance norm first, as
 * a later one would undo the per-channel scale of the others): its saved model predicts what the
 * network does, bit for bit. */
Test(nn_norm, saved_models_keep_the_layers_and_parameters)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/sx_nn_norm_%ld.sxm", (long)getpid());
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("norms", SX_F32, 3, &net), SX_OK);
    sx_nn_layer *l = sx_nn_input(net, 3, (int64_t[]){4, 4, 6});
    sx_nn_instance_norm_params ip = sx_nn_instance_norm_params_default();
    ip.affine = true;
    l = sx_nn_instance_norm(net, l, &ip);
    sx_nn_group_norm_params gp = sx_nn_group_norm_params_default();
    gp.groups = 3;
    l = sx_nn_group_norm(net, l, &gp);
    sx_nn_layer_norm_params lp = sx_nn_layer_norm_params_default();
    lp.axes = 3;
    l = sx_nn_layer_norm(net, l, &lp);
    l = sx_nn_linear(net, sx_nn_flatten(net, l), 5, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_rng r;
    sx_rng_seed(&r, 11);
    int norms = 0;
    for (int i = 1; i <= 3; i++) {
        sx_nn_layer *nl = net->layers[i];
        cr_assert_eq(nl->n_params, 2, "layer %s", nl->name);
        for (int k = 0; k < 2; k++, norms++) {
            sx_tensor *v = nl->params[k].value;
            for (int64_t e = 0; e < v->size; e++)
                sx_tensor_set(v, e, sx_rng_uniform(&r) + (k == 0 ? 0.5 : -0.5));
        }
    }
    cr_assert_eq(norms, 6);
    cr_assert_eq(net->layers[3]->params[0].value->rank, 3, "layer norm's gamma is (h, w, c)");
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_model *m = NULL, *orig = NULL;
    cr_assert_eq(sx_nn_load(path, 3, &m), SX_OK, "%s", sx_last_error());
    unlink(path);
    cr_assert_eq(sx_nn_compile_infer(net, 3, &orig), SX_OK, "%s", sx_last_error());
    sx_tensor *x = tu_rand(&r, SX_F32, 4, (int64_t[]){3, 4, 4, 6}, -2, 2);
    sx_tensor *a = tu_zeros(SX_F32, 2, (int64_t[]){3, 5}),
              *b = tu_zeros(SX_F32, 2, (int64_t[]){3, 5});
    cr_assert_eq(sx_nn_model_predict(orig, x, a), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(m, x, b), SX_OK, "%s", sx_last_error());
    cr_assert_eq(memcmp(a->data, b->data, (size_t)a->size * sizeof(float)), 0,
                 "predictions differ: %.9g vs %.9g", sx_tensor_get(a, 0), sx_tensor_get(b, 0));
    /* the parameters matter: resetting gamma changes the original's output, not the file's */
    cr_assert_eq(sx_tensor_fill(net->layers[1]->params[0].value, 1.0), SX_OK);
    sx_nn_model_free(orig);
    cr_assert_eq(sx_nn_compile_infer(net, 3, &orig), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_predict(orig, x, a), SX_OK, "%s", sx_last_error());
    cr_assert_neq(memcmp(a->data, b->data, (size_t)a->size * sizeof(float)), 0);
    sx_tensor_free(x);
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_nn_model_free(orig);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
}

/* Bad options are clean errors naming the layer and the values; the network keeps the first. */
Test(nn_norm, bad_options_are_clean_errors)
{
    struct {
        int which; /* 0 layer, 1 group, 2 instance */
        int axes;
        int64_t groups;
        double eps;
        sx_status want;
        const char *text;
    } bad[] = {
        {0, 0, 1, 1e-5, SX_E_AXIS, "last 0 axes of an input (4,4,6)"},
        {0, 4, 1, 1e-5, SX_E_AXIS, "last 4 axes"},
        {0, 1, 1, 0, SX_E_ARG, "eps 0"},
        {1, 1, 4, 1e-5, SX_E_ARG, "4 groups do not divide the 6 channels"},
        {1, 1, 0, 1e-5, SX_E_ARG, "0 groups"},
        {1, 1, 2, NAN, SX_E_ARG, "eps nan"},
        {2, 1, 1, -1, SX_E_ARG, "eps -1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sx_nn_net *net = NULL;
        cr_assert_eq(sx_nn_net_new("bad", SX_F64, 1, &net), SX_OK);
        sx_nn_layer *in = sx_nn_input(net, 3, (int64_t[]){4, 4, 6}), *l;
        if (bad[i].which == 0) {
            sx_nn_layer_norm_params p = sx_nn_layer_norm_params_default();
            p.axes = bad[i].axes, p.eps = bad[i].eps;
            l = sx_nn_layer_norm(net, in, &p);
        } else if (bad[i].which == 1) {
            sx_nn_group_norm_params p = sx_nn_group_norm_params_default();
            p.groups = bad[i].groups, p.eps = bad[i].eps;
            l = sx_nn_group_norm(net, in, &p);
        } else {
            sx_nn_instance_norm_params p = sx_nn_instance_norm_params_default();
            p.eps = bad[i].eps;
            l = sx_nn_instance_norm(net, in, &p);
        }
        cr_assert_null(l, "case %zu", i);
        cr_assert_eq(sx_nn_net_status(net), bad[i].want, "case %zu: %s", i, sx_last_error());
        cr_assert_not_null(strstr(sx_last_error(), bad[i].text), "case %zu: \"%s\"", i,
                           sx_last_error());
        cr_assert_eq(net->n_layers, 1, "case %zu: a layer was added", i);
        sx_nn_net_free(net);
    }
    /* the graph constructors: groups not dividing, tail axes beyond the rank, half an affine */
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 3, (int64_t[]){2, 3, 6});
    cr_assert_null(sx_cg_group_norm(g, x, 4, NULL, NULL, 1e-5));
    cr_assert_eq(sx_cg_graph_status(g), SX_E_ARG, "%s", sx_last_error());
    cr_assert_not_null(strstr(sx_last_error(), "4 groups do not divide the 6 channels"), "%s",
                       sx_last_error());
    sx_cg_graph_status_clear(g);
    cr_assert_null(sx_cg_layer_norm(g, x, 4, NULL, NULL, 1e-5));
    cr_assert_eq(sx_cg_graph_status(g), SX_E_AXIS, "%s", sx_last_error());
    sx_cg_graph_status_clear(g);
    sx_cg_node *gamma = sx_cg_input(g, "gamma", SX_F64, 1, (int64_t[]){6});
    cr_assert_null(sx_cg_layer_norm(g, x, 1, gamma, NULL, 1e-5));
    cr_assert_eq(sx_cg_graph_status(g), SX_E_ARG, "%s", sx_last_error());
    sx_cg_graph_status_clear(g);
    cr_assert_null(sx_cg_layer_norm(g, x, 2, gamma, gamma, 1e-5)); /* gamma must be (3,6) */
    cr_assert_eq(sx_cg_graph_status(g), SX_E_SHAPE, "%s", sx_last_error());
    cr_assert_not_null(strstr(sx_last_error(), "want x's last 2 axes (3,6)"), "%s",
                       sx_last_error());
    sx_cg_graph_free(g);
}

/* Softmax and log-softmax layers over a non-last axis: the outputs (flattened, as a
 * saved model wants (batch, k)) are the definition's (per position of the other axes, over the
 * chosen one), negative axes count from the end, a saved model keeps the axis, and an axis out
 * of range is a clean error. */
Test(nn_norm, softmax_layers_over_any_axis)
{
    for (int lg = 0; lg < 2; lg++) {
        sx_nn_net *net = NULL;
        cr_assert_eq(sx_nn_net_new("sm", SX_F64, 1, &net), SX_OK);
        sx_nn_layer *l = sx_nn_input(net, 3, (int64_t[]){3, 4, 2});
        l = lg ? sx_nn_log_softmax(net, l, -3) : sx_nn_softmax(net, l, 0); /* both axis 0 */
        cr_assert_not_null(sx_nn_flatten(net, l), "%s", sx_last_error());  /* saved: (batch, k) */
        sx_rng r;
        sx_rng_seed(&r, 2);
        sx_tensor *x = tu_rand(&r, SX_F64, 4, (int64_t[]){2, 3, 4, 2}, -3, 3);
        sx_tensor *y = tu_zeros(SX_F64, 2, (int64_t[]){2, 24});
        sx_tensor *z = tu_zeros(SX_F64, 2, (int64_t[]){2, 24});
        sx_nn_model *m = NULL;
        cr_assert_eq(sx_nn_compile_infer(net, 2, &m), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_nn_model_predict(m, x, y), SX_OK, "%s", sx_last_error());
        for (int64_t n = 0; n < 2; n++)
            for (int64_t j = 0; j < 8; j++) { /* (4, 2) positions, 3 entries along axis 0 */
                double mx = -INFINITY, s = 0;
                for (int64_t i = 0; i < 3; i++)
                    mx = fmax(mx, SX_F64P(x)[n * 24 + i * 8 + j]);
                for (int64_t i = 0; i < 3; i++)
                    s += exp(SX_F64P(x)[n * 24 + i * 8 + j] - mx);
                for (int64_t i = 0; i < 3; i++) {
                    int64_t e = n * 24 + i * 8 + j;
                    double want = SX_F64P(x)[e] - mx - log(s);
                    if (!lg)
                        want = exp(want);
                    cr_assert(fabs(SX_F64P(y)[e] - want) <= 1e-14 * (1 + fabs(want)),
                              "log %d [%lld]: %.17g, want %.17g", lg, (long long)e, SX_F64P(y)[e],
                              want);
                }
            }
        char path[64];
        snprintf(path, sizeof path, "/tmp/sx_nn_softmax_%ld.sxm", (long)getpid());
        cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
        sx_nn_model *ld = NULL;
        cr_assert_eq(sx_nn_load(path, 2, &ld), SX_OK, "%s", sx_last_error());
        unlink(path);
        cr_assert_eq(sx_nn_model_predict(ld, x, z), SX_OK, "%s", sx_last_error());
        cr_assert_eq(memcmp(y->data, z->data, (size_t)y->size * sizeof(double)), 0);
        sx_nn_model_free(ld);
        sx_nn_model_free(m);
        sx_tensor_free(x);
        sx_tensor_free(y);
        sx_tensor_free(z);
        /* axes 3 and -4 of a rank-3 input */
        cr_assert_null(sx_nn_softmax(net, l, 3));
        cr_assert_eq(sx_nn_net_status(net), SX_E_AXIS);
        cr_assert_not_null(strstr(sx_last_error(), "axis 3 of an input (3,4,2) (want -3 to 2)"),
                           "%s", sx_last_error());
        sx_nn_net_free(net);
        cr_assert_eq(sx_nn_net_new("sm", SX_F64, 1, &net), SX_OK);
        l = sx_nn_input(net, 3, (int64_t[]){3, 4, 2});
        cr_assert_null(sx_nn_log_softmax(net, l, -4));
        cr_assert_eq(sx_nn_net_status(net), SX_E_AXIS);
        sx_nn_net_free(net);
    }
}

/* A softmax layer over the last axis ending a network trains exactly as the softmax activation:
 * the cross-entropy folds it in (the same loss, bit for bit, over a few steps). */
Test(nn_norm, softmax_layer_last_axis_folds_into_cross_entropy)
{
    double losses[2][3];
    for (int k = 0; k < 2; k++) {
        sx_nn_net *net = NULL;
        cr_assert_eq(sx_nn_net_new("ce", SX_F64, 7, &net), SX_OK);
        sx_nn_layer *l = sx_nn_input(net, 1, (int64_t[]){5});
        if (k == 0)
            l = sx_nn_linear(net, l, 4, SX_ACT_SOFTMAX);
        else
            l = sx_nn_softmax(net, sx_nn_linear(net, l, 4, SX_ACT_NONE), -1);
        cr_assert_not_null(l, "%s", sx_last_error());
        sx_rng r;
        sx_rng_seed(&r, 3);
        sx_tensor *x = tu_rand(&r, SX_F64, 2, (int64_t[]){6, 5}, -1, 1);
        sx_tensor *y = tu_zeros(SX_F64, 2, (int64_t[]){6, 4});
        for (int64_t i = 0; i < 6; i++)
            SX_F64P(y)[i * 4 + i % 4] = 1;
        sx_nn_train_params p = sx_nn_train_params_default();
        sx_nn_model *m = NULL;
        cr_assert_eq(sx_nn_compile_train(net, &p, 6, &m), SX_OK, "%s", sx_last_error());
        for (int s = 0; s < 3; s++)
            cr_assert_eq(sx_nn_model_step(m, x, y, 0.5, s + 1, &losses[k][s], NULL), SX_OK, "%s",
                         sx_last_error());
        sx_nn_model_free(m);
        sx_tensor_free(x);
        sx_tensor_free(y);
        sx_nn_net_free(net);
    }
    for (int s = 0; s < 3; s++)
        cr_assert_eq(losses[0][s], losses[1][s], "step %d: %.17g vs %.17g", s, losses[0][s],
                     losses[1][s]);
    cr_assert(losses[0][2] < losses[0][0], "the loss falls: %g -> %g", losses[0][0], losses[0][2]);
}
