/* The packed form of an image set (sx_ds_images_compact): every reader (whole-set tensor, gather,
 * batcher) gives the same bits from a compacted set as from its raw twin, for f32 and f64, several
 * scales and index orders; the code follows the format documented in datasets/images.c (an
 * independent decoder here reads it back to the bytes); sets the code would not shrink stay raw;
 * out-of-memory leaves the set unchanged; the real MNIST when present. */
#include "idx_fixture.h"

#include <math.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- sets made here */

typedef enum { RUNS, NO_ZEROS, ALL_ZEROS } content;

/* Fill `row` bytes: alternate runs of zeros and of literals (random bytes, ~1 in 8 of them zero,
 * so single and double zeros sit inside literal runs), mostly short runs and now and then long
 * ones (past 255 and 510: lengths that take continuation bytes). */
static void fill_runs(sx_rng *rng, uint8_t *p, int64_t row)
{
    int64_t at = 0;
    bool zeros = sx_rng_below(rng, 2) == 0;
    while (at < row) {
        int64_t len = sx_rng_below(rng, 8) < 6 ? (int64_t)sx_rng_below(rng, 40)
                                               : (int64_t)sx_rng_below(rng, 700);
        if (len > row - at)
            len = row - at;
        for (int64_t j = 0; j < len; j++)
            p[at + j] =
                zeros || sx_rng_below(rng, 8) == 0 ? 0 : (uint8_t)(1 + sx_rng_below(rng, 255));
        at += len;
        zeros = !zeros;
    }
}

/* A set as a loader makes it (struct and arrays from sx_alloc: sx_ds_images_free releases it). */
static sx_ds_images *set_new(sx_rng *rng, int64_t n, int64_t h, int64_t w, int64_t c, content k)
{
    sx_ds_images *d = sx_calloc(1, sizeof *d);
    cr_assert_not_null(d);
    int64_t row = h * w * c;
    *d = (sx_ds_images){.n = n, .h = h, .w = w, .c = c, .classes = 7};
    d->pixels = sx_alloc((size_t)(n * row));
    d->labels = sx_alloc((size_t)n);
    cr_assert(d->pixels != NULL && d->labels != NULL);
    for (int64_t i = 0; i < n; i++) {
        uint8_t *p = d->pixels + i * row;
        if (k == RUNS)
            fill_runs(rng, p, row);
        for (int64_t j = 0; k != RUNS && j < row; j++)
            p[j] = k == ALL_ZEROS ? 0 : (uint8_t)(1 + sx_rng_below(rng, 255));
        d->labels[i] = (uint8_t)sx_rng_below(rng, 7);
    }
    return d;
}

/* A raw copy of a raw set (plain malloc: the reference stays out of the allocator hook). */
static sx_ds_images raw_copy(const sx_ds_images *d)
{
    cr_assert_not_null(d->pixels);
    size_t bytes = (size_t)(d->n * d->h * d->w * d->c);
    sx_ds_images r = *d;
    r.pixels = malloc(bytes);
    r.labels = malloc((size_t)d->n);
    memcpy(r.pixels, d->pixels, bytes);
    memcpy(r.labels, d->labels, (size_t)d->n);
    return r;
}

static void raw_free(sx_ds_images *r)
{
    free(r->pixels);
    free(r->labels);
}

/* ---------------------------------------------------------------- the format, read here */

/* Read one length of the format: bytes added up to the first that is not 255. False when the
 * code ends first. */
static bool ref_len(const uint8_t *code, int64_t len, int64_t *p, int64_t *v)
{
    *v = 0;
    for (;;) {
        if (*p >= len)
            return false;
        uint8_t b = code[(*p)++];
        *v += b;
        if (b != 255)
            return true;
    }
}

/* Decode one image's code of `len` bytes into out[0..row), checking the format's promises: every
 * token covers at least one byte, the tokens cover exactly the row, and the code is used up
 * exactly. */
