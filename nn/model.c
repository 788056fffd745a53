/* model.c: a model's lifetime (made over a network and compiled by compile.c, freed with its
 * parts), its training step, the eager paths, the batch checks and the accessors. Inference
 * through a model (smaller batches, sub-batches) is predict.c's; model files are io.c's. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

void nn_model_file_free(nn_model_file *f)
{
    if (f == NULL)
        return;
    sx_cg_graph_free(f->plain);
    for (int i = 0; i < NN_FILE_META; i++)
        sx_free(f->meta[i]);
    nn_prep_free(&f->prep);
    if (f->src != NULL && f->src->free != NULL)
        f->src->free(f->src->ctx);
    sx_free(f->src);
    sx_free(f);
}

void sx_nn_model_free(sx_nn_model *m)
{
    if (m == NULL)
        return;
    sx_nn_net *net = m->c.net;
    bool train = m->train != NULL;
    for (int i = 0; i < NN_SMALLER; i++)
        sx_nn_model_free(m->pred.smaller[i]);
    for (int i = 0; i < NN_REPLICAS; i++)
        sx_nn_model_free(m->pred.rep[i]);
    nn_build_free(&m->c.b);
    if (m->train != NULL)
        nn_dp_free(m->train->dp);
    sx_free(m->train);
    sx_tensor_free(m->stage_x);
    sx_tensor_free(m->stage_y);
    sx_cg_graph_free(m->g);
    sx_free(m->outs);
    if (m->owner == NULL) /* after every graph that reads its weights */
        nn_model_file_free(m->file);
    sx_free(m);
    if (net == NULL) /* a loaded model */
        return;
    net->n_models--;
    if (train)
        net->n_train_models--;
    if (net->orphan && net->n_models == 0) /* sx_nn_net_free came first */
        sx_nn_net_free(net);
}

sx_nn_compile_report sx_nn_model_report(const sx_nn_model *m)
{
    sx_nn_compile_report zero;
    memset(&zero, 0, sizeof zero);
    return m != NULL ? m->report : zero;
}

sx_cg_graph *sx_nn_model_graph(sx_nn_model *m)
{
    return m != NULL ? m->g : NULL;
}

sx_status nn_check_train_kind(const sx_nn_net *net, sx_optim_kind kind, const char *who)
{
    if (net->n_train_models > 0 && net->train_kind != kind)
        return sx_error(SX_E_STATE,
                        "%s: a training model with optimiser %s is alive over network %s: free it "
                        "before training with %s (the two would share the parameters' optimiser "
                        "state)",
                        who, sx_optim_name(net->train_kind), net->name, sx_optim_name(kind));
    return SX_OK;
}

/* A new model over net (counted in the network, which refuses new layers while it lives). */
static sx_status model_new(const char *who, sx_nn_net *net, const sx_nn_train_params *p,
                           int64_t batch, bool train, sx_nn_model **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    if (net == NULL)
        return sx_error(SX_E_ARG, "%s: net is NULL", who);
    if (batch < 1)
        return sx_error(SX_E_ARG, "%s: batch %lld (want >= 1)", who, (long long)batch);
    /* every layer's value with the batch axis must fit */
    for (int i = 0; i < net->n_layers; i++) {
        const sx_nn_layer *l = net->layers[i];
        int64_t n = sx_shape_size(l->rank, l->shape);
        if (n > INT64_MAX / 8 / batch) {
            char a[160];
            return sx_error(
                SX_E_SHAPE, "%s: a batch of %lld examples of layer %s's %s has too many elements",
                who, (long long)batch, l->name, sx_shape_str(l->rank, l->shape, a, sizeof a));
        }
    }
    sx_nn_train_params params = p ? *p : sx_nn_train_params_default();
    if (train)
        SX_TRY(nn_check_train_kind(net, params.optim.kind, who));
    nn_prep_freeze(net); /* the graph is built with the preprocessing as it is now */
    sx_nn_model *m = sx_calloc(1, sizeof *m);
    nn_model_train *tr = train ? sx_calloc(1, sizeof *tr) : NULL;
    if (m == NULL || (train && tr == NULL)) {
        sx_free(m);
        sx_free(tr);
        return SX_E_NOMEM;
    }
    m->c.net = net;
    m->train = tr;
    m->batch = batch;
    m->c.params = params;
    m->c.n_layers = net->n_layers;
    m->dtype = net->dtype;
    m->ids_in = nn_input_ids_count(net) > 0 && nn_input_ids_count(net) == nn_input_count(net);
    const sx_nn_layer *in = nn_input_layer(net), *last = nn_output_layer(net);
    if (in != NULL)
        m->in_rank = nn_input_shape(net, m->in_shape); /* (total) with several inputs */
    m->classes = last != NULL && last->rank == 1 && net->n_outputs < 2 ? last->shape[0] : 0;
    if (last != NULL) {
        m->out_rank = last->rank;
        memcpy(m->out_shape, last->shape, (size_t)last->rank * sizeof *m->out_shape);
    }
    net->n_models++;
    if (train) {
        net->n_train_models++;
        net->train_kind = params.optim.kind;
        tr->comm = sx_nn_comm_of(&params); /* data-parallel over it when it has > 1 rank */
    }
    *out = m;
    return SX_OK;
}

