/* opsamples.c: the sample generators of opsamples.h, one per row of sx_ops.def. Values are drawn
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
 * Test files include this file (#include "opsamples.c"): one executable per test file. */
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

/* ---------------------------------------------------------------- unary element-wise */

/* Rank 0, 1, 2, 3 and an empty tensor. */
static const shp unary_shapes[] = {{0, {0}}, {1, {7}}, {2, {3, 4}}, {3, {2, 3, 4}}, {3, {2, 0, 3}}};
#define N_UNARY 5

#define UNARY_SAMPLE(name, kind, a, b)                                                             \
    static sx_cg_node *sample_##name(GEN_ARGS)                                                     \
    {                                                                                              \
        CTX;                                                                                       \
        return sx_cg_##name(g, in(c, unary_shapes[v], kind, a, b));                                \
    }

#define SPEC_neg N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(neg, V_UNIFORM, -2, 2)
#define SPEC_abs N_UNARY, OS_PIECEWISE, 1e-6, 1e-6
UNARY_SAMPLE(abs, V_AWAY, 0.1, 2)
#define SPEC_sign N_UNARY, OS_NONE, 1e-6, 0
UNARY_SAMPLE(sign, V_AWAY, 0.1, 2)
#define SPEC_sqr N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(sqr, V_UNIFORM, -2, 2)
#define SPEC_sqrt N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(sqrt, V_UNIFORM, 0.2, 3)
#define SPEC_rsqrt N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(rsqrt, V_UNIFORM, 0.2, 3)
#define SPEC_exp N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(exp, V_UNIFORM, -3, 3)
#define SPEC_log N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(log, V_UNIFORM, 0.2, 3)
#define SPEC_log1p N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(log1p, V_UNIFORM, -0.7, 2)
#define SPEC_expm1 N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(expm1, V_UNIFORM, -2, 2)
#define SPEC_sin N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(sin, V_UNIFORM, -3, 3)
#define SPEC_cos N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(cos, V_UNIFORM, -3, 3)
#define SPEC_tan N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(tan, V_UNIFORM, -1.2, 1.2) /* poles at +-pi/2 */
#define SPEC_tanh N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(tanh, V_UNIFORM, -2, 2)
#define SPEC_sigmoid N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(sigmoid, V_UNIFORM, -4, 4)
#define SPEC_relu N_UNARY, OS_PIECEWISE, 1e-6, 1e-6
UNARY_SAMPLE(relu, V_AWAY, 0.1, 2)
#define SPEC_softplus N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(softplus, V_UNIFORM, -3, 3)
#define SPEC_floor N_UNARY, OS_NONE, 1e-6, 0
UNARY_SAMPLE(floor, V_FRAC, -3, 2)
#define SPEC_ceil N_UNARY, OS_NONE, 1e-6, 0
UNARY_SAMPLE(ceil, V_FRAC, -3, 2)
#define SPEC_round N_UNARY, OS_NONE, 1e-6, 0
UNARY_SAMPLE(round, V_FRAC, -3, 2)
#define SPEC_reciprocal N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(reciprocal, V_AWAY, 0.3, 2)
#define SPEC_erf N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(erf, V_UNIFORM, -2, 2)
#define SPEC_softsign N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(softsign, V_AWAY, 0.1, 3) /* smooth away from 0 */
/* ---- PyTorch's smooth activations: gelu, gelu_tanh, silu, mish, hard_swish */
#define SPEC_gelu N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(gelu, V_UNIFORM, -3, 3)
#define SPEC_gelu_tanh N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(gelu_tanh, V_UNIFORM, -3, 3)
#define SPEC_silu N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(silu, V_UNIFORM, -4, 4)
#define SPEC_mish N_UNARY, OS_SMOOTH, 1e-6, 1e-6
UNARY_SAMPLE(mish, V_UNIFORM, -4, 4)
#define SPEC_hard_swish N_UNARY, OS_PIECEWISE, 1e-6, 1e-6
/* between the kinks at +-3 (even variants) or beyond them (odd: |x| in [3.1, 5]) */
static sx_cg_node *sample_hard_swish(GEN_ARGS)
{
    CTX;
    return sx_cg_hard_swish(g, v % 2 ? in(c, unary_shapes[v], V_AWAY, 3.1, 5)
                                     : in(c, unary_shapes[v], V_UNIFORM, -2.9, 2.9));
}
/* ---- end of gelu .. hard_swish */

/* leaky_relu and elu: the parameter changes with the variant; x away from the kink at 0 (elu
 * with alpha != 1 has a jump in its first derivative there) */
#define SPEC_leaky_relu N_UNARY, OS_PIECEWISE, 1e-6, 1e-6
static sx_cg_node *sample_leaky_relu(GEN_ARGS)
{
    CTX;
    return sx_cg_leaky_relu(g, in(c, unary_shapes[v], V_AWAY, 0.1, 2), v % 2 ? 0.2 : 0.01);
}

#define SPEC_elu N_UNARY, OS_PIECEWISE, 1e-6, 1e-6
static sx_cg_node *sample_elu(GEN_ARGS)
{
    CTX;
    return sx_cg_elu(g, in(c, unary_shapes[v], V_AWAY, 0.1, 2), v % 2 ? 0.5 : 1.0);
}

/* The unary rows' references, given by os_kernel and os_plain to every row of sx_map.def (their
 * SPEC_ names no REF): the kernel by the row's sx_map_op, the plain value by its ref column. */
