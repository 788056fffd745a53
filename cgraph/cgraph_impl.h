/* cgraph_impl.h: the inside of a graph (never installed). The node and graph structs, the op
 * table's per-op functions, and the helpers that shape rules and evaluators share. */
#ifndef SX_CGRAPH_IMPL_H
#define SX_CGRAPH_IMPL_H

#include "sx_cgraph.h"
#include "tensor_impl.h"

#define SX_CG_INLINE_INPUTS 3

struct sx_cg_node {
    sx_cg_graph *graph;
    int64_t id; /* index in graph->nodes */
    sx_cg_op op;
    int n_in;
    sx_cg_node **in; /* inline_in, or an array of n_in owned by the node (variadic ops) */
    sx_cg_node *inline_in[SX_CG_INLINE_INPUTS];
    sx_cg_attr attr;
    sx_tensor value;    /* dtype, rank, shape fixed at construction; data NULL until storage */
    void *own;          /* storage this node allocated for its value (freed with the graph) */
    size_t ws_bytes;    /* scratch the kernel wants (set by the shape rule; conv ops) */
    char *name;         /* owned; NULL = unnamed */
    sx_cg_node **users; /* live nodes reading this one (each once per input slot) */
    int n_users, cap_users;
    uint64_t hash;      /* structural hash (op nodes) */
    bool valid;         /* value is up to date with the inputs */
    bool dead;          /* removed by the optimiser: skipped everywhere */
    bool borrowed;      /* input whose value.data is the caller's memory */
    bool frozen_member; /* in the frozen evaluation order */
    uint8_t state;      /* traversal scratch: DFS state */
    uint32_t mark;      /* traversal scratch: epoch number */
};

struct sx_cg_graph {
    sx_cg_mode mode;
    sx_dtype dtype;
    sx_status status; /* first constructor error */
    sx_cg_node **nodes;
    int64_t n_nodes, cap_nodes;
    int64_t *htab; /* open addressing: node id + 1, 0 = empty */
    int64_t hcap, hcount;
    sx_rng *rngs;
    int n_rngs;
    int64_t kernel_calls;
    uint32_t epoch; /* traversal marks */
    void *ws;       /* shared kernel scratch */
    size_t ws_bytes;
    /* frozen state */
    bool frozen;
    sx_cg_node **order; /* evaluation order of everything the frozen outputs need */
    int64_t n_order;
    sx_cg_node **outputs;
    int n_outputs;
    /* scratch arrays for traversals, grown as needed */
    sx_cg_node **stack;
    int64_t cap_stack;
};

/* The per-op functions named by sx_ops.def. A shape rule validates the inputs and attributes
 * and fills out->value's dtype/rank/shape (and out->ws_bytes); it reports errors with the op's
 * constructor name. An evaluator computes n->value from its inputs' values. */
typedef sx_status (*cg_shape_fn)(sx_cg_node *n);
typedef sx_status (*cg_eval_fn)(sx_cg_graph *g, sx_cg_node *n);

typedef struct cg_op_info {
    const char *name;
    int arity;
    cg_shape_fn shape;
    cg_eval_fn eval;
    unsigned flags;
    int kernel;
} cg_op_info;

extern const cg_op_info sx_cg_ops[SX_OP_COUNT];

#define X(NAME, name, arity, shape, eval, flags, kernel)                                           \
    sx_status cg_##shape(sx_cg_node *n);                                                           \
    sx_status cg_##eval(sx_cg_graph *g, sx_cg_node *n);
#include "sx_ops.def"
#undef X

/* Record a constructor error on the graph (first one wins) and return NULL-friendly status. */
sx_status cg_fail(sx_cg_graph *g, sx_status s);
/* The scratch buffer of at least `bytes` (grown when not frozen; SX_E_STATE if a frozen graph
 * would need to grow it, which freezing prevents). */
sx_status cg_workspace(sx_cg_graph *g, size_t bytes, void **ws);
/* Give a node storage for its value if it has none (its own buffer). */
sx_status cg_storage(sx_cg_graph *g, sx_cg_node *n);
/* Compute one node whose inputs are valid; marks it valid and counts the kernel call. */
sx_status cg_compute(sx_cg_graph *g, sx_cg_node *n);
/* Grow the graph's traversal stack to hold `need` nodes. */
sx_status cg_reserve_stack(sx_cg_graph *g, int64_t need);
/* Mark n and everything depending on it invalid (stops at nodes already invalid). */
void cg_invalidate(sx_cg_graph *g, sx_cg_node *n);
/* "sx_cg_<op>" for messages. */
const char *cg_who(const sx_cg_node *n);

#endif
