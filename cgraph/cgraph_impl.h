/* cgraph_impl.h: the inside of a graph (never installed). The node and graph structs, the op
 * table's per-op functions, and the helpers that shape rules and evaluators share. */
#ifndef SX_CGRAPH_IMPL_H
#define SX_CGRAPH_IMPL_H

#include "sx_cgraph.h"
#include "sx_tensor_kernels.h"
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
    sx_tensor value;     /* dtype, rank, shape fixed at construction; data NULL until storage */
    void *own;           /* storage this node allocated for its value (freed with the graph) */
    size_t ws_bytes;     /* scratch the kernel wants (set by the shape rule; conv ops) */
    char *name;          /* owned; NULL = unnamed */
    int scope;           /* 0 = none, else graph->scopes[scope - 1] */
    double prof_seconds; /* profiling: time in this node's kernel, and runs */
    int64_t prof_calls;
    double prof_cpu;    /* profiling: the process's CPU time during its kernel (sequential runs) */
    sx_cg_node **users; /* live nodes reading this one (each once per input slot) */
    int n_users, cap_users;
    uint64_t hash;      /* structural hash (op nodes) */
    bool valid;         /* value is up to date with the inputs */
    bool dead;          /* removed by the optimiser: skipped everywhere */
    bool borrowed;      /* input whose value.data is the caller's memory */
    bool frozen_member; /* in the frozen evaluation order */
    bool pinned;        /* a requested output of the optimiser: its handle and value must stay */
    int state;          /* traversal scratch: DFS state or input cursor */
    uint32_t mark;      /* traversal scratch: epoch number */
    uint32_t ran;       /* the evaluation (graph->run_epoch) that last computed it */
    /* memory plan (plan.c), set when the graph is frozen with plan_memory */
    bool planned;          /* value.data is a block of the graph's arena, shared over time */
    bool transient;        /* planned, or a view of a planned node: the value is not kept
                              between evaluations (recomputed when a reader needs it) */
    bool plan_need;        /* scratch of a planned evaluation: a running reader reads it */
    int64_t step;          /* position in the frozen order (scratch while planning) */
    size_t plan_offset;    /* planned: byte offset of the block in the arena */
    sx_cg_node *plan_from; /* planned in place: the dying input whose block it took */
    bool ws_planned;       /* its kernel scratch (ws_bytes) is arena bytes [ws_offset, +ws_bytes),
                              free of every value live at its step (plan.c) */
    size_t ws_offset;
};

struct sx_cg_graph {
    sx_cg_mode mode;
    sx_dtype dtype;
    sx_status status; /* first constructor error */
    sx_cg_node **nodes;
    int64_t n_nodes, cap_nodes;
    int64_t *htab; /* open addressing, hcap pairs (node id + 1, its hash); id 0 = empty */
    int64_t hcap, hcount;
    sx_rng *rngs;
    int n_rngs;
    int64_t mask_row; /* sx_cg_set_mask_row */
    sx_cg_comm comm;  /* sx_cg_set_comm: start NULL = a job of one process */
    char **scopes;    /* owned names; nodes refer to them by index + 1 */
    int n_scopes, cur_scope;
    int64_t kernel_calls;
    uint32_t epoch;     /* traversal marks */
    uint32_t run_epoch; /* evaluations so far (node->ran) */
    uint64_t version;   /* bumped whenever a node may lose its validity */
    sx_cg_node **memo;  /* frozen graphs: the last request found all valid, at memo_version */
    int memo_n, memo_cap;
    uint64_t memo_version;
    /* The execution scratch (exec.c), one allocation: the kernel scratch shared by sequential
     * evaluation (ws_bytes, at ws), then, once the graph has been evaluated in parallel, the
     * parallel evaluation's state `par` (par.c: per-worker scratch, push tables). */
    void *ws;
    size_t ws_bytes;
    struct cg_par *par; /* inside ws; NULL until a parallel evaluation lays it out */
    int workers;        /* sx_cg_set_workers: 0 = $SX_ENGINE_WORKERS, else sequential */
    /* profiling (sx_cg_profile_enable) */
    bool profile;
    double prof_seconds[SX_OP_COUNT];
    int64_t prof_calls[SX_OP_COUNT];
    double prof_cpu[SX_OP_COUNT]; /* CPU time of every thread during the kernels (not engine) */
    /* frozen state */
    bool frozen;
    sx_cg_node **order; /* evaluation order of everything the frozen outputs need */
    int64_t n_order;
    sx_cg_node **outputs;
    int n_outputs;
    /* memory plan (plan.c) */
    void *arena_raw; /* the arena's allocation (freed with the graph) */
    char *arena;     /* its 64-byte aligned start: planned values live here */
    size_t arena_bytes;
    int64_t n_planned; /* nodes placed in the arena */
    /* scratch arrays for traversals, grown as needed */
    sx_cg_node **stack;
    int64_t cap_stack;
};

