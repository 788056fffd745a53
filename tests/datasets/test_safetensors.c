/* test_safetensors.c: the set of named tensors (datasets/tensors.c) and safetensors files
 * (datasets/safetensors.c): files laid out byte by byte here, files an independent Python writer
 * made with PyTorch's conversions (tests/datasets/safetensors/make_fixtures.py), round trips,
 * F16 and BF16 against a plain reference, and every malformed header with its message. */
#include "testutil.h"

#include <dirent.h>
#include <libgen.h>
#include <math.h>
#include <string.h>
#include <sx_datasets.h>
#include <sys/stat.h>
#include <unistd.h>

static void fixture(const char *name, char *buf, size_t n)
{
    char file[1024];
    snprintf(file, sizeof file, "%s", __FILE__);
    snprintf(buf, n, "%s/safetensors/%s", dirname(file), name);
}

/* A file image: the 8-byte little-endian length of `header` (its own length unless `len` is
 * given, >= 0), the header, then `ndata` bytes of `data`. Returns its size; *out is malloc'd. */
static size_t image(const char *header, long long len, const void *data, size_t ndata,
                    uint8_t **out)
{
    size_t hl = strlen(header);
    uint64_t n = len >= 0 ? (uint64_t)len : hl;
    uint8_t *b = malloc(8 + hl + ndata + 1);
    cr_assert_not_null(b);
    for (int k = 0; k < 8; k++)
        b[k] = (uint8_t)(n >> (8 * k));
    memcpy(b + 8, header, hl);
    if (ndata > 0)
        memcpy(b + 8 + hl, data, ndata);
    *out = b;
    return 8 + hl + ndata;
}

static sx_status parse_header(const char *header, size_t ndata, sx_ds_tensors **out)
{
    uint8_t *b = NULL, zeros[256] = {0};
    cr_assert(ndata <= sizeof zeros);
    size_t n = image(header, -1, zeros, ndata, &b);
    sx_status s = sx_ds_safetensors_parse(b, n, "hdr", out);
    free(b);
    return s;
}

static char *temp_path(char *buf, size_t n, const char *name)
{
    static char dir[64];
    if (dir[0] == '\0') {
        snprintf(dir, sizeof dir, "/tmp/sx_test_st_XXXXXX");
        cr_assert_not_null(mkdtemp(dir));
    }
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    cr_assert(fread(b, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static sx_tensor *from(sx_dtype dt, int rank, const int64_t *shape, const double *v)
{
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_new(dt, rank, shape, &t), SX_OK);
    for (int64_t i = 0; i < t->size; i++)
        sx_tensor_set(t, i, v[i]);
    return t;
}

static bool same_bits(const sx_tensor *a, const sx_tensor *b)
{
    return a->dtype == b->dtype && sx_shape_equal(a->rank, a->shape, b->rank, b->shape) &&
           memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)) == 0;
}

/* ---------------------------------------------------------------- the set */

