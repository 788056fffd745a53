/* linalg.c: the samples of the linear-algebra ops (cgraph/ops/linalg.c): each op's SPEC_, DT_,
 * sample generator and references. Part of ../opsamples.c, which includes it. */

/* ---------------------------------------------------------------- linear algebra */

/* inv, solve, det, logdet: singular values in [1, 3) (condition below 3), random sign of det */
static const int square_sizes[] = {1, 3, 5, 2};

#define SPEC_inv 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_inv, plain_inv)
#define DT_inv GEN(gen_linalg, 1)
static sx_cg_node *sample_inv(GEN_ARGS)
{
    CTX;
    int n = square_sizes[v];
    return sx_cg_inv(g, in_matrix(c, n, n, 1, 3));
}

static const struct {
    int n;
    shp b;
} solve_cases[] = {{3, {1, {3}}}, {4, {2, {4, 2}}}, {1, {2, {1, 3}}}};
#define SPEC_solve 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_solve, plain_solve)
#define DT_solve GEN(gen_solve, 1)
static sx_cg_node *sample_solve(GEN_ARGS)
{
    CTX;
    int n = solve_cases[v].n;
    sx_cg_node *a = in_matrix(c, n, n, 1, 3);
    return sx_cg_solve(g, a, in(c, solve_cases[v].b, V_UNIFORM, -2, 2));
}

#define SPEC_det 4, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_det, plain_det)
#define DT_det GEN(gen_linalg, 1)
static sx_cg_node *sample_det(GEN_ARGS)
{
    CTX;
    int n = square_sizes[v];
    return sx_cg_det(g, in_matrix(c, n, n, 1, 3));
}

#define SPEC_logdet 4, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_logdet, plain_det)
#define DT_logdet GEN(gen_linalg, 1)
static sx_cg_node *sample_logdet(GEN_ARGS)
{
    CTX;
    int n = square_sizes[v];
    return sx_cg_logdet(g, in_matrix(c, n, n, 1, 3));
}

/* cholesky: the symmetric part of an SPD input (eigenvalues in [1, 3)) */
#define SPEC_cholesky 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_cholesky, plain_cholesky)
#define DT_cholesky GEN(gen_linalg, 1)
static sx_cg_node *sample_cholesky(GEN_ARGS)
{
    CTX;
    double w[8];
    int n = square_sizes[v];
    for (int i = 0; i < n; i++)
        w[i] = uni(rng, 1, 3);
    return sx_cg_cholesky(g, in_symmetric(c, n, w));
}

/* qr: full rank (singular values in [1, 3)), tall, square and wide */
static const int qr_cases[][2] = {{5, 3}, {4, 4}, {3, 5}};
#define SPEC_qr_q 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_qr_q, plain_qr_q)
#define DT_qr_q GEN(gen_linalg, 1)
static sx_cg_node *sample_qr_q(GEN_ARGS)
{
    CTX;
    return sx_cg_qr_q(g, in_matrix(c, qr_cases[v][0], qr_cases[v][1], 1, 3));
}

#define SPEC_qr_r 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_qr_r, plain_qr_r)
#define DT_qr_r GEN(gen_linalg, 1)
static sx_cg_node *sample_qr_r(GEN_ARGS)
{
    CTX;
    return sx_cg_qr_r(g, in_matrix(c, qr_cases[v][0], qr_cases[v][1], 1, 3));
}

/* svd_s: distinct singular values, at least 0.5 apart and 1 from zero */
static const int svd_cases[][2] = {{4, 3}, {3, 5}, {4, 4}, {1, 1}};
#define SPEC_svd_s 4, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_svd_s, plain_svd_s)
#define DT_svd_s GEN(gen_linalg, 1)
static sx_cg_node *sample_svd_s(GEN_ARGS)
{
    CTX;
    int m = svd_cases[v][0], n = svd_cases[v][1];
    double sv[8], a[64];
    for (int i = 0; i < 8; i++)
        sv[i] = 1 + 0.8 * i + 0.3 * sx_rng_uniform(rng);
    spectral(rng, m, n, sv, false, a);
    return sx_cg_svd_s(g, leaf_of(c, (shp){2, {m, n}}, a, true, false));
}

/* eigh: symmetric with distinct eigenvalues (at least 0.7 apart, both signs). The eigenvector
 * signs are LAPACK's choice: continuous under small perturbations in practice, which finite
 * differences of eigh_v rely on. */
