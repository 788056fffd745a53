/* tensors.c: a set of named tensors with string metadata, what a checkpoint file holds, and what
 * its readers and writers share: a byte input over a file or a buffer, an atomic file writer,
 * UTF-8 validation and the half-precision conversions. Names and keys are found through a hash
 * index (open addressing), so that a reader checks a hostile file of many names in linear time. */
#include "datasets_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- the hash index */

/* slot[k] is 0 (empty) or 1 + the position of a name; cap is 0 or a power of two above twice
 * the names indexed. */
typedef struct hindex {
    int64_t *slot;
    size_t cap;
} hindex;

static uint64_t hash(const char *s)
{
    uint64_t h = 14695981039346656037u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211u;
    return h;
}

static int64_t hfind(const hindex *x, char *const *names, const char *name)
{
    if (x->cap == 0)
        return -1;
    for (size_t k = hash(name) & (x->cap - 1);; k = (k + 1) & (x->cap - 1)) {
        int64_t v = x->slot[k];
        if (v == 0)
            return -1;
        if (strcmp(names[v - 1], name) == 0)
            return v - 1;
    }
}

static void hplace(hindex *x, char *const *names, int64_t i)
{
    size_t k = hash(names[i]) & (x->cap - 1);
    while (x->slot[k] != 0)
        k = (k + 1) & (x->cap - 1);
    x->slot[k] = i + 1;
}

/* Make room to index n names (names[0..n-1) already indexed); false when out of memory. */
static bool hreserve(hindex *x, char *const *names, int64_t n)
{
    if ((size_t)n * 2 < x->cap)
        return true;
    size_t cap = x->cap ? x->cap * 2 : 16;
    int64_t *slot = sx_calloc(cap, sizeof *slot);
    if (slot == NULL)
        return false;
    sx_free(x->slot);
    x->slot = slot;
    x->cap = cap;
    for (int64_t i = 0; i + 1 < n; i++)
        hplace(x, names, i);
    return true;
}

/* ---------------------------------------------------------------- the set */

struct sx_ds_tensors {
    int64_t n, cap;
    char **names;
    sx_tensor **ts;
    hindex index;
    int64_t nmeta, meta_cap;
    char **keys, **values;
    hindex meta_index;
};

sx_status sx_ds_tensors_new(sx_ds_tensors **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "sx_ds_tensors_new: out is NULL");
    *out = sx_calloc(1, sizeof **out);
    if (*out == NULL)
        return sx_error(SX_E_NOMEM, "sx_ds_tensors_new: out of memory");
    return SX_OK;
}

void sx_ds_tensors_free(sx_ds_tensors *set)
{
    if (set == NULL)
        return;
    for (int64_t i = 0; i < set->n; i++) {
        sx_free(set->names[i]);
        sx_tensor_free(set->ts[i]);
    }
    for (int64_t i = 0; i < set->nmeta; i++) {
        sx_free(set->keys[i]);
        sx_free(set->values[i]);
    }
    sx_free(set->names);
    sx_free(set->ts);
    sx_free(set->keys);
    sx_free(set->values);
    sx_free(set->index.slot);
    sx_free(set->meta_index.slot);
    sx_free(set);
}

