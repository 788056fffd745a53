/* Labelled image sets: MNIST-style loading from small files made here (gzip and raw, the
 * standard names), every mismatch between the two files, the tensor conversions, out-of-memory
 * injection, and the real MNIST and Fashion-MNIST when they are on the machine (skipped
 * otherwise). */
#include "idx_fixture.h"

#include <math.h>
#include <sys/stat.h>

/* A small random set written as an images and a labels file. Pixels and labels are kept for
 * comparison; free with set_free. */
typedef struct set {
    int64_t n, h, w, c;
    uint8_t *pixels, *labels;
} set;

static set set_make(sx_rng *rng, int64_t n, int64_t h, int64_t w, int64_t c, int classes)
{
    set s = {n, h, w, c, malloc((size_t)(n * h * w * c)), malloc((size_t)n)};
    for (int64_t i = 0; i < n * h * w * c; i++)
        s.pixels[i] = (uint8_t)sx_rng_below(rng, 256);
    for (int64_t i = 0; i < n; i++)
        s.labels[i] = (uint8_t)sx_rng_below(rng, (uint64_t)classes);
    return s;
}

static void set_free(set *s)
{
    free(s->pixels);
    free(s->labels);
}

static fx_buf images_file(const set *s, int rank)
{
    fx_buf b = {0};
    uint32_t dims[4] = {(uint32_t)s->n, (uint32_t)s->h, (uint32_t)s->w, (uint32_t)s->c};
    fx_header(&b, 0x08, rank, dims);
    fx_put(&b, s->pixels, (size_t)(s->n * s->h * s->w * s->c));
    return b;
}

static fx_buf labels_file(const set *s)
{
    fx_buf b = {0};
    uint32_t dims[1] = {(uint32_t)s->n};
    fx_header(&b, 0x08, 1, dims);
    fx_put(&b, s->labels, (size_t)s->n);
    return b;
}

/* Write the pair under the MNIST names of `prefix` ("train" or "t10k"). */
static void write_pair(const char *dir, const char *prefix, const set *s, bool gz)
{
    char name[128], path[512];
    fx_buf i = images_file(s, 3), l = labels_file(s);
    snprintf(name, sizeof name, "%s-images-idx3-ubyte%s", prefix, gz ? ".gz" : "");
    fx_write_idx(dir, name, &i, gz, path);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte%s", prefix, gz ? ".gz" : "");
    fx_write_idx(dir, name, &l, gz, path);
    fx_free(&i);
    fx_free(&l);
}

static void check_set(const sx_ds_images *d, const set *s, int64_t n, int64_t classes)
{
    cr_assert_eq(d->n, n);
    cr_assert_eq(d->h, s->h);
    cr_assert_eq(d->w, s->w);
    cr_assert_eq(d->c, s->c);
    cr_assert_eq(d->classes, classes);
    cr_assert_eq(memcmp(d->pixels, s->pixels, (size_t)(n * s->h * s->w * s->c)), 0);
    cr_assert_eq(memcmp(d->labels, s->labels, (size_t)n), 0);
}

Test(datasets_mnist, loads_the_standard_files)
{
    char dir[64];
    fx_dir_new(dir);
    sx_rng rng;
    sx_rng_seed(&rng, 1);
    set train = set_make(&rng, 7, 28, 28, 1, 10), test = set_make(&rng, 3, 28, 28, 1, 10);
    write_pair(dir, "train", &train, true);
    write_pair(dir, "t10k", &test, true);
    sx_ds_images *d = NULL;
    cr_assert_eq(sx_ds_mnist_load(dir, SX_DS_TRAIN, 0, &d), SX_OK, "%s", sx_last_error());
    check_set(d, &train, 7, 10);
    sx_ds_images_free(d);
    cr_assert_eq(sx_ds_mnist_load(dir, SX_DS_TEST, 0, &d), SX_OK, "%s", sx_last_error());
    check_set(d, &test, 3, 10);
    sx_ds_images_free(d);
    /* first-N */
    cr_assert_eq(sx_ds_mnist_load(dir, SX_DS_TRAIN, 4, &d), SX_OK, "%s", sx_last_error());
    check_set(d, &train, 4, 10);
    sx_ds_images_free(d);
    cr_assert_eq(sx_ds_fashion_mnist_load(dir, SX_DS_TRAIN, 100, &d), SX_OK);
    check_set(d, &train, 7, 10);
    sx_ds_images_free(d);
    set_free(&train);
    set_free(&test);
    fx_dir_remove(dir);
}

