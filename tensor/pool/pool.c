/* pool.c: 2-d max and average pooling over NHWC tensors, forward and backward, and adaptive
 * average pooling. Output sizes and padding follow ONNX (sx_tensor.h: VALID, SAME_UPPER/LOWER,
 * explicit pads, ceil_mode, dilation, count_include_pad). Windows are clamped to the real cells,
 * so padding is never read: max ignores it and average divides by the real count (or by the
 * padded window's, count_include_pad). The kernels (pool_tmpl.h, once per dtype) vectorise over
 * c, with a fused path for 2x2 windows; backward passes split the work by image and channel block
 * so the accumulation order never depends on the thread count, and store dx once per cell when
 * windows do not overlap. */
#include "tensor_impl.h"

#include <math.h>
#include <stdbool.h>

/* The geometry of one pooling call: input (n,h,w,c), output (n,oh,ow,c), kernel, strides,
 * dilations, the padding before the first row (pt) and column (pl) and after the last (pb, pr),
 * and whether average pooling counts padded cells (cip). Adaptive pooling uses n..ow only. */
typedef struct pool_geom {
    int64_t n, h, w, c;
    int64_t oh, ow;
    int64_t kh, kw, sh, sw;
    int64_t dh, dw;
    int64_t pt, pl, pb, pr;
    bool cip;
} pool_geom;

/* The graph hashes and compares attributes (sx_pool2d_params among them) bytewise. */
_Static_assert(sizeof(sx_pool2d_params) == 13 * sizeof(int), "sx_pool2d_params has padding bytes");

/* Channels per backward task: its per-lane state (running max, found flag) lives on the stack. */
#define POOL_CB 64

/* Elements touched by one pass: the parallel threshold compares it with SX_PAR_MIN. */
static double pool_work(const pool_geom *g)
{
    return (double)(g->n * g->oh * g->ow * g->c) * (double)(g->kh * g->kw);
}

/* Windows never overlap (stride >= kernel on both axes, no dilation): every input cell has at
 * most one. */
static bool pool_disjoint(const pool_geom *g)
{
    return g->sh >= g->kh && g->sw >= g->kw && g->dh == 1 && g->dw == 1;
}

/* Along one axis, windows without gaps that reach the end cover every cell (the first window
 * always starts at or before cell 0). */
static bool pool_axis_covers(int64_t size, int64_t k, int64_t s, int64_t pad, int64_t out)
{
    return s <= k && (out - 1) * s - pad + k >= size;
}

/* Every input cell lies in some window (for dilation 1). */
static bool pool_covers(const pool_geom *g)
{
    return pool_axis_covers(g->h, g->kh, g->sh, g->pt, g->oh) &&
           pool_axis_covers(g->w, g->kw, g->sw, g->pl, g->ow);
}

/* The real cells of window o along one axis of size `size`: lo, lo + d, ..., up to hi - 1 (the
 * last one; hi = lo when the window has none, which only dilation allows: the pads are smaller
 * than the dilated kernel and every window starts before the input's end). */
static inline void pool_range(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t d,
                              int64_t size, int64_t *lo, int64_t *hi)
{
    int64_t a = o * stride - pad;
    if (d == 1) {
        int64_t b = a + k;
        *lo = a < 0 ? 0 : a;
        *hi = b > size ? size : b;
        return;
    }
    int64_t i0 = a < 0 ? (-a + d - 1) / d : 0;               /* first tap at or after cell 0 */
    int64_t i1 = size - a <= 0 ? 0 : (size - a + d - 1) / d; /* taps before cell size */
    if (i1 > k)
        i1 = k;
    if (i0 >= i1) {
        *lo = *hi = 0;
        return;
    }
    *lo = a + i0 * d;
    *hi = a + (i1 - 1) * d + 1;
}

/* The divisor of average window (oy, ox) with real rows [y0, y1) and columns [x0, x1): their
 * number, or with count_include_pad the window's cells inside the padded input. */
