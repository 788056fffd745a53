/* batch_norm.c: batch normalisation over the last axis (channels) in fused passes.
 * x (..., c) is viewed as (m, c). The statistics and the backward sums are one pass each: tasks
 * are (chunk of rows, tile of channels), chunks fixed by the shape alone, their double partials
 * added in chunk order, so results never depend on the thread count. Normalising is one pass of
 * y = x a + b with per-channel a, b. Kernels per instruction set (sx__isa), all with the same
 * bits: batch_norm_tmpl.h compiled for each, and AVX-512 f32 written out (batch_norm_m512.h). */
#include "par_impl.h"
#include "tensor_impl.h"

#include <math.h>
#include <stdatomic.h>

#define BN_TILE 64         /* channels per task */
#define BN_MAX_CHUNKS 16   /* row chunks per reduction */
#define BN_CHUNK_MIN 32768 /* elements per chunk, at least */

typedef struct bn_job {
    const void *x, *dy;   /* dy NULL: the statistics */
    const void *mask;     /* sums: NULL, or dy counts only where mask > 0 */
    const double *center; /* per channel: the shift (statistics) or the mean (sums) */
    int64_t m, c, rows, n_chunks, n_tiles;
    double *part; /* n_chunks x (s1 row, s2 row) of c doubles */
    const struct bn_kernels *kern;
} bn_job;

typedef struct bn_dx_job {
    const void *x, *dy, *y; /* y NULL: no mask; else dy counts only where y > 0 */
    const void *k;          /* 4c in the dtype: mean, a, k1, k0 */
    void *dx;
    int64_t c;
} bn_dx_job;

typedef struct bn_norm_job {
    const void *x, *a; /* a: c scales then c shifts, in the dtype */
    const void *res;   /* NULL, or added to x a + b (rounded) before the relu */
    void *y;
    int64_t c;
    bool relu; /* y = max(x a + b [+ res], 0) */
} bn_norm_job;

/* The kernels, once per dtype and instruction set: the baseline build, AVX2 and AVX-512 (the
 * compiler vectorises the channel loops for each). */
#if defined(__GNUC__) && defined(__x86_64__)
#define BN_X86 1
#endif

#define BN_ATTR
#define T float
#define SFX f32
#include "batch_norm_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "batch_norm_tmpl.h"
#undef T
#undef SFX
#undef BN_ATTR
#ifdef BN_X86
#define BN_ATTR __attribute__((target("avx2,fma")))
#define T float
#define SFX f32_avx2
#include "batch_norm_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64_avx2
#include "batch_norm_tmpl.h"
#undef T
#undef SFX
#undef BN_ATTR
/* AVX-512: f32 written out with intrinsics (batch_norm_m512.h), f64 compiled from the template */
#define BN_ATTR __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq")))
#define T double
#define SFX f64_avx512
#include "batch_norm_tmpl.h"
#undef T
#undef SFX
#include "batch_norm_m512.h"
#undef BN_ATTR
#endif

/* The three kernels of one dtype and instruction set. */
typedef struct bn_kernels {
    void (*block)(const bn_job *jb, int64_t r0, int64_t r1, int64_t j0, int64_t j1, double *s1,
                  double *s2);
    sx__par_range_fn norm_rows, dx_rows;
} bn_kernels;

#define BN_SET(s)                                                                                  \
    {                                                                                              \
        bn_block_##s, bn_norm_rows_##s, bn_dx_rows_##s                                             \
    }
static const bn_kernels bn_sets[][2] = {
    {BN_SET(f32), BN_SET(f64)},
#ifdef BN_X86
    {BN_SET(f32_avx2), BN_SET(f64_avx2)},
    {BN_SET(f32_m512), BN_SET(f64_avx512)},
#endif
};
#undef BN_SET

/* Test hook (the tests declare it extern): the kernel set batch norm runs, 0 (baseline), 1
 * (AVX2) or 2 (AVX-512); by default the one of sx__isa() (this CPU, capped by SX_ISA). `want` in
 * [0, that set] selects it for the whole process, want < 0 only queries; returns the set in use
 * after the call. Call it between kernels, not during one. */
