/* map.c: unary element-wise kernels, y[i] = f(x[i]). Each op is one row of sx_map.def; the
 * loop is instantiated per op and per dtype (map_tmpl.h included once with T = float and once
 * with T = double) so the compiler sees plain loops it can vectorise; OpenMP above a size
 * threshold. */
#include "tensor_impl.h"

#include <tgmath.h>

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

#define T float
#define SFX f32
#include "map_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "map_tmpl.h"
#undef T
#undef SFX

sx_status sx_tensor_map_out(sx_map_op op, double alpha, const sx_tensor *x, sx_tensor *out)
{
    const char *who = "sx_tensor_map_out";
    if ((unsigned)op >= SX_MAP_COUNT)
        return sx_error(SX_E_ARG, "%s: unknown op %d", who, (int)op);
    SX_TRY(sx__check_tensor(who, "x", x));
    SX_TRY(sx__check_out(who, out, x->dtype, x->rank, x->shape));
    if (x->dtype == SX_F32)
        map_f32(op, alpha, x->data, out->data, x->size);
    else
        map_f64(op, alpha, x->data, out->data, x->size);
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