static char *dup_n(const char *s, size_t n)
{
    char *d = sx_alloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Grow two parallel pointer arrays to hold at least n + 1 entries. */
static bool grow2(void ***a, void ***b, int64_t n, int64_t *cap)
{
    if (n < *cap)
        return true;
    int64_t c = *cap ? *cap * 2 : 16;
    void **na = sx_realloc(*a, (size_t)c * sizeof *na);
    if (na == NULL)
        return false;
    *a = na;
    void **nb = sx_realloc(*b, (size_t)c * sizeof *nb);
    if (nb == NULL)
        return false;
    *b = nb;
    *cap = c;
    return true;
}

sx_status sx__tensors_put(sx_ds_tensors *set, const char *who, const char *name, size_t n,
                          sx_tensor *t)
{
    char *d = dup_n(name, n);
    if (d == NULL || !grow2((void ***)&set->names, (void ***)&set->ts, set->n, &set->cap)) {
        sx_free(d);
        sx_tensor_free(t);
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    }
    set->names[set->n] = d; /* indexed below, or dropped again */
    if (!hreserve(&set->index, set->names, set->n + 1)) {
        sx_free(d);
        sx_tensor_free(t);
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    }
    set->ts[set->n] = t;
    hplace(&set->index, set->names, set->n);
    set->n++;
    return SX_OK;
}

static bool valid_name(const char *s)
{
    return s[0] != '\0' && sx__utf8_valid((const uint8_t *)s, strlen(s));
}

sx_status sx_ds_tensors_add(sx_ds_tensors *set, const char *name, const sx_tensor *t)
{
    const char *who = "sx_ds_tensors_add";
    if (set == NULL || name == NULL || t == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who,
                        set == NULL    ? "set"
                        : name == NULL ? "name"
                                       : "tensor");
    if (!valid_name(name) || strcmp(name, "__metadata__") == 0)
        return sx_error(SX_E_ARG, "%s: name '%s' is %s", who, name,
                        name[0] == '\0'                     ? "empty"
                        : strcmp(name, "__metadata__") == 0 ? "reserved (safetensors' metadata key)"
                                                            : "not valid UTF-8");
    if (hfind(&set->index, set->names, name) >= 0)
        return sx_error(SX_E_ARG, "%s: a tensor named '%s' is already in the set", who, name);
    if ((t->dtype != SX_F32 && t->dtype != SX_F64) || t->data == NULL ||
        sx_shape_check(who, t->rank, t->shape) != SX_OK ||
        sx_shape_size(t->rank, t->shape) != t->size)
        return sx_error(SX_E_ARG, "%s: tensor '%s' is not a valid f32 or f64 tensor", who, name);
    sx_tensor *c = NULL;
    SX_TRY(sx_tensor_clone(t, &c));
    return sx__tensors_put(set, who, name, strlen(name), c);
}

int64_t sx_ds_tensors_count(const sx_ds_tensors *set)
{
    return set ? set->n : 0;
}

const char *sx_ds_tensors_name(const sx_ds_tensors *set, int64_t i)
{
    return set && i >= 0 && i < set->n ? set->names[i] : NULL;
}

sx_tensor *sx_ds_tensors_at(const sx_ds_tensors *set, int64_t i)
{
    return set && i >= 0 && i < set->n ? set->ts[i] : NULL;
}

sx_tensor *sx_ds_tensors_get(const sx_ds_tensors *set, const char *name)
{
    if (set == NULL || name == NULL)
        return NULL;
    int64_t i = hfind(&set->index, set->names, name);
    return i >= 0 ? set->ts[i] : NULL;
}

/* Set key to value, both checked by the caller. */
static sx_status meta_put(sx_ds_tensors *set, const char *who, const char *key, const char *value)
{
    int64_t i = hfind(&set->meta_index, set->keys, key);
    char *v = dup_n(value, strlen(value));
    if (v == NULL)
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    if (i >= 0) {
        sx_free(set->values[i]);
        set->values[i] = v;
        return SX_OK;
    }
    char *k = dup_n(key, strlen(key));
    if (k == NULL ||
        !grow2((void ***)&set->keys, (void ***)&set->values, set->nmeta, &set->meta_cap)) {
        sx_free(k);
        sx_free(v);
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    }
    set->keys[set->nmeta] = k;
    if (!hreserve(&set->meta_index, set->keys, set->nmeta + 1)) {
        sx_free(k);
        sx_free(v);
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    }
    set->values[set->nmeta] = v;
    hplace(&set->meta_index, set->keys, set->nmeta);
    set->nmeta++;
    return SX_OK;
}

sx_status sx_ds_tensors_meta_set(sx_ds_tensors *set, const char *key, const char *value)
{
    const char *who = "sx_ds_tensors_meta_set";
    if (set == NULL || key == NULL || value == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who,
                        set == NULL   ? "set"
                        : key == NULL ? "key"
                                      : "value");
    if (!valid_name(key))
        return sx_error(SX_E_ARG, "%s: key '%s' is %s", who, key,
                        key[0] ? "not valid UTF-8" : "empty");
    if (!sx__utf8_valid((const uint8_t *)value, strlen(value)))
        return sx_error(SX_E_ARG, "%s: the value of '%s' is not valid UTF-8", who, key);
    return meta_put(set, who, key, value);
}

const char *sx_ds_tensors_meta_get(const sx_ds_tensors *set, const char *key)
{
    if (set == NULL || key == NULL)
        return NULL;
    int64_t i = hfind(&set->meta_index, set->keys, key);
    return i >= 0 ? set->values[i] : NULL;
}

int64_t sx_ds_tensors_meta_count(const sx_ds_tensors *set)
{
    return set ? set->nmeta : 0;
}

const char *sx_ds_tensors_meta_key(const sx_ds_tensors *set, int64_t i)
{
    return set && i >= 0 && i < set->nmeta ? set->keys[i] : NULL;
}

/* ---------------------------------------------------------------- bytes and numbers */

bool sx__utf8_valid(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : 4;
        if ((c >= 0x80 && c < 0xc2) || c > 0xf4 || n - i < len)
            return false;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1fu : len == 3 ? c & 0x0fu : c & 0x07u;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3fu);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
            return false;
        i += len;
    }
    return true;
}

