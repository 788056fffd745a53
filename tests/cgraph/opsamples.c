/* opsamples.c: the sample generators of opsamples.h, one per row of sx_ops.def. Values are drawn
 * in double from the caller's generator and rounded to the sample's dtype, so f32 and f64
 * samples of one seed hold the same numbers. Each generator is preceded by its SPEC_<name>:
 * n_variants, how the op is differentiable, and the finite-difference step and tolerance (f64);
 * and by its DT_<name>, the op's row in the differential tester (difftest.c, which includes this
 * file and spells the row's macros): the generator that composes the op into random programs
 * (difftest.c's gen_*), its weight and its domain, or EXCLUDED(reason). A row without its SPEC_
 * or DT_ does not compile. The unary element-wise rows have no DT_: their tester row comes from
 * their sx_map.def row (its domain column).
 * Test files include this file (#include "opsamples.c"): one executable per test file. */
#include "opsamples.h"

#include <math.h>
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

/* ---------------------------------------------------------------- leaves as samples */

#define GEN_ARGS sx_cg_graph *g, sx_dtype dt, sx_rng *rng, int v, os_sample *s
#define CTX ctx c_ = {g, dt, rng, s}, *c = &c_

static const shp leaf_shapes[] = {{0, {0}}, {1, {5}}, {2, {2, 3}}};

#define SPEC_const 3, OS_NONE, 0, 0
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
#define SPEC_input 3, OS_SMOOTH, 1e-6, 1e-6
#define DT_input LEAF
static sx_cg_node *sample_input(GEN_ARGS)
{
    CTX;
    return in(c, leaf_shapes[v], V_UNIFORM, -2, 2);
}

#define SPEC_param 3, OS_SMOOTH, 1e-6, 1e-6
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
/* ---- issue 20's activations (optim20) */
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
/* ---- end of issue 20's activations */

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

#define SPEC_fma N_TERNARY, OS_SMOOTH, 1e-6, 1e-6
#define DT_fma gen_fma, 3, DOMB_ANY, NULL
static sx_cg_node *sample_fma(GEN_ARGS)
{
    CTX;
    sx_cg_node *a = in(c, ternary_shapes[v][0], V_UNIFORM, -2, 2);
    sx_cg_node *b = in(c, ternary_shapes[v][1], V_UNIFORM, -2, 2);
    return sx_cg_fma(g, a, b, in(c, ternary_shapes[v][2], V_UNIFORM, -2, 2));
}

