/* build.c: what the named node constructors share. Each constructor (in its op's family file
 * under ops/, declared in sx_cgraph.h) fills the attributes of its op and calls the generic
 * sx_cg_op_new (run.c), which checks shapes, hashes and links; the helpers here check the
 * caller's arguments and copy them into attributes. */
#include "cgraph_impl.h"

#include <string.h>

sx_cg_node *cg_op1(sx_cg_graph *g, sx_cg_op op, sx_cg_node *x, const sx_cg_attr *a)
{
    return sx_cg_op_new(g, op, 1, &x, a);
}

sx_cg_node *cg_op2(sx_cg_graph *g, sx_cg_op op, sx_cg_node *x, sx_cg_node *y, const sx_cg_attr *a)
{
    sx_cg_node *in[2] = {x, y};
    return sx_cg_op_new(g, op, 2, in, a);
}

sx_cg_node *cg_op3(sx_cg_graph *g, sx_cg_op op, sx_cg_node *x, sx_cg_node *y, sx_cg_node *z,
                   const sx_cg_attr *a)
{
    sx_cg_node *in[3] = {x, y, z};
    return sx_cg_op_new(g, op, 3, in, a);
}

/* Copy up to the input's rank of a caller array into attr.ints (the input fixes the count). */
void cg_copy_ints(int64_t *dst, const int64_t *src, const sx_cg_node *x)
{
    if (x != NULL && src != NULL)
        memcpy(dst, src, (size_t)x->value.rank * sizeof *dst);
}

bool cg_arg_ok(sx_cg_graph *g, const void *p, const char *who)
{
    if (p == NULL && g != NULL) {
        cg_fail(g, sx_error(SX_E_ARG, "%s: NULL argument", who));
        return false;
    }
    return true;
}

bool cg_set_target_shape(sx_cg_graph *g, sx_cg_attr *a, int rank, const int64_t *shape,
                         const char *who)
{
    if (rank < 0 || rank > SX_MAX_RANK || (rank > 0 && shape == NULL)) {
        if (g != NULL)
            cg_fail(g, sx_error(SX_E_RANK, "%s: bad target rank %d", who, rank));
        return false;
    }
    a->rank = rank;
    if (rank > 0)
        memcpy(a->shape, shape, (size_t)rank * sizeof *shape);
    return true;
}

/* A negative axis counted from the end, resolved here so that structural hashing sees one form
 * of the attributes (the shape rule checks the range). */
int cg_norm_axis(const sx_cg_node *x, int axis)
{
    return x != NULL && axis < 0 && axis >= -x->value.rank ? axis + x->value.rank : axis;
}
