/* Every op of sx_ops.def, every sample variant (opsamples.c), in f32 and f64: a lazy and an
 * eager graph built from the same seed agree bit for bit, and with a direct call of the tensor
 * kernel on the same input values; a plain double reference (or, for linear algebra, the defining
 * identities) agrees within rounding; results hold no NaN/Inf; a frozen graph recomputes only
 * after a leaf changes, and nothing when nothing changed. The direct kernel call and the plain
 * reference of each op sit beside its sample in samples/<family>.c (REF(kernel, plain) in its
 * SPEC_), written independently of the op's evaluator; an op without them fails
 * every_op_has_its_references and its own case. The samples are also checked to be ready for
 * autodiff's finite differences (stable, away from kinks). */
#include "testutil.h"

#include "opsamples.c"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const sx_dtype dtypes[2] = {SX_F32, SX_F64};

static uint64_t seed_of(sx_cg_op op, int variant, int k)
{
    return 0x5eedULL + 1000003ULL * (uint64_t)op + 7919ULL * (uint64_t)variant + 31ULL * k;
}

/* ---------------------------------------------------------------- helpers */

static sx_cg_graph *graph_new(sx_cg_mode mode, sx_dtype dt)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(mode, dt, &g), SX_OK, "%s", sx_last_error());
    return g;
}

/* Build a sample and check what every sample promises: no error, the op and dtype asked for. */
static sx_cg_node *build(sx_cg_graph *g, sx_cg_op op, sx_dtype dt, uint64_t seed, int v,
                         os_sample *s, const char *what)
{
    sx_cg_node *n = os_build(g, op, dt, seed, v, s);
    cr_assert_not_null(n, "%s: build failed: %s", what, sx_last_error());
    cr_assert_eq(sx_cg_graph_status(g), SX_OK, "%s: %s", what, sx_last_error());
    cr_assert_eq(sx_cg_node_op(n), op, "%s: node is a %s", what, sx_cg_op_name(sx_cg_node_op(n)));
    cr_assert_eq(sx_cg_node_dtype(n), dt, "%s: wrong dtype", what);
    return n;
}

static void eval1(sx_cg_graph *g, sx_cg_node *n, const char *what)
{
    cr_assert_eq(sx_cg_eval(g, 1, &n), SX_OK, "%s: eval: %s", what, sx_last_error());
    cr_assert_not_null(sx_cg_value(n), "%s: no value after eval", what);
}

static int64_t kernels(const sx_cg_graph *g)
{
    return sx_cg_graph_stats(g).kernel_calls;
}

static void assert_same_bits(const sx_tensor *a, const sx_tensor *b, const char *what,
                             const char *which)
{
    cr_assert_eq(a->dtype, b->dtype, "%s: %s: dtypes differ", what, which);
    cr_assert(sx_shape_equal(a->rank, a->shape, b->rank, b->shape), "%s: %s: shapes differ", what,
              which);
    size_t bytes = (size_t)a->size * sx_dtype_size(a->dtype);
    if (bytes > 0 && memcmp(a->data, b->data, bytes) != 0) {
        for (int64_t i = 0; i < a->size; i++)
            if (memcmp((const char *)a->data + i * (int64_t)sx_dtype_size(a->dtype),
                       (const char *)b->data + i * (int64_t)sx_dtype_size(a->dtype),
                       sx_dtype_size(a->dtype)) != 0)
                cr_assert_fail("%s: %s: element %lld: %.17g vs %.17g", what, which, (long long)i,
                               sx_tensor_get(a, i), sx_tensor_get(b, i));
    }
}

static void assert_finite(const sx_tensor *t, const char *what)
{
    for (int64_t i = 0; i < t->size; i++)
        cr_assert(isfinite(sx_tensor_get(t, i)), "%s: element %lld is %g", what, (long long)i,
                  sx_tensor_get(t, i));
}

static sx_tensor *clone(const sx_tensor *t)
{
    sx_tensor *c = NULL;
    cr_assert_eq(sx_tensor_clone(t, &c), SX_OK, "%s", sx_last_error());
    return c;
}

