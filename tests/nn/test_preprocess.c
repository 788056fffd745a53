/* The network carries its preprocessing: the input scale and normalisation become the first
 * graph nodes (predict takes raw data and equals a plain network fed the preprocessed data),
 * a regression's target scaling the last; sx_nn_fit adopts the data's scale, augment's
 * mean/std, a standardised source's statistics, computed statistics, class and feature names;
 * all of it survives save/load and checkpoints; a change after training is refused. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn_impl.h"

#define N 200

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sx_nn_prep_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

static void tmp_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

/* input (3) -> dense 8 tanh -> dense `out` (softmax when classes). */
static sx_nn_net *mlp(uint64_t seed, int out, bool classes)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("prep", SX_F64, seed, &net), SX_OK);
    sx_nn_layer *l = sx_nn_input(net, 1, (int64_t[]){3});
    l = sx_nn_linear(net, l, 8, SX_ACT_TANH);
    l = sx_nn_linear(net, l, out, classes ? SX_ACT_SOFTMAX : SX_ACT_NONE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

/* Features far from unit scale: x_j = 100 j + 10 u, u uniform [-1, 1); class = sign of u_0 +
 * u_1; target y = 1000 + 300 u_0 - 200 u_2. */
static void make_data(double *x, int32_t *cls, double *y, uint64_t seed)
{
    sx_rng rng;
    sx_rng_seed(&rng, seed);
    for (int i = 0; i < N; i++) {
        double u[3];
        for (int j = 0; j < 3; j++) {
            u[j] = 2 * sx_rng_uniform(&rng) - 1;
            x[i * 3 + j] = 100.0 * j + 10 * u[j];
        }
        cls[i] = u[0] + u[1] > 0;
        y[i] = 1000 + 300 * u[0] - 200 * u[2];
    }
}

static sx_ds_source *source(const double *x, const void *y, bool classes)
{
    sx_ds_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.x_type = SX_DS_F64;
    sp.x_rank = 1;
    sp.x_shape[0] = 3;
    sp.x_scale = 1;
    sp.classes = classes ? 2 : 0;
    sp.y_type = classes ? SX_DS_I32 : SX_DS_F64;
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_memory(&sp, N, x, y, &s), SX_OK, "%s", sx_last_error());
    return s;
}

static sx_nn_fit_params fit_params(int epochs, bool classes)
{
    sx_nn_fit_params p = sx_nn_fit_params_default();
    p.train.epochs = epochs;
    p.train.batch = 20;
    p.train.loss = classes ? SX_LOSS_CROSS_ENTROPY : SX_LOSS_MSE;
    p.train.optim = sx_optim_params_default(SX_OPTIM_ADAM);
    p.train.optim.lr = 0.03;
    p.train.verbose = 0;
    return p;
}

/* The model's predictions for x (n, 3). */
static sx_tensor *predict(sx_nn_model *m, const double *x, int64_t n, int64_t out)
{
    sx_tensor *xt = tu_zeros(SX_F64, 2, (int64_t[]){n, 3});
    memcpy(xt->data, x, (size_t)(n * 3) * sizeof(double));
    sx_tensor *o = tu_zeros(SX_F64, 2, (int64_t[]){n, out});
    cr_assert_eq(sx_nn_model_predict(m, xt, o), SX_OK, "%s", sx_last_error());
    sx_tensor_free(xt);
    return o;
}

static void same_bits(const sx_tensor *a, const sx_tensor *b)
{
    cr_assert_eq(a->size, b->size);
    cr_assert_eq(memcmp(a->data, b->data, (size_t)a->size * sizeof(double)), 0, "values differ");
}

/* fit with standardize: the network holds the training data's statistics; predicting raw
 * rows equals a copy of the network without preprocessing fed (x - mean) / std. */
