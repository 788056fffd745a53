/* pool.c: 2-d max and average pooling over NHWC tensors, forward and backward.
 * Output sizes and SAME padding follow TensorFlow (as conv2d does). Windows are clamped to the
 * real cells, so padding is never read: max ignores it and average divides by the real count.
 * The kernels (pool_tmpl.h, once per dtype) vectorise over c; backward passes split the work by
 * image and channel block so the accumulation order never depends on the thread count. */
#include "tensor_impl.h"

#include <stdbool.h>

/* The geometry of one pooling call: input (n,h,w,c), output (n,oh,ow,c), kernel, strides and the
 * padding before the first row (pt) and column (pl). */
typedef struct pool_geom {
    int64_t n, h, w, c;
    int64_t oh, ow;
    int64_t kh, kw, sh, sw;
    int64_t pt, pl;
} pool_geom;

/* Channels per backward task: its per-lane state (running max, found flag) lives on the stack. */
#define POOL_CB 64

/* Does v replace the running maximum m? Strictly greater (ties keep the first), or the first NaN
 * (NaN propagates, and the backward pass routes to it). */
#define POOL_TAKES(v, m) (((v) > (m)) | (((v) != (v)) & ((m) == (m))))

/* Elements touched by one pass: the OpenMP threshold compares it with SX_OMP_MIN. */
static double pool_work(const pool_geom *g)
{
    return (double)(g->n * g->oh * g->ow * g->c) * (double)(g->kh * g->kw);
}

/* The real cells [*lo, *hi) of window o along one axis of size `size`. Never empty: with
 * TensorFlow's SAME padding both pads are smaller than the kernel. */
static inline void pool_range(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t size,
                              int64_t *lo, int64_t *hi)
{
    int64_t a = o * stride - pad, b = a + k;
    *lo = a < 0 ? 0 : a;
    *hi = b > size ? size : b;
}

/* Output size and leading pad along one axis (TensorFlow rules, as conv2d). False when VALID
 * does not fit (also for an empty axis, as conv2d; SAME gives an empty output there). */
static bool pool_axis(int64_t size, int64_t k, int64_t s, sx_padding pad, int64_t *out,
                      int64_t *before)
{
    if (pad == SX_PAD_VALID) {
        if (size < k)
            return false;
        *out = (size - k) / s + 1;
        *before = 0;
        return true;
    }
    *out = size / s + (size % s != 0);
    int64_t total = (*out - 1) * s + k - size;
    *before = total > 0 ? total / 2 : 0;
    return true;
}

/* Validate p and the input x (named `name`) and fill the geometry. */
static sx_status pool_geometry(const char *who, const char *name, const sx_tensor *x,
                               const sx_pool2d_params *p, pool_geom *g)
{
    char buf[128];
    if (p == NULL)
        return sx_error(SX_E_ARG, "%s: params is NULL", who);
    if (p->kernel_h < 1 || p->kernel_w < 1)
        return sx_error(SX_E_ARG, "%s: kernel %dx%d (want >= 1)", who, p->kernel_h, p->kernel_w);
    if (p->stride_h < 1 || p->stride_w < 1)
        return sx_error(SX_E_ARG, "%s: stride %dx%d (want >= 1)", who, p->stride_h, p->stride_w);
    if (p->padding != SX_PAD_VALID && p->padding != SX_PAD_SAME)
        return sx_error(SX_E_ARG, "%s: unknown padding %d", who, (int)p->padding);
    if (x->rank != 4)
        return sx_error(SX_E_RANK, "%s: %s has shape %s, want rank 4 (n,h,w,c)", who, name,
                        sx_shape_str(x->rank, x->shape, buf, sizeof buf));
    *g = (pool_geom){.n = x->shape[0],
                     .h = x->shape[1],
                     .w = x->shape[2],
                     .c = x->shape[3],
                     .kh = p->kernel_h,
                     .kw = p->kernel_w,
                     .sh = p->stride_h,
                     .sw = p->stride_w};
    if (!pool_axis(g->h, g->kh, g->sh, p->padding, &g->oh, &g->pt) ||
        !pool_axis(g->w, g->kw, g->sw, p->padding, &g->ow, &g->pl))
        return sx_error(SX_E_SHAPE, "%s: kernel %dx%d does not fit input %s with VALID padding",
                        who, p->kernel_h, p->kernel_w,
                        sx_shape_str(x->rank, x->shape, buf, sizeof buf));
    return SX_OK;
}

