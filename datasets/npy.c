/* npy.c: NumPy .npy files, read and written. One reader serves a file and a memory buffer: the
 * fixed prefix and the header dictionary (a Python literal: descr, fortran_order, shape) are
 * parsed and every number checked before the payload is allocated, the payload must be exactly
 * what the header announces, and multi-byte elements are swapped to the host's byte order.
 * Files are written to a temporary name next to the target and renamed over it. */
#include "datasets_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The largest header accepted (NumPy's own reader refuses more than 10000 bytes by default). */
#define NPY_MAX_HEADER ((uint32_t)1 << 20)
#define NPY_MAGIC "\x93NUMPY"

/* ---------------------------------------------------------------- element types */

static const struct {
    const char *name; /* sx_ds_npy_type_name */
    char kind;        /* NumPy's kind letter in descr */
    unsigned size;
} npy_types[] = {
    [SX_DS_NPY_BOOL] = {"bool", 'b', 1}, [SX_DS_NPY_I8] = {"i8", 'i', 1},
    [SX_DS_NPY_U8] = {"u8", 'u', 1},     [SX_DS_NPY_I16] = {"i16", 'i', 2},
    [SX_DS_NPY_U16] = {"u16", 'u', 2},   [SX_DS_NPY_I32] = {"i32", 'i', 4},
    [SX_DS_NPY_U32] = {"u32", 'u', 4},   [SX_DS_NPY_I64] = {"i64", 'i', 8},
    [SX_DS_NPY_U64] = {"u64", 'u', 8},   [SX_DS_NPY_F32] = {"f32", 'f', 4},
    [SX_DS_NPY_F64] = {"f64", 'f', 8},
};
#define NPY_NTYPES ((int)(sizeof npy_types / sizeof npy_types[0]))

static bool type_ok(sx_ds_npy_type t)
{
    return (int)t >= 0 && (int)t < NPY_NTYPES;
}

const char *sx_ds_npy_type_name(sx_ds_npy_type t)
{
    return type_ok(t) ? npy_types[t].name : "?";
}

size_t sx_ds_npy_type_size(sx_ds_npy_type t)
{
    return type_ok(t) ? npy_types[t].size : 0;
}

