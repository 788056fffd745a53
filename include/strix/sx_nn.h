/* sx_nn.h: networks, the neural compiler, training and inference.
 *
 * A network is built by calls that read like its layer list and owns its weights:
 *
 *     sx_nn_net *net = NULL;
 *     sx_nn_net_new("mnist", SX_F32, 42, &net);           // name, dtype, seed of every draw
 *     sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){28, 28, 1});
 *     x = sx_nn_lambda(net, x, scale_by_1_256, NULL, "x/256");
 *     sx_nn_conv2d_params conv = sx_nn_conv2d_params_default(32, 5, 5); // filters, kernel
 *     conv.conv.padding = SX_PAD_SAME;
 *     conv.act = SX_ACT_RELU;
 *     x = sx_nn_conv2d(net, x, &conv);
 *     sx_nn_pool2d_params pool = sx_nn_pool2d_params_default(2, 2);  // stride 2, VALID
 *     x = sx_nn_max_pool2d(net, x, &pool);
 *     x = sx_nn_dropout(net, x, 0.1);
 *     x = sx_nn_fully_connected(net, x, 1024, SX_ACT_RELU);
 *     x = sx_nn_linear(net, x, 10, SX_ACT_SOFTMAX);
 *     if (sx_nn_net_status(net) != SX_OK) ... // one check for the whole list
 *
 * Layers take the batch axis implicitly: shapes given and reported exclude it; images are NHWC.
 * Layer constructors return NULL on error (message in sx_last_error(), naming the function, the
 * layer and the numbers; the net remembers its first error, a NULL input propagates), like
 * cgraph's node constructors. The network owns its layers, weights, optimiser state and running
 * statistics; every compiled graph borrows them, so training, inference and checkpoints always
 * see one set of weights.
 *
 * Sizes. Every shape a layer computes from the numbers it is given (its output, its weights)
 * must have dims >= 1 and an element count whose bytes fit in int64, as sx_shape_check asks;
 * otherwise the constructor fails with SX_E_SHAPE (e.g. sx_nn_padding2d or sx_nn_upsampling2d
 * by 2e9, a conv kernel or a dense weight too large). Compiling checks the same with the batch
 * axis. A shape that fits may still be too large for memory: then compiling fails with
 * SX_E_NOMEM.
 *
 * Networks and compiled models. A compiled model (sx_nn_compile_train, sx_nn_compile_infer, and
 * those sx_nn_train and sx_nn_evaluate make for themselves) borrows the network's layers: while
 * one is alive, no layer can be added. The constructor then fails with SX_E_STATE, recorded in
 * the network like any layer error (the living models keep working, smaller batches included);
 * free the models first, then build the whole network, then compile. Training models made over
 * one network at the same time share its optimiser state, so they must use one optimiser kind.
 *
 * NULL handles. Destructors and accessors (the functions that return a property instead of a
 * status) accept NULL and then return a neutral value: "" for a name, NULL for a shape or a
 * graph, 0 for a rank, a count or an input scale, a zeroed report, (sx_dtype)-1 (not a dtype)
 * for a dtype, SX_E_ARG for sx_nn_net_status; setters do nothing. Every function returning a
 * status returns SX_E_ARG for a NULL handle or out-parameter (the out-parameter NULL when one is
 * given), and layer constructors return NULL. Training parameters `p` may be NULL (the
 * defaults), and so may the outputs a function writes "when not NULL".
 *
 * The neural compiler (sx_nn_compile) traces forward pass, loss, backward pass and the update
 * of every parameter into ONE static graph, optimises it (the whole optimiser update fused into
 * one pass per parameter), plans its memory into one arena, and re-runs it every step without
 * allocating.
 */
#ifndef SX_NN_H
#define SX_NN_H

#include "sx_autodiff.h"
#include "sx_datasets.h"
#include "sx_optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sx_nn_net sx_nn_net;
typedef struct sx_nn_layer sx_nn_layer;
typedef struct sx_nn_model sx_nn_model; /* a compiled graph over a network, or a loaded model */

/* ---------------------------------------------------------------- activations, initialisers */

typedef enum {
    SX_ACT_NONE,
    SX_ACT_RELU,
    SX_ACT_RELU6,
    SX_ACT_LEAKY_RELU, /* slope 0.01 (sx_nn_activation_ex for another) */
    SX_ACT_ELU,        /* alpha 1 */
    SX_ACT_SIGMOID,
    SX_ACT_HARD_SIGMOID, /* clip(0.2 x + 0.5, 0, 1) */
    SX_ACT_TANH,
    SX_ACT_SOFTPLUS,
    SX_ACT_SOFTSIGN,   /* x / (1 + |x|) */
    SX_ACT_SOFTMAX,    /* over the last axis */
    SX_ACT_GELU,       /* x Phi(x) = x (1 + erf(x / sqrt 2)) / 2, exact (PyTorch's GELU) */
    SX_ACT_GELU_TANH,  /* x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2 */
    SX_ACT_SILU,       /* x sigmoid(x) (swish) */
    SX_ACT_MISH,       /* x tanh(softplus(x)) */
    SX_ACT_HARD_SWISH, /* x relu6(x + 3) / 6 */
    SX_ACT_COUNT
} sx_nn_act;

/* "none", "relu", "relu6", "leaky_relu", "elu", "sigmoid", "hard_sigmoid", "tanh", "softplus",
 * "softsign", "softmax", "gelu", "gelu_tanh", "silu", "mish", "hard_swish";
 * "bad-activation" for another value. */
const char *sx_nn_act_name(sx_nn_act a);
/* The activation named s (as sx_nn_act_name; "swish" is silu). SX_E_ARG (*out unchanged) for
 * another name or NULL. */
SX_NODISCARD sx_status sx_nn_act_parse(const char *s, sx_nn_act *out);

typedef enum {
    SX_INIT_DEFAULT, /* the layer's own choice: Glorot uniform for weights, 0 for biases */
    SX_INIT_ZEROS,
    SX_INIT_UNIFORM,        /* U(a, b) */
    SX_INIT_GAUSSIAN,       /* N(a, b^2) */
    SX_INIT_GLOROT_UNIFORM, /* U(-l, l), l = sqrt(6 / (fan_in + fan_out)) */
    SX_INIT_GLOROT_NORMAL,  /* N(0, 2 / (fan_in + fan_out)) */
    SX_INIT_LECUN_NORMAL,   /* N(0, 1 / fan_in) */
    SX_INIT_HE_NORMAL,      /* N(0, 2 / fan_in) */
    SX_INIT_CUSTOM          /* fn(w, fan_in, fan_out, rng, ctx) */
} sx_nn_init_kind;

typedef struct sx_nn_init {
    sx_nn_init_kind kind;
    double a, b;
    sx_status (*fn)(sx_tensor *w, int64_t fan_in, int64_t fan_out, sx_rng *rng, void *ctx);
    void *ctx;
} sx_nn_init;

/* ---------------------------------------------------------------- networks */

/* A new empty network. Every random draw (initialisation, dropout, shuffling) derives from
 * `seed`, so the same seed gives the same network and the same training run. */
SX_NODISCARD sx_status sx_nn_net_new(const char *name, sx_dtype dtype, uint64_t seed,
                                     sx_nn_net **out);
/* NULL is fine. With compiled models alive, the network lives on for them (they keep working)
 * and is freed with the last one. */
void sx_nn_net_free(sx_nn_net *net);
/* SX_OK, or the first error of a layer constructor (SX_E_ARG for NULL). That error stays with
 * the network, and so does its cause: this call, and every later one that refuses the network
 * (compiling, fitting, saving), sets sx_last_error() to "<function>: network 'NAME': layer
 * 'dense_3' refused: <the first message>". */
sx_status sx_nn_net_status(const sx_nn_net *net);
const char *sx_nn_net_name(const sx_nn_net *net);
/* The initialiser used by the weight layers added from now on (default: SX_INIT_DEFAULT). */
void sx_nn_net_set_init(sx_nn_net *net, sx_nn_init init);
/* Total number of trainable parameters. */
int64_t sx_nn_net_param_count(const sx_nn_net *net);

/* ---------------------------------------------------------------- preprocessing
 *
 * What turns raw data into the network's input, and its output back into answers, belongs to
 * the network: the compiler builds it into every graph (training, inference, a saved model, an
 * ONNX export) as the first and last nodes, so the x given to sx_nn_model_step,
 * sx_nn_model_predict, a loaded model and `strix predict` is always RAW data (pixel bytes as
 * numbers 0..255, a CSV's feature values), and a regression output comes back in the
 * targets' own units. Training and prediction cannot disagree: there is one copy of each step.
 *
 *   value = (raw * input_scale - mean[k]) / std[k]        (normalisation, per channel k of the
 *                                                         input's last axis or per feature)
 *   answer = output * target_std[j] + target_mean[j]      (regression target scaling; training
 *                                                         compares output with the targets
 *                                                         standardised the same way)
 *
 * The input scale is not set on a new network; the first training run takes it from its data:
 * 1/255 (SX_DS_PIXEL_SCALE) for byte images (sx_nn_train, an image source), a source's
 * x_scale otherwise (1 for numbers). A network compiled or saved before any training with the
 * scale still unset uses 1. sx_nn_fit also records, when the network has none yet, the
 * normalisation of sx_nn_fit_params.augment (mean, std) or of a standardised source
 * (sx_ds_source_standardize: the fit then reads its parent's raw values), the statistics
 * asked for by sx_nn_fit_params.standardize / standardize_targets, the source's class names
 * and feature names. All of it is saved in the model file and shown by `strix info`.
 *
 * Preprocessing is fixed like the layers: a setter that would change it while a compiled model
 * is alive, or after the network has trained (sx_nn_net_steps > 0), fails with SX_E_STATE
 * (setting the value it already has is fine). */

/* The factor from raw input elements to the values the network computes with (> 0, finite):
 * 1/255 for pixel bytes, 1 for values already scaled or a network that scales its input
 * itself (e.g. a lambda x / 256). A value that is not finite or not > 0, or a change refused
 * (see above), is recorded as the network's error (sx_nn_net_status), like a layer's. */
void sx_nn_net_set_input_scale(sx_nn_net *net, double scale);
/* The input scale in force; 0 while not set (and for NULL). */
double sx_nn_net_input_scale(const sx_nn_net *net);
/* Normalise the input after scaling: value = (raw * scale - mean[k]) / std[k], n values each
 * (copied): n = the input's last axis (per channel of an (h, w, c) image) or n = the input's
 * element count (per feature). n = 0 removes it. Errors: SX_E_ARG (NULL net, mean or std with
 * n > 0, n < 0, a mean not finite, a std not finite and > 0), SX_E_STATE (no input layer yet,
 * a network with several inputs, or a change refused), SX_E_SHAPE (n neither the channels nor
 * the features), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_nn_net_set_normalization(sx_nn_net *net, int64_t n, const double *mean,
                                                   const double *std);
/* Scale a regression network's targets: training compares the output with (y - mean[j]) /
 * std[j], and every inference graph returns output * std[j] + mean[j]; n = the output's last
 * axis (per column) or its element count. n = 0 removes it. The output layer is judged at
 * compile time (SX_E_SHAPE there for another n, SX_E_STATE for a network ending in a softmax
 * or with several outputs). Errors: as sx_nn_net_set_normalization's (no shape check here). */
SX_NODISCARD sx_status sx_nn_net_set_target_scaling(sx_nn_net *net, int64_t n, const double *mean,
                                                    const double *std);
/* The names of the output's classes, in the order of its last axis (copied; each 1..255
 * bytes, no NUL); n = 0 removes them. The number must equal the output's last axis when a
 * model is compiled or saved (SX_E_SHAPE there). Errors: SX_E_ARG (NULL net, names NULL with
 * n > 0, a NULL, empty or too long name), SX_E_STATE (a change refused), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_nn_net_set_class_names(sx_nn_net *net, int64_t n,
                                                 const char *const *names);
/* The names of the input's features (a table's columns), in input order: `strix predict`
 * selects a CSV file's columns by them. Same rules as sx_nn_net_set_class_names; the number
 * must equal the input's element count when compiled or saved. */
SX_NODISCARD sx_status sx_nn_net_set_feature_names(sx_nn_net *net, int64_t n,
                                                   const char *const *names);
/* How `strix predict` resizes an image file to the input's (h, w, c) (SX_DS_RESIZE_BILINEAR
 * unless set). Errors: SX_E_ARG (NULL, an unknown mode), SX_E_STATE (a change refused). */
SX_NODISCARD sx_status sx_nn_net_set_image_resize(sx_nn_net *net, sx_ds_resize mode);

