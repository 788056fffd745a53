/* fused.c: element-wise chain fusion. A short program of map/binary/fma/where instructions runs
 * over blocks of elements that stay in cache (registers are block-sized arrays on the stack),
 * so a chain of k element-wise ops reads its operands once and writes its result once instead
 * of k times. Each instruction's loop is a plain loop the compiler vectorises; the expressions
 * are the rows of sx_map.def and sx_binary.def (with vmath.h's f32 functions, and the f32
 * interpreter built per instruction set like map.c's), so results match the unfused kernels
 * exactly. The programs of the optimisers' updates are known in advance and run as compiled
 * kernels instead (fused_known.c), with the same bits. */
#include "tensor_impl.h"
#include "vmath.h"

#include <string.h>
#include <tgmath.h>

#define FUSED_BLOCK 512

/* One call: the program, its operands (wops: the same, writable, for the stores of
 * sx_tensor_fused_update; else NULL), how each repeats, their tiles, each instruction's register
 * (fused_regs), the result (NULL for a program of stores) and the f32 interpreter. */
typedef struct fused_ctx fused_ctx;
typedef void fused_f32_fn(const fused_ctx *f, float *out, int64_t at, int len);
struct fused_ctx {
    const sx_fused_prog *prog;
    const void *const *ops;
    void *const *wops;
    const int64_t *period;
    const void *const *tile;
    const int8_t *reg;
    const int8_t *direct; /* per instruction: the operand its result is written into directly
                             (its only store, with nothing after it reading that operand), or -1 */
    sx_tensor *out;
    int64_t size;
    fused_f32_fn *k32;
};

#define ISA_TMPL "elementwise/fused_tmpl.h"
#include "isa_each.h"
#undef ISA_TMPL
#define T double
#define SFX f64
#include "fused_tmpl.h"
#undef T
#undef SFX

static fused_f32_fn *fused_f32_kernel(void)
{
#if VM_DISPATCH
    switch (vm_isa()) {
    case VM_ISA_AVX512:
        return fused_block_f32_avx512;
    case VM_ISA_AVX2:
        return fused_block_f32_avx2;
    default:
        break;
    }
#endif
    return fused_block_f32;
}

/* The blocks [b0, b1) of FUSED_BLOCK elements. */
static void fused_blocks(void *ctx, int64_t b0, int64_t b1)
{
    const fused_ctx *f = ctx;
    const int64_t n = f->size;
    void *out = f->out != NULL ? f->out->data : NULL;
    for (int64_t bk = b0; bk < b1; bk++) {
        const int64_t at = bk * FUSED_BLOCK;
        const int len = (int)(n - at < FUSED_BLOCK ? n - at : FUSED_BLOCK);
        if (f->k32 != NULL)
            f->k32(f, out, at, len);
        else
            fused_block_f64(f, out, at, len);
    }
}

/* Repeated operands of at most FUSED_BLOCK elements (a bias or a batch norm's shift over the
 * channels, a scalar), FUSED_TILES of them per call, are laid out once per call as tiles of
 * FUSED_BLOCK + period - 1 elements, tile[i] = operand[i % period]: the block at element `at`
 * reads tile + at % period directly, instead of copying the period into a block of its own. */
#define FUSED_TILES 8
#define FUSED_TILE_ELEMS (2 * FUSED_BLOCK)

/* Each instruction's register: one freed once its last reader has run (a store reads at the
 * end of the block, after every other instruction), the lowest free one taken. Never more than
 * SX_FUSED_MAX; a store gets none (-1). */
