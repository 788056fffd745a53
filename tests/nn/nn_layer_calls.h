/* nn_layer_calls.h: the tests' one-line forms of the layers that take parameter structs
 * (sx_nn_conv2d, the pooling layers, sx_nn_batch_norm), each filling its struct from the
 * _default() and the numbers given, so the many small networks of the tests read as lists. */
#ifndef NN_LAYER_CALLS_H
#define NN_LAYER_CALLS_H

#include <sx_nn.h>

static inline sx_nn_layer *t_conv2d(sx_nn_net *net, sx_nn_layer *in, int kh, int kw, int filters,
                                    int stride, sx_padding padding, sx_nn_act act)
{
    sx_nn_conv2d_params p = sx_nn_conv2d_params_default(filters, kh, kw);
    p.conv.stride_h = p.conv.stride_w = stride;
    p.conv.padding = padding;
    p.act = act;
    return sx_nn_conv2d(net, in, &p);
}

static inline sx_nn_pool2d_params t_pool(int kh, int kw, int stride, sx_padding padding)
{
    sx_nn_pool2d_params p = sx_nn_pool2d_params_default(kh, kw);
    p.pool.stride_h = p.pool.stride_w = stride;
    p.pool.padding = padding;
    return p;
}

static inline sx_nn_layer *t_max_pool2d(sx_nn_net *net, sx_nn_layer *in, int kh, int kw, int stride,
                                        sx_padding padding)
{
    sx_nn_pool2d_params p = t_pool(kh, kw, stride, padding);
    return sx_nn_max_pool2d(net, in, &p);
}

static inline sx_nn_layer *t_avg_pool2d(sx_nn_net *net, sx_nn_layer *in, int kh, int kw, int stride,
                                        sx_padding padding)
{
    sx_nn_pool2d_params p = t_pool(kh, kw, stride, padding);
    return sx_nn_avg_pool2d(net, in, &p);
}

static inline sx_nn_layer *t_batch_norm(sx_nn_net *net, sx_nn_layer *in, double momentum,
                                        double eps)
{
    sx_nn_batch_norm_params p = sx_nn_batch_norm_params_default();
    p.momentum = momentum;
    p.eps = eps;
    return sx_nn_batch_norm(net, in, &p);
}

#endif
