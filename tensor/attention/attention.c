/* attention.c: fused scaled-dot-product attention, forward and backward, FlashAttention-style:
 * queries and keys are taken a block at a time, the block's scores live in a tile of scratch and
 * an online softmax (running maximum and sum) folds them into the output, so the (T, T) scores
 * never exist. The causal mask is computed from the indices; key blocks wholly above the
 * diagonal are skipped. The backward pass recomputes each tile's scores and takes the softmax's
 * normaliser from the forward pass's log-sum-exp. Forward tasks are (head, query block), backward
 * tasks a head each, so no sum's order depends on the thread count. */
#include "tensor_impl.h"
#include "vmath.h"

#include <math.h>

/* Rows of a query block and of a key block: a block of q, k and v and the tiles stay in L1/L2
 * for dh up to 128. */
#define ATTN_BQ 64
#define ATTN_BK 64
/* Scratch slots of sx_attention_workspace: at most that many threads run one call. */
#define ATTN_SLOTS 16

/* One call: q (bh, tq, dh), k and v (bh, tk, dh); y and dy packed (bh, tq, dh + 1) (backward);
 * out the packed output or the gradients; ws holds `slots` slots of slot_bytes. */
typedef struct attn_job {
    int64_t bh, tq, tk, dh, nqb;
    int64_t seen; /* forward: the leading keys of each head a query may see (tk: all) */
    double scale;
    bool causal;
    const void *q, *k, *v, *y, *dy;
    void *out;
    char *ws;
    size_t slot_bytes;
} attn_job;

#define AT_DT SX_F32
#define ISA_TMPL "attention/attention_tmpl.h"
#include "isa_each.h"
#undef ISA_TMPL
#undef AT_DT
#define AT_DT SX_F64
#define T double
#define SFX f64
#include "attention_tmpl.h"
#undef T
#undef SFX
#undef AT_DT

typedef void attn_task_fn(void *ctx, int64_t task);

static attn_task_fn *attn_kernel(sx_dtype dt, bool backward)
{
    if (dt == SX_F64)
        return backward ? attn_bwd_task_f64 : attn_fwd_task_f64;
#if VM_DISPATCH
    switch (vm_isa()) {
    case VM_ISA_AVX512:
        return backward ? attn_bwd_task_f32_avx512 : attn_fwd_task_f32_avx512;
    case VM_ISA_AVX2:
        return backward ? attn_bwd_task_f32_avx2 : attn_fwd_task_f32_avx2;
    default:
        break;
    }
#endif
    return backward ? attn_bwd_task_f32 : attn_fwd_task_f32;
}

/* One slot: the transposed k and v tiles, two score tiles, the accumulator and the running
 * maximum and sum of a query block (the forward pass uses fewer), in 64-byte lines. */
static size_t attn_slot_bytes(sx_dtype dt, int64_t dh)
{
    const size_t el = dt == SX_F64 ? sizeof(double) : sizeof(float);
    const size_t n =
        (size_t)(2 * dh * ATTN_BK + 2 * ATTN_BQ * ATTN_BK + ATTN_BQ * dh + 2 * ATTN_BQ);
    return (n * el + 63) / 64 * 64;
}

/* Tasks of a call: (head, query block) forward, a head backward. */
static int64_t attn_tasks(int64_t bh, int64_t tq, bool backward)
{
    return backward ? bh : bh * ((tq + ATTN_BQ - 1) / ATTN_BQ);
}

size_t sx_attention_workspace(sx_dtype dtype, const int64_t *q_shape, bool backward)
{
    if ((dtype != SX_F32 && dtype != SX_F64) || q_shape == NULL || q_shape[2] < 1)
        return 0;
    int64_t slots = attn_tasks(q_shape[0], q_shape[1], backward);
    slots = slots < 1 ? 1 : slots > ATTN_SLOTS ? ATTN_SLOTS : slots;
    return (size_t)slots * attn_slot_bytes(dtype, q_shape[2]);
}

/* q (bh, tq, dh), k and v (bh, tk, dh) of one float dtype, tk >= 1, tk >= tq when causal, a
 * finite scale. */
