/* fuzz_nets.h: the small network behind the model/checkpoint corpus (make_model_corpus.c) and
 * the checkpoints fuzz_model.c loads into (same layer and parameter names, so a checkpoint of
 * the corpus matches it): 6x6x1 images, conv 3x3x2 + relu, batch norm, max pool, dropout, a
 * fully connected tanh layer of 4, a softmax layer of 3 classes. About 120 weights. */
#ifndef FUZZ_NETS_H
#define FUZZ_NETS_H

#include <sx_nn.h>

static inline sx_status fuzz_net(sx_dtype dt, uint64_t seed, sx_nn_net **out)
{
    SX_TRY(sx_nn_net_new("fuzz", dt, seed, out));
    sx_nn_net *net = *out;
    sx_nn_layer *x = sx_nn_input(net, 3, (const int64_t[]){6, 6, 1});
    sx_nn_conv2d_params conv = sx_nn_conv2d_params_default(2, 3, 3);
    conv.conv.padding = SX_PAD_SAME;
    conv.act = SX_ACT_RELU;
    x = sx_nn_conv2d(net, x, &conv);
    sx_nn_batch_norm_params bn = sx_nn_batch_norm_params_default();
    bn.momentum = 0.9;
    x = sx_nn_batch_norm(net, x, &bn);
    sx_nn_pool2d_params pool = sx_nn_pool2d_params_default(2, 2);
    x = sx_nn_max_pool2d(net, x, &pool);
    x = sx_nn_dropout(net, x, 0.25);
    x = sx_nn_fully_connected(net, x, 4, SX_ACT_TANH);
    sx_nn_linear(net, x, 3, SX_ACT_SOFTMAX);
    sx_status s = sx_nn_net_status(net);
    if (s != SX_OK) {
        sx_nn_net_free(net);
        *out = NULL;
    }
    return s;
}

#endif
