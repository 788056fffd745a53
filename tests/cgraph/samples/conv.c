/* conv.c: the samples of the convolutions and transposed convolutions (cgraph/ops/conv.c): each
 * op's SPEC_, DT_, sample generator and references. Part of ../opsamples.c, which includes it. */

/* ---------------------------------------------------------------- convolution */

static const struct {
    shp x, k;
    sx_conv2d_params p;
} conv_cases[] = {
    {{4, {1, 5, 5, 2}}, {4, {3, 3, 2, 3}}, {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID}},
    {{4, {2, 6, 5, 1}}, {4, {3, 2, 1, 2}}, {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME}},
    {{4, {1, 7, 7, 3}}, {4, {3, 3, 3, 2}}, {.stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID}},
    {{4, {2, 5, 6, 2}}, {4, {2, 3, 2, 4}}, {.stride_h = 2, .stride_w = 1, .padding = SX_PAD_SAME}},
    {{4, {1, 4, 4, 3}}, {4, {1, 1, 3, 2}}, {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID}},
    {{4, {1, 3, 3, 2}}, {4, {3, 3, 2, 1}}, {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID}},
    /* groups = 2 */
    {{4, {1, 5, 5, 4}}, {4, {3, 3, 2, 6}}, {.stride_h = 1, .stride_w = 1, .groups = 2}},
    /* depthwise, multiplier 2, SAME */
    {{4, {1, 5, 6, 3}},
     {4, {3, 3, 1, 6}},
     {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME, .groups = 3}},
    /* depthwise at stride 2 pad 1 */
    {{4, {2, 6, 5, 2}},
     {4, {3, 3, 1, 2}},
     {.stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 1,
      .pad_left = 1,
      .pad_right = 1,
      .groups = 2}},
    /* dilation 2, SAME */
    {{4, {1, 7, 6, 2}},
     {4, {3, 2, 2, 3}},
     {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME, .dilation_h = 2, .dilation_w = 2}},
    /* explicit asymmetric pads */
    {{4, {1, 5, 4, 2}},
     {4, {3, 3, 2, 2}},
     {.stride_h = 1,
      .stride_w = 1,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 2,
      .pad_bottom = 0,
      .pad_left = 1,
      .pad_right = 3}},
    /* SAME_LOWER with an odd total padding on both axes */
    {{4, {1, 6, 7, 2}},
     {4, {2, 3, 2, 2}},
     {.stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME_LOWER}},
    /* per-axis strides with dilation on one axis */
    {{4, {1, 8, 7, 3}}, {4, {2, 2, 3, 2}}, {.stride_h = 3, .stride_w = 2, .dilation_w = 2}},
    /* stride 2 pad 1 (PyTorch's usual downsampling) */
    {{4, {1, 7, 6, 2}},
     {4, {3, 3, 2, 3}},
     {.stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 1,
      .pad_left = 1,
      .pad_right = 1}},
    /* grouped 1x1 (one GEMM per group) */
    {{4, {2, 3, 4, 4}}, {4, {1, 1, 2, 4}}, {.stride_h = 1, .stride_w = 1, .groups = 2}},
    /* grouped, dilated, strided, padded at once */
    {{4, {1, 7, 7, 4}},
     {4, {2, 3, 2, 2}},
     {.stride_h = 2,
      .stride_w = 1,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 2,
      .pad_left = 0,
      .pad_right = 1,
      .dilation_h = 2,
      .groups = 2}},
};
#define N_CONV 16

/* Shape functions check descriptors as kernels do (data present): views over a dummy address
 * they never read. */
static char no_data[8];

/* The shape of dy for conv case v. */
static shp conv_dy(ctx *c, int v, sx_status *st)
{
    shp y = {4, {0}};
    sx_tensor x = sx_tensor_view(c->dt, 4, conv_cases[v].x.d, no_data);
    sx_tensor k = sx_tensor_view(c->dt, 4, conv_cases[v].k.d, no_data);
    *st = sx_conv2d_shape("opsamples", &x, &k, &conv_cases[v].p, y.d);
    return y;
}

#define SPEC_conv2d N_CONV, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_conv2d, plain_conv2d)
#define DT_conv2d GEN(gen_conv2d, 2)
static sx_cg_node *sample_conv2d(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, conv_cases[v].x, V_UNIFORM, -1, 1);
    return sx_cg_conv2d(g, x, in(c, conv_cases[v].k, V_UNIFORM, -1, 1), &conv_cases[v].p);
}

