/* pool.c: the samples of the pooling ops (cgraph/ops/pool.c): each op's SPEC_, DT_, sample
 * generator and references. Part of ../opsamples.c, which includes it. */

/* ---------------------------------------------------------------- pooling */

static const struct {
    shp x;
    sx_pool2d_params p;
} pool_cases[] = {
    {{4, {1, 4, 4, 2}},
     {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID}},
    {{4, {2, 5, 5, 1}},
     {.kernel_h = 3,
      .kernel_w = 3,
      .stride_h = 1,
      .stride_w = 1,
      .padding = SX_PAD_SAME}}, /* overlapping windows */
    {{4, {1, 5, 6, 3}},
     {.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 1, .padding = SX_PAD_SAME}},
    {{4, {2, 3, 4, 2}},
     {.kernel_h = 3,
      .kernel_w = 4,
      .stride_h = 1,
      .stride_w = 1,
      .padding = SX_PAD_VALID}}, /* global pooling */
    {{4, {1, 7, 5, 1}},
     {.kernel_h = 2,
      .kernel_w = 2,
      .stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_SAME}}, /* odd sizes, padding after */
    /* explicit pads: stride 2 pad 1 (PyTorch's usual), padding counted */
    {{4, {1, 6, 5, 2}},
     {.kernel_h = 3,
      .kernel_w = 3,
      .stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 1,
      .pad_left = 1,
      .pad_right = 1,
      .count_include_pad = 1}},
    /* asymmetric pads, per-axis strides, padding not counted */
    {{4, {1, 5, 6, 2}},
     {.kernel_h = 3,
      .kernel_w = 3,
      .stride_h = 2,
      .stride_w = 1,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 0,
      .pad_bottom = 1,
      .pad_left = 2,
      .pad_right = 1}},
    /* ceil_mode: a last, partial window */
    {{4, {1, 6, 7, 2}},
     {.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .ceil_mode = 1}},
    /* ceil_mode with pads counted: cells past the trailing pad are not */
    {{4, {2, 5, 5, 1}},
     {.kernel_h = 2,
      .kernel_w = 3,
      .stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_left = 1,
      .pad_right = 1,
      .ceil_mode = 1,
      .count_include_pad = 1}},
    /* SAME_LOWER: the odd padding cell before */
    {{4, {1, 5, 6, 2}},
     {.kernel_h = 2, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME_LOWER}},
    /* max pooling only (average pooling takes no dilation): dilation 2 */
    {{4, {1, 7, 6, 2}},
     {.kernel_h = 2,
      .kernel_w = 2,
      .stride_h = 1,
      .stride_w = 1,
      .dilation_h = 2,
      .dilation_w = 2}},
    /* dilation per axis with pads and stride 2 */
    {{4, {2, 6, 6, 1}},
     {.kernel_h = 3,
      .kernel_w = 2,
      .stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 1,
      .pad_left = 1,
      .pad_right = 1,
      .dilation_h = 2,
      .dilation_w = 3}},
    /* dilation with ceil_mode */
    {{4, {1, 6, 7, 1}},
     {.kernel_h = 2,
      .kernel_w = 2,
      .stride_h = 2,
      .stride_w = 2,
      .dilation_h = 2,
      .dilation_w = 2,
      .ceil_mode = 1}},
};
#define N_POOL 13     /* max pooling: every case */
#define N_AVG_POOL 10 /* average pooling: the cases before the dilated ones */

static shp pool_dy(ctx *c, int v, sx_status *st)
{
    shp y = {4, {0}};
    sx_tensor x = sx_tensor_view(c->dt, 4, pool_cases[v].x.d, no_data);
    *st = sx_pool2d_shape("opsamples", &x, &pool_cases[v].p, y.d);
    return y;
}

/* max pooling: distinct inputs, so the maximum of every window is unique */
#define SPEC_maxpool2d N_POOL, OS_PIECEWISE, 1e-6, 1e-6, REF(kernel_maxpool2d, plain_pool)
#define DT_maxpool2d GEN(gen_pool, 2)
static sx_cg_node *sample_maxpool2d(GEN_ARGS)
{
    CTX;
    return sx_cg_maxpool2d(g, in(c, pool_cases[v].x, V_DISTINCT, -2, 2), &pool_cases[v].p);
}

