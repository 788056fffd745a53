/* images.c: labelled image sets (MNIST, Fashion-MNIST, any u8 IDX pair) kept as bytes, and their
 * conversion to tensors. Loading reads both headers and checks them against each other before
 * allocating; conversion goes through a 256-entry table, whole set or one batch of rows, and
 * decodes a compacted set on the way (the row filled with zeros, then literal bytes looked up).
 *
 * The packed form (sx_ds_images_compact). Each image of R = h*w*c bytes is coded on its own as a
 * sequence of tokens; a token is
 *     Z (a length: that many zero bytes) then L (a length) then L literal bytes, copied as is;
 * the tokens of an image cover exactly its R bytes (the sum of Z + L over them is R), so the
 * decoder needs no end marker. A length v is written as v / 255 bytes of 255 then one byte
 * v % 255 (0..254): it is read by adding bytes up to the first that is not 255, so any length
 * fits and lengths under 255, nearly all of MNIST's, take one byte. The coder is greedy: a token
 * takes the zeros at its start, then literals up to a run of 3 or more zeros or the image's end
 * (a run of 1 or 2 zeros costs no more as literals than as a new token's two lengths); every
 * token covers at least one byte. MNIST's 784-byte digits code to ~200 bytes. */
#include "datasets_impl.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- checks */

sx_status sx__check_images(const char *who, const sx_ds_images *d)
{
    if (d == NULL)
        return sx_error(SX_E_ARG, "%s: the data set is NULL", who);
    if (d->n < 1 || d->h < 1 || d->w < 1 || d->c < 1)
        return sx_error(SX_E_ARG, "%s: the data set has n=%lld h=%lld w=%lld c=%lld (want >= 1)",
                        who, (long long)d->n, (long long)d->h, (long long)d->w, (long long)d->c);
    if (d->classes < 1 || d->classes > INT32_MAX)
        return sx_error(SX_E_ARG, "%s: the data set has %lld classes (want 1..2^31-1)", who,
                        (long long)d->classes);
    bool wide = d->classes > 256; /* labels32, else bytes */
    bool have = wide ? d->labels32 != NULL : d->labels != NULL;
    bool other = wide ? d->labels != NULL : d->labels32 != NULL;
    if (!have || other)
        return sx_error(SX_E_ARG,
                        "%s: a set of %lld classes wants %s alone (labels %s, labels32 %s)", who,
                        (long long)d->classes, wide ? "labels32" : "labels",
                        d->labels ? "set" : "NULL", d->labels32 ? "set" : "NULL");
    if ((d->pixels == NULL) == (d->packed == NULL))
        return sx_error(SX_E_ARG, "%s: the data set has %s (want exactly one of the two)", who,
                        d->pixels == NULL ? "neither pixels nor packed images"
                                          : "both pixels and packed images");
    if (d->packed != NULL && d->offsets == NULL)
        return sx_error(SX_E_ARG, "%s: the data set has packed images but no offsets", who);
    int64_t shape[4] = {d->n, d->h, d->w, d->c};
    if (sx_shape_check(who, 4, shape) != SX_OK)
        return sx_error(SX_E_ARG, "%s: the data set's size overflows", who);
    return SX_OK;
}

static sx_status check_tensor(const char *who, const char *name, const sx_tensor *t)
{
    if ((t->dtype != SX_F32 && t->dtype != SX_F64) || t->rank < 0 || t->rank > SX_MAX_RANK ||
        (t->data == NULL && t->size > 0))
        return sx_error(SX_E_ARG, "%s: %s is not a valid tensor", who, name);
    return SX_OK;
}

