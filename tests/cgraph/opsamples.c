/* opsamples.c: the sample generators of opsamples.h, one per row of sx_ops.def, and the table of
 * them. The generators of each op family sit in samples/<family>.c, named as the family's
 * cgraph/ops/<family>.c, which this file includes; it holds what they share (leaves, values,
 * matrices, the references' helpers), the leaves' own samples and the table. Values are drawn
 * in double from the caller's generator and rounded to the sample's dtype, so f32 and f64
 * samples of one seed hold the same numbers. Each generator is preceded by its SPEC_<name>:
 * n_variants, how the op is differentiable, and the finite-difference step and tolerance (f64);
 * and by its DT_<name>, the op's row in the differential tester (difftest.c, which includes this
 * file and spells the row's macros): the generator that composes the op into random programs
 * (difftest.c's gen_*), its weight and its domain, or EXCLUDED(reason). A row without its SPEC_
 * or DT_ does not compile. The unary element-wise rows have no DT_: their tester row comes from
 * their sx_map.def row (its domain column).
 * Beside each sample, its references for test_ops (opsamples.h: os_kernel_fn, os_plain_fn): the
 * direct kernel call kernel_<name> and the plain reference plain_<name> (loops in double), named
 * at the end of its SPEC_ by REF(kernel_<name>, plain_<name>); ops of one family may share them
 * (plain_remap, plain_softmax, ...). A SPEC_ without REF compiles and fails test_ops'
 * every_op_has_its_references, naming the op. The element-wise rows of sx_map.def and
 * sx_binary.def name none: os_kernel / os_plain give them the element-wise ones.
 * Test files include this file (#include "opsamples.c"): one executable per test file; their
 * include path has opsamples_families.h (tests/CMakeLists.txt: strix_testutil's). */
#include "opsamples.h"
#include "sx_tensor_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAXV 1024 /* elements of the largest leaf a generator makes */

/* A shape written inline: (shp){2, {3, 4}}; rank 0 is (shp){0, {0}}. */
typedef struct shp {
    int rank;
    int64_t d[SX_MAX_RANK];
} shp;

static int64_t shp_size(shp s)
{
    int64_t n = 1;
    for (int i = 0; i < s.rank; i++)
        n *= s.d[i];
    return n;
}

/* What every generator carries around. */
typedef struct ctx {
    sx_cg_graph *g;
    sx_dtype dt;
    sx_rng *rng;
    os_sample *s;
} ctx;

static sx_cg_node *fail(ctx *c, sx_status st)
{
    if (c->s->status == SX_OK)
        c->s->status = st;
    return NULL;
}

/* ---------------------------------------------------------------- values */

typedef enum {
    V_UNIFORM,  /* uniform in [a, b) */
    V_AWAY,     /* |x| uniform in [a, b) with a random sign: away from 0 (abs, relu, sign) */
    V_FRAC,     /* an integer in [a, b] plus a fraction in (0.1, 0.4) or (0.6, 0.9): away from
                   the jumps of floor, ceil and round */
    V_DISTINCT, /* n distinct values in [a, b), at least (b - a) / 2n apart, in random order: no
                   ties for max, min, argmax or max pooling */
    V_INT,      /* integers in [a, b]: indices, conditions, and ties for the comparisons */
    V_LATTICE,  /* a + 0.2 k, k in 0..20: lattices with offsets 0.1 apart never tie (max/min) */
} vkind;

static double uni(sx_rng *r, double a, double b)
{
    return a + (b - a) * sx_rng_uniform(r);
}

static void fill(sx_rng *r, vkind k, double a, double b, int64_t n, double *v)
{
    switch (k) {
    case V_UNIFORM:
        for (int64_t i = 0; i < n; i++)
            v[i] = uni(r, a, b);
        break;
    case V_AWAY:
        for (int64_t i = 0; i < n; i++)
            v[i] = (sx_rng_below(r, 2) ? 1 : -1) * uni(r, a, b);
        break;
    case V_FRAC:
        for (int64_t i = 0; i < n; i++)
            v[i] = a + (double)sx_rng_below(r, (uint64_t)(b - a + 1)) +
                   (sx_rng_below(r, 2) ? 0.6 : 0.1) + uni(r, 0, 0.3);
        break;
    case V_DISTINCT: {
        int64_t perm[MAXV];
        for (int64_t i = 0; i < n; i++)
            perm[i] = i;
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)sx_rng_below(r, (uint64_t)i + 1), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (int64_t i = 0; i < n; i++)
            v[i] = a + (b - a) * ((double)perm[i] + 0.25 + 0.5 * sx_rng_uniform(r)) / (double)n;
        break;
    }
    case V_INT:
        for (int64_t i = 0; i < n; i++)
            v[i] = a + (double)sx_rng_below(r, (uint64_t)(b - a + 1));
        break;
    case V_LATTICE:
        for (int64_t i = 0; i < n; i++)
            v[i] = a + 0.2 * (double)sx_rng_below(r, 21);
        break;
    }
}

