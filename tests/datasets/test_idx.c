/* The IDX reader: every element type read back exactly from raw and gzip files and buffers,
 * conversion with a scale, the first-N limit, every malformed file kind (right status, a
 * message naming the file, nothing returned), argument errors, and out-of-memory injection. */
#include "idx_fixture.h"

#include <math.h>
#include <sys/stat.h>

static const int types[6] = {0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E};

/* The native element i of a read file, as a double. */
static double native_at(const sx_ds_idx *x, int64_t i)
{
    switch ((int)x->type) {
    case 0x08:
        return ((const uint8_t *)x->data)[i];
    case 0x09:
        return ((const int8_t *)x->data)[i];
    case 0x0B:
        return ((const int16_t *)x->data)[i];
    case 0x0C:
        return ((const int32_t *)x->data)[i];
    case 0x0D:
        return (double)((const float *)x->data)[i];
    default:
        return ((const double *)x->data)[i];
    }
}

/* Check a read file against the values it was written from. */
static void check_idx(const sx_ds_idx *x, int type, int rank, const uint32_t *dims, const double *v,
                      int64_t keep)
{
    cr_assert_eq((int)x->type, type);
    cr_assert_eq(x->rank, rank);
    cr_assert_eq(x->file_dim0, dims[0]);
    cr_assert_eq(x->dims[0], keep);
    int64_t count = keep;
    for (int i = 1; i < rank; i++) {
        cr_assert_eq(x->dims[i], dims[i]);
        count *= dims[i];
    }
    for (int i = rank; i < SX_MAX_RANK; i++)
        cr_assert_eq(x->dims[i], 1);
    cr_assert_eq(x->count, count);
    for (int64_t i = 0; i < count; i++)
        cr_assert_eq(native_at(x, i), v[i], "type 0x%02x element %lld: %.17g vs %.17g", type,
                     (long long)i, native_at(x, i), v[i]);
}

/* Check a converted tensor: out[i] = (dtype)(v[i] * scale), computed here in double. */
static void check_tensor(const sx_tensor *t, sx_dtype dt, int rank, const uint32_t *dims,
                         const double *v, int64_t keep, double scale)
{
    cr_assert_eq(t->dtype, dt);
    cr_assert_eq(t->rank, rank);
    cr_assert_eq(t->shape[0], keep);
    for (int i = 1; i < rank; i++)
        cr_assert_eq(t->shape[i], dims[i]);
    for (int64_t i = 0; i < t->size; i++) {
        double want = dt == SX_F32 ? (double)(float)(v[i] * scale) : v[i] * scale;
        cr_assert_eq(sx_tensor_get(t, i), want, "element %lld: %.17g vs %.17g", (long long)i,
                     sx_tensor_get(t, i), want);
    }
}

Test(datasets_idx, type_names_and_sizes)
{
    const char *names[6] = {"u8", "i8", "i16", "i32", "f32", "f64"};
    const size_t sizes[6] = {1, 1, 2, 4, 4, 8};
    for (int i = 0; i < 6; i++) {
        cr_assert_str_eq(sx_ds_type_name((sx_ds_type)types[i]), names[i]);
        cr_assert_eq(sx_ds_type_size((sx_ds_type)types[i]), sizes[i]);
    }
    cr_assert_str_eq(sx_ds_type_name((sx_ds_type)0x0A), "?");
    cr_assert_eq(sx_ds_type_size((sx_ds_type)0x0A), 0);
}

/* Every element type, random ranks 1..4 and dims, raw and gzip, file and memory: the native
 * values, and conversions to f32 and f64 with scales 1 and 0.25, all exact. */