sx_status sx__check_batch(const char *who, const sx_ds_images *d, const sx_tensor *x,
                          const sx_tensor *y, int64_t want_rows, int64_t *rows)
{
    char s[160];
    int64_t row = d->h * d->w * d->c, bx = -1, by = -1;
    if (x != NULL) {
        SX_TRY(check_tensor(who, "x", x));
        bx = x->rank >= 1 ? x->shape[0] : -1;
        if (x->rank < 1 || (want_rows >= 0 && bx != want_rows) || x->size % row != 0 ||
            x->size / row != bx)
            return sx_error(SX_E_SHAPE,
                            "%s: x has shape %s; want %s rows of %lld values, e.g. (B,%lld,%lld,"
                            "%lld)",
                            who, sx_shape_str(x->rank, x->shape, s, sizeof s),
                            want_rows >= 0 ? "batch-size" : "B", (long long)row, (long long)d->h,
                            (long long)d->w, (long long)d->c);
    }
    if (y != NULL) {
        SX_TRY(check_tensor(who, "y", y));
        by = y->rank >= 1 ? y->shape[0] : -1;
        bool ok = (y->rank == 1 || (y->rank == 2 && y->shape[1] == d->classes)) &&
                  (want_rows < 0 || by == want_rows);
        if (!ok)
            return sx_error(SX_E_SHAPE,
                            "%s: y has shape %s; want (B) class indices or (B,%lld) "
                            "one-hot rows%s",
                            who, sx_shape_str(y->rank, y->shape, s, sizeof s),
                            (long long)d->classes, want_rows >= 0 ? ", B the batch size" : "");
    }
    if (x != NULL && y != NULL && bx != by)
        return sx_error(SX_E_SHAPE, "%s: x has %lld rows but y has %lld", who, (long long)bx,
                        (long long)by);
    if (want_rows >= 0 && x == NULL && y == NULL)
        bx = want_rows;
    *rows = x != NULL ? bx : y != NULL ? by : bx;
    return SX_OK;
}

static sx_status check_conversion(const char *who, sx_dtype dtype, double scale)
{
    if (dtype != SX_F32 && dtype != SX_F64)
        return sx_error(SX_E_ARG, "%s: dtype %d is not f32 or f64", who, (int)dtype);
    if (!isfinite(scale))
        return sx_error(SX_E_ARG, "%s: scale %g is not finite", who, scale);
    return SX_OK;
}

/* ---------------------------------------------------------------- byte -> value table */

typedef struct table {
    sx_dtype dtype;
    float f32[256];
    double f64[256];
} table;

static void table_init(table *t, sx_dtype dtype, double scale)
{
    t->dtype = dtype;
    for (int b = 0; b < 256; b++) {
        t->f64[b] = (double)b * scale;
        t->f32[b] = (float)t->f64[b];
    }
}

/* dst[i] = table[src[i]] for i < n; dst is an array of the table's dtype; `at` is the first
 * element of dst written. */
static void table_apply(const table *t, const uint8_t *src, int64_t n, void *dst, int64_t at)
{
    if (t->dtype == SX_F32) {
        float *o = (float *)dst + at;
        for (int64_t i = 0; i < n; i++)
            o[i] = t->f32[src[i]];
    } else {
        double *o = (double *)dst + at;
        for (int64_t i = 0; i < n; i++)
            o[i] = t->f64[src[i]];
    }
}

/* ---------------------------------------------------------------- the packed form */

/* Append length v to the code at *q (when q is not NULL); return the bytes it takes. */
static int64_t put_len(uint8_t **q, int64_t v)
{
    int64_t bytes = v / 255 + 1;
    if (*q != NULL) {
        for (; v >= 255; v -= 255)
            *(*q)++ = 255;
        *(*q)++ = (uint8_t)v;
    }
    return bytes;
}

/* Whether the 8 bytes at p are all zero (one unaligned load). */
static inline bool zero8(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v == 0;
}

/* Code one image of `row` bytes into dst (NULL: only count); return the code's size. */
static int64_t code_image(const uint8_t *src, int64_t row, uint8_t *dst)
{
    uint8_t *q = dst;
    int64_t i = 0, size = 0;
    while (i < row) {
        int64_t z = i; /* zeros [i, z), then literals [z, e) */
        while (z + 8 <= row && zero8(src + z))
            z += 8; /* zero runs are most of an image: 8 bytes a step */
        while (z < row && src[z] == 0)
            z++;
        int64_t e = z;
        while (e < row) {
            if (src[e] != 0) {
                e++;
                continue;
            }
            int64_t k = e; /* look at up to 3 zeros from e */
            while (k < row && k - e < 3 && src[k] == 0)
                k++;
            if (k - e == 3)
                break; /* 3 or more zeros: they start the next token */
            e = k;     /* 1 or 2 zeros before a non-zero byte or the end: literals */
        }
        size += put_len(&q, z - i) + put_len(&q, e - z) + (e - z);
        if (q != NULL) {
            memcpy(q, src + z, (size_t)(e - z));
            q += e - z;
        }
        i = e;
    }
    return size;
}