/* Decompressed files under the names without .gz are found too; a .gz file wins. */
Test(datasets_mnist, falls_back_to_uncompressed_names)
{
    char dir[64];
    fx_dir_new(dir);
    sx_rng rng;
    sx_rng_seed(&rng, 2);
    set a = set_make(&rng, 5, 28, 28, 1, 10), b = set_make(&rng, 6, 28, 28, 1, 10);
    write_pair(dir, "t10k", &a, false);
    sx_ds_images *d = NULL;
    cr_assert_eq(sx_ds_mnist_load(dir, SX_DS_TEST, 0, &d), SX_OK, "%s", sx_last_error());
    check_set(d, &a, 5, 10);
    sx_ds_images_free(d);
    write_pair(dir, "t10k", &b, true);
    cr_assert_eq(sx_ds_mnist_load(dir, SX_DS_TEST, 0, &d), SX_OK, "%s", sx_last_error());
    check_set(d, &b, 6, 10);
    sx_ds_images_free(d);
    set_free(&a);
    set_free(&b);
    fx_dir_remove(dir);
}

/* Any image size; rank 4 files give channels; the class count is the caller's. */
Test(datasets_mnist, generic_pairs_and_channels)
{
    char dir[64], ip[512], lp[512];
    fx_dir_new(dir);
    sx_rng rng;
    sx_rng_seed(&rng, 3);
    set s = set_make(&rng, 9, 5, 4, 3, 4);
    fx_buf i = images_file(&s, 4), l = labels_file(&s);
    fx_write_idx(dir, "img", &i, false, ip);
    fx_write_idx(dir, "lab.gz", &l, true, lp);
    sx_ds_images *d = NULL;
    cr_assert_eq(sx_ds_images_load(ip, lp, 4, 0, &d), SX_OK, "%s", sx_last_error());
    check_set(d, &s, 9, 4);
    sx_ds_images_free(d);
    sx_ds_images_free(NULL);
    fx_free(&i);
    fx_free(&l);
    set_free(&s);
    fx_dir_remove(dir);
}

static void expect_load_error(const char *ip, const char *lp, int64_t classes, sx_status want,
                              const char *who, const char *what)
{
    sx_ds_images *d = (sx_ds_images *)1;
    cr_assert_eq(sx_ds_images_load(ip, lp, classes, 0, &d), want, "got: %s", sx_last_error());
    cr_assert_null(d);
    cr_assert(fx_msg_has(who));
    cr_assert(fx_msg_has(what));
}

