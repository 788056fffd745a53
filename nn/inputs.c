/* inputs.c: networks with several inputs. Every input layer takes its part of one flat batch:
 * x (batch, total) holds the inputs' elements one after another, in the order the input layers
 * were added, and input layer k reads reshape(x[:, off_k : off_k + size_k], (batch, shape_k)).
 * A network with one input keeps x in that input's own shape (nothing is sliced). */
#include "nn_impl.h"

#include <string.h>

int nn_input_count(const sx_nn_net *net)
{
    int n = 0;
    for (int i = 0; i < net->n_layers; i++)
        n += net->layers[i]->kind == L_INPUT;
    return n;
}

int nn_input_shape(const sx_nn_net *net, int64_t *shape)
{
    const sx_nn_layer *in = nn_input_layer(net);
    if (in == NULL)
        return 0;
    if (nn_input_count(net) == 1) {
        memcpy(shape, in->shape, (size_t)in->rank * sizeof *shape);
        return in->rank;
    }
    shape[0] = 0;
    for (int i = 0; i < net->n_layers; i++)
        if (net->layers[i]->kind == L_INPUT)
            shape[0] += sx_shape_size(net->layers[i]->rank, net->layers[i]->shape);
    return 1;
}

sx_cg_node *nn_input_node(nn_build *b, const sx_nn_net *net, const sx_nn_layer *l, sx_cg_node *x)
{
    if (nn_input_count(net) == 1)
        return x;
    int64_t off = 0;
    for (int i = 0; i < net->n_layers && net->layers[i] != l; i++)
        if (net->layers[i]->kind == L_INPUT)
            off += sx_shape_size(net->layers[i]->rank, net->layers[i]->shape);
    int64_t size = sx_shape_size(l->rank, l->shape), shape[SX_MAX_RANK];
    sx_slice s[2] = {SX_SLICE_ALL, {off, off + size, 1}};
    shape[0] = -1;
    memcpy(shape + 1, l->shape, (size_t)l->rank * sizeof *shape);
    return sx_cg_reshape(b->g, sx_cg_slice(b->g, x, s), l->rank + 1, shape);
}

sx_nn_layer *sx_nn_input_add(sx_nn_net *net, int rank, const int64_t *shape)
{
    const char *who = "sx_nn_input_add";
    if (net != NULL && nn_input_layer(net) == NULL)
        return nn_layer_fail(
            net, sx_error(SX_E_STATE, "%s: the network has no first input (sx_nn_input)", who));
    if (net != NULL)
        net->adding_input = true;
    sx_nn_layer *l = nn_layer_begin(net, who, L_INPUT, 0, NULL);
    if (net != NULL)
        net->adding_input = false;
    if (l == NULL)
        return NULL;
    sx_status s = nn_user_shape(who, l->name, rank, shape);
    if (s == SX_OK) {
        l->rank = rank;
        memcpy(l->shape, shape, (size_t)rank * sizeof *shape);
    }
    return nn_layer_finish(net, who, l, s);
}
