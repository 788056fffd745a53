/* batch_norm.c: batch normalisation over every axis but the last (channels). Training
 * normalises with the batch's statistics and updates running averages kept in the network
 * (assign nodes run with the step); inference uses the running averages. */
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>

typedef struct bn_attr {
    sx_nn_batch_norm_params p;
    int running; /* index of running_mean (running_var follows) */
} bn_attr;

sx_nn_batch_norm_params sx_nn_batch_norm_params_default(void)
{
    sx_nn_batch_norm_params p = {.momentum = 0.99, .eps = 1e-3, .affine = true};
    return p;
}

/* Row r of the (2,c) statistics, as (c). */
static sx_cg_node *stats_row(sx_cg_graph *g, sx_cg_node *st, int r)
{
    int64_t c = sx_cg_node_shape(st)[1];
    sx_slice s[2] = {{r, r + 1, 1}, SX_SLICE_ALL};
    return sx_cg_reshape(g, sx_cg_slice(g, st, s), 1, &c);
}

/* The training graph's statistics of x (norm_stats with the per-channel axes: (mean; biased
 * variance) per channel, one pass), and the assigns that fold them into the running averages rm,
 * rv: running <- m running + (1 - m) batch. The running variance takes the unbiased batch variance
 * (times count / (count - 1)), as PyTorch and Keras do, while the batch is normalised with the
 * biased one. */
static sx_status batch_stats(nn_build *b, const bn_attr *a, sx_cg_node *x, sx_cg_node *rm,
                             sx_cg_node *rv, sx_cg_node **stats)
{
    sx_cg_graph *g = b->g;
    int r = sx_cg_node_rank(x);
    double m = a->p.momentum;
    *stats = sx_cg_batch_norm_stats(g, x);
    if (*stats == NULL)
        return SX_E_STATE; /* the graph holds the cause */
    sx_cg_node *mean = stats_row(g, *stats, 0), *var = stats_row(g, *stats, 1);
    double count = (double)(sx_cg_node_size(x) / sx_cg_node_shape(x)[r - 1]);
    double unbias = count > 1 ? count / (count - 1) : 1.0;
    sx_cg_node *um = sx_cg_assign(g, rm,
                                  sx_cg_add(g, sx_cg_mul(g, sx_cg_scalar_like(g, x, m), rm),
                                            sx_cg_mul(g, sx_cg_scalar_like(g, x, 1 - m), mean)));
    sx_cg_node *uv =
        sx_cg_assign(g, rv,
                     sx_cg_add(g, sx_cg_mul(g, sx_cg_scalar_like(g, x, m), rv),
                               sx_cg_mul(g, sx_cg_scalar_like(g, x, (1 - m) * unbias), var)));
    if (um == NULL || uv == NULL)
        return SX_E_STATE; /* the graph holds the cause */
    SX_TRY(nn_build_add_update(b, um));
    return nn_build_add_update(b, uv);
}

/* x (batch, ..., c) -> the same shape. Training: one norm op with the per-channel axes over the
 * batch's statistics (without affine, gamma 1 and beta 0); its gradient is two passes (norm_sums
 * and norm_dx). Inference: the running statistics as a per-channel scale and shift. */
static sx_cg_node *bn_forward(nn_build *b, sx_nn_layer *l, sx_cg_node *const *in,
                              sx_cg_node **pre_softmax)
{
    (void)pre_softmax;
    const bn_attr *a = l->attr;
    sx_cg_graph *g = b->g;
    sx_cg_node *x = in[0];
    int r = sx_cg_node_rank(x);
    int64_t c = sx_cg_node_shape(x)[r - 1];
    sx_cg_node *gamma = NULL, *beta = NULL;
    if (a->p.affine) {
        gamma = nn_param_node_of(b, l, 0);
        beta = nn_param_node_of(b, l, 1);
    } else if (b->mode == NN_TRAIN) {
        gamma = sx_cg_broadcast(g, sx_cg_scalar_like(g, x, 1), 1, &c);
        beta = sx_cg_broadcast(g, sx_cg_scalar_like(g, x, 0), 1, &c);
    }
    sx_cg_node *rm = nn_param_node_of(b, l, a->running),
               *rv = nn_param_node_of(b, l, a->running + 1), *stats = NULL;
    if (b->mode != NN_TRAIN) {
        /* inference: one scale and shift per channel from the running statistics,
         * y = x s + t with s = gamma / sqrt(running_var + eps), t = beta - running_mean s: the
         * work on (c) vectors, one multiply-add per element (fused with what follows), and a
         * scale that the optimiser's SX_PASS_BN_FOLD moves into a preceding convolution */
        sx_cg_node *s = sx_cg_rsqrt(g, sx_cg_add(g, rv, sx_cg_scalar_like(g, rv, a->p.eps)));
        if (a->p.affine)
            s = sx_cg_mul(g, gamma, s);
        sx_cg_node *t = a->p.affine ? sx_cg_sub(g, beta, sx_cg_mul(g, rm, s))
                                    : sx_cg_neg(g, sx_cg_mul(g, rm, s));
        return sx_cg_add(g, sx_cg_mul(g, x, s), t);
    }
    if (batch_stats(b, a, x, rm, rv, &stats) != SX_OK)
        return NULL;
    return sx_cg_batch_norm(g, x, stats, gamma, beta, a->p.eps);
}

static void bn_describe(const sx_nn_layer *l, char *buf, size_t size)
{
    const bn_attr *a = l->attr;
    snprintf(buf, size, "momentum %g eps %g%s", a->p.momentum, a->p.eps,
             a->p.affine ? "" : " no-affine");
}

const nn_layer_ops nn_batch_norm_ops = {"batch_norm", sizeof(bn_attr), bn_forward, bn_describe};

sx_nn_layer *sx_nn_batch_norm(sx_nn_net *net, sx_nn_layer *in, const sx_nn_batch_norm_params *p)
{
    const char *who = "sx_nn_batch_norm";
    sx_nn_layer *l = nn_layer_begin(net, who, L_BATCHNORM, 1, &in);
    if (l == NULL)
        return NULL;
    sx_nn_batch_norm_params d = sx_nn_batch_norm_params_default();
    if (p == NULL)
        p = &d;
    double momentum = p->momentum, eps = p->eps;
    sx_status s = in->rank < 1
                      ? sx_error(SX_E_RANK, "%s: input of rank 0 (no channel axis)", l->name)
                  : momentum >= 0 && momentum < 1 && eps > 0 && isfinite(eps)
                      ? SX_OK
                      : sx_error(SX_E_ARG, "%s: momentum %g (want 0 <= m < 1), eps %g (want > 0)",
                                 l->name, momentum, eps);
    bn_attr *a = l->attr;
    a->p = *p;
    a->running = p->affine ? 2 : 0;
    int64_t c[1] = {in->rank > 0 ? in->shape[in->rank - 1] : 1};
    if (s == SX_OK && p->affine)
        s = nn_layer_add_param(net, l, "gamma", 1, c, 1, 0, 0, true, false);
    if (s == SX_OK && p->affine)
        s = nn_layer_add_param(net, l, "beta", 1, c, 0, 0, 0, true, false);
    if (s == SX_OK)
        s = nn_layer_add_param(net, l, "running_mean", 1, c, 0, 0, 0, false, false);
    if (s == SX_OK)
        s = nn_layer_add_param(net, l, "running_var", 1, c, 1, 0, 0, false, false);
    return nn_layer_finish(net, who, l, s);
}