Test(nn_preprocess, standardize_lives_in_the_graph)
{
    double x[N * 3], y[N];
    int32_t c[N];
    make_data(x, c, y, 1);
    sx_ds_source *s = source(x, c, true);
    sx_nn_net *net = mlp(3, 2, true);
    sx_nn_fit_params p = fit_params(10, true);
    p.standardize = true;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_OK, "%s", sx_last_error());
    sx_nn_preprocess pp = sx_nn_net_preprocess(net);
    cr_assert_eq(pp.input_scale, 1);
    cr_assert_eq(pp.norm_size, 3);
    for (int j = 0; j < 3; j++) /* the means are near 100 j */
        cr_assert(fabs(pp.mean[j] - 100.0 * j) < 2 && pp.std[j] > 4 && pp.std[j] < 7, "%g %g",
                  pp.mean[j], pp.std[j]);
    double loss = 0, acc = 0;
    cr_assert_eq(sx_nn_evaluate_source(net, s, &p, &loss, &acc), SX_OK, "%s", sx_last_error());
    cr_assert_geq(acc, 0.9, "accuracy %g: raw data must be normalised by the network", acc);
    /* the same weights without preprocessing, fed the normalised rows */
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, N, &m), SX_OK, "%s", sx_last_error());
    sx_tensor *a = predict(m, x, N, 2);
    sx_nn_model_free(m);
    nn_prep keep = net->prep;
    memset(&net->prep, 0, sizeof net->prep);
    net->prep.scale = 1;
    double xn[N * 3];
    for (int i = 0; i < N * 3; i++)
        xn[i] = x[i] * (1 / keep.std[i % 3]) + (-keep.mean[i % 3] / keep.std[i % 3]);
    cr_assert_eq(sx_nn_compile_infer(net, N, &m), SX_OK, "%s", sx_last_error());
    sx_tensor *b = predict(m, xn, N, 2);
    sx_nn_model_free(m);
    net->prep = keep;
    cr_assert(tu_close(a, b, 1e-12, 1e-12), "the graph's normalisation differs from the formula");
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_nn_net_free(net);
    sx_ds_source_free(s);
}

/* A standardised source: the network takes its statistics and reads its parent, so the saved
 * model predicts raw rows as the training saw them. */
Test(nn_preprocess, standardised_source_statistics_move_into_the_network, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    double x[N * 3], y[N];
    int32_t c[N];
    make_data(x, c, y, 2);
    sx_ds_source *s = source(x, c, true), *v = NULL;
    sx_ds_stats *st = NULL;
    cr_assert_eq(sx_ds_stats_compute(s, 0, &st), SX_OK);
    cr_assert_eq(sx_ds_source_standardize(s, st, &v), SX_OK);
    sx_nn_net *net = mlp(4, 2, true);
    sx_nn_fit_params p = fit_params(8, true);
    cr_assert_eq(sx_nn_fit(net, &p, v, v, NULL), SX_OK, "%s", sx_last_error());
    sx_nn_preprocess pp = sx_nn_net_preprocess(net);
    cr_assert_eq(pp.norm_size, 3);
    cr_assert_eq(memcmp(pp.mean, st->mean, 3 * sizeof(double)), 0);
    cr_assert_eq(memcmp(pp.std, st->std, 3 * sizeof(double)), 0);
    /* the view and its parent evaluate the same */
    double l1, a1, l2, a2;
    cr_assert_eq(sx_nn_evaluate_source(net, v, &p, &l1, &a1), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_evaluate_source(net, s, &p, &l2, &a2), SX_OK, "%s", sx_last_error());
    cr_assert(l1 == l2 && a1 == a2);
    /* other statistics: refused, not misread */
    st->mean[0] += 1;
    sx_ds_source *w = NULL;
    cr_assert_eq(sx_ds_source_standardize(s, st, &w), SX_OK);
    cr_assert_eq(sx_nn_evaluate_source(net, w, &p, &l1, &a1), SX_E_STATE);
    cr_assert(strstr(sx_last_error(), "standardised") != NULL, "%s", sx_last_error());
    /* saved and loaded: the same predictions of raw rows, bit for bit */
    char path[128];
    tmp_path(path, sizeof path, "std.sxm");
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_model *m = NULL, *lm = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, N, &m), SX_OK);
    cr_assert_eq(sx_nn_load(path, N, &lm), SX_OK, "%s", sx_last_error());
    sx_tensor *a = predict(m, x, N, 2), *b = predict(lm, x, N, 2);
    same_bits(a, b);
    sx_nn_preprocess lp = sx_nn_model_preprocess(lm);
    cr_assert(lp.in_graph && lp.norm_size == 3);
    cr_assert_eq(memcmp(lp.mean, pp.mean, 3 * sizeof(double)), 0, "the file has the network's");
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_nn_model_free(m);
    sx_nn_model_free(lm);
    sx_nn_net_free(net);
    sx_ds_source_free(w);
    sx_ds_source_free(v);
    sx_ds_stats_free(st);
    sx_ds_source_free(s);
}

