/* attention.c: the gradient rules of the fused attention ops (cgraph/ops/attention.c).
 * attention's rule is its fused backward op; attention_backward's rule, for second order, is
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
    const int64_t tq = sx_cg_node_shape(IN(0))[1], tk = sx_cg_node_shape(IN(1))[1];
    sx_cg_node *b = sx_cg_attention_backward(g, IN(0), IN(1), IN(2), y, gy, a->attention.scale,
                                             a->attention.causal != 0);
    const int64_t at[4] = {0, tq, tq + tk, tq + 2 * tk};
    for (int i = 0; i < 3; i++)
        if (need[i] && (gin[i] = rows(g, b, at[i], at[i + 1])) == NULL)
            return ad_status(g);
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
            return ad_status(g);
    return SX_OK;
}