static bool ref_decode(const uint8_t *code, int64_t len, int64_t row, uint8_t *out)
{
    int64_t p = 0, at = 0;
    while (at < row) {
        int64_t z, l;
        if (!ref_len(code, len, &p, &z) || !ref_len(code, len, &p, &l))
            return false;
        if (z + l == 0 || at + z + l > row || p + l > len)
            return false;
        memset(out + at, 0, (size_t)z);
        memcpy(out + at + z, code + p, (size_t)l);
        at += z + l;
        p += l;
    }
    return p == len;
}

/* A compacted set against the raw bytes it came from: offsets start at 0 and rise, every code
 * decodes (by the format) to its image, and the sizes add up. */
static void check_packed(const sx_ds_images *d, const uint8_t *raw)
{
    cr_assert(sx_ds_images_compacted(d));
    cr_assert_null(d->pixels);
    cr_assert(d->packed != NULL && d->offsets != NULL);
    int64_t row = d->h * d->w * d->c;
    uint8_t *img = malloc((size_t)row);
    cr_assert_eq(d->offsets[0], 0);
    for (int64_t i = 0; i < d->n; i++) {
        cr_assert_gt(d->offsets[i + 1], d->offsets[i], "image %lld has an empty code",
                     (long long)i);
        cr_assert(
            ref_decode(d->packed + d->offsets[i], d->offsets[i + 1] - d->offsets[i], row, img),
            "image %lld: the code does not follow the format", (long long)i);
        cr_assert_eq(memcmp(img, raw + i * row, (size_t)row), 0, "image %lld decodes wrongly",
                     (long long)i);
    }
    free(img);
    size_t bytes = (size_t)d->offsets[d->n] + (size_t)(d->n + 1) * sizeof(int64_t);
    cr_assert_eq(sx_ds_images_bytes(d), bytes);
    cr_assert_lt(bytes, (size_t)(d->n * row), "a compacted set must be smaller");
}

/* ---------------------------------------------------------------- same results, both forms */

static const double scales[4] = {SX_DS_PIXEL_SCALE, 1.0, -0.5, 1e-3};

static bool same_tensor(const sx_tensor *a, const sx_tensor *b)
{
    return a->dtype == b->dtype && a->size == b->size &&
           memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)) == 0;
}

/* Gather the same rows from both sets into tensors of B rows (count <= B; the rest padding),
 * x and an index y, and compare the bits. The x tensors start from different garbage so that
 * an unwritten value shows. */
static void same_gather(const sx_ds_images *raw, const sx_ds_images *packed, const int64_t *index,
                        int64_t count, int64_t b_rows, sx_dtype dt, double scale)
{
    int64_t row = raw->h * raw->w * raw->c;
    int64_t xs[2] = {b_rows, row}, ys[1] = {b_rows};
    sx_tensor *xa = tu_zeros(dt, 2, xs), *xb = tu_zeros(dt, 2, xs);
    sx_tensor *ya = tu_zeros(SX_F32, 1, ys), *yb = tu_zeros(SX_F32, 1, ys);
    memset(xa->data, 0x5a, (size_t)xa->size * sx_dtype_size(dt));
    memset(xb->data, 0xa5, (size_t)xb->size * sx_dtype_size(dt));
    cr_assert_eq(sx_ds_images_gather_out(raw, index, count, scale, xa, ya), SX_OK, "%s",
                 sx_last_error());
    cr_assert_eq(sx_ds_images_gather_out(packed, index, count, scale, xb, yb), SX_OK, "%s",
                 sx_last_error());
    cr_assert(same_tensor(xa, xb), "gather: %lld rows, dtype %d, scale %g differ", (long long)count,
              (int)dt, scale);
    cr_assert(same_tensor(ya, yb));
    sx_tensor_free(xa);
    sx_tensor_free(xb);
    sx_tensor_free(ya);
    sx_tensor_free(yb);
}

