/* Sources and the loader over them: in-memory arrays of every element type, tensors, image sets
 * (raw and packed, the same batches as sx_ds_batcher bit for bit), IDX pairs, callbacks; the
 * loader's epochs (a permutation each, seeded and reproducible, a partial last batch padded,
 * drop_last), class and target y of every form; augmentation (flip twice is the identity, a
 * crop is the image shifted within the padding, normalisation gives mean 0 and std 1, the same
 * seed the same bits whatever the batch size); splits (disjoint, covering, seeded); standardisation
 * from one split applied to another; every error; out-of-memory injection. */
#include "idx_fixture.h"
#include <testutil.h>

#include <sx_datasets.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* n images of h x w x c whose pixel k of example i is (i * 7 + k * 3) % 251 + 1 (never 0, so a
 * zero means padding); label i % classes. Plain malloc. */
static sx_ds_images images_make(int64_t n, int64_t h, int64_t w, int64_t c, int64_t classes)
{
    int64_t row = h * w * c;
    sx_ds_images d = {.n = n, .h = h, .w = w, .c = c, .classes = classes};
    d.pixels = malloc((size_t)(n * row));
    d.labels = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        for (int64_t k = 0; k < row; k++)
            d.pixels[i * row + k] = (uint8_t)((i * 7 + k * 3) % 251 + 1);
        d.labels[i] = (uint8_t)(i % classes);
    }
    return d;
}

static void images_drop(sx_ds_images *d)
{
    free(d->pixels);
    free(d->labels);
}

static sx_tensor *zeros2(sx_dtype dt, int64_t a, int64_t b)
{
    int64_t shape[2] = {a, b};
    return tu_zeros(dt, b > 0 ? 2 : 1, shape);
}

/* One epoch's examples, identified by x[r, 0] (an example index written there), into order. */
static int64_t epoch_order(sx_ds_loader *l, sx_tensor *x, sx_tensor *y, int64_t *order,
                           int64_t *sizes)
{
    int64_t seen = 0, m, b = 0;
    while (sx_ds_loader_next(l, x, y, &m) == SX_OK && m > 0) {
        for (int64_t r = 0; r < m; r++)
            order[seen + r] = (int64_t)sx_tensor_get(x, r * (x->size / x->shape[0]));
        if (sizes)
            sizes[b] = m;
        b++;
        seen += m;
    }
    return seen;
}

/* x (n, 3) f64 with x[i, 0] = i; y (n) labels i % 4 as i32. */
typedef struct table {
    double x[3 * 50];
    int32_t y[50];
    sx_ds_spec spec;
} table;

static void table_make(table *t, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        t->x[3 * i] = (double)i;
        t->x[3 * i + 1] = (double)(i * i) * 0.5;
        t->x[3 * i + 2] = -(double)i;
        t->y[i] = (int32_t)(i % 4);
    }
    t->spec = (sx_ds_spec){.x_type = SX_DS_F64,
                           .x_rank = 1,
                           .x_shape = {3},
                           .y_type = SX_DS_I32,
                           .classes = 4,
                           .x_scale = 1.0};
}

