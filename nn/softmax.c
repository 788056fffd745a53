/* softmax.c: softmax and log-softmax layers over any axis of the example. A softmax
 * over the last axis ending a network is folded into the cross-entropy loss like a softmax
 * activation; over another axis it is an ordinary layer. */
#include "nn_impl.h"

#include <stdio.h>

typedef struct softmax_attr {
    int axis; /* of the example (batch axis excluded), normalised to 0..rank-1 */
    bool log;
} softmax_attr;

static sx_cg_node *softmax_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                   sx_cg_node **pre_softmax)
{
    const softmax_attr *a = l->attr;
    if (!a->log && a->axis == l->rank - 1)
        *pre_softmax = in[0];
    return a->log ? sx_cg_log_softmax(b->g, in[0], a->axis + 1)
                  : sx_cg_softmax(b->g, in[0], a->axis + 1);
}

static void softmax_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const softmax_attr *a = l->attr;
    snprintf(buf, size, "%saxis %d", a->log ? "log " : "", a->axis);
}

const nn_layer_ops nn_softmax_ops = {"softmax", sizeof(softmax_attr), softmax_forward,
                                     softmax_describe};

static sx_nn_layer *softmax_layer(sx_nn_net *net, const char *who, sx_nn_layer *in, int axis,
                                  bool log)
{
    sx_nn_layer *l = nn_layer_begin(net, who, L_SOFTMAX, 1, &in);
    if (l == NULL)
        return NULL;
    softmax_attr *a = l->attr;
    int r = in->rank;
    sx_status s = SX_OK;
    if (axis < -r || axis >= r) {
        char sb[128];
        s = sx_error(SX_E_AXIS, "%s: axis %d of an input %s (want -%d to %d)", l->name, axis,
                     sx_shape_str(r, in->shape, sb, sizeof sb), r, r - 1);
    }
    a->axis = axis < 0 ? axis + r : axis;
    a->log = log;
    return nn_layer_finish(net, who, l, s);
}

sx_nn_layer *sx_nn_softmax(sx_nn_net *net, sx_nn_layer *in, int axis)
{
    return softmax_layer(net, "sx_nn_softmax", in, axis, false);
}

sx_nn_layer *sx_nn_log_softmax(sx_nn_net *net, sx_nn_layer *in, int axis)
{
    return softmax_layer(net, "sx_nn_log_softmax", in, axis, true);
}

int nn_softmax_axis(const sx_nn_layer *l)
{
    return ((const softmax_attr *)l->attr)->axis;
}
