/* predict.c: `strix predict MODEL --input [NAME=]FILE... [--output FILE.npy] [--output-name NAME]
 * [--batch N] [--scale X]`: run a model over the examples of a .npy or IDX file (or one file per
 * input, by name), or over one PNG/JPEG image, in batches; write each output as an (n, output
 * shape...) .npy file (one file per output, or the one named), or print each example's best class
 * for an (n, classes) output and each output's shape and range otherwise. */
#include "tool.h"

#include <string.h>
#include <unistd.h>

static const char *const predict_help =
    "usage: strix predict MODEL --input [NAME=]FILE... [--output FILE.npy]\n"
    "                     [--output-name NAME] [--batch N] [--scale X] [--no-header]\n"
    "Run MODEL (.sxm, or .onnx when built with ONNX support) over the examples in FILE:\n"
    "  a .npy or IDX file (raw or gzip) of shape (n, example...) or (example...), the example\n"
    "  having as many elements as the model's input (a model with several inputs takes them as\n"
    "  one row per example, each input's elements after the previous one's: strix info lists\n"
    "  them); or one image (PNG, JPEG, PGM/PPM, BMP, GIF, TGA), decoded and resized to the\n"
    "  model's (h, w, c) input with c 1 or 3 (as the model was trained: its resize mode); or a\n"
    "  CSV table (FILE.csv, a header line first unless --no-header): one example per row, the\n"
    "  columns chosen by the model's feature names (a model trained on a CSV file knows them;\n"
    "  a label or id column is ignored), else every column but a last label column.\n"
    "  A model with several inputs also takes one .npy or IDX file per input, --input\n"
    "  NAME=FILE for each (strix info lists the names; files without NAME= go to the other\n"
    "  inputs in order): each (n, that input's shape...) or one example, the same n for all;\n"
    "  integer arrays (int64 token ids) are read as numbers.\n"
    "  The data are given raw (pixel values 0..255, a table's own values): the model applies\n"
    "  its preprocessing itself (strix info shows it). A classifier prints its class names.\n"
    "  --output FILE.npy  write the outputs in the model's dtype, each as the full array\n"
    "                     (n, output shape...): with one output (or --output-name) to FILE.npy;\n"
    "                     with several, one file per output, FILE_NAME.npy (e.g. out_boxes.npy)\n"
    "                     Each file is written to a temporary name and renamed when complete.\n"
    "                     Without --output: 'i: class k NAME (score)' per example for an (n,\n"
    "                     classes) output; 'i: v1 v2 ...' per row of a CSV table for outputs of\n"
    "                     up to 16 values; else each output's shape, min, max and mean.\n"
    "  --output-name NAME only the output named NAME (strix info lists the names)\n"
    "  --batch N          examples per run, 1..65536 (64)\n"
    "  --scale X          multiply every element by X before the model (default 1: the model\n"
    "                     applies its own preprocessing to raw data; a model file written\n"
    "                     before version 3 gets its input scale for byte data, u8 arrays and\n"
    "                     images)\n"
    "  --no-header        a CSV input has no header line\n";

typedef struct predict_opts {
    const char *model, *input, *output, *output_name;
    const char *inputs[SX_NN_MAX_HEADS]; /* each --input; input is the first */
    int n_inputs;
    long batch;
    double scale;
    bool has_scale, no_header;
} predict_opts;

static int parse(int argc, char **argv, predict_opts *o)
{
    memset(o, 0, sizeof *o);
    o->batch = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (tool_is_help(a)) {
            fputs(predict_help, stdout);
            return -1;
        } else if (strcmp(a, "--input") == 0) {
            if (o->n_inputs == SX_NN_MAX_HEADS)
                return tool_usage("predict", "more than %d --input", SX_NN_MAX_HEADS);
            ok = (o->inputs[o->n_inputs++] = v) != NULL, i++;
            o->input = o->inputs[0];
        } else if (strcmp(a, "--output") == 0)
            ok = (o->output = v) != NULL, i++;
        else if (strcmp(a, "--output-name") == 0)
            ok = (o->output_name = v) != NULL, i++;
        else if (strcmp(a, "--batch") == 0)
            ok = tool_parse_long(v, 1, 65536, &o->batch), i++;
        else if (strcmp(a, "--scale") == 0)
            ok = o->has_scale = tool_parse_double(v, &o->scale), i++;
        else if (strcmp(a, "--no-header") == 0)
            o->no_header = true;
        else if (a[0] == '-' && a[1] != '\0')
            return tool_usage("predict", "unknown option %s", a);
        else if (o->model == NULL)
            o->model = a;
        else
            return tool_usage("predict", "unexpected argument %s", a);
        if (!ok)
            return tool_usage("predict", "bad or missing value for %s", a);
    }
    if (o->model == NULL || o->input == NULL)
        return tool_usage("predict", "%s", o->model ? "no --input FILE" : "no MODEL");
    if (o->output != NULL && !tool_has_ext(o->output, ".npy"))
        return tool_usage("predict", "--output %s: the name must end in .npy", o->output);
    return TOOL_OK;
}

