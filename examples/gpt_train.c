/* gpt_train: a GPT (GPT-2's layout: token and position embeddings, pre-norm blocks of causal
 * multi-head self-attention and a GELU MLP with residual connections, a final layer norm and an
 * output layer tied to the token embedding) trained on a text, one byte per token, with AdamW and
 * class-index targets; prints the loss and tokens/s, the validation loss (nats per byte) and a
 * sample of generated text, and saves the model.
 *
 *   gpt_train [--text FILE|DIR] [--layers L] [--dim C] [--heads H] [--seq T] [--batch B]
 *             [--steps S] [--lr X] [--eval-every N] [--sample N] [--temperature X] [--top-k K]
 *             [--seed S] [--save PATH] [--limit BYTES] [--check LOSS]
 *
 * --text: a file, or a folder whose files are read one after another (default: Debian's
 * `fortunes` texts, /usr/share/games/fortunes, without its .dat and .u8 files). The last 5% is
 * the validation part. --save: the trained model as a strix model file (`strix predict` and
 * sx_nn_load read it). --check: exit 1 unless the last validation loss is below LOSS (ctest).
 * Ends with:
 *   result: steps=S train_loss=L val_loss=V tokens_per_second=R params=P */
#include <sx_nn.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct options {
    const char *text, *save;
    long layers, dim, heads, seq, batch, steps, eval_every, sample, top_k, seed, limit;
    double lr, temperature, check;
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

/* tokens (T) -> logits (T, 256) */
static sx_nn_net *gpt(const options *o)
{
    sx_nn_net *net = NULL;
    CHECK(sx_nn_net_new("gpt", SX_F32, (uint64_t)o->seed, &net));
    sx_nn_net_set_input_scale(net, 1); /* token ids, not pixels */
    int64_t T = o->seq, C = o->dim, V = 256;
    sx_nn_layer *x = sx_nn_input(net, 1, &T);
    sx_nn_embedding_params ep = sx_nn_embedding_params_default(V, C);
    x = named(net, sx_nn_embedding(net, x, &ep), "wte", 0);
    x = named(net, sx_nn_position_embedding_max(net, x, T), "wpe", 0);
    sx_nn_attention_params ap = sx_nn_attention_params_default((int)o->heads);
    ap.causal = true;
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
                 .batch = 16,
                 .steps = 1500,
                 .eval_every = 250,
                 .sample = 300,
                 .top_k = 0,
                 .seed = 1,
                 .lr = 1e-3,
                 .temperature = 0.8};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            DIE("%s wants a value", a);
        i++;
        if (strcmp(a, "--text") == 0)
            o.text = v;
        else if (strcmp(a, "--save") == 0)
            o.save = v;
        else if (strcmp(a, "--layers") == 0)
            o.layers = num(a, v);
        else if (strcmp(a, "--dim") == 0)
            o.dim = num(a, v);
        else if (strcmp(a, "--heads") == 0)
            o.heads = num(a, v);
        else if (strcmp(a, "--seq") == 0)
            o.seq = num(a, v);
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
        else if (strcmp(a, "--temperature") == 0)
            o.temperature = real(a, v);
        else if (strcmp(a, "--check") == 0)
            o.check = real(a, v);
        else
            DIE("unknown option %s", a);
    }
    if (o.layers < 1 || o.dim < 1 || o.heads < 1 || o.dim % o.heads != 0 || o.seq < 2 ||
        o.batch < 1 || o.steps < 1 || !(o.lr > 0) || o.top_k > 256)
        DIE("want --layers, --dim, --heads, --batch, --steps >= 1, --heads dividing --dim, "
            "--seq >= 2, --lr > 0, --top-k <= 256");
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

/* A file, or the files of a folder in name order (without .dat and .u8: fortune's indexes and
 * links). */
static unsigned char *read_text(const char *path, long limit, size_t *len)
{
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0;
    DIR *d = opendir(path);
    if (d == NULL) {
        append_file(path, &buf, &n, &cap);
    } else {
        char *names[1024];
        int k = 0;
        for (struct dirent *e; (e = readdir(d)) != NULL && k < 1024;) {
            const char *dot = strrchr(e->d_name, '.');
            if (e->d_name[0] == '.' || (dot && (!strcmp(dot, ".dat") || !strcmp(dot, ".u8"))))
                continue;
            if ((names[k] = malloc(strlen(path) + strlen(e->d_name) + 2)) == NULL)
                DIE("out of memory");
            sprintf(names[k++], "%s/%s", path, e->d_name);
        }
        closedir(d);
        qsort(names, (size_t)k, sizeof *names, by_name);
        for (int i = 0; i < k; i++) {
            append_file(names[i], &buf, &n, &cap);
            free(names[i]);
        }
    }
    *len = limit > 0 && (size_t)limit < n ? (size_t)limit : n;
    return buf;
}

