/* difftest.c: the differential tester (difftest.h). A program is a list of nodes; the generator
 * grows one from the op table, an op at a time, evaluating every new node in an f64 scratch
 * graph so that the next op only sees inputs inside its domain and away from its kinks (an input
 * exactly at a kink is allowed: it comes from relu-like zeros or ties between copies, where the
 * function is locally constant or the convention is exact, and is the case that finds
 * mask-times-infinity gradients). The checks instantiate the program in fresh graphs.
 * Included by test_diff.c and fuzz/difftest.c, which each compile it once. */
#include "difftest.h"

#include "opsamples.c" /* os_ops: how each op is differentiable (smooth, piecewise, none) */

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MARGIN 0.02   /* inputs this close to a kink, tie or domain edge are refused */
#define MAX_ABS 1e3   /* every value the generator keeps is below this in magnitude */
#define FD_H 1e-3     /* finite-difference step (times max(1, |x|)), and half of it */
#define FD_TRUST 1e-3 /* the two steps must agree within this (relative) to be trusted */
#define FD_TOL 1e-4   /* autodiff against the smaller step (relative), plus their difference */

int64_t dt_op_made[SX_OP_COUNT];
int64_t dt_pass_changed[SX_PASS_COUNT];

const char *const dt_family_name[DT_FAMILY_COUNT] = {"modes", "grad", "optgrad", "hvp"};

/* ---------------------------------------------------------------- programs */

static int64_t shape_size(int rank, const int64_t *s)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= s[i];
    return n;
}

static double to_dtype(sx_dtype dt, double v)
{
    return dt == SX_F32 ? (double)(float)v : v;
}

dt_prog *dt_prog_new(sx_dtype dt)
{
    dt_prog *p = calloc(1, sizeof *p);
    if (p != NULL) {
        p->dt = dt;
        p->out = -1;
    }
    return p;
}

static void node_clear(dt_node *d)
{
    free(d->val);
    d->val = NULL;
}

void dt_prog_free(dt_prog *p)
{
    if (p == NULL)
        return;
    for (int i = 0; i < p->n; i++)
        node_clear(&p->node[i]);
    free(p->w);
    free(p);
}

static double *dup_vals(const double *v, int64_t n)
{
    double *c = malloc((size_t)(n > 0 ? n : 1) * sizeof *c);
    if (c != NULL && n > 0)
        memcpy(c, v, (size_t)n * sizeof *c);
    return c;
}

dt_prog *dt_prog_clone(const dt_prog *p)
{
    dt_prog *q = malloc(sizeof *q);
    if (q == NULL)
        return NULL;
    memcpy(q, p, sizeof *q);
    for (int i = 0; i < q->n; i++)
        if (p->node[i].val != NULL)
            q->node[i].val =
                dup_vals(p->node[i].val, shape_size(p->node[i].rank, p->node[i].shape));
    if (p->w != NULL && p->out >= 0)
        q->w = dup_vals(p->w, shape_size(p->node[p->out].rank, p->node[p->out].shape));
    return q;
}

int dt_leaf(dt_prog *p, dt_kind k, int rank, const int64_t *shape, const double *v)
{
    if (p->n >= DT_MAX_NODES || k == DT_OP || rank < 0 || rank > SX_MAX_RANK)
        return -1;
    dt_node *d = &p->node[p->n];
    memset(d, 0, sizeof *d);
    d->kind = k;
    d->op = k == DT_CONST ? SX_OP_CONST : k == DT_PARAM ? SX_OP_PARAM : SX_OP_INPUT;
    d->attr = sx_cg_attr_default();
    d->rank = rank;
    for (int i = 0; i < rank; i++)
        d->shape[i] = shape[i];
    int64_t n = shape_size(rank, d->shape);
    d->val = malloc((size_t)(n > 0 ? n : 1) * sizeof *d->val);
    if (d->val == NULL)
        return -1;
    for (int64_t i = 0; i < n; i++)
        d->val[i] = to_dtype(p->dt, v[i]);
    return p->n++;
}

int dt_op(dt_prog *p, sx_cg_op op, int n_in, const int *in, const sx_cg_attr *attr)
{
    if (p->n >= DT_MAX_NODES || n_in < 0 || n_in > DT_MAX_IN)
        return -1;
    dt_node *d = &p->node[p->n];
    memset(d, 0, sizeof *d);
    d->kind = DT_OP;
    d->op = op;
    d->n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        if (in[i] < 0 || in[i] >= p->n)
            return -1;
        d->in[i] = in[i];
    }
    d->attr = attr != NULL ? *attr : sx_cg_attr_default();
    d->rng_seed = 0x5eed0000ULL + (uint64_t)p->n;
    p->out = p->n;
    return p->n++;
}

static void pop_to(dt_prog *p, int n)
{
    for (int i = n; i < p->n; i++)
        node_clear(&p->node[i]);
    p->n = n;
}

/* Keep only the nodes the output needs, in order. */
static void prune(dt_prog *p)
{
    bool need[DT_MAX_NODES] = {0};
    int map[DT_MAX_NODES];
    if (p->out < 0)
        return;
    need[p->out] = true;
    for (int i = p->out; i >= 0; i--)
        if (need[i])
            for (int k = 0; k < p->node[i].n_in; k++)
                need[p->node[i].in[k]] = true;
    int m = 0;
    for (int i = 0; i < p->n; i++) {
        if (!need[i]) {
            node_clear(&p->node[i]);
            continue;
        }
        map[i] = m;
        dt_node d = p->node[i];
        for (int k = 0; k < d.n_in; k++)
            d.in[k] = map[d.in[k]];
        p->node[m++] = d;
    }
    p->out = map[p->out];
    p->n = m;
}

/* ---------------------------------------------------------------- building graphs */

static sx_cg_node *leaf_node(sx_cg_graph *g, const char *name, sx_dtype dt, int rank,
                             const int64_t *shape, const double *v, int kind)
{
    sx_tensor *t = NULL;
    if (sx_tensor_from_doubles(dt, rank, shape, v, shape_size(rank, shape), &t) != SX_OK) {
        sx_cg_graph_fail(g, SX_E_NOMEM);
        return NULL;
    }
    sx_cg_node *n = NULL;
    if (kind == DT_PARAM) {
        n = sx_cg_param(g, name, t);
    } else if (kind == DT_CONST) {
        n = sx_cg_const(g, t);
    } else {
        n = sx_cg_input(g, name, dt, rank, shape);
        if (n != NULL && sx_cg_input_set(g, n, t, SX_CG_COPY) != SX_OK)
            n = NULL;
    }
    sx_tensor_free(t);
    return n;
}

sx_cg_node *dt_input(sx_cg_graph *g, const char *name, sx_dtype dt, int rank, const int64_t *shape,
                     const double *v)
{
    return leaf_node(g, name, dt, rank, shape, v, DT_INPUT);
}

sx_cg_node *dt_param(sx_cg_graph *g, const char *name, sx_dtype dt, int rank, const int64_t *shape,
                     const double *v)
{
    return leaf_node(g, name, dt, rank, shape, v, DT_PARAM);
}

sx_cg_node *dt_const(sx_cg_graph *g, sx_dtype dt, int rank, const int64_t *shape, const double *v)
{
    return leaf_node(g, NULL, dt, rank, shape, v, DT_CONST);
}

/* Node i of p in g (its inputs already in nd[]). */
static sx_cg_node *build_node(sx_cg_graph *g, const dt_prog *p, int i, sx_cg_node *const *nd,
                              sx_dtype dt)
{
    const dt_node *d = &p->node[i];
    char name[16];
    snprintf(name, sizeof name, "n%d", i);
    if (d->kind != DT_OP)
        return leaf_node(g, name, dt, d->rank, d->shape, d->val, (int)d->kind);
    sx_cg_node *in[DT_MAX_IN] = {0};
    for (int k = 0; k < d->n_in; k++)
        in[k] = nd[d->in[k]];
    sx_cg_attr at = d->attr;
    if (d->op == SX_OP_DROPOUT_MASK) {
        int id;
        if (sx_cg_rng_new(g, d->rng_seed, &id) != SX_OK)
            return NULL;
        at.rng_id = id;
    }
    return sx_cg_op_new(g, d->op, d->n_in, in, &at);
}

sx_status dt_infer(dt_prog *p)
{
    sx_cg_graph *g = NULL;
    sx_cg_node *nd[DT_MAX_NODES];
    sx_status st = sx_cg_graph_new(SX_CG_LAZY, p->dt, &g);
    for (int i = 0; i < p->n && st == SX_OK; i++) {
        nd[i] = build_node(g, p, i, nd, p->dt);
        if (nd[i] == NULL) {
            st = sx_cg_graph_status(g) != SX_OK ? sx_cg_graph_status(g) : SX_E_STATE;
            break;
        }
        p->node[i].rank = sx_cg_node_rank(nd[i]);
        for (int k = 0; k < p->node[i].rank; k++)
            p->node[i].shape[k] = sx_cg_node_shape(nd[i])[k];
    }
    sx_cg_graph_free(g);
    return st;
}

/* ---------------------------------------------------------------- generation */

typedef struct gen {
    dt_prog *p;
    sx_rng rng;
    sx_cg_graph *g; /* f64, lazy: every node's value, for the domain checks */
    sx_cg_node *nd[DT_MAX_NODES];
    int depth[DT_MAX_NODES];
    int last; /* the spine: new ops read it most of the time, so depth grows */
} gen;

static double gu(gen *G, double a, double b)
{
    return a + (b - a) * sx_rng_uniform(&G->rng);
}

static int gb(gen *G, int n)
{
    return n <= 1 ? 0 : (int)sx_rng_below(&G->rng, (uint64_t)n);
}

static const dt_node *gn(gen *G, int i)
{
    return &G->p->node[i];
}

static int64_t gsize(gen *G, int i)
{
    return shape_size(gn(G, i)->rank, gn(G, i)->shape);
}

static double gv(gen *G, int i, int64_t k)
{
    return sx_tensor_get(sx_cg_value(G->nd[i]), k);
}

static bool all_finite_small(gen *G, int i)
{
    for (int64_t k = 0; k < gsize(G, i); k++) {
        double v = gv(G, i, k);
        if (!isfinite(v) || fabs(v) > MAX_ABS)
            return false;
    }
    return true;
}

/* A leaf with the given values, made in the scratch graph too. */
static int g_leaf_vals(gen *G, dt_kind k, int rank, const int64_t *shape, const double *v)
{
    int i = dt_leaf(G->p, k, rank, shape, v);
    if (i < 0)
        return -1;
    G->nd[i] = build_node(G->g, G->p, i, G->nd, SX_F64);
    if (G->nd[i] == NULL || sx_cg_eval(G->g, 1, &G->nd[i]) != SX_OK) {
        sx_cg_graph_status_clear(G->g);
        pop_to(G->p, i);
        return -1;
    }
    G->depth[i] = 0;
    return i;
}

/* A leaf of random kind (input, parameter or constant) with uniform values in [lo, hi). */
static int g_leaf_kind(gen *G, dt_kind k, int rank, const int64_t *shape, double lo, double hi)
{
    double v[DT_MAX_SIZE];
    int64_t n = shape_size(rank, shape);
    if (n > DT_MAX_SIZE)
        return -1;
    for (int64_t i = 0; i < n; i++)
        v[i] = gu(G, lo, hi);
    return g_leaf_vals(G, k, rank, shape, v);
}

static int g_leaf(gen *G, int rank, const int64_t *shape, double lo, double hi)
{
    int r = gb(G, 20);
    dt_kind k = r < 11 ? DT_INPUT : r < 16 ? DT_PARAM : DT_CONST;
    return g_leaf_kind(G, k, rank, shape, lo, hi);
}

static int g_scalar(gen *G, double v)
{
    return g_leaf_vals(G, DT_CONST, 0, NULL, &v);
}

static bool op_ok(gen *G, int i);

/* An op node, made and evaluated in the scratch graph; refused (-1) when it does not build, is
 * empty or too large, or holds a value that is not finite or too large. */
static int g_op(gen *G, sx_cg_op op, int n_in, const int *in, const sx_cg_attr *at)
{
    dt_prog *p = G->p;
    int saved_out = p->out;
    int i = dt_op(p, op, n_in, in, at);
    if (i < 0)
        return -1;
    p->node[i].rng_seed = sx_rng_u64(&G->rng);
    sx_cg_node *n = build_node(G->g, p, i, G->nd, SX_F64);
    if (n == NULL || sx_cg_node_size(n) == 0 || sx_cg_node_size(n) > DT_MAX_SIZE ||
        sx_cg_eval(G->g, 1, &n) != SX_OK) {
        sx_cg_graph_status_clear(G->g);
        pop_to(p, i);
        p->out = saved_out;
        return -1;
    }
    G->nd[i] = n;
    p->node[i].rank = sx_cg_node_rank(n);
    for (int k = 0; k < p->node[i].rank; k++)
        p->node[i].shape[k] = sx_cg_node_shape(n)[k];
    if (!all_finite_small(G, i) || !op_ok(G, i)) {
        pop_to(p, i);
        p->out = saved_out;
        return -1;
    }
    int d = 0;
    for (int k = 0; k < n_in; k++)
        d = G->depth[in[k]] > d ? G->depth[in[k]] : d;
    G->depth[i] = d + 1;
    return i;
}

static int g_un(gen *G, sx_cg_op op, int x)
{
    return x < 0 ? -1 : g_op(G, op, 1, &x, NULL);
}

static int g_bin(gen *G, sx_cg_op op, int a, int b)
{
    int in[2] = {a, b};
    return a < 0 || b < 0 ? -1 : g_op(G, op, 2, in, NULL);
}

static int g_reshape(gen *G, int x, int rank, const int64_t *shape)
{
    sx_cg_attr at = sx_cg_attr_default();
    at.rank = rank;
    for (int i = 0; i < rank; i++)
        at.shape[i] = shape[i];
    return x < 0 ? -1 : g_op(G, SX_OP_RESHAPE, 1, &x, &at);
}

/* A random shape of at most `max` elements: rank 0..3, dims 1..4. */
static int rand_shape(gen *G, int64_t max, int64_t *s)
{
    static const int ranks[10] = {0, 1, 1, 1, 2, 2, 2, 2, 3, 3};
    for (int tries = 0;; tries++) {
        int r = ranks[gb(G, 10)];
        for (int i = 0; i < r; i++)
            s[i] = 1 + gb(G, 4);
        if (shape_size(r, s) <= max || tries > 20)
            return shape_size(r, s) <= max ? r : 0;
    }
}

/* The next input: the spine most of the time, else any node. */
static int g_pick(gen *G)
{
    if (G->last >= 0 && gb(G, 10) < 6)
        return G->last;
    return gb(G, G->p->n);
}

static bool bcast(int ra, const int64_t *sa, int rb, const int64_t *sb, int *r, int64_t *s)
{
    int n = ra > rb ? ra : rb;
    for (int i = 0; i < n; i++) {
        int64_t a = i < n - ra ? 1 : sa[i - (n - ra)], b = i < n - rb ? 1 : sb[i - (n - rb)];
        if (a != b && a != 1 && b != 1)
            return false;
        s[i] = a == 1 ? b : a;
    }
    *r = n;
    return true;
}

/* A node whose shape broadcasts with a's: an existing one, or a new leaf of a shape derived
 * from a's (the same, some dims 1, a suffix, a scalar, or one more leading axis). */
static int g_partner(gen *G, int a)
{
    const dt_node *na = gn(G, a);
    if (gb(G, 2) == 0) {
        int cand[DT_MAX_NODES], nc = 0, r;
        int64_t s[SX_MAX_RANK];
        for (int j = 0; j < G->p->n; j++)
            if (bcast(na->rank, na->shape, gn(G, j)->rank, gn(G, j)->shape, &r, s) &&
                shape_size(r, s) <= DT_MAX_SIZE)
                cand[nc++] = j;
        if (nc > 0)
            return cand[gb(G, nc)];
    }
    int r = na->rank;
    int64_t s[SX_MAX_RANK];
    for (int i = 0; i < r; i++)
        s[i] = na->shape[i];
    switch (gb(G, 6)) {
    case 0:
    case 1:
        break;
    case 2:
        for (int i = 0; i < r; i++)
            if (gb(G, 2))
                s[i] = 1;
        break;
    case 3: {
        int drop = gb(G, r + 1);
        for (int i = drop; i < r; i++)
            s[i - drop] = s[i];
        r -= drop;
        break;
    }
    case 4:
        r = 0;
        break;
    default:
        if (r < 4 && shape_size(r, s) * 2 <= DT_MAX_SIZE) {
            for (int i = r; i > 0; i--)
                s[i] = s[i - 1];
            s[0] = 2;
            r++;
        }
        break;
    }
    return g_leaf(G, r, s, -2, 2);
}

/* ---------------------------------------------------------------- domains */

/* What an op needs of its inputs' values. Checked on the scratch values; "exactly at" a kink is
 * allowed (see the top of the file), "near" is not. */
typedef enum {
    DOM_ANY,
    DOM_SQRT,     /* x == 0 or x >= MARGIN */
    DOM_POS,      /* x >= MARGIN (log, rsqrt) */
    DOM_LOG1P,    /* x >= -0.9 */
    DOM_NONZERO,  /* |x| >= MARGIN */
    DOM_TAN,      /* |cos x| >= 0.2 */
    DOM_KINK0,    /* x == 0 or |x| >= MARGIN (abs, relu, sign, leaky relu, elu) */
    DOM_KINKINT,  /* away from integers (floor, ceil) */
    DOM_KINKHALF, /* away from halves (round) */
    DOM_KINK3     /* ||x| - 3| >= MARGIN (hard_swish) */
} dom1;

static bool dom1_ok(dom1 d, double x)
{
    double f;
    switch (d) {
    case DOM_ANY:
        return true;
    case DOM_SQRT:
        return x == 0 || x >= MARGIN;
    case DOM_POS:
        return x >= MARGIN;
    case DOM_LOG1P:
        return x >= -0.9;
    case DOM_NONZERO:
        return fabs(x) >= MARGIN;
    case DOM_TAN:
        return fabs(cos(x)) >= 0.2;
    case DOM_KINK0:
        return x == 0 || fabs(x) >= MARGIN;
    case DOM_KINKINT:
        f = fabs(x - nearbyint(x));
        return f == 0 || f >= MARGIN;
    case DOM_KINKHALF:
        f = fabs(fabs(x - floor(x)) - 0.5);
        return f == 0 || f >= MARGIN;
    case DOM_KINK3:
        return fabs(fabs(x) - 3) >= MARGIN;
    }
    return false;
}