static const sx_tensor *in_value(const sx_cg_node *n, int i)
{
    return sx_cg_value(sx_cg_node_input(n, i));
}

static void *xmalloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    cr_assert_not_null(p);
    return p;
}

/* ---------------------------------------------------------------- plain references */

/* Compare a node's value with its op's plain double reference (samples/<family>.c, beside the
 * sample: per element, |got - want| <= tol (1 + |want| + mag), mag bounding the rounding of
 * sums), or let the reference check the identities that define it. */
static void plain_check(const sx_cg_node *n, const sx_tensor *const *x, const char *what)
{
    const sx_tensor *y = sx_cg_value(n);
    os_plain_fn plain = os_plain(sx_cg_node_op(n));
    cr_assert_not_null(plain, "%s: no plain reference: REF(kernel, plain) in its SPEC_ (samples/)",
                       what);
    int64_t N = y->size;
    double *want = xmalloc((size_t)(N + 1) * sizeof *want);
    double *mag = xmalloc((size_t)(N + 1) * sizeof *mag);
    bool compare = true;
    cr_assert_eq(plain(n, x, want, mag, &compare), SX_OK, "%s: plain reference: %s", what,
                 sx_last_error());
    double tol = y->dtype == SX_F32 ? 1e-5 : 1e-12;
    for (int64_t i = 0; compare && i < N; i++) {
        double got = sx_tensor_get(y, i);
        cr_assert(fabs(got - want[i]) <= tol * (1 + fabs(want[i]) + mag[i]),
                  "%s: plain reference: element %lld is %.17g, want %.17g", what, (long long)i, got,
                  want[i]);
    }
    free(want);
    free(mag);
}

/* ---------------------------------------------------------------- the per-op checks */

static void what_of(char *buf, size_t n, sx_cg_op op, int v, sx_dtype dt, const char *tail)
{
    snprintf(buf, n, "%s variant %d %s%s", sx_cg_op_name(op), v, sx_dtype_name(dt), tail);
}

/* The input values a reference computes from: the inputs' current values, except for ops
 * that write their inputs, whose values are copied before the evaluation (`before`). */
typedef struct inputs {
    const sx_tensor *x[8];
    sx_tensor *copy[8];
} inputs;

static bool mutates(const sx_cg_node *n)
{
    return sx_cg_op_flags(sx_cg_node_op(n)) & SX_OPF_MUTATES;
}

/* A fused optimiser update reads the tensors it writes: every evaluation is one more step (the
 * node is stale after it runs). An assign only writes: evaluated once. */
static bool is_step(sx_cg_op op)
{
    /* allreduce_start is flagged MUTATES to stay out of hashing, folding and the arena; it
     * writes no input */
    return (sx_cg_op_flags(op) & SX_OPF_MUTATES) && op != SX_OP_ASSIGN &&
           op != SX_OP_ALLREDUCE_START;
}

/* Call before an evaluation that will run n. */
static void inputs_before(const sx_cg_node *n, inputs *v)
{
    memset(v, 0, sizeof *v);
    for (int i = 0; mutates(n) && i < sx_cg_node_n_inputs(n); i++)
        v->x[i] = v->copy[i] = clone(in_value(n, i)); /* mutating ops read leaves only */
}

/* Call after the evaluation. */
static void inputs_after(const sx_cg_node *n, inputs *v)
{
    for (int i = 0; !mutates(n) && i < sx_cg_node_n_inputs(n); i++)
        v->x[i] = in_value(n, i);
}

static void inputs_free(inputs *v)
{
    for (int i = 0; i < 8; i++)
        sx_tensor_free(v->copy[i]);
}

/* The node's value against a direct kernel call on its inputs: bit for bit. */
static void assert_kernel_equal(const sx_cg_node *n, const os_sample *s, const inputs *v,
                                const char *what)
{
    const sx_tensor *y = sx_cg_value(n);
    sx_tensor *want = tu_zeros(y->dtype, y->rank, y->shape);
    os_kernel_fn kernel = os_kernel(sx_cg_node_op(n));
    cr_assert_not_null(
        kernel, "%s: no direct kernel call: REF(kernel, plain) in its SPEC_ (samples/)", what);
    cr_assert_eq(kernel(n, s, v->x, want), SX_OK, "%s: kernel: %s", what, sx_last_error());
    assert_same_bits(y, want, what, "graph vs direct kernel call");
    sx_tensor_free(want);
}

