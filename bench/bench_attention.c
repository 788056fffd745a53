/* bench_attention.c: one multi-head self-attention layer, forward and backward, with each head's
 * attention as the plain composition (scores by batched matmul, a constant -inf causal mask,
 * softmax, matmul with V: what the attention layer built before the fused op) or as the fused
 * attention op. The rest of the layer is the same in both: Q, K, V and output projections with
 * biases, heads split and merged by reshape and permute. The graph computes sum(y * w) and its
 * gradients with respect to x and the eight parameters, optimised and frozen (planned into one
 * arena) as a training step is.
 *   bench_attention [composed|fused] [B T C H] [--causal 0|1] [--steps N] [--threads N]
 * prints the median step time over N steps (after one warm-up), the planned arena and the
 * process's peak RSS; run each variant in its own process to compare peaks. */
#include "bench_util.h"

#include <sx_autodiff.h>
#include <sx_cgraph.h>

#include <math.h>
#include <string.h>
#include <sys/resource.h>

static sx_cg_node *rand_leaf(sx_cg_graph *g, sx_rng *r, int rank, const int64_t *shape,
                             double scale, bool param, const char *name)
{
    sx_tensor *t = NULL;
    CHECK(sx_tensor_new(SX_F32, rank, shape, &t));
    for (int64_t i = 0; i < t->size; i++)
        sx_tensor_set(t, i, scale * (2 * sx_rng_uniform(r) - 1));
    sx_cg_node *n = param ? sx_cg_param(g, name, t) : sx_cg_const(g, t);
    sx_tensor_free(t);
    return n;
}

/* (B T, C) -> (B H, T, dh) and back */
static sx_cg_node *split(sx_cg_graph *g, sx_cg_node *x, int64_t B, int64_t T, int64_t H, int64_t dh)
{
    int64_t s4[4] = {B, T, H, dh}, s3[3] = {B * H, T, dh};
    int perm[4] = {0, 2, 1, 3};
    return sx_cg_reshape(g, sx_cg_permute(g, sx_cg_reshape(g, x, 4, s4), perm), 3, s3);
}

static sx_cg_node *merge(sx_cg_graph *g, sx_cg_node *o, int64_t B, int64_t T, int64_t H, int64_t dh)
{
    int64_t s4[4] = {B, H, T, dh}, s2[2] = {B * T, H * dh};
    int perm[4] = {0, 2, 1, 3};
    return sx_cg_reshape(g, sx_cg_permute(g, sx_cg_reshape(g, o, 4, s4), perm), 2, s2);
}

int main(int argc, char **argv)
{
    bool fused = argc > 1 && strcmp(argv[1], "fused") == 0, causal = true;
    int64_t B = 4, T = 256, C = 384, H = 6;
    int steps = 10, threads = 2, pos = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--causal") == 0 && i + 1 < argc)
            causal = atoi(argv[++i]) != 0;
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (pos < 4) {
            int64_t v = atoll(argv[i]);
            *(pos == 0 ? &B : pos == 1 ? &T : pos == 2 ? &C : &H) = v;
            pos++;
        }
    }
    const int64_t dh = C / H;
    CHECK(sx_threads_set(threads));
    sx_cg_graph *g = NULL;
    CHECK(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g));
    sx_rng r;
    sx_rng_seed(&r, 1);
    int64_t xs[2] = {B * T, C}, ws[2] = {C, C}, bs[1] = {C};
    sx_cg_node *x = rand_leaf(g, &r, 2, xs, 1, true, "x"), *p[8], *qkv[3];
    const double wscale = 1 / sqrt((double)C);
    for (int i = 0; i < 4; i++) {
        char name[8] = {'w', (char)('0' + i), 0}, bname[8] = {'b', (char)('0' + i), 0};
        p[i] = rand_leaf(g, &r, 2, ws, wscale, true, name);
        p[4 + i] = rand_leaf(g, &r, 1, bs, 0.1, true, bname);
    }
    for (int i = 0; i < 3; i++)
        qkv[i] = split(g, sx_cg_gemm(g, x, p[i], false, false, 1, p[4 + i], 1), B, T, H, dh);
    const double scale = 1 / sqrt((double)dh);
    sx_cg_node *o;
    if (fused) {
        o = sx_cg_attention_o(g, sx_cg_attention(g, qkv[0], qkv[1], qkv[2], scale, causal));
    } else {
        sx_cg_node *s = sx_cg_gemm(g, qkv[0], qkv[1], false, true, scale, NULL, 0);
        if (causal) {
            int64_t ms[2] = {T, T};
            sx_tensor *m = NULL;
            CHECK(sx_tensor_new(SX_F32, 2, ms, &m));
            for (int64_t i = 0; i < T; i++)
                for (int64_t j = 0; j < T; j++)
                    sx_tensor_set(m, i * T + j, j > i ? -INFINITY : 0);
            s = sx_cg_add(g, s, sx_cg_const(g, m));
            sx_tensor_free(m);
        }
        o = sx_cg_matmul(g, sx_cg_softmax(g, s, -1), qkv[2], false, false);
    }
    sx_cg_node *y = sx_cg_gemm(g, merge(g, o, B, T, H, dh), p[3], false, false, 1, p[7], 1);
    sx_cg_node *loss = sx_cg_sum(g, sx_cg_mul(g, y, rand_leaf(g, &r, 2, xs, 1, false, "w")),
                                 SX_AXIS(0) | SX_AXIS(1), false);
    sx_cg_node *wrt[9] = {x, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]}, *out[10];
    CHECK(sx_ad_grad(g, loss, 9, wrt, out + 1));
    out[0] = loss;
    CHECK(sx_cg_graph_status(g));
    CHECK(sx_cg_optimise(g, 10, out, NULL, NULL));
    sx_cg_plan_report rep;
    CHECK(sx_cg_freeze_ex(g, 10, out, NULL, &rep));
    double *t = calloc((size_t)steps + 1, sizeof *t);
    if (t == NULL)
        return 1;
    CHECK(sx_cg_eval(g, 10, out)); /* warm-up */
    for (int s = 0; s < steps; s++) {
        for (int i = 1; i < 9; i++)
            CHECK(sx_cg_invalidate(g, wrt[i]));
        double t0 = now();
        CHECK(sx_cg_eval(g, 10, out));
        t[s] = now() - t0;
    }
    for (int i = 1; i < steps; i++) /* insertion sort: the median */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double tmp = t[j];
            t[j] = t[j - 1];
            t[j - 1] = tmp;
        }
    if (getenv("SX_BENCH_PROFILE") != NULL) {
        sx_cg_profile_enable(g, true);
        for (int i = 1; i < 9; i++)
            CHECK(sx_cg_invalidate(g, wrt[i]));
        CHECK(sx_cg_eval(g, 10, out));
        sx_cg_profile_print(g, 15, stdout);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("result: variant=%s B=%lld T=%lld C=%lld H=%lld causal=%d threads=%d ms=%.2f "
           "arena_mb=%.1f peak_rss_mb=%.1f loss=%.6g\n",
           fused ? "fused" : "composed", (long long)B, (long long)T, (long long)C, (long long)H,
           causal, threads, 1e3 * t[steps / 2],
           (double)(rep.arena_bytes + rep.scratch_bytes + rep.workspace_bytes) / 1048576.0,
           (double)ru.ru_maxrss / 1024.0, sx_tensor_get(sx_cg_value(loss), 0));
    free(t);
    sx_cg_graph_free(g);
    return 0;
}
