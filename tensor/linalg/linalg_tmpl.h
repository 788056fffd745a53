/* linalg_tmpl.h: the LAPACKE drivers for one dtype; included by linalg.c with T, SFX, LA(name)
 * (the LAPACKE routine) and LA_STR (its name prefix, for messages) defined. Arguments are
 * already checked. Each driver copies its input into one scratch block from sx_alloc (LAPACK
 * overwrites its input), runs LAPACK there, and writes the outputs only once every call has
 * succeeded, so a failure leaves them untouched. */
#define LA_CAT_(a, b) a##_##b
#define LA_CAT(a, b) LA_CAT_(a, b)

/* Copy the (m,n) matrix src into dst; reject NaN/Inf in the part LAPACK reads (the lower
 * triangle only when `lower`). */
static sx_status LA_CAT(load, SFX)(const char *who, const char *name, const T *src, T *dst,
                                   int64_t m, int64_t n, bool lower)
{
    memcpy(dst, src, sizeof(T) * (size_t)(m * n));
    for (int64_t i = 0; i < m; i++) {
        const int64_t end = lower && i + 1 < n ? i + 1 : n;
        for (int64_t j = 0; j < end; j++)
            if (!isfinite(src[i * n + j]))
                return sx_error(SX_E_RANGE, "%s: %s[%lld,%lld] is %g (LAPACK needs finite values)",
                                who, name, (long long)i, (long long)j, (double)src[i * n + j]);
    }
    return SX_OK;
}

static sx_status LA_CAT(inv, SFX)(const char *who, const sx_tensor *a, sx_tensor *out)
{
    const lapack_int n = (lapack_int)a->shape[0];
    if (n == 0)
        return SX_OK;
    T *w = sx_alloc(sizeof(T) * (size_t)n * (size_t)n + sizeof(lapack_int) * (size_t)n);
    if (w == NULL)
        return SX_E_NOMEM;
    lapack_int *ipiv = (lapack_int *)(w + (size_t)n * (size_t)n);
    sx_status s = LA_CAT(load, SFX)(who, "a", a->data, w, n, n, false);
    if (s != SX_OK)
        goto free_w;
    lapack_int info = LA(getrf)(LAPACK_ROW_MAJOR, n, n, w, n, ipiv);
    if (info != 0) {
        s = la_fail(who, LA_STR "getrf", info, SX_E_SINGULAR);
        goto free_w;
    }
    info = LA(getri)(LAPACK_ROW_MAJOR, n, w, n, ipiv);
    if (info != 0) {
        s = la_fail(who, LA_STR "getri", info, SX_E_SINGULAR);
        goto free_w;
    }
    memcpy(out->data, w, sizeof(T) * (size_t)n * (size_t)n);
free_w:
    sx_free(w);
    return s;
}

/* a (n,n), b (n,nrhs) row-major with ldb = nrhs (a vector b is one column). */
static sx_status LA_CAT(solve, SFX)(const char *who, const sx_tensor *a, const sx_tensor *b,
                                    sx_tensor *out)
{
    const lapack_int n = (lapack_int)a->shape[0];
    const lapack_int nrhs = b->rank == 1 ? 1 : (lapack_int)b->shape[1];
    if (n == 0)
        return SX_OK;
    const size_t nn = (size_t)n * (size_t)n, nb = (size_t)n * (size_t)nrhs;
    T *w = sx_alloc(sizeof(T) * (nn + nb) + sizeof(lapack_int) * (size_t)n);
    if (w == NULL)
        return SX_E_NOMEM;
    T *x = w + nn;
    lapack_int *ipiv = (lapack_int *)(x + nb);
    sx_status s = LA_CAT(load, SFX)(who, "a", a->data, w, n, n, false);
    if (s == SX_OK)
        s = LA_CAT(load, SFX)(who, "b", b->data, x, n, nrhs, false);
    if (s != SX_OK)
        goto free_w;
    lapack_int info = LA(gesv)(LAPACK_ROW_MAJOR, n, nrhs, w, n, ipiv, x, nrhs > 0 ? nrhs : 1);
    if (info != 0) {
        s = la_fail(who, LA_STR "gesv", info, SX_E_SINGULAR);
        goto free_w;
    }
    memcpy(out->data, x, sizeof(T) * nb);
free_w:
    sx_free(w);
    return s;
}