/* ---------------------------------------------------------------- leaves */

/* A leaf of shape sh holding v (doubles rounded to the dtype): an input given its value at once
 * (so eager graphs can compute from it), or a parameter. Recorded in the sample. */
static sx_cg_node *leaf_of(ctx *c, shp sh, const double *v, bool wrt, bool param)
{
    os_sample *s = c->s;
    if (s->n_leaves >= OS_MAX_LEAVES)
        return fail(c, sx_error(SX_E_ARG, "opsamples: more than %d leaves", OS_MAX_LEAVES));
    sx_tensor *t = NULL;
    sx_status st = sx_tensor_from_doubles(c->dt, sh.rank, sh.d, v, shp_size(sh), &t);
    if (st != SX_OK)
        return fail(c, st);
    char name[8] = {'x', (char)('0' + s->n_leaves), 0};
    sx_cg_node *n;
    if (param) {
        n = sx_cg_param(c->g, name, t);
    } else {
        n = sx_cg_input(c->g, name, c->dt, sh.rank, sh.d);
        if (n != NULL && (st = sx_cg_input_set(c->g, n, t, SX_CG_COPY)) != SX_OK)
            n = fail(c, st);
    }
    sx_tensor_free(t);
    if (n == NULL)
        return NULL;
    s->leaf[s->n_leaves] = n;
    s->wrt[s->n_leaves] = wrt;
    s->n_leaves++;
    return n;
}

static sx_cg_node *leaf_kind(ctx *c, shp sh, vkind k, double a, double b, bool wrt, bool param)
{
    double v[MAXV];
    if (shp_size(sh) > MAXV)
        return fail(c, sx_error(SX_E_ARG, "opsamples: leaf larger than %d", MAXV));
    fill(c->rng, k, a, b, shp_size(sh), v);
    return leaf_of(c, sh, v, wrt, param);
}

/* An input with values of kind k (differentiated with respect to). */
static sx_cg_node *in(ctx *c, shp sh, vkind k, double a, double b)
{
    return leaf_kind(c, sh, k, a, b, true, false);
}

/* An input that is not differentiated: indices in [0, n), conditions, comparison operands. */
static sx_cg_node *in_fixed(ctx *c, shp sh, vkind k, double a, double b)
{
    return leaf_kind(c, sh, k, a, b, false, false);
}

/* Rows of probabilities (each row positive, summing to 1): softmax targets. One-hot rows when
 * `hard`. */
static sx_cg_node *in_probs(ctx *c, shp sh, bool hard)
{
    double v[MAXV];
    int64_t k = sh.d[sh.rank - 1], rows = shp_size(sh) / (k > 0 ? k : 1);
    if (shp_size(sh) > MAXV)
        return fail(c, sx_error(SX_E_ARG, "opsamples: leaf larger than %d", MAXV));
    for (int64_t i = 0; i < rows && k > 0; i++) {
        double sum = 0;
        int64_t hot = (int64_t)sx_rng_below(c->rng, (uint64_t)k);
        for (int64_t j = 0; j < k; j++)
            sum += v[i * k + j] = hard ? (double)(j == hot) : uni(c->rng, 0.1, 1);
        for (int64_t j = 0; j < k; j++)
            v[i * k + j] /= sum;
    }
    return leaf_of(c, sh, v, true, false);
}

/* ---------------------------------------------------------------- matrices */