int sx__batch_norm_isa(int want);

static atomic_int bn_isa_forced = -1;

int sx__batch_norm_isa(int want)
{
    int isa = 0;
#ifdef BN_X86
    isa = sx__isa() == SX__ISA_AVX512 ? 2 : sx__isa() == SX__ISA_AVX2 ? 1 : 0;
#endif
    if (want >= 0 && want <= isa)
        atomic_store_explicit(&bn_isa_forced, want, memory_order_relaxed);
    int f = atomic_load_explicit(&bn_isa_forced, memory_order_relaxed);
    return f >= 0 ? f : isa;
}

/* The kernels for dtype dt at the instruction set in use. */
static const bn_kernels *bn_pick(sx_dtype dt)
{
    return &bn_sets[sx__batch_norm_isa(-1)][dt == SX_F32 ? 0 : 1];
}

static void bn_task(void *ctx, int64_t t)
{
    const bn_job *jb = ctx;
    int64_t k = t / jb->n_tiles, j0 = t % jb->n_tiles * BN_TILE;
    int64_t j1 = j0 + BN_TILE < jb->c ? j0 + BN_TILE : jb->c;
    int64_t r0 = k * jb->rows, r1 = r0 + jb->rows < jb->m ? r0 + jb->rows : jb->m;
    double *s1 = jb->part + 2 * k * jb->c + j0, *s2 = s1 + jb->c;
    jb->kern->block(jb, r0, r1, j0, j1, s1, s2);
}

/* The row chunks of a reduction over (m, c): fixed by the shape alone. */
static int64_t bn_rows_per_chunk(int64_t m, int64_t c)
{
    int64_t per = BN_CHUNK_MIN / (c > 0 ? c : 1) + 1;
    int64_t n = (m + per - 1) / per;
    n = n < 1 ? 1 : n > BN_MAX_CHUNKS ? BN_MAX_CHUNKS : n;
    return (m + n - 1) / n;
}

static int64_t bn_n_chunks(int64_t m, int64_t c)
{
    int64_t rows = bn_rows_per_chunk(m, c);
    return rows > 0 ? (m + rows - 1) / rows : 0;
}

size_t sx_batch_norm_workspace(int rank, const int64_t *x_shape)
{
    if (rank < 1 || x_shape == NULL)
        return 0;
    int64_t c = x_shape[rank - 1], m = 1;
    for (int i = 0; i < rank - 1; i++)
        m *= x_shape[i];
    if (c < 1)
        return 0;
    /* centre, S1, S2, the chunks' partials (statistics, sums); a and b (normalise) and the four
     * coefficients of dx fit */
    return (size_t)(4 * c + 2 * c * bn_n_chunks(m, c)) * sizeof(double);
}

/* Per channel: S1 and S2 (see bn_block) over all m rows into s (2c doubles: S1 row, S2 row),
 * the chunks' partials in `part` (n_chunks x 2c doubles). */
static void bn_reduce(bn_job *jb, double *s, double *part)
{
    const int64_t m = jb->m, c = jb->c;
    jb->rows = bn_rows_per_chunk(m, c);
    jb->n_chunks = bn_n_chunks(m, c);
    jb->n_tiles = (c + BN_TILE - 1) / BN_TILE;
    jb->part = part;
    for (int64_t j = 0; j < 2 * c; j++)
        s[j] = 0;
    if (jb->n_chunks == 0 || c == 0)
        return;
    sx__par_for(jb->n_chunks * jb->n_tiles, bn_task, jb);
    for (int64_t k = 0; k < jb->n_chunks; k++)
        for (int64_t j = 0; j < 2 * c; j++)
            s[j] += part[2 * k * c + j];
}

