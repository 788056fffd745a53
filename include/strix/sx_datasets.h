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
 *   SX_E_UNSUPPORTED  a valid file holding what strix cannot represent (a safetensors tensor
 *                of an integer dtype)
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
    SX_DS_F64 = 0x0E, /* double */
    SX_DS_I64 = 0x40  /* int64_t (not an IDX type: IDX files never hold it) */
} sx_ds_type;

/* "u8", "i8", "i16", "i32", "f32", "f64", "i64"; "?" for a value that is not an sx_ds_type. */
const char *sx_ds_type_name(sx_ds_type t);
/* Bytes of one element (1, 1, 2, 4, 4, 8, 8); 0 for a value that is not an sx_ds_type. */
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
SX_NODISCARD sx_status sx_ds_idx_read_raw(const char *path, int64_t limit, sx_ds_idx **out);

/* The same from memory: `buf` holds `len` bytes of an IDX file, raw or gzip-compressed (one or
 * more concatenated gzip members, as zlib's gz reader accepts). `name` is used in messages in
 * place of a path (NULL: "<memory>"). The buffer is not kept. Errors as sx_ds_idx_read_raw,
 * SX_E_ARG also for buf NULL with len > 0; never SX_E_IO. */
SX_NODISCARD sx_status sx_ds_idx_parse(const void *buf, size_t len, const char *name, int64_t limit,
                                       sx_ds_idx **out);

void sx_ds_idx_free(sx_ds_idx *idx);

/* Read an IDX file of any element type into a new tensor of `dtype` with the file's shape
 * (after the limit, as for sx_ds_idx_read_raw): out[i] = (dtype)(element[i] * scale), the
 * product computed in double. scale = 1 keeps the values; SX_DS_PIXEL_SCALE maps bytes to
 * [0, 1]. The file is read in large chunks and converted as it is decompressed: no copy of the
 * whole payload in its file type is made.
 * Errors: as sx_ds_idx_read_raw, and SX_E_ARG for an invalid dtype or a non-finite scale. */
SX_NODISCARD sx_status sx_ds_idx_read(const char *path, sx_dtype dtype, double scale, int64_t limit,
                                      sx_tensor **out);

/* Convert a read file into a new tensor: the shape is idx's dims, out[i] = element[i] * scale.
 * Errors: SX_E_ARG (idx or out NULL, idx not valid, bad dtype, non-finite scale), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_idx_to_tensor(const sx_ds_idx *idx, sx_dtype dtype, double scale,
                                           sx_tensor **out);

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
    int64_t n;          /* examples, >= 1 */
    int64_t h, w, c;    /* image height, width, channels: 28, 28, 1 for MNIST */
    int64_t classes;    /* labels are in [0, classes): 10 for MNIST */
    uint8_t *pixels;    /* raw form: (n, h, w, c) row-major (NHWC): n*h*w*c bytes; else NULL */
    uint8_t *labels;    /* (n) class indices, for classes <= 256; NULL for more (labels32) */
    uint8_t *packed;    /* packed form: the images' codes, offsets[n] bytes; else NULL */
    int64_t *offsets;   /* packed form: (n + 1) offsets into packed, offsets[0] = 0, rising;
                           else NULL */
    char **class_names; /* NULL, or (classes) names (sx_ds_image_folder_load sets them: the
                           folder names); owned by a loader's set, freed by sx_ds_images_free */
    int32_t *labels32;  /* (n) class indices when classes > 256 (then labels is NULL); NULL for
                           256 classes or fewer. Exactly one of labels / labels32 is set: a
                           byte a label where bytes suffice, 4 past them (no 256-class limit) */
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
SX_NODISCARD sx_status sx_ds_images_load(const char *images_path, const char *labels_path,
                                         int64_t classes, int64_t limit, sx_ds_images **out);

/* Which half of a data set with a standard train/test split. */
typedef enum { SX_DS_TRAIN = 0, SX_DS_TEST = 1 } sx_ds_part;

/* MNIST from a directory holding the standard files: train-images-idx3-ubyte.gz,
 * train-labels-idx1-ubyte.gz (60000 examples), t10k-images-idx3-ubyte.gz,
 * t10k-labels-idx1-ubyte.gz (10000). When a .gz file is absent, the same name without .gz
 * (the decompressed file) is used if present. 10 classes; images (n, 28, 28, 1).
 * scripts/fetch_mnist puts the files in data/mnist/.
 * Errors: as sx_ds_images_load (messages name the .gz path when neither file exists);
 * SX_E_ARG also for dir NULL, a bad part, or a directory path longer than 4000 bytes. */
SX_NODISCARD sx_status sx_ds_mnist_load(const char *dir, sx_ds_part part, int64_t limit,
                                        sx_ds_images **out);

/* Where Debian's package dataset-fashion-mnist installs Fashion-MNIST. */
#define SX_DS_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Fashion-MNIST: the same file names and format as MNIST; dir NULL means
 * SX_DS_FASHION_MNIST_DIR. Errors as sx_ds_mnist_load (dir may be NULL). */
SX_NODISCARD sx_status sx_ds_fashion_mnist_load(const char *dir, sx_ds_part part, int64_t limit,
                                                sx_ds_images **out);
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
SX_NODISCARD sx_status sx_ds_images_compact(sx_ds_images *d);

/* True when d holds its images in the packed form (after an sx_ds_images_compact that
 * compacted); false for the raw form and for NULL. */
bool sx_ds_images_compacted(const sx_ds_images *d);

/* The bytes the images take in memory (labels not counted): n*h*w*c for the raw form;
 * offsets[n] + 8*(n + 1), the code and its offsets, for the packed form. 0 for NULL. */
size_t sx_ds_images_bytes(const sx_ds_images *d);

/* The whole set as tensors, for small sets and evaluation. Images: a new (n, h, w, c) tensor,
 * out = pixel * scale (SX_DS_PIXEL_SCALE for [0, 1]). Labels: a new (n) tensor of class
 * indices (one_hot false) or (n, classes) one-hot rows (one_hot true).
 * Errors: SX_E_ARG (d or out NULL, d not a valid set: n, h, w, c < 1, classes < 1 or above
 * 2^31 - 1, not labels (classes <= 256) or labels32 (classes > 256) alone, not exactly one of
 * pixels / packed set, packed without offsets; bad dtype;
 * non-finite scale), SX_E_NOMEM. The labels are not re-checked. */
SX_NODISCARD sx_status sx_ds_images_tensor(const sx_ds_images *d, sx_dtype dtype, double scale,
                                           sx_tensor **out);
SX_NODISCARD sx_status sx_ds_labels_tensor(const sx_ds_images *d, sx_dtype dtype, bool one_hot,
                                           sx_tensor **out);

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
SX_NODISCARD sx_status sx_ds_images_gather_out(const sx_ds_images *d, const int64_t *index,
                                               int64_t count, double scale, sx_tensor *x,
                                               sx_tensor *y);

/* ---------------------------------------------------------------- minibatches */

