/* map.c: unary element-wise kernels, y[i] = f(x[i]). Each op is one row of sx_map.def; the
 * loop is instantiated per op and per dtype (map_tmpl.h included with T = float and with
 * T = double) so the compiler sees plain loops it can vectorise. f32 transcendentals are the
 * branch-free functions of vmath.h, and the f32 kernel is also built for AVX2 and AVX-512 and
 * picked at run time; OpenMP above a size threshold. */
#include "tensor_impl.h"
#include "vmath.h"

#include <tgmath.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static const char *const map_names[] = {
#define X(name, str, expr) str,
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
#define ISA_TMPL "map_tmpl.h"
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
 * a nanosecond per element, less than waking a sleeping OpenMP worker costs for smaller
 * inputs); f64 transcendentals are libm calls, about ten times slower. Above, each thread takes
 * one contiguous range (a multiple of 16 elements): the result does not depend on the split. */
#define MAP_PAR_F32 65536
#define MAP_PAR_F64 SX_OMP_MIN_HEAVY

/* out[lo, hi) = op(x[lo, hi)). */
static void map_range(sx_map_op op, double alpha, const sx_tensor *x, sx_tensor *out,
                      map_f32_fn *k32, int64_t lo, int64_t hi)
{
    if (x->dtype == SX_F32)
        k32(op, (float)alpha, (const float *)x->data + lo, (float *)out->data + lo, hi - lo);
    else
        map_f64(op, alpha, (const double *)x->data + lo, (double *)out->data + lo, hi - lo);
}

static void map_run(sx_map_op op, double alpha, const sx_tensor *x, sx_tensor *out)
{
    const int64_t n = x->size;
    map_f32_fn *k32 = x->dtype == SX_F32 ? map_f32_kernel() : NULL;
    if (n < (x->dtype == SX_F32 ? MAP_PAR_F32 : MAP_PAR_F64)) {
        map_range(op, alpha, x, out, k32, 0, n);
        return;
    }
#pragma omp parallel
    {
        int64_t lo = 0, hi = n;
#ifdef _OPENMP
        const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t per = ((n + nt - 1) / nt + 15) & ~(int64_t)15;
        lo = t * per < n ? t * per : n;
        hi = n - lo > per ? lo + per : n;
#endif
        if (hi > lo)
            map_range(op, alpha, x, out, k32, lo, hi);
    }
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
