/* decode.c: one PNG (libpng), JPEG (libjpeg-turbo), or PNM, BMP, GIF or TGA image (stb_image,
 * decode_stb.c) from memory to (h, w, c) bytes, then resized; the content picks the decoder. libpng
 * and libjpeg report errors by longjmp: libpng through png_jmpbuf after our error function, libjpeg
 * from our error_exit (and emit_message, so that its warnings about corrupt data are errors too,
 * never a silently grey image). What is allocated across the jump lives in a struct the caller
 * frees, so nothing leaks whichever way the decoder leaves. */
#include "datasets_impl.h"

#include <jpeglib.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

/* A decoded image: (h, w, c) bytes in pixels (sx_alloc; the caller frees). */
typedef struct image {
    uint8_t *pixels;
    int64_t h, w, c;
} image;

static sx_status too_large(const char *name, int64_t h, int64_t w, int64_t c)
{
    return sx_error(SX_E_FORMAT, "%s: image of %lldx%lldx%lld is larger than %lld bytes", name,
                    (long long)h, (long long)w, (long long)c, (long long)SX_DS_IMAGE_MAX_BYTES);
}

/* ---------------------------------------------------------------- PNG */

typedef struct png_src {
    const uint8_t *p;
    size_t len, pos;
    char msg[200];
    bool nomem; /* an allocation failed (libpng's or ours) */
    png_bytep *rows;
} png_src;

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg; /* benign (an unknown chunk, an sRGB profile): the image is still right */
}

static void png_read_mem(png_structp png, png_bytep out, png_size_t n)
{
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->pos)
        png_error(png, "truncated file");
    memcpy(out, s->p + s->pos, n);
    s->pos += n;
}

static png_voidp png_alloc_hook(png_structp png, png_alloc_size_t n)
{
    void *p = sx_alloc(n);
    if (p == NULL)
        ((png_src *)png_get_mem_ptr(png))->nomem = true;
    return p;
}

static void png_free_hook(png_structp png, png_voidp p)
{
    (void)png;
    sx_free(p);
}

/* The transforms to 8-bit samples of c channels (after png_read_info). */
static void png_transforms(png_structp png, png_infop info, int64_t c)
{
    int type = png_get_color_type(png, info);
    png_set_expand(png); /* palette -> RGB, low-bit grey -> 8 bits, tRNS -> alpha */
    png_set_strip_16(png);
    png_set_strip_alpha(png);
    bool grey = (type & PNG_COLOR_MASK_COLOR) == 0;
    if (c == 1 && !grey)
        png_set_rgb_to_gray_fixed(png, 1, -1, -1);
    if (c == 3 && grey)
        png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
}

/* The decoding proper, under the caller's setjmp. */
static sx_status png_body(const char *name, png_structp png, png_infop info, png_src *s, int64_t c,
                          image *im)
{
    png_set_read_fn(png, s, png_read_mem);
    png_read_info(png, info);
    png_transforms(png, info, c);
    int64_t h = png_get_image_height(png, info), w = png_get_image_width(png, info);
    if (png_get_channels(png, info) != c || png_get_bit_depth(png, info) != 8)
        png_error(png, "unexpected sample layout after conversion");
    if (h * w * c > SX_DS_IMAGE_MAX_BYTES)
        return too_large(name, h, w, c);
    im->pixels = sx_alloc((size_t)(h * w * c));
    s->rows = sx_alloc((size_t)h * sizeof *s->rows);
    if (im->pixels == NULL || s->rows == NULL) {
        s->nomem = true;
        png_error(png, "out of memory");
    }
    for (int64_t y = 0; y < h; y++)
        s->rows[y] = im->pixels + y * w * c;
    png_read_image(png, s->rows);
    png_read_end(png, NULL);
    im->h = h;
    im->w = w;
    im->c = c;
    return SX_OK;
}

/* The setjmp frame: no local changes between setjmp and a longjmp to it (C11 7.13.2.1). */
static sx_status png_run(const char *name, png_structp png, png_infop info, png_src *s, int64_t c,
                         image *im)
{
    if (setjmp(png_jmpbuf(png)) != 0)
        return s->nomem ? sx_error(SX_E_NOMEM, "%s: out of memory", name)
                        : sx_error(SX_E_FORMAT, "%s: corrupt PNG: %s", name, s->msg);
    return png_body(name, png, info, s, c, im);
}

