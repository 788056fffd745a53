/* test_onnx.c: ONNX import and export: a strix network exported and imported back gives the
 * same outputs for any batch, with the layout permutations cancelled; onnx.checker accepts the
 * file; the node tests of libonnx-testdata import and pass one by one; unsupported ops,
 * attributes and malformed files are clear errors. */
#include "testutil.h"

#include <sx_onnx.h>

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#define NODE_TESTS "/usr/include/onnx/backend/test/data/node"

static bool have_node_tests(void)
{
    return access(NODE_TESTS "/test_relu/model.onnx", R_OK) == 0;
}

/* A small CNN with every layer kind the exporter must carry: conv (SAME and strided VALID),
 * batch norm, max and average pooling, activations, dense layers, softmax. */
static sx_nn_net *make_net(bool bn)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("onnx", SX_F32, 11, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){12, 10, 3});
    sx_nn_conv2d_params cp = sx_nn_conv2d_params_default(6, 3, 3);
    cp.conv.padding = SX_PAD_SAME;
    cp.act = SX_ACT_RELU;
    x = sx_nn_conv2d(net, x, &cp);
    if (bn)
        x = sx_nn_batch_norm(net, x, NULL);
    sx_nn_pool2d_params pp = sx_nn_pool2d_params_default(2, 2);
    x = sx_nn_max_pool2d(net, x, &pp);
    cp = sx_nn_conv2d_params_default(8, 3, 3);
    cp.conv.stride_h = 2;
    cp.act = SX_ACT_TANH;
    x = sx_nn_conv2d(net, x, &cp);
    pp = sx_nn_pool2d_params_default(1, 2);
    x = sx_nn_avg_pool2d(net, x, &pp);
    x = sx_nn_activation_ex(net, x, SX_ACT_LEAKY_RELU, 0.2);
    x = sx_nn_fully_connected(net, x, 16, SX_ACT_SIGMOID);
    x = sx_nn_linear(net, x, 5, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

static void tmp_path(char *buf, size_t n, const char *what)
{
    snprintf(buf, n, "/tmp/strix_test_onnx_%ld_%s.onnx", (long)getpid(), what);
}

static sx_tensor *predict(sx_nn_model *m, const sx_tensor *x)
{
    sx_tensor *y = tu_zeros(SX_F32, 2, (int64_t[]){x->shape[0], sx_nn_model_classes(m)});
    cr_assert_eq(sx_nn_model_predict(m, x, y), SX_OK, "%s", sx_last_error());
    return y;
}

static int count_op(sx_cg_graph *g, sx_cg_op op)
{
    int k = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        k += n != NULL && sx_cg_node_op(n) == op;
    }
    return k;
}

Test(onnx_onnx, export_import_round_trip_same_outputs_any_batch)
{
    for (int bn = 0; bn < 2; bn++) {
        sx_nn_net *net = make_net(bn);
        sx_nn_model *ref = NULL, *imp = NULL;
        cr_assert_eq(sx_nn_compile_infer(net, 4, &ref), SX_OK);
        char path[256];
        tmp_path(path, sizeof path, "rt");
        cr_assert_eq(sx_onnx_export(ref, path), SX_OK, "%s", sx_last_error());
        sx_onnx_import_params p = sx_onnx_import_params_default();
        p.batch = 4;
        cr_assert_eq(sx_onnx_import(path, &p, &imp), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_nn_model_classes(imp), 5);
        cr_assert_eq(sx_nn_model_input_rank(imp), 3);
        sx_rng rng;
        sx_rng_seed(&rng, 3);
        for (int64_t n = 4; n >= 1; n -= 3) { /* the compiled batch, then a smaller one */
            sx_tensor *x = tu_rand(&rng, SX_F32, 4, (int64_t[]){n, 12, 10, 3}, -1, 1);
            sx_tensor *a = predict(ref, x), *b = predict(imp, x);
            cr_assert(tu_close(b, a, 1e-5, 1e-6), "bn %d, batch %lld", bn, (long long)n);
            sx_tensor_free(x);
            sx_tensor_free(a);
            sx_tensor_free(b);
        }
        /* the transposes around each conv and pool cancel: none is left in the compiled graph */
        cr_assert_eq(count_op(sx_nn_model_graph(imp), SX_OP_PERMUTE), 0);
        sx_nn_model_free(imp);
        sx_nn_model_free(ref);
        sx_nn_net_free(net);
        remove(path);
    }
}

/* The preprocessing is in the exported graph (an imported model takes raw pixels as the
 * network does) and its description comes back from the metadata: class names, statistics. */
