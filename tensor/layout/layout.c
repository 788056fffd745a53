/* layout.c: kernels that move elements without arithmetic: repeat, tile, slice, unslice, concat,
 * split, permute, transpose, pad, one-hot, gather and scatter-add.
 * A copy is described per axis by (length, source stride, destination stride) in bytes; axes
 * that are contiguous on both sides are merged and contiguous runs move with memcpy, so the
 * kernels are dtype-agnostic. Repeat and tile write their output in one pass: the
 * innermost axis is expanded, then finished blocks are replicated by copying them. */
#include "tensor_impl.h"

#include <math.h>
/* Copies of fewer output bytes than this run on one thread. Measured on a 2-core AVX-512 VM:
 * one thread writes ~40 GB/s while the data is in cache, so 256 KB take ~6 us and a parallel
 * region made them slower; from ~1 MB two threads win (1.5x at 5 MB). */
#ifndef LAYOUT_PAR_MIN_BYTES
#define LAYOUT_PAR_MIN_BYTES ((int64_t)1 << 20)
#endif
/* Repeat/tile replicate blocks up to this size by copying the output just written, while it is
 * still in L2 (1 MB per core on Zen 4); larger blocks are recomputed from the source, which
 * reads less memory than copying a block back from DRAM. On a busy 2-core VM the choices from
 * 64 KB to "always copy" measured within noise of each other on 4-d x2 repeats. */
#ifndef LAYOUT_COPY_MAX
#define LAYOUT_COPY_MAX ((int64_t)1 << 20)
#endif
/* Side of the square tiles of a transposing copy: two 32x32 tiles of f64 fit in L1. */
#ifndef LAYOUT_TILE
#define LAYOUT_TILE 32
#endif

/* Threads for a copy of `bytes` bytes made of `units` independent pieces. */
static int threads_for(int64_t bytes, int64_t units)
{
    if (bytes < LAYOUT_PAR_MIN_BYTES || units < 2)
        return 1;
    int nt = sx__par_threads();
    return units < nt ? (int)units : nt;
}

/* fn(ctx, lo, hi) over pieces of [0, n) of at least `grain` items, on up to nt threads (from
 * threads_for; nt <= 1: the caller alone, in one piece), about four pieces per thread. */
static void par_split(int nt, int64_t n, int64_t grain, sx__par_range_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (nt <= 1) {
        fn(ctx, 0, n);
        return;
    }
    const int64_t g = n / (4 * (int64_t)nt);
    sx__par_range(n, g > grain ? g : grain, fn, ctx);
}

/* Piece t of nt of [0, n): [*lo, *hi). */
static void split_range(int64_t n, int t, int nt, int64_t *lo, int64_t *hi)
{
    int64_t chunk = n / nt, extra = n % nt;
    *lo = t * chunk + (t < extra ? t : extra);
    *hi = *lo + chunk + (t < extra ? 1 : 0);
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* ---------------------------------------------------------------- element runs */

/* n elements of ES bytes from s (stride ss bytes) to d (stride ds bytes); the fixed-size memcpy
 * compiles to one load and one store, without the aliasing questions of a cast. */
#define DEFINE_RUN(ES)                                                                             \
    static void run_##ES(char *restrict d, int64_t ds, const char *restrict s, int64_t ss,         \
                         int64_t n)                                                                \
    {                                                                                              \
        for (int64_t j = 0; j < n; j++)                                                            \
            memcpy(d + j * ds, s + j * ss, ES);                                                    \
    }
DEFINE_RUN(4)
DEFINE_RUN(8)

static void strided_run(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, size_t es)
{
    if (ds == (int64_t)es && ss == (int64_t)es && n * (int64_t)es >= 64)
        memcpy(d, s, (size_t)n * es);
    else if (es == 4)
        run_4(d, ds, s, ss, n);
    else
        run_8(d, ds, s, ss, n);
}

/* n elements of ES bytes, all equal to the pattern `pat`. */
#define DEFINE_FILL(ES, U)                                                                         \
    static void fill_##ES(char *restrict d, int64_t n, const unsigned char *pat)                   \
    {                                                                                              \
        U v;                                                                                       \
        memcpy(&v, pat, ES);                                                                       \
        for (int64_t j = 0; j < n; j++)                                                            \
            memcpy(d + j * ES, &v, ES);                                                            \
    }
DEFINE_FILL(4, uint32_t)
DEFINE_FILL(8, uint64_t)

static bool pattern_is_zero(const unsigned char *pat, size_t es)
{
    for (size_t i = 0; i < es; i++)
        if (pat[i] != 0)
            return false;
    return true;
}

static void fill_run(char *d, int64_t n, const unsigned char *pat, size_t es)
{
    if (n <= 0)
        return;
    if (pattern_is_zero(pat, es))
        memset(d, 0, (size_t)n * es);
    else if (es == 4)
        fill_4(d, n, pat);
    else
        fill_8(d, n, pat);
}

/* The bytes of `value` in dtype dt (pat has room for 8). */
static void value_pattern(sx_dtype dt, double value, unsigned char *pat)
{
    memset(pat, 0, 8);
    if (dt == SX_F32) {
        float f = (float)value;
        memcpy(pat, &f, sizeof f);
    } else {
        memcpy(pat, &value, sizeof value);
    }
}

typedef struct bytes_ctx {
    char *dst;
    const char *src;          /* memcpy; NULL: memset to 0 */
    const unsigned char *pat; /* par_fill */
    size_t es;
} bytes_ctx;

static void bytes_piece(void *ctx, int64_t lo, int64_t hi)
{
    const bytes_ctx *c = ctx;
    if (c->pat != NULL)
        fill_run(c->dst + lo * (int64_t)c->es, hi - lo, c->pat, c->es);
    else if (c->src != NULL)
        memcpy(c->dst + lo, c->src + lo, (size_t)(hi - lo));
    else
        memset(c->dst + lo, 0, (size_t)(hi - lo));
}

/* memcpy / memset split over threads for large sizes. */
static void par_memcpy(char *dst, const char *src, int64_t bytes)
{
    bytes_ctx c = {dst, src, NULL, 1};
    par_split(threads_for(bytes / 2, bytes / 4096), bytes, 4096, bytes_piece, &c);
}

static void par_zero(char *dst, int64_t bytes)
{
    bytes_ctx c = {dst, NULL, NULL, 1};
    par_split(threads_for(bytes / 2, bytes / 4096), bytes, 4096, bytes_piece, &c);
}

static void par_fill(char *dst, int64_t n, const unsigned char *pat, size_t es)
{
    bytes_ctx c = {dst, NULL, pat, es};
    par_split(threads_for(n * (int64_t)es, n / 1024), n, 1024, bytes_piece, &c);
}

/* ---------------------------------------------------------------- strided copies */

