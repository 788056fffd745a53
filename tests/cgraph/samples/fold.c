/* fold.c: the samples of the reductions (cgraph/ops/fold.c): each op's SPEC_, DT_, sample generator
 * and references. Part of ../opsamples.c, which includes it. */

/* ---------------------------------------------------------------- reductions */

static const struct {
    shp x;
    unsigned axes;
    bool keepdims;
} fold_cases[] = {
    {{3, {3, 4, 5}}, SX_AXIS(1), false},
    {{3, {3, 4, 5}}, SX_AXIS(0) | SX_AXIS(2), true},
    {{3, {3, 4, 5}}, SX_AXES_ALL, false},
    {{2, {2, 3}}, 0, false}, /* no axis: element-wise */
    {{1, {7}}, SX_AXIS(0), true},
    {{0, {0}}, SX_AXES_ALL, false},
    {{4, {2, 3, 2, 2}}, SX_AXIS(1) | SX_AXIS(2), false}, /* adjacent axes merge */
};
#define N_FOLD 7

typedef sx_cg_node *(*fold_fn)(sx_cg_graph *, sx_cg_node *, unsigned, bool);

static sx_cg_node *fold(ctx *c, int v, fold_fn f, vkind k, double a, double b)
{
    sx_cg_node *x = in(c, fold_cases[v].x, k, a, b);
    return f(c->g, x, fold_cases[v].axes, fold_cases[v].keepdims);
}

