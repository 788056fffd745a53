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
 * "none" for SGD); 2 records the run's batch size and optimiser with its hyper-parameters; 3
 * adds the weight decay and dampening ("optim.weight_decay", "optim.dampening"), the schedule
 * ("schedule.total_steps") and the reduce-on-plateau state ("plateau.lr", "plateau.best",
 * "plateau.bad", when the run has that schedule). Older versions still load. */
#define CHECKPOINT_VERSION 3

#define ADAM_KINDS                                                                                 \
    (1u << SX_OPTIM_ADAM | 1u << SX_OPTIM_ADAMW | 1u << SX_OPTIM_AMSGRAD |                         \
     1u << SX_OPTIM_ADAM_KERAS)

#define RMSPROP_KINDS                                                                              \
    (1u << SX_OPTIM_RMSPROP | 1u << SX_OPTIM_RMSPROP_CENTERED | 1u << SX_OPTIM_RMSPROP_MOMENTUM)

/* The optimiser hyper-parameters a checkpoint records, which kinds use each (lr, weight decay:
 * all), the version that added it, and whether a resume may change it (noted when verbose):
 * the rate and the weight decay may change; the others shape the optimiser's state. */
static const struct {
    const char *key;
    size_t offset;
    unsigned kinds; /* bit k: used by kind k */
    int since;      /* the checkpoint version that records it */
    bool may_change;
} hyper[] = {
    {"optim.lr", offsetof(sx_optim_params, lr), ~0u, 2, true},
    {"optim.momentum", offsetof(sx_optim_params, momentum),
     1u << SX_OPTIM_MOMENTUM | 1u << SX_OPTIM_NESTEROV | 1u << SX_OPTIM_RMSPROP_MOMENTUM, 2, false},
    {"optim.rho", offsetof(sx_optim_params, rho), RMSPROP_KINDS, 2, false},
    {"optim.beta1", offsetof(sx_optim_params, beta1), ADAM_KINDS, 2, false},
    {"optim.beta2", offsetof(sx_optim_params, beta2), ADAM_KINDS, 2, false},
    {"optim.eps", offsetof(sx_optim_params, eps),
     1u << SX_OPTIM_ADAGRAD | RMSPROP_KINDS | ADAM_KINDS, 2, false},
    {"optim.weight_decay", offsetof(sx_optim_params, weight_decay), ~0u, 3, true},
    {"optim.dampening", offsetof(sx_optim_params, dampening), 1u << SX_OPTIM_MOMENTUM, 3, false},
};
#define N_HYPER (sizeof hyper / sizeof hyper[0])

static double hyper_get(const sx_optim_params *o, int i)
{
    double v;
    memcpy(&v, (const char *)o + hyper[i].offset, sizeof v);
    return v;
}

