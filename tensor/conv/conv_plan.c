/* conv_plan.c: choosing how a convolution runs, and running the dense kernels' units.
 * A dense convolution (one group, no dilation, the geometry of VALID or SAME_UPPER, or explicit
 * pads smaller than the window: tensor/conv/conv_general.c decides) runs one of four
 * implementations, chosen here from the geometry, the dtype, the instruction set and the
 * workspace: x itself as the im2col matrix (one GEMM: 1x1 stride 1, or a window covering the
 * image), the direct kernels (conv_direct.c), Winograd (conv_winograd.c) or im2col + GEMM
 * (conv_im2col.c). The work is cut into units (whole images, or bands of rows of one image)
 * whose scratch stays in L2; units run in parallel, one thread each, and backward-kernel adds
 * them in a fixed number of groups summed in a fixed order, so the bits never depend on the
 * thread count. The workspace sizes of every geometry (dense or general) are computed here
 * too. */
#include "conv_impl.h"
#include "tensor_impl.h"

#include <stdatomic.h>
#include <stdio.h>
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
/* Winograd F(2x2, 5x5) (Lavin and Gray, "Fast algorithms for convolutional neural networks",
 * 2016) with the interpolation points 0, 1, -1, 2, -1/2 and infinity (the matrices are in
 * conv_winograd_tmpl.h; these points round 2-3 times less than 0, +-1, +-2): a 2x2 block of outputs
 * is A^T [(G k G^T) . (B^T d B)] A over the 6x6 input tile d. A unit's tiles are transformed in
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

/* One instruction set's vector kernels for one dtype (conv_direct.c, conv_winograd.c). */
typedef struct conv_vec_kernels {
    unit_fn direct[3], wino[3]; /* by conv_kind */
    void (*wino_prep)(const conv_job *jb, bool bwdi);
    void (*wino_finish)(const conv_job *jb, const void *parts, int64_t groups, size_t pstride);
} conv_vec_kernels;

