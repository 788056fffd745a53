/* sx_cgraph.h: the lazy computation graph, with need-based re-evaluation (only invalid nodes
 * run again) and structural hashing (the same op on the same inputs and attributes is one node).
 *
 * A graph owns its nodes. A node is a leaf (constant, input, parameter) or an op applied to
 * other nodes of the same graph; its dtype and shape are inferred when it is made. In LAZY mode
 * nothing is computed until sx_cg_eval asks for a node; in EAGER mode every node is computed
 * when it is made (same API: for debugging, and the baseline the compiled path is measured
 * against).
 *
 * Errors. Node constructors return the new node, or NULL on error: the message is in
 * sx_last_error() ("sx_cg_add: shapes (3,4) and (5,4) do not broadcast"), the graph is left
 * unchanged, and the graph remembers its first error (sx_cg_graph_status). A NULL input makes a
 * constructor return NULL without a new message, so an expression can be built in one go and
 * checked once. Functions that return sx_status follow the tensor layer's conventions.
 *
 * Ownership. The graph owns every node, every node's value and the names; sx_cg_graph_free
 * releases them all. Pointers returned by sx_cg_value stay valid until the node is evaluated
 * again or the graph is freed. Constants and parameters copy their initial tensor. Inputs take
 * their value by copy (SX_CG_COPY: the graph keeps its own buffer) or by borrowing
 * (SX_CG_BORROW: the caller's memory is read at every evaluation and must stay alive and
 * unchanged until the next sx_cg_input_set or sx_cg_graph_free; changing it behind the graph's
 * back is not seen as a change).
 *
 * Evaluation. Every node carries a valid flag. Setting an input, or an assign writing a
 * parameter, invalidates exactly the nodes that depend on it; sx_cg_eval recomputes only invalid
 * nodes that the requested ones need. Re-evaluating with nothing changed costs a few loads.
 *
 * Mutation. sx_cg_assign(param, value) writes value into the parameter's storage. Within one
 * evaluation, every other reader of the parameter runs before the assign, so all of them see the
 * old value; afterwards they are invalid (they depend on a changed parameter). The fused
 * updates that element-wise fusion makes of assigns (SX_OPF_UPDATE: an optimiser step) write
 * their parameter and states under the same rule.
 */
#ifndef SX_CGRAPH_H
#define SX_CGRAPH_H

#include "sx_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sx_cg_graph sx_cg_graph;
typedef struct sx_cg_node sx_cg_node;

/* ---------------------------------------------------------------- the op table */

/* Op flags (the `flags` column of sx_ops.def). */
enum {
    SX_OPF_LEAF = 1 << 0,     /* constant, input or parameter */
    SX_OPF_ELEMWISE = 1 << 1, /* out[i] depends on in[i] only (after broadcasting) */
    SX_OPF_INPLACE = 1 << 2,  /* the result may be written over input 0 (or any input of the
                                 result's shape) when nothing else reads it afterwards */
    SX_OPF_VIEW = 1 << 3,     /* the result is its input's memory (reshape, identity) */
    SX_OPF_RANDOM = 1 << 4,   /* draws random numbers: never merged by structural hashing */
    SX_OPF_MUTATES = 1 << 5,  /* writes a parameter (assign, fused updates) */
    /* the result may be written over input 2 (matmul's addend c) when nothing else reads it
     * afterwards; never over inputs 0 and 1 */
    SX_OPF_INPLACE_ADDEND = 1 << 6,
    /* the result may be written over input 0 when the pooling windows (attr.pool) do not
     * overlap (stride >= kernel on both axes and no dilation; pads and ceil_mode only clip
     * windows) and nothing else reads it afterwards */
    SX_OPF_INPLACE_POOL = 1 << 7,
    /* writes its leading inputs (parameters) in place by an element-wise program (fused_update,
     * matmul_update): value the parameter, input 0; the count in attr.ints[0] */
    SX_OPF_UPDATE = 1 << 8,
};

typedef enum {
#define X(NAME, name, arity, shape, eval, flags, kernel, nograd) SX_OP_##NAME,
#include "sx_ops.def"
#undef X
    SX_OP_COUNT
} sx_cg_op;

const char *sx_cg_op_name(sx_cg_op op); /* "add" */
int sx_cg_op_arity(sx_cg_op op);        /* -1 = variadic */
unsigned sx_cg_op_flags(sx_cg_op op);

/* The attributes of the op families whose parameters are not per-axis lists, one struct each
 * and read by name (attr.sparse_xent.ignore, attr.norm.eps). Each is a view of the same memory
 * as the untyped pair (alpha, ints[]) of sx_cg_attr: its double, if it has one, first (alpha),
 * then its integers (ints[0], ints[1], ...), so saved graphs store them as they always have. */
typedef struct sx_cg_sparse_xent_attr { /* sparse_xent, sparse_xent_backward */
    double smoothing;                   /* label smoothing e in [0, 1) */
    int64_t ignore;                     /* the class index whose rows count 0 */
} sx_cg_sparse_xent_attr;
typedef struct sx_cg_attention_attr { /* attention, attention_backward */
    double scale;                     /* the scores' factor (1 / sqrt(dh) usually) */
    int64_t causal;                   /* 1: query i sees keys j <= i + tk - tq only */
} sx_cg_attention_attr;
typedef struct sx_cg_norm_attr { /* norm_stats, norm, norm_sums, norm_dx (sx_norm_axes) */
    double eps;                  /* added to the variance */
    int64_t lead, tail, groups;  /* x viewed as (n, s, c), c in groups */
    int64_t copy;                /* norm: 1 marks a copy made by SX_PASS_BN_RECOMPUTE */
    int64_t relu;                /* norm: 1 applies relu last in the same pass (per channel) */
} sx_cg_norm_attr;
typedef struct sx_cg_embedding_attr { /* embedding, embedding_backward */
    int64_t pad;                      /* the padding index (its rows zero; -1: none) */
    int64_t vocab;                    /* embedding_backward: the table's rows */
} sx_cg_embedding_attr;
typedef struct sx_cg_adaptive_pool_attr { /* adaptive_avgpool2d */
    int64_t out_h, out_w;                 /* the pooled size */
} sx_cg_adaptive_pool_attr;
typedef struct sx_cg_allreduce_attr { /* allreduce_part */
    int64_t offset;                   /* its first element in the bucket */
} sx_cg_allreduce_attr;
typedef struct sx_cg_index_attr { /* one_hot: depth; scatter_add: the rows of its result */
    int64_t count;
} sx_cg_index_attr;
typedef struct sx_cg_update_attr { /* fused_update, matmul_update */
    int64_t stores;                /* the leading inputs the program writes */
} sx_cg_update_attr;
typedef struct sx_cg_dropout_attr { /* dropout_mask */
    double p;                       /* the probability of dropping an element */
} sx_cg_dropout_attr;

/* Op attributes. One struct for every op (unused fields stay zero), so that generic code
 * (structural hashing, autodiff, the optimiser, save/load) handles every op alike: the shared
 * fields by name, and each family's own parameters as its struct above, in a union. Which
 * fields an op reads is said in sx_ops.def. Always start from sx_cg_attr_default(). */
