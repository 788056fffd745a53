/* datasets_impl.h: internals shared by the files of datasets/ (never installed): the IDX reader.
 * One reader serves a file (zlib's gz reader: gzip or raw) and a memory buffer (raw, or gzip
 * inflated here with zlib), so both go through the same header checks. Usage: open, read the
 * header (checked, nothing allocated yet), read the kept rows, finish (skip and check the rest),
 * close. Every error message starts with the reader's name (the path). */
#ifndef SX_DATASETS_IMPL_H
#define SX_DATASETS_IMPL_H

#include "sx_datasets.h"

#include <stdint.h>
#include <stdio.h>

#define ZLIB_CONST /* next_in is const: the memory reader never writes its buffer */
#include <zlib.h>

typedef enum { IDX_SRC_GZFILE, IDX_SRC_MEM_RAW, IDX_SRC_MEM_GZIP } sx__idx_src;

typedef struct sx__idx_reader {
    const char *name; /* path or buffer name, used in messages (borrowed) */
    sx__idx_src src;
    gzFile gz;          /* IDX_SRC_GZFILE */
    const uint8_t *mem; /* IDX_SRC_MEM_*: the buffer, its size, the next byte */
    size_t mem_len, mem_pos;
    z_stream zs;         /* IDX_SRC_MEM_GZIP */
    int zs_state;        /* 0 none, 1 inflating a member, 2 between members, 3 done */
    uint64_t src_bytes;  /* size of the file or buffer (UINT64_MAX: unknown, a pipe) */
    int gzip;            /* the source is gzip-compressed */
    uint64_t max_stream; /* the most bytes the (decompressed) stream can hold */
    uint64_t pos;        /* (decompressed) bytes consumed so far */

    /* The header, valid after sx__idx_read_header. */
    sx_ds_type type;
    int rank;
    int64_t dims[SX_MAX_RANK];
    int64_t count;       /* elements announced */
    size_t esize;        /* bytes per element */
    int64_t row;         /* elements per entry of the first axis */
    uint64_t header_len; /* 4 + 4 * rank */
} sx__idx_reader;

/* Open a file / a buffer. On failure nothing stays open. */
sx_status sx__idx_open_file(sx__idx_reader *r, const char *path);
sx_status sx__idx_open_mem(sx__idx_reader *r, const void *buf, size_t len, const char *name);
/* Read and check the header (SX_E_FORMAT naming the problem); allocates nothing. */
sx_status sx__idx_read_header(sx__idx_reader *r);
/* The next n elements in native byte order into dst (n * esize bytes). */
sx_status sx__idx_read_native(sx__idx_reader *r, void *dst, int64_t n);
/* The next n elements converted: dst[i] = (dtype)(element * scale). `chunk` is scratch memory
 * of chunk_bytes (>= 8) bytes. */
sx_status sx__idx_read_convert(sx__idx_reader *r, sx_dtype dtype, double scale, void *dst,
                               int64_t n, uint8_t *chunk, size_t chunk_bytes);
/* Skip the rest of the payload (checking it is there) and check that the stream ends right
 * after it, cleanly. `chunk` as above. */
sx_status sx__idx_finish(sx__idx_reader *r, uint8_t *chunk, size_t chunk_bytes);
/* Close; safe on a reader whose open failed or that was zeroed. */
void sx__idx_close(sx__idx_reader *r);

/* Entries kept along the first axis for a limit (<= 0: all). */
int64_t sx__idx_keep(const sx__idx_reader *r, int64_t limit);

/* The scratch size the readers use (decompressed bytes per read call). */
#define SX_IDX_CHUNK ((size_t)1 << 19)

/* Check a data set for `who` (SX_E_ARG naming the bad field). */
sx_status sx__check_images(const char *who, const sx_ds_images *d);
/* Example i's class index, from labels or labels32. */
static inline int64_t sx__label(const sx_ds_images *d, int64_t i)
{
    return d->labels != NULL ? (int64_t)d->labels[i] : (int64_t)d->labels32[i];
}
/* Check batch tensors for `who`: x (may be NULL) holds B rows of h*w*c values, y (may be NULL)
 * is (B) or (B, classes); with both, the same B. *rows receives B (-1 when both are NULL).
 * want_rows >= 0 also requires B == want_rows. SX_E_ARG / SX_E_SHAPE naming the tensor. */
sx_status sx__check_batch(const char *who, const sx_ds_images *d, const sx_tensor *x,
                          const sx_tensor *y, int64_t want_rows, int64_t *rows);

/* The order of an epoch (loader.c): perm = 0..n-1, Fisher-Yates shuffled with a generator
 * seeded from (seed, epoch) when shuffle is true. Every batch and split uses it. */
void sx__order(int64_t *perm, int64_t n, bool shuffle, uint64_t seed, int64_t epoch);
/* The examples the loader's next batch holds, in order: *count of them (0 at the end of an
 * epoch) from the returned pointer (loader.c; for checks before sx_ds_loader_next). */
const int64_t *sx__loader_upcoming(const sx_ds_loader *l, int64_t *count);

/* A source: its spec, count and a small vtable (source.c). get copies example i (in range,
 * checked by the caller) into the rows (either may be NULL); class_name may be NULL (no names);
 * x_names and y_name are NULL unless the constructor sets them; drop releases impl (may be
 * NULL). */
