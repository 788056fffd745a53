/* Generation with a key/value cache: on small random GPTs (2 layers, 4 heads, vocabulary 50;
 * fused or separate QKV, a learned position table or rope, a head tied to the token table, a
 * dropout layer), the generator's logits at every step equal those of the ordinary inference
 * model run over the whole prefix (to 1e-5) and its greedy tokens are the same, for a batch of
 * two sequences; sampling: top-k 1 and a tiny top-p are greedy, draws never leave the top-k set or
 * the nucleus, frequencies follow the softmax at the temperature, a seed repeats its tokens; rope
 * against a plain double loop (and through a saved model) and central differences; the
 * documented errors. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"

enum { V = 50, C = 16, H = 4, L = 2, T = 12, P = 16 };

/* Every 1-d parameter (biases, layer-norm gamma and beta) drawn from U(-0.5, 0.5) (+1 for gamma),
 * so that each one's place matters. */
static void perturb(sx_nn_net *net, uint64_t seed)
{
    sx_rng r;
    sx_rng_seed(&r, seed);
    for (int i = 0; i < sx_nn_net_n_params(net); i++) {
        sx_nn_param_info pi;
        cr_assert_eq(sx_nn_net_param_info(net, i, &pi), SX_OK);
        if (pi.rank != 1 || pi.shared_from != NULL)
            continue;
        sx_tensor *t = sx_nn_net_param(net, pi.name);
        bool gamma = strstr(pi.name, "gamma") != NULL;
        for (int64_t j = 0; j < t->size; j++)
            sx_tensor_set(t, j, sx_rng_uniform(&r) - 0.5 + (gamma ? 1 : 0));
    }
}

/* tokens (T) -> logits (T, V): token table, a dropout, a position table of P rows (or rope in
 * the attention), L pre-norm blocks (causal attention, GELU MLP), a final norm and a head tied
 * to the token table. */
static sx_nn_net *gpt(bool fused, bool rope)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("gpt", SX_F32, 11, &net), SX_OK);
    sx_nn_net_set_input_scale(net, 1);
    int64_t in[1] = {T};
    sx_nn_layer *x = sx_nn_input(net, 1, in);
    sx_nn_embedding_params ep = sx_nn_embedding_params_default(V, C);
    x = sx_nn_embedding(net, x, &ep);
    cr_assert_eq(sx_nn_layer_rename(net, x, "wte"), SX_OK);
    x = sx_nn_dropout(net, x, 0.1);
    if (!rope)
        x = sx_nn_position_embedding_max(net, x, P);
    sx_nn_attention_params ap = sx_nn_attention_params_default(H);
    ap.causal = true;
    ap.fused_qkv = fused;
    ap.rope = rope;
    for (int i = 0; i < L; i++) {
        sx_nn_layer *h = sx_nn_layer_norm(net, x, NULL);
        h = sx_nn_attention(net, h, &ap);
        x = sx_nn_add(net, 2, (sx_nn_layer *[]){x, h});
        h = sx_nn_layer_norm(net, x, NULL);
        h = sx_nn_linear(net, h, 4 * C, SX_ACT_GELU_TANH);
        h = sx_nn_linear(net, h, C, SX_ACT_NONE);
        x = sx_nn_add(net, 2, (sx_nn_layer *[]){x, h});
    }
    x = sx_nn_layer_norm(net, x, NULL);
    sx_nn_layer *head = sx_nn_linear_nobias(net, x, V, SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_layer_rename(net, head, "head"), SX_OK);
    cr_assert_eq(sx_nn_share(net, "head.weight", "wte.weight", true), SX_OK, "%s", sx_last_error());
    perturb(net, 12);
    return net;
}

/* The logits after ctx[0..n) by the ordinary inference model (batch 1) over the whole prefix:
 * the prefix at the start of the window, the rest zeros (causal: they change nothing before),
 * row n - 1 into row (V). */