Test(datasets_loader, epoch_is_a_permutation_with_partial_last_batch)
{
    table t;
    table_make(&t, 50);
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_memory(&t.spec, 50, t.x, t.y, &s), SX_OK, "%s", sx_last_error());
    sx_ds_loader_params p = sx_ds_loader_params_default();
    p.batch_size = 16;
    p.seed = 5;
    sx_ds_loader *l = NULL;
    cr_assert_eq(sx_ds_loader_new(s, &p, &l), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_loader_batches(l), 4);
    sx_tensor *x = zeros2(SX_F32, 16, 3), *y = zeros2(SX_F64, 16, 0);
    int64_t order[50], sizes[4], again[50];
    cr_assert_eq(epoch_order(l, x, y, order, sizes), 50);
    cr_assert_eq(sizes[3], 2, "the last batch holds the 2 left over");
    for (int64_t r = 2; r < 16; r++) { /* its padding */
        cr_assert_eq(sx_tensor_get(y, r), -1.0);
        for (int k = 0; k < 3; k++)
            cr_assert_eq(sx_tensor_get(x, r * 3 + k), 0.0);
    }
    for (int64_t r = 0; r < 2; r++) /* and its labels */
        cr_assert_eq(sx_tensor_get(y, r), (double)(order[48 + r] % 4));
    bool seen[50] = {false}, shuffled = false;
    for (int i = 0; i < 50; i++) {
        cr_assert(!seen[order[i]], "example %lld twice", (long long)order[i]);
        seen[order[i]] = true;
        shuffled |= order[i] != i;
    }
    cr_assert(shuffled);
    cr_assert_eq(sx_ds_loader_epoch(l), 1);
    cr_assert_eq(epoch_order(l, x, y, again, NULL), 50);
    cr_assert_neq(memcmp(order, again, sizeof order), 0, "each epoch its own order");
    cr_assert_eq(sx_ds_loader_set_epoch(l, 0), SX_OK);
    cr_assert_eq(epoch_order(l, x, y, again, NULL), 50);
    cr_assert_eq(memcmp(order, again, sizeof order), 0, "an epoch can be replayed");

    sx_ds_loader *l2 = NULL; /* the same seed in a new loader: the same order */
    cr_assert_eq(sx_ds_loader_new(s, &p, &l2), SX_OK);
    cr_assert_eq(epoch_order(l2, x, y, again, NULL), 50);
    cr_assert_eq(memcmp(order, again, sizeof order), 0);
    sx_ds_loader_free(l2);
    p.drop_last = true; /* drop_last: 3 batches of 16 */
    cr_assert_eq(sx_ds_loader_new(s, &p, &l2), SX_OK);
    cr_assert_eq(sx_ds_loader_batches(l2), 3);
    cr_assert_eq(epoch_order(l2, x, y, again, sizes), 48);
    sx_ds_loader_free(l2);
    sx_ds_loader_free(l);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_ds_source_free(s);
}

/* The loader over an image set gives sx_ds_batcher's batches bit for bit, raw or packed. */
Test(datasets_loader, same_batches_as_the_batcher)
{
    sx_ds_images d = images_make(37, 4, 5, 2, 3);
    sx_ds_images *packed = NULL;
    sx_ds_batcher_params bp = sx_ds_batcher_params_default();
    bp.batch_size = 8;
    bp.seed = 11;
    sx_ds_loader_params lp = sx_ds_loader_params_default();
    lp.batch_size = 8;
    lp.seed = 11;
    /* a packed copy made by the library (pixels from sx_alloc) */
    packed = sx_calloc(1, sizeof *packed);
    *packed = d;
    packed->pixels = sx_alloc(37 * 40);
    packed->labels = sx_alloc(37);
    memcpy(packed->pixels, d.pixels, 37 * 40);
    memcpy(packed->labels, d.labels, 37);
    for (int64_t k = 0; k < 37 * 40; k += 3)
        packed->pixels[k] = 0; /* zero runs, so it packs */
    memcpy(d.pixels, packed->pixels, 37 * 40);
    cr_assert_eq(sx_ds_images_compact(packed), SX_OK);
    const sx_ds_images *sets[2] = {&d, packed};
    for (int which = 0; which < 2; which++) {
        sx_ds_batcher *b = NULL;
        sx_ds_source *s = NULL;
        sx_ds_loader *l = NULL;
        cr_assert_eq(sx_ds_batcher_new(sets[which], &bp, &b), SX_OK);
        cr_assert_eq(sx_ds_source_images(sets[which], &s), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_ds_loader_new(s, &lp, &l), SX_OK);
        sx_tensor *x1 = zeros2(SX_F32, 8, 40), *x2 = zeros2(SX_F32, 8, 40);
        sx_tensor *y1 = zeros2(SX_F64, 8, 3), *y2 = zeros2(SX_F64, 8, 3);
        for (int step = 0; step < 12; step++) { /* more than two epochs */
            int64_t m1, m2;
            cr_assert_eq(sx_ds_batcher_next(b, x1, y1, &m1), SX_OK);
            cr_assert_eq(sx_ds_loader_next(l, x2, y2, &m2), SX_OK, "%s", sx_last_error());
            cr_assert_eq(m1, m2);
            cr_assert_eq(memcmp(x1->data, x2->data, 8 * 40 * sizeof(float)), 0, "step %d", step);
            cr_assert_eq(memcmp(y1->data, y2->data, 8 * 3 * sizeof(double)), 0, "step %d", step);
        }
        sx_tensor_free(x1);
        sx_tensor_free(x2);
        sx_tensor_free(y1);
        sx_tensor_free(y2);
        sx_ds_loader_free(l);
        sx_ds_source_free(s);
        sx_ds_batcher_free(b);
    }
    sx_ds_images_free(packed);
    images_drop(&d);
}