/* Lazy and eager graphs, the direct kernel, the plain reference, no NaN/Inf. */
static void check_lazy_eager(sx_cg_op op, int v, sx_dtype dt)
{
    char what[96];
    what_of(what, sizeof what, op, v, dt, "");
    bool leaf = sx_cg_op_flags(op) & SX_OPF_LEAF;
    uint64_t seed = seed_of(op, v, 0);

    sx_cg_graph *lz = graph_new(SX_CG_LAZY, dt), *eg = graph_new(SX_CG_EAGER, dt);
    os_sample sl, se;
    sx_cg_node *nl = build(lz, op, dt, seed, v, &sl, what);
    if (!leaf) { /* nothing computed until asked */
        cr_assert_not(sx_cg_valid(nl), "%s: lazy node valid before eval", what);
        cr_assert_eq(kernels(lz), 0, "%s: lazy graph ran kernels while building", what);
    }
    inputs in;
    inputs_before(nl, &in);
    eval1(lz, nl, what);
    inputs_after(nl, &in);
    cr_assert(sx_cg_valid(nl) != is_step(op), "%s: valid after eval: %d", what, sx_cg_valid(nl));

    sx_cg_node *ne = build(eg, op, dt, seed, v, &se, what);
    cr_assert_not_null(sx_cg_value(ne), "%s: eager node not computed when made", what);
    int64_t k = kernels(eg);
    if (!leaf)
        cr_assert_gt(k, 0, "%s: eager graph ran no kernel", what);
    if (!is_step(op)) { /* (evaluating a step again would take another step) */
        cr_assert(sx_cg_valid(ne), "%s: eager node not valid", what);
        eval1(eg, ne, what);
        cr_assert_eq(kernels(eg), k, "%s: eval of an eager graph recomputed", what);
    }

    assert_same_bits(sx_cg_value(nl), sx_cg_value(ne), what, "lazy vs eager");
    cr_assert_eq(sx_cg_graph_stats(lz).nodes, sx_cg_graph_stats(eg).nodes, "%s", what);
    assert_finite(sx_cg_value(nl), what);
    assert_kernel_equal(nl, &sl, &in, what);
    plain_check(nl, in.x, what);
    for (int i = 0; mutates(nl) && i < sx_cg_node_n_inputs(nl); i++) /* the written states */
        assert_same_bits(in_value(nl, i), in_value(ne, i), what, "lazy vs eager input");
    inputs_free(&in);
    sx_cg_graph_free(lz);
    sx_cg_graph_free(eg);
}

/* Evaluate n again with nothing changed: nothing runs and the value stays, or for a step, the
 * step alone runs once more, giving the kernel's result on the values before it. */
static void check_again(sx_cg_graph *g, sx_cg_node *n, const os_sample *s, const char *what)
{
    int64_t before = kernels(g);
    if (is_step(sx_cg_node_op(n))) {
        inputs in;
        inputs_before(n, &in);
        eval1(g, n, what);
        inputs_after(n, &in);
        cr_assert_eq(kernels(g), before + 1, "%s: another step ran %lld kernels", what,
                     (long long)(kernels(g) - before));
        assert_kernel_equal(n, s, &in, what);
        inputs_free(&in);
        return;
    }
    sx_tensor *was = clone(sx_cg_value(n));
    eval1(g, n, what);
    cr_assert_eq(kernels(g), before, "%s: nothing changed, kernels ran", what);
    assert_same_bits(sx_cg_value(n), was, what, "evaluation with nothing changed");
    sx_tensor_free(was);
}

/* Freeze a lazy graph on the sample: evaluating twice runs kernels once; changing one leaf
 * (to the values of a sample with another seed) recomputes, and gives the kernel's result on
 * the new values; nothing changed, nothing runs (steps: one more step). */
