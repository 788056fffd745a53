/* fused_known.c: ahead-of-time compiled fused programs. The programs that element-wise fusion
 * makes of the optimisers' formulas are known before any graph is built: a generator
 * (tests/optim/test_known_programs.c) compiles each formula as sx_nn compiles a training step and
 * writes, per distinct program, a straight-line loop computing it per element
 * (fused_known_progs.h, instantiated by fused_known_tmpl.h per dtype and instruction set).
 * sx_tensor_fused_update runs that loop when its program is one of them exactly, instead of
 * the block interpreter: one pass with every value in registers, the interpreter's bits. */
#include "tensor_impl.h"
#include "vmath.h"

#include <string.h>
#include <tgmath.h>

/* Elements per task unit, as the interpreter's blocks: the same split over threads. */
#define FK_BLOCK 512
#define FK_MAX_OPERANDS 16

/* A kernel over elements [i0, i1) of its operands o (in the kernel's order), in place. */
typedef void fk_fn(void *const *o, int64_t i0, int64_t i1);

/* A known program: its instructions, exactly, over n_ops operands of which those of bit i of
 * `scalar` hold one element and the others the program's size; it runs as kernel `kernel` with
 * the kernel's operand c = operand perm[c] (programs that differ only in the numbering of their
 * operands, an update and its matmul form, share a kernel). */
typedef struct fk_entry {
    const char *name;
    const sx_fused_instr *ins;
    int n, n_ops;
    uint64_t scalar;
    int kernel;
    int8_t perm[FK_MAX_OPERANDS];
} fk_entry;

#define ISA_TMPL "elementwise/fused_known_tmpl.h"
#include "isa_each.h"
#undef ISA_TMPL
#define T double
#define SFX f64
#include "fused_known_tmpl.h"
#undef T
#undef SFX

#define FK_TABLE
#include "fused_known_progs.h"
#undef FK_TABLE

enum { FK_N_ENTRIES = (int)(sizeof fk_entries / sizeof fk_entries[0]) };
_Static_assert(sizeof fk_kernels_f32 == sizeof fk_kernels_f64, "one f32 kernel per f64 kernel");

static bool fk_enabled = true;

void sx__fused_known_enable(bool on)
{
    fk_enabled = on;
}

int sx__fused_known_count(void)
{
    return FK_N_ENTRIES;
}

bool sx__fused_known_entry(int i, const char **name, sx_fused_prog *prog, int *n_ops,
                           uint64_t *scalar)
{
    if (i < 0 || i >= FK_N_ENTRIES)
        return false;
    const fk_entry *e = &fk_entries[i];
    *name = e->name;
    memset(prog, 0, sizeof *prog);
    prog->n = e->n;
    memcpy(prog->ins, e->ins, (size_t)e->n * sizeof *e->ins);
    *n_ops = e->n_ops;
    *scalar = e->scalar;
    return true;
}

static bool same_instr(const sx_fused_instr *x, const sx_fused_instr *y)
{
    return x->kind == y->kind && x->op == y->op && x->a == y->a && x->b == y->b && x->c == y->c &&
           memcmp(&x->alpha, &y->alpha, sizeof x->alpha) == 0;
}

int sx__fused_known_find(const sx_fused_prog *p, int n_in, uint64_t scalar)
{
    for (int k = 0; k < FK_N_ENTRIES; k++) {
        const fk_entry *e = &fk_entries[k];
        if (e->n != p->n || e->n_ops != n_in || e->scalar != scalar)
            continue;
        int i = 0;
        while (i < e->n && same_instr(&e->ins[i], &p->ins[i]))
            i++;
        if (i == e->n)
            return k;
    }
    return -1;
}

static fk_fn *fk_kernel(const fk_entry *e, sx_dtype dt)
{
    if (dt == SX_F64)
        return fk_kernels_f64[e->kernel];
#if VM_DISPATCH
    switch (vm_isa()) {
    case VM_ISA_AVX512:
        return fk_kernels_f32_avx512[e->kernel];
    case VM_ISA_AVX2:
        return fk_kernels_f32_avx2[e->kernel];
    default:
        break;
    }
#endif
    return fk_kernels_f32[e->kernel];
}

typedef struct fk_ctx {
    fk_fn *fn;
    void *ops[FK_MAX_OPERANDS];
    int64_t size;
} fk_ctx;

static void fk_blocks(void *ctx, int64_t b0, int64_t b1)
{
    const fk_ctx *c = ctx;
    const int64_t i1 = b1 * FK_BLOCK < c->size ? b1 * FK_BLOCK : c->size;
    c->fn(c->ops, b0 * FK_BLOCK, i1);
}

bool sx__fused_known_run(const sx_fused_prog *p, int n_in, void *const *ops, const int64_t *period,
                         sx_dtype dt, int64_t size)
{
    if (!fk_enabled || (dt != SX_F32 && dt != SX_F64) || n_in > FK_MAX_OPERANDS)
        return false;
    uint64_t scalar = 0;
    for (int i = 0; i < n_in; i++) {
        if (period[i] == 1)
            scalar |= (uint64_t)1 << i;
        else if (period[i] != 0)
            return false;
    }
    const int k = sx__fused_known_find(p, n_in, scalar);
    if (k < 0)
        return false;
    const fk_entry *e = &fk_entries[k];
    fk_ctx c = {.fn = fk_kernel(e, dt), .size = size};
    for (int i = 0; i < n_in; i++)
        c.ops[i] = ops[e->perm[i]];
    sx__par_range((size + FK_BLOCK - 1) / FK_BLOCK, SX_PAR_MIN / 2 / FK_BLOCK, fk_blocks, &c);
    return true;
}
