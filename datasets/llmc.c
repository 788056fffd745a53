/* llmc.c: llm.c's GPT-2 checkpoint (train_gpt2.c's gpt2_build_from_checkpoint, train_gpt2.py's
 * write_model), read into a set of named tensors and written back from one. The file is a
 * 1024-byte header of int32 and sixteen parameter arrays, each holding every layer's tensor of
 * one kind; the set holds one tensor per layer under the PyTorch model's names. The parameter
 * table below is the one description of the layout both directions follow. */
#include "datasets_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define LLMC_MAGIC 20240326
#define LLMC_HEADER_INTS 256

/* The configuration, in the header's order (ints 2..7). */
enum { C_MAXT, C_V, C_L, C_NH, C_C, C_VP, C_COUNT };
static const char *const cfg_keys[C_COUNT] = {"max_seq_len", "vocab_size", "num_layers",
                                              "num_heads",   "channels",   "padded_vocab_size"};

/* The parameters in file order: a name (with %d for the layer when per_layer) and the shape of
 * one tensor, rows x cols, each a multiple of a config value (cols 0: a vector). */
static const struct {
    const char *name;
    bool per_layer;
    int rows_of, rows_mul, cols_mul; /* rows = rows_mul * cfg[rows_of]; cols = cols_mul * C */
} params[] = {
    {"transformer.wte.weight", false, C_VP, 1, 1},
    {"transformer.wpe.weight", false, C_MAXT, 1, 1},
    {"transformer.h.%d.ln_1.weight", true, C_C, 1, 0},
    {"transformer.h.%d.ln_1.bias", true, C_C, 1, 0},
    {"transformer.h.%d.attn.c_attn.weight", true, C_C, 3, 1},
    {"transformer.h.%d.attn.c_attn.bias", true, C_C, 3, 0},
    {"transformer.h.%d.attn.c_proj.weight", true, C_C, 1, 1},
    {"transformer.h.%d.attn.c_proj.bias", true, C_C, 1, 0},
    {"transformer.h.%d.ln_2.weight", true, C_C, 1, 0},
    {"transformer.h.%d.ln_2.bias", true, C_C, 1, 0},
    {"transformer.h.%d.mlp.c_fc.weight", true, C_C, 4, 1},
    {"transformer.h.%d.mlp.c_fc.bias", true, C_C, 4, 0},
    {"transformer.h.%d.mlp.c_proj.weight", true, C_C, 1, 4},
    {"transformer.h.%d.mlp.c_proj.bias", true, C_C, 1, 0},
    {"transformer.ln_f.weight", false, C_C, 1, 0},
    {"transformer.ln_f.bias", false, C_C, 1, 0},
};
#define NPARAMS ((int)(sizeof params / sizeof params[0]))

/* Tensor k's shape for a config (values <= 2^31 - 1, so no product here overflows). */
static int param_shape(int k, const int64_t *cfg, int64_t *dims)
{
    dims[0] = params[k].rows_mul * cfg[params[k].rows_of];
    dims[1] = params[k].cols_mul * cfg[C_C];
    return params[k].cols_mul ? 2 : 1;
}

static void param_name(int k, int64_t layer, char *buf, size_t n)
{
    if (params[k].per_layer)
        snprintf(buf, n, params[k].name, (int)layer);
    else
        snprintf(buf, n, "%s", params[k].name);
}

/* Elements of all parameters; false when the count overflows 63 bits. */
static bool total_elements(const int64_t *cfg, uint64_t *total)
{
    uint64_t sum = 0;
    for (int k = 0; k < NPARAMS; k++) {
        int64_t d[2] = {1, 1};
        int rank = param_shape(k, cfg, d);
        uint64_t e = (uint64_t)d[0], c = rank == 2 ? (uint64_t)d[1] : 1;
        uint64_t copies = params[k].per_layer ? (uint64_t)cfg[C_L] : 1;
        if (c != 0 && e > ((uint64_t)INT64_MAX) / c)
            return false;
        e *= c;
        if (copies != 0 && e > ((uint64_t)INT64_MAX) / copies)
            return false;
        e *= copies;
        if (e > (uint64_t)INT64_MAX - sum)
            return false;
        sum += e;
    }
    *total = sum;
    return true;
}

/* The config's own rules (values in 1..2^31-1 already): V <= Vp, NH divides C. */
static const char *cfg_problem(const int64_t *cfg)
{
    if (cfg[C_V] > cfg[C_VP])
        return "vocab_size is above padded_vocab_size";
    if (cfg[C_C] % cfg[C_NH] != 0)
        return "channels is not a multiple of num_heads";
    return NULL;
}

