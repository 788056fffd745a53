/* safetensors.c: safetensors files, read and written. The header is a small, flat JSON object
 * read by a hand-written parser that knows its one shape (an object of tensor entries and one
 * object of string metadata) and refuses anything else, so nothing recurses. Every tensor entry
 * is checked, and the offsets must tile the data region exactly, before any tensor is
 * allocated; the data is then read in one pass in file order. Written files are padded as
 * Hugging Face's writer pads them and renamed into place. */
#include "datasets_impl.h"

#include <stdlib.h>
#include <string.h>

/* The largest header accepted, Hugging Face's own limit. */
#define ST_MAX_HEADER 100000000u

/* ---------------------------------------------------------------- dtypes */

/* Every dtype safetensors names; `ok` ones are read (as `to`). size 0: sub-byte elements. */
static const struct {
    const char *name;
    unsigned size;
    bool ok;
    sx_dtype to;
} st_dtypes[] = {
    {"F64", 8, true, SX_F64},      {"F32", 4, true, SX_F32},      {"F16", 2, true, SX_F32},
    {"BF16", 2, true, SX_F32},     {"I64", 8, false, SX_F32},     {"U64", 8, false, SX_F32},
    {"I32", 4, false, SX_F32},     {"U32", 4, false, SX_F32},     {"I16", 2, false, SX_F32},
    {"U16", 2, false, SX_F32},     {"I8", 1, false, SX_F32},      {"U8", 1, false, SX_F32},
    {"BOOL", 1, false, SX_F32},    {"F8_E4M3", 1, false, SX_F32}, {"F8_E5M2", 1, false, SX_F32},
    {"F8_E8M0", 1, false, SX_F32}, {"C64", 8, false, SX_F32},     {"F4", 0, false, SX_F32},
    {"F6_E2M3", 0, false, SX_F32}, {"F6_E3M2", 0, false, SX_F32},
};
#define ST_NDTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))
enum { ST_F64 = 0, ST_F32 = 1, ST_F16 = 2, ST_BF16 = 3 };

/* ---------------------------------------------------------------- the JSON header */

/* One tensor entry of the header. */
typedef struct st_entry {
    char *name; /* owned */
    int dtype;  /* index into st_dtypes */
    int rank;
    int64_t dims[SX_MAX_RANK];
    uint64_t begin, end;
} st_entry;

typedef struct jp {
    const sx__in *in;
    const uint8_t *s; /* the header's bytes */
    size_t n, i;
    st_entry *e; /* the entries so far */
    int64_t ne, cap;
    sx_ds_tensors *set; /* receives the metadata */
} jp;

