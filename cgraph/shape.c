/* shape.c: the shape rules of the op table. Each computes a node's dtype and shape (and the
 * scratch its kernel wants) from its inputs and attributes when the node is made, so a mismatch
 * is reported at the call that caused it, naming the op and the shapes. Most rules reuse the
 * tensor layer's own shape functions, so graph and kernels can never disagree. */
#include "cgraph_impl.h"

#include <limits.h>
#include <string.h>

#define IN(i) (&n->in[i]->value)
#define OUT (&n->value)

static void set_shape(sx_cg_node *n, int rank, const int64_t *shape)
{
    n->value.rank = rank;
    for (int i = 0; i < rank; i++)
        n->value.shape[i] = shape[i];
}

/* Every input has the dtype of input 0, which becomes the node's. */
static sx_status same_dtypes(sx_cg_node *n)
{
    for (int i = 1; i < n->n_in; i++)
        if (IN(i)->dtype != IN(0)->dtype)
            return sx_error(SX_E_DTYPE, "%s: input %d is %s, input 0 is %s", cg_who(n), i,
                            sx_dtype_name(IN(i)->dtype), sx_dtype_name(IN(0)->dtype));
    if (n->n_in > 0)
        OUT->dtype = IN(0)->dtype;
    return SX_OK;
}

static sx_status want_rank(sx_cg_node *n, int i, int rank)
{
    if (IN(i)->rank != rank) {
        char s[128];
        return sx_error(SX_E_RANK, "%s: input %d has shape %s, want rank %d", cg_who(n), i,
                        sx_shape_str(IN(i)->rank, IN(i)->shape, s, sizeof s), rank);
    }
    return SX_OK;
}

static sx_status want_same_shape(sx_cg_node *n, int i, int j)
{
    if (!sx_shape_equal(IN(i)->rank, IN(i)->shape, IN(j)->rank, IN(j)->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: shapes %s and %s differ", cg_who(n),
                        sx_shape_str(IN(i)->rank, IN(i)->shape, a, sizeof a),
                        sx_shape_str(IN(j)->rank, IN(j)->shape, b, sizeof b));
    }
    return SX_OK;
}

/* The tensor layer's shape functions check their arguments as kernels do, including that a
 * non-empty tensor has data; in a lazy graph an input not yet computed has none. They get a
 * descriptor of the same dtype and shape over a dummy address, which they never read. */
static sx_tensor shape_view(const sx_tensor *t)
{
    static char dummy[sizeof(double)];
    sx_tensor v = *t;
    if (v.data == NULL)
        v.data = dummy;
    return v;
}

/* Attribute shape (reshape, broadcast, unslice, backward ops, dropout masks). */
static sx_status attr_shape(sx_cg_node *n)
{
    SX_TRY(sx_shape_check(cg_who(n), n->attr.rank, n->attr.shape));
    set_shape(n, n->attr.rank, n->attr.shape);
    return SX_OK;
}

sx_status cg_shape_leaf(sx_cg_node *n)
{
    (void)n; /* leaves get their shape from the constructor */
    return SX_OK;
}

sx_status cg_shape_same(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    for (int i = 1; i < n->n_in; i++)
        SX_TRY(want_same_shape(n, 0, i));
    set_shape(n, IN(0)->rank, IN(0)->shape);
    return SX_OK;
}

/* Same shapes, plus an axis that is normalised to 0..rank-1 (so hashing sees one form). */
sx_status cg_shape_softmax(sx_cg_node *n)
{
    SX_TRY(cg_shape_same(n));
    int axis;
    SX_TRY(sx__axis(cg_who(n), n->attr.axis, IN(0)->rank, &axis));
    n->attr.axis = axis;
    return SX_OK;
}

/* softmax_xent_backward(logits (n,k), target (n,k), dout (n)) -> (n,k) */
sx_status cg_shape_xent_backward(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    SX_TRY(want_rank(n, 0, 2));
    SX_TRY(want_same_shape(n, 0, 1));
    SX_TRY(want_rank(n, 2, 1));
    if (IN(2)->shape[0] != IN(0)->shape[0])
        return sx_error(SX_E_SHAPE, "%s: dout has %lld rows, logits %lld", cg_who(n),
                        (long long)IN(2)->shape[0], (long long)IN(0)->shape[0]);
    set_shape(n, 2, IN(0)->shape);
    return SX_OK;
}

