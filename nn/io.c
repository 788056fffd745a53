/* io.c: model files and checkpoints, both in cgraph's checksummed file format (sx_cg_save).
 * A model file holds the inference graph itself (lambda nodes included) with the weights
 * inline, so a program that never saw the network runs it. A checkpoint holds the weights,
 * optimiser state, step counters and the dropout generator: resuming repeats the same run. */
#include "nn_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- checkpoints */

typedef struct named {
    const char **names;
    const sx_tensor **tensors;
    char (*buf)[128];
    int n, cap;
} named;

static sx_status named_add(named *t, const char *name, const sx_tensor *v)
{
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 32;
        const char **a = sx_realloc(t->names, (size_t)cap * sizeof *a);
        if (a == NULL)
            return SX_E_NOMEM;
        t->names = a;
        const sx_tensor **b = sx_realloc(t->tensors, (size_t)cap * sizeof *b);
        if (b == NULL)
            return SX_E_NOMEM;
        t->tensors = b;
        char(*c)[128] = sx_realloc(t->buf, (size_t)cap * sizeof *c);
        if (c == NULL)
            return SX_E_NOMEM;
        t->buf = c;
        t->cap = cap;
    }
    snprintf(t->buf[t->n], sizeof t->buf[t->n], "%s", name);
    t->tensors[t->n] = v;
    t->n++;
    return SX_OK;
}

static void named_free(named *t)
{
    sx_free(t->names);
    sx_free(t->tensors);
    sx_free(t->buf);
}

/* Checkpoint versions: 1 had no "checkpoint_version", "batch" or "optim.*" entries (and wrote
 * "none" for SGD); 2 records the run's batch size and optimiser with its hyper-parameters. */
#define CHECKPOINT_VERSION 2

#define ADAM_KINDS                                                                                 \
    (1u << SX_OPTIM_ADAM | 1u << SX_OPTIM_ADAMW | 1u << SX_OPTIM_AMSGRAD |                         \
     1u << SX_OPTIM_ADAM_KERAS)

/* The optimiser hyper-parameters a checkpoint records, and which kinds use each (lr: all). */
static const struct {
    const char *key;
    size_t offset;
    unsigned kinds; /* bit k: used by kind k */
} hyper[] = {
    {"optim.lr", offsetof(sx_optim_params, lr), ~0u},
    {"optim.momentum", offsetof(sx_optim_params, momentum),
     1u << SX_OPTIM_MOMENTUM | 1u << SX_OPTIM_NESTEROV},
    {"optim.rho", offsetof(sx_optim_params, rho),
     1u << SX_OPTIM_RMSPROP | 1u << SX_OPTIM_RMSPROP_CENTERED},
    {"optim.beta1", offsetof(sx_optim_params, beta1), ADAM_KINDS},
    {"optim.beta2", offsetof(sx_optim_params, beta2), ADAM_KINDS},
    {"optim.eps", offsetof(sx_optim_params, eps),
     1u << SX_OPTIM_ADAGRAD | 1u << SX_OPTIM_RMSPROP | 1u << SX_OPTIM_RMSPROP_CENTERED |
         ADAM_KINDS},
};
#define N_HYPER (sizeof hyper / sizeof hyper[0])

static double hyper_get(const sx_optim_params *o, int i)
{
    double v;
    memcpy(&v, (const char *)o + hyper[i].offset, sizeof v);
    return v;
}

