/* matmul.c: matrix products through sx__gemm (gemm.c), batched over leading axes that broadcast as
 * in NumPy, and the inner product of two vectors. A batch whose right operand is one shared matrix
 * and whose left operand is not transposed is folded into one GEMM, (batch*m, k) @ (k, n), since
 * the rows of a and of out are then contiguous across the batch. */
#include "tensor_impl.h"

#include <limits.h>

/* The geometry of one (batched) matmul: out[i] = op(a[ia]) @ op(b[ib]) for every batch index i
 * of out, with ia / ib the broadcast indices into a's and b's batch axes. */
typedef struct mm_geom {
    int64_t m, k, n;             /* op(a) is (m, k), op(b) is (k, n) */
    int64_t lda, ldb;            /* row lengths of the stored matrices (last dim of a, b) */
    int brank;                   /* batch rank of out */
    int64_t bshape[SX_MAX_RANK]; /* batch shape of out */
    int64_t batch;               /* product of bshape */
    int64_t a_bstr[SX_MAX_RANK]; /* a's element stride per batch axis of out (0: broadcast) */
    int64_t b_bstr[SX_MAX_RANK]; /* the same for b */
    int64_t a_batch, b_batch;    /* number of distinct matrices in a and in b */
} mm_geom;

/* "(2,3)" or "(2,3)^T" for the messages. */
static const char *shape_op_str(const sx_tensor *t, bool trans, char *buf, size_t n)
{
    sx_shape_str(t->rank, t->shape, buf, n);
    if (trans) {
        size_t len = strlen(buf);
        if (len + 3 <= n)
            memcpy(buf + len, "^T", 3);
    }
    return buf;
}

/* Batch strides of operand t (batch rank tr = t->rank - 2) against out's batch shape: the
 * element stride of each out batch axis, 0 where t has no such axis or has size 1 there. */
static void batch_strides(const sx_tensor *t, const mm_geom *g, int64_t *str)
{
    int tr = t->rank - 2;
    int64_t s = t->shape[t->rank - 2] * t->shape[t->rank - 1];
    for (int i = g->brank - 1; i >= 0; i--) {
        int it = i - (g->brank - tr);
        if (it >= 0 && t->shape[it] != 1) {
            str[i] = s;
            s *= t->shape[it];
        } else {
            str[i] = 0;
            if (it >= 0)
                s *= t->shape[it];
        }
    }
}

/* Validate a and b (present, rank >= 2, matching inner dimensions, broadcastable batch axes)
 * and fill the geometry. Dtypes are not compared here. */
static sx_status mm_plan(const char *who, const sx_tensor *a, const sx_tensor *b, bool trans_a,
                         bool trans_b, mm_geom *g)
{
    SX_TRY(sx__check_desc(who, "a", a)); /* shapes only: the kernel checks the data */
    SX_TRY(sx__check_desc(who, "b", b));
    if (a->rank < 2)
        return sx_error(SX_E_RANK, "%s: a has rank %d, matmul needs rank >= 2", who, a->rank);
    if (b->rank < 2)
        return sx_error(SX_E_RANK, "%s: b has rank %d, matmul needs rank >= 2", who, b->rank);
    int ra = a->rank, rb = b->rank;
    int64_t ar = a->shape[ra - 2], ac = a->shape[ra - 1];
    int64_t br = b->shape[rb - 2], bc = b->shape[rb - 1];
    g->m = trans_a ? ac : ar;
    g->k = trans_a ? ar : ac;
    int64_t kb = trans_b ? bc : br;
    g->n = trans_b ? br : bc;
    g->lda = ac;
    g->ldb = bc;
    if (g->k != kb) {
        char sa[140], sb[140];
        return sx_error(SX_E_SHAPE, "%s: inner dimensions differ: a %s and b %s (%lld != %lld)",
                        who, shape_op_str(a, trans_a, sa, sizeof sa),
                        shape_op_str(b, trans_b, sb, sizeof sb), (long long)g->k, (long long)kb);
    }
    /* NumPy broadcasting of the batch axes, with both full shapes in the message. */
    int na = ra - 2, nb = rb - 2;
    g->brank = na > nb ? na : nb;
    g->batch = 1;
    for (int i = 0; i < g->brank; i++) {
        int ia = i - (g->brank - na), ib = i - (g->brank - nb);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char sa[140], sb[140];
            return sx_error(SX_E_SHAPE, "%s: batch dimensions of a %s and b %s do not broadcast",
                            who, sx_shape_str(ra, a->shape, sa, sizeof sa),
                            sx_shape_str(rb, b->shape, sb, sizeof sb));
        }
        g->bshape[i] = da == 1 ? db : da;
        g->batch *= g->bshape[i];
    }
    g->a_batch = sx_shape_size(na, a->shape);
    g->b_batch = sx_shape_size(nb, b->shape);
    batch_strides(a, g, g->a_bstr);
    batch_strides(b, g, g->b_bstr);
    return SX_OK;
}

