/* Image folders and image decoding: PNG files (grey, RGB, RGBA, 16-bit, palette) and JPEG files
 * (grey, RGB) written here with libpng and libjpeg into a temporary folder tree, loaded with
 * classes and files in sorted order; grey <-> RGB conversion; nearest and bilinear resizing
 * against values worked out by hand; corrupt, truncated and mislabelled files a clear error
 * naming the file; other entries skipped and counted in the report, or refused in strict mode;
 * out-of-memory injection over the whole load; random and mutated bytes fed to the decoder give
 * an error, never a crash (run under ASan). The stb_image formats: test_imageformats.c. */
#include "idx_fixture.h"
#include "image_fixture.h"
#include <testutil.h>

#include <sx_datasets.h>

#include <jpeglib.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- writing test images */

static void write_jpeg(const char *path, int h, int w, int c, const uint8_t *px)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    struct jpeg_compress_struct cinfo;
    struct jpeg_error_mgr jerr;
    cinfo.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&cinfo);
    jpeg_stdio_dest(&cinfo, f);
    cinfo.image_width = (JDIMENSION)w;
    cinfo.image_height = (JDIMENSION)h;
    cinfo.input_components = c;
    cinfo.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, 100, TRUE);
    jpeg_start_compress(&cinfo, TRUE);
    while (cinfo.next_scanline < cinfo.image_height) {
        JSAMPLE row[64 * 3];
        cr_assert(w * c <= (int)sizeof row);
        memcpy(row, px + cinfo.next_scanline * (size_t)(w * c), (size_t)(w * c));
        JSAMPROW rp = row;
        jpeg_write_scanlines(&cinfo, &rp, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    fclose(f);
}

/* A 4x4 grey gradient v = 16 * y + 4 * x + 1, and its RGB version (v, v, v). */
static void gradient(uint8_t *grey, uint8_t *rgb)
{
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++) {
            uint8_t v = (uint8_t)(16 * y + 4 * x + 1);
            grey[y * 4 + x] = v;
            for (int k = 0; k < 3; k++)
                rgb[(y * 4 + x) * 3 + k] = v;
        }
}

/* root/dog/{b.png (RGB), a.PNG (grey 16-bit)}, root/cat/{z.png (RGBA), m.jpeg (grey)},
 * root/.hidden/x.png, root/cat/notes.txt, root/readme (a file): classes cat, dog. */
static void make_tree(char *root, size_t n)
{
    tmp_dir(root, n);
    char p[512], q[512];
    uint8_t grey[16], rgb[48], rgba[64];
    gradient(grey, rgb);
    for (int k = 0; k < 16; k++) {
        memcpy(rgba + 4 * k, rgb + 3 * k, 3);
        rgba[4 * k + 3] = (uint8_t)(k * 16); /* alpha is dropped */
    }
    const char *dirs[3] = {"dog", "cat", ".hidden"};
    for (int i = 0; i < 3; i++) {
        sub(p, sizeof p, root, dirs[i]);
        cr_assert_eq(mkdir(p, 0700), 0);
    }
    sub(p, sizeof p, root, "dog");
    sub(q, sizeof q, p, "b.png");
    write_png(q, 4, 4, PNG_COLOR_TYPE_RGB, 8, rgb);
    sub(q, sizeof q, p, "a.PNG");
    write_png(q, 4, 4, PNG_COLOR_TYPE_GRAY, 16, grey);
    sub(p, sizeof p, root, "cat");
    sub(q, sizeof q, p, "z.png");
    write_png(q, 4, 4, PNG_COLOR_TYPE_RGBA, 8, rgba);
    sub(q, sizeof q, p, "m.jpeg");
    write_jpeg(q, 4, 4, 1, grey);
    sub(q, sizeof q, p, "notes.txt");
    write_bytes(q, "not an image", 12);
    sub(p, sizeof p, root, ".hidden");
    sub(q, sizeof q, p, "x.png");
    write_png(q, 4, 4, PNG_COLOR_TYPE_RGB, 8, rgb);
    sub(q, sizeof q, root, "readme");
    write_bytes(q, "hello", 5);
}