/* A network's or model's preprocessing, read only (valid while it lives and is not changed). */
typedef struct sx_nn_preprocess {
    double input_scale;                     /* 0: not set yet (a network before training) */
    int64_t norm_size;                      /* 0: no normalisation; channels or features */
    const double *mean, *std;               /* (norm_size) */
    int64_t target_size;                    /* 0: no target scaling */
    const double *target_mean, *target_std; /* (target_size) */
    int64_t n_classes;                      /* 0: no class names */
    const char *const *class_names;         /* (n_classes) */
    int64_t n_features;                     /* 0: no feature names */
    const char *const *feature_names;       /* (n_features) */
    sx_ds_resize resize;                    /* for image files */
    bool in_graph; /* true: x is raw data, the graph applies all of the above; false only for a
                      model file written before version 3, whose x is the network's input
                      values (scale raw pixel bytes by input_scale yourself, as strix predict
                      does) */
} sx_nn_preprocess;

/* Zeroed (and resize bilinear, in_graph false) for NULL. */
sx_nn_preprocess sx_nn_net_preprocess(const sx_nn_net *net);
sx_nn_preprocess sx_nn_model_preprocess(const sx_nn_model *m);
/* Class k's name, or NULL without names or for k out of range. */
const char *sx_nn_model_class_name(const sx_nn_model *m, int64_t k);
/* One line per step of the preprocessing (input scale, normalisation, target scaling, class
 * and feature names, resize), each "  key: value" (nothing for NULL). */
void sx_nn_preprocess_print(const sx_nn_preprocess *p, FILE *f);

/* One line per layer: name, output shape, parameters; then the total. */
void sx_nn_net_print(const sx_nn_net *net, FILE *f);

/* Layer accessors: name ("conv2d_1"), output shape without the batch axis. */
const char *sx_nn_layer_name(const sx_nn_layer *l);
int sx_nn_layer_rank(const sx_nn_layer *l);
const int64_t *sx_nn_layer_shape(const sx_nn_layer *l);
/* The layer of that name, or NULL. */
sx_nn_layer *sx_nn_net_layer(const sx_nn_net *net, const char *name);
/* Rename layer l (and so its parameters: "wte.weight"): 1..47 letters, digits, '_', '-' or '.'
 * not already a layer's name. Checkpoints find parameters by name, so rename before saving or
 * loading one. Errors: SX_E_ARG (NULL, a name of another form or taken, l not net's),
 * SX_E_STATE (compiled models alive: they know the old names). */
SX_NODISCARD sx_status sx_nn_layer_rename(sx_nn_net *net, sx_nn_layer *l, const char *name);

/* ---------------------------------------------------------------- parameters
 *
 * A network's parameters are named "<layer>.<what>", the layer's name (sx_nn_layer_rename)
 * and what the layer kind calls the tensor, in the layer's order:
 *   dense                 weight (in, units), bias (units)
 *   conv2d                kernel (kh, kw, c / groups, filters), bias (filters)
 *   depthwise_conv2d      kernel (kh, kw, 1, c * multiplier), bias
 *   separable_conv2d      depthwise_kernel, pointwise_kernel (1, 1, c * m, filters), bias
 *   conv1d                kernel (k, c / groups, filters), bias
 *   conv_transpose2d      kernel (kh, kw, filters / groups, c), bias
 *   batch_norm            gamma, beta (c), running_mean, running_var (c, not trained)
 *   layer_norm, group_norm gamma, beta (the normalised shape)
 *   embedding             weight (vocab, dim); position_embedding: weight (max_len, dim)
 *   attention             query_weight, key_weight, value_weight, out_weight (d, d), then
 *                         query_bias, key_bias, value_bias, out_bias (d); with fused_qkv
 *                         qkv_weight (d, 3d), out_weight, qkv_bias (3d), out_bias
 *   lstm, gru             weight_ih (d, G units), weight_hh (units, G units), bias_ih, bias_hh
 *   prelu                 alpha (channels)
 * (sx_nn_net_print lists them; a dense weight is PyTorch's nn.Linear.weight transposed.)
 * Values are the network's own tensors, shared by every model compiled from it: a value set here
 * is what the next step or prediction of any of its models reads; never change one while a
 * model runs. Errors of the functions below: SX_E_ARG (NULL, or a name no parameter has: the
 * message names it and the network), SX_E_SHAPE (a value of another shape than the
 * parameter's). */

typedef struct sx_nn_param_info {
    const char *name; /* "dense_1.weight" (valid until the layer is renamed) */
    const sx_nn_layer *layer;
    int rank; /* the parameter's shape, as its layer reads it */
    int64_t shape[SX_MAX_RANK];
    bool trainable;          /* false: state the forward pass keeps (running statistics) */
    const char *shared_from; /* the parameter whose tensor it uses (sx_nn_share), or NULL */
    bool transposed;         /* it reads shared_from's tensor transposed */
} sx_nn_param_info;

/* Number of named parameters (shared ones included), and parameter i of them (0 <= i < n, in
 * layer order): SX_E_RANGE past the end. */
int sx_nn_net_n_params(const sx_nn_net *net);
SX_NODISCARD sx_status sx_nn_net_param_info(const sx_nn_net *net, int i, sx_nn_param_info *out);
/* Copy the named parameter's value into out (its shape, any dtype: converted), or set it from
 * value (its shape, any dtype). A shared parameter reads and writes its source's tensor
 * (transposed when it is used so). */
SX_NODISCARD sx_status sx_nn_net_param_get(const sx_nn_net *net, const char *name, sx_tensor *out);
SX_NODISCARD sx_status sx_nn_net_param_set(sx_nn_net *net, const char *name,
                                           const sx_tensor *value);
/* The tensor that stores the named parameter (its source's for a shared one: check
 * sx_nn_param_info.transposed), borrowed from the network for reading and writing in place;
 * NULL (and sx_last_error set) when there is none. */
sx_tensor *sx_nn_net_param(sx_nn_net *net, const char *name);

/* Share a parameter: `name` uses the tensor of `source` from now on, transposed (2-d only) when
 * `transposed`, as PyTorch's `head.weight = emb.weight` ties a language model's output layer to
 * its embedding: sx_nn_share(net, "head.weight", "wte.weight", true) for a dense head (C, V) over
 * an embedding (V, C). The gradients of every use are summed into the source, which alone is
 * trained, saved in checkpoints and counted; name's own tensor is freed. Both must be trainable
 * or both not, of the network's dtype, of equal shape (transposed: swapped). Errors: SX_E_ARG
 * (NULL, unknown names, name == source, name already shared or the source of another,
 * transposed and not 2-d), SX_E_SHAPE, SX_E_STATE (compiled models alive; the two differ in
 * trainability). */
SX_NODISCARD sx_status sx_nn_share(sx_nn_net *net, const char *name, const char *source,
                                   bool transposed);

/* ---------------------------------------------------------------- layers */

/* The network's input: one example's shape (no batch axis). A second call is SX_E_STATE. */
sx_nn_layer *sx_nn_input(sx_nn_net *net, int rank, const int64_t *shape);
/* A further input, for a network with several inputs (after sx_nn_input; SX_E_STATE before it).
 * The network then takes x as one flat row per example, (batch, total): the inputs' elements one
 * after another in the order the inputs were made (a source's x row likewise), and each input
 * layer reads its part in its own shape. sx_nn_model_input_shape is then (total). */
sx_nn_layer *sx_nn_input_add(sx_nn_net *net, int rank, const int64_t *shape);
/* An input of integer indices: token ids, or class numbers, for an embedding (sx_nn_embedding)
 * to look up. The network's preprocessing never touches it (no input scale, no normalisation:
 * sx_nn_net_set_normalization is SX_E_STATE for a network whose only input is ids), and when
 * every input of the network is ids, sx_nn_model_step, sx_nn_model_predict and
 * sx_nn_predict_eager take its batches as integer tensors (SX_I32 or SX_I64) as well as of the
 * network's dtype. Inside the graph an id is a value of the network's dtype, so an integer batch
 * holding a value above 2^24 in magnitude (f32; 2^53 for f64) is refused with SX_E_RANGE rather
 * than rounded. A saved model keeps this (its file says which inputs are ids). The first input
 * of the network, as sx_nn_input; after it, a further input, as sx_nn_input_add. Errors as
 * theirs. */
sx_nn_layer *sx_nn_input_ids(sx_nn_net *net, int rank, const int64_t *shape);
/* A 2-d convolution layer over (h,w,c): y = act(conv2d(x, kernel) + bias), kernel
 * (kernel_h, kernel_w, c / groups, filters), bias (filters). `conv` is the op's own parameter
 * struct (include/strix/sx_tensor.h): strides, padding (VALID, SAME(_UPPER), SAME_LOWER or EXPLICIT
 * pads), dilation and groups, judged by sx_conv2d_shape (its errors, e.g. SX_E_ARG for a stride
 * < 1 or a padding the op does not take). With groups g, filter j reads the channels of group
 * j / (filters / g) only; groups = c is a depthwise convolution (sx_nn_depthwise_conv2d says it
 * more plainly). The initialiser sees fan_in = kernel_h * kernel_w * c / groups and fan_out =
 * kernel_h * kernel_w * filters / groups (the inputs of one output, the outputs of one input).
 * Turn the bias off before a batch norm, which has its own shift. */
typedef struct sx_nn_conv2d_params {
    int filters;            /* output channels, >= 1 */
    int kernel_h, kernel_w; /* >= 1 */
    sx_conv2d_params conv;  /* stride 1 x 1, SX_PAD_VALID, dilation 1, groups 1 */
    bool bias;              /* true */
    sx_nn_act act;          /* SX_ACT_NONE */
} sx_nn_conv2d_params;

sx_nn_conv2d_params sx_nn_conv2d_params_default(int filters, int kernel_h, int kernel_w);
/* p NULL, a kernel or filters < 1, groups < 0, an unknown activation: SX_E_ARG; an input not
 * (h,w,c): SX_E_RANK; c or filters not divisible by groups, a kernel or output with too many
 * elements: SX_E_SHAPE (each message names the numbers). */
sx_nn_layer *sx_nn_conv2d(sx_nn_net *net, sx_nn_layer *in, const sx_nn_conv2d_params *p);

/* A depthwise 2-d convolution over (h,w,c) (Keras' DepthwiseConv2D, PyTorch's Conv2d with
 * groups = c): each input channel i is convolved with depth_multiplier filters of its own,
 * giving output channels i * depth_multiplier .. (i+1) * depth_multiplier - 1; y = act(... +
 * bias). Kernel (kernel_h, kernel_w, 1, c * depth_multiplier) (the conv2d layout with groups =
 * c), bias (c * depth_multiplier). `conv` gives strides, padding and dilation; its groups must
 * be 0, 1 (as sx_conv2d_params_default() leaves it) or c: the layer sets c. Initialiser fans:
 * kernel_h * kernel_w in, kernel_h * kernel_w * depth_multiplier out. */
typedef struct sx_nn_depthwise_conv2d_params {
    int kernel_h, kernel_w; /* >= 1 */
    int depth_multiplier;   /* >= 1; 1 */
    sx_conv2d_params conv;  /* stride 1 x 1, SX_PAD_VALID, dilation 1 */
    bool bias;              /* true */
    sx_nn_act act;          /* SX_ACT_NONE */
} sx_nn_depthwise_conv2d_params;

sx_nn_depthwise_conv2d_params sx_nn_depthwise_conv2d_params_default(int kernel_h, int kernel_w);
/* Errors as sx_nn_conv2d's; also SX_E_ARG for depth_multiplier < 1 or groups other than 0, 1
 * or c. */
sx_nn_layer *sx_nn_depthwise_conv2d(sx_nn_net *net, sx_nn_layer *in,
                                    const sx_nn_depthwise_conv2d_params *p);

/* A depthwise separable 2-d convolution (Keras' SeparableConv2D): a depthwise convolution
 * without bias (kernel "depthwise_kernel" (kernel_h, kernel_w, 1, c * depth_multiplier); `conv`
 * gives its strides, padding and dilation, groups 0, 1 or c), then a pointwise 1x1 convolution
 * ("pointwise_kernel" (1, 1, c * depth_multiplier, filters)), the bias (filters) and the
 * activation: y = act(conv1x1(depthwise(x)) + bias). Fans: the depthwise kernel's as in
 * sx_nn_depthwise_conv2d, the pointwise kernel's c * depth_multiplier in, filters out. */
typedef struct sx_nn_separable_conv2d_params {
    int filters;            /* output channels, >= 1 */
    int kernel_h, kernel_w; /* >= 1 */
    int depth_multiplier;   /* >= 1; 1 */
    sx_conv2d_params conv;  /* of the depthwise step: stride 1 x 1, SX_PAD_VALID, dilation 1 */
    bool bias;              /* true */
    sx_nn_act act;          /* SX_ACT_NONE */
} sx_nn_separable_conv2d_params;

