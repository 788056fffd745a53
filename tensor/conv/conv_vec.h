/* conv_vec.h: one instance of the convolution's vector template CONV_VEC_TMPL (a quoted file
 * name: conv_direct_tmpl.h or conv_winograd_tmpl.h) for the instruction set and dtype the
 * includer defines (SIMD_ISA, SIMD_BITS, T, SFX: see simd.h; conv_vec_each.h defines them for
 * every set); it undefines them all after. The register tiles are sized by the set: about CONV_ACC
 * accumulators, 24 of the 32 registers of AVX-512 and AArch64, 12 of AVX2's 16 (the rest hold the
 * operands: with 24 on AVX2 the tiles spilled). A tile of nv vectors (nv <= CONV_NVMAX) spans at
 * most CONV_TILE(nv) pixels, taps or rows. The filters run in chunks of CONV_NVMAX vectors: AVX2
 * takes 2 (16 filters by 6 pixels), not 4 by 3 pixels, whose loads of the kernel per multiply
 * made the forward pass L2-bound (47 against 72 GFLOP/s for the GEMM path on a 3x3 layer of
 * 64 channels, Zen 3). */
#include "simd.h"

#define CONV_TILE_MAX 12
/* (nv, pixels) of the forward tiles (tile_pixels' choices), and every (nv, n <= CONV_TILE(nv))
 * of the other tiles: the cases of their switches. */
/* clang-format off */
#if SIMD_REGS >= 32
#define CONV_ACC 24
#define CONV_NVMAX 4
#define CONV_WG_NVMAX 4
#define CONV_FP_CASES(C) \
    C(1, 12) C(1, 11) C(1, 10) C(1, 9) C(2, 12) C(2, 11) C(2, 10) C(2, 9) C(3, 8) C(3, 7) \
    C(4, 6) C(4, 5)
#define CONV_TILE_CASES(C) \
    C(1, 1) C(1, 2) C(1, 3) C(1, 4) C(1, 5) C(1, 6) C(1, 7) C(1, 8) C(1, 9) C(1, 10) C(1, 11) \
    C(1, 12) C(2, 1) C(2, 2) C(2, 3) C(2, 4) C(2, 5) C(2, 6) C(2, 7) C(2, 8) C(2, 9) C(2, 10) \
    C(2, 11) C(2, 12) C(3, 1) C(3, 2) C(3, 3) C(3, 4) C(3, 5) C(3, 6) C(3, 7) C(3, 8) \
    C(4, 1) C(4, 2) C(4, 3) C(4, 4) C(4, 5) C(4, 6)
#define CONV_WG_CASES(C) CONV_TILE_CASES(C)
#else
#define CONV_ACC 12
#define CONV_NVMAX 2
#define CONV_WG_NVMAX 4
#define CONV_FP_CASES(C) C(1, 12) C(1, 11) C(1, 10) C(1, 9) C(2, 6) C(2, 5)
#define CONV_TILE_CASES(C) \
    C(1, 1) C(1, 2) C(1, 3) C(1, 4) C(1, 5) C(1, 6) C(1, 7) C(1, 8) C(1, 9) C(1, 10) C(1, 11) \
    C(1, 12) C(2, 1) C(2, 2) C(2, 3) C(2, 4) C(2, 5) C(2, 6)
#define CONV_WG_CASES(C) \
    CONV_TILE_CASES(C) C(3, 1) C(3, 2) C(3, 3) C(3, 4) C(4, 1) C(4, 2) C(4, 3)
#endif
/* clang-format on */
#define CONV_TILE(nv) ((nv) <= CONV_ACC / 12 ? 12 : CONV_ACC / (nv))

#include CONV_VEC_TMPL

#undef CONV_TILE
#undef CONV_TILE_CASES
#undef CONV_FP_CASES
#undef CONV_ACC
#undef CONV_NVMAX
#undef CONV_WG_NVMAX
#undef CONV_WG_CASES
#undef CONV_TILE_MAX
#include "simd_end.h"
#undef T
#undef SFX
