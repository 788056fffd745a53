/* conv_vec_each.h: instantiate the vector template CONV_VEC_TMPL (see conv_vec.h) once per
 * instruction set and dtype of simd.h: AVX2 and AVX-512 (f32, f64) where the compiler targets
 * x86-64, NEON (f32, f64) where it targets AArch64; the exported units and helpers are named by
 * SFX (sx__conv_direct_fwd_unit_f32_avx2, ...; conv_impl.h declares them). The includer defines
 * CONV_VEC_TMPL, includes this file, then undefines it. No include guard. */
#if SIMD_HAVE_X86
#define SIMD_ISA SIMD_AVX2
#define SIMD_BITS 32
#define T float
#define SFX f32_avx2
#include "conv_vec.h"
#define SIMD_ISA SIMD_AVX2
#define SIMD_BITS 64
#define T double
#define SFX f64_avx2
#include "conv_vec.h"
#define SIMD_ISA SIMD_AVX512
#define SIMD_BITS 32
#define T float
#define SFX f32_avx512
#include "conv_vec.h"
#define SIMD_ISA SIMD_AVX512
#define SIMD_BITS 64
#define T double
#define SFX f64_avx512
#include "conv_vec.h"
#endif
#if SIMD_HAVE_NEON
#define SIMD_ISA SIMD_NEON
#define SIMD_BITS 32
#define T float
#define SFX f32_neon
#include "conv_vec.h"
#define SIMD_ISA SIMD_NEON
#define SIMD_BITS 64
#define T double
#define SFX f64_neon
#include "conv_vec.h"
#endif
