/* binary_tmpl.h: the broadcasting kernels of binary.c for one dtype; included with T and SFX
 * defined. One row kernel per row of sx_binary.def, specialised on which operand walks (inner
 * stride 1) and which stays put (stride 0) so that each case is a plain loop the compiler
 * vectorises; plus the fma and copy rows and the driver that walks a broadcast plan. */
#define BN_CAT3_(a, b, c) a##_##b##_##c
#define BN_CAT3(a, b, c) BN_CAT3_(a, b, c)
#define BN_CAT_(a, b) a##_##b
#define BN_CAT(a, b) BN_CAT_(a, b)

/* po[i] = pa[i * sa] op pb[i * sb] for i < n, with sa, sb in {0, 1}. po may be pa or pb when
 * that operand walks (in place): every element is read before it is written. */
#define X(name, lname, expr, ...)                                                                  \
    static void BN_CAT3(bin, name, SFX)(int64_t n, const T *pa, int64_t sa, const T *pb,           \
                                        int64_t sb, T *po)                                         \
    {                                                                                              \
        if (sa && sb) {                                                                            \
            for (int64_t i = 0; i < n; i++) {                                                      \
                const T a = pa[i], b = pb[i];                                                      \
                po[i] = (T)(expr);                                                                 \
            }                                                                                      \
        } else if (sa) {                                                                           \
            const T b = *pb;                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                      \
                const T a = pa[i];                                                                 \
                po[i] = (T)(expr);                                                                 \
            }                                                                                      \
        } else if (sb) {                                                                           \
            const T a = *pa;                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                      \
                const T b = pb[i];                                                                 \
                po[i] = (T)(expr);                                                                 \
            }                                                                                      \
        } else {                                                                                   \
            const T a = *pa, b = *pb;                                                              \
            const T v = (T)(expr);                                                                 \
            for (int64_t i = 0; i < n; i++)                                                        \
                po[i] = v;                                                                         \
        }                                                                                          \
    }
#include "sx_binary.def"
#undef X

typedef void (*BN_CAT(bin_row, SFX))(int64_t n, const T *pa, int64_t sa, const T *pb, int64_t sb,
                                     T *po);

static const BN_CAT(bin_row, SFX) BN_CAT(bin_rows, SFX)[] = {
#define X(name, lname, expr, ...) BN_CAT3(bin, name, SFX),
#include "sx_binary.def"
#undef X
};
_Static_assert(sizeof BN_CAT(bin_rows, SFX) / sizeof BN_CAT(bin_rows, SFX)[0] == SX_BINARY_COUNT,
               "one row kernel per binary op");

/* po[i] = pa[i * sa] * pb[i * sb] + pc[i * sc]. The all-walking case and the two common
 * scale-and-shift cases get their own loops; the rest use the strided form, which GCC
 * versions on the strides. */
