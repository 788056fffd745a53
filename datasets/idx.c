/* idx.c: the IDX reader. One stream reader for files (zlib's gz reader, gzip or raw) and memory
 * buffers (raw or inflated here), so both share the header checks, which all run before the
 * payload is allocated; then the payload is read in large chunks and converted from big-endian
 * as it arrives, and the stream must end exactly where the header says. */
#include "datasets_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Deflate expands at most 1032:1 (a 258-byte match coded in 2 bits): a gzip file of s bytes
 * decompresses to at most 1032 * s bytes. */
#define DEFLATE_MAX_RATIO 1032u

/* ---------------------------------------------------------------- element types */

const char *sx_ds_type_name(sx_ds_type t)
{
    switch (t) {
    case SX_DS_U8:
        return "u8";
    case SX_DS_I8:
        return "i8";
    case SX_DS_I16:
        return "i16";
    case SX_DS_I32:
        return "i32";
    case SX_DS_F32:
        return "f32";
    case SX_DS_F64:
        return "f64";
    case SX_DS_I64:
        return "i64";
    }
    return "?";
}

size_t sx_ds_type_size(sx_ds_type t)
{
    switch (t) {
    case SX_DS_U8:
    case SX_DS_I8:
        return 1;
    case SX_DS_I16:
        return 2;
    case SX_DS_I32:
    case SX_DS_F32:
        return 4;
    case SX_DS_F64:
    case SX_DS_I64:
        return 8;
    }
    return 0;
}

/* ---------------------------------------------------------------- errors */

/* Set "NAME: <message>" with status s. */
static sx_status fail(const sx__idx_reader *r, sx_status s, const char *fmt, ...) SX_PRINTF(3, 4);

static sx_status fail(const sx__idx_reader *r, sx_status s, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sx_error(s, "%s: %s", r->name, msg);
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return (b != 0 && a > UINT64_MAX / b) ? UINT64_MAX : a * b;
}

static unsigned long long ull(uint64_t x)
{
    return (unsigned long long)x;
}

/* The payload the header announces, in bytes. */
static uint64_t payload_bytes(const sx__idx_reader *r)
{
    return (uint64_t)r->count * r->esize;
}

static sx_status short_payload(const sx__idx_reader *r)
{
    return fail(r, SX_E_FORMAT,
                "truncated: the header announces %llu bytes of data but the file ends after %llu",
                ull(payload_bytes(r)), ull(r->pos - r->header_len));
}

/* ---------------------------------------------------------------- sources */

/* zlib's message from gzerror starts with the file's name ("<fd:3>: ..."): keep the rest. */
static const char *gz_reason(const char *msg)
{
    const char *p = msg ? strstr(msg, ": ") : NULL;
    return p ? p + 2 : (msg ? msg : "");
}

static sx_status gz_fail(const sx__idx_reader *r, int err, const char *msg)
{
    switch (err) {
    case Z_BUF_ERROR:
        return fail(r, SX_E_FORMAT, "truncated gzip stream (it breaks off after %llu bytes)",
                    ull(r->pos));
    case Z_DATA_ERROR:
        return fail(r, SX_E_FORMAT, "corrupt gzip stream (%s)", gz_reason(msg));
    case Z_MEM_ERROR:
        return fail(r, SX_E_NOMEM, "out of memory in zlib");
    case Z_ERRNO:
        return fail(r, SX_E_IO, "read error: %s", gz_reason(msg));
    default:
        return fail(r, SX_E_IO, "zlib error %d (%s)", err, gz_reason(msg));
    }
}

/* Up to `want` bytes from zlib's gz reader; fewer only at the end of the stream. */
static sx_status gz_source(sx__idx_reader *r, uint8_t *buf, size_t want, size_t *got)
{
    size_t have = 0;
    *got = 0;
    while (have < want) {
        size_t ask = want - have > (1u << 30) ? (1u << 30) : want - have;
        int n = gzread(r->gz, buf + have, (unsigned)ask);
        if (n > 0)
            have += (size_t)n;
        if (n == (int)ask)
            continue;
        /* gzread returns less than asked only at the end of the stream or on an error. */
        int err = Z_OK;
        const char *msg = gzerror(r->gz, &err);
        if (n >= 0 && err == Z_OK)
            break;
        r->pos += have;
        return gz_fail(r, err, msg);
    }
    *got = have;
    return SX_OK;
}

