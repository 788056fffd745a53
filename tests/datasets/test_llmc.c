/* test_llmc.c: llm.c's GPT-2 checkpoint (datasets/llmc.c) on a tiny config (L=2, C=8, NH=2,
 * V=11, Vp=16, maxT=5): the names and order of the set, the file's bytes at offsets computed by
 * hand, round trips through llm.c's format and safetensors, the bfloat16 version, and headers
 * that lie. */
#include "testutil.h"

#include <string.h>
#include <sx_datasets.h>
#include <unistd.h>

enum { L = 2, C = 8, NH = 2, V = 11, VP = 16, MAXT = 5 };

/* llm.c's parameter kinds in file order, one tensor's shape each (cols 0: a vector). */
static const struct {
    const char *name;
    bool per_layer;
    int64_t rows, cols;
} kinds[16] = {
    {"transformer.wte.weight", false, VP, C},
    {"transformer.wpe.weight", false, MAXT, C},
    {"transformer.h.%d.ln_1.weight", true, C, 0},
    {"transformer.h.%d.ln_1.bias", true, C, 0},
    {"transformer.h.%d.attn.c_attn.weight", true, 3 * C, C},
    {"transformer.h.%d.attn.c_attn.bias", true, 3 * C, 0},
    {"transformer.h.%d.attn.c_proj.weight", true, C, C},
    {"transformer.h.%d.attn.c_proj.bias", true, C, 0},
    {"transformer.h.%d.ln_2.weight", true, C, 0},
    {"transformer.h.%d.ln_2.bias", true, C, 0},
    {"transformer.h.%d.mlp.c_fc.weight", true, 4 * C, C},
    {"transformer.h.%d.mlp.c_fc.bias", true, 4 * C, 0},
    {"transformer.h.%d.mlp.c_proj.weight", true, C, 4 * C},
    {"transformer.h.%d.mlp.c_proj.bias", true, C, 0},
    {"transformer.ln_f.weight", false, C, 0},
    {"transformer.ln_f.bias", false, C, 0},
};

/* Element i of kind k, layer l: exact in f32 and in bf16 (an integer below 256 over 4). */
static float value(int k, int l, int64_t i)
{
    return (float)((k * 37 + l * 11 + i * 5) % 251 - 125) / 4;
}

static const char *const cfg_keys[6] = {"max_seq_len", "vocab_size", "num_layers",
                                        "num_heads",   "channels",   "padded_vocab_size"};
static const int cfg_values[6] = {MAXT, V, L, NH, C, VP};