/* The workspace: given (ws of ws_bytes) or allocated (*own, freed by the caller). */
static sx_status bn_ws(const char *who, const sx_tensor *x, void *ws, size_t ws_bytes, void **own,
                       double **out)
{
    size_t need = sx_batch_norm_workspace(x->rank, x->shape);
    *own = NULL;
    if (ws != NULL && ws_bytes >= need) {
        *out = ws;
        return SX_OK;
    }
    if (ws != NULL || ws_bytes != 0)
        return sx_error(SX_E_ARG, "%s: workspace of %zu bytes, want %zu (sx_batch_norm_workspace)",
                        who, ws_bytes, need);
    *own = sx_calloc(need / sizeof(double) + 1, sizeof(double));
    if (*own == NULL)
        return sx_error(SX_E_NOMEM, "%s: no memory for a workspace of %zu bytes", who, need);
    *out = *own;
    return SX_OK;
}

static double get_d(const sx_tensor *t, int64_t i)
{
    return t->dtype == SX_F32 ? (double)SX_F32P(t)[i] : SX_F64P(t)[i];
}

static void set_d(sx_tensor *t, int64_t i, double v)
{
    if (t->dtype == SX_F32)
        SX_F32P(t)[i] = (float)v;
    else
        SX_F64P(t)[i] = v;
}

/* x of rank >= 1 (its last axis the channels), `v` (named) of x's dtype and the shape (c), or
 * (2, c) when two_rows. */
static sx_status bn_check(const char *who, const sx_tensor *x, const char *name, const sx_tensor *v,
                          bool two_rows)
{
    int64_t c = x->shape[x->rank - 1], s2[2] = {2, c};
    SX_TRY(sx__check_tensor(who, name, v));
    SX_TRY(sx__check_same_dtype(who, x, v));
    int r = two_rows ? 2 : 1;
    if (!sx_shape_equal(v->rank, v->shape, r, two_rows ? s2 : s2 + 1)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want %s for x %s", who, name,
                        sx_shape_str(v->rank, v->shape, a, sizeof a), two_rows ? "(2,c)" : "(c)",
                        sx_shape_str(x->rank, x->shape, b, sizeof b));
    }
    return SX_OK;
}

static sx_status bn_check_x(const char *who, const sx_tensor *x)
{
    SX_TRY(sx__check_tensor(who, "x", x));
    if (x->rank < 1)
        return sx_error(SX_E_RANK, "%s: x has rank 0 (want a channel axis)", who);
    return SX_OK;
}

/* The statistics pass of sx_tensor_batch_norm_stats_ws and _out (`who`: the one called). */
static sx_status bn_stats(const char *who, const sx_tensor *x, sx_tensor *stats, void *ws,
                          size_t ws_bytes)
{
    SX_TRY(bn_check_x(who, x));
    SX_TRY(bn_check(who, x, "stats", stats, true));
    SX_TRY(sx__check_apart(who, "x", x, "stats", stats));
    const int64_t c = x->shape[x->rank - 1], m = c > 0 ? x->size / c : 0;
    void *own = NULL;
    double *buf = NULL; /* shift, S1, S2, partials */
    SX_TRY(bn_ws(who, x, ws, ws_bytes, &own, &buf));
    for (int64_t j = 0; j < c; j++)
        buf[j] = m > 0 ? get_d(x, j) : 0;
    bn_job jb = {.x = x->data, .center = buf, .m = m, .c = c, .kern = bn_pick(x->dtype)};
    bn_reduce(&jb, buf + c, buf + 3 * c);
    for (int64_t j = 0; j < c; j++) {
        double s1 = buf[c + j], s2 = buf[2 * c + j], mm = (double)m;
        double mean = m > 0 ? buf[j] + s1 / mm : 0, var = m > 0 ? (s2 - s1 * s1 / mm) / mm : 0;
        set_d(stats, j, mean);
        set_d(stats, c + j, var > 0 ? var : 0);
    }
    sx_free(own);
    return SX_OK;
}

sx_status sx_tensor_batch_norm_stats_ws(const sx_tensor *x, sx_tensor *stats, void *ws,
                                        size_t ws_bytes)
{
    return bn_stats("sx_tensor_batch_norm_stats_ws", x, stats, ws, ws_bytes);
}

