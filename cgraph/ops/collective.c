/* ops/collective.c: sums over the processes of a data-parallel job, as graph ops so that the
 * compiled step holds them (aggregating the gradients and updating are operations of the engine
 * like any other, so communication overlaps computation). allreduce_start packs a bucket of
 * gradients into its own storage and starts their sum through the graph's communicator, returning
 * at once; allreduce_part, a view of part of the bucket, waits for it. Whatever the order runs
 * between the two overlaps the communication. */
#include "cgraph_impl.h"

#include <string.h>

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

/* ---------------------------------------------------------------- the graph's settings */

sx_status sx_cg_set_comm(sx_cg_graph *g, const sx_cg_comm *c)
{
    if (g == NULL)
        return sx_error(SX_E_ARG, "sx_cg_set_comm: graph is NULL");
    if (c != NULL && (c->start == NULL || c->wait == NULL))
        return sx_error(SX_E_ARG, "sx_cg_set_comm: a communicator without %s",
                        c->start == NULL ? "start" : "wait");
    if (c != NULL)
        g->comm = *c;
    else
        memset(&g->comm, 0, sizeof g->comm);
    return SX_OK;
}

sx_status sx_cg_set_mask_row(sx_cg_graph *g, int64_t first_row)
{
    if (g == NULL || first_row < 0)
        return sx_error(SX_E_ARG, "sx_cg_set_mask_row: %s (first row %lld)",
                        g == NULL ? "graph is NULL" : "a negative row", (long long)first_row);
    g->mask_row = first_row;
    return SX_OK;
}

/* ---------------------------------------------------------------- constructors */

sx_cg_node *sx_cg_allreduce_start(sx_cg_graph *g, sx_cg_node *scale, int k, sx_cg_node *const *xs)
{
    if (g != NULL && (k < 1 || k > SX_CG_MAX_BUCKET || xs == NULL)) {
        cg_fail(g, sx_error(SX_E_ARG, "sx_cg_allreduce_start: %d tensors (want 1..%d)", k,
                            SX_CG_MAX_BUCKET));
        return NULL;
    }
    sx_cg_node *in[SX_CG_MAX_BUCKET + 1];
    in[0] = scale;
    for (int i = 0; g != NULL && i < k; i++)
        in[i + 1] = xs[i];
    return sx_cg_op_new(g, SX_OP_ALLREDUCE_START, k + 1, in, NULL);
}

sx_cg_node *sx_cg_allreduce_part(sx_cg_graph *g, sx_cg_node *bucket, int64_t offset, int rank,
                                 const int64_t *shape)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.allreduce.offset = offset;
    if (!cg_set_target_shape(g, &a, rank, shape, "sx_cg_allreduce_part"))
        return NULL;
    return sx_cg_op_new(g, SX_OP_ALLREDUCE_PART, 1, &bucket, &a);
}

/* ---------------------------------------------------------------- shape rules */

/* (total): the inputs after the scale, flattened one after the other */
sx_status cg_shape_allreduce_start(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    if (n->n_in < 2 || n->n_in > SX_CG_MAX_BUCKET + 1)
        return sx_error(SX_E_ARG, "%s: %d tensors (want 1..%d)", cg_who(n), n->n_in - 1,
                        SX_CG_MAX_BUCKET);
    if (IN_VALUE(0)->size != 1)
        return sx_error(SX_E_SHAPE, "%s: the scale has %lld elements (want 1)", cg_who(n),
                        (long long)IN_VALUE(0)->size);
    int64_t total = 0;
    for (int i = 1; i < n->n_in; i++) {
        if (IN_VALUE(i)->size > INT32_MAX - total)
            return sx_error(SX_E_SHAPE, "%s: a bucket of more than 2^31 elements", cg_who(n));
        total += IN_VALUE(i)->size;
    }
    cg_set_shape(n, 1, &total);
    return SX_OK;
}

/* attr.rank/shape, inside the bucket from attr.allreduce.offset */
sx_status cg_shape_allreduce_part(sx_cg_node *n)
{
    if (n->in[0]->op != SX_OP_ALLREDUCE_START)
        return sx_error(SX_E_ARG, "%s: input is %s (want an allreduce_start)", cg_who(n),
                        sx_cg_op_name(n->in[0]->op));
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_attr_shape(n));
    int64_t at = n->attr.allreduce.offset, size = OUT->size, have = IN_VALUE(0)->size;
    if (at < 0 || at > have || size > have - at)
        return sx_error(SX_E_SHAPE, "%s: elements [%lld, %lld) of a bucket of %lld", cg_who(n),
                        (long long)at, (long long)(at + size), (long long)have);
    return SX_OK;
}

/* ---------------------------------------------------------------- evaluators */

/* Copy x * w into d (f32 multiplies by (float)w; w == 1 copies, w == 0 writes zeros). */
static void pack_scaled(void *d, const sx_tensor *x, double w)
{
    size_t bytes = (size_t)x->size * sx_dtype_size(x->dtype);
    if (w == 1) {
        if (bytes > 0)
            memcpy(d, x->data, bytes);
    } else if (w == 0) {
        memset(d, 0, bytes);
    } else if (x->dtype == SX_F32) {
        float *o = d, f = (float)w;
        const float *s = x->data;
        for (int64_t i = 0; i < x->size; i++)
            o[i] = s[i] * f;
    } else {
        double *o = d;
        const double *s = x->data;
        for (int64_t i = 0; i < x->size; i++)
            o[i] = s[i] * w;
    }
}

/* Pack, then start the sum. A sum still in flight on the bucket (an evaluation that failed
 * before its parts waited) is waited for first: the bucket is the communicator's until then. */
sx_status cg_eval_allreduce_start(sx_cg_graph *g, sx_cg_node *n)
{
    if (g->comm.start != NULL)
        SX_TRY(g->comm.wait(g->comm.ctx, OUT->data));
    double w = sx_tensor_get(IN_VALUE(0), 0);
    char *at = OUT->data;
    for (int i = 1; i < n->n_in; i++) {
        pack_scaled(at, IN_VALUE(i), w);
        at += (size_t)IN_VALUE(i)->size * sx_dtype_size(OUT->dtype);
    }
    if (g->comm.start != NULL)
        return g->comm.start(g->comm.ctx, OUT->data, OUT->size, OUT->dtype);
    return SX_OK;
}

sx_status cg_eval_allreduce_part(sx_cg_graph *g, sx_cg_node *n)
{
    const sx_tensor *b = IN_VALUE(0);
    if (g->comm.wait != NULL)
        SX_TRY(g->comm.wait(g->comm.ctx, b->data));
    OUT->data = (char *)b->data + (size_t)n->attr.allreduce.offset * sx_dtype_size(b->dtype);
    return SX_OK;
}

/* ---------------------------------------------------------------- flop model */

cg_cost cg_eval_allreduce_start_cost(const sx_cg_node *n)
{
    return cg_cost_per_out(n, 1);
}

cg_cost cg_eval_allreduce_part_cost(const sx_cg_node *n)
{
    return cg_cost_none(n);
}