/* Two epochs of the batcher over both sets, batch by batch. */
static void same_batches(const sx_ds_images *raw, const sx_ds_images *packed, int64_t bs,
                         bool shuffle, sx_dtype dt, double scale)
{
    sx_ds_batcher_params p = sx_ds_batcher_params_default();
    p.batch_size = bs;
    p.shuffle = shuffle;
    p.seed = 11;
    p.scale = scale;
    sx_ds_batcher *ba = NULL, *bb = NULL;
    cr_assert_eq(sx_ds_batcher_new(raw, &p, &ba), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_batcher_new(packed, &p, &bb), SX_OK, "%s", sx_last_error());
    int64_t xs[4] = {bs, raw->h, raw->w, raw->c}, ys[2] = {bs, raw->classes};
    sx_tensor *xa = tu_zeros(dt, 4, xs), *xb = tu_zeros(dt, 4, xs);
    sx_tensor *ya = tu_zeros(dt, 2, ys), *yb = tu_zeros(dt, 2, ys);
    for (int e = 0; e < 2; e++) {
        int64_t ma, mb;
        do {
            cr_assert_eq(sx_ds_batcher_next(ba, xa, ya, &ma), SX_OK);
            cr_assert_eq(sx_ds_batcher_next(bb, xb, yb, &mb), SX_OK, "%s", sx_last_error());
            cr_assert_eq(ma, mb);
            cr_assert(same_tensor(xa, xb), "batcher: a batch differs (bs %lld, dtype %d)",
                      (long long)bs, (int)dt);
            cr_assert(same_tensor(ya, yb));
        } while (ma > 0);
    }
    sx_tensor_free(xa);
    sx_tensor_free(xb);
    sx_tensor_free(ya);
    sx_tensor_free(yb);
    sx_ds_batcher_free(ba);
    sx_ds_batcher_free(bb);
}

/* Everything that reads images, on a raw set and its compacted form. */
static void same_everything(sx_rng *rng, const sx_ds_images *raw, const sx_ds_images *packed)
{
    int64_t n = raw->n;
    int64_t *index = malloc((size_t)(2 * n + 3) * sizeof *index);
    for (int dt = 0; dt < 2; dt++) {
        for (int k = 0; k < 4; k++) {
            sx_tensor *ta = NULL, *tb = NULL;
            cr_assert_eq(sx_ds_images_tensor(raw, (sx_dtype)dt, scales[k], &ta), SX_OK);
            cr_assert_eq(sx_ds_images_tensor(packed, (sx_dtype)dt, scales[k], &tb), SX_OK, "%s",
                         sx_last_error());
            cr_assert(same_tensor(ta, tb), "whole-set tensor: dtype %d scale %g", dt, scales[k]);
            sx_tensor_free(ta);
            sx_tensor_free(tb);

            /* in order; reversed; random with repeats (more rows than examples); a short batch */
            for (int64_t i = 0; i < n; i++)
                index[i] = i;
            same_gather(raw, packed, index, n, n, (sx_dtype)dt, scales[k]);
            for (int64_t i = 0; i < n; i++)
                index[i] = n - 1 - i;
            same_gather(raw, packed, index, n, n + 2, (sx_dtype)dt, scales[k]);
            for (int64_t i = 0; i < 2 * n + 3; i++)
                index[i] = (int64_t)sx_rng_below(rng, (uint64_t)n);
            same_gather(raw, packed, index, 2 * n + 3, 2 * n + 3, (sx_dtype)dt, scales[k]);
            same_gather(raw, packed, index, n / 2, n, (sx_dtype)dt, scales[k]);
            same_gather(raw, packed, index, 0, 3, (sx_dtype)dt, scales[k]);
        }
        same_batches(raw, packed, 1, false, (sx_dtype)dt, 1.0);
        same_batches(raw, packed, n > 3 ? n / 3 : 1, true, (sx_dtype)dt, SX_DS_PIXEL_SCALE);
        same_batches(raw, packed, n + 1, true, (sx_dtype)dt, -0.5);
    }
    free(index);
}

/* ---------------------------------------------------------------- tests */

typedef struct shape {
    int64_t n, h, w, c;
} shape;

/* Random images with zero runs, of many sizes (odd ones, several channels, long rows whose runs
 * need continuation bytes): every reader agrees with the raw twin, and the code is the format. */
