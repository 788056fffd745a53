/* conv_general.c: the convolutions outside conv.c's original set - dilated, grouped (depthwise
 * included), SAME_LOWER and explicitly padded - and the transposed convolution.
 * One geometry (gx_geom) describes them all; a parameter set whose geometry conv.c's dense
 * kernels already compute (one group, no dilation, the rows and columns VALID or SAME_UPPER
 * would give) goes to them. The rest: depthwise and groups of at most SX__DW_MAX_GROUP channels
 * and filters by tensor/conv/conv_dw.c's direct kernels at the AVX512 level when they serve the
 * geometry; otherwise depthwise by its own loops, grouped 1x1 by one GEMM per group on x
 * itself, everything else by im2col per group and band plus a GEMM. The
 * transposed convolution is the conv2d from its output to its input run backwards. */
#include "conv_dw.h"
#include "conv_impl.h"
#include "tensor_impl.h"

#include <limits.h>

/* Bytes of one im2col block the plan aims at (as conv.c's units: it stays in L2). */
#define GX_UNIT_BYTES ((size_t)768 << 10)
/* Workspace alignment (the sizes include the slack). */
#define GX_ALIGN 64
/* Filters per task of depthwise backward-kernel. */
#define GX_DW_CHUNK 512
/* Multiply-adds below which a call runs on one thread. */
#define GX_PAR_MIN_MACS ((int64_t)1 << 18)
/* Channels and filters per group above which (both) a group's GEMM beats the direct kernels. */
#define GX_GEMM_GROUP 12
/* GEMM rows per call when the im2col matrix is x itself (sx__gemm takes up to INT_MAX). */
#define GX_GEMM_ROWS ((int64_t)1 << 30)

/* The geometry of one convolution from x (n,h,w,c) through k (kh,kw,cg,f) to y (n,oh,ow,f). */
typedef struct gx_geom {
    int64_t n, h, w, c;
    int64_t kh, kw, cg, f; /* cg = c / groups */
    int64_t oh, ow;
    int64_t sh, sw, dh, dw;
    int64_t pt, pl;     /* zero rows above / columns left of x */
    int64_t groups, fg; /* fg = f / groups */
    int64_t kdim;       /* kh * kw * cg */
} gx_geom;

typedef enum { GX_FWD, GX_BWD_IN, GX_BWD_K } gx_kind;
typedef enum { GX_DENSE, GX_DEPTHWISE, GX_GEMM1, GX_IM2COL } gx_path;

/* One call: inputs (forward x, k; backward-input k, dy; backward-kernel x, dy) and output. */
typedef struct gx_job {
    const gx_geom *g;
    const void *in0, *in1;
    void *out;
} gx_job;

/* An im2col / col2im step: group gi, output rows from p0. */
typedef struct gx_cols {
    const gx_geom *g;
    const void *x;
    void *col;
    void *dx;
    int64_t p0, gi;
} gx_cols;

#define T float
#define SFX f32
#include "conv_general_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "conv_general_tmpl.h"
#undef T
#undef SFX

bool sx__conv_legacy(const sx_conv2d_params *p)
{
    return p == NULL ||
           ((p->padding == SX_PAD_VALID || p->padding == SX_PAD_SAME) && p->groups <= 1 &&
            p->groups >= 0 && p->dilation_h <= 1 && p->dilation_h >= 0 && p->dilation_w <= 1 &&
            p->dilation_w >= 0 && p->output_padding_h == 0 && p->output_padding_w == 0);
}

sx_conv2d_params sx_conv2d_params_default(void)
{
    sx_conv2d_params p = {0};
    p.stride_h = p.stride_w = 1;
    p.padding = SX_PAD_VALID;
    p.dilation_h = p.dilation_w = 1;
    p.groups = 1;
    return p;
}

static char *shape4(const int64_t *s, char *buf, size_t n)
{
    return sx_shape_str(4, s, buf, n);
}

/* The checks every parameter set passes: strides, dilations, groups, padding mode, pads and
 * (transposed only) output padding. Fills the normalised dilations and groups. */