sx_status nn_checkpoint_save(sx_nn_net *net, const sx_nn_train_params *tp, const char *path)
{
    named t = {0};
    sx_status s = SX_OK;
    for (int i = 0; s == SX_OK && i < net->n_layers; i++) {
        for (int k = 0; s == SX_OK && k < net->layers[i]->n_params; k++) {
            nn_param *p = &net->layers[i]->params[k];
            s = named_add(&t, p->name, p->value);
            for (int j = 0; s == SX_OK && j < NN_MAX_STATES; j++) {
                if (p->state[j] == NULL)
                    continue;
                char name[128];
                snprintf(name, sizeof name, "%s.%s", p->name,
                         sx_optim_state_name(p->state_kind, j));
                s = named_add(&t, name, p->state[j]);
            }
        }
    }
    for (int i = 0; i < t.n; i++)
        t.names[i] = t.buf[i];
    char step[32], epoch[32], epoch_step[32], rng[80];
    snprintf(step, sizeof step, "%" PRId64, net->step);
    snprintf(epoch, sizeof epoch, "%" PRId64, net->epoch);
    snprintf(epoch_step, sizeof epoch_step, "%" PRId64, net->epoch_step);
    snprintf(rng, sizeof rng, "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64,
             net->dropout_rng.s[0], net->dropout_rng.s[1], net->dropout_rng.s[2],
             net->dropout_rng.s[3]);
    char version[16], batch[32], hv[N_HYPER][40];
    snprintf(version, sizeof version, "%d", CHECKPOINT_VERSION);
    snprintf(batch, sizeof batch, "%d", tp->batch);
    const char *keys[10 + N_HYPER] = {"strix.kind", "checkpoint_version", "network",     "step",
                                      "epoch",      "epoch_step",         "dropout_rng", "batch",
                                      "optimiser"};
    const char *vals[10 + N_HYPER] = {"checkpoint", version, net->name,
                                      step,         epoch,   epoch_step,
                                      rng,          batch,   sx_optim_name(tp->optim.kind)};
    int nk = 9;
    for (int i = 0; i < (int)N_HYPER; i++) {
        snprintf(hv[i], sizeof hv[i], "%.17g", hyper_get(&tp->optim, i));
        keys[nk] = hyper[i].key;
        vals[nk++] = hv[i];
    }
    if (s == SX_OK)
        s = sx_cg_save(NULL, 0, NULL, NULL, t.n, t.names, t.tensors, nk, keys, vals, path);
    named_free(&t);
    return s;
}

static sx_status copy_into(const char *path, const char *name, const sx_tensor *from, sx_tensor *to)
{
    if (from == NULL)
        return sx_error(SX_E_FORMAT, "%s: no tensor %s (another network?)", path, name);
    if (from->dtype != to->dtype || !sx_shape_equal(from->rank, from->shape, to->rank, to->shape)) {
        char a[96], b[96];
        return sx_error(SX_E_FORMAT, "%s: %s has shape %s %s, the network %s %s", path, name,
                        sx_shape_str(from->rank, from->shape, a, sizeof a),
                        sx_dtype_name(from->dtype), sx_shape_str(to->rank, to->shape, b, sizeof b),
                        sx_dtype_name(to->dtype));
    }
    return sx_tensor_copy_out(from, to);
}

/* A count written by the saver: decimal digits only (no sign, space or prefix, which strtoll
 * would take), at most INT64_MAX. */
static sx_status parse_i64(const char *path, const char *key, const char *v, int64_t *out)
{
    int64_t x = 0;
    bool ok = v != NULL && v[0] != '\0';
    for (const char *c = v; ok && *c != '\0'; c++) {
        ok = *c >= '0' && *c <= '9' && x <= (INT64_MAX - (*c - '0')) / 10;
        x = ok ? x * 10 + (*c - '0') : x;
    }
    if (!ok)
        return sx_error(SX_E_FORMAT, "%s: bad or missing '%s' ('%s')", path, key, v ? v : "");
    *out = x;
    return SX_OK;
}

/* A generator state written by the saver: 4 x 16 lowercase or uppercase hex digits, not all
 * zero (xoshiro256** never leaves the zero state). */
static sx_status parse_rng(const char *path, const char *key, const char *v, sx_rng *out)
{
    bool ok = v != NULL && strlen(v) == 64;
    uint64_t any = 0;
    for (int i = 0; ok && i < 4; i++) {
        uint64_t w = 0;
        for (int k = 0; ok && k < 16; k++) {
            char c = v[16 * i + k];
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            ok = d >= 0;
            w = w << 4 | (uint64_t)(d & 15);
        }
        out->s[i] = w;
        any |= w;
    }
    if (!ok || any == 0)
        return sx_error(SX_E_FORMAT, "%s: bad or missing '%s' (want 64 hex digits, not all zero)",
                        path, key);
    return SX_OK;
}

/* The checkpoint's run against this one (tp): the same optimiser with the same hyper-parameters
 * (the learning rate may change: noted when verbose), and mid-epoch the same batch size (the
 * steps done are counted in batches). *kind: the optimiser whose state the file holds
 * (SX_OPTIM_COUNT: none). */
