/* Minibatches: every example exactly once per epoch, batch sizes with drop-last and keep-last,
 * the padding of a short last batch, seeded shuffling (same seed same order, a new order each
 * epoch, replayable epochs, roughly uniform), the gathered values, and every error path with
 * nothing changed. Each example's pixels encode its index, so a batch says which examples it
 * holds. */
#include "idx_fixture.h"

#include <math.h>

#define H 2
#define W 3
#define C 1
#define ROW (H * W * C)

/* n examples of 2x3x1: pixel 0 = index % 256, pixel 1 = index / 256, the rest 7*index+k; label
 * index % classes. */
typedef struct data {
    sx_ds_images d;
    uint8_t *pixels, *labels;
} data;

static data data_make(int64_t n, int64_t classes)
{
    data s;
    s.pixels = malloc((size_t)(n * ROW));
    s.labels = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        s.pixels[i * ROW + 0] = (uint8_t)(i % 256);
        s.pixels[i * ROW + 1] = (uint8_t)(i / 256);
        for (int k = 2; k < ROW; k++)
            s.pixels[i * ROW + k] = (uint8_t)(7 * i + k);
        s.labels[i] = (uint8_t)(i % classes);
    }
    s.d = (sx_ds_images){
        .n = n, .h = H, .w = W, .c = C, .classes = classes, .pixels = s.pixels, .labels = s.labels};
    return s;
}

static void data_free(data *s)
{
    free(s->pixels);
    free(s->labels);
}

/* The example held in row r of a batch filled with scale 1. */
static int64_t example_of(const sx_tensor *x, int64_t r)
{
    return (int64_t)sx_tensor_get(x, r * ROW) + 256 * (int64_t)sx_tensor_get(x, r * ROW + 1);
}

/* Run one epoch; record the order of examples in `order` (n entries max); return the number of
 * examples seen and check batch sizes and padding on the way. */
static int64_t run_epoch(sx_ds_batcher *b, const data *s, sx_tensor *x, sx_tensor *y, int64_t bs,
                         bool drop_last, int64_t *order)
{
    int64_t seen = 0, m, batches = 0;
    for (;;) {
        cr_assert_eq(sx_ds_batcher_next(b, x, y, &m), SX_OK, "%s", sx_last_error());
        if (m == 0)
            break;
        batches++;
        int64_t left = s->d.n - seen;
        cr_assert_eq(m, left < bs ? left : bs, "batch %lld has %lld examples", (long long)batches,
                     (long long)m);
        for (int64_t r = 0; r < m; r++) {
            int64_t e = example_of(x, r);
            order[seen + r] = e;
            cr_assert(e >= 0 && e < s->d.n);
            for (int k = 2; k < ROW; k++)
                cr_assert_eq(sx_tensor_get(x, r * ROW + k), (double)(uint8_t)(7 * e + k));
            if (y->rank == 1) {
                cr_assert_eq(sx_tensor_get(y, r), (double)s->labels[e]);
            } else {
                for (int64_t j = 0; j < s->d.classes; j++)
                    cr_assert_eq(sx_tensor_get(y, r * s->d.classes + j),
                                 j == s->labels[e] ? 1.0 : 0.0);
            }
        }
        /* padding rows of a short batch */
        for (int64_t r = m; r < bs; r++) {
            for (int k = 0; k < ROW; k++)
                cr_assert_eq(sx_tensor_get(x, r * ROW + k), 0.0);
            if (y->rank == 1)
                cr_assert_eq(sx_tensor_get(y, r), -1.0);
            else
                for (int64_t j = 0; j < s->d.classes; j++)
                    cr_assert_eq(sx_tensor_get(y, r * s->d.classes + j), 0.0);
        }
        seen += m;
    }
    cr_assert_eq(batches, sx_ds_batcher_batches(b));
    int64_t want = drop_last ? s->d.n / bs * bs : s->d.n;
    cr_assert_eq(seen, want, "an epoch saw %lld examples, want %lld", (long long)seen,
                 (long long)want);
    return seen;
}

