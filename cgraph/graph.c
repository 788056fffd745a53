/* graph.c: graphs and nodes: the op table, construction with shape inference and structural
 * hashing, leaves, accessors, statistics and invalidation. A node is linked into the graph only
 * after every check and allocation has succeeded, so a failed constructor leaves the graph
 * unchanged. The bottom of cgraph: it calls no other cgraph file (evaluation during eager
 * construction is run.c's sx_cg_op_new, which calls cg_op_make and cg_op_link here). */
#include "cgraph_impl.h"

#include <stdlib.h>
#include <string.h>

const cg_op_info sx_cg_ops[SX_OP_COUNT] = {
#define X(NAME, name, arity, shape, eval, flags, kernel, nograd)                                   \
    [SX_OP_##NAME] = {#name, arity, cg_##shape, cg_##eval, flags, kernel},
#include "sx_ops.def"
#undef X
};

static const char *const op_who[SX_OP_COUNT] = {
#define X(NAME, name, arity, shape, eval, flags, kernel, nograd) [SX_OP_##NAME] = "sx_cg_" #name,
#include "sx_ops.def"
#undef X
};

const char *sx_cg_op_name(sx_cg_op op)
{
    return (unsigned)op < SX_OP_COUNT ? sx_cg_ops[op].name : "bad-op";
}

int sx_cg_op_arity(sx_cg_op op)
{
    return (unsigned)op < SX_OP_COUNT ? sx_cg_ops[op].arity : 0;
}

unsigned sx_cg_op_flags(sx_cg_op op)
{
    return (unsigned)op < SX_OP_COUNT ? sx_cg_ops[op].flags : 0;
}

const char *cg_who(const sx_cg_node *n)
{
    return op_who[n->op];
}

sx_cg_attr sx_cg_attr_default(void)
{
    sx_cg_attr a;
    memset(&a, 0, sizeof a); /* padding too: attributes are hashed and compared bytewise */
    return a;
}

/* ---------------------------------------------------------------- graphs */

sx_status sx_cg_graph_new(sx_cg_mode mode, sx_dtype dtype, sx_cg_graph **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "sx_cg_graph_new: out is NULL");
    *out = NULL;
    if (mode != SX_CG_LAZY && mode != SX_CG_EAGER)
        return sx_error(SX_E_ARG, "sx_cg_graph_new: unknown mode %d", (int)mode);
    if (dtype != SX_F32 && dtype != SX_F64)
        return sx_error(SX_E_DTYPE, "sx_cg_graph_new: unknown dtype %d", (int)dtype);
    sx_cg_graph *g = sx_calloc(1, sizeof *g);
    if (g == NULL)
        return SX_E_NOMEM;
    g->mode = mode;
    g->dtype = dtype;
    *out = g;
    return SX_OK;
}

static void node_free(sx_cg_node *n)
{
    if (n->in != n->inline_in)
        sx_free(n->in);
    sx_free(n->own);
    sx_free(n->name);
    sx_free(n->users);
    sx_free(n);
}

void sx_cg_graph_free(sx_cg_graph *g)
{
    if (g == NULL)
        return;
    for (int64_t i = 0; i < g->n_nodes; i++)
        node_free(g->nodes[i]);
    sx_free(g->nodes);
    sx_free(g->htab);
    sx_free(g->rngs);
    for (int i = 0; i < g->n_scopes; i++)
        sx_free(g->scopes[i]);
    sx_free(g->scopes);
    sx_free(g->ws);
    sx_free(g->arena_raw);
    sx_free(g->order);
    sx_free(g->outputs);
    sx_free(g->memo);
    sx_free(g->stack);
    sx_free(g);
}

sx_cg_mode sx_cg_graph_mode(const sx_cg_graph *g)
{
    return g->mode;
}

sx_dtype sx_cg_graph_dtype(const sx_cg_graph *g)
{
    return g->dtype;
}