static void check_frozen(sx_cg_op op, int v, sx_dtype dt)
{
    char what[96];
    what_of(what, sizeof what, op, v, dt, " (frozen)");
    bool leaf = sx_cg_op_flags(op) & SX_OPF_LEAF;
    sx_cg_graph *g = graph_new(SX_CG_LAZY, dt);
    os_sample s;
    sx_cg_node *n = build(g, op, dt, seed_of(op, v, 0), v, &s, what);
    cr_assert_eq(sx_cg_freeze(g, 1, &n), SX_OK, "%s: %s", what, sx_last_error());
    cr_assert(sx_cg_frozen(g));
    int64_t nodes = sx_cg_graph_stats(g).nodes;

    inputs in;
    inputs_before(n, &in);
    eval1(g, n, what);
    inputs_after(n, &in);
    int64_t k1 = kernels(g);
    if (!leaf)
        cr_assert_gt(k1, 0, "%s: nothing ran", what);
    assert_kernel_equal(n, &s, &in, what);
    inputs_free(&in);
    check_again(g, n, &s, what);

    for (int i = 0; i < s.n_leaves; i++) {
        sx_cg_graph *donor = graph_new(SX_CG_LAZY, dt);
        os_sample ds;
        build(donor, op, dt, seed_of(op, v, 1 + i), v, &ds, what);
        cr_assert_eq(os_leaf_set(g, &s, i, sx_cg_value(ds.leaf[i])), SX_OK, "%s: %s", what,
                     sx_last_error());
        int64_t before = kernels(g);
        inputs_before(n, &in);
        eval1(g, n, what);
        inputs_after(n, &in);
        if (!leaf)
            cr_assert_gt(kernels(g), before, "%s: leaf %d changed, nothing recomputed", what, i);
        assert_kernel_equal(n, &s, &in, what);
        inputs_free(&in);
        check_again(g, n, &s, what);
        sx_cg_graph_free(donor);
    }
    if (op == SX_OP_DROPOUT_MASK) { /* invalidated: the generator's next mask */
        int64_t before = kernels(g);
        cr_assert_eq(sx_cg_invalidate(g, n), SX_OK);
        eval1(g, n, what);
        cr_assert_eq(kernels(g), before + 1, "%s: an invalidated mask is drawn once", what);
        sx_rng r;
        sx_tensor *want = tu_zeros(dt, sx_cg_node_rank(n), sx_cg_node_shape(n));
        sx_rng_seed(&r, s.rng_seed);
        cr_assert_eq(sx_tensor_dropout_mask(want, &r, sx_cg_node_attr(n)->alpha), SX_OK);
        cr_assert_eq(sx_tensor_dropout_mask(want, &r, sx_cg_node_attr(n)->alpha), SX_OK);
        assert_same_bits(sx_cg_value(n), want, what, "second mask");
        sx_tensor_free(want);
    }
    cr_assert_eq(sx_cg_graph_stats(g).nodes, nodes, "%s: a frozen graph grew", what);
    sx_cg_graph_free(g);
}

static void check_op(sx_cg_op op)
{
    cr_assert_geq(os_ops[op].n_variants, 1);
    for (int t = 0; t < 2; t++)
        for (int v = 0; v < os_ops[op].n_variants; v++) {
            check_lazy_eager(op, v, dtypes[t]);
            check_frozen(op, v, dtypes[t]);
        }
}

/* ---------------------------------------------------------------- finite-difference readiness */

/* For each variant in f64: the directional central difference along a random direction of the
 * differentiated leaves, with steps h and h/2, agrees to a tenth of the stated tolerance
 * (the samples sit away from kinks, and the tolerance leaves room for rounding); for ops that
 * are not differentiable the difference is exactly 0 (the samples sit away from jumps). The
 * leaves get their values back. */