/* An iterator over minibatches of an sx_ds_images, one epoch after another: an sx_ds_loader over
 * the set as a source (sx_ds_source_images) with the batcher's pixel scale, so its order and bits
 * are the loader's. It keeps one permutation of the example indices (8 bytes per example) and
 * converts each batch from the bytes into the caller's tensors: the data set is never copied. */
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
SX_NODISCARD sx_status sx_ds_batcher_new(const sx_ds_images *d, const sx_ds_batcher_params *p,
                                         sx_ds_batcher **out);

/* Fill the next batch into x and y (shapes and padding as sx_ds_images_gather_out with
 * B = batch_size; either may be NULL) and set *count to the number of examples in it:
 * batch_size, or fewer for the last batch of an epoch when drop_last is false. At the end of an
 * epoch, *count is 0, x and y are left unchanged, and the batcher moves to the next epoch: the
 * following call returns its first batch. Typical loop:
 *     while ((st = sx_ds_batcher_next(b, x, y, &m)) == SX_OK && m > 0) { ...train on x, y... }
 * Errors (nothing changed, the batcher does not move): SX_E_ARG (b or count NULL, invalid
 * tensor), SX_E_SHAPE (x or y not of batch_size rows of the right size), SX_E_RANGE (as for
 * sx_ds_images_gather_out). */
SX_NODISCARD sx_status sx_ds_batcher_next(sx_ds_batcher *b, sx_tensor *x, sx_tensor *y,
                                          int64_t *count);

/* Go to the first batch of epoch `epoch` (>= 0; SX_E_ARG otherwise), e.g. to resume training.
 * The order of an epoch does not depend on the epochs before it. */
SX_NODISCARD sx_status sx_ds_batcher_set_epoch(sx_ds_batcher *b, int64_t epoch);
/* The current epoch (0 first); -1 for NULL. */
int64_t sx_ds_batcher_epoch(const sx_ds_batcher *b);
/* Batches in one epoch: ceil(n / batch_size), or floor with drop_last; -1 for NULL. */
int64_t sx_ds_batcher_batches(const sx_ds_batcher *b);
void sx_ds_batcher_free(sx_ds_batcher *b);

/* ---------------------------------------------------------------- sources of examples */

/* A source: n examples (x, y) with random access by index; x and y are arrays of any element
 * type (sx_ds_type) and rank, the same shape for every example. What a loader
 * (sx_ds_loader_new) batches, whatever the data is: tensors in memory, an image set, a user
 * callback, a CSV file, an image folder, an IDX pair, or a view (subset, split, standardised)
 * over another source. A source is an opaque handle; release it with sx_ds_source_free. A source
 * that wraps a caller's data or another source borrows it (it must outlive the source and stay
 * unchanged); the functions say which. Reading a source (sx_ds_source_get) never allocates. */
typedef struct sx_ds_source sx_ds_source;

/* What one example is. Shapes are of one example (no leading n); rank 0 is a scalar. */
typedef struct sx_ds_spec {
    sx_ds_type x_type;            /* element type of x */
    int x_rank;                   /* 0..SX_MAX_RANK */
    int64_t x_shape[SX_MAX_RANK]; /* dims >= 1; an image is (h, w, c) */
    sx_ds_type y_type;            /* element type of y */
    int y_rank;                   /* 0..SX_MAX_RANK */
    int64_t y_shape[SX_MAX_RANK]; /* dims >= 1 */
    int64_t classes; /* > 0: y holds class indices, integers in [0, classes): one (y_rank 0), or
                        one per position (y_rank > 0: e.g. (h, w) labels of a segmentation); 0:
                        y holds target values (regression) */
    double x_scale;  /* a loader's x value = element * x_scale (finite): 1/255 for u8 images, else
                        1 */
} sx_ds_spec;

/* Elements in x and in y of one example (products of the shapes; 1 for rank 0); -1 for NULL. */
int64_t sx_ds_spec_x_size(const sx_ds_spec *spec);
int64_t sx_ds_spec_y_size(const sx_ds_spec *spec);

/* The number of examples (>= 1); -1 for NULL. */
int64_t sx_ds_source_count(const sx_ds_source *s);
/* The source's spec (valid while the source lives); NULL for NULL. */
const sx_ds_spec *sx_ds_source_spec(const sx_ds_source *s);
/* The name of class k (a CSV label's text, an image folder's class folder), valid while the
 * source lives; NULL when the source has no names, k is out of range, or s is NULL. */
const char *sx_ds_source_class_name(const sx_ds_source *s, int64_t k);
/* The name of feature k (element k of x): a CSV source's header name of that column, valid
 * while the source lives. Views (subset, split, standardised) give their source's names. NULL
 * when the source has no names (a CSV file without a header, any other kind of source), k is
 * out of range, or s is NULL. */
const char *sx_ds_source_x_name(const sx_ds_source *s, int64_t k);
/* The label's name: a CSV source's header name of the label column (classes or target), valid
 * while the source lives; views give their source's. NULL as for sx_ds_source_x_name. */
const char *sx_ds_source_y_name(const sx_ds_source *s);

/* Copy example i into x_row (x_size elements of x_type) and y_row (y_size elements of y_type);
 * either may be NULL (not wanted). Never allocates.
 * Errors: SX_E_ARG (s NULL), SX_E_RANGE (i outside [0, n)), and whatever a callback source's
 * function returns (its message kept). */
SX_NODISCARD sx_status sx_ds_source_get(const sx_ds_source *s, int64_t i, void *x_row, void *y_row);

/* Release a source (and what it owns: a CSV table, a view's index). NULL is fine. Sources built
 * over it must be released first (they borrow it). */
void sx_ds_source_free(sx_ds_source *s);

/* A source over arrays in memory, which it borrows: x holds n*x_size elements of spec->x_type,
 * y n*y_size of spec->y_type, row-major, example after example. spec is copied.
 * Errors (*out NULL): SX_E_ARG (spec, x, y or out NULL; n < 1; a spec that is not valid: an
 * unknown type, a rank outside 0..SX_MAX_RANK, a dim < 1, sizes overflowing, classes < 0, a
 * non-finite x_scale), SX_E_NOMEM.
 * Class labels are checked when a loader reads them (see sx_ds_loader_next). */
SX_NODISCARD sx_status sx_ds_source_memory(const sx_ds_spec *spec, int64_t n, const void *x,
                                           const void *y, sx_ds_source **out);