/* A copy between two strided views of the same logical shape, axes outermost first; strides in
 * bytes (negative for reversed slices). */
typedef struct xplan {
    int k;
    size_t es;
    int64_t n[SX_MAX_RANK];
    int64_t ss[SX_MAX_RANK], ds[SX_MAX_RANK];
} xplan;

static void xplan_add(xplan *p, int64_t n, int64_t ss, int64_t ds)
{
    p->n[p->k] = n;
    p->ss[p->k] = ss;
    p->ds[p->k] = ds;
    p->k++;
}

/* Drop axes of length 1 and merge neighbours that are contiguous in both views (the outer
 * stride is the inner stride times the inner length on both sides). Lengths must be > 0. */
static void xplan_merge(xplan *p)
{
    int k = 0;
    for (int a = 0; a < p->k; a++) {
        if (p->n[a] == 1)
            continue;
        if (k > 0 && p->ss[k - 1] == p->n[a] * p->ss[a] && p->ds[k - 1] == p->n[a] * p->ds[a]) {
            p->n[k - 1] *= p->n[a];
            p->ss[k - 1] = p->ss[a];
            p->ds[k - 1] = p->ds[a];
            continue;
        }
        p->n[k] = p->n[a];
        p->ss[k] = p->ss[a];
        p->ds[k] = p->ds[a];
        k++;
    }
    p->k = k;
}

/* Rows [r0, r1) of the plan (a row: every index but the last fixed), walked with an odometer. */
static void xplan_rows(const xplan *p, const char *src, char *dst, int64_t r0, int64_t r1)
{
    const int k = p->k;
    int64_t idx[SX_MAX_RANK];
    int64_t so = 0, dof = 0, rem = r0;
    for (int a = k - 2; a >= 0; a--) {
        idx[a] = rem % p->n[a];
        rem /= p->n[a];
        so += idx[a] * p->ss[a];
        dof += idx[a] * p->ds[a];
    }
    const int64_t n = p->n[k - 1], ss = p->ss[k - 1], ds = p->ds[k - 1];
    for (int64_t r = r0; r < r1; r++) {
        strided_run(dst + dof, ds, src + so, ss, n, p->es);
        for (int a = k - 2; a >= 0; a--) {
            so += p->ss[a];
            dof += p->ds[a];
            if (++idx[a] < p->n[a])
                break;
            so -= p->n[a] * p->ss[a];
            dof -= p->n[a] * p->ds[a];
            idx[a] = 0;
        }
    }
}

typedef struct xtiles_ctx {
    const xplan *p;
    const char *src;
    char *dst;
    int pa;
} xtiles_ctx;

static void xtiles_units(void *ctx, int64_t u0, int64_t u1);

/* Transposing copy: the innermost axis is contiguous on one side only and axis `pa` on the
 * other. Going through (pa, innermost) in square tiles keeps both sides' cache lines in L1. */
static void xplan_tiles(const xplan *p, const char *src, char *dst, int pa, int64_t bytes)
{
    const int k = p->k, ia = k - 1;
    const int64_t np = p->n[pa], ni = p->n[ia];
    const int64_t tp = (np + LAYOUT_TILE - 1) / LAYOUT_TILE,
                  ti = (ni + LAYOUT_TILE - 1) / LAYOUT_TILE;
    int64_t outer = 1;
    for (int a = 0; a < k - 1; a++)
        if (a != pa)
            outer *= p->n[a];
    const int64_t units = outer * tp * ti;
    xtiles_ctx c = {p, src, dst, pa};
    par_split(threads_for(bytes, units), units, 1, xtiles_units, &c);
}

static void xtiles_units(void *ctx, int64_t u0, int64_t u1)
{
    const xtiles_ctx *c = ctx;
    const xplan *p = c->p;
    const char *src = c->src;
    char *dst = c->dst;
    const int pa = c->pa, k = p->k, ia = k - 1;
    const int64_t np = p->n[pa], ni = p->n[ia];
    const int64_t tp = (np + LAYOUT_TILE - 1) / LAYOUT_TILE,
                  ti = (ni + LAYOUT_TILE - 1) / LAYOUT_TILE;
    for (int64_t u = u0; u < u1; u++) {
        int64_t rem = u;
        const int64_t bi = rem % ti;
        rem /= ti;
        const int64_t bp = rem % tp;
        rem /= tp;
        const char *s = src;
        char *d = dst;
        for (int a = k - 2; a >= 0; a--) {
            if (a == pa)
                continue;
            const int64_t o = rem % p->n[a];
            rem /= p->n[a];
            s += o * p->ss[a];
            d += o * p->ds[a];
        }
        const int64_t a0 = bp * LAYOUT_TILE, a1 = min64(a0 + LAYOUT_TILE, np);
        const int64_t b0 = bi * LAYOUT_TILE, b1 = min64(b0 + LAYOUT_TILE, ni);
        for (int64_t a = a0; a < a1; a++)
            strided_run(d + a * p->ds[pa] + b0 * p->ds[ia], p->ds[ia],
                        s + a * p->ss[pa] + b0 * p->ss[ia], p->ss[ia], b1 - b0, p->es);
    }
}

/* The axis that is contiguous on the side where the innermost axis is not, or -1. */
static int transpose_axis(const xplan *p)
{
    const int64_t es = (int64_t)p->es;
    const int ia = p->k - 1;
    const bool d_in = p->ds[ia] == es, s_in = p->ss[ia] == es;
    if (d_in == s_in)
        return -1;
    for (int a = 0; a < ia; a++)
        if ((d_in && p->ss[a] == es) || (s_in && p->ds[a] == es))
            return a;
    return -1;
}

typedef struct xrun_ctx {
    const xplan *p;
    const char *src;
    char *dst;
} xrun_ctx;

/* Elements [lo, hi) of a one-axis plan. */
static void xrun_elems(void *ctx, int64_t lo, int64_t hi)
{
    const xrun_ctx *c = ctx;
    const int64_t ss = c->p->ss[0], ds = c->p->ds[0];
    strided_run(c->dst + lo * ds, ds, c->src + lo * ss, ss, hi - lo, c->p->es);
}

static void xrun_rows(void *ctx, int64_t lo, int64_t hi)
{
    const xrun_ctx *c = ctx;
    xplan_rows(c->p, c->src, c->dst, lo, hi);
}

/* Run a merged plan: a single element, one long run (split across threads), a tiled transpose,
 * or rows (contiguous or strided) split across threads. */
