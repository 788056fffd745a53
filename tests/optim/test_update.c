/* The optimisers' updates (sx_optim_update): each is its formula in element-wise graph ops and
 * assigns, whose steps equal the reference formula (tu_optim_reference) bit for bit, in f32 and
 * f64, unoptimised and optimised; optimised, the step is one fused update per parameter writing
 * the parameter and its states in one pass; and an unoptimised training graph saved with its
 * assigns loads and trains the same. */
#include "testutil.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <sx_autodiff.h>

static int64_t count_op(const sx_cg_graph *g, sx_cg_op op)
{
    int64_t c = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        c += n != NULL && sx_cg_node_op(n) == op;
    }
    return c;
}

static int64_t count_updates(const sx_cg_graph *g)
{
    int64_t c = 0;
    for (int op = 0; op < SX_OP_COUNT; op++)
        if (sx_cg_op_flags((sx_cg_op)op) & SX_OPF_UPDATE)
            c += count_op(g, (sx_cg_op)op);
    return c;
}

static void set_scalar(sx_cg_graph *g, sx_cg_node *in, sx_dtype dt, double v)
{
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_scalar(dt, v, &t), SX_OK);
    cr_assert_eq(sx_cg_input_set(g, in, t, SX_CG_COPY), SX_OK, "%s", sx_last_error());
    sx_tensor_free(t);
}

/* A graph training w (7 x 9) on sum((tanh(w) - x)^2): its loss first, then the update handles. */
typedef struct net {
    sx_cg_graph *g;
    sx_cg_node *w, *x, *lr, *step, *outs[5];
    int n;
} net;

typedef enum { REFERENCE, FUSED, FUSED_OPTIMISED } variant;

/* The hyper-parameters of case c: c < SX_OPTIM_COUNT is kind c's defaults; then momentum with
 * dampening, nesterov with weight decay, adam with weight decay (L2 in the gradient). */
enum { CASE_DAMPENED = SX_OPTIM_COUNT, CASE_NESTEROV_WD, CASE_ADAM_WD, N_CASES };

static sx_optim_params case_params(int c)
{
    if (c < SX_OPTIM_COUNT)
        return sx_optim_params_default((sx_optim_kind)c);
    sx_optim_params p = sx_optim_params_default(c == CASE_DAMPENED      ? SX_OPTIM_MOMENTUM
                                                : c == CASE_NESTEROV_WD ? SX_OPTIM_NESTEROV
                                                                        : SX_OPTIM_ADAM);
    if (c == CASE_DAMPENED)
        p.dampening = 0.3;
    else
        p.weight_decay = 0.02;
    return p;
}

static net net_build_p(sx_optim_params op, variant v, sx_dtype dt);

static net net_build(sx_optim_kind k, variant v, sx_dtype dt)
{
    return net_build_p(sx_optim_params_default(k), v, dt);
}

static net net_build_p(sx_optim_params op, variant v, sx_dtype dt)
{
    const sx_optim_kind k = op.kind;
    net t;
    memset(&t, 0, sizeof t);
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &t.g), SX_OK);
    sx_rng r;
    sx_rng_seed(&r, 99);
    int64_t s[2] = {7, 9};
    sx_tensor *w0 = tu_rand(&r, dt, 2, s, -1, 1);
    t.w = sx_cg_param(t.g, "w", w0);
    sx_tensor_free(w0);
    t.x = sx_cg_input(t.g, "x", dt, 2, s);
    t.lr = sx_cg_input(t.g, "lr", dt, 0, NULL);
    t.step = sx_cg_input(t.g, "step", dt, 0, NULL);
    sx_cg_graph *g = t.g;
    t.outs[0] =
        sx_cg_sum(g, sx_cg_sqr(g, sx_cg_sub(g, sx_cg_tanh(g, t.w), t.x)), SX_AXES_ALL, false);
    sx_cg_node *gw = NULL;
    cr_assert_eq(sx_ad_grad(g, t.outs[0], 1, &t.w, &gw), SX_OK, "%s", sx_last_error());
    op.lr = 0.05;
    int nu = 0;
    if (v == REFERENCE) {
        nu = tu_optim_reference(g, &op, t.w, gw, t.lr, t.step, NULL, t.outs + 1);
    } else {
        cr_assert_eq(sx_optim_update(g, &op, t.w, gw, t.lr, t.step, NULL, t.outs + 1, &nu), SX_OK,
                     "%s", sx_last_error());
        cr_assert_eq(nu, sx_optim_n_states(k) + 1, "%s: one handle per written tensor",
                     sx_optim_name(k));
        cr_assert_eq(count_updates(g), 0, "%s: no update node, unoptimised", sx_optim_name(k));
        cr_assert_eq(count_op(g, SX_OP_ASSIGN), nu, "%s: one assign per written tensor",
                     sx_optim_name(k));
    }
    t.n = nu + 1;
    if (v == FUSED_OPTIMISED) {
        cr_assert_eq(sx_cg_optimise(g, t.n, t.outs, NULL, NULL), SX_OK, "%s", sx_last_error());
        cr_assert_eq(count_updates(g), 1, "%s: one update node, optimised", sx_optim_name(k));
        cr_assert_eq(count_op(g, SX_OP_ASSIGN), 0, "%s: every assign fused", sx_optim_name(k));
        cr_assert_eq(count_op(g, SX_OP_SEQ), nu - 1, "%s: a handle per state", sx_optim_name(k));
    }
    sx_tensor *xv = tu_rand(&r, dt, 2, s, -0.5, 0.5);
    cr_assert_eq(sx_cg_input_set(g, t.x, xv, SX_CG_COPY), SX_OK);
    sx_tensor_free(xv);
    return t;
}