struct sx_ds_source {
    sx_ds_spec spec;
    int64_t n;
    int64_t x_size, y_size; /* elements of one example's x and y */
    const char *name;       /* for messages: a path or the constructor's name (borrowed/owned
                               by impl) */
    sx_status (*get)(const sx_ds_source *s, int64_t i, void *x, void *y);
    const char *(*class_name)(const sx_ds_source *s, int64_t k);
    const char *const *x_names; /* (x_size) names of x's elements, or NULL; owned by impl, or a
                                   view's parent's (a view copies its parent's pointers) */
    const char *y_name;         /* the label's name, or NULL; owned as x_names */
    void (*drop)(void *impl);
    void *impl;
};

/* Check a spec for `who` (SX_E_ARG naming the bad field). */
sx_status sx__spec_check(const char *who, const sx_ds_spec *spec);
/* A new source; on failure (SX_E_NOMEM) drop(impl) has been called and *out is NULL. */
sx_status sx__source_new(const char *who, const sx_ds_spec *spec, int64_t n, const char *name,
                         sx_status (*get)(const sx_ds_source *, int64_t, void *, void *),
                         void *impl, void (*drop)(void *), sx_ds_source **out);
/* Element k of a row of type t, as a double. */
double sx__elem(const void *row, sx_ds_type t, int64_t k);
/* dst[k] = (dtype)(src[k] * scale) for k < n; src of type t, dst an f32 or f64 array. */
void sx__convert(const void *src, sx_ds_type t, int64_t n, double scale, void *dst, sx_dtype dtype);
/* Copy image i of a set (h*w*c bytes) into dst, from either form (images.c). The set must
 * have been checked. */
void sx__image_bytes(const sx_ds_images *d, int64_t i, uint8_t *dst);

/* Decode a PNM, BMP, GIF or TGA file (fmt: "PNM", "BMP", "GIF" or "TGA", the format its content
 * announced; "TGA" for content without a signature, refused as no known format when stb does not
 * take it for a TGA) through stb_image into *pixels, (*h, *w, c) bytes (sx_alloc; the caller
 * frees; NULL on error). Errors as sx_ds_image_decode's, naming `name` (decode_stb.c). */
sx_status sx__stb_decode(const char *name, const char *fmt, const uint8_t *buf, size_t len,
                         int64_t c, uint8_t **pixels, int64_t *h, int64_t *w);

/* ---------------------------------------------------------------- checkpoint files */

/* A byte input over a file or a memory buffer (tensors.c), for the checkpoint readers. Every
 * message starts with `name`. size is the file's or buffer's bytes (UINT64_MAX: unknown, a
 * pipe); pos the bytes consumed. */
typedef struct sx__in {
    const char *name; /* a path or a buffer's name (borrowed) */
    FILE *f;          /* a file, or NULL for memory */
    const uint8_t *mem;
    size_t mem_len;
    uint64_t pos, size;
} sx__in;

sx_status sx__in_open_file(sx__in *in, const char *path);
void sx__in_open_mem(sx__in *in, const void *buf, size_t len, const char *name);
/* Exactly n bytes into dst; SX_E_FORMAT "NAME: truncated WHAT (k of n bytes)" at the end. */
sx_status sx__in_read(sx__in *in, void *dst, size_t n, const char *what);
/* The memory input's next n bytes in place (NULL for a file input or fewer than n left). */
const uint8_t *sx__in_peek(sx__in *in, size_t n);
/* SX_E_FORMAT "NAME: trailing bytes after WHAT" unless the input is at its end. */
sx_status sx__in_end(sx__in *in, const char *what);
void sx__in_close(sx__in *in);
/* An SX_E_FORMAT (or other) error whose message starts with the input's name. */
sx_status sx__in_fail(const sx__in *in, sx_status s, const char *fmt, ...) SX_PRINTF(3, 4);

/* Write a file atomically: `fill(f, ctx)` writes the content to a new file next to `path`
 * (path.tmpXXXXXX), which is flushed, synced and renamed over `path`; on any failure the
 * temporary file is removed and `path` left as it was. fill returns SX_OK or SX_E_IO (errno set)
 * with no message, or another status with its message set. SX_E_IO: "PATH: cannot write:
 * <reason>". */
sx_status sx__write_atomic(const char *path, sx_status (*fill)(FILE *f, void *ctx), void *ctx);

/* Is s[0..n) valid UTF-8 (no overlong forms, surrogates or code points above U+10FFFF)? */
bool sx__utf8_valid(const uint8_t *s, size_t n);
/* Add `t` (owned by the set from now on, even on failure: then freed) under the name s[0..n) to
 * the set, without checking the name (the caller did). SX_E_NOMEM with `who`'s message. */
sx_status sx__tensors_put(sx_ds_tensors *set, const char *who, const char *name, size_t n,
                          sx_tensor *t);
/* The f32 bits of an f16 / bf16 value, exactly (infinities and NaN payloads kept). */
uint32_t sx__f16_bits(uint16_t h);
uint32_t sx__bf16_bits(uint16_t h);
/* The host stores multi-byte numbers little-endian. */
bool sx__host_little(void);

#endif