sx_nn_separable_conv2d_params sx_nn_separable_conv2d_params_default(int filters, int kernel_h,
                                                                    int kernel_w);
/* Errors as sx_nn_depthwise_conv2d's, and SX_E_ARG for filters < 1. */
sx_nn_layer *sx_nn_separable_conv2d(sx_nn_net *net, sx_nn_layer *in,
                                    const sx_nn_separable_conv2d_params *p);

/* A 1-d convolution over (length, channels) (Keras' Conv1D; PyTorch's Conv1d on (c, length)
 * transposed): y[t, j] = act(sum over i, ci of x[t * stride - pad_before + i * dilation,
 * group's channel ci] * kernel[i, ci, j] + bias[j]), kernel (kernel, channels / groups, filters),
 * bias (filters). It runs as a 2-d convolution over (length, 1, channels), so the padding modes,
 * sizes and errors are sx_conv2d_params' along the length axis (EXPLICIT: pad_before /
 * pad_after). Fans as sx_nn_conv2d's with kernel_w = 1. */
typedef struct sx_nn_conv1d_params {
    int filters;               /* output channels, >= 1 */
    int kernel;                /* >= 1 */
    int stride;                /* >= 1; 1 */
    sx_padding padding;        /* SX_PAD_VALID */
    int pad_before, pad_after; /* SX_PAD_EXPLICIT only; >= 0 */
    int dilation;              /* >= 1; 1 */
    int groups;                /* >= 1, divides channels and filters; 1 */
    bool bias;                 /* true */
    sx_nn_act act;             /* SX_ACT_NONE */
} sx_nn_conv1d_params;

sx_nn_conv1d_params sx_nn_conv1d_params_default(int filters, int kernel);
/* p NULL, kernel, filters, stride or dilation < 1, groups < 0, an unknown activation or
 * padding: SX_E_ARG; an input not (length, channels): SX_E_RANK; channels or filters not
 * divisible by groups, a window longer than the (padded) input, too many elements: SX_E_SHAPE. */
sx_nn_layer *sx_nn_conv1d(sx_nn_net *net, sx_nn_layer *in, const sx_nn_conv1d_params *p);

/* Max and average pooling over windows of (h,w,c). `pool` is the op's own parameter struct
 * (include/strix/sx_tensor.h: kernel, strides, padding VALID / SAME(_UPPER) / SAME_LOWER / EXPLICIT
 * pads, ceil_mode, count_include_pad for average pooling, dilation for max pooling), judged by
 * sx_pool2d_shape (PyTorch's MaxPool2d(k, s, padding=p, dilation=d, ceil_mode=...) is EXPLICIT
 * with all four pads p; AvgPool2d's count_include_pad defaults to true there, to off here). */
typedef struct sx_nn_pool2d_params {
    sx_pool2d_params pool; /* stride = the kernel, SX_PAD_VALID */
} sx_nn_pool2d_params;

sx_nn_pool2d_params sx_nn_pool2d_params_default(int kernel_h, int kernel_w);
/* p NULL, a dilation for average pooling: SX_E_ARG; an input not (h,w,c): SX_E_RANK;
 * sx_pool2d_shape's errors. */
sx_nn_layer *sx_nn_max_pool2d(sx_nn_net *net, sx_nn_layer *in, const sx_nn_pool2d_params *p);
sx_nn_layer *sx_nn_avg_pool2d(sx_nn_net *net, sx_nn_layer *in, const sx_nn_pool2d_params *p);
sx_nn_layer *sx_nn_global_max_pool(sx_nn_net *net, sx_nn_layer *in); /* (h,w,c) -> (c) */
sx_nn_layer *sx_nn_global_avg_pool(sx_nn_net *net, sx_nn_layer *in);

/* A transposed convolution layer ("deconvolution", PyTorch's ConvTranspose2d) over (h,w,c):
 * y = act(conv_transpose2d(x, kernel) + bias), kernel (kernel_h, kernel_w, filters / groups, c)
 * (PyTorch's weight (c, filters/groups, kh, kw) permuted by (2, 3, 1, 0)), bias (filters).
 * `conv` is the op's own parameter struct (include/strix/sx_tensor.h): strides, padding, dilation,
 * groups and output padding, judged by sx_conv_transpose2d_shape. The output size per axis is
 * PyTorch's (h - 1) * stride - pad_top - pad_bottom + dilation * (kh - 1) + output_padding + 1
 * (EXPLICIT or VALID padding). */
typedef struct sx_nn_conv_transpose2d_params {
    int filters;            /* output channels, >= 1, a multiple of conv.groups */
    int kernel_h, kernel_w; /* >= 1 */
    sx_conv2d_params conv;  /* stride 1 x 1, SX_PAD_VALID, no output padding, one group */
    bool bias;              /* true */
    sx_nn_act act;          /* SX_ACT_NONE */
} sx_nn_conv_transpose2d_params;

sx_nn_conv_transpose2d_params sx_nn_conv_transpose2d_params_default(int filters, int kernel_h,
                                                                    int kernel_w);
/* p NULL, a kernel or filters < 1, an unknown activation, a bad stride, padding or output
 * padding: SX_E_ARG; an input not (h,w,c): SX_E_RANK; groups not dividing the filters or the
 * input channels, an empty or too large output: SX_E_SHAPE. */
sx_nn_layer *sx_nn_conv_transpose2d(sx_nn_net *net, sx_nn_layer *in,
                                    const sx_nn_conv_transpose2d_params *p);

/* Adaptive average pooling of (h,w,c) to (out_h,out_w,c), any sizes >= 1 (PyTorch's
 * AdaptiveAvgPool2d): output (i, j) averages rows [floor(i h / out_h), ceil((i + 1) h / out_h))
 * and the columns likewise. An input not (h,w,c): SX_E_RANK; a size < 1: SX_E_SHAPE. */
sx_nn_layer *sx_nn_adaptive_avg_pool2d(sx_nn_net *net, sx_nn_layer *in, int64_t out_h,
                                       int64_t out_w);
/* Inverted dropout in training (drop with probability rate, scale the rest), identity at
 * inference. */
sx_nn_layer *sx_nn_dropout(sx_nn_net *net, sx_nn_layer *in, double rate);
/* A dense layer over the flattened input, then the activation. */
sx_nn_layer *sx_nn_fully_connected(sx_nn_net *net, sx_nn_layer *in, int64_t units, sx_nn_act act);
/* A dense layer over the last axis (x W + b), then the activation; _nobias has no b. */
sx_nn_layer *sx_nn_linear(sx_nn_net *net, sx_nn_layer *in, int64_t units, sx_nn_act act);
sx_nn_layer *sx_nn_linear_nobias(sx_nn_net *net, sx_nn_layer *in, int64_t units, sx_nn_act act);
sx_nn_layer *sx_nn_activation(sx_nn_net *net, sx_nn_layer *in, sx_nn_act act);
/* act with its parameter: the slope of leaky_relu, the alpha of elu */
sx_nn_layer *sx_nn_activation_ex(sx_nn_net *net, sx_nn_layer *in, sx_nn_act act, double param);
/* PReLU: max(0, x) + alpha min(0, x) with a learned slope alpha per channel (the last axis;
 * one for an input of rank 0), starting at `init` (PyTorch's 0.25), not regularised (no l1/l2
 * term). A non-finite init: SX_E_ARG. */
sx_nn_layer *sx_nn_prelu(sx_nn_net *net, sx_nn_layer *in, double init);
/* Batch normalisation over every axis but the last (channels): in training, batch statistics,
 * with running averages (momentum m: r <- m r + (1 - m) batch; the variance averaged is the
 * unbiased one, count / (count - 1) times the biased variance the batch is normalised with, as
 * in PyTorch and Keras) kept in the network; at inference the running averages. Then, when
 * affine, y = gamma xhat + beta with learned gamma, beta (channels). */
typedef struct sx_nn_batch_norm_params {
    double momentum; /* 0 <= m < 1: 0.99 (Keras's; PyTorch's momentum 0.1 is m = 0.9) */
    double eps;      /* added to the variance, > 0: 1e-3 */
    bool affine;     /* learned scale and shift: true */
} sx_nn_batch_norm_params;

sx_nn_batch_norm_params sx_nn_batch_norm_params_default(void);
/* p NULL: the defaults. A bad momentum or eps: SX_E_ARG; an input of rank 0: SX_E_RANK. */
sx_nn_layer *sx_nn_batch_norm(sx_nn_net *net, sx_nn_layer *in, const sx_nn_batch_norm_params *p);
/* Normalisation by each example's own statistics (no running averages, so training and
 * inference compute the same): (x - mean) / sqrt(var + eps), the biased variance, then, when
 * affine, * gamma + beta with learned gamma (ones) and beta (zeros), not regularised. Parameters
 * are saved and loaded with the model and checkpoints as "<layer>.gamma", "<layer>.beta".
 * layer_norm: over the last `axes` axes of the input (batch axis excluded; PyTorch's
 * LayerNorm(normalized_shape = those axes)); gamma and beta have their shape.
 * group_norm: input (..., c), channels last (NHWC as strix's conv layers): the c channels in
 * `groups` groups of c / groups, each normalised over every position and its channels; gamma
 * and beta (c) (PyTorch's GroupNorm on NCHW).
 * instance_norm: group_norm with one channel per group (PyTorch's InstanceNorm2d, without running
 * statistics). p NULL: the defaults. Errors: eps not finite and > 0 or groups < 1 or not
 * dividing c (SX_E_ARG), axes not in 1..rank (SX_E_AXIS), an input of rank 0 (SX_E_RANK). */
typedef struct sx_nn_layer_norm_params {
    int axes;    /* trailing axes normalised, 1..rank of the input: 1 */
    double eps;  /* 1e-5 */
    bool affine; /* learned gamma and beta: true */
} sx_nn_layer_norm_params;
typedef struct sx_nn_group_norm_params {
    int64_t groups; /* dividing the channels: 32 */
    double eps;     /* 1e-5 */
    bool affine;    /* learned gamma and beta (c): true */
} sx_nn_group_norm_params;
typedef struct sx_nn_instance_norm_params {
    double eps;  /* 1e-5 */
    bool affine; /* learned gamma and beta (c): false (PyTorch's InstanceNorm2d) */
} sx_nn_instance_norm_params;
sx_nn_layer_norm_params sx_nn_layer_norm_params_default(void);
sx_nn_group_norm_params sx_nn_group_norm_params_default(void);
sx_nn_instance_norm_params sx_nn_instance_norm_params_default(void);
sx_nn_layer *sx_nn_layer_norm(sx_nn_net *net, sx_nn_layer *in, const sx_nn_layer_norm_params *p);
sx_nn_layer *sx_nn_group_norm(sx_nn_net *net, sx_nn_layer *in, const sx_nn_group_norm_params *p);
sx_nn_layer *sx_nn_instance_norm(sx_nn_net *net, sx_nn_layer *in,
                                 const sx_nn_instance_norm_params *p);
/* Softmax and log-softmax over one axis of the input (batch axis excluded; negative counts from
 * the end: -1 the last), as PyTorch's Softmax(dim) and LogSoftmax(dim) on the example. A softmax
 * over the last axis ending the network is folded into the cross-entropy loss (as the softmax
 * activation is); cross-entropy after a log-softmax over the last axis is exact too (the loss
 * takes it as logits). Over another axis the layer's output is what the loss sees. Errors: an
 * axis outside -rank..rank-1 (SX_E_AXIS). */
sx_nn_layer *sx_nn_softmax(sx_nn_net *net, sx_nn_layer *in, int axis);
sx_nn_layer *sx_nn_log_softmax(sx_nn_net *net, sx_nn_layer *in, int axis);
sx_nn_layer *sx_nn_flatten(sx_nn_net *net, sx_nn_layer *in);
sx_nn_layer *sx_nn_reshape(sx_nn_net *net, sx_nn_layer *in, int rank, const int64_t *shape);
/* zero padding of the two spatial axes of (h,w,c): top, bottom, left, right */
sx_nn_layer *sx_nn_padding2d(sx_nn_net *net, sx_nn_layer *in, int top, int bottom, int left,
                             int right);
/* nearest-neighbour upsampling of (h,w,c) by integer factors */
sx_nn_layer *sx_nn_upsampling2d(sx_nn_net *net, sx_nn_layer *in, int fh, int fw);
/* A user function that builds graph nodes from the layer's input node (batch axis included),
 * e.g. x / 256. The saved model holds the nodes it built, so a model with lambdas can be loaded
 * by a program that never saw the function. */