/* A random orthogonal n x n matrix (row-major): Gram-Schmidt, twice, on Gaussian columns. */
static void orthogonal(sx_rng *r, int n, double *q)
{
    for (int i = 0; i < n * n; i++)
        q[i] = sx_rng_normal(r);
    for (int j = 0; j < n; j++)
        for (int pass = 0; pass < 2; pass++) {
            for (int k = 0; k < j; k++) {
                double d = 0;
                for (int i = 0; i < n; i++)
                    d += q[i * n + k] * q[i * n + j];
                for (int i = 0; i < n; i++)
                    q[i * n + j] -= d * q[i * n + k];
            }
            double nrm = 0;
            for (int i = 0; i < n; i++)
                nrm += q[i * n + j] * q[i * n + j];
            nrm = sqrt(nrm);
            for (int i = 0; i < n; i++)
                q[i * n + j] /= nrm;
        }
}

/* a (m,n) = U diag(sv) V^T with random orthogonal U (m,m), V (n,n): singular values sv[0..k),
 * k = min(m, n). When `sym` (m == n), V = U: a symmetric matrix with eigenvalues sv. */
static void spectral(sx_rng *r, int m, int n, const double *sv, bool sym, double *a)
{
    double u[64], v[64];
    int k = m < n ? m : n;
    orthogonal(r, m, u);
    if (sym)
        memcpy(v, u, sizeof v);
    else
        orthogonal(r, n, v);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double x = 0;
            for (int l = 0; l < k; l++)
                x += u[i * m + l] * sv[l] * v[j * n + l];
            a[i * n + j] = x;
        }
}

/* An input (m,n) with singular values drawn from [lo, hi) (full rank, condition <= hi/lo). */
static sx_cg_node *in_matrix(ctx *c, int m, int n, double lo, double hi)
{
    double sv[8], a[64];
    for (int i = 0; i < 8; i++)
        sv[i] = uni(c->rng, lo, hi);
    spectral(c->rng, m, n, sv, false, a);
    return leaf_of(c, (shp){2, {m, n}}, a, true, false);
}

/* A symmetric (n,n) node (B + B^T) / 2 over an input B = Q diag(w) Q^T: every perturbation of B
 * keeps it symmetric (LAPACK reads one triangle; finite differences must not notice). */
static sx_cg_node *in_symmetric(ctx *c, int n, const double *w)
{
    double a[64];
    spectral(c->rng, n, n, w, true, a);
    sx_cg_node *b = leaf_of(c, (shp){2, {n, n}}, a, true, false);
    return sx_cg_mul_scalar(c->g, sx_cg_add(c->g, b, sx_cg_transpose(c->g, b)), 0.5);
}

/* ---------------------------------------------------------------- references: shared helpers */

/* Beside each sample sit the two references test_ops checks its node against (opsamples.h:
 * os_kernel_fn, os_plain_fn), named by REF(kernel, plain) at the end of the sample's SPEC_. They
 * compute from x, the node's input values (for ops that write their inputs, the values before the
 * evaluation), and use no Criterion (the differential tester includes this file too): a failed
 * check returns an error that names it. */
#define REF(kernel_fn, plain_fn) .kernel = (kernel_fn), .plain = (plain_fn)
#define KERNEL_ARGS                                                                                \
    const sx_cg_node *n, const os_sample *s, const sx_tensor *const *x, sx_tensor *out
#define PLAIN_ARGS                                                                                 \
    const sx_cg_node *n, const sx_tensor *const *x, double *want, double *mag, bool *compare

/* Scratch memory, zeroed; out of memory ends the test program. */
static void *ref_alloc(size_t bytes)
{
    void *p = calloc(1, bytes > 0 ? bytes : 1);
    if (p == NULL)
        abort();
    return p;
}

static sx_tensor *ref_zeros(sx_dtype dt, int rank, const int64_t *shape)
{
    sx_tensor *t = NULL;
    if (sx_tensor_zeros(dt, rank, shape, &t) != SX_OK)
        abort();
    return t;
}

static sx_tensor *ref_clone(const sx_tensor *t)
{
    sx_tensor *c = NULL;
    if (sx_tensor_clone(t, &c) != SX_OK)
        abort();
    return c;
}

static double ref_get(const sx_tensor *t, int64_t i)
{
    return sx_tensor_get(t, i);
}

static const sx_tensor *ref_in(const sx_cg_node *n, int i)
{
    return sx_cg_value(sx_cg_node_input(n, i));
}

/* SX_OK when a and b hold the same bits; else SX_E_STATE naming `which` and the first element
 * that differs. */
