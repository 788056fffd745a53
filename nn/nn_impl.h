/* nn_impl.h: the inside of networks and compiled models (never installed). */
#ifndef SX_NN_IMPL_H
#define SX_NN_IMPL_H

#include "sx_nn.h"

/* Limits, each checked where a layer is made: inputs of a merge layer (nn_layer_begin); tensors
 * a layer keeps, e.g. weight and bias, or gamma, beta and running statistics, room for an
 * attention layer's four projections and biases (nn_layer_add_param); optimiser states per
 * parameter (ensure_states in compile.c). */
#define NN_MAX_IN 16
#define NN_MAX_PARAMS 8
#define NN_MAX_STATES 3

/* Layer kinds, one per row of layers.def. */
typedef enum {
#define X(kind, ops) L_##kind,
#include "layers.def"
#undef X
    L_KIND_COUNT
} nn_kind;

/* A layer's stored tensors: trainable parameters (weight, bias, gamma, beta) and state updated
 * by the forward pass itself (batch norm's running statistics). */
typedef struct nn_param {
    sx_tensor *value;
    char name[96];
    bool trainable;
    bool regularised;                /* weights, not biases */
    sx_tensor *state[NN_MAX_STATES]; /* optimiser state, created at compile time */
    sx_optim_kind state_kind;        /* which optimiser the state belongs to */
    /* A slot that uses another layer's parameter (sx_nn_share) stores nothing: value NULL,
     * src_layer/src_k the parameter it reads (never itself shared), transposed when it reads
     * that (2-d) parameter transposed. Loops over what a network stores skip it
     * (nn_param_stored). */
    const sx_nn_layer *src_layer;
    int src_k;
    bool transposed;
} nn_param;

/* The parameter stores its own tensor (it is not a shared slot). */
static inline bool nn_param_stored(const nn_param *p)
{
    return p->src_layer == NULL;
}
/* The tensor holding p's values: its own, or its source's for a shared slot (params.c). */
const sx_tensor *nn_param_value(const nn_param *p);

typedef struct nn_build nn_build;

/* The interface of a layer kind: one constant per kind, defined in the kind's file and listed in
 * layers.def. A layer is made by its public constructor (in the same file), which calls
 * nn_layer_begin, checks its options, writes its output shape (l->rank, l->shape, batch axis
 * excluded) and its options (l->attr, a struct of attr_size bytes of its own), adds its
 * parameters with nn_layer_add_param, and ends with nn_layer_finish. Afterwards only these
 * functions see the layer:
 * - forward: the layer's output node (batch axis first) from its inputs' nodes in[0..n_in-1],
 *   for b->mode (NN_TRAIN or NN_INFER); parameters through nn_param_node_of(b, l, k). A layer
 *   ending in a softmax activation writes the node before it to *pre_softmax (the loss folds the
 *   softmax in); others leave it NULL. NULL on failure (the graph's status, or b->err).
 * - describe: its options in a few words for sx_nn_net_print ("5x5 /1 same relu"), "" if none.
 * Saving needs no function of its own: a model file holds the graph forward builds (each op's
 * attributes in it), a checkpoint the parameters by name. */
typedef struct nn_layer_ops {
    const char *name; /* default layer names: name_1, name_2, ... */
    size_t attr_size; /* bytes of the kind's options (l->attr), 0 for none */
    sx_cg_node *(*forward)(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                           sx_cg_node **pre_softmax);
    void (*describe)(const sx_nn_layer *l, char *buf, size_t size);
} nn_layer_ops;

#define X(kind, ops) extern const nn_layer_ops ops;
#include "layers.def"
#undef X

struct sx_nn_layer {
    nn_kind kind;
    const nn_layer_ops *ops;
    char name[64];
    int index; /* position in the network */
    int n_in;
    sx_nn_layer *in[NN_MAX_IN];
    int rank; /* output shape without the batch axis */
    int64_t shape[SX_MAX_RANK];
    void *attr; /* the kind's options (ops->attr_size bytes, zeroed), owned */
    int n_params;
    nn_param params[NN_MAX_PARAMS];
};

/* A network's preprocessing (preprocess.c; sx_nn.h's "preprocessing"): all owned. */
typedef struct nn_prep {
    double scale; /* raw element -> value; 0: not set */
    int64_t norm_n;
    double *mean, *std; /* (norm_n) */
    int64_t target_n;
    double *tmean, *tstd; /* (target_n) */
    int64_t n_classes;
    char **classes; /* (n_classes) */
    int64_t n_features;
    char **features; /* (n_features) */
    sx_ds_resize resize;
    bool in_graph; /* the graph applies it (false: a model file before version 3) */
} nn_prep;