static void xplan_run(xplan *p, const char *src, char *dst)
{
    xplan_merge(p);
    const int64_t es = (int64_t)p->es;
    if (p->k == 0) {
        memcpy(dst, src, p->es);
        return;
    }
    int64_t total = 1;
    for (int a = 0; a < p->k; a++)
        total *= p->n[a];
    const int64_t bytes = total * es;
    if (p->k == 1) {
        const int64_t n = p->n[0];
        if (p->ss[0] == es && p->ds[0] == es) {
            par_memcpy(dst, src, bytes);
            return;
        }
        xrun_ctx c = {p, src, dst};
        par_split(threads_for(bytes, n / 1024), n, 1024, xrun_elems, &c);
        return;
    }
    const int pa = transpose_axis(p), ia = p->k - 1;
    if (pa >= 0 && p->n[pa] >= 4 && p->n[ia] >= 4) {
        xplan_tiles(p, src, dst, pa, bytes);
        return;
    }
    if (pa >= 0 && p->n[pa] > p->n[ia]) {
        /* a transpose with a short innermost axis (an image's 3 channels to the last place):
         * the long axis becomes the rows, one strided run each, instead of a run of 3 per
         * pixel ((1, 3, 224, 224) to NHWC, best of 200: 0.085 -> 0.059 ms on Zen 5) */
        const int64_t n = p->n[pa], ss = p->ss[pa], ds = p->ds[pa];
        p->n[pa] = p->n[ia];
        p->ss[pa] = p->ss[ia];
        p->ds[pa] = p->ds[ia];
        p->n[ia] = n;
        p->ss[ia] = ss;
        p->ds[ia] = ds;
    }
    const int64_t rows = total / p->n[p->k - 1];
    xrun_ctx c = {p, src, dst};
    par_split(threads_for(bytes, rows), rows, 1, xrun_rows, &c);
}

/* Row-major strides in bytes of a shape. */
static void byte_strides(int rank, const int64_t *shape, size_t es, int64_t *st)
{
    int64_t s = (int64_t)es;
    for (int a = rank - 1; a >= 0; a--) {
        st[a] = s;
        s *= shape[a];
    }
}

/* ---------------------------------------------------------------- repeat and tile */

/* Repeat or tile after merging: source dims d, reps r, source bytes per step xs, output bytes
 * per step os (the size of the output block under one index of that axis). */
typedef struct rplan {
    int k;
    bool tile;
    size_t es;
    int64_t d[SX_MAX_RANK], r[SX_MAX_RANK];
    int64_t xs[SX_MAX_RANK], os[SX_MAX_RANK];
} rplan;

/* Merge axes where the result is the same as for one axis:
 *   repeat, outer rep 1:   (a,b) reps (1,q) == (a*b) reps q  (rows are not repeated)
 *   repeat, inner dim 1:   (a,1) reps (p,q) == (a) reps p*q
 *   tile, inner rep 1:     (a,b) reps (p,1) == (a*b) reps p  (the whole block is tiled)
 *   tile, outer dim 1:     (1,b) reps (p,q) == (b) reps p*q
 * Axes of dim 1 and rep 1 vanish. Every dim and rep must be > 0. */
static void rplan_init(rplan *p, const sx_tensor *x, const int64_t *reps, bool tile)
{
    p->k = 0;
    p->tile = tile;
    p->es = sx_dtype_size(x->dtype);
    for (int a = 0; a < x->rank; a++) {
        if (x->shape[a] == 1 && reps[a] == 1)
            continue;
        p->d[p->k] = x->shape[a];
        p->r[p->k] = reps[a];
        p->k++;
    }
    bool changed = true;
    while (changed) {
        changed = false;
        for (int a = 0; a + 1 < p->k && !changed; a++) {
            const int b = a + 1;
            int64_t nd = 0, nr = 0;
            if (!tile && p->r[a] == 1) {
                nd = p->d[a] * p->d[b];
                nr = p->r[b];
            } else if (!tile && p->d[b] == 1) {
                nd = p->d[a];
                nr = p->r[a] * p->r[b];
            } else if (tile && p->r[b] == 1) {
                nd = p->d[a] * p->d[b];
                nr = p->r[a];
            } else if (tile && p->d[a] == 1) {
                nd = p->d[b];
                nr = p->r[a] * p->r[b];
            } else {
                continue;
            }
            p->d[a] = nd;
            p->r[a] = nr;
            for (int c = b; c + 1 < p->k; c++) {
                p->d[c] = p->d[c + 1];
                p->r[c] = p->r[c + 1];
            }
            p->k--;
            changed = true;
        }
    }
    int64_t xs = (int64_t)p->es, os = (int64_t)p->es;
    for (int a = p->k - 1; a >= 0; a--) {
        p->xs[a] = xs;
        p->os[a] = os;
        xs *= p->d[a];
        os *= p->d[a] * p->r[a];
    }
}

/* The first `blk` bytes at b are copied so that b holds r copies of them (copies of doubling
 * size: few calls even for small blocks). */
static void replicate(char *b, int64_t blk, int64_t r)
{
    const int64_t total = blk * r;
    for (int64_t done = blk; done < total;) {
        const int64_t n = min64(done, total - done);
        memcpy(b + done, b, (size_t)n);
        done += n;
    }
}

