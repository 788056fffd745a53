/* attention_tmpl.h: the attention kernels for one dtype; included by attention.c with T and SFX
 * defined (f32 once per instruction set through isa_each.h, f64 once). Every product is written
 * with its inner loop along a contiguous row (keys of a transposed tile, or the dh features), so
 * the compiler vectorises it without reordering a sum: each element is summed in the same order
 * by every instance and every thread count. */
#define AT_CAT_(a, b) a##_##b
#define AT_CAT(a, b) AT_CAT_(a, b)

/* kt[d * nk + j] = k[j * dh + d]: nk rows of k transposed, so the key index runs along memory. */
static void AT_CAT(attn_transpose, SFX)(const T *restrict k, int64_t nk, int64_t dh, T *restrict kt)
{
    for (int64_t j = 0; j < nk; j++)
        for (int64_t d = 0; d < dh; d++)
            kt[d * nk + j] = k[j * dh + d];
}

/* s[i * nk + j] = sum_d a[i * lda + d] kt[d * nk + j] (i < nq, j < nk), d in order. Two rows
 * at a time share each load of kt's row. */
static void AT_CAT(attn_prod, SFX)(const T *restrict a, int64_t lda, int64_t nq,
                                   const T *restrict kt, int64_t nk, int64_t dh, T *restrict s)
{
    int64_t i = 0;
    for (; i + 2 <= nq; i += 2) {
        T *restrict s0 = s + i * nk, *restrict s1 = s0 + nk;
        const T *a0 = a + i * lda, *a1 = a0 + lda;
        for (int64_t j = 0; j < nk; j++)
            s0[j] = s1[j] = 0;
        for (int64_t d = 0; d < dh; d++) {
            const T x0 = a0[d], x1 = a1[d];
            const T *restrict kd = kt + d * nk;
            for (int64_t j = 0; j < nk; j++) {
                s0[j] += x0 * kd[j];
                s1[j] += x1 * kd[j];
            }
        }
    }
    for (; i < nq; i++) {
        T *restrict s0 = s + i * nk;
        const T *a0 = a + i * lda;
        for (int64_t j = 0; j < nk; j++)
            s0[j] = 0;
        for (int64_t d = 0; d < dh; d++) {
            const T x0 = a0[d];
            const T *restrict kd = kt + d * nk;
            for (int64_t j = 0; j < nk; j++)
                s0[j] += x0 * kd[j];
        }
    }
}

/* The scores of query rows [i0, i0 + nq) against keys [j0, j0 + nk) (kt: those keys
 * transposed): scale q k^T, -inf where the causal mask hides a key (key j is visible to query i
 * when j <= i + tk - tq). */
