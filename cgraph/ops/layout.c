/* ops/layout.c: ops that move data without arithmetic: repeat, tile, broadcast, reshape,
 * identity, slice and its adjoint unslice, concat, permute, pad, one_hot, gather and its adjoint
 * scatter_add. Their flop cost is zero. */
#ifndef CG_GRAD_RULES /* the ops; their gradient rules, at the end, build apart (ops/rule.h) */
#include "cgraph_impl.h"

#include <limits.h>
#include <string.h>

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

/* ---------------------------------------------------------------- constructors */

sx_cg_node *sx_cg_repeat(sx_cg_graph *g, sx_cg_node *x, const int64_t *reps)
{
    if (!cg_arg_ok(g, reps, "sx_cg_repeat"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    cg_copy_ints(a.ints, reps, x);
    return cg_op1(g, SX_OP_REPEAT, x, &a);
}

sx_cg_node *sx_cg_tile(sx_cg_graph *g, sx_cg_node *x, const int64_t *reps)
{
    if (!cg_arg_ok(g, reps, "sx_cg_tile"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    cg_copy_ints(a.ints, reps, x);
    return cg_op1(g, SX_OP_TILE, x, &a);
}

sx_cg_node *sx_cg_broadcast(sx_cg_graph *g, sx_cg_node *x, int rank, const int64_t *shape)
{
    sx_cg_attr a = sx_cg_attr_default();
    if (!cg_set_target_shape(g, &a, rank, shape, "sx_cg_broadcast"))
        return NULL;
    return cg_op1(g, SX_OP_BROADCAST, x, &a);
}

sx_cg_node *sx_cg_reshape(sx_cg_graph *g, sx_cg_node *x, int rank, const int64_t *shape)
{
    sx_cg_attr a = sx_cg_attr_default();
    if (!cg_set_target_shape(g, &a, rank, shape, "sx_cg_reshape"))
        return NULL;
    return cg_op1(g, SX_OP_RESHAPE, x, &a);
}

sx_cg_node *sx_cg_slice(sx_cg_graph *g, sx_cg_node *x, const sx_slice *s)
{
    if (!cg_arg_ok(g, s, "sx_cg_slice"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    if (x != NULL)
        memcpy(a.slice, s, (size_t)x->value.rank * sizeof *s);
    return cg_op1(g, SX_OP_SLICE, x, &a);
}

sx_cg_node *sx_cg_unslice(sx_cg_graph *g, sx_cg_node *x, const sx_slice *s, int rank,
                          const int64_t *shape)
{
    if (!cg_arg_ok(g, s, "sx_cg_unslice"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    if (!cg_set_target_shape(g, &a, rank, shape, "sx_cg_unslice"))
        return NULL;
    memcpy(a.slice, s, (size_t)rank * sizeof *s);
    return cg_op1(g, SX_OP_UNSLICE, x, &a);
}

sx_cg_node *sx_cg_concat(sx_cg_graph *g, int n, sx_cg_node *const *xs, int axis)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.axis = cg_norm_axis(n > 0 && xs != NULL ? xs[0] : NULL, axis);
    return sx_cg_op_new(g, SX_OP_CONCAT, n, xs, &a);
}

sx_cg_node *sx_cg_permute(sx_cg_graph *g, sx_cg_node *x, const int *perm)
{
    if (!cg_arg_ok(g, perm, "sx_cg_permute"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    for (int i = 0; x != NULL && i < x->value.rank; i++)
        a.ints[i] = perm[i];
    return cg_op1(g, SX_OP_PERMUTE, x, &a);
}

sx_cg_node *sx_cg_transpose(sx_cg_graph *g, sx_cg_node *x)
{
    if (x == NULL)
        return NULL;
    int r = x->value.rank, perm[SX_MAX_RANK];
    if (r < 2) {
        cg_fail(g, sx_error(SX_E_RANK, "sx_cg_transpose: rank %d (want >= 2)", r));
        return NULL;
    }
    for (int i = 0; i < r; i++)
        perm[i] = i;
    perm[r - 2] = r - 1;
    perm[r - 1] = r - 2;
    return sx_cg_permute(g, x, perm);
}

sx_cg_node *sx_cg_pad(sx_cg_graph *g, sx_cg_node *x, const int64_t *before, const int64_t *after,
                      double value)
{
    if (!cg_arg_ok(g, before, "sx_cg_pad") || !cg_arg_ok(g, after, "sx_cg_pad"))
        return NULL;
    sx_cg_attr a = sx_cg_attr_default();
    cg_copy_ints(a.ints, before, x);
    cg_copy_ints(a.ints2, after, x);
    a.alpha = value;
    return cg_op1(g, SX_OP_PAD, x, &a);
}

sx_cg_node *sx_cg_gather(sx_cg_graph *g, sx_cg_node *x, sx_cg_node *idx)
{
    return cg_op2(g, SX_OP_GATHER, x, idx, NULL);
}

sx_cg_node *sx_cg_one_hot(sx_cg_graph *g, sx_cg_node *idx, int64_t depth)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.index.count = depth;
    return cg_op1(g, SX_OP_ONE_HOT, idx, &a);
}

sx_cg_node *sx_cg_scatter_add(sx_cg_graph *g, sx_cg_node *grad, sx_cg_node *idx, int64_t x_rows)
{
    sx_cg_attr a = sx_cg_attr_default();
    a.index.count = x_rows;
    return cg_op2(g, SX_OP_SCATTER_ADD, grad, idx, &a);
}

/* ---------------------------------------------------------------- shape rules */

sx_status cg_shape_repeat(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    int64_t s[SX_MAX_RANK];
    for (int i = 0; i < IN_VALUE(0)->rank; i++) {
        int64_t r = n->attr.ints[i];
        if (r < 0 || (r > 0 && IN_VALUE(0)->shape[i] > INT64_MAX / r))
            return sx_error(SX_E_ARG, "%s: bad repeat count %lld on axis %d", cg_who(n),
                            (long long)r, i);
        s[i] = IN_VALUE(0)->shape[i] * r;
    }
    SX_TRY(sx_shape_check(cg_who(n), IN_VALUE(0)->rank, s));
    cg_set_shape(n, IN_VALUE(0)->rank, s);
    return SX_OK;
}

sx_status cg_shape_broadcast_to(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_attr_shape(n));
    int r;
    int64_t s[SX_MAX_RANK];
    SX_TRY(sx_shape_broadcast(cg_who(n), IN_VALUE(0)->rank, IN_VALUE(0)->shape, n->attr.rank,
                              n->attr.shape, &r, s));
    if (!sx_shape_equal(r, s, n->attr.rank, n->attr.shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: cannot broadcast %s to %s", cg_who(n),
                        sx_shape_str(IN_VALUE(0)->rank, IN_VALUE(0)->shape, a, sizeof a),
                        sx_shape_str(n->attr.rank, n->attr.shape, b, sizeof b));
    }
    return SX_OK;
}

sx_status cg_shape_reshape(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    /* resolve one -1 entry from the element count */
    int free_axis = -1;
    int64_t known = 1, s[SX_MAX_RANK];
    if (n->attr.rank < 0 || n->attr.rank > SX_MAX_RANK)
        return sx_error(SX_E_RANK, "%s: rank %d (want 0..%d)", cg_who(n), n->attr.rank,
                        SX_MAX_RANK);
    for (int i = 0; i < n->attr.rank; i++) {
        s[i] = n->attr.shape[i];
        if (s[i] == -1 && free_axis < 0)
            free_axis = i;
        else if (s[i] > 0) {
            if (known > INT64_MAX / s[i])
                return sx_error(SX_E_SHAPE, "%s: shape too large", cg_who(n));
            known *= s[i];
        }
    }
    if (free_axis >= 0 && known > 0 && IN_VALUE(0)->size % known == 0)
        s[free_axis] = IN_VALUE(0)->size / known;
    SX_TRY(sx_shape_check(cg_who(n), n->attr.rank, s));
    cg_set_shape(n, n->attr.rank, s);
    if (sx_shape_size(n->attr.rank, s) != IN_VALUE(0)->size) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: cannot reshape %s to %s", cg_who(n),
                        sx_shape_str(IN_VALUE(0)->rank, IN_VALUE(0)->shape, a, sizeof a),
                        sx_shape_str(n->attr.rank, n->attr.shape, b, sizeof b));
    }
    return SX_OK;
}

sx_status cg_shape_slice(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    int64_t s[SX_MAX_RANK], first[SX_MAX_RANK];
    SX_TRY(
        sx_slice_shape(cg_who(n), IN_VALUE(0)->rank, IN_VALUE(0)->shape, n->attr.slice, s, first));
    cg_set_shape(n, IN_VALUE(0)->rank, s);
    return SX_OK;
}

sx_status cg_shape_unslice(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    SX_TRY(cg_attr_shape(n));
    int64_t s[SX_MAX_RANK], first[SX_MAX_RANK];
    if (n->attr.rank != IN_VALUE(0)->rank)
        return sx_error(SX_E_RANK, "%s: rank %d into rank %d", cg_who(n), IN_VALUE(0)->rank,
                        n->attr.rank);
    SX_TRY(sx_slice_shape(cg_who(n), n->attr.rank, n->attr.shape, n->attr.slice, s, first));
    if (!sx_shape_equal(n->attr.rank, s, IN_VALUE(0)->rank, IN_VALUE(0)->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: the slice has shape %s, the input %s", cg_who(n),
                        sx_shape_str(n->attr.rank, s, a, sizeof a),
                        sx_shape_str(IN_VALUE(0)->rank, IN_VALUE(0)->shape, b, sizeof b));
    }
    return SX_OK;
}

sx_status cg_shape_concat(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    int axis;
    SX_TRY(sx__axis(cg_who(n), n->attr.axis, IN_VALUE(0)->rank, &axis));
    n->attr.axis = axis;
    int64_t s[SX_MAX_RANK];
    memcpy(s, IN_VALUE(0)->shape, sizeof s);
    for (int i = 1; i < n->n_in; i++) {
        bool ok = IN_VALUE(i)->rank == IN_VALUE(0)->rank;
        for (int d = 0; ok && d < IN_VALUE(0)->rank; d++)
            ok = d == axis || IN_VALUE(i)->shape[d] == IN_VALUE(0)->shape[d];
        if (!ok) {
            char a[128], b[128];
            return sx_error(SX_E_SHAPE, "%s: shapes %s and %s do not join along axis %d", cg_who(n),
                            sx_shape_str(IN_VALUE(0)->rank, IN_VALUE(0)->shape, a, sizeof a),
                            sx_shape_str(IN_VALUE(i)->rank, IN_VALUE(i)->shape, b, sizeof b), axis);
        }
        s[axis] += IN_VALUE(i)->shape[axis];
    }
    cg_set_shape(n, IN_VALUE(0)->rank, s);
    return SX_OK;
}

sx_status cg_shape_permute(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    int r = IN_VALUE(0)->rank;
    unsigned seen = 0;
    int64_t s[SX_MAX_RANK];
    for (int i = 0; i < r; i++) {
        int64_t p = n->attr.ints[i];
        if (p < 0 || p >= r || (seen & (1u << p)))
            return sx_error(SX_E_AXIS, "%s: not a permutation of %d axes", cg_who(n), r);
        seen |= 1u << p;
        s[i] = IN_VALUE(0)->shape[p];
    }
    cg_set_shape(n, r, s);
    return SX_OK;
}

sx_status cg_shape_pad(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    int64_t s[SX_MAX_RANK];
    for (int i = 0; i < IN_VALUE(0)->rank; i++) {
        if (n->attr.ints[i] < 0 || n->attr.ints2[i] < 0)
            return sx_error(SX_E_ARG, "%s: negative padding on axis %d", cg_who(n), i);
        s[i] = IN_VALUE(0)->shape[i] + n->attr.ints[i] + n->attr.ints2[i];
    }
    SX_TRY(sx_shape_check(cg_who(n), IN_VALUE(0)->rank, s));
    cg_set_shape(n, IN_VALUE(0)->rank, s);
    return SX_OK;
}

sx_status cg_shape_one_hot(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    if (IN_VALUE(0)->rank >= SX_MAX_RANK)
        return sx_error(SX_E_RANK, "%s: rank %d input leaves no room for the class axis", cg_who(n),
                        IN_VALUE(0)->rank);
    if (n->attr.index.count < 1)
        return sx_error(SX_E_ARG, "%s: depth %lld (want >= 1)", cg_who(n),
                        (long long)n->attr.index.count);
    int64_t s[SX_MAX_RANK];
    memcpy(s, IN_VALUE(0)->shape, sizeof s);
    s[IN_VALUE(0)->rank] = n->attr.index.count;
    SX_TRY(sx_shape_check(cg_who(n), IN_VALUE(0)->rank + 1, s));
    cg_set_shape(n, IN_VALUE(0)->rank + 1, s);
    return SX_OK;
}

sx_status cg_shape_gather(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    if (IN_VALUE(0)->rank < 1)
        return sx_error(SX_E_RANK, "%s: cannot gather rows of a scalar", cg_who(n));
    SX_TRY(cg_want_rank(n, 1, 1));
    int64_t s[SX_MAX_RANK];
    memcpy(s, IN_VALUE(0)->shape, sizeof s);
    s[0] = IN_VALUE(1)->shape[0];
    cg_set_shape(n, IN_VALUE(0)->rank, s);
    return SX_OK;
}

sx_status cg_shape_scatter_add(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    if (IN_VALUE(0)->rank < 1)
        return sx_error(SX_E_RANK, "%s: cannot scatter rows of a scalar", cg_who(n));
    SX_TRY(cg_want_rank(n, 1, 1));
    if (IN_VALUE(1)->shape[0] != IN_VALUE(0)->shape[0])
        return sx_error(SX_E_SHAPE, "%s: %lld indices for %lld rows", cg_who(n),
                        (long long)IN_VALUE(1)->shape[0], (long long)IN_VALUE(0)->shape[0]);
    if (n->attr.index.count < 0)
        return sx_error(SX_E_ARG, "%s: negative row count", cg_who(n));
    int64_t s[SX_MAX_RANK];
    memcpy(s, IN_VALUE(0)->shape, sizeof s);
    s[0] = n->attr.index.count;
    cg_set_shape(n, IN_VALUE(0)->rank, s);
    return SX_OK;
}

/* ---------------------------------------------------------------- evaluators */

sx_status cg_eval_repeat(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    if (n->op == SX_OP_TILE)
        return sx_tensor_tile_out(IN_VALUE(0), n->attr.ints, OUT);
    return sx_tensor_repeat_out(IN_VALUE(0), n->attr.ints, OUT);
}

sx_status cg_eval_broadcast(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_broadcast_out(IN_VALUE(0), OUT);
}

sx_status cg_eval_slice(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_slice_out(IN_VALUE(0), n->attr.slice, OUT);
}

sx_status cg_eval_unslice(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_unslice_out(IN_VALUE(0), n->attr.slice, OUT);
}

sx_status cg_eval_concat(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    const sx_tensor *xs[SX_CG_MAX_INPUTS];
    if (n->n_in > SX_CG_MAX_INPUTS)
        return sx_error(SX_E_UNSUPPORTED, "%s: more than %d inputs", cg_who(n), SX_CG_MAX_INPUTS);
    for (int i = 0; i < n->n_in; i++)
        xs[i] = IN_VALUE(i);
    return sx_tensor_concat_out(n->n_in, xs, n->attr.axis, OUT);
}

sx_status cg_eval_permute(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    int perm[SX_MAX_RANK];
    for (int i = 0; i < OUT->rank; i++)
        perm[i] = (int)n->attr.ints[i];
    return sx_tensor_permute_out(IN_VALUE(0), perm, OUT);
}

sx_status cg_eval_pad(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_pad_out(IN_VALUE(0), n->attr.ints, n->attr.ints2, n->attr.alpha, OUT);
}

sx_status cg_eval_one_hot(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_one_hot_out(IN_VALUE(0), n->attr.index.count, OUT);
}

sx_status cg_eval_gather(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_gather_out(IN_VALUE(0), IN_VALUE(1), OUT);
}

sx_status cg_eval_scatter_add(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    return sx_tensor_scatter_add_out(IN_VALUE(0), IN_VALUE(1), OUT);
}

/* ---------------------------------------------------------------- flop model */

/* moving or selecting data costs no arithmetic */
#define NO_ARITHMETIC(eval)                                                                        \
    cg_cost cg_##eval##_cost(const sx_cg_node *n)                                                  \
    {                                                                                              \
        return cg_cost_none(n);                                                                    \
    }
NO_ARITHMETIC(eval_repeat)
NO_ARITHMETIC(eval_broadcast)
NO_ARITHMETIC(eval_slice)
NO_ARITHMETIC(eval_unslice)
NO_ARITHMETIC(eval_concat)
NO_ARITHMETIC(eval_permute)
NO_ARITHMETIC(eval_pad)
NO_ARITHMETIC(eval_one_hot)
NO_ARITHMETIC(eval_gather)
#undef NO_ARITHMETIC

/* one addition per element of the scattered rows */
cg_cost cg_eval_scatter_add_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, 1);
}

#else
/* ---------------------------------------------------------------- gradient rules */

/* Each rule is the adjoint move (slice <-> unslice, gather <-> scatter_add, repeat/tile summed
 * back, ...). y is the node, x_i = y's inputs, G = gy is the adjoint of y. */
#include "rule.h"

#include <string.h>

/* Sum G of shape (.., a*b, ..) over the factor `b` (inner) or `a` (outer) of axis i: reshape
 * to (pre, a, b, post) and sum one of the middle axes. */
static sx_cg_node *fold_axis(sx_cg_graph *g, sx_cg_node *G, int axis, int64_t outer, int64_t inner,
                             bool sum_inner)
{
    int r = sx_cg_node_rank(G);
    const int64_t *s = sx_cg_node_shape(G);
    int64_t pre = 1, post = 1;
    for (int i = 0; i < axis; i++)
        pre *= s[i];
    for (int i = axis + 1; i < r; i++)
        post *= s[i];
    int64_t four[4] = {pre, outer, inner, post};
    sx_cg_node *t = sx_cg_sum(g, sx_cg_reshape(g, G, 4, four), SX_AXIS(sum_inner ? 2 : 1), false);
    int64_t back[SX_MAX_RANK];
    memcpy(back, s, (size_t)r * sizeof *back);
    back[axis] = sum_inner ? outer : inner;
    return sx_cg_reshape(g, t, r, back);
}

/* repeat: each element was copied reps[i] times in place: sum the copies (inner factor) */
sx_status grad_repeat(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    (void)need;
    sx_cg_node *G = gy, *x = IN(0);
    for (int i = 0; i < sx_cg_node_rank(x) && G != NULL; i++)
        if (ATTR->ints[i] != 1)
            G = fold_axis(g, G, i, sx_cg_node_shape(x)[i], ATTR->ints[i], true);
    gin[0] = G;
    DONE();
}

/* tile: the whole tensor was copied reps[i] times: sum the copies (outer factor) */
sx_status grad_tile(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                    sx_cg_node **gin)
{
    (void)need;
    sx_cg_node *G = gy, *x = IN(0);
    for (int i = 0; i < sx_cg_node_rank(x) && G != NULL; i++)
        if (ATTR->ints[i] != 1)
            G = fold_axis(g, G, i, ATTR->ints[i], sx_cg_node_shape(x)[i], false);
    gin[0] = G;
    DONE();
}

/* broadcast: sum over the broadcast axes */
sx_status grad_broadcast(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                         sx_cg_node **gin)
{
    (void)need;
    gin[0] = cg_grad_unbroadcast(g, gy, IN(0));
    DONE();
}

/* reshape: G in the input's shape */
sx_status grad_reshape(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                       sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_reshape(g, gy, sx_cg_node_rank(IN(0)), sx_cg_node_shape(IN(0)));
    DONE();
}

sx_status grad_identity(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                        sx_cg_node **gin)
{
    (void)g, (void)y, (void)need;
    gin[0] = gy;
    return SX_OK;
}

/* slice: G placed back into zeros of the input's shape */
sx_status grad_slice(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                     sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_unslice(g, gy, ATTR->slice, sx_cg_node_rank(IN(0)), sx_cg_node_shape(IN(0)));
    DONE();
}

/* unslice: the slice of G */
sx_status grad_unslice(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                       sx_cg_node **gin)
{
    (void)need;
    gin[0] = sx_cg_slice(g, gy, ATTR->slice);
    DONE();
}

/* concat: each input gets its slab of G */
sx_status grad_concat(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    int axis = ATTR->axis, r = sx_cg_node_rank(y);
    int64_t at = 0;
    for (int i = 0; i < sx_cg_node_n_inputs(y); i++) {
        int64_t len = sx_cg_node_shape(IN(i))[axis];
        if (need[i]) {
            sx_slice s[SX_MAX_RANK];
            for (int d = 0; d < r; d++)
                s[d] = SX_SLICE_ALL;
            s[axis] = (sx_slice){at, at + len, 1};
            gin[i] = sx_cg_slice(g, gy, s);
        }
        at += len;
    }
    DONE();
}

/* permute: G permuted back by the inverse permutation */
sx_status grad_permute(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                       sx_cg_node **gin)
{
    (void)need;
    int inv[SX_MAX_RANK];
    for (int i = 0; i < sx_cg_node_rank(y); i++)
        inv[ATTR->ints[i]] = i;
    gin[0] = sx_cg_permute(g, gy, inv);
    DONE();
}

/* pad: the interior of G */
sx_status grad_pad(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                   sx_cg_node **gin)
{
    (void)need;
    sx_slice s[SX_MAX_RANK];
    for (int i = 0; i < sx_cg_node_rank(y); i++)
        s[i] = (sx_slice){ATTR->ints[i], ATTR->ints[i] + sx_cg_node_shape(IN(0))[i], 1};
    gin[0] = sx_cg_slice(g, gy, s);
    DONE();
}

/* gather(x, idx): rows of G added back at idx; the index has no gradient */
sx_status grad_gather(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    if (need[0])
        gin[0] = sx_cg_scatter_add(g, gy, IN(1), sx_cg_node_shape(IN(0))[0]);
    DONE();
}

/* scatter_add(h, idx): the rows of G at idx */
sx_status grad_scatter_add(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                           sx_cg_node **gin)
{
    if (need[0])
        gin[0] = sx_cg_gather(g, gy, IN(1));
    DONE();
}

#endif