Test(datasets_idx, every_type_reads_back_exactly)
{
    char dir[64], path[512];
    fx_dir_new(dir);
    sx_rng rng;
    sx_rng_seed(&rng, 6);
    for (int t = 0; t < 6; t++) {
        for (int trial = 0; trial < 3; trial++) {
            int rank = 1 + (int)sx_rng_below(&rng, 4);
            uint32_t dims[4];
            size_t n = 1;
            for (int i = 0; i < rank; i++) {
                dims[i] = 1 + (uint32_t)sx_rng_below(&rng, 6);
                n *= dims[i];
            }
            double *v = malloc(n * sizeof *v);
            for (size_t i = 0; i < n; i++)
                v[i] = fx_rand_value(&rng, types[t]);
            fx_buf b = fx_idx(types[t], rank, dims, v, n);
            fx_buf z = fx_gzip(&b);
            for (int gz = 0; gz < 2; gz++) {
                fx_write_idx(dir, gz ? "a.gz" : "a", &b, gz, path);
                sx_ds_idx *x = NULL;
                cr_assert_eq(sx_ds_idx_read_raw(path, 0, &x), SX_OK, "%s", sx_last_error());
                check_idx(x, types[t], rank, dims, v, dims[0]);
                sx_ds_idx_free(x);
                const fx_buf *m = gz ? &z : &b;
                cr_assert_eq(sx_ds_idx_parse(m->p, m->len, "buf", 0, &x), SX_OK, "%s",
                             sx_last_error());
                check_idx(x, types[t], rank, dims, v, dims[0]);
                for (int d = 0; d < 2; d++) {
                    sx_dtype dt = d ? SX_F64 : SX_F32;
                    double scale = trial == 1 ? 0.25 : 1.0;
                    sx_tensor *out = NULL;
                    cr_assert_eq(sx_ds_idx_read(path, dt, scale, 0, &out), SX_OK, "%s",
                                 sx_last_error());
                    check_tensor(out, dt, rank, dims, v, dims[0], scale);
                    sx_tensor_free(out);
                    cr_assert_eq(sx_ds_idx_to_tensor(x, dt, scale, &out), SX_OK, "%s",
                                 sx_last_error());
                    check_tensor(out, dt, rank, dims, v, dims[0], scale);
                    sx_tensor_free(out);
                }
                sx_ds_idx_free(x);
            }
            fx_free(&b);
            fx_free(&z);
            free(v);
        }
    }
    fx_dir_remove(dir);
}

/* Larger than the reader's chunk, so the chunked conversion loop and gzip streaming run more
 * than once; rank 8 works. */
Test(datasets_idx, large_and_rank_8)
{
    char dir[64], path[512];
    fx_dir_new(dir);
    sx_rng rng;
    sx_rng_seed(&rng, 7);
    uint32_t dims[3] = {300, 100, 50}; /* 1.5M i8 elements */
    size_t n = 300 * 100 * 50;
    double *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (double)((int)(i * 7919 % 251) - 125); /* compressible but not constant */
    v[12345] = fx_rand_value(&rng, 0x09);
    fx_buf b = fx_idx(0x09, 3, dims, v, n);
    fx_write_idx(dir, "big.gz", &b, true, path);
    sx_tensor *t = NULL;
    cr_assert_eq(sx_ds_idx_read(path, SX_F32, 1.0 / 3, 0, &t), SX_OK, "%s", sx_last_error());
    check_tensor(t, SX_F32, 3, dims, v, 300, 1.0 / 3);
    sx_tensor_free(t);
    cr_assert_eq(sx_ds_idx_read(path, SX_F64, 1.0, 7, &t), SX_OK, "%s", sx_last_error());
    check_tensor(t, SX_F64, 3, dims, v, 7, 1.0);
    sx_tensor_free(t);
    fx_free(&b);
    free(v);

    uint32_t d8[8] = {2, 1, 3, 1, 2, 1, 1, 2};
    double v8[24];
    for (int i = 0; i < 24; i++)
        v8[i] = fx_rand_value(&rng, 0x0B);
    b = fx_idx(0x0B, 8, d8, v8, 24);
    sx_ds_idx *x = NULL;
    cr_assert_eq(sx_ds_idx_parse(b.p, b.len, NULL, 0, &x), SX_OK, "%s", sx_last_error());
    check_idx(x, 0x0B, 8, d8, v8, 2);
    sx_ds_idx_free(x);
    fx_free(&b);
    fx_dir_remove(dir);
}