/* Every IDX element type through sx_ds_source_idx, and targets of rank 2. */
Test(datasets_loader, idx_and_element_types_and_targets)
{
    int16_t xs[4 * 3] = {-3, 2, 1, 400, -5, 6, 7, 8, 9, 10, 11, -12};
    float ys[4 * 2] = {0.5f, 1, 2, 3, 4, 5, 6, 7.25f};
    sx_ds_idx x = {
        .type = SX_DS_I16, .rank = 2, .dims = {4, 3, 1, 1, 1, 1, 1, 1}, .count = 12, .data = xs};
    sx_ds_idx y = {
        .type = SX_DS_F32, .rank = 2, .dims = {4, 2, 1, 1, 1, 1, 1, 1}, .count = 8, .data = ys};
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_idx(&x, &y, 0, &s), SX_OK, "%s", sx_last_error());
    sx_ds_loader_params p = {.batch_size = 3};
    sx_ds_loader *l = NULL;
    cr_assert_eq(sx_ds_loader_new(s, &p, &l), SX_OK);
    sx_tensor *bx = zeros2(SX_F64, 3, 3), *by = zeros2(SX_F32, 3, 2);
    int64_t m;
    cr_assert_eq(sx_ds_loader_next(l, bx, by, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(m, 3);
    for (int k = 0; k < 9; k++)
        cr_assert_eq(SX_F64P(bx)[k], (double)xs[k]);
    for (int k = 0; k < 6; k++)
        cr_assert_eq(SX_F32P(by)[k], ys[k]);
    cr_assert_eq(sx_ds_loader_next(l, bx, by, &m), SX_OK);
    cr_assert_eq(m, 1);
    cr_assert_eq(SX_F32P(by)[1], 7.25f);
    cr_assert_eq(SX_F32P(by)[2], 0.0f, "padding rows of a target y are zero");
    sx_ds_loader_free(l);
    sx_ds_source_free(s);
    y.rank = 1; /* classes from an i16 label vector */
    y.type = SX_DS_I16;
    int16_t lab[4] = {2, 0, 1, 2};
    y.data = lab;
    cr_assert_eq(sx_ds_source_idx(&x, &y, 3, &s), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_source_spec(s)->classes, 3);
    sx_ds_source_free(s);
    y.dims[0] = 5;
    cr_assert_eq(sx_ds_source_idx(&x, &y, 3, &s), SX_E_SHAPE);
    cr_assert_null(s);
    sx_tensor_free(bx);
    sx_tensor_free(by);
}

/* Tensors as a source; a label that is not a class is SX_E_RANGE naming the example. */
Test(datasets_loader, tensor_source_and_bad_labels)
{
    int64_t xs[2] = {3, 2}, ys[1] = {3};
    sx_tensor *x = tu_zeros(SX_F32, 2, xs), *y = tu_zeros(SX_F64, 1, ys);
    for (int k = 0; k < 6; k++)
        SX_F32P(x)[k] = (float)k;
    SX_F64P(y)[0] = 1;
    SX_F64P(y)[1] = 0;
    SX_F64P(y)[2] = 1.5; /* not an integer */
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_tensors(x, y, 2, &s), SX_OK, "%s", sx_last_error());
    sx_ds_loader_params p = {.batch_size = 3};
    sx_ds_loader *l = NULL;
    cr_assert_eq(sx_ds_loader_new(s, &p, &l), SX_OK);
    sx_tensor *bx = zeros2(SX_F32, 3, 2), *by = zeros2(SX_F32, 3, 2);
    int64_t m = 99;
    cr_assert_eq(sx_ds_loader_next(l, bx, by, &m), SX_E_RANGE);
    cr_assert(fx_msg_has("example 2 has label 1.5, not a class in 0..1"));
    cr_assert_eq(m, 99);
    SX_F64P(y)[2] = 0;
    cr_assert_eq(sx_ds_loader_next(l, bx, by, &m), SX_OK, "the loader did not move");
    cr_assert_eq(m, 3);
    float onehot[6] = {0, 1, 1, 0, 1, 0};
    cr_assert_eq(memcmp(by->data, onehot, sizeof onehot), 0);
    /* errors: shapes */
    sx_tensor *bad = zeros2(SX_F32, 2, 2);
    cr_assert_eq(sx_ds_loader_next(l, bad, NULL, &m), SX_E_SHAPE);
    cr_assert_eq(sx_ds_loader_next(l, NULL, bad, &m), SX_E_SHAPE);
    sx_tensor *bad3 = zeros2(SX_F32, 3, 5);
    cr_assert_eq(sx_ds_loader_next(l, NULL, bad3, &m), SX_E_SHAPE);
    cr_assert_eq(sx_ds_loader_next(l, bad3, NULL, &m), SX_E_SHAPE);
    cr_assert_eq(sx_ds_loader_next(NULL, bx, by, &m), SX_E_ARG);
    cr_assert_eq(sx_ds_loader_next(l, bx, by, NULL), SX_E_ARG);
    int64_t ys2[1] = {2};
    sx_tensor *y2 = tu_zeros(SX_F64, 1, ys2);
    sx_ds_source *s2 = NULL;
    cr_assert_eq(sx_ds_source_tensors(x, y2, 2, &s2), SX_E_SHAPE);
    cr_assert_null(s2);
    cr_assert_eq(sx_ds_source_tensors(x, y, -1, &s2), SX_E_ARG);
    sx_tensor_free(y2);
    sx_tensor_free(bad);
    sx_tensor_free(bad3);
    sx_tensor_free(bx);
    sx_tensor_free(by);
    sx_ds_loader_free(l);
    sx_ds_source_free(s);
    sx_tensor_free(x);
    sx_tensor_free(y);
}

