/* csv_train: train a small MLP on a CSV file: the label column chosen by index or by name, the
 * features standardised with the training split's statistics, a validation split, early
 * stopping with the best weights restored, per-epoch metrics printed, the history written as
 * CSV or JSON lines and drawn as an SVG plot; then a separate test file judged and the model
 * saved.
 *
 *   csv_train --csv FILE [--label-column N | --label NAME] [--skip-lines K]
 *             [--header | --no-header] [--task classify|regress] [--val-fraction F]
 *             [--epochs E] [--hidden UNITS,...] [--batch B] [--lr X] [--patience P] [--seed S]
 *             [--history FILE.csv|FILE.jsonl] [--plot FILE.svg] [--test FILE] [--save PATH]
 *             [--quiet]
 *   csv_train --make-demo classes|regression PATH   (writes a small table to try it on)
 *
 * --label-column N: the label's column from 0; negative counts from the end (-1, the default,
 * is the last). --skip-lines K: lines skipped before the table (e.g. scikit-learn's first line
 * of counts). Whether the first line read is a header is guessed (a header when a field that
 * is not the label's is not a number) unless --header or --no-header says. --hidden 32,16: two
 * hidden ReLU layers. classify (the default): the label column's values are the classes;
 * cross-entropy, the validation accuracy watched. regress: the label is a number; MSE, the
 * validation MSE watched. One line per epoch, then the last line:
 *   result: val_accuracy=A epochs=E best_epoch=B stopped_early=0|1
 *   result: val_mse=M val_r2=R epochs=E best_epoch=B stopped_early=0|1
 * (R^2 = 1 - SSE / SST of the best weights' predictions on the validation split).
 * --test FILE: a table of the same columns, read with the training file's list of classes (so
 * that a class gets the number it had in training, whatever classes the test file holds and in
 * whatever order; a class the training file lacks is an error naming its line), standardised
 * with the training split's statistics; after the result line:
 *   test: loss=L accuracy=A examples=N      (mse=M for regress)
 * --save PATH: the trained network (best weights) written with sx_nn_save, then
 *   saved model to PATH
 * The saved model takes standardised features: (x - mean) / std of the training split. */
#include <sx_nn.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HIDDEN 8

typedef struct options {
    const char *path, *label, *history, *plot, *test, *save;
    bool regression, quiet;
    int header; /* -1 guess, 0 no, 1 yes */
    long label_column, skip_lines, epochs, batch, patience, seed;
    long hidden[MAX_HIDDEN];
    int n_hidden;
    double lr, val;
} options;

static int usage(void)
{
    fprintf(stderr,
            "usage: csv_train --csv FILE [--label-column N | --label NAME] [--skip-lines K]\n"
            "                 [--header | --no-header] [--task classify|regress]\n"
            "                 [--val-fraction F] [--epochs E] [--hidden UNITS,...] [--batch B]\n"
            "                 [--lr X] [--patience P] [--seed S] [--history FILE.csv|.jsonl]\n"
            "                 [--plot FILE.svg] [--test FILE] [--save PATH] [--quiet]\n"
            "       csv_train --make-demo classes|regression PATH\n");
    return 2;
}

/* A demo table of 400 rows: features x1, x2, x3 uniform in [-2, 2] (x3 is noise); "class" is
 * "left" or "right" of the line x1 + 2 x2 = 0.5, or "y" = 3 x1 - 2 x2 + 1 (plus a little
 * noise) for regression. The generator is a fixed LCG: the same file on every machine. */
static int make_demo(const char *kind, const char *path)
{
    bool reg = strcmp(kind, "regression") == 0;
    if (!reg && strcmp(kind, "classes") != 0)
        return usage();
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "csv_train: %s: %s\n", path, strerror(errno));
        return 1;
    }
    uint64_t st = 12345;
    fprintf(f, "x1,%s,x2,x3\n", reg ? "y" : "class");
    for (int i = 0; i < 400; i++) {
        double v[4];
        for (int k = 0; k < 4; k++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            v[k] = 4.0 * (double)(st >> 11) / 9007199254740992.0 - 2.0;
        }
        if (reg)
            fprintf(f, "%.6f,%.6f,%.6f,%.6f\n", v[0], 3 * v[0] - 2 * v[1] + 1 + 0.01 * v[3], v[1],
                    v[2]);
        else
            fprintf(f, "%.6f,%s,%.6f,%.6f\n", v[0], v[0] + 2 * v[1] > 0.5 ? "right" : "left", v[1],
                    v[2]);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "csv_train: %s: write failed\n", path);
        return 1;
    }
    printf("wrote %s (400 rows)\n", path);
    return 0;
}

