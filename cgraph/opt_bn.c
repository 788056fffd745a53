/* opt_bn.c: batch-norm folding (issue 18), the pass SX_PASS_BN_FOLD. Inference batch norm is a
 * per-channel scale and shift, y = x a + b (nn/batch_norm.c); when x is a convolution read by
 * nothing else, the scale moves into the kernel's output channels: conv(x, k) a = conv(x, k a).
 * The shift stays an addition (a bias, fused with what follows). Equal in exact arithmetic
 * only, so the pass is off by default and inference graphs ask for it. */
#include "opt_impl.h"

/* a multiplies each output channel of conv (f of them) by one number: a holds f elements, or
 * one, in a rank-0 or rank-1 tensor of conv's dtype */
static bool channel_scale(const sx_cg_node *a, const sx_cg_node *conv)
{
    int64_t f = conv->value.shape[3];
    return a != conv && a->value.dtype == conv->value.dtype && a->value.rank <= 1 &&
           (a->value.size == f || a->value.size == 1);
}

/* mul(conv2d(x, k), a) -> conv2d(x, mul(k, a)) where the convolution has no other reader: k
 * (kh, kw, c/groups, f) broadcasts a over its last axis, the output channels. No cycle is
 * possible: a reaches the product without passing through the convolution, whose only reader is
 * the product. */
sx_status opt_pass_bn_fold(sx_cg_graph *g, int64_t *changed)
{
    int64_t n_nodes = g->n_nodes; /* nodes made here are not rewritten again this round */
    for (int64_t i = 0; i < n_nodes; i++) {
        sx_cg_node *n = g->nodes[i];
        if (n->dead || n->op != SX_OP_MUL)
            continue;
        for (int k = 0; k < 2; k++) {
            sx_cg_node *conv = n->in[k], *a = n->in[1 - k];
            if (conv->op != SX_OP_CONV2D || conv->n_users != 1 || conv->users[0] != n ||
                conv->pinned || !opt_same_shape(conv, n) || !channel_scale(a, conv))
                continue;
            sx_cg_node *ka = sx_cg_mul(g, conv->in[1], a);
            if (ka == NULL)
                return sx_cg_graph_status(g);
            if (!opt_same_shape(ka, conv->in[1])) { /* a bug in the shape rules: leave it */
                opt_kill(ka);
                continue;
            }
            ka->scope = conv->scope;
            sx_cg_node *ins[2] = {conv->in[0], ka};
            SX_TRY(opt_set_inputs(conv, 2, ins));
            SX_TRY(opt_replace(n, conv));
            (*changed)++;
            break;
        }
    }
    return SX_OK;
}