static sx_status check_params(const char *who, const sx_conv2d_params *p, bool transposed,
                              int64_t *dh, int64_t *dw, int64_t *groups)
{
    if (p == NULL)
        return sx_error(SX_E_ARG, "%s: params are NULL", who);
    if (p->stride_h < 1 || p->stride_w < 1)
        return sx_error(SX_E_ARG, "%s: stride (%d,%d), want both >= 1", who, p->stride_h,
                        p->stride_w);
    if (p->dilation_h < 0 || p->dilation_w < 0)
        return sx_error(SX_E_ARG, "%s: dilation (%d,%d), want both >= 1 (0 reads as 1)", who,
                        p->dilation_h, p->dilation_w);
    if (p->groups < 0)
        return sx_error(SX_E_ARG, "%s: groups %d, want >= 1 (0 reads as 1)", who, p->groups);
    if (p->padding != SX_PAD_VALID && p->padding != SX_PAD_SAME_UPPER &&
        p->padding != SX_PAD_SAME_LOWER && p->padding != SX_PAD_EXPLICIT)
        return sx_error(SX_E_ARG, "%s: unknown padding %d", who, (int)p->padding);
    if (p->padding == SX_PAD_EXPLICIT &&
        (p->pad_top < 0 || p->pad_bottom < 0 || p->pad_left < 0 || p->pad_right < 0))
        return sx_error(SX_E_ARG,
                        "%s: explicit pads (top %d, bottom %d, left %d, right %d), want all >= 0",
                        who, p->pad_top, p->pad_bottom, p->pad_left, p->pad_right);
    *dh = p->dilation_h == 0 ? 1 : p->dilation_h;
    *dw = p->dilation_w == 0 ? 1 : p->dilation_w;
    *groups = p->groups == 0 ? 1 : p->groups;
    if (!transposed) {
        if (p->output_padding_h != 0 || p->output_padding_w != 0)
            return sx_error(SX_E_ARG,
                            "%s: output padding (%d,%d) is for the transposed convolution only; "
                            "conv2d wants (0,0)",
                            who, p->output_padding_h, p->output_padding_w);
        return SX_OK;
    }
    const int op[2] = {p->output_padding_h, p->output_padding_w};
    const int64_t s[2] = {p->stride_h, p->stride_w}, d[2] = {*dh, *dw};
    for (int a = 0; a < 2; a++)
        if (op[a] < 0 || (op[a] >= s[a] && op[a] >= d[a]))
            return sx_error(SX_E_ARG,
                            "%s: output padding %d of axis %s, want >= 0 and below the stride "
                            "%lld or the dilation %lld",
                            who, op[a], a == 0 ? "h" : "w", (long long)s[a], (long long)d[a]);
    return SX_OK;
}

/* One axis of conv2d: input size `in`, window k (dilation d), stride s -> out, pad before. */
static sx_status conv_axis(const char *who, const char *ax, const sx_conv2d_params *p, int64_t in,
                           int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe, int64_t *out,
                           int64_t *before)
{
    const int64_t kd = d * (k - 1) + 1;
    if (p->padding == SX_PAD_VALID || p->padding == SX_PAD_EXPLICIT) {
        if (p->padding == SX_PAD_VALID)
            pb = pe = 0;
        if (in + pb + pe < kd)
            return sx_error(SX_E_SHAPE,
                            "%s: the dilated window (%lld with kernel %lld, dilation %lld) is "
                            "larger than the padded input (%lld + %lld + %lld) along %s",
                            who, (long long)kd, (long long)k, (long long)d, (long long)in,
                            (long long)pb, (long long)pe, ax);
        *out = (in + pb + pe - kd) / s + 1;
        *before = pb;
        return SX_OK;
    }
    *out = (in + s - 1) / s;
    int64_t tot = (*out - 1) * s + kd - in;
    tot = tot > 0 ? tot : 0;
    *before = p->padding == SX_PAD_SAME_UPPER ? tot / 2 : tot - tot / 2;
    return SX_OK;
}

/* Dimensions up to INT_MAX (the GEMM's), and kdim too. */
static sx_status check_big(const char *who, const int64_t *a, const int64_t *b)
{
    char s1[128], s2[128];
    bool big = false;
    for (int i = 0; i < 4; i++)
        big |= a[i] > INT_MAX || b[i] > INT_MAX;
    if (big || (b[2] > 0 && b[0] * b[1] > INT_MAX / b[2]))
        return sx_error(SX_E_UNSUPPORTED, "%s: shapes %s and %s: a dimension exceeds INT_MAX", who,
                        shape4(a, s1, sizeof s1), shape4(b, s2, sizeof s2));
    return SX_OK;
}

/* Finish g from its shapes and pick nothing yet: fg, kdim. */
static void geom_finish(gx_geom *g)
{
    g->fg = g->groups > 0 ? g->f / g->groups : 0;
    g->kdim = g->kh * g->kw * g->cg;
}

/* The conv2d geometry of x (n,h,w,c) and k (kh,kw,c/groups,f); xname, kname: the names of the
 * tensors carrying those shapes in the caller. */
static sx_status geom_conv(const char *who, const char *xname, const int64_t *xs, const char *kname,
                           const int64_t *ks, const sx_conv2d_params *p, gx_geom *g)
{
    char a[128], b[128];
    int64_t dh = 1, dw = 1, groups = 1;
    SX_TRY(check_params(who, p, false, &dh, &dw, &groups));
    SX_TRY(check_big(who, xs, ks));
    if (xs[3] % groups != 0 || ks[3] % groups != 0)
        return sx_error(SX_E_SHAPE,
                        "%s: groups %lld do not divide the %lld channels of %s %s and the %lld "
                        "filters of %s %s",
                        who, (long long)groups, (long long)xs[3], xname, shape4(xs, a, sizeof a),
                        (long long)ks[3], kname, shape4(ks, b, sizeof b));
    if (ks[2] != xs[3] / groups)
        return sx_error(SX_E_SHAPE,
                        "%s: %s %s (kh,kw,c/groups,f) has %lld channels, %s %s (n,h,w,c) with "
                        "groups %lld expects %lld",
                        who, kname, shape4(ks, b, sizeof b), (long long)ks[2], xname,
                        shape4(xs, a, sizeof a), (long long)groups, (long long)(xs[3] / groups));
    if (ks[0] < 1 || ks[1] < 1)
        return sx_error(SX_E_SHAPE, "%s: %s %s has an empty window", who, kname,
                        shape4(ks, b, sizeof b));
    *g = (gx_geom){.n = xs[0],
                   .h = xs[1],
                   .w = xs[2],
                   .c = xs[3],
                   .kh = ks[0],
                   .kw = ks[1],
                   .cg = ks[2],
                   .f = ks[3],
                   .sh = p->stride_h,
                   .sw = p->stride_w,
                   .dh = dh,
                   .dw = dw,
                   .groups = groups};
    SX_TRY(
        conv_axis(who, "h", p, g->h, g->kh, g->sh, dh, p->pad_top, p->pad_bottom, &g->oh, &g->pt));
    SX_TRY(
        conv_axis(who, "w", p, g->w, g->kw, g->sw, dw, p->pad_left, p->pad_right, &g->ow, &g->pl));
    geom_finish(g);
    return SX_OK;
}

