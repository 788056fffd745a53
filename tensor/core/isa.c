/* isa.c: the one instruction-set switch of strix's kernels. Every kernel family that has
 * AVX2 and AVX-512 builds (vmath's map/fused/update/fold/softmax, the GEMM, direct and Winograd
 * conv, pooling, dropout, batch norm) asks sx__isa() which to run, so one environment variable
 * (SX_ISA) moves the whole process to the AVX2 or the baseline kernels (an AArch64 process runs
 * at NEON, which SX_ISA=base lowers to the baseline): that is how the tests cover
 * the paths most laptops take on a CPU with AVX-512. Detected once, then cached. */
#include "tensor_impl.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The widest set this CPU and OS run. AVX-512 means the F, VL, BW and DQ subsets (every
 * AVX-512 CPU since Skylake-SP has all four; the kernels use them) plus AVX2 and FMA. Only GNU C
 * compilers on x86-64 have __builtin_cpu_supports. NEON (Advanced SIMD) is part of every AArch64
 * CPU. Elsewhere the baseline. */
static int isa_cpu(void)
{
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
        return SX__ISA_AVX512;
    if (avx2)
        return SX__ISA_AVX2;
#elif defined(__aarch64__)
    return SX__ISA_NEON;
#endif
    return SX__ISA_BASE;
}

/* isa_cpu() capped by $SX_ISA: base caps every set; avx2 and avx512 cap x86's, neon caps
 * AArch64's (to itself); a set of the other family, or anything else, is ignored. */
static int isa_detect(void)
{
    const int isa = isa_cpu();
    const char *cap = getenv("SX_ISA");
    if (cap == NULL)
        return isa;
    if (strcmp(cap, "base") == 0)
        return SX__ISA_BASE;
    const bool x86 = isa == SX__ISA_AVX2 || isa == SX__ISA_AVX512;
    const int c = strcmp(cap, "avx2") == 0 && x86     ? SX__ISA_AVX2
                  : strcmp(cap, "avx512") == 0 && x86 ? SX__ISA_AVX512
                                                      : isa;
    return c < isa ? c : isa;
}

int sx__isa(void)
{
    /* Racing first calls all compute the same value, so a relaxed cache is enough. */
    static atomic_int cached = -1;
    int isa = atomic_load_explicit(&cached, memory_order_relaxed);
    if (isa < 0) {
        isa = isa_detect();
        atomic_store_explicit(&cached, isa, memory_order_relaxed);
    }
    return isa;
}

const char *sx_isa_name(void)
{
    static const char *const names[] = {"base", "avx2", "avx512", "neon"};
    return names[sx__isa()];
}