/* Regression targets near 1000 with a spread of 200: with standardize_targets the network
 * learns standardised targets and answers in the targets' units, also after loading. */
Test(nn_preprocess, target_scaling_answers_in_target_units, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    double x[N * 3], y[N];
    int32_t c[N];
    make_data(x, c, y, 3);
    sx_ds_source *s = source(x, y, false);
    sx_nn_net *net = mlp(5, 1, false);
    sx_nn_fit_params p = fit_params(30, false);
    p.standardize = true;
    p.standardize_targets = true;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_OK, "%s", sx_last_error());
    sx_nn_preprocess pp = sx_nn_net_preprocess(net);
    cr_assert_eq(pp.target_size, 1);
    cr_assert(fabs(pp.target_mean[0] - 1000) < 60 && pp.target_std[0] > 100, "%g %g",
              pp.target_mean[0], pp.target_std[0]);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, N, &m), SX_OK);
    sx_tensor *o = predict(m, x, N, 1);
    double sse = 0, sst = 0;
    for (int i = 0; i < N; i++) {
        sse += (SX_F64P(o)[i] - y[i]) * (SX_F64P(o)[i] - y[i]);
        sst += (y[i] - pp.target_mean[0]) * (y[i] - pp.target_mean[0]);
    }
    cr_assert_lt(sse / sst, 0.1, "R^2 %g: the answers must be in the targets' units",
                 1 - sse / sst);
    char path[128];
    tmp_path(path, sizeof path, "reg.sxm");
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_model *lm = NULL;
    cr_assert_eq(sx_nn_load(path, N, &lm), SX_OK, "%s", sx_last_error());
    sx_tensor *o2 = predict(lm, x, N, 1);
    same_bits(o, o2);
    cr_assert_eq(sx_nn_model_preprocess(lm).target_size, 1);
    sx_tensor_free(o);
    sx_tensor_free(o2);
    sx_nn_model_free(m);
    sx_nn_model_free(lm);
    sx_nn_net_free(net);
    sx_ds_source_free(s);
}

/* One input scale for every entry point: a network set to scale 1 trains with sx_nn_fit on
 * byte images with scale 1 (its own), not the data's 1/255. */
Test(nn_preprocess, fit_uses_the_network_input_scale)
{
    enum { n = 64 };
    uint8_t px[n * 4];
    int32_t lab[n];
    for (int i = 0; i < n; i++) {
        lab[i] = i % 2;
        for (int j = 0; j < 4; j++)
            px[i * 4 + j] = (uint8_t)(lab[i] ? 200 + j : 20 + j);
    }
    sx_ds_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.x_type = SX_DS_U8;
    sp.x_rank = 3;
    sp.x_shape[0] = 2, sp.x_shape[1] = 2, sp.x_shape[2] = 1;
    sp.x_scale = SX_DS_PIXEL_SCALE;
    sp.classes = 2;
    sp.y_type = SX_DS_I32;
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_memory(&sp, n, px, lab, &s), SX_OK);
    for (int set = 0; set < 2; set++) {
        sx_nn_net *net = NULL;
        cr_assert_eq(sx_nn_net_new("img", SX_F64, 1, &net), SX_OK);
        if (set)
            sx_nn_net_set_input_scale(net, 0.5);
        sx_nn_layer *l = sx_nn_input(net, 3, (int64_t[]){2, 2, 1});
        l = sx_nn_flatten(net, l);
        sx_nn_linear(net, l, 2, SX_ACT_SOFTMAX);
        sx_nn_fit_params p = fit_params(1, true);
        cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_nn_net_input_scale(net), set ? 0.5 : SX_DS_PIXEL_SCALE);
        /* the graph multiplies raw pixels by the network's scale: an input node, then mul */
        sx_nn_model *m = NULL;
        cr_assert_eq(sx_nn_compile_infer(net, 2, &m), SX_OK);
        bool scaled = false;
        sx_cg_graph *g = sx_nn_model_graph(m);
        for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
            sx_cg_node *nd = sx_cg_graph_node(g, i);
            for (int k = 0; nd != NULL && k < sx_cg_node_n_inputs(nd); k++) {
                sx_cg_node *c = sx_cg_node_input(nd, k);
                if (sx_cg_node_op(c) == SX_OP_CONST && sx_cg_node_size(c) == 1)
                    scaled |= sx_tensor_get(sx_cg_value(c), 0) == (set ? 0.5 : SX_DS_PIXEL_SCALE);
            }
        }
        cr_assert(scaled, "the network's input scale is not in its graph");
        sx_nn_model_free(m);
        sx_nn_net_free(net);
    }
    sx_ds_source_free(s);
}

