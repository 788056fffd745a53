/* image_folder_train: train a small CNN on a folder of images, root/<class>/<file> (PNG, JPEG,
 * PGM/PPM, BMP, GIF or TGA), with augmentation (random crops, horizontal flips, per-channel
 * normalisation from the training split), a validation split and early stopping.
 *
 *   image_folder_train ROOT [--size S] [--gray] [--flip | --no-flip] [--crop-pad N] [--strict]
 *                      [--epochs N] [--batch B] [--lr X] [--val F] [--patience P] [--seed S]
 *                      [--history FILE.csv|.jsonl] [--plot FILE.svg] [--save FILE] [--quiet]
 *   image_folder_train --make-demo ROOT   (writes two classes of 16x16 gray images, 24 each:
 *                                          horizontal and vertical stripes, random phase; every
 *                                          fourth a binary PGM, the others PNGs)
 *   image_folder_train --make-mnist ROOT MNIST_DIR N   (writes the first N training images of
 *                                          each digit as ROOT/<digit>/<index>.png, 28x28 gray)
 *
 * --flip (the default) / --no-flip: random horizontal flips or none (digits and text are not
 *   mirror-symmetric).
 * --crop-pad N: random crops of the image padded with N zeros a side (0: none; the default is
 *   2, or S/4 for images smaller than 8 pixels, where 2 would crop away too much).
 * --strict: a file in the folder that is not an image is an error (by default such files are
 *   skipped, and their count printed).
 * --save FILE: the trained network for inference (sx_nn_save; mnist_infer and `strix predict`
 *   read it), then "saved model to FILE".
 *
 * CNN: input SxSxC -> conv2d 3x3, 8 filters, SAME, relu -> max_pool 2x2 -> flatten
 *      -> linear (classes, softmax); cross-entropy, Adam. Ends with one line:
 *   result: epochs=E best_epoch=B val_accuracy=A stopped_early=0|1 */
#include <sx_nn.h>

#include <errno.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct options {
    const char *root, *history, *plot, *save;
    bool gray, quiet, no_flip, strict;
    long size, epochs, batch, patience, seed, crop_pad; /* crop_pad -1: the default */
    double lr, val;
} options;

static int usage(void)
{
    fprintf(stderr, "usage: image_folder_train ROOT [--size S] [--gray] [--flip | --no-flip]\n"
                    "                          [--crop-pad N] [--strict] [--epochs N] [--batch B]\n"
                    "                          [--lr X] [--val F] [--patience P] [--seed S]\n"
                    "                          [--history FILE.csv|.jsonl] [--plot FILE.svg]\n"
                    "                          [--save FILE] [--quiet]\n"
                    "       image_folder_train --make-demo ROOT\n"
                    "       image_folder_train --make-mnist ROOT MNIST_DIR N\n");
    return 2;
}

/* ---------------------------------------------------------------- the demo folder */

static bool write_png(const char *path, int n, const uint8_t *px)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return false;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    bool ok = info != NULL;
    if (ok && setjmp(png_jmpbuf(png)) == 0) {
        png_init_io(png, f);
        png_set_IHDR(png, info, (png_uint_32)n, (png_uint_32)n, 8, PNG_COLOR_TYPE_GRAY,
                     PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
        png_write_info(png, info);
        for (int y = 0; y < n; y++)
            png_write_row(png, px + y * n);
        png_write_end(png, NULL);
    } else {
        ok = false;
    }
    png_destroy_write_struct(&png, &info);
    return fclose(f) == 0 && ok;
}

/* A binary PGM (P5, maxval 255) of n x n grey bytes. */
static bool write_pgm(const char *path, int n, const uint8_t *px)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return false;
    bool ok = fprintf(f, "P5\n%d %d\n255\n", n, n) > 0 &&
              fwrite(px, 1, (size_t)(n * n), f) == (size_t)(n * n);
    return fclose(f) == 0 && ok;
}

static int make_demo(const char *root)
{
    const char *classes[2] = {"horizontal", "vertical"};
    char path[4200];
    uint64_t st = 777;
    uint8_t px[16 * 16];
    mkdir(root, 0777);
    for (int c = 0; c < 2; c++) {
        snprintf(path, sizeof path, "%s/%s", root, classes[c]);
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "image_folder_train: %s: %s\n", path, strerror(errno));
            return 1;
        }
        for (int i = 0; i < 24; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            int phase = (int)(st >> 60) & 3, period = 4;
            for (int y = 0; y < 16; y++)
                for (int x = 0; x < 16; x++) {
                    int t = (c == 0 ? y : x) + phase;
                    px[y * 16 + x] = (uint8_t)(t % period < period / 2 ? 220 : 30);
                }
            bool pgm = i % 4 == 3;
            snprintf(path, sizeof path, "%s/%s/%02d.%s", root, classes[c], i, pgm ? "pgm" : "png");
            if (!(pgm ? write_pgm(path, 16, px) : write_png(path, 16, px))) {
                fprintf(stderr, "image_folder_train: %s: cannot write\n", path);
                return 1;
            }
        }
    }
    printf("wrote %s: 2 classes of 24 images (18 PNGs, 6 PGMs)\n", root);
    return 0;
}