/* The tiny model as a set; wte with V rows (unpadded) when `unpadded`. */
static sx_ds_tensors *tiny_set(bool unpadded)
{
    sx_ds_tensors *set = NULL;
    cr_assert_eq(sx_ds_tensors_new(&set), SX_OK);
    for (int k = 0; k < 16; k++)
        for (int l = 0; l < (kinds[k].per_layer ? L : 1); l++) {
            char name[96];
            snprintf(name, sizeof name, kinds[k].name, l);
            int64_t shape[2] = {k == 0 && unpadded ? V : kinds[k].rows, kinds[k].cols};
            sx_tensor *t = NULL;
            cr_assert_eq(sx_tensor_new(SX_F32, kinds[k].cols ? 2 : 1, shape, &t), SX_OK);
            for (int64_t i = 0; i < t->size; i++)
                SX_F32P(t)[i] = value(k, l, i);
            cr_assert_eq(sx_ds_tensors_add(set, name, t), SX_OK, "%s", sx_last_error());
            sx_tensor_free(t);
        }
    for (int k = 0; k < 6; k++) {
        char v[16];
        snprintf(v, sizeof v, "%d", cfg_values[k]);
        cr_assert_eq(sx_ds_tensors_meta_set(set, cfg_keys[k], v), SX_OK);
    }
    return set;
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

static int32_t i32_at(const uint8_t *b, size_t off)
{
    return (int32_t)((uint32_t)b[off] | (uint32_t)b[off + 1] << 8 | (uint32_t)b[off + 2] << 16 |
                     (uint32_t)b[off + 3] << 24);
}

static float f32_at(const uint8_t *b, size_t off)
{
    uint32_t u = (uint32_t)i32_at(b, off);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void temp(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "/tmp/sx_test_llmc_%d_%s", (int)getpid(), name);
}

/* The file's bytes: the header's ints, then parameters at offsets computed by hand. */
Test(datasets_llmc, write_lays_out_llmc_bytes)
{
    sx_ds_tensors *set = tiny_set(true);
    char path[128];
    temp(path, sizeof path, "tiny.bin");
    cr_assert_eq(sx_ds_llmc_write(path, set), SX_OK, "%s", sx_last_error());
    size_t n = 0;
    uint8_t *b = slurp(path, &n);
    /* parameters: wte 16*8 = 128, wpe 5*8 = 40, ln1w 2*8 = 16, ln1b 16, qkvw 2*24*8 = 384,
     * qkvb 2*24 = 48, attprojw 2*8*8 = 128, attprojb 16, ln2w 16, ln2b 16, fcw 2*32*8 = 512,
     * fcb 2*32 = 64, fcprojw 2*8*32 = 512, fcprojb 16, lnfw 8, lnfb 8: 1928 floats */
    cr_assert_eq(n, 1024 + 4 * 1928);
    const int32_t head[8] = {20240326, 3, MAXT, V, L, NH, C, VP};
    for (int i = 0; i < 256; i++)
        cr_assert_eq(i32_at(b, 4 * (size_t)i), i < 8 ? head[i] : 0, "header int %d", i);
    /* wte: row 10 is the last real one, rows 11..15 llm.c's zero padding */
    cr_assert_eq(f32_at(b, 1024 + 4 * (10 * C + 7)), value(0, 0, 10 * C + 7));
    for (int i = V * C; i < VP * C; i++)
        cr_assert_eq(f32_at(b, 1024 + 4 * (size_t)i), 0.0f);
    /* wpe starts after wte's 128 floats */
    cr_assert_eq(f32_at(b, 1024 + 4 * 128), value(1, 0, 0));
    /* h.1.attn.c_attn.weight[5][3]: after wte, wpe, ln1w, ln1b (128+40+16+16 = 200) and layer
     * 0's qkvw (24*8 = 192): 392, plus 5*8 + 3 */
    cr_assert_eq(f32_at(b, 1024 + 4 * (392 + 43)), value(4, 1, 43));
    /* h.1.mlp.c_fc.bias[0]: 200 + qkvw 384 + qkvb 48 + attprojw 128 + attprojb 16 + ln2w 16 +
     * ln2b 16 + fcw 512 = 1320, plus layer 0's fcb (32): 1352 */
    cr_assert_eq(f32_at(b, 1024 + 4 * 1352), value(11, 1, 0));
    /* ln_f.bias: the last 8 floats */
    cr_assert_eq(f32_at(b, n - 4), value(15, 0, 7));
    /* every tensor's first and last element where llm.c's order puts it */
    size_t at = 1024;
    for (int k = 0; k < 16; k++)
        for (int l = 0; l < (kinds[k].per_layer ? L : 1); l++) {
            int64_t size = kinds[k].rows * (kinds[k].cols ? kinds[k].cols : 1);
            int64_t last = k == 0 ? V * C - 1 : size - 1;
            cr_assert_eq(f32_at(b, at), value(k, l, 0), "%s, layer %d", kinds[k].name, l);
            cr_assert_eq(f32_at(b, at + 4 * (size_t)last), value(k, l, last), "%s", kinds[k].name);
            at += 4 * (size_t)size;
        }
    cr_assert_eq(at, n);
    free(b);
    unlink(path);
    sx_ds_tensors_free(set);
}

Test(datasets_llmc, round_trip_names_order_values_and_config)
{
    sx_ds_tensors *set = tiny_set(false), *back = NULL;
    char path[128];
    temp(path, sizeof path, "rt.bin");
    cr_assert_eq(sx_ds_llmc_write(path, set), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_llmc_read(path, &back), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_tensors_count(back), 2 + 12 * L + 2);
    int64_t pos = 0;
    for (int k = 0; k < 16; k++)
        for (int l = 0; l < (kinds[k].per_layer ? L : 1); l++, pos++) {
            char name[96];
            snprintf(name, sizeof name, kinds[k].name, l);
            cr_assert_str_eq(sx_ds_tensors_name(back, pos), name);
            const sx_tensor *a = sx_ds_tensors_at(back, pos), *w = sx_ds_tensors_get(set, name);
            cr_assert(a->dtype == SX_F32 && sx_shape_equal(a->rank, a->shape, w->rank, w->shape),
                      "%s", name);
            cr_assert(memcmp(a->data, w->data, (size_t)a->size * 4) == 0, "%s", name);
        }
    for (int k = 0; k < 6; k++) {
        char v[16];
        snprintf(v, sizeof v, "%d", cfg_values[k]);
        cr_assert_str_eq(sx_ds_tensors_meta_get(back, cfg_keys[k]), v);
    }
    /* through safetensors and back to llm.c: the same bytes */
    char st[128], again[128];
    temp(st, sizeof st, "rt.safetensors");
    temp(again, sizeof again, "again.bin");
    sx_ds_tensors *via = NULL;
    cr_assert_eq(sx_ds_safetensors_write(st, back), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_safetensors_read(st, &via), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_llmc_write(again, via), SX_OK, "%s", sx_last_error());
    size_t n1 = 0, n2 = 0;
    uint8_t *b1 = slurp(path, &n1), *b2 = slurp(again, &n2);
    cr_assert(n1 == n2 && memcmp(b1, b2, n1) == 0);
    /* the memory reader reads the same */
    sx_ds_tensors *mem = NULL;
    cr_assert_eq(sx_ds_llmc_parse(b1, n1, "mem", &mem), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_tensors_count(mem), sx_ds_tensors_count(back));
    cr_assert(memcmp(sx_ds_tensors_at(mem, 3)->data, sx_ds_tensors_at(back, 3)->data, 32) == 0);
    free(b1);
    free(b2);
    unlink(path);
    unlink(st);
    unlink(again);
    sx_ds_tensors_free(mem);
    sx_ds_tensors_free(via);
    sx_ds_tensors_free(back);
    sx_ds_tensors_free(set);
}

/* Version 5: the same parameters as bfloat16 (their upper 16 bits: exact for these values). */
Test(datasets_llmc, version_5_bf16_is_read_as_f32)
{
    sx_ds_tensors *set = tiny_set(false), *back = NULL, *f32 = NULL;
    char path[128];
    temp(path, sizeof path, "v5.bin");
    cr_assert_eq(sx_ds_llmc_write(path, set), SX_OK, "%s", sx_last_error());
    size_t n = 0;
    uint8_t *b = slurp(path, &n);
    cr_assert_eq(sx_ds_llmc_parse(b, n, "v3", &f32), SX_OK);
    size_t count = (n - 1024) / 4, m = 1024 + 2 * count;
    uint8_t *h = malloc(m);
    memcpy(h, b, 1024);
    h[4] = 5;
    for (size_t i = 0; i < count; i++) {
        h[1024 + 2 * i] = b[1024 + 4 * i + 2];
        h[1024 + 2 * i + 1] = b[1024 + 4 * i + 3];
    }
    cr_assert_eq(sx_ds_llmc_parse(h, m, "v5", &back), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_tensors_count(back), sx_ds_tensors_count(f32));
    for (int64_t i = 0; i < sx_ds_tensors_count(back); i++) {
        const sx_tensor *x = sx_ds_tensors_at(back, i), *y = sx_ds_tensors_at(f32, i);
        cr_assert(x->size == y->size && memcmp(x->data, y->data, (size_t)x->size * 4) == 0, "%s",
                  sx_ds_tensors_name(back, i));
    }
    /* a short bf16 file is measured in 2-byte parameters */
    sx_ds_tensors_free(back);
    cr_assert_eq(sx_ds_llmc_parse(h, m - 2, "v5", &back), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), "1928 bf16 parameters (3856 bytes) but the file has 3854"),
              "%s", sx_last_error());
    free(h);
    free(b);
    unlink(path);
    sx_ds_tensors_free(back);
    sx_ds_tensors_free(f32);
    sx_ds_tensors_free(set);
}