/* maxpool2d_backward(x, dy) (by `op`, or its relu form): linear in dy; piecewise constant in x (its
 * derivative there is zero almost everywhere), so x is not differentiated; x of both signs, so
 * that the relu form's mask matters */
typedef sx_cg_node *pool_backward_op(sx_cg_graph *, sx_cg_node *, sx_cg_node *,
                                     const sx_pool2d_params *);
static sx_cg_node *pool_backward_sample(GEN_ARGS, pool_backward_op *op)
{
    CTX;
    sx_status st;
    shp dys = pool_dy(c, v, &st);
    if (st != SX_OK)
        return fail(c, st);
    sx_cg_node *x = in_fixed(c, pool_cases[v].x, V_DISTINCT, -2, 2);
    return op(g, x, in(c, dys, V_UNIFORM, -1, 1), &pool_cases[v].p);
}

#define SPEC_maxpool2d_backward                                                                    \
    N_POOL, OS_PIECEWISE, 1e-6, 1e-6, REF(kernel_maxpool2d_backward, plain_maxpool2d_backward)
#define DT_maxpool2d_backward GEN(gen_pool_backward, 2)
static sx_cg_node *sample_maxpool2d_backward(GEN_ARGS)
{
    return pool_backward_sample(g, dt, rng, v, s, sx_cg_maxpool2d_backward);
}

#define SPEC_maxpool2d_relu_backward                                                               \
    N_POOL, OS_PIECEWISE, 1e-6, 1e-6,                                                              \
        REF(kernel_maxpool2d_relu_backward, plain_maxpool2d_relu_backward)
#define DT_maxpool2d_relu_backward GEN(gen_pool_backward, 2)
static sx_cg_node *sample_maxpool2d_relu_backward(GEN_ARGS)
{
    return pool_backward_sample(g, dt, rng, v, s, sx_cg_maxpool2d_relu_backward);
}

#define SPEC_avgpool2d N_AVG_POOL, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_avgpool2d, plain_pool)
#define DT_avgpool2d GEN(gen_pool, 2)
static sx_cg_node *sample_avgpool2d(GEN_ARGS)
{
    CTX;
    return sx_cg_avgpool2d(g, in(c, pool_cases[v].x, V_UNIFORM, -2, 2), &pool_cases[v].p);
}

#define SPEC_avgpool2d_backward                                                                    \
    N_AVG_POOL, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_avgpool2d_backward, plain_avgpool2d_backward)
#define DT_avgpool2d_backward GEN(gen_avgpool2d_backward, 2)
static sx_cg_node *sample_avgpool2d_backward(GEN_ARGS)
{
    CTX;
    sx_status st;
    shp dys = pool_dy(c, v, &st);
    if (st != SX_OK)
        return fail(c, st);
    return sx_cg_avgpool2d_backward(g, in(c, dys, V_UNIFORM, -1, 1), &pool_cases[v].p,
                                    pool_cases[v].x.d);
}

/* ---- pooling references */

static sx_status kernel_maxpool2d(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_maxpool2d_out(x[0], &sx_cg_node_attr(n)->pool, out);
}

static sx_status kernel_maxpool2d_backward(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_maxpool2d_backward_out(x[0], x[1], &sx_cg_node_attr(n)->pool, out);
}

static sx_status kernel_maxpool2d_relu_backward(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_maxpool2d_relu_backward_out(x[0], x[1], &sx_cg_node_attr(n)->pool, out);
}

static sx_status kernel_avgpool2d(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_avgpool2d_out(x[0], &sx_cg_node_attr(n)->pool, out);
}

static sx_status kernel_avgpool2d_backward(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_avgpool2d_backward_out(x[0], &sx_cg_node_attr(n)->pool, out);
}

/* Pooling by its definition, any padding, dilation, ceil_mode (through ys) and
 * count_include_pad. mode 0: max, 1: avg, 2: max backward (dy to the first maximum of each
 * window), 3: avg backward. */
