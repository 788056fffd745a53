/* info.c: `strix info FILE...`: what a file holds. A model (.sxm or .onnx): its input and
 * outputs (each by name with its shape), dtype, input scale, weights and graph (nodes per op); an
 * array (.npy or IDX): its element type, shape and statistics (min, max, mean, std, and NaN/Inf
 * counts). */
#include "tool.h"

#include <math.h>
#include <string.h>

static const char *const info_help =
    "usage: strix info FILE...\n"
    "Describe each FILE: a model (.sxm, or .onnx when built with ONNX support): its input\n"
    "(all inputs as one row), dtype, classes (for an (n, classes) output), input scale, then\n"
    "every input and output by name with its shape (without the batch axis), the weights and\n"
    "the graph's nodes per op; an array (.npy or IDX, raw or gzip): element type, shape, min,\n"
    "max, mean, std, and NaN/Inf counts.\n";

/* Ops of the model's graph with their counts, most frequent first, on one line. */
static void print_ops(const sx_cg_graph *g, int64_t *weights)
{
    int64_t count[SX_OP_COUNT];
    memset(count, 0, sizeof count);
    *weights = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        const sx_cg_node *n = sx_cg_graph_node(g, i);
        if (n == NULL)
            continue;
        count[sx_cg_node_op(n)]++;
        if (sx_cg_node_op(n) == SX_OP_PARAM || sx_cg_node_op(n) == SX_OP_CONST)
            *weights += sx_cg_node_size(n);
    }
    printf("  ops:");
    for (;;) {
        int best = -1;
        for (int k = 0; k < SX_OP_COUNT; k++)
            if (count[k] > 0 && (best < 0 || count[k] > count[best]))
                best = k;
        if (best < 0)
            break;
        printf(" %s=%lld", sx_cg_op_name((sx_cg_op)best), (long long)count[best]);
        count[best] = 0;
    }
    printf("\n");
}

/* One line per input or output: "  output 0 'y': (8,8,3)". */
static void print_parts(const char *what, int n, const tool_part *p, bool classes)
{
    for (int k = 0; k < n; k++) {
        char shape[160];
        printf("  %s %d '%s': %s%s\n", what, k, p[k].name,
               sx_shape_str(p[k].rank, p[k].shape, shape, sizeof shape),
               classes ? " (classes)" : "");
    }
}

static int info_model(const char *path, tool_file kind)
{
    sx_nn_model *m = NULL;
    tool_io io;
    if (tool_load_model_io(path, 1, &m, &io) != SX_OK)
        return tool_fail("info", "%s", sx_last_error());
    char shape[160];
    printf("%s: %s model\n", path, kind == TOOL_FILE_SXM ? "strix" : "ONNX");
    if (kind == TOOL_FILE_SXM) {
        sx_cg_file *f = NULL;
        if (sx_cg_file_read(path, &f) == SX_OK && sx_cg_file_meta(f, "network") != NULL)
            printf("  network: %s\n", sx_cg_file_meta(f, "network"));
        sx_cg_file_free(f);
    }
    printf(
        "  input: %s %s (without the batch axis)\n", sx_dtype_name(sx_nn_model_dtype(m)),
        sx_shape_str(sx_nn_model_input_rank(m), sx_nn_model_input_shape(m), shape, sizeof shape));
    if (io.classes)
        printf("  outputs: %lld\n", (long long)io.out[0].size);
    sx_nn_preprocess pp = sx_nn_model_preprocess(m);
    sx_nn_preprocess_print(&pp, stdout);
    print_parts("input", io.n_in, io.in, false);
    print_parts("output", io.n_out, io.out, io.classes);
    const sx_cg_graph *g = sx_nn_model_graph(m);
    sx_cg_stats st = sx_cg_graph_stats(g);
    int64_t weights = 0;
    printf("  graph (batch 1, optimised): nodes=%lld edges=%lld\n", (long long)st.nodes,
           (long long)st.edges);
    print_ops(g, &weights);
    printf("  weights: %lld values\n", (long long)weights);
    sx_nn_model_free(m);
    return TOOL_OK;
}

static int info_array(const char *path)
{
    tool_array a;
    if (tool_array_read(path, &a) != SX_OK)
        return tool_fail("info", "%s", sx_last_error());
    char shape[200];
    double lo = INFINITY, hi = -INFINITY, sum = 0, sq = 0;
    int64_t finite = 0, nan = 0, inf = 0;
    for (int64_t i = 0; i < a.count; i++) {
        double v = a.v[i];
        if (isnan(v)) {
            nan++;
            continue;
        }
        if (isinf(v)) {
            inf++;
            continue;
        }
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        sum += v;
        finite++;
    }
    double mean = finite > 0 ? sum / (double)finite : (double)NAN;
    for (int64_t i = 0; i < a.count; i++)
        if (isfinite(a.v[i]))
            sq += (a.v[i] - mean) * (a.v[i] - mean);
    printf("%s: %s %s %s, %lld elements\n", path,
           tool_file_kind(path) == TOOL_FILE_NPY ? "npy" : "IDX", a.type,
           sx_shape_str(a.rank, a.dims, shape, sizeof shape), (long long)a.count);
    if (finite > 0)
        printf("  min=%.9g max=%.9g mean=%.9g std=%.9g", lo, hi, mean, sqrt(sq / (double)finite));
    else
        printf("  no finite elements");
    printf(" nan=%lld inf=%lld\n", (long long)nan, (long long)inf);
    tool_array_free(&a);
    return TOOL_OK;
}

int tool_cmd_info(int argc, char **argv)
{
    int files = 0, status = TOOL_OK;
    for (int i = 1; i < argc; i++) {
        if (tool_is_help(argv[i])) {
            fputs(info_help, stdout);
            return TOOL_OK;
        }
        if (argv[i][0] == '-' && argv[i][1] != '\0')
            return tool_usage("info", "unknown option %s", argv[i]);
    }
    for (int i = 1; i < argc; i++) {
        tool_file k = tool_file_kind(argv[i]);
        int r = k == TOOL_FILE_SXM || k == TOOL_FILE_ONNX ? info_model(argv[i], k)
                : k == TOOL_FILE_IMAGE
                    ? tool_fail("info", "%s: an image (info reads models and arrays)", argv[i])
                    : info_array(argv[i]); /* .npy, IDX, or the reader's error */
        status = r != TOOL_OK ? r : status;
        files++;
    }
    if (files == 0)
        return tool_usage("info", "no FILE given");
    return status;
}