static inline int64_t pool_count(const pool_geom *g, int64_t oy, int64_t ox, int64_t y0, int64_t y1,
                                 int64_t x0, int64_t x1)
{
    if (!g->cip)
        return (y1 - y0) * (x1 - x0);
    int64_t a = oy * g->sh - g->pt, b = ox * g->sw - g->pl;
    int64_t ae = a + g->kh < g->h + g->pb ? a + g->kh : g->h + g->pb;
    int64_t be = b + g->kw < g->w + g->pr ? b + g->kw : g->w + g->pr;
    return (ae - a) * (be - b);
}

/* Adaptive pooling's window o of `out` along an axis of size `size` (PyTorch's rule): cells
 * [floor(o * size / out), ceil((o + 1) * size / out)), never empty for size, out >= 1. */
static inline void adaptive_range(int64_t o, int64_t size, int64_t out, int64_t *lo, int64_t *hi)
{
    *lo = o * size / out;
    *hi = ((o + 1) * size + out - 1) / out;
}

/* Output size and pads along one axis (sx_tensor.h's rules) for the dilated kernel ke. False
 * when the window does not fit (VALID or EXPLICIT). */
static bool pool_axis(int64_t size, int64_t ke, int64_t s, sx_padding pad, int64_t p0, int64_t p1,
                      bool ceil_mode, int64_t *out, int64_t *before, int64_t *after)
{
    if (pad == SX_PAD_SAME_UPPER || pad == SX_PAD_SAME_LOWER) {
        *out = size / s + (size % s != 0);
        int64_t total = (*out - 1) * s + ke - size;
        total = total > 0 ? total : 0;
        *before = pad == SX_PAD_SAME_UPPER ? total / 2 : total - total / 2;
        *after = total - *before;
        return true;
    }
    *before = pad == SX_PAD_EXPLICIT ? p0 : 0;
    *after = pad == SX_PAD_EXPLICIT ? p1 : 0;
    if (pad == SX_PAD_EXPLICIT && size == 0) {
        *out = 0;
        return true;
    }
    int64_t span = size + *before + *after - ke;
    if (span < 0 || size == 0)
        return false;
    *out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (*out - 1) * s >= size + *before)
        (*out)--;
    return true;
}

/* The parameters alone: kernel, stride, dilation, padding mode and pads. */
static sx_status pool_check_params(const char *who, const sx_pool2d_params *p, int dh, int dw)
{
    if (p == NULL)
        return sx_error(SX_E_ARG, "%s: params is NULL", who);
    if (p->kernel_h < 1 || p->kernel_w < 1)
        return sx_error(SX_E_ARG, "%s: kernel %dx%d (want >= 1)", who, p->kernel_h, p->kernel_w);
    if (p->stride_h < 1 || p->stride_w < 1)
        return sx_error(SX_E_ARG, "%s: stride %dx%d (want >= 1)", who, p->stride_h, p->stride_w);
    if (p->dilation_h < 0 || p->dilation_w < 0)
        return sx_error(SX_E_ARG, "%s: dilation %dx%d (want >= 1, or 0 for 1)", who, p->dilation_h,
                        p->dilation_w);
    if ((p->ceil_mode != 0 && p->ceil_mode != 1) ||
        (p->count_include_pad != 0 && p->count_include_pad != 1))
        return sx_error(SX_E_ARG, "%s: ceil_mode %d, count_include_pad %d (want 0 or 1)", who,
                        p->ceil_mode, p->count_include_pad);
    if (p->padding != SX_PAD_VALID && p->padding != SX_PAD_SAME_UPPER &&
        p->padding != SX_PAD_SAME_LOWER && p->padding != SX_PAD_EXPLICIT)
        return sx_error(SX_E_ARG, "%s: unknown padding %d", who, (int)p->padding);
    const int pads[4] = {p->pad_top, p->pad_bottom, p->pad_left, p->pad_right};
    const int64_t ke[4] = {(int64_t)(p->kernel_h - 1) * dh + 1, (int64_t)(p->kernel_h - 1) * dh + 1,
                           (int64_t)(p->kernel_w - 1) * dw + 1,
                           (int64_t)(p->kernel_w - 1) * dw + 1};
    for (int i = 0; i < 4; i++) {
        if (p->padding != SX_PAD_EXPLICIT && pads[i] != 0)
            return sx_error(SX_E_ARG,
                            "%s: pads %d,%d,%d,%d (top,bottom,left,right) need padding "
                            "SX_PAD_EXPLICIT, got %d",
                            who, pads[0], pads[1], pads[2], pads[3], (int)p->padding);
        if (pads[i] < 0 || pads[i] >= ke[i])
            return sx_error(SX_E_ARG,
                            "%s: pads %d,%d,%d,%d (top,bottom,left,right) for a dilated "
                            "kernel %lldx%lld (want 0 <= pad < kernel)",
                            who, pads[0], pads[1], pads[2], pads[3], (long long)ke[0],
                            (long long)ke[2]);
    }
    return SX_OK;
}

