/* test_npy.c: .npy files (datasets/npy.c) against fixtures written by Debian's NumPy
 * (tests/datasets/npy/make_fixtures.py documents them: every valid file holds a formula of its
 * flat index), round trips of every element type, files strix refuses, and the data set
 * source over two files. */
#include "testutil.h"

#include <dirent.h>
#include <libgen.h>
#include <math.h>
#include <sx_datasets.h>
#include <sys/stat.h>
#include <unistd.h>

static void fixture(const char *name, char *buf, size_t n)
{
    char file[1024];
    snprintf(file, sizeof file, "%s", __FILE__);
    snprintf(buf, n, "%s/npy/%s", dirname(file), name);
}

/* The fixtures' values: make_fixtures.py's vals(), quartered for floats. */
static double want(sx_ds_npy_type t, int64_t i)
{
    double v = (double)((i * 7 + 3) % 23);
    switch (t) {
    case SX_DS_NPY_BOOL:
        return (double)(i % 2);
    case SX_DS_NPY_U8:
    case SX_DS_NPY_U16:
    case SX_DS_NPY_U32:
    case SX_DS_NPY_U64:
        return v;
    case SX_DS_NPY_F32:
    case SX_DS_NPY_F64:
        return (v - 5) / 4;
    default:
        return v - 5;
    }
}

static sx_ds_npy *read_fixture(const char *name)
{
    char path[1100];
    fixture(name, path, sizeof path);
    sx_ds_npy *a = NULL;
    sx_status s = sx_ds_npy_read_raw(path, &a);
    cr_assert_eq(s, SX_OK, "%s: %s", name, sx_last_error());
    return a;
}

static void check_values(const sx_ds_npy *a, const char *name)
{
    for (int64_t i = 0; i < a->count; i++)
        cr_assert_eq(sx_ds_npy_get(a, i), want(a->type, i), "%s[%lld] = %g, want %g", name,
                     (long long)i, sx_ds_npy_get(a, i), want(a->type, i));
}

static const struct {
    const char *name;
    sx_ds_npy_type type;
} typed[] = {
    {"le_f4.npy", SX_DS_NPY_F32}, {"le_f8.npy", SX_DS_NPY_F64},  {"le_i1.npy", SX_DS_NPY_I8},
    {"le_u1.npy", SX_DS_NPY_U8},  {"le_i2.npy", SX_DS_NPY_I16},  {"le_u2.npy", SX_DS_NPY_U16},
    {"le_i4.npy", SX_DS_NPY_I32}, {"le_u4.npy", SX_DS_NPY_U32},  {"le_i8.npy", SX_DS_NPY_I64},
    {"le_u8.npy", SX_DS_NPY_U64}, {"le_b1.npy", SX_DS_NPY_BOOL}, {"be_f4.npy", SX_DS_NPY_F32},
    {"be_f8.npy", SX_DS_NPY_F64}, {"be_i2.npy", SX_DS_NPY_I16},  {"be_u2.npy", SX_DS_NPY_U16},
    {"be_i4.npy", SX_DS_NPY_I32}, {"be_u4.npy", SX_DS_NPY_U32},  {"be_i8.npy", SX_DS_NPY_I64},
    {"be_u8.npy", SX_DS_NPY_U64},
};

Test(datasets_npy, numpy_files_of_every_type_and_byte_order)
{
    for (size_t k = 0; k < sizeof typed / sizeof typed[0]; k++) {
        sx_ds_npy *a = read_fixture(typed[k].name);
        cr_assert_eq(a->type, typed[k].type, "%s: type %s", typed[k].name,
                     sx_ds_npy_type_name(a->type));
        bool le = typed[k].name[0] == 'l';
        cr_assert_eq(a->rank, le ? 3 : 2);
        cr_assert_eq(a->dims[0], le ? 2 : 3);
        cr_assert_eq(a->dims[1], le ? 3 : 5);
        cr_assert_eq(a->dims[2], le ? 4 : 1);
        cr_assert_eq(a->count, le ? 24 : 15);
        check_values(a, typed[k].name);
        sx_ds_npy_free(a);
    }
}