/* A source over tensors, which it borrows: x is (n, ...) (rank >= 1); classes > 0: y is (n) of
 * class indices (integer tensors, or floats holding integers; checked when read), or (n, ...) of
 * one class index per position (e.g. (n, h, w) pixel labels, (n, T) next tokens); classes == 0:
 * y is (n, ...) targets. x_type and y_type are SX_DS_F32 / SX_DS_F64 / SX_DS_I32 / SX_DS_I64
 * after the tensors' dtypes (token ids: an i32 or i64 x for a network of sx_nn_input_ids);
 * x_scale 1.
 * Errors (*out NULL): SX_E_ARG (x, y or out NULL; x of rank 0; classes < 0), SX_E_SHAPE (x and y
 * with different first dims), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_source_tensors(const sx_tensor *x, const sx_tensor *y, int64_t classes,
                                            sx_ds_source **out);

/* A source over an image set, which it borrows in either form (raw or packed: nothing is
 * copied): x is u8 (h, w, c), x_scale SX_DS_PIXEL_SCALE, y a class index (u8, or i32 for a set
 * of more than 256 classes: labels32), classes d->classes;
 * class names from d->class_names when set.
 * Errors (*out NULL): SX_E_ARG (out NULL, d NULL or not valid: see sx_ds_images_tensor),
 * SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_source_images(const sx_ds_images *d, sx_ds_source **out);

/* A source over two read IDX files, which it borrows: x's first axis is the examples (the rest
 * is one example's shape), y is (n) class indices or (n, ...) of one per position (classes >
 * 0; any integer type) or (n, ...) targets (classes == 0). Elements keep their IDX type; x_scale
 * 1. Errors (*out NULL): SX_E_ARG (x, y or out NULL, classes < 0), SX_E_SHAPE (the first dims
 * differ), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_source_idx(const sx_ds_idx *x, const sx_ds_idx *y, int64_t classes,
                                        sx_ds_source **out);

/* The user's function of a callback source: write example i (0 <= i < n, checked before the
 * call) into x_row (x_size elements of x_type) and y_row (y_size of y_type) and return SX_OK; or
 * return an error status (after sx_error(...) to say why). Either row may be NULL: that part is
 * not wanted. It must not keep the row pointers. */
typedef sx_status (*sx_ds_get_fn)(int64_t i, void *x_row, void *y_row, void *ctx);

/* A source whose examples come from `get` (ctx passed through, borrowed). spec is copied.
 * Errors (*out NULL): SX_E_ARG (spec, get or out NULL, n < 1, spec not valid: see
 * sx_ds_source_memory), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_source_callback(const sx_ds_spec *spec, int64_t n, sx_ds_get_fn get,
                                             void *ctx, sx_ds_source **out);

/* A view of some examples of `s` (borrowed): example r of the view is example index[r] of s.
 * The index is copied (8 bytes an example); no example is. Repeats are allowed.
 * Errors (*out NULL): SX_E_ARG (s, index or out NULL, count < 1), SX_E_RANGE (an index outside
 * [0, n)), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_source_subset(const sx_ds_source *s, const int64_t *index,
                                           int64_t count, sx_ds_source **out);

/* Split `s` (borrowed) into two disjoint views that together hold every example: a seeded
 * permutation of 0..n-1 (Fisher-Yates, the same on every machine) gives its first
 * n - round(n * val_fraction) examples to *train and the rest to *val, each view in the order
 * of the permutation. The same seed gives the same split.
 * Errors (both outputs NULL): SX_E_ARG (a pointer NULL, val_fraction not in (0, 1), or a
 * fraction that leaves either part empty), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_split(const sx_ds_source *s, double val_fraction, uint64_t seed,
                                   sx_ds_source **train, sx_ds_source **val);

/* Per-feature mean and standard deviation of x (element * x_scale, one value per element of
 * x), for standardisation: compute them on the training source only, then apply them to every
 * split with sx_ds_source_standardize. */
typedef struct sx_ds_stats {
    int64_t size; /* x_size of the source they were computed on */
    double *mean; /* (size) */
    double *std;  /* (size) population std (divided by n); a constant feature gets 1 */
} sx_ds_stats;

/* Compute the stats of `s` over all its examples (two passes, in double). channels > 0 pools
 * the elements by channel instead (element k belongs to channel k % channels; size = channels):
 * the per-channel mean/std of an (h, w, c) image source, for sx_ds_augment.
 * On success *out owns the result (sx_ds_stats_free).
 * Errors (*out NULL): SX_E_ARG (s or out NULL, channels < 0, channels > 0 not dividing x_size),
 * SX_E_NOMEM, and any error of sx_ds_source_get. */
SX_NODISCARD sx_status sx_ds_stats_compute(const sx_ds_source *s, int64_t channels,
                                           sx_ds_stats **out);
void sx_ds_stats_free(sx_ds_stats *st);

/* A view of `s` (borrowed) whose x is standardised: (element * x_scale - mean[k]) / std[k], as
 * SX_DS_F64 with x_scale 1; y unchanged. The stats are copied. It keeps one scratch row, so two
 * threads must not read it at once.
 * Errors (*out NULL): SX_E_ARG (a pointer NULL, st->size != x_size, a std that is not > 0 or a
 * mean that is not finite), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_source_standardize(const sx_ds_source *s, const sx_ds_stats *st,
                                                sx_ds_source **out);
/* When s is a view made by sx_ds_source_standardize: true, its parent into *parent and its
 * mean and std (x_size values each, valid while s lives) into *mean and *std (each pointer may
 * be NULL). Otherwise (NULL too) false, nothing written. A network trained on such a view
 * (sx_nn_fit) takes the statistics into its own preprocessing and reads the parent. */
bool sx_ds_source_standardization(const sx_ds_source *s, const sx_ds_source **parent,
                                  const double **mean, const double **std);

/* ---------------------------------------------------------------- NumPy .npy files */

/* NumPy .npy files (datasets/npy.c): format versions 1.0, 2.0 and 3.0, C order, little- or
 * big-endian (elements are swapped to the host's order on reading), of these element types: */
typedef enum {
    SX_DS_NPY_BOOL = 0, /* '|b1', held as bytes 0 or 1 (any non-zero byte reads as 1) */
    SX_DS_NPY_I8,       /* 'i1' */
    SX_DS_NPY_U8,       /* 'u1' */
    SX_DS_NPY_I16,      /* 'i2' */
    SX_DS_NPY_U16,      /* 'u2' */
    SX_DS_NPY_I32,      /* 'i4' */
    SX_DS_NPY_U32,      /* 'u4' */
    SX_DS_NPY_I64,      /* 'i8' */
    SX_DS_NPY_U64,      /* 'u8' */
    SX_DS_NPY_F32,      /* 'f4' */
    SX_DS_NPY_F64       /* 'f8' */
} sx_ds_npy_type;

/* "bool", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f32", "f64"; "?" otherwise. */
const char *sx_ds_npy_type_name(sx_ds_npy_type t);
/* Bytes of one element (1, 1, 1, 2, 2, 4, 4, 8, 8, 4, 8); 0 for a value that is not a type. */
size_t sx_ds_npy_type_size(sx_ds_npy_type t);

/* The contents of a .npy file: its element type, shape and elements in native byte order. */
typedef struct sx_ds_npy {
    sx_ds_npy_type type;
    int rank;                  /* 0..SX_MAX_RANK (0: a scalar, one element) */
    int64_t dims[SX_MAX_RANK]; /* dims[i] >= 0 for i < rank; 1 past rank */
    int64_t count;             /* elements: the product of dims (0 when a dim is 0) */
    void *data;                /* count elements of `type`, row-major, native order; owned */
} sx_ds_npy;

