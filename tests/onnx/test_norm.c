/* test_norm.c: LayerNorm, GroupNorm and InstanceNorm layers through ONNX: a network
 * with each of them exported (LayerNormalization at opset 17; InstanceNormalization, directly
 * for NHWC instance norm and over a (n, groups, rest) view for group norm) and imported back
 * predicts what the network does, at the compiled batch and a smaller one, and the file passes
 * onnx's checker. Softmax and log-softmax layers over axes other than the last ride along. */
#include "testutil.h"

#include <sx_onnx.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"

/* conv (so values are NHWC), instance norm without and with affine, softmax over h and
 * log-softmax over w, group norm (3 groups of 2;
 * after the instance norms, whose per-channel affine it would otherwise undo), layer norm over
 * (h, w, c), then over the last axis without affine, and a softmax head */
static sx_nn_net *norm_net(void)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("norms", SX_F32, 5, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){6, 5, 2});
    sx_nn_conv2d_params cp = sx_nn_conv2d_params_default(6, 3, 3);
    cp.conv.padding = SX_PAD_SAME;
    x = sx_nn_conv2d(net, x, &cp);
    sx_nn_instance_norm_params ip2 = sx_nn_instance_norm_params_default();
    x = sx_nn_instance_norm(net, x, &ip2);
    x = sx_nn_log_softmax(net, sx_nn_softmax(net, x, 0), -2); /* over h, then over w */
    sx_nn_instance_norm_params ip = sx_nn_instance_norm_params_default();
    ip.affine = true;
    x = sx_nn_instance_norm(net, x, &ip);
    sx_nn_group_norm_params gp = sx_nn_group_norm_params_default();
    gp.groups = 3;
    x = sx_nn_group_norm(net, x, &gp);
    sx_nn_layer_norm_params lp = sx_nn_layer_norm_params_default();
    lp.axes = 3;
    x = sx_nn_layer_norm(net, x, &lp);
    x = sx_nn_fully_connected(net, x, 7, SX_ACT_TANH);
    sx_nn_layer_norm_params lp1 = sx_nn_layer_norm_params_default();
    lp1.affine = false;
    x = sx_nn_layer_norm(net, x, &lp1);
    x = sx_nn_linear(net, x, 4, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    /* parameters away from the defaults, so a swapped gamma and beta would show */
    sx_rng r;
    sx_rng_seed(&r, 9);
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            sx_tensor *v = net->layers[i]->params[k].value;
            for (int64_t e = 0; e < v->size; e++)
                sx_tensor_set(v, e, sx_tensor_get(v, e) + 0.5 * sx_rng_uniform(&r) - 0.2);
        }
    return net;
}

static sx_tensor *predict(sx_nn_model *m, const sx_tensor *x)
{
    sx_tensor *y = tu_zeros(SX_F32, 2, (int64_t[]){x->shape[0], 4});
    cr_assert_eq(sx_nn_model_predict(m, x, y), SX_OK, "%s", sx_last_error());
    return y;
}

Test(onnx_norm, export_import_round_trip_same_outputs)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/strix_test_onnx_norm_%ld.onnx", (long)getpid());
    sx_nn_net *net = norm_net();
    sx_nn_model *ref = NULL, *imp = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 3, &ref), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_onnx_export(ref, path), SX_OK, "%s", sx_last_error());
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.batch = 3;
    cr_assert_eq(sx_onnx_import(path, &p, &imp), SX_OK, "%s", sx_last_error());
    sx_rng rng;
    sx_rng_seed(&rng, 4);
    for (int64_t n = 3; n >= 1; n -= 2) {
        sx_tensor *x = tu_rand(&rng, SX_F32, 4, (int64_t[]){n, 6, 5, 2}, -1, 2);
        sx_tensor *a = predict(ref, x), *b = predict(imp, x);
        cr_assert(tu_close(b, a, 1e-5, 1e-6), "batch %lld: %.9g vs %.9g", (long long)n,
                  sx_tensor_get(b, 0), sx_tensor_get(a, 0));
        sx_tensor_free(x);
        sx_tensor_free(a);
        sx_tensor_free(b);
    }
    if (system("/usr/bin/python3 -c 'import onnx' > /dev/null 2>&1") == 0) {
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c 'import onnx, sys; m = onnx.load(sys.argv[1]); "
                 "onnx.checker.check_model(m, full_check=True); "
                 "ops = set(n.op_type for n in m.graph.node); "
                 "sys.exit(0 if {\"LayerNormalization\", \"InstanceNormalization\"} <= ops and "
                 "m.opset_import[0].version == 17 else 1)' %s",
                 path);
        cr_assert_eq(system(cmd), 0, "onnx.checker rejected %s (or an op is missing)", path);
    }
    sx_nn_model_free(imp);
    sx_nn_model_free(ref);
    sx_nn_net_free(net);
    remove(path);
}
