/* journey: the steps of a user's work with strix, one process each, for the journey tests
 * (journey.cmake chains them): make data, train and save, load and predict on raw data. Every
 * step that judges data prints one line "result: ..." with its numbers in %.17g, so that two
 * processes can be compared as text; predictions go to .npy files, compared as bytes.
 *
 *   journey make-csv classes|regression PATH    a small table with a header (see make_csv)
 *   journey shuffle-csv IN OUT                   the rows shuffled, the feature columns reversed
 *   journey make-images DIR                      DIR/<class>/<i>.png, three classes of RGB PNGs
 *   journey train-csv TRAIN.csv MODEL PRED.npy [--regression]
 *   journey predict-csv MODEL FILE.csv PRED.npy [--regression] [--x X.npy]
 *   journey train-images DIR MODEL PRED.npy X.npy
 *   journey predict-images MODEL DIR PRED.npy
 *
 * train-*: fit a small network on the raw data (the network standardises its features, scales
 * its targets, or normalises its images itself), print the training run's own evaluation of the
 * same data (sx_nn_evaluate_source), write the in-process predictions of the raw data
 * (sx_nn_compile_infer + sx_nn_model_predict, checked equal to sx_nn_predict_source) and save
 * the model. train-images writes the raw pixel bytes too (X.npy, u8), for `strix predict`.
 * predict-*: load the model (sx_nn_load), read the file as a user would (CSV columns by the
 * model's feature names; images at the model's input size), predict on the raw values, write the
 * predictions, print "i: class k NAME (score)" per example as `strix predict` does, and judge
 * them against the file's labels (numbered with the default, sorted, order) or targets.
 * --x X.npy: also write the features read (f64), for `strix predict --input X.npy`. */
#include <sx_nn.h>

#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ROWS 300
#define IMG 12
#define PER_CLASS 16

static uint64_t lcg(uint64_t *st)
{
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return *st >> 11;
}

/* Uniform in [-1, 1). */
static double unif(uint64_t *st)
{
    return 2.0 * (double)lcg(st) / 9007199254740992.0 - 1.0;
}

static int fail(const char *what)
{
    fprintf(stderr, "journey: %s: %s\n", what, sx_last_error());
    return 1;
}

/* ---------------------------------------------------------------- data */

/* classes: three species, their rows interleaved so that the first seen ("virginica") is not
 * the first sorted ("setosa"); the features are far from unit scale (mass_g about 1000..1300,
 * ratio about 0.5..0.9, noise_cm pure noise), so a network that did not standardise them would
 * not learn in a few epochs. regression: y = 300 + 50 x1 - 20 x2 + noise, far from 0/1 scale. */
static int make_csv(const char *kind, const char *path)
{
    static const char *const species[3] = {"virginica", "setosa", "versicolor"};
    bool reg = strcmp(kind, "regression") == 0;
    if (!reg && strcmp(kind, "classes") != 0)
        return 2;
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return fprintf(stderr, "journey: %s: %s\n", path, strerror(errno)), 1;
    uint64_t st = 2024;
    fputs(reg ? "x1,x2,x3,y\n" : "mass_g,ratio,noise_cm,species\n", f);
    for (int i = 0; i < ROWS; i++) {
        double a = unif(&st), b = unif(&st), c = unif(&st), d = unif(&st);
        if (reg) {
            double x1 = 3 * a, x2 = 5 + 4 * b;
            fprintf(f, "%.6f,%.6f,%.6f,%.6f\n", x1, x2, c, 300 + 50 * x1 - 20 * x2 + 0.5 * d);
        } else {
            int k = i % 3;
            fprintf(f, "%.3f,%.5f,%.4f,%s\n", 1000 + 120 * k + 35 * a,
                    0.5 + 0.2 * ((2 * k) % 3) + 0.06 * b, 3 * c, species[k]);
        }
    }
    if (fclose(f) != 0)
        return fprintf(stderr, "journey: %s: write failed\n", path), 1;
    printf("wrote %s (%d rows)\n", path, ROWS);
    return 0;
}

