/* Every optimiser against PyTorch's: the parameters after 10 steps, in f64, to 1e-6 relative.
 * tests/optim/data/torch_reference.txt holds PyTorch's results, computed once by
 * tests/optim/torch_reference.py (Debian's python3-torch; regenerate with
 * `/usr/bin/python3 tests/optim/torch_reference.py > tests/optim/data/torch_reference.txt`):
 * the test itself needs no torch. Each case trains w (3 x 4) on
 * sum((tanh(w) - x)^2) + sum(w c), with lr / (1 + 0.1 (t - 1)) fed as step t's rate. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sx_autodiff.h>

enum { N = 12, STEPS = 10, MAX_CASES = 32 };

typedef struct tcase {
    char name[64];
    sx_optim_params p;
    double want[N];
} tcase;

typedef struct tref {
    double w0[N], x[N], c[N];
    tcase cases[MAX_CASES];
    int n;
} tref;

/* "<key> v1 ... vN" into v; the line's key must be `key`. */
static void read_row(FILE *f, const char *key, double *v)
{
    char k[64];
    cr_assert_eq(fscanf(f, "%63s", k), 1, "torch_reference.txt: want '%s'", key);
    cr_assert_str_eq(k, key, "torch_reference.txt: want '%s', got '%s'", key, k);
    for (int i = 0; i < N; i++)
        cr_assert_eq(fscanf(f, "%lf", &v[i]), 1, "torch_reference.txt: %s[%d]", key, i);
}

static void read_ref(tref *r)
{
    char path[1024];
    const char *file = __FILE__, *slash = strrchr(file, '/');
    snprintf(path, sizeof path, "%.*s/data/torch_reference.txt", (int)(slash - file), file);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    char line[512];
    cr_assert_not_null(fgets(line, sizeof line, f)); /* the comment line */
    read_row(f, "w0", r->w0);
    read_row(f, "x", r->x);
    read_row(f, "c", r->c);
    r->n = 0;
    char word[64], kind[64];
    while (fscanf(f, "%63s", word) == 1) {
        cr_assert_str_eq(word, "case");
        cr_assert_lt(r->n, MAX_CASES);
        tcase *t = &r->cases[r->n++];
        double h[9];
        cr_assert_eq(fscanf(f, "%63s %63s", t->name, kind), 2);
        for (int i = 0; i < 9; i++)
            cr_assert_eq(fscanf(f, "%lf", &h[i]), 1, "case %s", t->name);
        sx_optim_kind k;
        cr_assert_eq(sx_optim_parse(kind, &k), SX_OK, "%s", sx_last_error());
        t->p = sx_optim_params_default(k);
        t->p.lr = h[0];
        t->p.momentum = h[1];
        t->p.dampening = h[2];
        cr_assert_eq(h[3] != 0, k == SX_OPTIM_NESTEROV);
        t->p.rho = h[4];
        t->p.beta1 = h[5];
        t->p.beta2 = h[6];
        t->p.eps = h[7];
        t->p.weight_decay = h[8];
        read_row(f, "w", t->want);
    }
    fclose(f);
    cr_assert_gt(r->n, 0);
}

static sx_cg_node *constant(sx_cg_graph *g, const double *v)
{
    int64_t s[2] = {3, 4};
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 2, s, v, N, &t), SX_OK);
    sx_cg_node *n = sx_cg_const(g, t);
    sx_tensor_free(t);
    return n;
}

static void set_scalar(sx_cg_graph *g, sx_cg_node *in, double v)
{
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_scalar(SX_F64, v, &t), SX_OK);
    cr_assert_eq(sx_cg_input_set(g, in, t, SX_CG_COPY), SX_OK, "%s", sx_last_error());
    sx_tensor_free(t);
}

