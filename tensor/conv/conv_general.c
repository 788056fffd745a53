/* conv_general.c: the geometry of every convolution - strides, dilations, groups, the padding
 * modes (VALID, SAME_UPPER, SAME_LOWER, EXPLICIT) and the transposed convolution - and the
 * kernels of the geometries the dense kernels (conv_plan.c) do not compute. One geometry
 * (gx_geom) describes them all; a parameter set whose geometry the dense kernels compute (one
 * group, no dilation, the rows and columns VALID or SAME_UPPER would give) goes to them, with
 * its own checks (sx__conv_dense_geom). The rest: depthwise and groups of at most
 * SX__DW_MAX_GROUP channels and filters by conv_depthwise.c's direct kernels at the AVX2 and
 * AVX512 levels when they serve the geometry, otherwise depthwise by its loops (also there),
 * grouped 1x1 by one GEMM per group on x itself and everything else by im2col per group and
 * band plus a GEMM (conv_im2col.c). The transposed convolution is the conv2d from its output to
 * its input run backwards. */
#include "conv_impl.h"
#include "tensor_impl.h"

#include <limits.h>

/* Multiply-adds below which a call runs on one thread. */
#define GX_PAR_MIN_MACS ((int64_t)1 << 18)
/* Channels and filters per group above which (both) a group's GEMM beats the direct kernels. */
#define GX_GEMM_GROUP 12

sx_conv2d_params sx_conv2d_params_default(void)
{
    sx_conv2d_params p = {0};
    p.stride_h = p.stride_w = 1;
    p.padding = SX_PAD_VALID;
    p.dilation_h = p.dilation_w = 1;
    p.groups = 1;
    return p;
}

/* One group, no dilation, VALID or SAME_UPPER, no output padding (NULL counts: the dense
 * checks report it). */
