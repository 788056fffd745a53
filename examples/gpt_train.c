/* gpt_train: a GPT (GPT-2's layout: token and position embeddings, pre-norm blocks of causal
 * multi-head self-attention and a GELU MLP with residual connections, a final layer norm and an
 * output layer tied to the token embedding) trained with AdamW and class-index targets, on a text
 * (one byte per token) or on a file of token ids; prints the loss and tokens/s, the validation
 * loss (nats per token) and a sample of generated text, and saves the model.
 *
 *   gpt_train [--text FILE|DIR | --tokens FILE --vocab V] [--init safetensors|llmc FILE]
 *             [--layers L] [--dim C] [--heads H] [--seq T] [--max-len N] [--batch B]
 *             [--steps S] [--lr X] [--clip X] [--wd X] [--eval-every N] [--sample N]
 *             [--temperature X] [--top-p P]
 *             [--top-k K] [--seed S] [--save PATH] [--limit N] [--check LOSS] [--bench]
 *             [--save-init safetensors|llmc FILE] [--profile]
 *
 * --text: a file, or a folder whose files are read one after another (default: Debian's
 * `fortunes` texts, /usr/share/games/fortunes, without its .dat and .u8 files); --tokens: token
 * ids as little-endian int32, each below --vocab. The last 5% is the validation part. --init:
 * start from a checkpoint: a safetensors file holding this program's parameter names (as
 * bench/gpt_torch.py writes) or GPT-2's (nanoGPT's, or Hugging Face's model.safetensors with
 * --heads from its config.json), or llm.c's gpt2_124M.bin; its config (layers, channels,
 * vocabulary, positions) replaces the options.
 * --save-init: the initial weights as such a checkpoint (for a peer to start from the same
 * weights). --save: the trained model as a strix model file (`strix predict` and sx_nn_load read
 * it).
 * --lr: the peak rate (0.002), reached after the first 5% of the steps and decayed along a
 * cosine to a tenth of it at the end; --wd: AdamW's weight decay (0.01); --clip: the gradients'
 * global norm (1; 0: none).
 * --sample N (300; 0: none): at the end, N tokens generated after a prompt ("Q: ", or the
 * validation part's first token) with a key/value cache (sx_nn_generator), sampled at
 * --temperature (0.8; 0: greedy) from the --top-k (0: all) most likely tokens and the --top-p
 * nucleus (0.95), seeded by --seed.
 * --check: exit 1 unless the last validation loss is below LOSS (ctest). --bench: batches one
 * after another from the start of the data, as llm.c's loader takes them, one line per step (`step
 * K loss L ms M`), no evaluation (bench/compare_gpt). --profile: the time of each op kind and layer
 * of the training step, on stderr at the end. Ends with: result: steps=S train_loss=L val_loss=V
 * tokens_per_second=R params=P strix_ms=M peak_rss_mb=R */
#include <sx_nn.h>

#include <dirent.h>
#include <math.h>
#include <sx_datasets.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct options {
    const char *text, *tokens, *init_kind, *init, *save, *save_init_kind, *save_init;
    long layers, dim, heads, seq, max_len, vocab, batch, steps, eval_every, sample, top_k, seed,
        limit, bench, profile;
    double lr, clip, wd, temperature, top_p, check;
} options;

