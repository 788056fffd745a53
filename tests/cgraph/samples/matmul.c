/* matmul.c: the samples of the matrix products (cgraph/ops/matmul.c): each op's SPEC_, DT_, sample
 * generator and references. Part of ../opsamples.c, which includes it. */

/* ---------------------------------------------------------------- matmul */

static const struct {
    shp a, b;
    bool ta, tb;
    shp c; /* gemm with this addend (rank -1: none), alpha 0.5, beta -1.5 */
} matmul_cases[] = {
    {{2, {3, 4}}, {2, {4, 5}}, false, false, {-1, {0}}},
    {{2, {4, 3}}, {2, {4, 5}}, true, false, {-1, {0}}},
    {{2, {3, 4}}, {2, {5, 4}}, false, true, {-1, {0}}},
    {{2, {4, 3}}, {2, {5, 4}}, true, true, {-1, {0}}},
    {{3, {2, 3, 4}}, {2, {4, 5}}, false, false, {-1, {0}}},       /* shared b */
    {{4, {2, 1, 3, 4}}, {3, {3, 4, 2}}, false, false, {-1, {0}}}, /* batch broadcast */
    {{2, {3, 4}}, {2, {4, 2}}, false, false, {2, {3, 2}}},        /* gemm */
    {{2, {1, 4}}, {2, {4, 1}}, false, false, {-1, {0}}},          /* 1 x 1 result */
    /* gemm with an addend that broadcasts (a bias row, a bias vector, a scalar, a column over
     * batches): its gradient is summed back to its shape */
    {{2, {3, 4}}, {2, {4, 2}}, false, false, {2, {1, 2}}},
    {{2, {4, 3}}, {2, {4, 2}}, true, false, {1, {2}}},
    {{2, {3, 4}}, {2, {2, 4}}, false, true, {0, {0}}},
    {{3, {2, 3, 4}}, {2, {4, 2}}, false, false, {2, {3, 1}}},
    /* a transposed matrix shared by a batch (a tied output layer), and over two batch axes
     * with an addend per position: b's gradient is one product over the stacked rows */
    {{3, {2, 3, 4}}, {2, {5, 4}}, false, true, {-1, {0}}},
    {{4, {2, 2, 3, 4}}, {2, {5, 4}}, false, true, {3, {2, 3, 5}}},
};
#define SPEC_matmul 14, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_matmul, plain_matmul)
#define DT_matmul GEN(gen_matmul, 8)
static sx_cg_node *sample_matmul(GEN_ARGS)
{
    CTX;
    sx_cg_node *a = in(c, matmul_cases[v].a, V_UNIFORM, -1, 1);
    sx_cg_node *b = in(c, matmul_cases[v].b, V_UNIFORM, -1, 1);
    if (matmul_cases[v].c.rank < 0)
        return sx_cg_matmul(g, a, b, matmul_cases[v].ta, matmul_cases[v].tb);
    sx_cg_node *cc = in(c, matmul_cases[v].c, V_UNIFORM, -1, 1);
    return sx_cg_gemm(g, a, b, matmul_cases[v].ta, matmul_cases[v].tb, 0.5, cc, -1.5);
}

static const shp dot_cases[][2] = {
    {{1, {5}}, {1, {5}}}, {{2, {2, 3}}, {1, {6}}}, {{0, {0}}, {0, {0}}}, {{1, {0}}, {1, {0}}}};
#define SPEC_dot 4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_dot, plain_dot)
#define DT_dot GEN(gen_dot, 2)
static sx_cg_node *sample_dot(GEN_ARGS)
{
    CTX;
    sx_cg_node *a = in(c, dot_cases[v][0], V_UNIFORM, -2, 2);
    return sx_cg_dot(g, a, in(c, dot_cases[v][1], V_UNIFORM, -2, 2));
}

static sx_status kernel_matmul(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    if (sx_cg_node_n_inputs(n) == 3) {
        sx_status st = sx_tensor_broadcast_out(x[2], out); /* the addend broadcasts */
        if (st != SX_OK)
            return st;
        return sx_tensor_matmul_out(x[0], x[1], a->trans_a, a->trans_b, a->alpha, a->beta, out);
    }
    return sx_tensor_matmul_out(x[0], x[1], a->trans_a, a->trans_b, a->alpha, 0, out);
}

static sx_status kernel_dot(KERNEL_ARGS)
{
    (void)n, (void)s;
    /* the kernel takes vectors: flat views of the operands */
    int64_t na = x[0]->size, nb = x[1]->size;
    sx_tensor va = sx_tensor_view(out->dtype, 1, &na, x[0]->data);
    sx_tensor vb = sx_tensor_view(out->dtype, 1, &nb, x[1]->data);
    return sx_tensor_dot_out(&va, &vb, out);
}

/* Batched matmul with broadcasting batch axes and optional transposes, and the gemm addend. */
static sx_status plain_matmul(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    const sx_cg_attr *at = sx_cg_node_attr(n);
    const sx_tensor *a = x[0], *b = x[1];
    const sx_tensor *c = sx_cg_node_n_inputs(n) == 3 ? x[2] : NULL;
    int ro = y->rank;
    int64_t ar = a->shape[a->rank - 2], ac = a->shape[a->rank - 1];
    int64_t br = b->shape[b->rank - 2], bc = b->shape[b->rank - 1];
    int64_t kk = at->trans_a ? ar : ac;
    for (int64_t o = 0; o < y->size; o++) {
        int64_t idx[SX_MAX_RANK], abase = 0, bbase = 0;
        ref_unravel(o, ro, y->shape, idx);
        for (int d = 0; d < a->rank - 2; d++)
            abase = abase * a->shape[d] + (a->shape[d] == 1 ? 0 : idx[d + ro - a->rank]);
        for (int d = 0; d < b->rank - 2; d++)
            bbase = bbase * b->shape[d] + (b->shape[d] == 1 ? 0 : idx[d + ro - b->rank]);
        int64_t i = idx[ro - 2], j = idx[ro - 1];
        double acc = 0, m = 0;
        for (int64_t k = 0; k < kk; k++) {
            double va = ref_get(a, abase * ar * ac + (at->trans_a ? k * ac + i : i * ac + k));
            double vb = ref_get(b, bbase * br * bc + (at->trans_b ? j * bc + k : k * bc + j));
            acc += va * vb;
            m += fabs(va * vb);
        }
        double vc = c ? ref_get(c, ref_bcast_at(c, ro, idx)) : 0; /* the addend broadcasts */
        want[o] = at->alpha * acc + at->beta * vc;
        mag[o] = fabs(at->alpha) * m + fabs(at->beta * vc);
    }
    return SX_OK;
}

static sx_status plain_dot(PLAIN_ARGS)
{
    (void)n, (void)compare;
    want[0] = 0;
    for (int64_t i = 0; i < x[0]->size; i++) {
        want[0] += ref_get(x[0], i) * ref_get(x[1], i);
        mag[0] += fabs(ref_get(x[0], i) * ref_get(x[1], i));
    }
    return SX_OK;
}