sx_status sx_matmul_shape(const char *who, const sx_tensor *a, const sx_tensor *b, bool trans_a,
                          bool trans_b, int *out_rank, int64_t *out_shape)
{
    if (who == NULL)
        who = "sx_matmul_shape";
    if (out_rank == NULL || out_shape == NULL)
        return sx_error(SX_E_ARG, "%s: out_rank or out_shape is NULL", who);
    mm_geom g;
    SX_TRY(mm_plan(who, a, b, trans_a, trans_b, &g));
    for (int i = 0; i < g.brank; i++)
        out_shape[i] = g.bshape[i];
    out_shape[g.brank] = g.m;
    out_shape[g.brank + 1] = g.n;
    *out_rank = g.brank + 2;
    return SX_OK;
}

/* True when the byte ranges of two tensors' data intersect. */
static bool overlaps(const sx_tensor *x, const sx_tensor *y)
{
    if (x->size == 0 || y->size == 0)
        return false;
    const char *x0 = x->data, *y0 = y->data;
    const char *x1 = x0 + (size_t)x->size * sx_dtype_size(x->dtype);
    const char *y1 = y0 + (size_t)y->size * sx_dtype_size(y->dtype);
    return x0 < y1 && y0 < x1;
}

/* out[0..count) = beta * out, with beta = 0 writing zeros over whatever was there (NaN too).
 * Only reached when the inner dimension is 0, where there is nothing to multiply. */
static void scale(sx_dtype dt, void *data, int64_t count, double beta)
{
    if (beta == 0.0) {
        memset(data, 0, (size_t)count * sx_dtype_size(dt));
    } else if (beta != 1.0 && dt == SX_F32) {
        float *o = data;
        for (int64_t i = 0; i < count; i++)
            o[i] *= (float)beta;
    } else if (beta != 1.0) {
        double *o = data;
        for (int64_t i = 0; i < count; i++)
            o[i] *= beta;
    }
}

sx_status sx_tensor_matmul_out(const sx_tensor *a, const sx_tensor *b, bool trans_a, bool trans_b,
                               double alpha, double beta, sx_tensor *out)
{
    const char *who = "sx_tensor_matmul_out";
    mm_geom g;
    SX_TRY(sx__check_tensor(who, "a", a));
    SX_TRY(sx__check_tensor(who, "b", b));
    SX_TRY(mm_plan(who, a, b, trans_a, trans_b, &g));
    SX_TRY(sx__check_same_dtype(who, a, b));
    int64_t oshape[SX_MAX_RANK];
    for (int i = 0; i < g.brank; i++)
        oshape[i] = g.bshape[i];
    oshape[g.brank] = g.m;
    oshape[g.brank + 1] = g.n;
    SX_TRY(sx__check_out(who, out, a->dtype, g.brank + 2, oshape));
    if (overlaps(out, a) || overlaps(out, b))
        return sx_error(SX_E_ARG, "%s: out overlaps an input", who);
    if (g.m > INT_MAX || g.n > INT_MAX || g.k > INT_MAX || g.lda > INT_MAX || g.ldb > INT_MAX) {
        char sa[140], sb[140];
        return sx_error(SX_E_UNSUPPORTED,
                        "%s: a %s and b %s: a matrix dimension exceeds BLAS's int", who,
                        sx_shape_str(a->rank, a->shape, sa, sizeof sa),
                        sx_shape_str(b->rank, b->shape, sb, sizeof sb));
    }
    if (out->size == 0)
        return SX_OK;
    if (g.k == 0) { /* empty sums: out = beta * out */
        scale(out->dtype, out->data, out->size, beta);
        return SX_OK;
    }
    (void)sx_threads_get(); /* apply the thread policy before the first BLAS call */
    const size_t esz = sx_dtype_size(a->dtype);
    const char *ad = a->data, *bd = b->data;
    char *od = out->data;
    const int64_t osz = g.m * g.n;

    /* Fold: one shared right matrix, a not transposed and not broadcast, so a's batch of
     * (m, k) row-major matrices is one (batch*m, k) matrix and out likewise (batch*m, n). */
    if (g.b_batch == 1 && !trans_a && g.a_batch == g.batch && g.batch * g.m <= INT_MAX) {
        sx__gemm(a->dtype, false, trans_b, g.batch * g.m, g.n, g.k, alpha, ad, g.lda, bd, g.ldb,
                 beta, od, g.n);
        return SX_OK;
    }
    /* One GEMM per batch entry; idx walks out's batch index like an odometer. */
    int64_t idx[SX_MAX_RANK] = {0};
    int64_t aoff = 0, boff = 0;
    for (int64_t i = 0; i < g.batch; i++) {
        sx__gemm(a->dtype, trans_a, trans_b, g.m, g.n, g.k, alpha, ad + (size_t)aoff * esz, g.lda,
                 bd + (size_t)boff * esz, g.ldb, beta, od + (size_t)(i * osz) * esz, g.n);
        for (int d = g.brank - 1; d >= 0; d--) {
            idx[d]++;
            aoff += g.a_bstr[d];
            boff += g.b_bstr[d];
            if (idx[d] < g.bshape[d])
                break;
            aoff -= g.a_bstr[d] * idx[d];
            boff -= g.b_bstr[d] * idx[d];
            idx[d] = 0;
        }
    }
    return SX_OK;
}

