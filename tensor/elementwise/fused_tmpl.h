/* fused_tmpl.h: the fused-program interpreter for one block of one dtype (T, SFX); included by
 * fused.c (for f32 once per instruction set). Registers are block-sized arrays; broadcast operands
 * (one element, or periodic: a bias over the channels) are read from the call's tiles, or, past
 * FUSED_TILES of them or with a period above FUSED_BLOCK, copied into block-sized arrays; every
 * instruction is one switch then one vectorisable loop over the block. Map rows run as in
 * map_tmpl.h: a scan for far arguments of sin/cos/tan (dead code for other rows), then the vector
 * loop, or a scalar loop with vm_exact set when the block has a far one. */
#define FU_CAT_(a, b) a##_##b
#define FU_CAT(a, b) FU_CAT_(a, b)

/* b[i] = v[(at + i) % p] for i < len, by copies: the rest of the period at r = at % p, one
 * period, then doubling what is written. */
static void FU_CAT(fused_periodic, SFX)(T *b, const T *v, int64_t p, int64_t at, int len)
{
    const int64_t r = at % p;
    int n = (int)(p - r < len ? p - r : len);
    memcpy(b, v + r, (size_t)n * sizeof(T));
    if (n < len) {
        int first = (int)(p < len - n ? p : len - n);
        memcpy(b + n, v, (size_t)first * sizeof(T));
        /* b[n .. n + have) holds whole periods (have = p, 2p, 4p, ...) until the last copy */
        int have = first;
        while (n + have < len) {
            int more = have < len - n - have ? have : len - n - have;
            memcpy(b + n + have, b + n, (size_t)more * sizeof(T));
            have += more;
        }
    }
}

/* The stores of a block, in program order, after every other instruction has run. */
static void FU_CAT(fused_stores, SFX)(const fused_ctx *f, T (*regs)[FUSED_BLOCK], int64_t at,
                                      int len)
{
    for (int k = 0; k < f->prog->n; k++) {
        const sx_fused_instr *ins = &f->prog->ins[k];
        if (ins->kind == SX_FUSED_STORE && f->direct[-1 - ins->a] < 0)
            memcpy((T *)f->wops[ins->b] + at, regs[f->reg[-1 - ins->a]], (size_t)len * sizeof(T));
    }
}

/* out[at .. at + len) = the program over elements at .. at + len of the operands (out NULL: a
 * program of stores, sx_tensor_fused_update; its stores run after every other instruction, into
 * wops). tile[s], when not NULL, holds repeated operand s laid out for any block (fused.c's
 * fused_run): element i of the block is tile[s][at % period + i]. Instruction k's register is
 * regs[reg[k]] (fused_run's allocation: registers are reused once read for the last time). */
static void FU_CAT(fused_block, SFX)(const fused_ctx *f, T *out, int64_t at, int len)
{
    const sx_fused_prog *prog = f->prog;
    const void *const *ops = f->ops;
    const int64_t *period = f->period;
    const void *const *tile = f->tile;
    const int8_t *reg = f->reg;
    T regs[SX_FUSED_MAX][FUSED_BLOCK];
    T bcast[8][FUSED_BLOCK];
    for (int k = 0; k < prog->n; k++) {
        const sx_fused_instr *ins = &prog->ins[k];
        if (ins->kind == SX_FUSED_STORE)
            continue;
        int16_t s3[3] = {ins->a, ins->b, ins->c};
        const T *src[3] = {NULL, NULL, NULL};
        int bslot = 0;
        /* only the sources this kind reads: the others are never looked at (the program was
         * checked by sx__fused_check, which also wants them 0) */
        const int srcs = sx__fused_sources(ins->kind);
        for (int j = 0; j < srcs; j++) {
            int16_t s = s3[j];
            if (s >= 0 && tile[s] != NULL) {
                src[j] = (const T *)tile[s] + at % period[s];
            } else if (s >= 0 && period[s] == 1) {
                /* broadcast a single-element operand through a stack block */
                T v = *(const T *)ops[s];
                T *b = bcast[bslot++];
                for (int i = 0; i < len; i++)
                    b[i] = v;
                src[j] = b;
            } else if (s >= 0 && period[s] > 1 && at % period[s] + len <= period[s]) {
                /* a long period that this block does not wrap around: read in place */
                src[j] = (const T *)ops[s] + at % period[s];
            } else if (s >= 0 && period[s] > 1) {
                /* a periodic operand (element i is operand[i % period]) through a stack block */
                T *b = bcast[bslot++];
                FU_CAT(fused_periodic, SFX)(b, ops[s], period[s], at, len);
                src[j] = b;
            } else {
                src[j] = s >= 0                   ? (const T *)ops[s] + at
                         : f->direct[-1 - s] >= 0 ? (const T *)f->wops[f->direct[-1 - s]] + at
                                                  : regs[reg[-1 - s]];
            }
        }
        T *dst = out != NULL && k == prog->n - 1 ? out + at
                 : f->direct[k] >= 0             ? (T *)f->wops[f->direct[k]] + at
                                                 : regs[reg[k]];
        const T *xa = src[0], *xb = src[1], *xc = src[2];
        const T alpha_ = (T)ins->alpha;
        (void)alpha_;
        switch ((sx_fused_kind)ins->kind) {
        case SX_FUSED_MAP:
            switch ((sx_map_op)ins->op) {
#define X(name, lname, expr, ...)                                                                  \
    case SX_MAP_##name: {                                                                          \
        const T a = alpha_;                                                                        \
        (void)a;                                                                                   \
        VM_MAP_CASE(T, expr, xa, dst, len)                                                         \
    }
#include "sx_map.def"
#undef X
            case SX_MAP_COUNT:
                break;
            }
            break;
        case SX_FUSED_BINARY:
            switch ((sx_binary_op)ins->op) {
#define X(name, lname, expr, ...)                                                                  \
    case SX_BINARY_##name:                                                                         \
        for (int i = 0; i < len; i++) {                                                            \
            const T a = xa[i], b = xb[i];                                                          \
            dst[i] = (T)(expr);                                                                    \
        }                                                                                          \
        break;
#include "sx_binary.def"
#undef X
            case SX_BINARY_COUNT:
                break;
            }
            break;
        case SX_FUSED_FMA:
            for (int i = 0; i < len; i++)
                dst[i] = xa[i] * xb[i] + xc[i];
            break;
        case SX_FUSED_WHERE:
            for (int i = 0; i < len; i++)
                dst[i] = xa[i] != 0 ? xb[i] : xc[i];
            break;
        case SX_FUSED_STORE:
            break;
        }
    }
    if (out == NULL)
        FU_CAT(fused_stores, SFX)(f, regs, at, len);
}

#undef FU_CAT
#undef FU_CAT_