/* Up to `want` inflated bytes of an in-memory gzip buffer, with gzread's rules: members may be
 * concatenated; bytes after a member that do not start another one are ignored. */
static sx_status mem_inflate(sx__idx_reader *r, uint8_t *buf, size_t want, size_t *got)
{
    size_t have = 0;
    *got = 0;
    while (have < want && r->zs_state != 3) {
        size_t left = r->mem_len - r->mem_pos;
        if (r->zs_state == 2) {
            if (left > 1 && r->mem[r->mem_pos] == 0x1f && r->mem[r->mem_pos + 1] == 0x8b) {
                if (inflateReset(&r->zs) != Z_OK)
                    return fail(r, SX_E_FORMAT, "corrupt gzip stream (cannot restart inflate)");
                r->zs_state = 1;
            } else {
                r->zs_state = 3;
                break;
            }
        }
        uInt in = left > UINT_MAX ? UINT_MAX : (uInt)left;
        uInt outn = want - have > UINT_MAX ? UINT_MAX : (uInt)(want - have);
        r->zs.next_in = r->mem + r->mem_pos;
        r->zs.avail_in = in;
        r->zs.next_out = buf + have;
        r->zs.avail_out = outn;
        int ret = inflate(&r->zs, Z_NO_FLUSH);
        size_t used = in - r->zs.avail_in, made = outn - r->zs.avail_out;
        r->mem_pos += used;
        have += made;
        if (ret == Z_STREAM_END) {
            r->zs_state = 2;
        } else if (ret == Z_OK || ret == Z_BUF_ERROR) {
            /* Inflate stops when it runs out of input or output: out of input with output
             * still wanted means the member breaks off. */
            if (r->zs.avail_out > 0 && r->mem_pos == r->mem_len) {
                r->pos += have;
                return fail(r, SX_E_FORMAT,
                            "truncated gzip stream (it breaks off after %llu bytes)", ull(r->pos));
            }
            if (used == 0 && made == 0)
                return fail(r, SX_E_FORMAT, "corrupt gzip stream (inflate makes no progress)");
        } else if (ret == Z_MEM_ERROR) {
            return fail(r, SX_E_NOMEM, "out of memory in zlib");
        } else {
            return fail(r, SX_E_FORMAT, "corrupt gzip stream (%s)",
                        r->zs.msg ? r->zs.msg : "bad data");
        }
    }
    *got = have;
    return SX_OK;
}

/* Up to `want` bytes of the (decompressed) stream; *got < want only at its end. */
static sx_status src_read(sx__idx_reader *r, uint8_t *buf, size_t want, size_t *got)
{
    size_t have = 0;
    sx_status st = SX_OK;
    switch (r->src) {
    case IDX_SRC_GZFILE:
        st = gz_source(r, buf, want, &have);
        break;
    case IDX_SRC_MEM_RAW: {
        size_t left = r->mem_len - r->mem_pos;
        have = want < left ? want : left;
        if (have > 0)
            memcpy(buf, r->mem + r->mem_pos, have);
        r->mem_pos += have;
        break;
    }
    case IDX_SRC_MEM_GZIP:
        st = mem_inflate(r, buf, want, &have);
        break;
    }
    if (st != SX_OK)
        return st;
    r->pos += have;
    *got = have;
    return SX_OK;
}

/* zlib's allocations for the memory reader go through strix's hook. */
static voidpf z_alloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    return sx_alloc((size_t)items * size);
}

static void z_free(voidpf opaque, voidpf p)
{
    (void)opaque;
    sx_free(p);
}

