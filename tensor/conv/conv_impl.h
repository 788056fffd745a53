/* conv_impl.h: what the convolution's files share (tensor/conv/, never installed). The files,
 * top down (each calls only files below it):
 *   conv.c            the public entry points: checks, then the plan or the general kernels
 *   conv_plan.c       choosing the implementation of a dense convolution, cutting it into units
 *                     and running them; the workspace sizes of every geometry
 *   conv_general.c    the geometry of every parameter set (dilation, groups, padding modes, the
 *                     transposed convolution), which sets run dense, and the run of the others
 *   conv_winograd.c   Winograd F(2x2, 5x5) and F(4x4, 3x3) units (per instruction set)
 *   conv_direct.c     the direct kernels' units (per instruction set)
 *   conv_im2col.c     im2col + GEMM: dense units, x as its own im2col matrix, grouped GEMMs
 *   conv_depthwise.c  depthwise and small-group kernels (direct per instruction set, and loops)
 */
#ifndef SX_CONV_IMPL_H
#define SX_CONV_IMPL_H

#include "conv_depthwise.h"
#include "simd.h"
#include "sx_tensor.h"

/* Direct backward-input's register tile: CONV_IP elements (the unroll pragmas in
 * conv_direct_tmpl.h match); the other tiles are sized per instruction set (conv_vec.h). */
#define CONV_IP 8
/* Elements of the prepared kernel (flipped or rotated) at the start of a direct backward-input
 * slot, rounded up so that the band after it stays aligned. */
#define CONV_KF_ELEMS(g) (((g)->kdim * (g)->f + 15) / 16 * 16)

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
static inline conv_geom wino_geom(const conv_geom *g, bool bwdi)
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
static inline int64_t wino_band_elems(const conv_geom *gf, int64_t rpu)
{
    const int64_t m = wino_m(gf);
    return (((rpu + m - 1) / m * m + 6 - m) * gf->wp * gf->c + 15) / 16 * 16;
}

/* The distance in elements of esz bytes between the 36 matrices (one per point pair) of n
 * elements each that the Winograd data holds: whole cache lines, and an odd number of them, so
 * that the 36 elements of one tile (read or written together) fall into different cache sets
 * (a power-of-two distance such as 16 tiles of 64 floats would put them all into one). */
static inline int64_t wino_ld(int64_t n, size_t esz)
{
    const int64_t line = 64 / (int64_t)esz;
    const int64_t e = (n + line - 1) / line * line;
    return e / line % 2 == 0 ? e + line : e;
}

/* Elements of the transformed kernel (36, c, f), or of one transformed partial sum of dk. */
static inline int64_t wino_u_elems(const conv_geom *g, size_t esz)
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
/* A forward pass's epilogue (sx_tensor_conv2d_fused_out): the program over operands in[0] = y,
 * in[1..n_in). per_unit: every repeated operand's size divides a row of y, so each unit's rows
 * (whole rows) can run it alone; else it runs over all of y at the end. */
typedef struct conv_epi {
    const sx_fused_prog *prog;
    int n_in;
    const sx_tensor *in[SX_FUSED_MAX_OPERANDS];
    bool per_unit;
} conv_epi;

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

/* Output row band of direct or Winograd unit u (image, first row, rows). */
static inline void conv_unit_band(const conv_plan *pl, int64_t rows, int64_t u, int64_t *img,
                                  int64_t *r0, int64_t *nr)
{
    *img = u / pl->bands;
    *r0 = (u % pl->bands) * pl->rpu;
    *nr = rows - *r0 < pl->rpu ? rows - *r0 : pl->rpu;
}

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

/* ---------------------------------------------------------------- conv_general.c */

/* Do conv_plan.c's dense kernels run these parameters, x of shape xs and k of shape ks: one
 * group, no dilation, no output padding, and VALID, SAME_UPPER or explicit pads each smaller
 * than the window along its axis? xs or ks NULL: only VALID and SAME_UPPER count. NULL p counts
 * (the dense checks report it). */
