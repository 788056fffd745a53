/* map_tmpl.h: the map kernel for one dtype; included by map.c with T, SFX and MAP_BLK defined
 * (for f32 once per instruction set). One case per row of sx_map.def, whose expression reads `x`
 * (T) and `a` (T), run over blocks of MAP_BLK elements by vmath.h's VM_MAP_CASE (which the fused
 * interpreter uses too). */
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
#define X(name, lname, expr, ...)                                                                  \
    case SX_MAP_##name:                                                                            \
        VM_MAP_CASE(T, expr, s, d, len)
#include "sx_map.def"
#undef X
        case SX_MAP_COUNT:
            break;
        }
    }
}

#undef MAP_CAT
#undef MAP_CAT_
