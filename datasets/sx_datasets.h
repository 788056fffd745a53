/* sx_datasets.h: data for strix: IDX files (raw or gzip), MNIST and Fashion-MNIST, minibatches.
 *
 * The idea: read a file once, check everything about it before trusting it, keep the images as
 * the bytes they are (60000 MNIST images are 47 MB as u8, 188 MB as f32), or on request
 * run-length coded (sx_ds_images_compact: 12.6 MB for those), and convert to the tensor dtype
 * one minibatch at a time.
 *
 * Conventions (those of sx_tensor.h hold too)
 * -------------------------------------------
 * - Every function that can fail returns sx_status and sets a one-line message, readable with
 *   sx_last_error(), that names the file and the problem:
 *   "data/mnist/t10k-labels-idx1-ubyte.gz: 9999 labels but 10000 images".
 * - Constructors write their result through an out-parameter: NULL on failure, and nothing is
 *   leaked. Destructors accept NULL, and so do accessors (each says what it returns for NULL).
 * - Memory comes from the allocator hook of sx_tensor.h (sx_alloc). Exception: zlib allocates
 *   its own few hundred KB of stream buffers with malloc while a file is open (the gzip-in-memory
 *   parser, sx_ds_idx_parse, routes zlib through the hook too). Blocks of 4 MB or more get a
 *   transparent-huge-page hint (madvise, Linux): filling fresh memory is then ~20x cheaper.
 * - A file is checked before its payload is allocated: magic, element type, rank, dimensions,
 *   and that the payload the header announces can be in the file at all (a raw file's size, or
 *   for gzip the most a deflate stream of that size can expand to, 1032:1; a pipe has no known
 *   size, so only the allocation can fail there). Then the payload is
 *   read; the file must end exactly where the header says (a short payload, trailing bytes, a
 *   truncated or corrupt gzip stream are all errors, even when only the first rows are kept).
 *
 * Status codes used here
 *   SX_E_ARG     a NULL pointer, an invalid dtype, a non-finite scale, a bad count or index
 *                vector length (see each function)
 *   SX_E_IO      the file cannot be opened (missing, no permission, a directory) or read
 *   SX_E_FORMAT  the file is not a valid IDX file, or not the IDX file the loader wants (the
 *                message says which check failed; see sx_ds_idx_read_raw for the list)
 *   SX_E_RANGE   a label >= the number of classes; an example index outside the data set
 *   SX_E_SHAPE   a caller-provided batch tensor of the wrong shape
 *   SX_E_NOMEM   an allocation failed
 *
 * Threads: the functions are reentrant (no global state); one object (sx_ds_images,
 * sx_ds_batcher) must not be used by two threads at once unless both only read it.
 */
#ifndef SX_DATASETS_H
#define SX_DATASETS_H

#include "sx_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- IDX files */

/* The element types of the IDX format; the value is the type code of the file's third byte.
 * Multi-byte elements are big-endian in the file. */
typedef enum {
    SX_DS_U8 = 0x08,  /* unsigned byte */
    SX_DS_I8 = 0x09,  /* signed byte */
    SX_DS_I16 = 0x0B, /* short */
    SX_DS_I32 = 0x0C, /* int */
    SX_DS_F32 = 0x0D, /* float */
    SX_DS_F64 = 0x0E  /* double */
} sx_ds_type;

/* "u8", "i8", "i16", "i32", "f32", "f64"; "?" for a value that is not an sx_ds_type. */
const char *sx_ds_type_name(sx_ds_type t);
/* Bytes of one element (1, 1, 2, 4, 4, 8); 0 for a value that is not an sx_ds_type. */
size_t sx_ds_type_size(sx_ds_type t);

/* The contents of an IDX file as stored: its element type, shape and elements in native byte
 * order. From sx_ds_idx_read_raw or sx_ds_idx_parse; release with sx_ds_idx_free. */