sx_status cg_shape_broadcast(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    int r = IN(0)->rank;
    int64_t s[SX_MAX_RANK];
    memcpy(s, IN(0)->shape, sizeof s);
    for (int i = 1; i < n->n_in; i++)
        SX_TRY(sx_shape_broadcast(cg_who(n), r, s, IN(i)->rank, IN(i)->shape, &r, s));
    set_shape(n, r, s);
    return SX_OK;
}

/* where(c, a, b): broadcast; its kernel broadcasts into scratch the operands that have neither
 * the result's size nor one element (cg_eval_where). */
int cg_where_scratch(const sx_cg_node *n)
{
    int k = 0;
    for (int i = 0; i < 3; i++)
        k += IN(i)->size != OUT->size && IN(i)->size != 1;
    return k;
}

sx_status cg_shape_where(sx_cg_node *n)
{
    SX_TRY(cg_shape_broadcast(n));
    n->ws_bytes = (size_t)cg_where_scratch(n) * (size_t)sx_shape_size(OUT->rank, OUT->shape) *
                  sx_dtype_size(OUT->dtype);
    return SX_OK;
}

sx_status cg_shape_fold(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    int r;
    int64_t s[SX_MAX_RANK];
    SX_TRY(
        sx_fold_shape(cg_who(n), IN(0)->rank, IN(0)->shape, n->attr.axes, n->attr.keepdims, &r, s));
    set_shape(n, r, s);
    return SX_OK;
}

sx_status cg_shape_repeat(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    int64_t s[SX_MAX_RANK];
    for (int i = 0; i < IN(0)->rank; i++) {
        int64_t r = n->attr.ints[i];
        if (r < 0 || (r > 0 && IN(0)->shape[i] > INT64_MAX / r))
            return sx_error(SX_E_ARG, "%s: bad repeat count %lld on axis %d", cg_who(n),
                            (long long)r, i);
        s[i] = IN(0)->shape[i] * r;
    }
    SX_TRY(sx_shape_check(cg_who(n), IN(0)->rank, s));
    set_shape(n, IN(0)->rank, s);
    return SX_OK;
}

sx_status cg_shape_broadcast_to(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    SX_TRY(attr_shape(n));
    int r;
    int64_t s[SX_MAX_RANK];
    SX_TRY(sx_shape_broadcast(cg_who(n), IN(0)->rank, IN(0)->shape, n->attr.rank, n->attr.shape, &r,
                              s));
    if (!sx_shape_equal(r, s, n->attr.rank, n->attr.shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: cannot broadcast %s to %s", cg_who(n),
                        sx_shape_str(IN(0)->rank, IN(0)->shape, a, sizeof a),
                        sx_shape_str(n->attr.rank, n->attr.shape, b, sizeof b));
    }
    return SX_OK;
}

sx_status cg_shape_reshape(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
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
    if (free_axis >= 0 && known > 0 && IN(0)->size % known == 0)
        s[free_axis] = IN(0)->size / known;
    SX_TRY(sx_shape_check(cg_who(n), n->attr.rank, s));
    set_shape(n, n->attr.rank, s);
    if (sx_shape_size(n->attr.rank, s) != IN(0)->size) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: cannot reshape %s to %s", cg_who(n),
                        sx_shape_str(IN(0)->rank, IN(0)->shape, a, sizeof a),
                        sx_shape_str(n->attr.rank, n->attr.shape, b, sizeof b));
    }
    return SX_OK;
}

sx_status cg_shape_slice(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    int64_t s[SX_MAX_RANK], first[SX_MAX_RANK];
    SX_TRY(sx_slice_shape(cg_who(n), IN(0)->rank, IN(0)->shape, n->attr.slice, s, first));
    set_shape(n, IN(0)->rank, s);
    return SX_OK;
}