static sx_status check_run(const char *path, const sx_cg_file *f, const sx_nn_train_params *tp,
                           int64_t epoch_step, sx_optim_kind *kind)
{
    const char *ver = sx_cg_file_meta(f, "checkpoint_version");
    int64_t version = 1;
    if (ver != NULL)
        SX_TRY(parse_i64(path, "checkpoint_version", ver, &version));
    if (version < 1 || version > CHECKPOINT_VERSION)
        return sx_error(SX_E_FORMAT, "%s: checkpoint version %lld (this strix reads 1 to %d)", path,
                        (long long)version, CHECKPOINT_VERSION);
    const char *opt = sx_cg_file_meta(f, "optimiser");
    *kind = SX_OPTIM_COUNT;
    if (opt != NULL && strcmp(opt, "none") != 0 && sx_optim_parse(opt, kind) != SX_OK)
        return sx_error(SX_E_FORMAT, "%s: unknown optimiser '%s'", path, opt);
    if (version >= 2 && *kind == SX_OPTIM_COUNT)
        return sx_error(SX_E_FORMAT, "%s: bad or missing 'optimiser'", path);
    /* version 1 wrote "none" for SGD (no state) and for a run without parameters */
    if (*kind != SX_OPTIM_COUNT && *kind != tp->optim.kind)
        return sx_error(SX_E_STATE,
                        "%s: the checkpoint is of a run with optimiser %s, this run uses %s: "
                        "resume with %s, or remove the checkpoint to start over",
                        path, sx_optim_name(*kind), sx_optim_name(tp->optim.kind),
                        sx_optim_name(*kind));
    for (int i = 0; version >= 2 && i < (int)N_HYPER; i++) {
        if (!(hyper[i].kinds >> tp->optim.kind & 1u))
            continue;
        const char *v = sx_cg_file_meta(f, hyper[i].key);
        char *end = NULL;
        double saved = v ? strtod(v, &end) : 0, now = hyper_get(&tp->optim, i);
        if (v == NULL || end == v || *end != '\0' || !isfinite(saved))
            return sx_error(SX_E_FORMAT, "%s: bad or missing '%s'", path, hyper[i].key);
        if (saved == now)
            continue;
        const char *name = hyper[i].key + strlen("optim.");
        if (strcmp(name, "lr") == 0) {
            if (tp->verbose > 0)
                fprintf(stderr,
                        "%s: resuming with learning rate %.9g (the checkpoint's run had "
                        "%.9g)\n",
                        path, now, saved);
            continue;
        }
        return sx_error(SX_E_STATE,
                        "%s: the checkpoint's run has %s %s %.17g, this run %.17g: resume with "
                        "the same hyper-parameters (the optimiser's state depends on them)",
                        path, sx_optim_name(tp->optim.kind), name, saved, now);
    }
    if (epoch_step > 0) {
        const char *b = sx_cg_file_meta(f, "batch");
        int64_t batch = 0;
        if (version < 2)
            return sx_error(SX_E_STATE,
                            "%s: a version-1 checkpoint, %lld steps into an epoch, does not record "
                            "its batch size: the images done cannot be counted; resume from a "
                            "checkpoint at an epoch's end",
                            path, (long long)epoch_step);
        SX_TRY(parse_i64(path, "batch", b, &batch));
        if (batch != tp->batch)
            return sx_error(SX_E_STATE,
                            "%s: the checkpoint stopped %lld steps into an epoch with batch %lld, "
                            "this run has batch %d: resume with batch %lld (or from a checkpoint "
                            "at an epoch's end)",
                            path, (long long)epoch_step, (long long)batch, tp->batch,
                            (long long)batch);
    }
    return SX_OK;
}

/* State j of optimiser k is a sum or average of squared gradients (adagrad's sum_sq, rmsprop's
 * mean_sq, adam's v): never negative, and the update takes its square root. */
static bool squares_state(sx_optim_kind k, int j)
{
    return (k == SX_OPTIM_ADAGRAD && j == 0) || (k == SX_OPTIM_RMSPROP && j == 0) ||
           (k == SX_OPTIM_RMSPROP_CENTERED && j == 0) || ((ADAM_KINDS >> k & 1u) && j >= 1);
}