Test(datasets_imagefolder, classes_files_sorted_and_decoded)
{
    char root[256];
    make_tree(root, sizeof root);
    uint8_t grey[16], rgb[48];
    gradient(grey, rgb);
    sx_ds_image_folder_params p = {.h = 4, .w = 4, .c = 3, .resize = SX_DS_RESIZE_BILINEAR};
    sx_ds_images *d = NULL;
    cr_assert_eq(sx_ds_image_folder_load(root, &p, &d), SX_OK, "%s", sx_last_error());
    cr_assert_eq(d->n, 4);
    cr_assert_eq(d->classes, 2);
    cr_assert_str_eq(d->class_names[0], "cat");
    cr_assert_str_eq(d->class_names[1], "dog");
    uint8_t want_labels[4] = {0, 0, 1, 1}; /* cat/m.jpeg cat/z.png dog/a.PNG dog/b.png */
    cr_assert_eq(memcmp(d->labels, want_labels, 4), 0);
    cr_assert_eq(memcmp(d->pixels + 1 * 48, rgb, 48), 0, "RGBA: alpha dropped");
    cr_assert_eq(memcmp(d->pixels + 2 * 48, rgb, 48), 0, "16-bit grey -> RGB");
    cr_assert_eq(memcmp(d->pixels + 3 * 48, rgb, 48), 0, "RGB as is");
    for (int k = 0; k < 48; k++) /* JPEG at quality 100: within a few levels */
        cr_assert(abs((int)d->pixels[k] - (int)rgb[k]) <= 3, "jpeg pixel %d: %d vs %d", k,
                  d->pixels[k], rgb[k]);
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_images(d, &s), SX_OK);
    cr_assert_str_eq(sx_ds_source_class_name(s, 1), "dog");
    sx_ds_source_free(s);
    sx_ds_images_free(d);

    p.c = 1; /* RGB -> grey: (v, v, v) gives v */
    cr_assert_eq(sx_ds_image_folder_load(root, &p, &d), SX_OK, "%s", sx_last_error());
    for (int i = 1; i < 4; i++)
        cr_assert_eq(memcmp(d->pixels + i * 16, grey, 16), 0, "image %d", i);
    sx_ds_images_free(d);
    rm_tree(root);
}

Test(datasets_imagefolder, nearest_and_bilinear_resize)
{
    char root[256], p[512], q[512];
    tmp_dir(root, sizeof root);
    uint8_t grey[16], rgb[48];
    gradient(grey, rgb);
    sub(p, sizeof p, root, "only");
    cr_assert_eq(mkdir(p, 0700), 0);
    sub(q, sizeof q, p, "g.png");
    write_png(q, 4, 4, PNG_COLOR_TYPE_GRAY, 8, grey);
    sx_ds_image_folder_params prm = {.h = 2, .w = 2, .c = 1, .resize = SX_DS_RESIZE_NEAREST};
    sx_ds_images *d = NULL;
    cr_assert_eq(sx_ds_image_folder_load(root, &prm, &d), SX_OK, "%s", sx_last_error());
    /* nearest: source rows/cols floor((i + 0.5) * 2) = 1, 3 */
    uint8_t nearest[4] = {grey[1 * 4 + 1], grey[1 * 4 + 3], grey[3 * 4 + 1], grey[3 * 4 + 3]};
    cr_assert_eq(memcmp(d->pixels, nearest, 4), 0);
    sx_ds_images_free(d);
    prm.resize = SX_DS_RESIZE_BILINEAR; /* centres at 0.5, 2.5: means of 2x2 blocks */
    cr_assert_eq(sx_ds_image_folder_load(root, &prm, &d), SX_OK);
    uint8_t bilinear[4] = {(1 + 5 + 17 + 21 + 2) / 4, (9 + 13 + 25 + 29 + 2) / 4,
                           (33 + 37 + 49 + 53 + 2) / 4, (41 + 45 + 57 + 61 + 2) / 4};
    cr_assert_eq(memcmp(d->pixels, bilinear, 4), 0, "%d %d %d %d", d->pixels[0], d->pixels[1],
                 d->pixels[2], d->pixels[3]);
    sx_ds_images_free(d);
    prm.h = prm.w = 8; /* upscaling: pixel (0, 0) clamps to the corner, (1, 1) is
                          0.75 * 1 + 0.25 * 5 across, the same down */
    cr_assert_eq(sx_ds_image_folder_load(root, &prm, &d), SX_OK);
    cr_assert_eq(d->pixels[0], 1);
    double v = 0.75 * (0.75 * 1 + 0.25 * 5) + 0.25 * (0.75 * 17 + 0.25 * 21);
    cr_assert_eq(d->pixels[1 * 8 + 1], (uint8_t)(v + 0.5));
    cr_assert_eq(d->pixels[63], 61, "the far corner clamps too");
    sx_ds_images_free(d);
    rm_tree(root);
}