sx_status sx_cg_graph_status(const sx_cg_graph *g)
{
    if (g == NULL)
        return sx_error(SX_E_ARG, "sx_cg_graph_status: graph is NULL");
    return g->status;
}

void sx_cg_graph_status_clear(sx_cg_graph *g)
{
    if (g != NULL)
        g->status = SX_OK;
}

sx_status sx_cg_graph_fail(sx_cg_graph *g, sx_status s)
{
    return g == NULL || s == SX_OK ? s : cg_fail(g, s);
}

sx_status cg_fail(sx_cg_graph *g, sx_status s)
{
    if (g != NULL && g->status == SX_OK)
        g->status = s;
    return s;
}

int64_t sx_cg_graph_size(const sx_cg_graph *g)
{
    return g->n_nodes;
}

sx_cg_node *sx_cg_graph_node(const sx_cg_graph *g, int64_t i)
{
    if (i < 0 || i >= g->n_nodes || g->nodes[i]->dead)
        return NULL;
    return g->nodes[i];
}

sx_cg_stats sx_cg_graph_stats(const sx_cg_graph *g)
{
    sx_cg_stats s = {0, 0, 0, g->kernel_calls};
    for (int64_t i = 0; i < g->n_nodes; i++) {
        const sx_cg_node *n = g->nodes[i];
        if (n->dead)
            continue;
        s.nodes++;
        s.edges += n->n_in;
        if (n->own != NULL)
            s.bytes += (int64_t)((size_t)n->value.size * sx_dtype_size(n->value.dtype));
    }
    s.bytes += (int64_t)g->ws_bytes + (int64_t)(g->arena_raw != NULL ? g->arena_bytes : 0);
    return s;
}

/* ---------------------------------------------------------------- structural hashing */

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdULL;
}

/* The attribute struct is large (over 800 bytes) and mostly zero: only its non-zero words, with
 * their positions, enter the hash, so hashing costs a scan rather than a chain of ~100 multiplies
 * (the optimiser rehashes every node after each pass). */
static uint64_t node_hash(sx_cg_op op, int n_in, sx_cg_node *const *in, const sx_cg_attr *attr)
{
    uint64_t h = mix(0x12345, (uint64_t)op);
    for (int i = 0; i < n_in; i++)
        h = mix(h, (uint64_t)in[i]->id);
    const unsigned char *p = (const unsigned char *)attr;
    enum { WORDS = sizeof *attr / 8, BLOCK = 8 };
    uint64_t w[BLOCK];
    size_t i = 0;
    for (; i + BLOCK <= WORDS; i += BLOCK) { /* skip all-zero blocks of 64 bytes at once */
        memcpy(w, p + 8 * i, sizeof w);
        uint64_t any = 0;
        for (int k = 0; k < BLOCK; k++)
            any |= w[k];
        for (int k = 0; any != 0 && k < BLOCK; k++)
            if (w[k] != 0)
                h = mix(h ^ (uint64_t)(8 * (i + (size_t)k)) << 48, w[k]);
    }
    for (i *= 8; i < sizeof *attr; i += 8) {
        uint64_t v = 0;
        memcpy(&v, p + i, sizeof *attr - i < 8 ? sizeof *attr - i : 8);
        if (v != 0)
            h = mix(h ^ (uint64_t)i << 48, v);
    }
    return h;
}

static bool hashable(sx_cg_op op)
{
    return !(sx_cg_ops[op].flags & (SX_OPF_LEAF | SX_OPF_RANDOM | SX_OPF_MUTATES));
}

/* The live node with hash h, op, inputs and attributes, or NULL. `self` (may be NULL) is a node
 * known to have exactly these: found, it is returned without comparing its attributes. */