/* Three steps: lr = 0.05 / step (a decaying schedule fed as an input), step = 1, 2, 3. */
static void net_train(net *t, sx_dtype dt)
{
    for (int it = 1; it <= 3; it++) {
        set_scalar(t->g, t->lr, dt, 0.05 / it);
        set_scalar(t->g, t->step, dt, it);
        cr_assert_eq(sx_cg_eval(t->g, t->n, t->outs), SX_OK, "%s", sx_last_error());
    }
}

/* Every parameter of g (weight and states) concatenated in node order, as bytes. */
static sx_tensor *params_of(const sx_cg_graph *g, sx_dtype dt)
{
    int64_t total = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *nd = sx_cg_graph_node(g, i);
        if (nd && sx_cg_node_op(nd) == SX_OP_PARAM)
            total += sx_cg_node_size(nd);
    }
    sx_tensor *all = NULL;
    cr_assert_eq(sx_tensor_new(dt, 1, &total, &all), SX_OK);
    int64_t at = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *nd = sx_cg_graph_node(g, i);
        if (nd && sx_cg_node_op(nd) == SX_OP_PARAM)
            for (int64_t j = 0; j < sx_cg_node_size(nd); j++)
                sx_tensor_set(all, at++, sx_tensor_get(sx_cg_value(nd), j));
    }
    return all;
}

static bool same_bits(const sx_tensor *a, const sx_tensor *b)
{
    return a->size == b->size && a->dtype == b->dtype &&
           memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)) == 0;
}

static sx_tensor *trained(int c, variant v, sx_dtype dt)
{
    net t = net_build_p(case_params(c), v, dt);
    net_train(&t, dt);
    sx_tensor *all = params_of(t.g, dt);
    sx_cg_graph_free(t.g);
    return all;
}

Test(optim_update, every_optimiser_emits_one_fused_update_equal_to_its_reference_formula)
{
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = (sx_dtype)d;
        for (int k = 0; k < N_CASES; k++) {
            sx_tensor *ref = trained(k, REFERENCE, dt);
            sx_tensor *fused = trained(k, FUSED, dt);
            sx_tensor *opt = trained(k, FUSED_OPTIMISED, dt);
            cr_assert(same_bits(ref, fused),
                      "%s (case %d) %s: the fused step differs from the formula",
                      sx_optim_name(case_params(k).kind), k, sx_dtype_name(dt));
            cr_assert(same_bits(ref, opt),
                      "%s (case %d) %s: optimised, the step differs from the formula",
                      sx_optim_name(case_params(k).kind), k, sx_dtype_name(dt));
            sx_tensor_free(ref);
            sx_tensor_free(fused);
            sx_tensor_free(opt);
        }
    }
}

/* The optimised step of kind k on a weight of 1000 elements: its one update node (the last
 * handle) writes the weight and every state, by one store each, in one program; each state's
 * handle is a seq of the state after it; and the graph holds nothing else of the weight's size
 * but the gradient. */
