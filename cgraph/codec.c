/* codec.c: the byte codec of strix model files (codec.h): CRC-32, the buffered writer and
 * the bounds-checked reader. Every number goes byte by byte, little-endian, whatever the host;
 * a read past the end of a section is an error, never a read out of bounds. */
#include "codec.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

/* ---------------------------------------------------------------- CRC-32 */

/* zlib's crc32, eight bytes at a time ("slicing by 8", about 2 GB/s): table k maps a byte to
 * its contribution k bytes further on. The tables are filled once, on first use. */
static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][n] = c;
    }
    for (int n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            crc_table[k][n] = crc_table[0][crc_table[k - 1][n] & 255] ^ (crc_table[k - 1][n] >> 8);
}

/* crc32(crc, p, n) with zlib's conventions: start from 0, chain calls. */
uint32_t cg_crc32(uint32_t crc, const unsigned char *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    crc = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t a = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                            (uint32_t)p[3] << 24);
        crc = crc_table[7][a & 255] ^ crc_table[6][(a >> 8) & 255] ^ crc_table[5][(a >> 16) & 255] ^
              crc_table[4][a >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^
              crc_table[0][p[7]];
    }
    for (; n > 0; n--, p++)
        crc = crc_table[0][(crc ^ *p) & 255] ^ (crc >> 8);
    return ~crc;
}

/* size values of dtype from little-endian bytes src to native memory dst. */
void cg_decode_values(sx_dtype dtype, int64_t size, const unsigned char *src, void *dst)
{
    size_t elt = sx_dtype_size(dtype);
    if (host_little_endian()) {
        if (size > 0)
            memcpy(dst, src, (size_t)size * elt);
        return;
    }
    for (int64_t i = 0; i < size; i++, src += elt) {
        if (dtype == SX_F32) {
            uint32_t u = (uint32_t)le_get(src, 4);
            memcpy((float *)dst + i, &u, 4);
        } else {
            uint64_t u = le_get(src, 8);
            memcpy((double *)dst + i, &u, 8);
        }
    }
}

/* ---------------------------------------------------------------- writing */

