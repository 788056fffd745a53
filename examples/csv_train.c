/* csv_train: train a small MLP on a CSV file: the label column chosen by name, the features
 * standardised with the training split's statistics, a validation split, early stopping with
 * the best weights restored, and the per-epoch history written as CSV.
 *
 *   csv_train FILE --label NAME [--regression] [--hidden N] [--epochs N] [--batch B] [--lr X]
 *             [--val F] [--patience P] [--seed S] [--history PATH] [--quiet]
 *   csv_train --make-demo classes|regression PATH   (writes a small table to try it on)
 *
 * Classification (the default): the label column's texts are the classes; cross-entropy, the
 * validation accuracy watched. --regression: the label column is a number; MSE, the validation
 * MSE watched. Ends with one line:
 *   result: epochs=E best_epoch=B val_<metric>=M stopped_early=0|1 */
#include <sx_nn.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct options {
    const char *path, *label, *history;
    bool regression, quiet;
    long hidden, epochs, batch, patience, seed;
    double lr, val;
} options;

static int usage(void)
{
    fprintf(stderr, "usage: csv_train FILE --label NAME [--regression] [--hidden N] [--epochs N] "
                    "[--batch B] [--lr X] [--val F] [--patience P] [--seed S] [--history PATH] "
                    "[--quiet]\n       csv_train --make-demo classes|regression PATH\n");
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

static bool parse_args(int argc, char **argv, options *o)
{
    *o = (options){.hidden = 16,
                   .epochs = 200,
                   .batch = 32,
                   .patience = 10,
                   .seed = 1,
                   .lr = 0.01,
                   .val = 0.2};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        bool takes = true;
        if (strcmp(a, "--regression") == 0 || strcmp(a, "--quiet") == 0) {
            takes = false;
            *(a[2] == 'r' ? &o->regression : &o->quiet) = true;
        } else if (v == NULL && a[0] == '-') {
            return false;
        } else if (strcmp(a, "--label") == 0) {
            o->label = v;
        } else if (strcmp(a, "--history") == 0) {
            o->history = v;
        } else if (strcmp(a, "--lr") == 0 || strcmp(a, "--val") == 0) {
            *(a[2] == 'l' ? &o->lr : &o->val) = strtod(v, &end);
        } else if (strcmp(a, "--hidden") == 0 || strcmp(a, "--epochs") == 0 ||
                   strcmp(a, "--batch") == 0 || strcmp(a, "--patience") == 0 ||
                   strcmp(a, "--seed") == 0) {
            long *dst = a[2] == 'h'   ? &o->hidden
                        : a[2] == 'e' ? &o->epochs
                        : a[2] == 'b' ? &o->batch
                        : a[2] == 'p' ? &o->patience
                                      : &o->seed;
            *dst = strtol(v, &end, 10);
        } else if (a[0] != '-' && o->path == NULL) {
            o->path = a;
            takes = false;
        } else {
            return false;
        }
        if (takes && end != NULL && (*end != '\0' || end == v))
            return false;
        i += takes;
    }
    return o->path != NULL && o->label != NULL && o->hidden >= 1 && o->epochs >= 1 &&
           o->epochs <= 1000000 && o->batch >= 1 && o->batch <= 1000000 && o->patience >= 0 &&
           o->patience <= 1000000;
}

/* input (features) -> linear (hidden, relu) -> linear (outputs; softmax for classes). */
static sx_status build_net(const options *o, int64_t features, int64_t outputs, sx_nn_net **out)
{
    SX_TRY(sx_nn_net_new("csv_mlp", SX_F32, (uint64_t)o->seed, out));
    sx_nn_layer *x = sx_nn_input(*out, 1, (int64_t[]){features});
    x = sx_nn_linear(*out, x, o->hidden, SX_ACT_RELU);
    x = sx_nn_linear(*out, x, outputs, o->regression ? SX_ACT_NONE : SX_ACT_SOFTMAX);
    return sx_nn_net_status(*out);
}

static sx_status train(const options *o, const sx_ds_source *all)
{
    sx_ds_source *tr = NULL, *va = NULL, *trs = NULL, *vas = NULL;
    sx_ds_stats *st = NULL;
    sx_nn_net *net = NULL;
    sx_nn_history h = {0};
    const sx_ds_spec *sp = sx_ds_source_spec(all);
    int64_t outputs = sp->classes > 0 ? sp->classes : sx_ds_spec_y_size(sp);
    sx_status s = sx_ds_split(all, o->val, (uint64_t)o->seed, &tr, &va);
    if (s == SX_OK) /* the statistics of the training split only, applied to both */
        s = sx_ds_stats_compute(tr, 0, &st);
    if (s == SX_OK)
        s = sx_ds_source_standardize(tr, st, &trs);
    if (s == SX_OK)
        s = sx_ds_source_standardize(va, st, &vas);
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
    if (s == SX_OK) {
        if (!o->quiet)
            sx_nn_net_print(net, stderr);
        s = sx_nn_fit(net, &p, trs, vas, &h);
    }
    if (s == SX_OK && o->history != NULL)
        s = sx_nn_history_write_csv(&h, o->history);
    for (int64_t i = 0; s == SX_OK && i < h.n; i++) /* the best epoch's row */
        if (h.rows[i].epoch == h.best_epoch)
            printf("result: epochs=%lld best_epoch=%lld val_%s=%.6g stopped_early=%d\n",
                   (long long)h.rows[h.n - 1].epoch, (long long)h.best_epoch,
                   sx_nn_metric_name(h.metric), h.rows[i].val_metric, (int)h.stopped_early);
    sx_nn_history_free(&h);
    sx_nn_net_free(net);
    sx_ds_source_free(vas);
    sx_ds_source_free(trs);
    sx_ds_stats_free(st);
    sx_ds_source_free(va);
    sx_ds_source_free(tr);
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
    cp.label_name = o.label;
    cp.label = o.regression ? SX_DS_LABEL_TARGET : SX_DS_LABEL_SORTED;
    sx_ds_source *all = NULL;
    sx_status s = sx_ds_csv_load(o.path, &cp, &all);
    if (s == SX_OK)
        s = train(&o, all);
    sx_ds_source_free(all);
    if (s != SX_OK) {
        fprintf(stderr, "csv_train: %s\n", sx_last_error());
        return 1;
    }
    return 0;
}