typedef struct sx_ds_idx {
    sx_ds_type type;
    int rank;                  /* 1..SX_MAX_RANK */
    int64_t dims[SX_MAX_RANK]; /* dims[i] for i < rank, as held (dims[0] after the limit); 1 past
                                  rank */
    int64_t file_dim0;         /* dims[0] as the file's header says (before the limit) */
    int64_t count;             /* elements held: the product of dims */
    void *data;                /* count elements of `type`, row-major, native byte order; owned:
                                  cast to uint8_t, int8_t, int16_t, int32_t, float or double */
} sx_ds_idx;

/* Read the IDX file at `path` (gzip-compressed or raw: the content decides, not the name).
 * limit > 0 keeps only the first `limit` entries along the first axis (all of them when the
 * file has fewer); limit <= 0 keeps everything. The rest of the file is still read and checked.
 * On success *out owns the result (sx_ds_idx_free); on failure *out is NULL.
 * Errors:
 *   SX_E_ARG     path or out is NULL
 *   SX_E_IO      "PATH: cannot open: <reason>" (missing file, no permission), "PATH: is a
 *                directory", or a read error
 *   SX_E_FORMAT  "PATH: <problem>" where the problem is one of: empty file; truncated header;
 *                bad magic (the first two bytes must be 0); unknown element type code; rank 0
 *                or above 8; a dimension of 0; dimensions whose product (elements or bytes)
 *                overflows 64 bits; a payload larger than the file can hold (checked before any
 *                allocation); a payload shorter than the header says; trailing bytes after the
 *                payload; truncated gzip stream; corrupt gzip stream (bad deflate data, CRC or
 *                length mismatch)
 *   SX_E_NOMEM   an allocation failed (the payload, or zlib's buffers) */
sx_status sx_ds_idx_read_raw(const char *path, int64_t limit, sx_ds_idx **out) SX_NODISCARD;

/* The same from memory: `buf` holds `len` bytes of an IDX file, raw or gzip-compressed (one or
 * more concatenated gzip members, as zlib's gz reader accepts). `name` is used in messages in
 * place of a path (NULL: "<memory>"). The buffer is not kept. Errors as sx_ds_idx_read_raw,
 * SX_E_ARG also for buf NULL with len > 0; never SX_E_IO. */
sx_status sx_ds_idx_parse(const void *buf, size_t len, const char *name, int64_t limit,
                          sx_ds_idx **out) SX_NODISCARD;

void sx_ds_idx_free(sx_ds_idx *idx);

/* Read an IDX file of any element type into a new tensor of `dtype` with the file's shape
 * (after the limit, as for sx_ds_idx_read_raw): out[i] = (dtype)(element[i] * scale), the
 * product computed in double. scale = 1 keeps the values; SX_DS_PIXEL_SCALE maps bytes to
 * [0, 1]. The file is read in large chunks and converted as it is decompressed: no copy of the
 * whole payload in its file type is made.
 * Errors: as sx_ds_idx_read_raw, and SX_E_ARG for an invalid dtype or a non-finite scale. */
sx_status sx_ds_idx_read(const char *path, sx_dtype dtype, double scale, int64_t limit,
                         sx_tensor **out) SX_NODISCARD;

/* Convert a read file into a new tensor: the shape is idx's dims, out[i] = element[i] * scale.
 * Errors: SX_E_ARG (idx or out NULL, idx not valid, bad dtype, non-finite scale), SX_E_NOMEM. */
sx_status sx_ds_idx_to_tensor(const sx_ds_idx *idx, sx_dtype dtype, double scale,
                              sx_tensor **out) SX_NODISCARD;

/* ---------------------------------------------------------------- labelled images */

/* The default factor from a pixel byte to a tensor value: 1/255, so 0 -> 0.0 and 255 -> 1.0
 * (values in [0, 1], both ends included). */
#define SX_DS_PIXEL_SCALE (1.0 / 255.0)