static sx_map_op ref_map_kernel(sx_cg_op op)
{
#define SX_MAP_ROW(NAME, ...)                                                                      \
    if (op == SX_OP_##NAME)                                                                        \
        return SX_MAP_##NAME;
#include "sx_map.def"
#undef SX_MAP_ROW
    return SX_MAP_COUNT; /* not a map op */
}

/* The unary map op in double: the ref column of its sx_map.def row (libm, from the definition;
 * independent of the kernel expression). NaN for an op that is not a map. */
static double ref_map(sx_cg_op op, double x, double a)
{
    (void)a;
#define SX_MAP_ROW(NAME, name, expr, ref, ...)                                                     \
    if (op == SX_OP_##NAME)                                                                        \
        return (ref);
#include "sx_map.def"
#undef SX_MAP_ROW
    return nan(""); /* not a map op */
}

static sx_status kernel_map(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_map_out(ref_map_kernel(sx_cg_node_op(n)), sx_cg_node_attr(n)->alpha, x[0],
                             out);
}

static sx_status plain_map(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    for (int64_t i = 0; i < sx_cg_value(n)->size; i++)
        want[i] = ref_map(sx_cg_node_op(n), ref_get(x[0], i), sx_cg_node_attr(n)->alpha);
    return SX_OK;
}

/* ---------------------------------------------------------------- binary element-wise */

/* Broadcasting corner cases: equal shapes, rank mismatch, size-1 axes on both sides, rank-0
 * scalars on either side and both, and an empty result. */
static const shp binary_shapes[][2] = {
    {{2, {3, 4}}, {2, {3, 4}}},    {{2, {3, 4}}, {1, {4}}},    {{2, {3, 1}}, {2, {1, 4}}},
    {{0, {0}}, {2, {2, 3}}},       {{3, {2, 1, 4}}, {0, {0}}}, {{0, {0}}, {0, {0}}},
    {{3, {4, 1, 3}}, {2, {2, 1}}}, {{2, {0, 3}}, {2, {1, 3}}},
};
#define N_BINARY 8

typedef sx_cg_node *(*binary_fn)(sx_cg_graph *, sx_cg_node *, sx_cg_node *);

static sx_cg_node *binary(ctx *c, int v, binary_fn f, vkind ka, double a0, double a1, vkind kb,
                          double b0, double b1, bool wrt)
{
    sx_cg_node *a = leaf_kind(c, binary_shapes[v][0], ka, a0, a1, wrt, false);
    sx_cg_node *b = leaf_kind(c, binary_shapes[v][1], kb, b0, b1, wrt, false);
    return f(c->g, a, b);
}

#define BINARY_SAMPLE(name, ka, a0, a1, kb, b0, b1, wrt)                                           \
    static sx_cg_node *sample_##name(GEN_ARGS)                                                     \
    {                                                                                              \
        CTX;                                                                                       \
        return binary(c, v, sx_cg_##name, ka, a0, a1, kb, b0, b1, wrt);                            \
    }

#define SPEC_add N_BINARY, OS_SMOOTH, 1e-6, 1e-6
#define DT_add gen_binary, 6, DOMB_ANY, NULL
BINARY_SAMPLE(add, V_UNIFORM, -2, 2, V_UNIFORM, -2, 2, true)
#define SPEC_sub N_BINARY, OS_SMOOTH, 1e-6, 1e-6
#define DT_sub BIN(DOMB_ANY)
BINARY_SAMPLE(sub, V_UNIFORM, -2, 2, V_UNIFORM, -2, 2, true)
#define SPEC_mul N_BINARY, OS_SMOOTH, 1e-6, 1e-6
#define DT_mul gen_binary, 5, DOMB_ANY, NULL
BINARY_SAMPLE(mul, V_UNIFORM, -2, 2, V_UNIFORM, -2, 2, true)
#define SPEC_div N_BINARY, OS_SMOOTH, 1e-6, 1e-6
#define DT_div BIN(DOMB_DIV)
BINARY_SAMPLE(div, V_UNIFORM, -2, 2, V_AWAY, 0.5, 2, true)
#define SPEC_pow N_BINARY, OS_SMOOTH, 1e-6, 1e-6
#define DT_pow gen_binary, 5, DOMB_POW, NULL
BINARY_SAMPLE(pow, V_UNIFORM, 0.5, 2, V_UNIFORM, -2, 2, true) /* positive base */
/* max/min: two lattices 0.1 apart never tie */
#define SPEC_min N_BINARY, OS_PIECEWISE, 1e-6, 1e-6
#define DT_min BIN(DOMB_TIE)
BINARY_SAMPLE(min, V_LATTICE, -2, 0, V_LATTICE, -1.9, 0, true)
#define SPEC_max N_BINARY, OS_PIECEWISE, 1e-6, 1e-6
#define DT_max gen_binary, 4, DOMB_TIE, NULL
BINARY_SAMPLE(max, V_LATTICE, -2, 0, V_LATTICE, -1.9, 0, true)
/* atan2(a, b): a away from 0 keeps clear of the branch cut (a = 0, b < 0) */
#define SPEC_atan2 N_BINARY, OS_SMOOTH, 1e-6, 1e-6
#define DT_atan2 BIN(DOMB_ATAN2)
BINARY_SAMPLE(atan2, V_AWAY, 0.3, 2, V_UNIFORM, -2, 2, true)
/* comparisons: small integers, so that ties occur (and finite differences do not apply) */
#define SPEC_eq N_BINARY, OS_NONE, 1e-6, 0
#define DT_eq gen_binary, 1, DOMB_TIE, NULL
BINARY_SAMPLE(eq, V_INT, -1, 1, V_INT, -1, 1, false)
#define SPEC_ne N_BINARY, OS_NONE, 1e-6, 0
#define DT_ne gen_binary, 1, DOMB_TIE, NULL
BINARY_SAMPLE(ne, V_INT, -1, 1, V_INT, -1, 1, false)
#define SPEC_lt N_BINARY, OS_NONE, 1e-6, 0
#define DT_lt gen_binary, 1, DOMB_TIE, NULL
BINARY_SAMPLE(lt, V_INT, -1, 1, V_INT, -1, 1, false)
#define SPEC_le N_BINARY, OS_NONE, 1e-6, 0
#define DT_le gen_binary, 1, DOMB_TIE, NULL
BINARY_SAMPLE(le, V_INT, -1, 1, V_INT, -1, 1, false)
#define SPEC_gt N_BINARY, OS_NONE, 1e-6, 0
#define DT_gt gen_binary, 1, DOMB_TIE, NULL
BINARY_SAMPLE(gt, V_INT, -1, 1, V_INT, -1, 1, false)
#define SPEC_ge N_BINARY, OS_NONE, 1e-6, 0
#define DT_ge gen_binary, 1, DOMB_TIE, NULL
BINARY_SAMPLE(ge, V_INT, -1, 1, V_INT, -1, 1, false)

/* Three-way broadcasting for fma and where. */
static const shp ternary_shapes[][3] = {
    {{2, {3, 4}}, {2, {3, 4}}, {2, {3, 4}}}, {{2, {3, 1}}, {1, {4}}, {0, {0}}},
    {{3, {2, 1, 3}}, {2, {4, 1}}, {1, {3}}}, {{0, {0}}, {0, {0}}, {0, {0}}},
    {{1, {1}}, {2, {0, 2}}, {1, {2}}},
};
#define N_TERNARY 5

#define SPEC_fma N_TERNARY, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_fma, plain_ternary)
#define DT_fma gen_fma, 3, DOMB_ANY, NULL
static sx_cg_node *sample_fma(GEN_ARGS)
{
    CTX;
    sx_cg_node *a = in(c, ternary_shapes[v][0], V_UNIFORM, -2, 2);
    sx_cg_node *b = in(c, ternary_shapes[v][1], V_UNIFORM, -2, 2);
    return sx_cg_fma(g, a, b, in(c, ternary_shapes[v][2], V_UNIFORM, -2, 2));
}

/* where(cond, a, b): linear in a and b; the condition (0/1) is not differentiated */
#define SPEC_where N_TERNARY, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_where, plain_ternary)
#define DT_where gen_where, 3, DOMB_WHERE, NULL
static sx_cg_node *sample_where(GEN_ARGS)
{
    CTX;
    sx_cg_node *cond = in_fixed(c, ternary_shapes[v][0], V_INT, 0, 1);
    sx_cg_node *a = in(c, ternary_shapes[v][1], V_UNIFORM, -2, 2);
    return sx_cg_where(g, cond, a, in(c, ternary_shapes[v][2], V_UNIFORM, -2, 2));
}

/* The binary rows' references, given by os_kernel and os_plain to every row of sx_binary.def:
 * the kernel by the row's sx_binary_op (SX_BINARY_COUNT for an op that is not binary), the
 * plain value written here from the definition (an exhaustive switch: a new row of
 * sx_binary.def without its case here does not compile). */
static sx_binary_op ref_binary_kernel(sx_cg_op op)
{
#define SX_BINARY_ROW(NAME, ...)                                                                   \
    if (op == SX_OP_##NAME)                                                                        \
        return SX_BINARY_##NAME;
#include "sx_binary.def"
#undef SX_BINARY_ROW
    return SX_BINARY_COUNT;
}

static double ref_binary(sx_binary_op op, double a, double b)
{
    switch (op) {
    case SX_BINARY_ADD:
        return a + b;
    case SX_BINARY_SUB:
        return a - b;
    case SX_BINARY_MUL:
        return a * b;
    case SX_BINARY_DIV:
        return a / b;
    case SX_BINARY_POW:
        return pow(a, b);
    case SX_BINARY_MIN:
        return a < b ? a : b;
    case SX_BINARY_MAX:
        return a > b ? a : b;
    case SX_BINARY_ATAN2:
        return atan2(a, b);
    case SX_BINARY_EQ:
        return a == b;
    case SX_BINARY_NE:
        return a != b;
    case SX_BINARY_LT:
        return a < b;
    case SX_BINARY_LE:
        return a <= b;
    case SX_BINARY_GT:
        return a > b;
    case SX_BINARY_GE:
        return a >= b;
    case SX_BINARY_COUNT:
        break;
    }
    return nan(""); /* not a binary op */
}

static sx_status kernel_binary(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_binary_out(ref_binary_kernel(sx_cg_node_op(n)), x[0], x[1], out);
}

static sx_status plain_binary(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    sx_cg_op op = sx_cg_node_op(n);
    int64_t oidx[SX_MAX_RANK];
    for (int64_t i = 0; i < y->size; i++) {
        ref_unravel(i, y->rank, y->shape, oidx);
        double va = ref_get(x[0], ref_bcast_at(x[0], y->rank, oidx));
        double vb = ref_get(x[1], ref_bcast_at(x[1], y->rank, oidx));
        want[i] = ref_binary(ref_binary_kernel(op), va, vb);
        mag[i] = op == SX_OP_ADD || op == SX_OP_SUB ? fabs(va) + fabs(vb) : 0;
    }
    return SX_OK;
}

static sx_status kernel_fma(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_fma_out(x[0], x[1], x[2], out);
}

static sx_status kernel_where(KERNEL_ARGS)
{
    (void)n, (void)s;
    /* no where kernel: broadcast the three operands and choose */
    sx_tensor *c = ref_zeros(out->dtype, out->rank, out->shape),
              *t = ref_zeros(out->dtype, out->rank, out->shape);
    sx_status st = sx_tensor_broadcast_out(x[0], c);
    if (st == SX_OK)
        st = sx_tensor_broadcast_out(x[1], t);
    if (st == SX_OK)
        st = sx_tensor_broadcast_out(x[2], out);
    for (int64_t i = 0; st == SX_OK && i < out->size; i++)
        if (sx_tensor_get(c, i) != 0)
            sx_tensor_set(out, i, sx_tensor_get(t, i));
    sx_tensor_free(c);
    sx_tensor_free(t);
    return st;
}

/* fma and where, broadcast: a * b + c, or c != 0 ? a : b. */
static sx_status plain_ternary(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    bool fma = sx_cg_node_op(n) == SX_OP_FMA;
    int64_t oidx[SX_MAX_RANK];
    for (int64_t i = 0; i < y->size; i++) {
        ref_unravel(i, y->rank, y->shape, oidx);
        double v0 = ref_get(x[0], ref_bcast_at(x[0], y->rank, oidx));
        double v1 = ref_get(x[1], ref_bcast_at(x[1], y->rank, oidx));
        double v2 = ref_get(x[2], ref_bcast_at(x[2], y->rank, oidx));
        want[i] = fma ? v0 * v1 + v2 : v0 != 0 ? v1 : v2;
        mag[i] = fma ? fabs(v0 * v1) + fabs(v2) : 0;
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- reductions */

static const struct {
    shp x;
    unsigned axes;
    bool keepdims;
} fold_cases[] = {
    {{3, {3, 4, 5}}, SX_AXIS(1), false},
    {{3, {3, 4, 5}}, SX_AXIS(0) | SX_AXIS(2), true},
    {{3, {3, 4, 5}}, SX_AXES_ALL, false},
    {{2, {2, 3}}, 0, false}, /* no axis: element-wise */
    {{1, {7}}, SX_AXIS(0), true},
    {{0, {0}}, SX_AXES_ALL, false},
    {{4, {2, 3, 2, 2}}, SX_AXIS(1) | SX_AXIS(2), false}, /* adjacent axes merge */
};
#define N_FOLD 7

typedef sx_cg_node *(*fold_fn)(sx_cg_graph *, sx_cg_node *, unsigned, bool);

static sx_cg_node *fold(ctx *c, int v, fold_fn f, vkind k, double a, double b)
{
    sx_cg_node *x = in(c, fold_cases[v].x, k, a, b);
    return f(c->g, x, fold_cases[v].axes, fold_cases[v].keepdims);
}

#define FOLD_SAMPLE(name, kind, a, b)                                                              \
    static sx_cg_node *sample_##name(GEN_ARGS)                                                     \
    {                                                                                              \
        CTX;                                                                                       \
        return fold(c, v, sx_cg_##name, kind, a, b);                                               \
    }

/* Reductions by their definition: every element of x goes to the output cell of its kept axes;
 * `r` is its row-major index within the reduced axes (what argmax reports). */
static void ref_fold(sx_fold_op k, const sx_tensor *x, unsigned axes, int64_t n_out, double *want,
                     double *mag)
{
    unsigned mask = axes == SX_AXES_ALL ? (1u << x->rank) - 1u : axes;
    int64_t count = 1;
    for (int d = 0; d < x->rank; d++)
        if (mask >> d & 1u)
            count *= x->shape[d];
    double *best = ref_alloc((size_t)n_out * sizeof *best),
           *m = ref_alloc((size_t)n_out * sizeof *m);
    for (int64_t o = 0; o < n_out; o++) {
        m[o] = -HUGE_VAL;
        want[o] = k == SX_FOLD_PROD  ? 1
                  : k == SX_FOLD_MAX ? -HUGE_VAL
                  : k == SX_FOLD_MIN ? HUGE_VAL
                                     : 0;
        best[o] = k == SX_FOLD_ARGMAX ? -HUGE_VAL : HUGE_VAL;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < x->size; i++) {
            int64_t idx[SX_MAX_RANK], o = 0, r = 0;
            ref_unravel(i, x->rank, x->shape, idx);
            for (int d = 0; d < x->rank; d++) {
                if (mask >> d & 1u)
                    r = r * x->shape[d] + idx[d];
                else
                    o = o * x->shape[d] + idx[d];
            }
            double v = ref_get(x, i);
            if (pass == 0) { /* the maxima, for logsumexp */
                m[o] = v > m[o] ? v : m[o];
                continue;
            }
            mag[o] += fabs(v);
            switch (k) {
            case SX_FOLD_SUM:
            case SX_FOLD_MEAN:
                want[o] += v;
                break;
            case SX_FOLD_PROD:
                want[o] *= v;
                break;
            case SX_FOLD_MAX:
                want[o] = v > want[o] ? v : want[o];
                break;
            case SX_FOLD_MIN:
                want[o] = v < want[o] ? v : want[o];
                break;
            case SX_FOLD_ARGMAX:
            case SX_FOLD_ARGMIN:
                if (k == SX_FOLD_ARGMAX ? v > best[o] : v < best[o]) {
                    best[o] = v;
                    want[o] = (double)r;
                }
                break;
            case SX_FOLD_L1NORM:
                want[o] += fabs(v);
                break;
            case SX_FOLD_L2NORM:
                want[o] += v * v;
                break;
            case SX_FOLD_LOGSUMEXP:
                want[o] += exp(v - m[o]);
                break;
            case SX_FOLD_COUNT:
                break;
            }
        }
    for (int64_t o = 0; o < n_out; o++) {
        if (k == SX_FOLD_MEAN)
            want[o] /= (double)count;
        if (k == SX_FOLD_L2NORM)
            want[o] = sqrt(want[o]);
        if (k == SX_FOLD_LOGSUMEXP)
            want[o] = m[o] + log(want[o]);
        if (k == SX_FOLD_PROD || k == SX_FOLD_LOGSUMEXP)
            mag[o] = fabs(want[o]) * (double)count; /* relative error grows with the count */
        if (k == SX_FOLD_ARGMAX || k == SX_FOLD_ARGMIN)
            mag[o] = 0;
    }
    free(best);
    free(m);
}

/* A reduction's references: the fold kernel KERNEL called directly, and ref_fold. */
#define FOLD_REF(name, KERNEL)                                                                     \
    static sx_status kernel_##name(KERNEL_ARGS)                                                    \
    {                                                                                              \
        (void)s;                                                                                   \
        const sx_cg_attr *a = sx_cg_node_attr(n);                                                  \
        return sx_tensor_fold_out(SX_FOLD_##KERNEL, x[0], a->axes, a->keepdims, out);              \
    }                                                                                              \
    static sx_status plain_##name(PLAIN_ARGS)                                                      \
    {                                                                                              \
        (void)compare;                                                                             \
        ref_fold(SX_FOLD_##KERNEL, x[0], sx_cg_node_attr(n)->axes, sx_cg_value(n)->size, want,     \
                 mag);                                                                             \
        return SX_OK;                                                                              \
    }

#define SPEC_sum N_FOLD, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_sum, plain_sum)
#define DT_sum FOLD(DOMF_NONE)
FOLD_SAMPLE(sum, V_UNIFORM, -2, 2)
FOLD_REF(sum, SUM)
#define SPEC_mean N_FOLD, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_mean, plain_mean)
#define DT_mean FOLD(DOMF_NONE)
FOLD_SAMPLE(mean, V_UNIFORM, -2, 2)
FOLD_REF(mean, MEAN)
#define SPEC_prod N_FOLD, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_prod, plain_prod)
#define DT_prod FOLD(DOMF_NONE)
FOLD_SAMPLE(prod, V_AWAY, 0.6, 1.4) /* no zeros; products stay near 1 */
FOLD_REF(prod, PROD)
#define SPEC_reduce_max N_FOLD, OS_PIECEWISE, 1e-6, 1e-6, REF(kernel_reduce_max, plain_reduce_max)
#define DT_reduce_max FOLD(DOMF_MAX)
FOLD_SAMPLE(reduce_max, V_DISTINCT, -2, 2)
FOLD_REF(reduce_max, MAX)
#define SPEC_reduce_min N_FOLD, OS_PIECEWISE, 1e-6, 1e-6, REF(kernel_reduce_min, plain_reduce_min)
#define DT_reduce_min FOLD(DOMF_MAX)
FOLD_SAMPLE(reduce_min, V_DISTINCT, -2, 2)
FOLD_REF(reduce_min, MIN)
#define SPEC_argmax N_FOLD, OS_NONE, 1e-6, 0, REF(kernel_argmax, plain_argmax)
#define DT_argmax FOLD(DOMF_MAX)
FOLD_SAMPLE(argmax, V_DISTINCT, -2, 2)
FOLD_REF(argmax, ARGMAX)
#define SPEC_argmin N_FOLD, OS_NONE, 1e-6, 0, REF(kernel_argmin, plain_argmin)
#define DT_argmin FOLD(DOMF_MAX)
FOLD_SAMPLE(argmin, V_DISTINCT, -2, 2)
FOLD_REF(argmin, ARGMIN)
#define SPEC_l1norm N_FOLD, OS_PIECEWISE, 1e-6, 1e-6, REF(kernel_l1norm, plain_l1norm)
#define DT_l1norm FOLD(DOMF_L1)
FOLD_SAMPLE(l1norm, V_AWAY, 0.1, 2)
FOLD_REF(l1norm, L1NORM)
#define SPEC_l2norm N_FOLD, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_l2norm, plain_l2norm)
#define DT_l2norm FOLD(DOMF_L2)
FOLD_SAMPLE(l2norm, V_AWAY, 0.1, 2) /* with no axis it is |x|: away from 0 */
FOLD_REF(l2norm, L2NORM)
#define SPEC_logsumexp N_FOLD, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_logsumexp, plain_logsumexp)
#define DT_logsumexp FOLD(DOMF_NONE)
FOLD_SAMPLE(logsumexp, V_UNIFORM, -3, 3)
FOLD_REF(logsumexp, LOGSUMEXP)

/* ---------------------------------------------------------------- layout (all linear) */

static const struct {
    shp x;
    int64_t reps[SX_MAX_RANK];
} repeat_cases[] = {
    {{2, {2, 3}}, {2, 1}}, {{2, {2, 3}}, {1, 3}},       {{1, {3}}, {2}},
    {{0, {0}}, {0}},       {{3, {2, 1, 2}}, {1, 3, 2}}, {{2, {2, 2}}, {0, 2}},
};
#define N_REPEAT 6

#define SPEC_repeat N_REPEAT, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_repeat, plain_remap)
#define DT_repeat GEN(gen_repeat, 2)
static sx_cg_node *sample_repeat(GEN_ARGS)
{
    CTX;
    return sx_cg_repeat(g, in(c, repeat_cases[v].x, V_UNIFORM, -2, 2), repeat_cases[v].reps);
}

#define SPEC_tile N_REPEAT, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_tile, plain_remap)
#define DT_tile GEN(gen_repeat, 2)
static sx_cg_node *sample_tile(GEN_ARGS)
{
    CTX;
    return sx_cg_tile(g, in(c, repeat_cases[v].x, V_UNIFORM, -2, 2), repeat_cases[v].reps);
}

static const shp broadcast_cases[][2] = {
    {{2, {3, 1}}, {3, {2, 3, 4}}}, {{0, {0}}, {2, {2, 2}}}, {{1, {4}}, {2, {3, 4}}},
    {{2, {2, 3}}, {2, {2, 3}}},    {{1, {1}}, {2, {3, 0}}},
};
#define SPEC_broadcast 5, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_broadcast, plain_remap)
#define DT_broadcast GEN(gen_broadcast, 2)
static sx_cg_node *sample_broadcast(GEN_ARGS)
{
    CTX;
    shp to = broadcast_cases[v][1];
    return sx_cg_broadcast(g, in(c, broadcast_cases[v][0], V_UNIFORM, -2, 2), to.rank, to.d);
}

static const shp reshape_cases[][2] = {
    {{2, {2, 6}}, {2, {3, 4}}}, {{3, {2, 3, 4}}, {1, {24}}}, {{1, {1}}, {0, {0}}},
    {{0, {0}}, {2, {1, 1}}},    {{2, {0, 3}}, {2, {3, 0}}},
};
#define SPEC_reshape 5, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_copy, plain_copy)
#define DT_reshape GEN(gen_reshape, 2)
static sx_cg_node *sample_reshape(GEN_ARGS)
{
    CTX;
    shp to = reshape_cases[v][1];
    return sx_cg_reshape(g, in(c, reshape_cases[v][0], V_UNIFORM, -2, 2), to.rank, to.d);
}

/* identity has no named constructor: the generic one */
#define SPEC_identity 3, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_copy, plain_copy)
#define DT_identity GEN(gen_identity, 1)
static sx_cg_node *sample_identity(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, leaf_shapes[v], V_UNIFORM, -2, 2);
    return x == NULL ? NULL : sx_cg_op_new(g, SX_OP_IDENTITY, 1, &x, NULL);
}

/* Slices: steps > 1, negative starts and steps, an empty slice. */
static const struct {
    shp x;
    sx_slice s[SX_MAX_RANK];
} slice_cases[] = {
    {{2, {5, 6}}, {{1, 4, 1}, {0, SX_SLICE_END, 2}}},
    {{2, {5, 6}}, {{4, SX_SLICE_END, -1}, {-2, SX_SLICE_END, 1}}},
    {{1, {7}}, {{1, -1, 3}}},
    {{3, {3, 4, 5}}, {{0, SX_SLICE_END, 1}, {3, 0, -2}, {2, 3, 1}}},
    {{1, {4}}, {{2, 2, 1}}},
};
#define N_SLICE 5

#define SPEC_slice N_SLICE, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_slice, plain_slice)
#define DT_slice GEN(gen_slice, 2)
static sx_cg_node *sample_slice(GEN_ARGS)
{
    CTX;
    return sx_cg_slice(g, in(c, slice_cases[v].x, V_UNIFORM, -2, 2), slice_cases[v].s);
}

/* unslice: the input has the slice's shape inside the full shape of the slice case */
#define SPEC_unslice N_SLICE, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_unslice, plain_slice)
#define DT_unslice GEN(gen_unslice, 2)
static sx_cg_node *sample_unslice(GEN_ARGS)
{
    CTX;
    shp full = slice_cases[v].x, part = {full.rank, {0}};
    sx_status st = sx_slice_shape("opsamples", full.rank, full.d, slice_cases[v].s, part.d, NULL);
    if (st != SX_OK)
        return fail(c, st);
    return sx_cg_unslice(g, in(c, part, V_UNIFORM, -2, 2), slice_cases[v].s, full.rank, full.d);
}

static const struct {
    int n, axis;
    shp x[3];
} concat_cases[] = {
    {2, 0, {{2, {2, 3}}, {2, {4, 3}}}},
    {3, 1, {{2, {2, 3}}, {2, {2, 1}}, {2, {2, 4}}}},
    {1, 0, {{1, {3}}}},
    {2, -1, {{3, {2, 2, 1}}, {3, {2, 2, 3}}}},
    {2, 0, {{2, {0, 2}}, {2, {3, 2}}}},
};
#define SPEC_concat 5, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_concat, plain_concat)
#define DT_concat GEN(gen_concat, 2)
static sx_cg_node *sample_concat(GEN_ARGS)
{
    CTX;
    sx_cg_node *xs[3];
    for (int i = 0; i < concat_cases[v].n; i++)
        if ((xs[i] = in(c, concat_cases[v].x[i], V_UNIFORM, -2, 2)) == NULL)
            return NULL;
    return sx_cg_concat(g, concat_cases[v].n, xs, concat_cases[v].axis);
}

/* Permutations; variants 1 and 4 go through sx_cg_transpose (a permute of the last two). */
static const struct {
    shp x;
    int perm[SX_MAX_RANK];
} permute_cases[] = {
    {{3, {2, 3, 4}}, {2, 0, 1}},       {{2, {3, 4}}, {1, 0}},       {{1, {5}}, {0}},
    {{4, {2, 3, 1, 2}}, {3, 1, 0, 2}}, {{3, {2, 3, 4}}, {0, 2, 1}},
};
#define SPEC_permute 5, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_permute, plain_remap)
#define DT_permute GEN(gen_permute, 2)
static sx_cg_node *sample_permute(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, permute_cases[v].x, V_UNIFORM, -2, 2);
    if (v == 1 || v == 4)
        return sx_cg_transpose(g, x);
    return sx_cg_permute(g, x, permute_cases[v].perm);
}

static const struct {
    shp x;
    int64_t before[SX_MAX_RANK], after[SX_MAX_RANK];
    double value;
} pad_cases[] = {
    {{2, {3, 4}}, {1, 0}, {2, 3}, 0.5},        {{1, {5}}, {2}, {0}, -1},
    {{3, {2, 3, 2}}, {0, 1, 0}, {1, 0, 2}, 0}, {{0, {0}}, {0}, {0}, 7},
    {{2, {0, 2}}, {1, 0}, {0, 1}, 3},
};
#define SPEC_pad 5, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_pad, plain_remap)
#define DT_pad GEN(gen_pad, 2)
static sx_cg_node *sample_pad(GEN_ARGS)
{
    CTX;
    return sx_cg_pad(g, in(c, pad_cases[v].x, V_UNIFORM, -2, 2), pad_cases[v].before,
                     pad_cases[v].after, pad_cases[v].value);
}

/* Index tensors: integral values, never differentiated. */
static const struct {
    shp idx;
    int64_t depth;
} one_hot_cases[] = {{{1, {5}}, 4}, {{2, {2, 3}}, 3}, {{0, {0}}, 5}, {{1, {0}}, 2}};
#define SPEC_one_hot 4, OS_NONE, 1e-6, 0, REF(kernel_one_hot, plain_one_hot)
#define DT_one_hot GEN(gen_one_hot, 1)
static sx_cg_node *sample_one_hot(GEN_ARGS)
{
    CTX;
    int64_t depth = one_hot_cases[v].depth;
    return sx_cg_one_hot(g, in_fixed(c, one_hot_cases[v].idx, V_INT, 0, (double)depth - 1), depth);
}

/* gather(x, idx): rows of x (repeats included); scatter_add(grad, idx, rows): its adjoint,
 * with repeated indices accumulating and some rows never hit */
static const struct {
    shp x;
    int64_t n_idx, rows;
} gather_cases[] = {
    {{2, {5, 3}}, 4, 5}, {{1, {6}}, 3, 4}, {{3, {4, 2, 2}}, 6, 3}, {{2, {3, 2}}, 0, 2}};
#define SPEC_gather 4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_gather, plain_gather)
#define DT_gather GEN(gen_gather, 2)
static sx_cg_node *sample_gather(GEN_ARGS)
{
    CTX;
    shp xs = gather_cases[v].x, is = {1, {gather_cases[v].n_idx}};
    sx_cg_node *x = in(c, xs, V_UNIFORM, -2, 2);
    return sx_cg_gather(g, x, in_fixed(c, is, V_INT, 0, (double)xs.d[0] - 1));
}

#define SPEC_scatter_add 4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_scatter_add, plain_gather)
#define DT_scatter_add GEN(gen_scatter_add, 2)
static sx_cg_node *sample_scatter_add(GEN_ARGS)
{
    CTX;
    shp gs = gather_cases[v].x, is = {1, {gather_cases[v].n_idx}};
    int64_t rows = gather_cases[v].rows;
    gs.d[0] = gather_cases[v].n_idx;
    sx_cg_node *grad = in(c, gs, V_UNIFORM, -2, 2);
    return sx_cg_scatter_add(g, grad, in_fixed(c, is, V_INT, 0, (double)rows - 1), rows);
}

/* ---- layout references */

static sx_status kernel_repeat(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_repeat_out(x[0], sx_cg_node_attr(n)->ints, out);
}

static sx_status kernel_tile(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_tile_out(x[0], sx_cg_node_attr(n)->ints, out);
}

static sx_status kernel_broadcast(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_broadcast_out(x[0], out);
}

/* reshape, identity: the values, copied */
static sx_status kernel_copy(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_copy_out(x[0], out);
}

static sx_status kernel_slice(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_slice_out(x[0], sx_cg_node_attr(n)->slice, out);
}

static sx_status kernel_unslice(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_unslice_out(x[0], sx_cg_node_attr(n)->slice, out);
}

static sx_status kernel_concat(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_concat_out(sx_cg_node_n_inputs(n), x, sx_cg_node_attr(n)->axis, out);
}

static sx_status kernel_permute(KERNEL_ARGS)
{
    (void)s;
    int perm[SX_MAX_RANK];
    for (int i = 0; i < out->rank; i++)
        perm[i] = (int)sx_cg_node_attr(n)->ints[i];
    return sx_tensor_permute_out(x[0], perm, out);
}

static sx_status kernel_pad(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    return sx_tensor_pad_out(x[0], a->ints, a->ints2, a->alpha, out);
}

static sx_status kernel_one_hot(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_one_hot_out(x[0], sx_cg_node_attr(n)->index.count, out);
}

static sx_status kernel_gather(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_gather_out(x[0], x[1], out);
}

static sx_status kernel_scatter_add(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_scatter_add_out(x[0], x[1], out);
}

/* repeat, tile, broadcast, permute, pad: each output cell reads one input cell (or pad's value). */
static sx_status plain_remap(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    const sx_cg_attr *at = sx_cg_node_attr(n);
    sx_cg_op op = sx_cg_node_op(n);
    int64_t oidx[SX_MAX_RANK];
    for (int64_t i = 0; i < y->size; i++) {
        int64_t xi = 0;
        bool inside = true;
        ref_unravel(i, y->rank, y->shape, oidx);
        if (op == SX_OP_BROADCAST) {
            xi = ref_bcast_at(x[0], y->rank, oidx);
        } else {
            int64_t xidx[SX_MAX_RANK] = {0};
            for (int d = 0; d < y->rank; d++) {
                if (op == SX_OP_REPEAT)
                    xidx[d] = oidx[d] / at->ints[d];
                else if (op == SX_OP_TILE)
                    xidx[d] = oidx[d] % x[0]->shape[d];
                else if (op == SX_OP_PERMUTE)
                    xidx[at->ints[d]] = oidx[d];
                else
                    xidx[d] = oidx[d] - at->ints[d];
            }
            for (int d = 0; d < x[0]->rank; d++) {
                inside = inside && xidx[d] >= 0 && xidx[d] < x[0]->shape[d];
                xi = xi * x[0]->shape[d] + xidx[d];
            }
        }
        want[i] = inside ? ref_get(x[0], xi) : at->alpha;
    }
    return SX_OK;
}

/* slice and unslice: out[first + i * step] = in[i] (unslice), in[first + i * step] (slice) */
static sx_status plain_slice(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    const sx_cg_attr *at = sx_cg_node_attr(n);
    bool slice = sx_cg_node_op(n) == SX_OP_SLICE;
    const sx_tensor *full = slice ? x[0] : y, *part = slice ? y : x[0];
    int64_t len[SX_MAX_RANK], first[SX_MAX_RANK];
    sx_status st = sx_slice_shape("test", full->rank, full->shape, at->slice, len, first);
    for (int64_t i = 0; st == SX_OK && i < part->size; i++) {
        int64_t pidx[SX_MAX_RANK], fi = 0;
        ref_unravel(i, part->rank, part->shape, pidx);
        for (int d = 0; d < full->rank; d++)
            fi = fi * full->shape[d] + first[d] + pidx[d] * at->slice[d].step;
        if (slice)
            want[i] = ref_get(full, fi);
        else
            want[fi] = ref_get(part, i);
    }
    return st;
}

static sx_status plain_concat(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    int axis = sx_cg_node_attr(n)->axis;
    for (int64_t i = 0; i < y->size; i++) {
        int64_t xidx[SX_MAX_RANK] = {0}, xi = 0;
        int t = 0;
        ref_unravel(i, y->rank, y->shape, xidx);
        while (xidx[axis] >= x[t]->shape[axis])
            xidx[axis] -= x[t++]->shape[axis];
        for (int d = 0; d < y->rank; d++)
            xi = xi * x[t]->shape[d] + xidx[d];
        want[i] = ref_get(x[t], xi);
    }
    return SX_OK;
}

static sx_status plain_one_hot(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    int64_t depth = sx_cg_node_attr(n)->index.count;
    for (int64_t i = 0; i < sx_cg_value(n)->size; i++)
        want[i] = ref_get(x[0], i / depth) == (double)(i % depth);
    return SX_OK;
}

/* gather and scatter_add: rows of x[0] by the indices x[1] */
static sx_status plain_gather(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    bool gather = sx_cg_node_op(n) == SX_OP_GATHER;
    int64_t row = 1;
    for (int d = 1; d < y->rank; d++)
        row *= y->shape[d];
    for (int64_t i = 0; i < x[1]->size; i++)
        for (int64_t k = 0; k < row; k++) {
            int64_t j = (int64_t)ref_get(x[1], i);
            if (gather) {
                want[i * row + k] = ref_get(x[0], j * row + k);
            } else {
                want[j * row + k] += ref_get(x[0], i * row + k);
                mag[j * row + k] += fabs(ref_get(x[0], i * row + k));
            }
        }
    return SX_OK;
}

/* ---------------------------------------------------------------- matmul */

static const struct {
    shp a, b;
    bool ta, tb;
    shp c; /* gemm with this addend (rank -1: none), alpha 0.5, beta -1.5 */
} matmul_cases[] = {
    {{2, {3, 4}}, {2, {4, 5}}, false, false, {-1, {0}}},
    {{2, {4, 3}}, {2, {4, 5}}, true, false, {-1, {0}}},
    {{2, {3, 4}}, {2, {5, 4}}, false, true, {-1, {0}}},
    {{2, {4, 3}}, {2, {5, 4}}, true, true, {-1, {0}}},
    {{3, {2, 3, 4}}, {2, {4, 5}}, false, false, {-1, {0}}},       /* shared b */
    {{4, {2, 1, 3, 4}}, {3, {3, 4, 2}}, false, false, {-1, {0}}}, /* batch broadcast */
    {{2, {3, 4}}, {2, {4, 2}}, false, false, {2, {3, 2}}},        /* gemm */
    {{2, {1, 4}}, {2, {4, 1}}, false, false, {-1, {0}}},          /* 1 x 1 result */
    /* gemm with an addend that broadcasts (a bias row, a bias vector, a scalar, a column over
     * batches): its gradient is summed back to its shape */
    {{2, {3, 4}}, {2, {4, 2}}, false, false, {2, {1, 2}}},
    {{2, {4, 3}}, {2, {4, 2}}, true, false, {1, {2}}},
    {{2, {3, 4}}, {2, {2, 4}}, false, true, {0, {0}}},
    {{3, {2, 3, 4}}, {2, {4, 2}}, false, false, {2, {3, 1}}},
};
#define SPEC_matmul 12, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_matmul, plain_matmul)
#define DT_matmul GEN(gen_matmul, 8)
static sx_cg_node *sample_matmul(GEN_ARGS)
{
    CTX;
    sx_cg_node *a = in(c, matmul_cases[v].a, V_UNIFORM, -1, 1);
    sx_cg_node *b = in(c, matmul_cases[v].b, V_UNIFORM, -1, 1);
    if (matmul_cases[v].c.rank < 0)
        return sx_cg_matmul(g, a, b, matmul_cases[v].ta, matmul_cases[v].tb);
    sx_cg_node *cc = in(c, matmul_cases[v].c, V_UNIFORM, -1, 1);
    return sx_cg_gemm(g, a, b, matmul_cases[v].ta, matmul_cases[v].tb, 0.5, cc, -1.5);
}

static const shp dot_cases[][2] = {
    {{1, {5}}, {1, {5}}}, {{2, {2, 3}}, {1, {6}}}, {{0, {0}}, {0, {0}}}, {{1, {0}}, {1, {0}}}};
#define SPEC_dot 4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_dot, plain_dot)
#define DT_dot GEN(gen_dot, 2)
static sx_cg_node *sample_dot(GEN_ARGS)
{
    CTX;
    sx_cg_node *a = in(c, dot_cases[v][0], V_UNIFORM, -2, 2);
    return sx_cg_dot(g, a, in(c, dot_cases[v][1], V_UNIFORM, -2, 2));
}

static sx_status kernel_matmul(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    if (sx_cg_node_n_inputs(n) == 3) {
        sx_status st = sx_tensor_broadcast_out(x[2], out); /* the addend broadcasts */
        if (st != SX_OK)
            return st;
        return sx_tensor_matmul_out(x[0], x[1], a->trans_a, a->trans_b, a->alpha, a->beta, out);
    }
    return sx_tensor_matmul_out(x[0], x[1], a->trans_a, a->trans_b, a->alpha, 0, out);
}

static sx_status kernel_dot(KERNEL_ARGS)
{
    (void)n, (void)s;
    /* the kernel takes vectors: flat views of the operands */
    int64_t na = x[0]->size, nb = x[1]->size;
    sx_tensor va = sx_tensor_view(out->dtype, 1, &na, x[0]->data);
    sx_tensor vb = sx_tensor_view(out->dtype, 1, &nb, x[1]->data);
    return sx_tensor_dot_out(&va, &vb, out);
}

/* Batched matmul with broadcasting batch axes and optional transposes, and the gemm addend. */
static sx_status plain_matmul(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    const sx_cg_attr *at = sx_cg_node_attr(n);
    const sx_tensor *a = x[0], *b = x[1];
    const sx_tensor *c = sx_cg_node_n_inputs(n) == 3 ? x[2] : NULL;
    int ro = y->rank;
    int64_t ar = a->shape[a->rank - 2], ac = a->shape[a->rank - 1];
    int64_t br = b->shape[b->rank - 2], bc = b->shape[b->rank - 1];
    int64_t kk = at->trans_a ? ar : ac;
    for (int64_t o = 0; o < y->size; o++) {
        int64_t idx[SX_MAX_RANK], abase = 0, bbase = 0;
        ref_unravel(o, ro, y->shape, idx);
        for (int d = 0; d < a->rank - 2; d++)
            abase = abase * a->shape[d] + (a->shape[d] == 1 ? 0 : idx[d + ro - a->rank]);
        for (int d = 0; d < b->rank - 2; d++)
            bbase = bbase * b->shape[d] + (b->shape[d] == 1 ? 0 : idx[d + ro - b->rank]);
        int64_t i = idx[ro - 2], j = idx[ro - 1];
        double acc = 0, m = 0;
        for (int64_t k = 0; k < kk; k++) {
            double va = ref_get(a, abase * ar * ac + (at->trans_a ? k * ac + i : i * ac + k));
            double vb = ref_get(b, bbase * br * bc + (at->trans_b ? j * bc + k : k * bc + j));
            acc += va * vb;
            m += fabs(va * vb);
        }
        double vc = c ? ref_get(c, ref_bcast_at(c, ro, idx)) : 0; /* the addend broadcasts */
        want[o] = at->alpha * acc + at->beta * vc;
        mag[o] = fabs(at->alpha) * m + fabs(at->beta * vc);
    }
    return SX_OK;
}

static sx_status plain_dot(PLAIN_ARGS)
{
    (void)n, (void)compare;
    want[0] = 0;
    for (int64_t i = 0; i < x[0]->size; i++) {
        want[0] += ref_get(x[0], i) * ref_get(x[1], i);
        mag[0] += fabs(ref_get(x[0], i) * ref_get(x[1], i));
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- convolution and pooling */

static const struct {
    shp x, k;
    sx_conv2d_params p;
} conv_cases[] = {
    {{4, {1, 5, 5, 2}}, {4, {3, 3, 2, 3}}, {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID}},
    {{4, {2, 6, 5, 1}}, {4, {3, 2, 1, 2}}, {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME}},
    {{4, {1, 7, 7, 3}}, {4, {3, 3, 3, 2}}, {.stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID}},
    {{4, {2, 5, 6, 2}}, {4, {2, 3, 2, 4}}, {.stride_h = 2, .stride_w = 1, .padding = SX_PAD_SAME}},
    {{4, {1, 4, 4, 3}}, {4, {1, 1, 3, 2}}, {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID}},
    {{4, {1, 3, 3, 2}}, {4, {3, 3, 2, 1}}, {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_VALID}},
    /* groups = 2 */
    {{4, {1, 5, 5, 4}}, {4, {3, 3, 2, 6}}, {.stride_h = 1, .stride_w = 1, .groups = 2}},
    /* depthwise, multiplier 2, SAME */
    {{4, {1, 5, 6, 3}},
     {4, {3, 3, 1, 6}},
     {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME, .groups = 3}},
    /* depthwise at stride 2 pad 1 */
    {{4, {2, 6, 5, 2}},
     {4, {3, 3, 1, 2}},
     {.stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 1,
      .pad_left = 1,
      .pad_right = 1,
      .groups = 2}},
    /* dilation 2, SAME */
    {{4, {1, 7, 6, 2}},
     {4, {3, 2, 2, 3}},
     {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME, .dilation_h = 2, .dilation_w = 2}},
    /* explicit asymmetric pads */
    {{4, {1, 5, 4, 2}},
     {4, {3, 3, 2, 2}},
     {.stride_h = 1,
      .stride_w = 1,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 2,
      .pad_bottom = 0,
      .pad_left = 1,
      .pad_right = 3}},
    /* SAME_LOWER with an odd total padding on both axes */
    {{4, {1, 6, 7, 2}},
     {4, {2, 3, 2, 2}},
     {.stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME_LOWER}},
    /* per-axis strides with dilation on one axis */
    {{4, {1, 8, 7, 3}}, {4, {2, 2, 3, 2}}, {.stride_h = 3, .stride_w = 2, .dilation_w = 2}},
    /* stride 2 pad 1 (PyTorch's usual downsampling) */
    {{4, {1, 7, 6, 2}},
     {4, {3, 3, 2, 3}},
     {.stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 1,
      .pad_left = 1,
      .pad_right = 1}},
    /* grouped 1x1 (one GEMM per group) */
    {{4, {2, 3, 4, 4}}, {4, {1, 1, 2, 4}}, {.stride_h = 1, .stride_w = 1, .groups = 2}},
    /* grouped, dilated, strided, padded at once */
    {{4, {1, 7, 7, 4}},
     {4, {2, 3, 2, 2}},
     {.stride_h = 2,
      .stride_w = 1,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 2,
      .pad_left = 0,
      .pad_right = 1,
      .dilation_h = 2,
      .groups = 2}},
};
#define N_CONV 16

/* Shape functions check descriptors as kernels do (data present): views over a dummy address
 * they never read. */
static char no_data[8];

/* The shape of dy for conv case v. */
static shp conv_dy(ctx *c, int v, sx_status *st)
{
    shp y = {4, {0}};
    sx_tensor x = sx_tensor_view(c->dt, 4, conv_cases[v].x.d, no_data);
    sx_tensor k = sx_tensor_view(c->dt, 4, conv_cases[v].k.d, no_data);
    *st = sx_conv2d_shape("opsamples", &x, &k, &conv_cases[v].p, y.d);
    return y;
}

#define SPEC_conv2d N_CONV, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_conv2d, plain_conv2d)
#define DT_conv2d GEN(gen_conv2d, 2)
static sx_cg_node *sample_conv2d(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, conv_cases[v].x, V_UNIFORM, -1, 1);
    return sx_cg_conv2d(g, x, in(c, conv_cases[v].k, V_UNIFORM, -1, 1), &conv_cases[v].p);
}

#define SPEC_conv2d_backward_input                                                                 \
    N_CONV, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_conv2d_backward_input, plain_conv2d_backward_input)
#define DT_conv2d_backward_input GEN(gen_conv2d_backward_input, 2)
static sx_cg_node *sample_conv2d_backward_input(GEN_ARGS)
{
    CTX;
    sx_status st;
    shp dys = conv_dy(c, v, &st);
    if (st != SX_OK)
        return fail(c, st);
    sx_cg_node *k = in(c, conv_cases[v].k, V_UNIFORM, -1, 1);
    return sx_cg_conv2d_backward_input(g, k, in(c, dys, V_UNIFORM, -1, 1), &conv_cases[v].p,
                                       conv_cases[v].x.d);
}

#define SPEC_conv2d_backward_kernel                                                                \
    N_CONV, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_conv2d_backward_kernel, plain_conv2d_backward_kernel)
#define DT_conv2d_backward_kernel GEN(gen_conv2d_backward_kernel, 2)
static sx_cg_node *sample_conv2d_backward_kernel(GEN_ARGS)
{
    CTX;
    sx_status st;
    shp dys = conv_dy(c, v, &st);
    if (st != SX_OK)
        return fail(c, st);
    sx_cg_node *x = in(c, conv_cases[v].x, V_UNIFORM, -1, 1);
    return sx_cg_conv2d_backward_kernel(g, x, in(c, dys, V_UNIFORM, -1, 1), &conv_cases[v].p,
                                        conv_cases[v].k.d);
}

static const struct {
    shp x;
    sx_pool2d_params p;
} pool_cases[] = {
    {{4, {1, 4, 4, 2}},
     {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID}},
    {{4, {2, 5, 5, 1}},
     {.kernel_h = 3,
      .kernel_w = 3,
      .stride_h = 1,
      .stride_w = 1,
      .padding = SX_PAD_SAME}}, /* overlapping windows */
    {{4, {1, 5, 6, 3}},
     {.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 1, .padding = SX_PAD_SAME}},
    {{4, {2, 3, 4, 2}},
     {.kernel_h = 3,
      .kernel_w = 4,
      .stride_h = 1,
      .stride_w = 1,
      .padding = SX_PAD_VALID}}, /* global pooling */
    {{4, {1, 7, 5, 1}},
     {.kernel_h = 2,
      .kernel_w = 2,
      .stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_SAME}}, /* odd sizes, padding after */
    /* explicit pads: stride 2 pad 1 (PyTorch's usual), padding counted */
    {{4, {1, 6, 5, 2}},
     {.kernel_h = 3,
      .kernel_w = 3,
      .stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 1,
      .pad_left = 1,
      .pad_right = 1,
      .count_include_pad = 1}},
    /* asymmetric pads, per-axis strides, padding not counted */
    {{4, {1, 5, 6, 2}},
     {.kernel_h = 3,
      .kernel_w = 3,
      .stride_h = 2,
      .stride_w = 1,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 0,
      .pad_bottom = 1,
      .pad_left = 2,
      .pad_right = 1}},
    /* ceil_mode: a last, partial window */
    {{4, {1, 6, 7, 2}},
     {.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .ceil_mode = 1}},
    /* ceil_mode with pads counted: cells past the trailing pad are not */
    {{4, {2, 5, 5, 1}},
     {.kernel_h = 2,
      .kernel_w = 3,
      .stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_left = 1,
      .pad_right = 1,
      .ceil_mode = 1,
      .count_include_pad = 1}},
    /* SAME_LOWER: the odd padding cell before */
    {{4, {1, 5, 6, 2}},
     {.kernel_h = 2, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_SAME_LOWER}},
    /* max pooling only (average pooling takes no dilation): dilation 2 */
    {{4, {1, 7, 6, 2}},
     {.kernel_h = 2,
      .kernel_w = 2,
      .stride_h = 1,
      .stride_w = 1,
      .dilation_h = 2,
      .dilation_w = 2}},
    /* dilation per axis with pads and stride 2 */
    {{4, {2, 6, 6, 1}},
     {.kernel_h = 3,
      .kernel_w = 2,
      .stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_bottom = 1,
      .pad_left = 1,
      .pad_right = 1,
      .dilation_h = 2,
      .dilation_w = 3}},
    /* dilation with ceil_mode */
    {{4, {1, 6, 7, 1}},
     {.kernel_h = 2,
      .kernel_w = 2,
      .stride_h = 2,
      .stride_w = 2,
      .dilation_h = 2,
      .dilation_w = 2,
      .ceil_mode = 1}},
};
#define N_POOL 13     /* max pooling: every case */
#define N_AVG_POOL 10 /* average pooling: the cases before the dilated ones */

static shp pool_dy(ctx *c, int v, sx_status *st)
{
    shp y = {4, {0}};
    sx_tensor x = sx_tensor_view(c->dt, 4, pool_cases[v].x.d, no_data);
    *st = sx_pool2d_shape("opsamples", &x, &pool_cases[v].p, y.d);
    return y;
}

/* max pooling: distinct inputs, so the maximum of every window is unique */
#define SPEC_maxpool2d N_POOL, OS_PIECEWISE, 1e-6, 1e-6, REF(kernel_maxpool2d, plain_pool)
#define DT_maxpool2d GEN(gen_pool, 2)
static sx_cg_node *sample_maxpool2d(GEN_ARGS)
{
    CTX;
    return sx_cg_maxpool2d(g, in(c, pool_cases[v].x, V_DISTINCT, -2, 2), &pool_cases[v].p);
}

/* maxpool2d_backward(x, dy) (by `op`, or its relu form): linear in dy; piecewise constant in x (its
 * derivative there is zero almost everywhere), so x is not differentiated; x of both signs, so
 * that the relu form's mask matters */
typedef sx_cg_node *pool_backward_op(sx_cg_graph *, sx_cg_node *, sx_cg_node *,
                                     const sx_pool2d_params *);
static sx_cg_node *pool_backward_sample(GEN_ARGS, pool_backward_op *op)
{
    CTX;
    sx_status st;
    shp dys = pool_dy(c, v, &st);
    if (st != SX_OK)
        return fail(c, st);
    sx_cg_node *x = in_fixed(c, pool_cases[v].x, V_DISTINCT, -2, 2);
    return op(g, x, in(c, dys, V_UNIFORM, -1, 1), &pool_cases[v].p);
}

#define SPEC_maxpool2d_backward                                                                    \
    N_POOL, OS_PIECEWISE, 1e-6, 1e-6, REF(kernel_maxpool2d_backward, plain_maxpool2d_backward)
#define DT_maxpool2d_backward GEN(gen_pool_backward, 2)
static sx_cg_node *sample_maxpool2d_backward(GEN_ARGS)
{
    return pool_backward_sample(g, dt, rng, v, s, sx_cg_maxpool2d_backward);
}

#define SPEC_maxpool2d_relu_backward                                                               \
    N_POOL, OS_PIECEWISE, 1e-6, 1e-6,                                                              \
        REF(kernel_maxpool2d_relu_backward, plain_maxpool2d_relu_backward)
#define DT_maxpool2d_relu_backward GEN(gen_pool_backward, 2)
static sx_cg_node *sample_maxpool2d_relu_backward(GEN_ARGS)
{
    return pool_backward_sample(g, dt, rng, v, s, sx_cg_maxpool2d_relu_backward);
}

#define SPEC_avgpool2d N_AVG_POOL, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_avgpool2d, plain_pool)
#define DT_avgpool2d GEN(gen_pool, 2)
static sx_cg_node *sample_avgpool2d(GEN_ARGS)
{
    CTX;
    return sx_cg_avgpool2d(g, in(c, pool_cases[v].x, V_UNIFORM, -2, 2), &pool_cases[v].p);
}

#define SPEC_avgpool2d_backward                                                                    \
    N_AVG_POOL, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_avgpool2d_backward, plain_avgpool2d_backward)
#define DT_avgpool2d_backward GEN(gen_avgpool2d_backward, 2)
static sx_cg_node *sample_avgpool2d_backward(GEN_ARGS)
{
    CTX;
    sx_status st;
    shp dys = pool_dy(c, v, &st);
    if (st != SX_OK)
        return fail(c, st);
    return sx_cg_avgpool2d_backward(g, in(c, dys, V_UNIFORM, -1, 1), &pool_cases[v].p,
                                    pool_cases[v].x.d);
}

/* ---- convolution and pooling references */

/* A convolution kernel called directly with its own workspace (ws_x, ws_k: the shapes of the
 * image and the kernel the workspace size is computed from). */
typedef sx_status (*ref_conv_fn)(const sx_tensor *, const sx_tensor *, const sx_conv2d_params *,
                                 void *, size_t, sx_tensor *);
static sx_status ref_conv_call(ref_conv_fn f,
                               size_t (*ws_of)(const int64_t *, const int64_t *,
                                               const sx_conv2d_params *),
                               const int64_t *ws_x, const int64_t *ws_k, const sx_cg_node *n,
                               const sx_tensor *const *x, sx_tensor *out)
{
    const sx_conv2d_params *p = &sx_cg_node_attr(n)->conv;
    size_t bytes = ws_of(ws_x, ws_k, p);
    void *ws = ref_alloc(bytes);
    sx_status st = f(x[0], x[1], p, ws, bytes, out);
    free(ws);
    return st;
}

static sx_status kernel_conv2d(KERNEL_ARGS)
{
    (void)s;
    return ref_conv_call(sx_tensor_conv2d_out, sx_conv2d_workspace, x[0]->shape, x[1]->shape, n, x,
                         out);
}

static sx_status kernel_conv2d_backward_input(KERNEL_ARGS)
{
    (void)s;
    return ref_conv_call(sx_tensor_conv2d_backward_input_out, sx_conv2d_workspace, out->shape,
                         x[0]->shape, n, x, out);
}

static sx_status kernel_conv2d_backward_kernel(KERNEL_ARGS)
{
    (void)s;
    return ref_conv_call(sx_tensor_conv2d_backward_kernel_out, sx_conv2d_workspace, x[0]->shape,
                         out->shape, n, x, out);
}

/* The padding before (top/left) and after an axis of n cells with the dilated window ke,
 * and stride s (the header's rules: SAME splits the total with the odd cell after,
 * SAME_LOWER before; EXPLICIT gives both). */
static void ref_pads(int64_t n, int64_t ke, int64_t s, sx_padding p, int64_t eb, int64_t ea,
                     int64_t *before, int64_t *after)
{
    int64_t same = (n + s - 1) / s, total = (same - 1) * s + ke - n;
    total = total > 0 ? total : 0;
    *before = *after = 0;
    if (p == SX_PAD_SAME)
        *before = total / 2, *after = total - total / 2;
    else if (p == SX_PAD_SAME_LOWER)
        *before = total - total / 2, *after = total / 2;
    else if (p == SX_PAD_EXPLICIT)
        *before = eb, *after = ea;
}

static int64_t ref_at_least_1(int v)
{
    return v > 1 ? v : 1;
}

/* Convolution by its definition, any stride, padding, dilation and groups. mode 0: y from
 * (x, k); 1: dx from (k, dy); 2: dk from (x, dy). xs (n,h,w,c), ks (kh,kw,c/groups,f),
 * ys (n,oh,ow,f). */
static void ref_conv(int mode, const int64_t *xs, const int64_t *ks, const int64_t *ys,
                     const sx_conv2d_params *p, const sx_tensor *A, const sx_tensor *B, double *out,
                     double *mag)
{
    int64_t dh = ref_at_least_1(p->dilation_h), dw = ref_at_least_1(p->dilation_w), pt, pl, unused;
    int64_t fg = ks[3] / ref_at_least_1(p->groups); /* filters per group */
    ref_pads(xs[1], dh * (ks[0] - 1) + 1, p->stride_h, p->padding, p->pad_top, p->pad_bottom, &pt,
             &unused);
    ref_pads(xs[2], dw * (ks[1] - 1) + 1, p->stride_w, p->padding, p->pad_left, p->pad_right, &pl,
             &unused);
    for (int64_t b = 0; b < ys[0]; b++)
        for (int64_t oy = 0; oy < ys[1]; oy++)
            for (int64_t ox = 0; ox < ys[2]; ox++)
                for (int64_t ky = 0; ky < ks[0]; ky++)
                    for (int64_t kx = 0; kx < ks[1]; kx++) {
                        int64_t iy = oy * p->stride_h + ky * dh - pt;
                        int64_t ix = ox * p->stride_w + kx * dw - pl;
                        if (iy < 0 || iy >= xs[1] || ix < 0 || ix >= xs[2])
                            continue;
                        for (int64_t c = 0; c < ks[2]; c++)
                            for (int64_t f = 0; f < ks[3]; f++) {
                                int64_t xc = (f / fg) * ks[2] + c; /* f's group's channel c */
                                int64_t xi = ((b * xs[1] + iy) * xs[2] + ix) * xs[3] + xc;
                                int64_t ki = ((ky * ks[1] + kx) * ks[2] + c) * ks[3] + f;
                                int64_t yi = ((b * ys[1] + oy) * ys[2] + ox) * ys[3] + f;
                                int64_t at = mode == 0 ? yi : mode == 1 ? xi : ki;
                                double v = mode == 0   ? ref_get(A, xi) * ref_get(B, ki)
                                           : mode == 1 ? ref_get(A, ki) * ref_get(B, yi)
                                                       : ref_get(A, xi) * ref_get(B, yi);
                                out[at] += v;
                                mag[at] += fabs(v);
                            }
                    }
}

static sx_status plain_conv2d(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    ref_conv(0, x[0]->shape, x[1]->shape, y->shape, &sx_cg_node_attr(n)->conv, x[0], x[1], want,
             mag);
    return SX_OK;
}

static sx_status plain_conv2d_backward_input(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    ref_conv(1, y->shape, x[0]->shape, x[1]->shape, &sx_cg_node_attr(n)->conv, x[0], x[1], want,
             mag);
    return SX_OK;
}

static sx_status plain_conv2d_backward_kernel(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    ref_conv(2, x[0]->shape, y->shape, x[1]->shape, &sx_cg_node_attr(n)->conv, x[0], x[1], want,
             mag);
    return SX_OK;
}

static sx_status kernel_maxpool2d(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_maxpool2d_out(x[0], &sx_cg_node_attr(n)->pool, out);
}

static sx_status kernel_maxpool2d_backward(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_maxpool2d_backward_out(x[0], x[1], &sx_cg_node_attr(n)->pool, out);
}

static sx_status kernel_maxpool2d_relu_backward(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_maxpool2d_relu_backward_out(x[0], x[1], &sx_cg_node_attr(n)->pool, out);
}

static sx_status kernel_avgpool2d(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_avgpool2d_out(x[0], &sx_cg_node_attr(n)->pool, out);
}

static sx_status kernel_avgpool2d_backward(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_avgpool2d_backward_out(x[0], &sx_cg_node_attr(n)->pool, out);
}

/* Pooling by its definition, any padding, dilation, ceil_mode (through ys) and
 * count_include_pad. mode 0: max, 1: avg, 2: max backward (dy to the first maximum of each
 * window), 3: avg backward. */
static void ref_pool(int mode, const int64_t *xs, const int64_t *ys, const sx_pool2d_params *p,
                     const sx_tensor *x, const sx_tensor *dy, double *out, double *mag)
{
    int64_t dh = ref_at_least_1(p->dilation_h), dw = ref_at_least_1(p->dilation_w), pt, pb, pl, pr;
    ref_pads(xs[1], dh * (p->kernel_h - 1) + 1, p->stride_h, p->padding, p->pad_top, p->pad_bottom,
             &pt, &pb);
    ref_pads(xs[2], dw * (p->kernel_w - 1) + 1, p->stride_w, p->padding, p->pad_left, p->pad_right,
             &pl, &pr);
    for (int64_t b = 0; b < ys[0]; b++)
        for (int64_t oy = 0; oy < ys[1]; oy++)
            for (int64_t ox = 0; ox < ys[2]; ox++)
                for (int64_t c = 0; c < ys[3]; c++) {
                    int64_t yi = ((b * ys[1] + oy) * ys[2] + ox) * ys[3] + c, arg = -1, cnt = 0;
                    int64_t padded = 0; /* window cells inside the padded input */
                    double best = -HUGE_VAL, sum = 0;
                    for (int pass = 0; pass < 2; pass++)
                        for (int64_t ky = 0; ky < p->kernel_h; ky++)
                            for (int64_t kx = 0; kx < p->kernel_w; kx++) {
                                int64_t iy = oy * p->stride_h + ky * dh - pt;
                                int64_t ix = ox * p->stride_w + kx * dw - pl;
                                if (pass == 0 && iy >= -pt && iy < xs[1] + pb && ix >= -pl &&
                                    ix < xs[2] + pr)
                                    padded++;
                                if (iy < 0 || iy >= xs[1] || ix < 0 || ix >= xs[2])
                                    continue;
                                int64_t xi = ((b * xs[1] + iy) * xs[2] + ix) * xs[3] + c;
                                double div = (double)(p->count_include_pad ? padded : cnt);
                                if (pass == 0) {
                                    cnt++;
                                    if (x != NULL && ref_get(x, xi) > best) {
                                        best = ref_get(x, xi);
                                        arg = xi;
                                    }
                                    if (x != NULL)
                                        sum += ref_get(x, xi);
                                } else if (mode == 3) {
                                    out[xi] += ref_get(dy, yi) / div;
                                    mag[xi] += fabs(ref_get(dy, yi));
                                }
                            }
                    double div = (double)(p->count_include_pad ? padded : cnt);
                    if (mode == 0)
                        out[yi] = best;
                    if (mode == 1) {
                        out[yi] = sum / div;
                        mag[yi] = fabs(sum);
                    }
                    if (mode == 2 && arg >= 0) {
                        out[arg] += ref_get(dy, yi);
                        mag[arg] += fabs(ref_get(dy, yi));
                    }
                }
}

/* maxpool2d and avgpool2d */
static sx_status plain_pool(PLAIN_ARGS)
{
    (void)compare;
    ref_pool(sx_cg_node_op(n) == SX_OP_MAXPOOL2D ? 0 : 1, x[0]->shape, sx_cg_value(n)->shape,
             &sx_cg_node_attr(n)->pool, x[0], NULL, want, mag);
    return SX_OK;
}

static sx_status plain_maxpool2d_backward(PLAIN_ARGS)
{
    (void)compare;
    ref_pool(2, x[0]->shape, x[1]->shape, &sx_cg_node_attr(n)->pool, x[0], x[1], want, mag);
    return SX_OK;
}

static sx_status plain_maxpool2d_relu_backward(PLAIN_ARGS) /* then zero where x <= 0 */
{
    (void)compare;
    ref_pool(2, x[0]->shape, x[1]->shape, &sx_cg_node_attr(n)->pool, x[0], x[1], want, mag);
    for (int64_t i = 0; i < x[0]->size; i++)
        if (!(ref_get(x[0], i) > 0))
            want[i] = 0;
    return SX_OK;
}

static sx_status plain_avgpool2d_backward(PLAIN_ARGS)
{
    (void)compare;
    ref_pool(3, sx_cg_value(n)->shape, x[0]->shape, &sx_cg_node_attr(n)->pool, NULL, x[0], want,
             mag);
    return SX_OK;
}

/* ---------------------------------------------------------------- transposed convolution */

/* Kernels (kh,kw,c_out/groups,c_in): strides, explicit and SAME pads, output padding, groups
 * (and one group per channel), dilation, a batch of two; every node within the differential
 * tester's DT_MAX_SIZE (64 elements). */
static const struct {
    shp x, k;
    sx_conv2d_params p;
} ct_cases[] = {
    {{4, {1, 2, 2, 2}}, {4, {3, 3, 2, 2}}, {.stride_h = 1, .stride_w = 1}},
    {{4, {1, 3, 2, 2}},
     {4, {2, 3, 2, 2}},
     {.stride_h = 2,
      .stride_w = 1,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 1,
      .pad_left = 1,
      .pad_right = 1}},
    {{4, {1, 2, 2, 4}},
     {4, {2, 2, 1, 4}},
     {.stride_h = 2, .stride_w = 2, .groups = 2, .output_padding_h = 1, .output_padding_w = 1}},
    {{4, {1, 3, 3, 2}},
     {4, {2, 2, 2, 2}},
     {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME, .dilation_h = 2, .dilation_w = 2}},
    {{4, {1, 2, 2, 3}},
     {4, {3, 3, 1, 3}},
     {.stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_SAME_LOWER,
      .groups = 3,
      .output_padding_h = 1,
      .output_padding_w = 1}},
    {{4, {1, 2, 2, 2}},
     {4, {3, 3, 2, 2}},
     {.stride_h = 2,
      .stride_w = 2,
      .padding = SX_PAD_EXPLICIT,
      .pad_top = 2,
      .pad_bottom = 1,
      .pad_left = 1,
      .pad_right = 2,
      .dilation_h = 2,
      .dilation_w = 2,
      .output_padding_h = 1}},
    {{4, {2, 2, 2, 1}}, {4, {2, 2, 2, 1}}, {.stride_h = 1, .stride_w = 1}},
};
#define N_CT 7

/* The shape of y (and dy) for transposed case v. */
static shp ct_dy(ctx *c, int v, sx_status *st)
{
    shp y = {4, {0}};
    sx_tensor x = sx_tensor_view(c->dt, 4, ct_cases[v].x.d, no_data);
    sx_tensor k = sx_tensor_view(c->dt, 4, ct_cases[v].k.d, no_data);
    *st = sx_conv_transpose2d_shape("opsamples", &x, &k, &ct_cases[v].p, y.d);
    return y;
}

#define SPEC_conv_transpose2d                                                                      \
    N_CT, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_conv_transpose2d, plain_conv_transpose2d)
#define DT_conv_transpose2d SAMPLE(2)
static sx_cg_node *sample_conv_transpose2d(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, ct_cases[v].x, V_UNIFORM, -1, 1);
    return sx_cg_conv_transpose2d(g, x, in(c, ct_cases[v].k, V_UNIFORM, -1, 1), &ct_cases[v].p);
}

#define SPEC_conv_transpose2d_backward_input                                                       \
    N_CT, OS_SMOOTH, 1e-6, 1e-6,                                                                   \
        REF(kernel_conv_transpose2d_backward_input, plain_conv_transpose2d_backward_input)
#define DT_conv_transpose2d_backward_input SAMPLE(2)
static sx_cg_node *sample_conv_transpose2d_backward_input(GEN_ARGS)
{
    CTX;
    sx_status st;
    shp dys = ct_dy(c, v, &st);
    if (st != SX_OK)
        return fail(c, st);
    sx_cg_node *k = in(c, ct_cases[v].k, V_UNIFORM, -1, 1);
    return sx_cg_conv_transpose2d_backward_input(g, k, in(c, dys, V_UNIFORM, -1, 1), &ct_cases[v].p,
                                                 ct_cases[v].x.d);
}

#define SPEC_conv_transpose2d_backward_kernel                                                      \
    N_CT, OS_SMOOTH, 1e-6, 1e-6,                                                                   \
        REF(kernel_conv_transpose2d_backward_kernel, plain_conv_transpose2d_backward_kernel)
#define DT_conv_transpose2d_backward_kernel SAMPLE(2)
static sx_cg_node *sample_conv_transpose2d_backward_kernel(GEN_ARGS)
{
    CTX;
    sx_status st;
    shp dys = ct_dy(c, v, &st);
    if (st != SX_OK)
        return fail(c, st);
    sx_cg_node *x = in(c, ct_cases[v].x, V_UNIFORM, -1, 1);
    return sx_cg_conv_transpose2d_backward_kernel(g, x, in(c, dys, V_UNIFORM, -1, 1),
                                                  &ct_cases[v].p, ct_cases[v].k.d);
}

/* ---- transposed convolution references */

static sx_status kernel_conv_transpose2d(KERNEL_ARGS)
{
    (void)s;
    return ref_conv_call(sx_tensor_conv_transpose2d_out, sx_conv_transpose2d_workspace, x[0]->shape,
                         x[1]->shape, n, x, out);
}

static sx_status kernel_conv_transpose2d_backward_input(KERNEL_ARGS)
{
    (void)s;
    return ref_conv_call(sx_tensor_conv_transpose2d_backward_input_out,
                         sx_conv_transpose2d_workspace, out->shape, x[0]->shape, n, x, out);
}

static sx_status kernel_conv_transpose2d_backward_kernel(KERNEL_ARGS)
{
    (void)s;
    return ref_conv_call(sx_tensor_conv_transpose2d_backward_kernel_out,
                         sx_conv_transpose2d_workspace, x[0]->shape, out->shape, n, x, out);
}

/* Transposed convolution by its definition (each x pixel scatters into y). mode 0: y from
 * (x, k); 1: dx from (k, dy); 2: dk from (x, dy). xs (n,h,w,ci), ks (kh,kw,co/groups,ci),
 * ys (n,oh,ow,co). */
static void ref_conv_transpose(int mode, const int64_t *xs, const int64_t *ks, const int64_t *ys,
                               const sx_conv2d_params *p, const sx_tensor *A, const sx_tensor *B,
                               double *out, double *mag)
{
    int64_t dh = p->dilation_h > 0 ? p->dilation_h : 1, dw = p->dilation_w > 0 ? p->dilation_w : 1;
    int64_t groups = p->groups > 0 ? p->groups : 1, cig = xs[3] / groups, cog = ks[2];
    int64_t pt = 0, pl = 0;
    if (p->padding == SX_PAD_EXPLICIT) {
        pt = p->pad_top;
        pl = p->pad_left;
    } else if (p->padding != SX_PAD_VALID) { /* SAME: oh = h * sh */
        int64_t ph = (xs[1] - 1) * p->stride_h + dh * (ks[0] - 1) + 1 + p->output_padding_h - ys[1];
        int64_t pw = (xs[2] - 1) * p->stride_w + dw * (ks[1] - 1) + 1 + p->output_padding_w - ys[2];
        pt = p->padding == SX_PAD_SAME_LOWER ? ph - ph / 2 : ph / 2;
        pl = p->padding == SX_PAD_SAME_LOWER ? pw - pw / 2 : pw / 2;
    }
    for (int64_t b = 0; b < xs[0]; b++)
        for (int64_t iy = 0; iy < xs[1]; iy++)
            for (int64_t ix = 0; ix < xs[2]; ix++)
                for (int64_t ky = 0; ky < ks[0]; ky++)
                    for (int64_t kx = 0; kx < ks[1]; kx++) {
                        int64_t oy = iy * p->stride_h - pt + ky * dh;
                        int64_t ox = ix * p->stride_w - pl + kx * dw;
                        if (oy < 0 || oy >= ys[1] || ox < 0 || ox >= ys[2])
                            continue;
                        for (int64_t ci = 0; ci < xs[3]; ci++)
                            for (int64_t co = 0; co < cog; co++) {
                                int64_t xi = ((b * xs[1] + iy) * xs[2] + ix) * xs[3] + ci;
                                int64_t ki = ((ky * ks[1] + kx) * ks[2] + co) * ks[3] + ci;
                                int64_t yi =
                                    ((b * ys[1] + oy) * ys[2] + ox) * ys[3] + (ci / cig) * cog + co;
                                int64_t at = mode == 0 ? yi : mode == 1 ? xi : ki;
                                double v = mode == 0   ? ref_get(A, xi) * ref_get(B, ki)
                                           : mode == 1 ? ref_get(A, ki) * ref_get(B, yi)
                                                       : ref_get(A, xi) * ref_get(B, yi);
                                out[at] += v;
                                mag[at] += fabs(v);
                            }
                    }
}

static sx_status plain_conv_transpose2d(PLAIN_ARGS)
{
    (void)compare;
    ref_conv_transpose(0, x[0]->shape, x[1]->shape, sx_cg_value(n)->shape,
                       &sx_cg_node_attr(n)->conv, x[0], x[1], want, mag);
    return SX_OK;
}

static sx_status plain_conv_transpose2d_backward_input(PLAIN_ARGS)
{
    (void)compare;
    ref_conv_transpose(1, sx_cg_value(n)->shape, x[0]->shape, x[1]->shape,
                       &sx_cg_node_attr(n)->conv, x[0], x[1], want, mag);
    return SX_OK;
}

static sx_status plain_conv_transpose2d_backward_kernel(PLAIN_ARGS)
{
    (void)compare;
    ref_conv_transpose(2, x[0]->shape, sx_cg_value(n)->shape, x[1]->shape,
                       &sx_cg_node_attr(n)->conv, x[0], x[1], want, mag);
    return SX_OK;
}

/* ---------------------------------------------------------------- adaptive average pooling */

/* Output sizes that divide the input and that do not (windows of two sizes, overlapping), one
 * larger than the input (windows of one cell, repeated), global pooling, a batch of two. */
static const struct {
    shp x;
    int64_t oh, ow;
} adaptive_cases[] = {
    {{4, {1, 5, 5, 2}}, 2, 3}, {{4, {2, 4, 6, 1}}, 2, 3}, {{4, {1, 3, 7, 2}}, 4, 3},
    {{4, {1, 4, 4, 3}}, 1, 1}, {{4, {1, 6, 5, 1}}, 4, 4},
};
#define N_ADAPTIVE 5

#define SPEC_adaptive_avgpool2d                                                                    \
    N_ADAPTIVE, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_adaptive_avgpool2d, plain_adaptive_avgpool2d)
#define DT_adaptive_avgpool2d SAMPLE(2)
static sx_cg_node *sample_adaptive_avgpool2d(GEN_ARGS)
{
    CTX;
    return sx_cg_adaptive_avgpool2d(g, in(c, adaptive_cases[v].x, V_UNIFORM, -2, 2),
                                    adaptive_cases[v].oh, adaptive_cases[v].ow);
}

#define SPEC_adaptive_avgpool2d_backward                                                           \
    N_ADAPTIVE, OS_SMOOTH, 1e-6, 1e-6,                                                             \
        REF(kernel_adaptive_avgpool2d_backward, plain_adaptive_avgpool2d_backward)
#define DT_adaptive_avgpool2d_backward SAMPLE(2)
static sx_cg_node *sample_adaptive_avgpool2d_backward(GEN_ARGS)
{
    CTX;
    shp x = adaptive_cases[v].x,
        dy = {4, {x.d[0], adaptive_cases[v].oh, adaptive_cases[v].ow, x.d[3]}};
    return sx_cg_adaptive_avgpool2d_backward(g, in(c, dy, V_UNIFORM, -1, 1), x.d);
}

static sx_status kernel_adaptive_avgpool2d(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_adaptive_avgpool2d_out(x[0], out);
}

static sx_status kernel_adaptive_avgpool2d_backward(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_adaptive_avgpool2d_backward_out(x[0], out);
}

/* Adaptive average pooling by its definition: window (i, j) averages rows
 * [floor(i h / oh), ceil((i + 1) h / oh)) and the columns likewise. mode 0: y from x; 1: dx
 * from dy. xs (n,h,w,c), ys (n,oh,ow,c). */
static void ref_adaptive(int mode, const int64_t *xs, const int64_t *ys, const sx_tensor *A,
                         double *out, double *mag)
{
    for (int64_t b = 0; b < xs[0]; b++)
        for (int64_t i = 0; i < ys[1]; i++)
            for (int64_t j = 0; j < ys[2]; j++) {
                int64_t r0 = i * xs[1] / ys[1], r1 = ((i + 1) * xs[1] + ys[1] - 1) / ys[1];
                int64_t c0 = j * xs[2] / ys[2], c1 = ((j + 1) * xs[2] + ys[2] - 1) / ys[2];
                double cnt = (double)((r1 - r0) * (c1 - c0));
                for (int64_t c = 0; c < xs[3]; c++) {
                    int64_t yi = ((b * ys[1] + i) * ys[2] + j) * ys[3] + c;
                    for (int64_t r = r0; r < r1; r++)
                        for (int64_t q = c0; q < c1; q++) {
                            int64_t xi = ((b * xs[1] + r) * xs[2] + q) * xs[3] + c;
                            int64_t at = mode == 0 ? yi : xi;
                            double v = (mode == 0 ? ref_get(A, xi) : ref_get(A, yi)) / cnt;
                            out[at] += v;
                            mag[at] += fabs(v);
                        }
                }
            }
}

static sx_status plain_adaptive_avgpool2d(PLAIN_ARGS)
{
    (void)compare;
    ref_adaptive(0, x[0]->shape, sx_cg_value(n)->shape, x[0], want, mag);
    return SX_OK;
}

static sx_status plain_adaptive_avgpool2d_backward(PLAIN_ARGS)
{
    (void)compare;
    ref_adaptive(1, sx_cg_value(n)->shape, x[0]->shape, x[0], want, mag);
    return SX_OK;
}

/* ---------------------------------------------------------------- softmax family */

static const struct {
    shp x;
    int axis;
} softmax_cases[] = {
    {{2, {3, 5}}, -1}, {{3, {2, 3, 4}}, 1}, {{1, {4}}, 0}, {{3, {2, 3, 4}}, 0}, {{2, {1, 5}}, 0},
};
#define N_SOFTMAX 5

#define SPEC_softmax N_SOFTMAX, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_softmax, plain_softmax)
#define DT_softmax GEN(gen_softmax, 2)
static sx_cg_node *sample_softmax(GEN_ARGS)
{
    CTX;
    return sx_cg_softmax(g, in(c, softmax_cases[v].x, V_UNIFORM, -3, 3), softmax_cases[v].axis);
}

#define SPEC_log_softmax N_SOFTMAX, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_log_softmax, plain_softmax)
#define DT_log_softmax GEN(gen_softmax, 2)
static sx_cg_node *sample_log_softmax(GEN_ARGS)
{
    CTX;
    return sx_cg_log_softmax(g, in(c, softmax_cases[v].x, V_UNIFORM, -3, 3), softmax_cases[v].axis);
}

/* The backward ops read the forward result y: probabilities, or log-probabilities. Any y is a
 * valid input (the formulas are polynomial in y). */
#define SPEC_softmax_backward                                                                      \
    N_SOFTMAX, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_softmax_backward, plain_softmax)