#define SPEC_conv2d_backward_input                                                                 \
    N_CONV, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_conv2d_backward_input, plain_conv2d_backward_input)
#define DT_conv2d_backward_input GEN(gen_conv2d_backward_input, 2)
static sx_cg_node *sample_conv2d_backward_input(GEN_ARGS)
{
    CTX;
    sx_status st;
    shp dys = conv_dy(c, v, &st);
    if (st != SX_OK)
        return fail(c, st);
    sx_cg_node *k = in(c, conv_cases[v].k, V_UNIFORM, -1, 1);
    return sx_cg_conv2d_backward_input(g, k, in(c, dys, V_UNIFORM, -1, 1), &conv_cases[v].p,
                                       conv_cases[v].x.d);
}

#define SPEC_conv2d_backward_kernel                                                                \
    N_CONV, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_conv2d_backward_kernel, plain_conv2d_backward_kernel)
#define DT_conv2d_backward_kernel GEN(gen_conv2d_backward_kernel, 2)
static sx_cg_node *sample_conv2d_backward_kernel(GEN_ARGS)
{
    CTX;
    sx_status st;
    shp dys = conv_dy(c, v, &st);
    if (st != SX_OK)
        return fail(c, st);
    sx_cg_node *x = in(c, conv_cases[v].x, V_UNIFORM, -1, 1);
    return sx_cg_conv2d_backward_kernel(g, x, in(c, dys, V_UNIFORM, -1, 1), &conv_cases[v].p,
                                        conv_cases[v].k.d);
}

/* ---- convolution references */

/* A convolution kernel called directly with its own workspace (ws_x, ws_k: the shapes of the
 * image and the kernel the workspace size is computed from). */
typedef sx_status (*ref_conv_fn)(const sx_tensor *, const sx_tensor *, const sx_conv2d_params *,
                                 void *, size_t, sx_tensor *);
static sx_status ref_conv_call(ref_conv_fn f,
                               size_t (*ws_of)(const int64_t *, const int64_t *,
                                               const sx_conv2d_params *),
                               const int64_t *ws_x, const int64_t *ws_k, const sx_cg_node *n,
                               const sx_tensor *const *x, sx_tensor *out)
{
    const sx_conv2d_params *p = &sx_cg_node_attr(n)->conv;
    size_t bytes = ws_of(ws_x, ws_k, p);
    void *ws = ref_alloc(bytes);
    sx_status st = f(x[0], x[1], p, ws, bytes, out);
    free(ws);
    return st;
}

static sx_status kernel_conv2d(KERNEL_ARGS)
{
    (void)s;
    return ref_conv_call(sx_tensor_conv2d_out, sx_conv2d_workspace, x[0]->shape, x[1]->shape, n, x,
                         out);
}

static sx_status kernel_conv2d_backward_input(KERNEL_ARGS)
{
    (void)s;
    return ref_conv_call(sx_tensor_conv2d_backward_input_out, sx_conv2d_workspace, out->shape,
                         x[0]->shape, n, x, out);
}

static sx_status kernel_conv2d_backward_kernel(KERNEL_ARGS)
{
    (void)s;
    return ref_conv_call(sx_tensor_conv2d_backward_kernel_out, sx_conv2d_workspace, x[0]->shape,
                         out->shape, n, x, out);
}

/* The padding before (top/left) and after an axis of n cells with the dilated window ke,
 * and stride s (the header's rules: SAME splits the total with the odd cell after,
 * SAME_LOWER before; EXPLICIT gives both). */
static void ref_pads(int64_t n, int64_t ke, int64_t s, sx_padding p, int64_t eb, int64_t ea,
                     int64_t *before, int64_t *after)
{
    int64_t same = (n + s - 1) / s, total = (same - 1) * s + ke - n;
    total = total > 0 ? total : 0;
    *before = *after = 0;
    if (p == SX_PAD_SAME)
        *before = total / 2, *after = total - total / 2;
    else if (p == SX_PAD_SAME_LOWER)
        *before = total - total / 2, *after = total / 2;
    else if (p == SX_PAD_EXPLICIT)
        *before = eb, *after = ea;
}

