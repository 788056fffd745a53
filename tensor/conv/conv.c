/* conv.c: the convolution's public entry points (include/strix/sx_tensor.h): conv2d forward, fused
 * and both backward passes, the transposed convolution, their shapes and workspaces. Each
 * checks its tensors, builds the geometry (tensor/conv/conv_general.c) and hands the work to
 * the plan (tensor/conv/conv_plan.c: dense kernels) or to the general geometry's kernels
 * (tensor/conv/conv_general.c: dilated, grouped, depthwise, other paddings); the transposed
 * convolution is the conv2d from its output to its input run backwards. */
#include "conv_impl.h"
#include "tensor_impl.h"

#include <limits.h>

/* Outputs of at least this many bytes are written past the caches (stream_out). */
#define CONV_STREAM_BYTES ((size_t)4 << 20)

/* ---------------------------------------------------------------- checks */

static char *shape4(const int64_t *s, char *buf, size_t n)
{
    return sx_shape_str(4, s, buf, n);
}

static sx_status check_rank4(const char *who, const char *name, const sx_tensor *t, bool desc)
{
    SX_TRY(desc ? sx__check_desc(who, name, t) : sx__check_tensor(who, name, t));
    if (t->rank != 4) {
        char a[140];
        return sx_error(SX_E_RANK, "%s: %s has shape %s, want rank 4", who, name,
                        sx_shape_str(t->rank, t->shape, a, sizeof a));
    }
    return SX_OK;
}

/* True when the byte ranges [a, a+na) and [b, b+nb) intersect. */
static bool ranges_overlap(const void *a, size_t na, const void *b, size_t nb)
{
    if (na == 0 || nb == 0 || a == NULL || b == NULL)
        return false;
    const char *a0 = a, *b0 = b;
    return a0 < b0 + nb && b0 < a0 + na;
}

static size_t tensor_bytes(const sx_tensor *t)
{
    return (size_t)t->size * sx_dtype_size(t->dtype);
}

/* The output `out` and the workspace must not overlap the inputs, nor each other. */
static sx_status check_overlap(const char *who, const sx_tensor *in0, const sx_tensor *in1,
                               const sx_tensor *out, const void *ws, size_t ws_bytes)
{
    const sx_tensor *ts[3] = {in0, in1, out};
    for (int i = 0; i < 2; i++)
        if (ranges_overlap(ts[i]->data, tensor_bytes(ts[i]), out->data, tensor_bytes(out)))
            return sx_error(SX_E_ARG, "%s: the output overlaps an input", who);
    for (int i = 0; i < 3; i++)
        if (ranges_overlap(ts[i]->data, tensor_bytes(ts[i]), ws, ws_bytes))
            return sx_error(SX_E_ARG, "%s: the workspace overlaps a tensor", who);
    return SX_OK;
}

static sx_status check_shape(const char *who, const char *name, const sx_tensor *t,
                             const int64_t *want, const char *what)
{
    if (!sx_shape_equal(4, t->shape, 4, want)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: %s has shape %s, %s gives %s", who, name,
                        shape4(t->shape, a, sizeof a), what, shape4(want, b, sizeof b));
    }
    return SX_OK;
}

static sx_status check_ws(const char *who, size_t need, const void *ws, size_t ws_bytes)
{
    if (ws_bytes < need)
        return sx_error(SX_E_ARG, "%s: workspace of %zu bytes, need at least %zu (%s)", who,
                        ws_bytes, need, "the _workspace_min function");
    if (need > 0 && ws == NULL)
        return sx_error(SX_E_ARG, "%s: workspace is NULL", who);
    return SX_OK;
}

/* Whether a Winograd kernel writes its output t (c channels) with streaming stores: when t is
 * too big to stay in the cores' caches until its reader comes (it would only evict the
 * kernel's own blocks on the way), its rows are whole vectors, and it is 64-byte aligned. */
