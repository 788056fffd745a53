/* map_tmpl.h: the map kernel for one dtype; included by map.c with T, SFX and MAP_BLK defined
 * (for f32 once per instruction set). One case per row of sx_map.def, whose expression reads `x`
 * (T) and `a` (T), run over blocks of MAP_BLK elements. A row with a ranged function of vmath.h
 * (sin, cos, tan) first scans the block for far elements (vm_far); a block that has one is done by
 * a scalar loop with vm_exact set, which sends those elements to libm. Elsewhere the scan is dead
 * code and disappears. */
#define MAP_CAT_(a, b) a##_##b
#define MAP_CAT(a, b) MAP_CAT_(a, b)

/* dst[i] = op(src[i]) for i < n; dst == src is allowed (each element is read, then written). */
static void MAP_CAT(map, SFX)(sx_map_op op, T a, const T *src, T *dst, int64_t n)
{
    (void)a;
    for (int64_t at = 0, len; at < n; at += len) {
        len = n - at < MAP_BLK ? n - at : MAP_BLK;
        const T *s = src + at;
        T *d = dst + at;
        switch (op) {
#define X(name, str, expr)                                                                         \
    case SX_MAP_##name: {                                                                          \
        int vm_far = 0;                                                                            \
        {                                                                                          \
            const bool vm_exact = false;                                                           \
            (void)vm_exact;                                                                        \
            _Pragma("omp simd reduction(|:vm_far)") for (int64_t i = 0; i < len; i++)              \
            {                                                                                      \
                const T x = s[i];                                                                  \
                (void)(expr);                                                                      \
            }                                                                                      \
            if (!vm_far) {                                                                         \
                _Pragma("omp simd reduction(|:vm_far)") for (int64_t i = 0; i < len; i++)          \
                {                                                                                  \
                    const T x = s[i];                                                              \
                    d[i] = (T)(expr);                                                              \
                }                                                                                  \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
        const bool vm_exact = true;                                                                \
        (void)vm_exact;                                                                            \
        for (int64_t i = 0; i < len; i++) {                                                        \
            const T x = s[i];                                                                      \
            d[i] = (T)(expr);                                                                      \
        }                                                                                          \
        break;                                                                                     \
    }
#include "sx_map.def"
#undef X
        case SX_MAP_COUNT:
            break;
        }
    }
}

#undef MAP_CAT
#undef MAP_CAT_
