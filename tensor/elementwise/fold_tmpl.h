/* fold_tmpl.h: the reduction kernels of fold.c for one dtype; included with T and SFX defined.
 * Contiguous-run kernels (pairwise sums with independent lanes, NaN-propagating max/min),
 * row kernels that fold a whole contiguous row into a tile of accumulators, and the two
 * drivers: innermost merged axis reduced (case A) or kept (case B). */
#define FD_CAT_(a, b) a##_##b
#define FD_CAT(a, b) FD_CAT_(a, b)
#define FD(name) FD_CAT(name, SFX)

/* ------------------------------------------------------------ contiguous runs (case A) */

/* sum of G(v) over x[0..n), v = x[i]. Pairwise: runs of at most PW_BLOCK elements are summed
 * in LANES independent accumulators of type A (vectorisable; each accumulator sees at most
 * PW_BLOCK / LANES = 16 terms), the lanes are added in double, and longer runs are split in two
 * halves summed recursively in double. So the error grows with log(n), not n, and f32 inputs
 * keep f32 speed: A is T for sums, |x| and the shifted exp (at most 1), double for squares
 * (x^2 of a large f32 would overflow in float). */
#define PW_SUM(NAME, A, G)                                                                         \
    static double NAME(const T *x, int64_t n, T s)                                                 \
    {                                                                                              \
        (void)s;                                                                                   \
        if (n > PW_BLOCK) {                                                                        \
            int64_t h = (n / 2) & ~(int64_t)(LANES - 1);                                           \
            return NAME(x, h, s) + NAME(x + h, n - h, s);                                          \
        }                                                                                          \
        A acc[LANES] = {0};                                                                        \
        int64_t i = 0;                                                                             \
        for (; i + LANES <= n; i += LANES)                                                         \
            for (int k = 0; k < LANES; k++) {                                                      \
                const T v = x[i + k];                                                              \
                acc[k] += (G);                                                                     \
            }                                                                                      \
        double t = 0;                                                                              \
        for (; i < n; i++) {                                                                       \
            const T v = x[i];                                                                      \
            t += (double)(G);                                                                      \
        }                                                                                          \
        return (((double)acc[0] + (double)acc[1]) + ((double)acc[2] + (double)acc[3])) +           \
               (((double)acc[4] + (double)acc[5]) + ((double)acc[6] + (double)acc[7])) + t;        \
    }

PW_SUM(FD(pw_sum), T, v)
PW_SUM(FD(pw_abs), T, fabs(v))
PW_SUM(FD(pw_sqr), double, (double)v *(double)v)
PW_SUM(FD(pw_exp), T, VM_EXP(v - s))
#undef PW_SUM

/* Product of x[0..n) in LANES double accumulators. */
static double FD(prod_run)(const T *x, int64_t n)
{
    double acc[LANES];
    for (int k = 0; k < LANES; k++)
        acc[k] = 1;
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] *= (double)x[i + k];
    double t = 1;
    for (; i < n; i++)
        t *= (double)x[i];
    return ((acc[0] * acc[1]) * (acc[2] * acc[3])) * ((acc[4] * acc[5]) * (acc[6] * acc[7])) * t;
}

/* Max / min of x[0..n), n >= 1, NaN if any element is NaN. Compilers do not vectorise a
 * NaN-aware select as a reduction, so with GCC/Clang the LANES accumulators are explicit
 * vectors (a lane that has taken a NaN keeps it: the select takes v when it is better or NaN).
 * The lanes and the tail are then folded with the scalar `r CMP u ? r : u` (maxss / minss,
 * which drop NaNs) while `bad` records whether a NaN was seen: no unpredictable branches. */