static bool stream_out(const sx_tensor *t, int64_t c)
{
    const int64_t vl = 64 / (int64_t)sx_dtype_size(t->dtype);
    return tensor_bytes(t) >= CONV_STREAM_BYTES && c % vl == 0 && ((uintptr_t)t->data & 63) == 0;
}

static void zero_fill(sx_tensor *t)
{
    memset(t->data, 0, tensor_bytes(t));
}

/* Does the dense path run these parameters for tensors x (n,h,w,c) and k (kh,kw,c,f), either
 * possibly NULL or of another rank (then only VALID and SAME_UPPER run there)? */
static bool conv_here_t(const sx_conv2d_params *p, const sx_tensor *x, const sx_tensor *k)
{
    const bool t = x != NULL && k != NULL && x->rank == 4 && k->rank == 4;
    return sx__conv_dense(p, t ? x->shape : NULL, t ? k->shape : NULL);
}

/* ---------------------------------------------------------------- general geometries */

/* One kernel of a general geometry: the checks on the output, dy, the workspace and overlap
 * are done; here the empty cases, the dense kernels of conv.c, or run_geom. For the dense
 * kernels the tensors are passed on in conv2d's roles. */
static sx_status exec(const gx_geom *g, gx_kind kind, const sx_tensor *in0, const sx_tensor *in1,
                      sx_tensor *out, void *ws, size_t ws_bytes)
{
    sx_conv2d_params old;
    const gx_path path = sx__conv_general_path(g, &old);
    if (path == GX_DENSE)
        return kind == GX_FWD ? sx_tensor_conv2d_out(in0, in1, &old, ws, ws_bytes, out)
               : kind == GX_BWD_IN
                   ? sx_tensor_conv2d_backward_input_out(in0, in1, &old, ws, ws_bytes, out)
                   : sx_tensor_conv2d_backward_kernel_out(in0, in1, &old, ws, ws_bytes, out);
    if (out->size == 0)
        return SX_OK;
    if (in0->size == 0 || in1->size == 0) { /* every sum is empty */
        memset(out->data, 0, tensor_bytes(out));
        return SX_OK;
    }
    sx__conv_general_run(g, path, kind, out->dtype, in0->data, in1->data, out->data, ws, ws_bytes);
    return SX_OK;
}

static sx_status general_shape(const char *who, const sx_tensor *x, const sx_tensor *k,
                               const sx_conv2d_params *p, int64_t out_shape[4])
{
    if (out_shape == NULL)
        return sx_error(SX_E_ARG, "%s: out_shape is NULL", who);
    SX_TRY(check_rank4(who, "x", x, true));
    SX_TRY(check_rank4(who, "k", k, true));
    gx_geom g;
    SX_TRY(sx__conv_geom(who, "x", x->shape, "k", k->shape, p, &g));
    out_shape[0] = g.n, out_shape[1] = g.oh, out_shape[2] = g.ow, out_shape[3] = g.f;
    return SX_OK;
}

/* The size queries report invalid input as 0 and keep the thread's last error message. */
static size_t general_workspace(const int64_t x_shape[4], const int64_t k_shape[4],
                                const sx_conv2d_params *p, bool best)
{
    if (x_shape == NULL || k_shape == NULL)
        return 0;
    char saved[512];
    snprintf(saved, sizeof saved, "%s", sx_last_error());
    gx_geom g;
    sx_status s = sx__conv_geom("sx_conv2d_workspace", "x", x_shape, "k", k_shape, p, &g);
    (void)sx_error(SX_OK, "%s", saved);
    if (s != SX_OK)
        return 0;
    return sx__conv_general_ws(&g, best, x_shape, k_shape);
}

/* The shared front of the three conv2d kernels: a, b are the kernel's inputs in the order of
 * its signature, with names; the geometry comes from (xname, xs) and (kname, ks). */