/* The header and rows of IN, rows shuffled, fields before the last (the label) reversed. */
static int shuffle_csv(const char *in, const char *out)
{
    static char lines[ROWS + 1][256];
    int n = 0;
    FILE *f = fopen(in, "r");
    if (f == NULL)
        return fprintf(stderr, "journey: %s: %s\n", in, strerror(errno)), 1;
    while (n <= ROWS && fgets(lines[n], sizeof lines[n], f) != NULL)
        lines[n][strcspn(lines[n], "\r\n")] = '\0', n++;
    fclose(f);
    uint64_t st = 99;
    for (int i = n - 1; i > 1; i--) { /* Fisher-Yates over the data rows 1..n-1 */
        int j = 1 + (int)(lcg(&st) % (uint64_t)i);
        char t[256];
        memcpy(t, lines[i], sizeof t), memcpy(lines[i], lines[j], sizeof t),
            memcpy(lines[j], t, sizeof t);
    }
    FILE *g = fopen(out, "w");
    if (g == NULL)
        return fprintf(stderr, "journey: %s: %s\n", out, strerror(errno)), 1;
    for (int i = 0; i < n; i++) {
        char *field[16];
        int k = 0;
        for (char *t = strtok(lines[i], ","); t != NULL && k < 16; t = strtok(NULL, ","))
            field[k++] = t;
        for (int j = k - 2; j >= 0; j--)
            fprintf(g, "%s,", field[j]);
        fprintf(g, "%s\n", field[k - 1]);
    }
    return fclose(g) == 0 ? 0 : 1;
}

static bool write_png(const char *path, const uint8_t *px)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return false;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    bool ok = info != NULL;
    if (ok && setjmp(png_jmpbuf(png)) == 0) {
        png_init_io(png, f);
        png_set_IHDR(png, info, IMG, IMG, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
        png_write_info(png, info);
        for (int y = 0; y < IMG; y++)
            png_write_row(png, px + y * IMG * 3);
        png_write_end(png, NULL);
    } else {
        ok = false;
    }
    png_destroy_write_struct(&png, &info);
    return fclose(f) == 0 && ok;
}

/* Three classes of 12x12 RGB images: "cross" (a plus), "frame" (a border), "spot" (a square off
 * the centre), with position jitter and noise.
 * The shapes are faint (5..8 levels darker than a background of 244..248, tinted per channel):
 * after the scale to 0..1 they differ by about 0.03, so a network that did not normalise its
 * input with the set's statistics would not tell them apart in a few epochs. */
static int make_images(const char *root)
{
    static const char *const classes[3] = {"cross", "frame", "spot"};
    char path[4200];
    uint8_t px[IMG * IMG * 3];
    uint64_t st = 5;
    mkdir(root, 0777);
    for (int c = 0; c < 3; c++) {
        snprintf(path, sizeof path, "%s/%s", root, classes[c]);
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return fprintf(stderr, "journey: %s: %s\n", path, strerror(errno)), 1;
        for (int i = 0; i < PER_CLASS; i++) {
            int dx = (int)(lcg(&st) % 3) - 1, dy = (int)(lcg(&st) % 3) - 1;
            int lo = 5 + (int)(lcg(&st) % 4);
            for (int y = 0; y < IMG; y++)
                for (int x = 0; x < IMG; x++) {
                    int u = x - dx, v = y - dy;
                    bool on = c == 0   ? (u == 5 || u == 6 || v == 5 || v == 6)
                              : c == 1 ? (u <= 1 || v <= 1 || u >= IMG - 2 || v >= IMG - 2)
                                       : (u >= 2 && u <= 5 && v >= 2 && v <= 5);
                    for (int ch = 0; ch < 3; ch++) {
                        int bg = 244 + ch + (int)(lcg(&st) % 3);
                        px[(y * IMG + x) * 3 + ch] = (uint8_t)(on ? bg - lo : bg);
                    }
                }
            snprintf(path, sizeof path, "%s/%s/%02d.png", root, classes[c], i);
            if (!write_png(path, px))
                return fprintf(stderr, "journey: %s: cannot write\n", path), 1;
        }
    }
    printf("wrote %s: 3 classes of %d PNGs\n", root, PER_CLASS);
    return 0;
}

/* ---------------------------------------------------------------- judging predictions */

/* "i: class k NAME (score)" per example, as `strix predict` prints them, and the accuracy
 * against labels (NULL: none) into *acc. */
static void print_classes(const sx_nn_model *m, const sx_tensor *pred, const int32_t *labels,
                          double *acc)
{
    int64_t n = pred->shape[0], k = pred->shape[1], correct = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t best = 0;
        for (int64_t j = 1; j < k; j++)
            if (sx_tensor_get(pred, i * k + j) > sx_tensor_get(pred, i * k + best))
                best = j;
        const char *name = sx_nn_model_class_name(m, best);
        printf("%lld: class %lld%s%s (%.6g)\n", (long long)i, (long long)best, name ? " " : "",
               name ? name : "", sx_tensor_get(pred, i * k + best));
        correct += labels != NULL && labels[i] == best;
    }
    *acc = (double)correct / (double)n;
}

