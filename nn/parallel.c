/* parallel.c: data-parallel training over a communicator (issue 22; sx_nn.h, "Data-parallel
 * training"). A training model over a communicator runs its compiled step as two evaluations:
 * first everything but the optimiser's updates (forward, loss, every gradient, batch-norm
 * statistics); then, once each gradient has been scaled by this rank's share of the global batch
 * and summed over the ranks (bucket by bucket, the last layers' first), the updates. nn never
 * links MPI: a communicator is a table of functions (mpi/ implements one). */
#include "nn_impl.h"

#include <string.h>

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

sx_status nn_dp_new(sx_nn_model *m)
{
    m->dp = sx_calloc(1, sizeof *m->dp);
    if (m->dp == NULL)
        return SX_E_NOMEM;
    m->dp->weight = 1.0 / (double)m->comm->size;
    return SX_OK;
}

void nn_dp_free(nn_dp *dp)
{
    if (dp == NULL)
        return;
    sx_free(dp->phase1);
    sx_free(dp->pack);
    sx_free(dp);
}

/* The first evaluation's request: every output but the optimiser's updates (made once). */
static sx_status phase1_nodes(sx_nn_model *m)
{
    nn_dp *dp = m->dp;
    if (dp->phase1 != NULL)
        return SX_OK;
    dp->phase1 = sx_calloc((size_t)m->n_outs + 1, sizeof *dp->phase1);
    if (dp->phase1 == NULL)
        return SX_E_NOMEM;
    for (int i = 0; i < m->n_outs; i++)
        if (i < dp->upd_at || i >= dp->upd_end)
            dp->phase1[dp->n_phase1++] = m->outs[i];
    return SX_OK;
}

/* g *= w in place (w == 0: zeros, whatever g held). */
static void scale(const sx_tensor *g, double w)
{
    if (w == 1)
        return;
    if (w == 0) {
        memset(g->data, 0, (size_t)g->size * sx_dtype_size(g->dtype));
    } else if (g->dtype == SX_F32) {
        float *d = g->data, f = (float)w;
        for (int64_t i = 0; i < g->size; i++)
            d[i] *= f;
    } else {
        double *d = g->data;
        for (int64_t i = 0; i < g->size; i++)
            d[i] *= w;
    }
}

/* Start the sum of one gradient (or run it, without start). */
static sx_status start_sum(const sx_nn_comm *c, const sx_tensor *t)
{
    if (c->start != NULL)
        return c->start(c->ctx, t->data, t->size, t->dtype);
    return c->allreduce(c->ctx, t->data, t->size, t->dtype, false);
}

/* Gradients of at most this many bytes travel together, packed into one message: a message
 * costs 2 (ranks - 1) latencies in a ring, whatever its size (resnet20: 65 gradients, most of
 * them a few hundred bytes). */
#define NN_DP_SMALL (64 * 1024)

/* Gradient i's value, or NULL when an earlier one (in the reverse order) shares its buffer (a
 * zero constant): it is summed once. */
static const sx_tensor *grad_value(const sx_nn_model *m, int i)
{
    const nn_dp *dp = m->dp;
    const sx_tensor *t = sx_cg_value(m->outs[dp->grad_at + i]);
    for (int j = dp->n_grads - 1; j > i; j--)
        if (sx_cg_value(m->outs[dp->grad_at + j])->data == t->data)
            return NULL;
    return t;
}

/* Copy the small gradients into the pack (to_pack) or back out of it. */
static void pack_small(const sx_nn_model *m, bool to_pack)
{
    char *at = m->dp->pack;
    for (int i = m->dp->n_grads - 1; i >= 0; i--) {
        const sx_tensor *t = grad_value(m, i);
        size_t b = t != NULL ? (size_t)t->size * sx_dtype_size(t->dtype) : 0;
        if (t == NULL || b > NN_DP_SMALL)
            continue;
        if (to_pack)
            memcpy(at, t->data, b);
        else
            memcpy(t->data, at, b);
        at += b;
    }
}

