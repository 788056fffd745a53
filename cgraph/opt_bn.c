/* opt_bn.c: the batch-norm passes (batch norm: the norm op with the per-channel axes,
 * cg_norm_per_channel). SX_PASS_BN_FOLD: inference batch norm is a per-channel scale and shift, y =
 * x a + b (nn/batch_norm.c); when x is a convolution read by nothing else, the scale moves into the
 * kernel's output channels: conv(x, k) a = conv(x, k a). The shift stays an addition (a bias, fused
 * with what follows). Equal in exact arithmetic only, so the pass is off by default.
 * SX_PASS_BN_RECOMPUTE: training's relu(batch_norm) is computed again for the backward pass instead
 * of kept (same bits, less memory). SX_PASS_BN_ADD: relu(add(batch_norm(x), res)) (a residual
 * block's end) as one batch norm that adds res and applies relu in its pass (same bits, one pass
 * over the activations fewer). */
#include "opt_impl.h"

/* a multiplies each output channel of conv (f of them) by one number: a holds f elements, or
 * one, in a rank-0 or rank-1 tensor of conv's dtype */
static bool channel_scale(const sx_cg_node *a, const sx_cg_node *conv)
{
    int64_t f = conv->value.shape[3];
    return a != conv && a->value.dtype == conv->value.dtype && a->value.rank <= 1 &&
           (a->value.size == f || a->value.size == 1);
}

/* mul(conv2d(x, k), a) -> conv2d(x, mul(k, a)) where the convolution has no other reader and k
 * has fewer elements than its output: k
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
            /* the kernel's product (once per evaluation: it depends on parameters, and kept
             * values would double the weights' memory) must touch fewer elements than the one
             * it removes from the activations (not so for batch 1's late layers) */
            if (conv->op != SX_OP_CONV2D || conv->attr.prog.n != 0 || conv->n_users != 1 ||
                conv->users[0] != n || conv->pinned || !opt_same_shape(conv, n) ||
                !channel_scale(a, conv) || conv->in[1]->value.size >= conv->value.size)
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

/* ---------------------------------------------------------------- batch-norm recompute */

/* relu(norm(x, stats, gamma, beta)) (per channel) read again long after the forward pass (a
 * training graph's gradient: the next convolution's backward-kernel op and relu's own gradient)
 * gets a second copy for those readers, made from the batch norm's inputs, which the backward pass
 * keeps anyway: the planner then frees the first relu's memory after its forward reader, and the
 * copy lives only in the backward pass. The same kernels on the same inputs: the same bits. The
 * copy of the batch norm is told apart by attr.norm.copy = 1 (so that structural hashing and common
 * subexpressions keep the two, and the pass does not copy it again). The first reader (lowest
 * id: the forward pass comes first in the renumbered graph) keeps the original. */