static int64_t ref_at_least_1(int v)
{
    return v > 1 ? v : 1;
}

/* Convolution by its definition, any stride, padding, dilation and groups. mode 0: y from
 * (x, k); 1: dx from (k, dy); 2: dk from (x, dy). xs (n,h,w,c), ks (kh,kw,c/groups,f),
 * ys (n,oh,ow,f). */
static void ref_conv(int mode, const int64_t *xs, const int64_t *ks, const int64_t *ys,
                     const sx_conv2d_params *p, const sx_tensor *A, const sx_tensor *B, double *out,
                     double *mag)
{
    int64_t dh = ref_at_least_1(p->dilation_h), dw = ref_at_least_1(p->dilation_w), pt, pl, unused;
    int64_t fg = ks[3] / ref_at_least_1(p->groups); /* filters per group */
    ref_pads(xs[1], dh * (ks[0] - 1) + 1, p->stride_h, p->padding, p->pad_top, p->pad_bottom, &pt,
             &unused);
    ref_pads(xs[2], dw * (ks[1] - 1) + 1, p->stride_w, p->padding, p->pad_left, p->pad_right, &pl,
             &unused);
    for (int64_t b = 0; b < ys[0]; b++)
        for (int64_t oy = 0; oy < ys[1]; oy++)
            for (int64_t ox = 0; ox < ys[2]; ox++)
                for (int64_t ky = 0; ky < ks[0]; ky++)
                    for (int64_t kx = 0; kx < ks[1]; kx++) {
                        int64_t iy = oy * p->stride_h + ky * dh - pt;
                        int64_t ix = ox * p->stride_w + kx * dw - pl;
                        if (iy < 0 || iy >= xs[1] || ix < 0 || ix >= xs[2])
                            continue;
                        for (int64_t c = 0; c < ks[2]; c++)
                            for (int64_t f = 0; f < ks[3]; f++) {
                                int64_t xc = (f / fg) * ks[2] + c; /* f's group's channel c */
                                int64_t xi = ((b * xs[1] + iy) * xs[2] + ix) * xs[3] + xc;
                                int64_t ki = ((ky * ks[1] + kx) * ks[2] + c) * ks[3] + f;
                                int64_t yi = ((b * ys[1] + oy) * ys[2] + ox) * ys[3] + f;
                                int64_t at = mode == 0 ? yi : mode == 1 ? xi : ki;
                                double v = mode == 0   ? ref_get(A, xi) * ref_get(B, ki)
                                           : mode == 1 ? ref_get(A, ki) * ref_get(B, yi)
                                                       : ref_get(A, xi) * ref_get(B, yi);
                                out[at] += v;
                                mag[at] += fabs(v);
                            }
                    }
}

static sx_status plain_conv2d(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    ref_conv(0, x[0]->shape, x[1]->shape, y->shape, &sx_cg_node_attr(n)->conv, x[0], x[1], want,
             mag);
    return SX_OK;
}

static sx_status plain_conv2d_backward_input(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    ref_conv(1, y->shape, x[0]->shape, x[1]->shape, &sx_cg_node_attr(n)->conv, x[0], x[1], want,
             mag);
    return SX_OK;
}

static sx_status plain_conv2d_backward_kernel(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    ref_conv(2, x[0]->shape, y->shape, x[1]->shape, &sx_cg_node_attr(n)->conv, x[0], x[1], want,
             mag);
    return SX_OK;
}

/* ---------------------------------------------------------------- transposed convolution */

/* Kernels (kh,kw,c_out/groups,c_in): strides, explicit and SAME pads, output padding, groups
 * (and one group per channel), dilation, a batch of two; every node within the differential
 * tester's DT_MAX_SIZE (64 elements). */
