/* image_fixture.h: image files written by the tests of image decoding and image folders: PNG
 * through libpng, and PNM (P5/P6), BMP (24-bit), TGA (uncompressed, grey or true colour) and GIF
 * (a palette of the image's colours, LZW codes written as 9-bit literals) by hand, following
 * each format's specification, so that stb_image's reading is checked against files it did not
 * write. A temporary folder tree to put them in. */
#ifndef SX_TEST_IMAGE_FIXTURE_H
#define SX_TEST_IMAGE_FIXTURE_H

#include "idx_fixture.h"

#include <criterion/criterion.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A PNG of h x w with `type` (PNG_COLOR_TYPE_*) and bit depth 8 or 16; px holds the samples,
 * 8-bit (16-bit samples are px * 257, big-endian) or palette indices; a palette of 4 grey-ish
 * entries for PNG_COLOR_TYPE_PALETTE. */
static inline void write_png(const char *path, int h, int w, int type, int depth, const uint8_t *px)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    cr_assert(png && info);
    if (setjmp(png_jmpbuf(png)))
        cr_assert_fail("libpng failed writing %s", path);
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, type, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (type == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[4] = {{0, 0, 0}, {10, 20, 30}, {200, 100, 50}, {255, 255, 255}};
        png_set_PLTE(png, info, pal, 4);
    }
    png_write_info(png, info);
    int ch = type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_PALETTE ? 1
             : type == PNG_COLOR_TYPE_RGB                                  ? 3
             : type == PNG_COLOR_TYPE_RGBA                                 ? 4
                                                                           : 2;
    uint8_t *row = malloc((size_t)(w * ch * 2));
    for (int y = 0; y < h; y++) {
        for (int k = 0; k < w * ch; k++) {
            uint8_t v = px[y * w * ch + k];
            if (depth == 16) {
                row[2 * k] = v; /* v * 257 big-endian: both bytes v */
                row[2 * k + 1] = v;
            } else {
                row[k] = v;
            }
        }
        png_write_row(png, row);
    }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(row);
    fclose(f);
}

static inline void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

static inline uint8_t *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*n);
    cr_assert_eq(fread(p, 1, *n, f), *n);
    fclose(f);
    return p;
}

/* A fresh temporary folder. */
static inline void tmp_dir(char *path, size_t n)
{
    snprintf(path, n, "/tmp/sx_imgf_XXXXXX");
    cr_assert_not_null(mkdtemp(path));
}

static inline void sub(char *out, size_t n, const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    cr_assert(la + lb + 2 <= n);
    memcpy(out, a, la);
    out[la] = '/';
    memcpy(out + la + 1, b, lb + 1);
}

static inline void rm_tree(const char *root)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    cr_assert_eq(system(cmd), 0);
}

/* ---------------------------------------------------------------- files in memory */

/* Bytes through idx_fixture.h's fx_buf and fx_put. */
static inline void fx_u8(fx_buf *b, unsigned v)
{
    uint8_t x = (uint8_t)v;
    fx_put(b, &x, 1);
}

static inline void fx_le16(fx_buf *b, unsigned v)
{
    fx_u8(b, v & 0xFF);
    fx_u8(b, (v >> 8) & 0xFF);
}

static inline void fx_le32(fx_buf *b, uint32_t v)
{
    fx_le16(b, v & 0xFFFF);
    fx_le16(b, v >> 16);
}

/* Binary PNM of (h, w, c) samples: P5 (c = 1) or P6 (c = 3), with this maxval; above 255,
 * each sample v is written as v * 257 (two bytes, big-endian). */
static inline fx_buf fx_pnm(int h, int w, int c, const uint8_t *px, int maxval)
{
    fx_buf b = {0};
    char head[64];
    int n =
        snprintf(head, sizeof head, "P%d\n# strix test\n%d %d\n%d\n", c == 1 ? 5 : 6, w, h, maxval);
    fx_put(&b, head, (size_t)n);
    for (int k = 0; k < h * w * c; k++) {
        fx_u8(&b, px[k]);
        if (maxval > 255)
            fx_u8(&b, px[k]);
    }
    return b;
}

/* A 24-bit BMP (BITMAPINFOHEADER, no compression) of (h, w, 3) bytes: rows bottom-up, BGR,
 * each padded to 4 bytes. */
static inline fx_buf fx_bmp(int h, int w, const uint8_t *rgb)
{
    fx_buf b = {0};
    uint32_t row = (uint32_t)(3 * w + 3) & ~3u, size = 54 + row * (uint32_t)h;
    fx_put(&b, "BM", 2);
    fx_le32(&b, size);
    fx_le32(&b, 0);
    fx_le32(&b, 54);          /* offset of the pixels */
    fx_le32(&b, 40);          /* BITMAPINFOHEADER */
    fx_le32(&b, (uint32_t)w); /* width */
    fx_le32(&b, (uint32_t)h); /* height > 0: bottom-up */
    fx_le16(&b, 1);           /* planes */
    fx_le16(&b, 24);          /* bits per pixel */
    fx_le32(&b, 0);           /* BI_RGB */
    fx_le32(&b, row * (uint32_t)h);
    fx_le32(&b, 2835); /* 72 dpi */
    fx_le32(&b, 2835);
    fx_le32(&b, 0);
    fx_le32(&b, 0);
    for (int y = h - 1; y >= 0; y--) {
        for (int x = 0; x < w; x++) {
            const uint8_t *p = rgb + (y * w + x) * 3;
            fx_u8(&b, p[2]);
            fx_u8(&b, p[1]);
            fx_u8(&b, p[0]);
        }
        for (uint32_t k = (uint32_t)(3 * w); k < row; k++)
            fx_u8(&b, 0);
    }
    return b;
}

