/* char_lm: a character-level language model trained on a text file: an embedding, a stack of
 * LSTM (or GRU) layers over windows of T characters and a softmax layer at every step, which
 * learns to predict each next character; or (--model transformer) one small transformer block
 * (embedding + learned position embedding, causal multi-head self-attention, an MLP with GELU,
 * residual connections). The text is split into training (the first 90%) and validation (the
 * rest) parts; every epoch prints the mean training loss, the validation loss (nats per
 * character, on non-overlapping windows) and a sample generated from the model.
 *
 *   char_lm [--text FILE] [--model lstm|gru|transformer] [--epochs E] [--steps S] [--seq T]
 *           [--units H] [--layers L] [--heads K] [--batch B] [--lr X] [--limit BYTES]
 *           [--sample N] [--seed S] [--check 1]
 *
 * --text: default /usr/share/games/fortunes/computers (Debian's `fortunes` package). --limit:
 * read only the first BYTES bytes. --steps: training steps per epoch (0, the default: as many as
 * cover the training text once). The unigram entropy of the text (-sum p log p over character
 * frequencies, nats) is what a model that ignores context achieves; the model must get well
 * below it; --check 1 makes the program fail (exit 1) when the last validation loss is not below
 * it (ctest's check). Ends with:
 *   result: epochs=E train_loss=L val_loss=V tokens_per_second=R unigram_entropy=H */
#include <sx_nn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct options {
    const char *text, *model;
    long epochs, steps, seq, units, layers, heads, batch, limit, sample, seed, check;
    double lr;
} options;

#define DIE(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, "char_lm: " __VA_ARGS__);                                                  \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)
#define CHECK(expr)                                                                                \
    do {                                                                                           \
        sx_status s_ = (expr);                                                                     \
        if (s_ != SX_OK)                                                                           \
            DIE("%s: %s", #expr, sx_last_error());                                                 \
    } while (0)

static long num(const char *opt, const char *v)
{
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < 0)
        DIE("%s wants a number >= 0, not '%s'", opt, v);
    return x;
}

static options parse(int argc, char **argv)
{
    options o = {"/usr/share/games/fortunes/computers",
                 "lstm",
                 3,
                 0,
                 64,
                 128,
                 1,
                 4,
                 32,
                 0,
                 200,
                 1,
                 0,
                 0.005};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            DIE("%s needs a value", a);
        const char *v = argv[++i];
        if (strcmp(a, "--text") == 0)
            o.text = v;
        else if (strcmp(a, "--model") == 0)
            o.model = v;
        else if (strcmp(a, "--epochs") == 0)
            o.epochs = num(a, v);
        else if (strcmp(a, "--steps") == 0)
            o.steps = num(a, v);
        else if (strcmp(a, "--seq") == 0)
            o.seq = num(a, v);
        else if (strcmp(a, "--units") == 0)
            o.units = num(a, v);
        else if (strcmp(a, "--layers") == 0)
            o.layers = num(a, v);
        else if (strcmp(a, "--heads") == 0)
            o.heads = num(a, v);
        else if (strcmp(a, "--batch") == 0)
            o.batch = num(a, v);
        else if (strcmp(a, "--limit") == 0)
            o.limit = num(a, v);
        else if (strcmp(a, "--sample") == 0)
            o.sample = num(a, v);
        else if (strcmp(a, "--seed") == 0)
            o.seed = num(a, v);
        else if (strcmp(a, "--check") == 0)
            o.check = num(a, v);
        else if (strcmp(a, "--lr") == 0)
            o.lr = atof(v);
        else
            DIE("unknown option %s", a);
    }
    if (strcmp(o.model, "lstm") != 0 && strcmp(o.model, "gru") != 0 &&
        strcmp(o.model, "transformer") != 0)
        DIE("--model is lstm, gru or transformer, not '%s'", o.model);
    if (o.epochs < 1 || o.seq < 2 || o.units < 1 || o.layers < 1 || o.heads < 1 || o.batch < 1 ||
        !(o.lr > 0))
        DIE("--epochs, --units, --layers, --heads, --batch >= 1, --seq >= 2 and --lr > 0");
    return o;
}