static void full_prefix(sx_nn_model *m, const int32_t *ctx, int64_t n, double *row)
{
    int64_t xs[2] = {1, T}, zs[3] = {1, T, V};
    sx_tensor *x = tu_zeros(SX_F32, 2, xs), *z = tu_zeros(SX_F32, 3, zs);
    for (int64_t t = 0; t < n; t++)
        sx_tensor_set(x, t, ctx[t]);
    cr_assert_eq(sx_nn_model_predict(m, x, z), SX_OK, "%s", sx_last_error());
    for (int64_t v = 0; v < V; v++)
        row[v] = sx_tensor_get(z, (n - 1) * V + v);
    sx_tensor_free(x);
    sx_tensor_free(z);
}

static int32_t argmax(const double *z)
{
    int32_t best = 0;
    for (int32_t v = 1; v < V; v++)
        best = z[v] > z[best] ? v : best;
    return best;
}

/* Two sequences, prompts of 3 tokens, T - 3 greedy tokens: each step's logits against the full
 * prefix's, and sx_nn_generate's tokens against the reference's greedy ones. */
static void check_cache(bool fused, bool rope)
{
    enum { B = 2, NP = 3 };
    sx_nn_net *net = gpt(fused, rope);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 1, &m), SX_OK, "%s", sx_last_error());
    sx_nn_generate_params gp = sx_nn_generate_params_default();
    gp.batch = B;
    sx_nn_generator *gen = NULL;
    cr_assert_eq(sx_nn_generator_new(net, &gp, &gen), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_generator_max_len(gen), rope ? T : P);
    cr_assert_eq(sx_nn_generator_vocab(gen), V);
    int32_t ctx[B][T] = {{7, 3, 41}, {0, 49, 22}}, prompt[B * NP], out[B * (T - NP)];
    for (int b = 0; b < B; b++)
        memcpy(prompt + b * NP, ctx[b], NP * sizeof *prompt);
    int64_t ls[2] = {B, V};
    sx_tensor *z = tu_zeros(SX_F32, 2, ls);
    double ref[V];
    double worst = 0;
    for (int64_t t = 0; t < T; t++) {
        int32_t tok[B] = {ctx[0][t], ctx[1][t]};
        cr_assert_eq(sx_nn_generator_step(gen, tok, z), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_nn_generator_pos(gen), t + 1);
        for (int b = 0; b < B; b++) {
            full_prefix(m, ctx[b], t + 1, ref);
            for (int64_t v = 0; v < V; v++) {
                double d = fabs(sx_tensor_get(z, b * V + v) - ref[v]);
                worst = fmax(worst, d);
                cr_assert_leq(d, 1e-5 * fmax(1, fabs(ref[v])),
                              "%s%s: step %lld, sequence %d, logit %lld: %.9g, full prefix %.9g",
                              fused ? "fused" : "separate", rope ? " rope" : "", (long long)t, b,
                              (long long)v, sx_tensor_get(z, b * V + v), ref[v]);
            }
            if (t + 1 < T && t + 1 >= NP)
                ctx[b][t + 1] = argmax(ref);
        }
    }
    cr_assert_gt(worst, 0, "the logits were never compared");
    cr_assert_eq(sx_nn_generate(gen, prompt, NP, T - NP, NULL, out), SX_OK, "%s", sx_last_error());
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T - NP; j++)
            cr_assert_eq(out[b * (T - NP) + j], ctx[b][NP + j], "sequence %d, token %d", b, j);
    sx_tensor_free(z);
    sx_nn_generator_free(gen);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
}

Test(nn_generate, cache_matches_the_full_prefix_separate_qkv)
{
    check_cache(false, false);
}

Test(nn_generate, cache_matches_the_full_prefix_fused_qkv)
{
    check_cache(true, false);
}

Test(nn_generate, cache_matches_the_full_prefix_with_rope)
{
    check_cache(false, true);
    check_cache(true, true);
}

/* The generator reads the weights as they are at each step (a weight changed after it was made
 * changes its logits as it changes the full model's). */
