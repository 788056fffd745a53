/* CSV files through libcsv: quoting (embedded delimiters, quotes, newlines), CRLF, header or
 * not, skipped lines, the label column by index (negative from the end) or by name, class
 * numbering in first-seen and sorted order with the names kept, regression targets, and every
 * error (missing value and non-number with line and column, ragged rows, empty file, bad
 * quoting) naming the file; out-of-memory injection over the whole load; random bytes never
 * crash. Each test writes its files into its own temporary directory. */
#include "idx_fixture.h"
#include <testutil.h>

#include <sx_datasets.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Write `text` (len bytes; -1: strlen) to a new temporary file; its path into path. */
static void put_file(char *path, size_t n, const char *text, long len)
{
    snprintf(path, n, "/tmp/sx_csv_XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    size_t k = len < 0 ? strlen(text) : (size_t)len;
    cr_assert_eq(write(fd, text, k), (ssize_t)k);
    close(fd);
}

/* Load text as CSV with p; the status, the source in *out. */
static sx_status load_text(const char *text, const sx_ds_csv_params *p, sx_ds_source **out,
                           char *path, size_t n)
{
    put_file(path, n, text, -1);
    sx_status st = sx_ds_csv_load(path, p, out);
    unlink(path);
    return st;
}

static double x_at(const sx_ds_source *s, int64_t i, int64_t k)
{
    double x[16];
    int32_t y;
    cr_assert_eq(sx_ds_source_get(s, i, x, &y), SX_OK, "%s", sx_last_error());
    return x[k];
}

static int32_t label_at(const sx_ds_source *s, int64_t i)
{
    int32_t y = -1;
    cr_assert_eq(sx_ds_source_get(s, i, NULL, &y), SX_OK, "%s", sx_last_error());
    return y;
}

Test(datasets_csv, quotes_commas_newlines_and_crlf)
{
    const char *text = "a,\"b, with comma\",label\r\n"
                       "1.5,\"2\",\"cat\"\r\n"
                       "\"3\",4e1,\"two\nlines\"\r\n"
                       "\r\n" /* a blank line is skipped */
                       "-5,  6  ,\"say \"\"hi\"\"\"\r\n";
    char path[64];
    sx_ds_source *s = NULL;
    cr_assert_eq(load_text(text, NULL, &s, path, sizeof path), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_source_count(s), 3);
    const sx_ds_spec *sp = sx_ds_source_spec(s);
    cr_assert_eq(sp->x_type, SX_DS_F64);
    cr_assert_eq(sp->x_rank, 1);
    cr_assert_eq(sp->x_shape[0], 2);
    cr_assert_eq(sp->y_type, SX_DS_I32);
    cr_assert_eq(sp->classes, 3);
    cr_assert_eq(x_at(s, 0, 0), 1.5);
    cr_assert_eq(x_at(s, 0, 1), 2.0);
    cr_assert_eq(x_at(s, 1, 1), 40.0);
    cr_assert_eq(x_at(s, 2, 0), -5.0);
    cr_assert_eq(x_at(s, 2, 1), 6.0);
    cr_assert_str_eq(sx_ds_source_class_name(s, 0), "cat");
    cr_assert_str_eq(sx_ds_source_class_name(s, 1), "two\nlines");
    cr_assert_str_eq(sx_ds_source_class_name(s, 2), "say \"hi\"");
    cr_assert_null(sx_ds_source_class_name(s, 3));
    for (int i = 0; i < 3; i++)
        cr_assert_eq(label_at(s, i), i);
    sx_ds_source_free(s);
}

Test(datasets_csv, no_header_label_first_column_and_skip_lines)
{
    const char *text = "150,4,setosa\n" /* a count line, as sklearn's tables have */
                       "b,1,2\n"
                       "a,3,4\n"
                       "b,5,6"; /* no final newline */
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.header = false;
    p.skip_lines = 1;
    p.label_column = 0;
    char path[64];
    sx_ds_source *s = NULL;
    cr_assert_eq(load_text(text, &p, &s, path, sizeof path), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_source_count(s), 3);
    cr_assert_eq(sx_ds_source_spec(s)->classes, 2);
    cr_assert_eq(x_at(s, 2, 0), 5.0);
    cr_assert_eq(x_at(s, 2, 1), 6.0);
    cr_assert_eq(label_at(s, 0), 0); /* first seen: b = 0, a = 1 */
    cr_assert_eq(label_at(s, 1), 1);
    cr_assert_eq(label_at(s, 2), 0);
    sx_ds_source_free(s);
}

Test(datasets_csv, sorted_class_order_numeric_and_text)
{
    const char *text = "x,y\n1,10\n2,9\n3,10\n4,2\n";
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.label = SX_DS_LABEL_SORTED;
    char path[64];
    sx_ds_source *s = NULL;
    cr_assert_eq(load_text(text, &p, &s, path, sizeof path), SX_OK, "%s", sx_last_error());
    /* numeric order 2 < 9 < 10 (byte order would put "10" first) */
    cr_assert_str_eq(sx_ds_source_class_name(s, 0), "2");
    cr_assert_str_eq(sx_ds_source_class_name(s, 1), "9");
    cr_assert_str_eq(sx_ds_source_class_name(s, 2), "10");
    int32_t want[4] = {2, 1, 2, 0};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(label_at(s, i), want[i], "row %d", i);
    sx_ds_source_free(s);

    const char *words = "x,y\n1,pear\n2,apple\n3,fig\n4,apple\n";
    cr_assert_eq(load_text(words, &p, &s, path, sizeof path), SX_OK, "%s", sx_last_error());
    cr_assert_str_eq(sx_ds_source_class_name(s, 0), "apple");
    cr_assert_str_eq(sx_ds_source_class_name(s, 1), "fig");
    cr_assert_str_eq(sx_ds_source_class_name(s, 2), "pear");
    int32_t want2[4] = {2, 0, 1, 0};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(label_at(s, i), want2[i], "row %d", i);
    sx_ds_source_free(s);

    p.label = SX_DS_LABEL_FIRST_SEEN;
    cr_assert_eq(load_text(words, &p, &s, path, sizeof path), SX_OK, "%s", sx_last_error());
    cr_assert_str_eq(sx_ds_source_class_name(s, 0), "pear");
    cr_assert_str_eq(sx_ds_source_class_name(s, 1), "apple");
    cr_assert_str_eq(sx_ds_source_class_name(s, 2), "fig");
    sx_ds_source_free(s);
}

Test(datasets_csv, label_by_name_as_regression_target)
{
    const char *text = "\xEF\xBB\xBFprice,rooms,area\n250.5,3,80\n199,2,61.5\n"; /* a BOM */
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.label_name = "price";
    p.label = SX_DS_LABEL_TARGET;
    char path[64];
    sx_ds_source *s = NULL;
    cr_assert_eq(load_text(text, &p, &s, path, sizeof path), SX_OK, "%s", sx_last_error());
    const sx_ds_spec *sp = sx_ds_source_spec(s);
    cr_assert_eq(sp->classes, 0);
    cr_assert_eq(sp->y_type, SX_DS_F64);
    double x[2], y;
    cr_assert_eq(sx_ds_source_get(s, 1, x, &y), SX_OK);
    cr_assert_eq(y, 199.0);
    cr_assert_eq(x[0], 2.0);
    cr_assert_eq(x[1], 61.5);
    cr_assert_null(sx_ds_source_class_name(s, 0));
    sx_ds_source_free(s);
}

/* Load text expecting status `want` and a message holding `msg` and the file's path. */
static void expect_error(const char *text, const sx_ds_csv_params *p, sx_status want,
                         const char *msg)
{
    char path[64];
    sx_ds_source *s = (sx_ds_source *)&s; /* must become NULL */
    sx_status st = load_text(text, p, &s, path, sizeof path);
    cr_assert_eq(st, want, "%s -> %s: %s", text, sx_status_str(st), sx_last_error());
    cr_assert_null(s);
    cr_assert(fx_msg_has(msg));
    cr_assert(fx_msg_has(path));
}

Test(datasets_csv, errors_name_file_line_and_column)
{
    expect_error("a,b,c\n1,2,x\n3,,y\n", NULL, SX_E_FORMAT, "line 3, column 2 (\"b\"): missing");
    expect_error("a,b,c\n1,2,x\n3,abc,y\n", NULL, SX_E_FORMAT,
                 "line 3, column 2 (\"b\"): not a number: 'abc'");
    expect_error("a,b,c\n1,2,x\n3,nan,y\n", NULL, SX_E_FORMAT, "not a number: 'nan'");
    sx_ds_csv_params nh = sx_ds_csv_params_default();
    nh.header = false;
    expect_error("1,2,x\n3,4,\"y\nz\"\n5,,z\n", &nh, SX_E_FORMAT, "line 4, column 2: missing");
    expect_error("a,b,c\n1,2,x\n3,4\n", NULL, SX_E_FORMAT, "line 3: 2 fields, want 3 (as line 1)");
    expect_error("a,b,c\n1,2,x\n3,4,5,6\n", NULL, SX_E_FORMAT, "line 3: 4 fields, want 3");
    expect_error("", NULL, SX_E_FORMAT, "no data rows");
    expect_error("a,b,c\n", NULL, SX_E_FORMAT, "no data rows");
    expect_error("a,b,c\n1,2\"x\",y\n", NULL, SX_E_FORMAT, "line 2: malformed quoting");
    expect_error("a,b,c\n1,2,\"unterminated\n", NULL, SX_E_FORMAT, "malformed quoting");
    expect_error("justone\n1\n", NULL, SX_E_FORMAT, "only one column");
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.label_column = 5;
    expect_error("a,b\n1,2\n", &p, SX_E_FORMAT, "label column 5 but rows have 2 fields");
    p = sx_ds_csv_params_default();
    p.label_name = "nope";
    expect_error("a,b\n1,2\n", &p, SX_E_FORMAT, "no column named 'nope'");
    p.label = SX_DS_LABEL_TARGET;
    p.label_name = NULL;
    expect_error("a,b\n1,2\n3,dog\n", &p, SX_E_FORMAT, "line 3, column 2 (\"b\"): not a number");
}

Test(datasets_csv, argument_errors)
{
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_csv_load(NULL, NULL, &s), SX_E_ARG);
    cr_assert_eq(sx_ds_csv_load("x.csv", NULL, NULL), SX_E_ARG);
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.skip_lines = -1;
    cr_assert_eq(sx_ds_csv_load("x.csv", &p, &s), SX_E_ARG);
    p = sx_ds_csv_params_default();
    p.delimiter = '"';
    cr_assert_eq(sx_ds_csv_load("x.csv", &p, &s), SX_E_ARG);
    p = sx_ds_csv_params_default();
    p.header = false;
    p.label_name = "y";
    cr_assert_eq(sx_ds_csv_load("x.csv", &p, &s), SX_E_ARG);
    p = sx_ds_csv_params_default();
    p.label = (sx_ds_label_kind)7;
    cr_assert_eq(sx_ds_csv_load("x.csv", &p, &s), SX_E_ARG);
    cr_assert_eq(sx_ds_csv_load("/nonexistent/dir/x.csv", NULL, &s), SX_E_IO);
    cr_assert(fx_msg_has("/nonexistent/dir/x.csv: cannot open"));
    cr_assert_null(s);
}

