/* norm.c: the normalisation family's entry points sx_tensor_norm_*_out, and the group kernels:
 * LayerNorm, GroupNorm and InstanceNorm. x is viewed as (n, s, c) (sx_norm_axes) and its c
 * channels as G groups of k adjacent ones; each of the n G groups of s k elements is normalised
 * by its own mean and variance. A group is always summed by one thread, in memory order, in
 * double, so results never depend on the thread count; tasks are whole groups (statistics,
 * backward sums) or whole rows of c (normalising). Batch norm's geometry (lead 0, tail 1,
 * groups c) is checked here, then run on the batch-norm kernels (batch_norm.c). */
#include "tensor_impl.h"

#include <math.h>

typedef struct norm_job {
    const void *x, *dy, *stats, *gamma, *beta; /* dy: the sums; gamma/beta NULL: no affine */
    void *out;
    int64_t n, s, c, groups, k; /* k = c / groups */
    double eps;
    sx_dtype dt;
} norm_job;

/* The statistics of groups [lo, hi): mean, then the biased variance about it (two passes over
 * the group). Out (2, n G): row 0 means, row 1 variances. */
#define NORM_STATS_BODY(T)                                                                         \
    do {                                                                                           \
        const T *x = jb->x;                                                                        \
        T *out = jb->out;                                                                          \
        const int64_t p = jb->n * jb->groups, m = jb->s * jb->k;                                   \
        for (int64_t q = lo; q < hi; q++) {                                                        \
            int64_t ni = q / jb->groups, j0 = q % jb->groups * jb->k;                              \
            double sum = 0, ss = 0;                                                                \
            for (int64_t si = 0; si < jb->s; si++) {                                               \
                const T *row = x + (ni * jb->s + si) * jb->c + j0;                                 \
                for (int64_t j = 0; j < jb->k; j++)                                                \
                    sum += (double)row[j];                                                         \
            }                                                                                      \
            double mean = m > 0 ? sum / (double)m : 0;                                             \
            for (int64_t si = 0; si < jb->s; si++) {                                               \
                const T *row = x + (ni * jb->s + si) * jb->c + j0;                                 \
                for (int64_t j = 0; j < jb->k; j++) {                                              \
                    double d = (double)row[j] - mean;                                              \
                    ss += d * d;                                                                   \
                }                                                                                  \
            }                                                                                      \
            out[q] = (T)mean;                                                                      \
            out[p + q] = (T)(m > 0 ? ss / (double)m : 0);                                          \
        }                                                                                          \
    } while (0)

/* The backward sums of groups [lo, hi): row 0 sum(dy), row 1 sum(dy (x - mean)). */
#define NORM_SUMS_BODY(T)                                                                          \
    do {                                                                                           \
        const T *x = jb->x, *dy = jb->dy, *st = jb->stats;                                         \
        T *out = jb->out;                                                                          \
        const int64_t p = jb->n * jb->groups;                                                      \
        for (int64_t q = lo; q < hi; q++) {                                                        \
            int64_t ni = q / jb->groups, j0 = q % jb->groups * jb->k;                              \
            double mean = (double)st[q], s0 = 0, s1 = 0;                                           \
            for (int64_t si = 0; si < jb->s; si++) {                                               \
                int64_t o = (ni * jb->s + si) * jb->c + j0;                                        \
                for (int64_t j = 0; j < jb->k; j++) {                                              \
                    double g = (double)dy[o + j];                                                  \
                    s0 += g;                                                                       \
                    s1 += g * ((double)x[o + j] - mean);                                           \
                }                                                                                  \
            }                                                                                      \
            out[q] = (T)s0;                                                                        \
            out[p + q] = (T)s1;                                                                    \
        }                                                                                          \
    } while (0)