Test(datasets_mnist, mismatched_files_are_errors)
{
    char dir[64], ip[512], lp[512], p2[512];
    fx_dir_new(dir);
    sx_rng rng;
    sx_rng_seed(&rng, 4);
    set s = set_make(&rng, 10, 6, 6, 1, 10);
    fx_buf i = images_file(&s, 3), l = labels_file(&s);
    fx_write_idx(dir, "images.gz", &i, true, ip);

    /* 9 labels for 10 images */
    set t = s;
    t.n = 9;
    fx_buf l9 = labels_file(&t);
    fx_write_idx(dir, "t10k-labels-idx1-ubyte.gz", &l9, true, lp);
    expect_load_error(ip, lp, 10, SX_E_FORMAT, lp, "9 labels but 10 images");
    fx_free(&l9);

    /* a label out of range (first-N does not hide a bad kept label) */
    s.labels[7] = 10;
    fx_buf lbad = labels_file(&s);
    fx_write_idx(dir, "labels.gz", &lbad, true, lp);
    expect_load_error(ip, lp, 10, SX_E_RANGE, lp, "label 10 of example 7 is not in 0..9");
    sx_ds_images *d = NULL;
    cr_assert_eq(sx_ds_images_load(ip, lp, 11, 0, &d), SX_OK, "with 11 classes it is fine");
    sx_ds_images_free(d);
    cr_assert_eq(sx_ds_images_load(ip, lp, 10, 7, &d), SX_OK, "label 7 is not kept");
    sx_ds_images_free(d);
    cr_assert_eq(sx_ds_images_load(ip, lp, 10, 8, &d), SX_E_RANGE);
    cr_assert_null(d);
    fx_free(&lbad);
    s.labels[7] = 3;

    /* wrong kinds: i16 images, rank-2 images, rank-2 labels, images passed as labels */
    fx_write_idx(dir, "labels.gz", &l, true, lp);
    uint32_t dims[3] = {10, 6, 6};
    double v[360] = {0};
    fx_buf w = fx_idx(0x0B, 3, dims, v, 360);
    fx_write_idx(dir, "wide", &w, false, p2);
    expect_load_error(p2, lp, 10, SX_E_FORMAT, p2, "images must be u8 of rank 3");
    fx_free(&w);
    w = fx_idx(0x08, 2, dims, v, 60);
    fx_write_idx(dir, "flat", &w, false, p2);
    expect_load_error(p2, lp, 10, SX_E_FORMAT, p2, "this file holds u8 (10,6)");
    expect_load_error(ip, p2, 10, SX_E_FORMAT, p2, "labels must be u8 of rank 1");
    expect_load_error(ip, ip, 10, SX_E_FORMAT, ip, "labels must be u8 of rank 1");
    fx_free(&w);

    /* a bad file on either side is reported with its own name */
    fx_buf z = fx_gzip(&l);
    z.len -= 5;
    fx_write(dir, "cut.gz", z.p, z.len, p2);
    expect_load_error(ip, p2, 10, SX_E_FORMAT, p2, "truncated gzip stream");
    fx_free(&z);
    z = fx_gzip(&i);
    z.len -= 5;
    fx_write(dir, "cut.gz", z.p, z.len, p2);
    expect_load_error(p2, lp, 10, SX_E_FORMAT, p2, "truncated gzip stream");
    fx_free(&z);
    snprintf(p2, sizeof p2, "%s/none", dir);
    expect_load_error(ip, p2, 10, SX_E_IO, p2, "No such file");
    expect_load_error(p2, lp, 10, SX_E_IO, p2, "No such file");

    /* arguments */
    expect_load_error(NULL, lp, 10, SX_E_ARG, "sx_ds_images_load", "images_path is NULL");
    expect_load_error(ip, NULL, 10, SX_E_ARG, "sx_ds_images_load", "labels_path is NULL");
    expect_load_error(ip, lp, 0, SX_E_ARG, "sx_ds_images_load", "0 classes");
    expect_load_error(ip, lp, 257, SX_E_ARG, "sx_ds_images_load", "257 classes");
    cr_assert_eq(sx_ds_images_load(ip, lp, 10, 0, NULL), SX_E_ARG);
    fx_free(&i);
    fx_free(&l);
    set_free(&s);
    fx_dir_remove(dir);
}

Test(datasets_mnist, loader_arguments_and_missing_dir)
{
    char dir[64], want[512];
    fx_dir_new(dir);
    sx_ds_images *d = (sx_ds_images *)1;
    cr_assert_eq(sx_ds_mnist_load(dir, SX_DS_TRAIN, 0, &d), SX_E_IO);
    cr_assert_null(d);
    snprintf(want, sizeof want, "%s/train-images-idx3-ubyte.gz: cannot open", dir);
    cr_assert(fx_msg_has(want));
    cr_assert_eq(sx_ds_mnist_load(NULL, SX_DS_TRAIN, 0, &d), SX_E_ARG);
    cr_assert_eq(sx_ds_mnist_load(dir, (sx_ds_part)2, 0, &d), SX_E_ARG);
    cr_assert_eq(sx_ds_mnist_load(dir, SX_DS_TEST, 0, NULL), SX_E_ARG);
    char *long_dir = malloc(5000);
    memset(long_dir, 'a', 4999);
    long_dir[4999] = '\0';
    cr_assert_eq(sx_ds_mnist_load(long_dir, SX_DS_TEST, 0, &d), SX_E_ARG);
    free(long_dir);
    cr_assert_eq(sx_ds_fashion_mnist_load(dir, (sx_ds_part)-1, 0, &d), SX_E_ARG);
    cr_assert_str_eq(sx_ds_fashion_mnist_class_name(0), "T-shirt/top");
    cr_assert_str_eq(sx_ds_fashion_mnist_class_name(9), "Ankle boot");
    cr_assert_str_eq(sx_ds_fashion_mnist_class_name(10), "?");
    cr_assert_str_eq(sx_ds_fashion_mnist_class_name(-1), "?");
    fx_dir_remove(dir);
}

