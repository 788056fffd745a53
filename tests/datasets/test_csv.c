/* CSV files through libcsv: quoting (embedded delimiters, quotes, newlines), CRLF, header or
 * not, skipped lines, the label column by index (negative from the end) or by name, class
 * numbering in sorted order (the default: a shuffled copy gets the same numbers), first-seen
 * order or a caller's class list, with the names kept; feature and label names; regression
 * targets; features read for prediction (sx_ds_csv_read_x) by header name or by position; and
 * every error (missing value and non-number with line and column, a NUL byte, a class outside
 * the list, ragged rows, empty file, bad quoting) naming the file; out-of-memory injection over
 * the whole load; random bytes never crash. Each test writes its files as temporary files. */
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
    cr_assert_str_eq(sx_ds_source_class_name(s, 0), "cat"); /* sorted: the default */
    cr_assert_str_eq(sx_ds_source_class_name(s, 1), "say \"hi\"");
    cr_assert_str_eq(sx_ds_source_class_name(s, 2), "two\nlines");
    cr_assert_null(sx_ds_source_class_name(s, 3));
    int32_t want[3] = {0, 2, 1};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(label_at(s, i), want[i]);
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
    cr_assert_eq(label_at(s, 0), 1); /* sorted: a = 0, b = 1 */
    cr_assert_eq(label_at(s, 1), 0);
    cr_assert_eq(label_at(s, 2), 1);
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

Test(datasets_csv, default_sorted_and_a_shuffled_copy_numbered_the_same)
{
    sx_ds_csv_params d = sx_ds_csv_params_default();
    cr_assert_eq(d.label, SX_DS_LABEL_SORTED);
    cr_assert_null(d.classes);
    cr_assert_eq(d.n_classes, 0);
    const char *a = "x,y\n1,versicolor\n2,setosa\n3,virginica\n4,setosa\n5,versicolor\n";
    const char *b = "x,y\n3,virginica\n4,setosa\n1,versicolor\n5,versicolor\n2,setosa\n";
    char path[64];
    sx_ds_source *sa = NULL, *sb = NULL;
    cr_assert_eq(load_text(a, NULL, &sa, path, sizeof path), SX_OK, "%s", sx_last_error());
    cr_assert_eq(load_text(b, NULL, &sb, path, sizeof path), SX_OK, "%s", sx_last_error());
    for (int k = 0; k < 3; k++)
        cr_assert_str_eq(sx_ds_source_class_name(sa, k), sx_ds_source_class_name(sb, k));
    cr_assert_str_eq(sx_ds_source_class_name(sa, 0), "setosa");
    /* the row with x = v has the same label in both files */
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++)
            if (x_at(sa, i, 0) == x_at(sb, j, 0))
                cr_assert_eq(label_at(sa, i), label_at(sb, j), "x = %g", x_at(sa, i, 0));
    sx_ds_source_free(sa);
    sx_ds_source_free(sb);
}

Test(datasets_csv, class_list_gives_the_numbering)
{
    /* the list's order, not the file's or the sorted one; "virginica" absent from the file */
    const char *const names[3] = {"virginica", "versicolor", "setosa"};
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.classes = names;
    p.n_classes = 3;
    const char *text = "a,species\n1,setosa\n2,versicolor\n3,setosa\n";
    char path[64];
    sx_ds_source *s = NULL;
    cr_assert_eq(load_text(text, &p, &s, path, sizeof path), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_source_spec(s)->classes, 3);
    for (int k = 0; k < 3; k++)
        cr_assert_str_eq(sx_ds_source_class_name(s, k), names[k]);
    int32_t want[3] = {2, 1, 2};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(label_at(s, i), want[i], "row %d", i);
    sx_ds_source_free(s);
    p.label = SX_DS_LABEL_FIRST_SEEN; /* the list wins over either numbering */
    cr_assert_eq(load_text(text, &p, &s, path, sizeof path), SX_OK, "%s", sx_last_error());
    cr_assert_eq(label_at(s, 0), 2);
    sx_ds_source_free(s);

    /* the pattern of the header: a test file read with the training file's classes */
    sx_ds_source *train = NULL, *test = NULL;
    cr_assert_eq(load_text("a,y\n1,b\n2,c\n3,a\n", NULL, &train, path, sizeof path), SX_OK);
    int64_t k = sx_ds_source_spec(train)->classes;
    const char *list[3];
    for (int64_t i = 0; i < k; i++)
        list[i] = sx_ds_source_class_name(train, i);
    sx_ds_csv_params q = sx_ds_csv_params_default();
    q.classes = list;
    q.n_classes = k;
    cr_assert_eq(load_text("a,y\n9,c\n8,b\n", &q, &test, path, sizeof path), SX_OK, "%s",
                 sx_last_error());
    cr_assert_eq(label_at(test, 0), 2); /* c is class 2 of the training file (a, b, c) */
    cr_assert_eq(label_at(test, 1), 1); /* alone, the test file would number c 1 and b 0 */
    sx_ds_source_free(test);
    sx_ds_source_free(train);
}

