/* conv_winograd_tmpl.h: Winograd's F(2x2, 5x5) and F(4x4, 3x3) for conv_winograd.c (the method
 * is described in conv_plan.c, with the thresholds), written once over simd.h's vectors and
 * included (by conv_vec.h) once per instruction set and dtype. It reads the padded bands of
 * conv_direct.c (sx__conv_pad_x) and runs backward-kernel's one-tile cases and the rotated
 * kernel with its functions of the same set. */
#define CONV_CAT_(a, b) a##_##b
#define CONV_CAT(a, b) CONV_CAT_(a, b)
#define FN(name) CONV_CAT(name, SFX)

/* The 1-d transforms of F(2, 5) with the points 0, 1, -1, 2, -1/2, infinity (see conv_plan.c),
 * derived by Toom-Cook and checked in exact arithmetic; each is applied along both axes of a
 * tile, on vectors of VL independent lanes (channels):
 *   B^T = [2 3 -4 -3 2 0; 0 2 5 1 -2 0; 0 2 1 -5 2 0; 0 -1 -2 1 2 0; 0 -2 1 2 -1 0;
 *          0 2 3 -4 -3 2]
 *   G = [1/2 0 0 0 0; 1/6 1/6 1/6 1/6 1/6; 1/6 -1/6 1/6 -1/6 1/6;
 *        1/30 1/15 2/15 4/15 8/15; 16/15 -8/15 4/15 -2/15 1/15; 0 0 0 0 1/2]
 *   A^T = [1 1 1 1 1 0; 0 1 -1 2 -1/2 1]
 * y = A^T [(G k) . (B^T d)] is the correlation of d (6) with k (5) at two positions, and
 * dk = G^T [(A e) . (B^T d)] that of d with e (2) at five (backward-kernel).
 * r (6) = B^T d (6): the input tile. */
static inline __attribute__((always_inline)) VATTR void FN(wino_bt)(V *r, const V *d)
{
    const V c2 = V_SET1((T)2), c3 = V_SET1((T)3), c4 = V_SET1((T)4);
    const V a = V_SUB(d[1], d[3]), b = V_SUB(d[2], d[4]);
    const V s = V_FMA(c2, a, V_MUL(c3, d[2])), t = V_FMA(c2, b, V_MUL(c3, d[3]));
    r[0] = V_FMA(c2, V_ADD(d[0], d[4]), V_FNMA(c4, d[2], V_MUL(c3, a)));
    r[1] = V_ADD(s, t);
    r[2] = V_SUB(s, t);
    r[3] = V_FNMS(c2, b, a);
    r[4] = V_FNMA(c2, a, b);
    r[5] = V_FMA(c2, V_ADD(d[1], d[5]), V_FNMA(c4, d[3], V_MUL(c3, b)));
}

/* r (2) = A^T m (6): the outputs of a tile. */
static inline __attribute__((always_inline)) VATTR void FN(wino_at)(V *r, const V *m)
{
    r[0] = V_ADD(V_ADD(m[0], V_ADD(m[1], m[2])), V_ADD(m[3], m[4]));
    r[1] = V_ADD(V_FMA(V_SET1((T)2), m[3], V_FNMA(V_SET1((T)0.5), m[4], V_SUB(m[1], m[2]))), m[5]);
}

/* r (6) = A e (2): a tile of dy (backward-kernel). */
static inline __attribute__((always_inline)) VATTR void FN(wino_a)(V *r, V e0, V e1)
{
    r[0] = e0;
    r[1] = V_ADD(e0, e1);
    r[2] = V_SUB(e0, e1);
    r[3] = V_FMA(V_SET1((T)2), e1, e0);
    r[4] = V_FNMA(V_SET1((T)0.5), e1, e0);
    r[5] = e1;
}

/* r (6) = G g (5): the kernel. */
static inline __attribute__((always_inline)) VATTR void FN(wino_g)(V *r, const V *g)
{
    const V c2 = V_SET1((T)2), sixth = V_SET1((T)1 / 6);
    const V e = V_ADD(V_ADD(g[0], g[2]), g[4]), o = V_ADD(g[1], g[3]);
    V h = V_FMA(c2, V_FMA(c2, V_FMA(c2, V_FMA(c2, g[4], g[3]), g[2]), g[1]), g[0]);
    V l = V_FNMA(c2, V_FNMA(c2, V_FNMA(c2, V_FNMA(c2, g[0], g[1]), g[2]), g[3]), g[4]);
    r[0] = V_MUL(V_SET1((T)0.5), g[0]);
    r[1] = V_MUL(sixth, V_ADD(e, o));
    r[2] = V_MUL(sixth, V_SUB(e, o));
    r[3] = V_MUL(V_SET1((T)1 / 30), h);
    r[4] = V_MUL(V_SET1((T)1 / 15), l);
    r[5] = V_MUL(V_SET1((T)0.5), g[4]);
}

