/* fused.c: the samples of the fused element-wise programs the optimiser makes (cgraph/ops/fused.c):
 * each op's SPEC_, DT_, sample generator and references. Part of ../opsamples.c, which includes it.
 */

/* ---------------------------------------------------------------- optimiser-made ops */

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