sx_status sx__idx_open_mem(sx__idx_reader *r, const void *buf, size_t len, const char *name)
{
    memset(r, 0, sizeof *r);
    r->name = name;
    r->mem = buf;
    r->mem_len = len;
    r->src_bytes = len;
    if (len >= 2 && r->mem[0] == 0x1f && r->mem[1] == 0x8b) {
        r->src = IDX_SRC_MEM_GZIP;
        r->gzip = 1;
        r->max_stream = sat_mul(len, DEFLATE_MAX_RATIO);
        r->zs.zalloc = z_alloc;
        r->zs.zfree = z_free;
        int ret = inflateInit2(&r->zs, 15 + 16); /* gzip wrapper only, as gzread */
        if (ret != Z_OK) {
            r->src = IDX_SRC_MEM_RAW; /* nothing to end in close */
            return ret == Z_MEM_ERROR ? fail(r, SX_E_NOMEM, "out of memory in zlib")
                                      : fail(r, SX_E_IO, "zlib error %d", ret);
        }
        r->zs_state = 1;
    } else {
        r->src = IDX_SRC_MEM_RAW;
        r->max_stream = len;
    }
    return SX_OK;
}

sx_status sx__idx_open_file(sx__idx_reader *r, const char *path)
{
    memset(r, 0, sizeof *r);
    r->name = path;
    r->src = IDX_SRC_GZFILE;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        char why[128];
        if (strerror_r(errno, why, sizeof why) != 0)
            snprintf(why, sizeof why, "error %d", errno);
        return fail(r, SX_E_IO, "cannot open: %s", why);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return fail(r, SX_E_IO, "cannot stat");
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return fail(r, SX_E_IO, "is a directory");
    }
    r->gz = gzdopen(fd, "rb");
    if (r->gz == NULL) {
        close(fd);
        return fail(r, SX_E_NOMEM, "out of memory opening a zlib stream");
    }
    /* Large files: large reads (fewer system calls, inflate straight into our chunks). */
    if (S_ISREG(st.st_mode) && st.st_size > (1 << 20))
        gzbuffer(r->gz, 1u << 17);
    r->gzip = !gzdirect(r->gz);
    r->src_bytes = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : UINT64_MAX;
    r->max_stream = r->gzip ? sat_mul(r->src_bytes, DEFLATE_MAX_RATIO) : r->src_bytes;
    return SX_OK;
}

void sx__idx_close(sx__idx_reader *r)
{
    if (r->src == IDX_SRC_GZFILE && r->gz != NULL)
        gzclose_r(r->gz);
    if (r->src == IDX_SRC_MEM_GZIP)
        inflateEnd(&r->zs);
    r->gz = NULL;
    r->src = IDX_SRC_MEM_RAW;
    r->mem = NULL;
    r->mem_len = r->mem_pos = 0;
}

/* ---------------------------------------------------------------- the header */

static uint16_t be16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const uint8_t *p)
{
    return (uint64_t)be32(p) << 32 | be32(p + 4);
}