/* where(cond, a, b): linear in a and b; the condition (0/1) is not differentiated */
#define SPEC_where N_TERNARY, OS_SMOOTH, 1e-6, 1e-6
#define DT_where gen_where, 3, DOMB_WHERE, NULL
static sx_cg_node *sample_where(GEN_ARGS)
{
    CTX;
    sx_cg_node *cond = in_fixed(c, ternary_shapes[v][0], V_INT, 0, 1);
    sx_cg_node *a = in(c, ternary_shapes[v][1], V_UNIFORM, -2, 2);
    return sx_cg_where(g, cond, a, in(c, ternary_shapes[v][2], V_UNIFORM, -2, 2));
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

#define SPEC_sum N_FOLD, OS_SMOOTH, 1e-6, 1e-6
#define DT_sum FOLD(DOMF_NONE)
FOLD_SAMPLE(sum, V_UNIFORM, -2, 2)
#define SPEC_mean N_FOLD, OS_SMOOTH, 1e-6, 1e-6
#define DT_mean FOLD(DOMF_NONE)
FOLD_SAMPLE(mean, V_UNIFORM, -2, 2)
#define SPEC_prod N_FOLD, OS_SMOOTH, 1e-6, 1e-6
#define DT_prod FOLD(DOMF_NONE)
FOLD_SAMPLE(prod, V_AWAY, 0.6, 1.4) /* no zeros; products stay near 1 */
#define SPEC_reduce_max N_FOLD, OS_PIECEWISE, 1e-6, 1e-6
#define DT_reduce_max FOLD(DOMF_MAX)
FOLD_SAMPLE(reduce_max, V_DISTINCT, -2, 2)
#define SPEC_reduce_min N_FOLD, OS_PIECEWISE, 1e-6, 1e-6
#define DT_reduce_min FOLD(DOMF_MAX)
FOLD_SAMPLE(reduce_min, V_DISTINCT, -2, 2)
#define SPEC_argmax N_FOLD, OS_NONE, 1e-6, 0
#define DT_argmax FOLD(DOMF_MAX)
FOLD_SAMPLE(argmax, V_DISTINCT, -2, 2)
#define SPEC_argmin N_FOLD, OS_NONE, 1e-6, 0
#define DT_argmin FOLD(DOMF_MAX)
FOLD_SAMPLE(argmin, V_DISTINCT, -2, 2)
#define SPEC_l1norm N_FOLD, OS_PIECEWISE, 1e-6, 1e-6
#define DT_l1norm FOLD(DOMF_L1)
FOLD_SAMPLE(l1norm, V_AWAY, 0.1, 2)
#define SPEC_l2norm N_FOLD, OS_SMOOTH, 1e-6, 1e-6
#define DT_l2norm FOLD(DOMF_L2)
FOLD_SAMPLE(l2norm, V_AWAY, 0.1, 2) /* with no axis it is |x|: away from 0 */
#define SPEC_logsumexp N_FOLD, OS_SMOOTH, 1e-6, 1e-6
#define DT_logsumexp FOLD(DOMF_NONE)
FOLD_SAMPLE(logsumexp, V_UNIFORM, -3, 3)

/* ---------------------------------------------------------------- layout (all linear) */

static const struct {
    shp x;
    int64_t reps[SX_MAX_RANK];
} repeat_cases[] = {
    {{2, {2, 3}}, {2, 1}}, {{2, {2, 3}}, {1, 3}},       {{1, {3}}, {2}},
    {{0, {0}}, {0}},       {{3, {2, 1, 2}}, {1, 3, 2}}, {{2, {2, 2}}, {0, 2}},
};
#define N_REPEAT 6

#define SPEC_repeat N_REPEAT, OS_SMOOTH, 1e-6, 1e-6
#define DT_repeat GEN(gen_repeat, 2)
static sx_cg_node *sample_repeat(GEN_ARGS)
{
    CTX;
    return sx_cg_repeat(g, in(c, repeat_cases[v].x, V_UNIFORM, -2, 2), repeat_cases[v].reps);
}

#define SPEC_tile N_REPEAT, OS_SMOOTH, 1e-6, 1e-6
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
#define SPEC_broadcast 5, OS_SMOOTH, 1e-6, 1e-6
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
#define SPEC_reshape 5, OS_SMOOTH, 1e-6, 1e-6
#define DT_reshape GEN(gen_reshape, 2)
static sx_cg_node *sample_reshape(GEN_ARGS)
{
    CTX;
    shp to = reshape_cases[v][1];
    return sx_cg_reshape(g, in(c, reshape_cases[v][0], V_UNIFORM, -2, 2), to.rank, to.d);
}

/* identity has no named constructor: the generic one */
#define SPEC_identity 3, OS_SMOOTH, 1e-6, 1e-6
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

#define SPEC_slice N_SLICE, OS_SMOOTH, 1e-6, 1e-6
#define DT_slice GEN(gen_slice, 2)
static sx_cg_node *sample_slice(GEN_ARGS)
{
    CTX;
    return sx_cg_slice(g, in(c, slice_cases[v].x, V_UNIFORM, -2, 2), slice_cases[v].s);
}

/* unslice: the input has the slice's shape inside the full shape of the slice case */
#define SPEC_unslice N_SLICE, OS_SMOOTH, 1e-6, 1e-6
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
#define SPEC_concat 5, OS_SMOOTH, 1e-6, 1e-6
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
#define SPEC_permute 5, OS_SMOOTH, 1e-6, 1e-6
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
#define SPEC_pad 5, OS_SMOOTH, 1e-6, 1e-6
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
#define SPEC_one_hot 4, OS_NONE, 1e-6, 0
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
#define SPEC_gather 4, OS_SMOOTH, 1e-6, 1e-6
#define DT_gather GEN(gen_gather, 2)
static sx_cg_node *sample_gather(GEN_ARGS)
{
    CTX;
    shp xs = gather_cases[v].x, is = {1, {gather_cases[v].n_idx}};
    sx_cg_node *x = in(c, xs, V_UNIFORM, -2, 2);
    return sx_cg_gather(g, x, in_fixed(c, is, V_INT, 0, (double)xs.d[0] - 1));
}

#define SPEC_scatter_add 4, OS_SMOOTH, 1e-6, 1e-6
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
#define SPEC_matmul 12, OS_SMOOTH, 1e-6, 1e-6
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
#define SPEC_dot 4, OS_SMOOTH, 1e-6, 1e-6
#define DT_dot GEN(gen_dot, 2)
static sx_cg_node *sample_dot(GEN_ARGS)
{
    CTX;
    sx_cg_node *a = in(c, dot_cases[v][0], V_UNIFORM, -2, 2);
    return sx_cg_dot(g, a, in(c, dot_cases[v][1], V_UNIFORM, -2, 2));
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
    /* issue 17's options: groups = 2 */
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

#define SPEC_conv2d N_CONV, OS_SMOOTH, 1e-6, 1e-6
#define DT_conv2d GEN(gen_conv2d, 2)
static sx_cg_node *sample_conv2d(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, conv_cases[v].x, V_UNIFORM, -1, 1);
    return sx_cg_conv2d(g, x, in(c, conv_cases[v].k, V_UNIFORM, -1, 1), &conv_cases[v].p);
}

#define SPEC_conv2d_backward_input N_CONV, OS_SMOOTH, 1e-6, 1e-6
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

#define SPEC_conv2d_backward_kernel N_CONV, OS_SMOOTH, 1e-6, 1e-6
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
    /* issue 17's options: stride 2 pad 1 (PyTorch's usual), padding counted */
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
#define SPEC_maxpool2d N_POOL, OS_PIECEWISE, 1e-6, 1e-6
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

#define SPEC_maxpool2d_backward N_POOL, OS_PIECEWISE, 1e-6, 1e-6
#define DT_maxpool2d_backward GEN(gen_pool_backward, 2)
static sx_cg_node *sample_maxpool2d_backward(GEN_ARGS)
{
    return pool_backward_sample(g, dt, rng, v, s, sx_cg_maxpool2d_backward);
}

#define SPEC_maxpool2d_relu_backward N_POOL, OS_PIECEWISE, 1e-6, 1e-6
#define DT_maxpool2d_relu_backward GEN(gen_pool_backward, 2)
static sx_cg_node *sample_maxpool2d_relu_backward(GEN_ARGS)
{
    return pool_backward_sample(g, dt, rng, v, s, sx_cg_maxpool2d_relu_backward);
}

#define SPEC_avgpool2d N_AVG_POOL, OS_SMOOTH, 1e-6, 1e-6
#define DT_avgpool2d GEN(gen_pool, 2)
static sx_cg_node *sample_avgpool2d(GEN_ARGS)
{
    CTX;
    return sx_cg_avgpool2d(g, in(c, pool_cases[v].x, V_UNIFORM, -2, 2), &pool_cases[v].p);
}

#define SPEC_avgpool2d_backward N_AVG_POOL, OS_SMOOTH, 1e-6, 1e-6
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

#define SPEC_conv_transpose2d N_CT, OS_SMOOTH, 1e-6, 1e-6
#define DT_conv_transpose2d SAMPLE(2)
static sx_cg_node *sample_conv_transpose2d(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, ct_cases[v].x, V_UNIFORM, -1, 1);
    return sx_cg_conv_transpose2d(g, x, in(c, ct_cases[v].k, V_UNIFORM, -1, 1), &ct_cases[v].p);
}

