/* grad.c: reverse mode as a graph transformation. Node ids are a topological order, so one
 * backward sweep over ids from the output down to the earliest requested node visits every node
 * after all its readers: each on-path node's adjoint is complete when its rule runs. Only nodes
 * that depend on a requested node and that the output depends on are visited. */
#include "autodiff_impl.h"

#include <string.h>

bool sx_ad_differentiable(sx_cg_op op, int input)
{
    if ((unsigned)op >= SX_OP_COUNT || input < 0)
        return false;
    return !((sx__cg_grad_nograd(op) >> (input < 31 ? input : 31)) & 1u);
}

/* A rule must give input k a gradient of input k's shape (sx_ad_grad promises grads[i] the shape
 * of xs[i], and an adjoint of the wrong shape would broadcast silently when accumulated). */
static sx_status check_rule(const char *who, sx_cg_node *v, int k, const sx_cg_node *gk)
{
    const sx_cg_node *x = sx_cg_node_input(v, k);
    if (sx_shape_equal(sx_cg_node_rank(gk), sx_cg_node_shape(gk), sx_cg_node_rank(x),
                       sx_cg_node_shape(x)))
        return SX_OK;
    char a[128], b[128];
    return sx_error(SX_E_STATE,
                    "%s: the gradient rule of %s gave input %d a gradient of shape %s, not its "
                    "shape %s (a bug in strix)",
                    who, sx_cg_op_name(sx_cg_node_op(v)), k,
                    sx_shape_str(sx_cg_node_rank(gk), sx_cg_node_shape(gk), a, sizeof a),
                    sx_shape_str(sx_cg_node_rank(x), sx_cg_node_shape(x), b, sizeof b));
}

static sx_status check_args(const char *who, sx_cg_graph *g, sx_cg_node *y, int n,
                            sx_cg_node *const *xs, sx_cg_node **grads)
{
    if (g == NULL || y == NULL || grads == NULL || n < 0 || (n > 0 && xs == NULL))
        return sx_error(SX_E_ARG, "%s: NULL or bad argument", who);
    for (int i = 0; i < n; i++)
        grads[i] = NULL;
    if (sx_cg_graph_node(g, sx_cg_node_id(y)) != y)
        return sx_error(SX_E_ARG, "%s: y is not a live node of this graph", who);
    for (int i = 0; i < n; i++)
        if (xs[i] == NULL || sx_cg_graph_node(g, sx_cg_node_id(xs[i])) != xs[i])
            return sx_error(SX_E_ARG, "%s: xs[%d] is not a live node of this graph", who, i);
    return SX_OK;
}

static sx_cg_node *accumulate(sx_cg_graph *g, sx_cg_node *acc, sx_cg_node *term)
{
    return acc == NULL ? term : sx_cg_add(g, acc, term);
}

/* The seed of sx_ad_vjp: a live node of g with y's shape and dtype. */
static sx_status check_seed(const char *who, sx_cg_graph *g, sx_cg_node *y, sx_cg_node *seed)
{
    if (seed == NULL || sx_cg_graph_node(g, sx_cg_node_id(seed)) != seed)
        return sx_error(SX_E_ARG, "%s: seed is not a live node of this graph", who);
    if (!sx_shape_equal(sx_cg_node_rank(seed), sx_cg_node_shape(seed), sx_cg_node_rank(y),
                        sx_cg_node_shape(y))) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: seed has shape %s, y has shape %s", who,
                        sx_shape_str(sx_cg_node_rank(seed), sx_cg_node_shape(seed), a, sizeof a),
                        sx_shape_str(sx_cg_node_rank(y), sx_cg_node_shape(y), b, sizeof b));
    }
    if (sx_cg_node_dtype(seed) != sx_cg_node_dtype(y))
        return sx_error(SX_E_DTYPE, "%s: seed and y have different dtypes", who);
    return SX_OK;
}

/* One step of the backward sweep: the adjoint of node v (adj[id of v], not NULL) goes through
 * v's gradient rule to the inputs that depend on a requested node (dep), added to their
 * adjoints. */