static const struct {
    shp x, k;
    sx_conv2d_params p;
} ct_cases[] = {
    {{4, {1, 2, 2, 2}}, {4, {3, 3, 2, 2}}, {.stride_h = 1, .stride_w = 1}},
    {{4, {1, 3, 2, 2}},
     {4, {2, 3, 2, 2}},
     {.stride_h = 2,
      .stride_w = 1,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_left = 1,
      .pad_right = 1}},
    {{4, {1, 2, 2, 4}},
     {4, {2, 2, 1, 4}},
     {.stride_h = 2, .stride_w = 2, .groups = 2, .output_padding_h = 1, .output_padding_w = 1}},
    {{4, {1, 3, 3, 2}},
     {4, {2, 2, 2, 2}},
     {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME, .dilation_h = 2, .dilation_w = 2}},
    {{4, {1, 2, 2, 3}},
     {4, {3, 3, 1, 3}},
     {.stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_SAME_LOWER,
      .groups = 3,
      .output_padding_h = 1,
      .output_padding_w = 1}},
    {{4, {1, 2, 2, 2}},
     {4, {3, 3, 2, 2}},
     {.stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 2,
      .pad_bottom = 1,
      .pad_left = 1,
      .pad_right = 2,
      .dilation_h = 2,
      .dilation_w = 2,
      .output_padding_h = 1}},
    {{4, {2, 2, 2, 1}}, {4, {2, 2, 2, 1}}, {.stride_h = 1, .stride_w = 1}},
};
#define N_CT 7

/* The shape of y (and dy) for transposed case v. */
static shp ct_dy(ctx *c, int v, sx_status *st)
{
    shp y = {4, {0}};
    sx_tensor x = sx_tensor_view(c->dt, 4, ct_cases[v].x.d, no_data);
    sx_tensor k = sx_tensor_view(c->dt, 4, ct_cases[v].k.d, no_data);
    *st = sx_conv_transpose2d_shape("opsamples", &x, &k, &ct_cases[v].p, y.d);
    return y;
}

#define SPEC_conv_transpose2d                                                                      \
    N_CT, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_conv_transpose2d, plain_conv_transpose2d)
#define DT_conv_transpose2d SAMPLE(2)
static sx_cg_node *sample_conv_transpose2d(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, ct_cases[v].x, V_UNIFORM, -1, 1);
    return sx_cg_conv_transpose2d(g, x, in(c, ct_cases[v].k, V_UNIFORM, -1, 1), &ct_cases[v].p);
}

#define SPEC_conv_transpose2d_backward_input                                                       \
    N_CT, OS_SMOOTH, 1e-6, 1e-6,                                                                   \
        REF(kernel_conv_transpose2d_backward_input, plain_conv_transpose2d_backward_input)
#define DT_conv_transpose2d_backward_input SAMPLE(2)
static sx_cg_node *sample_conv_transpose2d_backward_input(GEN_ARGS)
{
    CTX;
    sx_status st;
    shp dys = ct_dy(c, v, &st);
    if (st != SX_OK)
        return fail(c, st);
    sx_cg_node *k = in(c, ct_cases[v].k, V_UNIFORM, -1, 1);
    return sx_cg_conv_transpose2d_backward_input(g, k, in(c, dys, V_UNIFORM, -1, 1), &ct_cases[v].p,
                                                 ct_cases[v].x.d);
}

#define SPEC_conv_transpose2d_backward_kernel                                                      \
    N_CT, OS_SMOOTH, 1e-6, 1e-6,                                                                   \
        REF(kernel_conv_transpose2d_backward_kernel, plain_conv_transpose2d_backward_kernel)
#define DT_conv_transpose2d_backward_kernel SAMPLE(2)
static sx_cg_node *sample_conv_transpose2d_backward_kernel(GEN_ARGS)
{
    CTX;
    sx_status st;
    shp dys = ct_dy(c, v, &st);
    if (st != SX_OK)
        return fail(c, st);
    sx_cg_node *x = in(c, ct_cases[v].x, V_UNIFORM, -1, 1);
    return sx_cg_conv_transpose2d_backward_kernel(g, x, in(c, dys, V_UNIFORM, -1, 1),
                                                  &ct_cases[v].p, ct_cases[v].k.d);
}

/* ---- transposed convolution references */

static sx_status kernel_conv_transpose2d(KERNEL_ARGS)
{
    (void)s;
    return ref_conv_call(sx_tensor_conv_transpose2d_out, sx_conv_transpose2d_workspace, x[0]->shape,
                         x[1]->shape, n, x, out);
}

static sx_status kernel_conv_transpose2d_backward_input(KERNEL_ARGS)
{
    (void)s;
    return ref_conv_call(sx_tensor_conv_transpose2d_backward_input_out,
                         sx_conv_transpose2d_workspace, out->shape, x[0]->shape, n, x, out);
}