/* Windows of T + 1 bytes at random offsets of text[0, len): inputs (B, T) and the next bytes
 * (B, T) as class indices. */
static void fill_batch(const unsigned char *text, size_t len, sx_rng *r, sx_tensor *x, sx_tensor *y)
{
    int64_t B = x->shape[0], T = x->shape[1];
    float *xv = x->data, *yv = y->data;
    for (int64_t b = 0; b < B; b++) {
        size_t at = (size_t)sx_rng_below(r, (uint64_t)(len - (size_t)T - 1));
        for (int64_t t = 0; t < T; t++) {
            xv[b * T + t] = text[at + (size_t)t];
            yv[b * T + t] = text[at + (size_t)t + 1];
        }
    }
}

/* Mean -log softmax(logits)[next byte] over the non-overlapping windows of text[0, len). */
static double evaluate(sx_nn_model *m, const unsigned char *text, size_t len, sx_tensor *x,
                       sx_tensor *logits)
{
    int64_t B = x->shape[0], T = x->shape[1];
    long windows = (long)((len - 1) / (size_t)T), count = 0;
    double sum = 0;
    float *xv = x->data;
    for (long w0 = 0; w0 < windows; w0 += B) {
        int64_t nb = windows - w0 < B ? windows - w0 : B;
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++)
                xv[b * T + t] = text[(size_t)(w0 + (b < nb ? b : 0)) * (size_t)T + (size_t)t];
        CHECK(sx_nn_model_predict(m, x, logits));
        for (int64_t b = 0; b < nb; b++)
            for (int64_t t = 0; t < T; t++) {
                const float *z = (const float *)logits->data + (b * T + t) * 256;
                double mx = (double)z[0], s = 0;
                for (int v = 1; v < 256; v++)
                    mx = fmax(mx, (double)z[v]);
                for (int v = 0; v < 256; v++)
                    s += exp((double)z[v] - mx);
                int next = text[(size_t)(w0 + b) * (size_t)T + (size_t)t + 1];
                sum += mx + log(s) - (double)z[next];
                count++;
            }
    }
    return count > 0 ? sum / (double)count : (double)NAN;
}

/* A byte from logits z (256): softmax(z / temperature) over the top_k largest (0: all); the
 * most likely byte at temperature 0. */
static int sample_byte(const float *z, double temperature, long top_k, sx_rng *r)
{
    int best = 0;
    for (int v = 1; v < 256; v++)
        best = z[v] > z[best] ? v : best;
    if (temperature == 0)
        return best;
    double cut = -INFINITY; /* the k-th largest logit */
    if (top_k > 0 && top_k < 256) {
        float sorted[256];
        memcpy(sorted, z, sizeof sorted);
        for (long i = 0; i < top_k; i++) /* partial selection: the k largest first */
            for (int j = (int)i + 1; j < 256; j++)
                if (sorted[j] > sorted[i]) {
                    float t = sorted[i];
                    sorted[i] = sorted[j];
                    sorted[j] = t;
                }
        cut = (double)sorted[top_k - 1];
    }
    double p[256], s = 0;
    for (int v = 0; v < 256; v++)
        s += p[v] = (double)z[v] >= cut ? exp((double)(z[v] - z[best]) / temperature) : 0;
    double u = sx_rng_uniform(r) * s;
    for (int v = 0; v < 256; v++)
        if ((u -= p[v]) < 0)
            return v;
    return best;
}

/* n bytes generated after `prompt`: the model runs on the last T bytes; a shorter context sits
 * at the start of the window (causal attention: what follows it changes nothing) and the next
 * byte is read at its last position. */