#if FOLD_VEC
typedef T FD(vec) __attribute__((vector_size(FOLD_VBYTES)));
typedef IT FD(ivec) __attribute__((vector_size(FOLD_VBYTES)));
#define FOLD_NV ((int)(LANES * sizeof(T) / FOLD_VBYTES)) /* vectors per LANES elements */
#define FOLD_VL (FOLD_VBYTES / (int)sizeof(T))           /* elements per vector */
#define MINMAX_LANES(CMP)                                                                          \
    if (n >= LANES) {                                                                              \
        FD(vec) m[FOLD_NV], v;                                                                     \
        memcpy(m, x, sizeof m);                                                                    \
        for (i = LANES; i + LANES <= n; i += LANES)                                                \
            for (int q = 0; q < FOLD_NV; q++) {                                                    \
                memcpy(&v, x + i + q * FOLD_VL, sizeof v);                                         \
                FD(ivec) take = (v CMP m[q]) | (v != v);                                           \
                m[q] = (FD(vec))((take & (FD(ivec))v) | (~take & (FD(ivec))m[q]));                 \
            }                                                                                      \
        for (int q = 0; q < FOLD_NV; q++)                                                          \
            for (int k = 0; k < FOLD_VL; k++) {                                                    \
                const T u = m[q][k];                                                               \
                bad |= u != u;                                                                     \
                r = r CMP u ? r : u;                                                               \
            }                                                                                      \
    }
#else
#define MINMAX_LANES(CMP)
#endif

#define MINMAX_RUN(NAME, CMP)                                                                      \
    static T NAME(const T *x, int64_t n)                                                           \
    {                                                                                              \
        T r = x[0];                                                                                \
        int bad = 0;                                                                               \
        int64_t i = 0;                                                                             \
        MINMAX_LANES(CMP)                                                                          \
        for (; i < n; i++) {                                                                       \
            const T u = x[i];                                                                      \
            bad |= u != u;                                                                         \
            r = r CMP u ? r : u;                                                                   \
        }                                                                                          \
        return bad ? (T)NAN : r;                                                                   \
    }
MINMAX_RUN(FD(max_run), >)
MINMAX_RUN(FD(min_run), <)
#undef MINMAX_RUN
#undef MINMAX_LANES
#undef FOLD_NV
#undef FOLD_VL

/* Index of the first element of x[0..n) equal to t (the first NaN when t is NaN). */
static int64_t FD(find_first)(const T *x, int64_t n, T t)
{
    if (t != t) {
        for (int64_t i = 0; i < n; i++)
            if (x[i] != x[i])
                return i;
    } else {
        for (int64_t i = 0; i < n; i++)
            if (x[i] == t)
                return i;
    }
    return 0; /* not reached: t was taken from x */
}

/* The partial result of one contiguous run x[0..n), n >= 1, whose first element has flat index
 * r in the reduced space. */
static facc FD(run)(rkind rk, const T *x, int64_t n, int64_t r, T shift)
{
    facc a = {0, -1};
    switch (rk) {
    case RK_SUM:
        a.v = FD(pw_sum)(x, n, shift);
        break;
    case RK_ABS:
        a.v = FD(pw_abs)(x, n, shift);
        break;
    case RK_SQR:
        a.v = FD(pw_sqr)(x, n, shift);
        break;
    case RK_EXP:
        a.v = FD(pw_exp)(x, n, shift);
        break;
    case RK_PROD:
        a.v = FD(prod_run)(x, n);
        break;
    case RK_MAX:
        a.v = (double)FD(max_run)(x, n);
        break;
    case RK_MIN:
        a.v = (double)FD(min_run)(x, n);
        break;
    case RK_ARGMAX: {
        T m = FD(max_run)(x, n);
        a.v = (double)m;
        a.i = r + FD(find_first)(x, n, m);
        break;
    }
    case RK_ARGMIN: {
        T m = FD(min_run)(x, n);
        a.v = (double)m;
        a.i = r + FD(find_first)(x, n, m);
        break;
    }
    }
    return a;
}

/* Case A: fold the reduced positions [r0, r1) of the output whose elements start at x + base.
 * The reduced space is the outer reduced axes times the innermost (contiguous) run of
 * length L; runs are folded one after the other in row-major order. */