/* A header image: magic, version, the six config values; `extra` bytes of parameters. */
static size_t header(uint8_t *b, int32_t magic, int32_t version, const int32_t cfg[6], size_t extra)
{
    memset(b, 0, 1024 + extra);
    int32_t v[8] = {magic, version, cfg[0], cfg[1], cfg[2], cfg[3], cfg[4], cfg[5]};
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < 4; k++)
            b[4 * i + k] = (uint8_t)((uint32_t)v[i] >> (8 * k));
    return 1024 + extra;
}

Test(datasets_llmc, headers_that_lie_are_refused_before_allocating)
{
    static uint8_t b[1024 + 4 * 1928 + 8];
    const int32_t ok[6] = {MAXT, V, L, NH, C, VP};
    struct {
        int32_t magic, version, cfg[6];
        size_t extra;
        const char *message;
    } cases[] = {
        {20240326, 3, {MAXT, V, L, NH, C, VP}, 4 * 1928, NULL},
        {20240327, 3, {MAXT, V, L, NH, C, VP}, 4 * 1928, "bad magic 20240327, want 20240326"},
        {20240326, 2, {MAXT, V, L, NH, C, VP}, 4 * 1928, "version 2 is not supported"},
        {20240326, 3, {MAXT, V, L, NH, 0, VP}, 0, "channels is 0"},
        {20240326, 3, {MAXT, -1, L, NH, C, VP}, 0, "vocab_size is -1"},
        {20240326,
         3,
         {MAXT, 17, L, NH, C, VP},
         0,
         "vocab_size is above padded_vocab_size (17 and 16)"},
        {20240326,
         3,
         {MAXT, V, L, 3, C, VP},
         0,
         "channels is not a multiple of num_heads (8 and 3)"},
        /* GPT-2 124M's header over a tiny file */
        {20240326,
         3,
         {1024, 50257, 12, 12, 768, 50304},
         4 * 1928,
         "the header announces 124475904 f32 parameters (497903616 bytes) but the file has 7712 "
         "bytes after the header"},
        {20240326, 3, {MAXT, V, L, NH, C, VP}, 4 * 1928 + 4, "but the file has 7716 bytes"},
        {20240326, 3, {MAXT, V, L, NH, C, VP}, 4 * 1928 - 4, "but the file has 7708 bytes"},
        /* 4C*C*L overflows 64 bits */
        {20240326, 3, {1, 1, 2147483647, 1, 2147483647, 1}, 0, "overflows 64 bits"},
        {20240326, 3, {2147483647, 1, 2147483647, 1, 1 << 20, 1}, 0, "overflows 64 bits"},
        /* every array fits 63 bits, their sum does not */
        {20240326, 3, {1, 1, 1, 1, 1 << 30, 1}, 0, "overflows 64 bits"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t n = header(b, cases[k].magic, cases[k].version, cases[k].cfg, cases[k].extra);
        sx_ds_tensors *set = (sx_ds_tensors *)1;
        tu_fail_after(cases[k].message ? 0 : 1000000); /* a refusal allocates nothing */
        sx_status s = sx_ds_llmc_parse(b, n, "ckpt", &set);
        tu_fail_reset();
        if (cases[k].message == NULL) {
            cr_assert_eq(s, SX_OK, "%s", sx_last_error());
            sx_ds_tensors_free(set);
            continue;
        }
        cr_assert_eq(s, SX_E_FORMAT, "case %zu: %s", k, sx_last_error());
        cr_assert_null(set);
        cr_assert(strncmp(sx_last_error(), "ckpt: ", 6) == 0, "%s", sx_last_error());
        cr_assert(strstr(sx_last_error(), cases[k].message) != NULL, "case %zu: '%s', want '%s'", k,
                  sx_last_error(), cases[k].message);
    }
    sx_ds_tensors *set = NULL;
    header(b, 20240326, 3, ok, 0);
    cr_assert_eq(sx_ds_llmc_parse(b, 1000, "ckpt", &set), SX_E_FORMAT);
    cr_assert_str_eq(sx_last_error(), "ckpt: truncated header (1000 of 1024 bytes)");
    cr_assert_eq(sx_ds_llmc_parse(b, 0, "ckpt", &set), SX_E_FORMAT);
    cr_assert_str_eq(sx_last_error(), "ckpt: empty file");
    cr_assert_eq(sx_ds_llmc_read("/nonexistent/gpt2.bin", &set), SX_E_IO);
    cr_assert_eq(sx_ds_llmc_read(NULL, &set), SX_E_ARG);
    cr_assert_eq(sx_ds_llmc_parse(NULL, 3, NULL, &set), SX_E_ARG);
}

Test(datasets_llmc, write_refuses_what_does_not_fit)
{
    char path[128];
    temp(path, sizeof path, "bad.bin");
    sx_ds_tensors *set = tiny_set(false);
    cr_assert_eq(sx_ds_llmc_write(path, NULL), SX_E_ARG);
    cr_assert_eq(sx_ds_tensors_meta_set(set, "channels", "8x"), SX_OK);
    cr_assert_eq(sx_ds_llmc_write(path, set), SX_E_ARG);
    cr_assert_str_eq(sx_last_error(), "sx_ds_llmc_write: metadata 'channels' is '8x', want an "
                                      "integer in 1..2147483647");
    cr_assert_eq(sx_ds_tensors_meta_set(set, "channels", "2147483648"), SX_OK);
    cr_assert_eq(sx_ds_llmc_write(path, set), SX_E_ARG);
    cr_assert_eq(sx_ds_tensors_meta_set(set, "channels", "8"), SX_OK);
    cr_assert_eq(sx_ds_tensors_meta_set(set, "num_heads", "3"), SX_OK);
    cr_assert_eq(sx_ds_llmc_write(path, set), SX_E_ARG);
    cr_assert_str_eq(sx_last_error(), "sx_ds_llmc_write: channels is not a multiple of num_heads");
    cr_assert_eq(sx_ds_tensors_meta_set(set, "num_heads", "2"), SX_OK);
    cr_assert_eq(sx_ds_tensors_meta_set(set, "max_seq_len", "4"), SX_OK);
    cr_assert_eq(sx_ds_llmc_write(path, set), SX_E_SHAPE);
    cr_assert_str_eq(sx_last_error(),
                     "sx_ds_llmc_write: tensor 'transformer.wpe.weight' is (5,8), want (4,8)");
    cr_assert_eq(sx_ds_tensors_meta_set(set, "max_seq_len", "5"), SX_OK);
    cr_assert_eq(sx_ds_tensors_meta_set(set, "num_layers", "3"), SX_OK);
    cr_assert_eq(sx_ds_llmc_write(path, set), SX_E_ARG);
    cr_assert_str_eq(sx_last_error(), "sx_ds_llmc_write: no tensor 'transformer.h.2.ln_1.weight'");
    cr_assert_eq(access(path, F_OK), -1, "a refused write left a file");
    sx_ds_tensors *empty = NULL;
    cr_assert_eq(sx_ds_tensors_new(&empty), SX_OK);
    cr_assert_eq(sx_ds_llmc_write(path, empty), SX_E_ARG);
    cr_assert_str_eq(sx_last_error(),
                     "sx_ds_llmc_write: no metadata 'max_seq_len' (the llm.c config)");
    sx_ds_tensors_free(empty);
    sx_ds_tensors_free(set);
}

/* Every allocation of a read and a write may fail: an error naming the input, nothing leaked. */
Test(datasets_llmc, out_of_memory_anywhere)
{
    sx_ds_tensors *set = tiny_set(true);
    char path[128];
    temp(path, sizeof path, "oom.bin");
    cr_assert_eq(sx_ds_llmc_write(path, set), SX_OK, "%s", sx_last_error());
    size_t n = 0;
    uint8_t *b = slurp(path, &n);
    for (long k = 0;; k++) {
        sx_ds_tensors *back = NULL;
        tu_fail_after(k);
        sx_status s = sx_ds_llmc_parse(b, n, "oom", &back);
        if (s == SX_OK)
            s = sx_ds_llmc_write(path, back);
        sx_ds_tensors_free(back);
        tu_fail_reset();
        if (s == SX_OK)
            break;
        cr_assert_eq(s, SX_E_NOMEM, "after %ld: %s", k, sx_last_error());
        cr_assert(strncmp(sx_last_error(), "oom: ", 5) == 0 || strstr(sx_last_error(), "oom.bin") ||
                      strncmp(sx_last_error(), "sx_ds_llmc_write: ", 18) == 0,
                  "%s", sx_last_error());
        cr_assert_lt(k, 500);
    }
    free(b);
    unlink(path);
    sx_ds_tensors_free(set);
}

/* The tiny model under Hugging Face's names and layouts: the Conv1D weights (in, out), each
 * holding the value llm.c's layout has at (out, in); wte of V rows; and two tensors the
 * conversion leaves out. `drop` names a tensor not to add. */
static sx_ds_tensors *hf_set(const char *prefix, bool square_c_attn, const char *drop)
{
    sx_ds_tensors *set = NULL;
    cr_assert_eq(sx_ds_tensors_new(&set), SX_OK);
    for (int k = 0; k < 16; k++)
        for (int l = 0; l < (kinds[k].per_layer ? L : 1); l++) {
            char own[96], name[128];
            snprintf(own, sizeof own, kinds[k].name, l);
            snprintf(name, sizeof name, "%s%s", prefix, own + strlen("transformer."));
            if (drop != NULL && strcmp(name, drop) == 0)
                continue;
            bool conv = kinds[k].per_layer && kinds[k].cols != 0;
            int64_t rows = k == 0 ? V : kinds[k].rows, cols = kinds[k].cols;
            bool t_ = conv && !square_c_attn;
            int64_t shape[2] = {t_ ? cols : rows, t_ ? rows : cols};
            sx_tensor *t = NULL;
            cr_assert_eq(sx_tensor_new(k == 2 ? SX_F64 : SX_F32, cols ? 2 : 1, shape, &t), SX_OK);
            for (int64_t i = 0; i < t->size; i++) {
                int64_t r = cols ? i / shape[1] : i, c = cols ? i % shape[1] : 0;
                sx_tensor_set(t, i, value(k, l, t_ ? c * cols + r : i));
            }
            cr_assert_eq(sx_ds_tensors_add(set, name, t), SX_OK, "%s", sx_last_error());
            sx_tensor_free(t);
        }
    sx_tensor *buf = NULL;
    cr_assert_eq(sx_tensor_zeros(SX_F32, 2, (int64_t[]){MAXT, MAXT}, &buf), SX_OK);
    char name[64];
    snprintf(name, sizeof name, "%sh.0.attn.bias", prefix);
    cr_assert_eq(sx_ds_tensors_add(set, name, buf), SX_OK);
    cr_assert_eq(sx_ds_tensors_add(set, "lm_head.weight", buf), SX_OK);
    sx_tensor_free(buf);
    return set;
}

Test(datasets_llmc, hugging_face_names_and_layouts_convert)
{
    const char *prefixes[2] = {"", "transformer."};
    for (int p = 0; p < 2; p++) {
        sx_ds_tensors *hf = hf_set(prefixes[p], false, NULL), *set = NULL;
        cr_assert_eq(sx_ds_llmc_from_hf(hf, NH, &set), SX_OK, "%s", sx_last_error());
        const char *want[6] = {"5", "11", "2", "2", "8", "128"}; /* Vp: 11 rounded up to 128 */
        for (int k = 0; k < 6; k++)
            cr_assert_str_eq(sx_ds_tensors_meta_get(set, cfg_keys[k]), want[k], "%s", cfg_keys[k]);
        cr_assert_eq(sx_ds_tensors_count(set), 2 + 12 * L + 2);
        int64_t pos = 0;
        for (int k = 0; k < 16; k++)
            for (int l = 0; l < (kinds[k].per_layer ? L : 1); l++, pos++) {
                char name[96];
                snprintf(name, sizeof name, kinds[k].name, l);
                cr_assert_str_eq(sx_ds_tensors_name(set, pos), name);
                const sx_tensor *t = sx_ds_tensors_at(set, pos);
                int64_t rows = k == 0 ? 128 : kinds[k].rows;
                cr_assert(t->dtype == SX_F32 && t->shape[0] == rows, "%s", name);
                cr_assert_eq(t->size, rows * (kinds[k].cols ? kinds[k].cols : 1), "%s", name);
                for (int64_t i = 0; i < t->size; i++)
                    cr_assert_eq(SX_F32P(t)[i], k == 0 && i >= V * C ? 0.0f : value(k, l, i),
                                 "%s[%lld]", name, (long long)i);
            }
        /* and it is a valid llm.c checkpoint */
        char path[128];
        temp(path, sizeof path, "hf.bin");
        cr_assert_eq(sx_ds_llmc_write(path, set), SX_OK, "%s", sx_last_error());
        unlink(path);
        sx_ds_tensors_free(set);
        sx_ds_tensors_free(hf);
    }
}

Test(datasets_llmc, hugging_face_sets_that_do_not_fit)
{
    sx_ds_tensors *hf = hf_set("", false, NULL), *set = (sx_ds_tensors *)1;
    cr_assert_eq(sx_ds_llmc_from_hf(hf, 3, &set), SX_E_ARG);
    cr_assert_null(set);
    cr_assert_str_eq(sx_last_error(),
                     "sx_ds_llmc_from_hf: channels 8 is not a multiple of num_heads 3");
    cr_assert_eq(sx_ds_llmc_from_hf(hf, 0, &set), SX_E_ARG);
    cr_assert_eq(sx_ds_llmc_from_hf(NULL, 2, &set), SX_E_ARG);
    sx_ds_tensors_free(hf);
    /* a set already in llm.c's (out, in) layout is not Hugging Face's */
    hf = hf_set("", true, NULL);
    cr_assert_eq(sx_ds_llmc_from_hf(hf, NH, &set), SX_E_SHAPE);
    cr_assert_str_eq(sx_last_error(), "sx_ds_llmc_from_hf: tensor 'h.0.attn.c_attn.weight' is "
                                      "(24,8), want (8,24) (Hugging Face's (in, out))");
    sx_ds_tensors_free(hf);
    hf = hf_set("transformer.", false, "transformer.h.1.mlp.c_fc.bias");
    cr_assert_eq(sx_ds_llmc_from_hf(hf, NH, &set), SX_E_ARG);
    cr_assert_str_eq(sx_last_error(),
                     "sx_ds_llmc_from_hf: no tensor 'transformer.h.1.mlp.c_fc.bias'");
    sx_ds_tensors_free(hf);
    hf = hf_set("", false, "h.0.ln_1.weight");
    cr_assert_eq(sx_ds_llmc_from_hf(hf, NH, &set), SX_E_ARG);
    cr_assert_str_eq(sx_last_error(),
                     "sx_ds_llmc_from_hf: num_layers 0 is not in 1..2147483647 (no layer h.0)");
    sx_ds_tensors_free(hf);
    cr_assert_eq(sx_ds_tensors_new(&hf), SX_OK);
    cr_assert_eq(sx_ds_llmc_from_hf(hf, NH, &set), SX_E_ARG);
    cr_assert_str_eq(sx_last_error(), "sx_ds_llmc_from_hf: no tensor 'wte.weight' (nor "
                                      "'transformer.wte.weight')");
    sx_ds_tensors_free(hf);
}