/* Each example at most once in order[0..seen), and all of them when seen == n. */
static void check_distinct(const int64_t *order, int64_t seen, int64_t n)
{
    char *hit = calloc((size_t)n, 1);
    for (int64_t i = 0; i < seen; i++) {
        cr_assert_eq(hit[order[i]], 0, "example %lld twice in an epoch", (long long)order[i]);
        hit[order[i]] = 1;
    }
    free(hit);
}

Test(datasets_batch, every_example_once_per_epoch)
{
    const int64_t ns[4] = {1, 7, 64, 300};
    const int64_t bss[4] = {1, 3, 64, 100};
    for (int a = 0; a < 4; a++) {
        for (int c = 0; c < 4; c++) {
            int64_t n = ns[a], bs = bss[c];
            data s = data_make(n, 10);
            for (int flags = 0; flags < 8; flags++) {
                bool drop = flags & 1, shuffle = flags & 2, onehot = flags & 4;
                if (drop && bs > n)
                    continue;
                sx_ds_batcher_params p = sx_ds_batcher_params_default();
                p.batch_size = bs;
                p.drop_last = drop;
                p.shuffle = shuffle;
                p.seed = 42;
                p.scale = 1.0;
                sx_ds_batcher *b = NULL;
                cr_assert_eq(sx_ds_batcher_new(&s.d, &p, &b), SX_OK, "%s", sx_last_error());
                cr_assert_eq(sx_ds_batcher_batches(b), drop ? n / bs : (n + bs - 1) / bs);
                int64_t xs[4] = {bs, H, W, C}, ys[2] = {bs, 10};
                sx_tensor *x = tu_zeros(flags & 1 ? SX_F64 : SX_F32, 4, xs);
                sx_tensor *y = tu_zeros(SX_F32, onehot ? 2 : 1, ys);
                int64_t *order = malloc((size_t)n * sizeof *order);
                for (int64_t e = 0; e < 3; e++) {
                    cr_assert_eq(sx_ds_batcher_epoch(b), e);
                    int64_t seen = run_epoch(b, &s, x, y, bs, drop, order);
                    check_distinct(order, seen, n);
                    if (!shuffle)
                        for (int64_t i = 0; i < seen; i++)
                            cr_assert_eq(order[i], i, "no shuffle keeps the file order");
                }
                free(order);
                sx_tensor_free(x);
                sx_tensor_free(y);
                sx_ds_batcher_free(b);
            }
            data_free(&s);
        }
    }
}

/* The order of the epochs of a run, concatenated. */
static void orders(const data *s, uint64_t seed, int64_t bs, int epochs, int64_t *out)
{
    sx_ds_batcher_params p = sx_ds_batcher_params_default();
    p.batch_size = bs;
    p.seed = seed;
    p.scale = 1.0;
    sx_ds_batcher *b = NULL;
    cr_assert_eq(sx_ds_batcher_new(&s->d, &p, &b), SX_OK);
    int64_t xs[2] = {bs, ROW}; /* a flat x works too */
    sx_tensor *x = tu_zeros(SX_F32, 2, xs);
    for (int e = 0; e < epochs; e++) {
        int64_t m, at = 0;
        while (sx_ds_batcher_next(b, x, NULL, &m) == SX_OK && m > 0) {
            for (int64_t r = 0; r < m; r++)
                out[e * s->d.n + at + r] = example_of(x, r);
            at += m;
        }
        cr_assert_eq(at, s->d.n);
    }
    sx_tensor_free(x);
    sx_ds_batcher_free(b);
}

