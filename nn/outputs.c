/* outputs.c: networks with several named outputs. Layers marked with sx_nn_output are
 * the outputs; with two or more, the network outputs one flat row per example, (batch, total):
 * each output's elements one after another in the order they were marked, as several inputs
 * take x (inputs.c). The targets y have the same layout, and each output is a part of the loss
 * (loss.c) read back in its own shape. Without a marked output the last layer is the output. */
#include "nn_impl.h"

#include <stdint.h>
#include <string.h>

bool nn_name_ok(const char *s, size_t n)
{
    if (s == NULL || n < 1 || n > 31)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

sx_nn_layer *sx_nn_output(sx_nn_net *net, sx_nn_layer *l, const char *name)
{
    const char *who = "sx_nn_output";
    if (net == NULL)
        return NULL;
    if (l == NULL)
        return nn_layer_fail(net, net->status != SX_OK
                                      ? net->status
                                      : sx_error(SX_E_ARG, "%s: the layer is NULL", who));
    if (net->n_models > 0)
        return nn_layer_fail(net, sx_error(SX_E_STATE,
                                           "%s: network %s has compiled models alive: free them "
                                           "before marking outputs",
                                           who, net->name));
    bool mine = false;
    for (int i = 0; i < net->n_layers && !mine; i++)
        mine = net->layers[i] == l;
    if (!mine)
        return nn_layer_fail(net, sx_error(SX_E_ARG, "%s: %s is not a layer of network %s", who,
                                           l->name, net->name));
    if (!nn_name_ok(name, name != NULL ? strlen(name) : 0))
        return nn_layer_fail(net, sx_error(SX_E_ARG,
                                           "%s: output name '%s' (want 1 to 31 letters, digits "
                                           "or '_')",
                                           who, name ? name : "(null)"));
    if (net->n_outputs == SX_NN_MAX_HEADS)
        return nn_layer_fail(
            net, sx_error(SX_E_ARG, "%s: at most %d outputs (%s)", who, SX_NN_MAX_HEADS, name));
    for (int k = 0; k < net->n_outputs; k++)
        if (net->outputs[k] == l || strcmp(net->output_names[k], name) == 0)
            return nn_layer_fail(net, sx_error(SX_E_ARG,
                                               "%s: output %s (layer %s) repeats output %s "
                                               "(layer %s)",
                                               who, name, l->name, net->output_names[k],
                                               net->outputs[k]->name));
    net->outputs[net->n_outputs] = l;
    snprintf(net->output_names[net->n_outputs], sizeof net->output_names[0], "%s", name);
    net->n_outputs++;
    if (net->n_outputs >= 2) { /* the flat (total) the network now outputs */
        int64_t total = 0;
        for (int k = 0; k < net->n_outputs; k++)
            total += sx_shape_size(net->outputs[k]->rank, net->outputs[k]->shape);
        memset(&net->flat_out, 0, sizeof net->flat_out);
        snprintf(net->flat_out.name, sizeof net->flat_out.name, "outputs");
        net->flat_out.rank = 1;
        net->flat_out.shape[0] = total;
        net->flat_out.index = -1;
    }
    return l;
}

sx_nn_layer *nn_output_layer(const sx_nn_net *net)
{
    if (net->n_outputs == 1)
        return net->outputs[0];
    if (net->n_outputs >= 2) /* the network's own pseudo-layer, read only by the callers */
        return (sx_nn_layer *)(uintptr_t)&net->flat_out;
    return net->n_layers > 0 ? net->layers[net->n_layers - 1] : NULL;
}

int nn_output_count(const sx_nn_net *net)
{
    return net->n_outputs > 0 ? net->n_outputs : net->n_layers > 0;
}

sx_nn_layer *nn_output_at(const sx_nn_net *net, int k)
{
    return net->n_outputs > 0 ? net->outputs[k] : nn_output_layer(net);
}

/* (batch, total) from the values of the outputs, each flattened to (batch, size) */
static sx_cg_node *flat_concat(sx_cg_graph *g, const sx_nn_net *net, sx_cg_node *const *v)
{
    sx_cg_node *parts[SX_NN_MAX_HEADS];
    for (int k = 0; k < net->n_outputs; k++) {
        const sx_nn_layer *l = net->outputs[k];
        int64_t shape[2] = {-1, sx_shape_size(l->rank, l->shape)};
        if ((parts[k] = sx_cg_reshape(g, v[k], 2, shape)) == NULL)
            return NULL;
    }
    return sx_cg_concat(g, net->n_outputs, parts, 1);
}

sx_cg_node *nn_output_node(nn_build *b, const sx_nn_net *net, sx_cg_node *const *vals,
                           sx_cg_node *const *pres, sx_cg_node **logits)
{
    int n = nn_output_count(net);
    sx_cg_node *v[SX_NN_MAX_HEADS], *z[SX_NN_MAX_HEADS];
    for (int k = 0; k < n; k++) {
        int i = nn_output_at(net, k)->index;
        v[k] = vals[i];
        z[k] = pres[i] != NULL ? pres[i] : vals[i];
        b->out_softmax[k] = pres[i] != NULL;
    }
    if (net->n_outputs < 2) {
        *logits = z[0];
        return v[0];
    }
    sx_cg_node *out = flat_concat(b->g, net, v);
    bool any = false;
    for (int k = 0; k < n; k++)
        any = any || b->out_softmax[k];
    /* the logits are the outputs themselves unless one ends in a softmax */
    *logits = any && out != NULL ? flat_concat(b->g, net, z) : out;
    return *logits != NULL ? out : NULL;
}
