/* opt.c: the graph optimiser: passes that rewrite the graph in place
 * and keep every requested output's value. Rewrites go through three primitives (opt_rewrite.c:
 * set a node's inputs, replace a node by another everywhere, remove a node), after which the
 * node array is renumbered into a topological order again. The fusion passes live in
 * opt_fuse.c. */
#include "opt_impl.h"

#include <math.h>
#include <string.h>
#include <time.h>

static const char *const pass_names[SX_PASS_COUNT] = {
    "dead code",    "common subexpr", "constant fold",      "simplify",    "broadcast", "gemm fold",
    "fma",          "pool relu",      "elementwise fusion", "gemm update", "algebra",   "bn fold",
    "bn recompute", "bn relu",        "conv epilogue",      "bn add"};

/* The order of the passes in a round: batch-norm folding sees mul(conv, a) before fma and
 * fusion absorb the product, and a batch norm takes its residual add and relu before fusion
 * chains them; convolution epilogues take whole fused chains. */
static const sx_cg_pass pass_order[] = {
    SX_PASS_DCE,         SX_PASS_CSE,          SX_PASS_CONST_FOLD,      SX_PASS_SIMPLIFY,
    SX_PASS_BROADCAST,   SX_PASS_BN_FOLD,      SX_PASS_GEMM_FOLD,       SX_PASS_FMA,
    SX_PASS_POOL_RELU,   SX_PASS_BN_ADD,       SX_PASS_ELEMWISE_FUSION, SX_PASS_CONV_EPILOGUE,
    SX_PASS_GEMM_UPDATE, SX_PASS_BN_RECOMPUTE, SX_PASS_BN_RELU,         SX_PASS_ALGEBRA};
_Static_assert(sizeof pass_order / sizeof pass_order[0] == SX_PASS_COUNT,
               "pass_order names every pass once");

const char *sx_cg_pass_name(sx_cg_pass p)
{
    return (unsigned)p < SX_PASS_COUNT ? pass_names[p] : "bad-pass";
}

sx_cg_opt_params sx_cg_opt_params_default(void)
{
    sx_cg_opt_params p;
    for (int i = 0; i < SX_PASS_COUNT; i++)
        p.enable[i] = true;
    p.enable[SX_PASS_ALGEBRA] = false; /* changes values: only when asked for */
    p.enable[SX_PASS_BN_FOLD] = false; /* changes rounding: only when asked for */
    p.max_rounds = 8;
    return p;
}

/* Renumber the live nodes into a topological order (inputs first; ties by old id), dead
 * nodes after them. */
static sx_status renumber(sx_cg_graph *g)
{
    int64_t n = g->n_nodes;
    sx_cg_node **order = sx_alloc((size_t)(n ? n : 1) * sizeof *order);
    if (order == NULL)
        return SX_E_NOMEM;
    SX_TRY(cg_reserve_stack(g, n + 1));
    g->epoch++;
    int64_t len = 0;
    for (int64_t i = 0; i < n; i++) {
        sx_cg_node *root = g->nodes[i];
        if (root->dead || root->mark == g->epoch)
            continue;
        int64_t top = 0;
        g->stack[top++] = root;
        root->mark = g->epoch;
        root->state = 0;
        while (top > 0) {
            sx_cg_node *x = g->stack[top - 1];
            if (x->state < x->n_in) {
                sx_cg_node *d = x->in[x->state++];
                if (d->mark != g->epoch) {
                    d->mark = g->epoch;
                    d->state = 0;
                    g->stack[top++] = d;
                }
            } else {
                order[len++] = x;
                top--;
            }
        }
    }
    for (int64_t i = 0; i < n; i++)
        if (g->nodes[i]->dead)
            order[len++] = g->nodes[i];
    for (int64_t i = 0; i < n; i++) {
        g->nodes[i] = order[i];
        g->nodes[i]->id = i;
    }
    sx_free(order);
    return cg_rehash(g);
}

static bool live_op(const sx_cg_node *n)
{
    return !n->dead && !(sx_cg_ops[n->op].flags & SX_OPF_LEAF);
}

/* ---------------------------------------------------------------- dead-code elimination */

