/* merge.c: layers joining n >= 2 inputs of equal shapes: element-wise add, mul, max and
 * average, and concatenation along the last axis (the other axes equal). */
#include "nn_impl.h"

#include <stdio.h>

/* y = in[0] op in[1] op ... (left to right) */
static sx_cg_node *fold(nn_build *b, const sx_nn_layer *l, sx_cg_node *const *in,
                        sx_cg_node *(*op)(sx_cg_graph *, sx_cg_node *, sx_cg_node *))
{
    sx_cg_node *y = in[0];
    for (int i = 1; i < l->n_in; i++)
        y = op(b->g, y, in[i]);
    return y;
}

static sx_cg_node *add_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                               sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    return fold(b, l, in, sx_cg_add);
}

static sx_cg_node *mul_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                               sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    return fold(b, l, in, sx_cg_mul);
}

static sx_cg_node *max_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                               sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    return fold(b, l, in, sx_cg_max);
}

/* (in[0] + ... + in[n-1]) * (1 / n) */
static sx_cg_node *average_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                   sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    sx_cg_node *y = fold(b, l, in, sx_cg_add);
    return sx_cg_mul(b->g, y, sx_cg_scalar_like(b->g, y, 1.0 / l->n_in));
}

static sx_cg_node *concat_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                  sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    return sx_cg_concat(b->g, l->n_in, in, -1);
}

static void merge_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    int k = snprintf(buf, size, "of");
    for (int i = 0; i < l->n_in && k > 0 && (size_t)k < size; i++)
        k += snprintf(buf + k, size - (size_t)k, " %s", l->in[i]->name);
}

const nn_layer_ops nn_add_ops = {"add", 0, add_forward, merge_describe};
const nn_layer_ops nn_mul_ops = {"mul", 0, mul_forward, merge_describe};
const nn_layer_ops nn_max_ops = {"max", 0, max_forward, merge_describe};
const nn_layer_ops nn_average_ops = {"average", 0, average_forward, merge_describe};
const nn_layer_ops nn_concatenate_ops = {"concatenate", 0, concat_forward, merge_describe};

/* The output shape of merge l of inputs in[0..n-1]: in[0]'s, or for a concatenation the sum of
 * the last axes. */
static sx_status merge_shape(sx_nn_layer *l, bool concat, int n, sx_nn_layer *const *in)
{
    int last = in[0]->rank - 1;
    if (concat && last < 0)
        return sx_error(SX_E_RANK, "%s: inputs of rank 0 (nothing to concatenate along)", l->name);
    for (int i = 1; i < n; i++) {
        bool ok = in[i]->rank == in[0]->rank;
        for (int d = 0; ok && d < in[0]->rank; d++)
            ok = in[i]->shape[d] == in[0]->shape[d] || (concat && d == last);
        if (!ok) {
            char a[96], b[96];
            return sx_error(SX_E_SHAPE, "%s: inputs of shapes %s and %s", l->name,
                            sx_shape_str(in[0]->rank, in[0]->shape, a, sizeof a),
                            sx_shape_str(in[i]->rank, in[i]->shape, b, sizeof b));
        }
        if (concat) {
            if (l->shape[last] > INT64_MAX / 8 - in[i]->shape[last])
                return sx_error(SX_E_SHAPE, "%s: last axes of %lld + %lld: too many elements",
                                l->name, (long long)l->shape[last], (long long)in[i]->shape[last]);
            l->shape[last] += in[i]->shape[last];
        }
    }
    return SX_OK;
}

static sx_nn_layer *merge(sx_nn_net *net, const char *who, nn_kind kind, int n,
                          sx_nn_layer *const *in)
{
    if (n < 2) {
        if (net != NULL)
            nn_layer_fail(net, sx_error(SX_E_ARG, "%s: %d inputs (want >= 2)", who, n));
        return NULL;
    }
    sx_nn_layer *l = nn_layer_begin(net, who, kind, n, in);
    if (l == NULL)
        return NULL;
    return nn_layer_finish(net, who, l, merge_shape(l, kind == L_CONCAT, n, in));
}

sx_nn_layer *sx_nn_add(sx_nn_net *net, int n, sx_nn_layer *const *in)
{
    return merge(net, "sx_nn_add", L_ADD, n, in);
}

sx_nn_layer *sx_nn_mul(sx_nn_net *net, int n, sx_nn_layer *const *in)
{
    return merge(net, "sx_nn_mul", L_MUL, n, in);
}

sx_nn_layer *sx_nn_max(sx_nn_net *net, int n, sx_nn_layer *const *in)
{
    return merge(net, "sx_nn_max", L_MAX, n, in);
}

sx_nn_layer *sx_nn_average(sx_nn_net *net, int n, sx_nn_layer *const *in)
{
    return merge(net, "sx_nn_average", L_AVERAGE, n, in);
}

sx_nn_layer *sx_nn_concatenate(sx_nn_net *net, int n, sx_nn_layer *const *in)
{
    return merge(net, "sx_nn_concatenate", L_CONCAT, n, in);
}