/* The geometry of the conv2d whose backward-input is the transposed convolution of x
 * (n,h,w,c_in) with k (kh,kw,c_out/groups,c_in): its input is the transposed output. */
static sx_status geom_transposed(const char *who, const char *xname, const int64_t *xs,
                                 const char *kname, const int64_t *ks, const sx_conv2d_params *p,
                                 gx_geom *g)
{
    char a[128], b[128];
    int64_t dh = 1, dw = 1, groups = 1;
    SX_TRY(check_params(who, p, true, &dh, &dw, &groups));
    SX_TRY(check_big(who, xs, ks));
    if (ks[3] != xs[3])
        return sx_error(SX_E_SHAPE,
                        "%s: %s %s (kh,kw,c_out/groups,c_in) has c_in %lld, %s %s (n,h,w,c_in) "
                        "has %lld channels",
                        who, kname, shape4(ks, b, sizeof b), (long long)ks[3], xname,
                        shape4(xs, a, sizeof a), (long long)xs[3]);
    if (xs[3] % groups != 0)
        return sx_error(SX_E_SHAPE, "%s: groups %lld do not divide the %lld channels of %s %s", who,
                        (long long)groups, (long long)xs[3], xname, shape4(xs, a, sizeof a));
    if (ks[0] < 1 || ks[1] < 1)
        return sx_error(SX_E_SHAPE, "%s: %s %s has an empty window", who, kname,
                        shape4(ks, b, sizeof b));
    if (ks[2] > INT_MAX / groups)
        return sx_error(SX_E_UNSUPPORTED, "%s: %lld output channels exceed INT_MAX", who,
                        (long long)ks[2] * (long long)groups);
    *g = (gx_geom){.n = xs[0],
                   .oh = xs[1],
                   .ow = xs[2],
                   .f = xs[3],
                   .kh = ks[0],
                   .kw = ks[1],
                   .cg = ks[2],
                   .c = ks[2] * groups,
                   .sh = p->stride_h,
                   .sw = p->stride_w,
                   .dh = dh,
                   .dw = dw,
                   .groups = groups};
    const int64_t in[2] = {g->oh, g->ow}, k[2] = {g->kh, g->kw}, s[2] = {g->sh, g->sw};
    const int64_t d[2] = {dh, dw}, op[2] = {p->output_padding_h, p->output_padding_w};
    int64_t pb[2] = {p->pad_top, p->pad_left}, pe[2] = {p->pad_bottom, p->pad_right}, out[2];
    for (int ax = 0; ax < 2; ax++) {
        const int64_t kd = d[ax] * (k[ax] - 1) + 1;
        if (p->padding == SX_PAD_VALID)
            pb[ax] = pe[ax] = 0;
        if (p->padding == SX_PAD_VALID || p->padding == SX_PAD_EXPLICIT) {
            out[ax] = (in[ax] - 1) * s[ax] - pb[ax] - pe[ax] + kd + op[ax];
        } else {
            out[ax] = in[ax] * s[ax];
            const int64_t tot = (in[ax] - 1) * s[ax] + kd + op[ax] - out[ax];
            if (tot < 0)
                return sx_error(SX_E_SHAPE,
                                "%s: SAME padding of a transposed convolution needs a total "
                                "padding of %lld along %s (kernel %lld, dilation %lld, stride "
                                "%lld); use EXPLICIT",
                                who, (long long)tot, ax == 0 ? "h" : "w", (long long)k[ax],
                                (long long)d[ax], (long long)s[ax]);
            pb[ax] = p->padding == SX_PAD_SAME_UPPER ? tot / 2 : tot - tot / 2;
        }
        if (out[ax] < 1)
            return sx_error(SX_E_SHAPE,
                            "%s: %s %s with kernel %s gives an output size %lld along %s, want "
                            ">= 1",
                            who, xname, shape4(xs, a, sizeof a), shape4(ks, b, sizeof b),
                            (long long)out[ax], ax == 0 ? "h" : "w");
        if (out[ax] > INT_MAX)
            return sx_error(SX_E_UNSUPPORTED, "%s: output size %lld exceeds INT_MAX", who,
                            (long long)out[ax]);
    }
    g->h = out[0], g->w = out[1], g->pt = pb[0], g->pl = pb[1];
    geom_finish(g);
    return SX_OK;
}