/* ---------------------------------------------------------------- reading */

static int32_t le32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* The header: magic, version, config, and the parameters' bytes against the input's size. */
static sx_status read_header(sx__in *in, int64_t *cfg, bool *bf16, uint64_t *count)
{
    uint8_t h[4 * LLMC_HEADER_INTS];
    if (in->size == 0)
        return sx__in_fail(in, SX_E_FORMAT, "empty file");
    SX_TRY(sx__in_read(in, h, sizeof h, "header"));
    if (le32(h) != LLMC_MAGIC)
        return sx__in_fail(in, SX_E_FORMAT, "bad magic %d, want %d (not an llm.c checkpoint)",
                           (int)le32(h), LLMC_MAGIC);
    int32_t version = le32(h + 4);
    if (version != 3 && version != 5)
        return sx__in_fail(in, SX_E_FORMAT, "version %d is not supported (3: f32, 5: bf16)",
                           (int)version);
    *bf16 = version == 5;
    for (int k = 0; k < C_COUNT; k++) {
        cfg[k] = le32(h + 8 + 4 * k);
        if (cfg[k] <= 0)
            return sx__in_fail(in, SX_E_FORMAT, "%s is %lld", cfg_keys[k], (long long)cfg[k]);
    }
    const char *bad = cfg_problem(cfg);
    if (bad != NULL)
        return sx__in_fail(in, SX_E_FORMAT, "%s (%lld and %lld)", bad,
                           (long long)cfg[cfg[C_V] > cfg[C_VP] ? C_V : C_C],
                           (long long)cfg[cfg[C_V] > cfg[C_VP] ? C_VP : C_NH]);
    size_t es = *bf16 ? 2 : 4;
    if (!total_elements(cfg, count) || *count > (uint64_t)INT64_MAX / es)
        return sx__in_fail(in, SX_E_FORMAT, "the parameter count overflows 64 bits");
    uint64_t have = in->size - sizeof h;
    if (in->size != UINT64_MAX && *count * es != have)
        return sx__in_fail(in, SX_E_FORMAT,
                           "the header announces %llu %s parameters (%llu bytes) but the file has "
                           "%llu bytes after the header",
                           (unsigned long long)*count, *bf16 ? "bf16" : "f32",
                           (unsigned long long)(*count * es), (unsigned long long)have);
    return SX_OK;
}

/* One tensor's elements from the input into t (f32). */
static sx_status read_values(sx__in *in, sx_tensor *t, bool bf16)
{
    size_t es = bf16 ? 2 : 4, bytes = (size_t)t->size * es;
    uint8_t *dst = (uint8_t *)t->data + (bf16 ? bytes : 0); /* bf16: the upper half */
    const uint8_t *src = sx__in_peek(in, bytes);
    if (src == NULL && bytes > 0) {
        SX_TRY(sx__in_read(in, dst, bytes, "parameters"));
        src = dst;
    }
    float *out = t->data;
    for (int64_t i = 0; i < t->size; i++) {
        const uint8_t *p = src + (size_t)i * es;
        uint32_t b = bf16 ? sx__bf16_bits((uint16_t)(p[0] | p[1] << 8)) : (uint32_t)le32(p);
        memcpy(out + i, &b, 4);
    }
    return SX_OK;
}

static sx_status read_params(sx__in *in, const int64_t *cfg, bool bf16, sx_ds_tensors *set)
{
    for (int k = 0; k < NPARAMS; k++) {
        int64_t layers = params[k].per_layer ? cfg[C_L] : 1;
        for (int64_t l = 0; l < layers; l++) {
            int64_t dims[2];
            int rank = param_shape(k, cfg, dims);
            char name[96];
            param_name(k, l, name, sizeof name);
            sx_tensor *t = NULL;
            SX_TRY(sx_tensor_new(SX_F32, rank, dims, &t));
            sx_status s = read_values(in, t, bf16);
            if (s != SX_OK) {
                sx_tensor_free(t);
                return s;
            }
            SX_TRY(sx__tensors_put(set, in->name, name, strlen(name), t));
        }
    }
    return SX_OK;
}

