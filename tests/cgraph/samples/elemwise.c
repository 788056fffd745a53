/* elemwise.c: the samples of the element-wise ops (cgraph/ops/elemwise.c: the rows of sx_map.def
 * and sx_binary.def, fma, where): each op's SPEC_, DT_, sample generator and references. Part of
 * ../opsamples.c, which includes it. */

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
