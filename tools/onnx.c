/* onnx.c: the `strix` tool's link to the onnx module (onnx/sx_onnx.h), compiled only when
 * strix is built with it (STRIX_HAVE_ONNX); no_onnx.c stands in otherwise. Kept small: import,
 * export and the conformance runner, each one call. */
#include "tool.h"

#include <sx_onnx.h>

bool tool_have_onnx(void)
{
    return true;
}

sx_status tool_onnx_import(const char *path, int64_t batch, bool optimise, sx_nn_model **out)
{
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.batch = batch;
    p.optimise = optimise;
    return sx_onnx_import(path, &p, out);
}

sx_status tool_onnx_export(sx_nn_model *m, const char *path)
{
    return sx_onnx_export(m, path);
}

/* The conformance runner over a folder of ONNX backend test cases (model.onnx and
 * test_data_set_*), assumed to be onnx21's sx_onnx_test_dir: it runs every case, prints one
 * line per case to `log` when not NULL, and fills the counts. */
int tool_onnx_test(const char *dir, bool verbose)
{
    sx_onnx_test_summary r;
    sx_status s = sx_onnx_test_dir(dir, verbose ? stdout : NULL, &r);
    if (s != SX_OK)
        return tool_fail_sx("onnx-test", dir);
    printf("result: cases=%lld supported=%lld passed=%lld failed=%lld\n", (long long)r.cases,
           (long long)r.supported, (long long)r.passed, (long long)r.failed);
    return r.failed == 0 ? TOOL_OK : TOOL_FAIL;
}