sx_status sx__idx_read_header(sx__idx_reader *r)
{
    uint8_t h[4 + 4 * SX_MAX_RANK];
    size_t got;
    SX_TRY(src_read(r, h, 4, &got));
    if (got == 0)
        return fail(r, SX_E_FORMAT, "empty file");
    if (got < 4)
        return fail(r, SX_E_FORMAT, "truncated header: the file ends after %zu bytes", got);
    if (h[0] != 0 || h[1] != 0)
        return fail(r, SX_E_FORMAT,
                    "bad magic number 0x%02x%02x%02x%02x: not an IDX file (which starts with two "
                    "zero bytes)",
                    h[0], h[1], h[2], h[3]);
    r->type = (sx_ds_type)h[2];
    r->esize = sx_ds_type_size(r->type);
    if (r->esize == 0 || r->type == SX_DS_I64)
        return fail(r, SX_E_FORMAT,
                    "unknown element type code 0x%02x (IDX has 0x08 u8, 0x09 i8, 0x0b i16, "
                    "0x0c i32, 0x0d f32, 0x0e f64)",
                    h[2]);
    r->rank = h[3];
    if (r->rank < 1 || r->rank > SX_MAX_RANK)
        return fail(r, SX_E_FORMAT, "rank %d (strix reads IDX files of rank 1..%d)", r->rank,
                    SX_MAX_RANK);
    size_t dim_bytes = 4 * (size_t)r->rank;
    SX_TRY(src_read(r, h + 4, dim_bytes, &got));
    if (got < dim_bytes)
        return fail(r, SX_E_FORMAT,
                    "truncated header: rank %d needs %zu bytes of dimensions, the file has %zu",
                    r->rank, dim_bytes, got);
    r->header_len = 4 + dim_bytes;
    for (int i = 0; i < SX_MAX_RANK; i++)
        r->dims[i] = i < r->rank ? (int64_t)be32(h + 4 + 4 * i) : 1;
    char shape[160];
    sx_shape_str(r->rank, r->dims, shape, sizeof shape);
    for (int i = 0; i < r->rank; i++)
        if (r->dims[i] == 0)
            return fail(r, SX_E_FORMAT, "dimension %d of %s is 0", i, shape);
    /* Elements, and bytes, must fit in int64 (dims are < 2^32, so only the product can
     * overflow). */
    int64_t count = 1;
    for (int i = 0; i < r->rank; i++) {
        if (count > INT64_MAX / r->dims[i]) {
            count = -1;
            break;
        }
        count *= r->dims[i];
    }
    if (count < 0 || count > INT64_MAX / (int64_t)r->esize)
        return fail(r, SX_E_FORMAT, "dimensions %s of %s overflow 64 bits", shape,
                    sx_ds_type_name(r->type));
    r->count = count;
    r->row = count / r->dims[0];
    /* The payload must fit in what the file can hold: checked before anything is allocated, so
     * that a 20-byte file cannot make us reserve gigabytes. */
    uint64_t room = r->max_stream > r->header_len ? r->max_stream - r->header_len : 0;
    if (payload_bytes(r) > room) {
        if (r->gzip)
            return fail(r, SX_E_FORMAT,
                        "truncated: the header announces %s %s, %llu bytes of data, more than a "
                        "gzip file of %llu bytes can hold",
                        shape, sx_ds_type_name(r->type), ull(payload_bytes(r)), ull(r->src_bytes));
        return fail(r, SX_E_FORMAT,
                    "truncated: the header announces %s %s, %llu bytes of data, but only %llu "
                    "follow",
                    shape, sx_ds_type_name(r->type), ull(payload_bytes(r)), ull(room));
    }
    return SX_OK;
}

int64_t sx__idx_keep(const sx__idx_reader *r, int64_t limit)
{
    return (limit > 0 && limit < r->dims[0]) ? limit : r->dims[0];
}

/* ---------------------------------------------------------------- the payload */

/* Decode n big-endian elements of size es in place to native order. */
static void to_native(uint8_t *p, size_t n, size_t es)
{
    switch (es) {
    case 2:
        for (size_t i = 0; i < n; i++) {
            uint16_t v = be16(p + 2 * i);
            memcpy(p + 2 * i, &v, 2);
        }
        break;
    case 4:
        for (size_t i = 0; i < n; i++) {
            uint32_t v = be32(p + 4 * i);
            memcpy(p + 4 * i, &v, 4);
        }
        break;
    case 8:
        for (size_t i = 0; i < n; i++) {
            uint64_t v = be64(p + 8 * i);
            memcpy(p + 8 * i, &v, 8);
        }
        break;
    default:
        break;
    }
}

sx_status sx__idx_read_native(sx__idx_reader *r, void *dst, int64_t n)
{
    size_t want = (size_t)n * r->esize, got;
    SX_TRY(src_read(r, dst, want, &got));
    if (got < want)
        return short_payload(r);
    to_native(dst, (size_t)n, r->esize);
    return SX_OK;
}

/* Element readers: big-endian from a file chunk (be_*) and native from memory (ne_*). */
static int16_t be_i16(const uint8_t *p)
{
    uint16_t u = be16(p);
    int16_t v;
    memcpy(&v, &u, 2);
    return v;
}

