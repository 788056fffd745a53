/* fused.c: element-wise chain fusion. A short program of map/binary/fma/where instructions runs
 * over blocks of elements that stay in cache (registers are block-sized arrays on the stack),
 * so a chain of k element-wise ops reads its operands once and writes its result once instead
 * of k times. Each instruction's loop is a plain loop the compiler vectorises; the expressions
 * are the rows of sx_map.def and sx_binary.def (with vmath.h's f32 functions, and the f32
 * interpreter built per instruction set like map.c's), so results match the unfused kernels
 * exactly. */
#include "tensor_impl.h"
#include "vmath.h"

#include <string.h>
#include <tgmath.h>

#define FUSED_BLOCK 512

#define ISA_TMPL "elementwise/fused_tmpl.h"
#include "isa_each.h"
#undef ISA_TMPL
#define T double
#define SFX f64
#include "fused_tmpl.h"
#undef T
#undef SFX

typedef void fused_f32_fn(const sx_fused_prog *prog, const void *const *ops, const int64_t *period,
                          const void *const *tile, float *out, int64_t at, int len);

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

typedef struct fused_ctx {
    const sx_fused_prog *prog;
    const void *const *ops;
    const int64_t *period;
    const void *const *tile;
    sx_tensor *out;
    fused_f32_fn *k32;
} fused_ctx;

/* The blocks [b0, b1) of FUSED_BLOCK elements. */
static void fused_blocks(void *ctx, int64_t b0, int64_t b1)
{
    const fused_ctx *f = ctx;
    const int64_t n = f->out->size;
    for (int64_t bk = b0; bk < b1; bk++) {
        const int64_t at = bk * FUSED_BLOCK;
        const int len = (int)(n - at < FUSED_BLOCK ? n - at : FUSED_BLOCK);
        if (f->k32 != NULL)
            f->k32(f->prog, f->ops, f->period, f->tile, f->out->data, at, len);
        else
            fused_block_f64(f->prog, f->ops, f->period, f->tile, f->out->data, at, len);
    }
}

/* Repeated operands of at most FUSED_BLOCK elements (a bias or a batch norm's shift over the
 * channels, a scalar), FUSED_TILES of them per call, are laid out once per call as tiles of
 * FUSED_BLOCK + period - 1 elements, tile[i] = operand[i % period]: the block at element `at`
 * reads tile + at % period directly, instead of copying the period into a block of its own. */
#define FUSED_TILES 8
#define FUSED_TILE_ELEMS (2 * FUSED_BLOCK)

/* The program over all n elements, block by block (the pool's threads over blocks above
 * SX_PAR_MIN elements). */
static void fused_run(const sx_fused_prog *prog, int n_in, const void *const *ops,
                      const int64_t *period, sx_tensor *out)
{
    _Alignas(64) double tiles[FUSED_TILES][FUSED_TILE_ELEMS]; /* room for either dtype */
    const void *tile[SX_FUSED_MAX_OPERANDS] = {NULL};
    const size_t esz = sx_dtype_size(out->dtype);
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
    fused_ctx f = {prog, ops, period, tile, out, out->dtype == SX_F32 ? fused_f32_kernel() : NULL};
    sx__par_range((out->size + FUSED_BLOCK - 1) / FUSED_BLOCK, SX_PAR_MIN / 2 / FUSED_BLOCK,
                  fused_blocks, &f);
}

/* Every field of every instruction, the one validator of fused programs (sx_tensor_fused_out,
 * the FUSED node's shape rule, the file reader): a known kind and op (0 for fma and where),
 * each source it reads an operand < n_in or an earlier register, each source it does not read
 * 0. (alpha is a value: any double.) */
sx_status sx__fused_check(const char *who, const sx_fused_prog *p, int n_in)
{
    if (p == NULL || p->n < 1 || p->n > SX_FUSED_MAX)
        return sx_error(SX_E_ARG, "%s: program with %d instructions (want 1..%d)", who,
                        p ? p->n : 0, SX_FUSED_MAX);
    if (n_in < 1 || n_in > SX_FUSED_MAX_OPERANDS)
        return sx_error(SX_E_ARG, "%s: program over %d operands (want 1..%d)", who, n_in,
                        SX_FUSED_MAX_OPERANDS);
    static const char *const kinds[] = {"map", "binary", "fma", "where"};
    for (int k = 0; k < p->n; k++) {
        const sx_fused_instr *in = &p->ins[k];
        int ops = in->kind == SX_FUSED_MAP      ? SX_MAP_COUNT
                  : in->kind == SX_FUSED_BINARY ? SX_BINARY_COUNT
                                                : 1;
        if (in->kind > SX_FUSED_WHERE)
            return sx_error(SX_E_ARG, "%s: instruction %d has kind %d (want 0..%d)", who, k,
                            in->kind, SX_FUSED_WHERE);
        if (in->op >= ops)
            return sx_error(SX_E_ARG, "%s: instruction %d (%s) has op %d (want 0..%d)", who, k,
                            kinds[in->kind], in->op, ops - 1);
        const int16_t s[3] = {in->a, in->b, in->c};
        const int srcs = sx__fused_sources(in->kind);
        for (int j = 0; j < 3; j++) {
            if (j < srcs && (s[j] >= n_in || (s[j] < 0 && -1 - s[j] >= k)))
                return sx_error(SX_E_ARG,
                                "%s: instruction %d (%s) reads source %c = %d, which is not "
                                "there (%d operands, %d earlier registers)",
                                who, k, kinds[in->kind], "abc"[j], s[j], n_in, k);
            if (j >= srcs && s[j] != 0)
                return sx_error(SX_E_ARG,
                                "%s: instruction %d (%s) has source %c = %d, which it does not "
                                "read (want 0)",
                                who, k, kinds[in->kind], "abc"[j], s[j]);
        }
    }
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
    for (int i = 0; i < n_in; i++) {
        SX_TRY(sx__check_tensor(who, "operand", in[i]));
        SX_TRY(sx__check_same_dtype(who, in[i], out));
        if (in[i]->size != out->size && (in[i]->size == 0 || out->size % in[i]->size != 0))
            return sx_error(SX_E_SHAPE,
                            "%s: operand %d has %lld elements, out %lld (want the same, or a "
                            "divisor)",
                            who, i, (long long)in[i]->size, (long long)out->size);
    }
    const void *ops[SX_FUSED_MAX_OPERANDS];
    int64_t
        period[SX_FUSED_MAX_OPERANDS]; /* 0: the output's size; m: element i reads operand[i % m] */
    for (int i = 0; i < n_in; i++) {
        ops[i] = in[i]->data;
        period[i] = in[i]->size == out->size ? 0 : in[i]->size;
    }
    fused_run(prog, n_in, ops, period, out);
    return SX_OK;
}