/* An uncompressed TGA of (h, w, c) bytes: grey (type 3, 8 bits) or true colour (type 2, 24
 * bits, BGR); origin bottom-left, so rows bottom-up. */
static inline fx_buf fx_tga(int h, int w, int c, const uint8_t *px)
{
    fx_buf b = {0};
    fx_u8(&b, 0);              /* no image ID */
    fx_u8(&b, 0);              /* no colour map */
    fx_u8(&b, c == 1 ? 3 : 2); /* uncompressed grey / true colour */
    for (int k = 0; k < 5; k++)
        fx_u8(&b, 0); /* colour map specification */
    fx_le16(&b, 0);   /* x, y origin */
    fx_le16(&b, 0);
    fx_le16(&b, (unsigned)w);
    fx_le16(&b, (unsigned)h);
    fx_u8(&b, 8 * (unsigned)c); /* bits per pixel */
    fx_u8(&b, 0);               /* descriptor: no alpha bits, bottom-left origin */
    for (int y = h - 1; y >= 0; y--)
        for (int x = 0; x < w; x++) {
            const uint8_t *p = px + (y * w + x) * c;
            for (int k = c - 1; k >= 0; k--)
                fx_u8(&b, p[k]);
        }
    return b;
}

/* A bit accumulator: LZW codes of 9 bits, least significant bit first. */
typedef struct fx_bits {
    uint32_t v;
    int bits;
} fx_bits;

static inline void fx_code(fx_buf *b, fx_bits *a, unsigned code)
{
    a->v |= (uint32_t)code << a->bits;
    a->bits += 9;
    for (; a->bits >= 8; a->bits -= 8, a->v >>= 8)
        fx_u8(b, a->v & 0xFF);
}

/* A GIF89a of (h, w, c) bytes: a global colour table of 256 entries holding the image's
 * colours (at most 256), one image of indices. The LZW stream uses 8-bit roots (codes of 9
 * bits) and sends every index as a literal, with a clear code every 200 codes so that the code
 * size never grows; bits are packed least significant first, in sub-blocks of up to 255 bytes. */
static inline fx_buf fx_gif(int h, int w, int c, const uint8_t *px)
{
    uint8_t pal[256 * 3] = {0};
    int ncol = 0, *idx = malloc(sizeof(int) * (size_t)(h * w));
    for (int i = 0; i < h * w; i++) {
        uint8_t rgb[3];
        for (int k = 0; k < 3; k++)
            rgb[k] = px[i * c + (c == 1 ? 0 : k)];
        int j = 0;
        while (j < ncol && memcmp(pal + 3 * j, rgb, 3) != 0)
            j++;
        cr_assert_lt(j, 256, "at most 256 colours in a GIF");
        if (j == ncol)
            memcpy(pal + 3 * ncol++, rgb, 3);
        idx[i] = j;
    }
    fx_buf b = {0}, lzw = {0};
    fx_put(&b, "GIF89a", 6);
    fx_le16(&b, (unsigned)w);
    fx_le16(&b, (unsigned)h);
    fx_u8(&b, 0xF7); /* global table, 8 bits of colour resolution, 2^(7+1) entries */
    fx_u8(&b, 0);    /* background index */
    fx_u8(&b, 0);    /* aspect ratio */
    fx_put(&b, pal, sizeof pal);
    fx_u8(&b, 0x2C); /* image descriptor */
    fx_le16(&b, 0);
    fx_le16(&b, 0);
    fx_le16(&b, (unsigned)w);
    fx_le16(&b, (unsigned)h);
    fx_u8(&b, 0); /* no local table, not interlaced */
    fx_u8(&b, 8); /* LZW minimum code size */
    fx_bits acc = {0};
    fx_code(&lzw, &acc, 256); /* clear */
    for (int i = 0; i < h * w; i++) {
        if (i > 0 && i % 200 == 0)
            fx_code(&lzw, &acc, 256);
        fx_code(&lzw, &acc, (unsigned)idx[i]);
    }
    fx_code(&lzw, &acc, 257); /* end of information */
    if (acc.bits > 0)
        fx_u8(&lzw, acc.v & 0xFF);
    for (size_t off = 0; off < lzw.len; off += 255) {
        size_t n = lzw.len - off < 255 ? lzw.len - off : 255;
        fx_u8(&b, (unsigned)n);
        fx_put(&b, lzw.p + off, n);
    }
    fx_u8(&b, 0);    /* block terminator */
    fx_u8(&b, 0x3B); /* trailer */
    free(lzw.p);
    free(idx);
    return b;
}

#endif
