/* The compiled kernels of the known fused programs (tensor/elementwise/fused_known.c): every
 * program of the table against the interpreter, bit for bit, in f32 and f64, on random data
 * with zeros, signed zeros, negatives, huge and tiny values, infinities and NaNs (a NaN is any
 * NaN), over lengths
 * that leave vector tails and blocks of every kind (ctest runs this suite again under
 * SX_ISA=avx2 and base); an operand passed twice (written and read); a program that is not in
 * the table runs interpreted; a near miss (one field of one instruction, or one operand's kind)
 * is not taken for the program it resembles. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_impl.h"

typedef struct entry {
    const char *name;
    sx_fused_prog prog;
    int n_ops;
    uint64_t scalar;
} entry;

static entry get_entry(int i)
{
    entry e;
    cr_assert(sx__fused_known_entry(i, &e.name, &e.prog, &e.n_ops, &e.scalar));
    return e;
}

/* A value: mostly uniform in [-3, 3), one in four from the special ones. */
static double draw(sx_rng *r, sx_dtype dt)
{
    const double big = dt == SX_F32 ? 3e38 : 1.7e308, tiny = dt == SX_F32 ? 1e-40 : 1e-310;
    const double special[] = {0,     -0.0,  1,    -1,       big,       -big, tiny,
                              -tiny, 1e-20, 1e20, INFINITY, -INFINITY, NAN};
    const uint64_t u = sx_rng_u64(r);
    if (u % 4 == 0)
        return special[(u >> 8) % (sizeof special / sizeof special[0])];
    return 6 * sx_rng_uniform(r) - 3;
}

/* Operands of entry e over n elements, twice (a for the interpreter, b for the kernel): full
 * ones random with special values, scalars uniform in (0, 1) or (edge) special too. */
typedef struct operands {
    sx_tensor *a[SX_FUSED_MAX_OPERANDS], *b[SX_FUSED_MAX_OPERANDS];
    int n;
} operands;

static operands make(const entry *e, sx_dtype dt, int64_t n, sx_rng *r, bool edge)
{
    operands o = {.n = e->n_ops};
    for (int i = 0; i < e->n_ops; i++) {
        const bool s = e->scalar >> i & 1;
        const int64_t len = s ? 1 : n;
        o.a[i] = tu_zeros(dt, 1, &len);
        for (int64_t j = 0; j < len; j++)
            sx_tensor_set(o.a[i], j, s && !edge ? sx_rng_uniform(r) : draw(r, dt));
        cr_assert_eq(sx_tensor_clone(o.a[i], &o.b[i]), SX_OK);
    }
    return o;
}

static void drop(operands *o)
{
    for (int i = 0; i < o->n; i++) {
        sx_tensor_free(o->a[i]);
        sx_tensor_free(o->b[i]);
    }
}

/* The program over a by the interpreter and over b by the kernel (or the interpreter again for
 * a program not in the table): the same bits in every operand, but for the sign and payload of a
 * NaN. (Which NaN an operation on two NaNs returns depends on the order of the operands in the
 * machine instruction, which the compiler chooses for + and *: no two builds of a loop promise
 * the same NaN, the interpreter's own instances neither.) */
static void run_both(const sx_fused_prog *p, operands *o, const char *what)
{
    sx__fused_known_enable(false);
    cr_assert_eq(sx_tensor_fused_update(p, o->n, o->a), SX_OK, "%s: %s", what, sx_last_error());
    sx__fused_known_enable(true);
    cr_assert_eq(sx_tensor_fused_update(p, o->n, o->b), SX_OK, "%s: %s", what, sx_last_error());
    for (int i = 0; i < o->n; i++) {
        const sx_tensor *x = o->a[i], *y = o->b[i];
        for (int64_t j = 0; j < x->size; j++) {
            const size_t es = sx_dtype_size(x->dtype);
            const double u = sx_tensor_get(x, j), v = sx_tensor_get(y, j);
            if (memcmp((const char *)x->data + j * es, (const char *)y->data + j * es, es) != 0 &&
                !(isnan(u) && isnan(v)))
                cr_assert_fail("%s: operand %d element %lld: kernel %.17g, interpreter %.17g", what,
                               i, (long long)j, v, u);
        }
    }
}

