/* tool.h: what the commands of the `strix` tool share (tools/common.c): messages and exit
 * statuses, option parsing, the kinds of files it reads, loading models (.sxm, and .onnx when
 * strix is built with its onnx module) and reading inputs (.npy, IDX, PNG/JPEG images). */
#ifndef STRIX_TOOL_H
#define STRIX_TOOL_H

#include <sx_nn.h>

#include <stdbool.h>
#include <stdio.h>

/* Exit statuses: success, a failure (a file missing or malformed, a model that does not fit
 * the input), a usage error (an unknown option, a missing or bad value). */
enum { TOOL_OK = 0, TOOL_FAIL = 1, TOOL_USAGE = 2 };

/* One line "strix CMD: MESSAGE" on stderr; returns TOOL_FAIL / TOOL_USAGE. The usage form adds
 * "(strix CMD --help)". tool_fail_sx appends ": " and sx_last_error(). */
int tool_fail(const char *cmd, const char *fmt, ...) SX_PRINTF(2, 3);
int tool_fail_sx(const char *cmd, const char *what);
int tool_usage(const char *cmd, const char *fmt, ...) SX_PRINTF(2, 3);

/* Option values: a whole decimal in [lo, hi]; a finite double. */
bool tool_parse_long(const char *s, long lo, long hi, long *out);
bool tool_parse_double(const char *s, double *out);
/* argv[i] is a help flag (--help, -h). */
bool tool_is_help(const char *a);

/* What a file holds, judged by its first bytes (an .onnx file by its name: protobuf has no
 * magic). */
typedef enum {
    TOOL_FILE_UNKNOWN,
    TOOL_FILE_SXM,  /* a strix file ("STRIXMDL") */
    TOOL_FILE_ONNX, /* a name ending in .onnx */
    TOOL_FILE_NPY,  /* "\x93NUMPY" */
    TOOL_FILE_IDX,  /* two zero bytes then a type code, or gzip (an IDX file, raw or gzip) */
    TOOL_FILE_IMAGE /* PNG, JPEG, PGM/PPM, BMP, GIF (by content) or TGA (by name) */
} tool_file;

/* The kind of `path`; TOOL_FILE_UNKNOWN also when it cannot be opened (the reader then says
 * why). */
tool_file tool_file_kind(const char *path);
/* Does the name end in `ext` (".npy"), any case? */
bool tool_has_ext(const char *path, const char *ext);

/* A model from a .sxm or .onnx file for batches of up to `batch`. Errors: the loader's, and
 * SX_E_FORMAT for a file that is neither, SX_E_UNSUPPORTED for .onnx without the onnx module. */
sx_status tool_load_model(const char *path, int64_t batch, sx_nn_model **out);

/* An array read from a .npy or IDX file, or an image (h, w, c) decoded to the given size: its
 * values as doubles with its shape, and whether its elements are bytes (u8: pixel values a
 * model's input scale applies to). */
typedef struct tool_array {
    int rank;
    int64_t dims[SX_MAX_RANK];
    int64_t count;
    double *v;        /* (count), sx_alloc'd */
    bool bytes;       /* u8 elements (and images) */
    const char *type; /* the element type's name ("u8", "f32", ...) */
} tool_array;

/* Read a .npy or IDX file (the content decides). Errors: the readers', SX_E_FORMAT for a file
 * that is neither. */
sx_status tool_array_read(const char *path, tool_array *a);
/* Decode a PNG or JPEG image at `path` to (h, w, c) bytes, c 1 or 3. */
sx_status tool_image_read(const char *path, int64_t h, int64_t w, int64_t c, sx_ds_resize mode,
                          tool_array *a);
void tool_array_free(tool_array *a);

/* A model's inputs and outputs as the tool shows and writes them: each one's name, shape
 * (without the batch axis) and element count, and for an output its place in a row of what
 * sx_nn_model_predict returns (outputs one after another, in order). A .sxm model's come from
 * its accessors (sx_nn_model_output, sx_nn_model_input: inputs named x0, x1, ...; one input x);
 * an ONNX model's are the file's graph's (its names and shapes, kept by the imported model:
 * sx_onnx_model_input / _output; the model itself returns a wider output flattened). classes: one
 * output of rank 1 (the model's (n, classes)). */
typedef struct tool_part {
    char name[64];
    int rank;
    int64_t shape[SX_MAX_RANK];
    int64_t size, offset;
    bool integer; /* an ONNX input of an integer type (token ids) */
} tool_part;

typedef struct tool_io {
    int n_in, n_out;
    tool_part in[SX_NN_MAX_HEADS], out[SX_NN_MAX_HEADS];
    bool classes;
} tool_io;

/* tool_load_model, and the model's inputs and outputs into io (an ONNX file is read and imported
 * once: the model keeps the file's names). Errors:
 * tool_load_model's, the importer's, SX_E_FORMAT (an ONNX graph's outputs that do not add up to
 * the model's row); *m NULL on error. */
sx_status tool_load_model_io(const char *path, int64_t batch, sx_nn_model **m, tool_io *io);
/* The model's inputs from n_specs files (.npy or IDX), each spec "NAME=FILE" (the input named
 * NAME, as io->in names them) or "FILE" (the next input not named, in order), packed into a as
 * (n, the inputs' total size): a row holds example i of every input one after another, as the
 * model takes them. Each file holds one example (the input's shape) or n of them (n, the
 * input's shape...), the same n for every input; integers (token ids) are read as numbers.
 * Errors (the message names the input and the model's inputs): SX_E_ARG (an unknown name, an
 * input given twice, more files than inputs, an input without a file), SX_E_SHAPE (a file of
 * another shape, inputs with different numbers of examples), the readers'. */
sx_status tool_inputs_read(const char *model, const tool_io *io, int n_specs,
                           const char *const *specs, tool_array *a);
/* The index of the output named `name`, or -1. */
int tool_io_find(const tool_io *io, const char *name);

/* The ONNX glue (tools/onnx.c when built with the onnx module, else refused with
 * SX_E_UNSUPPORTED naming the build). optimise false imports the plain graph (what convert
 * saves: it loads at any batch). */
bool tool_have_onnx(void);
sx_status tool_onnx_import(const char *path, int64_t batch, bool optimise, sx_nn_model **out);
sx_status tool_onnx_export(sx_nn_model *m, const char *path);
int tool_onnx_test(const char *dir, double rtol, double atol);
/* An imported ONNX model's graph inputs and outputs as the file names them (names and shapes
 * without the batch axis) into io's in/out (sizes, offsets and classes left to
 * tool_load_model_io). Errors: SX_E_STATE (a model tool_onnx_import did not make). */
sx_status tool_onnx_io(const sx_nn_model *m, tool_io *io);

/* The commands: each takes its own arguments (argv[0] is the command's name). */
int tool_cmd_info(int argc, char **argv);
int tool_cmd_predict(int argc, char **argv);
int tool_cmd_convert(int argc, char **argv);
int tool_cmd_dot(int argc, char **argv);
int tool_cmd_bench(int argc, char **argv);
int tool_cmd_train(int argc, char **argv);
int tool_cmd_onnx_test(int argc, char **argv);

#endif