bool sx__conv_dense(const sx_conv2d_params *p, const int64_t *xs, const int64_t *ks);
/* Validate a dense parameter set and the shapes of x (n,h,w,c) and k (kh,kw,c,f), and fill g.
 * xname and kname name the tensors that carry those shapes in the caller (e.g. "dx", "dk"). */
sx_status sx__conv_dense_geom(const char *who, const char *xname, const int64_t *xs,
                              const char *kname, const int64_t *ks, const sx_conv2d_params *p,
                              conv_geom *g);
/* The geometry of any conv2d parameter set, and of the conv2d whose backward-input the
 * transposed convolution of x with k is. */
sx_status sx__conv_geom(const char *who, const char *xname, const int64_t *xs, const char *kname,
                        const int64_t *ks, const sx_conv2d_params *p, gx_geom *g);
sx_status sx__conv_geom_transposed(const char *who, const char *xname, const int64_t *xs,
                                   const char *kname, const int64_t *ks, const sx_conv2d_params *p,
                                   gx_geom *g);
/* The implementation of a general geometry; for GX_DENSE the dense parameters in *dense. */
gx_path sx__conv_general_path(const gx_geom *g, sx_conv2d_params *dense);
/* Run one kind of kernel on a general (not dense) geometry whose tensors are valid and
 * non-empty: in0, in1, out as in gx_job. */
void sx__conv_general_run(const gx_geom *g, gx_path path, gx_kind kind, sx_dtype dt,
                          const void *in0, const void *in1, void *out, void *ws, size_t ws_bytes);

/* ---------------------------------------------------------------- conv_plan.c */

/* The workspace of a dense geometry for every kernel and both dtypes: the largest best (or
 * smallest) plan. */
size_t sx__conv_dense_ws(const conv_geom *g, bool best);
/* The same from shapes and parameters; invalid input gives 0 and keeps the last error. */
size_t sx__conv_dense_ws_query(const int64_t *xs, const int64_t *ks, const sx_conv2d_params *p,
                               bool best);
/* The workspace of a general geometry (dense: the dense kernels'), best or least; xs and ks the
 * shapes of its conv2d's x and k. */
size_t sx__conv_general_ws(const gx_geom *g, bool best, const int64_t *xs, const int64_t *ks);
/* Check the workspace against the documented minimum and plan the call. */
sx_status sx__conv_plan_make(const char *who, const conv_geom *g, conv_kind kind, sx_dtype dt,
                             void *ws, size_t ws_bytes, conv_plan *pl);
/* Run a planned dense kernel on non-empty tensors: in0, in1, out as in conv_job; epi (forward
 * only, or NULL) run on each unit's rows; stream: Winograd may write out past the caches. */
void sx__conv_run(const conv_geom *g, const conv_plan *pl, conv_kind kind, sx_dtype dt,
                  const void *in0, const void *in1, void *out, const conv_epi *epi, bool stream);
/* The epilogue over elements [e0, e0 + len) of y (checked before: it cannot fail). */
void sx__conv_epi_run(const conv_epi *e, int64_t e0, int64_t len);

/* ---------------------------------------------------------------- the kernels' files */

/* conv_im2col.c: the im2col + GEMM units of a dense plan, per dtype; the GEMM over x when it is
 * its own im2col matrix (a is x or dy, b is k or dy, out is y, dx or dk); a general geometry's
 * grouped GEMMs (1x1: x itself; else im2col per band and group), par: may use the pool. */
bool sx__conv_im2col_fwd_unit_f32(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                  bool first);
bool sx__conv_im2col_bwdi_unit_f32(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                   bool first);
bool sx__conv_im2col_bwdk_unit_f32(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                   bool first);
bool sx__conv_im2col_fwd_unit_f64(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                  bool first);
bool sx__conv_im2col_bwdi_unit_f64(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                   bool first);
bool sx__conv_im2col_bwdk_unit_f64(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                   bool first);
void sx__conv_xcol_gemm(const conv_geom *g, conv_kind kind, sx_dtype dt, const void *a,
                        const void *b, void *out);