Test(datasets_csv, class_outside_the_list_and_bad_lists)
{
    const char *const names[3] = {"setosa", "versicolor", "virginica"};
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.classes = names;
    p.n_classes = 3;
    expect_error("a,b,c,d,species\n1,2,3,4,setosa\n5,6,7,8,virginica\n1,2,3,4,zebra\n", &p,
                 SX_E_FORMAT,
                 "line 4, column 5 (\"species\"): class 'zebra' is not one of the 3 classes given "
                 "(setosa, versicolor, virginica)");
    /* a long list is cut short in the message */
    char many[40][16];
    const char *ptr[40];
    for (int k = 0; k < 40; k++) {
        snprintf(many[k], sizeof many[k], "class_%02d", k);
        ptr[k] = many[k];
    }
    p.classes = ptr;
    p.n_classes = 40;
    expect_error("a,y\n1,class_03\n2,dog\n", &p, SX_E_FORMAT,
                 "class 'dog' is not one of the 40 classes given (class_00, class_01");
    cr_assert(fx_msg_has(", ...)"));

    sx_ds_source *s = (sx_ds_source *)&s;
    const char *const dup[3] = {"a", "b", "a"};
    p.classes = dup;
    p.n_classes = 3;
    cr_assert_eq(sx_ds_csv_load("x.csv", &p, &s), SX_E_ARG);
    cr_assert(fx_msg_has("classes[2] 'a' repeats classes[0]"));
    cr_assert_null(s);
    const char *const hole[2] = {"a", NULL};
    p.classes = hole;
    p.n_classes = 2;
    cr_assert_eq(sx_ds_csv_load("x.csv", &p, &s), SX_E_ARG);
    cr_assert(fx_msg_has("classes[1] is NULL"));
    p.n_classes = 0;
    cr_assert_eq(sx_ds_csv_load("x.csv", &p, &s), SX_E_ARG);
    p.classes = NULL;
    p.n_classes = 2;
    cr_assert_eq(sx_ds_csv_load("x.csv", &p, &s), SX_E_ARG);
    p.classes = names;
    p.n_classes = 3;
    p.label = SX_DS_LABEL_TARGET;
    cr_assert_eq(sx_ds_csv_load("x.csv", &p, &s), SX_E_ARG);
    cr_assert(fx_msg_has("regression target"));
}

Test(datasets_csv, nul_byte_in_a_field_is_refused)
{
    char path[64];
    sx_ds_source *s = (sx_ds_source *)&s;
    /* a feature "2\0abc": as a C string it would read as 2 */
    static const char feat[] = "a,b,y\n1,2\0abc,0\n";
    put_file(path, sizeof path, feat, (long)sizeof feat - 1);
    cr_assert_eq(sx_ds_csv_load(path, NULL, &s), SX_E_FORMAT);
    cr_assert_null(s);
    cr_assert(fx_msg_has("line 2, column 2 (\"b\"): a NUL byte in the field"));
    cr_assert(fx_msg_has(path));
    unlink(path);
    /* a label "0\0xyz" (it would become class "0"), without a header, on line 3 */
    static const char label[] = "1,2,0\n3,4,0\0xyz\n";
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.header = false;
    put_file(path, sizeof path, label, (long)sizeof label - 1);
    cr_assert_eq(sx_ds_csv_load(path, &p, &s), SX_E_FORMAT);
    cr_assert(fx_msg_has("line 2, column 3: a NUL byte in the field"));
    cr_assert(fx_msg_has(path));
    sx_tensor *x = (sx_tensor *)&x;
    cr_assert_eq(sx_ds_csv_read_x(path, &p, NULL, 2, &x), SX_E_FORMAT);
    cr_assert_null(x);
    cr_assert(fx_msg_has("line 2, column 3: a NUL byte"));
    unlink(path);
    /* in a quoted field and in the header */
    static const char quoted[] = "a,b,y\n1,\"2\0\",0\n";
    put_file(path, sizeof path, quoted, (long)sizeof quoted - 1);
    cr_assert_eq(sx_ds_csv_load(path, NULL, &s), SX_E_FORMAT);
    cr_assert(fx_msg_has("line 2, column 2 (\"b\"): a NUL byte"));
    unlink(path);
    static const char head[] = "a,b\0c,y\n1,2,0\n";
    put_file(path, sizeof path, head, (long)sizeof head - 1);
    cr_assert_eq(sx_ds_csv_load(path, NULL, &s), SX_E_FORMAT);
    cr_assert(fx_msg_has("line 1, column 2: a NUL byte"));
    unlink(path);
}

