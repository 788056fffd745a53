/* test_predict_split.c: sx_nn_model_predict cutting a batch into sub-batches that threads run
 * side by side (nn/model.c, predict_split): the same predictions as whole batches, the rows
 * left over, weights changed between calls, the automatic choice, errors. */
#include "nn_impl.h"
#include "testutil.h"

#include <criterion/criterion.h>
#include <math.h>

/* A small residual CNN on 12x12x3 images: conv, batch norm, relu, a residual add, stride-2
 * conv, global average pool, dense, softmax. */
static sx_nn_net *small_cnn(sx_dtype dt, int64_t h)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("split", dt, 5, &net), SX_OK, "%s", sx_last_error());
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){h, h, 3});
    sx_nn_conv2d_params c = sx_nn_conv2d_params_default(8, 3, 3);
    c.conv.padding = SX_PAD_SAME;
    x = sx_nn_conv2d(net, x, &c);
    x = sx_nn_batch_norm(net, x, NULL);
    sx_nn_layer *a = sx_nn_activation(net, x, SX_ACT_RELU);
    c.act = SX_ACT_RELU;
    sx_nn_layer *b = sx_nn_conv2d(net, a, &c);
    x = sx_nn_add(net, 2, (sx_nn_layer *const[]){a, b});
    c.conv.stride_h = c.conv.stride_w = 2;
    c.filters = 16;
    x = sx_nn_conv2d(net, x, &c);
    x = sx_nn_global_avg_pool(net, x);
    x = sx_nn_linear(net, x, 5, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

static sx_tensor *predict_with(sx_nn_net *net, const sx_tensor *x, int64_t batch, int64_t sub,
                               int64_t *used)
{
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, batch, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_set_sub_batch(m, sub), SX_OK);
    int64_t os[2] = {x->shape[0], 5};
    sx_tensor *out = tu_zeros(x->dtype, 2, os);
    cr_assert_eq(sx_nn_model_predict(m, x, out), SX_OK, "%s", sx_last_error());
    if (used != NULL)
        *used = sx_nn_model_sub_batch(m);
    sx_nn_model_free(m);
    return out;
}

/* the largest |a - b| over the elements */
static double max_diff(const sx_tensor *a, const sx_tensor *b)
{
    double d = 0;
    for (int64_t i = 0; i < a->size; i++)
        d = fmax(d, fabs(sx_tensor_get(a, i) - sx_tensor_get(b, i)));
    return d;
}

Test(nn_predict_split, sub_batches_predict_as_whole_batches)
{
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = d ? SX_F64 : SX_F32;
        sx_nn_net *net = small_cnn(dt, 12);
        sx_rng r;
        sx_rng_seed(&r, 11);
        int64_t xs[4] = {70, 12, 12, 3};
        sx_tensor *x = tu_rand(&r, dt, 4, xs, 0, 255);
        cr_assert_eq(sx_threads_set(2), SX_OK);
        int64_t used = -1;
        sx_tensor *whole = predict_with(net, x, 70, 70, &used);
        cr_assert_eq(used, 0, "rows >= the batch: whole batches (got %lld)", (long long)used);
        /* 16 rows: 4 sub-batches side by side, then 6 rows left over */
        const int64_t subs[3] = {16, 8, 35};
        for (int i = 0; i < 3; i++)
            for (int t = 1; t <= 2; t++) {
                cr_assert_eq(sx_threads_set(t), SX_OK);
                sx_tensor *cut = predict_with(net, x, 70, subs[i], &used);
                cr_assert_eq(used, subs[i]);
                const double tol = dt == SX_F32 ? 1e-6 : 1e-14;
                cr_assert_leq(max_diff(cut, whole), tol, "%s sub %lld, %d threads: %g",
                              sx_dtype_name(dt), (long long)subs[i], t, max_diff(cut, whole));
                sx_tensor_free(cut);
            }
        cr_assert_eq(sx_threads_set(0), SX_OK);
        sx_tensor_free(whole);
        sx_tensor_free(x);
        sx_nn_net_free(net);
    }
}

Test(nn_predict_split, sub_batches_read_the_weights_of_each_call)
{
    sx_nn_net *net = small_cnn(SX_F64, 12);
    sx_rng r;
    sx_rng_seed(&r, 12);
    int64_t xs[4] = {32, 12, 12, 3};
    sx_tensor *x = tu_rand(&r, SX_F64, 4, xs, 0, 255);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 32, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_set_sub_batch(m, 8), SX_OK);
    int64_t os[2] = {32, 5};
    sx_tensor *a = tu_zeros(SX_F64, 2, os), *b = tu_zeros(SX_F64, 2, os);
    cr_assert_eq(sx_nn_model_predict(m, x, a), SX_OK, "%s", sx_last_error());
    /* change every weight in place: the sub-batch graphs must see it */
    for (int i = 0; i < net->n_layers; i++)
        for (int k = 0; k < net->layers[i]->n_params; k++) {
            sx_tensor *w = net->layers[i]->params[k].value;
            for (int64_t j = 0; j < w->size; j++)
                sx_tensor_set(w, j, sx_tensor_get(w, j) * 1.5 + 0.01);
        }
    cr_assert_eq(sx_nn_model_predict(m, x, b), SX_OK, "%s", sx_last_error());
    sx_tensor *fresh = predict_with(net, x, 32, 32, NULL);
    /* another number of rows on the same model: new copies, the same predictions */
    sx_tensor *c = tu_zeros(SX_F64, 2, os);
    cr_assert_eq(sx_nn_model_set_sub_batch(m, 4), SX_OK);
    cr_assert_eq(sx_nn_model_predict(m, x, c), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_sub_batch(m), 4);
    cr_assert_leq(max_diff(c, fresh), 1e-12, "%g", max_diff(c, fresh));
    sx_tensor_free(c);
    cr_assert_gt(max_diff(a, b), 1e-6, "the new weights changed nothing");
    cr_assert_leq(max_diff(b, fresh), 1e-12, "%g", max_diff(b, fresh));
    sx_tensor_free(fresh);
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_tensor_free(x);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
}

Test(nn_predict_split, automatic_choice_cuts_small_images_only)
{
    sx_nn_net *small = small_cnn(SX_F32, 12), *large = small_cnn(SX_F32, 224);
    sx_nn_model *ms = NULL, *ml = NULL;
    cr_assert_eq(sx_nn_compile_infer(small, 128, &ms), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_compile_infer(large, 16, &ml), SX_OK, "%s", sx_last_error());
    int64_t s = sx_nn_model_sub_batch(ms);
    cr_assert(s >= 4 && s <= 32 && (s & (s - 1)) == 0, "12x12 images: %lld rows", (long long)s);
    cr_assert_eq(sx_nn_model_sub_batch(ml), 0, "224x224 images are not cut");
    cr_assert_eq(sx_nn_model_set_sub_batch(ms, 500), SX_OK);
    cr_assert_eq(sx_nn_model_sub_batch(ms), 0);
    cr_assert_eq(sx_nn_model_set_sub_batch(ms, -1), SX_E_ARG);
    cr_assert_eq(sx_nn_model_set_sub_batch(NULL, 4), SX_E_ARG);
    cr_assert_eq(sx_nn_model_sub_batch(NULL), 0);
    sx_nn_model_free(ms);
    sx_nn_model_free(ml);
    sx_nn_net_free(small);
    sx_nn_net_free(large);
}
