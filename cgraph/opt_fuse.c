/* opt_fuse.c: the fusion passes. Element-wise chain fusion turns a tree of element-wise ops
 * over one shape into a single FUSED node that runs a short program per block of elements
 * (tensor/elementwise/fused.c); before that, the assigns of element-wise chains that share nodes
 * (an optimiser step as optim/ writes it: p, m and v from p, m, v and g) become one fused_update
 * that computes every chain and stores each result into its parameter in one pass. Gemm-update
 * fusion then computes a matmul operand of such an update (the weight gradient) a block of rows
 * at a time inside the step. */
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

/* fused_update(x...) with a 2-d program one of whose operands is a plain 2-d product (no
 * addend, no batch) of the program's size read by nothing else: one matmul_update node computes
 * the product a block of rows at a time and runs the program on those rows while they are in
 * cache. The gradient buffer (the size of the weights) disappears from the memory plan, and with
 * it a write and a read of it per step. The product becomes the program's last operand. */
static int product_operand(const sx_cg_node *u)
{
    const int k = (int)u->attr.update.stores;
    for (int j = k; j < u->n_in; j++) {
        const sx_cg_node *mm = u->in[j];
        if (is(mm, SX_OP_MATMUL) && mm->n_in == 2 && only_for(mm, u) &&
            mm->value.size == u->value.size && mm->in[0]->value.rank == 2 &&
            mm->in[1]->value.rank == 2)
            return j;
    }
    return -1;
}

sx_status opt_pass_gemm_update(sx_cg_graph *g, int64_t *changed)
{
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *u = g->nodes[i];
        if (u->dead || u->op != SX_OP_FUSED_UPDATE || u->value.rank != 2 ||
            u->n_in + 1 > SX_CG_MAX_INPUTS)
            continue;
        const int j = product_operand(u);
        if (j < 0)
            continue;
        sx_cg_node *mm = u->in[j];
        const int n = u->n_in;
        sx_cg_node *ins[SX_CG_MAX_INPUTS];
        int m = 0;
        for (int x = 0; x < n; x++)
            if (x != j)
                ins[m++] = u->in[x];
        ins[m++] = mm->in[0];
        ins[m++] = mm->in[1];
        sx_cg_attr at = u->attr;
        /* operand j becomes n - 1 (the product, after the others), those above it move down */
        for (int k = 0; k < at.prog.n; k++) {
            sx_fused_instr *in = &at.prog.ins[k];
            int16_t *s3[3] = {&in->a, &in->b, &in->c};
            for (int q = 0; q < sx__fused_sources(in->kind); q++)
                if (*s3[q] >= 0)
                    *s3[q] = (int16_t)(*s3[q] == j ? n - 1 : *s3[q] > j ? *s3[q] - 1 : *s3[q]);
        }
        at.trans_a = mm->attr.trans_a;
        at.trans_b = mm->attr.trans_b;
        at.alpha = mm->attr.alpha;
        SX_TRY(opt_set_inputs(u, m, ins));
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

/* The instruction computing fusible node n from sources srcs. */
static void instr(sx_fused_instr *in, const sx_cg_node *n, const int *srcs)
{
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
    instr(&t->prog.ins[t->prog.n], n, srcs);
    (void)root;
    return -1 - t->prog.n++;
}

/* ---------------------------------------------------------------- update fusion */

/* A group: assigns whose values are element-wise chains over one size, and the element-wise
 * nodes (the body) that compute them, read by nothing outside the group. Stores and body
 * instructions share the program's SX_FUSED_MAX. */
typedef struct upd_group {
    sx_cg_node *assigns[SX_FUSED_MAX], *rejected[SX_FUSED_MAX], *body[SX_FUSED_MAX];
    int n_assigns, n_rejected, n_body;
    int64_t size;
    bool full;
} upd_group;

static int find(sx_cg_node *const *v, int n, const sx_cg_node *x)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x)
            return i;
    return -1;
}

static void drop(sx_cg_node **v, int *n, int i)
{
    v[i] = v[--*n];
}

/* may n be an instruction of a program over `size` elements that nothing else reads? */
static bool body_ok(const sx_cg_node *n, int64_t size)
{
    return fusible_op(n) && !n->pinned && shape_ok(n, size);
}