static sx_status conv_front(const char *who, gx_kind kind, const sx_tensor *a, const char *an,
                            const sx_tensor *b, const char *bn, const sx_tensor *out,
                            const char *on, const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                            gx_geom *g)
{
    SX_TRY(check_rank4(who, an, a, false));
    SX_TRY(check_rank4(who, bn, b, false));
    if (kind != GX_FWD)
        SX_TRY(check_rank4(who, on, out, false));
    else if (out == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, on);
    SX_TRY(sx__check_same_dtype(who, a, b));
    const sx_tensor *xt = kind == GX_BWD_IN ? out : a, *kt = kind == GX_FWD      ? b
                                                             : kind == GX_BWD_IN ? a
                                                                                 : out;
    SX_TRY(sx__conv_geom(who, xt == a ? an : on, xt->shape,
                         kt == b   ? bn
                         : kt == a ? an
                                   : on,
                         kt->shape, p, g));
    const int64_t ys[4] = {g->n, g->oh, g->ow, g->f};
    if (kind == GX_FWD) {
        SX_TRY(sx__check_out(who, out, a->dtype, 4, ys));
    } else {
        SX_TRY(sx__check_same_dtype(who, a, out));
        SX_TRY(check_shape(who, "dy", b, ys, "conv2d of the geometry"));
    }
    SX_TRY(check_overlap(who, a, b, out, ws, ws_bytes));
    int64_t xs[4] = {g->n, g->h, g->w, g->c}, ks[4] = {g->kh, g->kw, g->cg, g->f};
    return check_ws(who, sx__conv_general_ws(g, false, xs, ks), ws, ws_bytes);
}

static sx_status general_forward(const sx_tensor *x, const sx_tensor *k, const sx_conv2d_params *p,
                                 void *ws, size_t ws_bytes, sx_tensor *y)
{
    gx_geom g;
    SX_TRY(conv_front("sx_tensor_conv2d_out", GX_FWD, x, "x", k, "k", y, "y", p, ws, ws_bytes, &g));
    return exec(&g, GX_FWD, x, k, y, ws, ws_bytes);
}

static sx_status general_backward_input(const sx_tensor *k, const sx_tensor *dy,
                                        const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                        sx_tensor *dx)
{
    gx_geom g;
    SX_TRY(conv_front("sx_tensor_conv2d_backward_input_out", GX_BWD_IN, k, "k", dy, "dy", dx, "dx",
                      p, ws, ws_bytes, &g));
    return exec(&g, GX_BWD_IN, k, dy, dx, ws, ws_bytes);
}

static sx_status general_backward_kernel(const sx_tensor *x, const sx_tensor *dy,
                                         const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                         sx_tensor *dk)
{
    gx_geom g;
    SX_TRY(conv_front("sx_tensor_conv2d_backward_kernel_out", GX_BWD_K, x, "x", dy, "dy", dk, "dk",
                      p, ws, ws_bytes, &g));
    return exec(&g, GX_BWD_K, x, dy, dk, ws, ws_bytes);
}

/* ---------------------------------------------------------------- conv2d */

size_t sx_conv2d_workspace(const int64_t x_shape[4], const int64_t k_shape[4],
                           const sx_conv2d_params *p)
{
    if (!sx__conv_dense(p, x_shape, k_shape))
        return general_workspace(x_shape, k_shape, p, true);
    return sx__conv_dense_ws_query(x_shape, k_shape, p, true);
}

size_t sx_conv2d_workspace_min(const int64_t x_shape[4], const int64_t k_shape[4],
                               const sx_conv2d_params *p)
{
    if (!sx__conv_dense(p, x_shape, k_shape))
        return general_workspace(x_shape, k_shape, p, false);
    return sx__conv_dense_ws_query(x_shape, k_shape, p, false);
}