/* The per-op functions named by sx_ops.def, defined in the op's family file (ops/<family>.c).
 * A shape rule validates the inputs and attributes and fills n->value's dtype/rank/shape (and
 * n->ws_bytes); it reports errors with the op's constructor name. An evaluator computes n->value
 * from its inputs' values. A cost function gives the cost of evaluating a node once: its
 * floating-point operations, and whether its kernel is a matrix product (matmul, the
 * convolutions, matmul_update) that splits its rows over threads, the flops the WIDE rule of
 * parallel evaluation compares. The tables that name them (graph.c's sx_cg_ops, cost.c's) make
 * a row without its functions fail to build. */
typedef sx_status (*cg_shape_fn)(sx_cg_node *n);
typedef sx_status (*cg_eval_fn)(sx_cg_graph *g, sx_cg_node *n);
typedef struct cg_cost {
    double flops;
    bool gemm;
} cg_cost;

typedef struct cg_op_info {
    const char *name;
    int arity;
    cg_shape_fn shape;
    cg_eval_fn eval;
    unsigned flags;
    int kernel;
} cg_op_info;

extern const cg_op_info sx_cg_ops[SX_OP_COUNT];

#define X(NAME, name, arity, shape, eval, flags, kernel, nograd)                                   \
    sx_status cg_##shape(sx_cg_node *n);                                                           \
    sx_status cg_##eval(sx_cg_graph *g, sx_cg_node *n);                                            \
    cg_cost cg_##eval##_cost(const sx_cg_node *n);
#include "sx_ops.def"
#undef X

/* The cost of evaluating n once, through the table (cost.c). */
cg_cost cg_node_cost(const sx_cg_node *n);

/* Cost helpers for the family files: no arithmetic; per_elem operations for every element of
 * the result, or of input i; a matrix product of 2 M N K flops (out_size = M N). */
static inline cg_cost cg_cost_none(const sx_cg_node *n)
{
    (void)n;
    return (cg_cost){0, false};
}
static inline cg_cost cg_cost_per_out(const sx_cg_node *n, double per_elem)
{
    return (cg_cost){per_elem * (double)n->value.size, false};
}
static inline cg_cost cg_cost_per_in(const sx_cg_node *n, int i, double per_elem)
{
    return (cg_cost){per_elem * (double)n->in[i]->value.size, false};
}
static inline cg_cost cg_cost_gemm(double out_size, int64_t k)
{
    return (cg_cost){2.0 * out_size * (double)k, true};
}

/* The op an older strix wrote under another name (conv2d_bwd_input for conv2d_backward_input),
 * from the name's bytes b[0..len); -1 when the name was never an op's. For loading saved graphs
 * (opnames.c). */
int cg_op_alias(const unsigned char *b, size_t len);
/* The attributes a, read from a node stored under that old name with the given shape, rewritten
 * as its op now reads them (the batch_norm ops: the norm axes); nothing for plain renames. */
void cg_op_alias_attr(const unsigned char *b, size_t len, int rank, const int64_t *shape,
                      sx_cg_attr *a);

/* A node of the norm family (ops/norm.c) with the per-channel axes (lead 0, tail 1, groups c):
 * batch norm, run on the batch-norm kernels, the one geometry with the fused forms. */