/* limit > 0 keeps the first entries along axis 0; more than there are, or <= 0, keeps all. */
Test(datasets_idx, first_n_limit)
{
    char dir[64], path[512];
    fx_dir_new(dir);
    uint32_t dims[2] = {5, 3};
    double v[15];
    for (int i = 0; i < 15; i++)
        v[i] = 10 * i;
    fx_buf b = fx_idx(0x0C, 2, dims, v, 15);
    for (int gz = 0; gz < 2; gz++) {
        fx_write_idx(dir, "l", &b, gz, path);
        const int64_t limits[5] = {1, 2, 5, 6, -3};
        const int64_t keeps[5] = {1, 2, 5, 5, 5};
        for (int k = 0; k < 5; k++) {
            sx_ds_idx *x = NULL;
            cr_assert_eq(sx_ds_idx_read_raw(path, limits[k], &x), SX_OK, "%s", sx_last_error());
            check_idx(x, 0x0C, 2, dims, v, keeps[k]);
            sx_ds_idx_free(x);
            sx_tensor *t = NULL;
            cr_assert_eq(sx_ds_idx_read(path, SX_F64, 1.0, limits[k], &t), SX_OK);
            check_tensor(t, SX_F64, 2, dims, v, keeps[k], 1.0);
            sx_tensor_free(t);
        }
    }
    fx_free(&b);
    fx_dir_remove(dir);
}

/* ---------------------------------------------------------------- malformed files */

/* Expect every entry point to reject the file at `path` (and the same bytes in memory when
 * `mem` is given) with status `want` and a message naming the file and containing `what`. */
static void expect_bad(const char *path, const fx_buf *mem, sx_status want, const char *what)
{
    sx_ds_idx *x = (sx_ds_idx *)1;
    sx_error_clear();
    cr_assert_eq(sx_ds_idx_read_raw(path, 0, &x), want, "%s: got %s (%s)", path,
                 sx_status_str(sx_ds_idx_read_raw(path, 0, &x)), sx_last_error());
    cr_assert_null(x);
    cr_assert(fx_msg_has(path));
    cr_assert(fx_msg_has(what));
    sx_tensor *t = (sx_tensor *)1;
    cr_assert_eq(sx_ds_idx_read(path, SX_F32, 1.0, 0, &t), want);
    cr_assert_null(t);
    cr_assert(fx_msg_has(what));
    /* With a limit the rest is still checked. */
    cr_assert_eq(sx_ds_idx_read(path, SX_F64, 1.0, 1, &t), want);
    cr_assert_null(t);
    if (mem != NULL) {
        x = (sx_ds_idx *)1;
        cr_assert_eq(sx_ds_idx_parse(mem->p, mem->len, "membuf", 0, &x), want, "memory: %s",
                     sx_last_error());
        cr_assert_null(x);
        cr_assert(fx_msg_has("membuf"));
        cr_assert(fx_msg_has(what));
    }
}

/* Write b raw and gzip and expect both (file and memory) to fail alike. */
static void expect_bad_both(const char *dir, const fx_buf *b, sx_status want, const char *what)
{
    char path[512];
    fx_write_idx(dir, "bad", b, false, path);
    expect_bad(path, b, want, what);
    fx_buf z = fx_gzip(b);
    fx_write(dir, "bad.gz", z.p, z.len, path);
    expect_bad(path, &z, want, what);
    fx_free(&z);
}

