/* convert.c: `strix convert IN OUT`: a model from one format to the other, .onnx -> .sxm and
 * .sxm -> .onnx (the ONNX side needs strix built with its onnx module); .sxm -> .sxm re-saves a
 * model's inference graph. */
#include "tool.h"

#include <string.h>

static const char *const convert_help =
    "usage: strix convert IN OUT\n"
    "Convert a model: IN.onnx -> OUT.sxm, IN.sxm -> OUT.onnx (ONNX needs strix built with its\n"
    "onnx module), or IN.sxm -> OUT.sxm (the inference graph saved again). OUT is written to a\n"
    "temporary name, then renamed.\n";

int tool_cmd_convert(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (tool_is_help(argv[i])) {
            fputs(convert_help, stdout);
            return TOOL_OK;
        }
        if (argv[i][0] == '-' && argv[i][1] != '\0')
            return tool_usage("convert", "unknown option %s", argv[i]);
        if (in == NULL)
            in = argv[i];
        else if (out == NULL)
            out = argv[i];
        else
            return tool_usage("convert", "unexpected argument %s", argv[i]);
    }
    if (in == NULL || out == NULL)
        return tool_usage("convert", "want IN and OUT");
    bool to_onnx = tool_has_ext(out, ".onnx");
    if (!to_onnx && !tool_has_ext(out, ".sxm"))
        return tool_usage("convert", "OUT %s: the name must end in .sxm or .onnx", out);
    if (to_onnx && tool_file_kind(in) == TOOL_FILE_ONNX)
        return tool_usage("convert", "IN and OUT are both .onnx");
    sx_nn_model *m = NULL;
    sx_status ls = tool_file_kind(in) == TOOL_FILE_ONNX ? tool_onnx_import(in, 1, false, &m)
                                                        : tool_load_model(in, 1, &m);
    if (ls != SX_OK)
        return tool_fail("convert", "%s", sx_last_error());
    sx_status s = to_onnx ? tool_onnx_export(m, out) : sx_nn_model_save(m, out);
    sx_nn_model_free(m);
    if (s != SX_OK)
        return tool_fail("convert", "%s", sx_last_error());
    printf("%s -> %s\n", in, out);
    return TOOL_OK;
}
