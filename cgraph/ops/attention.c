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
#ifndef CG_GRAD_RULES /* the ops; their gradient rules, at the end, build apart (ops/rule.h) */
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

sx_cg_node *sx_cg_attention_keys(sx_cg_graph *g, sx_cg_node *q, sx_cg_node *k, sx_cg_node *v,
                                 sx_cg_node *n_keys, double scale, bool causal)
{
    sx_cg_attr a = attention_attr(scale, causal);
    sx_cg_node *in[4] = {q, k, v, n_keys};
    return sx_cg_op_new(g, SX_OP_ATTENTION, 4, in, &a);
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

/* attention(q, k, v[, n_keys]) -> (bh, tq, dh + 1), n_keys one element; attention_backward(q, k,
 * v, y, dy), y and dy (bh, tq, dh + 1) -> (bh, tq + 2 tk, dh) */
sx_status cg_shape_attention(sx_cg_node *n)
{
    const bool backward = n->op == SX_OP_ATTENTION_BACKWARD;
    if (!backward && n->n_in != 3 && n->n_in != 4)
        return sx_error(SX_E_ARG, "%s: %d inputs (want q, k, v and an optional key count)",
                        cg_who(n), n->n_in);
    if (!backward && n->n_in == 4 && IN_VALUE(3)->size != 1)
        return sx_error(SX_E_SHAPE, "%s: the key count has %lld elements (want 1)", cg_who(n),
                        (long long)IN_VALUE(3)->size);
    SX_TRY(cg_same_dtypes(n));
    if (n->value.dtype != SX_F32 && n->value.dtype != SX_F64)
        return sx_error(SX_E_DTYPE, "%s: %s inputs (want f32 or f64)", cg_who(n),
                        sx_dtype_name(n->value.dtype));
    SX_TRY(check_qkv(n));
    const int64_t *qs = IN_VALUE(0)->shape, tk = IN_VALUE(1)->shape[1];
    const int64_t ys[3] = {qs[0], qs[1], qs[2] + 1};
    for (int i = 3; backward && i < n->n_in; i++)
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
    if (n->n_in == 3)
        return sx_tensor_attention_ws(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2),
                                      n->attr.attention.scale, n->attr.attention.causal != 0, OUT,
                                      ws, n->ws_bytes);
    const double c = sx_tensor_get(IN_VALUE(3), 0);
    const int64_t tk = IN_VALUE(1)->shape[1];
    if (!(c >= 0 && c <= (double)tk) || c != floor(c))
        return sx_error(SX_E_RANGE, "%s: key count %g (want an integer 0..%lld)", cg_who(n), c,
                        (long long)tk);
    return sx_tensor_attention_keys_ws(IN_VALUE(0), IN_VALUE(1), IN_VALUE(2), (int64_t)c,
                                       n->attr.attention.scale, n->attr.attention.causal != 0, OUT,
                                       ws, n->ws_bytes);
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

#else
/* ---------------------------------------------------------------- gradient rules */

/* attention's rule is its fused backward op; attention_backward's rule, for second order, is
 * written with plain ops (batched products over the (tq, tk) scores, which it materialises). */
#include "rule.h"

/* Rows [r0, r1) of axis 1 of a rank-3 node. */
static sx_cg_node *rows(sx_cg_graph *g, sx_cg_node *x, int64_t r0, int64_t r1)
{
    sx_slice s[3] = {SX_SLICE_ALL, {r0, r1, 1}, SX_SLICE_ALL};
    return sx_cg_slice(g, x, s);
}

/* Columns [c0, c1) of axis 2 of a rank-3 node. */
static sx_cg_node *cols(sx_cg_graph *g, sx_cg_node *x, int64_t c0, int64_t c1)
{
    sx_slice s[3] = {SX_SLICE_ALL, SX_SLICE_ALL, {c0, c1, 1}};
    return sx_cg_slice(g, x, s);
}

/* y = attention(q, k, v) = (o, lse): (dq; dk; dv) = attention_backward(q, k, v, y, G), G's last
 * column the adjoint of lse (dS gains G_lse P, as d lse_t / d S_tj = P_tj) */
sx_status grad_attention(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                         sx_cg_node **gin)
{
    const sx_cg_attr *a = sx_cg_node_attr(y);
    if (sx_cg_node_n_inputs(y) == 4)
        return sx_cg_graph_fail(g, sx_error(SX_E_UNSUPPORTED,
                                            "sx_ad_grad: attention over a key count (a "
                                            "generator's step) has no gradient rule"));
    const int64_t tq = sx_cg_node_shape(IN(0))[1], tk = sx_cg_node_shape(IN(1))[1];
    sx_cg_node *b = sx_cg_attention_backward(g, IN(0), IN(1), IN(2), y, gy, a->attention.scale,
                                             a->attention.causal != 0);
    const int64_t at[4] = {0, tq, tq + tk, tq + 2 * tk};
    for (int i = 0; i < 3; i++)
        if (need[i] && (gin[i] = rows(g, b, at[i], at[i + 1])) == NULL)
            return sx__cg_grad_status(g);
    return SX_OK;
}

/* 1 where key j is visible to query t (j <= t + tk - tq), 0 above: (tq, tk) of y's dtype. */
static sx_cg_node *visible(sx_cg_graph *g, sx_dtype dt, int64_t tq, int64_t tk)
{
    int64_t s[2] = {tq, tk};
    sx_tensor *m = NULL;
    sx_status st = sx_tensor_new(dt, 2, s, &m);
    if (st != SX_OK) {
        (void)sx_cg_graph_fail(g, st);
        return NULL;
    }
    for (int64_t i = 0; i < tq; i++)
        for (int64_t j = 0; j < tk; j++)
            sx_tensor_set(m, i * tk + j, j <= i + tk - tq ? 1 : 0);
    sx_cg_node *c = sx_cg_const(g, m);
    sx_tensor_free(m);
    return c;
}

/* The adjoints of attention_backward, y's columns split as (o, lse) and dy's as (dO, dlse):
 * S = s q k^T, P = exp(S - lse) (0 where hidden), dP = dO v^T, D = rowsum(dO o) - dlse,
 * dS = P (dP - D); outputs dq = s dS k, dk = s dS^T q, dv = P^T dO. With G = (Gq; Gk; Gv):
 * A_dS = s (Gq k^T + q Gk^T), A_P = dO Gv^T + A_dS (dP - D), A_dP = A_dS P,
 * A_D = -rowsum(A_dS P), A_S = A_P P; then dq' = s dS Gk + s A_S k, dk' = s dS^T Gq + s A_S^T q,
 * dv' = A_dP^T dO, do' = P Gv + A_dP v + A_D o, do_lse' = -A_D, o' = A_D dO,
 * lse' = -rowsum(A_S). */
sx_status grad_attention_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                  sx_cg_node **gin)
{
    const sx_cg_attr *a = sx_cg_node_attr(y);
    const double s = a->attention.scale;
    sx_cg_node *q = IN(0), *k = IN(1), *v = IN(2), *yy = IN(3), *dy = IN(4);
    const int64_t tq = sx_cg_node_shape(q)[1], tk = sx_cg_node_shape(k)[1];
    const int64_t dh = sx_cg_node_shape(q)[2];
    sx_cg_node *o = cols(g, yy, 0, dh), *lse = cols(g, yy, dh, dh + 1);
    sx_cg_node *dO = cols(g, dy, 0, dh), *dlse = cols(g, dy, dh, dh + 1);
    sx_cg_node *Gq = rows(g, gy, 0, tq), *Gk = rows(g, gy, tq, tq + tk);
    sx_cg_node *Gv = rows(g, gy, tq + tk, tq + 2 * tk);
    sx_cg_node *P = sx_cg_exp(g, sx_cg_sub(g, sx_cg_gemm(g, q, k, false, true, s, NULL, 0), lse));
    if (a->attention.causal != 0)
        P = sx_cg_where(g, visible(g, sx_cg_node_dtype(q), tq, tk), P, sx_cg_scalar_like(g, q, 0));
    sx_cg_node *dP = sx_cg_matmul(g, dO, v, false, true);
    sx_cg_node *D = sx_cg_sub(g, sx_cg_sum(g, sx_cg_mul(g, dO, o), SX_AXIS(2), true), dlse);
    sx_cg_node *dPD = sx_cg_sub(g, dP, D);
    sx_cg_node *dS = sx_cg_mul(g, P, dPD);
    sx_cg_node *AdS =
        sx_cg_gemm(g, Gq, k, false, true, s, sx_cg_gemm(g, q, Gk, false, true, s, NULL, 0), 1);
    sx_cg_node *AP = sx_cg_add(g, sx_cg_matmul(g, dO, Gv, false, true), sx_cg_mul(g, AdS, dPD));
    sx_cg_node *AdP = sx_cg_mul(g, AdS, P);
    sx_cg_node *AD = sx_cg_neg(g, sx_cg_sum(g, AdP, SX_AXIS(2), true));
    sx_cg_node *AS = sx_cg_mul(g, AP, P);
    if (need[0])
        gin[0] = sx_cg_gemm(g, dS, Gk, false, false, s,
                            sx_cg_gemm(g, AS, k, false, false, s, NULL, 0), 1);
    if (need[1])
        gin[1] =
            sx_cg_gemm(g, dS, Gq, true, false, s, sx_cg_gemm(g, AS, q, true, false, s, NULL, 0), 1);
    if (need[2])
        gin[2] = sx_cg_matmul(g, AdP, dO, true, false);
    if (need[3]) {
        sx_cg_node *parts[2] = {sx_cg_mul(g, AD, dO),
                                sx_cg_neg(g, sx_cg_sum(g, AS, SX_AXIS(2), true))};
        gin[3] = sx_cg_concat(g, 2, parts, 2);
    }
    if (need[4]) {
        sx_cg_node *gdo = sx_cg_add(g,
                                    sx_cg_add(g, sx_cg_matmul(g, P, Gv, false, false),
                                              sx_cg_matmul(g, AdP, v, false, false)),
                                    sx_cg_mul(g, AD, o));
        sx_cg_node *parts[2] = {gdo, sx_cg_neg(g, AD)};
        gin[4] = sx_cg_concat(g, 2, parts, 2);
    }
    for (int i = 0; i < 5; i++)
        if (need[i] && gin[i] == NULL)
            return sx__cg_grad_status(g);
    return SX_OK;
}

#endif
