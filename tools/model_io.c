/* model_io.c: a model's inputs and outputs as the `strix` tool shows and writes them (tool.h's
 * tool_io): names, shapes without the batch axis, and each output's place in a row of the
 * model's flat result. */
#include "tool.h"

#include <string.h>

static void part(tool_part *p, const char *name, int rank, const int64_t *shape)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->rank = rank;
    memcpy(p->shape, shape, (size_t)rank * sizeof *shape);
}

/* A .sxm model's (or a compiled one's) parts from its accessors. */
static void native_io(sx_nn_model *m, tool_io *io)
{
    io->n_out = sx_nn_model_n_outputs(m);
    for (int k = 0; k < io->n_out; k++) {
        int r = 0;
        const int64_t *s = NULL;
        const char *name = sx_nn_model_output(m, k, &r, &s);
        part(&io->out[k], name, r, s);
    }
    io->n_in = sx_nn_model_n_inputs(m);
    for (int k = 0; k < io->n_in; k++) {
        int r = 0;
        const int64_t *s = sx_nn_model_input(m, k, &r);
        char name[16];
        snprintf(name, sizeof name, io->n_in == 1 ? "x" : "x%d", k);
        part(&io->in[k], name, r, s);
    }
}

/* The parts' sizes and offsets; they must fill a row of `row` elements. */
static sx_status place(const char *path, const char *what, int n, tool_part *p, int64_t row)
{
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        p[k].size = sx_shape_size(p[k].rank, p[k].shape);
        p[k].offset = off;
        off += p[k].size;
    }
    if (off != row)
        return sx_error(SX_E_FORMAT, "%s: the %s hold %lld elements per example, the model %lld",
                        path, what, (long long)off, (long long)row);
    return SX_OK;
}

static int64_t row(const sx_nn_model *m, bool output)
{
    return output ? sx_shape_size(sx_nn_model_output_rank(m), sx_nn_model_output_shape(m))
                  : sx_shape_size(sx_nn_model_input_rank(m), sx_nn_model_input_shape(m));
}

sx_status tool_load_model_io(const char *path, int64_t batch, sx_nn_model **m, tool_io *io)
{
    memset(io, 0, sizeof *io);
    *m = NULL;
    SX_TRY(tool_load_model(path, batch, m));
    sx_status s = SX_OK;
    if (tool_file_kind(path) == TOOL_FILE_ONNX) /* the names the imported model kept */
        s = tool_onnx_io(*m, io);
    else
        native_io(*m, io);
    if (s == SX_OK)
        s = place(path, "outputs", io->n_out, io->out, row(*m, true));
    if (s == SX_OK)
        s = place(path, "inputs", io->n_in, io->in, row(*m, false));
    if (s != SX_OK) {
        sx_nn_model_free(*m);
        *m = NULL;
        return s;
    }
    /* (n, classes): one output of rank 1 that is not a regression's (targets scaled, or a
     * single value) */
    sx_nn_preprocess pp = sx_nn_model_preprocess(*m);
    io->classes = io->n_out == 1 && io->out[0].rank == 1 && pp.target_size == 0 &&
                  (pp.n_classes > 0 || io->out[0].size >= 2);
    return SX_OK;
}

int tool_io_find(const tool_io *io, const char *name)
{
    for (int k = 0; k < io->n_out; k++)
        if (strcmp(io->out[k].name, name) == 0)
            return k;
    return -1;
}
