/* model_io.c: a model's inputs and outputs as the `strix` tool shows and writes them (tool.h's
 * tool_io): names, shapes without the batch axis, and each output's place in a row of the
 * model's flat result. */
#include "tool.h"

#include <string.h>
#include <unistd.h>

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

/* ---------------------------------------------------------------- inputs by name */

/* "NAME=FILE" names the input (unless the whole text is a file that exists); else FILE. */
static const char *spec_file(const char *spec, char *name, size_t cap)
{
    const char *eq = strchr(spec, '=');
    name[0] = '\0';
    if (eq == NULL || eq == spec || access(spec, F_OK) == 0)
        return spec;
    snprintf(name, cap, "%.*s", (int)(eq - spec), spec);
    return eq + 1;
}

/* "'a' (3,224,224), 'ids' (16)": the model's inputs for messages. */
static const char *in_list(const tool_io *io, char *buf, size_t cap)
{
    buf[0] = '\0';
    for (int k = 0; k < io->n_in; k++) {
        char s[160];
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s'%s' %s", k ? ", " : "", io->in[k].name,
                 sx_shape_str(io->in[k].rank, io->in[k].shape, s, sizeof s));
    }
    return buf;
}

static int in_find(const tool_io *io, const char *name)
{
    for (int k = 0; k < io->n_in; k++)
        if (strcmp(io->in[k].name, name) == 0)
            return k;
    return -1;
}

/* Which file feeds each input (file[k] for input k): named specs first, then the unnamed ones
 * in the inputs' order. */
static sx_status assign(const char *model, const tool_io *io, int n_specs, const char *const *specs,
                        const char **file)
{
    char list[1200], name[128];
    for (int pass = 0, next = 0; pass < 2; pass++)
        for (int i = 0; i < n_specs; i++) {
            const char *f = spec_file(specs[i], name, sizeof name);
            if ((name[0] != '\0') != (pass == 0))
                continue;
            int k = pass == 0 ? in_find(io, name) : next;
            while (pass == 1 && k < io->n_in && file[k] != NULL)
                k++;
            if (pass == 0 && k < 0)
                return sx_error(SX_E_ARG, "%s has no input named '%s' (its inputs: %s)", model,
                                name, in_list(io, list, sizeof list));
            if (pass == 1 && k == io->n_in)
                return sx_error(SX_E_ARG, "%d inputs given, %s takes %d (its inputs: %s)", n_specs,
                                model, io->n_in, in_list(io, list, sizeof list));
            if (file[k] != NULL)
                return sx_error(SX_E_ARG, "input '%s' given twice", name);
            file[k] = f;
            next = pass == 1 ? k + 1 : next;
        }
    for (int k = 0; k < io->n_in; k++)
        if (file[k] == NULL)
            return sx_error(SX_E_ARG,
                            "no --input for '%s' (%s's inputs: %s; give each as --input "
                            "NAME=FILE)",
                            io->in[k].name, model, in_list(io, list, sizeof list));
    return SX_OK;
}

/* The number of examples in array a for input p: a holds one example (p's shape) or (n, p's
 * shape). */
static sx_status count_examples(const char *file, const tool_part *p, const tool_array *a,
                                int64_t *n)
{
    if (sx_shape_equal(a->rank, a->dims, p->rank, p->shape))
        *n = 1;
    else if (a->rank == p->rank + 1 && sx_shape_equal(p->rank, a->dims + 1, p->rank, p->shape))
        *n = a->dims[0];
    else {
        char got[160], want[160], each[170];
        sx_shape_str(p->rank, p->shape, want, sizeof want);
        snprintf(each, sizeof each, "(n%s%s", p->rank > 0 ? "," : ")", p->rank > 0 ? want + 1 : "");
        return sx_error(SX_E_SHAPE, "input '%s': %s has shape %s, want %s or %s", p->name, file,
                        sx_shape_str(a->rank, a->dims, got, sizeof got), each, want);
    }
    return SX_OK;
}

/* arr[k]'s examples into a's rows at input k's offset. */
static void pack(const tool_io *io, const tool_array *arr, tool_array *a)
{
    int64_t row = a->dims[1];
    for (int k = 0; k < io->n_in; k++)
        for (int64_t i = 0; i < a->dims[0]; i++)
            memcpy(a->v + i * row + io->in[k].offset, arr[k].v + i * io->in[k].size,
                   (size_t)io->in[k].size * sizeof *a->v);
}

sx_status tool_inputs_read(const char *model, const tool_io *io, int n_specs,
                           const char *const *specs, tool_array *a)
{
    memset(a, 0, sizeof *a);
    const char *file[SX_NN_MAX_HEADS] = {NULL};
    tool_array arr[SX_NN_MAX_HEADS];
    memset(arr, 0, sizeof arr);
    SX_TRY(assign(model, io, n_specs, specs, file));
    sx_status s = SX_OK;
    int64_t n = 0, row = 0;
    bool bytes = true;
    for (int k = 0; s == SX_OK && k < io->n_in; k++) {
        int64_t nk = 0;
        s = tool_array_read(file[k], &arr[k]);
        if (s == SX_OK)
            s = count_examples(file[k], &io->in[k], &arr[k], &nk);
        if (s == SX_OK && k > 0 && nk != n)
            s = sx_error(SX_E_SHAPE, "input '%s' has %lld examples, '%s' %lld", io->in[k].name,
                         (long long)nk, io->in[0].name, (long long)n);
        n = nk;
        row += io->in[k].size;
        bytes = bytes && arr[k].bytes;
    }
    if (s == SX_OK && (a->v = sx_alloc((size_t)(n * row > 0 ? n * row : 1) * sizeof *a->v)) == NULL)
        s = sx_error(SX_E_NOMEM, "out of memory");
    if (s == SX_OK) {
        a->rank = 2;
        a->dims[0] = n;
        a->dims[1] = row;
        a->count = n * row;
        a->bytes = bytes;
        a->type = arr[0].type;
        pack(io, arr, a);
    }
    for (int k = 0; k < io->n_in; k++)
        tool_array_free(&arr[k]);
    return s;
}
