/* onnx_impl.h: the inside of the ONNX module (never installed): the import context, its value
 * table with each value's layout, and the helpers every op mapping (ops.c) uses. */
#ifndef SX_ONNX_IMPL_H
#define SX_ONNX_IMPL_H

#include "onnx.pb-c.h"
#include "sx_onnx.h"

#include <stdarg.h>

#define OX_OPSET_MIN 1
#define OX_OPSET_MAX 17

/* Where a value's strix node keeps it: in the ONNX order, or (rank 4 only) the NCHW value
 * permuted to NHWC by ox_to_nhwc. */
typedef enum { OX_ONNX = 0, OX_NHWC = 1 } ox_layout;

/* One ONNX value. A float value has a graph node (n, in layout lay); a value known at import
 * time also has its numbers: integer tensors only these (ints), float constants both (cst). */
typedef struct ox_val {
    const char *name; /* borrowed from the model proto */
    sx_cg_node *n;    /* NULL for an integer value */
    ox_layout lay;
    int rank; /* the ONNX shape */
    int64_t shape[SX_MAX_RANK];
    int64_t *ints;  /* integer values (owned), or NULL */
    int32_t itype;  /* the integers' ONNX element type (0: INT64); BOOL values are 0/1 */
    sx_tensor *cst; /* a float constant's values in the import dtype (owned), or NULL */
    bool is_input;  /* a graph input */
    /* A graph node holding integers (an integer graph input, reshaped or cast to an integer
     * type): only the ops of ox_int_graph_ok read it, where float arithmetic gives the same. */
    bool int_graph;
    /* Axis 0 is the batch axis (a graph input's first axis, kept through the ops that keep it):
     * a Reshape of such a value keeps that axis however the file spells its size. */
    bool batch0;
} ox_val;

typedef struct ox_ctx {
    const char *file; /* names the model in messages */
    Onnx__ModelProto *model;
    sx_cg_graph *g;
    sx_dtype dt;
    int64_t batch;    /* the first axis of inputs with no fixed size */
    bool trainable;   /* float initializers as parameters */
    bool force_batch; /* every input's first axis is the batch (sx_onnx_import) */
    /* the first input's first axis as the file declares it (a fixed dim_value), or -1: a
     * Reshape target that spells the batch as this number keeps the batch axis */
    int64_t file_batch;
    /* set by a mapping before ox_out when its output's axis 0 is not its input's (a reduction,
     * slice, concat or gather along axis 0, a transpose moving it); cleared for every node */
    bool no_batch;
    /* graph inputs given values at import time (the conformance runner's integer inputs):
     * bound[i]->name names the input; they become known integers, not input nodes */
    Onnx__TensorProto *const *bound;
    int n_bound;
    int opset;
    ox_val **vals; /* each allocated once: a value's address stays valid while others are added */
    int n_vals, cap_vals;
    const Onnx__NodeProto *node; /* the node being mapped (for messages), or NULL */
    int node_index;
} ox_ctx;

/* protobuf-c's allocator over strix's hook (so failures can be injected). */
extern ProtobufCAllocator ox_allocator;

/* An error for the current node: "<file>: node '<name>' (<op>): <message>", or
 * "<file>: <message>" outside nodes. Returns s. */
sx_status ox_fail(ox_ctx *c, sx_status s, const char *fmt, ...) SX_PRINTF(3, 4);
/* Prefix the message of a graph constructor's failure with the node; returns the status. */
sx_status ox_graph_fail(ox_ctx *c);

/* Read a whole file into memory (*data owned by the caller, sx_free). */
sx_status ox_read_file(const char *path, uint8_t **data, size_t *size);

/* A tensor stored outside the model (data_location EXTERNAL: the external_data entries location,
 * offset, length name a file in the model file's folder) read into its raw_data, once: later
 * imports of the same proto find it there. A location that is absolute or holds ".." is
 * SX_E_FORMAT. Nothing happens for a tensor held in the model. */
sx_status ox_tensor_external(ox_ctx *c, Onnx__TensorProto *t);
/* A TensorProto's element count after checking dims (>= 0, rank <= SX_MAX_RANK). */
sx_status ox_tensor_dims(ox_ctx *c, const Onnx__TensorProto *t, int *rank, int64_t *shape);
/* A float tensor (FLOAT, DOUBLE; also FLOAT16? no) converted to dtype dt. */
sx_status ox_tensor_float(ox_ctx *c, const Onnx__TensorProto *t, sx_dtype dt, sx_tensor **out);
/* An integer tensor (INT64, INT32, INT16, INT8, UINT8, UINT16, UINT32, BOOL) as int64 values. */
sx_status ox_tensor_ints(ox_ctx *c, const Onnx__TensorProto *t, int64_t **out, int64_t *count);
bool ox_dtype_is_float(int32_t onnx_type);
const char *ox_dtype_name(int32_t onnx_type);