/* make_tree's strays (root/readme, cat/notes.txt) and hidden entries (.hidden/, and here
 * dog/.DS_Store), plus a sub-folder dog/sub: the three strays are skipped and counted, in
 * order (root's entries first), the hidden ones neither read nor counted. */
Test(datasets_imagefolder, skipped_entries_counted)
{
    char root[256], p[512];
    make_tree(root, sizeof root);
    sub(p, sizeof p, root, "dog/.DS_Store");
    write_bytes(p, "x", 1);
    sub(p, sizeof p, root, "dog/sub");
    cr_assert_eq(mkdir(p, 0700), 0);
    sx_ds_image_folder_report rep;
    memset(&rep, 0x77, sizeof rep);
    sx_ds_image_folder_params prm = sx_ds_image_folder_params_default();
    cr_assert(!prm.strict);
    cr_assert_null(prm.report);
    prm.report = &rep;
    sx_ds_images *d = NULL;
    cr_assert_eq(sx_ds_image_folder_load(root, &prm, &d), SX_OK, "%s", sx_last_error());
    cr_assert_eq(d->n, 4);
    cr_assert_eq(rep.images, 4);
    cr_assert_eq(rep.skipped, 3);
    cr_assert_eq(rep.files, 7);
    sub(p, sizeof p, root, "readme");
    cr_assert_str_eq(rep.first_skipped, p);
    sx_ds_images_free(d);
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(sx_ds_image_folder_load(root, &prm, &d), SX_OK, "%s", sx_last_error());
    cr_assert_eq(rep.skipped, 2);
    sub(p, sizeof p, root, "cat/notes.txt");
    cr_assert_str_eq(rep.first_skipped, p, "then the first class's, %s", rep.first_skipped);
    sx_ds_images_free(d);
    rm_tree(root);
}

/* Strict: each stray is an error naming it, root's first; without strays the load succeeds,
 * hidden entries still ignored. A failed load zeroes the report. */
Test(datasets_imagefolder, strict_refuses_stray_entries)
{
    char root[256], p[512];
    make_tree(root, sizeof root);
    sub(p, sizeof p, root, "dog/.DS_Store");
    write_bytes(p, "x", 1);
    sub(p, sizeof p, root, "dog/sub");
    cr_assert_eq(mkdir(p, 0700), 0);
    sx_ds_image_folder_report rep;
    memset(&rep, 0x77, sizeof rep);
    sx_ds_image_folder_params prm = sx_ds_image_folder_params_default();
    prm.strict = true;
    prm.report = &rep;
    const char *strays[3] = {"readme", "cat/notes.txt", "dog/sub"};
    const char *why[3] = {"not a class folder", "not an image file name (.png, .jpg",
                          "not a regular file"};
    for (int k = 0; k < 3; k++) {
        sx_ds_images *d = (sx_ds_images *)&d;
        cr_assert_eq(sx_ds_image_folder_load(root, &prm, &d), SX_E_FORMAT, "%s", strays[k]);
        cr_assert_null(d);
        char want[600];
        sub(p, sizeof p, root, strays[k]);
        snprintf(want, sizeof want, "%s: %s", p, why[k]);
        cr_assert(fx_msg_has(want));
        cr_assert_eq(rep.files + rep.images + rep.skipped, 0);
        cr_assert_str_eq(rep.first_skipped, "");
        cr_assert_eq(k < 2 ? unlink(p) : rmdir(p), 0);
    }
    sx_ds_images *d = NULL;
    cr_assert_eq(sx_ds_image_folder_load(root, &prm, &d), SX_OK, "%s", sx_last_error());
    cr_assert_eq(rep.images, 4);
    cr_assert_eq(rep.skipped, 0);
    sx_ds_images_free(d);
    rm_tree(root);
}