/* Class indices per position: y (n, 2) labels of a source of 3 classes
 * fill a batch y of indices (B, 2) or one-hot rows per position (B, 2, 3); padding rows get -1
 * or zeros; a bad label names its example and position. */
Test(datasets_loader, per_position_class_indices)
{
    int64_t xs[2] = {3, 1}, ys[2] = {3, 2};
    sx_tensor *x = tu_zeros(SX_F64, 2, xs), *y = tu_zeros(SX_F64, 2, ys);
    double labels[6] = {2, 0, 1, 1, 0, 2};
    memcpy(y->data, labels, sizeof labels);
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_tensors(x, y, 3, &s), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_source_spec(s)->y_rank, 1);
    sx_ds_loader_params p = {.batch_size = 2, .shuffle = false};
    sx_ds_loader *l = NULL;
    cr_assert_eq(sx_ds_loader_new(s, &p, &l), SX_OK);
    int64_t is[2] = {2, 2}, hs[3] = {2, 2, 3}, m = 0;
    sx_tensor *idx = tu_zeros(SX_F32, 2, is), *hot = tu_zeros(SX_F32, 3, hs);
    cr_assert_eq(sx_ds_loader_next(l, NULL, idx, &m), SX_OK, "%s", sx_last_error());
    float want_idx[4] = {2, 0, 1, 1};
    cr_assert_eq(memcmp(idx->data, want_idx, sizeof want_idx), 0);
    cr_assert_eq(sx_ds_loader_next(l, NULL, idx, &m), SX_OK);
    cr_assert_eq(m, 1);
    float want_pad[4] = {0, 2, -1, -1};
    cr_assert_eq(memcmp(idx->data, want_pad, sizeof want_pad), 0);
    cr_assert_eq(sx_ds_loader_next(l, NULL, idx, &m), SX_OK);
    cr_assert_eq(m, 0); /* the epoch's end */
    cr_assert_eq(sx_ds_loader_next(l, NULL, hot, &m), SX_OK, "%s", sx_last_error());
    float want_hot[12] = {0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1, 0};
    cr_assert_eq(memcmp(hot->data, want_hot, sizeof want_hot), 0);
    SX_F64P(y)[5] = 3;
    cr_assert_eq(sx_ds_loader_next(l, NULL, hot, &m), SX_E_RANGE);
    cr_assert(fx_msg_has("example 2 has label 3 at position 1"));
    sx_tensor *bad = zeros2(SX_F32, 2, 3); /* neither 2 indices nor 2 x 3 one-hot per row */
    cr_assert_eq(sx_ds_loader_next(l, NULL, bad, &m), SX_E_SHAPE);
    sx_tensor_free(bad);
    sx_tensor_free(idx);
    sx_tensor_free(hot);
    sx_ds_loader_free(l);
    sx_ds_source_free(s);
    sx_tensor_free(x);
    sx_tensor_free(y);
}