Test(onnx_onnx, export_carries_the_preprocessing)
{
    sx_nn_net *net = make_net(false);
    sx_nn_net_set_input_scale(net, 1.0 / 255);
    double mean[3] = {0.5, 0.4, 0.3}, sd[3] = {0.2, 0.25, 0.3};
    cr_assert_eq(sx_nn_net_set_normalization(net, 3, mean, sd), SX_OK, "%s", sx_last_error());
    const char *names[5] = {"cat", "dog", "a,b", "x\\y", "z"};
    cr_assert_eq(sx_nn_net_set_class_names(net, 5, names), SX_OK);
    sx_nn_model *ref = NULL, *imp = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 2, &ref), SX_OK, "%s", sx_last_error());
    char path[256];
    tmp_path(path, sizeof path, "prep");
    cr_assert_eq(sx_onnx_export(ref, path), SX_OK, "%s", sx_last_error());
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.batch = 2;
    cr_assert_eq(sx_onnx_import(path, &p, &imp), SX_OK, "%s", sx_last_error());
    sx_rng rng;
    sx_rng_seed(&rng, 5);
    sx_tensor *x = tu_rand(&rng, SX_F32, 4, (int64_t[]){2, 12, 10, 3}, 0, 255); /* raw pixels */
    sx_tensor *a = predict(ref, x), *b = predict(imp, x);
    cr_assert(tu_close(b, a, 1e-5, 1e-6), "the export lost the preprocessing");
    sx_nn_preprocess pp = sx_nn_model_preprocess(imp);
    cr_assert(pp.in_graph && pp.n_classes == 5 && pp.norm_size == 3);
    cr_assert_str_eq(sx_nn_model_class_name(imp, 3), names[3]);
    cr_assert_eq(pp.std[1], 0.25);
    cr_assert_eq(pp.input_scale, 1.0 / 255);
    sx_tensor_free(x);
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_nn_model_free(imp);
    sx_nn_model_free(ref);
    sx_nn_net_free(net);
    remove(path);
}

Test(onnx_onnx, export_passes_onnx_checker)
{
    if (system("/usr/bin/python3 -c 'import onnx' > /dev/null 2>&1") != 0)
        cr_skip_test("python3-onnx is not installed");
    sx_nn_net *net = make_net(true);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 1, &m), SX_OK);
    char path[256], cmd[600];
    tmp_path(path, sizeof path, "checker");
    cr_assert_eq(sx_onnx_export(m, path), SX_OK, "%s", sx_last_error());
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c 'import onnx, sys; m = onnx.load(sys.argv[1]); "
             "onnx.checker.check_model(m, full_check=True)' %s",
             path);
    cr_assert_eq(system(cmd), 0, "onnx.checker rejected %s", path);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
    remove(path);
}

Test(onnx_onnx, node_tests_pass_one_by_one)
{
    if (!have_node_tests())
        cr_skip_test("libonnx-testdata is not installed");
    const char *cases[] = {"test_conv_with_strides_and_asymmetric_padding",
                           "test_maxpool_2d_ceil",
                           "test_averagepool_2d_pads_count_include_pad",
                           "test_gemm_all_attributes",
                           "test_batchnorm_example",
                           "test_softmax_axis_0",
                           "test_relu",
                           "test_flatten_axis2"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/%s", NODE_TESTS, cases[i]);
        sx_onnx_conformance_report r;
        cr_assert_eq(sx_onnx_conformance(dir, 1e-4, 1e-6, NULL, &r), SX_OK, "%s: %s", cases[i],
                     sx_last_error());
        cr_assert_eq(r.cases, 1);
        cr_assert_eq(r.passed, 1, "%s", cases[i]);
    }
}

Test(onnx_onnx, unsupported_op_names_node_and_op)
{
    if (!have_node_tests())
        cr_skip_test("libonnx-testdata is not installed");
    sx_onnx_graph *og = (sx_onnx_graph *)1;
    cr_assert_eq(sx_onnx_graph_import(NODE_TESTS "/test_gridsample/model.onnx", NULL, &og),
                 SX_E_UNSUPPORTED);
    cr_assert_null(og);
    cr_assert(strstr(sx_last_error(), "GridSample") != NULL, "%s", sx_last_error());
    cr_assert(strstr(sx_last_error(), "node") != NULL, "%s", sx_last_error());
    /* a supported op with an output strix does not compute: MaxPool's indices */
    cr_assert_eq(sx_onnx_graph_import(NODE_TESTS "/test_maxpool_with_argmax_2d_precomputed_pads/"
                                                 "model.onnx",
                                      NULL, &og),
                 SX_E_UNSUPPORTED);
    cr_assert(strstr(sx_last_error(), "MaxPool") != NULL, "%s", sx_last_error());
}