/* a assigns an element-wise chain of its parameter's size */
static bool assign_ok(const sx_cg_node *a, int64_t size)
{
    return is(a, SX_OP_ASSIGN) && a->in[0]->value.size == size && body_ok(a->in[1], size);
}

static void add_tree(upd_group *u, sx_cg_node *m)
{
    if (!body_ok(m, u->size) || find(u->body, u->n_body, m) >= 0)
        return;
    if (u->n_body == SX_FUSED_MAX) {
        u->full = true;
        return;
    }
    u->body[u->n_body++] = m;
    for (int i = 0; i < m->n_in; i++)
        add_tree(u, m->in[i]);
}

static void add_assign(upd_group *u, sx_cg_node *a)
{
    if (u->n_assigns == SX_FUSED_MAX) {
        u->full = true;
        return;
    }
    u->assigns[u->n_assigns++] = a;
    add_tree(u, a->in[1]);
}

/* Does an assign before assign i write its parameter too? */
static bool written_before(const upd_group *u, int i)
{
    for (int j = 0; j < i; j++)
        if (u->assigns[j]->in[0] == u->assigns[i]->in[0])
            return true;
    return false;
}

/* One round of growing and pruning: a body node read by an assign of it joins that assign to the
 * group; one read by anything else outside leaves the body (it is computed on its own, an
 * operand); an assign whose value left goes. Whether anything changed. */
static bool group_round(upd_group *u)
{
    bool changed = false;
    for (int i = 0; i < u->n_body; i++) {
        sx_cg_node *m = u->body[i];
        for (int k = 0; k < m->n_users; k++) {
            sx_cg_node *r = m->users[k];
            if (find(u->body, u->n_body, r) >= 0 || find(u->assigns, u->n_assigns, r) >= 0)
                continue;
            if (r->in[0] != m && assign_ok(r, u->size) && find(u->rejected, u->n_rejected, r) < 0) {
                add_assign(u, r);
            } else {
                drop(u->body, &u->n_body, i--);
            }
            changed = true;
            break;
        }
    }
    for (int i = 0; i < u->n_assigns; i++)
        if (find(u->body, u->n_body, u->assigns[i]->in[1]) < 0 || written_before(u, i)) {
            if (u->n_rejected < SX_FUSED_MAX)
                u->rejected[u->n_rejected++] = u->assigns[i];
            else
                u->full = true;
            /* in order: the first assign's parameter is the node's value */
            memmove(&u->assigns[i], &u->assigns[i + 1],
                    (size_t)(u->n_assigns - i - 1) * sizeof u->assigns[0]);
            u->n_assigns--;
            i--;
            changed = true;
        }
    return changed;
}

/* Is x reached from one of the group's assigns (through readers, at most CG_UPD_SEARCH nodes
 * looked at; more counts as reached)? Such an operand would make a cycle. */
#define CG_UPD_SEARCH 256
static bool after_group(const upd_group *u, const sx_cg_node *x)
{
    const sx_cg_node *seen[CG_UPD_SEARCH];
    int n = 0;
    for (int i = 0; i < u->n_assigns; i++)
        seen[n++] = u->assigns[i];
    for (int at = 0; at < n; at++) {
        if (seen[at] == x)
            return true;
        for (int k = 0; k < seen[at]->n_users; k++) {
            const sx_cg_node *r = seen[at]->users[k];
            bool known = false;
            for (int j = 0; j < n && !known; j++)
                known = seen[j] == r;
            if (known)
                continue;
            if (n == CG_UPD_SEARCH)
                return true;
            seen[n++] = r;
        }
    }
    return false;
}

/* A parameter the group reads but does not write, which something else writes: the group would
 * not be ordered before that write (mutating nodes are not readers, cgraph/order.c). */
static bool written_elsewhere(const upd_group *u, const sx_cg_node *x)
{
    if (x->op != SX_OP_PARAM)
        return false;
    for (int i = 0; i < u->n_assigns; i++)
        if (u->assigns[i]->in[0] == x)
            return false;
    for (int k = 0; k < x->n_users; k++)
        if (cg_mutated(x->users[k]) > 0)
            return true;
    return false;
}

/* The program of the group: the body in dependency order, then one store per assign; operands
 * 0..n_assigns-1 are the parameters written. -1000 when a limit is reached. */