static sx_status attn_check(const char *who, const sx_tensor *q, const sx_tensor *k,
                            const sx_tensor *v, double scale, bool causal)
{
    SX_TRY(sx__check_tensor(who, "q", q));
    SX_TRY(sx__check_tensor(who, "k", k));
    SX_TRY(sx__check_tensor(who, "v", v));
    if (q->dtype != SX_F32 && q->dtype != SX_F64)
        return sx_error(SX_E_DTYPE, "%s: q is %s, want f32 or f64", who, sx_dtype_name(q->dtype));
    SX_TRY(sx__check_same_dtype(who, q, k));
    SX_TRY(sx__check_same_dtype(who, q, v));
    const sx_tensor *t[3] = {q, k, v};
    const char *names[3] = {"q", "k", "v"};
    char a[128], b[128];
    for (int i = 0; i < 3; i++)
        if (t[i]->rank != 3)
            return sx_error(SX_E_RANK, "%s: %s has shape %s, want (bh, t, dh)", who, names[i],
                            sx_shape_str(t[i]->rank, t[i]->shape, a, sizeof a));
    if (!sx_shape_equal(3, k->shape, 3, v->shape) || k->shape[0] != q->shape[0] ||
        k->shape[2] != q->shape[2])
        return sx_error(SX_E_SHAPE,
                        "%s: q %s, k %s and v %s do not agree (want (bh,tq,dh), "
                        "(bh,tk,dh), (bh,tk,dh))",
                        who, sx_shape_str(3, q->shape, a, sizeof a),
                        sx_shape_str(3, k->shape, b, sizeof b),
                        sx_shape_str(3, v->shape, (char[128]){0}, 128));
    if (q->shape[2] < 1 || k->shape[1] < 1)
        return sx_error(SX_E_SHAPE, "%s: %lld features and %lld keys (want >= 1 of each)", who,
                        (long long)q->shape[2], (long long)k->shape[1]);
    if (causal && k->shape[1] < q->shape[1])
        return sx_error(SX_E_SHAPE,
                        "%s: causal with %lld queries and %lld keys (want keys >= "
                        "queries)",
                        who, (long long)q->shape[1], (long long)k->shape[1]);
    if (!isfinite(scale))
        return sx_error(SX_E_ARG, "%s: scale %g (want a finite number)", who, scale);
    return SX_OK;
}

/* The workspace: the caller's (at least one slot, SX_E_ARG otherwise), or one allocated when ws
 * is NULL and ws_bytes 0 (*own set). */
static sx_status attn_ws(const char *who, const sx_tensor *q, bool backward, void *ws,
                         size_t *ws_bytes, attn_job *jb, void **own)
{
    jb->slot_bytes = attn_slot_bytes(q->dtype, q->shape[2]);
    *own = NULL;
    if (ws == NULL && *ws_bytes == 0) {
        *ws_bytes = sx_attention_workspace(q->dtype, q->shape, backward);
        if ((ws = *own = sx_alloc(*ws_bytes)) == NULL)
            return sx_error(SX_E_NOMEM, "%s: no memory for %zu bytes of scratch", who, *ws_bytes);
    }
    if (ws == NULL || *ws_bytes < jb->slot_bytes)
        return sx_error(SX_E_ARG, "%s: workspace of %zu bytes (want at least %zu)", who,
                        ws == NULL ? 0 : *ws_bytes, jb->slot_bytes);
    jb->ws = ws;
    return SX_OK;
}

/* Run the tasks on up to as many threads as the workspace has slots; small calls on one. */
static void attn_go(attn_job *jb, size_t ws_bytes, attn_task_fn *fn, int64_t n_tasks)
{
    size_t slots = ws_bytes / jb->slot_bytes;
    slots = slots > ATTN_SLOTS ? ATTN_SLOTS : slots;
    const double work = (double)jb->bh * (double)jb->tq * (double)jb->tk * (double)jb->dh;
    if (work < SX_PAR_MIN)
        slots = 1;
    sx__par_for_upto((int)slots, n_tasks, fn, jb);
}

/* n_keys < 0: every key */
static sx_status attn_forward(const char *who, const sx_tensor *q, const sx_tensor *k,
                              const sx_tensor *v, int64_t n_keys, double scale, bool causal,
                              sx_tensor *out, void *ws, size_t ws_bytes)
{
    SX_TRY(attn_check(who, q, k, v, scale, causal));
    const int64_t bh = q->shape[0], tq = q->shape[1], tk = k->shape[1], dh = q->shape[2];
    if (n_keys > tk)
        return sx_error(SX_E_RANGE, "%s: %lld keys seen of %lld (want 0..%lld)", who,
                        (long long)n_keys, (long long)tk, (long long)tk);
    n_keys = n_keys < 0 ? tk : n_keys;
    const int64_t os[3] = {bh, tq, dh + 1};
    SX_TRY(sx__check_out(who, out, q->dtype, 3, os));
    SX_TRY(sx__check_apart(who, "q", q, "out", out));
    SX_TRY(sx__check_apart(who, "k", k, "out", out));
    SX_TRY(sx__check_apart(who, "v", v, "out", out));
    attn_job jb = {bh,      tq,    tk,     dh,        (tq + ATTN_BQ - 1) / ATTN_BQ,
                   n_keys,  scale, causal, q->data,   k->data,
                   v->data, NULL,  NULL,   out->data, NULL,
                   0};
    void *own = NULL;
    SX_TRY(attn_ws(who, q, false, ws, &ws_bytes, &jb, &own));
    attn_go(&jb, ws_bytes, attn_kernel(q->dtype, false), attn_tasks(bh, tq, false));
    sx_free(own);
    return SX_OK;
}