/* A callback source: its example, and its error passed through. */
static sx_status cb_get(int64_t i, void *x_row, void *y_row, void *ctx)
{
    int *calls = ctx;
    ++*calls;
    if (i == 4)
        return sx_error(SX_E_IO, "cb_get: example 4 is on a missing disk");
    if (x_row != NULL)
        for (int k = 0; k < 2; k++)
            ((uint8_t *)x_row)[k] = (uint8_t)(10 * i + k);
    if (y_row != NULL)
        *(float *)y_row = (float)i * 0.25f;
    return SX_OK;
}

Test(datasets_loader, callback_source)
{
    sx_ds_spec spec = {
        .x_type = SX_DS_U8, .x_rank = 1, .x_shape = {2}, .y_type = SX_DS_F32, .x_scale = 0.5};
    int calls = 0;
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_callback(&spec, 6, cb_get, &calls, &s), SX_OK, "%s", sx_last_error());
    sx_ds_loader_params p = {.batch_size = 4};
    sx_ds_loader *l = NULL;
    cr_assert_eq(sx_ds_loader_new(s, &p, &l), SX_OK);
    sx_tensor *x = zeros2(SX_F64, 4, 2), *y = zeros2(SX_F64, 4, 0);
    int64_t m;
    cr_assert_eq(sx_ds_loader_next(l, x, y, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(SX_F64P(x)[7], 15.5);
    cr_assert_eq(SX_F64P(y)[3], 0.75);
    cr_assert_eq(sx_ds_loader_next(l, x, y, &m), SX_E_IO);
    cr_assert(fx_msg_has("example 4 is on a missing disk"));
    cr_assert_eq(sx_ds_source_get(s, 6, NULL, NULL), SX_E_RANGE);
    sx_ds_loader_free(l);
    l = NULL;
    sx_ds_source_free(s);
    cr_assert_eq(sx_ds_source_callback(&spec, 0, cb_get, &calls, &s), SX_E_ARG);
    spec.classes = -2;
    cr_assert_eq(sx_ds_source_callback(&spec, 6, cb_get, &calls, &s), SX_E_ARG);
    cr_assert(fx_msg_has("classes -2"));
    spec.classes = 0;
    spec.x_type = (sx_ds_type)3;
    cr_assert_eq(sx_ds_source_callback(&spec, 6, cb_get, &calls, &s), SX_E_ARG);
    cr_assert_null(s);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_ds_loader_free(l);
    sx_ds_source_free(NULL);
    sx_ds_loader_free(NULL);
}

/* ---------------------------------------------------------------- augmentation */

/* All of one epoch's augmented images (f64), example i at row i: a loader without shuffle. */
static void augmented(const sx_ds_source *s, const sx_ds_augment *a, uint64_t seed, int64_t bs,
                      int64_t epoch, double *out)
{
    int64_t n = sx_ds_source_count(s), row = sx_ds_spec_x_size(sx_ds_source_spec(s));
    sx_ds_loader_params p = {.batch_size = bs, .seed = seed, .augment = *a};
    sx_ds_loader *l = NULL;
    cr_assert_eq(sx_ds_loader_new(s, &p, &l), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_loader_set_epoch(l, epoch), SX_OK);
    sx_tensor *x = zeros2(SX_F64, bs, row);
    int64_t m, at = 0;
    while (sx_ds_loader_next(l, x, NULL, &m) == SX_OK && m > 0) {
        memcpy(out + at * row, x->data, (size_t)(m * row) * sizeof(double));
        at += m;
    }
    cr_assert_eq(at, n);
    sx_tensor_free(x);
    sx_ds_loader_free(l);
}

Test(datasets_loader, flip_twice_is_identity_and_seeded)
{
    sx_ds_images d = images_make(40, 3, 5, 2, 2);
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_images(&d, &s), SX_OK);
    const int64_t row = 30, h = 3, w = 5, c = 2;
    double *plain = malloc(40 * row * sizeof(double)), *f = malloc(40 * row * sizeof(double));
    double *f2 = malloc(40 * row * sizeof(double));
    sx_ds_augment none = {0}, flip = {.flip = true};
    augmented(s, &none, 1, 7, 0, plain);
    augmented(s, &flip, 1, 7, 0, f);
    int flipped = 0;
    for (int64_t i = 0; i < 40; i++) {
        double *o = f + i * row, *p = plain + i * row;
        if (memcmp(o, p, row * sizeof(double)) == 0)
            continue;
        flipped++;
        for (int64_t y = 0; y < h; y++) /* mirror the output back: the original */
            for (int64_t x = 0; x < w; x++)
                for (int64_t ch = 0; ch < c; ch++)
                    cr_assert_eq(o[(y * w + (w - 1 - x)) * c + ch], p[(y * w + x) * c + ch]);
    }
    cr_assert(flipped > 8 && flipped < 32, "about half flipped: %d", flipped);
    augmented(s, &flip, 1, 13, 0, f2); /* another batch size: the same bits */
    cr_assert_eq(memcmp(f, f2, 40 * row * sizeof(double)), 0);
    augmented(s, &flip, 2, 7, 0, f2); /* another seed: other choices */
    cr_assert_neq(memcmp(f, f2, 40 * row * sizeof(double)), 0);
    augmented(s, &flip, 1, 7, 1, f2); /* another epoch: other choices */
    cr_assert_neq(memcmp(f, f2, 40 * row * sizeof(double)), 0);
    free(plain);
    free(f);
    free(f2);
    sx_ds_source_free(s);
    images_drop(&d);
}