/* Rows [lo, hi) of (n s, c): y = (x - mean) / sqrt(var + eps) (* gamma + beta), in double. */
#define NORM_APPLY_BODY(T)                                                                         \
    do {                                                                                           \
        const T *x = jb->x, *st = jb->stats, *ga = jb->gamma, *be = jb->beta;                      \
        T *y = jb->out;                                                                            \
        const int64_t p = jb->n * jb->groups;                                                      \
        for (int64_t r = lo; r < hi; r++) {                                                        \
            int64_t q0 = r / jb->s * jb->groups;                                                   \
            const T *xr = x + r * jb->c;                                                           \
            T *yr = y + r * jb->c;                                                                 \
            for (int64_t gi = 0; gi < jb->groups; gi++) {                                          \
                double mean = (double)st[q0 + gi];                                                 \
                double rs = 1 / sqrt((double)st[p + q0 + gi] + jb->eps);                           \
                for (int64_t j = gi * jb->k; j < (gi + 1) * jb->k; j++) {                          \
                    double v = ((double)xr[j] - mean) * rs;                                        \
                    yr[j] = (T)(ga != NULL ? v * (double)ga[j] + (double)be[j] : v);               \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static void stats_range(void *ctx, int64_t lo, int64_t hi)
{
    const norm_job *jb = ctx;
    if (jb->dt == SX_F32)
        NORM_STATS_BODY(float);
    else
        NORM_STATS_BODY(double);
}

static void sums_range(void *ctx, int64_t lo, int64_t hi)
{
    const norm_job *jb = ctx;
    if (jb->dt == SX_F32)
        NORM_SUMS_BODY(float);
    else
        NORM_SUMS_BODY(double);
}

static void apply_range_f32(void *ctx, int64_t lo, int64_t hi)
{
    const norm_job *jb = ctx;
    NORM_APPLY_BODY(float);
}

static void apply_range_f64(void *ctx, int64_t lo, int64_t hi)
{
    const norm_job *jb = ctx;
    NORM_APPLY_BODY(double);
}

/* Check ax against x and fill n, s, c, groups, k of jb. */
static sx_status norm_view(const char *who, const sx_tensor *x, sx_norm_axes ax, norm_job *jb)
{
    SX_TRY(sx__check_tensor(who, "x", x));
    char b[128];
    if (ax.lead < 0 || ax.tail < 1 || ax.lead + ax.tail > x->rank)
        return sx_error(SX_E_AXIS,
                        "%s: lead %d, tail %d axes of x %s (want lead >= 0, tail >= 1, "
                        "lead + tail <= rank)",
                        who, ax.lead, ax.tail, sx_shape_str(x->rank, x->shape, b, sizeof b));
    int64_t n = 1, s = 1, c = 1;
    for (int i = 0; i < x->rank; i++)
        *(i < ax.lead ? &n : i < x->rank - ax.tail ? &s : &c) *= x->shape[i];
    if (ax.groups < 1 || c % ax.groups != 0)
        return sx_error(SX_E_ARG, "%s: %lld groups do not divide the %lld channels of x %s", who,
                        (long long)ax.groups, (long long)c,
                        sx_shape_str(x->rank, x->shape, b, sizeof b));
    jb->n = n, jb->s = s, jb->c = c, jb->groups = ax.groups, jb->k = c / ax.groups;
    jb->x = x->data, jb->dt = x->dtype;
    return SX_OK;
}

/* Batch norm's geometry: statistics per channel of the last axis over every other element. */
static bool per_channel(sx_norm_axes ax, const norm_job *jb)
{
    return ax.lead == 0 && ax.tail == 1 && ax.groups == jb->c;
}

/* stats / sums (2, n G) of x's dtype. */
static sx_status check_rows(const char *who, const char *name, const sx_tensor *x,
                            const sx_tensor *v, const norm_job *jb)
{
    int64_t want[2] = {2, jb->n * jb->groups};
    SX_TRY(sx__check_tensor(who, name, v));
    SX_TRY(sx__check_same_dtype(who, x, v));
    if (!sx_shape_equal(v->rank, v->shape, 2, want)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want %s", who, name,
                        sx_shape_str(v->rank, v->shape, a, sizeof a),
                        sx_shape_str(2, want, b, sizeof b));
    }
    return SX_OK;
}

/* grain: about SX_PAR_MIN / 2 elements per task of `per` elements each */
static int64_t grain_of(int64_t per)
{
    return per > 0 ? SX_PAR_MIN / 2 / per + 1 : 1;
}

sx_status sx_tensor_norm_stats_out(const sx_tensor *x, sx_norm_axes ax, sx_tensor *stats)
{
    const char *who = "sx_tensor_norm_stats_out";
    norm_job jb = {0};
    SX_TRY(norm_view(who, x, ax, &jb));
    SX_TRY(check_rows(who, "stats", x, stats, &jb));
    SX_TRY(sx__check_apart(who, "x", x, "stats", stats));
    if (per_channel(ax, &jb))
        return sx_tensor_batch_norm_stats_out(x, stats);
    jb.out = stats->data;
    sx__par_range(jb.n * jb.groups, grain_of(jb.s * jb.k), stats_range, &jb);
    return SX_OK;
}

sx_status sx_tensor_norm_sums_out(const sx_tensor *x, const sx_tensor *stats, const sx_tensor *dy,
                                  sx_norm_axes ax, sx_tensor *sums)
{
    const char *who = "sx_tensor_norm_sums_out";
    norm_job jb = {0};
    SX_TRY(norm_view(who, x, ax, &jb));
    SX_TRY(check_rows(who, "stats", x, stats, &jb));
    SX_TRY(sx__check_tensor(who, "dy", dy));
    SX_TRY(sx__check_same_dtype(who, x, dy));
    if (!sx_shape_equal(dy->rank, dy->shape, x->rank, x->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: dy has shape %s, x %s", who,
                        sx_shape_str(dy->rank, dy->shape, a, sizeof a),
                        sx_shape_str(x->rank, x->shape, b, sizeof b));
    }
    SX_TRY(check_rows(who, "sums", x, sums, &jb));
    SX_TRY(sx__check_apart(who, "x", x, "sums", sums));
    SX_TRY(sx__check_apart(who, "dy", dy, "sums", sums));
    SX_TRY(sx__check_apart(who, "stats", stats, "sums", sums));
    if (per_channel(ax, &jb))
        return sx_tensor_batch_norm_sums_out(x, stats, dy, sums);
    jb.dy = dy->data, jb.stats = stats->data, jb.out = sums->data;
    sx__par_range(jb.n * jb.groups, grain_of(jb.s * jb.k), sums_range, &jb);
    return SX_OK;
}

sx_status sx_tensor_norm_out(const sx_tensor *x, const sx_tensor *stats, const sx_tensor *gamma,
                             const sx_tensor *beta, sx_norm_axes ax, double eps, sx_tensor *y)
{
    const char *who = "sx_tensor_norm_out";
    norm_job jb = {0};
    SX_TRY(norm_view(who, x, ax, &jb));
    SX_TRY(check_rows(who, "stats", x, stats, &jb));
    if ((gamma == NULL) != (beta == NULL))
        return sx_error(SX_E_ARG, "%s: gamma %s but beta %s (want both or neither)", who,
                        gamma ? "given" : "NULL", beta ? "given" : "NULL");
    const sx_tensor *aff[2] = {gamma, beta};
    const int64_t *tail = x->shape + x->rank - ax.tail;
    for (int i = 0; i < 2 && gamma != NULL; i++) {
        const char *name = i == 0 ? "gamma" : "beta";
        SX_TRY(sx__check_tensor(who, name, aff[i]));
        SX_TRY(sx__check_same_dtype(who, x, aff[i]));
        if (!sx_shape_equal(aff[i]->rank, aff[i]->shape, ax.tail, tail)) {
            char a[128], b[128];
            return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want x's last %d axes %s", who, name,
                            sx_shape_str(aff[i]->rank, aff[i]->shape, a, sizeof a), ax.tail,
                            sx_shape_str(ax.tail, tail, b, sizeof b));
        }
    }
    SX_TRY(sx__check_out(who, y, x->dtype, x->rank, x->shape));
    if (!(eps >= 0) || !isfinite(eps))
        return sx_error(SX_E_ARG, "%s: eps %g (want finite, >= 0)", who, eps);
    /* y may be x itself (each element is read before it is written), else apart from every
     * input: rows are written while other tasks still read stats, gamma, beta */
    if (y->data != x->data)
        SX_TRY(sx__check_apart(who, "x", x, "y", y));
    SX_TRY(sx__check_apart(who, "stats", stats, "y", y));
    for (int i = 0; i < 2 && gamma != NULL; i++)
        SX_TRY(sx__check_apart(who, i == 0 ? "gamma" : "beta", aff[i], "y", y));
    if (per_channel(ax, &jb) && gamma != NULL)
        return sx_tensor_batch_norm_out(x, stats, gamma, beta, eps, y);
    jb.stats = stats->data, jb.out = y->data, jb.eps = eps;
    jb.gamma = gamma ? gamma->data : NULL, jb.beta = beta ? beta->data : NULL;
    sx__par_range(jb.n * jb.s, grain_of(jb.c),
                  x->dtype == SX_F32 ? apply_range_f32 : apply_range_f64, &jb);
    return SX_OK;
}
