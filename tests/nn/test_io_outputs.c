/* Model files of networks whose output is not (batch, classes): a per-pixel map, a
 * regression MLP, a network with two inputs and two named outputs. Each is trained a little,
 * saved, loaded, and the loaded model's predictions equal the trained network's own compiled
 * inference bit for bit; the file records the outputs' names and shapes and the inputs' shapes
 * (version 2), while a (batch, classes) network is still written as version 1. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sx_nn_io_out_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

/* A few Adam steps on random targets of the output's shape (so the weights are not the
 * initial ones), through sx_nn_fit on a tensor source. */
static void train_a_little(sx_nn_net *net, int64_t n, sx_nn_loss loss, const sx_nn_head *heads,
                           int n_heads)
{
    const sx_nn_layer *last = nn_output_layer(net);
    int64_t xs[SX_MAX_RANK], ys[SX_MAX_RANK];
    xs[0] = ys[0] = n;
    int xr = nn_input_shape(net, xs + 1);
    memcpy(ys + 1, last->shape, (size_t)last->rank * sizeof *ys);
    sx_rng r;
    sx_rng_seed(&r, 17);
    sx_tensor *x = tu_rand(&r, net->dtype, xr + 1, xs, -1, 1);
    sx_tensor *y = tu_rand(&r, net->dtype, last->rank + 1, ys, 0, 1);
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_tensors(x, y, 0, &s), SX_OK, "%s", sx_last_error());
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = 2;
    p.train.batch = 4;
    p.train.verbose = 0;
    p.train.loss = loss;
    p.train.heads = heads;
    p.train.n_heads = n_heads;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.train_metric = false;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_OK, "%s", sx_last_error());
    sx_ds_source_free(s);
    sx_tensor_free(x);
    sx_tensor_free(y);
}

/* Save net, load it for batches of 5, and predict 5 and 3 examples with both: the same bits.
 * Returns the loaded model (the caller checks its description and frees it). */
static sx_nn_model *save_load_same(sx_nn_net *net, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_model *m = NULL, *c = NULL;
    cr_assert_eq(sx_nn_load(path, 5, &m), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_compile_infer(net, 5, &c), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_model_output_rank(m), sx_nn_model_output_rank(c));
    cr_assert(sx_shape_equal(sx_nn_model_output_rank(m), sx_nn_model_output_shape(m),
                             sx_nn_model_output_rank(c), sx_nn_model_output_shape(c)));
    cr_assert_eq(sx_nn_model_input_rank(m), sx_nn_model_input_rank(c));
    cr_assert(sx_shape_equal(sx_nn_model_input_rank(m), sx_nn_model_input_shape(m),
                             sx_nn_model_input_rank(c), sx_nn_model_input_shape(c)));
    sx_rng r;
    sx_rng_seed(&r, 5);
    for (int64_t n = 5; n >= 3; n -= 2) {
        int64_t xs[SX_MAX_RANK], os[SX_MAX_RANK];
        xs[0] = os[0] = n;
        memcpy(xs + 1, sx_nn_model_input_shape(m), (size_t)sx_nn_model_input_rank(m) * sizeof *xs);
        memcpy(os + 1, sx_nn_model_output_shape(m),
               (size_t)sx_nn_model_output_rank(m) * sizeof *os);
        sx_tensor *x = tu_rand(&r, net->dtype, sx_nn_model_input_rank(m) + 1, xs, -1, 1);
        sx_tensor *a = tu_zeros(net->dtype, sx_nn_model_output_rank(m) + 1, os);
        sx_tensor *b = tu_zeros(net->dtype, sx_nn_model_output_rank(m) + 1, os);
        cr_assert_eq(sx_nn_model_predict(m, x, a), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_nn_model_predict(c, x, b), SX_OK, "%s", sx_last_error());
        cr_assert_eq(memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)), 0,
                     "%s: the loaded model's predictions differ (batch %lld)", name, (long long)n);
        double any = 0;
        for (int64_t i = 0; i < a->size; i++)
            any += fabs(sx_tensor_get(a, i));
        cr_assert_gt(any, 0);
        sx_tensor_free(x);
        sx_tensor_free(a);
        sx_tensor_free(b);
    }
    sx_nn_model_free(c);
    return m;
}

/* The metadata value of key in the file at path ("" when absent), into buf. */
static void file_meta(const char *path, const char *key, char *buf, size_t n)
{
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK, "%s", sx_last_error());
    const char *v = sx_cg_file_meta(f, key);
    snprintf(buf, n, "%s", v ? v : "");
    sx_cg_file_free(f);
}