/* Free what p owns and zero it, keeping its scale, resize and in_graph (net.c). */
void nn_prep_free(nn_prep *p);
/* The network's preprocessing fixed for compiling: an unset scale becomes 1. */
void nn_prep_freeze(sx_nn_net *net);
/* The preprocessing against the network's input and output layers (SX_E_SHAPE, SX_E_STATE). */
sx_status nn_prep_check(const char *who, const sx_nn_net *net);
/* x (batch, input) raw -> the values the first layers read. */
sx_cg_node *nn_prep_input(nn_build *b, const sx_nn_net *net, sx_cg_node *x);
/* Inference: out -> out * target_std + target_mean (out itself without target scaling). */
sx_cg_node *nn_prep_output(sx_cg_graph *g, const sx_nn_net *net, sx_cg_node *out);
/* Training: targets y -> (y - target_mean) / target_std (y itself without target scaling). */
sx_cg_node *nn_prep_target(sx_cg_graph *g, const sx_nn_net *net, sx_cg_node *y);
/* sx_nn_fit's data against the network: adopts what the network has not yet (scale,
 * normalisation from p->augment or a standardised source, standardize statistics, class and
 * feature names), checks what it has, replaces a standardised source by its parent and clears
 * p->augment's mean and std (the graph normalises). adopt false (evaluation, prediction):
 * nothing adopted, everything checked. */
sx_status nn_prep_sources(const char *who, sx_nn_net *net, sx_nn_fit_params *p,
                          const sx_ds_source **train, const sx_ds_source **val, bool adopt);
/* A checkpoint's preprocessing (file) against the network's (have): each part the network has
 * must equal the file's (SX_E_STATE naming it); with apply, the parts the network lacks are
 * moved from file into have. */
sx_status nn_prep_merge(const char *path, const char *net_name, nn_prep *have, nn_prep *file,
                        bool apply);
/* The model file's metadata for p (keys/values appended at *n; the strings in buf, owned by
 * the caller: nn_prep_meta_free). */
typedef struct nn_prep_meta {
    char *vals[8];
    const char *keys[8];
    int n;
} nn_prep_meta;
sx_status nn_prep_meta_make(const nn_prep *p, nn_prep_meta *out);
void nn_prep_meta_free(nn_prep_meta *m);
/* A model file's preprocessing metadata into p (version >= 3); SX_E_FORMAT naming path. */
sx_status nn_prep_meta_read(const char *path, const sx_cg_file *f, nn_prep *p);
/* The same from any key/value store: get(ctx, key) is the value or NULL (an ONNX file's
 * metadata_props). */
typedef struct nn_meta_src {
    const char *(*get)(const void *ctx, const char *key);
    const void *ctx;
} nn_meta_src;
sx_status nn_prep_meta_read_from(const char *path, const nn_meta_src *src, nn_prep *p);
/* A loaded or imported model's preprocessing description against its x and y (SX_E_FORMAT
 * naming path). */
sx_status nn_model_prep_check(const char *path, const sx_nn_model *m);
/* A model's preprocessing: its network's, or a loaded or imported model's own (NULL for NULL). */
const nn_prep *nn_model_prep(const sx_nn_model *m);

struct sx_nn_net {
    char name[64];
    sx_dtype dtype;
    uint64_t seed;
    sx_rng init_rng;    /* weight initialisation */
    sx_rng dropout_rng; /* dropout masks: carried from step to step and into checkpoints */
    sx_status status;
    char error[512]; /* why: "layer 'dense_3' refused: <the first message>", or "" */
    sx_nn_layer **layers;
    int n_layers, cap_layers;
    int counters[L_KIND_COUNT];
    sx_nn_init init;
    nn_prep prep;       /* what turns raw data into the input, and the output into answers */
    int64_t step;       /* training steps done (1-based step of the next one is step + 1) */
    int64_t epoch;      /* epochs done */
    int64_t epoch_step; /* steps done in the current epoch (a checkpoint may fall mid-epoch) */
    int n_models;       /* compiled models alive: they borrow the layers, so none may be added */
    int n_train_models; /* training models alive among them, all with optimiser train_kind */
    sx_optim_kind train_kind; /* (they share the parameters' optimiser state) */
    bool orphan;              /* sx_nn_net_free was called: the last model frees the network */
    bool adding_input;        /* sx_nn_input_add is making a further input layer */
    /* named outputs (outputs.c, sx_nn_output): none marked, the last layer is the output */
    int n_outputs;
    sx_nn_layer *outputs[SX_NN_MAX_HEADS];
    char output_names[SX_NN_MAX_HEADS][32];
    sx_nn_layer flat_out; /* with several outputs, what the network outputs: (total), their
                             elements one after another (its rank and shape only) */
};

/* Generation with a key/value cache (generate.c): a step graph runs one new position of each
 * sequence (its x is (batch, 1)). The layers that depend on where a position is read this:
 * the position embedding takes row `pos` of its table; attention rotates (rope) at `pos`,
 * attends over the filled part of its cache (the `pos` keys and values before: the cost of a step
 * grows with the position, not with max_len) and the step's own key and value, and records those
 * (k_new, v_new) for the generator to append. */
typedef struct nn_gen {
    int64_t batch, max_len;
    sx_cg_node *pos; /* (1, 1) input: the step's position (the keys cached), of the net's dtype */
    /* per layer index; attention layers only: */
    sx_tensor **k_cache, **v_cache; /* (batch heads, max_len, dh), owned by the generator */
    sx_cg_node **k_new, **v_new;    /* (batch heads, 1, dh): the step's key and value */
} nn_gen;