Test(datasets_safetensors, a_set_copies_finds_and_refuses)
{
    sx_ds_tensors *set = NULL;
    cr_assert_eq(sx_ds_tensors_new(&set), SX_OK);
    double v[6] = {1, 2, 3, 4, 5, 6};
    sx_tensor *a = from(SX_F32, 2, (int64_t[]){2, 3}, v);
    cr_assert_eq(sx_ds_tensors_add(set, "w", a), SX_OK);
    SX_F32P(a)[0] = 99; /* the set holds a copy */
    cr_assert_eq(SX_F32P(sx_ds_tensors_get(set, "w"))[0], 1.0f);
    cr_assert_eq(sx_ds_tensors_add(set, "w", a), SX_E_ARG);
    cr_assert_str_eq(sx_last_error(),
                     "sx_ds_tensors_add: a tensor named 'w' is already in the set");
    cr_assert_eq(sx_ds_tensors_add(set, "__metadata__", a), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "reserved") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_ds_tensors_add(set, "", a), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "empty") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_ds_tensors_add(set, "bad\xff", a), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "not valid UTF-8") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_ds_tensors_add(set, "x", NULL), SX_E_ARG);
    /* many names: the hash index grows, every one is still found */
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "layer.%d.weight", i);
        v[0] = i;
        sx_tensor *s = from(SX_F64, 0, NULL, v);
        cr_assert_eq(sx_ds_tensors_add(set, name, s), SX_OK, "%s", sx_last_error());
        sx_tensor_free(s);
    }
    cr_assert_eq(sx_ds_tensors_count(set), 301);
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "layer.%d.weight", i);
        cr_assert_eq(SX_F64P(sx_ds_tensors_get(set, name))[0], (double)i);
        cr_assert_str_eq(sx_ds_tensors_name(set, i + 1), name);
    }
    cr_assert_null(sx_ds_tensors_get(set, "layer.300.weight"));
    cr_assert_null(sx_ds_tensors_at(set, 301));
    cr_assert_null(sx_ds_tensors_name(set, -1));
    /* metadata: set, replace in place, order kept */
    cr_assert_eq(sx_ds_tensors_meta_set(set, "format", "pt"), SX_OK);
    cr_assert_eq(sx_ds_tensors_meta_set(set, "b", "1"), SX_OK);
    cr_assert_eq(sx_ds_tensors_meta_set(set, "format", "strix"), SX_OK);
    cr_assert_eq(sx_ds_tensors_meta_count(set), 2);
    cr_assert_str_eq(sx_ds_tensors_meta_key(set, 0), "format");
    cr_assert_str_eq(sx_ds_tensors_meta_get(set, "format"), "strix");
    cr_assert_null(sx_ds_tensors_meta_get(set, "none"));
    cr_assert_eq(sx_ds_tensors_meta_set(set, "", "x"), SX_E_ARG);
    cr_assert_eq(sx_ds_tensors_meta_set(set, "k", "\xc0\x80"), SX_E_ARG); /* overlong NUL */
    cr_assert(strstr(sx_last_error(), "not valid UTF-8") != NULL, "%s", sx_last_error());
    sx_tensor_free(a);
    sx_ds_tensors_free(set);
}

/* ---------------------------------------------------------------- files laid out by hand */