/* A segmentation-like network: per-pixel scores (6, 6, 3) from a (6, 6, 2) image. */
Test(nn_io_outputs, per_pixel_map_saves_loads_and_predicts_bit_for_bit, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    for (int d = 0; d < 2; d++) {
        sx_dtype dt = d ? SX_F64 : SX_F32;
        sx_nn_net *net = NULL;
        cr_assert_eq(sx_nn_net_new("seg", dt, 3, &net), SX_OK);
        sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){6, 6, 2});
        sx_nn_conv2d_params cp = sx_nn_conv2d_params_default(4, 3, 3);
        cp.conv.padding = SX_PAD_SAME;
        cp.act = SX_ACT_RELU;
        x = sx_nn_conv2d(net, x, &cp);
        x = sx_nn_conv2d(net, x,
                         &(sx_nn_conv2d_params){.filters = 3,
                                                .kernel_h = 1,
                                                .kernel_w = 1,
                                                .conv = sx_conv2d_params_default(),
                                                .bias = true});
        cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
        train_a_little(net, 8, SX_LOSS_CROSS_ENTROPY, NULL, 0);
        sx_nn_model *m = save_load_same(net, d ? "seg64.sxm" : "seg32.sxm");
        cr_assert_eq(sx_nn_model_output_rank(m), 3);
        cr_assert_eq(sx_nn_model_output_shape(m)[2], 3);
        cr_assert_eq(sx_nn_model_classes(m), 0);
        cr_assert_eq(sx_nn_model_n_outputs(m), 1);
        int rank = 0;
        const int64_t *shape = NULL;
        cr_assert_str_eq(sx_nn_model_output(m, 0, &rank, &shape), "y");
        cr_assert(rank == 3 && shape[0] == 6 && shape[1] == 6 && shape[2] == 3);
        cr_assert_null(sx_nn_model_output(m, 1, NULL, NULL));
        char path[128], v[64];
        snprintf(path, sizeof path, "%s/%s", tmpdir, d ? "seg64.sxm" : "seg32.sxm");
        file_meta(path, "model_version", v, sizeof v);
        cr_assert_str_eq(v, "3");
        file_meta(path, "outputs", v, sizeof v);
        cr_assert_str_eq(v, "y:6x6x3");
        file_meta(path, "inputs", v, sizeof v);
        cr_assert_str_eq(v, "6x6x2");
        sx_nn_model_free(m);
        sx_nn_net_free(net);
    }
}

/* A regression MLP (5) -> (2): one input, one unnamed rank-1 output: written as version 3 (the
 * graph holds the preprocessing), predictions equal. */
Test(nn_io_outputs, regression_mlp_saves_as_version_3_and_predicts_bit_for_bit, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("mlp", SX_F64, 9, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 1, (int64_t[]){5});
    x = sx_nn_linear(net, x, 8, SX_ACT_TANH);
    x = sx_nn_linear(net, x, 2, SX_ACT_NONE);
    train_a_little(net, 12, SX_LOSS_MSE, NULL, 0);
    sx_nn_model *m = save_load_same(net, "mlp.sxm");
    cr_assert_eq(sx_nn_model_output_rank(m), 1);
    cr_assert_eq(sx_nn_model_output_shape(m)[0], 2);
    cr_assert_eq(sx_nn_model_n_outputs(m), 1);
    cr_assert_eq(sx_nn_model_n_inputs(m), 1);
    char path[128], v[64];
    snprintf(path, sizeof path, "%s/mlp.sxm", tmpdir);
    file_meta(path, "model_version", v, sizeof v);
    cr_assert_str_eq(v, "3");
    file_meta(path, "classes", v, sizeof v);
    cr_assert_str_eq(v, "2");
    sx_nn_model_free(m);
    sx_nn_net_free(net);
}

/* Two inputs (3) and (2, 2), two named outputs "cls" (3) and "box" (2, 2): the file records
 * both; the model predicts (n, 7) rows, each output's elements one after another. */