sx_status cg_shape_unslice(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    SX_TRY(attr_shape(n));
    int64_t s[SX_MAX_RANK], first[SX_MAX_RANK];
    if (n->attr.rank != IN(0)->rank)
        return sx_error(SX_E_RANK, "%s: rank %d into rank %d", cg_who(n), IN(0)->rank,
                        n->attr.rank);
    SX_TRY(sx_slice_shape(cg_who(n), n->attr.rank, n->attr.shape, n->attr.slice, s, first));
    if (!sx_shape_equal(n->attr.rank, s, IN(0)->rank, IN(0)->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: the slice has shape %s, the input %s", cg_who(n),
                        sx_shape_str(n->attr.rank, s, a, sizeof a),
                        sx_shape_str(IN(0)->rank, IN(0)->shape, b, sizeof b));
    }
    return SX_OK;
}

sx_status cg_shape_concat(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    int axis;
    SX_TRY(sx__axis(cg_who(n), n->attr.axis, IN(0)->rank, &axis));
    n->attr.axis = axis;
    int64_t s[SX_MAX_RANK];
    memcpy(s, IN(0)->shape, sizeof s);
    for (int i = 1; i < n->n_in; i++) {
        bool ok = IN(i)->rank == IN(0)->rank;
        for (int d = 0; ok && d < IN(0)->rank; d++)
            ok = d == axis || IN(i)->shape[d] == IN(0)->shape[d];
        if (!ok) {
            char a[128], b[128];
            return sx_error(SX_E_SHAPE, "%s: shapes %s and %s do not join along axis %d", cg_who(n),
                            sx_shape_str(IN(0)->rank, IN(0)->shape, a, sizeof a),
                            sx_shape_str(IN(i)->rank, IN(i)->shape, b, sizeof b), axis);
        }
        s[axis] += IN(i)->shape[axis];
    }
    set_shape(n, IN(0)->rank, s);
    return SX_OK;
}

sx_status cg_shape_permute(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    int r = IN(0)->rank;
    unsigned seen = 0;
    int64_t s[SX_MAX_RANK];
    for (int i = 0; i < r; i++) {
        int64_t p = n->attr.ints[i];
        if (p < 0 || p >= r || (seen & (1u << p)))
            return sx_error(SX_E_AXIS, "%s: not a permutation of %d axes", cg_who(n), r);
        seen |= 1u << p;
        s[i] = IN(0)->shape[p];
    }
    set_shape(n, r, s);
    return SX_OK;
}

sx_status cg_shape_pad(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    int64_t s[SX_MAX_RANK];
    for (int i = 0; i < IN(0)->rank; i++) {
        if (n->attr.ints[i] < 0 || n->attr.ints2[i] < 0)
            return sx_error(SX_E_ARG, "%s: negative padding on axis %d", cg_who(n), i);
        s[i] = IN(0)->shape[i] + n->attr.ints[i] + n->attr.ints2[i];
    }
    SX_TRY(sx_shape_check(cg_who(n), IN(0)->rank, s));
    set_shape(n, IN(0)->rank, s);
    return SX_OK;
}

sx_status cg_shape_one_hot(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    if (IN(0)->rank >= SX_MAX_RANK)
        return sx_error(SX_E_RANK, "%s: rank %d input leaves no room for the class axis", cg_who(n),
                        IN(0)->rank);
    if (n->attr.ints[0] < 1)
        return sx_error(SX_E_ARG, "%s: depth %lld (want >= 1)", cg_who(n),
                        (long long)n->attr.ints[0]);
    int64_t s[SX_MAX_RANK];
    memcpy(s, IN(0)->shape, sizeof s);
    s[IN(0)->rank] = n->attr.ints[0];
    SX_TRY(sx_shape_check(cg_who(n), IN(0)->rank + 1, s));
    set_shape(n, IN(0)->rank + 1, s);
    return SX_OK;
}