static sx_cg_node *hash_find(sx_cg_graph *g, uint64_t h, sx_cg_op op, int n_in,
                             sx_cg_node *const *in, const sx_cg_attr *attr, const sx_cg_node *self)
{
    if (g->hcap == 0)
        return NULL;
    for (int64_t i = (int64_t)(h & (uint64_t)(g->hcap - 1));; i = (i + 1) & (g->hcap - 1)) {
        int64_t id = g->htab[2 * i];
        if (id == 0)
            return NULL;
        if ((uint64_t)g->htab[2 * i + 1] != h) /* the table holds the hash: no node visited */
            continue;
        sx_cg_node *n = g->nodes[id - 1];
        if (n == self && n->hash == h && !n->dead)
            return n;
        if (n->hash == h && n->op == op && n->n_in == n_in && !n->dead &&
            memcmp(&n->attr, attr, sizeof *attr) == 0) {
            bool same = true;
            for (int k = 0; k < n_in && same; k++)
                same = n->in[k] == in[k];
            if (same)
                return n;
        }
    }
}

/* Make room for one more entry (load <= 1/2); on failure the table is unchanged. */
static sx_status hash_reserve(sx_cg_graph *g)
{
    if ((g->hcount + 1) * 2 <= g->hcap)
        return SX_OK;
    int64_t cap = g->hcap ? g->hcap * 2 : 64;
    int64_t *t = sx_calloc((size_t)cap * 2, sizeof *t);
    if (t == NULL)
        return SX_E_NOMEM;
    for (int64_t i = 0; i < g->hcap; i++) {
        int64_t id = g->htab[2 * i];
        if (id == 0)
            continue;
        int64_t j = (int64_t)((uint64_t)g->htab[2 * i + 1] & (uint64_t)(cap - 1));
        while (t[2 * j] != 0)
            j = (j + 1) & (cap - 1);
        t[2 * j] = id;
        t[2 * j + 1] = g->htab[2 * i + 1];
    }
    sx_free(g->htab);
    g->htab = t;
    g->hcap = cap;
    return SX_OK;
}

static void hash_insert(sx_cg_graph *g, sx_cg_node *n)
{
    int64_t j = (int64_t)(n->hash & (uint64_t)(g->hcap - 1));
    while (g->htab[2 * j] != 0)
        j = (j + 1) & (g->hcap - 1);
    g->htab[2 * j] = n->id + 1;
    g->htab[2 * j + 1] = (int64_t)n->hash;
    g->hcount++;
}

/* ---------------------------------------------------------------- construction */

sx_status cg_reserve_users(sx_cg_node *n, int extra)
{
    if (n->n_users + extra <= n->cap_users)
        return SX_OK;
    int cap = n->cap_users ? n->cap_users * 2 : 4;
    while (cap < n->n_users + extra)
        cap *= 2;
    sx_cg_node **u = sx_realloc(n->users, (size_t)cap * sizeof *u);
    if (u == NULL)
        return SX_E_NOMEM;
    n->users = u;
    n->cap_users = cap;
    return SX_OK;
}

/* Allocate a node for op with inputs and attributes, run its shape rule; not yet linked. */
static sx_status node_make(sx_cg_graph *g, sx_cg_op op, int n_in, sx_cg_node *const *in,
                           const sx_cg_attr *attr, sx_cg_node **out)
{
    *out = NULL;
    sx_cg_node *n = sx_calloc(1, sizeof *n);
    if (n == NULL)
        return SX_E_NOMEM;
    n->graph = g;
    n->op = op;
    n->n_in = n_in;
    n->in = n->inline_in;
    if (n_in > SX_CG_INLINE_INPUTS) {
        n->in = sx_alloc((size_t)n_in * sizeof *n->in);
        if (n->in == NULL) {
            sx_free(n);
            return SX_E_NOMEM;
        }
    }
    for (int i = 0; i < n_in; i++)
        n->in[i] = in[i];
    n->attr = attr ? *attr : sx_cg_attr_default();
    n->value.dtype = g->dtype;
    sx_status s = sx_cg_ops[op].shape(n);
    if (s != SX_OK) {
        node_free(n);
        return s;
    }
    for (int i = n->value.rank; i < SX_MAX_RANK; i++)
        n->value.shape[i] = 1;
    n->value.size = sx_shape_size(n->value.rank, n->value.shape);
    *out = n;
    return SX_OK;
}