void sx__conv_group_gemm(const gx_geom *g, gx_path path, gx_kind kind, sx_dtype dt, const void *in0,
                         const void *in1, void *out, void *ws, size_t ws_bytes, bool par);

/* conv_depthwise.c: a general geometry's depthwise (groups = c) or small-group convolution:
 * the direct kernels when they serve it, else for depthwise (`loops`) the portable loops.
 * Returns false, touching nothing, when neither ran. */
bool sx__conv_depthwise_run(const gx_geom *g, gx_kind kind, sx_dtype dt, const void *in0,
                            const void *in1, void *out, bool par, bool loops);

/* conv_direct.c and conv_winograd.c: the vector units of each instruction set (SFX f32_avx2,
 * f64_avx2, f32_avx512, f64_avx512 on x86-64; f32_neon, f64_neon on AArch64), and the direct
 * pieces Winograd reuses: the padded band of x, a band's backward-kernel sums, the rotated
 * kernel. */
#define CONV_PCAT_(a, b) a##_##b
#define CONV_PCAT(a, b) CONV_PCAT_(a, b)
#define CONV_VEC_PROTOS(T, SFX)                                                                    \
    bool CONV_PCAT(sx__conv_direct_fwd_unit, SFX)(const conv_job *jb, int64_t u, void *slot,       \
                                                  bool fresh, void *acc, bool first);              \
    bool CONV_PCAT(sx__conv_direct_bwdi_unit, SFX)(const conv_job *jb, int64_t u, void *slot,      \
                                                   bool fresh, void *acc, bool first);             \
    bool CONV_PCAT(sx__conv_direct_bwdk_unit, SFX)(const conv_job *jb, int64_t u, void *slot,      \
                                                   bool fresh, void *acc, bool first);             \
    void CONV_PCAT(sx__conv_pad_x, SFX)(const conv_geom *g, const T *x, int64_t img, int64_t oy0,  \
                                        int64_t nrows, int64_t maxrows, T *xp, bool fresh);        \
    void CONV_PCAT(sx__conv_direct_bwdk_band, SFX)(const conv_geom *g, const T *xp, const T *dy,   \
                                                   int64_t nrows, T *dk, bool first);              \
    void CONV_PCAT(sx__conv_rot_k, SFX)(const conv_geom *g, const T *k, T *kr, int64_t f0,         \
                                        int64_t f1);                                               \
    bool CONV_PCAT(sx__conv_wino_fwd_unit, SFX)(const conv_job *jb, int64_t u, void *slot,         \
                                                bool fresh, void *acc, bool first);                \
    bool CONV_PCAT(sx__conv_wino_bwdi_unit, SFX)(const conv_job *jb, int64_t u, void *slot,        \
                                                 bool fresh, void *acc, bool first);               \
    bool CONV_PCAT(sx__conv_wino_bwdk_unit, SFX)(const conv_job *jb, int64_t u, void *slot,        \
                                                 bool fresh, void *acc, bool first);               \
    void CONV_PCAT(sx__conv_wino_prep, SFX)(const conv_job *jb, bool bwdi);                        \
    void CONV_PCAT(sx__conv_wino_finish, SFX)(const conv_job *jb, const void *parts,               \
                                              int64_t groups, size_t pstride);
#if SIMD_HAVE_X86
#define CONV_VEC_ISAS 1
CONV_VEC_PROTOS(float, f32_avx2)
CONV_VEC_PROTOS(double, f64_avx2)
CONV_VEC_PROTOS(float, f32_avx512)
CONV_VEC_PROTOS(double, f64_avx512)
#endif
#if SIMD_HAVE_NEON
#define CONV_VEC_NEON 1
CONV_VEC_PROTOS(float, f32_neon)
CONV_VEC_PROTOS(double, f64_neon)
#endif

#endif