static void one_pass(sx_optim_params p, sx_dtype dt)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &g), SX_OK);
    int64_t s[1] = {1000};
    sx_tensor *z = tu_zeros(dt, 1, s);
    sx_cg_node *w = sx_cg_param(g, "w", z), *gr = sx_cg_input(g, "g", dt, 1, s);
    sx_cg_node *lr = sx_cg_input(g, "lr", dt, 0, NULL), *st = sx_cg_input(g, "t", dt, 0, NULL);
    sx_cg_node *ups[4];
    int n = 0;
    cr_assert_eq(sx_optim_update(g, &p, w, gr, lr, st, NULL, ups, &n), SX_OK, "%s",
                 sx_last_error());
    cr_assert_eq(sx_cg_optimise(g, n, ups, NULL, NULL), SX_OK, "%s", sx_last_error());
    const char *k = sx_optim_name(p.kind);
    sx_cg_node *u = ups[n - 1];
    cr_assert_eq(sx_cg_node_op(u), SX_OP_FUSED_UPDATE, "%s: %s", k,
                 sx_cg_op_name(sx_cg_node_op(u)));
    cr_assert_eq(sx_cg_node_input(u, 0), w);
    const sx_cg_attr *a = sx_cg_node_attr(u);
    cr_assert_eq(a->ints[0], n, "%s: writes the weight and its states", k);
    int stores = 0;
    for (int i = 0; i < a->prog.n; i++)
        stores += a->prog.ins[i].kind == SX_FUSED_STORE;
    cr_assert_eq(stores, n, "%s", k);
    for (int i = 0; i + 1 < n; i++) {
        cr_assert_eq(sx_cg_node_op(ups[i]), SX_OP_SEQ, "%s: state handles are seq", k);
        cr_assert_eq(sx_cg_node_input(ups[i], 1), u);
        bool written = false; /* the state is among the inputs it writes */
        for (int j = 1; j < n; j++)
            written |= sx_cg_node_input(u, j) == sx_cg_node_input(ups[i], 0);
        cr_assert(written, "%s: state %d", k, i);
    }
    int64_t big = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *x = sx_cg_graph_node(g, i);
        big += x != NULL && sx_cg_node_size(x) == 1000 && sx_cg_node_op(x) != SX_OP_PARAM &&
               sx_cg_node_op(x) != SX_OP_SEQ;
    }
    cr_assert_eq(big, 2, "%s: %lld nodes of the weight's size (want the gradient and the update)",
                 k, (long long)big);
    sx_tensor_free(z);
    sx_cg_graph_free(g);
}

Test(optim_update, an_optimised_step_is_one_pass_writing_the_weight_and_its_states)
{
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < SX_OPTIM_COUNT + 2; k++) {
            sx_optim_params p =
                sx_optim_params_default(k < SX_OPTIM_COUNT ? (sx_optim_kind)k : SX_OPTIM_MOMENTUM);
            if (k == SX_OPTIM_COUNT) /* dampening */
                p.dampening = 0.3;
            if (k == SX_OPTIM_COUNT + 1) { /* weight decay in the gradient */
                p.kind = SX_OPTIM_AMSGRAD;
                p.weight_decay = 0.01;
            }
            one_pass(p, (sx_dtype)d);
        }
}

/* An unoptimised training graph (assigns as optim/ emits them) saved, loaded, and trained
 * three steps next to the original: the same bits, and the update keeps its attributes. */
Test(optim_update, an_unoptimised_training_graph_saves_loads_and_trains_the_same)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/sx_optim_update_%ld.sxm", (long)getpid());
    for (int k = 0; k < SX_OPTIM_COUNT; k++) {
        net a = net_build((sx_optim_kind)k, FUSED, SX_F64);
        sx_cg_node *outs[10];
        const char *names[10] = {"loss", "u1", "u2", "u3", "u4"};
        int n = 0;
        for (; n < a.n; n++)
            outs[n] = a.outs[n];
        const char *handles[4] = {"w", "x", "lr", "step"};
        sx_cg_node *hn[4] = {a.w, a.x, a.lr, a.step};
        for (int i = 0; i < 4; i++) {
            names[n] = handles[i];
            outs[n++] = hn[i];
        }
        cr_assert_eq(sx_cg_save(a.g, n, outs, names, 0, NULL, NULL, 0, NULL, NULL, path), SX_OK,
                     "%s", sx_last_error());
        sx_cg_file *f = NULL;
        cr_assert_eq(sx_cg_file_read(path, &f), SX_OK, "%s", sx_last_error());
        net b = a;
        sx_cg_node *lo[10];
        cr_assert_eq(sx_cg_file_graph(f, n, names, &b.g, lo), SX_OK, "%s", sx_last_error());
        sx_cg_file_free(f);
        memcpy(b.outs, lo, (size_t)a.n * sizeof *lo);
        b.w = lo[a.n];
        b.x = lo[a.n + 1];
        b.lr = lo[a.n + 2];
        b.step = lo[a.n + 3];
        sx_tensor *xv = NULL;
        cr_assert_eq(sx_tensor_clone(sx_cg_value(a.x), &xv), SX_OK);
        cr_assert_eq(sx_cg_input_set(b.g, b.x, xv, SX_CG_COPY), SX_OK);
        sx_tensor_free(xv);
        sx_cg_node *ua = a.outs[a.n - 1], *ub = b.outs[a.n - 1];
        cr_assert_eq(sx_cg_node_op(ub), sx_cg_node_op(ua));
        net_train(&a, SX_F64);
        net_train(&b, SX_F64);
        sx_tensor *pa = params_of(a.g, SX_F64), *pb = params_of(b.g, SX_F64);
        cr_assert(same_bits(pa, pb), "%s: trained differently after reload", sx_optim_name(k));
        sx_tensor_free(pa);
        sx_tensor_free(pb);
        sx_cg_graph_free(a.g);
        sx_cg_graph_free(b.g);
    }
    remove(path);
}

