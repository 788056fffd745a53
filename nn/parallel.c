/* parallel.c: data-parallel training over a communicator (sx_nn.h, "Data-parallel
 * training"). A training model over a communicator sums its gradients inside its compiled step:
 * the gradients, in the order the backward pass completes them (the last layers' first), go into
 * buckets of up to NN_DP_BUCKET_BYTES; each bucket is an allreduce_start node (cgraph/ops/
 * collective.c) that packs its gradients, scaled by this rank's share of the global batch, into
 * one message and starts its sum through the communicator; the optimiser's updates read the
 * summed gradients through allreduce_part views, which wait for their bucket. The starts are
 * outputs placed before the updates, so the frozen order starts each sum as soon as its bucket
 * is complete and runs the rest of the backward pass while it travels (communication overlaps
 * computation). nn never links MPI: a communicator is a table of functions (mpi/ implements
 * one). */
#include "nn_impl.h"

#include <string.h>

/* A bucket closes before it would pass this many bytes (a gradient larger than this travels
 * alone) or SX_CG_MAX_BUCKET gradients: small enough that the first sums start early in the
 * backward pass, large enough that a message's latency (2 (ranks - 1) steps of a ring) is paid
 * a few times per step rather than once per gradient (resnet20: 65 gradients in 2 buckets). */
#define NN_DP_BUCKET_BYTES (1 << 20)

static const sx_nn_comm *default_comm;

void sx_nn_comm_set_default(const sx_nn_comm *c)
{
    default_comm = c;
}

const sx_nn_comm *sx_nn_comm_default(void)
{
    return default_comm;
}

const sx_nn_comm *sx_nn_comm_of(const sx_nn_train_params *p)
{
    if (p == NULL || p->local)
        return NULL;
    const sx_nn_comm *c = p->comm != NULL ? p->comm : default_comm;
    return c != NULL && c->size > 1 ? c : NULL;
}

/* The graph's communicator: the nn communicator's start and wait, or (a communicator without
 * them) its blocking allreduce at the start and nothing to wait for. */
static sx_status dp_start(void *ctx, void *buf, int64_t n, sx_dtype dt)
{
    const sx_nn_comm *c = ((nn_dp *)ctx)->comm;
    if (c->start != NULL && c->wait != NULL)
        return c->start(c->ctx, buf, n, dt);
    return c->allreduce(c->ctx, buf, n, dt, false);
}

static sx_status dp_wait(void *ctx, void *buf)
{
    const sx_nn_comm *c = ((nn_dp *)ctx)->comm;
    return c->start != NULL && c->wait != NULL ? c->wait(c->ctx, buf) : SX_OK;
}

sx_status nn_dp_new(sx_nn_model *m)
{
    m->train->dp = sx_calloc(1, sizeof *m->train->dp);
    if (m->train->dp == NULL)
        return SX_E_NOMEM;
    m->train->dp->comm = m->train->comm;
    m->train->dp->weight = 1.0 / (double)m->train->comm->size;
    m->train->dp->first_row = (int64_t)m->train->comm->rank * m->batch;
    m->train->dp->cg = (sx_cg_comm){m->train->dp, dp_start, dp_wait};
    m->train->dp->g = m->g;
    return SX_OK;
}

/* Before the graph goes: no sum may still write into a bucket (a step that failed midway). */
void nn_dp_free(nn_dp *dp)
{
    if (dp == NULL)
        return;
    for (int i = 0; i < dp->n_buckets && dp->buckets != NULL; i++) {
        const sx_tensor *v = sx_cg_value(dp->buckets[i]);
        if (v != NULL && v->data != NULL)
            (void)dp_wait(dp, v->data);
    }
    sx_free(dp->buckets);
    sx_free(dp);
}

/* Close the bucket of gradients grads[ids[0..k)]: its start, and each gradient replaced by its
 * part of the sum. */
static sx_status close_bucket(sx_nn_model *m, sx_cg_node **grads, const int *ids, int k)
{
    nn_dp *dp = m->train->dp;
    sx_cg_graph *g = m->g;
    sx_cg_node *xs[SX_CG_MAX_BUCKET], *w = dp->w;
    for (int i = 0; i < k; i++)
        xs[i] = grads[ids[i]];
    if (dp->n_buckets > 0) { /* every rank starts its sums in the same order, even in parallel */
        sx_cg_node *after[2] = {dp->w, dp->buckets[dp->n_buckets - 1]};
        w = sx_cg_op_new(g, SX_OP_SEQ, 2, after, NULL);
    }
    sx_cg_node *start = sx_cg_allreduce_start(g, w, k, xs);
    if (start == NULL)
        return sx_cg_graph_status(g);
    sx_cg_node **b = sx_realloc(dp->buckets, (size_t)(dp->n_buckets + 1) * sizeof *b);
    if (b == NULL)
        return SX_E_NOMEM;
    dp->buckets = b;
    dp->buckets[dp->n_buckets++] = start;
    int64_t at = 0;
    for (int i = 0; i < k; i++) {
        sx_cg_node *x = xs[i];
        grads[ids[i]] = sx_cg_allreduce_part(g, start, at, sx_cg_node_rank(x), sx_cg_node_shape(x));
        if (grads[ids[i]] == NULL)
            return sx_cg_graph_status(g);
        at += sx_cg_node_size(x);
    }
    dp->bytes += at * (int64_t)sx_dtype_size(sx_cg_node_dtype(start));
    return SX_OK;
}