/* A padded crop is the image shifted by (sy, sx) in [-pad, pad]^2 with zeros outside. */
Test(datasets_loader, crop_is_a_shift_within_the_padding)
{
    const int64_t n = 30, h = 6, w = 5, c = 1, pad = 2, row = h * w * c;
    sx_ds_images d = images_make(n, h, w, c, 3);
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_images(&d, &s), SX_OK);
    double *plain = malloc(n * row * sizeof(double)), *o = malloc(n * row * sizeof(double));
    sx_ds_augment none = {0}, crop = {.crop_pad = pad};
    augmented(s, &none, 3, 8, 0, plain);
    augmented(s, &crop, 3, 8, 0, o);
    int shifts[5][5] = {{0}};
    for (int64_t i = 0; i < n; i++) {
        int found = 0;
        for (int64_t sy = -pad; sy <= pad; sy++)
            for (int64_t sx = -pad; sx <= pad; sx++) {
                bool same = true;
                for (int64_t y = 0; y < h && same; y++)
                    for (int64_t x = 0; x < w && same; x++) {
                        int64_t iy = y + sy, ix = x + sx;
                        double want = iy >= 0 && iy < h && ix >= 0 && ix < w
                                          ? plain[i * row + iy * w + ix]
                                          : 0.0;
                        same = o[i * row + y * w + x] == want;
                    }
                if (same) {
                    found++;
                    shifts[sy + pad][sx + pad]++;
                }
            }
        cr_assert_eq(found, 1, "example %lld is exactly one shift of the image", (long long)i);
    }
    int distinct = 0;
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++)
            distinct += shifts[a][b] > 0;
    cr_assert(distinct >= 8, "many offsets drawn: %d", distinct);
    free(plain);
    free(o);
    sx_ds_source_free(s);
    images_drop(&d);
}