sx_status sx_conv2d_shape(const char *who, const sx_tensor *x, const sx_tensor *k,
                          const sx_conv2d_params *p, int64_t out_shape[4])
{
    if (who == NULL)
        who = "sx_conv2d_shape";
    if (!conv_here_t(p, x, k))
        return general_shape(who, x, k, p, out_shape);
    if (out_shape == NULL)
        return sx_error(SX_E_ARG, "%s: out_shape is NULL", who);
    SX_TRY(check_rank4(who, "x", x, true)); /* shapes only: data may be absent */
    SX_TRY(check_rank4(who, "k", k, true));
    conv_geom g;
    SX_TRY(sx__conv_dense_geom(who, "x", x->shape, "k", k->shape, p, &g));
    out_shape[0] = g.n, out_shape[1] = g.oh, out_shape[2] = g.ow, out_shape[3] = g.f;
    return SX_OK;
}

/* The forward pass; with an epilogue e (its operands checked, y's shape not yet) run per unit or
 * at the end. */
static sx_status conv_forward(const char *who, const sx_tensor *x, const sx_tensor *k,
                              const sx_conv2d_params *p, void *ws, size_t ws_bytes, conv_epi *e,
                              sx_tensor *y)
{
    if (!conv_here_t(p, x, k)) { /* dilated, grouped or other paddings: conv_general.c */
        SX_TRY(general_forward(x, k, p, ws, ws_bytes, y));
        if (e != NULL && y->size > 0)
            sx__conv_epi_run(e, 0, y->size);
        return SX_OK;
    }
    SX_TRY(check_rank4(who, "x", x, false));
    SX_TRY(check_rank4(who, "k", k, false));
    SX_TRY(sx__check_same_dtype(who, x, k));
    conv_geom g;
    SX_TRY(sx__conv_dense_geom(who, "x", x->shape, "k", k->shape, p, &g));
    int64_t ys[4] = {g.n, g.oh, g.ow, g.f};
    SX_TRY(sx__check_out(who, y, x->dtype, 4, ys));
    SX_TRY(check_overlap(who, x, k, y, ws, ws_bytes));
    conv_plan pl;
    SX_TRY(sx__conv_plan_make(who, &g, CONV_FWD, x->dtype, ws, ws_bytes, &pl));
    if (y->size == 0)
        return SX_OK;
    const bool whole = e != NULL && (!e->per_unit || g.kdim == 0 || pl.path == PATH_XCOL);
    if (g.kdim == 0) /* no input channels: every sum is empty */
        zero_fill(y);
    else
        sx__conv_run(&g, &pl, CONV_FWD, x->dtype, x->data, k->data, y->data, whole ? NULL : e,
                     (whole || e == NULL) && stream_out(y, g.f));
    if (whole)
        sx__conv_epi_run(e, 0, y->size);
    return SX_OK;
}

sx_status sx_tensor_conv2d_out(const sx_tensor *x, const sx_tensor *k, const sx_conv2d_params *p,
                               void *ws, size_t ws_bytes, sx_tensor *y)
{
    return conv_forward("sx_tensor_conv2d_out", x, k, p, ws, ws_bytes, NULL, y);
}

sx_status sx_tensor_conv2d_fused_out(const sx_tensor *x, const sx_tensor *k,
                                     const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                     const sx_fused_prog *prog, int n_ops,
                                     const sx_tensor *const *ops, sx_tensor *y)
{
    const char *who = "sx_tensor_conv2d_fused_out";
    if (n_ops < 0 || n_ops > SX_FUSED_MAX_OPERANDS - 1 || (n_ops > 0 && ops == NULL))
        return sx_error(SX_E_ARG, "%s: %d operands besides the convolution (want 0..%d)", who,
                        n_ops, SX_FUSED_MAX_OPERANDS - 1);
    SX_TRY(sx__fused_check(who, prog, n_ops + 1));
    SX_TRY(sx__check_tensor(who, "y", y));
    conv_epi e = {.prog = prog, .n_in = n_ops + 1, .per_unit = true};
    e.in[0] = y;
    const int64_t row = y->rank == 4 ? y->shape[2] * y->shape[3] : 0;
    for (int i = 0; i < n_ops; i++) {
        const sx_tensor *t = ops[i];
        SX_TRY(sx__check_tensor(who, "operand", t));
        SX_TRY(sx__check_same_dtype(who, t, y));
        if (t->size != y->size && (t->size == 0 || y->size % t->size != 0))
            return sx_error(SX_E_SHAPE,
                            "%s: operand %d has %lld elements, y %lld (want the same, or a "
                            "divisor)",
                            who, i, (long long)t->size, (long long)y->size);
        SX_TRY(sx__check_apart(who, "operand", t, "y", y));
        if (ws != NULL && ranges_overlap(t->data, tensor_bytes(t), ws, ws_bytes))
            return sx_error(SX_E_ARG, "%s: operand %d overlaps the workspace", who, i);
        if (t->size != y->size && (row == 0 || row % t->size != 0))
            e.per_unit = false;
        e.in[i + 1] = t;
    }
    return conv_forward(who, x, k, p, ws, ws_bytes, &e, y);
}

