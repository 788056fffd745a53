/* no_onnx.c: the `strix` tool built without the onnx module (onnx.c is compiled in its place
 * when it is built): every ONNX path is refused with SX_E_UNSUPPORTED, saying so. */
#include "tool.h"

static sx_status refuse(const char *path)
{
    return sx_error(SX_E_UNSUPPORTED,
                    "%s: this strix was built without ONNX support (the onnx "
                    "module needs libonnx-dev and libprotobuf-c-dev)",
                    path);
}

bool tool_have_onnx(void)
{
    return false;
}

sx_status tool_onnx_import(const char *path, int64_t batch, bool optimise, sx_nn_model **out)
{
    (void)batch;
    (void)optimise;
    *out = NULL;
    return refuse(path);
}

sx_status tool_onnx_export(sx_nn_model *m, const char *path)
{
    (void)m;
    return refuse(path);
}

int tool_onnx_test(const char *dir, double rtol, double atol)
{
    (void)rtol;
    (void)atol;
    (void)refuse(dir);
    return tool_fail_sx("onnx-test", "cannot run the conformance tests");
}

sx_status tool_onnx_io(const sx_nn_model *m, tool_io *io)
{
    (void)m;
    (void)io;
    return refuse("tool_onnx_io");
}