static int32_t be_i32(const uint8_t *p)
{
    uint32_t u = be32(p);
    int32_t v;
    memcpy(&v, &u, 4);
    return v;
}

static float be_f32(const uint8_t *p)
{
    uint32_t u = be32(p);
    float v;
    memcpy(&v, &u, 4);
    return v;
}

static double be_f64(const uint8_t *p)
{
    uint64_t u = be64(p);
    double v;
    memcpy(&v, &u, 8);
    return v;
}

#define NE_LOADER(T, name)                                                                         \
    static T name(const uint8_t *p)                                                                \
    {                                                                                              \
        T v;                                                                                       \
        memcpy(&v, p, sizeof v);                                                                   \
        return v;                                                                                  \
    }
NE_LOADER(int16_t, ne_i16)
NE_LOADER(int32_t, ne_i32)
NE_LOADER(float, ne_f32)
NE_LOADER(double, ne_f64)

/* convert_<dtype>_<order>(type, src, n, scale, out): out[i] = (T)(element i * scale), the
 * product in double. Bytes go through a 256-entry table (exact, and the fastest path). */
#define DEFINE_CONVERT(T, SUFFIX, I16, I32, F32, F64)                                              \
    static void convert_##SUFFIX(sx_ds_type type, const uint8_t *p, size_t n, double scale,        \
                                 T *out)                                                           \
    {                                                                                              \
        switch (type) {                                                                            \
        case SX_DS_U8:                                                                             \
        case SX_DS_I8: {                                                                           \
            T lut[256];                                                                            \
            for (int b = 0; b < 256; b++) {                                                        \
                int v = type == SX_DS_U8 ? b : (b < 128 ? b : b - 256);                            \
                lut[b] = (T)((double)v * scale);                                                   \
            }                                                                                      \
            for (size_t i = 0; i < n; i++)                                                         \
                out[i] = lut[p[i]];                                                                \
            break;                                                                                 \
        }                                                                                          \
        case SX_DS_I16:                                                                            \
            for (size_t i = 0; i < n; i++)                                                         \
                out[i] = (T)((double)I16(p + 2 * i) * scale);                                      \
            break;                                                                                 \
        case SX_DS_I32:                                                                            \
            for (size_t i = 0; i < n; i++)                                                         \
                out[i] = (T)((double)I32(p + 4 * i) * scale);                                      \
            break;                                                                                 \
        case SX_DS_F32:                                                                            \
            for (size_t i = 0; i < n; i++)                                                         \
                out[i] = (T)((double)F32(p + 4 * i) * scale);                                      \
            break;                                                                                 \
        case SX_DS_F64:                                                                            \
            for (size_t i = 0; i < n; i++)                                                         \
                out[i] = (T)(F64(p + 8 * i) * scale);                                              \
            break;                                                                                 \
        case SX_DS_I64: /* never in an IDX file: the reader refuses the code */                    \
            break;                                                                                 \
        }                                                                                          \
    }

DEFINE_CONVERT(float, f32_be, be_i16, be_i32, be_f32, be_f64)
DEFINE_CONVERT(double, f64_be, be_i16, be_i32, be_f32, be_f64)
DEFINE_CONVERT(float, f32_ne, ne_i16, ne_i32, ne_f32, ne_f64)
DEFINE_CONVERT(double, f64_ne, ne_i16, ne_i32, ne_f32, ne_f64)

static void convert(sx_ds_type type, bool big_endian, const uint8_t *p, size_t n, sx_dtype dtype,
                    double scale, void *out)
{
    if (dtype == SX_F32) {
        if (big_endian)
            convert_f32_be(type, p, n, scale, out);
        else
            convert_f32_ne(type, p, n, scale, out);
    } else {
        if (big_endian)
            convert_f64_be(type, p, n, scale, out);
        else
            convert_f64_ne(type, p, n, scale, out);
    }
}