/* Check dy against the shape conv2d gives for the geometry. */
static sx_status check_dy(const char *who, const conv_geom *g, const char *xname, const int64_t *xs,
                          const char *kname, const int64_t *ks, const sx_tensor *dy)
{
    int64_t want[4] = {g->n, g->oh, g->ow, g->f};
    if (!sx_shape_equal(4, dy->shape, 4, want)) {
        char a[128], b[128], c[128], d[128];
        return sx_error(SX_E_SHAPE, "%s: dy has shape %s, conv2d of %s %s and %s %s gives %s", who,
                        shape4(dy->shape, a, sizeof a), xname, shape4(xs, b, sizeof b), kname,
                        shape4(ks, c, sizeof c), shape4(want, d, sizeof d));
    }
    return SX_OK;
}

sx_status sx_tensor_conv2d_backward_input_out(const sx_tensor *k, const sx_tensor *dy,
                                              const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                              sx_tensor *dx)
{
    const char *who = "sx_tensor_conv2d_backward_input_out";
    if (!conv_here_t(p, dx, k))
        return general_backward_input(k, dy, p, ws, ws_bytes, dx);
    SX_TRY(check_rank4(who, "k", k, false));
    SX_TRY(check_rank4(who, "dy", dy, false));
    SX_TRY(check_rank4(who, "dx", dx, false));
    SX_TRY(sx__check_same_dtype(who, k, dy));
    SX_TRY(sx__check_same_dtype(who, k, dx));
    conv_geom g;
    SX_TRY(sx__conv_dense_geom(who, "dx", dx->shape, "k", k->shape, p, &g));
    SX_TRY(check_dy(who, &g, "dx", dx->shape, "k", k->shape, dy));
    SX_TRY(check_overlap(who, k, dy, dx, ws, ws_bytes));
    conv_plan pl;
    SX_TRY(sx__conv_plan_make(who, &g, CONV_BWD_IN, k->dtype, ws, ws_bytes, &pl));
    if (dx->size == 0)
        return SX_OK;
    if (dy->size == 0) { /* no outputs or no filters: nothing flows back */
        zero_fill(dx);
        return SX_OK;
    }
    sx__conv_run(&g, &pl, CONV_BWD_IN, k->dtype, k->data, dy->data, dx->data, NULL,
                 stream_out(dx, g.c));
    return SX_OK;
}