#define SPEC_conv_transpose2d_backward_input N_CT, OS_SMOOTH, 1e-6, 1e-6
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

#define SPEC_conv_transpose2d_backward_kernel N_CT, OS_SMOOTH, 1e-6, 1e-6
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

#define SPEC_adaptive_avgpool2d N_ADAPTIVE, OS_SMOOTH, 1e-6, 1e-6
#define DT_adaptive_avgpool2d SAMPLE(2)
static sx_cg_node *sample_adaptive_avgpool2d(GEN_ARGS)
{
    CTX;
    return sx_cg_adaptive_avgpool2d(g, in(c, adaptive_cases[v].x, V_UNIFORM, -2, 2),
                                    adaptive_cases[v].oh, adaptive_cases[v].ow);
}

#define SPEC_adaptive_avgpool2d_backward N_ADAPTIVE, OS_SMOOTH, 1e-6, 1e-6
#define DT_adaptive_avgpool2d_backward SAMPLE(2)
static sx_cg_node *sample_adaptive_avgpool2d_backward(GEN_ARGS)
{
    CTX;
    shp x = adaptive_cases[v].x,
        dy = {4, {x.d[0], adaptive_cases[v].oh, adaptive_cases[v].ow, x.d[3]}};
    return sx_cg_adaptive_avgpool2d_backward(g, in(c, dy, V_UNIFORM, -1, 1), x.d);
}

