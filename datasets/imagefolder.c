/* imagefolder.c: root/<class>/<image> into an image set of bytes. Two passes: list and sort the
 * class folders and their image files (names only; other entries counted, or refused in strict
 * mode), then allocate the whole set once and decode and resize every file straight into its row
 * (decode.c), through one file buffer that grows to the largest file. */
#define _POSIX_C_SOURCE 200809L /* opendir, stat */
#include "datasets_impl.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* A growing list of owned strings. */
typedef struct strlist {
    char **v;
    int64_t n, cap;
} strlist;

static void list_free(strlist *l)
{
    for (int64_t k = 0; k < l->n; k++)
        sx_free(l->v[k]);
    sx_free(l->v);
    *l = (strlist){0};
}

/* Append "a/b" (b NULL: a) to the list. */
static bool list_push(strlist *l, const char *a, const char *b)
{
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 16;
        char **v = sx_realloc(l->v, (size_t)cap * sizeof *v);
        if (v == NULL)
            return false;
        l->v = v;
        l->cap = cap;
    }
    size_t n = strlen(a) + (b ? strlen(b) + 1 : 0) + 1;
    char *s = sx_alloc(n);
    if (s == NULL)
        return false;
    snprintf(s, n, b ? "%s/%s" : "%s", a, b);
    l->v[l->n++] = s;
    return true;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The file names the loader reads (any case), as listed in messages. */
static const char *const image_exts[] = {".png", ".jpg", ".jpeg", ".pgm", ".ppm",
                                         ".pnm", ".bmp", ".gif",  ".tga"};
#define IMAGE_EXTS ".png, .jpg, .jpeg, .pgm, .ppm, .pnm, .bmp, .gif, .tga"

static bool is_image_name(const char *path)
{
    const char *base = strrchr(path, '/'), *dot = strrchr(base ? base : path, '.');
    for (size_t k = 0; dot != NULL && k < sizeof image_exts / sizeof *image_exts; k++)
        if (strcasecmp(dot, image_exts[k]) == 0)
            return true;
    return false;
}

/* Why the entry at path is not read (NULL: it is): root's entries must be folders (dirs true),
 * a class folder's entries regular files named as images. */
static const char *skip_reason(const char *path, bool dirs)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return "cannot stat (a dangling link?)";
    if (dirs)
        return S_ISDIR(sb.st_mode) ? NULL : "not a class folder";
    if (!S_ISREG(sb.st_mode))
        return "not a regular file";
    return is_image_name(path) ? NULL : "not an image file name (" IMAGE_EXTS ")";
}

/* Every non-hidden entry of dir (no leading '.') as "dir/name", sorted. */
static sx_status list_all(const char *dir, strlist *all)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return sx_error(SX_E_IO, "%s: cannot open: %s", dir, strerror(errno));
    sx_status st = SX_OK;
    struct dirent *e;
    while (st == SX_OK && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && !list_push(all, dir, e->d_name))
            st = sx_error(SX_E_NOMEM, "sx_ds_image_folder_load: out of memory");
    closedir(d);
    if (st == SX_OK && all->n > 0) /* qsort's array must not be NULL, even for 0 */
        qsort(all->v, (size_t)all->n, sizeof *all->v, cmp_str);
    return st;
}

/* Append to out the sorted entries of dir that are read: class folders (dirs true; their names
 * only) or image files (full paths). The others are counted in rep, or refused when strict. */
static sx_status list_dir(const char *dir, bool dirs, bool strict, sx_ds_image_folder_report *rep,
                          strlist *out)
{
    strlist all = {0};
    sx_status st = list_all(dir, &all);
    for (int64_t k = 0; st == SX_OK && k < all.n; k++) {
        char *full = all.v[k];
        const char *why = skip_reason(full, dirs);
        if (why != NULL && strict) {
            st = sx_error(SX_E_FORMAT, "%s: %s (strict: every entry must be read)", full, why);
        } else if (why != NULL) {
            if (rep->skipped++ == 0)
                snprintf(rep->first_skipped, sizeof rep->first_skipped, "%s", full);
        } else if (list_push(out, dirs ? full + strlen(dir) + 1 : full, NULL)) {
            continue; /* a class keeps its folder's name only; a file its full path */
        } else {
            st = sx_error(SX_E_NOMEM, "sx_ds_image_folder_load: out of memory");
        }
    }
    list_free(&all);
    return st;
}

/* The whole file at path into *buf (grown as needed; *cap its size), *len its bytes. */
static sx_status read_file(const char *path, uint8_t **buf, size_t *cap, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return sx_error(SX_E_IO, "%s: cannot open: %s", path, strerror(errno));
    sx_status st = SX_OK;
    *len = 0;
    for (;;) {
        if (*len == *cap) {
            size_t n = *cap ? 2 * *cap : (size_t)1 << 16;
            uint8_t *b = sx_realloc(*buf, n);
            if (b == NULL) {
                st = sx_error(SX_E_NOMEM, "%s: out of memory reading the file", path);
                break;
            }
            *buf = b;
            *cap = n;
        }
        size_t got = fread(*buf + *len, 1, *cap - *len, f);
        *len += got;
        if (got == 0)
            break;
    }
    if (st == SX_OK && ferror(f))
        st = sx_error(SX_E_IO, "%s: read error", path);
    fclose(f);
    return st;
}