static void check_fd(sx_cg_op op)
{
    const os_op *o = &os_ops[op];
    for (int v = 0; v < o->n_variants; v++) {
        char what[96];
        what_of(what, sizeof what, op, v, SX_F64, " (fd)");
        sx_cg_graph *g = graph_new(SX_CG_LAZY, SX_F64);
        os_sample s;
        sx_cg_node *n = build(g, op, SX_F64, seed_of(op, v, 0), v, &s, what);
        sx_rng r;
        sx_rng_seed(&r, seed_of(op, v, 7));
        double *dir[OS_MAX_LEAVES] = {0};
        bool any = false;
        for (int i = 0; i < s.n_leaves; i++) {
            if (!s.wrt[i])
                continue;
            int64_t size = sx_cg_node_size(s.leaf[i]);
            dir[i] = xmalloc((size_t)(size + 1) * sizeof **dir);
            for (int64_t k = 0; k < size; k++)
                dir[i][k] = 2 * sx_rng_uniform(&r) - 1;
            any = true;
        }
        if (o->diff != OS_NONE)
            cr_assert(any || s.n_leaves == 0, "%s: differentiable, with nothing to move", what);
        double *w = xmalloc((size_t)(sx_cg_node_size(n) + 1) * sizeof *w);
        for (int64_t k = 0; k < sx_cg_node_size(n); k++)
            w[k] = 2 * sx_rng_uniform(&r) - 1;
        eval1(g, n, what);
        sx_tensor *before = clone(sx_cg_value(n));
        if (any) {
            double d1, d2;
            cr_assert_eq(
                os_fd_directional(g, &s, n, (const double *const *)dir, w, o->fd_step, &d1), SX_OK,
                "%s: %s", what, sx_last_error());
            cr_assert_eq(
                os_fd_directional(g, &s, n, (const double *const *)dir, w, o->fd_step / 2, &d2),
                SX_OK, "%s: %s", what, sx_last_error());
            if (o->diff == OS_NONE)
                cr_assert(d1 == 0 && d2 == 0, "%s: a jump within the step: %g, %g", what, d1, d2);
            else
                cr_assert(fabs(d1 - d2) <= o->fd_tol / 10 * (1 + fabs(d1)),
                          "%s: central differences %.12g (h) and %.12g (h/2) disagree", what, d1,
                          d2);
            eval1(g, n, what);
            assert_same_bits(sx_cg_value(n), before, what, "value after the leaves came back");
        }
        sx_tensor_free(before);
        for (int i = 0; i < OS_MAX_LEAVES; i++)
            free(dir[i]);
        free(w);
        sx_cg_graph_free(g);
    }
}

/* ---------------------------------------------------------------- cost */

/* The flop model (cgraph/ops/, cost.c) on every variant: finite and not negative; at least one
 * operation per element for element-wise ops; exactly 2 M N K for matrix products and
 * 2 (output pixels) (kernel elements) for the convolutions, recomputed here from the shapes. */
static void check_cost(sx_cg_op op)
{
    for (int v = 0; v < os_ops[op].n_variants; v++) {
        char what[96];
        what_of(what, sizeof what, op, v, SX_F64, " (cost)");
        sx_cg_graph *g = graph_new(SX_CG_LAZY, SX_F64);
        os_sample s;
        sx_cg_node *n = build(g, op, SX_F64, seed_of(op, v, 0), v, &s, what);
        double f = sx_cg_node_flops(n), size = (double)sx_cg_node_size(n);
        cr_assert(isfinite(f) && f >= 0, "%s: %g flops", what, f);
        if (sx_cg_op_flags(op) & SX_OPF_ELEMWISE && op != SX_OP_WHERE)
            cr_assert_geq(f, size, "%s: %g flops for %g elements", what, f, size);
        const int64_t *a =
            sx_cg_node_n_inputs(n) > 0 ? sx_cg_node_shape(sx_cg_node_input(n, 0)) : NULL;
        if (op == SX_OP_MATMUL) {
            int ra = sx_cg_node_rank(sx_cg_node_input(n, 0));
            double k = (double)a[sx_cg_node_attr(n)->trans_a ? ra - 2 : ra - 1];
            cr_assert_eq(f, 2 * size * k, "%s", what);
        }
        if (op == SX_OP_CONV2D) { /* a group's filters read c / groups channels */
            const int64_t *k = sx_cg_node_shape(sx_cg_node_input(n, 1));
            int groups = sx_cg_node_attr(n)->conv.groups > 1 ? sx_cg_node_attr(n)->conv.groups : 1;
            cr_assert_eq(f,
                         2 * (size / (double)k[3]) * (double)(k[0] * k[1] * (a[3] / groups) * k[3]),
                         "%s", what);
        }
        cr_assert_eq(sx_cg_node_flops(NULL), 0);
        sx_cg_graph_free(g);
    }
}