sx_status nn_dp_buckets(sx_nn_model *m, int np, sx_cg_node **grads)
{
    nn_dp *dp = m->train->dp;
    sx_cg_graph *g = m->g;
    dp->w = sx_cg_input(g, "dp.share", m->dtype, 0, NULL);
    if (dp->w == NULL)
        return sx_cg_graph_status(g);
    SX_TRY(sx_cg_set_comm(g, &dp->cg));
    int ids[SX_CG_MAX_BUCKET], k = 0;
    int64_t bytes = 0;
    for (int i = np - 1; i >= 0; i--) { /* the order the backward pass completes them */
        int64_t b = sx_cg_node_size(grads[i]) * (int64_t)sx_dtype_size(m->dtype);
        if (k > 0 && (bytes + b > NN_DP_BUCKET_BYTES || k == SX_CG_MAX_BUCKET)) {
            SX_TRY(close_bucket(m, grads, ids, k));
            k = 0;
            bytes = 0;
        }
        ids[k++] = i;
        bytes += b;
    }
    return k > 0 ? close_bucket(m, grads, ids, k) : SX_OK;
}

sx_status nn_dp_before_step(sx_nn_model *m)
{
    nn_dp *dp = m->train->dp;
    for (int i = 0; i < dp->n_buckets; i++) /* the optimiser may have replaced them */
        dp->buckets[i] = m->outs[dp->bucket_at + i];
    double d = dp->weight;
    float f = (float)d;
    sx_dtype dt = sx_cg_node_dtype(dp->w);
    sx_tensor t = sx_tensor_view(dt, 0, NULL, dt == SX_F32 ? (void *)&f : (void *)&d);
    SX_TRY(sx_cg_input_set(m->g, dp->w, &t, SX_CG_COPY));
    return sx_cg_set_mask_row(m->g, dp->first_row);
}

/* Every parameter's value and optimiser state, the step counters and the dropout generator from
 * rank 0 (every rank then draws the same mask keys: each takes its rows of the global batch's
 * masks, sx_cg_set_mask_row). */
sx_status nn_dp_broadcast(sx_nn_net *net, const sx_nn_comm *c)
{
    int64_t counters[3] = {net->step, net->epoch, net->epoch_step};
    SX_TRY(c->bcast(c->ctx, counters, (int64_t)sizeof counters, 0));
    net->step = counters[0];
    net->epoch = counters[1];
    net->epoch_step = counters[2];
    SX_TRY(c->bcast(c->ctx, &net->dropout_rng, (int64_t)sizeof net->dropout_rng, 0));
    for (int i = 0; i < net->n_layers; i++) {
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            nn_param *pr = &net->layers[i]->params[k];
            const sx_tensor *v = pr->value;
            if (!nn_param_stored(pr))
                continue;
            SX_TRY(c->bcast(c->ctx, v->data, v->size * (int64_t)sx_dtype_size(v->dtype), 0));
            for (int s = 0; s < NN_MAX_STATES; s++) {
                const sx_tensor *st = pr->state[s];
                if (st != NULL)
                    SX_TRY(c->bcast(c->ctx, st->data, st->size * (int64_t)sx_dtype_size(st->dtype),
                                    0));
            }
        }
    }
    return SX_OK;
}

/* The global loss and the mean over the ranks of every parameter that is not trained (batch-norm
 * running statistics: the ranks saw different batches), packed into one message of f64. */
sx_status nn_dp_after_step(sx_nn_net *net, const sx_nn_comm *c, double *loss_sum)
{
    int64_t n = 1;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            if (!net->layers[i]->params[k].trainable && nn_param_stored(&net->layers[i]->params[k]))
                n += net->layers[i]->params[k].value->size;
    double one[1], *pack = n == 1 ? one : sx_alloc((size_t)n * sizeof *pack);
    if (pack == NULL)
        return sx_error(SX_E_NOMEM, "sx_nn_train: no room to pack %lld statistics", (long long)n);
    int64_t at = 1;
    pack[0] = *loss_sum;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            const sx_tensor *v = net->layers[i]->params[k].value;
            for (int64_t j = 0; !net->layers[i]->params[k].trainable && v != NULL && j < v->size;
                 j++)
                pack[at++] = sx_tensor_get(v, j);
        }
    sx_status s = c->allreduce(c->ctx, pack, n, SX_F64, false);
    *loss_sum = pack[0];
    at = 1;
    for (int i = 0; s == SX_OK && i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            sx_tensor *v = net->layers[i]->params[k].value;
            for (int64_t j = 0; !net->layers[i]->params[k].trainable && v != NULL && j < v->size;
                 j++)
                sx_tensor_set(v, j, pack[at++] / (double)c->size);
        }
    if (pack != one)
        sx_free(pack);
    return s;
}

int64_t sx_nn_model_comm_bytes(const sx_nn_model *m)
{
    return m != NULL && m->train->dp != NULL ? m->train->dp->bytes : 0;
}
