/* opt_fuse.c: the fusion passes. Gemm-update fusion computes the matmul gradient of a fused
 * optimiser update (which optim/ emits as such, sx_optim.h) a block of rows at a time inside
 * the step; element-wise chain fusion turns a tree of element-wise ops over one shape into a
 * single FUSED node that runs a short program per block of elements (tensor/elementwise/fused.c).
 */
#include "opt_impl.h"

#include <string.h>

/* ---------------------------------------------------------------- helpers */

static bool is(const sx_cg_node *n, sx_cg_op op)
{
    return n != NULL && !n->dead && n->op == op;
}

/* n is used only by `user` (once) and is not a requested output: it may disappear */
static bool only_for(const sx_cg_node *n, const sx_cg_node *user)
{
    return n->n_users == 1 && n->users[0] == user && !n->pinned;
}

/* ---------------------------------------------------------------- gemm-update fusion */

/* update(p, states..., g, lr) with g = op(a) @ op(b) a plain 2-d product (no addend, no batch)
 * read by nothing else: one matmul_update node computes g a block of rows at a time and applies
 * the step to those rows while they are in cache. The gradient buffer (the size of the weights)
 * disappears from the memory plan, and with it a write and a read of it per step. A step with
 * more than GEMM_UPDATE_MAX_IN inputs once fused (p, states..., a, b, lr) is left alone. */
#define GEMM_UPDATE_MAX_IN 8

sx_status opt_pass_gemm_update(sx_cg_graph *g, int64_t *changed)
{
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *u = g->nodes[i];
        if (u->dead || !(sx_cg_ops[u->op].flags & SX_OPF_UPDATE))
            continue;
        const int k = cg_mutated(u);
        sx_cg_node *mm = u->in[k];
        if (!is(mm, SX_OP_MATMUL) || mm->n_in != 2 || !only_for(mm, u) ||
            u->in[0]->value.rank != 2 || mm->in[0]->value.rank != 2 || mm->in[1]->value.rank != 2 ||
            k + 3 > GEMM_UPDATE_MAX_IN)
            continue;
        sx_cg_node *ins[GEMM_UPDATE_MAX_IN];
        for (int j = 0; j < k; j++)
            ins[j] = u->in[j];
        ins[k] = mm->in[0];
        ins[k + 1] = mm->in[1];
        ins[k + 2] = u->in[k + 1];
        sx_cg_attr at = u->attr;
        at.ints[0] = u->op;
        at.trans_a = mm->attr.trans_a;
        at.trans_b = mm->attr.trans_b;
        at.alpha = mm->attr.alpha;
        SX_TRY(opt_set_inputs(u, k + 3, ins));
        u->op = SX_OP_MATMUL_UPDATE;
        u->attr = at;
        SX_TRY(cg_shape_matmul_update(u)); /* checks, and sets the scratch size */
        opt_kill(mm);
        (*changed)++;
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- element-wise fusion */

/* A fused node has at most SX_CG_MAX_INPUTS operands (fuse_tree stops there): the kernel's
 * limit must allow them. */
_Static_assert(SX_CG_MAX_INPUTS <= SX_FUSED_MAX_OPERANDS, "a fused node's operands fit the kernel");

static bool fusible_op(const sx_cg_node *n)
{
    cg_eval_fn e = sx_cg_ops[n->op].eval;
    return !n->dead &&
           (e == cg_eval_map || e == cg_eval_binary || n->op == SX_OP_FMA || n->op == SX_OP_WHERE);
}

typedef struct fuse_tree {
    sx_fused_prog prog;
    sx_cg_node *operands[SX_CG_MAX_INPUTS];
    int n_operands;
    sx_cg_node *absorbed[SX_FUSED_MAX];
    int n_absorbed;
    int64_t size;
} fuse_tree;

/* n has the tree's size and its inputs have it too, or repeat over the result's leading axes
 * (a scalar, a per-channel bias: cg_trailing_bcast) */
static bool shape_ok(const sx_cg_node *n, int64_t size)
{
    if (n->value.size != size)
        return false;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->value.size != size &&
            !cg_trailing_bcast(&n->in[i]->value, n->value.rank, n->value.shape))
            return false;
    return true;
}

static int operand(fuse_tree *t, sx_cg_node *x)
{
    for (int i = 0; i < t->n_operands; i++)
        if (t->operands[i] == x)
            return i;
    if (t->n_operands == SX_CG_MAX_INPUTS)
        return -1000;
    t->operands[t->n_operands] = x;
    return t->n_operands++;
}

/* Emit the instructions computing n (absorbing single-use fusible producers first); returns
 * n's source code (operand index >= 0 or -1-register), or -1000 when the program is full. */
static int emit(fuse_tree *t, sx_cg_node *n, sx_cg_node *root)
{
    int srcs[3] = {0, 0, 0};
    for (int i = 0; i < n->n_in; i++) {
        sx_cg_node *m = n->in[i];
        if (fusible_op(m) && only_for(m, n) && shape_ok(m, t->size) &&
            t->prog.n + 2 <= SX_FUSED_MAX) {
            srcs[i] = emit(t, m, root);
            if (srcs[i] == -1000)
                return -1000;
            t->absorbed[t->n_absorbed++] = m;
        } else {
            srcs[i] = operand(t, m);
            if (srcs[i] == -1000)
                return -1000;
        }
    }
    if (t->prog.n == SX_FUSED_MAX)
        return -1000;
    sx_fused_instr *in = &t->prog.ins[t->prog.n];
    memset(in, 0, sizeof *in);
    cg_eval_fn e = sx_cg_ops[n->op].eval;
    in->kind = e == cg_eval_map      ? SX_FUSED_MAP
               : e == cg_eval_binary ? SX_FUSED_BINARY
               : n->op == SX_OP_FMA  ? SX_FUSED_FMA
                                     : SX_FUSED_WHERE;
    in->op = (uint8_t)sx_cg_ops[n->op].kernel;
    in->a = (int16_t)srcs[0];
    in->b = (int16_t)srcs[1];
    in->c = (int16_t)srcs[2];
    in->alpha = n->attr.alpha;
    (void)root;
    return -1 - t->prog.n++;
}

sx_status opt_pass_elemwise_fusion(sx_cg_graph *g, int64_t *changed)
{
    for (int64_t i = g->n_nodes - 1; i >= 0; i--) {
        sx_cg_node *n = g->nodes[i];
        if (!fusible_op(n) || !shape_ok(n, n->value.size))
            continue;
        /* a root: its single user would rather absorb it */
        if (n->n_users == 1 && !n->pinned && fusible_op(n->users[0]) &&
            shape_ok(n->users[0], n->value.size))
            continue;
        fuse_tree t;
        memset(&t, 0, sizeof t);
        t.size = n->value.size;
        if (emit(&t, n, n) == -1000 || t.prog.n < 2)
            continue;
        SX_TRY(opt_set_inputs(n, t.n_operands, t.operands));
        n->op = SX_OP_FUSED;
        sx_cg_attr a = sx_cg_attr_default();
        a.rank = n->value.rank;
        memcpy(a.shape, n->value.shape, sizeof a.shape);
        a.prog = t.prog;
        n->attr = a;
        for (int k = 0; k < t.n_absorbed; k++)
            opt_kill(t.absorbed[k]);
        *changed += t.n_absorbed;
    }
    return SX_OK;
}