/* ---------------------------------------------------------------- renamed ops */

/* tests/cgraph/data/renamed_ops_v1.sxg was saved by an older strix, before the _bwd ops were
 * renamed _backward (built by renamed_graph below with the old constructors,
 * sx_cg_conv2d_bwd_input ...): its nodes name the old ops. It loads, into the new ops, with the
 * same values as the graph built today. */
static sx_cg_node *cst(sx_cg_graph *g, int rank, const int64_t *shape, double scale)
{
    sx_tensor *t = NULL;
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= shape[i];
    double v[64];
    for (int64_t i = 0; i < n; i++)
        v[i] = scale * (double)((i * 7) % 11 - 5) / 5.0 + 0.01 * (double)i;
    cr_assert_eq(sx_tensor_from_doubles(SX_F64, rank, shape, v, n, &t), SX_OK);
    sx_cg_node *c = sx_cg_const(g, t);
    sx_tensor_free(t);
    return c;
}

#define N_RENAMED 8
static void renamed_graph(sx_cg_graph *g, sx_cg_node **outs)
{
    const int64_t xs[4] = {1, 4, 4, 2}, ks[4] = {3, 3, 2, 3}, ys[4] = {1, 4, 4, 3},
                  ps[4] = {1, 2, 2, 2}, ls[2] = {3, 4};
    sx_conv2d_params cp = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    sx_pool2d_params pp = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    sx_cg_node *x = cst(g, 4, xs, 1), *k = cst(g, 4, ks, 0.5), *dy = cst(g, 4, ys, 2);
    sx_cg_node *dp = cst(g, 4, ps, 1.5), *l = cst(g, 2, ls, 1), *t = cst(g, 2, ls, 0.25);
    sx_cg_node *dl = cst(g, 1, ls, 1);
    sx_cg_node *y = sx_cg_softmax(g, l, 1);
    outs[0] = sx_cg_conv2d_backward_input(g, k, dy, &cp, xs);
    outs[1] = sx_cg_conv2d_backward_kernel(g, x, dy, &cp, ks);
    outs[2] = sx_cg_maxpool2d_backward(g, x, dp, &pp);
    outs[3] = sx_cg_maxpool2d_relu_backward(g, x, dp, &pp);
    outs[4] = sx_cg_avgpool2d_backward(g, dp, &pp, xs);
    outs[5] = sx_cg_softmax_backward(g, y, l, 1);
    outs[6] = sx_cg_log_softmax_backward(g, y, l, 1);
    outs[7] = sx_cg_softmax_xent_backward(g, l, t, dl);
}

