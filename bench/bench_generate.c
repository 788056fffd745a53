/* bench_generate: the cost of a generation step against its position. A GPT (token and
 * position embeddings, L pre-norm blocks of causal attention and a GELU MLP, a tied head) of
 * width C and a context of max_len positions generates one sequence greedily from position 0 to
 * max_len - 1; the wall time of the steps is printed per window of positions. With a key/value
 * cache whose attention reads only the filled positions, early steps are cheaper than late ones
 * (the attention part grows with the position); a step that attends over the whole context
 * costs the same at every position.
 *     bench_generate [--layers L] [--dim C] [--heads H] [--vocab V] [--max-len N]
 *                    [--windows W] [--threads T]
 * Prints one line per window (positions, ms per step) and ends with
 *     result: max_len=N first_ms=A last_ms=B ratio=B/A */
#include <sx_nn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static sx_nn_net *gpt(int layers, int64_t dim, int heads, int64_t vocab, int64_t max_len)
{
    sx_nn_net *net = NULL;
    if (sx_nn_net_new("gpt", SX_F32, 5, &net) != SX_OK)
        return NULL;
    int64_t in[1] = {max_len};
    sx_nn_layer *x = sx_nn_input_ids(net, 1, in);
    sx_nn_embedding_params ep = sx_nn_embedding_params_default(vocab, dim);
    x = sx_nn_embedding(net, x, &ep);
    sx_nn_layer *wte = x;
    x = sx_nn_position_embedding_max(net, x, max_len);
    sx_nn_attention_params ap = sx_nn_attention_params_default(heads);
    ap.causal = true;
    ap.fused_qkv = true;
    for (int i = 0; i < layers; i++) {
        sx_nn_layer *h = sx_nn_attention(net, sx_nn_layer_norm(net, x, NULL), &ap);
        x = sx_nn_add(net, 2, (sx_nn_layer *[]){x, h});
        h = sx_nn_linear(net, sx_nn_layer_norm(net, x, NULL), 4 * dim, SX_ACT_GELU_TANH);
        h = sx_nn_linear(net, h, dim, SX_ACT_NONE);
        x = sx_nn_add(net, 2, (sx_nn_layer *[]){x, h});
    }
    x = sx_nn_layer_norm(net, x, NULL);
    sx_nn_layer *head = sx_nn_linear_nobias(net, x, vocab, SX_ACT_NONE);
    if (sx_nn_net_status(net) != SX_OK || sx_nn_layer_rename(net, wte, "wte") != SX_OK ||
        sx_nn_layer_rename(net, head, "head") != SX_OK ||
        sx_nn_share(net, "head.weight", "wte.weight", true) != SX_OK) {
        sx_nn_net_free(net);
        return NULL;
    }
    return net;
}

static int64_t arg(int argc, char **argv, const char *name, int64_t def)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return atoll(argv[i + 1]);
    return def;
}

int main(int argc, char **argv)
{
    const int layers = (int)arg(argc, argv, "--layers", 4),
              heads = (int)arg(argc, argv, "--heads", 6);
    const int64_t dim = arg(argc, argv, "--dim", 384), vocab = arg(argc, argv, "--vocab", 256);
    const int64_t max_len = arg(argc, argv, "--max-len", 1024);
    const int64_t windows = arg(argc, argv, "--windows", 8);
    if (sx_threads_set((int)arg(argc, argv, "--threads", 2)) != SX_OK || max_len < windows ||
        windows < 1) {
        fprintf(stderr, "bench_generate: bad arguments\n");
        return 2;
    }
    sx_nn_net *net = gpt(layers, dim, heads, vocab, max_len);
    sx_nn_generator *gen = NULL;
    if (net == NULL || sx_nn_generator_new(net, NULL, &gen) != SX_OK) {
        fprintf(stderr, "bench_generate: %s\n", sx_last_error());
        return 1;
    }
    printf("GPT L%d C%lld H%d V%lld, context %lld, %d threads; ms per step by position\n", layers,
           (long long)dim, heads, (long long)vocab, (long long)max_len, sx_threads_get());
    const int64_t per = max_len / windows;
    double first = 0, last = 0;
    int32_t tok = 1;
    for (int64_t w = 0; w < windows; w++) {
        double t0 = now_ms();
        for (int64_t p = 0; p < per; p++) {
            if (sx_nn_generator_step(gen, &tok, NULL) != SX_OK) {
                fprintf(stderr, "bench_generate: %s\n", sx_last_error());
                return 1;
            }
            tok = (int32_t)((tok * 7 + 3) % vocab);
        }
        const double ms = (now_ms() - t0) / (double)per;
        printf("positions %5lld..%5lld  %8.3f ms\n", (long long)(w * per),
               (long long)((w + 1) * per - 1), ms);
        if (w == 0)
            first = ms;
        last = ms;
    }
    printf("result: max_len=%lld first_ms=%.3f last_ms=%.3f ratio=%.2f\n", (long long)max_len,
           first, last, last / first);
    sx_nn_generator_free(gen);
    sx_nn_net_free(net);
    return 0;
}