Test(nn_generate, sees_changed_weights)
{
    sx_nn_net *net = gpt(true, false);
    sx_nn_generator *gen = NULL;
    cr_assert_eq(sx_nn_generator_new(net, NULL, &gen), SX_OK, "%s", sx_last_error());
    int64_t ls[2] = {1, V};
    sx_tensor *a = tu_zeros(SX_F32, 2, ls), *b = tu_zeros(SX_F32, 2, ls);
    int32_t tok = 5;
    cr_assert_eq(sx_nn_generator_step(gen, &tok, a), SX_OK, "%s", sx_last_error());
    sx_tensor *w = sx_nn_net_param(net, "wte.weight");
    for (int64_t i = 0; i < w->size; i++)
        sx_tensor_set(w, i, sx_tensor_get(w, i) * 0.5);
    sx_nn_generator_reset(gen);
    cr_assert_eq(sx_nn_generator_step(gen, &tok, b), SX_OK, "%s", sx_last_error());
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 1, &m), SX_OK, "%s", sx_last_error());
    double ref[V];
    full_prefix(m, &tok, 1, ref);
    for (int64_t v = 0; v < V; v++)
        cr_assert_float_eq(sx_tensor_get(b, v), ref[v], 1e-5 * fmax(1, fabs(ref[v])));
    cr_assert(fabs(sx_tensor_get(a, 0) - sx_tensor_get(b, 0)) > 1e-6);
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_nn_model_free(m);
    sx_nn_generator_free(gen);
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- sampling */

static sx_tensor *random_logits(uint64_t seed, int64_t rows)
{
    sx_rng r;
    sx_rng_seed(&r, seed);
    int64_t s[2] = {rows, V};
    return tu_rand(&r, SX_F32, 2, s, -3, 3);
}

Test(nn_generate, top_k_1_and_tiny_top_p_are_greedy)
{
    enum { N = 64 };
    sx_tensor *z = random_logits(3, N);
    int32_t greedy[N], k1[N], p0[N];
    cr_assert_eq(sx_nn_sample(z, NULL, NULL, greedy), SX_OK, "%s", sx_last_error());
    sx_nn_sampling s = sx_nn_sampling_default();
    s.top_k = 1;
    sx_rng r;
    sx_rng_seed(&r, 1);
    cr_assert_eq(sx_nn_sample(z, &s, &r, k1), SX_OK, "%s", sx_last_error());
    s.top_k = 0;
    s.top_p = 1e-9;
    s.temperature = 2;
    cr_assert_eq(sx_nn_sample(z, &s, &r, p0), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < N; i++) {
        int64_t best = 0;
        for (int64_t v = 1; v < V; v++)
            best = sx_tensor_get(z, i * V + v) > sx_tensor_get(z, i * V + best) ? v : best;
        cr_assert_eq(greedy[i], best, "row %d", i);
        cr_assert_eq(k1[i], greedy[i], "row %d: top-k 1", i);
        cr_assert_eq(p0[i], greedy[i], "row %d: top-p 1e-9", i);
    }
    sx_tensor_free(z);
}

/* 4000 draws of one row with top_k 5: every draw among the 5 largest, each of them drawn. */
Test(nn_generate, top_k_never_leaves_the_top_k)
{
    sx_tensor *z = random_logits(4, 1);
    sx_nn_sampling s = sx_nn_sampling_default();
    s.top_k = 5;
    s.temperature = 3; /* flat: tokens outside would be drawn often */
    sx_rng r;
    sx_rng_seed(&r, 2);
    int count[V] = {0};
    for (int i = 0; i < 4000; i++) {
        int32_t t;
        cr_assert_eq(sx_nn_sample(z, &s, &r, &t), SX_OK, "%s", sx_last_error());
        count[t]++;
    }
    for (int v = 0; v < V; v++) {
        int above = 0;
        for (int u = 0; u < V; u++)
            above += sx_tensor_get(z, u) > sx_tensor_get(z, v);
        if (above < 5)
            cr_assert_gt(count[v], 0, "top-%d token %d never drawn", above + 1, v);
        else
            cr_assert_eq(count[v], 0, "token %d (rank %d) drawn %d times", v, above + 1, count[v]);
    }
    sx_tensor_free(z);
}