Test(nn_io_outputs, two_inputs_two_named_outputs_save_load_and_predict_bit_for_bit,
     .init = make_tmpdir, .fini = remove_tmpdir)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("two", SX_F32, 4, &net), SX_OK);
    sx_nn_layer *a = sx_nn_input(net, 1, (int64_t[]){3});
    sx_nn_layer *b = sx_nn_input_add(net, 2, (int64_t[]){2, 2});
    sx_nn_layer *pair[2] = {a, sx_nn_flatten(net, b)};
    sx_nn_layer *h = sx_nn_concatenate(net, 2, pair);
    h = sx_nn_linear(net, h, 6, SX_ACT_RELU);
    sx_nn_layer *cls = sx_nn_linear(net, h, 3, SX_ACT_SOFTMAX);
    sx_nn_layer *box =
        sx_nn_reshape(net, sx_nn_linear(net, h, 4, SX_ACT_NONE), 2, (int64_t[]){2, 2});
    cr_assert_eq(sx_nn_output(net, cls, "cls"), cls);
    cr_assert_eq(sx_nn_output(net, box, "box"), box);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    sx_nn_head heads[2] = {{"box", 0, SX_LOSS_MSE, 0.5}, {"cls", 3, SX_LOSS_CROSS_ENTROPY, 1}};
    train_a_little(net, 10, SX_LOSS_MSE, heads, 2);
    sx_nn_model *m = save_load_same(net, "two.sxm");
    cr_assert_eq(sx_nn_model_output_rank(m), 1);
    cr_assert_eq(sx_nn_model_output_shape(m)[0], 7);
    cr_assert_eq(sx_nn_model_input_shape(m)[0], 7);
    cr_assert_eq(sx_nn_model_n_outputs(m), 2);
    int rank = 0;
    const int64_t *shape = NULL;
    cr_assert_str_eq(sx_nn_model_output(m, 0, &rank, &shape), "cls");
    cr_assert(rank == 1 && shape[0] == 3);
    cr_assert_str_eq(sx_nn_model_output(m, 1, &rank, &shape), "box");
    cr_assert(rank == 2 && shape[0] == 2 && shape[1] == 2);
    cr_assert_eq(sx_nn_model_n_inputs(m), 2);
    const int64_t *in1 = sx_nn_model_input(m, 1, &rank);
    cr_assert(rank == 2 && in1[0] == 2 && in1[1] == 2);
    cr_assert_null(sx_nn_model_input(m, 2, &rank));
    /* the softmax of "cls" is in the file: each row's first three outputs sum to 1 */
    sx_rng r;
    sx_rng_seed(&r, 8);
    sx_tensor *x = tu_rand(&r, SX_F32, 2, (int64_t[]){4, 7}, -1, 1);
    sx_tensor *o = tu_zeros(SX_F32, 2, (int64_t[]){4, 7});
    cr_assert_eq(sx_nn_model_predict(m, x, o), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < 4; i++) {
        double s = 0;
        for (int k = 0; k < 3; k++)
            s += sx_tensor_get(o, i * 7 + k);
        cr_assert_float_eq(s, 1, 1e-6);
    }
    /* a loaded version-2 model saved again keeps its outputs */
    char again[128];
    snprintf(again, sizeof again, "%s/again.sxm", tmpdir);
    cr_assert_eq(sx_nn_model_save(m, again), SX_OK, "%s", sx_last_error());
    sx_nn_model *m2 = NULL;
    cr_assert_eq(sx_nn_load(again, 4, &m2), SX_OK, "%s", sx_last_error());
    cr_assert_str_eq(sx_nn_model_output(m2, 1, NULL, NULL), "box");
    sx_tensor *o2 = tu_zeros(SX_F32, 2, (int64_t[]){4, 7});
    cr_assert_eq(sx_nn_model_predict(m2, x, o2), SX_OK, "%s", sx_last_error());
    cr_assert_eq(memcmp(o->data, o2->data, 4 * 7 * sizeof(float)), 0);
    sx_tensor_free(x);
    sx_tensor_free(o);
    sx_tensor_free(o2);
    sx_nn_model_free(m2);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
}

/* The file `from` written again as `to` with metadata key set to value. */
static void resave_meta(const char *from, const char *to, const char *key, const char *value)
{
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(from, &f), SX_OK, "%s", sx_last_error());
    const char *names[2] = {"x", "y"}, *keys[16], *vals[16];
    sx_cg_graph *g = NULL;
    sx_cg_node *outs[2];
    cr_assert_eq(sx_cg_file_graph(f, 2, names, &g, outs), SX_OK, "%s", sx_last_error());
    int nm = sx_cg_file_n_meta(f);
    cr_assert_leq(nm, 16);
    for (int i = 0; i < nm; i++) {
        keys[i] = sx_cg_file_meta_key(f, i);
        vals[i] = strcmp(keys[i], key) == 0 ? value : sx_cg_file_meta(f, keys[i]);
    }
    cr_assert_eq(sx_cg_save(g, 2, outs, names, 0, NULL, NULL, nm, keys, vals, to), SX_OK, "%s",
                 sx_last_error());
    sx_cg_graph_free(g);
    sx_cg_file_free(f);
}

/* Damaged version-2 metadata is a clean SX_E_FORMAT naming the file; a newer version is
 * SX_E_UNSUPPORTED. */