/* LU factorisation of a copy of a: the determinant as sign * mant * 2^e (kept normalised so
 * the product of the pivots neither overflows nor underflows on the way) and log|det|. A
 * singular matrix gives sign 0 and logabs -inf (not an error). */
static sx_status LA_CAT(lu_det, SFX)(const char *who, const sx_tensor *a, double *sign,
                                     double *mant, int64_t *e, double *logabs)
{
    const lapack_int n = (lapack_int)a->shape[0];
    *sign = 1;
    *mant = 1;
    *e = 0;
    *logabs = 0;
    if (n == 0)
        return SX_OK;
    T *w = sx_alloc(sizeof(T) * (size_t)n * (size_t)n + sizeof(lapack_int) * (size_t)n);
    if (w == NULL)
        return SX_E_NOMEM;
    lapack_int *ipiv = (lapack_int *)(w + (size_t)n * (size_t)n);
    sx_status s = LA_CAT(load, SFX)(who, "a", a->data, w, n, n, false);
    if (s != SX_OK)
        goto free_w;
    lapack_int info = LA(getrf)(LAPACK_ROW_MAJOR, n, n, w, n, ipiv);
    if (info > 0) { /* an exact zero pivot: det = 0 */
        *sign = 0;
        *mant = 0;
        *logabs = -INFINITY;
        goto free_w;
    }
    if (info < 0) {
        s = la_fail(who, LA_STR "getrf", info, SX_E_LAPACK);
        goto free_w;
    }
    for (lapack_int i = 0; i < n; i++) {
        const double u = (double)w[(size_t)i * (size_t)n + (size_t)i];
        int k = 0;
        if (u < 0)
            *sign = -*sign;
        if (ipiv[i] != i + 1) /* ipiv is 1-based: a row swap flips the sign */
            *sign = -*sign;
        *mant = frexp(*mant * fabs(u), &k);
        *e += k;
        *logabs += log(fabs(u));
    }
free_w:
    sx_free(w);
    return s;
}

static sx_status LA_CAT(cholesky, SFX)(const char *who, const sx_tensor *a, sx_tensor *l)
{
    const lapack_int n = (lapack_int)a->shape[0];
    if (n == 0)
        return SX_OK;
    T *w = sx_alloc(sizeof(T) * (size_t)n * (size_t)n);
    if (w == NULL)
        return SX_E_NOMEM;
    sx_status s = LA_CAT(load, SFX)(who, "a", a->data, w, n, n, true);
    if (s != SX_OK)
        goto free_w;
    lapack_int info = LA(potrf)(LAPACK_ROW_MAJOR, 'L', n, w, n);
    if (info != 0) {
        s = la_fail(who, LA_STR "potrf", info, SX_E_NOT_PD);
        goto free_w;
    }
    for (lapack_int i = 0; i < n; i++)
        for (lapack_int j = i + 1; j < n; j++)
            w[(size_t)i * (size_t)n + (size_t)j] = 0;
    memcpy(l->data, w, sizeof(T) * (size_t)n * (size_t)n);
free_w:
    sx_free(w);
    return s;
}

/* geqrf leaves R in the upper triangle and the Householder vectors below it; R is saved, then
 * orgqr turns the first k columns into the reduced Q. */
static sx_status LA_CAT(qr, SFX)(const char *who, const sx_tensor *a, sx_tensor *q, sx_tensor *r)
{
    const lapack_int m = (lapack_int)a->shape[0], n = (lapack_int)a->shape[1];
    const lapack_int k = m < n ? m : n;
    if (k == 0)
        return SX_OK; /* q (m,0) and r (0,n) are empty */
    const size_t mn = (size_t)m * (size_t)n, kn = (size_t)k * (size_t)n;
    T *w = sx_alloc(sizeof(T) * (mn + kn + (size_t)k));
    if (w == NULL)
        return SX_E_NOMEM;
    T *rr = w + mn, *tau = rr + kn;
    sx_status s = LA_CAT(load, SFX)(who, "a", a->data, w, m, n, false);
    if (s != SX_OK)
        goto free_w;
    lapack_int info = LA(geqrf)(LAPACK_ROW_MAJOR, m, n, w, n, tau);
    if (info != 0) {
        s = la_fail(who, LA_STR "geqrf", info, SX_E_LAPACK);
        goto free_w;
    }
    for (lapack_int i = 0; i < k; i++)
        for (lapack_int j = 0; j < n; j++)
            rr[(size_t)i * (size_t)n + (size_t)j] =
                j >= i ? w[(size_t)i * (size_t)n + (size_t)j] : 0;
    info = LA(orgqr)(LAPACK_ROW_MAJOR, m, k, k, w, n, tau);
    if (info != 0) {
        s = la_fail(who, LA_STR "orgqr", info, SX_E_LAPACK);
        goto free_w;
    }
    T *qd = q->data;
    for (lapack_int i = 0; i < m; i++)
        memcpy(qd + (size_t)i * (size_t)k, w + (size_t)i * (size_t)n, sizeof(T) * (size_t)k);
    memcpy(r->data, rr, sizeof(T) * kn);
free_w:
    sx_free(w);
    return s;
}