sx_status cg_shape_gather(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    if (IN(0)->rank < 1)
        return sx_error(SX_E_RANK, "%s: cannot gather rows of a scalar", cg_who(n));
    SX_TRY(want_rank(n, 1, 1));
    int64_t s[SX_MAX_RANK];
    memcpy(s, IN(0)->shape, sizeof s);
    s[0] = IN(1)->shape[0];
    set_shape(n, IN(0)->rank, s);
    return SX_OK;
}

sx_status cg_shape_scatter_add(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    if (IN(0)->rank < 1)
        return sx_error(SX_E_RANK, "%s: cannot scatter rows of a scalar", cg_who(n));
    SX_TRY(want_rank(n, 1, 1));
    if (IN(1)->shape[0] != IN(0)->shape[0])
        return sx_error(SX_E_SHAPE, "%s: %lld indices for %lld rows", cg_who(n),
                        (long long)IN(1)->shape[0], (long long)IN(0)->shape[0]);
    if (n->attr.ints[0] < 0)
        return sx_error(SX_E_ARG, "%s: negative row count", cg_who(n));
    int64_t s[SX_MAX_RANK];
    memcpy(s, IN(0)->shape, sizeof s);
    s[0] = n->attr.ints[0];
    set_shape(n, IN(0)->rank, s);
    return SX_OK;
}

sx_status cg_shape_matmul(sx_cg_node *n)
{
    if (n->n_in != 2 && n->n_in != 3)
        return sx_error(SX_E_ARG, "%s: %d inputs (want 2, or 3 with an addend)", cg_who(n),
                        n->n_in);
    SX_TRY(same_dtypes(n));
    int r;
    int64_t s[SX_MAX_RANK];
    sx_tensor va = shape_view(IN(0)), vb = shape_view(IN(1));
    SX_TRY(sx_matmul_shape(cg_who(n), &va, &vb, n->attr.trans_a, n->attr.trans_b, &r, s));
    set_shape(n, r, s);
    if (n->n_in == 3) {
        /* the addend broadcasts to the product's shape */
        int rb;
        int64_t sb[SX_MAX_RANK];
        SX_TRY(sx_shape_broadcast(cg_who(n), r, s, IN(2)->rank, IN(2)->shape, &rb, sb));
        if (!sx_shape_equal(r, s, rb, sb)) {
            char s1[128], s2[128];
            return sx_error(SX_E_SHAPE, "%s: addend of shape %s does not fit the product %s",
                            cg_who(n), sx_shape_str(IN(2)->rank, IN(2)->shape, s1, sizeof s1),
                            sx_shape_str(r, s, s2, sizeof s2));
        }
    }
    return SX_OK;
}

sx_status cg_shape_dot(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    if (IN(0)->size != IN(1)->size)
        return sx_error(SX_E_SHAPE, "%s: %lld and %lld elements", cg_who(n), (long long)IN(0)->size,
                        (long long)IN(1)->size);
    set_shape(n, 0, NULL);
    return SX_OK;
}

sx_status cg_shape_conv2d(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    int64_t s[4];
    sx_tensor x = shape_view(IN(0)), k = shape_view(IN(1));
    SX_TRY(sx_conv2d_shape(cg_who(n), &x, &k, &n->attr.conv, s));
    set_shape(n, 4, s);
    n->ws_bytes = sx_conv2d_workspace(IN(0)->shape, IN(1)->shape, &n->attr.conv);
    return SX_OK;
}

/* conv2d_backward_input(k, dy) -> x's shape (attr); conv2d_backward_kernel(x, dy) -> k's shape
 * (attr). Checked by running the forward shape rule on the shapes the pair implies. */