Test(datasets_npy, versions_scalars_and_empty_arrays)
{
    const char *names[] = {"v2_f4.npy", "v3_f4.npy"};
    for (int k = 0; k < 2; k++) {
        sx_ds_npy *a = read_fixture(names[k]);
        cr_assert(a->type == SX_DS_NPY_F32 && a->rank == 2 && a->dims[0] == 4 && a->dims[1] == 2);
        check_values(a, names[k]);
        sx_ds_npy_free(a);
    }
    sx_ds_npy *s = read_fixture("scalar_f8.npy");
    cr_assert(s->rank == 0 && s->count == 1 && sx_ds_npy_get(s, 0) == want(SX_DS_NPY_F64, 0));
    sx_ds_npy_free(s);
    sx_ds_npy *e = read_fixture("empty_f4.npy");
    cr_assert(e->rank == 2 && e->dims[0] == 0 && e->dims[1] == 3 && e->count == 0);
    sx_ds_npy_free(e);
    sx_ds_npy *v = read_fixture("vector_i8.npy");
    cr_assert(v->rank == 1 && v->dims[0] == 6 && v->type == SX_DS_NPY_I64);
    check_values(v, "vector_i8.npy");
    sx_ds_npy_free(v);
}

Test(datasets_npy, to_tensor_converts_every_element)
{
    char path[1100];
    fixture("be_i8.npy", path, sizeof path);
    sx_tensor *t = NULL;
    cr_assert_eq(sx_ds_npy_read(path, SX_F32, &t), SX_OK, "%s", sx_last_error());
    cr_assert(t->dtype == SX_F32 && t->rank == 2 && t->shape[0] == 3 && t->shape[1] == 5);
    for (int64_t i = 0; i < t->size; i++)
        cr_assert_eq(SX_F32P(t)[i], (float)want(SX_DS_NPY_I64, i));
    sx_tensor_free(t);
    sx_ds_npy *a = read_fixture("le_u1.npy");
    cr_assert_eq(sx_ds_npy_to_tensor(a, SX_F64, 0.5, &t), SX_OK);
    for (int64_t i = 0; i < t->size; i++)
        cr_assert_eq(SX_F64P(t)[i], want(SX_DS_NPY_U8, i) * 0.5);
    sx_tensor_free(t);
    t = (sx_tensor *)1;
    cr_assert_eq(sx_ds_npy_to_tensor(a, SX_F64, NAN, &t), SX_E_ARG);
    cr_assert_null(t);
    sx_ds_npy_free(a);
}

/* Every type written and read back bit for bit, at several ranks. */
Test(datasets_npy, round_trip_every_type)
{
    char path[] = "/tmp/sx_test_npy_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    uint8_t data[8 * 60];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 37 + 11);
    int64_t shapes[3][3] = {{60, 1, 1}, {3, 20, 1}, {2, 3, 10}};
    for (int t = SX_DS_NPY_BOOL; t <= SX_DS_NPY_F64; t++) {
        for (int r = 0; r <= 3; r++) {
            const int64_t *shape = r > 0 ? shapes[r - 1] : NULL;
            uint8_t in[8 * 60];
            memcpy(in, data, sizeof in);
            if (t == SX_DS_NPY_BOOL)
                for (int i = 0; i < 60; i++)
                    in[i] = in[i] & 1;
            cr_assert_eq(sx_ds_npy_write(path, (sx_ds_npy_type)t, r, shape, in), SX_OK, "%s",
                         sx_last_error());
            sx_ds_npy *a = NULL;
            cr_assert_eq(sx_ds_npy_read_raw(path, &a), SX_OK, "%s", sx_last_error());
            cr_assert(a->type == (sx_ds_npy_type)t && a->rank == r);
            for (int k = 0; k < r; k++)
                cr_assert_eq(a->dims[k], shape[k]);
            cr_assert_eq(a->count, r == 0 ? 1 : 60);
            cr_assert_eq(memcmp(a->data, in, (size_t)a->count * sx_ds_npy_type_size(a->type)), 0,
                         "type %s rank %d", sx_ds_npy_type_name((sx_ds_npy_type)t), r);
            sx_ds_npy_free(a);
        }
    }
    unlink(path);
}