static void fused_regs(const sx_fused_prog *prog, int8_t *reg)
{
    int last[SX_FUSED_MAX];
    for (int k = 0; k < prog->n; k++)
        last[k] = -1;
    for (int k = 0; k < prog->n; k++) {
        const sx_fused_instr *in = &prog->ins[k];
        const int16_t s[3] = {in->a, in->b, in->c};
        for (int j = 0; j < sx__fused_sources(in->kind); j++)
            if (s[j] < 0)
                last[-1 - s[j]] = in->kind == SX_FUSED_STORE ? prog->n : k;
    }
    bool busy[SX_FUSED_MAX] = {false};
    for (int k = 0; k < prog->n; k++) {
        reg[k] = -1;
        if (prog->ins[k].kind == SX_FUSED_STORE)
            continue;
        int r = 0;
        while (busy[r])
            r++;
        reg[k] = (int8_t)r;
        busy[r] = true;
        /* the sources read for the last time here are free for the next instruction (not for
         * this one: no instruction writes over what it reads) */
        const sx_fused_instr *in = &prog->ins[k];
        const int16_t s[3] = {in->a, in->b, in->c};
        for (int j = 0; j < sx__fused_sources(in->kind); j++)
            if (s[j] < 0 && last[-1 - s[j]] == k)
                busy[reg[-1 - s[j]]] = false;
        if (last[k] < 0)
            busy[r] = false;
    }
}

/* Which instructions write their result straight into the operand a store puts it in, instead
 * of a register copied at the end of the block: those stored exactly once, into an operand no
 * other store writes and no later instruction reads, itself or under another operand's name (the
 * same memory) (the program reads old values: an operand is
 * overwritten only once nothing needs its old value; the instruction itself reads element i
 * before writing element i). Saves a copy per store and a register per block. */
static void fused_direct(const sx_fused_prog *prog, void *const *wops, int8_t *direct)
{
    const bool stores = wops != NULL;
    int n_stored[SX_FUSED_MAX] = {0}, writers[SX_FUSED_MAX_OPERANDS] = {0};
    for (int k = 0; k < prog->n; k++) {
        direct[k] = -1;
        const sx_fused_instr *in = &prog->ins[k];
        if (stores && in->kind == SX_FUSED_STORE) {
            n_stored[-1 - in->a]++;
            writers[in->b]++;
        }
    }
    for (int k = 0; stores && k < prog->n; k++) {
        const sx_fused_instr *in = &prog->ins[k];
        if (in->kind != SX_FUSED_STORE || n_stored[-1 - in->a] != 1 || writers[in->b] != 1)
            continue;
        const int src = -1 - in->a, op = in->b;
        bool read_after = false;
        for (int j = src + 1; j < prog->n && !read_after; j++) {
            const sx_fused_instr *r = &prog->ins[j];
            const int16_t s[3] = {r->a, r->b, r->c};
            for (int q = 0; r->kind != SX_FUSED_STORE && q < sx__fused_sources(r->kind); q++)
                read_after = read_after || (s[q] >= 0 && wops[s[q]] == wops[op]); /* or its alias */
        }
        if (!read_after)
            direct[src] = (int8_t)op;
    }
}

/* The program over all `size` elements, block by block (the pool's threads over blocks above
 * SX_PAR_MIN elements), into out, or (out NULL) by its stores into wops. */
static void fused_run(const sx_fused_prog *prog, int n_in, const void *const *ops,
                      void *const *wops, const int64_t *period, sx_tensor *out, sx_dtype dt,
                      int64_t size)
{
    _Alignas(64) double tiles[FUSED_TILES][FUSED_TILE_ELEMS]; /* room for either dtype */
    const void *tile[SX_FUSED_MAX_OPERANDS] = {NULL};
    const size_t esz = sx_dtype_size(dt);
    int used = 0;
    for (int i = 0; i < n_in && used < FUSED_TILES; i++) {
        const int64_t p = period[i];
        if (p < 1 || p > FUSED_BLOCK)
            continue;
        const int64_t len = FUSED_BLOCK + p - 1; /* <= FUSED_TILE_ELEMS */
        char *t = (char *)tiles[used++];
        /* one period, then doubling what is written */
        memcpy(t, ops[i], (size_t)p * esz);
        for (int64_t have = p; have < len;) {
            const int64_t more = have < len - have ? have : len - have;
            memcpy(t + (size_t)have * esz, t, (size_t)more * esz);
            have += more;
        }
        tile[i] = t;
    }
    int8_t reg[SX_FUSED_MAX], direct[SX_FUSED_MAX];
    fused_regs(prog, reg);
    fused_direct(prog, wops, direct);
    fused_ctx f = {prog, ops,    wops, period, tile,
                   reg,  direct, out,  size,   dt == SX_F32 ? fused_f32_kernel() : NULL};
    sx__par_range((size + FUSED_BLOCK - 1) / FUSED_BLOCK, SX_PAR_MIN / 2 / FUSED_BLOCK,
                  fused_blocks, &f);
}