typedef struct sx_cg_attr {
    double beta;           /* matmul beta */
    unsigned axes;         /* reductions: bit mask of axes */
    bool keepdims;         /* reductions */
    bool trans_a, trans_b; /* matmul */
    int axis;              /* softmax family, concat */
    int rank; /* target shape: reshape, broadcast, unslice, backward ops, dropout mask */
    int64_t shape[SX_MAX_RANK];
    union {
        struct {          /* the untyped view (the saved form's fields) */
            double alpha; /* map parameter; matmul alpha; pad value */
            union {
                int64_t ints[SX_MAX_RANK]; /* per axis: repeat/tile reps, permute perm, pad
                                              before */
                sx_cg_update_attr update;
                sx_cg_embedding_attr embedding;
                sx_cg_adaptive_pool_attr adaptive_pool;
                sx_cg_allreduce_attr allreduce;
                sx_cg_index_attr index;
            };
        };
        sx_cg_sparse_xent_attr sparse_xent;
        sx_cg_attention_attr attention;
        sx_cg_norm_attr norm;
        sx_cg_dropout_attr dropout;
    };
    int64_t ints2[SX_MAX_RANK]; /* pad after */
    sx_slice slice[SX_MAX_RANK];
    sx_conv2d_params conv;
    sx_pool2d_params pool;
    int rng_id;         /* dropout mask: which generator of the graph */
    sx_fused_prog prog; /* fused element-wise chains and updates: their program */
} sx_cg_attr;

sx_cg_attr sx_cg_attr_default(void); /* all zero; alpha = 1 for matmul use is set by callers */

/* ---------------------------------------------------------------- graphs */

typedef enum { SX_CG_LAZY = 0, SX_CG_EAGER = 1 } sx_cg_mode;

/* A new empty graph. `dtype` is the dtype of scalars made by sx_cg_scalar. */
SX_NODISCARD sx_status sx_cg_graph_new(sx_cg_mode mode, sx_dtype dtype, sx_cg_graph **out);
void sx_cg_graph_free(sx_cg_graph *g); /* NULL is fine */
sx_cg_mode sx_cg_graph_mode(const sx_cg_graph *g);
sx_dtype sx_cg_graph_dtype(const sx_cg_graph *g);
/* The first error of a node constructor since the graph was made or the status cleared. */
sx_status sx_cg_graph_status(const sx_cg_graph *g);
void sx_cg_graph_status_clear(sx_cg_graph *g);
/* Record s as the graph's error when it has none yet, and return s: for code that builds nodes
 * and fails for its own reasons (out of memory making a constant, say). */
sx_status sx_cg_graph_fail(sx_cg_graph *g, sx_status s);

/* Counts and memory: live nodes, edges (input references), bytes of node values and leaf
 * storage currently held, and how many kernels evaluation has run (for tests and benchmarks). */
typedef struct sx_cg_stats {
    int64_t nodes, edges;
    int64_t bytes;
    int64_t kernel_calls;
} sx_cg_stats;
sx_cg_stats sx_cg_graph_stats(const sx_cg_graph *g);

/* Nodes in creation order (a topological order): node i for 0 <= i < sx_cg_graph_size(g);
 * removed nodes (by the optimiser) are skipped by returning NULL. */
int64_t sx_cg_graph_size(const sx_cg_graph *g);
sx_cg_node *sx_cg_graph_node(const sx_cg_graph *g, int64_t i);

/* ---------------------------------------------------------------- leaves */

/* A constant holding a copy of `value`. */
sx_cg_node *sx_cg_const(sx_cg_graph *g, const sx_tensor *value);
/* A rank-0 constant of the graph's dtype; of a given dtype; of the dtype of node `like`. */
sx_cg_node *sx_cg_scalar(sx_cg_graph *g, double value);
sx_cg_node *sx_cg_scalar_of(sx_cg_graph *g, sx_dtype dtype, double value);
sx_cg_node *sx_cg_scalar_like(sx_cg_graph *g, const sx_cg_node *like, double value);
/* An input of the given dtype and shape, given a value later by sx_cg_input_set. */
sx_cg_node *sx_cg_input(sx_cg_graph *g, const char *name, sx_dtype dtype, int rank,
                        const int64_t *shape);
/* A parameter: persistent storage initialised with a copy of `init`, updated by assign. */
sx_cg_node *sx_cg_param(sx_cg_graph *g, const char *name, const sx_tensor *init);
/* A parameter over the caller's memory (not copied): updates write into `t`'s data, which must
 * outlive the graph. Several graphs can share one set of weights this way. */
sx_cg_node *sx_cg_param_borrow(sx_cg_graph *g, const char *name, sx_tensor *t);

typedef enum { SX_CG_COPY = 0, SX_CG_BORROW = 1 } sx_cg_ownership;
/* Give an input a value (dtype and shape must match the input's). Invalidates the input's
 * dependents. */
SX_NODISCARD sx_status sx_cg_input_set(sx_cg_graph *g, sx_cg_node *input, const sx_tensor *value,
                                       sx_cg_ownership how);
/* Overwrite a parameter's or constant's value (a copy; same dtype and shape). Invalidates its
 * dependents. */
SX_NODISCARD sx_status sx_cg_leaf_set(sx_cg_graph *g, sx_cg_node *leaf, const sx_tensor *value);
/* Mark a node (and its dependents) for recomputation, e.g. a dropout mask at each step. */
SX_NODISCARD sx_status sx_cg_invalidate(sx_cg_graph *g, sx_cg_node *node);

/* ---------------------------------------------------------------- evaluation */

/* Compute the requested nodes (and whatever invalid nodes they need). */
SX_NODISCARD sx_status sx_cg_eval(sx_cg_graph *g, int n, sx_cg_node *const *nodes);
/* The node's current value: NULL if it has never been computed. */
const sx_tensor *sx_cg_value(const sx_cg_node *node);
bool sx_cg_valid(const sx_cg_node *node);

/* Parallel evaluation (include/strix/sx_engine.h). With n >= 2 workers, sx_cg_eval hands
 * the nodes it runs to a dependency engine in the sequential order: each node reads its inputs'
 * variables (and through views, their storage's) and mutates its own; an assign or fused update
 * also mutates the parameters it writes; a dropout mask mutates its generator (masks from one
 * generator are drawn in the sequential order); a planned node whose arena block reuses bytes
 * of earlier nodes waits for every reader of those nodes, and a node whose scratch block in the
 * arena reuses bytes waits for the earlier nodes that used them (as a value or as scratch).
 * Independent nodes then run at the same time; results equal the sequential evaluation's bit
 * for bit (kernels do not depend on their thread count). The call still returns only when
 * everything has run.
 * Kernel threads: a node runs alone with every thread (SX_ENGINE_WIDE) when it is a matrix
 * product or convolution of at least 2^24 flops, or when its inputs and result hold at least
 * 2^19 elements together (views never); any other node runs with one thread beside the others,
 * or with every thread when it starts while no other node runs or is ready (a chain).
 * n: 0 = the default ($SX_ENGINE_WORKERS when set to 2..SX_ENGINE_MAX_WORKERS (256), else
 * sequential), 1 = sequential (the evaluator as without an engine), 2..SX_ENGINE_MAX_WORKERS
 * workers. The engines are shared by all graphs of the process (one per worker count and
 * concurrent evaluation, up to 8, started on first use and stopped at exit; when all are busy,
 * evaluation is sequential).
 * Freezing, or setting n >= 2 on a frozen graph, lays out the parallel scratch (one allocation,
 * also holding per-worker kernel scratch) and makes room in the engine, so that evaluations
 * allocate nothing. Errors: SX_E_ARG (NULL graph, n out of range), SX_E_NOMEM (frozen graph). */
SX_NODISCARD sx_status sx_cg_set_workers(sx_cg_graph *g, int n);
/* The workers evaluation uses: 1 when sequential, else n (after $SX_ENGINE_WORKERS). */
int sx_cg_workers(const sx_cg_graph *g);