/* Keep what the outputs need; inputs and parameters always stay (the user holds them). */
static sx_status pass_dce(sx_cg_graph *g, int n_out, sx_cg_node *const *outs, int64_t *changed)
{
    SX_TRY(cg_reserve_stack(g, g->n_nodes + n_out));
    g->epoch++;
    int64_t top = 0;
    for (int i = 0; i < n_out; i++)
        if (outs[i]->mark != g->epoch) {
            outs[i]->mark = g->epoch;
            g->stack[top++] = outs[i];
        }
    while (top > 0) {
        sx_cg_node *x = g->stack[--top];
        for (int i = 0; i < x->n_in; i++)
            if (x->in[i]->mark != g->epoch) {
                x->in[i]->mark = g->epoch;
                g->stack[top++] = x->in[i];
            }
    }
    /* kill from the top down so users go before their inputs */
    for (int64_t i = g->n_nodes - 1; i >= 0; i--) {
        sx_cg_node *n = g->nodes[i];
        if (n->dead || n->mark == g->epoch || n->op == SX_OP_INPUT || n->op == SX_OP_PARAM)
            continue;
        opt_kill(n);
        (*changed)++;
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- common subexpressions */

static bool const_equal(const sx_cg_node *a, const sx_cg_node *b)
{
    return opt_same_shape(a, b) && a->value.data && b->value.data &&
           memcmp(a->value.data, b->value.data,
                  (size_t)a->value.size * sx_dtype_size(a->value.dtype)) == 0;
}

/* Constants of at most CSE_SMALL_SIZE elements are merged by contents; the first
 * CSE_MAX_SMALL distinct ones are kept to compare with (later ones are left alone). */
#define CSE_SMALL_SIZE 16
#define CSE_MAX_SMALL 256

static sx_status pass_cse(sx_cg_graph *g, int64_t *changed)
{
    /* small constants with equal contents: keep the first (a quadratic scan over the few
     * small constants; large constants are left alone) */
    sx_cg_node *smalls[CSE_MAX_SMALL];
    int n_small = 0;
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *n = g->nodes[i];
        if (n->dead || !opt_is_const(n) || n->value.size > CSE_SMALL_SIZE)
            continue;
        sx_cg_node *twin = NULL;
        for (int k = 0; k < n_small && twin == NULL; k++)
            if (const_equal(smalls[k], n))
                twin = smalls[k];
        if (twin != NULL) {
            SX_TRY(opt_replace(n, twin));
            (*changed)++;
        } else if (n_small < CSE_MAX_SMALL) {
            smalls[n_small++] = n;
        }
    }
    SX_TRY(cg_rehash(g));
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *n = g->nodes[i];
        if (!live_op(n))
            continue;
        sx_cg_node *twin = cg_hash_twin(g, n);
        if (twin != NULL && twin->id < n->id) {
            SX_TRY(opt_replace(n, twin));
            (*changed)++;
        }
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- constant folding */

/* Fold results up to this many elements, or no larger than their inputs together: folding a
 * broadcast of a scalar into a huge constant would cost memory, not save time. */
#define FOLD_MAX_ELEMS 65536

static sx_status fold_one(sx_cg_graph *g, sx_cg_node *n)
{
    size_t bytes = (size_t)n->value.size * sx_dtype_size(n->value.dtype);
    void *buf = sx_alloc(bytes);
    if (buf == NULL)
        return SX_E_NOMEM;
    if (sx_cg_ops[n->op].flags & SX_OPF_VIEW) {
        if (bytes > 0)
            memcpy(buf, n->in[0]->value.data, bytes);
    } else {
        void *old = n->value.data;
        n->value.data = buf;
        sx_status s = sx_cg_ops[n->op].eval(g, n);
        if (s != SX_OK) {
            n->value.data = old;
            sx_free(buf);
            return s;
        }
    }
    sx_status s = opt_set_inputs(n, 0, NULL);
    if (s != SX_OK) {
        sx_free(buf);
        return s;
    }
    sx_free(n->own);
    n->own = buf;
    n->value.data = buf;
    n->op = SX_OP_CONST;
    n->attr = sx_cg_attr_default();
    n->ws_bytes = 0;
    n->valid = true;
    return SX_OK;
}

static sx_status pass_const_fold(sx_cg_graph *g, int64_t *changed)
{
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *n = g->nodes[i];
        unsigned f = sx_cg_ops[n->op].flags;
        if (!live_op(n) || (f & (SX_OPF_RANDOM | SX_OPF_MUTATES)) || n->n_in == 0)
            continue;
        int64_t in_elems = 0;
        bool all = true;
        for (int k = 0; k < n->n_in && all; k++) {
            all = opt_is_const(n->in[k]);
            in_elems += n->in[k]->value.size;
        }
        if (!all || (n->value.size > FOLD_MAX_ELEMS && n->value.size > in_elems))
            continue;
        /* a kernel that fails on these constants (a singular matrix...) is left to fail at run
         * time with its own message */
        if (fold_one(g, n) == SX_OK)
            (*changed)++;
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- algebraic simplification */

/* Ops whose every result is >= 0 (or NaN). */
static bool nonneg_op(sx_cg_op op)
{
    return op == SX_OP_EXP || op == SX_OP_SQR || op == SX_OP_SQRT || op == SX_OP_ABS ||
           op == SX_OP_RELU || op == SX_OP_SIGMOID || op == SX_OP_SOFTPLUS || op == SX_OP_SOFTMAX;
}

/* x known to be >= 0 (so exp(log x) = x, with log 0 = -inf and exp(-inf) = 0). */
static bool nonneg(const sx_cg_node *x)
{
    if (nonneg_op(x->op))
        return true;
    if (!opt_is_const(x) || x->value.data == NULL)
        return false;
    for (int64_t i = 0; i < x->value.size; i++)
        if (!(sx_tensor_get(&x->value, i) >= 0))
            return false;
    return true;
}

static bool reduction_op(sx_cg_op op)
{
    return op == SX_OP_SUM || op == SX_OP_MEAN || op == SX_OP_PROD || op == SX_OP_REDUCE_MAX ||
           op == SX_OP_REDUCE_MIN;
}

/* What n simplifies to (an existing node), or NULL. (If-chains, not a switch: the ops with no
 * identity are every other op, and a switch over ops lists them all or has a default.) */
static sx_cg_node *simpler(sx_cg_node *n)
{
    sx_cg_node *a = n->n_in > 0 ? n->in[0] : NULL, *b = n->n_in > 1 ? n->in[1] : NULL;
    const sx_cg_op op = n->op;
    if (op == SX_OP_ADD || op == SX_OP_MUL) { /* x+0, 0+x, x*1, 1*x */
        const double unit = op == SX_OP_ADD ? 0 : 1;
        if (opt_const_all(b, unit) && opt_same_shape(a, n))
            return a;
        if (opt_const_all(a, unit) && opt_same_shape(b, n))
            return b;
        return NULL;
    }
    if (op == SX_OP_SUB) /* x-0 */
        return opt_const_all(b, 0) && opt_same_shape(a, n) ? a : NULL;
    if (op == SX_OP_DIV || op == SX_OP_POW) /* x/1, x^1 */
        return opt_const_all(b, 1) && opt_same_shape(a, n) ? a : NULL;
    if (op == SX_OP_NEG)
        return a->op == SX_OP_NEG ? a->in[0] : NULL;
    if (op == SX_OP_RESHAPE || op == SX_OP_BROADCAST)
        return opt_same_shape(a, n) ? a : NULL;
    if (op == SX_OP_IDENTITY)
        return n->pinned ? NULL : a;
    if (op == SX_OP_PERMUTE) {
        for (int i = 0; i < n->value.rank; i++)
            if (n->attr.ints[i] != i)
                return NULL;
        return a;
    }
    if (reduction_op(op)) /* every reduced axis had size 1, keepdims */
        return opt_same_shape(a, n) ? a : NULL;
    return NULL;
}

/* The rewrites that hold in exact arithmetic only (SX_PASS_ALGEBRA, off by default):
 * log(exp x) -> x, exp(log x) -> x for x >= 0 (the pair rounds twice; log(exp x) is inf once exp
 * overflows), x * 0 -> 0 (x*0 is NaN for an infinite or NaN x, and -0 for x < 0). */
static sx_status pass_algebra(sx_cg_graph *g, int64_t *changed)
{
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *n = g->nodes[i];
        if (!live_op(n))
            continue;
        sx_cg_node *a = n->n_in > 0 ? n->in[0] : NULL, *to = NULL;
        if (n->op == SX_OP_LOG && a->op == SX_OP_EXP)
            to = a->in[0];
        else if (n->op == SX_OP_EXP && a->op == SX_OP_LOG && nonneg(a->in[0]))
            to = a->in[0];
        if (to != NULL) {
            SX_TRY(opt_replace(n, to));
            (*changed)++;
            continue;
        }
        if (n->op == SX_OP_MUL && (opt_const_all(n->in[0], 0) || opt_const_all(n->in[1], 0)) &&
            n->value.size <= FOLD_MAX_ELEMS) {
            sx_tensor *z = NULL;
            SX_TRY(sx_tensor_zeros(n->value.dtype, n->value.rank, n->value.shape, &z));
            sx_cg_node *c = sx_cg_const(g, z);
            sx_tensor_free(z);
            if (c == NULL)
                return sx_cg_graph_status(g);
            SX_TRY(opt_replace(n, c));
            (*changed)++;
        }
    }
    return SX_OK;
}

static sx_status pass_simplify(sx_cg_graph *g, int64_t *changed)
{
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *n = g->nodes[i];
        if (!live_op(n))
            continue;
        sx_cg_node *to = simpler(n);
        if (to != NULL) {
            SX_TRY(opt_replace(n, to));
            (*changed)++;
            continue;
        }
        sx_cg_node *a = n->n_in > 0 ? n->in[0] : NULL;
        /* a reduction over size-1 axes only is a reshape */
        if ((n->op == SX_OP_SUM || n->op == SX_OP_MEAN || n->op == SX_OP_PROD ||
             n->op == SX_OP_REDUCE_MAX || n->op == SX_OP_REDUCE_MIN) &&
            a->value.size == n->value.size && !n->attr.keepdims) {
            n->op = SX_OP_RESHAPE;
            n->attr.rank = n->value.rank;
            memcpy(n->attr.shape, n->value.shape, sizeof n->attr.shape);
            n->attr.axes = 0;
            if (n->own) {
                sx_free(n->own);
                n->own = NULL;
                n->value.data = NULL;
            }
            (*changed)++;
            continue;
        }
        /* reshape of reshape -> one reshape; permute of permute -> one permute */
        if (n->op == SX_OP_RESHAPE && (a->op == SX_OP_RESHAPE || a->op == SX_OP_IDENTITY)) {
            SX_TRY(opt_set_inputs(n, 1, &a->in[0]));
            (*changed)++;
        } else if (n->op == SX_OP_PERMUTE && a->op == SX_OP_PERMUTE) {
            int64_t perm[SX_MAX_RANK];
            for (int k = 0; k < n->value.rank; k++)
                perm[k] = a->attr.ints[n->attr.ints[k]];
            memcpy(n->attr.ints, perm, (size_t)n->value.rank * sizeof *perm);
            SX_TRY(opt_set_inputs(n, 1, &a->in[0]));
            (*changed)++;
        }
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- broadcast removal */

/* The source x of a broadcast-like node b when b's values are x broadcast (NumPy), or NULL. */
static sx_cg_node *broadcast_source(const sx_cg_node *b)
{
    if (b->op == SX_OP_BROADCAST)
        return b->in[0];
    if (b->op == SX_OP_REPEAT || b->op == SX_OP_TILE) {
        const sx_cg_node *x = b->in[0];
        for (int i = 0; i < x->value.rank; i++)
            if (b->attr.ints[i] != 1 && x->value.shape[i] != 1)
                return NULL;
        return b->in[0];
    }
    return NULL;
}

static bool broadcasts_itself(const sx_cg_node *n)
{
    return sx_cg_ops[n->op].shape == cg_shape_broadcast || n->op == SX_OP_WHERE;
}

static sx_status pass_broadcast(sx_cg_graph *g, int64_t *changed)
{
    (void)g;
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *n = g->nodes[i];
        if (!live_op(n) || !broadcasts_itself(n))
            continue;
        for (int k = 0; k < n->n_in; k++) {
            sx_cg_node *src = broadcast_source(n->in[k]);
            if (src == NULL)
                continue;
            /* the result's shape must not change without the explicit broadcast */
            int r = 0;
            int64_t s[SX_MAX_RANK];
            bool ok = true;
            for (int j = 0; j < n->n_in && ok; j++) {
                const sx_cg_node *x = j == k ? src : n->in[j];
                if (j == 0) {
                    r = x->value.rank;
                    memcpy(s, x->value.shape, sizeof s);
                } else {
                    ok = sx_shape_broadcast("opt", r, s, x->value.rank, x->value.shape, &r, s) ==
                         SX_OK;
                }
            }
            if (!ok || !sx_shape_equal(r, s, n->value.rank, n->value.shape))
                continue;
            sx_cg_node *ins[SX_CG_MAX_INPUTS];
            memcpy(ins, n->in, (size_t)n->n_in * sizeof *ins);
            ins[k] = src;
            SX_TRY(opt_set_inputs(n, n->n_in, ins));
            if (n->op == SX_OP_WHERE) /* its kernel now broadcasts src into scratch */
                n->ws_bytes = (size_t)cg_where_scratch(n) * (size_t)n->value.size *
                              sx_dtype_size(n->value.dtype);
            (*changed)++;
        }
    }
    sx_error_clear();
    return SX_OK;
}

/* ---------------------------------------------------------------- fma and gemm folding */

static bool single_use(const sx_cg_node *n, const sx_cg_node *user)
{
    return n->n_users == 1 && n->users[0] == user && !n->pinned;
}

static sx_status pass_fma(sx_cg_graph *g, int64_t *changed)
{
    (void)g;
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *n = g->nodes[i];
        if (!live_op(n) || n->op != SX_OP_ADD)
            continue;
        for (int k = 0; k < 2; k++) {
            sx_cg_node *m = n->in[k], *c = n->in[1 - k];
            if (m->op != SX_OP_MUL || m == c || !single_use(m, n))
                continue;
            sx_cg_node *ins[3] = {m->in[0], m->in[1], c};
            SX_TRY(opt_set_inputs(n, 3, ins));
            n->op = SX_OP_FMA;
            opt_kill(m);
            (*changed)++;
            break;
        }
    }
    return SX_OK;
}

/* where(gt(x, 0), maxpool2d_backward(x, d), +0), the gradient that relu's rule builds through a max
 * pooling, -> maxpool2d_relu_backward(x, d): the same selection in one pass (bit for bit), and x's
 * last reader is now the pooling's backward op, which the planner may run over x's memory. */
static sx_status pass_pool_relu(sx_cg_graph *g, int64_t *changed)
{
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *n = g->nodes[i];
        if (!live_op(n) || n->op != SX_OP_WHERE)
            continue;
        sx_cg_node *m = n->in[0], *b = n->in[1], *z = n->in[2];
        if (b->op != SX_OP_MAXPOOL2D_BACKWARD || !single_use(b, n) || !opt_same_shape(b, n))
            continue;
        if (m->op != SX_OP_GT || m->in[0] != b->in[0] || !opt_const_all(m->in[1], 0.0) ||
            !opt_same_shape(m, n))
            continue;
        /* the kernel writes +0 where x <= 0: the constant must be +0 (not -0) */
        if (z->value.size != 1 || !opt_const_all(z, 0.0) || signbit(sx_tensor_get(&z->value, 0)))
            continue;
        sx_cg_node *ins[2] = {b->in[0], b->in[1]};
        SX_TRY(opt_set_inputs(n, 2, ins));
        n->op = SX_OP_MAXPOOL2D_RELU_BACKWARD;
        n->attr = b->attr;
        opt_kill(b);
        (*changed)++;
    }
    return SX_OK;
}