#define DIE(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, "gpt_train: " __VA_ARGS__);                                                \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)
#define CHECK(expr)                                                                                \
    do {                                                                                           \
        sx_status s_ = (expr);                                                                     \
        if (s_ != SX_OK)                                                                           \
            DIE("%s: %s", #expr, sx_last_error());                                                 \
    } while (0)

/* ---------------------------------------------------------------- the model */

/* Name a layer the way GPT-2's checkpoints do ("h.0.attn"); NULL propagates. */
static sx_nn_layer *named(sx_nn_net *net, sx_nn_layer *l, const char *fmt, long i)
{
    char name[48];
    snprintf(name, sizeof name, fmt, i);
    if (l != NULL && sx_nn_layer_rename(net, l, name) != SX_OK)
        DIE("%s", sx_last_error());
    return l;
}

/* tokens (T) -> logits (T, V) */
static sx_nn_net *gpt(const options *o)
{
    sx_nn_net *net = NULL;
    CHECK(sx_nn_net_new("gpt", SX_F32, (uint64_t)o->seed, &net));
    sx_nn_net_set_init(net,
                       (sx_nn_init){.kind = SX_INIT_GAUSSIAN, .a = 0, .b = 0.02}); /* GPT-2's */
    int64_t T = o->seq, C = o->dim, V = o->vocab;
    sx_nn_layer *x = sx_nn_input_ids(net, 1, &T); /* token ids: batches of int32 */
    sx_nn_embedding_params ep = sx_nn_embedding_params_default(V, C);
    x = named(net, sx_nn_embedding(net, x, &ep), "wte", 0);
    x = named(net, sx_nn_position_embedding_max(net, x, o->max_len), "wpe", 0);
    sx_nn_attention_params ap = sx_nn_attention_params_default((int)o->heads);
    ap.causal = true;
    ap.fused_qkv = true; /* one (C, 3C) projection, as GPT-2 stores it */
    for (long i = 0; i < o->layers; i++) {
        sx_nn_layer *h = named(net, sx_nn_layer_norm(net, x, NULL), "h.%ld.ln_1", i);
        h = named(net, sx_nn_attention(net, h, &ap), "h.%ld.attn", i);
        x = sx_nn_add(net, 2, (sx_nn_layer *[]){x, h});
        h = named(net, sx_nn_layer_norm(net, x, NULL), "h.%ld.ln_2", i);
        h = named(net, sx_nn_linear(net, h, 4 * C, SX_ACT_GELU_TANH), "h.%ld.mlp.c_fc", i);
        h = named(net, sx_nn_linear(net, h, C, SX_ACT_NONE), "h.%ld.mlp.c_proj", i);
        x = sx_nn_add(net, 2, (sx_nn_layer *[]){x, h});
    }
    x = named(net, sx_nn_layer_norm(net, x, NULL), "ln_f", 0);
    named(net, sx_nn_linear_nobias(net, x, V, SX_ACT_NONE), "lm_head", 0);
    CHECK(sx_nn_net_status(net));
    /* the output layer reads the token table, transposed: (C, V) = wte (V, C)^T */
    CHECK(sx_nn_share(net, "lm_head.weight", "wte.weight", true));
    return net;
}

/* ---------------------------------------------------------------- checkpoints */

/* GPT-2's tensors of a layer under nanoGPT's names ((out, in) weights, c_attn's Q, K, V rows)
 * against this network's ((in, out) weights, qkv_weight's Q, K, V columns): the network's name
 * and whether to transpose. */
static const struct {
    const char *gpt2, *ours;
    bool t;
} gpt2_names[] = {
    {"ln_1.weight", "ln_1.gamma", false},
    {"ln_1.bias", "ln_1.beta", false},
    {"attn.c_attn.weight", "attn.qkv_weight", true},
    {"attn.c_attn.bias", "attn.qkv_bias", false},
    {"attn.c_proj.weight", "attn.out_weight", true},
    {"attn.c_proj.bias", "attn.out_bias", false},
    {"ln_2.weight", "ln_2.gamma", false},
    {"ln_2.bias", "ln_2.beta", false},
    {"mlp.c_fc.weight", "mlp.c_fc.weight", true},
    {"mlp.c_fc.bias", "mlp.c_fc.bias", false},
    {"mlp.c_proj.weight", "mlp.c_proj.weight", true},
    {"mlp.c_proj.bias", "mlp.c_proj.bias", false},
};

/* Set parameter `ours` from tensor t, transposed when asked, its first rows only when the
 * checkpoint has more (the padded token table). */
static void set_from(sx_nn_net *net, const char *ours, const sx_tensor *t, bool transpose)
{
    sx_nn_param_info pi;
    bool found = false;
    for (int i = 0; i < sx_nn_net_n_params(net) && !found; i++) {
        CHECK(sx_nn_net_param_info(net, i, &pi));
        found = strcmp(pi.name, ours) == 0;
    }
    if (!found)
        DIE("the network has no parameter %s", ours);
    sx_tensor *v = NULL;
    CHECK(sx_tensor_new(SX_F32, pi.rank, pi.shape, &v));
    int64_t rows = pi.shape[0], cols = pi.rank == 2 ? pi.shape[1] : 1;
    int64_t want = transpose ? cols : rows, have = t->rank >= 1 ? t->shape[0] : 1;
    int64_t width = t->rank == 2 ? t->shape[1] : 1;
    if (t->rank != pi.rank || have < want || width != (transpose ? rows : cols))
        DIE("checkpoint tensor for %s has the wrong shape", ours);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            sx_tensor_set(v, i * cols + j,
                          sx_tensor_get(t, transpose ? j * width + i : i * width + j));
    CHECK(sx_nn_net_param_set(net, ours, v));
    sx_tensor_free(v);
}

/* A checkpoint's set into the network: this program's own names, or GPT-2's. */
static void load_set(sx_nn_net *net, const sx_ds_tensors *set, long layers)
{
    if (sx_ds_tensors_get(set, "h.0.ln_1.gamma") != NULL) { /* this program's names */
        for (int64_t i = 0; i < sx_ds_tensors_count(set); i++)
            CHECK(sx_nn_net_param_set(net, sx_ds_tensors_name(set, i), sx_ds_tensors_at(set, i)));
        return;
    }
    const char *pre = sx_ds_tensors_get(set, "transformer.wte.weight") ? "transformer." : "";
    char a[128], b[128];
    snprintf(a, sizeof a, "%swte.weight", pre);
    const sx_tensor *t = sx_ds_tensors_get(set, a);
    if (t == NULL)
        DIE("the checkpoint has neither this program's names nor GPT-2's (no %s)", a);
    set_from(net, "wte.weight", t, false);
    snprintf(a, sizeof a, "%swpe.weight", pre);
    set_from(net, "wpe.weight", sx_ds_tensors_get(set, a), false);
    for (long l = 0; l < layers; l++)
        for (size_t k = 0; k < sizeof gpt2_names / sizeof *gpt2_names; k++) {
            snprintf(a, sizeof a, "%sh.%ld.%s", pre, l, gpt2_names[k].gpt2);
            snprintf(b, sizeof b, "h.%ld.%s", l, gpt2_names[k].ours);
            if ((t = sx_ds_tensors_get(set, a)) == NULL)
                DIE("the checkpoint has no %s", a);
            set_from(net, b, t, gpt2_names[k].t);
        }
    snprintf(a, sizeof a, "%sln_f.weight", pre);
    set_from(net, "ln_f.gamma", sx_ds_tensors_get(set, a), false);
    snprintf(a, sizeof a, "%sln_f.bias", pre);
    set_from(net, "ln_f.beta", sx_ds_tensors_get(set, a), false);
}

/* Add parameter `ours` to the set as `name`, transposed when asked; the token table padded with
 * zero rows to `rows` (llm.c's padded vocabulary) when rows > its own. */
static void add_param(sx_ds_tensors *set, sx_nn_net *net, const char *name, const char *ours,
                      bool transpose, int64_t rows)
{
    const sx_tensor *v = sx_nn_net_param(net, ours);
    if (v == NULL)
        DIE("%s", sx_last_error());
    int64_t r = v->rank == 2 ? v->shape[0] : v->size, c = v->rank == 2 ? v->shape[1] : 1;
    int64_t shape[2] = {transpose ? c : r > rows ? r : rows, transpose ? r : c};
    sx_tensor *t = NULL;
    CHECK(sx_tensor_zeros(SX_F32, v->rank, shape, &t));
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++)
            sx_tensor_set(t, transpose ? j * r + i : i * c + j, sx_tensor_get(v, i * c + j));
    CHECK(sx_ds_tensors_add(set, name, t));
    sx_tensor_free(t);
}

