/* shape_layers.c: layers that move values without learning anything: the input, reshape and
 * flatten, zero padding of images, nearest-neighbour upsampling, and dropout (identity at
 * inference, a fresh random mask every training step). */
#include "nn_impl.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- input */

/* ---------------------------------------------------------------- reshape, flatten */

/* x (batch, ...) -> (batch, l's shape) */
static sx_cg_node *reshape_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                   sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    int64_t s[SX_MAX_RANK];
    s[0] = -1;
    memcpy(s + 1, l->shape, (size_t)l->rank * sizeof *s);
    return sx_cg_reshape(b->g, in[0], l->rank + 1, s);
}

const nn_layer_ops nn_reshape_ops = {"reshape", 0, reshape_forward, NULL};
/* flatten is a reshape to (elements) under its own kind, so that it is named (flatten_1) and
 * printed as what the user asked for */
const nn_layer_ops nn_flatten_ops = {"flatten", 0, reshape_forward, NULL};

static sx_nn_layer *reshape(sx_nn_net *net, const char *who, nn_kind kind, sx_nn_layer *in,
                            int rank, const int64_t *shape)
{
    sx_nn_layer *l = nn_layer_begin(net, who, kind, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = nn_user_shape(who, l->name, rank, shape);
    if (s == SX_OK && sx_shape_size(rank, shape) != sx_shape_size(in->rank, in->shape)) {
        char a[96], b[96];
        s = sx_error(SX_E_SHAPE, "%s: cannot reshape %s to %s", l->name,
                     sx_shape_str(in->rank, in->shape, a, sizeof a),
                     sx_shape_str(rank, shape, b, sizeof b));
    }
    if (s == SX_OK) {
        l->rank = rank;
        memcpy(l->shape, shape, (size_t)rank * sizeof *shape);
    }
    return nn_layer_finish(net, who, l, s);
}

sx_nn_layer *sx_nn_reshape(sx_nn_net *net, sx_nn_layer *in, int rank, const int64_t *shape)
{
    return reshape(net, "sx_nn_reshape", L_RESHAPE, in, rank, shape);
}

sx_nn_layer *sx_nn_flatten(sx_nn_net *net, sx_nn_layer *in)
{
    int64_t n[1] = {in != NULL ? sx_shape_size(in->rank, in->shape) : 1};
    return reshape(net, "sx_nn_flatten", L_FLATTEN, in, 1, n);
}

/* ---------------------------------------------------------------- padding2d */

typedef struct pad_attr {
    int top, bottom, left, right;
} pad_attr;

/* x (batch, h, w, c) -> (batch, top + h + bottom, left + w + right, c) */
static sx_cg_node *pad_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                               sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    const pad_attr *a = l->attr;
    int64_t before[4] = {0, a->top, a->left, 0}, after[4] = {0, a->bottom, a->right, 0};
    return sx_cg_pad(b->g, in[0], before, after, 0);
}

static void pad_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const pad_attr *a = l->attr;
    snprintf(buf, size, "top %d bottom %d left %d right %d", a->top, a->bottom, a->left, a->right);
}

const nn_layer_ops nn_padding2d_ops = {"padding2d", sizeof(pad_attr), pad_forward, pad_describe};

sx_nn_layer *sx_nn_padding2d(sx_nn_net *net, sx_nn_layer *in, int top, int bottom, int left,
                             int right)
{
    const char *who = "sx_nn_padding2d";
    sx_nn_layer *l = nn_layer_begin(net, who, L_PAD2D, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = in->rank != 3
                      ? sx_error(SX_E_RANK, "%s: input rank %d, want (h,w,c)", l->name, in->rank)
                  : top < 0 || bottom < 0 || left < 0 || right < 0
                      ? sx_error(SX_E_ARG, "%s: negative padding", l->name)
                      : SX_OK;
    *(pad_attr *)l->attr = (pad_attr){top, bottom, left, right};
    if (s == SX_OK) {
        /* in int64, from int pads and dims that fit: no overflow */
        l->shape[0] = in->shape[0] + (int64_t)top + bottom;
        l->shape[1] = in->shape[1] + (int64_t)left + right;
        if (!nn_shape_fits(3, l->shape)) {
            char a[96], b[96];
            s = sx_error(SX_E_SHAPE,
                         "%s: padding %s by top %d, bottom %d, left %d, right %d gives %s: too "
                         "many elements",
                         l->name, sx_shape_str(in->rank, in->shape, a, sizeof a), top, bottom, left,
                         right, sx_shape_str(3, l->shape, b, sizeof b));
        }
    }
    return nn_layer_finish(net, who, l, s);
}

/* ---------------------------------------------------------------- upsampling2d */

typedef struct up_attr {
    int fh, fw;
} up_attr;

/* x (batch, h, w, c) -> (batch, h fh, w fw, c), each pixel repeated */
static sx_cg_node *up_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                              sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    const up_attr *a = l->attr;
    int64_t reps[4] = {1, a->fh, a->fw, 1};
    return sx_cg_repeat(b->g, in[0], reps);
}