/* r (5) = G^T w (6): the transformed kernel gradient back to taps. */
static inline __attribute__((always_inline)) VATTR void FN(wino_gt)(V *r, const V *w)
{
    const V a = V_MUL(V_SET1((T)1 / 6), V_ADD(w[1], w[2]));
    const V b = V_MUL(V_SET1((T)1 / 6), V_SUB(w[1], w[2]));
    const V p = V_MUL(V_SET1((T)1 / 15), w[3]), q = V_MUL(V_SET1((T)1 / 15), w[4]);
    const V half = V_SET1((T)0.5), c2 = V_SET1((T)2), c4 = V_SET1((T)4), c8 = V_SET1((T)8);
    r[0] = V_FMA(half, V_ADD(w[0], p), V_FMA(V_SET1((T)16), q, a));
    r[1] = V_FNMA(c8, q, V_ADD(b, p));
    r[2] = V_FMA(c2, p, V_FMA(c4, q, a));
    r[3] = V_FMA(c4, p, V_FNMA(c2, q, b));
    r[4] = V_FMA(half, w[5], V_FMA(c8, p, V_ADD(a, q)));
}
/* F(4, 3) on the same points and the same B^T (so the input tiles of both are transformed
 * alike, only their stride differs: 4 instead of 2), also derived by Toom-Cook and checked in
 * exact arithmetic; G's rows are those of F(2, 5) cut to three taps:
 *   G = [1/2 0 0; 1/6 1/6 1/6; 1/6 -1/6 1/6; 1/30 1/15 2/15; 16/15 -8/15 4/15; 0 0 1/2]
 *   A^T = [1 1 1 1 1 0; 0 1 -1 2 -1/2 0; 0 1 1 4 1/4 0; 0 1 -1 8 -1/8 1]
 * r (4) = A^T m (6). */
static inline __attribute__((always_inline)) VATTR void FN(wino_at4)(V *r, const V *m)
{
    const V p = V_ADD(m[1], m[2]), q = V_SUB(m[1], m[2]);
    r[0] = V_ADD(V_ADD(m[0], p), V_ADD(m[3], m[4]));
    r[1] = V_FMA(V_SET1((T)2), m[3], V_FNMA(V_SET1((T)0.5), m[4], q));
    r[2] = V_FMA(V_SET1((T)4), m[3], V_FMA(V_SET1((T)0.25), m[4], p));
    r[3] = V_ADD(V_FMA(V_SET1((T)8), m[3], V_FNMA(V_SET1((T)0.125), m[4], q)), m[5]);
}

/* r (6) = A e (4): a 4-element column or row of a dy block (backward-kernel). */
static inline __attribute__((always_inline)) VATTR void FN(wino_a4)(V *r, const V *e)
{
    const V s = V_ADD(e[0], e[2]), t = V_ADD(e[1], e[3]);
    r[0] = e[0];
    r[1] = V_ADD(s, t);
    r[2] = V_SUB(s, t);
    r[3] = V_FMA(V_SET1((T)8), e[3], V_FMA(V_SET1((T)4), e[2], V_FMA(V_SET1((T)2), e[1], e[0])));
    r[4] = V_FNMA(V_SET1((T)0.125), e[3],
                  V_FMA(V_SET1((T)0.25), e[2], V_FNMA(V_SET1((T)0.5), e[1], e[0])));
    r[5] = e[3];
}

/* r (6) = G g (3): the kernel of F(4, 3). */
static inline __attribute__((always_inline)) VATTR void FN(wino_g3)(V *r, const V *g)
{
    const V sixth = V_SET1((T)1 / 6), e = V_ADD(g[0], g[2]);
    r[0] = V_MUL(V_SET1((T)0.5), g[0]);
    r[1] = V_MUL(sixth, V_ADD(e, g[1]));
    r[2] = V_MUL(sixth, V_SUB(e, g[1]));
    r[3] = V_MUL(V_SET1((T)1 / 30), V_FMA(V_SET1((T)4), g[2], V_FMA(V_SET1((T)2), g[1], g[0])));
    r[4] = V_MUL(V_SET1((T)4 / 15), V_FMA(V_SET1((T)4), g[0], V_FNMA(V_SET1((T)2), g[1], g[2])));
    r[5] = V_MUL(V_SET1((T)0.5), g[2]);
}