/* ---------------------------------------------------------------- softmax family */

static const struct {
    shp x;
    int axis;
} softmax_cases[] = {
    {{2, {3, 5}}, -1}, {{3, {2, 3, 4}}, 1}, {{1, {4}}, 0}, {{3, {2, 3, 4}}, 0}, {{2, {1, 5}}, 0},
};
#define N_SOFTMAX 5

#define SPEC_softmax N_SOFTMAX, OS_SMOOTH, 1e-6, 1e-6
#define DT_softmax GEN(gen_softmax, 2)
static sx_cg_node *sample_softmax(GEN_ARGS)
{
    CTX;
    return sx_cg_softmax(g, in(c, softmax_cases[v].x, V_UNIFORM, -3, 3), softmax_cases[v].axis);
}

#define SPEC_log_softmax N_SOFTMAX, OS_SMOOTH, 1e-6, 1e-6
#define DT_log_softmax GEN(gen_softmax, 2)
static sx_cg_node *sample_log_softmax(GEN_ARGS)
{
    CTX;
    return sx_cg_log_softmax(g, in(c, softmax_cases[v].x, V_UNIFORM, -3, 3), softmax_cases[v].axis);
}

/* The backward ops read the forward result y: probabilities, or log-probabilities. Any y is a
 * valid input (the formulas are polynomial in y). */
#define SPEC_softmax_backward N_SOFTMAX, OS_SMOOTH, 1e-6, 1e-6
#define DT_softmax_backward GEN(gen_softmax_backward, 2)
static sx_cg_node *sample_softmax_backward(GEN_ARGS)
{
    CTX;
    sx_cg_node *y = in(c, softmax_cases[v].x, V_UNIFORM, 0.05, 1);
    return sx_cg_softmax_backward(g, y, in(c, softmax_cases[v].x, V_UNIFORM, -1, 1),
                                  softmax_cases[v].axis);
}

#define SPEC_log_softmax_backward N_SOFTMAX, OS_SMOOTH, 1e-6, 1e-6
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

#define SPEC_softmax_xent N_XENT, OS_SMOOTH, 1e-6, 1e-6
#define DT_softmax_xent GEN(gen_softmax_xent, 2)
static sx_cg_node *sample_softmax_xent(GEN_ARGS)
{
    CTX;
    sx_cg_node *logits = in(c, xent_cases[v], V_UNIFORM, -3, 3);
    return sx_cg_softmax_xent(g, logits, in_probs(c, xent_cases[v], v == 1));
}

#define SPEC_softmax_xent_backward N_XENT, OS_SMOOTH, 1e-6, 1e-6
#define DT_softmax_xent_backward GEN(gen_softmax_xent, 2)
static sx_cg_node *sample_softmax_xent_backward(GEN_ARGS)
{
    CTX;
    sx_cg_node *logits = in(c, xent_cases[v], V_UNIFORM, -3, 3);
    sx_cg_node *target = in_probs(c, xent_cases[v], v == 1);
    sx_cg_node *dout = in(c, (shp){1, {xent_cases[v].d[0]}}, V_UNIFORM, -1, 1);
    return sx_cg_softmax_xent_backward(g, logits, target, dout);
}

/* A mask from a graph generator seeded from rng (the seed is recorded for references). Its
 * dtype is the graph's. */
static const struct {
    shp s;
    double p;
} dropout_cases[] = {{{2, {4, 5}}, 0.5}, {{1, {3}}, 0}, {{3, {2, 3, 4}}, 0.25}, {{0, {0}}, 0.9}};
#define SPEC_dropout_mask 4, OS_NONE, 0, 0
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

/* ---------------------------------------------------------------- linear algebra */

/* inv, solve, det, logdet: singular values in [1, 3) (condition below 3), random sign of det */
static const int square_sizes[] = {1, 3, 5, 2};

