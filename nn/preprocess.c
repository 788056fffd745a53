/* preprocess.c: what turns raw data into a network's input and its output into answers (input
 * scale, normalisation, target scaling, class and feature names, image resize). It lives in the
 * network and becomes the first and last nodes of every graph the network builds, so training,
 * prediction, a saved model and an ONNX export apply one copy of it; the model file also keeps
 * it as metadata for tools (strix info, strix predict). */
#include "nn_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_BYTES 255

static double *dup_doubles(const double *v, int64_t n)
{
    if (n == 0)
        return NULL;
    double *d = sx_alloc((size_t)n * sizeof *d);
    if (d != NULL)
        memcpy(d, v, (size_t)n * sizeof *d);
    return d;
}

static char **dup_names(const char *const *v, int64_t n)
{
    if (n == 0)
        return NULL;
    char **d = sx_calloc((size_t)n, sizeof *d);
    for (int64_t k = 0; d != NULL && k < n; k++) {
        if ((d[k] = sx_alloc(strlen(v[k]) + 1)) == NULL) {
            for (int64_t j = 0; j < k; j++)
                sx_free(d[j]);
            sx_free(d);
            return NULL;
        }
        strcpy(d[k], v[k]);
    }
    return d;
}

void nn_prep_freeze(sx_nn_net *net)
{
    if (net->prep.scale == 0)
        net->prep.scale = 1;
}

/* ---------------------------------------------------------------- setters */

/* A change to the preprocessing is refused once a model is alive or the network has trained. */
static sx_status may_change(const char *who, const sx_nn_net *net, bool same)
{
    if (same || (net->n_models == 0 && net->step == 0))
        return SX_OK;
    return sx_error(SX_E_STATE,
                    "%s: network %s %s: its preprocessing is fixed (set it before compiling or "
                    "training)",
                    who, net->name, net->step > 0 ? "has trained" : "has compiled models alive");
}