sx_status sx_nn_compile_train(sx_nn_net *net, const sx_nn_train_params *p, int64_t batch,
                              sx_nn_model **out)
{
    SX_TRY(model_new("sx_nn_compile_train", net, p, batch, true, out));
    sx_nn_model *m = *out;
    double t0 = sx_seconds();
    sx_status s = nn_model_build("sx_nn_compile_train", m, NULL);
    if (s == SX_OK)
        s = nn_model_compile(m);
    if (s != SX_OK) {
        sx_nn_model_free(m);
        *out = NULL;
        return s;
    }
    m->report.compile_seconds = sx_seconds() - t0;
    return SX_OK;
}

/* The inference graph, planned in `lend` when it fits there (else in an arena of its own). */
sx_status nn_compile_infer_at(const char *who, sx_nn_net *net, int64_t batch, void *lend,
                              size_t lend_bytes, sx_nn_model *owner, sx_nn_model **out)
{
    SX_TRY(model_new(who, net, NULL, batch, false, out));
    sx_nn_model *m = *out;
    m->owner = owner;
    m->lend = lend;
    m->lend_bytes = lend_bytes;
    double t0 = sx_seconds();
    sx_status s = nn_model_build(who, m, NULL);
    if (s == SX_OK)
        s = nn_model_compile(m);
    if (s != SX_OK) {
        sx_nn_model_free(m);
        *out = NULL;
        return s;
    }
    m->report.compile_seconds = sx_seconds() - t0;
    return SX_OK;
}

sx_status sx_nn_compile_infer(sx_nn_net *net, int64_t batch, sx_nn_model **out)
{
    return nn_compile_infer_at("sx_nn_compile_infer", net, batch, NULL, 0, NULL, out);
}

sx_status nn_compile_infer_lent(sx_nn_net *net, int64_t batch, const sx_nn_model *lender,
                                sx_nn_model **out)
{
    size_t bytes = 0;
    void *lend = lender != NULL ? sx_cg_arena(lender->g, &bytes) : NULL;
    return nn_compile_infer_at("sx_nn_compile_infer", net, batch, lend, bytes, NULL, out);
}

sx_status nn_batch_float(const char *who, const char *what, const sx_nn_model *m,
                         const sx_tensor *x, bool ints_ok, sx_tensor **stage, const sx_tensor **out)
{
    *out = x;
    if (x == NULL || !sx_dtype_is_int(x->dtype))
        return SX_OK; /* nn_check_batch judges it */
    if (!ints_ok)
        return sx_error(SX_E_DTYPE,
                        "%s: %s is %s; integer batches are for inputs of ids (sx_nn_input_ids) "
                        "and sparse targets, this model takes %s",
                        who, what, sx_dtype_name(x->dtype), sx_dtype_name(m->dtype));
    if (*stage == NULL || !sx_shape_equal((*stage)->rank, (*stage)->shape, x->rank, x->shape)) {
        sx_tensor_free(*stage);
        *stage = NULL;
        SX_TRY(sx_tensor_new(m->dtype, x->rank, x->shape, stage));
    }
    /* an index travels through the graph as a float: it must be held exactly */
    const int64_t lim = m->dtype == SX_F32 ? (int64_t)1 << 24 : (int64_t)1 << 53;
    for (int64_t i = 0; i < x->size; i++) {
        int64_t v = x->dtype == SX_I32 ? SX_I32P(x)[i] : SX_I64P(x)[i];
        if (v > lim || v < -lim)
            return sx_error(SX_E_RANGE,
                            "%s: %s element %lld is %lld, beyond the %s model's exact "
                            "integers (|v| <= %lld)",
                            who, what, (long long)i, (long long)v, sx_dtype_name(m->dtype),
                            (long long)lim);
    }
    SX_TRY(sx_tensor_cast_out(x, *stage));
    *out = *stage;
    return SX_OK;
}