/* Innermost axis of repeat: each of n source elements written r times. */
#define DEFINE_EXPAND(ES, U)                                                                       \
    static void expand_##ES(char *restrict d, const char *restrict s, int64_t n, int64_t r)        \
    {                                                                                              \
        if (r == 2) {                                                                              \
            for (int64_t j = 0; j < n; j++) {                                                      \
                U v;                                                                               \
                memcpy(&v, s + j * ES, ES);                                                        \
                memcpy(d + 2 * j * ES, &v, ES);                                                    \
                memcpy(d + (2 * j + 1) * ES, &v, ES);                                              \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        for (int64_t j = 0; j < n; j++) {                                                          \
            U v;                                                                                   \
            memcpy(&v, s + j * ES, ES);                                                            \
            for (int64_t t = 0; t < r; t++)                                                        \
                memcpy(d + (j * r + t) * ES, &v, ES);                                              \
        }                                                                                          \
    }
DEFINE_EXPAND(4, uint32_t)
DEFINE_EXPAND(8, uint64_t)

/* Write the output block of level l (axes l..k-1) for the source block at src. Inner levels
 * first; then the block under one index is replicated r times, by copying it while it is
 * small enough to be in cache, by recomputing it otherwise. */
static void rplan_fill(const rplan *p, int l, const char *src, char *dst)
{
    const int64_t d = p->d[l], r = p->r[l], es = (int64_t)p->es;
    if (l == p->k - 1) {
        if (p->tile) {
            memcpy(dst, src, (size_t)(d * es));
            replicate(dst, d * es, r);
        } else if (r == 1) {
            memcpy(dst, src, (size_t)(d * es));
        } else if (es == 4) {
            expand_4(dst, src, d, r);
        } else {
            expand_8(dst, src, d, r);
        }
        return;
    }
    const int64_t slab = p->os[l], xs = p->xs[l];
    if (!p->tile) {
        /* [a b] -> [a a b b]: the slab of each source index, then its copies right after. */
        for (int64_t i = 0; i < d; i++) {
            char *b = dst + i * r * slab;
            rplan_fill(p, l + 1, src + i * xs, b);
            if (slab <= LAYOUT_COPY_MAX)
                replicate(b, slab, r);
            else
                for (int64_t t = 1; t < r; t++)
                    rplan_fill(p, l + 1, src + i * xs, b + t * slab);
        }
    } else {
        /* [a b] -> [a b a b]: the slabs of all source indices, then copies of that region. */
        for (int64_t i = 0; i < d; i++)
            rplan_fill(p, l + 1, src + i * xs, dst + i * slab);
        const int64_t region = d * slab;
        if (region <= LAYOUT_COPY_MAX)
            replicate(dst, region, r);
        else
            for (int64_t t = 1; t < r; t++)
                for (int64_t i = 0; i < d; i++)
                    rplan_fill(p, l + 1, src + i * xs, dst + t * region + i * slab);
    }
}

typedef struct rrun_ctx {
    const rplan *p;
    const char *src;
    char *dst;
    int64_t chunks;      /* rplan_run_flat, tile: chunks of the source */
    int L;               /* rplan_run: the levels cut into blocks */
    const int64_t *dims; /* rplan_run: output dims */
} rrun_ctx;

/* Repeat along one merged axis: source elements [lo, hi). */
static void rflat_repeat(void *ctx, int64_t lo, int64_t hi)
{
    const rrun_ctx *c = ctx;
    const int64_t r = c->p->r[0], es = (int64_t)c->p->es;
    if (r == 1)
        memcpy(c->dst + lo * es, c->src + lo * es, (size_t)((hi - lo) * es));
    else if (es == 4)
        expand_4(c->dst + lo * r * es, c->src + lo * es, hi - lo, r);
    else
        expand_8(c->dst + lo * r * es, c->src + lo * es, hi - lo, r);
}

/* Tile along one merged axis: the (copy, chunk) units [u0, u1). */
static void rflat_tile(void *ctx, int64_t u0, int64_t u1)
{
    const rrun_ctx *c = ctx;
    const int64_t d = c->p->d[0], es = (int64_t)c->p->es, chunks = c->chunks;
    for (int64_t u = u0; u < u1; u++) {
        int64_t lo, hi;
        split_range(d, (int)(u % chunks), (int)chunks, &lo, &hi);
        memcpy(c->dst + ((u / chunks) * d + lo) * es, c->src + lo * es, (size_t)((hi - lo) * es));
    }
}

/* One merged axis: split the source (repeat) or the (copy, chunk) pairs (tile) over threads. */
static void rplan_run_flat(const rplan *p, const char *src, char *dst, int nt)
{
    const int64_t d = p->d[0], r = p->r[0];
    rrun_ctx c = {p, src, dst, min64((d + 1023) / 1024, 4 * (int64_t)nt), 0, NULL};
    if (!p->tile)
        par_split(nt, d, 1, rflat_repeat, &c);
    else
        par_split(nt, r * c.chunks, 1, rflat_tile, &c);
}

/* Output blocks [u0, u1) of rplan_run (an index prefix of L levels each). */
static void rrun_blocks(void *ctx, int64_t u0, int64_t u1)
{
    const rrun_ctx *c = ctx;
    const rplan *p = c->p;
    for (int64_t u = u0; u < u1; u++) {
        int64_t rem = u;
        const char *s = c->src;
        char *d = c->dst;
        for (int a = c->L - 1; a >= 0; a--) {
            const int64_t o = rem % c->dims[a];
            rem /= c->dims[a];
            s += (p->tile ? o % p->d[a] : o / p->r[a]) * p->xs[a];
            d += o * p->os[a];
        }
        rplan_fill(p, c->L, s, d);
    }
}

/* Run a plan over the whole output (out_bytes > 0). In parallel, the output is cut into
 * independent blocks at the outermost levels L: each block (an output index prefix) is filled
 * from its source block with the serial algorithm. */
static void rplan_run(const rplan *p, const char *src, char *dst, int64_t out_bytes)
{
    if (p->k == 0) {
        memcpy(dst, src, p->es);
        return;
    }
    int nt = threads_for(out_bytes, out_bytes / 4096);
    if (nt <= 1) {
        rplan_fill(p, 0, src, dst);
        return;
    }
    if (p->k == 1) {
        rplan_run_flat(p, src, dst, nt);
        return;
    }
    int64_t dims[SX_MAX_RANK];
    for (int a = 0; a < p->k; a++)
        dims[a] = p->d[a] * p->r[a];
    int L = 1;
    int64_t units = dims[0];
    while (L < p->k - 1 && units < 8 * (int64_t)nt)
        units *= dims[L++];
    rrun_ctx c = {p, src, dst, 0, L, dims};
    par_split(nt, units, 1, rrun_blocks, &c);
}

/* Checks shared by repeat and tile, and the result shape. */
static sx_status repeat_shape(const char *who, const sx_tensor *x, const int64_t *reps,
                              int64_t *shape)
{
    SX_TRY(sx__check_tensor(who, "x", x));
    if (x->rank > 0 && reps == NULL)
        return sx_error(SX_E_ARG, "%s: reps is NULL", who);
    for (int a = 0; a < x->rank; a++) {
        if (reps[a] < 0)
            return sx_error(SX_E_ARG, "%s: reps[%d] = %lld is negative", who, a,
                            (long long)reps[a]);
        if (x->shape[a] > 0 && reps[a] > INT64_MAX / x->shape[a])
            return sx_error(SX_E_SHAPE, "%s: axis %d grows too large (%lld x %lld)", who, a,
                            (long long)x->shape[a], (long long)reps[a]);
        shape[a] = x->shape[a] * reps[a];
    }
    return sx_shape_check(who, x->rank, shape);
}

static sx_status repeat_or_tile(const char *who, const sx_tensor *x, const int64_t *reps, bool tile,
                                sx_tensor *out)
{
    int64_t shape[SX_MAX_RANK];
    SX_TRY(repeat_shape(who, x, reps, shape));
    SX_TRY(sx__check_out(who, out, x->dtype, x->rank, shape));
    if (out->size == 0)
        return SX_OK;
    rplan p;
    rplan_init(&p, x, reps, tile);
    rplan_run(&p, x->data, out->data, out->size * (int64_t)p.es);
    return SX_OK;
}

sx_status sx_tensor_repeat_out(const sx_tensor *x, const int64_t *reps, sx_tensor *out)
{
    return repeat_or_tile("sx_tensor_repeat_out", x, reps, false, out);
}

sx_status sx_tensor_tile_out(const sx_tensor *x, const int64_t *reps, sx_tensor *out)
{
    return repeat_or_tile("sx_tensor_tile_out", x, reps, true, out);
}

/* ---------------------------------------------------------------- slice and unslice */

sx_status sx_slice_shape(const char *who, int rank, const int64_t *shape, const sx_slice *s,
                         int64_t *out_shape, int64_t *first)
{
    if (who == NULL)
        who = "sx_slice_shape";
    SX_TRY(sx_shape_check(who, rank, shape));
    if (rank > 0 && s == NULL)
        return sx_error(SX_E_ARG, "%s: slices are NULL", who);
    int64_t len[SX_MAX_RANK], beg[SX_MAX_RANK];
    for (int a = 0; a < rank; a++) {
        const int64_t n = shape[a], step = s[a].step;
        int64_t start = s[a].start, stop = s[a].stop;
        if (step == 0)
            return sx_error(SX_E_ARG, "%s: slice step of axis %d is 0", who, a);
        if (step > 0) {
            /* Python: start and stop clamped to [0, n]. */
            start = start < 0 ? (start + n < 0 ? 0 : start + n) : min64(start, n);
            stop = stop < 0 ? (stop + n < 0 ? 0 : stop + n) : min64(stop, n);
            len[a] = stop > start ? (stop - start - 1) / step + 1 : 0;
        } else {
            /* Python: start and stop clamped to [-1, n-1]; the default stop (SX_SLICE_END) is
             * -1, before the first element. */
            start = start < 0 ? (start + n < 0 ? -1 : start + n) : min64(start, n - 1);
            if (stop == SX_SLICE_END)
                stop = -1;
            else
                stop = stop < 0 ? (stop + n < 0 ? -1 : stop + n) : min64(stop, n - 1);
            const uint64_t astep = (uint64_t)0 - (uint64_t)step;
            len[a] = start > stop ? (int64_t)((uint64_t)(start - stop - 1) / astep + 1) : 0;
        }
        beg[a] = start;
    }
    for (int a = 0; a < rank; a++) {
        if (out_shape != NULL)
            out_shape[a] = len[a];
        if (first != NULL)
            first[a] = beg[a];
    }
    return SX_OK;
}

/* The plan of x[s] between the sliced view of `full` and the contiguous `part`; `*offset` is the
 * byte offset of the first sliced element in full. The slice must not be empty. */
static void slice_plan(const sx_tensor *full, const sx_slice *s, const int64_t *first,
                       const int64_t *len, bool to_part, xplan *p, int64_t *offset)
{
    int64_t fst[SX_MAX_RANK], pst[SX_MAX_RANK];
    const size_t es = sx_dtype_size(full->dtype);
    byte_strides(full->rank, full->shape, es, fst);
    byte_strides(full->rank, len, es, pst);
    p->k = 0;
    p->es = es;
    *offset = 0;
    for (int a = 0; a < full->rank; a++) {
        *offset += first[a] * fst[a];
        /* An axis of length 1 never moves: its stride is irrelevant (and step * stride could
         * overflow for a huge step). */
        const int64_t fs = len[a] > 1 ? s[a].step * fst[a] : 0;
        if (to_part)
            xplan_add(p, len[a], fs, pst[a]);
        else
            xplan_add(p, len[a], pst[a], fs);
    }
}

sx_status sx_tensor_slice_out(const sx_tensor *x, const sx_slice *s, sx_tensor *out)
{
    const char *who = "sx_tensor_slice_out";
    int64_t len[SX_MAX_RANK], first[SX_MAX_RANK];
    SX_TRY(sx__check_tensor(who, "x", x));
    SX_TRY(sx_slice_shape(who, x->rank, x->shape, s, len, first));
    SX_TRY(sx__check_out(who, out, x->dtype, x->rank, len));
    if (out->size == 0)
        return SX_OK;
    xplan p;
    int64_t off;
    slice_plan(x, s, first, len, true, &p, &off);
    xplan_run(&p, (const char *)x->data + off, out->data);
    return SX_OK;
}

sx_status sx_tensor_unslice_out(const sx_tensor *g, const sx_slice *s, sx_tensor *out)
{
    const char *who = "sx_tensor_unslice_out";
    int64_t len[SX_MAX_RANK], first[SX_MAX_RANK];
    SX_TRY(sx__check_tensor(who, "g", g));
    SX_TRY(sx__check_tensor(who, "out", out));
    SX_TRY(sx__check_same_dtype(who, g, out));
    SX_TRY(sx_slice_shape(who, out->rank, out->shape, s, len, first));
    if (!sx_shape_equal(g->rank, g->shape, out->rank, len)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: g has shape %s, the slice of out has shape %s", who,
                        sx_shape_str(g->rank, g->shape, a, sizeof a),
                        sx_shape_str(out->rank, len, b, sizeof b));
    }
    const int64_t es = (int64_t)sx_dtype_size(out->dtype);
    /* A slice as large as the whole tensor covers every element: no zeroing needed. */
    if (g->size < out->size)
        par_zero(out->data, out->size * es);
    if (g->size == 0)
        return SX_OK;
    xplan p;
    int64_t off;
    slice_plan(out, s, first, len, false, &p, &off);
    xplan_run(&p, g->data, (char *)out->data + off);
    return SX_OK;
}

/* ---------------------------------------------------------------- concat and split */

typedef struct join_ctx {
    char *whole;
    int n;
    const sx_tensor *const *parts;
    int ax;
    int64_t ib, row;
    bool to_whole;
} join_ctx;

static void join_units(void *ctx, int64_t lo, int64_t hi);

/* Both directions of concat: the joined tensor `whole` viewed as (outer, sum m_i * inner) and
 * part i as (outer, m_i * inner), m_i = parts[i]->shape[ax]. The work is the (outer row, part)
 * pieces in output order, cut into one contiguous range per thread; when there are only a few
 * large pieces, each piece is split over the threads instead. */
static void join(char *whole, int n, const sx_tensor *const *parts, int ax, int64_t total_m,
                 int64_t outer, int64_t inner, size_t es, bool to_whole)
{
    const int64_t ib = inner * (int64_t)es, row = total_m * ib, bytes = outer * row;
    const int64_t units = outer * n;
    if (bytes >= LAYOUT_PAR_MIN_BYTES && units < 2 * (int64_t)sx__par_threads()) {
        for (int64_t o = 0; o < outer; o++) {
            int64_t off = 0;
            for (int i = 0; i < n; i++) {
                const int64_t pb = parts[i]->shape[ax] * ib;
                char *w = whole + o * row + off, *q = (char *)parts[i]->data + o * pb;
                if (to_whole)
                    par_memcpy(w, q, pb);
                else
                    par_memcpy(q, w, pb);
                off += pb;
            }
        }
        return;
    }
    join_ctx c = {whole, n, parts, ax, ib, row, to_whole};
    par_split(threads_for(bytes, units), units, 1, join_units, &c);
}

/* The (outer row, part) pieces [lo, hi) of join, in output order. */
static void join_units(void *ctx, int64_t lo, int64_t hi)
{
    const join_ctx *c = ctx;
    char *whole = c->whole;
    const sx_tensor *const *parts = c->parts;
    const int n = c->n, ax = c->ax;
    const int64_t ib = c->ib, row = c->row;
    const bool to_whole = c->to_whole;
    {
        int64_t o = lo / n, off = 0;
        int i = (int)(lo % n);
        for (int j = 0; j < i; j++)
            off += parts[j]->shape[ax] * ib;
        for (int64_t u = lo; u < hi; u++) {
            const int64_t pb = parts[i]->shape[ax] * ib;
            if (pb > 0) {
                char *w = whole + o * row + off, *q = (char *)parts[i]->data + o * pb;
                if (to_whole)
                    memcpy(w, q, (size_t)pb);
                else
                    memcpy(q, w, (size_t)pb);
            }
            off += pb;
            if (++i == n) {
                i = 0;
                off = 0;
                o++;
            }
        }
    }
}

/* a and b have the same rank and agree on every dim except `axis`. */
static bool same_but_axis(const sx_tensor *a, const sx_tensor *b, int axis)
{
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (i != axis && a->shape[i] != b->shape[i])
            return false;
    return true;
}

static sx_status not_joinable(const char *who, const char *an, const sx_tensor *a, const char *bn,
                              const sx_tensor *b, int axis)
{
    char sa[128], sb[128];
    return sx_error(SX_E_SHAPE,
                    "%s: %s has shape %s and %s has shape %s; all dims but axis %d must agree", who,
                    an, sx_shape_str(a->rank, a->shape, sa, sizeof sa), bn,
                    sx_shape_str(b->rank, b->shape, sb, sizeof sb), axis);
}

/* Outer and inner extents around `axis` of a shape. */
static void around_axis(const sx_tensor *t, int axis, int64_t *outer, int64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (int a = 0; a < axis; a++)
        *outer *= t->shape[a];
    for (int a = axis + 1; a < t->rank; a++)
        *inner *= t->shape[a];
}

sx_status sx_tensor_concat_out(int n, const sx_tensor *const *xs, int axis, sx_tensor *out)
{
    const char *who = "sx_tensor_concat_out";
    if (n < 1)
        return sx_error(SX_E_ARG, "%s: n = %d (want >= 1)", who, n);
    if (xs == NULL)
        return sx_error(SX_E_ARG, "%s: xs is NULL", who);
    char name[32];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "xs[%d]", i);
        SX_TRY(sx__check_tensor(who, name, xs[i]));
    }
    const sx_tensor *x0 = xs[0];
    int ax;
    SX_TRY(sx__axis(who, axis, x0->rank, &ax));
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "xs[%d]", i);
        SX_TRY(sx__check_same_dtype(who, x0, xs[i]));
        if (!same_but_axis(x0, xs[i], ax))
            return not_joinable(who, "xs[0]", x0, name, xs[i], ax);
        if (xs[i]->shape[ax] > INT64_MAX / 8 - total)
            return sx_error(SX_E_SHAPE, "%s: the result is too large", who);
        total += xs[i]->shape[ax];
    }
    int64_t shape[SX_MAX_RANK];
    memcpy(shape, x0->shape, sizeof shape);
    shape[ax] = total;
    SX_TRY(sx_shape_check(who, x0->rank, shape));
    SX_TRY(sx__check_out(who, out, x0->dtype, x0->rank, shape));
    if (out->size == 0)
        return SX_OK;
    int64_t outer, inner;
    around_axis(out, ax, &outer, &inner);
    join(out->data, n, xs, ax, total, outer, inner, sx_dtype_size(out->dtype), true);
    return SX_OK;
}

