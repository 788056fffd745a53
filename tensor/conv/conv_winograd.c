/* conv_winograd.c: Winograd's F(2x2, 5x5) and F(4x4, 3x3) for dense 5x5 and 3x3 convolutions at
 * stride 1, per instruction set (AVX2, AVX-512, NEON) and dtype: conv_winograd_tmpl.h through
 * conv_vec_each.h. The method, its rounding and when it runs are described in conv_plan.c. */
#include "conv_impl.h"
#include "tensor_impl.h"

#include <string.h>

#define CONV_VEC_TMPL "conv_winograd_tmpl.h"
#include "conv_vec_each.h"
#undef CONV_VEC_TMPL