Test(datasets_batch, seeded_shuffle_is_reproducible)
{
    const int64_t n = 50;
    data s = data_make(n, 10);
    int64_t a[3 * 50], b[3 * 50], c[3 * 50], d[3 * 50];
    orders(&s, 7, 8, 3, a);
    orders(&s, 7, 8, 3, b);
    orders(&s, 8, 8, 3, c);
    orders(&s, 7, 5, 3, d);
    cr_assert_eq(memcmp(a, b, sizeof a), 0, "same seed, same order");
    cr_assert_neq(memcmp(a, c, sizeof a), 0, "another seed, another order");
    cr_assert_eq(memcmp(a, d, sizeof a), 0, "the order does not depend on the batch size");
    cr_assert_neq(memcmp(a, a + n, (size_t)n * sizeof *a), 0, "epochs differ");
    cr_assert_neq(memcmp(a + n, a + 2 * n, (size_t)n * sizeof *a), 0, "epochs differ");
    bool moved = false;
    for (int64_t i = 0; i < n; i++)
        moved |= a[i] != i;
    cr_assert(moved, "epoch 0 is shuffled");

    /* set_epoch replays an epoch without the ones before it */
    sx_ds_batcher_params p = sx_ds_batcher_params_default();
    p.batch_size = n;
    p.seed = 7;
    p.scale = 1.0;
    sx_ds_batcher *bt = NULL;
    cr_assert_eq(sx_ds_batcher_new(&s.d, &p, &bt), SX_OK);
    int64_t xs[4] = {n, H, W, C};
    sx_tensor *x = tu_zeros(SX_F32, 4, xs);
    int64_t m;
    for (int e = 2; e >= 0; e--) {
        cr_assert_eq(sx_ds_batcher_set_epoch(bt, e), SX_OK);
        cr_assert_eq(sx_ds_batcher_epoch(bt), e);
        cr_assert_eq(sx_ds_batcher_next(bt, x, NULL, &m), SX_OK);
        cr_assert_eq(m, n);
        for (int64_t r = 0; r < n; r++)
            cr_assert_eq(example_of(x, r), a[e * n + r]);
    }
    /* mid-epoch reset goes back to the first batch */
    cr_assert_eq(sx_ds_batcher_set_epoch(bt, 1), SX_OK);
    cr_assert_eq(sx_ds_batcher_next(bt, x, NULL, &m), SX_OK);
    cr_assert_eq(example_of(x, 0), a[n]);
    cr_assert_eq(sx_ds_batcher_set_epoch(bt, -1), SX_E_ARG);
    cr_assert_eq(sx_ds_batcher_set_epoch(NULL, 0), SX_E_ARG);
    sx_tensor_free(x);
    sx_ds_batcher_free(bt);
    data_free(&s);
}

/* Fisher-Yates done right gives each of the n! orders with equal chance; check the first
 * position over many epochs: each example about 1/n of the time. */
Test(datasets_batch, shuffle_is_roughly_uniform)
{
    const int64_t n = 5;
    const int epochs = 5000;
    data s = data_make(n, 3);
    sx_ds_batcher_params p = sx_ds_batcher_params_default();
    p.batch_size = n;
    p.scale = 1.0;
    p.seed = 123;
    sx_ds_batcher *b = NULL;
    cr_assert_eq(sx_ds_batcher_new(&s.d, &p, &b), SX_OK);
    int64_t xs[4] = {n, H, W, C};
    sx_tensor *x = tu_zeros(SX_F64, 4, xs);
    int64_t first[5] = {0}, last[5] = {0}, m;
    for (int e = 0; e < epochs; e++) {
        cr_assert_eq(sx_ds_batcher_next(b, x, NULL, &m), SX_OK);
        cr_assert_eq(m, n);
        first[example_of(x, 0)]++;
        last[example_of(x, n - 1)]++;
        cr_assert_eq(sx_ds_batcher_next(b, x, NULL, &m), SX_OK);
        cr_assert_eq(m, 0);
    }
    /* expected 1000 each, standard deviation ~28: 150 is over 5 sigma */
    for (int i = 0; i < n; i++) {
        cr_assert(fabs((double)first[i] - epochs / n) < 150, "first[%d] = %lld", i,
                  (long long)first[i]);
        cr_assert(fabs((double)last[i] - epochs / n) < 150, "last[%d] = %lld", i,
                  (long long)last[i]);
    }
    sx_tensor_free(x);
    sx_ds_batcher_free(b);
    data_free(&s);
}

