/* attention.c: the samples of the fused attention ops (cgraph/ops/attention.c): each op's SPEC_,
 * DT_, sample generator and references. Part of ../opsamples.c, which includes it. */

/* ---------------------------------------------------------------- fused attention */

/* q (bh, tq, dh), k and v (bh, tk, dh): one head and several, T = 1, keys beyond the queries
 * (causal from the last query's diagonal), odd dh, and lengths across a 64-row block. The
 * difftest composes the variants whose nodes fit its size (0 to 3). */
static const struct {
    int64_t bh, tq, tk, dh;
    bool causal;
    double scale; /* 0: 1 / sqrt(dh) */
} attn_cases[] = {{2, 5, 5, 2, false, 0},  {1, 4, 4, 3, true, 0},   {3, 1, 1, 2, true, 0},
                  {1, 3, 6, 3, true, 0.7}, {1, 70, 70, 2, true, 0}, {2, 66, 66, 3, false, 0}};

static double attn_scale(int v)
{
    return attn_cases[v].scale != 0 ? attn_cases[v].scale : 1 / sqrt((double)attn_cases[v].dh);
}

static void attn_leaves(ctx *c, int v, sx_cg_node **q, sx_cg_node **k, sx_cg_node **vv)
{
    const int64_t bh = attn_cases[v].bh, dh = attn_cases[v].dh;
    *q = in(c, (shp){3, {bh, attn_cases[v].tq, dh}}, V_UNIFORM, -1.5, 1.5);
    *k = in(c, (shp){3, {bh, attn_cases[v].tk, dh}}, V_UNIFORM, -1.5, 1.5);
    *vv = in(c, (shp){3, {bh, attn_cases[v].tk, dh}}, V_UNIFORM, -1, 1);
}

#define SPEC_attention 6, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_attention, plain_attention)
#define DT_attention SAMPLE(1)
static sx_cg_node *sample_attention(GEN_ARGS)
{
    CTX;
    sx_cg_node *q, *k, *vv;
    attn_leaves(c, v, &q, &k, &vv);
    return sx_cg_attention(g, q, k, vv, attn_scale(v), attn_cases[v].causal);
}

/* y (o and lse) and dy are free leaves: the op is a function of all five inputs. */
#define SPEC_attention_backward                                                                    \
    6, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_attention_backward, plain_attention)
#define DT_attention_backward SAMPLE(1)
static sx_cg_node *sample_attention_backward(GEN_ARGS)
{
    CTX;
    sx_cg_node *q, *k, *vv;
    attn_leaves(c, v, &q, &k, &vv);
    shp ys = {3, {attn_cases[v].bh, attn_cases[v].tq, attn_cases[v].dh + 1}};
    sx_cg_node *y = in(c, ys, V_UNIFORM, -1, 1), *dy = in(c, ys, V_UNIFORM, -1, 1);
    return sx_cg_attention_backward(g, q, k, vv, y, dy, attn_scale(v), attn_cases[v].causal);
}

static sx_status kernel_attention(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    return sx_tensor_attention_out(x[0], x[1], x[2], a->attention.scale, a->attention.causal != 0,
                                   out);
}

static sx_status kernel_attention_backward(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    return sx_tensor_attention_backward_out(x[0], x[1], x[2], x[3], x[4], a->attention.scale,
                                            a->attention.causal != 0, out);
}

/* The plain composition in double, per head: S = scale q k^T (-inf where causal hides a key),
 * P = softmax(S) (forward) or exp(S - lse) with lse from y (backward); forward o = P v and
 * lse = log sum exp S; backward D = rowsum(dO o) - dlse, dS = P (dP - D) with dP = dO v^T,
 * dq = scale dS k, dk = scale dS^T q, dv = P^T dO. mag bounds each sum by its terms' sizes. */
