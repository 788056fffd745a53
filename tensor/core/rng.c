/* rng.c: the seeded generator behind every random draw (xoshiro256** seeded by splitmix64).
 * No global state: callers own their sx_rng, so a seed fixes every result. */
#include "tensor_impl.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void sx_rng_seed(sx_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

uint64_t sx_rng_u64(sx_rng *r)
{
    return sx_rng_u64_inline(r);
}

double sx_rng_uniform(sx_rng *r)
{
    return (double)(sx_rng_u64(r) >> 11) * 0x1.0p-53;
}

double sx_rng_normal(sx_rng *r)
{
    double u1 = 1.0 - sx_rng_uniform(r); /* (0, 1]: log is finite */
    double u2 = sx_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925286766559 * u2);
}

uint64_t sx_rng_below(sx_rng *r, uint64_t n)
{
    assert(n > 0);
    uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* reject the biased tail */
    uint64_t x;
    do {
        x = sx_rng_u64(r);
    } while (x >= limit);
    return x % n;
}