/* Normalising with the per-channel stats of the source gives mean 0 and std 1 per channel. */
Test(datasets_loader, normalisation_mean_and_std)
{
    const int64_t n = 25, h = 4, w = 3, c = 3, row = h * w * c;
    sx_ds_images d = images_make(n, h, w, c, 2);
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_images(&d, &s), SX_OK);
    sx_ds_stats *st = NULL;
    cr_assert_eq(sx_ds_stats_compute(s, c, &st), SX_OK, "%s", sx_last_error());
    cr_assert_eq(st->size, 3);
    double *o = malloc(n * row * sizeof(double));
    sx_ds_augment a = {.flip = true, .mean = st->mean, .std = st->std};
    augmented(s, &a, 9, 6, 0, o);
    for (int64_t ch = 0; ch < c; ch++) {
        double sum = 0, sq = 0;
        for (int64_t k = ch; k < n * row; k += c)
            sum += o[k];
        double mean = sum / (double)(n * h * w);
        for (int64_t k = ch; k < n * row; k += c)
            sq += (o[k] - mean) * (o[k] - mean);
        cr_assert(fabs(mean) < 1e-12, "channel %lld mean %g", (long long)ch, mean);
        cr_assert(fabs(sqrt(sq / (double)(n * h * w)) - 1.0) < 1e-12);
    }
    /* errors */
    sx_ds_loader *l = NULL;
    sx_ds_loader_params p = {.batch_size = 4, .augment = {.mean = st->mean}};
    cr_assert_eq(sx_ds_loader_new(s, &p, &l), SX_E_ARG, "mean without std");
    double bad[3] = {1, 0, 1};
    p.augment.std = bad;
    cr_assert_eq(sx_ds_loader_new(s, &p, &l), SX_E_ARG, "a std of 0");
    p.augment = (sx_ds_augment){.crop_pad = -1};
    cr_assert_eq(sx_ds_loader_new(s, &p, &l), SX_E_ARG);
    cr_assert_null(l);
    table t;
    table_make(&t, 10);
    sx_ds_source *flat = NULL;
    cr_assert_eq(sx_ds_source_memory(&t.spec, 10, t.x, t.y, &flat), SX_OK);
    p.augment = (sx_ds_augment){.flip = true};
    cr_assert_eq(sx_ds_loader_new(flat, &p, &l), SX_E_ARG);
    cr_assert(fx_msg_has("augmentation needs x of rank 3"));
    sx_ds_source_free(flat);
    free(o);
    sx_ds_stats_free(st);
    sx_ds_source_free(s);
    images_drop(&d);
}

/* ---------------------------------------------------------------- splits and standardisation */

Test(datasets_loader, split_is_disjoint_covering_and_seeded)
{
    table t;
    table_make(&t, 50);
    sx_ds_source *s = NULL, *tr = NULL, *va = NULL, *tr2 = NULL, *va2 = NULL;
    cr_assert_eq(sx_ds_source_memory(&t.spec, 50, t.x, t.y, &s), SX_OK);
    cr_assert_eq(sx_ds_split(s, 0.2, 4, &tr, &va), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_source_count(tr), 40);
    cr_assert_eq(sx_ds_source_count(va), 10);
    int hits[50] = {0};
    double x[3];
    int32_t y;
    int64_t first_tr = -1;
    for (int64_t i = 0; i < 40; i++) {
        cr_assert_eq(sx_ds_source_get(tr, i, x, &y), SX_OK);
        hits[(int)x[0]]++;
        cr_assert_eq(y, (int32_t)x[0] % 4, "y follows x");
        if (i == 0)
            first_tr = (int64_t)x[0];
    }
    for (int64_t i = 0; i < 10; i++) {
        cr_assert_eq(sx_ds_source_get(va, i, x, &y), SX_OK);
        hits[(int)x[0]]++;
    }
    for (int i = 0; i < 50; i++)
        cr_assert_eq(hits[i], 1, "example %d in exactly one part", i);
    cr_assert_eq(sx_ds_split(s, 0.2, 4, &tr2, &va2), SX_OK);
    cr_assert_eq(sx_ds_source_get(tr2, 0, x, &y), SX_OK);
    cr_assert_eq((int64_t)x[0], first_tr, "the same seed, the same split");
    sx_ds_source_free(tr2);
    sx_ds_source_free(va2);
    cr_assert_eq(sx_ds_split(s, 0.0, 4, &tr2, &va2), SX_E_ARG);
    cr_assert_eq(sx_ds_split(s, 0.001, 4, &tr2, &va2), SX_E_ARG);
    cr_assert(fx_msg_has("leaves validation empty"));
    cr_assert_null(tr2);
    cr_assert_null(va2);
    /* a subset of a split: views over views */
    int64_t ix[3] = {9, 0, 9};
    sx_ds_source *sub = NULL;
    cr_assert_eq(sx_ds_source_subset(va, ix, 3, &sub), SX_OK);
    cr_assert_eq(sx_ds_source_count(sub), 3);
    ix[1] = 10;
    sx_ds_source *bad = NULL;
    cr_assert_eq(sx_ds_source_subset(va, ix, 3, &bad), SX_E_RANGE);
    cr_assert_null(bad);
    sx_ds_source_free(sub);

    /* standardisation: stats of the training part, applied to both */
    sx_ds_stats *st = NULL;
    cr_assert_eq(sx_ds_stats_compute(tr, 0, &st), SX_OK);
    cr_assert_eq(st->size, 3);
    sx_ds_source *ztr = NULL, *zva = NULL;
    cr_assert_eq(sx_ds_source_standardize(tr, st, &ztr), SX_OK);
    cr_assert_eq(sx_ds_source_standardize(va, st, &zva), SX_OK);
    double sum[3] = {0}, sq[3] = {0};
    for (int64_t i = 0; i < 40; i++) {
        cr_assert_eq(sx_ds_source_get(ztr, i, x, &y), SX_OK);
        for (int k = 0; k < 3; k++) {
            sum[k] += x[k];
            sq[k] += x[k] * x[k];
        }
    }
    for (int k = 0; k < 3; k++) {
        cr_assert(fabs(sum[k] / 40) < 1e-12);
        cr_assert(fabs(sq[k] / 40 - 1.0) < 1e-12);
    }
    double raw[3];
    cr_assert_eq(sx_ds_source_get(va, 3, raw, NULL), SX_OK);
    cr_assert_eq(sx_ds_source_get(zva, 3, x, NULL), SX_OK);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(x[k], (raw[k] - st->mean[k]) / st->std[k], "the training stats applied");
    sx_ds_source *z = NULL;
    st->std[1] = 0;
    cr_assert_eq(sx_ds_source_standardize(va, st, &z), SX_E_ARG);
    cr_assert_null(z);
    sx_ds_source_free(ztr);
    sx_ds_source_free(zva);
    sx_ds_stats_free(st);
    sx_ds_source_free(tr);
    sx_ds_source_free(va);
    sx_ds_source_free(s);
}