static bool dense_basic(const sx_conv2d_params *p)
{
    return p == NULL ||
           ((p->padding == SX_PAD_VALID || p->padding == SX_PAD_SAME) && p->groups <= 1 &&
            p->groups >= 0 && p->dilation_h <= 1 && p->dilation_h >= 0 && p->dilation_w <= 1 &&
            p->dilation_w >= 0 && p->output_padding_h == 0 && p->output_padding_w == 0);
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
sx_status sx__conv_geom(const char *who, const char *xname, const int64_t *xs, const char *kname,
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
sx_status sx__conv_geom_transposed(const char *who, const char *xname, const int64_t *xs,
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

/* When the dense kernels (conv_plan.c) compute exactly this geometry: one group, no dilation, and
 * VALID or SAME_UPPER giving the same output size and leading pads (those kernels depend on h, w,
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

gx_path sx__conv_general_path(const gx_geom *g, sx_conv2d_params *old)
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

/* Whether conv_depthwise.c's direct kernels take a grouped geometry: groups of at most
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

/* Explicit pads that the dense kernels here compute as they compute SAME: one group, no
 * dilation, each pad smaller than the window along its axis (so every padded band holds at
 * least one input column), valid shapes (x's channels are k's, the padded image holds the
 * window). PyTorch's Conv2d(padding=1) with stride 2 is such a geometry but not SAME_UPPER's
 * (whose single pad row goes below); conv_general.c would run it by im2col and a GEMM per
 * band. Anything else, invalid input included, stays with conv_general.c and its messages. */
static bool dense_explicit(const sx_conv2d_params *p, const int64_t *xs, const int64_t *ks)
{
    if (p == NULL || xs == NULL || ks == NULL || p->padding != SX_PAD_EXPLICIT)
        return false;
    if (p->groups > 1 || p->groups < 0 || p->dilation_h > 1 || p->dilation_h < 0 ||
        p->dilation_w > 1 || p->dilation_w < 0 || p->output_padding_h != 0 ||
        p->output_padding_w != 0 || p->stride_h < 1 || p->stride_w < 1)
        return false;
    if (ks[0] < 1 || ks[1] < 1 || xs[3] != ks[2] || xs[0] < 0 || xs[1] < 0 || xs[2] < 0)
        return false;
    if (p->pad_top < 0 || p->pad_top >= ks[0] || p->pad_bottom < 0 || p->pad_bottom >= ks[0] ||
        p->pad_left < 0 || p->pad_left >= ks[1] || p->pad_right < 0 || p->pad_right >= ks[1])
        return false;
    return xs[1] + p->pad_top + p->pad_bottom >= ks[0] &&
           xs[2] + p->pad_left + p->pad_right >= ks[1];
}

/* Validate the parameters and shapes of x (n,h,w,c) and k (kh,kw,c,f) and fill g. xname and
 * kname name the tensors that carry those shapes in the caller (e.g. "dx", "dk"). */
sx_status sx__conv_dense_geom(const char *who, const char *xname, const int64_t *xs,
                              const char *kname, const int64_t *ks, const sx_conv2d_params *p,
                              conv_geom *g)
{
    char a[128], b[128];
    if (p == NULL)
        return sx_error(SX_E_ARG, "%s: params are NULL", who);
    if (p->stride_h < 1 || p->stride_w < 1)
        return sx_error(SX_E_ARG, "%s: stride (%d,%d), want both >= 1", who, p->stride_h,
                        p->stride_w);
    if (p->padding != SX_PAD_VALID && p->padding != SX_PAD_SAME &&
        !(p->padding == SX_PAD_EXPLICIT && dense_explicit(p, xs, ks)))
        return sx_error(SX_E_ARG, "%s: unknown padding %d", who, (int)p->padding);
    if (xs[3] != ks[2])
        return sx_error(SX_E_SHAPE,
                        "%s: %s %s (n,h,w,c) has %lld channels, %s %s (kh,kw,c,f) expects %lld",
                        who, xname, shape4(xs, a, sizeof a), (long long)xs[3], kname,
                        shape4(ks, b, sizeof b), (long long)ks[2]);
    if (ks[0] < 1 || ks[1] < 1)
        return sx_error(SX_E_SHAPE, "%s: %s %s has an empty window", who, kname,
                        shape4(ks, b, sizeof b));
    bool big = false;
    for (int i = 0; i < 4; i++)
        big |= xs[i] > INT_MAX || ks[i] > INT_MAX;
    if (big || (xs[3] > 0 && ks[0] * ks[1] > INT_MAX / xs[3]))
        return sx_error(SX_E_UNSUPPORTED, "%s: %s %s and %s %s: a dimension exceeds BLAS's int",
                        who, xname, shape4(xs, a, sizeof a), kname, shape4(ks, b, sizeof b));
    g->n = xs[0], g->h = xs[1], g->w = xs[2], g->c = xs[3];
    g->kh = ks[0], g->kw = ks[1], g->f = ks[3];
    g->sh = p->stride_h, g->sw = p->stride_w;
    if (p->padding == SX_PAD_VALID) {
        if (g->h < g->kh || g->w < g->kw)
            return sx_error(SX_E_SHAPE,
                            "%s: %s %s window (%lld,%lld) is larger than %s %s with VALID padding",
                            who, kname, shape4(ks, b, sizeof b), (long long)g->kh, (long long)g->kw,
                            xname, shape4(xs, a, sizeof a));
        g->oh = (g->h - g->kh) / g->sh + 1;
        g->ow = (g->w - g->kw) / g->sw + 1;
        g->pt = g->pl = 0;
    } else if (p->padding == SX_PAD_EXPLICIT) { /* dense_explicit: the padded image holds k */
        g->oh = (g->h + p->pad_top + p->pad_bottom - g->kh) / g->sh + 1;
        g->ow = (g->w + p->pad_left + p->pad_right - g->kw) / g->sw + 1;
        g->pt = p->pad_top;
        g->pl = p->pad_left;
    } else {
        g->oh = (g->h + g->sh - 1) / g->sh;
        g->ow = (g->w + g->sw - 1) / g->sw;
        /* TensorFlow's split: total padding (oh-1)*sh + kh - h, the odd one after */
        int64_t th = (g->oh - 1) * g->sh + g->kh - g->h, tw = (g->ow - 1) * g->sw + g->kw - g->w;
        g->pt = th > 0 ? th / 2 : 0;
        g->pl = tw > 0 ? tw / 2 : 0;
    }
    g->kdim = g->kh * g->kw * g->c;
    g->wp = g->ow > 0 ? (g->ow - 1) * g->sw + g->kw : 0;
    /* stride 1: w + kw - 1; strided (the phases): the dy columns they reach, and as many zero
     * columns before as the widest sub-kernel has taps less one */
    if (g->sh == 1 && g->sw == 1)
        g->wq = g->w + g->kw - 1;
    else
        g->wq = g->w > 0 ? (g->w - 1 + g->pl) / g->sw + phase_taps(g->kw, g->sw, 0) : 0;
    bool one = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1;
    bool whole = g->oh == 1 && g->ow == 1 && g->kh == g->h && g->kw == g->w;
    g->xcol = g->pt == 0 && g->pl == 0 && (one || whole);
    return SX_OK;
}

bool sx__conv_dense(const sx_conv2d_params *p, const int64_t *xs, const int64_t *ks)
{
    return dense_basic(p) || dense_explicit(p, xs, ks);
}

void sx__conv_general_run(const gx_geom *g, gx_path path, gx_kind kind, sx_dtype dt,
                          const void *in0, const void *in1, void *out, void *ws, size_t ws_bytes)
{
    const int64_t macs = g->n * g->oh * g->ow * g->kdim * g->fg;
    const bool par = macs >= GX_PAR_MIN_MACS;
    if ((path == GX_DEPTHWISE || direct_grouped(g)) &&
        sx__conv_depthwise_run(g, kind, dt, in0, in1, out, par, path == GX_DEPTHWISE))
        return;
    sx__conv_group_gemm(g, path, kind, dt, in0, in1, out, ws, ws_bytes, par);
}