/* The input as (n, example): a single example has the model's input shape; else the first
 * axis counts examples and the rest must hold as many elements as one example. */
static int examples(const predict_opts *o, sx_nn_model *m, tool_array *a, int64_t *n)
{
    int r = sx_nn_model_input_rank(m);
    const int64_t *is = sx_nn_model_input_shape(m);
    int64_t per = sx_shape_size(r, is);
    char want[160], got[160];
    sx_shape_str(r, is, want, sizeof want);
    sx_shape_str(a->rank, a->dims, got, sizeof got);
    if (sx_shape_equal(a->rank, a->dims, r, is))
        *n = 1;
    else if (a->rank >= 1 && a->dims[0] > 0 && a->count / a->dims[0] == per)
        *n = a->dims[0];
    else
        return tool_fail("predict", "%s: shape %s does not fit the model's input %s", o->input, got,
                         want);
    return TOOL_OK;
}

/* A CSV table (a name ending in .csv): its feature columns, by the model's feature names when
 * it has them (any order; a label or id column ignored), else every column (the label column,
 * the last, left out when the file has one more). */
static int read_csv(const predict_opts *o, sx_nn_model *m, tool_array *a)
{
    sx_nn_preprocess pp = sx_nn_model_preprocess(m);
    int64_t n_in = sx_shape_size(sx_nn_model_input_rank(m), sx_nn_model_input_shape(m));
    sx_ds_csv_params cp = sx_ds_csv_params_default();
    cp.header = !o->no_header;
    const char *const *names = pp.n_features == n_in && cp.header ? pp.feature_names : NULL;
    sx_tensor *t = NULL;
    if (sx_ds_csv_read_x(o->input, &cp, names, n_in, &t) != SX_OK)
        return tool_fail("predict", "%s", sx_last_error());
    memset(a, 0, sizeof *a);
    a->rank = 2;
    a->dims[0] = t->shape[0];
    a->dims[1] = t->shape[1];
    a->count = t->size;
    a->type = "f64";
    a->v = sx_alloc((size_t)t->size * sizeof *a->v);
    if (a->v == NULL) {
        sx_tensor_free(t);
        return tool_fail_sx("predict", "memory");
    }
    memcpy(a->v, t->data, (size_t)t->size * sizeof *a->v);
    sx_tensor_free(t);
    return TOOL_OK;
}

static int read_input(const predict_opts *o, sx_nn_model *m, const tool_io *io, tool_array *a)
{
    /* one file per input, or one named: packed into rows */
    const char *eq = strchr(o->input, '=');
    if (o->n_inputs > 1 || (eq != NULL && eq != o->input && access(o->input, F_OK) != 0)) {
        if (tool_inputs_read(o->model, io, o->n_inputs, o->inputs, a) != SX_OK)
            return tool_fail("predict", "%s", sx_last_error());
        return TOOL_OK;
    }
    if (tool_has_ext(o->input, ".csv"))
        return read_csv(o, m, a);
    if (tool_file_kind(o->input) == TOOL_FILE_IMAGE) {
        const int64_t *is = sx_nn_model_input_shape(m);
        if (sx_nn_model_input_rank(m) != 3 || (is[2] != 1 && is[2] != 3))
            return tool_fail("predict",
                             "%s: an image, but the model's input is not (h, w, c) "
                             "with c 1 or 3",
                             o->input);
        if (tool_image_read(o->input, is[0], is[1], is[2], sx_nn_model_preprocess(m).resize, a) !=
            SX_OK)
            return tool_fail("predict", "%s", sx_last_error());
        return TOOL_OK;
    }
    if (tool_array_read(o->input, a) != SX_OK)
        return tool_fail("predict", "%s", sx_last_error());
    return TOOL_OK;
}