/* Link a made node into the graph: every allocation first, then the changes. */
static sx_status node_link(sx_cg_graph *g, sx_cg_node *n, bool hash)
{
    if (g->n_nodes == g->cap_nodes) {
        int64_t cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
        sx_cg_node **a = sx_realloc(g->nodes, (size_t)cap * sizeof *a);
        if (a == NULL)
            return SX_E_NOMEM;
        g->nodes = a;
        g->cap_nodes = cap;
    }
    for (int i = 0; i < n->n_in; i++)
        SX_TRY(cg_reserve_users(n->in[i], n->n_in)); /* an input may appear twice */
    if (hash)
        SX_TRY(hash_reserve(g));
    SX_TRY(cg_reserve_stack(g, g->n_nodes + 1)); /* invalidation must never allocate */
    n->id = g->n_nodes;
    n->scope = g->cur_scope;
    g->nodes[g->n_nodes++] = n;
    for (int i = 0; i < n->n_in; i++)
        n->in[i]->users[n->in[i]->n_users++] = n;
    if (hash)
        hash_insert(g, n);
    return SX_OK;
}

static bool check_inputs(sx_cg_graph *g, sx_cg_op op, int n_in, sx_cg_node *const *in)
{
    if (g == NULL)
        return false;
    for (int i = 0; i < n_in; i++)
        if (in[i] == NULL) {
            cg_fail(g, g->status != SX_OK ? g->status : SX_E_ARG);
            return false;
        }
    const char *who = op_who[op];
    if (g->frozen) {
        cg_fail(g, sx_error(SX_E_STATE, "%s: the graph is frozen", who));
        return false;
    }
    int arity = sx_cg_ops[op].arity;
    if ((arity >= 0 && n_in != arity) || (arity < 0 && n_in < 1)) {
        cg_fail(g, sx_error(SX_E_ARG, "%s: %d inputs (want %d)", who, n_in, arity));
        return false;
    }
    if (n_in > SX_CG_MAX_INPUTS) {
        cg_fail(g, sx_error(SX_E_ARG, "%s: %d inputs (at most SX_CG_MAX_INPUTS = %d)", who, n_in,
                            SX_CG_MAX_INPUTS));
        return false;
    }
    for (int i = 0; i < n_in; i++)
        if (in[i]->graph != g || in[i]->dead) {
            cg_fail(g, sx_error(SX_E_ARG, "%s: input %d belongs to another graph or was removed",
                                who, i));
            return false;
        }
    return true;
}

sx_cg_node *cg_op_make(sx_cg_graph *g, sx_cg_op op, int n_in, sx_cg_node *const *in,
                       const sx_cg_attr *attr, bool *fresh)
{
    *fresh = false;
    if (g == NULL)
        return NULL;
    if ((unsigned)op >= SX_OP_COUNT || (sx_cg_ops[op].flags & SX_OPF_LEAF)) {
        cg_fail(g, sx_error(SX_E_ARG, "sx_cg_op_new: op %d is not an operation", (int)op));
        return NULL;
    }
    if (n_in < 0 || (n_in > 0 && in == NULL)) {
        cg_fail(g, sx_error(SX_E_ARG, "sx_cg_op_new: bad inputs"));
        return NULL;
    }
    if (!check_inputs(g, op, n_in, in))
        return NULL;
    sx_cg_attr a = attr ? *attr : sx_cg_attr_default();
    /* the shape rule runs first: it normalises attributes (negative axes), so hashing sees
     * one form of each node */
    sx_cg_node *n = NULL;
    sx_status s = node_make(g, op, n_in, in, &a, &n);
    if (s != SX_OK) {
        cg_fail(g, s);
        return NULL;
    }
    if (hashable(op)) {
        n->hash = node_hash(op, n_in, in, &n->attr);
        sx_cg_node *same = hash_find(g, n->hash, op, n_in, in, &n->attr, NULL);
        if (same != NULL) {
            node_free(n);
            return same;
        }
    }
    *fresh = true;
    return n;
}

