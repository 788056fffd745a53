/* ops/attention.c: fused scaled-dot-product attention. attention(q, k, v) -> y (bh, tq, dh + 1)
 * packs the output o (columns 0..dh-1) and the softmax's log-sum-exp (column dh): a graph op has
 * one output, and the backward pass needs the normaliser of every row. Packing it into the
 * forward op's value costs one column and no extra pass (the online softmax ends with it), where
 * a separate lse op would read the scores a second time and recomputing it in the backward pass
 * would add a product of q and k to every tile. sx_cg_attention_o and sx_cg_attention_lse are
 * slices of y. attention_backward(q, k, v, y, dy) -> (bh, tq + 2 tk, dh) packs dq, dk and dv of
 * each head (one pass over the tiles makes all three); its dy column dh is the adjoint of lse,
 * so a graph that uses lse is differentiated too. attr.attention.scale is the scale,
 * attr.attention.causal 1 for causal. */
#include "cgraph_impl.h"

#include <math.h>

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

/* ---------------------------------------------------------------- constructors */

static sx_cg_attr attention_attr(double scale, bool causal)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.attention.scale = scale;
    a.attention.causal = causal ? 1 : 0;
    return a;
}

sx_cg_node *sx_cg_attention(sx_cg_graph *g, sx_cg_node *q, sx_cg_node *k, sx_cg_node *v,
                            double scale, bool causal)
{
    sx_cg_attr a = attention_attr(scale, causal);
    return cg_op3(g, SX_OP_ATTENTION, q, k, v, &a);
}

sx_cg_node *sx_cg_attention_backward(sx_cg_graph *g, sx_cg_node *q, sx_cg_node *k, sx_cg_node *v,
                                     sx_cg_node *y, sx_cg_node *dy, double scale, bool causal)
{
    sx_cg_attr a = attention_attr(scale, causal);
    sx_cg_node *in[5] = {q, k, v, y, dy};
    return sx_cg_op_new(g, SX_OP_ATTENTION_BACKWARD, 5, in, &a);
}

/* Columns [c0, c1) of the last axis of a rank-3 node. */
static sx_cg_node *last_cols(sx_cg_graph *g, sx_cg_node *y, int64_t c0, int64_t c1)
{
    sx_slice s[3] = {SX_SLICE_ALL, SX_SLICE_ALL, {c0, c1, 1}};
    return sx_cg_slice(g, y, s);
}

/* y's shape when it is an attention's output (else the error recorded on g, and NULL). */
static const int64_t *packed_shape(sx_cg_graph *g, sx_cg_node *y, const char *who)
{
    if (g == NULL || !cg_arg_ok(g, y, who))
        return NULL;
    if (sx_cg_node_rank(y) != 3 || sx_cg_node_shape(y)[2] < 2) {
        (void)cg_fail(g, sx_error(SX_E_RANK, "%s: y of rank %d (want (bh, t, dh + 1), dh >= 1)",
                                  who, sx_cg_node_rank(y)));
        return NULL;
    }
    return sx_cg_node_shape(y);
}

sx_cg_node *sx_cg_attention_o(sx_cg_graph *g, sx_cg_node *y)
{
    const int64_t *ys = packed_shape(g, y, "sx_cg_attention_o");
    return ys == NULL ? NULL : last_cols(g, y, 0, ys[2] - 1);
}

sx_cg_node *sx_cg_attention_lse(sx_cg_graph *g, sx_cg_node *y)
{
    const int64_t *ys = packed_shape(g, y, "sx_cg_attention_lse");
    if (ys == NULL)
        return NULL;
    int64_t s2[2] = {ys[0], ys[1]};
    return sx_cg_reshape(g, last_cols(g, y, ys[2] - 1, ys[2]), 2, s2);
}

/* ---------------------------------------------------------------- shape rules */

