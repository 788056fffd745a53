/* predict.c: inference through a compiled or loaded model: a batch smaller than the model's
 * runs on a graph of its own size kept for the next call (compiled over the network in the
 * model's arena, or over a loaded model's file graph), and a large batch of small
 * examples is cut into sub-batches that threads run side by side on replicas of the graph. */
#include "nn_impl.h"
#include "par_impl.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* The frozen inference graph of a loaded model (over its plain graph's weights, not a copy of
 * them) or of a source's for batches of n into m. */
sx_status nn_loaded_graph(sx_nn_model *m, int64_t n)
{
    sx_cg_node *outs[2];
    sx_cg_graph *g = NULL;
    if (m->file->src != NULL) {
        SX_TRY(m->file->src->build(m->file->src->ctx, n, &g, &outs[0], &outs[1]));
    } else { /* over the plain graph's weights, not a copy of them */
        outs[0] = m->file->plain_x;
        outs[1] = m->file->plain_y;
        SX_TRY(sx_cg_graph_copy_shared(m->file->plain, 2, outs, n, &g, outs));
    }
    sx_status s = m->file->src != NULL && !m->file->src->optimise
                      ? SX_OK
                      : sx_cg_optimise(g, 1, &outs[1], NULL, NULL);
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

/* An inference model over m's weights for batches of n rows, m its owner: compiled over m's
 * network (in m's arena when lend: the two never run at the same time; else in its own), or
 * over a loaded or imported model's file part (its own arena). */
static sx_status model_for_batch(sx_nn_model *m, int64_t n, bool lend, sx_nn_model **out)
{
    *out = NULL;
    if (m->c.net != NULL) {
        size_t bytes = 0;
        void *arena = lend ? sx_cg_arena(m->g, &bytes) : NULL;
        return nn_compile_infer_at("sx_nn_model_predict", m->c.net, n, arena, bytes, m, out);
    }
    sx_nn_model *s = sx_calloc(1, sizeof *s);
    if (s == NULL)
        return SX_E_NOMEM;
    *s = (sx_nn_model){.file = m->file, /* the owner's */
                       .owner = m,
                       .batch = n,
                       .dtype = m->dtype,
                       .in_rank = m->in_rank,
                       .classes = m->classes,
                       .out_rank = m->out_rank,
                       .ids_in = m->ids_in};
    memcpy(s->in_shape, m->in_shape, sizeof s->in_shape);
    memcpy(s->out_shape, m->out_shape, sizeof s->out_shape);
    sx_status st = nn_loaded_graph(s, n);
    if (st != SX_OK) {
        sx_nn_model_free(s);
        return st;
    }
    *out = s;
    return SX_OK;
}

sx_status nn_model_smaller(sx_nn_model *m, int64_t n, sx_nn_model **out)
{
    for (int i = 0; i < NN_SMALLER; i++)
        if (m->pred.smaller[i] != NULL && m->pred.smaller[i]->batch == n) {
            *out = m->pred.smaller[i];
            return SX_OK;
        }
    int slot = 0;
    for (int i = 0; i < NN_SMALLER; i++)
        if (m->pred.smaller[i] == NULL) {
            slot = i;
            break;
        }
    sx_nn_model_free(m->pred.smaller[slot]);
    m->pred.smaller[slot] = NULL;
    SX_TRY(model_for_batch(m, n, true, &m->pred.smaller[slot]));
    *out = m->pred.smaller[slot];
    return SX_OK;
}

/* ------------------------------------------------------------ inference in sub-batches */

/* sx_nn_model_predict cuts a large batch of small examples into sub-batches that threads run
 * side by side, each through its own copy of the graph (the weights shared) with one kernel
 * thread: a sub-batch's values stay in the core's cache from one layer to the next, and no
 * kernel waits for the other threads. Measured on resnet20 (28x28 images, 2 cores): one thread
 * infers 4438 images/s in sub-batches of 16 against 3597 in batches of 128; on 2 threads 8300
 * against 5570 (mobilenet 10000 against 6200, lenet5 116000 against 88000). Automatic rows per
 * sub-batch: the largest power of two whose share of the graph's arena (arena bytes / batch,
 * per example) stays within NN_SUB_BYTES, at most NN_SUB_MAX; no cut when fewer than NN_SUB_MIN
 * rows fit (large images: their convolutions split well over the threads, and the batch
 * amortises reading the weights) or when the weights outweigh a sub-batch's values. */
#define NN_SUB_BYTES ((size_t)4 << 20)
#define NN_SUB_MAX 32
#define NN_SUB_MIN 4

sx_status sx_nn_model_set_sub_batch(sx_nn_model *m, int64_t rows)
{
    if (m == NULL || rows < 0)
        return sx_error(SX_E_ARG, "sx_nn_model_set_sub_batch: %s",
                        m == NULL ? "NULL model" : "rows < 0");
    if (rows != m->pred.sub_set) /* the copies were made for the old rows */
        for (int i = 0; i < NN_REPLICAS; i++) {
            sx_nn_model_free(m->pred.rep[i]);
            m->pred.rep[i] = NULL;
        }
    m->pred.sub_set = rows;
    m->pred.sub_known = false;
    return SX_OK;
}

/* Bytes of the weights (parameters and constants) m's graph reads. */
static size_t weight_bytes(const sx_nn_model *m)
{
    size_t b = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(m->g); i++) {
        const sx_cg_node *n = sx_cg_graph_node(m->g, i);
        if (n != NULL && (sx_cg_node_op(n) == SX_OP_PARAM || sx_cg_node_op(n) == SX_OP_CONST))
            b += (size_t)sx_cg_node_size(n) * sx_dtype_size(sx_cg_node_dtype(n));
    }
    return b;
}

