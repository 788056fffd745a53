/* idx_fixture.h: what the datasets suites share: a temporary folder per test, IDX files built
 * byte by byte from values (every element type, big-endian), gzip in memory and on disk, and
 * helpers to damage them. Written independently of datasets/ so the tests can catch its bugs. */
#ifndef SX_IDX_FIXTURE_H
#define SX_IDX_FIXTURE_H

#include "testutil.h"
#include <sx_datasets.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* A growable byte buffer (plain malloc: test memory stays out of the allocator hook). */
typedef struct fx_buf {
    uint8_t *p;
    size_t len, cap;
} fx_buf;

static inline void fx_put(fx_buf *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert_not_null(b->p);
    }
    if (n > 0)
        memcpy(b->p + b->len, src, n);
    b->len += n;
}

static inline void fx_put_be(fx_buf *b, uint64_t v, int bytes)
{
    uint8_t t[8];
    for (int i = 0; i < bytes; i++)
        t[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
    fx_put(b, t, (size_t)bytes);
}

/* The IDX header: magic 0 0, type code, rank, then rank big-endian u32 dims. */
static inline void fx_header(fx_buf *b, int type, int rank, const uint32_t *dims)
{
    uint8_t h[4] = {0, 0, (uint8_t)type, (uint8_t)rank};
    fx_put(b, h, 4);
    for (int i = 0; i < rank; i++)
        fx_put_be(b, dims[i], 4);
}

/* Append one element of `type` with value v (v must be representable). */
static inline void fx_elem(fx_buf *b, int type, double v)
{
    switch (type) {
    case 0x08:
        fx_put_be(b, (uint8_t)(int)v, 1);
        break;
    case 0x09:
        fx_put_be(b, (uint8_t)(int8_t)(int)v, 1);
        break;
    case 0x0B:
        fx_put_be(b, (uint16_t)(int16_t)(int)v, 2);
        break;
    case 0x0C:
        fx_put_be(b, (uint32_t)(int32_t)(int64_t)v, 4);
        break;
    case 0x0D: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        fx_put_be(b, u, 4);
        break;
    }
    case 0x0E: {
        uint64_t u;
        memcpy(&u, &v, 8);
        fx_put_be(b, u, 8);
        break;
    }
    default:
        cr_assert_fail("fx_elem: type 0x%02x", type);
    }
}

/* A whole IDX file from n values. */
static inline fx_buf fx_idx(int type, int rank, const uint32_t *dims, const double *v, size_t n)
{
    fx_buf b = {0};
    fx_header(&b, type, rank, dims);
    for (size_t i = 0; i < n; i++)
        fx_elem(&b, type, v[i]);
    return b;
}

/* A random value exactly representable in `type` (and in f32, so all conversions are exact
 * references). */
static inline double fx_rand_value(sx_rng *rng, int type)
{
    switch (type) {
    case 0x08:
        return (double)sx_rng_below(rng, 256);
    case 0x09:
        return (double)sx_rng_below(rng, 256) - 128;
    case 0x0B:
        return (double)sx_rng_below(rng, 65536) - 32768;
    case 0x0C:
        return (double)((int64_t)sx_rng_below(rng, UINT64_C(1) << 32) - (INT64_C(1) << 31));
    case 0x0D:
        return (double)(float)(sx_rng_normal(rng) * 1000);
    default:
        return sx_rng_normal(rng) * 1e6;
    }
}

/* gzip-compress a buffer in memory (level 9, one member). */
static inline fx_buf fx_gzip(const fx_buf *in)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    cr_assert_eq(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
    fx_buf out = {0};
    out.cap = deflateBound(&z, in->len) + 64;
    out.p = malloc(out.cap);
    z.next_in = in->p;
    z.avail_in = (uInt)in->len;
    z.next_out = out.p;
    z.avail_out = (uInt)out.cap;
    cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
    out.len = out.cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

static inline void fx_free(fx_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* A fresh temporary folder; fx_dir_remove deletes it and the files in it. */
static inline void fx_dir_new(char dir[64])
{
    snprintf(dir, 64, "%s", "/tmp/strix-ds-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static inline void fx_dir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        remove(path);
    }
    closedir(d);
    rmdir(dir);
}

/* Write bytes to dir/name; path receives the full path. */
static inline void fx_write(const char *dir, const char *name, const void *p, size_t n,
                            char path[512])
{
    snprintf(path, 512, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    if (n > 0)
        cr_assert_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* Write b raw or gzip-compressed. */
static inline void fx_write_idx(const char *dir, const char *name, const fx_buf *b, bool gz,
                                char path[512])
{
    if (!gz) {
        fx_write(dir, name, b->p, b->len, path);
        return;
    }
    fx_buf z = fx_gzip(b);
    fx_write(dir, name, z.p, z.len, path);
    fx_free(&z);
}

/* The message of the last error contains `s` (and report it when not). */
static inline bool fx_msg_has(const char *s)
{
    if (strstr(sx_last_error(), s) != NULL)
        return true;
    cr_log_error("message \"%s\" lacks \"%s\"", sx_last_error(), s);
    return false;
}

#endif