/* Mean squared error and R^2 of (n, 1) predictions against targets. */
static void regression_error(const sx_tensor *pred, const double *y, double *mse, double *r2)
{
    int64_t n = pred->shape[0];
    double mean = 0, sse = 0, sst = 0;
    for (int64_t i = 0; i < n; i++)
        mean += y[i] / (double)n;
    for (int64_t i = 0; i < n; i++) {
        double d = sx_tensor_get(pred, i) - y[i];
        sse += d * d;
        sst += (y[i] - mean) * (y[i] - mean);
    }
    *mse = sse / (double)n;
    *r2 = 1 - sse / sst;
}

/* Predictions of model m (batch >= n) for raw x of any dtype: x cast to the model's dtype. */
static sx_status predict(sx_nn_model *m, const sx_tensor *x, sx_tensor **out)
{
    sx_tensor *xm = NULL;
    int64_t shape[SX_MAX_RANK + 1] = {x->shape[0]};
    int r = sx_nn_model_output_rank(m);
    memcpy(shape + 1, sx_nn_model_output_shape(m), (size_t)r * sizeof *shape);
    sx_status s = sx_tensor_new(sx_nn_model_dtype(m), x->rank, x->shape, &xm);
    if (s == SX_OK)
        s = sx_tensor_cast_out(x, xm);
    if (s == SX_OK)
        s = sx_tensor_new(sx_nn_model_dtype(m), r + 1, shape, out);
    if (s == SX_OK)
        s = sx_nn_model_predict(m, xm, *out);
    sx_tensor_free(xm);
    return s;
}

/* Whether two tensors hold the same bytes. */
static bool same_bits(const sx_tensor *a, const sx_tensor *b)
{
    return a->dtype == b->dtype && a->size == b->size &&
           memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)) == 0;
}

/* ---------------------------------------------------------------- training */

/* After a fit: the run's own evaluation of `src`, the in-process predictions of raw x (written
 * to pred_path and checked against sx_nn_predict_source), and the saved model. */
static sx_status finish_training(sx_nn_net *net, const sx_nn_fit_params *p, const sx_ds_source *src,
                                 const sx_tensor *x, const void *y, const char *model_path,
                                 const char *pred_path)
{
    double loss = NAN, metric = NAN, acc = NAN, mse = NAN, r2 = NAN;
    sx_nn_model *m = NULL;
    sx_tensor *pred = NULL, *ps = NULL;
    bool reg = sx_ds_source_spec(src)->classes == 0;
    SX_TRY(sx_nn_evaluate_source(net, src, p, &loss, &metric));
    sx_status s = sx_nn_compile_infer(net, x->shape[0], &m);
    if (s == SX_OK)
        s = predict(m, x, &pred);
    if (s == SX_OK)
        s = sx_nn_predict_source(net, src, p, &ps);
    if (s == SX_OK && !same_bits(pred, ps))
        s = sx_error(SX_E_STATE, "sx_nn_predict_source differs from sx_nn_model_predict");
    if (s == SX_OK)
        s = sx_ds_npy_write_tensor(pred_path, pred);
    if (s == SX_OK)
        s = sx_nn_save(net, model_path);
    if (s == SX_OK && reg) {
        regression_error(pred, y, &mse, &r2);
        printf("evaluate: loss=%.17g %s=%.17g\n", loss, sx_nn_metric_name(SX_METRIC_MSE), metric);
        printf("result: mse=%.17g r2=%.17g\n", mse, r2);
        /* the run's evaluation is in the targets' units too (computed in f32: not bit equal) */
        if (!(fabs(metric - mse) <= 1e-4 * mse))
            s = sx_error(SX_E_STATE, "evaluate's mse %.17g, the predictions' %.17g", metric, mse);
    } else if (s == SX_OK) {
        print_classes(m, pred, y, &acc);
        printf("evaluate: loss=%.17g accuracy=%.17g\n", loss, metric);
        printf("result: accuracy=%.17g\n", acc);
    }
    sx_tensor_free(ps);
    sx_tensor_free(pred);
    sx_nn_model_free(m);
    return s;
}

static sx_nn_fit_params fit_params(int epochs, int batch, double lr, bool reg)
{
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = epochs;
    p.train.batch = batch;
    p.train.loss = reg ? SX_LOSS_MSE : SX_LOSS_CROSS_ENTROPY;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.train.optim.lr = lr;
    p.train.verbose = 0;
    p.train.progress_every = 0;
    p.train_metric = false;
    return p;
}