/* When conv.c's dense kernels compute exactly this geometry: one group, no dilation, and VALID
 * or SAME_UPPER giving the same output size and leading pads (conv.c's kernels depend on h, w,
 * the kernel, the strides, oh, ow, pt and pl only). Fills the parameters to call them with. */
static bool geom_dense(const gx_geom *g, sx_conv2d_params *old)
{
    if (g->groups != 1 || g->dh != 1 || g->dw != 1)
        return false;
    for (int mode = 0; mode < 2; mode++) {
        int64_t oh, ow, pt = 0, pl = 0;
        if (mode == 0) {
            if (g->h < g->kh || g->w < g->kw)
                continue;
            oh = (g->h - g->kh) / g->sh + 1;
            ow = (g->w - g->kw) / g->sw + 1;
        } else {
            oh = (g->h + g->sh - 1) / g->sh;
            ow = (g->w + g->sw - 1) / g->sw;
            const int64_t th = (oh - 1) * g->sh + g->kh - g->h;
            const int64_t tw = (ow - 1) * g->sw + g->kw - g->w;
            pt = th > 0 ? th / 2 : 0;
            pl = tw > 0 ? tw / 2 : 0;
        }
        if (oh == g->oh && ow == g->ow && pt == g->pt && pl == g->pl) {
            *old = sx_conv2d_params_default();
            old->stride_h = (int)g->sh, old->stride_w = (int)g->sw;
            old->padding = mode == 0 ? SX_PAD_VALID : SX_PAD_SAME;
            return true;
        }
    }
    return false;
}

static gx_path path_of(const gx_geom *g, sx_conv2d_params *old)
{
    if (geom_dense(g, old))
        return GX_DENSE;
    if (g->cg == 1 && g->groups == g->c)
        return GX_DEPTHWISE;
    if (g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->pt == 0 && g->pl == 0 &&
        g->oh == g->h && g->ow == g->w)
        return GX_GEMM1;
    return GX_IM2COL;
}

static size_t mul_sat(size_t a, size_t b)
{
    return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

/* Output rows per im2col block for elements of esz bytes and `usable` bytes of workspace (0:
 * it does not fit one row), at most GX_UNIT_BYTES' worth but at least one, at most all. */
static int64_t im2col_rows(const gx_geom *g, size_t esz, size_t usable)
{
    const size_t row = mul_sat(mul_sat((size_t)g->ow, (size_t)g->kdim), esz);
    if (row == 0)
        return 1;
    size_t r = usable / row, cap = GX_UNIT_BYTES / row;
    cap = cap < 1 ? 1 : cap;
    r = r < cap ? r : cap;
    const size_t all = (size_t)(g->n * g->oh);
    return (int64_t)(r < all ? r : all);
}

/* Workspace of a general geometry (dense: conv.c's), best or least. */
static size_t geom_ws(const gx_geom *g, bool best, const int64_t *xs_conv, const int64_t *ks)
{
    sx_conv2d_params old;
    gx_path path = path_of(g, &old);
    if (path == GX_DENSE)
        return best ? sx_conv2d_workspace(xs_conv, ks, &old)
                    : sx_conv2d_workspace_min(xs_conv, ks, &old);
    if (path != GX_IM2COL || g->n * g->oh * g->ow == 0 || g->kdim == 0 || g->f == 0)
        return 0;
    const size_t row = mul_sat(mul_sat((size_t)g->ow, (size_t)g->kdim), 8);
    size_t rows = 1;
    if (best) {
        rows = GX_UNIT_BYTES / row;
        rows = rows < 1 ? 1 : rows;
        rows = rows < (size_t)(g->n * g->oh) ? rows : (size_t)(g->n * g->oh);
    }
    size_t b = mul_sat(rows, row);
    return b > SIZE_MAX - GX_ALIGN ? SIZE_MAX : b + GX_ALIGN;
}

/* ---------------------------------------------------------------- checks */

static sx_status check_rank4(const char *who, const char *name, const sx_tensor *t, bool desc)
{
    SX_TRY(desc ? sx__check_desc(who, name, t) : sx__check_tensor(who, name, t));
    if (t->rank != 4) {
        char a[140];
        return sx_error(SX_E_RANK, "%s: %s has shape %s, want rank 4", who, name,
                        sx_shape_str(t->rank, t->shape, a, sizeof a));
    }
    return SX_OK;
}

static size_t tbytes(const sx_tensor *t)
{
    return (size_t)t->size * sx_dtype_size(t->dtype);
}

static bool overlap(const void *a, size_t na, const void *b, size_t nb)
{
    if (na == 0 || nb == 0 || a == NULL || b == NULL)
        return false;
    const char *a0 = a, *b0 = b;
    return a0 < b0 + nb && b0 < a0 + na;
}

static sx_status check_overlap(const char *who, const sx_tensor *in0, const sx_tensor *in1,
                               const sx_tensor *out, const void *ws, size_t ws_bytes)
{
    const sx_tensor *ts[3] = {in0, in1, out};
    for (int i = 0; i < 2; i++)
        if (overlap(ts[i]->data, tbytes(ts[i]), out->data, tbytes(out)))
            return sx_error(SX_E_ARG, "%s: the output overlaps an input", who);
    for (int i = 0; i < 3; i++)
        if (overlap(ts[i]->data, tbytes(ts[i]), ws, ws_bytes))
            return sx_error(SX_E_ARG, "%s: the workspace overlaps a tensor", who);
    return SX_OK;
}

static sx_status check_shape(const char *who, const char *name, const sx_tensor *t,
                             const int64_t *want, const char *what)
{
    if (!sx_shape_equal(4, t->shape, 4, want)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, %s gives %s", who, name,
                        shape4(t->shape, a, sizeof a), what, shape4(want, b, sizeof b));
    }
    return SX_OK;
}