/* One step of kind k: optim/'s update in an eager graph (each node computed as it is built), or
 * the reference formula in a lazy graph evaluated once. The parameter and states after it. (The
 * reference formula cannot be built in an eager graph: once a state's assign has run, the new
 * state it read is stale and is recomputed from the written state for the parameter's step.) */
static sx_tensor *one_step(sx_optim_kind k, bool eager)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(eager ? SX_CG_EAGER : SX_CG_LAZY, SX_F32, &g), SX_OK);
    sx_rng r;
    sx_rng_seed(&r, 5);
    int64_t s[2] = {4, 6};
    sx_tensor *w0 = tu_rand(&r, SX_F32, 2, s, -1, 1), *g0 = tu_rand(&r, SX_F32, 2, s, -1, 1);
    sx_cg_node *w = sx_cg_param(g, "w", w0), *gr = sx_cg_const(g, g0);
    sx_cg_node *lr = sx_cg_scalar(g, 0.03), *step = sx_cg_scalar(g, 1);
    sx_optim_params op = sx_optim_params_default(k);
    sx_cg_node *outs[4];
    int n = 0;
    if (eager) {
        cr_assert_eq(sx_optim_update(g, &op, w, gr, lr, step, NULL, outs, &n), SX_OK, "%s",
                     sx_last_error());
    } else {
        n = tu_optim_reference(g, &op, w, gr, lr, step, NULL, outs);
        cr_assert_eq(sx_cg_eval(g, n, outs), SX_OK, "%s", sx_last_error());
    }
    sx_tensor *all = params_of(g, SX_F32);
    sx_tensor_free(w0);
    sx_tensor_free(g0);
    sx_cg_graph_free(g);
    return all;
}

Test(optim_update, an_eager_graph_takes_one_step_as_the_reference_formula_does)
{
    for (int k = 0; k < SX_OPTIM_COUNT; k++) {
        sx_tensor *ref = one_step((sx_optim_kind)k, false);
        sx_tensor *eager = one_step((sx_optim_kind)k, true);
        cr_assert(same_bits(ref, eager), "%s: the eager step differs", sx_optim_name(k));
        sx_tensor_free(ref);
        sx_tensor_free(eager);
    }
}

/* Weight decay and dampening out of range are refused before anything is built. */
Test(optim_update, bad_weight_decay_or_dampening_is_refused)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    int64_t s[1] = {3};
    sx_tensor *z = tu_zeros(SX_F64, 1, s);
    sx_cg_node *w = sx_cg_param(g, "w", z), *gr = sx_cg_input(g, "g", SX_F64, 1, s);
    sx_cg_node *lr = sx_cg_input(g, "lr", SX_F64, 0, NULL);
    sx_tensor_free(z);
    int64_t before = sx_cg_graph_size(g);
    sx_cg_node *ups[4];
    int n = -1;
    sx_optim_params p = sx_optim_params_default(SX_OPTIM_SGD);
    p.weight_decay = -0.1;
    cr_assert_eq(sx_optim_update(g, &p, w, gr, lr, NULL, NULL, ups, &n), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "weight_decay -0.1") != NULL, "%s", sx_last_error());
    p = sx_optim_params_default(SX_OPTIM_MOMENTUM);
    p.dampening = 1.5;
    cr_assert_eq(sx_optim_update(g, &p, w, gr, lr, NULL, NULL, ups, &n), SX_E_ARG);
    p.dampening = 0.5; /* dampening needs the step */
    cr_assert_eq(sx_optim_update(g, &p, w, gr, lr, NULL, NULL, ups, &n), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "step") != NULL, "%s", sx_last_error());
    p = sx_optim_params_default(SX_OPTIM_NESTEROV);
    p.dampening = 0.5;
    cr_assert_eq(sx_optim_update(g, &p, w, gr, lr, lr, NULL, ups, &n), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "nesterov with dampening") != NULL, "%s", sx_last_error());
    p = sx_optim_params_default(SX_OPTIM_ADAMW); /* bias correction needs the step */
    cr_assert_eq(sx_optim_update(g, &p, w, gr, lr, NULL, NULL, ups, &n), SX_E_ARG);
    cr_assert_eq(n, 0);
    cr_assert_eq(sx_cg_graph_size(g), before, "nothing built");
    sx_cg_graph_free(g);
}
