/* The attention layer's fused op through ONNX: exported as its composition (MatMul, the causal
 * mask as a constant, Softmax, ReduceLogSumExp, Concat), imported back: the same predictions,
 * causal or not. */
#include "testutil.h"

#include <sx_onnx.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static sx_tensor *predict(sx_nn_model *m, const sx_tensor *x, int64_t classes)
{
    sx_tensor *y = tu_zeros(SX_F32, 2, (int64_t[]){x->shape[0], classes});
    cr_assert_eq(sx_nn_model_predict(m, x, y), SX_OK, "%s", sx_last_error());
    return y;
}

Test(onnx_attention, fused_attention_exports_as_its_composition)
{
    for (int causal = 0; causal < 2; causal++) {
        sx_nn_net *net = NULL;
        cr_assert_eq(sx_nn_net_new("att", SX_F32, 2, &net), SX_OK);
        sx_nn_layer *l = sx_nn_input(net, 2, (int64_t[]){9, 8});
        sx_nn_attention_params p = sx_nn_attention_params_default(2);
        p.causal = causal != 0;
        p.fused_qkv = true;
        l = sx_nn_attention(net, l, &p);
        l = sx_nn_fully_connected(net, l, 3, SX_ACT_SOFTMAX);
        cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
        sx_nn_model *ref = NULL, *imp = NULL;
        cr_assert_eq(sx_nn_compile_infer(net, 4, &ref), SX_OK, "%s", sx_last_error());
        char path[128];
        snprintf(path, sizeof path, "/tmp/strix_onnx_attention_%d.onnx", (int)getpid());
        cr_assert_eq(sx_onnx_export(ref, path), SX_OK, "%s", sx_last_error());
        sx_onnx_import_params ip = sx_onnx_import_params_default();
        ip.batch = 4;
        cr_assert_eq(sx_onnx_import(path, &ip, &imp), SX_OK, "%s", sx_last_error());
        sx_rng rng;
        sx_rng_seed(&rng, 3);
        sx_tensor *x = tu_rand(&rng, SX_F32, 3, (int64_t[]){4, 9, 8}, -1, 1);
        sx_tensor *a = predict(ref, x, 3), *b = predict(imp, x, 3);
        cr_assert(tu_close(b, a, 1e-5, 1e-6), "causal %d", causal);
        sx_tensor_free(x);
        sx_tensor_free(a);
        sx_tensor_free(b);
        sx_nn_model_free(imp);
        sx_nn_model_free(ref);
        sx_nn_net_free(net);
        remove(path);
    }
}
