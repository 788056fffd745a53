/* conv.c: 2-d convolution over NHWC images, forward and both backward passes, by im2col + GEMM
 * (seed 002). The im2col matrix is (n*oh*ow, kh*kw*c) row-major, so the forward pass is one GEMM
 * col @ k giving y in NHWC directly, backward-kernel is col^T @ dy and backward-input is
 * dcol = dy @ k^T folded back by col2im. When the workspace cannot hold the whole matrix, the
 * same steps run over blocks of output rows that fit (the blocked path). */
#include "tensor_impl.h"

#include <limits.h>

/* The workspace asked for by sx_conv2d_workspace is capped here: larger problems run in blocks
 * of this size. Blocks that stay in cache are faster than the whole matrix: single-threaded,
 * 1-4 MiB blocks beat 32-64 MiB ones by 15-25% on 5x5 and 3x3 layers with 32-64 channels
 * (im2col is read back by the GEMM, and dcol by col2im, from cache). */
#define CONV_WS_CAP ((size_t)4 << 20)
/* The smallest block: at least this many im2col rows (whole output image rows), so that even
 * the minimum workspace runs GEMMs of a useful height. */
#define CONV_MIN_BLOCK_ROWS 64
/* The workspace is aligned up to this inside the kernels; the sizes include the slack. */
#define CONV_WS_ALIGN 64
/* Sizes are reported for the widest dtype (f64), so one size serves both. */
#define CONV_WS_ELEM sizeof(double)

/* Geometry of one convolution. Output image row p = img * oh + oy is the unit of blocking; it
 * is ow rows of the im2col matrix. */
typedef struct conv_geom {
    int64_t n, h, w, c; /* x (n,h,w,c) */
    int64_t kh, kw, f;  /* k (kh,kw,c,f) */
    int64_t oh, ow;     /* y (n,oh,ow,f) */
    int64_t sh, sw;     /* strides */
    int64_t pt, pl;     /* zero rows above / zero columns left of x */
    int64_t kdim;       /* kh*kw*c: columns of the im2col matrix */
    int64_t rows;       /* n*oh output image rows */
    bool direct;        /* the im2col matrix is x itself (1x1 stride 1, or a window = image) */
} conv_geom;

#define T float
#define SFX f32
#include "conv_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "conv_tmpl.h"
#undef T
#undef SFX

typedef void (*im2col_fn)(const conv_geom *g, const void *x, int64_t p0, int64_t np, void *col);
typedef void (*col2im_fn)(const conv_geom *g, const void *col, int64_t p0, int64_t np, void *dx);

static char *shape4_str(const int64_t *s, char *buf, size_t n)
{
    return sx_shape_str(4, s, buf, n);
}

/* Validate the parameters and shapes of x (n,h,w,c) and k (kh,kw,c,f) and fill g. xname and
 * kname name the tensors that carry those shapes in the caller (e.g. "dx", "dk"). */
