/* sxent_tmpl.h: the cross-entropy against class indices (sx_tensor_sparse_xent_out and its
 * backward), instantiated by softmax.c once per instruction set for f32 (isa_each.h) and once
 * for f64: the row loops are written for the compiler to vectorise (omp simd reductions, each
 * row's summation order its own, whatever the thread count). Needs T and SFX. */
#define SX_CAT_(a, b) a##_##b
#define SX_CAT(a, b) SX_CAT_(a, b)

/* Cross-entropy against class indices, per row i of logits x (n,k) with class t = idx[i]
 * (checked by the caller: an integer in [0, k) or `ignore`): lse = m + log(sum exp(x - m)); with
 * dout == NULL, out[i] = lse - (1 - e) x[i,t] - e/k sum_j x[i,j]; otherwise
 * dx[i,j] = dout[i] * (exp(x[i,j] - lse) - e/k - (1 - e) [j == t]). An ignored row gives 0. A row
 * is read twice (max, then the sum or the gradient) while it is in cache: one pass over memory. */
typedef struct SX_CAT(sxent_ctx, SFX) {
    int64_t k, ignore;
    double e;
    const T *x, *idx, *dout;
    T *out;
} SX_CAT(sxent_ctx, SFX);

static void SX_CAT(sxent_rows, SFX)(void *ctx, int64_t i0, int64_t i1)
{
    const SX_CAT(sxent_ctx, SFX) *c = ctx;
    const int64_t k = c->k;
    const T *x = c->x, *dout = c->dout;
    T *out = c->out;
    const double e = c->e, ek = e / (double)k;
    for (int64_t i = i0; i < i1; i++) {
        const T *xr = x + i * k;
        const int64_t t = (int64_t)c->idx[i];
        if (t == c->ignore) {
            if (dout == NULL)
                out[i] = 0;
            else
                for (int64_t j = 0; j < k; j++)
                    out[i * k + j] = 0;
            continue;
        }
        T m = xr[0];
#pragma omp simd reduction(max : m)
        for (int64_t j = 1; j < k; j++)
            m = xr[j] > m ? xr[j] : m;
        double s = 0; /* the sum of exp(x - m), vectorised (its order fixed by the row alone) */
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < k; j++)
            s += (double)VM_EXP(xr[j] - m);
        if (dout == NULL) {
            double sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < k; j++)
                sum += (double)xr[j];
            const double lse = (double)m + log(s);
            out[i] = (T)(lse - (1 - e) * (double)xr[t] - ek * sum);
        } else {
            const T shift = (T)((double)m + log(s)), d = dout[i], dq = (T)((double)dout[i] * ek);
            T *dr = out + i * k;
#pragma omp simd
            for (int64_t j = 0; j < k; j++)
                dr[j] = d * VM_EXP(xr[j] - shift) - dq;
            dr[t] -= (T)((double)d * (1 - e));
        }
    }
}

static void SX_CAT(sxent_run, SFX)(int64_t n, int64_t k, const void *x, const void *idx,
                                   int64_t ignore, double e, const void *dout, void *out)
{
    SX_CAT(sxent_ctx, SFX) c = {k, ignore, e, x, idx, dout, out};
    if (n * k >= SX_PAR_MIN_HEAVY)
        sx__par_range(n, 1, SX_CAT(sxent_rows, SFX), &c);
    else
        SX_CAT(sxent_rows, SFX)(&c, 0, n);
}

#undef SX_CAT
#undef SX_CAT_