/* The network's weights as a checkpoint: a safetensors file under this program's names, or
 * llm.c's GPT-2 checkpoint (nanoGPT's names and layouts, the config as metadata). */
static void save_init(sx_nn_net *net, const options *o, const char *kind, const char *path)
{
    sx_ds_tensors *set = NULL;
    CHECK(sx_ds_tensors_new(&set));
    char a[128], b[128];
    if (strcmp(kind, "safetensors") == 0) {
        for (int i = 0; i < sx_nn_net_n_params(net); i++) {
            sx_nn_param_info pi;
            CHECK(sx_nn_net_param_info(net, i, &pi));
            if (pi.shared_from == NULL)
                add_param(set, net, pi.name, pi.name, false, 0);
        }
        CHECK(sx_ds_safetensors_write(path, set));
    } else if (strcmp(kind, "llmc") == 0) {
        long vp = (o->vocab + 127) / 128 * 128,
             cfg[6] = {o->max_len, o->vocab, vp, o->layers, o->heads, o->dim};
        const char *keys[6] = {"max_seq_len", "vocab_size", "padded_vocab_size",
                               "num_layers",  "num_heads",  "channels"};
        for (int k = 0; k < 6; k++) {
            snprintf(a, sizeof a, "%ld", cfg[k]);
            CHECK(sx_ds_tensors_meta_set(set, keys[k], a));
        }
        add_param(set, net, "transformer.wte.weight", "wte.weight", false, vp);
        add_param(set, net, "transformer.wpe.weight", "wpe.weight", false, 0);
        for (long l = 0; l < o->layers; l++)
            for (size_t k = 0; k < sizeof gpt2_names / sizeof *gpt2_names; k++) {
                snprintf(a, sizeof a, "transformer.h.%ld.%s", l, gpt2_names[k].gpt2);
                snprintf(b, sizeof b, "h.%ld.%s", l, gpt2_names[k].ours);
                add_param(set, net, a, b, gpt2_names[k].t, 0);
            }
        add_param(set, net, "transformer.ln_f.weight", "ln_f.gamma", false, 0);
        add_param(set, net, "transformer.ln_f.bias", "ln_f.beta", false, 0);
        CHECK(sx_ds_llmc_write(path, set));
    } else {
        DIE("--save-init takes safetensors or llmc, not '%s'", kind);
    }
    sx_ds_tensors_free(set);
}

