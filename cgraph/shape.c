/* shape.c: the shape rules' shared machinery. A shape rule (one per row of sx_ops.def, in the
 * op's family file under ops/) computes a node's dtype and shape (and the scratch its kernel
 * wants) from its inputs and attributes when the node is made, so a mismatch is reported at the
 * call that caused it, naming the op and the shapes. Most rules reuse the tensor layer's own
 * shape functions, so graph and kernels can never disagree. Here: the checks rules share, and
 * the generic rules of leaves, same-shape and broadcasting ops. */
#include "cgraph_impl.h"

#include <string.h>

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

void cg_set_shape(sx_cg_node *n, int rank, const int64_t *shape)
{
    n->value.rank = rank;
    for (int i = 0; i < rank; i++)
        n->value.shape[i] = shape[i];
}

/* Every input has the dtype of input 0, which becomes the node's. */
sx_status cg_same_dtypes(sx_cg_node *n)
{
    for (int i = 1; i < n->n_in; i++)
        if (IN_VALUE(i)->dtype != IN_VALUE(0)->dtype)
            return sx_error(SX_E_DTYPE, "%s: input %d is %s, input 0 is %s", cg_who(n), i,
                            sx_dtype_name(IN_VALUE(i)->dtype), sx_dtype_name(IN_VALUE(0)->dtype));
    if (n->n_in > 0)
        OUT->dtype = IN_VALUE(0)->dtype;
    return SX_OK;
}

sx_status cg_want_rank(sx_cg_node *n, int i, int rank)
{
    if (IN_VALUE(i)->rank != rank) {
        char s[128];
        return sx_error(SX_E_RANK, "%s: input %d has shape %s, want rank %d", cg_who(n), i,
                        sx_shape_str(IN_VALUE(i)->rank, IN_VALUE(i)->shape, s, sizeof s), rank);
    }
    return SX_OK;
}

sx_status cg_want_same_shape(sx_cg_node *n, int i, int j)
{
    if (!sx_shape_equal(IN_VALUE(i)->rank, IN_VALUE(i)->shape, IN_VALUE(j)->rank,
                        IN_VALUE(j)->shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: shapes %s and %s differ", cg_who(n),
                        sx_shape_str(IN_VALUE(i)->rank, IN_VALUE(i)->shape, a, sizeof a),
                        sx_shape_str(IN_VALUE(j)->rank, IN_VALUE(j)->shape, b, sizeof b));
    }
    return SX_OK;
}

/* The tensor layer's shape functions check their arguments as kernels do, including that a
 * non-empty tensor has data; in a lazy graph an input not yet computed has none. They get a
 * descriptor of the same dtype and shape over a dummy address, which they never read. */
sx_tensor cg_probe_view(const sx_tensor *t)
{
    static char dummy[sizeof(double)];
    sx_tensor v = *t;
    if (v.data == NULL)
        v.data = dummy;
    return v;
}

/* Attribute shape (reshape, broadcast, unslice, backward ops, dropout masks). */
sx_status cg_attr_shape(sx_cg_node *n)
{
    SX_TRY(sx_shape_check(cg_who(n), n->attr.rank, n->attr.shape));
    cg_set_shape(n, n->attr.rank, n->attr.shape);
    return SX_OK;
}

sx_status cg_shape_leaf(sx_cg_node *n)
{
    (void)n; /* leaves get their shape from the constructor */
    return SX_OK;
}

sx_status cg_shape_same(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    for (int i = 1; i < n->n_in; i++)
        SX_TRY(cg_want_same_shape(n, 0, i));
    cg_set_shape(n, IN_VALUE(0)->rank, IN_VALUE(0)->shape);
    return SX_OK;
}

sx_status cg_shape_broadcast(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    int r = IN_VALUE(0)->rank;
    int64_t s[SX_MAX_RANK];
    memcpy(s, IN_VALUE(0)->shape, sizeof s);
    for (int i = 1; i < n->n_in; i++)
        SX_TRY(sx_shape_broadcast(cg_who(n), r, s, IN_VALUE(i)->rank, IN_VALUE(i)->shape, &r, s));
    cg_set_shape(n, r, s);
    return SX_OK;
}