/* Every image path under root, sorted by class then name, and its label; rep counts the rest. */
static sx_status scan(const char *root, bool strict, sx_ds_image_folder_report *rep,
                      strlist *classes, strlist *files, int32_t **labels)
{
    SX_TRY(list_dir(root, true, strict, rep, classes));
    if (classes->n == 0)
        return sx_error(SX_E_FORMAT, "%s: no class folders", root);
    if (classes->n > INT32_MAX)
        return sx_error(SX_E_RANGE, "%s: %lld class folders (at most 2^31 - 1)", root,
                        (long long)classes->n);
    strlist dir = {0};
    sx_status st = SX_OK;
    for (int64_t k = 0; st == SX_OK && k < classes->n; k++) {
        int64_t before = files->n;
        if (!list_push(&dir, root, classes->v[k]))
            st = sx_error(SX_E_NOMEM, "sx_ds_image_folder_load: out of memory");
        if (st == SX_OK)
            st = list_dir(dir.v[dir.n - 1], false, strict, rep, files);
        if (st == SX_OK && files->n == before)
            st = sx_error(SX_E_FORMAT, "%s: no image files (" IMAGE_EXTS ")", dir.v[dir.n - 1]);
        int32_t *l = st == SX_OK ? sx_realloc(*labels, (size_t)files->n * sizeof *l) : NULL;
        if (st == SX_OK && l == NULL)
            st = sx_error(SX_E_NOMEM, "sx_ds_image_folder_load: out of memory");
        for (int64_t i = before; st == SX_OK && i < files->n; i++)
            l[i] = (int32_t)k;
        if (l != NULL)
            *labels = l;
    }
    list_free(&dir);
    return st;
}

sx_ds_image_folder_params sx_ds_image_folder_params_default(void)
{
    return (sx_ds_image_folder_params){.h = 32, .w = 32, .c = 3, .resize = SX_DS_RESIZE_BILINEAR};
}

/* Decode every file into d's rows. */
static sx_status decode_all(const strlist *files, const sx_ds_image_folder_params *q,
                            sx_ds_images *d)
{
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    int64_t row = q->h * q->w * q->c;
    sx_status st = SX_OK;
    for (int64_t i = 0; st == SX_OK && i < files->n; i++) {
        st = read_file(files->v[i], &buf, &cap, &len);
        if (st == SX_OK)
            st = sx_ds_image_decode(buf, len, files->v[i], q->h, q->w, q->c, q->resize,
                                    d->pixels + i * row);
    }
    sx_free(buf);
    return st;
}

sx_status sx_ds_image_folder_load(const char *root, const sx_ds_image_folder_params *p,
                                  sx_ds_images **out)
{
    const char *who = "sx_ds_image_folder_load";
    if (out == NULL || root == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, out == NULL ? "out" : "root");
    *out = NULL;
    sx_ds_image_folder_params q = p ? *p : sx_ds_image_folder_params_default();
    if (q.h < 1 || q.w < 1 || (q.c != 1 && q.c != 3) || q.h * q.w * q.c > SX_DS_IMAGE_MAX_BYTES ||
        (q.resize != SX_DS_RESIZE_BILINEAR && q.resize != SX_DS_RESIZE_NEAREST))
        return sx_error(SX_E_ARG,
                        "%s: size %lldx%lld, %lld channels, resize mode %d (want h, w "
                        ">= 1, 1 or 3 channels, bilinear or nearest)",
                        who, (long long)q.h, (long long)q.w, (long long)q.c, (int)q.resize);
    strlist classes = {0}, files = {0};
    int32_t *labels = NULL;
    uint8_t *bytes = NULL; /* the labels as bytes, for 256 classes or fewer */
    sx_ds_images *d = NULL;
    sx_ds_image_folder_report rep = {0};
    if (q.report != NULL)
        *q.report = rep;
    sx_status st = scan(root, q.strict, &rep, &classes, &files, &labels);
    if (st == SX_OK && classes.n <= 256) {
        if ((bytes = sx_alloc((size_t)files.n)) == NULL)
            st = sx_error(SX_E_NOMEM, "%s: out of memory", who);
        for (int64_t i = 0; st == SX_OK && i < files.n; i++)
            bytes[i] = (uint8_t)labels[i];
    }
    int64_t shape[4] = {files.n, q.h, q.w, q.c};
    if (st == SX_OK && sx_shape_check(who, 4, shape) != SX_OK)
        st = sx_error(SX_E_RANGE, "%s: %lld images of %lldx%lldx%lld overflow", root,
                      (long long)files.n, (long long)q.h, (long long)q.w, (long long)q.c);
    if (st == SX_OK && (d = sx_calloc(1, sizeof *d)) != NULL)
        d->pixels = sx_alloc((size_t)sx_shape_size(4, shape));
    if (st == SX_OK && (d == NULL || d->pixels == NULL))
        st = sx_error(SX_E_NOMEM, "%s: out of memory for %lld images", who, (long long)files.n);
    if (st == SX_OK) {
        *d = (sx_ds_images){.n = files.n,
                            .h = q.h,
                            .w = q.w,
                            .c = q.c,
                            .classes = classes.n,
                            .pixels = d->pixels,
                            .labels = bytes,
                            .labels32 = bytes != NULL ? NULL : labels,
                            .class_names = classes.v};
        if (bytes == NULL)
            labels = NULL;
        bytes = NULL;
        classes = (strlist){0}; /* now the set's */
        st = decode_all(&files, &q, d);
    }
    sx_free(labels);
    sx_free(bytes);
    list_free(&classes);
    list_free(&files);
    if (st != SX_OK) {
        sx_ds_images_free(d);
        return st;
    }
    rep.images = d->n;
    rep.files = rep.images + rep.skipped;
    if (q.report != NULL)
        *q.report = rep;
    *out = d;
    return SX_OK;
}