/* Probabilities 0.4, 0.3, 0.2, 0.1: at temperature 1 the draws' frequencies are those; top_p 0.65
 * keeps the first two (0.4 + 0.3 >= 0.65), drawn 4/7 and 3/7; temperature 0.5 squares the
 * probabilities (16:9:4:1 / 30). */
Test(nn_generate, frequencies_follow_the_softmax)
{
    const double p[4] = {0.4, 0.3, 0.2, 0.1};
    int64_t s4[2] = {1, 4};
    sx_tensor *z = tu_zeros(SX_F64, 2, s4);
    for (int v = 0; v < 4; v++)
        sx_tensor_set(z, v, log(p[v]) + 1.5); /* the softmax ignores the shift */
    const double want[3][4] = {
        {0.4, 0.3, 0.2, 0.1}, {4 / 7., 3 / 7., 0, 0}, {16 / 30., 9 / 30., 4 / 30., 1 / 30.}};
    const double temp[3] = {1, 1, 0.5}, top_p[3] = {1, 0.65, 1};
    for (int c = 0; c < 3; c++) {
        sx_nn_sampling s = sx_nn_sampling_default();
        s.temperature = temp[c];
        s.top_p = top_p[c];
        sx_rng r;
        sx_rng_seed(&r, 9);
        int count[4] = {0};
        enum { N = 20000 };
        for (int i = 0; i < N; i++) {
            int32_t t;
            cr_assert_eq(sx_nn_sample(z, &s, &r, &t), SX_OK, "%s", sx_last_error());
            count[t]++;
        }
        for (int v = 0; v < 4; v++) /* 4 standard deviations of a frequency over 20000 draws */
            cr_assert_leq(fabs(count[v] / (double)N - want[c][v]), 0.015,
                          "case %d token %d: %g, want %g", c, v, count[v] / (double)N, want[c][v]);
    }
    sx_tensor_free(z);
}

Test(nn_generate, a_seed_repeats_its_tokens)
{
    sx_nn_net *net = gpt(true, false);
    sx_nn_generate_params gp = sx_nn_generate_params_default();
    gp.batch = 2;
    sx_nn_generator *gen = NULL;
    cr_assert_eq(sx_nn_generator_new(net, &gp, &gen), SX_OK, "%s", sx_last_error());
    sx_nn_sampling s = sx_nn_sampling_default();
    s.temperature = 1.5;
    s.top_p = 0.95;
    s.top_k = 40;
    s.seed = 77;
    enum { NEW = 12 };
    int32_t prompt[4] = {1, 2, 3, 4}, a[2 * NEW], b[2 * NEW], c[2 * NEW];
    cr_assert_eq(sx_nn_generate(gen, prompt, 2, NEW, &s, a), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_generate(gen, prompt, 2, NEW, &s, b), SX_OK, "%s", sx_last_error());
    s.seed = 78;
    cr_assert_eq(sx_nn_generate(gen, prompt, 2, NEW, &s, c), SX_OK, "%s", sx_last_error());
    cr_assert_arr_eq(a, b, sizeof a, "the same seed gave other tokens");
    cr_assert(memcmp(a, c, sizeof a) != 0, "another seed gave the same tokens");
    for (int i = 0; i < 2 * NEW; i++)
        cr_assert(a[i] >= 0 && a[i] < V);
    sx_nn_generator_free(gen);
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- rope */

enum { RN = 2, RT = 7, RD = 12, RH = 2 };

static sx_nn_net *rope_net(bool fused)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("rope", SX_F64, 5, &net), SX_OK);
    int64_t in[2] = {RT, RD};
    sx_nn_layer *x = sx_nn_input(net, 2, in);
    sx_nn_attention_params p = sx_nn_attention_params_default(RH);
    p.causal = true;
    p.rope = true;
    p.rope_theta = 100; /* larger angles than 10000 over 7 positions */
    p.fused_qkv = fused;
    x = sx_nn_attention(net, x, &p);
    cr_assert_not_null(x, "%s", sx_last_error());
    cr_assert_eq(sx_nn_layer_rename(net, x, "att"), SX_OK);
    perturb(net, 6);
    return net;
}

