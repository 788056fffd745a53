/* conv_depthwise.c: depthwise and grouped convolution over NHWC images. The direct kernels:
 * AVX-512 and AVX2 + FMA (one template, conv_depthwise_tmpl.h, through simd.h), forward and both
 * backward passes. The channels sit in the vector lanes, in blocks of VL (the last one masked): a
 * task takes a chunk of blocks of one image (forward, backward-input: all channels when the ring
 * holds them) or of every image (backward-kernel: a chunk per thread, which does not change any
 * sum), and copies the rows it reads into a ring of zero-padded rows on its stack (VL lanes per
 * column and block), so no tap tests a border. Forward keeps a tile of up to DWF_P output pixels in
 * registers and adds the taps in order (ky, kx ascending); backward-input adds dy times the taps
 * into a ring of padded dx rows, a tile of its columns in registers, and copies each row out once
 * no later output row reaches it; backward-kernel keeps one accumulator per tap (registers for 3x3)
 * and sums the images, output rows and pixels in order. A task's results depend on the geometry and
 * the instruction set alone, so the bits never depend on the thread count (the tiles differ between
 * the sets: AVX2 has 16 vector registers, not 32). 3x3 kernels at strides 1 and 2 without dilation
 * run instances with those constants (the x and dx columns of a tile are loaded once for every tap
 * that reads them); the rest run the same loops with the geometry read at run time. At batch 128
 * the tensors live in memory, not in the caches, and the kernels wait on loads more than they
 * compute: filling a ring row prefetches the x row DW_PF rows below, and backward-input and
 * backward-kernel the dy row DW_PF rows ahead (measured: forward and backward-kernel twice as fast
 * with them). Grouped convolutions (cg channels and fg filters per group, at most SX__DW_MAX_GROUP
 * each; depthwise with a multiplier too) run the same loops, a vector lane per output filter
 * (forward, backward-kernel) or input channel (backward-input): the ring holds cg expansions of
 * each block, expansion e's lane of filter j holding x's channel j / fg * cg + e of the pixel
 * (a permute of the one or two vectors of channels the block's groups span, a gather when
 * they span more); forward adds, per row of taps, the expansions times k's rows of channel e
 * of the groups; backward-kernel keeps accumulators per tap and expansion; backward-input
 * expands dy the same way (fg expansions, lane of channel i holding dy's filter i / cg * fg + e)
 * and multiplies by taps rearranged per task (kt). These are no GEMMs: the work per output is
 * what the convolution needs, where im2col and a GEMM per group ran small, slow products. */
#include "conv_impl.h"
#include "tensor_impl.h"

#include <string.h>

/* The kernels run on AVX-512 (VL 16 floats, 8 doubles) and AVX2 + FMA (8, 4), grouped ones too
 * (AVX2's permutes and gathers stand in for AVX-512's): one template, instantiated through
 * simd.h for each. Below AVX2 depthwise runs the portable loops (conv_depthwise_loops_tmpl.h),
 * grouped convolutions conv_im2col.c's GEMMs. */
#if defined(__GNUC__) && defined(__x86_64__)
#define DW_X86 1
#endif

/* Bytes of a task's ring of padded rows (on its stack): it holds the rows of as many channel
 * blocks as fit (a chunk; all of mobilenet's), so that a task reads each pixel's channels of
 * the chunk together; rows too wide for one block go to the loops below or conv_im2col.c. A grouped
 * block (its expansions) may take up to DW_RING_MAX (a task's frame: the ring array, 32K of
 * accumulators or taps and 8K of tables, about 170K of stack, was 96K before the grouped
 * kernels). */
#define DW_RING_BYTES ((size_t)64 << 10)
#define DW_RING_MAX ((size_t)128 << 10)
/* Blocks of a grouped task's chunk at most (their expansion tables are on its stack). */
#define DW_MAX_VB 64
/* Filling a ring row prefetches the input row this many rows below. */
#define DW_PF 2
/* Ring rows ((kh - 1) * dh + 1) at most. */
#define DW_MAX_R 16
/* Bytes of backward-kernel's accumulators (a task's chunk of blocks times the taps). */
#define DW_ACC_BYTES ((size_t)32 << 10)
/* Tasks per call at most: images are grouped when n * blocks would exceed it. */
#define DW_MAX_TASKS ((int64_t)1 << 20)
/* Tasks per thread a grouped call aims at (images are grouped to that). */
#define DW_TASKS_PER_THREAD 16
/* Multiply-adds below which a call runs on one thread. */
#define DW_PAR_MIN_MACS ((int64_t)1 << 18)