/* Read a length at *p and move past it. */
static inline int64_t get_len(const uint8_t **p)
{
    int64_t v = 0;
    uint8_t b;
    do {
        b = *(*p)++;
        v += b;
    } while (b == 255);
    return v;
}

/* Decode the code at p of one image of `row` values into dst[at .. at + row) (dst of the
 * table's dtype) through the table. The row is first filled with table[0] (+0.0, or -0.0 for a
 * negative scale, as the raw path gives) in one vectorised pass, then the tokens only skip their
 * zeros and look up their literals: short runs cost no fill loop of their own. The positions
 * are clamped to the row, so the writes stay in it whatever the code says. */
static void decode_row(const table *t, const uint8_t *p, int64_t row, void *dst, int64_t at)
{
#define DECODE_ROW(T, lut)                                                                         \
    do {                                                                                           \
        T *o = (T *)dst + at, zero = (lut)[0];                                                     \
        for (int64_t j = 0; j < row; j++)                                                          \
            o[j] = zero;                                                                           \
        for (int64_t i = 0; i < row;) { /* i: the position in the row */                           \
            i += get_len(&p);                                                                      \
            int64_t l = get_len(&p);                                                               \
            i = i < row ? i : row;                                                                 \
            l = l < row - i ? l : row - i;                                                         \
            for (int64_t j = 0; j < l; j++)                                                        \
                o[i + j] = (lut)[p[j]];                                                            \
            p += l;                                                                                \
            i += l;                                                                                \
        }                                                                                          \
    } while (0)
    if (t->dtype == SX_F32)
        DECODE_ROW(float, t->f32);
    else
        DECODE_ROW(double, t->f64);
#undef DECODE_ROW
}

/* Example i's values into dst[at .. at + row), from either form. */
static void convert_image(const table *t, const sx_ds_images *d, int64_t i, int64_t row, void *dst,
                          int64_t at)
{
    if (d->packed != NULL)
        decode_row(t, d->packed + d->offsets[i], row, dst, at);
    else
        table_apply(t, d->pixels + i * row, row, dst, at);
}

void sx__image_bytes(const sx_ds_images *d, int64_t i, uint8_t *dst)
{
    int64_t row = d->h * d->w * d->c;
    if (d->packed == NULL) {
        memcpy(dst, d->pixels + i * row, (size_t)row);
        return;
    }
    const uint8_t *p = d->packed + d->offsets[i];
    memset(dst, 0, (size_t)row);
    for (int64_t k = 0; k < row;) { /* the tokens, clamped to the row as in decode_row */
        k += get_len(&p);
        int64_t l = get_len(&p);
        k = k < row ? k : row;
        l = l < row - k ? l : row - k;
        memcpy(dst + k, p, (size_t)l);
        p += l;
        k += l;
    }
}

