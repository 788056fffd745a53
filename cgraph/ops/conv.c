/* ops/conv.c: 2-d convolution over NHWC (conv2d, optionally with an element-wise epilogue:
 * attr.prog and inputs after k) and its two backward ops (backward-input, backward-kernel), all
 * with attr.conv. The backward ops take the shape of what they produce as
 * attr.rank/shape and are checked by running the forward shape rule on the shapes they imply. */
#ifndef CG_GRAD_RULES /* the ops; their gradient rules, at the end, build apart (ops/rule.h) */
#include "cgraph_impl.h"

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

/* ---------------------------------------------------------------- constructors */

sx_cg_node *sx_cg_conv2d(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *k, const sx_conv2d_params *p)
{
    if (!cg_arg_ok(g, p, "sx_cg_conv2d"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.conv = *p;
    return cg_op2(g, SX_OP_CONV2D, x, k, &a);
}

sx_cg_node *sx_cg_conv2d_backward_input(sx_cg_graph *g, sx_cg_node *k, sx_cg_node *dy,
                                        const sx_conv2d_params *p, const int64_t x_shape[4])
{
    if (!cg_arg_ok(g, p, "sx_cg_conv2d_backward_input"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.conv = *p;
    if (!cg_set_target_shape(g, &a, 4, x_shape, "sx_cg_conv2d_backward_input"))
        return NULL;
    return cg_op2(g, SX_OP_CONV2D_BACKWARD_INPUT, k, dy, &a);
}

sx_cg_node *sx_cg_conv2d_backward_kernel(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *dy,
                                         const sx_conv2d_params *p, const int64_t k_shape[4])
{
    if (!cg_arg_ok(g, p, "sx_cg_conv2d_backward_kernel"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.conv = *p;
    if (!cg_set_target_shape(g, &a, 4, k_shape, "sx_cg_conv2d_backward_kernel"))
        return NULL;
    return cg_op2(g, SX_OP_CONV2D_BACKWARD_KERNEL, x, dy, &a);
}

/* ---------------------------------------------------------------- shape rules */

/* The shape rule and workspace size of one kind of convolution (conv2d, its transpose). */
typedef struct conv_kind {
    sx_status (*shape)(const char *who, const sx_tensor *x, const sx_tensor *k,
                       const sx_conv2d_params *p, int64_t out_shape[4]);
    size_t (*workspace)(const int64_t x_shape[4], const int64_t k_shape[4],
                        const sx_conv2d_params *p);
    const char *what; /* in messages: "the convolution gives ..." */
} conv_kind;

static const conv_kind conv2d_kind = {sx_conv2d_shape, sx_conv2d_workspace, "convolution"};
static const conv_kind transpose_kind = {sx_conv_transpose2d_shape, sx_conv_transpose2d_workspace,
                                         "transposed convolution"};

/* forward(x, k) -> y */
static sx_status shape_forward(sx_cg_node *n, const conv_kind *c)
{
    SX_TRY(cg_same_dtypes(n));
    int64_t s[4];
    sx_tensor x = cg_probe_view(IN_VALUE(0)), k = cg_probe_view(IN_VALUE(1));
    SX_TRY(c->shape(cg_who(n), &x, &k, &n->attr.conv, s));
    cg_set_shape(n, 4, s);
    n->ws_bytes = c->workspace(IN_VALUE(0)->shape, IN_VALUE(1)->shape, &n->attr.conv);
    return SX_OK;
}

/* backward_input(k, dy) -> x's shape (attr); backward_kernel(x, dy) -> k's shape (attr).
 * Checked by running the forward shape rule on the shapes the pair implies. */
static sx_status shape_backward(sx_cg_node *n, const conv_kind *c, bool backward_input)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_attr_shape(n));
    if (n->attr.rank != 4)
        return sx_error(SX_E_RANK, "%s: result rank %d (want 4)", cg_who(n), n->attr.rank);
    sx_tensor attr = sx_tensor_view(OUT->dtype, 4, n->attr.shape, NULL);
    sx_tensor x = cg_probe_view(backward_input ? &attr : IN_VALUE(0));
    sx_tensor k = cg_probe_view(backward_input ? IN_VALUE(0) : &attr);
    int64_t y[4];
    SX_TRY(c->shape(cg_who(n), &x, &k, &n->attr.conv, y));
    if (!sx_shape_equal(4, y, IN_VALUE(1)->rank, IN_VALUE(1)->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: dy has shape %s, the %s gives %s", cg_who(n),
                        sx_shape_str(IN_VALUE(1)->rank, IN_VALUE(1)->shape, a, sizeof a), c->what,
                        sx_shape_str(4, y, b, sizeof b));
    }
    n->ws_bytes = c->workspace(x.shape, k.shape, &n->attr.conv);
    return SX_OK;
}

/* conv2d(x, k) or, with an epilogue (attr.prog.n > 0: SX_PASS_CONV_EPILOGUE), conv2d(x, k,
 * operands...): the program over the convolution (operand 0) and the inputs from 2 on, each of
 * the result's size or repeated over its leading axes. */
sx_status cg_shape_conv2d(sx_cg_node *n)
{
    const int ops = n->n_in - 2;
    if (n->attr.prog.n == 0 ? ops != 0 : ops < 0 || ops + 1 > SX_FUSED_MAX_OPERANDS)
        return sx_error(SX_E_ARG,
                        "%s: %d inputs with a program of %d instructions (want 2, "
                        "or 2..%d with a program)",
                        cg_who(n), n->n_in, n->attr.prog.n, SX_FUSED_MAX_OPERANDS + 1);
    for (int i = 2; i < n->n_in; i++) /* the epilogue's dtypes: the convolution's */
        if (IN_VALUE(i)->dtype != IN_VALUE(0)->dtype)
            return sx_error(SX_E_DTYPE, "%s: input %d is %s, x is %s", cg_who(n), i,
                            sx_dtype_name(IN_VALUE(i)->dtype), sx_dtype_name(IN_VALUE(0)->dtype));
    if (n->n_in > 2)
        SX_TRY(sx__fused_check(cg_who(n), &n->attr.prog, ops + 1));
    SX_TRY(shape_forward(n, &conv2d_kind));
    for (int i = 2; i < n->n_in; i++)
        if (IN_VALUE(i)->size != OUT->size &&
            !cg_trailing_bcast(IN_VALUE(i), OUT->rank, OUT->shape)) {
            char a[128], b[128];
            return sx_error(SX_E_SHAPE,
                            "%s: epilogue input %d has shape %s, the result %s (want the same "
                            "size, or the result's trailing axes)",
                            cg_who(n), i,
                            sx_shape_str(IN_VALUE(i)->rank, IN_VALUE(i)->shape, a, sizeof a),
                            sx_shape_str(OUT->rank, OUT->shape, b, sizeof b));
        }
    return SX_OK;
}

sx_status cg_shape_conv2d_backward(sx_cg_node *n)
{
    return shape_backward(n, &conv2d_kind, n->op == SX_OP_CONV2D_BACKWARD_INPUT);
}

/* ---------------------------------------------------------------- evaluators */

sx_status cg_eval_conv2d(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    if (n->attr.prog.n == 0)
        return sx_tensor_conv2d_out(IN_VALUE(0), IN_VALUE(1), &n->attr.conv, ws, n->ws_bytes, OUT);
    const sx_tensor *ops[SX_CG_MAX_INPUTS];
    if (n->n_in > SX_CG_MAX_INPUTS)
        return sx_error(SX_E_UNSUPPORTED, "%s: more than %d inputs", cg_who(n), SX_CG_MAX_INPUTS);
    for (int i = 2; i < n->n_in; i++)
        ops[i - 2] = IN_VALUE(i);
    return sx_tensor_conv2d_fused_out(IN_VALUE(0), IN_VALUE(1), &n->attr.conv, ws, n->ws_bytes,
                                      &n->attr.prog, n->n_in - 2, ops, OUT);
}

sx_status cg_eval_conv2d_backward_input(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_conv2d_backward_input_out(IN_VALUE(0), IN_VALUE(1), &n->attr.conv, ws,
                                               n->ws_bytes, OUT);
}

sx_status cg_eval_conv2d_backward_kernel(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_conv2d_backward_kernel_out(IN_VALUE(0), IN_VALUE(1), &n->attr.conv, ws,
                                                n->ws_bytes, OUT);
}

/* ---------------------------------------------------------------- flop model */

/* Every direction of a convolution is one GEMM over (n*ho*wo) x (kh*kw*cin) x cout: 2 flops per
 * output pixel per kernel element. y is the forward output, k the kernel (kh,kw,cin,cout). */
static cg_cost conv(const sx_tensor *y, const sx_tensor *k)
{
    if (k->shape[3] <= 0)
        return (cg_cost){0, true};
    return (cg_cost){2.0 * (double)(y->size / k->shape[3]) * (double)k->size, true};
}

cg_cost cg_eval_conv2d_cost(const sx_cg_node *n)
{
    cg_cost c = conv(OUT, IN_VALUE(1));
    c.flops += cg_cost_per_out(n, n->attr.prog.n).flops; /* the epilogue */
    return c;
}

cg_cost cg_eval_conv2d_backward_input_cost(const sx_cg_node *n)
{
    return conv(IN_VALUE(1), IN_VALUE(0));
}

cg_cost cg_eval_conv2d_backward_kernel_cost(const sx_cg_node *n)
{
    return conv(IN_VALUE(1), OUT);
}

/* ---------------------------------------------------------------- transposed convolution */

/* conv_transpose2d(x, k): the adjoint of conv2d in x (sx_tensor_conv_transpose2d_out), with
 * output padding; its backward ops mirror conv2d's: backward_input(k, dy) -> x's shape (attr),
 * backward_kernel(x, dy) -> k's shape (attr). */
sx_cg_node *sx_cg_conv_transpose2d(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *k,
                                   const sx_conv2d_params *p)
{
    if (!cg_arg_ok(g, p, "sx_cg_conv_transpose2d"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    a.conv = *p;
    return cg_op2(g, SX_OP_CONV_TRANSPOSE2D, x, k, &a);
}

/* A backward op of the transposed convolution: (a, dy) producing `shape` */
static sx_cg_node *transposed_backward(sx_cg_graph *g, sx_cg_op op, sx_cg_node *a, sx_cg_node *dy,
                                       const sx_conv2d_params *p, const int64_t shape[4],
                                       const char *who)
{
    if (!cg_arg_ok(g, p, who))
        return NULL;
    sx_cg_attr at = sx_cg_attr_default();
    at.conv = *p;
    if (!cg_set_target_shape(g, &at, 4, shape, who))
        return NULL;
    return cg_op2(g, op, a, dy, &at);
}

sx_cg_node *sx_cg_conv_transpose2d_backward_input(sx_cg_graph *g, sx_cg_node *k, sx_cg_node *dy,
                                                  const sx_conv2d_params *p,
                                                  const int64_t x_shape[4])
{
    return transposed_backward(g, SX_OP_CONV_TRANSPOSE2D_BACKWARD_INPUT, k, dy, p, x_shape,
                               "sx_cg_conv_transpose2d_backward_input");
}

sx_cg_node *sx_cg_conv_transpose2d_backward_kernel(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *dy,
                                                   const sx_conv2d_params *p,
                                                   const int64_t k_shape[4])
{
    return transposed_backward(g, SX_OP_CONV_TRANSPOSE2D_BACKWARD_KERNEL, x, dy, p, k_shape,
                               "sx_cg_conv_transpose2d_backward_kernel");
}

sx_status cg_shape_conv_transpose2d(sx_cg_node *n)
{
    return shape_forward(n, &transpose_kind);
}

sx_status cg_shape_conv_transpose2d_backward(sx_cg_node *n)
{
    return shape_backward(n, &transpose_kind, n->op == SX_OP_CONV_TRANSPOSE2D_BACKWARD_INPUT);
}

sx_status cg_eval_conv_transpose2d(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_conv_transpose2d_out(IN_VALUE(0), IN_VALUE(1), &n->attr.conv, ws, n->ws_bytes,
                                          OUT);
}

sx_status cg_eval_conv_transpose2d_backward_input(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_conv_transpose2d_backward_input_out(IN_VALUE(0), IN_VALUE(1), &n->attr.conv,
                                                         ws, n->ws_bytes, OUT);
}

sx_status cg_eval_conv_transpose2d_backward_kernel(sx_cg_graph *g, sx_cg_node *n)
{
    void *ws;
    SX_TRY(cg_workspace(g, n->ws_bytes, &ws));
    return sx_tensor_conv_transpose2d_backward_kernel_out(IN_VALUE(0), IN_VALUE(1), &n->attr.conv,
                                                          ws, n->ws_bytes, OUT);
}

/* Each x pixel meets every kernel element of its group once: 2 (x pixels) (kernel elements),
 * conv() with x (n,h,w,c_in) in the place of y and k's axis 3 (c_in) as its channels. */
cg_cost cg_eval_conv_transpose2d_cost(const sx_cg_node *n)
{
    return conv(IN_VALUE(0), IN_VALUE(1));
}

cg_cost cg_eval_conv_transpose2d_backward_input_cost(const sx_cg_node *n)
{
    return conv(OUT, IN_VALUE(0));
}

cg_cost cg_eval_conv_transpose2d_backward_kernel_cost(const sx_cg_node *n)
{
    return conv(IN_VALUE(0), OUT);
}

#else
/* ---------------------------------------------------------------- gradient rules */

/* Each op's adjoints are the family's other two ops (forward, backward-input, backward-kernel are
 * bilinear). y is the node, x_i = y's inputs, G = gy is the adjoint of y. */
#include "rule.h"

/* conv2d(x, k): dx = conv2d_backward_input(k, G), dk = conv2d_backward_kernel(x, G) */
sx_status grad_conv2d(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    if (ATTR->prog.n != 0) /* an optimised graph's epilogue (SX_PASS_CONV_EPILOGUE) */
        return sx_error(SX_E_UNSUPPORTED,
                        "sx_ad_grad: cannot differentiate a conv2d with an epilogue (optimise "
                        "after differentiating)");
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv2d_backward_input(g, IN(1), gy, p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv2d_backward_kernel(g, IN(0), gy, p, sx_cg_node_shape(IN(1)));
    DONE();
}

/* conv2d_backward_input(k, dy) is bilinear: <backward_input(k, dy), G> = <conv2d(G, k), dy>, so
 * d(dy) = conv2d(G, k) and dk = conv2d_backward_kernel(G, dy). */
sx_status grad_conv2d_backward_input(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                     const bool *need, sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv2d_backward_kernel(g, gy, IN(1), p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv2d(g, gy, IN(0), p);
    DONE();
}

/* conv2d_backward_kernel(x, dy): <backward_kernel(x, dy), G> = <conv2d(x, G), dy>, so
 * d(dy) = conv2d(x, G) and dx = conv2d_backward_input(G, dy). */
sx_status grad_conv2d_backward_kernel(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                      const bool *need, sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv2d_backward_input(g, gy, IN(1), p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv2d(g, IN(0), gy, p);
    DONE();
}

/* conv_transpose2d(x, k) = T(x, k), bilinear: dx = conv_transpose2d_backward_input(k, G),
 * dk = conv_transpose2d_backward_kernel(x, G) */
sx_status grad_conv_transpose2d(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                                sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv_transpose2d_backward_input(g, IN(1), gy, p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv_transpose2d_backward_kernel(g, IN(0), gy, p, sx_cg_node_shape(IN(1)));
    DONE();
}

/* conv_transpose2d_backward_input(k, dy) is bilinear: <backward_input(k, dy), G> = <T(G, k), dy>,
 * so d(dy) = T(G, k) and dk = conv_transpose2d_backward_kernel(G, dy). */
sx_status grad_conv_transpose2d_backward_input(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                               const bool *need, sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv_transpose2d_backward_kernel(g, gy, IN(1), p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv_transpose2d(g, gy, IN(0), p);
    DONE();
}

/* conv_transpose2d_backward_kernel(x, dy): <backward_kernel(x, dy), G> = <T(x, G), dy>, so
 * d(dy) = T(x, G) and dx = conv_transpose2d_backward_input(G, dy). */
sx_status grad_conv_transpose2d_backward_kernel(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy,
                                                const bool *need, sx_cg_node **gin)
{
    const sx_conv2d_params *p = &ATTR->conv;
    if (need[0])
        gin[0] = sx_cg_conv_transpose2d_backward_input(g, gy, IN(1), p, sx_cg_node_shape(IN(0)));
    if (need[1])
        gin[1] = sx_cg_conv_transpose2d(g, IN(0), gy, p);
    DONE();
}

#endif
