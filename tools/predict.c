/* predict.c: `strix predict MODEL --input FILE [--output FILE.npy] [--batch N] [--scale X]`:
 * run a model over the examples of a .npy or IDX file, or over one PNG/JPEG image, in batches,
 * and write the outputs as an (n, outputs) .npy file or print each example's best class. */
#include "tool.h"

#include <string.h>

static const char *const predict_help =
    "usage: strix predict MODEL --input FILE [--output FILE.npy] [--batch N] [--scale X]\n"
    "Run MODEL (.sxm, or .onnx when built with ONNX support) over the examples in FILE:\n"
    "  a .npy or IDX file (raw or gzip) of shape (n, example...) or (example...), the example\n"
    "  having as many elements as the model's input; or one PNG/JPEG image, decoded and resized\n"
    "  to the model's (h, w, c) input with c 1 or 3.\n"
    "  --output FILE.npy  write the outputs, (n, outputs) in the model's dtype (else print\n"
    "                     'i: class k (score)' per example)\n"
    "  --batch N          examples per run, 1..65536 (64)\n"
    "  --scale X          input = element * X (default: the model's input scale for byte\n"
    "                     data, u8 arrays and images; 1 for other element types)\n";

typedef struct predict_opts {
    const char *model, *input, *output;
    long batch;
    double scale;
    bool has_scale;
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
        } else if (strcmp(a, "--input") == 0)
            ok = (o->input = v) != NULL, i++;
        else if (strcmp(a, "--output") == 0)
            ok = (o->output = v) != NULL, i++;
        else if (strcmp(a, "--batch") == 0)
            ok = tool_parse_long(v, 1, 65536, &o->batch), i++;
        else if (strcmp(a, "--scale") == 0)
            ok = o->has_scale = tool_parse_double(v, &o->scale), i++;
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

static int read_input(const predict_opts *o, sx_nn_model *m, tool_array *a)
{
    if (tool_file_kind(o->input) == TOOL_FILE_IMAGE) {
        const int64_t *is = sx_nn_model_input_shape(m);
        if (sx_nn_model_input_rank(m) != 3 || (is[2] != 1 && is[2] != 3))
            return tool_fail("predict",
                             "%s: an image, but the model's input is not (h, w, c) "
                             "with c 1 or 3",
                             o->input);
        if (tool_image_read(o->input, is[0], is[1], is[2], a) != SX_OK)
            return tool_fail("predict", "%s", sx_last_error());
        return TOOL_OK;
    }
    if (tool_array_read(o->input, a) != SX_OK)
        return tool_fail("predict", "%s", sx_last_error());
    return TOOL_OK;
}

/* Rows [r0, r0 + k) of the input, scaled, through the model into out (n, classes). */
static sx_status run_rows(sx_nn_model *m, const tool_array *a, double scale, int64_t r0, int64_t k,
                          sx_tensor *x, sx_tensor *out)
{
    int r = sx_nn_model_input_rank(m);
    int64_t per = sx_shape_size(r, sx_nn_model_input_shape(m)), cls = sx_nn_model_classes(m);
    int64_t xs[SX_MAX_RANK + 1] = {k}, os[2] = {k, cls};
    memcpy(xs + 1, sx_nn_model_input_shape(m), (size_t)r * sizeof *xs);
    for (int64_t i = 0; i < k * per; i++)
        sx_tensor_set(x, i, a->v[r0 * per + i] * scale);
    size_t es = sx_dtype_size(out->dtype);
    sx_tensor xv = sx_tensor_view(x->dtype, r + 1, xs, x->data);
    sx_tensor ov = sx_tensor_view(out->dtype, 2, os, (char *)out->data + (size_t)(r0 * cls) * es);
    return sx_nn_model_predict(m, &xv, &ov);
}

static int report(const predict_opts *o, const sx_tensor *out)
{
    if (o->output != NULL) {
        if (sx_ds_npy_write_tensor(o->output, out) != SX_OK)
            return tool_fail("predict", "%s", sx_last_error());
        printf("%s: %lld predictions of %lld outputs\n", o->output, (long long)out->shape[0],
               (long long)out->shape[1]);
        return TOOL_OK;
    }
    int64_t cls = out->shape[1];
    for (int64_t i = 0; i < out->shape[0]; i++) {
        int64_t best = 0;
        for (int64_t c = 1; c < cls; c++)
            best = sx_tensor_get(out, i * cls + c) > sx_tensor_get(out, i * cls + best) ? c : best;
        printf("%lld: class %lld (%.6g)\n", (long long)i, (long long)best,
               sx_tensor_get(out, i * cls + best));
    }
    return TOOL_OK;
}

int tool_cmd_predict(int argc, char **argv)
{
    predict_opts o;
    int rc = parse(argc, argv, &o);
    if (rc != TOOL_OK)
        return rc < 0 ? TOOL_OK : rc;
    sx_nn_model *m = NULL;
    tool_array a = {0};
    sx_tensor *x = NULL, *out = NULL;
    int64_t n = 0;
    if (tool_load_model(o.model, o.batch, &m) != SX_OK)
        return tool_fail("predict", "%s", sx_last_error());
    rc = read_input(&o, m, &a);
    if (rc == TOOL_OK)
        rc = examples(&o, m, &a, &n);
    int r = sx_nn_model_input_rank(m);
    int64_t xs[SX_MAX_RANK + 1] = {o.batch}, os[2] = {n, sx_nn_model_classes(m)};
    memcpy(xs + 1, sx_nn_model_input_shape(m), (size_t)r * sizeof *xs);
    double scale = o.has_scale ? o.scale : a.bytes ? sx_nn_model_input_scale(m) : 1.0;
    sx_status s = SX_OK;
    if (rc == TOOL_OK && ((s = sx_tensor_new(sx_nn_model_dtype(m), r + 1, xs, &x)) != SX_OK ||
                          (s = sx_tensor_new(sx_nn_model_dtype(m), 2, os, &out)) != SX_OK))
        rc = tool_fail_sx("predict", "memory");
    for (int64_t r0 = 0; rc == TOOL_OK && r0 < n; r0 += o.batch) {
        int64_t k = n - r0 < o.batch ? n - r0 : o.batch;
        if (run_rows(m, &a, scale, r0, k, x, out) != SX_OK)
            rc = tool_fail("predict", "%s", sx_last_error());
    }
    if (rc == TOOL_OK)
        rc = report(&o, out);
    sx_tensor_free(out);
    sx_tensor_free(x);
    tool_array_free(&a);
    sx_nn_model_free(m);
    return rc;
}