#ifdef DW_X86

typedef struct dw_job {
    const sx__dw_geom *g;
    const void *in0, *in1;
    void *out;
    int64_t nb;        /* channel blocks */
    int64_t cpt;       /* blocks per chunk */
    int64_t nch;       /* chunks */
    int64_t ipt;       /* images per task */
    int64_t wr;        /* columns of a ring row */
    int64_t r;         /* ring rows */
    int64_t lanes;     /* channels the lanes run over: f (forward, backward-kernel) or c */
    int64_t e, ep, eq; /* expansions per block; lane l's e-th reads (l / ep) * eq + e */
    bool grouped;      /* not depthwise of multiplier 1 */
} dw_job;

#define SIMD_ISA SIMD_AVX512
#define SIMD_BITS 32
#define T float
#define SFX f32_avx512
#include "simd.h"
#include "conv_depthwise_tmpl.h"
#include "simd_end.h"
#undef T
#undef SFX
#define SIMD_ISA SIMD_AVX512
#define SIMD_BITS 64
#define T double
#define SFX f64_avx512
#include "simd.h"
#include "conv_depthwise_tmpl.h"
#include "simd_end.h"
#undef T
#undef SFX
#define SIMD_ISA SIMD_AVX2
#define SIMD_BITS 32
#define T float
#define SFX f32_avx2
#include "simd.h"
#include "conv_depthwise_tmpl.h"
#include "simd_end.h"
#undef T
#undef SFX
#define SIMD_ISA SIMD_AVX2
#define SIMD_BITS 64
#define T double
#define SFX f64_avx2
#include "simd.h"
#include "conv_depthwise_tmpl.h"
#include "simd_end.h"
#undef T
#undef SFX

/* The task of each set (AVX2, AVX-512), dtype (f32, f64) and kind (sx__dw_kind's order). */
static const sx__par_task_fn dw_tasks[2][2][3] = {
    {{dwf_task_f32_avx2, dwi_task_f32_avx2, dwk_task_f32_avx2},
     {dwf_task_f64_avx2, dwi_task_f64_avx2, dwk_task_f64_avx2}},
    {{dwf_task_f32_avx512, dwi_task_f32_avx512, dwk_task_f32_avx512},
     {dwf_task_f64_avx512, dwi_task_f64_avx512, dwk_task_f64_avx512}},
};

#endif