/* Put `bytes` at root/cls/name and expect the load to fail with `want` naming the file. */
static void expect_bad_file(const void *bytes, size_t n, const char *name, sx_status want,
                            const char *msg)
{
    char root[256], p[512], q[512], ok[512];
    make_tree(root, sizeof root);
    sub(p, sizeof p, root, "dog");
    sub(q, sizeof q, p, name);
    write_bytes(q, bytes, n);
    sx_ds_images *d = (sx_ds_images *)&d;
    sx_ds_image_folder_params prm = sx_ds_image_folder_params_default();
    sx_status st = sx_ds_image_folder_load(root, &prm, &d);
    cr_assert_eq(st, want, "%s: %s", name, sx_last_error());
    cr_assert_null(d);
    cr_assert(fx_msg_has(q), "the message names the file");
    cr_assert(fx_msg_has(msg));
    (void)ok;
    rm_tree(root);
}

Test(datasets_imagefolder, corrupt_files_are_errors_naming_the_file)
{
    char root[256], p[512];
    make_tree(root, sizeof root);
    sub(p, sizeof p, root, "dog/b.png");
    size_t n;
    uint8_t *png = read_bytes(p, &n);
    sub(p, sizeof p, root, "cat/m.jpeg");
    size_t nj;
    uint8_t *jpg = read_bytes(p, &nj);
    rm_tree(root);
    expect_bad_file("just text", 9, "c.png", SX_E_FORMAT,
                    "not a PNG, JPEG, PNM, BMP, GIF or TGA file");
    expect_bad_file(png, n / 2, "c.png", SX_E_FORMAT, "corrupt PNG");
    uint8_t *bad = malloc(n);
    memcpy(bad, png, n);
    bad[20] ^= 0x55; /* the IHDR's CRC no longer matches */
    expect_bad_file(bad, n, "c.png", SX_E_FORMAT, "corrupt PNG");
    expect_bad_file(jpg, nj - 40, "c.jpg", SX_E_FORMAT, "corrupt JPEG");
    expect_bad_file(jpg, 3, "c.jpg", SX_E_FORMAT, "corrupt JPEG");
    free(bad);
    free(png);
    free(jpg);
}