/* The source's x as an (n, features) f64 tensor and y as i32 labels or f64 targets (owned). */
static sx_status source_rows(const sx_ds_source *src, sx_tensor **x, void **y)
{
    const sx_ds_spec *sp = sx_ds_source_spec(src);
    int64_t n = sx_ds_source_count(src), d = sx_ds_spec_x_size(sp);
    if (sp->x_type != SX_DS_F64 || sp->y_type != (sp->classes ? SX_DS_I32 : SX_DS_F64))
        return sx_error(SX_E_DTYPE, "journey: a CSV source of f64 x and i32 / f64 y expected");
    SX_TRY(sx_tensor_new(SX_F64, 2, (int64_t[]){n, d}, x));
    *y = malloc((size_t)n * 8);
    sx_status s = *y != NULL ? SX_OK : SX_E_NOMEM;
    for (int64_t i = 0; s == SX_OK && i < n; i++)
        s = sx_ds_source_get(src, i, (double *)(*x)->data + i * d,
                             (char *)*y + i * (sp->classes ? 4 : 8));
    return s;
}

static int train_csv(const char *csv, const char *model, const char *pred, bool reg)
{
    sx_ds_csv_params cp = sx_ds_csv_params_default();
    if (reg)
        cp.label = SX_DS_LABEL_TARGET, cp.label_name = "y";
    sx_ds_source *src = NULL;
    sx_nn_net *net = NULL;
    sx_tensor *x = NULL;
    void *y = NULL;
    sx_status s = sx_ds_csv_load(csv, &cp, &src);
    if (s == SX_OK)
        s = source_rows(src, &x, &y);
    const sx_ds_spec *sp = s == SX_OK ? sx_ds_source_spec(src) : NULL;
    if (s == SX_OK)
        s = sx_nn_net_new("journey_mlp", SX_F32, 7, &net);
    if (s == SX_OK) {
        sx_nn_layer *l = sx_nn_input(net, 1, (int64_t[]){sx_ds_spec_x_size(sp)});
        l = sx_nn_linear(net, l, 16, SX_ACT_RELU);
        l = sx_nn_linear(net, l, reg ? 1 : sp->classes, reg ? SX_ACT_NONE : SX_ACT_SOFTMAX);
        s = sx_nn_net_status(net);
    }
    sx_nn_fit_params p = fit_params(reg ? 40 : 15, 32, 0.01, reg);
    p.standardize = true;
    p.standardize_targets = reg;
    if (s == SX_OK)
        s = sx_nn_fit(net, &p, src, NULL, NULL);
    if (s == SX_OK)
        s = finish_training(net, &p, src, x, y, model, pred);
    free(y);
    sx_tensor_free(x);
    sx_nn_net_free(net);
    sx_ds_source_free(src);
    return s == SX_OK ? 0 : fail(csv);
}

/* The set's pixels as a (n, h, w, c) f32 tensor of the raw bytes 0..255. */
static sx_status raw_pixels(const sx_ds_images *set, sx_tensor **x)
{
    int64_t n = set->n, e = set->h * set->w * set->c;
    SX_TRY(sx_tensor_new(SX_F32, 4, (int64_t[]){n, set->h, set->w, set->c}, x));
    for (int64_t i = 0; i < n * e; i++)
        SX_F32P(*x)[i] = (float)set->pixels[i];
    return SX_OK;
}

static int32_t *labels_of(const sx_ds_images *set)
{
    int32_t *l = malloc((size_t)set->n * sizeof *l);
    for (int64_t i = 0; l != NULL && i < set->n; i++)
        l[i] = set->labels != NULL ? set->labels[i] : set->labels32[i];
    return l;
}

/* input 12x12x3 -> conv 3x3 8 relu -> max pool 2 -> flatten -> linear (classes, softmax);
 * normalisation (the set's channel statistics) and crop / flip augmentation from p.augment. */