static facc FD(a_chunk)(rkind rk, const T *x, const fplan *p, int64_t base, int64_t r0, int64_t r1,
                        T shift)
{
    const int nr = p->nr;
    const int64_t len = p->rdim[nr - 1];
    int64_t idx[SX_MAX_RANK], off = 0, q = r0 / len, w = r0 % len;
    for (int d = nr - 2; d >= 0; d--) {
        idx[d] = q % p->rdim[d];
        q /= p->rdim[d];
        off += idx[d] * p->rst[d];
    }
    facc acc = facc_identity(rk);
    for (int64_t r = r0; r < r1;) {
        int64_t n = len - w < r1 - r ? len - w : r1 - r;
        acc = facc_combine(rk, acc, FD(run)(rk, x + base + off + w, n, r, shift));
        r += n;
        w = 0;
        for (int d = nr - 2; d >= 0; d--) {
            off += p->rst[d];
            if (++idx[d] < p->rdim[d])
                break;
            off -= p->rdim[d] * p->rst[d];
            idx[d] = 0;
        }
    }
    return acc;
}

typedef struct FD(a_chunks_ctx) {
    rkind rk;
    const T *x;
    const fplan *p;
    int64_t base, ch;
    T shift;
    facc *parts; /* (nch) */
} FD(a_chunks_ctx);

static void FD(a_chunk_task)(void *ctx, int64_t c)
{
    const FD(a_chunks_ctx) *a = ctx;
    const int64_t r1 = (c + 1) * a->ch < a->p->R ? (c + 1) * a->ch : a->p->R;
    a->parts[c] = FD(a_chunk)(a->rk, a->x, a->p, a->base, c * a->ch, r1, a->shift);
}

/* Case A: the whole reduction of one output, as the chunks of a_chunks() folded in order.
 * With `par` the chunks run on the pool's threads; the result is the same either way. */
static facc FD(a_reduce)(rkind rk, const T *x, const fplan *p, int64_t base, T shift, bool par)
{
    if (p->nr == 1 && p->R <= CHUNK_A) /* one run, one chunk: the same result, less overhead */
        return FD(run)(rk, x + base, p->R, 0, shift);
    int64_t ch, nch = a_chunks(p->R, &ch);
    if (!par || nch == 1) {
        facc acc = facc_identity(rk);
        for (int64_t c = 0; c < nch; c++) {
            int64_t r1 = (c + 1) * ch < p->R ? (c + 1) * ch : p->R;
            acc = facc_combine(rk, acc, FD(a_chunk)(rk, x, p, base, c * ch, r1, shift));
        }
        return acc;
    }
    facc parts[NCH_A];
    FD(a_chunks_ctx) ac = {rk, x, p, base, ch, shift, parts};
    sx__par_for(nch, FD(a_chunk_task), &ac);
    facc acc = facc_identity(rk);
    for (int64_t c = 0; c < nch; c++)
        acc = facc_combine(rk, acc, parts[c]);
    return acc;
}

/* Case A: the value of output element o. logsumexp takes two passes: the max m, then the sum
 * of exp(x - m) (m + log of it; an infinite or NaN max is the result itself). */
static T FD(a_output)(sx_fold_op op, const T *x, const fplan *p, int64_t o, bool par)
{
    const int64_t base = offset_of(o, p->nk, p->kdim, p->kst);
    facc a = FD(a_reduce)(fold_kind(op), x, p, base, 0, par);
    if (op == SX_FOLD_LOGSUMEXP) {
        const T m = (T)a.v;
        if (!isfinite(m))
            return m;
        return (T)(a.v + log(FD(a_reduce)(RK_EXP, x, p, base, m, par).v));
    }
    return (T)fold_finish(op, a, p->R);
}

typedef struct FD(outputs_ctx) {
    sx_fold_op op;
    const T *x;
    const fplan *p;
    T *out;
    int64_t w; /* case B: the tile width */
} FD(outputs_ctx);

static void FD(a_outputs)(void *ctx, int64_t o0, int64_t o1)
{
    const FD(outputs_ctx) *a = ctx;
    for (int64_t o = o0; o < o1; o++)
        a->out[o] = FD(a_output)(a->op, a->x, a->p, o, false);
}

static void FD(drive_a)(sx_fold_op op, const T *x, const fplan *p, T *out, bool big)
{
    const int64_t K = p->K;
    if (!big || K >= 4 * sx__par_threads()) {
        FD(outputs_ctx) a = {op, x, p, out, 0};
        if (big)
            sx__par_range(K, 1, FD(a_outputs), &a);
        else
            FD(a_outputs)(&a, 0, K);
    } else {
        for (int64_t o = 0; o < K; o++)
            out[o] = FD(a_output)(op, x, p, o, true);
    }
}