sx_status cg_op_link(sx_cg_graph *g, sx_cg_node *n)
{
    return node_link(g, n, hashable(n->op));
}

void cg_node_discard(sx_cg_node *n)
{
    node_free(n);
}

/* ---------------------------------------------------------------- leaves */

static sx_cg_node *leaf_new(sx_cg_graph *g, sx_cg_op op, const char *who, const char *name,
                            sx_dtype dtype, int rank, const int64_t *shape, const void *data,
                            void *borrow)
{
    if (g == NULL)
        return NULL;
    if (g->frozen) {
        cg_fail(g, sx_error(SX_E_STATE, "%s: the graph is frozen", who));
        return NULL;
    }
    if (dtype != SX_F32 && dtype != SX_F64) {
        cg_fail(g, sx_error(SX_E_DTYPE, "%s: unknown dtype %d", who, (int)dtype));
        return NULL;
    }
    sx_status s = sx_shape_check(who, rank, shape);
    if (s != SX_OK) {
        cg_fail(g, s);
        return NULL;
    }
    sx_cg_node *n = sx_calloc(1, sizeof *n);
    if (n == NULL) {
        cg_fail(g, SX_E_NOMEM);
        return NULL;
    }
    n->graph = g;
    n->op = op;
    n->in = n->inline_in;
    n->attr = sx_cg_attr_default();
    n->value = sx_tensor_view(dtype, rank, shape, NULL);
    size_t bytes = (size_t)n->value.size * sx_dtype_size(dtype);
    if (borrow != NULL) {
        n->value.data = borrow;
        n->borrowed = true;
    } else {
        n->own = sx_alloc(bytes);
        if (n->own == NULL)
            goto fail;
        n->value.data = n->own;
        if (data != NULL && bytes > 0)
            memcpy(n->own, data, bytes);
    }
    if (name != NULL && name[0] != '\0') {
        n->name = sx_alloc(strlen(name) + 1);
        if (n->name == NULL)
            goto fail;
        strcpy(n->name, name);
    }
    n->valid = op != SX_OP_INPUT; /* an input is invalid until it is given a value */
    if (node_link(g, n, false) != SX_OK)
        goto fail;
    return n;
fail:
    node_free(n);
    cg_fail(g, SX_E_NOMEM);
    return NULL;
}

sx_cg_node *sx_cg_const(sx_cg_graph *g, const sx_tensor *value)
{
    sx_status s = sx__check_tensor("sx_cg_const", "value", value);
    if (s != SX_OK) {
        cg_fail(g, s);
        return NULL;
    }
    return leaf_new(g, SX_OP_CONST, "sx_cg_const", NULL, value->dtype, value->rank, value->shape,
                    value->data, NULL);
}

sx_cg_node *sx_cg_scalar_of(sx_cg_graph *g, sx_dtype dtype, double value)
{
    if (g == NULL)
        return NULL;
    float f = (float)value;
    const void *p = dtype == SX_F32 ? (const void *)&f : (const void *)&value;
    return leaf_new(g, SX_OP_CONST, "sx_cg_scalar", NULL, dtype, 0, NULL, p, NULL);
}

sx_cg_node *sx_cg_scalar(sx_cg_graph *g, double value)
{
    return g == NULL ? NULL : sx_cg_scalar_of(g, g->dtype, value);
}

sx_cg_node *sx_cg_scalar_like(sx_cg_graph *g, const sx_cg_node *like, double value)
{
    return like == NULL ? NULL : sx_cg_scalar_of(g, like->value.dtype, value);
}

sx_cg_node *sx_cg_input(sx_cg_graph *g, const char *name, sx_dtype dtype, int rank,
                        const int64_t *shape)
{
    return leaf_new(g, SX_OP_INPUT, "sx_cg_input", name, dtype, rank, shape, NULL, NULL);
}