sx_status sx__idx_read_convert(sx__idx_reader *r, sx_dtype dtype, double scale, void *dst,
                               int64_t n, uint8_t *chunk, size_t chunk_bytes)
{
    size_t per = chunk_bytes / r->esize, dsize = sx_dtype_size(dtype);
    uint8_t *out = dst;
    for (int64_t done = 0; done < n;) {
        size_t m = (size_t)(n - done) < per ? (size_t)(n - done) : per, got;
        SX_TRY(src_read(r, chunk, m * r->esize, &got));
        if (got < m * r->esize)
            return short_payload(r);
        convert(r->type, true, chunk, m, dtype, scale, out + (size_t)done * dsize);
        done += (int64_t)m;
    }
    return SX_OK;
}

sx_status sx__idx_finish(sx__idx_reader *r, uint8_t *chunk, size_t chunk_bytes)
{
    uint64_t end = r->header_len + payload_bytes(r);
    while (r->pos < end) {
        size_t want = end - r->pos < chunk_bytes ? (size_t)(end - r->pos) : chunk_bytes, got;
        SX_TRY(src_read(r, chunk, want, &got));
        if (got < want)
            return short_payload(r);
    }
    /* The stream must end here, cleanly: reading on also makes zlib check the CRC and length
     * of the last gzip member. */
    size_t got;
    SX_TRY(src_read(r, chunk, chunk_bytes, &got));
    if (got == 0)
        return SX_OK;
    while (got > 0) /* count the trailing bytes for the message */
        SX_TRY(src_read(r, chunk, chunk_bytes, &got));
    return fail(r, SX_E_FORMAT, "%llu bytes of trailing data after the %llu the header announces",
                ull(r->pos - end), ull(payload_bytes(r)));
}

/* ---------------------------------------------------------------- public entry points */

/* The scratch size for a reader: what is left to skip or convert, at least 4 KB (to count
 * trailing bytes quickly), at most SX_IDX_CHUNK. */
static size_t chunk_size(uint64_t bytes)
{
    return bytes < 4096 ? 4096 : bytes > SX_IDX_CHUNK ? SX_IDX_CHUNK : (size_t)bytes;
}

/* Read a whole opened stream into a new sx_ds_idx. */
static sx_status read_idx(sx__idx_reader *r, int64_t limit, sx_ds_idx **out)
{
    SX_TRY(sx__idx_read_header(r));
    int64_t keep = sx__idx_keep(r, limit);
    sx_status st = SX_E_NOMEM;
    uint8_t *chunk = NULL;
    sx_ds_idx *idx = sx_calloc(1, sizeof *idx);
    if (idx == NULL)
        goto fail;
    idx->type = r->type;
    idx->rank = r->rank;
    memcpy(idx->dims, r->dims, sizeof idx->dims);
    idx->file_dim0 = r->dims[0];
    idx->dims[0] = keep;
    idx->count = keep * r->row;
    idx->data = sx_alloc((size_t)idx->count * r->esize);
    if (idx->data == NULL)
        goto fail;
    size_t cb = chunk_size(payload_bytes(r) - (uint64_t)idx->count * r->esize);
    chunk = sx_alloc(cb);
    if (chunk == NULL)
        goto fail;
    st = sx__idx_read_native(r, idx->data, idx->count);
    if (st == SX_OK)
        st = sx__idx_finish(r, chunk, cb);
    if (st != SX_OK)
        goto fail;
    sx_free(chunk);
    *out = idx;
    return SX_OK;
fail:
    sx_free(chunk);
    sx_ds_idx_free(idx);
    return st;
}

sx_status sx_ds_idx_read_raw(const char *path, int64_t limit, sx_ds_idx **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "sx_ds_idx_read_raw: out is NULL");
    *out = NULL;
    if (path == NULL)
        return sx_error(SX_E_ARG, "sx_ds_idx_read_raw: path is NULL");
    sx__idx_reader r;
    SX_TRY(sx__idx_open_file(&r, path));
    sx_status st = read_idx(&r, limit, out);
    sx__idx_close(&r);
    return st;
}