/* `t` (named `name`) must exist, have dtype `dt` and shape `shape` (rank 4). */
static sx_status check_arg(const char *who, const char *name, const sx_tensor *t, sx_dtype dt,
                           const int64_t shape[4])
{
    SX_TRY(sx__check_tensor(who, name, t));
    if (t->dtype != dt)
        return sx_error(SX_E_DTYPE, "%s: %s is %s, want %s", who, name, sx_dtype_name(t->dtype),
                        sx_dtype_name(dt));
    if (!sx_shape_equal(t->rank, t->shape, 4, shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want %s", who, name,
                        sx_shape_str(t->rank, t->shape, a, sizeof a),
                        sx_shape_str(4, shape, b, sizeof b));
    }
    return SX_OK;
}

#define T float
#define SFX f32
#include "pool_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "pool_tmpl.h"
#undef T
#undef SFX

sx_status sx_pool2d_shape(const char *who, const sx_tensor *x, const sx_pool2d_params *p,
                          int64_t out_shape[4])
{
    if (who == NULL)
        who = "sx_pool2d_shape";
    SX_TRY(sx__check_desc(who, "x", x)); /* shapes only: data may be absent */
    if (out_shape == NULL)
        return sx_error(SX_E_ARG, "%s: out_shape is NULL", who);
    pool_geom g = {0};
    SX_TRY(pool_geometry(who, "x", x, p, &g));
    out_shape[0] = g.n;
    out_shape[1] = g.oh;
    out_shape[2] = g.ow;
    out_shape[3] = g.c;
    return SX_OK;
}

/* Checks shared by the forward passes: x valid, y of the pooled shape. */
static sx_status pool_fwd_check(const char *who, const sx_tensor *x, const sx_pool2d_params *p,
                                const sx_tensor *y, pool_geom *g)
{
    SX_TRY(sx__check_tensor(who, "x", x));
    SX_TRY(pool_geometry(who, "x", x, p, g));
    const int64_t ys[4] = {g->n, g->oh, g->ow, g->c};
    SX_TRY(check_arg(who, "y", y, x->dtype, ys));
    return sx__check_apart(who, "x", x, "y", y);
}

sx_status sx_tensor_maxpool2d_out(const sx_tensor *x, const sx_pool2d_params *p, sx_tensor *y)
{
    pool_geom g = {0};
    SX_TRY(pool_fwd_check("sx_tensor_maxpool2d_out", x, p, y, &g));
    if (x->dtype == SX_F32)
        maxpool_fwd_f32(&g, x->data, y->data);
    else
        maxpool_fwd_f64(&g, x->data, y->data);
    return SX_OK;
}

sx_status sx_tensor_avgpool2d_out(const sx_tensor *x, const sx_pool2d_params *p, sx_tensor *y)
{
    pool_geom g = {0};
    SX_TRY(pool_fwd_check("sx_tensor_avgpool2d_out", x, p, y, &g));
    if (x->dtype == SX_F32)
        avgpool_fwd_f32(&g, x->data, y->data);
    else
        avgpool_fwd_f64(&g, x->data, y->data);
    return SX_OK;
}

sx_status sx_tensor_maxpool2d_backward_out(const sx_tensor *x, const sx_tensor *dy,
                                           const sx_pool2d_params *p, sx_tensor *dx)
{
    const char *who = "sx_tensor_maxpool2d_backward_out";
    pool_geom g = {0};
    SX_TRY(sx__check_tensor(who, "x", x));
    SX_TRY(pool_geometry(who, "x", x, p, &g));
    const int64_t ys[4] = {g.n, g.oh, g.ow, g.c};
    SX_TRY(check_arg(who, "dy", dy, x->dtype, ys));
    SX_TRY(check_arg(who, "dx", dx, x->dtype, x->shape));
    SX_TRY(sx__check_apart(who, "x", x, "dx", dx));
    SX_TRY(sx__check_apart(who, "dy", dy, "dx", dx));
    if (x->dtype == SX_F32)
        maxpool_bwd_f32(&g, x->data, dy->data, dx->data);
    else
        maxpool_bwd_f64(&g, x->data, dy->data, dx->data);
    return SX_OK;
}

sx_status sx_tensor_avgpool2d_backward_out(const sx_tensor *dy, const sx_pool2d_params *p,
                                           sx_tensor *dx)
{
    const char *who = "sx_tensor_avgpool2d_backward_out";
    pool_geom g = {0};
    SX_TRY(sx__check_tensor(who, "dy", dy));
    SX_TRY(sx__check_tensor(who, "dx", dx));
    SX_TRY(pool_geometry(who, "dx", dx, p, &g)); /* dx has the input's shape */
    const int64_t ys[4] = {g.n, g.oh, g.ow, g.c};
    SX_TRY(check_arg(who, "dy", dy, dx->dtype, ys));
    SX_TRY(sx__check_apart(who, "dy", dy, "dx", dx));
    if (dx->dtype == SX_F32)
        avgpool_bwd_f32(&g, dy->data, dx->data);
    else
        avgpool_bwd_f64(&g, dy->data, dx->data);
    return SX_OK;
}