/* Rows per sub-batch for m (0: whole batches). */
static int64_t sub_rows(sx_nn_model *m)
{
    if (m->pred.sub_known)
        return m->pred.sub;
    int64_t s = 0;
    if (m->pred.sub_set > 0) {
        s = m->pred.sub_set < m->batch ? m->pred.sub_set : 0;
    } else {
        size_t bytes = 0;
        (void)sx_cg_arena(m->g, &bytes); /* 0 for an unplanned graph: no cut */
        const size_t per = bytes / (size_t)m->batch + 1;
        for (int64_t r = NN_SUB_MIN;
             bytes > 0 && r <= NN_SUB_MAX && (size_t)r * per <= NN_SUB_BYTES; r *= 2)
            s = r;
        /* every sub-batch reads all the weights again: only when they weigh no more than its
         * values (the reference MNIST network's 26 MB dense layer lost a third of its speed) */
        if (s > 0 && weight_bytes(m) > (size_t)s * per)
            s = 0;
        s = s < m->batch ? s : 0;
    }
    m->pred.sub = s;
    m->pred.sub_known = true;
    return s;
}

int64_t sx_nn_model_sub_batch(sx_nn_model *m)
{
    return m == NULL || m->train ? 0 : sub_rows(m);
}

sx_tensor nn_rows_at(const sx_tensor *t, int64_t lo, int64_t rows)
{
    int64_t row = t->shape[0] > 0 ? t->size / t->shape[0] : 0;
    sx_tensor v = sx_tensor_view(t->dtype, t->rank, t->shape,
                                 (char *)t->data + lo * row * (int64_t)sx_dtype_size(t->dtype));
    v.shape[0] = rows;
    v.size = sx_shape_size(v.rank, v.shape);
    return v;
}

/* rows of x through model r into the same rows of out */
static sx_status predict_rows(sx_nn_model *r, const sx_tensor *x, sx_tensor *out)
{
    SX_TRY(sx_cg_input_set(r->g, r->x, x, SX_CG_BORROW));
    SX_TRY(nn_invalidate_params(r));
    SX_TRY(sx_cg_eval(r->g, 1, &r->out));
    return sx_tensor_copy_out(sx_cg_value(r->out), out);
}

typedef struct split_ctx {
    sx_nn_model *m;
    const sx_tensor *x;
    sx_tensor *out;
    int64_t sub;
    atomic_int failed;
    sx_status status;
    char msg[512];
} split_ctx;

/* Sub-batch t on the replica of the thread that runs it (sx__par_slot: a thread keeps its
 * index for the whole loop, and kernels called inside a task run on that thread alone). */