/* Scale this rank's gradients by its share and sum them over the ranks, the last layers' first:
 * each large gradient in a message of its own, the small ones packed into one; with the
 * communicator's start every sum is in flight at once and finish waits for them all. */
static sx_status reduce_grads(sx_nn_model *m)
{
    nn_dp *dp = m->dp;
    const sx_nn_comm *c = m->comm;
    int64_t bytes = 0, small = 0;
    for (int i = dp->n_grads - 1; i >= 0; i--) {
        const sx_tensor *t = grad_value(m, i);
        if (t == NULL)
            continue;
        scale(t, dp->weight);
        int64_t b = t->size * (int64_t)sx_dtype_size(t->dtype);
        bytes += b;
        if (b > NN_DP_SMALL)
            SX_TRY(start_sum(c, t));
        else
            small += t->size;
    }
    dp->bytes = bytes;
    if (small > 0) {
        if (dp->pack_n < small) {
            void *p = sx_realloc(dp->pack, (size_t)small * sx_dtype_size(m->dtype));
            if (p == NULL)
                return sx_error(SX_E_NOMEM, "sx_nn_model_step: no room to pack %lld gradients",
                                (long long)small);
            dp->pack = p;
            dp->pack_n = small;
        }
        pack_small(m, true);
        int64_t shape[1] = {small};
        sx_tensor packed = sx_tensor_view(m->dtype, 1, shape, dp->pack);
        SX_TRY(start_sum(c, &packed));
    }
    if (c->finish != NULL && c->start != NULL)
        SX_TRY(c->finish(c->ctx));
    if (small > 0)
        pack_small(m, false);
    return SX_OK;
}

sx_status nn_dp_eval(sx_nn_model *m)
{
    SX_TRY(phase1_nodes(m));
    SX_TRY(sx_cg_eval(m->g, m->dp->n_phase1, m->dp->phase1));
    SX_TRY(reduce_grads(m));
    return sx_cg_eval(m->g, m->n_outs, m->outs);
}

/* Every parameter's value and optimiser state, the step counters and the dropout generator from
 * rank 0; then rank r > 0 reseeds its dropout generator from rank 0's with r mixed in. */
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
            SX_TRY(c->bcast(c->ctx, v->data, v->size * (int64_t)sx_dtype_size(v->dtype), 0));
            for (int s = 0; s < NN_MAX_STATES; s++) {
                const sx_tensor *st = pr->state[s];
                if (st != NULL)
                    SX_TRY(c->bcast(c->ctx, st->data, st->size * (int64_t)sx_dtype_size(st->dtype),
                                    0));
            }
        }
    }
    if (c->rank > 0) {
        sx_rng r = net->dropout_rng;
        sx_rng_seed(&net->dropout_rng,
                    sx_rng_u64(&r) ^ (0x9E3779B97F4A7C15ull * (uint64_t)c->rank));
    }
    return SX_OK;
}

/* The mean over the ranks of every parameter that is not trained (batch-norm running
 * statistics): the ranks saw different batches. All sums in flight at once (with start). */
sx_status nn_dp_average_stats(sx_nn_net *net, const sx_nn_comm *c)
{
    bool any = false;
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            const nn_param *pr = &net->layers[i]->params[k];
            if (!pr->trainable) {
                SX_TRY(start_sum(c, pr->value));
                any = true;
            }
        }
    if (any && c->start != NULL && c->finish != NULL)
        SX_TRY(c->finish(c->ctx));
    for (int i = 0; any && i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++)
            if (!net->layers[i]->params[k].trainable)
                scale(net->layers[i]->params[k].value, 1.0 / (double)c->size);
    return SX_OK;
}

int64_t sx_nn_model_comm_bytes(const sx_nn_model *m)
{
    return m != NULL && m->dp != NULL ? m->dp->bytes : 0;
}