/* W's column c of projection k (0 q, 1 k, 2 v, 3 out), as the layer reads it */
static double w_at(sx_nn_net *net, bool fused, int k, int64_t row, int64_t col)
{
    const char *sep[4] = {"att.query_weight", "att.key_weight", "att.value_weight",
                          "att.out_weight"};
    if (fused && k < 3)
        return sx_tensor_get(sx_nn_net_param(net, "att.qkv_weight"), row * 3 * RD + k * RD + col);
    return sx_tensor_get(sx_nn_net_param(net, fused ? "att.out_weight" : sep[k]), row * RD + col);
}

static double b_at(sx_nn_net *net, bool fused, int k, int64_t col)
{
    const char *sep[4] = {"att.query_bias", "att.key_bias", "att.value_bias", "att.out_bias"};
    if (fused && k < 3)
        return sx_tensor_get(sx_nn_net_param(net, "att.qkv_bias"), k * RD + col);
    return sx_tensor_get(sx_nn_net_param(net, fused ? "att.out_bias" : sep[k]), col);
}

/* The layer by a double loop: projections, each head's rows rotated (x'[i] = x[i] cos a -
 * x[i+h] sin a, x'[i+h] = x[i+h] cos a + x[i] sin a, a = t 100^(-2i/dh)), causal softmax, the
 * output projection. x (RN, RT, RD) -> y. */
static void rope_reference(sx_nn_net *net, bool fused, const double *x, double *y)
{
    enum { DH = RD / RH, HH = DH / 2 };
    static double pr[3][RN][RT][RD], o[RN][RT][RD];
    for (int n = 0; n < RN; n++)
        for (int t = 0; t < RT; t++)
            for (int k = 0; k < 3; k++)
                for (int c = 0; c < RD; c++) {
                    double s = b_at(net, fused, k, c);
                    for (int i = 0; i < RD; i++)
                        s += x[(n * RT + t) * RD + i] * w_at(net, fused, k, i, c);
                    pr[k][n][t][c] = s;
                }
    for (int k = 0; k < 2; k++) /* rotate q and k */
        for (int n = 0; n < RN; n++)
            for (int t = 0; t < RT; t++)
                for (int h = 0; h < RH; h++) {
                    double *r = &pr[k][n][t][h * DH], a[HH], b[HH];
                    for (int i = 0; i < HH; i++) {
                        double ang = t * pow(100, -2.0 * i / DH);
                        a[i] = r[i] * cos(ang) - r[i + HH] * sin(ang);
                        b[i] = r[i + HH] * cos(ang) + r[i] * sin(ang);
                    }
                    for (int i = 0; i < HH; i++) {
                        r[i] = a[i];
                        r[i + HH] = b[i];
                    }
                }
    for (int n = 0; n < RN; n++)
        for (int h = 0; h < RH; h++)
            for (int t = 0; t < RT; t++) {
                double s[RT], mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    s[j] = 0;
                    for (int i = 0; i < DH; i++)
                        s[j] += pr[0][n][t][h * DH + i] * pr[1][n][j][h * DH + i];
                    s[j] /= sqrt((double)DH);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= t; j++)
                    sum += s[j] = exp(s[j] - mx);
                for (int i = 0; i < DH; i++) {
                    double acc = 0;
                    for (int j = 0; j <= t; j++)
                        acc += s[j] / sum * pr[2][n][j][h * DH + i];
                    o[n][t][h * DH + i] = acc;
                }
            }
    for (int n = 0; n < RN; n++)
        for (int t = 0; t < RT; t++)
            for (int c = 0; c < RD; c++) {
                double s = b_at(net, fused, 3, c);
                for (int i = 0; i < RD; i++)
                    s += o[n][t][i] * w_at(net, fused, 3, i, c);
                y[(n * RT + t) * RD + c] = s;
            }
}