static sx_status backprop_node(const char *who, sx_cg_graph *g, sx_cg_node *v, const bool *dep,
                               sx_cg_node **adj)
{
    int m = sx_cg_node_n_inputs(v);
    if (m == 0)
        return SX_OK;
    sx_status s = SX_OK;
    bool need_buf[8], *need = need_buf;
    sx_cg_node *gin_buf[8], **gin = gin_buf;
    if (m > 8) {
        need = sx_calloc((size_t)m, sizeof *need);
        gin = sx_calloc((size_t)m, sizeof *gin);
        if (need == NULL || gin == NULL) {
            s = SX_E_NOMEM;
            goto done;
        }
    }
    bool any = false;
    for (int k = 0; k < m; k++) {
        need[k] = dep[sx_cg_node_id(sx_cg_node_input(v, k))];
        any |= need[k];
        gin[k] = NULL;
    }
    if (!any)
        goto done;
    /* gradient nodes belong to the scope (layer) of the node they differentiate; scopes
     * already in the graph are set without allocating */
    s = sx_cg_scope_set(g, sx_cg_node_scope(v));
    if (s == SX_OK)
        s = sx__cg_grad_rule(sx_cg_node_op(v))(g, v, adj[sx_cg_node_id(v)], need, gin);
    for (int k = 0; k < m && s == SX_OK; k++) {
        if (!need[k] || gin[k] == NULL)
            continue;
        if ((s = check_rule(who, v, k, gin[k])) != SX_OK)
            break;
        int64_t in = sx_cg_node_id(sx_cg_node_input(v, k));
        adj[in] = accumulate(g, adj[in], gin[k]);
        if (adj[in] == NULL)
            s = sx__cg_grad_status(g);
    }
done:
    if (need != need_buf) {
        sx_free(need);
        sx_free(gin);
    }
    return s;
}

sx_status sx_ad_vjp(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *seed, int n, sx_cg_node *const *xs,
                    sx_cg_node **grads)
{
    const char *who = "sx_ad_vjp";
    SX_TRY(check_args(who, g, y, n, xs, grads));
    SX_TRY(check_seed(who, g, y, seed));

    int64_t top = sx_cg_node_id(y), low = top + 1;
    for (int i = 0; i < n; i++)
        if (sx_cg_node_id(xs[i]) < low)
            low = sx_cg_node_id(xs[i]);
    int64_t span = top + 1;
    bool *dep = sx_calloc((size_t)span, sizeof *dep);
    sx_cg_node **adj = sx_calloc((size_t)span, sizeof *adj);
    if (dep == NULL || adj == NULL) {
        sx_free(dep);
        sx_free(adj);
        return SX_E_NOMEM;
    }
    /* forward: which nodes depend on a requested node */
    for (int i = 0; i < n; i++)
        if (sx_cg_node_id(xs[i]) <= top)
            dep[sx_cg_node_id(xs[i])] = true;
    for (int64_t id = low; id <= top; id++) {
        sx_cg_node *v = sx_cg_graph_node(g, id);
        if (v == NULL || dep[id])
            continue;
        for (int k = 0; k < sx_cg_node_n_inputs(v) && !dep[id]; k++)
            dep[id] = dep[sx_cg_node_id(sx_cg_node_input(v, k))];
    }
    /* backward: adjoints from y down */
    const char *scope = sx_cg_scope_get(g); /* the caller's, restored below */
    sx_status s = SX_OK;
    if (dep[top])
        adj[top] = seed;
    for (int64_t id = top; id >= low && s == SX_OK; id--) {
        sx_cg_node *v = sx_cg_graph_node(g, id);
        if (v != NULL && adj[id] != NULL && dep[id])
            s = backprop_node(who, g, v, dep, adj);
    }
    if (sx_cg_scope_set(g, scope) != SX_OK && s == SX_OK) /* known name: cannot fail */
        s = SX_E_NOMEM;
    for (int i = 0; i < n && s == SX_OK; i++) {
        int64_t id = sx_cg_node_id(xs[i]);
        grads[i] = id <= top ? adj[id] : NULL;
        if (grads[i] == NULL) /* the output does not depend on xs[i] */
            grads[i] =
                sx__cg_grad_full(g, xs[i], sx_cg_node_rank(xs[i]), sx_cg_node_shape(xs[i]), 0);
        if (grads[i] == NULL)
            s = sx__cg_grad_status(g);
    }
    if (s != SX_OK)
        for (int i = 0; i < n; i++)
            grads[i] = NULL;
    sx_free(dep);
    sx_free(adj);
    return s;
}