static sx_status check_ws(const char *who, size_t need, const void *ws, size_t ws_bytes)
{
    if (ws_bytes < need)
        return sx_error(SX_E_ARG, "%s: workspace of %zu bytes, need at least %zu (%s)", who,
                        ws_bytes, need, "the _workspace_min function");
    if (need > 0 && ws == NULL)
        return sx_error(SX_E_ARG, "%s: workspace is NULL", who);
    return SX_OK;
}

/* ---------------------------------------------------------------- running a geometry */

static const char *at(const void *p, int64_t elems, size_t esz)
{
    return (const char *)p + (size_t)elems * esz;
}

static char *atw(void *p, int64_t elems, size_t esz)
{
    return (char *)p + (size_t)elems * esz;
}

/* Whether conv_dw.c's direct kernels take a grouped geometry: groups of at most
 * SX__DW_MAX_GROUP channels and filters, unless both are above GX_GEMM_GROUP (then a group's
 * im2col GEMM, k = kh * kw * cg deep and fg wide, runs near the GEMM's speed; the direct
 * kernels' cg expansions of x do not: 3x3 cg = fg = 16 at 7x7x512, one thread, CPU time:
 * im2col 4.6 / 3.9 / 4.9 ms forward / backward-input / backward-kernel vs direct 9.6 / 5.4 /
 * 5.0; at cg = fg = 12 and below the direct kernels are as fast or up to 10x faster). */
static bool direct_grouped(const gx_geom *g)
{
    return g->groups > 1 && g->cg <= SX__DW_MAX_GROUP && g->fg <= SX__DW_MAX_GROUP &&
           (g->cg <= GX_GEMM_GROUP || g->fg <= GX_GEMM_GROUP);
}

/* Run one kind of kernel on a general (not dense) geometry whose tensors are valid and
 * non-empty: in0, in1, out as in gx_job. */