/* The first n training images of each digit of MNIST (read from mnist_dir) as PNG files. */
static int make_mnist(const char *root, const char *mnist_dir, const char *count)
{
    char *end = NULL, path[4200];
    long n = strtol(count, &end, 10);
    if (*end != '\0' || n < 1 || n > 6000)
        return usage();
    sx_ds_images *d = NULL;
    if (sx_ds_mnist_load(mnist_dir, SX_DS_TRAIN, 0, &d) != SX_OK) {
        fprintf(stderr, "image_folder_train: %s\n", sx_last_error());
        return 1;
    }
    long done[10] = {0}, total = 0;
    int rc = 0;
    mkdir(root, 0777);
    for (int c = 0; c < 10 && rc == 0; c++) {
        snprintf(path, sizeof path, "%s/%d", root, c);
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "image_folder_train: %s: %s\n", path, strerror(errno));
            rc = 1;
        }
    }
    for (int64_t i = 0; rc == 0 && i < d->n && total < 10 * n; i++) {
        int c = d->labels[i];
        if (done[c] == n)
            continue;
        snprintf(path, sizeof path, "%s/%d/%05lld.png", root, c, (long long)i);
        if (!write_png(path, 28, d->pixels + i * 784)) {
            fprintf(stderr, "image_folder_train: %s: cannot write\n", path);
            rc = 1;
        }
        done[c]++;
        total++;
    }
    sx_ds_images_free(d);
    if (rc == 0)
        printf("wrote %s: 10 classes of %ld MNIST PNGs\n", root, n);
    return rc;
}

/* ---------------------------------------------------------------- training */

static bool parse_args(int argc, char **argv, options *o)
{
    *o = (options){.size = 16,
                   .epochs = 30,
                   .batch = 8,
                   .patience = 5,
                   .seed = 1,
                   .crop_pad = -1,
                   .lr = 0.01,
                   .val = 0.25};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--gray") == 0 || strcmp(a, "--quiet") == 0 || strcmp(a, "--no-flip") == 0 ||
            strcmp(a, "--flip") == 0 || strcmp(a, "--strict") == 0) {
            bool *flag = a[2] == 'g'   ? &o->gray
                         : a[2] == 'q' ? &o->quiet
                         : a[2] == 's' ? &o->strict
                                       : &o->no_flip;
            *flag = strcmp(a, "--flip") != 0; /* --flip clears no_flip */
            continue;
        }
        if (a[0] != '-' && o->root == NULL) {
            o->root = a;
            continue;
        }
        if (v == NULL)
            return false;
        if (strcmp(a, "--history") == 0 || strcmp(a, "--plot") == 0 || strcmp(a, "--save") == 0) {
            *(a[2] == 'h' ? &o->history : a[2] == 'p' ? &o->plot : &o->save) = v;
            i++;
            continue;
        }
        if (strcmp(a, "--lr") == 0 || strcmp(a, "--val") == 0) {
            *(a[2] == 'l' ? &o->lr : &o->val) = strtod(v, &end);
        } else if (strcmp(a, "--size") == 0 || strcmp(a, "--epochs") == 0 ||
                   strcmp(a, "--batch") == 0 || strcmp(a, "--patience") == 0 ||
                   strcmp(a, "--seed") == 0 || strcmp(a, "--crop-pad") == 0) {
            long *dst = strcmp(a, "--size") == 0 ? &o->size
                        : a[2] == 'e'            ? &o->epochs
                        : a[2] == 'b'            ? &o->batch
                        : a[2] == 'p'            ? &o->patience
                        : a[2] == 'c'            ? &o->crop_pad
                                                 : &o->seed;
            *dst = strtol(v, &end, 10);
        } else {
            return false;
        }
        if (*end != '\0' || end == v)
            return false;
        i++;
    }
    if (o->crop_pad == -1) /* 2, but at most a quarter of a small image */
        o->crop_pad = o->size / 4 < 2 ? o->size / 4 : 2;
    return o->root != NULL && o->size >= 2 && o->size <= 4096 && o->epochs >= 1 &&
           o->epochs <= 1000000 && o->batch >= 1 && o->batch <= 1000000 && o->patience >= 0 &&
           o->patience <= 1000000 && o->crop_pad >= 0 && o->crop_pad <= o->size;
}

