/* views.c: sources over other sources, which they borrow: a subset through an index (splits
 * are two of them over one seeded permutation), and standardisation with per-feature mean/std
 * computed on one source (the training split) and applied to any other. No example is copied. */
#include "datasets_impl.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- subsets and splits */

typedef struct subset_impl {
    const sx_ds_source *parent; /* borrowed */
    int64_t *index;             /* (count) owned */
} subset_impl;

static void subset_drop(void *p)
{
    subset_impl *v = p;
    sx_free(v->index);
    sx_free(v);
}

static sx_status subset_get(const sx_ds_source *s, int64_t i, void *x, void *y)
{
    const subset_impl *v = s->impl;
    return v->parent->get(v->parent, v->index[i], x, y);
}

static const char *subset_class_name(const sx_ds_source *s, int64_t k)
{
    const subset_impl *v = s->impl;
    return sx_ds_source_class_name(v->parent, k);
}

/* A view of parent through index (count entries, in range), copied. */
static sx_status subset_new(const char *who, const sx_ds_source *parent, const int64_t *index,
                            int64_t count, sx_ds_source **out)
{
    subset_impl *v = sx_calloc(1, sizeof *v);
    int64_t *ix = v ? sx_alloc((size_t)count * sizeof *ix) : NULL;
    if (ix == NULL) {
        sx_free(v);
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    }
    memcpy(ix, index, (size_t)count * sizeof *ix);
    v->parent = parent;
    v->index = ix;
    SX_TRY(
        sx__source_new(who, &parent->spec, count, parent->name, subset_get, v, subset_drop, out));
    (*out)->class_name = subset_class_name;
    (*out)->x_names = parent->x_names;
    (*out)->y_name = parent->y_name;
    return SX_OK;
}

sx_status sx_ds_source_subset(const sx_ds_source *s, const int64_t *index, int64_t count,
                              sx_ds_source **out)
{
    const char *who = "sx_ds_source_subset";
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    if (s == NULL || index == NULL || count < 1)
        return sx_error(SX_E_ARG, "%s: %s", who,
                        s == NULL   ? "the source is NULL"
                        : count < 1 ? "count < 1"
                                    : "index NULL");
    for (int64_t r = 0; r < count; r++)
        if (index[r] < 0 || index[r] >= s->n)
            return sx_error(SX_E_RANGE, "%s: index[%lld] = %lld is not in 0..%lld", who,
                            (long long)r, (long long)index[r], (long long)s->n - 1);
    return subset_new(who, s, index, count, out);
}

sx_status sx_ds_split(const sx_ds_source *s, double val_fraction, uint64_t seed,
                      sx_ds_source **train, sx_ds_source **val)
{
    const char *who = "sx_ds_split";
    if (train == NULL || val == NULL)
        return sx_error(SX_E_ARG, "%s: an output is NULL", who);
    *train = *val = NULL;
    if (s == NULL)
        return sx_error(SX_E_ARG, "%s: the source is NULL", who);
    if (!(val_fraction > 0.0 && val_fraction < 1.0))
        return sx_error(SX_E_ARG, "%s: val_fraction %g is not in (0, 1)", who, val_fraction);
    int64_t nv = (int64_t)llround((double)s->n * val_fraction), nt = s->n - nv;
    if (nv < 1 || nt < 1)
        return sx_error(SX_E_ARG, "%s: val_fraction %g of %lld examples leaves %s empty", who,
                        val_fraction, (long long)s->n, nv < 1 ? "validation" : "training");
    int64_t *perm = sx_alloc((size_t)s->n * sizeof *perm);
    if (perm == NULL)
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    sx__order(perm, s->n, true, seed, 0);
    sx_status st = subset_new(who, s, perm, nt, train);
    if (st == SX_OK)
        st = subset_new(who, s, perm + nt, nv, val);
    if (st != SX_OK) {
        sx_ds_source_free(*train);
        *train = NULL;
    }
    sx_free(perm);
    return st;
}

/* ---------------------------------------------------------------- statistics */

void sx_ds_stats_free(sx_ds_stats *st)
{
    if (st == NULL)
        return;
    sx_free(st->mean);
    sx_free(st->std);
    sx_free(st);
}

static sx_status stats_alloc(const char *who, int64_t size, sx_ds_stats **out)
{
    sx_ds_stats *st = sx_calloc(1, sizeof *st);
    if (st != NULL) {
        st->size = size;
        st->mean = sx_calloc((size_t)size, sizeof *st->mean);
        st->std = sx_calloc((size_t)size, sizeof *st->std);
    }
    if (st == NULL || st->mean == NULL || st->std == NULL) {
        sx_ds_stats_free(st);
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    }
    *out = st;
    return SX_OK;
}

/* One pass over s: pass 0 sums values into mean, pass 1 squared deviations into std. Element k
 * goes to group k % groups. row is scratch of one x. */
static sx_status stats_pass(const sx_ds_source *s, int pass, int64_t groups, void *row,
                            sx_ds_stats *st)
{
    for (int64_t i = 0; i < s->n; i++) {
        SX_TRY(s->get(s, i, row, NULL));
        for (int64_t k = 0; k < s->x_size; k++) {
            double v = sx__elem(row, s->spec.x_type, k) * s->spec.x_scale;
            int64_t g = k % groups;
            if (pass == 0)
                st->mean[g] += v;
            else
                st->std[g] += (v - st->mean[g]) * (v - st->mean[g]);
        }
    }
    return SX_OK;
}