Test(tensor_fused_known, the_table_holds_the_optimisers_programs)
{
    cr_assert_geq(sx__fused_known_count(), 11);
    for (int i = 0; i < sx__fused_known_count(); i++) {
        entry e = get_entry(i);
        cr_assert_eq(sx__fused_check_stores("test", &e.prog, e.n_ops, e.n_ops), SX_OK, "%s: %s",
                     e.name, sx_last_error());
        cr_assert_eq(sx__fused_known_find(&e.prog, e.n_ops, e.scalar), i, "%s", e.name);
    }
    const char *name;
    sx_fused_prog p;
    int n;
    uint64_t s;
    cr_assert_not(sx__fused_known_entry(sx__fused_known_count(), &name, &p, &n, &s));
    cr_assert_not(sx__fused_known_entry(-1, &name, &p, &n, &s));
}

/* Lengths: a few elements, around the vector widths (4, 8, 16) and the blocks of 512, and one
 * above the parallel threshold (several threads, blocks split between them). */
static const int64_t lengths[] = {2, 3, 7, 15, 16, 17, 33, 511, 512, 513, 1000, 4099, 70001};

Test(tensor_fused_known, every_kernel_gives_the_interpreters_bits)
{
    sx_rng r;
    sx_rng_seed(&r, 5);
    for (int i = 0; i < sx__fused_known_count(); i++) {
        entry e = get_entry(i);
        for (int d = 0; d < 2; d++)
            for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
                for (int edge = 0; edge < 2; edge++) {
                    const sx_dtype dt = d ? SX_F64 : SX_F32;
                    operands o = make(&e, dt, lengths[l], &r, edge);
                    char what[160];
                    snprintf(what, sizeof what, "%s, %s, %lld elements%s", e.name,
                             d ? "f64" : "f32", (long long)lengths[l],
                             edge ? ", special scalars" : "");
                    run_both(&e.prog, &o, what);
                    drop(&o);
                }
    }
}

/* A written operand passed again as an operand the program only reads (the same tensor): both
 * read its old value, then the store writes it. */
Test(tensor_fused_known, an_operand_written_and_read_under_two_numbers)
{
    sx_rng r;
    sx_rng_seed(&r, 6);
    for (int i = 0; i < sx__fused_known_count(); i++) {
        entry e = get_entry(i);
        int w = -1, rd = -1;
        for (int k = 0; k < e.prog.n; k++)
            if (e.prog.ins[k].kind == SX_FUSED_STORE && w < 0)
                w = e.prog.ins[k].b;
        for (int k = 0; k < e.prog.n; k++) {
            const sx_fused_instr *in = &e.prog.ins[k];
            bool stored = false;
            for (int j = 0; j < e.prog.n; j++)
                stored =
                    stored || (e.prog.ins[j].kind == SX_FUSED_STORE && e.prog.ins[j].b == in->a);
            if (in->kind != SX_FUSED_STORE && in->a >= 0 && !(e.scalar >> in->a & 1) && !stored)
                rd = in->a;
        }
        if (w < 0 || rd < 0)
            continue;
        for (int d = 0; d < 2; d++) {
            operands o = make(&e, d ? SX_F64 : SX_F32, 1001, &r, false);
            sx_tensor *ka = o.a[rd], *kb = o.b[rd];
            o.a[rd] = o.a[w];
            o.b[rd] = o.b[w];
            run_both(&e.prog, &o, e.name);
            o.a[rd] = ka;
            o.b[rd] = kb;
            drop(&o);
        }
    }
}

/* p <- p - lr sin(g): sin is never compiled (its far arguments go to libm per block), so the
 * program is not in the table and runs interpreted, giving the unfused kernels' values. */
