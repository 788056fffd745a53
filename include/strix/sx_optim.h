/* sx_optim.h: losses and optimisers as graph builders. This layer knows graphs, not networks:
 * an optimiser turns (parameter, gradient) into its formula in element-wise graph ops, whose new
 * states and new parameter are assigned in place (sx_cg_assign). The graph optimiser's
 * element-wise fusion turns those assigns into one fused_update node per parameter, a single
 * pass over memory writing the parameter and its states, and folds a dense layer's matmul
 * gradient into it (SX_PASS_GEMM_UPDATE). Optimised or not, the operations and their order are
 * the same, so the bits are.
 *
 * Errors follow cgraph: status values, a message in sx_last_error(), out-parameters NULL.
 * NULL: the functions of this header that take a pointer return SX_E_ARG for a NULL one (a
 * NULL `states` excepted: see sx_optim_update); those taking a kind accept any value (an
 * unknown kind has no state and the name "bad-optimiser"). */
#ifndef SX_OPTIM_H
#define SX_OPTIM_H

#include "sx_cgraph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SX_OPTIM_SGD,
    SX_OPTIM_MOMENTUM,
    SX_OPTIM_NESTEROV,
    SX_OPTIM_ADAGRAD,
    SX_OPTIM_RMSPROP,
    SX_OPTIM_ADAM,             /* PyTorch's Adam: eps added after the bias correction */
    SX_OPTIM_ADAMW,            /* PyTorch's AdamW: Adam with decoupled weight decay */
    SX_OPTIM_AMSGRAD,          /* PyTorch's Adam(amsgrad=True) */
    SX_OPTIM_RMSPROP_CENTERED, /* PyTorch's RMSprop(centered=True) */
    SX_OPTIM_ADAM_KERAS,       /* Keras's Adam (and strix's first Adam): eps ("epsilon hat")
                                  added to sqrt(v) before the bias correction */
    SX_OPTIM_RMSPROP_MOMENTUM, /* PyTorch's RMSprop(momentum=mu): a momentum buffer over the
                                  scaled gradient */
    SX_OPTIM_COUNT
} sx_optim_kind;

const char *sx_optim_name(sx_optim_kind k); /* "adagrad" */
/* The kind named by s ("sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam", "adamw",
 * "amsgrad", "rmsprop_centered", "adam_keras", "rmsprop_momentum"). SX_E_ARG (*out unchanged) for
 * another name or NULL. */
SX_NODISCARD sx_status sx_optim_parse(const char *s, sx_optim_kind *out);

/* Hyper-parameters (those a kind does not use are ignored). */
typedef struct sx_optim_params {
    sx_optim_kind kind;
    double lr;           /* base learning rate (a schedule may scale it per step) */
    double momentum;     /* momentum, nesterov, rmsprop_momentum: mu */
    double rho;          /* rmsprop: decay of the squared-gradient average */
    double beta1, beta2; /* adam */
    double eps;          /* adagrad, rmsprop, adam: added to the root in the denominator */
    double weight_decay; /* >= 0. adamw: decoupled, p <- p (1 - lr wd) before the step; every
                            other kind: PyTorch's L2 term in the gradient, g <- g + wd p */
    double dampening;    /* momentum: 0 <= d <= 1, v <- mu v + (1 - d) g after the first step
                            (PyTorch's SGD); nesterov wants 0 */
} sx_optim_params;

/* Defaults as in PyTorch: lr 0.01 (adam, adamw, amsgrad, adam_keras 0.001), momentum 0.9, rho
 * 0.99, betas 0.9/0.999, eps 1e-10 for adagrad and 1e-8 otherwise (adam_keras too: strix's first
 * Adam, bit for bit; Keras's own default is 1e-7), weight_decay 0 (adamw 0.01),
 * dampening 0. */
sx_optim_params sx_optim_params_default(sx_optim_kind kind);

/* How many state tensors (each shaped like the parameter) a kind keeps: sgd 0, momentum,
 * nesterov, adagrad and rmsprop 1, adam, adamw, adam_keras, rmsprop_centered and
 * rmsprop_momentum 2, amsgrad 3; and the name of state i ("velocity", "sum_sq", "mean_sq", "m",
 * "v", "v_max", "mean_grad", "momentum_buffer"). */
