/* fused.c: element-wise chain fusion. A short program of map/binary/fma/where instructions runs
 * over blocks of elements that stay in cache (registers are block-sized arrays on the stack),
 * so a chain of k element-wise ops reads its operands once and writes its result once instead
 * of k times. Each instruction's loop is a plain loop the compiler vectorises; the expressions
 * are the rows of sx_map.def and sx_binary.def, so results match the unfused kernels exactly. */
#include "tensor_impl.h"

#include <tgmath.h>

#define FUSED_BLOCK 512

#define T float
#define SFX f32
#include "fused_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "fused_tmpl.h"
#undef T
#undef SFX

static sx_status check_prog(const char *who, const sx_fused_prog *p, int n_in)
{
    if (p == NULL || p->n < 1 || p->n > SX_FUSED_MAX)
        return sx_error(SX_E_ARG, "%s: program with %d instructions (want 1..%d)", who,
                        p ? p->n : 0, SX_FUSED_MAX);
    for (int k = 0; k < p->n; k++) {
        const sx_fused_instr *in = &p->ins[k];
        int srcs = in->kind == SX_FUSED_MAP ? 1 : in->kind == SX_FUSED_BINARY ? 2 : 3;
        if (in->kind > SX_FUSED_WHERE || (in->kind == SX_FUSED_MAP && in->op >= SX_MAP_COUNT) ||
            (in->kind == SX_FUSED_BINARY && in->op >= SX_BINARY_COUNT))
            return sx_error(SX_E_ARG, "%s: instruction %d is not valid", who, k);
        int16_t s[3] = {in->a, in->b, in->c};
        for (int j = 0; j < srcs; j++)
            if (s[j] >= n_in || (s[j] < 0 && -1 - s[j] >= k))
                return sx_error(SX_E_ARG, "%s: instruction %d reads source %d, which is not there",
                                who, k, s[j]);
    }
    return SX_OK;
}

sx_status sx_tensor_fused_out(const sx_fused_prog *prog, int n_in, const sx_tensor *const *in,
                              sx_tensor *out)
{
    const char *who = "sx_tensor_fused_out";
    if (n_in < 0 || n_in > 64 || (n_in > 0 && in == NULL))
        return sx_error(SX_E_ARG, "%s: %d operands (want 0..64)", who, n_in);
    SX_TRY(check_prog(who, prog, n_in));
    SX_TRY(sx__check_tensor(who, "out", out));
    for (int i = 0; i < n_in; i++) {
        SX_TRY(sx__check_tensor(who, "operand", in[i]));
        SX_TRY(sx__check_same_dtype(who, in[i], out));
        if (in[i]->size != out->size && in[i]->size != 1)
            return sx_error(SX_E_SHAPE, "%s: operand %d has %lld elements, out %lld", who, i,
                            (long long)in[i]->size, (long long)out->size);
    }
    const void *ops[64];
    bool scalar[64];
    for (int i = 0; i < n_in; i++) {
        ops[i] = in[i]->data;
        scalar[i] = in[i]->size == 1 && out->size != 1;
    }
    if (out->dtype == SX_F32)
        fused_f32(prog, ops, scalar, out->data, out->size);
    else
        fused_f64(prog, ops, scalar, out->data, out->size);
    return SX_OK;
}