/* Graph building (forward.c; the parameter nodes and the nodes a layer records: net.c). */
typedef enum { NN_TRAIN, NN_INFER } nn_mode;
struct nn_build {
    nn_gen *gen; /* a generation step's graph (inference), or NULL */
    sx_cg_graph *g;
    nn_mode mode;
    int rng_id;         /* dropout generator of the graph */
    sx_cg_node **masks; /* dropout mask nodes made (invalidated every step) */
    int n_masks, cap_masks;
    sx_cg_node **updates; /* running-statistics assigns made in training */
    int n_updates, cap_updates;
    sx_cg_node *
        *param_nodes; /* the graph node of each (layer, param): [layer * NN_MAX_PARAMS + i] */
    sx_status err;    /* a failure the graph does not record (an allocation of these arrays) */
    bool out_softmax[SX_NN_MAX_HEADS]; /* nn_forward: output k ends in a softmax (its logits
                                          are the value before it) */
};

/* Build the forward graph from input node x (batch, input shape). *out: the network's output;
 * *logits: the output layer's value before a final softmax (== *out otherwise). With several
 * outputs (sx_nn_output), *out is (batch, total): each output flattened, one after another, and
 * *logits likewise from each output's logits (b->out_softmax says which end in a softmax). The
 * param nodes borrow the network's tensors. */
sx_status nn_forward(sx_nn_net *net, nn_build *b, sx_cg_node *x, sx_cg_node **out,
                     sx_cg_node **logits);
/* The graph node of a layer's parameter in this build (NULL before it is made). */
sx_cg_node *nn_param_node(nn_build *b, const sx_nn_net *net, int layer, int param);
/* The graph node of layer l's parameter k, made (borrowing the tensor) on first use. */
sx_cg_node *nn_param_node_of(nn_build *b, const sx_nn_layer *l, int k);
/* Remember a node of the build: a dropout mask (re-drawn every step) or a running-statistics
 * assign (run with the training step). SX_OK or SX_E_NOMEM, also recorded in b->err. */
sx_status nn_build_add_mask(nn_build *b, sx_cg_node *mask);
sx_status nn_build_add_update(nn_build *b, sx_cg_node *assign);
void nn_build_free(nn_build *b);

/* ---------------------------------------------------------------- making layers (net.c) */

/* Start a layer of `kind` for the public function `who`: checks the net and inputs (a NULL input
 * propagates the network's first error), names it, copies in[0]'s shape as the output's, and
 * allocates its zeroed attr. NULL on error (recorded in the net). */
sx_nn_layer *nn_layer_begin(sx_nn_net *net, const char *who, nn_kind kind, int n_in,
                            sx_nn_layer *const *in);
/* Append the layer when s is SX_OK and its output shape fits; else free it and record s (its
 * message prefixed with who). Returns the layer or NULL. */
sx_nn_layer *nn_layer_finish(sx_nn_net *net, const char *who, sx_nn_layer *l, sx_status s);
/* Record an error on the network (the first wins, with sx_last_error() as its cause); returns
 * NULL. */
sx_nn_layer *nn_layer_fail(sx_nn_net *net, sx_status s);
/* The network's first error again, for the public function `who` called on it later: sets
 * "who: network 'NAME': layer 'dense_3' refused: <the first message>" and returns its status. */
sx_status nn_net_refused(const char *who, const sx_nn_net *net);
/* Add a parameter tensor "<layer>.<what>" of the given shape to l, filled with `fill`, or with
 * the network's initialiser (fan_in, fan_out as for a dense layer) when fill is NAN. */
sx_status nn_layer_add_param(sx_nn_net *net, sx_nn_layer *l, const char *what, int rank,
                             const int64_t *shape, double fill, int64_t fan_in, int64_t fan_out,
                             bool trainable, bool regularised);
/* True when dims are >= 1 and the element count's bytes fit in int64 (batch axis checked at
 * compile time). */
bool nn_shape_fits(int rank, const int64_t *shape);
/* A shape given by the user: rank 1..SX_MAX_RANK-1, dims >= 1, an element count that fits. */
sx_status nn_user_shape(const char *who, const char *name, int rank, const int64_t *shape);

/* What the generator (generate.c) asks of a layer's options: a dense layer over the flattened
 * input (dense.c); the trailing axes a layer norm normalises, 0 for group and instance norm
 * (norm.c); a softmax layer's axis of the example, 0..rank-1 (softmax.c); whether an attention
 * layer is causal (attention.c). */
bool nn_dense_flattens(const sx_nn_layer *l);
int nn_norm_axes(const sx_nn_layer *l);
int nn_softmax_axis(const sx_nn_layer *l);
bool nn_attention_causal(const sx_nn_layer *l);

/* ---------------------------------------------------------------- activations (activation.c) */

bool nn_act_ok(sx_nn_act act);
/* The parameter an activation takes when none is given: leaky_relu's slope, elu's alpha. */
double nn_act_default_param(sx_nn_act act);
/* y = act(x) (x itself for SX_ACT_NONE); NULL when x is NULL. */
sx_cg_node *nn_activate(sx_cg_graph *g, sx_cg_node *x, sx_nn_act act, double param);
/* The output of a layer ending in activation act over its pre-activation y: *pre_softmax = y
 * when act is softmax. */
sx_cg_node *nn_activate_last(sx_cg_graph *g, sx_cg_node *y, sx_nn_act act, double param,
                             sx_cg_node **pre_softmax);