/* Preprocessing is fixed once the network has trained or a model is alive; setting the same
 * value is fine; bad values are refused with a message. */
Test(nn_preprocess, changes_after_training_are_refused)
{
    sx_nn_net *net = mlp(6, 2, true);
    double m3[3] = {1, 2, 3}, s3[3] = {1, 1, 2}, bad[3] = {1, 0, 1};
    cr_assert_eq(sx_nn_net_set_normalization(net, 3, m3, bad), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "std") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_nn_net_set_normalization(net, 2, m3, s3), SX_E_SHAPE);
    cr_assert_eq(sx_nn_net_set_normalization(net, 3, m3, s3), SX_OK, "%s", sx_last_error());
    const char *names[2] = {"no", "yes"}, *other[2] = {"yes", "no"};
    cr_assert_eq(sx_nn_net_set_class_names(net, 2, names), SX_OK);
    const char *empty[1] = {""};
    cr_assert_eq(sx_nn_net_set_class_names(net, 1, empty), SX_E_ARG);
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, 4, &m), SX_OK, "%s", sx_last_error());
    cr_assert_str_eq(sx_nn_model_class_name(m, 1), "yes");
    cr_assert_null(sx_nn_model_class_name(m, 2));
    cr_assert_eq(sx_nn_net_set_normalization(net, 3, m3, s3), SX_OK, "the same value is fine");
    cr_assert_eq(sx_nn_net_set_class_names(net, 2, other), SX_E_STATE);
    cr_assert(strstr(sx_last_error(), "fixed") != NULL, "%s", sx_last_error());
    sx_nn_model_free(m);
    net->step = 5; /* trained */
    cr_assert_eq(sx_nn_net_set_normalization(net, 3, s3, s3), SX_E_STATE);
    cr_assert_eq(sx_nn_net_set_image_resize(net, SX_DS_RESIZE_NEAREST), SX_E_STATE);
    cr_assert_eq(sx_nn_net_status(net), SX_OK);
    sx_nn_net_set_input_scale(net, 3); /* recorded as the network's error */
    cr_assert_eq(sx_nn_net_status(net), SX_E_STATE);
    sx_nn_net_free(net);
    /* class names that do not fit the output are refused when compiling */
    net = mlp(6, 2, true);
    const char *three[3] = {"a", "b", "c"};
    cr_assert_eq(sx_nn_net_set_class_names(net, 3, three), SX_OK);
    cr_assert_eq(sx_nn_compile_infer(net, 4, &m), SX_E_SHAPE);
    cr_assert(strstr(sx_last_error(), "class names") != NULL, "%s", sx_last_error());
    sx_nn_net_free(net);
}

/* A checkpoint holds the preprocessing: a network rebuilt from code gets it back; one with
 * other statistics is refused. Class and feature names travel too. */
