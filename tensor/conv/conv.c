/* conv.c: 2-d convolution over NHWC images, forward and both backward passes.
 * The work is cut into units (whole images, or bands of rows of one image) whose scratch stays
 * in L2; units run in parallel, one thread each, and backward-kernel adds them in a fixed
 * number of groups summed in a fixed order, so the bits never depend on the thread count.
 * Three implementations of a unit. The direct kernels (AVX2, AVX-512) keep a tile of results in
 * vector registers and read a zero-padded copy of the unit's band, so no tap tests a border:
 * forward and backward-kernel (reading x in place when no window leaves it), and
 * backward-input: with stride 1 as the forward kernel over dy with the rotated kernel, or a
 * gather over the filters when c is small; strided, when c fills a vector, by phases (each
 * phase of dx a stride-1 correlation of dy with a sub-kernel, on the forward tiles). Winograd's
 * F(2x2, 5x5) and F(4x4, 3x3) (AVX2, AVX-512) serve 5x5 and 3x3 kernels at stride 1 with enough
 * channels: 2.8 and 4 times fewer multiplies, on the same padded bands (below). The GEMM path
 * builds the unit's im2col block (kh runs of kw * c contiguous elements per output pixel) and calls
 * sx__gemm: y = col @ k, dk += col^T @ dy, dcol = dy @ k^T then col2im. It serves the rest (other
 * CPUs, strided backward-input with few channels, very large kdim). These serve the original
 * parameter set (one group, no dilation, VALID or SAME_UPPER) and explicit pads smaller than the
 * window (dense_explicit: PyTorch's padded convolutions, stride 2 included); every public function
 * hands other parameters to tensor/conv/conv_general.c before touching them (which sends the
 * geometries computed here back). */
#include "conv_impl.h"
#include "tensor_impl.h"

#include <limits.h>
#include <stdatomic.h>
#include <unistd.h>

#include "simd.h"

/* Bytes of one unit's scratch (im2col block or padded band) that the plan aims at: it stays in
 * the 1 MB L2 of the machine this was tuned on, with room for the GEMM's packed panels. */
#define CONV_UNIT_BYTES ((size_t)768 << 10)
/* The smallest GEMM-path unit holds at least this many im2col rows (whole output rows), so that
 * even the minimum workspace runs GEMMs of a useful height. */
#define CONV_MIN_BLOCK_ROWS 64
/* When the direct kernels run instead of im2col + GEMM (measured on Zen 5, one thread, against
 * this GEMM at 135-160 GFLOP/s on conv shapes): forward (about 195 GFLOP/s at any kdim) and
 * backward-kernel (about 205) while one filter tile of k, kdim x 32 floats, stays in L2;
 * backward-input with stride 1 as the forward kernel on a rotated k when c fills a vector,
 * else by the gather kernel (load-bound, 100-135) only for small kdim, where the GEMM is
 * memory-bound (the GEMM path wins from kdim = 200 on). */
#define CONV_DIRECT_KDIM 2048
#define CONV_DIRECT_BWDI_KDIM 128
/* Backward-kernel partial sums: units are summed in at most this many groups (one thread each,
 * a fixed assignment of units to groups; an even number when more than one, so that two
 * threads share them evenly: 7 groups kept one thread busy for 4 while the other ran 3), then
 * the groups in order: the same bits for any thread count. */
#define CONV_GROUPS 8
/* The partial sums of backward-kernel take at most this many bytes (at least one partial, so
 * that two threads can share the work). */
#define CONV_PART_BYTES ((size_t)4 << 20)
/* Scratch slots (one per thread) the full workspace provides at most. */
#define CONV_MAX_SLOTS 16
/* Multiply-adds below which a call runs on one thread (a parallel region costs more). */
#define CONV_PAR_MIN_MACS ((int64_t)1 << 21)
/* Direct backward-input's register tile: CONV_IP elements (the unroll pragmas in
 * conv_direct_tmpl.h match); the other tiles are sized per instruction set (conv_vec.h). */
#define CONV_IP 8
/* Elements of the prepared kernel (flipped or rotated) at the start of a direct backward-input
 * slot, rounded up so that the band after it stays aligned. */
#define CONV_KF_ELEMS(g) (((g)->kdim * (g)->f + 15) / 16 * 16)
/* Winograd F(2x2, 5x5) (Lavin and Gray, "Fast algorithms for convolutional neural networks",
 * 2016) with the interpolation points 0, 1, -1, 2, -1/2 and infinity (the matrices are in
 * conv_wino_tmpl.h; these points round 2-3 times less than 0, +-1, +-2): a 2x2 block of outputs is
 * A^T [(G k G^T) . (B^T d B)] A over the 6x6 input tile d. A unit's tiles are transformed in
 * blocks, the products summed over the input channels as 36 GEMMs (one per point pair) and
 * transformed back: 36 multiplies per 4 outputs instead of 100. Backward-input is the forward
 * pass over dy with the rotated kernel; backward-kernel sums (A dy A^T) . (B^T x B) over the
 * tiles (36 GEMMs again) into one partial sum per group, turned into taps (G^T . G) at the end.
 * It runs for 5x5 kernels at stride 1 when its GEMMs sum over at least CONV_WINO_MIN_IN
 * channels and produce at least CONV_WINO_MIN_OUT (with fewer, the transforms cost more than
 * the multiplies saved; measured), and when the workspace holds the transformed kernel
 * (forward, backward-input) or the partial sums (backward-kernel). Rounding errors are a few
 * times those of the direct sums, relative to the largest terms of a tile (see the tests).
 * Blocks hold at most CONV_WINO_TB tiles, for backward-kernel CONV_WINO_TBK (longer sums
 * between the updates of its partial); images of fewer tiles run several to a unit, and a
 * block spans them (resnet20's 7x7x64 backward-kernel updated its 36 * 64 * 64 partial after
 * every 4 tiles: 1.80 -> 1.24 ms per 128 images; forward and backward-input keep their bits,
 * each tile's sums being the same in any block).
 * 3x3 kernels run F(4x4, 3x3) on the same points, hence the same 6x6 tiles and input transform
 * B^T (only the tile stride differs: 4 instead of 2) and the same per-unit pipeline, with 4x4
 * blocks of outputs and 3x3 kernels in the other transforms: 36 multiplies per 16 outputs
 * instead of 144. Its rounding errors measure smaller than F(2x2, 5x5)'s (at most 12 rounding
 * units on the test shapes' scale against 45; RMS relative difference from the direct sums
 * 0.9-1.2e-6 in f32 against 1.5-4e-6), so the larger tile was kept over F(2x2, 3x3). Measured
 * against the direct kernels (one thread, 32x32 images): it wins from 8 channels summed over
 * and 4 produced (with 4 summed over it loses by 10-30%), on images of at least 25 output
 * pixels (3x3 or 2x2 images lose by 20-70%: a unit is one image, so its GEMMs have one tile
 * per row), for backward-kernel 36 (5x5 images lose by 15%: each unit updates the whole
 * transformed partial for four tiles). */