/* Validate p and the input x (named `name`) and fill the geometry. */
static sx_status pool_geometry(const char *who, const char *name, const sx_tensor *x,
                               const sx_pool2d_params *p, pool_geom *g)
{
    char buf[128];
    const int dh = p != NULL && p->dilation_h > 1 ? p->dilation_h : 1;
    const int dw = p != NULL && p->dilation_w > 1 ? p->dilation_w : 1;
    SX_TRY(pool_check_params(who, p, dh, dw));
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
                     .sw = p->stride_w,
                     .dh = dh,
                     .dw = dw,
                     .cip = p->count_include_pad != 0};
    if (!pool_axis(g->h, (g->kh - 1) * dh + 1, g->sh, p->padding, p->pad_top, p->pad_bottom,
                   p->ceil_mode, &g->oh, &g->pt, &g->pb) ||
        !pool_axis(g->w, (g->kw - 1) * dw + 1, g->sw, p->padding, p->pad_left, p->pad_right,
                   p->ceil_mode, &g->ow, &g->pl, &g->pr))
        return sx_error(
            SX_E_SHAPE, "%s: kernel %dx%d (dilation %dx%d) does not fit input %s with %s padding",
            who, p->kernel_h, p->kernel_w, dh, dw, sx_shape_str(x->rank, x->shape, buf, sizeof buf),
            p->padding == SX_PAD_VALID ? "VALID" : "its");
    return SX_OK;
}