#define DT_softmax_backward GEN(gen_softmax_backward, 2)
static sx_cg_node *sample_softmax_backward(GEN_ARGS)
{
    CTX;
    sx_cg_node *y = in(c, softmax_cases[v].x, V_UNIFORM, 0.05, 1);
    return sx_cg_softmax_backward(g, y, in(c, softmax_cases[v].x, V_UNIFORM, -1, 1),
                                  softmax_cases[v].axis);
}

#define SPEC_log_softmax_backward                                                                  \
    N_SOFTMAX, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_log_softmax_backward, plain_softmax)
#define DT_log_softmax_backward GEN(gen_softmax_backward, 2)
static sx_cg_node *sample_log_softmax_backward(GEN_ARGS)
{
    CTX;
    sx_cg_node *y = in(c, softmax_cases[v].x, V_UNIFORM, -3, -0.1);
    return sx_cg_log_softmax_backward(g, y, in(c, softmax_cases[v].x, V_UNIFORM, -1, 1),
                                      softmax_cases[v].axis);
}

/* Cross-entropy: soft targets, one-hot targets, one class, no rows. */
static const shp xent_cases[] = {{2, {4, 5}}, {2, {1, 3}}, {2, {3, 1}}, {2, {0, 4}}};
#define N_XENT 4