sx_status sx_tensor_batch_norm_stats_out(const sx_tensor *x, sx_tensor *stats)
{
    return bn_stats("sx_tensor_batch_norm_stats_out", x, stats, NULL, 0);
}

/* t (named `name`) is a tensor with x's dtype and shape. */
static sx_status bn_check_like_x(const char *who, const char *name, const sx_tensor *x,
                                 const sx_tensor *t)
{
    SX_TRY(sx__check_tensor(who, name, t));
    SX_TRY(sx__check_same_dtype(who, x, t));
    if (!sx_shape_equal(t->rank, t->shape, x->rank, x->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, x %s (want the same)", who, name,
                        sx_shape_str(t->rank, t->shape, a, sizeof a),
                        sx_shape_str(x->rank, x->shape, b, sizeof b));
    }
    return SX_OK;
}

/* The checks of the normalising pass: x, the per-channel inputs, y, eps; the residual res (NULL:
 * none) of x's dtype and shape; y equal to or apart from x and res. */
static sx_status bn_check_norm(const char *who, const sx_tensor *x, const sx_tensor *stats,
                               const sx_tensor *gamma, const sx_tensor *beta, double eps,
                               const sx_tensor *res, const sx_tensor *y)
{
    SX_TRY(bn_check_x(who, x));
    SX_TRY(bn_check(who, x, "stats", stats, true));
    SX_TRY(bn_check(who, x, "gamma", gamma, false));
    SX_TRY(bn_check(who, x, "beta", beta, false));
    SX_TRY(sx__check_out(who, y, x->dtype, x->rank, x->shape));
    if (!(eps >= 0) || !isfinite(eps))
        return sx_error(SX_E_ARG, "%s: eps %g (want finite, >= 0)", who, eps);
    /* stats, gamma and beta are read before y is written: y may overlap them */
    if (y->data != x->data)
        SX_TRY(sx__check_apart(who, "x", x, "y", y));
    if (res == NULL)
        return SX_OK;
    SX_TRY(bn_check_like_x(who, "res", x, res));
    if (y->data != res->data)
        SX_TRY(sx__check_apart(who, "res", res, "y", y));
    return SX_OK;
}

/* The normalising pass of sx_tensor_batch_norm_out, _ws, _act_ws and _res_ws (`who`: the one
 * called). */
static sx_status bn_norm(const char *who, const sx_tensor *x, const sx_tensor *stats,
                         const sx_tensor *gamma, const sx_tensor *beta, double eps,
                         const sx_tensor *res, bool relu, sx_tensor *y, void *ws, size_t ws_bytes)
{
    SX_TRY(bn_check_norm(who, x, stats, gamma, beta, eps, res, y));
    const int64_t c = x->shape[x->rank - 1], m = c > 0 ? x->size / c : 0;
    void *own = NULL;
    double *ab = NULL; /* c scales then c shifts, in the dtype */
    SX_TRY(bn_ws(who, x, ws, ws_bytes, &own, &ab));
    int64_t as[1] = {2 * c};
    sx_tensor abv = sx_tensor_view(x->dtype, 1, as, ab);
    for (int64_t j = 0; j < c; j++) {
        double a = get_d(gamma, j) / sqrt(get_d(stats, c + j) + eps);
        set_d(&abv, j, a);
        a = get_d(&abv, j); /* the shift from the scale as rounded */
        set_d(&abv, c + j, get_d(beta, j) - get_d(stats, j) * a);
    }
    bn_norm_job nj = {x->data, ab, res != NULL ? res->data : NULL, y->data, c, relu};
    int64_t grain = c > 0 ? SX_PAR_MIN / 2 / c + 1 : 1;
    sx__par_range(m, grain, bn_pick(x->dtype)->norm_rows, &nj);
    sx_free(own);
    return SX_OK;
}