/* Read the .npy file at `path`. The prefix, the header dictionary (descr, fortran_order,
 * shape: each exactly once, in any order) and the payload's size against the file's are checked
 * before the payload is allocated; the file must end right after the payload.
 * On success *out owns the array (sx_ds_npy_free); on failure *out is NULL, nothing leaked.
 * Errors:
 *   SX_E_ARG     path or out is NULL
 *   SX_E_IO      "PATH: cannot open: <reason>", "PATH: is a directory", a read error
 *   SX_E_FORMAT  "PATH: <problem>": empty file; bad magic; a version other than 1.0, 2.0, 3.0;
 *                a header longer than the file or than 1 MiB; a malformed header dictionary
 *                (the message quotes it); a missing, repeated or unknown key; a Fortran-order
 *                array; an object array; a structured (list) descr; another element type
 *                (float16, complex, strings, dates); a rank above 8; dimensions whose bytes
 *                overflow 64 bits; a payload shorter than the header announces ("truncated");
 *                trailing bytes after it
 *   SX_E_NOMEM   an allocation failed */
SX_NODISCARD sx_status sx_ds_npy_read_raw(const char *path, sx_ds_npy **out);
/* The same from `len` bytes at `buf` (not kept); `name` (NULL: "<memory>") is used in messages
 * in place of a path. Errors as sx_ds_npy_read_raw's (SX_E_ARG also for buf NULL with len > 0),
 * never SX_E_IO. */
SX_NODISCARD sx_status sx_ds_npy_parse(const void *buf, size_t len, const char *name,
                                       sx_ds_npy **out);
void sx_ds_npy_free(sx_ds_npy *a); /* NULL is fine */
/* Element i (0 <= i < count, not checked) as a double (i64 and u64 beyond 2^53 rounded). */
double sx_ds_npy_get(const sx_ds_npy *a, int64_t i);

/* A new tensor of `dtype` with the array's shape: out[i] = (dtype)(element[i] * scale), the
 * product in double (f32 elements with scale 1 are copied exactly).
 * Errors (*out NULL): SX_E_ARG (a or out NULL, an invalid array, a bad dtype, a non-finite
 * scale), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_npy_to_tensor(const sx_ds_npy *a, sx_dtype dtype, double scale,
                                           sx_tensor **out);
/* sx_ds_npy_read_raw then sx_ds_npy_to_tensor with scale 1. Errors: theirs. */
SX_NODISCARD sx_status sx_ds_npy_read(const char *path, sx_dtype dtype, sx_tensor **out);

/* Write `data` (the product of shape elements of `type`, row-major, native order; bool as bytes
 * 0 or 1) as a version 1.0 .npy file in the host's byte order, C order, the header padded to 64
 * bytes as NumPy pads it. The bytes go to a new file next to `path` (path.tmpXXXXXX), which is
 * synced and renamed over `path`: on failure `path` is left as it was and the temporary file
 * removed. rank 0 writes a scalar (shape may then be NULL).
 * Errors: SX_E_ARG (path or data NULL, an unknown type, a shape that sx_shape_check refuses),
 * SX_E_IO ("PATH: cannot write: <reason>"), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_npy_write(const char *path, sx_ds_npy_type type, int rank,
                                       const int64_t *shape, const void *data);
/* An f32 or f64 tensor as '<f4' or '<f8' (on a little-endian host). Errors: as sx_ds_npy_write,
 * SX_E_ARG also for t NULL. */
SX_NODISCARD sx_status sx_ds_npy_write_tensor(const char *path, const sx_tensor *t);

/* A source over two .npy files, read now and owned by the source: x's first axis is the
 * examples (the rest one example's shape), y is (n) class indices or (n, ...) of one per
 * position (classes > 0; any integer type) or (n, ...) targets (classes == 0). Elements keep their
 * type where sx_ds_type has it (bool as u8); u16 becomes i32, and u32, i64, u64 become i32 when
 * every value fits, else f64; x_scale 1. Errors (*out NULL): SX_E_ARG (a NULL argument, classes <
 * 0), those of sx_ds_npy_read_raw for either file, SX_E_SHAPE (a rank-0 array, first dims that
 * differ or are 0), SX_E_RANGE (an integer beyond 2^53 in magnitude, which no data set type holds
 * exactly), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_source_npy(const char *x_path, const char *y_path, int64_t classes,
                                        sx_ds_source **out);

/* ---------------------------------------------------------------- named tensors, checkpoints */

/* A set of named tensors with string metadata (datasets/tensors.c): what a checkpoint file
 * holds. The set owns its tensors (f32 or f64), names and metadata; sx_ds_tensors_free releases
 * all of it. Names and metadata keys are unique, non-empty, valid UTF-8 C strings. The order is
 * the order of adding (a set read from a file: the file's order, see each reader); writers keep
 * it. Pointers returned by the accessors stay valid until the set is freed; a tensor may be
 * changed in place through sx_ds_tensors_at/_get (its values, not its shape or dtype). Readers
 * take the file as hostile: every field is checked before anything of the size it announces is
 * allocated. */
typedef struct sx_ds_tensors sx_ds_tensors;

/* A new, empty set. Errors (*out NULL): SX_E_ARG (out NULL), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_tensors_new(sx_ds_tensors **out);
/* Add a copy of `t` (f32 or f64, any valid shape) under `name`, at the end of the order. `t` and
 * `name` are not kept. On failure the set is unchanged.
 * Errors: SX_E_ARG (set, name or t NULL; t not a valid f32/f64 tensor; name empty, not valid
 * UTF-8, or "__metadata__", the key safetensors reserves: "sx_ds_tensors_add: name '...' ...";
 * a name already in the set: "sx_ds_tensors_add: a tensor named 'x' is already in the set"),
 * SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_tensors_add(sx_ds_tensors *set, const char *name, const sx_tensor *t);
/* Tensors in the set; 0 for NULL. */
int64_t sx_ds_tensors_count(const sx_ds_tensors *set);
/* The name and the tensor at position i (0 <= i < count); NULL for NULL or i out of range. */
const char *sx_ds_tensors_name(const sx_ds_tensors *set, int64_t i);
sx_tensor *sx_ds_tensors_at(const sx_ds_tensors *set, int64_t i);
/* The tensor named `name`, or NULL when there is none (or set or name is NULL). Constant time
 * (a hash index). */
sx_tensor *sx_ds_tensors_get(const sx_ds_tensors *set, const char *name);
/* Set metadata `key` to `value` (both copied; an existing key's value is replaced in place,
 * a new key goes at the end of the metadata order). On failure the set is unchanged.
 * Errors: SX_E_ARG (a NULL argument; key empty; key or value not valid UTF-8), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_tensors_meta_set(sx_ds_tensors *set, const char *key,
                                              const char *value);
/* The value of `key`, or NULL when absent (or set or key is NULL). */
const char *sx_ds_tensors_meta_get(const sx_ds_tensors *set, const char *key);
/* Metadata entries, and the key at position i (NULL out of range); 0 / NULL for NULL. */
int64_t sx_ds_tensors_meta_count(const sx_ds_tensors *set);
const char *sx_ds_tensors_meta_key(const sx_ds_tensors *set, int64_t i);
void sx_ds_tensors_free(sx_ds_tensors *set); /* NULL is fine */