sx_status opt_pass_bn_recompute(sx_cg_graph *g, int64_t *changed)
{
    int64_t n_nodes = g->n_nodes;
    for (int64_t i = 0; i < n_nodes; i++) {
        /* r: relu(y) with y a batch norm read by r alone, or y itself when it applies relu
         * (SX_PASS_BN_RELU ran first) */
        sx_cg_node *r = g->nodes[i];
        if (r->dead || r->n_users < 2)
            continue;
        sx_cg_node *y = r->op == SX_OP_RELU ? r->in[0] : r;
        /* not with a residual (SX_PASS_BN_ADD): a copy would keep it alive into the backward
         * pass, and the block's output is read there anyway */
        if (y->op != SX_OP_NORM || y->attr.norm.copy != 0 || y->n_in != 4 ||
            !cg_norm_per_channel(y))
            continue;
        if (y != r ? y->n_users != 1 || y->pinned : y->attr.norm.relu == 0)
            continue;
        sx_cg_node *first = r->users[0];
        for (int k = 1; k < r->n_users; k++)
            if (r->users[k]->id < first->id)
                first = r->users[k];
        sx_cg_attr a = y->attr;
        a.norm.copy = 1;
        sx_cg_node *y2 = sx_cg_op_new(g, SX_OP_NORM, y->n_in, y->in, &a);
        sx_cg_node *r2 = y2 == NULL || y == r ? y2 : sx_cg_op_new(g, SX_OP_RELU, 1, &y2, &r->attr);
        if (r2 == NULL)
            return sx_cg_graph_status(g);
        y2->scope = y->scope;
        r2->scope = r->scope;
        /* the later readers, collected first: rewiring edits r's users */
        sx_cg_node *later[64];
        int n_later = 0;
        for (int k = 0; k < r->n_users && n_later < 64; k++) {
            sx_cg_node *u = r->users[k];
            bool seen = u == first;
            for (int j = 0; j < n_later && !seen; j++)
                seen = later[j] == u;
            if (!seen)
                later[n_later++] = u;
        }
        for (int k = 0; k < n_later; k++) {
            sx_cg_node *u = later[k], *ins[SX_CG_MAX_INPUTS];
            for (int j = 0; j < u->n_in; j++)
                ins[j] = u->in[j] == r ? r2 : u->in[j];
            SX_TRY(opt_set_inputs(u, u->n_in, ins));
        }
        (*changed)++;
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- batch norm + relu */

/* relu(norm(...)) where the per-channel norm has no other reader -> the norm with
 * attr.norm.relu = 1, which applies relu in its own pass (sx_tensor_batch_norm_act_ws: the same
 * bits as the two kernels): one pass over the activations fewer, forward and recomputed. */
sx_status opt_pass_bn_relu(sx_cg_graph *g, int64_t *changed)
{
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *r = g->nodes[i];
        if (r->dead || r->op != SX_OP_RELU)
            continue;
        sx_cg_node *y = r->in[0];
        if (y->op != SX_OP_NORM || y->n_in < 4 || !cg_norm_per_channel(y) ||
            y->attr.norm.relu != 0 || y->n_users != 1 || y->pinned)
            continue;
        y->attr.norm.relu = 1;
        y->valid = false;
        if (y->scope == 0)
            y->scope = r->scope;
        SX_TRY(opt_replace(r, y));
        (*changed)++;
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- batch norm + residual */

/* The batch norm among add's two inputs that can take the other as its residual: read by add
 * alone, no residual nor relu yet, not pinned, of add's shape and dtype as the other input is
 * (no broadcast); the first input is tried first. NULL: none. */
static sx_cg_node *bn_addend(const sx_cg_node *add, int *k)
{
    for (*k = 0; *k < 2; (*k)++) {
        const sx_cg_node *y = add->in[*k], *res = add->in[1 - *k];
        if (y->op == SX_OP_NORM && y->n_in == 4 && cg_norm_per_channel(y) &&
            y->attr.norm.relu == 0 && y->n_users == 1 && !y->pinned && opt_same_shape(y, add) &&
            opt_same_shape(res, add))
            return add->in[*k];
    }
    return NULL;
}

/* add(norm(x, ...), res) (either order, per channel) whose batch norm has no other reader -> the
 * batch norm with res as a fifth input (sx_tensor_batch_norm_res_ws: the normalised value rounded,
 * then res added); when add's only reader is relu, relu goes in too (attr.norm.relu = 1). The
 * same bits as the normalise, add and relu kernels (addition commutes), one pass over the
 * activations instead of two. Both inputs batch norms (a projection shortcut): the first takes
 * the second as its residual. Runs before element-wise fusion, which would take add and relu
 * into a fused chain. */
sx_status opt_pass_bn_add(sx_cg_graph *g, int64_t *changed)
{
    int64_t n_nodes = g->n_nodes;
    for (int64_t i = 0; i < n_nodes; i++) {
        sx_cg_node *add = g->nodes[i];
        if (add->dead || add->op != SX_OP_ADD || add->n_in != 2)
            continue;
        int k;
        sx_cg_node *y = bn_addend(add, &k);
        if (y == NULL)
            continue;
        /* relu too when it is the sum's only reader and the sum is not requested (a requested
         * sum or relu becomes a view of the batch norm) */
        sx_cg_node *r = add->n_users == 1 && add->users[0]->op == SX_OP_RELU && !add->pinned
                            ? add->users[0]
                            : NULL;
        sx_cg_node *ins[5] = {y->in[0], y->in[1], y->in[2], y->in[3], add->in[1 - k]};
        SX_TRY(opt_set_inputs(y, 5, ins));
        y->valid = false;
        if (r != NULL) {
            y->attr.norm.relu = 1;
            SX_TRY(opt_replace(r, y)); /* r is removed: add has no reader left */
            opt_kill(add);
        } else {
            SX_TRY(opt_replace(add, y));
        }
        (*changed)++;
    }
    return SX_OK;
}