sx_status cg_shape_conv2d_backward(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    SX_TRY(attr_shape(n));
    if (n->attr.rank != 4)
        return sx_error(SX_E_RANK, "%s: result rank %d (want 4)", cg_who(n), n->attr.rank);
    bool backward_input = n->op == SX_OP_CONV2D_BACKWARD_INPUT;
    sx_tensor attr = sx_tensor_view(OUT->dtype, 4, n->attr.shape, NULL);
    sx_tensor x = shape_view(backward_input ? &attr : IN(0));
    sx_tensor k = shape_view(backward_input ? IN(0) : &attr);
    int64_t y[4];
    SX_TRY(sx_conv2d_shape(cg_who(n), &x, &k, &n->attr.conv, y));
    if (!sx_shape_equal(4, y, IN(1)->rank, IN(1)->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: dy has shape %s, the convolution gives %s", cg_who(n),
                        sx_shape_str(IN(1)->rank, IN(1)->shape, a, sizeof a),
                        sx_shape_str(4, y, b, sizeof b));
    }
    n->ws_bytes = sx_conv2d_workspace(x.shape, k.shape, &n->attr.conv);
    return SX_OK;
}

/* Average pooling takes no dilation (its kernels' rule, SX_E_ARG): refused when the node is
 * made rather than when it runs. */
static sx_status avgpool_undilated(const sx_cg_node *n)
{
    const sx_pool2d_params *p = &n->attr.pool;
    if (p->dilation_h > 1 || p->dilation_w > 1)
        return sx_error(SX_E_ARG, "%s: dilation %dx%d (average pooling takes none)", cg_who(n),
                        p->dilation_h, p->dilation_w);
    return SX_OK;
}

sx_status cg_shape_pool2d(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    if (n->op == SX_OP_AVGPOOL2D)
        SX_TRY(avgpool_undilated(n));
    int64_t s[4];
    sx_tensor x = shape_view(IN(0));
    SX_TRY(sx_pool2d_shape(cg_who(n), &x, &n->attr.pool, s));
    set_shape(n, 4, s);
    return SX_OK;
}

static sx_status pool_backward_check(sx_cg_node *n, const sx_tensor *x, const sx_tensor *dy)
{
    int64_t s[4];
    sx_tensor xv = shape_view(x);
    SX_TRY(sx_pool2d_shape(cg_who(n), &xv, &n->attr.pool, s));
    if (!sx_shape_equal(4, s, dy->rank, dy->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: dy has shape %s, the pooling gives %s", cg_who(n),
                        sx_shape_str(dy->rank, dy->shape, a, sizeof a),
                        sx_shape_str(4, s, b, sizeof b));
    }
    return SX_OK;
}

sx_status cg_shape_maxpool2d_backward(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    SX_TRY(pool_backward_check(n, IN(0), IN(1)));
    set_shape(n, 4, IN(0)->shape);
    return SX_OK;
}

sx_status cg_shape_avgpool2d_backward(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    SX_TRY(avgpool_undilated(n));
    SX_TRY(attr_shape(n));
    if (n->attr.rank != 4)
        return sx_error(SX_E_RANK, "%s: result rank %d (want 4)", cg_who(n), n->attr.rank);
    sx_tensor x = sx_tensor_view(OUT->dtype, 4, n->attr.shape, NULL);
    return pool_backward_check(n, &x, IN(0));
}

sx_status cg_shape_softmax_xent(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    SX_TRY(want_rank(n, 0, 2));
    SX_TRY(want_same_shape(n, 0, 1));
    set_shape(n, 1, IN(0)->shape);
    return SX_OK;
}

sx_status cg_shape_attr(sx_cg_node *n)
{
    if (n->op == SX_OP_DROPOUT_MASK) {
        if (!(n->attr.alpha >= 0 && n->attr.alpha < 1))
            return sx_error(SX_E_ARG, "%s: drop probability %g (want 0 <= p < 1)", cg_who(n),
                            n->attr.alpha);
        if (n->attr.rng_id < 0 || n->attr.rng_id >= n->graph->n_rngs)
            return sx_error(SX_E_ARG, "%s: no generator %d in this graph", cg_who(n),
                            n->attr.rng_id);
    }
    return attr_shape(n);
}

static sx_status want_square(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    SX_TRY(want_rank(n, 0, 2));
    if (IN(0)->shape[0] != IN(0)->shape[1]) {
        char s[128];
        return sx_error(SX_E_SHAPE, "%s: matrix %s is not square", cg_who(n),
                        sx_shape_str(2, IN(0)->shape, s, sizeof s));
    }
    return SX_OK;
}