Test(nn_generate, rope_matches_a_double_loop)
{
    for (int f = 0; f < 2; f++) {
        sx_nn_net *net = rope_net(f != 0);
        int64_t xs[3] = {RN, RT, RD};
        sx_rng r;
        sx_rng_seed(&r, 3);
        sx_tensor *x = tu_rand(&r, SX_F64, 3, xs, -1, 1), *y = tu_zeros(SX_F64, 3, xs);
        cr_assert_eq(sx_nn_predict_eager(net, x, y), SX_OK, "%s", sx_last_error());
        double ref[RN * RT * RD];
        rope_reference(net, f != 0, x->data, ref);
        for (int64_t i = 0; i < y->size; i++)
            cr_assert_leq(fabs(sx_tensor_get(y, i) - ref[i]), 1e-12 * fmax(1, fabs(ref[i])),
                          "%s y[%lld] = %.15g, want %.15g", f ? "fused" : "separate", (long long)i,
                          sx_tensor_get(y, i), ref[i]);
        /* a saved model (the rope tables in its graph) predicts the same */
        char path[64];
        snprintf(path, sizeof path, "/tmp/strix_test_rope_%d.sxm", (int)getpid());
        cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
        sx_nn_model *m = NULL;
        cr_assert_eq(sx_nn_load(path, RN, &m), SX_OK, "%s", sx_last_error());
        sx_tensor *y2 = tu_zeros(SX_F64, 3, xs);
        cr_assert_eq(sx_nn_model_predict(m, x, y2), SX_OK, "%s", sx_last_error());
        for (int64_t i = 0; i < y->size; i++)
            cr_assert_float_eq(sx_tensor_get(y2, i), sx_tensor_get(y, i), 1e-12);
        unlink(path);
        sx_nn_model_free(m);
        sx_tensor_free(y2);
        sx_tensor_free(x);
        sx_tensor_free(y);
        sx_nn_net_free(net);
    }
}

/* The input gradient of sum(y * dy) through a training graph with rope against central
 * differences (f64, step 1e-6). */
Test(nn_generate, rope_gradient_matches_central_differences)
{
    sx_nn_net *net = rope_net(false);
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    nn_build b = {.g = g, .mode = NN_TRAIN};
    cr_assert_eq(sx_cg_rng_new(g, 1, &b.rng_id), SX_OK);
    sx_rng r;
    sx_rng_seed(&r, 8);
    int64_t xs[3] = {RN, RT, RD};
    sx_tensor *xv = tu_rand(&r, SX_F64, 3, xs, -1, 1), *dyv = tu_rand(&r, SX_F64, 3, xs, -1, 1);
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 3, xs), *y = NULL, *logits = NULL, *dx = NULL;
    cr_assert_eq(sx_cg_input_set(g, x, xv, SX_CG_BORROW), SX_OK);
    cr_assert_eq(nn_forward(net, &b, x, &y, &logits), SX_OK, "%s", sx_last_error());
    sx_cg_node *dy = sx_cg_const(g, dyv);
    sx_cg_node *f = sx_cg_sum(g, sx_cg_mul(g, y, dy), SX_AXES_ALL, false);
    cr_assert_eq(sx_ad_vjp(g, y, dy, 1, &x, &dx), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(g, 1, &dx), SX_OK, "%s", sx_last_error());
    sx_tensor *grad = NULL;
    cr_assert_eq(sx_tensor_clone(sx_cg_value(dx), &grad), SX_OK);
    const double h = 1e-6;
    for (int64_t i = 0; i < xv->size; i++) {
        double x0 = sx_tensor_get(xv, i), fp, fm;
        sx_tensor_set(xv, i, x0 + h);
        cr_assert_eq(sx_cg_invalidate(g, x), SX_OK);
        cr_assert_eq(sx_cg_eval(g, 1, &f), SX_OK);
        fp = sx_tensor_get(sx_cg_value(f), 0);
        sx_tensor_set(xv, i, x0 - h);
        cr_assert_eq(sx_cg_invalidate(g, x), SX_OK);
        cr_assert_eq(sx_cg_eval(g, 1, &f), SX_OK);
        fm = sx_tensor_get(sx_cg_value(f), 0);
        sx_tensor_set(xv, i, x0);
        double want = (fp - fm) / (2 * h), got = sx_tensor_get(grad, i);
        cr_assert_leq(fabs(got - want), 1e-6 * fmax(1, fabs(want)), "dx[%lld] = %.12g, want %.12g",
                      (long long)i, got, want);
    }
    sx_tensor_free(grad);
    nn_build_free(&b);
    sx_cg_graph_free(g);
    sx_tensor_free(xv);
    sx_tensor_free(dyv);
    sx_nn_net_free(net);
}

