/* opt_fuse.c: the fusion passes. Optimiser-update fusion recognises the update subgraphs that
 * optim/ builds (sx_optim.h documents the forms) and replaces each with one in-place update
 * node; element-wise chain fusion turns a tree of element-wise ops over one shape into a single
 * FUSED node that runs a short program per block of elements (tensor/fused.c). */
#include "opt_impl.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- matching helpers */

static bool is(const sx_cg_node *n, sx_cg_op op)
{
    return n != NULL && !n->dead && n->op == op;
}

/* n is used only by `user` (once) and is not a requested output: it may disappear */
static bool only_for(const sx_cg_node *n, const sx_cg_node *user)
{
    return n->n_users == 1 && n->users[0] == user && !n->pinned;
}

static double scalar_const(const sx_cg_node *c)
{
    if (!opt_is_const(c) || c->value.size != 1 || c->value.data == NULL)
        return (double)NAN;
    return sx_tensor_get(&c->value, 0);
}

/* n = op(s, x) with s a one-element constant: its value, and x; either operand order. */
static bool scaled_by(const sx_cg_node *n, double *s, sx_cg_node **x)
{
    if (!is(n, SX_OP_MUL))
        return false;
    for (int k = 0; k < 2; k++) {
        double v = scalar_const(n->in[k]);
        if (!isnan(v) && n->in[1 - k]->value.size == n->value.size) {
            *s = v;
            *x = n->in[1 - k];
            return true;
        }
    }
    return false;
}

/* n = g * g */
static bool is_square_of(const sx_cg_node *n, const sx_cg_node *g)
{
    return is(n, SX_OP_MUL) && n->in[0] == g && n->in[1] == g;
}

/* The assign that writes `value` into a parameter, among value's users. */
static sx_cg_node *assign_of(const sx_cg_node *value)
{
    for (int i = 0; i < value->n_users; i++) {
        sx_cg_node *u = value->users[i];
        if (is(u, SX_OP_ASSIGN) && u->in[1] == value && u->in[0]->op == SX_OP_PARAM)
            return u;
    }
    return NULL;
}

/* den = sqrt(s) + eps (either order), with sqrt(s) used only there: s and eps. */
static bool root_plus_eps(const sx_cg_node *den, sx_cg_node **s, double *eps)
{
    if (!is(den, SX_OP_ADD))
        return false;
    for (int k = 0; k < 2; k++) {
        sx_cg_node *r = den->in[k];
        double e = scalar_const(den->in[1 - k]);
        if (is(r, SX_OP_SQRT) && only_for(r, den) && !isnan(e)) {
            *s = r->in[0];
            *eps = e;
            return true;
        }
    }
    return false;
}

/* x = b * state + c * y (the running averages of rmsprop and adam): b, state, c, y */
static bool running_average(const sx_cg_node *x, double *b, sx_cg_node **state, double *c,
                            sx_cg_node **y)
{
    if (!is(x, SX_OP_ADD) || !only_for(x->in[0], x) || !only_for(x->in[1], x))
        return false;
    return scaled_by(x->in[0], b, state) && (*state)->op == SX_OP_PARAM &&
           scaled_by(x->in[1], c, y);
}

/* ---------------------------------------------------------------- update fusion */

/* Rewrite `ap` (the parameter's assign) into the fused update and every state assign into
 * seq(state, fused), so handles the caller holds still name the new values. */
static sx_status fuse(sx_cg_node *ap, sx_cg_op op, int n_in, sx_cg_node *const *ins,
                      const double *coef, int n_coef, bool flag, sx_cg_node *const *state_assigns,
                      int n_states)
{
    SX_TRY(opt_set_inputs(ap, n_in, ins));
    ap->op = op;
    ap->attr = sx_cg_attr_default();
    for (int i = 0; i < n_coef; i++)
        ap->attr.coef[i] = coef[i];
    ap->attr.keepdims = flag;
    for (int i = 0; i < n_states; i++) {
        sx_cg_node *sa = state_assigns[i];
        sx_cg_node *seq_in[2] = {sa->in[0], ap};
        SX_TRY(opt_set_inputs(sa, 2, seq_in));
        sa->op = SX_OP_SEQ;
        sa->attr = sx_cg_attr_default();
    }
    return SX_OK;
}