/* Whole-set tensors: pixel * scale (reference in double, rounded once) and both label forms. */
Test(datasets_mnist, tensors_of_the_whole_set)
{
    sx_rng rng;
    sx_rng_seed(&rng, 5);
    set s = set_make(&rng, 6, 3, 2, 2, 5);
    s.pixels[0] = 0;
    s.pixels[1] = 255;
    sx_ds_images d = {
        .n = 6, .h = 3, .w = 2, .c = 2, .classes = 5, .pixels = s.pixels, .labels = s.labels};
    const double scales[3] = {SX_DS_PIXEL_SCALE, 1.0, -0.5};
    for (int dt = 0; dt < 2; dt++) {
        for (int k = 0; k < 3; k++) {
            sx_tensor *x = NULL;
            cr_assert_eq(sx_ds_images_tensor(&d, (sx_dtype)dt, scales[k], &x), SX_OK);
            cr_assert_eq(x->rank, 4);
            cr_assert_eq(x->shape[0], 6);
            cr_assert_eq(x->shape[1], 3);
            cr_assert_eq(x->shape[2], 2);
            cr_assert_eq(x->shape[3], 2);
            for (int64_t i = 0; i < x->size; i++) {
                double want = (double)s.pixels[i] * scales[k];
                if (dt == SX_F32)
                    want = (double)(float)want;
                cr_assert_eq(sx_tensor_get(x, i), want);
            }
            if (k == 0) {
                cr_assert_eq(sx_tensor_get(x, 0), 0.0);
                cr_assert_eq(sx_tensor_get(x, 1), 1.0, "255 maps to exactly 1");
            }
            sx_tensor_free(x);
        }
        sx_tensor *y = NULL;
        cr_assert_eq(sx_ds_labels_tensor(&d, (sx_dtype)dt, false, &y), SX_OK);
        cr_assert_eq(y->rank, 1);
        cr_assert_eq(y->shape[0], 6);
        for (int i = 0; i < 6; i++)
            cr_assert_eq(sx_tensor_get(y, i), s.labels[i]);
        sx_tensor_free(y);
        cr_assert_eq(sx_ds_labels_tensor(&d, (sx_dtype)dt, true, &y), SX_OK);
        cr_assert_eq(y->rank, 2);
        cr_assert_eq(y->shape[1], 5);
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 5; j++)
                cr_assert_eq(sx_tensor_get(y, i * 5 + j), j == s.labels[i] ? 1.0 : 0.0);
        sx_tensor_free(y);
    }
    sx_tensor *t = (sx_tensor *)1;
    cr_assert_eq(sx_ds_images_tensor(NULL, SX_F32, 1, &t), SX_E_ARG);
    cr_assert_null(t);
    cr_assert_eq(sx_ds_images_tensor(&d, SX_F32, 1, NULL), SX_E_ARG);
    cr_assert_eq(sx_ds_images_tensor(&d, SX_F32, NAN, &t), SX_E_ARG);
    cr_assert_eq(sx_ds_labels_tensor(&d, (sx_dtype)3, true, &t), SX_E_ARG);
    cr_assert_eq(sx_ds_labels_tensor(NULL, SX_F32, true, &t), SX_E_ARG);
    sx_ds_images bad = d;
    bad.h = 0;
    cr_assert_eq(sx_ds_images_tensor(&bad, SX_F32, 1, &t), SX_E_ARG);
    bad = d;
    bad.classes = 0;
    cr_assert_eq(sx_ds_labels_tensor(&bad, SX_F32, false, &t), SX_E_ARG);
    bad = d;
    bad.pixels = NULL;
    cr_assert_eq(sx_ds_images_tensor(&bad, SX_F32, 1, &t), SX_E_ARG);
    bad = d;
    bad.n = INT64_C(1) << 62;
    cr_assert_eq(sx_ds_images_tensor(&bad, SX_F32, 1, &t), SX_E_ARG);
    cr_assert_null(t);
    set_free(&s);
}