static sx_status conv_geom_make(const char *who, const char *xname, const int64_t *xs,
                                const char *kname, const int64_t *ks, const sx_conv2d_params *p,
                                conv_geom *g)
{
    char a[128], b[128];
    if (p == NULL)
        return sx_error(SX_E_ARG, "%s: params are NULL", who);
    if (p->stride_h < 1 || p->stride_w < 1)
        return sx_error(SX_E_ARG, "%s: stride (%d,%d), want both >= 1", who, p->stride_h,
                        p->stride_w);
    if (p->padding != SX_PAD_VALID && p->padding != SX_PAD_SAME)
        return sx_error(SX_E_ARG, "%s: unknown padding %d", who, (int)p->padding);
    if (xs[3] != ks[2])
        return sx_error(SX_E_SHAPE,
                        "%s: %s %s (n,h,w,c) has %lld channels, %s %s (kh,kw,c,f) expects %lld",
                        who, xname, shape4_str(xs, a, sizeof a), (long long)xs[3], kname,
                        shape4_str(ks, b, sizeof b), (long long)ks[2]);
    if (ks[0] < 1 || ks[1] < 1)
        return sx_error(SX_E_SHAPE, "%s: %s %s has an empty window", who, kname,
                        shape4_str(ks, b, sizeof b));
    bool big = false;
    for (int i = 0; i < 4; i++)
        big |= xs[i] > INT_MAX || ks[i] > INT_MAX;
    if (big || (xs[3] > 0 && ks[0] * ks[1] > INT_MAX / xs[3]))
        return sx_error(SX_E_UNSUPPORTED, "%s: %s %s and %s %s: a dimension exceeds BLAS's int",
                        who, xname, shape4_str(xs, a, sizeof a), kname,
                        shape4_str(ks, b, sizeof b));
    g->n = xs[0], g->h = xs[1], g->w = xs[2], g->c = xs[3];
    g->kh = ks[0], g->kw = ks[1], g->f = ks[3];
    g->sh = p->stride_h, g->sw = p->stride_w;
    if (p->padding == SX_PAD_VALID) {
        if (g->h < g->kh || g->w < g->kw)
            return sx_error(SX_E_SHAPE,
                            "%s: %s %s window (%lld,%lld) is larger than %s %s with VALID padding",
                            who, kname, shape4_str(ks, b, sizeof b), (long long)g->kh,
                            (long long)g->kw, xname, shape4_str(xs, a, sizeof a));
        g->oh = (g->h - g->kh) / g->sh + 1;
        g->ow = (g->w - g->kw) / g->sw + 1;
        g->pt = g->pl = 0;
    } else {
        g->oh = (g->h + g->sh - 1) / g->sh;
        g->ow = (g->w + g->sw - 1) / g->sw;
        /* TensorFlow's split: total padding (oh-1)*sh + kh - h, the odd one after */
        int64_t th = (g->oh - 1) * g->sh + g->kh - g->h, tw = (g->ow - 1) * g->sw + g->kw - g->w;
        g->pt = th > 0 ? th / 2 : 0;
        g->pl = tw > 0 ? tw / 2 : 0;
    }
    g->kdim = g->kh * g->kw * g->c;
    g->rows = g->n * g->oh;
    bool one = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1;
    bool whole = g->oh == 1 && g->ow == 1 && g->kh == g->h && g->kw == g->w;
    g->direct = g->pt == 0 && g->pl == 0 && (one || whole);
    return SX_OK;
}