/* Try every optimiser's form on the assign ap = assign(p, p - lr * dir). */
static sx_status fuse_update(sx_cg_node *ap, bool *done)
{
    *done = false;
    sx_cg_node *p = ap->in[0], *v1 = ap->in[1];
    if (!is(v1, SX_OP_SUB) || v1->in[0] != p || !only_for(v1, ap))
        return SX_OK;
    sx_cg_node *t1 = v1->in[1];
    if (!is(t1, SX_OP_MUL) || !only_for(t1, v1))
        return SX_OK;
    int lk = t1->in[0]->value.size == 1 ? 0 : 1;
    sx_cg_node *lr = t1->in[lk], *dir = t1->in[1 - lk];
    if (lr->value.size != 1 || dir->value.size != p->value.size)
        return SX_OK;

    /* adagrad, rmsprop, adam: dir = num / (sqrt(s) + eps) */
    sx_cg_node *s = NULL;
    double eps;
    if (is(dir, SX_OP_DIV) && only_for(dir, t1) && root_plus_eps(dir->in[1], &s, &eps) &&
        only_for(dir->in[1], dir)) {
        sx_cg_node *num = dir->in[0], *as = assign_of(s);
        if (as == NULL || s->n_users != 2)
            goto sgd;
        sx_cg_node *a = as->in[0];
        double b, c, b1, c1;
        sx_cg_node *st, *y, *m = NULL, *y1 = NULL;
        if (is(s, SX_OP_ADD) && s->in[0] == a && is_square_of(s->in[1], num) &&
            only_for(s->in[1], s)) {
            /* adagrad: s = a + g*g */
            sx_cg_node *ins[4] = {p, a, num, lr};
            double coef[1] = {eps};
            sx_cg_node *sa[1] = {as};
            SX_TRY(fuse(ap, SX_OP_ADAGRAD_UPDATE, 4, ins, coef, 1, false, sa, 1));
            *done = true;
            return SX_OK;
        }
        if (!running_average(s, &b, &st, &c, &y) || st != a || !only_for(y, s->in[1]))
            goto sgd;
        if (y->op == SX_OP_MUL && y->in[0] == y->in[1] && y->in[0] == num) {
            /* rmsprop: s = rho a + c (g*g) */
            sx_cg_node *ins[4] = {p, a, num, lr};
            double coef[3] = {b, c, eps};
            sx_cg_node *sa[1] = {as};
            SX_TRY(fuse(ap, SX_OP_RMSPROP_UPDATE, 4, ins, coef, 3, false, sa, 1));
            *done = true;
            return SX_OK;
        }
        /* adam: num = b1 m + c1 g (with its assign), s = b2 v + c2 (g*g) */
        sx_cg_node *am = assign_of(num);
        if (am == NULL || num->n_users != 2 || !running_average(num, &b1, &m, &c1, &y1) ||
            !is_square_of(y, y1))
            goto sgd;
        sx_cg_node *ins[5] = {p, am->in[0], a, y1, lr};
        double coef[5] = {b1, c1, b, c, eps};
        sx_cg_node *sa[2] = {am, as};
        SX_TRY(fuse(ap, SX_OP_ADAM_UPDATE, 5, ins, coef, 5, false, sa, 2));
        *done = true;
        return SX_OK;
    }

    /* momentum: dir = vn = mu v + g; nesterov: dir = g + mu vn */
    {
        sx_cg_node *vn = dir, *gr = NULL;
        double mu_n = (double)NAN;
        bool nesterov = false;
        if (is(dir, SX_OP_ADD) && is(dir->in[1], SX_OP_MUL) && only_for(dir->in[1], dir)) {
            sx_cg_node *x;
            if (scaled_by(dir->in[1], &mu_n, &x) && is(x, SX_OP_ADD)) {
                nesterov = true;
                vn = x;
                gr = dir->in[0];
            }
        }
        sx_cg_node *av = assign_of(vn);
        double mu;
        sx_cg_node *v, *gv;
        if (av != NULL && vn->n_users == 2 && is(vn, SX_OP_ADD) && scaled_by(vn->in[0], &mu, &v) &&
            v == av->in[0] && only_for(vn->in[0], vn)) {
            gv = vn->in[1];
            if (!nesterov || (gv == gr && mu == mu_n)) {
                sx_cg_node *ins[4] = {p, v, gv, lr};
                double coef[1] = {mu};
                sx_cg_node *sa[1] = {av};
                SX_TRY(fuse(ap, SX_OP_MOMENTUM_UPDATE, 4, ins, coef, 1, nesterov, sa, 1));
                *done = true;
                return SX_OK;
            }
        }
    }
sgd:
    /* any other direction: p <- p - lr dir in one pass */
    {
        sx_cg_node *ins[3] = {p, dir, lr};
        SX_TRY(fuse(ap, SX_OP_SGD_UPDATE, 3, ins, NULL, 0, false, NULL, 0));
        *done = true;
    }
    return SX_OK;
}

sx_status opt_pass_update_fusion(sx_cg_graph *g, int64_t *changed)
{
    for (int64_t i = g->n_nodes - 1; i >= 0; i--) {
        sx_cg_node *n = g->nodes[i];
        if (!is(n, SX_OP_ASSIGN))
            continue;
        bool done = false;
        SX_TRY(fuse_update(n, &done));
        if (done)
            (*changed)++;
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- gemm-update fusion */

/* update(p, states..., g, lr) with g = op(a) @ op(b) a plain 2-d product (no addend, no batch)
 * read by nothing else: one matmul_update node computes g a block of rows at a time and applies
 * the step to those rows while they are in cache. The gradient buffer (the size of the weights)
 * disappears from the memory plan, and with it a write and a read of it per step. */
sx_status opt_pass_gemm_update(sx_cg_graph *g, int64_t *changed)
{
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *u = g->nodes[i];
        if (u->dead || u->op < SX_OP_SGD_UPDATE || u->op > SX_OP_ADAM_UPDATE)
            continue;
        const int k = cg_mutated(u);
        sx_cg_node *mm = u->in[k];
        if (!is(mm, SX_OP_MATMUL) || mm->n_in != 2 || !only_for(mm, u) ||
            u->in[0]->value.rank != 2 || mm->in[0]->value.rank != 2 || mm->in[1]->value.rank != 2)
            continue;
        sx_cg_node *ins[8];
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