#define NN_SMALLER 4  /* graphs for smaller batches a model keeps */
#define NN_REPLICAS 8 /* sub-batch graphs sx_nn_model_predict runs side by side, at most */
/* The metadata a loaded model keeps from its file for sx_nn_model_save (the rest is parsed). */
#define NN_FILE_META 4 /* "network", "model_version", "outputs", "inputs" */

/* A training model's data-parallel state (parallel.c): its gradients are summed over
 * the ranks by the compiled step itself, in buckets (cgraph's allreduce_start / allreduce_part,
 * through the communicator lent to the graph, `cg`). */
typedef struct nn_dp {
    const sx_nn_comm *comm;
    sx_cg_comm cg; /* the graph's communicator: comm's start and wait (or allreduce) */
    sx_cg_node *w; /* the scalar input: this rank's share of the global batch */
    int bucket_at; /* the buckets' allreduce_start nodes: outs[bucket_at ..) */
    int n_buckets;
    double weight;        /* this rank's share of the global batch (1/size; 0: no rows) */
    int64_t first_row;    /* this rank's first row of the global batch (its dropout masks') */
    int64_t bytes;        /* gradient bytes summed per step (the buckets') */
    sx_cg_node **buckets; /* the allreduce_start nodes as made (outs[bucket_at ..) once
                             compiled: the optimiser may replace nodes) */
    sx_cg_graph *g;       /* the graph they live in */
} nn_dp;

/* A model whose graph outside code builds (onnx/): build writes a new lazy graph (*g, owned by
 * the caller) holding the plain inference graph for batches of n, its input *x (n, example)
 * and output *y (n, classes) of x's dtype; free (may be NULL) releases ctx. */
typedef struct nn_model_source {
    sx_status (*build)(void *ctx, int64_t n, sx_cg_graph **g, sx_cg_node **x, sx_cg_node **y);
    void (*free)(void *ctx);
    void *ctx;
    bool optimise; /* run the graph optimiser on each graph built */
} nn_model_source;

/* A model is a small core (its graph, the shapes it takes and gives) and the parts of its role.
 * Roles: compiled over a network (part `c`, c.net set), for training (part `train` too) or
 * inference; or loaded from a model file or imported through a source (part `file`). Every
 * inference model predicts through the same path (part `pred`: its graphs for smaller batches
 * and its sub-batch replicas, themselves models whose `owner` is this one).
 * Ownership: a model owns its graph, its staging tensors and every part it points to, except
 * that a model with an owner (a smaller graph or replica) borrows its owner's `file` part and
 * may plan in its owner's arena (`lend`); the owner frees them after its smaller graphs and
 * replicas. A compiled model borrows its network (counted in net->n_models). */

/* Part of a model compiled over a network. */
typedef struct nn_model_net {
    sx_nn_net *net;            /* borrowed, counted in net->n_models (NULL: not compiled) */
    sx_nn_train_params params; /* the training parameters (an inference model: the defaults) */
    nn_build b;                /* the build's parameter nodes, masks and updates (owned) */
    int n_layers;     /* the network's layers when the model was made (b.param_nodes has as many) */
    bool softmax_out; /* the network's last layer ends in a softmax (out != its logits) */
} nn_model_net;

/* Part of a training model: the inputs and results of a step (nodes of the model's graph). */
typedef struct nn_model_train {
    sx_cg_node *y, *lr, *step, *loss, *correct;
    sx_cg_node *yt;         /* the targets the loss reads: y, standardised when the network
                               scales them */
    const sx_nn_comm *comm; /* the communicator (borrowed; NULL: alone) */
    nn_dp *dp;              /* its data-parallel state (owned; NULL: alone) */
} nn_model_train;

/* Part of a loaded or imported model: what the file or source says (owned by the model without
 * an owner; its smaller graphs and replicas point to the same part). A loaded model holds its
 * weights once, in `plain`, the file's graph as read (the file's bytes are freed after
 * loading); the model's graph and every smaller graph are copies of it for their batch sizes
 * whose leaves read plain's values in place (sx_cg_graph_copy_shared). */
typedef struct nn_model_file {
    sx_cg_graph *plain;       /* a loaded model's file graph, else NULL */
    sx_cg_node *plain_x;      /* its input (file batch, example) */
    sx_cg_node *plain_y;      /* its output (file batch, result) */
    nn_model_source *src;     /* an imported model's builder (nn_model_from_source) */
    char *meta[NN_FILE_META]; /* a loaded model's metadata for saving (NULL: absent) */
    nn_prep prep;             /* the preprocessing it describes */
    int n_parts;              /* its outputs: names, shapes */
    char part_names[SX_NN_MAX_HEADS][32];
    int part_rank[SX_NN_MAX_HEADS];
    int64_t part_shape[SX_NN_MAX_HEADS][SX_MAX_RANK];
    int n_in_parts; /* its inputs (version-2 files): shapes */
    int in_part_rank[SX_NN_MAX_HEADS];
    int64_t in_part_shape[SX_NN_MAX_HEADS][SX_MAX_RANK];
} nn_model_file;

