/* sx_onnx.h: ONNX import and export (optional module, built when protobuf-c and Debian's
 * onnx.proto are found; the C code reading the format is generated at build time by protoc-c
 * from that schema).
 *
 * Import. An .onnx file (ir_version >= 3, default-domain opsets 1..17) becomes a strix graph:
 * initializers become constants, every node one or a few graph ops, then the graph is
 * optimised, planned and compiled like any strix model. Tensors of rank 4 that ONNX holds in
 * NCHW order are computed in strix's NHWC order: the importer keeps, for each ONNX value,
 * whether its strix node holds it permuted, places a permutation only where an op needs the
 * other order (a convolution or pooling on an NCHW value, a Reshape or Flatten of an NHWC one),
 * and passes element-wise ops, Softmax, Concat, Pad and reductions through in either order (their
 * axes are mapped), so the permutations of a chain conv -> relu -> pool -> conv cancel and only
 * those at the model's input and output remain. Inputs and outputs keep the ONNX order and
 * shapes. Floating-point tensors (FLOAT, DOUBLE) are computed in p->dtype. Integer and boolean
 * tensors are known at import time: the graph is built for one batch size, so Shape gives
 * numbers, and a node whose inputs are all known (integers, or float constants that are not
 * trainable parameters) is evaluated by the importer (folded) when its op is one of the shape
 * arithmetic exporters write: Add, Sub, Mul, Div, Mod, Pow, Max, Min, Sum, Neg, Abs, Sign, Not,
 * Sqrt, Floor, Ceil, Reciprocal, Exp, Log, Equal, Less(OrEqual), Greater(OrEqual), And, Or, Xor,
 * Where, Cast, Gather, Slice, Concat, Transpose, Expand, Tile, Range, ConstantOfShape, ScatterND
 * (and Reshape, Flatten, Squeeze, Unsqueeze, Identity carry known values through). Integers
 * keep their ONNX element type (int8..uint32 wrap around as that type's arithmetic does). Known
 * integers read as data by a graph op (Where's condition, an integer model output) become a
 * constant of their values in p->dtype, booleans 1/0; comparisons and logic on graph values
 * give 1/0. Range, Mod and ScatterND are computed only on known inputs: one computed by the
 * graph is SX_E_UNSUPPORTED naming the input. A graph input of an integer type (INT8..INT64,
 * UINT8, UINT16, BOOL: token ids) is an input of p->dtype holding integers (exact up to 2^24 in
 * f32); strix reads such a value only as Gather's indices (an embedding lookup), Where's
 * condition, in comparisons, casts and reshapes (integer arithmetic on it, which floats would
 * not reproduce, is SX_E_UNSUPPORTED). Initializers may be stored in external data (a file
 * beside the model, as PyTorch writes models over 2 GB; its location is relative to the model
 * file's folder). Float values an op needs at import time
 * (Resize's scales and roi, Upsample's scales) must be constants or initializers. ArgMax and
 * ArgMin give their indices as floating-point values of p->dtype. Resize and Upsample (nearest,
 * linear and cubic, every coordinate transformation of opsets 10-17) become a fixed linear map
 * per resized axis: a gather of rows for nearest, a product with a weight matrix otherwise.
 * Opsets before 11 spell some inputs as attributes (Slice, Pad, Clip, Upsample, Dropout's ratio,
 * BatchNormalization's spatial): both are read by the model's opset; what opsets 1-6 defined
 * otherwise (training by default, Cast's string type, Concat's default axis, Tile's axis) is
 * refused.
 *
 * The batch. A graph input's first axis is the batch axis; it stays symbolic through the ops
 * that keep it (element-wise, convolutions, pooling, Flatten with axis 1, a Reshape whose target
 * keeps it): reshapes that keep axis 0 are written with -1 there, so the graph also runs when
 * copied for another batch (a .sxm saved from an imported model loads for any batch). A Reshape
 * of a value whose axis 0 is the batch, to a target whose first entry is 0, -1, the batch or the
 * batch the file declares for its first input and whose other entries hold one example, keeps
 * the batch axis: PyTorch's export of x.view(x.size(0), -1) traced at batch 1 writes the target
 * (1, -1), which then runs any batch.
 *
 * Every op listed by sx_onnx_op_supported maps; an op outside the list, an attribute or input
 * the mapping does not take (e.g. Conv with a 3-d kernel, a Reshape shape computed by the graph,
 * a graph input of type STRING), is SX_E_UNSUPPORTED with a message naming the node, the op
 * and the attribute: "model.onnx: node 'conv1' (Conv): attribute kernel_shape of rank 3 (only
 * 2-d convolutions)". Never a wrong result.
 *
 * Errors common to every function (each function lists its own):
 *   SX_E_ARG          a NULL argument, batch < 1, a dtype that is not f32 or f64
 *   SX_E_IO           the file cannot be opened or read (the system's reason in the message)
 *   SX_E_FORMAT       not a well-formed ONNX protobuf, or a model that breaks the ONNX rules
 *                     (a node reading a value nothing defines, a tensor whose data does not
 *                     match its dims, ...)
 *   SX_E_UNSUPPORTED  an op, attribute, input or data type strix does not map (see above), an
 *                     opset outside 1..17 of the default domain
 *   SX_E_SHAPE        shapes that do not fit (the message from the op's shape rule, prefixed
 *                     with the node)
 *   SX_E_NOMEM
 * The message (sx_last_error()) starts with the file name (or the name given for a buffer) and,
 * for a node, its name (or its index when unnamed) and op type. Every failure releases all
 * that was allocated; out-parameters are then NULL.
 */