#define SPEC_softmax_xent                                                                          \
    N_XENT, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_softmax_xent, plain_softmax_xent)
#define DT_softmax_xent GEN(gen_softmax_xent, 2)
static sx_cg_node *sample_softmax_xent(GEN_ARGS)
{
    CTX;
    sx_cg_node *logits = in(c, xent_cases[v], V_UNIFORM, -3, 3);
    return sx_cg_softmax_xent(g, logits, in_probs(c, xent_cases[v], v == 1));
}

#define SPEC_softmax_xent_backward                                                                 \
    N_XENT, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_softmax_xent_backward, plain_softmax_xent)
#define DT_softmax_xent_backward GEN(gen_softmax_xent, 2)
static sx_cg_node *sample_softmax_xent_backward(GEN_ARGS)
{
    CTX;
    sx_cg_node *logits = in(c, xent_cases[v], V_UNIFORM, -3, 3);
    sx_cg_node *target = in_probs(c, xent_cases[v], v == 1);
    sx_cg_node *dout = in(c, (shp){1, {xent_cases[v].d[0]}}, V_UNIFORM, -1, 1);
    return sx_cg_softmax_xent_backward(g, logits, target, dout);
}

/* Cross-entropy against class indices: ignored rows (index -1), label smoothing, one class, no
 * rows. */