static long meta(const sx_ds_tensors *set, const char *key)
{
    const char *v = sx_ds_tensors_meta_get(set, key);
    return v != NULL ? strtol(v, NULL, 10) : 0;
}

/* Read the checkpoint (o->init of kind o->init_kind) and take its config into o. */
static sx_ds_tensors *read_init(options *o)
{
    sx_ds_tensors *set = NULL;
    if (strcmp(o->init_kind, "llmc") == 0)
        CHECK(sx_ds_llmc_read(o->init, &set));
    else if (strcmp(o->init_kind, "safetensors") == 0)
        CHECK(sx_ds_safetensors_read(o->init, &set));
    else
        DIE("--init takes safetensors or llmc, not '%s'", o->init_kind);
    const char *pre = sx_ds_tensors_get(set, "transformer.wte.weight") ? "transformer." : "";
    char a[64];
    snprintf(a, sizeof a, "%sh.0.attn.c_attn.weight", pre);
    const sx_tensor *qkv = sx_ds_tensors_get(set, a);
    if (qkv != NULL && qkv->rank == 2 && qkv->shape[0] * 3 == qkv->shape[1]) {
        /* Hugging Face's GPT-2 (Conv1D weights, (in, out)): into llm.c's layout; the heads are
         * not in the weights (config.json's n_head: --heads) */
        sx_ds_tensors *conv = NULL;
        CHECK(sx_ds_llmc_from_hf(set, o->heads, &conv));
        sx_ds_tensors_free(set);
        set = conv;
        pre = "transformer.";
    }
    snprintf(a, sizeof a, "%swte.weight", pre);
    const sx_tensor *wte = sx_ds_tensors_get(set, a);
    snprintf(a, sizeof a, "%swpe.weight", pre);
    const sx_tensor *wpe = sx_ds_tensors_get(set, a);
    if (wte == NULL || wpe == NULL || wte->rank != 2 || wpe->rank != 2)
        DIE("%s: no token and position tables (wte.weight, wpe.weight)", o->init);
    bool ours = sx_ds_tensors_get(set, "h.0.ln_1.gamma") != NULL;
    long layers = 0;
    for (;; layers++) {
        snprintf(a, sizeof a, "%sh.%ld.ln_1.%s", pre, layers, ours ? "gamma" : "weight");
        if (sx_ds_tensors_get(set, a) == NULL)
            break;
    }
    o->dim = wte->shape[1];
    o->max_len = wpe->shape[0];
    o->layers = layers;
    long v = meta(set, "vocab_size"), h = meta(set, "num_heads");
    o->vocab = v > 0 ? v : o->vocab > 0 ? o->vocab : wte->shape[0];
    o->heads = h > 0 ? h : o->heads;
    if (layers < 1 || o->dim % o->heads != 0 || o->seq > o->max_len)
        DIE("%s: %ld layers, %ld channels for %ld heads, %ld positions for --seq %ld", o->init,
            layers, o->dim, o->heads, o->max_len, o->seq);
    return set;
}