static void BN_CAT(fma_row, SFX)(int64_t n, const T *pa, int64_t sa, const T *pb, int64_t sb,
                                 const T *pc, int64_t sc, T *po)
{
    if (sa && sb && sc) {
        for (int64_t i = 0; i < n; i++)
            po[i] = pa[i] * pb[i] + pc[i];
    } else if (sa && !sb && !sc) {
        const T b = *pb, c = *pc;
        for (int64_t i = 0; i < n; i++)
            po[i] = pa[i] * b + c;
    } else if (sa && !sb && sc) {
        const T b = *pb;
        for (int64_t i = 0; i < n; i++)
            po[i] = pa[i] * b + pc[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            po[i] = pa[i * sa] * pb[i * sb] + pc[i * sc];
    }
}

/* po[i] = px[i * sx]: a copy or a fill. */
static void BN_CAT(copy_row, SFX)(int64_t n, const T *px, int64_t sx, T *po)
{
    if (sx) {
        if (po != px)
            memcpy(po, px, (size_t)n * sizeof(T));
    } else {
        const T v = *px;
        for (int64_t i = 0; i < n; i++)
            po[i] = v;
    }
}

/* Compute the output elements [e0, e1) (flat, row-major) of plan p: walk the merged axes with
 * an odometer, one call of the row kernel per stretch of the innermost axis. */
static void BN_CAT(run, SFX)(const bplan *p, int kind, BN_CAT(bin_row, SFX) f, const T *const *in,
                             T *out, int64_t e0, int64_t e1)
{
    const int m = p->m;
    const int64_t len = p->dim[m - 1];
    int64_t idx[SX_MAX_RANK], off[3] = {0, 0, 0};
    int64_t rem = e0;
    for (int d = m - 1; d >= 0; d--) {
        idx[d] = rem % p->dim[d];
        rem /= p->dim[d];
        for (int k = 0; k < p->nin; k++)
            off[k] += idx[d] * p->st[k][d];
    }
    const int64_t s0 = p->st[0][m - 1], s1 = p->st[1][m - 1], s2 = p->st[2][m - 1];
    int64_t e = e0;
    while (e < e1) {
        int64_t n = len - idx[m - 1];
        if (n > e1 - e)
            n = e1 - e;
        switch (kind) {
        case KIND_BINARY:
            f(n, in[0] + off[0], s0, in[1] + off[1], s1, out + e);
            break;
        case KIND_FMA:
            BN_CAT(fma_row, SFX)
            (n, in[0] + off[0], s0, in[1] + off[1], s1, in[2] + off[2], s2, out + e);
            break;
        default:
            BN_CAT(copy_row, SFX)(n, in[0] + off[0], s0, out + e);
            break;
        }
        e += n;
        if (e >= e1)
            break;
        /* The row ended at the end of the innermost axis: carry into the outer axes. */
        for (int k = 0; k < p->nin; k++)
            off[k] += (n - len) * p->st[k][m - 1];
        idx[m - 1] = 0;
        for (int d = m - 2; d >= 0; d--) {
            for (int k = 0; k < p->nin; k++)
                off[k] += p->st[k][d];
            if (++idx[d] < p->dim[d])
                break;
            for (int k = 0; k < p->nin; k++)
                off[k] -= p->dim[d] * p->st[k][d];
            idx[d] = 0;
        }
    }
}

typedef struct BN_CAT(drive_ctx, SFX) {
    const bplan *p;
    int kind;
    BN_CAT(bin_row, SFX) f;
    const T *in[3];
    T *out;
    int64_t total, blk;
} BN_CAT(drive_ctx, SFX);

/* The blocks [b0, b1) of blk elements. */
static void BN_CAT(drive_blocks, SFX)(void *ctx, int64_t b0, int64_t b1)
{
    const BN_CAT(drive_ctx, SFX) *d = ctx;
    const int64_t e1 = b1 * d->blk < d->total ? b1 * d->blk : d->total;
    BN_CAT(run, SFX)(d->p, d->kind, d->f, d->in, d->out, b0 * d->blk, e1);
}

/* Run plan p over all `total` output elements: in blocks of `blk` elements, spread over the
 * pool's threads when total >= thr (element-wise, so the result never depends on the
 * schedule). */
static void BN_CAT(drive, SFX)(const bplan *p, int kind, int op, const void *const *vin, void *vout,
                               int64_t total, int64_t thr)
{
    BN_CAT(drive_ctx, SFX)
    d = {p,
         kind,
         kind == KIND_BINARY ? BN_CAT(bin_rows, SFX)[op] : NULL,
         {vin[0], p->nin > 1 ? vin[1] : vin[0], p->nin > 2 ? vin[2] : vin[0]},
         vout,
         total,
         thr / 4 > 1024 ? thr / 4 : 1024};
    const int64_t nblk = (total + d.blk - 1) / d.blk;
    if (nblk <= 1 || total < thr) {
        BN_CAT(run, SFX)(p, kind, d.f, d.in, d.out, 0, total);
        return;
    }
    sx__par_range(nblk, 1, BN_CAT(drive_blocks, SFX), &d);
}

#undef BN_CAT
#undef BN_CAT_
#undef BN_CAT3
#undef BN_CAT3_