sx_status sx_ds_images_compact(sx_ds_images *d)
{
    const char *who = "sx_ds_images_compact";
    SX_TRY(sx__check_images(who, d));
    if (d->packed != NULL)
        return SX_OK;
    int64_t row = d->h * d->w * d->c, raw = d->n * row;
    /* The offsets alone outweigh rows of 8 bytes or fewer. Else count the code first, and stop
     * as soon as it cannot pay for itself (nothing overflows: raw >= 9n, offsets_bytes = 8n + 8,
     * and total stops within one image's code of raw). */
    if (row <= (int64_t)sizeof *d->offsets)
        return SX_OK;
    int64_t total = 0, offsets_bytes = (d->n + 1) * (int64_t)sizeof *d->offsets;
    for (int64_t i = 0; i < d->n && total + offsets_bytes < raw; i++)
        total += code_image(d->pixels + i * row, row, NULL);
    if (total + offsets_bytes >= raw)
        return SX_OK;
    uint8_t *packed = sx_alloc((size_t)total);
    int64_t *offsets = packed ? sx_alloc((size_t)offsets_bytes) : NULL;
    if (offsets == NULL) {
        sx_free(packed);
        return sx_error(SX_E_NOMEM, "%s: out of memory allocating %lld bytes", who,
                        (long long)(packed ? offsets_bytes : total));
    }
    offsets[0] = 0;
    for (int64_t i = 0; i < d->n; i++)
        offsets[i + 1] = offsets[i] + code_image(d->pixels + i * row, row, packed + offsets[i]);
    sx_free(d->pixels);
    d->pixels = NULL;
    d->packed = packed;
    d->offsets = offsets;
    return SX_OK;
}

bool sx_ds_images_compacted(const sx_ds_images *d)
{
    return d != NULL && d->packed != NULL;
}

size_t sx_ds_images_bytes(const sx_ds_images *d)
{
    if (d == NULL)
        return 0;
    if (d->packed != NULL)
        return (size_t)d->offsets[d->n] + (size_t)(d->n + 1) * sizeof *d->offsets;
    return (size_t)(d->n * d->h * d->w * d->c);
}

/* ---------------------------------------------------------------- loading */

static sx_status wrong_kind(const sx__idx_reader *r, const char *what, const char *want)
{
    char s[160];
    return sx_error(SX_E_FORMAT, "%s: %s must be %s; this file holds %s %s", r->name, what, want,
                    sx_ds_type_name(r->type), sx_shape_str(r->rank, r->dims, s, sizeof s));
}

sx_status sx_ds_images_load(const char *images_path, const char *labels_path, int64_t classes,
                            int64_t limit, sx_ds_images **out)
{
    const char *who = "sx_ds_images_load";
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    if (images_path == NULL || labels_path == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who,
                        images_path == NULL ? "images_path" : "labels_path");
    if (classes < 1 || classes > 256)
        return sx_error(SX_E_ARG, "%s: %lld classes (want 1..256: labels are bytes)", who,
                        (long long)classes);

    sx__idx_reader ri, rl;
    memset(&ri, 0, sizeof ri);
    memset(&rl, 0, sizeof rl);
    sx_ds_images *d = NULL;
    uint8_t *chunk = NULL;
    /* Both headers first: kinds and counts agree before anything is allocated. */
    sx_status st = sx__idx_open_file(&ri, images_path);
    if (st == SX_OK)
        st = sx__idx_read_header(&ri);
    if (st == SX_OK && (ri.type != SX_DS_U8 || ri.rank < 3 || ri.rank > 4))
        st = wrong_kind(&ri, "images", "u8 of rank 3 (n,h,w) or 4 (n,h,w,c)");
    if (st == SX_OK)
        st = sx__idx_open_file(&rl, labels_path);
    if (st == SX_OK)
        st = sx__idx_read_header(&rl);
    if (st == SX_OK && (rl.type != SX_DS_U8 || rl.rank != 1))
        st = wrong_kind(&rl, "labels", "u8 of rank 1 (n)");
    if (st == SX_OK && rl.dims[0] != ri.dims[0])
        st = sx_error(SX_E_FORMAT, "%s: %lld labels but %lld images", labels_path,
                      (long long)rl.dims[0], (long long)ri.dims[0]);
    if (st != SX_OK)
        goto done;

    st = SX_E_NOMEM;
    d = sx_calloc(1, sizeof *d);
    if (d == NULL)
        goto done;
    d->n = sx__idx_keep(&ri, limit);
    d->h = ri.dims[1];
    d->w = ri.dims[2];
    d->c = ri.rank == 4 ? ri.dims[3] : 1;
    d->classes = classes;
    d->labels = sx_alloc((size_t)d->n);
    d->pixels = sx_alloc((size_t)(d->n * ri.row));
    chunk = sx_alloc(SX_IDX_CHUNK);
    if (d->labels == NULL || d->pixels == NULL || chunk == NULL)
        goto done;

    /* Labels first: they are small, and a bad one stops us before the large images. */
    st = sx__idx_read_native(&rl, d->labels, d->n);
    if (st == SX_OK)
        st = sx__idx_finish(&rl, chunk, SX_IDX_CHUNK);
    for (int64_t i = 0; st == SX_OK && i < d->n; i++)
        if (d->labels[i] >= classes)
            st = sx_error(SX_E_RANGE, "%s: label %u of example %lld is not in 0..%lld", labels_path,
                          d->labels[i], (long long)i, (long long)classes - 1);
    if (st == SX_OK)
        st = sx__idx_read_native(&ri, d->pixels, d->n * ri.row);
    if (st == SX_OK)
        st = sx__idx_finish(&ri, chunk, SX_IDX_CHUNK);
done:
    sx_free(chunk);
    sx__idx_close(&ri);
    sx__idx_close(&rl);
    if (st != SX_OK) {
        sx_ds_images_free(d);
        return st;
    }
    *out = d;
    return SX_OK;
}