#ifndef SX_ONNX_H
#define SX_ONNX_H

#include "sx_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sx_onnx_import_params {
    int64_t batch;  /* compile for up to this batch, >= 1: 1 */
    sx_dtype dtype; /* the dtype every floating-point tensor is computed in: SX_F32 */
    bool optimise;  /* run strix's graph optimiser before planning: true */
    /* Fine-tuning: FLOAT/DOUBLE initializers become parameters (sx_cg_param, named after the
     * initializer; listed by sx_onnx_graph_param) instead of constants, so that autodiff and
     * optim can train them (see sx_onnx_graph_import). Values an op needs at import time (Clip's
     * bounds, Pad's value, ...) are read once and stay fixed. false */
    bool trainable;
} sx_onnx_import_params;

sx_onnx_import_params sx_onnx_import_params_default(void);

/* ---------------------------------------------------------------- models */

/* Import the model at `path` as an inference model (*out, owned by the caller,
 * sx_nn_model_free): sx_nn_model_predict runs any batch of 1..p->batch examples, as for a
 * loaded .sxm (input scale 1; a smaller batch builds and compiles its own graph on first use).
 * The model has 1 to SX_NN_MAX_HEADS graph inputs that are not initializers and 1 to
 * SX_NN_MAX_HEADS outputs; every input's and output's first axis is the batch axis (whatever
 * size or name the file gives it), an input's other axes fixed numbers. One input: x is
 * (batch, its other axes). Several: a row of x holds them one after another, each flattened in
 * ONNX order (x is (batch, total); sx_nn_model_n_inputs / sx_nn_model_input give each one's
 * shape without the batch axis), as a strix model with several inputs takes them. One output:
 * the result is (batch, k) as the model computes it, or, when the output has another shape
 * (batch, d1, d2, ...), that output flattened in ONNX order to (batch, d1*d2*...); its name is
 * "y". Several outputs: a row of the result holds them one after another, each flattened, and
 * sx_nn_model_n_outputs / sx_nn_model_output give their names (the file's, cut to 31
 * characters) and shapes without the batch axis. More inputs or outputs, or an output without
 * the batch axis: SX_E_UNSUPPORTED (import such a model with sx_onnx_graph_import). p NULL:
 * the defaults. */
SX_NODISCARD sx_status sx_onnx_import(const char *path, const sx_onnx_import_params *p,
                                      sx_nn_model **out);