sx_status sx_tensor_split_out(const sx_tensor *x, int axis, int n, sx_tensor *const *outs)
{
    const char *who = "sx_tensor_split_out";
    SX_TRY(sx__check_tensor(who, "x", x));
    if (n < 1)
        return sx_error(SX_E_ARG, "%s: n = %d (want >= 1)", who, n);
    if (outs == NULL)
        return sx_error(SX_E_ARG, "%s: outs is NULL", who);
    int ax;
    SX_TRY(sx__axis(who, axis, x->rank, &ax));
    char name[32];
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "outs[%d]", i);
        SX_TRY(sx__check_tensor(who, name, outs[i]));
        SX_TRY(sx__check_same_dtype(who, x, outs[i]));
        if (!same_but_axis(x, outs[i], ax))
            return not_joinable(who, "x", x, name, outs[i], ax);
        if (outs[i]->shape[ax] > x->shape[ax] - total)
            return sx_error(SX_E_SHAPE, "%s: sizes along axis %d add up to more than x's %lld", who,
                            ax, (long long)x->shape[ax]);
        total += outs[i]->shape[ax];
    }
    if (total != x->shape[ax])
        return sx_error(SX_E_SHAPE, "%s: sizes along axis %d add up to %lld, x has %lld", who, ax,
                        (long long)total, (long long)x->shape[ax]);
    if (x->size == 0)
        return SX_OK;
    int64_t outer, inner;
    around_axis(x, ax, &outer, &inner);
    join(x->data, n, (const sx_tensor *const *)outs, ax, total, outer, inner,
         sx_dtype_size(x->dtype), false);
    return SX_OK;
}

