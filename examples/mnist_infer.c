/* mnist_infer: run a model saved by mnist_train (or any sx_nn_save file) without its network
 * definition: the file holds the inference graph, lambda layers included.
 *
 *   mnist_infer --model PATH --data DIR     accuracy on DIR's MNIST test set; ends with
 *                                           result: test_accuracy=A images_per_second=R
 *   mnist_infer --model PATH --image F.pgm  the predicted digit of one image (PGM, binary P5
 *                                           or ASCII P2, 8-bit, of the model's input size)
 *
 * Other options: --batch B (100), --limit N (first N test images), --threads T, --invert (the
 * image is dark ink on a light background; MNIST is light on dark). Every bad argument or file
 * ends the program with one line on stderr and exit status 2 (usage) or 1 (files, data). */
#include <sx_nn.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PGM_MAX_SIDE 4096

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (s == NULL || *s == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mnist_infer --model PATH (--data DIR | --image FILE.pgm)\n"
               "                   [--batch B] [--limit N] [--threads T] [--invert]\n");
}

/* ---------------------------------------------------------------- PGM */

/* Skip whitespace and '#' comments (to the end of the line) of a PGM header. */
static int skip_blanks(FILE *f)
{
    int c = fgetc(f);
    while (c != EOF) {
        if (c == '#') {
            while (c != EOF && c != '\n' && c != '\r')
                c = fgetc(f);
        } else if (!isspace(c)) {
            break;
        } else {
            c = fgetc(f);
        }
    }
    return c;
}

/* A non-negative decimal header number (PGM allows comments between the fields). */
static bool header_number(FILE *f, long max, long *out)
{
    int c = skip_blanks(f);
    if (c == EOF || !isdigit(c))
        return false;
    long v = 0;
    while (c != EOF && isdigit(c)) {
        v = v * 10 + (c - '0');
        if (v > max)
            return false;
        c = fgetc(f);
    }
    /* the field must end with whitespace (or a comment) */
    if (c != EOF && !isspace(c) && c != '#')
        return false;
    if (c == '#')
        ungetc(c, f);
    *out = v;
    return true;
}

/* Read an 8-bit PGM (P5 binary or P2 ASCII) of exactly h x w pixels into pix, scaled to
 * 0..255 when maxval is below 255. On error, a message in err and false. */
static bool read_pgm(const char *path, int64_t h, int64_t w, uint8_t *pix, char *err, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, n, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    bool ok = false;
    char magic[2] = {0, 0};
    long width = 0, height = 0, maxval = 0;
    if (fread(magic, 1, 2, f) != 2 || magic[0] != 'P' || (magic[1] != '5' && magic[1] != '2')) {
        snprintf(err, n, "%s: not a PGM file (want P5 or P2)", path);
        goto done;
    }
    if (!header_number(f, PGM_MAX_SIDE, &width) || !header_number(f, PGM_MAX_SIDE, &height) ||
        !header_number(f, 65535, &maxval)) {
        snprintf(err, n, "%s: bad PGM header", path);
        goto done;
    }
    if (width < 1 || height < 1 || maxval < 1) {
        snprintf(err, n, "%s: bad PGM header (%ldx%ld, maxval %ld)", path, width, height, maxval);
        goto done;
    }
    if (maxval > 255) {
        snprintf(err, n, "%s: %ld-level PGM: only 8-bit images (maxval <= 255) are read", path,
                 maxval);
        goto done;
    }
    if (height != h || width != w) {
        snprintf(err, n, "%s: image is %ldx%ld, the model takes %lldx%lld", path, width, height,
                 (long long)w, (long long)h);
        goto done;
    }
    int64_t count = h * w;
    if (magic[1] == '5') {
        /* exactly one whitespace character was read after maxval; the raster follows */
        size_t got = fread(pix, 1, (size_t)count, f);
        if (got != (size_t)count) {
            snprintf(err, n, "%s: truncated: %zu of %lld pixels", path, got, (long long)count);
            goto done;
        }
        if (fgetc(f) != EOF) {
            snprintf(err, n, "%s: trailing bytes after the %lld pixels", path, (long long)count);
            goto done;
        }
        for (int64_t i = 0; i < count; i++)
            if (pix[i] > maxval) {
                snprintf(err, n, "%s: pixel %lld is %d, above maxval %ld", path, (long long)i,
                         pix[i], maxval);
                goto done;
            }
    } else {
        for (int64_t i = 0; i < count; i++) {
            long v = 0;
            if (!header_number(f, maxval, &v)) {
                snprintf(err, n, "%s: pixel %lld is missing or not a number in 0..%ld", path,
                         (long long)i, maxval);
                goto done;
            }
            pix[i] = (uint8_t)v;
        }
        if (skip_blanks(f) != EOF) {
            snprintf(err, n, "%s: trailing data after the %lld pixels", path, (long long)count);
            goto done;
        }
    }
    if (maxval != 255)
        for (int64_t i = 0; i < count; i++)
            pix[i] = (uint8_t)((pix[i] * 255 + maxval / 2) / maxval);
    ok = true;
done:
    fclose(f);
    return ok;
}

