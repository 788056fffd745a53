/* test_node_ops.c: the ONNX ops mapped by gathers of import-time indices (ops_index.c), the
 * losses (ops_loss.c), the compositions of ops_math.c and quantisation (ops_quant.c), each
 * against ONNX's own backend node tests (libonnx-testdata: model, inputs, expected outputs);
 * what strix cannot map is refused with a message naming node, op and reason; bad indices are
 * a range error, never a crash. */
#include "testutil.h"

#include <sx_onnx.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NODE_TESTS "/usr/include/onnx/backend/test/data/node"

static bool have_node_tests(void)
{
    return access(NODE_TESTS "/test_relu/model.onnx", R_OK) == 0;
}

/* Every case passes (and none is refused). */
static void check_cases(const char *const *cases, size_t n)
{
    if (!have_node_tests())
        cr_skip_test("libonnx-testdata is not installed");
    for (size_t i = 0; i < n; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/%s", NODE_TESTS, cases[i]);
        sx_onnx_conformance_report r;
        cr_assert_eq(sx_onnx_conformance(dir, 1e-4, 1e-6, NULL, &r), SX_OK, "%s: %s", cases[i],
                     sx_last_error());
        cr_assert_eq(r.cases, 1, "%s", cases[i]);
        cr_assert_eq(r.passed, 1, "%s: refused or failed", cases[i]);
    }
}

Test(onnx_node_ops, index_ops_match_onnx)
{
    const char *cases[] = {"test_gather_elements_negative_indices",
                           "test_gathernd_example_int32_batch_dim1",
                           "test_scatter_elements_with_duplicate_indices",
                           "test_scatter_elements_with_negative_indices",
                           "test_scatter_with_axis",
                           "test_scatternd_add",
                           "test_scatternd_multiply",
                           "test_onehot_with_negative_axis",
                           "test_compress_negative_axis",
                           "test_compress_default_axis",
                           "test_reversesequence_batch",
                           "test_depthtospace_crd_mode_example",
                           "test_depthtospace_example",
                           "test_spacetodepth_example"};
    check_cases(cases, sizeof cases / sizeof *cases);
}

Test(onnx_node_ops, losses_match_onnx)
{
    const char *cases[] = {"test_nllloss_NCd1_mean_weight_negative_ii",
                           "test_nllloss_NCd1d2d3_sum_weight_high_ii",
                           "test_nllloss_NCd1d2d3d4d5_none_no_weight",
                           "test_sce_mean_weight_ii_4d_log_prob",
                           "test_sce_none_weights",
                           "test_sce_NCd1d2d3_sum_weight_high_ii_expanded"};
    check_cases(cases, sizeof cases / sizeof *cases);
}

Test(onnx_node_ops, math_ops_match_onnx)
{
    const char *cases[] = {"test_sinh",
                           "test_cosh",
                           "test_asinh",
                           "test_acosh",
                           "test_atanh",
                           "test_asin",
                           "test_acos",
                           "test_atan",
                           "test_mod_mixed_sign_float32",
                           "test_shrink_soft",
                           "test_celu",
                           "test_isinf_negative",
                           "test_isnan",
                           "test_tril_neg",
                           "test_triu_out_pos",
                           "test_cumsum_1d_reverse_exclusive",
                           "test_cumsum_2d_negative_axis",
                           "test_hardmax_one_hot",
                           "test_hardmax_axis_0",
                           "test_top_k_smallest",
                           "test_top_k_negative_axis",
                           "test_eyelike_with_dtype",
                           "test_hannwindow_symmetric",
                           "test_blackmanwindow",
                           "test_det_nd",
                           "test_bitshift_right_uint16",
                           "test_lrn",
                           "test_mvn",
                           "test_reduce_log_sum_desc_axes",
                           "test_range_float_type_positive_delta",
                           "test_einsum_batch_diagonal",
                           "test_einsum_batch_matmul",
                           "test_einsum_inner_prod",
                           "test_einsum_sum",
                           "test_einsum_transpose"};
    check_cases(cases, sizeof cases / sizeof *cases);
}

Test(onnx_node_ops, quantisation_uint64_and_float_to_int_casts_match_onnx)
{
    const char *cases[] = {"test_quantizelinear_axis",
                           "test_dequantizelinear_axis",
                           "test_dynamicquantizelinear_min_adjusted",
                           "test_dynamicquantizelinear_max_adjusted_expanded",
                           "test_bitshift_left_uint64",
                           "test_mod_uint64",
                           "test_pow_types_float32_uint64"};
    check_cases(cases, sizeof cases / sizeof *cases);
}

/* Imported on its own (no data set), an integer graph input that must be known is refused with
 * node, op and reason. */
static void check_refused(const char *name, const char *op, const char *what)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s/model.onnx", NODE_TESTS, name);
    sx_onnx_graph *og = (sx_onnx_graph *)1;
    cr_assert_eq(sx_onnx_graph_import(path, NULL, &og), SX_E_UNSUPPORTED, "%s", name);
    cr_assert_null(og);
    const char *e = sx_last_error();
    cr_assert(strstr(e, "node") != NULL && strstr(e, op) != NULL && strstr(e, what) != NULL, "%s",
              e);
}

Test(onnx_node_ops, indices_computed_by_the_graph_are_refused)
{
    if (!have_node_tests())
        cr_skip_test("libonnx-testdata is not installed");
    check_refused("test_gather_elements_0", "GatherElements", "computed by the graph");
    check_refused("test_scatternd", "ScatterND", "computed by the graph");
    check_refused("test_nllloss_NC", "NegativeLogLikelihoodLoss", "import time");
    check_refused("test_bitshift_left_uint8", "BitShift", "import time");
    /* refusals of a graph input or of the model name the first node that reads it */
    check_refused("test_sequence_insert_at_back", "SequenceInsert", "not a tensor");
    check_refused("test_strnormalizer_nostopwords_nochangecase", "StringNormalizer", "STRING");
    check_refused("test_adam", "Adam", "no opset of the default domain");
}

/* A copy of test_gather_elements_0 whose first index (of an axis of size 2) is 5. */
Test(onnx_node_ops, an_index_out_of_range_is_a_range_error)
{
    if (!have_node_tests())
        cr_skip_test("libonnx-testdata is not installed");
    char dir[256], cmd[800];
    snprintf(dir, sizeof dir, "/tmp/strix_test_node_ops_%ld", (long)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s/test_gather_elements_0 %s", dir, NODE_TESTS,
             dir);
    cr_assert_eq(system(cmd), 0);
    char pb[320];
    snprintf(pb, sizeof pb, "%s/test_data_set_0/input_1.pb", dir);
    FILE *f = fopen(pb, "r+b");
    cr_assert_not_null(f);
    cr_assert_eq(fseek(f, 17, SEEK_SET), 0); /* the first int64 of raw_data */
    cr_assert_eq(fputc(5, f), 5);
    cr_assert_eq(fclose(f), 0);
    char *log = NULL;
    size_t len = 0;
    FILE *lf = open_memstream(&log, &len);
    sx_onnx_conformance_report r;
    cr_assert_eq(sx_onnx_conformance(dir, 1e-4, 1e-6, lf, &r), SX_E_STATE);
    fclose(lf);
    cr_assert_eq(r.failed, 1);
    cr_assert(strstr(log, "GatherElements") != NULL && strstr(log, "out of range") != NULL, "%s",
              log);
    free(log);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