#define SPEC_inv 3, OS_SMOOTH, 1e-6, 1e-5
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
#define SPEC_solve 3, OS_SMOOTH, 1e-6, 1e-5
#define DT_solve GEN(gen_solve, 1)
static sx_cg_node *sample_solve(GEN_ARGS)
{
    CTX;
    int n = solve_cases[v].n;
    sx_cg_node *a = in_matrix(c, n, n, 1, 3);
    return sx_cg_solve(g, a, in(c, solve_cases[v].b, V_UNIFORM, -2, 2));
}

#define SPEC_det 4, OS_SMOOTH, 1e-6, 1e-5
#define DT_det GEN(gen_linalg, 1)
static sx_cg_node *sample_det(GEN_ARGS)
{
    CTX;
    int n = square_sizes[v];
    return sx_cg_det(g, in_matrix(c, n, n, 1, 3));
}

#define SPEC_logdet 4, OS_SMOOTH, 1e-6, 1e-5
#define DT_logdet GEN(gen_linalg, 1)
static sx_cg_node *sample_logdet(GEN_ARGS)
{
    CTX;
    int n = square_sizes[v];
    return sx_cg_logdet(g, in_matrix(c, n, n, 1, 3));
}

/* cholesky: the symmetric part of an SPD input (eigenvalues in [1, 3)) */
#define SPEC_cholesky 3, OS_SMOOTH, 1e-6, 1e-5
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
#define SPEC_qr_q 3, OS_SMOOTH, 1e-6, 1e-5
#define DT_qr_q GEN(gen_linalg, 1)
static sx_cg_node *sample_qr_q(GEN_ARGS)
{
    CTX;
    return sx_cg_qr_q(g, in_matrix(c, qr_cases[v][0], qr_cases[v][1], 1, 3));
}

#define SPEC_qr_r 3, OS_SMOOTH, 1e-6, 1e-5
#define DT_qr_r GEN(gen_linalg, 1)
static sx_cg_node *sample_qr_r(GEN_ARGS)
{
    CTX;
    return sx_cg_qr_r(g, in_matrix(c, qr_cases[v][0], qr_cases[v][1], 1, 3));
}

/* svd_s: distinct singular values, at least 0.5 apart and 1 from zero */
static const int svd_cases[][2] = {{4, 3}, {3, 5}, {4, 4}, {1, 1}};
#define SPEC_svd_s 4, OS_SMOOTH, 1e-6, 1e-5
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
#define SPEC_eigh_w 3, OS_SMOOTH, 1e-6, 1e-5
#define DT_eigh_w GEN(gen_linalg, 1)
#define SPEC_eigh_v 3, OS_SMOOTH, 1e-6, 1e-5
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

/* ---------------------------------------------------------------- mutation */

/* assign(param, value): a mutation, not differentiated; its value is the parameter after the
 * write, i.e. value */
static const shp assign_shapes[] = {{2, {3, 4}}, {0, {0}}};
#define SPEC_assign 2, OS_NONE, 0, 0
#define DT_assign                                                                                  \
    EXCLUDED("mutates a parameter: its value depends on evaluation order, no gradient")
static sx_cg_node *sample_assign(GEN_ARGS)
{
    CTX;
    sx_cg_node *p = leaf_kind(c, assign_shapes[v], V_UNIFORM, -2, 2, false, true);
    return sx_cg_assign(g, p, in_fixed(c, assign_shapes[v], V_UNIFORM, -2, 2));
}

/* ---------------------------------------------------------------- optimiser-made ops */