Test(datasets_csv, semicolon_delimiter)
{
    const char *text = "a;b;y\n1,5;2;u\n";
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.delimiter = ';';
    char path[64];
    sx_ds_source *s = NULL;
    sx_status st = load_text(text, &p, &s, path, sizeof path);
    cr_assert_eq(st, SX_E_FORMAT, "1,5 is not a number");
    const char *ok = "a;b;y\n1.5;2;u\n";
    cr_assert_eq(load_text(ok, &p, &s, path, sizeof path), SX_OK, "%s", sx_last_error());
    cr_assert_eq(x_at(s, 0, 0), 1.5);
    sx_ds_source_free(s);
}

/* Fail the k-th allocation for every k: SX_E_NOMEM naming the file, nothing leaked. */
Test(datasets_csv, out_of_memory_every_allocation)
{
    char path[64];
    /* enough rows and classes to grow every array more than once */
    char text[8192];
    size_t at = (size_t)snprintf(text, sizeof text, "a,\"b\",label\n");
    for (int i = 0; i < 70; i++)
        at +=
            (size_t)snprintf(text + at, sizeof text - at, "%d,%d.5,\"class %d\"\n", i, -i, i % 37);
    put_file(path, sizeof path, text, -1);
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.label = SX_DS_LABEL_SORTED;
    long k;
    for (k = 0;; k++) {
        sx_ds_source *s = NULL;
        tu_fail_after(k);
        sx_status st = sx_ds_csv_load(path, &p, &s);
        bool done = st == SX_OK && sx_ds_source_count(s) == 70 &&
                    sx_ds_source_spec(s)->classes == 37 &&
                    strcmp(sx_ds_source_class_name(s, 0), "class 0") == 0;
        sx_ds_source_free(s);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(live, 0, "k=%ld leaked %ld allocations", k, live);
        if (st == SX_OK) {
            cr_assert(done, "the table read under the failing allocator is right");
            break;
        }
        cr_assert_eq(st, SX_E_NOMEM, "k=%ld: %s", k, sx_last_error());
        cr_assert(fx_msg_has(path));
        cr_assert_null(s);
    }
    cr_assert_gt(k, 40, "the load makes many allocations");
    unlink(path);
}