/* Batch values are pixel * scale, rounded once to the dtype. */
Test(datasets_batch, values_are_scaled_pixels)
{
    data s = data_make(20, 4);
    for (int64_t i = 0; i < 20 * ROW; i++)
        s.pixels[i] = (uint8_t)(i * 53 + 200);
    const double scales[3] = {SX_DS_PIXEL_SCALE, 1.0 / 256, 3.0};
    for (int k = 0; k < 3; k++) {
        for (int dt = 0; dt < 2; dt++) {
            sx_ds_batcher_params p = sx_ds_batcher_params_default();
            p.batch_size = 6;
            p.scale = scales[k];
            p.shuffle = false;
            sx_ds_batcher *b = NULL;
            cr_assert_eq(sx_ds_batcher_new(&s.d, &p, &b), SX_OK);
            int64_t xs[4] = {6, H, W, C};
            sx_tensor *x = tu_zeros((sx_dtype)dt, 4, xs);
            int64_t m, at = 0;
            while (sx_ds_batcher_next(b, x, NULL, &m) == SX_OK && m > 0) {
                for (int64_t i = 0; i < m * ROW; i++) {
                    double want = (double)s.pixels[at * ROW + i] * scales[k];
                    if (dt == SX_F32)
                        want = (double)(float)want;
                    cr_assert_eq(sx_tensor_get(x, i), want);
                }
                at += m;
            }
            cr_assert_eq(at, 20);
            sx_tensor_free(x);
            sx_ds_batcher_free(b);
        }
    }
    data_free(&s);
}