/* Several outputs: sx_onnx_import names each and a row of the result holds them one after
 * another (Split's two halves of the input make the input's row again); several inputs: a row
 * of the input holds them one after another (Add's x and y); an output without the batch axis
 * needs the graph entry. */
Test(onnx_onnx, several_inputs_and_outputs_in_a_row)
{
    if (!have_node_tests())
        cr_skip_test("libonnx-testdata is not installed");
    const char *path = NODE_TESTS "/test_split_equal_parts_2d/model.onnx";
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.dtype = SX_F64;
    p.batch = 2;
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_onnx_import(path, &p, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_n_outputs(m), 2);
    int rk = 0;
    const int64_t *sh = NULL;
    cr_assert_str_eq(sx_nn_model_output(m, 1, &rk, &sh), "output_2");
    cr_assert(sx_shape_equal(rk, sh, 1, (int64_t[]){3}));
    sx_tensor *x = NULL, *y = NULL;
    cr_assert_eq(sx_onnx_tensor_read(NODE_TESTS "/test_split_equal_parts_2d/test_data_set_0/"
                                                "input_0.pb",
                                     SX_F64, &x, NULL),
                 SX_OK, "%s", sx_last_error());
    cr_assert(sx_shape_equal(x->rank, x->shape, 2, (int64_t[]){2, 6}));
    cr_assert_eq(sx_tensor_new(SX_F64, 2, (int64_t[]){2, 6}, &y), SX_OK);
    cr_assert_eq(sx_nn_model_predict(m, x, y), SX_OK, "%s", sx_last_error());
    for (int64_t i = 0; i < 12; i++)
        cr_assert_eq(sx_tensor_get(y, i), sx_tensor_get(x, i), "element %lld", (long long)i);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_nn_model_free(m);

    /* two inputs (Add's x and y, (3,4,5) each): a row holds x's 20 elements, then y's */
    p.batch = 3;
    cr_assert_eq(sx_onnx_import(NODE_TESTS "/test_add/model.onnx", &p, &m), SX_OK, "%s",
                 sx_last_error());
    cr_assert_eq(sx_nn_model_n_inputs(m), 2);
    /* the file's names and shapes, kept by the model */
    const char *io_names[3] = {sx_onnx_model_input(m, 0, NULL, NULL),
                               sx_onnx_model_input(m, 1, &rk, &sh),
                               sx_onnx_model_output(m, 0, NULL, NULL)};
    cr_assert_str_eq(io_names[0], "x");
    cr_assert_str_eq(io_names[1], "y");
    cr_assert(sx_shape_equal(rk, sh, 2, (int64_t[]){4, 5}));
    cr_assert_str_eq(io_names[2], "sum");
    cr_assert_null(sx_onnx_model_input(m, 2, NULL, NULL));
    cr_assert_null(sx_onnx_model_output(m, 1, NULL, NULL));
    sx_nn_net *net = make_net(false);
    sx_nn_model *native = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 2, &native), SX_OK, "%s", sx_last_error());
    cr_assert_null(sx_onnx_model_output(native, 0, NULL, NULL)); /* not an imported model */
    cr_assert_null(sx_onnx_model_input(NULL, 0, NULL, NULL));
    sx_nn_model_free(native);
    sx_nn_net_free(net);
    cr_assert_not_null(sx_nn_model_input(m, 1, &rk));
    cr_assert(sx_shape_equal(rk, sx_nn_model_input(m, 1, NULL), 2, (int64_t[]){4, 5}));
    sx_tensor *a = NULL, *b = NULL, *want = NULL, *ab = NULL, *sum = NULL;
    const char *files[3] = {"input_0", "input_1", "output_0"};
    sx_tensor **ts[3] = {&a, &b, &want};
    for (int k = 0; k < 3; k++) {
        char f[256];
        snprintf(f, sizeof f, NODE_TESTS "/test_add/test_data_set_0/%s.pb", files[k]);
        cr_assert_eq(sx_onnx_tensor_read(f, SX_F64, ts[k], NULL), SX_OK, "%s", sx_last_error());
    }
    cr_assert_eq(sx_tensor_new(SX_F64, 2, (int64_t[]){3, 40}, &ab), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F64, 2, (int64_t[]){3, 20}, &sum), SX_OK);
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 20; j++) {
            sx_tensor_set(ab, i * 40 + j, sx_tensor_get(a, i * 20 + j));
            sx_tensor_set(ab, i * 40 + 20 + j, sx_tensor_get(b, i * 20 + j));
        }
    cr_assert_eq(sx_nn_model_predict(m, ab, sum), SX_OK, "%s", sx_last_error());
    for (int64_t i = 0; i < 60; i++) { /* f64 sums of the f32 inputs; the file's are f32 */
        cr_assert_eq(sx_tensor_get(sum, i), sx_tensor_get(a, i) + sx_tensor_get(b, i),
                     "element %lld", (long long)i);
        cr_assert(fabs(sx_tensor_get(sum, i) - sx_tensor_get(want, i)) < 1e-6, "element %lld",
                  (long long)i);
    }
    sx_tensor *all[5] = {a, b, want, ab, sum};
    for (int k = 0; k < 5; k++)
        sx_tensor_free(all[k]);
    sx_nn_model_free(m);

    /* an output without the batch axis needs the graph entry */
    m = (sx_nn_model *)1;
    cr_assert_eq(sx_onnx_import(NODE_TESTS "/test_reduce_mean_default_axes_keepdims_example/"
                                           "model.onnx",
                                &p, &m),
                 SX_E_UNSUPPORTED);
    cr_assert_null(m);
    cr_assert(strstr(sx_last_error(), "sx_onnx_graph_import") != NULL, "%s", sx_last_error());
    sx_onnx_graph *og = NULL;
    cr_assert_eq(sx_onnx_graph_import(path, NULL, &og), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_onnx_graph_n_inputs(og), 1);
    cr_assert_eq(sx_onnx_graph_n_outputs(og), 2);
    cr_assert_str_eq(sx_onnx_graph_output_name(og, 1), "output_2");
    cr_assert_null(sx_onnx_graph_output(og, 2));
    sx_onnx_graph_free(og);
}