/* A labelled image set kept as bytes: what the loaders return and the batcher reads.
 * The images are held in one of two forms, exactly one of pixels / packed being set:
 * - raw: pixels holds (n, h, w, c) row-major (NHWC) bytes, n*h*w*c of them; packed and offsets
 *   are NULL. The loaders return this form.
 * - packed: sx_ds_images_compact has run-length coded every image (about 4x smaller for MNIST);
 *   image i's code is packed[offsets[i] .. offsets[i+1]) and pixels is NULL. Every function that
 *   reads images (sx_ds_images_tensor, sx_ds_images_gather_out, the batcher) accepts both forms
 *   and gives the same values bit for bit. The code is produced only by sx_ds_images_compact
 *   and is trusted as pixels are: do not fill packed/offsets by hand. A struct copy with a
 *   smaller n (the first n examples) stays valid in either form.
 * The struct is open (and may be filled by the caller for data from elsewhere: then the caller
 * owns and frees the arrays). A caller filling it by hand must zero it first, so that the fields
 * it does not set (packed, offsets, and any added later) are NULL: designated initializers do,
 * e.g. (sx_ds_images){.n = n, .h = 28, ..., .pixels = p, .labels = l}.
 * From a loader, release it with sx_ds_images_free (either form). */
typedef struct sx_ds_images {
    int64_t n;        /* examples, >= 1 */
    int64_t h, w, c;  /* image height, width, channels: 28, 28, 1 for MNIST */
    int64_t classes;  /* labels are in [0, classes): 10 for MNIST */
    uint8_t *pixels;  /* raw form: (n, h, w, c) row-major (NHWC): n*h*w*c bytes; else NULL */
    uint8_t *labels;  /* (n) class indices */
    uint8_t *packed;  /* packed form: the images' codes, offsets[n] bytes; else NULL */
    int64_t *offsets; /* packed form: (n + 1) offsets into packed, offsets[0] = 0, rising;
                         else NULL */
} sx_ds_images;

/* Load an images file (u8, rank 3 (n,h,w) read as c = 1, or rank 4 (n,h,w,c)) and its labels
 * file (u8, rank 1 (n)), raw or gzip. classes in 1..256. limit > 0 keeps the first `limit`
 * examples of both (the files are still read to the end and checked); limit <= 0 keeps all.
 * Both headers are checked against each other before anything is allocated.
 * On success *out owns the result (sx_ds_images_free); on failure *out is NULL.
 * Errors:
 *   SX_E_ARG     a path or out is NULL; classes outside 1..256
 *   SX_E_IO, SX_E_NOMEM, SX_E_FORMAT  as sx_ds_idx_read_raw, for either file; SX_E_FORMAT also
 *                for an images file that is not u8 of rank 3 or 4, a labels file that is not u8
 *                of rank 1, and counts that differ ("LABELS: 9999 labels but 10000 images")
 *   SX_E_RANGE   a kept label >= classes ("LABELS: label 12 of example 345 is not in 0..9") */
sx_status sx_ds_images_load(const char *images_path, const char *labels_path, int64_t classes,
                            int64_t limit, sx_ds_images **out) SX_NODISCARD;

/* Which half of a data set with a standard train/test split. */
typedef enum { SX_DS_TRAIN = 0, SX_DS_TEST = 1 } sx_ds_part;

/* MNIST from a directory holding the standard files: train-images-idx3-ubyte.gz,
 * train-labels-idx1-ubyte.gz (60000 examples), t10k-images-idx3-ubyte.gz,
 * t10k-labels-idx1-ubyte.gz (10000). When a .gz file is absent, the same name without .gz
 * (the decompressed file) is used if present. 10 classes; images (n, 28, 28, 1).
 * scripts/fetch_mnist puts the files in data/mnist/.
 * Errors: as sx_ds_images_load (messages name the .gz path when neither file exists);
 * SX_E_ARG also for dir NULL, a bad part, or a directory path longer than 4000 bytes. */
sx_status sx_ds_mnist_load(const char *dir, sx_ds_part part, int64_t limit,
                           sx_ds_images **out) SX_NODISCARD;