typedef sx_cg_node *(*sx_nn_lambda_fn)(sx_cg_graph *g, sx_cg_node *x, void *ctx);
sx_nn_layer *sx_nn_lambda(sx_nn_net *net, sx_nn_layer *in, sx_nn_lambda_fn fn, void *ctx,
                          const char *name);
/* Merges of n >= 2 layers of equal shapes (concatenate: equal but for the last axis). */
sx_nn_layer *sx_nn_add(sx_nn_net *net, int n, sx_nn_layer *const *in);
sx_nn_layer *sx_nn_mul(sx_nn_net *net, int n, sx_nn_layer *const *in);
sx_nn_layer *sx_nn_max(sx_nn_net *net, int n, sx_nn_layer *const *in);
sx_nn_layer *sx_nn_average(sx_nn_net *net, int n, sx_nn_layer *const *in);
sx_nn_layer *sx_nn_concatenate(sx_nn_net *net, int n, sx_nn_layer *const *in);

/* ---------------------------------------------------------------- sequences */

/* Embedding: the input's values are integer indices (of the network's dtype: f32 holds every
 * integer below 2^24 exactly; set the input scale to 1 with sx_nn_net_set_input_scale), each
 * replaced by its row of a learned (vocab, dim) table: (s...) -> (s..., dim). Initialised
 * N(0, 1) as PyTorch's nn.Embedding (the network's initialiser instead when one was set); the
 * padding index's row is zero, reads as zeros and gets no gradient. An index outside [0, vocab)
 * fails the step or prediction with SX_E_RANGE. */
typedef struct sx_nn_embedding_params {
    int64_t vocab; /* rows, >= 1 */
    int64_t dim;   /* columns, >= 1 */
    int64_t pad;   /* padding index in [0, vocab), or -1 for none: -1 */
} sx_nn_embedding_params;

sx_nn_embedding_params sx_nn_embedding_params_default(int64_t vocab, int64_t dim);
/* p NULL or vocab/dim < 1: SX_E_ARG; a bad pad: SX_E_RANGE; an input of rank 7: SX_E_RANK. */
sx_nn_layer *sx_nn_embedding(sx_nn_net *net, sx_nn_layer *in, const sx_nn_embedding_params *p);
/* A learned position embedding: (T, d) + P, P (T, d) initialised N(0, 1). Input rank != 2:
 * SX_E_RANK. */
sx_nn_layer *sx_nn_position_embedding(sx_nn_net *net, sx_nn_layer *in);
/* The same with a table of max_len >= T positions, of which a sequence of T reads the first T
 * rows (GPT-2's wpe (1024, 768) over shorter sequences; the rows past T get no gradient).
 * max_len < T: SX_E_SHAPE. */
sx_nn_layer *sx_nn_position_embedding_max(sx_nn_net *net, sx_nn_layer *in, int64_t max_len);

/* Recurrent layers over (T, d) sequences (batch first: x is (batch, T, d)), unrolled over the
 * fixed T into the compiled graph. As PyTorch's nn.LSTM / nn.GRU (batch_first, zero initial
 * state): per layer weight_ih (G units, d), weight_hh (G units, units), bias_ih and bias_hh
 * (G units), gates in PyTorch's order (LSTM: i, f, g, o, G = 4; GRU: r, z, n, G = 3), every
 * tensor initialised U(-1/sqrt(units), 1/sqrt(units)) (with a network initialiser set: weights
 * from it, biases 0). LSTM: c' = f c + i g, h' = o tanh(c'); GRU: n = tanh(W_in x + b_in +
 * r (W_hn h + b_hn)), h' = (1 - z) n + z h. Stacked layers (layers k > 1) are k layers of the
 * network, each but the last returning its sequence; the call returns the last. */
typedef struct sx_nn_rnn_params {
    int64_t units;         /* hidden size, >= 1 */
    bool return_sequences; /* output (T, units), every step's h; else (units), the last: false */
    int layers;            /* stacked layers, >= 1: 1 */
    bool bias;             /* bias_ih and bias_hh: true */
} sx_nn_rnn_params;

sx_nn_rnn_params sx_nn_rnn_params_default(int64_t units);
/* p NULL, units < 1 or layers < 1: SX_E_ARG; an input not of rank 2: SX_E_RANK. */
sx_nn_layer *sx_nn_lstm(sx_nn_net *net, sx_nn_layer *in, const sx_nn_rnn_params *p);
sx_nn_layer *sx_nn_gru(sx_nn_net *net, sx_nn_layer *in, const sx_nn_rnn_params *p);

/* Multi-head scaled-dot-product self-attention over (T, d): Q, K, V = x W_q + b_q, ... (W (d, d),
 * initialised by the network's initialiser, biases 0), per head h of d / heads columns
 * softmax(Q_h K_h^T / sqrt(d / heads) + M) V_h with M = -inf above the diagonal when causal (a
 * position sees itself and earlier ones) else 0, the heads concatenated, then x W_o + b_o:
 * (T, d) -> (T, d). PyTorch's nn.MultiheadAttention with in_proj_weight = [W_q; W_k; W_v]^T.
 * Each head runs as one fused attention op (sx_cg_attention: tiled, the mask computed from the
 * indices, no (T, T) scores in memory). With fused_qkv, Q, K and V come from one (d, 3d) weight
 * "qkv_weight" = [W_q, W_k, W_v] (columns in that order: PyTorch's in_proj_weight or llm.c's
 * c_attn weight transposed) and a (3d) bias "qkv_bias", one product instead of three. dropout
 * drops attention weights in training (scaled by 1 / (1 - rate), as PyTorch's dropout_p): it needs
 * the (T, T) weights, so a training graph with a rate > 0 computes the layer by the plain
 * composition (the fused op in inference and in saved models). */
typedef struct sx_nn_attention_params {
    int heads;      /* >= 1, dividing d */
    bool causal;    /* false */
    bool bias;      /* true */
    bool fused_qkv; /* one (d, 3d) projection "qkv_weight" / "qkv_bias": false */
    double dropout; /* rate on the attention weights in training, 0 <= rate < 1: 0 */
    /* Rotary position embedding (RoFormer's RoPE) of Q and K, per head, before the scores, in
     * the half-rotation convention of GPT-NeoX and Hugging Face's LLaMA (rotate_half): with
     * dh = d / heads (even), h = dh / 2 and the angle a_i = t theta^(-2 i / dh) of position t
     * (0-based, absolute) and pair i < h, a head's row x becomes
     *   x'[i]     = x[i] cos a_i - x[i + h] sin a_i,
     *   x'[i + h] = x[i + h] cos a_i + x[i] sin a_i.
     * (Meta's original LLaMA code rotates interleaved pairs (x[2i], x[2i+1]) instead: the same
     * up to a permutation of Q's and K's columns.) Composed of slices, a concatenation and
     * products with constant cos / sin tables; a generator (sx_nn_generator_new) rotates each
     * new key at its absolute position and caches it rotated. */
    bool rope;         /* false */
    double rope_theta; /* the base, finite > 0: 10000 */
} sx_nn_attention_params;

sx_nn_attention_params sx_nn_attention_params_default(int heads);
/* p NULL, heads not dividing d, a dropout rate outside [0, 1), rope with an odd head size or a
 * base not finite and > 0: SX_E_ARG; an input not of rank 2: SX_E_RANK. */
sx_nn_layer *sx_nn_attention(sx_nn_net *net, sx_nn_layer *in, const sx_nn_attention_params *p);

/* ---------------------------------------------------------------- text generation
 *
 * A generator runs a GPT-style network one token per step with a key/value cache, as Hugging
 * Face's generate(use_cache=True) does: each step feeds one new token per sequence at the next
 * position; every causal attention layer computes that position's query, key and value, attends
 * over the keys and values of the earlier positions kept in the generator's caches ((batch
 * heads, max_len, d / heads) per layer) and appends its own; the prefix is never run again. Its
 * logits are those of the ordinary inference model run over the whole prefix, at its last
 * position, to rounding (the step attends by an explicit softmax over the cache, the full
 * model by the fused attention op).
 *
 * The network: its input (T) token ids (values of its dtype; input scale 1), its output (T, V)
 * logits over a vocabulary of V (after a last softmax layer or activation, the logits before
 * it), one input and one output, every layer applied position by position except attention.
 * Supported layer kinds: input, embedding, position embedding (the step's row of the table:
 * sx_nn_position_embedding_max's table sets how far generation may go), attention (causal;
 * rope rotates at the absolute position), layer norm (over the last axis), dense over the last
 * axis (sx_nn_linear, _nobias; a tied weight through sx_nn_share), activations, prelu, softmax
 * and log-softmax over the last axis, add, mul, max, average, concatenate, dropout (identity, as
 * at inference). Any other layer (convolutions, pooling, recurrent layers, reshapes, lambdas,
 * sx_nn_fully_connected, batch or group norm, non-causal attention) makes a network the
 * generator refuses, naming the layer. The generator reads the network's weights as they are
 * when each step runs (training between calls is seen).
 *
 * Sampling (sx_nn_sample): temperature 0 is greedy (the largest logit; ties: the lowest id).
 * Otherwise, as Hugging Face's warpers in this order: the logits divided by the temperature;
 * top_k > 0 keeps the k largest (ties by the lower id); top_p < 1 then keeps the smallest set of
 * the most likely remaining tokens whose softmax probabilities add up to at least top_p (always
 * the most likely one); one token is drawn from the softmax over what is kept, by the inverse of
 * its distribution function over the kept tokens in that order, with one uniform number
 * (sx_rng_uniform: xoshiro256** seeded by splitmix64, sx_rng_seed) per sequence and step. */
typedef struct sx_nn_generator sx_nn_generator;

typedef struct sx_nn_generate_params {
    int64_t batch;   /* sequences generated side by side, each with its own cache, >= 1: 1 */
    int64_t max_len; /* positions a sequence may hold (prompt and new tokens), >= 1; 0: the
                        smallest position table's rows, or the network's T without one: 0 */
} sx_nn_generate_params;

typedef struct sx_nn_sampling {
    double temperature; /* >= 0; 0 greedy: 1 */
    int64_t top_k;      /* >= 0; 0: every token: 0 */
    double top_p;       /* nucleus, 0 < p <= 1; 1: every token: 1 */
    uint64_t seed;      /* sx_nn_generate draws from sx_rng_seed(seed) at each call: 0 */
} sx_nn_sampling;

sx_nn_generate_params sx_nn_generate_params_default(void);
sx_nn_sampling sx_nn_sampling_default(void);

/* A generator over net for p's batch and context (p NULL: the defaults). It holds the step's
 * compiled graph and the caches, and borrows the network as a compiled model does (no layer
 * can be added while it lives; sx_nn_net_free leaves the network to it). Errors (*out NULL):
 * SX_E_ARG (NULL net or out, batch < 1, max_len < 0 or past a position table's rows),
 * SX_E_UNSUPPORTED (a layer the generator cannot run step by step, named, with the kinds it
 * can), SX_E_SHAPE (an input not (T) or an output not (T, V)), SX_E_DTYPE (not f32 or f64),
 * the network's own error, SX_E_NOMEM. */
SX_NODISCARD sx_status sx_nn_generator_new(sx_nn_net *net, const sx_nn_generate_params *p,
                                           sx_nn_generator **out);
/* NULL is fine. */
void sx_nn_generator_free(sx_nn_generator *gen);
/* The vocabulary V, the batch, the context max_len, and the positions filled so far (0 after
 * sx_nn_generator_reset); 0 for NULL. */
int64_t sx_nn_generator_vocab(const sx_nn_generator *gen);
int64_t sx_nn_generator_batch(const sx_nn_generator *gen);
int64_t sx_nn_generator_max_len(const sx_nn_generator *gen);
int64_t sx_nn_generator_pos(const sx_nn_generator *gen);
/* Empty the caches: the next step is position 0. */
void sx_nn_generator_reset(sx_nn_generator *gen);
/* One step: tokens (batch) at the next position of each sequence, logits (batch, V) of the
 * network's dtype (the distribution of the token after them) when not NULL. Errors (nothing
 * changed): SX_E_ARG (NULL gen or tokens), SX_E_RANGE (the context is full: max_len positions;
 * a token outside [0, V)), SX_E_SHAPE / SX_E_DTYPE (logits not (batch, V) of the dtype). */
SX_NODISCARD sx_status sx_nn_generator_step(sx_nn_generator *gen, const int32_t *tokens,
                                            sx_tensor *logits);