Test(onnx_onnx, malformed_files_are_clear_errors)
{
    char path[256];
    tmp_path(path, sizeof path, "bad");
    sx_nn_model *m = (sx_nn_model *)1;
    cr_assert_eq(sx_onnx_import("/nonexistent/x.onnx", NULL, &m), SX_E_IO);
    cr_assert_null(m);
    FILE *f = fopen(path, "wb");
    fputs("\xff\xff\xff\xff this is not a protobuf", f);
    fclose(f);
    cr_assert_eq(sx_onnx_import(path, NULL, &m), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), path) != NULL, "%s", sx_last_error());
    /* a real model cut short */
    sx_nn_net *net = make_net(false);
    sx_nn_model *ref = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 1, &ref), SX_OK);
    cr_assert_eq(sx_onnx_export(ref, path), SX_OK);
    cr_assert_eq(truncate(path, 300), 0);
    sx_status s = sx_onnx_import(path, NULL, &m);
    cr_assert(s == SX_E_FORMAT, "status %d: %s", (int)s, sx_last_error());
    cr_assert_null(m);
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.batch = 0;
    cr_assert_eq(sx_onnx_import(path, &p, &m), SX_E_ARG);
    cr_assert_eq(sx_onnx_import(NULL, NULL, &m), SX_E_ARG);
    cr_assert_eq(sx_onnx_export(NULL, path), SX_E_ARG);
    sx_onnx_graph *og = NULL;
    cr_assert_eq(sx_onnx_graph_import_buffer("", 0, "empty", NULL, &og), SX_E_FORMAT);
    sx_nn_model_free(ref);
    sx_nn_net_free(net);
    remove(path);
}

Test(onnx_onnx, tensor_read_and_op_list)
{
    if (!have_node_tests())
        cr_skip_test("libonnx-testdata is not installed");
    sx_tensor *t = NULL;
    char *name = NULL;
    cr_assert_eq(
        sx_onnx_tensor_read(NODE_TESTS "/test_relu/test_data_set_0/input_0.pb", SX_F64, &t, &name),
        SX_OK, "%s", sx_last_error());
    cr_assert_eq(t->dtype, SX_F64);
    cr_assert_eq(t->rank, 3);
    cr_assert_str_eq(name, "x");
    sx_free(name);
    sx_tensor_free(t);
    cr_assert_eq(sx_onnx_tensor_read(NODE_TESTS "/test_relu/model.onnx", SX_F32, &t, NULL),
                 SX_E_FORMAT);
    cr_assert(sx_onnx_op_supported("Conv"));
    cr_assert(!sx_onnx_op_supported("GridSample"));
    for (int i = 1; sx_onnx_op_name(i) != NULL; i++)
        cr_assert(strcmp(sx_onnx_op_name(i - 1), sx_onnx_op_name(i)) < 0);
}

/* An input with an axis of size 0 made the size check divide by zero (SIGFPE). */
Test(onnx_onnx, zero_size_input_does_not_divide_by_zero)
{
    if (!have_node_tests())
        cr_skip_test("libonnx-testdata is not installed");
    sx_onnx_conformance_report r;
    cr_assert_eq(
        sx_onnx_conformance(NODE_TESTS "/test_reshape_allowzero_reordered", 1e-4, 1e-6, NULL, &r),
        SX_OK, "%s", sx_last_error());
    cr_assert_eq(r.passed, 1);
}

