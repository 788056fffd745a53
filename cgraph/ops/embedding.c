/* ops/embedding.c: embedding(table, idx), the rows of a (vocab, dim) table at integer indices
 * (zeros at the padding index attr.embedding.pad, -1 for none), and embedding_backward(g, idx), its
 * adjoint: a (vocab = attr.embedding.vocab, dim) table with g's rows added at idx, the padding row
 * left at zero. Indices travel as values of the graph's float dtype, as for gather and one_hot. */
#ifndef CG_GRAD_RULES /* the ops; their gradient rules, at the end, build apart (ops/rule.h) */
#include "cgraph_impl.h"

#include <string.h>

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

/* ---------------------------------------------------------------- constructors */

sx_cg_node *sx_cg_embedding(sx_cg_graph *g, sx_cg_node *table, sx_cg_node *idx, int64_t pad)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.embedding.pad = pad;
    return cg_op2(g, SX_OP_EMBEDDING, table, idx, &a);
}

sx_cg_node *sx_cg_embedding_backward(sx_cg_graph *g, sx_cg_node *grad, sx_cg_node *idx, int64_t pad,
                                     int64_t vocab)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.embedding.pad = pad;
    a.embedding.vocab = vocab;
    return cg_op2(g, SX_OP_EMBEDDING_BACKWARD, grad, idx, &a);
}

/* ---------------------------------------------------------------- shape rules */

/* The padding index against the vocabulary: -1, or a row of the table. */
static sx_status check_pad(const sx_cg_node *n, int64_t vocab)
{
    int64_t pad = n->attr.embedding.pad;
    if (pad < -1 || pad >= vocab)
        return sx_error(SX_E_RANGE, "%s: padding index %lld (want -1 for none, or 0..%lld)",
                        cg_who(n), (long long)pad, (long long)vocab - 1);
    return SX_OK;
}

/* table (vocab, dim), idx (s...) -> (s..., dim) */
sx_status cg_shape_embedding(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_want_rank(n, 0, 2));
    if (IN_VALUE(1)->rank + 1 > SX_MAX_RANK)
        return sx_error(SX_E_RANK, "%s: indices of rank %d leave no room for the row axis",
                        cg_who(n), IN_VALUE(1)->rank);
    SX_TRY(check_pad(n, IN_VALUE(0)->shape[0]));
    int64_t s[SX_MAX_RANK];
    memcpy(s, IN_VALUE(1)->shape, sizeof s);
    s[IN_VALUE(1)->rank] = IN_VALUE(0)->shape[1];
    SX_TRY(sx_shape_check(cg_who(n), IN_VALUE(1)->rank + 1, s));
    cg_set_shape(n, IN_VALUE(1)->rank + 1, s);
    return SX_OK;
}

/* g (s..., dim), idx (s...) -> (vocab, dim) */
sx_status cg_shape_embedding_backward(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    const sx_tensor *gr = IN_VALUE(0), *idx = IN_VALUE(1);
    if (gr->rank != idx->rank + 1 || !sx_shape_equal(idx->rank, gr->shape, idx->rank, idx->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE,
                        "%s: gradient %s does not fit indices %s (want their shape "
                        "and one more axis)",
                        cg_who(n), sx_shape_str(gr->rank, gr->shape, a, sizeof a),
                        sx_shape_str(idx->rank, idx->shape, b, sizeof b));
    }
    if (n->attr.embedding.vocab < 1)
        return sx_error(SX_E_ARG, "%s: vocabulary of %lld rows (want >= 1)", cg_who(n),
                        (long long)n->attr.embedding.vocab);
    SX_TRY(check_pad(n, n->attr.embedding.vocab));
    int64_t s[2] = {n->attr.embedding.vocab, gr->shape[gr->rank - 1]};
    SX_TRY(sx_shape_check(cg_who(n), 2, s));
    cg_set_shape(n, 2, s);
    return SX_OK;
}

/* ---------------------------------------------------------------- evaluators */

sx_status cg_eval_embedding(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_embedding_out(IN_VALUE(0), IN_VALUE(1), n->attr.embedding.pad, OUT);
}

sx_status cg_eval_embedding_backward(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_embedding_backward_out(IN_VALUE(0), IN_VALUE(1), n->attr.embedding.pad, OUT);
}

/* ---------------------------------------------------------------- flop model */

/* a copy of rows: no arithmetic */
cg_cost cg_eval_embedding_cost(const sx_cg_node *n)
{
    return cg_cost_none(n);
}

/* one addition per element of the gradient rows */
cg_cost cg_eval_embedding_backward_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, 1);
}

#else
/* ---------------------------------------------------------------- gradient rules */

/* The two ops are each other's adjoint in the table / gradient argument, so each rule is the
 * other op with the same indices and padding index; the indices have no gradient. */
#include "rule.h"

/* embedding(T, idx): dT = embedding_backward(G, idx), the padding row left at zero (its rows
 * read as zeros, so T's padding row does not reach y) */
sx_status grad_embedding(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                         sx_cg_node **gin)
{
    const sx_cg_attr *a = sx_cg_node_attr(y);
    if (need[0]) {
        gin[0] =
            sx_cg_embedding_backward(g, gy, IN(1), a->embedding.pad, sx_cg_node_shape(IN(0))[0]);
        if (gin[0] == NULL)
            return sx__cg_grad_status(g);
    }
    return SX_OK;
}

/* embedding_backward(h, idx): dh = embedding(G, idx), zeros at the padding index */
sx_status grad_embedding_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                  sx_cg_node **gin)
{
    const sx_cg_attr *a = sx_cg_node_attr(y);
    if (need[0]) {
        gin[0] = sx_cg_embedding(g, gy, IN(1), a->embedding.pad);
        if (gin[0] == NULL)
            return sx__cg_grad_status(g);
    }
    return SX_OK;
}

#endif