/* NumPy reads what strix writes (when Debian's python3-numpy is there). */
Test(datasets_npy, numpy_reads_written_files)
{
    if (access("/usr/bin/python3", X_OK) != 0 ||
        system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
        cr_skip_test("no /usr/bin/python3 with numpy");
    char path[] = "/tmp/sx_test_npy_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    int64_t shape[2] = {3, 4};
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_new(SX_F32, 2, shape, &t), SX_OK);
    for (int i = 0; i < 12; i++)
        SX_F32P(t)[i] = (float)i / 8.0f - 0.5f;
    cr_assert_eq(sx_ds_npy_write_tensor(path, t), SX_OK, "%s", sx_last_error());
    sx_tensor_free(t);
    char cmd[400];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import numpy as n, sys; a = n.load('%s'); "
             "sys.exit(0 if a.dtype == n.float32 and a.shape == (3, 4) and "
             "(a.ravel() == n.arange(12, dtype=n.float32) / 8 - 0.5).all() else 1)\"",
             path);
    cr_assert_eq(system(cmd), 0, "numpy did not read back %s", path);
    unlink(path);
}

static const struct {
    const char *name, *message;
} refused[] = {
    {"bad_fortran.npy", "Fortran-order"},      {"bad_object.npy", "object arrays"},
    {"bad_structured.npy", "structured"},      {"bad_complex.npy", "'<c8' is not supported"},
    {"bad_f16.npy", "'<f2' is not supported"}, {"bad_rank9.npy", "rank above 8"},
    {"bad_truncated.npy", "truncated"},        {"bad_trailing.npy", "trailing bytes"},
    {"bad_header_cut.npy", "header"},          {"bad_absurd.npy", "truncated"},
};

Test(datasets_npy, refused_files_name_the_file_and_problem)
{
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        char path[1100];
        fixture(refused[k].name, path, sizeof path);
        sx_ds_npy *a = (sx_ds_npy *)1;
        cr_assert_eq(sx_ds_npy_read_raw(path, &a), SX_E_FORMAT, "%s", refused[k].name);
        cr_assert_null(a);
        const char *msg = sx_last_error();
        cr_assert(strncmp(msg, path, strlen(path)) == 0, "message '%s' does not name the file",
                  msg);
        cr_assert(strstr(msg, refused[k].message) != NULL, "%s: message '%s' lacks '%s'",
                  refused[k].name, msg, refused[k].message);
    }
}

/* Headers written by hand: each a clear SX_E_FORMAT from memory. */
Test(datasets_npy, malformed_headers_from_memory)
{
    const char *dicts[] = {
        "{'descr': '<f4', 'fortran_order': False}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
        "{'descr': 'f4', 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x",
        "{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}",
        "['descr', '<f4']",
        "",
    };
    for (size_t k = 0; k < sizeof dicts / sizeof dicts[0]; k++) {
        uint8_t buf[256];
        size_t hl = strlen(dicts[k]);
        memcpy(buf, "\x93NUMPY\x01\x00", 8);
        buf[8] = (uint8_t)hl;
        buf[9] = 0;
        memcpy(buf + 10, dicts[k], hl);
        memset(buf + 10 + hl, 0, 8);
        sx_ds_npy *a = (sx_ds_npy *)1;
        cr_assert_eq(sx_ds_npy_parse(buf, 10 + hl + 8, "hand", &a), SX_E_FORMAT, "%s", dicts[k]);
        cr_assert_null(a);
        cr_assert(strncmp(sx_last_error(), "hand: ", 6) == 0, "%s", sx_last_error());
    }
    /* the same prefix with a good dictionary is read */
    const char *good = "{'shape': (2,), 'fortran_order': False, 'descr': '<f4', }";
    uint8_t buf[256];
    size_t hl = strlen(good);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)hl;
    buf[9] = 0;
    memcpy(buf + 10, good, hl);
    float v[2] = {1.5f, -2.0f};
    memcpy(buf + 10 + hl, v, 8);
    sx_ds_npy *a = NULL;
    cr_assert_eq(sx_ds_npy_parse(buf, 10 + hl + 8, "hand", &a), SX_OK, "%s", sx_last_error());
    cr_assert(a->count == 2 && sx_ds_npy_get(a, 0) == 1.5 && sx_ds_npy_get(a, 1) == -2.0);
    sx_ds_npy_free(a);
    /* versions and magic */
    buf[6] = 4;
    cr_assert_eq(sx_ds_npy_parse(buf, 10 + hl + 8, "hand", &a), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), "version 4.0") != NULL, "%s", sx_last_error());
    buf[0] = 'x';
    cr_assert_eq(sx_ds_npy_parse(buf, 10 + hl + 8, "hand", &a), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), "bad magic") != NULL);
    cr_assert_eq(sx_ds_npy_parse(buf, 0, "hand", &a), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), "empty file") != NULL);
}