/* ---------------------------------------------------------------- errors */

static void expect_error(sx_status got, sx_status want, const char *needle)
{
    cr_assert_eq(got, want, "status %s, want %s (%s)", sx_status_str(got), sx_status_str(want),
                 sx_last_error());
    cr_assert(strstr(sx_last_error(), needle) != NULL, "'%s' not in '%s'", needle, sx_last_error());
}

Test(nn_generate, networks_it_cannot_run_are_refused)
{
    int64_t in[1] = {T};
    sx_nn_embedding_params ep = sx_nn_embedding_params_default(V, C);
    for (int c = 0; c < 3; c++) {
        sx_nn_net *net = NULL;
        cr_assert_eq(sx_nn_net_new("odd", SX_F32, 1, &net), SX_OK);
        sx_nn_layer *x = sx_nn_embedding(net, sx_nn_input(net, 1, in), &ep);
        sx_nn_attention_params ap = sx_nn_attention_params_default(H);
        ap.causal = c != 0;
        x = sx_nn_attention(net, x, &ap);
        if (c == 1) { /* a layer norm over (T, C) mixes the positions */
            sx_nn_layer_norm_params lp = sx_nn_layer_norm_params_default();
            lp.axes = 2;
            x = sx_nn_layer_norm(net, x, &lp);
        }
        if (c == 2) /* a (V) output: not logits per position */
            x = sx_nn_fully_connected(net, x, V, SX_ACT_NONE);
        else
            x = sx_nn_linear(net, x, V, SX_ACT_NONE);
        cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
        sx_nn_generator *gen = (sx_nn_generator *)1;
        sx_status s = sx_nn_generator_new(net, NULL, &gen);
        cr_assert_null(gen);
        const char *why[3] = {"attention that is not causal", "layer norm over more",
                              "want tokens (T) to logits (T, V)"};
        expect_error(s, c == 2 ? SX_E_SHAPE : SX_E_UNSUPPORTED, why[c]);
        cr_assert(strstr(sx_last_error(), "sx_nn_generator_new") != NULL);
        sx_nn_net_free(net);
    }
}