/* "32,16" into o->hidden. */
static bool parse_hidden(const char *v, options *o)
{
    o->n_hidden = 0;
    while (*v != '\0') {
        char *end = NULL;
        long u = strtol(v, &end, 10);
        if (end == v || u < 1 || u > 1000000 || o->n_hidden == MAX_HIDDEN ||
            (*end != ',' && *end != '\0'))
            return false;
        o->hidden[o->n_hidden++] = u;
        v = *end == ',' ? end + 1 : end;
    }
    return o->n_hidden > 0;
}

static bool parse_args(int argc, char **argv, options *o)
{
    *o = (options){.header = -1,
                   .label_column = -1,
                   .hidden = {16},
                   .n_hidden = 1,
                   .epochs = 200,
                   .batch = 32,
                   .patience = 10,
                   .seed = 1,
                   .lr = 0.01,
                   .val = 0.2};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        long *num = NULL;
        if (strcmp(a, "--quiet") == 0) {
            o->quiet = true;
            continue;
        }
        if (strcmp(a, "--header") == 0 || strcmp(a, "--no-header") == 0) {
            o->header = a[2] == 'h';
            continue;
        }
        if (v == NULL)
            return false;
        i++;
        if (strcmp(a, "--csv") == 0)
            o->path = v;
        else if (strcmp(a, "--label") == 0)
            o->label = v;
        else if (strcmp(a, "--history") == 0)
            o->history = v;
        else if (strcmp(a, "--plot") == 0)
            o->plot = v;
        else if (strcmp(a, "--test") == 0)
            o->test = v;
        else if (strcmp(a, "--save") == 0)
            o->save = v;
        else if (strcmp(a, "--task") == 0 && strcmp(v, "classify") == 0)
            o->regression = false;
        else if (strcmp(a, "--task") == 0 && strcmp(v, "regress") == 0)
            o->regression = true;
        else if (strcmp(a, "--hidden") == 0) {
            if (!parse_hidden(v, o))
                return false;
        } else if (strcmp(a, "--lr") == 0 || strcmp(a, "--val-fraction") == 0) {
            *(a[2] == 'l' ? &o->lr : &o->val) = strtod(v, &end);
            if (*end != '\0' || end == v)
                return false;
        } else if (strcmp(a, "--label-column") == 0)
            num = &o->label_column;
        else if (strcmp(a, "--skip-lines") == 0)
            num = &o->skip_lines;
        else if (strcmp(a, "--epochs") == 0)
            num = &o->epochs;
        else if (strcmp(a, "--batch") == 0)
            num = &o->batch;
        else if (strcmp(a, "--patience") == 0)
            num = &o->patience;
        else if (strcmp(a, "--seed") == 0)
            num = &o->seed;
        else
            return false;
        if (num != NULL) {
            *num = strtol(v, &end, 10);
            if (*end != '\0' || end == v)
                return false;
        }
    }
    return o->path != NULL && o->skip_lines >= 0 && o->epochs >= 1 && o->epochs <= 1000000 &&
           o->batch >= 1 && o->batch <= 1000000 && o->patience >= 0 && o->patience <= 1000000 &&
           o->val > 0 && o->val < 1;
}

/* Whether the first line after the skipped ones is a header: a field other than the label's
 * that is not a number. Commas inside quotes are not split here: a quoted field is text. */
static bool guess_header(const options *o)
{
    FILE *f = fopen(o->path, "r");
    if (f == NULL)
        return true; /* the loader reports the file */
    char line[65536];
    bool got = false;
    for (long k = 0; k <= o->skip_lines; k++)
        got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!got)
        return true;
    line[strcspn(line, "\r\n")] = '\0';
    int n = 1, at = 0;
    for (const char *c = line; *c != '\0'; c++)
        n += *c == ',';
    long label = o->label_column < 0 ? n + o->label_column : o->label_column;
    for (char *tok = line, *next = NULL; tok != NULL; tok = next, at++) {
        next = strchr(tok, ',');
        if (next != NULL)
            *next++ = '\0';
        char *end = NULL;
        strtod(tok, &end);
        while (end != NULL && (*end == ' ' || *end == '\t'))
            end++;
        if (at != label && (end == tok || *end != '\0'))
            return true;
    }
    return false;
}