/* Profiling: while enabled, every kernel run is timed per op kind and per node. The report lists
 * the op kinds by total time (count, ms, share, cpu_ms), at most `top` rows (0 = all), then the
 * time per scope (layer; see sx_cg_scope_set), all scopes, in order of first appearance, then the
 * `top` nodes (10 when top = 0) taking the most time, with their shapes and scope. cpu_ms
 * is the CPU time of all the process's threads during the op's kernels (the kernels' own threads
 * included: more than ms when they split well, and its excess over one thread's is what
 * spinning, waiting and duplicated work cost); 0 for nodes run by engine workers (sx_cg_set_workers
 * >= 2), whose kernels overlap. */
void sx_cg_profile_enable(sx_cg_graph *g, bool on);
bool sx_cg_profile_enabled(const sx_cg_graph *g); /* false for NULL */
void sx_cg_profile_reset(sx_cg_graph *g);
void sx_cg_profile_print(const sx_cg_graph *g, int top, FILE *f);

/* ---------------------------------------------------------------- node properties */

sx_cg_op sx_cg_node_op(const sx_cg_node *n);
int64_t sx_cg_node_id(const sx_cg_node *n);
const char *sx_cg_node_name(const sx_cg_node *n); /* "" when unnamed */

/* Scopes name the part of a model a node belongs to (a layer): every node made while a scope is
 * set keeps it. Gradient nodes (autodiff) take the scope of the node they differentiate, nodes
 * the optimiser makes take that of the node they replace, and graph copies keep scopes.
 * sx_cg_scope_set(g, NULL or "") ends the current scope. Names are copied into the graph;
 * the strings returned live as long as the graph. */
SX_NODISCARD sx_status sx_cg_scope_set(sx_cg_graph *g, const char *name);
const char *sx_cg_scope_get(const sx_cg_graph *g); /* "" when none */
const char *sx_cg_node_scope(const sx_cg_node *n); /* "" when none */
SX_NODISCARD sx_status sx_cg_node_set_name(sx_cg_graph *g, sx_cg_node *n, const char *name);
sx_dtype sx_cg_node_dtype(const sx_cg_node *n);
int sx_cg_node_rank(const sx_cg_node *n);
const int64_t *sx_cg_node_shape(const sx_cg_node *n); /* rank entries */
int64_t sx_cg_node_size(const sx_cg_node *n);
int sx_cg_node_n_inputs(const sx_cg_node *n);
sx_cg_node *sx_cg_node_input(const sx_cg_node *n, int i);
const sx_cg_attr *sx_cg_node_attr(const sx_cg_node *n);
int sx_cg_node_n_users(const sx_cg_node *n); /* live nodes that read it */
/* The floating-point operations of evaluating n once, by the op table's flop model (each op's
 * cost function, beside its evaluator in cgraph/ops/: 2 M N K for a matrix product or
 * convolution, one per element for element-wise ops and reductions, ...); 0 for leaves, views
 * and data movement, and for NULL. */
double sx_cg_node_flops(const sx_cg_node *n);

/* ---------------------------------------------------------------- building ops */

/* The most inputs a node can have (concat, fused and matmul_update take a variable number):
 * every constructor given more fails with SX_E_ARG. Join more tensors in groups (a concat of
 * concats). The fused kernel of sx_tensor.h takes as many. */
#define SX_CG_MAX_INPUTS 64

/* The generic constructor every named one below goes through: op, inputs, attributes. Used by
 * autodiff, the optimiser and load. Structural hashing: when a live node with the same op,
 * inputs and attributes exists (and the op is not random or mutating), it is returned. More
 * than SX_CG_MAX_INPUTS inputs is SX_E_ARG. */
sx_cg_node *sx_cg_op_new(sx_cg_graph *g, sx_cg_op op, int n_in, sx_cg_node *const *in,
                         const sx_cg_attr *attr);

/* Element-wise constructors, one per row of include/strix/sx_map.def and
 * include/strix/sx_binary.def (the formulas are there): unary sx_cg_neg(g, x), sx_cg_sin(g, x),
 * ...; those whose row has an ALPHA(p) parameter take it after x: sx_cg_leaky_relu(g, x, slope),
 * sx_cg_elu(g, x, alpha). Binary with NumPy broadcasting, comparisons giving 1/0: sx_cg_add(g, a,
 * b), ... */
#define SX_CG_MAP_PARAM_NONE
#define SX_CG_MAP_PARAM_ALPHA(p) , double p
#define SX_MAP_ROW(NAME, name, expr, ref, param, dom, at, nograd)                                  \
    sx_cg_node *sx_cg_##name(sx_cg_graph *g, sx_cg_node *x SX_CG_MAP_PARAM_##param);
#include "sx_map.def"
#undef SX_MAP_ROW
#define SX_BINARY_ROW(NAME, name, expr, at, nograd)                                                \
    sx_cg_node *sx_cg_##name(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b);
#include "sx_binary.def"
#undef SX_BINARY_ROW
/* a op scalar, made with a rank-0 constant of a's dtype: sx_cg_add_scalar(g, x, 1.0). */
sx_cg_node *sx_cg_add_scalar(sx_cg_graph *g, sx_cg_node *a, double s);
sx_cg_node *sx_cg_mul_scalar(sx_cg_graph *g, sx_cg_node *a, double s);
sx_cg_node *sx_cg_fma(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b, sx_cg_node *c);
sx_cg_node *sx_cg_where(sx_cg_graph *g, sx_cg_node *cond, sx_cg_node *a, sx_cg_node *b);

/* Reductions over an axes mask (SX_AXIS(i) | ..., SX_AXES_ALL), as sx_tensor_fold_out. */
#define SX_CG_DECL_FOLD(name)                                                                      \
    sx_cg_node *sx_cg_##name(sx_cg_graph *g, sx_cg_node *x, unsigned axes, bool keepdims);
SX_CG_DECL_FOLD(sum)
SX_CG_DECL_FOLD(mean)
SX_CG_DECL_FOLD(prod)
SX_CG_DECL_FOLD(reduce_max)
SX_CG_DECL_FOLD(reduce_min)
SX_CG_DECL_FOLD(argmax)
SX_CG_DECL_FOLD(argmin)
SX_CG_DECL_FOLD(l1norm)
SX_CG_DECL_FOLD(l2norm)
SX_CG_DECL_FOLD(logsumexp)
#undef SX_CG_DECL_FOLD

/* Layout (see the tensor kernels of the same names). */
sx_cg_node *sx_cg_repeat(sx_cg_graph *g, sx_cg_node *x, const int64_t *reps);
sx_cg_node *sx_cg_tile(sx_cg_graph *g, sx_cg_node *x, const int64_t *reps);
sx_cg_node *sx_cg_broadcast(sx_cg_graph *g, sx_cg_node *x, int rank, const int64_t *shape);
/* One entry of shape may be -1: it takes what the element count leaves (as in NumPy), so a
 * reshape like (-1, 6272) keeps working when the batch size changes. */
sx_cg_node *sx_cg_reshape(sx_cg_graph *g, sx_cg_node *x, int rank, const int64_t *shape);
sx_cg_node *sx_cg_slice(sx_cg_graph *g, sx_cg_node *x, const sx_slice *s);
/* Zeros of `shape` with g placed at the slice s (the adjoint of slice). */
sx_cg_node *sx_cg_unslice(sx_cg_graph *g, sx_cg_node *x, const sx_slice *s, int rank,
                          const int64_t *shape);