int sx_optim_n_states(sx_optim_kind k);
const char *sx_optim_state_name(sx_optim_kind k, int i);

/* Build the update of one parameter: its formula in element-wise graph ops and one assign per
 * tensor it writes, whose handles it stores in updates[0..*n) (at most 4): assign(state, new
 * state) per state, then assign(param, new param). Ask for all of them as outputs; each is a view
 * of what it writes. Optimised (sx_cg_optimise), they become one fused_update node (the last
 * handle) and a seq(state, it) per state: one pass over the parameter and its states. In an
 * eager graph the step runs once, as the handles are made (the new values are computed from the
 * old ones first, then written). `states` holds the optimiser's state parameters
 * (sx_optim_n_states of them, shaped like the parameter, zero at the start); NULL makes new
 * zero-initialised ones named "<param name>.<state name>". `lr` is a single-element node holding
 * this step's learning rate (an input fed every step, or a schedule computed in the graph from
 * the step, so schedules advance in a compiled graph); `step` is a single-element node holding
 * the 1-based step number, used by Adam's bias correction and by dampening (may be NULL for the
 * other kinds). With weight_decay > 0 (not adamw) the gradient g below is grad + wd param. The
 * update, per element, in the graph's dtype, in this order of operations:
 *   sgd:      p <- p - lr g
 *   momentum: v <- mu v + g;  p <- p - lr v       (nesterov: p <- p - lr (g + mu v))
 *             with dampening d > 0: v <- mu v + c g, c = 1 - d min(t - 1, 1)
 *   adagrad:  a <- a + g g;  p <- p - lr (g / (sqrt(a) + eps))
 *   rmsprop:  a <- rho a + (1 - rho) (g g);  p <- p - lr (g / (sqrt(a) + eps))
 *   rmsprop_centered: a as rmsprop's;  ga <- rho ga + (1 - rho) g;
 *             p <- p - lr (g / (sqrt(a - ga ga) + eps))
 *   rmsprop_momentum: a as rmsprop's;  b <- mu b + g / (sqrt(a) + eps);  p <- p - lr b
 *             (PyTorch's RMSprop with momentum mu = p->momentum, not centered)
 *   adam, adamw: p <- k p (adamw only);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) (g g);
 *             p <- p - s (m / (sqrt(v) / q + eps)),
 *             s = lr / (1 - b1^t), q = sqrt(1 - b2^t), k = 1 - lr wd
 *   amsgrad:  as adam with vmax <- max(vmax, v) in the denominator in place of v
 *   adam_keras: m, v as adam's;  p <- p - lr_t (m / (sqrt(v) + eps)),
 *             lr_t = lr (sqrt(1 - b2^t) / (1 - b1^t))
 * (the rates s, q, k, c and lr_t are single-element graph nodes computed from lr and step). Each
 * matches PyTorch's formula (tests/optim/test_torch.c: 10 steps to 1e-6 in f64).
 * Coefficients are rounded to the graph's dtype (a f32 graph steps with (float)mu).
 * Errors (*n = 0): SX_E_ARG (NULL g, p, param, grad, lr, updates or n, a NULL state in a
 * given `states`, an unknown kind, param not a parameter, adam/adamw/amsgrad/adam_keras or a
 * dampened momentum without step, a hyper-parameter out of range, nesterov with dampening),
 * SX_E_SHAPE (lr or step not of one element), SX_E_NOMEM, and the graph's error when a node
 * cannot be made (a state or gradient of another shape or dtype, a state that is not a
 * parameter). */
SX_NODISCARD sx_status sx_optim_update(sx_cg_graph *g, const sx_optim_params *p, sx_cg_node *param,
                                       sx_cg_node *grad, sx_cg_node *lr, sx_cg_node *step,
                                       sx_cg_node *const *states, sx_cg_node **updates, int *n);

#ifdef __cplusplus
}
#endif

#endif /* SX_OPTIM_H */