static sx_status read_all(sx__in *in, sx_ds_tensors **out)
{
    int64_t cfg[C_COUNT];
    bool bf16 = false;
    uint64_t count = 0;
    SX_TRY(read_header(in, cfg, &bf16, &count));
    sx_ds_tensors *set = NULL;
    sx_status s = sx_ds_tensors_new(&set);
    for (int k = 0; k < C_COUNT && s == SX_OK; k++) {
        char v[24];
        snprintf(v, sizeof v, "%lld", (long long)cfg[k]);
        s = sx_ds_tensors_meta_set(set, cfg_keys[k], v);
    }
    if (s == SX_OK)
        s = read_params(in, cfg, bf16, set);
    if (s == SX_OK)
        s = sx__in_end(in, "the parameters");
    if (s == SX_E_NOMEM) /* the message names the input, whichever allocation failed */
        s = sx__in_fail(in, SX_E_NOMEM, "out of memory");
    if (s != SX_OK) {
        sx_ds_tensors_free(set);
        return s;
    }
    *out = set;
    return SX_OK;
}

sx_status sx_ds_llmc_read(const char *path, sx_ds_tensors **out)
{
    if (out != NULL)
        *out = NULL;
    if (path == NULL || out == NULL)
        return sx_error(SX_E_ARG, "sx_ds_llmc_read: %s is NULL", path ? "out" : "path");
    sx__in in;
    SX_TRY(sx__in_open_file(&in, path));
    sx_status s = read_all(&in, out);
    sx__in_close(&in);
    return s;
}

sx_status sx_ds_llmc_parse(const void *buf, size_t len, const char *name, sx_ds_tensors **out)
{
    if (out != NULL)
        *out = NULL;
    if (out == NULL || (buf == NULL && len > 0))
        return sx_error(SX_E_ARG, "sx_ds_llmc_parse: %s is NULL", out ? "buf" : "out");
    sx__in in;
    sx__in_open_mem(&in, buf, len, name);
    return read_all(&in, out);
}

/* ---------------------------------------------------------------- writing */

/* The config from the set's metadata, checked. */
static sx_status write_config(const char *who, const sx_ds_tensors *set, int64_t *cfg)
{
    for (int k = 0; k < C_COUNT; k++) {
        const char *v = sx_ds_tensors_meta_get(set, cfg_keys[k]);
        if (v == NULL)
            return sx_error(SX_E_ARG, "%s: no metadata '%s' (the llm.c config)", who, cfg_keys[k]);
        char *end = NULL;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (v[0] < '0' || v[0] > '9' || *end != '\0' || errno != 0 || x < 1 || x > INT32_MAX)
            return sx_error(SX_E_ARG,
                            "%s: metadata '%s' is '%.40s', want an integer in "
                            "1..2147483647",
                            who, cfg_keys[k], v);
        cfg[k] = x;
    }
    const char *bad = cfg_problem(cfg);
    if (bad != NULL)
        return sx_error(SX_E_ARG, "%s: %s", who, bad);
    uint64_t count = 0;
    if (!total_elements(cfg, &count) || count > (uint64_t)INT64_MAX / 4)
        return sx_error(SX_E_ARG, "%s: the parameter count overflows 64 bits", who);
    return SX_OK;
}

/* Every tensor present with its shape (wte: Vp or V rows), f32 or f64. */
static sx_status write_check(const char *who, const sx_ds_tensors *set, const int64_t *cfg)
{
    for (int k = 0; k < NPARAMS; k++)
        for (int64_t l = 0; l < (params[k].per_layer ? cfg[C_L] : 1); l++) {
            char name[96], a[64], b[64];
            param_name(k, l, name, sizeof name);
            const sx_tensor *t = sx_ds_tensors_get(set, name);
            if (t == NULL)
                return sx_error(SX_E_ARG, "%s: no tensor '%s'", who, name);
            int64_t d[2];
            int rank = param_shape(k, cfg, d);
            bool ok = sx_shape_equal(t->rank, t->shape, rank, d);
            if (k == 0 && !ok) { /* wte without llm.c's padding rows */
                d[0] = cfg[C_V];
                ok = sx_shape_equal(t->rank, t->shape, rank, d);
                d[0] = cfg[C_VP];
            }
            if (!ok)
                return sx_error(SX_E_SHAPE, "%s: tensor '%s' is %s, want %s%s", who, name,
                                sx_shape_str(t->rank, t->shape, a, sizeof a),
                                sx_shape_str(rank, d, b, sizeof b),
                                k == 0 ? " (or vocab_size rows)" : "");
        }
    return SX_OK;
}

typedef struct llmc_write {
    const sx_ds_tensors *set;
    const int64_t *cfg;
} llmc_write;

