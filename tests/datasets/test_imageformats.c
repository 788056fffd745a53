/* The image formats read through stb_image: PNM (P5, P6, 16-bit), BMP, GIF and TGA files
 * written by hand (image_fixture.h) decode to the same bytes as the same image in PNG, alone and
 * in an image folder (any case of extension); every truncation of each file and headers
 * announcing oversized images are refused, naming the file, the latter before anything is
 * decoded; out-of-memory injection into stb's allocations; mutated files give an error, never
 * a crash. */
#include "image_fixture.h"
#include <testutil.h>

#include <sx_datasets.h>

#include <sys/stat.h>

enum { H = 3, W = 5 }; /* not square, so that a transposed or flipped image shows */

/* A colour image with distinct channels and its grey version. */
static void pictures(uint8_t *rgb, uint8_t *grey)
{
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *p = rgb + (y * W + x) * 3;
            p[0] = (uint8_t)(16 * y + 4 * x + 1);
            p[1] = (uint8_t)(200 - 10 * x - 30 * y);
            p[2] = (uint8_t)((x * y * 53 + 7) % 256);
            grey[y * W + x] = (uint8_t)(40 * y + 9 * x + 3);
        }
}

/* (h, w, 3) replicating a grey image. */
static void grey_rgb(const uint8_t *grey, uint8_t *rgb)
{
    for (int i = 0; i < H * W; i++)
        rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = grey[i];
}

/* A file of each format, and the format name its errors give. */
typedef struct sample {
    const char *name, *fmt;
    fx_buf file;
    bool grey; /* holds the grey picture (else the colour one) */
} sample;

enum { NSAMPLES = 8 };

static void samples(sample *s)
{
    uint8_t rgb[H * W * 3], grey[H * W], gg[H * W * 3];
    pictures(rgb, grey);
    grey_rgb(grey, gg);
    s[0] = (sample){"p6.ppm", "PNM", fx_pnm(H, W, 3, rgb, 255), false};
    s[1] = (sample){"p5.pgm", "PNM", fx_pnm(H, W, 1, grey, 255), true};
    s[2] = (sample){"rgb.bmp", "BMP", fx_bmp(H, W, rgb), false};
    s[3] = (sample){"grey.bmp", "BMP", fx_bmp(H, W, gg), true};
    s[4] = (sample){"rgb.gif", "GIF", fx_gif(H, W, 3, rgb), false};
    s[5] = (sample){"grey.gif", "GIF", fx_gif(H, W, 1, grey), true};
    s[6] = (sample){"rgb.tga", "TGA", fx_tga(H, W, 3, rgb), false};
    s[7] = (sample){"grey.tga", "TGA", fx_tga(H, W, 1, grey), true};
}

static void samples_free(sample *s)
{
    for (int k = 0; k < NSAMPLES; k++)
        free(s[k].file.p);
}

/* The PNG of the same picture, decoded at (H, W, c). */
static void png_reference(bool grey, int64_t c, uint8_t *out)
{
    char root[256], p[512];
    tmp_dir(root, sizeof root);
    uint8_t rgb[H * W * 3], g[H * W];
    pictures(rgb, g);
    sub(p, sizeof p, root, "ref.png");
    write_png(p, H, W, grey ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, 8, grey ? g : rgb);
    size_t n;
    uint8_t *bytes = read_bytes(p, &n);
    cr_assert_eq(sx_ds_image_decode(bytes, n, p, H, W, c, SX_DS_RESIZE_NEAREST, out), SX_OK, "%s",
                 sx_last_error());
    free(bytes);
    rm_tree(root);
}

Test(datasets_imageformats, same_pixels_as_png)
{
    sample s[NSAMPLES];
    samples(s);
    uint8_t rgb[H * W * 3], grey[H * W], gg[H * W * 3];
    pictures(rgb, grey);
    grey_rgb(grey, gg);
    for (int k = 0; k < NSAMPLES; k++)
        for (int64_t c = 1; c <= 3; c += 2) {
            if (c == 1 && !s[k].grey) /* colour to grey: stb's weights are not libpng's */
                continue;
            uint8_t want[H * W * 3], got[H * W * 3];
            png_reference(s[k].grey, c, want);
            const uint8_t *exact = c == 1 ? grey : s[k].grey ? gg : rgb;
            cr_assert_eq(memcmp(want, exact, (size_t)(H * W * c)), 0, "the PNG itself");
            memset(got, 0xAA, sizeof got);
            cr_assert_eq(sx_ds_image_decode(s[k].file.p, s[k].file.len, s[k].name, H, W, c,
                                            SX_DS_RESIZE_NEAREST, got),
                         SX_OK, "%s: %s", s[k].name, sx_last_error());
            cr_assert_eq(memcmp(got, want, (size_t)(H * W * c)), 0, "%s, c = %lld", s[k].name,
                         (long long)c);
        }
    samples_free(s);
}

