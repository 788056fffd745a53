/* decode_stb.c: PNM (P5/P6), BMP, GIF (first frame) and TGA images through stb_image, the one
 * file of strix that compiles stb_image's implementation. Not Debian's libstb.so: that build
 * allocates with malloc and carries every format (PSD, HDR, PIC...); compiled here, stb's
 * allocations go through strix's allocator hook (tests inject failures into them) and only the
 * four formats we read are in the binary (STB_IMAGE_STATIC: no symbol leaves this file).
 * stb reads through callbacks rather than from memory so that a truncated file is caught: from
 * memory, stb reads zeros past the end and may return an image without complaint. */
#include "datasets_impl.h"

#include <stdio.h>
#include <string.h>

/* Set when an allocation of stb's fails, so that it is reported as SX_E_NOMEM and not as a
 * corrupt file (stb gives one failure reason for both). One per thread, as stb's own reason. */
static _Thread_local bool stb_nomem;

static void *stb_alloc(size_t n)
{
    void *p = sx_alloc(n);
    stb_nomem |= p == NULL;
    return p;
}

static void *stb_realloc(void *p, size_t n)
{
    void *q = sx_realloc(p, n);
    stb_nomem |= q == NULL;
    return q;
}

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_NO_STDIO
#define STBI_FAILURE_USERMSG /* "PNM file truncated" rather than "bad PNM" */
#define STBI_ONLY_PNM
#define STBI_ONLY_BMP
#define STBI_ONLY_GIF
#define STBI_ONLY_TGA
#define STBI_MALLOC(n) stb_alloc(n)
#define STBI_REALLOC(p, n) stb_realloc(p, n)
#define STBI_FREE(p) sx_free(p)
/* STB_IMAGE_STATIC declares static some entry points (zlib's, the iPhone PNG ones) that these
 * formats leave undefined and unused; GCC reports them at the end of the file, hence no pop. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb/stb_image.h>

/* The file stb reads, and whether it asked for bytes past its end. */
typedef struct stb_src {
    const uint8_t *p;
    size_t len, pos;
    bool past_end;
} stb_src;

static int stb_read(void *user, char *out, int n)
{
    stb_src *s = user;
    if (s->pos == s->len) { /* stb wants a byte the file does not have */
        s->past_end = true;
        return 0;
    }
    size_t k = s->len - s->pos < (size_t)n ? s->len - s->pos : (size_t)n;
    memcpy(out, s->p + s->pos, k);
    s->pos += k;
    return (int)k;
}

static void stb_skip(void *user, int n)
{
    stb_src *s = user;
    if ((size_t)n > s->len - s->pos) {
        s->past_end = true;
        s->pos = s->len;
    } else {
        s->pos += (size_t)n;
    }
}

static int stb_eof(void *user)
{
    const stb_src *s = user;
    return s->pos == s->len;
}

static const stbi_io_callbacks stb_io = {stb_read, stb_skip, stb_eof};

/* Why stb failed on `fmt`: out of memory, a read past the end, or stb's own reason. */
static sx_status stb_failure(const char *name, const char *fmt, const stb_src *s)
{
    if (stb_nomem)
        return sx_error(SX_E_NOMEM, "%s: out of memory", name);
    const char *why = s->past_end ? "truncated file" : stbi_failure_reason();
    return sx_error(SX_E_FORMAT, "%s: corrupt %s: %s", name, fmt, why ? why : "no reason given");
}

/* Read the next number of a binary PNM header at *i (after whitespace and '#' comments, as stb
 * skips them): its value; -2 for more than 9 digits; -1 when the header ends first or holds
 * something else (stb then reports the file). */
static long pnm_number(const uint8_t *b, size_t len, size_t *i)
{
    for (;;) {
        while (*i < len && (b[*i] == ' ' || (b[*i] >= '\t' && b[*i] <= '\r')))
            (*i)++;
        if (*i == len || b[*i] != '#')
            break;
        while (*i < len && b[*i] != '\n' && b[*i] != '\r')
            (*i)++;
    }
    long v = 0;
    int digits = 0;
    for (; *i < len && b[*i] >= '0' && b[*i] <= '9'; (*i)++, digits++)
        v = digits < 9 ? 10 * v + (b[*i] - '0') : v;
    return digits > 9 ? -2 : digits == 0 || *i == len ? -1 : v;
}

/* Check a PNM header before stb reads it: its numbers (stb's parser overflows on long ones) and
 * its maxval (*maxval; 255 when the header is cut, which stb reports). *need: the bytes of the
 * file with the samples it announces (0 when the header is cut), checked by the caller before
 * stb allocates for them. stb_image 2.27 reads the samples of a
 * maxval above 255 in the wrong byte order (and converts their channels as if they were bytes):
 * those files are refused. A maxval below 255 is rescaled by the caller. */
static sx_status pnm_check(const char *name, const uint8_t *b, size_t len, long *maxval,
                           int64_t *need)
{
    size_t i = 2;
    long v[3] = {-1, -1, -1};
    for (int k = 0; k < 3 && (k == 0 || v[k - 1] >= 0); k++)
        v[k] = pnm_number(b, len, &i);
    if (v[0] == -2 || v[1] == -2 || v[2] == -2)
        return sx_error(SX_E_FORMAT, "%s: corrupt PNM: a header number of more than 9 digits",
                        name);
    *maxval = v[2] < 0 ? 255 : v[2];
    if (*maxval < 1 || *maxval > 255)
        return sx_error(SX_E_FORMAT, "%s: PNM with maxval %ld (supported: 1 to 255, 8-bit samples)",
                        name, *maxval);
    *need = v[2] < 0 ? 0 : (int64_t)i + 1 + (int64_t)v[0] * v[1] * (b[1] == '6' ? 3 : 1);
    return SX_OK;
}