/* Part of an inference model for prediction (predict.c), each graph made on demand and owned. */
typedef struct nn_model_predict {
    sx_nn_model *smaller[NN_SMALLER]; /* inference graphs for smaller batches */
    sx_nn_model *rep[NN_REPLICAS];    /* graphs for sub-batches of `sub` rows, one per thread,
                                         each with its own arena (predict_split) */
    int64_t sub;                      /* rows per sub-batch (0: whole batches), once sub_known */
    bool sub_known;
    int64_t sub_set; /* sx_nn_model_set_sub_batch's rows (0: automatic) */
} nn_model_predict;

struct sx_nn_model {
    /* the core */
    sx_dtype dtype;
    int64_t batch;
    int in_rank; /* the input without the batch axis */
    int64_t in_shape[SX_MAX_RANK];
    int64_t classes;
    int out_rank; /* the result of one example (predict's out without the batch axis) */
    int64_t out_shape[SX_MAX_RANK];
    bool ids_in;         /* every input takes ids: integer batches are accepted */
    sx_cg_graph *g;      /* owned */
    sx_cg_node *x, *out; /* its input and output */
    sx_cg_node **outs;   /* what a run computes (owned array) */
    int n_outs;
    sx_tensor *stage_x, *stage_y; /* integer batches converted (nn_batch_float), owned */
    sx_nn_compile_report report;
    sx_nn_model *owner; /* the model this one is a smaller graph or replica of, or NULL */
    void *lend;         /* arena lent by another model (nn_compile_infer_lent), or NULL */
    size_t lend_bytes;
    /* the parts */
    nn_model_net c;        /* compiled over a network (c.net NULL otherwise) */
    nn_model_train *train; /* a training model's (owned), NULL for inference */
    nn_model_file *file;   /* a loaded or imported model's (owned unless owner), else NULL */
    nn_model_predict pred; /* an inference model's */
};

/* Free a file part and what it owns (NULL is fine). */
void nn_model_file_free(nn_model_file *f);

/* An inference model over src for batches of up to `batch`, like a loaded model file's
 * (sx_nn_model_predict and the accessors; input scale 1; a smaller batch builds its own graph
 * through src). Takes src over: on failure too, src.free(src.ctx) has run. Errors (*out NULL):
 * SX_E_ARG (batch < 1, no build function), SX_E_FORMAT (x not an input (batch, example) of
 * rank 2..8, or y not (batch, classes) of its dtype; the message names "nn_model_from_source"),
 * build's own, SX_E_NOMEM. */
sx_status nn_model_from_source(const nn_model_source *src, int64_t batch, sx_nn_model **out);
/* The plain (unoptimised, unfrozen) inference graph of any inference model for batches of n:
 * a new lazy graph *g owned by the caller, its input *x and output *y. A compiled model's
 * parameters borrow its network's tensors (free the graph before the network), a loaded
 * model's leaves its plain graph's values (free the graph before the model). Errors:
 * SX_E_ARG (NULL, a training model, n < 1), those of building the graph, SX_E_NOMEM. */
sx_status nn_model_infer_graph(sx_nn_model *m, int64_t n, sx_cg_graph **g, sx_cg_node **x,
                               sx_cg_node **y);

/* Data-parallel training (parallel.c). nn_dp_new: m->dp for m->comm; nn_dp_buckets:
 * the gradients grads[0..np) (in parameter order) packed into buckets in the order they are
 * complete (the last layers' first), each bucket's sum started by an allreduce_start and each
 * grads[i] replaced by its part of the summed bucket; the caller makes the starts outputs, in
 * order, before the updates (so the frozen order starts each sum as soon as its bucket is
 * complete, and runs the rest of the backward pass before the updates wait for it);
 * nn_dp_before_step: the share and the dropout rows into the graph; nn_dp_broadcast: rank 0's
 * weights, optimiser state, counters and dropout generator to every rank; nn_dp_after_step: the
 * global loss (*loss_sum: this rank's sum in, the global sum out) and the untrained parameters'
 * mean over the ranks, in one message. */
sx_status nn_dp_new(sx_nn_model *m);
void nn_dp_free(nn_dp *dp);
sx_status nn_dp_buckets(sx_nn_model *m, int np, sx_cg_node **grads);
sx_status nn_dp_before_step(sx_nn_model *m);
sx_status nn_dp_broadcast(sx_nn_net *net, const sx_nn_comm *c);
sx_status nn_dp_after_step(sx_nn_net *net, const sx_nn_comm *c, double *loss_sum);

/* Prediction (predict.c). A model's inference graph for batches of n (n < m->batch), kept in
 * m (m its owner): compiled over the same network (planned in m's arena), or over m's file
 * part. */
sx_status nn_model_smaller(sx_nn_model *m, int64_t n, sx_nn_model **out);
/* A view of rows [lo, lo + rows) of a batch tensor t (its first axis). */
sx_tensor nn_rows_at(const sx_tensor *t, int64_t lo, int64_t rows);
/* The frozen inference graph of a loaded model (over its plain graph's weights) or of a
 * source's for batches of n into m (g, x, out). */
sx_status nn_loaded_graph(sx_nn_model *m, int64_t n);

/* The compiler (compile.c). The values of the inputs of an eager graph (which computes while it
 * is built). */
