/* opt_conv.c: SX_PASS_CONV_EPILOGUE. A conv2d whose only reader is element-wise (a
 * map, a binary op, fma, where, or a FUSED chain: a bias or a folded batch norm's shift added per
 * output channel, a scale, relu, a residual of the same shape...) becomes one conv2d node with
 * that reader's program as its epilogue (attr.prog over the convolution and the reader's other
 * inputs, which follow x and k): the convolution's kernels run the program on each unit's output
 * rows right after writing them (sx_tensor_conv2d_fused_out), instead of a separate pass over
 * memory. The program and its operands are the reader's, element for element, so the bits are
 * those of the two nodes. Runs after element-wise fusion in each round, so a whole chain goes
 * in at once. Explicit pads that the dense kernels compute as SAME or VALID become those
 * (dense_params), so that the epilogue runs per unit there too. */
#include "opt_impl.h"

#include <string.h>

/* r computes one element from the same element of its inputs (or a repeated one) */
static bool elementwise_reader(const sx_cg_node *r)
{
    cg_eval_fn e = sx_cg_ops[r->op].eval;
    return e == cg_eval_map || e == cg_eval_binary || r->op == SX_OP_FMA || r->op == SX_OP_WHERE ||
           r->op == SX_OP_FUSED;
}

/* The one-instruction program of a map, binary, fma or where node over its inputs 0.. */
static sx_fused_prog single_prog(const sx_cg_node *r)
{
    sx_fused_prog p;
    memset(&p, 0, sizeof p);
    p.n = 1;
    cg_eval_fn e = sx_cg_ops[r->op].eval;
    sx_fused_instr *in = &p.ins[0];
    in->kind = e == cg_eval_map      ? SX_FUSED_MAP
               : e == cg_eval_binary ? SX_FUSED_BINARY
               : r->op == SX_OP_FMA  ? SX_FUSED_FMA
                                     : SX_FUSED_WHERE;
    in->op = (uint8_t)sx_cg_ops[r->op].kernel;
    const int srcs = sx__fused_sources(in->kind);
    in->a = 0;
    in->b = (int16_t)(srcs > 1 ? 1 : 0);
    in->c = (int16_t)(srcs > 2 ? 2 : 0);
    in->alpha = r->attr.alpha;
    return p;
}

/* The input slot of r holding a plain convolution that r alone reads, of r's shape and dtype, or
 * -1. */
static int conv_slot(const sx_cg_node *r)
{
    for (int k = 0; k < r->n_in; k++) {
        const sx_cg_node *c = r->in[k];
        if (!c->dead && c->op == SX_OP_CONV2D && c->attr.prog.n == 0 && c->n_in == 2 &&
            c->n_users == 1 && c->users[0] == r && !c->pinned && opt_same_shape(c, r) &&
            c->value.dtype == r->value.dtype)
            return k;
    }
    return -1;
}

/* Every input of r has its size or repeats over its leading axes (what the kernel runs) */
static bool operands_ok(const sx_cg_node *r)
{
    for (int k = 0; k < r->n_in; k++) {
        const sx_tensor *t = &r->in[k]->value;
        if (t->dtype != r->value.dtype ||
            (t->size != r->value.size && !cg_trailing_bcast(t, r->value.rank, r->value.shape)))
            return false;
    }
    return true;
}

/* The VALID or SAME parameters under which the dense convolution kernels (tensor/conv/conv_plan.c)
 * compute exactly what the explicit parameters p do for input x, kernel k and result y, in *out;
 * false when there are none. One group, no dilation, and the same output size and leading pads: the
 * general path (tensor/conv/conv_general.c) then calls the dense kernels with those very
 * parameters, but runs an epilogue over all of y after the convolution, where the dense kernels run
 * it on each unit's rows while they are in cache. (PyTorch-style pads of (k - 1) / 2 at stride 1,
 * or 0 with a 1x1 kernel, are SAME or VALID.) */
static bool dense_params(const sx_tensor *x, const sx_tensor *k, const sx_tensor *y,
                         const sx_conv2d_params *p, sx_conv2d_params *out)
{
    if (p->padding != SX_PAD_EXPLICIT || p->groups > 1 || p->dilation_h > 1 || p->dilation_w > 1 ||
        p->output_padding_h != 0 || p->output_padding_w != 0 || x->rank != 4 || k->rank != 4 ||
        y->rank != 4 || p->stride_h < 1 || p->stride_w < 1)
        return false;
    const int64_t h = x->shape[1], w = x->shape[2], kh = k->shape[0], kw = k->shape[1];
    const int64_t sh = p->stride_h, sw = p->stride_w;
    for (int mode = 0; mode < 2; mode++) {
        int64_t oh, ow, pt = 0, pl = 0;
        if (mode == 0) {
            if (h < kh || w < kw)
                continue;
            oh = (h - kh) / sh + 1;
            ow = (w - kw) / sw + 1;
        } else {
            oh = (h + sh - 1) / sh;
            ow = (w + sw - 1) / sw;
            const int64_t th = (oh - 1) * sh + kh - h, tw = (ow - 1) * sw + kw - w;
            pt = th > 0 ? th / 2 : 0;
            pl = tw > 0 ? tw / 2 : 0;
        }
        if (oh == y->shape[1] && ow == y->shape[2] && pt == p->pad_top && pl == p->pad_left) {
            *out = sx_conv2d_params_default();
            out->stride_h = p->stride_h, out->stride_w = p->stride_w;
            out->padding = mode == 0 ? SX_PAD_VALID : SX_PAD_SAME;
            return true;
        }
    }
    return false;
}

sx_status opt_pass_conv_epilogue(sx_cg_graph *g, int64_t *changed)
{
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *r = g->nodes[i];
        if (r->dead || !elementwise_reader(r) || r->n_in + 1 > SX_CG_MAX_INPUTS ||
            r->n_in > SX_FUSED_MAX_OPERANDS || !operands_ok(r))
            continue;
        const int j = conv_slot(r);
        if (j < 0)
            continue;
        sx_cg_node *conv = r->in[j];
        sx_fused_prog prog = r->op == SX_OP_FUSED ? r->attr.prog : single_prog(r);
        /* operands: the convolution first (0), then r's other inputs in order (1..) */
        int16_t map[SX_CG_MAX_INPUTS];
        sx_cg_node *ins[SX_CG_MAX_INPUTS];
        int n = 2;
        ins[0] = conv->in[0];
        ins[1] = conv->in[1];
        for (int k = 0; k < r->n_in; k++) {
            if (k == j) {
                map[k] = 0;
                continue;
            }
            map[k] = (int16_t)(n - 1);
            ins[n++] = r->in[k];
        }
        for (int s = 0; s < prog.n; s++) {
            sx_fused_instr *in = &prog.ins[s];
            int16_t *src[3] = {&in->a, &in->b, &in->c};
            const int srcs = sx__fused_sources(in->kind);
            for (int q = 0; q < srcs; q++)
                if (*src[q] >= 0)
                    *src[q] = map[*src[q]];
        }
        sx_cg_attr a = conv->attr;
        a.prog = prog;
        sx_conv2d_params dense;
        if (dense_params(&conv->in[0]->value, &conv->in[1]->value, &conv->value, &a.conv, &dense))
            a.conv = dense;
        SX_TRY(opt_set_inputs(r, n, ins));
        r->op = SX_OP_CONV2D;
        r->attr = a;
        r->scope = conv->scope;
        SX_TRY(cg_shape_conv2d(r)); /* checks, and sets the workspace size */
        opt_kill(conv);
        (*changed)++;
    }
    return SX_OK;
}
