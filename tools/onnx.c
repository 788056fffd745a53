/* onnx.c: the `strix` tool's link to the onnx module (onnx/sx_onnx.h), compiled only when
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

/* One graph input or output node as a part: its name and shape without the batch axis. */
static void onnx_part(sx_cg_node *n, const char *name, tool_part *p)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name != NULL ? name : "?");
    int r = sx_cg_node_rank(n);
    p->rank = r > 0 ? r - 1 : 0;
    if (p->rank > 0)
        memcpy(p->shape, sx_cg_node_shape(n) + 1, (size_t)p->rank * sizeof *p->shape);
}

sx_status tool_onnx_io(const char *path, tool_io *io)
{
    sx_onnx_import_params p = sx_onnx_import_params_default();
    p.optimise = false;
    sx_onnx_graph *og = NULL;
    SX_TRY(sx_onnx_graph_import(path, &p, &og));
    int ni = sx_onnx_graph_n_inputs(og), no = sx_onnx_graph_n_outputs(og);
    io->n_in = ni < SX_NN_MAX_HEADS ? ni : SX_NN_MAX_HEADS;
    io->n_out = no < SX_NN_MAX_HEADS ? no : SX_NN_MAX_HEADS;
    for (int k = 0; k < io->n_in; k++)
        onnx_part(sx_onnx_graph_input(og, k), sx_onnx_graph_input_name(og, k), &io->in[k]);
    for (int k = 0; k < io->n_out; k++)
        onnx_part(sx_onnx_graph_output(og, k), sx_onnx_graph_output_name(og, k), &io->out[k]);
    sx_onnx_graph_free(og);
    return SX_OK;
}
