/* map.c: unary element-wise kernels, y[i] = f(x[i]). Each op is one row of sx_map.def; the
 * loop is instantiated per op and per dtype (map_tmpl.h included with T = float and with
 * T = double) so the compiler sees plain loops it can vectorise. f32 transcendentals are the
 * branch-free functions of vmath.h, and the f32 kernel is also built for AVX2 and AVX-512 and
 * picked at run time; the pool's threads above a size threshold. */
#include "tensor_impl.h"
#include "vmath.h"

#include <tgmath.h>

static const char *const map_names[] = {
#define X(NAME, name, expr, ...) #name,
#include "sx_map.def"
#undef X
};
_Static_assert(sizeof map_names / sizeof map_names[0] == SX_MAP_COUNT, "one name per map op");

const char *sx_map_name(sx_map_op op)
{
    return (unsigned)op < SX_MAP_COUNT ? map_names[op] : "bad-map-op";
}

/* Elements per block of the f32 kernels (the far-argument scan of sin/cos/tan covers one block,
 * which then stays in L1 for the computation). f64 rows have no ranged function (libm takes
 * every argument): one block. */
#define MAP_BLK 4096
#define ISA_TMPL "elementwise/map_tmpl.h"
#include "isa_each.h"
#undef ISA_TMPL
#undef MAP_BLK
#define T double
#define MAP_BLK INT64_MAX
#define SFX f64
#include "map_tmpl.h"
#undef T
#undef MAP_BLK
#undef SFX

typedef void map_f32_fn(sx_map_op op, float a, const float *src, float *dst, int64_t n);

static map_f32_fn *map_f32_kernel(void)
{
#if VM_DISPATCH
    switch (vm_isa()) {
    case VM_ISA_AVX512:
        return map_f32_avx512;
    case VM_ISA_AVX2:
        return map_f32_avx2;
    default:
        break;
    }
#endif
    return map_f32;
}

/* Below these sizes one thread does the whole map: f32 kernels are vectorised (a few tenths of
 * a nanosecond per element, less than waking a sleeping worker costs for smaller inputs); f64
 * transcendentals are libm calls, about ten times slower. Above, the pool's tasks take
 * contiguous ranges (multiples of 16 elements): the result does not depend on the split. */
#define MAP_PAR_F32 65536
#define MAP_PAR_F64 SX_PAR_MIN_HEAVY

typedef struct map_ctx {
    sx_map_op op;
    double alpha;
    const sx_tensor *x;
    sx_tensor *out;
    map_f32_fn *k32;
} map_ctx;

/* out[lo, hi) = op(x[lo, hi)), for the blocks [lo16, hi16) of 16 elements. */
static void map_range(void *ctx, int64_t lo16, int64_t hi16)
{
    const map_ctx *m = ctx;
    const int64_t n = m->x->size, lo = lo16 * 16, hi = hi16 * 16 < n ? hi16 * 16 : n;
    if (m->x->dtype == SX_F32)
        m->k32(m->op, (float)m->alpha, (const float *)m->x->data + lo, (float *)m->out->data + lo,
               hi - lo);
    else
        map_f64(m->op, m->alpha, (const double *)m->x->data + lo, (double *)m->out->data + lo,
                hi - lo);
}

static void map_run(sx_map_op op, double alpha, const sx_tensor *x, sx_tensor *out)
{
    map_ctx m = {op, alpha, x, out, x->dtype == SX_F32 ? map_f32_kernel() : NULL};
    const int64_t grain = (x->dtype == SX_F32 ? MAP_PAR_F32 : MAP_PAR_F64) / 2 / 16;
    sx__par_range((x->size + 15) / 16, grain, map_range, &m);
}

sx_status sx_tensor_map_out(sx_map_op op, double alpha, const sx_tensor *x, sx_tensor *out)
{
    const char *who = "sx_tensor_map_out";
    if ((unsigned)op >= SX_MAP_COUNT)
        return sx_error(SX_E_ARG, "%s: unknown op %d", who, (int)op);
    SX_TRY(sx__check_tensor(who, "x", x));
    SX_TRY(sx__check_out(who, out, x->dtype, x->rank, x->shape));
    map_run(op, alpha, x, out);
    return SX_OK;
}

sx_status sx_tensor_map(sx_map_op op, double alpha, const sx_tensor *x, sx_tensor **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "sx_tensor_map: out is NULL");
    *out = NULL;
    SX_TRY(sx__check_tensor("sx_tensor_map", "x", x));
    sx_tensor *y = NULL;
    SX_TRY(sx_tensor_new(x->dtype, x->rank, x->shape, &y));
    sx_status s = sx_tensor_map_out(op, alpha, x, y);
    if (s != SX_OK) {
        sx_tensor_free(y);
        return s;
    }
    *out = y;
    return SX_OK;
}