Test(datasets_idx, bad_headers)
{
    char dir[64];
    fx_dir_new(dir);
    uint32_t dims[9] = {2, 3, 1, 1, 1, 1, 1, 1, 1};
    fx_buf b = {0};

    /* bad magic */
    uint8_t magic[4] = {0x01, 0x00, 0x08, 0x01};
    fx_put(&b, magic, 4);
    fx_put_be(&b, 1, 4);
    fx_put_be(&b, 7, 1);
    expect_bad_both(dir, &b, SX_E_FORMAT, "bad magic");
    fx_free(&b);

    /* unknown type codes: 0x0A sits between known ones, 0x00 and 0xFF outside */
    const int bad_types[3] = {0x0A, 0x00, 0xFF};
    for (int i = 0; i < 3; i++) {
        fx_header(&b, bad_types[i], 1, dims);
        fx_put_be(&b, 0, 2);
        expect_bad_both(dir, &b, SX_E_FORMAT, "unknown element type");
        fx_free(&b);
    }

    /* rank 0 and 9 */
    fx_header(&b, 0x08, 0, dims);
    fx_put_be(&b, 5, 1);
    expect_bad_both(dir, &b, SX_E_FORMAT, "rank 0");
    fx_free(&b);
    fx_header(&b, 0x08, 9, dims);
    for (int i = 0; i < 6; i++)
        fx_put_be(&b, (uint64_t)i, 1);
    expect_bad_both(dir, &b, SX_E_FORMAT, "rank 9");
    fx_free(&b);

    /* a zero dimension */
    uint32_t zero[3] = {4, 0, 2};
    fx_header(&b, 0x08, 3, zero);
    expect_bad_both(dir, &b, SX_E_FORMAT, "dimension 1 of (4,0,2) is 0");
    fx_free(&b);

    /* element count over 2^63: (2^32-1)^2 * 3 */
    uint32_t huge[3] = {0xFFFFFFFFu, 0xFFFFFFFFu, 3};
    fx_header(&b, 0x08, 3, huge);
    expect_bad_both(dir, &b, SX_E_FORMAT, "overflow 64 bits");
    fx_free(&b);
    /* element count fits (2^62), bytes do not (f64: 2^65) */
    uint32_t big[2] = {0x80000000u, 0x80000000u};
    fx_header(&b, 0x0E, 2, big);
    expect_bad_both(dir, &b, SX_E_FORMAT, "overflow 64 bits");
    fx_free(&b);
    /* every dim at the maximum, rank 8 */
    uint32_t max8[8];
    for (int i = 0; i < 8; i++)
        max8[i] = 0xFFFFFFFFu;
    fx_header(&b, 0x08, 8, max8);
    expect_bad_both(dir, &b, SX_E_FORMAT, "overflow 64 bits");
    fx_free(&b);

    /* truncated headers: 3 bytes; rank 3 with only 5 bytes of dims */
    uint8_t three[3] = {0, 0, 8};
    fx_put(&b, three, 3);
    expect_bad_both(dir, &b, SX_E_FORMAT, "truncated header");
    fx_free(&b);
    uint8_t partial[9] = {0, 0, 8, 3, 0, 0, 0, 2, 0};
    fx_put(&b, partial, 9);
    expect_bad_both(dir, &b, SX_E_FORMAT, "truncated header");
    fx_free(&b);
    fx_dir_remove(dir);
}