/* ---------------------------------------------------------------- permute and transpose */

static sx_status check_perm(const char *who, int rank, const int *perm)
{
    if (rank > 0 && perm == NULL)
        return sx_error(SX_E_ARG, "%s: perm is NULL", who);
    unsigned seen = 0;
    for (int i = 0; i < rank; i++) {
        if (perm[i] < 0 || perm[i] >= rank)
            return sx_error(SX_E_AXIS, "%s: perm[%d] = %d out of range for rank %d", who, i,
                            perm[i], rank);
        if (seen & (1u << perm[i]))
            return sx_error(SX_E_AXIS, "%s: perm repeats axis %d (not a permutation)", who,
                            perm[i]);
        seen |= 1u << perm[i];
    }
    return SX_OK;
}

static sx_status permute(const char *who, const sx_tensor *x, const int *perm, sx_tensor *out)
{
    SX_TRY(check_perm(who, x->rank, perm));
    int64_t shape[SX_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        shape[i] = x->shape[perm[i]];
    SX_TRY(sx__check_out(who, out, x->dtype, x->rank, shape));
    if (out->size == 0)
        return SX_OK;
    const size_t es = sx_dtype_size(x->dtype);
    int64_t xst[SX_MAX_RANK], ost[SX_MAX_RANK];
    byte_strides(x->rank, x->shape, es, xst);
    byte_strides(x->rank, shape, es, ost);
    xplan p = {.k = 0, .es = es};
    for (int i = 0; i < x->rank; i++)
        xplan_add(&p, shape[i], xst[perm[i]], ost[i]);
    xplan_run(&p, x->data, out->data);
    return SX_OK;
}

sx_status sx_tensor_permute_out(const sx_tensor *x, const int *perm, sx_tensor *out)
{
    const char *who = "sx_tensor_permute_out";
    SX_TRY(sx__check_tensor(who, "x", x));
    return permute(who, x, perm, out);
}

sx_status sx_tensor_transpose_out(const sx_tensor *x, sx_tensor *out)
{
    const char *who = "sx_tensor_transpose_out";
    SX_TRY(sx__check_tensor(who, "x", x));
    if (x->rank < 2)
        return sx_error(SX_E_RANK, "%s: x has rank %d (want >= 2)", who, x->rank);
    int perm[SX_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        perm[i] = i;
    perm[x->rank - 2] = x->rank - 1;
    perm[x->rank - 1] = x->rank - 2;
    return permute(who, x, perm, out);
}

/* ---------------------------------------------------------------- pad */

/* Padding after merging: source dims n, pads b (before) and e (after); an inner axis without
 * padding merges into its outer neighbour. */
typedef struct pplan {
    int k;
    size_t es;
    int64_t n[SX_MAX_RANK], b[SX_MAX_RANK], e[SX_MAX_RANK];
    int64_t xs[SX_MAX_RANK];
    unsigned char pat[8];
} pplan;

/* Output rows [r0, r1) (every index but the last fixed): rows that cross the source get
 * value, source row, value; the others are all value. One pass over the output. */
static void pplan_rows(const pplan *p, const char *src, char *dst, int64_t r0, int64_t r1)
{
    const int k = p->k, in = k - 1;
    const int64_t es = (int64_t)p->es;
    const int64_t N = p->b[in] + p->n[in] + p->e[in], rowb = N * es;
    int64_t o[SX_MAX_RANK], rem = r0;
    for (int a = k - 2; a >= 0; a--) {
        const int64_t na = p->b[a] + p->n[a] + p->e[a];
        o[a] = rem % na;
        rem /= na;
    }
    for (int64_t r = r0; r < r1; r++) {
        char *d = dst + r * rowb;
        bool inside = true;
        int64_t so = 0;
        for (int a = 0; a < k - 1 && inside; a++) {
            inside = o[a] >= p->b[a] && o[a] < p->b[a] + p->n[a];
            so += (o[a] - p->b[a]) * p->xs[a];
        }
        if (inside) {
            fill_run(d, p->b[in], p->pat, p->es);
            memcpy(d + p->b[in] * es, src + so, (size_t)(p->n[in] * es));
            fill_run(d + (p->b[in] + p->n[in]) * es, p->e[in], p->pat, p->es);
        } else {
            fill_run(d, N, p->pat, p->es);
        }
        for (int a = k - 2; a >= 0; a--) {
            if (++o[a] < p->b[a] + p->n[a] + p->e[a])
                break;
            o[a] = 0;
        }
    }
}

typedef struct pad_ctx {
    const pplan *p;
    const char *src;
    char *dst;
} pad_ctx;

static void pad_rows(void *ctx, int64_t r0, int64_t r1)
{
    const pad_ctx *c = ctx;
    pplan_rows(c->p, c->src, c->dst, r0, r1);
}

sx_status sx_tensor_pad_out(const sx_tensor *x, const int64_t *before, const int64_t *after,
                            double value, sx_tensor *out)
{
    const char *who = "sx_tensor_pad_out";
    SX_TRY(sx__check_tensor(who, "x", x));
    if (x->rank > 0 && (before == NULL || after == NULL))
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, before == NULL ? "before" : "after");
    int64_t shape[SX_MAX_RANK];
    for (int a = 0; a < x->rank; a++) {
        if (before[a] < 0 || after[a] < 0)
            return sx_error(SX_E_ARG, "%s: negative padding (%lld, %lld) on axis %d", who,
                            (long long)before[a], (long long)after[a], a);
        if (before[a] > INT64_MAX / 4 - x->shape[a] ||
            after[a] > INT64_MAX / 4 - x->shape[a] - before[a])
            return sx_error(SX_E_SHAPE, "%s: padding of axis %d too large", who, a);
        shape[a] = before[a] + x->shape[a] + after[a];
    }
    SX_TRY(sx_shape_check(who, x->rank, shape));
    SX_TRY(sx__check_out(who, out, x->dtype, x->rank, shape));
    if (out->size == 0)
        return SX_OK;
    pplan p = {.k = 0, .es = sx_dtype_size(x->dtype)};
    value_pattern(x->dtype, value, p.pat);
    if (x->size == 0) {
        par_fill(out->data, out->size, p.pat, p.es);
        return SX_OK;
    }
    for (int a = 0; a < x->rank; a++) {
        const int64_t n = x->shape[a], b = before[a], e = after[a];
        if (b == 0 && e == 0 && (n == 1 || p.k > 0)) {
            /* No padding: the axis vanishes (size 1) or merges into the previous one. */
            if (p.k > 0) {
                p.n[p.k - 1] *= n;
                p.b[p.k - 1] *= n;
                p.e[p.k - 1] *= n;
            }
            continue;
        }
        p.n[p.k] = n;
        p.b[p.k] = b;
        p.e[p.k] = e;
        p.k++;
    }
    const int64_t es = (int64_t)p.es;
    if (p.k <= 1) {
        /* One row: value, the whole source, value (each part split over threads if large). */
        const int64_t b = p.k ? p.b[0] : 0, e = p.k ? p.e[0] : 0;
        char *d = out->data;
        par_fill(d, b, p.pat, p.es);
        par_memcpy(d + b * es, x->data, x->size * es);
        par_fill(d + (b + x->size) * es, e, p.pat, p.es);
        return SX_OK;
    }
    int64_t s = es;
    for (int a = p.k - 1; a >= 0; a--) {
        p.xs[a] = s;
        s *= p.n[a];
    }
    const int64_t N = p.b[p.k - 1] + p.n[p.k - 1] + p.e[p.k - 1];
    const int64_t rows = out->size / N;
    pad_ctx c = {&p, x->data, out->data};
    par_split(threads_for(out->size * es, rows), rows, 1, pad_rows, &c);
    return SX_OK;
}

/* ---------------------------------------------------------------- one-hot, gather, scatter */

#define T float
#define SFX f32
#include "layout_index_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "layout_index_tmpl.h"
#undef T
#undef SFX

/* Every value of idx must be an integer in [0, limit); SX_E_RANGE naming the first that is not. */
static sx_status check_indices(const char *who, const sx_tensor *idx, int64_t limit)
{
    int64_t bad = idx->dtype == SX_F32 ? bad_index_f32(idx->data, idx->size, limit)
                                       : bad_index_f64(idx->data, idx->size, limit);
    if (bad < 0)
        return SX_OK;
    return sx_error(SX_E_RANGE, "%s: idx[%lld] = %g is not an integer in [0, %lld)", who,
                    (long long)bad, sx_tensor_get(idx, bad), (long long)limit);
}

static int64_t index_at(const sx_tensor *idx, int64_t i)
{
    return idx->dtype == SX_F32 ? (int64_t)SX_F32P(idx)[i] : (int64_t)SX_F64P(idx)[i];
}

sx_status sx_tensor_one_hot_out(const sx_tensor *idx, int64_t depth, sx_tensor *out)
{
    const char *who = "sx_tensor_one_hot_out";
    SX_TRY(sx__check_tensor(who, "idx", idx));
    if (depth < 0)
        return sx_error(SX_E_ARG, "%s: depth %lld is negative", who, (long long)depth);
    if (idx->rank + 1 > SX_MAX_RANK)
        return sx_error(SX_E_RANK, "%s: idx has rank %d; the result would exceed rank %d", who,
                        idx->rank, SX_MAX_RANK);
    int64_t shape[SX_MAX_RANK];
    memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->rank);
    shape[idx->rank] = depth;
    SX_TRY(sx_shape_check(who, idx->rank + 1, shape));
    SX_TRY(sx__check_out(who, out, idx->dtype, idx->rank + 1, shape));
    SX_TRY(check_indices(who, idx, depth));
    if (out->size == 0)
        return SX_OK;
    par_zero(out->data, out->size * (int64_t)sx_dtype_size(out->dtype));
    if (out->dtype == SX_F32)
        one_hot_rows_f32(out->data, idx->data, depth, 0, idx->size);
    else
        one_hot_rows_f64(out->data, idx->data, depth, 0, idx->size);
    return SX_OK;
}