/* Generate: reset, run the prompt (batch, n_prompt) (row b: sequence b's tokens), then n_new
 * tokens per sequence into out (batch, n_new), each sampled by s (NULL: greedy) from the
 * logits of the step before and fed back; seeded by s->seed, so the same call gives the same
 * tokens. Errors (out unchanged on an argument error): SX_E_ARG (NULL gen, prompt, or out with
 * n_new > 0; n_prompt < 1, n_new < 0; bad sampling, see sx_nn_sample), SX_E_RANGE (n_prompt +
 * n_new over max_len: the context would overflow; a prompt token outside [0, V)), and
 * sx_nn_generator_step's. */
SX_NODISCARD sx_status sx_nn_generate(sx_nn_generator *gen, const int32_t *prompt, int64_t n_prompt,
                                      int64_t n_new, const sx_nn_sampling *s, int32_t *out);
/* Sample one token per row of logits (n, V) (f32 or f64) into out (n), drawing from rng (one
 * sx_rng_uniform per row unless greedy; may be NULL when greedy), as described above. s NULL:
 * greedy. Errors: SX_E_ARG (NULL logits or out, a NULL rng when not greedy, a temperature not
 * finite and >= 0, top_k < 0, top_p outside (0, 1]), SX_E_RANK (logits not of rank 2),
 * SX_E_DTYPE, SX_E_RANGE (a row with a NaN or +inf logit, or no finite one), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_nn_sample(const sx_tensor *logits, const sx_nn_sampling *s, sx_rng *rng,
                                    int32_t *out);

/* ---------------------------------------------------------------- training parameters */

/* Every loss is a mean: cross-entropy over the examples (-sum_k y_k log p_k per example, the
 * softmax of a last softmax layer folded in; for an output of rank > 1, (batch, ..., k), over
 * every position of the last axis: per-pixel classes of a segmentation), with label smoothing
 * e (label_smoothing) the targets y are (1 - e) y + e / k; MSE, L1, hinge, Huber and binary
 * cross-entropy over every output element (hinge with one-hot targets t read as 2t - 1:
 * max(0, 1 - (2t - 1) out); Huber with d = out - y and delta = huber_delta: d^2 / 2 for
 * |d| <= delta, else delta (|d| - delta / 2); binary cross-entropy with logits z, targets y in
 * [0, 1] (binary or multi-label: one sigmoid per element, folded in; no sigmoid layer last):
 * max(z, 0) - z y + log(1 + exp(-|z|)), which is -y log s(z) - (1 - y) log(1 - s(z)) without
 * its overflow). */
typedef enum {
    SX_LOSS_CROSS_ENTROPY,
    SX_LOSS_MSE,
    SX_LOSS_L1,
    SX_LOSS_HINGE,
    SX_LOSS_HUBER,
    SX_LOSS_BCE_LOGITS,
    SX_LOSS_COUNT /* not a loss: the number of them */
} sx_nn_loss;

/* "cross_entropy", "mse", "l1", "hinge", "huber", "bce_logits"; "?" for another value. */
const char *sx_nn_loss_name(sx_nn_loss l);

/* Several outputs. A network whose output's last axis holds several heads one after another
 * (e.g. sx_nn_concatenate of a class head and a regression head) trains each head with its own
 * loss and weight: loss = sum_h weight_h loss_h(out[..., head h], y[..., head h]), each loss_h
 * the mean its kind defines over its slice (cross-entropy and binary cross-entropy read their
 * slice as logits). y holds the heads' targets in the same order (a source's y row: the heads'
 * targets one after another). */
#define SX_NN_MAX_HEADS 8
typedef struct sx_nn_head {
    const char *name; /* for messages and the history's columns: letters, digits, '_' (1..31) */
    int64_t size;     /* elements of the last axis it takes, >= 1 */
    sx_nn_loss loss;  /* its loss (label_smoothing and huber_delta apply to it) */
    double weight;    /* its weight in the sum, finite >= 0 */
} sx_nn_head;

/* Named outputs: several outputs, each a layer of the network with a name, each
 * trained with its own loss and weight. Mark layer l as an output named `name` (1..31 letters,
 * digits, '_'), once per output, in the order their targets come. With no output marked, the
 * network outputs its last layer (as before); with one, that layer; with k >= 2 outputs, one flat
 * row per example, (batch, total): each output's elements one after another in the order they
 * were marked -- what predict returns, and the layout of the targets y (a source's y row holds
 * output 1's targets, then output 2's, ...; a source of targets, classes 0). Output o is trained
 * with the loss and weight of the head of its name in sx_nn_train_params.heads (its size 0 or
 * the output's element count; heads may come in any order), or, without heads, with p.loss and
 * weight 1: loss = sum_o weight_o loss_o(out_o, y_o), each read in the output's own shape (so
 * cross-entropy of an output of rank > 1 is per position, and an output ending in a softmax has
 * it folded in). The history reports each output's validation loss and metric
 * (sx_nn_epoch.val_head_loss, val_head_metric; columns named after the output). Saved model
 * files record the outputs' names and shapes (sx_nn_model_output). Returns l, or NULL with the
 * error recorded in the network as for a layer constructor: SX_E_ARG (l NULL, not a layer of
 * net, a bad or repeated name, a layer marked twice, more than SX_NN_MAX_HEADS outputs),
 * SX_E_STATE (compiled models alive over the network). */
sx_nn_layer *sx_nn_output(sx_nn_net *net, sx_nn_layer *l, const char *name);

/* Learning-rate schedules. The first four are computed on the host and fed as the lr input
 * every step; warmup, cosine and one_cycle live in the compiled graph, which computes the rate
 * from its step input (t, 1-based) and the base rate fed as lr (sx_nn_model_step's `lr`:
 * optim.lr); plateau is a decision on a metric measured outside the graph once per epoch, so it
 * stays on the host and scales the base rate it feeds. */
typedef enum {
    SX_SCHED_CONSTANT,    /* lr */
    SX_SCHED_STEP,        /* lr * gamma^floor(step / step_size) */
    SX_SCHED_EXPONENTIAL, /* lr * gamma^step */
    SX_SCHED_EXPLICIT,    /* values[min(epoch, n_values - 1)] */
    SX_SCHED_WARMUP,      /* in the graph: lr min(1, t / warmup_steps) */
    SX_SCHED_COSINE,      /* in the graph: lr t / W for t <= W = warmup_steps (0: none), then
                             min_lr + (lr - min_lr) (1 + cos(pi p)) / 2, p = min(1, (t - W - 1) /
                             (T - W)), T = total_steps (PyTorch's CosineAnnealingLR with T_max
                             T - W after a linear warmup) */
    SX_SCHED_ONE_CYCLE,   /* in the graph: PyTorch's OneCycleLR (cosine annealing, no momentum
                             cycling): s = t - 1, e = pct_start T - 1, a = lr / div_factor,
                             z = a / final_div_factor; s <= e: anneal(a, lr, s / e), else
                             anneal(lr, z, (s - e) / (T - 1 - e)), anneal(u, v, q) =
                             v + (u - v) (1 + cos(pi q)) / 2 */
    SX_SCHED_PLATEAU      /* on the host: PyTorch's ReduceLROnPlateau: the rate times factor
                             (not below min_lr) after more than `patience` epochs without an
                             improvement (relative, by threshold) of sx_nn_fit's validation
                             metric, or of the epoch's training loss without one (sx_nn_train);
                             its state (rate, best value, epochs without improvement) is kept
                             in checkpoints, so a resumed run goes on as the uninterrupted one */
} sx_nn_schedule_kind;

typedef struct sx_nn_schedule {
    sx_nn_schedule_kind kind;
    double gamma;
    int64_t step_size;
    const double *values;
    int n_values;
    /* warmup, cosine, one_cycle (sx_nn_schedule_default gives PyTorch's defaults) */
    int64_t warmup_steps;    /* warmup, cosine: W >= 0 (warmup: >= 1) */
    int64_t total_steps;     /* cosine, one_cycle: T; 0 = epochs x batches per epoch, filled in
                                by sx_nn_train and sx_nn_fit (sx_nn_compile_train wants it) */
    double min_lr;           /* cosine's floor, plateau's floor: 0 */
    double pct_start;        /* one_cycle: 0.3 */
    double div_factor;       /* one_cycle: 25 */
    double final_div_factor; /* one_cycle: 1e4 */
    double factor;           /* plateau: 0 < factor < 1, 0.1 */
    int patience;            /* plateau: epochs >= 0, 10 */
    double threshold;        /* plateau: relative improvement >= 0, 1e-4 */
} sx_nn_schedule;

/* A schedule of `kind` with PyTorch's defaults (gamma 0.1, step_size 1 for the host kinds). */
sx_nn_schedule sx_nn_schedule_default(sx_nn_schedule_kind kind);
/* The learning rate of 1-based step t of an in-graph schedule (warmup, cosine, one_cycle) from
 * base rate lr, in double: what the graph computes (in its dtype); lr for another kind. */
double sx_nn_schedule_value(const sx_nn_schedule *s, double lr, int64_t t);
/* The same as graph nodes in g: the rate from the base-rate node lr and the step node t (both of
 * one element); lr itself for a host kind. NULL with the graph's error, or SX_E_ARG (NULL, or
 * an in-graph schedule that sx_nn_compile_train would refuse: W < 1 for warmup, T <= W for
 * cosine, pct_start T < 2 or T - 1 <= pct_start T - 1 for one_cycle, a bad factor). */
sx_cg_node *sx_nn_schedule_node(sx_cg_graph *g, const sx_nn_schedule *s, sx_cg_node *lr,
                                sx_cg_node *t);

/* A user-defined loss: a scalar node (rank 0) built from graph nodes, from the
 * network's output `out` (batch, output shape) -- after its last activation, a final softmax
 * included -- and the target node `target` of the same shape, both of the network's dtype. It
 * replaces `loss` and the heads (n_heads; the heads are still checked).
 * Return NULL on failure (the graph's error is reported). */
typedef sx_cg_node *(*sx_nn_loss_fn)(sx_cg_graph *g, sx_cg_node *out, sx_cg_node *target,
                                     void *ctx);

/* Parameter groups: which parameters a group holds, */
typedef enum {
    SX_GROUP_NAME,       /* those whose name ("dense_1.weight") contains `name` */
    SX_GROUP_WEIGHTS,    /* the weights (dense and conv kernels: what l1/l2 regularise) */
    SX_GROUP_NOT_WEIGHTS /* the rest: biases, batch-norm gamma and beta, PReLU slopes */
} sx_nn_group_select;

/* and what it changes: its rate is lr_scale times the (scheduled) rate, and its weight decay
 * (sx_optim_params.weight_decay) is weight_decay; e.g. {SX_GROUP_NOT_WEIGHTS, NULL, 1, 0}: no
 * weight decay on biases and norm parameters. */
typedef struct sx_nn_param_group {
    sx_nn_group_select select;
    const char *name; /* SX_GROUP_NAME's substring */
    double lr_scale;  /* >= 0 */
    double weight_decay;
} sx_nn_param_group;