/* q (bh, tq, dh), k, v (bh, tk, dh) through the kernel's own checks (on descriptors). */
static sx_status check_qkv(const sx_cg_node *n)
{
    const sx_tensor q = cg_probe_view(IN_VALUE(0)), k = cg_probe_view(IN_VALUE(1)),
                    v = cg_probe_view(IN_VALUE(2));
    if (q.rank != 3 || k.rank != 3 || v.rank != 3)
        return sx_error(SX_E_RANK, "%s: q, k and v of ranks %d, %d, %d (want 3: (bh, t, dh))",
                        cg_who(n), q.rank, k.rank, v.rank);
    if (!sx_shape_equal(3, k.shape, 3, v.shape) || k.shape[0] != q.shape[0] ||
        k.shape[2] != q.shape[2]) {
        char a[128], b[128], c[128];
        return sx_error(SX_E_SHAPE, "%s: q %s, k %s and v %s do not agree", cg_who(n),
                        sx_shape_str(3, q.shape, a, sizeof a),
                        sx_shape_str(3, k.shape, b, sizeof b),
                        sx_shape_str(3, v.shape, c, sizeof c));
    }
    if (q.shape[2] < 1 || k.shape[1] < 1)
        return sx_error(SX_E_SHAPE, "%s: %lld features and %lld keys (want >= 1 of each)",
                        cg_who(n), (long long)q.shape[2], (long long)k.shape[1]);
    if (n->attr.attention.causal != 0 && k.shape[1] < q.shape[1])
        return sx_error(SX_E_SHAPE,
                        "%s: causal with %lld queries and %lld keys (want keys >= "
                        "queries)",
                        cg_who(n), (long long)q.shape[1], (long long)k.shape[1]);
    if (!isfinite(n->attr.attention.scale))
        return sx_error(SX_E_ARG, "%s: scale %g (want a finite number)", cg_who(n),
                        n->attr.attention.scale);
    return SX_OK;
}

/* attention -> (bh, tq, dh + 1); attention_backward(q, k, v, y, dy), y and dy (bh, tq, dh + 1)
 * -> (bh, tq + 2 tk, dh) */
sx_status cg_shape_attention(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    if (n->value.dtype != SX_F32 && n->value.dtype != SX_F64)
        return sx_error(SX_E_DTYPE, "%s: %s inputs (want f32 or f64)", cg_who(n),
                        sx_dtype_name(n->value.dtype));
    SX_TRY(check_qkv(n));
    const int64_t *qs = IN_VALUE(0)->shape, tk = IN_VALUE(1)->shape[1];
    const bool backward = n->op == SX_OP_ATTENTION_BACKWARD;
    const int64_t ys[3] = {qs[0], qs[1], qs[2] + 1};
    for (int i = 3; i < n->n_in; i++)
        if (!sx_shape_equal(IN_VALUE(i)->rank, IN_VALUE(i)->shape, 3, ys)) {
            char a[128], b[128];
            return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want %s", cg_who(n),
                            i == 3 ? "y" : "dy",
                            sx_shape_str(IN_VALUE(i)->rank, IN_VALUE(i)->shape, a, sizeof a),
                            sx_shape_str(3, ys, b, sizeof b));
        }
    const int64_t gs[3] = {qs[0], qs[1] + 2 * tk, qs[2]};
    cg_set_shape(n, 3, backward ? gs : ys);
    n->ws_bytes = sx_attention_workspace(n->value.dtype, qs, backward);
    return SX_OK;
}

/* ---------------------------------------------------------------- evaluators */

sx_status cg_eval_attention(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_attention_ws(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2), n->attr.attention.scale,
                                  n->attr.attention.causal != 0, OUT, ws, n->ws_bytes);
}

sx_status cg_eval_attention_backward(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_attention_backward_ws(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2), IN_VALUE(3),
                                           IN_VALUE(4), n->attr.attention.scale,
                                           n->attr.attention.causal != 0, OUT, ws, n->ws_bytes);
}

/* ---------------------------------------------------------------- flop model */

/* The (query, key) pairs computed: about half of them when causal. */
static double pairs(const sx_cg_node *n)
{
    const double tq = (double)n->in[0]->value.shape[1], tk = (double)n->in[1]->value.shape[1];
    return (double)n->in[0]->value.shape[0] *
           (n->attr.attention.causal != 0 ? tq * (tk - tq / 2) : tq * tk);
}

/* two products (scores, P V) of dh multiply-adds per pair, and an exp */
cg_cost cg_eval_attention_cost(const sx_cg_node *n)
{
    return (cg_cost){pairs(n) * (4.0 * (double)n->in[0]->value.shape[2] + 4), true};
}

/* five products per pair (scores, dP, dV, dQ, dK) */
cg_cost cg_eval_attention_backward_cost(const sx_cg_node *n)
{
    return (cg_cost){pairs(n) * (10.0 * (double)n->in[0]->value.shape[2] + 4), true};
}