/* a * b for sizes, saturating at SIZE_MAX. */
static size_t mul_sat(size_t a, size_t b)
{
    return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

/* Bytes of a block of `rows` output image rows (im2col rows * kdim elements), plus the slack
 * for alignment. */
static size_t block_bytes(const conv_geom *g, int64_t rows)
{
    size_t b =
        mul_sat(mul_sat(mul_sat((size_t)rows, (size_t)g->ow), (size_t)g->kdim), CONV_WS_ELEM);
    return b > SIZE_MAX - CONV_WS_ALIGN ? SIZE_MAX : b + CONV_WS_ALIGN;
}

/* Output image rows in the smallest block. */
static int64_t min_block_rows(const conv_geom *g)
{
    int64_t r = (CONV_MIN_BLOCK_ROWS + g->ow - 1) / g->ow;
    return r < g->rows ? r : g->rows;
}

static bool needs_ws(const conv_geom *g)
{
    return !g->direct && g->rows > 0 && g->ow > 0 && g->kdim > 0;
}

static size_t ws_min(const conv_geom *g)
{
    return needs_ws(g) ? block_bytes(g, min_block_rows(g)) : 0;
}

static size_t ws_best(const conv_geom *g)
{
    if (!needs_ws(g))
        return 0;
    size_t full = block_bytes(g, g->rows), lo = block_bytes(g, min_block_rows(g));
    size_t cap = CONV_WS_CAP > lo ? CONV_WS_CAP : lo;
    return full < cap ? full : cap;
}

/* The size queries report invalid input as 0 (the kernels then name the problem) and leave the
 * thread's last error message as it was. */
static size_t ws_query(const int64_t *xs, const int64_t *ks, const sx_conv2d_params *p, bool best)
{
    if (xs == NULL || ks == NULL)
        return 0;
    char saved[512];
    snprintf(saved, sizeof saved, "%s", sx_last_error());
    conv_geom g;
    sx_status s = conv_geom_make("sx_conv2d_workspace", "x", xs, "k", ks, p, &g);
    (void)sx_error(SX_OK, "%s", saved);
    if (s != SX_OK)
        return 0;
    return best ? ws_best(&g) : ws_min(&g);
}

size_t sx_conv2d_workspace(const int64_t x_shape[4], const int64_t k_shape[4],
                           const sx_conv2d_params *p)
{
    return ws_query(x_shape, k_shape, p, true);
}

size_t sx_conv2d_workspace_min(const int64_t x_shape[4], const int64_t k_shape[4],
                               const sx_conv2d_params *p)
{
    return ws_query(x_shape, k_shape, p, false);
}

static sx_status check_rank4_desc(const char *who, const char *name, const sx_tensor *t)
{
    SX_TRY(sx__check_desc(who, name, t));
    if (t->rank != 4) {
        char a[140];
        return sx_error(SX_E_RANK, "%s: %s has shape %s, want rank 4", who, name,
                        sx_shape_str(t->rank, t->shape, a, sizeof a));
    }
    return SX_OK;
}

static sx_status check_rank4(const char *who, const char *name, const sx_tensor *t)
{
    SX_TRY(sx__check_tensor(who, name, t));
    if (t->rank != 4) {
        char a[140];
        return sx_error(SX_E_RANK, "%s: %s has shape %s, want rank 4", who, name,
                        sx_shape_str(t->rank, t->shape, a, sizeof a));
    }
    return SX_OK;
}

sx_status sx_conv2d_shape(const char *who, const sx_tensor *x, const sx_tensor *k,
                          const sx_conv2d_params *p, int64_t out_shape[4])
{
    if (who == NULL)
        who = "sx_conv2d_shape";
    if (out_shape == NULL)
        return sx_error(SX_E_ARG, "%s: out_shape is NULL", who);
    SX_TRY(check_rank4_desc(who, "x", x)); /* shapes only: data may be absent */
    SX_TRY(check_rank4_desc(who, "k", k));
    conv_geom g;
    SX_TRY(conv_geom_make(who, "x", x->shape, "k", k->shape, p, &g));
    out_shape[0] = g.n, out_shape[1] = g.oh, out_shape[2] = g.ow, out_shape[3] = g.f;
    return SX_OK;
}

/* True when the byte ranges [a, a+na) and [b, b+nb) intersect. */
static bool ranges_overlap(const void *a, size_t na, const void *b, size_t nb)
{
    if (na == 0 || nb == 0 || a == NULL || b == NULL)
        return false;
    const char *a0 = a, *b0 = b;
    return a0 < b0 + nb && b0 < a0 + na;
}

static size_t tensor_bytes(const sx_tensor *t)
{
    return (size_t)t->size * sx_dtype_size(t->dtype);
}

/* The output `out` and the workspace must not overlap the inputs, nor each other. */
static sx_status check_overlap(const char *who, const sx_tensor *in0, const sx_tensor *in1,
                               const sx_tensor *out, const void *ws, size_t ws_bytes)
{
    const sx_tensor *ts[3] = {in0, in1, out};
    for (int i = 0; i < 2; i++)
        if (ranges_overlap(ts[i]->data, tensor_bytes(ts[i]), out->data, tensor_bytes(out)))
            return sx_error(SX_E_ARG, "%s: the output overlaps an input", who);
    for (int i = 0; i < 3; i++)
        if (ranges_overlap(ts[i]->data, tensor_bytes(ts[i]), ws, ws_bytes))
            return sx_error(SX_E_ARG, "%s: the workspace overlaps a tensor", who);
    return SX_OK;
}

/* The blocking plan of one call: where the im2col block lives and how many output image rows
 * a block holds. */
typedef struct conv_plan {
    char *col;     /* aligned workspace (NULL on the direct path) */
    int64_t brows; /* output image rows per block */
    im2col_fn im2col;
    col2im_fn col2im;
    sx_dtype dtype;
    size_t esz;
} conv_plan;

static sx_status plan_make(const char *who, const conv_geom *g, sx_dtype dt, void *ws,
                           size_t ws_bytes, conv_plan *pl)
{
    size_t need = ws_min(g);
    if (ws_bytes < need)
        return sx_error(SX_E_ARG,
                        "%s: workspace of %zu bytes, need at least %zu (sx_conv2d_workspace_min)",
                        who, ws_bytes, need);
    if (need > 0 && ws == NULL)
        return sx_error(SX_E_ARG, "%s: workspace is NULL", who);
    pl->dtype = dt;
    pl->esz = sx_dtype_size(dt);
    pl->im2col = dt == SX_F32 ? im2col_f32 : im2col_f64;
    pl->col2im = dt == SX_F32 ? col2im_f32 : col2im_f64;
    pl->col = NULL;
    pl->brows = g->rows;
    if (g->ow == 0 || g->rows == 0)
        return SX_OK;
    int64_t int_rows = INT_MAX / g->ow; /* a block's GEMM height must fit BLAS's int */
    if (needs_ws(g)) {
        uintptr_t a = (uintptr_t)ws, al = (a + CONV_WS_ALIGN - 1) & ~(uintptr_t)(CONV_WS_ALIGN - 1);
        size_t usable = ws_bytes - (size_t)(al - a);
        pl->col = (char *)ws + (al - a);
        size_t row_bytes = (size_t)g->ow * (size_t)g->kdim * pl->esz;
        size_t r = usable / row_bytes;
        pl->brows = r < (size_t)g->rows ? (int64_t)r : g->rows;
    }
    if (pl->brows > int_rows)
        pl->brows = int_rows;
    if (pl->brows < 1)
        pl->brows = 1;
    return SX_OK;
}

/* A rank-2 view (r, c) over data at element offset off. */
static sx_tensor mat(sx_dtype dt, int64_t r, int64_t c, const void *data, int64_t off)
{
    int64_t s[2] = {r, c};
    return sx_tensor_view(dt, 2, s, (char *)(uintptr_t)data + (size_t)off * sx_dtype_size(dt));
}

/* The im2col rows of block [p0, p0+np): x itself on the direct path, else built in the
 * workspace. */
static const void *block_col(const conv_geom *g, const conv_plan *pl, const void *x, int64_t p0,
                             int64_t np)
{
    if (g->direct)
        return (const char *)x + (size_t)(p0 * g->ow * g->kdim) * pl->esz;
    pl->im2col(g, x, p0, np, pl->col);
    return pl->col;
}

static void zero_fill(sx_tensor *t)
{
    memset(t->data, 0, tensor_bytes(t));
}

/* Parallel zeroing for large outputs that col2im then accumulates into. */
static void zero_fill_par(sx_tensor *t)
{
    size_t bytes = tensor_bytes(t), chunk = (size_t)1 << 16;
    int64_t nchunks = (int64_t)((bytes + chunk - 1) / chunk);
    char *d = t->data;
#pragma omp parallel for schedule(static) if (nchunks >= 8)
    for (int64_t i = 0; i < nchunks; i++) {
        size_t lo = (size_t)i * chunk, len = bytes - lo < chunk ? bytes - lo : chunk;
        memset(d + lo, 0, len);
    }
}

sx_status sx_tensor_conv2d_out(const sx_tensor *x, const sx_tensor *k, const sx_conv2d_params *p,
                               void *ws, size_t ws_bytes, sx_tensor *y)
{
    const char *who = "sx_tensor_conv2d_out";
    SX_TRY(check_rank4(who, "x", x));
    SX_TRY(check_rank4(who, "k", k));
    SX_TRY(sx__check_same_dtype(who, x, k));
    conv_geom g;
    SX_TRY(conv_geom_make(who, "x", x->shape, "k", k->shape, p, &g));
    int64_t ys[4] = {g.n, g.oh, g.ow, g.f};
    SX_TRY(sx__check_out(who, y, x->dtype, 4, ys));
    SX_TRY(check_overlap(who, x, k, y, ws, ws_bytes));
    conv_plan pl;
    SX_TRY(plan_make(who, &g, x->dtype, ws, ws_bytes, &pl));
    if (y->size == 0)
        return SX_OK;
    if (g.kdim == 0) { /* no input channels: every sum is empty */
        zero_fill(y);
        return SX_OK;
    }
    /* y rows of block (np*ow, f) = col (np*ow, kdim) @ k (kdim, f) */
    sx_tensor kv = mat(pl.dtype, g.kdim, g.f, k->data, 0);
    for (int64_t p0 = 0; p0 < g.rows; p0 += pl.brows) {
        int64_t np = g.rows - p0 < pl.brows ? g.rows - p0 : pl.brows;
        sx_tensor cv = mat(pl.dtype, np * g.ow, g.kdim, block_col(&g, &pl, x->data, p0, np), 0);
        sx_tensor yv = mat(pl.dtype, np * g.ow, g.f, y->data, p0 * g.ow * g.f);
        SX_TRY(sx_tensor_matmul_out(&cv, &kv, false, false, 1.0, 0.0, &yv));
    }
    return SX_OK;
}

/* Check dy against the shape conv2d gives for the geometry. */
static sx_status check_dy(const char *who, const conv_geom *g, const char *xname, const int64_t *xs,
                          const char *kname, const int64_t *ks, const sx_tensor *dy)
{
    int64_t want[4] = {g->n, g->oh, g->ow, g->f};
    if (!sx_shape_equal(4, dy->shape, 4, want)) {
        char a[128], b[128], c[128], d[128];
        return sx_error(SX_E_SHAPE, "%s: dy has shape %s, conv2d of %s %s and %s %s gives %s", who,
                        shape4_str(dy->shape, a, sizeof a), xname, shape4_str(xs, b, sizeof b),
                        kname, shape4_str(ks, c, sizeof c), shape4_str(want, d, sizeof d));
    }
    return SX_OK;
}

sx_status sx_tensor_conv2d_backward_input_out(const sx_tensor *k, const sx_tensor *dy,
                                              const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                              sx_tensor *dx)
{
    const char *who = "sx_tensor_conv2d_backward_input_out";
    SX_TRY(check_rank4(who, "k", k));
    SX_TRY(check_rank4(who, "dy", dy));
    SX_TRY(check_rank4(who, "dx", dx));
    SX_TRY(sx__check_same_dtype(who, k, dy));
    SX_TRY(sx__check_same_dtype(who, k, dx));
    conv_geom g;
    SX_TRY(conv_geom_make(who, "dx", dx->shape, "k", k->shape, p, &g));
    SX_TRY(check_dy(who, &g, "dx", dx->shape, "k", k->shape, dy));
    SX_TRY(check_overlap(who, k, dy, dx, ws, ws_bytes));
    conv_plan pl;
    SX_TRY(plan_make(who, &g, k->dtype, ws, ws_bytes, &pl));
    if (dx->size == 0)
        return SX_OK;
    if (dy->size == 0) { /* no outputs or no filters: nothing flows back */
        zero_fill(dx);
        return SX_OK;
    }
    /* dcol (np*ow, kdim) = dy rows (np*ow, f) @ k^T; on the direct path dcol is dx itself */
    sx_tensor kv = mat(pl.dtype, g.kdim, g.f, k->data, 0);
    if (!g.direct)
        zero_fill_par(dx);
    for (int64_t p0 = 0; p0 < g.rows; p0 += pl.brows) {
        int64_t np = g.rows - p0 < pl.brows ? g.rows - p0 : pl.brows;
        sx_tensor dyv = mat(pl.dtype, np * g.ow, g.f, dy->data, p0 * g.ow * g.f);
        sx_tensor cv = g.direct ? mat(pl.dtype, np * g.ow, g.kdim, dx->data, p0 * g.ow * g.kdim)
                                : mat(pl.dtype, np * g.ow, g.kdim, pl.col, 0);
        SX_TRY(sx_tensor_matmul_out(&dyv, &kv, false, true, 1.0, 0.0, &cv));
        if (!g.direct)
            pl.col2im(&g, pl.col, p0, np, dx->data);
    }
    return SX_OK;
}

sx_status sx_tensor_conv2d_backward_kernel_out(const sx_tensor *x, const sx_tensor *dy,
                                               const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                               sx_tensor *dk)
{
    const char *who = "sx_tensor_conv2d_backward_kernel_out";
    SX_TRY(check_rank4(who, "x", x));
    SX_TRY(check_rank4(who, "dy", dy));
    SX_TRY(check_rank4(who, "dk", dk));
    SX_TRY(sx__check_same_dtype(who, x, dy));
    SX_TRY(sx__check_same_dtype(who, x, dk));
    conv_geom g;
    SX_TRY(conv_geom_make(who, "x", x->shape, "dk", dk->shape, p, &g));
    SX_TRY(check_dy(who, &g, "x", x->shape, "dk", dk->shape, dy));
    SX_TRY(check_overlap(who, x, dy, dk, ws, ws_bytes));
    conv_plan pl;
    SX_TRY(plan_make(who, &g, x->dtype, ws, ws_bytes, &pl));
    if (dk->size == 0)
        return SX_OK;
    if (dy->size == 0) { /* no output positions: the gradient is an empty sum */
        zero_fill(dk);
        return SX_OK;
    }
    /* dk (kdim, f) = sum over blocks of col^T (kdim, np*ow) @ dy rows (np*ow, f) */
    sx_tensor dkv = mat(pl.dtype, g.kdim, g.f, dk->data, 0);
    for (int64_t p0 = 0; p0 < g.rows; p0 += pl.brows) {
        int64_t np = g.rows - p0 < pl.brows ? g.rows - p0 : pl.brows;
        sx_tensor cv = mat(pl.dtype, np * g.ow, g.kdim, block_col(&g, &pl, x->data, p0, np), 0);
        sx_tensor dyv = mat(pl.dtype, np * g.ow, g.f, dy->data, p0 * g.ow * g.f);
        SX_TRY(sx_tensor_matmul_out(&cv, &dyv, true, false, 1.0, p0 == 0 ? 0.0 : 1.0, &dkv));
    }
    return SX_OK;
}

sx_status sx_tensor_conv2d(const sx_tensor *x, const sx_tensor *k, const sx_conv2d_params *p,
                           sx_tensor **y)
{
    const char *who = "sx_tensor_conv2d";
    if (y == NULL)
        return sx_error(SX_E_ARG, "%s: y is NULL", who);
    *y = NULL;
    int64_t ys[4];
    SX_TRY(sx_conv2d_shape(who, x, k, p, ys));
    SX_TRY(sx__check_same_dtype(who, x, k));
    size_t wsb = sx_conv2d_workspace(x->shape, k->shape, p);
    void *ws = NULL;
    if (wsb > 0 && (ws = sx_alloc(wsb)) == NULL)
        return SX_E_NOMEM;
    sx_tensor *out = NULL;
    sx_status s = sx__new_like(x->dtype, 4, ys, &out);
    if (s == SX_OK)
        s = sx_tensor_conv2d_out(x, k, p, ws, wsb, out);
    sx_free(ws);
    if (s != SX_OK) {
        sx_tensor_free(out);
        return s;
    }
    *y = out;
    return SX_OK;
}