void cg_w_flush(writer *w)
{
    w->crc = cg_crc32(w->crc, w->buf, w->n);
    size_t done = 0;
    while (done < w->n && w->err == 0) {
        ssize_t k = write(w->fd, w->buf + done, w->n - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            w->err = k < 0 ? errno : EIO;
        else
            done += (size_t)k;
    }
    w->n = 0;
}

void cg_put(writer *w, const void *p, size_t n)
{
    w->bytes += n;
    if (w->fd < 0 || w->err != 0)
        return;
    const unsigned char *b = p;
    while (n > 0) {
        size_t k = WBUF_BYTES - w->n < n ? WBUF_BYTES - w->n : n;
        memcpy(w->buf + w->n, b, k);
        w->n += k;
        b += k;
        n -= k;
        if (w->n == WBUF_BYTES)
            cg_w_flush(w);
    }
}

void cg_put_uint(writer *w, uint64_t v, int bytes)
{
    unsigned char b[8];
    bytes = bytes < 8 ? bytes : 8; /* callers pass 1-8; GCC for AArch64 cannot see it */
    le_put(b, v, bytes);
    cg_put(w, b, (size_t)bytes);
}

void cg_put_u8(writer *w, unsigned v)
{
    cg_put_uint(w, v, 1);
}

void cg_put_u32(writer *w, uint32_t v)
{
    cg_put_uint(w, v, 4);
}

void cg_put_u64(writer *w, uint64_t v)
{
    cg_put_uint(w, v, 8);
}

void cg_put_i16(writer *w, int v)
{
    cg_put_uint(w, (uint64_t)(int64_t)v, 2);
}

void cg_put_i32(writer *w, int v)
{
    cg_put_uint(w, (uint64_t)(int64_t)v, 4);
}

void cg_put_i64(writer *w, int64_t v)
{
    cg_put_uint(w, (uint64_t)v, 8);
}

void cg_put_f64(writer *w, double v)
{
    cg_put_uint(w, f64_bits(v), 8);
}

/* A string: u32 length, bytes (lengths were checked to fit by the caller). */
void cg_put_str(writer *w, const char *s)
{
    size_t n = strlen(s);
    cg_put_u32(w, (uint32_t)n);
    cg_put(w, s, n);
}

/* `size` values of `dtype` from data, little-endian (encoded straight into the buffer). */
void cg_put_values(writer *w, sx_dtype dtype, int64_t size, const void *data)
{
    size_t elt = sx_dtype_size(dtype);
    if (host_little_endian()) {
        cg_put(w, data, (size_t)size * elt);
        return;
    }
    w->bytes += (uint64_t)size * elt;
    if (w->fd < 0 || w->err != 0)
        return;
    for (int64_t i = 0; i < size; i++) {
        if (WBUF_BYTES - w->n < elt)
            cg_w_flush(w);
        if (dtype == SX_F32) {
            uint32_t u;
            memcpy(&u, (const float *)data + i, 4);
            le_put(w->buf + w->n, u, 4);
        } else {
            uint64_t u;
            memcpy(&u, (const double *)data + i, 8);
            le_put(w->buf + w->n, u, 8);
        }
        w->n += elt;
    }
}

/* ---------------------------------------------------------------- reading fields */

sx_status cg_rd_bad(const reader *r, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sx_error(SX_E_FORMAT, "%s: section %s: %s", r->path, r->tag, msg);
}

sx_status cg_rd_short(const reader *r)
{
    return sx_error(SX_E_FORMAT, "%s: section %s ends inside its contents (file corrupt)", r->path,
                    r->tag);
}

sx_status cg_rd_bytes(reader *r, size_t n, const unsigned char **out)
{
    *out = r->p;
    if (n > r->left)
        return cg_rd_short(r);
    r->p += n;
    r->left -= n;
    return SX_OK;
}

sx_status cg_rd_uint(reader *r, int bytes, uint64_t *v)
{
    const unsigned char *b;
    SX_TRY(cg_rd_bytes(r, (size_t)bytes, &b));
    *v = le_get(b, bytes);
    return SX_OK;
}

sx_status cg_rd_u8(reader *r, unsigned *v)
{
    uint64_t u;
    SX_TRY(cg_rd_uint(r, 1, &u));
    *v = (unsigned)u;
    return SX_OK;
}

sx_status cg_rd_u32(reader *r, uint32_t *v)
{
    uint64_t u;
    SX_TRY(cg_rd_uint(r, 4, &u));
    *v = (uint32_t)u;
    return SX_OK;
}

sx_status cg_rd_u64(reader *r, uint64_t *v)
{
    return cg_rd_uint(r, 8, v);
}

sx_status cg_rd_i16(reader *r, int16_t *v)
{
    uint64_t u;
    SX_TRY(cg_rd_uint(r, 2, &u));
    *v = (int16_t)to_signed(u, 16);
    return SX_OK;
}

sx_status cg_rd_i32(reader *r, int *v)
{
    uint64_t u;
    SX_TRY(cg_rd_uint(r, 4, &u));
    *v = (int)to_signed(u, 32);
    return SX_OK;
}

sx_status cg_rd_i64(reader *r, int64_t *v)
{
    uint64_t u;
    SX_TRY(cg_rd_uint(r, 8, &u));
    *v = to_signed(u, 64);
    return SX_OK;
}

sx_status cg_rd_f64(reader *r, double *v)
{
    uint64_t u;
    SX_TRY(cg_rd_uint(r, 8, &u));
    memcpy(v, &u, sizeof *v);
    return SX_OK;
}

sx_status cg_rd_bool(reader *r, const char *what, bool *v)
{
    unsigned u;
    SX_TRY(cg_rd_u8(r, &u));
    if (u > 1)
        return cg_rd_bad(r, "%s is %u (want 0 or 1)", what, u);
    *v = u == 1;
    return SX_OK;
}

/* A count of entries taking at least `min_bytes` each: more than the section can hold, or
 * more than `limit`, is an error before anything is allocated. */
sx_status cg_rd_count(reader *r, int bytes, uint64_t min_bytes, uint64_t limit, const char *what,
                      uint64_t *n)
{
    SX_TRY(cg_rd_uint(r, bytes, n));
    if (*n > r->left / min_bytes || *n > limit)
        return cg_rd_bad(r, "claims %llu %s, more than its %zu remaining bytes can hold",
                         (unsigned long long)*n, what, r->left);
    return SX_OK;
}

/* A string, allocated and terminated (empty strings too). */
sx_status cg_rd_string(reader *r, const char *what, bool allow_empty, char **out)
{
    uint32_t n;
    const unsigned char *b;
    SX_TRY(cg_rd_u32(r, &n));
    SX_TRY(cg_rd_bytes(r, n, &b));
    if (n == 0 && !allow_empty)
        return cg_rd_bad(r, "%s is empty", what);
    if (n > 0 && memchr(b, 0, n) != NULL)
        return cg_rd_bad(r, "%s contains a NUL byte", what);
    char *s = sx_alloc((size_t)n + 1);
    if (s == NULL)
        return SX_E_NOMEM;
    memcpy(s, b, n);
    s[n] = '\0';
    *out = s;
    return SX_OK;
}

/* `size` values of dtype: *at = where their bytes are, checked to be there. */
sx_status cg_rd_values(reader *r, sx_dtype dtype, int64_t size, const unsigned char **at)
{
    size_t elt = sx_dtype_size(dtype);
    *at = r->p;
    if ((uint64_t)size > r->left / elt)
        return cg_rd_short(r);
    return cg_rd_bytes(r, (size_t)size * elt, at);
}