static sx_status png_decode(const char *name, const uint8_t *buf, size_t len, int64_t c, image *im)
{
    png_src s = {.p = buf, .len = len};
    png_structp png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, &s, png_on_error,
                                               png_on_warning, &s, png_alloc_hook, png_free_hook);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (info == NULL) {
        png_destroy_read_struct(&png, NULL, NULL);
        return sx_error(SX_E_NOMEM, "%s: out of memory", name);
    }
    sx_status st = png_run(name, png, info, &s, c, im);
    sx_free(s.rows);
    png_destroy_read_struct(&png, &info, NULL);
    return st;
}

/* ---------------------------------------------------------------- JPEG */

typedef struct jpeg_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_on_error(j_common_ptr cinfo)
{
    jpeg_err *e = (jpeg_err *)cinfo->err;
    e->pub.format_message(cinfo, e->msg);
    longjmp(e->jb, 1);
}

/* libjpeg's messages: a warning (level -1: corrupt or truncated data) is an error here; trace
 * messages (level >= 0) are ignored. */
static void jpeg_on_message(j_common_ptr cinfo, int level)
{
    if (level < 0)
        jpeg_on_error(cinfo);
}

/* The decoding proper, under the caller's setjmp. */
static sx_status jpeg_body(const char *name, struct jpeg_decompress_struct *d, int64_t c, image *im)
{
    jpeg_read_header(d, TRUE);
    d->out_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_calc_output_dimensions(d);
    int64_t h = d->output_height, w = d->output_width;
    if (h * w * c > SX_DS_IMAGE_MAX_BYTES)
        return too_large(name, h, w, c);
    jpeg_start_decompress(d);
    if (d->output_components != c)
        return sx_error(SX_E_FORMAT, "%s: corrupt JPEG: %d components, want %lld", name,
                        d->output_components, (long long)c);
    if ((im->pixels = sx_alloc((size_t)(h * w * c))) == NULL)
        return sx_error(SX_E_NOMEM, "%s: out of memory", name);
    while (d->output_scanline < d->output_height) {
        JSAMPROW row = im->pixels + (int64_t)d->output_scanline * w * c;
        jpeg_read_scanlines(d, &row, 1);
    }
    jpeg_finish_decompress(d);
    im->h = h;
    im->w = w;
    im->c = c;
    return SX_OK;
}

/* The setjmp frame: no local changes between setjmp and a longjmp to it (C11 7.13.2.1). */
static sx_status jpeg_run(const char *name, struct jpeg_decompress_struct *d, jpeg_err *e,
                          const uint8_t *buf, size_t len, int64_t c, image *im)
{
    if (setjmp(e->jb) != 0)
        return sx_error(SX_E_FORMAT, "%s: corrupt JPEG: %s", name, e->msg);
    jpeg_create_decompress(d);
    jpeg_mem_src(d, buf, (unsigned long)len);
    return jpeg_body(name, d, c, im);
}

static sx_status jpeg_decode(const char *name, const uint8_t *buf, size_t len, int64_t c, image *im)
{
    struct jpeg_decompress_struct d;
    jpeg_err e;
    memset(&d, 0, sizeof d);
    d.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = jpeg_on_error;
    e.pub.emit_message = jpeg_on_message;
    sx_status st = jpeg_run(name, &d, &e, buf, len, c, im);
    jpeg_destroy_decompress(&d);
    return st;
}

/* ---------------------------------------------------------------- resizing */