static sx_status build_net(const options *o, int64_t c, int64_t classes, sx_nn_net **out)
{
    SX_TRY(sx_nn_net_new("folder_cnn", SX_F32, (uint64_t)o->seed, out));
    sx_nn_layer *x = sx_nn_input(*out, 3, (int64_t[]){o->size, o->size, c});
    sx_nn_conv2d_params conv = sx_nn_conv2d_params_default(8, 3, 3);
    conv.conv.padding = SX_PAD_SAME;
    conv.act = SX_ACT_RELU;
    x = sx_nn_conv2d(*out, x, &conv);
    sx_nn_pool2d_params pool = sx_nn_pool2d_params_default(2, 2);
    x = sx_nn_max_pool2d(*out, x, &pool);
    x = sx_nn_flatten(*out, x);
    x = sx_nn_linear(*out, x, classes, SX_ACT_SOFTMAX);
    return sx_nn_net_status(*out);
}

static sx_status train(const options *o, const sx_ds_images *set)
{
    sx_ds_source *all = NULL, *tr = NULL, *va = NULL;
    sx_ds_stats *st = NULL;
    sx_nn_net *net = NULL;
    sx_nn_history h = {0};
    sx_status s = sx_ds_source_images(set, &all);
    if (s == SX_OK)
        s = sx_ds_split(all, o->val, (uint64_t)o->seed, &tr, &va);
    if (s == SX_OK) /* per-channel statistics of the training split */
        s = sx_ds_stats_compute(tr, set->c, &st);
    if (s == SX_OK)
        s = build_net(o, set->c, set->classes, &net);
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = (int)o->epochs;
    p.train.batch = (int)o->batch;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.train.optim.lr = o->lr;
    p.train.verbose = o->quiet ? 0 : 1;
    p.train.progress_every = 0;
    p.patience = (int)o->patience;
    if (st != NULL)
        p.augment = (sx_ds_augment){
            .crop_pad = o->crop_pad, .flip = !o->no_flip, .mean = st->mean, .std = st->std};
    if (s == SX_OK) {
        if (!o->quiet)
            sx_nn_net_print(net, stderr);
        s = sx_nn_fit(net, &p, tr, va, &h); /* va: normalised, not cropped or flipped */
    }
    for (int64_t i = 0; s == SX_OK && i < h.n; i++)
        printf("epoch %lld: train_loss=%.5f train_accuracy=%.4f val_loss=%.5f val_accuracy=%.4f\n",
               (long long)h.rows[i].epoch, h.rows[i].train_loss, h.rows[i].train_metric,
               h.rows[i].val_loss, h.rows[i].val_metric);
    if (s == SX_OK && o->history != NULL) {
        size_t n = strlen(o->history);
        s = n > 6 && strcmp(o->history + n - 6, ".jsonl") == 0
                ? sx_nn_history_write_jsonl(&h, o->history)
                : sx_nn_history_write_csv(&h, o->history);
    }
    if (s == SX_OK && o->plot != NULL)
        s = sx_nn_history_write_svg(&h, o->plot, o->root);
    if (s == SX_OK && o->save != NULL && (s = sx_nn_save(net, o->save)) == SX_OK)
        printf("saved model to %s\n", o->save);
    for (int64_t i = 0; s == SX_OK && i < h.n; i++)
        if (h.rows[i].epoch == h.best_epoch)
            printf("result: epochs=%lld best_epoch=%lld val_accuracy=%.4f stopped_early=%d\n",
                   (long long)h.rows[h.n - 1].epoch, (long long)h.best_epoch, h.rows[i].val_metric,
                   (int)h.stopped_early);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_stats_free(st);
    sx_ds_source_free(va);
    sx_ds_source_free(tr);
    sx_ds_source_free(all);
    return s;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--make-demo") == 0)
        return make_demo(argv[2]);
    if (argc == 5 && strcmp(argv[1], "--make-mnist") == 0)
        return make_mnist(argv[2], argv[3], argv[4]);
    options o;
    if (!parse_args(argc, argv, &o))
        return usage();
    sx_ds_image_folder_params fp = sx_ds_image_folder_params_default();
    fp.h = fp.w = o.size;
    fp.c = o.gray ? 1 : 3;
    fp.strict = o.strict;
    sx_ds_image_folder_report rep;
    fp.report = &rep;
    sx_ds_images *set = NULL;
    sx_status s = sx_ds_image_folder_load(o.root, &fp, &set);
    if (s == SX_OK && rep.skipped > 0 && !o.quiet)
        fprintf(stderr,
                "image_folder_train: skipped %lld of %lld entries (not images; first: %s)\n",
                (long long)rep.skipped, (long long)rep.files, rep.first_skipped);
    if (s == SX_OK)
        s = train(&o, set);
    sx_ds_images_free(set);
    if (s != SX_OK) {
        fprintf(stderr, "image_folder_train: %s\n", sx_last_error());
        return 1;
    }
    return 0;
}