/* Values. */
ox_val *ox_find(ox_ctx *c, const char *name);
/* Define a value (a later definition of the same name is a malformed model). */
sx_status ox_define(ox_ctx *c, const char *name, ox_val **out);

/* Node inputs and outputs: input i (NULL when absent or empty, an optional input), required
 * input i (an error naming it when absent). */
ox_val *ox_in(ox_ctx *c, int i);
sx_status ox_in_req(ox_ctx *c, int i, ox_val **out);
int ox_n_in(ox_ctx *c);
int ox_n_out(ox_ctx *c);
/* The node of value v in layout want (a permutation, or a reshape when it only moves axes of
 * size 1, is added when v is kept in the other one). Known integers become a constant of the
 * import dtype (booleans 1/0). */
sx_status ox_node(ox_ctx *c, ox_val *v, ox_layout want, sx_cg_node **out);
/* Whether the current node may read a graph value holding integers (v->int_graph) as input
 * slot i: Gather's indices, Cast, comparisons, Where's condition and the reshapes. */
bool ox_int_graph_ok(ox_ctx *c, int slot);
/* Output i of the node: the graph node n holding it in layout lay (its ONNX shape derived). */
sx_status ox_out(ox_ctx *c, int i, sx_cg_node *n, ox_layout lay);
/* A reshape of x to shape (rank, shape) written so that, when it keeps axis 0 (the same size,
 * and the other axes the same number of elements, > 0), axis 0 stays symbolic (-1): the graph
 * still runs when a copy changes the batch (sx_cg_graph_copy, a .sxm loaded for another batch).
 * The result is the same reshape at this batch. NULL with the graph's status on failure. */
sx_cg_node *ox_reshape(ox_ctx *c, sx_cg_node *x, int rank, const int64_t *shape);
/* Output i as known integers (of ONNX element type INT64; _typed: of type, 0 for INT64). */
sx_status ox_out_ints(ox_ctx *c, int i, int rank, const int64_t *shape, const int64_t *ints);
sx_status ox_out_ints_typed(ox_ctx *c, int i, int rank, const int64_t *shape, const int64_t *ints,
                            int32_t type);
/* Static integer data of input i (required), e.g. Reshape's shape; *count elements. */
sx_status ox_in_ints(ox_ctx *c, int i, const int64_t **ints, int64_t *count);
/* A known float scalar of input i (a constant), e.g. Clip's min; *present false when absent. */
sx_status ox_in_scalar(ox_ctx *c, int i, double *v, bool *present);

/* Import-time folding (fold.c). A value is known when it is integers or a float constant that
 * is not a trainable parameter. */
bool ox_known(const ox_val *v);
/* Output i as a float constant of (rank, shape) with values f (its const node and cst). */
sx_status ox_out_const(ox_ctx *c, int i, int rank, const int64_t *shape, const double *f);
/* The inputs op_type needs to be folded (a missing one is a malformed node). */
int ox_fold_arity(const char *op_type);
/* Fold the current node when every input is known and fold.c evaluates its op: *done then. */
sx_status ox_fold(ox_ctx *c, bool *done);
/* After a mapping: a reshape-like op (Reshape, Flatten, Squeeze, Unsqueeze, Identity) of a
 * small known float constant gives its output the same numbers. */
sx_status ox_fold_after(ox_ctx *c);

/* Attributes of the current node. */
const Onnx__AttributeProto *ox_attr(ox_ctx *c, const char *name);
sx_status ox_attr_int(ox_ctx *c, const char *name, int64_t def, int64_t *out);
sx_status ox_attr_float(ox_ctx *c, const char *name, double def, double *out);
/* ints: *n = 0 and *v = NULL when absent. */
sx_status ox_attr_ints(ox_ctx *c, const char *name, const int64_t **v, int *n);
/* string: def when absent. */
sx_status ox_attr_str(ox_ctx *c, const char *name, const char *def, char *buf, size_t size);

/* Normalise an axis of a rank-r tensor (negative counts from the end). */
sx_status ox_axis(ox_ctx *c, int64_t axis, int rank, const char *what, int *out);

