/* strix.c: the `strix` command-line tool: one command per file of tools/ (info.c, predict.c,
 * convert.c, dot.c, bench.c, train: mnist_ref.c, onnx-test: onnx.c); this file picks the
 * command and answers --help and --version. Exit status: 0 done, 1 a failure, 2 a usage error. */
#include "mnist_ref.h"
#include "tool.h"

#include <string.h>

#ifndef STRIX_VERSION
#define STRIX_VERSION "unknown"
#endif

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *what;
} commands[] = {
    {"info", tool_cmd_info, "describe a model (.sxm, .onnx) or an array (.npy, IDX)"},
    {"predict", tool_cmd_predict, "run a model over a .npy, IDX or image file"},
    {"convert", tool_cmd_convert, "convert a model: .onnx <-> .sxm"},
    {"dot", tool_cmd_dot, "a model's inference graph as Graphviz DOT"},
    {"bench", tool_cmd_bench, "inference latency and throughput of a model"},
    {"train", tool_cmd_train, "train the MNIST reference CNN (as examples/mnist_train)"},
    {"onnx-test", tool_cmd_onnx_test, "run the ONNX backend conformance tests of a folder"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void help(FILE *f)
{
    fprintf(f, "usage: strix COMMAND [ARGS...]    (strix COMMAND --help for its options)\n"
               "       strix --version\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].what);
}

int tool_cmd_train(int argc, char **argv)
{
    return strix_mnist_train("strix train", argc, argv);
}

static const char *const onnx_test_help =
    "usage: strix onnx-test DIR [--rtol R] [--atol A]\n"
    "Run the ONNX backend node tests under DIR (each case a folder: model.onnx and\n"
    "test_data_set_*/input_*.pb, output_*.pb, as Debian's libonnx-testdata installs them under\n"
    "/usr/include/onnx/backend/test/data/node) through strix's importer: the failing and\n"
    "unsupported cases, a table per op (found / supported / passed), and\n"
    "  result: cases=N supported=S passed=P failed=F\n"
    "A case passes when every output is within A + R |want| (1e-6, 1e-4). Fails when a\n"
    "supported case fails. Needs strix built with its onnx module.\n";

int tool_cmd_onnx_test(int argc, char **argv)
{
    const char *dir = NULL;
    double rtol = 1e-4, atol = 1e-6;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (tool_is_help(a)) {
            fputs(onnx_test_help, stdout);
            return TOOL_OK;
        } else if (strcmp(a, "--rtol") == 0)
            ok = tool_parse_double(v, &rtol) && rtol >= 0, i++;
        else if (strcmp(a, "--atol") == 0)
            ok = tool_parse_double(v, &atol) && atol >= 0, i++;
        else if (a[0] == '-' && a[1] != '\0')
            return tool_usage("onnx-test", "unknown option %s", a);
        else if (dir == NULL)
            dir = a;
        else
            return tool_usage("onnx-test", "unexpected argument %s", a);
        if (!ok)
            return tool_usage("onnx-test", "bad or missing value for %s", a);
    }
    if (dir == NULL)
        return tool_usage("onnx-test", "no DIR");
    return tool_onnx_test(dir, rtol, atol);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        help(stderr);
        return TOOL_USAGE;
    }
    if (tool_is_help(argv[1])) {
        help(stdout);
        return TOOL_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("strix %s (onnx: %s, isa: %s)\n", STRIX_VERSION, tool_have_onnx() ? "yes" : "no",
               sx_isa_name());
        return TOOL_OK;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "strix: unknown command '%s' (strix --help lists them)\n", argv[1]);
    return TOOL_USAGE;
}
