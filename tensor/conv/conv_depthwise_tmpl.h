/* conv_depthwise_tmpl.h: the kernels of conv_depthwise.c for one instruction set and dtype;
 * included with T and SFX defined, between simd.h and simd_end.h (V, VL, VMASK, V_*, and the
 * permutes: it needs SIMD_HAS_PERM). Ring rows hold VL lanes per column, 64-byte aligned. */
#if !SIMD_HAS_PERM
#error "conv_depthwise_tmpl.h: the grouped kernels need the lane permutes and gathers of simd.h"
#endif
#define DW_CAT_(a, b) a##_##b
#define DW_CAT(a, b) DW_CAT_(a, b)
#define FN(name) DW_CAT(name, SFX)
#define DW_INLINE static inline __attribute__((always_inline)) VATTR

/* Elements of a task's ring (a grouped block may take up to DW_RING_MAX). */
#define DW_RING_ELEMS (DW_RING_MAX / sizeof(T))
/* Output pixels per register tile, then 4, 2, 1 for the rest of a row. Forward keeps DWF_P
 * accumulators, the 3 taps of a kernel row and a column of x: 12 vectors at 8, within AVX2's 16.
 * Backward-input keeps DWI_P vectors of dy and the (DWI_P - 1) * SW + 3 dx columns they reach:
 * 25 at 8 and stride 2 (AVX-512's 32 registers hold them), 13 at 4 (AVX2's 16; measured on Zen 3,
 * 6 or 8 there ran no faster: backward-input waits on memory). */
#define DWF_P 8
#define DWI_P (SIMD_REGS >= 32 ? 8 : 4)

/* Expansion tables (grouped kinds), one per block: its expansion e's lane l reads source
 * channel (L / ep) * eq + e (L: the lane's channel), e channels further than expansion 0's.
 * Within 2 * VL channels of each other: a permute of the (one or two) vectors from lo + e;
 * farther apart: a gather of the absolute channels from e. */
typedef struct FN(dw_xt) {
    _Alignas(64) VIT idx[VL];
    int64_t lo, span;
} FN(dw_xt);
#define DW_XT FN(dw_xt)

/* Table of the block of lanes from l0 (lanes below nl valid). */
static VATTR void FN(dw_xt_make)(DW_XT *t, int64_t l0, int64_t nl, int64_t ep, int64_t eq)
{
    int64_t lo = INT64_MAX, hi = -1;
    for (int64_t l = 0; l < VL && l0 + l < nl; l++) {
        const int64_t s = (l0 + l) / ep * eq;
        lo = s < lo ? s : lo;
        hi = s > hi ? s : hi;
    }
    t->lo = lo;
    t->span = hi - lo + 1;
    for (int64_t l = 0; l < VL; l++) {
        const int64_t s = l0 + l < nl ? (l0 + l) / ep * eq : lo;
        t->idx[l] = (VIT)(t->span <= 2 * VL ? s - lo : s);
    }
}

/* Expansion e of the pixel at p (its channel 0) under table t; lanes outside m are not read
 * from memory by a gather (a permute may leave any value there). */
DW_INLINE V FN(dw_expand)(const T *p, const DW_XT *t, int64_t e, VMASK m)
{
    p += e;
    const VI ix = V_ILOAD(t->idx);
    if (t->span <= VL)
        return V_PERM(ix, V_MLOAD(V_MASK_N(t->span), p + t->lo));
    if (t->span <= 2 * VL)
        return V_PERM2(V_LOAD(p + t->lo), ix, V_MLOAD(V_MASK_N(t->span - VL), p + t->lo + VL));
    return V_GATHER(m, ix, p);
}

/* The ring rows of one padded row (slot base dst: nbl blocks of e expansions of wr columns) =
 * row iy of the image at xi (from the chunk's first channel; grouped: from channel 0, through
 * the chunk's tables xt), column j holding x's column j - pl; zero outside x. A pixel's
 * channels of the chunk are read together. */
