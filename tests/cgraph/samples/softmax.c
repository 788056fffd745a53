/* softmax.c: the samples of the softmax family and the cross-entropies (cgraph/ops/softmax.c): each
 * op's SPEC_, DT_, sample generator and references. Part of ../opsamples.c, which includes it. */

/* ---------------------------------------------------------------- softmax family */

static const struct {
    shp x;
    int axis;
} softmax_cases[] = {
    {{2, {3, 5}}, -1}, {{3, {2, 3, 4}}, 1}, {{1, {4}}, 0}, {{3, {2, 3, 4}}, 0}, {{2, {1, 5}}, 0},
};
#define N_SOFTMAX 5

#define SPEC_softmax N_SOFTMAX, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_softmax, plain_softmax)
#define DT_softmax GEN(gen_softmax, 2)
static sx_cg_node *sample_softmax(GEN_ARGS)
{
    CTX;
    return sx_cg_softmax(g, in(c, softmax_cases[v].x, V_UNIFORM, -3, 3), softmax_cases[v].axis);
}

#define SPEC_log_softmax N_SOFTMAX, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_log_softmax, plain_softmax)
#define DT_log_softmax GEN(gen_softmax, 2)
static sx_cg_node *sample_log_softmax(GEN_ARGS)
{
    CTX;
    return sx_cg_log_softmax(g, in(c, softmax_cases[v].x, V_UNIFORM, -3, 3), softmax_cases[v].axis);
}

/* The backward ops read the forward result y: probabilities, or log-probabilities. Any y is a
 * valid input (the formulas are polynomial in y). */
#define SPEC_softmax_backward                                                                      \
    N_SOFTMAX, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_softmax_backward, plain_softmax)
#define DT_softmax_backward GEN(gen_softmax_backward, 2)
static sx_cg_node *sample_softmax_backward(GEN_ARGS)
{
    CTX;
    sx_cg_node *y = in(c, softmax_cases[v].x, V_UNIFORM, 0.05, 1);
    return sx_cg_softmax_backward(g, y, in(c, softmax_cases[v].x, V_UNIFORM, -1, 1),
                                  softmax_cases[v].axis);
}

#define SPEC_log_softmax_backward                                                                  \
    N_SOFTMAX, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_log_softmax_backward, plain_softmax)
#define DT_log_softmax_backward GEN(gen_softmax_backward, 2)
static sx_cg_node *sample_log_softmax_backward(GEN_ARGS)
{
    CTX;
    sx_cg_node *y = in(c, softmax_cases[v].x, V_UNIFORM, -3, -0.1);
    return sx_cg_log_softmax_backward(g, y, in(c, softmax_cases[v].x, V_UNIFORM, -1, 1),
                                      softmax_cases[v].axis);
}

/* Cross-entropy: soft targets, one-hot targets, one class, no rows. */
static const shp xent_cases[] = {{2, {4, 5}}, {2, {1, 3}}, {2, {3, 1}}, {2, {0, 4}}};
#define N_XENT 4

#define SPEC_softmax_xent                                                                          \
    N_XENT, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_softmax_xent, plain_softmax_xent)
#define DT_softmax_xent GEN(gen_softmax_xent, 2)
static sx_cg_node *sample_softmax_xent(GEN_ARGS)
{
    CTX;
    sx_cg_node *logits = in(c, xent_cases[v], V_UNIFORM, -3, 3);
    return sx_cg_softmax_xent(g, logits, in_probs(c, xent_cases[v], v == 1));
}

#define SPEC_softmax_xent_backward                                                                 \
    N_XENT, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_softmax_xent_backward, plain_softmax_xent)
#define DT_softmax_xent_backward GEN(gen_softmax_xent, 2)
static sx_cg_node *sample_softmax_xent_backward(GEN_ARGS)
{
    CTX;
    sx_cg_node *logits = in(c, xent_cases[v], V_UNIFORM, -3, 3);
    sx_cg_node *target = in_probs(c, xent_cases[v], v == 1);
    sx_cg_node *dout = in(c, (shp){1, {xent_cases[v].d[0]}}, V_UNIFORM, -1, 1);
    return sx_cg_softmax_xent_backward(g, logits, target, dout);
}

/* Cross-entropy against class indices: ignored rows (index -1), label smoothing, one class, no
 * rows. */