static void ref_pool(int mode, const int64_t *xs, const int64_t *ys, const sx_pool2d_params *p,
                     const sx_tensor *x, const sx_tensor *dy, double *out, double *mag)
{
    int64_t dh = ref_at_least_1(p->dilation_h), dw = ref_at_least_1(p->dilation_w), pt, pb, pl, pr;
    ref_pads(xs[1], dh * (p->kernel_h - 1) + 1, p->stride_h, p->padding, p->pad_top, p->pad_bottom,
             &pt, &pb);
    ref_pads(xs[2], dw * (p->kernel_w - 1) + 1, p->stride_w, p->padding, p->pad_left, p->pad_right,
             &pl, &pr);
    for (int64_t b = 0; b < ys[0]; b++)
        for (int64_t oy = 0; oy < ys[1]; oy++)
            for (int64_t ox = 0; ox < ys[2]; ox++)
                for (int64_t c = 0; c < ys[3]; c++) {
                    int64_t yi = ((b * ys[1] + oy) * ys[2] + ox) * ys[3] + c, arg = -1, cnt = 0;
                    int64_t padded = 0; /* window cells inside the padded input */
                    double best = -HUGE_VAL, sum = 0;
                    for (int pass = 0; pass < 2; pass++)
                        for (int64_t ky = 0; ky < p->kernel_h; ky++)
                            for (int64_t kx = 0; kx < p->kernel_w; kx++) {
                                int64_t iy = oy * p->stride_h + ky * dh - pt;
                                int64_t ix = ox * p->stride_w + kx * dw - pl;
                                if (pass == 0 && iy >= -pt && iy < xs[1] + pb && ix >= -pl &&
                                    ix < xs[2] + pr)
                                    padded++;
                                if (iy < 0 || iy >= xs[1] || ix < 0 || ix >= xs[2])
                                    continue;
                                int64_t xi = ((b * xs[1] + iy) * xs[2] + ix) * xs[3] + c;
                                double div = (double)(p->count_include_pad ? padded : cnt);
                                if (pass == 0) {
                                    cnt++;
                                    if (x != NULL && ref_get(x, xi) > best) {
                                        best = ref_get(x, xi);
                                        arg = xi;
                                    }
                                    if (x != NULL)
                                        sum += ref_get(x, xi);
                                } else if (mode == 3) {
                                    out[xi] += ref_get(dy, yi) / div;
                                    mag[xi] += fabs(ref_get(dy, yi));
                                }
                            }
                    double div = (double)(p->count_include_pad ? padded : cnt);
                    if (mode == 0)
                        out[yi] = best;
                    if (mode == 1) {
                        out[yi] = sum / div;
                        mag[yi] = fabs(sum);
                    }
                    if (mode == 2 && arg >= 0) {
                        out[arg] += ref_get(dy, yi);
                        mag[arg] += fabs(ref_get(dy, yi));
                    }
                }
}

/* maxpool2d and avgpool2d */
static sx_status plain_pool(PLAIN_ARGS)
{
    (void)compare;
    ref_pool(sx_cg_node_op(n) == SX_OP_MAXPOOL2D ? 0 : 1, x[0]->shape, sx_cg_value(n)->shape,
             &sx_cg_node_attr(n)->pool, x[0], NULL, want, mag);
    return SX_OK;
}

static sx_status plain_maxpool2d_backward(PLAIN_ARGS)
{
    (void)compare;
    ref_pool(2, x[0]->shape, x[1]->shape, &sx_cg_node_attr(n)->pool, x[0], x[1], want, mag);
    return SX_OK;
}

static sx_status plain_maxpool2d_relu_backward(PLAIN_ARGS) /* then zero where x <= 0 */
{
    (void)compare;
    ref_pool(2, x[0]->shape, x[1]->shape, &sx_cg_node_attr(n)->pool, x[0], x[1], want, mag);
    for (int64_t i = 0; i < x[0]->size; i++)
        if (!(ref_get(x[0], i) > 0))
            want[i] = 0;
    return SX_OK;
}

static sx_status plain_avgpool2d_backward(PLAIN_ARGS)
{
    (void)compare;
    ref_pool(3, sx_cg_value(n)->shape, x[0]->shape, &sx_cg_node_attr(n)->pool, NULL, x[0], want,
             mag);
    return SX_OK;
}

/* ---------------------------------------------------------------- adaptive average pooling */

