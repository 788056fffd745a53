/* common.c: what the commands of the `strix` tool share: one-line messages with the exit
 * status they imply, option values, telling files apart by their first bytes, loading a model
 * and reading an input array. */
#include "tool.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- messages */

static int vmessage(int status, const char *cmd, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (status == TOOL_USAGE)
        fprintf(stderr, "strix %s: %s (strix %s --help)\n", cmd, msg, cmd);
    else
        fprintf(stderr, "strix %s: %s\n", cmd, msg);
    return status;
}

int tool_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vmessage(TOOL_FAIL, cmd, fmt, ap);
    va_end(ap);
    return r;
}

int tool_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vmessage(TOOL_USAGE, cmd, fmt, ap);
    va_end(ap);
    return r;
}

int tool_fail_sx(const char *cmd, const char *what)
{
    return tool_fail(cmd, "%s: %s", what, sx_last_error());
}

/* ---------------------------------------------------------------- option values */

bool tool_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (s == NULL || *s == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool tool_parse_double(const char *s, double *out)
{
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0;
    if (s == NULL || *s == '\0' || *end != '\0' || !isfinite(v))
        return false;
    *out = v;
    return true;
}

bool tool_is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

/* ---------------------------------------------------------------- files */

bool tool_has_ext(const char *path, const char *ext)
{
    size_t n = strlen(path), k = strlen(ext);
    if (n < k)
        return false;
    for (size_t i = 0; i < k; i++)
        if (tolower((unsigned char)path[n - k + i]) != tolower((unsigned char)ext[i]))
            return false;
    return true;
}

tool_file tool_file_kind(const char *path)
{
    if (tool_has_ext(path, ".onnx"))
        return TOOL_FILE_ONNX;
    unsigned char b[8] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(b, 1, sizeof b, f) : 0;
    if (f)
        fclose(f);
    if (n >= 8 && memcmp(b, "STRIXMDL", 8) == 0)
        return TOOL_FILE_SXM;
    if (n >= 6 && memcmp(b, "\x93NUMPY", 6) == 0)
        return TOOL_FILE_NPY;
    if (n >= 4 && memcmp(b, "\x89PNG", 4) == 0)
        return TOOL_FILE_IMAGE;
    if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF)
        return TOOL_FILE_IMAGE;
    /* PGM/PPM, BMP, GIF by their magic; TGA has none: by its name */
    if ((n >= 2 && b[0] == 'P' && (b[1] == '5' || b[1] == '6')) ||
        (n >= 2 && b[0] == 'B' && b[1] == 'M') || (n >= 4 && memcmp(b, "GIF8", 4) == 0) ||
        tool_has_ext(path, ".tga"))
        return TOOL_FILE_IMAGE;
    if ((n >= 4 && b[0] == 0 && b[1] == 0 && b[2] >= 0x08 && b[2] <= 0x0E) ||
        (n >= 2 && b[0] == 0x1f && b[1] == 0x8b))
        return TOOL_FILE_IDX;
    return TOOL_FILE_UNKNOWN;
}

sx_status tool_load_model(const char *path, int64_t batch, sx_nn_model **out)
{
    switch (tool_file_kind(path)) {
    case TOOL_FILE_SXM:
        return sx_nn_load(path, batch, out);
    case TOOL_FILE_ONNX:
        return tool_onnx_import(path, batch, true, out);
    case TOOL_FILE_UNKNOWN:
        /* a missing file: the loader's message says why */
        if (access(path, F_OK) != 0)
            return sx_nn_load(path, batch, out);
        break;
    case TOOL_FILE_NPY:
    case TOOL_FILE_IDX:
    case TOOL_FILE_IMAGE:
        break;
    }
    *out = NULL;
    return sx_error(SX_E_FORMAT, "%s: not a model file (want a .sxm or .onnx model)", path);
}

/* ---------------------------------------------------------------- arrays */