sx_status sx_ad_grad(sx_cg_graph *g, sx_cg_node *y, int n, sx_cg_node *const *xs,
                     sx_cg_node **grads)
{
    SX_TRY(check_args("sx_ad_grad", g, y, n, xs, grads));
    if (sx_cg_node_size(y) != 1) {
        char s[128];
        return sx_error(SX_E_SHAPE,
                        "sx_ad_grad: y has shape %s; differentiate a scalar, or use sx_ad_vjp",
                        sx_shape_str(sx_cg_node_rank(y), sx_cg_node_shape(y), s, sizeof s));
    }
    sx_cg_node *one = sx__cg_grad_full(g, y, sx_cg_node_rank(y), sx_cg_node_shape(y), 1.0);
    if (one == NULL)
        return sx__cg_grad_status(g);
    return sx_ad_vjp(g, y, one, n, xs, grads);
}

/* Join rows along axis 0 in groups (concat evaluates at most SX_CG_MAX_INPUTS inputs). */
static sx_cg_node *concat_rows(sx_cg_graph *g, sx_cg_node **rows, int64_t m)
{
    while (m > 1) {
        int64_t out = 0;
        for (int64_t i = 0; i < m; i += SX_CG_MAX_INPUTS) {
            int k = (int)(m - i < SX_CG_MAX_INPUTS ? m - i : SX_CG_MAX_INPUTS);
            rows[out++] = k == 1 ? rows[i] : sx_cg_concat(g, k, rows + i, 0);
            if (rows[out - 1] == NULL)
                return NULL;
        }
        m = out;
    }
    return rows[0];
}

sx_status sx_ad_jacobian(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *x, sx_cg_node **jac)
{
    sx_cg_node *xs[1] = {x};
    SX_TRY(check_args("sx_ad_jacobian", g, y, 1, xs, jac));
    *jac = NULL;
    int64_t m = sx_cg_node_size(y), k = sx_cg_node_size(x);
    if (m < 1 || k < 1)
        return sx_error(SX_E_SHAPE, "sx_ad_jacobian: empty y or x");
    sx_cg_node **rows = sx_calloc((size_t)m, sizeof *rows);
    sx_tensor *e = NULL;
    if (rows == NULL)
        return SX_E_NOMEM;
    sx_status s = sx_tensor_zeros(sx_cg_node_dtype(y), sx_cg_node_rank(y), sx_cg_node_shape(y), &e);
    int64_t row_shape[2] = {1, k};
    for (int64_t i = 0; i < m && s == SX_OK; i++) {
        sx_tensor_set(e, i, 1.0);
        sx_cg_node *seed = sx_cg_const(g, e);
        sx_tensor_set(e, i, 0.0);
        sx_cg_node *gi = NULL;
        s = seed ? sx_ad_vjp(g, y, seed, 1, xs, &gi) : sx__cg_grad_status(g);
        if (s == SX_OK) {
            rows[i] = sx_cg_reshape(g, gi, 2, row_shape);
            if (rows[i] == NULL)
                s = sx__cg_grad_status(g);
        }
    }
    if (s == SX_OK) {
        *jac = concat_rows(g, rows, m);
        if (*jac == NULL)
            s = sx__cg_grad_status(g);
    }
    sx_tensor_free(e);
    sx_free(rows);
    return s;
}

sx_status sx_ad_hvp(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *x, sx_cg_node *v, sx_cg_node **hv)
{
    sx_cg_node *xs[1] = {x}, *gx = NULL;
    SX_TRY(check_args("sx_ad_hvp", g, y, 1, xs, hv));
    if (v == NULL || !sx_shape_equal(sx_cg_node_rank(v), sx_cg_node_shape(v), sx_cg_node_rank(x),
                                     sx_cg_node_shape(x)))
        return sx_error(SX_E_SHAPE, "sx_ad_hvp: v must have x's shape");
    SX_TRY(sx_ad_grad(g, y, 1, xs, &gx));
    sx_cg_node *inner = sx_cg_sum(g, sx_cg_mul(g, gx, v), SX_AXES_ALL, false);
    if (inner == NULL)
        return sx__cg_grad_status(g);
    return sx_ad_grad(g, inner, 1, xs, hv);
}

sx_status sx_ad_hessian(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *x, sx_cg_node **hess)
{
    sx_cg_node *xs[1] = {x}, *gx = NULL;
    SX_TRY(check_args("sx_ad_hessian", g, y, 1, xs, hess));
    SX_TRY(sx_ad_grad(g, y, 1, xs, &gx));
    return sx_ad_jacobian(g, gx, x, hess);
}