/* Rows [r0, r0 + k) of the input, scaled, through the model into out (n, its result shape). */
static sx_status run_rows(sx_nn_model *m, const tool_array *a, double scale, int64_t r0, int64_t k,
                          sx_tensor *x, sx_tensor *out)
{
    int r = sx_nn_model_input_rank(m);
    int64_t per = sx_shape_size(r, sx_nn_model_input_shape(m)), row = out->size / out->shape[0];
    int64_t xs[SX_MAX_RANK + 1] = {k}, os[SX_MAX_RANK + 1];
    memcpy(xs + 1, sx_nn_model_input_shape(m), (size_t)r * sizeof *xs);
    memcpy(os, out->shape, (size_t)out->rank * sizeof *os);
    os[0] = k;
    for (int64_t i = 0; i < k * per; i++)
        sx_tensor_set(x, i, a->v[r0 * per + i] * scale);
    size_t es = sx_dtype_size(out->dtype);
    sx_tensor xv = sx_tensor_view(x->dtype, r + 1, xs, x->data);
    sx_tensor ov =
        sx_tensor_view(out->dtype, out->rank, os, (char *)out->data + (size_t)(r0 * row) * es);
    return sx_nn_model_predict(m, &xv, &ov);
}

/* Output p of the results as its own (n, shape) array: a view of out when it is the only
 * output, else a copy of its columns (*copy, to free). */
static sx_status part_tensor(const sx_tensor *out, const tool_io *io, const tool_part *p,
                             sx_tensor *view, sx_tensor **copy)
{
    int64_t n = out->shape[0], row = out->size / n, shape[SX_MAX_RANK + 1] = {n};
    memcpy(shape + 1, p->shape, (size_t)p->rank * sizeof *shape);
    *copy = NULL;
    if (io->n_out == 1) {
        *view = sx_tensor_view(out->dtype, p->rank + 1, shape, out->data);
        return SX_OK;
    }
    SX_TRY(sx_tensor_new(out->dtype, p->rank + 1, shape, copy));
    size_t es = sx_dtype_size(out->dtype);
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)(*copy)->data + (size_t)(i * p->size) * es,
               (const char *)out->data + (size_t)(i * row + p->offset) * es, (size_t)p->size * es);
    *view = **copy;
    return SX_OK;
}

/* Output k written to `file` (through a temporary name, renamed when complete). */
static int write_part(const sx_tensor *out, const tool_io *io, int k, const char *file)
{
    sx_tensor view, *copy = NULL;
    sx_status s = part_tensor(out, io, &io->out[k], &view, &copy);
    if (s == SX_OK)
        s = sx_ds_npy_write_tensor(file, &view);
    sx_tensor_free(copy);
    if (s != SX_OK)
        return tool_fail("predict", "%s", sx_last_error());
    char shape[160];
    if (io->classes) /* (n, classes) */
        printf("%s: %lld predictions of %lld outputs\n", file, (long long)view.shape[0],
               (long long)view.shape[1]);
    else
        printf("%s: output '%s' %s\n", file, io->out[k].name,
               sx_shape_str(view.rank, view.shape, shape, sizeof shape));
    return TOOL_OK;
}

/* --output FILE.npy with several outputs and no --output-name: FILE_NAME.npy for each. */
static int write_each(const predict_opts *o, const sx_tensor *out, const tool_io *io)
{
    size_t stem = strlen(o->output) - 4;
    for (int k = 0; k < io->n_out; k++) {
        char file[4096];
        if ((size_t)snprintf(file, sizeof file, "%.*s_%s.npy", (int)stem, o->output,
                             io->out[k].name) >= sizeof file)
            return tool_fail("predict", "%s: name too long", o->output);
        int rc = write_part(out, io, k, file);
        if (rc != TOOL_OK)
            return rc;
    }
    return TOOL_OK;
}

/* Without --output: each example's best class for an (n, classes) output; else each output's
 * shape and value range. */
static void print_results(const sx_nn_model *m, const sx_tensor *out, const tool_io *io, int sel,
                          bool table)
{
    int64_t n = out->shape[0], row = out->size / n;
    if (table && !io->classes && row <= 16) { /* a table's rows: each one's values */
        for (int64_t i = 0; i < n; i++) {
            printf("%lld:", (long long)i);
            for (int64_t j = 0; j < row; j++)
                printf(" %.9g", sx_tensor_get(out, i * row + j));
            printf("\n");
        }
        return;
    }
    if (io->classes) {
        int64_t cls = row;
        for (int64_t i = 0; i < n; i++) {
            int64_t best = 0;
            for (int64_t c = 1; c < cls; c++)
                best =
                    sx_tensor_get(out, i * cls + c) > sx_tensor_get(out, i * cls + best) ? c : best;
            const char *name = sx_nn_model_class_name(m, best);
            printf("%lld: class %lld%s%s (%.6g)\n", (long long)i, (long long)best, name ? " " : "",
                   name ? name : "", sx_tensor_get(out, i * cls + best));
        }
        return;
    }
    for (int k = sel < 0 ? 0 : sel; k < (sel < 0 ? io->n_out : sel + 1); k++) {
        const tool_part *p = &io->out[k];
        double lo = 0, hi = 0, sum = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < p->size; j++) {
                double v = sx_tensor_get(out, i * row + p->offset + j);
                lo = i + j == 0 || v < lo ? v : lo;
                hi = i + j == 0 || v > hi ? v : hi;
                sum += v;
            }
        int64_t shape[SX_MAX_RANK + 1] = {n};
        memcpy(shape + 1, p->shape, (size_t)p->rank * sizeof *shape);
        char s[160];
        printf("output '%s' %s: min=%.6g max=%.6g mean=%.6g (--output FILE.npy writes it)\n",
               p->name, sx_shape_str(p->rank + 1, shape, s, sizeof s), lo, hi,
               sum / (double)(n * (p->size > 0 ? p->size : 1)));
    }
}

