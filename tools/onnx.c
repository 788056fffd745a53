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

/* The conformance runner (sx_onnx_conformance) over the cases under dir: its report (failing
 * cases, a table per op, the result line) on stdout; fails when a supported case failed. */
int tool_onnx_test(const char *dir, double rtol, double atol)
{
    sx_onnx_conformance_report r;
    sx_status s = sx_onnx_conformance(dir, rtol, atol, stdout, &r);
    if (s == SX_E_STATE)
        return tool_fail("onnx-test", "%d of %d supported cases failed", r.failed, r.supported);
    if (s != SX_OK)
        return tool_fail_sx("onnx-test", dir);
    return TOOL_OK;
}