Test(datasets_mnist, out_of_memory_every_allocation)
{
    char dir[64];
    fx_dir_new(dir);
    sx_rng rng;
    sx_rng_seed(&rng, 6);
    set s = set_make(&rng, 5, 28, 28, 1, 10);
    write_pair(dir, "train", &s, true);
    long k;
    for (k = 0;; k++) {
        tu_fail_after(k);
        sx_ds_images *d = (sx_ds_images *)1;
        sx_tensor *x = NULL, *y = NULL;
        sx_status st = sx_ds_mnist_load(dir, SX_DS_TRAIN, 3, &d);
        if (st != SX_OK)
            cr_assert_null(d);
        if (st == SX_OK)
            st = sx_ds_images_tensor(d, SX_F32, SX_DS_PIXEL_SCALE, &x);
        if (st == SX_OK)
            st = sx_ds_labels_tensor(d, SX_F64, true, &y);
        bool done = st == SX_OK;
        if (d != (sx_ds_images *)1)
            sx_ds_images_free(d);
        sx_tensor_free(x);
        sx_tensor_free(y);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(live, 0, "k=%ld leaked %ld allocations", k, live);
        if (done)
            break;
        cr_assert_eq(st, SX_E_NOMEM, "k=%ld: %s", k, sx_last_error());
    }
    cr_assert_geq(k, 8);
    set_free(&s);
    fx_dir_remove(dir);
}

/* ---------------------------------------------------------------- the real data sets */

static bool has_files(const char *dir, const char *const *names, int count)
{
    for (int i = 0; i < count; i++) {
        char p[2048];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (stat(p, &st) != 0)
            return false;
    }
    return true;
}

static const char *const mnist_names[4] = {
    "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz"};

static void check_histogram(const sx_ds_images *d, const int64_t *want)
{
    int64_t got[10] = {0};
    for (int64_t i = 0; i < d->n; i++)
        got[d->labels[i]]++;
    for (int c = 0; c < 10; c++)
        cr_assert_eq(got[c], want[c], "class %d: %lld, want %lld", c, (long long)got[c],
                     (long long)want[c]);
}

Test(datasets_mnist, real_mnist_end_to_end, .timeout = 300)
{
    char dir[1100];
    tu_mnist_dir(dir, sizeof dir);
    if (!has_files(dir, mnist_names, 4))
        cr_skip_test("MNIST not found in %s (run scripts/fetch_mnist)", dir);
    /* The label histograms of the original MNIST. */
    const int64_t train_h[10] = {5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949};
    const int64_t test_h[10] = {980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009};
    sx_ds_images *tr = NULL, *te = NULL;
    cr_assert_eq(sx_ds_mnist_load(dir, SX_DS_TRAIN, 0, &tr), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_mnist_load(dir, SX_DS_TEST, 0, &te), SX_OK, "%s", sx_last_error());
    cr_assert_eq(tr->n, 60000);
    cr_assert_eq(te->n, 10000);
    cr_assert_eq(tr->h * tr->w * tr->c, 784);
    cr_assert_eq(te->h, 28);
    check_histogram(tr, train_h);
    check_histogram(te, test_h);
    /* The IDX tensor path agrees with the bytes. */
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, mnist_names[2]);
    sx_tensor *x = NULL;
    cr_assert_eq(sx_ds_idx_read(p, SX_F32, SX_DS_PIXEL_SCALE, 0, &x), SX_OK, "%s", sx_last_error());
    cr_assert_eq(x->size, 10000 * 784);
    int at255 = 0;
    for (int64_t i = 0; i < x->size; i++) {
        cr_assert_eq(SX_F32P(x)[i], (float)((double)te->pixels[i] / 255.0));
        at255 += te->pixels[i] == 255;
    }
    cr_assert_gt(at255, 0);
    sx_tensor_free(x);
    sx_ds_images_free(tr);
    sx_ds_images_free(te);
}

Test(datasets_mnist, real_fashion_mnist, .timeout = 300)
{
    if (!has_files(SX_DS_FASHION_MNIST_DIR, mnist_names, 4))
        cr_skip_test("Fashion-MNIST not in " SX_DS_FASHION_MNIST_DIR
                     " (apt-get install dataset-fashion-mnist)");
    sx_ds_images *te = NULL;
    cr_assert_eq(sx_ds_fashion_mnist_load(NULL, SX_DS_TEST, 0, &te), SX_OK, "%s", sx_last_error());
    cr_assert_eq(te->n, 10000);
    cr_assert_eq(te->h, 28);
    cr_assert_eq(te->w, 28);
    const int64_t thousand[10] = {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000};
    check_histogram(te, thousand);
    sx_ds_images_free(te);
    cr_assert_eq(sx_ds_fashion_mnist_load(NULL, SX_DS_TRAIN, 500, &te), SX_OK, "%s",
                 sx_last_error());
    cr_assert_eq(te->n, 500);
    sx_ds_images_free(te);
}
