/* layout.c: the gradient rules of the data-moving ops (cgraph/ops/layout.c): each the
 * adjoint move (slice <-> unslice, gather <-> scatter_add, repeat/tile summed back, ...).
 * y is the node, x_i = y's inputs, G = gy is the adjoint of y. */
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
    gin[0] = ad_unbroadcast(g, gy, IN(0));
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