/* Random bytes and random mutations of a valid file: a status, never a crash (run under ASan). */
Test(datasets_csv, random_bytes_never_crash)
{
    sx_rng rng;
    sx_rng_seed(&rng, 19);
    const char *base = "a,b,y\n1,2,\"x\"\n3,4,\"y\"\r\n5,6,z\n";
    char buf[256], path[64];
    for (int t = 0; t < 300; t++) {
        long n;
        if (t % 2 == 0) {
            n = (long)sx_rng_below(&rng, sizeof buf);
            for (long i = 0; i < n; i++)
                buf[i] = (char)"a1,\"\r\n.-e9 ;"[sx_rng_below(&rng, 13)];
        } else {
            n = (long)strlen(base);
            memcpy(buf, base, (size_t)n);
            for (int m = 0; m < 3; m++)
                buf[sx_rng_below(&rng, (uint64_t)n)] = (char)sx_rng_below(&rng, 256);
        }
        put_file(path, sizeof path, buf, n);
        sx_ds_source *s = NULL;
        sx_status st = sx_ds_csv_load(path, NULL, &s);
        unlink(path);
        cr_assert(st == SX_OK || st == SX_E_FORMAT, "%s", sx_last_error());
        cr_assert((st == SX_OK) == (s != NULL));
        if (s != NULL) { /* whatever was read, every example can be read back */
            int64_t d = sx_ds_spec_x_size(sx_ds_source_spec(s));
            double *x = malloc((size_t)d * sizeof *x);
            int32_t y;
            for (int64_t i = 0; i < sx_ds_source_count(s); i++)
                cr_assert_eq(sx_ds_source_get(s, i, x, &y), SX_OK);
            free(x);
        }
        sx_ds_source_free(s);
    }
}