sx_cg_node *sx_cg_concat(sx_cg_graph *g, int n, sx_cg_node *const *xs, int axis);
sx_cg_node *sx_cg_permute(sx_cg_graph *g, sx_cg_node *x, const int *perm);
sx_cg_node *sx_cg_transpose(sx_cg_graph *g, sx_cg_node *x); /* swap the last two axes */
sx_cg_node *sx_cg_pad(sx_cg_graph *g, sx_cg_node *x, const int64_t *before, const int64_t *after,
                      double value);
sx_cg_node *sx_cg_one_hot(sx_cg_graph *g, sx_cg_node *idx, int64_t depth);
sx_cg_node *sx_cg_gather(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *idx);
/* Zeros of x_rows rows with g's rows added at idx (the adjoint of gather). */
sx_cg_node *sx_cg_scatter_add(sx_cg_graph *g, sx_cg_node *grad, sx_cg_node *idx, int64_t x_rows);
/* Embedding: the rows of table (vocab, dim) at idx (any rank <= 7; integral values
 * of the table's dtype in [0, vocab)) as (idx shape..., dim), zeros where idx == pad (-1: no
 * padding index). Its gradient reaches the table only (embedding_backward) and skips the padding
 * row. Errors: SX_E_RANK (a table not of rank 2), SX_E_RANGE (pad not in [-1, vocab); indices
 * out of range when evaluated), SX_E_DTYPE. */
sx_cg_node *sx_cg_embedding(sx_cg_graph *g, sx_cg_node *table, sx_cg_node *idx, int64_t pad);
/* Its adjoint: (vocab, dim) zeros with grad's rows (idx shape..., dim) added at idx, except
 * where idx == pad. SX_E_SHAPE when grad is not idx's shape plus one axis; SX_E_ARG vocab < 1. */
sx_cg_node *sx_cg_embedding_backward(sx_cg_graph *g, sx_cg_node *grad, sx_cg_node *idx, int64_t pad,
                                     int64_t vocab);

/* alpha * op(a) @ op(b) (+ beta * c when c is not NULL). c broadcasts to the result's shape
 * (NumPy rules, as PyTorch's addmm and ONNX's Gemm: a bias (n) or (1, n) adds to every row); one
 * that does not is SX_E_SHAPE. The gradient with respect to c is beta G summed over the axes c
 * was broadcast along, so it has c's shape. */
sx_cg_node *sx_cg_matmul(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b, bool trans_a, bool trans_b);
sx_cg_node *sx_cg_gemm(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b, bool trans_a, bool trans_b,
                       double alpha, sx_cg_node *c, double beta);
sx_cg_node *sx_cg_dot(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b);

sx_cg_node *sx_cg_conv2d(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *k, const sx_conv2d_params *p);
/* dL/dx of conv2d from the kernel and dy; x_shape is the input's shape (n,h,w,c). */
sx_cg_node *sx_cg_conv2d_backward_input(sx_cg_graph *g, sx_cg_node *k, sx_cg_node *dy,
                                        const sx_conv2d_params *p, const int64_t x_shape[4]);
/* dL/dk of conv2d from x and dy; k_shape is the kernel's shape (kh,kw,c,f). */
sx_cg_node *sx_cg_conv2d_backward_kernel(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *dy,
                                         const sx_conv2d_params *p, const int64_t k_shape[4]);
/* Transposed convolution (sx_tensor_conv_transpose2d_out: x (n,h,w,c_in), k
 * (kh,kw,c_out/groups,c_in), p's output_padding allowed) and its two backward ops: dL/dx from the
 * kernel and dy (x_shape is x's shape), dL/dk from x and dy (k_shape is k's shape). */
sx_cg_node *sx_cg_conv_transpose2d(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *k,
                                   const sx_conv2d_params *p);
sx_cg_node *sx_cg_conv_transpose2d_backward_input(sx_cg_graph *g, sx_cg_node *k, sx_cg_node *dy,
                                                  const sx_conv2d_params *p,
                                                  const int64_t x_shape[4]);
sx_cg_node *sx_cg_conv_transpose2d_backward_kernel(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *dy,
                                                   const sx_conv2d_params *p,
                                                   const int64_t k_shape[4]);
sx_cg_node *sx_cg_maxpool2d(sx_cg_graph *g, sx_cg_node *x, const sx_pool2d_params *p);
sx_cg_node *sx_cg_maxpool2d_backward(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *dy,
                                     const sx_pool2d_params *p);
/* where(x > 0, maxpool2d_backward(x, dy), 0) in one op (sx_tensor_maxpool2d_relu_backward_out). */
sx_cg_node *sx_cg_maxpool2d_relu_backward(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *dy,
                                          const sx_pool2d_params *p);
sx_cg_node *sx_cg_avgpool2d(sx_cg_graph *g, sx_cg_node *x, const sx_pool2d_params *p);
sx_cg_node *sx_cg_avgpool2d_backward(sx_cg_graph *g, sx_cg_node *dy, const sx_pool2d_params *p,
                                     const int64_t x_shape[4]);
/* Adaptive average pooling of x (n,h,w,c) to (n,out_h,out_w,c) (PyTorch's AdaptiveAvgPool2d,
 * sx_tensor_adaptive_avgpool2d_out): h, w, out_h, out_w >= 1, else SX_E_SHAPE; x not of rank 4
 * is SX_E_RANK. Its backward op spreads dy (n,out_h,out_w,c) back to x_shape. */
sx_cg_node *sx_cg_adaptive_avgpool2d(sx_cg_graph *g, sx_cg_node *x, int64_t out_h, int64_t out_w);
sx_cg_node *sx_cg_adaptive_avgpool2d_backward(sx_cg_graph *g, sx_cg_node *dy,
                                              const int64_t x_shape[4]);

sx_cg_node *sx_cg_softmax(sx_cg_graph *g, sx_cg_node *x, int axis);
sx_cg_node *sx_cg_log_softmax(sx_cg_graph *g, sx_cg_node *x, int axis);
sx_cg_node *sx_cg_softmax_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *dy, int axis);
sx_cg_node *sx_cg_log_softmax_backward(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *dy, int axis);
/* The normalisation ops, one family for batch, layer, group and instance norm: x viewed as
 * (n, s, c), its c channels in groups, each (row of n, group) normalised over its s c/groups
 * elements (sx_norm_axes, sx_tensor.h; attr.norm). norm_stats(x) -> (2, p), p = n groups: row 0
 * the mean and row 1 the biased variance of each group; norm(x, stats, gamma, beta, eps) ->
 * (x - mean) / sqrt(var + eps) * gamma + beta (x's shape; gamma and beta of x's last `tail`
 * axes, both NULL for no affine; eps finite, >= 0); norm_sums(x, stats, dy) -> (2, p), row 0
 * sum(dy) and row 1 sum(dy (x - mean)) per group. Batch norm is the per-channel geometry
 * (lead 0, tail 1, groups c: statistics over every leading element of x (..., c)); the
 * evaluator runs it on the batch-norm kernels, everything else on the group kernels (kernels and
 * rounding: sx_tensor_norm_*_out). Errors (recorded in the graph, NULL returned): SX_E_AXIS
 * (lead/tail do not fit x), SX_E_ARG (groups not dividing c; eps; one of gamma, beta NULL; a
 * fused form below outside the per-channel geometry), SX_E_SHAPE (stats not (2,p), gamma/beta
 * not x's last tail axes, dy not x's shape), SX_E_DTYPE. */