/* Thin SVD by gesdd (divide and conquer); if it fails to converge, gesvd (QR iteration) is tried
 * on a fresh copy before giving up. Without u and vt only the singular values are computed. */
static sx_status LA_CAT(svd, SFX)(const char *who, const sx_tensor *a, sx_tensor *u, sx_tensor *s,
                                  sx_tensor *vt)
{
    const lapack_int m = (lapack_int)a->shape[0], n = (lapack_int)a->shape[1];
    const lapack_int k = m < n ? m : n;
    if (k == 0)
        return SX_OK;
    const bool vec = u != NULL || vt != NULL;
    const size_t mn = (size_t)m * (size_t)n, mk = vec ? (size_t)m * (size_t)k : 0;
    const size_t kn = vec ? (size_t)k * (size_t)n : 0;
    T *w = sx_alloc(sizeof(T) * (mn + 2 * (size_t)k + mk + kn));
    if (w == NULL)
        return SX_E_NOMEM;
    T *sv = w + mn, *superb = sv + k, *uu = superb + k, *vv = uu + mk;
    const char job = vec ? 'S' : 'N';
    const lapack_int ldu = k, ldvt = n; /* LAPACKE checks them even when unused */
    sx_status st = LA_CAT(load, SFX)(who, "a", a->data, w, m, n, false);
    if (st != SX_OK)
        goto free_w;
    const char *routine = LA_STR "gesdd";
    lapack_int info = LA(gesdd)(LAPACK_ROW_MAJOR, job, m, n, w, n, sv, uu, ldu, vv, ldvt);
    if (info > 0) {
        routine = LA_STR "gesvd";
        memcpy(w, a->data, sizeof(T) * mn);
        info = LA(gesvd)(LAPACK_ROW_MAJOR, job, job, m, n, w, n, sv, uu, ldu, vv, ldvt, superb);
    }
    if (info != 0) {
        st = la_fail(who, routine, info, SX_E_LAPACK);
        goto free_w;
    }
    memcpy(s->data, sv, sizeof(T) * (size_t)k);
    if (u != NULL)
        memcpy(u->data, uu, sizeof(T) * mk);
    if (vt != NULL)
        memcpy(vt->data, vv, sizeof(T) * kn);
free_w:
    sx_free(w);
    return st;
}

/* syevd on the lower triangle: eigenvalues ascending, eigenvectors in the columns. */
static sx_status LA_CAT(eigh, SFX)(const char *who, const sx_tensor *a, sx_tensor *wv, sx_tensor *v)
{
    const lapack_int n = (lapack_int)a->shape[0];
    if (n == 0)
        return SX_OK;
    const size_t nn = (size_t)n * (size_t)n;
    T *w = sx_alloc(sizeof(T) * (nn + (size_t)n));
    if (w == NULL)
        return SX_E_NOMEM;
    T *ev = w + nn;
    sx_status s = LA_CAT(load, SFX)(who, "a", a->data, w, n, n, true);
    if (s != SX_OK)
        goto free_w;
    lapack_int info = LA(syevd)(LAPACK_ROW_MAJOR, v != NULL ? 'V' : 'N', 'L', n, w, n, ev);
    if (info != 0) {
        s = la_fail(who, LA_STR "syevd", info, SX_E_LAPACK);
        goto free_w;
    }
    memcpy(wv->data, ev, sizeof(T) * (size_t)n);
    if (v != NULL)
        memcpy(v->data, w, sizeof(T) * nn);
free_w:
    sx_free(w);
    return s;
}

#undef LA_CAT
#undef LA_CAT_