/* input (features) -> linear (hidden, relu) ... -> linear (outputs; softmax for classes). */
static sx_status build_net(const options *o, int64_t features, int64_t outputs, sx_nn_net **out)
{
    SX_TRY(sx_nn_net_new("csv_mlp", SX_F32, (uint64_t)o->seed, out));
    sx_nn_layer *x = sx_nn_input(*out, 1, (int64_t[]){features});
    for (int i = 0; i < o->n_hidden; i++)
        x = sx_nn_linear(*out, x, o->hidden[i], SX_ACT_RELU);
    x = sx_nn_linear(*out, x, outputs, o->regression ? SX_ACT_NONE : SX_ACT_SOFTMAX);
    return sx_nn_net_status(*out);
}

/* R^2 of the network's predictions on the validation split: 1 - SSE / SST, over every target. */
static sx_status r_squared(sx_nn_net *net, const sx_nn_fit_params *p, const sx_ds_source *vas,
                           double *r2)
{
    sx_tensor *pred = NULL;
    SX_TRY(sx_nn_predict_source(net, vas, p, &pred));
    int64_t n = sx_ds_source_count(vas), k = sx_ds_spec_y_size(sx_ds_source_spec(vas));
    double *y = malloc((size_t)(n * k) * sizeof *y), mean = 0, sse = 0, sst = 0;
    sx_status s = y != NULL ? SX_OK : SX_E_NOMEM;
    for (int64_t i = 0; s == SX_OK && i < n; i++) /* the targets are f64 (a CSV target) */
        s = sx_ds_source_get(vas, i, NULL, y + i * k);
    for (int64_t i = 0; s == SX_OK && i < n * k; i++)
        mean += y[i] / (double)(n * k);
    for (int64_t i = 0; s == SX_OK && i < n * k; i++) {
        double d = sx_tensor_get(pred, i) - y[i];
        sse += d * d;
        sst += (y[i] - mean) * (y[i] - mean);
    }
    *r2 = sst > 0 ? 1 - sse / sst : (double)NAN;
    free(y);
    sx_tensor_free(pred);
    return s;
}

/* The per-epoch lines, the history file and plot, and the result line. */
static sx_status report(const options *o, sx_nn_net *net, const sx_nn_fit_params *p,
                        const sx_ds_source *vas, const sx_nn_history *h)
{
    const char *m = sx_nn_metric_name(h->metric);
    for (int64_t i = 0; i < h->n; i++) {
        const sx_nn_epoch *r = &h->rows[i];
        printf("epoch %lld: train_loss=%.5f train_%s=%.5f val_loss=%.5f val_%s=%.5f\n",
               (long long)r->epoch, r->train_loss, m, r->train_metric, r->val_loss, m,
               r->val_metric);
    }
    if (o->history != NULL) {
        size_t n = strlen(o->history);
        bool json = n > 6 && strcmp(o->history + n - 6, ".jsonl") == 0;
        SX_TRY(json ? sx_nn_history_write_jsonl(h, o->history)
                    : sx_nn_history_write_csv(h, o->history));
    }
    if (o->plot != NULL)
        SX_TRY(sx_nn_history_write_svg(h, o->plot, o->path));
    double best = NAN;
    for (int64_t i = 0; i < h->n; i++) /* the best epoch's row: its weights are restored */
        if (h->rows[i].epoch == h->best_epoch)
            best = h->rows[i].val_metric;
    if (o->regression) {
        double r2 = NAN;
        SX_TRY(r_squared(net, p, vas, &r2));
        printf("result: val_mse=%.6g val_r2=%.6f", best, r2);
    } else {
        printf("result: val_accuracy=%.6f", best);
    }
    printf(" epochs=%lld best_epoch=%lld stopped_early=%d\n", (long long)h->rows[h->n - 1].epoch,
           (long long)h->best_epoch, (int)h->stopped_early);
    return SX_OK;
}

/* The test file's loss and metric (the one the fit watched): raw features, standardised by
 * the network itself with the training split's statistics. */
static sx_status judge_test(sx_nn_net *net, const sx_nn_fit_params *p, const sx_ds_source *test,
                            sx_nn_metric metric)
{
    sx_nn_fit_params q = *p;
    q.metric = metric;
    double loss = NAN, value = NAN;
    SX_TRY(sx_nn_evaluate_source(net, test, &q, &loss, &value));
    printf("test: loss=%.6f %s=%.6f examples=%lld\n", loss, sx_nn_metric_name(metric), value,
           (long long)sx_ds_source_count(test));
    return SX_OK;
}