#define SPEC_eigh_w 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_eigh_w, plain_eigh_w)
#define DT_eigh_w GEN(gen_linalg, 1)
#define SPEC_eigh_v 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_eigh_v, plain_eigh_v)
#define DT_eigh_v GEN(gen_linalg, 1)
static sx_cg_node *eigh_input(ctx *c, int v)
{
    double w[8];
    int n = square_sizes[v];
    for (int i = 0; i < n; i++)
        w[i] = (double)(i - n / 2) + 0.3 * sx_rng_uniform(c->rng);
    return in_symmetric(c, n, w);
}

static sx_cg_node *sample_eigh_w(GEN_ARGS)
{
    CTX;
    return sx_cg_eigh_w(g, eigh_input(c, v));
}

static sx_cg_node *sample_eigh_v(GEN_ARGS)
{
    CTX;
    return sx_cg_eigh_v(g, eigh_input(c, v));
}

/* ---- linear algebra references: the kernels, and the identities that define each result */

static sx_status kernel_inv(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_inv_out(x[0], out);
}

static sx_status kernel_solve(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_solve_out(x[0], x[1], out);
}

static sx_status kernel_det(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_det_out(x[0], out);
}

static sx_status kernel_logdet(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_logdet_out(x[0], out, NULL);
}

static sx_status kernel_cholesky(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_cholesky_out(x[0], out);
}

static sx_status kernel_qr_q(KERNEL_ARGS)
{
    (void)n, (void)s;
    int64_t rs[2] = {out->shape[1], x[0]->shape[1]};
    sx_tensor *r = ref_zeros(out->dtype, 2, rs);
    sx_status st = sx_tensor_qr_out(x[0], out, r);
    sx_tensor_free(r);
    return st;
}

static sx_status kernel_qr_r(KERNEL_ARGS)
{
    (void)n, (void)s;
    int64_t qs[2] = {x[0]->shape[0], out->shape[0]};
    sx_tensor *q = ref_zeros(out->dtype, 2, qs);
    sx_status st = sx_tensor_qr_out(x[0], q, out);
    sx_tensor_free(q);
    return st;
}

static sx_status kernel_svd_s(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_svd_out(x[0], NULL, out, NULL);
}

static sx_status kernel_eigh_w(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_eigh_out(x[0], out, NULL);
}

static sx_status kernel_eigh_v(KERNEL_ARGS)
{
    (void)n, (void)s;
    int64_t wn = out->shape[0];
    sx_tensor *w = ref_zeros(out->dtype, 1, &wn);
    sx_status st = sx_tensor_eigh_out(x[0], w, out);
    sx_tensor_free(w);
    return st;
}

static double *ref_mat(const sx_tensor *t)
{
    double *m = ref_alloc((size_t)t->size * sizeof *m);
    for (int64_t i = 0; i < t->size; i++)
        m[i] = ref_get(t, i);
    return m;
}

static double ref_la_tol(sx_dtype dt)
{
    return dt == SX_F32 ? 1e-4 : 1e-10;
}

/* |p - q| <= tol (1 + |q|) for matrices of `count` entries; SX_E_STATE naming `which` if not. */
static sx_status ref_near(const double *p, const double *q, int64_t count, double tol,
                          const char *which)
{
    for (int64_t i = 0; i < count; i++)
        if (!(fabs(p[i] - q[i]) <= tol * (1 + fabs(q[i]))))
            return sx_error(SX_E_STATE, "%s: entry %lld: %.10g vs %.10g", which, (long long)i, p[i],
                            q[i]);
    return SX_OK;
}

/* c (m,n) = op(a) (m,k) @ op(b) (k,n); a is (m,k) or (k,m) when ta; b is (k,n) or (n,k). */
static void ref_mm(const double *a, bool ta, const double *b, bool tb, int64_t m, int64_t k,
                   int64_t n, double *c)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t l = 0; l < k; l++)
                s += (ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
            c[i * n + j] = s;
        }
}

static double *ref_eye(int64_t n)
{
    double *e = ref_alloc((size_t)(n * n) * sizeof *e);
    for (int64_t i = 0; i < n; i++)
        e[i * n + i] = 1;
    return e;
}