sx_status sx_tensor_matmul(const sx_tensor *a, const sx_tensor *b, bool trans_a, bool trans_b,
                           sx_tensor **out)
{
    const char *who = "sx_tensor_matmul";
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    int rank;
    int64_t shape[SX_MAX_RANK];
    SX_TRY(sx_matmul_shape(who, a, b, trans_a, trans_b, &rank, shape));
    SX_TRY(sx__check_same_dtype(who, a, b));
    sx_tensor *y = NULL;
    SX_TRY(sx__new_like(a->dtype, rank, shape, &y));
    sx_status s = sx_tensor_matmul_out(a, b, trans_a, trans_b, 1.0, 0.0, y);
    if (s != SX_OK) {
        sx_tensor_free(y);
        return s;
    }
    *out = y;
    return SX_OK;
}

/* ---------------------------------------------------------------- dot */

/* The dot product is summed in double in fixed chunks whose partial sums are added in order:
 * the result is the same for any number of threads (BLAS ?dot splits by thread count), and f32
 * inputs get a double accumulator. At most DOT_CHUNKS chunks, so the partials live on the
 * stack. */
#define DOT_CHUNKS 64
#define DOT_CHUNK_MIN 8192

static double dot_f32(const float *x, const float *y, int64_t n)
{
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * (double)y[i];
    return s;
}

static double dot_f64(const double *x, const double *y, int64_t n)
{
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++)
        s += x[i] * y[i];
    return s;
}

typedef struct dot_ctx {
    const sx_tensor *a, *b;
    int64_t n, chunk;
    double *part; /* (nchunks) */
} dot_ctx;

/* The fixed chunk c of a dot product (summed in chunk order by the caller). */
static void dot_chunk(void *ctx, int64_t c)
{
    const dot_ctx *d = ctx;
    const int64_t lo = c * d->chunk, len = lo + d->chunk < d->n ? d->chunk : d->n - lo;
    if (d->a->dtype == SX_F32)
        d->part[c] = dot_f32((const float *)d->a->data + lo, (const float *)d->b->data + lo, len);
    else
        d->part[c] = dot_f64((const double *)d->a->data + lo, (const double *)d->b->data + lo, len);
}

sx_status sx_tensor_dot_out(const sx_tensor *a, const sx_tensor *b, sx_tensor *out)
{
    const char *who = "sx_tensor_dot_out";
    SX_TRY(sx__check_tensor(who, "a", a));
    SX_TRY(sx__check_tensor(who, "b", b));
    if (a->rank != 1 || b->rank != 1) {
        char sa[140], sb[140];
        return sx_error(SX_E_RANK, "%s: a %s and b %s: dot needs two vectors (rank 1)", who,
                        sx_shape_str(a->rank, a->shape, sa, sizeof sa),
                        sx_shape_str(b->rank, b->shape, sb, sizeof sb));
    }
    if (a->size != b->size) {
        char sa[140], sb[140];
        return sx_error(SX_E_SHAPE, "%s: sizes differ: a %s and b %s", who,
                        sx_shape_str(a->rank, a->shape, sa, sizeof sa),
                        sx_shape_str(b->rank, b->shape, sb, sizeof sb));
    }
    SX_TRY(sx__check_same_dtype(who, a, b));
    SX_TRY(sx__check_out(who, out, a->dtype, 0, NULL));
    if (overlaps(out, a) || overlaps(out, b))
        return sx_error(SX_E_ARG, "%s: out overlaps an input", who);
    const int64_t n = a->size;
    int64_t chunk = (n + DOT_CHUNKS - 1) / DOT_CHUNKS;
    if (chunk < DOT_CHUNK_MIN)
        chunk = DOT_CHUNK_MIN;
    const int64_t nchunks = n == 0 ? 0 : (n + chunk - 1) / chunk;
    double part[DOT_CHUNKS];
    const bool f32 = a->dtype == SX_F32;
    dot_ctx dc = {a, b, n, chunk, part};
    sx__par_for(nchunks, dot_chunk, &dc);
    double tot = 0;
    for (int64_t c = 0; c < nchunks; c++)
        tot += part[c];
    if (f32)
        *(float *)out->data = (float)tot;
    else
        *(double *)out->data = tot;
    return SX_OK;
}