/* {"w": F32 (2) [1.0, -2.5]} with metadata after it, padded, and its data. */
static const char hand_header[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                  "\"__metadata__\":{\"k\":\"v\\u00e9\\n\"}}  ";
static const uint8_t hand_data[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20, 0xc0};

Test(datasets_safetensors, a_file_laid_out_by_hand_is_read)
{
    uint8_t *b = NULL;
    size_t n = image(hand_header, -1, hand_data, 8, &b);
    sx_ds_tensors *set = NULL;
    cr_assert_eq(sx_ds_safetensors_parse(b, n, "hand", &set), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_tensors_count(set), 1);
    const sx_tensor *w = sx_ds_tensors_get(set, "w");
    cr_assert(w != NULL && w->dtype == SX_F32 && w->rank == 1 && w->shape[0] == 2);
    cr_assert(SX_F32P(w)[0] == 1.0f && SX_F32P(w)[1] == -2.5f);
    cr_assert_str_eq(sx_ds_tensors_meta_get(set, "k"), "v\xc3\xa9\n");
    sx_ds_tensors_free(set);
    /* the same bytes as a file */
    char path[128];
    FILE *f = fopen(temp_path(path, sizeof path, "hand.safetensors"), "wb");
    cr_assert(f != NULL && fwrite(b, 1, n, f) == n && fclose(f) == 0);
    cr_assert_eq(sx_ds_safetensors_read(path, &set), SX_OK, "%s", sx_last_error());
    cr_assert_eq(SX_F32P(sx_ds_tensors_get(set, "w"))[1], -2.5f);
    sx_ds_tensors_free(set);
    unlink(path);
    free(b);
}

/* What the writer lays out, byte for byte: the metadata first, the tensors in the set's order,
 * the header padded with spaces to a multiple of 8, little-endian data. */
Test(datasets_safetensors, write_lays_out_the_bytes)
{
    sx_ds_tensors *set = NULL;
    cr_assert_eq(sx_ds_tensors_new(&set), SX_OK);
    sx_tensor *y = from(SX_F64, 0, NULL, (double[]){0.5});
    sx_tensor *x = from(SX_F32, 1, (int64_t[]){2}, (double[]){1.0, -2.5});
    cr_assert_eq(sx_ds_tensors_add(set, "y", y), SX_OK);
    cr_assert_eq(sx_ds_tensors_add(set, "x", x), SX_OK);
    cr_assert_eq(sx_ds_tensors_meta_set(set, "q\"\\", "t\x01"), SX_OK);
    char path[128];
    cr_assert_eq(sx_ds_safetensors_write(temp_path(path, sizeof path, "w.st"), set), SX_OK, "%s",
                 sx_last_error());
    const char want[] = "{\"__metadata__\":{\"q\\\"\\\\\":\"t\\u0001\"},"
                        "\"y\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]},"
                        "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
    size_t hl = (strlen(want) + 7) / 8 * 8, n = 0; /* 142 bytes, padded to 144 */
    cr_assert_eq(hl, 144);
    uint8_t *b = slurp(path, &n);
    cr_assert_eq(n, 8 + hl + 16);
    cr_assert(b[0] == hl && b[1] == 0 && b[2] == 0 && b[7] == 0);
    cr_assert(memcmp(b + 8, want, strlen(want)) == 0, "%.*s", (int)hl, (const char *)b + 8);
    for (size_t k = strlen(want); k < hl; k++)
        cr_assert_eq(b[8 + k], ' ');
    const uint8_t half[8] = {0, 0, 0, 0, 0, 0, 0xe0, 0x3f}; /* 0.5 as f64 LE */
    cr_assert(memcmp(b + 8 + hl, half, 8) == 0);
    cr_assert(memcmp(b + 8 + hl + 8, hand_data, 8) == 0);
    free(b);
    /* names of 1..16 bytes: every header is padded to a multiple of 8 with fewer than 8 spaces */
    for (int len = 1; len <= 16; len++) {
        char name[17];
        memset(name, 'n', (size_t)len);
        name[len] = '\0';
        cr_assert_eq(sx_ds_tensors_add(set, name, x), SX_OK);
        cr_assert_eq(sx_ds_safetensors_write(path, set), SX_OK, "%s", sx_last_error());
        b = slurp(path, &n);
        size_t h = b[0] | (size_t)b[1] << 8, spaces = 0;
        while (b[8 + h - 1 - spaces] == ' ')
            spaces++;
        cr_assert(h % 8 == 0 && spaces < 8 && b[8 + h - 1 - spaces] == '}', "%zu, %zu", h, spaces);
        free(b);
    }
    unlink(path);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_ds_tensors_free(set);
}

Test(datasets_safetensors, round_trip_is_bit_identical)
{
    sx_rng rng;
    sx_rng_seed(&rng, 7);
    sx_ds_tensors *set = NULL;
    cr_assert_eq(sx_ds_tensors_new(&set), SX_OK);
    const char *names[] = {"z",         "a.b",   "caf\xc3\xa9", "emoji \xf0\x9f\x98\x80",
                           "q\"uote\\", "tab\t", "r8",          "empty",
                           "scalar"};
    for (int i = 0; i < 9; i++) {
        int64_t shape[SX_MAX_RANK] = {2, 3, 1, 2, 1, 1, 2, 1};
        int rank = i < 6 ? i + 1 : i == 6 ? 8 : i == 7 ? 2 : 0;
        if (i == 7)
            shape[0] = 0;
        if (i == 0)
            shape[0] = 4; /* room for the four special values below */
        sx_tensor *t = tu_rand(&rng, i % 2 ? SX_F64 : SX_F32, rank, shape, -3, 3);
        if (i == 0) { /* special values keep their bits: NaN payloads, -0, infinities */
            uint32_t bits[4] = {0x7fc00123u, 0xffa00001u, 0x80000000u, 0xff800000u};
            memcpy(t->data, bits, sizeof bits);
        }
        cr_assert_eq(sx_ds_tensors_add(set, names[i], t), SX_OK, "%s", sx_last_error());
        sx_tensor_free(t);
    }
    cr_assert_eq(sx_ds_tensors_meta_set(set, "format", "pt"), SX_OK);
    cr_assert_eq(sx_ds_tensors_meta_set(set, "json", "{\"a\": [1, 2]}\n\x7f"), SX_OK);
    char path[128];
    temp_path(path, sizeof path, "round.safetensors");
    cr_assert_eq(sx_ds_safetensors_write(path, set), SX_OK, "%s", sx_last_error());
    sx_ds_tensors *back = NULL;
    cr_assert_eq(sx_ds_safetensors_read(path, &back), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_tensors_count(back), 9);
    for (int i = 0; i < 9; i++) {
        cr_assert_str_eq(sx_ds_tensors_name(back, i), names[i]);
        cr_assert(same_bits(sx_ds_tensors_at(back, i), sx_ds_tensors_at(set, i)), "%s", names[i]);
    }
    cr_assert_eq(sx_ds_tensors_meta_count(back), 2);
    cr_assert_str_eq(sx_ds_tensors_meta_key(back, 1), "json");
    cr_assert_str_eq(sx_ds_tensors_meta_get(back, "json"), "{\"a\": [1, 2]}\n\x7f");
    /* written again: the same bytes */
    char path2[128];
    cr_assert_eq(sx_ds_safetensors_write(temp_path(path2, sizeof path2, "again.st"), back), SX_OK);
    size_t n1 = 0, n2 = 0;
    uint8_t *b1 = slurp(path, &n1), *b2 = slurp(path2, &n2);
    cr_assert(n1 == n2 && memcmp(b1, b2, n1) == 0);
    /* an empty set is a valid file too */
    sx_ds_tensors *none = NULL, *none_back = NULL;
    cr_assert_eq(sx_ds_tensors_new(&none), SX_OK);
    cr_assert_eq(sx_ds_safetensors_write(path2, none), SX_OK);
    cr_assert_eq(sx_ds_safetensors_read(path2, &none_back), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_tensors_count(none_back), 0);
    free(b1);
    free(b2);
    unlink(path);
    unlink(path2);
    sx_ds_tensors_free(none);
    sx_ds_tensors_free(none_back);
    sx_ds_tensors_free(back);
    sx_ds_tensors_free(set);
}

/* ---------------------------------------------------------------- files written elsewhere */

Test(datasets_safetensors, an_independent_writers_file)
{
    char path[1100];
    fixture("python_writer.safetensors", path, sizeof path);
    sx_ds_tensors *set = NULL;
    cr_assert_eq(sx_ds_safetensors_read(path, &set), SX_OK, "%s", sx_last_error());
    const char *order[] = {"a.f64", "b.f32", "c.scalar", "d.empty", "e.cube"}; /* data order */
    cr_assert_eq(sx_ds_tensors_count(set), 5);
    for (int i = 0; i < 5; i++)
        cr_assert_str_eq(sx_ds_tensors_name(set, i), order[i]);
    const sx_tensor *a = sx_ds_tensors_get(set, "a.f64"), *b = sx_ds_tensors_get(set, "b.f32");
    const sx_tensor *c = sx_ds_tensors_get(set, "c.scalar"), *d = sx_ds_tensors_get(set, "d.empty");
    const sx_tensor *e = sx_ds_tensors_get(set, "e.cube");
    cr_assert(a->dtype == SX_F64 && a->rank == 2 && a->shape[0] == 2 && a->shape[1] == 3);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(SX_F64P(a)[i], i / 4.0 - 1);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(SX_F32P(b)[i], (float)(i * 3 - 5));
    cr_assert(c->rank == 0 && SX_F32P(c)[0] == 7.5f);
    cr_assert(d->rank == 2 && d->shape[0] == 0 && d->shape[1] == 3 && d->size == 0);
    cr_assert(e->rank == 3 && e->shape[2] == 2);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(SX_F32P(e)[i], (float)(-i / 8.0));
    cr_assert_str_eq(sx_ds_tensors_meta_get(set, "format"), "pt");
    cr_assert_str_eq(sx_ds_tensors_meta_get(set, "note"), "caf\xc3\xa9 \"quoted\"\n");
    sx_ds_tensors_free(set);
}

Test(datasets_safetensors, f16_and_bf16_as_torch_converts_them)
{
    char path[1100];
    fixture("torch_halves.safetensors", path, sizeof path);
    sx_ds_tensors *set = NULL;
    cr_assert_eq(sx_ds_safetensors_read(path, &set), SX_OK, "%s", sx_last_error());
    const char *pairs[2][2] = {{"f16", "f16_as_f32"}, {"bf16", "bf16_as_f32"}};
    for (int k = 0; k < 2; k++) {
        const sx_tensor *h = sx_ds_tensors_get(set, pairs[k][0]);
        const sx_tensor *r = sx_ds_tensors_get(set, pairs[k][1]);
        cr_assert(h != NULL && r != NULL && h->dtype == SX_F32 && h->size == r->size);
        cr_assert_gt(h->size, 200);
        for (int64_t i = 0; i < h->size; i++) {
            uint32_t a, b;
            memcpy(&a, SX_F32P(h) + i, 4);
            memcpy(&b, SX_F32P(r) + i, 4);
            cr_assert_eq(a, b, "%s[%lld]: %08x, torch %08x", pairs[k][0], (long long)i, a, b);
        }
    }
    sx_ds_tensors_free(set);
}

/* The value of a 16-bit pattern: sign, `eb` exponent bits (bias 2^(eb-1) - 1), 15 - eb mantissa
 * bits, in double. */
static double ref_half(uint16_t h, int eb)
{
    int mb = 15 - eb, bias = (1 << (eb - 1)) - 1;
    int e = (h >> mb) & ((1 << eb) - 1), m = h & ((1 << mb) - 1);
    double s = h & 0x8000 ? -1 : 1;
    if (e == (1 << eb) - 1)
        return m ? (double)NAN : s * (double)INFINITY;
    if (e == 0)
        return s * ldexp(m, 1 - bias - mb);
    return s * ldexp(m + (1 << mb), e - bias - mb);
}

/* Every one of the 65536 patterns of F16 and of BF16, in a file laid out here. */
Test(datasets_safetensors, every_f16_and_bf16_value_against_a_reference)
{
    const char *hdr = "{\"h\":{\"dtype\":\"F16\",\"shape\":[65536],\"data_offsets\":[0,131072]},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[256,256],"
                      "\"data_offsets\":[131072,262144]}}";
    uint8_t *data = malloc(262144), *b = NULL;
    for (int i = 0; i < 65536; i++) {
        data[2 * i] = data[131072 + 2 * i] = (uint8_t)i;
        data[2 * i + 1] = data[131072 + 2 * i + 1] = (uint8_t)(i >> 8);
    }
    size_t n = image(hdr, -1, data, 262144, &b);
    sx_ds_tensors *set = NULL;
    cr_assert_eq(sx_ds_safetensors_parse(b, n, "all", &set), SX_OK, "%s", sx_last_error());
    const sx_tensor *h = sx_ds_tensors_get(set, "h"), *bf = sx_ds_tensors_get(set, "b");
    cr_assert_eq(sx_ds_tensors_name(set, 0)[0], 'h');
    for (int i = 0; i < 65536; i++) {
        double rh = ref_half((uint16_t)i, 5), rb = ref_half((uint16_t)i, 8);
        float fh = SX_F32P(h)[i], fb = SX_F32P(bf)[i];
        cr_assert(isnan(rh) ? isnan(fh) : (double)fh == rh && !signbit(fh) == !signbit(rh),
                  "f16 %04x: %.9g, want %.9g", i, (double)fh, rh);
        cr_assert(isnan(rb) ? isnan(fb) : (double)fb == rb && !signbit(fb) == !signbit(rb),
                  "bf16 %04x: %.9g, want %.9g", i, (double)fb, rb);
    }
    sx_ds_tensors_free(set);
    free(b);
    free(data);
}

/* ---------------------------------------------------------------- malformed files */

static const struct {
    const char *header;
    size_t ndata;
    sx_status status;
    const char *message; /* a part of the message */
} bad[] = {
    {"[]", 0, SX_E_FORMAT, "want a JSON object at byte 0"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, SX_E_FORMAT,
     "want ',' or '}'"},
    {"{\"a\" {}}", 0, SX_E_FORMAT, "want ':'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4, SX_E_FORMAT,
     "text after the header's object"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4, SX_E_FORMAT,
     "want a string"},
    {"{\"a", 0, SX_E_FORMAT, "an unterminated string"},
    {"{\"a\x01\":{}}", 0, SX_E_FORMAT, "a control character in a string"},
    {"{\"a\xc3\x28\":{}}", 0, SX_E_FORMAT, "invalid UTF-8 in a string"},
    {"{\"\xed\xa0\x80\":{}}", 0, SX_E_FORMAT, "invalid UTF-8 in a string"}, /* a surrogate */
    {"{\"a\\q\":{}}", 0, SX_E_FORMAT, "an invalid escape"},
    {"{\"a\\u0000b\":{}}", 0, SX_E_FORMAT, "an invalid escape"},
    {"{\"a\\ud800\":{}}", 0, SX_E_FORMAT, "an invalid escape"}, /* a lone surrogate */
    {"{\"a\\u12G4\":{}}", 0, SX_E_FORMAT, "an invalid escape"},
    {"{\"\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, SX_E_FORMAT,
     "an empty tensor name"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, SX_E_FORMAT, "tensor 'a' appears twice"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, SX_E_FORMAT, "'__metadata__' appears twice"},
    {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, SX_E_FORMAT,
     "metadata key 'k' appears twice"},
    {"{\"__metadata__\":{\"k\":1}}", 0, SX_E_FORMAT, "want a string metadata value"},
    {"{\"__metadata__\":{\"k\":{\"n\":\"x\"}}}", 0, SX_E_FORMAT, "want a string metadata value"},
    {"{\"__metadata__\":[\"k\"]}", 0, SX_E_FORMAT, "want an object of strings for __metadata__"},
    {"{\"__metadata__\":{\"\":\"v\"}}", 0, SX_E_FORMAT, "an empty metadata key"},
    {"{\"a\":[]}", 0, SX_E_FORMAT, "want an object for a tensor"},
    {"{\"a\":{\"a\":{\"a\":{\"a\":{}}}}}", 0, SX_E_FORMAT, "tensor 'a': unknown key 'a'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", 4, SX_E_FORMAT,
     "tensor 'a': unknown key 'extra'"},
    {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", 0, SX_E_FORMAT,
     "tensor 'a': repeated key 'dtype'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, SX_E_FORMAT,
     "tensor 'a': no 'data_offsets' key"},
    {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, SX_E_FORMAT,
     "tensor 'a': no 'dtype' key"},
    {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, SX_E_FORMAT,
     "tensor 'a': no 'shape' key"},
    {"{\"a\":{\"dtype\":32}}", 0, SX_E_FORMAT, "want a dtype string"},
    {"{\"a\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, SX_E_FORMAT,
     "tensor 'a': unknown dtype 'Q7'"},
    {"{\"ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, SX_E_UNSUPPORTED,
     "tensor 'ids' has dtype I64: strix reads F32, F64, F16 and BF16 only"},
    {"{\"m\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, SX_E_UNSUPPORTED,
     "tensor 'm' has dtype BOOL"},
    {"{\"q\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, SX_E_UNSUPPORTED,
     "tensor 'q' has dtype F8_E4M3"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,2,3,4,5,6,7,8,9],\"data_offsets\":[0,4]}}", 4,
     SX_E_FORMAT, "tensor 'a': shape holds more than 8 numbers (a rank above 8)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,4]}}", 4, SX_E_FORMAT,
     "want a shape array"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[[1]],\"data_offsets\":[0,4]}}", 4, SX_E_FORMAT,
     "want a number >= 0"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, SX_E_FORMAT,
     "want a number >= 0"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, SX_E_FORMAT,
     "a number that is not an integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]}}", 4, SX_E_FORMAT,
     "a number that is not an integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, SX_E_FORMAT,
     "a number with a leading zero"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[9223372036854775808],\"data_offsets\":[0,4]}}", 4,
     SX_E_FORMAT, "a number above 2^63 - 1"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, SX_E_FORMAT,
     "tensor 'a': data_offsets holds 1 numbers, want 2"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, SX_E_FORMAT,
     "tensor 'a': data_offsets holds more than 2 numbers"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
     SX_E_FORMAT, "tensor 'a': shape (4294967296,4294967296) overflows 64 bits"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, SX_E_FORMAT,
     "tensor 'a': data_offsets [8, 4] end before they begin"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20, SX_E_FORMAT,
     "tensor 'a': data_offsets [0, 20] hold 20 bytes but shape (2,3) of F32 needs 24"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,28]}}", 28, SX_E_FORMAT,
     "tensor 'a': data_offsets [0, 28] hold 28 bytes but shape (2,3) of F32 needs 24"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
     12, SX_E_FORMAT, "tensor 'b' begins at byte 8 of the data region, want 4 (the end of 'a')"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, SX_E_FORMAT, "tensor 'b' begins at byte 4 of the data region, want 8 (the end of 'a')"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, SX_E_FORMAT,
     "tensor 'a' begins at byte 4 of the data region, want 0 (its start)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, SX_E_FORMAT,
     "tensor 'a' ends at byte 8, past the data region's 4 bytes"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6, SX_E_FORMAT,
     "the data region has 6 bytes but the tensors end at byte 4"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776],\"data_offsets\":[0,4398046511104]}}", 4,
     SX_E_FORMAT, "ends at byte 4398046511104, past the data region's 4 bytes"},
};

