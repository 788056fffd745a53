/* batch.c: the minibatch iterator over an image set, a thin layer over sx_ds_loader: a loader
 * over the set as a source (its pixel scale the batcher's), so the order of epoch e (a
 * Fisher-Yates shuffle seeded from (seed, e) alone) and the bits of every batch are the
 * loader's. The batcher keeps its own checks: the batch shapes of sx_ds_images_gather_out, and
 * a batch's labels checked before anything is written. */
#include "datasets_impl.h"

#include <math.h>

struct sx_ds_batcher {
    const sx_ds_images *d; /* borrowed */
    sx_ds_source *src;     /* the set as a source (borrows d), owned */
    sx_ds_loader *l;       /* over src, owned */
    int64_t batch_size;
};

sx_ds_batcher_params sx_ds_batcher_params_default(void)
{
    return (sx_ds_batcher_params){.batch_size = 64,
                                  .shuffle = true,
                                  .seed = 0,
                                  .drop_last = false,
                                  .scale = SX_DS_PIXEL_SCALE};
}

void sx_ds_batcher_free(sx_ds_batcher *b)
{
    if (b == NULL)
        return;
    sx_ds_loader_free(b->l);
    sx_ds_source_free(b->src);
    sx_free(b);
}

sx_status sx_ds_batcher_new(const sx_ds_images *d, const sx_ds_batcher_params *p,
                            sx_ds_batcher **out)
{
    const char *who = "sx_ds_batcher_new";
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    SX_TRY(sx__check_images(who, d));
    sx_ds_batcher_params q = p ? *p : sx_ds_batcher_params_default();
    if (q.batch_size < 1)
        return sx_error(SX_E_ARG, "%s: batch size %lld (want >= 1)", who, (long long)q.batch_size);
    if (!isfinite(q.scale))
        return sx_error(SX_E_ARG, "%s: scale %g is not finite", who, q.scale);
    if (q.drop_last && q.batch_size > d->n)
        return sx_error(SX_E_ARG,
                        "%s: drop_last with batch size %lld > %lld examples: no batch at all", who,
                        (long long)q.batch_size, (long long)d->n);
    sx_ds_batcher *b = sx_calloc(1, sizeof *b);
    if (b == NULL)
        return SX_E_NOMEM;
    b->d = d;
    b->batch_size = q.batch_size;
    sx_ds_loader_params lp = sx_ds_loader_params_default();
    lp.batch_size = q.batch_size;
    lp.shuffle = q.shuffle;
    lp.seed = q.seed;
    lp.drop_last = q.drop_last;
    sx_status s = sx_ds_source_images(d, &b->src);
    if (s == SX_OK) {
        b->src->spec.x_scale = q.scale; /* pixel -> value, as the loader converts it */
        s = sx_ds_loader_new(b->src, &lp, &b->l);
    }
    if (s != SX_OK) {
        sx_ds_batcher_free(b);
        return s;
    }
    *out = b;
    return SX_OK;
}

sx_status sx_ds_batcher_next(sx_ds_batcher *b, sx_tensor *x, sx_tensor *y, int64_t *count)
{
    const char *who = "sx_ds_batcher_next";
    if (b == NULL || count == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, b == NULL ? "the batcher" : "count");
    int64_t rows, m = 0;
    SX_TRY(sx__check_batch(who, b->d, x, y, b->batch_size, &rows));
    /* a set the caller filled may hold a label >= classes: refused before anything is written */
    const int64_t *idx = sx__loader_upcoming(b->l, &m);
    for (int64_t r = 0; y != NULL && r < m; r++) {
        int64_t lab = sx__label(b->d, idx[r]);
        if (lab < 0 || lab >= b->d->classes)
            return sx_error(SX_E_RANGE, "%s: example %lld has label %lld, not in 0..%lld", who,
                            (long long)idx[r], (long long)lab, (long long)b->d->classes - 1);
    }
    return sx_ds_loader_next(b->l, x, y, count);
}

sx_status sx_ds_batcher_set_epoch(sx_ds_batcher *b, int64_t epoch)
{
    if (b == NULL)
        return sx_error(SX_E_ARG, "sx_ds_batcher_set_epoch: the batcher is NULL");
    if (epoch < 0)
        return sx_error(SX_E_ARG, "sx_ds_batcher_set_epoch: epoch %lld (want >= 0)",
                        (long long)epoch);
    return sx_ds_loader_set_epoch(b->l, epoch);
}

int64_t sx_ds_batcher_epoch(const sx_ds_batcher *b)
{
    return b ? sx_ds_loader_epoch(b->l) : -1;
}

int64_t sx_ds_batcher_batches(const sx_ds_batcher *b)
{
    return b ? sx_ds_loader_batches(b->l) : -1;
}