sx_status nn_checkpoint_save_state(sx_nn_net *net, const sx_nn_train_params *tp,
                                   const nn_run_state *rs, const char *path)
{
    named t = {0};
    sx_status s = SX_OK;
    for (int i = 0; s == SX_OK && i < net->n_layers; i++) {
        for (int k = 0; s == SX_OK && k < net->layers[i]->n_params; k++) {
            nn_param *p = &net->layers[i]->params[k];
            if (!nn_param_stored(p))
                continue;
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
    const char *keys[24 + N_HYPER] = {"strix.kind", "checkpoint_version", "network",     "step",
                                      "epoch",      "epoch_step",         "dropout_rng", "batch",
                                      "optimiser"};
    const char *vals[24 + N_HYPER] = {"checkpoint", version, net->name,
                                      step,         epoch,   epoch_step,
                                      rng,          batch,   sx_optim_name(tp->optim.kind)};
    int nk = 9;
    for (int i = 0; i < (int)N_HYPER; i++) {
        snprintf(hv[i], sizeof hv[i], "%.17g", hyper_get(&tp->optim, i));
        keys[nk] = hyper[i].key;
        vals[nk++] = hv[i];
    }
    char total[32], plr[40], pbest[40], pbad[32];
    snprintf(total, sizeof total, "%" PRId64, rs != NULL ? rs->total_steps : 0);
    keys[nk] = "schedule.total_steps";
    vals[nk++] = total;
    if (rs != NULL && rs->plateau) {
        snprintf(plr, sizeof plr, "%.17g", rs->plateau_lr);
        snprintf(pbest, sizeof pbest, "%.17g", rs->plateau_best);
        snprintf(pbad, sizeof pbad, "%d", rs->plateau_bad);
        const char *pk[3] = {"plateau.lr", "plateau.best", "plateau.bad"};
        const char *pv[3] = {plr, pbest, pbad};
        for (int i = 0; i < 3; i++) {
            keys[nk] = pk[i];
            vals[nk++] = pv[i];
        }
    }
    /* the network's preprocessing: a network rebuilt from code gets it back with its weights */
    char scale[40];
    snprintf(scale, sizeof scale, "%.17g", net->prep.scale);
    keys[nk] = "input_scale";
    vals[nk++] = scale;
    nn_prep_meta pm = {0};
    if (s == SX_OK)
        s = nn_prep_meta_make(&net->prep, &pm);
    for (int i = 0; s == SX_OK && i < pm.n; i++) {
        keys[nk] = pm.keys[i];
        vals[nk++] = pm.vals[i];
    }
    if (s == SX_OK)
        s = sx_cg_save(NULL, 0, NULL, NULL, t.n, t.names, t.tensors, nk, keys, vals, path);
    nn_prep_meta_free(&pm);
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
        if (!(hyper[i].kinds >> tp->optim.kind & 1u) || version < hyper[i].since)
            continue;
        const char *v = sx_cg_file_meta(f, hyper[i].key);
        char *end = NULL;
        double saved = v ? strtod(v, &end) : 0, now = hyper_get(&tp->optim, i);
        if (v == NULL || end == v || *end != '\0' || !isfinite(saved))
            return sx_error(SX_E_FORMAT, "%s: bad or missing '%s'", path, hyper[i].key);
        if (saved == now)
            continue;
        const char *name = hyper[i].key + strlen("optim.");
        if (hyper[i].may_change) {
            if (tp->verbose > 0)
                fprintf(stderr, "%s: resuming with %s %.9g (the checkpoint's run had %.9g)\n", path,
                        name, now, saved);
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
    return (k == SX_OPTIM_ADAGRAD && j == 0) || ((RMSPROP_KINDS >> k & 1u) && j == 0) ||
           ((ADAM_KINDS >> k & 1u) && j >= 1);
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

/* The loop's state of a version-3 checkpoint into rs: T, and the plateau's when present. */
static sx_status run_state(const char *path, const sx_cg_file *f, nn_run_state *rs)
{
    memset(rs, 0, sizeof *rs);
    const char *t = sx_cg_file_meta(f, "schedule.total_steps");
    if (t != NULL)
        SX_TRY(parse_i64(path, "schedule.total_steps", t, &rs->total_steps));
    const char *lr = sx_cg_file_meta(f, "plateau.lr"), *best = sx_cg_file_meta(f, "plateau.best");
    const char *bad = sx_cg_file_meta(f, "plateau.bad");
    if (lr == NULL && best == NULL && bad == NULL)
        return SX_OK;
    char *e1 = NULL, *e2 = NULL;
    int64_t nbad = 0;
    rs->plateau_lr = lr != NULL ? strtod(lr, &e1) : 0;
    rs->plateau_best = best != NULL ? strtod(best, &e2) : 0;
    if (lr == NULL || e1 == lr || *e1 != '\0' || !(rs->plateau_lr > 0) ||
        !isfinite(rs->plateau_lr) || best == NULL || e2 == best || *e2 != '\0' ||
        isinf(rs->plateau_best))
        return sx_error(SX_E_FORMAT, "%s: bad or missing 'plateau.lr' or 'plateau.best'", path);
    SX_TRY(parse_i64(path, "plateau.bad", bad, &nbad));
    if (nbad > INT32_MAX)
        return sx_error(SX_E_FORMAT, "%s: bad 'plateau.bad'", path);
    rs->plateau_bad = (int)nbad;
    rs->plateau = true;
    return SX_OK;
}

sx_status nn_checkpoint_load_state(sx_nn_net *net, const sx_nn_train_params *tp, nn_run_state *rs,
                                   const char *path)
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
    nn_run_state st;
    if (s == SX_OK)
        s = run_state(path, f, &st);
    /* the preprocessing it was trained with (none recorded before input_scale was written) */
    nn_prep fp = {0};
    const char *fsc = sx_cg_file_meta(f, "input_scale");
    char *e1 = NULL;
    if (s == SX_OK && fsc != NULL) {
        fp.scale = strtod(fsc, &e1);
        if (e1 == fsc || *e1 != '\0' || !isfinite(fp.scale) || fp.scale < 0)
            s = sx_error(SX_E_FORMAT, "%s: bad 'input_scale' ('%s')", path, fsc);
        if (s == SX_OK)
            s = nn_prep_meta_read(path, f, &fp);
        if (s == SX_OK)
            s = nn_prep_merge(path, net->name, &net->prep, &fp, false);
    }
    /* check every tensor (weights and optimiser states) before changing anything */
    for (int i = 0; s == SX_OK && i < net->n_layers; i++)
        for (int k = 0; s == SX_OK && k < net->layers[i]->n_params; k++) {
            nn_param *p = &net->layers[i]->params[k];
            if (!nn_param_stored(p))
                continue;
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
            if (!nn_param_stored(p))
                continue;
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
        if (rs != NULL)
            *rs = st;
        s = nn_prep_merge(path, net->name, &net->prep, &fp, true);
    }
    nn_prep_free(&fp);
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

/* A shape as "d1xd2x..." into buf. */
static void dims_str(int rank, const int64_t *shape, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < rank && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%" PRId64, i ? "x" : "", shape[i]);
}

/* Model files. Version 1 (no "model_version"): a (batch, classes) output, "classes" >= 1.
 * Version 2 adds "model_version" 2, "outputs" ("name:d1xd2..." per output, ',' between them; y
 * has the one output's shape, or (batch, total) with several, their elements one after
 * another) and "inputs" ("d1xd2..." per input layer; x is (batch, total) with several);
 * "input_ids" is "1" when every input takes ids (sx_nn_input_ids; absent otherwise);
 * "classes" is 0 for an output that is not (batch, classes). Version 3: the graph holds the
 * network's preprocessing (x is raw data), and the metadata describe it for tools
 * (preprocess.c: normalize_mean/std, target_mean/std, class_names, feature_names,
 * image_resize); input_scale is then informative. Versions 1 and 2 took x already scaled by
 * input_scale; they still load, with that meaning (sx_nn_preprocess.in_graph false). */
#define MODEL_VERSION 3

/* The outputs' and inputs' lists of a network, as version 2 writes them. */
static void net_parts_str(const sx_nn_net *net, char *outs_s, size_t on, char *ins_s, size_t in)
{
    for (int k = 0, n = nn_output_count(net); k < n; k++) {
        const sx_nn_layer *o = nn_output_at(net, k);
        char d[160];
        dims_str(o->rank, o->shape, d, sizeof d);
        size_t at = strlen(outs_s);
        snprintf(outs_s + at, on - at, "%s%s:%s", k ? "," : "",
                 net->n_outputs > 0 ? net->output_names[k] : "y", d);
    }
    for (int i = 0, k = 0; i < net->n_layers; i++) {
        const sx_nn_layer *l = net->layers[i];
        if (l->kind != L_INPUT)
            continue;
        char d[160];
        dims_str(l->rank, l->shape, d, sizeof d);
        size_t at = strlen(ins_s);
        snprintf(ins_s + at, in - at, "%s%s", k++ ? "," : "", d);
    }
}

/* Save graph g's x and y with the model metadata (nk of keys/vals) and p's preprocessing. */
static sx_status save_model(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *y, int nk, const char **keys,
                            const char **vals, const nn_prep *p, const char *path)
{
    nn_prep_meta pm = {0};
    if (p != NULL && p->in_graph)
        SX_TRY(nn_prep_meta_make(p, &pm));
    for (int i = 0; i < pm.n; i++) {
        keys[nk] = pm.keys[i];
        vals[nk++] = pm.vals[i];
    }
    sx_cg_node *outs[2] = {x, y};
    const char *names[2] = {"x", "y"};
    sx_status s = sx_cg_save(g, 2, outs, names, 0, NULL, NULL, nk, keys, vals, path);
    nn_prep_meta_free(&pm);
    return s;
}

sx_status sx_nn_save(sx_nn_net *net, const char *path)
{
    if (net == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_nn_save: NULL argument");
    if (net->status != SX_OK)
        return nn_net_refused("sx_nn_save", net);
    sx_nn_layer *in = nn_input_layer(net), *last = nn_output_layer(net);
    if (in == NULL || last == NULL)
        return sx_error(SX_E_STATE, "sx_nn_save: network %s needs an input layer", net->name);
    nn_prep_freeze(net);
    /* the plain (unoptimised) inference graph, with batch 1: the loader rebuilds it for the
     * batch size it wants and optimises and plans it there */
    sx_cg_graph *g = NULL;
    sx_cg_node *x = NULL, *out = NULL;
    SX_TRY(net_infer_graph(net, 1, &g, &x, &out));
    char scale[40], classes[32], version[16];
    char outs_s[SX_NN_MAX_HEADS * 200] = "", ins_s[2048] = "";
    snprintf(scale, sizeof scale, "%.17g", net->prep.scale);
    snprintf(classes, sizeof classes, "%" PRId64,
             last->rank == 1 && net->n_outputs < 2 ? last->shape[0] : 0);
    snprintf(version, sizeof version, "%d", MODEL_VERSION);
    net_parts_str(net, outs_s, sizeof outs_s, ins_s, sizeof ins_s);
    const char *keys[16] = {"strix.kind",    "network", "input_scale", "classes",
                            "model_version", "outputs", "inputs",      "input_ids"};
    const char *vals[16] = {"model", net->name, scale, classes, version, outs_s, ins_s, "1"};
    bool ids = nn_input_ids_count(net) == nn_input_count(net);
    sx_status s = save_model(g, x, out, ids ? 8 : 7, keys, vals, &net->prep, path);
    sx_cg_graph_free(g);
    return s;
}

sx_status nn_model_infer_graph(sx_nn_model *m, int64_t n, sx_cg_graph **g, sx_cg_node **x,
                               sx_cg_node **y)
{
    if (m == NULL || g == NULL || x == NULL || y == NULL || m->train || n < 1)
        return sx_error(SX_E_ARG, "nn_model_infer_graph: NULL argument, a training model or "
                                  "batch < 1");
    if (m->c.net == NULL && m->file->src != NULL)
        return m->file->src->build(m->file->src->ctx, n, g, x, y);
    if (m->c.net != NULL) {
        if (m->c.net->status != SX_OK || nn_input_layer(m->c.net) == NULL)
            return sx_error(SX_E_STATE,
                            "nn_model_infer_graph: network %s has an error or no "
                            "input",
                            m->c.net->name);
        return net_infer_graph(m->c.net, n, g, x, y);
    }
    sx_cg_node *outs[2] = {m->file->plain_x, m->file->plain_y};
    sx_status s = sx_cg_graph_copy_shared(m->file->plain, 2, outs, n, g, outs);
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
    if (m->c.net != NULL)
        return sx_nn_save(m->c.net, path);
    const char *net = m->file->meta[0]; /* a loaded model's (NULL: none) */
    const nn_prep *prep = &m->file->prep;
    char scale[40], classes[32];
    snprintf(scale, sizeof scale, "%.17g", prep ? prep->scale : 1.0);
    snprintf(classes, sizeof classes, "%" PRId64, m->classes);
    /* a loaded file keeps its version, outputs and inputs */
    const char *keys[16] = {"strix.kind",    "network", "input_scale", "classes",
                            "model_version", "outputs", "inputs"};
    const char *vals[16] = {"model", net ? net : "model", scale, classes, NULL, NULL, NULL};
    int nk = 4;
    for (int i = 4; m->file->plain != NULL && i < 7; i++)
        if ((vals[i] = m->file->meta[i - 3]) != NULL)
            nk = i + 1;
    /* an imported model (a row holds its outputs and inputs one after another): the current
     * version, its parts listed */
    char version[16], outs_s[SX_NN_MAX_HEADS * 200] = "", ins_s[SX_NN_MAX_HEADS * 160] = "";
    if (m->file->plain == NULL) {
        snprintf(version, sizeof version, "%d", MODEL_VERSION);
        for (int k = 0; k < m->file->n_parts; k++) {
            char d[160];
            dims_str(m->file->part_rank[k], m->file->part_shape[k], d, sizeof d);
            size_t at = strlen(outs_s);
            snprintf(outs_s + at, sizeof outs_s - at, "%s%s:%s", k ? "," : "",
                     m->file->part_names[k], d);
        }
        for (int k = 0; k < m->file->n_in_parts; k++) {
            char d[160];
            dims_str(m->file->in_part_rank[k], m->file->in_part_shape[k], d, sizeof d);
            size_t at = strlen(ins_s);
            snprintf(ins_s + at, sizeof ins_s - at, "%s%s", k ? "," : "", d);
        }
        vals[4] = version;
        vals[5] = outs_s;
        vals[6] = ins_s;
        nk = 7;
    }
    for (int i = 4; i < nk; i++)
        if (vals[i] == NULL)
            vals[i] = "";
    if (m->ids_in) {
        keys[nk] = "input_ids";
        vals[nk++] = "1";
    }
    sx_cg_node *outs[2] = {NULL, NULL};
    sx_cg_graph *g = NULL;
    SX_TRY(nn_model_infer_graph(m, 1, &g, &outs[0], &outs[1]));
    sx_status s = save_model(g, outs[0], outs[1], nk, keys, vals, prep, path);
    sx_cg_graph_free(g);
    return s;
}

/* One shape "d1xd2..." of a version-2 file (rank 1..SX_MAX_RANK-1, dims >= 1, a size that
 * fits) from s[0..len). */
static sx_status parse_dims(const char *path, const char *key, const char *s, size_t len, int *rank,
                            int64_t *shape)
{
    int r = 0;
    size_t i = 0;
    while (i < len) {
        int64_t d = 0;
        size_t j = i;
        while (j < len && s[j] >= '0' && s[j] <= '9' && d <= (INT64_MAX - 9) / 10)
            d = d * 10 + (s[j++] - '0');
        if (j == i || d < 1 || r == SX_MAX_RANK - 1 || (j < len && s[j] != 'x') ||
            (j < len && j + 1 == len))
            return sx_error(SX_E_FORMAT, "%s: bad shape '%.*s' in '%s'", path, (int)len, s, key);
        shape[r++] = d;
        i = j + 1;
    }
    if (r == 0 || !nn_shape_fits(r, shape))
        return sx_error(SX_E_FORMAT, "%s: bad shape '%.*s' in '%s'", path, (int)len, s, key);
    *rank = r;
    return SX_OK;
}

/* A version-2 file's "outputs" (names) or "inputs" (names NULL) list into the model. */
static sx_status parse_parts(const char *path, const char *key, const char *v, int *n,
                             char (*names)[32], int *ranks, int64_t (*shapes)[SX_MAX_RANK])
{
    if (v == NULL || v[0] == '\0')
        return sx_error(SX_E_FORMAT, "%s: bad or missing '%s'", path, key);
    *n = 0;
    for (const char *at = v; *at != '\0';) {
        const char *end = strchr(at, ',');
        size_t len = end ? (size_t)(end - at) : strlen(at);
        if (*n == SX_NN_MAX_HEADS)
            return sx_error(SX_E_FORMAT, "%s: more than %d entries in '%s'", path, SX_NN_MAX_HEADS,
                            key);
        const char *dims = at;
        if (names != NULL) {
            const char *colon = memchr(at, ':', len);
            if (colon == NULL || !nn_name_ok(at, (size_t)(colon - at)))
                return sx_error(SX_E_FORMAT, "%s: bad output '%.*s' in '%s' (want name:shape)",
                                path, (int)len, at, key);
            snprintf(names[*n], 32, "%.*s", (int)(colon - at), at);
            dims = colon + 1;
        }
        SX_TRY(parse_dims(path, key, dims, len - (size_t)(dims - at), &ranks[*n], shapes[*n]));
        (*n)++;
        if (end == NULL)
            break;
        at = end + 1;
        if (*at == '\0')
            return sx_error(SX_E_FORMAT, "%s: '%s' ends in ','", path, key);
    }
    return SX_OK;
}

/* A model file's metadata: input_scale (finite, as sx_nn_net_set_input_scale accepts), classes
 * (a count >= 1; >= 0 in version 2), and in version 2 the outputs and inputs. *version: the
 * file's. */
static sx_status loaded_meta(const char *path, const sx_cg_file *f, sx_nn_model *m,
                             int64_t *version)
{
    const char *kind = sx_cg_file_meta(f, "strix.kind");
    if (kind == NULL || strcmp(kind, "model") != 0)
        return sx_error(SX_E_FORMAT, "%s: not a strix model file%s", path,
                        kind && strcmp(kind, "checkpoint") == 0 ? " (a checkpoint)" : "");
    const char *ver = sx_cg_file_meta(f, "model_version");
    *version = 1;
    if (ver != NULL)
        SX_TRY(parse_i64(path, "model_version", ver, version));
    if (*version > MODEL_VERSION)
        return sx_error(SX_E_UNSUPPORTED,
                        "%s: model file version %lld (this strix reads 1 to %d): a newer strix "
                        "wrote it",
                        path, (long long)*version, MODEL_VERSION);
    if (*version < 1)
        return sx_error(SX_E_FORMAT, "%s: model_version 0", path);
    const char *sc = sx_cg_file_meta(f, "input_scale");
    char *e1 = NULL;
    m->file->prep.scale = sc ? strtod(sc, &e1) : 0;
    if (sc == NULL || e1 == sc || *e1 != '\0' || !isfinite(m->file->prep.scale))
        return sx_error(SX_E_FORMAT, "%s: bad or missing 'input_scale' ('%s')", path, sc ? sc : "");
    m->file->prep.in_graph = *version >= 3;
    const char *ids = sx_cg_file_meta(f, "input_ids"); /* every input takes ids */
    if (ids != NULL && strcmp(ids, "1") != 0)
        return sx_error(SX_E_FORMAT, "%s: bad 'input_ids' ('%s')", path, ids);
    m->ids_in = ids != NULL;
    if (*version >= 3)
        SX_TRY(nn_prep_meta_read(path, f, &m->file->prep));
    SX_TRY(parse_i64(path, "classes", sx_cg_file_meta(f, "classes"), &m->classes));
    if (m->classes < 1 && *version < 2)
        return sx_error(SX_E_FORMAT, "%s: 'classes' is 0", path);
    if (*version < 2)
        return SX_OK;
    SX_TRY(parse_parts(path, "outputs", sx_cg_file_meta(f, "outputs"), &m->file->n_parts,
                       m->file->part_names, m->file->part_rank, m->file->part_shape));
    for (int a = 0; a < m->file->n_parts; a++)
        for (int b = 0; b < a; b++)
            if (strcmp(m->file->part_names[a], m->file->part_names[b]) == 0)
                return sx_error(SX_E_FORMAT, "%s: two outputs named %s", path,
                                m->file->part_names[a]);
    return parse_parts(path, "inputs", sx_cg_file_meta(f, "inputs"), &m->file->n_in_parts, NULL,
                       m->file->in_part_rank, m->file->in_part_shape);
}

/* The metadata sx_nn_model_save writes back, copied from the file into m->file->meta. */
static sx_status keep_meta(const sx_cg_file *f, sx_nn_model *m)
{
    static const char *const keys[NN_FILE_META] = {"network", "model_version", "outputs", "inputs"};
    for (int i = 0; i < NN_FILE_META; i++) {
        const char *v = sx_cg_file_meta(f, keys[i]);
        if (v == NULL)
            continue;
        if ((m->file->meta[i] = sx_alloc(strlen(v) + 1)) == NULL)
            return SX_E_NOMEM;
        strcpy(m->file->meta[i], v);
    }
    return SX_OK;
}

/* The shape of one example of what the listed parts make: the one part's own, or (total). */
static int parts_shape(int n, const int *ranks, int64_t (*shapes)[SX_MAX_RANK], int64_t *shape)
{
    if (n == 1) {
        memcpy(shape, shapes[0], (size_t)ranks[0] * sizeof *shape);
        return ranks[0];
    }
    shape[0] = 0;
    for (int k = 0; k < n; k++)
        shape[0] += sx_shape_size(ranks[k], shapes[k]);
    return 1;
}

/* Judge the graph's x and y before reading anything from them: x is an input (batch, example
 * shape) with an example of rank 1..7 (sx_nn_input's), y is (batch, classes) of x's dtype
 * (version 1), or in version 2 y has the outputs' shape and x the inputs'. */
static sx_status loaded_io(const char *path, sx_nn_model *m, int64_t version)
{
    const sx_cg_node *x = m->x, *y = m->out;
    int64_t batch = m->batch;
    int xr = sx_cg_node_rank(x), yr = sx_cg_node_rank(y);
    const int64_t *xs = sx_cg_node_shape(x), *ys = sx_cg_node_shape(y);
    char a[128], b[128];
    if (version >= 2) {
        int64_t want_y[SX_MAX_RANK], want_x[SX_MAX_RANK];
        want_y[0] = want_x[0] = batch;
        int wy =
            1 + parts_shape(m->file->n_parts, m->file->part_rank, m->file->part_shape, want_y + 1);
        int wx = 1 + parts_shape(m->file->n_in_parts, m->file->in_part_rank, m->file->in_part_shape,
                                 want_x + 1);
        bool cls = m->classes == 0 || (wy == 2 && want_y[1] == m->classes);
        if (sx_cg_node_op(x) != SX_OP_INPUT || !sx_shape_equal(xr, xs, wx, want_x) ||
            !sx_shape_equal(yr, ys, wy, want_y) || sx_cg_node_dtype(y) != sx_cg_node_dtype(x) ||
            !cls) {
            char c[128], d[128];
            return sx_error(SX_E_FORMAT,
                            "%s: not a model's x and y: x is %s %s %s, y %s %s (want x an input "
                            "%s and y %s of its dtype, classes %lld)",
                            path, sx_cg_op_name(sx_cg_node_op(x)),
                            sx_dtype_name(sx_cg_node_dtype(x)), sx_shape_str(xr, xs, a, sizeof a),
                            sx_dtype_name(sx_cg_node_dtype(y)), sx_shape_str(yr, ys, b, sizeof b),
                            sx_shape_str(wx, want_x, c, sizeof c),
                            sx_shape_str(wy, want_y, d, sizeof d), (long long)m->classes);
        }
    } else if (sx_cg_node_op(x) != SX_OP_INPUT || xr < 2 || xs[0] != batch || yr != 2 ||
               ys[0] != batch || ys[1] != m->classes ||
               sx_cg_node_dtype(y) != sx_cg_node_dtype(x)) {
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
    m->out_rank = yr - 1;
    memcpy(m->out_shape, ys + 1, (size_t)m->out_rank * sizeof *m->out_shape);
    if (version < 2) { /* one unnamed output, one input */
        m->file->n_parts = 1;
        snprintf(m->file->part_names[0], sizeof m->file->part_names[0], "y");
        m->file->part_rank[0] = m->out_rank;
        memcpy(m->file->part_shape[0], m->out_shape, sizeof m->file->part_shape[0]);
        m->file->n_in_parts = 1;
        m->file->in_part_rank[0] = m->in_rank;
        memcpy(m->file->in_part_shape[0], m->in_shape, sizeof m->file->in_part_shape[0]);
    }
    return SX_OK;
}

sx_status nn_model_prep_check(const char *path, const sx_nn_model *m)
{
    const nn_prep *p = &m->file->prep;
    int64_t in_size = sx_shape_size(m->in_rank, m->in_shape);
    int64_t out_last = m->out_rank > 0 ? m->out_shape[m->out_rank - 1] : 1;
    int64_t out_size = sx_shape_size(m->out_rank, m->out_shape);
    if (p->norm_n > 0 && p->norm_n != in_size && p->norm_n != m->in_shape[m->in_rank - 1])
        return sx_error(SX_E_FORMAT, "%s: %lld normalisation values for an input of %lld", path,
                        (long long)p->norm_n, (long long)in_size);
    if (p->target_n > 0 && p->target_n != out_size && p->target_n != out_last)
        return sx_error(SX_E_FORMAT, "%s: %lld target scales for an output of %lld", path,
                        (long long)p->target_n, (long long)out_size);
    if (p->n_classes > 0 && p->n_classes != out_last)
        return sx_error(SX_E_FORMAT, "%s: %lld class names for %lld outputs", path,
                        (long long)p->n_classes, (long long)out_last);
    if (p->n_features > 0 && p->n_features != in_size)
        return sx_error(SX_E_FORMAT, "%s: %lld feature names for an input of %lld", path,
                        (long long)p->n_features, (long long)in_size);
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
    if (m == NULL || (m->file = sx_calloc(1, sizeof *m->file)) == NULL) {
        sx_free(m);
        return SX_E_NOMEM;
    }
    m->batch = batch;
    sx_cg_file *f = NULL;
    sx_status s = sx_cg_file_read(path, &f);
    int64_t version = 1;
    if (s == SX_OK)
        s = loaded_meta(path, f, m, &version);
    if (s == SX_OK)
        s = keep_meta(f, m);
    /* the file's graph must have outputs x and y and run for this batch: anything else is a
     * bad model file (SX_E_FORMAT naming it), not a bad argument. The model keeps the file's
     * graph (the one copy of the weights) and frees the file's bytes. */
    const char *names[2] = {"x", "y"};
    sx_cg_node *xy[2];
    bool graph_stage = s == SX_OK;
    if (s == SX_OK && (s = sx_cg_file_graph(f, 2, names, &m->file->plain, xy)) == SX_OK) {
        m->file->plain_x = xy[0];
        m->file->plain_y = xy[1];
    }
    sx_cg_file_free(f);
    if (s == SX_OK)
        s = nn_loaded_graph(m, batch);
    if (graph_stage && s != SX_OK && s != SX_E_NOMEM) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", sx_last_error());
        s = sx_error(SX_E_FORMAT, "%s: not a model's graph for batch %lld: %s", path,
                     (long long)batch, msg);
    }
    if (s == SX_OK)
        s = loaded_io(path, m, version);
    if (s == SX_OK)
        s = nn_model_prep_check(path, m);
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
    nn_model_file *file = sx_calloc(1, sizeof *file);
    nn_model_source *own = sx_alloc(sizeof *own);
    if (m == NULL || file == NULL || own == NULL) {
        sx_free(m);
        sx_free(file);
        sx_free(own);
        if (src->free != NULL)
            src->free(src->ctx);
        return SX_E_NOMEM;
    }
    *own = *src;
    m->file = file;
    m->file->src = own;
    m->batch = batch;
    m->file->prep.scale = 1;
    m->file->prep.in_graph = true;
    sx_status s = nn_loaded_graph(m, batch);
    if (s == SX_OK) {
        const int64_t *ys = sx_cg_node_shape(m->out);
        m->classes = sx_cg_node_rank(m->out) == 2 ? ys[1] : -1;
        s = loaded_io("nn_model_from_source", m, 1);
    }
    if (s != SX_OK) {
        sx_nn_model_free(m);
        return s;
    }
    *out = m;
    return SX_OK;
}

sx_status nn_checkpoint_save(sx_nn_net *net, const sx_nn_train_params *p, const char *path)
{
    return nn_checkpoint_save_state(net, p, NULL, path);
}

sx_status nn_checkpoint_load(sx_nn_net *net, const sx_nn_train_params *p, const char *path)
{
    return nn_checkpoint_load_state(net, p, NULL, path);
}
