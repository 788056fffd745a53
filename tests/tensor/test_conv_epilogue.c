/* Convolutions with an epilogue (sx_tensor_conv2d_fused_out): the same bits as
 * sx_tensor_conv2d_out followed by sx_tensor_fused_out, on shapes that reach every path (direct
 * kernels, Winograd 3x3 and 5x5, im2col + GEMM, x as the im2col matrix, strides, grouped and
 * dilated convolutions of conv_general.c), with the full and the minimum workspace (banded
 * units), one and two threads, f32 and f64, and operands of every kind: per-channel (a bias, a
 * folded batch norm's scale and shift), a scalar, a residual of y's shape, and a repeated
 * operand larger than a row of y (run over all of y at the end). Errors leave y unchanged. */
#include "sx_tensor_kernels.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

typedef struct ecfg {
    int64_t n, h, w, c, kh, kw, f;
    int stride, groups, dilation;
    sx_padding pad;
} ecfg;

static const ecfg cases[] = {
    {3, 11, 9, 3, 3, 3, 4, 1, 1, 1, SX_PAD_SAME},    /* direct, partial vector of filters */
    {2, 14, 14, 16, 3, 3, 16, 1, 1, 1, SX_PAD_SAME}, /* Winograd F(4x4, 3x3) */
    {2, 12, 12, 16, 5, 5, 16, 1, 1, 1, SX_PAD_SAME}, /* Winograd F(2x2, 5x5) */
    {2, 9, 9, 16, 3, 3, 32, 2, 1, 1, SX_PAD_SAME},   /* strided (resnet's downsampling) */
    {2, 10, 11, 8, 1, 1, 6, 1, 1, 1, SX_PAD_SAME},   /* 1x1: x is the im2col matrix */
    {2, 10, 11, 8, 1, 1, 6, 2, 1, 1, SX_PAD_VALID},  /* 1x1 strided projection */
    {2, 9, 8, 100, 5, 5, 5, 1, 1, 1, SX_PAD_VALID},  /* kdim 2500: im2col + GEMM */
    {2, 28, 28, 1, 5, 5, 6, 1, 1, 1, SX_PAD_SAME},   /* lenet5's first layer */
    {2, 10, 10, 8, 3, 3, 8, 1, 2, 1, SX_PAD_SAME},   /* grouped: conv_general.c */
    {2, 11, 10, 3, 3, 3, 5, 1, 1, 2, SX_PAD_VALID},  /* dilated: conv_general.c */
    {64, 7, 7, 16, 3, 3, 16, 1, 1, 1, SX_PAD_SAME},  /* many small images */
    {1, 40, 37, 24, 3, 3, 20, 1, 1, 1, SX_PAD_SAME}, /* a large image: bands */
};

/* The programs, over operands 0 = the convolution, then the listed extra operands: kind 0 a
 * per-channel vector (f), 1 a scalar, 2 y's shape (a residual), 3 (oh, ow, f) (larger than a row
 * of y: the whole-y path). */
typedef struct eprog {
    sx_fused_prog prog;
    int n_ops;
    int kinds[4];
} eprog;

#define I_BIN(o, a_, b_)                                                                           \
    {                                                                                              \
        .kind = SX_FUSED_BINARY, .op = SX_BINARY_##o, .a = a_, .b = b_                             \
    }
#define I_MAP(o, a_)                                                                               \
    {                                                                                              \
        .kind = SX_FUSED_MAP, .op = SX_MAP_##o, .a = a_                                            \
    }

static const eprog progs[] = {
    {{2, {I_BIN(ADD, 0, 1), I_MAP(RELU, -1)}}, 1, {0}}, /* bias, relu */
    {{1, {I_BIN(ADD, 1, 0)}}, 1, {0}},                  /* a bias alone */
    {{4, {I_BIN(MUL, 0, 1), I_BIN(ADD, -1, 2), I_BIN(ADD, -2, 3), I_MAP(RELU, -3)}},
     3,
     {0, 0, 2}},                                             /* bn, residual add, relu */
    {{2, {I_BIN(MUL, 1, 0), I_BIN(SUB, -1, 2)}}, 2, {1, 3}}, /* scalar, whole-y operand */
    {{3, {I_MAP(RELU, 0), I_BIN(ADD, 1, -1), I_MAP(RELU, -2)}}, 1, {2}}, /* relu(relu(y) + r) */
};