/* Shared checks of gather and scatter_add: idx rank 1; `rows` (n, ...) and `table` (m, ...)
 * agree past axis 0 and rows has idx->size rows. */
static sx_status check_rows(const char *who, const char *rn, const sx_tensor *rows, const char *tn,
                            const sx_tensor *table, const sx_tensor *idx)
{
    if (idx->rank != 1)
        return sx_error(SX_E_RANK, "%s: idx has rank %d (want 1)", who, idx->rank);
    if (table->rank < 1)
        return sx_error(SX_E_RANK, "%s: %s has rank 0 (want >= 1)", who, tn);
    int64_t shape[SX_MAX_RANK];
    memcpy(shape, table->shape, sizeof shape);
    shape[0] = idx->size;
    if (!sx_shape_equal(rows->rank, rows->shape, table->rank, shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want %s (%lld indices)", who, rn,
                        sx_shape_str(rows->rank, rows->shape, a, sizeof a),
                        sx_shape_str(table->rank, shape, b, sizeof b), (long long)idx->size);
    }
    return SX_OK;
}

typedef struct gather_ctx {
    const char *src;
    char *dst;
    const sx_tensor *idx;
    int64_t rowb;
} gather_ctx;

static void gather_rows(void *ctx, int64_t i0, int64_t i1)
{
    const gather_ctx *c = ctx;
    for (int64_t i = i0; i < i1; i++)
        memcpy(c->dst + i * c->rowb, c->src + index_at(c->idx, i) * c->rowb, (size_t)c->rowb);
}