/* safetensors files (datasets/safetensors.c), the weights format of the Hugging Face ecosystem:
 * an 8-byte little-endian header length N, N bytes of a JSON object
 *   {"__metadata__": {"key": "value", ...},
 *    "NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]}, ...}
 * (the metadata optional; trailing spaces allowed), then the data region: each tensor's
 * elements, row-major, little-endian, at [BEGIN, END) counted from the region's start.
 *
 * Read the file at `path` into a new set. F32 and F64 tensors are read as they are; F16 and BF16
 * are converted to f32 (exactly: every half and bfloat16 value is an f32 value; infinities and
 * NaN payloads kept). The set holds the tensors in the order of their data in the file (for a
 * file written by sx_ds_safetensors_write: the written set's order) and the metadata in the
 * header's order. The header (at most 100,000,000 bytes, as Hugging Face's reader) is parsed and
 * every tensor checked before any tensor is allocated; then the data is read in one pass.
 * On success *out owns the set (sx_ds_tensors_free); on failure *out is NULL, nothing leaked.
 * Errors:
 *   SX_E_ARG     path or out NULL
 *   SX_E_IO      "PATH: cannot open: <reason>", "PATH: is a directory", a read error
 *   SX_E_FORMAT  "PATH: <problem>": empty file; shorter than 8 bytes; a header length of 0,
 *                above 100,000,000, or beyond the end of the file; malformed JSON ("bad header:
 *                <what> at byte K of the header": not an object, a missing ',' ':' '}' ']', a
 *                value of the wrong kind (a nested object or array where a string or number is
 *                wanted, a string metadata value wanted), an unterminated string, a control
 *                character or invalid escape or invalid UTF-8 or a \u0000 in a string, a number
 *                with a sign, fraction, exponent or leading zero, or above 2^63 - 1, text after
 *                the object other than spaces); "__metadata__" twice, or a metadata key twice; a
 *                tensor name twice ("tensor 'x' appears twice"); an empty tensor name; a tensor
 *                entry with an unknown key, a key twice, or without dtype, shape or
 *                data_offsets; data_offsets not two numbers; a rank above 8; a shape whose
 *                element count or bytes overflow 64 bits; an unknown dtype ("tensor 'x': unknown
 *                dtype 'Q7'"); END < BEGIN, or END - BEGIN not the shape's bytes ("tensor 'x':
 *                data_offsets [0, 20] hold 20 bytes but shape (2,3) of F32 needs 24"); offsets
 *                that do not tile the data region exactly (a gap, an overlap, a tensor past the
 *                end, or bytes after the last tensor: "tensor 'x' begins at byte 28 of the data
 *                region, want 24 (...)"); a data region longer or shorter than the offsets say
 *   SX_E_UNSUPPORTED  a tensor of a dtype strix does not hold: integers, BOOL, F8_*, and the
 *                other dtypes safetensors names ("PATH: tensor 'ids' has dtype I64: strix reads
 *                F32, F64, F16 and BF16 only")
 *   SX_E_NOMEM   an allocation failed */
SX_NODISCARD sx_status sx_ds_safetensors_read(const char *path, sx_ds_tensors **out);
/* The same from `len` bytes at `buf` (not kept; the tensors are copies); `name` (NULL:
 * "<memory>") is used in messages in place of a path. Errors as sx_ds_safetensors_read's
 * (SX_E_ARG also for buf NULL with len > 0), never SX_E_IO. */
SX_NODISCARD sx_status sx_ds_safetensors_parse(const void *buf, size_t len, const char *name,
                                               sx_ds_tensors **out);
/* Write the set as a safetensors file: "__metadata__" first (when the set has metadata; its
 * entries in the set's metadata order), then the tensors in the set's order, each as F32 or F64
 * (its dtype), the data in the same order with no gaps; the header padded with spaces to a
 * multiple of 8 bytes, as Hugging Face's writer pads it (so the data region starts 8-aligned).
 * Strings are written as JSON (", \ and control characters escaped, other UTF-8 as it is). The
 * bytes go to a new file next to `path` (path.tmpXXXXXX), synced and renamed over `path`: on
 * failure `path` is left as it was and the temporary file removed. An empty set is a valid file.
 * Errors: SX_E_ARG (path or set NULL), SX_E_IO ("PATH: cannot write: <reason>"), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_safetensors_write(const char *path, const sx_ds_tensors *set);

/* llm.c's GPT-2 checkpoint (datasets/llmc.c; karpathy/llm.c, train_gpt2.c and train_gpt2.py's
 * write_model, e.g. gpt2_124M.bin): a header of 256 little-endian int32 (magic 20240326, version
 * 3 for f32 parameters or 5 for bfloat16, max_seq_len maxT, vocab_size V, num_layers L,
 * num_heads NH, channels C, padded_vocab_size Vp; ints 8..255 are written as zeros and not
 * read), then every parameter as one
 * array per kind, the L layers' arrays one after another:
 *   wte (Vp, C), wpe (maxT, C), ln1w (L, C), ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C),
 *   attprojw (L, C, C), attprojb (L, C), ln2w (L, C), ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C),
 *   fcprojw (L, C, 4C), fcprojb (L, C), lnfw (C), lnfb (C).
 * In a set, these are f32 tensors under the names of the PyTorch model train_gpt2.py writes the
 * file from (nanoGPT's names), whose layouts are the file's ((out, in) weights, as nn.Linear):
 *   transformer.wte.weight (Vp, C)          rows V..Vp-1 are llm.c's padding
 *   transformer.wpe.weight (maxT, C)
 *   transformer.h.<l>.ln_1.weight (C)       transformer.h.<l>.ln_1.bias (C)
 *   transformer.h.<l>.attn.c_attn.weight (3C, C)   Q, K, V rows in that order
 *   transformer.h.<l>.attn.c_attn.bias (3C)
 *   transformer.h.<l>.attn.c_proj.weight (C, C)    transformer.h.<l>.attn.c_proj.bias (C)
 *   transformer.h.<l>.ln_2.weight (C)       transformer.h.<l>.ln_2.bias (C)
 *   transformer.h.<l>.mlp.c_fc.weight (4C, C)      transformer.h.<l>.mlp.c_fc.bias (4C)
 *   transformer.h.<l>.mlp.c_proj.weight (C, 4C)    transformer.h.<l>.mlp.c_proj.bias (C)
 *   transformer.ln_f.weight (C)             transformer.ln_f.bias (C)
 * for l = 0..L-1; the set's order is the file's (wte, wpe, the L ln_1.weight, the L ln_1.bias,
 * ..., ln_f.bias). The LM head is wte (tied) and has no tensor. The config is metadata under
 * llm.c's names, as decimal strings: "max_seq_len", "vocab_size", "padded_vocab_size",
 * "num_layers", "num_heads", "channels". Hugging Face's own GPT-2 files (transformers'
 * GPT2Model / GPT2LMHeadModel) use the same names without "transformer." or with it, but store
 * the four c_attn, attn.c_proj, c_fc, mlp.c_proj weights transposed (Conv1D's (in, out)): convert
 * such a set with sx_ds_llmc_from_hf; do not use it as it is (attn.c_proj.weight is square, so a
 * shape check cannot tell the layouts apart).
 *
 * Read the checkpoint at `path` into a new set (version 5's bfloat16 converted to f32 exactly).
 * The header is checked and the parameters' total size compared with the file's before anything
 * is allocated. On success *out owns the set; on failure *out is NULL, nothing leaked.
 * Errors:
 *   SX_E_ARG     path or out NULL
 *   SX_E_IO      "PATH: cannot open: <reason>", "PATH: is a directory", a read error
 *   SX_E_FORMAT  "PATH: <problem>": empty file; a header shorter than 1024 bytes; bad magic;
 *                a version other than 3 or 5; a config value <= 0 ("channels is 0"); vocab_size
 *                above padded_vocab_size; channels not a multiple of num_heads; parameter
 *                counts that overflow 64 bits; a file whose size is not the header plus the
 *                parameters ("the header announces 124475904 f32 parameters (497903616 bytes)
 *                but the file has 1000 bytes after the header"), checked before allocating
 *   SX_E_NOMEM   an allocation failed */
