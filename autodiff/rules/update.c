/* update.c: the gradient rules of the ops of cgraph/ops/update.c. Only seq, a view of its first
 * input, passes a gradient; assign and the fused optimiser steps are NG_REFUSED in sx_ops.def
 * (sx_ad_grad refuses to differentiate through them: they write state, and the optimiser makes
 * the steps after differentiation). */
#include "rule.h"

/* seq(x, after) = x */
sx_status grad_seq(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                   sx_cg_node **gin)
{
    (void)g, (void)y;
    if (need[0])
        gin[0] = gy;
    return SX_OK;
}