static bool host_little(void)
{
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* ---------------------------------------------------------------- the reader */

typedef struct npy_reader {
    const char *name; /* for messages (borrowed) */
    FILE *f;          /* a file, or NULL for memory */
    const uint8_t *mem;
    size_t mem_len, pos;
    uint64_t size; /* bytes in the file or buffer; UINT64_MAX unknown (a pipe) */
} npy_reader;

static sx_status fail(const npy_reader *r, sx_status s, const char *fmt, ...) SX_PRINTF(3, 4);

static sx_status fail(const npy_reader *r, sx_status s, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sx_error(s, "%s: %s", r->name, msg);
}

/* Up to n bytes into dst; *got says how many (fewer only at the end). */
static sx_status rd(npy_reader *r, void *dst, size_t n, size_t *got)
{
    if (r->f == NULL) {
        size_t k = r->mem_len - r->pos < n ? r->mem_len - r->pos : n;
        if (k > 0)
            memcpy(dst, r->mem + r->pos, k);
        r->pos += k;
        *got = k;
        return SX_OK;
    }
    size_t k = fread(dst, 1, n, r->f);
    r->pos += k;
    *got = k;
    if (k < n && ferror(r->f))
        return fail(r, SX_E_IO, "read error: %s", strerror(errno));
    return SX_OK;
}

static sx_status rd_exact(npy_reader *r, void *dst, size_t n, const char *what)
{
    size_t got = 0;
    SX_TRY(rd(r, dst, n, &got));
    if (got < n)
        return fail(r, SX_E_FORMAT, "truncated %s (%zu of %zu bytes)", what, got, n);
    return SX_OK;
}

static sx_status open_file(npy_reader *r, const char *path)
{
    memset(r, 0, sizeof *r);
    r->name = path;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return fail(r, SX_E_IO, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        int e = errno;
        bool dir = S_ISDIR(st.st_mode);
        close(fd);
        return dir ? fail(r, SX_E_IO, "is a directory") : fail(r, SX_E_IO, "%s", strerror(e));
    }
    r->size = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : UINT64_MAX;
    r->f = fdopen(fd, "rb");
    if (r->f == NULL) {
        close(fd);
        return fail(r, SX_E_IO, "cannot open: %s", strerror(errno));
    }
    return SX_OK;
}

static void close_reader(npy_reader *r)
{
    if (r->f != NULL)
        fclose(r->f);
    r->f = NULL;
}

/* ---------------------------------------------------------------- the header dictionary */

/* What the header says. */
typedef struct npy_header {
    sx_ds_npy_type type;
    bool swap; /* the file's byte order is not the host's */
    int rank;
    int64_t dims[SX_MAX_RANK];
    int64_t count;
} npy_header;

typedef struct hparse {
    const npy_reader *r;
    const char *s; /* the header text, NUL-terminated */
    size_t i;
} hparse;

static void skip_ws(hparse *p)
{
    while (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')
        p->i++;
}

static sx_status bad(hparse *p, const char *what)
{
    return fail(p->r, SX_E_FORMAT, "bad header: %s at byte %zu of '%s'", what, p->i, p->s);
}

static sx_status expect(hparse *p, char c)
{
    skip_ws(p);
    if (p->s[p->i] != c) {
        char what[32];
        snprintf(what, sizeof what, "want '%c'", c);
        return bad(p, what);
    }
    p->i++;
    return SX_OK;
}

/* A quoted Python string ('...' or "...", no escapes) into buf. */
static sx_status quoted(hparse *p, char *buf, size_t n)
{
    skip_ws(p);
    char q = p->s[p->i];
    if (q != '\'' && q != '"')
        return bad(p, "want a quoted string");
    size_t k = 0;
    for (p->i++; p->s[p->i] != q; p->i++) {
        if (p->s[p->i] == '\0' || p->s[p->i] == '\\' || k + 1 >= n)
            return bad(p, "unterminated, escaped or overlong string");
        buf[k++] = p->s[p->i];
    }
    p->i++;
    buf[k] = '\0';
    return SX_OK;
}

/* descr: byte order ('<', '>', '|', '='), kind letter, size in bytes. */
static sx_status parse_descr(hparse *p, npy_header *h)
{
    skip_ws(p);
    if (p->s[p->i] == '[')
        return fail(p->r, SX_E_FORMAT, "structured arrays (a list descr) are not supported");
    char d[64];
    SX_TRY(quoted(p, d, sizeof d));
    char order = d[0], kind = d[0] ? d[1] : '\0';
    char *end = NULL;
    long size = kind ? strtol(d + 2, &end, 10) : 0;
    if (strchr("<>|=", order) == NULL || kind == '\0')
        return fail(p->r, SX_E_FORMAT, "descr '%s' is not a NumPy type", d);
    if (kind == 'O')
        return fail(p->r, SX_E_FORMAT, "object arrays (descr '%s') are not supported", d);
    for (int t = 0; t < NPY_NTYPES && end != NULL && *end == '\0'; t++) {
        if (npy_types[t].kind == kind && (long)npy_types[t].size == size) {
            h->type = (sx_ds_npy_type)t;
            h->swap = size > 1 && (order == '<' || order == '>') && (order == '<') != host_little();
            return SX_OK;
        }
    }
    return fail(p->r, SX_E_FORMAT,
                "descr '%s' is not supported (want bool, int8..64, uint8..64, float32 or float64)",
                d);
}

static sx_status parse_bool(hparse *p, bool *v)
{
    skip_ws(p);
    if (strncmp(p->s + p->i, "True", 4) == 0)
        *v = true, p->i += 4;
    else if (strncmp(p->s + p->i, "False", 5) == 0)
        *v = false, p->i += 5;
    else
        return bad(p, "fortran_order is not True or False");
    return SX_OK;
}

/* One dimension: a decimal integer >= 0 that fits int64. */
static sx_status parse_dim(hparse *p, int64_t *v)
{
    skip_ws(p);
    const char *s = p->s + p->i;
    if (*s < '0' || *s > '9')
        return bad(p, "want a dimension (a number >= 0)");
    uint64_t x = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (x > ((uint64_t)INT64_MAX - (uint64_t)(*s - '0')) / 10)
            return bad(p, "dimension too large");
        x = x * 10 + (uint64_t)(*s - '0');
    }
    if (*s == 'L') /* Python 2's long */
        s++;
    p->i = (size_t)(s - p->s);
    *v = (int64_t)x;
    return SX_OK;
}

/* shape: a tuple of dimensions, "()" for a scalar, "(n,)" for one axis. */
static sx_status parse_shape(hparse *p, npy_header *h)
{
    SX_TRY(expect(p, '('));
    h->rank = 0;
    for (;;) {
        skip_ws(p);
        if (p->s[p->i] == ')')
            break;
        int64_t d = 0;
        SX_TRY(parse_dim(p, &d));
        if (h->rank == SX_MAX_RANK)
            return fail(p->r, SX_E_FORMAT, "rank above %d is not supported", SX_MAX_RANK);
        h->dims[h->rank++] = d;
        skip_ws(p);
        if (p->s[p->i] == ',')
            p->i++;
        else if (p->s[p->i] != ')')
            return bad(p, "want ',' or ')' in shape");
    }
    p->i++;
    for (int k = h->rank; k < SX_MAX_RANK; k++)
        h->dims[k] = 1;
    return SX_OK;
}

/* The dictionary: the three keys, each once, in any order; nothing else. */
static sx_status parse_dict(hparse *p, npy_header *h)
{
    bool seen[3] = {false, false, false}, fortran = false;
    SX_TRY(expect(p, '{'));
    for (;;) {
        skip_ws(p);
        if (p->s[p->i] == '}')
            break;
        char key[32];
        SX_TRY(quoted(p, key, sizeof key));
        SX_TRY(expect(p, ':'));
        int k = strcmp(key, "descr") == 0           ? 0
                : strcmp(key, "fortran_order") == 0 ? 1
                : strcmp(key, "shape") == 0         ? 2
                                                    : -1;
        if (k < 0 || seen[k])
            return fail(p->r, SX_E_FORMAT, "bad header: %s key '%s'",
                        k < 0 ? "unknown" : "repeated", key);
        seen[k] = true;
        SX_TRY(k == 0 ? parse_descr(p, h) : k == 1 ? parse_bool(p, &fortran) : parse_shape(p, h));
        skip_ws(p);
        if (p->s[p->i] == ',')
            p->i++;
        else if (p->s[p->i] != '}')
            return bad(p, "want ',' or '}'");
    }
    p->i++;
    skip_ws(p);
    if (p->s[p->i] != '\0')
        return bad(p, "text after the dictionary");
    if (!seen[0] || !seen[1] || !seen[2])
        return fail(p->r, SX_E_FORMAT, "bad header: no '%s' key",
                    !seen[0]   ? "descr"
                    : !seen[1] ? "fortran_order"
                               : "shape");
    if (fortran)
        return fail(p->r, SX_E_FORMAT,
                    "Fortran-order arrays are not supported (save a C-order "
                    "array: numpy.ascontiguousarray)");
    return SX_OK;
}

/* The prefix (magic, version, header length) and the dictionary. *header_len receives the
 * bytes before the payload. */
static sx_status read_header(npy_reader *r, npy_header *h, uint64_t *header_len)
{
    uint8_t pre[12];
    size_t got = 0;
    SX_TRY(rd(r, pre, 8, &got));
    if (got == 0)
        return fail(r, SX_E_FORMAT, "empty file");
    if (got < 8 || memcmp(pre, NPY_MAGIC, 6) != 0)
        return fail(r, SX_E_FORMAT, "not a .npy file (bad magic)");
    if (pre[6] < 1 || pre[6] > 3 || pre[7] != 0)
        return fail(r, SX_E_FORMAT, "unsupported .npy format version %u.%u (want 1.0, 2.0, 3.0)",
                    pre[6], pre[7]);
    size_t lb = pre[6] == 1 ? 2 : 4;
    SX_TRY(rd_exact(r, pre + 8, lb, "header length"));
    uint32_t hl = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    if (lb == 4)
        hl |= (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    *header_len = 8 + lb + hl;
    if (hl > NPY_MAX_HEADER || *header_len > r->size)
        return fail(r, SX_E_FORMAT, "header of %lu bytes is %s", (unsigned long)hl,
                    hl > NPY_MAX_HEADER ? "too large (at most 1 MiB)" : "longer than the file");
    char *text = sx_alloc(hl + 1);
    if (text == NULL)
        return fail(r, SX_E_NOMEM, "out of memory for the header");
    sx_status s = rd_exact(r, text, hl, "header");
    text[s == SX_OK ? hl : 0] = '\0';
    if (s == SX_OK && strlen(text) != hl)
        s = fail(r, SX_E_FORMAT, "bad header: a NUL byte in it");
    hparse p = {r, text, 0};
    if (s == SX_OK)
        s = parse_dict(&p, h);
    sx_free(text);
    return s;
}

/* The element count and payload bytes, checked for overflow and against the file's size. */
static sx_status check_payload(const npy_reader *r, npy_header *h, uint64_t header_len,
                               uint64_t *bytes)
{
    uint64_t count = 1, esize = npy_types[h->type].size;
    for (int k = 0; k < h->rank; k++) {
        uint64_t d = (uint64_t)h->dims[k];
        if (d != 0 && count > (uint64_t)INT64_MAX / esize / d)
            return fail(r, SX_E_FORMAT, "dimensions overflow 64 bits");
        count *= d;
    }
    h->count = (int64_t)count;
    *bytes = count * esize;
    if (r->size != UINT64_MAX && *bytes > r->size - header_len)
        return fail(r, SX_E_FORMAT,
                    "truncated: the header announces %llu bytes of data but the file has %llu "
                    "after the header",
                    (unsigned long long)*bytes, (unsigned long long)(r->size - header_len));
    return SX_OK;
}

static void swap_bytes(uint8_t *d, int64_t count, size_t esize)
{
    for (int64_t i = 0; i < count; i++, d += esize)
        for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
            uint8_t t = d[a];
            d[a] = d[b];
            d[b] = t;
        }
}

/* The payload into a new array; the stream must end right after it. */
static sx_status read_payload(npy_reader *r, const npy_header *h, uint64_t bytes, sx_ds_npy **out)
{
    sx_ds_npy *a = sx_calloc(1, sizeof *a);
    void *data = a ? sx_alloc(bytes > 0 ? (size_t)bytes : 1) : NULL;
    if (data == NULL) {
        sx_free(a);
        return fail(r, SX_E_NOMEM, "out of memory for %llu bytes", (unsigned long long)bytes);
    }
    size_t got = 0;
    uint8_t extra;
    sx_status s = rd(r, data, (size_t)bytes, &got);
    if (s == SX_OK && got < bytes)
        s = fail(r, SX_E_FORMAT,
                 "truncated: the header announces %llu bytes of data but the file ends after %zu",
                 (unsigned long long)bytes, got);
    if (s == SX_OK && (s = rd(r, &extra, 1, &got)) == SX_OK && got > 0)
        s = fail(r, SX_E_FORMAT, "trailing bytes after the %llu bytes of data",
                 (unsigned long long)bytes);
    if (s != SX_OK) {
        sx_free(data);
        sx_free(a);
        return s;
    }
    if (h->swap)
        swap_bytes(data, h->count, npy_types[h->type].size);
    if (h->type == SX_DS_NPY_BOOL)
        for (int64_t i = 0; i < h->count; i++)
            ((uint8_t *)data)[i] = ((uint8_t *)data)[i] != 0;
    a->type = h->type;
    a->rank = h->rank;
    memcpy(a->dims, h->dims, sizeof a->dims);
    a->count = h->count;
    a->data = data;
    *out = a;
    return SX_OK;
}

static sx_status read_all(npy_reader *r, sx_ds_npy **out)
{
    npy_header h;
    memset(&h, 0, sizeof h);
    uint64_t header_len = 0, bytes = 0;
    SX_TRY(read_header(r, &h, &header_len));
    SX_TRY(check_payload(r, &h, header_len, &bytes));
    return read_payload(r, &h, bytes, out);
}

sx_status sx_ds_npy_read_raw(const char *path, sx_ds_npy **out)
{
    if (out != NULL)
        *out = NULL;
    if (path == NULL || out == NULL)
        return sx_error(SX_E_ARG, "sx_ds_npy_read_raw: %s is NULL", path ? "out" : "path");
    npy_reader r;
    SX_TRY(open_file(&r, path));
    sx_status s = read_all(&r, out);
    close_reader(&r);
    return s;
}

sx_status sx_ds_npy_parse(const void *buf, size_t len, const char *name, sx_ds_npy **out)
{
    if (out != NULL)
        *out = NULL;
    if (out == NULL || (buf == NULL && len > 0))
        return sx_error(SX_E_ARG, "sx_ds_npy_parse: %s is NULL", out ? "buf" : "out");
    npy_reader r = {.name = name ? name : "<memory>", .mem = buf, .mem_len = len, .size = len};
    return read_all(&r, out);
}

void sx_ds_npy_free(sx_ds_npy *a)
{
    if (a == NULL)
        return;
    sx_free(a->data);
    sx_free(a);
}

/* ---------------------------------------------------------------- conversion */

double sx_ds_npy_get(const sx_ds_npy *a, int64_t i)
{
    const uint8_t *p = (const uint8_t *)a->data + (size_t)i * npy_types[a->type].size;
    switch (a->type) {
    case SX_DS_NPY_BOOL:
    case SX_DS_NPY_U8:
        return *p;
    case SX_DS_NPY_I8:
        return *(const int8_t *)p;
    case SX_DS_NPY_I16:
        return *(const int16_t *)p;
    case SX_DS_NPY_U16:
        return *(const uint16_t *)p;
    case SX_DS_NPY_I32:
        return *(const int32_t *)p;
    case SX_DS_NPY_U32:
        return *(const uint32_t *)p;
    case SX_DS_NPY_I64:
        return (double)*(const int64_t *)p;
    case SX_DS_NPY_U64:
        return (double)*(const uint64_t *)p;
    case SX_DS_NPY_F32:
        return *(const float *)p;
    case SX_DS_NPY_F64:
        return *(const double *)p;
    }
    return 0;
}

static sx_status check_array(const char *who, const sx_ds_npy *a)
{
    if (a == NULL || a->data == NULL || !type_ok(a->type) || a->rank < 0 || a->rank > SX_MAX_RANK)
        return sx_error(SX_E_ARG, "%s: %s", who, a == NULL ? "array is NULL" : "invalid array");
    SX_TRY(sx_shape_check(who, a->rank, a->dims));
    if (sx_shape_size(a->rank, a->dims) != a->count)
        return sx_error(SX_E_ARG, "%s: count %lld is not the product of the dims", who,
                        (long long)a->count);
    return SX_OK;
}

sx_status sx_ds_npy_to_tensor(const sx_ds_npy *a, sx_dtype dtype, double scale, sx_tensor **out)
{
    const char *who = "sx_ds_npy_to_tensor";
    if (out != NULL)
        *out = NULL;
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    SX_TRY(check_array(who, a));
    if ((dtype != SX_F32 && dtype != SX_F64) || !isfinite(scale))
        return sx_error(SX_E_ARG, "%s: %s", who,
                        isfinite(scale) ? "bad dtype" : "scale not finite");
    sx_tensor *t = NULL;
    SX_TRY(sx_tensor_new(dtype, a->rank, a->dims, &t));
    for (int64_t i = 0; i < a->count; i++) {
        double v = scale == 1 ? sx_ds_npy_get(a, i) : sx_ds_npy_get(a, i) * scale;
        if (dtype == SX_F32)
            SX_F32P(t)
        [i] = (a->type == SX_DS_NPY_F32 && scale == 1) ? ((const float *)a->data)[i] : (float)v;
        else SX_F64P(t)[i] = v;
    }
    *out = t;
    return SX_OK;
}

sx_status sx_ds_npy_read(const char *path, sx_dtype dtype, sx_tensor **out)
{
    if (out != NULL)
        *out = NULL;
    if (out == NULL || (dtype != SX_F32 && dtype != SX_F64))
        return sx_error(SX_E_ARG, "sx_ds_npy_read: %s", out ? "bad dtype" : "out is NULL");
    sx_ds_npy *a = NULL;
    SX_TRY(sx_ds_npy_read_raw(path, &a));
    sx_status s = sx_ds_npy_to_tensor(a, dtype, 1.0, out);
    sx_ds_npy_free(a);
    return s;
}

/* ---------------------------------------------------------------- writing */

/* The header: prefix, dictionary, spaces and '\n' up to a multiple of 64 bytes (version 1.0:
 * with at most 8 dims it is always shorter than 65536). Returns its length. */
static size_t make_header(char *buf, size_t n, sx_ds_npy_type type, int rank, const int64_t *shape)
{
    char dict[400], dims[300] = "";
    size_t k = 0;
    for (int i = 0; i < rank; i++)
        k += (size_t)snprintf(dims + k, sizeof dims - k, "%lld%s", (long long)shape[i],
                              rank == 1 || i + 1 < rank ? "," : "");
    char order = npy_types[type].size == 1 ? '|' : host_little() ? '<' : '>';
    int d =
        snprintf(dict, sizeof dict, "{'descr': '%c%c%u', 'fortran_order': False, 'shape': (%s), }",
                 order, npy_types[type].kind, npy_types[type].size, dims);
    size_t total = (10 + (size_t)d + 1 + 63) / 64 * 64, hl = total - 10;
    memcpy(buf, NPY_MAGIC "\x01\x00", 8);
    buf[8] = (char)(hl & 0xff);
    buf[9] = (char)(hl >> 8);
    memcpy(buf + 10, dict, (size_t)d);
    memset(buf + 10 + d, ' ', total - 10 - (size_t)d - 1);
    buf[total - 1] = '\n';
    (void)n;
    return total;
}

static sx_status write_all(FILE *f, const void *p, size_t n)
{
    return fwrite(p, 1, n, f) == n ? SX_OK : SX_E_IO;
}

/* Write header and data to tmp (a new file), flushed and synced. */
static sx_status write_tmp(int fd, const char *hdr, size_t hl, const void *data, size_t bytes)
{
    FILE *f = fdopen(fd, "wb");
    if (f == NULL) {
        close(fd);
        return SX_E_IO;
    }
    sx_status s = write_all(f, hdr, hl);
    if (s == SX_OK)
        s = write_all(f, data, bytes);
    if (s == SX_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        s = SX_E_IO;
    if (fclose(f) != 0)
        s = SX_E_IO;
    return s;
}

sx_status sx_ds_npy_write(const char *path, sx_ds_npy_type type, int rank, const int64_t *shape,
                          const void *data)
{
    const char *who = "sx_ds_npy_write";
    if (path == NULL || (data == NULL) || (shape == NULL && rank > 0) || !type_ok(type))
        return sx_error(SX_E_ARG, "%s: %s", who,
                        !type_ok(type) ? "unknown element type" : "NULL argument");
    SX_TRY(sx_shape_check(who, rank, shape));
    int64_t count = sx_shape_size(rank, shape);
    if (count > INT64_MAX / 8)
        return sx_error(SX_E_ARG, "%s: %lld elements are too many", who, (long long)count);
    char hdr[512];
    size_t hl = make_header(hdr, sizeof hdr, type, rank, shape);
    size_t len = strlen(path);
    char *tmp = sx_alloc(len + 16);
    if (tmp == NULL)
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    snprintf(tmp, len + 16, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    sx_status s = fd < 0 ? SX_E_IO : SX_OK;
    int err = errno;
    if (s == SX_OK) {
        s = write_tmp(fd, hdr, hl, data, (size_t)count * npy_types[type].size);
        err = errno;
        if (s == SX_OK && rename(tmp, path) != 0)
            s = SX_E_IO, err = errno;
        if (s != SX_OK)
            unlink(tmp);
    }
    sx_free(tmp);
    if (s != SX_OK)
        return sx_error(s, "%s: cannot write: %s", path, strerror(err));
    return SX_OK;
}

sx_status sx_ds_npy_write_tensor(const char *path, const sx_tensor *t)
{
    if (t == NULL || (t->dtype != SX_F32 && t->dtype != SX_F64))
        return sx_error(SX_E_ARG, "sx_ds_npy_write_tensor: %s",
                        t ? "tensor not f32 or f64" : "tensor is NULL");
    return sx_ds_npy_write(path, t->dtype == SX_F32 ? SX_DS_NPY_F32 : SX_DS_NPY_F64, t->rank,
                           t->shape, t->data);
}

/* ---------------------------------------------------------------- a source over two files */

/* Element i of a u16, u32, i64 or u64 array as an integer; false when it is beyond 2^53 in
 * magnitude (not exact as a double). */
static bool exact_int(const sx_ds_npy *a, int64_t i, int64_t *v)
{
    const uint8_t *p = (const uint8_t *)a->data + (size_t)i * npy_types[a->type].size;
    const int64_t lim = (int64_t)1 << 53;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    switch (a->type) {
    case SX_DS_NPY_U16:
        memcpy(&u16, p, 2);
        *v = u16;
        return true;
    case SX_DS_NPY_U32:
        memcpy(&u32, p, 4);
        *v = u32;
        return true;
    case SX_DS_NPY_I64:
        memcpy(v, p, 8);
        return *v >= -lim && *v <= lim;
    case SX_DS_NPY_U64:
        memcpy(&u64, p, 8);
        *v = (int64_t)(u64 & 0x7fffffffffffffffu);
        return u64 <= (uint64_t)lim;
    default:
        return false;
    }
}

/* The data set type an array is kept as in a source: its own where there is one; u16 widened
 * to i32; u32, i64, u64 narrowed to i32 when every value fits, else f64 when every value is
 * exact there (|v| <= 2^53). */
static sx_status to_ds(const char *path, sx_ds_npy *a, sx_ds_type *t)
{
    static const sx_ds_type same[] = {
        [SX_DS_NPY_BOOL] = SX_DS_U8, [SX_DS_NPY_I8] = SX_DS_I8,   [SX_DS_NPY_U8] = SX_DS_U8,
        [SX_DS_NPY_I16] = SX_DS_I16, [SX_DS_NPY_I32] = SX_DS_I32, [SX_DS_NPY_F32] = SX_DS_F32,
        [SX_DS_NPY_F64] = SX_DS_F64};
    if (a->type != SX_DS_NPY_U16 && a->type != SX_DS_NPY_U32 && a->type != SX_DS_NPY_I64 &&
        a->type != SX_DS_NPY_U64) {
        *t = same[a->type];
        return SX_OK;
    }
    bool fits32 = true;
    for (int64_t i = 0; i < a->count; i++) {
        int64_t v = 0;
        if (!exact_int(a, i, &v))
            return sx_error(SX_E_RANGE, "%s: element %lld (%.17g) is not exact as a double", path,
                            (long long)i, sx_ds_npy_get(a, i));
        fits32 = fits32 && v >= INT32_MIN && v <= INT32_MAX;
    }
    *t = fits32 ? SX_DS_I32 : SX_DS_F64;
    void *d = sx_alloc((size_t)(a->count > 0 ? a->count : 1) * (fits32 ? 4 : 8));
    if (d == NULL)
        return sx_error(SX_E_NOMEM, "%s: out of memory", path);
    for (int64_t i = 0; i < a->count; i++) {
        double v = sx_ds_npy_get(a, i); /* exact: checked above */
        if (fits32)
            ((int32_t *)d)[i] = (int32_t)v;
        else
            ((double *)d)[i] = v;
    }
    sx_free(a->data);
    a->data = d;
    return SX_OK;
}

typedef struct npy_pair {
    sx_ds_npy *x, *y;
    size_t xrow, yrow; /* bytes of one example */
} npy_pair;

static void pair_drop(void *impl)
{
    npy_pair *p = impl;
    sx_ds_npy_free(p->x);
    sx_ds_npy_free(p->y);
    sx_free(p);
}

static sx_status pair_get(const sx_ds_source *s, int64_t i, void *x, void *y)
{
    const npy_pair *p = s->impl;
    if (x != NULL)
        memcpy(x, (const uint8_t *)p->x->data + (size_t)i * p->xrow, p->xrow);
    if (y != NULL)
        memcpy(y, (const uint8_t *)p->y->data + (size_t)i * p->yrow, p->yrow);
    return SX_OK;
}

static sx_status pair_spec(const char *who, const npy_pair *p, const char *xp, const char *yp,
                           int64_t classes, sx_ds_spec *spec)
{
    char a[160], b[160];
    if (p->x->rank < 1 || p->y->rank < 1 || p->x->dims[0] != p->y->dims[0] || p->x->dims[0] < 1)
        return sx_error(SX_E_SHAPE, "%s: %s is %s and %s is %s (want the same first dim >= 1)", who,
                        xp, sx_shape_str(p->x->rank, p->x->dims, a, sizeof a), yp,
                        sx_shape_str(p->y->rank, p->y->dims, b, sizeof b));
    spec->x_rank = p->x->rank - 1;
    spec->y_rank = p->y->rank - 1;
    spec->classes = classes;
    spec->x_scale = 1.0;
    memcpy(spec->x_shape, p->x->dims + 1, sizeof(int64_t) * (size_t)spec->x_rank);
    memcpy(spec->y_shape, p->y->dims + 1, sizeof(int64_t) * (size_t)spec->y_rank);
    return sx__spec_check(who, spec);
}

sx_status sx_ds_source_npy(const char *x_path, const char *y_path, int64_t classes,
                           sx_ds_source **out)
{
    const char *who = "sx_ds_source_npy";
    if (out != NULL)
        *out = NULL;
    if (x_path == NULL || y_path == NULL || out == NULL || classes < 0)
        return sx_error(SX_E_ARG, "%s: %s", who, classes < 0 ? "classes < 0" : "NULL argument");
    npy_pair *p = sx_calloc(1, sizeof *p);
    if (p == NULL)
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    sx_ds_spec spec;
    memset(&spec, 0, sizeof spec);
    sx_status s = sx_ds_npy_read_raw(x_path, &p->x);
    if (s == SX_OK)
        s = sx_ds_npy_read_raw(y_path, &p->y);
    if (s == SX_OK)
        s = to_ds(x_path, p->x, &spec.x_type);
    if (s == SX_OK)
        s = to_ds(y_path, p->y, &spec.y_type);
    if (s == SX_OK)
        s = pair_spec(who, p, x_path, y_path, classes, &spec);
    if (s != SX_OK) {
        pair_drop(p);
        return s;
    }
    p->xrow = (size_t)sx_shape_size(spec.x_rank, spec.x_shape) * sx_ds_type_size(spec.x_type);
    p->yrow = (size_t)sx_shape_size(spec.y_rank, spec.y_shape) * sx_ds_type_size(spec.y_type);
    return sx__source_new(who, &spec, p->x->dims[0], who, pair_get, p, pair_drop, out);
}