/* ---------------------------------------------------------------- the two modes */

static int fail(const char *what)
{
    fprintf(stderr, "mnist_infer: %s\n", what);
    return 1;
}

static int fail_sx(const char *what)
{
    fprintf(stderr, "mnist_infer: %s: %s\n", what, sx_last_error());
    return 1;
}

/* The model's (h, w, 1) input; false when it takes something else than one-channel images. */
static bool image_input(const sx_nn_model *m, int64_t *h, int64_t *w)
{
    const int64_t *s = sx_nn_model_input_shape(m);
    if (sx_nn_model_input_rank(m) != 3 || s[2] != 1)
        return false;
    *h = s[0];
    *w = s[1];
    return true;
}

/* The factor for pixel bytes: 1, the model scales its raw input itself; a model file from
 * before version 3 wants its input scaled by the caller. */
static double byte_scale(const sx_nn_model *m)
{
    sx_nn_preprocess p = sx_nn_model_preprocess(m);
    return p.in_graph ? 1.0 : p.input_scale;
}

static int predict_image(sx_nn_model *m, const char *path, bool invert)
{
    int64_t h, w, k = sx_nn_model_classes(m);
    if (!image_input(m, &h, &w))
        return fail("the model does not take one-channel images");
    uint8_t *pix = malloc((size_t)(h * w));
    sx_tensor *x = NULL, *out = NULL;
    char err[512] = "";
    int rc = 1;
    if (pix == NULL) {
        rc = fail("out of memory");
        goto done;
    }
    if (!read_pgm(path, h, w, pix, err, sizeof err)) {
        rc = fail(err);
        goto done;
    }
    sx_dtype dt = sx_nn_model_dtype(m);
    if (sx_tensor_new(dt, 4, (int64_t[]){1, h, w, 1}, &x) != SX_OK ||
        sx_tensor_new(dt, 2, (int64_t[]){1, k}, &out) != SX_OK) {
        rc = fail_sx("tensors");
        goto done;
    }
    double scale = byte_scale(m);
    for (int64_t i = 0; i < h * w; i++)
        sx_tensor_set(x, i, (invert ? 255 - pix[i] : pix[i]) * scale);
    if (sx_nn_model_predict(m, x, out) != SX_OK) {
        rc = fail_sx("prediction");
        goto done;
    }
    int64_t best = 0;
    for (int64_t c = 1; c < k; c++)
        if (sx_tensor_get(out, c) > sx_tensor_get(out, best))
            best = c;
    printf("%s: predicted %lld (p=%.4f)\n", path, (long long)best, sx_tensor_get(out, best));
    rc = 0;
done:
    free(pix);
    sx_tensor_free(x);
    sx_tensor_free(out);
    return rc;
}