sx_cg_node *sx_cg_norm_stats(sx_cg_graph *g, sx_cg_node *x, sx_norm_axes ax);
sx_cg_node *sx_cg_norm(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *gamma,
                       sx_cg_node *beta, sx_norm_axes ax, double eps);
sx_cg_node *sx_cg_norm_sums(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *dy,
                            sx_norm_axes ax);
/* The fused forms, per-channel geometry only (batch norm's training graph; SX_E_ARG
 * otherwise). norm_res: norm(x, stats, gamma, beta, eps) + res in one pass (res NULL: sx_cg_norm;
 * gamma and beta required): the normalised value rounded to the dtype, then the residual added
 * (SX_PASS_BN_ADD makes these from add(norm, res); SX_E_SHAPE / SX_E_DTYPE for res not of x's
 * shape and dtype, no broadcast). norm_sums_mask: norm_sums of where(y > 0, dy, 0) (relu's
 * gradient) without that tensor, y of x's shape (NULL: sx_cg_norm_sums). norm_dx(x, stats, gamma,
 * dy, sums, y or NULL, eps) -> x's shape: the gradient of x through norm(x, stats, gamma, beta)
 * with stats = norm_stats(x) (both paths) for the output gradient dy, sums = norm_sums(x, stats,
 * dy); y (x's shape) or NULL: a relu mask, dy taken as 0 where y <= 0 (sums then of the masked dy);
 * SX_E_SHAPE for sums not (2,c) or dy/y not x's shape. */
sx_cg_node *sx_cg_norm_res(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *gamma,
                           sx_cg_node *beta, sx_cg_node *res, sx_norm_axes ax, double eps);
sx_cg_node *sx_cg_norm_sums_mask(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *dy,
                                 sx_cg_node *y, sx_norm_axes ax);
sx_cg_node *sx_cg_norm_dx(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *gamma,
                          sx_cg_node *dy, sx_cg_node *sums, sx_cg_node *y, sx_norm_axes ax,
                          double eps);
/* Batch normalisation of x (..., c) as the norm ops with the per-channel axes (lead 0, tail 1,
 * groups c): batch_norm_stats(x) = norm_stats(x) -> (2,c), batch_norm(x, stats, gamma (c),
 * beta (c), eps) = norm(...). Errors as above, and SX_E_RANK for x of rank 0. */
sx_cg_node *sx_cg_batch_norm_stats(sx_cg_graph *g, sx_cg_node *x);
sx_cg_node *sx_cg_batch_norm(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *stats, sx_cg_node *gamma,
                             sx_cg_node *beta, double eps);
/* norm(x, norm_stats(x)) as PyTorch's layers (gamma, beta NULL: no affine). layer_norm: over the
 * last `axes` axes of x (PyTorch's normalized_shape = those axes; gamma/beta of their shape);
 * group_norm: x (n, ..., c) NHWC, channels in `groups` groups (gamma/beta (c));
 * instance_norm: group_norm with one channel per group. */
sx_cg_node *sx_cg_layer_norm(sx_cg_graph *g, sx_cg_node *x, int axes, sx_cg_node *gamma,
                             sx_cg_node *beta, double eps);
sx_cg_node *sx_cg_group_norm(sx_cg_graph *g, sx_cg_node *x, int64_t groups, sx_cg_node *gamma,
                             sx_cg_node *beta, double eps);
sx_cg_node *sx_cg_instance_norm(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *gamma, sx_cg_node *beta,
                                double eps);
/* Per-row cross-entropy of softmax(logits) against target, both (n,k) -> (n). */
sx_cg_node *sx_cg_softmax_xent(sx_cg_graph *g, sx_cg_node *logits, sx_cg_node *target);
sx_cg_node *sx_cg_softmax_xent_backward(sx_cg_graph *g, sx_cg_node *logits, sx_cg_node *target,
                                        sx_cg_node *dout);
/* Cross-entropy against class indices: logits (n,k), idx (n) of their dtype (a class 0..k-1 or
 * `ignore` per row) -> (n), each row's loss (0 where ignored), with label smoothing e
 * (sx_tensor_sparse_xent_out). Its gradient reaches the logits only (sparse_xent_backward: dout
 * (n) -> (n,k)); no one-hot target is made. */
sx_cg_node *sx_cg_sparse_xent(sx_cg_graph *g, sx_cg_node *logits, sx_cg_node *idx, int64_t ignore,
                              double smoothing);
sx_cg_node *sx_cg_sparse_xent_backward(sx_cg_graph *g, sx_cg_node *logits, sx_cg_node *idx,
                                       sx_cg_node *dout, int64_t ignore, double smoothing);

/* Fused scaled-dot-product attention (sx_tensor_attention_ws): q (bh, tq, dh), k and v (bh, tk,
 * dh) -> y (bh, tq, dh + 1), per query row the output o = softmax(scale q k^T + m) v (columns
 * 0..dh-1) and the softmax's log-sum-exp (column dh), m = -inf above the diagonal when causal
 * (key j hidden from query t when j > t + tk - tq; tk >= tq), else 0. The (tq, tk) scores are
 * never stored. sx_cg_attention_o(y) is o (bh, tq, dh), sx_cg_attention_lse(y) the log-sum-exp
 * (bh, tq): slices of y. Its gradient is attention_backward(q, k, v, y, dy) -> (bh, tq + 2 tk,
 * dh), dq, dk and dv of each head one after another (dy's column dh is lse's adjoint). Errors:
 * SX_E_RANK, SX_E_SHAPE (shapes that do not agree, dh or tk of 0, causal with tk < tq),
 * SX_E_DTYPE (not f32 or f64), SX_E_ARG (a non-finite scale; y not of rank 3). */
sx_cg_node *sx_cg_attention(sx_cg_graph *g, sx_cg_node *q, sx_cg_node *k, sx_cg_node *v,
                            double scale, bool causal);
/* attention over the first n_keys keys of each head only (n_keys a one-element node of q's dtype
 * holding an integer 0..tk, read when the graph runs: a generator's filled cache); the other
 * keys are never read, so the cost grows with n_keys. A query that sees no key gets o = 0 and
 * lse = -inf. Errors as sx_cg_attention's, SX_E_SHAPE (n_keys not of one element), and at
 * evaluation SX_E_RANGE (a count that is not an integer in 0..tk); no gradient (sx_ad_grad
 * through it fails with SX_E_UNSUPPORTED). */
sx_cg_node *sx_cg_attention_keys(sx_cg_graph *g, sx_cg_node *q, sx_cg_node *k, sx_cg_node *v,
                                 sx_cg_node *n_keys, double scale, bool causal);
sx_cg_node *sx_cg_attention_o(sx_cg_graph *g, sx_cg_node *y);
sx_cg_node *sx_cg_attention_lse(sx_cg_graph *g, sx_cg_node *y);
sx_cg_node *sx_cg_attention_backward(sx_cg_graph *g, sx_cg_node *q, sx_cg_node *k, sx_cg_node *v,
                                     sx_cg_node *y, sx_cg_node *dy, double scale, bool causal);

/* Random generators owned by the graph, named by an id; a dropout mask draws from one.
 * sx_cg_rng gives access to a generator's state (to save or restore it), NULL for a bad id. */
SX_NODISCARD sx_status sx_cg_rng_new(sx_cg_graph *g, uint64_t seed, int *id);
sx_rng *sx_cg_rng(sx_cg_graph *g, int id);
sx_cg_node *sx_cg_dropout_mask(sx_cg_graph *g, int rng_id, double p, int rank,
                               const int64_t *shape);