uint32_t sx__f16_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) /* infinity or NaN, the payload kept */
        return sign | 0x7f800000u | m << 13;
    if (e != 0) /* exponent bias 15 -> 127 */
        return sign | (e + 112) << 23 | m << 13;
    if (m == 0)
        return sign;
    /* subnormal: m * 2^-24, normalised */
    e = 113;
    while ((m & 0x400u) == 0) {
        m <<= 1;
        e--;
    }
    return sign | e << 23 | (m & 0x3ffu) << 13;
}

uint32_t sx__bf16_bits(uint16_t h)
{
    return (uint32_t)h << 16;
}

bool sx__host_little(void)
{
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* ---------------------------------------------------------------- the byte input */

sx_status sx__in_fail(const sx__in *in, sx_status s, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sx_error(s, "%s: %s", in->name, msg);
}

sx_status sx__in_open_file(sx__in *in, const char *path)
{
    memset(in, 0, sizeof *in);
    in->name = path;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return sx__in_fail(in, SX_E_IO, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        int e = errno;
        bool dir = S_ISDIR(st.st_mode);
        close(fd);
        return dir ? sx__in_fail(in, SX_E_IO, "is a directory")
                   : sx__in_fail(in, SX_E_IO, "%s", strerror(e));
    }
    in->size = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : UINT64_MAX;
    in->f = fdopen(fd, "rb");
    if (in->f == NULL) {
        close(fd);
        return sx__in_fail(in, SX_E_IO, "cannot open: %s", strerror(errno));
    }
    return SX_OK;
}

void sx__in_open_mem(sx__in *in, const void *buf, size_t len, const char *name)
{
    memset(in, 0, sizeof *in);
    in->name = name ? name : "<memory>";
    in->mem = buf;
    in->mem_len = len;
    in->size = len;
}

sx_status sx__in_read(sx__in *in, void *dst, size_t n, const char *what)
{
    size_t got;
    if (in->f == NULL) {
        got = in->mem_len - in->pos < n ? in->mem_len - (size_t)in->pos : n;
        if (got > 0)
            memcpy(dst, in->mem + in->pos, got);
    } else {
        got = fread(dst, 1, n, in->f);
        if (got < n && ferror(in->f))
            return sx__in_fail(in, SX_E_IO, "read error: %s", strerror(errno));
    }
    in->pos += got;
    if (got < n)
        return sx__in_fail(in, SX_E_FORMAT, "truncated %s (%zu of %zu bytes)", what, got, n);
    return SX_OK;
}

const uint8_t *sx__in_peek(sx__in *in, size_t n)
{
    if (in->f != NULL || in->mem_len - in->pos < n)
        return NULL;
    const uint8_t *p = in->mem + in->pos;
    in->pos += n;
    return p;
}

sx_status sx__in_end(sx__in *in, const char *what)
{
    if (in->f == NULL)
        return in->pos == in->mem_len
                   ? SX_OK
                   : sx__in_fail(in, SX_E_FORMAT, "%llu trailing bytes after %s",
                                 (unsigned long long)(in->mem_len - in->pos), what);
    int c = fgetc(in->f);
    if (c == EOF)
        return ferror(in->f) ? sx__in_fail(in, SX_E_IO, "read error: %s", strerror(errno)) : SX_OK;
    return sx__in_fail(in, SX_E_FORMAT, "trailing bytes after %s", what);
}

void sx__in_close(sx__in *in)
{
    if (in->f != NULL)
        fclose(in->f);
    in->f = NULL;
}

/* ---------------------------------------------------------------- atomic writing */

static sx_status fill_tmp(int fd, sx_status (*fill)(FILE *f, void *ctx), void *ctx)
{
    FILE *f = fdopen(fd, "wb");
    if (f == NULL) {
        close(fd);
        return SX_E_IO;
    }
    sx_status s = fill(f, ctx);
    if (s == SX_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        s = SX_E_IO;
    int e = errno;
    if (fclose(f) != 0 && s == SX_OK)
        s = SX_E_IO;
    else
        errno = e;
    return s;
}

sx_status sx__write_atomic(const char *path, sx_status (*fill)(FILE *f, void *ctx), void *ctx)
{
    size_t len = strlen(path);
    char *tmp = sx_alloc(len + 16);
    if (tmp == NULL)
        return sx_error(SX_E_NOMEM, "%s: out of memory", path);
    snprintf(tmp, len + 16, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    sx_status s = fd < 0 ? SX_E_IO : SX_OK;
    int err = errno;
    if (s == SX_OK) {
        errno = 0;
        s = fill_tmp(fd, fill, ctx);
        err = errno;
        if (s == SX_OK && rename(tmp, path) != 0)
            s = SX_E_IO, err = errno;
        if (s != SX_OK)
            unlink(tmp);
    }
    sx_free(tmp);
    if (s == SX_E_IO)
        return sx_error(s, "%s: cannot write: %s", path, err ? strerror(err) : "I/O error");
    return s;
}