Test(datasets_compact, random_runs_read_the_same)
{
    const shape shapes[] = {{40, 28, 28, 1}, {9, 7, 5, 3},   {20, 1, 1, 300},
                            {3, 40, 40, 4},  {31, 13, 1, 1}, {17, 3, 3, 2},
                            {2, 1, 2000, 1}, {64, 4, 4, 1},  {50, 2, 2, 10}};
    sx_rng rng;
    sx_rng_seed(&rng, 1);
    int compacted = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        shape sh = shapes[s];
        sx_ds_images *d = set_new(&rng, sh.n, sh.h, sh.w, sh.c, RUNS);
        sx_ds_images raw = raw_copy(d);
        size_t raw_bytes = (size_t)(sh.n * sh.h * sh.w * sh.c);
        cr_assert_eq(sx_ds_images_bytes(d), raw_bytes);
        cr_assert_not(sx_ds_images_compacted(d));
        uint8_t *labels = d->labels;
        cr_assert_eq(sx_ds_images_compact(d), SX_OK, "%s", sx_last_error());
        cr_assert_eq(d->labels, labels, "the labels stay");
        if (sx_ds_images_compacted(d)) {
            compacted++;
            check_packed(d, raw.pixels);
        } else {
            /* the code would not have paid for itself: nothing changed */
            cr_assert_not_null(d->pixels);
            cr_assert(d->packed == NULL && d->offsets == NULL);
            cr_assert_eq(memcmp(d->pixels, raw.pixels, raw_bytes), 0);
            cr_assert_eq(sx_ds_images_bytes(d), raw_bytes);
        }
        same_everything(&rng, &raw, d);
        /* a second call changes nothing */
        uint8_t *packed = d->packed, *pixels = d->pixels;
        cr_assert_eq(sx_ds_images_compact(d), SX_OK);
        cr_assert(d->packed == packed && d->pixels == pixels);
        raw_free(&raw);
        sx_ds_images_free(d);
    }
    /* all but the rows of 13, 18 and 16 bytes: their codes plus offsets do not shrink them */
    cr_assert_geq(compacted, 6, "most of these sets compact");
}

/* Images without a zero byte do not shrink: the set stays raw, the same pointer, SX_OK. So do
 * single-pixel images (the offsets alone outweigh them). */
Test(datasets_compact, sets_that_would_not_shrink_stay_raw)
{
    const shape shapes[] = {
        {30, 28, 28, 1}, {5, 3, 3, 3}, {1, 1, 1, 1}, {50, 1, 1, 1}, {8, 1, 1, 3}};
    sx_rng rng;
    sx_rng_seed(&rng, 2);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        shape sh = shapes[s];
        for (int k = 0; k < 3; k++) {
            sx_ds_images *d = set_new(&rng, sh.n, sh.h, sh.w, sh.c, (content)k);
            sx_ds_images raw = raw_copy(d);
            uint8_t *pixels = d->pixels;
            cr_assert_eq(sx_ds_images_compact(d), SX_OK, "%s", sx_last_error());
            if (k == NO_ZEROS || sh.h * sh.w * sh.c <= 8) {
                cr_assert_not(sx_ds_images_compacted(d), "shape %zu content %d", s, k);
                cr_assert_eq(d->pixels, pixels);
                cr_assert(d->packed == NULL && d->offsets == NULL);
                cr_assert_eq(sx_ds_images_bytes(d), (size_t)(sh.n * sh.h * sh.w * sh.c));
            }
            same_everything(&rng, &raw, d);
            raw_free(&raw);
            sx_ds_images_free(d);
        }
    }
}

/* All-zero images code to two lengths each (the zeros, then 0 literals): R / 255 + 1 bytes for
 * R zeros, then 1. */
Test(datasets_compact, all_zero_images)
{
    const shape shapes[] = {{64, 1, 1, 16}, {10, 28, 28, 1}, {4, 10, 51, 1}, {3, 16, 16, 3}};
    sx_rng rng;
    sx_rng_seed(&rng, 3);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        shape sh = shapes[s];
        int64_t row = sh.h * sh.w * sh.c;
        sx_ds_images *d = set_new(&rng, sh.n, sh.h, sh.w, sh.c, ALL_ZEROS);
        sx_ds_images raw = raw_copy(d);
        cr_assert_eq(sx_ds_images_compact(d), SX_OK, "%s", sx_last_error());
        check_packed(d, raw.pixels);
        for (int64_t i = 0; i < sh.n; i++)
            cr_assert_eq(d->offsets[i + 1] - d->offsets[i], row / 255 + 2);
        same_everything(&rng, &raw, d);
        raw_free(&raw);
        sx_ds_images_free(d);
    }
}

