/* embedding.c: rows of an embedding table picked by integer indices, and the adjoint that adds
 * gradient rows back into a table. Indices are values of the tensors' own dtype (f32 holds every
 * integer below 2^24 exactly), as for one_hot and gather; a padding index reads as a zero row and
 * receives no gradient (PyTorch's padding_idx, with its row held at zero). */
#include "tensor_impl.h"

#include <math.h>

/* idx of any rank with rank + 1 <= SX_MAX_RANK; table (v, d); rows (idx shape..., d); every
 * index an integer in [0, v); pad in [-1, v). */
static sx_status check_embedding(const char *who, const char *rn, const sx_tensor *rows,
                                 const sx_tensor *table, const sx_tensor *idx, int64_t pad)
{
    if (table->rank != 2)
        return sx_error(SX_E_RANK, "%s: table has rank %d (want 2: (vocab, dim))", who,
                        table->rank);
    if (idx->rank + 1 > SX_MAX_RANK)
        return sx_error(SX_E_RANK, "%s: idx has rank %d; the rows would exceed rank %d", who,
                        idx->rank, SX_MAX_RANK);
    if (pad < -1 || pad >= table->shape[0])
        return sx_error(SX_E_RANGE, "%s: padding index %lld (want -1 for none, or 0..%lld)", who,
                        (long long)pad, (long long)table->shape[0] - 1);
    int64_t shape[SX_MAX_RANK];
    memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->rank);
    shape[idx->rank] = table->shape[1];
    if (!sx_shape_equal(rows->rank, rows->shape, idx->rank + 1, shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want %s", who, rn,
                        sx_shape_str(rows->rank, rows->shape, a, sizeof a),
                        sx_shape_str(idx->rank + 1, shape, b, sizeof b));
    }
    const int64_t v = table->shape[0];
    for (int64_t i = 0; i < idx->size; i++) {
        double x = sx_tensor_get(idx, i);
        if (!(x >= 0 && x < (double)v && x == floor(x)))
            return sx_error(SX_E_RANGE, "%s: idx[%lld] = %g is not an integer in [0, %lld)", who,
                            (long long)i, x, (long long)v);
    }
    return SX_OK;
}

static int64_t index_at(const sx_tensor *idx, int64_t i)
{
    return idx->dtype == SX_F32 ? (int64_t)SX_F32P(idx)[i] : (int64_t)SX_F64P(idx)[i];
}

sx_status sx_tensor_embedding_out(const sx_tensor *table, const sx_tensor *idx, int64_t pad,
                                  sx_tensor *out)
{
    const char *who = "sx_tensor_embedding_out";
    SX_TRY(sx__check_tensor(who, "table", table));
    SX_TRY(sx__check_tensor(who, "idx", idx));
    SX_TRY(sx__check_tensor(who, "out", out));
    SX_TRY(sx__check_same_dtype(who, table, idx));
    SX_TRY(sx__check_same_dtype(who, table, out));
    SX_TRY(check_embedding(who, "out", out, table, idx, pad));
    const size_t rowb = (size_t)table->shape[1] * sx_dtype_size(table->dtype);
    const char *src = table->data;
    char *dst = out->data;
    for (int64_t i = 0; i < idx->size; i++) {
        int64_t j = index_at(idx, i);
        if (j == pad)
            memset(dst + (size_t)i * rowb, 0, rowb);
        else
            memcpy(dst + (size_t)i * rowb, src + (size_t)j * rowb, rowb);
    }
    return SX_OK;
}

#define EMB_BACKWARD(T)                                                                            \
    do {                                                                                           \
        T *o = out->data;                                                                          \
        const T *gr = g->data;                                                                     \
        for (int64_t i = 0; i < idx->size; i++) {                                                  \
            int64_t j = index_at(idx, i);                                                          \
            if (j == pad)                                                                          \
                continue;                                                                          \
            T *orow = o + j * d;                                                                   \
            const T *grow = gr + i * d;                                                            \
            for (int64_t k = 0; k < d; k++)                                                        \
                orow[k] += grow[k];                                                                \
        }                                                                                          \
    } while (0)

sx_status sx_tensor_embedding_backward_out(const sx_tensor *g, const sx_tensor *idx, int64_t pad,
                                           sx_tensor *out)
{
    const char *who = "sx_tensor_embedding_backward_out";
    SX_TRY(sx__check_tensor(who, "g", g));
    SX_TRY(sx__check_tensor(who, "idx", idx));
    SX_TRY(sx__check_tensor(who, "out", out));
    SX_TRY(sx__check_same_dtype(who, g, idx));
    SX_TRY(sx__check_same_dtype(who, g, out));
    SX_TRY(check_embedding(who, "g", g, out, idx, pad));
    const int64_t d = out->shape[1];
    if (out->size == 0)
        return SX_OK;
    memset(out->data, 0, (size_t)out->size * sx_dtype_size(out->dtype));
    /* each table row sums its gradient rows in index order: the same bits on every run */
    SX_DISPATCH(out->dtype, EMB_BACKWARD);
    return SX_OK;
}