sx_status nn_check_batch(const char *who, const sx_nn_model *m, const sx_tensor *t, int rank,
                         const int64_t *shape, int64_t rows)
{
    if (t == NULL)
        return sx_error(SX_E_ARG, "%s: NULL tensor", who);
    if (t->dtype != m->dtype)
        return sx_error(SX_E_DTYPE, "%s: the batch is %s, the model %s", who,
                        sx_dtype_name(t->dtype), sx_dtype_name(m->dtype));
    bool ok = t->rank == rank && t->shape[0] == rows;
    for (int i = 1; ok && i < rank; i++)
        ok = t->shape[i] == shape[i];
    if (!ok) {
        char a[128], b[128];
        int64_t want[SX_MAX_RANK];
        memcpy(want, shape, (size_t)rank * sizeof *want);
        want[0] = rows;
        return sx_error(SX_E_SHAPE, "%s: batch of shape %s, want %s", who,
                        sx_shape_str(t->rank, t->shape, a, sizeof a),
                        sx_shape_str(rank, want, b, sizeof b));
    }
    return SX_OK;
}

/* Weights may have changed since the last run (another model sharing them trained, or a
 * checkpoint was loaded): what depends on them is recomputed. */
sx_status nn_invalidate_params(sx_nn_model *m)
{
    int n = m->c.n_layers * NN_MAX_PARAMS;
    for (int i = 0; m->c.b.param_nodes != NULL && i < n; i++)
        if (m->c.b.param_nodes[i] != NULL)
            SX_TRY(sx_cg_invalidate(m->g, m->c.b.param_nodes[i]));
    return SX_OK;
}

static sx_status read_results(sx_nn_model *m, double *loss, int64_t *correct)
{
    if (loss != NULL)
        *loss = sx_tensor_get(sx_cg_value(m->train->loss), 0);
    if (correct != NULL)
        *correct = (int64_t)sx_tensor_get(sx_cg_value(m->train->correct), 0);
    return SX_OK;
}

sx_status sx_nn_model_step(sx_nn_model *m, const sx_tensor *x, const sx_tensor *y, double lr,
                           int64_t step, double *loss, int64_t *correct)
{
    const char *who = "sx_nn_model_step";
    if (m == NULL || !m->train)
        return sx_error(SX_E_ARG, "%s: not a training model", who);
    SX_TRY(nn_batch_float(who, "x", m, x, m->ids_in, &m->stage_x, &x));
    SX_TRY(nn_batch_float(who, "y", m, y, m->c.params.sparse_targets, &m->stage_y, &y));
    SX_TRY(nn_check_batch(who, m, x, sx_cg_node_rank(m->x), sx_cg_node_shape(m->x), m->batch));
    SX_TRY(nn_check_batch(who, m, y, sx_cg_node_rank(m->train->y), sx_cg_node_shape(m->train->y),
                          m->batch));
    sx_nn_net *net = m->c.net;
    sx_cg_graph *g = m->g;
    SX_TRY(sx_cg_input_set(g, m->x, x, SX_CG_BORROW));
    SX_TRY(sx_cg_input_set(g, m->train->y, y, SX_CG_BORROW));
    SX_TRY(nn_set_scalar(g, m->train->lr, lr));
    SX_TRY(nn_set_scalar(g, m->train->step, (double)step));
    for (int i = 0; i < m->c.b.n_masks; i++) /* a new dropout mask every step */
        SX_TRY(sx_cg_invalidate(g, m->c.b.masks[i]));
    SX_TRY(nn_invalidate_params(m));
    *sx_cg_rng(g, m->c.b.rng_id) = net->dropout_rng;
    if (m->train->dp != NULL) /* data-parallel: this rank's share and dropout rows */
        SX_TRY(nn_dp_before_step(m));
    SX_TRY(sx_cg_eval(g, m->n_outs, m->outs));
    net->dropout_rng = *sx_cg_rng(g, m->c.b.rng_id);
    return read_results(m, loss, correct);
}

/* One eager step: the whole graph is built, and so computed, with the batch's values. */
sx_status nn_eager_step(sx_nn_net *net, const sx_nn_train_params *p, const sx_tensor *x,
                        const sx_tensor *y, double lr, int64_t step, double *loss, int64_t *correct)
{
    sx_nn_model *m = NULL;
    SX_TRY(model_new("sx_nn_train (eager step)", net, p, x->shape[0], true, &m));
    nn_feed f = {x, y, lr, step};
    sx_status s = nn_model_build("sx_nn_train (eager step)", m, &f);
    if (s == SX_OK) {
        read_results(m, loss, correct);
        net->dropout_rng = *sx_cg_rng(m->g, m->c.b.rng_id);
    }
    sx_nn_model_free(m);
    return s;
}

/* Inference without the compiler: the forward graph built in eager mode (each node computed as
 * it is made, every intermediate kept until the graph is freed), for comparison with the
 * compiled path (bench/zoo --eager). */
