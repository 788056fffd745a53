/* softmax_tmpl.h: softmax kernels for one dtype; included by softmax.c with T and SFX defined.
 * A block is `cn` (<= SM_CB) independent lanes along the reduced axis: lane j's element i is at
 * base[i * st + j]. Inner loops run over the lanes, contiguous in memory when the axis is not
 * the last one. Sums are accumulated in double for both dtypes. */
#define SM_CAT_(a, b) a##_##b
#define SM_CAT(a, b) SM_CAT_(a, b)

/* y = softmax(x) or log_softmax(x) of one block, stable: the lane maximum is subtracted. */
static void SM_CAT(sm_block_fwd, SFX)(const T *restrict x, T *restrict y, int64_t len, int64_t st,
                                      int64_t cn, bool log_form)
{
    T m[SM_CB];
    double s[SM_CB];
    for (int64_t j = 0; j < cn; j++) {
        m[j] = x[j];
        s[j] = 0;
    }
    for (int64_t i = 1; i < len; i++)
        for (int64_t j = 0; j < cn; j++) {
            const T v = x[i * st + j];
            m[j] = v > m[j] ? v : m[j];
        }
    if (log_form) {
        for (int64_t i = 0; i < len; i++)
            for (int64_t j = 0; j < cn; j++)
                s[j] += (double)VM_EXP(x[i * st + j] - m[j]);
        for (int64_t j = 0; j < cn; j++)
            s[j] = log(s[j]);
        for (int64_t i = 0; i < len; i++)
            for (int64_t j = 0; j < cn; j++)
                y[i * st + j] = (T)((double)(x[i * st + j] - m[j]) - s[j]);
        return;
    }
    for (int64_t i = 0; i < len; i++)
        for (int64_t j = 0; j < cn; j++) {
            const T e = VM_EXP(x[i * st + j] - m[j]);
            y[i * st + j] = e;
            s[j] += (double)e;
        }
    for (int64_t j = 0; j < cn; j++)
        s[j] = 1.0 / s[j];
    for (int64_t i = 0; i < len; i++)
        for (int64_t j = 0; j < cn; j++)
            y[i * st + j] = (T)((double)y[i * st + j] * s[j]);
}

/* The same for one contiguous row (the reduced axis is the last one: a single lane, stride 1),
 * its loops vectorised: the maximum, then exp and its sum (in double; the order of the partial
 * sums is fixed by the row's length alone, whatever the thread count), then the scaling. */
static void SM_CAT(sm_row_fwd, SFX)(const T *restrict x, T *restrict y, int64_t len, bool log_form)
{
    T m = x[0];
#pragma omp simd reduction(max : m)
    for (int64_t i = 1; i < len; i++)
        m = x[i] > m ? x[i] : m;
    double s = 0;
    if (log_form) {
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < len; i++)
            s += (double)VM_EXP(x[i] - m);
        const double ls = log(s);
#pragma omp simd
        for (int64_t i = 0; i < len; i++)
            y[i] = (T)((double)(x[i] - m) - ls);
        return;
    }
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < len; i++) {
        const T e = VM_EXP(x[i] - m);
        y[i] = e;
        s += (double)e;
    }
    const double r = 1.0 / s;
#pragma omp simd
    for (int64_t i = 0; i < len; i++)
        y[i] = (T)((double)y[i] * r);
}

/* dx from the forward result y and dy, one block:
 *   softmax:      dx = y * (dy - sum(dy * y))
 *   log-softmax:  dx = dy - exp(y) * sum(dy) */
static void SM_CAT(sm_block_bwd, SFX)(const T *restrict y, const T *restrict dy, T *restrict dx,
                                      int64_t len, int64_t st, int64_t cn, bool log_form)
{
    double s[SM_CB];
    for (int64_t j = 0; j < cn; j++)
        s[j] = 0;
    if (log_form) {
        for (int64_t i = 0; i < len; i++)
            for (int64_t j = 0; j < cn; j++)
                s[j] += (double)dy[i * st + j];
        for (int64_t i = 0; i < len; i++)
            for (int64_t j = 0; j < cn; j++) {
                const int64_t k = i * st + j;
                dx[k] = (T)((double)dy[k] - (double)VM_EXP(y[k]) * s[j]);
            }
        return;
    }
    for (int64_t i = 0; i < len; i++)
        for (int64_t j = 0; j < cn; j++)
            s[j] += (double)dy[i * st + j] * (double)y[i * st + j];
    for (int64_t i = 0; i < len; i++)
        for (int64_t j = 0; j < cn; j++) {
            const int64_t k = i * st + j;
            dx[k] = (T)((double)y[k] * ((double)dy[k] - s[j]));
        }
}