/* ---------------------------------------------------------------- data */

static long num(const char *opt, const char *v)
{
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < 0)
        DIE("%s wants a number >= 0, not '%s'", opt, v);
    return x;
}

static double real(const char *opt, const char *v)
{
    char *end = NULL;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || !isfinite(x) || x < 0)
        DIE("%s wants a number >= 0, not '%s'", opt, v);
    return x;
}

static options parse(int argc, char **argv)
{
    options o = {.text = "/usr/share/games/fortunes",
                 .layers = 4,
                 .dim = 128,
                 .heads = 4,
                 .seq = 64,
                 .vocab = 0,
                 .batch = 16,
                 .steps = 3000,
                 .eval_every = 500,
                 .sample = 300,
                 .seed = 1,
                 .lr = 2e-3,
                 .clip = 1,
                 .wd = 0.01,
                 .temperature = 0.8,
                 .top_p = 0.95};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--bench") == 0 || strcmp(a, "--profile") == 0) {
            *(a[2] == 'b' ? &o.bench : &o.profile) = 1;
            continue;
        }
        if (v == NULL)
            DIE("%s wants a value", a);
        i++;
        if (strcmp(a, "--text") == 0)
            o.text = v;
        else if (strcmp(a, "--tokens") == 0)
            o.tokens = v;
        else if (strcmp(a, "--init") == 0) {
            o.init_kind = v;
            if (i + 1 >= argc)
                DIE("--init wants a kind and a file");
            o.init = argv[++i];
        } else if (strcmp(a, "--save-init") == 0) {
            o.save_init_kind = v;
            if (i + 1 >= argc)
                DIE("--save-init wants a kind and a file");
            o.save_init = argv[++i];
        } else if (strcmp(a, "--save") == 0)
            o.save = v;
        else if (strcmp(a, "--layers") == 0)
            o.layers = num(a, v);
        else if (strcmp(a, "--dim") == 0)
            o.dim = num(a, v);
        else if (strcmp(a, "--heads") == 0)
            o.heads = num(a, v);
        else if (strcmp(a, "--seq") == 0)
            o.seq = num(a, v);
        else if (strcmp(a, "--max-len") == 0)
            o.max_len = num(a, v);
        else if (strcmp(a, "--vocab") == 0)
            o.vocab = num(a, v);
        else if (strcmp(a, "--batch") == 0)
            o.batch = num(a, v);
        else if (strcmp(a, "--steps") == 0)
            o.steps = num(a, v);
        else if (strcmp(a, "--eval-every") == 0)
            o.eval_every = num(a, v);
        else if (strcmp(a, "--sample") == 0)
            o.sample = num(a, v);
        else if (strcmp(a, "--top-k") == 0)
            o.top_k = num(a, v);
        else if (strcmp(a, "--seed") == 0)
            o.seed = num(a, v);
        else if (strcmp(a, "--limit") == 0)
            o.limit = num(a, v);
        else if (strcmp(a, "--lr") == 0)
            o.lr = real(a, v);
        else if (strcmp(a, "--clip") == 0)
            o.clip = real(a, v);
        else if (strcmp(a, "--wd") == 0)
            o.wd = real(a, v);
        else if (strcmp(a, "--temperature") == 0)
            o.temperature = real(a, v);
        else if (strcmp(a, "--top-p") == 0)
            o.top_p = real(a, v);
        else if (strcmp(a, "--check") == 0)
            o.check = real(a, v);
        else
            DIE("unknown option %s", a);
    }
    if (o.vocab == 0)
        o.vocab = o.tokens != NULL ? 50257 : 256;
    if (o.max_len == 0)
        o.max_len = o.seq;
    if (o.layers < 1 || o.dim < 1 || o.heads < 1 || o.dim % o.heads != 0 || o.seq < 2 ||
        o.max_len < o.seq || o.batch < 1 || o.steps < 1 || !(o.lr > 0) || o.vocab < 2 ||
        o.vocab > (1L << 24) || (o.tokens == NULL && o.vocab != 256) || o.top_k > o.vocab ||
        !(o.top_p > 0 && o.top_p <= 1))
        DIE("want --layers, --dim, --heads, --batch, --steps >= 1, --heads dividing --dim, "
            "--seq >= 2, --max-len >= --seq, --lr > 0, --vocab 2..2^24 (256 for a text), "
            "--top-k <= --vocab, 0 < --top-p <= 1");
    return o;
}

