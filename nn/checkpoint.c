/* checkpoint.c: checkpoints, in cgraph's checksummed file format (sx_cg_save): the weights,
 * optimiser state, step counters and the dropout generator, the run's batch size and optimiser,
 * and the loop's schedule state, so that resuming repeats the same run; and the network's
 * counters. */
#include "nn_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
sx_status nn_parse_i64(const char *path, const char *key, const char *v, int64_t *out)
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
        SX_TRY(nn_parse_i64(path, "checkpoint_version", ver, &version));
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
        SX_TRY(nn_parse_i64(path, "batch", b, &batch));
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
        SX_TRY(nn_parse_i64(path, "schedule.total_steps", t, &rs->total_steps));
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
    SX_TRY(nn_parse_i64(path, "plateau.bad", bad, &nbad));
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
        s = nn_parse_i64(path, "step", sx_cg_file_meta(f, "step"), &step);
    if (s == SX_OK)
        s = nn_parse_i64(path, "epoch", sx_cg_file_meta(f, "epoch"), &epoch);
    if (s == SX_OK && sx_cg_file_meta(f, "epoch_step") != NULL) /* absent: at an epoch's end */
        s = nn_parse_i64(path, "epoch_step", sx_cg_file_meta(f, "epoch_step"), &epoch_step);
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

sx_status nn_checkpoint_save(sx_nn_net *net, const sx_nn_train_params *p, const char *path)
{
    return nn_checkpoint_save_state(net, p, NULL, path);
}

sx_status nn_checkpoint_load(sx_nn_net *net, const sx_nn_train_params *p, const char *path)
{
    return nn_checkpoint_load_state(net, p, NULL, path);
}

sx_status sx_nn_checkpoint_save(sx_nn_net *net, const sx_nn_train_params *p, const char *path)
{
    if (net == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_nn_checkpoint_save: NULL argument");
    sx_nn_train_params tp = p ? *p : sx_nn_train_params_default();
    return nn_checkpoint_save(net, &tp, path);
}

sx_status sx_nn_checkpoint_load(sx_nn_net *net, const sx_nn_train_params *p, const char *path)
{
    if (net == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_nn_checkpoint_load: NULL argument");
    sx_nn_train_params tp = p ? *p : sx_nn_train_params_default();
    SX_TRY(nn_check_train_kind(net, tp.optim.kind, "sx_nn_checkpoint_load"));
    return nn_checkpoint_load(net, &tp, path);
}

int64_t sx_nn_net_steps(const sx_nn_net *net)
{
    return net != NULL ? net->step : -1;
}

int64_t sx_nn_net_epochs(const sx_nn_net *net)
{
    return net != NULL ? net->epoch : -1;
}

int64_t sx_nn_net_epoch_steps(const sx_nn_net *net)
{
    return net != NULL ? net->epoch_step : -1;
}