sx_status sx_tensor_batch_norm_res_ws(const sx_tensor *x, const sx_tensor *stats,
                                      const sx_tensor *gamma, const sx_tensor *beta, double eps,
                                      const sx_tensor *res, bool relu, sx_tensor *y, void *ws,
                                      size_t ws_bytes)
{
    return bn_norm("sx_tensor_batch_norm_res_ws", x, stats, gamma, beta, eps, res, relu, y, ws,
                   ws_bytes);
}

sx_status sx_tensor_batch_norm_act_ws(const sx_tensor *x, const sx_tensor *stats,
                                      const sx_tensor *gamma, const sx_tensor *beta, double eps,
                                      bool relu, sx_tensor *y, void *ws, size_t ws_bytes)
{
    return bn_norm("sx_tensor_batch_norm_act_ws", x, stats, gamma, beta, eps, NULL, relu, y, ws,
                   ws_bytes);
}

sx_status sx_tensor_batch_norm_ws(const sx_tensor *x, const sx_tensor *stats,
                                  const sx_tensor *gamma, const sx_tensor *beta, double eps,
                                  sx_tensor *y, void *ws, size_t ws_bytes)
{
    return bn_norm("sx_tensor_batch_norm_ws", x, stats, gamma, beta, eps, NULL, false, y, ws,
                   ws_bytes);
}

sx_status sx_tensor_batch_norm_out(const sx_tensor *x, const sx_tensor *stats,
                                   const sx_tensor *gamma, const sx_tensor *beta, double eps,
                                   sx_tensor *y)
{
    return bn_norm("sx_tensor_batch_norm_out", x, stats, gamma, beta, eps, NULL, false, y, NULL, 0);
}

/* dy (required) and the relu mask y (NULL: none) have x's dtype and shape. */
static sx_status bn_check_dy_y(const char *who, const sx_tensor *x, const sx_tensor *dy,
                               const sx_tensor *y)
{
    SX_TRY(bn_check_like_x(who, "dy", x, dy));
    return y == NULL ? SX_OK : bn_check_like_x(who, "y", x, y);
}

/* The sums pass of sx_tensor_batch_norm_sums_out, _ws and _mask_ws (`who`: the one called). */
static sx_status bn_sums(const char *who, const sx_tensor *x, const sx_tensor *stats,
                         const sx_tensor *dy, const sx_tensor *y, sx_tensor *sums, void *ws,
                         size_t ws_bytes)
{
    SX_TRY(bn_check_x(who, x));
    SX_TRY(bn_check(who, x, "stats", stats, true));
    SX_TRY(bn_check_dy_y(who, x, dy, y));
    SX_TRY(bn_check(who, x, "sums", sums, true));
    SX_TRY(sx__check_apart(who, "x", x, "sums", sums));
    SX_TRY(sx__check_apart(who, "dy", dy, "sums", sums));
    SX_TRY(sx__check_apart(who, "stats", stats, "sums", sums));
    if (y != NULL)
        SX_TRY(sx__check_apart(who, "y", y, "sums", sums));
    const int64_t c = x->shape[x->rank - 1], m = c > 0 ? x->size / c : 0;
    void *own = NULL;
    double *buf = NULL; /* mean, S1, S2, partials */
    SX_TRY(bn_ws(who, x, ws, ws_bytes, &own, &buf));
    for (int64_t j = 0; j < c; j++)
        buf[j] = get_d(stats, j);
    bn_job jb = {.x = x->data,
                 .dy = dy->data,
                 .mask = y != NULL ? y->data : NULL,
                 .center = buf,
                 .m = m,
                 .c = c,
                 .kern = bn_pick(x->dtype)};
    bn_reduce(&jb, buf + c, buf + 3 * c);
    for (int64_t j = 0; j < 2 * c; j++)
        set_d(sums, j, buf[c + j]);
    sx_free(own);
    return SX_OK;
}

sx_status sx_tensor_batch_norm_sums_mask_ws(const sx_tensor *x, const sx_tensor *stats,
                                            const sx_tensor *dy, const sx_tensor *y,
                                            sx_tensor *sums, void *ws, size_t ws_bytes)
{
    return bn_sums("sx_tensor_batch_norm_sums_mask_ws", x, stats, dy, y, sums, ws, ws_bytes);
}