/* Append the bytes of `path` to *buf (n used, cap allocated). */
static void append_file(const char *path, unsigned char **buf, size_t *n, size_t *cap)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        DIE("cannot open %s (Debian's `fortunes` package installs the default texts)", path);
    size_t got;
    do {
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 1 << 16;
            unsigned char *b = realloc(*buf, *cap);
            if (b == NULL)
                DIE("out of memory reading %s", path);
            *buf = b;
        }
        got = fread(*buf + *n, 1, *cap - *n, f);
        *n += got;
    } while (got > 0);
    if (ferror(f))
        DIE("cannot read %s", path);
    fclose(f);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The tokens: a text's bytes (a file, or the files of a folder in name order, without .dat and
 * .u8: fortune's indexes and links), or a file of int32 ids below vocab; the first `limit`. */
static int32_t *read_tokens(const options *o, size_t *len)
{
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0;
    DIR *d = o->tokens == NULL ? opendir(o->text) : NULL;
    if (o->tokens != NULL) {
        append_file(o->tokens, &buf, &n, &cap);
        if (n % 4 != 0)
            DIE("%s: %zu bytes, not a whole number of int32 tokens", o->tokens, n);
    } else if (d == NULL) {
        append_file(o->text, &buf, &n, &cap);
    } else {
        char *names[1024];
        int k = 0;
        for (struct dirent *e; (e = readdir(d)) != NULL && k < 1024;) {
            const char *dot = strrchr(e->d_name, '.');
            if (e->d_name[0] == '.' || (dot && (!strcmp(dot, ".dat") || !strcmp(dot, ".u8"))))
                continue;
            if ((names[k] = malloc(strlen(o->text) + strlen(e->d_name) + 2)) == NULL)
                DIE("out of memory");
            sprintf(names[k++], "%s/%s", o->text, e->d_name);
        }
        closedir(d);
        qsort(names, (size_t)k, sizeof *names, by_name);
        for (int i = 0; i < k; i++) {
            append_file(names[i], &buf, &n, &cap);
            free(names[i]);
        }
    }
    size_t count = o->tokens != NULL ? n / 4 : n;
    if (o->limit > 0 && (size_t)o->limit < count)
        count = (size_t)o->limit;
    int32_t *tok = malloc((count ? count : 1) * sizeof *tok);
    if (tok == NULL)
        DIE("out of memory");
    for (size_t i = 0; i < count; i++) {
        const unsigned char *q = buf + 4 * i;
        tok[i] = o->tokens != NULL ? (int32_t)((uint32_t)q[0] | (uint32_t)q[1] << 8 |
                                               (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24)
                                   : buf[i];
        if (tok[i] < 0 || tok[i] >= o->vocab)
            DIE("%s: token %zu is %d (want 0..%ld)", o->tokens, i, tok[i], o->vocab - 1);
    }
    free(buf);
    *len = count;
    return tok;
}

/* Inputs (B, T) and the next tokens (B, T) as class indices: windows of T + 1 tokens at random
 * offsets of tok[0, len), or (batch `at` >= 0) llm.c's order: the batch's B T + 1 tokens from
 * at B T on (modulo the data), row b from b T. */
static void fill_batch(const int32_t *tok, size_t len, long at, sx_rng *r, sx_tensor *x,
                       sx_tensor *y)
{
    int64_t B = x->shape[0], T = x->shape[1];
    int32_t *xv = x->data, *yv = y->data;
    size_t span = (size_t)(B * T), batches = (len - 1) / span;
    for (int64_t b = 0; b < B; b++) {
        size_t from = at >= 0 ? (size_t)at % batches * span + (size_t)(b * T)
                              : (size_t)sx_rng_below(r, (uint64_t)(len - (size_t)T - 1));
        for (int64_t t = 0; t < T; t++) {
            xv[b * T + t] = tok[from + (size_t)t];
            yv[b * T + t] = tok[from + (size_t)t + 1];
        }
    }
}

/* Mean -log softmax(logits)[next token] over the non-overlapping windows of tok[0, len). */
static double evaluate(sx_nn_model *m, const int32_t *tok, size_t len, sx_tensor *x,
                       sx_tensor *logits)
{
    int64_t B = x->shape[0], T = x->shape[1], V = logits->shape[2];
    long windows = (long)((len - 1) / (size_t)T), count = 0;
    double sum = 0;
    int32_t *xv = x->data;
    for (long w0 = 0; w0 < windows; w0 += B) {
        int64_t nb = windows - w0 < B ? windows - w0 : B;
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++)
                xv[b * T + t] = tok[(size_t)(w0 + (b < nb ? b : 0)) * (size_t)T + (size_t)t];
        CHECK(sx_nn_model_predict(m, x, logits));
        for (int64_t b = 0; b < nb; b++)
            for (int64_t t = 0; t < T; t++) {
                const float *z = (const float *)logits->data + (b * T + t) * V;
                double mx = (double)z[0], s = 0;
                for (int64_t v = 1; v < V; v++)
                    mx = fmax(mx, (double)z[v]);
                for (int64_t v = 0; v < V; v++)
                    s += exp((double)z[v] - mx);
                int32_t next = tok[(size_t)(w0 + b) * (size_t)T + (size_t)t + 1];
                sum += mx + log(s) - (double)z[next];
                count++;
            }
    }
    return count > 0 ? sum / (double)count : (double)NAN;
}