sx_pool2d_params sx_pool2d_params_default(int kh, int kw)
{
    return (sx_pool2d_params){.kernel_h = kh,
                              .kernel_w = kw,
                              .stride_h = kh,
                              .stride_w = kw,
                              .padding = SX_PAD_VALID,
                              .dilation_h = 1,
                              .dilation_w = 1};
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

/* The kernels, once per dtype and instruction set: the baseline build, AVX2 and AVX-512 (the
 * compiler vectorises the channel loops for each; AVX-512 runs them 2-3x faster than SSE2). */
#include "simd.h"
#if SIMD_HAVE_X86
#define POOL_X86 1
#endif

#define POOL_ATTR
#define T float
#define SFX f32
#if SIMD_HAVE_NEON /* the baseline of AArch64 is NEON: its f32 2x2 windows take the vectors */
#define SIMD_ISA SIMD_NEON
#define SIMD_BITS 32
#include "simd.h"
#include "pool_vec_tmpl.h"
#include "simd_end.h"
#define POOL_VEC 4
#endif
#include "pool_tmpl.h"
#undef POOL_VEC
#undef T
#undef SFX
#define T double
#define SFX f64
#include "pool_tmpl.h"
#undef T
#undef SFX
#undef POOL_ATTR
#ifdef POOL_X86
/* The f32 2x2 windows over whole vectors (pool_vec_tmpl.h), used by the f32 kernels of the same
 * set when the channels (forward) or the channels the task covers (backward) leave a vector's
 * remainder: POOL_VEC is the set's lane count. */
#define SIMD_ISA SIMD_AVX2
#define SIMD_BITS 32
#define T float
#define SFX f32_avx2
#include "simd.h"
#include "pool_vec_tmpl.h"
#include "simd_end.h"
#define POOL_ATTR SIMD_AVX2_ATTR
#define POOL_VEC 8
#include "pool_tmpl.h"
#undef POOL_VEC
#undef T
#undef SFX
#define T double
#define SFX f64_avx2
#include "pool_tmpl.h"
#undef T
#undef SFX
#undef POOL_ATTR
#define SIMD_ISA SIMD_AVX512
#define SIMD_BITS 32
#define T float
#define SFX f32_avx512
#include "simd.h"
#include "pool_vec_tmpl.h"
#include "simd_end.h"
#define POOL_ATTR SIMD_AVX512_ATTR
#define POOL_VEC 16
#include "pool_tmpl.h"
#undef POOL_VEC
#undef T
#undef SFX
#define T double
#define SFX f64_avx512
#include "pool_tmpl.h"
#undef T
#undef SFX
#undef POOL_ATTR
#endif

/* A kernel over a range of rows or tasks, and the four kernels of one dtype and ISA. */
typedef void (*pool_fwd_fn)(const pool_geom *g, const void *x, void *y, int64_t lo, int64_t hi);
typedef void (*pool_mbwd_fn)(const pool_geom *g, const void *x, const void *dy, void *dx, bool relu,
                             int64_t lo, int64_t hi);
typedef void (*pool_abwd_fn)(const pool_geom *g, const void *dy, void *dx, int64_t lo, int64_t hi);
typedef struct pool_kernels {
    pool_fwd_fn max_fwd, avg_fwd, adaptive_fwd;
    pool_mbwd_fn max_bwd;
    pool_abwd_fn avg_bwd, adaptive_bwd;
} pool_kernels;

#define POOL_SET(s)                                                                                \
    {                                                                                              \
        maxpool_fwd_##s, avgpool_fwd_##s, adaptive_fwd_##s, maxpool_bwd_##s, avgpool_bwd_##s,      \
            adaptive_bwd_##s                                                                       \
    }
static const pool_kernels pool_sets[][2] = {
    {POOL_SET(f32), POOL_SET(f64)},
#ifdef POOL_X86
    {POOL_SET(f32_avx2), POOL_SET(f64_avx2)},
    {POOL_SET(f32_avx512), POOL_SET(f64_avx512)},
#endif
};
#undef POOL_SET

/* The kernels for dtype dt at strix's instruction set (sx__isa: this CPU, capped by SX_ISA). */
static const pool_kernels *pool_pick(sx_dtype dt)
{
    int isa = 0;
#ifdef POOL_X86
    isa = sx__isa() == SX__ISA_AVX512 ? 2 : sx__isa() == SX__ISA_AVX2 ? 1 : 0;
#endif
    return &pool_sets[isa][dt == SX_F32 ? 0 : 1];
}

/* One pooling pass over the pool's threads: its kernel and arguments. */
typedef struct pool_ctx {
    const pool_geom *g;
    pool_fwd_fn fwd;
    pool_mbwd_fn max_bwd;
    pool_abwd_fn avg_bwd;
    const void *x, *dy;
    void *out; /* y or dx */
    bool relu;
} pool_ctx;

static void pool_fwd_rows(void *ctx, int64_t r0, int64_t r1)
{
    const pool_ctx *c = ctx;
    c->fwd(c->g, c->x, c->out, r0, r1);
}

static void pool_max_bwd_tasks(void *ctx, int64_t t0, int64_t t1)
{
    const pool_ctx *c = ctx;
    c->max_bwd(c->g, c->x, c->dy, c->out, c->relu, t0, t1);
}

static void pool_avg_bwd_tasks(void *ctx, int64_t t0, int64_t t1)
{
    const pool_ctx *c = ctx;
    c->avg_bwd(c->g, c->dy, c->out, t0, t1);
}

/* fn over [0, n) (rows or tasks), on the pool's threads when the pass is big enough. */
static void pool_par(const pool_geom *g, int64_t n, sx__par_range_fn fn, pool_ctx *c)
{
    if (pool_work(g) >= SX_PAR_MIN)
        sx__par_range(n, 1, fn, c);
    else if (n > 0)
        fn(c, 0, n);
}

/* Forward: output rows split over threads (each row is written by one thread). */
static void pool_run_fwd(const pool_geom *g, pool_fwd_fn fn, const void *x, void *y)
{
    pool_ctx c = {.g = g, .fwd = fn, .x = x, .out = y};
    pool_par(g, g->n * g->oh, pool_fwd_rows, &c);
}

/* Backward: tasks of one image and one block of POOL_CB channels. */
static int64_t pool_tasks(const pool_geom *g)
{
    return g->n * ((g->c + POOL_CB - 1) / POOL_CB);
}

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
    pool_run_fwd(&g, pool_pick(x->dtype)->max_fwd, x->data, y->data);
    return SX_OK;
}