/* The rows this graph's dropout masks are of a larger mask (in data-parallel training, a rank's
 * rows of the global batch's): a mask of shape (n, ...) draws rows [first_row, first_row + n) of
 * the mask its generator's state would draw over more rows (sx_tensor_dropout_mask_at), and
 * advances the generator by one draw as always. 0 (the default): the whole mask. Read when a mask
 * is computed; masks already valid keep their values. Errors: SX_E_ARG (NULL, first_row < 0). */
SX_NODISCARD sx_status sx_cg_set_mask_row(sx_cg_graph *g, int64_t first_row);

/* Collectives (cgraph/ops/collective.c): a sum over the processes of a data-parallel
 * job that runs while the graph's evaluation goes on. cgraph knows no transport: a graph is given
 * a communicator, two functions over the caller's context (nn/ lends MPI's, mpi/):
 *   start(ctx, buf, n, dt): start an in-place sum over every process of n elements of buf (f32 or
 *                           f64); returns at once; buf is the communicator's until wait;
 *   wait(ctx, buf): wait until the sum started on buf is complete (at once when none is in
 *                   flight); the first failure of any started sum.
 * Processes must start their sums in the same order. A graph without a communicator (the
 * default, a copy, a loaded graph) is a job of one process: the sum of one value.
 * sx_cg_set_comm(g, NULL) removes it; the functions must outlive their use. Errors: SX_E_ARG (g
 * NULL; a communicator without start or wait). */
typedef struct sx_cg_comm {
    void *ctx;
    sx_status (*start)(void *ctx, void *buf, int64_t n, sx_dtype dt);
    sx_status (*wait)(void *ctx, void *buf);
} sx_cg_comm;
SX_NODISCARD sx_status sx_cg_set_comm(sx_cg_graph *g, const sx_cg_comm *c);
/* allreduce_start(scale, x_1..x_k) -> (sum of the sizes): the bucket. scale * x_1, ..., scale * x_k
 * (scale: one element; every x of its dtype; scale 0 writes zeros, whatever x holds: a rank
 * without rows) packed one after the other, flattened, into the
 * node's own storage (never the arena: the sum writes it while the evaluation goes on), and their
 * sum over the processes started on it (one message per bucket). Never merged, folded or planned;
 * its readers (allreduce_part) wait for the sum. 1 <= k <= SX_CG_MAX_BUCKET. No gradient. */
#define SX_CG_MAX_BUCKET (SX_CG_MAX_INPUTS - 1)
sx_cg_node *sx_cg_allreduce_start(sx_cg_graph *g, sx_cg_node *scale, int k, sx_cg_node *const *xs);
/* allreduce_part(bucket, offset, shape): elements [offset, offset + size) of an allreduce_start's
 * bucket once its sum is complete (the first part evaluated waits for it), as a tensor of `shape`:
 * a view (no copy). No gradient. Errors (the graph's): SX_E_ARG (bucket not an allreduce_start),
 * SX_E_SHAPE (the range outside the bucket). */
sx_cg_node *sx_cg_allreduce_part(sx_cg_graph *g, sx_cg_node *bucket, int64_t offset, int rank,
                                 const int64_t *shape);

sx_cg_node *sx_cg_inv(sx_cg_graph *g, sx_cg_node *a);
sx_cg_node *sx_cg_solve(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b);
sx_cg_node *sx_cg_det(sx_cg_graph *g, sx_cg_node *a);
sx_cg_node *sx_cg_logdet(sx_cg_graph *g, sx_cg_node *a); /* log|det a| */
sx_cg_node *sx_cg_cholesky(sx_cg_graph *g, sx_cg_node *a);
sx_cg_node *sx_cg_qr_q(sx_cg_graph *g, sx_cg_node *a);
sx_cg_node *sx_cg_qr_r(sx_cg_graph *g, sx_cg_node *a);
sx_cg_node *sx_cg_svd_s(sx_cg_graph *g, sx_cg_node *a);
sx_cg_node *sx_cg_eigh_w(sx_cg_graph *g, sx_cg_node *a);
sx_cg_node *sx_cg_eigh_v(sx_cg_graph *g, sx_cg_node *a);

/* Write value into param (same dtype and shape) when evaluated. */
sx_cg_node *sx_cg_assign(sx_cg_graph *g, sx_cg_node *param, sx_cg_node *value);

/* A copy of what outs[0..n) need, as a new lazy graph (*out, owned by the caller), with every
 * input's first axis set to `batch` when batch > 0 (shapes are inferred again, so a graph
 * built for one batch size runs another); constants and parameters are copied with their
 * values, generators with their states. new_outs[i] is the copy of outs[i].
 * Errors (*out = NULL): SX_E_ARG, SX_E_SHAPE and the like when a shape no longer fits (a
 * reshape to a fixed batch size), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_cg_graph_copy(const sx_cg_graph *g, int n, sx_cg_node *const *outs,
                                        int64_t batch, sx_cg_graph **out, sx_cg_node **new_outs);
/* As sx_cg_graph_copy, but the copy's constants and parameters read g's values in place (no
 * copy of the weights): g must outlive the copy, and a value changed in either graph
 * (sx_cg_assign, sx_cg_leaf_set) changes it in both without invalidating the other's readers.
 * For several graphs over one set of weights, e.g. one per batch size. Same errors. */
SX_NODISCARD sx_status sx_cg_graph_copy_shared(const sx_cg_graph *g, int n, sx_cg_node *const *outs,
                                               int64_t batch, sx_cg_graph **out,
                                               sx_cg_node **new_outs);

/* ---------------------------------------------------------------- freezing */

/* Freeze the graph for the given outputs: fix an evaluation order of everything they need and
 * give every node its storage once; later evaluations of these outputs allocate nothing.
 * Building new nodes after freezing is an error (SX_E_STATE); sx_cg_eval may then only ask for
 * frozen outputs or nodes they need. */
SX_NODISCARD sx_status sx_cg_freeze(sx_cg_graph *g, int n, sx_cg_node *const *outputs);
bool sx_cg_frozen(const sx_cg_graph *g);

/* Memory planning at freeze time (a pebble game over the frozen order). The order is fixed, each
 * node's readers are counted, a node's block is released when its last reader has run and the next
 * node takes the released block of closest size that fits (best fit), else new space; an
 * element-wise op may write over an input that nothing reads afterwards. Parameters,
 * constants, inputs and the requested outputs are never shared. All planned blocks live in one
 * arena allocated once. When the plan places values, each node's kernel scratch (a
 * convolution's im2col blocks, Winograd's transformed kernel) is a block of the same arena too,
 * live during that node alone: it takes bytes that no value holds at that step, so scratch and
 * values share memory instead of adding up. */
typedef struct sx_cg_freeze_params {
    bool plan_memory; /* share storage between nodes whose lifetimes do not overlap */
    bool inplace;     /* let ops flagged SX_OPF_INPLACE write over a dying input */
    /* Memory lent for the arena (NULL: none). When the plan fits in it (after aligning its
     * start to 64 bytes), planned values live there and the graph allocates no arena; else the
     * graph allocates its own. The lender keeps it alive as long as this graph lives and uses it
     * for nothing else while this graph evaluates: e.g. the arena of another frozen graph
     * (sx_cg_arena) that never runs at the same time, such as a training graph lending its arena
     * to the evaluation between epochs. Planned values are scratch, so nothing is lost. */
    void *arena;
    size_t arena_bytes;
} sx_cg_freeze_params;
sx_cg_freeze_params sx_cg_freeze_params_default(void); /* planning and in place on, no loan */