static const struct {
    shp l;
    int64_t lo;    /* indices drawn from lo..k-1: -1 is the ignored index */
    double smooth; /* label smoothing */
} sxent_cases[] = {
    {{2, {4, 5}}, -1, 0}, {{2, {3, 6}}, -1, 0.1}, {{2, {3, 1}}, 0, 0.2}, {{2, {0, 4}}, 0, 0}};

static sx_cg_node *sxent_idx(ctx *c, int v)
{
    return in_fixed(c, (shp){1, {sxent_cases[v].l.d[0]}}, V_INT, (double)sxent_cases[v].lo,
                    (double)sxent_cases[v].l.d[1] - 1);
}

#define SPEC_sparse_xent 4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_sparse_xent, plain_sparse_xent)
#define DT_sparse_xent SAMPLE(2)
static sx_cg_node *sample_sparse_xent(GEN_ARGS)
{
    CTX;
    sx_cg_node *logits = in(c, sxent_cases[v].l, V_UNIFORM, -3, 3);
    return sx_cg_sparse_xent(g, logits, sxent_idx(c, v), -1, sxent_cases[v].smooth);
}

#define SPEC_sparse_xent_backward                                                                  \
    4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_sparse_xent_backward, plain_sparse_xent)
#define DT_sparse_xent_backward SAMPLE(2)
static sx_cg_node *sample_sparse_xent_backward(GEN_ARGS)
{
    CTX;
    sx_cg_node *logits = in(c, sxent_cases[v].l, V_UNIFORM, -3, 3);
    sx_cg_node *idx = sxent_idx(c, v);
    sx_cg_node *dout = in(c, (shp){1, {sxent_cases[v].l.d[0]}}, V_UNIFORM, -1, 1);
    return sx_cg_sparse_xent_backward(g, logits, idx, dout, -1, sxent_cases[v].smooth);
}

/* ---- softmax family references */

static sx_status kernel_softmax(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_softmax_out(x[0], sx_cg_node_attr(n)->axis, out);
}

static sx_status kernel_log_softmax(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_log_softmax_out(x[0], sx_cg_node_attr(n)->axis, out);
}

static sx_status kernel_softmax_backward(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_softmax_backward_out(x[0], x[1], sx_cg_node_attr(n)->axis, out);
}

static sx_status kernel_log_softmax_backward(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_log_softmax_backward_out(x[0], x[1], sx_cg_node_attr(n)->axis, out);
}

static sx_status kernel_softmax_xent(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_softmax_xent_out(x[0], x[1], out);
}

static sx_status kernel_softmax_xent_backward(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_softmax_xent_backward_out(x[0], x[1], x[2], out);
}

/* Softmax family along the op's axis: (outer, len, inner) blocks. softmax, log_softmax (x),
 * softmax_backward (x is y, then dy), log_softmax_backward (x is y, then dy). */
static sx_status plain_softmax(PLAIN_ARGS)
{
    (void)compare;
    sx_cg_op op = sx_cg_node_op(n);
    int axis = sx_cg_node_attr(n)->axis;
    const sx_tensor *xv = x[0], *dy = sx_cg_node_n_inputs(n) > 1 ? x[1] : NULL;
    int64_t outer = 1, len = xv->shape[axis], inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= xv->shape[d];
    for (int d = axis + 1; d < xv->rank; d++)
        inner *= xv->shape[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
#define AT(j) ((o * len + (j)) * inner + i)
            double m = -HUGE_VAL, se = 0, sdy = 0, sdyy = 0;
            for (int64_t j = 0; j < len; j++)
                m = ref_get(xv, AT(j)) > m ? ref_get(xv, AT(j)) : m;
            for (int64_t j = 0; j < len; j++) {
                se += exp(ref_get(xv, AT(j)) - m);
                if (dy != NULL) {
                    sdy += ref_get(dy, AT(j));
                    sdyy += ref_get(dy, AT(j)) * ref_get(xv, AT(j));
                }
            }
            for (int64_t j = 0; j < len; j++) {
                double v = ref_get(xv, AT(j));
                if (op == SX_OP_SOFTMAX) {
                    want[AT(j)] = exp(v - m) / se;
                } else if (op == SX_OP_LOG_SOFTMAX) {
                    want[AT(j)] = v - m - log(se);
                    mag[AT(j)] = fabs(v) + fabs(m) + fabs(log(se));
                } else if (op == SX_OP_SOFTMAX_BACKWARD) {
                    want[AT(j)] = v * (ref_get(dy, AT(j)) - sdyy);
                    mag[AT(j)] = fabs(v) * (fabs(ref_get(dy, AT(j))) + (double)len);
                } else { /* log_softmax_backward */
                    want[AT(j)] = ref_get(dy, AT(j)) - exp(v) * sdy;
                    mag[AT(j)] = (double)len;
                }
            }
#undef AT
        }
    return SX_OK;
}

static sx_status kernel_sparse_xent(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    return sx_tensor_sparse_xent_out(x[0], x[1], a->sparse_xent.ignore, a->sparse_xent.smoothing,
                                     out);
}

static sx_status kernel_sparse_xent_backward(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    return sx_tensor_sparse_xent_backward_out(x[0], x[1], x[2], a->sparse_xent.ignore,
                                              a->sparse_xent.smoothing, out);
}

/* The cross-entropy of softmax(logits) against the smoothed one-hot row q of each index,
 * q_j = e/k + (1 - e) [j == t], in double: -sum_j q_j log_softmax_j (0 for an ignored row); its
 * backward dout_i (softmax - q). */
static sx_status plain_sparse_xent(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *l = x[0], *t = x[1];
    const sx_cg_attr *a = sx_cg_node_attr(n);
    const sx_tensor *dout = sx_cg_node_op(n) == SX_OP_SPARSE_XENT_BACKWARD ? x[2] : NULL;
    const int64_t rows = l->shape[0], k = l->shape[1];
    const double e = a->alpha;
    for (int64_t i = 0; i < rows; i++) {
        const int64_t ti = (int64_t)ref_get(t, i);
        const bool skip = ti == a->sparse_xent.ignore;
        double m = -HUGE_VAL, se = 0, sum = 0, ms = 0;
        for (int64_t j = 0; j < k; j++)
            m = fmax(m, ref_get(l, i * k + j));
        for (int64_t j = 0; j < k; j++)
            se += exp(ref_get(l, i * k + j) - m);
        for (int64_t j = 0; j < k; j++) {
            const double ls = ref_get(l, i * k + j) - m - log(se);
            const double q = skip ? 0 : e / (double)k + (j == ti ? 1 - e : 0);
            if (dout != NULL) {
                want[i * k + j] = skip ? 0 : ref_get(dout, i) * (exp(ls) - q);
                mag[i * k + j] = fabs(ref_get(dout, i));
            }
            sum -= q * ls;
            ms += fabs(q * ls) + q * (fabs(m) + 1);
        }
        if (dout == NULL) {
            want[i] = sum;
            mag[i] = ms;
        }
    }
    return SX_OK;
}

/* Cross-entropy of softmax(logits) against target per row (x: logits, target), and its
 * backward pass (x: logits, target, dout). */
static sx_status plain_softmax_xent(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *l = x[0], *t = x[1];
    const sx_tensor *dout = sx_cg_node_op(n) == SX_OP_SOFTMAX_XENT_BACKWARD ? x[2] : NULL;
    int64_t rows = l->shape[0], k = l->shape[1];
    for (int64_t i = 0; i < rows; i++) {
        double m = -HUGE_VAL, se = 0, sum = 0, ms = 0;
        for (int64_t j = 0; j < k; j++)
            m = ref_get(l, i * k + j) > m ? ref_get(l, i * k + j) : m;
        for (int64_t j = 0; j < k; j++)
            se += exp(ref_get(l, i * k + j) - m);
        for (int64_t j = 0; j < k; j++) {
            double ls = ref_get(l, i * k + j) - m - log(se);
            if (dout != NULL) {
                want[i * k + j] = ref_get(dout, i) * (exp(ls) - ref_get(t, i * k + j));
                mag[i * k + j] = fabs(ref_get(dout, i));
            }
            sum -= ref_get(t, i * k + j) * ls;
            ms += fabs(ref_get(t, i * k + j) * ls) + fabs(ref_get(t, i * k + j)) * (fabs(m) + 1);
        }
        if (dout == NULL) {
            want[i] = sum;
            mag[i] = ms;
        }
    }
    return SX_OK;
}

/* A mask from a graph generator seeded from rng (the seed is recorded for references). Its
 * dtype is the graph's. */
static const struct {
    shp s;
    double p;
} dropout_cases[] = {{{2, {4, 5}}, 0.5}, {{1, {3}}, 0}, {{3, {2, 3, 4}}, 0.25}, {{0, {0}}, 0.9}};
#define SPEC_dropout_mask 4, OS_NONE, 0, 0, REF(kernel_dropout_mask, plain_dropout_mask)
#define DT_dropout_mask GEN(gen_dropout_mask, 1)
static sx_cg_node *sample_dropout_mask(GEN_ARGS)
{
    CTX;
    int id;
    s->rng_seed = sx_rng_u64(rng);
    sx_status st = sx_cg_rng_new(g, s->rng_seed, &id);
    if (st != SX_OK)
        return fail(c, st);
    return sx_cg_dropout_mask(g, id, dropout_cases[v].p, dropout_cases[v].s.rank,
                              dropout_cases[v].s.d);
}

/* The first mask the graph's generator draws. */
static sx_status kernel_dropout_mask(KERNEL_ARGS)
{
    (void)x;
    sx_rng r;
    sx_rng_seed(&r, s->rng_seed);
    return sx_tensor_dropout_mask(out, &r, sx_cg_node_attr(n)->alpha);
}

/* Every entry is 0 or the dtype's 1/(1-p). */
static sx_status plain_dropout_mask(PLAIN_ARGS)
{
    (void)x, (void)want, (void)mag;
    const sx_tensor *y = sx_cg_value(n);
    sx_tensor *keep = ref_zeros(y->dtype, 0, NULL);
    sx_tensor_set(keep, 0, 1 / (1 - sx_cg_node_attr(n)->alpha));
    sx_status st = SX_OK;
    for (int64_t i = 0; st == SX_OK && i < y->size; i++)
        if (!(ref_get(y, i) == 0 || ref_get(y, i) == ref_get(keep, 0)))
            st = sx_error(SX_E_STATE, "mask entry %g", ref_get(y, i));
    sx_tensor_free(keep);
    *compare = false;
    return st;
}

/* ---------------------------------------------------------------- collectives */

/* A graph without a communicator is a job of one process: the bucket is scale * x..., packed. */
static const struct {
    double scale;
    int k;
    shp x[2];
} bucket_cases[] = {{0.5, 2, {{2, {2, 3}}, {1, {4}}}},
                    {1, 1, {{1, {5}}, {0, {0}}}},
                    {0, 2, {{2, {1, 2}}, {0, {0}}}},
                    {-3, 2, {{0, {0}}, {2, {2, 2}}}}};
#define SPEC_allreduce_start 4, OS_NONE, 0, 0, REF(kernel_allreduce_start, plain_allreduce_start)
#define DT_allreduce_start EXCLUDED("a collective: nn/ makes it after differentiation")
static sx_cg_node *sample_allreduce_start(GEN_ARGS)
{
    CTX;
    double w = bucket_cases[v].scale;
    sx_cg_node *scale = in_fixed(c, (shp){0, {0}}, V_UNIFORM, w, w), *xs[2];
    for (int i = 0; i < bucket_cases[v].k; i++)
        xs[i] = in_fixed(c, bucket_cases[v].x[i], V_UNIFORM, -2, 2);
    return sx_cg_allreduce_start(g, scale, bucket_cases[v].k, xs);
}

/* Each input times the scale (the kernel of mul by a scalar) into its range of out; scale 0
 * writes zeros. */
static sx_status kernel_allreduce_start(KERNEL_ARGS)
{
    (void)s;
    double w = sx_tensor_get(x[0], 0);
    int64_t at = 0;
    for (int i = 1; i < sx_cg_node_n_inputs(n); i++) {
        int64_t len = x[i]->size;
        sx_tensor from = sx_tensor_view(x[i]->dtype, 1, &len, x[i]->data);
        sx_tensor to = sx_tensor_view(out->dtype, 1, &len,
                                      (char *)out->data + (size_t)at * sx_dtype_size(out->dtype));
        if (w == 0) /* zeros whatever x holds (a rank without rows: sx_cgraph.h) */
            memset(to.data, 0, (size_t)len * sx_dtype_size(out->dtype));
        else
            SX_TRY(sx_tensor_binary_scalar_out(SX_BINARY_MUL, &from, w, &to));
        at += len;
    }
    return SX_OK;
}

static sx_status plain_allreduce_start(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    double w = ref_get(x[0], 0);
    int64_t at = 0;
    for (int i = 1; i < sx_cg_node_n_inputs(n); i++)
        for (int64_t j = 0; j < x[i]->size; j++)
            want[at++] = w * ref_get(x[i], j);
    return SX_OK;
}

/* Parts of a bucket of (2,3) and (4) packed with scale 1: a whole input, the other, one
 * element, an empty part. */
static const struct {
    int64_t offset;
    shp s;
} part_cases[] = {{6, {2, {2, 2}}}, {0, {2, {3, 2}}}, {3, {0, {0}}}, {10, {1, {0}}}};
#define SPEC_allreduce_part 4, OS_NONE, 0, 0, REF(kernel_allreduce_part, plain_allreduce_part)
#define DT_allreduce_part EXCLUDED("a collective: nn/ makes it after differentiation")
static sx_cg_node *sample_allreduce_part(GEN_ARGS)
{
    CTX;
    sx_cg_node *scale = in_fixed(c, (shp){0, {0}}, V_UNIFORM, 1, 1);
    sx_cg_node *xs[2] = {in_fixed(c, (shp){2, {2, 3}}, V_UNIFORM, -2, 2),
                         in_fixed(c, (shp){1, {4}}, V_UNIFORM, -2, 2)};
    return sx_cg_allreduce_part(g, sx_cg_allreduce_start(g, scale, 2, xs), part_cases[v].offset,
                                part_cases[v].s.rank, part_cases[v].s.d);
}