static inline bool cg_norm_per_channel(const sx_cg_node *n)
{
    const sx_tensor *x = &n->in[0]->value;
    const sx_cg_norm_attr *a = &n->attr.norm;
    return a->lead == 0 && a->tail == 1 && x->rank >= 1 && a->groups == x->shape[x->rank - 1];
}
/* May norm n be written over its input i (of the result's size)? The batch-norm kernels read
 * every input of a row before writing it (any input); the group kernels only over x (input 0). */
static inline bool cg_norm_inplace_ok(const sx_cg_node *n, int i)
{
    return i == 0 || (cg_norm_per_channel(n) && n->n_in >= 4);
}

/* How many of where's operands its kernel broadcasts into scratch (those with neither the
 * result's size nor one element): its workspace is that many results (ops/elemwise.c). */
int cg_where_scratch(const sx_cg_node *n);

/* May a matmul be written over its addend (input 2) and keep the bits it has when it is not?
 * When alpha = beta = 1 and the product is summed in one K block (see cg_eval_matmul,
 * ops/matmul.c). Inline: the planner (plan.c) asks, and the ops files sit below it. */
static inline bool cg_matmul_inplace_ok(const sx_cg_node *n)
{
    const sx_tensor *a = &n->in[0]->value;
    const int64_t k = n->attr.trans_a ? a->shape[a->rank - 2] : a->shape[a->rank - 1];
    return n->n_in == 3 && n->attr.alpha == 1.0 && n->attr.beta == 1.0 && sx__gemm_kblocks(k) <= 1;
}

/* How many leading inputs a node writes in place (the kernel column of mutating ops; 0 for
 * every other op). */
static inline int cg_mutated(const sx_cg_node *n)
{
    if (n->op == SX_OP_FUSED_UPDATE || n->op == SX_OP_MATMUL_UPDATE)
        return (int)n->attr.update.stores;
    return (sx_cg_ops[n->op].flags & SX_OPF_MUTATES) ? sx_cg_ops[n->op].kernel : 0;
}

/* matmul_update: a block of gradient rows is about CG_MMU_BLOCK bytes (a share of L2: big
 * enough that the GEMM's packing of the right factor, redone per block, is amortised), and
 * there are CG_MMU_SLOTS scratch blocks: at most that many threads run blocks at once. */
#define CG_MMU_BLOCK (1 << 20)
#define CG_MMU_SLOTS 4
static inline int64_t cg_mmu_rows(int64_t rows, int64_t cols, size_t esz)
{
    int64_t r = (int64_t)(CG_MMU_BLOCK / ((size_t)cols * esz));
    r = r < 8 ? 8 : r - r % 8;
    return r < rows ? r : rows;
}

/* Does `t` broadcast to shape (rank, shape) by repeating itself, NumPy's way over the leading
 * axes: its shape without leading 1s equals the last axes of `shape` (a scalar always does, a
 * per-channel bias over NHWC does)? Element i of the result then reads element i % t->size,
 * which is how the fused kernel reads operands smaller than its result. */
static inline bool cg_trailing_bcast(const sx_tensor *t, int rank, const int64_t *shape)
{
    int lead = 0;
    while (lead < t->rank && t->shape[lead] == 1)
        lead++;
    int r = t->rank - lead;
    if (r > rank)
        return false;
    for (int i = 0; i < r; i++)
        if (t->shape[lead + i] != shape[rank - r + i])
            return false;
    return true;
}

/* Does n read m directly? */
static inline bool cg_reads(const sx_cg_node *n, const sx_cg_node *m)
{
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] == m)
            return true;
    return false;
}

/* The files of cgraph, bottom-up: a file calls only files before it in this list (checked by
 * the cgraph_layers test, tests/layers.cmake; calls through the op table's shape-rule,
 * evaluator and cost columns are dispatch and do not count).
 *   graph.c    nodes, the op table, construction, hashing, leaves, accessors, invalidation
 *   profile.c  kernel timing per op, node and scope
 *   shape.c    the checks shape rules share;  exec.c  running a node or an order
 *   eval.c, cost.c   the generic evaluators and the flop model's table
 *   order.c    requests, marking what they need, the topological order
 *   par.c      the parallel driver
 *   run.c      sx_cg_eval and sx_cg_op_new (eager construction evaluates here)
 *   plan.c     freezing and memory planning
 *   build.c    what the named constructors share
 *   ops/NAME.c one file per op family: its constructors, shape rules, evaluators and costs
 *   opt*.c, copy.c, dot.c, codec.c, serial.c   built on the above */

