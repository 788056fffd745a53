/* dropout.c: the inverted-dropout mask. One 64-bit draw from the caller's generator is the
 * mask's key; element i's uniform comes from the (i+1)-th output of SplitMix64 started at the key
 * (a counter-based generator), so every element is computed on its own: the loop vectorises, its
 * blocks run on any number of threads, and every instruction set gives the same bits (integer
 * arithmetic only). The drop test is an exact integer compare on the top 53 bits. */
#include "tensor_impl.h"
#include "vmath.h"

#include <math.h>

/* SplitMix64 (Steele, Lea and Flood 2014; the same constants as rng.c's seeder): the state
 * advances by the golden gamma and each output is the state through this finaliser. Element i
 * of a mask with key k is mix(k + (i + 1) * DROP_GAMMA), the (i+1)-th output of SplitMix64
 * started at k. */
#define DROP_GAMMA 0x9e3779b97f4a7c15ULL
#define DROP_MIX(z)                                                                                \
    ((z) = ((z) ^ ((z) >> 30)) * 0xbf58476d1ce4e5b9ULL,                                            \
     (z) = ((z) ^ ((z) >> 27)) * 0x94d049bb133111ebULL, (z) ^ ((z) >> 31))

/* Elements per parallel task. A scheduling unit only: the values never depend on it. */
#define DROP_BLOCK 8192

/* o[0, len) = mask elements at + 0 .. at + len - 1: 0 where the element's 53-bit uniform
 * k * 2^-53 is below p (k < below), else scale. Written once, instantiated per dtype and per
 * instruction set below. The counter is an induction variable (an add per lane, not a multiply).
 * PICK(k) chooses the value: the vector kernels compare and blend; the scalar kernel indexes a
 * two-entry table with the sign bit of below - 1 - k (set exactly when k >= below, both being
 * below 2^53), as a branch would mispredict on a fraction p of the elements. */
#define DROP_LOOP(T, PICK)                                                                         \
    do {                                                                                           \
        const T pick[2] = {(T)0, scale};                                                           \
        uint64_t s = key + (uint64_t)at * DROP_GAMMA;                                              \
        _Pragma("omp simd") for (int64_t j = 0; j < len; j++)                                      \
        {                                                                                          \
            s += DROP_GAMMA;                                                                       \
            uint64_t z = s;                                                                        \
            const uint64_t k = DROP_MIX(z) >> 11;                                                  \
            o[j] = PICK(k);                                                                        \
        }                                                                                          \
    } while (0)
#define DROP_BLEND(k) ((k) < below ? pick[0] : pick[1])
#define DROP_TABLE(k) (pick[(below - 1 - (k)) >> 63])

#define DROP_KERNEL(NAME, T, PICK, ATTR)                                                           \
    ATTR static void NAME(T *o, int64_t at, int64_t len, uint64_t key, uint64_t below, T scale)    \
    {                                                                                              \
        DROP_LOOP(T, PICK);                                                                        \
    }

DROP_KERNEL(drop_f32_base, float, DROP_TABLE, )
DROP_KERNEL(drop_f64_base, double, DROP_TABLE, )
#if VM_DISPATCH
#define DROP_AVX2 __attribute__((target("avx2")))
/* 64-bit multiplies are one instruction with AVX-512DQ (emulated by three with AVX2). */
#define DROP_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw")))
DROP_KERNEL(drop_f32_avx2, float, DROP_BLEND, DROP_AVX2)
DROP_KERNEL(drop_f64_avx2, double, DROP_BLEND, DROP_AVX2)
DROP_KERNEL(drop_f32_avx512, float, DROP_BLEND, DROP_AVX512)
DROP_KERNEL(drop_f64_avx512, double, DROP_BLEND, DROP_AVX512)
#endif

typedef void drop_f32_fn(float *o, int64_t at, int64_t len, uint64_t key, uint64_t below,
                         float scale);
typedef void drop_f64_fn(double *o, int64_t at, int64_t len, uint64_t key, uint64_t below,
                         double scale);

/* One mask fill: the kernels of this CPU and their arguments. */
typedef struct drop_job {
    drop_f32_fn *k32;
    drop_f64_fn *k64;
    sx_tensor *out;
    uint64_t key, below;
    double keep;
} drop_job;