SX_NODISCARD sx_status sx_ds_llmc_read(const char *path, sx_ds_tensors **out);
/* The same from `len` bytes at `buf` (not kept); `name` (NULL: "<memory>") in messages. Errors
 * as sx_ds_llmc_read's (SX_E_ARG also for buf NULL with len > 0), never SX_E_IO. */
SX_NODISCARD sx_status sx_ds_llmc_parse(const void *buf, size_t len, const char *name,
                                        sx_ds_tensors **out);
/* Write a set holding the names above as an llm.c checkpoint of version 3 (f32), the config
 * from the six metadata keys (each a decimal integer in 1..2^31-1, V <= Vp, C a multiple of NH).
 * transformer.wte.weight may be (Vp, C) or (V, C): the padding rows V..Vp-1 are then written as
 * zeros. f64 tensors are rounded to f32. Tensors of other names (lm_head.weight, attention mask
 * buffers) are not written. The file is written to a temporary name and renamed, as
 * sx_ds_safetensors_write's.
 * Errors: SX_E_ARG (path or set NULL; a metadata key missing or not an integer in range:
 * "sx_ds_llmc_write: metadata 'channels' is 'x', want an integer in 1..2147483647"; V > Vp; C not
 * a multiple of NH; a tensor missing: "sx_ds_llmc_write: no tensor
 * 'transformer.h.1.mlp.c_fc.bias'"), SX_E_SHAPE (a tensor of another shape: "sx_ds_llmc_write:
 * tensor 'transformer.wpe.weight' is (4,8), want (5,8)"), SX_E_IO ("PATH: cannot write:
 * <reason>"), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_llmc_write(const char *path, const sx_ds_tensors *set);
/* A new set in the layout above from a set holding Hugging Face's GPT-2 tensors (a
 * model.safetensors of transformers' GPT2Model or GPT2LMHeadModel, read by
 * sx_ds_safetensors_read): "wte.weight" (V, C), "wpe.weight" (maxT, C), "h.<l>.ln_1.weight",
 * "h.<l>.attn.c_attn.weight" (C, 3C), ..., "ln_f.bias", each name with or without the prefix
 * "transformer." (whichever "wte.weight" has). The four Conv1D weights are transposed to
 * (out, in); the layers are h.0, h.1, ... as long as "h.<l>.ln_1.weight" exists; V, C and maxT
 * come from wte and wpe, num_heads (not in the weights: config.json's n_head) from the argument;
 * wte is padded with zero rows to padded_vocab_size, V rounded up to a multiple of 128, as
 * llm.c's train_gpt2.py pads it. f64 tensors are rounded to f32. Other tensors (lm_head.weight,
 * the attn.bias and attn.masked_bias buffers) are left out. `hf` is not changed.
 * Errors (*out NULL): SX_E_ARG (hf or out NULL; num_heads < 1 or not dividing C; no wte.weight;
 * no layer; a tensor missing: "sx_ds_llmc_from_hf: no tensor 'h.1.mlp.c_fc.bias'"), SX_E_SHAPE
 * ("sx_ds_llmc_from_hf: tensor 'h.0.attn.c_attn.weight' is (24,8), want (8,24) (Hugging Face's
 * (in, out))"; wte or wpe not of rank 2, or their C differ), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_llmc_from_hf(const sx_ds_tensors *hf, int64_t num_heads,
                                          sx_ds_tensors **out);

/* ---------------------------------------------------------------- CSV files */

/* How a CSV label column becomes y. */
typedef enum {
    SX_DS_LABEL_FIRST_SEEN = 0, /* classes: texts numbered in the order they first appear (a
                                   shuffled copy or another file of the same classes may get
                                   another numbering) */
    SX_DS_LABEL_SORTED = 1,     /* classes (the default): numbered in sorted order (numeric when
                                   every label is a number, else byte order: "10" after "9" only
                                   then), the same for any file of the same classes */
    SX_DS_LABEL_TARGET = 2      /* a number: a regression target (y f64, classes 0) */
} sx_ds_label_kind;

typedef struct sx_ds_csv_params {
    bool header;                /* the first line read holds the column names */
    int64_t skip_lines;         /* >= 0 lines (LF-terminated) skipped before anything is read */
    char delimiter;             /* field separator, not '"', CR or LF */
    int64_t label_column;       /* index of the label column; negative counts from the end */
    const char *label_name;     /* not NULL: the label column is the one with this header name */
    sx_ds_label_kind label;     /* classes or a target */
    const char *const *classes; /* NULL, or (n_classes) distinct class texts (borrowed during
                                   the call): label text classes[k] is class k, whatever the
                                   file's order; a label not in the list is an error; listed
                                   classes absent from the file are fine. Overrides label's
                                   numbering (FIRST_SEEN / SORTED); not for a TARGET */
    int64_t n_classes;          /* the list's length; 0 with classes NULL */
} sx_ds_csv_params;

/* header true, skip_lines 0, delimiter ',', label_column -1 (the last), label_name NULL,
 * SX_DS_LABEL_SORTED, classes NULL and n_classes 0. */
sx_ds_csv_params sx_ds_csv_params_default(void);