/* r (3) = G^T w (6): F(4, 3)'s transformed kernel gradient back to taps. */
static inline __attribute__((always_inline)) VATTR void FN(wino_gt3)(V *r, const V *w)
{
    const V a = V_MUL(V_SET1((T)1 / 6), V_ADD(w[1], w[2]));
    const V b = V_MUL(V_SET1((T)1 / 6), V_SUB(w[1], w[2]));
    const V p = V_MUL(V_SET1((T)1 / 15), w[3]), q = V_MUL(V_SET1((T)4 / 15), w[4]);
    r[0] = V_FMA(V_SET1((T)0.5), V_ADD(w[0], p), V_FMA(V_SET1((T)4), q, a));
    r[1] = V_FNMA(V_SET1((T)2), q, V_ADD(b, p));
    r[2] = V_FMA(V_SET1((T)0.5), w[5], V_FMA(V_SET1((T)2), p, V_ADD(a, q)));
}

/* The 1-d kernel transform and its adjoint for r = 5 (F(2, 5)) or 3 (F(4, 3)); the output
 * transform A^T and the dy transform A for m = 2 or 4 outputs. */
static inline __attribute__((always_inline)) VATTR void FN(wino_gr)(V *o, const V *g, const int r)
{
    if (r == 5)
        FN(wino_g)(o, g);
    else
        FN(wino_g3)(o, g);
}

static inline __attribute__((always_inline)) VATTR void FN(wino_gtr)(V *o, const V *w, const int r)
{
    if (r == 5)
        FN(wino_gt)(o, w);
    else
        FN(wino_gt3)(o, w);
}

static inline __attribute__((always_inline)) VATTR void FN(wino_atm)(V *o, const V *mm, const int m)
{
    if (m == 2)
        FN(wino_at)(o, mm);
    else
        FN(wino_at4)(o, mm);
}

static inline __attribute__((always_inline)) VATTR void FN(wino_am)(V *o, const V *e, const int m)
{
    if (m == 2)
        FN(wino_a)(o, e[0], e[1]);
    else
        FN(wino_a4)(o, e);
}

/* u (36, cin, cout) = G g G^T for every (cin, cout) pair of k (r, r, cin, cout): matrix xi =
 * 6 i + j of the transformed 6x6 kernels, us elements apart. Inlined with r constant. */
static inline __attribute__((always_inline)) VATTR void FN(wino_kernel_r)(const T *k, int64_t cin,
                                                                          int64_t cout, int64_t us,
                                                                          T *u, int64_t c0,
                                                                          int64_t c1, const int r)
{
    for (int64_t ci = c0; ci < c1; ci++)
        for (int64_t f0 = 0; f0 < cout; f0 += VL) {
            const VMASK m = V_MASK_N(cout - f0);
            V t[6][5];
#pragma GCC unroll 5
            for (int kx = 0; kx < r; kx++) {
                V g[5], o[6];
#pragma GCC unroll 5
                for (int ky = 0; ky < r; ky++)
                    g[ky] = V_MLOAD(m, k + ((ky * r + kx) * cin + ci) * cout + f0);
                FN(wino_gr)(o, g, r);
#pragma GCC unroll 6
                for (int i = 0; i < 6; i++)
                    t[i][kx] = o[i];
            }
#pragma GCC unroll 6
            for (int i = 0; i < 6; i++) {
                V o[6];
                FN(wino_gr)(o, t[i], r);
#pragma GCC unroll 6
                for (int j = 0; j < 6; j++)
                    V_MSTORE(u + (i * 6 + j) * us + ci * cout + f0, m, o[j]);
            }
        }
}

/* The same for the input channels [c0, c1) of k. */
static VATTR void FN(wino_kernel)(const T *k, int64_t r, int64_t cin, int64_t cout, int64_t us,
                                  T *u, int64_t c0, int64_t c1)
{
    if (r == 5)
        FN(wino_kernel_r)(k, cin, cout, us, u, c0, c1, 5);
    else
        FN(wino_kernel_r)(k, cin, cout, us, u, c0, c1, 3);
}

/* v (36, nt, c; matrices vs elements apart) = B^T d B of tiles [t0, t0 + nt) of a band: tile t
 * (tile row t / tw, column t % tw) is the 6x6 window of the padded band xp (rows of wp * c) at
 * (m (t / tw), m (t % tw)), m = 2 (F(2x2, 5x5)) or 4 (F(4x4, 3x3)). */