/* Fine-tuning: an imported model's initializers as parameters, trained by autodiff and SGD
 * through the graph API; the loss falls. */
Test(onnx_onnx, fine_tune_trainable_initializers)
{
    sx_nn_net *net = make_net(false);
    sx_nn_model *ref = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 1, &ref), SX_OK);
    char path[256];
    tmp_path(path, sizeof path, "tune");
    cr_assert_eq(sx_onnx_export(ref, path), SX_OK, "%s", sx_last_error());
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.batch = 8;
    p.trainable = true;
    sx_onnx_graph *og = NULL;
    cr_assert_eq(sx_onnx_graph_import(path, &p, &og), SX_OK, "%s", sx_last_error());
    int np = sx_onnx_graph_n_params(og);
    cr_assert_eq(np, 8, "%d parameters (4 weights, 4 biases)", np); /* 2 conv, 2 dense */
    cr_assert_not_null(sx_onnx_graph_param_name(og, 0));
    cr_assert_null(sx_onnx_graph_param(og, np));
    sx_cg_graph *g = sx_onnx_graph_cg(og);
    sx_cg_node *x = sx_onnx_graph_input(og, 0), *y = sx_onnx_graph_output(og, 0);
    sx_rng rng;
    sx_rng_seed(&rng, 9);
    sx_tensor *xt = tu_rand(&rng, SX_F32, 4, (int64_t[]){8, 12, 10, 3}, -1, 1);
    sx_tensor *tt = tu_zeros(SX_F32, 2, (int64_t[]){8, 5});
    for (int i = 0; i < 8; i++)
        sx_tensor_set(tt, i * 5 + i % 5, 1);
    sx_cg_node *t = sx_cg_const(g, tt);
    sx_cg_node *loss = sx_cg_mean(g, sx_cg_sqr(g, sx_cg_sub(g, y, t)), SX_AXES_ALL, false);
    sx_cg_node *params[16], *grads[16], *outs[17];
    for (int i = 0; i < np; i++)
        params[i] = sx_onnx_graph_param(og, i);
    cr_assert_eq(sx_ad_grad(g, loss, np, params, grads), SX_OK, "%s", sx_last_error());
    sx_cg_node *lr = sx_cg_scalar(g, 2.0);
    sx_optim_params op = sx_optim_params_default(SX_OPTIM_SGD);
    int n_out = 0;
    for (int i = 0; i < np; i++) {
        int k = 0;
        cr_assert_eq(sx_optim_update(g, &op, params[i], grads[i], lr, NULL, NULL, outs + n_out, &k),
                     SX_OK, "%s", sx_last_error());
        n_out += k;
    }
    outs[n_out++] = loss;
    cr_assert_eq(sx_cg_freeze(g, n_out, outs), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_input_set(g, x, xt, SX_CG_COPY), SX_OK);
    double first = 0, last = 0;
    for (int step = 0; step < 40; step++) {
        cr_assert_eq(sx_cg_eval(g, n_out, outs), SX_OK, "%s", sx_last_error());
        last = sx_tensor_get(sx_cg_value(loss), 0);
        if (step == 0)
            first = last;
    }
    cr_assert(last < 0.8 * first, "loss %g -> %g", first, last);
    sx_tensor_free(xt);
    sx_tensor_free(tt);
    sx_onnx_graph_free(og);
    sx_nn_model_free(ref);
    sx_nn_net_free(net);
    remove(path);
}

/* Every allocation of an import failing in turn: an error, never a crash, and nothing leaked. */
Test(onnx_onnx, out_of_memory_at_every_allocation)
{
    if (!have_node_tests())
        cr_skip_test("libonnx-testdata is not installed");
    const char *path = NODE_TESTS "/test_conv_with_strides_and_asymmetric_padding/model.onnx";
    bool done = false;
    for (long k = 0; !done && k < 10000; k++) {
        sx_onnx_graph *og = NULL;
        tu_fail_after(k);
        sx_status s = sx_onnx_graph_import(path, NULL, &og);
        if (s == SX_OK)
            sx_onnx_graph_free(og);
        else
            cr_assert_null(og);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert(s == SX_OK || s == SX_E_NOMEM || s == SX_E_FORMAT, "k %ld: status %d", k, s);
        cr_assert_eq(live, 0, "k %ld: %ld allocations leaked", k, live);
        done = s == SX_OK;
    }
    cr_assert(done);
    done = false;
    for (long k = 0; !done && k < 10000; k++) { /* the model path: import, plan, compile */
        sx_nn_model *m = NULL;
        tu_fail_after(k);
        sx_status s = sx_onnx_import(NODE_TESTS "/test_softmax_axis_1/model.onnx", NULL, &m);
        sx_nn_model_free(m);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(live, 0, "k %ld: %ld allocations leaked (status %d)", k, live, s);
        done = s == SX_OK;
    }
    cr_assert(done);
}

