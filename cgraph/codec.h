/* codec.h: the byte codec of strix model files (never installed): CRC-32, little-endian
 * integers and IEEE-754 values written whatever the host, a buffered counting writer, and a
 * bounds-checked reading cursor whose every read fails cleanly (SX_E_FORMAT) at the end of its
 * bytes. serial.c writes and reads the format with these; they know nothing of graphs. */
#ifndef SX_CODEC_H
#define SX_CODEC_H

#include "sx_tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void le_put(unsigned char *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

static inline uint64_t le_get(const unsigned char *b, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

/* Two's complement of `bits` bits back to a signed value, without implementation-defined
 * conversions. */
static inline int64_t to_signed(uint64_t u, int bits)
{
    uint64_t sign = (uint64_t)1 << (bits - 1);
    if (bits < 64)
        u &= ((uint64_t)1 << bits) - 1;
    if ((u & sign) == 0)
        return (int64_t)u;
    return -(int64_t)((~u & (sign - 1))) - 1;
}

static inline uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* On a little-endian host an array of f32/f64 already is its file encoding, and is copied in
 * one go; elsewhere values go byte by byte. */
static inline bool host_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

#define WBUF_BYTES (64u * 1024u)

/* A byte sink: with fd < 0 it only counts (to learn a section's length before writing it). */
typedef struct writer {
    int fd;
    uint64_t bytes;     /* bytes put so far */
    uint32_t crc;       /* CRC-32 of the bytes flushed so far */
    int err;            /* errno of the first failed write; 0 if none */
    unsigned char *buf; /* WBUF_BYTES of buffering (fd >= 0) */
    size_t n;
} writer;

/* A cursor over one section's payload. */
typedef struct reader {
    const unsigned char *p;
    size_t left;
    const char *path;
    char tag[5];
    uint32_t version; /* the file's format version */
} reader;

/* crc32(crc, p, n) with zlib's conventions: start from 0, chain calls. */
uint32_t cg_crc32(uint32_t crc, const unsigned char *p, size_t n);
/* size values of dtype from little-endian bytes src to native memory dst. */
void cg_decode_values(sx_dtype dtype, int64_t size, const unsigned char *src, void *dst);
/* Writing: bytes go through the buffer (fd >= 0) and are counted in w->bytes either way; a
 * failed write is kept in w->err and later writes do nothing. cg_w_flush writes the buffer out
 * and adds it to the CRC. Numbers are little-endian, of the width their name says. */
void cg_w_flush(writer *w);
void cg_put(writer *w, const void *p, size_t n);
void cg_put_uint(writer *w, uint64_t v, int bytes);
void cg_put_u8(writer *w, unsigned v);
void cg_put_u32(writer *w, uint32_t v);
void cg_put_u64(writer *w, uint64_t v);
void cg_put_i16(writer *w, int v);
void cg_put_i32(writer *w, int v);
void cg_put_i64(writer *w, int64_t v);
void cg_put_f64(writer *w, double v);
/* A string: u32 length, bytes (lengths were checked to fit by the caller). */
void cg_put_str(writer *w, const char *s);
/* `size` values of `dtype` from data, little-endian (encoded straight into the buffer). */
void cg_put_values(writer *w, sx_dtype dtype, int64_t size, const void *data);
/* Reading: each read takes its bytes from the cursor or fails with SX_E_FORMAT naming the file
 * and section (cg_rd_short: the section ends inside a field; cg_rd_bad: a message of its own). */
sx_status cg_rd_bad(const reader *r, const char *fmt, ...) SX_PRINTF(2, 3);
sx_status cg_rd_short(const reader *r);
sx_status cg_rd_bytes(reader *r, size_t n, const unsigned char **out);
sx_status cg_rd_uint(reader *r, int bytes, uint64_t *v);
sx_status cg_rd_u8(reader *r, unsigned *v);
sx_status cg_rd_u32(reader *r, uint32_t *v);
sx_status cg_rd_u64(reader *r, uint64_t *v);
sx_status cg_rd_i16(reader *r, int16_t *v);
sx_status cg_rd_i32(reader *r, int *v);
sx_status cg_rd_i64(reader *r, int64_t *v);
sx_status cg_rd_f64(reader *r, double *v);
sx_status cg_rd_bool(reader *r, const char *what, bool *v);
/* A count of entries taking at least `min_bytes` each: more than the section can hold, or
 * more than `limit`, is an error before anything is allocated. */
sx_status cg_rd_count(reader *r, int bytes, uint64_t min_bytes, uint64_t limit, const char *what,
                      uint64_t *n);
/* A string, allocated and terminated (empty strings too). */
sx_status cg_rd_string(reader *r, const char *what, bool allow_empty, char **out);
/* `size` values of dtype: *at = where their bytes are, checked to be there. */
sx_status cg_rd_values(reader *r, sx_dtype dtype, int64_t size, const unsigned char **at);

#endif