typedef struct nn_feed {
    const sx_tensor *x, *y;
    double lr;
    int64_t step;
} nn_feed;
/* Build model m's graph (m->c.net, m->batch, m->train, m->c.params set by model.c) for the
 * public function `who`: the forward pass, and for training the loss, gradients, clipping and
 * updates. f != NULL: an eager graph computed with these input values. */
sx_status nn_model_build(const char *who, sx_nn_model *m, const nn_feed *f);
/* Optimise and freeze m's lazy graph (in m->lend when it fits there), filling m->report. */
sx_status nn_model_compile(sx_nn_model *m);
/* A scalar input of g set to v (in its dtype). */
sx_status nn_set_scalar(sx_cg_graph *g, sx_cg_node *in, double v);
/* g's status, or SX_E_STATE when a node could not be made without one. */
sx_status nn_graph_status(sx_cg_graph *g);

/* One training step without the compiler (model.c). */
sx_status nn_eager_step(sx_nn_net *net, const sx_nn_train_params *p, const sx_tensor *x,
                        const sx_tensor *y, double lr, int64_t step, double *loss,
                        int64_t *correct);

/* The inference graph planned in the arena of `lender` (a frozen model that never runs while
 * this one does and outlives it; its arena holds scratch only) when it fits there, else in an
 * arena of its own; lender NULL: sx_nn_compile_infer. */
sx_status nn_compile_infer_lent(sx_nn_net *net, int64_t batch, const sx_nn_model *lender,
                                sx_nn_model **out);
/* The inference graph of net for batches of `batch` rows (model.c), planned in `lend`
 * (lend_bytes) when it fits there, else in an arena of its own; owner: the model whose smaller
 * graph or replica it is (predict.c), or NULL. who names the caller in messages. */
sx_status nn_compile_infer_at(const char *who, sx_nn_net *net, int64_t batch, void *lend,
                              size_t lend_bytes, sx_nn_model *owner, sx_nn_model **out);
/* A batch tensor t against the model: m's dtype, rank `rank`, `rows` rows and shape[1..) after
 * them (SX_E_ARG, SX_E_DTYPE, SX_E_SHAPE naming who). */
sx_status nn_check_batch(const char *who, const sx_nn_model *m, const sx_tensor *t, int rank,
                         const int64_t *shape, int64_t rows);
/* Before a run: the weights may have changed since the last one (another model sharing them
 * trained, or a checkpoint was loaded), so what depends on them is recomputed. */
sx_status nn_invalidate_params(sx_nn_model *m);
/* sx_nn_evaluate with the evaluation graph in `lender`'s arena (NULL: its own; evaluate.c). */
sx_status nn_evaluate(sx_nn_net *net, const sx_ds_images *set, int64_t batch,
                      const sx_nn_model *lender, double *accuracy);

/* SX_OK when a training model with optimiser `kind` may be made over net: no training model
 * with another optimiser is alive (it would lose the state it borrows). */
sx_status nn_check_train_kind(const sx_nn_net *net, sx_optim_kind kind, const char *who);

/* Learning-rate schedules (schedule.c). The rate fed to the graph at 0-based step `step` of
 * 0-based epoch `epoch` (step, exponential and explicit schedules; the base rate for the
 * others). */
double nn_schedule_lr(const sx_nn_train_params *p, int64_t step, int64_t epoch);
/* An in-graph schedule's fields (T filled in), or the plateau's; SX_OK for the other kinds
 * (SX_E_ARG naming who). */
sx_status nn_schedule_check(const char *who, const sx_nn_schedule *s);
/* Reduce-on-plateau (schedule.c) after an epoch whose watched value is v: PyTorch's
 * ReduceLROnPlateau ('rel' threshold mode, no cooldown) on the base rate *lr, with its best
 * value *best (NAN at the start) and count of epochs without improvement *bad. Nothing for
 * another schedule or a NaN v. */
void nn_plateau_epoch(const sx_nn_schedule *s, double *lr, double *best, int *bad, double v,
                      bool higher_better, int verbose);

/* What a training loop keeps from step to step outside the network (loop.c): the in-graph
 * schedule's total steps and the reduce-on-plateau state. */
typedef struct nn_run_state {
    int64_t total_steps;             /* an in-graph schedule's T (0: none) */
    bool plateau;                    /* a reduce-on-plateau schedule: the three below are set */
    double plateau_lr, plateau_best; /* the base rate fed now, the best watched value (NAN) */
    int plateau_bad;                 /* epochs without improvement */
} nn_run_state;

/* Checkpoints (checkpoint.c): weights, optimiser state, step, epoch, the dropout generator, and the
 * run's batch size and optimiser (kind and hyper-parameters, weight decay and dampening) from
 * p, and the loop's state rs (may be NULL: none). Loading refuses a checkpoint of another
 * optimiser or, mid-epoch, of another batch size, before changing anything; `verbose` > 0 notes
 * a changed learning rate, weight decay or schedule length on stderr. rs (may be NULL) receives
 * the file's loop state: rs->plateau true when the file has the plateau's (then
 * plateau_lr/best/bad are the file's), rs->total_steps the file's T (0 when none). */
sx_status nn_checkpoint_save_state(sx_nn_net *net, const sx_nn_train_params *p,
                                   const nn_run_state *rs, const char *path);
sx_status nn_checkpoint_load_state(sx_nn_net *net, const sx_nn_train_params *p, nn_run_state *rs,
                                   const char *path);