/* n values of t from element `from` (n <= 1024), or zeros when t is NULL, as f32 LE. */
static sx_status put_f32(FILE *f, const sx_tensor *t, int64_t from, int64_t n)
{
    uint8_t buf[4096];
    for (int64_t i = 0; i < n; i++) {
        float v = t == NULL            ? 0.0f
                  : t->dtype == SX_F32 ? SX_F32P(t)[from + i]
                                       : (float)SX_F64P(t)[from + i];
        uint32_t b;
        memcpy(&b, &v, 4);
        for (int k = 0; k < 4; k++)
            buf[4 * i + k] = (uint8_t)(b >> (8 * k));
    }
    return fwrite(buf, 4, (size_t)n, f) == (size_t)n ? SX_OK : SX_E_IO;
}

static sx_status write_tensor(FILE *f, const sx_tensor *t, int64_t want)
{
    for (int64_t at = 0; at < want; at += 1024) {
        int64_t n = want - at < 1024 ? want - at : 1024;
        int64_t real = t->size - at < 0 ? 0 : t->size - at < n ? t->size - at : n;
        SX_TRY(put_f32(f, t, at, real));
        SX_TRY(put_f32(f, NULL, 0, n - real)); /* wte's padding rows */
    }
    return SX_OK;
}

static sx_status fill(FILE *f, void *ctx)
{
    const llmc_write *w = ctx;
    uint8_t h[4 * LLMC_HEADER_INTS];
    memset(h, 0, sizeof h);
    int32_t head[2 + C_COUNT] = {LLMC_MAGIC, 3};
    for (int k = 0; k < C_COUNT; k++)
        head[2 + k] = (int32_t)w->cfg[k];
    for (int i = 0; i < 2 + C_COUNT; i++)
        for (int k = 0; k < 4; k++)
            h[4 * i + k] = (uint8_t)((uint32_t)head[i] >> (8 * k));
    if (fwrite(h, 1, sizeof h, f) != sizeof h)
        return SX_E_IO;
    for (int k = 0; k < NPARAMS; k++)
        for (int64_t l = 0; l < (params[k].per_layer ? w->cfg[C_L] : 1); l++) {
            char name[96];
            int64_t d[2] = {1, 1};
            param_name(k, l, name, sizeof name);
            int rank = param_shape(k, w->cfg, d);
            SX_TRY(write_tensor(f, sx_ds_tensors_get(w->set, name), d[0] * (rank == 2 ? d[1] : 1)));
        }
    return SX_OK;
}

sx_status sx_ds_llmc_write(const char *path, const sx_ds_tensors *set)
{
    const char *who = "sx_ds_llmc_write";
    if (path == NULL || set == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, path ? "set" : "path");
    int64_t cfg[C_COUNT];
    SX_TRY(write_config(who, set, cfg));
    SX_TRY(write_check(who, set, cfg));
    llmc_write w = {set, cfg};
    return sx__write_atomic(path, fill, &w);
}

/* ---------------------------------------------------------------- from Hugging Face's names */

/* c_attn, attn.c_proj, c_fc and mlp.c_proj: Conv1D weights, (in, out) in Hugging Face's files. */
static bool conv1d(int k)
{
    return params[k].per_layer && params[k].cols_mul != 0;
}

/* Hugging Face's name of tensor k, layer l: llm.c's without "transformer.", after `prefix`. */
static void hf_name(const char *prefix, int k, int64_t l, char *buf, size_t n)
{
    char own[96];
    param_name(k, l, own, sizeof own);
    snprintf(buf, n, "%s%s", prefix, own + strlen("transformer."));
}

/* The config from wte, wpe and the layers present; *prefix "" or "transformer.". */
static sx_status hf_config(const char *who, const sx_ds_tensors *hf, int64_t nh,
                           const char **prefix, int64_t *cfg)
{
    *prefix = sx_ds_tensors_get(hf, "wte.weight") ? "" : "transformer.";
    char name[128];
    snprintf(name, sizeof name, "%swte.weight", *prefix);
    const sx_tensor *wte = sx_ds_tensors_get(hf, name);
    snprintf(name, sizeof name, "%swpe.weight", *prefix);
    const sx_tensor *wpe = sx_ds_tensors_get(hf, name);
    if (wte == NULL)
        return sx_error(SX_E_ARG, "%s: no tensor 'wte.weight' (nor 'transformer.wte.weight')", who);
    if (wpe == NULL)
        return sx_error(SX_E_ARG, "%s: no tensor '%s'", who, name);
    if (wte->rank != 2 || wpe->rank != 2 || wte->shape[1] != wpe->shape[1])
        return sx_error(SX_E_SHAPE, "%s: wte and wpe are not (V, C) and (maxT, C) of one C", who);
    int64_t L = 0;
    for (;; L++) {
        hf_name(*prefix, 2, L, name, sizeof name);
        if (sx_ds_tensors_get(hf, name) == NULL)
            break;
    }
    int64_t v[C_COUNT] = {wpe->shape[0], wte->shape[0], L, nh, wte->shape[1], 0};
    v[C_VP] = (v[C_V] + 127) / 128 * 128;
    for (int k = 0; k < C_COUNT; k++)
        if (v[k] < 1 || v[k] > INT32_MAX)
            return sx_error(SX_E_ARG, "%s: %s %lld is not in 1..2147483647%s", who, cfg_keys[k],
                            (long long)v[k], k == C_L ? " (no layer h.0)" : "");
    memcpy(cfg, v, sizeof v);
    if (cfg[C_C] % nh != 0)
        return sx_error(SX_E_ARG, "%s: channels %lld is not a multiple of num_heads %lld", who,
                        (long long)cfg[C_C], (long long)nh);
    uint64_t count = 0;
    if (!total_elements(cfg, &count))
        return sx_error(SX_E_ARG, "%s: the parameter count overflows 64 bits", who);
    return SX_OK;
}

