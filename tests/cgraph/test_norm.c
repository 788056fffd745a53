/* test_norm.c: the normalisation family's graph ops beyond their samples. Graphs saved by the
 * strix before batch norm was merged into the norm ops (tests/cgraph/data/batch_norm_*_v1.sxg,
 * written by that version from the graph of old_graph below, with its outputs' values stored
 * beside them as want_<output>) name batch_norm_stats, batch_norm, batch_norm_sums and
 * batch_norm_dx: they load as the norm ops with the per-channel axes, with the fused forms' flags
 * (relu, recompute copy) carried over, and give the same bits. And the fused forms refuse
 * geometries other than batch norm's. */
#include <criterion/criterion.h>
#include <sx_cgraph.h>

#include <math.h>
#include <string.h>

#define N_OUT 6

/* The files were made from (f32, x and res (3,2,3,4), gamma and beta (4), w like x):
 * y = batch_norm(x, stats(x), gamma, beta, 1e-3); z = relu(y + res);
 * y2 = relu(batch_norm(z, stats(z), gamma, beta, 1e-3)); loss = sum((y2 + z) w);
 * the outputs loss, its gradients dx, dgamma, dbeta, dres, and y2. "ops": as built and
 * differentiated; "fused": then optimised (SX_PASS_BN_ADD, SX_PASS_BN_RELU, SX_PASS_BN_RECOMPUTE
 * ran). */
static const char *const outs_names[N_OUT] = {"loss", "dx", "dgamma", "dbeta", "dres", "y2"};

static void data_path(char *path, size_t size, const char *name)
{
    const char *file = __FILE__, *slash = strrchr(file, '/');
    cr_assert_not_null(slash, "__FILE__ is %s", file);
    snprintf(path, size, "%.*s/data/%s", (int)(slash - file), file, name);
}

typedef struct census {
    int ops[SX_OP_COUNT];
    int norm_res, norm_relu, norm_copy, sums_mask, dx_mask;
} census;

static census count(const sx_cg_graph *g)
{
    census c = {{0}, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        const sx_cg_node *n = sx_cg_graph_node(g, i);
        if (n == NULL)
            continue;
        sx_cg_op op = sx_cg_node_op(n);
        c.ops[op]++;
        cr_assert_null(strstr(sx_cg_op_name(op), "batch_norm"), "an op named %s",
                       sx_cg_op_name(op));
        if (op != SX_OP_NORM_STATS && op != SX_OP_NORM && op != SX_OP_NORM_SUMS &&
            op != SX_OP_NORM_DX)
            continue;
        /* the per-channel axes, from the old ops */
        const sx_cg_norm_attr *a = &sx_cg_node_attr(n)->norm;
        const sx_cg_node *x = sx_cg_node_input(n, 0);
        cr_assert_eq(a->lead, 0);
        cr_assert_eq(a->tail, 1);
        cr_assert_eq(a->groups, sx_cg_node_shape(x)[sx_cg_node_rank(x) - 1]);
        int k = sx_cg_node_n_inputs(n);
        c.norm_res += op == SX_OP_NORM && k == 5;
        c.norm_relu += op == SX_OP_NORM && a->relu != 0;
        c.norm_copy += op == SX_OP_NORM && a->copy != 0;
        c.sums_mask += op == SX_OP_NORM_SUMS && k == 4;
        c.dx_mask += op == SX_OP_NORM_DX && k == 6;
        if (op != SX_OP_NORM_STATS)
            cr_assert(fabs(a->eps - (op == SX_OP_NORM_SUMS ? 0 : 1e-3)) < 1e-12, "eps %g", a->eps);
    }
    return c;
}

/* Load a file, check its ops, evaluate its outputs and compare every bit with the stored values. */
static census load_and_compare(const char *name)
{
    char path[4096];
    data_path(path, sizeof path, name);
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK, "%s", sx_last_error());
    sx_cg_graph *g = NULL;
    sx_cg_node *o[N_OUT];
    cr_assert_eq(sx_cg_file_graph(f, N_OUT, outs_names, &g, o), SX_OK, "%s", sx_last_error());
    census c = count(g);
    cr_assert_eq(sx_cg_eval(g, N_OUT, o), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < N_OUT; i++) {
        char want_name[32];
        snprintf(want_name, sizeof want_name, "want_%s", outs_names[i]);
        const sx_tensor *want = sx_cg_file_tensor(f, want_name), *got = sx_cg_value(o[i]);
        cr_assert_not_null(want, "%s", want_name);
        cr_assert_eq(got->size, want->size, "%s", outs_names[i]);
        cr_assert_eq(got->dtype, want->dtype, "%s", outs_names[i]);
        cr_assert_eq(memcmp(got->data, want->data, (size_t)want->size * 4), 0,
                     "%s: not the bits the older strix computed", outs_names[i]);
    }
    sx_cg_graph_free(g);
    sx_cg_file_free(f);
    return c;
}