/* The code of two crafted images, byte for byte, as the format in images.c describes it. */
Test(datasets_compact, the_code_byte_for_byte)
{
    sx_rng rng;
    sx_rng_seed(&rng, 4);
    sx_ds_images *d = set_new(&rng, 2, 1, 700, 1, ALL_ZEROS);
    /* image 0: 9 0 0 8, 300 zeros, 300 ones, 96 zeros. Image 1: 697 zeros, 7 0 0. */
    uint8_t *a = d->pixels, *b = d->pixels + 700;
    a[0] = 9;
    a[3] = 8;
    memset(a + 304, 1, 300);
    b[697] = 7;
    sx_ds_images raw = raw_copy(d);
    cr_assert_eq(sx_ds_images_compact(d), SX_OK, "%s", sx_last_error());
    cr_assert(sx_ds_images_compacted(d));
    /* (Z 0, L 4: 9 0 0 8) (Z 300 = 255+45, L 300 = 255+45: ones) (Z 96, L 0) */
    uint8_t want0[312] = {0, 4, 9, 0, 0, 8, 255, 45, 255, 45};
    memset(want0 + 10, 1, 300);
    want0[310] = 96;
    want0[311] = 0;
    /* (Z 697 = 255+255+187, L 3: 7 0 0): the two trailing zeros stay literals */
    uint8_t want1[7] = {255, 255, 187, 3, 7, 0, 0};
    cr_assert_eq(d->offsets[0], 0);
    cr_assert_eq(d->offsets[1], 312);
    cr_assert_eq(d->offsets[2], 312 + 7);
    cr_assert_eq(memcmp(d->packed, want0, 312), 0);
    cr_assert_eq(memcmp(d->packed + 312, want1, 7), 0);
    cr_assert_eq(sx_ds_images_bytes(d), (size_t)(319 + 3 * 8));
    check_packed(d, raw.pixels);
    same_everything(&rng, &raw, d);
    raw_free(&raw);
    sx_ds_images_free(d);
}

/* A set loaded from files compacts; a struct copy with fewer examples (the first n) reads the
 * same from both forms; a caller-filled set (pixels from sx_alloc) compacts too and its owner
 * frees the new arrays with sx_free. */
Test(datasets_compact, loaded_sets_copies_and_caller_filled_sets)
{
    char dir[64], ip[512], lp[512];
    fx_dir_new(dir);
    sx_rng rng;
    sx_rng_seed(&rng, 5);
    sx_ds_images *src = set_new(&rng, 12, 9, 8, 2, RUNS);
    uint32_t dims[4] = {12, 9, 8, 2}, ldims[1] = {12};
    fx_buf i = {0}, l = {0};
    fx_header(&i, 0x08, 4, dims);
    fx_put(&i, src->pixels, 12 * 144);
    fx_header(&l, 0x08, 1, ldims);
    fx_put(&l, src->labels, 12);
    fx_write_idx(dir, "img.gz", &i, true, ip);
    fx_write_idx(dir, "lab", &l, false, lp);
    sx_ds_images *d = NULL;
    cr_assert_eq(sx_ds_images_load(ip, lp, 7, 0, &d), SX_OK, "%s", sx_last_error());
    sx_ds_images raw = raw_copy(d);
    cr_assert_eq(sx_ds_images_compact(d), SX_OK, "%s", sx_last_error());
    check_packed(d, src->pixels);
    same_everything(&rng, &raw, d);
    sx_ds_images head = *d, raw_head = raw;
    head.n = raw_head.n = 5;
    same_everything(&rng, &raw_head, &head);
    cr_assert_eq(sx_ds_images_bytes(&head), (size_t)d->offsets[5] + 6 * sizeof(int64_t));
    sx_ds_images_free(d);

    /* caller-filled, on the stack */
    sx_ds_images own = {.n = 12, .h = 9, .w = 8, .c = 2, .classes = 7};
    own.pixels = sx_alloc(12 * 144);
    own.labels = raw.labels;
    memcpy(own.pixels, raw.pixels, 12 * 144);
    cr_assert_eq(sx_ds_images_compact(&own), SX_OK, "%s", sx_last_error());
    check_packed(&own, raw.pixels);
    same_everything(&rng, &raw, &own);
    sx_free(own.packed);
    sx_free(own.offsets);

    raw_free(&raw);
    sx_ds_images_free(src);
    fx_free(&i);
    fx_free(&l);
    fx_dir_remove(dir);
}