/* The same without the loop's state (rs NULL). */
sx_status nn_checkpoint_save(sx_nn_net *net, const sx_nn_train_params *p, const char *path);
sx_status nn_checkpoint_load(sx_nn_net *net, const sx_nn_train_params *p, const char *path);
/* A count (>= 0) in a file's metadata entry `key` (SX_E_FORMAT naming path and key). */
sx_status nn_parse_i64(const char *path, const char *key, const char *v, int64_t *out);

/* Judging data (evaluate.c). A source's loss (weighted parts), metric and each part's loss and
 * metric. */
typedef struct nn_judged {
    double loss, metric;
    double part[SX_NN_MAX_HEADS];
    double part_metric[SX_NN_MAX_HEADS];
} nn_judged;
/* sx_nn_evaluate_source with the inference graph in `lender`'s arena (NULL: its own). */
sx_status nn_judge(sx_nn_net *net, const sx_ds_source *s, const sx_nn_fit_params *p,
                   const sx_nn_model *lender, nn_judged *out);
/* The metric p asks for on source s (AUTO resolved); whether it is better higher. */
sx_nn_metric nn_metric_resolve(const sx_nn_net *net, const sx_nn_fit_params *p,
                               const sx_ds_source *s);
bool nn_metric_higher_better(sx_nn_metric m);

/* A fit's per-epoch part (monitor.c): validation, early stopping, best weights, history. */
typedef struct nn_fit nn_fit;
/* The network against the sources and parameters (who names the caller in messages). */
sx_status nn_fit_check(const char *who, const sx_nn_net *net, const sx_nn_fit_params *p,
                       const sx_ds_source *train, const sx_ds_source *val);
/* Before the checkpoint is resumed: the run starts from p->start_epoch, or the network's count;
 * the monitor resolved (SX_E_ARG when it names no column this fit computes). */
/* stateless: the run keeps no state of its own (no PATH.fit written or read, no history line
 * printed: sx_nn_train's runs). */
sx_status nn_fit_new(sx_nn_net *net, const sx_nn_fit_params *p, const sx_ds_source *train,
                     const sx_ds_source *val, bool stateless, nn_fit **out);
/* The epoch the run ends at: its start plus p->train.epochs (what the loop runs to). */
int nn_fit_last_epoch(const nn_fit *f);
/* After a checkpoint was loaded: read PATH.fit (the history, best value and weights, patience
 * count) when it exists and is this run's (its start epoch). */
sx_status nn_fit_resume(nn_fit *f);
/* The resumed run had stopped early: nothing is left to train (its best weights are still
 * restored at the end). */
bool nn_fit_stopped_early(const nn_fit *f);
/* Write PATH.fit next to the checkpoint (nothing without a checkpoint path): call with every
 * checkpoint save. */
sx_status nn_fit_save(const nn_fit *f);
/* After a step: the user's callback; true when it asks to stop. */
bool nn_fit_step(nn_fit *f, const sx_nn_step_info *info);
/* After an epoch: evaluate the validation source (its graph in `lender`'s arena) and, when
 * asked, the training source; add the row (appended to the history file when asked), keep the
 * best weights; *stop when patience has run out. lr: the epoch's last learning rate. */
sx_status nn_fit_epoch_end(nn_fit *f, const sx_nn_model *lender, double train_loss, double seconds,
                           double lr, bool *stop);
/* Append row r of h to the history file at path (history.c): JSON lines when the name ends in
 * .jsonl or .json, else CSV with a header first into an empty file. */
sx_status nn_history_append(const char *path, const sx_nn_history *h, const sx_nn_epoch *r);
/* Restore the best weights (when ok and asked) and move the rows into h (may be NULL). */
sx_status nn_fit_finish(nn_fit *f, bool ok, sx_nn_history *h);
/* The last epoch's validation metric into *v (unchanged without validation), *higher_better
 * for an accuracy-like metric: what reduce-on-plateau watches (loop.c). */
void nn_fit_last_metric(const nn_fit *f, double *v, bool *higher_better);
void nn_fit_free(nn_fit *f);

/* The training loop (loop.c): one run of the public calls (fit.c), after their checks. */
typedef struct nn_loop_args {
    const char *who; /* the public function, for messages */
    sx_nn_net *net;
    sx_nn_fit_params fp;
    const sx_ds_source *train, *val; /* val may be NULL */
    const sx_ds_images *test;        /* judged after every epoch into the report, or NULL */
    bool stateless;                  /* see nn_fit_new */
} nn_loop_args;
sx_status nn_loop(const nn_loop_args *a, sx_nn_history *history, sx_nn_train_report *report);

/* Losses (loss.c). A part: one loss over a slice [off, off + size) of the output's last axis (a
 * head: rank 0), or over one of several outputs (rank > 0: elements [off, off + size) of the
 * flat (batch, total) output, read in the output's own shape `shape`, last axis shape[rank-1]).
 */
typedef struct nn_loss_part {
    sx_nn_loss loss;
    double weight;
    int64_t off, size;
    int rank;                   /* 0 for a head; an output's rank */
    int64_t shape[SX_MAX_RANK]; /* an output's shape (no batch axis) */
    char name[32];              /* the head's or output's name ("" for the one loss) */
    bool whole;                 /* the one loss over the whole output (no heads, one output) */
} nn_loss_part;
/* p's loss kind, Huber delta, label smoothing and heads; last_axis > 0: the heads must add up to
 * it. */