/* Average pooling has no dilation. */
static sx_status avg_check(const char *who, const pool_geom *g)
{
    if (g->dh != 1 || g->dw != 1)
        return sx_error(SX_E_ARG, "%s: dilation %lldx%lld (average pooling has none: want 1)", who,
                        (long long)g->dh, (long long)g->dw);
    return SX_OK;
}

sx_status sx_tensor_avgpool2d_out(const sx_tensor *x, const sx_pool2d_params *p, sx_tensor *y)
{
    pool_geom g = {0};
    SX_TRY(pool_fwd_check("sx_tensor_avgpool2d_out", x, p, y, &g));
    SX_TRY(avg_check("sx_tensor_avgpool2d_out", &g));
    pool_run_fwd(&g, pool_pick(x->dtype)->avg_fwd, x->data, y->data);
    return SX_OK;
}

/* The two max-pool backward passes: dx may be x itself when windows do not overlap. */
static sx_status maxpool_backward(const char *who, const sx_tensor *x, const sx_tensor *dy,
                                  const sx_pool2d_params *p, sx_tensor *dx, bool relu)
{
    pool_geom g = {0};
    SX_TRY(sx__check_tensor(who, "x", x));
    SX_TRY(pool_geometry(who, "x", x, p, &g));
    const int64_t ys[4] = {g.n, g.oh, g.ow, g.c};
    SX_TRY(check_arg(who, "dy", dy, x->dtype, ys));
    SX_TRY(check_arg(who, "dx", dx, x->dtype, x->shape));
    if (dx->data != x->data || !pool_disjoint(&g) || dx->size == 0)
        SX_TRY(sx__check_apart(who, "x", x, "dx", dx));
    SX_TRY(sx__check_apart(who, "dy", dy, "dx", dx));
    pool_ctx c = {.g = &g,
                  .max_bwd = pool_pick(x->dtype)->max_bwd,
                  .x = x->data,
                  .dy = dy->data,
                  .out = dx->data,
                  .relu = relu};
    pool_par(&g, pool_tasks(&g), pool_max_bwd_tasks, &c);
    return SX_OK;
}

sx_status sx_tensor_maxpool2d_backward_out(const sx_tensor *x, const sx_tensor *dy,
                                           const sx_pool2d_params *p, sx_tensor *dx)
{
    return maxpool_backward("sx_tensor_maxpool2d_backward_out", x, dy, p, dx, false);
}

sx_status sx_tensor_maxpool2d_relu_backward_out(const sx_tensor *x, const sx_tensor *dy,
                                                const sx_pool2d_params *p, sx_tensor *dx)
{
    return maxpool_backward("sx_tensor_maxpool2d_relu_backward_out", x, dy, p, dx, true);
}