/* tests/onnx/data/NAME (the folder next to this file; CMake compiles it by its full path). */
static void data_path(char *buf, size_t n, const char *name)
{
    const char *f = __FILE__, *slash = strrchr(f, '/');
    int dir = slash ? (int)(slash - f) + 1 : 0;
    snprintf(buf, n, "%.*sdata/%s", dir, f, name);
}

/* Rows [r0, r0 + k) of x (f32). */
static sx_tensor *rows(const sx_tensor *x, int64_t r0, int64_t k)
{
    int64_t s[SX_MAX_RANK];
    memcpy(s, x->shape, sizeof s);
    s[0] = k;
    sx_tensor *t = tu_zeros(SX_F32, x->rank, s);
    int64_t per = x->size / x->shape[0];
    memcpy(t->data, (const float *)x->data + r0 * per, (size_t)(k * per) * sizeof(float));
    return t;
}

/* m's outputs for the 8 examples of x in batches of n (the last one smaller) equal want. */
static void check_batches(sx_nn_model *m, const sx_tensor *x, const sx_tensor *want, int64_t n,
                          const char *what)
{
    for (int64_t r0 = 0; r0 < x->shape[0]; r0 += n) {
        int64_t k = x->shape[0] - r0 < n ? x->shape[0] - r0 : n;
        sx_tensor *xb = rows(x, r0, k), *wb = rows(want, r0, k);
        sx_tensor *y = predict(m, xb);
        cr_assert(tu_close(y, wb, 1e-5, 1e-5), "%s: batch %lld, rows %lld..%lld differ", what,
                  (long long)n, (long long)r0, (long long)(r0 + k));
        sx_tensor_free(xb);
        sx_tensor_free(wb);
        sx_tensor_free(y);
    }
}

/* PyTorch exports a model traced at batch 1 with the batch baked in (a Reshape to (1, -1) for
 * x.view(x.size(0), -1)); imported, and converted to .sxm as `strix convert` does, it still runs
 * batches of 1, 3 and 8 with PyTorch's outputs (written once by data/make_batch_models.py). The
 * third model has ConvTranspose and nearest and bilinear Resize nodes. */
Test(onnx_onnx, imported_model_runs_any_batch_up_to_the_compiled_one)
{
    static const char *const names[] = {"batch_resnet", "batch_mlp", "batch_upsample"};
    for (int i = 0; i < 3; i++) {
        char path[512], file[128];
        snprintf(file, sizeof file, "%s_x.pb", names[i]);
        data_path(path, sizeof path, file);
        sx_tensor *x = NULL, *want = NULL;
        cr_assert_eq(sx_onnx_tensor_read(path, SX_F32, &x, NULL), SX_OK, "%s", sx_last_error());
        snprintf(file, sizeof file, "%s_y.pb", names[i]);
        data_path(path, sizeof path, file);
        cr_assert_eq(sx_onnx_tensor_read(path, SX_F32, &want, NULL), SX_OK, "%s", sx_last_error());
        snprintf(file, sizeof file, "%s.onnx", names[i]);
        data_path(path, sizeof path, file);
        sx_onnx_import_params p = sx_onnx_import_params_default();
        p.batch = 8;
        sx_nn_model *m = NULL;
        cr_assert_eq(sx_onnx_import(path, &p, &m), SX_OK, "%s", sx_last_error());
        check_batches(m, x, want, 8, names[i]);
        check_batches(m, x, want, 3, names[i]);
        check_batches(m, x, want, 1, names[i]);
        sx_nn_model_free(m);
        /* `strix convert`: imported for batch 1, saved as .sxm, loaded for 8 */
        p.batch = 1;
        cr_assert_eq(sx_onnx_import(path, &p, &m), SX_OK, "%s", sx_last_error());
        char sxm[256];
        snprintf(sxm, sizeof sxm, "/tmp/strix_test_onnx_%ld_%s.sxm", (long)getpid(), names[i]);
        cr_assert_eq(sx_nn_model_save(m, sxm), SX_OK, "%s", sx_last_error());
        sx_nn_model_free(m);
        cr_assert_eq(sx_nn_load(sxm, 8, &m), SX_OK, "%s", sx_last_error());
        check_batches(m, x, want, 8, sxm);
        check_batches(m, x, want, 3, sxm);
        check_batches(m, x, want, 1, sxm);
        sx_nn_model_free(m);
        remove(sxm);
        sx_tensor_free(x);
        sx_tensor_free(want);
    }
}