static const struct {
    shp l;
    int64_t lo;    /* indices drawn from lo..k-1: -1 is the ignored index */
    double smooth; /* label smoothing */
} sxent_cases[] = {
    {{2, {4, 5}}, -1, 0}, {{2, {3, 6}}, -1, 0.1}, {{2, {3, 1}}, 0, 0.2}, {{2, {0, 4}}, 0, 0}};

static sx_cg_node *sxent_idx(ctx *c, int v)
{
    return in_fixed(c, (shp){1, {sxent_cases[v].l.d[0]}}, V_INT, (double)sxent_cases[v].lo,
                    (double)sxent_cases[v].l.d[1] - 1);
}

#define SPEC_sparse_xent 4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_sparse_xent, plain_sparse_xent)
#define DT_sparse_xent SAMPLE(2)
static sx_cg_node *sample_sparse_xent(GEN_ARGS)
{
    CTX;
    sx_cg_node *logits = in(c, sxent_cases[v].l, V_UNIFORM, -3, 3);
    return sx_cg_sparse_xent(g, logits, sxent_idx(c, v), -1, sxent_cases[v].smooth);
}

#define SPEC_sparse_xent_backward                                                                  \
    4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_sparse_xent_backward, plain_sparse_xent)
#define DT_sparse_xent_backward SAMPLE(2)
static sx_cg_node *sample_sparse_xent_backward(GEN_ARGS)
{
    CTX;
    sx_cg_node *logits = in(c, sxent_cases[v].l, V_UNIFORM, -3, 3);
    sx_cg_node *idx = sxent_idx(c, v);
    sx_cg_node *dout = in(c, (shp){1, {sxent_cases[v].l.d[0]}}, V_UNIFORM, -1, 1);
    return sx_cg_sparse_xent_backward(g, logits, idx, dout, -1, sxent_cases[v].smooth);
}

/* ---- softmax family references */

static sx_status kernel_softmax(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_softmax_out(x[0], sx_cg_node_attr(n)->axis, out);
}

static sx_status kernel_log_softmax(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_log_softmax_out(x[0], sx_cg_node_attr(n)->axis, out);
}

static sx_status kernel_softmax_backward(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_softmax_backward_out(x[0], x[1], sx_cg_node_attr(n)->axis, out);
}

static sx_status kernel_log_softmax_backward(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_log_softmax_backward_out(x[0], x[1], sx_cg_node_attr(n)->axis, out);
}

static sx_status kernel_softmax_xent(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_softmax_xent_out(x[0], x[1], out);
}

static sx_status kernel_softmax_xent_backward(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_softmax_xent_backward_out(x[0], x[1], x[2], out);
}

/* Softmax family along the op's axis: (outer, len, inner) blocks. softmax, log_softmax (x),
 * softmax_backward (x is y, then dy), log_softmax_backward (x is y, then dy). */
static sx_status plain_softmax(PLAIN_ARGS)
{
    (void)compare;
    sx_cg_op op = sx_cg_node_op(n);
    int axis = sx_cg_node_attr(n)->axis;
    const sx_tensor *xv = x[0], *dy = sx_cg_node_n_inputs(n) > 1 ? x[1] : NULL;
    int64_t outer = 1, len = xv->shape[axis], inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= xv->shape[d];
    for (int d = axis + 1; d < xv->rank; d++)
        inner *= xv->shape[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
#define AT(j) ((o * len + (j)) * inner + i)
            double m = -HUGE_VAL, se = 0, sdy = 0, sdyy = 0;
            for (int64_t j = 0; j < len; j++)
                m = ref_get(xv, AT(j)) > m ? ref_get(xv, AT(j)) : m;
            for (int64_t j = 0; j < len; j++) {
                se += exp(ref_get(xv, AT(j)) - m);
                if (dy != NULL) {
                    sdy += ref_get(dy, AT(j));
                    sdyy += ref_get(dy, AT(j)) * ref_get(xv, AT(j));
                }
            }
            for (int64_t j = 0; j < len; j++) {
                double v = ref_get(xv, AT(j));
                if (op == SX_OP_SOFTMAX) {
                    want[AT(j)] = exp(v - m) / se;
                } else if (op == SX_OP_LOG_SOFTMAX) {
                    want[AT(j)] = v - m - log(se);
                    mag[AT(j)] = fabs(v) + fabs(m) + fabs(log(se));
                } else if (op == SX_OP_SOFTMAX_BACKWARD) {
                    want[AT(j)] = v * (ref_get(dy, AT(j)) - sdyy);
                    mag[AT(j)] = fabs(v) * (fabs(ref_get(dy, AT(j))) + (double)len);
                } else { /* log_softmax_backward */
                    want[AT(j)] = ref_get(dy, AT(j)) - exp(v) * sdy;
                    mag[AT(j)] = (double)len;
                }
            }
#undef AT
        }
    return SX_OK;
}

