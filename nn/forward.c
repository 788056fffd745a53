/* forward.c: a network's forward pass as graph nodes: each layer's own forward function (its
 * kind's nn_layer_ops), called in layer order; parameters become graph parameters that borrow
 * the network's tensors, so every graph built from one network shares its weights. */
#include "nn_impl.h"

#include <string.h>

static int layer_index(const sx_nn_net *net, const sx_nn_layer *l)
{
    for (int i = 0; i < net->n_layers; i++)
        if (net->layers[i] == l)
            return i;
    return -1;
}

sx_status nn_forward(sx_nn_net *net, nn_build *b, sx_cg_node *x, sx_cg_node **out,
                     sx_cg_node **logits)
{
    if (nn_input_layer(net) == NULL)
        return sx_error(SX_E_STATE, "network %s has no input layer", net->name);
    SX_TRY(nn_prep_check("nn_forward", net));
    if (x == NULL)
        return sx_cg_graph_status(b->g) != SX_OK ? sx_cg_graph_status(b->g) : SX_E_NOMEM;
    int n = net->n_layers;
    /* a second trace in the same build (gradient accumulation's micro-batches) shares the
     * parameter nodes of the first */
    if (b->param_nodes == NULL)
        b->param_nodes = sx_calloc((size_t)n * NN_MAX_PARAMS, sizeof *b->param_nodes);
    sx_cg_node **vals = sx_calloc((size_t)n, sizeof *vals);
    sx_cg_node **pres = sx_calloc((size_t)n, sizeof *pres); /* each layer's pre-softmax value */
    if (b->param_nodes == NULL || vals == NULL || pres == NULL) {
        sx_free(vals);
        sx_free(pres);
        return SX_E_NOMEM;
    }
    sx_status s = SX_OK;
    for (int i = 0; i < n && s == SX_OK; i++) {
        sx_nn_layer *l = net->layers[i];
        /* an input layer reads x, or its part of x when the network has several */
        sx_cg_node *in[NN_MAX_IN] = {x};
        if (l->n_in == 0) { /* raw data -> the values the layers read (ids as they are) */
            in[0] = nn_input_node(b, net, l, x);
            if (!nn_input_is_ids(l))
                in[0] = nn_prep_input(b, net, in[0]);
        }
        for (int k = 0; k < l->n_in; k++) {
            int j = layer_index(net, l->in[k]);
            if (j < 0 || j >= i) {
                s = sx_error(SX_E_ARG, "%s: input %d is not an earlier layer of %s", l->name, k,
                             net->name);
                break;
            }
            in[k] = vals[j];
        }
        if (s != SX_OK)
            break;
        s = sx_cg_scope_set(b->g, l->name); /* the profile's time per layer */
        if (s != SX_OK)
            break;
        vals[i] = l->ops->forward(b, l, in, &pres[i]);
        if (vals[i] == NULL) {
            s = sx_cg_graph_status(b->g);
            if (s == SX_OK)
                s = b->err;
            if (s == SX_OK)
                s = sx_error(SX_E_STATE, "%s: the layer could not be built", l->name);
        }
    }
    if (s == SX_OK)
        s = sx_cg_scope_set(b->g, NULL);
    if (s == SX_OK && (*out = nn_output_node(b, net, vals, pres, logits)) == NULL)
        s = sx_cg_graph_status(b->g) != SX_OK ? sx_cg_graph_status(b->g) : SX_E_NOMEM;
    if (s == SX_OK && net->prep.target_n > 0 && *logits != *out)
        s = sx_error(SX_E_STATE, "network %s ends in a softmax: it cannot scale targets",
                     net->name);
    /* inference answers in the targets' own units; training compares standardised targets */
    if (s == SX_OK && b->mode == NN_INFER && net->prep.target_n > 0 &&
        (*out = *logits = nn_prep_output(b->g, net, *out)) == NULL)
        s = sx_cg_graph_status(b->g) != SX_OK ? sx_cg_graph_status(b->g) : SX_E_NOMEM;
    sx_free(vals);
    sx_free(pres);
    return s;
}