Test(datasets_npy, missing_file_and_bad_arguments)
{
    sx_ds_npy *a = (sx_ds_npy *)1;
    cr_assert_eq(sx_ds_npy_read_raw("/nonexistent/x.npy", &a), SX_E_IO);
    cr_assert_null(a);
    cr_assert(strstr(sx_last_error(), "/nonexistent/x.npy: cannot open") != NULL);
    cr_assert_eq(sx_ds_npy_read_raw("/tmp", &a), SX_E_IO);
    cr_assert(strstr(sx_last_error(), "is a directory") != NULL);
    cr_assert_eq(sx_ds_npy_read_raw(NULL, &a), SX_E_ARG);
    float x = 1;
    cr_assert_eq(sx_ds_npy_write("/nonexistent/dir/x.npy", SX_DS_NPY_F32, 0, NULL, &x), SX_E_IO);
    cr_assert(strstr(sx_last_error(), "/nonexistent/dir/x.npy: cannot write") != NULL);
    cr_assert_eq(sx_ds_npy_write("/tmp/x.npy", (sx_ds_npy_type)99, 0, NULL, &x), SX_E_ARG);
    cr_assert_eq(sx_ds_npy_write_tensor("/tmp/x.npy", NULL), SX_E_ARG);
}

/* A failed write leaves what was at the path as it was, and no temporary file behind: here the
 * path is a folder, so the final rename fails after the data went to the temporary file. */
Test(datasets_npy, failed_write_keeps_the_old_file)
{
    char dir[] = "/tmp/sx_test_npy_dir_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[200], inner[240];
    snprintf(path, sizeof path, "%s/a.npy", dir);
    snprintf(inner, sizeof inner, "%s/keep", path);
    cr_assert_eq(mkdir(path, 0700), 0);
    FILE *f = fopen(inner, "w");
    cr_assert(f != NULL && fclose(f) == 0);
    float x[3] = {1, 2, 3};
    int64_t shape[1] = {3};
    cr_assert_eq(sx_ds_npy_write(path, SX_DS_NPY_F32, 1, shape, x), SX_E_IO);
    cr_assert(strstr(sx_last_error(), "a.npy: cannot write") != NULL, "%s", sx_last_error());
    cr_assert_eq(access(inner, F_OK), 0, "the folder's content is gone");
    DIR *d = opendir(dir);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        entries += e->d_name[0] != '.';
    closedir(d);
    cr_assert_eq(entries, 1, "a temporary file was left behind");
    /* a shape whose bytes overflow: refused before anything is written */
    int64_t huge[2] = {INT64_MAX / 2, 4};
    cr_assert_neq(sx_ds_npy_write(inner, SX_DS_NPY_F32, 2, huge, x), SX_OK);
    unlink(inner);
    rmdir(path);
    rmdir(dir);
}