/* An imported model with ConvTranspose and Resize (nearest: a gather; bilinear: a matrix
 * product) exports to ONNX (ConvTranspose, Gather, MatMul), passes onnx.checker, and imports
 * back with PyTorch's outputs. */
Test(onnx_onnx, upsampling_model_exports_and_imports_back)
{
    char path[512], xp[512], yp[512], out[256];
    data_path(path, sizeof path, "batch_upsample.onnx");
    data_path(xp, sizeof xp, "batch_upsample_x.pb");
    data_path(yp, sizeof yp, "batch_upsample_y.pb");
    sx_tensor *x = NULL, *want = NULL;
    cr_assert_eq(sx_onnx_tensor_read(xp, SX_F32, &x, NULL), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_onnx_tensor_read(yp, SX_F32, &want, NULL), SX_OK, "%s", sx_last_error());
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.batch = 8;
    sx_nn_model *m = NULL, *back = NULL;
    cr_assert_eq(sx_onnx_import(path, &p, &m), SX_OK, "%s", sx_last_error());
    tmp_path(out, sizeof out, "upsample");
    cr_assert_eq(sx_onnx_export(m, out), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_onnx_import(out, &p, &back), SX_OK, "%s", sx_last_error());
    check_batches(back, x, want, 8, out);
    check_batches(back, x, want, 3, out);
    if (system("/usr/bin/python3 -c 'import onnx' > /dev/null 2>&1") == 0) {
        char cmd[700];
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c 'import onnx, sys; m = onnx.load(sys.argv[1]); "
                 "onnx.checker.check_model(m, full_check=True); "
                 "ops = set(n.op_type for n in m.graph.node); "
                 "sys.exit(0 if {\"ConvTranspose\", \"Gather\", \"MatMul\"} <= ops else 1)' %s",
                 out);
        cr_assert_eq(system(cmd), 0, "onnx.checker rejected %s or an op is missing", out);
    }
    sx_nn_model_free(back);
    sx_nn_model_free(m);
    remove(out);
    sx_tensor_free(x);
    sx_tensor_free(want);
}

/* What the new mappings do not take is a clear SX_E_UNSUPPORTED naming the op and the reason:
 * a 1-d ConvTranspose, Resize scales that are a graph input (not known at import). */
