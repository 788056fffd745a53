/* conv_impl.h: what conv.c (the dense kernels of the original parameters) and conv_general.c
 * (dilated, grouped, depthwise, explicitly padded and transposed convolutions) share. */
#ifndef SX_CONV_IMPL_H
#define SX_CONV_IMPL_H

#include "sx_tensor.h"

/* Do the parameters lie in the set conv.c has always served (one group, no dilation, VALID or
 * SAME_UPPER, no output padding)? Then conv.c runs them exactly as before. NULL counts as
 * such (conv.c reports it). */
bool sx__conv_legacy(const sx_conv2d_params *p);

/* The general forms of conv.c's public functions, for parameters outside that set. */
sx_status sx__conv2d_general_shape(const char *who, const sx_tensor *x, const sx_tensor *k,
                                   const sx_conv2d_params *p, int64_t out_shape[4]);
size_t sx__conv2d_general_workspace(const int64_t x_shape[4], const int64_t k_shape[4],
                                    const sx_conv2d_params *p, bool best);
sx_status sx__conv2d_general_forward(const sx_tensor *x, const sx_tensor *k,
                                     const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                     sx_tensor *y);
sx_status sx__conv2d_general_backward_input(const sx_tensor *k, const sx_tensor *dy,
                                            const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                            sx_tensor *dx);
sx_status sx__conv2d_general_backward_kernel(const sx_tensor *x, const sx_tensor *dy,
                                             const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                             sx_tensor *dk);

#endif