sx_status cg_shape_square(sx_cg_node *n)
{
    SX_TRY(want_square(n));
    set_shape(n, 2, IN(0)->shape);
    return SX_OK;
}

sx_status cg_shape_eigh_v(sx_cg_node *n)
{
    SX_TRY(cg_shape_square(n));
    n->ws_bytes = (size_t)IN(0)->shape[0] * sx_dtype_size(OUT->dtype); /* the eigenvalues */
    return SX_OK;
}

sx_status cg_shape_square_scalar(sx_cg_node *n)
{
    SX_TRY(want_square(n));
    set_shape(n, 0, NULL);
    return SX_OK;
}

sx_status cg_shape_solve(sx_cg_node *n)
{
    SX_TRY(want_square(n));
    if (IN(1)->rank < 1 || IN(1)->rank > 2 || IN(1)->shape[0] != IN(0)->shape[0]) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: cannot solve %s against %s", cg_who(n),
                        sx_shape_str(2, IN(0)->shape, a, sizeof a),
                        sx_shape_str(IN(1)->rank, IN(1)->shape, b, sizeof b));
    }
    set_shape(n, IN(1)->rank, IN(1)->shape);
    return SX_OK;
}

sx_status cg_shape_qr_q(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    SX_TRY(want_rank(n, 0, 2));
    int64_t m = IN(0)->shape[0], k = IN(0)->shape[0] < IN(0)->shape[1] ? m : IN(0)->shape[1];
    int64_t s[2] = {m, k};
    set_shape(n, 2, s);
    n->ws_bytes = (size_t)(k * IN(0)->shape[1]) * sx_dtype_size(OUT->dtype); /* R */
    return SX_OK;
}

sx_status cg_shape_qr_r(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    SX_TRY(want_rank(n, 0, 2));
    int64_t m = IN(0)->shape[0], c = IN(0)->shape[1];
    int64_t s[2] = {m < c ? m : c, c};
    set_shape(n, 2, s);
    n->ws_bytes = (size_t)(m * s[0]) * sx_dtype_size(OUT->dtype); /* Q */
    return SX_OK;
}

sx_status cg_shape_svd_s(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    SX_TRY(want_rank(n, 0, 2));
    int64_t m = IN(0)->shape[0], c = IN(0)->shape[1];
    int64_t s[1] = {m < c ? m : c};
    set_shape(n, 1, s);
    return SX_OK;
}

sx_status cg_shape_eigh_w(sx_cg_node *n)
{
    SX_TRY(want_square(n));
    set_shape(n, 1, IN(0)->shape);
    return SX_OK;
}

sx_status cg_shape_assign(sx_cg_node *n)
{
    if (n->in[0]->op != SX_OP_PARAM)
        return sx_error(SX_E_ARG, "%s: node %lld is a %s, not a parameter", cg_who(n),
                        (long long)n->in[0]->id, sx_cg_op_name(n->in[0]->op));
    SX_TRY(same_dtypes(n));
    SX_TRY(want_same_shape(n, 0, 1));
    set_shape(n, IN(0)->rank, IN(0)->shape);
    return SX_OK;
}

sx_status cg_shape_seq(sx_cg_node *n)
{
    OUT->dtype = IN(0)->dtype;
    set_shape(n, IN(0)->rank, IN(0)->shape);
    return SX_OK;
}

sx_status cg_shape_fused(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    SX_TRY(sx__fused_check(cg_who(n), &n->attr.prog, n->n_in)); /* what the kernel will run */
    SX_TRY(attr_shape(n));
    int64_t size = sx_shape_size(n->attr.rank, n->attr.shape);
    for (int i = 0; i < n->n_in; i++)
        if (IN(i)->size != size && !cg_trailing_bcast(IN(i), n->attr.rank, n->attr.shape)) {
            char a[128], b[128];
            return sx_error(SX_E_SHAPE,
                            "%s: input %d has shape %s, the result %s (want the same size, or "
                            "the result's trailing axes)",
                            cg_who(n), i, sx_shape_str(IN(i)->rank, IN(i)->shape, a, sizeof a),
                            sx_shape_str(n->attr.rank, n->attr.shape, b, sizeof b));
        }
    return SX_OK;
}