/* May node i's exact zeros meet an op that is singular at 0 (sqrt, pow)? Only when they come
 * from a selection whose derivative there is 0 by convention (relu of a negative, the unchosen
 * side of max/min/where, a piecewise-constant op) or from a constant: then the true derivative
 * is 0 and PyTorch gives 0 (its rules select, where(mask, g, 0), rather than multiply by the
 * mask). A zero made by arithmetic (x * 0, log_softmax of one class) gives 0 * inf = NaN in
 * PyTorch too, by IEEE rules, and is not asked for. */
static bool zero_source(gen *G, int i)
{
    const dt_node *d = gn(G, i);
    if (d->kind != DT_OP)
        return d->kind == DT_CONST || d->kind == DT_INDEX;
    switch (d->op) {
    case SX_OP_RELU:
    case SX_OP_ABS:
    case SX_OP_MAX:
    case SX_OP_MIN:
    case SX_OP_WHERE:
    case SX_OP_SIGN:
    case SX_OP_FLOOR:
    case SX_OP_CEIL:
    case SX_OP_ROUND:
    case SX_OP_EQ:
    case SX_OP_NE:
    case SX_OP_LT:
    case SX_OP_LE:
    case SX_OP_GT:
    case SX_OP_GE:
    case SX_OP_MAXPOOL2D:
    case SX_OP_REDUCE_MAX:
    case SX_OP_REDUCE_MIN:
        return true;
    default:
        return false;
    }
}

/* Can node i sit exactly on a kink? Not when it is a differentiated leaf: there the function
 * itself has the kink (a shrunk program can put a leaf there). */
static bool may_touch(gen *G, int i)
{
    return gn(G, i)->kind != DT_INPUT && gn(G, i)->kind != DT_PARAM;
}

static bool node_dom_ok(gen *G, int i, dom1 d)
{
    for (int64_t k = 0; k < gsize(G, i); k++) {
        double v = gv(G, i, k);
        if (!dom1_ok(d, v) || (d == DOM_SQRT && v == 0 && !zero_source(G, i)))
            return false;
        if (!may_touch(G, i) && !dom1_ok(d, v + MARGIN / 2) && !dom1_ok(d, v - MARGIN / 2))
            return false; /* exactly on the kink */
    }
    return true;
}

/* Map an index of the broadcast result (shape so) to the element of an input (shape si). */
static int64_t bmap(int ro, const int64_t *so, int ri, const int64_t *si, int64_t k)
{
    int64_t coord[SX_MAX_RANK], idx = 0;
    for (int a = ro - 1; a >= 0; a--) {
        coord[a] = k % so[a];
        k /= so[a];
    }
    for (int a = 0; a < ri; a++)
        idx = idx * si[a] + (si[a] == 1 ? 0 : coord[a + ro - ri]);
    return idx;
}

/* Value of input k of node i at element e of i's (broadcast) shape. */
static double gin(gen *G, int i, int k, int64_t e)
{
    const dt_node *n = gn(G, i), *a = gn(G, n->in[k]);
    return gv(G, n->in[k], bmap(n->rank, n->shape, a->rank, a->shape, e));
}

/* An adapter that brings x into domain d, or -1. */
static int g_adapt(gen *G, int x, dom1 d)
{
    for (int tries = 0; tries < 3; tries++) {
        if (node_dom_ok(G, x, d))
            return x;
        int y = -1, r = gb(G, 6);
        switch (d) {
        case DOM_SQRT: /* relu and abs leave exact zeros: the case of mask-times-infinity */
            y = g_un(G,
                     r < 3    ? SX_OP_RELU
                     : r == 3 ? SX_OP_ABS
                     : r == 4 ? SX_OP_SQR
                              : SX_OP_SOFTPLUS,
                     x);
            break;
        case DOM_POS:
        case DOM_LOG1P:
        case DOM_NONZERO:
            if (r < 2)
                y = g_un(G, r == 0 ? SX_OP_SOFTPLUS : SX_OP_EXP, x);
            else
                y = g_bin(G, SX_OP_ADD, g_un(G, r < 4 ? SX_OP_ABS : SX_OP_SQR, x),
                          g_scalar(G, gu(G, 0.2, 1)));
            break;
        case DOM_TAN:
            y = g_un(G, SX_OP_TANH, x);
            break;
        case DOM_KINK0:
        case DOM_KINKINT:
        case DOM_KINKHALF:
        case DOM_KINK3:
            y = g_bin(G, SX_OP_ADD, x, g_scalar(G, gu(G, -1, 1)));
            break;
        case DOM_ANY:
            return x;
        }
        if (y < 0)
            return -1;
        x = y;
    }
    return node_dom_ok(G, x, d) ? x : -1;
}

/* ---------------------------------------------------------------- generators, by family */

typedef int gen_fn(gen *G, sx_cg_op op, int dom);