static sx_status from_npy(const char *path, tool_array *a)
{
    sx_ds_npy *n = NULL;
    SX_TRY(sx_ds_npy_read_raw(path, &n));
    a->rank = n->rank;
    memcpy(a->dims, n->dims, sizeof a->dims);
    a->count = n->count;
    a->bytes = n->type == SX_DS_NPY_U8;
    a->type = sx_ds_npy_type_name(n->type);
    a->v = sx_alloc((size_t)(n->count > 0 ? n->count : 1) * sizeof *a->v);
    for (int64_t i = 0; a->v != NULL && i < n->count; i++)
        a->v[i] = sx_ds_npy_get(n, i);
    sx_ds_npy_free(n);
    return a->v ? SX_OK : sx_error(SX_E_NOMEM, "%s: out of memory", path);
}

static sx_status from_idx(const char *path, tool_array *a)
{
    sx_ds_idx *x = NULL;
    SX_TRY(sx_ds_idx_read_raw(path, 0, &x));
    sx_tensor *t = NULL;
    sx_status s = sx_ds_idx_to_tensor(x, SX_F64, 1.0, &t);
    if (s == SX_OK) {
        a->rank = x->rank;
        memcpy(a->dims, x->dims, sizeof a->dims);
        a->count = x->count;
        a->bytes = x->type == SX_DS_U8;
        a->type = sx_ds_type_name(x->type);
        a->v = t->data; /* the tensor's data, owned: taken over */
        t->owns = false;
    }
    sx_tensor_free(t);
    sx_ds_idx_free(x);
    return s;
}

sx_status tool_array_read(const char *path, tool_array *a)
{
    memset(a, 0, sizeof *a);
    tool_file k = tool_file_kind(path);
    if (k == TOOL_FILE_NPY)
        return from_npy(path, a);
    if (k == TOOL_FILE_IDX)
        return from_idx(path, a);
    if (access(path, R_OK) != 0)
        return sx_error(SX_E_IO, "%s: cannot open: %s", path, strerror(errno));
    return sx_error(SX_E_FORMAT, "%s: not a .npy or IDX file", path);
}

/* The whole file into memory (sx_alloc'd). */
static sx_status slurp(const char *path, uint8_t **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return sx_error(SX_E_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = sx_alloc(cap);
    for (size_t k; b != NULL && (k = fread(b + n, 1, cap - n, f)) > 0;) {
        n += k;
        uint8_t *c = n == cap ? sx_realloc(b, cap *= 2) : b;
        if (c == NULL)
            sx_free(b);
        b = c;
    }
    bool err = ferror(f);
    fclose(f);
    if (b == NULL || err) {
        sx_free(b);
        return b == NULL ? sx_error(SX_E_NOMEM, "%s: out of memory", path)
                         : sx_error(SX_E_IO, "%s: read error", path);
    }
    *buf = b;
    *len = n;
    return SX_OK;
}

sx_status tool_image_read(const char *path, int64_t h, int64_t w, int64_t c, sx_ds_resize mode,
                          tool_array *a)
{
    memset(a, 0, sizeof *a);
    uint8_t *buf = NULL, *px = NULL;
    size_t len = 0;
    SX_TRY(slurp(path, &buf, &len));
    px = sx_alloc((size_t)(h * w * c));
    a->v = sx_alloc((size_t)(h * w * c) * sizeof *a->v);
    sx_status s = px && a->v ? sx_ds_image_decode(buf, len, path, h, w, c, mode, px)
                             : sx_error(SX_E_NOMEM, "%s: out of memory", path);
    if (s == SX_OK) {
        a->rank = 3;
        a->dims[0] = h, a->dims[1] = w, a->dims[2] = c;
        for (int k = 3; k < SX_MAX_RANK; k++)
            a->dims[k] = 1;
        a->count = h * w * c;
        a->bytes = true;
        a->type = "u8";
        for (int64_t i = 0; i < a->count; i++)
            a->v[i] = px[i];
    } else {
        tool_array_free(a);
    }
    sx_free(px);
    sx_free(buf);
    return s;
}

void tool_array_free(tool_array *a)
{
    sx_free(a->v);
    memset(a, 0, sizeof *a);
}