typedef struct sx_nn_train_params {
    int epochs;                  /* sx_nn_train: the network's total; sx_nn_fit: the call's,
                                    as Keras (see each): 1 */
    int batch;                   /* 100 */
    sx_nn_loss loss;             /* cross-entropy (softmax folded in when the last layer has it) */
    sx_optim_params optim;       /* Adagrad, lr 0.005 */
    sx_nn_schedule schedule;     /* constant */
    double l1, l2;               /* loss + l1 sum|w| + l2 sum w^2 over the weights (not biases,
                                    not batch norm), 0 */
    double clip_value;           /* clip each gradient element to [-v, v]; 0 = off (0) */
    double clip_norm;            /* scale all gradients so their global L2 norm <= n; 0 = off (0) */
    int64_t checkpoint_every;    /* write a checkpoint every N steps; 0 = at the end of each epoch
                                    when checkpoint_path is set (0) */
    const char *checkpoint_path; /* NULL = no checkpoints (NULL) */
    bool shuffle;                /* reshuffle the examples every epoch (true) */
    int verbose;                 /* 0 silent, 1 progress on stderr (bar on a terminal, lines
                                    otherwise; images/s or examples/s) (1) */
    int64_t progress_every;      /* plain progress line every N steps when not a terminal (100) */
    bool eager;                  /* train without the compiler (each step builds an eager graph)
                                    (false) */
    bool optimise;               /* run the graph optimiser (true) */
    bool plan_memory;            /* plan the graph's memory (true) */
    bool profile;                /* time every op kind; print the top 10 at the end (stderr)
                                    (false) */
    double huber_delta;          /* SX_LOSS_HUBER's delta, > 0: 1 */
    double label_smoothing;      /* cross-entropy's e, 0 <= e < 1: 0 */
    bool sparse_targets;         /* cross-entropy against class indices (PyTorch's
                                    cross_entropy with integer targets): sx_nn_model_step's y is
                                    (batch, output shape without its last axis) holding class
                                    numbers 0..classes-1 as values of the network's dtype, or
                                    ignore_index (no loss; the mean is over the other positions),
                                    instead of one-hot rows; no (positions, classes) target is
                                    made, and the softmax is folded into one pass per row forward
                                    and one backward. sx_nn_fit and sx_nn_train load a source's
                                    class indices so. One output, no heads, no loss_fn, no
                                    accumulate, not eager: false */
    int64_t ignore_index;        /* the class index sparse_targets skips: -100 */
    int n_heads;                 /* 0: one loss (`loss`) over the whole output; else 1..
                                    SX_NN_MAX_HEADS heads whose sizes add up to the output's last
                                    axis (`loss` is then unused); with several named outputs
                                    (sx_nn_output), the heads name outputs (size 0 or the
                                    output's element count; an output without a head takes
                                    `loss`, weight 1): 0 */
    const sx_nn_head *heads;     /* (n_heads), borrowed for the call: NULL */
    /* a user-defined loss, parameter groups, gradient accumulation */
    sx_nn_loss_fn loss_fn; /* NULL; else the loss (replacing `loss`; l1/l2 still added), called
                              once per compiled graph (the eager path: once per step); sx_nn_fit
                              reports its validation loss as NaN (the validation runs the
                              inference graph, without the user's nodes) */
    void *loss_ctx;        /* passed to loss_fn (NULL) */
    const sx_nn_param_group *groups; /* n_groups groups (borrowed); a parameter is in the first
                                        that selects it, else it keeps optim's lr and weight
                                        decay (NULL) */
    int n_groups;                    /* (0) */
    int accumulate; /* gradient accumulation in the compiled graph: k > 1 splits each batch into
                       k micro-batches (min(k, batch); sizes differing by at most one), each traced
                       and differentiated after the previous one, the gradients summed (each loss
                       weighted by its share of the batch) into one update: the step of the whole
                       batch, to rounding. The micro-batches run one after another (the next
                       reads its rows after every gradient sum so far), so the planned memory
                       holds one micro-batch's activations (a 4-way split of a small conv net:
                       0.35x the whole batch's arena). 0 or 1: off. Not with batch norm
                       (SX_E_UNSUPPORTED: it would normalise by the micro-batches' statistics) nor
                       eager (SX_E_ARG) (0) */
    /* data-parallel training (see "Data-parallel training" below) */
    const struct sx_nn_comm *comm; /* NULL: sx_nn_comm_default() (set by sx_mpi_init under
                                      mpirun with > 1 rank); borrowed for the call (NULL) */
    bool local;                    /* train alone even when a default communicator is set (false) */
} sx_nn_train_params;

sx_nn_train_params sx_nn_train_params_default(void);

/* ---------------------------------------------------------------- the neural compiler */

typedef struct sx_nn_compile_report {
    int64_t nodes_before, nodes_after, edges_before, edges_after;
    size_t planned_bytes, naive_bytes, peak_live_bytes;
    double optimise_seconds, plan_seconds, compile_seconds;
    sx_cg_opt_report opt;   /* per pass (zero when not optimised) */
    sx_cg_plan_report plan; /* the memory plan */
} sx_nn_compile_report;

/* The training graph of `net` for batches of `batch` examples: forward pass, loss, backward
 * pass, and the update of every parameter and optimiser state, optimised and planned once. The
 * model borrows the network (sx_nn_net_free leaves the network to its last model); no layer
 * can be added while it lives. The output may have any shape: (batch, classes), (batch, k)
 * targets, (batch, h, w, c) per-pixel values...; its targets y have the same shape. Errors (*out
 * NULL): SX_E_ARG (NULL net or out, batch < 1, a bad loss, label smoothing or heads: see
 * sx_nn_train_params; heads on a network ending in a softmax), the network's own error,
 * SX_E_STATE (no input layer, or a training model with another optimiser kind is alive over the
 * network: they would share its optimiser state), SX_E_SHAPE (heads that do not add up to the
 * output's last axis, or batch times a layer's size has too many elements), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_nn_compile_train(sx_nn_net *net, const sx_nn_train_params *p,
                                           int64_t batch, sx_nn_model **out);
/* The inference graph: forward pass only, dropout off, batch norm with running statistics;
 * runs any batch of up to `batch` examples. Errors as sx_nn_compile_train's. */
SX_NODISCARD sx_status sx_nn_compile_infer(sx_nn_net *net, int64_t batch, sx_nn_model **out);
void sx_nn_model_free(sx_nn_model *m);
sx_nn_compile_report sx_nn_model_report(const sx_nn_model *m);
sx_cg_graph *sx_nn_model_graph(sx_nn_model *m);

/* One training step on a batch: x (n, input shape), y (n, output shape): one-hot rows or
 * targets, with n == the compiled batch; lr is this step's learning rate (with an in-graph
 * schedule, the base rate the graph schedules from: optim.lr), step the 1-based step number.
 * Writes the batch loss and the number of correct predictions (argmax over the last axis, per
 * example or per position of an output of rank > 1) when not NULL. A model compiled over a
 * communicator of > 1 rank (sx_nn_comm_of(p)) is called by every rank with its own
 * batch (rows rank x batch.. of the global batch, for its dropout masks): the gradients, each
 * scaled by 1/ranks, are summed over the ranks inside the step, before the update (see
 * "Data-parallel training"; the gemm-update fusion does not apply); loss and correct stay this
 * rank's own; a communicator failure is its error (SX_E_IO from mpi/).
 * x is of the model's dtype, or an integer tensor (SX_I32, SX_I64) for a network whose inputs
 * are all ids (sx_nn_input_ids); with sparse_targets y may be an integer tensor of class
 * indices too (else SX_E_DTYPE; a value the model's dtype does not hold exactly: SX_E_RANGE). */
SX_NODISCARD sx_status sx_nn_model_step(sx_nn_model *m, const sx_tensor *x, const sx_tensor *y,
                                        double lr, int64_t step, double *loss, int64_t *correct);
/* Outputs (n, output shape) for x (n, input shape), n <= the compiled (or loaded) batch; a
 * smaller n runs a graph of its own size, made on first use and kept. x must be of the model's
 * dtype (or an integer tensor of ids, as for sx_nn_model_step) and input shape, `out` (n,
 * sx_nn_model_output_shape) of its dtype ((n, classes) for a (batch, classes) output, (n, total)
 * with several outputs): another shape, even of as many elements, is SX_E_SHAPE naming both shapes,
 * another dtype SX_E_DTYPE (out unchanged); a training model is SX_E_ARG. */
SX_NODISCARD sx_status sx_nn_model_predict(sx_nn_model *m, const sx_tensor *x, sx_tensor *out);
/* How sx_nn_model_predict runs a batch of many small examples: cut into sub-batches of `rows`
 * rows that the threads (sx_threads_get) run side by side, each through its own copy of the
 * graph for that many rows (the weights shared, one kernel thread each: a sub-batch's values
 * stay in its core's cache from layer to layer), the rows left over after the last full
 * sub-batch then through the model's graph for their number. rows = 0 (the default) chooses:
 * sub-batches of 4..32 rows whose share of the graph's arena fits a few MB, or whole batches for
 * large examples; rows >= the model's batch: whole batches always. A batch is cut only when each
 * thread gets a full sub-batch (two with one thread), and never for a graph being profiled
 * (sx_cg_profile_enable) or run by engine workers (sx_cg_set_workers). Predictions are the same
 * bits either way whenever the network computes each example alone (every strix layer at
 * inference does; batch norm uses its running statistics). The copies are made at the first
 * cut call and kept with the model (their arenas: about `rows` / batch of the model's each).
 * Errors: SX_E_ARG (NULL, rows < 0). sx_nn_model_sub_batch: the rows per sub-batch m cuts
 * batches into (0: whole batches; the automatic choice is made at the first call; 0 for NULL). */
SX_NODISCARD sx_status sx_nn_model_set_sub_batch(sx_nn_model *m, int64_t rows);
int64_t sx_nn_model_sub_batch(sx_nn_model *m);
/* Outputs (n, output shape) for x (n, input shape), any n >= 1, without the compiler: the forward
 * graph is built in eager mode (each node computed as it is made, every intermediate held until
 * the end) and freed; dropout off, batch norm with running statistics, as a compiled inference
 * model. Errors: SX_E_ARG (a NULL argument), SX_E_SHAPE and SX_E_DTYPE as sx_nn_model_predict's
 * (x or out of another shape or dtype), the network's own error, SX_E_NOMEM. */
SX_NODISCARD sx_status sx_nn_predict_eager(sx_nn_net *net, const sx_tensor *x, sx_tensor *out);
/* A model's input shape (without the batch axis; (total) for a network with several inputs),
 * number of outputs (classes; 0 for an output that is not (batch, classes)), the factor from
 * pixel bytes to its input values (a compiled model's is its network's), and dtype. */
/* The result of one example (predict's out without the batch axis): the output's shape, or
 * (total) with several outputs; rank 0 and NULL for NULL. */
int sx_nn_model_output_rank(const sx_nn_model *m);
const int64_t *sx_nn_model_output_shape(const sx_nn_model *m);
/* The model's outputs (1 unless the network marked several with sx_nn_output; 0 for NULL), and
 * output k's name ("y" for an unnamed one, the graph's output), rank and shape (without the batch
 * axis; written when not NULL, valid while the model lives); NULL for k out of range. A loaded
 * model has them from its file (a version-1 file: one unnamed output). */
int sx_nn_model_n_outputs(const sx_nn_model *m);
const char *sx_nn_model_output(const sx_nn_model *m, int k, int *rank, const int64_t **shape);
/* The model's input layers (sx_nn_input_add; 0 for NULL) and input k's shape (its rank into
 * *rank when not NULL); NULL for k out of range. x is (n, total) with several. */
int sx_nn_model_n_inputs(const sx_nn_model *m);
const int64_t *sx_nn_model_input(const sx_nn_model *m, int k, int *rank);
int sx_nn_model_input_rank(const sx_nn_model *m);
const int64_t *sx_nn_model_input_shape(const sx_nn_model *m);
int64_t sx_nn_model_classes(const sx_nn_model *m);
double sx_nn_model_input_scale(const sx_nn_model *m);
sx_dtype sx_nn_model_dtype(const sx_nn_model *m);

/* ---------------------------------------------------------------- training loop */

typedef struct sx_nn_train_report {
    int64_t steps;
    double train_seconds; /* the loop alone: no loading, no testing */
    double last_loss;     /* mean loss of the last epoch */
    double test_accuracy; /* after the last epoch, when a test set is given; else -1 */
    sx_nn_compile_report compile;
} sx_nn_train_report;

/* Train on (train_x u8 images, labels) for p->epochs; evaluate on the test set after each
 * epoch when it is not NULL. Stops cleanly (writing a checkpoint when a path is set) on SIGINT
 * and returns SX_E_INTERRUPTED. Resumes from p->checkpoint_path when that file exists and
 * matches the network.
 * A checkpoint (version 3) holds the weights, optimiser state, step counters and dropout
 * generator, the run's batch size and optimiser with its hyper-parameters (weight decay and
 * dampening included), the schedule's total steps and the reduce-on-plateau state. Resuming
 * checks them before changing anything: another optimiser kind, or other hyper-parameters that
 * its state depends on (momentum, rho, beta1, beta2, eps, dampening), is SX_E_STATE naming
 * both; the learning rate and the weight decay may change, and the schedule's total steps
 * differ (each noted on stderr when verbose). Version-2 checkpoints (no weight decay, dampening
 * or schedule state: the plateau starts again) still load. A checkpoint written mid-epoch resumes
 * only with its own batch size (the steps done are counted in batches): another one is SX_E_STATE
 * naming both (a checkpoint at an epoch's end resumes with any). Version-1 checkpoints (no
 * batch or hyper-parameters recorded) load at an epoch's end and are refused mid-epoch.
 * Errors also: SX_E_ARG (NULL net or train, a bad parameter), SX_E_STATE (a network with
 * several named outputs: sx_nn_fit trains those), SX_E_SHAPE (the data does not fit the
 * network), SX_E_FORMAT (a checkpoint of another network, or damaged), SX_E_IO, and
 * those of sx_nn_compile_train. */
/* p->epochs counts the network's epochs, not this call's: a network already trained (or resumed)
 * for e epochs trains epochs e+1..p->epochs, and nothing when e >= p->epochs. */
SX_NODISCARD sx_status sx_nn_train(sx_nn_net *net, const sx_nn_train_params *p,
                                   const sx_ds_images *train, const sx_ds_images *test,
                                   sx_nn_train_report *report);
/* Accuracy of the network on a labelled image set. */
SX_NODISCARD sx_status sx_nn_evaluate(sx_nn_net *net, const sx_ds_images *set, int64_t batch,
                                      double *accuracy);

