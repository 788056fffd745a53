/* ops_loss.c: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss with targets known at import
 * time (the labels of a data set): each example's picked log-probability is one gather from the
 * flattened input, its weight a gather from the class weights, ignored targets a constant 0. */
#include "onnx_impl.h"

#include <string.h>

/* The picked positions and the known parts of one NLL: map[q] the flat position of
 * x[n, t[q], d...] (0 where ignored), cls[q] the class (0 where ignored), valid[q] 1/0. */
static sx_status nll_maps(ox_ctx *c, const ox_val *xv, const ox_val *tv, int64_t *map, int64_t *cls,
                          double *valid)
{
    bool has_ii = ox_attr(c, "ignore_index") != NULL;
    int64_t ii, nc = xv->shape[1], d = sx_shape_size(xv->rank - 2, xv->shape + 2);
    SX_TRY(ox_attr_int(c, "ignore_index", 0, &ii));
    int64_t n = sx_shape_size(tv->rank, tv->shape);
    for (int64_t q = 0; q < n; q++) {
        int64_t t = tv->ints[q];
        valid[q] = !(has_ii && t == ii);
        if (valid[q] != 0 && (t < 0 || t >= nc))
            return ox_fail(c, SX_E_RANGE, "target %lld out of range for %lld classes", (long long)t,
                           (long long)nc);
        cls[q] = valid[q] != 0 ? t : 0;
        map[q] = (q / d) * nc * d + cls[q] * d + q % d;
    }
    return SX_OK;
}

/* loss[q] = -x[n, t[q], d...] w[t[q]] (0 where ignored), reduced by the attribute reduction:
 * none, sum, or mean (the sum over the sum of the weights). */
static sx_status nll_loss(ox_ctx *c, sx_cg_node *x, const ox_val *xv, const ox_val *tv, ox_val *wv,
                          sx_cg_node **out)
{
    char red[16];
    SX_TRY(ox_attr_str(c, "reduction", "mean", red, sizeof red));
    if (strcmp(red, "none") != 0 && strcmp(red, "sum") != 0 && strcmp(red, "mean") != 0)
        return ox_fail(c, SX_E_FORMAT, "attribute reduction '%s'", red);
    if (xv->rank < 2 || tv->rank != xv->rank - 1 || tv->shape[0] != xv->shape[0] ||
        !sx_shape_equal(tv->rank - 1, tv->shape + 1, xv->rank - 2, xv->shape + 2))
        return ox_fail(c, SX_E_SHAPE, "target '%s' does not match input '%s' (N, C, d...)",
                       tv->name, xv->name);
    int64_t n = sx_shape_size(tv->rank, tv->shape);
    int64_t *map = sx_alloc((size_t)(n ? n : 1) * 2 * sizeof *map);
    double *valid = sx_alloc((size_t)(n ? n : 1) * sizeof *valid);
    sx_status s = map != NULL && valid != NULL ? SX_OK : SX_E_NOMEM;
    if (s == SX_OK)
        s = nll_maps(c, xv, tv, map, map + n, valid);
    sx_cg_graph *g = c->g;
    sx_cg_node *picked = NULL, *w = NULL, *wn;
    if (s == SX_OK)
        s = ox_gather_flat(c, x, map, tv->rank, tv->shape, &picked);
    if (s == SX_OK)
        s = ox_const(c, tv->rank, tv->shape, valid, &w);
    if (s == SX_OK && wv != NULL && (s = ox_node(c, wv, OX_ONNX, &wn)) == SX_OK) {
        if (wv->rank != 1 || wv->shape[0] != xv->shape[1])
            s = ox_fail(c, SX_E_SHAPE, "weight '%s' is not (C)", wv->name);
        sx_cg_node *wt = NULL;
        if (s == SX_OK)
            s = ox_gather_flat(c, wn, map + n, tv->rank, tv->shape, &wt);
        if (s == SX_OK)
            w = sx_cg_mul(g, w, wt);
    }
    sx_free(map);
    sx_free(valid);
    SX_TRY(s);
    sx_cg_node *loss = sx_cg_neg(g, sx_cg_mul(g, picked, w));
    if (strcmp(red, "none") != 0)
        loss = sx_cg_sum(g, loss, SX_AXES_ALL, false);
    if (strcmp(red, "mean") == 0)
        loss = sx_cg_div(g, loss, sx_cg_sum(g, w, SX_AXES_ALL, false));
    c->no_batch = strcmp(red, "none") != 0;
    *out = loss;
    return loss != NULL ? SX_OK : ox_graph_fail(c);
}

/* NegativeLogLikelihoodLoss(input (N, C, d...), target (N, d...), weight (C)?). */
sx_status ox_op_NegativeLogLikelihoodLoss(ox_ctx *c)
{
    ox_val *xv, *tv;
    sx_cg_node *x, *y;
    SX_TRY(ox_in_req(c, 0, &xv));
    SX_TRY(ox_in_req(c, 1, &tv));
    if (tv->ints == NULL)
        return ox_fail(c, SX_E_UNSUPPORTED,
                       "target '%s' is computed by the graph (strix needs it at import time)",
                       tv->name);
    SX_TRY(ox_node(c, xv, OX_ONNX, &x));
    SX_TRY(nll_loss(c, x, xv, tv, ox_in(c, 2), &y));
    return ox_out(c, 0, y, OX_ONNX);
}

/* SoftmaxCrossEntropyLoss(scores (N, C, d...), labels (N, d...), weights (C)?): the NLL of
 * log_softmax over the classes; output 1 (optional) that log-probability. */
sx_status ox_op_SoftmaxCrossEntropyLoss(ox_ctx *c)
{
    ox_val *xv, *tv;
    sx_cg_node *x, *y;
    SX_TRY(ox_in_req(c, 0, &xv));
    SX_TRY(ox_in_req(c, 1, &tv));
    if (tv->ints == NULL)
        return ox_fail(c, SX_E_UNSUPPORTED,
                       "labels '%s' are computed by the graph (strix needs them at import time)",
                       tv->name);
    if (xv->rank < 2)
        return ox_fail(c, SX_E_SHAPE, "scores of rank %d (want N, C, d...)", xv->rank);
    SX_TRY(ox_node(c, xv, OX_ONNX, &x));
    sx_cg_node *lp = sx_cg_log_softmax(c->g, x, 1);
    SX_TRY(nll_loss(c, lp, xv, tv, ox_in(c, 2), &y));
    SX_TRY(ox_out(c, 0, y, OX_ONNX));
    if (ox_n_out(c) > 1 && c->node->output[1][0] != '\0') {
        c->no_batch = false;
        SX_TRY(ox_out(c, 1, lp, OX_ONNX));
    }
    return SX_OK;
}
