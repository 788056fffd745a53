/* matmul.c: the gradient rules of the matrix products (cgraph/ops/matmul.c), with transpose
 * flags so that no transpose is materialised.
 * y is the node, x_i = y's inputs, G = gy is the adjoint of y. */
#include "rule.h"

/* y = alpha op(a) op(b) (+ beta c). With op(a) = A, op(b) = B: dA = alpha G B^T, dB = alpha
 * A^T G, written with transpose flags so no transpose is materialised; batch axes that were
 * broadcast are summed back, and so are the axes over which the addend c was broadcast
 * (dc = beta G summed to c's shape, as for add). */
sx_status grad_matmul(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    sx_cg_node *a = IN(0), *b = IN(1);
    bool ta = ATTR->trans_a, tb = ATTR->trans_b;
    double alpha = ATTR->alpha;
    if (need[0]) {
        /* da = alpha G B^T (ta = 0) or alpha B G^T (ta = 1) */
        sx_cg_node *d = ta ? sx_cg_gemm(g, b, gy, tb, true, alpha, NULL, 0)
                           : sx_cg_gemm(g, gy, b, false, !tb, alpha, NULL, 0);
        gin[0] = ad_unbroadcast(g, d, a);
    }
    if (need[1]) {
        /* db = alpha A^T G (tb = 0) or alpha G^T A (tb = 1) */
        sx_cg_node *d = tb ? sx_cg_gemm(g, gy, a, true, ta, alpha, NULL, 0)
                           : sx_cg_gemm(g, a, gy, !ta, false, alpha, NULL, 0);
        gin[1] = ad_unbroadcast(g, d, b);
    }
    if (sx_cg_node_n_inputs(y) == 3 && need[2]) /* beta G, summed over c's broadcast axes */
        gin[2] = ad_unbroadcast(g, ad_scale(g, gy, ATTR->beta), IN(2));
    DONE();
}

/* dot(a, b) = sum a b: G b and G a (in each other's shapes) */
sx_status grad_dot(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                   sx_cg_node **gin)
{
    sx_cg_node *a = IN(0), *b = IN(1);
    if (need[0])
        gin[0] = sx_cg_mul(g, gy, sx_cg_reshape(g, b, sx_cg_node_rank(a), sx_cg_node_shape(a)));
    if (need[1])
        gin[1] = sx_cg_mul(g, gy, sx_cg_reshape(g, a, sx_cg_node_rank(b), sx_cg_node_shape(b)));
    DONE();
}