static bool doubles_equal(const double *a, int64_t na, const double *b, int64_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

static bool names_equal(char *const *a, int64_t na, const char *const *b, int64_t nb)
{
    if (na != nb)
        return false;
    for (int64_t k = 0; k < na; k++)
        if (strcmp(a[k], b[k]) != 0)
            return false;
    return true;
}

void sx_nn_net_set_input_scale(sx_nn_net *net, double scale)
{
    const char *who = "sx_nn_net_set_input_scale";
    if (net == NULL)
        return;
    sx_status s = SX_OK;
    if (!isfinite(scale) || !(scale > 0))
        s = sx_error(SX_E_ARG, "%s: scale %g (want finite and > 0)", who, scale);
    else
        s = may_change(who, net, net->prep.scale == scale);
    if (s != SX_OK)
        (void)nn_layer_fail(net, s);
    else
        net->prep.scale = scale;
}

double sx_nn_net_input_scale(const sx_nn_net *net)
{
    return net != NULL ? net->prep.scale : 0;
}

/* mean and std of n values for `who` (std finite and > 0). */
static sx_status check_stats(const char *who, int64_t n, const double *mean, const double *std)
{
    if (n < 0 || (n > 0 && (mean == NULL || std == NULL)))
        return sx_error(SX_E_ARG, "%s: n %lld with mean %s, std %s", who, (long long)n,
                        mean ? "given" : "NULL", std ? "given" : "NULL");
    for (int64_t k = 0; k < n; k++)
        if (!isfinite(mean[k]) || !isfinite(std[k]) || !(std[k] > 0))
            return sx_error(SX_E_ARG, "%s: value %lld has mean %g, std %g (want finite, std > 0)",
                            who, (long long)k, mean[k], std[k]);
    return SX_OK;
}

/* Replace (*m, *s) of *n values by copies of mean, std. */
static sx_status set_stats(int64_t *n, double **m, double **s, int64_t k, const double *mean,
                           const double *std)
{
    double *a = dup_doubles(mean, k), *b = dup_doubles(std, k);
    if (k > 0 && (a == NULL || b == NULL)) {
        sx_free(a);
        sx_free(b);
        return sx_error(SX_E_NOMEM, "preprocessing: out of memory");
    }
    sx_free(*m);
    sx_free(*s);
    *m = a;
    *s = b;
    *n = k;
    return SX_OK;
}

sx_status sx_nn_net_set_normalization(sx_nn_net *net, int64_t n, const double *mean,
                                      const double *std)
{
    const char *who = "sx_nn_net_set_normalization";
    if (net == NULL)
        return sx_error(SX_E_ARG, "%s: NULL network", who);
    SX_TRY(check_stats(who, n, mean, std));
    const sx_nn_layer *in = nn_input_layer(net);
    if (in == NULL || nn_input_count(net) > 1 || (n > 0 && nn_input_is_ids(in)))
        return sx_error(SX_E_STATE, "%s: network %s has %s", who, net->name,
                        in == NULL                ? "no input layer yet"
                        : nn_input_count(net) > 1 ? "several inputs"
                                                  : "an input of ids (never normalised)");
    int64_t size = sx_shape_size(in->rank, in->shape), c = in->shape[in->rank - 1];
    if (n != 0 && n != c && n != size)
        return sx_error(SX_E_SHAPE,
                        "%s: %lld values for an input of %lld channels and %lld features", who,
                        (long long)n, (long long)c, (long long)size);
    bool same = doubles_equal(net->prep.mean, net->prep.norm_n, mean, n) &&
                doubles_equal(net->prep.std, net->prep.norm_n, std, n);
    SX_TRY(may_change(who, net, same));
    return set_stats(&net->prep.norm_n, &net->prep.mean, &net->prep.std, n, mean, std);
}

sx_status sx_nn_net_set_target_scaling(sx_nn_net *net, int64_t n, const double *mean,
                                       const double *std)
{
    const char *who = "sx_nn_net_set_target_scaling";
    if (net == NULL)
        return sx_error(SX_E_ARG, "%s: NULL network", who);
    SX_TRY(check_stats(who, n, mean, std));
    bool same = doubles_equal(net->prep.tmean, net->prep.target_n, mean, n) &&
                doubles_equal(net->prep.tstd, net->prep.target_n, std, n);
    SX_TRY(may_change(who, net, same));
    return set_stats(&net->prep.target_n, &net->prep.tmean, &net->prep.tstd, n, mean, std);
}

static sx_status set_names(const char *who, sx_nn_net *net, int64_t n, const char *const *names,
                           int64_t *have_n, char ***have)
{
    if (net == NULL || n < 0 || (n > 0 && names == NULL))
        return sx_error(SX_E_ARG, "%s: NULL network, or n %lld with names %s", who, (long long)n,
                        names ? "given" : "NULL");
    for (int64_t k = 0; k < n; k++)
        if (names[k] == NULL || names[k][0] == '\0' || strlen(names[k]) > NAME_MAX_BYTES)
            return sx_error(SX_E_ARG, "%s: name %lld is %s (want 1..%d bytes)", who, (long long)k,
                            names[k] == NULL ? "NULL"
                            : names[k][0]    ? "too long"
                                             : "empty",
                            NAME_MAX_BYTES);
    SX_TRY(may_change(who, net, names_equal(*have, *have_n, names, n)));
    char **d = dup_names(names, n);
    if (n > 0 && d == NULL)
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    for (int64_t k = 0; k < *have_n; k++)
        sx_free((*have)[k]);
    sx_free(*have);
    *have = d;
    *have_n = n;
    return SX_OK;
}

sx_status sx_nn_net_set_class_names(sx_nn_net *net, int64_t n, const char *const *names)
{
    return set_names("sx_nn_net_set_class_names", net, n, names, net ? &net->prep.n_classes : NULL,
                     net ? &net->prep.classes : NULL);
}

sx_status sx_nn_net_set_feature_names(sx_nn_net *net, int64_t n, const char *const *names)
{
    return set_names("sx_nn_net_set_feature_names", net, n, names,
                     net ? &net->prep.n_features : NULL, net ? &net->prep.features : NULL);
}

sx_status sx_nn_net_set_image_resize(sx_nn_net *net, sx_ds_resize mode)
{
    const char *who = "sx_nn_net_set_image_resize";
    if (net == NULL || (mode != SX_DS_RESIZE_BILINEAR && mode != SX_DS_RESIZE_NEAREST))
        return sx_error(SX_E_ARG, "%s: NULL network or unknown mode %d", who, (int)mode);
    SX_TRY(may_change(who, net, net->prep.resize == mode));
    net->prep.resize = mode;
    return SX_OK;
}

/* ---------------------------------------------------------------- reading it */

static sx_nn_preprocess view_of(const nn_prep *p)
{
    sx_nn_preprocess v;
    memset(&v, 0, sizeof v);
    if (p == NULL)
        return v;
    v.input_scale = p->scale;
    v.norm_size = p->norm_n;
    v.mean = p->mean;
    v.std = p->std;
    v.target_size = p->target_n;
    v.target_mean = p->tmean;
    v.target_std = p->tstd;
    v.n_classes = p->n_classes;
    v.class_names = (const char *const *)p->classes;
    v.n_features = p->n_features;
    v.feature_names = (const char *const *)p->features;
    v.resize = p->resize;
    v.in_graph = p->in_graph;
    return v;
}

sx_nn_preprocess sx_nn_net_preprocess(const sx_nn_net *net)
{
    sx_nn_preprocess v = view_of(net ? &net->prep : NULL);
    v.in_graph = net != NULL;
    return v;
}

sx_nn_preprocess sx_nn_model_preprocess(const sx_nn_model *m)
{
    if (m != NULL && m->c.net != NULL)
        return sx_nn_net_preprocess(m->c.net);
    return view_of(m != NULL && m->file != NULL ? &m->file->prep : NULL);
}

const char *sx_nn_model_class_name(const sx_nn_model *m, int64_t k)
{
    sx_nn_preprocess v = sx_nn_model_preprocess(m);
    return k >= 0 && k < v.n_classes ? v.class_names[k] : NULL;
}

static void print_values(FILE *f, const char *key, int64_t n, const double *v)
{
    fprintf(f, "  %s:", key);
    for (int64_t k = 0; k < n && k < 8; k++)
        fprintf(f, " %.6g", v[k]);
    if (n > 8)
        fprintf(f, " ... (%lld values)", (long long)n);
    fputc('\n', f);
}

static void print_names(FILE *f, const char *key, int64_t n, const char *const *v)
{
    fprintf(f, "  %s (%lld):", key, (long long)n);
    for (int64_t k = 0; k < n && k < 16; k++)
        fprintf(f, "%s %s", k ? "," : "", v[k]);
    if (n > 16)
        fprintf(f, ", ...");
    fputc('\n', f);
}

void sx_nn_preprocess_print(const sx_nn_preprocess *p, FILE *f)
{
    if (p == NULL || f == NULL)
        return;
    fprintf(f, "  input_scale: %.17g%s\n", p->input_scale,
            p->in_graph ? "" : " (applied by the caller: a model file before version 3)");
    if (p->norm_size > 0) {
        print_values(f, "normalize_mean", p->norm_size, p->mean);
        print_values(f, "normalize_std", p->norm_size, p->std);
    }
    if (p->target_size > 0) {
        print_values(f, "target_mean", p->target_size, p->target_mean);
        print_values(f, "target_std", p->target_size, p->target_std);
    }
    if (p->n_classes > 0)
        print_names(f, "class_names", p->n_classes, p->class_names);
    if (p->n_features > 0)
        print_names(f, "feature_names", p->n_features, p->feature_names);
    fprintf(f, "  image_resize: %s\n", p->resize == SX_DS_RESIZE_NEAREST ? "nearest" : "bilinear");
}

/* ---------------------------------------------------------------- graph nodes */

sx_status nn_prep_check(const char *who, const sx_nn_net *net)
{
    const nn_prep *p = &net->prep;
    const sx_nn_layer *in = nn_input_layer(net), *last = nn_output_layer(net);
    if (in == NULL || last == NULL)
        return SX_OK; /* the caller reports the missing input */
    int64_t xs[SX_MAX_RANK];
    int xr = nn_input_shape(net, xs);
    int64_t in_size = sx_shape_size(xr, xs), out_size = sx_shape_size(last->rank, last->shape);
    int64_t out_last = last->shape[last->rank - 1];
    if (p->norm_n > 0 && nn_input_is_ids(in))
        return sx_error(SX_E_STATE, "%s: network %s normalises its input of ids", who, net->name);
    if (p->norm_n > 0 && p->norm_n != xs[xr - 1] && p->norm_n != in_size)
        return sx_error(SX_E_SHAPE, "%s: network %s normalises %lld values, its input has %lld",
                        who, net->name, (long long)p->norm_n, (long long)in_size);
    if (p->n_features > 0 && p->n_features != in_size)
        return sx_error(SX_E_SHAPE, "%s: network %s has %lld feature names, its input %lld values",
                        who, net->name, (long long)p->n_features, (long long)in_size);
    if (p->n_classes > 0 && (p->n_classes != out_last || net->n_outputs >= 2))
        return sx_error(SX_E_SHAPE, "%s: network %s has %lld class names, its output %lld classes",
                        who, net->name, (long long)p->n_classes, (long long)out_last);
    if (p->target_n == 0)
        return SX_OK;
    if (net->n_outputs >= 2)
        return sx_error(SX_E_STATE, "%s: network %s: target scaling needs one output", who,
                        net->name);
    if (p->target_n != out_last && p->target_n != out_size)
        return sx_error(SX_E_SHAPE, "%s: network %s scales %lld targets, its output has %lld", who,
                        net->name, (long long)p->target_n, (long long)out_size);
    return SX_OK;
}

/* A constant of the network's dtype: (n) when n is the last axis of `like`, else like's shape
 * without the batch axis; value k = mul * num[k] / den[k] (num NULL: 1; den NULL: 1). */
static sx_cg_node *const_row(sx_cg_graph *g, const sx_cg_node *like, int64_t n, double mul,
                             const double *num, const double *den)
{
    int rank = sx_cg_node_rank(like) - 1;
    const int64_t *shape = sx_cg_node_shape(like) + 1;
    int64_t one[1] = {n};
    bool per_last = shape[rank - 1] == n;
    sx_tensor *t = NULL;
    if (sx_tensor_new(sx_cg_node_dtype(like), per_last ? 1 : rank, per_last ? one : shape, &t) !=
        SX_OK)
        return NULL;
    for (int64_t k = 0; k < n; k++)
        sx_tensor_set(t, k, mul * (num ? num[k] : 1) / (den ? den[k] : 1));
    sx_cg_node *c = sx_cg_const(g, t);
    sx_tensor_free(t);
    return c;
}

sx_cg_node *nn_prep_input(nn_build *b, const sx_nn_net *net, sx_cg_node *x)
{
    const nn_prep *p = &net->prep;
    double scale = p->scale > 0 ? p->scale : 1;
    if (x == NULL)
        return NULL;
    if (p->norm_n == 0)
        return scale == 1 ? x : sx_cg_mul_scalar(b->g, x, scale);
    /* (x * scale - mean) / std as x * (scale / std) + (-mean / std): one pass */
    sx_cg_node *a = const_row(b->g, x, p->norm_n, scale, NULL, p->std);
    sx_cg_node *c = const_row(b->g, x, p->norm_n, -1, p->mean, p->std);
    return sx_cg_add(b->g, sx_cg_mul(b->g, x, a), c);
}

sx_cg_node *nn_prep_output(sx_cg_graph *g, const sx_nn_net *net, sx_cg_node *out)
{
    const nn_prep *p = &net->prep;
    if (p->target_n == 0 || out == NULL)
        return out;
    sx_cg_node *s = const_row(g, out, p->target_n, 1, p->tstd, NULL);
    sx_cg_node *m = const_row(g, out, p->target_n, 1, p->tmean, NULL);
    return sx_cg_add(g, sx_cg_mul(g, out, s), m);
}

sx_cg_node *nn_prep_target(sx_cg_graph *g, const sx_nn_net *net, sx_cg_node *y)
{
    const nn_prep *p = &net->prep;
    if (p->target_n == 0 || y == NULL)
        return y;
    sx_cg_node *a = const_row(g, y, p->target_n, 1, NULL, p->tstd);
    sx_cg_node *c = const_row(g, y, p->target_n, -1, p->tmean, p->tstd);
    return sx_cg_add(g, sx_cg_mul(g, y, a), c);
}

/* ---------------------------------------------------------------- model file metadata */

/* n values as "%.17g" separated by spaces, in a new string. */
static char *values_str(int64_t n, const double *v)
{
    size_t cap = (size_t)n * 26 + 1, at = 0;
    char *s = sx_alloc(cap);
    for (int64_t k = 0; s != NULL && k < n; k++)
        at += (size_t)snprintf(s + at, cap - at, "%s%.17g", k ? " " : "", v[k]);
    if (s != NULL && n == 0)
        s[0] = '\0';
    return s;
}

/* Names one per line, '\' and LF escaped as "\\" and "\n", in a new string. */
static char *names_str(int64_t n, char *const *v)
{
    size_t cap = 1;
    for (int64_t k = 0; k < n; k++)
        cap += 2 * strlen(v[k]) + 1;
    char *s = sx_alloc(cap), *o = s;
    for (int64_t k = 0; s != NULL && k < n; k++) {
        if (k)
            *o++ = '\n';
        for (const char *c = v[k]; *c; c++) {
            if (*c == '\\' || *c == '\n')
                *o++ = '\\';
            *o++ = *c == '\n' ? 'n' : *c;
        }
    }
    if (s != NULL)
        *o = '\0';
    return s;
}

void nn_prep_meta_free(nn_prep_meta *m)
{
    for (int i = 0; i < m->n; i++)
        sx_free(m->vals[i]);
    m->n = 0;
}

static sx_status meta_add(nn_prep_meta *m, const char *key, char *val)
{
    if (val == NULL) {
        nn_prep_meta_free(m);
        return sx_error(SX_E_NOMEM, "sx_nn_save: out of memory");
    }
    m->keys[m->n] = key;
    m->vals[m->n++] = val;
    return SX_OK;
}

sx_status nn_prep_meta_make(const nn_prep *p, nn_prep_meta *out)
{
    out->n = 0;
    if (p->norm_n > 0) {
        SX_TRY(meta_add(out, "normalize_mean", values_str(p->norm_n, p->mean)));
        SX_TRY(meta_add(out, "normalize_std", values_str(p->norm_n, p->std)));
    }
    if (p->target_n > 0) {
        SX_TRY(meta_add(out, "target_mean", values_str(p->target_n, p->tmean)));
        SX_TRY(meta_add(out, "target_std", values_str(p->target_n, p->tstd)));
    }
    if (p->n_classes > 0)
        SX_TRY(meta_add(out, "class_names", names_str(p->n_classes, p->classes)));
    if (p->n_features > 0)
        SX_TRY(meta_add(out, "feature_names", names_str(p->n_features, p->features)));
    const char *r = p->resize == SX_DS_RESIZE_NEAREST ? "nearest" : "bilinear";
    char *rs = sx_alloc(strlen(r) + 1);
    if (rs != NULL)
        strcpy(rs, r);
    return meta_add(out, "image_resize", rs);
}

/* Values "v v v" of key into a new array; *n their count (0 when the key is absent). */
static sx_status read_values(const char *path, const nn_meta_src *f, const char *key, int64_t *n,
                             double **out)
{
    const char *s = f->get(f->ctx, key);
    *n = 0;
    *out = NULL;
    if (s == NULL)
        return SX_OK;
    int64_t cap = 1;
    for (const char *c = s; *c; c++)
        cap += *c == ' ';
    double *v = sx_alloc((size_t)cap * sizeof *v);
    if (v == NULL)
        return sx_error(SX_E_NOMEM, "%s: out of memory", path);
    int64_t k = 0;
    for (const char *c = s; *c != '\0' || k == 0;) {
        char *e = NULL;
        double d = strtod(c, &e);
        if (e == c || !isfinite(d) || (*e != ' ' && *e != '\0') || k == cap) {
            sx_free(v);
            return sx_error(SX_E_FORMAT, "%s: bad '%s' metadata", path, key);
        }
        v[k++] = d;
        c = *e == ' ' ? e + 1 : e;
    }
    *n = k;
    *out = v;
    return SX_OK;
}

/* Names of key (one per line, escaped) into a new array; *n their count. */
static sx_status read_names(const char *path, const nn_meta_src *f, const char *key, int64_t *n,
                            char ***out)
{
    const char *s = f->get(f->ctx, key);
    *n = 0;
    *out = NULL;
    if (s == NULL)
        return SX_OK;
    int64_t cnt = 1;
    for (const char *c = s; *c; c++)
        cnt += *c == '\n';
    char **v = sx_calloc((size_t)cnt, sizeof *v);
    sx_status st = v ? SX_OK : sx_error(SX_E_NOMEM, "%s: out of memory", path);
    const char *c = s;
    for (int64_t k = 0; st == SX_OK && k < cnt; k++) {
        size_t len = strcspn(c, "\n");
        char *o = v[k] = sx_alloc(len + 1);
        if (o == NULL) {
            st = sx_error(SX_E_NOMEM, "%s: out of memory", path);
            break;
        }
        for (size_t i = 0; i < len; i++) {
            if (c[i] == '\\' && i + 1 < len && (c[i + 1] == '\\' || c[i + 1] == 'n'))
                *o++ = c[++i] == 'n' ? '\n' : '\\';
            else if (c[i] == '\\')
                st = sx_error(SX_E_FORMAT, "%s: bad escape in '%s'", path, key);
            else
                *o++ = c[i];
        }
        *o = '\0';
        if (st == SX_OK && v[k][0] == '\0')
            st = sx_error(SX_E_FORMAT, "%s: an empty name in '%s'", path, key);
        c += len + (c[len] == '\n');
    }
    if (st != SX_OK) {
        for (int64_t k = 0; v != NULL && k < cnt; k++)
            sx_free(v[k]);
        sx_free(v);
        return st;
    }
    *n = cnt;
    *out = v;
    return SX_OK;
}

sx_status nn_prep_meta_read_from(const char *path, const nn_meta_src *f, nn_prep *p)
{
    int64_t n1 = 0, n2 = 0;
    sx_status s = read_values(path, f, "normalize_mean", &n1, &p->mean);
    if (s == SX_OK)
        s = read_values(path, f, "normalize_std", &n2, &p->std);
    p->norm_n = n1;
    if (s == SX_OK && n1 != n2)
        s = sx_error(SX_E_FORMAT, "%s: %lld normalisation means, %lld stds", path, (long long)n1,
                     (long long)n2);
    if (s == SX_OK)
        s = read_values(path, f, "target_mean", &n1, &p->tmean);
    if (s == SX_OK)
        s = read_values(path, f, "target_std", &n2, &p->tstd);
    p->target_n = n1;
    if (s == SX_OK && n1 != n2)
        s = sx_error(SX_E_FORMAT, "%s: %lld target means, %lld stds", path, (long long)n1,
                     (long long)n2);
    for (int64_t k = 0; s == SX_OK && k < p->norm_n + p->target_n; k++) {
        double sd = k < p->norm_n ? p->std[k] : p->tstd[k - p->norm_n];
        if (!(sd > 0))
            s = sx_error(SX_E_FORMAT, "%s: a std of %g in the preprocessing", path, sd);
    }
    if (s == SX_OK)
        s = read_names(path, f, "class_names", &p->n_classes, &p->classes);
    if (s == SX_OK)
        s = read_names(path, f, "feature_names", &p->n_features, &p->features);
    const char *r = f->get(f->ctx, "image_resize");
    if (s == SX_OK && r != NULL && strcmp(r, "bilinear") != 0 && strcmp(r, "nearest") != 0)
        s = sx_error(SX_E_FORMAT, "%s: image_resize '%s' (want bilinear or nearest)", path, r);
    if (s == SX_OK)
        p->resize =
            r != NULL && strcmp(r, "nearest") == 0 ? SX_DS_RESIZE_NEAREST : SX_DS_RESIZE_BILINEAR;
    return s;
}

/* ---------------------------------------------------------------- the data of a fit */

/* Per-element mean and population std (a constant element gets 1) of a target source's y, in
 * one pass (Welford), into new arrays of y_size. */
static sx_status target_stats(const sx_ds_source *s, int64_t *n_out, double **mean_out,
                              double **std_out)
{
    int64_t ny = sx_ds_spec_y_size(sx_ds_source_spec(s)), B = 256, count = 0, seen = 0;
    int64_t ys[2] = {B, ny};
    sx_ds_loader_params lp = sx_ds_loader_params_default();
    lp.batch_size = B;
    lp.shuffle = false;
    sx_ds_loader *l = NULL;
    sx_tensor *y = NULL;
    double *m = sx_calloc((size_t)ny, sizeof *m), *q = sx_calloc((size_t)ny, sizeof *q);
    sx_status st = m && q ? SX_OK : sx_error(SX_E_NOMEM, "standardize_targets: out of memory");
    if (st == SX_OK)
        st = sx_ds_loader_new(s, &lp, &l);
    if (st == SX_OK)
        st = sx_tensor_new(SX_F64, 2, ys, &y);
    while (st == SX_OK && (st = sx_ds_loader_next(l, NULL, y, &count)) == SX_OK && count > 0) {
        const double *v = y->data;
        for (int64_t r = 0; r < count; r++) {
            seen++;
            for (int64_t j = 0; j < ny; j++) {
                double d = v[r * ny + j] - m[j];
                m[j] += d / (double)seen;
                q[j] += d * (v[r * ny + j] - m[j]);
            }
        }
    }
    for (int64_t j = 0; st == SX_OK && j < ny; j++) {
        double sd = sqrt(q[j] / (double)seen);
        q[j] = sd > 0 && isfinite(sd) ? sd : 1;
    }
    sx_ds_loader_free(l);
    sx_tensor_free(y);
    if (st != SX_OK) {
        sx_free(m);
        sx_free(q);
        return st;
    }
    *n_out = ny;
    *mean_out = m;
    *std_out = q;
    return SX_OK;
}

/* A standardised source: its statistics become (adopt, none yet) or must be the network's;
 * *src is replaced by its parent. */
static sx_status unwrap_standardized(const char *who, sx_nn_net *net, const sx_ds_source **src,
                                     bool adopt)
{
    const sx_ds_source *par = NULL;
    const double *m = NULL, *sd = NULL;
    if (src == NULL || *src == NULL || !sx_ds_source_standardization(*src, &par, &m, &sd))
        return SX_OK;
    nn_prep *p = &net->prep;
    double xs = sx_ds_source_spec(par)->x_scale;
    int64_t n = sx_ds_spec_x_size(sx_ds_source_spec(par));
    if (adopt && p->norm_n == 0 && (p->scale == 0 || p->scale == xs)) {
        if (p->scale == 0)
            p->scale = xs;
        SX_TRY(sx_nn_net_set_normalization(net, n, m, sd));
    } else if (!(p->scale == xs && doubles_equal(p->mean, p->norm_n, m, n) &&
                 doubles_equal(p->std, p->norm_n, sd, n))) {
        return sx_error(SX_E_STATE,
                        "%s: the source is standardised with other statistics (or input scale "
                        "%g) than network %s's own preprocessing (input scale %g, %lld values): "
                        "give the network its raw data",
                        who, xs, net->name, p->scale, (long long)p->norm_n);
    }
    *src = par;
    return SX_OK;
}

/* The source's class names against the network's: adopted (adopt, none yet) or equal. */
static sx_status class_names_of(const char *who, sx_nn_net *net, const sx_ds_source *s, bool adopt)
{
    int64_t k = sx_ds_source_spec(s)->classes;
    if (k <= 0 || sx_ds_source_class_name(s, 0) == NULL)
        return SX_OK;
    nn_prep *p = &net->prep;
    if (p->n_classes == 0 && adopt) {
        const char **names = sx_alloc((size_t)k * sizeof *names);
        if (names == NULL)
            return sx_error(SX_E_NOMEM, "%s: out of memory", who);
        for (int64_t c = 0; c < k; c++)
            names[c] = sx_ds_source_class_name(s, c);
        sx_status st = sx_nn_net_set_class_names(net, k, names);
        sx_free(names);
        return st;
    }
    for (int64_t c = 0; p->n_classes > 0 && c < k; c++) {
        const char *a = sx_ds_source_class_name(s, c);
        if (c >= p->n_classes || a == NULL || strcmp(a, p->classes[c]) != 0)
            return sx_error(SX_E_STATE,
                            "%s: the source's class %lld is '%s', network %s's '%s': read the "
                            "data with the network's class list",
                            who, (long long)c, a ? a : "(none)", net->name,
                            c < p->n_classes ? p->classes[c] : "(none)");
    }
    return SX_OK;
}

/* The source's feature names (a CSV header's columns), when it has one for every feature. */
static sx_status feature_names_of(const char *who, sx_nn_net *net, const sx_ds_source *s)
{
    int64_t n = sx_ds_spec_x_size(sx_ds_source_spec(s));
    if (sx_ds_source_x_name(s, 0) == NULL)
        return SX_OK;
    const char **names = sx_alloc((size_t)n * sizeof *names);
    if (names == NULL)
        return sx_error(SX_E_NOMEM, "%s: out of memory", who);
    bool all = true;
    for (int64_t k = 0; k < n && all; k++)
        all = (names[k] = sx_ds_source_x_name(s, k)) != NULL;
    sx_status st = all ? sx_nn_net_set_feature_names(net, n, names) : SX_OK;
    sx_free(names);
    return st;
}

/* augment's normalisation: adopted (adopt, none yet) or equal to the network's; then cleared. */
static sx_status augment_norm(const char *who, sx_nn_net *net, sx_ds_augment *a, bool adopt)
{
    if (a->mean == NULL)
        return SX_OK;
    const sx_nn_layer *in = nn_input_layer(net);
    int64_t c = in->shape[in->rank - 1];
    nn_prep *p = &net->prep;
    if (adopt && p->norm_n == 0) {
        SX_TRY(sx_nn_net_set_normalization(net, c, a->mean, a->std));
    } else if (!(doubles_equal(p->mean, p->norm_n, a->mean, c) &&
                 doubles_equal(p->std, p->norm_n, a->std, c))) {
        return sx_error(SX_E_STATE,
                        "%s: augment's mean/std differ from network %s's normalisation (%lld "
                        "values): the network normalises its input itself",
                        who, net->name, (long long)p->norm_n);
    }
    a->mean = a->std = NULL;
    return SX_OK;
}

/* fit's standardize: per-feature statistics of raw * scale (the source's values rescaled). */
static sx_status standardize_features(sx_nn_net *net, const sx_ds_source *s)
{
    sx_ds_stats *st = NULL;
    SX_TRY(sx_ds_stats_compute(s, 0, &st));
    double r = net->prep.scale / sx_ds_source_spec(s)->x_scale;
    for (int64_t k = 0; k < st->size; k++) {
        st->mean[k] *= r;
        st->std[k] *= r;
    }
    sx_status s2 = sx_nn_net_set_normalization(net, st->size, st->mean, st->std);
    sx_ds_stats_free(st);
    return s2;
}

sx_status nn_prep_sources(const char *who, sx_nn_net *net, sx_nn_fit_params *p,
                          const sx_ds_source **train, const sx_ds_source **val, bool adopt)
{
    if (nn_input_layer(net) == NULL)
        return SX_OK; /* the fit's own checks report it */
    SX_TRY(unwrap_standardized(who, net, train, adopt));
    SX_TRY(unwrap_standardized(who, net, val, false));
    nn_prep *pp = &net->prep;
    if (adopt && pp->scale == 0)
        pp->scale = sx_ds_source_spec(*train)->x_scale;
    SX_TRY(augment_norm(who, net, &p->augment, adopt));
    bool targets = sx_ds_source_spec(*train)->classes == 0;
    if (adopt && p->standardize && pp->norm_n == 0)
        SX_TRY(standardize_features(net, *train));
    if (adopt && p->standardize_targets && targets && pp->target_n == 0) {
        int64_t n = 0;
        double *m = NULL, *sd = NULL;
        SX_TRY(target_stats(*train, &n, &m, &sd));
        sx_status s = sx_nn_net_set_target_scaling(net, n, m, sd);
        sx_free(m);
        sx_free(sd);
        SX_TRY(s);
    }
    SX_TRY(class_names_of(who, net, *train, adopt));
    if (adopt && pp->n_features == 0)
        SX_TRY(feature_names_of(who, net, *train));
    if (val != NULL && *val != NULL)
        SX_TRY(class_names_of(who, net, *val, false));
    return SX_OK;
}

/* ---------------------------------------------------------------- checkpoints */

/* Statistics (n, a, b) the network lacks, moved from the file's (fn, fa, fb). */
static void take_stats(int64_t *n, double **a, double **b, int64_t *fn, double **fa, double **fb)
{
    if (*n > 0 || *fn == 0)
        return;
    double *ta = *a, *tb = *b;
    *a = *fa, *b = *fb, *n = *fn;
    *fa = ta, *fb = tb, *fn = 0;
}

/* Names (n, v) the network lacks, moved from the file's (fn, fv). */
static void take_names(int64_t *n, char ***v, int64_t *fn, char ***fv)
{
    if (*n > 0 || *fn == 0)
        return;
    char **t = *v;
    *v = *fv, *n = *fn;
    *fv = t, *fn = 0;
}

sx_status nn_prep_merge(const char *path, const char *net_name, nn_prep *have, nn_prep *file,
                        bool apply)
{
    const char *what = NULL;
    if (have->scale != 0 && file->scale != 0 && have->scale != file->scale)
        what = "input scale";
    else if (have->norm_n > 0 && file->norm_n > 0 &&
             !(doubles_equal(have->mean, have->norm_n, file->mean, file->norm_n) &&
               doubles_equal(have->std, have->norm_n, file->std, file->norm_n)))
        what = "normalisation";
    else if (have->target_n > 0 && file->target_n > 0 &&
             !(doubles_equal(have->tmean, have->target_n, file->tmean, file->target_n) &&
               doubles_equal(have->tstd, have->target_n, file->tstd, file->target_n)))
        what = "target scaling";
    else if (have->n_classes > 0 && file->n_classes > 0 &&
             !names_equal(have->classes, have->n_classes, (const char *const *)file->classes,
                          file->n_classes))
        what = "class names";
    if (what != NULL)
        return sx_error(SX_E_STATE, "%s: the checkpoint's %s differs from network %s's", path, what,
                        net_name);
    if (!apply)
        return SX_OK;
    if (have->scale == 0)
        have->scale = file->scale;
    take_stats(&have->norm_n, &have->mean, &have->std, &file->norm_n, &file->mean, &file->std);
    take_stats(&have->target_n, &have->tmean, &have->tstd, &file->target_n, &file->tmean,
               &file->tstd);
    take_names(&have->n_classes, &have->classes, &file->n_classes, &file->classes);
    take_names(&have->n_features, &have->features, &file->n_features, &file->features);
    return SX_OK;
}

static const char *file_meta(const void *ctx, const char *key)
{
    return sx_cg_file_meta(ctx, key);
}

sx_status nn_prep_meta_read(const char *path, const sx_cg_file *f, nn_prep *p)
{
    nn_meta_src src = {file_meta, f};
    return nn_prep_meta_read_from(path, &src, p);
}

const nn_prep *nn_model_prep(const sx_nn_model *m)
{
    return m == NULL          ? NULL
           : m->c.net != NULL ? &m->c.net->prep
           : m->file != NULL  ? &m->file->prep
                              : NULL;
}