/* n tokens generated after `prompt` by a generator (key/value cache: one position per step, the
 * prefix never run again), sampled at --temperature from the --top-k and --top-p candidates,
 * seeded by --seed. Its context holds the position table's rows; when it is full, the next chunk
 * starts again from the last half of the text as its prompt. Printed as bytes for a text, as ids
 * otherwise. */
static void generate(sx_nn_net *net, const int32_t *prompt, size_t len, long n, const options *o)
{
    sx_nn_generator *gen = NULL;
    CHECK(sx_nn_generator_new(net, NULL, &gen));
    const size_t ctx = (size_t)sx_nn_generator_max_len(gen);
    int32_t *text = malloc((len + (size_t)n) * sizeof *text);
    if (text == NULL)
        DIE("out of memory");
    memcpy(text, prompt, len * sizeof *text);
    sx_nn_sampling s = sx_nn_sampling_default();
    s.temperature = o->temperature;
    s.top_k = o->top_k;
    s.top_p = o->top_p;
    s.seed = (uint64_t)o->seed;
    size_t have = len;
    for (long left = n; left > 0; s.seed++) {
        size_t keep = have < (ctx + 1) / 2 ? have : (ctx + 1) / 2;
        long chunk = left < (long)(ctx - keep) ? left : (long)(ctx - keep);
        CHECK(sx_nn_generate(gen, text + have - keep, (int64_t)keep, chunk, &s, text + have));
        have += (size_t)chunk;
        left -= chunk;
    }
    printf("sample:\n");
    for (size_t i = 0; i < have; i++)
        if (o->tokens == NULL)
            putchar(text[i]);
        else
            printf("%d ", text[i]);
    printf("\n-- end of sample\n");
    free(text);
    sx_nn_generator_free(gen);
}