Test(datasets_idx, payload_size_must_match)
{
    char dir[64], path[512];
    fx_dir_new(dir);
    uint32_t dims[2] = {4, 5};
    double v[20] = {0};
    fx_buf b = {0};

    /* The header claims more than the file holds: 20 u8 announced, 10 present. For a raw file
     * this is known from its size before reading; a gzip file is read until it ends. */
    fx_header(&b, 0x08, 2, dims);
    for (int i = 0; i < 10; i++)
        fx_elem(&b, 0x08, i);
    fx_write_idx(dir, "short", &b, false, path);
    expect_bad(path, &b, SX_E_FORMAT, "but only 10 follow");
    fx_buf z = fx_gzip(&b);
    fx_write(dir, "short.gz", z.p, z.len, path);
    expect_bad(path, &z, SX_E_FORMAT, "the file ends after 10");
    fx_free(&z);
    fx_free(&b);

    /* A header announcing far more than the compressed file can expand to is refused before
     * any allocation (a 60-byte file cannot make us allocate 4 GB). */
    uint32_t lots[2] = {65536, 65536};
    fx_header(&b, 0x08, 2, lots);
    fx_elem(&b, 0x08, 1);
    z = fx_gzip(&b);
    fx_write(dir, "bomb.gz", z.p, z.len, path);
    expect_bad(path, &z, SX_E_FORMAT, "more than a gzip file of");
    fx_free(&z);
    fx_write_idx(dir, "bomb", &b, false, path);
    expect_bad(path, &b, SX_E_FORMAT, "but only 1 follow");
    fx_free(&b);

    /* trailing garbage: 3 bytes more than announced */
    b = fx_idx(0x08, 2, dims, v, 20);
    fx_put_be(&b, 0xABCDEF, 3);
    expect_bad_both(dir, &b, SX_E_FORMAT, "3 bytes of trailing data");
    fx_free(&b);
    /* one f64 element too many */
    b = fx_idx(0x0E, 2, dims, v, 20);
    fx_elem(&b, 0x0E, 1.5);
    expect_bad_both(dir, &b, SX_E_FORMAT, "8 bytes of trailing data");
    fx_free(&b);
    fx_dir_remove(dir);
}

Test(datasets_idx, damaged_gzip_streams)
{
    char dir[64], path[512];
    fx_dir_new(dir);
    sx_rng rng;
    sx_rng_seed(&rng, 11);
    uint32_t dims[2] = {50, 40};
    double v[2000];
    for (int i = 0; i < 2000; i++)
        v[i] = fx_rand_value(&rng, 0x08);
    fx_buf b = fx_idx(0x08, 2, dims, v, 2000);
    fx_buf z = fx_gzip(&b);
    fx_buf cut = {0};

    /* Truncated: without the 8-byte trailer, then cut in the middle of the deflate data. */
    const size_t cuts[3] = {z.len - 8, z.len - 1, z.len / 2};
    for (int i = 0; i < 3; i++) {
        cut.len = 0;
        fx_put(&cut, z.p, cuts[i]);
        fx_write(dir, "cut.gz", cut.p, cut.len, path);
        expect_bad(path, &cut, SX_E_FORMAT, "truncated gzip stream");
    }

    /* Corrupt: a wrong CRC-32, a wrong length, damaged deflate data. */
    const size_t at[3] = {z.len - 8, z.len - 2, 12};
    for (int i = 0; i < 3; i++) {
        cut.len = 0;
        fx_put(&cut, z.p, z.len);
        cut.p[at[i]] ^= 0x5A;
        fx_write(dir, "bad.gz", cut.p, cut.len, path);
        expect_bad(path, &cut, SX_E_FORMAT, "corrupt gzip stream");
    }

    /* Two concatenated members (what `cat a.gz b.gz` makes) are one valid stream. */
    fx_buf first = {0}, second = {0};
    fx_put(&first, b.p, 1000);
    fx_put(&second, b.p + 1000, b.len - 1000);
    fx_buf z1 = fx_gzip(&first), z2 = fx_gzip(&second);
    cut.len = 0;
    fx_put(&cut, z1.p, z1.len);
    fx_put(&cut, z2.p, z2.len);
    fx_write(dir, "two.gz", cut.p, cut.len, path);
    sx_ds_idx *x = NULL;
    cr_assert_eq(sx_ds_idx_read_raw(path, 0, &x), SX_OK, "%s", sx_last_error());
    check_idx(x, 0x08, 2, dims, v, 50);
    sx_ds_idx_free(x);
    cr_assert_eq(sx_ds_idx_parse(cut.p, cut.len, NULL, 0, &x), SX_OK, "%s", sx_last_error());
    check_idx(x, 0x08, 2, dims, v, 50);
    sx_ds_idx_free(x);
    fx_free(&first);
    fx_free(&second);
    fx_free(&z1);
    fx_free(&z2);
    fx_free(&cut);
    fx_free(&z);
    fx_free(&b);
    fx_dir_remove(dir);
}

