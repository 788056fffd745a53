/* bench.c: `strix bench MODEL [--batch N] [--runs R] [--input [NAME=]FILE...] [--profile]`:
 * inference speed of a model on random inputs (or given ones): the latency of one example and the
 * time of one batch of N, each the median of R timed runs after one untimed run (which makes the
 * graphs and touches their memory); with --profile, where a batch's time goes. */
#include "tool.h"

#include <stdlib.h>
#include <string.h>

static const char *const bench_help =
    "usage: strix bench MODEL [--batch N] [--runs R] [--input [NAME=]FILE...] [--profile]\n"
    "Time MODEL's inference on random inputs in [0, 1): the latency of one example and of a\n"
    "batch of N (32), each the median of R (10) runs after a warm-up run; prints\n"
    "  result: batch=N runs=R latency_ms=L batch_ms=B images_per_second=T\n"
    "(images_per_second = N / the batch's median time). Any model: outputs of any shape,\n"
    "several outputs (all computed each run), several inputs (random rows; an ONNX input\n"
    "of integers, token ids, gets 0s).\n"
    "  --input [NAME=]FILE  the inputs' values instead of random ones, as strix predict\n"
    "                       takes them (one file per input, by name; e.g. token ids, which\n"
    "                       random values are not); their examples repeat to fill the batch\n"
    "  --profile            then R more runs of the batch, profiled: the time per op kind,\n"
    "                       per layer and of the 25 costliest nodes with their shapes (stderr;\n"
    "                       the batch runs whole, not cut into sub-batches)\n";

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median time of `runs` predictions of the first k rows of x. */
static sx_status time_rows(sx_nn_model *m, const sx_tensor *x, sx_tensor *out, int64_t k, long runs,
                           double *median)
{
    int64_t xs[SX_MAX_RANK + 1], os[SX_MAX_RANK + 1];
    memcpy(xs, x->shape, sizeof(int64_t) * (size_t)x->rank);
    memcpy(os, out->shape, sizeof(int64_t) * (size_t)out->rank);
    xs[0] = os[0] = k;
    sx_tensor xv = sx_tensor_view(x->dtype, x->rank, xs, x->data);
    sx_tensor ov = sx_tensor_view(out->dtype, out->rank, os, out->data);
    double *t = malloc((size_t)runs * sizeof *t);
    if (t == NULL)
        return sx_error(SX_E_NOMEM, "bench: out of memory");
    sx_status s = sx_nn_model_predict(m, &xv, &ov);
    for (long r = 0; s == SX_OK && r < runs; r++) {
        double t0 = sx_seconds();
        s = sx_nn_model_predict(m, &xv, &ov);
        t[r] = sx_seconds() - t0;
    }
    if (s == SX_OK) {
        qsort(t, (size_t)runs, sizeof *t, cmp_double);
        *median = runs % 2 ? t[runs / 2] : (t[runs / 2 - 1] + t[runs / 2]) / 2;
    }
    free(t);
    return s;
}

/* x's rows: random in [0, 1) (0 for an integer input: token ids, which must be whole numbers
 * and index any table), or the given inputs' examples over and over. */
static sx_status fill(const char *model, const tool_io *io, int n_specs, const char *const *specs,
                      sx_tensor *x)
{
    sx_rng rng;
    sx_rng_seed(&rng, 1);
    if (n_specs == 0) {
        SX_TRY(sx_tensor_rand_uniform(x, &rng, 0, 1));
        int64_t row = x->size / x->shape[0];
        for (int k = 0; k < io->n_in; k++)
            for (int64_t i = 0; io->in[k].integer && i < x->shape[0]; i++)
                for (int64_t j = 0; j < io->in[k].size; j++)
                    sx_tensor_set(x, i * row + io->in[k].offset + j, 0);
        return SX_OK;
    }
    tool_array a;
    SX_TRY(tool_inputs_read(model, io, n_specs, specs, &a));
    int64_t row = a.dims[1], n = a.dims[0];
    sx_status s = n > 0 ? SX_OK : sx_error(SX_E_SHAPE, "%s: the inputs hold no example", model);
    for (int64_t i = 0; s == SX_OK && i < x->size; i++)
        sx_tensor_set(x, i, a.v[(i / row) % n * row + i % row]);
    tool_array_free(&a);
    return s;
}