sx_status sx_tensor_attention_ws(const sx_tensor *q, const sx_tensor *k, const sx_tensor *v,
                                 double scale, bool causal, sx_tensor *out, void *ws,
                                 size_t ws_bytes)
{
    return attn_forward("sx_tensor_attention_ws", q, k, v, -1, scale, causal, out, ws, ws_bytes);
}

sx_status sx_tensor_attention_keys_ws(const sx_tensor *q, const sx_tensor *k, const sx_tensor *v,
                                      int64_t n_keys, double scale, bool causal, sx_tensor *out,
                                      void *ws, size_t ws_bytes)
{
    if (n_keys < 0)
        return sx_error(SX_E_RANGE, "sx_tensor_attention_keys_ws: %lld keys seen (want >= 0)",
                        (long long)n_keys);
    return attn_forward("sx_tensor_attention_keys_ws", q, k, v, n_keys, scale, causal, out, ws,
                        ws_bytes);
}

sx_status sx_tensor_attention_out(const sx_tensor *q, const sx_tensor *k, const sx_tensor *v,
                                  double scale, bool causal, sx_tensor *out)
{
    return attn_forward("sx_tensor_attention_out", q, k, v, -1, scale, causal, out, NULL, 0);
}

/* y and dy (bh, tq, dh + 1) of q's dtype. */
static sx_status attn_check_packed(const char *who, const char *name, const sx_tensor *t,
                                   const sx_tensor *q)
{
    SX_TRY(sx__check_tensor(who, name, t));
    SX_TRY(sx__check_same_dtype(who, q, t));
    const int64_t ps[3] = {q->shape[0], q->shape[1], q->shape[2] + 1};
    if (!sx_shape_equal(t->rank, t->shape, 3, ps)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, want %s", who, name,
                        sx_shape_str(t->rank, t->shape, a, sizeof a),
                        sx_shape_str(3, ps, b, sizeof b));
    }
    return SX_OK;
}

static sx_status attn_backward(const char *who, const sx_tensor *q, const sx_tensor *k,
                               const sx_tensor *v, const sx_tensor *y, const sx_tensor *dy,
                               double scale, bool causal, sx_tensor *out, void *ws, size_t ws_bytes)
{
    SX_TRY(attn_check(who, q, k, v, scale, causal));
    SX_TRY(attn_check_packed(who, "y", y, q));
    SX_TRY(attn_check_packed(who, "dy", dy, q));
    const int64_t bh = q->shape[0], tq = q->shape[1], tk = k->shape[1], dh = q->shape[2];
    const int64_t os[3] = {bh, tq + 2 * tk, dh};
    SX_TRY(sx__check_out(who, out, q->dtype, 3, os));
    const sx_tensor *in[5] = {q, k, v, y, dy};
    const char *names[5] = {"q", "k", "v", "y", "dy"};
    for (int i = 0; i < 5; i++)
        SX_TRY(sx__check_apart(who, names[i], in[i], "out", out));
    attn_job jb = {bh,      tq,      tk,       dh,        (tq + ATTN_BQ - 1) / ATTN_BQ,
                   tk,      scale,   causal,   q->data,   k->data,
                   v->data, y->data, dy->data, out->data, NULL,
                   0};
    void *own = NULL;
    SX_TRY(attn_ws(who, q, true, ws, &ws_bytes, &jb, &own));
    attn_go(&jb, ws_bytes, attn_kernel(q->dtype, true), attn_tasks(bh, tq, true));
    sx_free(own);
    return SX_OK;
}

sx_status sx_tensor_attention_backward_out(const sx_tensor *q, const sx_tensor *k,
                                           const sx_tensor *v, const sx_tensor *y,
                                           const sx_tensor *dy, double scale, bool causal,
                                           sx_tensor *out)
{
    return attn_backward("sx_tensor_attention_backward_out", q, k, v, y, dy, scale, causal, out,
                         NULL, 0);
}

sx_status sx_tensor_attention_backward_ws(const sx_tensor *q, const sx_tensor *k,
                                          const sx_tensor *v, const sx_tensor *y,
                                          const sx_tensor *dy, double scale, bool causal,
                                          sx_tensor *out, void *ws, size_t ws_bytes)
{
    return attn_backward("sx_tensor_attention_backward_ws", q, k, v, y, dy, scale, causal, out, ws,
                         ws_bytes);
}
