/* batch.c: the minibatch iterator. It owns only a permutation of the example indices and fills
 * the caller's batch tensors from the borrowed bytes, one batch at a time. The order of epoch e
 * is a Fisher-Yates shuffle of 0..n-1 with a generator seeded from (seed, e) alone, so any epoch
 * can be replayed (resumed training) without replaying the ones before it. */
#include "datasets_impl.h"

#include <math.h>
#include <string.h>

struct sx_ds_batcher {
    const sx_ds_images *d; /* borrowed */
    sx_ds_batcher_params p;
    int64_t *perm;   /* (n) the order of the current epoch */
    int64_t epoch;   /* current epoch */
    int64_t next;    /* position in perm of the next batch */
    int64_t batches; /* per epoch */
};

sx_ds_batcher_params sx_ds_batcher_params_default(void)
{
    return (sx_ds_batcher_params){.batch_size = 64,
                                  .shuffle = true,
                                  .seed = 0,
                                  .drop_last = false,
                                  .scale = SX_DS_PIXEL_SCALE};
}

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

/* The order of the current epoch: identity, shuffled when asked. */
static void make_order(sx_ds_batcher *b)
{
    sx__order(b->perm, b->d->n, b->p.shuffle, b->p.seed, b->epoch);
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
    b->perm = sx_calloc((size_t)d->n, sizeof *b->perm);
    if (b->perm == NULL) {
        sx_free(b);
        return SX_E_NOMEM;
    }
    b->d = d;
    b->p = q;
    b->batches = q.drop_last ? d->n / q.batch_size : (d->n + q.batch_size - 1) / q.batch_size;
    make_order(b);
    *out = b;
    return SX_OK;
}

sx_status sx_ds_batcher_next(sx_ds_batcher *b, sx_tensor *x, sx_tensor *y, int64_t *count)
{
    const char *who = "sx_ds_batcher_next";
    if (b == NULL || count == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, b == NULL ? "the batcher" : "count");
    int64_t rows;
    SX_TRY(sx__check_batch(who, b->d, x, y, b->p.batch_size, &rows));
    int64_t left = b->d->n - b->next;
    int64_t m = left < b->p.batch_size ? left : b->p.batch_size;
    if (m == 0 || (b->p.drop_last && m < b->p.batch_size)) {
        /* End of the epoch: report it, and be ready for the next one. */
        *count = 0;
        b->epoch++;
        b->next = 0;
        make_order(b);
        return SX_OK;
    }
    SX_TRY(sx_ds_images_gather_out(b->d, b->perm + b->next, m, b->p.scale, x, y));
    b->next += m;
    *count = m;
    return SX_OK;
}

sx_status sx_ds_batcher_set_epoch(sx_ds_batcher *b, int64_t epoch)
{
    if (b == NULL)
        return sx_error(SX_E_ARG, "sx_ds_batcher_set_epoch: the batcher is NULL");
    if (epoch < 0)
        return sx_error(SX_E_ARG, "sx_ds_batcher_set_epoch: epoch %lld (want >= 0)",
                        (long long)epoch);
    b->epoch = epoch;
    b->next = 0;
    make_order(b);
    return SX_OK;
}

int64_t sx_ds_batcher_epoch(const sx_ds_batcher *b)
{
    return b ? b->epoch : -1;
}

int64_t sx_ds_batcher_batches(const sx_ds_batcher *b)
{
    return b ? b->batches : -1;
}

void sx_ds_batcher_free(sx_ds_batcher *b)
{
    if (b == NULL)
        return;
    sx_free(b->perm);
    sx_free(b);
}
