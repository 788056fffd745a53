/* onnx.c: the `strix` tool's link to the onnx module (include/strix/sx_onnx.h), compiled only when
 * strix is built with it (STRIX_HAVE_ONNX); no_onnx.c stands in otherwise. Kept small: import,
 * export and the conformance runner, each one call. */
#include "tool.h"

#include <sx_onnx.h>

#include <string.h>

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

/* One graph input or output as a part: its name and shape without the batch axis. */
static void onnx_part(const char *name, int rank, const int64_t *shape, tool_part *p)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->rank = rank;
    if (rank > 0)
        memcpy(p->shape, shape, (size_t)rank * sizeof *p->shape);
}

sx_status tool_onnx_io(const sx_nn_model *m, tool_io *io)
{
    io->n_in = sx_nn_model_n_inputs(m);
    io->n_out = sx_nn_model_n_outputs(m);
    for (int k = 0; k < io->n_in + io->n_out; k++) {
        bool in = k < io->n_in;
        int j = in ? k : k - io->n_in, r = 0;
        const int64_t *shape = NULL;
        const char *name =
            in ? sx_onnx_model_input(m, j, &r, &shape) : sx_onnx_model_output(m, j, &r, &shape);
        if (name == NULL)
            return sx_error(SX_E_STATE, "tool_onnx_io: not a model sx_onnx_import made");
        onnx_part(name, r, shape, in ? &io->in[j] : &io->out[j]);
        if (in)
            io->in[j].integer = sx_onnx_model_input_integer(m, j);
    }
    return SX_OK;
}
