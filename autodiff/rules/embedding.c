/* embedding.c: the gradient rules of the embedding ops (cgraph/ops/embedding.c).
 * The two ops are each other's adjoint in the table / gradient argument, so each rule is the
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
            return ad_status(g);
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
            return ad_status(g);
    }
    return SX_OK;
}