/* ---- shape.c: for the shape rules */

void cg_set_shape(sx_cg_node *n, int rank, const int64_t *shape);
/* Every input has the dtype of input 0, which becomes the node's (SX_E_DTYPE otherwise). */
sx_status cg_same_dtypes(sx_cg_node *n);
/* Input i has rank `rank` (SX_E_RANK); inputs i and j have one shape (SX_E_SHAPE). */
sx_status cg_want_rank(sx_cg_node *n, int i, int rank);
sx_status cg_want_same_shape(sx_cg_node *n, int i, int j);
/* A descriptor of t for the tensor layer's shape functions: a dummy address when t has no data
 * yet (they check that a non-empty tensor has some, and never read it). */
sx_tensor cg_probe_view(const sx_tensor *t);
/* The node's shape is attr.rank/shape (checked). */
sx_status cg_attr_shape(sx_cg_node *n);

/* ---- build.c: for the named constructors */

/* sx_cg_op_new with one, two or three inputs. */
sx_cg_node *cg_op1(sx_cg_graph *g, sx_cg_op op, sx_cg_node *x, const sx_cg_attr *a);
sx_cg_node *cg_op2(sx_cg_graph *g, sx_cg_op op, sx_cg_node *x, sx_cg_node *y, const sx_cg_attr *a);
sx_cg_node *cg_op3(sx_cg_graph *g, sx_cg_op op, sx_cg_node *x, sx_cg_node *y, sx_cg_node *z,
                   const sx_cg_attr *a);
/* A pointer argument is not NULL (else SX_E_ARG recorded on g, naming `who`, and false). */
bool cg_arg_ok(sx_cg_graph *g, const void *p, const char *who);
/* attr.rank/shape = (rank, shape), or SX_E_RANK recorded on g and false. */
bool cg_set_target_shape(sx_cg_graph *g, sx_cg_attr *a, int rank, const int64_t *shape,
                         const char *who);
/* Copy x's rank of entries of src (when both are given) into dst (attr.ints). */
void cg_copy_ints(int64_t *dst, const int64_t *src, const sx_cg_node *x);
/* A negative axis of x counted from the end (the shape rule checks the range). */
int cg_norm_axis(const sx_cg_node *x, int axis);

/* ---- graph.c */

/* Record a constructor error on the graph (first one wins) and return NULL-friendly status. */
sx_status cg_fail(sx_cg_graph *g, sx_status s);
/* "sx_cg_<op>" for messages. */
const char *cg_who(const sx_cg_node *n);
/* Construction up to linking: the checks, the shape rule and the structural-hash lookup.
 * Returns a live twin already in the graph (*fresh = false), or a new node not linked yet
 * (*fresh = true) that cg_op_link links or cg_node_discard frees. NULL, with the error recorded
 * on the graph, on failure. */
sx_cg_node *cg_op_make(sx_cg_graph *g, sx_cg_op op, int n_in, sx_cg_node *const *in,
                       const sx_cg_attr *attr, bool *fresh);
/* Link a node from cg_op_make into the graph; on failure the graph is unchanged. */
sx_status cg_op_link(sx_cg_graph *g, sx_cg_node *n);
/* Free a node from cg_op_make that was not linked. */
void cg_node_discard(sx_cg_node *n);
/* A constant or parameter of g over x's value (not copied; x's graph must outlive g's use of
 * it), named as sx_cg_graph_copy names it; x->value.data must not be NULL
 * (sx_cg_graph_copy_shared). */
sx_cg_node *cg_leaf_share(sx_cg_graph *g, const sx_cg_node *x);
/* Make room for `extra` more users of n. */
sx_status cg_reserve_users(sx_cg_node *n, int extra);
/* Rebuild the structural-hash table; find a live twin of n (NULL if none). */
sx_status cg_rehash(sx_cg_graph *g);
sx_cg_node *cg_hash_twin(sx_cg_graph *g, sx_cg_node *n);
/* Grow the graph's traversal stack to hold `need` nodes. */
sx_status cg_reserve_stack(sx_cg_graph *g, int64_t need);
/* Mark n and everything depending on it invalid (stops at nodes already invalid). */
void cg_invalidate(sx_cg_graph *g, sx_cg_node *n);