/* Bilinear: half-pixel centres, clamped at the edges; rounded to the nearest byte. */
static void resize_bilinear(const image *im, int64_t h, int64_t w, uint8_t *out)
{
    int64_t c = im->c;
    double fy = (double)im->h / (double)h, fx = (double)im->w / (double)w;
    for (int64_t y = 0; y < h; y++) {
        double sy = fmax(((double)y + 0.5) * fy - 0.5, 0.0);
        int64_t y0 = (int64_t)sy, y1 = y0 + 1 < im->h ? y0 + 1 : im->h - 1;
        double ay = y0 + 1 < im->h ? sy - (double)y0 : 0.0;
        for (int64_t x = 0; x < w; x++) {
            double sx = fmax(((double)x + 0.5) * fx - 0.5, 0.0);
            int64_t x0 = (int64_t)sx, x1 = x0 + 1 < im->w ? x0 + 1 : im->w - 1;
            double ax = x0 + 1 < im->w ? sx - (double)x0 : 0.0;
            const uint8_t *p00 = im->pixels + (y0 * im->w + x0) * c;
            const uint8_t *p01 = im->pixels + (y0 * im->w + x1) * c;
            const uint8_t *p10 = im->pixels + (y1 * im->w + x0) * c;
            const uint8_t *p11 = im->pixels + (y1 * im->w + x1) * c;
            for (int64_t ch = 0; ch < c; ch++) {
                double top = p00[ch] + ax * (p01[ch] - p00[ch]);
                double bot = p10[ch] + ax * (p11[ch] - p10[ch]);
                double v = top + ay * (bot - top);
                out[(y * w + x) * c + ch] = (uint8_t)fmin(floor(v + 0.5), 255.0);
            }
        }
    }
}

/* Nearest: the source pixel floor((y + 0.5) * H / h). */
static void resize_nearest(const image *im, int64_t h, int64_t w, uint8_t *out)
{
    int64_t c = im->c;
    for (int64_t y = 0; y < h; y++) {
        int64_t sy = (int64_t)(((double)y + 0.5) * (double)im->h / (double)h);
        sy = sy < im->h ? sy : im->h - 1;
        for (int64_t x = 0; x < w; x++) {
            int64_t sx = (int64_t)(((double)x + 0.5) * (double)im->w / (double)w);
            sx = sx < im->w ? sx : im->w - 1;
            memcpy(out + (y * w + x) * c, im->pixels + (sy * im->w + sx) * c, (size_t)c);
        }
    }
}

/* The format stb_image is asked for, by the file's first bytes: PNM (binary grey "P5" or colour
 * "P6"), BMP ("BM"), GIF ("GIF8"); anything else is tried as a TGA, which has no signature. */
static const char *stb_format(const uint8_t *b, size_t len)
{
    if (len >= 2 && b[0] == 'P' && (b[1] == '5' || b[1] == '6'))
        return "PNM";
    if (len >= 2 && b[0] == 'B' && b[1] == 'M')
        return "BMP";
    if (len >= 4 && memcmp(b, "GIF8", 4) == 0)
        return "GIF";
    return "TGA";
}

sx_status sx_ds_image_decode(const void *buf, size_t len, const char *name, int64_t h, int64_t w,
                             int64_t c, sx_ds_resize mode, uint8_t *out)
{
    const char *who = "sx_ds_image_decode";
    if (buf == NULL || out == NULL)
        return sx_error(SX_E_ARG, "%s: %s is NULL", who, buf == NULL ? "buf" : "out");
    if (h < 1 || w < 1 || (c != 1 && c != 3) ||
        (mode != SX_DS_RESIZE_BILINEAR && mode != SX_DS_RESIZE_NEAREST))
        return sx_error(SX_E_ARG,
                        "%s: size %lldx%lld, %lld channels, resize mode %d (want h, w "
                        ">= 1, 1 or 3 channels, bilinear or nearest)",
                        who, (long long)h, (long long)w, (long long)c, (int)mode);
    if (h * w * c > SX_DS_IMAGE_MAX_BYTES)
        return sx_error(SX_E_ARG, "%s: output of %lldx%lldx%lld is too large", who, (long long)h,
                        (long long)w, (long long)c);
    name = name ? name : "<memory>";
    const uint8_t *b = buf;
    image im = {0};
    sx_status st;
    const char *fmt = stb_format(b, len);
    if (len >= 8 && png_sig_cmp(b, 0, 8) == 0)
        st = png_decode(name, b, len, c, &im);
    else if (len >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF)
        st = jpeg_decode(name, b, len, c, &im);
    else if ((st = sx__stb_decode(name, fmt, b, len, c, &im.pixels, &im.h, &im.w)) == SX_OK)
        im.c = c;
    if (st == SX_OK && mode == SX_DS_RESIZE_BILINEAR)
        resize_bilinear(&im, h, w, out);
    else if (st == SX_OK)
        resize_nearest(&im, h, w, out);
    sx_free(im.pixels);
    return st;
}