sx_status sx_nn_predict_eager(sx_nn_net *net, const sx_tensor *x, sx_tensor *out)
{
    const char *who = "sx_nn_predict_eager";
    if (net == NULL || x == NULL || out == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument", who);
    int64_t n = x->rank > 0 ? x->shape[0] : 0;
    if (n < 1)
        return sx_error(SX_E_SHAPE, "%s: %lld examples (want >= 1)", who, (long long)n);
    sx_nn_model *m = NULL;
    SX_TRY(model_new(who, net, NULL, n, false, &m));
    int64_t want[SX_MAX_RANK], xs[SX_MAX_RANK];
    want[0] = n;
    memcpy(want + 1, m->out_shape, (size_t)m->out_rank * sizeof *want);
    xs[0] = n;
    memcpy(xs + 1, m->in_shape, (size_t)m->in_rank * sizeof *xs);
    sx_status s = nn_batch_float(who, "x", m, x, m->ids_in, &m->stage_x, &x);
    if (s == SX_OK)
        s = nn_check_batch(who, m, x, m->in_rank + 1, xs, n);
    if (s == SX_OK && out->dtype != m->dtype)
        s = sx_error(SX_E_DTYPE, "%s: out is %s, the network's outputs %s", who,
                     sx_dtype_name(out->dtype), sx_dtype_name(m->dtype));
    if (s == SX_OK && !sx_shape_equal(out->rank, out->shape, m->out_rank + 1, want)) {
        char a[160], b[160];
        s = sx_error(SX_E_SHAPE, "%s: out has shape %s, the result %s", who,
                     sx_shape_str(out->rank, out->shape, a, sizeof a),
                     sx_shape_str(m->out_rank + 1, want, b, sizeof b));
    }
    nn_feed f = {x, NULL, 0, 0};
    if (s == SX_OK)
        s = nn_model_build(who, m, &f);
    if (s == SX_OK)
        s = sx_tensor_copy_out(sx_cg_value(m->out), out);
    sx_nn_model_free(m);
    return s;
}

int sx_nn_model_input_rank(const sx_nn_model *m)
{
    return m != NULL ? m->in_rank : 0;
}

const int64_t *sx_nn_model_input_shape(const sx_nn_model *m)
{
    return m != NULL ? m->in_shape : NULL;
}

int64_t sx_nn_model_classes(const sx_nn_model *m)
{
    return m != NULL ? m->classes : 0;
}

double sx_nn_model_input_scale(const sx_nn_model *m)
{
    return sx_nn_model_preprocess(m).input_scale;
}

sx_dtype sx_nn_model_dtype(const sx_nn_model *m)
{
    return m != NULL ? m->dtype : (sx_dtype)-1;
}

/* ---------------------------------------------------------------- a model's outputs, inputs */

int sx_nn_model_output_rank(const sx_nn_model *m)
{
    return m != NULL ? m->out_rank : 0;
}

const int64_t *sx_nn_model_output_shape(const sx_nn_model *m)
{
    return m != NULL ? m->out_shape : NULL;
}

int sx_nn_model_n_outputs(const sx_nn_model *m)
{
    return m == NULL ? 0 : m->c.net != NULL ? nn_output_count(m->c.net) : m->file->n_parts;
}

const char *sx_nn_model_output(const sx_nn_model *m, int k, int *rank, const int64_t **shape)
{
    if (m == NULL || k < 0 || k >= sx_nn_model_n_outputs(m))
        return NULL;
    if (m->c.net != NULL) {
        const sx_nn_layer *l = nn_output_at(m->c.net, k);
        if (rank != NULL)
            *rank = l->rank;
        if (shape != NULL)
            *shape = l->shape;
        return m->c.net->n_outputs > 0 ? m->c.net->output_names[k] : "y";
    }
    if (rank != NULL)
        *rank = m->file->part_rank[k];
    if (shape != NULL)
        *shape = m->file->part_shape[k];
    return m->file->part_names[k];
}

int sx_nn_model_n_inputs(const sx_nn_model *m)
{
    return m == NULL ? 0 : m->c.net != NULL ? nn_input_count(m->c.net) : m->file->n_in_parts;
}

const int64_t *sx_nn_model_input(const sx_nn_model *m, int k, int *rank)
{
    if (m == NULL || k < 0 || k >= sx_nn_model_n_inputs(m))
        return NULL;
    if (m->c.net == NULL) {
        if (rank != NULL)
            *rank = m->file->in_part_rank[k];
        return m->file->in_part_shape[k];
    }
    for (int i = 0; i < m->c.net->n_layers; i++) {
        const sx_nn_layer *l = m->c.net->layers[i];
        if (l->kind == L_INPUT && k-- == 0) {
            if (rank != NULL)
                *rank = l->rank;
            return l->shape;
        }
    }
    return NULL;
}