Test(onnx_onnx, new_ops_refuse_what_they_do_not_map)
{
    if (!have_node_tests())
        cr_skip_test("libonnx-testdata is not installed");
    static const struct {
        const char *dir, *words[2];
    } cases[] = {
        {"test_convtranspose_1d", {"ConvTranspose", "rank 3"}},
        {"test_resize_upsample_scales_linear", {"Resize", "known at import"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[512];
        snprintf(path, sizeof path, NODE_TESTS "/%s/model.onnx", cases[i].dir);
        if (access(path, R_OK) != 0)
            continue;
        sx_onnx_graph *og = (sx_onnx_graph *)1;
        sx_status s = sx_onnx_graph_import(path, NULL, &og);
        cr_assert_null(og, "%s", cases[i].dir);
        cr_assert_eq(s, SX_E_UNSUPPORTED, "%s: %s", cases[i].dir, sx_last_error());
        for (int k = 0; k < 2; k++)
            cr_assert(strstr(sx_last_error(), cases[i].words[k]) != NULL, "%s", sx_last_error());
    }
}

/* Token ids (int64) and floats as two inputs, two outputs (data/make_multi_io.py, NumPy's
 * reference): sx_onnx_import names each, tells the integer input apart, and runs a row holding
 * one example's ids then its floats, at batches 5, 2 and 1. */
Test(onnx_onnx, int64_ids_and_floats_as_two_inputs_two_outputs)
{
    char model[512], xf[512], yf[512];
    data_path(model, sizeof model, "multi_io.onnx");
    data_path(xf, sizeof xf, "multi_io_x.pb");
    data_path(yf, sizeof yf, "multi_io_y.pb");
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.batch = 5;
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_onnx_import(model, &p, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_n_inputs(m), 2);
    cr_assert_eq(sx_nn_model_n_outputs(m), 2);
    int rk = 0;
    const int64_t *sh = NULL;
    cr_assert_str_eq(sx_onnx_model_input(m, 0, &rk, &sh), "ids");
    cr_assert(sx_shape_equal(rk, sh, 1, (int64_t[]){4}));
    cr_assert_str_eq(sx_onnx_model_input(m, 1, NULL, NULL), "feat");
    cr_assert_str_eq(sx_onnx_model_output(m, 0, &rk, &sh), "emb");
    cr_assert(sx_shape_equal(rk, sh, 2, (int64_t[]){4, 3}));
    cr_assert(sx_onnx_model_input_integer(m, 0));
    cr_assert(!sx_onnx_model_input_integer(m, 1));
    cr_assert(!sx_onnx_model_input_integer(m, 2));
    cr_assert(!sx_onnx_model_input_integer(m, -1));
    cr_assert(!sx_onnx_model_input_integer(NULL, 0));
    sx_tensor *x = NULL, *want = NULL;
    cr_assert_eq(sx_onnx_tensor_read(xf, SX_F32, &x, NULL), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_onnx_tensor_read(yf, SX_F32, &want, NULL), SX_OK, "%s", sx_last_error());
    cr_assert(sx_shape_equal(x->rank, x->shape, 2, (int64_t[]){5, 7}));
    for (int64_t n = 5; n >= 1; n -= n > 2 ? 3 : 1)
        check_batches(m, x, want, n, "multi_io");
    sx_nn_model *native = NULL;
    sx_nn_net *net = make_net(false);
    cr_assert_eq(sx_nn_compile_infer(net, 1, &native), SX_OK, "%s", sx_last_error());
    cr_assert(!sx_onnx_model_input_integer(native, 0)); /* not an imported model */
    sx_nn_model_free(native);
    sx_nn_net_free(net);
    sx_tensor_free(x);
    sx_tensor_free(want);
    sx_nn_model_free(m);
}

/* A network of token ids exports an int64 input (as PyTorch's exports of an nn.Embedding have),
 * which ONNX's checker accepts; imported back, it takes i64 and i32 batches and gives the
 * network's outputs. */
static void ids_round_trip(int64_t pad)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("ids", SX_F32, 3, &net), SX_OK);
    sx_nn_embedding_params ep = sx_nn_embedding_params_default(11, 4);
    ep.pad = pad;
    sx_nn_layer *x = sx_nn_embedding(net, sx_nn_input_ids(net, 1, (int64_t[]){5}), &ep);
    sx_nn_linear(net, sx_nn_flatten(net, x), 3, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_nn_param_info pi;
    cr_assert_eq(sx_nn_net_param_info(net, 0, &pi), SX_OK);
    sx_tensor *w = tu_zeros(SX_F32, 2, (int64_t[]){11, 4});
    cr_assert_eq(sx_nn_net_param_get(net, pi.name, w), SX_OK);
    for (int64_t i = 0; i < 44; i++) /* every row non-zero: the padding row must be masked */
        SX_F32P(w)[i] += 1;
    cr_assert_eq(sx_nn_net_param_set(net, pi.name, w), SX_OK, "%s", sx_last_error());
    sx_tensor_free(w);
    sx_nn_model *ref = NULL, *imp = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 2, &ref), SX_OK, "%s", sx_last_error());
    char path[256], cmd[600];
    tmp_path(path, sizeof path, pad < 0 ? "ids" : "ids_pad");
    cr_assert_eq(sx_onnx_export(ref, path), SX_OK, "%s", sx_last_error());
    if (system("/usr/bin/python3 -c 'import onnx' > /dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c 'import onnx, sys; m = onnx.load(sys.argv[1]); "
                 "onnx.checker.check_model(m, full_check=True); "
                 "assert m.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT64' %s",
                 path);
        cr_assert_eq(system(cmd), 0, "onnx.checker rejected %s or its input is not int64", path);
    }
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.batch = 2;
    cr_assert_eq(sx_onnx_import(path, &p, &imp), SX_OK, "%s", sx_last_error());
    cr_assert(sx_onnx_model_input_integer(imp, 0));
    sx_tensor *xi = NULL, *xl = NULL;
    cr_assert_eq(sx_tensor_new(SX_I32, 2, (int64_t[]){2, 5}, &xi), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_I64, 2, (int64_t[]){2, 5}, &xl), SX_OK);
    for (int64_t i = 0; i < 10; i++) {
        SX_I32P(xi)[i] = (int32_t)((i * 7 + 3) % 11);
        SX_I64P(xl)[i] = (i * 7 + 3) % 11;
    }
    sx_tensor *a = predict(ref, xi), *b = predict(imp, xl);
    cr_assert(tu_close(b, a, 1e-6, 1e-7));
    SX_I64P(xl)[3] = 11; /* not a row of the table */
    sx_tensor *c = tu_zeros(SX_F32, 2, (int64_t[]){2, 3});
    cr_assert_neq(sx_nn_model_predict(imp, xl, c), SX_OK);
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_tensor_free(c);
    sx_tensor_free(xi);
    sx_tensor_free(xl);
    sx_nn_model_free(imp);
    sx_nn_model_free(ref);
    sx_nn_net_free(net);
    remove(path);
}

Test(onnx_onnx, ids_network_exports_int64_input_and_imports_back)
{
    ids_round_trip(-1);
    ids_round_trip(3); /* a padding index: its rows read zeros (id 3 is in the batch) */
}