sx_status sx_tensor_avgpool2d_backward_out(const sx_tensor *dy, const sx_pool2d_params *p,
                                           sx_tensor *dx)
{
    const char *who = "sx_tensor_avgpool2d_backward_out";
    pool_geom g = {0};
    SX_TRY(sx__check_tensor(who, "dy", dy));
    SX_TRY(sx__check_tensor(who, "dx", dx));
    SX_TRY(pool_geometry(who, "dx", dx, p, &g)); /* dx has the input's shape */
    SX_TRY(avg_check(who, &g));
    const int64_t ys[4] = {g.n, g.oh, g.ow, g.c};
    SX_TRY(check_arg(who, "dy", dy, dx->dtype, ys));
    SX_TRY(sx__check_apart(who, "dy", dy, "dx", dx));
    pool_ctx c = {
        .g = &g, .avg_bwd = pool_pick(dx->dtype)->avg_bwd, .dy = dy->data, .out = dx->data};
    pool_par(&g, pool_tasks(&g), pool_avg_bwd_tasks, &c);
    return SX_OK;
}

/* Adaptive pooling: the input `in` (n,h,w,c) and the output `out` (n,oh,ow,c) of the forward
 * pass (for the backward pass: dx and dy), same dtype, n and c, every spatial size >= 1. */
static sx_status adaptive_geometry(const char *who, const char *in_name, const sx_tensor *in,
                                   const char *out_name, const sx_tensor *out, pool_geom *g)
{
    char a[128], b[128];
    SX_TRY(sx__check_tensor(who, in_name, in));
    SX_TRY(sx__check_tensor(who, out_name, out));
    if (in->rank != 4 || out->rank != 4)
        return sx_error(SX_E_RANK, "%s: %s %s and %s %s, want rank 4 (n,h,w,c)", who, in_name,
                        sx_shape_str(in->rank, in->shape, a, sizeof a), out_name,
                        sx_shape_str(out->rank, out->shape, b, sizeof b));
    if (out->dtype != in->dtype)
        return sx_error(SX_E_DTYPE, "%s: %s is %s, %s is %s", who, in_name,
                        sx_dtype_name(in->dtype), out_name, sx_dtype_name(out->dtype));
    if (in->shape[0] != out->shape[0] || in->shape[3] != out->shape[3] || in->shape[1] < 1 ||
        in->shape[2] < 1 || out->shape[1] < 1 || out->shape[2] < 1)
        return sx_error(SX_E_SHAPE,
                        "%s: %s %s and %s %s (want the same n and c, every h and w >= 1)", who,
                        in_name, sx_shape_str(4, in->shape, a, sizeof a), out_name,
                        sx_shape_str(4, out->shape, b, sizeof b));
    *g = (pool_geom){.n = in->shape[0],
                     .h = in->shape[1],
                     .w = in->shape[2],
                     .c = in->shape[3],
                     .oh = out->shape[1],
                     .ow = out->shape[2],
                     .kh = (in->shape[1] + out->shape[1] - 1) / out->shape[1] + 1,
                     .kw = (in->shape[2] + out->shape[2] - 1) / out->shape[2] + 1};
    return sx__check_apart(who, in_name, in, out_name, out);
}

sx_status sx_tensor_adaptive_avgpool2d_out(const sx_tensor *x, sx_tensor *y)
{
    pool_geom g = {0};
    SX_TRY(adaptive_geometry("sx_tensor_adaptive_avgpool2d_out", "x", x, "y", y, &g));
    pool_run_fwd(&g, pool_pick(x->dtype)->adaptive_fwd, x->data, y->data);
    return SX_OK;
}

sx_status sx_tensor_adaptive_avgpool2d_backward_out(const sx_tensor *dy, sx_tensor *dx)
{
    pool_geom g = {0};
    SX_TRY(adaptive_geometry("sx_tensor_adaptive_avgpool2d_backward_out", "dx", dx, "dy", dy, &g));
    pool_ctx c = {
        .g = &g, .avg_bwd = pool_pick(dx->dtype)->adaptive_bwd, .dy = dy->data, .out = dx->data};
    pool_par(&g, pool_tasks(&g), pool_avg_bwd_tasks, &c);
    return SX_OK;
}