/* Mask blocks [b0, b1): elements [b0 * DROP_BLOCK, min(n, b1 * DROP_BLOCK)). */
static void drop_blocks(void *ctx, int64_t b0, int64_t b1)
{
    const drop_job *j = ctx;
    const int64_t n = j->out->size;
    for (int64_t b = b0; b < b1; b++) {
        const int64_t at = b * DROP_BLOCK, len = n - at < DROP_BLOCK ? n - at : DROP_BLOCK;
        if (j->out->dtype == SX_F32)
            j->k32((float *)j->out->data + at, at, len, j->key, j->below, (float)j->keep);
        else
            j->k64((double *)j->out->data + at, at, len, j->key, j->below, j->keep);
    }
}

/* Below these many elements one thread writes the whole mask. A mask costs about 0.15 ns per
 * element with AVX-512 (64-bit multiplies in one instruction) and 0.7-1 ns with AVX2 or the
 * portable kernel; waking a sleeping pool worker costs 10-25 us. Both thresholds are about 40 us
 * of work, where splitting it in two starts to pay. */
#define DROP_PAR_AVX512 262144
#define DROP_PAR 65536

/* The whole mask, block by block; the pool's threads over blocks from the threshold on. */
static void drop_run(sx_tensor *out, uint64_t key, uint64_t below, double keep)
{
    drop_job j = {drop_f32_base, drop_f64_base, out, key, below, keep};
    int64_t par = DROP_PAR;
#if VM_DISPATCH
    switch (vm_isa()) { /* sx__isa: AVX512 includes the DQ, VL and BW these kernels use */
    case VM_ISA_AVX512:
        j.k32 = drop_f32_avx512;
        j.k64 = drop_f64_avx512;
        par = DROP_PAR_AVX512;
        break;
    case VM_ISA_AVX2:
        j.k32 = drop_f32_avx2;
        j.k64 = drop_f64_avx2;
        break;
    default:
        break;
    }
#endif
    const int64_t blocks = (out->size + DROP_BLOCK - 1) / DROP_BLOCK;
    sx__par_range(blocks, (par + 2 * DROP_BLOCK - 1) / (2 * DROP_BLOCK), drop_blocks, &j);
}

/* Inverted-dropout mask: out[i] = 0 with probability p, else 1/(1-p); 0 <= p < 1. The mask
 * depends only on rng's state, p and out's size (never on the thread count or the CPU); the
 * call advances rng by exactly one draw.
 * How: the draw is the key; element i is dropped when k < ceil(p * 2^53), with k the top 53
 * bits of mix(key + (i + 1) * gamma) (SplitMix64). As k * 2^-53 is a 53-bit uniform in [0, 1),
 * this is exactly "uniform < p": the drop probability is ceil(p * 2^53) * 2^-53, within 2^-53
 * of p (p = 0 never drops). Elements [first, first + size) of the mask: the key moved on by
 * `first` counter steps. `who`: the public function called. */
static sx_status dropout_mask(const char *who, sx_tensor *out, sx_rng *rng, double p, int64_t first)
{
    SX_TRY(sx__check_tensor(who, "out", out));
    if (rng == NULL)
        return sx_error(SX_E_ARG, "%s: rng is NULL", who);
    if (!(p >= 0 && p < 1))
        return sx_error(SX_E_ARG, "%s: p = %g (want 0 <= p < 1)", who, p);
    if (first < 0)
        return sx_error(SX_E_ARG, "%s: first element %lld (want >= 0)", who, (long long)first);
    /* p * 2^53 is exact (a power-of-two scale) and at most 2^53 - 1, so ceil is exact. */
    const uint64_t below = (uint64_t)ceil(p * 0x1.0p53);
    const uint64_t key = sx_rng_u64(rng) + (uint64_t)first * DROP_GAMMA;
    drop_run(out, key, below, 1.0 / (1.0 - p));
    return SX_OK;
}

sx_status sx_tensor_dropout_mask(sx_tensor *out, sx_rng *rng, double p)
{
    return dropout_mask("sx_tensor_dropout_mask", out, rng, p, 0);
}

sx_status sx_tensor_dropout_mask_at(sx_tensor *out, sx_rng *rng, double p, int64_t first)
{
    return dropout_mask("sx_tensor_dropout_mask_at", out, rng, p, first);
}
