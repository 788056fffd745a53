/* conv_direct.c: the direct kernels of a dense convolution, per instruction set (AVX2,
 * AVX-512, NEON) and dtype: conv_direct_tmpl.h through conv_vec_each.h. They keep a tile of
 * results in vector registers and read a zero-padded copy of the unit's band, so no tap tests a
 * border: forward and backward-kernel (reading x in place when no window leaves it), and
 * backward-input: with stride 1 as the forward kernel over dy with the rotated kernel, or a
 * gather over the filters when c is small; strided, when c fills a vector, by phases (each
 * phase of dx a stride-1 correlation of dy with a sub-kernel, on the forward tiles).
 * conv_plan.c decides when they run. */
#include "conv_impl.h"
#include "tensor_impl.h"

#include <string.h>

#define CONV_VEC_TMPL "conv_direct_tmpl.h"
#include "conv_vec_each.h"
#undef CONV_VEC_TMPL