sx_cg_node *sx_cg_param(sx_cg_graph *g, const char *name, const sx_tensor *init)
{
    sx_status s = sx__check_tensor("sx_cg_param", "init", init);
    if (s != SX_OK) {
        cg_fail(g, s);
        return NULL;
    }
    return leaf_new(g, SX_OP_PARAM, "sx_cg_param", name, init->dtype, init->rank, init->shape,
                    init->data, NULL);
}

sx_cg_node *cg_leaf_share(sx_cg_graph *g, const sx_cg_node *x)
{
    const sx_tensor *v = &x->value;
    const char *name = x->op == SX_OP_PARAM ? x->name : NULL; /* as sx_cg_graph_copy */
    return leaf_new(g, x->op, "sx_cg_graph_copy_shared", name, v->dtype, v->rank, v->shape, NULL,
                    v->data);
}

sx_cg_node *sx_cg_param_borrow(sx_cg_graph *g, const char *name, sx_tensor *t)
{
    sx_status s = sx__check_tensor("sx_cg_param_borrow", "t", t);
    if (s == SX_OK && t->data == NULL)
        s = sx_error(SX_E_ARG, "sx_cg_param_borrow: the tensor has no data");
    if (s != SX_OK) {
        cg_fail(g, s);
        return NULL;
    }
    return leaf_new(g, SX_OP_PARAM, "sx_cg_param_borrow", name, t->dtype, t->rank, t->shape, NULL,
                    t->data);
}

static sx_status check_leaf_value(const char *who, const sx_cg_node *leaf, const sx_tensor *v)
{
    SX_TRY(sx__check_tensor(who, "value", v));
    if (v->dtype != leaf->value.dtype)
        return sx_error(SX_E_DTYPE, "%s: value is %s, node '%s' is %s", who,
                        sx_dtype_name(v->dtype), sx_cg_node_name(leaf),
                        sx_dtype_name(leaf->value.dtype));
    if (!sx_shape_equal(v->rank, v->shape, leaf->value.rank, leaf->value.shape)) {
        char a[128], b[128];
        return sx_error(SX_E_SHAPE, "%s: value has shape %s, node '%s' has shape %s", who,
                        sx_shape_str(v->rank, v->shape, a, sizeof a), sx_cg_node_name(leaf),
                        sx_shape_str(leaf->value.rank, leaf->value.shape, b, sizeof b));
    }
    return SX_OK;
}

sx_status sx_cg_input_set(sx_cg_graph *g, sx_cg_node *input, const sx_tensor *value,
                          sx_cg_ownership how)
{
    const char *who = "sx_cg_input_set";
    if (g == NULL || input == NULL || input->graph != g)
        return sx_error(SX_E_ARG, "%s: NULL graph or node, or a node of another graph", who);
    if (input->op != SX_OP_INPUT)
        return sx_error(SX_E_ARG, "%s: node %lld is a %s, not an input", who, (long long)input->id,
                        sx_cg_op_name(input->op));
    if (how != SX_CG_COPY && how != SX_CG_BORROW)
        return sx_error(SX_E_ARG, "%s: unknown ownership %d", who, (int)how);
    SX_TRY(check_leaf_value(who, input, value));
    cg_invalidate(g, input);
    if (how == SX_CG_BORROW) {
        input->value.data = value->data;
        input->borrowed = true;
    } else {
        input->value.data = input->own;
        input->borrowed = false;
        if (value->size > 0 && value->data != input->own)
            memcpy(input->own, value->data, (size_t)value->size * sx_dtype_size(value->dtype));
    }
    input->valid = true;
    return SX_OK;
}