static void split_task(void *ctx, int64_t t)
{
    split_ctx *c = ctx;
    if (atomic_load_explicit(&c->failed, memory_order_relaxed))
        return;
    sx_tensor xv = nn_rows_at(c->x, t * c->sub, c->sub),
              ov = nn_rows_at(c->out, t * c->sub, c->sub);
    sx_status s = predict_rows(c->m->pred.rep[sx__par_slot()], &xv, &ov);
    if (s != SX_OK && atomic_exchange(&c->failed, 1) == 0) {
        c->status = s;
        snprintf(c->msg, sizeof c->msg, "%s", sx_last_error());
    }
}

/* The full sub-batches of x (n rows, sub each) side by side, then the rest through m itself. */
static sx_status predict_split(sx_nn_model *m, const sx_tensor *x, sx_tensor *out, int64_t n,
                               int64_t sub)
{
    const int64_t chunks = n / sub;
    int threads = sx_threads_get();
    threads = threads < NN_REPLICAS ? threads : NN_REPLICAS;
    threads = (int64_t)threads < chunks ? threads : (int)chunks;
    for (int i = 0; i < threads; i++)
        if (m->pred.rep[i] == NULL)
            SX_TRY(model_for_batch(m, sub, false, &m->pred.rep[i]));
    split_ctx c = {.m = m, .x = x, .out = out, .sub = sub, .status = SX_OK};
    atomic_init(&c.failed, 0);
    sx__par_for_upto(threads, chunks, split_task, &c);
    if (atomic_load(&c.failed))
        return sx_error(c.status, "%s", c.msg);
    const int64_t rest = n - chunks * sub;
    if (rest == 0)
        return SX_OK;
    sx_nn_model *r = NULL;
    SX_TRY(nn_model_smaller(m, rest, &r));
    sx_tensor xv = nn_rows_at(x, chunks * sub, rest), ov = nn_rows_at(out, chunks * sub, rest);
    return predict_rows(r, &xv, &ov);
}

sx_status sx_nn_model_predict(sx_nn_model *m, const sx_tensor *x, sx_tensor *out)
{
    const char *who = "sx_nn_model_predict";
    if (m == NULL || x == NULL || out == NULL)
        return sx_error(SX_E_ARG, "%s: NULL argument", who);
    int64_t n = x->rank > 0 ? x->shape[0] : 0;
    if (n < 1 || n > m->batch)
        return sx_error(SX_E_SHAPE, "%s: %lld examples (want 1..%lld)", who, (long long)n,
                        (long long)m->batch);
    if (m->train)
        return sx_error(SX_E_ARG, "%s: a training model (compile for inference)", who);
    /* out must be (n, output shape) of the model's dtype exactly, checked before running */
    int64_t want[SX_MAX_RANK], xs[SX_MAX_RANK];
    int wr = m->out_rank + 1;
    want[0] = n;
    memcpy(want + 1, m->out_shape, (size_t)m->out_rank * sizeof *want);
    if (out->dtype != m->dtype)
        return sx_error(SX_E_DTYPE, "%s: out is %s, the model's outputs %s", who,
                        sx_dtype_name(out->dtype), sx_dtype_name(m->dtype));
    if (!sx_shape_equal(out->rank, out->shape, wr, want)) {
        char a[160], b[160];
        return sx_error(SX_E_SHAPE, "%s: out has shape %s, the result %s", who,
                        sx_shape_str(out->rank, out->shape, a, sizeof a),
                        sx_shape_str(wr, want, b, sizeof b));
    }
    xs[0] = n;
    memcpy(xs + 1, m->in_shape, (size_t)m->in_rank * sizeof *xs);
    SX_TRY(nn_batch_float(who, "x", m, x, m->ids_in, &m->stage_x, &x));
    SX_TRY(nn_check_batch(who, m, x, m->in_rank + 1, xs, n));
    const int64_t sub = sub_rows(m);
    const int threads = sx__par_threads();
    /* a profiled graph or one run by engine workers keeps whole batches (its profile and its
     * workers are the graph's) */
    if (sub > 0 && n >= (threads > 1 ? threads : 2) * sub && sx_cg_workers(m->g) == 1 &&
        !sx_cg_profile_enabled(m->g))
        return predict_split(m, x, out, n, sub);
    sx_nn_model *r = m;
    if (n < m->batch) /* a graph for this batch size, kept for the next call */
        SX_TRY(nn_model_smaller(m, n, &r));
    return predict_rows(r, x, out);
}