static VATTR void FN(wino_in)(const T *xp, int64_t wp, int64_t c, int64_t m, int64_t tw, int64_t t0,
                              int64_t nt, int64_t vs, T *v)
{
    for (int64_t q = 0; q < nt; q++) {
        const int64_t ty = (t0 + q) / tw, tx = (t0 + q) % tw;
        const T *base = xp + (m * ty * wp + m * tx) * c;
        for (int64_t c0 = 0; c0 < c; c0 += VL) {
            const VMASK mk = V_MASK_N(c - c0);
            V t[6][6];
#pragma GCC unroll 6
            for (int j = 0; j < 6; j++) {
                V d[6], r[6];
#pragma GCC unroll 6
                for (int i = 0; i < 6; i++)
                    d[i] = V_MLOAD(mk, base + (i * wp + j) * c + c0);
                FN(wino_bt)(r, d);
#pragma GCC unroll 6
                for (int i = 0; i < 6; i++)
                    t[i][j] = r[i];
            }
#pragma GCC unroll 6
            for (int i = 0; i < 6; i++) {
                V r[6];
                FN(wino_bt)(r, t[i]);
#pragma GCC unroll 6
                for (int j = 0; j < 6; j++)
                    V_MSTORE(v + (i * 6 + j) * vs + q * c + c0, mk, r[j]);
            }
        }
    }
}

/* The outputs of tiles [t0, t0 + nt) of a band of nr output rows of width ow: A^T M A of each
 * tile's products mm (36, nt, f; matrices ms elements apart), written to rows m ty .. m ty +
 * m - 1 and columns m tx .. m tx + m - 1 of y (the band's first row) where they exist. Inlined
 * with m constant. */
static inline __attribute__((always_inline)) VATTR void
FN(wino_out_m)(const T *mm, int64_t f, int64_t tw, int64_t ow, int64_t nr, int64_t t0, int64_t nt,
               int64_t ms, T *y, bool stream, const int m)
{
    for (int64_t q = 0; q < nt; q++) {
        const int64_t ty = (t0 + q) / tw, tx = (t0 + q) % tw;
        const int64_t rows = nr - m * ty < m ? nr - m * ty : m;
        const int64_t cols = ow - m * tx < m ? ow - m * tx : m;
        T *yt = y + (m * ty * ow + m * tx) * f;
        for (int64_t f0 = 0; f0 < f; f0 += VL) {
            const VMASK mk = V_MASK_N(f - f0);
            V s[4][6];
#pragma GCC unroll 6
            for (int j = 0; j < 6; j++) {
                V col[6], r[4];
#pragma GCC unroll 6
                for (int i = 0; i < 6; i++)
                    col[i] = V_MLOAD(mk, mm + (i * 6 + j) * ms + q * f + f0);
                FN(wino_atm)(r, col, m);
#pragma GCC unroll 4
                for (int a = 0; a < m; a++)
                    s[a][j] = r[a];
            }
#pragma GCC unroll 4
            for (int a = 0; a < m; a++) {
                V r[4];
                FN(wino_atm)(r, s[a], m);
                if (a < rows && stream && f0 + VL <= f) {
#pragma GCC unroll 4
                    for (int b = 0; b < m; b++)
                        if (b < cols)
                            V_STREAM(yt + (a * ow + b) * f + f0, r[b]);
                } else if (a < rows) {
#pragma GCC unroll 4
                    for (int b = 0; b < m; b++)
                        if (b < cols)
                            V_MSTORE(yt + (a * ow + b) * f + f0, mk, r[b]);
                }
            }
        }
    }
}

static VATTR void FN(wino_out)(const T *mm, int64_t f, int64_t m, int64_t tw, int64_t ow,
                               int64_t nr, int64_t t0, int64_t nt, int64_t ms, T *y, bool stream)
{
    if (m == 2)
        FN(wino_out_m)(mm, f, tw, ow, nr, t0, nt, ms, y, stream, 2);
    else
        FN(wino_out_m)(mm, f, tw, ow, nr, t0, nt, ms, y, stream, 4);
}

/* d (36, nt, f; matrices ds elements apart) = A e A^T of the m x m blocks e of dy (rows m ty ..
 * m ty + m - 1 and columns m tx .. m tx + m - 1 from the band's first row dy; zero beyond its nr
 * rows or ow columns) of tiles [t0, t0 + nt). Inlined with m constant. */