static sx_status kernel_sparse_xent(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    return sx_tensor_sparse_xent_out(x[0], x[1], a->sparse_xent.ignore, a->sparse_xent.smoothing,
                                     out);
}

static sx_status kernel_sparse_xent_backward(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    return sx_tensor_sparse_xent_backward_out(x[0], x[1], x[2], a->sparse_xent.ignore,
                                              a->sparse_xent.smoothing, out);
}

/* The cross-entropy of softmax(logits) against the smoothed one-hot row q of each index,
 * q_j = e/k + (1 - e) [j == t], in double: -sum_j q_j log_softmax_j (0 for an ignored row); its
 * backward dout_i (softmax - q). */
static sx_status plain_sparse_xent(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *l = x[0], *t = x[1];
    const sx_cg_attr *a = sx_cg_node_attr(n);
    const sx_tensor *dout = sx_cg_node_op(n) == SX_OP_SPARSE_XENT_BACKWARD ? x[2] : NULL;
    const int64_t rows = l->shape[0], k = l->shape[1];
    const double e = a->alpha;
    for (int64_t i = 0; i < rows; i++) {
        const int64_t ti = (int64_t)ref_get(t, i);
        const bool skip = ti == a->sparse_xent.ignore;
        double m = -HUGE_VAL, se = 0, sum = 0, ms = 0;
        for (int64_t j = 0; j < k; j++)
            m = fmax(m, ref_get(l, i * k + j));
        for (int64_t j = 0; j < k; j++)
            se += exp(ref_get(l, i * k + j) - m);
        for (int64_t j = 0; j < k; j++) {
            const double ls = ref_get(l, i * k + j) - m - log(se);
            const double q = skip ? 0 : e / (double)k + (j == ti ? 1 - e : 0);
            if (dout != NULL) {
                want[i * k + j] = skip ? 0 : ref_get(dout, i) * (exp(ls) - q);
                mag[i * k + j] = fabs(ref_get(dout, i));
            }
            sum -= q * ls;
            ms += fabs(q * ls) + q * (fabs(m) + 1);
        }
        if (dout == NULL) {
            want[i] = sum;
            mag[i] = ms;
        }
    }
    return SX_OK;
}

/* Cross-entropy of softmax(logits) against target per row (x: logits, target), and its
 * backward pass (x: logits, target, dout). */
static sx_status plain_softmax_xent(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *l = x[0], *t = x[1];
    const sx_tensor *dout = sx_cg_node_op(n) == SX_OP_SOFTMAX_XENT_BACKWARD ? x[2] : NULL;
    int64_t rows = l->shape[0], k = l->shape[1];
    for (int64_t i = 0; i < rows; i++) {
        double m = -HUGE_VAL, se = 0, sum = 0, ms = 0;
        for (int64_t j = 0; j < k; j++)
            m = ref_get(l, i * k + j) > m ? ref_get(l, i * k + j) : m;
        for (int64_t j = 0; j < k; j++)
            se += exp(ref_get(l, i * k + j) - m);
        for (int64_t j = 0; j < k; j++) {
            double ls = ref_get(l, i * k + j) - m - log(se);
            if (dout != NULL) {
                want[i * k + j] = ref_get(dout, i) * (exp(ls) - ref_get(t, i * k + j));
                mag[i * k + j] = fabs(ref_get(dout, i));
            }
            sum -= ref_get(t, i * k + j) * ls;
            ms += fabs(ref_get(t, i * k + j) * ls) + fabs(ref_get(t, i * k + j)) * (fabs(m) + 1);
        }
        if (dout == NULL) {
            want[i] = sum;
            mag[i] = ms;
        }
    }
    return SX_OK;
}
