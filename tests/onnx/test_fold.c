/* test_fold.c: the shape arithmetic exporters write, folded at import: small models of the
 * patterns PyTorch's exports of ViT, ShuffleNet, Swin and transformer encoders contain (made at
 * test time by shape_models.py with python3-onnx, references in NumPy) run with the reference's
 * outputs at the batch they were built for and at smaller ones (built again: the folded values
 * depend on the batch); what does not fold is a clear error naming node, op and reason. */
#include "testutil.h"

#include <sx_onnx.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

/* The models, written once per run into a fresh folder (skips without python3-onnx). */
static void make_models(void)
{
    if (system("/usr/bin/python3 -c 'import onnx, numpy' > /dev/null 2>&1") != 0)
        cr_skip_test("python3-onnx is not installed");
    const char *f = __FILE__, *slash = strrchr(f, '/');
    int len = slash ? (int)(slash - f) + 1 : 0;
    snprintf(dir, sizeof dir, "/tmp/strix_test_fold_%ld", (long)getpid());
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %.*sshape_models.py %s", len, f, dir);
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
}

static void remove_models(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static sx_tensor *read_pb(const char *name, const char *suffix)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s%s", dir, name, suffix);
    sx_tensor *t = NULL;
    cr_assert_eq(sx_onnx_tensor_read(path, SX_F32, &t, NULL), SX_OK, "%s", sx_last_error());
    return t;
}

/* Rows [r0, r0 + k) of x as a (k, row) tensor. */
static sx_tensor *rows(const sx_tensor *x, int64_t r0, int64_t k)
{
    int64_t per = x->size / x->shape[0];
    int64_t s[SX_MAX_RANK];
    memcpy(s, x->shape, sizeof s);
    s[0] = k;
    sx_tensor *t = tu_zeros(SX_F32, x->rank, s);
    memcpy(t->data, (const float *)x->data + r0 * per, (size_t)(k * per) * sizeof(float));
    return t;
}

/* The model built for batch 3 gives the reference for the 3 examples at once, then in batches
 * of 2 and 1. */
static void check_case(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
    sx_tensor *x = read_pb(name, "_x.pb"), *want = read_pb(name, "_y.pb");
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.batch = 3;
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_onnx_import(path, &p, &m), SX_OK, "%s: %s", name, sx_last_error());
    int64_t per = want->size / want->shape[0];
    cr_assert_eq(sx_nn_model_classes(m), per, "%s", name);
    for (int64_t n = 3; n >= 2; n--)
        for (int64_t r0 = 0; r0 < 3; r0 += n) {
            int64_t k = 3 - r0 < n ? 3 - r0 : n;
            sx_tensor *xb = rows(x, r0, k), *wb = rows(want, r0, k);
            sx_tensor *y = tu_zeros(SX_F32, 2, (int64_t[]){k, per});
            cr_assert_eq(sx_nn_model_predict(m, xb, y), SX_OK, "%s: %s", name, sx_last_error());
            cr_assert_eq(sx_tensor_reshape(wb, 2, (int64_t[]){k, per}), SX_OK);
            cr_assert(tu_close(y, wb, 1e-5, 1e-5), "%s: rows %lld..%lld differ", name,
                      (long long)r0, (long long)(r0 + k));
            sx_tensor_free(xb);
            sx_tensor_free(wb);
            sx_tensor_free(y);
        }
    sx_nn_model_free(m);
    sx_tensor_free(x);
    sx_tensor_free(want);
}

Test(onnx_fold, batch_reshapes_and_attention_heads)
{
    make_models();
    check_case("flatten");
    check_case("heads");
    remove_models();
}

Test(onnx_fold, integer_arithmetic_with_negative_numbers)
{
    make_models();
    check_case("int_arith");
    remove_models();
}

/* A model whose weights are in a file beside it (external data), as PyTorch writes those over
 * 2 GB. */
Test(onnx_fold, weights_in_external_data)
{
    make_models();
    check_case("external");
    remove_models();
}

/* An int64 input of token ids: Gather's indices into an embedding table, compared to a
 * padding id. */
Test(onnx_fold, integer_input_as_gather_indices)
{
    make_models();
    check_case("embed");
    remove_models();
}

/* Pad's reflect and edge modes (ReflectionPad2d, ReplicationPad2d), pads as inputs and, before
 * opset 11, as attributes, on several axes at once and wider than half an axis. */
Test(onnx_fold, pad_reflect_and_edge)
{
    make_models();
    check_case("pad_modes");
    check_case("pad_modes_v2");
    remove_models();
}

Test(onnx_fold, channel_shuffle_of_rank_5)
{
    make_models();
    check_case("shuffle");
    remove_models();
}

Test(onnx_fold, masks_from_scatter_range_and_where)
{
    make_models();
    check_case("window_mask");
    check_case("causal");
    check_case("class_token");
    remove_models();
}

/* An index out of range, an op strix only folds given a graph value, a division by zero,
 * external data outside the model's folder, integer arithmetic on an integer input: an
 * SX_E_* status whose message names the node, the op and the reason (bad_<case>.txt). */
Test(onnx_fold, what_does_not_fold_is_a_clear_error)
{
    make_models();
    static const char *const bad[] = {"gather", "range", "div", "external", "int_div", "reflect"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char path[512], words[512];
        snprintf(path, sizeof path, "%s/bad_%s.txt", dir, bad[i]);
        FILE *f = fopen(path, "r");
        cr_assert_not_null(f, "%s", path);
        size_t got = fread(words, 1, sizeof words - 1, f);
        fclose(f);
        words[got] = '\0';
        snprintf(path, sizeof path, "%s/bad_%s.onnx", dir, bad[i]);
        sx_nn_model *m = (sx_nn_model *)1;
        sx_status s = sx_onnx_import(path, NULL, &m);
        cr_assert_neq(s, SX_OK, "bad_%s imported", bad[i]);
        cr_assert_null(m);
        for (char *w = strtok(words, "\n"); w != NULL; w = strtok(NULL, "\n"))
            cr_assert(strstr(sx_last_error(), w) != NULL, "bad_%s: '%s' not in: %s", bad[i], w,
                      sx_last_error());
    }
    remove_models();
}