sx_status sx_cg_leaf_set(sx_cg_graph *g, sx_cg_node *leaf, const sx_tensor *value)
{
    const char *who = "sx_cg_leaf_set";
    if (g == NULL || leaf == NULL || leaf->graph != g)
        return sx_error(SX_E_ARG, "%s: NULL graph or node, or a node of another graph", who);
    if (leaf->op != SX_OP_PARAM && leaf->op != SX_OP_CONST)
        return sx_error(SX_E_ARG, "%s: node %lld is a %s, not a parameter or constant", who,
                        (long long)leaf->id, sx_cg_op_name(leaf->op));
    SX_TRY(check_leaf_value(who, leaf, value));
    cg_invalidate(g, leaf);
    if (value->size > 0 && value->data != leaf->value.data)
        memcpy(leaf->value.data, value->data, (size_t)value->size * sx_dtype_size(value->dtype));
    leaf->valid = true;
    return SX_OK;
}

sx_rng *sx_cg_rng(sx_cg_graph *g, int id)
{
    return g != NULL && id >= 0 && id < g->n_rngs ? &g->rngs[id] : NULL;
}

sx_status sx_cg_rng_new(sx_cg_graph *g, uint64_t seed, int *id)
{
    if (g == NULL || id == NULL)
        return sx_error(SX_E_ARG, "sx_cg_rng_new: NULL argument");
    sx_rng *r = sx_realloc(g->rngs, (size_t)(g->n_rngs + 1) * sizeof *r);
    if (r == NULL)
        return SX_E_NOMEM;
    g->rngs = r;
    sx_rng_seed(&g->rngs[g->n_rngs], seed);
    *id = g->n_rngs++;
    return SX_OK;
}

/* ---------------------------------------------------------------- accessors */

sx_cg_op sx_cg_node_op(const sx_cg_node *n)
{
    return n->op;
}

int64_t sx_cg_node_id(const sx_cg_node *n)
{
    return n->id;
}

const char *sx_cg_node_name(const sx_cg_node *n)
{
    return n->name ? n->name : "";
}

sx_status sx_cg_scope_set(sx_cg_graph *g, const char *name)
{
    if (g == NULL)
        return sx_error(SX_E_ARG, "sx_cg_scope_set: graph is NULL");
    if (name == NULL || name[0] == '\0') {
        g->cur_scope = 0;
        return SX_OK;
    }
    for (int i = 0; i < g->n_scopes; i++)
        if (strcmp(g->scopes[i], name) == 0) {
            g->cur_scope = i + 1;
            return SX_OK;
        }
    char *s = sx_alloc(strlen(name) + 1);
    char **a = s ? sx_realloc(g->scopes, (size_t)(g->n_scopes + 1) * sizeof *a) : NULL;
    if (a == NULL) {
        sx_free(s);
        return SX_E_NOMEM;
    }
    strcpy(s, name);
    g->scopes = a;
    g->scopes[g->n_scopes++] = s;
    g->cur_scope = g->n_scopes;
    return SX_OK;
}

const char *sx_cg_scope_get(const sx_cg_graph *g)
{
    return g != NULL && g->cur_scope > 0 ? g->scopes[g->cur_scope - 1] : "";
}

const char *sx_cg_node_scope(const sx_cg_node *n)
{
    return n != NULL && n->scope > 0 ? n->graph->scopes[n->scope - 1] : "";
}

sx_status sx_cg_node_set_name(sx_cg_graph *g, sx_cg_node *n, const char *name)
{
    if (g == NULL || n == NULL || n->graph != g || name == NULL)
        return sx_error(SX_E_ARG, "sx_cg_node_set_name: NULL argument or foreign node");
    char *s = sx_alloc(strlen(name) + 1);
    if (s == NULL)
        return SX_E_NOMEM;
    strcpy(s, name);
    sx_free(n->name);
    n->name = s;
    return SX_OK;
}

sx_dtype sx_cg_node_dtype(const sx_cg_node *n)
{
    return n->value.dtype;
}

int sx_cg_node_rank(const sx_cg_node *n)
{
    return n->value.rank;
}

const int64_t *sx_cg_node_shape(const sx_cg_node *n)
{
    return n->value.shape;
}

int64_t sx_cg_node_size(const sx_cg_node *n)
{
    return n->value.size;
}

int sx_cg_node_n_inputs(const sx_cg_node *n)
{
    return n->n_in;
}

