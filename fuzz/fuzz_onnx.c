/* fuzz_onnx.c: libFuzzer target for the ONNX importer (onnx/): each input is imported from
 * memory as a graph. A failure must leave no graph and a message naming the input; a success
 * must give outputs of the graph, which is then optimised, frozen and evaluated on zero inputs
 * when its values are small (so the shapes the importer inferred are judged by the kernels).
 * ASan/UBSan catch the rest. Build and run: fuzz/CMakeLists.txt. */
#include <sx_onnx.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_onnx: check failed: %s (%s:%d); last error: %s\n", #cond,        \
                    __FILE__, __LINE__, sx_last_error());                                          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Evaluate the graph on zeros when every node's value is small. */
static void run(sx_onnx_graph *og)
{
    sx_cg_graph *g = sx_onnx_graph_cg(og);
    int64_t total = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        total += n != NULL ? sx_cg_node_size(n) : 0;
    }
    if (total > (1 << 20))
        return;
    for (int i = 0; i < sx_onnx_graph_n_inputs(og); i++) {
        sx_cg_node *x = sx_onnx_graph_input(og, i);
        sx_tensor *t = NULL;
        if (sx_tensor_zeros(sx_cg_node_dtype(x), sx_cg_node_rank(x), sx_cg_node_shape(x), &t) !=
            SX_OK)
            return;
        sx_status s = sx_cg_input_set(g, x, t, SX_CG_COPY);
        sx_tensor_free(t);
        CHECK(s == SX_OK);
    }
    int n = sx_onnx_graph_n_outputs(og);
    sx_cg_node *outs[64];
    if (n > 64)
        return;
    for (int i = 0; i < n; i++)
        outs[i] = sx_onnx_graph_output(og, i);
    if (sx_cg_optimise(g, n, outs, NULL, NULL) == SX_OK && sx_cg_freeze(g, n, outs) == SX_OK &&
        sx_cg_eval(g, n, outs) == SX_OK)
        for (int i = 0; i < n; i++)
            CHECK(sx_cg_value(outs[i]) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sx_onnx_graph *og = (sx_onnx_graph *)&og;
    sx_status s = sx_onnx_graph_import_buffer(data, size, "fuzz.onnx", NULL, &og);
    if (s != SX_OK) {
        CHECK(og == NULL);
        CHECK(strncmp(sx_last_error(), "fuzz.onnx", 9) == 0);
        return 0;
    }
    CHECK(og != NULL && sx_onnx_graph_n_outputs(og) >= 1);
    for (int i = 0; i < sx_onnx_graph_n_outputs(og); i++)
        CHECK(sx_onnx_graph_output(og, i) != NULL && sx_onnx_graph_output_name(og, i) != NULL);
    run(og);
    sx_onnx_graph_free(og);
    return 0;
}