#define CONV_VEC_SET(s)                                                                            \
    {                                                                                              \
        {sx__conv_direct_fwd_unit_##s, sx__conv_direct_bwdi_unit_##s,                              \
         sx__conv_direct_bwdk_unit_##s},                                                           \
            {sx__conv_wino_fwd_unit_##s, sx__conv_wino_bwdi_unit_##s,                              \
             sx__conv_wino_bwdk_unit_##s},                                                         \
            sx__conv_wino_prep_##s, sx__conv_wino_finish_##s                                       \
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

/* The last-level cache's bytes, read once: the largest cache level sysfs lists for cpu0 (lscpu's
 * source; glibc's sysconf reports 384 MB on a 32 MB EPYC VM), 8 MB where it lists none. */
static size_t llc_bytes(void)
{
    static atomic_long cached; /* 0: not read yet */
    long b = atomic_load_explicit(&cached, memory_order_relaxed);
    if (b == 0) {
        for (int i = 0; i < 8; i++) {
            char path[64];
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
            FILE *f = fopen(path, "r");
            if (f == NULL)
                break;
            long v = 0;
            char unit = 0;
            if (fscanf(f, "%ld%c", &v, &unit) == 2 && v > 0 && v < (1L << 30)) {
                const long bytes = unit == 'M' ? v << 20 : unit == 'K' ? v << 10 : v;
                b = bytes > b ? bytes : b;
            }
            fclose(f);
        }
        if (b <= 0)
            b = 8L << 20;
        atomic_store_explicit(&cached, b, memory_order_relaxed);
    }
    return (size_t)b;
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
    /* Every block of tiles runs its 36 GEMMs against the whole transformed kernel (forward,
     * backward-input) or updates the whole partial sum (backward-kernel: read and written):
     * when that does not stay in half the last-level cache, each block streams it from memory
     * and the direct kernels win (512 channels: 2-8 times faster on Zen 5, any image size) */
    if (mul_sat(ub, kind == CONV_BWD_K ? 4 : 2) > llc_bytes())
        return 0;
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
size_t sx__conv_dense_ws(const conv_geom *g, bool best)
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
size_t sx__conv_dense_ws_query(const int64_t *xs, const int64_t *ks, const sx_conv2d_params *p,
                               bool best)
{
    if (xs == NULL || ks == NULL)
        return 0;
    char saved[512];
    snprintf(saved, sizeof saved, "%s", sx_last_error());
    conv_geom g;
    sx_status s = sx__conv_dense_geom("sx_conv2d_workspace", "x", xs, "k", ks, p, &g);
    (void)sx_error(SX_OK, "%s", saved);
    if (s != SX_OK)
        return 0;
    return sx__conv_dense_ws(&g, best);
}

size_t sx__conv_general_ws(const gx_geom *g, bool best, const int64_t *xs_conv, const int64_t *ks)
{
    sx_conv2d_params old;
    gx_path path = sx__conv_general_path(g, &old);
    if (path == GX_DENSE)
        return sx__conv_dense_ws_query(xs_conv, ks, &old, best);
    if (path != GX_IM2COL || g->n * g->oh * g->ow == 0 || g->kdim == 0 || g->f == 0)
        return 0;
    const size_t row = mul_sat(mul_sat((size_t)g->ow, (size_t)g->kdim), 8);
    size_t rows = 1;
    if (best) {
        rows = CONV_UNIT_BYTES / row;
        rows = rows < 1 ? 1 : rows;
        rows = rows < (size_t)(g->n * g->oh) ? rows : (size_t)(g->n * g->oh);
    }
    size_t b = mul_sat(rows, row);
    return b > SIZE_MAX - CONV_WS_ALIGN ? SIZE_MAX : b + CONV_WS_ALIGN;
}

sx_status sx__conv_plan_make(const char *who, const conv_geom *g, conv_kind kind, sx_dtype dt,
                             void *ws, size_t ws_bytes, conv_plan *pl)
{
    size_t need = sx__conv_dense_ws(g, false);
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

/* The program over elements [e0, e0 + len) of y, in place: views of y and of the operands of
 * y's size at e0; the repeated ones whole (e0 and len are multiples of their sizes: per_unit, or
 * the whole of y). Checked before the convolution ran, so it cannot fail. */
void sx__conv_epi_run(const conv_epi *e, int64_t e0, int64_t len)
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
            sx__conv_epi_run(e, p0 * g->ow * g->f, np * g->ow * g->f);
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
    return kind == CONV_FWD ? (d ? sx__conv_im2col_fwd_unit_f64 : sx__conv_im2col_fwd_unit_f32)
           : kind == CONV_BWD_K
               ? (d ? sx__conv_im2col_bwdk_unit_f64 : sx__conv_im2col_bwdk_unit_f32)
               : (d ? sx__conv_im2col_bwdi_unit_f64 : sx__conv_im2col_bwdi_unit_f32);
}

/* Before the units of a Winograd forward or backward-input: the transformed kernel. */
static void wino_prep(const conv_job *jb, bool bwdi)
{
    vec_kernels(jb->dt)->wino_prep(jb, bwdi);
}

void sx__conv_run(const conv_geom *g, const conv_plan *pl, conv_kind kind, sx_dtype dt,
                  const void *in0, const void *in1, void *out, const conv_epi *epi, bool stream)
{
    if (pl->path == PATH_XCOL) { /* backward-input's GEMM reads dy (in1) first */
        if (kind == CONV_BWD_IN)
            sx__conv_xcol_gemm(g, kind, dt, in1, in0, out);
        else
            sx__conv_xcol_gemm(g, kind, dt, in0, in1, out);
        return;
    }
    conv_job jb = {g, pl, in0, in1, out, dt, false, epi, stream};
    if (pl->path == PATH_WINO && kind != CONV_BWD_K)
        wino_prep(&jb, kind == CONV_BWD_IN);
    run_units(&jb, kind, unit_of(kind, pl->path, dt), conv_macs(g));
}