Test(datasets_csv, feature_and_label_names_through_views)
{
    const char *text = "width,species,height,depth\n1,a,2,3\n4,b,5,6\n7,a,8,9\n1,b,1,1\n";
    char path[64];
    sx_ds_source *s = NULL;
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.label_name = "species";
    cr_assert_eq(load_text(text, &p, &s, path, sizeof path), SX_OK, "%s", sx_last_error());
    const char *want[3] = {"width", "height", "depth"};
    for (int k = 0; k < 3; k++)
        cr_assert_str_eq(sx_ds_source_x_name(s, k), want[k]);
    cr_assert_null(sx_ds_source_x_name(s, 3));
    cr_assert_null(sx_ds_source_x_name(s, -1));
    cr_assert_str_eq(sx_ds_source_y_name(s), "species");
    sx_ds_source *tr = NULL, *va = NULL, *std = NULL;
    sx_ds_stats *st = NULL;
    cr_assert_eq(sx_ds_split(s, 0.5, 3, &tr, &va), SX_OK);
    cr_assert_eq(sx_ds_stats_compute(tr, 0, &st), SX_OK);
    cr_assert_eq(sx_ds_source_standardize(va, st, &std), SX_OK);
    for (int k = 0; k < 3; k++) {
        cr_assert_str_eq(sx_ds_source_x_name(tr, k), want[k]);
        cr_assert_str_eq(sx_ds_source_x_name(std, k), want[k]);
    }
    cr_assert_str_eq(sx_ds_source_y_name(std), "species");
    cr_assert_null(sx_ds_source_x_name(std, 3));
    sx_ds_source_free(std);
    sx_ds_stats_free(st);
    sx_ds_source_free(va);
    sx_ds_source_free(tr);
    sx_ds_source_free(s);

    /* no header: no names; another kind of source: none; NULL: none */
    p = sx_ds_csv_params_default();
    p.header = false;
    cr_assert_eq(load_text("1,2,a\n3,4,b\n", &p, &s, path, sizeof path), SX_OK);
    cr_assert_null(sx_ds_source_x_name(s, 0));
    cr_assert_null(sx_ds_source_y_name(s));
    sx_ds_source_free(s);
    double x[2] = {1, 2}, y[2] = {0, 1};
    sx_ds_spec spec = {.x_type = SX_DS_F64, .y_type = SX_DS_F64, .x_scale = 1.0};
    cr_assert_eq(sx_ds_source_memory(&spec, 2, x, y, &s), SX_OK);
    cr_assert_null(sx_ds_source_x_name(s, 0));
    cr_assert_null(sx_ds_source_y_name(s));
    sx_ds_source_free(s);
    cr_assert_null(sx_ds_source_x_name(NULL, 0));
    cr_assert_null(sx_ds_source_y_name(NULL));
}

/* Read text's features with p; the status, the tensor in *out (its shape checked by callers). */
static sx_status read_x_text(const char *text, const sx_ds_csv_params *p,
                             const char *const *features, int64_t n, sx_tensor **out, char *path,
                             size_t len)
{
    put_file(path, len, text, -1);
    sx_status st = sx_ds_csv_read_x(path, p, features, n, out);
    unlink(path);
    return st;
}

/* x is (rows, cols) holding want (row-major). */
static void expect_x(const sx_tensor *x, int64_t rows, int64_t cols, const double *want)
{
    cr_assert_eq(x->rank, 2);
    cr_assert_eq(x->dtype, SX_F64);
    cr_assert_eq(x->shape[0], rows);
    cr_assert_eq(x->shape[1], cols);
    for (int64_t i = 0; i < rows * cols; i++)
        cr_assert_eq(sx_tensor_get(x, i), want[i], "element %lld", (long long)i);
}