/* Bad sets are refused by compact and by every reader (SX_E_ARG), and nothing changes. */
Test(datasets_compact, invalid_sets)
{
    sx_rng rng;
    sx_rng_seed(&rng, 6);
    cr_assert_eq(sx_ds_images_compact(NULL), SX_E_ARG);
    cr_assert(fx_msg_has("sx_ds_images_compact"));
    cr_assert_not(sx_ds_images_compacted(NULL));
    cr_assert_eq(sx_ds_images_bytes(NULL), 0);

    sx_ds_images *d = set_new(&rng, 6, 10, 10, 1, ALL_ZEROS);
    sx_ds_images bad = *d;
    bad.h = 0;
    cr_assert_eq(sx_ds_images_compact(&bad), SX_E_ARG);
    cr_assert(bad.pixels == d->pixels && bad.packed == NULL);
    bad = *d;
    bad.labels = NULL;
    cr_assert_eq(sx_ds_images_compact(&bad), SX_E_ARG);
    cr_assert(bad.pixels == d->pixels && bad.packed == NULL);
    bad = *d;
    bad.pixels = NULL;
    cr_assert_eq(sx_ds_images_compact(&bad), SX_E_ARG);
    cr_assert(fx_msg_has("neither pixels nor packed images"));

    cr_assert_eq(sx_ds_images_compact(d), SX_OK);
    cr_assert(sx_ds_images_compacted(d));
    int64_t shape4[4] = {6, 10, 10, 1}, index[2] = {0, 5};
    sx_tensor *x = tu_zeros(SX_F32, 4, shape4), *t = (sx_tensor *)1;
    sx_ds_batcher *b = (sx_ds_batcher *)1;

    /* both forms at once */
    uint8_t stray[600] = {0};
    bad = *d;
    bad.pixels = stray;
    cr_assert_eq(sx_ds_images_tensor(&bad, SX_F32, 1, &t), SX_E_ARG);
    cr_assert_null(t);
    cr_assert(fx_msg_has("both pixels and packed images"));
    cr_assert_eq(sx_ds_images_gather_out(&bad, index, 2, 1, x, NULL), SX_E_ARG);
    cr_assert_eq(sx_ds_batcher_new(&bad, NULL, &b), SX_E_ARG);
    cr_assert_null(b);
    cr_assert_eq(sx_ds_images_compact(&bad), SX_E_ARG);
    cr_assert(bad.pixels == stray && bad.packed == d->packed);
    /* packed without offsets */
    bad = *d;
    bad.offsets = NULL;
    cr_assert_eq(sx_ds_images_gather_out(&bad, index, 2, 1, x, NULL), SX_E_ARG);
    cr_assert(fx_msg_has("packed images but no offsets"));
    cr_assert_eq(sx_ds_labels_tensor(&bad, SX_F32, false, &t), SX_E_ARG);
    for (int64_t k = 0; k < x->size; k++)
        cr_assert_eq(SX_F32P(x)[k], 0.0f, "x unchanged");
    /* an index outside the set is still an error on a packed set */
    index[1] = 6;
    memset(x->data, 0x7f, (size_t)x->size * sizeof(float));
    cr_assert_eq(sx_ds_images_gather_out(d, index, 2, 1, x, NULL), SX_E_RANGE);
    for (int64_t k = 0; k < x->size; k++)
        cr_assert_eq(memcmp(&SX_F32P(x)[k], "\x7f\x7f\x7f\x7f", 4), 0, "x unchanged");
    sx_tensor_free(x);
    sx_ds_images_free(d);
}

/* Fail the k-th allocation inside sx_ds_images_compact for every k: SX_E_NOMEM, the set
 * unchanged and still usable, nothing leaked; then it succeeds. */