static inline __attribute__((always_inline)) VATTR void
FN(wino_dy_m)(const T *dy, int64_t f, int64_t tw, int64_t ow, int64_t nr, int64_t t0, int64_t nt,
              int64_t ds, T *d, const int m)
{
    for (int64_t q = 0; q < nt; q++) {
        const int64_t ty = (t0 + q) / tw, tx = (t0 + q) % tw;
        const int64_t rows = nr - m * ty < m ? nr - m * ty : m;
        const int64_t cols = ow - m * tx < m ? ow - m * tx : m;
        const T *et = dy + (m * ty * ow + m * tx) * f;
        for (int64_t f0 = 0; f0 < f; f0 += VL) {
            const VMASK mk = V_MASK_N(f - f0);
            V e[4][6]; /* e[b] = A (column b of the block) */
#pragma GCC unroll 4
            for (int b = 0; b < m; b++) {
                V col[4];
#pragma GCC unroll 4
                for (int a = 0; a < m; a++)
                    col[a] =
                        b < cols && a < rows ? V_MLOAD(mk, et + (a * ow + b) * f + f0) : V_ZERO();
                FN(wino_am)(e[b], col, m);
            }
#pragma GCC unroll 6
            for (int k = 0; k < 6; k++) {
                V row[4], r[6];
#pragma GCC unroll 4
                for (int b = 0; b < m; b++)
                    row[b] = e[b][k];
                FN(wino_am)(r, row, m);
#pragma GCC unroll 6
                for (int l = 0; l < 6; l++)
                    V_MSTORE(d + (k * 6 + l) * ds + q * f + f0, mk, r[l]);
            }
        }
    }
}

static VATTR void FN(wino_dy)(const T *dy, int64_t f, int64_t m, int64_t tw, int64_t ow, int64_t nr,
                              int64_t t0, int64_t nt, int64_t ds, T *d)
{
    if (m == 2)
        FN(wino_dy_m)(dy, f, tw, ow, nr, t0, nt, ds, d, 2);
    else
        FN(wino_dy_m)(dy, f, tw, ow, nr, t0, nt, ds, d, 4);
}

/* dk (r, r, c, f) rows ci in [c0, c1) = G^T w G, w (36, c, f; matrices us elements apart) the
 * sum of the np partial sums at w0 (ps elements apart), added in order. Inlined with r
 * constant. */
static inline __attribute__((always_inline)) VATTR void
FN(wino_kgrad_r)(const T *w0, int64_t np, size_t ps, int64_t us, int64_t c, int64_t f, int64_t c0,
                 int64_t c1, T *dk, const int r)
{
    for (int64_t ci = c0; ci < c1; ci++)
        for (int64_t f0 = 0; f0 < f; f0 += VL) {
            const VMASK m = V_MASK_N(f - f0);
            V s[5][6];
#pragma GCC unroll 6
            for (int j = 0; j < 6; j++) {
                V col[6], o[5];
#pragma GCC unroll 6
                for (int i = 0; i < 6; i++) {
                    const T *p = w0 + (i * 6 + j) * us + ci * f + f0;
                    col[i] = V_MLOAD(m, p);
                    for (int64_t g = 1; g < np; g++)
                        col[i] = V_ADD(col[i], V_MLOAD(m, p + (size_t)g * ps));
                }
                FN(wino_gtr)(o, col, r);
#pragma GCC unroll 5
                for (int ky = 0; ky < r; ky++)
                    s[ky][j] = o[ky];
            }
#pragma GCC unroll 5
            for (int ky = 0; ky < r; ky++) {
                V o[5];
                FN(wino_gtr)(o, s[ky], r);
#pragma GCC unroll 5
                for (int kx = 0; kx < r; kx++)
                    V_MSTORE(dk + ((ky * r + kx) * c + ci) * f + f0, m, o[kx]);
            }
        }
}

static VATTR void FN(wino_kgrad)(const T *w0, int64_t np, size_t ps, int64_t us, int64_t c,
                                 int64_t f, int64_t r, int64_t c0, int64_t c1, T *dk)
{
    if (r == 5)
        FN(wino_kgrad_r)(w0, np, ps, us, c, f, c0, c1, dk, 5);
    else
        FN(wino_kgrad_r)(w0, np, ps, us, c, f, c0, c1, dk, 3);
}
/* One register tile of c (nr, nv vectors) = a (nr, k; rows lda apart) @ b (k, nv vectors; rows
 * ldb apart): per step of k, nv vectors of b are loaded once and each row's element of a is
 * broadcast against them. Inlined with nr and nv constant; only the last vector is masked (m). */