sx_status sx_tensor_conv2d_backward_kernel_out(const sx_tensor *x, const sx_tensor *dy,
                                               const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                               sx_tensor *dk)
{
    const char *who = "sx_tensor_conv2d_backward_kernel_out";
    if (!conv_here_t(p, x, dk))
        return general_backward_kernel(x, dy, p, ws, ws_bytes, dk);
    SX_TRY(check_rank4(who, "x", x, false));
    SX_TRY(check_rank4(who, "dy", dy, false));
    SX_TRY(check_rank4(who, "dk", dk, false));
    SX_TRY(sx__check_same_dtype(who, x, dy));
    SX_TRY(sx__check_same_dtype(who, x, dk));
    conv_geom g;
    SX_TRY(sx__conv_dense_geom(who, "x", x->shape, "dk", dk->shape, p, &g));
    SX_TRY(check_dy(who, &g, "x", x->shape, "dk", dk->shape, dy));
    SX_TRY(check_overlap(who, x, dy, dk, ws, ws_bytes));
    conv_plan pl;
    SX_TRY(sx__conv_plan_make(who, &g, CONV_BWD_K, x->dtype, ws, ws_bytes, &pl));
    if (dk->size == 0)
        return SX_OK;
    if (dy->size == 0) { /* no output positions: the gradient is an empty sum */
        zero_fill(dk);
        return SX_OK;
    }
    sx__conv_run(&g, &pl, CONV_BWD_K, x->dtype, x->data, dy->data, dk->data, NULL, false);
    return SX_OK;
}

sx_status sx_tensor_conv2d(const sx_tensor *x, const sx_tensor *k, const sx_conv2d_params *p,
                           sx_tensor **y)
{
    const char *who = "sx_tensor_conv2d";
    if (y == NULL)
        return sx_error(SX_E_ARG, "%s: y is NULL", who);
    *y = NULL;
    int64_t ys[4];
    SX_TRY(sx_conv2d_shape(who, x, k, p, ys));
    SX_TRY(sx__check_same_dtype(who, x, k));
    size_t wsb = sx_conv2d_workspace(x->shape, k->shape, p);
    void *ws = NULL;
    if (wsb > 0 && (ws = sx_alloc(wsb)) == NULL)
        return SX_E_NOMEM;
    sx_tensor *out = NULL;
    sx_status s = sx__new_like(x->dtype, 4, ys, &out);
    if (s == SX_OK)
        s = sx_tensor_conv2d_out(x, k, p, ws, wsb, out);
    sx_free(ws);
    if (s != SX_OK) {
        sx_tensor_free(out);
        return s;
    }
    *y = out;
    return SX_OK;
}

/* ---------------------------------------------------------------- transposed convolution */

sx_status sx_conv_transpose2d_shape(const char *who, const sx_tensor *x, const sx_tensor *k,
                                    const sx_conv2d_params *p, int64_t out_shape[4])
{
    if (who == NULL)
        who = "sx_conv_transpose2d_shape";
    if (out_shape == NULL)
        return sx_error(SX_E_ARG, "%s: out_shape is NULL", who);
    SX_TRY(check_rank4(who, "x", x, true));
    SX_TRY(check_rank4(who, "k", k, true));
    gx_geom g;
    SX_TRY(sx__conv_geom_transposed(who, "x", x->shape, "k", k->shape, p, &g));
    out_shape[0] = g.n, out_shape[1] = g.h, out_shape[2] = g.w, out_shape[3] = g.c;
    return SX_OK;
}

static size_t tr_ws(const int64_t x_shape[4], const int64_t k_shape[4], const sx_conv2d_params *p,
                    bool best)
{
    if (x_shape == NULL || k_shape == NULL)
        return 0;
    char saved[512];
    snprintf(saved, sizeof saved, "%s", sx_last_error());
    gx_geom g;
    sx_status s = sx__conv_geom_transposed("sx_conv_transpose2d_workspace", "x", x_shape, "k",
                                           k_shape, p, &g);
    (void)sx_error(SX_OK, "%s", saved);
    if (s != SX_OK)
        return 0;
    int64_t ys[4] = {g.n, g.h, g.w, g.c}, ks[4] = {g.kh, g.kw, g.cg, g.f};
    return sx__conv_general_ws(&g, best, ys, ks);
}

size_t sx_conv_transpose2d_workspace(const int64_t x_shape[4], const int64_t k_shape[4],
                                     const sx_conv2d_params *p)
{
    return tr_ws(x_shape, k_shape, p, true);
}