#define FOLD_SAMPLE(name, kind, a, b)                                                              \
    static sx_cg_node *sample_##name(GEN_ARGS)                                                     \
    {                                                                                              \
        CTX;                                                                                       \
        return fold(c, v, sx_cg_##name, kind, a, b);                                               \
    }

/* Reductions by their definition: every element of x goes to the output cell of its kept axes;
 * `r` is its row-major index within the reduced axes (what argmax reports). */
static void ref_fold(sx_fold_op k, const sx_tensor *x, unsigned axes, int64_t n_out, double *want,
                     double *mag)
{
    unsigned mask = axes == SX_AXES_ALL ? (1u << x->rank) - 1u : axes;
    int64_t count = 1;
    for (int d = 0; d < x->rank; d++)
        if (mask >> d & 1u)
            count *= x->shape[d];
    double *best = ref_alloc((size_t)n_out * sizeof *best),
           *m = ref_alloc((size_t)n_out * sizeof *m);
    for (int64_t o = 0; o < n_out; o++) {
        m[o] = -HUGE_VAL;
        want[o] = k == SX_FOLD_PROD  ? 1
                  : k == SX_FOLD_MAX ? -HUGE_VAL
                  : k == SX_FOLD_MIN ? HUGE_VAL
                                     : 0;
        best[o] = k == SX_FOLD_ARGMAX ? -HUGE_VAL : HUGE_VAL;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < x->size; i++) {
            int64_t idx[SX_MAX_RANK], o = 0, r = 0;
            ref_unravel(i, x->rank, x->shape, idx);
            for (int d = 0; d < x->rank; d++) {
                if (mask >> d & 1u)
                    r = r * x->shape[d] + idx[d];
                else
                    o = o * x->shape[d] + idx[d];
            }
            double v = ref_get(x, i);
            if (pass == 0) { /* the maxima, for logsumexp */
                m[o] = v > m[o] ? v : m[o];
                continue;
            }
            mag[o] += fabs(v);
            switch (k) {
            case SX_FOLD_SUM:
            case SX_FOLD_MEAN:
                want[o] += v;
                break;
            case SX_FOLD_PROD:
                want[o] *= v;
                break;
            case SX_FOLD_MAX:
                want[o] = v > want[o] ? v : want[o];
                break;
            case SX_FOLD_MIN:
                want[o] = v < want[o] ? v : want[o];
                break;
            case SX_FOLD_ARGMAX:
            case SX_FOLD_ARGMIN:
                if (k == SX_FOLD_ARGMAX ? v > best[o] : v < best[o]) {
                    best[o] = v;
                    want[o] = (double)r;
                }
                break;
            case SX_FOLD_L1NORM:
                want[o] += fabs(v);
                break;
            case SX_FOLD_L2NORM:
                want[o] += v * v;
                break;
            case SX_FOLD_LOGSUMEXP:
                want[o] += exp(v - m[o]);
                break;
            case SX_FOLD_COUNT:
                break;
            }
        }
    for (int64_t o = 0; o < n_out; o++) {
        if (k == SX_FOLD_MEAN)
            want[o] /= (double)count;
        if (k == SX_FOLD_L2NORM)
            want[o] = sqrt(want[o]);
        if (k == SX_FOLD_LOGSUMEXP)
            want[o] = m[o] + log(want[o]);
        if (k == SX_FOLD_PROD || k == SX_FOLD_LOGSUMEXP)
            mag[o] = fabs(want[o]) * (double)count; /* relative error grows with the count */
        if (k == SX_FOLD_ARGMAX || k == SX_FOLD_ARGMIN)
            mag[o] = 0;
    }
    free(best);
    free(m);
}

/* A reduction's references: the fold kernel KERNEL called directly, and ref_fold. */
#define FOLD_REF(name, KERNEL)                                                                     \
    static sx_status kernel_##name(KERNEL_ARGS)                                                    \
    {                                                                                              \
        (void)s;                                                                                   \
        const sx_cg_attr *a = sx_cg_node_attr(n);                                                  \
        return sx_tensor_fold_out(SX_FOLD_##KERNEL, x[0], a->axes, a->keepdims, out);              \
    }                                                                                              \
    static sx_status plain_##name(PLAIN_ARGS)                                                      \
    {                                                                                              \
        (void)compare;                                                                             \
        ref_fold(SX_FOLD_##KERNEL, x[0], sx_cg_node_attr(n)->axes, sx_cg_value(n)->size, want,     \
                 mag);                                                                             \
        return SX_OK;                                                                              \
    }

#define SPEC_sum N_FOLD, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_sum, plain_sum)
#define DT_sum FOLD(DOMF_NONE)
FOLD_SAMPLE(sum, V_UNIFORM, -2, 2)
FOLD_REF(sum, SUM)
#define SPEC_mean N_FOLD, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_mean, plain_mean)
#define DT_mean FOLD(DOMF_NONE)
FOLD_SAMPLE(mean, V_UNIFORM, -2, 2)
FOLD_REF(mean, MEAN)
#define SPEC_prod N_FOLD, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_prod, plain_prod)
#define DT_prod FOLD(DOMF_NONE)
FOLD_SAMPLE(prod, V_AWAY, 0.6, 1.4) /* no zeros; products stay near 1 */
FOLD_REF(prod, PROD)
#define SPEC_reduce_max N_FOLD, OS_PIECEWISE, 1e-6, 1e-6, REF(kernel_reduce_max, plain_reduce_max)
#define DT_reduce_max FOLD(DOMF_MAX)
FOLD_SAMPLE(reduce_max, V_DISTINCT, -2, 2)
FOLD_REF(reduce_max, MAX)
#define SPEC_reduce_min N_FOLD, OS_PIECEWISE, 1e-6, 1e-6, REF(kernel_reduce_min, plain_reduce_min)
#define DT_reduce_min FOLD(DOMF_MAX)
FOLD_SAMPLE(reduce_min, V_DISTINCT, -2, 2)
FOLD_REF(reduce_min, MIN)
#define SPEC_argmax N_FOLD, OS_NONE, 1e-6, 0, REF(kernel_argmax, plain_argmax)
#define DT_argmax FOLD(DOMF_MAX)
FOLD_SAMPLE(argmax, V_DISTINCT, -2, 2)
FOLD_REF(argmax, ARGMAX)
#define SPEC_argmin N_FOLD, OS_NONE, 1e-6, 0, REF(kernel_argmin, plain_argmin)
#define DT_argmin FOLD(DOMF_MAX)
FOLD_SAMPLE(argmin, V_DISTINCT, -2, 2)
FOLD_REF(argmin, ARGMIN)
#define SPEC_l1norm N_FOLD, OS_PIECEWISE, 1e-6, 1e-6, REF(kernel_l1norm, plain_l1norm)
#define DT_l1norm FOLD(DOMF_L1)
FOLD_SAMPLE(l1norm, V_AWAY, 0.1, 2)
FOLD_REF(l1norm, L1NORM)
#define SPEC_l2norm N_FOLD, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_l2norm, plain_l2norm)
#define DT_l2norm FOLD(DOMF_L2)
FOLD_SAMPLE(l2norm, V_AWAY, 0.1, 2) /* with no axis it is |x|: away from 0 */
FOLD_REF(l2norm, L2NORM)
#define SPEC_logsumexp N_FOLD, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_logsumexp, plain_logsumexp)
#define DT_logsumexp FOLD(DOMF_NONE)
FOLD_SAMPLE(logsumexp, V_UNIFORM, -3, 3)
FOLD_REF(logsumexp, LOGSUMEXP)