/* Bilinear resizing works on stb's pixels as on libpng's: the same output for the same image. */
Test(datasets_imageformats, resized_as_png)
{
    sample s[NSAMPLES];
    samples(s);
    char root[256], p[512];
    tmp_dir(root, sizeof root);
    uint8_t rgb[H * W * 3], grey[H * W];
    pictures(rgb, grey);
    sub(p, sizeof p, root, "ref.png");
    write_png(p, H, W, PNG_COLOR_TYPE_RGB, 8, rgb);
    size_t n;
    uint8_t *png = read_bytes(p, &n), want[7 * 2 * 3], got[7 * 2 * 3];
    cr_assert_eq(sx_ds_image_decode(png, n, p, 7, 2, 3, SX_DS_RESIZE_BILINEAR, want), SX_OK);
    cr_assert_eq(
        sx_ds_image_decode(s[2].file.p, s[2].file.len, "bmp", 7, 2, 3, SX_DS_RESIZE_BILINEAR, got),
        SX_OK, "%s", sx_last_error());
    cr_assert_eq(memcmp(got, want, sizeof got), 0);
    free(png);
    rm_tree(root);
    samples_free(s);
}

/* Every format in one class folder, with extensions in any case, next to the PNG. */
Test(datasets_imageformats, folder_reads_every_format)
{
    sample s[NSAMPLES];
    samples(s);
    char root[256], dir[512], p[600];
    tmp_dir(root, sizeof root);
    const char *names[NSAMPLES] = {"a.PPM", "b.Pnm", "c.BMP", "d.bmp",
                                   "e.Gif", "f.gif", "g.TGA", "h.tga"};
    sub(dir, sizeof dir, root, "all");
    cr_assert_eq(mkdir(dir, 0700), 0);
    for (int k = 0; k < NSAMPLES; k++) {
        sub(p, sizeof p, dir, names[k]);
        write_bytes(p, s[k].file.p, s[k].file.len);
    }
    sx_ds_image_folder_report rep;
    sx_ds_image_folder_params prm = {
        .h = H, .w = W, .c = 3, .resize = SX_DS_RESIZE_NEAREST, .report = &rep};
    sx_ds_images *d = NULL;
    cr_assert_eq(sx_ds_image_folder_load(root, &prm, &d), SX_OK, "%s", sx_last_error());
    cr_assert_eq(d->n, NSAMPLES);
    cr_assert_eq(rep.images, NSAMPLES);
    cr_assert_eq(rep.skipped, 0);
    cr_assert_str_eq(rep.first_skipped, "");
    for (int k = 0; k < NSAMPLES; k++) {
        uint8_t want[H * W * 3];
        png_reference(s[k].grey, 3, want);
        cr_assert_eq(memcmp(d->pixels + k * H * W * 3, want, sizeof want), 0, "%s", names[k]);
    }
    sx_ds_images_free(d);
    rm_tree(root);
    samples_free(s);
}

/* Cut every file at every length short of its image: an error naming the file, never SX_OK.
 * A GIF's last byte is its trailer, after the first frame: cut there it still decodes. */
