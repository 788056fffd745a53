/* conv_depthwise.h: the direct depthwise and grouped kernels (tensor/conv/conv_depthwise.c) that
 * conv_general.c runs for depthwise convolutions (groups = c) and groups of at most
 * SX__DW_MAX_GROUP channels and filters at strix's AVX2 and AVX512 levels (never installed). */
#ifndef SX_CONV_DEPTHWISE_H
#define SX_CONV_DEPTHWISE_H

#include "sx_tensor.h"

/* Channels and filters per group at most for the grouped kernels. */
#define SX__DW_MAX_GROUP 16

/* The geometry of a grouped convolution from x (n,h,w,c) through k (kh,kw,cg,f) to y
 * (n,oh,ow,f), c / cg groups of fg filters: strides, dilations, and the zero rows above /
 * columns left of x. Depthwise of multiplier 1: cg = fg = 1, f = c. */
typedef struct sx__dw_geom {
    int64_t n, h, w, c;
    int64_t kh, kw, oh, ow;
    int64_t sh, sw, dh, dw;
    int64_t pt, pl;
    int64_t f, cg, fg;
} sx__dw_geom;

typedef enum { SX__DW_FWD, SX__DW_BWD_IN, SX__DW_BWD_K } sx__dw_kind;

/* Run one kind on valid, non-empty tensors of dtype dt (F32 or F64): forward y = out from
 * x = in0 and k = in1; backward-input dx = out from k = in0 and dy = in1; backward-kernel dk = out
 * from x = in0 and dy = in1. Returns false, touching nothing, when these kernels do not serve
 * the geometry (below strix's AVX2 level, groups of more than SX__DW_MAX_GROUP channels or
 * filters, or rows too wide for their buffers); the caller
 * then runs its own. Every element is summed in an order fixed by the geometry alone, so the
 * bits do not depend on the thread count. par: whether the call may use the pool. */
bool sx__dw_direct(const sx__dw_geom *g, sx__dw_kind kind, sx_dtype dt, const void *in0,
                   const void *in1, void *out, bool par);

#endif