/* The whole file (or its first `limit` bytes). */
static unsigned char *read_text(const char *path, long limit, long *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        DIE("cannot open %s (Debian's `fortunes` package installs the default)", path);
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    size_t got;
    while (buf != NULL && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (limit > 0 && n >= (size_t)limit) {
            n = (size_t)limit;
            break;
        }
        if (n == cap) {
            unsigned char *b = realloc(buf, cap *= 2);
            if (b == NULL)
                free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (buf == NULL)
        DIE("out of memory reading %s", path);
    *len = (long)n;
    return buf;
}

/* The network: token indices (T) -> next-character probabilities (T, vocab). */
static sx_nn_net *make_net(const options *o, int64_t vocab)
{
    sx_nn_net *net = NULL;
    CHECK(sx_nn_net_new("char_lm", SX_F32, (uint64_t)o->seed, &net));
    int64_t T = o->seq;
    sx_nn_layer *x = sx_nn_input_ids(net, 1, &T); /* character indices, as int32 */
    if (strcmp(o->model, "transformer") == 0) {
        /* one pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x)), and a norm
         * before the head (GPT-2's layout) */
        sx_nn_embedding_params ep = sx_nn_embedding_params_default(vocab, o->units);
        x = sx_nn_embedding(net, x, &ep);
        x = sx_nn_position_embedding(net, x);
        sx_nn_attention_params ap = sx_nn_attention_params_default((int)o->heads);
        ap.causal = true;
        sx_nn_layer *a = sx_nn_attention(net, sx_nn_layer_norm(net, x, NULL), &ap);
        x = sx_nn_add(net, 2, (sx_nn_layer *[]){x, a});
        sx_nn_layer *h =
            sx_nn_linear(net, sx_nn_layer_norm(net, x, NULL), 4 * o->units, SX_ACT_GELU);
        h = sx_nn_linear(net, h, o->units, SX_ACT_NONE);
        x = sx_nn_add(net, 2, (sx_nn_layer *[]){x, h});
        x = sx_nn_layer_norm(net, x, NULL);
    } else {
        sx_nn_embedding_params ep = sx_nn_embedding_params_default(vocab, o->units);
        x = sx_nn_embedding(net, x, &ep);
        sx_nn_rnn_params rp = sx_nn_rnn_params_default(o->units);
        rp.layers = (int)o->layers;
        rp.return_sequences = true;
        x = strcmp(o->model, "gru") == 0 ? sx_nn_gru(net, x, &rp) : sx_nn_lstm(net, x, &rp);
    }
    sx_nn_linear(net, x, vocab, SX_ACT_SOFTMAX);
    CHECK(sx_nn_net_status(net));
    return net;
}

/* Windows of T + 1 characters at random offsets of text[0, len): inputs (B, T), one-hot targets
 * (B, T, vocab) of the next characters. */
static void fill_batch(const int *tok, long len, int64_t T, int64_t vocab, sx_rng *r, sx_tensor *x,
                       sx_tensor *y)
{
    int64_t B = x->shape[0];
    int32_t *xv = x->data;
    float *yv = y->data;
    memset(yv, 0, (size_t)y->size * sizeof *yv);
    for (int64_t b = 0; b < B; b++) {
        long at = (long)(sx_rng_uniform(r) * (double)(len - T - 1));
        for (int64_t t = 0; t < T; t++) {
            xv[b * T + t] = tok[at + t];
            yv[(b * T + t) * vocab + tok[at + t + 1]] = 1;
        }
    }
}

/* Mean -log p(next character) over the non-overlapping windows of tok[0, len). */
static double evaluate(sx_nn_model *m, const int *tok, long len, int64_t T, int64_t vocab,
                       sx_tensor *x, sx_tensor *p)
{
    int64_t B = x->shape[0];
    double sum = 0;
    long count = 0, windows = (len - 1) / T;
    int32_t *xv = x->data;
    for (long w0 = 0; w0 < windows; w0 += B) {
        int64_t nb = windows - w0 < B ? windows - w0 : B;
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++)
                xv[b * T + t] = tok[(w0 + (b < nb ? b : 0)) * T + t];
        CHECK(sx_nn_model_predict(m, x, p));
        const float *pv = p->data;
        for (int64_t b = 0; b < nb; b++)
            for (int64_t t = 0; t < T; t++) {
                int next = tok[(w0 + b) * T + t + 1];
                sum -= log(fmax((double)pv[(b * T + t) * vocab + next], 1e-30));
                count++;
            }
    }
    return count > 0 ? sum / (double)count : (double)NAN;
}

/* n characters generated after the T characters of `start`, sampled from the model's last
 * position (the window shifts by one each time). */
static void generate(sx_nn_model *m, const int *start, int64_t T, int64_t vocab,
                     const unsigned char *chars, long n, sx_rng *r, sx_tensor *x, sx_tensor *p)
{
    int64_t B = x->shape[0];
    int *win = malloc((size_t)T * sizeof *win);
    if (win == NULL)
        DIE("out of memory");
    memcpy(win, start, (size_t)T * sizeof *win);
    int32_t *xv = x->data;
    printf("sample: \"");
    for (long k = 0; k < n; k++) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++)
                xv[b * T + t] = win[t];
        CHECK(sx_nn_model_predict(m, x, p));
        const float *pv = (const float *)p->data + (T - 1) * vocab;
        double u = sx_rng_uniform(r), acc = 0;
        int c = (int)vocab - 1;
        for (int64_t v = 0; v < vocab; v++) {
            acc += (double)pv[v];
            if (u < acc) {
                c = (int)v;
                break;
            }
        }
        unsigned char ch = chars[c];
        if (ch == '\n')
            printf("\\n");
        else if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else
            putchar(ch >= 32 && ch < 127 ? ch : '?');
        memmove(win, win + 1, (size_t)(T - 1) * sizeof *win);
        win[T - 1] = c;
    }
    printf("\"\n");
    free(win);
}