typedef struct SM_CAT(sm_ctx, SFX) {
    const sm_geom *g;
    const T *a, *dy;
    T *out;
    bool log_form;
} SM_CAT(sm_ctx, SFX);

/* Blocks [t0, t1) of sm_run. */
static void SM_CAT(sm_blocks, SFX)(void *ctx, int64_t t0, int64_t t1)
{
    const SM_CAT(sm_ctx, SFX) *c = ctx;
    const sm_geom *g = c->g;
    const int64_t ncb = (g->inner + SM_CB - 1) / SM_CB;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t o = t / ncb, j0 = (t % ncb) * SM_CB;
        const int64_t cn = g->inner - j0 < SM_CB ? g->inner - j0 : SM_CB;
        const int64_t base = o * g->len * g->inner + j0;
        if (c->dy == NULL && g->inner == 1) {
            SM_CAT(sm_row_fwd, SFX)(c->a + base, c->out + base, g->len, c->log_form);
        } else if (c->dy == NULL) {
            SM_CAT(sm_block_fwd, SFX)
            (c->a + base, c->out + base, g->len, g->inner, cn, c->log_form);
        } else {
            SM_CAT(sm_block_bwd, SFX)
            (c->a + base, c->dy + base, c->out + base, g->len, g->inner, cn, c->log_form);
        }
    }
}

/* Run the forward (dy == NULL) or backward kernel over every block of x viewed as
 * (outer, len, inner). Blocks are independent, so the split over threads changes nothing. */
static void SM_CAT(sm_run, SFX)(const sm_geom *g, const T *a, const T *dy, T *out, bool log_form)
{
    const int64_t ncb = (g->inner + SM_CB - 1) / SM_CB;
    const int64_t tasks = g->len > 0 ? g->outer * ncb : 0; /* an empty axis has nothing to do */
    SM_CAT(sm_ctx, SFX) c = {g, a, dy, out, log_form};
    if (g->outer * g->len * g->inner >= SX_PAR_MIN_HEAVY)
        sx__par_range(tasks, 1, SM_CAT(sm_blocks, SFX), &c);
    else
        SM_CAT(sm_blocks, SFX)(&c, 0, tasks);
}

/* Per row i of logits x (n,k): lse = m + log(sum exp(x - m)); with dout == NULL,
 * out[i] = sum_j t[i,j] * (lse - x[i,j]) (terms with t == 0 skipped, so 0 * -inf never
 * appears); otherwise the exact gradient dx[i,j] = dout[i] * (softmax[i,j] * sum_j t[i,j] -
 * t[i,j]), which is the familiar dout[i] * (softmax - t) when the target rows sum to 1. */
typedef struct SM_CAT(xent_ctx, SFX) {
    int64_t k;
    const T *x, *t, *dout;
    T *out;
} SM_CAT(xent_ctx, SFX);

static void SM_CAT(xent_rows, SFX)(void *ctx, int64_t i0, int64_t i1)
{
    const SM_CAT(xent_ctx, SFX) *c = ctx;
    const int64_t k = c->k;
    const T *x = c->x, *t = c->t, *dout = c->dout;
    T *out = c->out;
    for (int64_t i = i0; i < i1; i++) {
        const T *xr = x + i * k, *tr = t + i * k;
        if (k == 0) {
            if (dout == NULL)
                out[i] = 0;
            continue;
        }
        T m = xr[0];
        for (int64_t j = 1; j < k; j++)
            m = xr[j] > m ? xr[j] : m;
        double s = 0;
        for (int64_t j = 0; j < k; j++)
            s += (double)VM_EXP(xr[j] - m);
        const double lse = (double)m + log(s);
        if (dout == NULL) {
            double acc = 0;
            for (int64_t j = 0; j < k; j++)
                if (tr[j] != 0)
                    acc += (double)tr[j] * (lse - (double)xr[j]);
            out[i] = (T)acc;
        } else {
            double tsum = 0;
            for (int64_t j = 0; j < k; j++)
                tsum += (double)tr[j];
            const double d = (double)dout[i];
            for (int64_t j = 0; j < k; j++)
                out[i * k + j] = (T)(d * (exp((double)xr[j] - lse) * tsum - (double)tr[j]));
        }
    }
}

static void SM_CAT(xent_run, SFX)(int64_t n, int64_t k, const T *x, const T *t, const T *dout,
                                  T *out)
{
    SM_CAT(xent_ctx, SFX) c = {k, x, t, dout, out};
    if (n * k >= SX_PAR_MIN_HEAVY)
        sx__par_range(n, 1, SM_CAT(xent_rows, SFX), &c);
    else
        SM_CAT(xent_rows, SFX)(&c, 0, n);
}

#undef SM_CAT
#undef SM_CAT_