bool sx__dw_direct(const sx__dw_geom *g, sx__dw_kind kind, sx_dtype dt, const void *in0,
                   const void *in1, void *out, bool par)
{
#ifdef DW_X86
    const int isa = sx__isa();
    if ((isa != SX__ISA_AVX2 && isa != SX__ISA_AVX512) || (dt != SX_F32 && dt != SX_F64) ||
        g->cg > SX__DW_MAX_GROUP || g->fg > SX__DW_MAX_GROUP)
        return false;
    const bool d = dt == SX_F64, grouped = g->cg != 1 || g->fg != 1, w = isa == SX__ISA_AVX512;
    const int64_t esz = d ? 8 : 4, vl = (w ? 64 : 32) / esz;
    const int64_t r = (g->kh - 1) * g->dh + 1;
    const int64_t wp = (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    const int64_t wr = kind == SX__DW_BWD_IN && g->pl + g->w > wp ? g->pl + g->w : wp;
    const int64_t taps = g->kh * g->kw;
    /* lanes over the filters (forward, backward-kernel: x's ring holds cg expansions) or the
     * channels (backward-input: dy's fg expansions, taps rearranged per block) */
    const int64_t lanes = kind == SX__DW_BWD_IN ? g->c : g->f;
    const int64_t ne = !grouped ? 1 : kind == SX__DW_BWD_IN ? g->fg : g->cg;
    const int64_t blk = r * wr * vl * esz * (kind == SX__DW_BWD_IN ? 1 : ne);
    const int64_t nb = (lanes + vl - 1) / vl;
    const int64_t per = kind == SX__DW_BWD_K               ? taps * ne * vl * esz /* accumulators */
                        : kind == SX__DW_BWD_IN && grouped ? taps * ne * vl * esz /* kt */
                                                           : 0;
    if (r > DW_MAX_R || blk > (int64_t)(grouped ? DW_RING_MAX : DW_RING_BYTES) ||
        per > (int64_t)DW_ACC_BYTES)
        return false;
    /* backward-kernel: a chunk per thread (each sums every image: the bits do not depend on
     * the chunks); the others: the largest chunk, the images split between the tasks */
    int64_t cpt = (int64_t)DW_RING_BYTES / blk;
    cpt = cpt < 1 ? 1 : cpt;
    if (per > 0)
        cpt = cpt < (int64_t)DW_ACC_BYTES / per ? cpt : (int64_t)DW_ACC_BYTES / per;
    if (grouped)
        cpt = cpt < DW_MAX_VB ? cpt : DW_MAX_VB;
    if (kind == SX__DW_BWD_K) {
        const int64_t th = par ? sx__par_threads() : 1;
        cpt = cpt < (nb + th - 1) / th ? cpt : (nb + th - 1) / th;
    }
    cpt = cpt < nb ? cpt : nb;
    dw_job jb = {g,
                 in0,
                 in1,
                 out,
                 nb,
                 cpt,
                 (nb + cpt - 1) / cpt,
                 1,
                 wr,
                 r,
                 lanes,
                 ne,
                 kind == SX__DW_BWD_IN ? g->cg : g->fg,
                 kind == SX__DW_BWD_IN ? g->fg : g->cg,
                 grouped};
    int64_t tasks = jb.nch;
    if (kind != SX__DW_BWD_K) {
        jb.ipt = (g->n * jb.nch + DW_MAX_TASKS - 1) / DW_MAX_TASKS;
        /* grouped: a task's tables and taps (kt) are made once for its images; about
         * DW_TASKS_PER_THREAD tasks per thread */
        const int64_t th = par ? sx__par_threads() : 1,
                      ig = g->n * jb.nch / (DW_TASKS_PER_THREAD * th);
        if (grouped && ig > jb.ipt)
            jb.ipt = ig < g->n ? ig : g->n;
        tasks = (g->n + jb.ipt - 1) / jb.ipt * jb.nch;
    }
    const sx__par_task_fn fn = dw_tasks[w][d][kind];
    const int64_t macs = g->n * g->oh * g->ow * taps * g->cg * g->f;
    if (par && macs >= DW_PAR_MIN_MACS && tasks > 1)
        sx__par_for(tasks, fn, &jb);
    else
        for (int64_t t = 0; t < tasks; t++)
            fn(&jb, t);
    return true;
#else
    (void)g, (void)kind, (void)dt, (void)in0, (void)in1, (void)out, (void)par;
    return false;
#endif
}

/* Filters per task of depthwise backward-kernel (the loops). */
#define GX_DW_CHUNK 512

#define T float
#define SFX f32
#include "conv_depthwise_loops_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "conv_depthwise_loops_tmpl.h"
#undef T
#undef SFX

bool sx__conv_depthwise_run(const gx_geom *g, gx_kind kind, sx_dtype dt, const void *in0,
                            const void *in1, void *out, bool par, bool loops)
{
    const sx__dw_geom dg = {g->n,  g->h,  g->w,  g->c,  g->kh, g->kw, g->oh, g->ow, g->sh,
                            g->sw, g->dh, g->dw, g->pt, g->pl, g->f,  g->cg, g->fg};
    const sx__dw_kind dk = kind == GX_FWD      ? SX__DW_FWD
                           : kind == GX_BWD_IN ? SX__DW_BWD_IN
                                               : SX__DW_BWD_K;
    if (sx__dw_direct(&dg, dk, dt, in0, in1, out, par))
        return true;
    if (!loops)
        return false;
    const bool d = dt == SX_F64;
    gx_job jb = {g, in0, in1, out};
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
    return true;
}