/* Every field of every instruction, the one validator of fused programs (sx_tensor_fused_out,
 * sx_tensor_fused_update, the FUSED and update nodes' shape rules, the file reader): a known
 * kind and op (0 for fma, where and store), each source it reads an operand < n_in or an
 * earlier register that is not a store's, each source it does not read 0; a store only when
 * n_store > 0, from a register into an operand < n_store. (alpha is a value: any double.) */
sx_status sx__fused_check_stores(const char *who, const sx_fused_prog *p, int n_in, int n_store)
{
    if (p == NULL || p->n < 1 || p->n > SX_FUSED_MAX)
        return sx_error(SX_E_ARG, "%s: program with %d instructions (want 1..%d)", who,
                        p ? p->n : 0, SX_FUSED_MAX);
    if (n_in < 1 || n_in > SX_FUSED_MAX_OPERANDS)
        return sx_error(SX_E_ARG, "%s: program over %d operands (want 1..%d)", who, n_in,
                        SX_FUSED_MAX_OPERANDS);
    static const char *const kinds[] = {"map", "binary", "fma", "where", "store"};
    for (int k = 0; k < p->n; k++) {
        const sx_fused_instr *in = &p->ins[k];
        if (in->kind > SX_FUSED_STORE)
            return sx_error(SX_E_ARG, "%s: instruction %d has kind %d (want 0..%d)", who, k,
                            in->kind, SX_FUSED_STORE);
        int ops = in->kind == SX_FUSED_MAP      ? SX_MAP_COUNT
                  : in->kind == SX_FUSED_BINARY ? SX_BINARY_COUNT
                                                : 1;
        if (in->op >= ops)
            return sx_error(SX_E_ARG, "%s: instruction %d (%s) has op %d (want 0..%d)", who, k,
                            kinds[in->kind], in->op, ops - 1);
        const bool store = in->kind == SX_FUSED_STORE;
        if (store && (n_store == 0 || in->a >= 0 || in->b < 0 || in->b >= n_store))
            return sx_error(SX_E_ARG,
                            "%s: instruction %d stores source %d into operand %d (want a "
                            "register into an operand < %d)",
                            who, k, in->a, in->b, n_store);
        const int16_t s[3] = {in->a, in->b, in->c};
        const int srcs = sx__fused_sources(in->kind);
        for (int j = 0; j < 3; j++) {
            if (j < srcs && (s[j] >= n_in || (s[j] < 0 && -1 - s[j] >= k) ||
                             (s[j] < 0 && p->ins[-1 - s[j]].kind == SX_FUSED_STORE)))
                return sx_error(SX_E_ARG,
                                "%s: instruction %d (%s) reads source %c = %d, which is not "
                                "there (%d operands, %d earlier registers)",
                                who, k, kinds[in->kind], "abc"[j], s[j], n_in, k);
            if (j >= srcs && s[j] != 0 && !(store && j == 1))
                return sx_error(SX_E_ARG,
                                "%s: instruction %d (%s) has source %c = %d, which it does not "
                                "read (want 0)",
                                who, k, kinds[in->kind], "abc"[j], s[j]);
        }
    }
    return SX_OK;
}

sx_status sx__fused_check(const char *who, const sx_fused_prog *p, int n_in)
{
    return sx__fused_check_stores(who, p, n_in, 0);
}

/* The operands' pointers and periods (0: the program's size; m: element i reads operand
 * element i % m), after checking them against a program of `size` elements. */