static int evaluate(sx_nn_model *m, const char *dir, int64_t batch, int64_t limit)
{
    int64_t h, w, k = sx_nn_model_classes(m);
    if (!image_input(m, &h, &w))
        return fail("the model does not take one-channel images");
    sx_ds_images *test = NULL;
    if (sx_ds_mnist_load(dir, SX_DS_TEST, limit, &test) != SX_OK)
        return fail_sx("--data");
    if (sx_ds_images_compact(test) != SX_OK) { /* run-length coded, decoded batch by batch */
        sx_ds_images_free(test);
        return fail_sx("compacting the data");
    }
    if (test->h != h || test->w != w || test->c != 1 || test->classes != k) {
        sx_ds_images_free(test);
        char msg[256];
        snprintf(msg, sizeof msg,
                 "the model takes %lldx%lld images and has %lld classes, not the "
                 "data's",
                 (long long)w, (long long)h, (long long)k);
        return fail(msg);
    }
    sx_tensor *x = NULL, *out = NULL;
    int64_t *index = malloc((size_t)batch * sizeof *index);
    int rc = 1;
    sx_dtype dt = sx_nn_model_dtype(m);
    if (index == NULL || sx_tensor_new(dt, 4, (int64_t[]){batch, h, w, 1}, &x) != SX_OK ||
        sx_tensor_new(dt, 2, (int64_t[]){batch, k}, &out) != SX_OK) {
        rc = fail_sx("tensors");
        goto done;
    }
    double scale = byte_scale(m), t0 = sx_seconds();
    int64_t right = 0;
    for (int64_t first = 0; first < test->n; first += batch) {
        int64_t count = test->n - first < batch ? test->n - first : batch;
        for (int64_t i = 0; i < count; i++)
            index[i] = first + i;
        if (sx_ds_images_gather_out(test, index, count, scale, x, NULL) != SX_OK) {
            rc = fail_sx("batch");
            goto done;
        }
        /* views of the first `count` rows: the last batch may be smaller */
        sx_tensor xv = *x, ov = *out;
        xv.shape[0] = ov.shape[0] = count;
        xv.size = count * h * w;
        ov.size = count * k;
        if (sx_nn_model_predict(m, &xv, &ov) != SX_OK) {
            rc = fail_sx("prediction");
            goto done;
        }
        for (int64_t r = 0; r < count; r++) {
            int64_t best = 0;
            for (int64_t c = 1; c < k; c++)
                if (sx_tensor_get(out, r * k + c) > sx_tensor_get(out, r * k + best))
                    best = c;
            right += best == test->labels[first + r];
        }
    }
    double secs = sx_seconds() - t0;
    printf("result: test_accuracy=%.4f images_per_second=%.0f\n", (double)right / (double)test->n,
           secs > 0 ? (double)test->n / secs : 0);
    rc = 0;
done:
    free(index);
    sx_tensor_free(x);
    sx_tensor_free(out);
    sx_ds_images_free(test);
    return rc;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *data = NULL, *image = NULL;
    long batch = 100, limit = 0, threads = 0;
    bool invert = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true, takes = true;
        if (strcmp(a, "--model") == 0)
            ok = v != NULL, model = v;
        else if (strcmp(a, "--data") == 0)
            ok = v != NULL, data = v;
        else if (strcmp(a, "--image") == 0)
            ok = v != NULL, image = v;
        else if (strcmp(a, "--batch") == 0)
            ok = parse_long(v, 1, 10000, &batch);
        else if (strcmp(a, "--limit") == 0)
            ok = parse_long(v, 1, 10000000, &limit);
        else if (strcmp(a, "--threads") == 0)
            ok = parse_long(v, 1, 1024, &threads);
        else if (strcmp(a, "--invert") == 0)
            invert = true, takes = false;
        else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "mnist_infer: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "mnist_infer: bad or missing value for %s%s%s\n", a, v ? ": " : "",
                    v ? v : "");
            return 2;
        }
        i += takes;
    }
    if (model == NULL || (data == NULL) == (image == NULL)) {
        fprintf(stderr, "mnist_infer: want --model PATH and one of --data DIR, --image FILE "
                        "(see --help)\n");
        return 2;
    }
    if (threads > 0 && sx_threads_set((int)threads) != SX_OK)
        return fail_sx("--threads");

    sx_nn_model *m = NULL;
    if (sx_nn_load(model, image ? 1 : batch, &m) != SX_OK)
        return fail_sx("--model");
    int rc = image ? predict_image(m, image, invert) : evaluate(m, data, batch, limit);
    sx_nn_model_free(m);
    return rc;
}