int main(int argc, char **argv)
{
    options o = parse(argc, argv);
    long len = 0;
    unsigned char *text = read_text(o.text, o.limit, &len);
    const int64_t T = o.seq, B = o.batch;
    if (len < 10 * (T + 1))
        DIE("%s: %ld bytes, too short for windows of %lld characters", o.text, len,
            (long long)T + 1);
    /* the vocabulary: the bytes that occur, in byte order */
    long freq[256] = {0};
    for (long i = 0; i < len; i++)
        freq[text[i]]++;
    int index[256];
    unsigned char chars[256];
    int64_t vocab = 0;
    for (int c = 0; c < 256; c++)
        if (freq[c] > 0) {
            index[c] = (int)vocab;
            chars[vocab++] = (unsigned char)c;
        }
    double entropy = 0;
    for (int c = 0; c < 256; c++)
        if (freq[c] > 0) {
            double p = (double)freq[c] / (double)len;
            entropy -= p * log(p);
        }
    int *tok = malloc((size_t)len * sizeof *tok);
    if (tok == NULL)
        DIE("out of memory");
    for (long i = 0; i < len; i++)
        tok[i] = index[text[i]];
    long n_train = len * 9 / 10, n_val = len - n_train;
    if (n_val < 2 * (T + 1))
        DIE("the validation part (%ld bytes) is shorter than two windows", n_val);
    printf("text: %s, %ld characters (%ld training, %ld validation), vocabulary %lld\n", o.text,
           len, n_train, n_val, (long long)vocab);
    printf("unigram entropy: %.4f nats (%.4f bits) per character\n", entropy, entropy / log(2));

    sx_nn_net *net = make_net(&o, vocab);
    printf("model: %s, %lld parameters, windows of %lld characters, batch %lld\n", o.model,
           (long long)sx_nn_net_param_count(net), (long long)T, (long long)B);
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim.kind = SX_OPTIM_ADAM;
    p.optim.lr = o.lr;
    p.clip_norm = 5;
    sx_nn_model *train = NULL, *infer = NULL;
    CHECK(sx_nn_compile_train(net, &p, B, &train));
    sx_nn_compile_report rep = sx_nn_model_report(train);
    printf("training graph: %lld nodes traced, %lld after the optimiser, compiled in %.0f ms\n",
           (long long)rep.nodes_before, (long long)rep.nodes_after, rep.compile_seconds * 1e3);
    /* the inference graph borrows the same weights: it sees every update */
    CHECK(sx_nn_compile_infer(net, B, &infer));
    int64_t xs[2] = {B, T}, ys[3] = {B, T, vocab};
    sx_tensor *x = NULL, *y = NULL, *probs = NULL;
    CHECK(sx_tensor_new(SX_I32, 2, xs, &x));
    CHECK(sx_tensor_new(SX_F32, 3, ys, &y));
    CHECK(sx_tensor_new(SX_F32, 3, ys, &probs));
    sx_rng r;
    sx_rng_seed(&r, (uint64_t)o.seed);
    long steps = o.steps > 0 ? o.steps : (n_train + B * T - 1) / (B * T);
    double train_loss = (double)NAN, val_loss = (double)NAN, seconds = 0;
    int64_t step = 0;
    for (long e = 1; e <= o.epochs; e++) {
        double sum = 0, t0 = sx_seconds();
        for (long s = 0; s < steps; s++) {
            fill_batch(tok, n_train, T, vocab, &r, x, y);
            double loss = 0;
            CHECK(sx_nn_model_step(train, x, y, o.lr, ++step, &loss, NULL));
            sum += loss;
        }
        seconds += sx_seconds() - t0;
        train_loss = sum / (double)steps;
        val_loss = evaluate(infer, tok + n_train, n_val, T, vocab, x, probs);
        printf("epoch %ld: train_loss=%.4f val_loss=%.4f (%.0f steps, %.1f s)\n", e, train_loss,
               val_loss, (double)steps, seconds);
        if (o.sample > 0)
            generate(infer, tok + n_train, T, vocab, chars, o.sample, &r, x, probs);
        fflush(stdout);
    }
    double tps = seconds > 0 ? (double)(step * B * T) / seconds : 0;
    printf("result: epochs=%ld train_loss=%.4f val_loss=%.4f tokens_per_second=%.0f "
           "unigram_entropy=%.4f\n",
           o.epochs, train_loss, val_loss, tps, entropy);
    int rc = 0;
    if (o.check && !(val_loss < entropy)) {
        fprintf(stderr,
                "char_lm: check failed: val_loss %.4f is not below the unigram entropy "
                "%.4f\n",
                val_loss, entropy);
        rc = 1;
    }
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_tensor_free(probs);
    sx_nn_model_free(infer);
    sx_nn_model_free(train);
    sx_nn_net_free(net);
    free(tok);
    free(text);
    return rc;
}
