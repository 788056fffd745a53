/* fused_known_tmpl.h: the compiled kernels of the known fused programs for one dtype (T, SFX);
 * included by fused_known.c (for f32 once per instruction set). Each instruction becomes a call
 * of a one-element function made from its row of sx_map.def or sx_binary.def, the very
 * expression fused_tmpl.h's interpreter loops over (fma: a * b + c, where: a != 0 ? b : c, with
 * -ffp-contract=off as the build compiles both), so a kernel computes the interpreter's bits. The
 * kernels themselves (FK_KERNELS) and their list are generated: fused_known_progs.h. */
#define FK_CAT_(a, b) a##_##b
#define FK_CAT(a, b) FK_CAT_(a, b)

/* Map rows: x the element, a the instruction's alpha in T. The ranged rows (sin, cos, tan) read
 * vm_exact and vm_far: here never exact, so the generator leaves programs with them out (the
 * interpreter scans each block for far arguments first). */
#define X(name, lname, expr, ...)                                                                  \
    static inline T FK_CAT(fk_map_##lname, SFX)(T x, T a)                                          \
    {                                                                                              \
        const bool vm_exact = false;                                                               \
        int vm_far = 0;                                                                            \
        (void)vm_exact;                                                                            \
        (void)a;                                                                                   \
        const T y = (T)(expr);                                                                     \
        (void)vm_far;                                                                              \
        return y;                                                                                  \
    }
#include "sx_map.def"
#undef X

#define X(name, lname, expr, ...)                                                                  \
    static inline T FK_CAT(fk_binary_##lname, SFX)(T a, T b)                                       \
    {                                                                                              \
        return (T)(expr);                                                                          \
    }
#include "sx_binary.def"
#undef X

/* What the generated kernels are written in. */
#define FK_FN(k) FK_CAT(fk_kernel_##k, SFX)
#define FK_KERNEL_LIST FK_CAT(fk_kernels, SFX)
#define FK_MAP(lname, x, alpha) FK_CAT(fk_map_##lname, SFX)((x), (T)(alpha))
#define FK_BINARY(lname, a, b) FK_CAT(fk_binary_##lname, SFX)((a), (b))
#define FK_FMA(a, b, c) ((a) * (b) + (c))
#define FK_WHERE(c, a, b) ((c) != 0 ? (a) : (b))
#define FK_SIMD _Pragma("omp simd")

#define FK_KERNELS
#include "fused_known_progs.h"
#undef FK_KERNELS

#undef FK_FN
#undef FK_KERNEL_LIST
#undef FK_MAP
#undef FK_BINARY
#undef FK_FMA
#undef FK_WHERE
#undef FK_SIMD
#undef FK_CAT
#undef FK_CAT_
