/* loader.c: minibatches over any source, with augmentation of images: the one batching path
 * (sx_ds_batcher is a loader over an image set). The loader owns the epoch's permutation and
 * one scratch example; each batch
 * row is the source's example in its own type, converted to the batch's dtype (and cropped,
 * flipped, normalised when asked), so a step allocates nothing. The random choices of an example
 * come from a generator seeded by (seed, epoch, example index) alone: the same seed gives the
 * same batches bit for bit, whatever the batch size or order. */
#include "datasets_impl.h"

#include <math.h>
#include <string.h>

struct sx_ds_loader {
    const sx_ds_source *s; /* borrowed */
    sx_ds_loader_params p;
    double *mean, *std; /* (c) copies, or NULL */
    int64_t *perm;      /* (n) the current epoch's order */
    void *xrow, *yrow;  /* one example in the source's types */
    double *work;       /* (x_size) values before augmentation, when augmenting */
    int64_t epoch, next, batches;
    bool augment; /* crop, flip or normalisation asked */
};

void sx__order(int64_t *perm, int64_t n, bool shuffle, uint64_t seed, int64_t epoch)
{
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    if (!shuffle)
        return;
    /* A generator for (seed, epoch): the seed's first draw, mixed with the epoch, seeds it. */
    sx_rng rng;
    sx_rng_seed(&rng, seed);
    sx_rng_seed(&rng, sx_rng_u64(&rng) ^ ((uint64_t)epoch * 0x9e3779b97f4a7c15ULL));
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)sx_rng_below(&rng, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

sx_ds_loader_params sx_ds_loader_params_default(void)
{
    return (sx_ds_loader_params){.batch_size = 64, .shuffle = true};
}

void sx_ds_loader_free(sx_ds_loader *l)
{
    if (l == NULL)
        return;
    sx_free(l->mean);
    sx_free(l->std);
    sx_free(l->perm);
    sx_free(l->xrow);
    sx_free(l->yrow);
    sx_free(l->work);
    sx_free(l);
}

static sx_status check_params(const char *who, const sx_ds_source *s, const sx_ds_loader_params *q)
{
    if (q->batch_size < 1)
        return sx_error(SX_E_ARG, "%s: batch size %lld (want >= 1)", who, (long long)q->batch_size);
    if (q->drop_last && q->batch_size > s->n)
        return sx_error(SX_E_ARG, "%s: drop_last with batch size %lld > %lld examples", who,
                        (long long)q->batch_size, (long long)s->n);
    const sx_ds_augment *a = &q->augment;
    if (a->crop_pad < 0)
        return sx_error(SX_E_ARG, "%s: crop_pad %lld (want >= 0)", who, (long long)a->crop_pad);
    bool any = a->crop_pad > 0 || a->flip || a->mean != NULL || a->std != NULL;
    if (any && s->spec.x_rank != 3)
        return sx_error(SX_E_ARG,
                        "%s: augmentation needs x of rank 3 (h, w, c); the source's "
                        "x has rank %d",
                        who, s->spec.x_rank);
    if ((a->mean == NULL) != (a->std == NULL))
        return sx_error(SX_E_ARG, "%s: augment mean and std must be given together", who);
    for (int64_t ch = 0; a->mean != NULL && ch < s->spec.x_shape[2]; ch++)
        if (!isfinite(a->mean[ch]) || !(a->std[ch] > 0.0) || !isfinite(a->std[ch]))
            return sx_error(SX_E_ARG, "%s: channel %lld has mean %g, std %g (want finite, std > 0)",
                            who, (long long)ch, a->mean[ch], a->std[ch]);
    return SX_OK;
}

/* The loader's arrays; false when one could not be allocated. */
static bool loader_alloc(sx_ds_loader *l)
{
    const sx_ds_source *s = l->s;
    const sx_ds_augment *a = &l->p.augment;
    l->perm = sx_alloc((size_t)s->n * sizeof *l->perm);
    l->xrow = sx_alloc((size_t)s->x_size * sx_ds_type_size(s->spec.x_type));
    l->yrow = sx_alloc((size_t)s->y_size * sx_ds_type_size(s->spec.y_type));
    if (l->perm == NULL || l->xrow == NULL || l->yrow == NULL)
        return false;
    if (l->augment && (l->work = sx_alloc((size_t)s->x_size * sizeof *l->work)) == NULL)
        return false;
    if (a->mean != NULL) {
        size_t bytes = (size_t)s->spec.x_shape[2] * sizeof(double);
        if ((l->mean = sx_alloc(bytes)) == NULL || (l->std = sx_alloc(bytes)) == NULL)
            return false;
        memcpy(l->mean, a->mean, bytes);
        memcpy(l->std, a->std, bytes);
    }
    return true;
}

sx_status sx_ds_loader_new(const sx_ds_source *s, const sx_ds_loader_params *p, sx_ds_loader **out)
{
    const char *who = "sx_ds_loader_new";
    if (out == NULL || s == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, out == NULL ? "out" : "the source");
    *out = NULL;
    sx_ds_loader_params q = p ? *p : sx_ds_loader_params_default();
    SX_TRY(check_params(who, s, &q));
    sx_ds_loader *l = sx_calloc(1, sizeof *l);
    if (l == NULL)
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    l->s = s;
    l->p = q;
    l->augment = q.augment.crop_pad > 0 || q.augment.flip || q.augment.mean != NULL;
    if (!loader_alloc(l)) {
        sx_ds_loader_free(l);
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    }
    l->p.augment.mean = l->mean; /* the copies, not the caller's arrays */
    l->p.augment.std = l->std;
    l->batches = q.drop_last ? s->n / q.batch_size : (s->n + q.batch_size - 1) / q.batch_size;
    sx__order(l->perm, s->n, q.shuffle, q.seed, 0);
    *out = l;
    return SX_OK;
}

/* ---------------------------------------------------------------- checks of the batch */

static sx_status check_tensor(const char *who, const char *name, const sx_tensor *t, int64_t b)
{
    if ((t->dtype != SX_F32 && t->dtype != SX_F64) || t->rank < 1 || t->rank > SX_MAX_RANK ||
        t->data == NULL)
        return sx_error(SX_E_ARG, "%s: %s is not a valid f32/f64 tensor of rank >= 1", who, name);
    char s[160];
    if (t->shape[0] != b)
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s; want %lld rows (the batch size)", who,
                        name, sx_shape_str(t->rank, t->shape, s, sizeof s), (long long)b);
    return SX_OK;
}