Test(datasets_imageformats, truncated_files_refused)
{
    sample s[NSAMPLES];
    samples(s);
    uint8_t out[H * W * 3];
    for (int k = 0; k < NSAMPLES; k++) {
        size_t n = s[k].file.len - (strcmp(s[k].fmt, "GIF") == 0);
        for (size_t len = 0; len < n; len++) {
            memset(out, 0x5A, sizeof out);
            sx_status st =
                sx_ds_image_decode(s[k].file.p, len, s[k].name, H, W, 3, SX_DS_RESIZE_NEAREST, out);
            cr_assert_eq(st, SX_E_FORMAT, "%s cut at %zu of %zu: %s", s[k].name, len, s[k].file.len,
                         sx_last_error());
            cr_assert(fx_msg_has(s[k].name));
            char want[64];
            snprintf(want, sizeof want, "corrupt %s", s[k].fmt);
            if (len >= 18) /* a TGA's header, the longest the tests for a signature read */
                cr_assert(fx_msg_has(want), "%s cut at %zu", s[k].name, len);
            for (size_t i = 0; i < sizeof out; i++)
                cr_assert_eq(out[i], 0x5A, "out unchanged on error");
        }
    }
    cr_assert_eq(
        sx_ds_image_decode(s[4].file.p, s[4].file.len - 1, "x", H, W, 3, SX_DS_RESIZE_NEAREST, out),
        SX_OK, "a GIF without its trailer: %s", sx_last_error());
    cr_assert_eq(sx_ds_image_decode(s[0].file.p, s[0].file.len - 1, "x.ppm", H, W, 3,
                                    SX_DS_RESIZE_NEAREST, out),
                 SX_E_FORMAT);
    cr_assert(fx_msg_has("x.ppm: corrupt PNM: truncated file"));
    samples_free(s);
}

/* A truncated file in a folder: the load fails naming its path. */
Test(datasets_imageformats, truncated_file_in_a_folder)
{
    sample s[NSAMPLES];
    samples(s);
    for (int k = 0; k < NSAMPLES; k += 2) {
        char root[256], dir[512], p[600];
        tmp_dir(root, sizeof root);
        sub(dir, sizeof dir, root, "cls");
        cr_assert_eq(mkdir(dir, 0700), 0);
        sub(p, sizeof p, dir, s[k].name);
        write_bytes(p, s[k].file.p, s[k].file.len - 3);
        sx_ds_image_folder_params prm = sx_ds_image_folder_params_default();
        sx_ds_images *d = (sx_ds_images *)&d;
        cr_assert_eq(sx_ds_image_folder_load(root, &prm, &d), SX_E_FORMAT, "%s", s[k].name);
        cr_assert_null(d);
        char want[700];
        snprintf(want, sizeof want, "%s: corrupt %s: ", p, s[k].fmt);
        cr_assert(fx_msg_has(want));
        rm_tree(root);
    }
    samples_free(s);
}

/* A header announcing an image of more than SX_DS_IMAGE_MAX_BYTES: refused before decoding
 * (nothing allocated beyond stb's header reading: GIF's one state struct), naming the file. */
Test(datasets_imageformats, oversized_refused_before_decoding)
{
    uint8_t px[3] = {1, 2, 3};
    fx_buf f[4] = {fx_pnm(1, 1, 3, px, 255), fx_bmp(1, 1, px), fx_gif(1, 1, 3, px),
                   fx_tga(1, 1, 3, px)};
    const char *names[4] = {"big.ppm", "big.bmp", "big.gif", "big.tga"};
    f[0].len = 0; /* rewrite the PNM header */
    fx_put(&f[0], "P6\n20000 20000\n255\n\1\2\3", 22);
    for (int k = 1; k < 4; k++) { /* the width and height fields */
        uint8_t *p = f[k].p + (k == 1 ? 18 : k == 2 ? 6 : 12);
        int bytes = k == 1 ? 4 : 2;
        for (int dim = 0; dim < 2; dim++)
            for (int b = 0; b < bytes; b++)
                p[dim * bytes + b] = (uint8_t)(b == 0 ? 0x20 : b == 1 ? 0x4E : 0);
    }
    uint8_t out[3];
    for (int k = 0; k < 4; k++) {
        tu_fail_after(1);
        sx_status st =
            sx_ds_image_decode(f[k].p, f[k].len, names[k], 1, 1, 3, SX_DS_RESIZE_NEAREST, out);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(st, SX_E_FORMAT, "%s: %s", names[k], sx_last_error());
        cr_assert(fx_msg_has(names[k]));
        cr_assert(fx_msg_has(k == 2 ? "x4 is larger than 268435456 bytes" /* RGBA */
                                    : "x3 is larger than 268435456 bytes"));
        cr_assert_eq(live, 0);
        free(f[k].p);
    }
}

/* A PNM maxval below 255 is rescaled to 0..255; above 255 (16-bit samples, which stb_image 2.27
 * reads in the wrong byte order) refused; header numbers of more than 9 digits refused before
 * stb parses them (its parser overflows). */