static void generate(sx_nn_model *m, const char *prompt, long n, const options *o, sx_rng *r)
{
    int64_t T = o->seq, xs[2] = {1, T}, zs[3] = {1, T, 256};
    sx_tensor *x = NULL, *z = NULL;
    CHECK(sx_tensor_zeros(SX_F32, 2, xs, &x));
    CHECK(sx_tensor_new(SX_F32, 3, zs, &z));
    size_t len = strlen(prompt), cap = len + (size_t)n + 1;
    unsigned char *ctx = malloc(cap);
    if (ctx == NULL)
        DIE("out of memory");
    memcpy(ctx, prompt, len);
    for (long k = 0; k < n; k++) {
        size_t from = len > (size_t)T ? len - (size_t)T : 0, used = len - from;
        for (size_t t = 0; t < (size_t)T; t++)
            ((float *)x->data)[t] = t < used ? ctx[from + t] : 0;
        CHECK(sx_nn_model_predict(m, x, z));
        ctx[len++] = (unsigned char)sample_byte((const float *)z->data + (used - 1) * 256,
                                                o->temperature, o->top_k, r);
    }
    printf("sample:\n%.*s\n-- end of sample\n", (int)len, (const char *)ctx);
    free(ctx);
    sx_tensor_free(x);
    sx_tensor_free(z);
}

/* ---------------------------------------------------------------- training */

int main(int argc, char **argv)
{
    options o = parse(argc, argv);
    size_t len = 0;
    unsigned char *text = read_text(o.text, o.limit, &len);
    const int64_t T = o.seq, B = o.batch;
    size_t n_val = len / 20, n_train = len - n_val;
    if (n_val < 2 * (size_t)(T + 1) || n_train < 10 * (size_t)(T + 1))
        DIE("%s: %zu bytes, too short for windows of %lld bytes", o.text, len, (long long)T + 1);
    sx_nn_net *net = gpt(&o);
    printf("text: %s, %zu bytes (%zu training, %zu validation)\n", o.text, len, n_train, n_val);
    printf("model: %ld layers, %ld channels, %ld heads, %lld positions, %lld parameters\n",
           o.layers, o.dim, o.heads, (long long)T, (long long)sx_nn_net_param_count(net));
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim = sx_optim_params_default(SX_OPTIM_ADAMW);
    p.optim.lr = o.lr;
    p.clip_norm = 1;
    p.sparse_targets = true; /* y holds the next bytes, not one-hot rows */
    p.verbose = 0;
    sx_nn_model *train = NULL, *infer = NULL;
    CHECK(sx_nn_compile_train(net, &p, B, &train));
    CHECK(sx_nn_compile_infer(net, B, &infer)); /* reads the weights training updates */
    int64_t xs[2] = {B, T}, zs[3] = {B, T, 256};
    sx_tensor *x = NULL, *y = NULL, *logits = NULL;
    CHECK(sx_tensor_new(SX_F32, 2, xs, &x));
    CHECK(sx_tensor_new(SX_F32, 2, xs, &y));
    CHECK(sx_tensor_new(SX_F32, 3, zs, &logits));
    sx_rng r;
    sx_rng_seed(&r, (uint64_t)o.seed);
    double sum = 0, seconds = 0, train_loss = (double)NAN, val_loss = (double)NAN;
    long since = 0;
    for (long step = 1; step <= o.steps; step++) {
        fill_batch(text, n_train, &r, x, y);
        double loss = 0, t0 = sx_seconds();
        CHECK(sx_nn_model_step(train, x, y, o.lr, step, &loss, NULL));
        seconds += sx_seconds() - t0;
        sum += loss;
        since++;
        if (step % (o.eval_every > 0 ? o.eval_every : o.steps) == 0 || step == o.steps) {
            train_loss = sum / (double)since;
            val_loss = evaluate(infer, text + n_train, n_val, x, logits);
            printf("step %ld: train_loss=%.4f val_loss=%.4f tokens/s=%.0f\n", step, train_loss,
                   val_loss, (double)(step * B * T) / seconds);
            fflush(stdout);
            sum = 0;
            since = 0;
        }
    }
    if (o.sample > 0) {
        sx_nn_model *one = NULL;
        CHECK(sx_nn_compile_infer(net, 1, &one));
        generate(one, "Q: ", o.sample, &o, &r);
        sx_nn_model_free(one);
    }
    if (o.save != NULL) {
        CHECK(sx_nn_save(net, o.save));
        printf("saved %s\n", o.save);
    }
    printf("result: steps=%ld train_loss=%.4f val_loss=%.4f tokens_per_second=%.0f params=%lld\n",
           o.steps, train_loss, val_loss, (double)(o.steps * B * T) / seconds,
           (long long)sx_nn_net_param_count(net));
    int rc = o.check > 0 && !(val_loss < o.check) ? 1 : 0;
    if (rc)
        fprintf(stderr, "gpt_train: check failed: val_loss %.4f is not below %.4f\n", val_loss,
                o.check);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_tensor_free(logits);
    sx_nn_model_free(infer);
    sx_nn_model_free(train);
    sx_nn_net_free(net);
    free(text);
    return rc;
}