#define CONV_WINO_MIN_IN 16
#define CONV_WINO_MIN_OUT 8
#define CONV_WINO3_MIN_IN 8
#define CONV_WINO3_MIN_OUT 4
#define CONV_WINO3_MIN_PX 25
#define CONV_WINO3_MIN_PX_K 36
#define CONV_WINO_TB 16
#define CONV_WINO_TBK 32
/* Slots and partial sums are aligned to this; the sizes include the slack. */
#define CONV_WS_ALIGN 64
/* Outputs of at least this many bytes are written past the caches (stream_out). */
#define CONV_STREAM_BYTES ((size_t)4 << 20)

/* Geometry of one convolution. */
typedef struct conv_geom {
    int64_t n, h, w, c; /* x (n,h,w,c) */
    int64_t kh, kw, f;  /* k (kh,kw,c,f) */
    int64_t oh, ow;     /* y (n,oh,ow,f) */
    int64_t sh, sw;     /* strides */
    int64_t pt, pl;     /* zero rows above / zero columns left of x */
    int64_t kdim;       /* kh*kw*c: columns of the im2col matrix */
    int64_t wp;         /* columns of the padded x band: (ow - 1) * sw + kw */
    int64_t wq;         /* columns of the padded dy band (stride 1): w + kw - 1 */
    bool xcol;          /* the im2col matrix is x itself (1x1 stride 1, or a window = image) */
} conv_geom;

typedef enum { CONV_FWD, CONV_BWD_IN, CONV_BWD_K } conv_kind;
typedef enum { PATH_XCOL, PATH_DIRECT, PATH_GEMM, PATH_WINO } conv_path;

/* How one call cuts its work. A unit is `ipu` whole images (bands == 1) or one band of `rpu`
 * rows of one image (bands per image > 1); rows are output rows, or for the direct
 * backward-input input rows. The workspace holds pre_bytes of data shared by the units (the
 * Winograd kernel), then one slot of slot_bytes per thread, then backward-kernel's partial sums
 * of part_bytes: groups - 1 of them (group 0 sums into dk), or with Winograd one per group.
 * tb: Winograd tiles per block (a block may span the images of a unit). */
typedef struct conv_plan {
    conv_path path;
    int64_t ipu, rpu, bands, units, groups, slots, tb;
    size_t pre_bytes, slot_bytes, part_bytes;
    char *ws; /* aligned start of the workspace */
} conv_plan;

/* Outputs per tile side: 2 (F(2x2, 5x5)) or 4 (F(4x4, 3x3)); tiles are 6x6 either way. */
static inline int64_t wino_m(const conv_geom *g)
{
    return g->kh == 3 ? 4 : 2;
}

/* The forward pass a Winograd call computes: the forward itself (backward-kernel: its tiles),
 * or for backward-input the forward pass over dy, padded by kh - 1 - pt rows and kw - 1 - pl
 * columns before, with the rotated kernel (channels f, filters c, output dx). wp: the padded
 * band's columns, m per tile column plus 6 - m. */
static conv_geom wino_geom(const conv_geom *g, bool bwdi)
{
    conv_geom r = *g;
    if (bwdi) {
        r.h = g->oh, r.w = g->ow, r.c = g->f, r.f = g->c;
        r.oh = g->h, r.ow = g->w;
        r.pt = g->kh - 1 - g->pt, r.pl = g->kw - 1 - g->pl;
    }
    const int64_t m = wino_m(g);
    r.wp = (r.ow + m - 1) / m * m + 6 - m;
    return r;
}

/* Elements of a Winograd slot's padded band for units of at most rpu output rows (whole tile
 * rows; rounded up to 16, so that the blocks after it stay aligned). */
static int64_t wino_band_elems(const conv_geom *gf, int64_t rpu)
{
    const int64_t m = wino_m(gf);
    return (((rpu + m - 1) / m * m + 6 - m) * gf->wp * gf->c + 15) / 16 * 16;
}

/* The distance in elements of esz bytes between the 36 matrices (one per point pair) of n
 * elements each that the Winograd data holds: whole cache lines, and an odd number of them, so
 * that the 36 elements of one tile (read or written together) fall into different cache sets
 * (a power-of-two distance such as 16 tiles of 64 floats would put them all into one). */
static int64_t wino_ld(int64_t n, size_t esz)
{
    const int64_t line = 64 / (int64_t)esz;
    const int64_t e = (n + line - 1) / line * line;
    return e / line % 2 == 0 ? e + line : e;
}

/* Elements of the transformed kernel (36, c, f), or of one transformed partial sum of dk. */
static int64_t wino_u_elems(const conv_geom *g, size_t esz)
{
    return 36 * wino_ld(g->c * g->f, esz);
}

/* Does every window lie inside x (no padding read)? Then the direct forward and
 * backward-kernel read x in place instead of a padded copy of the band. */
static inline bool conv_in_place(const conv_geom *g)
{
    return g->pt == 0 && g->pl == 0 && (g->oh - 1) * g->sh + g->kh <= g->h &&
           (g->ow - 1) * g->sw + g->kw <= g->w;
}

/* Strided backward-input by phases (polyphase): the input rows iy with (iy + pt) % sh == r
 * receive the kernel rows r, r + sh, r + 2 sh, ... (phase_taps(kh, sh, r) of them) from
 * consecutive rows of dy, and likewise the columns: each of the sh * sw phases of dx is a
 * stride-1 correlation of dy with a sub-kernel (3x3 stride 2: 2x2, 2x1, 1x2 and 1x1 taps), run
 * by the forward tiles; a phase without taps is zero. Every element of dx is written once. */
static inline int64_t phase_taps(int64_t k, int64_t s, int64_t r)
{
    return r < k ? (k - r + s - 1) / s : 0;
}

/* Rows of the padded dy band (columns: g->wq) that r consecutive dx rows read, at most: the dy
 * rows of the band plus phase_taps(kh, sh, 0) - 1 zero rows above. */
static inline int64_t phase_band_rows(const conv_geom *g, int64_t r)
{
    const int64_t a = (r - 1) / g->sh + 2, b = (g->h - 1 + g->pt) / g->sh + 1;
    return (a < b ? a : b) + phase_taps(g->kh, g->sh, 0) - 1;
}

/* Can the phases read dy in place (no padded row or column: kh <= sh, kw <= sw and every dy
 * row and column the phases reach exists)? */
static inline bool phase_in_place(const conv_geom *g)
{
    return g->kh <= g->sh && g->kw <= g->sw && g->wq == g->ow &&
           (g->h - 1 + g->pt) / g->sh + 1 == g->oh;
}

/* One call: the inputs (forward: x, k; backward-input: k, dy; backward-kernel: x, dy) and the
 * output. par: the unit functions may split their loops over threads (the units run one at a
 * time). */