Test(datasets_imagefolder, folder_errors)
{
    char root[256], p[512];
    sx_ds_images *d = NULL;
    sx_ds_image_folder_params prm = sx_ds_image_folder_params_default();
    cr_assert_eq(sx_ds_image_folder_load("/nonexistent/sx", &prm, &d), SX_E_IO);
    cr_assert(fx_msg_has("/nonexistent/sx: cannot open"));
    tmp_dir(root, sizeof root);
    cr_assert_eq(sx_ds_image_folder_load(root, &prm, &d), SX_E_FORMAT);
    cr_assert(fx_msg_has("no class folders"));
    sub(p, sizeof p, root, "empty");
    cr_assert_eq(mkdir(p, 0700), 0);
    cr_assert_eq(sx_ds_image_folder_load(root, &prm, &d), SX_E_FORMAT);
    cr_assert(fx_msg_has("empty: no image files (.png, .jpg, .jpeg, .pgm, .ppm, .pnm, .bmp, .gif, "
                         ".tga)"));
    cr_assert_null(d);
    prm.c = 2;
    cr_assert_eq(sx_ds_image_folder_load(root, &prm, &d), SX_E_ARG);
    prm = sx_ds_image_folder_params_default();
    prm.h = 0;
    cr_assert_eq(sx_ds_image_folder_load(root, &prm, &d), SX_E_ARG);
    cr_assert_eq(sx_ds_image_folder_load(NULL, NULL, &d), SX_E_ARG);
    cr_assert_eq(sx_ds_image_folder_load(root, NULL, NULL), SX_E_ARG);
    rm_tree(root);
    uint8_t out[3];
    cr_assert_eq(sx_ds_image_decode(NULL, 0, NULL, 1, 1, 1, SX_DS_RESIZE_NEAREST, out), SX_E_ARG);
    cr_assert_eq(sx_ds_image_decode(out, 3, NULL, 1, 1, 3, (sx_ds_resize)9, out), SX_E_ARG);
}

/* Fail the k-th allocation of a whole folder load (libpng's included) for every k. */
Test(datasets_imagefolder, out_of_memory_every_allocation)
{
    char root[256];
    make_tree(root, sizeof root);
    sx_ds_image_folder_params prm = {.h = 3, .w = 5, .c = 3, .resize = SX_DS_RESIZE_BILINEAR};
    long k;
    for (k = 0;; k++) {
        sx_ds_images *d = NULL;
        tu_fail_after(k);
        sx_status st = sx_ds_image_folder_load(root, &prm, &d);
        bool right = st == SX_OK && d->n == 4 && strcmp(d->class_names[1], "dog") == 0;
        sx_ds_images_free(d);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(live, 0, "k=%ld leaked %ld allocations", k, live);
        if (st == SX_OK) {
            cr_assert(right);
            break;
        }
        cr_assert_eq(st, SX_E_NOMEM, "k=%ld: %s", k, sx_last_error());
        cr_assert_null(d);
    }
    cr_assert_gt(k, 20, "the load makes many allocations");
    rm_tree(root);
}

/* Random bytes, and valid PNG/JPEG files with bytes changed or cut: SX_OK or SX_E_FORMAT,
 * never a crash, a leak or a write outside the output (ASan checks the last two). */
Test(datasets_imagefolder, random_bytes_never_crash)
{
    char root[256], p[512];
    make_tree(root, sizeof root);
    size_t n[2];
    sub(p, sizeof p, root, "dog/b.png");
    uint8_t *good[2] = {read_bytes(p, &n[0]), NULL};
    sub(p, sizeof p, root, "cat/m.jpeg");
    good[1] = read_bytes(p, &n[1]);
    rm_tree(root);
    sx_rng rng;
    sx_rng_seed(&rng, 1919);
    uint8_t buf[4096], out[5 * 6 * 3];
    int ok = 0, bad = 0;
    for (int t = 0; t < 600; t++) {
        int which = t % 2;
        size_t len;
        if (t % 3 == 0) { /* random bytes behind a valid signature */
            len = 8 + sx_rng_below(&rng, 200);
            memcpy(buf, good[which], 8);
            for (size_t i = 8; i < len; i++)
                buf[i] = (uint8_t)sx_rng_u64(&rng);
        } else { /* a valid file, mutated, maybe cut */
            len = n[which] < sizeof buf ? n[which] : sizeof buf;
            memcpy(buf, good[which], len);
            for (int m = 0; m < 1 + t % 4; m++)
                buf[sx_rng_below(&rng, len)] = (uint8_t)sx_rng_u64(&rng);
            if (t % 5 == 0)
                len = sx_rng_below(&rng, len);
        }
        sx_status st = sx_ds_image_decode(buf, len, "fuzz", 5, 6, 1 + 2 * (t % 2),
                                          (sx_ds_resize)(t % 3 == 1), out);
        cr_assert(st == SX_OK || st == SX_E_FORMAT, "%s", sx_last_error());
        ok += st == SX_OK;
        bad += st != SX_OK;
    }
    cr_assert_gt(bad, 100);
    free(good[0]);
    free(good[1]);
}