static void ws(jp *p)
{
    while (p->i < p->n &&
           (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static sx_status jbad(const jp *p, const char *what)
{
    return sx__in_fail(p->in, SX_E_FORMAT, "bad header: %s at byte %zu of the header", what, p->i);
}

/* The next non-space byte, or 0 at the end. */
static int peekc(jp *p)
{
    ws(p);
    return p->i < p->n ? p->s[p->i] : 0;
}

static sx_status jexpect(jp *p, char c, const char *what)
{
    if (peekc(p) != c)
        return jbad(p, what);
    p->i++;
    return SX_OK;
}

static int hexval(uint8_t c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Four hex digits at s[i..i+4) (i + 4 <= n checked by the caller); -1 if not. */
static long hex4(const uint8_t *s)
{
    long v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(s[k]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

static size_t put_utf8(char *d, uint32_t cp)
{
    if (cp < 0x80) {
        d[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (char)(0xc0 | cp >> 6);
        d[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (char)(0xe0 | cp >> 12);
        d[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        d[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    d[0] = (char)(0xf0 | cp >> 18);
    d[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    d[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    d[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* One escape at s[*i] (after the backslash) into d; the number of bytes written, or 0 for an
 * invalid escape (unknown letter, bad hex, a lone surrogate, \u0000). */
static size_t unescape(const uint8_t *s, size_t n, size_t *i, char *d)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = s[*i] ? strchr(from, s[*i]) : NULL;
    if (k != NULL) {
        d[0] = to[k - from];
        (*i)++;
        return 1;
    }
    if (s[*i] != 'u' || n - *i < 5)
        return 0;
    long cp = hex4(s + *i + 1);
    *i += 5;
    if (cp >= 0xd800 && cp <= 0xdbff) { /* a high surrogate: its low half must follow */
        long lo = n - *i >= 6 && s[*i] == '\\' && s[*i + 1] == 'u' ? hex4(s + *i + 2) : -1;
        if (lo < 0xdc00 || lo > 0xdfff)
            return 0;
        *i += 6;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    } else if (cp <= 0 || (cp >= 0xdc00 && cp <= 0xdfff)) {
        return 0;
    }
    return put_utf8(d, (uint32_t)cp);
}

/* A JSON string into a new NUL-terminated string (*out, sx_alloc'd; *len its bytes). The raw
 * bytes must be valid UTF-8 without control characters; escapes are decoded. */
static sx_status jstring(jp *p, char **out, size_t *len)
{
    SX_TRY(jexpect(p, '"', "want a string"));
    size_t start = p->i, end = start;
    while (end < p->n && p->s[end] != '"') {
        if (p->s[end] < 0x20)
            return p->i = end, jbad(p, "a control character in a string");
        end += p->s[end] == '\\' ? 2 : 1;
    }
    if (end >= p->n)
        return jbad(p, "an unterminated string");
    if (!sx__utf8_valid(p->s + start, end - start))
        return jbad(p, "invalid UTF-8 in a string");
    char *d = sx_alloc(end - start + 1);
    if (d == NULL)
        return sx__in_fail(p->in, SX_E_NOMEM, "out of memory for the header");
    size_t k = 0;
    for (size_t i = start; i < end;) {
        if (p->s[i] != '\\') {
            d[k++] = (char)p->s[i++];
            continue;
        }
        i++;
        size_t w = unescape(p->s, end, &i, d + k);
        if (w == 0) {
            sx_free(d);
            p->i = i;
            return jbad(p, "an invalid escape in a string");
        }
        k += w;
    }
    d[k] = '\0';
    p->i = end + 1;
    *out = d;
    *len = k;
    return SX_OK;
}

/* An integer in 0..2^63-1, written as JSON writes it (no sign, fraction, exponent or leading
 * zero). */
static sx_status juint(jp *p, uint64_t *v)
{
    int c = peekc(p);
    if (c < '0' || c > '9')
        return jbad(p, "want a number >= 0");
    uint64_t x = 0;
    size_t i = p->i;
    for (; i < p->n && p->s[i] >= '0' && p->s[i] <= '9'; i++) {
        if (x > ((uint64_t)INT64_MAX - (uint64_t)(p->s[i] - '0')) / 10)
            return jbad(p, "a number above 2^63 - 1");
        x = x * 10 + (uint64_t)(p->s[i] - '0');
    }
    if (i - p->i > 1 && c == '0')
        return jbad(p, "a number with a leading zero");
    if (i < p->n && (p->s[i] == '.' || p->s[i] == 'e' || p->s[i] == 'E'))
        return p->i = i, jbad(p, "a number that is not an integer");
    p->i = i;
    *v = x;
    return SX_OK;
}

/* After an element of an object or array: ',' (true) or the closing bracket (false). */
static sx_status jnext(jp *p, char close, bool *more)
{
    int c = peekc(p);
    if (c != ',' && c != close)
        return jbad(p, close == '}' ? "want ',' or '}'" : "want ',' or ']'");
    p->i++;
    *more = c == ',';
    return SX_OK;
}

/* "__metadata__": an object of string values. */
static sx_status parse_meta(jp *p)
{
    SX_TRY(jexpect(p, '{', "want an object of strings for __metadata__"));
    if (peekc(p) == '}')
        return p->i++, SX_OK;
    for (bool more = true; more;) {
        char *k = NULL, *v = NULL;
        size_t kl = 0, vl = 0;
        size_t at = (ws(p), p->i);
        sx_status s = jstring(p, &k, &kl);
        if (s == SX_OK)
            s = jexpect(p, ':', "want ':'");
        if (s == SX_OK && peekc(p) != '"')
            s = jbad(p, "want a string metadata value");
        if (s == SX_OK)
            s = jstring(p, &v, &vl);
        if (s == SX_OK && (kl == 0 || strlen(k) != kl))
            s = (p->i = at, jbad(p, "an empty metadata key"));
        if (s == SX_OK && sx_ds_tensors_meta_get(p->set, k) != NULL)
            s = sx__in_fail(p->in, SX_E_FORMAT, "bad header: metadata key '%s' appears twice", k);
        if (s == SX_OK)
            s = sx_ds_tensors_meta_set(p->set, k, v);
        sx_free(k);
        sx_free(v);
        SX_TRY(s);
        SX_TRY(jnext(p, '}', &more));
    }
    return SX_OK;
}

/* A JSON array of at most `max` integers into v (*count receives how many): tensor e's field
 * `what`. */
static sx_status parse_uints(jp *p, const st_entry *e, const char *what, uint64_t *v, int max,
                             int *count)
{
    if (peekc(p) != '[')
        return jbad(p, strcmp(what, "shape") == 0 ? "want a shape array"
                                                  : "want a data_offsets array");
    p->i++;
    *count = 0;
    if (peekc(p) == ']')
        return p->i++, SX_OK;
    for (bool more = true; more;) {
        if (*count == max)
            return sx__in_fail(p->in, SX_E_FORMAT, "tensor '%s': %s holds more than %d numbers%s",
                               e->name, what, max, max == SX_MAX_RANK ? " (a rank above 8)" : "");
        SX_TRY(juint(p, &v[(*count)++]));
        SX_TRY(jnext(p, ']', &more));
    }
    return SX_OK;
}

static sx_status parse_dtype(jp *p, st_entry *e)
{
    char *d = NULL;
    size_t len = 0;
    if (peekc(p) != '"')
        return jbad(p, "want a dtype string");
    SX_TRY(jstring(p, &d, &len));
    for (int k = 0; k < ST_NDTYPES; k++)
        if (strcmp(d, st_dtypes[k].name) == 0)
            e->dtype = k;
    sx_status s = SX_OK;
    if (e->dtype < 0)
        s = sx__in_fail(p->in, SX_E_FORMAT, "tensor '%s': unknown dtype '%.40s'", e->name, d);
    else if (!st_dtypes[e->dtype].ok)
        s = sx__in_fail(p->in, SX_E_UNSUPPORTED,
                        "tensor '%s' has dtype %s: strix reads F32, F64, F16 and BF16 only",
                        e->name, d);
    sx_free(d);
    return s;
}

/* One field of a tensor entry; seen[] marks dtype, shape, data_offsets. */
static sx_status parse_field(jp *p, st_entry *e, const char *key, bool seen[3])
{
    static const char *const keys[3] = {"dtype", "shape", "data_offsets"};
    int k = 0;
    while (k < 3 && strcmp(key, keys[k]) != 0)
        k++;
    if (k == 3 || seen[k])
        return sx__in_fail(p->in, SX_E_FORMAT, "tensor '%s': %s key '%.40s'", e->name,
                           k == 3 ? "unknown" : "repeated", key);
    seen[k] = true;
    if (k == 0)
        return parse_dtype(p, e);
    uint64_t v[SX_MAX_RANK];
    int count = 0;
    if (k == 1) {
        SX_TRY(parse_uints(p, e, "shape", v, SX_MAX_RANK, &count));
        e->rank = count;
        for (int i = 0; i < count; i++)
            e->dims[i] = (int64_t)v[i];
        return SX_OK;
    }
    SX_TRY(parse_uints(p, e, "data_offsets", v, 2, &count));
    if (count != 2)
        return sx__in_fail(p->in, SX_E_FORMAT, "tensor '%s': data_offsets holds %d numbers, want 2",
                           e->name, count);
    e->begin = v[0];
    e->end = v[1];
    return SX_OK;
}

/* A tensor entry's object, into e (whose name is set). */
static sx_status parse_entry(jp *p, st_entry *e)
{
    bool seen[3] = {false, false, false};
    e->dtype = -1;
    SX_TRY(jexpect(p, '{', "want an object for a tensor"));
    if (peekc(p) != '}')
        for (bool more = true; more;) {
            char *key = NULL;
            size_t len = 0;
            SX_TRY(jstring(p, &key, &len));
            sx_status s = jexpect(p, ':', "want ':'");
            if (s == SX_OK)
                s = parse_field(p, e, key, seen);
            sx_free(key);
            SX_TRY(s);
            SX_TRY(jnext(p, '}', &more));
        }
    else
        p->i++;
    for (int k = 0; k < 3; k++)
        if (!seen[k])
            return sx__in_fail(p->in, SX_E_FORMAT, "tensor '%s': no '%s' key", e->name,
                               k == 0   ? "dtype"
                               : k == 1 ? "shape"
                                        : "data_offsets");
    return SX_OK;
}

/* The top-level object. */
static sx_status parse_header(jp *p)
{
    bool meta = false;
    SX_TRY(jexpect(p, '{', "want a JSON object"));
    if (peekc(p) != '}')
        for (bool more = true; more;) {
            char *name = NULL;
            size_t len = 0, at = (ws(p), p->i);
            SX_TRY(jstring(p, &name, &len));
            sx_status s = jexpect(p, ':', "want ':'");
            if (s == SX_OK && strcmp(name, "__metadata__") == 0) {
                sx_free(name);
                if (meta)
                    return sx__in_fail(p->in, SX_E_FORMAT,
                                       "bad header: '__metadata__' appears twice");
                meta = true;
                SX_TRY(s);
                SX_TRY(parse_meta(p));
                SX_TRY(jnext(p, '}', &more));
                continue;
            }
            if (s == SX_OK && (len == 0 || strlen(name) != len))
                s = (p->i = at, jbad(p, "an empty tensor name"));
            if (s == SX_OK && p->ne == p->cap) {
                int64_t cap = p->cap ? 2 * p->cap : 16;
                st_entry *e = sx_realloc(p->e, (size_t)cap * sizeof *e);
                if (e == NULL)
                    s = sx__in_fail(p->in, SX_E_NOMEM, "out of memory for the header");
                else
                    p->e = e, p->cap = cap;
            }
            if (s != SX_OK) {
                sx_free(name);
                return s;
            }
            st_entry *e = &p->e[p->ne++];
            memset(e, 0, sizeof *e);
            e->name = name;
            SX_TRY(parse_entry(p, e));
            SX_TRY(jnext(p, '}', &more));
        }
    else
        p->i++;
    if (peekc(p) != 0)
        return jbad(p, "text after the header's object");
    return SX_OK;
}

/* ---------------------------------------------------------------- checking the entries */

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

static int by_offset(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1)
           : x->end != y->end   ? (x->end < y->end ? -1 : 1)
                                : 0;
}

static sx_status check_unique(const sx__in *in, const jp *p)
{
    if (p->ne < 2)
        return SX_OK;
    const st_entry **v = sx_alloc((size_t)p->ne * sizeof *v);
    if (v == NULL)
        return sx__in_fail(in, SX_E_NOMEM, "out of memory for the header");
    for (int64_t i = 0; i < p->ne; i++)
        v[i] = &p->e[i];
    qsort(v, (size_t)p->ne, sizeof *v, by_name);
    sx_status s = SX_OK;
    for (int64_t i = 1; i < p->ne && s == SX_OK; i++)
        if (strcmp(v[i]->name, v[i - 1]->name) == 0)
            s = sx__in_fail(in, SX_E_FORMAT, "tensor '%s' appears twice", v[i]->name);
    sx_free(v);
    return s;
}

/* The entry's bytes from its shape and dtype, against its offsets. */
static sx_status check_bytes(const sx__in *in, const st_entry *e)
{
    char sh[200];
    uint64_t bytes = st_dtypes[e->dtype].size;
    for (int k = 0; k < e->rank; k++) {
        uint64_t d = (uint64_t)e->dims[k];
        if (d != 0 && bytes > (uint64_t)INT64_MAX / d)
            return sx__in_fail(in, SX_E_FORMAT, "tensor '%s': shape %s overflows 64 bits", e->name,
                               sx_shape_str(e->rank, e->dims, sh, sizeof sh));
        bytes *= d;
    }
    if (e->end < e->begin)
        return sx__in_fail(in, SX_E_FORMAT,
                           "tensor '%s': data_offsets [%llu, %llu] end before "
                           "they begin",
                           e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end - e->begin != bytes)
        return sx__in_fail(in, SX_E_FORMAT,
                           "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but shape %s "
                           "of %s needs %llu",
                           e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                           (unsigned long long)(e->end - e->begin),
                           sx_shape_str(e->rank, e->dims, sh, sizeof sh), st_dtypes[e->dtype].name,
                           (unsigned long long)bytes);
    return SX_OK;
}

/* Sort the entries by offset and check they tile [0, region) (region UINT64_MAX: unknown). */
static sx_status check_tiling(const sx__in *in, jp *p, uint64_t region)
{
    if (p->ne > 1)
        qsort(p->e, (size_t)p->ne, sizeof *p->e, by_offset);
    uint64_t at = 0;
    for (int64_t i = 0; i < p->ne; i++) {
        const st_entry *e = &p->e[i];
        if (e->begin != at)
            return sx__in_fail(in, SX_E_FORMAT,
                               "tensor '%s' begins at byte %llu of the data region, want %llu "
                               "(%s%s%s): the offsets must tile the data without gaps or "
                               "overlaps",
                               e->name, (unsigned long long)e->begin, (unsigned long long)at,
                               i ? "the end of '" : "its start", i ? p->e[i - 1].name : "",
                               i ? "'" : "");
        if (region != UINT64_MAX && e->end > region)
            return sx__in_fail(in, SX_E_FORMAT,
                               "tensor '%s' ends at byte %llu, past the data region's %llu bytes",
                               e->name, (unsigned long long)e->end, (unsigned long long)region);
        at = e->end;
    }
    if (region != UINT64_MAX && at != region)
        return sx__in_fail(in, SX_E_FORMAT,
                           "the data region has %llu bytes but the tensors end at byte %llu",
                           (unsigned long long)region, (unsigned long long)at);
    return SX_OK;
}

/* ---------------------------------------------------------------- reading */

static void swap_n(uint8_t *d, int64_t count, size_t esize)
{
    for (int64_t i = 0; i < count; i++, d += esize)
        for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
            uint8_t t = d[a];
            d[a] = d[b];
            d[b] = t;
        }
}

/* n 16-bit little-endian elements at src into f32 at dst, front to back. src may be the upper
 * half of dst's own memory (dst element i never overwrites a source element after i). */
static void halves_to_f32(const uint8_t *src, float *dst, int64_t n, bool bf16)
{
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
        uint32_t b = bf16 ? sx__bf16_bits(h) : sx__f16_bits(h);
        memcpy(dst + i, &b, 4);
    }
}

/* Read one entry's data into a new tensor, added to the set. */
static sx_status read_tensor(sx__in *in, sx_ds_tensors *set, const st_entry *e)
{
    sx_tensor *t = NULL;
    SX_TRY(sx_tensor_new(st_dtypes[e->dtype].to, e->rank, e->dims, &t));
    size_t bytes = (size_t)(e->end - e->begin);
    bool half = e->dtype == ST_F16 || e->dtype == ST_BF16;
    uint8_t *dst = (uint8_t *)t->data + (half ? bytes : 0); /* halves: the upper half */
    const uint8_t *src = sx__in_peek(in, bytes);
    sx_status s = SX_OK;
    if (src == NULL && bytes > 0) {
        s = sx__in_read(in, dst, bytes, "data");
        src = dst;
    }
    if (s != SX_OK) {
        sx_tensor_free(t);
        return s;
    }
    if (half)
        halves_to_f32(src, t->data, t->size, e->dtype == ST_BF16);
    else if (bytes > 0) {
        if (src != dst)
            memcpy(dst, src, bytes);
        if (!sx__host_little())
            swap_n(dst, t->size, st_dtypes[e->dtype].size);
    }
    return sx__tensors_put(set, in->name, e->name, strlen(e->name), t);
}

/* The 8-byte length and the header's bytes (*owned: a copy to free, or NULL for memory). */
static sx_status read_prefix(sx__in *in, const uint8_t **hdr, uint8_t **owned, uint64_t *n)
{
    uint8_t pre[8];
    if (in->size == 0)
        return sx__in_fail(in, SX_E_FORMAT, "empty file");
    SX_TRY(sx__in_read(in, pre, 8, "header length"));
    *n = 0;
    for (int k = 7; k >= 0; k--)
        *n = *n << 8 | pre[k];
    if (*n == 0 || *n > ST_MAX_HEADER || (in->size != UINT64_MAX && *n > in->size - 8))
        return sx__in_fail(in, SX_E_FORMAT, "header length %llu is %s", (unsigned long long)*n,
                           *n == 0              ? "0"
                           : *n > ST_MAX_HEADER ? "above the limit of 100000000 bytes"
                                                : "beyond the end of the file");
    *owned = NULL;
    *hdr = sx__in_peek(in, (size_t)*n);
    if (*hdr != NULL)
        return SX_OK;
    *owned = sx_alloc((size_t)*n);
    if (*owned == NULL)
        return sx__in_fail(in, SX_E_NOMEM, "out of memory for the header");
    *hdr = *owned;
    return sx__in_read(in, *owned, (size_t)*n, "header");
}

static sx_status read_all(sx__in *in, sx_ds_tensors **out)
{
    const uint8_t *hdr = NULL;
    uint8_t *owned = NULL;
    uint64_t n = 0;
    sx_ds_tensors *set = NULL;
    jp p;
    memset(&p, 0, sizeof p);
    sx_status s = read_prefix(in, &hdr, &owned, &n);
    if (s == SX_OK)
        s = sx_ds_tensors_new(&set);
    if (s == SX_OK) {
        p = (jp){.in = in, .s = hdr, .n = (size_t)n, .set = set};
        s = parse_header(&p);
    }
    sx_free(owned);
    if (s == SX_OK)
        s = check_unique(in, &p);
    for (int64_t i = 0; i < p.ne && s == SX_OK; i++)
        s = check_bytes(in, &p.e[i]);
    if (s == SX_OK)
        s = check_tiling(in, &p, in->size == UINT64_MAX ? UINT64_MAX : in->size - 8 - n);
    for (int64_t i = 0; i < p.ne && s == SX_OK; i++)
        s = read_tensor(in, set, &p.e[i]);
    if (s == SX_OK)
        s = sx__in_end(in, "the last tensor");
    for (int64_t i = 0; i < p.ne; i++)
        sx_free(p.e[i].name);
    sx_free(p.e);
    if (s == SX_E_NOMEM) /* the message names the input, whichever allocation failed */
        s = sx__in_fail(in, SX_E_NOMEM, "out of memory");
    if (s != SX_OK) {
        sx_ds_tensors_free(set);
        return s;
    }
    *out = set;
    return SX_OK;
}

sx_status sx_ds_safetensors_read(const char *path, sx_ds_tensors **out)
{
    if (out != NULL)
        *out = NULL;
    if (path == NULL || out == NULL)
        return sx_error(SX_E_ARG, "sx_ds_safetensors_read: %s is NULL", path ? "out" : "path");
    sx__in in;
    SX_TRY(sx__in_open_file(&in, path));
    sx_status s = read_all(&in, out);
    sx__in_close(&in);
    return s;
}

sx_status sx_ds_safetensors_parse(const void *buf, size_t len, const char *name,
                                  sx_ds_tensors **out)
{
    if (out != NULL)
        *out = NULL;
    if (out == NULL || (buf == NULL && len > 0))
        return sx_error(SX_E_ARG, "sx_ds_safetensors_parse: %s is NULL", out ? "buf" : "out");
    sx__in in;
    sx__in_open_mem(&in, buf, len, name);
    return read_all(&in, out);
}

/* ---------------------------------------------------------------- writing */

/* A growing text buffer; `bad` once an allocation failed. */
typedef struct text {
    char *s;
    size_t n, cap;
    bool bad;
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->bad)
        return;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + n + 1)
            cap *= 2;
        char *d = sx_realloc(t->s, cap);
        if (d == NULL) {
            t->bad = true;
            return;
        }
        t->s = d;
        t->cap = cap;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = '\0';
}

static void puts_(text *t, const char *s)
{
    put(t, s, strlen(s));
}

/* A JSON string: '"', '\' and control characters escaped, other bytes (UTF-8) as they are. */
static void put_json(text *t, const char *s)
{
    put(t, "\"", 1);
    for (; *s; s++) {
        char e[8];
        uint8_t c = (uint8_t)*s;
        if (c == '"' || c == '\\')
            e[0] = '\\', e[1] = (char)c, e[2] = '\0';
        else if (c < 0x20)
            snprintf(e, sizeof e, "\\u%04x", c);
        else
            e[0] = (char)c, e[1] = '\0';
        puts_(t, e);
    }
    put(t, "\"", 1);
}

/* The header's JSON, padded with spaces to a multiple of 8 bytes. */
static void make_header(const sx_ds_tensors *set, text *t)
{
    puts_(t, "{");
    int64_t nm = sx_ds_tensors_meta_count(set), n = sx_ds_tensors_count(set);
    if (nm > 0) {
        puts_(t, "\"__metadata__\":{");
        for (int64_t i = 0; i < nm; i++) {
            const char *k = sx_ds_tensors_meta_key(set, i);
            put_json(t, k);
            puts_(t, ":");
            put_json(t, sx_ds_tensors_meta_get(set, k));
            puts_(t, i + 1 < nm ? "," : "}");
        }
        puts_(t, n > 0 ? "," : "");
    }
    uint64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        const sx_tensor *x = sx_ds_tensors_at(set, i);
        char num[64];
        put_json(t, sx_ds_tensors_name(set, i));
        puts_(t, x->dtype == SX_F32 ? ":{\"dtype\":\"F32\",\"shape\":["
                                    : ":{\"dtype\":\"F64\","
                                      "\"shape\":[");
        for (int k = 0; k < x->rank; k++) {
            snprintf(num, sizeof num, "%s%lld", k ? "," : "", (long long)x->shape[k]);
            puts_(t, num);
        }
        uint64_t bytes = (uint64_t)x->size * sx_dtype_size(x->dtype);
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}%s", (unsigned long long)at,
                 (unsigned long long)(at + bytes), i + 1 < n ? "," : "");
        puts_(t, num);
        at += bytes;
    }
    puts_(t, "}");
    while (t->n % 8 != 0)
        puts_(t, " ");
}

typedef struct st_write {
    const sx_ds_tensors *set;
    const text *hdr;
} st_write;

/* Write count elements of esize bytes little-endian (swapped through a chunk on a big-endian
 * host). */
static sx_status write_le(FILE *f, const void *data, int64_t count, size_t esize)
{
    size_t bytes = (size_t)count * esize;
    if (sx__host_little())
        return fwrite(data, 1, bytes, f) == bytes ? SX_OK : SX_E_IO;
    uint8_t chunk[4096];
    for (size_t at = 0; at < bytes; at += sizeof chunk) {
        size_t k = bytes - at < sizeof chunk ? bytes - at : sizeof chunk;
        memcpy(chunk, (const uint8_t *)data + at, k);
        swap_n(chunk, (int64_t)(k / esize), esize);
        if (fwrite(chunk, 1, k, f) != k)
            return SX_E_IO;
    }
    return SX_OK;
}

static sx_status fill(FILE *f, void *ctx)
{
    const st_write *w = ctx;
    uint8_t pre[8];
    for (int k = 0; k < 8; k++)
        pre[k] = (uint8_t)((uint64_t)w->hdr->n >> (8 * k));
    if (fwrite(pre, 1, 8, f) != 8 || fwrite(w->hdr->s, 1, w->hdr->n, f) != w->hdr->n)
        return SX_E_IO;
    for (int64_t i = 0; i < sx_ds_tensors_count(w->set); i++) {
        const sx_tensor *x = sx_ds_tensors_at(w->set, i);
        SX_TRY(write_le(f, x->data, x->size, sx_dtype_size(x->dtype)));
    }
    return SX_OK;
}

sx_status sx_ds_safetensors_write(const char *path, const sx_ds_tensors *set)
{
    if (path == NULL || set == NULL)
        return sx_error(SX_E_ARG, "sx_ds_safetensors_write: %s is NULL", path ? "set" : "path");
    text hdr = {NULL, 0, 0, false};
    make_header(set, &hdr);
    if (hdr.bad) {
        sx_free(hdr.s);
        return sx_error(SX_E_NOMEM, "sx_ds_safetensors_write: out of memory");
    }
    st_write w = {set, &hdr};
    sx_status s = sx__write_atomic(path, fill, &w);
    sx_free(hdr.s);
    return s;
}
