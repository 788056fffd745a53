/* ops_quant.c: linear quantisation on graph values (QuantizeLinear, DequantizeLinear,
 * DynamicQuantizeLinear): the integers are held as floats of the import dtype, rounded half to
 * even and saturated to the range of the zero point's type (UINT8 when absent). */
#include "onnx_impl.h"

#include <string.h>

/* The range of an integer ONNX type used by quantisation. */
static sx_status q_range(ox_ctx *c, int32_t type, double *lo, double *hi)
{
    switch (type) {
    case 0:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
        *lo = 0, *hi = 255;
        return SX_OK;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
        *lo = -128, *hi = 127;
        return SX_OK;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
        *lo = -2147483648.0, *hi = 2147483647.0;
        return SX_OK;
    default:
        return ox_fail(c, SX_E_UNSUPPORTED, "a zero point of type %s", ox_dtype_name(type));
    }
}

/* Input i (a scale or zero point) shaped to broadcast over x of rank r: a scalar, or a 1-d
 * value along axis. */
static sx_status q_param(ox_ctx *c, int i, int r, int64_t a, sx_cg_node **out)
{
    ox_val *v = ox_in(c, i);
    *out = NULL;
    if (v == NULL)
        return SX_OK;
    SX_TRY(ox_node(c, v, OX_ONNX, out));
    if (sx_shape_size(v->rank, v->shape) == 1)
        *out = sx_cg_reshape(c->g, *out, 0, NULL);
    else if (v->rank == 1 && r > 1) {
        int axis;
        SX_TRY(ox_axis(c, a, r, "attribute axis", &axis));
        int64_t s[SX_MAX_RANK];
        for (int k = 0; k < r; k++)
            s[k] = k == axis ? v->shape[0] : 1;
        *out = sx_cg_reshape(c->g, *out, r, s);
    }
    return *out != NULL ? SX_OK : ox_graph_fail(c);
}

/* clamp(round(x / scale) + zp, lo, hi) */
static sx_cg_node *quantize(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *scale, sx_cg_node *zp,
                            double lo, double hi)
{
    sx_cg_node *y = sx_cg_round(g, sx_cg_div(g, x, scale));
    if (zp != NULL)
        y = sx_cg_add(g, y, zp);
    y = sx_cg_max(g, y, sx_cg_scalar_like(g, y, lo));
    return sx_cg_min(g, y, sx_cg_scalar_like(g, y, hi));
}

/* QuantizeLinear(x, y_scale, y_zero_point?, axis) */
sx_status ox_op_QuantizeLinear(ox_ctx *c)
{
    int64_t a;
    SX_TRY(ox_attr_int(c, "axis", 1, &a));
    ox_val *xv, *zv = ox_in(c, 2);
    sx_cg_node *x, *scale, *zp;
    SX_TRY(ox_in_req(c, 0, &xv));
    SX_TRY(ox_node(c, xv, OX_ONNX, &x));
    SX_TRY(q_param(c, 1, xv->rank, a, &scale));
    if (scale == NULL)
        return ox_fail(c, SX_E_FORMAT, "input 1 (y_scale) missing");
    SX_TRY(q_param(c, 2, xv->rank, a, &zp));
    double lo = 0, hi = 0;
    SX_TRY(q_range(c, zv != NULL && zv->ints != NULL ? zv->itype : 0, &lo, &hi));
    return ox_out(c, 0, quantize(c->g, x, scale, zp, lo, hi), OX_ONNX);
}

/* DequantizeLinear(x, x_scale, x_zero_point?, axis): (x - zp) scale */
sx_status ox_op_DequantizeLinear(ox_ctx *c)
{
    int64_t a;
    SX_TRY(ox_attr_int(c, "axis", 1, &a));
    ox_val *xv;
    sx_cg_node *x, *scale, *zp;
    SX_TRY(ox_in_req(c, 0, &xv));
    SX_TRY(ox_node(c, xv, OX_ONNX, &x));
    SX_TRY(q_param(c, 1, xv->rank, a, &scale));
    if (scale == NULL)
        return ox_fail(c, SX_E_FORMAT, "input 1 (x_scale) missing");
    SX_TRY(q_param(c, 2, xv->rank, a, &zp));
    if (zp != NULL)
        x = sx_cg_sub(c->g, x, zp);
    return ox_out(c, 0, sx_cg_mul(c->g, x, scale), OX_ONNX);
}

/* DynamicQuantizeLinear(x) -> y, y_scale, y_zero_point (UINT8): the range [min(0, min x),
 * max(0, max x)] mapped onto 0..255. */
sx_status ox_op_DynamicQuantizeLinear(ox_ctx *c)
{
    ox_val *xv;
    sx_cg_node *x;
    SX_TRY(ox_in_req(c, 0, &xv));
    SX_TRY(ox_node(c, xv, OX_ONNX, &x));
    sx_cg_graph *g = c->g;
    sx_cg_node *zero = sx_cg_scalar_like(g, x, 0);
    sx_cg_node *lo = sx_cg_min(g, sx_cg_reduce_min(g, x, SX_AXES_ALL, false), zero);
    sx_cg_node *hi = sx_cg_max(g, sx_cg_reduce_max(g, x, SX_AXES_ALL, false), zero);
    sx_cg_node *scale = sx_cg_mul_scalar(g, sx_cg_sub(g, hi, lo), 1.0 / 255);
    sx_cg_node *zp = quantize(g, sx_cg_neg(g, lo), scale, NULL, 0, 255);
    SX_TRY(ox_out(c, 0, quantize(g, x, scale, zp, 0, 255), OX_ONNX));
    c->no_batch = true;
    SX_TRY(ox_out(c, 1, scale, OX_ONNX));
    return ox_out(c, 2, zp, OX_ONNX);
}