/* w after 10 steps of optimiser p, optimised (fused) or not. */
static void train(const tref *r, const sx_optim_params *p, bool optimise, double *w_out)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    int64_t s[2] = {3, 4};
    sx_tensor *w0 = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, 2, s, r->w0, N, &w0), SX_OK);
    sx_cg_node *w = sx_cg_param(g, "w", w0);
    sx_tensor_free(w0);
    sx_cg_node *x = constant(g, r->x), *c = constant(g, r->c);
    sx_cg_node *lr = sx_cg_input(g, "lr", SX_F64, 0, NULL);
    sx_cg_node *step = sx_cg_input(g, "step", SX_F64, 0, NULL);
    sx_cg_node *loss = sx_cg_add(
        g, sx_cg_sum(g, sx_cg_sqr(g, sx_cg_sub(g, sx_cg_tanh(g, w), x)), SX_AXES_ALL, false),
        sx_cg_sum(g, sx_cg_mul(g, w, c), SX_AXES_ALL, false));
    sx_cg_node *gw = NULL;
    cr_assert_eq(sx_ad_grad(g, loss, 1, &w, &gw), SX_OK, "%s", sx_last_error());
    sx_cg_node *outs[5];
    int n = 0;
    cr_assert_eq(sx_optim_update(g, p, w, gw, lr, step, NULL, outs, &n), SX_OK, "%s",
                 sx_last_error());
    if (optimise)
        cr_assert_eq(sx_cg_optimise(g, n, outs, NULL, NULL), SX_OK, "%s", sx_last_error());
    for (int t = 1; t <= STEPS; t++) {
        set_scalar(g, lr, p->lr / (1 + 0.1 * (t - 1)));
        set_scalar(g, step, t);
        cr_assert_eq(sx_cg_eval(g, n, outs), SX_OK, "%s", sx_last_error());
    }
    for (int i = 0; i < N; i++)
        w_out[i] = sx_tensor_get(sx_cg_value(w), i);
    sx_cg_graph_free(g);
}

/* The largest |got - want| / |want| over the elements. */
static double worst(const double *got, const double *want)
{
    double e = 0;
    for (int i = 0; i < N; i++) {
        double d = fabs(got[i] - want[i]) / fabs(want[i]);
        e = d > e || isnan(d) ? d : e;
    }
    return e;
}

Test(optim_torch, every_optimiser_gives_pytorchs_parameters_after_ten_steps)
{
    static tref r;
    read_ref(&r);
    for (int i = 0; i < r.n; i++) {
        for (int o = 0; o < 2; o++) {
            double w[N];
            train(&r, &r.cases[i].p, o == 1, w);
            double e = worst(w, r.cases[i].want);
            cr_assert(e <= 1e-6, "%s (%s, %s): relative error %.3g against PyTorch",
                      r.cases[i].name, sx_optim_name(r.cases[i].p.kind),
                      o ? "optimised" : "unoptimised", e);
        }
    }
}

/* The check can fail: Keras's Adam (eps before the bias correction, strix's first Adam) is far from
 * PyTorch's on the same case, and so is Adam without its weight decay, and RMSprop without its
 * momentum. */
Test(optim_torch, adam_with_eps_before_the_bias_correction_is_not_pytorchs)
{
    static tref r;
    read_ref(&r);
    int checked = 0;
    for (int i = 0; i < r.n; i++) {
        sx_optim_params p = r.cases[i].p;
        if (strcmp(r.cases[i].name, "adam") == 0)
            p.kind = SX_OPTIM_ADAM_KERAS;
        else if (strcmp(r.cases[i].name, "adam_wd") == 0 || strcmp(r.cases[i].name, "adamw") == 0)
            p.weight_decay = 0;
        else if (strcmp(r.cases[i].name, "rmsprop_momentum_wd") == 0)
            p.kind = SX_OPTIM_RMSPROP;
        else
            continue;
        double w[N];
        train(&r, &p, false, w);
        cr_assert(worst(w, r.cases[i].want) > 1e-4, "%s: the variant matches PyTorch too",
                  r.cases[i].name);
        checked++;
    }
    cr_assert_eq(checked, 4);
}
