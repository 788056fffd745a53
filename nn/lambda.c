/* lambda.c: a layer whose forward pass is a user function building graph nodes. Its output
 * shape is found by building the function once on a throwaway graph; a saved model holds the
 * nodes it built, so loading needs no function. */
#include "nn_impl.h"

#include <stdio.h>
#include <string.h>

typedef struct lambda_attr {
    sx_nn_lambda_fn fn;
    void *ctx;
} lambda_attr;

static sx_cg_node *lambda_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                                  sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    const lambda_attr *a = l->attr;
    return a->fn(b->g, in[0], a->ctx);
}

const nn_layer_ops nn_lambda_ops = {"lambda", sizeof(lambda_attr), lambda_forward, NULL};

/* The output shape of fn over an input of in's shape (batch 1), into l. */
static sx_status lambda_shape(sx_nn_net *net, sx_nn_layer *l, const sx_nn_layer *in,
                              sx_nn_lambda_fn fn, void *ctx)
{
    sx_cg_graph *g = NULL;
    SX_TRY(sx_cg_graph_new(SX_CG_LAZY, net->dtype, &g));
    sx_status s = SX_OK;
    int64_t xs[SX_MAX_RANK];
    xs[0] = 1;
    memcpy(xs + 1, in->shape, (size_t)in->rank * sizeof *xs);
    sx_cg_node *x = sx_cg_input(g, "x", net->dtype, in->rank + 1, xs);
    sx_cg_node *y = x ? fn(g, x, ctx) : NULL;
    if (y == NULL) {
        s = sx_cg_graph_status(g) != SX_OK
                ? sx_cg_graph_status(g)
                : sx_error(SX_E_ARG, "%s: the function returned NULL", l->name);
    } else if (sx_cg_node_rank(y) < 1 || sx_cg_node_shape(y)[0] != 1) {
        s = sx_error(SX_E_SHAPE, "%s: the function must keep the batch axis first", l->name);
    } else {
        l->rank = sx_cg_node_rank(y) - 1;
        memcpy(l->shape, sx_cg_node_shape(y) + 1, (size_t)l->rank * sizeof *l->shape);
    }
    sx_cg_graph_free(g);
    return s;
}

sx_nn_layer *sx_nn_lambda(sx_nn_net *net, sx_nn_layer *in, sx_nn_lambda_fn fn, void *ctx,
                          const char *name)
{
    const char *who = "sx_nn_lambda";
    sx_nn_layer *l = nn_layer_begin(net, who, L_LAMBDA, 1, &in);
    if (l == NULL)
        return NULL;
    *(lambda_attr *)l->attr = (lambda_attr){fn, ctx};
    if (name != NULL)
        snprintf(l->name, sizeof l->name, "%s", name);
    sx_status s =
        fn ? lambda_shape(net, l, in, fn, ctx) : sx_error(SX_E_ARG, "%s: no function", l->name);
    return nn_layer_finish(net, who, l, s);
}