/* More than 256 class folders: no limit; the labels are kept as 32-bit indices (labels32), the
 * source's y is i32, and a batch's one-hot row lands on the right class. 300 folders of one
 * 2x2 PNG each, whose grey level is the class modulo 251. */
Test(datasets_imagefolder, more_than_256_classes)
{
    char root[256], dir[512], file[600];
    tmp_dir(root, sizeof root);
    for (int k = 0; k < 300; k++) {
        char name[16];
        snprintf(name, sizeof name, "c%03d", k);
        sub(dir, sizeof dir, root, name);
        cr_assert_eq(mkdir(dir, 0700), 0);
        sub(file, sizeof file, dir, "x.png");
        uint8_t px[4] = {(uint8_t)(k % 251), 0, 0, 0};
        write_png(file, 2, 2, PNG_COLOR_TYPE_GRAY, 8, px);
    }
    sx_ds_image_folder_params p = {.h = 2, .w = 2, .c = 1, .resize = SX_DS_RESIZE_NEAREST};
    sx_ds_images *d = NULL;
    cr_assert_eq(sx_ds_image_folder_load(root, &p, &d), SX_OK, "%s", sx_last_error());
    cr_assert_eq(d->classes, 300);
    cr_assert_null(d->labels);
    cr_assert_not_null(d->labels32);
    cr_assert_eq(d->labels32[299], 299);
    cr_assert_eq(d->pixels[299 * 4], 299 % 251);
    sx_ds_source *s = NULL;
    cr_assert_eq(sx_ds_source_images(d, &s), SX_OK);
    cr_assert_eq(sx_ds_source_spec(s)->y_type, SX_DS_I32);
    cr_assert_str_eq(sx_ds_source_class_name(s, 280), "c280");
    sx_ds_loader_params lp = sx_ds_loader_params_default();
    lp.batch_size = 300;
    lp.shuffle = false;
    sx_ds_loader *l = NULL;
    cr_assert_eq(sx_ds_loader_new(s, &lp, &l), SX_OK);
    sx_tensor *y = tu_zeros(SX_F32, 2, (int64_t[]){300, 300});
    int64_t count = 0;
    cr_assert_eq(sx_ds_loader_next(l, NULL, y, &count), SX_OK, "%s", sx_last_error());
    cr_assert_eq(count, 300);
    for (int r = 0; r < 300; r += 37)
        for (int k = 0; k < 300; k++)
            cr_assert_eq(sx_tensor_get(y, r * 300 + k), k == r ? 1.0 : 0.0);
    sx_tensor *t = NULL;
    cr_assert_eq(sx_ds_labels_tensor(d, SX_F64, false, &t), SX_OK);
    cr_assert_eq(sx_tensor_get(t, 257), 257);
    sx_tensor_free(t);
    /* the batcher over the set: one-hot rows past 256 too */
    sx_ds_batcher_params bp = sx_ds_batcher_params_default();
    bp.batch_size = 300;
    bp.shuffle = false;
    sx_ds_batcher *b = NULL;
    cr_assert_eq(sx_ds_batcher_new(d, &bp, &b), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_ds_batcher_next(b, NULL, y, &count), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_get(y, 290 * 300 + 290), 1.0);
    /* a hand-filled set with both label arrays, or the wrong one, is refused */
    sx_ds_images bad = *d;
    bad.labels = d->pixels;
    sx_ds_source *s2 = NULL;
    cr_assert_eq(sx_ds_source_images(&bad, &s2), SX_E_ARG);
    cr_assert_null(s2);
    cr_assert(fx_msg_has("labels32 alone"));
    sx_ds_batcher_free(b);
    sx_tensor_free(y);
    sx_ds_loader_free(l);
    sx_ds_source_free(s);
    sx_ds_images_free(d);
    rm_tree(root);
}