DW_INLINE void FN(dw_fill)(const dw_job *jb, const T *xi, int64_t c0, int64_t nbl, int64_t iy,
                           const DW_XT *xt, T *dst)
{
    const sx__dw_geom *g = jb->g;
    const int64_t wr = jb->wr, ne = jb->e;
    /* zeros GCC cannot see: it would turn zeroing loops into calls of memset, and backward-
     * kernel's accumulators, live across them, would then be kept on the stack */
    V z = V_ZERO();
    __asm__("" : "+v"(z));
    const bool in = iy >= 0 && iy < g->h;
    const T *xr = in ? xi + iy * g->w * g->c : xi;
    /* the row DW_PF rows below, into the cache meanwhile (the loads wait on memory otherwise) */
    const T *pf = in && iy + DW_PF < g->h ? xr + DW_PF * g->w * g->c : NULL;
    for (int64_t j = 0; j < wr; j++) {
        const int64_t ix = j - g->pl;
        const bool inx = in && ix >= 0 && ix < g->w;
        if (jb->grouped) {
            /* the channels the chunk's groups read: from its first block's lowest */
            if (inx && pf != NULL)
                for (int64_t o = xt[0].lo; o < xt[nbl - 1].lo + xt[nbl - 1].span + ne;
                     o += 64 / (int64_t)sizeof(T))
                    V_PREFETCH(pf + ix * g->c + o);
            for (int64_t b = 0; b < nbl; b++) {
                const VMASK m = V_MASK_N(jb->lanes - c0 - b * VL);
                for (int64_t e = 0; e < ne; e++)
                    V_STOREA(dst + ((b * ne + e) * wr + j) * VL,
                             inx ? FN(dw_expand)(xr + ix * g->c, &xt[b], e, m) : z);
            }
            continue;
        }
        for (int64_t b = 0; b < nbl; b++) {
            const VMASK m = V_MASK_N(g->c - c0 - b * VL);
            if (inx && pf != NULL)
                V_PREFETCH(pf + ix * g->c + b * VL);
            V_STOREA(dst + (b * wr + j) * VL, inx ? V_MLOAD(m, xr + ix * g->c + b * VL) : z);
        }
    }
}

/* rows[ky] = the slot base of padded row oy * sh + ky * dh of the image at xi (slot: the padded
 * row modulo the ring's rows; tag: which padded row each slot holds), filled if absent. */
DW_INLINE void FN(dw_rows)(const dw_job *jb, const T *xi, int64_t c0, int64_t nbl, int64_t oy,
                           const DW_XT *xt, T *ring, int64_t *tag, const T **rows)
{
    const sx__dw_geom *g = jb->g;
    for (int64_t ky = 0; ky < g->kh; ky++) {
        const int64_t pr = oy * g->sh + ky * g->dh, s = pr % jb->r;
        T *row = ring + s * jb->cpt * jb->e * jb->wr * VL;
        if (tag[s] != pr) {
            FN(dw_fill)(jb, xi, c0, nbl, pr - g->pt, xt, row);
            tag[s] = pr;
        }
        rows[ky] = row;
    }
}

/* A task's chunk of channel blocks: t % nch; first channel and blocks. */
DW_INLINE int64_t FN(dw_chunk)(const dw_job *jb, int64_t t, int64_t *nbl)
{
    const int64_t b0 = t % jb->nch * jb->cpt;
    *nbl = jb->nb - b0 < jb->cpt ? jb->nb - b0 : jb->cpt;
    return b0 * VL;
}

/* The expansion tables of a chunk (grouped kinds): block b's at xt[b]. */
static VATTR void FN(dw_tables)(const dw_job *jb, int64_t c0, int64_t nbl, DW_XT *xt)
{
    if (!jb->grouped)
        return;
    for (int64_t b = 0; b < nbl; b++)
        FN(dw_xt_make)(&xt[b], c0 + b * VL, jb->lanes, jb->ep, jb->eq);
}

/* Prefetch npix pixels (stride c) of the chunk's nbl blocks from p: the lines a later row will
 * read or write. */