Test(datasets_csv, read_x_by_header_name)
{
    /* columns picked by name in the caller's order; id (text) and the label are not read */
    const char *text = "id,depth,species,width\nA7,3,setosa,1\nB2,6,virginica,4\n";
    const char *const names[2] = {"width", "depth"};
    char path[64];
    sx_tensor *x = NULL;
    cr_assert_eq(read_x_text(text, NULL, names, 2, &x, path, sizeof path), SX_OK, "%s",
                 sx_last_error());
    expect_x(x, 2, 2, (double[]){1, 3, 4, 6});
    sx_tensor_free(x);
    /* a file without the label column reads the same */
    cr_assert_eq(read_x_text("width,depth\n1,3\n4,6\n", NULL, names, 2, &x, path, sizeof path),
                 SX_OK);
    expect_x(x, 2, 2, (double[]){1, 3, 4, 6});
    sx_tensor_free(x);
    /* a feature missing from the header */
    const char *const other[2] = {"width", "height"};
    x = (sx_tensor *)&x;
    cr_assert_eq(read_x_text(text, NULL, other, 2, &x, path, sizeof path), SX_E_FORMAT);
    cr_assert_null(x);
    cr_assert(fx_msg_has("no column named 'height' (feature 1) in the header (line 1)"));
    cr_assert(fx_msg_has(path));
    /* a bad value in a column read is named; one in a column not read is not looked at */
    cr_assert_eq(
        read_x_text("id,width,depth\nA,1,2\nB,x,4\n", NULL, names, 2, &x, path, sizeof path),
        SX_E_FORMAT);
    cr_assert(fx_msg_has("line 3, column 2 (\"width\"): not a number: 'x'"));
    cr_assert_eq(
        read_x_text("id,width,depth\nA,1,2\nB,3,\n", NULL, names, 2, &x, path, sizeof path),
        SX_E_FORMAT);
    cr_assert(fx_msg_has("line 3, column 3 (\"depth\"): missing value"));
    cr_assert_eq(read_x_text("id,width,depth\nA,1,2\n3,4\n", NULL, names, 2, &x, path, sizeof path),
                 SX_E_FORMAT);
    cr_assert(fx_msg_has("line 3: 2 fields, want 3"));
    cr_assert_eq(read_x_text("id,width,depth\n", NULL, names, 2, &x, path, sizeof path),
                 SX_E_FORMAT);
    cr_assert(fx_msg_has("no data rows"));
}

Test(datasets_csv, read_x_by_position_with_or_without_the_label)
{
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.header = false;
    char path[64];
    sx_tensor *x = NULL;
    /* n_features columns: all of them */
    cr_assert_eq(read_x_text("1,2,3\n4,5,6\n", &p, NULL, 3, &x, path, sizeof path), SX_OK, "%s",
                 sx_last_error());
    expect_x(x, 2, 3, (double[]){1, 2, 3, 4, 5, 6});
    sx_tensor_free(x);
    /* n_features + 1 columns: the label column (the last, by default) left out, text or not */
    cr_assert_eq(read_x_text("1,2,3,cat\n4,5,6,dog\n", &p, NULL, 3, &x, path, sizeof path), SX_OK,
                 "%s", sx_last_error());
    expect_x(x, 2, 3, (double[]){1, 2, 3, 4, 5, 6});
    sx_tensor_free(x);
    p.label_column = 0;
    cr_assert_eq(read_x_text("cat,1,2,3\ndog,4,5,6\n", &p, NULL, 3, &x, path, sizeof path), SX_OK,
                 "%s", sx_last_error());
    expect_x(x, 2, 3, (double[]){1, 2, 3, 4, 5, 6});
    sx_tensor_free(x);
    /* a header and no feature names: by position too, the label found by name */
    sx_ds_csv_params h = sx_ds_csv_params_default();
    h.label_name = "y";
    cr_assert_eq(read_x_text("a,y,b\n1,cat,2\n", &h, NULL, 2, &x, path, sizeof path), SX_OK, "%s",
                 sx_last_error());
    expect_x(x, 1, 2, (double[]){1, 2});
    sx_tensor_free(x);
    /* another number of columns: both counts named */
    x = (sx_tensor *)&x;
    cr_assert_eq(read_x_text("1,2,3,4,5\n", &p, NULL, 3, &x, path, sizeof path), SX_E_FORMAT);
    cr_assert_null(x);
    cr_assert(fx_msg_has("line 1: 5 columns, want 3 (the features) or 4 (and the label)"));
    cr_assert(fx_msg_has(path));
    cr_assert_eq(read_x_text("1,2\n", &p, NULL, 3, &x, path, sizeof path), SX_E_FORMAT);
    cr_assert(fx_msg_has("2 columns, want 3"));
    /* n_features + 1 columns but no such label column */
    p.label_column = 9;
    cr_assert_eq(read_x_text("1,2,3,4\n", &p, NULL, 3, &x, path, sizeof path), SX_E_FORMAT);
    cr_assert(fx_msg_has("line 1: 4 columns for 3 features, and no label column to leave out"));
    h.label_name = "label";
    cr_assert_eq(read_x_text("a,y,b\n1,cat,2\n", &h, NULL, 2, &x, path, sizeof path), SX_E_FORMAT);
    cr_assert(fx_msg_has("3 columns for 2 features"));
    /* strict as the loader: line and column named */
    p.label_column = -1;
    cr_assert_eq(read_x_text("1,2,3\n4,,6\n", &p, NULL, 3, &x, path, sizeof path), SX_E_FORMAT);
    cr_assert(fx_msg_has("line 2, column 2: missing value"));
    cr_assert_eq(read_x_text("1,2,3\n4,5\n", &p, NULL, 3, &x, path, sizeof path), SX_E_FORMAT);
    cr_assert(fx_msg_has("line 2: 2 fields, want 3 (as line 1)"));
}