static void run_geom(const gx_geom *g, gx_path path, gx_kind kind, sx_dtype dt, const void *in0,
                     const void *in1, void *out, void *ws, size_t ws_bytes)
{
    const size_t esz = sx_dtype_size(dt);
    const bool d = dt == SX_F64;
    const int64_t macs = g->n * g->oh * g->ow * g->kdim * g->fg;
    const bool par = macs >= GX_PAR_MIN_MACS;
    gx_job jb = {g, in0, in1, out};
    if (path == GX_DEPTHWISE || direct_grouped(g)) {
        const sx__dw_geom dg = {g->n,  g->h,  g->w,  g->c,  g->kh, g->kw, g->oh, g->ow, g->sh,
                                g->sw, g->dh, g->dw, g->pt, g->pl, g->f,  g->cg, g->fg};
        const sx__dw_kind dk = kind == GX_FWD      ? SX__DW_FWD
                               : kind == GX_BWD_IN ? SX__DW_BWD_IN
                                                   : SX__DW_BWD_K;
        if (sx__dw_direct(&dg, dk, dt, in0, in1, out, par))
            return;
    }
    if (path == GX_DEPTHWISE) {
        if (kind == GX_FWD) {
            sx__par_range_fn fn = d ? dw_fwd_rows_f64 : dw_fwd_rows_f32;
            if (par)
                sx__par_range(g->n * g->oh, 1, fn, &jb);
            else
                fn(&jb, 0, g->n * g->oh);
        } else if (kind == GX_BWD_IN) {
            sx__par_range_fn fn = d ? dw_bwdi_rows_f64 : dw_bwdi_rows_f32;
            if (par)
                sx__par_range(g->n * g->h, 1, fn, &jb);
            else
                fn(&jb, 0, g->n * g->h);
        } else {
            sx__par_task_fn fn = d ? dw_bwdk_task_f64 : dw_bwdk_task_f32;
            const int64_t tasks = g->kh * g->kw * ((g->f + GX_DW_CHUNK - 1) / GX_DW_CHUNK);
            if (par)
                sx__par_for(tasks, fn, &jb);
            else
                for (int64_t t = 0; t < tasks; t++)
                    fn(&jb, t);
        }
        return;
    }
    const int64_t c = g->c, f = g->f, cg = g->cg, fg = g->fg;
    if (path == GX_GEMM1) { /* x (m, c) is the im2col matrix; group gi's columns */
        const int64_t m = g->n * g->h * g->w;
        for (int64_t r0 = 0; r0 < m; r0 += GX_GEMM_ROWS) {
            const int64_t r = m - r0 < GX_GEMM_ROWS ? m - r0 : GX_GEMM_ROWS;
            for (int64_t gi = 0; gi < g->groups; gi++) {
                if (kind == GX_FWD) /* y_g (r, fg) = x_g (r, cg) @ k_g (cg, fg) */
                    sx__gemm(dt, false, false, r, fg, cg, 1.0, at(in0, r0 * c + gi * cg, esz), c,
                             at(in1, gi * fg, esz), f, 0.0, atw(out, r0 * f + gi * fg, esz), f);
                else if (kind == GX_BWD_IN) /* dx_g (r, cg) = dy_g (r, fg) @ k_g^T */
                    sx__gemm(dt, false, true, r, cg, fg, 1.0, at(in1, r0 * f + gi * fg, esz), f,
                             at(in0, gi * fg, esz), f, 0.0, atw(out, r0 * c + gi * cg, esz), c);
                else /* dk_g (cg, fg) (+)= x_g^T @ dy_g */
                    sx__gemm(dt, true, false, cg, fg, r, 1.0, at(in0, r0 * c + gi * cg, esz), c,
                             at(in1, r0 * f + gi * fg, esz), f, r0 == 0 ? 0.0 : 1.0,
                             atw(out, gi * fg, esz), f);
            }
        }
        return;
    }
    /* im2col per band of output rows (p = img * oh + oy) and group */
    uintptr_t a = (uintptr_t)ws, al = (a + GX_ALIGN - 1) & ~(uintptr_t)(GX_ALIGN - 1);
    void *col = (char *)ws + (al - a);
    const size_t usable = ws_bytes - (size_t)(al - a);
    const int64_t rows = g->n * g->oh, rpu = im2col_rows(g, esz, usable);
    if (kind == GX_BWD_IN)
        memset(out, 0, (size_t)(g->n * g->h * g->w * c) * esz);
    for (int64_t p0 = 0; p0 < rows; p0 += rpu) {
        const int64_t np = rows - p0 < rpu ? rows - p0 : rpu, mr = np * g->ow;
        for (int64_t gi = 0; gi < g->groups; gi++) {
            gx_cols cc = {g, kind == GX_BWD_IN ? NULL : in0, col, out, p0, gi};
            if (kind != GX_BWD_IN) {
                sx__par_range_fn fn = d ? gx_im2col_rows_f64 : gx_im2col_rows_f32;
                if (par && mr * g->kdim >= SX_PAR_MIN)
                    sx__par_range(np, 1, fn, &cc);
                else
                    fn(&cc, 0, np);
            }
            if (kind == GX_FWD) /* y rows (mr, fg) = col (mr, kdim) @ k_g (kdim, fg) */
                sx__gemm(dt, false, false, mr, fg, g->kdim, 1.0, col, g->kdim,
                         at(in1, gi * fg, esz), f, 0.0, atw(out, p0 * g->ow * f + gi * fg, esz), f);
            else if (kind == GX_BWD_K) /* dk_g (kdim, fg) (+)= col^T @ dy rows (mr, fg) */
                sx__gemm(dt, true, false, g->kdim, fg, mr, 1.0, col, g->kdim,
                         at(in1, p0 * g->ow * f + gi * fg, esz), f, p0 == 0 ? 0.0 : 1.0,
                         atw(out, gi * fg, esz), f);
            else { /* dcol (mr, kdim) = dy rows (mr, fg) @ k_g^T, then col2im */
                sx__gemm(dt, false, true, mr, g->kdim, fg, 1.0,
                         at(in1, p0 * g->ow * f + gi * fg, esz), f, at(in0, gi * fg, esz), f, 0.0,
                         col, g->kdim);
                if (d)
                    gx_col2im_f64(&cc, np);
                else
                    gx_col2im_f32(&cc, np);
            }
        }
    }
}

/* One kernel of a general geometry: the checks on the output, dy, the workspace and overlap
 * are done; here the empty cases, the dense kernels of conv.c, or run_geom. For the dense
 * kernels the tensors are passed on in conv2d's roles. */
static sx_status exec(const gx_geom *g, gx_kind kind, const sx_tensor *in0, const sx_tensor *in1,
                      sx_tensor *out, void *ws, size_t ws_bytes)
{
    sx_conv2d_params old;
    const gx_path path = path_of(g, &old);
    if (path == GX_DENSE)
        return kind == GX_FWD ? sx_tensor_conv2d_out(in0, in1, &old, ws, ws_bytes, out)
               : kind == GX_BWD_IN
                   ? sx_tensor_conv2d_backward_input_out(in0, in1, &old, ws, ws_bytes, out)
                   : sx_tensor_conv2d_backward_kernel_out(in0, in1, &old, ws, ws_bytes, out);
    if (out->size == 0)
        return SX_OK;
    if (in0->size == 0 || in1->size == 0) { /* every sum is empty */
        memset(out->data, 0, tbytes(out));
        return SX_OK;
    }
    run_geom(g, path, kind, out->dtype, in0->data, in1->data, out->data, ws, ws_bytes);
    return SX_OK;
}

