/* io.c: model files, in cgraph's checksummed file format (sx_cg_save): saving a network's or a
 * model's inference graph, loading one, and models built by outside code (onnx/). A model file
 * holds the inference graph itself (lambda nodes included) with the weights inline, so a
 * program that never saw the network runs it. Nothing else in nn calls this file: it sits on
 * top of the model and prediction. Checkpoints are checkpoint.c's. */
#include "nn_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- model files */

/* The plain (unoptimised) inference graph of net for batches of n: *x the input, *out the
 * output. The parameter nodes borrow the network's tensors. */
static sx_status net_infer_graph(sx_nn_net *net, int64_t n, sx_cg_graph **gp, sx_cg_node **xp,
                                 sx_cg_node **outp)
{
    nn_build b;
    memset(&b, 0, sizeof b);
    sx_cg_graph *g = NULL;
    sx_status s = sx_cg_graph_new(SX_CG_LAZY, net->dtype, &g);
    sx_cg_node *x = NULL, *out = NULL, *logits = NULL;
    if (s == SX_OK) {
        b.g = g;
        b.mode = NN_INFER;
        s = sx_cg_rng_new(g, 0, &b.rng_id);
    }
    if (s == SX_OK) {
        int64_t xs[SX_MAX_RANK];
        xs[0] = n;
        int r = nn_input_shape(net, xs + 1); /* (total) with several inputs */
        x = sx_cg_input(g, "x", net->dtype, r + 1, xs);
        s = x ? nn_forward(net, &b, x, &out, &logits) : sx_cg_graph_status(g);
    }
    nn_build_free(&b);
    if (s != SX_OK) {
        sx_cg_graph_free(g);
        return s;
    }
    *gp = g;
    *xp = x;
    *outp = out;
    return SX_OK;
}

/* A shape as "d1xd2x..." into buf. */
static void dims_str(int rank, const int64_t *shape, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < rank && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%" PRId64, i ? "x" : "", shape[i]);
}

/* Model files. Version 1 (no "model_version"): a (batch, classes) output, "classes" >= 1.
 * Version 2 adds "model_version" 2, "outputs" ("name:d1xd2..." per output, ',' between them; y
 * has the one output's shape, or (batch, total) with several, their elements one after
 * another) and "inputs" ("d1xd2..." per input layer; x is (batch, total) with several);
 * "input_ids" is "1" when every input takes ids (sx_nn_input_ids; absent otherwise);
 * "classes" is 0 for an output that is not (batch, classes). Version 3: the graph holds the
 * network's preprocessing (x is raw data), and the metadata describe it for tools
 * (preprocess.c: normalize_mean/std, target_mean/std, class_names, feature_names,
 * image_resize); input_scale is then informative. Versions 1 and 2 took x already scaled by
 * input_scale; they still load, with that meaning (sx_nn_preprocess.in_graph false). */
#define MODEL_VERSION 3

/* The outputs' and inputs' lists of a network, as version 2 writes them. */
static void net_parts_str(const sx_nn_net *net, char *outs_s, size_t on, char *ins_s, size_t in)
{
    for (int k = 0, n = nn_output_count(net); k < n; k++) {
        const sx_nn_layer *o = nn_output_at(net, k);
        char d[160];
        dims_str(o->rank, o->shape, d, sizeof d);
        size_t at = strlen(outs_s);
        snprintf(outs_s + at, on - at, "%s%s:%s", k ? "," : "",
                 net->n_outputs > 0 ? net->output_names[k] : "y", d);
    }
    for (int i = 0, k = 0; i < net->n_layers; i++) {
        const sx_nn_layer *l = net->layers[i];
        if (l->kind != L_INPUT)
            continue;
        char d[160];
        dims_str(l->rank, l->shape, d, sizeof d);
        size_t at = strlen(ins_s);
        snprintf(ins_s + at, in - at, "%s%s", k++ ? "," : "", d);
    }
}

/* Save graph g's x and y with the model metadata (nk of keys/vals) and p's preprocessing. */
static sx_status save_model(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *y, int nk, const char **keys,
                            const char **vals, const nn_prep *p, const char *path)
{
    nn_prep_meta pm = {0};
    if (p != NULL && p->in_graph)
        SX_TRY(nn_prep_meta_make(p, &pm));
    for (int i = 0; i < pm.n; i++) {
        keys[nk] = pm.keys[i];
        vals[nk++] = pm.vals[i];
    }
    sx_cg_node *outs[2] = {x, y};
    const char *names[2] = {"x", "y"};
    sx_status s = sx_cg_save(g, 2, outs, names, 0, NULL, NULL, nk, keys, vals, path);
    nn_prep_meta_free(&pm);
    return s;
}