sx_status sx_tensor_batch_norm_sums_ws(const sx_tensor *x, const sx_tensor *stats,
                                       const sx_tensor *dy, sx_tensor *sums, void *ws,
                                       size_t ws_bytes)
{
    return bn_sums("sx_tensor_batch_norm_sums_ws", x, stats, dy, NULL, sums, ws, ws_bytes);
}

sx_status sx_tensor_batch_norm_sums_out(const sx_tensor *x, const sx_tensor *stats,
                                        const sx_tensor *dy, sx_tensor *sums)
{
    return bn_sums("sx_tensor_batch_norm_sums_out", x, stats, dy, NULL, sums, NULL, 0);
}

/* dx of y = batch_norm(x, stats(x), gamma, beta) (the statistics' path included): with
 * r = 1 / sqrt(var + eps), a = gamma r, (S0; S1) = sums,
 * dx = dy a + (x - mean) k1 + k0, k1 = -gamma r^3 S1 / m, k0 = -gamma r S0 / m
 * (coefficients in double, rounded to the dtype; the rest in the dtype). */
sx_status sx_tensor_batch_norm_dx_ws(const sx_tensor *x, const sx_tensor *stats,
                                     const sx_tensor *gamma, const sx_tensor *dy,
                                     const sx_tensor *sums, const sx_tensor *y, double eps,
                                     sx_tensor *dx, void *ws, size_t ws_bytes)
{
    const char *who = "sx_tensor_batch_norm_dx_ws";
    SX_TRY(bn_check_x(who, x));
    SX_TRY(bn_check(who, x, "stats", stats, true));
    SX_TRY(bn_check(who, x, "gamma", gamma, false));
    SX_TRY(bn_check(who, x, "sums", sums, true));
    SX_TRY(bn_check_dy_y(who, x, dy, y));
    SX_TRY(sx__check_out(who, dx, x->dtype, x->rank, x->shape));
    if (!(eps >= 0) || !isfinite(eps))
        return sx_error(SX_E_ARG, "%s: eps %g (want finite, >= 0)", who, eps);
    /* element i of dx is written after element i of x, dy and y are read: dx may be one of them,
     * else apart from them; the (c) inputs are read before dx is written */
    const sx_tensor *big[3] = {x, dy, y};
    const char *names[3] = {"x", "dy", "y"};
    for (int i = 0; i < 3; i++)
        if (big[i] != NULL && big[i]->data != dx->data)
            SX_TRY(sx__check_apart(who, names[i], big[i], "dx", dx));
    const int64_t c = x->shape[x->rank - 1], m = c > 0 ? x->size / c : 0;
    void *own = NULL;
    double *buf = NULL;
    SX_TRY(bn_ws(who, x, ws, ws_bytes, &own, &buf));
    int64_t ks[1] = {4 * c};
    sx_tensor kv = sx_tensor_view(x->dtype, 1, ks, buf);
    double inv_m = m > 0 ? 1 / (double)m : 0;
    for (int64_t j = 0; j < c; j++) {
        double r = 1 / sqrt(get_d(stats, c + j) + eps), gr = get_d(gamma, j) * r;
        set_d(&kv, j, get_d(stats, j));
        set_d(&kv, c + j, gr);
        set_d(&kv, 2 * c + j, -gr * r * r * get_d(sums, c + j) * inv_m);
        set_d(&kv, 3 * c + j, -gr * get_d(sums, j) * inv_m);
    }
    bn_dx_job dj = {x->data, dy->data, y != NULL ? y->data : NULL, buf, dx->data, c};
    int64_t grain = c > 0 ? SX_PAR_MIN / 2 / c + 1 : 1;
    sx__par_range(m, grain, bn_pick(x->dtype)->dx_rows, &dj);
    sx_free(own);
    return SX_OK;
}