/* Errors leave the tensors and the batcher as they were. */
Test(datasets_batch, errors_change_nothing)
{
    data s = data_make(10, 5);
    sx_ds_batcher_params p = sx_ds_batcher_params_default();
    p.batch_size = 4;
    p.shuffle = false;
    p.scale = 1.0;
    sx_ds_batcher *b = (sx_ds_batcher *)1;

    /* constructor */
    cr_assert_eq(sx_ds_batcher_new(NULL, &p, &b), SX_E_ARG);
    cr_assert_null(b);
    cr_assert_eq(sx_ds_batcher_new(&s.d, &p, NULL), SX_E_ARG);
    sx_ds_batcher_params q = p;
    q.batch_size = 0;
    cr_assert_eq(sx_ds_batcher_new(&s.d, &q, &b), SX_E_ARG);
    cr_assert(fx_msg_has("batch size 0"));
    q = p;
    q.scale = NAN;
    cr_assert_eq(sx_ds_batcher_new(&s.d, &q, &b), SX_E_ARG);
    q = p;
    q.drop_last = true;
    q.batch_size = 11;
    cr_assert_eq(sx_ds_batcher_new(&s.d, &q, &b), SX_E_ARG);
    cr_assert(fx_msg_has("no batch"));
    q.batch_size = 10;
    cr_assert_eq(sx_ds_batcher_new(&s.d, &q, &b), SX_OK);
    cr_assert_eq(sx_ds_batcher_batches(b), 1);
    sx_ds_batcher_free(b);
    sx_ds_images bad = s.d;
    bad.classes = 300;
    cr_assert_eq(sx_ds_batcher_new(&bad, &p, &b), SX_E_ARG);
    bad = s.d;
    bad.labels = NULL;
    cr_assert_eq(sx_ds_batcher_new(&bad, &p, &b), SX_E_ARG);
    cr_assert_null(b);
    /* NULL params: the defaults */
    cr_assert_eq(sx_ds_batcher_new(&s.d, NULL, &b), SX_OK);
    cr_assert_eq(sx_ds_batcher_batches(b), 1);
    sx_ds_batcher_free(b);
    sx_ds_batcher_free(NULL);
    cr_assert_eq(sx_ds_batcher_epoch(NULL), -1);
    cr_assert_eq(sx_ds_batcher_batches(NULL), -1);

    /* next */
    cr_assert_eq(sx_ds_batcher_new(&s.d, &p, &b), SX_OK);
    int64_t xs[4] = {4, H, W, C}, wrong[4] = {3, H, W, C}, flat_bad[2] = {4, ROW + 1};
    int64_t yi[1] = {4}, yo[2] = {4, 5}, yo_bad[2] = {4, 6}, y3[1] = {3};
    sx_tensor *x = tu_zeros(SX_F32, 4, xs), *y = tu_zeros(SX_F32, 2, yo);
    sx_tensor *xw = tu_zeros(SX_F32, 4, wrong), *xf = tu_zeros(SX_F32, 2, flat_bad);
    sx_tensor *yb = tu_zeros(SX_F32, 2, yo_bad), *yw = tu_zeros(SX_F32, 1, y3);
    sx_tensor *yidx = tu_zeros(SX_F64, 1, yi);
    cr_assert_eq(sx_tensor_fill(x, 9.0), SX_OK);
    int64_t m = 77;
    cr_assert_eq(sx_ds_batcher_next(NULL, x, y, &m), SX_E_ARG);
    cr_assert_eq(sx_ds_batcher_next(b, x, y, NULL), SX_E_ARG);
    cr_assert_eq(sx_ds_batcher_next(b, xw, y, &m), SX_E_SHAPE);
    cr_assert(fx_msg_has("x has shape (3,2,3,1)"));
    cr_assert_eq(sx_ds_batcher_next(b, xf, y, &m), SX_E_SHAPE);
    cr_assert_eq(sx_ds_batcher_next(b, x, yb, &m), SX_E_SHAPE);
    cr_assert(fx_msg_has("y has shape (4,6)"));
    cr_assert_eq(sx_ds_batcher_next(b, x, yw, &m), SX_E_SHAPE);
    cr_assert_eq(sx_ds_batcher_next(b, NULL, yw, &m), SX_E_SHAPE);
    sx_tensor broken = *x;
    broken.dtype = (sx_dtype)4;
    cr_assert_eq(sx_ds_batcher_next(b, &broken, y, &m), SX_E_ARG);
    cr_assert_eq(m, 77, "count untouched on error");
    for (int64_t i = 0; i < x->size; i++)
        cr_assert_eq(sx_tensor_get(x, i), 9.0, "x untouched on error");
    /* the batcher did not move: the first batch is examples 0..3 */
    cr_assert_eq(sx_ds_batcher_next(b, x, yidx, &m), SX_OK);
    cr_assert_eq(m, 4);
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(example_of(x, r), r);
        cr_assert_eq(sx_tensor_get(yidx, r), r % 5);
    }
    /* labels only, or nothing at all, also work */
    cr_assert_eq(sx_ds_batcher_next(b, NULL, y, &m), SX_OK);
    cr_assert_eq(m, 4);
    cr_assert_eq(sx_ds_batcher_next(b, NULL, NULL, &m), SX_OK);
    cr_assert_eq(m, 2);
    cr_assert_eq(sx_ds_batcher_next(b, NULL, NULL, &m), SX_OK);
    cr_assert_eq(m, 0);
    cr_assert_eq(sx_ds_batcher_epoch(b), 1);
    sx_ds_batcher_free(b);
    sx_tensor_free(xw);
    sx_tensor_free(xf);
    sx_tensor_free(yb);
    sx_tensor_free(yw);

    /* gather_out directly */
    int64_t idx[3] = {9, 0, 4}, oob[2] = {1, 10}, neg[1] = {-1};
    cr_assert_eq(sx_tensor_fill(x, 9.0), SX_OK);
    cr_assert_eq(sx_ds_images_gather_out(&s.d, oob, 2, 1.0, x, y), SX_E_RANGE);
    cr_assert(fx_msg_has("index[1] = 10 is not in 0..9"));
    cr_assert_eq(sx_ds_images_gather_out(&s.d, neg, 1, 1.0, x, y), SX_E_RANGE);
    int64_t five[5] = {0, 1, 2, 3, 4};
    cr_assert_eq(sx_ds_images_gather_out(&s.d, five, 5, 1.0, x, y), SX_E_SHAPE);
    cr_assert_eq(sx_ds_images_gather_out(&s.d, NULL, 2, 1.0, x, y), SX_E_ARG);
    cr_assert_eq(sx_ds_images_gather_out(&s.d, idx, -1, 1.0, x, y), SX_E_ARG);
    cr_assert_eq(sx_ds_images_gather_out(&s.d, idx, 3, INFINITY, x, y), SX_E_ARG);
    cr_assert_eq(sx_ds_images_gather_out(NULL, idx, 3, 1.0, x, y), SX_E_ARG);
    s.labels[4] = 5; /* a caller-filled set with a label >= classes */
    cr_assert_eq(sx_ds_images_gather_out(&s.d, idx, 3, 1.0, x, y), SX_E_RANGE);
    cr_assert(fx_msg_has("example 4 has label 5"));
    for (int64_t i = 0; i < x->size; i++)
        cr_assert_eq(sx_tensor_get(x, i), 9.0, "x untouched on error");
    cr_assert_eq(sx_ds_images_gather_out(&s.d, idx, 3, 1.0, x, NULL), SX_OK, "y not asked");
    s.labels[4] = 4;
    cr_assert_eq(sx_ds_images_gather_out(&s.d, idx, 3, 1.0, x, y), SX_OK);
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(example_of(x, r), idx[r]);
        for (int j = 0; j < 5; j++)
            cr_assert_eq(sx_tensor_get(y, r * 5 + j), j == idx[r] % 5 ? 1.0 : 0.0);
    }
    cr_assert_eq(sx_ds_images_gather_out(&s.d, NULL, 0, 1.0, x, yidx), SX_OK, "all padding");
    for (int r = 0; r < 4; r++)
        cr_assert_eq(sx_tensor_get(yidx, r), -1.0);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_tensor_free(yidx);
    data_free(&s);
}