Test(datasets_safetensors, malformed_headers_are_refused_with_their_reason)
{
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        sx_ds_tensors *set = (sx_ds_tensors *)1;
        sx_status s = parse_header(bad[k].header, bad[k].ndata, &set);
        cr_assert_eq(s, bad[k].status, "case %zu (%s): status %d: %s", k, bad[k].header, s,
                     sx_last_error());
        cr_assert_null(set, "case %zu", k);
        cr_assert(strncmp(sx_last_error(), "hdr: ", 5) == 0, "case %zu: %s", k, sx_last_error());
        cr_assert(strstr(sx_last_error(), bad[k].message) != NULL, "case %zu: '%s', want '%s'", k,
                  sx_last_error(), bad[k].message);
    }
}

Test(datasets_safetensors, bad_lengths_and_short_files)
{
    const char *ok = "{}      ";
    uint8_t *b = NULL;
    sx_ds_tensors *set = NULL;
    struct {
        long long len;
        size_t cut; /* bytes of the image kept (0: all) */
        const char *message;
    } cases[] = {
        {0, 0, "header length 0 is 0"},
        {100000001, 0, "header length 100000001 is above the limit of 100000000 bytes"},
        {(long long)(~0ull >> 1), 0, "above the limit"},
        {9, 0, "header length 9 is beyond the end of the file"},
        {8, 5, "truncated header length (5 of 8 bytes)"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t n = image(ok, cases[k].len, NULL, 0, &b);
        sx_status s = sx_ds_safetensors_parse(b, cases[k].cut ? cases[k].cut : n, "hdr", &set);
        cr_assert_eq(s, SX_E_FORMAT, "case %zu: %s", k, sx_last_error());
        cr_assert(strstr(sx_last_error(), cases[k].message) != NULL, "case %zu: %s", k,
                  sx_last_error());
        free(b);
    }
    /* a file of 100000018 bytes (sparse) whose header would be 100000001 bytes: refused for
     * its length before it is read */
    char big[128];
    FILE *g = fopen(temp_path(big, sizeof big, "big.safetensors"), "wb");
    const uint8_t len8[8] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0}; /* 100000001 */
    cr_assert(g != NULL && fwrite(len8, 1, 8, g) == 8 && fclose(g) == 0);
    cr_assert_eq(truncate(big, 100000018), 0);
    cr_assert_eq(sx_ds_safetensors_read(big, &set), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), "header length 100000001 is above the limit"), "%s",
              sx_last_error());
    unlink(big);
    cr_assert_eq(sx_ds_safetensors_parse("", 0, "hdr", &set), SX_E_FORMAT);
    cr_assert_str_eq(sx_last_error(), "hdr: empty file");
    /* a file: truncated data is found by the size check, and a folder is not a file */
    char path[128];
    size_t n = image(hand_header, -1, hand_data, 8, &b);
    FILE *f = fopen(temp_path(path, sizeof path, "cut.safetensors"), "wb");
    cr_assert(f != NULL && fwrite(b, 1, n - 1, f) == n - 1 && fclose(f) == 0);
    cr_assert_eq(sx_ds_safetensors_read(path, &set), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), "past the data region's 7 bytes"), "%s", sx_last_error());
    cr_assert_eq(sx_ds_safetensors_read("/tmp", &set), SX_E_IO);
    cr_assert_eq(sx_ds_safetensors_read("/nonexistent/x.safetensors", &set), SX_E_IO);
    cr_assert(strstr(sx_last_error(), "cannot open") != NULL);
    cr_assert_eq(sx_ds_safetensors_read(NULL, &set), SX_E_ARG);
    cr_assert_eq(sx_ds_safetensors_parse(NULL, 4, NULL, &set), SX_E_ARG);
    cr_assert_eq(sx_ds_safetensors_write(path, NULL), SX_E_ARG);
    unlink(path);
    free(b);
}