/* Tensor k of one layer in llm.c's layout: transposed (Conv1D), padded (wte), f32. */
static sx_status hf_tensor(const char *who, const sx_tensor *src, const char *name, int k,
                           const int64_t *cfg, sx_tensor **out)
{
    int64_t d[2] = {1, 1}, want[2];
    int rank = param_shape(k, cfg, d);
    want[0] = conv1d(k) ? d[1] : k == 0 ? cfg[C_V] : d[0];
    want[1] = conv1d(k) ? d[0] : d[1];
    char a[64], b[64];
    if (!sx_shape_equal(src->rank, src->shape, rank, want))
        return sx_error(SX_E_SHAPE, "%s: tensor '%s' is %s, want %s%s", who, name,
                        sx_shape_str(src->rank, src->shape, a, sizeof a),
                        sx_shape_str(rank, want, b, sizeof b),
                        conv1d(k) ? " (Hugging Face's (in, out))" : "");
    SX_TRY(sx_tensor_zeros(SX_F32, rank, d, out));
    float *o = SX_F32P(*out);
    for (int64_t i = 0; i < src->size; i++) {
        /* element i of src is (r, c) of its shape; Conv1D's goes to (c, r) */
        int64_t r = rank == 2 ? i / want[1] : i, c = rank == 2 ? i % want[1] : 0;
        int64_t at = conv1d(k) ? c * d[1] + r : i;
        o[at] = src->dtype == SX_F32 ? SX_F32P(src)[i] : (float)SX_F64P(src)[i];
    }
    return SX_OK;
}

sx_status sx_ds_llmc_from_hf(const sx_ds_tensors *hf, int64_t num_heads, sx_ds_tensors **out)
{
    const char *who = "sx_ds_llmc_from_hf", *prefix = "";
    if (out != NULL)
        *out = NULL;
    if (hf == NULL || out == NULL || num_heads < 1)
        return sx_error(SX_E_ARG, "%s: %s", who,
                        num_heads < 1 ? "num_heads < 1"
                        : hf          ? "out is NULL"
                                      : "hf is NULL");
    int64_t cfg[C_COUNT];
    SX_TRY(hf_config(who, hf, num_heads, &prefix, cfg));
    sx_ds_tensors *set = NULL;
    sx_status s = sx_ds_tensors_new(&set);
    for (int k = 0; k < C_COUNT && s == SX_OK; k++) {
        char v[24];
        snprintf(v, sizeof v, "%lld", (long long)cfg[k]);
        s = sx_ds_tensors_meta_set(set, cfg_keys[k], v);
    }
    for (int k = 0; k < NPARAMS && s == SX_OK; k++)
        for (int64_t l = 0; l < (params[k].per_layer ? cfg[C_L] : 1) && s == SX_OK; l++) {
            char name[128], own[96];
            hf_name(prefix, k, l, name, sizeof name);
            param_name(k, l, own, sizeof own);
            const sx_tensor *src = sx_ds_tensors_get(hf, name);
            sx_tensor *t = NULL;
            s = src == NULL ? sx_error(SX_E_ARG, "%s: no tensor '%s'", who, name)
                            : hf_tensor(who, src, name, k, cfg, &t);
            if (s == SX_OK)
                s = sx__tensors_put(set, who, own, strlen(own), t);
        }
    if (s != SX_OK) {
        sx_ds_tensors_free(set);
        return s;
    }
    *out = set;
    return SX_OK;
}