Test(datasets_compact, out_of_memory_every_allocation)
{
    sx_rng rng;
    sx_rng_seed(&rng, 7);
    long k;
    for (k = 0;; k++) {
        sx_ds_images *d = set_new(&rng, 9, 12, 12, 1, RUNS);
        sx_ds_images raw = raw_copy(d), before = *d;
        tu_fail_after(k);
        sx_status st = sx_ds_images_compact(d);
        long live = tu_live_allocs();
        tu_fail_reset();
        if (st == SX_OK) {
            cr_assert_eq(live, 1, "k=%ld: two arrays made, the pixels freed", k);
            check_packed(d, raw.pixels);
        } else {
            cr_assert_eq(st, SX_E_NOMEM, "k=%ld: %s", k, sx_last_error());
            cr_assert(fx_msg_has("sx_ds_images_compact: out of memory"));
            cr_assert_eq(live, 0, "k=%ld leaked %ld allocations", k, live);
            cr_assert_eq(memcmp(d, &before, sizeof before), 0, "k=%ld: the set changed", k);
            cr_assert_eq(memcmp(d->pixels, raw.pixels, 9 * 144), 0);
        }
        same_everything(&rng, &raw, d);
        raw_free(&raw);
        sx_ds_images_free(d);
        if (st == SX_OK)
            break;
    }
    cr_assert_eq(k, 2, "compact makes two allocations");
}

/* ---------------------------------------------------------------- the real MNIST */

static bool mnist_present(const char *dir)
{
    static const char *const names[4] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 4; i++) {
        char p[2048];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (stat(p, &st) != 0)
            return false;
    }
    return true;
}

/* Both parts compact to well under a third of their bytes; every image decodes (by the format)
 * to its bytes; the test set's whole tensor and a random batch of the training set are the same
 * bits as from the raw set. */
Test(datasets_compact, real_mnist, .timeout = 300)
{
    char dir[1100];
    tu_mnist_dir(dir, sizeof dir);
    if (!mnist_present(dir))
        cr_skip_test("MNIST not found in %s (run scripts/fetch_mnist)", dir);
    sx_rng rng;
    sx_rng_seed(&rng, 8);
    for (int part = 0; part < 2; part++) {
        sx_ds_images *d = NULL;
        cr_assert_eq(sx_ds_mnist_load(dir, (sx_ds_part)part, 0, &d), SX_OK, "%s", sx_last_error());
        sx_ds_images raw = raw_copy(d);
        size_t before = sx_ds_images_bytes(d);
        cr_assert_eq(sx_ds_images_compact(d), SX_OK, "%s", sx_last_error());
        size_t after = sx_ds_images_bytes(d);
        cr_log_info("MNIST %s: %zu images, %zu -> %zu bytes (code %lld + offsets), %.2fx",
                    part == 0 ? "train" : "test", (size_t)d->n, before, after,
                    (long long)d->offsets[d->n], (double)before / (double)after);
        check_packed(d, raw.pixels);
        cr_assert_lt(after * 3, before, "MNIST compacts to under a third");
        if (part == SX_DS_TEST) {
            for (int dt = 0; dt < 2; dt++) {
                sx_tensor *ta = NULL, *tb = NULL;
                cr_assert_eq(sx_ds_images_tensor(&raw, (sx_dtype)dt, SX_DS_PIXEL_SCALE, &ta),
                             SX_OK);
                cr_assert_eq(sx_ds_images_tensor(d, (sx_dtype)dt, SX_DS_PIXEL_SCALE, &tb), SX_OK);
                cr_assert(same_tensor(ta, tb));
                sx_tensor_free(ta);
                sx_tensor_free(tb);
            }
        }
        int64_t index[1000];
        for (int i = 0; i < 1000; i++)
            index[i] = (int64_t)sx_rng_below(&rng, (uint64_t)d->n);
        same_gather(&raw, d, index, 1000, 1000, SX_F32, SX_DS_PIXEL_SCALE);
        same_gather(&raw, d, index, 999, 1000, SX_F64, 1.0);
        raw_free(&raw);
        sx_ds_images_free(d);
    }
}