/* A failed write leaves the path as it was and no temporary file: the path is a folder here. */
Test(datasets_safetensors, failed_write_keeps_the_old_file)
{
    char dir[] = "/tmp/sx_test_st_dir_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[200];
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    cr_assert_eq(mkdir(path, 0700), 0);
    sx_ds_tensors *set = NULL;
    cr_assert_eq(sx_ds_tensors_new(&set), SX_OK);
    cr_assert_eq(sx_ds_safetensors_write(path, set), SX_E_IO);
    cr_assert(strstr(sx_last_error(), "a.safetensors: cannot write") != NULL, "%s",
              sx_last_error());
    DIR *d = opendir(dir);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        entries += e->d_name[0] != '.';
    closedir(d);
    cr_assert_eq(entries, 1, "a temporary file was left behind");
    rmdir(path);
    rmdir(dir);
    sx_ds_tensors_free(set);
}

/* Every allocation of a read and a write may fail: an error, nothing leaked, nothing half
 * made. */
Test(datasets_safetensors, out_of_memory_anywhere)
{
    uint8_t *b = NULL;
    size_t n = image(hand_header, -1, hand_data, 8, &b);
    char path[128];
    temp_path(path, sizeof path, "oom.st");
    for (long k = 0;; k++) {
        sx_ds_tensors *set = NULL;
        tu_fail_after(k);
        sx_status s = sx_ds_safetensors_parse(b, n, "oom", &set);
        if (s == SX_OK)
            s = sx_ds_safetensors_write(path, set);
        sx_ds_tensors_free(set);
        tu_fail_reset();
        if (s == SX_OK)
            break;
        cr_assert_eq(s, SX_E_NOMEM, "after %ld: %s", k, sx_last_error());
        cr_assert(strncmp(sx_last_error(), "oom: ", 5) == 0 || strstr(sx_last_error(), "oom.st") ||
                      strncmp(sx_last_error(), "sx_ds_safetensors_write: ", 25) == 0,
                  "%s", sx_last_error());
        cr_assert_lt(k, 200);
    }
    unlink(path);
    free(b);
}