typedef struct sx_cg_plan_report {
    size_t arena_bytes;     /* the planned values' part of the arena */
    size_t naive_bytes;     /* one buffer per planned node: the sum of their sizes */
    size_t peak_live_bytes; /* most bytes live at once in this order: a bound no plan beats */
    size_t scratch_bytes;   /* the arena past arena_bytes: kernel scratch planned in it (a
                               node's scratch lives during its step only, over the lowest bytes
                               that no value live then holds; pages it never writes cost no
                               memory) */
    size_t workspace_bytes; /* kernel scratch outside the arena (unplanned graphs, nodes whose
                               scratch is not planned), shared by those nodes */
    int64_t planned_nodes;  /* nodes placed in the arena */
    int64_t inplace_nodes;  /* nodes written over an input */
    bool arena_lent;        /* the arena is the memory lent by sx_cg_freeze_params */
    double seconds;         /* time spent planning */
} sx_cg_plan_report;

/* sx_cg_freeze with options; `report` may be NULL. sx_cg_freeze uses the defaults.
 * After a planned freeze, a node that is not an output holds scratch: its sx_cg_value is
 * unspecified and asking sx_cg_eval for it is SX_E_STATE (freeze with it among the outputs to
 * read it). Report sizes are counted in 64-byte blocks; `seconds` is the whole freeze. */
SX_NODISCARD sx_status sx_cg_freeze_ex(sx_cg_graph *g, int n, sx_cg_node *const *outputs,
                                       const sx_cg_freeze_params *p, sx_cg_plan_report *report);
/* The arena of a frozen, planned graph (its 64-byte aligned start; *bytes its size: the report's
 * arena_bytes + scratch_bytes), or NULL (*bytes = 0) when it has none. Its contents are scratch
 * between evaluations. */
void *sx_cg_arena(const sx_cg_graph *g, size_t *bytes);
/* Check a frozen graph's plan: SX_OK when no two nodes whose lifetimes overlap share bytes,
 * else SX_E_STATE naming the two nodes. For tests. */
SX_NODISCARD sx_status sx_cg_plan_check(const sx_cg_graph *g);

/* ---------------------------------------------------------------- optimiser */

/* Graph-to-graph passes that keep every requested output's value, bit for bit: a rewritten or
 * fused node computes the operations of the nodes it replaces, in the same order and precision
 * (strix is built with -ffp-contract=off, so no a*b+c becomes a hardware fma unless the graph
 * says fma; a folded gemm adds its addend after the product and scales the finished sum by
 * alpha, as separate add and mul nodes do). Training with any passes or none, eagerly, lazily
 * or frozen (planned or not), on any number of kernel threads and engine workers, gives the
 * same weights (tests/nn/test_bits.c; tests/cgraph/test_diff.c checks it on random graphs).
 * Three precise exceptions: x+0 -> x and a sum over axes of size 1 keep a -0 that the
 * unsimplified sum makes +0 (equal values, another sign of zero); SX_PASS_BN_FOLD, off by
 * default, which rounds differently (bounded below); and SX_PASS_ALGEBRA, off by
 * default, whose rewrites hold in exact arithmetic only (log(exp x) -> x and exp(log x) -> x skip
 * two roundings; x*0 -> 0 is wrong for an infinite or NaN x). Passes rewrite the graph in place:
 * handles to the requested outputs stay valid (an output that a pass replaces becomes a view of
 * its replacement); other nodes may be removed (sx_cg_graph_node returns NULL for them). Run to a
 * fixed point; running it again changes nothing. Only lazy, unfrozen graphs. */
typedef enum {
    SX_PASS_DCE,             /* remove nodes no output needs */
    SX_PASS_CSE,             /* merge nodes with the same op, inputs and attributes */
    SX_PASS_CONST_FOLD,      /* compute subgraphs of constants once, at compile time */
    SX_PASS_SIMPLIFY,        /* x+0, x-0, x*1, x/1, --x, x^1, reshape of reshape, permute of
                                permute, sum over size-1 axes */
    SX_PASS_BROADCAST,       /* drop broadcast/repeat/tile feeding an op that broadcasts */
    SX_PASS_GEMM_FOLD,       /* transposes, an addend, and a scalar factor of a product that has
                                neither factor nor addend yet, into the matmul call */
    SX_PASS_FMA,             /* a*b + c -> fma(a, b, c) */
    SX_PASS_POOL_RELU,       /* where(x > 0, maxpool2d_backward(x, d), 0) (relu's gradient through a
                                max pooling) -> maxpool2d_relu_backward(x, d): x dies there, and the
                                result takes its memory when windows do not overlap */
    SX_PASS_ELEMWISE_FUSION, /* chains of element-wise ops -> one loop without temporaries; the
                                assigns of element-wise chains that share nodes (an optimiser
                                step: p, m, v) -> one loop writing them all (fused_update) */
    SX_PASS_GEMM_UPDATE,     /* a fused_update (an optimiser step) whose gradient is a matmul
                                computes it in row blocks (matmul_update): no gradient buffer */
    SX_PASS_ALGEBRA,      /* off by default (changes values): log(exp x) -> x, exp(log x) -> x for
                             x >= 0, x*0 -> 0 (assumes x finite) */
    SX_PASS_BN_FOLD,      /* off by default (changes rounding; sx_nn's inference graphs turn it on):
                             mul(conv2d(x, k), a) -> conv2d(x, mul(k, a)) for a per-output-channel
                             a (f elements or one) when nothing else reads the convolution and the
                             kernel has fewer elements than its output (the kernel's product runs at
                             each evaluation: kept, it would double the weights' memory): batch
                             norm's scale folded into the kernel. Runs before gemm fold
                             and fma in each round. Exact in real arithmetic; in floating point each
                             output differs by a few roundings of sum |x k a| (tests/cgraph/
                             test_opt_bn.c) */
    SX_PASS_BN_RECOMPUTE, /* relu(norm(x, ...)), batch norm (per-channel geometry), with readers
                             after its first (a training graph's backward pass) gets a copy for
                             them, recomputed from the batch norm's inputs (which the gradient
                             keeps): the first relu's memory is freed after its forward reader. Same
                             bits; one more normalise and relu per step for less memory */
    SX_PASS_BN_RELU,      /* relu(norm(...)) whose per-channel norm has no other reader -> one
                             norm op that applies relu in its pass (attr.norm.relu = 1; same
                             bits, one pass fewer) */
    SX_PASS_CONV_EPILOGUE, /* conv2d whose only reader is element-wise (a map, binary op, fma,
                              where or fused chain: a bias or batch norm's shift per channel, a
                              scale, relu, a residual add) -> one conv2d that runs the reader's
                              program on its output rows as it writes them (attr.prog, the
                              reader's other inputs after x and k; sx_tensor_conv2d_fused_out).
                              Same bits, one pass over memory fewer */
    SX_PASS_BN_ADD,        /* add(norm(x, ...), res) (a residual block's end; either order;
                              res of the sum's shape) whose per-channel norm has no other reader ->
                              one norm op that adds res in its pass (a fifth input), and applies
                              relu too when add's only reader is relu (attr.norm.relu = 1). Same
                              bits, one pass over the activations fewer. Runs before element-wise
                              fusion; SX_PASS_BN_RECOMPUTE leaves these batch norms stored (a copy
                              would keep res alive into the backward pass) */
    SX_PASS_COUNT
} sx_cg_pass;

const char *sx_cg_pass_name(sx_cg_pass p);