/* Where Debian's package dataset-fashion-mnist installs Fashion-MNIST. */
#define SX_DS_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Fashion-MNIST: the same file names and format as MNIST; dir NULL means
 * SX_DS_FASHION_MNIST_DIR. Errors as sx_ds_mnist_load (dir may be NULL). */
sx_status sx_ds_fashion_mnist_load(const char *dir, sx_ds_part part, int64_t limit,
                                   sx_ds_images **out) SX_NODISCARD;
/* "T-shirt/top", "Trouser", ..., "Ankle boot" for labels 0..9; "?" otherwise. */
const char *sx_ds_fashion_mnist_class_name(int64_t label);

/* Release a set from a loader (its arrays, in either form, and the struct). NULL is fine. */
void sx_ds_images_free(sx_ds_images *d);

/* Compact a set in place: run-length code every image (zero runs are counted, other bytes kept;
 * the format is described in datasets/images.c), then release pixels and keep packed and
 * offsets, both sized exactly (a first pass counts the bytes; nothing is over-allocated). Reading
 * the set afterwards gives the same values bit for bit; converting a batch gets cheaper (zero
 * runs are written without a table look-up). MNIST: train 47.0 -> 12.6 MB, test 7.8 -> 2.1 MB.
 * When the code plus its offsets (8 bytes an image) would not be smaller than the raw bytes
 * (images without runs of zeros, or of very few pixels), the set is left as it is and SX_OK is
 * returned: sx_ds_images_compacted tells which happened. A set already packed is left as it is
 * (SX_OK): calling it twice is fine.
 * Ownership: the pixels array must come from sx_alloc, as every loader's does; on compaction it
 * is released with sx_free, and packed and offsets come from sx_alloc. A loader's set is then
 * released with sx_ds_images_free as before; the owner of a caller-filled set releases packed and
 * offsets with sx_free (and labels as it allocated them).
 * The peak during the call is the raw bytes plus the code. Not while a batcher borrows the set
 * (it must stay unchanged then).
 * Errors (the set unchanged and still usable): SX_E_ARG (d NULL or not a valid set: see
 * sx_ds_images_tensor), SX_E_NOMEM. */
sx_status sx_ds_images_compact(sx_ds_images *d) SX_NODISCARD;

/* True when d holds its images in the packed form (after an sx_ds_images_compact that
 * compacted); false for the raw form and for NULL. */
bool sx_ds_images_compacted(const sx_ds_images *d);

/* The bytes the images take in memory (labels not counted): n*h*w*c for the raw form;
 * offsets[n] + 8*(n + 1), the code and its offsets, for the packed form. 0 for NULL. */
size_t sx_ds_images_bytes(const sx_ds_images *d);

/* The whole set as tensors, for small sets and evaluation. Images: a new (n, h, w, c) tensor,
 * out = pixel * scale (SX_DS_PIXEL_SCALE for [0, 1]). Labels: a new (n) tensor of class
 * indices (one_hot false) or (n, classes) one-hot rows (one_hot true).
 * Errors: SX_E_ARG (d or out NULL, d not a valid set: n, h, w, c < 1, classes outside 1..256,
 * labels NULL, not exactly one of pixels / packed set, packed without offsets; bad dtype;
 * non-finite scale), SX_E_NOMEM. The labels are not re-checked. */
sx_status sx_ds_images_tensor(const sx_ds_images *d, sx_dtype dtype, double scale,
                              sx_tensor **out) SX_NODISCARD;
sx_status sx_ds_labels_tensor(const sx_ds_images *d, sx_dtype dtype, bool one_hot,
                              sx_tensor **out) SX_NODISCARD;

/* Fill a batch from chosen examples: row r < count of x and y gets example index[r].
 * x (may be NULL): any dtype, shape[0] = B >= count and B*h*w*c elements in all, so (B,h,w,c)
 *   or a flat (B, h*w*c); x = pixel * scale.
 * y (may be NULL): any dtype; rank 1 (B) receives class indices, rank 2 (B, d->classes) one-hot
 *   rows. When both are given they have the same B.
 * Rows count..B-1 are padding: zeros in x, all-zero rows in a one-hot y (they add nothing to a
 * cross-entropy loss), -1 in an index y.
 * Errors (x and y unchanged): SX_E_ARG (d NULL or invalid, index NULL with count > 0, count
 * < 0, non-finite scale, an invalid tensor), SX_E_SHAPE (x or y of another shape, count > B),
 * SX_E_RANGE (an index outside [0, n), or a chosen label >= classes: only possible in a set
 * the caller filled). Never allocates. */