/* Such a state from a file: every element >= 0 (NaN fails too), else every later update of
 * that weight would be NaN without a word. */
static sx_status check_squares(const char *path, const char *name, const sx_tensor *v)
{
    for (int64_t i = 0; i < v->size; i++) {
        double x = sx_tensor_get(v, i);
        if (!(x >= 0))
            return sx_error(SX_E_FORMAT,
                            "%s: %s[%lld] is %g; a sum of squared gradients is >= 0 (file "
                            "corrupt)",
                            path, name, (long long)i, x);
    }
    return SX_OK;
}

sx_status nn_checkpoint_load(sx_nn_net *net, const sx_nn_train_params *tp, const char *path)
{
    sx_cg_file *f = NULL;
    SX_TRY(sx_cg_file_read(path, &f));
    sx_status s = SX_OK;
    const char *kind = sx_cg_file_meta(f, "strix.kind");
    if (kind == NULL || strcmp(kind, "checkpoint") != 0)
        s = sx_error(SX_E_FORMAT, "%s: not a strix checkpoint", path);
    int64_t step = 0, epoch = 0, epoch_step = 0;
    if (s == SX_OK)
        s = parse_i64(path, "step", sx_cg_file_meta(f, "step"), &step);
    if (s == SX_OK)
        s = parse_i64(path, "epoch", sx_cg_file_meta(f, "epoch"), &epoch);
    if (s == SX_OK && sx_cg_file_meta(f, "epoch_step") != NULL) /* absent: at an epoch's end */
        s = parse_i64(path, "epoch_step", sx_cg_file_meta(f, "epoch_step"), &epoch_step);
    if (s == SX_OK && epoch_step > step)
        s = sx_error(SX_E_FORMAT, "%s: %lld steps into an epoch but %lld in all", path,
                     (long long)epoch_step, (long long)step);
    sx_rng rng;
    if (s == SX_OK)
        s = parse_rng(path, "dropout_rng", sx_cg_file_meta(f, "dropout_rng"), &rng);
    sx_optim_kind ok = SX_OPTIM_COUNT;
    if (s == SX_OK)
        s = check_run(path, f, tp, epoch_step, &ok);
    /* check every tensor (weights and optimiser states) before changing anything */
    for (int i = 0; s == SX_OK && i < net->n_layers; i++)
        for (int k = 0; s == SX_OK && k < net->layers[i]->n_params; k++) {
            nn_param *p = &net->layers[i]->params[k];
            int ns = ok == SX_OPTIM_COUNT || !p->trainable ? 0 : sx_optim_n_states(ok);
            for (int j = -1; s == SX_OK && j < ns; j++) {
                char name[128];
                snprintf(name, sizeof name, "%s%s%s", p->name, j < 0 ? "" : ".",
                         j < 0 ? "" : sx_optim_state_name(ok, j));
                const sx_tensor *v = sx_cg_file_tensor(f, name);
                if (v == NULL || v->dtype != p->value->dtype ||
                    !sx_shape_equal(v->rank, v->shape, p->value->rank, p->value->shape))
                    s = copy_into(path, name, v, p->value); /* reports the mismatch */
                if (s == SX_OK && j >= 0 && squares_state(ok, j))
                    s = check_squares(path, name, v);
            }
        }
    for (int i = 0; s == SX_OK && i < net->n_layers; i++)
        for (int k = 0; s == SX_OK && k < net->layers[i]->n_params; k++) {
            nn_param *p = &net->layers[i]->params[k];
            s = copy_into(path, p->name, sx_cg_file_tensor(f, p->name), p->value);
            if (s != SX_OK || ok == SX_OPTIM_COUNT || !p->trainable)
                continue;
            int ns = sx_optim_n_states(ok);
            for (int j = 0; s == SX_OK && j < ns; j++) {
                char name[128];
                snprintf(name, sizeof name, "%s.%s", p->name, sx_optim_state_name(ok, j));
                if (p->state_kind != ok || p->state[j] == NULL) {
                    for (int q = 0; q < NN_MAX_STATES; q++) {
                        sx_tensor_free(p->state[q]);
                        p->state[q] = NULL;
                    }
                    p->state_kind = ok;
                    for (int q = 0; s == SX_OK && q < ns; q++)
                        s = sx_tensor_zeros(net->dtype, p->value->rank, p->value->shape,
                                            &p->state[q]);
                }
                if (s == SX_OK)
                    s = copy_into(path, name, sx_cg_file_tensor(f, name), p->state[j]);
            }
        }
    if (s == SX_OK) {
        net->step = step;
        net->epoch = epoch;
        net->epoch_step = epoch_step;
        net->dropout_rng = rng;
    }
    sx_cg_file_free(f);
    return s;
}

