/* embedding.c: the samples of the embedding ops (cgraph/ops/embedding.c): each op's SPEC_, DT_,
 * sample generator and references. Part of ../opsamples.c, which includes it. */

/* ---------------------------------------------------------------- embedding */

static sx_status kernel_embedding(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_embedding_out(x[0], x[1], sx_cg_node_attr(n)->embedding.pad, out);
}

static sx_status kernel_embedding_backward(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_embedding_backward_out(x[0], x[1], sx_cg_node_attr(n)->embedding.pad, out);
}

/* Row i of the indices reads / adds to table row idx[i]; the padding index reads zeros and adds
 * nothing. */
static sx_status plain_embedding(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    const int64_t d = y->shape[y->rank - 1], pad = sx_cg_node_attr(n)->embedding.pad;
    const bool fwd = sx_cg_node_op(n) == SX_OP_EMBEDDING;
    for (int64_t i = 0; i < x[1]->size; i++) {
        int64_t j = (int64_t)ref_get(x[1], i);
        for (int64_t k = 0; k < d; k++) {
            if (fwd) {
                want[i * d + k] = j == pad ? 0 : ref_get(x[0], j * d + k);
            } else if (j != pad) {
                want[j * d + k] += ref_get(x[0], i * d + k);
                mag[j * d + k] += fabs(ref_get(x[0], i * d + k));
            }
        }
    }
    return SX_OK;
}

/* embedding(table, idx, pad): rows of a (vocab, dim) table at indices of any rank (repeats
 * included, some rows never read), zeros at the padding index; embedding_backward(g, idx, pad,
 * vocab): its adjoint, repeated indices accumulating, the padding row zero */
static const struct {
    shp idx;
    int64_t vocab, dim, pad;
} embedding_cases[] = {
    {{2, {2, 3}}, 5, 3, -1}, {{1, {7}}, 4, 2, 1}, {{3, {2, 2, 2}}, 3, 4, 0}, {{1, {0}}, 3, 2, 2}};
#define SPEC_embedding 4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_embedding, plain_embedding)
#define DT_embedding SAMPLE(2)
static sx_cg_node *sample_embedding(GEN_ARGS)
{
    CTX;
    shp ts = {2, {embedding_cases[v].vocab, embedding_cases[v].dim}};
    sx_cg_node *table = in(c, ts, V_UNIFORM, -2, 2);
    sx_cg_node *idx =
        in_fixed(c, embedding_cases[v].idx, V_INT, 0, (double)embedding_cases[v].vocab - 1);
    return sx_cg_embedding(g, table, idx, embedding_cases[v].pad);
}

#define SPEC_embedding_backward                                                                    \
    4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_embedding_backward, plain_embedding)
#define DT_embedding_backward SAMPLE(2)
static sx_cg_node *sample_embedding_backward(GEN_ARGS)
{
    CTX;
    shp gs = embedding_cases[v].idx;
    gs.d[gs.rank++] = embedding_cases[v].dim;
    sx_cg_node *grad = in(c, gs, V_UNIFORM, -2, 2);
    sx_cg_node *idx =
        in_fixed(c, embedding_cases[v].idx, V_INT, 0, (double)embedding_cases[v].vocab - 1);
    return sx_cg_embedding_backward(g, grad, idx, embedding_cases[v].pad, embedding_cases[v].vocab);
}