DW_INLINE void FN(dw_prefetch)(const T *p, int64_t npix, int64_t c, int64_t nbl)
{
    for (int64_t i = 0; i < npix; i++)
        for (int64_t b = 0; b < nbl; b++)
            V_PREFETCH(p + i * c + b * VL);
}

/* ---------------------------------------------------------------- forward */

/* P output pixels from yp (channel block, mask m): the sum over the taps in order (ky, then
 * the ne expansions (a group's channels; one for depthwise), then kx) of the ring rows (from
 * column off; expansion e re elements further) times k's taps (k: (kh, kw, cg, f) from the
 * block's filter). KW > 0: the kernel width, strides and dilation are these constants (each x
 * column is loaded once for all the taps that read it); KW == 0: g's. */
DW_INLINE void FN(dwf_tile)(const sx__dw_geom *g, const T *const *rows, int64_t off, int64_t ne,
                            int64_t re, const T *k, VMASK m, T *yp, const int P, const int KW,
                            const int SW, const int DW)
{
    const int64_t f = g->f, ks = g->cg * g->f;
    V acc[DWF_P];
#pragma GCC unroll 8
    for (int p = 0; p < P; p++)
        acc[p] = V_ZERO();
    for (int64_t ky = 0; ky < g->kh; ky++) {
        for (int64_t e = 0; e < ne; e++) {
            const T *r = rows[ky] + off + e * re, *kr = k + ky * g->kw * ks + e * f;
            if (KW > 0) {
                V kv[4];
#pragma GCC unroll 4
                for (int kx = 0; kx < KW; kx++)
                    kv[kx] = V_MLOAD(m, kr + kx * ks);
#pragma GCC unroll 32
                for (int i = 0; i < (P - 1) * SW + (KW - 1) * DW + 1; i++) {
                    const V xv = V_LOADA(r + i * VL);
#pragma GCC unroll 4
                    for (int kx = 0; kx < KW; kx++) {
                        const int d = i - kx * DW;
                        if (d >= 0 && d % SW == 0 && d / SW < P)
                            acc[d / SW] = V_FMA(xv, kv[kx], acc[d / SW]);
                    }
                }
            } else {
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    const V kv = V_MLOAD(m, kr + kx * ks);
                    const T *rx = r + kx * g->dw * VL;
#pragma GCC unroll 8
                    for (int p = 0; p < P; p++)
                        acc[p] = V_FMA(V_LOADA(rx + p * g->sw * VL), kv, acc[p]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; p++)
        V_MSTORE(yp + p * f, m, acc[p]);
}

/* One output row yr of one block from its ring rows (the block's at boff): tiles of DWF_P
 * pixels, then 4, 2, 1. */
DW_INLINE void FN(dwf_row)(const sx__dw_geom *g, const T *const *rows, int64_t boff, int64_t ne,
                           int64_t re, const T *k, VMASK m, T *yr, const int KW, const int SW,
                           const int DW)
{
    const int64_t ow = g->ow, cs = (KW > 0 ? SW : g->sw) * VL, f = g->f;
    int64_t ox = 0;
    for (; ox + DWF_P <= ow; ox += DWF_P)
        FN(dwf_tile)(g, rows, boff + ox * cs, ne, re, k, m, yr + ox * f, DWF_P, KW, SW, DW);
    if (ox + 4 <= ow) {
        FN(dwf_tile)(g, rows, boff + ox * cs, ne, re, k, m, yr + ox * f, 4, KW, SW, DW);
        ox += 4;
    }
    if (ox + 2 <= ow) {
        FN(dwf_tile)(g, rows, boff + ox * cs, ne, re, k, m, yr + ox * f, 2, KW, SW, DW);
        ox += 2;
    }
    if (ox < ow)
        FN(dwf_tile)(g, rows, boff + ox * cs, ne, re, k, m, yr + ox * f, 1, KW, SW, DW);
}

/* Task t: chunk t % nch of images [t / nch * ipt, + ipt), row by row, every block of the
 * chunk per row. */
static VATTR void FN(dwf_task)(void *ctx, int64_t t)
{
    const dw_job *jb = ctx;
    const sx__dw_geom *g = jb->g;
    int64_t nbl;
    const int64_t c0 = FN(dw_chunk)(jb, t, &nbl), i0 = t / jb->nch * jb->ipt;
    const int64_t i1 = g->n - i0 < jb->ipt ? g->n : i0 + jb->ipt, re = jb->wr * VL, ne = jb->e;
    _Alignas(64) T ring[DW_RING_ELEMS];
    DW_XT xt[DW_MAX_VB];
    int64_t tag[DW_MAX_R];
    const T *rows[DW_MAX_R];
    const bool k3 = g->kw == 3 && g->dw == 1;
    FN(dw_tables)(jb, c0, nbl, xt);
    for (int64_t img = i0; img < i1; img++) {
        for (int64_t s = 0; s < jb->r; s++)
            tag[s] = -1 - s; /* no padded row (distinct values: no memset either) */
        const T *xi = (const T *)jb->in0 + img * g->h * g->w * g->c + (jb->grouped ? 0 : c0);
        T *yi = (T *)jb->out + img * g->oh * g->ow * g->f + c0;
        for (int64_t oy = 0; oy < g->oh; oy++) {
            FN(dw_rows)(jb, xi, c0, nbl, oy, xt, ring, tag, rows);
            for (int64_t b = 0; b < nbl; b++) {
                const VMASK m = V_MASK_N(g->f - c0 - b * VL);
                const T *k = (const T *)jb->in1 + c0 + b * VL;
                T *yr = yi + oy * g->ow * g->f + b * VL;
                const int64_t bo = b * ne * re;
                if (k3 && g->sw == 1)
                    FN(dwf_row)(g, rows, bo, ne, re, k, m, yr, 3, 1, 1);
                else if (k3 && g->sw == 2)
                    FN(dwf_row)(g, rows, bo, ne, re, k, m, yr, 3, 2, 1);
                else
                    FN(dwf_row)(g, rows, bo, ne, re, k, m, yr, 0, 1, 1);
            }
        }
    }
}

/* ---------------------------------------------------------------- backward-input */

/* Add P pixels of dy (from dyp, pixel stride dys; grouped: expanded through xt) times the taps
 * (k: tap stride kts) into the ring rows of padded dx (from column off), taps in order (ky,
 * then kx, then the pixels). KW as in dwf_tile. */
DW_INLINE void FN(dwi_tile)(const sx__dw_geom *g, T *const *rows, int64_t off, const T *k,
                            int64_t kts, VMASK m, const T *dyp, int64_t dys, const DW_XT *xt,
                            int64_t e, const int P, const int KW, const int SW, const int DW)
{
    V dv[DWI_P];
#pragma GCC unroll 8
    for (int p = 0; p < P; p++)
        dv[p] = xt != NULL ? FN(dw_expand)(dyp + p * dys, xt, e, m) : V_MLOAD(m, dyp + p * dys);
    for (int64_t ky = 0; ky < g->kh; ky++) {
        T *r = rows[ky] + off;
        const T *kr = k + ky * g->kw * kts;
        if (KW > 0) {
            V acc[(DWI_P - 1) * 2 + 3 * 2 + 1];
            const int span = (P - 1) * SW + (KW - 1) * DW + 1;
#pragma GCC unroll 32
            for (int i = 0; i < span; i++)
                acc[i] = V_LOADA(r + i * VL);
#pragma GCC unroll 4
            for (int kx = 0; kx < KW; kx++) {
                const V kv = V_MLOAD(m, kr + kx * kts);
#pragma GCC unroll 8
                for (int p = 0; p < P; p++)
                    acc[p * SW + kx * DW] = V_FMA(dv[p], kv, acc[p * SW + kx * DW]);
            }
#pragma GCC unroll 32
            for (int i = 0; i < span; i++)
                V_STOREA(r + i * VL, acc[i]);
        } else {
            for (int64_t kx = 0; kx < g->kw; kx++) {
                const V kv = V_MLOAD(m, kr + kx * kts);
                T *rx = r + kx * g->dw * VL;
#pragma GCC unroll 8
                for (int p = 0; p < P; p++) {
                    T *q = rx + p * g->sw * VL;
                    V_STOREA(q, V_FMA(dv[p], kv, V_LOADA(q)));
                }
            }
        }
    }
}

/* One output row of dy (dyr) of one block into its ring rows (the block's at boff): tiles of
 * DWI_P pixels, then 4, 2, 1. */
DW_INLINE void FN(dwi_row)(const sx__dw_geom *g, T *const *rows, int64_t boff, const T *k,
                           int64_t kts, VMASK m, const T *dyr, const DW_XT *xt, int64_t e,
                           const int KW, const int SW, const int DW)
{
    const int64_t ow = g->ow, cs = (KW > 0 ? SW : g->sw) * VL, f = g->f;
    int64_t ox = 0;
    for (; ox + DWI_P <= ow; ox += DWI_P)
        FN(dwi_tile)(g, rows, boff + ox * cs, k, kts, m, dyr + ox * f, f, xt, e, DWI_P, KW, SW, DW);
    if (ox + 4 <= ow) {
        FN(dwi_tile)(g, rows, boff + ox * cs, k, kts, m, dyr + ox * f, f, xt, e, 4, KW, SW, DW);
        ox += 4;
    }
    if (ox + 2 <= ow) {
        FN(dwi_tile)(g, rows, boff + ox * cs, k, kts, m, dyr + ox * f, f, xt, e, 2, KW, SW, DW);
        ox += 2;
    }
    if (ox < ow)
        FN(dwi_tile)(g, rows, boff + ox * cs, k, kts, m, dyr + ox * f, f, xt, e, 1, KW, SW, DW);
}

/* The grouped kinds' taps of backward-input for the chunk's nbl blocks of channels from c0:
 * kt[((b * fg + fi) * taps + tap) * VL + l] = k[tap, ch % cg, ch / cg * fg + fi] (ch = c0 + b *
 * VL + l; 0 past c), the tap that multiplies dy's filter fi of channel ch's group. */
static VATTR void FN(dwi_ktaps)(const dw_job *jb, int64_t c0, int64_t nbl, T *kt)
{
    const sx__dw_geom *g = jb->g;
    const T *k = jb->in0;
    const int64_t taps = g->kh * g->kw;
    for (int64_t b = 0; b < nbl; b++)
        for (int64_t l = 0; l < VL; l++) {
            const int64_t ch = c0 + b * VL + l;
            const int64_t o = ch < g->c ? ch % g->cg * g->f + ch / g->cg * g->fg : -1;
            for (int64_t fi = 0; fi < g->fg; fi++)
                for (int64_t tap = 0; tap < taps; tap++)
                    kt[((b * g->fg + fi) * taps + tap) * VL + l] =
                        o >= 0 ? k[tap * g->cg * g->f + o + fi] : 0;
        }
}

/* One output row oy of dy into the ring rows (rows) of every block of the chunk; grouped:
 * every filter of the channels' groups in turn (fi ascending). */
DW_INLINE void FN(dwi_oy)(const dw_job *jb, T *const *rows, int64_t c0, int64_t nbl, const T *dyi,
                          const T *kt, const DW_XT *xt, int64_t oy)
{
    const sx__dw_geom *g = jb->g;
    const int64_t re = jb->wr * VL, taps = g->kh * g->kw;
    const bool k3 = g->kw == 3 && g->dw == 1;
    for (int64_t b = 0; b < nbl; b++) {
        const VMASK m = V_MASK_N(g->c - c0 - b * VL);
        const int64_t ne = jb->grouped ? jb->e : 1;
        for (int64_t e = 0; e < ne; e++) {
            const T *k =
                jb->grouped ? kt + (b * ne + e) * taps * VL : (const T *)jb->in0 + c0 + b * VL;
            const int64_t kts = jb->grouped ? VL : g->c;
            const DW_XT *x = jb->grouped ? &xt[b] : NULL;
            const T *dyr = dyi + oy * g->ow * g->f + (jb->grouped ? 0 : b * VL);
            if (k3 && g->sw == 1)
                FN(dwi_row)(g, rows, b * re, k, kts, m, dyr, x, e, 3, 1, 1);
            else if (k3 && g->sw == 2)
                FN(dwi_row)(g, rows, b * re, k, kts, m, dyr, x, e, 3, 2, 1);
            else
                FN(dwi_row)(g, rows, b * re, k, kts, m, dyr, x, e, 0, 1, 1);
        }
    }
}

/* Padded dx rows [a, b) are complete: copy those inside dx to the image at dxi (the chunk's nbl
 * blocks, columns from pl) and zero their ring rows for reuse. */
DW_INLINE void FN(dwi_flush)(const dw_job *jb, T *ring, T *dxi, int64_t c0, int64_t nbl, int64_t a,
                             int64_t b)
{
    const sx__dw_geom *g = jb->g;
    const int64_t re = jb->wr * VL;
    for (int64_t pr = a; pr < b; pr++) {
        T *row = ring + pr % jb->r * jb->cpt * re;
        const int64_t iy = pr - g->pt;
        if (iy >= 0 && iy < g->h) {
            T *d = dxi + iy * g->w * g->c;
            for (int64_t ix = 0; ix < g->w; ix++)
                for (int64_t bl = 0; bl < nbl; bl++)
                    V_MSTORE(d + ix * g->c + bl * VL, V_MASK_N(g->c - c0 - bl * VL),
                             V_LOADA(row + bl * re + (g->pl + ix) * VL));
        }
        memset(row, 0, (size_t)(nbl * re) * sizeof(T));
    }
}

/* Task t: chunk t % nch of images [t / nch * ipt, + ipt), row by row, every block of the chunk
 * per row. Padded dx rows below (oy + 1) * sh get nothing from output rows after oy. */
static VATTR void FN(dwi_task)(void *ctx, int64_t t)
{
    const dw_job *jb = ctx;
    const sx__dw_geom *g = jb->g;
    int64_t nbl;
    const int64_t c0 = FN(dw_chunk)(jb, t, &nbl), i0 = t / jb->nch * jb->ipt;
    const int64_t i1 = g->n - i0 < jb->ipt ? g->n : i0 + jb->ipt, re = jb->wr * VL;
    _Alignas(64) T ring[DW_RING_ELEMS];
    _Alignas(64) T kt[DW_ACC_BYTES / sizeof(T)];
    DW_XT xt[DW_MAX_VB];
    T *rows[DW_MAX_R];
    const int64_t last = (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    memset(ring, 0, (size_t)(jb->r * jb->cpt * re) * sizeof(T));
    if (jb->grouped)
        FN(dwi_ktaps)(jb, c0, nbl, kt);
    FN(dw_tables)(jb, c0, nbl, xt);
    /* grouped: the prefetch takes every filter of a pixel (the groups of the chunk's channels) */
    const int64_t pfb = jb->grouped ? (g->f + VL - 1) / VL : nbl;
    for (int64_t img = i0; img < i1; img++) {
        const T *dyi = (const T *)jb->in1 + img * g->oh * g->ow * g->f + (jb->grouped ? 0 : c0);
        T *dxi = (T *)jb->out + img * g->h * g->w * g->c + c0;
        int64_t done = 0;
        for (int64_t oy = 0; oy < g->oh; oy++) {
            for (int64_t ky = 0; ky < g->kh; ky++)
                rows[ky] = ring + (oy * g->sh + ky * g->dh) % jb->r * jb->cpt * re;
            if (oy + DW_PF < g->oh)
                FN(dw_prefetch)(dyi + (oy + DW_PF) * g->ow * g->f, g->ow, g->f, pfb);
            FN(dwi_oy)(jb, rows, c0, nbl, dyi, kt, xt, oy);
            FN(dwi_flush)(jb, ring, dxi, c0, nbl, done, (oy + 1) * g->sh);
            done = (oy + 1) * g->sh;
        }
        FN(dwi_flush)(jb, ring, dxi, c0, nbl, done, g->pt + g->h);
        /* rows past pt + h took padding's share only: clear them for the next image */
        FN(dwi_flush)(jb, ring, dxi, c0, nbl, done > g->pt + g->h ? done : g->pt + g->h, last);
    }
}

/* ---------------------------------------------------------------- backward-kernel */

/* dk's 3x3 taps of the chunk (dilation 1, stride SW): per block, expansion and output row, its
 * 9 accumulators come from acc into registers (named: an array of them is kept on the stack),
 * take the row's pixels in order, and go back. */
DW_INLINE void FN(dwk_run3)(const dw_job *jb, int64_t c0, int64_t nbl, const DW_XT *xt, T *ring,
                            T *acc, const int SW)
{
    const sx__dw_geom *g = jb->g;
    int64_t tag[DW_MAX_R];
    const T *rows[DW_MAX_R];
    const int64_t re = jb->wr * VL, ne = jb->e, f = g->f;
    for (int64_t img = 0; img < g->n; img++) {
        for (int64_t s = 0; s < jb->r; s++)
            tag[s] = -1 - s; /* no padded row (distinct values: no memset either) */
        const T *xi = (const T *)jb->in0 + img * g->h * g->w * g->c + (jb->grouped ? 0 : c0);
        const T *dyi = (const T *)jb->in1 + img * g->oh * g->ow * f + c0;
        for (int64_t oy = 0; oy < g->oh; oy++) {
            if (oy + DW_PF < g->oh)
                FN(dw_prefetch)(dyi + (oy + DW_PF) * g->ow * f, g->ow, f, nbl);
            FN(dw_rows)(jb, xi, c0, nbl, oy, xt, ring, tag, rows);
            for (int64_t vb = 0; vb < nbl * ne; vb++) {
                const int64_t b = vb / ne;
                const VMASK m = V_MASK_N(f - c0 - b * VL);
                const T *r0 = rows[0] + vb * re, *r1 = rows[1] + vb * re, *r2 = rows[2] + vb * re;
                const T *dyr = dyi + oy * g->ow * f + b * VL;
                T *ab = acc + vb * 9 * VL;
                V a0 = V_LOADA(ab), a1 = V_LOADA(ab + VL), a2 = V_LOADA(ab + 2 * VL);
                V a3 = V_LOADA(ab + 3 * VL), a4 = V_LOADA(ab + 4 * VL), a5 = V_LOADA(ab + 5 * VL);
                V a6 = V_LOADA(ab + 6 * VL), a7 = V_LOADA(ab + 7 * VL), a8 = V_LOADA(ab + 8 * VL);
                for (int64_t ox = 0; ox < g->ow; ox++) {
                    const V dv = V_MLOAD(m, dyr + ox * f);
                    const int64_t o = ox * SW * VL;
                    a0 = V_FMA(V_LOADA(r0 + o), dv, a0);
                    a1 = V_FMA(V_LOADA(r0 + o + VL), dv, a1);
                    a2 = V_FMA(V_LOADA(r0 + o + 2 * VL), dv, a2);
                    a3 = V_FMA(V_LOADA(r1 + o), dv, a3);
                    a4 = V_FMA(V_LOADA(r1 + o + VL), dv, a4);
                    a5 = V_FMA(V_LOADA(r1 + o + 2 * VL), dv, a5);
                    a6 = V_FMA(V_LOADA(r2 + o), dv, a6);
                    a7 = V_FMA(V_LOADA(r2 + o + VL), dv, a7);
                    a8 = V_FMA(V_LOADA(r2 + o + 2 * VL), dv, a8);
                }
                V_STOREA(ab, a0), V_STOREA(ab + VL, a1), V_STOREA(ab + 2 * VL, a2);
                V_STOREA(ab + 3 * VL, a3), V_STOREA(ab + 4 * VL, a4), V_STOREA(ab + 5 * VL, a5);
                V_STOREA(ab + 6 * VL, a6), V_STOREA(ab + 7 * VL, a7), V_STOREA(ab + 8 * VL, a8);
            }
        }
    }
}

/* Any window: the same sums, straight in acc. */
DW_INLINE void FN(dwk_rung)(const dw_job *jb, int64_t c0, int64_t nbl, const DW_XT *xt, T *ring,
                            T *acc)
{
    const sx__dw_geom *g = jb->g;
    int64_t tag[DW_MAX_R];
    const T *rows[DW_MAX_R];
    const int64_t kh = g->kh, kw = g->kw, re = jb->wr * VL, ne = jb->e, f = g->f;
    for (int64_t img = 0; img < g->n; img++) {
        for (int64_t s = 0; s < jb->r; s++)
            tag[s] = -1 - s;
        const T *xi = (const T *)jb->in0 + img * g->h * g->w * g->c + (jb->grouped ? 0 : c0);
        const T *dyi = (const T *)jb->in1 + img * g->oh * g->ow * f + c0;
        for (int64_t oy = 0; oy < g->oh; oy++) {
            if (oy + DW_PF < g->oh)
                FN(dw_prefetch)(dyi + (oy + DW_PF) * g->ow * f, g->ow, f, nbl);
            FN(dw_rows)(jb, xi, c0, nbl, oy, xt, ring, tag, rows);
            for (int64_t vb = 0; vb < nbl * ne; vb++) {
                const int64_t b = vb / ne;
                const VMASK m = V_MASK_N(f - c0 - b * VL);
                const T *dyr = dyi + oy * g->ow * f + b * VL;
                T *ab = acc + vb * kh * kw * VL;
                for (int64_t ox = 0; ox < g->ow; ox++) {
                    const V dv = V_MLOAD(m, dyr + ox * f);
                    for (int64_t ky = 0; ky < kh; ky++) {
                        const T *r = rows[ky] + vb * re + ox * g->sw * VL;
                        for (int64_t kx = 0; kx < kw; kx++) {
                            T *q = ab + (ky * kw + kx) * VL;
                            V_STOREA(q, V_FMA(V_LOADA(r + kx * g->dw * VL), dv, V_LOADA(q)));
                        }
                    }
                }
            }
        }
    }
}

/* Task t: chunk t over every image; dk (kh, kw, cg, f) of the chunk from its accumulators
 * (expansion e of a block: the groups' channel e). */
static VATTR void FN(dwk_task)(void *ctx, int64_t t)
{
    const dw_job *jb = ctx;
    const sx__dw_geom *g = jb->g;
    int64_t nbl;
    const int64_t c0 = FN(dw_chunk)(jb, t, &nbl), taps = g->kh * g->kw, ne = jb->e;
    _Alignas(64) T ring[DW_RING_ELEMS];
    _Alignas(64) T acc[DW_ACC_BYTES / sizeof(T)];
    DW_XT xt[DW_MAX_VB];
    FN(dw_tables)(jb, c0, nbl, xt);
    memset(acc, 0, (size_t)(nbl * ne * taps * VL) * sizeof(T));
    const bool k33 = g->kh == 3 && g->kw == 3 && g->dh == 1 && g->dw == 1;
    if (k33 && g->sw == 1)
        FN(dwk_run3)(jb, c0, nbl, xt, ring, acc, 1);
    else if (k33 && g->sw == 2)
        FN(dwk_run3)(jb, c0, nbl, xt, ring, acc, 2);
    else
        FN(dwk_rung)(jb, c0, nbl, xt, ring, acc);
    T *dk = (T *)jb->out + c0;
    for (int64_t b = 0; b < nbl; b++)
        for (int64_t e = 0; e < ne; e++)
            for (int64_t i = 0; i < taps; i++)
                V_MSTORE(dk + (i * g->cg + e) * g->f + b * VL, V_MASK_N(g->f - c0 - b * VL),
                         V_LOADA(acc + ((b * ne + e) * taps + i) * VL));
}

#undef DW_XT
#undef DWF_P
#undef DWI_P
#undef DW_RING_ELEMS
#undef DW_INLINE
#undef FN
#undef DW_CAT
#undef DW_CAT_
