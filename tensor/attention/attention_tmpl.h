/* attention_tmpl.h: the attention kernels for one dtype; included by attention.c with T and SFX
 * defined (f32 once per instruction set through isa_each.h, f64 once; AT_DT the dtype). The
 * products of a tile are strix's GEMM (sx__gemm, serial inside a task; its sums run in an order
 * fixed by the shape); the softmax's loops around them are written for the vectoriser. */
#define AT_CAT_(a, b) a##_##b
#define AT_CAT(a, b) AT_CAT_(a, b)

/* The scores of query rows [i0, i0 + nq) against keys [j0, j0 + nk): scale q k^T by strix's
 * GEMM (one thread inside a task), -inf where the causal mask hides a key (key j is visible to
 * query i when j <= i + tk - tq). */
static void AT_CAT(attn_scores, SFX)(const attn_job *jb, const T *q, const T *k, int64_t i0,
                                     int64_t nq, int64_t j0, int64_t nk, T *s)
{
    const int64_t dh = jb->dh;
    sx__gemm(AT_DT, false, true, nq, nk, dh, jb->scale, q + i0 * dh, dh, k + j0 * dh, dh, 0, s, nk);
    if (!jb->causal)
        return;
    for (int64_t i = 0; i < nq; i++) {
        int64_t lim = i0 + i + jb->tk - jb->tq - j0 + 1; /* keys j < lim of the tile are seen */
        for (int64_t j = lim < 0 ? 0 : lim; j < nk; j++)
            s[i * nk + j] = (T)-INFINITY;
    }
}

/* One forward task: query block `task % nqb` of head `task / nqb`, online softmax over key
 * blocks (running maximum m, running sum l, accumulator acc rescaled when m grows); key blocks
 * wholly above the diagonal are never visited. Writes o and lse = m + log l into out. */
static void AT_CAT(attn_fwd_task, SFX)(void *ctx, int64_t task)
{
    const attn_job *jb = ctx;
    const int64_t dh = jb->dh, tq = jb->tq, tk = jb->tk, h = task / jb->nqb;
    const int64_t i0 = (task % jb->nqb) * ATTN_BQ, nq = tq - i0 < ATTN_BQ ? tq - i0 : ATTN_BQ;
    const T *q = (const T *)jb->q + h * tq * dh;
    const T *k = (const T *)jb->k + h * tk * dh, *v = (const T *)jb->v + h * tk * dh;
    T *out = (T *)jb->out + h * tq * (dh + 1);
    T *s = (T *)(void *)(jb->ws + (size_t)sx__par_slot() * jb->slot_bytes);
    T *acc = s + ATTN_BQ * ATTN_BK, *m = acc + ATTN_BQ * dh, *l = m + ATTN_BQ;
    int64_t kend = jb->causal ? i0 + nq + tk - tq : tk;
    kend = kend < jb->seen ? kend : jb->seen;
    for (int64_t i = 0; i < nq * dh; i++)
        acc[i] = 0;
    for (int64_t i = 0; i < nq; i++) {
        m[i] = (T)-INFINITY;
        l[i] = 0;
    }
    for (int64_t j0 = 0; j0 < kend; j0 += ATTN_BK) {
        const int64_t nk = kend - j0 < ATTN_BK ? kend - j0 : ATTN_BK;
        AT_CAT(attn_scores, SFX)(jb, q, k, i0, nq, j0, nk, s);
        for (int64_t i = 0; i < nq; i++) {
            T *restrict si = s + i * nk;
            T mx = m[i];
            for (int64_t j = 0; j < nk; j++)
                mx = si[j] > mx ? si[j] : mx;
            if (mx == (T)-INFINITY) { /* every key of the tile hidden, none seen before */
                for (int64_t j = 0; j < nk; j++)
                    si[j] = 0;
                continue;
            }
            const T alpha = VM_EXP(m[i] - mx); /* 0 on the first tile a row sees */
            for (int64_t j = 0; j < nk; j++)
                si[j] = VM_EXP(si[j] - mx);
            T sum = 0;
            for (int64_t j = 0; j < nk; j++)
                sum += si[j];
            l[i] = l[i] * alpha + sum;
            m[i] = mx;
            T *restrict ai = acc + i * dh;
            for (int64_t d = 0; d < dh; d++)
                ai[d] *= alpha;
        }
        /* acc += P V over the tile's keys */
        sx__gemm(AT_DT, false, false, nq, dh, nk, 1, s, nk, v + j0 * dh, dh, 1, acc, dh);
    }
    for (int64_t i = 0; i < nq; i++) {
        T *restrict oi = out + (i0 + i) * (dh + 1);
        const T *restrict ai = acc + i * dh;
        if (l[i] == 0) { /* no key seen (none of the first n_keys): o = 0, lse = -inf */
            for (int64_t d = 0; d < dh; d++)
                oi[d] = 0;
            oi[dh] = (T)-INFINITY;
            continue;
        }
        const T inv = 1 / l[i];
        for (int64_t d = 0; d < dh; d++)
            oi[d] = ai[d] * inv;
        oi[dh] = (T)((double)m[i] + log((double)l[i]));
    }
}