/* ------------------------------------------------------------ whole rows (case B) */

/* Step the odometer over the reduced axes (ri, offset off) to the next reduced index. */
static inline void FD(b_step)(const fplan *p, int64_t *ri, int64_t *off)
{
    for (int d = p->nr - 1; d >= 0; d--) {
        *off += p->rst[d];
        if (++ri[d] < p->rdim[d])
            return;
        *off -= p->rdim[d] * p->rst[d];
        ri[d] = 0;
    }
}

/* The loop of b_chunk over the rows of reduced indices r in [r, r1): xr is the row (n
 * elements); the body folds it into acc/idx. */
#define B_ROWS(...)                                                                                \
    for (; r < r1; r++) {                                                                          \
        const T *xr = x + base + off;                                                              \
        for (int64_t j = 0; j < n; j++) {                                                          \
            __VA_ARGS__;                                                                           \
        }                                                                                          \
        FD(b_step)(p, ri, &off);                                                                   \
    }

/* argmax/argmin in column j: a strictly better value (or the first NaN) replaces the kept
 * one, so ties keep the first row. */
#define B_ARG(BETTER)                                                                              \
    do {                                                                                           \
        const double v = (double)xr[j];                                                            \
        if (idx[j] < 0 || BETTER(v, acc[j])) {                                                     \
            acc[j] = v;                                                                            \
            idx[j] = r;                                                                            \
        }                                                                                          \
    } while (0)

/* Case B: fold the rows of reduced indices [r0, r1) (each row x + base + offset(r), n
 * elements) into acc (and idx for argmax/argmin), in row-major order of the reduced axes; for
 * RK_EXP, shift[j] is subtracted in column j. Sums go by blocks of B_BLOCK rows: groups of 8
 * rows are added pairwise in T into `part` (rows8), 4 groups to a block, and each block's
 * partial goes into the double accumulator; the last rows of the chunk join `part` one by one.
 * A T partial holds at most B_BLOCK terms (error at most about 7 units of T's rounding times
 * the sum of their magnitudes, however long the reduction), at T's vector speed. Chunks start
 * at multiples of B_BLOCK, so the blocks and the result depend on the shape only. */
static void FD(b_chunk)(rkind rk, const T *x, const fplan *p, int64_t base, int64_t r0, int64_t r1,
                        int64_t n, double *acc, int64_t *idx, const T *shift)
{
    int64_t ri[SX_MAX_RANK], off = 0, q = r0, r = r0;
    for (int d = p->nr - 1; d >= 0; d--) {
        ri[d] = q % p->rdim[d];
        q /= p->rdim[d];
        off += ri[d] * p->rst[d];
    }
    switch (rk) {
    case RK_SUM: {
        FD(rows_fn) * rows[2];
        FD(rows_pick)(rows);
        T part[TILE_WIDE];
        const T *xr[8];
        for (int64_t j = 0; j < n; j++)
            part[j] = 0;
        const int in = p->nr - 1;
        const int64_t st = p->rst[in];
        while (r < r1) {
            const int g = r1 - r >= 8 ? 8 : 1;
            if (ri[in] + g < p->rdim[in]) { /* g rows along the innermost reduced axis */
                for (int k = 0; k < g; k++)
                    xr[k] = x + base + off + k * st;
                ri[in] += g;
                off += g * st;
            } else {
                for (int k = 0; k < g; k++) {
                    xr[k] = x + base + off;
                    FD(b_step)(p, ri, &off);
                }
            }
            rows[g == 8 ? 0 : 1](part, xr, n);
            r += g;
            if ((r - r0) % B_BLOCK == 0 || r == r1)
                for (int64_t j = 0; j < n; j++) {
                    acc[j] += (double)part[j];
                    part[j] = 0;
                }
        }
        break;
    }
    case RK_ABS:
        B_ROWS(acc[j] += (double)fabs(xr[j]));
        break;
    case RK_SQR:
        B_ROWS(acc[j] += (double)xr[j] * (double)xr[j]);
        break;
    case RK_EXP:
        B_ROWS(acc[j] += (double)VM_EXP(xr[j] - shift[j]));
        break;
    case RK_PROD:
        B_ROWS(acc[j] *= (double)xr[j]);
        break;
    case RK_MAX:
        B_ROWS(acc[j] = SEL_MAX((double)xr[j], acc[j]));
        break;
    case RK_MIN:
        B_ROWS(acc[j] = SEL_MIN((double)xr[j], acc[j]));
        break;
    case RK_ARGMAX:
        B_ROWS(B_ARG(ARG_BETTER_MAX));
        break;
    case RK_ARGMIN:
        B_ROWS(B_ARG(ARG_BETTER_MIN));
        break;
    }
}
#undef B_ROWS
#undef B_ARG