sx_status sx_tensor_gather_out(const sx_tensor *x, const sx_tensor *idx, sx_tensor *out)
{
    const char *who = "sx_tensor_gather_out";
    SX_TRY(sx__check_tensor(who, "x", x));
    SX_TRY(sx__check_tensor(who, "idx", idx));
    SX_TRY(sx__check_tensor(who, "out", out));
    SX_TRY(sx__check_same_dtype(who, x, idx));
    SX_TRY(sx__check_same_dtype(who, x, out));
    SX_TRY(check_rows(who, "out", out, "x", x, idx));
    SX_TRY(check_indices(who, idx, x->shape[0]));
    if (out->size == 0)
        return SX_OK;
    const int64_t n = idx->size, rowb = (out->size / n) * (int64_t)sx_dtype_size(x->dtype);
    const char *src = x->data;
    char *dst = out->data;
    gather_ctx c = {src, dst, idx, rowb};
    par_split(threads_for(n * rowb, n), n, 1, gather_rows, &c);
    return SX_OK;
}

typedef struct scatter_ctx {
    sx_tensor *out;
    const sx_tensor *g, *idx;
    int64_t m, row, nrows;
    bool by_cols;
} scatter_ctx;

/* Output columns (by_cols) or rows [lo, hi) of scatter_add. */
static void scatter_piece(void *ctx, int64_t lo, int64_t hi)
{
    const scatter_ctx *c = ctx;
    const int64_t r0 = c->by_cols ? 0 : lo, r1 = c->by_cols ? c->nrows : hi;
    const int64_t c0 = c->by_cols ? lo : 0, c1 = c->by_cols ? hi : c->row;
    if (c->out->dtype == SX_F32)
        scatter_add_f32(c->out->data, c->g->data, c->idx->data, c->m, c->row, r0, r1, c0, c1);
    else
        scatter_add_f64(c->out->data, c->g->data, c->idx->data, c->m, c->row, r0, r1, c0, c1);
}

sx_status sx_tensor_scatter_add_out(const sx_tensor *g, const sx_tensor *idx, sx_tensor *out)
{
    const char *who = "sx_tensor_scatter_add_out";
    SX_TRY(sx__check_tensor(who, "g", g));
    SX_TRY(sx__check_tensor(who, "idx", idx));
    SX_TRY(sx__check_tensor(who, "out", out));
    SX_TRY(sx__check_same_dtype(who, g, idx));
    SX_TRY(sx__check_same_dtype(who, g, out));
    SX_TRY(check_rows(who, "g", g, "out", out, idx));
    SX_TRY(check_indices(who, idx, out->shape[0]));
    if (out->size == 0)
        return SX_OK;
    const int64_t es = (int64_t)sx_dtype_size(out->dtype);
    par_zero(out->data, out->size * es);
    const int64_t m = idx->size, nrows = out->shape[0], row = out->size / nrows;
    if (m == 0)
        return SX_OK;
    /* Threads own disjoint output columns (long rows) or output rows (short rows); either way
     * each output element is summed in index order by one thread. */
    const bool by_cols = row >= 256;
    scatter_ctx c = {out, g, idx, m, row, nrows, by_cols};
    par_split(threads_for(m * row * es, by_cols ? row / 64 : nrows), by_cols ? row : nrows,
              by_cols ? 64 : 1, scatter_piece, &c);
    return SX_OK;
}