Test(datasets_imageformats, pnm_maxval)
{
    uint8_t px[H * W], out[H * W];
    for (int i = 0; i < H * W; i++)
        px[i] = (uint8_t)(i % 16);
    fx_buf f = fx_pnm(H, W, 1, px, 15);
    cr_assert_eq(sx_ds_image_decode(f.p, f.len, "m.pgm", H, W, 1, SX_DS_RESIZE_NEAREST, out), SX_OK,
                 "%s", sx_last_error());
    for (int i = 0; i < H * W; i++)
        cr_assert_eq(out[i], 17 * px[i], "sample %d: %d", i, out[i]);
    free(f.p);
    f = fx_pnm(H, W, 1, px, 65535);
    cr_assert_eq(sx_ds_image_decode(f.p, f.len, "w.pgm", H, W, 1, SX_DS_RESIZE_NEAREST, out),
                 SX_E_FORMAT);
    cr_assert(fx_msg_has("w.pgm: PNM with maxval 65535 (supported: 1 to 255"));
    free(f.p);
    const char *bad[3] = {"P5 4 4 0\n\1", "P6 1234567890 1 255\n\1\2\3",
                          "P5\n# many digits\n1 99999999999999999999"};
    const char *why[3] = {"maxval 0", "more than 9 digits", "more than 9 digits"};
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(
            sx_ds_image_decode(bad[k], strlen(bad[k]), "b.pnm", H, W, 1, SX_DS_RESIZE_NEAREST, out),
            SX_E_FORMAT, "%s", bad[k]);
        cr_assert(fx_msg_has(why[k]));
    }
}

/* Fail the k-th allocation of each decode for every k: SX_E_NOMEM and nothing leaked, until
 * it succeeds; stb's allocations go through the hook (at least one each). */
Test(datasets_imageformats, out_of_memory_every_allocation)
{
    sample s[NSAMPLES];
    samples(s);
    uint8_t out[H * W * 3];
    for (int i = 0; i < NSAMPLES; i++) {
        long k;
        for (k = 0;; k++) {
            tu_fail_after(k);
            sx_status st = sx_ds_image_decode(s[i].file.p, s[i].file.len, s[i].name, H, W, 3,
                                              SX_DS_RESIZE_BILINEAR, out);
            long live = tu_live_allocs();
            tu_fail_reset();
            cr_assert_eq(live, 0, "%s, k=%ld: leaked %ld", s[i].name, k, live);
            if (st == SX_OK)
                break;
            cr_assert_eq(st, SX_E_NOMEM, "%s, k=%ld: %s", s[i].name, k, sx_last_error());
            cr_assert(fx_msg_has(s[i].name));
        }
        cr_assert_gt(k, 0, "%s: stb allocates through the hook", s[i].name);
    }
    samples_free(s);
}

/* Valid files with bytes changed or cut: SX_OK or SX_E_FORMAT, never a crash, a leak or a
 * write outside the output (ASan checks the last two). */
Test(datasets_imageformats, mutated_files_never_crash)
{
    sample s[NSAMPLES];
    samples(s);
    sx_rng rng;
    sx_rng_seed(&rng, 2024);
    uint8_t buf[4096], out[4 * 6 * 3];
    int bad = 0;
    tu_fail_after(1L << 40); /* count allocations, fail none */
    for (int t = 0; t < 2000; t++) {
        const sample *x = &s[t % NSAMPLES];
        size_t len = x->file.len;
        cr_assert_leq(len, sizeof buf);
        memcpy(buf, x->file.p, len);
        for (int m = 0; m < 1 + t % 3; m++)
            buf[sx_rng_below(&rng, len)] = (uint8_t)sx_rng_u64(&rng);
        if (t % 4 == 0)
            len = sx_rng_below(&rng, len);
        sx_status st = sx_ds_image_decode(buf, len, "fuzz", 4, 6, 1 + 2 * (t % 2),
                                          (sx_ds_resize)(t % 3 == 1), out);
        cr_assert(st == SX_OK || st == SX_E_FORMAT, "%s", sx_last_error());
        bad += st != SX_OK;
    }
    long live = tu_live_allocs();
    tu_fail_reset();
    cr_assert_eq(live, 0);
    cr_assert_gt(bad, 400);
    samples_free(s);
}