/* The op table (ops.c): map the current node. */
typedef sx_status (*ox_op_fn)(ox_ctx *c);
typedef struct ox_op {
    const char *name;
    ox_op_fn fn;
    const char *attrs; /* the attributes it reads, comma-separated; any other is refused */
} ox_op;
const ox_op *ox_op_find(const char *op_type);
/* Whether input `slot` of op_type must be known at import time (Resize's roi, scales and
 * sizes, Upsample's scales, OneHot's indices and depth, Range's inputs): the conformance runner
 * binds a float graph input read only there. */
bool ox_static_input(const char *op_type, int slot);

/* A constant node of (rank, shape) with values f in the import dtype. */
sx_status ox_const(ox_ctx *c, int rank, const int64_t *shape, const double *f, sx_cg_node **out);
/* The elements of x (any shape, taken flat) at flat positions idx, as (rank, shape): one gather
 * with a constant index (ops_index.c). An index outside x is SX_E_RANGE. */
sx_status ox_gather_flat(ox_ctx *c, sx_cg_node *x, const int64_t *idx, int rank,
                         const int64_t *shape, sx_cg_node **out);

/* The mappings of the per-family files, listed in ops.c's table. */
/* ops_index.c */
sx_status ox_op_Compress(ox_ctx *c);
sx_status ox_op_GatherElements(ox_ctx *c);
sx_status ox_op_GatherND(ox_ctx *c);
sx_status ox_op_OneHot(ox_ctx *c);
sx_status ox_op_ReverseSequence(ox_ctx *c);
sx_status ox_op_ScatterElements(ox_ctx *c);
sx_status ox_op_ScatterND(ox_ctx *c);
sx_status ox_op_DepthToSpace(ox_ctx *c);
sx_status ox_op_SpaceToDepth(ox_ctx *c);
/* ops_quant.c */
sx_status ox_op_QuantizeLinear(ox_ctx *c);
sx_status ox_op_DequantizeLinear(ox_ctx *c);
sx_status ox_op_DynamicQuantizeLinear(ox_ctx *c);
/* ops_loss.c */
sx_status ox_op_NegativeLogLikelihoodLoss(ox_ctx *c);
sx_status ox_op_SoftmaxCrossEntropyLoss(ox_ctx *c);
/* ops_math.c */
sx_status ox_op_Sinh(ox_ctx *c);
sx_status ox_op_Cosh(ox_ctx *c);
sx_status ox_op_Asinh(ox_ctx *c);
sx_status ox_op_Acosh(ox_ctx *c);
sx_status ox_op_Atanh(ox_ctx *c);
sx_status ox_op_Asin(ox_ctx *c);
sx_status ox_op_Acos(ox_ctx *c);
sx_status ox_op_Atan(ox_ctx *c);
sx_status ox_op_Mod(ox_ctx *c);
sx_status ox_op_Shrink(ox_ctx *c);
sx_status ox_op_Celu(ox_ctx *c);
sx_status ox_op_IsInf(ox_ctx *c);
sx_status ox_op_IsNaN(ox_ctx *c);
sx_status ox_op_Trilu(ox_ctx *c);
sx_status ox_op_CumSum(ox_ctx *c);
sx_status ox_op_Hardmax(ox_ctx *c);
sx_status ox_op_TopK(ox_ctx *c);
sx_status ox_op_EyeLike(ox_ctx *c);
sx_status ox_op_HannWindow(ox_ctx *c);
sx_status ox_op_HammingWindow(ox_ctx *c);
sx_status ox_op_BlackmanWindow(ox_ctx *c);
sx_status ox_op_Det(ox_ctx *c);
sx_status ox_op_BitShift(ox_ctx *c);
sx_status ox_op_LRN(ox_ctx *c);
sx_status ox_op_MeanVarianceNormalization(ox_ctx *c);
sx_status ox_op_Einsum(ox_ctx *c);

/* The permutations between NCHW and NHWC. */
extern const int ox_to_nhwc[4], ox_to_nchw[4];

/* The graph of a model proto (borrowed; it must outlive *out) with the graph inputs named by
 * bound[i]->name taken as those known integer tensors (import.c). */
sx_status ox_graph_import_bound(Onnx__ModelProto *model, const char *file,
                                const sx_onnx_import_params *p, Onnx__TensorProto *const *bound,
                                int n_bound, sx_onnx_graph **out);

/* Import the model proto into c->g (import.c). */
sx_status ox_import_graph(ox_ctx *c);
void ox_ctx_free(ox_ctx *c);

#endif