static int emit_body(fuse_tree *t, const upd_group *u, int *reg, sx_cg_node *m)
{
    const int b = find(u->body, u->n_body, m);
    if (b < 0)
        return operand(t, m);
    if (reg[b] != 0)
        return reg[b];
    int srcs[3] = {0, 0, 0};
    for (int i = 0; i < m->n_in; i++)
        if ((srcs[i] = emit_body(t, u, reg, m->in[i])) == -1000)
            return -1000;
    if (t->prog.n == SX_FUSED_MAX)
        return -1000;
    instr(&t->prog.ins[t->prog.n], m, srcs);
    t->absorbed[t->n_absorbed++] = m; /* in dependency order */
    return reg[b] = -1 - t->prog.n++;
}

static bool emit_group(fuse_tree *t, const upd_group *u)
{
    int reg[SX_FUSED_MAX] = {0};
    for (int i = 0; i < u->n_assigns; i++)
        if (operand(t, u->assigns[i]->in[0]) != i)
            return false;
    int val[SX_FUSED_MAX];
    for (int i = 0; i < u->n_assigns; i++)
        if ((val[i] = emit_body(t, u, reg, u->assigns[i]->in[1])) == -1000)
            return false;
    for (int i = 0; i < u->n_assigns; i++) {
        if (t->prog.n == SX_FUSED_MAX)
            return false;
        sx_fused_instr *in = &t->prog.ins[t->prog.n++];
        memset(in, 0, sizeof *in);
        in->kind = SX_FUSED_STORE;
        in->a = (int16_t)val[i];
        in->b = (int16_t)i;
    }
    for (int i = 0; i < t->n_operands; i++)
        if (after_group(u, t->operands[i]) || written_elsewhere(u, t->operands[i]))
            return false;
    return true;
}

/* The group becomes one fused_update (the first assign, rewritten: its value is still its
 * parameter, now written with the others) and every other assign a seq of its parameter after
 * it; the body goes. */
static sx_status rewrite_group(fuse_tree *t, const upd_group *u, int64_t *changed)
{
    sx_cg_node *main = u->assigns[0];
    const sx_cg_attr none = sx_cg_attr_default();
    for (int i = 1; i < u->n_assigns; i++) {
        sx_cg_node *a = u->assigns[i];
        sx_cg_node *ins[2] = {a->in[0], main};
        SX_TRY(opt_set_inputs(a, 2, ins));
        a->op = SX_OP_SEQ;
        a->attr = none;
    }
    SX_TRY(opt_set_inputs(main, t->n_operands, t->operands));
    sx_cg_attr a = none;
    a.rank = main->value.rank;
    memcpy(a.shape, main->value.shape, sizeof a.shape);
    a.update.stores = u->n_assigns;
    a.prog = t->prog;
    main->op = SX_OP_FUSED_UPDATE;
    main->attr = a;
    SX_TRY(cg_shape_fused_update(main));
    for (int k = t->n_absorbed - 1; k >= 0; k--)
        opt_kill(t->absorbed[k]);
    *changed += t->n_absorbed + u->n_assigns;
    return SX_OK;
}

/* Every assign of an element-wise chain, with the assigns that share its chain's nodes (an
 * optimiser step), becomes one fused_update. */
static sx_status fuse_updates(sx_cg_graph *g, int64_t *changed)
{
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *a = g->nodes[i];
        if (!is(a, SX_OP_ASSIGN) || !assign_ok(a, a->in[0]->value.size))
            continue;
        upd_group u;
        memset(&u, 0, sizeof u);
        u.size = a->in[0]->value.size;
        add_assign(&u, a);
        for (int round = 0; group_round(&u) && !u.full && round < 4 * SX_FUSED_MAX; round++)
            ;
        if (u.full || u.n_assigns == 0 || u.assigns[0] != a)
            continue;
        fuse_tree t;
        memset(&t, 0, sizeof t);
        t.size = u.size;
        if (emit_group(&t, &u))
            SX_TRY(rewrite_group(&t, &u, changed));
    }
    return SX_OK;
}

sx_status opt_pass_elemwise_fusion(sx_cg_graph *g, int64_t *changed)
{
    SX_TRY(fuse_updates(g, changed));
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