static sx_status kernel_conv_transpose2d_backward_kernel(KERNEL_ARGS)
{
    (void)s;
    return ref_conv_call(sx_tensor_conv_transpose2d_backward_kernel_out,
                         sx_conv_transpose2d_workspace, x[0]->shape, out->shape, n, x, out);
}

/* Transposed convolution by its definition (each x pixel scatters into y). mode 0: y from
 * (x, k); 1: dx from (k, dy); 2: dk from (x, dy). xs (n,h,w,ci), ks (kh,kw,co/groups,ci),
 * ys (n,oh,ow,co). */
static void ref_conv_transpose(int mode, const int64_t *xs, const int64_t *ks, const int64_t *ys,
                               const sx_conv2d_params *p, const sx_tensor *A, const sx_tensor *B,
                               double *out, double *mag)
{
    int64_t dh = p->dilation_h > 0 ? p->dilation_h : 1, dw = p->dilation_w > 0 ? p->dilation_w : 1;
    int64_t groups = p->groups > 0 ? p->groups : 1, cig = xs[3] / groups, cog = ks[2];
    int64_t pt = 0, pl = 0;
    if (p->padding == SX_PAD_EXPLICIT) {
        pt = p->pad_top;
        pl = p->pad_left;
    } else if (p->padding != SX_PAD_VALID) { /* SAME: oh = h * sh */
        int64_t ph = (xs[1] - 1) * p->stride_h + dh * (ks[0] - 1) + 1 + p->output_padding_h - ys[1];
        int64_t pw = (xs[2] - 1) * p->stride_w + dw * (ks[1] - 1) + 1 + p->output_padding_w - ys[2];
        pt = p->padding == SX_PAD_SAME_LOWER ? ph - ph / 2 : ph / 2;
        pl = p->padding == SX_PAD_SAME_LOWER ? pw - pw / 2 : pw / 2;
    }
    for (int64_t b = 0; b < xs[0]; b++)
        for (int64_t iy = 0; iy < xs[1]; iy++)
            for (int64_t ix = 0; ix < xs[2]; ix++)
                for (int64_t ky = 0; ky < ks[0]; ky++)
                    for (int64_t kx = 0; kx < ks[1]; kx++) {
                        int64_t oy = iy * p->stride_h - pt + ky * dh;
                        int64_t ox = ix * p->stride_w - pl + kx * dw;
                        if (oy < 0 || oy >= ys[1] || ox < 0 || ox >= ys[2])
                            continue;
                        for (int64_t ci = 0; ci < xs[3]; ci++)
                            for (int64_t co = 0; co < cog; co++) {
                                int64_t xi = ((b * xs[1] + iy) * xs[2] + ix) * xs[3] + ci;
                                int64_t ki = ((ky * ks[1] + kx) * ks[2] + co) * ks[3] + ci;
                                int64_t yi =
                                    ((b * ys[1] + oy) * ys[2] + ox) * ys[3] + (ci / cig) * cog + co;
                                int64_t at = mode == 0 ? yi : mode == 1 ? xi : ki;
                                double v = mode == 0   ? ref_get(A, xi) * ref_get(B, ki)
                                           : mode == 1 ? ref_get(A, ki) * ref_get(B, yi)
                                                       : ref_get(A, xi) * ref_get(B, yi);
                                out[at] += v;
                                mag[at] += fabs(v);
                            }
                    }
}

static sx_status plain_conv_transpose2d(PLAIN_ARGS)
{
    (void)compare;
    ref_conv_transpose(0, x[0]->shape, x[1]->shape, sx_cg_value(n)->shape,
                       &sx_cg_node_attr(n)->conv, x[0], x[1], want, mag);
    return SX_OK;
}

static sx_status plain_conv_transpose2d_backward_input(PLAIN_ARGS)
{
    (void)compare;
    ref_conv_transpose(1, sx_cg_value(n)->shape, x[0]->shape, x[1]->shape,
                       &sx_cg_node_attr(n)->conv, x[0], x[1], want, mag);
    return SX_OK;
}

static sx_status plain_conv_transpose2d_backward_kernel(PLAIN_ARGS)
{
    (void)compare;
    ref_conv_transpose(2, x[0]->shape, sx_cg_value(n)->shape, x[1]->shape,
                       &sx_cg_node_attr(n)->conv, x[0], x[1], want, mag);
    return SX_OK;
}