/* ---------------------------------------------------------------- conv2d entry points */

sx_status sx__conv2d_general_shape(const char *who, const sx_tensor *x, const sx_tensor *k,
                                   const sx_conv2d_params *p, int64_t out_shape[4])
{
    if (out_shape == NULL)
        return sx_error(SX_E_ARG, "%s: out_shape is NULL", who);
    SX_TRY(check_rank4(who, "x", x, true));
    SX_TRY(check_rank4(who, "k", k, true));
    gx_geom g;
    SX_TRY(geom_conv(who, "x", x->shape, "k", k->shape, p, &g));
    out_shape[0] = g.n, out_shape[1] = g.oh, out_shape[2] = g.ow, out_shape[3] = g.f;
    return SX_OK;
}

/* The size queries report invalid input as 0 and keep the thread's last error message. */
size_t sx__conv2d_general_workspace(const int64_t x_shape[4], const int64_t k_shape[4],
                                    const sx_conv2d_params *p, bool best)
{
    if (x_shape == NULL || k_shape == NULL)
        return 0;
    char saved[512];
    snprintf(saved, sizeof saved, "%s", sx_last_error());
    gx_geom g;
    sx_status s = geom_conv("sx_conv2d_workspace", "x", x_shape, "k", k_shape, p, &g);
    (void)sx_error(SX_OK, "%s", saved);
    if (s != SX_OK)
        return 0;
    return geom_ws(&g, best, x_shape, k_shape);
}

/* The shared front of the three conv2d kernels: a, b are the kernel's inputs in the order of
 * its signature, with names; the geometry comes from (xname, xs) and (kname, ks). */
static sx_status conv_front(const char *who, gx_kind kind, const sx_tensor *a, const char *an,
                            const sx_tensor *b, const char *bn, const sx_tensor *out,
                            const char *on, const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                            gx_geom *g)
{
    SX_TRY(check_rank4(who, an, a, false));
    SX_TRY(check_rank4(who, bn, b, false));
    if (kind != GX_FWD)
        SX_TRY(check_rank4(who, on, out, false));
    else if (out == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, on);
    SX_TRY(sx__check_same_dtype(who, a, b));
    const sx_tensor *xt = kind == GX_BWD_IN ? out : a, *kt = kind == GX_FWD      ? b
                                                             : kind == GX_BWD_IN ? a
                                                                                 : out;
    SX_TRY(geom_conv(who, xt == a ? an : on, xt->shape,
                     kt == b   ? bn
                     : kt == a ? an
                               : on,
                     kt->shape, p, g));
    const int64_t ys[4] = {g->n, g->oh, g->ow, g->f};
    if (kind == GX_FWD) {
        SX_TRY(sx__check_out(who, out, a->dtype, 4, ys));
    } else {
        SX_TRY(sx__check_same_dtype(who, a, out));
        SX_TRY(check_shape(who, "dy", b, ys, "conv2d of the geometry"));
    }
    SX_TRY(check_overlap(who, a, b, out, ws, ws_bytes));
    int64_t xs[4] = {g->n, g->h, g->w, g->c}, ks[4] = {g->kh, g->kw, g->cg, g->f};
    return check_ws(who, geom_ws(g, false, xs, ks), ws, ws_bytes);
}

sx_status sx__conv2d_general_forward(const sx_tensor *x, const sx_tensor *k,
                                     const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                     sx_tensor *y)
{
    gx_geom g;
    SX_TRY(conv_front("sx_tensor_conv2d_out", GX_FWD, x, "x", k, "k", y, "y", p, ws, ws_bytes, &g));
    return exec(&g, GX_FWD, x, k, y, ws, ws_bytes);
}

sx_status sx__conv2d_general_backward_input(const sx_tensor *k, const sx_tensor *dy,
                                            const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                            sx_tensor *dx)
{
    gx_geom g;
    SX_TRY(conv_front("sx_tensor_conv2d_backward_input_out", GX_BWD_IN, k, "k", dy, "dy", dx, "dx",
                      p, ws, ws_bytes, &g));
    return exec(&g, GX_BWD_IN, k, dy, dx, ws, ws_bytes);
}

sx_status sx__conv2d_general_backward_kernel(const sx_tensor *x, const sx_tensor *dy,
                                             const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                             sx_tensor *dk)
{
    gx_geom g;
    SX_TRY(conv_front("sx_tensor_conv2d_backward_kernel_out", GX_BWD_K, x, "x", dy, "dy", dk, "dk",
                      p, ws, ws_bytes, &g));
    return exec(&g, GX_BWD_K, x, dy, dk, ws, ws_bytes);
}

/* ---------------------------------------------------------------- transposed convolution */

sx_status sx_conv_transpose2d_shape(const char *who, const sx_tensor *x, const sx_tensor *k,
                                    const sx_conv2d_params *p, int64_t out_shape[4])
{
    if (who == NULL)
        who = "sx_conv_transpose2d_shape";
    if (out_shape == NULL)
        return sx_error(SX_E_ARG, "%s: out_shape is NULL", who);
    SX_TRY(check_rank4(who, "x", x, true));
    SX_TRY(check_rank4(who, "k", k, true));
    gx_geom g;
    SX_TRY(geom_transposed(who, "x", x->shape, "k", k->shape, p, &g));
    out_shape[0] = g.n, out_shape[1] = g.h, out_shape[2] = g.w, out_shape[3] = g.c;
    return SX_OK;
}