sx_status nn_loss_check(const char *who, const sx_nn_train_params *p, int64_t last_axis);
/* nn_loss_check against the network: with several outputs (sx_nn_output), each head names an
 * output (size 0 or the output's element count). */
sx_status nn_loss_check_net(const char *who, const sx_nn_net *net, const sx_nn_train_params *p);
/* The parts of p's loss over net's output (SX_NN_MAX_HEADS room): one, one per head, or one per
 * output of a network with several. */
int nn_loss_parts(const sx_nn_net *net, const sx_nn_train_params *p, nn_loss_part *parts);
/* The mean loss of the batch as a node: out the network's output, logits its value before a
 * final softmax, y the targets, all (batch, output shape). NULL on failure (the graph's status).
 */
sx_cg_node *nn_loss_node(sx_cg_graph *g, const sx_nn_train_params *p, const nn_loss_part *parts,
                         int np, sx_cg_node *out, sx_cg_node *logits, sx_cg_node *y);
/* Part pt of node x (batch, output shape): a head's slice of the last axis, or an output's
 * elements in its own shape (batch, shape); x itself for a part over the whole output. */
sx_cg_node *nn_part_node(sx_cg_graph *g, const nn_loss_part *pt, sx_cg_node *x);
/* One example's part pt in double: the sum of its terms (o: e outputs, probabilities after a
 * softmax when `softmax`; y: e targets; k the last axis of the network's output), and how many
 * terms its mean divides by per example. */
double nn_loss_part_sum(const sx_nn_train_params *p, const nn_loss_part *pt, bool softmax,
                        const double *o, const double *y, int64_t e, int64_t k);
int64_t nn_loss_part_terms(const nn_loss_part *pt, int64_t e, int64_t k);
/* Where part pt lies in one example's e outputs (last axis k): `count` segments of `seg`
 * elements (positions of its last axis), the first at `first`, one every `stride`. */
void nn_part_segments(const nn_loss_part *pt, int64_t e, int64_t k, int64_t *first, int64_t *seg,
                      int64_t *stride, int64_t *count);
/* The metric of a part in the history: accuracy (cross-entropy, hinge), binary accuracy
 * (bce_logits) or MSE (the others); its sum over one example and its number of terms. */
sx_nn_metric nn_part_metric(const nn_loss_part *pt);
double nn_part_metric_sum(const nn_loss_part *pt, double threshold, const double *o,
                          const double *y, int64_t e, int64_t k, int64_t *terms);

sx_nn_layer *nn_input_layer(const sx_nn_net *net);

/* Several inputs (inputs.c). The number of input layers; the shape of one example of x without
 * the batch axis (the input's own with one input, (total elements) with several), returning its
 * rank (0 without an input); the node input layer l reads from the graph's x. */
int nn_input_count(const sx_nn_net *net);
int nn_input_shape(const sx_nn_net *net, int64_t *shape);
sx_cg_node *nn_input_node(nn_build *b, const sx_nn_net *net, const sx_nn_layer *l, sx_cg_node *x);
/* An input layer's options: ids (sx_nn_input_ids) bypass the preprocessing, and their batches
 * may be integer tensors. */
typedef struct nn_input_attr {
    bool ids;
} nn_input_attr;
sx_nn_layer *nn_input_make(const char *who, sx_nn_net *net, int rank, const int64_t *shape,
                           bool ids);
bool nn_input_is_ids(const sx_nn_layer *l);
int nn_input_ids_count(const sx_nn_net *net);
/* A batch for model m as m's float dtype: x itself when it has that dtype; an integer tensor
 * (allowed: `ints_ok`) converted into *stage (made or remade for x's shape, kept by the model),
 * each value checked to be held exactly (SX_E_RANGE naming the element); another dtype
 * SX_E_DTYPE naming `what`. */
sx_status nn_batch_float(const char *who, const char *what, const sx_nn_model *m,
                         const sx_tensor *x, bool ints_ok, sx_tensor **stage,
                         const sx_tensor **out);
/* Outputs (outputs.c). The layer whose shape is the network's output: the last layer, the one
 * output marked, or with several outputs the pseudo-layer net->flat_out ((total), never run). */
sx_nn_layer *nn_output_layer(const sx_nn_net *net);
/* The number of outputs (1 when none is marked, 0 without layers); the layer of output k. */
int nn_output_count(const sx_nn_net *net);
sx_nn_layer *nn_output_at(const sx_nn_net *net, int k);
/* The network's output node from the layers' values vals[] and their pre-softmax values pres[]
 * (NULL where none): the output layer's, or the flat concatenation of several; *logits
 * likewise. NULL on failure (the graph's status). */
sx_cg_node *nn_output_node(nn_build *b, const sx_nn_net *net, sx_cg_node *const *vals,
                           sx_cg_node *const *pres, sx_cg_node **logits);
/* An output's or head's name, the first n bytes of s: 1 to 31 letters, digits or '_'. */
bool nn_name_ok(const char *s, size_t n);

#endif