/* An imported model's (sx_onnx_import's) graph input or output k (k < sx_nn_model_n_inputs /
 * sx_nn_model_n_outputs) as the file has it: its name (uncut), and when not NULL its rank and
 * shape without the batch axis (rank 0 for a (batch) tensor, which the model itself gives as
 * (1)); valid while the model lives. NULL for k out of range or a model sx_onnx_import did
 * not make. For tools that show the file's names without importing the graph again. */
const char *sx_onnx_model_input(const sx_nn_model *m, int k, int *rank, const int64_t **shape);
const char *sx_onnx_model_output(const sx_nn_model *m, int k, int *rank, const int64_t **shape);
/* Whether graph input k of an imported model holds integers in the file (INT8..INT64, UINT8,
 * UINT16, BOOL: token ids, which the model takes as whole numbers of its dtype); false for k out
 * of range or a model sx_onnx_import did not make. */
bool sx_onnx_model_input_integer(const sx_nn_model *m, int k);
/* An imported model whose every input holds integers takes its batches (sx_nn_model_predict) as
 * SX_I32 / SX_I64 tensors as well as of its dtype, as a network of sx_nn_input_ids does. */

/* Export an inference model (compiled from a network, loaded from .sxm, or imported) to an
 * ONNX file at `path` (opset 13, ir_version 7): its plain inference graph for a batch of 1
 * with the batch axis named "N" (any batch), the weights as initializers. The input and output
 * are named "x" and "y" and keep strix's shapes (x is int64 when the network's input is ids,
 * sx_nn_input_ids: a Cast makes it the model's dtype), e.g. an image model's input (N, h, w, c) in
 * NHWC order; the graph transposes around each Conv, ConvTranspose, MaxPool and AveragePool
 * (ONNX's are NCHW). Ops: matmul (Gemm or MatMul), conv2d (Conv), conv_transpose2d
 * (ConvTranspose), max/avg pooling (MaxPool, AveragePool), gather by constant indices (Gather),
 * slice (Slice), argmax/argmin over one axis (ArgMax/ArgMin and a Cast), the
 * element-wise ops that ONNX has (Add, Sub, Mul, Div, Pow, Max, Min, Relu, Sigmoid, Tanh, Exp,
 * Log, Sqrt, Neg, Abs, LeakyRelu, Elu, Softplus, Softsign, Erf, Floor, Ceil, Reciprocal, ...),
 * fma, reshape, permute (Transpose), concat, pad, sum/mean/max/min reductions, softmax,
 * log-softmax, identity. The file is written to a temporary name and renamed.
 * Errors: SX_E_ARG (NULL, a training model), SX_E_UNSUPPORTED (a graph op with no ONNX
 * counterpart here, named with the node), SX_E_IO, SX_E_NOMEM. */
SX_NODISCARD sx_status sx_onnx_export(sx_nn_model *m, const char *path);

/* ---------------------------------------------------------------- graphs */

/* The lower-level import: the ONNX graph as a lazy, unoptimised strix graph with every graph
 * input (initializers excluded) an input node and every graph output a node, in the file's
 * order, with the ONNX shapes and order (batch axis included): for models with several inputs
 * or outputs, outputs of any shape, and the conformance runner. A first input axis with no
 * fixed size (a dim_param or no value) becomes p->batch; other axes must be fixed. The caller
 * sets the inputs (sx_cg_input_set) and evaluates the outputs (sx_cg_eval), optimising and
 * freezing first if it likes (sx_cg_optimise, sx_cg_freeze). */
typedef struct sx_onnx_graph sx_onnx_graph;

SX_NODISCARD sx_status sx_onnx_graph_import(const char *path, const sx_onnx_import_params *p,
                                            sx_onnx_graph **out);
/* The same from `size` bytes in memory (copied as needed; the buffer may be freed after the
 * call); `name` (may be NULL: "<buffer>") names it in messages. */
SX_NODISCARD sx_status sx_onnx_graph_import_buffer(const void *data, size_t size, const char *name,
                                                   const sx_onnx_import_params *p,
                                                   sx_onnx_graph **out);