sx_status sx_nn_save(sx_nn_net *net, const char *path)
{
    if (net == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_nn_save: NULL argument");
    if (net->status != SX_OK)
        return nn_net_refused("sx_nn_save", net);
    sx_nn_layer *in = nn_input_layer(net), *last = nn_output_layer(net);
    if (in == NULL || last == NULL)
        return sx_error(SX_E_STATE, "sx_nn_save: network %s needs an input layer", net->name);
    nn_prep_freeze(net);
    /* the plain (unoptimised) inference graph, with batch 1: the loader rebuilds it for the
     * batch size it wants and optimises and plans it there */
    sx_cg_graph *g = NULL;
    sx_cg_node *x = NULL, *out = NULL;
    SX_TRY(net_infer_graph(net, 1, &g, &x, &out));
    char scale[40], classes[32], version[16];
    char outs_s[SX_NN_MAX_HEADS * 200] = "", ins_s[2048] = "";
    snprintf(scale, sizeof scale, "%.17g", net->prep.scale);
    snprintf(classes, sizeof classes, "%" PRId64,
             last->rank == 1 && net->n_outputs < 2 ? last->shape[0] : 0);
    snprintf(version, sizeof version, "%d", MODEL_VERSION);
    net_parts_str(net, outs_s, sizeof outs_s, ins_s, sizeof ins_s);
    const char *keys[16] = {"strix.kind",    "network", "input_scale", "classes",
                            "model_version", "outputs", "inputs",      "input_ids"};
    const char *vals[16] = {"model", net->name, scale, classes, version, outs_s, ins_s, "1"};
    bool ids = nn_input_ids_count(net) == nn_input_count(net);
    sx_status s = save_model(g, x, out, ids ? 8 : 7, keys, vals, &net->prep, path);
    sx_cg_graph_free(g);
    return s;
}

sx_status nn_model_infer_graph(sx_nn_model *m, int64_t n, sx_cg_graph **g, sx_cg_node **x,
                               sx_cg_node **y)
{
    if (m == NULL || g == NULL || x == NULL || y == NULL || m->train || n < 1)
        return sx_error(SX_E_ARG, "nn_model_infer_graph: NULL argument, a training model or "
                                  "batch < 1");
    if (m->c.net == NULL && m->file->src != NULL)
        return m->file->src->build(m->file->src->ctx, n, g, x, y);
    if (m->c.net != NULL) {
        if (m->c.net->status != SX_OK || nn_input_layer(m->c.net) == NULL)
            return sx_error(SX_E_STATE,
                            "nn_model_infer_graph: network %s has an error or no "
                            "input",
                            m->c.net->name);
        return net_infer_graph(m->c.net, n, g, x, y);
    }
    sx_cg_node *outs[2] = {m->file->plain_x, m->file->plain_y};
    sx_status s = sx_cg_graph_copy_shared(m->file->plain, 2, outs, n, g, outs);
    if (s == SX_OK) {
        *x = outs[0];
        *y = outs[1];
    }
    return s;
}

/* A model's inference graph as a model file: a network's through sx_nn_save; any other model's
 * plain inference graph (nn_model_infer_graph: the file's, or an imported model's source's)
 * for a batch of 1, with the metadata sx_nn_load wants. */
sx_status sx_nn_model_save(sx_nn_model *m, const char *path)
{
    if (m == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_nn_model_save: NULL argument");
    if (m->train)
        return sx_error(SX_E_ARG, "sx_nn_model_save: a training model (save its network with "
                                  "sx_nn_save)");
    if (m->c.net != NULL)
        return sx_nn_save(m->c.net, path);
    const char *net = m->file->meta[0]; /* a loaded model's (NULL: none) */
    const nn_prep *prep = &m->file->prep;
    char scale[40], classes[32];
    snprintf(scale, sizeof scale, "%.17g", prep ? prep->scale : 1.0);
    snprintf(classes, sizeof classes, "%" PRId64, m->classes);
    /* a loaded file keeps its version, outputs and inputs */
    const char *keys[16] = {"strix.kind",    "network", "input_scale", "classes",
                            "model_version", "outputs", "inputs"};
    const char *vals[16] = {"model", net ? net : "model", scale, classes, NULL, NULL, NULL};
    int nk = 4;
    for (int i = 4; m->file->plain != NULL && i < 7; i++)
        if ((vals[i] = m->file->meta[i - 3]) != NULL)
            nk = i + 1;
    /* an imported model (a row holds its outputs and inputs one after another): the current
     * version, its parts listed */
    char version[16], outs_s[SX_NN_MAX_HEADS * 200] = "", ins_s[SX_NN_MAX_HEADS * 160] = "";
    if (m->file->plain == NULL) {
        snprintf(version, sizeof version, "%d", MODEL_VERSION);
        for (int k = 0; k < m->file->n_parts; k++) {
            char d[160];
            dims_str(m->file->part_rank[k], m->file->part_shape[k], d, sizeof d);
            size_t at = strlen(outs_s);
            snprintf(outs_s + at, sizeof outs_s - at, "%s%s:%s", k ? "," : "",
                     m->file->part_names[k], d);
        }
        for (int k = 0; k < m->file->n_in_parts; k++) {
            char d[160];
            dims_str(m->file->in_part_rank[k], m->file->in_part_shape[k], d, sizeof d);
            size_t at = strlen(ins_s);
            snprintf(ins_s + at, sizeof ins_s - at, "%s%s", k ? "," : "", d);
        }
        vals[4] = version;
        vals[5] = outs_s;
        vals[6] = ins_s;
        nk = 7;
    }
    for (int i = 4; i < nk; i++)
        if (vals[i] == NULL)
            vals[i] = "";
    if (m->ids_in) {
        keys[nk] = "input_ids";
        vals[nk++] = "1";
    }
    sx_cg_node *outs[2] = {NULL, NULL};
    sx_cg_graph *g = NULL;
    SX_TRY(nn_model_infer_graph(m, 1, &g, &outs[0], &outs[1]));
    sx_status s = save_model(g, outs[0], outs[1], nk, keys, vals, prep, path);
    sx_cg_graph_free(g);
    return s;
}

/* One shape "d1xd2..." of a version-2 file (rank 1..SX_MAX_RANK-1, dims >= 1, a size that
 * fits) from s[0..len). */
static sx_status parse_dims(const char *path, const char *key, const char *s, size_t len, int *rank,
                            int64_t *shape)
{
    int r = 0;
    size_t i = 0;
    while (i < len) {
        int64_t d = 0;
        size_t j = i;
        while (j < len && s[j] >= '0' && s[j] <= '9' && d <= (INT64_MAX - 9) / 10)
            d = d * 10 + (s[j++] - '0');
        if (j == i || d < 1 || r == SX_MAX_RANK - 1 || (j < len && s[j] != 'x') ||
            (j < len && j + 1 == len))
            return sx_error(SX_E_FORMAT, "%s: bad shape '%.*s' in '%s'", path, (int)len, s, key);
        shape[r++] = d;
        i = j + 1;
    }
    if (r == 0 || !nn_shape_fits(r, shape))
        return sx_error(SX_E_FORMAT, "%s: bad shape '%.*s' in '%s'", path, (int)len, s, key);
    *rank = r;
    return SX_OK;
}

/* A version-2 file's "outputs" (names) or "inputs" (names NULL) list into the model. */
static sx_status parse_parts(const char *path, const char *key, const char *v, int *n,
                             char (*names)[32], int *ranks, int64_t (*shapes)[SX_MAX_RANK])
{
    if (v == NULL || v[0] == '\0')
        return sx_error(SX_E_FORMAT, "%s: bad or missing '%s'", path, key);
    *n = 0;
    for (const char *at = v; *at != '\0';) {
        const char *end = strchr(at, ',');
        size_t len = end ? (size_t)(end - at) : strlen(at);
        if (*n == SX_NN_MAX_HEADS)
            return sx_error(SX_E_FORMAT, "%s: more than %d entries in '%s'", path, SX_NN_MAX_HEADS,
                            key);
        const char *dims = at;
        if (names != NULL) {
            const char *colon = memchr(at, ':', len);
            if (colon == NULL || !nn_name_ok(at, (size_t)(colon - at)))
                return sx_error(SX_E_FORMAT, "%s: bad output '%.*s' in '%s' (want name:shape)",
                                path, (int)len, at, key);
            snprintf(names[*n], 32, "%.*s", (int)(colon - at), at);
            dims = colon + 1;
        }
        SX_TRY(parse_dims(path, key, dims, len - (size_t)(dims - at), &ranks[*n], shapes[*n]));
        (*n)++;
        if (end == NULL)
            break;
        at = end + 1;
        if (*at == '\0')
            return sx_error(SX_E_FORMAT, "%s: '%s' ends in ','", path, key);
    }
    return SX_OK;
}

/* A model file's metadata: input_scale (finite, as sx_nn_net_set_input_scale accepts), classes
 * (a count >= 1; >= 0 in version 2), and in version 2 the outputs and inputs. *version: the
 * file's. */
static sx_status loaded_meta(const char *path, const sx_cg_file *f, sx_nn_model *m,
                             int64_t *version)
{
    const char *kind = sx_cg_file_meta(f, "strix.kind");
    if (kind == NULL || strcmp(kind, "model") != 0)
        return sx_error(SX_E_FORMAT, "%s: not a strix model file%s", path,
                        kind && strcmp(kind, "checkpoint") == 0 ? " (a checkpoint)" : "");
    const char *ver = sx_cg_file_meta(f, "model_version");
    *version = 1;
    if (ver != NULL)
        SX_TRY(nn_parse_i64(path, "model_version", ver, version));
    if (*version > MODEL_VERSION)
        return sx_error(SX_E_UNSUPPORTED,
                        "%s: model file version %lld (this strix reads 1 to %d): a newer strix "
                        "wrote it",
                        path, (long long)*version, MODEL_VERSION);
    if (*version < 1)
        return sx_error(SX_E_FORMAT, "%s: model_version 0", path);
    const char *sc = sx_cg_file_meta(f, "input_scale");
    char *e1 = NULL;
    m->file->prep.scale = sc ? strtod(sc, &e1) : 0;
    if (sc == NULL || e1 == sc || *e1 != '\0' || !isfinite(m->file->prep.scale))
        return sx_error(SX_E_FORMAT, "%s: bad or missing 'input_scale' ('%s')", path, sc ? sc : "");
    m->file->prep.in_graph = *version >= 3;
    const char *ids = sx_cg_file_meta(f, "input_ids"); /* every input takes ids */
    if (ids != NULL && strcmp(ids, "1") != 0)
        return sx_error(SX_E_FORMAT, "%s: bad 'input_ids' ('%s')", path, ids);
    m->ids_in = ids != NULL;
    if (*version >= 3)
        SX_TRY(nn_prep_meta_read(path, f, &m->file->prep));
    SX_TRY(nn_parse_i64(path, "classes", sx_cg_file_meta(f, "classes"), &m->classes));
    if (m->classes < 1 && *version < 2)
        return sx_error(SX_E_FORMAT, "%s: 'classes' is 0", path);
    if (*version < 2)
        return SX_OK;
    SX_TRY(parse_parts(path, "outputs", sx_cg_file_meta(f, "outputs"), &m->file->n_parts,
                       m->file->part_names, m->file->part_rank, m->file->part_shape));
    for (int a = 0; a < m->file->n_parts; a++)
        for (int b = 0; b < a; b++)
            if (strcmp(m->file->part_names[a], m->file->part_names[b]) == 0)
                return sx_error(SX_E_FORMAT, "%s: two outputs named %s", path,
                                m->file->part_names[a]);
    return parse_parts(path, "inputs", sx_cg_file_meta(f, "inputs"), &m->file->n_in_parts, NULL,
                       m->file->in_part_rank, m->file->in_part_shape);
}

/* The metadata sx_nn_model_save writes back, copied from the file into m->file->meta. */
static sx_status keep_meta(const sx_cg_file *f, sx_nn_model *m)
{
    static const char *const keys[NN_FILE_META] = {"network", "model_version", "outputs", "inputs"};
    for (int i = 0; i < NN_FILE_META; i++) {
        const char *v = sx_cg_file_meta(f, keys[i]);
        if (v == NULL)
            continue;
        if ((m->file->meta[i] = sx_alloc(strlen(v) + 1)) == NULL)
            return SX_E_NOMEM;
        strcpy(m->file->meta[i], v);
    }
    return SX_OK;
}

/* The shape of one example of what the listed parts make: the one part's own, or (total). */
static int parts_shape(int n, const int *ranks, int64_t (*shapes)[SX_MAX_RANK], int64_t *shape)
{
    if (n == 1) {
        memcpy(shape, shapes[0], (size_t)ranks[0] * sizeof *shape);
        return ranks[0];
    }
    shape[0] = 0;
    for (int k = 0; k < n; k++)
        shape[0] += sx_shape_size(ranks[k], shapes[k]);
    return 1;
}

/* Judge the graph's x and y before reading anything from them: x is an input (batch, example
 * shape) with an example of rank 1..7 (sx_nn_input's), y is (batch, classes) of x's dtype
 * (version 1), or in version 2 y has the outputs' shape and x the inputs'. */
static sx_status loaded_io(const char *path, sx_nn_model *m, int64_t version)
{
    const sx_cg_node *x = m->x, *y = m->out;
    int64_t batch = m->batch;
    int xr = sx_cg_node_rank(x), yr = sx_cg_node_rank(y);
    const int64_t *xs = sx_cg_node_shape(x), *ys = sx_cg_node_shape(y);
    char a[128], b[128];
    if (version >= 2) {
        int64_t want_y[SX_MAX_RANK], want_x[SX_MAX_RANK];
        want_y[0] = want_x[0] = batch;
        int wy =
            1 + parts_shape(m->file->n_parts, m->file->part_rank, m->file->part_shape, want_y + 1);
        int wx = 1 + parts_shape(m->file->n_in_parts, m->file->in_part_rank, m->file->in_part_shape,
                                 want_x + 1);
        bool cls = m->classes == 0 || (wy == 2 && want_y[1] == m->classes);
        if (sx_cg_node_op(x) != SX_OP_INPUT || !sx_shape_equal(xr, xs, wx, want_x) ||
            !sx_shape_equal(yr, ys, wy, want_y) || sx_cg_node_dtype(y) != sx_cg_node_dtype(x) ||
            !cls) {
            char c[128], d[128];
            return sx_error(SX_E_FORMAT,
                            "%s: not a model's x and y: x is %s %s %s, y %s %s (want x an input "
                            "%s and y %s of its dtype, classes %lld)",
                            path, sx_cg_op_name(sx_cg_node_op(x)),
                            sx_dtype_name(sx_cg_node_dtype(x)), sx_shape_str(xr, xs, a, sizeof a),
                            sx_dtype_name(sx_cg_node_dtype(y)), sx_shape_str(yr, ys, b, sizeof b),
                            sx_shape_str(wx, want_x, c, sizeof c),
                            sx_shape_str(wy, want_y, d, sizeof d), (long long)m->classes);
        }
    } else if (sx_cg_node_op(x) != SX_OP_INPUT || xr < 2 || xs[0] != batch || yr != 2 ||
               ys[0] != batch || ys[1] != m->classes ||
               sx_cg_node_dtype(y) != sx_cg_node_dtype(x)) {
        return sx_error(SX_E_FORMAT,
                        "%s: not a model's x and y: x is %s %s %s, y %s %s (want x an input "
                        "(%lld, example) and y (%lld,%lld) of its dtype)",
                        path, sx_cg_op_name(sx_cg_node_op(x)), sx_dtype_name(sx_cg_node_dtype(x)),
                        sx_shape_str(xr, xs, a, sizeof a), sx_dtype_name(sx_cg_node_dtype(y)),
                        sx_shape_str(yr, ys, b, sizeof b), (long long)batch, (long long)batch,
                        (long long)m->classes);
    }
    m->in_rank = xr - 1;
    m->dtype = sx_cg_node_dtype(x);
    memcpy(m->in_shape, xs + 1, (size_t)m->in_rank * sizeof *m->in_shape);
    m->out_rank = yr - 1;
    memcpy(m->out_shape, ys + 1, (size_t)m->out_rank * sizeof *m->out_shape);
    if (version < 2) { /* one unnamed output, one input */
        m->file->n_parts = 1;
        snprintf(m->file->part_names[0], sizeof m->file->part_names[0], "y");
        m->file->part_rank[0] = m->out_rank;
        memcpy(m->file->part_shape[0], m->out_shape, sizeof m->file->part_shape[0]);
        m->file->n_in_parts = 1;
        m->file->in_part_rank[0] = m->in_rank;
        memcpy(m->file->in_part_shape[0], m->in_shape, sizeof m->file->in_part_shape[0]);
    }
    return SX_OK;
}

sx_status nn_model_prep_check(const char *path, const sx_nn_model *m)
{
    const nn_prep *p = &m->file->prep;
    int64_t in_size = sx_shape_size(m->in_rank, m->in_shape);
    int64_t out_last = m->out_rank > 0 ? m->out_shape[m->out_rank - 1] : 1;
    int64_t out_size = sx_shape_size(m->out_rank, m->out_shape);
    if (p->norm_n > 0 && p->norm_n != in_size && p->norm_n != m->in_shape[m->in_rank - 1])
        return sx_error(SX_E_FORMAT, "%s: %lld normalisation values for an input of %lld", path,
                        (long long)p->norm_n, (long long)in_size);
    if (p->target_n > 0 && p->target_n != out_size && p->target_n != out_last)
        return sx_error(SX_E_FORMAT, "%s: %lld target scales for an output of %lld", path,
                        (long long)p->target_n, (long long)out_size);
    if (p->n_classes > 0 && p->n_classes != out_last)
        return sx_error(SX_E_FORMAT, "%s: %lld class names for %lld outputs", path,
                        (long long)p->n_classes, (long long)out_last);
    if (p->n_features > 0 && p->n_features != in_size)
        return sx_error(SX_E_FORMAT, "%s: %lld feature names for an input of %lld", path,
                        (long long)p->n_features, (long long)in_size);
    return SX_OK;
}

sx_status sx_nn_load(const char *path, int64_t batch, sx_nn_model **out)
{
    if (out != NULL)
        *out = NULL;
    if (out == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_nn_load: NULL argument");
    if (batch < 1)
        return sx_error(SX_E_ARG, "sx_nn_load: batch %lld (want >= 1)", (long long)batch);
    sx_nn_model *m = sx_calloc(1, sizeof *m);
    if (m == NULL || (m->file = sx_calloc(1, sizeof *m->file)) == NULL) {
        sx_free(m);
        return SX_E_NOMEM;
    }
    m->batch = batch;
    sx_cg_file *f = NULL;
    sx_status s = sx_cg_file_read(path, &f);
    int64_t version = 1;
    if (s == SX_OK)
        s = loaded_meta(path, f, m, &version);
    if (s == SX_OK)
        s = keep_meta(f, m);
    /* the file's graph must have outputs x and y and run for this batch: anything else is a
     * bad model file (SX_E_FORMAT naming it), not a bad argument. The model keeps the file's
     * graph (the one copy of the weights) and frees the file's bytes. */
    const char *names[2] = {"x", "y"};
    sx_cg_node *xy[2];
    bool graph_stage = s == SX_OK;
    if (s == SX_OK && (s = sx_cg_file_graph(f, 2, names, &m->file->plain, xy)) == SX_OK) {
        m->file->plain_x = xy[0];
        m->file->plain_y = xy[1];
    }
    sx_cg_file_free(f);
    if (s == SX_OK)
        s = nn_loaded_graph(m, batch);
    if (graph_stage && s != SX_OK && s != SX_E_NOMEM) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", sx_last_error());
        s = sx_error(SX_E_FORMAT, "%s: not a model's graph for batch %lld: %s", path,
                     (long long)batch, msg);
    }
    if (s == SX_OK)
        s = loaded_io(path, m, version);
    if (s == SX_OK)
        s = nn_model_prep_check(path, m);
    if (s != SX_OK) {
        sx_nn_model_free(m);
        return s;
    }
    *out = m;
    return SX_OK;
}

sx_status nn_model_from_source(const nn_model_source *src, int64_t batch, sx_nn_model **out)
{
    if (out != NULL)
        *out = NULL;
    if (src == NULL || src->build == NULL || out == NULL || batch < 1) {
        if (src != NULL && src->free != NULL)
            src->free(src->ctx);
        return sx_error(SX_E_ARG, "nn_model_from_source: NULL argument or batch %lld < 1",
                        (long long)batch);
    }
    sx_nn_model *m = sx_calloc(1, sizeof *m);
    nn_model_file *file = sx_calloc(1, sizeof *file);
    nn_model_source *own = sx_alloc(sizeof *own);
    if (m == NULL || file == NULL || own == NULL) {
        sx_free(m);
        sx_free(file);
        sx_free(own);
        if (src->free != NULL)
            src->free(src->ctx);
        return SX_E_NOMEM;
    }
    *own = *src;
    m->file = file;
    m->file->src = own;
    m->batch = batch;
    m->file->prep.scale = 1;
    m->file->prep.in_graph = true;
    sx_status s = nn_loaded_graph(m, batch);
    if (s == SX_OK) {
        const int64_t *ys = sx_cg_node_shape(m->out);
        m->classes = sx_cg_node_rank(m->out) == 2 ? ys[1] : -1;
        s = loaded_io("nn_model_from_source", m, 1);
    }
    if (s != SX_OK) {
        sx_nn_model_free(m);
        return s;
    }
    *out = m;
    return SX_OK;
}