Test(datasets_idx, empty_missing_and_unreadable)
{
    char dir[64], path[512];
    fx_dir_new(dir);
    fx_buf empty = {0};
    fx_write(dir, "empty", NULL, 0, path);
    expect_bad(path, &empty, SX_E_FORMAT, "empty file");
    /* an empty gzip member decompresses to nothing: also an empty file */
    fx_buf ze = fx_gzip(&empty);
    fx_write(dir, "empty.gz", ze.p, ze.len, path);
    expect_bad(path, &ze, SX_E_FORMAT, "empty file");
    fx_free(&ze);

    snprintf(path, sizeof path, "%s/no-such-file.gz", dir);
    expect_bad(path, NULL, SX_E_IO, "cannot open: No such file or directory");
    expect_bad(dir, NULL, SX_E_IO, "is a directory");
    fx_dir_remove(dir);
}

Test(datasets_idx, argument_errors)
{
    char dir[64], path[512];
    fx_dir_new(dir);
    uint32_t dims[1] = {3};
    double v[3] = {1, 2, 3};
    fx_buf b = fx_idx(0x08, 1, dims, v, 3);
    fx_write_idx(dir, "ok", &b, false, path);
    sx_ds_idx *x = (sx_ds_idx *)1;
    sx_tensor *t = (sx_tensor *)1;
    cr_assert_eq(sx_ds_idx_read_raw(NULL, 0, &x), SX_E_ARG);
    cr_assert_null(x);
    cr_assert_eq(sx_ds_idx_read_raw(path, 0, NULL), SX_E_ARG);
    cr_assert_eq(sx_ds_idx_parse(NULL, 5, NULL, 0, &x), SX_E_ARG);
    cr_assert_eq(sx_ds_idx_parse(NULL, 0, NULL, 0, &x), SX_E_FORMAT); /* empty */
    cr_assert(fx_msg_has("<memory>: empty file"));
    cr_assert_eq(sx_ds_idx_read(path, (sx_dtype)5, 1.0, 0, &t), SX_E_ARG);
    cr_assert_null(t);
    cr_assert_eq(sx_ds_idx_read(path, SX_F32, NAN, 0, &t), SX_E_ARG);
    cr_assert_eq(sx_ds_idx_read(path, SX_F32, INFINITY, 0, &t), SX_E_ARG);
    cr_assert_eq(sx_ds_idx_read(NULL, SX_F32, 1.0, 0, &t), SX_E_ARG);
    cr_assert_eq(sx_ds_idx_read(path, SX_F32, 1.0, 0, NULL), SX_E_ARG);

    cr_assert_eq(sx_ds_idx_parse(b.p, b.len, NULL, 0, &x), SX_OK);
    cr_assert_eq(sx_ds_idx_to_tensor(NULL, SX_F32, 1, &t), SX_E_ARG);
    cr_assert_null(t);
    cr_assert_eq(sx_ds_idx_to_tensor(x, SX_F32, 1, NULL), SX_E_ARG);
    cr_assert_eq(sx_ds_idx_to_tensor(x, (sx_dtype)9, 1, &t), SX_E_ARG);
    cr_assert_eq(sx_ds_idx_to_tensor(x, SX_F32, NAN, &t), SX_E_ARG);
    sx_ds_idx bad = *x;
    bad.type = (sx_ds_type)0x0A;
    cr_assert_eq(sx_ds_idx_to_tensor(&bad, SX_F32, 1, &t), SX_E_ARG);
    bad = *x;
    bad.count = 4;
    cr_assert_eq(sx_ds_idx_to_tensor(&bad, SX_F32, 1, &t), SX_E_ARG);
    bad = *x;
    bad.dims[0] = 0;
    cr_assert_eq(sx_ds_idx_to_tensor(&bad, SX_F32, 1, &t), SX_E_ARG);
    bad = *x;
    bad.rank = 0;
    cr_assert_eq(sx_ds_idx_to_tensor(&bad, SX_F32, 1, &t), SX_E_ARG);
    bad = *x;
    bad.data = NULL;
    cr_assert_eq(sx_ds_idx_to_tensor(&bad, SX_F32, 1, &t), SX_E_ARG);
    cr_assert_null(t);
    sx_ds_idx_free(x);
    sx_ds_idx_free(NULL);
    fx_free(&b);
    fx_dir_remove(dir);
}

