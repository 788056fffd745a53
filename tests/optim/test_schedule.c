/* Learning-rate schedules: the in-graph ones (warmup, cosine, one_cycle) computed by
 * the graph equal their double formula (sx_nn_schedule_value) and PyTorch's schedulers' rates;
 * reduce-on-plateau follows PyTorch's ReduceLROnPlateau on a sequence of metrics. PyTorch's
 * values are in tests/optim/data/torch_schedules.txt, made once by
 * `/usr/bin/python3 tests/optim/torch_schedules.py > tests/optim/data/torch_schedules.txt`. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn_impl.h"

enum { MAXN = 64 };

typedef struct line {
    double lr;
    int n;
    double v[MAXN];
} line;

/* The line of tests/optim/data/torch_schedules.txt named `name` ("metrics" has no lr). */
static line read_line(const char *name)
{
    char path[1024];
    const char *file = __FILE__, *slash = strrchr(file, '/');
    snprintf(path, sizeof path, "%.*s/data/torch_schedules.txt", (int)(slash - file), file);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    char buf[4096];
    line l;
    memset(&l, 0, sizeof l);
    bool found = false;
    while (!found && fgets(buf, sizeof buf, f) != NULL) {
        char key[64];
        int at = 0;
        if (sscanf(buf, "%63s %n", key, &at) != 1 || strcmp(key, name) != 0)
            continue;
        char *p = buf + at;
        int used = 0;
        if (strcmp(name, "metrics") != 0) {
            cr_assert_eq(sscanf(p, "%lf %n", &l.lr, &used), 1);
            p += used;
        }
        cr_assert_eq(sscanf(p, "%d %n", &l.n, &used), 1);
        p += used;
        cr_assert(l.n > 0 && l.n <= MAXN);
        for (int i = 0; i < l.n; i++) {
            cr_assert_eq(sscanf(p, "%lf %n", &l.v[i], &used), 1, "%s[%d]", name, i);
            p += used;
        }
        found = true;
    }
    fclose(f);
    cr_assert(found, "no line '%s' in %s", name, path);
    return l;
}

static sx_nn_schedule schedule(const char *name)
{
    if (strcmp(name, "warmup") == 0) {
        sx_nn_schedule s = sx_nn_schedule_default(SX_SCHED_WARMUP);
        s.warmup_steps = 5;
        return s;
    }
    if (strcmp(name, "cosine") == 0) {
        sx_nn_schedule s = sx_nn_schedule_default(SX_SCHED_COSINE);
        s.total_steps = 20;
        s.min_lr = 0.001;
        return s;
    }
    sx_nn_schedule s = sx_nn_schedule_default(SX_SCHED_ONE_CYCLE);
    s.total_steps = 30;
    return s;
}

/* The rates the graph computes for steps 1..n of schedule s from base rate lr, in dtype dt. */
static void graph_rates(const sx_nn_schedule *s, double lr, int n, sx_dtype dt, double *out)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &g), SX_OK);
    sx_cg_node *l = sx_cg_input(g, "lr", dt, 0, NULL), *t = sx_cg_input(g, "step", dt, 0, NULL);
    sx_cg_node *r = sx_nn_schedule_node(g, s, l, t);
    cr_assert_not_null(r, "%s", sx_last_error());
    for (int i = 1; i <= n; i++) {
        sx_tensor *a = NULL, *b = NULL;
        cr_assert_eq(sx_tensor_scalar(dt, lr, &a), SX_OK);
        cr_assert_eq(sx_tensor_scalar(dt, i, &b), SX_OK);
        cr_assert_eq(sx_cg_input_set(g, l, a, SX_CG_COPY), SX_OK);
        cr_assert_eq(sx_cg_input_set(g, t, b, SX_CG_COPY), SX_OK);
        sx_tensor_free(a);
        sx_tensor_free(b);
        cr_assert_eq(sx_cg_eval(g, 1, &r), SX_OK, "%s", sx_last_error());
        out[i - 1] = sx_tensor_get(sx_cg_value(r), 0);
    }
    sx_cg_graph_free(g);
}

Test(optim_schedule, in_graph_schedules_give_pytorchs_rates)
{
    const char *names[3] = {"warmup", "cosine", "one_cycle"};
    for (int k = 0; k < 3; k++) {
        line want = read_line(names[k]);
        sx_nn_schedule s = schedule(names[k]);
        double got64[MAXN], got32[MAXN];
        graph_rates(&s, want.lr, want.n, SX_F64, got64);
        graph_rates(&s, want.lr, want.n, SX_F32, got32);
        for (int i = 0; i < want.n; i++) {
            double host = sx_nn_schedule_value(&s, want.lr, i + 1);
            cr_assert(fabs(host - want.v[i]) <= 1e-12 * want.v[i],
                      "%s step %d: %.17g, PyTorch %.17g", names[k], i + 1, host, want.v[i]);
            cr_assert(fabs(got64[i] - want.v[i]) <= 1e-12 * want.v[i],
                      "%s step %d (f64 graph): %.17g, PyTorch %.17g", names[k], i + 1, got64[i],
                      want.v[i]);
            cr_assert(fabs(got32[i] - want.v[i]) <= 1e-5 * want.v[i],
                      "%s step %d (f32 graph): %.9g, PyTorch %.9g", names[k], i + 1, got32[i],
                      want.v[i]);
        }
    }
}

Test(optim_schedule, reduce_on_plateau_follows_pytorchs)
{
    line metrics = read_line("metrics"), want = read_line("plateau");
    cr_assert_eq(metrics.n, want.n);
    sx_nn_schedule s = sx_nn_schedule_default(SX_SCHED_PLATEAU);
    s.factor = 0.5;
    s.patience = 1;
    double lr = want.lr, best = NAN;
    int bad = 0;
    for (int e = 0; e < metrics.n; e++) {
        cr_assert_eq(lr, want.v[e], "epoch %d: lr %.17g, PyTorch %.17g", e + 1, lr, want.v[e]);
        nn_plateau_epoch(&s, &lr, &best, &bad, metrics.v[e], false, 0);
    }
    /* accuracy is watched the other way: rising values never reduce the rate */
    lr = 0.1, best = NAN, bad = 0;
    for (int e = 0; e < 10; e++)
        nn_plateau_epoch(&s, &lr, &best, &bad, 0.5 + 0.01 * e, true, 0);
    cr_assert_eq(lr, 0.1);
}

Test(optim_schedule, a_schedule_that_cannot_run_is_refused)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    sx_cg_node *l = sx_cg_input(g, "lr", SX_F64, 0, NULL),
               *t = sx_cg_input(g, "step", SX_F64, 0, NULL);
    sx_nn_schedule s = sx_nn_schedule_default(SX_SCHED_COSINE); /* no total_steps */
    cr_assert_null(sx_nn_schedule_node(g, &s, l, t));
    cr_assert(strstr(sx_last_error(), "cosine") != NULL, "%s", sx_last_error());
    s = sx_nn_schedule_default(SX_SCHED_WARMUP); /* no warmup_steps */
    cr_assert_null(sx_nn_schedule_node(g, &s, l, t));
    s = sx_nn_schedule_default(SX_SCHED_ONE_CYCLE);
    s.total_steps = 3; /* a first phase of 0.9 steps */
    cr_assert_null(sx_nn_schedule_node(g, &s, l, t));
    cr_assert_null(sx_nn_schedule_node(g, NULL, l, t));
    /* a host schedule is the lr node itself */
    s = sx_nn_schedule_default(SX_SCHED_STEP);
    cr_assert_eq(sx_nn_schedule_node(g, &s, l, t), l);
    sx_cg_graph_free(g);
}
