/* map_tmpl.h: the map kernels for one dtype; included by map.c with T and SFX defined.
 * One loop per row of sx_map.def; the row's expression reads `x` (T) and `a` (T). */
#define MAP_CAT_(a, b) a##_##b
#define MAP_CAT(a, b) MAP_CAT_(a, b)

static void MAP_CAT(map, SFX)(sx_map_op op, double alpha, const T *src, T *dst, int64_t n)
{
    const T a = (T)alpha;
    (void)a;
    switch (op) {
#define X(name, str, expr)                                                                         \
    case SX_MAP_##name:                                                                            \
        _Pragma("omp parallel for simd if (n >= SX_OMP_MIN_HEAVY)") for (int64_t i = 0; i < n;     \
                                                                         i++)                      \
        {                                                                                          \
            const T x = src[i];                                                                    \
            dst[i] = (T)(expr);                                                                    \
        }                                                                                          \
        break;
#include "sx_map.def"
#undef X
    case SX_MAP_COUNT:
        break;
    }
}

#undef MAP_CAT
#undef MAP_CAT_