static void AT_CAT(attn_scores, SFX)(const attn_job *jb, const T *q, const T *kt, int64_t i0,
                                     int64_t nq, int64_t j0, int64_t nk, T *s)
{
    const int64_t dh = jb->dh;
    AT_CAT(attn_prod, SFX)(q + i0 * dh, dh, nq, kt, nk, dh, s);
    const T sc = (T)jb->scale;
    for (int64_t i = 0; i < nq * nk; i++)
        s[i] *= sc;
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
    T *kt = (T *)(void *)(jb->ws + (size_t)sx__par_slot() * jb->slot_bytes);
    T *s = kt + dh * ATTN_BK, *acc = s + ATTN_BQ * ATTN_BK, *m = acc + ATTN_BQ * dh,
      *l = m + ATTN_BQ;
    int64_t kend = jb->causal ? i0 + nq + tk - tq : tk;
    kend = kend < tk ? kend : tk;
    for (int64_t i = 0; i < nq * dh; i++)
        acc[i] = 0;
    for (int64_t i = 0; i < nq; i++) {
        m[i] = (T)-INFINITY;
        l[i] = 0;
    }
    for (int64_t j0 = 0; j0 < kend; j0 += ATTN_BK) {
        const int64_t nk = kend - j0 < ATTN_BK ? kend - j0 : ATTN_BK;
        AT_CAT(attn_transpose, SFX)(k + j0 * dh, nk, dh, kt);
        AT_CAT(attn_scores, SFX)(jb, q, kt, i0, nq, j0, nk, s);
        for (int64_t i = 0; i < nq; i++) {
            T *restrict si = s + i * nk;
            T mx = m[i];
            for (int64_t j = 0; j < nk; j++)
                mx = si[j] > mx ? si[j] : mx;
            if (mx == (T)-INFINITY) /* every key of the tile hidden, none seen before */
                continue;
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
            for (int64_t j = 0; j < nk; j++) {
                const T p = si[j];
                const T *restrict vj = v + (j0 + j) * dh;
                for (int64_t d = 0; d < dh; d++)
                    ai[d] += p * vj[d];
            }
        }
    }
    for (int64_t i = 0; i < nq; i++) {
        T *restrict oi = out + (i0 + i) * (dh + 1);
        const T *restrict ai = acc + i * dh;
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

/* dst[r, :] += sum_c w[r * wr + c * wc] src[c, :] for r < nr, c < nc (rows of dh), c in order. */
static void AT_CAT(attn_acc, SFX)(T *restrict dst, int64_t nr, const T *restrict w, int64_t wr,
                                  int64_t wc, const T *restrict src, int64_t nc, int64_t dh)
{
    for (int64_t r = 0; r < nr; r++) {
        T *restrict dr = dst + r * dh;
        for (int64_t c = 0; c < nc; c++) {
            const T x = w[r * wr + c * wc];
            const T *restrict sc = src + c * dh;
            for (int64_t d = 0; d < dh; d++)
                dr[d] += x * sc[d];
        }
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
    T *kt = (T *)(void *)(jb->ws + (size_t)sx__par_slot() * jb->slot_bytes);
    T *vt = kt + dh * ATTN_BK, *p = vt + dh * ATTN_BK, *dp = p + ATTN_BQ * ATTN_BK,
      *dd = dp + ATTN_BQ * ATTN_BK;
    const T sc = (T)jb->scale;
    for (int64_t i = 0; i < (tq + 2 * tk) * dh; i++)
        dq[i] = 0;
    for (int64_t j0 = 0; j0 < tk; j0 += ATTN_BK) {
        const int64_t nk = tk - j0 < ATTN_BK ? tk - j0 : ATTN_BK;
        AT_CAT(attn_transpose, SFX)(k + j0 * dh, nk, dh, kt);
        AT_CAT(attn_transpose, SFX)(v + j0 * dh, nk, dh, vt);
        /* the first query block with a row that sees key j0 */
        int64_t first = jb->causal ? j0 - (tk - tq) : 0;
        first = first < 0 ? 0 : first / ATTN_BQ * ATTN_BQ;
        for (int64_t i0 = first; i0 < tq; i0 += ATTN_BQ) {
            const int64_t nq = tq - i0 < ATTN_BQ ? tq - i0 : ATTN_BQ;
            AT_CAT(attn_scores, SFX)(jb, q, kt, i0, nq, j0, nk, p);
            for (int64_t i = 0; i < nq; i++) {
                const T lse = y[(i0 + i) * (dh + 1) + dh];
                T *restrict pi = p + i * nk;
                for (int64_t j = 0; j < nk; j++)
                    pi[j] = VM_EXP(pi[j] - lse);
            }
            AT_CAT(attn_delta, SFX)(y, dy, dh, i0, nq, dd);
            /* dV[j] += sum_i P[i,j] dO[i]: dO's rows have a stride of dh + 1 */
            for (int64_t j = 0; j < nk; j++) {
                T *restrict dvj = dv + (j0 + j) * dh;
                for (int64_t i = 0; i < nq; i++) {
                    const T x = p[i * nk + j];
                    const T *restrict gi = dy + (i0 + i) * (dh + 1);
                    for (int64_t d = 0; d < dh; d++)
                        dvj[d] += x * gi[d];
                }
            }
            AT_CAT(attn_prod, SFX)(dy + i0 * (dh + 1), dh + 1, nq, vt, nk, dh, dp);
            for (int64_t i = 0; i < nq; i++)
                for (int64_t j = 0; j < nk; j++)
                    p[i * nk + j] = p[i * nk + j] * (dp[i * nk + j] - dd[i]) * sc;
            AT_CAT(attn_acc, SFX)(dq + i0 * dh, nq, p, nk, 1, k + j0 * dh, nk, dh);
            AT_CAT(attn_acc, SFX)(dk + j0 * dh, nk, p, 1, nk, q + i0 * dh, nq, dh);
        }
    }
}

#undef AT_CAT
#undef AT_CAT_