static int train_images(const char *dir, const char *model, const char *pred, const char *xpath)
{
    sx_ds_image_folder_params fp = sx_ds_image_folder_params_default();
    fp.h = fp.w = IMG;
    sx_ds_images *set = NULL;
    sx_ds_source *src = NULL;
    sx_ds_stats *st = NULL;
    sx_nn_net *net = NULL;
    sx_tensor *x = NULL;
    int32_t *labels = NULL;
    sx_status s = sx_ds_image_folder_load(dir, &fp, &set);
    if (s == SX_OK)
        s = sx_ds_source_images(set, &src);
    if (s == SX_OK)
        s = sx_ds_stats_compute(src, set->c, &st);
    if (s == SX_OK)
        s = sx_nn_net_new("journey_cnn", SX_F32, 3, &net);
    if (s == SX_OK) {
        sx_nn_layer *l = sx_nn_input(net, 3, (int64_t[]){IMG, IMG, 3});
        sx_nn_conv2d_params conv = sx_nn_conv2d_params_default(8, 3, 3);
        conv.conv.padding = SX_PAD_SAME;
        conv.act = SX_ACT_RELU;
        l = sx_nn_conv2d(net, l, &conv);
        sx_nn_pool2d_params pool = sx_nn_pool2d_params_default(2, 2);
        l = sx_nn_flatten(net, sx_nn_max_pool2d(net, l, &pool));
        l = sx_nn_linear(net, l, set->classes, SX_ACT_SOFTMAX);
        s = sx_nn_net_status(net);
    }
    sx_nn_fit_params p = fit_params(12, 8, 0.01, false);
    if (st != NULL)
        p.augment = (sx_ds_augment){.crop_pad = 1, .flip = true, .mean = st->mean, .std = st->std};
    if (s == SX_OK)
        s = sx_nn_fit(net, &p, src, NULL, NULL);
    if (s == SX_OK)
        s = raw_pixels(set, &x);
    if (s == SX_OK)
        s = sx_ds_npy_write(xpath, SX_DS_NPY_U8, 4, x->shape, set->pixels);
    if (s == SX_OK && (labels = labels_of(set)) == NULL)
        s = SX_E_NOMEM;
    if (s == SX_OK)
        s = finish_training(net, &p, src, x, labels, model, pred);
    free(labels);
    sx_tensor_free(x);
    sx_nn_net_free(net);
    sx_ds_stats_free(st);
    sx_ds_source_free(src);
    sx_ds_images_free(set);
    return s == SX_OK ? 0 : fail(dir);
}

/* ---------------------------------------------------------------- prediction */

/* The file's labels, numbered as a user's default CSV load numbers them (sorted), checked to be
 * the model's class names in the model's order. */
static sx_status csv_labels(const char *path, const sx_nn_model *m, bool reg, void **y)
{
    sx_ds_csv_params cp = sx_ds_csv_params_default();
    if (reg)
        cp.label = SX_DS_LABEL_TARGET, cp.label_name = "y";
    sx_ds_source *src = NULL;
    sx_tensor *x = NULL;
    SX_TRY(sx_ds_csv_load(path, &cp, &src));
    sx_status s = source_rows(src, &x, y);
    int64_t k = sx_ds_source_spec(src)->classes;
    for (int64_t c = 0; s == SX_OK && c < k; c++) {
        const char *a = sx_ds_source_class_name(src, c), *b = sx_nn_model_class_name(m, c);
        if (b == NULL || strcmp(a, b) != 0)
            s = sx_error(SX_E_STATE, "%s: class %lld is '%s', the model's '%s'", path, (long long)c,
                         a, b ? b : "(none)");
    }
    sx_tensor_free(x);
    sx_ds_source_free(src);
    return s;
}

static int predict_csv(const char *model, const char *csv, const char *pred, bool reg,
                       const char *xpath)
{
    sx_nn_model *m = NULL;
    sx_tensor *x = NULL, *out = NULL;
    void *y = NULL;
    /* the features by the model's names, in the model's order, whatever the file's order */
    sx_nn_model *probe = NULL;
    sx_status s = sx_nn_load(model, 1, &probe);
    sx_nn_preprocess pp = sx_nn_model_preprocess(probe);
    if (s == SX_OK && pp.n_features == 0)
        s = sx_error(SX_E_STATE, "%s: the model has no feature names", model);
    if (s == SX_OK)
        s = sx_ds_csv_read_x(csv, NULL, pp.feature_names, pp.n_features, &x);
    if (s == SX_OK)
        s = sx_nn_load(model, x->shape[0], &m);
    if (s == SX_OK)
        s = predict(m, x, &out);
    if (s == SX_OK)
        s = sx_ds_npy_write_tensor(pred, out);
    if (s == SX_OK && xpath != NULL)
        s = sx_ds_npy_write_tensor(xpath, x);
    if (s == SX_OK)
        s = csv_labels(csv, m, reg, &y);
    double acc = NAN, mse = NAN, r2 = NAN;
    if (s == SX_OK && reg) {
        regression_error(out, y, &mse, &r2);
        printf("result: mse=%.17g r2=%.17g\n", mse, r2);
    } else if (s == SX_OK) {
        print_classes(m, out, y, &acc);
        printf("result: accuracy=%.17g\n", acc);
    }
    free(y);
    sx_tensor_free(out);
    sx_tensor_free(x);
    sx_nn_model_free(m);
    sx_nn_model_free(probe);
    return s == SX_OK ? 0 : fail(csv);
}