/* n is the value an assign writes */
static bool assigned(const sx_cg_node *n)
{
    for (int k = 0; k < n->n_users; k++)
        if (n->users[k]->op == SX_OP_ASSIGN && n->users[k]->in[1] == n)
            return true;
    return false;
}

/* permute that swaps the last two axes and keeps the others */
static bool is_transpose(const sx_cg_node *p)
{
    int r = p->value.rank;
    if (p->op != SX_OP_PERMUTE || r < 2)
        return false;
    for (int i = 0; i < r - 2; i++)
        if (p->attr.ints[i] != i)
            return false;
    return p->attr.ints[r - 2] == r - 1 && p->attr.ints[r - 1] == r - 2;
}

static double scalar_value(const sx_cg_node *c)
{
    return opt_is_const(c) && c->value.size == 1 && c->value.data ? sx_tensor_get(&c->value, 0)
                                                                  : (double)NAN;
}

static sx_status pass_gemm_fold(sx_cg_graph *g, int64_t *changed)
{
    (void)g;
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *n = g->nodes[i];
        if (!live_op(n))
            continue;
        if (is_transpose(n) && n->in[0]->op == SX_OP_MATMUL && n->in[0]->n_in == 2 &&
            single_use(n->in[0], n)) {
            /* (alpha op(a) op(b))^T = alpha op(b)^T op(a)^T: the product written transposed (a
             * gradient through a transposed weight) instead of written, then transposed */
            sx_cg_node *m = n->in[0];
            sx_cg_node *ins[2] = {m->in[1], m->in[0]};
            SX_TRY(opt_set_inputs(n, 2, ins));
            n->op = SX_OP_MATMUL;
            n->attr = m->attr;
            n->attr.trans_a = !m->attr.trans_b;
            n->attr.trans_b = !m->attr.trans_a;
            opt_kill(m);
            (*changed)++;
        }
        if (n->op == SX_OP_MATMUL) {
            /* transposes into the flags */
            for (int k = 0; k < 2; k++) {
                sx_cg_node *t = n->in[k];
                if (!is_transpose(t))
                    continue;
                sx_cg_node *ins[3] = {n->in[0], n->in[1], n->n_in == 3 ? n->in[2] : NULL};
                ins[k] = t->in[0];
                SX_TRY(opt_set_inputs(n, n->n_in, ins));
                if (k == 0)
                    n->attr.trans_a = !n->attr.trans_a;
                else
                    n->attr.trans_b = !n->attr.trans_b;
                (*changed)++;
            }
            continue;
        }
        if (n->op != SX_OP_MUL && n->op != SX_OP_ADD)
            continue;
        for (int k = 0; k < 2; k++) {
            sx_cg_node *m = n->in[k], *o = n->in[1 - k];
            if (m->op != SX_OP_MATMUL || !single_use(m, n) || !opt_same_shape(m, n))
                continue;
            if (n->op == SX_OP_MUL) {
                /* s * (A B) = s A B: the GEMM rounds s times the finished sum, as the mul did.
                 * Not s * (alpha A B) nor s * (A B + C): one rounding fewer would change bits */
                double s = scalar_value(o);
                if (isnan(s) || m->n_in != 2 || m->attr.alpha != 1.0)
                    continue;
                m->attr.alpha = s;
            } else {
                /* alpha A B + C: C becomes the addend, added after the product as the add did
                 * (cg_eval_matmul). Not when an assign writes the sum (an optimiser's new state):
                 * element-wise fusion makes that step one pass with the product inside it */
                if (m->n_in != 2 || o == m || assigned(n))
                    continue;
                sx_cg_node *ins[3] = {m->in[0], m->in[1], o};
                SX_TRY(opt_set_inputs(m, 3, ins));
                m->attr.beta = 1.0;
            }
            SX_TRY(opt_replace(n, m));
            (*changed)++;
            break;
        }
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- driver */

static void count(const sx_cg_graph *g, int64_t *nodes, int64_t *edges)
{
    sx_cg_stats s = sx_cg_graph_stats(g);
    *nodes = s.nodes;
    *edges = s.edges;
}

/* Run one pass; *c counts what it changed. */
static sx_status run_pass(sx_cg_graph *g, sx_cg_pass ps, int n, sx_cg_node *const *outputs,
                          int64_t *c)
{
    switch (ps) {
    case SX_PASS_DCE:
        return pass_dce(g, n, outputs, c);
    case SX_PASS_CSE:
        return pass_cse(g, c);
    case SX_PASS_CONST_FOLD:
        return pass_const_fold(g, c);
    case SX_PASS_SIMPLIFY:
        return pass_simplify(g, c);
    case SX_PASS_BROADCAST:
        return pass_broadcast(g, c);
    case SX_PASS_GEMM_FOLD:
        return pass_gemm_fold(g, c);
    case SX_PASS_FMA:
        return pass_fma(g, c);
    case SX_PASS_POOL_RELU:
        return pass_pool_relu(g, c);
    case SX_PASS_ELEMWISE_FUSION:
        return opt_pass_elemwise_fusion(g, c);
    case SX_PASS_GEMM_UPDATE:
        return opt_pass_gemm_update(g, c);
    case SX_PASS_ALGEBRA:
        return pass_algebra(g, c);
    case SX_PASS_BN_FOLD:
        return opt_pass_bn_fold(g, c);
    case SX_PASS_BN_RECOMPUTE:
        return opt_pass_bn_recompute(g, c);
    case SX_PASS_BN_RELU:
        return opt_pass_bn_relu(g, c);
    case SX_PASS_CONV_EPILOGUE:
        return opt_pass_conv_epilogue(g, c);
    case SX_PASS_BN_ADD:
        return opt_pass_bn_add(g, c);
    case SX_PASS_COUNT:
        break;
    }
    return SX_OK;
}

sx_status sx_cg_optimise(sx_cg_graph *g, int n, sx_cg_node *const *outputs,
                         const sx_cg_opt_params *p, sx_cg_opt_report *report)
{
    const char *who = "sx_cg_optimise";
    if (g == NULL || n < 1 || outputs == NULL)
        return sx_error(SX_E_ARG, "%s: a graph and at least one output are needed", who);
    if (g->frozen || g->mode != SX_CG_LAZY)
        return sx_error(SX_E_STATE, "%s: only lazy graphs that are not frozen", who);
    for (int i = 0; i < n; i++)
        if (outputs[i] == NULL || outputs[i]->graph != g || outputs[i]->dead)
            return sx_error(SX_E_ARG, "%s: output %d is NULL, removed or of another graph", who, i);
    g->version++; /* rewrites change what is valid */
    sx_cg_opt_params params = p ? *p : sx_cg_opt_params_default();
    sx_cg_opt_report r;
    memset(&r, 0, sizeof r);
    double t0 = sx_seconds();
    count(g, &r.nodes_before, &r.edges_before);
    for (int i = 0; i < n; i++)
        outputs[i]->pinned = true;
    /* nodes made by the passes take the scope of the node they replace (opt_replace) */
    const int scope = g->cur_scope;
    g->cur_scope = 0;

    sx_status s = SX_OK;
    for (int round = 0; round < params.max_rounds && s == SX_OK; round++) {
        int64_t total = 0;
        for (int o = 0; o < SX_PASS_COUNT && s == SX_OK; o++) {
            const sx_cg_pass ps = pass_order[o];
            if (!params.enable[ps])
                continue;
            double t = sx_seconds();
            int64_t c = 0;
            s = run_pass(g, ps, n, outputs, &c);
            if (s == SX_OK && c > 0)
                s = renumber(g);
            r.changed[ps] += c;
            r.pass_seconds[ps] += sx_seconds() - t;
            total += c;
        }
        r.rounds = round + 1;
        if (total == 0)
            break;
    }
    /* unused leaves made by the passes (constants) go too */
    if (s == SX_OK && params.enable[SX_PASS_DCE]) {
        int64_t c = 0;
        s = pass_dce(g, n, outputs, &c);
        if (s == SX_OK && c > 0)
            s = renumber(g);
        r.changed[SX_PASS_DCE] += c;
    }
    /* rewritten nodes hold no value yet: everything computed is recomputed on demand */
    for (int i = 0; i < g->n_nodes; i++) {
        g->nodes[i]->pinned = false;
        if (live_op(g->nodes[i]))
            g->nodes[i]->valid = false;
    }
    g->version++;
    g->cur_scope = scope;
    count(g, &r.nodes_after, &r.edges_after);
    r.seconds = sx_seconds() - t0;
    if (report != NULL)
        *report = r;
    return s;
}

void sx_cg_opt_report_print(const sx_cg_opt_report *r, FILE *f)
{
    fprintf(f, "%-20s %8s %10s\n", "pass", "changed", "ms");
    for (int i = 0; i < SX_PASS_COUNT; i++)
        fprintf(f, "%-20s %8lld %10.3f\n", pass_names[i], (long long)r->changed[i],
                1e3 * r->pass_seconds[i]);
    fprintf(f, "nodes %lld -> %lld, edges %lld -> %lld, %d rounds, %.3f ms\n",
            (long long)r->nodes_before, (long long)r->nodes_after, (long long)r->edges_before,
            (long long)r->edges_after, r->rounds, 1e3 * r->seconds);
}