/* ---------------------------------------------------------------- training */

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    options o = parse(argc, argv);
    sx_ds_tensors *init = o.init != NULL ? read_init(&o) : NULL;
    size_t len = 0;
    int32_t *tok = read_tokens(&o, &len);
    const int64_t T = o.seq, B = o.batch, V = o.vocab;
    size_t n_val = o.bench ? 0 : len / 20, n_train = len - n_val;
    if ((!o.bench && n_val < 2 * (size_t)(T + 1)) || n_train < (size_t)(T + 1) * (o.bench ? 1 : 10))
        DIE("%s: %zu tokens, too few for windows of %lld", o.tokens ? o.tokens : o.text, len,
            (long long)T + 1);
    sx_nn_net *net = gpt(&o);
    if (init != NULL)
        load_set(net, init, o.layers);
    sx_ds_tensors_free(init);
    if (o.save_init != NULL)
        save_init(net, &o, o.save_init_kind, o.save_init);
    printf("data: %s, %zu tokens (%zu training, %zu validation)\n", o.tokens ? o.tokens : o.text,
           len, n_train, n_val);
    printf("model: %ld layers, %ld channels, %ld heads, %lld of %ld positions, vocabulary %lld, "
           "%lld parameters\n",
           o.layers, o.dim, o.heads, (long long)T, o.max_len, (long long)V,
           (long long)sx_nn_net_param_count(net));
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim = sx_optim_params_default(SX_OPTIM_ADAMW);
    p.optim.lr = o.lr;
    p.optim.weight_decay = o.wd;
    p.clip_norm = o.clip;
    p.sparse_targets = true; /* y holds the next tokens, not one-hot rows */
    if (!o.bench) { /* a short warmup, then cosine decay to a tenth (a benchmark: constant) */
        p.schedule = sx_nn_schedule_default(SX_SCHED_COSINE);
        p.schedule.warmup_steps = o.steps / 20;
        p.schedule.total_steps = o.steps;
        p.schedule.min_lr = o.lr / 10;
    }
    p.verbose = 0;
    sx_nn_model *train = NULL, *infer = NULL;
    CHECK(sx_nn_compile_train(net, &p, B, &train));
    if (o.profile)
        sx_cg_profile_enable(sx_nn_model_graph(train), true);
    if (!o.bench)
        CHECK(sx_nn_compile_infer(net, B, &infer)); /* reads the weights training updates */
    int64_t xs[2] = {B, T}, zs[3] = {B, T, V};
    sx_tensor *x = NULL, *y = NULL, *logits = NULL;
    CHECK(sx_tensor_new(SX_I32, 2, xs, &x)); /* token ids and next tokens as integers */
    CHECK(sx_tensor_new(SX_I32, 2, xs, &y));
    if (!o.bench)
        CHECK(sx_tensor_new(SX_F32, 3, zs, &logits));
    double *ms = malloc((size_t)o.steps * sizeof *ms);
    if (ms == NULL)
        DIE("out of memory");
    sx_rng r;
    sx_rng_seed(&r, (uint64_t)o.seed);
    double sum = 0, seconds = 0, train_loss = (double)NAN, val_loss = (double)NAN;
    long since = 0;
    for (long step = 1; step <= o.steps; step++) {
        fill_batch(tok, n_train, o.bench ? step - 1 : -1, &r, x, y);
        double loss = 0, t0 = sx_seconds();
        CHECK(sx_nn_model_step(train, x, y, o.lr, step, &loss, NULL));
        ms[step - 1] = (sx_seconds() - t0) * 1e3;
        seconds += ms[step - 1] / 1e3;
        sum += loss;
        since++;
        if (o.bench)
            printf("step %ld loss %.7f ms %.1f\n", step, loss, ms[step - 1]);
        if (!o.bench &&
            (step % (o.eval_every > 0 ? o.eval_every : o.steps) == 0 || step == o.steps)) {
            train_loss = sum / (double)since;
            val_loss = evaluate(infer, tok + n_train, n_val, x, logits);
            printf("step %ld: train_loss=%.4f val_loss=%.4f tokens/s=%.0f\n", step, train_loss,
                   val_loss, (double)(step * B * T) / seconds);
            fflush(stdout);
            sum = 0;
            since = 0;
        }
    }
    if (o.bench)
        train_loss = sum / (double)since;
    if (o.sample > 0 && !o.bench) {
        if (o.tokens == NULL)
            generate(net, (const int32_t[]){'Q', ':', ' '}, 3, o.sample, &o);
        else
            generate(net, tok + n_train, 1, o.sample, &o);
    }
    if (o.save != NULL) {
        CHECK(sx_nn_save(net, o.save));
        printf("saved %s\n", o.save);
    }
    if (o.profile)
        sx_cg_profile_print(sx_nn_model_graph(train), 25, stderr);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    qsort(ms + 1, (size_t)o.steps - 1, sizeof *ms, by_value); /* the first step warms up */
    printf("result: steps=%ld train_loss=%.4f val_loss=%.4f tokens_per_second=%.0f params=%lld "
           "strix_ms=%.1f peak_rss_mb=%.0f\n",
           o.steps, train_loss, val_loss, (double)(o.steps * B * T) / seconds,
           (long long)sx_nn_net_param_count(net), o.steps > 1 ? ms[1 + (o.steps - 2) / 2] : ms[0],
           (double)ru.ru_maxrss / 1024);
    int rc = o.check > 0 && !(val_loss < o.check) ? 1 : 0;
    if (rc)
        fprintf(stderr, "gpt_train: check failed: val_loss %.4f is not below %.4f\n", val_loss,
                o.check);
    free(ms);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_tensor_free(logits);
    sx_nn_model_free(infer);
    sx_nn_model_free(train);
    sx_nn_net_free(net);
    free(tok);
    return rc;
}