static sx_tensor *operand(sx_rng *rng, sx_dtype dt, int kind, const int64_t ys[4])
{
    const int64_t one = 1;
    switch (kind) {
    case 0:
        return tu_rand(rng, dt, 1, &ys[3], -1, 1);
    case 1:
        return tu_rand(rng, dt, 0, &one, -2, 2);
    case 2:
        return tu_rand(rng, dt, 4, ys, -1, 1);
    default:
        return tu_rand(rng, dt, 3, &ys[1], -1, 1);
    }
}

static sx_conv2d_params params_of(const ecfg *q)
{
    sx_conv2d_params p = {.stride_h = q->stride, .stride_w = q->stride, .padding = q->pad};
    p.groups = q->groups;
    p.dilation_h = p.dilation_w = q->dilation;
    return p;
}

/* One case, one program, one dtype: fused against separate, for both workspaces and 1 and 2
 * threads. */
static void check_one(sx_rng *rng, const ecfg *q, const eprog *e, sx_dtype dt)
{
    const int64_t xs[4] = {q->n, q->h, q->w, q->c}, ks[4] = {q->kh, q->kw, q->c / q->groups, q->f};
    sx_conv2d_params p = params_of(q);
    sx_tensor *x = tu_rand(rng, dt, 4, xs, -1, 1), *k = tu_rand(rng, dt, 4, ks, -1, 1);
    int64_t ys[4];
    cr_assert_eq(sx_conv2d_shape(NULL, x, k, &p, ys), SX_OK, "%s", sx_last_error());
    sx_tensor *ops[4];
    for (int i = 0; i < e->n_ops; i++)
        ops[i] = operand(rng, dt, e->kinds[i], ys);
    size_t full = sx_conv2d_workspace(xs, ks, &p), min = sx_conv2d_workspace_min(xs, ks, &p);
    void *ws = malloc(full + 1);
    sx_tensor *want = tu_zeros(dt, 4, ys), *got = tu_zeros(dt, 4, ys);
    int saved = sx_threads_get();
    for (int t = 1; t <= 2; t++)
        for (int m = 0; m < 2; m++) {
            size_t wsb = m ? min : full;
            cr_assert_eq(sx_threads_set(t), SX_OK);
            cr_assert_eq(sx_tensor_conv2d_out(x, k, &p, ws, wsb, want), SX_OK, "%s",
                         sx_last_error());
            const sx_tensor *in[5] = {want};
            for (int i = 0; i < e->n_ops; i++)
                in[i + 1] = ops[i];
            cr_assert_eq(sx_tensor_fused_out(&e->prog, e->n_ops + 1, in, want), SX_OK, "%s",
                         sx_last_error());
            memset(got->data, 0xff, (size_t)got->size * sx_dtype_size(dt));
            cr_assert_eq(sx_tensor_conv2d_fused_out(x, k, &p, ws, wsb, &e->prog, e->n_ops,
                                                    (const sx_tensor *const *)ops, got),
                         SX_OK, "%s", sx_last_error());
            cr_assert(memcmp(want->data, got->data, (size_t)got->size * sx_dtype_size(dt)) == 0,
                      "x (%lld,%lld,%lld,%lld) k %lldx%lldx%lld stride %d groups %d dilation %d "
                      "%s, program of %d, %s, %d thread(s), %s workspace: fused differs",
                      (long long)q->n, (long long)q->h, (long long)q->w, (long long)q->c,
                      (long long)q->kh, (long long)q->kw, (long long)q->f, q->stride, q->groups,
                      q->dilation, q->pad == SX_PAD_SAME ? "SAME" : "VALID", e->prog.n,
                      sx_dtype_name(dt), t, m ? "minimum" : "full");
        }
    cr_assert_eq(sx_threads_set(saved), SX_OK);
    free(ws);
    for (int i = 0; i < e->n_ops; i++)
        sx_tensor_free(ops[i]);
    sx_tensor_free(x);
    sx_tensor_free(k);
    sx_tensor_free(want);
    sx_tensor_free(got);
}

