/* update.c: the samples of the ops that write parameters (assign, the fused updates) and seq
 * (cgraph/ops/update.c): each op's SPEC_, DT_, sample generator and references. Part of
 * ../opsamples.c, which includes it. */

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

/* ---------------------------------------------------------------- seq */

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

/* ---------------------------------------------------------------- optimiser-made ops */

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