/* d_i = sum_d dO[i,d] O[i,d] - dlse_i for the nq rows from i0 (y, dy packed (tq, dh + 1)). */
static void AT_CAT(attn_delta, SFX)(const T *y, const T *dy, int64_t dh, int64_t i0, int64_t nq,
                                    T *dd)
{
    for (int64_t i = 0; i < nq; i++) {
        const T *yi = y + (i0 + i) * (dh + 1), *gi = dy + (i0 + i) * (dh + 1);
        double acc = 0;
        for (int64_t d = 0; d < dh; d++)
            acc += (double)gi[d] * (double)yi[d];
        dd[i] = (T)(acc - (double)gi[dh]);
    }
}

/* One backward task: head `h` whole, FlashAttention-2's loops (key blocks outside, query
 * blocks inside) with the scores recomputed per tile and P = exp(S - lse) from the forward
 * pass's lse: dV += P^T dO, dP = dO V^T, dS = P (dP - d) scale, dQ += dS K, dK += dS^T Q. Each
 * sum runs in an order fixed by the shape. */
static void AT_CAT(attn_bwd_task, SFX)(void *ctx, int64_t h)
{
    const attn_job *jb = ctx;
    const int64_t dh = jb->dh, tq = jb->tq, tk = jb->tk;
    const T *q = (const T *)jb->q + h * tq * dh;
    const T *k = (const T *)jb->k + h * tk * dh, *v = (const T *)jb->v + h * tk * dh;
    const T *y = (const T *)jb->y + h * tq * (dh + 1), *dy = (const T *)jb->dy + h * tq * (dh + 1);
    T *dq = (T *)jb->out + h * (tq + 2 * tk) * dh, *dk = dq + tq * dh, *dv = dk + tk * dh;
    T *p = (T *)(void *)(jb->ws + (size_t)sx__par_slot() * jb->slot_bytes);
    T *dp = p + ATTN_BQ * ATTN_BK, *dd = dp + ATTN_BQ * ATTN_BK;
    const T sc = (T)jb->scale;
    for (int64_t i = 0; i < (tq + 2 * tk) * dh; i++)
        dq[i] = 0;
    for (int64_t j0 = 0; j0 < tk; j0 += ATTN_BK) {
        const int64_t nk = tk - j0 < ATTN_BK ? tk - j0 : ATTN_BK;
        /* the first query block with a row that sees key j0 */
        int64_t first = jb->causal ? j0 - (tk - tq) : 0;
        first = first < 0 ? 0 : first / ATTN_BQ * ATTN_BQ;
        for (int64_t i0 = first; i0 < tq; i0 += ATTN_BQ) {
            const int64_t nq = tq - i0 < ATTN_BQ ? tq - i0 : ATTN_BQ;
            AT_CAT(attn_scores, SFX)(jb, q, k, i0, nq, j0, nk, p);
            for (int64_t i = 0; i < nq; i++) {
                const T lse = y[(i0 + i) * (dh + 1) + dh];
                T *restrict pi = p + i * nk;
                for (int64_t j = 0; j < nk; j++)
                    pi[j] = VM_EXP(pi[j] - lse);
            }
            AT_CAT(attn_delta, SFX)(y, dy, dh, i0, nq, dd);
            /* dV += P^T dO and dP = dO V^T (dO's rows have a stride of dh + 1) */
            const T *g = dy + i0 * (dh + 1);
            sx__gemm(AT_DT, true, false, nk, dh, nq, 1, p, nk, g, dh + 1, 1, dv + j0 * dh, dh);
            sx__gemm(AT_DT, false, true, nq, nk, dh, 1, g, dh + 1, v + j0 * dh, dh, 0, dp, nk);
            for (int64_t i = 0; i < nq; i++)
                for (int64_t j = 0; j < nk; j++)
                    p[i * nk + j] = p[i * nk + j] * (dp[i * nk + j] - dd[i]) * sc;
            /* dQ += dS K, dK += dS^T Q */
            sx__gemm(AT_DT, false, false, nq, dh, nk, 1, p, nk, k + j0 * dh, dh, 1, dq + i0 * dh,
                     dh);
            sx__gemm(AT_DT, true, false, nk, dh, nq, 1, p, nk, q + i0 * dh, dh, 1, dk + j0 * dh,
                     dh);
        }
    }
}

#undef AT_CAT
#undef AT_CAT_