Test(cgraph_norm, old_batch_norm_graph_loads_with_the_same_bits)
{
    census c = load_and_compare("batch_norm_ops_v1.sxg");
    cr_assert_eq(c.ops[SX_OP_NORM_STATS], 2);
    cr_assert_eq(c.ops[SX_OP_NORM], 2);
    cr_assert_eq(c.ops[SX_OP_NORM_SUMS], 2);
    cr_assert_eq(c.ops[SX_OP_NORM_DX], 2);
    cr_assert_eq(c.sums_mask, 1); /* relu's gradient read by the sums (relu_mask_of) */
    cr_assert_eq(c.dx_mask, 1);
}

Test(cgraph_norm, old_fused_batch_norm_graph_loads_with_the_same_bits)
{
    census c = load_and_compare("batch_norm_fused_v1.sxg");
    cr_assert_eq(c.ops[SX_OP_NORM_DX], 2);
    /* the old file's one batch norm with a residual, three with relu in (one of them the
     * recompute copy), one relu mask in the sums and in dx */
    cr_assert_eq(c.norm_res, 1, "the residual of the old batch_norm");
    cr_assert_eq(c.norm_relu, 3, "the relu flags of the old batch_norm");
    cr_assert_eq(c.norm_copy, 1, "the recompute copy's mark");
    cr_assert_eq(c.sums_mask, 1);
    cr_assert_eq(c.dx_mask, 1);
}

/* The fused forms are batch norm's alone: a residual, a relu mask or norm_dx with group axes is
 * refused, naming the axes; the batch-norm constructors refuse x of rank 0. */
Test(cgraph_norm, fused_forms_want_the_per_channel_axes)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    int64_t xs[3] = {2, 3, 4}, c[1] = {4}, s2[2] = {2, 4};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F32, 3, xs);
    sx_cg_node *gm = sx_cg_input(g, "g", SX_F32, 1, c), *bt = sx_cg_input(g, "b", SX_F32, 1, c);
    sx_norm_axes inst = {1, 1, 2}; /* group norm: p = 2 * 2 */
    int64_t s4[2] = {2, 4};
    sx_cg_node *st = sx_cg_input(g, "st", SX_F32, 2, s4);
    cr_assert_null(sx_cg_norm_res(g, x, st, gm, bt, x, inst, 1e-3));
    cr_assert(strstr(sx_last_error(), "per-channel") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_cg_graph_status(g), SX_E_ARG);
    sx_cg_graph_free(g);

    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    x = sx_cg_input(g, "x", SX_F32, 3, xs), st = sx_cg_input(g, "st", SX_F32, 2, s4);
    cr_assert_null(sx_cg_norm_sums_mask(g, x, st, x, x, inst));
    cr_assert_eq(sx_cg_graph_status(g), SX_E_ARG);
    sx_cg_graph_free(g);

    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    x = sx_cg_input(g, "x", SX_F32, 3, xs), st = sx_cg_input(g, "st", SX_F32, 2, s4);
    gm = sx_cg_input(g, "g", SX_F32, 1, c);
    cr_assert_null(sx_cg_norm_dx(g, x, st, gm, x, st, NULL, inst, 1e-3));
    cr_assert_eq(sx_cg_graph_status(g), SX_E_ARG);
    sx_cg_graph_free(g);

    /* the same calls with batch norm's axes build */
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    x = sx_cg_input(g, "x", SX_F32, 3, xs), st = sx_cg_input(g, "st", SX_F32, 2, s2);
    gm = sx_cg_input(g, "g", SX_F32, 1, c), bt = sx_cg_input(g, "b", SX_F32, 1, c);
    sx_norm_axes bn = {0, 1, 4};
    cr_assert_not_null(sx_cg_norm_res(g, x, st, gm, bt, x, bn, 1e-3), "%s", sx_last_error());
    cr_assert_not_null(sx_cg_norm_sums_mask(g, x, st, x, x, bn), "%s", sx_last_error());
    cr_assert_not_null(sx_cg_norm_dx(g, x, st, gm, x, st, x, bn, 1e-3), "%s", sx_last_error());
    sx_cg_node *s0 = sx_cg_input(g, "s0", SX_F32, 0, NULL);
    cr_assert_null(sx_cg_batch_norm_stats(g, s0));
    cr_assert_eq(sx_cg_graph_status(g), SX_E_RANK);
    sx_cg_graph_free(g);
}