/* Samples of 0..maxval to 0..255, rounded; samples above maxval (invalid) read as maxval. */
static void pnm_rescale(uint8_t *px, int64_t n, long maxval)
{
    for (int64_t k = 0; k < n; k++) {
        long v = px[k] < maxval ? px[k] : maxval;
        px[k] = (uint8_t)((v * 255 + maxval / 2) / maxval);
    }
}

static int64_t le(const uint8_t *p, int bytes)
{
    int64_t v = 0;
    for (int k = bytes - 1; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}

/* The fewest bytes a BMP or TGA file with this header can have (0: no bound known), for a check
 * before decoding: stb reads zeros past the end of a file, row after row, and would decode an
 * image a cut file announces (up to SX_DS_IMAGE_MAX_BYTES) before its end is noticed. Rows are
 * counted without their padding; a TGA's RLE packets cover at most 128 pixels each. */
static int64_t min_bytes(const char *fmt, const uint8_t *b, size_t len)
{
    int64_t w, h, bpp;
    if (strcmp(fmt, "BMP") == 0 && len >= 30) {
        int64_t hsz = le(b + 14, 4), core = hsz == 12; /* OS/2: 16-bit width and height */
        w = le(b + 18, core ? 2 : 4);
        h = le(b + 18 + (core ? 2 : 4), core ? 2 : 4);
        h = core ? h : h >= (int64_t)1 << 31 ? ((int64_t)1 << 32) - h : h; /* < 0: top-down */
        bpp = le(b + (core ? 24 : 28), 2);
        if (w > 1 << 24 || h > 1 << 24) /* stb refuses them */
            return 0;
        return 14 + hsz + (w * bpp + 7) / 8 * h;
    }
    if (strcmp(fmt, "TGA") == 0 && len >= 18) {
        int64_t indexed = b[1] == 1, rle = b[2] >= 8, cmap = le(b + 5, 2) * ((b[7] + 7) / 8);
        int64_t px = le(b + 12, 2) * le(b + 14, 2), bytes = (b[16] + 7) / 8;
        int64_t head = 18 + b[0] + (indexed ? cmap : 0);
        return rle ? head + (px + 127) / 128 * (1 + bytes) : head + px * bytes;
    }
    return 0;
}

sx_status sx__stb_decode(const char *name, const char *fmt, const uint8_t *buf, size_t len,
                         int64_t c, uint8_t **pixels, int64_t *h, int64_t *w)
{
    *pixels = NULL;
    if (len > INT32_MAX)
        return sx_error(SX_E_FORMAT, "%s: %s file of %zu bytes (stb_image reads at most 2^31 - 1)",
                        name, fmt, len);
    long maxval = 255;
    int64_t need = 0;
    if (strcmp(fmt, "PNM") == 0)
        SX_TRY(pnm_check(name, buf, len, &maxval, &need));
    stb_src s = {.p = buf, .len = len};
    int x = 0, y = 0, comp = 0;
    stb_nomem = false;
    stbi__g_failure_reason = NULL; /* this call's reason, not an earlier one's */
    int known = stbi_info_from_callbacks(&stb_io, &s, &x, &y, &comp);
    if (!known && strcmp(fmt, "TGA") == 0) /* no signature matched, nor TGA's header checks */
        return sx_error(SX_E_FORMAT, "%s: not a PNG, JPEG, PNM, BMP, GIF or TGA file", name);
    if (!known || s.past_end)
        return stb_failure(name, fmt, &s);
    if (x < 1 || y < 1)
        return sx_error(SX_E_FORMAT, "%s: corrupt %s: image of %dx%d", name, fmt, y, x);
    /* Before decoding anything: the image as stb decodes it (a GIF as RGBA), or as converted. */
    int64_t ch = strcmp(fmt, "GIF") == 0 ? 4 : comp > c ? comp : c;
    if ((int64_t)x * y * ch > SX_DS_IMAGE_MAX_BYTES)
        return sx_error(SX_E_FORMAT, "%s: image of %dx%dx%lld is larger than %lld bytes", name, y,
                        x, (long long)ch, (long long)SX_DS_IMAGE_MAX_BYTES);
    need = need > 0 ? need : min_bytes(fmt, buf, len);
    if ((int64_t)len < need)
        return sx_error(SX_E_FORMAT, "%s: corrupt %s: truncated file (%zu bytes, at least %lld)",
                        name, fmt, len, (long long)need);
    s = (stb_src){.p = buf, .len = len};
    uint8_t *px = stbi_load_from_callbacks(&stb_io, &s, &x, &y, &comp, (int)c);
    if (px == NULL || s.past_end) {
        sx_free(px);
        return stb_failure(name, fmt, &s);
    }
    if (maxval < 255)
        pnm_rescale(px, (int64_t)x * y * c, maxval);
    *pixels = px;
    *h = y;
    *w = x;
    return SX_OK;
}