/* Read a CSV file (RFC 4180 through libcsv, strict: quoted fields with "" for a quote and
 * embedded delimiters, CR, LF; LF, CRLF or CR line ends; blank lines skipped; spaces around
 * unquoted fields trimmed; a UTF-8 byte order mark at the start ignored) into a source that owns
 * the table: x f64 of (columns - 1) features, every column but the label, in file order; y an
 * i32 class index (classes = the distinct labels numbered as p->label says, or the n_classes of
 * p->classes; names kept: sx_ds_source_class_name) or an f64 target. With a header, the columns'
 * names are kept: sx_ds_source_x_name, sx_ds_source_y_name.
 *
 * A test set or new data is read with the numbering of the training file (or of the model) by
 * giving its class list:
 *     int64_t k = sx_ds_source_spec(train)->classes;
 *     const char **names = malloc(k * sizeof *names);
 *     for (int64_t i = 0; i < k; i++)
 *         names[i] = sx_ds_source_class_name(train, i);
 *     p.classes = names, p.n_classes = k;  (then sx_ds_csv_load(test_path, &p, &test); free)
 *
 * Line numbers in messages count LF from 1, skipped lines included; columns count from 1 and
 * are named when there is a header. On success *out owns the table (sx_ds_source_free); on
 * failure *out is NULL, nothing leaked. Errors:
 *   SX_E_ARG     path or out NULL; p invalid (skip_lines < 0, a bad delimiter, label_name
 *                without a header, an unknown label kind, classes NULL with n_classes != 0 or
 *                set with n_classes < 1, a NULL or repeated class text, classes for a TARGET)
 *   SX_E_IO      "PATH: cannot open: <reason>", or a read error
 *   SX_E_FORMAT  "PATH: <problem>": no data rows (an empty file, or only a header);
 *                "line L: K fields, want M (as line L0)" (ragged rows); "line L, column C
 *                ("name"): missing value" (an empty field); "... not a number: 'text'" (a
 *                feature or a target that is not a finite number); "... a NUL byte in the
 *                field" (any field, header included: it would cut the text short); "... class
 *                'zebra' is not one of the 3 classes given (setosa, versicolor, virginica)" (a
 *                label outside p->classes); "line L: malformed quoting" (a quote inside an
 *                unquoted field, text after a closing quote, an unterminated quote); the label
 *                column outside the row ("label column 7 but rows have 5 fields"); no column
 *                named label_name in the header; only one column (no features)
 *   SX_E_RANGE   more than 2^31 - 1 classes
 *   SX_E_NOMEM   an allocation failed (the parser's buffer included) */
SX_NODISCARD sx_status sx_ds_csv_load(const char *path, const sx_ds_csv_params *p,
                                      sx_ds_source **out);

/* Read the features of a CSV file's rows, for prediction: a new (n, n_features) f64 tensor, one
 * row per data row in file order. The file is read as sx_ds_csv_load reads it (p NULL: the
 * defaults; p->label, classes and n_classes are not used). The columns:
 *   - p->header true and features not NULL: features[k] (n_features header names) is the
 *     column with that name (the first, if repeated): any order, any other column (an id, the
 *     label) ignored and not read;
 *   - otherwise (no header, or features NULL): every column, in file order, when the file has
 *     n_features columns; with n_features + 1 columns, every one but the label column of p
 *     (label_name, or label_column: negative counts from the end), so a file with or without
 *     its label column reads the same.
 * On success *out is the caller's (sx_tensor_free); on failure *out is NULL, nothing leaked.
 * Errors:
 *   SX_E_ARG     path or out NULL; n_features < 1; a NULL features[k]; p invalid (as for
 *                sx_ds_csv_load)
 *   SX_E_IO      "PATH: cannot open: <reason>", or a read error
 *   SX_E_FORMAT  "PATH: <problem>": no column named 'name' (feature k) in the header; "line L:
 *                K columns, want N (the features) or N + 1 (and the label)"; "line L: N + 1
 *                columns for N features, and no label column to leave out" (label_name not in
 *                the header, label_column outside the row); no data rows; ragged rows,
 *                malformed quoting or a NUL byte anywhere, a missing value or not a number in
 *                a column read: named by line and column as sx_ds_csv_load names them
 *   SX_E_NOMEM   an allocation failed */
SX_NODISCARD sx_status sx_ds_csv_read_x(const char *path, const sx_ds_csv_params *p,
                                        const char *const *features, int64_t n_features,
                                        sx_tensor **out);

/* ---------------------------------------------------------------- image files */

typedef enum {
    SX_DS_RESIZE_BILINEAR = 0, /* half-pixel centres, no anti-aliasing (OpenCV's INTER_LINEAR);
                                  rounded to the nearest byte */
    SX_DS_RESIZE_NEAREST = 1   /* the source pixel whose centre is nearest (floor) */
} sx_ds_resize;

/* The largest decoded image accepted, in bytes (width * height * channels before resizing). */
#define SX_DS_IMAGE_MAX_BYTES ((int64_t)1 << 28)

/* Decode one image held in memory and resize it into out, h*w*c bytes (h, w, c) row-major. The
 * content decides the format: PNG (signature; libpng), JPEG (SOI marker; libjpeg-turbo), and
 * through stb_image: binary PNM ("P5" grey PGM, "P6" colour PPM; maxval 1 to 255, scaled to
 * 0..255), BMP ("BM"; uncompressed or bit fields), GIF ("GIF8"; the first frame) and, for
 * content with none of these signatures, TGA (which has none: taken when stb_image's checks of
 * a TGA header pass).
 * c = 1 gives grayscale (RGB converted with libpng's / libjpeg's / stb_image's own weights;
 * grey stays exact), c = 3 RGB (grayscale replicated); alpha is dropped, 16-bit PNG samples
 * are reduced to 8, palettes expanded. `name` is used in messages (NULL: "<memory>"). The
 * buffer is not kept. out is unchanged on error. The header's size, width * height * channels
 * (c; or the file's own channels when more, 4 for a GIF, as stb_image decodes them), is checked
 * against SX_DS_IMAGE_MAX_BYTES before anything is decoded; so is, for PNM, BMP and TGA, the
 * file's length against the bytes the header announces.
 * Memory: libpng's and stb_image's allocations go through the allocator hook; libjpeg-turbo
 * allocates its own with malloc.
 * Errors: SX_E_ARG (buf or out NULL, h, w < 1, c not 1 or 3, a bad resize mode), SX_E_FORMAT
 * ("NAME: not a PNG, JPEG, PNM, BMP, GIF or TGA file"; "NAME: corrupt PNG: <libpng's message>";
 * "NAME: corrupt JPEG: <libjpeg's message>" (libjpeg's warnings, e.g. a truncated stream,
 * count as errors); "NAME: corrupt PNM|BMP|GIF|TGA: <stb_image's reason>", or "...: truncated
 * file" when the file ends before the image does; "NAME: PNM with maxval 65535 (supported: 1
 * to 255, 8-bit samples)" (stb_image 2.27 misreads 16-bit samples); "NAME: image of HxWxC is
 * larger than N bytes"), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_image_decode(const void *buf, size_t len, const char *name, int64_t h,
                                          int64_t w, int64_t c, sx_ds_resize mode, uint8_t *out);

/* What an image folder load read and left (sx_ds_image_folder_params.report). Hidden entries
 * (names starting with '.') are neither read nor counted. */
typedef struct sx_ds_image_folder_report {
    int64_t files;           /* entries looked at: images + skipped (class folders not counted) */
    int64_t images;          /* files read: the set's n */
    int64_t skipped;         /* entries not read: in root, anything but a folder; in a class
                                folder, a name without an image extension, a sub-folder, a
                                dangling link... */
    char first_skipped[256]; /* the path of the first one (root's, then the classes' in order;
                                names sorted), cut to fit; "" when none */
} sx_ds_image_folder_report;

typedef struct sx_ds_image_folder_params {
    int64_t h, w;        /* the size every image is resized to, >= 1 */
    int64_t c;           /* 1 (grayscale) or 3 (RGB) */
    sx_ds_resize resize; /* how */
    bool strict;         /* false: entries that are not images are skipped and counted; true:
                            any such entry is an error (SX_E_FORMAT naming it) */
    sx_ds_image_folder_report *report; /* NULL, or filled by a successful load (zeroed when the
                                          load fails) */
} sx_ds_image_folder_params;