typedef struct FD(b_chunks_ctx) {
    rkind rk;
    const T *x;
    const fplan *p;
    int64_t base, cr, n;
    const T *shift;
    double (*pa)[TILE]; /* (nch, TILE) */
    int64_t (*pi)[TILE];
} FD(b_chunks_ctx);

static void FD(b_chunk_task)(void *ctx, int64_t c)
{
    const FD(b_chunks_ctx) *b = ctx;
    const int64_t r1 = (c + 1) * b->cr < b->p->R ? (c + 1) * b->cr : b->p->R;
    tile_identity(b->rk, b->n, b->pa[c], b->pi[c]);
    FD(b_chunk)(b->rk, b->x, b->p, b->base, c * b->cr, r1, b->n, b->pa[c], b->pi[c], b->shift);
}

/* Case B: the whole reduction of a tile of n adjacent outputs into acc/idx: chunks of
 * rows (b_chunks()) folded separately and combined in order, on the pool's threads with `par`
 * (same result either way). */
static void FD(b_reduce)(rkind rk, const T *x, const fplan *p, int64_t base, int64_t n,
                         const T *shift, double *acc, int64_t *idx, bool par)
{
    int64_t cr, nch = b_chunks(p, &cr);
    tile_identity(rk, n, acc, idx);
    if (nch == 1) {
        FD(b_chunk)(rk, x, p, base, 0, p->R, n, acc, idx, shift);
        return;
    }
    if (!par) {
        double pa[TILE];
        int64_t pi[TILE];
        for (int64_t c = 0; c < nch; c++) {
            int64_t r1 = (c + 1) * cr < p->R ? (c + 1) * cr : p->R;
            tile_identity(rk, n, pa, pi);
            FD(b_chunk)(rk, x, p, base, c * cr, r1, n, pa, pi, shift);
            tile_combine(rk, n, acc, idx, pa, pi);
        }
        return;
    }
    double pa[NCH_B][TILE];
    int64_t pi[NCH_B][TILE];
    FD(b_chunks_ctx) b = {rk, x, p, base, cr, n, shift, pa, pi};
    sx__par_for(nch, FD(b_chunk_task), &b);
    for (int64_t c = 0; c < nch; c++)
        tile_combine(rk, n, acc, idx, pa[c], pi[c]);
}

/* Case B: task t is one tile of w columns of one output row (w <= TILE_WIDE, and w <= TILE
 * when rows are chunked or for argmax/argmin). */