/* ---- exec.c */

/* The scratch buffer of at least `bytes` (grown when not frozen; SX_E_STATE if a frozen graph
 * would need to grow it, which freezing prevents). On an engine worker: that worker's. */
sx_status cg_workspace(sx_cg_graph *g, size_t bytes, void **ws);
/* Give a node storage for its value if it has none (its own buffer). */
sx_status cg_storage(sx_cg_graph *g, sx_cg_node *n);
/* Compute one node whose inputs are valid; marks it valid and counts the kernel call. */
sx_status cg_compute(sx_cg_graph *g, sx_cg_node *n);
/* Compute one node on an engine worker, with `ws` (ws_bytes) as its kernel scratch and its
 * kernel time in *seconds (profiling); storage was given beforehand, the counting is the
 * caller's (cg_count_run). */
sx_status cg_compute_on(sx_cg_graph *g, sx_cg_node *n, void *ws, size_t ws_bytes, double *seconds);
/* Count a kernel run of n that took `seconds` (profiling), and `cpu` seconds of the process's
 * CPU time (all its threads; 0 on an engine worker, where other nodes run at the same time). */
void cg_count_run(sx_cg_graph *g, sx_cg_node *n, double seconds, double cpu);
/* Does the node at an order position run in this evaluation: plan_need when by_need (a planned
 * evaluation, see cg_plan_select), else when it is invalid? */
static inline bool cg_runs(const sx_cg_node *x, bool by_need)
{
    return by_need ? x->plan_need : !x->valid;
}
/* Run the nodes of order[0..len) that run (cg_runs), one after the other. */
sx_status cg_run_seq(sx_cg_graph *g, sx_cg_node *const *order, int64_t len, bool by_need);
/* After an evaluation that ran the nodes of order[0..len): invalidate what read a parameter
 * that one of them wrote. */
void cg_finish_run(sx_cg_graph *g, sx_cg_node *const *order, int64_t len);

/* ---- order.c */

/* Check a request (`who` names it in messages): a graph, and n live nodes of it. */
sx_status cg_check_request(const char *who, sx_cg_graph *g, int n, sx_cg_node *const *nodes);
/* Grow a request memo to n nodes; NULL (and no error left set) when out of memory. */
sx_cg_node **cg_realloc_nodes(sx_cg_node **p, int n);
/* Mark (with a new epoch) every node the roots need: all ancestors when `all`, otherwise only
 * invalid ones (valid nodes are not entered). *count = how many were marked. */
sx_status cg_mark_needed(sx_cg_graph *g, int n, sx_cg_node *const *roots, bool all, int64_t *count);
/* Post-order DFS over the marked set, honouring the extra dependencies of mutating nodes.
 * Writes the order into out (room for `count` nodes). Uses g->stack as the DFS stack. */
sx_status cg_topo_order(sx_cg_graph *g, int n, sx_cg_node *const *roots, int64_t count,
                        sx_cg_node **out, int64_t *n_out);

/* ---- par.c */

/* Evaluate the nodes of `order` that run (cg_runs) on an engine of `workers` workers, with
 * the same results as cg_run_seq. *done = false when no engine is free (nothing happened:
 * run sequentially). */
sx_status cg_par_run(sx_cg_graph *g, int workers, sx_cg_node *const *order, int64_t len,
                     bool by_need, bool *done);
/* Lay out what a frozen graph's parallel evaluations use, so that they allocate nothing.
 * n_planned >= 0: the plan is not committed yet and has that many planned nodes. */
sx_status cg_par_prepare_frozen(sx_cg_graph *g, int workers, sx_cg_node *const *order, int64_t len,
                                int64_t n_planned);

/* ---- plan.c */

/* Check a request to a frozen graph (planned or not) and mark (plan_need) the nodes of the
 * order that its evaluation runs: the invalid kept nodes the request needs, and the transient
 * nodes running nodes read. The caller runs them in the frozen order and clears plan_need. */
sx_status cg_plan_select(sx_cg_graph *g, int n, sx_cg_node *const *nodes);

#endif