/* Train on all (split into training and validation), report, judge test (may be NULL), save.
 * The network standardises its features (and a regression its targets) with the training
 * split's statistics (p.standardize, p.standardize_targets): they are part of it, so the saved
 * model takes raw rows and answers in the targets' units. */
static sx_status train(const options *o, const sx_ds_source *all, const sx_ds_source *test)
{
    sx_ds_source *tr = NULL, *va = NULL;
    sx_nn_net *net = NULL;
    sx_nn_history h = {0};
    const sx_ds_spec *sp = sx_ds_source_spec(all);
    int64_t outputs = sp->classes > 0 ? sp->classes : sx_ds_spec_y_size(sp);
    sx_status s = sx_ds_split(all, o->val, (uint64_t)o->seed, &tr, &va);
    if (s == SX_OK)
        s = build_net(o, sx_ds_spec_x_size(sp), outputs, &net);
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = (int)o->epochs;
    p.train.batch = (int)o->batch;
    p.train.loss = o->regression ? SX_LOSS_MSE : SX_LOSS_CROSS_ENTROPY;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.train.optim.lr = o->lr;
    p.train.verbose = o->quiet ? 0 : 1;
    p.train.progress_every = 0;
    p.patience = (int)o->patience;
    p.standardize = true;
    p.standardize_targets = o->regression;
    if (s == SX_OK) {
        if (!o->quiet)
            sx_nn_net_print(net, stderr);
        s = sx_nn_fit(net, &p, tr, va, &h);
    }
    if (s == SX_OK)
        s = report(o, net, &p, va, &h);
    if (s == SX_OK && test != NULL)
        s = judge_test(net, &p, test, h.metric);
    if (s == SX_OK && o->save != NULL && (s = sx_nn_save(net, o->save)) == SX_OK)
        printf("saved model to %s\n", o->save);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_source_free(va);
    sx_ds_source_free(tr);
    return s;
}

/* The --test file, read as the training file was, with the training file's class list: a
 * class gets the number it has in `all`. */
static sx_status load_test(const options *o, const sx_ds_csv_params *cp, const sx_ds_source *all,
                           sx_ds_source **test)
{
    sx_ds_csv_params tp = *cp;
    int64_t k = sx_ds_source_spec(all)->classes; /* 0 for a regression target */
    const char **names = k > 0 ? malloc((size_t)k * sizeof *names) : NULL;
    if (k > 0 && names == NULL)
        return sx_error(SX_E_NOMEM, "csv_train: out of memory");
    for (int64_t i = 0; i < k; i++)
        names[i] = sx_ds_source_class_name(all, i);
    tp.classes = names;
    tp.n_classes = k;
    sx_status s = sx_ds_csv_load(o->test, &tp, test);
    free(names);
    if (s != SX_OK)
        return s;
    int64_t dt = sx_ds_spec_x_size(sx_ds_source_spec(*test));
    int64_t d = sx_ds_spec_x_size(sx_ds_source_spec(all));
    if (dt != d) {
        s = sx_error(SX_E_SHAPE, "%s: %lld features, but %lld in the training file %s", o->test,
                     (long long)dt, (long long)d, o->path);
        sx_ds_source_free(*test);
        *test = NULL;
    }
    return s;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--make-demo") == 0)
        return make_demo(argv[2], argv[3]);
    options o;
    if (!parse_args(argc, argv, &o))
        return usage();
    sx_ds_csv_params cp = sx_ds_csv_params_default();
    cp.skip_lines = o.skip_lines;
    cp.header = o.label != NULL || (o.header < 0 ? guess_header(&o) : o.header == 1);
    cp.label_name = o.label;
    cp.label_column = o.label_column;
    cp.label = o.regression ? SX_DS_LABEL_TARGET : SX_DS_LABEL_SORTED;
    sx_ds_source *all = NULL, *test = NULL;
    sx_status s = sx_ds_csv_load(o.path, &cp, &all);
    if (s == SX_OK && o.test != NULL) /* read before training: a bad test file fails at once */
        s = load_test(&o, &cp, all, &test);
    if (s == SX_OK)
        s = train(&o, all, test);
    sx_ds_source_free(test);
    sx_ds_source_free(all);
    if (s != SX_OK) {
        fprintf(stderr, "csv_train: %s\n", sx_last_error());
        return 1;
    }
    return 0;
}