Test(cgraph_ops, old_op_names_load)
{
    static const sx_cg_op want[N_RENAMED] = {
        SX_OP_CONV2D_BACKWARD_INPUT,   SX_OP_CONV2D_BACKWARD_KERNEL, SX_OP_MAXPOOL2D_BACKWARD,
        SX_OP_MAXPOOL2D_RELU_BACKWARD, SX_OP_AVGPOOL2D_BACKWARD,     SX_OP_SOFTMAX_BACKWARD,
        SX_OP_LOG_SOFTMAX_BACKWARD,    SX_OP_SOFTMAX_XENT_BACKWARD,
    };
    const char *names[N_RENAMED] = {"o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7"};
    char path[4096];
    const char *file = __FILE__, *slash = strrchr(file, '/');
    cr_assert_not_null(slash, "__FILE__ is %s", file);
    snprintf(path, sizeof path, "%.*s/data/renamed_ops_v1.sxg", (int)(slash - file), file);
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK, "%s", sx_last_error());
    sx_cg_graph *old = NULL, *now = graph_new(SX_CG_LAZY, SX_F64);
    sx_cg_node *a[N_RENAMED], *b[N_RENAMED];
    cr_assert_eq(sx_cg_file_graph(f, N_RENAMED, names, &old, a), SX_OK, "%s", sx_last_error());
    renamed_graph(now, b);
    cr_assert_eq(sx_cg_eval(old, N_RENAMED, a), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(now, N_RENAMED, b), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < N_RENAMED; i++) {
        cr_assert_eq(sx_cg_node_op(a[i]), want[i], "%s: loaded as %s", names[i],
                     sx_cg_op_name(sx_cg_node_op(a[i])));
        cr_assert_eq(sx_cg_node_op(b[i]), want[i]);
        cr_assert_not_null(strstr(sx_cg_op_name(want[i]), "_backward"));
        assert_same_bits(sx_cg_value(a[i]), sx_cg_value(b[i]), names[i], "loaded value");
    }
    sx_cg_graph_free(old);
    sx_cg_graph_free(now);
    sx_cg_file_free(f);
}

/* ---------------------------------------------------------------- the tests */

Test(cgraph_ops, table_has_one_sample_per_op)
{
    for (int op = 0; op < SX_OP_COUNT; op++) {
        const os_op *o = &os_ops[op];
        cr_assert_eq((int)o->op, op);
        cr_assert_str_eq(o->name, sx_cg_op_name((sx_cg_op)op));
        cr_assert_not_null(o->gen);
        cr_assert_geq(o->n_variants, 1, "%s", o->name);
        cr_assert(o->diff == OS_SMOOTH || o->diff == OS_PIECEWISE || o->diff == OS_NONE);
        if (o->diff != OS_NONE)
            cr_assert(o->fd_step > 0 && o->fd_tol > 0, "%s: no finite-difference step/tol",
                      o->name);
    }
    os_sample s;
    sx_cg_graph *g = graph_new(SX_CG_LAZY, SX_F64);
    cr_assert_null(os_build(g, SX_OP_ADD, SX_F64, 1, os_ops[SX_OP_ADD].n_variants, &s));
    cr_assert_eq(s.status, SX_E_ARG);
    cr_assert_null(os_build(g, SX_OP_COUNT, SX_F64, 1, 0, &s));
    cr_assert_eq(sx_cg_graph_stats(g).nodes, 0);
    sx_cg_graph_free(g);
}

/* Every op has both references beside its sample (REF(kernel, plain) at the end of its SPEC_ in
 * samples/<family>.c; the element-wise rows get theirs from sx_map.def / sx_binary.def): a row
 * without them fails here, by name, besides failing its own case. */
Test(cgraph_ops, every_op_has_its_references)
{
    for (int op = 0; op < SX_OP_COUNT; op++) {
        const char *name = sx_cg_op_name((sx_cg_op)op);
        cr_expect_not_null(os_kernel((sx_cg_op)op),
                           "%s: no direct kernel call: REF(kernel_%s, plain_...) at the end of "
                           "SPEC_%s in tests/cgraph/samples/<family>.c",
                           name, name, name);
        cr_expect_not_null(os_plain((sx_cg_op)op),
                           "%s: no plain reference: REF(kernel_..., plain_%s) at the end of "
                           "SPEC_%s in tests/cgraph/samples/<family>.c",
                           name, name, name);
    }
    cr_assert_null(os_kernel(SX_OP_COUNT));
    cr_assert_null(os_plain(SX_OP_COUNT));
}

/* One test case per row of the op table: forward (lazy = eager = kernel = reference, frozen
 * re-evaluation), finite-difference readiness and cost. */
#define X(NAME, name, arity, shape, eval, flags, kernel, nograd)                                   \
    Test(cgraph_ops, name)                                                                         \
    {                                                                                              \
        check_op(SX_OP_##NAME);                                                                    \
        check_fd(SX_OP_##NAME);                                                                    \
        check_cost(SX_OP_##NAME);                                                                  \
    }
#include "sx_ops.def"
#undef X