/* h = w = 32, c = 3, bilinear, not strict, no report. */
sx_ds_image_folder_params sx_ds_image_folder_params_default(void);

/* Load root/<class>/<file> for every class folder (sorted by name, byte order; names starting
 * with '.' skipped) and every file in it named *.png, *.jpg, *.jpeg, *.pgm, *.ppm, *.pnm, *.bmp,
 * *.gif or *.tga (any case; sorted by name): class k is the k-th folder. Other entries (files in
 * root, files with other names, sub-folders of a class folder) are skipped and counted in
 * p->report, or refused when p->strict; hidden ones (a leading '.') are ignored either way. The
 * images are decoded as sx_ds_image_decode does (the content, not the name, decides the
 * format), resized to (h, w, c) and kept as bytes in a new raw set (sx_ds_images_compact may
 * pack it), class_names set to the folder names, labels as bytes (up to 256 classes) or as
 * labels32 (more: any number of class folders).
 * On success *out owns the set (sx_ds_images_free); on failure *out is NULL, nothing leaked.
 * Errors:
 *   SX_E_ARG     root or out NULL; p invalid (h, w < 1, c not 1 or 3, a bad resize mode)
 *   SX_E_IO      "ROOT: cannot open: <reason>" (root or a class folder), a file unreadable
 *   SX_E_FORMAT  "ROOT: no class folders"; "ROOT/CLASS: no image files (.png, .jpg, ...)"; a
 *                file that does not decode (the message names it: see sx_ds_image_decode);
 *                strict: "PATH: not an image file name (.png, ...) (strict: every entry must
 *                be read)", or "not a class folder", "not a regular file"
 *   SX_E_RANGE   more than 2^31 - 1 classes, or images whose bytes overflow
 *   SX_E_NOMEM   an allocation failed */
SX_NODISCARD sx_status sx_ds_image_folder_load(const char *root, const sx_ds_image_folder_params *p,
                                               sx_ds_images **out);

/* ---------------------------------------------------------------- batches over any source */

/* Augmentation of image sources (x of rank 3: (h, w, c)), done by a loader as it fills a batch:
 * for each example, in this order, on values v = element * x_scale:
 *   random crop: the image padded with crop_pad zeros on every side, an (h, w) window at a
 *     random offset (dy, dx) in [0, 2*crop_pad]^2: out(y, x) = in(y + dy - pad, x + dx - pad),
 *     0 outside the image;
 *   horizontal flip with probability 1/2: out(y, x) = in(y, w - 1 - x);
 *   normalisation when mean is not NULL: (v - mean[ch]) / std[ch], per channel.
 * The random choices of example i in epoch e depend only on (seed, e, i): the same seed gives
 * the same batches bit for bit, whatever the batch size. All zero: no augmentation. */
typedef struct sx_ds_augment {
    int64_t crop_pad;   /* >= 0; 0 no crop */
    bool flip;          /* random horizontal flip */
    const double *mean; /* NULL, or (c) per-channel means (copied by sx_ds_loader_new) */
    const double *std;  /* (c) per-channel stds > 0, with mean (copied) */
} sx_ds_augment;

/* An iterator over minibatches of any source (sx_ds_batcher is one over an image set). */
typedef struct sx_ds_loader sx_ds_loader;

typedef struct sx_ds_loader_params {
    int64_t batch_size;    /* >= 1 */
    bool shuffle;          /* a new random order every epoch (the order sx_ds_batcher uses) */
    uint64_t seed;         /* order and augmentation depend only on (seed, epoch) */
    bool drop_last;        /* skip a last batch smaller than batch_size */
    sx_ds_augment augment; /* zero: none */
    bool raw;              /* x as the source's elements, without its x_scale (for a network
                              that scales its input itself); false */
} sx_ds_loader_params;

/* batch_size 64, shuffle true, seed 0, drop_last false, no augmentation. */
sx_ds_loader_params sx_ds_loader_params_default(void);

/* A loader over `s` (borrowed: it must outlive the loader). p NULL means the defaults. It
 * allocates its permutation (8 bytes an example) and one scratch example now, and nothing per
 * batch. It starts at the first batch of epoch 0.
 * No prefetch thread: a batch is filled when asked, on the caller's thread. Filling costs about
 * one conversion per element (MNIST, batch 100: 78,400 byte -> float, 23 microseconds measured)
 * against a training step of millions of multiply-adds that already keeps both cores busy
 * (~125 ms for mnist_train's network); a worker would take a core from the step to save 0.02%
 * of it (sx_nn_fit's header says more). A callback source that reads files may prefetch
 * itself.
 * Errors (*out NULL): SX_E_ARG (s or out NULL, batch_size < 1, drop_last with batch_size > n,
 * crop_pad < 0, augmentation on a source whose x is not of rank 3, mean without std or a std
 * <= 0 or a non-finite mean), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_ds_loader_new(const sx_ds_source *s, const sx_ds_loader_params *p,
                                        sx_ds_loader **out);

/* Fill the next batch into x and y (either may be NULL) and set *count to its examples
 * (batch_size, or fewer for a last partial batch; 0 at the end of an epoch, as for
 * sx_ds_batcher_next: x and y unchanged, the loader moves to the next epoch).
 * x: f32 or f64, shape[0] = batch_size and batch_size * x_size elements: (B, ...x_shape) or
 *   flat (B, x_size); values element * x_scale (element with p.raw), augmented when asked.
 * y: f32 or f64, shape[0] = batch_size. A class source: batch_size * y_size elements (e.g. (B)
 *   for one label, (B, h, w) for per-pixel labels) get the class indices; (B, ..., classes) of
 *   batch_size * y_size * classes elements (rank >= 2) get one-hot rows, one per position (e.g.
 *   (B, classes), (B, h, w, classes)). A target source: batch_size * y_size elements, the values.
 * Rows count..B-1 are padding: zeros in x, -1 in an index y, zero rows in a one-hot or target y.
 * Errors (the loader does not move; x and y may be partly written): SX_E_ARG (l or count NULL,
 * an invalid tensor or dtype), SX_E_SHAPE (x or y of another shape), SX_E_RANGE (a class label
 * that is not an integer in [0, classes): "SOURCE: example 12 has label 7.5, not a class in
 * 0..2"), and any error of the source's get. */
SX_NODISCARD sx_status sx_ds_loader_next(sx_ds_loader *l, sx_tensor *x, sx_tensor *y,
                                         int64_t *count);

/* Go to the first batch of epoch `epoch` (>= 0; SX_E_ARG otherwise, or for l NULL). */
SX_NODISCARD sx_status sx_ds_loader_set_epoch(sx_ds_loader *l, int64_t epoch);
/* The current epoch; -1 for NULL. */
int64_t sx_ds_loader_epoch(const sx_ds_loader *l);
/* Batches in one epoch: ceil(n / batch_size), or floor with drop_last; -1 for NULL. */
int64_t sx_ds_loader_batches(const sx_ds_loader *l);
void sx_ds_loader_free(sx_ds_loader *l);

#ifdef __cplusplus
}
#endif

#endif /* SX_DATASETS_H */