static size_t tr_ws(const int64_t x_shape[4], const int64_t k_shape[4], const sx_conv2d_params *p,
                    bool best)
{
    if (x_shape == NULL || k_shape == NULL)
        return 0;
    char saved[512];
    snprintf(saved, sizeof saved, "%s", sx_last_error());
    gx_geom g;
    sx_status s =
        geom_transposed("sx_conv_transpose2d_workspace", "x", x_shape, "k", k_shape, p, &g);
    (void)sx_error(SX_OK, "%s", saved);
    if (s != SX_OK)
        return 0;
    int64_t ys[4] = {g.n, g.h, g.w, g.c}, ks[4] = {g.kh, g.kw, g.cg, g.f};
    return geom_ws(&g, best, ys, ks);
}

size_t sx_conv_transpose2d_workspace(const int64_t x_shape[4], const int64_t k_shape[4],
                                     const sx_conv2d_params *p)
{
    return tr_ws(x_shape, k_shape, p, true);
}

size_t sx_conv_transpose2d_workspace_min(const int64_t x_shape[4], const int64_t k_shape[4],
                                         const sx_conv2d_params *p)
{
    return tr_ws(x_shape, k_shape, p, false);
}

/* The shared front of the three transposed kernels. tx: the tensor with x's shape (forward
 * and backward-kernel: x; backward-input: dx); tk: the one with k's shape; tdy: the one with
 * y's shape (forward: the output y; else dy). */
static sx_status tr_front(const char *who, const sx_tensor *a, const char *an, const sx_tensor *b,
                          const char *bn, const sx_tensor *out, const char *on, const sx_tensor *tx,
                          const sx_tensor *tk, const sx_tensor *ty, const char *yname,
                          const sx_conv2d_params *p, void *ws, size_t ws_bytes, gx_geom *g)
{
    SX_TRY(check_rank4(who, an, a, false));
    SX_TRY(check_rank4(who, bn, b, false));
    SX_TRY(check_rank4(who, on, out, false));
    SX_TRY(sx__check_same_dtype(who, a, b));
    SX_TRY(sx__check_same_dtype(who, a, out));
    SX_TRY(geom_transposed(who,
                           tx == a   ? an
                           : tx == b ? bn
                                     : on,
                           tx->shape,
                           tk == a   ? an
                           : tk == b ? bn
                                     : on,
                           tk->shape, p, g));
    const int64_t ys[4] = {g->n, g->h, g->w, g->c};
    SX_TRY(check_shape(who, yname, ty, ys, "conv_transpose2d of the geometry"));
    SX_TRY(check_overlap(who, a, b, out, ws, ws_bytes));
    int64_t ks[4] = {g->kh, g->kw, g->cg, g->f};
    return check_ws(who, geom_ws(g, false, ys, ks), ws, ws_bytes);
}

sx_status sx_tensor_conv_transpose2d_out(const sx_tensor *x, const sx_tensor *k,
                                         const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                         sx_tensor *y)
{
    const char *who = "sx_tensor_conv_transpose2d_out";
    gx_geom g;
    if (y == NULL)
        return sx_error(SX_E_ARG, "%s: y is NULL", who);
    SX_TRY(tr_front(who, x, "x", k, "k", y, "y", x, k, y, "y", p, ws, ws_bytes, &g));
    /* conv2d's backward-input: dx = y, from k and dy = x */
    return exec(&g, GX_BWD_IN, k, x, y, ws, ws_bytes);
}

sx_status sx_tensor_conv_transpose2d_backward_input_out(const sx_tensor *k, const sx_tensor *dy,
                                                        const sx_conv2d_params *p, void *ws,
                                                        size_t ws_bytes, sx_tensor *dx)
{
    const char *who = "sx_tensor_conv_transpose2d_backward_input_out";
    gx_geom g;
    SX_TRY(tr_front(who, k, "k", dy, "dy", dx, "dx", dx, k, dy, "dy", p, ws, ws_bytes, &g));
    /* conv2d's forward: y = dx, of x = dy */
    return exec(&g, GX_FWD, dy, k, dx, ws, ws_bytes);
}

sx_status sx_tensor_conv_transpose2d_backward_kernel_out(const sx_tensor *x, const sx_tensor *dy,
                                                         const sx_conv2d_params *p, void *ws,
                                                         size_t ws_bytes, sx_tensor *dk)
{
    const char *who = "sx_tensor_conv_transpose2d_backward_kernel_out";
    gx_geom g;
    SX_TRY(tr_front(who, x, "x", dy, "dy", dk, "dk", x, dk, dy, "dy", p, ws, ws_bytes, &g));
    /* conv2d's backward-kernel: its x is dy, its dy is x */
    return exec(&g, GX_BWD_K, dy, x, dk, ws, ws_bytes);
}
