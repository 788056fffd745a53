/* conv.c: the gradient rules of the convolutions (cgraph/ops/conv.c): each op's adjoints are
 * the family's other two ops (forward, backward-input, backward-kernel are bilinear).
 * y is the node, x_i = y's inputs, G = gy is the adjoint of y. */
#include "rule.h"

/* conv2d(x, k): dx = conv2d_backward_input(k, G), dk = conv2d_backward_kernel(x, G) */
sx_status grad_conv2d(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    if (ATTR->prog.n != 0) /* an optimised graph's epilogue (SX_PASS_CONV_EPILOGUE) */
        return sx_error(SX_E_UNSUPPORTED,
                        "sx_ad_grad: cannot differentiate a conv2d with an epilogue (optimise "
                        "after differentiating)");
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv2d_backward_input(g, IN(1), gy, p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv2d_backward_kernel(g, IN(0), gy, p, sx_cg_node_shape(IN(1)));
    DONE();
}

/* conv2d_backward_input(k, dy) is bilinear: <backward_input(k, dy), G> = <conv2d(G, k), dy>, so
 * d(dy) = conv2d(G, k) and dk = conv2d_backward_kernel(G, dy). */
sx_status grad_conv2d_backward_input(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                     const bool *need, sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv2d_backward_kernel(g, gy, IN(1), p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv2d(g, gy, IN(0), p);
    DONE();
}

/* conv2d_backward_kernel(x, dy): <backward_kernel(x, dy), G> = <conv2d(x, G), dy>, so
 * d(dy) = conv2d(x, G) and dx = conv2d_backward_input(G, dy). */
sx_status grad_conv2d_backward_kernel(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                      const bool *need, sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv2d_backward_input(g, gy, IN(1), p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv2d(g, IN(0), gy, p);
    DONE();
}

/* conv_transpose2d(x, k) = T(x, k), bilinear: dx = conv_transpose2d_backward_input(k, G),
 * dk = conv_transpose2d_backward_kernel(x, G) */
sx_status grad_conv_transpose2d(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv_transpose2d_backward_input(g, IN(1), gy, p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv_transpose2d_backward_kernel(g, IN(0), gy, p, sx_cg_node_shape(IN(1)));
    DONE();
}

/* conv_transpose2d_backward_input(k, dy) is bilinear: <backward_input(k, dy), G> = <T(G, k), dy>,
 * so d(dy) = T(G, k) and dk = conv_transpose2d_backward_kernel(G, dy). */
sx_status grad_conv_transpose2d_backward_input(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                               const bool *need, sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv_transpose2d_backward_kernel(g, gy, IN(1), p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv_transpose2d(g, gy, IN(0), p);
    DONE();
}

/* conv_transpose2d_backward_kernel(x, dy): <backward_kernel(x, dy), G> = <T(x, G), dy>, so
 * d(dy) = T(x, G) and dx = conv_transpose2d_backward_input(G, dy). */
sx_status grad_conv_transpose2d_backward_kernel(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                                const bool *need, sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv_transpose2d_backward_input(g, gy, IN(1), p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv_transpose2d(g, IN(0), gy, p);
    DONE();
}