static void up_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const up_attr *a = l->attr;
    snprintf(buf, size, "%dx%d", a->fh, a->fw);
}

const nn_layer_ops nn_upsampling2d_ops = {"upsampling2d", sizeof(up_attr), up_forward, up_describe};

sx_nn_layer *sx_nn_upsampling2d(sx_nn_net *net, sx_nn_layer *in, int fh, int fw)
{
    const char *who = "sx_nn_upsampling2d";
    sx_nn_layer *l = nn_layer_begin(net, who, L_UPSAMPLE, 1, &in);
    if (l == NULL)
        return NULL;
    sx_status s = in->rank != 3
                      ? sx_error(SX_E_RANK, "%s: input rank %d, want (h,w,c)", l->name, in->rank)
                  : fh < 1 || fw < 1 ? sx_error(SX_E_ARG, "%s: factors %d x %d", l->name, fh, fw)
                                     : SX_OK;
    *(up_attr *)l->attr = (up_attr){fh, fw};
    if (s == SX_OK) {
        bool fits = in->shape[0] <= INT64_MAX / fh && in->shape[1] <= INT64_MAX / fw;
        if (fits) {
            l->shape[0] = in->shape[0] * fh;
            l->shape[1] = in->shape[1] * fw;
            fits = nn_shape_fits(3, l->shape);
        }
        if (!fits) {
            char a[96];
            s = sx_error(SX_E_SHAPE, "%s: upsampling %s by %d x %d gives too many elements",
                         l->name, sx_shape_str(in->rank, in->shape, a, sizeof a), fh, fw);
        }
    }
    return nn_layer_finish(net, who, l, s);
}

/* ---------------------------------------------------------------- dropout */

typedef struct dropout_attr {
    double rate;
} dropout_attr;

/* x * mask in training (mask: 0 with probability rate, else 1 / (1 - rate)); x at inference */
static sx_cg_node *dropout_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                   sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    const dropout_attr *a = l->attr;
    sx_cg_node *x = in[0];
    if (b->mode == NN_INFER || a->rate == 0)
        return x;
    sx_cg_node *m =
        sx_cg_dropout_mask(b->g, b->rng_id, a->rate, sx_cg_node_rank(x), sx_cg_node_shape(x));
    if (m == NULL || nn_build_add_mask(b, m) != SX_OK)
        return NULL;
    return sx_cg_mul(b->g, x, m);
}

static void dropout_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "rate %g", ((const dropout_attr *)l->attr)->rate);
}

const nn_layer_ops nn_dropout_ops = {"dropout", sizeof(dropout_attr), dropout_forward,
                                     dropout_describe};

sx_nn_layer *sx_nn_dropout(sx_nn_net *net, sx_nn_layer *in, double rate)
{
    const char *who = "sx_nn_dropout";
    sx_nn_layer *l = nn_layer_begin(net, who, L_DROPOUT, 1, &in);
    if (l == NULL)
        return NULL;
    ((dropout_attr *)l->attr)->rate = rate;
    sx_status s = rate >= 0 && rate < 1
                      ? SX_OK
                      : sx_error(SX_E_ARG, "%s: rate %g (want 0 <= rate < 1)", l->name, rate);
    return nn_layer_finish(net, who, l, s);
}