/* update(p, states..., g, lr): every tensor has p's shape, lr is a single element, and the
 * parameter and states are parameters (they are written in place). */
sx_status cg_shape_update(sx_cg_node *n)
{
    SX_TRY(same_dtypes(n));
    int last = n->n_in - 1, mutated = cg_mutated(n);
    for (int i = 0; i < mutated; i++)
        if (n->in[i]->op != SX_OP_PARAM)
            return sx_error(SX_E_ARG, "%s: input %d is a %s, not a parameter", cg_who(n), i,
                            sx_cg_op_name(n->in[i]->op));
    for (int i = 1; i < last; i++)
        SX_TRY(want_same_shape(n, 0, i));
    if (IN(last)->size != cg_update_rates(n->op))
        return sx_error(SX_E_SHAPE, "%s: the learning rate has %lld elements (want %lld)",
                        cg_who(n), (long long)IN(last)->size, (long long)cg_update_rates(n->op));
    set_shape(n, IN(0)->rank, IN(0)->shape);
    return SX_OK;
}

/* matmul_update(p, states..., a, b, lr): the update op in attr.ints[0] over p and its states,
 * with the gradient op(a) @ op(b) of p's (2-d) shape. */
sx_status cg_shape_matmul_update(sx_cg_node *n)
{
    int64_t u = n->attr.ints[0];
    if (u < 0 || u >= SX_OP_COUNT || !(sx_cg_ops[u].flags & SX_OPF_UPDATE))
        return sx_error(SX_E_ARG, "%s: attr.ints[0] = %lld is not an update op", cg_who(n),
                        (long long)u);
    int k = cg_mutated(n);
    if (n->n_in != k + 3)
        return sx_error(SX_E_ARG, "%s: %d inputs (want %d for %s)", cg_who(n), n->n_in, k + 3,
                        sx_cg_op_name((sx_cg_op)u));
    SX_TRY(same_dtypes(n));
    for (int i = 0; i < k; i++) {
        if (n->in[i]->op != SX_OP_PARAM)
            return sx_error(SX_E_ARG, "%s: input %d is a %s, not a parameter", cg_who(n), i,
                            sx_cg_op_name(n->in[i]->op));
        SX_TRY(want_same_shape(n, 0, i));
    }
    const sx_tensor *p = IN(0), *a = IN(k), *b = IN(k + 1);
    if (p->rank != 2 || a->rank != 2 || b->rank != 2)
        return sx_error(SX_E_RANK, "%s: the parameter and both factors must be matrices",
                        cg_who(n));
    int64_t m = n->attr.trans_a ? a->shape[1] : a->shape[0];
    int64_t ka = n->attr.trans_a ? a->shape[0] : a->shape[1];
    int64_t kb = n->attr.trans_b ? b->shape[1] : b->shape[0];
    int64_t nn = n->attr.trans_b ? b->shape[0] : b->shape[1];
    if (m != p->shape[0] || nn != p->shape[1] || ka != kb || ka < 1 || ka > INT_MAX ||
        m > INT_MAX || nn > INT_MAX)
        return sx_error(SX_E_SHAPE, "%s: the product does not have the parameter's shape",
                        cg_who(n));
    if (IN(k + 2)->size != cg_update_rates((sx_cg_op)u))
        return sx_error(SX_E_SHAPE, "%s: the learning rate has %lld elements (want %lld)",
                        cg_who(n), (long long)IN(k + 2)->size,
                        (long long)cg_update_rates((sx_cg_op)u));
    set_shape(n, p->rank, p->shape);
    n->ws_bytes = (size_t)CG_MMU_SLOTS * (size_t)cg_mmu_rows(m, nn, sx_dtype_size(p->dtype)) *
                  (size_t)nn * sx_dtype_size(p->dtype);
    return SX_OK;
}