static int bench(const char *model, long batch, long runs, bool profile, int n_specs,
                 const char *const *specs)
{
    sx_nn_model *m = NULL;
    sx_tensor *x = NULL, *out = NULL;
    tool_io io;
    if (tool_load_model_io(model, batch, &m, &io) != SX_OK)
        return tool_fail("bench", "%s", sx_last_error());
    int r = sx_nn_model_input_rank(m), q = sx_nn_model_output_rank(m);
    int64_t xs[SX_MAX_RANK + 1] = {batch}, os[SX_MAX_RANK + 1] = {batch};
    memcpy(xs + 1, sx_nn_model_input_shape(m), (size_t)r * sizeof *xs);
    memcpy(os + 1, sx_nn_model_output_shape(m), (size_t)q * sizeof *os);
    double one = 0, all = 0;
    sx_status s = sx_tensor_new(sx_nn_model_dtype(m), r + 1, xs, &x);
    if (s == SX_OK)
        s = fill(model, &io, n_specs, specs, x);
    if (s == SX_OK)
        s = sx_tensor_new(sx_nn_model_dtype(m), q + 1, os, &out);
    if (s == SX_OK)
        s = time_rows(m, x, out, 1, runs, &one);
    if (s == SX_OK)
        s = time_rows(m, x, out, batch, runs, &all);
    sx_cg_graph *g = profile && s == SX_OK ? sx_nn_model_graph(m) : NULL;
    if (g != NULL) {
        double ignored;
        sx_cg_profile_enable(g, true);
        s = time_rows(m, x, out, batch, runs, &ignored);
        if (s == SX_OK)
            sx_cg_profile_print(g, 25, stderr);
    }
    sx_tensor_free(x);
    sx_tensor_free(out);
    sx_nn_model_free(m);
    if (s != SX_OK)
        return tool_fail("bench", "%s", sx_last_error());
    printf("result: batch=%ld runs=%ld latency_ms=%.3f batch_ms=%.3f images_per_second=%.0f\n",
           batch, runs, 1e3 * one, 1e3 * all, all > 0 ? (double)batch / all : 0);
    return TOOL_OK;
}

int tool_cmd_bench(int argc, char **argv)
{
    const char *model = NULL, *specs[SX_NN_MAX_HEADS];
    long batch = 32, runs = 10;
    int n_specs = 0;
    bool profile = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (tool_is_help(a)) {
            fputs(bench_help, stdout);
            return TOOL_OK;
        } else if (strcmp(a, "--batch") == 0)
            ok = tool_parse_long(v, 1, 65536, &batch), i++;
        else if (strcmp(a, "--runs") == 0)
            ok = tool_parse_long(v, 1, 100000, &runs), i++;
        else if (strcmp(a, "--profile") == 0)
            profile = true;
        else if (strcmp(a, "--input") == 0 && n_specs == SX_NN_MAX_HEADS)
            return tool_usage("bench", "more than %d --input", SX_NN_MAX_HEADS);
        else if (strcmp(a, "--input") == 0)
            ok = (specs[n_specs++] = v) != NULL, i++;
        else if (a[0] == '-' && a[1] != '\0')
            return tool_usage("bench", "unknown option %s", a);
        else if (model == NULL)
            model = a;
        else
            return tool_usage("bench", "unexpected argument %s", a);
        if (!ok)
            return tool_usage("bench", "bad or missing value for %s", a);
    }
    if (model == NULL)
        return tool_usage("bench", "no MODEL");
    return bench(model, batch, runs, profile, n_specs, specs);
}