Test(datasets_npy, source_over_two_files)
{
    char xp[1100], yp[1100];
    fixture("pair_x.npy", xp, sizeof xp);
    fixture("pair_y.npy", yp, sizeof yp);
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_npy(xp, yp, 3, &s), SX_OK, "%s", sx_last_error());
    const sx_ds_spec *sp = sx_ds_source_spec(s);
    cr_assert_eq(sx_ds_source_count(s), 6);
    cr_assert(sp->x_type == SX_DS_F32 && sp->x_rank == 2 && sp->x_shape[0] == 2);
    cr_assert(sp->y_type == SX_DS_I32 && sp->y_rank == 0 && sp->classes == 3);
    for (int64_t i = 0; i < 6; i++) {
        float x[4];
        int32_t y;
        cr_assert_eq(sx_ds_source_get(s, i, x, &y), SX_OK);
        cr_assert_eq(y, i % 3);
        for (int k = 0; k < 4; k++)
            cr_assert_eq(x[k], (float)(i * 4 + k) / 8.0f);
    }
    sx_ds_source_free(s);
    /* a loader batches it */
    cr_assert_eq(sx_ds_source_npy(xp, yp, 3, &s), SX_OK);
    sx_ds_loader_params lp = sx_ds_loader_params_default();
    lp.batch_size = 6;
    lp.shuffle = false;
    sx_ds_loader *l = NULL;
    cr_assert_eq(sx_ds_loader_new(s, &lp, &l), SX_OK);
    sx_tensor *x = tu_zeros(SX_F32, 2, (int64_t[]){6, 4}), *y = tu_zeros(SX_F32, 1, (int64_t[]){6});
    int64_t count = 0;
    cr_assert_eq(sx_ds_loader_next(l, x, y, &count), SX_OK, "%s", sx_last_error());
    cr_assert(count == 6 && SX_F32P(y)[4] == 1.0f && SX_F32P(x)[23] == 23.0f / 8);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_ds_loader_free(l);
    sx_ds_source_free(s);
    /* mismatched files */
    char other[1100];
    fixture("le_f4.npy", other, sizeof other);
    s = (sx_ds_source *)1;
    cr_assert_eq(sx_ds_source_npy(xp, other, 0, &s), SX_E_SHAPE);
    cr_assert_null(s);
    cr_assert(strstr(sx_last_error(), "pair_x.npy") != NULL, "%s", sx_last_error());
    fixture("scalar_f8.npy", other, sizeof other);
    cr_assert_eq(sx_ds_source_npy(other, yp, 3, &s), SX_E_SHAPE);
    cr_assert_eq(sx_ds_source_npy(xp, yp, -1, &s), SX_E_ARG);
}

/* u64 values beyond 2^53 cannot be held exactly by a data set: SX_E_RANGE naming the file. */
Test(datasets_npy, source_refuses_inexact_integers)
{
    char dir[] = "/tmp/sx_test_npy_dir_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char xp[200], yp[200];
    snprintf(xp, sizeof xp, "%s/x.npy", dir);
    snprintf(yp, sizeof yp, "%s/y.npy", dir);
    uint64_t y[2] = {1, ((uint64_t)1 << 60) + 1};
    float x[2] = {0, 1};
    cr_assert_eq(sx_ds_npy_write(xp, SX_DS_NPY_F32, 1, (int64_t[]){2}, x), SX_OK);
    cr_assert_eq(sx_ds_npy_write(yp, SX_DS_NPY_U64, 1, (int64_t[]){2}, y), SX_OK);
    sx_ds_source *s = (sx_ds_source *)1;
    cr_assert_eq(sx_ds_source_npy(xp, yp, 0, &s), SX_E_RANGE);
    cr_assert_null(s);
    cr_assert(strstr(sx_last_error(), "y.npy: element 1") != NULL, "%s", sx_last_error());
    /* u32 values above 2^31 become f64 exactly */
    uint32_t yy[2] = {7, 4000000000u};
    cr_assert_eq(sx_ds_npy_write(yp, SX_DS_NPY_U32, 1, (int64_t[]){2}, yy), SX_OK);
    cr_assert_eq(sx_ds_source_npy(xp, yp, 0, &s), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_source_spec(s)->y_type, SX_DS_F64);
    double v;
    cr_assert_eq(sx_ds_source_get(s, 1, NULL, &v), SX_OK);
    cr_assert_eq(v, 4000000000.0);
    sx_ds_source_free(s);
    unlink(xp);
    unlink(yp);
    rmdir(dir);
}

/* Out of memory at every allocation of a read and of a source: an error, nothing leaked. */
Test(datasets_npy, out_of_memory_at_every_allocation)
{
    char xp[1100], yp[1100];
    fixture("pair_x.npy", xp, sizeof xp);
    fixture("pair_y.npy", yp, sizeof yp);
    for (long k = 0; k < 20; k++) {
        tu_fail_after(k);
        sx_ds_source *s = NULL;
        sx_status st = sx_ds_source_npy(xp, yp, 3, &s);
        long live = tu_live_allocs();
        sx_ds_source_free(s);
        tu_fail_reset();
        if (st == SX_OK)
            break;
        cr_assert_eq(st, SX_E_NOMEM, "k=%ld: %s", k, sx_last_error());
        cr_assert_eq(live, 0, "k=%ld: %ld allocations leaked", k, live);
    }
}