/* The bucket's elements from the offset, copied. */
static sx_status kernel_allreduce_part(KERNEL_ARGS)
{
    (void)s;
    int64_t len = out->size;
    sx_tensor from =
        sx_tensor_view(x[0]->dtype, 1, &len,
                       (char *)x[0]->data + (size_t)sx_cg_node_attr(n)->allreduce.offset *
                                                sx_dtype_size(x[0]->dtype));
    sx_tensor to = sx_tensor_view(out->dtype, 1, &len, out->data);
    return sx_tensor_copy_out(&from, &to);
}

static sx_status plain_allreduce_part(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    int64_t at = sx_cg_node_attr(n)->allreduce.offset;
    for (int64_t j = 0; j < sx_cg_value(n)->size; j++)
        want[j] = ref_get(x[0], at + j);
    return SX_OK;
}

/* ---------------------------------------------------------------- linear algebra */

/* inv, solve, det, logdet: singular values in [1, 3) (condition below 3), random sign of det */
static const int square_sizes[] = {1, 3, 5, 2};

#define SPEC_inv 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_inv, plain_inv)
#define DT_inv GEN(gen_linalg, 1)
static sx_cg_node *sample_inv(GEN_ARGS)
{
    CTX;
    int n = square_sizes[v];
    return sx_cg_inv(g, in_matrix(c, n, n, 1, 3));
}

static const struct {
    int n;
    shp b;
} solve_cases[] = {{3, {1, {3}}}, {4, {2, {4, 2}}}, {1, {2, {1, 3}}}};
#define SPEC_solve 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_solve, plain_solve)
#define DT_solve GEN(gen_solve, 1)
static sx_cg_node *sample_solve(GEN_ARGS)
{
    CTX;
    int n = solve_cases[v].n;
    sx_cg_node *a = in_matrix(c, n, n, 1, 3);
    return sx_cg_solve(g, a, in(c, solve_cases[v].b, V_UNIFORM, -2, 2));
}

#define SPEC_det 4, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_det, plain_det)
#define DT_det GEN(gen_linalg, 1)
static sx_cg_node *sample_det(GEN_ARGS)
{
    CTX;
    int n = square_sizes[v];
    return sx_cg_det(g, in_matrix(c, n, n, 1, 3));
}

#define SPEC_logdet 4, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_logdet, plain_det)
#define DT_logdet GEN(gen_linalg, 1)
static sx_cg_node *sample_logdet(GEN_ARGS)
{
    CTX;
    int n = square_sizes[v];
    return sx_cg_logdet(g, in_matrix(c, n, n, 1, 3));
}

/* cholesky: the symmetric part of an SPD input (eigenvalues in [1, 3)) */
#define SPEC_cholesky 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_cholesky, plain_cholesky)
#define DT_cholesky GEN(gen_linalg, 1)
static sx_cg_node *sample_cholesky(GEN_ARGS)
{
    CTX;
    double w[8];
    int n = square_sizes[v];
    for (int i = 0; i < n; i++)
        w[i] = uni(rng, 1, 3);
    return sx_cg_cholesky(g, in_symmetric(c, n, w));
}

/* qr: full rank (singular values in [1, 3)), tall, square and wide */
static const int qr_cases[][2] = {{5, 3}, {4, 4}, {3, 5}};
#define SPEC_qr_q 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_qr_q, plain_qr_q)
#define DT_qr_q GEN(gen_linalg, 1)
static sx_cg_node *sample_qr_q(GEN_ARGS)
{
    CTX;
    return sx_cg_qr_q(g, in_matrix(c, qr_cases[v][0], qr_cases[v][1], 1, 3));
}

#define SPEC_qr_r 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_qr_r, plain_qr_r)
#define DT_qr_r GEN(gen_linalg, 1)
static sx_cg_node *sample_qr_r(GEN_ARGS)
{
    CTX;
    return sx_cg_qr_r(g, in_matrix(c, qr_cases[v][0], qr_cases[v][1], 1, 3));
}

/* svd_s: distinct singular values, at least 0.5 apart and 1 from zero */
static const int svd_cases[][2] = {{4, 3}, {3, 5}, {4, 4}, {1, 1}};
#define SPEC_svd_s 4, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_svd_s, plain_svd_s)
#define DT_svd_s GEN(gen_linalg, 1)
static sx_cg_node *sample_svd_s(GEN_ARGS)
{
    CTX;
    int m = svd_cases[v][0], n = svd_cases[v][1];
    double sv[8], a[64];
    for (int i = 0; i < 8; i++)
        sv[i] = 1 + 0.8 * i + 0.3 * sx_rng_uniform(rng);
    spectral(rng, m, n, sv, false, a);
    return sx_cg_svd_s(g, leaf_of(c, (shp){2, {m, n}}, a, true, false));
}

/* eigh: symmetric with distinct eigenvalues (at least 0.7 apart, both signs). The eigenvector
 * signs are LAPACK's choice: continuous under small perturbations in practice, which finite
 * differences of eigh_v rely on. */
#define SPEC_eigh_w 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_eigh_w, plain_eigh_w)
#define DT_eigh_w GEN(gen_linalg, 1)
#define SPEC_eigh_v 3, OS_SMOOTH, 1e-6, 1e-5, REF(kernel_eigh_v, plain_eigh_v)
#define DT_eigh_v GEN(gen_linalg, 1)
static sx_cg_node *eigh_input(ctx *c, int v)
{
    double w[8];
    int n = square_sizes[v];
    for (int i = 0; i < n; i++)
        w[i] = (double)(i - n / 2) + 0.3 * sx_rng_uniform(c->rng);
    return in_symmetric(c, n, w);
}

static sx_cg_node *sample_eigh_w(GEN_ARGS)
{
    CTX;
    return sx_cg_eigh_w(g, eigh_input(c, v));
}

static sx_cg_node *sample_eigh_v(GEN_ARGS)
{
    CTX;
    return sx_cg_eigh_v(g, eigh_input(c, v));
}

/* ---- linear algebra references: the kernels, and the identities that define each result */

static sx_status kernel_inv(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_inv_out(x[0], out);
}

static sx_status kernel_solve(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_solve_out(x[0], x[1], out);
}

static sx_status kernel_det(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_det_out(x[0], out);
}

static sx_status kernel_logdet(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_logdet_out(x[0], out, NULL);
}

static sx_status kernel_cholesky(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_cholesky_out(x[0], out);
}

static sx_status kernel_qr_q(KERNEL_ARGS)
{
    (void)n, (void)s;
    int64_t rs[2] = {out->shape[1], x[0]->shape[1]};
    sx_tensor *r = ref_zeros(out->dtype, 2, rs);
    sx_status st = sx_tensor_qr_out(x[0], out, r);
    sx_tensor_free(r);
    return st;
}

static sx_status kernel_qr_r(KERNEL_ARGS)
{
    (void)n, (void)s;
    int64_t qs[2] = {x[0]->shape[0], out->shape[0]};
    sx_tensor *q = ref_zeros(out->dtype, 2, qs);
    sx_status st = sx_tensor_qr_out(x[0], q, out);
    sx_tensor_free(q);
    return st;
}

static sx_status kernel_svd_s(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_svd_out(x[0], NULL, out, NULL);
}

static sx_status kernel_eigh_w(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_eigh_out(x[0], out, NULL);
}

static sx_status kernel_eigh_v(KERNEL_ARGS)
{
    (void)n, (void)s;
    int64_t wn = out->shape[0];
    sx_tensor *w = ref_zeros(out->dtype, 1, &wn);
    sx_status st = sx_tensor_eigh_out(x[0], w, out);
    sx_tensor_free(w);
    return st;
}

static double *ref_mat(const sx_tensor *t)
{
    double *m = ref_alloc((size_t)t->size * sizeof *m);
    for (int64_t i = 0; i < t->size; i++)
        m[i] = ref_get(t, i);
    return m;
}

static double ref_la_tol(sx_dtype dt)
{
    return dt == SX_F32 ? 1e-4 : 1e-10;
}

/* |p - q| <= tol (1 + |q|) for matrices of `count` entries; SX_E_STATE naming `which` if not. */
static sx_status ref_near(const double *p, const double *q, int64_t count, double tol,
                          const char *which)
{
    for (int64_t i = 0; i < count; i++)
        if (!(fabs(p[i] - q[i]) <= tol * (1 + fabs(q[i]))))
            return sx_error(SX_E_STATE, "%s: entry %lld: %.10g vs %.10g", which, (long long)i, p[i],
                            q[i]);
    return SX_OK;
}

/* c (m,n) = op(a) (m,k) @ op(b) (k,n); a is (m,k) or (k,m) when ta; b is (k,n) or (n,k). */
static void ref_mm(const double *a, bool ta, const double *b, bool tb, int64_t m, int64_t k,
                   int64_t n, double *c)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t l = 0; l < k; l++)
                s += (ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
            c[i * n + j] = s;
        }
}

static double *ref_eye(int64_t n)
{
    double *e = ref_alloc((size_t)(n * n) * sizeof *e);
    for (int64_t i = 0; i < n; i++)
        e[i * n + i] = 1;
    return e;
}

/* det by Gaussian elimination with partial pivoting (a is overwritten). */
static double ref_det(double *a, int64_t n)
{
    double det = 1;
    for (int64_t c = 0; c < n; c++) {
        int64_t p = c;
        for (int64_t r = c + 1; r < n; r++)
            if (fabs(a[r * n + c]) > fabs(a[p * n + c]))
                p = r;
        if (p != c) {
            det = -det;
            for (int64_t j = 0; j < n; j++) {
                double t = a[c * n + j];
                a[c * n + j] = a[p * n + j];
                a[p * n + j] = t;
            }
        }
        det *= a[c * n + c];
        for (int64_t r = c + 1; r < n; r++) {
            double f = a[r * n + c] / a[c * n + c];
            for (int64_t j = c; j < n; j++)
                a[r * n + j] -= f * a[c * n + j];
        }
    }
    return det;
}

static int ref_cmp_double(const void *p, const void *q)
{
    double a = *(const double *)p, b = *(const double *)q;
    return (a > b) - (a < b);
}

/* The eigenvalues of a symmetric matrix (a is overwritten), ascending: cyclic Jacobi. */
static void ref_eig(double *a, int64_t n, double *w)
{
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++)
                off += a[p * n + q] * a[p * n + q];
        if (off < 1e-30)
            break;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++) {
                if (a[p * n + q] == 0)
                    continue;
                double th = (a[q * n + q] - a[p * n + p]) / (2 * a[p * n + q]);
                double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int64_t k = 0; k < n; k++) { /* columns p, q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int64_t k = 0; k < n; k++) { /* rows p, q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
    }
    for (int64_t i = 0; i < n; i++)
        w[i] = a[i * n + i];
    qsort(w, (size_t)n, sizeof *w, ref_cmp_double);
}

/* What every identity check reads: a = x[0] and r = the result, as double matrices (freed by
 * la_end), x's shape (m, c) and the tolerance. The plain references of linear algebra check
 * the identities themselves (no element-wise comparison). */
typedef struct ref_la {
    double *a, *r, tol;
    int64_t m, c;
} ref_la;

static ref_la ref_la_begin(const sx_cg_node *n, const sx_tensor *const *x, bool *compare)
{
    const sx_tensor *y = sx_cg_value(n);
    ref_la l = {ref_mat(x[0]), ref_mat(y), ref_la_tol(y->dtype), x[0]->shape[0], x[0]->shape[1]};
    *compare = false;
    return l;
}

static sx_status ref_la_end(ref_la *l, sx_status st)
{
    free(l->a);
    free(l->r);
    return st;
}

static sx_status plain_inv(PLAIN_ARGS) /* a @ inv(a) = I */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    double *p = ref_alloc((size_t)(l.m * l.m) * sizeof *p), *e = ref_eye(l.m);
    ref_mm(l.a, false, l.r, false, l.m, l.m, l.m, p);
    sx_status st = ref_near(p, e, l.m * l.m, l.tol, "a @ inv(a) = I");
    free(p);
    free(e);
    return ref_la_end(&l, st);
}

static sx_status plain_solve(PLAIN_ARGS) /* a @ x = b */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    int64_t k = x[1]->rank == 1 ? 1 : x[1]->shape[1];
    double *p = ref_alloc((size_t)(l.m * k) * sizeof *p), *bb = ref_mat(x[1]);
    ref_mm(l.a, false, l.r, false, l.m, l.m, k, p);
    sx_status st = ref_near(p, bb, l.m * k, l.tol, "a @ solve(a, b) = b");
    free(p);
    free(bb);
    return ref_la_end(&l, st);
}

/* det and logdet: by elimination */
static sx_status plain_det(PLAIN_ARGS)
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    double d = ref_det(l.a, l.m);
    double w = sx_cg_node_op(n) == SX_OP_DET ? d : log(fabs(d));
    return ref_la_end(&l, ref_near(l.r, &w, 1, l.tol, "det by elimination"));
}

static sx_status plain_cholesky(PLAIN_ARGS) /* lower triangular, l @ l^T = a */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    sx_status st = SX_OK;
    for (int64_t i = 0; i < l.m; i++)
        for (int64_t j = i + 1; j < l.m && st == SX_OK; j++)
            if (l.r[i * l.m + j] != 0.0)
                st = sx_error(SX_E_STATE, "l[%lld,%lld] above the diagonal", (long long)i,
                              (long long)j);
    double *p = ref_alloc((size_t)(l.m * l.m) * sizeof *p);
    ref_mm(l.r, false, l.r, true, l.m, l.m, l.m, p);
    if (st == SX_OK)
        st = ref_near(p, l.a, l.m * l.m, l.tol, "l @ l^T = a");
    free(p);
    return ref_la_end(&l, st);
}

static sx_status
plain_qr_q(PLAIN_ARGS) /* orthonormal columns spanning a's: q^T q = I, q q^T a = a */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    int64_t k = sx_cg_value(n)->shape[1], m = l.m, c = l.c;
    double *p = ref_alloc((size_t)(k * k) * sizeof *p), *e = ref_eye(k);
    double *qa = ref_alloc((size_t)(k * c) * sizeof *qa),
           *qqa = ref_alloc((size_t)(m * c) * sizeof(double));
    ref_mm(l.r, true, l.r, false, k, m, k, p);
    sx_status st = ref_near(p, e, k * k, l.tol, "q^T q = I");
    ref_mm(l.r, true, l.a, false, k, m, c, qa);
    ref_mm(l.r, false, qa, false, m, k, c, qqa);
    if (st == SX_OK)
        st = ref_near(qqa, l.a, m * c, l.tol, "q q^T a = a");
    free(p);
    free(e);
    free(qa);
    free(qqa);
    return ref_la_end(&l, st);
}

static sx_status plain_qr_r(PLAIN_ARGS) /* upper triangular, r^T r = a^T a */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    int64_t k = sx_cg_value(n)->shape[0], m = l.m, c = l.c;
    sx_status st = SX_OK;
    double *p = ref_alloc((size_t)(c * c) * sizeof *p),
           *ata = ref_alloc((size_t)(c * c) * sizeof(double));
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < i && j < c && st == SX_OK; j++)
            if (l.r[i * c + j] != 0.0)
                st = sx_error(SX_E_STATE, "r[%lld,%lld] below the diagonal", (long long)i,
                              (long long)j);
    ref_mm(l.r, true, l.r, false, c, k, c, p);
    ref_mm(l.a, true, l.a, false, c, m, c, ata);
    if (st == SX_OK)
        st = ref_near(p, ata, c * c, l.tol, "r^T r = a^T a");
    free(p);
    free(ata);
    return ref_la_end(&l, st);
}

/* descending, the square roots of the eigenvalues of the Gram matrix */
static sx_status plain_svd_s(PLAIN_ARGS)
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    int64_t m = l.m, c = l.c, k = m < c ? m : c;
    double *gm = ref_alloc((size_t)(k * k) * sizeof *gm),
           *w = ref_alloc((size_t)k * sizeof(double));
    if (m < c)
        ref_mm(l.a, false, l.a, true, k, c, k, gm);
    else
        ref_mm(l.a, true, l.a, false, k, m, k, gm);
    ref_eig(gm, k, w);
    sx_status st = SX_OK;
    for (int64_t i = 0; i < k && st == SX_OK; i++) {
        double sv = sqrt(w[k - 1 - i]);
        st = ref_near(&l.r[i], &sv, 1, l.tol, "singular value");
    }
    free(gm);
    free(w);
    return ref_la_end(&l, st);
}

static sx_status plain_eigh_w(PLAIN_ARGS) /* the eigenvalues, ascending */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    double *w = ref_alloc((size_t)l.m * sizeof *w);
    ref_eig(l.a, l.m, w);
    sx_status st = ref_near(l.r, w, l.m, l.tol, "eigenvalues (ascending)");
    free(w);
    return ref_la_end(&l, st);
}

static sx_status plain_eigh_v(PLAIN_ARGS) /* v^T v = I, v^T a v = diag(w) with w ascending */
{
    (void)want, (void)mag;
    ref_la l = ref_la_begin(n, x, compare);
    int64_t m = l.m;
    double *w = ref_alloc((size_t)m * sizeof *w), *av = ref_alloc((size_t)(m * m) * sizeof(double));
    double *vav = ref_alloc((size_t)(m * m) * sizeof(double)), *a2 = ref_mat(x[0]), *e = ref_eye(m);
    ref_eig(a2, m, w);
    ref_mm(l.r, true, l.r, false, m, m, m, vav);
    sx_status st = ref_near(vav, e, m * m, l.tol, "v^T v = I");
    ref_mm(l.a, false, l.r, false, m, m, m, av);
    ref_mm(l.r, true, av, false, m, m, m, vav);
    for (int64_t i = 0; i < m; i++)
        e[i * m + i] = w[i];
    if (st == SX_OK)
        st = ref_near(vav, e, m * m, l.tol, "v^T a v = diag(w)");
    free(w);
    free(av);
    free(vav);
    free(a2);
    free(e);
    return ref_la_end(&l, st);
}

/* ---------------------------------------------------------------- mutation */

/* assign(param, value): a mutation, not differentiated; its value is the parameter after the
 * write, i.e. value */
static const shp assign_shapes[] = {{2, {3, 4}}, {0, {0}}};
#define SPEC_assign 2, OS_NONE, 0, 0, REF(kernel_assign, plain_assign)
#define DT_assign                                                                                  \
    EXCLUDED("mutates a parameter: its value depends on evaluation order, no gradient")
static sx_cg_node *sample_assign(GEN_ARGS)
{
    CTX;
    sx_cg_node *p = leaf_kind(c, assign_shapes[v], V_UNIFORM, -2, 2, false, true);
    return sx_cg_assign(g, p, in_fixed(c, assign_shapes[v], V_UNIFORM, -2, 2));
}

/* assign(param, value): the value; the parameter holds it afterwards. */
static sx_status kernel_assign(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_copy_out(x[1], out);
}

static sx_status plain_assign(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    for (int64_t i = 0; i < sx_cg_value(n)->size; i++)
        want[i] = ref_get(x[1], i);
    return ref_same_bits(ref_in(n, 0), x[1], "parameter after assign");
}

/* ---------------------------------------------------------------- optimiser-made ops */

/* seq(x, after) = x, ordered after `after` (a view): the identity in x */
static const shp seq_shapes[] = {{2, {3, 4}}, {0, {0}}};
#define SPEC_seq 2, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_seq, plain_copy)
#define DT_seq GEN(gen_seq, 1)
static sx_cg_node *sample_seq(GEN_ARGS)
{
    CTX;
    sx_cg_node *in2[2];
    in2[0] = in(c, seq_shapes[v], V_UNIFORM, -2, 2);
    in2[1] = in_fixed(c, (shp){1, {3}}, V_UNIFORM, -2, 2);
    return in2[0] && in2[1] ? sx_cg_op_new(g, SX_OP_SEQ, 2, in2, NULL) : NULL;
}

static sx_status kernel_seq(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_copy_out(x[0], out);
}

/* fused(operands...): a short element-wise program (made by the optimiser after
 * differentiation: no gradient rule). Operands have the result's size or one element. */