static sx_status plain_attention(PLAIN_ARGS)
{
    (void)compare;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    const bool bw = sx_cg_node_op(n) == SX_OP_ATTENTION_BACKWARD;
    const int64_t bh = x[0]->shape[0], tq = x[0]->shape[1], tk = x[1]->shape[1],
                  dh = x[0]->shape[2];
    double *S = ref_alloc(sizeof(double) * (size_t)(tq * tk)),
           *A = ref_alloc(sizeof(double) * (size_t)(tq * tk));
    double *P = ref_alloc(sizeof(double) * (size_t)(tq * tk)),
           *dS = ref_alloc(sizeof(double) * (size_t)(tq * tk));
    double *dSa = ref_alloc(sizeof(double) * (size_t)(tq * tk));
    for (int64_t h = 0; h < bh; h++) {
#define Q(i, d) ref_get(x[0], (h * tq + (i)) * dh + (d))
#define K(j, d) ref_get(x[1], (h * tk + (j)) * dh + (d))
#define V(j, d) ref_get(x[2], (h * tk + (j)) * dh + (d))
        for (int64_t i = 0; i < tq; i++)
            for (int64_t j = 0; j < tk; j++) {
                double acc = 0, am = 0;
                for (int64_t d = 0; d < dh; d++) {
                    acc += Q(i, d) * K(j, d);
                    am += fabs(Q(i, d) * K(j, d));
                }
                const bool hidden = a->attention.causal != 0 && j > i + tk - tq;
                S[i * tk + j] = hidden ? -HUGE_VAL : a->alpha * acc;
                A[i * tk + j] = fabs(a->alpha) * am;
            }
        for (int64_t i = 0; i < tq; i++) {
            double m = -HUGE_VAL, sum = 0, smag = 0;
            for (int64_t j = 0; j < tk; j++) {
                m = fmax(m, S[i * tk + j]);
                smag = fmax(smag, A[i * tk + j]);
            }
            for (int64_t j = 0; j < tk; j++)
                sum += exp(S[i * tk + j] - m);
            const double lse = m + log(sum);
            for (int64_t j = 0; j < tk; j++)
                P[i * tk + j] =
                    bw ? exp(S[i * tk + j] - ref_get(x[3], (h * tq + i) * (dh + 1) + dh))
                       : exp(S[i * tk + j] - lse);
            if (bw)
                continue;
            double *w = want + (h * tq + i) * (dh + 1), *mg = mag + (h * tq + i) * (dh + 1);
            for (int64_t d = 0; d < dh; d++) {
                double o = 0, om = 0;
                for (int64_t j = 0; j < tk; j++) {
                    o += P[i * tk + j] * V(j, d);
                    om += P[i * tk + j] * fabs(V(j, d));
                }
                w[d] = o;
                mg[d] = om * (1 + smag);
            }
            w[dh] = lse;
            mg[dh] = fabs(m) + smag + 1;
        }
        if (!bw)
            continue;
#define Y(i, d) ref_get(x[3], (h * tq + (i)) * (dh + 1) + (d))
#define DY(i, d) ref_get(x[4], (h * tq + (i)) * (dh + 1) + (d))
        double *wq = want + h * (tq + 2 * tk) * dh, *wk = wq + tq * dh, *wv = wk + tk * dh;
        double *mq = mag + h * (tq + 2 * tk) * dh, *mk = mq + tq * dh, *mv = mk + tk * dh;
        for (int64_t i = 0; i < tq; i++) {
            double D = -DY(i, dh), Dm = fabs(DY(i, dh));
            for (int64_t d = 0; d < dh; d++) {
                D += DY(i, d) * Y(i, d);
                Dm += fabs(DY(i, d) * Y(i, d));
            }
            for (int64_t j = 0; j < tk; j++) {
                double dp = 0, dpm = 0;
                for (int64_t d = 0; d < dh; d++) {
                    dp += DY(i, d) * V(j, d);
                    dpm += fabs(DY(i, d) * V(j, d));
                }
                const double p = P[i * tk + j];
                dS[i * tk + j] = a->alpha * p * (dp - D);
                dSa[i * tk + j] = fabs(a->alpha) * p * (dpm + Dm) * (1 + A[i * tk + j]);
            }
        }
        for (int64_t i = 0; i < tq; i++)
            for (int64_t j = 0; j < tk; j++)
                for (int64_t d = 0; d < dh; d++) {
                    wq[i * dh + d] += dS[i * tk + j] * K(j, d);
                    mq[i * dh + d] += dSa[i * tk + j] * fabs(K(j, d));
                    wk[j * dh + d] += dS[i * tk + j] * Q(i, d);
                    mk[j * dh + d] += dSa[i * tk + j] * fabs(Q(i, d));
                    wv[j * dh + d] += P[i * tk + j] * DY(i, d);
                    mv[j * dh + d] += P[i * tk + j] * (1 + A[i * tk + j]) * fabs(DY(i, d));
                }
#undef Q
#undef K
#undef V
#undef Y
#undef DY
    }
    free(S);
    free(A);
    free(P);
    free(dS);
    free(dSa);
    return SX_OK;
}