sx_cg_node *sx_cg_node_input(const sx_cg_node *n, int i)
{
    return i >= 0 && i < n->n_in ? n->in[i] : NULL;
}

const sx_cg_attr *sx_cg_node_attr(const sx_cg_node *n)
{
    return &n->attr;
}

int sx_cg_node_n_users(const sx_cg_node *n)
{
    return n->n_users;
}

const sx_tensor *sx_cg_value(const sx_cg_node *node)
{
    if (node == NULL || node->value.data == NULL)
        return NULL;
    return &node->value;
}

bool sx_cg_valid(const sx_cg_node *node)
{
    return node != NULL && node->valid;
}

/* Rebuild the structural-hash table from the live nodes (after the optimiser rewrote some). */
sx_status cg_rehash(sx_cg_graph *g)
{
    int64_t cap = 64;
    while (cap < 2 * (g->n_nodes + 1))
        cap *= 2;
    int64_t *t = sx_calloc((size_t)cap * 2, sizeof *t);
    if (t == NULL)
        return SX_E_NOMEM;
    sx_free(g->htab);
    g->htab = t;
    g->hcap = cap;
    g->hcount = 0;
    for (int64_t i = 0; i < g->n_nodes; i++) {
        sx_cg_node *n = g->nodes[i];
        if (n->dead || !hashable(n->op))
            continue;
        n->hash = node_hash(n->op, n->n_in, n->in, &n->attr);
        if (hash_find(g, n->hash, n->op, n->n_in, n->in, &n->attr, NULL) == NULL)
            hash_insert(g, n);
    }
    return SX_OK;
}

/* The structurally equal live node of n (same op, inputs, attributes), or NULL. */
sx_cg_node *cg_hash_twin(sx_cg_graph *g, sx_cg_node *n)
{
    if (!hashable(n->op))
        return NULL;
    uint64_t h = node_hash(n->op, n->n_in, n->in, &n->attr);
    sx_cg_node *t = hash_find(g, h, n->op, n->n_in, n->in, &n->attr, n);
    return t == n ? NULL : t;
}

/* ---------------------------------------------------------------- invalidation */

sx_status cg_reserve_stack(sx_cg_graph *g, int64_t need)
{
    if (need <= g->cap_stack)
        return SX_OK;
    int64_t cap = g->cap_stack ? g->cap_stack : 64;
    while (cap < need)
        cap *= 2;
    sx_cg_node **s = sx_realloc(g->stack, (size_t)cap * sizeof *s);
    if (s == NULL)
        return SX_E_NOMEM;
    g->stack = s;
    g->cap_stack = cap;
    return SX_OK;
}

/* Iterative, with the graph's stack (kept at least as large as the graph by node_link), so it
 * cannot fail. A node is pushed once: it is marked invalid when pushed. */
void cg_invalidate(sx_cg_graph *g, sx_cg_node *n)
{
    g->version++;
    if (!n->valid || n->dead)
        return;
    int64_t top = 0;
    if (sx_cg_ops[n->op].flags & SX_OPF_LEAF) {
        /* a leaf stays valid (its value is what was set): only its readers go stale */
        for (int i = 0; i < n->n_users; i++)
            if (n->users[i]->valid) {
                n->users[i]->valid = false;
                g->stack[top++] = n->users[i];
            }
    } else {
        n->valid = false;
        g->stack[top++] = n;
    }
    while (top > 0) {
        sx_cg_node *x = g->stack[--top];
        for (int i = 0; i < x->n_users; i++)
            if (x->users[i]->valid) {
                x->users[i]->valid = false;
                g->stack[top++] = x->users[i];
            }
    }
}

sx_status sx_cg_invalidate(sx_cg_graph *g, sx_cg_node *node)
{
    if (g == NULL || node == NULL || node->graph != g)
        return sx_error(SX_E_ARG, "sx_cg_invalidate: NULL argument or foreign node");
    cg_invalidate(g, node);
    return SX_OK;
}