sx_status sx_ds_idx_parse(const void *buf, size_t len, const char *name, int64_t limit,
                          sx_ds_idx **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "sx_ds_idx_parse: out is NULL");
    *out = NULL;
    if (buf == NULL && len > 0)
        return sx_error(SX_E_ARG, "sx_ds_idx_parse: buf is NULL");
    sx__idx_reader r;
    SX_TRY(sx__idx_open_mem(&r, buf, len, name ? name : "<memory>"));
    sx_status st = read_idx(&r, limit, out);
    sx__idx_close(&r);
    return st;
}

void sx_ds_idx_free(sx_ds_idx *idx)
{
    if (idx == NULL)
        return;
    sx_free(idx->data);
    sx_free(idx);
}

static sx_status check_conversion(const char *who, sx_dtype dtype, double scale)
{
    if (dtype != SX_F32 && dtype != SX_F64)
        return sx_error(SX_E_ARG, "%s: dtype %d is not f32 or f64", who, (int)dtype);
    if (!isfinite(scale))
        return sx_error(SX_E_ARG, "%s: scale %g is not finite", who, scale);
    return SX_OK;
}

sx_status sx_ds_idx_read(const char *path, sx_dtype dtype, double scale, int64_t limit,
                         sx_tensor **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "sx_ds_idx_read: out is NULL");
    *out = NULL;
    if (path == NULL)
        return sx_error(SX_E_ARG, "sx_ds_idx_read: path is NULL");
    SX_TRY(check_conversion("sx_ds_idx_read", dtype, scale));
    sx__idx_reader r;
    SX_TRY(sx__idx_open_file(&r, path));
    sx_tensor *t = NULL;
    uint8_t *chunk = NULL;
    sx_status st = sx__idx_read_header(&r);
    if (st != SX_OK)
        goto done;
    int64_t shape[SX_MAX_RANK];
    memcpy(shape, r.dims, sizeof shape);
    shape[0] = sx__idx_keep(&r, limit);
    st = sx_tensor_new(dtype, r.rank, shape, &t);
    if (st != SX_OK)
        goto done;
    size_t cb = chunk_size(payload_bytes(&r));
    chunk = sx_alloc(cb);
    if (chunk == NULL) {
        st = SX_E_NOMEM;
        goto done;
    }
    st = sx__idx_read_convert(&r, dtype, scale, t->data, t->size, chunk, cb);
    if (st == SX_OK)
        st = sx__idx_finish(&r, chunk, cb);
done:
    sx_free(chunk);
    sx__idx_close(&r);
    if (st != SX_OK) {
        sx_tensor_free(t);
        return st;
    }
    *out = t;
    return SX_OK;
}

sx_status sx_ds_idx_to_tensor(const sx_ds_idx *idx, sx_dtype dtype, double scale, sx_tensor **out)
{
    const char *who = "sx_ds_idx_to_tensor";
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    if (idx == NULL)
        return sx_error(SX_E_ARG, "%s: idx is NULL", who);
    SX_TRY(check_conversion(who, dtype, scale));
    if (sx_ds_type_size(idx->type) == 0 || idx->rank < 1 || idx->rank > SX_MAX_RANK)
        return sx_error(SX_E_ARG, "%s: idx is not valid (type 0x%02x, rank %d)", who,
                        (unsigned)idx->type, idx->rank);
    for (int i = 0; i < idx->rank; i++)
        if (idx->dims[i] < 1)
            return sx_error(SX_E_ARG, "%s: idx is not valid (dimension %d is %lld)", who, i,
                            (long long)idx->dims[i]);
    if (sx_shape_check(who, idx->rank, idx->dims) != SX_OK ||
        sx_shape_size(idx->rank, idx->dims) != idx->count || idx->data == NULL)
        return sx_error(SX_E_ARG, "%s: idx is not valid (its count, dims or data disagree)", who);
    sx_tensor *t = NULL;
    SX_TRY(sx_tensor_new(dtype, idx->rank, idx->dims, &t));
    convert(idx->type, false, idx->data, (size_t)idx->count, dtype, scale, t->data);
    *out = t;
    return SX_OK;
}