Test(tensor_fused_known, a_program_not_in_the_table_runs_interpreted)
{
    sx_fused_prog p = {.n = 4};
    p.ins[0] = (sx_fused_instr){.kind = SX_FUSED_MAP, .op = SX_MAP_SIN, .a = 2};
    p.ins[1] = (sx_fused_instr){.kind = SX_FUSED_BINARY, .op = SX_BINARY_MUL, .a = 1, .b = -1};
    p.ins[2] = (sx_fused_instr){.kind = SX_FUSED_BINARY, .op = SX_BINARY_SUB, .a = 0, .b = -2};
    p.ins[3] = (sx_fused_instr){.kind = SX_FUSED_STORE, .a = -3, .b = 0};
    cr_assert_eq(sx__fused_known_find(&p, 3, 0x2), -1);
    sx_rng r;
    sx_rng_seed(&r, 7);
    const int64_t n = 777, one = 1;
    sx_tensor *w = tu_rand(&r, SX_F32, 1, &n, -2, 2), *g = tu_rand(&r, SX_F32, 1, &n, -9, 9);
    sx_tensor *lr = tu_zeros(SX_F32, 1, &one), *want = NULL, *t = NULL;
    sx_tensor_set(lr, 0, 0.125);
    cr_assert_eq(sx_tensor_map(SX_MAP_SIN, 0, g, &t), SX_OK);
    cr_assert_eq(sx_tensor_binary_out(SX_BINARY_MUL, lr, t, t), SX_OK);
    cr_assert_eq(sx_tensor_binary(SX_BINARY_SUB, w, t, &want), SX_OK);
    sx_tensor *ops[3] = {w, lr, g};
    cr_assert_eq(sx_tensor_fused_update(&p, 3, ops), SX_OK, "%s", sx_last_error());
    cr_assert(memcmp(w->data, want->data, (size_t)n * sizeof(float)) == 0);
    sx_tensor_free(w);
    sx_tensor_free(g);
    sx_tensor_free(lr);
    sx_tensor_free(want);
    sx_tensor_free(t);
}

/* One field of one instruction changed: an op, a source, an alpha. */
static bool mutate(sx_fused_prog *p, int k, int how, int n_ops)
{
    sx_fused_instr *in = &p->ins[k];
    switch (how) {
    case 0: /* another op of the same kind */
        if (in->kind == SX_FUSED_BINARY)
            in->op = in->op == SX_BINARY_ADD ? SX_BINARY_SUB : SX_BINARY_ADD;
        else if (in->kind == SX_FUSED_MAP)
            in->op = in->op == SX_MAP_SQRT ? SX_MAP_ABS : SX_MAP_SQRT;
        else
            return false;
        return true;
    case 1: /* another operand as source a */
        if (in->kind == SX_FUSED_STORE || in->a < 0 || n_ops < 2)
            return false;
        in->a = (int16_t)((in->a + 1) % n_ops);
        return true;
    case 2: /* an alpha (maps read it; the others carry it all the same) */
        in->alpha = 0.5;
        return true;
    default:
        return false;
    }
}

Test(tensor_fused_known, a_near_miss_is_not_taken_for_a_known_program)
{
    sx_rng r;
    sx_rng_seed(&r, 8);
    for (int i = 0; i < sx__fused_known_count(); i++) {
        entry e = get_entry(i);
        for (int k = 0; k < e.prog.n; k++)
            for (int how = 0; how < 3; how++) {
                entry m = e;
                if (!mutate(&m.prog, k, how, e.n_ops) ||
                    sx__fused_check_stores("test", &m.prog, m.n_ops, m.n_ops) != SX_OK)
                    continue;
                const int f = sx__fused_known_find(&m.prog, m.n_ops, m.scalar);
                cr_assert_neq(f, i, "%s: instruction %d changed (%d), still matched", e.name, k,
                              how);
                if (k == 1) { /* and it computes the interpreter's values */
                    operands o = make(&m, SX_F32, 600, &r, false);
                    run_both(&m.prog, &o, e.name);
                    drop(&o);
                }
            }
        /* a scalar operand given as a full-size one */
        int s = 0;
        while (s < e.n_ops && !(e.scalar >> s & 1))
            s++;
        if (s < e.n_ops)
            cr_assert_neq(sx__fused_known_find(&e.prog, e.n_ops, e.scalar & ~((uint64_t)1 << s)), i,
                          "%s", e.name);
        cr_assert_neq(sx__fused_known_find(&e.prog, e.n_ops + 1, e.scalar), i, "%s", e.name);
    }
}