Test(nn_preprocess, checkpoints_carry_the_preprocessing, .init = make_tmpdir, .fini = remove_tmpdir)
{
    double x[N * 3], y[N];
    int32_t c[N];
    make_data(x, c, y, 7);
    sx_ds_source *s = source(x, c, true);
    sx_nn_net *net = mlp(8, 2, true);
    const char *f3[3] = {"height", "width", "depth"}, *cl[2] = {"low", "high"};
    cr_assert_eq(sx_nn_net_set_feature_names(net, 3, f3), SX_OK);
    cr_assert_eq(sx_nn_net_set_class_names(net, 2, cl), SX_OK);
    sx_nn_fit_params p = fit_params(2, true);
    p.standardize = true;
    cr_assert_eq(sx_nn_fit(net, &p, s, NULL, NULL), SX_OK, "%s", sx_last_error());
    char path[128];
    tmp_path(path, sizeof path, "ck");
    cr_assert_eq(sx_nn_checkpoint_save(net, &p.train, path), SX_OK, "%s", sx_last_error());
    sx_nn_net *b = mlp(8, 2, true);
    cr_assert_eq(sx_nn_checkpoint_load(b, &p.train, path), SX_OK, "%s", sx_last_error());
    sx_nn_preprocess pa = sx_nn_net_preprocess(net), pb = sx_nn_net_preprocess(b);
    cr_assert(pb.norm_size == 3 && memcmp(pa.mean, pb.mean, 3 * sizeof(double)) == 0 &&
              memcmp(pa.std, pb.std, 3 * sizeof(double)) == 0);
    cr_assert(pb.input_scale == 1 && pb.n_classes == 2 && pb.n_features == 3);
    cr_assert_str_eq(pb.feature_names[2], "depth");
    cr_assert_str_eq(pb.class_names[0], "low");
    sx_nn_model *ma = NULL, *mb = NULL;
    cr_assert_eq(sx_nn_compile_infer(net, N, &ma), SX_OK);
    cr_assert_eq(sx_nn_compile_infer(b, N, &mb), SX_OK);
    sx_tensor *oa = predict(ma, x, N, 2), *ob = predict(mb, x, N, 2);
    same_bits(oa, ob);
    sx_tensor_free(oa);
    sx_tensor_free(ob);
    sx_nn_model_free(ma);
    sx_nn_model_free(mb);
    sx_nn_net *d = mlp(8, 2, true);
    double m3[3] = {0, 0, 0}, s3[3] = {1, 1, 1};
    cr_assert_eq(sx_nn_net_set_normalization(d, 3, m3, s3), SX_OK);
    cr_assert_eq(sx_nn_checkpoint_load(d, &p.train, path), SX_E_STATE);
    cr_assert(strstr(sx_last_error(), "normalisation") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_nn_net_steps(d), 0, "a refused checkpoint changes nothing");
    sx_nn_net_free(d);
    sx_nn_net_free(b);
    sx_nn_net_free(net);
    sx_ds_source_free(s);
}

/* Names with the characters the file escapes survive a save and load. */
Test(nn_preprocess, names_round_trip_through_the_model_file, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    sx_nn_net *net = mlp(9, 2, true);
    const char *cl[2] = {"a,b\\c", "line\nbreak"}, *f3[3] = {"x 1", "\xc3\xa9t\xc3\xa9", "z"};
    cr_assert_eq(sx_nn_net_set_class_names(net, 2, cl), SX_OK);
    cr_assert_eq(sx_nn_net_set_feature_names(net, 3, f3), SX_OK);
    cr_assert_eq(sx_nn_net_set_image_resize(net, SX_DS_RESIZE_NEAREST), SX_OK);
    char path[128];
    tmp_path(path, sizeof path, "names.sxm");
    cr_assert_eq(sx_nn_save(net, path), SX_OK, "%s", sx_last_error());
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_load(path, 1, &m), SX_OK, "%s", sx_last_error());
    sx_nn_preprocess p = sx_nn_model_preprocess(m);
    cr_assert_eq(p.n_classes, 2);
    cr_assert_str_eq(p.class_names[0], cl[0]);
    cr_assert_str_eq(p.class_names[1], cl[1]);
    cr_assert_str_eq(p.feature_names[1], f3[1]);
    cr_assert_eq(p.resize, SX_DS_RESIZE_NEAREST);
    cr_assert_eq(p.input_scale, 1, "never trained: the scale is fixed to 1 when saved");
    /* saved again from the loaded model: the same */
    char again[128];
    tmp_path(again, sizeof again, "again.sxm");
    cr_assert_eq(sx_nn_model_save(m, again), SX_OK, "%s", sx_last_error());
    sx_nn_model *m2 = NULL;
    cr_assert_eq(sx_nn_load(again, 1, &m2), SX_OK, "%s", sx_last_error());
    cr_assert_str_eq(sx_nn_model_class_name(m2, 1), cl[1]);
    sx_nn_model_free(m2);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
}
