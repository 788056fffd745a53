/* generate.c: text generation with a key/value cache. A generator compiles the network once as a
 * step graph over one new position per sequence (x (batch, 1)): the layers read nn_gen (the
 * position embedding its table's row, attention its cache and the step's position), and after
 * each step the generator appends every attention layer's new key and value to its cache, so the
 * prefix never runs again. Sampling (greedy, temperature, top-k, top-p) runs on the host. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sx_nn_generator {
    sx_nn_net *net;
    int64_t batch, max_len, vocab;
    int64_t pos; /* positions filled in the caches */
    int n_layers;
    sx_cg_graph *g;
    nn_build b;
    nn_gen gen;
    sx_cg_node *x, *logits;
    sx_cg_node **outs; /* logits, then each attention layer's new key and value */
    int n_outs;
    sx_tensor *xt, *post; /* the step's inputs: (batch, 1), (1, 1) */
    sx_tensor *lt;        /* the last step's logits (batch, V) */
    int32_t *tok;         /* (batch) */
};

sx_nn_generate_params sx_nn_generate_params_default(void)
{
    sx_nn_generate_params p = {.batch = 1, .max_len = 0};
    return p;
}

sx_nn_sampling sx_nn_sampling_default(void)
{
    sx_nn_sampling s = {.temperature = 1, .top_k = 0, .top_p = 1, .seed = 0};
    return s;
}

/* ---------------------------------------------------------------- the network */

#define SUPPORTED                                                                                  \
    "input, embedding, position embedding, causal attention, layer norm over the last axis, "      \
    "dense over the last axis, activation, prelu, softmax over the last axis, add, mul, max, "     \
    "average, concatenate, dropout"

/* Why layer l cannot run one position at a time, or NULL when it can. */
static const char *unsupported(const sx_nn_layer *l)
{
    switch (l->kind) {
    case L_INPUT:
    case L_EMBEDDING:
    case L_POSITION_EMBEDDING:
    case L_ACT:
    case L_PRELU:
    case L_ADD:
    case L_MUL:
    case L_MAX:
    case L_AVERAGE:
    case L_CONCAT:
    case L_DROPOUT:
        return NULL;
    case L_ATTENTION:
        return nn_attention_causal(l) ? NULL : "attention that is not causal";
    case L_LAYERNORM:
        return nn_norm_axes(l) == 1 ? NULL : "a layer norm over more than the last axis";
    case L_DENSE:
        return nn_dense_flattens(l) ? "a dense layer over the flattened input" : NULL;
    case L_SOFTMAX:
        return nn_softmax_axis(l) == l->rank - 1 ? NULL : "a softmax over another axis";
    default:
        return "a layer of this kind";
    }
}

/* The network against what a generator runs: *T its sequence length, *V its vocabulary, *rows
 * the smallest position table's rows (0: none). */