/* The folder read at the model's input size and resize mode, as a user would read new images. */
static int predict_images(const char *model, const char *dir, const char *pred)
{
    sx_nn_model *m = NULL;
    sx_ds_images *set = NULL;
    sx_tensor *x = NULL, *out = NULL;
    int32_t *labels = NULL;
    sx_status s = sx_nn_load(model, 64, &m);
    const int64_t *is = sx_nn_model_input_shape(m);
    if (s == SX_OK && sx_nn_model_input_rank(m) != 3)
        s = sx_error(SX_E_SHAPE, "%s: not an (h, w, c) image model", model);
    sx_ds_image_folder_params fp = sx_ds_image_folder_params_default();
    if (s == SX_OK) {
        fp.h = is[0], fp.w = is[1], fp.c = is[2];
        fp.resize = sx_nn_model_preprocess(m).resize;
        s = sx_ds_image_folder_load(dir, &fp, &set);
    }
    for (int64_t c = 0; s == SX_OK && c < set->classes; c++) {
        const char *b = sx_nn_model_class_name(m, c);
        if (b == NULL || strcmp(set->class_names[c], b) != 0)
            s = sx_error(SX_E_STATE, "%s: class %lld is '%s', the model's '%s'", dir, (long long)c,
                         set->class_names[c], b ? b : "(none)");
    }
    if (s == SX_OK)
        s = raw_pixels(set, &x);
    if (s == SX_OK)
        s = predict(m, x, &out);
    if (s == SX_OK)
        s = sx_ds_npy_write_tensor(pred, out);
    if (s == SX_OK && (labels = labels_of(set)) == NULL)
        s = SX_E_NOMEM;
    double acc = NAN;
    if (s == SX_OK) {
        print_classes(m, out, labels, &acc);
        printf("result: accuracy=%.17g\n", acc);
    }
    free(labels);
    sx_tensor_free(out);
    sx_tensor_free(x);
    sx_ds_images_free(set);
    sx_nn_model_free(m);
    return s == SX_OK ? 0 : fail(dir);
}

static int usage(void)
{
    fprintf(stderr,
            "usage: journey make-csv classes|regression PATH\n"
            "       journey shuffle-csv IN OUT\n"
            "       journey make-images DIR\n"
            "       journey train-csv TRAIN.csv MODEL PRED.npy [--regression]\n"
            "       journey predict-csv MODEL FILE.csv PRED.npy [--regression] [--x X.npy]\n"
            "       journey train-images DIR MODEL PRED.npy X.npy\n"
            "       journey predict-images MODEL DIR PRED.npy\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    bool reg = false;
    const char *xpath = NULL;
    for (int i = 5; i < argc; i++) {
        if (strcmp(argv[i], "--regression") == 0)
            reg = true;
        else if (strcmp(argv[i], "--x") == 0 && i + 1 < argc)
            xpath = argv[++i];
        else if (strcmp(cmd, "train-images") != 0)
            return usage();
    }
    if (strcmp(cmd, "make-csv") == 0 && argc == 4)
        return make_csv(argv[2], argv[3]);
    if (strcmp(cmd, "shuffle-csv") == 0 && argc == 4)
        return shuffle_csv(argv[2], argv[3]);
    if (strcmp(cmd, "make-images") == 0 && argc == 3)
        return make_images(argv[2]);
    if (strcmp(cmd, "train-csv") == 0 && argc >= 5)
        return train_csv(argv[2], argv[3], argv[4], reg);
    if (strcmp(cmd, "predict-csv") == 0 && argc >= 5)
        return predict_csv(argv[2], argv[3], argv[4], reg, xpath);
    if (strcmp(cmd, "train-images") == 0 && argc == 6)
        return train_images(argv[2], argv[3], argv[4], argv[5]);
    if (strcmp(cmd, "predict-images") == 0 && argc == 5)
        return predict_images(argv[2], argv[3], argv[4]);
    return usage();
}