Test(datasets_csv, read_x_argument_errors)
{
    sx_tensor *x = (sx_tensor *)&x;
    const char *const names[2] = {"a", NULL};
    cr_assert_eq(sx_ds_csv_read_x(NULL, NULL, NULL, 2, &x), SX_E_ARG);
    cr_assert_null(x);
    cr_assert_eq(sx_ds_csv_read_x("x.csv", NULL, NULL, 2, NULL), SX_E_ARG);
    cr_assert_eq(sx_ds_csv_read_x("x.csv", NULL, NULL, 0, &x), SX_E_ARG);
    cr_assert(fx_msg_has("n_features 0"));
    cr_assert_eq(sx_ds_csv_read_x("x.csv", NULL, names, 2, &x), SX_E_ARG);
    cr_assert(fx_msg_has("features[1] is NULL"));
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.skip_lines = -2;
    cr_assert_eq(sx_ds_csv_read_x("x.csv", &p, NULL, 2, &x), SX_E_ARG);
    cr_assert_eq(sx_ds_csv_read_x("/nonexistent/dir/x.csv", NULL, NULL, 2, &x), SX_E_IO);
    cr_assert(fx_msg_has("/nonexistent/dir/x.csv: cannot open"));
    cr_assert_null(x);
}

/* Fail the k-th allocation for every k of sx_ds_csv_read_x and of a load with a class list:
 * SX_E_NOMEM naming the file, nothing leaked. */
Test(datasets_csv, out_of_memory_read_x_and_class_list)
{
    char path[64], text[4096];
    size_t at = (size_t)snprintf(text, sizeof text, "a,b,label\n");
    for (int i = 0; i < 40; i++)
        at += (size_t)snprintf(text + at, sizeof text - at, "%d,%d.5,c%d\n", i, -i, i % 5);
    put_file(path, sizeof path, text, -1);
    const char *const feats[2] = {"b", "a"};
    const char *const classes[6] = {"c4", "c3", "c2", "c1", "c0", "c9"};
    sx_ds_csv_params p = sx_ds_csv_params_default();
    p.label_name = "label";
    p.classes = classes;
    p.n_classes = 6;
    for (int which = 0; which < 2; which++) {
        long k;
        for (k = 0;; k++) {
            sx_tensor *x = NULL;
            sx_ds_source *s = NULL;
            tu_fail_after(k);
            sx_status st = which == 0 ? sx_ds_csv_read_x(path, NULL, feats, 2, &x)
                                      : sx_ds_csv_load(path, &p, &s);
            bool done = which == 0
                            ? st == SX_OK && x->shape[0] == 40 && sx_tensor_get(x, 2 * 39) == -39.5
                            : st == SX_OK && sx_ds_source_spec(s)->classes == 6 &&
                                  strcmp(sx_ds_source_x_name(s, 1), "b") == 0;
            sx_tensor_free(x);
            sx_ds_source_free(s);
            long live = tu_live_allocs();
            tu_fail_reset();
            cr_assert_eq(live, 0, "which=%d k=%ld leaked %ld allocations", which, k, live);
            if (st == SX_OK) {
                cr_assert(done, "which=%d: the result under the failing allocator is right", which);
                break;
            }
            cr_assert_eq(st, SX_E_NOMEM, "which=%d k=%ld: %s", which, k, sx_last_error());
            cr_assert(fx_msg_has(path));
        }
        cr_assert_gt(k, 5, "which=%d makes several allocations", which);
    }
    unlink(path);
}