/* Output sizes that divide the input and that do not (windows of two sizes, overlapping), one
 * larger than the input (windows of one cell, repeated), global pooling, a batch of two. */
static const struct {
    shp x;
    int64_t oh, ow;
} adaptive_cases[] = {
    {{4, {1, 5, 5, 2}}, 2, 3}, {{4, {2, 4, 6, 1}}, 2, 3}, {{4, {1, 3, 7, 2}}, 4, 3},
    {{4, {1, 4, 4, 3}}, 1, 1}, {{4, {1, 6, 5, 1}}, 4, 4},
};
#define N_ADAPTIVE 5

#define SPEC_adaptive_avgpool2d                                                                    \
    N_ADAPTIVE, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_adaptive_avgpool2d, plain_adaptive_avgpool2d)
#define DT_adaptive_avgpool2d SAMPLE(2)
static sx_cg_node *sample_adaptive_avgpool2d(GEN_ARGS)
{
    CTX;
    return sx_cg_adaptive_avgpool2d(g, in(c, adaptive_cases[v].x, V_UNIFORM, -2, 2),
                                    adaptive_cases[v].oh, adaptive_cases[v].ow);
}

#define SPEC_adaptive_avgpool2d_backward                                                           \
    N_ADAPTIVE, OS_SMOOTH, 1e-6, 1e-6,                                                             \
        REF(kernel_adaptive_avgpool2d_backward, plain_adaptive_avgpool2d_backward)
#define DT_adaptive_avgpool2d_backward SAMPLE(2)
static sx_cg_node *sample_adaptive_avgpool2d_backward(GEN_ARGS)
{
    CTX;
    shp x = adaptive_cases[v].x,
        dy = {4, {x.d[0], adaptive_cases[v].oh, adaptive_cases[v].ow, x.d[3]}};
    return sx_cg_adaptive_avgpool2d_backward(g, in(c, dy, V_UNIFORM, -1, 1), x.d);
}

static sx_status kernel_adaptive_avgpool2d(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_adaptive_avgpool2d_out(x[0], out);
}

static sx_status kernel_adaptive_avgpool2d_backward(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_adaptive_avgpool2d_backward_out(x[0], out);
}

/* Adaptive average pooling by its definition: window (i, j) averages rows
 * [floor(i h / oh), ceil((i + 1) h / oh)) and the columns likewise. mode 0: y from x; 1: dx
 * from dy. xs (n,h,w,c), ys (n,oh,ow,c). */
static void ref_adaptive(int mode, const int64_t *xs, const int64_t *ys, const sx_tensor *A,
                         double *out, double *mag)
{
    for (int64_t b = 0; b < xs[0]; b++)
        for (int64_t i = 0; i < ys[1]; i++)
            for (int64_t j = 0; j < ys[2]; j++) {
                int64_t r0 = i * xs[1] / ys[1], r1 = ((i + 1) * xs[1] + ys[1] - 1) / ys[1];
                int64_t c0 = j * xs[2] / ys[2], c1 = ((j + 1) * xs[2] + ys[2] - 1) / ys[2];
                double cnt = (double)((r1 - r0) * (c1 - c0));
                for (int64_t c = 0; c < xs[3]; c++) {
                    int64_t yi = ((b * ys[1] + i) * ys[2] + j) * ys[3] + c;
                    for (int64_t r = r0; r < r1; r++)
                        for (int64_t q = c0; q < c1; q++) {
                            int64_t xi = ((b * xs[1] + r) * xs[2] + q) * xs[3] + c;
                            int64_t at = mode == 0 ? yi : xi;
                            double v = (mode == 0 ? ref_get(A, xi) : ref_get(A, yi)) / cnt;
                            out[at] += v;
                            mag[at] += fabs(v);
                        }
                }
            }
}

static sx_status plain_adaptive_avgpool2d(PLAIN_ARGS)
{
    (void)compare;
    ref_adaptive(0, x[0]->shape, sx_cg_value(n)->shape, x[0], want, mag);
    return SX_OK;
}

static sx_status plain_adaptive_avgpool2d_backward(PLAIN_ARGS)
{
    (void)compare;
    ref_adaptive(1, sx_cg_value(n)->shape, x[0]->shape, x[0], want, mag);
    return SX_OK;
}