/* det by Gaussian elimination with partial pivoting (a is overwritten). */
static double ref_det(double *a, int64_t n)
{
    double det = 1;
    for (int64_t c = 0; c < n; c++) {
        int64_t p = c;
        for (int64_t r = c + 1; r < n; r++)
            if (fabs(a[r * n + c]) > fabs(a[p * n + c]))
                p = r;
        if (p != c) {
            det = -det;
            for (int64_t j = 0; j < n; j++) {
                double t = a[c * n + j];
                a[c * n + j] = a[p * n + j];
                a[p * n + j] = t;
            }
        }
        det *= a[c * n + c];
        for (int64_t r = c + 1; r < n; r++) {
            double f = a[r * n + c] / a[c * n + c];
            for (int64_t j = c; j < n; j++)
                a[r * n + j] -= f * a[c * n + j];
        }
    }
    return det;
}

static int ref_cmp_double(const void *p, const void *q)
{
    double a = *(const double *)p, b = *(const double *)q;
    return (a > b) - (a < b);
}

/* The eigenvalues of a symmetric matrix (a is overwritten), ascending: cyclic Jacobi. */
static void ref_eig(double *a, int64_t n, double *w)
{
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++)
                off += a[p * n + q] * a[p * n + q];
        if (off < 1e-30)
            break;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++) {
                if (a[p * n + q] == 0)
                    continue;
                double th = (a[q * n + q] - a[p * n + p]) / (2 * a[p * n + q]);
                double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int64_t k = 0; k < n; k++) { /* columns p, q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int64_t k = 0; k < n; k++) { /* rows p, q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
    }
    for (int64_t i = 0; i < n; i++)
        w[i] = a[i * n + i];
    qsort(w, (size_t)n, sizeof *w, ref_cmp_double);
}

/* What every identity check reads: a = x[0] and r = the result, as double matrices (freed by
 * la_end), x's shape (m, c) and the tolerance. The plain references of linear algebra check
 * the identities themselves (no element-wise comparison). */
typedef struct ref_la {
    double *a, *r, tol;
    int64_t m, c;
} ref_la;

static ref_la ref_la_begin(const sx_cg_node *n, const sx_tensor *const *x, bool *compare)
{
    const sx_tensor *y = sx_cg_value(n);
    ref_la l = {ref_mat(x[0]), ref_mat(y), ref_la_tol(y->dtype), x[0]->shape[0], x[0]->shape[1]};
    *compare = false;
    return l;
}

static sx_status ref_la_end(ref_la *l, sx_status st)
{
    free(l->a);
    free(l->r);
    return st;
}

static sx_status plain_inv(PLAIN_ARGS) /* a @ inv(a) = I */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    double *p = ref_alloc((size_t)(l.m * l.m) * sizeof *p), *e = ref_eye(l.m);
    ref_mm(l.a, false, l.r, false, l.m, l.m, l.m, p);
    sx_status st = ref_near(p, e, l.m * l.m, l.tol, "a @ inv(a) = I");
    free(p);
    free(e);
    return ref_la_end(&l, st);
}

static sx_status plain_solve(PLAIN_ARGS) /* a @ x = b */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    int64_t k = x[1]->rank == 1 ? 1 : x[1]->shape[1];
    double *p = ref_alloc((size_t)(l.m * k) * sizeof *p), *bb = ref_mat(x[1]);
    ref_mm(l.a, false, l.r, false, l.m, l.m, k, p);
    sx_status st = ref_near(p, bb, l.m * k, l.tol, "a @ solve(a, b) = b");
    free(p);
    free(bb);
    return ref_la_end(&l, st);
}

/* det and logdet: by elimination */
static sx_status plain_det(PLAIN_ARGS)
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    double d = ref_det(l.a, l.m);
    double w = sx_cg_node_op(n) == SX_OP_DET ? d : log(fabs(d));
    return ref_la_end(&l, ref_near(l.r, &w, 1, l.tol, "det by elimination"));
}

static sx_status plain_cholesky(PLAIN_ARGS) /* lower triangular, l @ l^T = a */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    sx_status st = SX_OK;
    for (int64_t i = 0; i < l.m; i++)
        for (int64_t j = i + 1; j < l.m && st == SX_OK; j++)
            if (l.r[i * l.m + j] != 0.0)
                st = sx_error(SX_E_STATE, "l[%lld,%lld] above the diagonal", (long long)i,
                              (long long)j);
    double *p = ref_alloc((size_t)(l.m * l.m) * sizeof *p);
    ref_mm(l.r, false, l.r, true, l.m, l.m, l.m, p);
    if (st == SX_OK)
        st = ref_near(p, l.a, l.m * l.m, l.tol, "l @ l^T = a");
    free(p);
    return ref_la_end(&l, st);
}