static sx_status ref_same_bits(const sx_tensor *a, const sx_tensor *b, const char *which)
{
    if (a->dtype != b->dtype || !sx_shape_equal(a->rank, a->shape, b->rank, b->shape))
        return sx_error(SX_E_STATE, "%s: dtypes or shapes differ", which);
    size_t es = sx_dtype_size(a->dtype);
    for (int64_t i = 0; i < a->size; i++)
        if (memcmp((const char *)a->data + (size_t)i * es, (const char *)b->data + (size_t)i * es,
                   es) != 0)
            return sx_error(SX_E_STATE, "%s: element %lld: %.17g vs %.17g", which, (long long)i,
                            ref_get(a, i), ref_get(b, i));
    return SX_OK;
}

static void ref_unravel(int64_t i, int rank, const int64_t *shape, int64_t *idx)
{
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

/* The flat index into x (right-aligned, size-1 axes broadcast) of an output multi-index. */
static int64_t ref_bcast_at(const sx_tensor *x, int out_rank, const int64_t *oidx)
{
    int64_t k = 0;
    for (int d = 0; d < x->rank; d++) {
        int64_t id = x->shape[d] == 1 ? 0 : oidx[d + out_rank - x->rank];
        k = k * x->shape[d] + id;
    }
    return k;
}

/* The same values, element by element: views, copies, seq. */
static sx_status plain_copy(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    for (int64_t i = 0; i < sx_cg_value(n)->size; i++)
        want[i] = ref_get(x[0], i);
    return SX_OK;
}

/* Leaves: the value set is all there is (lazy = eager = it); the kernel is a copy. */
static sx_status kernel_leaf(KERNEL_ARGS)
{
    (void)s, (void)x;
    return sx_tensor_copy_out(sx_cg_value(n), out);
}

static sx_status plain_leaf(PLAIN_ARGS)
{
    (void)n, (void)x, (void)want, (void)mag;
    *compare = false;
    return SX_OK;
}

/* ---------------------------------------------------------------- leaves as samples */

#define GEN_ARGS sx_cg_graph *g, sx_dtype dt, sx_rng *rng, int v, os_sample *s
#define CTX ctx c_ = {g, dt, rng, s}, *c = &c_

static const shp leaf_shapes[] = {{0, {0}}, {1, {5}}, {2, {2, 3}}};

#define SPEC_const 3, OS_NONE, 0, 0, REF(kernel_leaf, plain_leaf)
#define DT_const LEAF
static sx_cg_node *sample_const(GEN_ARGS)
{
    CTX;
    double vals[6];
    fill(rng, V_UNIFORM, -2, 2, shp_size(leaf_shapes[v]), vals);
    sx_tensor *t = NULL;
    sx_status st = sx_tensor_from_doubles(dt, leaf_shapes[v].rank, leaf_shapes[v].d, vals,
                                          shp_size(leaf_shapes[v]), &t);
    if (st != SX_OK)
        return fail(c, st);
    sx_cg_node *n = sx_cg_const(g, t);
    sx_tensor_free(t);
    return n;
}

/* input and param: the identity of a leaf (d out / d leaf = I) */
#define SPEC_input 3, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_leaf, plain_leaf)
#define DT_input LEAF
static sx_cg_node *sample_input(GEN_ARGS)
{
    CTX;
    return in(c, leaf_shapes[v], V_UNIFORM, -2, 2);
}

#define SPEC_param 3, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_leaf, plain_leaf)
#define DT_param LEAF
static sx_cg_node *sample_param(GEN_ARGS)
{
    CTX;
    return leaf_kind(c, leaf_shapes[v], V_UNIFORM, -2, 2, true, true);
}

/* ---------------------------------------------------------------- the families' samples */

/* The samples of each op family, one file per cgraph/ops/<family>.c, samples/<family>.c: all of
 * them, in name order, through opsamples_families.h, which tests/CMakeLists.txt writes from the
 * folder (a new family's file is found). Each uses what this file defines above and what the
 * files before it in name order define. */
#include "opsamples_families.h"

/* ---------------------------------------------------------------- the table */

const os_op os_ops[SX_OP_COUNT] = {
#define X(NAME, nm, arity, shape, eval, flags, kernel, nograd)                                     \
    [SX_OP_##NAME] = {.op = SX_OP_##NAME, .name = #nm, .gen = sample_##nm, SPEC_##nm},
#include "sx_ops.def"
#undef X
};

_Static_assert(sizeof os_ops / sizeof os_ops[0] == SX_OP_COUNT, "one sample generator per op");

sx_cg_node *os_build(sx_cg_graph *g, sx_cg_op op, sx_dtype dt, uint64_t seed, int variant,
                     os_sample *s)
{
    memset(s, 0, sizeof *s);
    if ((unsigned)op >= SX_OP_COUNT || variant < 0 || variant >= os_ops[op].n_variants) {
        s->status = sx_error(SX_E_ARG, "os_build: op %d has no variant %d", (int)op, variant);
        return NULL;
    }
    sx_rng rng;
    sx_rng_seed(&rng, seed);
    s->out = os_ops[op].gen(g, dt, &rng, variant, s);
    if (s->out == NULL && s->status == SX_OK)
        s->status = sx_cg_graph_status(g) != SX_OK ? sx_cg_graph_status(g) : SX_E_STATE;
    return s->out;
}

sx_status os_leaf_set(sx_cg_graph *g, const os_sample *s, int i, const sx_tensor *value)
{
    if (i < 0 || i >= s->n_leaves)
        return sx_error(SX_E_ARG, "os_leaf_set: no leaf %d", i);
    if (sx_cg_node_op(s->leaf[i]) == SX_OP_INPUT)
        return sx_cg_input_set(g, s->leaf[i], value, SX_CG_COPY);
    return sx_cg_leaf_set(g, s->leaf[i], value);
}

sx_status os_eval_weighted(sx_cg_graph *g, sx_cg_node *out, const double *w, double *phi)
{
    sx_status st = sx_cg_eval(g, 1, &out);
    if (st != SX_OK)
        return st;
    const sx_tensor *y = sx_cg_value(out);
    double acc = 0;
    for (int64_t k = 0; y != NULL && k < y->size; k++)
        acc += (w ? w[k] : 1.0) * sx_tensor_get(y, k);
    *phi = acc;
    return SX_OK;
}

sx_status os_fd_directional(sx_cg_graph *g, const os_sample *s, sx_cg_node *out,
                            const double *const *dir, const double *w, double h, double *d)
{
    sx_tensor *orig[OS_MAX_LEAVES] = {0}, *moved[OS_MAX_LEAVES] = {0};
    sx_status st = SX_OK;
    double phi[2] = {0, 0};
    for (int i = 0; i < s->n_leaves && st == SX_OK; i++)
        if (dir[i] != NULL) {
            st = sx_tensor_clone(sx_cg_value(s->leaf[i]), &orig[i]);
            if (st == SX_OK)
                st = sx_tensor_clone(orig[i], &moved[i]);
        }
    for (int side = 0; side < 2 && st == SX_OK; side++) {
        double t = side == 0 ? h : -h;
        for (int i = 0; i < s->n_leaves && st == SX_OK; i++) {
            if (dir[i] == NULL)
                continue;
            for (int64_t k = 0; k < orig[i]->size; k++)
                sx_tensor_set(moved[i], k, sx_tensor_get(orig[i], k) + t * dir[i][k]);
            st = os_leaf_set(g, s, i, moved[i]);
        }
        if (st == SX_OK)
            st = os_eval_weighted(g, out, w, &phi[side]);
    }
    for (int i = 0; i < s->n_leaves; i++) {
        if (orig[i] != NULL) {
            sx_status r = os_leaf_set(g, s, i, orig[i]);
            if (st == SX_OK)
                st = r;
        }
        sx_tensor_free(orig[i]);
        sx_tensor_free(moved[i]);
    }
    *d = (phi[0] - phi[1]) / (2 * h);
    return st;
}

os_kernel_fn os_kernel(sx_cg_op op)
{
    if ((unsigned)op >= SX_OP_COUNT)
        return NULL;
    if (os_ops[op].kernel != NULL)
        return os_ops[op].kernel;
    if (ref_map_kernel(op) != SX_MAP_COUNT)
        return kernel_map;
    return ref_binary_kernel(op) != SX_BINARY_COUNT ? kernel_binary : NULL;
}

os_plain_fn os_plain(sx_cg_op op)
{
    if ((unsigned)op >= SX_OP_COUNT)
        return NULL;
    if (os_ops[op].plain != NULL)
        return os_ops[op].plain;
    if (ref_map_kernel(op) != SX_MAP_COUNT)
        return plain_map;
    return ref_binary_kernel(op) != SX_BINARY_COUNT ? plain_binary : NULL;
}