/* ---------------------------------------------------------------- training on any data set */

/* What a source is judged by, every epoch (validation, and training when train_metric). A
 * position is one example of a (batch, k) output, or one position of the last axis of an output
 * of rank > 1 (a pixel of a (batch, h, w, k) segmentation). */
typedef enum {
    SX_METRIC_AUTO,     /* accuracy for a source of classes, MSE for one of targets; the loss
                           with heads */
    SX_METRIC_ACCURACY, /* positions whose largest output is their class, the largest target
                           (higher is better) */
    SX_METRIC_MSE,      /* mean squared error over every output element (lower is better) */
    SX_METRIC_MAE,      /* mean absolute error over every output element (lower is better) */
    SX_METRIC_LOSS,     /* the loss of p.train (heads weighted), no l1/l2 terms (lower is
                           better) */
    SX_METRIC_TOP_K,    /* positions whose class is among the top_k largest outputs (fewer than
                           top_k outputs strictly larger than its own; higher is better) */
    SX_METRIC_BINARY_ACCURACY /* elements with (out > threshold) == (y > 0.5): binary and
                                 multi-label outputs (higher is better) */
} sx_nn_metric;

/* "auto", "accuracy", "mse", "mae", "loss", "top_k", "binary_accuracy"; "?" for another value. */
const char *sx_nn_metric_name(sx_nn_metric m);

/* What the per-step callback sees, after each training step. */
typedef struct sx_nn_step_info {
    int64_t step;      /* 1-based, the network's count */
    int64_t epoch;     /* 1-based: the epoch the step belongs to */
    int64_t batch;     /* 1-based index of the batch in the epoch */
    int64_t batches;   /* batches per epoch */
    int64_t examples;  /* examples in this batch */
    double loss;       /* this batch's loss (l1/l2 terms included) */
    double epoch_loss; /* mean loss over the epoch's examples so far */
    double lr;         /* the learning rate of this step */
} sx_nn_step_info;

/* Called after every step (from the training thread): log, watch, stop. Return true to stop:
 * training ends after this step as early stopping ends it (a checkpoint written when a path is
 * set, mid-epoch when mid-epoch; the best weights restored when asked; SX_OK; the history says
 * stopped_by_callback). The epoch cut short gets no history row. */
typedef bool (*sx_nn_step_fn)(const sx_nn_step_info *info, void *ctx);

/* Which way the monitored value of sx_nn_fit_params.monitor improves. */
typedef enum {
    SX_MONITOR_AUTO, /* upwards for an accuracy-like column (accuracy, top_k, binary_accuracy:
                        its own metric's direction), downwards for the others (losses, mse, mae) */
    SX_MONITOR_MIN,  /* lower is better */
    SX_MONITOR_MAX   /* higher is better */
} sx_nn_monitor_mode;

typedef struct sx_nn_fit_params {
    sx_nn_train_params train; /* epochs, batch, loss (or heads), optimiser, schedule,
                                 checkpoints, shuffle, progress... as for sx_nn_train (its
                                 defaults) */
    sx_ds_augment augment;    /* of the training batches (image sources): none. Its mean and
                                 std become the network's normalisation (see "preprocessing";
                                 SX_E_STATE when the network has another one) */
    bool standardize;         /* when the network has no normalisation: per-feature mean and
                                 std of the training source, made the network's (Keras'
                                 Normalization.adapt) (false) */
    bool standardize_targets; /* when the network has no target scaling and the training source
                                 holds targets: their per-element mean and std, made the
                                 network's target scaling (false). With target scaling
                                 the losses (train and val) are those of the standardised
                                 targets, the metrics (mse, mae) in the targets' units */
    sx_nn_metric metric;      /* SX_METRIC_AUTO */
    const char *monitor;      /* the history column that early stopping, restore_best and
                                 best_epoch follow, by its name in sx_nn_history_write_csv's
                                 header: "train_loss", "val_loss", "val_<metric>" (e.g.
                                 "val_accuracy"), "train_<metric>" (needs train_metric),
                                 "val_loss_<head>", "val_<metric>_<head>" (heads or outputs); a
                                 name two columns share ("train_loss" with the loss metric) is
                                 the first. Another name is SX_E_ARG listing this fit's names; a
                                 "val_" column without a validation source, or "val_loss" with a
                                 loss_fn (its validation loss is not computed), SX_E_ARG too.
                                 NULL: "val_loss" with a validation source ("val_<metric>" with
                                 a loss_fn), none without one (nothing stops early or is
                                 restored), as Keras. Before monitors, the validation metric
                                 (val_<metric>) was watched: give it here to keep that (NULL) */
    sx_nn_monitor_mode mode;  /* whether the monitored value improves downwards or upwards
                                 (SX_MONITOR_AUTO) */
    int patience;             /* early stopping: stop after this many epochs in a row without an
                                 improvement of the monitored value; 0 = never (0) */
    double min_delta;         /* an improvement is a change by more than this, >= 0 (0) */
    bool restore_best;        /* when the call ends (its epochs done, early stopping or the step
                                 callback; not on an error or Ctrl-C), put back the parameters of
                                 the epoch with the best monitored value, weights and batch-norm
                                 running statistics alike, unless the network holds them already
                                 (the optimiser state and the step and epoch counters stay the
                                 last step's): evaluating the network then gives that epoch's
                                 history row exactly (true) */
    int64_t start_epoch;      /* the network's epoch count the run started from: the call trains
                                 until the network has start_epoch + train.epochs epochs. -1: its
                                 count when the call begins, before a checkpoint is resumed (see
                                 sx_nn_fit). >= 0, e.g. 0 to finish in the same process a run
                                 that Ctrl-C interrupted (the network kept its count). Keras'
                                 initial_epoch names the start too, but then its epochs is the
                                 last epoch's number; here epochs always counts (-1) */
    int top_k;                /* SX_METRIC_TOP_K's k, >= 1 (5) */
    double threshold;         /* SX_METRIC_BINARY_ACCURACY's threshold on the outputs: 0 for
                                 logits (bce_logits), 0.5 after a sigmoid (0) */
    bool train_metric;        /* after every epoch, also judge the training source (forward
                                 passes only, no augmentation but the normalisation): the
                                 history's train_metric (true) */
    const char *history_path; /* NULL, or a file each epoch's row is appended to as it ends:
                                 JSON lines when the name ends in .jsonl or .json, else CSV (a
                                 header first when the file is new or empty) (NULL) */
    sx_nn_step_fn on_step;    /* NULL, or called after every step */
    void *on_step_ctx;        /* passed to on_step */
} sx_nn_fit_params;

/* The defaults noted above; train is sx_nn_train_params_default(). */
sx_nn_fit_params sx_nn_fit_params_default(void);

/* One epoch of a fit. Validation fields are NAN without a validation source. */
typedef struct sx_nn_epoch {
    int64_t epoch;       /* 1-based, the network's own count */
    double train_loss;   /* mean training loss over the epoch's examples (l1/l2 terms included,
                            dropout active, weights changing: as the steps saw it) */
    double val_loss;     /* the loss on the validation source (no l1/l2 terms) */
    double val_metric;   /* the metric on the validation source */
    double seconds;      /* training time of the epoch (evaluation not counted) */
    double train_metric; /* the metric on the training source after the epoch (NAN when
                            p.train_metric is false) */
    double lr;           /* the learning rate of the epoch's last step */
    double val_head_loss[SX_NN_MAX_HEADS];   /* with heads or several outputs: each one's loss
                                                on validation (unweighted); NAN for the others */
    double val_head_metric[SX_NN_MAX_HEADS]; /* each one's metric on validation (the history's
                                                head_metric); NAN for the others */
} sx_nn_epoch;

/* The epochs of one run of sx_nn_fit, one row each: those of the call (as Keras' History); a
 * run resumed from a checkpoint has the rows of the whole run (from its start epoch), those
 * before the resume read from PATH.fit (owned: sx_nn_history_free). */
typedef struct sx_nn_history {
    int64_t n;                /* rows */
    sx_nn_epoch *rows;        /* (n) */
    sx_nn_metric metric;      /* the metric used (never AUTO) */
    char monitor[64];         /* the column watched (sx_nn_fit_params.monitor resolved); "" when
                                 none */
    sx_nn_monitor_mode mode;  /* its direction, SX_MONITOR_MIN or MAX (AUTO when none) */
    double best;              /* the monitored value at best_epoch (NAN when none) */
    int64_t best_epoch;       /* the epoch of the best monitored value in this run: the
                                 parameters the network holds at the end when restore_best;
                                 0 when nothing is monitored or no value was a number */
    bool stopped_early;       /* patience ran out */
    bool stopped_by_callback; /* on_step asked to stop */
    int n_heads; /* the heads of the fit, or the outputs of a network with several (0: none),
                    named in head_names */
    char head_names[SX_NN_MAX_HEADS][32];
    sx_nn_metric head_metric[SX_NN_MAX_HEADS]; /* each one's metric, by its loss: accuracy
                                                  (cross-entropy, hinge), binary_accuracy
                                                  (bce_logits), mse (the others) */
} sx_nn_history;

/* Train `net` on any source (borrowed): x of any element type and shape with as many elements
 * as the network's input (fed as (batch, input shape)); y either class indices (classes > 0:
 * one per example for a (batch, classes) output, or one per position for an output of rank > 1
 * whose last axis holds the classes, e.g. (h, w) pixel labels for a (batch, h, w, classes)
 * segmentation; the targets are their one-hot rows, so cross-entropy, label smoothing and
 * per-position accuracy are those of the one-hot targets) or targets (classes == 0: y_size
 * elements matching the network's output of any shape, e.g. (batch, k) regression, (batch, h,
 * w, c) per-pixel targets, the heads' targets one after another, or those of several named
 * outputs one after another). Batches come from an sx_ds_loader (shuffled per p->train.shuffle with
 * the network's seed, the last batch partial, augmented per p->augment). After every epoch the
 * validation source `val` (optional, the same spec) is evaluated: loss and metric into the history
 * and, when verbose, one line on stderr. Early stopping and restoring are described in
 * sx_nn_fit_params.
 * Epochs, as Keras' fit: p->train.epochs counts the call's epochs, not the network's (unlike
 * sx_nn_train). A network that has trained e epochs when the call begins trains epochs
 * e+1..e+epochs: a second call continues the first (the rows continue the network's count, the
 * shuffling depends on the seed and the epoch only, the optimiser state and step count carry
 * on), so fits of 2 and then 2 epochs end with the weights of one fit of 4. Each call is a run of
 * its own: its history holds its rows, and early stopping (best value, patience count, best
 * weights) starts afresh, as Keras' EarlyStopping does at each fit. In-graph schedules without
 * total_steps run over the steps of epochs 1..e+epochs.
 * Checkpoints, resume, Ctrl-C (SX_E_INTERRUPTED, the history kept so far) and progress are
 * sx_nn_train's. The run's start is the network's count before the checkpoint is loaded, so a
 * new network resuming a checkpoint of epoch k (a new process) with the same epochs trains
 * k+1..epochs and ends where the uninterrupted run ends (p->start_epoch sets the start
 * otherwise). With a checkpoint path, the run's own state (its start epoch, monitor and mode,
 * the history so far, the best value and epoch, the patience count, the best weights) is written
 * after every epoch next to it, to PATH.fit (atomically, checksummed); resuming reads it back, so
 * a resumed run stops early, restores and reports as the uninterrupted one would (one that had
 * stopped early trains no more: it restores and reports). PATH.fit of another epoch than the
 * checkpoint is SX_E_STATE naming both; one of another monitor or mode is SX_E_STATE naming both
 * (a state written before monitors watched val_<metric>: it resumes with that monitor and its
 * metric's direction); one without best weights resumed with restore_best is SX_E_STATE. A
 * PATH.fit of another run (another start epoch: e.g. the earlier call's, when a network
 * continues with the same checkpoint path) or a missing one starts the run's state afresh
 * (noted when verbose).
 * Prefetch: the next batch is filled on the training thread, not by a worker while the graph
 * runs, because it does not pay: filling a batch costs about one conversion per input element
 * against a step of millions of multiply-adds that already runs on both cores (OpenMP, the
 * GEMM), so a worker could only take a core from the step, and a one-batch lookahead saves at
 * most the fill time. Measured on the 2-core machine: the loader fills the 30 batches of 100 of
 * 3000 MNIST images in 0.7 ms; mnist_train trains on them in 3.8 s: 0.02%. A callback source
 * doing I/O is the exception: it may prefetch itself.
 * `history` (may be NULL) receives the rows on success and on SX_E_INTERRUPTED; else it is
 * zeroed. Errors: SX_E_ARG (NULL net or train, a bad parameter, patience with nothing to monitor,
 * a monitor that names no column of this fit or one it does not compute, start_epoch below -1
 * or past the network's count (after the resume), start_epoch + epochs over INT_MAX, accuracy
 * or top-k on a source of targets with a (batch, k) output, accuracy, top-k or binary accuracy
 * with heads), SX_E_DTYPE (a network that is not
 * f32 or f64), SX_E_SHAPE (the data does not fit the network: x's element count, classes other
 * than the output's last axis or labels of another count than its positions, a source of classes
 * for several outputs; val differs from train; heads that do not add up to the output's last
 * axis or a head of another size than its named output), SX_E_ARG also for a head naming no
 * output of a network with several, SX_E_IO (history_path or PATH.fit cannot be
 * written), SX_E_STATE (see PATH.fit), and sx_nn_train's. */