static sx_status check_net(const char *who, sx_nn_net *net, int64_t *T, int64_t *V, int64_t *rows)
{
    if (net->status != SX_OK)
        return nn_net_refused(who, net);
    if (net->dtype != SX_F32 && net->dtype != SX_F64)
        return sx_error(SX_E_DTYPE, "%s: network %s is %s (want f32 or f64)", who, net->name,
                        sx_dtype_name(net->dtype));
    const sx_nn_layer *in = nn_input_layer(net), *out = nn_output_layer(net);
    if (in == NULL || nn_input_count(net) != 1 || net->n_outputs > 1)
        return sx_error(SX_E_SHAPE, "%s: network %s has %d inputs and %d outputs (want one each)",
                        who, net->name, nn_input_count(net), nn_output_count(net));
    if (in->rank != 1 || out->rank != 2 || out->shape[0] != in->shape[0]) {
        char a[64], b[64];
        return sx_error(SX_E_SHAPE,
                        "%s: network %s maps %s to %s (want tokens (T) to logits (T, V))", who,
                        net->name, sx_shape_str(in->rank, in->shape, a, sizeof a),
                        sx_shape_str(out->rank, out->shape, b, sizeof b));
    }
    if (net->prep.norm_n > 0 || net->prep.target_n > 0)
        return sx_error(SX_E_UNSUPPORTED,
                        "%s: network %s normalises its input or output (token "
                        "ids and logits are used as they are)",
                        who, net->name);
    *T = in->shape[0];
    *V = out->shape[1];
    *rows = 0;
    for (int i = 0; i < net->n_layers; i++) {
        const sx_nn_layer *l = net->layers[i];
        const char *why = unsupported(l);
        if (why != NULL)
            return sx_error(SX_E_UNSUPPORTED,
                            "%s: layer %s (%s) is %s, which cannot run one "
                            "position at a time (a generator runs: " SUPPORTED ")",
                            who, l->name, l->ops->name, why);
        int64_t r = l->kind == L_POSITION_EMBEDDING ? nn_param_value(&l->params[0])->shape[0] : 0;
        if (r > 0 && (*rows == 0 || r < *rows))
            *rows = r;
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- building */

/* The step graph: the forward pass over x (batch, 1) with the generation context, optimised and
 * frozen for the logits and the attention layers' new keys and values. */
static sx_status build(sx_nn_generator *gen)
{
    sx_nn_net *net = gen->net;
    const int n = net->n_layers;
    nn_gen *c = &gen->gen;
    c->batch = gen->batch;
    c->max_len = gen->max_len;
    c->k_cache = sx_calloc((size_t)n, sizeof *c->k_cache);
    c->v_cache = sx_calloc((size_t)n, sizeof *c->v_cache);
    c->k_new = sx_calloc((size_t)n, sizeof *c->k_new);
    c->v_new = sx_calloc((size_t)n, sizeof *c->v_new);
    gen->outs = sx_calloc((size_t)(2 * n + 1), sizeof *gen->outs);
    if (!c->k_cache || !c->v_cache || !c->k_new || !c->v_new || !gen->outs)
        return SX_E_NOMEM;
    SX_TRY(sx_cg_graph_new(SX_CG_LAZY, net->dtype, &gen->g));
    sx_cg_graph *g = gen->g;
    gen->b.g = g;
    gen->b.mode = NN_INFER;
    gen->b.gen = c;
    SX_TRY(sx_cg_rng_new(g, 0, &gen->b.rng_id));
    int64_t xs[2] = {gen->batch, 1}, ps[2] = {1, 1};
    gen->x = sx_cg_input(g, "x", net->dtype, 2, xs);
    c->pos = sx_cg_input(g, "pos", net->dtype, 2, ps);
    if (gen->x == NULL || c->pos == NULL)
        return sx_cg_graph_status(g);
    SX_TRY(sx_tensor_zeros(net->dtype, 2, xs, &gen->xt));
    SX_TRY(sx_tensor_zeros(net->dtype, 2, ps, &gen->post));
    int64_t ls[2] = {gen->batch, gen->vocab};
    SX_TRY(sx_tensor_zeros(net->dtype, 2, ls, &gen->lt));
    sx_cg_node *out = NULL;
    SX_TRY(nn_forward(net, &gen->b, gen->x, &out, &gen->logits));
    gen->outs[gen->n_outs++] = gen->logits;
    for (int i = 0; i < n; i++)
        if (c->k_new[i] != NULL) {
            gen->outs[gen->n_outs++] = c->k_new[i];
            gen->outs[gen->n_outs++] = c->v_new[i];
        }
    SX_TRY(sx_cg_optimise(g, gen->n_outs, gen->outs, NULL, NULL));
    SX_TRY(sx_cg_freeze(g, gen->n_outs, gen->outs));
    SX_TRY(sx_cg_input_set(g, gen->x, gen->xt, SX_CG_BORROW));
    return sx_cg_input_set(g, c->pos, gen->post, SX_CG_BORROW);
}

void sx_nn_generator_free(sx_nn_generator *gen)
{
    if (gen == NULL)
        return;
    sx_cg_graph_free(gen->g); /* before the caches it borrows */
    nn_build_free(&gen->b);
    for (int i = 0; i < gen->n_layers; i++) {
        if (gen->gen.k_cache != NULL)
            sx_tensor_free(gen->gen.k_cache[i]);
        if (gen->gen.v_cache != NULL)
            sx_tensor_free(gen->gen.v_cache[i]);
    }
    sx_free(gen->gen.k_cache);
    sx_free(gen->gen.v_cache);
    sx_free(gen->gen.k_new);
    sx_free(gen->gen.v_new);
    sx_free(gen->outs);
    sx_tensor_free(gen->xt);
    sx_tensor_free(gen->post);
    sx_tensor_free(gen->lt);
    sx_free(gen->tok);
    sx_nn_net *net = gen->net; /* NULL: a generator that failed to build, not counted */
    sx_free(gen);
    if (net == NULL)
        return;
    net->n_models--;
    if (net->orphan && net->n_models == 0) /* sx_nn_net_free came first */
        sx_nn_net_free(net);
}

sx_status sx_nn_generator_new(sx_nn_net *net, const sx_nn_generate_params *p, sx_nn_generator **out)
{
    const char *who = "sx_nn_generator_new";
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    if (net == NULL)
        return sx_error(SX_E_ARG, "%s: net is NULL", who);
    sx_nn_generate_params gp = p != NULL ? *p : sx_nn_generate_params_default();
    int64_t T = 0, V = 0, rows = 0;
    SX_TRY(check_net(who, net, &T, &V, &rows));
    if (gp.batch < 1 || gp.max_len < 0)
        return sx_error(SX_E_ARG, "%s: batch %lld, max_len %lld (want >= 1, >= 0)", who,
                        (long long)gp.batch, (long long)gp.max_len);
    if (gp.max_len == 0)
        gp.max_len = rows > 0 ? rows : T;
    if (rows > 0 && gp.max_len > rows)
        return sx_error(SX_E_ARG,
                        "%s: max_len %lld, but network %s's position table has %lld "
                        "rows",
                        who, (long long)gp.max_len, net->name, (long long)rows);
    nn_prep_freeze(net);
    sx_nn_generator *gen = sx_calloc(1, sizeof *gen);
    if (gen == NULL)
        return SX_E_NOMEM;
    gen->net = net;
    gen->batch = gp.batch;
    gen->max_len = gp.max_len;
    gen->vocab = V;
    gen->n_layers = net->n_layers;
    gen->tok = sx_calloc((size_t)gp.batch, sizeof *gen->tok);
    sx_status s = gen->tok != NULL ? build(gen) : SX_E_NOMEM;
    if (s != SX_OK) {
        gen->net = NULL; /* not counted yet */
        sx_nn_generator_free(gen);
        return s;
    }
    net->n_models++; /* the network's layers are borrowed: none may be added */
    sx_nn_generator_reset(gen);
    *out = gen;
    return SX_OK;
}

int64_t sx_nn_generator_vocab(const sx_nn_generator *gen)
{
    return gen != NULL ? gen->vocab : 0;
}

int64_t sx_nn_generator_batch(const sx_nn_generator *gen)
{
    return gen != NULL ? gen->batch : 0;
}

int64_t sx_nn_generator_max_len(const sx_nn_generator *gen)
{
    return gen != NULL ? gen->max_len : 0;
}

int64_t sx_nn_generator_pos(const sx_nn_generator *gen)
{
    return gen != NULL ? gen->pos : 0;
}

void sx_nn_generator_reset(sx_nn_generator *gen)
{
    if (gen == NULL)
        return;
    gen->pos = 0;
}

/* ---------------------------------------------------------------- stepping */

/* Append the step's key and value of every attention layer at position gen->pos of its cache:
 * (batch heads, 1, dh) into row pos of (batch heads, max_len, dh). */
static void append_kv(sx_nn_generator *gen)
{
    const size_t es = sx_dtype_size(gen->net->dtype);
    for (int i = 0; i < gen->n_layers; i++) {
        if (gen->gen.k_new[i] == NULL)
            continue;
        for (int kv = 0; kv < 2; kv++) {
            const sx_tensor *v = sx_cg_value(kv ? gen->gen.v_new[i] : gen->gen.k_new[i]);
            sx_tensor *c = kv ? gen->gen.v_cache[i] : gen->gen.k_cache[i];
            const int64_t rows = c->shape[0], dh = c->shape[2];
            for (int64_t r = 0; r < rows; r++)
                memcpy((char *)c->data + (size_t)((r * gen->max_len + gen->pos) * dh) * es,
                       (const char *)v->data + (size_t)(r * dh) * es, (size_t)dh * es);
        }
    }
}

sx_status sx_nn_generator_step(sx_nn_generator *gen, const int32_t *tokens, sx_tensor *logits)
{
    const char *who = "sx_nn_generator_step";
    if (gen == NULL || tokens == NULL)
        return sx_error(SX_E_ARG, "%s: NULL generator or tokens", who);
    if (logits != NULL && logits->dtype != gen->net->dtype)
        return sx_error(SX_E_DTYPE, "%s: logits of %s, the network's are %s", who,
                        sx_dtype_name(logits->dtype), sx_dtype_name(gen->net->dtype));
    if (logits != NULL &&
        (logits->rank != 2 || logits->shape[0] != gen->batch || logits->shape[1] != gen->vocab)) {
        char a[64];
        return sx_error(SX_E_SHAPE, "%s: logits %s, want (%lld,%lld)", who,
                        sx_shape_str(logits->rank, logits->shape, a, sizeof a),
                        (long long)gen->batch, (long long)gen->vocab);
    }
    if (gen->pos >= gen->max_len)
        return sx_error(SX_E_RANGE, "%s: the context is full (%lld positions): reset the generator",
                        who, (long long)gen->max_len);
    for (int64_t b = 0; b < gen->batch; b++)
        if (tokens[b] < 0 || tokens[b] >= gen->vocab)
            return sx_error(SX_E_RANGE, "%s: token %d of sequence %lld (want 0..%lld)", who,
                            tokens[b], (long long)b, (long long)gen->vocab - 1);
    for (int64_t b = 0; b < gen->batch; b++)
        sx_tensor_set(gen->xt, b, tokens[b]);
    sx_tensor_set(gen->post, 0, (double)gen->pos);
    sx_cg_graph *g = gen->g;
    SX_TRY(sx_cg_invalidate(g, gen->x)); /* the borrowed inputs changed in place */
    SX_TRY(sx_cg_invalidate(g, gen->gen.pos));
    for (int i = 0; gen->b.param_nodes != NULL && i < gen->n_layers * NN_MAX_PARAMS; i++)
        if (gen->b.param_nodes[i] != NULL) /* the weights may have changed since */
            SX_TRY(sx_cg_invalidate(g, gen->b.param_nodes[i]));
    sx_status s = sx_cg_eval(g, gen->n_outs, gen->outs);
    if (s != SX_OK)
        return s;
    append_kv(gen);
    gen->pos++;
    const sx_tensor *z = sx_cg_value(gen->logits); /* (batch, 1, V) */
    memcpy(gen->lt->data, z->data, (size_t)z->size * sx_dtype_size(z->dtype));
    if (logits != NULL)
        memcpy(logits->data, z->data, (size_t)z->size * sx_dtype_size(z->dtype));
    return SX_OK;
}

/* ---------------------------------------------------------------- sampling */

static sx_status check_sampling(const char *who, const sx_nn_sampling *s)
{
    if (s == NULL)
        return SX_OK;
    if (!(isfinite(s->temperature) && s->temperature >= 0) || s->top_k < 0 ||
        !(s->top_p > 0 && s->top_p <= 1))
        return sx_error(SX_E_ARG,
                        "%s: temperature %g, top_k %lld, top_p %g (want finite >= 0, "
                        ">= 0, 0 < p <= 1)",
                        who, s->temperature, (long long)s->top_k, s->top_p);
    return SX_OK;
}

typedef struct cand {
    double z;
    int32_t id;
} cand;

/* the larger logit first; ties: the lower id */
static int by_logit(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->z != b->z)
        return a->z > b->z ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* One token from z (V): the candidates c (V of room) sorted, cut by top_k then top_p, drawn by
 * the inverse distribution function with one uniform number. */
static int32_t draw(const double *z, int64_t V, const sx_nn_sampling *s, sx_rng *rng, cand *c)
{
    int64_t n = 0;
    for (int64_t v = 0; v < V; v++)
        if (z[v] > -(double)INFINITY)
            c[n++] = (cand){z[v], (int32_t)v};
    qsort(c, (size_t)n, sizeof *c, by_logit);
    int64_t k = s->top_k > 0 && s->top_k < n ? s->top_k : n;
    const double top = c[0].z, t = s->temperature;
    double total = 0;
    for (int64_t i = 0; i < k; i++)
        total += exp((c[i].z - top) / t);
    if (s->top_p < 1) { /* the smallest head of the order holding top_p of the probability */
        double acc = 0;
        for (int64_t i = 0; i < k; i++) {
            acc += exp((c[i].z - top) / t) / total;
            if (acc >= s->top_p) {
                k = i + 1;
                break;
            }
        }
        total = 0;
        for (int64_t i = 0; i < k; i++)
            total += exp((c[i].z - top) / t);
    }
    double u = sx_rng_uniform(rng) * total;
    for (int64_t i = 0; i < k; i++)
        if ((u -= exp((c[i].z - top) / t)) < 0)
            return c[i].id;
    return c[k - 1].id;
}

sx_status sx_nn_sample(const sx_tensor *logits, const sx_nn_sampling *s, sx_rng *rng, int32_t *out)
{
    const char *who = "sx_nn_sample";
    if (logits == NULL || out == NULL)
        return sx_error(SX_E_ARG, "%s: NULL logits or out", who);
    SX_TRY(check_sampling(who, s));
    const bool greedy = s == NULL || s->temperature == 0;
    if (!greedy && rng == NULL)
        return sx_error(SX_E_ARG, "%s: rng is NULL (sampling at temperature %g draws)", who,
                        s->temperature);
    if (logits->rank != 2)
        return sx_error(SX_E_RANK, "%s: logits of rank %d (want (n, V))", who, logits->rank);
    if (logits->dtype != SX_F32 && logits->dtype != SX_F64)
        return sx_error(SX_E_DTYPE, "%s: logits of %s (want f32 or f64)", who,
                        sx_dtype_name(logits->dtype));
    const int64_t n = logits->shape[0], V = logits->shape[1];
    if (V < 1 || V > INT32_MAX)
        return sx_error(SX_E_RANGE, "%s: a vocabulary of %lld", who, (long long)V);
    double *z = sx_calloc((size_t)V, sizeof *z);
    cand *c = greedy ? NULL : sx_calloc((size_t)V, sizeof *c);
    if (z == NULL || (!greedy && c == NULL)) {
        sx_free(z);
        return SX_E_NOMEM;
    }
    sx_status st = SX_OK;
    for (int64_t r = 0; r < n && st == SX_OK; r++) {
        int64_t best = -1;
        for (int64_t v = 0; v < V; v++) {
            z[v] = sx_tensor_get(logits, r * V + v);
            if (isnan(z[v]) || z[v] == (double)INFINITY)
                st = sx_error(SX_E_RANGE, "%s: row %lld: logit %lld is %g", who, (long long)r,
                              (long long)v, z[v]);
            best = z[v] > -(double)INFINITY && (best < 0 || z[v] > z[best]) ? v : best;
        }
        if (st == SX_OK && best < 0)
            st = sx_error(SX_E_RANGE, "%s: row %lld: no finite logit", who, (long long)r);
        if (st == SX_OK)
            out[r] = greedy ? (int32_t)best : draw(z, V, s, rng, c);
    }
    sx_free(z);
    sx_free(c);
    return st;
}

/* ---------------------------------------------------------------- generating */

sx_status sx_nn_generate(sx_nn_generator *gen, const int32_t *prompt, int64_t n_prompt,
                         int64_t n_new, const sx_nn_sampling *s, int32_t *out)
{
    const char *who = "sx_nn_generate";
    if (gen == NULL || prompt == NULL || (out == NULL && n_new > 0))
        return sx_error(SX_E_ARG, "%s: NULL generator, prompt or out", who);
    if (n_prompt < 1 || n_new < 0)
        return sx_error(SX_E_ARG, "%s: %lld prompt tokens, %lld new ones (want >= 1, >= 0)", who,
                        (long long)n_prompt, (long long)n_new);
    SX_TRY(check_sampling(who, s));
    if (n_prompt > gen->max_len - n_new)
        return sx_error(SX_E_RANGE,
                        "%s: %lld prompt and %lld new tokens overflow the context of "
                        "%lld positions",
                        who, (long long)n_prompt, (long long)n_new, (long long)gen->max_len);
    for (int64_t i = 0; i < gen->batch * n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= gen->vocab)
            return sx_error(SX_E_RANGE,
                            "%s: prompt token %lld of sequence %lld is %d (want "
                            "0..%lld)",
                            who, (long long)(i % n_prompt), (long long)(i / n_prompt), prompt[i],
                            (long long)gen->vocab - 1);
    sx_nn_sampling greedy = sx_nn_sampling_default();
    greedy.temperature = 0;
    const sx_nn_sampling *sp = s != NULL ? s : &greedy;
    sx_rng rng;
    sx_rng_seed(&rng, sp->seed);
    sx_nn_generator_reset(gen);
    for (int64_t t = 0; t < n_prompt; t++) {
        for (int64_t b = 0; b < gen->batch; b++)
            gen->tok[b] = prompt[b * n_prompt + t];
        SX_TRY(sx_nn_generator_step(gen, gen->tok, NULL));
    }
    for (int64_t j = 0; j < n_new; j++) {
        SX_TRY(sx_nn_sample(gen->lt, sp, &rng, gen->tok));
        for (int64_t b = 0; b < gen->batch; b++)
            out[b * n_new + j] = gen->tok[b];
        if (j + 1 < n_new)
            SX_TRY(sx_nn_generator_step(gen, gen->tok, NULL));
    }
    return SX_OK;
}