/* ---------------------------------------------------------------- model files */

/* The plain (unoptimised) inference graph of net for batches of n: *x the input, *out the
 * output. The parameter nodes borrow the network's tensors. */
static sx_status net_infer_graph(sx_nn_net *net, int64_t n, sx_cg_graph **gp, sx_cg_node **xp,
                                 sx_cg_node **outp)
{
    nn_build b;
    memset(&b, 0, sizeof b);
    sx_cg_graph *g = NULL;
    sx_status s = sx_cg_graph_new(SX_CG_LAZY, net->dtype, &g);
    sx_cg_node *x = NULL, *out = NULL, *logits = NULL;
    if (s == SX_OK) {
        b.g = g;
        b.mode = NN_INFER;
        s = sx_cg_rng_new(g, 0, &b.rng_id);
    }
    if (s == SX_OK) {
        int64_t xs[SX_MAX_RANK];
        xs[0] = n;
        int r = nn_input_shape(net, xs + 1); /* (total) with several inputs */
        x = sx_cg_input(g, "x", net->dtype, r + 1, xs);
        s = x ? nn_forward(net, &b, x, &out, &logits) : sx_cg_graph_status(g);
    }
    nn_build_free(&b);
    if (s != SX_OK) {
        sx_cg_graph_free(g);
        return s;
    }
    *gp = g;
    *xp = x;
    *outp = out;
    return SX_OK;
}

