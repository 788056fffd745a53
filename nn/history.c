/* history.c: a fit's history as files: CSV (a header, then one row per epoch) and JSON lines
 * (one object per epoch, null where a value is missing), written whole or appended row by row
 * as the epochs end, so a file being followed (tail -f) or a run that crashes keeps every epoch
 * done; and the metrics' names its columns (and fit's messages) use. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *sx_nn_metric_name(sx_nn_metric m)
{
    static const char *names[] = {"auto",  "accuracy",       "mse", "mae", "loss",
                                  "top_k", "binary_accuracy"};
    return (unsigned)m <= SX_METRIC_BINARY_ACCURACY ? names[m] : "?";
}

static bool json_path(const char *path)
{
    size_t n = strlen(path);
    return (n >= 6 && strcmp(path + n - 6, ".jsonl") == 0) ||
           (n >= 5 && strcmp(path + n - 5, ".json") == 0);
}

static void csv_header(FILE *fp, const sx_nn_history *h)
{
    const char *m = sx_nn_metric_name(h->metric);
    fprintf(fp, "epoch,train_loss,val_loss,val_%s,seconds,train_%s,lr", m, m);
    for (int k = 0; k < h->n_heads; k++)
        fprintf(fp, ",val_loss_%s", h->head_names[k]);
    for (int k = 0; k < h->n_heads; k++)
        fprintf(fp, ",val_%s_%s", sx_nn_metric_name(h->head_metric[k]), h->head_names[k]);
    fputc('\n', fp);
}

static void csv_row(FILE *fp, const sx_nn_history *h, const sx_nn_epoch *r)
{
    fprintf(fp, "%lld,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g", (long long)r->epoch, r->train_loss,
            r->val_loss, r->val_metric, r->seconds, r->train_metric, r->lr);
    for (int k = 0; k < h->n_heads; k++)
        fprintf(fp, ",%.17g", r->val_head_loss[k]);
    for (int k = 0; k < h->n_heads; k++)
        fprintf(fp, ",%.17g", r->val_head_metric[k]);
    fputc('\n', fp);
}

/* A JSON number, or null for NAN and infinities (JSON has neither). */
static void json_num(FILE *fp, const char *key, double v, bool comma)
{
    if (isfinite(v))
        fprintf(fp, "\"%s\":%.17g%s", key, v, comma ? "," : "");
    else
        fprintf(fp, "\"%s\":null%s", key, comma ? "," : "");
}

static void json_row(FILE *fp, const sx_nn_history *h, const sx_nn_epoch *r)
{
    char k1[48], k2[48];
    const char *m = sx_nn_metric_name(h->metric);
    snprintf(k1, sizeof k1, "val_%s", m);
    snprintf(k2, sizeof k2, "train_%s", m);
    fprintf(fp, "{\"epoch\":%lld,", (long long)r->epoch);
    json_num(fp, "train_loss", r->train_loss, true);
    json_num(fp, "val_loss", r->val_loss, true);
    json_num(fp, k1, r->val_metric, true);
    json_num(fp, "seconds", r->seconds, true);
    json_num(fp, k2, r->train_metric, true);
    json_num(fp, "lr", r->lr, h->n_heads > 0);
    for (int k = 0; k < h->n_heads; k++) {
        char key[64];
        snprintf(key, sizeof key, "val_loss_%s", h->head_names[k]);
        json_num(fp, key, r->val_head_loss[k], true);
    }
    for (int k = 0; k < h->n_heads; k++) {
        char key[64];
        snprintf(key, sizeof key, "val_%s_%s", sx_nn_metric_name(h->head_metric[k]),
                 h->head_names[k]);
        json_num(fp, key, r->val_head_metric[k], k + 1 < h->n_heads);
    }
    fputs("}\n", fp);
}

static sx_status close_checked(FILE *fp, const char *path)
{
    bool bad = ferror(fp) != 0;
    if (fclose(fp) != 0 || bad)
        return sx_error(SX_E_IO, "%s: write failed", path);
    return SX_OK;
}

sx_status nn_history_append(const char *path, const sx_nn_history *h, const sx_nn_epoch *r)
{
    FILE *fp = fopen(path, "a");
    if (fp == NULL)
        return sx_error(SX_E_IO, "%s: cannot open for appending", path);
    bool json = json_path(path);
    if (!json && ftell(fp) == 0)
        csv_header(fp, h);
    if (json)
        json_row(fp, h, r);
    else
        csv_row(fp, h, r);
    return close_checked(fp, path);
}

static sx_status write_history(const sx_nn_history *h, const char *path, bool json)
{
    const char *who = json ? "sx_nn_history_write_jsonl" : "sx_nn_history_write_csv";
    if (h == NULL || path == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument", who);
    FILE *fp = fopen(path, "w");
    if (fp == NULL)
        return sx_error(SX_E_IO, "%s: cannot open for writing", path);
    if (!json)
        csv_header(fp, h);
    for (int64_t i = 0; i < h->n; i++)
        if (json)
            json_row(fp, h, &h->rows[i]);
        else
            csv_row(fp, h, &h->rows[i]);
    return close_checked(fp, path);
}

sx_status sx_nn_history_write_csv(const sx_nn_history *h, const char *path)
{
    return write_history(h, path, false);
}

sx_status sx_nn_history_write_jsonl(const sx_nn_history *h, const char *path)
{
    return write_history(h, path, true);
}

void sx_nn_history_free(sx_nn_history *h)
{
    if (h == NULL)
        return;
    sx_free(h->rows);
    memset(h, 0, sizeof *h);
}