static sx_status
plain_qr_q(PLAIN_ARGS) /* orthonormal columns spanning a's: q^T q = I, q q^T a = a */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    int64_t k = sx_cg_value(n)->shape[1], m = l.m, c = l.c;
    double *p = ref_alloc((size_t)(k * k) * sizeof *p), *e = ref_eye(k);
    double *qa = ref_alloc((size_t)(k * c) * sizeof *qa),
           *qqa = ref_alloc((size_t)(m * c) * sizeof(double));
    ref_mm(l.r, true, l.r, false, k, m, k, p);
    sx_status st = ref_near(p, e, k * k, l.tol, "q^T q = I");
    ref_mm(l.r, true, l.a, false, k, m, c, qa);
    ref_mm(l.r, false, qa, false, m, k, c, qqa);
    if (st == SX_OK)
        st = ref_near(qqa, l.a, m * c, l.tol, "q q^T a = a");
    free(p);
    free(e);
    free(qa);
    free(qqa);
    return ref_la_end(&l, st);
}

static sx_status plain_qr_r(PLAIN_ARGS) /* upper triangular, r^T r = a^T a */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    int64_t k = sx_cg_value(n)->shape[0], m = l.m, c = l.c;
    sx_status st = SX_OK;
    double *p = ref_alloc((size_t)(c * c) * sizeof *p),
           *ata = ref_alloc((size_t)(c * c) * sizeof(double));
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < i && j < c && st == SX_OK; j++)
            if (l.r[i * c + j] != 0.0)
                st = sx_error(SX_E_STATE, "r[%lld,%lld] below the diagonal", (long long)i,
                              (long long)j);
    ref_mm(l.r, true, l.r, false, c, k, c, p);
    ref_mm(l.a, true, l.a, false, c, m, c, ata);
    if (st == SX_OK)
        st = ref_near(p, ata, c * c, l.tol, "r^T r = a^T a");
    free(p);
    free(ata);
    return ref_la_end(&l, st);
}

/* descending, the square roots of the eigenvalues of the Gram matrix */
static sx_status plain_svd_s(PLAIN_ARGS)
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    int64_t m = l.m, c = l.c, k = m < c ? m : c;
    double *gm = ref_alloc((size_t)(k * k) * sizeof *gm),
           *w = ref_alloc((size_t)k * sizeof(double));
    if (m < c)
        ref_mm(l.a, false, l.a, true, k, c, k, gm);
    else
        ref_mm(l.a, true, l.a, false, k, m, k, gm);
    ref_eig(gm, k, w);
    sx_status st = SX_OK;
    for (int64_t i = 0; i < k && st == SX_OK; i++) {
        double sv = sqrt(w[k - 1 - i]);
        st = ref_near(&l.r[i], &sv, 1, l.tol, "singular value");
    }
    free(gm);
    free(w);
    return ref_la_end(&l, st);
}

static sx_status plain_eigh_w(PLAIN_ARGS) /* the eigenvalues, ascending */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    double *w = ref_alloc((size_t)l.m * sizeof *w);
    ref_eig(l.a, l.m, w);
    sx_status st = ref_near(l.r, w, l.m, l.tol, "eigenvalues (ascending)");
    free(w);
    return ref_la_end(&l, st);
}

static sx_status plain_eigh_v(PLAIN_ARGS) /* v^T v = I, v^T a v = diag(w) with w ascending */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    int64_t m = l.m;
    double *w = ref_alloc((size_t)m * sizeof *w), *av = ref_alloc((size_t)(m * m) * sizeof(double));
    double *vav = ref_alloc((size_t)(m * m) * sizeof(double)), *a2 = ref_mat(x[0]), *e = ref_eye(m);
    ref_eig(a2, m, w);
    ref_mm(l.r, true, l.r, false, m, m, m, vav);
    sx_status st = ref_near(vav, e, m * m, l.tol, "v^T v = I");
    ref_mm(l.a, false, l.r, false, m, m, m, av);
    ref_mm(l.r, true, av, false, m, m, m, vav);
    for (int64_t i = 0; i < m; i++)
        e[i * m + i] = w[i];
    if (st == SX_OK)
        st = ref_near(vav, e, m * m, l.tol, "v^T a v = diag(w)");
    free(w);
    free(av);
    free(vav);
    free(a2);
    free(e);
    return ref_la_end(&l, st);
}