typedef struct sx_cg_opt_params {
    bool enable[SX_PASS_COUNT]; /* all true by default but SX_PASS_ALGEBRA, SX_PASS_BN_FOLD */
    int max_rounds;             /* fixed-point iterations (default 8) */
} sx_cg_opt_params;
sx_cg_opt_params sx_cg_opt_params_default(void);

typedef struct sx_cg_opt_report {
    int64_t nodes_before, edges_before, nodes_after, edges_after;
    int64_t changed[SX_PASS_COUNT]; /* nodes removed, merged or fused, per pass */
    double pass_seconds[SX_PASS_COUNT];
    double seconds;
    int rounds;
} sx_cg_opt_report;

/* Optimise the graph for the given outputs. `p` and `report` may be NULL. */
SX_NODISCARD sx_status sx_cg_optimise(sx_cg_graph *g, int n, sx_cg_node *const *outputs,
                                      const sx_cg_opt_params *p, sx_cg_opt_report *report);
/* Print a report as a small table (one row per pass). */
void sx_cg_opt_report_print(const sx_cg_opt_report *r, FILE *f);

/* ---------------------------------------------------------------- export */

/* Write the graph as Graphviz DOT: one box per node with its index, op, name, number of users
 * and shape; inputs, parameters and constants are drawn in distinct shapes and colours. In a
 * frozen graph with a memory plan, nodes sharing an arena block share a fill colour and nodes
 * with storage of their own are white. */
SX_NODISCARD sx_status sx_cg_dot_write(const sx_cg_graph *g, FILE *f);
/* The same into a file, written to a temporary name then renamed. */
SX_NODISCARD sx_status sx_cg_dot_save(const sx_cg_graph *g, const char *path);

/* ---------------------------------------------------------------- save and load */

/* Model files and checkpoints. One file holds up to three parts, each optional:
 *   - a graph: the nodes some outputs need, constants and parameter values inline, so that a
 *     program that never saw the code that built it can load it and run it;
 *   - named tensors (weights, optimiser state, whatever the caller must restore);
 *   - metadata: key/value strings (epoch, step, generator states, a network description).
 * Files are little-endian on every host, versioned, and end with a CRC-32 of their contents
 * (the format is described byte by byte at the top of cgraph/serial.c). Loading checks
 * everything before it hands anything out and never trusts a size it has not checked against
 * the bytes really there: a truncated, corrupt or hostile file is an error, never a crash or an
 * allocation the file's bytes do not justify (the one exception: a graph's inputs get their
 * buffers when it is built, as sx_cg_input gives them; one larger than any machine's memory is
 * refused as corrupt). */
typedef struct sx_cg_file sx_cg_file;

/* Write a file at `path` atomically: the bytes go to a new file next to it
 * (path.tmp<pid>-XXXXXX, <pid> the writer's process id), which is flushed, synced and renamed
 * over `path`; on any failure `path` is left as it was and the temporary file is removed. A
 * writer killed mid-write (kill -9) leaves its temporary file behind: the next save to the same
 * path removes those of processes that no longer run.
 * Graph: the nodes that outs[0..n_out) need, inputs before their readers, with the graph's
 * random generators in their current states; outs[i] is stored under out_names[i]. Constants
 * and parameters are stored with their current values; inputs with their dtype and shape only
 * (list inputs among the outputs to find them by name after loading). n_out == 0 writes no
 * graph, and g may then be NULL.
 * Tensors: tensors[i] under tensor_names[i] (any dtype and shape, empty ones too).
 * Metadata: values[i] under keys[i].
 * Names and keys are non-empty and distinct within their part; strings are stored as their
 * bytes (UTF-8 by convention). Nothing the caller passes is modified.
 * Any graph can be saved (lazy or eager, optimised, frozen); saving changes nothing in it.
 * Errors: SX_E_ARG (NULL or negative arguments, an empty or repeated name, a node of another
 * graph or removed by the optimiser, a tensor whose size disagrees with its shape), SX_E_IO
 * (cannot create, write, sync or rename; the message carries the system's reason),
 * SX_E_NOMEM. */
SX_NODISCARD sx_status sx_cg_save(const sx_cg_graph *g, int n_out, sx_cg_node *const *outs,
                                  const char *const *out_names, int n_tensors,
                                  const char *const *tensor_names, const sx_tensor *const *tensors,
                                  int n_meta, const char *const *keys, const char *const *values,
                                  const char *path);

/* Read and validate a whole file: magic, version, the section lengths against the file size,
 * the checksum, then every field (op names, arity, input indices, attributes, dtypes, shapes,
 * names distinct, no byte left over), and finally every node is rebuilt through sx_cg_op_new,
 * so the op's shape rule judges it, and compared with its stored dtype and shape. On success
 * *out owns everything read (the file on disk is no longer needed; free with sx_cg_file_free):
 * the named tensors, the metadata, and for a graph the file's bytes and the graph built from
 * them.
 * Errors (*out = NULL, nothing allocated):
 *   SX_E_IO           cannot open or read the file (with the system's reason), or it is not a
 *                     regular file
 *   SX_E_FORMAT       not a strix file (bad magic), truncated, or corrupt:
 *                     "model.sxm: truncated in section GRPH (...)",
 *                     "model.sxm: checksum mismatch (file corrupt)", or a field that fails
 *                     validation, named with its section and node
 *   SX_E_UNSUPPORTED  "model.sxm: written by a newer strix (format 2, this reads 1)"
 *   SX_E_NOMEM, SX_E_ARG (NULL argument) */
SX_NODISCARD sx_status sx_cg_file_read(const char *path, sx_cg_file **out);
void sx_cg_file_free(sx_cg_file *f); /* NULL is fine */

/* The graph's outputs in the order they were saved: how many (0 when the file holds no graph)
 * and the i-th name (NULL when i is out of range). */
int sx_cg_file_n_outputs(const sx_cg_file *f);
const char *sx_cg_file_output_name(const sx_cg_file *f, int i);
/* The stored graph as a new lazy graph: constants and parameters hold the saved values,
 * generators their saved states, inputs have no value yet. Then outs[i] = the node saved under
 * names[i], for i < n (n may be 0, with names and outs NULL). The caller owns *g
 * (sx_cg_graph_free). The first call hands over the graph sx_cg_file_read built to validate
 * the file (no copy of the weights); later calls build new, independent ones. The graph is
 * always lazy: an eager one would compute each node as it is built, before inputs have values.
 * Errors (*g = NULL, outs untouched): SX_E_ARG (the file holds no graph, no output has one of
 * the names, NULL arguments), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_cg_file_graph(sx_cg_file *f, int n, const char *const *names,
                                        sx_cg_graph **g, sx_cg_node **outs);

/* Named tensors: how many, the i-th name (NULL out of range), and the tensor saved under
 * `name` (NULL if there is none). Tensors belong to the file and stay valid until
 * sx_cg_file_free: read them, or copy them (sx_tensor_clone, sx_cg_leaf_set). */
int sx_cg_file_n_tensors(const sx_cg_file *f);
const char *sx_cg_file_tensor_name(const sx_cg_file *f, int i);
const sx_tensor *sx_cg_file_tensor(const sx_cg_file *f, const char *name);

/* Metadata: how many entries, the i-th key (NULL out of range), and the value saved under
 * `key` (NULL if there is none); strings owned by the file. */
int sx_cg_file_n_meta(const sx_cg_file *f);
const char *sx_cg_file_meta_key(const sx_cg_file *f, int i);
const char *sx_cg_file_meta(const sx_cg_file *f, const char *key);

#ifdef __cplusplus
}
#endif

#endif /* SX_CGRAPH_H */