SX_NODISCARD sx_status sx_nn_fit(sx_nn_net *net, const sx_nn_fit_params *p,
                                 const sx_ds_source *train, const sx_ds_source *val,
                                 sx_nn_history *history);
/* The loss (of p->train.loss or heads) and metric (of p->metric) of the network on source s,
 * in batches of p->train.batch. p NULL: the defaults. Errors as sx_nn_fit's. */
SX_NODISCARD sx_status sx_nn_evaluate_source(sx_nn_net *net, const sx_ds_source *s,
                                             const sx_nn_fit_params *p, double *loss,
                                             double *metric);
/* The network's outputs for every example of s, in s's order: a new tensor (n, output shape)
 * of the network's dtype, from the inference graph in batches of p->train.batch (validation
 * normalisation of p->augment applied). Probabilities where the loss defines them: a
 * cross-entropy output (or head) gets the softmax over its last axis (unless the network ends
 * in one), a bce_logits output the sigmoid of every element; other losses' outputs are the
 * values. p NULL: the defaults (cross-entropy). On success *out is owned by the caller
 * (sx_tensor_free). Errors (*out NULL): as sx_nn_evaluate_source's. */
SX_NODISCARD sx_status sx_nn_predict_source(sx_nn_net *net, const sx_ds_source *s,
                                            const sx_nn_fit_params *p, sx_tensor **out);
/* Release the rows (NULL is fine); the struct is zeroed. */
void sx_nn_history_free(sx_nn_history *h);
/* Write the history as CSV: a header "epoch,train_loss,val_loss,val_<metric>,seconds,
 * train_<metric>,lr" (then "val_loss_<head>" per head or output, then "val_<metric>_<head>"
 * with each one's metric), then one row per epoch (%.17g; "nan" where a value is missing). JSON
 * lines: one object per epoch with the same keys
 * ({"epoch":1,"train_loss":0.5,...}; null where a value is missing). Both write the whole file
 * (sx_nn_fit_params.history_path appends row by row instead).
 * Errors: SX_E_ARG (NULL), SX_E_IO. */
SX_NODISCARD sx_status sx_nn_history_write_csv(const sx_nn_history *h, const char *path);
SX_NODISCARD sx_status sx_nn_history_write_jsonl(const sx_nn_history *h, const char *path);
/* Draw the history as an SVG image (opens in any browser): two panels, the loss and the metric
 * against the epoch, each with the training curve (solid) and the validation curve (dashed)
 * where present, axes with ticks at round values and their labels, and a legend; `title` (may
 * be NULL) on top. Missing values (NAN) are gaps. The file is written to PATH.tmp and renamed
 * over PATH, so a reader never sees half a plot. Errors: SX_E_ARG (h or path NULL, no rows),
 * SX_E_IO. */
SX_NODISCARD sx_status sx_nn_history_write_svg(const sx_nn_history *h, const char *path,
                                               const char *title);

/* The loop's checkpoints as calls, for a loop of one's own around sx_nn_model_step: the
 * weights, optimiser state, step and epoch counters and dropout generator of `net`, and the
 * run's batch size and optimiser from p (p NULL: the defaults), written atomically (PATH.tmp,
 * then renamed) in cgraph's checksummed format; loading checks the file against the network and
 * p before changing anything (see sx_nn_train for what must match). A training model alive over
 * the network sees the loaded weights at its next step. Errors: SX_E_ARG (NULL net or path),
 * SX_E_IO, SX_E_FORMAT (another network's checkpoint, or damaged), SX_E_STATE (another
 * optimiser or hyper-parameters, a mid-epoch checkpoint of another batch size), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_nn_checkpoint_save(sx_nn_net *net, const sx_nn_train_params *p,
                                             const char *path);
SX_NODISCARD sx_status sx_nn_checkpoint_load(sx_nn_net *net, const sx_nn_train_params *p,
                                             const char *path);
/* The network's training counters: steps and epochs done, steps done in the current epoch
 * (what a checkpoint restores); -1 for NULL. */
int64_t sx_nn_net_steps(const sx_nn_net *net);
int64_t sx_nn_net_epochs(const sx_nn_net *net);
int64_t sx_nn_net_epoch_steps(const sx_nn_net *net);

/* ---------------------------------------------------------------- files */

/* Save the network for inference: its inference graph (lambda nodes included), its weights and
 * running statistics, in a versioned, checksummed file written atomically. Any output shape:
 * (batch, classes), (batch, k) regression values, (batch, h, w, c) per-pixel maps, several named
 * outputs (sx_nn_output), several inputs (sx_nn_input_add); the file records the outputs'
 * names and shapes and the inputs' shapes, and the network's preprocessing: in the graph (its
 * first and last nodes, so the model takes raw data) and described in the metadata (see
 * "preprocessing"; model file version 3). An unset input scale is fixed to 1 first.
 * Errors: SX_E_ARG (NULL), the network's own error, SX_E_STATE (no input layer), SX_E_SHAPE
 * (class or feature names, or statistics, that do not fit the layers), SX_E_IO, SX_E_NOMEM. */
SX_NODISCARD sx_status sx_nn_save(sx_nn_net *net, const char *path);
/* A saved model, loaded without the network definition, for batches of up to `batch`
 * examples: an inference model like sx_nn_compile_infer's (sx_nn_model_predict, the accessors
 * below, sx_nn_model_free; sx_nn_model_step refuses it with SX_E_ARG; its report is zero).
 * The file is judged as sx_cg_file_read judges it (every field, every node through its shape
 * rule), then as a model: metadata strix.kind "model", input_scale a finite number, classes a
 * plain decimal count (>= 1 in version 1, >= 0 in version 2); outputs x, an input (batch,
 * example) with an example of rank 1..7, and y of x's dtype: (batch, classes) in version 1; in
 * version 2 ("model_version" 2) "outputs" ("name:d1xd2..." per output, ',' between) and
 * "inputs" ("d1xd2..." per input) give y's shape (the output's, or (batch, total)) and x's, and
 * y is (batch, classes) when classes > 0. Version 3 adds the preprocessing's description
 * (normalize_mean/std, target_mean/std: numbers separated by spaces; class_names,
 * feature_names: one per line, '\' and line feed escaped; image_resize), each checked against
 * x and y; its x is raw data. Versions 1 and 2 (x already scaled by input_scale) load with
 * sx_nn_preprocess.in_graph false. Predictions then have y's shape
 * (sx_nn_model_output_shape). Memory: the model holds its weights once, in the graph read from
 * the file (the file's bytes are freed before sx_nn_load returns, and the file on disk is no
 * longer read); its graph for `batch` (sx_nn_model_graph) and those for smaller batches
 * (sx_nn_model_predict) read those weights in place (sx_cg_graph_copy_shared), so a weight
 * changed through one graph (sx_cg_leaf_set) changes it in all of them, unnoticed by the
 * others. Errors (*out = NULL): SX_E_ARG (NULL, batch < 1), SX_E_IO, SX_E_FORMAT (any of the
 * above, the message naming the file), SX_E_UNSUPPORTED (a newer format: model_version above
 * 3), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_nn_load(const char *path, int64_t batch, sx_nn_model **out);
/* Save an inference model as a model file that sx_nn_load reads: a compiled model's network
 * as sx_nn_save does; a loaded model's graph as its file holds it; any other model's (an
 * imported one's) inference graph as it is, with its input scale and classes: for a file that
 * loads at any batch, give it an unoptimised graph (an optimised one may have the batch fixed
 * in fused nodes). Written atomically as sx_cg_save writes. Errors: SX_E_ARG (NULL, a training
 * model), SX_E_IO, SX_E_NOMEM. */
SX_NODISCARD sx_status sx_nn_model_save(sx_nn_model *m, const char *path);

/* ---------------------------------------------------------------- data-parallel training
 *
 * sx_nn_train and sx_nn_fit train data-parallel when they have a communicator of more than one
 * rank: p.comm, or (p.comm NULL and p.local false) the process's default, which
 * include/strix/sx_mpi.h's sx_mpi_init sets when the program runs under mpirun with > 1 rank. nn
 * itself never links MPI: a communicator is this table of functions, which mpi/ implements.
 *
 * What every rank does: after compiling (and, on rank 0, resuming from a checkpoint) rank 0's
 * weights, optimiser state, step counters and dropout generator are broadcast; p.batch is the
 * batch of ONE rank (as in PyTorch's DDP): every rank draws the same shuffled global batch of
 * size x p.batch examples and trains on its own rows [rank B, (rank + 1) B) of it (a smaller
 * last batch is split as evenly as it goes, each rank's share weighted by its row count); the
 * gradients are summed by allreduce (each rank's scaled first by its share of the global batch,
 * so the mean loss's gradient is the global batch's) before the optimiser's update, so every
 * rank ends each step with the same weights. The sums are part of the compiled step: the
 * gradients, in the order the backward pass completes them, are packed into buckets of up to
 * 1 MiB (one message each), each bucket's sum starts as soon as its last gradient is computed
 * and travels while the rest of the backward pass runs, and the updates wait for their bucket
 * (cgraph's allreduce_start / allreduce_part). Passes that never materialise a whole gradient
 * (the gemm-update fusion: a dense layer's weight gradient folded into its update) step aside:
 * the gradient is read by its bucket. Batch-norm running statistics are averaged over the ranks
 * after each step (batch statistics stay per rank, as in DDP without SyncBatchNorm), in one
 * message with the loss. Dropout masks: every rank draws the same keys (rank 0's generator) and
 * takes its rows of the global batch's masks, so with dropout too the run is the single
 * process's of batch size x B. Only rank 0 prints
 * progress, writes checkpoints (and sx_nn_fit's state and history); every rank evaluates (the
 * same weights, so the same figures). The on_step callback runs on every rank with the global
 * figures and must decide the same everywhere. A communicator failure (a rank died, a timeout)
 * is SX_E_IO naming the call; the run cannot continue (mpi/: sx_mpi_finalize then aborts the
 * job). Not with p.eager (SX_E_ARG). */
typedef struct sx_nn_comm {
    int rank, size; /* this process's rank in 0..size-1, and the number of ranks */
    void *ctx;      /* the implementation's */
    /* In place over n elements of buf (SX_F32 or SX_F64) on every rank: their sum (max: false)
     * or their maximum (max: true); blocks until done. */
    sx_status (*allreduce)(void *ctx, void *buf, int64_t n, sx_dtype dt, bool max);
    /* bytes of buf from rank root to every rank; blocks until done. */
    sx_status (*bcast)(void *ctx, void *buf, int64_t bytes, int root);
    /* Optional (start or wait NULL: allreduce is used, blocking, where a sum starts): start an
     * in-place sum of n elements of buf that runs while the caller goes on (buf untouched by the
     * caller until it is waited for); wait(buf) waits for the sum started on buf (at once when
     * none is in flight); finish waits for every started one. Both return the first failure.
     * Started sums are matched across ranks in the order they are started. start and wait may
     * be called from the engine's worker threads (one at a time for start: the compiled step
     * orders its starts), and wait from several at once. */
    sx_status (*start)(void *ctx, void *buf, int64_t n, sx_dtype dt);
    sx_status (*finish)(void *ctx);
    sx_status (*wait)(void *ctx, void *buf);
} sx_nn_comm;

/* The process's default communicator (not copied: it must outlive its use); NULL clears it. */
void sx_nn_comm_set_default(const sx_nn_comm *c);
const sx_nn_comm *sx_nn_comm_default(void);
/* The communicator a run with these parameters uses: NULL when it trains alone (no
 * communicator, p.local, or one rank). */
const sx_nn_comm *sx_nn_comm_of(const sx_nn_train_params *p);
/* Bytes of gradient a training model over a communicator summed in its last step (0 for any
 * other model). */
int64_t sx_nn_model_comm_bytes(const sx_nn_model *m);

#ifdef __cplusplus
}
#endif

#endif /* SX_NN_H */
