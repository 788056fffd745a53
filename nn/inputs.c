/* inputs.c: input layers (sx_nn_input, sx_nn_input_add, sx_nn_input_ids: an input of integer
 * ids, which the preprocessing leaves alone) and networks with several inputs. Every input layer
 * takes its part of one flat batch:
 * x (batch, total) holds the inputs' elements one after another, in the order the input layers
 * were added, and input layer k reads reshape(x[:, off_k : off_k + size_k], (batch, shape_k)).
 * A network with one input keeps x in that input's own shape (nothing is sliced). */
#include "nn_impl.h"

#include <stdio.h>
#include <string.h>

static sx_cg_node *input_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                 sx_cg_node **pre_softmax)
{
    (void)b, (void)l, (void)pre_softmax;
    return in[0]; /* the graph's input x, given by nn_forward */
}

static void input_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "%s", nn_input_is_ids(l) ? "ids" : "");
}

const nn_layer_ops nn_input_ops = {"input", sizeof(nn_input_attr), input_forward, input_describe};

sx_nn_layer *nn_input_make(const char *who, sx_nn_net *net, int rank, const int64_t *shape,
                           bool ids)
{
    sx_nn_layer *l = nn_layer_begin(net, who, L_INPUT, 0, NULL);
    if (l == NULL)
        return NULL;
    sx_status s = nn_user_shape(who, l->name, rank, shape);
    if (s == SX_OK) {
        l->rank = rank;
        memcpy(l->shape, shape, (size_t)rank * sizeof *shape);
        ((nn_input_attr *)l->attr)->ids = ids;
    }
    return nn_layer_finish(net, who, l, s);
}

sx_nn_layer *sx_nn_input(sx_nn_net *net, int rank, const int64_t *shape)
{
    return nn_input_make("sx_nn_input", net, rank, shape, false);
}

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

/* A further input layer (who: the public function). */
static sx_nn_layer *input_add(const char *who, sx_nn_net *net, int rank, const int64_t *shape,
                              bool ids)
{
    if (net != NULL && nn_input_layer(net) == NULL)
        return nn_layer_fail(
            net, sx_error(SX_E_STATE, "%s: the network has no first input (sx_nn_input)", who));
    if (net != NULL)
        net->adding_input = true;
    sx_nn_layer *l = nn_input_make(who, net, rank, shape, ids);
    if (net != NULL)
        net->adding_input = false;
    return l;
}

sx_nn_layer *sx_nn_input_add(sx_nn_net *net, int rank, const int64_t *shape)
{
    return input_add("sx_nn_input_add", net, rank, shape, false);
}

sx_nn_layer *sx_nn_input_ids(sx_nn_net *net, int rank, const int64_t *shape)
{
    if (net != NULL && nn_input_layer(net) != NULL)
        return input_add("sx_nn_input_ids", net, rank, shape, true);
    return nn_input_make("sx_nn_input_ids", net, rank, shape, true);
}

bool nn_input_is_ids(const sx_nn_layer *l)
{
    return l->kind == L_INPUT && l->attr != NULL && ((const nn_input_attr *)l->attr)->ids;
}

int nn_input_ids_count(const sx_nn_net *net)
{
    int n = 0;
    for (int i = 0; i < net->n_layers; i++)
        n += nn_input_is_ids(net->layers[i]);
    return n;
}
