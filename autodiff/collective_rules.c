/* collective_rules.c: gradient rules of the collectives. nn/ makes them after
 * differentiation, over gradients: allreduce_start (it mutates the communicator's buffer, like
 * the fused updates) cannot be differentiated through; an allreduce_part passes no gradient to
 * its bucket (the adjoint of a sum over the processes would be another one, at run time). */
#include "autodiff_impl.h"

sx_status grad_allreduce_start(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                               sx_cg_node **gin)
{
    (void)g, (void)y, (void)gy, (void)need, (void)gin;
    return sx_error(SX_E_UNSUPPORTED, "sx_ad_grad: cannot differentiate through allreduce_start "
                                      "(a collective, made after differentiation)");
}

sx_status grad_allreduce_part(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                              sx_cg_node **gin)
{
    (void)g, (void)y, (void)gy, (void)need, (void)gin;
    return SX_OK;
}