static inline __attribute__((always_inline)) VATTR void
FN(wgemm_tile)(const T *a, int64_t lda, const T *b, int64_t ldb, T *c, int64_t ldc, int64_t k,
               VMASK m, const int nr, const int nv)
{
    V acc[CONV_TILE_MAX][4];
#pragma GCC unroll 12
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[i][v] = V_ZERO();
    for (int64_t kk = 0; kk < k; kk++, a++, b += ldb) {
        V bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            bv[v] = v + 1 < nv ? V_LOAD(b + v * VL) : V_MLOAD(m, b + v * VL);
#pragma GCC unroll 12
        for (int i = 0; i < nr; i++) {
            const V x = V_SET1(a[i * lda]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                acc[i][v] = V_FMA(x, bv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            V_MSTORE(c + i * ldc + v * VL, v + 1 < nv ? V_MASK_ALL : m, acc[i][v]);
}

/* c (rows, n) = a (rows, k) @ b (k, n), all row-major with rows lda, ldb, ldc apart: one of the
 * 36 GEMMs of a forward block (rows: tiles, k: input channels, n: filters). Register tiles of
 * nv <= CONV_WG_NVMAX vectors by near-equal row counts of at most CONV_TILE(nv): about CONV_ACC
 * accumulators. */
static VATTR void FN(wgemm)(const T *a, int64_t lda, const T *b, int64_t ldb, T *c, int64_t ldc,
                            int64_t rows, int64_t k, int64_t n)
{
    for (int64_t f0 = 0; f0 < n; f0 += CONV_WG_NVMAX * VL) {
        const int64_t fl = n - f0 < CONV_WG_NVMAX * VL ? n - f0 : CONV_WG_NVMAX * VL;
        const int nv = (int)((fl + VL - 1) / VL);
        const VMASK m = V_MASK_N(fl - (nv - 1) * VL);
        const int64_t rmax = CONV_TILE(nv), nblk = (rows + rmax - 1) / rmax;
        for (int64_t i = 0, r0 = 0; i < nblk; i++) {
            const int nr = (int)((rows - r0) / (nblk - i));
            const T *ai = a + r0 * lda;
            T *ci = c + r0 * ldc + f0;
            switch (nv * 16 + nr) {
#define CONV_WG_CASE(v, r)                                                                         \
    case v * 16 + r:                                                                               \
        FN(wgemm_tile)(ai, lda, b + f0, ldb, ci, ldc, k, m, r, v);                                 \
        break;
                CONV_WG_CASES(CONV_WG_CASE)
#undef CONV_WG_CASE
            default:
                break;
            }
            r0 += nr;
        }
    }
}

/* The geometry of the 1x1 convolution that is one of the 36 GEMMs of a block of nt tiles:
 * pixels = tiles, c input channels, f filters (the direct kernels run it). */
static inline conv_geom FN(wino_gemm_geom)(int64_t c, int64_t f, int64_t nt)
{
    conv_geom g1 = {0};
    g1.n = 1, g1.h = 1, g1.w = nt, g1.c = c;
    g1.kh = g1.kw = 1, g1.f = f;
    g1.oh = 1, g1.ow = nt, g1.sh = g1.sw = 1;
    g1.kdim = c, g1.wp = nt, g1.wq = nt;
    return g1;
}

/* The images and rows of Winograd unit u of a pass with `rows` output rows per image: ipu
 * whole images from *img (the last unit may hold fewer), or one band of one image. */
static inline void FN(wino_unit)(const conv_plan *pl, const conv_geom *gf, int64_t u, int64_t *img,
                                 int64_t *nimg, int64_t *r0, int64_t *nr)
{
    if (pl->bands == 1) {
        *img = u * pl->ipu;
        *nimg = gf->n - *img < pl->ipu ? gf->n - *img : pl->ipu;
        *r0 = 0, *nr = gf->oh;
    } else {
        *nimg = 1;
        conv_unit_band(pl, gf->oh, u, img, r0, nr);
    }
}

/* Forward and backward-input (stride 1, 5x5 or 3x3): the kernel was transformed into u (36, c,
 * f) at the start of the workspace (wino_prep); the unit pads its band of the source (x, or dy
 * for backward-input: the forward pass of wino_geom), or each of its images, then per block of
 * tb tiles (in image order; a block may span images) transforms the tiles, runs the 36 GEMMs
 * m_xi (nt, f) = v_xi (nt, c) @ u_xi (c, f), and transforms back. Each tile's sums are the same
 * whatever block it falls into. Returns whether the slot holds a full unit's padding zeros. */
static bool FN(wino_fwd_common)(const conv_job *jb, int64_t u, void *slot, bool fresh, bool bwdi)
{
    const conv_plan *pl = jb->pl;
    const conv_geom gf = wino_geom(jb->g, bwdi);
    const int64_t c = gf.c, f = gf.f, ow = gf.ow, m = wino_m(&gf), tw = (ow + m - 1) / m;
    const int64_t tb = pl->tb, vs = wino_ld(tb * c, sizeof(T)), ms = wino_ld(tb * f, sizeof(T));
    const int64_t us = wino_ld(c * f, sizeof(T)), be = wino_band_elems(&gf, pl->rpu);
    int64_t img, nimg, r0, nr;
    FN(wino_unit)(pl, &gf, u, &img, &nimg, &r0, &nr);
    T *xp = slot, *v = xp + pl->ipu * be, *mm = v + 36 * vs;
    const int64_t rr = (nr + m - 1) / m * m, rmax = (pl->rpu + m - 1) / m * m;
    const T *src = bwdi ? jb->in1 : jb->in0;
    for (int64_t i = 0; i < nimg; i++)
        FN(sx__conv_pad_x)(&gf, src, img + i, r0, rr, rmax, xp + i * be, fresh);
    const T *uk = (const T *)(const void *)pl->ws;
    const int64_t ti = rr / m * tw, ntiles = nimg * ti, nb = (ntiles + tb - 1) / tb;
    for (int64_t b = 0, t0 = 0, nt; b < nb; b++, t0 += nt) { /* near-equal blocks */
        nt = (ntiles - t0) / (nb - b);
        for (int64_t q = 0, k; q < nt; q += k) { /* the block's run of tiles of each image */
            const int64_t i = (t0 + q) / ti, lt = (t0 + q) % ti;
            k = ti - lt < nt - q ? ti - lt : nt - q;
            FN(wino_in)(xp + i * be, gf.wp, c, m, tw, lt, k, vs, v + q * c);
        }
        for (int64_t xi = 0; xi < 36; xi++)
            FN(wgemm)(v + xi * vs, c, uk + xi * us, f, mm + xi * ms, f, nt, c, f);
        for (int64_t q = 0, k; q < nt; q += k) {
            const int64_t i = (t0 + q) / ti, lt = (t0 + q) % ti;
            k = ti - lt < nt - q ? ti - lt : nt - q;
            T *y = (T *)jb->out + ((img + i) * gf.oh + r0) * ow * f;
            FN(wino_out)(mm + q * f, f, m, tw, ow, nr, lt, k, ms, y, jb->stream);
        }
    }
    if (jb->stream) /* the streamed stores are visible before the unit counts as done */
        V_FENCE();
    return !fresh || nimg == pl->ipu;
}

bool FN(sx__conv_wino_fwd_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                bool first)
{
    (void)acc, (void)first;
    return FN(wino_fwd_common)(jb, u, slot, fresh, false);
}

bool FN(sx__conv_wino_bwdi_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                 bool first)
{
    (void)acc, (void)first;
    return FN(wino_fwd_common)(jb, u, slot, fresh, true);
}

/* Backward-kernel (stride 1, 5x5 or 3x3): acc (36, c, f) (+)= per block of tb tiles of the unit's
 * band or images (a block may span images), the 36 GEMMs v_xi (nt, c)^T @ d_xi (nt, f) of the
 * transformed x tiles and dy blocks; the group sums go back to taps at the end (wino_finish). */
bool FN(sx__conv_wino_bwdk_unit)(const conv_job *jb, int64_t u, void *slot, bool fresh, void *acc,
                                 bool first)
{
    const conv_plan *pl = jb->pl;
    const conv_geom gf = wino_geom(jb->g, false);
    const int64_t c = gf.c, f = gf.f, ow = gf.ow, m = wino_m(&gf), tw = (ow + m - 1) / m;
    const int64_t tb = pl->tb, vs = wino_ld(tb * c, sizeof(T)), ds = wino_ld(tb * f, sizeof(T));
    const int64_t us = wino_ld(c * f, sizeof(T)), be = wino_band_elems(&gf, pl->rpu);
    int64_t img, nimg, r0, nr;
    FN(wino_unit)(pl, &gf, u, &img, &nimg, &r0, &nr);
    T *xp = slot, *v = xp + pl->ipu * be, *d = v + 36 * vs;
    const int64_t rr = (nr + m - 1) / m * m, rmax = (pl->rpu + m - 1) / m * m;
    const T *dy = (const T *)jb->in1 + (img * gf.oh + r0) * ow * f;
    /* the unit's dy rows are read m at a time, tile by tile: ask for all of them now, while
     * the x tiles are transformed (whole images follow one another in dy) */
    for (int64_t i = 0; i < nimg * nr * ow * f; i += 64 / (int64_t)sizeof(T))
        __builtin_prefetch(dy + i, 0, 3);
    for (int64_t i = 0; i < nimg; i++)
        FN(sx__conv_pad_x)(&gf, jb->in0, img + i, r0, rr, rmax, xp + i * be, fresh);
    T *w = acc;
    const int64_t ti = rr / m * tw, ntiles = nimg * ti, nb = (ntiles + tb - 1) / tb;
    for (int64_t b = 0, t0 = 0, nt; b < nb; b++, t0 += nt) { /* near-equal blocks */
        nt = (ntiles - t0) / (nb - b);
        for (int64_t q = 0, k; q < nt; q += k) { /* the block's run of tiles of each image */
            const int64_t i = (t0 + q) / ti, lt = (t0 + q) % ti;
            k = ti - lt < nt - q ? ti - lt : nt - q;
            FN(wino_in)(xp + i * be, gf.wp, c, m, tw, lt, k, vs, v + q * c);
            FN(wino_dy)(dy + i * gf.oh * ow * f, f, m, tw, ow, nr, lt, k, ds, d + q * f);
        }
        const conv_geom g1 = FN(wino_gemm_geom)(c, f, nt);
        for (int64_t xi = 0; xi < 36; xi++)
            FN(sx__conv_direct_bwdk_band)
        (&g1, v + xi * vs, d + xi * ds, 1, w + xi * us, first && t0 == 0);
    }
    return !fresh || nimg == pl->ipu;
}

/* Before the units of forward or backward-input: the transformed kernel at the start of the
 * workspace (backward-input: of the rotated kernel, built just after it), its input channels
 * (backward-input: the filters) split over threads; each element is computed alone, so the
 * split leaves the bits alone. */
typedef struct FN(wprep_ctx) {
    const conv_job *jb;
    bool bwdi;
} FN(wprep_ctx);

static void FN(wino_prep_chans)(void *ctx, int64_t c0, int64_t c1)
{
    const FN(wprep_ctx) *w = ctx;
    const conv_geom *g = w->jb->g;
    T *uk = (T *)(void *)w->jb->pl->ws;
    const int64_t us = wino_ld(g->c * g->f, sizeof(T));
    if (!w->bwdi) {
        FN(wino_kernel)(w->jb->in1, g->kh, g->c, g->f, us, uk, c0, c1);
        return;
    }
    T *kr = uk + wino_u_elems(g, sizeof(T));
    FN(sx__conv_rot_k)(g, w->jb->in0, kr, c0, c1);
    FN(wino_kernel)(kr, g->kh, g->f, g->c, us, uk, c0, c1);
}

void FN(sx__conv_wino_prep)(const conv_job *jb, bool bwdi)
{
    const conv_geom *g = jb->g;
    FN(wprep_ctx) w = {jb, bwdi};
    const int64_t cin = bwdi ? g->f : g->c;
    if (36 * g->c * g->f >= SX_PAR_MIN)
        sx__par_range(cin, 1, FN(wino_prep_chans), &w);
    else
        FN(wino_prep_chans)(&w, 0, cin);
}

/* After the units of backward-kernel: dk = G^T (the group partials, summed in order) G, the
 * input channels split over threads. */
typedef struct FN(wfin_ctx) {
    const conv_job *jb;
    const void *parts;
    int64_t groups;
    size_t pstride;
} FN(wfin_ctx);

static void FN(wino_finish_chans)(void *ctx, int64_t c0, int64_t c1)
{
    const FN(wfin_ctx) *w = ctx;
    const conv_geom *g = w->jb->g;
    const int64_t c = g->c, f = g->f;
    FN(wino_kgrad)
    (w->parts, w->groups, w->pstride, wino_ld(c * f, sizeof(T)), c, f, g->kh, c0, c1, w->jb->out);
}

void FN(sx__conv_wino_finish)(const conv_job *jb, const void *parts, int64_t groups, size_t pstride)
{
    const conv_geom *g = jb->g;
    FN(wfin_ctx) w = {jb, parts, groups, pstride};
    if (36 * g->c * g->f * groups >= SX_PAR_MIN)
        sx__par_range(g->c, 1, FN(wino_finish_chans), &w);
    else
        FN(wino_finish_chans)(&w, 0, g->c);
}

#undef FN
#undef CONV_CAT
#undef CONV_CAT_