Test(nn_io_outputs, bad_version_2_metadata_is_a_clean_error, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("seg", SX_F64, 3, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 2, (int64_t[]){4, 2});
    x = sx_nn_linear(net, x, 3, SX_ACT_NONE);
    cr_assert_eq(sx_nn_output(net, x, "map"), x);
    char path[128], bad[128];
    snprintf(path, sizeof path, "%s/ok.sxm", tmpdir);
    snprintf(bad, sizeof bad, "%s/bad.sxm", tmpdir);
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(path, 2, &m), SX_OK, "%s", sx_last_error());
    cr_assert_str_eq(sx_nn_model_output(m, 0, NULL, NULL), "map");
    sx_nn_model_free(m);
    const char *outputs[] = {"",         "map",       "map:",     "map:4x",  "map:4x3,",
                             "map:0x3",  "map:4x3x",  "m-p:4x3",  "map:4x2", "map:2x3,b:1",
                             "map:x4x3", "map:4 x 3", "map:4x-3", ":4x3"};
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) {
        resave_meta(path, bad, "outputs", outputs[i]);
        m = (sx_nn_model *)1;
        cr_assert_eq(sx_nn_load(bad, 2, &m), SX_E_FORMAT, "outputs '%s'", outputs[i]);
        cr_assert_null(m);
        cr_assert(strstr(sx_last_error(), "bad.sxm") != NULL, "%s", sx_last_error());
    }
    const char *inputs[] = {"", "4", "4x2x1", "8", "4x2,1"};
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        resave_meta(path, bad, "inputs", inputs[i]);
        cr_assert_eq(sx_nn_load(bad, 2, &m), SX_E_FORMAT, "inputs '%s'", inputs[i]);
    }
    resave_meta(path, bad, "classes", "3");
    cr_assert_eq(sx_nn_load(bad, 2, &m), SX_E_FORMAT, "classes 3 of a (4, 3) output");
    resave_meta(path, bad, "model_version", "4");
    cr_assert_eq(sx_nn_load(bad, 2, &m), SX_E_UNSUPPORTED);
    cr_assert(strstr(sx_last_error(), "version 4") != NULL, "%s", sx_last_error());
    resave_meta(path, bad, "model_version", "1"); /* version 1 wants (batch, classes >= 1) */
    cr_assert_eq(sx_nn_load(bad, 2, &m), SX_E_FORMAT);
    sx_nn_net_free(net);
}

/* sx_nn_output's errors are recorded in the network, as a layer constructor's. */
Test(nn_io_outputs, bad_outputs_are_refused)
{
    sx_nn_net *net = NULL, *other = NULL;
    cr_assert_eq(sx_nn_net_new("o", SX_F64, 3, &net), SX_OK);
    cr_assert_eq(sx_nn_net_new("p", SX_F64, 3, &other), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 1, (int64_t[]){4});
    sx_nn_layer *y = sx_nn_input(other, 1, (int64_t[]){4});
    sx_nn_layer *a = sx_nn_linear(net, x, 2, SX_ACT_NONE);
    cr_assert_null(sx_nn_output(net, a, "bad name"));
    cr_assert_eq(sx_nn_net_status(net), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "bad name") != NULL, "%s", sx_last_error());
    sx_nn_net_free(net);
    cr_assert_eq(sx_nn_net_new("o", SX_F64, 3, &net), SX_OK);
    x = sx_nn_input(net, 1, (int64_t[]){4});
    a = sx_nn_linear(net, x, 2, SX_ACT_NONE);
    cr_assert_eq(sx_nn_output(net, a, "a"), a);
    cr_assert_null(sx_nn_output(net, a, "b")); /* marked twice */
    cr_assert_eq(sx_nn_net_status(net), SX_E_ARG);
    sx_nn_net_free(net);
    cr_assert_eq(sx_nn_net_new("o", SX_F64, 3, &net), SX_OK);
    x = sx_nn_input(net, 1, (int64_t[]){4});
    cr_assert_null(sx_nn_output(net, y, "y")); /* another network's layer */
    cr_assert_eq(sx_nn_net_status(net), SX_E_ARG);
    sx_nn_net_free(net);
    cr_assert_eq(sx_nn_net_new("o", SX_F64, 3, &net), SX_OK);
    x = sx_nn_input(net, 1, (int64_t[]){4});
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 2, &m), SX_OK);
    cr_assert_null(sx_nn_output(net, x, "x")); /* a model alive */
    cr_assert_eq(sx_nn_net_status(net), SX_E_STATE);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
    cr_assert_null(sx_nn_output(NULL, NULL, "x"));
    sx_nn_net_free(other);
}