sx_status sx_nn_save(sx_nn_net *net, const char *path)
{
    if (net == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_nn_save: NULL argument");
    if (net->status != SX_OK)
        return sx_error(net->status, "sx_nn_save: network %s has an error", net->name);
    sx_nn_layer *in = nn_input_layer(net), *last = nn_output_layer(net);
    if (in == NULL || last == NULL || last->rank != 1)
        return sx_error(SX_E_STATE,
                        "sx_nn_save: network %s needs an input layer and a (batch, classes) output",
                        net->name);
    /* the plain (unoptimised) inference graph, with batch 1: the loader rebuilds it for the
     * batch size it wants and optimises and plans it there */
    sx_cg_graph *g = NULL;
    sx_cg_node *x = NULL, *out = NULL;
    SX_TRY(net_infer_graph(net, 1, &g, &x, &out));
    char scale[40], classes[32];
    snprintf(scale, sizeof scale, "%.17g", net->input_scale);
    snprintf(classes, sizeof classes, "%" PRId64, last->shape[0]);
    const char *keys[4] = {"strix.kind", "network", "input_scale", "classes"};
    const char *vals[4] = {"model", net->name, scale, classes};
    sx_cg_node *outs[2] = {x, out};
    const char *names[2] = {"x", "y"};
    sx_status s = sx_cg_save(g, 2, outs, names, 0, NULL, NULL, 4, keys, vals, path);
    sx_cg_graph_free(g);
    return s;
}

sx_status nn_model_infer_graph(sx_nn_model *m, int64_t n, sx_cg_graph **g, sx_cg_node **x,
                               sx_cg_node **y)
{
    if (m == NULL || g == NULL || x == NULL || y == NULL || m->train || n < 1)
        return sx_error(SX_E_ARG, "nn_model_infer_graph: NULL argument, a training model or "
                                  "batch < 1");
    if (m->src != NULL)
        return m->src->build(m->src->ctx, n, g, x, y);
    if (m->net != NULL) {
        if (m->net->status != SX_OK || nn_input_layer(m->net) == NULL)
            return sx_error(SX_E_STATE,
                            "nn_model_infer_graph: network %s has an error or no "
                            "input",
                            m->net->name);
        return net_infer_graph(m->net, n, g, x, y);
    }
    const char *names[2] = {"x", "y"};
    sx_cg_node *outs[2];
    sx_cg_graph *saved = NULL;
    SX_TRY(sx_cg_file_graph(m->file, 2, names, &saved, outs));
    sx_status s = sx_cg_graph_copy(saved, 2, outs, n, g, outs);
    sx_cg_graph_free(saved);
    if (s == SX_OK) {
        *x = outs[0];
        *y = outs[1];
    }
    return s;
}

/* A model's inference graph as a model file: a network's through sx_nn_save; any other model's
 * plain inference graph (nn_model_infer_graph: the file's, or an imported model's source's)
 * for a batch of 1, with the metadata sx_nn_load wants. */
sx_status sx_nn_model_save(sx_nn_model *m, const char *path)
{
    if (m == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_nn_model_save: NULL argument");
    if (m->train)
        return sx_error(SX_E_ARG, "sx_nn_model_save: a training model (save its network with "
                                  "sx_nn_save)");
    if (m->net != NULL)
        return sx_nn_save(m->net, path);
    const char *net = m->file ? sx_cg_file_meta(m->file, "network") : NULL;
    char scale[40], classes[32];
    snprintf(scale, sizeof scale, "%.17g", m->input_scale);
    snprintf(classes, sizeof classes, "%" PRId64, m->classes);
    const char *keys[4] = {"strix.kind", "network", "input_scale", "classes"};
    const char *vals[4] = {"model", net ? net : "model", scale, classes};
    const char *names[2] = {"x", "y"};
    sx_cg_node *outs[2] = {NULL, NULL};
    sx_cg_graph *g = NULL;
    SX_TRY(nn_model_infer_graph(m, 1, &g, &outs[0], &outs[1]));
    sx_status s = sx_cg_save(g, 2, outs, names, 0, NULL, NULL, 4, keys, vals, path);
    sx_cg_graph_free(g);
    return s;
}

sx_status nn_loaded_graph(sx_nn_model *m, int64_t n)
{
    sx_cg_node *outs[2];
    sx_cg_graph *g = NULL;
    if (m->src != NULL) {
        SX_TRY(m->src->build(m->src->ctx, n, &g, &outs[0], &outs[1]));
    } else {
        const char *names[2] = {"x", "y"};
        sx_cg_graph *saved = NULL;
        SX_TRY(sx_cg_file_graph(m->file, 2, names, &saved, outs));
        sx_status s = sx_cg_graph_copy(saved, 2, outs, n, &g, outs);
        sx_cg_graph_free(saved);
        if (s != SX_OK)
            return s;
    }
    sx_status s =
        m->src != NULL && !m->src->optimise ? SX_OK : sx_cg_optimise(g, 1, &outs[1], NULL, NULL);
    if (s == SX_OK)
        s = sx_cg_freeze(g, 1, &outs[1]);
    if (s != SX_OK) {
        sx_cg_graph_free(g);
        return s;
    }
    m->g = g;
    m->x = outs[0];
    m->out = outs[1];
    return SX_OK;
}

/* A model file's metadata: input_scale (finite, as sx_nn_net_set_input_scale accepts) and
 * classes (a count >= 1). */
static sx_status loaded_meta(const char *path, sx_nn_model *m)
{
    const char *kind = sx_cg_file_meta(m->file, "strix.kind");
    if (kind == NULL || strcmp(kind, "model") != 0)
        return sx_error(SX_E_FORMAT, "%s: not a strix model file%s", path,
                        kind && strcmp(kind, "checkpoint") == 0 ? " (a checkpoint)" : "");
    const char *sc = sx_cg_file_meta(m->file, "input_scale");
    char *e1 = NULL;
    m->input_scale = sc ? strtod(sc, &e1) : 0;
    if (sc == NULL || e1 == sc || *e1 != '\0' || !isfinite(m->input_scale))
        return sx_error(SX_E_FORMAT, "%s: bad or missing 'input_scale' ('%s')", path, sc ? sc : "");
    SX_TRY(parse_i64(path, "classes", sx_cg_file_meta(m->file, "classes"), &m->classes));
    if (m->classes < 1)
        return sx_error(SX_E_FORMAT, "%s: 'classes' is 0", path);
    return SX_OK;
}

/* Judge the graph's x and y before reading anything from them: x is an input (batch, example
 * shape) with an example of rank 1..7 (sx_nn_input's), y is (batch, classes) of x's dtype. */
static sx_status loaded_io(const char *path, sx_nn_model *m)
{
    const sx_cg_node *x = m->x, *y = m->out;
    int64_t batch = m->batch;
    int xr = sx_cg_node_rank(x), yr = sx_cg_node_rank(y);
    const int64_t *xs = sx_cg_node_shape(x), *ys = sx_cg_node_shape(y);
    if (sx_cg_node_op(x) != SX_OP_INPUT || xr < 2 || xs[0] != batch || yr != 2 || ys[0] != batch ||
        ys[1] != m->classes || sx_cg_node_dtype(y) != sx_cg_node_dtype(x)) {
        char a[128], b[128];
        return sx_error(SX_E_FORMAT,
                        "%s: not a model's x and y: x is %s %s %s, y %s %s (want x an input "
                        "(%lld, example) and y (%lld,%lld) of its dtype)",
                        path, sx_cg_op_name(sx_cg_node_op(x)), sx_dtype_name(sx_cg_node_dtype(x)),
                        sx_shape_str(xr, xs, a, sizeof a), sx_dtype_name(sx_cg_node_dtype(y)),
                        sx_shape_str(yr, ys, b, sizeof b), (long long)batch, (long long)batch,
                        (long long)m->classes);
    }
    m->in_rank = xr - 1;
    m->dtype = sx_cg_node_dtype(x);
    memcpy(m->in_shape, xs + 1, (size_t)m->in_rank * sizeof *m->in_shape);
    return SX_OK;
}

sx_status sx_nn_load(const char *path, int64_t batch, sx_nn_model **out)
{
    if (out != NULL)
        *out = NULL;
    if (out == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_nn_load: NULL argument");
    if (batch < 1)
        return sx_error(SX_E_ARG, "sx_nn_load: batch %lld (want >= 1)", (long long)batch);
    sx_nn_model *m = sx_calloc(1, sizeof *m);
    if (m == NULL)
        return SX_E_NOMEM;
    m->batch = batch;
    sx_status s = sx_cg_file_read(path, &m->file);
    if (s == SX_OK)
        s = loaded_meta(path, m);
    /* the file's graph must have outputs x and y and run for this batch: anything else is a
     * bad model file (SX_E_FORMAT naming it), not a bad argument */
    if (s == SX_OK && (s = nn_loaded_graph(m, batch)) != SX_OK && s != SX_E_NOMEM) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", sx_last_error());
        s = sx_error(SX_E_FORMAT, "%s: not a model's graph for batch %lld: %s", path,
                     (long long)batch, msg);
    }
    if (s == SX_OK)
        s = loaded_io(path, m);
    if (s != SX_OK) {
        sx_nn_model_free(m);
        return s;
    }
    *out = m;
    return SX_OK;
}

sx_status nn_model_from_source(const nn_model_source *src, int64_t batch, sx_nn_model **out)
{
    if (out != NULL)
        *out = NULL;
    if (src == NULL || src->build == NULL || out == NULL || batch < 1) {
        if (src != NULL && src->free != NULL)
            src->free(src->ctx);
        return sx_error(SX_E_ARG, "nn_model_from_source: NULL argument or batch %lld < 1",
                        (long long)batch);
    }
    sx_nn_model *m = sx_calloc(1, sizeof *m);
    nn_model_source *own = m != NULL ? sx_alloc(sizeof *own) : NULL;
    if (own == NULL) {
        sx_free(m);
        if (src->free != NULL)
            src->free(src->ctx);
        return SX_E_NOMEM;
    }
    *own = *src;
    m->src = own;
    m->batch = batch;
    m->input_scale = 1;
    sx_status s = nn_loaded_graph(m, batch);
    if (s == SX_OK) {
        const int64_t *ys = sx_cg_node_shape(m->out);
        m->classes = sx_cg_node_rank(m->out) == 2 ? ys[1] : -1;
        s = loaded_io("nn_model_from_source", m);
    }
    if (s != SX_OK) {
        sx_nn_model_free(m);
        return s;
    }
    *out = m;
    return SX_OK;
}
