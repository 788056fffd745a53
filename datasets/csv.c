/* csv.c: CSV files into a source, or into a tensor of features for prediction, parsed by
 * Debian's libcsv (strict RFC 4180 quoting) whose buffer grows through the allocator hook. libcsv
 * knows no line numbers, so the file is fed to it one physical line at a time: every callback
 * then knows the line it happens on. A record's fields are gathered, then checked and converted
 * at its end: numbers into the table, the label through a hash of the class texts (those seen so
 * far, renumbered at the end for sorted order; or the caller's fixed list, set up before). */
#include "datasets_impl.h"

#include <csv.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The table a CSV source owns. */
typedef struct csv_table {
    char *path;      /* for messages */
    double *x;       /* (n, d) features */
    int32_t *labels; /* (n) class indices, or NULL */
    double *targets; /* (n) targets, or NULL */
    char **classes;  /* (nclasses) label texts, or NULL */
    int64_t nclasses;
    char **x_names; /* (d) header names of the features, or NULL (no header) */
    char *y_name;   /* the label column's header name, or NULL */
    int64_t d;      /* features: the length of x_names */
} csv_table;

/* The parse in progress. */
typedef struct csv_state {
    const char *who; /* the public function, for messages */
    const char *path;
    sx_ds_csv_params p;
    int64_t line;    /* the physical line being fed, from 1 */
    char *buf;       /* the current record's fields, each nul-terminated */
    size_t len, cap; /* bytes used / allocated in buf */
    struct field {
        size_t start;            /* where the field starts in buf */
        int64_t line;            /* the line it ended on */
    } * f;                       /* (nf) the record's fields */
    int64_t nf, fcap;            /* fields in the record / allocated */
    int64_t ncols, first_line;   /* columns (-1 before the first record), its line */
    int64_t label_col;           /* the label's column */
    char **names;                /* (ncols) header names, or NULL */
    int64_t rows, xcap, ycap;    /* data rows / rows allocated in t.x, in t.labels/targets */
    csv_table t;                 /* what is being built */
    int64_t *hash, hcap;         /* (hcap) class index + 1, 0 empty; open addressing */
    const char *const *features; /* sx_ds_csv_read_x: the wanted header names, or NULL */
    int64_t nx;                  /* sx_ds_csv_read_x: features a row; 0 for sx_ds_csv_load */
    int64_t *sel;                /* sx_ds_csv_read_x: (nx) the column of each feature */
    sx_status st;                /* the first error; later callbacks do nothing */
} csv_state;

sx_ds_csv_params sx_ds_csv_params_default(void)
{
    return (sx_ds_csv_params){
        .header = true, .delimiter = ',', .label_column = -1, .label = SX_DS_LABEL_SORTED};
}

static void table_free(csv_table *t)
{
    sx_free(t->path);
    sx_free(t->x);
    sx_free(t->labels);
    sx_free(t->targets);
    for (int64_t k = 0; t->classes != NULL && k < t->nclasses; k++)
        sx_free(t->classes[k]);
    sx_free(t->classes);
    for (int64_t k = 0; t->x_names != NULL && k < t->d; k++)
        sx_free(t->x_names[k]);
    sx_free(t->x_names);
    sx_free(t->y_name);
}

static void table_drop(void *p)
{
    table_free(p);
    sx_free(p);
}

static sx_status nomem(const csv_state *c)
{
    return sx_error(SX_E_NOMEM, "%s: %s: out of memory", c->who, c->path);
}

/* Grow *p (of *cap elements of `size` bytes) to hold at least `need`. */
static bool grow(void **p, int64_t *cap, int64_t need, size_t size)
{
    if (need <= *cap)
        return true;
    int64_t n = *cap < 16 ? 16 : *cap;
    while (n < need)
        n *= 2;
    void *q = sx_realloc(*p, (size_t)n * size);
    if (q == NULL)
        return false;
    *p = q;
    *cap = n;
    return true;
}