typedef struct conv_epi conv_epi;
typedef struct conv_job {
    const conv_geom *g;
    const conv_plan *pl;
    const void *in0, *in1;
    void *out;
    sx_dtype dt;
    bool par;
    const conv_epi *epi; /* forward: the epilogue run on each unit's rows, or NULL */
    bool stream;         /* Winograd writes the output's full vectors past the caches */
} conv_job;

/* The work of one unit, on `slot`. `fresh`: the slot does not yet hold the zeros (padding) of a
 * full unit's layout from an earlier unit of this call; the function returns whether it does
 * now. acc and first: backward-kernel's partial sum and whether this unit starts it. */
typedef bool (*unit_fn)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                        bool first);

#define T float
#define SFX f32
#include "conv_im2col_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "conv_im2col_tmpl.h"
#undef T
#undef SFX

/* The vector kernels (direct, Winograd), one instance per instruction set and dtype. */
#if SIMD_HAVE_X86
#define CONV_VEC_ISAS 1
#define SIMD_ISA SIMD_AVX2
#define SIMD_BITS 32
#define T float
#define SFX f32_avx2
#include "conv_vec.h"
#define SIMD_ISA SIMD_AVX2
#define SIMD_BITS 64
#define T double
#define SFX f64_avx2
#include "conv_vec.h"
#define SIMD_ISA SIMD_AVX512
#define SIMD_BITS 32
#define T float
#define SFX f32_avx512
#include "conv_vec.h"
#define SIMD_ISA SIMD_AVX512
#define SIMD_BITS 64
#define T double
#define SFX f64_avx512
#include "conv_vec.h"
#endif
#if SIMD_HAVE_NEON
#define CONV_VEC_NEON 1
#define SIMD_ISA SIMD_NEON
#define SIMD_BITS 32
#define T float
#define SFX f32_neon
#include "conv_vec.h"
#define SIMD_ISA SIMD_NEON
#define SIMD_BITS 64
#define T double
#define SFX f64_neon
#include "conv_vec.h"
#endif

/* One instruction set's vector kernels for one dtype. */
typedef struct conv_vec_kernels {
    unit_fn direct[3], wino[3]; /* by conv_kind */
    void (*wino_prep)(const conv_job *jb, bool bwdi);
    void (*wino_finish)(const conv_job *jb, const void *parts, int64_t groups, size_t pstride);
} conv_vec_kernels;