Test(nn_generate, bad_arguments_and_overflow_are_errors)
{
    sx_nn_net *net = gpt(false, false);
    sx_nn_generator *gen = NULL;
    sx_nn_generate_params gp = sx_nn_generate_params_default();
    expect_error(sx_nn_generator_new(NULL, NULL, &gen), SX_E_ARG, "sx_nn_generator_new");
    expect_error(sx_nn_generator_new(net, NULL, NULL), SX_E_ARG, "sx_nn_generator_new");
    gp.batch = 0;
    expect_error(sx_nn_generator_new(net, &gp, &gen), SX_E_ARG, "batch 0");
    gp.batch = 1;
    gp.max_len = P + 1;
    expect_error(sx_nn_generator_new(net, &gp, &gen), SX_E_ARG, "position table");
    cr_assert_null(gen);
    gp.max_len = 6;
    cr_assert_eq(sx_nn_generator_new(net, &gp, &gen), SX_OK, "%s", sx_last_error());
    int32_t prompt[3] = {1, 2, 3}, out[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    expect_error(sx_nn_generate(gen, prompt, 3, 4, NULL, out), SX_E_RANGE, "overflow");
    cr_assert_eq(out[0], -1);
    expect_error(sx_nn_generate(gen, prompt, 0, 2, NULL, out), SX_E_ARG, "prompt");
    expect_error(sx_nn_generate(gen, NULL, 3, 2, NULL, out), SX_E_ARG, "NULL");
    sx_nn_sampling s = sx_nn_sampling_default();
    s.top_p = 0;
    expect_error(sx_nn_generate(gen, prompt, 3, 2, &s, out), SX_E_ARG, "top_p");
    s = sx_nn_sampling_default();
    s.temperature = -1;
    expect_error(sx_nn_generate(gen, prompt, 3, 2, &s, out), SX_E_ARG, "temperature");
    s = sx_nn_sampling_default();
    s.top_k = -1;
    expect_error(sx_nn_generate(gen, prompt, 3, 2, &s, out), SX_E_ARG, "top_k");
    int32_t bad[3] = {1, V, 3};
    expect_error(sx_nn_generate(gen, bad, 3, 2, NULL, out), SX_E_RANGE, "prompt token 1");
    cr_assert_eq(out[0], -1);
    cr_assert_eq(sx_nn_generate(gen, prompt, 3, 3, NULL, out), SX_OK, "%s", sx_last_error());
    /* the step past the context */
    sx_nn_generator_reset(gen);
    int32_t tok = 4;
    for (int i = 0; i < 6; i++)
        cr_assert_eq(sx_nn_generator_step(gen, &tok, NULL), SX_OK, "%s", sx_last_error());
    expect_error(sx_nn_generator_step(gen, &tok, NULL), SX_E_RANGE, "context is full");
    cr_assert_eq(sx_nn_generator_pos(gen), 6);
    sx_nn_generator_reset(gen);
    tok = -1;
    expect_error(sx_nn_generator_step(gen, &tok, NULL), SX_E_RANGE, "token -1");
    tok = 1;
    int64_t ws[2] = {1, V + 1};
    sx_tensor *wrong = tu_zeros(SX_F32, 2, ws);
    expect_error(sx_nn_generator_step(gen, &tok, wrong), SX_E_SHAPE, "want (1,50)");
    cr_assert_eq(sx_nn_generator_pos(gen), 0);
    /* sampling on its own */
    sx_tensor_set(wrong, 3, NAN);
    int32_t t1;
    expect_error(sx_nn_sample(wrong, NULL, NULL, &t1), SX_E_RANGE, "row 0");
    s = sx_nn_sampling_default();
    expect_error(sx_nn_sample(wrong, &s, NULL, &t1), SX_E_ARG, "rng is NULL");
    sx_tensor_free(wrong);
    /* the network freed first lives on for the generator */
    sx_nn_net_free(net);
    cr_assert_eq(sx_nn_generate(gen, prompt, 3, 3, NULL, out), SX_OK, "%s", sx_last_error());
    sx_nn_generator_free(gen);
    cr_assert_eq(sx_nn_generator_vocab(NULL), 0);
    sx_nn_generator_free(NULL);
}

Test(nn_generate, rope_options_are_checked)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("bad", SX_F32, 1, &net), SX_OK);
    int64_t in[2] = {4, 6};
    sx_nn_layer *x = sx_nn_input(net, 2, in);
    sx_nn_attention_params p = sx_nn_attention_params_default(2); /* head size 3: odd */
    p.rope = true;
    cr_assert_null(sx_nn_attention(net, x, &p));
    expect_error(sx_nn_net_status(net), SX_E_ARG, "odd");
    sx_nn_net_free(net);
    cr_assert_eq(sx_nn_net_new("bad", SX_F32, 1, &net), SX_OK);
    x = sx_nn_input(net, 2, in);
    p = sx_nn_attention_params_default(3);
    p.rope = true;
    p.rope_theta = 0;
    cr_assert_null(sx_nn_attention(net, x, &p));
    expect_error(sx_nn_net_status(net), SX_E_ARG, "rope base");
    sx_nn_net_free(net);
}