void sx_onnx_graph_free(sx_onnx_graph *og); /* NULL is fine; frees the strix graph too */
/* The strix graph, owned by og (lives until sx_onnx_graph_free). */
sx_cg_graph *sx_onnx_graph_cg(const sx_onnx_graph *og);
/* Inputs and outputs: counts, the i-th node (in og's graph) and its ONNX name; NULL or 0 for
 * NULL og or i out of range. */
int sx_onnx_graph_n_inputs(const sx_onnx_graph *og);
sx_cg_node *sx_onnx_graph_input(const sx_onnx_graph *og, int i);
const char *sx_onnx_graph_input_name(const sx_onnx_graph *og, int i);
/* Parameters (p->trainable): the float initializers as sx_cg_param nodes, in the file's order,
 * with their ONNX names. Fine-tuning an imported model: import with trainable, build a loss
 * over an output from graph ops (e.g. the mean of sqr(y - t)), take its gradients with sx_ad_grad
 * against the parameters to train (all, or only the last layer's, found by name), add one
 * sx_optim_update per parameter, then freeze and evaluate the updates every step
 * (tests/onnx/test_onnx.c does this). Without trainable there are none. */
int sx_onnx_graph_n_params(const sx_onnx_graph *og);
sx_cg_node *sx_onnx_graph_param(const sx_onnx_graph *og, int i);
const char *sx_onnx_graph_param_name(const sx_onnx_graph *og, int i);
int sx_onnx_graph_n_outputs(const sx_onnx_graph *og);
sx_cg_node *sx_onnx_graph_output(const sx_onnx_graph *og, int i);
const char *sx_onnx_graph_output_name(const sx_onnx_graph *og, int i);

/* ---------------------------------------------------------------- tensors and ops */

/* Read a serialised TensorProto (an ONNX test's input_0.pb) into a new tensor (*out, owned by
 * the caller): FLOAT and DOUBLE data, and integer data (INT8..INT64, UINT8..UINT32, BOOL; exact
 * below 2^24 in f32), converted to `dtype`; *name (may be NULL) receives a copy
 * of the tensor's name (owned by the caller, sx_free; "" when none). Data in raw_data or in the
 * typed fields. Errors: SX_E_IO, SX_E_FORMAT (not a TensorProto, data not matching dims),
 * SX_E_UNSUPPORTED (another element type, external data), SX_E_ARG, SX_E_NOMEM. */
SX_NODISCARD sx_status sx_onnx_tensor_read(const char *path, sx_dtype dtype, sx_tensor **out,
                                           char **name);

/* Whether the importer maps op_type of the default domain (some of its attributes may still be
 * refused, see above). */
bool sx_onnx_op_supported(const char *op_type);
/* The i-th op type the importer maps (NULL past the end), in alphabetical order. */
const char *sx_onnx_op_name(int i);

/* ---------------------------------------------------------------- conformance */

/* Run the ONNX backend node tests under `dir` (each a folder holding model.onnx and
 * test_data_set_*\/input_*.pb, output_*.pb; `dir` itself may be one such case). A case is
 * "supported" when it imports (f32 unless its first float input is DOUBLE; its integer graph
 * inputs - shapes, axes, pads, indices - and its float inputs read only where an op needs
 * known values (Resize's scales) read from each data set and bound at import as known
 * values, a graph specialised per data set); it passes when every
 * output of every data set is within |got - want| <= atol + rtol |want| (NaN matching NaN) of
 * the expected one. A case that does not import is listed with the reason (an unsupported op is
 * counted against that op as found but not supported). With `log` not NULL, one line per case
 * that is unsupported or fails, then a table per op type (found / supported / passed), then
 * "result: cases=N supported=S passed=P failed=F". Counts go to the report (may be NULL).
 * Returns SX_OK when every supported case passed, SX_E_STATE when one failed, SX_E_IO when dir
 * cannot be read, SX_E_ARG for NULL dir. */
typedef struct sx_onnx_conformance_report {
    int cases, supported, passed, failed;
} sx_onnx_conformance_report;

SX_NODISCARD sx_status sx_onnx_conformance(const char *dir, double rtol, double atol, FILE *log,
                                           sx_onnx_conformance_report *report);

#ifdef __cplusplus
}
#endif

#endif /* SX_ONNX_H */