sx_status sx_ds_stats_compute(const sx_ds_source *s, int64_t channels, sx_ds_stats **out)
{
    const char *who = "sx_ds_stats_compute";
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    if (s == NULL || channels < 0 || (channels > 0 && s->x_size % channels != 0))
        return sx_error(SX_E_ARG, "%s: %s", who,
                        s == NULL ? "the source is NULL"
                                  : "channels must be >= 0 and divide the example's x size");
    int64_t groups = channels > 0 ? channels : s->x_size;
    double per = (double)(s->n * (s->x_size / groups)); /* values per group */
    sx_ds_stats *st = NULL;
    SX_TRY(stats_alloc(who, groups, &st));
    void *row = sx_alloc((size_t)s->x_size * sx_ds_type_size(s->spec.x_type));
    sx_status rc = row ? stats_pass(s, 0, groups, row, st)
                       : sx_error(SX_E_NOMEM,
                                  "%s: out of "
                                  "memory",
                                  who);
    for (int64_t g = 0; rc == SX_OK && g < groups; g++)
        st->mean[g] /= per;
    if (rc == SX_OK)
        rc = stats_pass(s, 1, groups, row, st);
    for (int64_t g = 0; rc == SX_OK && g < groups; g++) {
        st->std[g] = sqrt(st->std[g] / per);
        if (!(st->std[g] > 0.0))
            st->std[g] = 1.0; /* a constant feature: centred, not scaled */
    }
    sx_free(row);
    if (rc != SX_OK) {
        sx_ds_stats_free(st);
        return rc;
    }
    *out = st;
    return SX_OK;
}

/* ---------------------------------------------------------------- standardisation */

typedef struct std_impl {
    const sx_ds_source *parent; /* borrowed */
    double *mean, *std;         /* (x_size) copies */
    void *row;                  /* one parent x */
} std_impl;

static void std_drop(void *p)
{
    std_impl *v = p;
    sx_free(v->mean);
    sx_free(v->std);
    sx_free(v->row);
    sx_free(v);
}

static sx_status std_get(const sx_ds_source *s, int64_t i, void *x, void *y)
{
    const std_impl *v = s->impl;
    const sx_ds_source *p = v->parent;
    SX_TRY(p->get(p, i, x != NULL ? v->row : NULL, y));
    double *o = x;
    for (int64_t k = 0; o != NULL && k < s->x_size; k++)
        o[k] = (sx__elem(v->row, p->spec.x_type, k) * p->spec.x_scale - v->mean[k]) / v->std[k];
    return SX_OK;
}

static const char *std_class_name(const sx_ds_source *s, int64_t k)
{
    const std_impl *v = s->impl;
    return sx_ds_source_class_name(v->parent, k);
}

sx_status sx_ds_source_standardize(const sx_ds_source *s, const sx_ds_stats *st, sx_ds_source **out)
{
    const char *who = "sx_ds_source_standardize";
    if (out == NULL || s == NULL || st == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who,
                        out == NULL ? "out"
                        : s == NULL ? "the source"
                                    : "the stats");
    *out = NULL;
    if (st->size != s->x_size)
        return sx_error(SX_E_ARG, "%s: stats of %lld features for a source of %lld", who,
                        (long long)st->size, (long long)s->x_size);
    for (int64_t k = 0; k < st->size; k++)
        if (!isfinite(st->mean[k]) || !(st->std[k] > 0.0) || !isfinite(st->std[k]))
            return sx_error(SX_E_ARG, "%s: feature %lld has mean %g, std %g (want finite, std > 0)",
                            who, (long long)k, st->mean[k], st->std[k]);
    std_impl *v = sx_calloc(1, sizeof *v);
    size_t bytes = (size_t)s->x_size * sizeof(double);
    if (v != NULL) {
        v->parent = s;
        v->mean = sx_alloc(bytes);
        v->std = sx_alloc(bytes);
        v->row = sx_alloc((size_t)s->x_size * sx_ds_type_size(s->spec.x_type));
    }
    if (v == NULL || v->mean == NULL || v->std == NULL || v->row == NULL) {
        if (v != NULL)
            std_drop(v);
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    }
    memcpy(v->mean, st->mean, bytes);
    memcpy(v->std, st->std, bytes);
    sx_ds_spec spec = s->spec;
    spec.x_type = SX_DS_F64;
    spec.x_scale = 1.0;
    SX_TRY(sx__source_new(who, &spec, s->n, s->name, std_get, v, std_drop, out));
    (*out)->class_name = std_class_name;
    (*out)->x_names = s->x_names; /* the same features, standardised */
    (*out)->y_name = s->y_name;
    return SX_OK;
}

bool sx_ds_source_standardization(const sx_ds_source *s, const sx_ds_source **parent,
                                  const double **mean, const double **std)
{
    if (s == NULL || s->get != std_get)
        return false;
    const std_impl *v = s->impl;
    if (parent != NULL)
        *parent = v->parent;
    if (mean != NULL)
        *mean = v->mean;
    if (std != NULL)
        *std = v->std;
    return true;
}