static void FD(b_task)(sx_fold_op op, const T *x, const fplan *p, int64_t t, T *out, bool par,
                       int64_t w)
{
    const int64_t C = p->kdim[p->nk - 1], ntile = (C + w - 1) / w;
    const int64_t ko = t / ntile, j0 = (t % ntile) * w;
    const int64_t n = C - j0 < w ? C - j0 : w;
    const int64_t base = offset_of(ko, p->nk - 1, p->kdim, p->kst);
    T *o = out + ko * C + j0;
    double acc[TILE_WIDE];
    int64_t idx[TILE];
    FD(b_reduce)(fold_kind(op), x + j0, p, base, n, NULL, acc, idx, par);
    if (op == SX_FOLD_LOGSUMEXP) {
        for (int64_t j = 0; j < n; j++)
            o[j] = (T)acc[j];
        FD(b_reduce)(RK_EXP, x + j0, p, base, n, o, acc, idx, par);
        for (int64_t j = 0; j < n; j++)
            o[j] = isfinite(o[j]) ? (T)((double)o[j] + log(acc[j])) : o[j];
        return;
    }
    switch (op) { /* fold_finish, a loop per op */
    case SX_FOLD_MEAN:
        for (int64_t j = 0; j < n; j++)
            o[j] = (T)(acc[j] / (double)p->R);
        return;
    case SX_FOLD_L2NORM:
        for (int64_t j = 0; j < n; j++)
            o[j] = (T)sqrt(acc[j]);
        return;
    case SX_FOLD_ARGMAX:
    case SX_FOLD_ARGMIN:
        for (int64_t j = 0; j < n; j++)
            o[j] = (T)idx[j];
        return;
    case SX_FOLD_SUM:
    case SX_FOLD_PROD:
    case SX_FOLD_MAX:
    case SX_FOLD_MIN:
    case SX_FOLD_L1NORM:
    case SX_FOLD_LOGSUMEXP:
    case SX_FOLD_COUNT:
        break;
    }
    for (int64_t j = 0; j < n; j++)
        o[j] = (T)acc[j];
}

static void FD(b_tasks)(void *ctx, int64_t t0, int64_t t1)
{
    const FD(outputs_ctx) *b = ctx;
    for (int64_t t = t0; t < t1; t++)
        FD(b_task)(b->op, b->x, b->p, t, b->out, false, b->w);
}

/* The pool over the tasks, unless there are row chunks and too few tasks for the threads: then
 * over the chunks of each task in turn. */
static void FD(drive_b)(sx_fold_op op, const T *x, const fplan *p, T *out, bool big)
{
    int64_t rows;
    const bool chunked = b_chunks(p, &rows) > 1;
    const rkind rk = fold_kind(op);
    const bool wide = !chunked && (rk == RK_SUM || rk == RK_ABS || rk == RK_SQR);
    const int64_t w = wide ? TILE_WIDE : TILE, tasks = b_tasks(p, w);
    if (!big || !chunked || tasks >= 4 * sx__par_threads()) {
        FD(outputs_ctx) b = {op, x, p, out, w};
        if (big)
            sx__par_range(tasks, 1, FD(b_tasks), &b);
        else
            FD(b_tasks)(&b, 0, tasks);
    } else {
        for (int64_t t = 0; t < tasks; t++)
            FD(b_task)(op, x, p, t, out, true, w);
    }
}

/* ------------------------------------------------------------ entry */

/* R == 1: out[o0, o1) from x's elements (nothing to fold). */
static void FD(copy_outputs)(void *ctx, int64_t o0, int64_t o1)
{
    const FD(outputs_ctx) *c = ctx;
    const bool mag = c->op == SX_FOLD_L1NORM || c->op == SX_FOLD_L2NORM;
    const bool arg = c->op == SX_FOLD_ARGMAX || c->op == SX_FOLD_ARGMIN;
    const T *x = c->x;
    T *out = c->out;
#pragma omp simd
    for (int64_t o = o0; o < o1; o++)
        out[o] = arg ? (T)0 : mag ? fabs(x[o]) : x[o];
}

/* Fold x into out by plan p (K > 0; R == 0 only for ops with an identity). */
static void FD(fold)(sx_fold_op op, const fplan *p, const T *x, T *out)
{
    const int64_t K = p->K;
    if (p->R == 0) { /* the identity of the fold; NaN for the mean (0 / 0) */
        const T v = (T)fold_finish(op, facc_identity(fold_kind(op)), 0);
        for (int64_t o = 0; o < K; o++)
            out[o] = v;
        return;
    }
    if (p->R == 1) { /* nothing to fold: out has x's layout */
        FD(outputs_ctx) c = {op, x, p, out, 0};
        sx__par_range(K, SX_PAR_MIN / 2, FD(copy_outputs), &c);
        return;
    }
    const bool big = K * p->R >= (op == SX_FOLD_LOGSUMEXP ? SX_PAR_MIN_HEAVY : SX_PAR_MIN);
    if (p->inner_reduced)
        FD(drive_a)(op, x, p, out, big);
    else
        FD(drive_b)(op, x, p, out, big);
}

#undef FD
#undef FD_CAT
#undef FD_CAT_