sx_status sx_ds_images_gather_out(const sx_ds_images *d, const int64_t *index, int64_t count,
                                  double scale, sx_tensor *x, sx_tensor *y) SX_NODISCARD;

/* ---------------------------------------------------------------- minibatches */

/* An iterator over minibatches of an sx_ds_images, one epoch after another. It keeps one
 * permutation of the example indices (8 bytes per example) and converts each batch from the
 * bytes into the caller's tensors: the data set is never copied. */
typedef struct sx_ds_batcher sx_ds_batcher;

typedef struct sx_ds_batcher_params {
    int64_t batch_size; /* >= 1 */
    bool shuffle;       /* visit examples in a random order, new every epoch */
    uint64_t seed;      /* the order of epoch e depends only on (seed, e, n) */
    bool drop_last;     /* skip a last batch smaller than batch_size (else it is kept) */
    double scale;       /* pixel -> value factor, finite */
} sx_ds_batcher_params;

/* batch_size 64, shuffle true, seed 0, drop_last false, scale SX_DS_PIXEL_SCALE. */
sx_ds_batcher_params sx_ds_batcher_params_default(void);

/* A batcher over `d`, which it borrows: d must stay alive and unchanged while the batcher is
 * used. p NULL means the defaults. The batcher starts at the first batch of epoch 0.
 * Shuffling is Fisher-Yates with an sx_rng seeded from (seed, epoch): the same seed gives the
 * same order on every run and machine, each epoch its own order.
 * Errors (*out NULL): SX_E_ARG (d or out NULL, d invalid, batch_size < 1, non-finite scale,
 * drop_last with batch_size > n: an epoch would hold no batch), SX_E_NOMEM. */
sx_status sx_ds_batcher_new(const sx_ds_images *d, const sx_ds_batcher_params *p,
                            sx_ds_batcher **out) SX_NODISCARD;

/* Fill the next batch into x and y (shapes and padding as sx_ds_images_gather_out with
 * B = batch_size; either may be NULL) and set *count to the number of examples in it:
 * batch_size, or fewer for the last batch of an epoch when drop_last is false. At the end of an
 * epoch, *count is 0, x and y are left unchanged, and the batcher moves to the next epoch: the
 * following call returns its first batch. Typical loop:
 *     while ((st = sx_ds_batcher_next(b, x, y, &m)) == SX_OK && m > 0) { ...train on x, y... }
 * Errors (nothing changed, the batcher does not move): SX_E_ARG (b or count NULL, invalid
 * tensor), SX_E_SHAPE (x or y not of batch_size rows of the right size), SX_E_RANGE (as for
 * sx_ds_images_gather_out). */
sx_status sx_ds_batcher_next(sx_ds_batcher *b, sx_tensor *x, sx_tensor *y,
                             int64_t *count) SX_NODISCARD;

/* Go to the first batch of epoch `epoch` (>= 0; SX_E_ARG otherwise), e.g. to resume training.
 * The order of an epoch does not depend on the epochs before it. */
sx_status sx_ds_batcher_set_epoch(sx_ds_batcher *b, int64_t epoch) SX_NODISCARD;
/* The current epoch (0 first); -1 for NULL. */
int64_t sx_ds_batcher_epoch(const sx_ds_batcher *b);
/* Batches in one epoch: ceil(n / batch_size), or floor with drop_last; -1 for NULL. */
int64_t sx_ds_batcher_batches(const sx_ds_batcher *b);
void sx_ds_batcher_free(sx_ds_batcher *b);

#ifdef __cplusplus
}
#endif

#endif /* SX_DATASETS_H */
