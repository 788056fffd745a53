/* pool.c: 2-d max and average pooling over NHWC tensors, forward and backward.
 * Output sizes and SAME padding follow TensorFlow (as conv2d does). Windows are clamped to the
 * real cells, so padding is never read: max ignores it and average divides by the real count.
 * The kernels (pool_tmpl.h, once per dtype) vectorise over c, with a fused path for 2x2
 * windows; backward passes split the work by image and channel block so the accumulation order
 * never depends on the thread count, and store dx once per cell when windows do not overlap. */
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

/* Elements touched by one pass: the parallel threshold compares it with SX_PAR_MIN. */
static double pool_work(const pool_geom *g)
{
    return (double)(g->n * g->oh * g->ow * g->c) * (double)(g->kh * g->kw);
}

/* Windows never overlap (stride >= kernel on both axes): every input cell has at most one. */
static bool pool_disjoint(const pool_geom *g)
{
    return g->sh >= g->kh && g->sw >= g->kw;
}

/* Along one axis, windows without gaps that reach the end cover every cell (the first window
 * always starts at or before cell 0). */
static bool pool_axis_covers(int64_t size, int64_t k, int64_t s, int64_t pad, int64_t out)
{
    return s <= k && (out - 1) * s - pad + k >= size;
}

/* Every input cell lies in some window. */
static bool pool_covers(const pool_geom *g)
{
    return pool_axis_covers(g->h, g->kh, g->sh, g->pt, g->oh) &&
           pool_axis_covers(g->w, g->kw, g->sw, g->pl, g->ow);
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

/* The kernels, once per dtype and instruction set: the baseline build, AVX2 and AVX-512 (the
 * compiler vectorises the channel loops for each; AVX-512 runs them 2-3x faster than SSE2). */
#if defined(__GNUC__) && defined(__x86_64__)
#define POOL_X86 1
#endif

#define POOL_ATTR
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
#undef POOL_ATTR
#ifdef POOL_X86
#define POOL_ATTR __attribute__((target("avx2,fma")))
#define T float
#define SFX f32_avx2
#include "pool_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64_avx2
#include "pool_tmpl.h"
#undef T
#undef SFX
#undef POOL_ATTR
#define POOL_ATTR __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq")))
#define T float
#define SFX f32_avx512
#include "pool_tmpl.h"
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
    pool_fwd_fn max_fwd, avg_fwd;
    pool_mbwd_fn max_bwd;
    pool_abwd_fn avg_bwd;
} pool_kernels;

#define POOL_SET(s)                                                                                \
    {                                                                                              \
        maxpool_fwd_##s, avgpool_fwd_##s, maxpool_bwd_##s, avgpool_bwd_##s                         \
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

sx_status sx_tensor_avgpool2d_out(const sx_tensor *x, const sx_pool2d_params *p, sx_tensor *y)
{
    pool_geom g = {0};
    SX_TRY(pool_fwd_check("sx_tensor_avgpool2d_out", x, p, y, &g));
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
    const int64_t ys[4] = {g.n, g.oh, g.ow, g.c};
    SX_TRY(check_arg(who, "dy", dy, dx->dtype, ys));
    SX_TRY(sx__check_apart(who, "dy", dy, "dx", dx));
    pool_ctx c = {
        .g = &g, .avg_bwd = pool_pick(dx->dtype)->avg_bwd, .dy = dy->data, .out = dx->data};
    pool_par(&g, pool_tasks(&g), pool_avg_bwd_tasks, &c);
    return SX_OK;
}
