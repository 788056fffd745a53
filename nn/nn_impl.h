/* nn_impl.h: the inside of networks and compiled models (never installed). */
#ifndef SX_NN_IMPL_H
#define SX_NN_IMPL_H

#include "sx_nn.h"

#define NN_MAX_IN 16    /* inputs of a merge layer */
#define NN_MAX_PARAMS 4 /* tensors a layer keeps: weight, bias / gamma, beta, running stats */
#define NN_MAX_STATES 2 /* optimiser states per parameter */

typedef enum {
    L_INPUT,
    L_CONV2D,
    L_MAXPOOL,
    L_AVGPOOL,
    L_GMAXPOOL,
    L_GAVGPOOL,
    L_DROPOUT,
    L_DENSE,
    L_ACT,
    L_BATCHNORM,
    L_RESHAPE,
    L_PAD2D,
    L_UPSAMPLE,
    L_LAMBDA,
    L_ADD,
    L_MUL,
    L_MAX,
    L_AVERAGE,
    L_CONCAT,
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
} nn_param;

struct sx_nn_layer {
    nn_kind kind;
    char name[64];
    int n_in;
    sx_nn_layer *in[NN_MAX_IN];
    int rank; /* output shape without the batch axis */
    int64_t shape[SX_MAX_RANK];
    sx_nn_act act;
    double act_param;
    int kh, kw, stride;
    sx_padding padding;
    double rate, momentum, eps;
    bool flatten; /* dense over the flattened input */
    int pads[4];  /* top, bottom, left, right */
    int up[2];
    sx_nn_lambda_fn fn;
    void *ctx;
    int n_params;
    nn_param params[NN_MAX_PARAMS];
};

struct sx_nn_net {
    char name[64];
    sx_dtype dtype;
    uint64_t seed;
    sx_rng init_rng;    /* weight initialisation */
    sx_rng dropout_rng; /* dropout masks: carried from step to step and into checkpoints */
    sx_status status;
    sx_nn_layer **layers;
    int n_layers, cap_layers;
    int counters[L_KIND_COUNT];
    sx_nn_init init;
    double input_scale; /* pixel byte -> input value */
    int64_t step;       /* training steps done (1-based step of the next one is step + 1) */
    int64_t epoch;      /* epochs done */
    int64_t epoch_step; /* steps done in the current epoch (a checkpoint may fall mid-epoch) */
    int n_models;       /* compiled models alive: they borrow the layers, so none may be added */
    int n_train_models; /* training models alive among them, all with optimiser train_kind */
    sx_optim_kind train_kind; /* (they share the parameters' optimiser state) */
    bool orphan;              /* sx_nn_net_free was called: the last model frees the network */
};

/* Graph building (forward.c). */
typedef enum { NN_TRAIN, NN_INFER } nn_mode;
typedef struct nn_build {
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
} nn_build;

/* Build the forward graph from input node x (batch, input shape). *out: the network's output;
 * *logits: the last layer's value before a final softmax (== *out otherwise). The param nodes
 * borrow the network's tensors. */
sx_status nn_forward(sx_nn_net *net, nn_build *b, sx_cg_node *x, sx_cg_node **out,
                     sx_cg_node **logits);
/* The graph node of a layer's parameter in this build (NULL before it is made). */
sx_cg_node *nn_param_node(nn_build *b, const sx_nn_net *net, int layer, int param);
void nn_build_free(nn_build *b);

/* One training step without the compiler (model.c). */
sx_status nn_eager_step(sx_nn_net *net, const sx_nn_train_params *p, const sx_tensor *x,
                        const sx_tensor *y, double lr, int64_t step, double *loss,
                        int64_t *correct);

/* The inference graph planned in the arena of `lender` (a frozen model that never runs while
 * this one does and outlives it; its arena holds scratch only) when it fits there, else in an
 * arena of its own; lender NULL: sx_nn_compile_infer. */
sx_status nn_compile_infer_lent(sx_nn_net *net, int64_t batch, const sx_nn_model *lender,
                                sx_nn_model **out);
/* sx_nn_evaluate with the evaluation graph in `lender`'s arena (NULL: its own). */
sx_status nn_evaluate(sx_nn_net *net, const sx_ds_images *set, int64_t batch,
                      const sx_nn_model *lender, double *accuracy);

/* SX_OK when a training model with optimiser `kind` may be made over net: no training model
 * with another optimiser is alive (it would lose the state it borrows). */
sx_status nn_check_train_kind(const sx_nn_net *net, sx_optim_kind kind, const char *who);

/* Checkpoints (io.c): weights, optimiser state, step, epoch, the dropout generator, and the
 * run's batch size and optimiser (kind and hyper-parameters) from p. Loading refuses a
 * checkpoint of another optimiser or, mid-epoch, of another batch size, before changing
 * anything; `verbose` > 0 notes a changed learning rate on stderr. */
sx_status nn_checkpoint_save(sx_nn_net *net, const sx_nn_train_params *p, const char *path);
sx_status nn_checkpoint_load(sx_nn_net *net, const sx_nn_train_params *p, const char *path);

sx_nn_layer *nn_input_layer(const sx_nn_net *net);
sx_nn_layer *nn_output_layer(const sx_nn_net *net);

#endif