/* Unary maps: attr.alpha is the slope of leaky relu and the alpha of elu. */
static int gen_unary(gen *G, sx_cg_op op, int dom)
{
    int x = g_adapt(G, g_pick(G), (dom1)dom);
    if (x < 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    if (op == SX_OP_LEAKY_RELU)
        at.alpha = gu(G, 0.01, 0.5);
    else if (op == SX_OP_ELU)
        at.alpha = gu(G, 0.5, 2);
    return g_op(G, op, 1, &x, &at);
}

/* Binary element-wise ops (and fma, where): what they need of their inputs. */
enum {
    DOMB_ANY = 100,
    DOMB_DIV,   /* |b| >= MARGIN */
    DOMB_POW,   /* a >= MARGIN or a == 0 (with b > 0): pow(relu(x), b) at exact zeros */
    DOMB_TIE,   /* a == b or |a - b| >= MARGIN: max, min, comparisons */
    DOMB_ATAN2, /* away from the origin and from the branch cut (a = 0, b < 0) */
    DOMB_WHERE, /* the condition exactly 0 or away from it */
};

static bool bin_ok(gen *G, int i, int dom)
{
    for (int64_t e = 0; e < gsize(G, i); e++) {
        double a = gin(G, i, 0, e), b = gin(G, i, 1, e);
        switch (dom) {
        case DOMB_DIV:
            if (fabs(b) < MARGIN)
                return false;
            break;
        case DOMB_POW:
            if (!(a >= MARGIN || (a == 0 && b > 0.1 && zero_source(G, gn(G, i)->in[0]))) ||
                fabs(b) > 3)
                return false;
            break;
        case DOMB_TIE:
            if ((a != b || (gn(G, i)->in[0] != gn(G, i)->in[1] &&
                            (!may_touch(G, gn(G, i)->in[0]) || !may_touch(G, gn(G, i)->in[1])))) &&
                fabs(a - b) < MARGIN)
                return false;
            break;
        case DOMB_ATAN2:
            if (hypot(a, b) < 0.1 || (b < 0 && fabs(a) < 0.1))
                return false;
            break;
        case DOMB_WHERE:
            if ((a != 0 || !may_touch(G, gn(G, i)->in[0])) && fabs(a) < MARGIN)
                return false;
            break;
        default:
            break;
        }
    }
    return true;
}

static int gen_binary(gen *G, sx_cg_op op, int dom)
{
    int a = g_pick(G), b = g_partner(G, a);
    if (b < 0)
        return -1;
    if (gb(G, 2) && dom != DOMB_POW) {
        int t = a;
        a = b;
        b = t;
    }
    if (dom == DOMB_DIV)
        b = g_adapt(G, b, DOM_NONZERO);
    if (dom == DOMB_POW) {
        a = g_adapt(G, a, DOM_SQRT);
        if (gb(G, 2) || a < 0 || gsize(G, a) == 0)
            b = g_leaf(G, gb(G, 2) ? 0 : gn(G, b)->rank, gn(G, b)->shape, 0.3, 2.5);
        else /* 1.5 + tanh(b): in (0.5, 2.5) */
            b = g_bin(G, SX_OP_ADD, g_un(G, SX_OP_TANH, b), g_scalar(G, 1.5));
    }
    int r = g_bin(G, op, a, b);
    return r >= 0 && bin_ok(G, r, dom) ? r : -1;
}

static int gen_fma(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int in[3];
    in[0] = g_pick(G);
    in[1] = g_partner(G, in[0]);
    in[2] = g_partner(G, in[0]);
    if (in[1] < 0 || in[2] < 0)
        return -1;
    return g_op(G, op, 3, in, NULL);
}

static int gen_where(gen *G, sx_cg_op op, int dom)
{
    int in[3];
    in[0] = g_pick(G);
    if (gb(G, 2)) /* a comparison as the condition, as users write it */
        in[0] = g_bin(G, gb(G, 2) ? SX_OP_GT : SX_OP_LE, in[0], g_scalar(G, gu(G, -1, 1)));
    if (in[0] < 0)
        return -1;
    in[1] = g_partner(G, in[0]);
    in[2] = g_partner(G, in[0]);
    if (in[1] < 0 || in[2] < 0)
        return -1;
    int r = g_op(G, op, 3, in, NULL);
    return r >= 0 && bin_ok(G, r, dom) ? r : -1;
}

/* ---------------------------------------------------------------- reductions */

enum {
    DOMF_NONE = 200,
    DOMF_MAX, /* reduce_max/min, argmax/argmin: no near ties with a group's extreme */
    DOMF_L1,  /* elements exactly 0 or away from it */
    DOMF_L2,  /* no group of norm near 0 */
};

/* For every element of x (rank r, shape s), its group: the index of the reduced result. */
static void fold_groups(int r, const int64_t *s, unsigned axes, int64_t *group)
{
    int64_t n = shape_size(r, s);
    for (int64_t k = 0; k < n; k++) {
        int64_t rem = k, coord[SX_MAX_RANK], gidx = 0;
        for (int a = r - 1; a >= 0; a--) {
            coord[a] = rem % s[a];
            rem /= s[a];
        }
        for (int a = 0; a < r; a++)
            if (!(axes & (1u << a)))
                gidx = gidx * s[a] + coord[a];
        group[k] = gidx;
    }
}

/* Does element k's group hold another element? */
static bool j_other(const int64_t *group, int64_t k, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        if (j != k && group[j] == group[k])
            return true;
    return false;
}

static bool fold_ok(gen *G, int x, unsigned axes, int dom, bool is_min)
{
    int64_t group[DT_MAX_SIZE], n = gsize(G, x);
    fold_groups(gn(G, x)->rank, gn(G, x)->shape, axes, group);
    for (int64_t k = 0; k < n; k++) {
        double v = gv(G, x, k);
        if (dom == DOMF_L1 && (v != 0 || !may_touch(G, x)) && fabs(v) < MARGIN)
            return false;
        double ext = v, sq = 0;
        for (int64_t j = 0; j < n; j++) {
            if (group[j] != group[k])
                continue;
            double u = gv(G, x, j);
            sq += u * u;
            ext = is_min ? fmin(ext, u) : fmax(ext, u);
        }
        if (dom == DOMF_MAX && (v != ext || (!may_touch(G, x) && j_other(group, k, n))) &&
            fabs(v - ext) < MARGIN)
            return false;
        if (dom == DOMF_L2 && sq < MARGIN * MARGIN)
            return false;
    }
    return true;
}

static int gen_fold(gen *G, sx_cg_op op, int dom)
{
    int x = g_pick(G);
    int r = gn(G, x)->rank;
    sx_cg_attr at = sx_cg_attr_default();
    if (r == 0 || gb(G, 4) == 0) {
        at.axes = SX_AXES_ALL;
    } else {
        while (at.axes == 0)
            at.axes = (unsigned)gb(G, 1 << r);
    }
    at.keepdims = gb(G, 2);
    unsigned axes = at.axes == SX_AXES_ALL ? (1u << r) - 1 : at.axes;
    if (dom != DOMF_NONE && !fold_ok(G, x, axes, dom, op == SX_OP_REDUCE_MIN || op == SX_OP_ARGMIN))
        return -1;
    return g_op(G, op, 1, &x, &at);
}

/* ---------------------------------------------------------------- layout */

static int gen_repeat(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int x = g_pick(G), r = gn(G, x)->rank;
    if (r == 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    for (int i = 0; i < r; i++)
        at.ints[i] = 1 + gb(G, 2);
    return g_op(G, op, 1, &x, &at);
}

static int gen_broadcast(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int x = g_pick(G);
    const dt_node *n = gn(G, x);
    sx_cg_attr at = sx_cg_attr_default();
    int lead = n->rank < 4 ? gb(G, 2) : 0;
    at.rank = n->rank + lead;
    if (lead)
        at.shape[0] = 1 + gb(G, 3);
    for (int i = 0; i < n->rank; i++)
        at.shape[lead + i] = n->shape[i] == 1 ? 1 + gb(G, 3) : n->shape[i];
    return g_op(G, op, 1, &x, &at);
}

/* A random shape with n elements, rank 1..3 (one entry -1 now and then). */
static int factor_shape(gen *G, int64_t n, int64_t *s)
{
    int r = 1 + gb(G, 3), k = 0;
    int64_t rest = n;
    if (n < 1) { /* an empty x: sizes 1..3, then the 0 (no -1: it would be ambiguous) */
        for (; k < r - 1; k++)
            s[k] = 1 + gb(G, 3);
        s[k++] = 0;
        return k;
    }
    for (; k < r - 1; k++) {
        int64_t divs[64], nd = 0;
        for (int64_t d = 1; d <= rest && nd < 64; d++)
            if (rest % d == 0)
                divs[nd++] = d;
        s[k] = divs[gb(G, (int)nd)];
        rest /= s[k];
    }
    s[k++] = rest;
    if (gb(G, 5) == 0)
        s[gb(G, k)] = -1;
    return k;
}

static int gen_reshape(gen *G, sx_cg_op op, int dom)
{
    (void)op, (void)dom;
    int x = g_pick(G);
    int64_t s[SX_MAX_RANK];
    int r = factor_shape(G, gsize(G, x), s);
    return g_reshape(G, x, r, s);
}

static int gen_identity(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    return g_un(G, op, g_pick(G));
}

static int gen_slice(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int x = g_pick(G);
    const dt_node *n = gn(G, x);
    if (n->rank == 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    for (int a = 0; a < n->rank; a++) {
        int64_t d = n->shape[a];
        if (gb(G, 3) == 0) {
            at.slice[a] = SX_SLICE_ALL;
            continue;
        }
        int64_t start = gb(G, (int)d), stop = start + 1 + gb(G, (int)(d - start));
        at.slice[a] = (sx_slice){start, stop, 1 + gb(G, 2)};
    }
    return g_op(G, op, 1, &x, &at);
}

static int gen_unslice(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int x = g_pick(G);
    const dt_node *n = gn(G, x);
    if (n->rank == 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    at.rank = n->rank;
    for (int a = 0; a < n->rank; a++) {
        int64_t d = n->shape[a], step = 1 + gb(G, 2), start = gb(G, 2);
        at.slice[a] = (sx_slice){start, start + step * (d - 1) + 1, step};
        at.shape[a] = start + step * (d - 1) + 1 + gb(G, 2);
    }
    return g_op(G, op, 1, &x, &at);
}

static int gen_concat(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int in[3], m = 2 + gb(G, 2);
    in[0] = g_pick(G);
    const dt_node *n = gn(G, in[0]);
    if (n->rank == 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    at.axis = gb(G, n->rank);
    for (int k = 1; k < m; k++) {
        int cand[DT_MAX_NODES], nc = 0;
        for (int j = 0; j < G->p->n; j++) {
            const dt_node *o = gn(G, j);
            bool fit = o->rank == n->rank;
            for (int a = 0; a < n->rank && fit; a++)
                fit = a == at.axis || o->shape[a] == n->shape[a];
            if (fit)
                cand[nc++] = j;
        }
        if (nc > 0 && gb(G, 2)) {
            in[k] = cand[gb(G, nc)];
        } else {
            int64_t s[SX_MAX_RANK];
            memcpy(s, n->shape, sizeof s);
            s[at.axis] = 1 + gb(G, 3);
            in[k] = g_leaf(G, n->rank, s, -2, 2);
        }
        if (in[k] < 0)
            return -1;
    }
    return g_op(G, op, m, in, &at);
}

static int gen_permute(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int x = g_pick(G), r = gn(G, x)->rank;
    if (r < 2)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    for (int i = 0; i < r; i++)
        at.ints[i] = i;
    for (int i = r - 1; i > 0; i--) {
        int j = gb(G, i + 1);
        int64_t t = at.ints[i];
        at.ints[i] = at.ints[j];
        at.ints[j] = t;
    }
    return g_op(G, op, 1, &x, &at);
}

static int gen_pad(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int x = g_pick(G), r = gn(G, x)->rank;
    if (r == 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    for (int i = 0; i < r; i++) {
        at.ints[i] = gb(G, 2);
        at.ints2[i] = gb(G, 2);
    }
    at.alpha = gb(G, 2) ? 0 : gu(G, -1, 1);
    return g_op(G, op, 1, &x, &at);
}

/* Indices in [0, n) of rank 1: an argmax/argmin result when one fits, else a new index leaf
 * (not differentiated). */
static int g_index(gen *G, int64_t n, int64_t len)
{
    if (gb(G, 2)) {
        for (int j = G->p->n - 1; j >= 0; j--) {
            const dt_node *o = gn(G, j);
            if (o->kind != DT_OP || (o->op != SX_OP_ARGMAX && o->op != SX_OP_ARGMIN) ||
                o->rank != 1 || (len > 0 && o->shape[0] != len))
                continue;
            bool fit = true;
            for (int64_t k = 0; k < gsize(G, j); k++)
                fit = fit && gv(G, j, k) < (double)n;
            if (fit)
                return j;
        }
    }
    double v[DT_MAX_SIZE];
    int64_t s[1] = {len > 0 ? len : 1 + gb(G, 4)};
    for (int64_t k = 0; k < s[0]; k++)
        v[k] = (double)gb(G, (int)n);
    return g_leaf_vals(G, DT_INDEX, 1, s, v);
}

static int gen_one_hot(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    sx_cg_attr at = sx_cg_attr_default();
    at.index.count = 2 + gb(G, 3);
    int idx = g_index(G, at.index.count, 0);
    return idx < 0 ? -1 : g_op(G, op, 1, &idx, &at);
}

static int gen_gather(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int in[2];
    in[0] = g_pick(G);
    if (gn(G, in[0])->rank == 0)
        return -1;
    in[1] = g_index(G, gn(G, in[0])->shape[0], 0);
    return in[1] < 0 ? -1 : g_op(G, op, 2, in, NULL);
}

static int gen_scatter_add(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int in[2];
    in[0] = g_pick(G);
    if (gn(G, in[0])->rank == 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    at.index.count = 1 + gb(G, 4);
    in[1] = g_index(G, at.index.count, gn(G, in[0])->shape[0]);
    return in[1] < 0 ? -1 : g_op(G, op, 2, in, &at);
}

/* ---------------------------------------------------------------- products */

/* x as a matrix: itself when rank 2, else reshaped to (first dim, rest) or (1, n). */
static int g_matrix(gen *G, int x)
{
    const dt_node *n = gn(G, x);
    if (n->rank == 2)
        return x;
    int64_t s[2] = {n->rank >= 2 ? n->shape[0] : 1, 0};
    s[1] = gsize(G, x) / s[0];
    if (n->rank == 1 && gb(G, 2)) {
        s[0] = s[1];
        s[1] = 1;
    }
    return g_reshape(G, x, 2, s);
}

/* An existing node of exactly this shape, or a new leaf. */
static int g_of_shape(gen *G, int rank, const int64_t *s, double lo, double hi)
{
    if (gb(G, 2)) {
        int cand[DT_MAX_NODES], nc = 0;
        for (int j = 0; j < G->p->n; j++)
            if (sx_shape_equal(gn(G, j)->rank, gn(G, j)->shape, rank, s))
                cand[nc++] = j;
        if (nc > 0)
            return cand[gb(G, nc)];
    }
    return g_leaf(G, rank, s, lo, hi);
}

static int gen_matmul(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int in[3], n_in = 2;
    in[0] = g_pick(G);
    if (gn(G, in[0])->rank != 3 || gb(G, 2))
        in[0] = g_matrix(G, in[0]);
    if (in[0] < 0)
        return -1;
    const dt_node *a = gn(G, in[0]);
    sx_cg_attr at = sx_cg_attr_default();
    at.trans_a = gb(G, 3) == 0;
    at.trans_b = gb(G, 3) == 0;
    at.alpha = gb(G, 3) ? 1.0 : (gb(G, 2) ? 0.5 : -1.5);
    int64_t m = a->shape[a->rank - (at.trans_a ? 1 : 2)],
            k = a->shape[a->rank - (at.trans_a ? 2 : 1)];
    int64_t nn = 1 + gb(G, 4), bs[2] = {at.trans_b ? nn : k, at.trans_b ? k : nn};
    in[1] = g_of_shape(G, 2, bs, -1, 1);
    if (in[1] < 0)
        return -1;
    if (gb(G, 2)) { /* an addend that broadcasts to the result, as sx_ops.def allows */
        int r = a->rank;
        int64_t cs[SX_MAX_RANK];
        for (int i = 0; i < r - 2; i++)
            cs[i] = a->shape[i];
        cs[r - 2] = m;
        cs[r - 1] = nn;
        switch (gb(G, 5)) {
        case 0:
            break;
        case 1: /* a bias row (n) */
            cs[0] = nn;
            r = 1;
            break;
        case 2:
            cs[r - 2] = 1;
            break;
        case 3:
            cs[r - 1] = 1;
            break;
        default:
            r = 0;
            break;
        }
        in[2] = g_of_shape(G, r, cs, -1, 1);
        if (in[2] < 0)
            return -1;
        n_in = 3;
        at.beta = gb(G, 2) ? 1.0 : -0.5;
    }
    return g_op(G, op, n_in, in, &at);
}

static int gen_dot(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int a = g_pick(G), b;
    if (gb(G, 2)) {
        b = g_partner(G, a);
        if (b < 0 || gsize(G, b) != gsize(G, a))
            b = g_leaf(G, gn(G, a)->rank, gn(G, a)->shape, -1, 1);
    } else {
        int64_t s[1] = {gsize(G, a)};
        b = g_leaf(G, 1, s, -1, 1);
    }
    return g_bin(G, op, a, b);
}

/* ---------------------------------------------------------------- images */

/* x as an NHWC image: itself when rank 4, else reshaped to (1, h, w, c). */
static int g_image(gen *G, int x)
{
    if (gn(G, x)->rank == 4)
        return x;
    int64_t n = gsize(G, x), c = 1, s[4];
    for (int64_t d = 3; d >= 1; d--)
        if (n % d == 0 && gb(G, 2)) {
            c = d;
            break;
        }
    int64_t hw = n / c, h = 1;
    for (int64_t d = 1; d * d <= hw; d++)
        if (hw % d == 0)
            h = d;
    s[0] = 1;
    s[1] = h;
    s[2] = hw / h;
    s[3] = c;
    if (gb(G, 2)) {
        s[1] = hw / h;
        s[2] = h;
    }
    return g_reshape(G, x, 4, s);
}

/* A generator for the convolution and pooling options added later, seeded from G's next draw
 * without advancing G: the programs of a seed stay what they were before the options existed (their
 * other draws are unchanged), and gain the options. */
static sx_rng opt_rng(const gen *G)
{
    sx_rng c = G->rng, r;
    sx_rng_seed(&r, sx_rng_u64(&c) ^ 0x9e3779b97f4a7c15u);
    return r;
}

static int ob(sx_rng *r, int n)
{
    return n <= 1 ? 0 : (int)sx_rng_below(r, (uint64_t)n);
}

/* Strides and padding, and in half the draws the general options: dilation, explicit (often
 * asymmetric) pads or SAME_LOWER; groups over c input channels (c > 0: 1, 2 when c is even, or
 * c for depthwise; the caller multiplies the filter count by them) or, for a given filter
 * count f (f > 0), 1 or 2. */
static sx_conv2d_params rand_conv(gen *G, int64_t c, int64_t f)
{
    sx_conv2d_params p = {.stride_h = 1 + gb(G, 2),
                          .stride_w = 1 + gb(G, 2),
                          .padding = gb(G, 2) ? SX_PAD_SAME : SX_PAD_VALID};
    sx_rng o = opt_rng(G);
    int pick = ob(&o, 4);
    if (c > 0 && pick == 1 && c % 2 == 0)
        p.groups = 2;
    if (c > 0 && pick == 2 && c > 1 && c <= 8)
        p.groups = (int)c;
    if (f > 0 && pick == 1 && f % 2 == 0)
        p.groups = 2;
    if (ob(&o, 2)) {
        p.dilation_h = 1 + ob(&o, 2);
        p.dilation_w = 1 + ob(&o, 2);
        int mode = ob(&o, 3);
        if (mode == 1)
            p.padding = SX_PAD_SAME_LOWER;
        if (mode == 2) {
            p.padding = SX_PAD_EXPLICIT;
            p.pad_top = ob(&o, 3), p.pad_bottom = ob(&o, 3);
            p.pad_left = ob(&o, 3), p.pad_right = ob(&o, 3);
        }
    }
    return p;
}

static int groups_of(const sx_conv2d_params *p)
{
    return p->groups > 1 ? p->groups : 1;
}

/* Pooling: kernel, strides, padding, and in half the draws the general options: explicit pads
 * (each below the dilated kernel), ceil_mode, count_include_pad, dilation (max pooling only). */
static sx_pool2d_params rand_pool(gen *G, bool max)
{
    sx_pool2d_params p = {.kernel_h = 1 + gb(G, 3),
                          .kernel_w = 1 + gb(G, 3),
                          .stride_h = 1 + gb(G, 2),
                          .stride_w = 1 + gb(G, 2),
                          .padding = gb(G, 2) ? SX_PAD_SAME : SX_PAD_VALID};
    sx_rng o = opt_rng(G);
    if (ob(&o, 2)) {
        if (max) {
            p.dilation_h = 1 + ob(&o, 2);
            p.dilation_w = 1 + ob(&o, 2);
        }
        int mode = ob(&o, 3);
        if (mode == 1)
            p.padding = SX_PAD_SAME_LOWER;
        if (mode == 2) {
            int keh = (p.kernel_h - 1) * (p.dilation_h > 1 ? p.dilation_h : 1) + 1;
            int kew = (p.kernel_w - 1) * (p.dilation_w > 1 ? p.dilation_w : 1) + 1;
            p.padding = SX_PAD_EXPLICIT;
            p.pad_top = ob(&o, keh), p.pad_bottom = ob(&o, keh);
            p.pad_left = ob(&o, kew), p.pad_right = ob(&o, kew);
        }
        if (mode != 1)
            p.ceil_mode = ob(&o, 2);
        p.count_include_pad = max ? 0 : ob(&o, 2);
    }
    return p;
}

/* An input size along one axis for which a window op with output size `out` (window K after
 * dilation, stride s, padding mode with explicit pads pb/pa) gives out: the generators'
 * inverse of the size rule (the caller checks it with the real rule). */
static int64_t window_in_size(int64_t out, int64_t k, int dil, int s, sx_padding mode, int pb,
                              int pa)
{
    int64_t ke = (k - 1) * (dil > 1 ? dil : 1) + 1;
    if (mode == SX_PAD_SAME || mode == SX_PAD_SAME_LOWER)
        return out * s;
    if (mode == SX_PAD_EXPLICIT)
        return (out - 1) * s + ke - pb - pa;
    return (out - 1) * s + ke;
}

static bool conv_out(const int64_t x[4], const int64_t k[4], const sx_conv2d_params *p, int64_t *y)
{
    static char dummy[8];
    sx_tensor tx = sx_tensor_view(SX_F64, 4, x, dummy), tk = sx_tensor_view(SX_F64, 4, k, dummy);
    return sx_conv2d_shape("difftest", &tx, &tk, p, y) == SX_OK && shape_size(4, y) > 0;
}

static bool pool_out(const int64_t x[4], const sx_pool2d_params *p, int64_t *y)
{
    static char dummy[8];
    sx_tensor tx = sx_tensor_view(SX_F64, 4, x, dummy);
    return sx_pool2d_shape("difftest", &tx, p, y) == SX_OK && shape_size(4, y) > 0;
}

static int gen_conv2d(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int in[2];
    in[0] = g_image(G, g_pick(G));
    if (in[0] < 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    int64_t c = gn(G, in[0])->shape[3];
    at.conv = rand_conv(G, c, 0);
    int64_t ks[4] = {1 + gb(G, 3), 1 + gb(G, 3), c / groups_of(&at.conv),
                     (1 + gb(G, 3)) * groups_of(&at.conv)};
    in[1] = g_leaf(G, 4, ks, -1, 1);
    return in[1] < 0 ? -1 : g_op(G, op, 2, in, &at);
}

/* conv2d_backward_input(k, dy): dy an image, x's shape chosen so that conv2d(x, k) has dy's. */
static int gen_conv2d_backward_input(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int in[2];
    in[1] = g_image(G, g_pick(G));
    if (in[1] < 0)
        return -1;
    const dt_node *dy = gn(G, in[1]);
    sx_cg_attr at = sx_cg_attr_default();
    at.conv = rand_conv(G, 0, dy->shape[3]);
    int64_t ks[4] = {1 + gb(G, 3), 1 + gb(G, 3), 1 + gb(G, 2), dy->shape[3]}, y[4];
    const sx_conv2d_params *p = &at.conv;
    at.rank = 4;
    at.shape[0] = dy->shape[0];
    at.shape[3] = ks[2] * groups_of(p);
    at.shape[1] = window_in_size(dy->shape[1], ks[0], p->dilation_h, p->stride_h, p->padding,
                                 p->pad_top, p->pad_bottom);
    at.shape[2] = window_in_size(dy->shape[2], ks[1], p->dilation_w, p->stride_w, p->padding,
                                 p->pad_left, p->pad_right);
    if (at.shape[1] < 1 || at.shape[2] < 1)
        return -1;
    if (!conv_out(at.shape, ks, &at.conv, y) || !sx_shape_equal(4, y, 4, dy->shape))
        return -1;
    in[0] = g_leaf(G, 4, ks, -1, 1);
    return in[0] < 0 ? -1 : g_op(G, op, 2, in, &at);
}

static int gen_conv2d_backward_kernel(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int in[2];
    in[0] = g_image(G, g_pick(G));
    if (in[0] < 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    at.conv = rand_conv(G, gn(G, in[0])->shape[3], 0);
    at.rank = 4;
    int64_t y[4];
    at.shape[0] = 1 + gb(G, 3);
    at.shape[1] = 1 + gb(G, 3);
    at.shape[2] = gn(G, in[0])->shape[3] / groups_of(&at.conv);
    at.shape[3] = (1 + gb(G, 2)) * groups_of(&at.conv);
    if (!conv_out(gn(G, in[0])->shape, at.shape, &at.conv, y))
        return -1;
    in[1] = g_of_shape(G, 4, y, -1, 1);
    return in[1] < 0 ? -1 : g_op(G, op, 2, in, &at);
}

/* No near ties inside any window (checked over a superset of each window: the rows and columns
 * within a kernel's reach of it). */
static bool pool_ties_ok(gen *G, int x, const sx_pool2d_params *p)
{
    const int64_t *s = gn(G, x)->shape;
    const int64_t keh = (int64_t)(p->kernel_h - 1) * (p->dilation_h > 1 ? p->dilation_h : 1) + 1;
    const int64_t kew = (int64_t)(p->kernel_w - 1) * (p->dilation_w > 1 ? p->dilation_w : 1) + 1;
    for (int64_t n = 0; n < s[0]; n++)
        for (int64_t c = 0; c < s[3]; c++)
            for (int64_t i = 0; i < s[1]; i++)
                for (int64_t j = 0; j < s[2]; j++)
                    for (int64_t i2 = i; i2 < s[1] && i2 < i + keh; i2++)
                        for (int64_t j2 = j - kew + 1; j2 < s[2] && j2 < j + kew; j2++) {
                            if (j2 < 0 || (i2 == i && j2 <= j))
                                continue;
                            double a = gv(G, x, ((n * s[1] + i) * s[2] + j) * s[3] + c);
                            double b = gv(G, x, ((n * s[1] + i2) * s[2] + j2) * s[3] + c);
                            if ((a != b || !may_touch(G, x)) && fabs(a - b) < MARGIN)
                                return false;
                        }
    return true;
}

static int gen_pool(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int x = g_image(G, g_pick(G));
    if (x < 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    at.pool = rand_pool(G, op == SX_OP_MAXPOOL2D);
    if (op == SX_OP_MAXPOOL2D && !pool_ties_ok(G, x, &at.pool))
        return -1;
    return g_op(G, op, 1, &x, &at);
}

/* maxpool2d_backward(x, dy) and its relu form: dy of the pooled shape. */
static int gen_pool_backward(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int in[2];
    in[0] = g_image(G, g_pick(G));
    if (in[0] < 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    at.pool = rand_pool(G, true);
    int64_t y[4];
    if (!pool_out(gn(G, in[0])->shape, &at.pool, y) || !pool_ties_ok(G, in[0], &at.pool) ||
        (op == SX_OP_MAXPOOL2D_RELU_BACKWARD && !node_dom_ok(G, in[0], DOM_KINK0)))
        return -1;
    in[1] = g_of_shape(G, 4, y, -1, 1);
    return in[1] < 0 ? -1 : g_op(G, op, 2, in, &at);
}

static int gen_avgpool2d_backward(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int dy = g_image(G, g_pick(G));
    if (dy < 0)
        return -1;
    const int64_t *ys = gn(G, dy)->shape;
    sx_cg_attr at = sx_cg_attr_default();
    at.pool = rand_pool(G, false);
    const sx_pool2d_params *p = &at.pool;
    int64_t y[4];
    at.rank = 4;
    at.shape[0] = ys[0];
    at.shape[3] = ys[3];
    at.shape[1] =
        window_in_size(ys[1], p->kernel_h, 1, p->stride_h, p->padding, p->pad_top, p->pad_bottom);
    at.shape[2] =
        window_in_size(ys[2], p->kernel_w, 1, p->stride_w, p->padding, p->pad_left, p->pad_right);
    if (at.shape[1] < 1 || at.shape[2] < 1)
        return -1;
    if (!pool_out(at.shape, &at.pool, y) || !sx_shape_equal(4, y, 4, ys))
        return -1;
    return g_op(G, op, 1, &dy, &at);
}

/* ---------------------------------------------------------------- softmax family */

static int gen_softmax(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int x = g_pick(G);
    if (gn(G, x)->rank == 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    at.axis = gb(G, gn(G, x)->rank);
    return g_op(G, op, 1, &x, &at);
}

static int gen_softmax_backward(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int in[2];
    in[0] = g_pick(G);
    const dt_node *y = gn(G, in[0]);
    if (y->rank == 0)
        return -1;
    in[1] = g_of_shape(G, y->rank, y->shape, -1, 1);
    if (in[1] < 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    at.axis = gb(G, y->rank);
    return g_op(G, op, 2, in, &at);
}

/* softmax_xent(logits, target) [, dout]: target = softmax of a node of the logits' shape (rows
 * of probabilities, as the op assumes). */
static int gen_softmax_xent(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int in[3];
    in[0] = g_matrix(G, g_pick(G));
    if (in[0] < 0)
        return -1;
    const dt_node *l = gn(G, in[0]);
    sx_cg_attr sm = sx_cg_attr_default();
    sm.axis = 1;
    int t = g_of_shape(G, 2, l->shape, -2, 2);
    in[1] = t < 0 ? -1 : g_op(G, SX_OP_SOFTMAX, 1, &t, &sm);
    if (in[1] < 0)
        return -1;
    if (op == SX_OP_SOFTMAX_XENT)
        return g_op(G, op, 2, in, NULL);
    in[2] = g_of_shape(G, 1, l->shape, -1, 1);
    return in[2] < 0 ? -1 : g_op(G, op, 3, in, NULL);
}

/* batch norm (the norm ops with the per-channel axes) over x's last axis: the statistics of x
 * itself (as a network uses them), gamma and beta new leaves, dy a new leaf of x's shape; norm
 * with a residual (a new leaf of x's shape) half the time. */
static int gen_batch_norm(gen *G, sx_cg_op op, int x_id)
{
    int in[4] = {x_id};
    const dt_node *x = gn(G, in[0]);
    int64_t c = x->shape[x->rank - 1];
    int rank = x->rank;
    int64_t shape[SX_MAX_RANK];
    memcpy(shape, x->shape, sizeof shape);
    sx_cg_attr at = sx_cg_attr_default();
    at.norm.lead = 0, at.norm.tail = 1, at.norm.groups = c;
    in[1] = g_op(G, SX_OP_NORM_STATS, 1, in, &at);
    if (op == SX_OP_NORM_STATS || in[1] < 0)
        return in[1];
    if (op == SX_OP_NORM_SUMS) {
        in[2] = g_of_shape(G, rank, shape, -1, 1);
        return in[2] < 0 ? -1 : g_op(G, op, 3, in, &at);
    }
    at.norm.eps = 1e-2;
    if (op == SX_OP_NORM_DX) { /* x, stats, gamma, dy, norm_sums(x, stats, dy) */
        int dx[5] = {in[0], in[1], g_of_shape(G, 1, &c, 0.5, 1.5),
                     g_of_shape(G, rank, shape, -1, 1)};
        if (dx[2] < 0 || dx[3] < 0)
            return -1;
        int sin[3] = {in[0], in[1], dx[3]};
        dx[4] = g_op(G, SX_OP_NORM_SUMS, 3, sin, &at);
        return dx[4] < 0 ? -1 : g_op(G, op, 5, dx, &at);
    }
    int bn[5] = {in[0], in[1], g_of_shape(G, 1, &c, 0.5, 1.5), g_of_shape(G, 1, &c, -1, 1), -1};
    if (bn[2] < 0 || bn[3] < 0)
        return -1;
    /* half the time a residual of x's shape (a residual block's end, sx_cg_norm_res) */
    if (sx_rng_below(&G->rng, 2) == 0)
        return g_op(G, op, 4, bn, &at);
    bn[4] = g_of_shape(G, rank, shape, -2, 2);
    return bn[4] < 0 ? -1 : g_op(G, op, 5, bn, &at);
}

/* normalisation of a node: a third of the time (norm_dx always) batch norm (gen_batch_norm),
 * else random lead and tail axes, one group or one channel per group; the statistics of the node
 * itself, gamma and beta new leaves (or none), dy a new leaf of x's shape. */
static int gen_norm(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int in[4];
    in[0] = g_pick(G);
    const dt_node *x = gn(G, in[0]);
    if (x->rank == 0)
        return -1;
    if (op == SX_OP_NORM_DX || gb(G, 3) == 0)
        return gen_batch_norm(G, op, in[0]);
    int rank = x->rank;
    int64_t shape[SX_MAX_RANK];
    memcpy(shape, x->shape, sizeof shape);
    sx_cg_attr at = sx_cg_attr_default();
    at.ints[0] = gb(G, rank);                       /* lead */
    at.ints[1] = 1 + gb(G, rank - (int)at.ints[0]); /* tail */
    int64_t c = 1;
    for (int i = rank - (int)at.ints[1]; i < rank; i++)
        c *= shape[i];
    if (c < 1) /* an empty tail: no group to normalise (and no channel count to divide by) */
        return -1;
    at.ints[2] = gb(G, 2) ? c : 1;
    /* A group of one element normalises to exactly 0 whatever x is: a constant that puts the
     * ops after it (pow, sqrt, ...) on their singular points. Groups of at least two. */
    int64_t group = c / at.ints[2];
    for (int i = (int)at.ints[0]; i < rank - (int)at.ints[1]; i++)
        group *= shape[i];
    if (group < 2 && at.ints[2] > 1) {
        group *= at.ints[2];
        at.ints[2] = 1;
    }
    if (group < 2)
        return -1;
    in[1] = g_op(G, SX_OP_NORM_STATS, 1, in, &at);
    if (op == SX_OP_NORM_STATS || in[1] < 0)
        return in[1];
    if (op == SX_OP_NORM_SUMS) {
        in[2] = g_of_shape(G, rank, shape, -1, 1);
        return in[2] < 0 ? -1 : g_op(G, op, 3, in, &at);
    }
    at.alpha = 1e-2;
    if (gb(G, 2))
        return g_op(G, op, 2, in, &at);
    int tail = (int)at.ints[1];
    in[2] = g_of_shape(G, tail, shape + rank - tail, 0.5, 1.5);
    in[3] = g_of_shape(G, tail, shape + rank - tail, -1, 1);
    return in[2] < 0 || in[3] < 0 ? -1 : g_op(G, op, 4, in, &at);
}

/* dropout_mask times a node of its shape (the mask alone is a constant). */
static int gen_dropout_mask(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int x = g_pick(G);
    sx_cg_attr at = sx_cg_attr_default();
    static const double ps[3] = {0, 0.25, 0.5};
    at.alpha = ps[gb(G, 3)];
    at.rank = gn(G, x)->rank;
    memcpy(at.shape, gn(G, x)->shape, sizeof at.shape);
    int m = g_op(G, op, 0, NULL, &at);
    return m < 0 ? -1 : g_bin(G, SX_OP_MUL, x, m);
}

/* ---------------------------------------------------------------- linear algebra */

/* A square matrix built from x, well conditioned: tanh(x) (entries below 1) as an (m, m) matrix
 * (by reshape when x has m*m elements, else the Gram matrix X X^T of x as a matrix; always Gram
 * when `spd`), plus a constant diagonal whose entries (i + 1) * (1 + 2 * r) exceed every
 * Gershgorin radius r: invertible, and with `spd` positive definite with distinct eigenvalues
 * (disjoint discs), so every linalg op is smooth there. */
static int g_square(gen *G, int x, bool spd)
{
    x = g_un(G, SX_OP_TANH, x);
    if (x < 0)
        return -1;
    int64_t n = gsize(G, x), m = 1, s[2];
    while ((m + 1) * (m + 1) <= n)
        m++;
    int a;
    if (!spd && m * m == n && m <= 4) {
        s[0] = s[1] = m;
        a = g_reshape(G, x, 2, s);
    } else {
        int xm = g_matrix(G, x);
        if (xm < 0 || gn(G, xm)->shape[0] > 4)
            return -1;
        int in[2] = {xm, xm};
        sx_cg_attr at = sx_cg_attr_default();
        at.alpha = 1;
        at.trans_b = true;
        a = g_op(G, SX_OP_MATMUL, 2, in, &at);
    }
    if (a < 0)
        return -1;
    m = gn(G, a)->shape[0];
    double r = 0, d[16] = {0};
    for (int64_t i = 0; i < m; i++) {
        double ri = 0;
        for (int64_t j = 0; j < m; j++)
            ri += fabs(gv(G, a, i * m + j));
        r = fmax(r, ri);
    }
    r = ceil(r);
    for (int64_t i = 0; i < m; i++)
        d[i * m + i] = (double)(i + 1) * (1 + 2 * r);
    s[0] = s[1] = m;
    return g_bin(G, SX_OP_ADD, a, g_leaf_vals(G, DT_CONST, 2, s, d));
}

static int gen_linalg(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    bool spd = op == SX_OP_CHOLESKY || op == SX_OP_EIGH_W || op == SX_OP_EIGH_V ||
               op == SX_OP_SVD_S || gb(G, 2);
    int a = g_square(G, g_pick(G), spd);
    return a < 0 ? -1 : g_un(G, op, a);
}

static int gen_solve(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    int a = g_square(G, g_pick(G), gb(G, 2));
    if (a < 0)
        return -1;
    int64_t s[2] = {gn(G, a)->shape[0], 1 + gb(G, 3)};
    int b = g_of_shape(G, gb(G, 2) ? 1 : 2, s, -2, 2);
    return g_bin(G, op, a, b);
}

/* seq(x, after) = x, ordered after another node. */
static int gen_seq(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    return g_bin(G, op, g_pick(G), gb(G, G->p->n));
}

/* ---------------------------------------------------------------- ops from their samples */

/* A leaf of a sample's graph as a program leaf with its values: an input or parameter when the
 * sample differentiates with respect to it, a constant, or else an index leaf. */
static int sample_leaf(gen *G, const os_sample *s, const sx_cg_node *n)
{
    const sx_tensor *t = sx_cg_value(n);
    double v[DT_MAX_SIZE];
    if (t == NULL || t->size > DT_MAX_SIZE)
        return -1;
    for (int64_t k = 0; k < t->size; k++)
        v[k] = sx_tensor_get(t, k);
    sx_cg_op op = sx_cg_node_op(n);
    dt_kind kind = op == SX_OP_CONST ? DT_CONST : DT_INDEX;
    for (int i = 0; i < s->n_leaves; i++)
        if (s->leaf[i] == n && s->wrt[i])
            kind = op == SX_OP_PARAM ? DT_PARAM : DT_INPUT;
    return g_leaf_vals(G, kind, t->rank, t->shape, v);
}

/* SAMPLE(w): the op as its own sample builds it (opsamples.c: a random variant, in the program's
 * dtype), copied into the program node by node (leaves with the sample's values, ops with its
 * attributes); the program then composes other ops on the result. A variant with a node above
 * DT_MAX_SIZE elements is refused. For ops that need no generator of their own. */
static int gen_sample(gen *G, sx_cg_op op, int dom)
{
    (void)dom;
    const int start = G->p->n, saved_out = G->p->out;
    sx_cg_graph *sg = NULL;
    if (sx_cg_graph_new(SX_CG_LAZY, G->p->dt, &sg) != SX_OK)
        return -1;
    os_sample s;
    int idx[DT_MAX_NODES], last = -1;
    uint64_t seed = sx_rng_u64(&G->rng);
    sx_cg_node *out = os_build(sg, op, G->p->dt, seed, gb(G, os_ops[op].n_variants), &s);
    int64_t size = sx_cg_graph_size(sg);
    bool ok = out != NULL && size <= DT_MAX_NODES && sx_cg_eval(sg, 1, &out) == SX_OK;
    for (int64_t i = 0; ok && i < size; i++) {
        sx_cg_node *n = sx_cg_graph_node(sg, i);
        idx[i] = -1;
        if (n == NULL)
            continue;
        int n_in = sx_cg_node_n_inputs(n), in[DT_MAX_IN];
        if (sx_cg_op_flags(sx_cg_node_op(n)) & SX_OPF_LEAF) {
            last = sample_leaf(G, &s, n);
        } else if (n_in <= DT_MAX_IN) {
            for (int k = 0; k < n_in; k++)
                in[k] = idx[sx_cg_node_id(sx_cg_node_input(n, k))];
            last = g_op(G, sx_cg_node_op(n), n_in, in, sx_cg_node_attr(n));
        } else {
            last = -1;
        }
        idx[i] = last;
        ok = last >= 0 && n != out;
    }
    sx_cg_graph_free(sg);
    if (last < 0 || G->p->node[last].op != op) {
        pop_to(G->p, start);
        G->p->out = saved_out;
        return -1;
    }
    return last;
}

/* ---------------------------------------------------------------- the op table */

/* The rows DT_<name> (beside each op's sample in samples/<family>.c, through opsamples.c):
 * generator, weight, domain; or EXCLUDED(reason). Leaves are made by every generator (LEAF).
 * A row of sx_ops.def without its DT_<name> does not compile. The macros below spell them. */
#define EXCLUDED(why) NULL, 0, 0, why
#define LEAF NULL, 0, 0, NULL
#define UN(dom) gen_unary, 2, dom, NULL
#define BIN(dom) gen_binary, 3, dom, NULL
#define FOLD(dom) gen_fold, 2, dom, NULL
#define GEN(fn, w) fn, w, 0, NULL
#define SAMPLE(w) gen_sample, w, 0, NULL

typedef struct gen_row {
    gen_fn *fn;
    int weight, dom;
    const char *excluded;
} gen_row;

/* Unary maps come from their sx_map.def rows: drawn on the row's domain (DOM_<dom>) with weight
 * 2, or more for the ops that dominate real networks. */
#define UN_WEIGHT(NAME)                                                                            \
    (SX_OP_##NAME == SX_OP_SQRT                                ? 6                                 \
     : SX_OP_##NAME == SX_OP_LOG || SX_OP_##NAME == SX_OP_RELU ? 4                                 \
                                                               : 2)
/* The rows of the table, by op: DT_<name> for every op but the unary maps (sx_ops.def's other
 * rows and the binary rows of sx_binary.def), the map rows made from sx_map.def. Twice: the
 * generator's rows, and their public view (weight and reason) for the tests. */
static const gen_row gen_rows[SX_OP_COUNT] = {
#define SX_OPS_NO_ELEMWISE
#define X(NAME, name, arity, shape, eval, flags, kernel, nograd) [SX_OP_##NAME] = {DT_##name},
#include "sx_ops.def"
#undef X
#undef SX_OPS_NO_ELEMWISE
#define SX_BINARY_ROW(NAME, name, ...) [SX_OP_##NAME] = {DT_##name},
#include "sx_binary.def"
#undef SX_BINARY_ROW
#define SX_MAP_ROW(NAME, name, expr, ref, param, dom, at, nograd)                                  \
    [SX_OP_##NAME] = {gen_unary, UN_WEIGHT(NAME), DOM_##dom, NULL},
#include "sx_map.def"
#undef SX_MAP_ROW
};

#define PUBLIC_ROW(...) PUBLIC_ROW_(__VA_ARGS__)
#define PUBLIC_ROW_(fn, w, dom, why) w, why
const dt_rule dt_rules[SX_OP_COUNT] = {
#define SX_OPS_NO_ELEMWISE
#define X(NAME, name, arity, shape, eval, flags, kernel, nograd)                                   \
    [SX_OP_##NAME] = {SX_OP_##NAME, #name, PUBLIC_ROW(DT_##name)},
#include "sx_ops.def"
#undef X
#undef SX_OPS_NO_ELEMWISE
#define SX_BINARY_ROW(NAME, name, ...)                                                             \
    [SX_OP_##NAME] = {SX_OP_##NAME, #name, PUBLIC_ROW(DT_##name)},
#include "sx_binary.def"
#undef SX_BINARY_ROW
#define SX_MAP_ROW(NAME, name, expr, ref, param, dom, at, nograd)                                  \
    [SX_OP_##NAME] = {SX_OP_##NAME, #name, UN_WEIGHT(NAME), NULL},
#include "sx_map.def"
#undef SX_MAP_ROW
};

_Static_assert(sizeof gen_rows / sizeof gen_rows[0] == SX_OP_COUNT, "one generator row per op");

/* Eigenvalues of the symmetric n x n matrix a (n <= 8), by cyclic Jacobi rotations, into w. */
static void sym_eigs(int n, const double *a_in, double *w)
{
    double a[64];
    memcpy(a, a_in, (size_t)(n * n) * sizeof *a);
    for (int sweep = 0; sweep < 50; sweep++) {
        double off = 0;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++)
                off += a[p * n + q] * a[p * n + q];
        if (off < 1e-30)
            break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                if (a[p * n + q] == 0)
                    continue;
                double th = (a[q * n + q] - a[p * n + p]) / (2 * a[p * n + q]);
                double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1));
                double c = 1 / sqrt(t * t + 1), sn = t * c;
                for (int k = 0; k < n; k++) { /* columns p, q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - sn * akq;
                    a[k * n + q] = sn * akp + c * akq;
                }
                for (int k = 0; k < n; k++) { /* rows p, q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - sn * aqk;
                    a[q * n + k] = sn * apk + c * aqk;
                }
            }
    }
    for (int k = 0; k < n; k++)
        w[k] = a[k * n + k];
}

/* What sx_autodiff.h asks of linear algebra inputs, checked on the values (the generator's
 * diagonal shifts satisfy it; a shrunk program that drops them must too): singular values at
 * least 0.1 (invertible, full rank), and for svd_s distinct ones; for cholesky and eigh the
 * symmetric matrix their lower triangle holds, positive definite (cholesky) or with distinct
 * eigenvalues (eigh). Distinct: gaps of at least 0.05 * (1 + the largest). */
static bool linalg_ok(gen *G, int i)
{
    const dt_node *d = gn(G, i), *an = gn(G, d->in[0]);
    if (an->rank != 2 || an->shape[0] > 8 || an->shape[1] > 8)
        return true;
    int m = (int)an->shape[0], n = (int)an->shape[1], k = m < n ? m : n;
    double a[64], s[64], w[8];
    for (int e = 0; e < m * n; e++)
        a[e] = gv(G, d->in[0], e);
    bool sym = d->op == SX_OP_CHOLESKY || d->op == SX_OP_EIGH_W || d->op == SX_OP_EIGH_V;
    if (sym) {
        for (int r = 0; r < n; r++)
            for (int c = r + 1; c < n; c++)
                a[r * n + c] = a[c * n + r];
        sym_eigs(n, a, w);
    } else { /* singular values: square roots of the eigenvalues of the smaller Gram matrix */
        for (int r = 0; r < k; r++)
            for (int c = 0; c < k; c++) {
                double acc = 0;
                for (int j = 0; j < (m < n ? n : m); j++)
                    acc += m < n ? a[r * n + j] * a[c * n + j] : a[j * n + r] * a[j * n + c];
                s[r * k + c] = acc;
            }
        sym_eigs(k, s, w);
        for (int r = 0; r < k; r++)
            w[r] = sqrt(fmax(w[r], 0));
    }
    int nw = sym ? n : k;
    double big = 0;
    for (int r = 0; r < nw; r++)
        big = fmax(big, fabs(w[r]));
    for (int r = 0; r < nw; r++) {
        if ((!sym || d->op == SX_OP_CHOLESKY) && w[r] < 0.1)
            return false;
        for (int c = r + 1;
             c < nw && (d->op == SX_OP_SVD_S || d->op == SX_OP_EIGH_W || d->op == SX_OP_EIGH_V);
             c++)
            if (fabs(w[r] - w[c]) < 0.05 * (1 + big))
                return false;
    }
    return true;
}

/* The domain rule of node i's op on its inputs' values (the generator refuses nodes that break
 * it; so does the shrinker, through prog_in_domain). */
static bool op_ok(gen *G, int i)
{
    const dt_node *d = gn(G, i);
    const gen_row *row = &gen_rows[d->op];
    if (d->kind != DT_OP)
        return true;
    if (row->fn == gen_linalg || row->fn == gen_solve)
        return linalg_ok(G, i);
    if (row->fn == gen_unary)
        return node_dom_ok(G, d->in[0], (dom1)row->dom);
    if (row->fn == gen_binary || row->fn == gen_where)
        return bin_ok(G, i, row->dom);
    if (row->fn == gen_fold && row->dom != DOMF_NONE) {
        int r = gn(G, d->in[0])->rank;
        unsigned axes = d->attr.axes == SX_AXES_ALL ? (1u << r) - 1 : d->attr.axes;
        return fold_ok(G, d->in[0], axes, row->dom,
                       d->op == SX_OP_REDUCE_MIN || d->op == SX_OP_ARGMIN);
    }
    if (d->op == SX_OP_MAXPOOL2D || d->op == SX_OP_MAXPOOL2D_BACKWARD ||
        d->op == SX_OP_MAXPOOL2D_RELU_BACKWARD)
        return pool_ties_ok(G, d->in[0], &d->attr.pool) &&
               (d->op != SX_OP_MAXPOOL2D_RELU_BACKWARD || node_dom_ok(G, d->in[0], DOM_KINK0));
    return true;
}
_Static_assert(sizeof dt_rules / sizeof dt_rules[0] == SX_OP_COUNT, "one rule per op");

/* ---------------------------------------------------------------- idioms

 * Compositions users write and the optimiser passes look for (gemm folding, FMA, algebraic
 * simplification, broadcast elimination): drawn a quarter of the time, so that every pass has
 * its patterns in the CI seeds. */

static int g_const_scalar_op(gen *G, sx_cg_op op, int x, double c)
{
    return g_bin(G, op, x, g_scalar(G, c));
}

static int idiom_dense(gen *G)
{
    int x = g_matrix(G, g_pick(G));
    if (x < 0)
        return -1;
    int64_t m = gn(G, x)->shape[0], k = gn(G, x)->shape[1], n = 1 + gb(G, 4);
    int64_t ws[2] = {k, n}, bs[2] = {1, n};
    sx_cg_attr at = sx_cg_attr_default();
    at.alpha = 1;
    int in[2] = {x, g_leaf(G, 2, ws, -1, 1)};
    int y = in[1] < 0 ? -1 : g_op(G, SX_OP_MATMUL, 2, in, &at);
    int b;
    switch (gb(G, 4)) {
    case 0:
        b = g_leaf(G, 1, &n, -1, 1); /* (n): the usual bias */
        break;
    case 1:
        b = g_leaf(G, 2, bs, -1, 1); /* (1, n) */
        break;
    case 2:
        bs[0] = m, bs[1] = 1;
        b = g_leaf(G, 2, bs, -1, 1); /* (m, 1) */
        break;
    default:
        b = g_leaf(G, 0, NULL, -1, 1);
        break;
    }
    y = gb(G, 2) ? g_bin(G, SX_OP_ADD, y, b) : g_bin(G, SX_OP_ADD, b, y);
    switch (gb(G, 4)) {
    case 0:
        return g_un(G, SX_OP_TANH, y);
    case 1:
        return g_un(G, SX_OP_SIGMOID, y);
    default:
        return y;
    }
}

static int idiom_gemm_fold(gen *G)
{
    int a = g_matrix(G, g_pick(G));
    if (a < 0)
        return -1;
    bool ta = gb(G, 2);
    if (ta) {
        sx_cg_attr pt = sx_cg_attr_default();
        pt.ints[0] = 1;
        a = g_op(G, SX_OP_PERMUTE, 1, &a, &pt);
        if (a < 0)
            return -1;
    }
    int64_t bs[2] = {gn(G, a)->shape[1], 1 + gb(G, 3)};
    sx_cg_attr at = sx_cg_attr_default();
    at.alpha = 1;
    int in[2] = {a, g_leaf(G, 2, bs, -1, 1)};
    int y = in[1] < 0 ? -1 : g_op(G, SX_OP_MATMUL, 2, in, &at);
    if (gb(G, 2))
        y = g_const_scalar_op(G, gb(G, 2) ? SX_OP_MUL : SX_OP_DIV, y, gb(G, 2) ? 0.5 : -2);
    if (gb(G, 2) && y >= 0) /* an addend of the result's shape */
        y = g_bin(G, gb(G, 2) ? SX_OP_ADD : SX_OP_SUB, y, g_leaf(G, 2, gn(G, y)->shape, -1, 1));
    return y;
}

static int idiom_fma(gen *G)
{
    int a = g_pick(G), b = g_partner(G, a), c = g_partner(G, a);
    int m = g_bin(G, SX_OP_MUL, a, b);
    return gb(G, 2) ? g_bin(G, SX_OP_ADD, m, c) : g_bin(G, SX_OP_ADD, c, m);
}

static int idiom_simplify(gen *G)
{
    int x = g_pick(G);
    switch (gb(G, 10)) {
    case 0:
        return g_const_scalar_op(G, SX_OP_ADD, x, 0);
    case 1:
        return g_const_scalar_op(G, SX_OP_MUL, x, 1);
    case 2:
        return g_bin(G, SX_OP_ADD, g_const_scalar_op(G, SX_OP_MUL, x, 0), g_partner(G, x));
    case 3:
        return g_un(G, SX_OP_NEG, g_un(G, SX_OP_NEG, x));
    case 4:
        return g_un(G, SX_OP_LOG, g_un(G, SX_OP_EXP, x));
    case 5:
        x = g_adapt(G, x, DOM_POS);
        return g_un(G, SX_OP_EXP, g_un(G, SX_OP_LOG, x));
    case 6:
        return g_const_scalar_op(G, SX_OP_DIV, x, 1);
    case 7:
        return g_const_scalar_op(G, SX_OP_POW, g_adapt(G, x, DOM_POS), 1);
    case 8: {
        int64_t s[SX_MAX_RANK];
        int r = factor_shape(G, gsize(G, x), s);
        int y = g_reshape(G, x, r, s);
        r = factor_shape(G, gsize(G, x), s);
        return g_reshape(G, y, r, s);
    }
    default: { /* a sum over an axis of size 1 */
        int64_t s[SX_MAX_RANK + 1];
        s[0] = 1;
        memcpy(s + 1, gn(G, x)->shape, (size_t)gn(G, x)->rank * sizeof *s);
        int y = g_reshape(G, x, gn(G, x)->rank + 1, s);
        sx_cg_attr at = sx_cg_attr_default();
        at.axes = 1;
        return y < 0 ? -1 : g_op(G, SX_OP_SUM, 1, &y, &at);
    }
    }
}

static int idiom_broadcast(gen *G)
{
    int y = g_pick(G);
    const dt_node *n = gn(G, y);
    int64_t s[SX_MAX_RANK];
    memcpy(s, n->shape, sizeof s);
    for (int i = 0; i < n->rank; i++)
        if (gb(G, 2))
            s[i] = 1;
    int x = g_leaf(G, n->rank, s, -1, 1);
    sx_cg_attr at = sx_cg_attr_default();
    at.rank = n->rank;
    memcpy(at.shape, n->shape, sizeof at.shape);
    int b = x < 0 ? -1 : g_op(G, SX_OP_BROADCAST, 1, &x, &at);
    return g_bin(G, gb(G, 2) ? SX_OP_MUL : SX_OP_ADD, b, y);
}

/* conv2d(x, k) (times a per-channel scale: an inference batch norm) + bias, then relu */
static int idiom_conv_bias(gen *G)
{
    int x = g_image(G, g_pick(G));
    if (x < 0)
        return -1;
    sx_cg_attr at = sx_cg_attr_default();
    at.conv = rand_conv(G, gn(G, x)->shape[3], 0);
    int64_t ks[4] = {1 + gb(G, 3), 1 + gb(G, 3), gn(G, x)->shape[3] / groups_of(&at.conv),
                     (1 + gb(G, 3)) * groups_of(&at.conv)};
    int in[2] = {x, g_leaf(G, 4, ks, -1, 1)};
    int y = in[1] < 0 ? -1 : g_op(G, SX_OP_CONV2D, 2, in, &at);
    if (y >= 0 && gb(G, 2)) /* inference batch norm: a scale per channel (SX_PASS_BN_FOLD) */
        y = g_bin(G, SX_OP_MUL, y, g_leaf(G, 1, &ks[3], 0.5, 1.5));
    y = g_bin(G, SX_OP_ADD, y, g_leaf(G, 1, &ks[3], -1, 1));
    return y >= 0 && node_dom_ok(G, y, DOM_KINK0) ? g_un(G, SX_OP_RELU, y) : y;
}

static int idiom_xent(gen *G)
{
    int l = idiom_dense(G);
    if (l < 0 || gn(G, l)->rank != 2)
        return -1;
    sx_cg_attr sm = sx_cg_attr_default();
    sm.axis = 1;
    int t = g_leaf(G, 2, gn(G, l)->shape, -2, 2);
    int in[2] = {l, t < 0 ? -1 : g_op(G, SX_OP_SOFTMAX, 1, &t, &sm)};
    return in[1] < 0 ? -1 : g_op(G, SX_OP_SOFTMAX_XENT, 2, in, NULL);
}

/* round of exact halves (constants: ties are where the rounding rule shows), plus a node */
static int idiom_round_halves(gen *G)
{
    int x = g_pick(G);
    double v[DT_MAX_SIZE];
    for (int64_t k = 0; k < gsize(G, x); k++)
        v[k] = (double)(gb(G, 7) - 3) + 0.5;
    int c = g_leaf_vals(G, DT_CONST, gn(G, x)->rank, gn(G, x)->shape, v);
    return g_bin(G, SX_OP_ADD, x, g_un(G, SX_OP_ROUND, c));
}

static int gen_idiom(gen *G)
{
    switch (gb(G, 8)) {
    case 7:
        return idiom_round_halves(G);
    case 0:
        return idiom_dense(G);
    case 1:
        return idiom_gemm_fold(G);
    case 2:
        return idiom_fma(G);
    case 3:
        return idiom_simplify(G);
    case 4:
        return idiom_broadcast(G);
    case 5:
        return idiom_conv_bias(G);
    default:
        return idiom_xent(G);
    }
}

/* ---------------------------------------------------------------- a whole program */

static sx_cg_op pick_op(gen *G)
{
    int total = 0;
    for (int op = 0; op < SX_OP_COUNT; op++)
        total += gen_rows[op].weight;
    int r = gb(G, total);
    for (int op = 0; op < SX_OP_COUNT; op++) {
        if (r < gen_rows[op].weight)
            return (sx_cg_op)op;
        r -= gen_rows[op].weight;
    }
    return SX_OP_ADD;
}

dt_prog *dt_generate(uint64_t seed, sx_dtype dt, int depth)
{
    gen G;
    memset(&G, 0, sizeof G);
    sx_rng_seed(&G.rng, seed * 0x9e3779b97f4a7c15ULL + 0xd1ffULL);
    G.p = dt_prog_new(dt);
    if (G.p == NULL)
        return NULL;
    G.p->seed = seed;
    int target = depth >= 3 && depth <= 8 ? depth : 3 + gb(&G, 6);
    for (int attempt = 0; attempt < 50; attempt++) {
        pop_to(G.p, 0);
        sx_cg_graph_free(G.g);
        G.g = NULL;
        if (sx_cg_graph_new(SX_CG_LAZY, SX_F64, &G.g) != SX_OK)
            break;
        int64_t s[SX_MAX_RANK];
        int r = rand_shape(&G, 24, s);
        G.last = g_leaf_kind(&G, DT_INPUT, r, s, -2, 2);
        for (int step = 0; step < 80 && G.last >= 0 && G.depth[G.last] < target; step++) {
            int n0 = G.p->n;
            int i;
            if (gb(&G, 4) == 0) {
                i = gen_idiom(&G);
            } else {
                sx_cg_op op = pick_op(&G);
                i = gen_rows[op].fn(&G, op, gen_rows[op].dom);
            }
            if (i < 0) {
                pop_to(G.p, n0);
                continue;
            }
            G.last = i;
        }
        if (G.last >= 0 && G.depth[G.last] >= target)
            break;
    }
    sx_cg_graph_free(G.g);
    dt_prog *p = G.p;
    p->out = G.last >= 0 ? G.last : 0;
    prune(p);
    for (int i = 0; i < p->n; i++)
        dt_op_made[p->node[i].op]++;
    /* L = sum(y * w): random weights, or all ones now and then */
    if (gb(&G, 4) != 0) {
        int64_t n = shape_size(p->node[p->out].rank, p->node[p->out].shape);
        p->w = malloc((size_t)(n > 0 ? n : 1) * sizeof *p->w);
        for (int64_t k = 0; p->w != NULL && k < n; k++)
            p->w[k] = to_dtype(dt, gu(&G, -1, 1));
    }
    return p;
}

/* ---------------------------------------------------------------- instances */

/* A program built in a graph: the nodes, y, L and the differentiated leaves. */
typedef struct inst {
    sx_cg_graph *g;
    sx_cg_node *nd[DT_MAX_NODES];
    sx_cg_node *y, *L;
    int nx;
    int xi[DT_MAX_NODES]; /* program index of leaf k */
    sx_cg_node *xs[DT_MAX_NODES];
    sx_cg_node *gr[DT_MAX_NODES];
    bool has_grads;
    char err[512];
} inst;

static void inst_free(inst *I)
{
    sx_cg_graph_free(I->g);
    memset(I, 0, sizeof *I);
}

static bool is_wrt(const dt_node *d)
{
    return d->kind == DT_INPUT || d->kind == DT_PARAM;
}

static sx_status inst_fail(inst *I, sx_status st, const char *what)
{
    snprintf(I->err, sizeof I->err, "%s: %s", what, sx_last_error());
    return st != SX_OK ? st : SX_E_STATE;
}

/* Build p in a new graph of the given mode and dtype, with L = sum(y * w); with `grads`,
 * dL/dleaves too (a failure there is reported by the status, with I->has_grads false). */
static sx_status inst_build(inst *I, const dt_prog *p, sx_cg_mode mode, sx_dtype dt, bool grads)
{
    memset(I, 0, sizeof *I);
    sx_status st = sx_cg_graph_new(mode, dt, &I->g);
    if (st != SX_OK)
        return inst_fail(I, st, "sx_cg_graph_new");
    for (int i = 0; i < p->n; i++) {
        I->nd[i] = build_node(I->g, p, i, I->nd, dt);
        if (I->nd[i] == NULL) {
            char what[64];
            snprintf(what, sizeof what, "building node n%d (%s)", i, sx_cg_op_name(p->node[i].op));
            return inst_fail(I, sx_cg_graph_status(I->g), what);
        }
        if (is_wrt(&p->node[i])) {
            I->xi[I->nx] = i;
            I->xs[I->nx++] = I->nd[i];
        }
    }
    I->y = I->nd[p->out];
    if (p->w != NULL) {
        sx_cg_node *w = dt_const(I->g, dt, sx_cg_node_rank(I->y), sx_cg_node_shape(I->y), p->w);
        I->L = sx_cg_sum(I->g, sx_cg_mul(I->g, I->y, w), SX_AXES_ALL, false);
    } else {
        I->L = sx_cg_sum(I->g, I->y, SX_AXES_ALL, false);
    }
    if (I->L == NULL)
        return inst_fail(I, sx_cg_graph_status(I->g), "building L");
    if (grads && I->nx > 0) {
        st = sx_ad_grad(I->g, I->L, I->nx, I->xs, I->gr);
        if (st != SX_OK)
            return inst_fail(I, st, "sx_ad_grad");
        I->has_grads = true;
    }
    return SX_OK;
}

/* Give every differentiated leaf the values it has in p (or in a program of the same shapes). */
static sx_status inst_set_leaves(inst *I, const dt_prog *p, sx_dtype dt)
{
    for (int k = 0; k < I->nx; k++) {
        const dt_node *d = &p->node[I->xi[k]];
        int64_t n = shape_size(d->rank, d->shape);
        sx_tensor *t = NULL;
        sx_status st = sx_tensor_from_doubles(dt, d->rank, d->shape, d->val, n, &t);
        if (st == SX_OK)
            st = d->kind == DT_PARAM ? sx_cg_leaf_set(I->g, I->xs[k], t)
                                     : sx_cg_input_set(I->g, I->xs[k], t, SX_CG_COPY);
        sx_tensor_free(t);
        if (st != SX_OK)
            return inst_fail(I, st, "setting a leaf");
    }
    return SX_OK;
}

/* The outputs compared across modes: y, L, then the gradients. */
static int inst_outputs(const inst *I, sx_cg_node **o)
{
    int n = 0;
    o[n++] = I->y;
    o[n++] = I->L;
    for (int k = 0; I->has_grads && k < I->nx; k++)
        o[n++] = I->gr[k];
    return n;
}

/* A snapshot of one output's value. */
typedef struct snap {
    int rank;
    int64_t shape[SX_MAX_RANK];
    int64_t n;
    double *v;
} snap;

static bool snap_take(snap *s, const sx_cg_node *node)
{
    const sx_tensor *t = sx_cg_value(node);
    memset(s, 0, sizeof *s);
    if (t == NULL)
        return false;
    s->rank = t->rank;
    memcpy(s->shape, t->shape, sizeof s->shape);
    s->n = t->size;
    s->v = malloc((size_t)(s->n > 0 ? s->n : 1) * sizeof *s->v);
    for (int64_t k = 0; s->v != NULL && k < s->n; k++)
        s->v[k] = sx_tensor_get(t, k);
    return s->v != NULL;
}

static void snaps_free(snap *s, int n)
{
    for (int i = 0; i < n; i++)
        free(s[i].v);
}

static void out_name(const dt_prog *p, const inst *I, int o, char *buf, size_t n)
{
    if (o == 0)
        snprintf(buf, n, "y (n%d)", p->out);
    else if (o == 1)
        snprintf(buf, n, "L");
    else
        snprintf(buf, n, "dL/dn%d", I->xi[o - 2]);
}

static void rfail(dt_result *r, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void rfail(dt_result *r, const char *check, const char *fmt, ...)
{
    if (r->failed)
        return;
    r->failed = true;
    snprintf(r->check, sizeof r->check, "%s", check);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
}

static bool prog_in_domain(const dt_prog *p);
static bool same_bits(double a, double b);

/* ---------------------------------------------------------------- family: modes */

/* The unary maps by the C library, in f64: the ref column of their sx_map.def rows, an
 * independent reference for the values (the modes otherwise only compare strix with itself).
 * round is half to even, as NumPy, PyTorch and ONNX. Returns false for ops that are
 * not unary maps. */
static bool map_ref(sx_cg_op op, double a, double x, double *y)
{
    (void)a;
#define SX_MAP_ROW(NAME, name, expr, ref, ...)                                                     \
    if (op == SX_OP_##NAME) {                                                                      \
        *y = (ref);                                                                                \
        return true;                                                                               \
    }
#include "sx_map.def"
#undef SX_MAP_ROW
    return false; /* not a unary map */
}

/* Every unary map node of the lazy reference against map_ref: exact for the ops that only
 * select or round, else within a few units in the last place of the dtype. */
static void check_map_refs(const dt_prog *p, const inst *R, dt_result *r)
{
    for (int i = 0; i < p->n && !r->failed; i++) {
        const dt_node *d = &p->node[i];
        double ref;
        if (d->kind != DT_OP || !map_ref(d->op, d->attr.alpha, 0, &ref))
            continue;
        const sx_tensor *x = sx_cg_value(R->nd[d->in[0]]), *y = sx_cg_value(R->nd[i]);
        if (x == NULL || y == NULL)
            continue;
        bool exact = d->op == SX_OP_NEG || d->op == SX_OP_ABS || d->op == SX_OP_SIGN ||
                     d->op == SX_OP_RELU || d->op == SX_OP_FLOOR || d->op == SX_OP_CEIL ||
                     d->op == SX_OP_ROUND;
        double tol = exact ? 0 : p->dt == SX_F32 ? 4e-7 : 1e-14;
        for (int64_t k = 0; k < y->size && !r->failed; k++) {
            double xv = sx_tensor_get(x, k), yv = sx_tensor_get(y, k);
            (void)map_ref(d->op, d->attr.alpha, xv, &ref);
            ref = to_dtype(p->dt, ref);
            if (!(same_bits(yv, ref) || fabs(yv - ref) <= tol * fmax(1, fabs(ref))))
                rfail(r, "modes:reference",
                      "n%d = %s(n%d)[%lld]: %s(%.17g) is %.17g in strix, %.17g by the C library "
                      "(%s)",
                      i, sx_cg_op_name(d->op), d->in[0], (long long)k, sx_cg_op_name(d->op), xv, yv,
                      ref, exact ? "exact" : "relative bound");
        }
    }
}

typedef enum {
    MODE_OPTIMISED,          /* sx_cg_optimise (every pass) for the outputs */
    MODE_FROZEN,             /* sx_cg_freeze (planned, in place) */
    MODE_FROZEN_REEVAL,      /* frozen; evaluated with other leaf values, then with p's again */
    MODE_EAGER,              /* an SX_CG_EAGER graph */
    MODE_WORKERS,            /* 2 engine workers */
    MODE_OPT_FROZEN_WORKERS, /* optimised, frozen, 2 workers */
    MODE_REEVAL,             /* lazy; evaluated with other leaf values, then with p's again */
    /* The passes that change rounding, each checked within a tolerance (y and L only, without
     * gradients: the inference graphs they are for) when it changed the graph, else bit for
     * bit. */
    MODE_BN_FOLD, /* every default pass and SX_PASS_BN_FOLD, frozen */
    MODE_COUNT
} mode;

static const char *const mode_name[MODE_COUNT] = {
    "optimised", "frozen", "frozen-reeval", "eager", "workers2", "optimised-frozen-workers2",
    "reeval",    "bn-fold"};

/* The pass a rounding mode adds to the defaults (SX_PASS_COUNT: none, a bit-for-bit mode). */
static sx_cg_pass rounding_pass(mode m)
{
    return m == MODE_BN_FOLD ? SX_PASS_BN_FOLD : SX_PASS_COUNT;
}

/* Bound of a rounding mode's difference from the lazy graph, relative to 1 + max |lazy| over
 * the output: the fold moves one rounding (conv(x, k) a rounds the sum, then the product;
 * conv(x, k a) rounds each k a, then the sum), which the ops after it may amplify a few times
 * over; a wrong fold (the scale on the wrong axis, twice, or lost) is off by O(1). */
static double rounding_tol(sx_dtype dt)
{
    return dt == SX_F32 ? 2e-4 : 1e-11;
}

/* Run one mode: fills snapshots of the outputs (n_o of them, as the reference has), or a
 * message in *why. *rounded: a pass that changes rounding changed the graph. */
static bool run_mode(const dt_prog *p, const dt_prog *alt, mode m, bool grads, int n_o, snap *out,
                     bool *rounded, char *why, size_t why_n)
{
    inst I;
    sx_cg_node *o[DT_MAX_NODES + 2];
    sx_status st = inst_build(&I, p, m == MODE_EAGER ? SX_CG_EAGER : SX_CG_LAZY, p->dt, grads);
    if (st != SX_OK) {
        snprintf(why, why_n, "%s", I.err);
        inst_free(&I);
        return false;
    }
    int n = inst_outputs(&I, o);
    if (n != n_o) {
        snprintf(why, why_n, "%d outputs, the reference has %d", n, n_o);
        inst_free(&I);
        return false;
    }
    const char *what = "eval";
    if (m == MODE_OPTIMISED || m == MODE_OPT_FROZEN_WORKERS) {
        what = "sx_cg_optimise";
        sx_cg_opt_report rep;
        st = sx_cg_optimise(I.g, n, o, NULL, &rep);
        for (int ps = 0; st == SX_OK && ps < SX_PASS_COUNT; ps++)
            dt_pass_changed[ps] += rep.changed[ps];
    }
    *rounded = false;
    if (rounding_pass(m) != SX_PASS_COUNT) {
        what = "sx_cg_optimise";
        sx_cg_opt_params op = sx_cg_opt_params_default();
        op.enable[rounding_pass(m)] = true;
        sx_cg_opt_report rep;
        st = sx_cg_optimise(I.g, n, o, &op, &rep);
        if (st == SX_OK) {
            dt_pass_changed[rounding_pass(m)] += rep.changed[rounding_pass(m)];
            *rounded = rep.changed[rounding_pass(m)] > 0;
        }
    }
    if (st == SX_OK && (m == MODE_FROZEN || m == MODE_FROZEN_REEVAL ||
                        m == MODE_OPT_FROZEN_WORKERS || rounding_pass(m) != SX_PASS_COUNT)) {
        what = "sx_cg_freeze";
        st = sx_cg_freeze(I.g, n, o);
    }
    if (st == SX_OK && (m == MODE_WORKERS || m == MODE_OPT_FROZEN_WORKERS)) {
        what = "sx_cg_set_workers";
        st = sx_cg_set_workers(I.g, 2);
    }
    if (st == SX_OK && (m == MODE_FROZEN_REEVAL || m == MODE_REEVAL)) {
        what = "evaluating with other leaf values";
        st = inst_set_leaves(&I, alt, p->dt);
        if (st == SX_OK)
            st = sx_cg_eval(I.g, n, o);
        if (st == SX_OK)
            st = inst_set_leaves(&I, p, p->dt);
    }
    if (st == SX_OK) {
        what = "sx_cg_eval";
        st = sx_cg_eval(I.g, n, o);
    }
    if (st != SX_OK) {
        snprintf(why, why_n, "%s: %s", what, sx_last_error());
        inst_free(&I);
        return false;
    }
    bool ok = true;
    for (int k = 0; k < n; k++)
        ok = snap_take(&out[k], o[k]) && ok;
    if (!ok)
        snprintf(why, why_n, "an output has no value");
    inst_free(&I);
    return ok;
}

static bool same_bits(double a, double b)
{
    return a == b || (isnan(a) && isnan(b));
}

/* One output of a mode against the lazy graph's: bit for bit (tol = 0), or within tol * (1 +
 * max |lazy|) for a pass that changes rounding. */
static void compare_output(dt_result *r, const char *check, const char *name, const char *mname,
                           const snap *ref, const snap *got, double tol)
{
    if (!sx_shape_equal(ref->rank, ref->shape, got->rank, got->shape)) {
        rfail(r, check, "%s: shape differs from the lazy graph's", name);
        return;
    }
    double scale = 1;
    for (int64_t e = 0; e < ref->n; e++)
        scale = isfinite(ref->v[e]) && fabs(ref->v[e]) + 1 > scale ? fabs(ref->v[e]) + 1 : scale;
    int64_t cnt = 0, first = -1;
    for (int64_t e = 0; e < ref->n; e++) {
        double a = ref->v[e], b = got->v[e];
        bool ok = same_bits(a, b) || (tol > 0 && isfinite(a) && fabs(a - b) <= tol * scale);
        if (!ok && first < 0)
            first = e;
        cnt += !ok;
    }
    if (first < 0)
        return;
    if (tol == 0)
        rfail(r, check,
              "%s[%lld]: lazy %.17g, %s %.17g (bit for bit promised; %lld of %lld elements "
              "differ)",
              name, (long long)first, ref->v[first], mname, got->v[first], (long long)cnt,
              (long long)ref->n);
    else
        rfail(r, check,
              "%s[%lld]: lazy %.17g, %s %.17g (within %g x %g promised; %lld of %lld elements "
              "differ)",
              name, (long long)first, ref->v[first], mname, got->v[first], tol, scale,
              (long long)cnt, (long long)ref->n);
}

static void check_modes(const dt_prog *p, dt_result *r)
{
    inst R;
    sx_cg_node *o[DT_MAX_NODES + 2];
    snap ref[DT_MAX_NODES + 2], got[DT_MAX_NODES + 2];
    sx_status st = inst_build(&R, p, SX_CG_LAZY, p->dt, true);
    bool grads = R.has_grads;
    if (st != SX_OK && R.L != NULL) /* no gradients: compare y and L only */
        st = SX_OK;
    if (st != SX_OK) {
        rfail(r, "modes:build", "%s", R.err);
        inst_free(&R);
        return;
    }
    int n = inst_outputs(&R, o);
    if (sx_cg_eval(R.g, n, o) != SX_OK) {
        rfail(r, "modes:eval", "lazy sx_cg_eval: %s", sx_last_error());
        inst_free(&R);
        return;
    }
    for (int k = 0; k < n; k++)
        (void)snap_take(&ref[k], o[k]);
    check_map_refs(p, &R, r);
    /* the re-evaluation modes first evaluate with other leaf values (inside the domain; p's
     * own when no such change is found) */
    dt_prog *other = dt_prog_clone(p);
    for (int i = 0; other != NULL && i < other->n; i++) {
        dt_node *d = &other->node[i];
        for (int64_t e = 0; is_wrt(d) && e < shape_size(d->rank, d->shape); e++)
            d->val[e] = to_dtype(p->dt, d->val[e] * 1.01 + 0.01);
    }
    const dt_prog *alt = other != NULL && prog_in_domain(other) ? other : p;
    for (int m = 0; m < MODE_COUNT && !r->failed; m++) {
        char why[512], check[48];
        snprintf(check, sizeof check, "modes:%s", mode_name[m]);
        memset(got, 0, sizeof got);
        /* the rounding modes: y and L of the graph without gradients */
        bool rounding = rounding_pass((mode)m) != SX_PASS_COUNT, rounded = false;
        int n_m = rounding ? 2 : n;
        if (!run_mode(p, alt, (mode)m, grads && !rounding, n_m, got, &rounded, why, sizeof why)) {
            rfail(r, check, "%s", why);
            snaps_free(got, n_m);
            break;
        }
        for (int k = 0; k < n_m && !r->failed; k++) {
            char name[32];
            out_name(p, &R, k, name, sizeof name);
            compare_output(r, check, name, mode_name[m], &ref[k], &got[k],
                           rounded ? rounding_tol(p->dt) : 0);
        }
        snaps_free(got, n_m);
    }
    snaps_free(ref, n);
    dt_prog_free(other);
    inst_free(&R);
}

/* ---------------------------------------------------------------- finite differences */

/* L after setting element e of differentiated leaf k to v (the others as in p). */
static bool eval_L_at(inst *I, const dt_prog *p, int k, int64_t e, double v, double *L)
{
    const dt_node *d = &p->node[I->xi[k]];
    int64_t n = shape_size(d->rank, d->shape);
    sx_tensor *t = NULL;
    if (sx_tensor_from_doubles(SX_F64, d->rank, d->shape, d->val, n, &t) != SX_OK)
        return false;
    sx_tensor_set(t, e, v);
    sx_status st = d->kind == DT_PARAM ? sx_cg_leaf_set(I->g, I->xs[k], t)
                                       : sx_cg_input_set(I->g, I->xs[k], t, SX_CG_COPY);
    sx_tensor_free(t);
    if (st == SX_OK)
        st = sx_cg_eval(I->g, 1, &I->L);
    if (st != SX_OK)
        return false;
    *L = sx_tensor_get(sx_cg_value(I->L), 0);
    return true;
}

/* Central differences at steps h and h/2; `trusted` when they agree (no kink within reach). */
typedef struct fd {
    double d1, d2;
    bool finite, trusted;
} fd;

/* From phi(x + t) at t = h, -h, h/2, -h/2, h/4, -h/4 (ph[0..6)) and 0 (phi0; NAN when not
 * known): central differences at three steps must agree (a jump within reach gives a
 * difference that grows as 1/h), and so must the one-sided slopes' gap shrink with the step (at
 * a kink it does not: central differences there are symmetric and would agree). */
static fd fd_make5(const double *ph, double phi0, double h)
{
    double d1 = (ph[0] - ph[1]) / (2 * h), d2 = (ph[2] - ph[3]) / h, d3 = (ph[4] - ph[5]) * 2 / h;
    fd f = {d2, d3, isfinite(d1) && isfinite(d2) && isfinite(d3), false};
    f.trusted = f.finite && fabs(d1 - d2) <= FD_TRUST * (1 + fabs(d2)) &&
                fabs(d2 - d3) <= FD_TRUST * (1 + fabs(d3));
    if (f.trusted && isfinite(phi0)) {
        double s1 = (ph[0] - phi0) / h - (phi0 - ph[1]) / h;
        double s2 = (ph[2] - phi0) / (h / 2) - (phi0 - ph[3]) / (h / 2);
        if (fabs(s1) > 1e-6 * (1 + fabs(d2)) && fabs(s2) > 0.75 * fabs(s1))
            f.trusted = false;
    }
    return f;
}

static fd fd_make(double d1, double d2)
{
    fd f = {d1, d2, isfinite(d1) && isfinite(d2), false};
    f.trusted = f.finite && fabs(d1 - d2) <= FD_TRUST * (1 + fabs(d2));
    return f;
}

/* Does an analytic derivative a pass against f? Non-finite a with finite differences fails
 * even when they are not trusted: a finite function has no NaN or infinite slope there. */
static bool fd_pass(double a, fd f, dt_result *r)
{
    if (!isfinite(a))
        return !f.finite;
    if (!f.trusted) {
        r->untrusted++;
        return true;
    }
    r->trusted++;
    return fabs(a - f.d2) <= FD_TOL * (1 + fabs(f.d2)) + 2 * fabs(f.d1 - f.d2);
}

/* ---------------------------------------------------------------- family: gradients */

static void check_grad(const dt_prog *p, dt_result *r)
{
    inst I;
    sx_status st = inst_build(&I, p, SX_CG_LAZY, SX_F64, true);
    if (st != SX_OK || I.nx == 0) {
        if (st != SX_OK)
            rfail(r, "grad:build", "%s", I.err);
        else
            r->skipped = true;
        inst_free(&I);
        return;
    }
    for (int k = 0; k < I.nx; k++)
        if (!sx_shape_equal(sx_cg_node_rank(I.gr[k]), sx_cg_node_shape(I.gr[k]),
                            sx_cg_node_rank(I.xs[k]), sx_cg_node_shape(I.xs[k]))) {
            char a[64], b[64];
            rfail(r, "grad:shape", "dL/dn%d has shape %s, n%d has %s (sx_ad_grad promises x's)",
                  I.xi[k],
                  sx_shape_str(sx_cg_node_rank(I.gr[k]), sx_cg_node_shape(I.gr[k]), a, sizeof a),
                  I.xi[k],
                  sx_shape_str(sx_cg_node_rank(I.xs[k]), sx_cg_node_shape(I.xs[k]), b, sizeof b));
            inst_free(&I);
            return;
        }
    if (sx_cg_eval(I.g, I.nx, I.gr) != SX_OK || sx_cg_eval(I.g, 1, &I.L) != SX_OK) {
        rfail(r, "grad:eval", "evaluating the gradients: %s", sx_last_error());
        inst_free(&I);
        return;
    }
    snap gs[DT_MAX_NODES];
    for (int k = 0; k < I.nx; k++)
        (void)snap_take(&gs[k], I.gr[k]);
    for (int k = 0; k < I.nx && !r->failed; k++) {
        const dt_node *d = &p->node[I.xi[k]];
        for (int64_t e = 0; e < gs[k].n && !r->failed; e++) {
            double x = d->val[e], h = FD_H * fmax(1, fabs(x)), ph[6], L0;
            static const double ts[6] = {1, -1, 0.5, -0.5, 0.25, -0.25};
            bool ok = eval_L_at(&I, p, k, e, x, &L0);
            for (int t = 0; t < 6 && ok; t++)
                ok = eval_L_at(&I, p, k, e, x + ts[t] * h, &ph[t]);
            if (!ok || !eval_L_at(&I, p, k, e, x, &L0)) {
                rfail(r, "grad:eval", "evaluating L: %s", sx_last_error());
                break;
            }
            fd f = fd_make5(ph, L0, h);
            if (!fd_pass(gs[k].v[e], f, r))
                rfail(r, isfinite(gs[k].v[e]) ? "grad:fd" : "grad:nan",
                      "dL/dn%d[%lld] at n%d[%lld] = %.9g: autodiff %.10g, central differences "
                      "%.10g (h = %g) and %.10g (h/2)",
                      I.xi[k], (long long)e, I.xi[k], (long long)e, x, gs[k].v[e], f.d1, h, f.d2);
        }
    }
    /* f32 programs: the f32 gradients against the f64 ones (a rounding bound, loose) */
    if (!r->failed && p->dt == SX_F32) {
        inst J;
        if (inst_build(&J, p, SX_CG_LAZY, SX_F32, true) != SX_OK ||
            sx_cg_eval(J.g, J.nx, J.gr) != SX_OK) {
            rfail(r, "grad:f32", "the f32 graph: %s", J.err[0] ? J.err : sx_last_error());
        } else {
            for (int k = 0; k < J.nx && !r->failed; k++) {
                const sx_tensor *t = sx_cg_value(J.gr[k]);
                double scale = 0;
                for (int64_t e = 0; e < gs[k].n; e++)
                    scale = fmax(scale, fabs(gs[k].v[e]));
                for (int64_t e = 0; e < gs[k].n && !r->failed; e++) {
                    double a = sx_tensor_get(t, e), b = gs[k].v[e];
                    if (isfinite(b) && !(fabs(a - b) <= 1e-3 * (1 + scale)))
                        rfail(r, "grad:f32",
                              "dL/dn%d[%lld]: f32 %.9g, f64 %.17g (bound 1e-3 * (1 + %g))", J.xi[k],
                              (long long)e, a, b, scale);
                }
            }
        }
        inst_free(&J);
    }
    snaps_free(gs, I.nx);
    inst_free(&I);
}

/* ---------------------------------------------------------------- family: optimise, then grad */

static void check_optgrad(const dt_prog *p, dt_result *r)
{
    inst R;
    if (inst_build(&R, p, SX_CG_LAZY, SX_F64, true) != SX_OK || R.nx == 0 ||
        sx_cg_eval(R.g, R.nx, R.gr) != SX_OK) {
        r->skipped = true; /* the gradient family reports it */
        inst_free(&R);
        return;
    }
    snap gs[DT_MAX_NODES];
    for (int k = 0; k < R.nx; k++)
        (void)snap_take(&gs[k], R.gr[k]);
    for (int variant = 0; variant < 2 && !r->failed; variant++) {
        /* variant 0: every pass; 1: without element-wise fusion and convolution epilogues
         * (whose fused nodes have no gradient rule), so that differentiation must go through the
         * other passes' results */
        const char *vname = variant == 0 ? "every pass" : "every pass but element-wise fusion";
        sx_cg_opt_params op = sx_cg_opt_params_default();
        if (variant == 1) {
            op.enable[SX_PASS_ELEMWISE_FUSION] = false;
            op.enable[SX_PASS_CONV_EPILOGUE] = false;
        }
        inst I;
        if (inst_build(&I, p, SX_CG_LAZY, SX_F64, false) != SX_OK) {
            inst_free(&I);
            break;
        }
        if (sx_cg_optimise(I.g, 1, &I.L, &op, NULL) != SX_OK) {
            rfail(r, "optgrad:optimise", "%s: sx_cg_optimise: %s", vname, sx_last_error());
            inst_free(&I);
            break;
        }
        sx_cg_node *gr[DT_MAX_NODES];
        sx_error_clear();
        sx_status st = sx_ad_grad(I.g, I.L, I.nx, I.xs, gr);
        if (st != SX_OK) {
            if (sx_last_error()[0] == 0)
                rfail(r, "optgrad:silent-refusal", "%s: sx_ad_grad returned %s with no message",
                      vname, sx_status_str(st));
            r->refused++;
            inst_free(&I);
            continue;
        }
        for (int k = 0; k < I.nx && !r->failed; k++)
            if (!sx_shape_equal(sx_cg_node_rank(gr[k]), sx_cg_node_shape(gr[k]), gs[k].rank,
                                gs[k].shape)) {
                char a[64], b[64];
                rfail(r, "optgrad:shape", "%s: dL/dn%d has shape %s after optimising, %s before",
                      vname, I.xi[k],
                      sx_shape_str(sx_cg_node_rank(gr[k]), sx_cg_node_shape(gr[k]), a, sizeof a),
                      sx_shape_str(gs[k].rank, gs[k].shape, b, sizeof b));
            }
        if (!r->failed && sx_cg_eval(I.g, I.nx, gr) != SX_OK)
            rfail(r, "optgrad:eval", "%s: evaluating the gradients: %s", vname, sx_last_error());
        for (int k = 0; k < I.nx && !r->failed; k++) {
            const sx_tensor *t = sx_cg_value(gr[k]);
            for (int64_t e = 0; e < gs[k].n && !r->failed; e++) {
                double a = sx_tensor_get(t, e), b = gs[k].v[e];
                if (!(same_bits(a, b) || fabs(a - b) <= 1e-9 * (1 + fabs(b))))
                    rfail(r, "optgrad:value",
                          "%s: dL/dn%d[%lld] = %.17g after optimising, %.17g without", vname,
                          I.xi[k], (long long)e, a, b);
            }
        }
        inst_free(&I);
    }
    snaps_free(gs, R.nx);
    inst_free(&R);
}

/* ---------------------------------------------------------------- family: Hessian-vector */

static bool prog_smooth(const dt_prog *p)
{
    for (int i = 0; i < p->n; i++)
        if (p->node[i].kind == DT_OP && os_ops[p->node[i].op].diff == OS_PIECEWISE)
            return false;
    return true;
}

static void check_hvp(const dt_prog *p, dt_result *r)
{
    if (!prog_smooth(p)) {
        r->skipped = true;
        return;
    }
    inst I;
    if (inst_build(&I, p, SX_CG_LAZY, SX_F64, false) != SX_OK || I.nx == 0) {
        r->skipped = true;
        inst_free(&I);
        return;
    }
    int k = (int)(p->seed % (uint64_t)I.nx);
    const dt_node *d = &p->node[I.xi[k]];
    int64_t n = shape_size(d->rank, d->shape);
    double v[DT_MAX_SIZE * 4], xmax = 1;
    sx_rng rng;
    sx_rng_seed(&rng, p->seed ^ 0x4e55ULL);
    for (int64_t e = 0; e < n; e++) {
        v[e] = 2 * sx_rng_uniform(&rng) - 1;
        xmax = fmax(xmax, fabs(d->val[e]));
    }
    sx_cg_node *vn = dt_const(I.g, SX_F64, d->rank, d->shape, v), *gx = NULL, *hv = NULL;
    sx_status st = sx_ad_grad(I.g, I.L, 1, &I.xs[k], &gx);
    if (st != SX_OK) {
        r->skipped = true; /* the gradient family reports it */
        inst_free(&I);
        return;
    }
    st = sx_ad_hvp(I.g, I.L, I.xs[k], vn, &hv);
    if (st != SX_OK || hv == NULL) {
        rfail(r, "hvp:build", "sx_ad_hvp along n%d: %s", I.xi[k], sx_last_error());
        inst_free(&I);
        return;
    }
    if (!sx_shape_equal(sx_cg_node_rank(hv), sx_cg_node_shape(hv), d->rank, d->shape)) {
        rfail(r, "hvp:shape", "sx_ad_hvp along n%d has another shape than n%d", I.xi[k], I.xi[k]);
        inst_free(&I);
        return;
    }
    snap hs;
    if (sx_cg_eval(I.g, 1, &hv) != SX_OK || !snap_take(&hs, hv)) {
        rfail(r, "hvp:eval", "evaluating the Hessian-vector product: %s", sx_last_error());
        inst_free(&I);
        return;
    }
    /* the gradient at x + t v for t = +-h, +-h/2 */
    double h = FD_H * xmax, gt[4][DT_MAX_SIZE * 4];
    static const double ts[4] = {1, -1, 0.5, -0.5};
    bool ok = true;
    for (int s = 0; s < 4 && ok; s++) {
        sx_tensor *t = NULL;
        ok = sx_tensor_from_doubles(SX_F64, d->rank, d->shape, d->val, n, &t) == SX_OK;
        for (int64_t e = 0; ok && e < n; e++)
            sx_tensor_set(t, e, d->val[e] + ts[s] * h * v[e]);
        ok = ok && (d->kind == DT_PARAM ? sx_cg_leaf_set(I.g, I.xs[k], t)
                                        : sx_cg_input_set(I.g, I.xs[k], t, SX_CG_COPY)) == SX_OK;
        sx_tensor_free(t);
        ok = ok && sx_cg_eval(I.g, 1, &gx) == SX_OK;
        for (int64_t e = 0; ok && e < n; e++)
            gt[s][e] = sx_tensor_get(sx_cg_value(gx), e);
    }
    for (int64_t e = 0; ok && e < n && !r->failed; e++) {
        fd f = fd_make((gt[0][e] - gt[1][e]) / (2 * h), (gt[2][e] - gt[3][e]) / h);
        if (!fd_pass(hs.v[e], f, r))
            rfail(r, isfinite(hs.v[e]) ? "hvp:fd" : "hvp:nan",
                  "(H v)[%lld] with respect to n%d: sx_ad_hvp %.10g, central differences of the "
                  "gradient %.10g (h = %g) and %.10g (h/2)",
                  (long long)e, I.xi[k], hs.v[e], f.d1, h, f.d2);
    }
    if (!ok)
        rfail(r, "hvp:eval", "evaluating the gradient: %s", sx_last_error());
    free(hs.v);
    inst_free(&I);
}

/* Every node's value finite in a lazy f64 graph (and below MAX_ABS in magnitude, as the
 * generator keeps them): the checks' precondition, which shrinking must not break either. */
static bool prog_in_domain(const dt_prog *p)
{
    inst I;
    bool ok = inst_build(&I, p, SX_CG_LAZY, SX_F64, false) == SX_OK &&
              sx_cg_eval(I.g, p->n, I.nd) == SX_OK;
    gen G;
    memset(&G, 0, sizeof G);
    G.p = (dt_prog *)(uintptr_t)p; /* read only */
    for (int i = 0; ok && i < p->n; i++) {
        G.nd[i] = I.nd[i];
        const sx_tensor *t = sx_cg_value(I.nd[i]);
        for (int64_t k = 0; ok && t != NULL && k < t->size; k++)
            ok = isfinite(sx_tensor_get(t, k)) && fabs(sx_tensor_get(t, k)) <= MAX_ABS;
        ok = ok && op_ok(&G, i);
    }
    inst_free(&I);
    return ok;
}

void dt_check(const dt_prog *p, dt_family f, dt_result *r)
{
    memset(r, 0, sizeof *r);
    if (!prog_in_domain(p)) { /* a shrunk or hand-made program may leave the domain */
        r->skipped = true;
        return;
    }
    switch (f) {
    case DT_MODES:
        check_modes(p, r);
        break;
    case DT_GRAD:
        check_grad(p, r);
        break;
    case DT_OPTGRAD:
        check_optgrad(p, r);
        break;
    case DT_HVP:
        check_hvp(p, r);
        break;
    case DT_FAMILY_COUNT:
        break;
    }
}

/* ---------------------------------------------------------------- shrinking */

/* Does q still fail the same check? */
static bool still_fails(const dt_prog *q, dt_family f, const char *check, dt_result *r)
{
    dt_result t;
    dt_check(q, f, &t);
    if (t.failed && strcmp(t.check, check) == 0) {
        *r = t;
        return true;
    }
    return false;
}

/* The values of every node of p (in p's dtype), from a lazy graph; NULL when it fails. */
static snap *prog_values(const dt_prog *p)
{
    inst I;
    snap *s = calloc((size_t)p->n, sizeof *s);
    if (s == NULL || inst_build(&I, p, SX_CG_LAZY, p->dt, false) != SX_OK ||
        sx_cg_eval(I.g, p->n, I.nd) != SX_OK) {
        inst_free(&I);
        free(s);
        return NULL;
    }
    for (int i = 0; i < p->n; i++)
        (void)snap_take(&s[i], I.nd[i]);
    inst_free(&I);
    return s;
}

/* Node i of q becomes a leaf of kind k holding v. */
static void make_leaf(dt_prog *q, int i, dt_kind k, const snap *v)
{
    dt_node *d = &q->node[i];
    free(d->val);
    d->kind = k;
    d->op = k == DT_CONST ? SX_OP_CONST : k == DT_PARAM ? SX_OP_PARAM : SX_OP_INPUT;
    d->n_in = 0;
    d->attr = sx_cg_attr_default();
    d->rank = v->rank;
    memcpy(d->shape, v->shape, sizeof d->shape);
    d->val = dup_vals(v->v, v->n);
}

/* Weights of q's output for a new output shape: the first elements, or ones. */
static void reset_weights(dt_prog *q)
{
    free(q->w);
    q->w = NULL;
}

/* Replace uses of node i by node j (j < i), then drop what is unused. */
static void bypass(dt_prog *q, int i, int j)
{
    for (int a = i + 1; a < q->n; a++)
        for (int k = 0; k < q->node[a].n_in; k++)
            if (q->node[a].in[k] == i)
                q->node[a].in[k] = j;
    if (q->out == i)
        q->out = j;
    prune(q);
}

/* Accept candidate c when it fails the same check: *best becomes c. */
static bool try_cand(dt_prog **best, dt_prog *c, dt_family f, const char *check, dt_result *r)
{
    if (c != NULL && dt_infer(c) == SX_OK && still_fails(c, f, check, r)) {
        dt_prog_free(*best);
        *best = c;
        return true;
    }
    dt_prog_free(c);
    return false;
}

/* Round v to `digits` significant decimal digits. */
static double round_sig(double v, int digits)
{
    if (v == 0 || !isfinite(v))
        return v;
    double s = pow(10, digits - 1 - (int)floor(log10(fabs(v))));
    return nearbyint(v * s) / s;
}

dt_prog *dt_shrink(const dt_prog *p, dt_family f, dt_result *r)
{
    char check[48];
    snprintf(check, sizeof check, "%s", r->check);
    dt_prog *best = dt_prog_clone(p);
    if (best == NULL || dt_infer(best) != SX_OK)
        return best;
    for (int round = 0, changed = 1; changed && round < 20; round++) {
        changed = 0;
        /* ones as weights */
        if (best->w != NULL) {
            dt_prog *c = dt_prog_clone(best);
            reset_weights(c);
            changed |= try_cand(&best, c, f, check, r);
        }
        /* an earlier node as the output */
        for (int i = 0; i < best->out; i++) {
            dt_prog *c = dt_prog_clone(best);
            c->out = i;
            reset_weights(c);
            prune(c);
            if (try_cand(&best, c, f, check, r)) {
                changed = 1;
                i = -1;
            }
        }
        /* a node replaced by one of its inputs of the same shape */
        for (int i = best->n - 1; i >= 0; i--) {
            const dt_node *d = &best->node[i];
            for (int k = 0; d->kind == DT_OP && k < d->n_in; k++) {
                const dt_node *a = &best->node[d->in[k]];
                if (!sx_shape_equal(a->rank, a->shape, d->rank, d->shape))
                    continue;
                dt_prog *c = dt_prog_clone(best);
                bypass(c, i, d->in[k]);
                if (try_cand(&best, c, f, check, r)) {
                    changed = 1;
                    i = best->n;
                    break;
                }
            }
        }
        /* a subtree replaced by a leaf holding its value: a constant, else an input */
        snap *vals = prog_values(best);
        int n_vals = best->n; /* best may shrink below */
        for (int i = best->n - 1; vals != NULL && i >= 0; i--) {
            if (best->node[i].kind != DT_OP)
                continue;
            bool done = false;
            for (int kind = 0; kind < 2 && !done; kind++) {
                dt_prog *c = dt_prog_clone(best);
                make_leaf(c, i, kind == 0 ? DT_CONST : DT_INPUT, &vals[i]);
                prune(c);
                done = try_cand(&best, c, f, check, r);
            }
            if (done) {
                changed = 1;
                break; /* values of the new program */
            }
        }
        if (vals != NULL) {
            snaps_free(vals, n_vals);
            free(vals);
        }
        if (changed)
            continue;
        /* differentiated leaves as constants */
        for (int i = 0; i < best->n; i++) {
            if (!is_wrt(&best->node[i]))
                continue;
            dt_prog *c = dt_prog_clone(best);
            c->node[i].kind = DT_CONST;
            c->node[i].op = SX_OP_CONST;
            changed |= try_cand(&best, c, f, check, r);
        }
        /* smaller leaves: an axis cut to its first element, or its first d - 1 */
        for (int i = 0; i < best->n; i++) {
            for (int a = 0; best->node[i].kind != DT_OP && a < best->node[i].rank; a++) {
                for (int cut = 0; cut < 2; cut++) {
                    const dt_node *d = &best->node[i];
                    int64_t dim = d->shape[a], nd = cut == 0 ? 1 : dim - 1;
                    if (dim <= 1 || (cut == 1 && nd == 1))
                        continue;
                    dt_prog *c = dt_prog_clone(best);
                    dt_node *e = &c->node[i];
                    int64_t outer = shape_size(a, d->shape), inner = 1;
                    for (int b = a + 1; b < d->rank; b++)
                        inner *= d->shape[b];
                    int64_t m = 0;
                    for (int64_t o = 0; o < outer; o++)
                        for (int64_t j = 0; j < nd; j++)
                            for (int64_t q = 0; q < inner; q++)
                                e->val[m++] = d->val[(o * dim + j) * inner + q];
                    e->shape[a] = nd;
                    reset_weights(c);
                    if (try_cand(&best, c, f, check, r)) {
                        changed = 1;
                        break;
                    }
                }
            }
        }
        /* rank-0 and rank-1 leaves of one element are as small as it gets; drop unit axes */
        for (int i = 0; i < best->n; i++) {
            const dt_node *d = &best->node[i];
            if (d->kind == DT_OP || d->rank == 0 || shape_size(d->rank, d->shape) != 1)
                continue;
            dt_prog *c = dt_prog_clone(best);
            c->node[i].rank = 0;
            reset_weights(c);
            changed |= try_cand(&best, c, f, check, r);
        }
        /* values with fewer digits */
        for (int digits = 1; digits <= 3; digits++) {
            dt_prog *c = dt_prog_clone(best);
            bool diff = false;
            for (int i = 0; i < c->n; i++) {
                dt_node *d = &c->node[i];
                for (int64_t e = 0; d->kind != DT_OP && e < shape_size(d->rank, d->shape); e++) {
                    double v = to_dtype(c->dt, round_sig(d->val[e], digits));
                    diff |= v != d->val[e];
                    d->val[e] = v;
                }
            }
            if (diff && try_cand(&best, c, f, check, r)) {
                changed = 1;
                break;
            }
            if (!diff)
                dt_prog_free(c);
        }
    }
    dt_check(best, f, r);
    return best;
}

/* ---------------------------------------------------------------- printing */

/* v in the fewest significant digits that give it back in dtype dt. */
static void print_num(FILE *o, sx_dtype dt, double v)
{
    char buf[64];
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (to_dtype(dt, strtod(buf, NULL)) == v || digits == 17)
            break;
    }
    fprintf(o, "%s", buf);
}

static void print_vals(FILE *o, sx_dtype dt, const double *v, int64_t n)
{
    fprintf(o, "(double[]){");
    for (int64_t k = 0; k < n; k++) {
        fprintf(o, "%s", k ? ", " : "");
        print_num(o, dt, v[k]);
    }
    fprintf(o, "%s}", n == 0 ? "0" : "");
}

static void print_shape(FILE *o, int rank, const int64_t *s)
{
    if (rank == 0) {
        fprintf(o, "NULL");
        return;
    }
    fprintf(o, "(int64_t[]){");
    for (int k = 0; k < rank; k++)
        fprintf(o, "%s%lld", k ? ", " : "", (long long)s[k]);
    fprintf(o, "}");
}

/* The eval column of sx_ops.def: which named constructor prints an op. */
static const char *const op_eval[SX_OP_COUNT] = {
#define X(NAME, name, arity, shape, eval, flags, kernel, nograd) #eval,
#include "sx_ops.def"
#undef X
};

/* The C name of a padding mode, for reproducers. */
static const char *padding_name(sx_padding p)
{
    switch (p) {
    case SX_PAD_VALID:
        return "SX_PAD_VALID";
    case SX_PAD_SAME:
        return "SX_PAD_SAME";
    case SX_PAD_SAME_LOWER:
        return "SX_PAD_SAME_LOWER";
    case SX_PAD_EXPLICIT:
        return "SX_PAD_EXPLICIT";
    }
    return "(sx_padding)-1";
}

static void print_attr(FILE *o, int i, const dt_node *d, const dt_prog *p)
{
    const sx_cg_attr *a = &d->attr;
    int r = d->n_in > 0 ? p->node[d->in[0]].rank : 0;
    fprintf(o, "    sx_cg_attr at%d = sx_cg_attr_default();\n", i);
#define F(cond, ...)                                                                               \
    do {                                                                                           \
        if (cond) {                                                                                \
            fprintf(o, "    at%d.", i);                                                            \
            fprintf(o, __VA_ARGS__);                                                               \
            fprintf(o, ";\n");                                                                     \
        }                                                                                          \
    } while (0)
    F(a->alpha != 0, "alpha = %.17g", a->alpha);
    F(a->beta != 0, "beta = %.17g", a->beta);
    F(a->axes != 0, "axes = 0x%xu", a->axes);
    F(a->keepdims, "keepdims = true");
    F(a->trans_a, "trans_a = true");
    F(a->trans_b, "trans_b = true");
    F(a->axis != 0, "axis = %d", a->axis);
    F(a->rank != 0, "rank = %d", a->rank);
    for (int k = 0; k < SX_MAX_RANK; k++) {
        F(a->shape[k] != 0, "shape[%d] = %lld", k, (long long)a->shape[k]);
        F(a->ints[k] != 0, "ints[%d] = %lld", k, (long long)a->ints[k]);
        F(a->ints2[k] != 0, "ints2[%d] = %lld", k, (long long)a->ints2[k]);
    }
    for (int k = 0; k < SX_MAX_RANK; k++) {
        const sx_slice *s = &a->slice[k];
        if ((d->op == SX_OP_SLICE && k < r) || (d->op == SX_OP_UNSLICE && k < a->rank))
            F(true, "slice[%d] = (sx_slice){%lld, %lld, %lld}", k, (long long)s->start,
              s->stop == SX_SLICE_END ? -1LL : (long long)s->stop, (long long)s->step);
    }
    const sx_conv2d_params *c = &a->conv;
    if (c->stride_h != 0)
        F(true,
          "conv = (sx_conv2d_params){.stride_h = %d, .stride_w = %d, .padding = %s, .pad_top = "
          "%d, .pad_bottom = %d, .pad_left = %d, .pad_right = %d, .dilation_h = %d, .dilation_w "
          "= %d, .groups = %d, .output_padding_h = %d, .output_padding_w = %d}",
          c->stride_h, c->stride_w, padding_name(c->padding), c->pad_top, c->pad_bottom,
          c->pad_left, c->pad_right, c->dilation_h, c->dilation_w, c->groups, c->output_padding_h,
          c->output_padding_w);
    const sx_pool2d_params *q = &a->pool;
    if (q->kernel_h != 0)
        F(true,
          "pool = (sx_pool2d_params){.kernel_h = %d, .kernel_w = %d, .stride_h = %d, .stride_w = "
          "%d, .padding = %s, .pad_top = %d, .pad_bottom = %d, .pad_left = %d, .pad_right = %d, "
          ".dilation_h = %d, .dilation_w = %d, .ceil_mode = %d, .count_include_pad = %d}",
          q->kernel_h, q->kernel_w, q->stride_h, q->stride_w, padding_name(q->padding), q->pad_top,
          q->pad_bottom, q->pad_left, q->pad_right, q->dilation_h, q->dilation_w, q->ceil_mode,
          q->count_include_pad);
#undef F
}

void dt_print_c(const dt_prog *p, dt_family f, const dt_result *r, FILE *o)
{
    const char *dts = p->dt == SX_F32 ? "SX_F32" : "SX_F64";
    fprintf(o, "/* difftest reproducer: program seed %llu, family %s, check %s:\n *   %s */\n",
            (unsigned long long)p->seed, dt_family_name[f], r->check, r->msg);
    fprintf(o, "    sx_cg_graph *g = NULL;\n    sx_cg_graph_new(SX_CG_LAZY, %s, &g);\n", dts);
    for (int i = 0; i < p->n; i++) {
        const dt_node *d = &p->node[i];
        char sh[128];
        sx_shape_str(d->rank, d->shape, sh, sizeof sh);
        if (d->kind != DT_OP) {
            int64_t n = shape_size(d->rank, d->shape);
            if (d->kind == DT_CONST)
                fprintf(o, "    sx_cg_node *n%d = dt_const(g, %s, %d, ", i, dts, d->rank);
            else
                fprintf(o, "    sx_cg_node *n%d = dt_%s(g, \"n%d\", %s, %d, ", i,
                        d->kind == DT_PARAM ? "param" : "input", i, dts, d->rank);
            print_shape(o, d->rank, d->shape);
            fprintf(o, ", ");
            print_vals(o, p->dt, d->val, n);
            fprintf(o, ");%s\n", d->kind == DT_INDEX ? " /* indices: not differentiated */" : "");
            continue;
        }
        const char *name = sx_cg_op_name(d->op), *ev = op_eval[d->op];
        const sx_cg_attr *a = &d->attr;
        if (strcmp(ev, "eval_map") == 0 && a->alpha == 0) {
            fprintf(o, "    sx_cg_node *n%d = sx_cg_%s(g, n%d);", i, name, d->in[0]);
        } else if (strcmp(ev, "eval_map") == 0) {
            fprintf(o, "    sx_cg_node *n%d = sx_cg_%s(g, n%d, %.17g);", i, name, d->in[0],
                    a->alpha);
        } else if (strcmp(ev, "eval_binary") == 0) {
            fprintf(o, "    sx_cg_node *n%d = sx_cg_%s(g, n%d, n%d);", i, name, d->in[0], d->in[1]);
        } else if (strcmp(ev, "eval_fold") == 0) {
            fprintf(o, "    sx_cg_node *n%d = sx_cg_%s(g, n%d, 0x%xu, %s);", i, name, d->in[0],
                    a->axes, a->keepdims ? "true" : "false");
        } else if (d->op == SX_OP_MATMUL) {
            fprintf(o, "    sx_cg_node *n%d = sx_cg_gemm(g, n%d, n%d, %s, %s, %.17g, ", i, d->in[0],
                    d->in[1], a->trans_a ? "true" : "false", a->trans_b ? "true" : "false",
                    a->alpha);
            if (d->n_in == 3)
                fprintf(o, "n%d, %.17g);", d->in[2], a->beta);
            else
                fprintf(o, "NULL, 0);");
        } else if (d->op == SX_OP_DROPOUT_MASK) {
            fprintf(o, "    int rng%d;\n    sx_cg_rng_new(g, %lluULL, &rng%d);\n", i,
                    (unsigned long long)d->rng_seed, i);
            fprintf(o, "    sx_cg_node *n%d = sx_cg_dropout_mask(g, rng%d, %.17g, %d, ", i, i,
                    a->alpha, a->rank);
            print_shape(o, a->rank, a->shape);
            fprintf(o, ");");
        } else if (d->op == SX_OP_FMA || d->op == SX_OP_WHERE) {
            fprintf(o, "    sx_cg_node *n%d = sx_cg_%s(g, n%d, n%d, n%d);", i, name, d->in[0],
                    d->in[1], d->in[2]);
        } else if (d->n_in == 1 && strncmp(ev, "eval_", 5) == 0 &&
                   (d->op == SX_OP_INV || d->op == SX_OP_DET || d->op == SX_OP_LOGDET ||
                    d->op == SX_OP_CHOLESKY || d->op == SX_OP_QR_Q || d->op == SX_OP_QR_R ||
                    d->op == SX_OP_SVD_S || d->op == SX_OP_EIGH_W || d->op == SX_OP_EIGH_V)) {
            fprintf(o, "    sx_cg_node *n%d = sx_cg_%s(g, n%d);", i, name, d->in[0]);
        } else {
            print_attr(o, i, d, p);
            fprintf(o, "    sx_cg_node *n%d = sx_cg_op_new(g, SX_OP_", i);
            for (const char *c = name; *c; c++)
                fputc(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c, o);
            fprintf(o, ", %d, (sx_cg_node *[]){", d->n_in);
            for (int k = 0; k < d->n_in; k++)
                fprintf(o, "%sn%d", k ? ", " : "", d->in[k]);
            fprintf(o, "}, &at%d);", i);
        }
        fprintf(o, " /* %s */\n", sh);
    }
    const dt_node *y = &p->node[p->out];
    if (p->w != NULL) {
        fprintf(o, "    sx_cg_node *w = dt_const(g, %s, %d, ", dts, y->rank);
        print_shape(o, y->rank, y->shape);
        fprintf(o, ", ");
        print_vals(o, p->dt, p->w, shape_size(y->rank, y->shape));
        fprintf(o,
                ");\n    sx_cg_node *L = sx_cg_sum(g, sx_cg_mul(g, n%d, w), SX_AXES_ALL, false);\n",
                p->out);
    } else {
        fprintf(o, "    sx_cg_node *L = sx_cg_sum(g, n%d, SX_AXES_ALL, false);\n", p->out);
    }
    int nx = 0;
    fprintf(o, "    sx_cg_node *xs[] = {");
    for (int i = 0; i < p->n; i++)
        if (is_wrt(&p->node[i]))
            fprintf(o, "%sn%d", nx++ ? ", " : "", i);
    fprintf(o, "%s}, *grads[%d];\n", nx ? "" : "NULL", nx ? nx : 1);
    switch (f) {
    case DT_MODES:
        fprintf(o,
                "    /* evaluate y, L and sx_ad_grad(g, L, %d, xs, grads) lazily and in the mode "
                "named by the check; compare bit for bit (modes:bn-fold: y and L without the "
                "gradients, sx_cg_optimise with SX_PASS_BN_FOLD, then sx_cg_freeze; within the "
                "bound in the check) */\n",
                nx);
        break;
    case DT_GRAD:
        fprintf(o,
                "    sx_ad_grad(g, L, %d, xs, grads); /* then compare with central "
                "differences of L */\n",
                nx);
        break;
    case DT_OPTGRAD:
        fprintf(o,
                "    sx_cg_optimise(g, 1, &L, NULL, NULL); /* (or without "
                "SX_PASS_ELEMWISE_FUSION and SX_PASS_CONV_EPILOGUE) */\n    sx_ad_grad(g, L, %d, "
                "xs, grads); /* against "
                "the same without optimising */\n",
                nx);
        break;
    case DT_HVP:
        fprintf(o, "    /* sx_ad_hvp(g, L, x, v, &hv) for the leaf named in the check, against "
                   "differences of sx_ad_grad along v */\n");
        break;
    case DT_FAMILY_COUNT:
        break;
    }
}

/* ---------------------------------------------------------------- campaigns */

#define MAX_DISTINCT 64

typedef struct distinct {
    char key[256]; /* the check, and the ops of the shrunk program */
    int64_t count;
    uint64_t seeds[8];
    int n_seeds;
} distinct;

/* "grad:fd [relu sqrt]": the check and the ops of a (shrunk) program, in op-table order. */
static void prog_key(const dt_prog *p, const char *check, bool ops, char *key, size_t n)
{
    bool used[SX_OP_COUNT] = {0};
    size_t len = (size_t)snprintf(key, n, "%s", check);
    for (int i = 0; ops && i < p->n; i++)
        if (p->node[i].kind == DT_OP)
            used[p->node[i].op] = true;
    for (int op = 0; ops && op < SX_OP_COUNT && len < n; op++)
        if (used[op])
            len += (size_t)snprintf(key + len, n - len, "%s%s", len == strlen(check) ? " [" : " ",
                                    sx_cg_op_name((sx_cg_op)op));
    if (ops && len < n && len > strlen(check))
        snprintf(key + len, n - len, "]");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int64_t dt_campaign_run(dt_campaign *c)
{
    FILE *log = c->log != NULL ? c->log : stderr;
    distinct d[MAX_DISTINCT];
    int nd = 0, shrinks = 0;
    double t0 = now_s();
    int max_reports = c->max_reports > 0 ? c->max_reports : 1;
    c->programs = c->failures = c->distinct = c->trusted = c->untrusted = c->refused = c->skipped =
        0;
    for (int64_t i = 0;; i++) {
        if (c->count > 0 && i >= c->count)
            break;
        if (c->seconds > 0 && now_s() - t0 >= c->seconds)
            break;
        if (c->count <= 0 && c->seconds <= 0)
            break;
        uint64_t seed = c->seed0 + (uint64_t)i;
        dt_prog *p = dt_generate(seed, seed % 2 ? SX_F32 : SX_F64, c->depth);
        if (p == NULL)
            break;
        c->programs++;
        for (int f = 0; f < DT_FAMILY_COUNT; f++) {
            if (!c->families[f])
                continue;
            dt_result r;
            dt_check(p, (dt_family)f, &r);
            c->trusted += r.trusted;
            c->untrusted += r.untrusted;
            c->refused += r.refused;
            c->skipped += r.skipped;
            if (!r.failed)
                continue;
            c->failures++;
            /* shrink, and tell failures apart by the check and the ops of the minimal program */
            dt_prog *sp = NULL;
            dt_result rs = r;
            if (c->shrink && shrinks < (c->max_shrinks > 0 ? c->max_shrinks : 1000)) {
                shrinks++;
                sp = dt_shrink(p, (dt_family)f, &rs);
                if (sp != NULL && !rs.failed) {
                    dt_prog_free(sp);
                    sp = NULL;
                    rs = r;
                }
            }
            char key[sizeof d[0].key];
            prog_key(sp != NULL ? sp : p, rs.check, sp != NULL, key, sizeof key);
            int j = 0;
            while (j < nd && strcmp(d[j].key, key) != 0)
                j++;
            if (j == nd && nd < MAX_DISTINCT) {
                memset(&d[nd], 0, sizeof d[nd]);
                snprintf(d[nd].key, sizeof d[nd].key, "%s", key);
                nd++;
            }
            if (j < nd) {
                d[j].count++;
                if (d[j].n_seeds < 8)
                    d[j].seeds[d[j].n_seeds++] = seed;
            }
            if (j < nd && d[j].count <= max_reports) {
                fprintf(log, "\n==== difftest: seed %llu (%s), family %s FAILED check %s\n    %s\n",
                        (unsigned long long)seed, p->dt == SX_F32 ? "f32" : "f64",
                        dt_family_name[f], r.check, r.msg);
                if (sp != NULL)
                    fprintf(log, "---- shrunk from %d to %d nodes:\n", p->n, sp->n);
                dt_print_c(sp != NULL ? sp : p, (dt_family)f, &rs, log);
                fflush(log);
            }
            dt_prog_free(sp);
        }
        dt_prog_free(p);
    }
    c->distinct = nd;
    fprintf(log,
            "\n==== difftest summary: %lld programs from seed %llu in %.1f s; %lld failures, %d "
            "distinct checks; %lld finite-difference elements compared, %lld untrusted (near a "
            "kink) skipped; %lld optimise-then-differentiate refusals; %lld family runs not "
            "applicable\n",
            (long long)c->programs, (unsigned long long)c->seed0, now_s() - t0,
            (long long)c->failures, nd, (long long)c->trusted, (long long)c->untrusted,
            (long long)c->refused, (long long)c->skipped);
    for (int j = 0; j < nd; j++) {
        fprintf(log, "  %-60s %5lld  seeds", d[j].key, (long long)d[j].count);
        for (int k = 0; k < d[j].n_seeds; k++)
            fprintf(log, " %llu", (unsigned long long)d[j].seeds[k]);
        fprintf(log, "\n");
    }
    fflush(log);
    return c->failures;
}