size_t sx_conv_transpose2d_workspace_min(const int64_t x_shape[4], const int64_t k_shape[4],
                                         const sx_conv2d_params *p)
{
    return tr_ws(x_shape, k_shape, p, false);
}

/* The shared front of the three transposed kernels. tx: the tensor with x's shape (forward
 * and backward-kernel: x; backward-input: dx); tk: the one with k's shape; tdy: the one with
 * y's shape (forward: the output y; else dy). */
static sx_status tr_front(const char *who, const sx_tensor *a, const char *an, const sx_tensor *b,
                          const char *bn, const sx_tensor *out, const char *on, const sx_tensor *tx,
                          const sx_tensor *tk, const sx_tensor *ty, const char *yname,
                          const sx_conv2d_params *p, void *ws, size_t ws_bytes, gx_geom *g)
{
    SX_TRY(check_rank4(who, an, a, false));
    SX_TRY(check_rank4(who, bn, b, false));
    SX_TRY(check_rank4(who, on, out, false));
    SX_TRY(sx__check_same_dtype(who, a, b));
    SX_TRY(sx__check_same_dtype(who, a, out));
    SX_TRY(sx__conv_geom_transposed(who,
                                    tx == a   ? an
                                    : tx == b ? bn
                                              : on,
                                    tx->shape,
                                    tk == a   ? an
                                    : tk == b ? bn
                                              : on,
                                    tk->shape, p, g));
    const int64_t ys[4] = {g->n, g->h, g->w, g->c};
    SX_TRY(check_shape(who, yname, ty, ys, "conv_transpose2d of the geometry"));
    SX_TRY(check_overlap(who, a, b, out, ws, ws_bytes));
    int64_t ks[4] = {g->kh, g->kw, g->cg, g->f};
    return check_ws(who, sx__conv_general_ws(g, false, ys, ks), ws, ws_bytes);
}

sx_status sx_tensor_conv_transpose2d_out(const sx_tensor *x, const sx_tensor *k,
                                         const sx_conv2d_params *p, void *ws, size_t ws_bytes,
                                         sx_tensor *y)
{
    const char *who = "sx_tensor_conv_transpose2d_out";
    gx_geom g;
    if (y == NULL)
        return sx_error(SX_E_ARG, "%s: y is NULL", who);
    SX_TRY(tr_front(who, x, "x", k, "k", y, "y", x, k, y, "y", p, ws, ws_bytes, &g));
    /* conv2d's backward-input: dx = y, from k and dy = x */
    return exec(&g, GX_BWD_IN, k, x, y, ws, ws_bytes);
}

sx_status sx_tensor_conv_transpose2d_backward_input_out(const sx_tensor *k, const sx_tensor *dy,
                                                        const sx_conv2d_params *p, void *ws,
                                                        size_t ws_bytes, sx_tensor *dx)
{
    const char *who = "sx_tensor_conv_transpose2d_backward_input_out";
    gx_geom g;
    SX_TRY(tr_front(who, k, "k", dy, "dy", dx, "dx", dx, k, dy, "dy", p, ws, ws_bytes, &g));
    /* conv2d's forward: y = dx, of x = dy */
    return exec(&g, GX_FWD, dy, k, dx, ws, ws_bytes);
}

sx_status sx_tensor_conv_transpose2d_backward_kernel_out(const sx_tensor *x, const sx_tensor *dy,
                                                         const sx_conv2d_params *p, void *ws,
                                                         size_t ws_bytes, sx_tensor *dk)
{
    const char *who = "sx_tensor_conv_transpose2d_backward_kernel_out";
    gx_geom g;
    SX_TRY(tr_front(who, x, "x", dy, "dy", dk, "dk", x, dk, dy, "dy", p, ws, ws_bytes, &g));
    /* conv2d's backward-kernel: its x is dy, its dy is x */
    return exec(&g, GX_BWD_K, dy, x, dk, ws, ws_bytes);
}