static sx_status fused_operands(const char *who, int n_in, const sx_tensor *const *in,
                                const sx_tensor *like, int64_t size, const void **ops,
                                int64_t *period)
{
    for (int i = 0; i < n_in; i++) {
        SX_TRY(sx__check_tensor(who, "operand", in[i]));
        SX_TRY(sx__check_same_dtype(who, in[i], like));
        if (in[i]->size != size && (in[i]->size == 0 || size % in[i]->size != 0))
            return sx_error(SX_E_SHAPE,
                            "%s: operand %d has %lld elements, out %lld (want the same, or a "
                            "divisor)",
                            who, i, (long long)in[i]->size, (long long)size);
        ops[i] = in[i]->data;
        period[i] = in[i]->size == size ? 0 : in[i]->size;
    }
    return SX_OK;
}

static bool overlap(const sx_tensor *a, const sx_tensor *b)
{
    const char *pa = a->data, *pb = b->data;
    const size_t na = (size_t)a->size * sx_dtype_size(a->dtype);
    const size_t nb = (size_t)b->size * sx_dtype_size(b->dtype);
    return pa < pb + nb && pb < pa + na;
}

sx_status sx_tensor_fused_update(const sx_fused_prog *prog, int n_in, sx_tensor *const *in)
{
    const char *who = "sx_tensor_fused_update";
    if (n_in < 1 || n_in > SX_FUSED_MAX_OPERANDS || in == NULL)
        return sx_error(SX_E_ARG, "%s: %d operands (want 1..%d)", who, n_in, SX_FUSED_MAX_OPERANDS);
    SX_TRY(sx__fused_check_stores(who, prog, n_in, n_in));
    SX_TRY(sx__check_tensor(who, "operand 0", in[0]));
    const sx_dtype dt = in[0]->dtype;
    const int64_t size = in[0]->size;
    const void *ops[SX_FUSED_MAX_OPERANDS];
    void *wops[SX_FUSED_MAX_OPERANDS];
    int64_t period[SX_FUSED_MAX_OPERANDS];
    SX_TRY(fused_operands(who, n_in, (const sx_tensor *const *)in, in[0], size, ops, period));
    for (int k = 0; k < prog->n; k++) {
        const sx_fused_instr *ins = &prog->ins[k];
        if (ins->kind != SX_FUSED_STORE)
            continue;
        const sx_tensor *w = in[ins->b];
        if (w->size != size)
            return sx_error(SX_E_ARG,
                            "%s: instruction %d stores into operand %d of %lld elements "
                            "(want %lld)",
                            who, k, ins->b, (long long)w->size, (long long)size);
        for (int i = 0; i < n_in; i++)
            if (i != ins->b && in[i]->data != w->data && overlap(in[i], w))
                return sx_error(SX_E_ARG,
                                "%s: operand %d, which instruction %d writes, "
                                "overlaps operand %d",
                                who, ins->b, k, i);
    }
    for (int i = 0; i < n_in; i++)
        wops[i] = in[i]->data;
    if (!sx__fused_known_run(prog, n_in, wops, period, dt, size)) /* else the interpreter */
        fused_run(prog, n_in, ops, wops, period, NULL, dt, size);
    return SX_OK;
}

sx_status sx_tensor_fused_out(const sx_fused_prog *prog, int n_in, const sx_tensor *const *in,
                              sx_tensor *out)
{
    const char *who = "sx_tensor_fused_out";
    if (n_in < 1 || n_in > SX_FUSED_MAX_OPERANDS || in == NULL)
        return sx_error(SX_E_ARG, "%s: %d operands (want 1..%d)", who, n_in, SX_FUSED_MAX_OPERANDS);
    SX_TRY(sx__fused_check(who, prog, n_in));
    SX_TRY(sx__check_tensor(who, "out", out));
    const void *ops[SX_FUSED_MAX_OPERANDS];
    int64_t period[SX_FUSED_MAX_OPERANDS];
    SX_TRY(fused_operands(who, n_in, in, out, out->size, ops, period));
    fused_run(prog, n_in, ops, NULL, period, out, out->dtype, out->size);
    return SX_OK;
}