static int report(const predict_opts *o, const sx_nn_model *m, const sx_tensor *out,
                  const tool_io *io, int sel)
{
    if (o->output == NULL) {
        print_results(m, out, io, sel, tool_has_ext(o->input, ".csv"));
        return TOOL_OK;
    }
    if (sel < 0 && io->n_out > 1)
        return write_each(o, out, io);
    return write_part(out, io, sel < 0 ? 0 : sel, o->output);
}

/* The output --output-name names (-1: none given). */
static int select_output(const predict_opts *o, const tool_io *io, int *sel)
{
    *sel = -1;
    if (o->output_name == NULL)
        return TOOL_OK;
    if ((*sel = tool_io_find(io, o->output_name)) >= 0)
        return TOOL_OK;
    char names[600] = "";
    for (int k = 0; k < io->n_out; k++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", k ? ", " : "",
                 io->out[k].name);
    return tool_fail("predict", "%s has no output named '%s' (its outputs: %s)", o->model,
                     o->output_name, names);
}

/* The inputs x (batch, input) and results out (n, result) of the model's dtype. */
static sx_status buffers(sx_nn_model *m, int64_t batch, int64_t n, sx_tensor **x, sx_tensor **out)
{
    int r = sx_nn_model_input_rank(m), q = sx_nn_model_output_rank(m);
    int64_t xs[SX_MAX_RANK + 1] = {batch}, os[SX_MAX_RANK + 1] = {n};
    memcpy(xs + 1, sx_nn_model_input_shape(m), (size_t)r * sizeof *xs);
    memcpy(os + 1, sx_nn_model_output_shape(m), (size_t)q * sizeof *os);
    SX_TRY(sx_tensor_new(sx_nn_model_dtype(m), r + 1, xs, x));
    return sx_tensor_new(sx_nn_model_dtype(m), q + 1, os, out);
}

int tool_cmd_predict(int argc, char **argv)
{
    predict_opts o;
    int rc = parse(argc, argv, &o);
    if (rc != TOOL_OK)
        return rc < 0 ? TOOL_OK : rc;
    sx_nn_model *m = NULL;
    tool_array a = {0};
    tool_io io;
    sx_tensor *x = NULL, *out = NULL;
    int64_t n = 0;
    int sel = -1;
    if (tool_load_model_io(o.model, o.batch, &m, &io) != SX_OK)
        return tool_fail("predict", "%s", sx_last_error());
    rc = select_output(&o, &io, &sel);
    if (rc == TOOL_OK)
        rc = read_input(&o, m, &io, &a);
    if (rc == TOOL_OK)
        rc = examples(&o, m, &a, &n);
    /* raw data: the model preprocesses it (a file before version 3 wants it scaled) */
    bool legacy = !sx_nn_model_preprocess(m).in_graph;
    double scale = o.has_scale ? o.scale : a.bytes && legacy ? sx_nn_model_input_scale(m) : 1.0;
    if (rc == TOOL_OK && buffers(m, o.batch, n, &x, &out) != SX_OK)
        rc = tool_fail_sx("predict", "memory");
    for (int64_t r0 = 0; rc == TOOL_OK && r0 < n; r0 += o.batch) {
        int64_t k = n - r0 < o.batch ? n - r0 : o.batch;
        if (run_rows(m, &a, scale, r0, k, x, out) != SX_OK)
            rc = tool_fail("predict", "%s", sx_last_error());
    }
    if (rc == TOOL_OK)
        rc = report(&o, m, out, &io, sel);
    sx_tensor_free(out);
    sx_tensor_free(x);
    tool_array_free(&a);
    sx_nn_model_free(m);
    return rc;
}
