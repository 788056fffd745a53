/* fused_rules.c: gradient rules of the ops the optimiser makes (seq, fused chains, fused
 * optimiser updates). Differentiation happens before optimisation, so only seq, a view, passes
 * a gradient; the others report that they cannot be differentiated. */
#include "autodiff_impl.h"

/* seq(x, after) = x */
sx_status grad_seq(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                   sx_cg_node **gin)
{
    (void)g, (void)y;
    if (need[0])
        gin[0] = gy;
    return SX_OK;
}

#define NOT_DIFFERENTIABLE(name)                                                                   \
    sx_status grad_##name(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,         \
                          sx_cg_node **gin)                                                        \
    {                                                                                              \
        (void)g, (void)y, (void)gy, (void)need, (void)gin;                                         \
        return sx_error(SX_E_UNSUPPORTED, "sx_ad_grad: cannot differentiate through " #name        \
                                          " (differentiate before optimising)");                   \
    }
NOT_DIFFERENTIABLE(fused)
NOT_DIFFERENTIABLE(fused_update)
NOT_DIFFERENTIABLE(matmul_update)