/* A batch y that receives one-hot rows from a source of classes: (B, ..., classes), y_size
 * positions of `classes` elements each per example (rank >= 2; with one class, a last axis of
 * 1 is read as one-hot, as (B, 1) always was); otherwise it receives the indices (B * y_size
 * elements). */
static bool loader_one_hot(const sx_ds_loader *l, const sx_tensor *y)
{
    int64_t k = l->s->spec.classes;
    return y->rank >= 2 && y->shape[y->rank - 1] == k &&
           y->size / l->p.batch_size == l->s->y_size * k && y->size % l->p.batch_size == 0;
}

static sx_status check_xy(const char *who, const sx_ds_loader *l, const sx_tensor *x,
                          const sx_tensor *y)
{
    const sx_ds_source *s = l->s;
    int64_t b = l->p.batch_size;
    char a[160];
    if (x != NULL) {
        SX_TRY(check_tensor(who, "x", x, b));
        if (x->size != b * s->x_size)
            return sx_error(SX_E_SHAPE, "%s: x has shape %s; want %lld rows of %lld values", who,
                            sx_shape_str(x->rank, x->shape, a, sizeof a), (long long)b,
                            (long long)s->x_size);
    }
    if (y != NULL) {
        SX_TRY(check_tensor(who, "y", y, b));
        bool ok = s->spec.classes > 0 ? y->size == b * s->y_size || loader_one_hot(l, y)
                                      : y->size == b * s->y_size;
        if (!ok)
            return sx_error(SX_E_SHAPE, "%s: y has shape %s; want %s", who,
                            sx_shape_str(y->rank, y->shape, a, sizeof a),
                            s->spec.classes > 0
                                ? "B rows of class indices (one per position) or of one-hot "
                                  "rows (B, ..., classes)"
                                : "B rows of the source's y values");
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- filling rows */

static void put(void *dst, sx_dtype dt, int64_t k, double v)
{
    if (dt == SX_F32)
        ((float *)dst)[k] = (float)v;
    else
        ((double *)dst)[k] = v;
}

/* The augmented image of example `i` (its values in l->work) into dst[at ..): see sx_ds_augment. */
static void augment_row(const sx_ds_loader *l, int64_t i, void *dst, sx_dtype dt, int64_t at)
{
    const sx_ds_augment *a = &l->p.augment;
    int64_t h = l->s->spec.x_shape[0], w = l->s->spec.x_shape[1], c = l->s->spec.x_shape[2];
    int64_t pad = a->crop_pad, dy = 0, dx = 0;
    bool flip = false;
    if (pad > 0 || a->flip) { /* the generator of (seed, epoch, i) */
        sx_rng rng;
        sx_rng_seed(&rng, l->p.seed ^ 0x6a09e667f3bcc909ULL);
        sx_rng_seed(&rng, sx_rng_u64(&rng) ^ ((uint64_t)l->epoch * 0x9e3779b97f4a7c15ULL) ^
                              ((uint64_t)i * 0xbf58476d1ce4e5b9ULL));
        dy = (int64_t)sx_rng_below(&rng, (uint64_t)(2 * pad + 1));
        dx = (int64_t)sx_rng_below(&rng, (uint64_t)(2 * pad + 1));
        flip = a->flip && (sx_rng_u64(&rng) >> 63) != 0;
    }
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) {
            int64_t sy = y + dy - pad, sx = (flip ? w - 1 - x : x) + dx - pad;
            bool in = sy >= 0 && sy < h && sx >= 0 && sx < w;
            for (int64_t ch = 0; ch < c; ch++) {
                double v = in ? l->work[(sy * w + sx) * c + ch] : 0.0;
                if (a->mean != NULL)
                    v = (v - a->mean[ch]) / a->std[ch];
                put(dst, dt, at + (y * w + x) * c + ch, v);
            }
        }
}

/* Example i's classes (in l->yrow: one per position, y_size of them) into row r of y: indices,
 * or one-hot rows (zeroed). */
static sx_status put_y(const sx_ds_loader *l, int64_t i, sx_tensor *y, int64_t r)
{
    const sx_ds_source *s = l->s;
    int64_t k = s->spec.classes, n = s->y_size;
    bool one_hot = loader_one_hot(l, y);
    for (int64_t j = 0; j < n; j++) {
        double v = sx__elem(l->yrow, s->spec.y_type, j);
        if (!(v >= 0.0 && v < (double)k && v == floor(v))) {
            if (n == 1)
                return sx_error(SX_E_RANGE,
                                "sx_ds_loader_next: %s: example %lld has label %g, not a "
                                "class in 0..%lld",
                                s->name, (long long)i, v, (long long)k - 1);
            return sx_error(SX_E_RANGE,
                            "sx_ds_loader_next: %s: example %lld has label %g at position "
                            "%lld, not a class in 0..%lld",
                            s->name, (long long)i, v, (long long)j, (long long)k - 1);
        }
        int64_t at = r * n + j;
        put(y->data, y->dtype, one_hot ? at * k + (int64_t)v : at, one_hot ? 1.0 : v);
    }
    return SX_OK;
}

/* Row r of the batch from example i. */
static sx_status fill_row(sx_ds_loader *l, int64_t i, sx_tensor *x, sx_tensor *y, int64_t r)
{
    const sx_ds_source *s = l->s;
    SX_TRY(s->get(s, i, x ? l->xrow : NULL, y ? l->yrow : NULL));
    double scale = l->p.raw ? 1.0 : s->spec.x_scale;
    if (x != NULL && l->augment) {
        sx__convert(l->xrow, s->spec.x_type, s->x_size, scale, l->work, SX_F64);
        augment_row(l, i, x->data, x->dtype, r * s->x_size);
    } else if (x != NULL) {
        size_t at = (size_t)(r * s->x_size) * sx_dtype_size(x->dtype);
        sx__convert(l->xrow, s->spec.x_type, s->x_size, scale, (char *)x->data + at, x->dtype);
    }
    if (y == NULL)
        return SX_OK;
    if (s->spec.classes == 0) { /* targets: convert straight into the row */
        size_t at = (size_t)(r * s->y_size) * sx_dtype_size(y->dtype);
        sx__convert(l->yrow, s->spec.y_type, s->y_size, 1.0, (char *)y->data + at, y->dtype);
        return SX_OK;
    }
    return put_y(l, i, y, r);
}

/* Rows m..B-1: zeros in x, -1 in an index y, zeros in a one-hot or target y. */
static void pad_rows(const sx_ds_loader *l, int64_t m, sx_tensor *x, sx_tensor *y)
{
    int64_t b = l->p.batch_size;
    if (x != NULL) {
        size_t row = (size_t)l->s->x_size * sx_dtype_size(x->dtype);
        memset((char *)x->data + (size_t)m * row, 0, (size_t)(b - m) * row);
    }
    if (y != NULL && l->s->spec.classes > 0 && !loader_one_hot(l, y))
        for (int64_t r = m * l->s->y_size; r < b * l->s->y_size; r++)
            put(y->data, y->dtype, r, -1.0);
    else if (y != NULL) {
        size_t row = (size_t)(y->size / b) * sx_dtype_size(y->dtype);
        memset((char *)y->data + (size_t)m * row, 0, (size_t)(b - m) * row);
    }
}

sx_status sx_ds_loader_next(sx_ds_loader *l, sx_tensor *x, sx_tensor *y, int64_t *count)
{
    const char *who = "sx_ds_loader_next";
    if (l == NULL || count == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, l == NULL ? "the loader" : "count");
    SX_TRY(check_xy(who, l, x, y));
    int64_t left = l->s->n - l->next, b = l->p.batch_size;
    int64_t m = left < b ? left : b;
    if (m == 0 || (l->p.drop_last && m < b)) { /* the end of the epoch */
        *count = 0;
        l->epoch++;
        l->next = 0;
        sx__order(l->perm, l->s->n, l->p.shuffle, l->p.seed, l->epoch);
        return SX_OK;
    }
    if (y != NULL && l->s->spec.classes > 0 && loader_one_hot(l, y))
        memset(y->data, 0, (size_t)y->size * sx_dtype_size(y->dtype));
    for (int64_t r = 0; r < m; r++)
        SX_TRY(fill_row(l, l->perm[l->next + r], x, y, r));
    pad_rows(l, m, x, y);
    l->next += m;
    *count = m;
    return SX_OK;
}

sx_status sx_ds_loader_set_epoch(sx_ds_loader *l, int64_t epoch)
{
    if (l == NULL || epoch < 0)
        return sx_error(SX_E_ARG, "sx_ds_loader_set_epoch: %s",
                        l == NULL ? "the loader is NULL" : "epoch < 0");
    l->epoch = epoch;
    l->next = 0;
    sx__order(l->perm, l->s->n, l->p.shuffle, l->p.seed, epoch);
    return SX_OK;
}

const int64_t *sx__loader_upcoming(const sx_ds_loader *l, int64_t *count)
{
    int64_t left = l->s->n - l->next, b = l->p.batch_size;
    *count = left < b ? left : b;
    if (l->p.drop_last && *count < b)
        *count = 0;
    return l->perm + l->next;
}

int64_t sx_ds_loader_epoch(const sx_ds_loader *l)
{
    return l ? l->epoch : -1;
}

int64_t sx_ds_loader_batches(const sx_ds_loader *l)
{
    return l ? l->batches : -1;
}