#define CONV_VEC_SET(s)                                                                            \
    {                                                                                              \
        {direct_fwd_unit_##s, direct_bwdi_unit_##s, direct_bwdk_unit_##s},                         \
            {wino_fwd_unit_##s, wino_bwdi_unit_##s, wino_bwdk_unit_##s}, wino_prep_##s,            \
            wino_finish_##s                                                                        \
    }

/* The vector kernels of this process's instruction set (sx__isa: this CPU, capped by SX_ISA)
 * for dtype dt, or NULL where there are none: at the baseline every unit takes the im2col +
 * GEMM path. */
static const conv_vec_kernels *vec_kernels(sx_dtype dt)
{
    const int isa = sx__isa(), d = dt == SX_F64;
#ifdef CONV_VEC_ISAS
    static const conv_vec_kernels sets[2][2] = {
        {CONV_VEC_SET(f32_avx2), CONV_VEC_SET(f64_avx2)},
        {CONV_VEC_SET(f32_avx512), CONV_VEC_SET(f64_avx512)},
    };
    if (isa == SX__ISA_AVX2 || isa == SX__ISA_AVX512)
        return &sets[isa == SX__ISA_AVX512][d];
#endif
#ifdef CONV_VEC_NEON
    static const conv_vec_kernels neon[2] = {CONV_VEC_SET(f32_neon), CONV_VEC_SET(f64_neon)};
    if (isa == SX__ISA_NEON)
        return &neon[d];
#endif
    (void)d;
    return NULL;
}

static bool have_direct(void)
{
    return vec_kernels(SX_F32) != NULL;
}

/* Bytes of one vector of the vector kernels. */
static size_t vec_bytes(void)
{
    const int isa = sx__isa();
    return isa == SX__ISA_AVX512 ? 64 : isa == SX__ISA_NEON ? 16 : 32;
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

/* Does conv.c run these parameters (x of shape xs, k of shape ks)? */
static bool conv_here(const sx_conv2d_params *p, const int64_t *xs, const int64_t *ks)
{
    return sx__conv_legacy(p) || dense_explicit(p, xs, ks);
}

/* The same for tensors x (n,h,w,c) and k (kh,kw,c,f), either possibly NULL or of another
 * rank (then only the original parameter set runs here). */
static bool conv_here_t(const sx_conv2d_params *p, const sx_tensor *x, const sx_tensor *k)
{
    return sx__conv_legacy(p) || (x != NULL && k != NULL && x->rank == 4 && k->rank == 4 &&
                                  dense_explicit(p, x->shape, k->shape));
}

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
    if (p->padding != SX_PAD_VALID && p->padding != SX_PAD_SAME &&
        !(p->padding == SX_PAD_EXPLICIT && dense_explicit(p, xs, ks)))
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

/* ---------------------------------------------------------------- planning */

/* a * b and a + b for sizes, saturating at SIZE_MAX. */
static size_t mul_sat(size_t a, size_t b)
{
    return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

static size_t add_sat(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static size_t align_up(size_t b)
{
    return add_sat(b, CONV_WS_ALIGN - 1) / CONV_WS_ALIGN * CONV_WS_ALIGN;
}

/* Nothing to compute (an empty input, output, window sum or filter set): the kernels only
 * write zeros, and need no scratch. */
static bool conv_empty(const conv_geom *g)
{
    return g->n == 0 || g->oh == 0 || g->ow == 0 || g->kdim == 0 || g->f == 0 || g->h == 0 ||
           g->w == 0;
}

/* The implementation of a kernel for elements of esz bytes. */
static conv_path path_of(const conv_geom *g, conv_kind kind, size_t esz)
{
    if (g->xcol || conv_empty(g))
        return PATH_XCOL;
    if (!have_direct())
        return PATH_GEMM;
    if (kind != CONV_BWD_IN)
        return g->kdim <= CONV_DIRECT_KDIM ? PATH_DIRECT : PATH_GEMM;
    /* backward-input: the forward kernel on the rotated kernel (strided: on its phases' sub-
     * kernels) when the input channels fill a vector (its kdim is kh * kw * f), else with
     * stride 1 the gather for small kdim */
    if ((size_t)g->c * esz >= vec_bytes())
        return g->kh * g->kw * g->f <= CONV_DIRECT_KDIM ? PATH_DIRECT : PATH_GEMM;
    if (g->sh != 1 || g->sw != 1)
        return PATH_GEMM;
    return g->kdim <= CONV_DIRECT_BWDI_KDIM ? PATH_DIRECT : PATH_GEMM;
}

/* Does Winograd (F(2x2, 5x5) or F(4x4, 3x3)) run this kernel (given the workspace)? The
 * channels its GEMMs sum over (forward and backward-kernel: c; backward-input: f) and those they
 * produce must be many enough, and for 3x3 the pixels of the pass's output image (forward and
 * backward-kernel: y, backward-input: dx). */
static bool wino_applies(const conv_geom *g, conv_kind kind)
{
    const int64_t in = kind == CONV_BWD_IN ? g->f : g->c, out = kind == CONV_BWD_IN ? g->c : g->f;
    const bool k5 = g->kh == 5 && g->kw == 5, k3 = g->kh == 3 && g->kw == 3;
    if (g->xcol || conv_empty(g) || !have_direct() || g->sh != 1 || g->sw != 1 || !(k5 || k3))
        return false;
    if (k5)
        return in >= CONV_WINO_MIN_IN && out >= CONV_WINO_MIN_OUT;
    const int64_t px = kind == CONV_BWD_IN ? g->h * g->w : g->oh * g->ow;
    return in >= CONV_WINO3_MIN_IN && out >= CONV_WINO3_MIN_OUT &&
           px >= (kind == CONV_BWD_K ? CONV_WINO3_MIN_PX_K : CONV_WINO3_MIN_PX);
}

/* Bytes of one unit of `rows` rows (a band) or, with rows == 0, of `imgs` whole images: what
 * its slot stores, and with `touched` also the unit's other data that the kernel re-reads and
 * should find in cache (the dy band of the direct backward-kernel, read once per tap tile). */
static size_t unit_bytes(const conv_geom *g, conv_path path, conv_kind kind, size_t esz,
                         int64_t rows, int64_t imgs, bool touched)
{
    if (path == PATH_DIRECT) {
        if (rows == 0)
            rows = kind == CONV_BWD_IN ? g->h : g->oh;
        if (kind == CONV_BWD_IN) { /* the prepared kernel (a multiple of 64 bytes), the band */
            const int64_t br = g->sh == 1 && g->sw == 1 ? rows + g->kh - 1
                               : phase_in_place(g)      ? 0
                                                        : phase_band_rows(g, rows);
            return mul_sat(
                add_sat((size_t)CONV_KF_ELEMS(g), mul_sat((size_t)br, (size_t)(g->wq * g->f))),
                esz);
        }
        size_t b =
            mul_sat(mul_sat((size_t)((rows - 1) * g->sh + g->kh), (size_t)(g->wp * g->c)), esz);
        if (touched && kind == CONV_BWD_K)
            b = add_sat(b, mul_sat(mul_sat((size_t)rows, (size_t)(g->ow * g->f)), esz));
        return b;
    }
    size_t r = rows == 0 ? mul_sat((size_t)imgs, (size_t)g->oh) : (size_t)rows;
    return mul_sat(mul_sat(r, (size_t)g->ow), mul_sat((size_t)g->kdim, esz));
}

/* A unit fits when its slot fits the usable workspace and what it touches fits the cache
 * budget. */
static bool unit_fits(const conv_geom *g, conv_path path, conv_kind kind, size_t esz, int64_t rows,
                      int64_t imgs, size_t usable)
{
    return align_up(unit_bytes(g, path, kind, esz, rows, imgs, false)) <= usable &&
           unit_bytes(g, path, kind, esz, rows, imgs, true) <= CONV_UNIT_BYTES;
}

/* The cores, read once: glibc's sysconf opens, reads and closes a sysfs file on every call, and
 * each call plans its kernel (and checks the workspace: seven plans) with it, about 36 system
 * calls of serial time per convolution, long enough for the pool's workers to fall asleep. */
static int max_slots(void)
{
    static atomic_int cached; /* 0: not read yet */
    int m = atomic_load_explicit(&cached, memory_order_relaxed);
    if (m == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        m = n < 1 ? 1 : n > CONV_MAX_SLOTS ? CONV_MAX_SLOTS : (int)n;
        atomic_store_explicit(&cached, m, memory_order_relaxed);
    }
    return m;
}

/* Bytes of a Winograd slot for units of at most rpu output rows of `imgs` images: the padded
 * bands, then the transformed tiles of one block (36, tb, c) and their products or transformed
 * dy (36, tb, f). */
static size_t wino_slot_bytes(const conv_geom *gf, int64_t rpu, int64_t imgs, int64_t tb,
                              size_t esz)
{
    size_t e = add_sat(mul_sat((size_t)wino_band_elems(gf, rpu), (size_t)imgs),
                       (size_t)(36 * (wino_ld(tb * gf->c, esz) + wino_ld(tb * gf->f, esz))));
    return align_up(mul_sat(e, esz));
}

/* The Winograd plan for a workspace of avail bytes: as plan_for, or 0 when the workspace is too
 * small for it (the shared data, and one slot of the smallest unit: one row of tiles and one
 * tile per block; for backward-kernel also one partial sum). Blocks hold at most CONV_WINO_TB(K)
 * tiles, fewer when a unit has fewer or when the slot would exceed the cache budget. */
static size_t plan_wino(const conv_geom *g, conv_kind kind, size_t esz, size_t avail, conv_plan *pl)
{
    const conv_geom gf = wino_geom(g, kind == CONV_BWD_IN);
    const size_t usable = avail < CONV_WS_ALIGN ? 0 : avail - CONV_WS_ALIGN;
    const size_t ub = align_up(mul_sat((size_t)wino_u_elems(g, esz), esz));
    size_t pre = 0;
    if (kind == CONV_FWD)
        pre = ub;
    else if (kind == CONV_BWD_IN) /* and the rotated kernel it is made from */
        pre = add_sat(ub, align_up(mul_sat((size_t)(g->kh * g->kw * g->c * g->f), esz)));
    *pl = (conv_plan){.path = PATH_WINO, .ipu = 1, .bands = 1, .groups = 1, .pre_bytes = pre};
    size_t room = usable > pre ? usable - pre : 0;
    if (kind == CONV_BWD_K) /* at least one partial sum */
        room = room > ub ? room - ub : 0;
    const size_t lim = room < CONV_UNIT_BYTES ? room : CONV_UNIT_BYTES;
    const int64_t m = wino_m(g), rows = gf.oh, tw = (gf.ow + m - 1) / m, rmin = rows < m ? rows : m;
    /* tiles per block: no more than a unit of the whole image holds, and few enough for the
     * smallest unit to fit */
    int64_t tb = kind == CONV_BWD_K ? CONV_WINO_TBK : CONV_WINO_TB;
    tb = tb < (rows + m - 1) / m * tw ? tb : (rows + m - 1) / m * tw;
    while (tb > 1 && wino_slot_bytes(&gf, rmin, 1, tb, esz) > lim)
        tb = (tb + 1) / 2;
    if (wino_slot_bytes(&gf, rmin, 1, tb, esz) > lim)
        return 0;
    /* whole images when they fit, else bands of a multiple of m rows */
    int64_t r = rows;
    if (wino_slot_bytes(&gf, rows, 1, tb, esz) > lim) {
        r = m;
        while (r + m < rows && wino_slot_bytes(&gf, r + m, 1, tb, esz) <= lim)
            r += m;
        const int64_t bands = (rows + r - 1) / r, per = (rows + bands - 1) / bands;
        r = (per + m - 1) / m * m;
        pl->bands = (rows + r - 1) / r;
    }
    pl->rpu = r;
    pl->tb = tb < (r + m - 1) / m * tw ? tb : (r + m - 1) / m * tw;
    /* small images: several per unit, so that a block holds up to CONV_WINO_TB(K) tiles of
     * them (taller GEMMs; backward-kernel: longer sums between the updates of its partial) */
    const int64_t ti = (rows + m - 1) / m * tw,
                  tbmax = kind == CONV_BWD_K ? CONV_WINO_TBK : CONV_WINO_TB;
    if (pl->bands == 1 && pl->tb == ti && ti < tbmax) {
        int64_t k = tbmax / ti < g->n ? tbmax / ti : g->n;
        while (k > 1 && wino_slot_bytes(&gf, r, k, k * ti, esz) > lim)
            k--;
        pl->ipu = k;
        pl->tb = k * ti;
    }
    pl->units = pl->bands == 1 ? (g->n + pl->ipu - 1) / pl->ipu : g->n * pl->bands;
    pl->slot_bytes = wino_slot_bytes(&gf, r, pl->ipu, pl->tb, esz);
    int64_t tasks = pl->units;
    size_t parts = 0;
    if (kind == CONV_BWD_K) { /* at least two groups (two threads), when units and room allow */
        pl->part_bytes = ub;
        room += ub;
        size_t want = CONV_PART_BYTES / ub;
        want = want < 2 ? 2 : want > CONV_GROUPS ? CONV_GROUPS : want;
        want = want < (size_t)pl->units ? want : (size_t)pl->units;
        size_t fit = (room - pl->slot_bytes) / ub; /* >= 1: room held one partial and a slot */
        pl->groups = (int64_t)(want < fit ? want : fit);
        pl->groups -= pl->groups > 2 ? pl->groups % 2 : 0; /* even: two threads share them */
        tasks = pl->groups;
        parts = mul_sat((size_t)pl->groups, ub);
    }
    size_t left = room > parts ? room - parts : 0;
    int64_t s = (int64_t)(left / pl->slot_bytes);
    int64_t smax = max_slots() < tasks ? max_slots() : tasks;
    pl->slots = s < 1 ? 1 : s > smax ? smax : s;
    return add_sat(add_sat(add_sat(pre, mul_sat((size_t)pl->slots, pl->slot_bytes)), parts),
                   CONV_WS_ALIGN);
}

/* The plan of one kernel for elements of esz bytes and a workspace of avail bytes (SIZE_MAX:
 * the best plan; 0: the smallest). Returns the bytes the plan uses, or 0 when it needs none.
 * The cut into units and groups depends only on the geometry, esz and avail, never on the
 * thread count. */
static size_t plan_for(const conv_geom *g, conv_kind kind, size_t esz, size_t avail, conv_plan *pl)
{
    if (wino_applies(g, kind)) {
        size_t b = plan_wino(g, kind, esz, avail, pl);
        if (b > 0)
            return b;
    }
    *pl = (conv_plan){.path = path_of(g, kind, esz), .ipu = 1, .rpu = 1, .bands = 1, .groups = 1};
    if (pl->path == PATH_XCOL)
        return 0;
    const bool direct = pl->path == PATH_DIRECT;
    const int64_t rows = direct && kind == CONV_BWD_IN ? g->h : g->oh;
    /* the smallest unit: one row (direct), or CONV_MIN_BLOCK_ROWS im2col rows */
    int64_t rmin = direct ? 1 : (CONV_MIN_BLOCK_ROWS + g->ow - 1) / g->ow;
    if (rmin > rows)
        rmin = rows;
    const size_t usable = avail < CONV_WS_ALIGN ? 0 : avail - CONV_WS_ALIGN;
    if (unit_fits(g, pl->path, kind, esz, 0, 1, usable)) { /* whole images */
        int64_t k = 1; /* several per unit on the GEMM path, for taller GEMMs */
        if (!direct) {
            size_t img = unit_bytes(g, pl->path, kind, esz, 0, 1, false);
            size_t lim = usable / CONV_WS_ALIGN * CONV_WS_ALIGN; /* align_up(k * img) fits */
            lim = lim < CONV_UNIT_BYTES ? lim : CONV_UNIT_BYTES;
            k = (size_t)g->n < lim / img ? g->n : lim / img < 1 ? 1 : (int64_t)(lim / img);
            /* forward and backward-input: an even number of units of near-equal size, so that
             * two threads share them evenly (125 + 3 images ran on one thread) */
            int64_t u = (g->n + k - 1) / k;
            if (kind != CONV_BWD_K && u > 1) {
                u += u % 2;
                k = (g->n + u - 1) / u;
            }
        }
        pl->ipu = k;
        pl->rpu = rows;
        pl->units = (g->n + k - 1) / k;
        pl->slot_bytes = align_up(unit_bytes(g, pl->path, kind, esz, 0, k, false));
    } else { /* bands of near-equal height, at least rmin rows */
        int64_t r = rmin;
        while (r < rows && unit_fits(g, pl->path, kind, esz, r + 1, 0, usable))
            r++;
        pl->bands = (rows + r - 1) / r;
        pl->rpu = (rows + pl->bands - 1) / pl->bands;
        pl->units = g->n * pl->bands;
        pl->slot_bytes = align_up(unit_bytes(g, pl->path, kind, esz, pl->rpu, 0, false));
    }
    /* parallel units: at most one per image for banded GEMM backward-input (bands of an image
     * share input rows), and one per group for backward-kernel */
    int64_t tasks = pl->units;
    if (kind == CONV_BWD_K) {
        pl->part_bytes = align_up(mul_sat(mul_sat((size_t)g->kdim, (size_t)g->f), esz));
        size_t want = CONV_PART_BYTES / pl->part_bytes; /* groups - 1 */
        want = want < 1 ? 1 : want > CONV_GROUPS - 1 ? CONV_GROUPS - 1 : want;
        want = want < (size_t)(pl->units - 1) ? want : (size_t)(pl->units - 1);
        size_t room = usable > pl->slot_bytes ? usable - pl->slot_bytes : 0;
        size_t fit = room / pl->part_bytes;
        pl->groups = 1 + (int64_t)(want < fit ? want : fit);
        pl->groups -= pl->groups > 2 ? pl->groups % 2 : 0; /* even: two threads share them */
        tasks = pl->groups;
    } else if (kind == CONV_BWD_IN && !direct && pl->bands > 1) {
        tasks = g->n;
    }
    size_t parts = mul_sat((size_t)(pl->groups - 1), pl->part_bytes);
    size_t left = usable > parts ? usable - parts : 0;
    int64_t s = (int64_t)(left / pl->slot_bytes);
    int64_t smax = max_slots() < tasks ? max_slots() : tasks;
    pl->slots = s < 1 ? 1 : s > smax ? smax : s;
    return add_sat(add_sat(mul_sat((size_t)pl->slots, pl->slot_bytes), parts), CONV_WS_ALIGN);
}

/* The workspace for every kernel and both dtypes: the largest best (or smallest) plan. */
static size_t ws_need(const conv_geom *g, bool best)
{
    size_t need = 0;
    for (int kind = CONV_FWD; kind <= CONV_BWD_K; kind++)
        for (size_t esz = 4; esz <= 8; esz += 4) {
            conv_plan pl;
            size_t b = plan_for(g, (conv_kind)kind, esz, best ? SIZE_MAX : 0, &pl);
            need = b > need ? b : need;
        }
    return need;
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
    return ws_need(&g, best);
}

size_t sx_conv2d_workspace(const int64_t x_shape[4], const int64_t k_shape[4],
                           const sx_conv2d_params *p)
{
    if (!conv_here(p, x_shape, k_shape))
        return sx__conv2d_general_workspace(x_shape, k_shape, p, true);
    return ws_query(x_shape, k_shape, p, true);
}

size_t sx_conv2d_workspace_min(const int64_t x_shape[4], const int64_t k_shape[4],
                               const sx_conv2d_params *p)
{
    if (!conv_here(p, x_shape, k_shape))
        return sx__conv2d_general_workspace(x_shape, k_shape, p, false);
    return ws_query(x_shape, k_shape, p, false);
}

/* ---------------------------------------------------------------- checks */

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
    if (!conv_here_t(p, x, k))
        return sx__conv2d_general_shape(who, x, k, p, out_shape);
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

/* Check the workspace against the documented minimum and plan the call. */
static sx_status plan_make(const char *who, const conv_geom *g, conv_kind kind, sx_dtype dt,
                           void *ws, size_t ws_bytes, conv_plan *pl)
{
    size_t need = ws_need(g, false);
    if (ws_bytes < need)
        return sx_error(SX_E_ARG,
                        "%s: workspace of %zu bytes, need at least %zu (sx_conv2d_workspace_min)",
                        who, ws_bytes, need);
    if (need > 0 && ws == NULL)
        return sx_error(SX_E_ARG, "%s: workspace is NULL", who);
    (void)plan_for(g, kind, sx_dtype_size(dt), ws_bytes, pl);
    uintptr_t a = (uintptr_t)ws, al = (a + CONV_WS_ALIGN - 1) & ~(uintptr_t)(CONV_WS_ALIGN - 1);
    pl->ws = (char *)ws + (al - a);
    return SX_OK;
}

/* ---------------------------------------------------------------- running units */

/* Threads for a call of `macs` multiply-adds over `tasks` independent tasks. */
static int threads_for(int64_t macs, int64_t tasks, int64_t slots)
{
    int64_t nt = sx__par_threads();
    if (macs < CONV_PAR_MIN_MACS)
        nt = 1;
    nt = nt < tasks ? nt : tasks;
    nt = nt < slots ? nt : slots;
    return nt < 1 ? 1 : (int)nt;
}

/* One run of units: task t on the scratch slot of the thread that runs it. fresh[k]: slot k has
 * not been used yet in this run (each slot belongs to one thread for the whole run). */
typedef struct units_ctx {
    conv_job *jb;
    conv_kind kind;
    unit_fn fn;
    char *parts;
    bool wino;
    bool fresh[CONV_MAX_SLOTS];
} units_ctx;

/* ---------------------------------------------------------------- epilogues */

/* A forward pass's epilogue (sx_tensor_conv2d_fused_out): the program over operands in[0] = y,
 * in[1..n_in). per_unit: every repeated operand's size divides a row of y, so each unit's rows
 * (whole rows) can run it alone; else it runs over all of y at the end. */
struct conv_epi {
    const sx_fused_prog *prog;
    int n_in;
    const sx_tensor *in[SX_FUSED_MAX_OPERANDS];
    bool per_unit;
};

/* The program over elements [e0, e0 + len) of y, in place: views of y and of the operands of
 * y's size at e0; the repeated ones whole (e0 and len are multiples of their sizes: per_unit, or
 * the whole of y). Checked before the convolution ran, so it cannot fail. */
static void epi_run(const conv_epi *e, int64_t e0, int64_t len)
{
    const sx_tensor *y = e->in[0];
    const size_t esz = sx_dtype_size(y->dtype);
    sx_tensor v[SX_FUSED_MAX_OPERANDS];
    const sx_tensor *in[SX_FUSED_MAX_OPERANDS];
    for (int i = 0; i < e->n_in; i++) {
        const sx_tensor *t = e->in[i];
        v[i] = t->size == y->size
                   ? sx_tensor_view(y->dtype, 1, &len, (char *)t->data + (size_t)e0 * esz)
                   : sx_tensor_view(y->dtype, 1, &t->size, t->data);
        in[i] = &v[i];
    }
    sx_tensor out = sx_tensor_view(y->dtype, 1, &len, (char *)y->data + (size_t)e0 * esz);
    sx_status s = sx_tensor_fused_out(e->prog, e->n_in, in, &out);
    (void)s;
}

/* Forward unit u's output rows (image rows of y, counted over all images): ipu whole images, or
 * one band of rpu rows of one image (direct units have ipu = 1). */
static void unit_out_rows(const conv_plan *pl, const conv_geom *g, int64_t u, int64_t *p0,
                          int64_t *np)
{
    if (pl->bands == 1) {
        int64_t i0 = u * pl->ipu, i1 = i0 + pl->ipu < g->n ? i0 + pl->ipu : g->n;
        *p0 = i0 * g->oh;
        *np = (i1 - i0) * g->oh;
    } else {
        int64_t img = u / pl->bands, oy0 = (u % pl->bands) * pl->rpu;
        *p0 = img * g->oh + oy0;
        *np = g->oh - oy0 < pl->rpu ? g->oh - oy0 : pl->rpu;
    }
}

static void units_run(units_ctx *c, int64_t t, int k)
{
    const conv_plan *pl = c->jb->pl;
    char *slot = pl->ws + pl->pre_bytes + (size_t)k * pl->slot_bytes;
    bool fresh = c->fresh[k];
    if (c->kind == CONV_BWD_K) {
        void *acc = c->wino  ? c->parts + (size_t)t * pl->part_bytes
                    : t == 0 ? c->jb->out
                             : c->parts + (size_t)(t - 1) * pl->part_bytes;
        int64_t u0 = t * pl->units / pl->groups, u1 = (t + 1) * pl->units / pl->groups;
        for (int64_t u = u0; u < u1; u++)
            fresh = !c->fn(c->jb, u, slot, fresh, acc, u == u0);
    } else {
        fresh = !c->fn(c->jb, t, slot, fresh, NULL, false);
        const conv_epi *e = c->jb->epi;
        if (e != NULL && e->per_unit) { /* the unit's rows, while they are in cache */
            const conv_geom *g = c->jb->g;
            int64_t p0, np;
            unit_out_rows(pl, g, t, &p0, &np);
            epi_run(e, p0 * g->ow * g->f, np * g->ow * g->f);
        }
    }
    c->fresh[k] = fresh;
}

static void units_task(void *ctx, int64_t t)
{
    units_run(ctx, t, sx__par_slot());
}

/* The partials of groups 1.. added, in order, to the output's elements [i0, i1). */
typedef struct sum_ctx {
    const conv_job *jb;
    const char *parts;
    int64_t ng;
    size_t pstride;
} sum_ctx;

static void sum_partials(void *ctx, int64_t i0, int64_t i1)
{
    const sum_ctx *c = ctx;
    for (int64_t i = i0; i < i1; i++) {
        if (c->jb->dt == SX_F32) {
            float *d = c->jb->out, s = d[i];
            for (int64_t t = 1; t < c->ng; t++)
                s += ((const float *)(const void *)
                          c->parts)[(size_t)(t - 1) * c->pstride + (size_t)i];
            d[i] = s;
        } else {
            double *d = c->jb->out, s = d[i];
            for (int64_t t = 1; t < c->ng; t++)
                s += ((const double *)(const void *)
                          c->parts)[(size_t)(t - 1) * c->pstride + (size_t)i];
            d[i] = s;
        }
    }
}

/* Run every unit of the plan. One thread: the units in order, and the unit functions may use
 * threads inside (jb->par; GEMMs thread themselves). Several: the units are shared out, each
 * run whole by one thread on its own slot (sx__par_slot; GEMMs inside a task run on one thread).
 * Backward-kernel: group i sums units [i * units / groups, (i + 1) * units / groups) into its
 * partial (group 0 into the output), then the partials are added to the output in order; with
 * Winograd every group has a partial, and wino_finish adds them in order and transforms the
 * sum into dk. */
static void run_units(conv_job *jb, conv_kind kind, unit_fn fn, int64_t macs)
{
    const conv_plan *pl = jb->pl;
    const int64_t tasks = kind == CONV_BWD_K ? pl->groups
                          : kind == CONV_BWD_IN && pl->path == PATH_GEMM && pl->bands > 1
                              ? jb->g->n
                              : pl->units;
    const int nt = threads_for(macs, tasks, pl->slots);
    const size_t esz = sx_dtype_size(jb->dt);
    const bool wino = pl->path == PATH_WINO;
    char *parts = pl->ws + pl->pre_bytes + (size_t)pl->slots * pl->slot_bytes;
    jb->par = nt == 1;
    units_ctx uc = {jb, kind, fn, parts, wino, {0}};
    for (int k = 0; k < CONV_MAX_SLOTS; k++)
        uc.fresh[k] = true;
    if (nt == 1) /* in order on this thread, on slot 0; the units may use threads inside */
        for (int64_t t = 0; t < tasks; t++)
            units_run(&uc, t, 0);
    else
        sx__par_for_upto(nt, tasks, units_task, &uc);
    if (kind == CONV_BWD_K && wino) {
        vec_kernels(jb->dt)->wino_finish(jb, parts, pl->groups, pl->part_bytes / esz);
        return;
    }
    if (kind != CONV_BWD_K || pl->groups == 1)
        return;
    const int64_t nk = jb->g->kdim * jb->g->f, ng = pl->groups;
    sum_ctx sc = {jb, parts, ng, pl->part_bytes / esz};
    if (nk * ng >= SX_PAR_MIN)
        sx__par_range(nk, 1, sum_partials, &sc);
    else
        sum_partials(&sc, 0, nk);
}

/* Whether a Winograd kernel writes its output t (c channels) with streaming stores: when t is
 * too big to stay in the cores' caches until its reader comes (it would only evict the
 * kernel's own blocks on the way), its rows are whole vectors, and it is 64-byte aligned. */
static bool stream_out(const sx_tensor *t, int64_t c)
{
    const int64_t vl = 64 / (int64_t)sx_dtype_size(t->dtype);
    return tensor_bytes(t) >= CONV_STREAM_BYTES && c % vl == 0 && ((uintptr_t)t->data & 63) == 0;
}

static void zero_fill(sx_tensor *t)
{
    memset(t->data, 0, tensor_bytes(t));
}

static int64_t conv_macs(const conv_geom *g)
{
    return g->n * g->oh * g->ow * g->kdim * g->f;
}

/* The unit function of a kernel, path and dtype. */
static unit_fn unit_of(conv_kind kind, conv_path path, sx_dtype dt)
{
    const bool d = dt == SX_F64;
    if (path == PATH_DIRECT)
        return vec_kernels(dt)->direct[kind];
    if (path == PATH_WINO)
        return vec_kernels(dt)->wino[kind];
    return kind == CONV_FWD     ? (d ? gemm_fwd_unit_f64 : gemm_fwd_unit_f32)
           : kind == CONV_BWD_K ? (d ? gemm_bwdk_unit_f64 : gemm_bwdk_unit_f32)
                                : (d ? gemm_bwdi_unit_f64 : gemm_bwdi_unit_f32);
}

/* Before the units of a Winograd forward or backward-input: the transformed kernel. */
static void wino_prep(const conv_job *jb, bool bwdi)
{
    vec_kernels(jb->dt)->wino_prep(jb, bwdi);
}

/* When x is the im2col matrix: one GEMM over all n * oh * ow rows, in pieces of at most
 * CONV_GEMM_ROWS (sx__gemm takes dimensions up to INT_MAX); backward-kernel adds the pieces in
 * order. a is x (forward, backward-kernel) or dy (backward-input); out is y, dx or dk. */
#define CONV_GEMM_ROWS ((int64_t)1 << 30)
static void xcol_gemm(const conv_geom *g, conv_kind kind, sx_dtype dt, const void *a, const void *b,
                      void *out)
{
    const int64_t m = g->n * g->oh * g->ow, esz = (int64_t)sx_dtype_size(dt);
    for (int64_t r0 = 0; r0 < m; r0 += CONV_GEMM_ROWS) {
        const int64_t r = m - r0 < CONV_GEMM_ROWS ? m - r0 : CONV_GEMM_ROWS;
        if (kind == CONV_FWD) /* y (r, f) = x (r, kdim) @ k (kdim, f) */
            sx__gemm(dt, false, false, r, g->f, g->kdim, 1.0, (const char *)a + r0 * g->kdim * esz,
                     g->kdim, b, g->f, 0.0, (char *)out + r0 * g->f * esz, g->f);
        else if (kind == CONV_BWD_IN) /* dx = dcol (r, kdim) = dy (r, f) @ k^T */
            sx__gemm(dt, false, true, r, g->kdim, g->f, 1.0, (const char *)a + r0 * g->f * esz,
                     g->f, b, g->f, 0.0, (char *)out + r0 * g->kdim * esz, g->kdim);
        else /* dk (kdim, f) (+)= x (r, kdim)^T @ dy (r, f) */
            sx__gemm(dt, true, false, g->kdim, g->f, r, 1.0, (const char *)a + r0 * g->kdim * esz,
                     g->kdim, (const char *)b + r0 * g->f * esz, g->f, r0 == 0 ? 0.0 : 1.0, out,
                     g->f);
    }
}

/* ---------------------------------------------------------------- kernels */

/* The forward pass; with an epilogue e (its operands checked, y's shape not yet) run per unit or
 * at the end. */
static sx_status conv_forward(const char *who, const sx_tensor *x, const sx_tensor *k,
                              const sx_conv2d_params *p, void *ws, size_t ws_bytes, conv_epi *e,
                              sx_tensor *y)
{
    if (!conv_here_t(p, x, k)) { /* dilated, grouped or other paddings: conv_general.c */
        SX_TRY(sx__conv2d_general_forward(x, k, p, ws, ws_bytes, y));
        if (e != NULL && y->size > 0)
            epi_run(e, 0, y->size);
        return SX_OK;
    }
    SX_TRY(check_rank4(who, "x", x));
    SX_TRY(check_rank4(who, "k", k));
    SX_TRY(sx__check_same_dtype(who, x, k));
    conv_geom g;
    SX_TRY(conv_geom_make(who, "x", x->shape, "k", k->shape, p, &g));
    int64_t ys[4] = {g.n, g.oh, g.ow, g.f};
    SX_TRY(sx__check_out(who, y, x->dtype, 4, ys));
    SX_TRY(check_overlap(who, x, k, y, ws, ws_bytes));
    conv_plan pl;
    SX_TRY(plan_make(who, &g, CONV_FWD, x->dtype, ws, ws_bytes, &pl));
    if (y->size == 0)
        return SX_OK;
    const bool whole = e != NULL && (!e->per_unit || g.kdim == 0 || pl.path == PATH_XCOL);
    if (g.kdim == 0) /* no input channels: every sum is empty */
        zero_fill(y);
    else if (pl.path == PATH_XCOL)
        xcol_gemm(&g, CONV_FWD, x->dtype, x->data, k->data, y->data);
    else {
        conv_job jb = {&g,       &pl,   x->data,          k->data, y->data,
                       x->dtype, false, whole ? NULL : e, false};
        jb.stream = jb.epi == NULL && stream_out(y, g.f);
        if (pl.path == PATH_WINO)
            wino_prep(&jb, false);
        run_units(&jb, CONV_FWD, unit_of(CONV_FWD, pl.path, x->dtype), conv_macs(&g));
    }
    if (whole)
        epi_run(e, 0, y->size);
    return SX_OK;
}

sx_status sx_tensor_conv2d_out(const sx_tensor *x, const sx_tensor *k, const sx_conv2d_params *p,
                               void *ws, size_t ws_bytes, sx_tensor *y)
{
    return conv_forward("sx_tensor_conv2d_out", x, k, p, ws, ws_bytes, NULL, y);
}

sx_status sx_tensor_conv2d_fused_out(const sx_tensor *x, const sx_tensor *k,
                                     const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                     const sx_fused_prog *prog, int n_ops,
                                     const sx_tensor *const *ops, sx_tensor *y)
{
    const char *who = "sx_tensor_conv2d_fused_out";
    if (n_ops < 0 || n_ops > SX_FUSED_MAX_OPERANDS - 1 || (n_ops > 0 && ops == NULL))
        return sx_error(SX_E_ARG, "%s: %d operands besides the convolution (want 0..%d)", who,
                        n_ops, SX_FUSED_MAX_OPERANDS - 1);
    SX_TRY(sx__fused_check(who, prog, n_ops + 1));
    SX_TRY(sx__check_tensor(who, "y", y));
    conv_epi e = {.prog = prog, .n_in = n_ops + 1, .per_unit = true};
    e.in[0] = y;
    const int64_t row = y->rank == 4 ? y->shape[2] * y->shape[3] : 0;
    for (int i = 0; i < n_ops; i++) {
        const sx_tensor *t = ops[i];
        SX_TRY(sx__check_tensor(who, "operand", t));
        SX_TRY(sx__check_same_dtype(who, t, y));
        if (t->size != y->size && (t->size == 0 || y->size % t->size != 0))
            return sx_error(SX_E_SHAPE,
                            "%s: operand %d has %lld elements, y %lld (want the same, or a "
                            "divisor)",
                            who, i, (long long)t->size, (long long)y->size);
        SX_TRY(sx__check_apart(who, "operand", t, "y", y));
        if (ws != NULL && ranges_overlap(t->data, tensor_bytes(t), ws, ws_bytes))
            return sx_error(SX_E_ARG, "%s: operand %d overlaps the workspace", who, i);
        if (t->size != y->size && (row == 0 || row % t->size != 0))
            e.per_unit = false;
        e.in[i + 1] = t;
    }
    return conv_forward(who, x, k, p, ws, ws_bytes, &e, y);
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
    if (!conv_here_t(p, dx, k))
        return sx__conv2d_general_backward_input(k, dy, p, ws, ws_bytes, dx);
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
    SX_TRY(plan_make(who, &g, CONV_BWD_IN, k->dtype, ws, ws_bytes, &pl));
    if (dx->size == 0)
        return SX_OK;
    if (dy->size == 0) { /* no outputs or no filters: nothing flows back */
        zero_fill(dx);
        return SX_OK;
    }
    if (pl.path == PATH_XCOL) {
        xcol_gemm(&g, CONV_BWD_IN, k->dtype, dy->data, k->data, dx->data);
        return SX_OK;
    }
    conv_job jb = {&g, &pl, k->data, dy->data, dx->data, k->dtype, false, NULL, false};
    jb.stream = stream_out(dx, g.c);
    if (pl.path == PATH_WINO)
        wino_prep(&jb, true);
    run_units(&jb, CONV_BWD_IN, unit_of(CONV_BWD_IN, pl.path, k->dtype), conv_macs(&g));
    return SX_OK;
}

sx_status sx_tensor_conv2d_backward_kernel_out(const sx_tensor *x, const sx_tensor *dy,
                                               const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                               sx_tensor *dk)
{
    const char *who = "sx_tensor_conv2d_backward_kernel_out";
    if (!conv_here_t(p, x, dk))
        return sx__conv2d_general_backward_kernel(x, dy, p, ws, ws_bytes, dk);
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
    SX_TRY(plan_make(who, &g, CONV_BWD_K, x->dtype, ws, ws_bytes, &pl));
    if (dk->size == 0)
        return SX_OK;
    if (dy->size == 0) { /* no output positions: the gradient is an empty sum */
        zero_fill(dk);
        return SX_OK;
    }
    if (pl.path == PATH_XCOL) {
        xcol_gemm(&g, CONV_BWD_K, x->dtype, x->data, dy->data, dk->data);
        return SX_OK;
    }
    conv_job jb = {&g, &pl, x->data, dy->data, dk->data, x->dtype, false, NULL, false};
    run_units(&jb, CONV_BWD_K, unit_of(CONV_BWD_K, pl.path, x->dtype), conv_macs(&g));
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