void sx_ds_images_free(sx_ds_images *d)
{
    if (d == NULL)
        return;
    sx_free(d->pixels);
    sx_free(d->packed);
    sx_free(d->offsets);
    sx_free(d->labels);
    sx_free(d->labels32);
    for (int64_t k = 0; d->class_names != NULL && k < d->classes; k++)
        sx_free(d->class_names[k]);
    sx_free(d->class_names);
    sx_free(d);
}

/* dir/name.gz, or dir/name when only the decompressed file is there. */
static void standard_path(const char *dir, const char *name, char *buf, size_t n)
{
    struct stat st;
    snprintf(buf, n, "%s/%s.gz", dir, name);
    if (stat(buf, &st) == 0)
        return;
    snprintf(buf, n, "%s/%s", dir, name);
    if (stat(buf, &st) == 0)
        return;
    snprintf(buf, n, "%s/%s.gz", dir, name); /* neither: the message names the usual one */
}

static sx_status load_mnist_like(const char *who, const char *dir, sx_ds_part part, int64_t limit,
                                 sx_ds_images **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    if (dir == NULL)
        return sx_error(SX_E_ARG, "%s: dir is NULL", who);
    if (part != SX_DS_TRAIN && part != SX_DS_TEST)
        return sx_error(SX_E_ARG, "%s: part %d is not SX_DS_TRAIN or SX_DS_TEST", who, (int)part);
    if (strlen(dir) > 4000)
        return sx_error(SX_E_ARG, "%s: directory path of %zu bytes is too long", who, strlen(dir));
    const char *prefix = part == SX_DS_TRAIN ? "train" : "t10k";
    char name[64], images[4096 + 64], labels[4096 + 64];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    standard_path(dir, name, images, sizeof images);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    standard_path(dir, name, labels, sizeof labels);
    return sx_ds_images_load(images, labels, 10, limit, out);
}

sx_status sx_ds_mnist_load(const char *dir, sx_ds_part part, int64_t limit, sx_ds_images **out)
{
    return load_mnist_like("sx_ds_mnist_load", dir, part, limit, out);
}

sx_status sx_ds_fashion_mnist_load(const char *dir, sx_ds_part part, int64_t limit,
                                   sx_ds_images **out)
{
    return load_mnist_like("sx_ds_fashion_mnist_load", dir ? dir : SX_DS_FASHION_MNIST_DIR, part,
                           limit, out);
}

const char *sx_ds_fashion_mnist_class_name(int64_t label)
{
    static const char *const names[10] = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                          "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                          "Bag",         "Ankle boot"};
    return label >= 0 && label < 10 ? names[label] : "?";
}

/* ---------------------------------------------------------------- tensors */