static sx_fused_instr fmap(int op, int a, double alpha)
{
    sx_fused_instr i = {SX_FUSED_MAP, (uint8_t)op, (int16_t)a, 0, 0, alpha};
    return i;
}

static sx_fused_instr fbin(int kind, int op, int a, int b, int cc)
{
    sx_fused_instr i = {(uint8_t)kind, (uint8_t)op, (int16_t)a, (int16_t)b, (int16_t)cc, 0};
    return i;
}

#define REG(k) (-1 - (k)) /* source: the result of instruction k */
#define SPEC_fused 3, OS_NONE, 0, 0, REF(kernel_fused, plain_fused)
#define DT_fused                                                                                   \
    EXCLUDED("made by element-wise fusion after differentiation; no gradient rule (the modes "     \
             "family meets it through sx_cg_optimise)")
static sx_cg_node *sample_fused(GEN_ARGS)
{
    CTX;
    sx_cg_attr at = sx_cg_attr_default();
    sx_cg_node *ops[3] = {0};
    int n_ops = 0;
    shp out;
    if (v == 0) { /* fma(sin(o0 * o1), o2, o0) over (2,3) */
        out = (shp){2, {2, 3}};
        for (n_ops = 0; n_ops < 3; n_ops++)
            ops[n_ops] = in_fixed(c, out, V_UNIFORM, -2, 2);
        at.prog.ins[0] = fbin(SX_FUSED_BINARY, SX_BINARY_MUL, 0, 1, 0);
        at.prog.ins[1] = fmap(SX_MAP_SIN, REG(0), 0);
        at.prog.ins[2] = fbin(SX_FUSED_FMA, 0, REG(1), 2, 0);
        at.prog.n = 3;
    } else if (v == 1) { /* leaky_relu(tanh(o0 + o1), 0.1), o1 a single element */
        out = (shp){2, {4, 5}};
        ops[n_ops++] = in_fixed(c, out, V_UNIFORM, -2, 2);
        ops[n_ops++] = in_fixed(c, (shp){0, {0}}, V_UNIFORM, -1, 1);
        at.prog.ins[0] = fbin(SX_FUSED_BINARY, SX_BINARY_ADD, 0, 1, 0);
        at.prog.ins[1] = fmap(SX_MAP_TANH, REG(0), 0);
        at.prog.ins[2] = fmap(SX_MAP_LEAKY_RELU, REG(1), 0.1);
        at.prog.n = 3;
    } else { /* sqr(where(o0, exp(o1), o2)), o2 a single element (shape (1)) */
        out = (shp){1, {6}};
        ops[n_ops++] = in_fixed(c, out, V_INT, 0, 1);
        ops[n_ops++] = in_fixed(c, out, V_UNIFORM, -2, 2);
        ops[n_ops++] = in_fixed(c, (shp){1, {1}}, V_UNIFORM, -2, 2);
        at.prog.ins[0] = fmap(SX_MAP_EXP, 1, 0);
        at.prog.ins[1] = fbin(SX_FUSED_WHERE, 0, 0, REG(0), 2);
        at.prog.ins[2] = fmap(SX_MAP_SQR, REG(1), 0);
        at.prog.n = 3;
    }
    for (int i = 0; i < n_ops; i++)
        if (ops[i] == NULL)
            return NULL;
    at.rank = out.rank;
    memcpy(at.shape, out.d, sizeof at.shape);
    return sx_cg_op_new(g, SX_OP_FUSED, n_ops, ops, &at);
}

static sx_status kernel_fused(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_fused_out(&sx_cg_node_attr(n)->prog, sx_cg_node_n_inputs(n), x, out);
}

/* The op of sx_ops.def that a map kernel implements. */
static sx_cg_op ref_op_of_map(int k)
{
    static const sx_cg_op ops[SX_MAP_COUNT] = {
#define SX_MAP_ROW(NAME, ...) [SX_MAP_##NAME] = SX_OP_##NAME,
#include "sx_map.def"
#undef SX_MAP_ROW
    };
    return ops[k];
}

/* The fused program interpreted element by element in double. */
static sx_status plain_fused(PLAIN_ARGS)
{
    (void)compare;
    const sx_fused_prog *p = &sx_cg_node_attr(n)->prog;
    for (int64_t i = 0; i < sx_cg_value(n)->size; i++) {
        double reg[SX_FUSED_MAX] = {0};
#define SRC(s) ((s) >= 0 ? ref_get(x[(s)], x[(s)]->size == 1 ? 0 : i) : reg[-1 - (s)])
        for (int k = 0; k < p->n; k++) {
            const sx_fused_instr *ins = &p->ins[k];
            switch ((sx_fused_kind)ins->kind) {
            case SX_FUSED_MAP:
                reg[k] = ref_map(ref_op_of_map(ins->op), SRC(ins->a), ins->alpha);
                break;
            case SX_FUSED_BINARY:
                reg[k] = ref_binary((sx_binary_op)ins->op, SRC(ins->a), SRC(ins->b));
                break;
            case SX_FUSED_FMA:
                reg[k] = SRC(ins->a) * SRC(ins->b) + SRC(ins->c);
                break;
            case SX_FUSED_WHERE:
                reg[k] = SRC(ins->a) != 0 ? SRC(ins->b) : SRC(ins->c);
                break;
            case SX_FUSED_STORE: /* not in a fused node's program */
                break;
            }
            mag[i] += fabs(reg[k]); /* rounding accumulates along the chain */
        }
#undef SRC
        want[i] = reg[p->n - 1];
    }
    return SX_OK;
}

/* Fused updates: a momentum step as element-wise fusion makes it of its assigns. Operands (p, v,
 * g, lr, mu): v <- mu v + g;  p <- p - lr v, stored into the parameters p and v (operands 0, 1);
 * matmul_update: the same with g = alpha op(a) @ op(b), the program's last operand, after
 * (p, v, lr, mu). Mutations, not differentiated. */
static const shp update_shapes[] = {{2, {3, 4}}, {1, {5}}};

/* The momentum program over (p, v, lr, mu) and g as operand `gi`. */
static sx_fused_prog momentum_prog(int p, int v, int g, int lr, int mu)
{
    sx_fused_prog pr;
    memset(&pr, 0, sizeof pr);
    pr.ins[0] = fbin(SX_FUSED_BINARY, SX_BINARY_MUL, mu, v, 0);
    pr.ins[1] = fbin(SX_FUSED_BINARY, SX_BINARY_ADD, REG(0), g, 0);
    pr.ins[2] = fbin(SX_FUSED_BINARY, SX_BINARY_MUL, lr, REG(1), 0);
    pr.ins[3] = fbin(SX_FUSED_BINARY, SX_BINARY_SUB, p, REG(2), 0);
    pr.ins[4] = (sx_fused_instr){SX_FUSED_STORE, 0, REG(3), 0, 0, 0};
    pr.ins[5] = (sx_fused_instr){SX_FUSED_STORE, 0, REG(1), 1, 0, 0};
    pr.n = 6;
    return pr;
}

#define SPEC_fused_update 2, OS_NONE, 0, 0, REF(kernel_update, plain_update)
#define DT_fused_update EXCLUDED("fused update made by element-wise fusion: mutates parameters")
static sx_cg_node *sample_fused_update(GEN_ARGS)
{
    CTX;
    sx_cg_node *ops[5] = {
        leaf_kind(c, update_shapes[v], V_UNIFORM, -2, 2, false, true),
        leaf_kind(c, update_shapes[v], V_UNIFORM, -1, 1, false, true),
        in_fixed(c, update_shapes[v], V_UNIFORM, -1, 1),
        in_fixed(c, (shp){0, {0}}, V_UNIFORM, 0.01, 0.1),
        in_fixed(c, (shp){0, {0}}, V_UNIFORM, 0.5, 0.9),
    };
    for (int i = 0; i < 5; i++)
        if (ops[i] == NULL)
            return NULL;
    sx_cg_attr at = sx_cg_attr_default();
    at.rank = update_shapes[v].rank;
    memcpy(at.shape, update_shapes[v].d, sizeof at.shape);
    at.ints[0] = 2;
    at.prog = momentum_prog(0, 1, 2, 3, 4);
    return sx_cg_op_new(g, SX_OP_FUSED_UPDATE, 5, ops, &at);
}

/* Variants: another transpose combination, parameters of 37 rows (two blocks of rows) or 3. */
#define SPEC_matmul_update 4, OS_NONE, 0, 0, REF(kernel_update, plain_update)
#define DT_matmul_update EXCLUDED("fused update made by the gemm-update pass: mutates")
static sx_cg_node *sample_matmul_update(GEN_ARGS)
{
    CTX;
    const int64_t m = v % 2 == 0 ? 37 : 3, n = 5, kk = 4;
    const bool ta = v == 1 || v == 2, tb = v >= 2;
    const shp ps = {2, {m, n}};
    sx_cg_attr at = sx_cg_attr_default();
    at.rank = 2;
    at.shape[0] = m, at.shape[1] = n;
    at.ints[0] = 2;
    at.trans_a = ta;
    at.trans_b = tb;
    at.alpha = v == 3 ? -0.5 : 1.0;
    at.prog = momentum_prog(0, 1, 4, 2, 3);
    sx_cg_node *ops[6] = {
        leaf_kind(c, ps, V_UNIFORM, -2, 2, false, true),
        leaf_kind(c, ps, V_UNIFORM, -1, 1, false, true),
        in_fixed(c, (shp){0, {0}}, V_UNIFORM, 0.01, 0.1),
        in_fixed(c, (shp){0, {0}}, V_UNIFORM, 0.5, 0.9),
        in_fixed(c, ta ? (shp){2, {kk, m}} : (shp){2, {m, kk}}, V_UNIFORM, -1, 1),
        in_fixed(c, tb ? (shp){2, {n, kk}} : (shp){2, {kk, n}}, V_UNIFORM, -1, 1),
    };
    for (int i = 0; i < 6; i++)
        if (ops[i] == NULL)
            return NULL;
    return sx_cg_op_new(g, SX_OP_MATMUL_UPDATE, 6, ops, &at);
}

/* The program's operands of an update node from its inputs' values before the step (x):
 * matmul_update's product computed whole into *gm (by the kernel, or in double when `plain`),
 * freed by the caller. Returns how many. */
static int ref_update_operands(const sx_cg_node *n, const sx_tensor *const *x, bool plain,
                               const sx_tensor **ops, sx_tensor **gm)
{
    const sx_cg_attr *at = sx_cg_node_attr(n);
    int k = sx_cg_node_n_inputs(n);
    *gm = NULL;
    for (int i = 0; i < k; i++)
        ops[i] = x[i];
    if (sx_cg_node_op(n) != SX_OP_MATMUL_UPDATE)
        return k;
    const sx_tensor *a = x[k - 2], *b = x[k - 1];
    *gm = ref_zeros(plain ? SX_F64 : x[0]->dtype, 2, x[0]->shape);
    if (!plain)
        (void)sx_tensor_matmul_out(a, b, at->trans_a, at->trans_b, at->alpha, 0.0, *gm);
    int64_t m = x[0]->shape[0], cols = x[0]->shape[1];
    int64_t kk = at->trans_a ? a->shape[0] : a->shape[1];
    for (int64_t i = 0; plain && i < m; i++) /* in double */
        for (int64_t j = 0; j < cols; j++) {
            double s = 0;
            for (int64_t l = 0; l < kk; l++)
                s += ref_get(a, at->trans_a ? l * a->shape[1] + i : i * a->shape[1] + l) *
                     ref_get(b, at->trans_b ? j * b->shape[1] + l : l * b->shape[1] + j);
            sx_tensor_set(*gm, i * cols + j, at->alpha * s);
        }
    ops[k - 2] = *gm;
    return k - 1;
}

/* The kernel on copies of the values before the step: the parameter it writes is the result,
 * and the states the node wrote must equal the copies', bit for bit. */
static sx_status kernel_update(KERNEL_ARGS)
{
    (void)s;
    const sx_tensor *ops[8];
    sx_tensor *gm, *w[8] = {NULL};
    const int n_ops = ref_update_operands(n, x, false, ops, &gm);
    const int k = (int)sx_cg_node_attr(n)->ints[0];
    for (int i = 0; i < n_ops; i++)
        w[i] = ref_clone(ops[i]);
    sx_status rc = sx_tensor_fused_update(&sx_cg_node_attr(n)->prog, n_ops, w);
    if (rc == SX_OK)
        rc = sx_tensor_copy_out(w[0], out);
    for (int i = 1; i < k && rc == SX_OK; i++)
        rc = ref_same_bits(ref_in(n, i), w[i], "a state");
    for (int i = 0; i < n_ops; i++)
        sx_tensor_free(w[i]);
    sx_tensor_free(gm);
    return rc;
}

/* The program element by element in double: what it stores into operand 0. */
static sx_status plain_update(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *ops[8];
    sx_tensor *gm;
    ref_update_operands(n, x, true, ops, &gm);
    const sx_fused_prog *p = &sx_cg_node_attr(n)->prog;
    for (int64_t i = 0; i < sx_cg_value(n)->size; i++) {
        double reg[SX_FUSED_MAX] = {0};
#define SRC(s) ((s) >= 0 ? ref_get(ops[(s)], ops[(s)]->size == 1 ? 0 : i) : reg[-1 - (s)])
        for (int k = 0; k < p->n; k++) {
            const sx_fused_instr *ins = &p->ins[k];
            if (ins->kind == SX_FUSED_BINARY)
                reg[k] = ref_binary((sx_binary_op)ins->op, SRC(ins->a), SRC(ins->b));
            else if (ins->kind == SX_FUSED_STORE && ins->b == 0)
                want[i] = SRC(ins->a);
            mag[i] += fabs(reg[k]);
        }
#undef SRC
    }
    sx_tensor_free(gm);
    return SX_OK;
}

/* ---------------------------------------------------------------- normalisation */

/* Batch norm's cases (the per-channel axes): x (..., c) a matrix, an NHWC batch, one channel;
 * the statistics an independent input with a positive variance row */
static const shp bn_cases[] = {{2, {5, 3}}, {4, {2, 3, 2, 4}}, {2, {4, 1}}};
#define N_BN 3

static shp bn_rows(int v)
{
    return (shp){2, {2, bn_cases[v].d[bn_cases[v].rank - 1]}};
}

static shp bn_channels(int v)
{
    return (shp){1, {bn_cases[v].d[bn_cases[v].rank - 1]}};
}

static sx_norm_axes bn_axes(int v)
{
    return (sx_norm_axes){0, 1, bn_cases[v].d[bn_cases[v].rank - 1]};
}

/* The group kernels' cases: x and its view: layer norm over one and two trailing axes, group
 * norm of NHWC x (2 groups), instance norm (one channel per group), group norm without affine
 * (norm only); batch norm's cases follow them (variants N_NORM - 1 + w or N_NORM + w). */
static const struct {
    shp x;
    sx_norm_axes ax;
    bool affine;
} norm_cases[] = {
    {{2, {3, 4}}, {1, 1, 1}, true},        {{3, {2, 3, 2}}, {1, 2, 1}, true},
    {{4, {2, 2, 2, 4}}, {1, 1, 2}, true},  {{3, {2, 3, 3}}, {1, 1, 3}, true},
    {{4, {2, 2, 2, 4}}, {1, 1, 2}, false},
};
#define N_NORM 5

static shp norm_rows(int v)
{
    shp x = norm_cases[v].x;
    int64_t n = 1;
    for (int i = 0; i < norm_cases[v].ax.lead; i++)
        n *= x.d[i];
    return (shp){2, {2, n * norm_cases[v].ax.groups}};
}

static shp norm_tail(int v)
{
    shp x = norm_cases[v].x, t = {norm_cases[v].ax.tail, {0}};
    for (int i = 0; i < t.rank; i++)
        t.d[i] = x.d[x.rank - t.rank + i];
    return t;
}

#define SPEC_norm_stats N_NORM - 1 + N_BN, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_norm_stats, plain_norm)
static sx_cg_node *sample_norm_stats(GEN_ARGS)
{
    CTX;
    if (v >= N_NORM - 1) {
        int w = v - (N_NORM - 1);
        return sx_cg_batch_norm_stats(g, in(c, bn_cases[w], V_UNIFORM, -2, 2));
    }
    return sx_cg_norm_stats(g, in(c, norm_cases[v].x, V_UNIFORM, -2, 2), norm_cases[v].ax);
}
#define DT_norm_stats GEN(gen_norm, 1)

/* batch norm's cases, then the second of them with a residual added (sx_cg_norm_res) */
static sx_cg_node *sample_batch_norm(sx_cg_graph *g, ctx *c, int v)
{
    int w = v == N_BN ? 1 : v;
    sx_cg_node *x = in(c, bn_cases[w], V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, bn_rows(w), V_UNIFORM, 0.3, 1.5);
    sx_cg_node *gamma = in(c, bn_channels(w), V_UNIFORM, 0.5, 1.5);
    sx_cg_node *beta = in(c, bn_channels(w), V_UNIFORM, -1, 1);
    sx_cg_node *res = v == N_BN ? in(c, bn_cases[w], V_UNIFORM, -2, 2) : NULL;
    return sx_cg_norm_res(g, x, st, gamma, beta, res, bn_axes(w), v == 1 ? 1e-5 : 0.1);
}

#define SPEC_norm N_NORM + N_BN + 1, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_norm, plain_norm)
static sx_cg_node *sample_norm(GEN_ARGS)
{
    CTX;
    if (v >= N_NORM)
        return sample_batch_norm(g, c, v - N_NORM);
    sx_cg_node *x = in(c, norm_cases[v].x, V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, norm_rows(v), V_UNIFORM, 0.3, 1.5);
    sx_cg_node *gamma = NULL, *beta = NULL;
    if (norm_cases[v].affine) {
        gamma = in(c, norm_tail(v), V_UNIFORM, 0.5, 1.5);
        beta = in(c, norm_tail(v), V_UNIFORM, -1, 1);
    }
    return sx_cg_norm(g, x, st, gamma, beta, norm_cases[v].ax, v == 1 ? 1e-5 : 0.1);
}
#define DT_norm GEN(gen_norm, 2)

/* batch norm's cases, a relu mask in the second */
#define SPEC_norm_sums N_NORM - 1 + N_BN, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_norm_sums, plain_norm)
static sx_cg_node *sample_norm_sums(GEN_ARGS)
{
    CTX;
    if (v >= N_NORM - 1) {
        int w = v - (N_NORM - 1);
        sx_cg_node *x = in(c, bn_cases[w], V_UNIFORM, -2, 2);
        sx_cg_node *st = in(c, bn_rows(w), V_UNIFORM, -1, 1);
        sx_cg_node *dy = in(c, bn_cases[w], V_UNIFORM, -1, 1);
        sx_cg_node *y = w == 1 ? in(c, bn_cases[w], V_UNIFORM, -1, 1) : NULL;
        return sx_cg_norm_sums_mask(g, x, st, dy, y, bn_axes(w));
    }
    sx_cg_node *x = in(c, norm_cases[v].x, V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, norm_rows(v), V_UNIFORM, -1, 1);
    return sx_cg_norm_sums(g, x, st, in(c, norm_cases[v].x, V_UNIFORM, -1, 1), norm_cases[v].ax);
}
#define DT_norm_sums GEN(gen_norm, 1)

/* dx through batch norm with its own statistics: every input independent (the sums too), a
 * relu mask y in the second case */
#define SPEC_norm_dx N_BN, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_norm_dx, plain_norm)
static sx_cg_node *sample_norm_dx(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, bn_cases[v], V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, bn_rows(v), V_UNIFORM, 0.3, 1.5);
    sx_cg_node *gamma = in(c, bn_channels(v), V_UNIFORM, 0.5, 1.5);
    sx_cg_node *dy = in(c, bn_cases[v], V_UNIFORM, -1, 1);
    sx_cg_node *sums = in(c, bn_rows(v), V_UNIFORM, -1, 1);
    sx_cg_node *y = v == 1 ? in(c, bn_cases[v], V_UNIFORM, -1, 1) : NULL;
    return sx_cg_norm_dx(g, x, st, gamma, dy, sums, y, bn_axes(v), v == 1 ? 1e-5 : 0.1);
}
#define DT_norm_dx GEN(gen_norm, 2)

/* The view of a norm op's attributes (attr.norm). */
static sx_norm_axes norm_axes_of(const sx_cg_node *n)
{
    const sx_cg_norm_attr *a = &sx_cg_node_attr(n)->norm;
    return (sx_norm_axes){(int)a->lead, (int)a->tail, a->groups};
}