/* Fail the k-th allocation of building sources, a split, stats, a standardised view and a loader
 * with augmentation, then a batch: SX_E_NOMEM and nothing leaked, for every k. */
Test(datasets_loader, out_of_memory_every_allocation)
{
    sx_ds_images d = images_make(20, 4, 4, 3, 2);
    long k;
    for (k = 0;; k++) {
        sx_ds_source *s = NULL, *tr = NULL, *va = NULL, *z = NULL;
        sx_ds_stats *st = NULL, *feat = NULL;
        sx_ds_loader *l = NULL;
        sx_tensor *x = zeros2(SX_F32, 5, 48), *y = zeros2(SX_F32, 5, 0);
        tu_fail_after(k);
        sx_status rc = sx_ds_source_images(&d, &s);
        if (rc == SX_OK)
            rc = sx_ds_split(s, 0.25, 1, &tr, &va);
        if (rc == SX_OK)
            rc = sx_ds_stats_compute(tr, 3, &st);
        if (rc == SX_OK)
            rc = sx_ds_stats_compute(tr, 0, &feat);
        if (rc == SX_OK)
            rc = sx_ds_source_standardize(va, feat, &z);
        sx_ds_loader_params p = {.batch_size = 5, .augment = {.crop_pad = 1, .flip = true}};
        if (rc == SX_OK) {
            p.augment.mean = st->mean;
            p.augment.std = st->std;
            rc = sx_ds_loader_new(tr, &p, &l);
        }
        int64_t m = 0;
        if (rc == SX_OK)
            rc = sx_ds_loader_next(l, x, y, &m);
        sx_ds_loader_free(l);
        sx_ds_source_free(z);
        sx_ds_stats_free(st);
        sx_ds_stats_free(feat);
        sx_ds_source_free(tr);
        sx_ds_source_free(va);
        sx_ds_source_free(s);
        long live = tu_live_allocs();
        tu_fail_reset();
        sx_tensor_free(x);
        sx_tensor_free(y);
        cr_assert_eq(live, 0, "k=%ld leaked %ld allocations", k, live);
        if (rc == SX_OK) {
            cr_assert_eq(m, 5);
            break;
        }
        cr_assert_eq(rc, SX_E_NOMEM, "k=%ld: %s", k, sx_last_error());
    }
    cr_assert_gt(k, 10);
    images_drop(&d);
}
