/* conv_im2col.c: convolution by im2col + GEMM. The dense plan's units (conv_im2col_tmpl.h): a
 * unit's im2col block (kh runs of kw * c contiguous elements per output pixel) and sx__gemm:
 * y = col @ k, dk += col^T @ dy, dcol = dy @ k^T then col2im; they serve what the direct and
 * Winograd kernels do not (other CPUs, strided backward-input with few channels, very large
 * kdim). x as its own im2col matrix (1x1 at stride 1, or a window covering the image): one
 * GEMM. A general geometry's groups (dilated, grouped, other paddings): one GEMM per group on
 * x itself for 1x1 kernels at stride 1 without padding, else per group the im2col block of a
 * band of output rows and a GEMM. */
#include "conv_impl.h"
#include "tensor_impl.h"

#include <string.h>

/* Bytes of one general im2col block the plan aims at (as the dense units: it stays in L2). */
#define GX_UNIT_BYTES ((size_t)768 << 10)
/* Workspace alignment (the sizes include the slack). */
#define GX_ALIGN 64
/* GEMM rows per call when the im2col matrix is x itself (sx__gemm takes up to INT_MAX). */
#define GX_GEMM_ROWS ((int64_t)1 << 30)

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

/* When x is the im2col matrix: one GEMM over all n * oh * ow rows, in pieces of at most
 * CONV_GEMM_ROWS (sx__gemm takes dimensions up to INT_MAX); backward-kernel adds the pieces in
 * order. a is x (forward, backward-kernel) or dy (backward-input); out is y, dx or dk. */
#define CONV_GEMM_ROWS ((int64_t)1 << 30)
void sx__conv_xcol_gemm(const conv_geom *g, conv_kind kind, sx_dtype dt, const void *a,
                        const void *b, void *out)
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

static const char *at(const void *p, int64_t elems, size_t esz)
{
    return (const char *)p + (size_t)elems * esz;
}

static char *atw(void *p, int64_t elems, size_t esz)
{
    return (char *)p + (size_t)elems * esz;
}

void sx__conv_group_gemm(const gx_geom *g, gx_path path, gx_kind kind, sx_dtype dt, const void *in0,
                         const void *in1, void *out, void *ws, size_t ws_bytes, bool par)
{
    const size_t esz = sx_dtype_size(dt);
    const bool d = dt == SX_F64;
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