/* seq(x, after) = x, ordered after `after` (a view): the identity in x */
static const shp seq_shapes[] = {{2, {3, 4}}, {0, {0}}};
#define SPEC_seq 2, OS_SMOOTH, 1e-6, 1e-6
#define DT_seq GEN(gen_seq, 1)
static sx_cg_node *sample_seq(GEN_ARGS)
{
    CTX;
    sx_cg_node *in2[2];
    in2[0] = in(c, seq_shapes[v], V_UNIFORM, -2, 2);
    in2[1] = in_fixed(c, (shp){1, {3}}, V_UNIFORM, -2, 2);
    return in2[0] && in2[1] ? sx_cg_op_new(g, SX_OP_SEQ, 2, in2, NULL) : NULL;
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
#define SPEC_fused 3, OS_NONE, 0, 0
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

/* Fused optimiser steps: parameter and states are parameters (written in place), the gradient
 * and the learning rate (rank 0) inputs; mutations, not differentiated. States that a square
 * root reads are positive. */
static const shp update_shapes[] = {{2, {3, 4}}, {1, {5}}};

static sx_cg_node *update(ctx *c, int v, sx_cg_op op, int n_states, const sx_cg_attr *at)
{
    sx_cg_node *ops[5];
    int k = 0;
    ops[k++] = leaf_kind(c, update_shapes[v], V_UNIFORM, -2, 2, false, true);
    for (int i = 0; i < n_states; i++) /* adam's first moment may be negative */
        ops[k++] = leaf_kind(c, update_shapes[v], V_UNIFORM,
                             op == SX_OP_ADAM_UPDATE && i == 0 ? -1 : 0.1, 1, false, true);
    ops[k++] = in_fixed(c, update_shapes[v], V_UNIFORM, -1, 1);
    ops[k++] = in_fixed(c, (shp){0, {0}}, V_UNIFORM, 0.01, 0.1);
    for (int i = 0; i < k; i++)
        if (ops[i] == NULL)
            return NULL;
    return sx_cg_op_new(c->g, op, k, ops, at);
}

#define SPEC_sgd_update 2, OS_NONE, 0, 0
#define DT_sgd_update EXCLUDED("fused optimiser step: mutates parameters, emitted by optim/")
static sx_cg_node *sample_sgd_update(GEN_ARGS)
{
    CTX;
    return update(c, v, SX_OP_SGD_UPDATE, 0, NULL);
}

#define SPEC_momentum_update 2, OS_NONE, 0, 0
#define DT_momentum_update EXCLUDED("fused optimiser step: mutates parameters and state")
static sx_cg_node *sample_momentum_update(GEN_ARGS)
{
    CTX;
    sx_cg_attr at = sx_cg_attr_default();
    at.momentum.mu = 0.9;
    at.nesterov = v == 1;
    return update(c, v, SX_OP_MOMENTUM_UPDATE, 1, &at);
}

#define SPEC_adagrad_update 2, OS_NONE, 0, 0
#define DT_adagrad_update EXCLUDED("fused optimiser step: mutates parameters and state")
static sx_cg_node *sample_adagrad_update(GEN_ARGS)
{
    CTX;
    sx_cg_attr at = sx_cg_attr_default();
    at.adagrad.eps = 1e-8;
    return update(c, v, SX_OP_ADAGRAD_UPDATE, 1, &at);
}

#define SPEC_rmsprop_update 2, OS_NONE, 0, 0
#define DT_rmsprop_update EXCLUDED("fused optimiser step: mutates parameters and state")
static sx_cg_node *sample_rmsprop_update(GEN_ARGS)
{
    CTX;
    sx_cg_attr at = sx_cg_attr_default();
    at.rmsprop.rho = 0.9;
    at.rmsprop.one_minus_rho = 1 - 0.9;
    at.rmsprop.eps = 1e-8;
    return update(c, v, SX_OP_RMSPROP_UPDATE, 1, &at);
}

#define SPEC_adam_update 2, OS_NONE, 0, 0
#define DT_adam_update EXCLUDED("fused optimiser step: mutates parameters and state")
static sx_cg_node *sample_adam_update(GEN_ARGS)
{
    CTX;
    sx_cg_attr at = sx_cg_attr_default();
    at.adam.beta1 = 0.9;
    at.adam.one_minus_beta1 = 1 - 0.9;
    at.adam.beta2 = 0.999;
    at.adam.one_minus_beta2 = 1 - 0.999;
    at.adam.eps = 1e-8;
    return update(c, v, SX_OP_ADAM_UPDATE, 2, &at);
}

/* ---- issue 20's update ops (optim20): a rate of several elements (lr first), states in the
 * ranges their kernels need (a centered RMSprop's mean gradient squared below its mean square,
 * so that the variance stays positive) */
static sx_cg_node *update_rates(ctx *c, int v, sx_cg_op op, int n_states, int64_t n_rates,
                                const sx_cg_attr *at)
{
    sx_cg_node *ops[7];
    int k = 0;
    ops[k++] = leaf_kind(c, update_shapes[v], V_UNIFORM, -2, 2, false, true);
    for (int i = 0; i < n_states; i++) {
        bool signed_state = (op != SX_OP_MOMENTUM_DAMPENED_UPDATE && i == 0 &&
                             op != SX_OP_RMSPROP_CENTERED_UPDATE) ||
                            (op == SX_OP_RMSPROP_CENTERED_UPDATE && i == 1);
        double lo = op == SX_OP_RMSPROP_CENTERED_UPDATE && i == 1 ? -0.3 : signed_state ? -1 : 0.1;
        double hi = op == SX_OP_RMSPROP_CENTERED_UPDATE && i == 1 ? 0.3 : 1;
        ops[k++] = leaf_kind(c, update_shapes[v], V_UNIFORM, lo, hi, false, true);
    }
    ops[k++] = in_fixed(c, update_shapes[v], V_UNIFORM, -1, 1);
    ops[k++] = in_fixed(c, (shp){1, {n_rates}}, V_UNIFORM, 0.01, 0.1);
    for (int i = 0; i < k; i++)
        if (ops[i] == NULL)
            return NULL;
    return sx_cg_op_new(c->g, op, k, ops, at);
}

static sx_cg_attr adam_coef(void)
{
    sx_cg_attr at = sx_cg_attr_default();
    at.adam.beta1 = 0.9;
    at.adam.one_minus_beta1 = 1 - 0.9;
    at.adam.beta2 = 0.999;
    at.adam.one_minus_beta2 = 1 - 0.999;
    at.adam.eps = 1e-3;
    return at;
}

#define SPEC_adamw_update 2, OS_NONE, 0, 0
#define DT_adamw_update EXCLUDED("fused optimiser step: mutates parameters and state")
static sx_cg_node *sample_adamw_update(GEN_ARGS)
{
    CTX;
    sx_cg_attr at = adam_coef();
    return update_rates(c, v, SX_OP_ADAMW_UPDATE, 2, 3, &at);
}

#define SPEC_amsgrad_update 2, OS_NONE, 0, 0
#define DT_amsgrad_update EXCLUDED("fused optimiser step: mutates parameters and state")
static sx_cg_node *sample_amsgrad_update(GEN_ARGS)
{
    CTX;
    sx_cg_attr at = adam_coef();
    return update_rates(c, v, SX_OP_AMSGRAD_UPDATE, 3, 3, &at);
}

#define SPEC_rmsprop_centered_update 2, OS_NONE, 0, 0
#define DT_rmsprop_centered_update EXCLUDED("fused optimiser step: mutates parameters and state")
static sx_cg_node *sample_rmsprop_centered_update(GEN_ARGS)
{
    CTX;
    sx_cg_attr at = sx_cg_attr_default();
    at.rmsprop.rho = 0.9;
    at.rmsprop.one_minus_rho = 1 - 0.9;
    at.rmsprop.eps = 1e-8;
    return update_rates(c, v, SX_OP_RMSPROP_CENTERED_UPDATE, 2, 1, &at);
}

#define SPEC_momentum_dampened_update 2, OS_NONE, 0, 0
#define DT_momentum_dampened_update EXCLUDED("fused optimiser step: mutates parameters and state")
static sx_cg_node *sample_momentum_dampened_update(GEN_ARGS)
{
    CTX;
    sx_cg_attr at = sx_cg_attr_default();
    at.momentum.mu = 0.9;
    at.nesterov = v == 1;
    return update_rates(c, v, SX_OP_MOMENTUM_DAMPENED_UPDATE, 1, 2, &at);
}
/* ---- end of issue 20's update ops */

/* The step with a matrix-product gradient: (p, states..., a, b, lr). Variants: each update
 * kind with another transpose combination, parameters of 37 rows (two blocks of rows) or 3. */
#define SPEC_matmul_update 5, OS_NONE, 0, 0
#define DT_matmul_update EXCLUDED("fused optimiser step made by the gemm-update pass: mutates")
static sx_cg_node *sample_matmul_update(GEN_ARGS)
{
    CTX;
    static const sx_cg_op kinds[5] = {SX_OP_SGD_UPDATE, SX_OP_MOMENTUM_UPDATE, SX_OP_ADAGRAD_UPDATE,
                                      SX_OP_RMSPROP_UPDATE, SX_OP_ADAM_UPDATE};
    static const int states[5] = {0, 1, 1, 1, 2};
    const int64_t m = v % 2 == 0 ? 37 : 3, n = 5, kk = 4;
    const bool ta = v == 1 || v == 2, tb = v >= 2;
    sx_cg_attr at = sx_cg_attr_default();
    at.ints[0] = kinds[v];
    at.trans_a = ta;
    at.trans_b = tb;
    at.alpha = v == 3 ? -0.5 : 1.0;
    at.coef[0] = kinds[v] == SX_OP_MOMENTUM_UPDATE ? 0.9 : 1e-8;
    at.nesterov = kinds[v] == SX_OP_MOMENTUM_UPDATE;
    if (kinds[v] == SX_OP_RMSPROP_UPDATE) {
        at.coef[0] = 0.9, at.coef[1] = 1 - 0.9, at.coef[2] = 1e-8;
    } else if (kinds[v] == SX_OP_ADAM_UPDATE) {
        at.coef[0] = 0.9, at.coef[1] = 0.1, at.coef[2] = 0.999, at.coef[3] = 0.001;
        at.coef[4] = 1e-8;
    }
    sx_cg_node *ops[6];
    int k = 0;
    const shp ps = {2, {m, n}};
    ops[k++] = leaf_kind(c, ps, V_UNIFORM, -2, 2, false, true);
    for (int i = 0; i < states[v]; i++)
        ops[k++] = leaf_kind(c, ps, V_UNIFORM, kinds[v] == SX_OP_ADAM_UPDATE && i == 0 ? -1 : 0.1,
                             1, false, true);
    ops[k++] = in_fixed(c, ta ? (shp){2, {kk, m}} : (shp){2, {m, kk}}, V_UNIFORM, -1, 1);
    ops[k++] = in_fixed(c, tb ? (shp){2, {n, kk}} : (shp){2, {kk, n}}, V_UNIFORM, -1, 1);
    ops[k++] = in_fixed(c, (shp){0, {0}}, V_UNIFORM, 0.01, 0.1);
    for (int i = 0; i < k; i++)
        if (ops[i] == NULL)
            return NULL;
    return sx_cg_op_new(g, SX_OP_MATMUL_UPDATE, k, ops, &at);
}

/* ---------------------------------------------------------------- batch norm (issue 18) */

/* x (..., c): a matrix, an NHWC batch, one channel; the statistics an independent input with a
 * positive variance row */
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

#define SPEC_batch_norm_stats N_BN, OS_SMOOTH, 1e-6, 1e-6
static sx_cg_node *sample_batch_norm_stats(GEN_ARGS)
{
    CTX;
    return sx_cg_batch_norm_stats(g, in(c, bn_cases[v], V_UNIFORM, -2, 2));
}
#define DT_batch_norm_stats GEN(gen_batch_norm, 1)

#define SPEC_batch_norm N_BN, OS_SMOOTH, 1e-6, 1e-6
static sx_cg_node *sample_batch_norm(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, bn_cases[v], V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, bn_rows(v), V_UNIFORM, 0.3, 1.5);
    sx_cg_node *gamma = in(c, bn_channels(v), V_UNIFORM, 0.5, 1.5);
    sx_cg_node *beta = in(c, bn_channels(v), V_UNIFORM, -1, 1);
    return sx_cg_batch_norm(g, x, st, gamma, beta, v == 1 ? 1e-5 : 0.1);
}
#define DT_batch_norm GEN(gen_batch_norm, 2)

#define SPEC_batch_norm_sums N_BN, OS_SMOOTH, 1e-6, 1e-6
static sx_cg_node *sample_batch_norm_sums(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, bn_cases[v], V_UNIFORM, -2, 2);
    sx_cg_node *st = in(c, bn_rows(v), V_UNIFORM, -1, 1);
    return sx_cg_batch_norm_sums(g, x, st, in(c, bn_cases[v], V_UNIFORM, -1, 1));
}
#define DT_batch_norm_sums GEN(gen_batch_norm, 1)

/* ---------------------------------------------------------------- the table */

const os_op os_ops[SX_OP_COUNT] = {
#define X(NAME, name, arity, shape, eval, flags, kernel)                                           \
    {SX_OP_##NAME, #name, sample_##name, SPEC_##name},
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
