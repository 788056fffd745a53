/* opt_rewrite.c: the optimiser's rewrite primitives (set a node's inputs, replace a node by
 * another everywhere, remove a node) and the small predicates its passes share. opt.c (the
 * passes and their driver) and opt_fuse.c (the fusion passes) both build on this file, which
 * calls neither. */
#include "opt_impl.h"

#include <string.h>
/* ---------------------------------------------------------------- rewrite primitives */

static void users_del(sx_cg_node *in, const sx_cg_node *n)
{
    for (int i = 0; i < in->n_users; i++)
        if (in->users[i] == n) {
            in->users[i] = in->users[--in->n_users];
            return;
        }
}

sx_status opt_set_inputs(sx_cg_node *n, int k, sx_cg_node *const *ins)
{
    for (int i = 0; i < k; i++)
        SX_TRY(cg_reserve_users(ins[i], k));
    sx_cg_node **arr = n->inline_in;
    if (k > SX_CG_INLINE_INPUTS) {
        arr = sx_alloc((size_t)k * sizeof *arr);
        if (arr == NULL)
            return SX_E_NOMEM;
    }
    sx_cg_node *tmp[SX_CG_MAX_INPUTS];
    int kk = k < SX_CG_MAX_INPUTS ? k : SX_CG_MAX_INPUTS;
    if (kk > 0)
        memcpy(tmp, ins, (size_t)kk * sizeof *tmp); /* ins may alias n->in */
    for (int i = 0; i < n->n_in; i++)
        users_del(n->in[i], n);
    if (n->in != n->inline_in && n->in != arr)
        sx_free(n->in);
    n->in = arr;
    n->n_in = k;
    for (int i = 0; i < k; i++) {
        n->in[i] = i < SX_CG_MAX_INPUTS ? tmp[i] : ins[i];
        n->in[i]->users[n->in[i]->n_users++] = n;
    }
    return SX_OK;
}

void opt_kill(sx_cg_node *n)
{
    for (int i = 0; i < n->n_in; i++)
        users_del(n->in[i], n);
    n->n_in = 0;
    n->dead = true;
    n->valid = false;
}

/* Turn n into a view of `to` (its value stays the same: `to` computes it). */
static sx_status become_identity(sx_cg_node *n, sx_cg_node *to)
{
    SX_TRY(opt_set_inputs(n, 1, &to));
    n->op = SX_OP_IDENTITY;
    n->attr = sx_cg_attr_default();
    if (n->own != NULL) {
        sx_free(n->own);
        n->own = NULL;
    }
    n->value.data = NULL;
    n->valid = false;
    return SX_OK;
}

sx_status opt_replace(sx_cg_node *old, sx_cg_node *to)
{
    if (old == to)
        return SX_OK;
    SX_TRY(cg_reserve_users(to, old->n_users));
    if (to->scope == 0) /* made by the pass: it does old's work */
        to->scope = old->scope;
    while (old->n_users > 0) {
        sx_cg_node *u = old->users[--old->n_users];
        for (int i = 0; i < u->n_in; i++)
            if (u->in[i] == old) {
                u->in[i] = to;
                to->users[to->n_users++] = u;
                /* u appears once in old->users per slot: the loop pops it again if needed */
                break;
            }
    }
    if (old->pinned)
        return become_identity(old, to);
    opt_kill(old);
    return SX_OK;
}
/* ---------------------------------------------------------------- helpers */

bool opt_is_const(const sx_cg_node *n)
{
    return n->op == SX_OP_CONST;
}

/* A constant whose elements all equal v. */
bool opt_const_all(const sx_cg_node *n, double v)
{
    if (!opt_is_const(n) || n->value.data == NULL)
        return false;
    for (int64_t i = 0; i < n->value.size; i++)
        if (sx_tensor_get(&n->value, i) != v)
            return false;
    return true;
}

bool opt_same_shape(const sx_cg_node *a, const sx_cg_node *b)
{
    return sx_shape_equal(a->value.rank, a->value.shape, b->value.rank, b->value.shape) &&
           a->value.dtype == b->value.dtype;
}