/* A batcher over a set from a loader (the bytes of a real file), out of memory at each step. */
Test(datasets_batch, out_of_memory_every_allocation)
{
    data s = data_make(30, 10);
    long k;
    for (k = 0;; k++) {
        tu_fail_after(k);
        sx_ds_batcher *b = (sx_ds_batcher *)1;
        sx_status st = sx_ds_batcher_new(&s.d, NULL, &b);
        if (st != SX_OK)
            cr_assert_null(b);
        sx_ds_batcher_free(st == SX_OK ? b : NULL);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(live, 0, "k=%ld leaked %ld allocations", k, live);
        if (st == SX_OK)
            break;
        cr_assert_eq(st, SX_E_NOMEM, "k=%ld: %s", k, sx_last_error());
    }
    /* its own struct, and a loader over the set as a source: the source, the loader, its
     * permutation and one scratch example (x and y) */
    cr_assert_eq(k, 6, "the batcher makes six allocations, not %ld", k);
    data_free(&s);
}

/* A caller-filled set with a label >= classes: the batch holding it is refused before anything
 * is written, and the batcher does not move; without y the label is not read. */
Test(datasets_batch, bad_label_refused_before_writing)
{
    data s = data_make(6, 3);
    s.labels[4] = 3;
    sx_ds_batcher_params p = sx_ds_batcher_params_default();
    p.batch_size = 4;
    p.shuffle = false;
    p.scale = 1.0;
    sx_ds_batcher *b = NULL;
    cr_assert_eq(sx_ds_batcher_new(&s.d, &p, &b), SX_OK, "%s", sx_last_error());
    int64_t xs[4] = {4, H, W, C}, ys[1] = {4}, m = 0;
    sx_tensor *x = tu_zeros(SX_F32, 4, xs), *y = tu_zeros(SX_F32, 1, ys);
    cr_assert_eq(sx_ds_batcher_next(b, x, y, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(m, 4);
    cr_assert_eq(sx_tensor_fill(x, 9.0), SX_OK);
    cr_assert_eq(sx_ds_batcher_next(b, x, y, &m), SX_E_RANGE);
    cr_assert(fx_msg_has("example 4 has label 3"));
    for (int64_t i = 0; i < x->size; i++)
        cr_assert_eq(sx_tensor_get(x, i), 9.0, "x untouched on error");
    cr_assert_eq(sx_ds_batcher_next(b, x, NULL, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(m, 2);
    cr_assert_eq(example_of(x, 0), 4);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_ds_batcher_free(b);
    data_free(&s);
}