/* Read `n` bytes through a pipe (a file of unknown size): the sizes cannot be checked first,
 * so the reader finds a short or long data region while reading. */
static sx_status read_pipe(const uint8_t *b, size_t n, sx_ds_tensors **out)
{
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    cr_assert(n < 4096 && write(fd[1], b, n) == (ssize_t)n); /* fits the pipe's buffer */
    close(fd[1]);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd[0]);
    sx_status s = sx_ds_safetensors_read(path, out);
    close(fd[0]);
    return s;
}

Test(datasets_safetensors, a_pipe_is_read_to_its_end)
{
    uint8_t *b = NULL, data[12] = {0};
    memcpy(data, hand_data, 8);
    size_t n = image(hand_header, -1, data, 12, &b);
    sx_ds_tensors *set = NULL;
    cr_assert_eq(read_pipe(b, n - 4, &set), SX_OK, "%s", sx_last_error());
    cr_assert_eq(SX_F32P(sx_ds_tensors_get(set, "w"))[1], -2.5f);
    sx_ds_tensors_free(set);
    cr_assert_eq(read_pipe(b, n, &set), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), "trailing bytes after the last tensor"), "%s",
              sx_last_error());
    cr_assert_null(set);
    cr_assert_eq(read_pipe(b, n - 5, &set), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), "truncated data (7 of 8 bytes)"), "%s", sx_last_error());
    free(b);
}