Test(tensor_conv_epilogue, same_bits_as_conv_then_fused, .timeout = 120)
{
    sx_rng rng;
    sx_rng_seed(&rng, 18);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t j = 0; j < sizeof progs / sizeof progs[0]; j++)
            check_one(&rng, &cases[i], &progs[j], (i + j) % 3 == 2 ? SX_F64 : SX_F32);
}

Test(tensor_conv_epilogue, errors_leave_y_untouched)
{
    sx_rng rng;
    sx_rng_seed(&rng, 19);
    const int64_t xs[4] = {2, 6, 6, 3}, ks[4] = {3, 3, 3, 4}, ys[4] = {2, 6, 6, 4}, five = 5;
    sx_conv2d_params p = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    sx_tensor *x = tu_rand(&rng, SX_F32, 4, xs, -1, 1), *k = tu_rand(&rng, SX_F32, 4, ks, -1, 1);
    sx_tensor *y = tu_rand(&rng, SX_F32, 4, ys, 5, 9), *keep = tu_zeros(SX_F32, 4, ys);
    memcpy(keep->data, y->data, (size_t)y->size * 4);
    sx_tensor *bias = tu_rand(&rng, SX_F32, 1, &ys[3], -1, 1);
    sx_tensor *odd = tu_rand(&rng, SX_F32, 1, &five, -1, 1);
    sx_tensor *b64 = tu_rand(&rng, SX_F64, 1, &ys[3], -1, 1);
    size_t wsb = sx_conv2d_workspace(xs, ks, &p);
    void *ws = malloc(wsb + 1);
    const eprog *e = &progs[0];
    /* a view of y's first elements as the bias: it overlaps y */
    sx_tensor alias = sx_tensor_view(SX_F32, 1, &ys[3], y->data);
    const struct {
        const sx_tensor *op;
        int n_ops;
        sx_status want;
        const char *needle;
    } bad[] = {
        {odd, 1, SX_E_SHAPE, "divisor"},  {b64, 1, SX_E_DTYPE, "sx_tensor_conv2d_fused_out"},
        {&alias, 1, SX_E_ARG, "overlap"}, {bias, -1, SX_E_ARG, "operands"},
        {bias, 0, SX_E_ARG, "source"}, /* the program reads operand 1, which is not there */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const sx_tensor *ops[1] = {bad[i].op};
        sx_status s = sx_tensor_conv2d_fused_out(x, k, &p, ws, wsb, &e->prog, bad[i].n_ops, ops, y);
        cr_assert_eq(s, bad[i].want, "case %zu: status %d, want %d (%s)", i, s, bad[i].want,
                     sx_last_error());
        cr_assert(strstr(sx_last_error(), bad[i].needle) != NULL, "case %zu: %s", i,
                  sx_last_error());
        cr_assert(memcmp(y->data, keep->data, (size_t)y->size * 4) == 0, "case %zu: y changed", i);
    }
    /* an operand inside the workspace: the convolution's scratch would overwrite it */
    sx_tensor in_ws = sx_tensor_view(SX_F32, 1, &ys[3], ws);
    const sx_tensor *ops[1] = {&in_ws};
    cr_assert_eq(sx_tensor_conv2d_fused_out(x, k, &p, ws, wsb, &e->prog, 1, ops, y), SX_E_ARG);
    cr_assert(memcmp(y->data, keep->data, (size_t)y->size * 4) == 0);
    free(ws);
    sx_tensor_free(x);
    sx_tensor_free(k);
    sx_tensor_free(y);
    sx_tensor_free(keep);
    sx_tensor_free(bias);
    sx_tensor_free(odd);
    sx_tensor_free(b64);
}