/* the per-channel axes (batch norm) of the node's x */
static bool norm_per_channel(const sx_cg_node *n)
{
    const sx_cg_norm_attr *a = &sx_cg_node_attr(n)->norm;
    const sx_cg_node *x = sx_cg_node_input(n, 0);
    int r = sx_cg_node_rank(x);
    return a->lead == 0 && a->tail == 1 && r >= 1 && a->groups == sx_cg_node_shape(x)[r - 1];
}

static sx_status kernel_norm_stats(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_norm_stats_out(x[0], norm_axes_of(n), out);
}

/* a residual or relu: the fused batch-norm kernel; else the public entry point */
static sx_status kernel_norm(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_norm_attr *a = &sx_cg_node_attr(n)->norm;
    if (sx_cg_node_n_inputs(n) == 5 || a->relu != 0)
        return sx_tensor_batch_norm_res_ws(x[0], x[1], x[2], x[3], a->eps,
                                           sx_cg_node_n_inputs(n) == 5 ? x[4] : NULL, a->relu != 0,
                                           out, NULL, 0);
    bool affine = sx_cg_node_n_inputs(n) == 4;
    return sx_tensor_norm_out(x[0], x[1], affine ? x[2] : NULL, affine ? x[3] : NULL,
                              norm_axes_of(n), a->eps, out);
}

static sx_status kernel_norm_sums(KERNEL_ARGS)
{
    (void)s;
    if (sx_cg_node_n_inputs(n) == 4)
        return sx_tensor_batch_norm_sums_mask_ws(x[0], x[1], x[2], x[3], out, NULL, 0);
    return sx_tensor_norm_sums_out(x[0], x[1], x[2], norm_axes_of(n), out);
}

static sx_status kernel_norm_dx(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_batch_norm_dx_ws(x[0], x[1], x[2], x[3], x[4],
                                      sx_cg_node_n_inputs(n) == 6 ? x[5] : NULL,
                                      sx_cg_node_attr(n)->norm.eps, out, NULL, 0);
}

/* Batch norm over the last axis of x (m, c), in double: the statistics (two passes), the
 * normalisation, the backward sums or the one-pass dx (by the node's op). */
static sx_status plain_batch_norm(PLAIN_ARGS)
{
    (void)compare;
    sx_cg_op op = sx_cg_node_op(n);
    double eps = sx_cg_node_attr(n)->norm.eps;
    int64_t c = x[0]->shape[x[0]->rank - 1], m = x[0]->size / c;
    for (int64_t j = 0; j < c; j++) {
        double s = 0, q = 0, qm = 0;
        for (int64_t r = 0; r < m; r++)
            s += ref_get(x[0], r * c + j);
        double mean = m > 0 ? s / (double)m : 0;
        if (op == SX_OP_NORM_STATS) {
            for (int64_t r = 0; r < m; r++) {
                double d = ref_get(x[0], r * c + j) - mean;
                q += d * d;
                qm += fabs(ref_get(x[0], r * c + j)) * fabs(ref_get(x[0], r * c + j));
            }
            want[j] = mean, want[c + j] = m > 0 ? q / (double)m : 0;
            mag[j] = 1 + fabs(mean), mag[c + j] = m > 0 ? qm / (double)m : 0;
        } else if (op == SX_OP_NORM_DX) {
            /* dx = md gamma r + (x - mean) k1 + k0, k1 = -gamma r^3 S1 / m, k0 = -gamma r S0 / m */
            double r = 1 / sqrt(ref_get(x[1], c + j) + eps), gm = ref_get(x[2], j);
            double k1 = -gm * r * r * r * ref_get(x[4], c + j) / (double)m;
            double k0 = -gm * r * ref_get(x[4], j) / (double)m;
            for (int64_t row = 0; row < m; row++) {
                int64_t i = row * c + j;
                double d = ref_get(x[3], i), xm = ref_get(x[0], i) - ref_get(x[1], j);
                if (sx_cg_node_n_inputs(n) == 6 && !(ref_get(x[5], i) > 0))
                    d = 0;
                want[i] = d * gm * r + xm * k1 + k0;
                mag[i] = fabs(d * gm * r) +
                         (fabs(ref_get(x[0], i)) + fabs(ref_get(x[1], j))) * fabs(k1) + fabs(k0);
            }
        } else if (op == SX_OP_NORM) {
            double a = ref_get(x[2], j) / sqrt(ref_get(x[1], c + j) + eps);
            for (int64_t r = 0; r < m; r++) {
                double v = ref_get(x[0], r * c + j);
                double res = sx_cg_node_n_inputs(n) == 5 ? ref_get(x[4], r * c + j) : 0;
                want[r * c + j] = (v - ref_get(x[1], j)) * a + ref_get(x[3], j) + res;
                mag[r * c + j] = (fabs(v) + fabs(ref_get(x[1], j))) * fabs(a) +
                                 fabs(ref_get(x[3], j)) + fabs(res);
                if (sx_cg_node_attr(n)->norm.relu != 0 && want[r * c + j] < 0)
                    want[r * c + j] = 0;
            }
        } else {
            double s0 = 0, s1 = 0, m0 = 0, m1 = 0;
            for (int64_t r = 0; r < m; r++) {
                double g = ref_get(x[2], r * c + j),
                       d = ref_get(x[0], r * c + j) - ref_get(x[1], j);
                if (sx_cg_node_n_inputs(n) == 4 && !(ref_get(x[3], r * c + j) > 0))
                    g = 0;
                s0 += g, s1 += g * d, m0 += fabs(g), m1 += fabs(g * d);
            }
            want[j] = s0, want[c + j] = s1, mag[j] = m0, mag[c + j] = m1;
        }
    }
    return SX_OK;
}

/* Group norm by its definition, in double: x as (n, s, c) with c in G groups of k; group
 * q = (i, g) holds x[i, t, g k + j] for every t < s, j < k. The statistics (two passes), the
 * normalisation (with gamma, beta when there are 4 inputs) or the backward sums (by the op). */
static sx_status plain_group_norm(PLAIN_ARGS)
{
    (void)compare;
    sx_cg_op op = sx_cg_node_op(n);
    const sx_cg_attr *at = sx_cg_node_attr(n);
    const sx_tensor *t = x[0];
    bool affine = sx_cg_node_n_inputs(n) == 4;
    int lead = (int)at->norm.lead, tail = (int)at->norm.tail;
    int64_t G = at->norm.groups, nb = 1, s = 1, c = 1;
    for (int i = 0; i < t->rank; i++) {
        if (i < lead)
            nb *= t->shape[i];
        else if (i >= t->rank - tail)
            c *= t->shape[i];
        else
            s *= t->shape[i];
    }
    int64_t k = c / G, p = nb * G, m = s * k;
    for (int64_t i = 0; i < nb; i++)
        for (int64_t g = 0; g < G; g++) {
            int64_t q = i * G + g;
            double sum = 0, ss = 0, sa = 0, s0 = 0, s1 = 0, m0 = 0, m1 = 0;
            for (int64_t u = 0; u < s; u++)
                for (int64_t j = 0; j < k; j++)
                    sum += ref_get(t, (i * s + u) * c + g * k + j);
            double mean = sum / (double)m;
            for (int64_t u = 0; u < s; u++)
                for (int64_t j = 0; j < k; j++) {
                    int64_t e = (i * s + u) * c + g * k + j;
                    double d = ref_get(t, e) - mean;
                    ss += d * d, sa += ref_get(t, e) * ref_get(t, e);
                    if (op == SX_OP_NORM_SUMS) {
                        double gy = ref_get(x[2], e), dm = ref_get(t, e) - ref_get(x[1], q);
                        s0 += gy, s1 += gy * dm, m0 += fabs(gy), m1 += fabs(gy * dm);
                    } else if (op == SX_OP_NORM) {
                        int64_t ch = g * k + j;
                        double r = 1 / sqrt(ref_get(x[1], p + q) + at->norm.eps);
                        double v = (ref_get(t, e) - ref_get(x[1], q)) * r;
                        double vm = (fabs(ref_get(t, e)) + fabs(ref_get(x[1], q))) * r;
                        want[e] = affine ? v * ref_get(x[2], ch) + ref_get(x[3], ch) : v;
                        mag[e] =
                            affine ? vm * fabs(ref_get(x[2], ch)) + fabs(ref_get(x[3], ch)) : vm;
                    }
                }
            if (op == SX_OP_NORM_STATS) {
                want[q] = mean, want[p + q] = ss / (double)m;
                mag[q] = 1 + fabs(mean), mag[p + q] = sa / (double)m;
            } else if (op == SX_OP_NORM_SUMS) {
                want[q] = s0, want[p + q] = s1, mag[q] = m0, mag[p + q] = m1;
            }
        }
    return SX_OK;
}

/* batch norm's geometry by its own reference (the fused forms too), the rest as groups */
static sx_status plain_norm(PLAIN_ARGS)
{
    (void)compare;
    return norm_per_channel(n) ? plain_batch_norm(n, x, want, mag, compare)
                               : plain_group_norm(n, x, want, mag, compare);
}

/* ---------------------------------------------------------------- embedding */

static sx_status kernel_embedding(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_embedding_out(x[0], x[1], sx_cg_node_attr(n)->embedding.pad, out);
}

static sx_status kernel_embedding_backward(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_embedding_backward_out(x[0], x[1], sx_cg_node_attr(n)->embedding.pad, out);
}

/* Row i of the indices reads / adds to table row idx[i]; the padding index reads zeros and adds
 * nothing. */
static sx_status plain_embedding(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    const int64_t d = y->shape[y->rank - 1], pad = sx_cg_node_attr(n)->embedding.pad;
    const bool fwd = sx_cg_node_op(n) == SX_OP_EMBEDDING;
    for (int64_t i = 0; i < x[1]->size; i++) {
        int64_t j = (int64_t)ref_get(x[1], i);
        for (int64_t k = 0; k < d; k++) {
            if (fwd) {
                want[i * d + k] = j == pad ? 0 : ref_get(x[0], j * d + k);
            } else if (j != pad) {
                want[j * d + k] += ref_get(x[0], i * d + k);
                mag[j * d + k] += fabs(ref_get(x[0], i * d + k));
            }
        }
    }
    return SX_OK;
}

/* embedding(table, idx, pad): rows of a (vocab, dim) table at indices of any rank (repeats
 * included, some rows never read), zeros at the padding index; embedding_backward(g, idx, pad,
 * vocab): its adjoint, repeated indices accumulating, the padding row zero */
static const struct {
    shp idx;
    int64_t vocab, dim, pad;
} embedding_cases[] = {
    {{2, {2, 3}}, 5, 3, -1}, {{1, {7}}, 4, 2, 1}, {{3, {2, 2, 2}}, 3, 4, 0}, {{1, {0}}, 3, 2, 2}};
#define SPEC_embedding 4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_embedding, plain_embedding)
#define DT_embedding SAMPLE(2)
static sx_cg_node *sample_embedding(GEN_ARGS)
{
    CTX;
    shp ts = {2, {embedding_cases[v].vocab, embedding_cases[v].dim}};
    sx_cg_node *table = in(c, ts, V_UNIFORM, -2, 2);
    sx_cg_node *idx =
        in_fixed(c, embedding_cases[v].idx, V_INT, 0, (double)embedding_cases[v].vocab - 1);
    return sx_cg_embedding(g, table, idx, embedding_cases[v].pad);
}

#define SPEC_embedding_backward                                                                    \
    4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_embedding_backward, plain_embedding)
#define DT_embedding_backward SAMPLE(2)
static sx_cg_node *sample_embedding_backward(GEN_ARGS)
{
    CTX;
    shp gs = embedding_cases[v].idx;
    gs.d[gs.rank++] = embedding_cases[v].dim;
    sx_cg_node *grad = in(c, gs, V_UNIFORM, -2, 2);
    sx_cg_node *idx =
        in_fixed(c, embedding_cases[v].idx, V_INT, 0, (double)embedding_cases[v].vocab - 1);
    return sx_cg_embedding_backward(g, grad, idx, embedding_cases[v].pad, embedding_cases[v].vocab);
}

/* ---------------------------------------------------------------- fused attention */

/* q (bh, tq, dh), k and v (bh, tk, dh): one head and several, T = 1, keys beyond the queries
 * (causal from the last query's diagonal), odd dh, and lengths across a 64-row block. The
 * difftest composes the variants whose nodes fit its size (0 to 3). */
static const struct {
    int64_t bh, tq, tk, dh;
    bool causal;
    double scale; /* 0: 1 / sqrt(dh) */
} attn_cases[] = {{2, 5, 5, 2, false, 0},  {1, 4, 4, 3, true, 0},   {3, 1, 1, 2, true, 0},
                  {1, 3, 6, 3, true, 0.7}, {1, 70, 70, 2, true, 0}, {2, 66, 66, 3, false, 0}};

static double attn_scale(int v)
{
    return attn_cases[v].scale != 0 ? attn_cases[v].scale : 1 / sqrt((double)attn_cases[v].dh);
}

static void attn_leaves(ctx *c, int v, sx_cg_node **q, sx_cg_node **k, sx_cg_node **vv)
{
    const int64_t bh = attn_cases[v].bh, dh = attn_cases[v].dh;
    *q = in(c, (shp){3, {bh, attn_cases[v].tq, dh}}, V_UNIFORM, -1.5, 1.5);
    *k = in(c, (shp){3, {bh, attn_cases[v].tk, dh}}, V_UNIFORM, -1.5, 1.5);
    *vv = in(c, (shp){3, {bh, attn_cases[v].tk, dh}}, V_UNIFORM, -1, 1);
}

#define SPEC_attention 6, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_attention, plain_attention)
#define DT_attention SAMPLE(1)
static sx_cg_node *sample_attention(GEN_ARGS)
{
    CTX;
    sx_cg_node *q, *k, *vv;
    attn_leaves(c, v, &q, &k, &vv);
    return sx_cg_attention(g, q, k, vv, attn_scale(v), attn_cases[v].causal);
}

/* y (o and lse) and dy are free leaves: the op is a function of all five inputs. */
#define SPEC_attention_backward                                                                    \
    6, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_attention_backward, plain_attention)
#define DT_attention_backward SAMPLE(1)
static sx_cg_node *sample_attention_backward(GEN_ARGS)
{
    CTX;
    sx_cg_node *q, *k, *vv;
    attn_leaves(c, v, &q, &k, &vv);
    shp ys = {3, {attn_cases[v].bh, attn_cases[v].tq, attn_cases[v].dh + 1}};
    sx_cg_node *y = in(c, ys, V_UNIFORM, -1, 1), *dy = in(c, ys, V_UNIFORM, -1, 1);
    return sx_cg_attention_backward(g, q, k, vv, y, dy, attn_scale(v), attn_cases[v].causal);
}

static sx_status kernel_attention(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    return sx_tensor_attention_out(x[0], x[1], x[2], a->attention.scale, a->attention.causal != 0,
                                   out);
}

static sx_status kernel_attention_backward(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    return sx_tensor_attention_backward_out(x[0], x[1], x[2], x[3], x[4], a->attention.scale,
                                            a->attention.causal != 0, out);
}

/* The plain composition in double, per head: S = scale q k^T (-inf where causal hides a key),
 * P = softmax(S) (forward) or exp(S - lse) with lse from y (backward); forward o = P v and
 * lse = log sum exp S; backward D = rowsum(dO o) - dlse, dS = P (dP - D) with dP = dO v^T,
 * dq = scale dS k, dk = scale dS^T q, dv = P^T dO. mag bounds each sum by its terms' sizes. */
static sx_status plain_attention(PLAIN_ARGS)
{
    (void)compare;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    const bool bw = sx_cg_node_op(n) == SX_OP_ATTENTION_BACKWARD;
    const int64_t bh = x[0]->shape[0], tq = x[0]->shape[1], tk = x[1]->shape[1],
                  dh = x[0]->shape[2];
    double *S = ref_alloc(sizeof(double) * (size_t)(tq * tk)),
           *A = ref_alloc(sizeof(double) * (size_t)(tq * tk));
    double *P = ref_alloc(sizeof(double) * (size_t)(tq * tk)),
           *dS = ref_alloc(sizeof(double) * (size_t)(tq * tk));
    double *dSa = ref_alloc(sizeof(double) * (size_t)(tq * tk));
    for (int64_t h = 0; h < bh; h++) {
#define Q(i, d) ref_get(x[0], (h * tq + (i)) * dh + (d))
#define K(j, d) ref_get(x[1], (h * tk + (j)) * dh + (d))
#define V(j, d) ref_get(x[2], (h * tk + (j)) * dh + (d))
        for (int64_t i = 0; i < tq; i++)
            for (int64_t j = 0; j < tk; j++) {
                double acc = 0, am = 0;
                for (int64_t d = 0; d < dh; d++) {
                    acc += Q(i, d) * K(j, d);
                    am += fabs(Q(i, d) * K(j, d));
                }
                const bool hidden = a->attention.causal != 0 && j > i + tk - tq;
                S[i * tk + j] = hidden ? -HUGE_VAL : a->alpha * acc;
                A[i * tk + j] = fabs(a->alpha) * am;
            }
        for (int64_t i = 0; i < tq; i++) {
            double m = -HUGE_VAL, sum = 0, smag = 0;
            for (int64_t j = 0; j < tk; j++) {
                m = fmax(m, S[i * tk + j]);
                smag = fmax(smag, A[i * tk + j]);
            }
            for (int64_t j = 0; j < tk; j++)
                sum += exp(S[i * tk + j] - m);
            const double lse = m + log(sum);
            for (int64_t j = 0; j < tk; j++)
                P[i * tk + j] =
                    bw ? exp(S[i * tk + j] - ref_get(x[3], (h * tq + i) * (dh + 1) + dh))
                       : exp(S[i * tk + j] - lse);
            if (bw)
                continue;
            double *w = want + (h * tq + i) * (dh + 1), *mg = mag + (h * tq + i) * (dh + 1);
            for (int64_t d = 0; d < dh; d++) {
                double o = 0, om = 0;
                for (int64_t j = 0; j < tk; j++) {
                    o += P[i * tk + j] * V(j, d);
                    om += P[i * tk + j] * fabs(V(j, d));
                }
                w[d] = o;
                mg[d] = om * (1 + smag);
            }
            w[dh] = lse;
            mg[dh] = fabs(m) + smag + 1;
        }
        if (!bw)
            continue;
#define Y(i, d) ref_get(x[3], (h * tq + (i)) * (dh + 1) + (d))
#define DY(i, d) ref_get(x[4], (h * tq + (i)) * (dh + 1) + (d))
        double *wq = want + h * (tq + 2 * tk) * dh, *wk = wq + tq * dh, *wv = wk + tk * dh;
        double *mq = mag + h * (tq + 2 * tk) * dh, *mk = mq + tq * dh, *mv = mk + tk * dh;
        for (int64_t i = 0; i < tq; i++) {
            double D = -DY(i, dh), Dm = fabs(DY(i, dh));
            for (int64_t d = 0; d < dh; d++) {
                D += DY(i, d) * Y(i, d);
                Dm += fabs(DY(i, d) * Y(i, d));
            }
            for (int64_t j = 0; j < tk; j++) {
                double dp = 0, dpm = 0;
                for (int64_t d = 0; d < dh; d++) {
                    dp += DY(i, d) * V(j, d);
                    dpm += fabs(DY(i, d) * V(j, d));
                }
                const double p = P[i * tk + j];
                dS[i * tk + j] = a->alpha * p * (dp - D);
                dSa[i * tk + j] = fabs(a->alpha) * p * (dpm + Dm) * (1 + A[i * tk + j]);
            }
        }
        for (int64_t i = 0; i < tq; i++)
            for (int64_t j = 0; j < tk; j++)
                for (int64_t d = 0; d < dh; d++) {
                    wq[i * dh + d] += dS[i * tk + j] * K(j, d);
                    mq[i * dh + d] += dSa[i * tk + j] * fabs(K(j, d));
                    wk[j * dh + d] += dS[i * tk + j] * Q(i, d);
                    mk[j * dh + d] += dSa[i * tk + j] * fabs(Q(i, d));
                    wv[j * dh + d] += P[i * tk + j] * DY(i, d);
                    mv[j * dh + d] += P[i * tk + j] * (1 + A[i * tk + j]) * fabs(DY(i, d));
                }
#undef Q
#undef K
#undef V
#undef Y
#undef DY
    }
    free(S);
    free(A);
    free(P);
    free(dS);
    free(dSa);
    return SX_OK;
}

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