sx_status sx_ds_images_tensor(const sx_ds_images *d, sx_dtype dtype, double scale, sx_tensor **out)
{
    const char *who = "sx_ds_images_tensor";
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    SX_TRY(sx__check_images(who, d));
    SX_TRY(check_conversion(who, dtype, scale));
    int64_t shape[4] = {d->n, d->h, d->w, d->c};
    sx_tensor *t = NULL;
    SX_TRY(sx_tensor_new(dtype, 4, shape, &t));
    table tab;
    table_init(&tab, dtype, scale);
    int64_t row = d->h * d->w * d->c;
    if (d->packed == NULL)
        table_apply(&tab, d->pixels, t->size, t->data, 0);
    else
        for (int64_t i = 0; i < d->n; i++)
            decode_row(&tab, d->packed + d->offsets[i], row, t->data, i * row);
    *out = t;
    return SX_OK;
}

sx_status sx_ds_labels_tensor(const sx_ds_images *d, sx_dtype dtype, bool one_hot, sx_tensor **out)
{
    const char *who = "sx_ds_labels_tensor";
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    SX_TRY(sx__check_images(who, d));
    SX_TRY(check_conversion(who, dtype, 1.0));
    int64_t shape[2] = {d->n, d->classes};
    sx_tensor *t = NULL;
    SX_TRY(one_hot ? sx_tensor_zeros(dtype, 2, shape, &t) : sx_tensor_new(dtype, 1, shape, &t));
    for (int64_t i = 0; i < d->n; i++) {
        if (one_hot)
            sx_tensor_set(t, i * d->classes + sx__label(d, i), 1.0);
        else
            sx_tensor_set(t, i, (double)sx__label(d, i));
    }
    *out = t;
    return SX_OK;
}

sx_status sx_ds_images_gather_out(const sx_ds_images *d, const int64_t *index, int64_t count,
                                  double scale, sx_tensor *x, sx_tensor *y)
{
    const char *who = "sx_ds_images_gather_out";
    SX_TRY(sx__check_images(who, d));
    if (count < 0 || (index == NULL && count > 0))
        return sx_error(SX_E_ARG, "%s: %s", who, count < 0 ? "count is negative" : "index is NULL");
    if (!isfinite(scale))
        return sx_error(SX_E_ARG, "%s: scale %g is not finite", who, scale);
    int64_t rows;
    SX_TRY(sx__check_batch(who, d, x, y, -1, &rows));
    if (rows >= 0 && count > rows)
        return sx_error(SX_E_SHAPE, "%s: %lld examples do not fit in a batch of %lld rows", who,
                        (long long)count, (long long)rows);
    for (int64_t r = 0; r < count; r++) {
        if (index[r] < 0 || index[r] >= d->n)
            return sx_error(SX_E_RANGE, "%s: index[%lld] = %lld is not in 0..%lld", who,
                            (long long)r, (long long)index[r], (long long)d->n - 1);
        int64_t lab = sx__label(d, index[r]);
        if (y != NULL && (lab < 0 || lab >= d->classes))
            return sx_error(SX_E_RANGE, "%s: example %lld has label %lld, not in 0..%lld", who,
                            (long long)index[r], (long long)lab, (long long)d->classes - 1);
    }

    int64_t row = d->h * d->w * d->c;
    if (x != NULL) {
        table tab;
        table_init(&tab, x->dtype, scale);
        for (int64_t r = 0; r < count; r++)
            convert_image(&tab, d, index[r], row, x->data, r * row);
        size_t es = sx_dtype_size(x->dtype);
        if (rows > count) /* padding rows: zeros (all-zero bits are 0.0) */
            memset((char *)x->data + (size_t)(count * row) * es, 0,
                   (size_t)((rows - count) * row) * es);
    }
    if (y != NULL) {
        if (y->rank == 2) {
            size_t es = sx_dtype_size(y->dtype);
            memset(y->data, 0, (size_t)y->size * es);
            for (int64_t r = 0; r < count; r++)
                sx_tensor_set(y, r * d->classes + sx__label(d, index[r]), 1.0);
        } else {
            for (int64_t r = 0; r < rows; r++)
                sx_tensor_set(y, r, r < count ? (double)sx__label(d, index[r]) : -1.0);
        }
    }
    return SX_OK;
}