/* Fail the k-th allocation for every k over each entry point (file raw and gzip, memory raw
 * and gzip, with and without a limit): every failure is SX_E_NOMEM, nothing leaks, and the
 * result is NULL. */
Test(datasets_idx, out_of_memory_every_allocation)
{
    char dir[64], raw[512], gz[512];
    fx_dir_new(dir);
    uint32_t dims[3] = {9, 4, 3};
    double v[108];
    for (int i = 0; i < 108; i++)
        v[i] = i % 7;
    fx_buf b = fx_idx(0x0B, 3, dims, v, 108);
    fx_buf z = fx_gzip(&b);
    fx_write_idx(dir, "r", &b, false, raw);
    fx_write_idx(dir, "g.gz", &b, true, gz);
    sx_ds_idx *pre = NULL; /* made with the ordinary allocator, outside the counts */
    cr_assert_eq(sx_ds_idx_parse(b.p, b.len, NULL, 0, &pre), SX_OK);
    for (int which = 0; which < 7; which++) {
        long k;
        for (k = 0;; k++) {
            tu_fail_after(k);
            sx_ds_idx *x = (sx_ds_idx *)1;
            sx_tensor *t = (sx_tensor *)1;
            sx_status st;
            switch (which) {
            case 0:
                st = sx_ds_idx_read_raw(raw, 0, &x);
                break;
            case 1:
                st = sx_ds_idx_read_raw(gz, 3, &x);
                break;
            case 2:
                st = sx_ds_idx_parse(b.p, b.len, NULL, 0, &x);
                break;
            case 3:
                st = sx_ds_idx_parse(z.p, z.len, NULL, 2, &x);
                break;
            case 4:
                st = sx_ds_idx_read(gz, SX_F32, 0.5, 0, &t);
                break;
            case 5:
                st = sx_ds_idx_read(raw, SX_F64, 1.0, 4, &t);
                break;
            default:
                st = sx_ds_idx_to_tensor(pre, SX_F32, 1.0, &t);
                break;
            }
            long live;
            if (st == SX_OK) {
                if (which < 4)
                    sx_ds_idx_free(x);
                else
                    sx_tensor_free(t);
                live = tu_live_allocs();
                tu_fail_reset();
                cr_assert_eq(live, 0, "case %d leaked %ld allocations", which, live);
                break;
            }
            live = tu_live_allocs();
            tu_fail_reset();
            cr_assert_eq(st, SX_E_NOMEM, "case %d, k=%ld: %s", which, k, sx_last_error());
            cr_assert_eq(live, 0, "case %d, k=%ld leaked %ld allocations", which, k, live);
            if (which < 4)
                cr_assert_null(x);
            else
                cr_assert_null(t);
        }
        cr_assert_geq(k, 2, "case %d made %ld allocations", which, k);
    }
    sx_ds_idx_free(pre);
    fx_free(&b);
    fx_free(&z);
    fx_dir_remove(dir);
}