static char *str_dup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = sx_alloc(n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

/* ---------------------------------------------------------------- fields */

/* "PATH: line L, column C ("name"): " into buf. */
static const char *where(const csv_state *c, int64_t j, char *buf, size_t n)
{
    if (c->names != NULL)
        snprintf(buf, n, "%s: line %lld, column %lld (\"%.60s\")", c->path, (long long)c->f[j].line,
                 (long long)j + 1, c->names[j]);
    else
        snprintf(buf, n, "%s: line %lld, column %lld", c->path, (long long)c->f[j].line,
                 (long long)j + 1);
    return buf;
}

/* Field j of the record as a finite number. */
static sx_status number(const csv_state *c, int64_t j, double *v)
{
    const char *s = c->buf + c->f[j].start;
    char w[512], *end;
    while (isspace((unsigned char)*s))
        s++;
    if (*s == '\0')
        return sx_error(SX_E_FORMAT, "%s: missing value", where(c, j, w, sizeof w));
    errno = 0;
    *v = strtod(s, &end);
    while (isspace((unsigned char)*end))
        end++;
    if (end == s || *end != '\0' || !isfinite(*v))
        return sx_error(SX_E_FORMAT, "%s: not a number: '%.60s'", where(c, j, w, sizeof w), s);
    return SX_OK;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
    return h;
}

/* The slot of text s in the hash: its entry or the empty slot where it goes. */
static int64_t slot(const csv_state *c, const char *s)
{
    int64_t m = c->hcap - 1, i = (int64_t)(fnv1a(s) & (uint64_t)m);
    while (c->hash[i] != 0 && strcmp(c->t.classes[c->hash[i] - 1], s) != 0)
        i = (i + 1) & m;
    return i;
}

/* Rebuild the hash at twice the size (kept at most half full). */
static bool rehash(csv_state *c)
{
    int64_t cap = c->hcap ? 2 * c->hcap : 64;
    int64_t *h = sx_calloc((size_t)cap, sizeof *h);
    if (h == NULL)
        return false;
    sx_free(c->hash);
    c->hash = h;
    c->hcap = cap;
    for (int64_t k = 0; k < c->t.nclasses; k++)
        c->hash[slot(c, c->t.classes[k])] = k + 1;
    return true;
}

/* A label outside the caller's class list: the field, the text and the list (its first names
 * when it is long: the message has to fit sx_last_error's line). */
static sx_status unknown_class(const csv_state *c, int64_t j, const char *s)
{
    char w[512], list[200];
    size_t at = 0;
    for (int64_t k = 0; k < c->t.nclasses; k++) {
        char name[40];
        int n = snprintf(name, sizeof name, "%s%.24s", k > 0 ? ", " : "", c->t.classes[k]);
        if (at + (size_t)n + 6 >= sizeof list) {
            snprintf(list + at, sizeof list - at, ", ...");
            break;
        }
        memcpy(list + at, name, (size_t)n + 1);
        at += (size_t)n;
    }
    return sx_error(SX_E_FORMAT, "%s: class '%.60s' is not one of the %lld classes given (%s)",
                    where(c, j, w, sizeof w), s, (long long)c->t.nclasses, list);
}

/* The caller's class list (p.classes, checked) as the table's classes, in its order. */
static sx_status preset_classes(csv_state *c)
{
    int64_t n = c->p.n_classes;
    if ((c->t.classes = sx_calloc((size_t)n, sizeof *c->t.classes)) == NULL)
        return nomem(c);
    for (int64_t k = 0; k < n; k++) {
        if (2 * (k + 1) > c->hcap && !rehash(c))
            return nomem(c);
        int64_t i = slot(c, c->p.classes[k]);
        if (c->hash[i] != 0)
            return sx_error(SX_E_ARG, "%s: classes[%lld] '%.60s' repeats classes[%lld]", c->who,
                            (long long)k, c->p.classes[k], (long long)c->hash[i] - 1);
        if ((c->t.classes[k] = str_dup(c->p.classes[k])) == NULL)
            return nomem(c);
        c->t.nclasses = k + 1;
        c->hash[i] = k + 1;
    }
    return SX_OK;
}

/* The class index of field j: its place in the caller's list, or (no list) a new class when
 * first seen. */
static sx_status class_of(csv_state *c, int64_t j, int32_t *out)
{
    const char *s = c->buf + c->f[j].start;
    char w[512];
    if (*s == '\0')
        return sx_error(SX_E_FORMAT, "%s: missing value", where(c, j, w, sizeof w));
    bool fixed = c->p.classes != NULL;
    if (!fixed && 2 * (c->t.nclasses + 1) > c->hcap && !rehash(c))
        return nomem(c);
    int64_t i = slot(c, s);
    if (c->hash[i] == 0 && fixed)
        return unknown_class(c, j, s);
    if (c->hash[i] == 0) {
        if (c->t.nclasses >= INT32_MAX)
            return sx_error(SX_E_RANGE, "%s: more than %d classes", c->path, INT32_MAX);
        int64_t cap = c->t.nclasses; /* one realloc per new class: classes are few */
        char *d = str_dup(s);
        if (d == NULL || !grow((void **)&c->t.classes, &cap, c->t.nclasses + 1, sizeof(char *))) {
            sx_free(d);
            return nomem(c);
        }
        c->t.classes[c->t.nclasses++] = d;
        c->hash[i] = c->t.nclasses;
    }
    *out = (int32_t)(c->hash[i] - 1);
    return SX_OK;
}

/* ---------------------------------------------------------------- records */

/* The header's names (c->names), kept for messages and for the source. */
static sx_status keep_names(csv_state *c)
{
    if ((c->names = sx_calloc((size_t)c->ncols, sizeof *c->names)) == NULL)
        return nomem(c);
    for (int64_t j = 0; j < c->ncols; j++)
        if ((c->names[j] = str_dup(c->buf + c->f[j].start)) == NULL)
            return nomem(c);
    return SX_OK;
}

/* The column of the header name `name`, or -1. */
static int64_t column_named(const csv_state *c, const char *name)
{
    for (int64_t j = 0; j < c->ncols; j++)
        if (strcmp(c->names[j], name) == 0)
            return j;
    return -1;
}

/* The label's column of p (by name or index), or -1 when the row has no such column. */
static int64_t label_column(const csv_state *c)
{
    if (c->p.label_name != NULL)
        return column_named(c, c->p.label_name);
    int64_t lc = c->p.label_column < 0 ? c->ncols + c->p.label_column : c->p.label_column;
    return lc >= 0 && lc < c->ncols ? lc : -1;
}

/* sx_ds_csv_read_x: the column of each feature (c->sel), by header name or by position. */
static sx_status select_columns(csv_state *c)
{
    int64_t d = c->nx, skip = -1;
    if ((c->sel = sx_alloc((size_t)d * sizeof *c->sel)) == NULL)
        return nomem(c);
    if (c->p.header && c->features != NULL) {
        for (int64_t k = 0; k < d; k++)
            if ((c->sel[k] = column_named(c, c->features[k])) < 0)
                return sx_error(SX_E_FORMAT,
                                "%s: no column named '%.60s' (feature %lld) in the header "
                                "(line %lld)",
                                c->path, c->features[k], (long long)k, (long long)c->first_line);
        return SX_OK;
    }
    if (c->ncols == d + 1 && (skip = label_column(c)) < 0)
        return sx_error(SX_E_FORMAT,
                        "%s: line %lld: %lld columns for %lld features, and no label column "
                        "to leave out",
                        c->path, (long long)c->first_line, (long long)c->ncols, (long long)d);
    if (c->ncols != d && skip < 0)
        return sx_error(SX_E_FORMAT,
                        "%s: line %lld: %lld columns, want %lld (the features) or %lld (and the "
                        "label)",
                        c->path, (long long)c->first_line, (long long)c->ncols, (long long)d,
                        (long long)d + 1);
    for (int64_t j = 0, k = 0; j < c->ncols; j++)
        if (j != skip)
            c->sel[k++] = j;
    return SX_OK;
}

/* The first record: the number of columns, the names, the label's column (or, reading
 * features, the columns wanted). */
static sx_status first_record(csv_state *c)
{
    c->ncols = c->nf;
    c->first_line = c->f[0].line;
    if (c->p.header)
        SX_TRY(keep_names(c));
    if (c->nx > 0)
        return select_columns(c);
    if (c->ncols < 2)
        return sx_error(SX_E_FORMAT, "%s: line %lld: only one column (want features and a label)",
                        c->path, (long long)c->first_line);
    c->label_col = label_column(c);
    if (c->label_col < 0 && c->p.label_name != NULL)
        return sx_error(SX_E_FORMAT, "%s: no column named '%.60s' in the header (line %lld)",
                        c->path, c->p.label_name, (long long)c->first_line);
    if (c->label_col < 0)
        return sx_error(SX_E_FORMAT, "%s: label column %lld but rows have %lld fields", c->path,
                        (long long)c->p.label_column, (long long)c->ncols);
    return SX_OK;
}

/* A data record into row `rows` of the table. */
static sx_status data_record(csv_state *c)
{
    bool xonly = c->nx > 0;
    int64_t d = xonly ? c->nx : c->ncols - 1, r = c->rows;
    if (c->nf != c->ncols)
        return sx_error(SX_E_FORMAT, "%s: line %lld: %lld fields, want %lld (as line %lld)",
                        c->path, (long long)c->f[c->nf - 1].line, (long long)c->nf,
                        (long long)c->ncols, (long long)c->first_line);
    bool tgt = c->p.label == SX_DS_LABEL_TARGET;
    if (!grow((void **)&c->t.x, &c->xcap, r + 1, (size_t)d * sizeof(double)) ||
        (!xonly && tgt && !grow((void **)&c->t.targets, &c->ycap, r + 1, sizeof(double))) ||
        (!xonly && !tgt && !grow((void **)&c->t.labels, &c->ycap, r + 1, sizeof(int32_t))))
        return nomem(c);
    if (xonly) {
        for (int64_t k = 0; k < d; k++)
            SX_TRY(number(c, c->sel[k], &c->t.x[r * d + k]));
        c->rows++;
        return SX_OK;
    }
    for (int64_t j = 0, f = 0; j < c->ncols; j++) {
        if (j == c->label_col)
            continue;
        SX_TRY(number(c, j, &c->t.x[r * d + f++]));
    }
    if (tgt)
        SX_TRY(number(c, c->label_col, &c->t.targets[r]));
    else
        SX_TRY(class_of(c, c->label_col, &c->t.labels[r]));
    c->rows++;
    return SX_OK;
}

/* A field holding a NUL byte: C strings would cut it there ("2\0abc" read as 2), so it is
 * refused. The field is column nf + 1 of the record being gathered. */
static sx_status nul_field(const csv_state *c)
{
    int64_t j = c->nf;
    if (c->names != NULL && j < c->ncols)
        return sx_error(SX_E_FORMAT,
                        "%s: line %lld, column %lld (\"%.60s\"): a NUL byte in the field", c->path,
                        (long long)c->line, (long long)j + 1, c->names[j]);
    return sx_error(SX_E_FORMAT, "%s: line %lld, column %lld: a NUL byte in the field", c->path,
                    (long long)c->line, (long long)j + 1);
}

/* libcsv's end-of-field callback: keep the field and the line it ended on. */
static void on_field(void *s, size_t len, void *data)
{
    csv_state *c = data;
    int64_t cap = (int64_t)c->cap;
    if (c->st != SX_OK)
        return;
    if (len > 0 && memchr(s, '\0', len) != NULL) {
        c->st = nul_field(c);
        return;
    }
    bool ok = grow((void **)&c->buf, &cap, (int64_t)(c->len + len + 1), 1) &&
              grow((void **)&c->f, &c->fcap, c->nf + 1, sizeof *c->f);
    c->cap = (size_t)cap;
    if (!ok) {
        c->st = nomem(c);
        return;
    }
    if (len > 0)
        memcpy(c->buf + c->len, s, len);
    c->buf[c->len + len] = '\0';
    c->f[c->nf].start = c->len;
    c->f[c->nf++].line = c->line;
    c->len += len + 1;
}

/* libcsv's end-of-record callback. */
static void on_record(int ch, void *data)
{
    csv_state *c = data;
    (void)ch;
    if (c->st == SX_OK && c->nf > 0) {
        bool first = c->ncols < 0;
        c->st = first ? first_record(c) : SX_OK;
        if (c->st == SX_OK && !(first && c->p.header))
            c->st = data_record(c);
    }
    c->nf = 0;
    c->len = 0;
}

/* ---------------------------------------------------------------- reading */

/* Feed n bytes (part of the current line) to libcsv. */
static sx_status feed(csv_state *c, struct csv_parser *ps, const char *b, size_t n)
{
    size_t done = csv_parse(ps, b, n, on_field, on_record, c);
    if (c->st != SX_OK)
        return c->st;
    if (done == n)
        return SX_OK;
    if (csv_error(ps) == CSV_ENOMEM)
        return nomem(c);
    return sx_error(SX_E_FORMAT, "%s: line %lld: malformed quoting (%s)", c->path,
                    (long long)c->line, csv_strerror(csv_error(ps)));
}

/* Feed a chunk of the file, line by line, after the skipped lines. */
static sx_status feed_chunk(csv_state *c, struct csv_parser *ps, const char *b, size_t n,
                            int64_t *skip)
{
    while (n > 0) {
        const char *nl = memchr(b, '\n', n);
        size_t k = nl ? (size_t)(nl - b) + 1 : n;
        if (*skip == 0)
            SX_TRY(feed(c, ps, b, k));
        if (nl != NULL) {
            c->line++;
            *skip -= *skip > 0;
        }
        b += k;
        n -= k;
    }
    return SX_OK;
}

static sx_status parse_file(csv_state *c, FILE *f)
{
    struct csv_parser ps;
    if (csv_init(&ps, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL) != 0)
        return nomem(c);
    csv_set_realloc_func(&ps, sx_realloc);
    csv_set_free_func(&ps, sx_free);
    csv_set_delim(&ps, (unsigned char)c->p.delimiter);
    char chunk[1 << 14];
    int64_t skip = c->p.skip_lines;
    sx_status st = SX_OK;
    size_t n;
    for (bool first = true; st == SX_OK && (n = fread(chunk, 1, sizeof chunk, f)) > 0;
         first = false) {
        size_t bom = first && n >= 3 && memcmp(chunk, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
        st = feed_chunk(c, &ps, chunk + bom, n - bom, &skip); /* a UTF-8 BOM is not data */
    }
    if (st == SX_OK && ferror(f))
        st = sx_error(SX_E_IO, "%s: %s: read error", c->who, c->path);
    if (st == SX_OK && csv_fini(&ps, on_field, on_record, c) != 0)
        st = c->st != SX_OK ? c->st
                            : sx_error(SX_E_FORMAT,
                                       "%s: line %lld: malformed quoting (an "
                                       "unterminated quote)",
                                       c->path, (long long)c->line);
    if (st == SX_OK)
        st = c->st;
    csv_free(&ps);
    return st;
}

/* Sorted order: numeric when every class text is a number, else byte order. */
typedef struct class_key {
    char *text;
    double value;
    bool numeric; /* the same for every key: all texts are numbers */
    int32_t old;  /* its first-seen index */
} class_key;

static int cmp_class(const void *a, const void *b)
{
    const class_key *u = a, *v = b;
    if (u->numeric && u->value != v->value)
        return u->value < v->value ? -1 : 1;
    return strcmp(u->text, v->text);
}

/* Renumber the classes in sorted order. */
static sx_status sort_classes(csv_state *c)
{
    csv_table *t = &c->t;
    class_key *key = sx_alloc((size_t)t->nclasses * sizeof *key);
    int32_t *rank = sx_alloc((size_t)t->nclasses * sizeof *rank);
    if (key == NULL || rank == NULL) {
        sx_free(key);
        sx_free(rank);
        return nomem(c);
    }
    bool numeric = true;
    for (int64_t k = 0; k < t->nclasses; k++) {
        char *end;
        key[k] = (class_key){
            .text = t->classes[k], .value = strtod(t->classes[k], &end), .old = (int32_t)k};
        numeric = numeric && end != t->classes[k] && *end == '\0' && isfinite(key[k].value);
    }
    for (int64_t k = 0; k < t->nclasses; k++)
        key[k].numeric = numeric;
    qsort(key, (size_t)t->nclasses, sizeof *key, cmp_class);
    for (int64_t k = 0; k < t->nclasses; k++) {
        t->classes[k] = key[k].text;
        rank[key[k].old] = (int32_t)k;
    }
    for (int64_t r = 0; r < c->rows; r++)
        t->labels[r] = rank[t->labels[r]];
    sx_free(key);
    sx_free(rank);
    return SX_OK;
}

/* ---------------------------------------------------------------- the source */

static sx_status csv_get(const sx_ds_source *s, int64_t i, void *x, void *y)
{
    const csv_table *t = s->impl;
    if (x != NULL)
        memcpy(x, t->x + i * s->x_size, (size_t)s->x_size * sizeof(double));
    if (y != NULL && t->labels != NULL)
        *(int32_t *)y = t->labels[i];
    else if (y != NULL)
        *(double *)y = t->targets[i];
    return SX_OK;
}

static const char *csv_class_name(const sx_ds_source *s, int64_t k)
{
    const csv_table *t = s->impl;
    return t->classes[k];
}

static sx_status check_csv_params(const char *who, const sx_ds_csv_params *p)
{
    if (p->skip_lines < 0)
        return sx_error(SX_E_ARG, "%s: skip_lines %lld (want >= 0)", who, (long long)p->skip_lines);
    if (p->delimiter == '"' || p->delimiter == '\r' || p->delimiter == '\n' || p->delimiter == 0)
        return sx_error(SX_E_ARG, "%s: delimiter %d is a quote, a line end or NUL", who,
                        (int)p->delimiter);
    if (p->label_name != NULL && !p->header)
        return sx_error(SX_E_ARG, "%s: label_name '%.60s' without a header", who, p->label_name);
    if (p->label != SX_DS_LABEL_FIRST_SEEN && p->label != SX_DS_LABEL_SORTED &&
        p->label != SX_DS_LABEL_TARGET)
        return sx_error(SX_E_ARG, "%s: label kind %d is not an sx_ds_label_kind", who,
                        (int)p->label);
    if ((p->classes == NULL) != (p->n_classes == 0) || p->n_classes < 0 || p->n_classes > INT32_MAX)
        return sx_error(SX_E_ARG, "%s: classes %s with n_classes %lld (want a list and 1..%d)", who,
                        p->classes ? "set" : "NULL", (long long)p->n_classes, INT32_MAX);
    if (p->classes != NULL && p->label == SX_DS_LABEL_TARGET)
        return sx_error(SX_E_ARG, "%s: a class list for a regression target", who);
    for (int64_t k = 0; k < p->n_classes; k++)
        if (p->classes[k] == NULL)
            return sx_error(SX_E_ARG, "%s: classes[%lld] is NULL", who, (long long)k);
    return SX_OK;
}

/* Parse the file into c->t (rows >= 1, classes sorted when asked). */
static sx_status csv_read(csv_state *c)
{
    FILE *f = fopen(c->path, "rb");
    if (f == NULL)
        return sx_error(SX_E_IO, "%s: cannot open: %s", c->path, strerror(errno));
    sx_status st = parse_file(c, f);
    fclose(f);
    if (st == SX_OK && c->rows == 0)
        st = sx_error(SX_E_FORMAT, "%s: no data rows", c->path);
    if (st == SX_OK && c->nx == 0 && c->p.classes == NULL && c->p.label == SX_DS_LABEL_SORTED)
        st = sort_classes(c);
    return st;
}

/* The header's names into the table: the features' in file order, and the label's. */
static sx_status move_names(csv_state *c)
{
    int64_t d = c->ncols - 1;
    if (c->names == NULL)
        return SX_OK;
    if ((c->t.x_names = sx_calloc((size_t)d, sizeof *c->t.x_names)) == NULL)
        return nomem(c);
    c->t.d = d;
    for (int64_t j = 0, k = 0; j < c->ncols; j++) {
        char **to = j == c->label_col ? &c->t.y_name : &c->t.x_names[k++];
        *to = c->names[j];
        c->names[j] = NULL;
    }
    return SX_OK;
}

/* Hand the table to a new source. */
static sx_status csv_source(csv_state *c, sx_ds_source **out)
{
    const char *who = "sx_ds_csv_load";
    SX_TRY(move_names(c));
    csv_table *t = sx_alloc(sizeof *t);
    if (t == NULL || (c->t.path = str_dup(c->path)) == NULL) {
        sx_free(t);
        return nomem(c);
    }
    *t = c->t;
    memset(&c->t, 0, sizeof c->t);
    bool tgt = t->labels == NULL;
    sx_ds_spec spec = {.x_type = SX_DS_F64,
                       .x_rank = 1,
                       .x_shape = {c->ncols - 1},
                       .y_type = tgt ? SX_DS_F64 : SX_DS_I32,
                       .classes = tgt ? 0 : t->nclasses,
                       .x_scale = 1.0};
    if (sx__source_new(who, &spec, c->rows, t->path, csv_get, t, table_drop, out) != SX_OK)
        return nomem(c);
    if (!tgt)
        (*out)->class_name = csv_class_name;
    (*out)->x_names = (const char *const *)t->x_names;
    (*out)->y_name = t->y_name;
    return SX_OK;
}

/* Release what the parse holds besides the table. */
static void state_free(csv_state *c)
{
    table_free(&c->t);
    for (int64_t j = 0; c->names != NULL && j < c->ncols; j++)
        sx_free(c->names[j]);
    sx_free(c->names);
    sx_free(c->buf);
    sx_free(c->f);
    sx_free(c->hash);
    sx_free(c->sel);
}

sx_status sx_ds_csv_load(const char *path, const sx_ds_csv_params *p, sx_ds_source **out)
{
    const char *who = "sx_ds_csv_load";
    if (out != NULL)
        *out = NULL;
    if (out == NULL || path == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, out == NULL ? "out" : "path");
    csv_state c = {
        .who = who, .path = path, .p = p ? *p : sx_ds_csv_params_default(), .line = 1, .ncols = -1};
    SX_TRY(check_csv_params(who, &c.p));
    sx_status st = c.p.classes != NULL ? preset_classes(&c) : SX_OK;
    if (st == SX_OK)
        st = csv_read(&c);
    if (st == SX_OK)
        st = csv_source(&c, out);
    state_free(&c);
    return st;
}

sx_status sx_ds_csv_read_x(const char *path, const sx_ds_csv_params *p, const char *const *features,
                           int64_t n_features, sx_tensor **out)
{
    const char *who = "sx_ds_csv_read_x";
    if (out != NULL)
        *out = NULL;
    if (out == NULL || path == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, out == NULL ? "out" : "path");
    if (n_features < 1)
        return sx_error(SX_E_ARG, "%s: n_features %lld (want >= 1)", who, (long long)n_features);
    for (int64_t k = 0; features != NULL && k < n_features; k++)
        if (features[k] == NULL)
            return sx_error(SX_E_ARG, "%s: features[%lld] is NULL", who, (long long)k);
    csv_state c = {.who = who,
                   .path = path,
                   .p = p ? *p : sx_ds_csv_params_default(),
                   .line = 1,
                   .ncols = -1,
                   .features = features,
                   .nx = n_features};
    SX_TRY(check_csv_params(who, &c.p));
    sx_status st = csv_read(&c);
    if (st == SX_OK && sx_tensor_from_doubles(SX_F64, 2, (int64_t[]){c.rows, n_features}, c.t.x,
                                              c.rows * n_features, out) != SX_OK)
        st = nomem(&c);
    state_free(&c);
    return st;
}
