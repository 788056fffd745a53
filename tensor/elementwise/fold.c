/* fold.c: reductions (sum, mean, prod, max, min, argmax, argmin, l1/l2 norms, logsumexp) over
 * any set of axes in one pass. The idea: drop size-1 axes and merge adjacent axes
 * that are both reduced or both kept; then either the innermost merged axis is reduced and each
 * output folds contiguous runs (case A), or it is kept and whole contiguous rows are folded into
 * a row of accumulators (case B). */
#include "tensor_impl.h"
#include "vmath.h"

#include <tgmath.h>

static const char *const fold_names[] = {
#define X(name, str) str,
#include "sx_fold.def"
#undef X
};
_Static_assert(sizeof fold_names / sizeof fold_names[0] == SX_FOLD_COUNT, "one name per fold op");

const char *sx_fold_name(sx_fold_op op)
{
    return (unsigned)op < SX_FOLD_COUNT ? fold_names[op] : "bad-fold-op";
}

/* Accuracy and determinism. Sums, norms, products and the sums of logsumexp are carried in
 * double for both dtypes, with short stretches in the dtype where that keeps f32 at vector
 * speed. Contiguous runs are summed pairwise: blocks of 128 elements in 8 independent lanes of
 * 16 terms each (in the dtype; in double for squares), the block sums added in double, halves
 * above; so an f32 sum of millions of elements is within about one f32 rounding of the exact
 * sum, and f64 errors grow with log(n). Whole-row sums (innermost axis kept) add groups of 8
 * rows pairwise into a row of partial sums in the dtype and move it into double accumulators
 * every B_BLOCK = 32 rows: each dtype partial holds 32 terms (4 sequential additions of
 * depth-3 trees: f32 error at most about 7 * 2^-24 times the sum of the magnitudes, however many
 * rows), the double sum of the blocks adds nothing measurable; NumPy instead adds rows one by one
 * into the f32 result (error growing with the number of rows). The reduction of every output is cut
 * into chunks whose size depends only on the shape (never on the thread count); chunk partials are
 * combined in chunk order. The pool runs over outputs (or tiles of outputs) when there are many,
 * else over the chunks of each output: either way the result is bit-identical for any number of
 * threads.
 */

/* ---------------------------------------------------------------- the plan */

/* x's shape after dropping size-1 axes and merging adjacent axes of the same kind, split into
 * the kept axes (kdim/kst, outer to inner; their product K is the output size) and the reduced
 * axes (rdim/rst; product R). Strides are in elements of x. */
typedef struct fplan {
    int nk, nr;
    int64_t kdim[SX_MAX_RANK], kst[SX_MAX_RANK];
    int64_t rdim[SX_MAX_RANK], rst[SX_MAX_RANK];
    int64_t K, R;
    bool inner_reduced; /* the innermost merged axis is reduced (case A) or kept (case B) */
} fplan;

static void fplan_make(int rank, const int64_t *shape, unsigned axes, fplan *p)
{
    int m = 0;
    int64_t dim[SX_MAX_RANK], st[SX_MAX_RANK];
    bool red[SX_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        bool r = (axes >> i) & 1u;
        if (shape[i] == 1)
            continue;
        if (m > 0 && red[m - 1] == r) {
            dim[m - 1] *= shape[i];
        } else {
            dim[m] = shape[i];
            red[m] = r;
            m++;
        }
    }
    int64_t s = 1;
    for (int i = m - 1; i >= 0; i--) {
        st[i] = s;
        s *= dim[i];
    }
    p->nk = p->nr = 0;
    p->K = p->R = 1;
    for (int i = 0; i < m; i++) {
        if (red[i]) {
            p->rdim[p->nr] = dim[i];
            p->rst[p->nr++] = st[i];
            p->R *= dim[i];
        } else {
            p->kdim[p->nk] = dim[i];
            p->kst[p->nk++] = st[i];
            p->K *= dim[i];
        }
    }
    p->inner_reduced = m > 0 && red[m - 1];
}

/* The x offset of flat index `flat` over n axes (dims, strides), row-major. */
static int64_t offset_of(int64_t flat, int n, const int64_t *dims, const int64_t *st)
{
    int64_t off = 0;
    for (int d = n - 1; d > 0; d--) {
        off += flat % dims[d] * st[d];
        flat /= dims[d];
    }
    return n > 0 ? off + flat * st[0] : 0;
}

/* Chunks of one reduction: case A cuts the R reduced positions of an output into at most NCH_A
 * chunks of at least CHUNK_A elements. Case B folds TILE adjacent outputs at a time (a task;
 * TILE_WIDE for sums without chunks) and cuts the R rows into chunks only when there are fewer than
 * B_TASKS tasks: at most NCH_B chunks of at least CHUNK_B elements of a tile, each a whole number
 * of B_BLOCK-row blocks (the unit of f32 sums, see b_chunk). Both depend on the shape only. */
#define CHUNK_A 4096
#define NCH_A 64
#define CHUNK_B 8192
#define NCH_B 16
#define TILE 1024
#define TILE_WIDE 4096 /* sums without row chunks take wider tiles: longer row streams */
#define B_BLOCK 32
#define B_TASKS 64

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int64_t a_chunks(int64_t R, int64_t *size)
{
    int64_t ch = ceil_div(R, NCH_A);
    *size = ch > CHUNK_A ? ch : CHUNK_A;
    return ceil_div(R, *size);
}

/* Case B: the number of tasks (tiles of w outputs) and of row chunks per task. */
static int64_t b_tasks(const fplan *p, int64_t w)
{
    const int64_t C = p->kdim[p->nk - 1];
    return p->K / C * ceil_div(C, w);
}

static int64_t b_chunks(const fplan *p, int64_t *rows)
{
    const int64_t C = p->kdim[p->nk - 1], w = C < TILE ? C : TILE;
    *rows = p->R;
    if (b_tasks(p, TILE) >= B_TASKS)
        return 1;
    int64_t a = ceil_div(CHUNK_B, w), b = ceil_div(p->R, NCH_B);
    *rows = ceil_div(a > b ? a : b, B_BLOCK) * B_BLOCK;
    return ceil_div(p->R, *rows);
}

/* ---------------------------------------------------------------- accumulators */

/* What is accumulated: the element transforms of the sums, the product, the extremes. */
typedef enum {
    RK_SUM,
    RK_ABS,
    RK_SQR,
    RK_EXP, /* sum of exp(x - shift) */
    RK_PROD,
    RK_MAX,
    RK_MIN,
    RK_ARGMAX,
    RK_ARGMIN
} rkind;

/* A partial result: the value (a sum, product or extreme, in double) and, for argmax/argmin,
 * the flat reduced index of the extreme (-1 while nothing has been seen). */
typedef struct facc {
    double v;
    int64_t i;
} facc;

/* NaN-propagating selection (as in sx_binary.def): the new value v wins when it is larger
 * (smaller) or NaN; once the accumulator is NaN no comparison can replace it. */
#define SEL_MAX(v, m) (((v) > (m) || (v) != (v)) ? (v) : (m))
#define SEL_MIN(v, m) (((v) < (m) || (v) != (v)) ? (v) : (m))
/* For argmax/argmin, a later v replaces the current extreme m only when strictly better, or
 * when v is the first NaN: ties and later NaNs keep the first index. */
#define ARG_BETTER_MAX(v, m) ((v) > (m) || ((v) != (v) && (m) == (m)))
#define ARG_BETTER_MIN(v, m) ((v) < (m) || ((v) != (v) && (m) == (m)))

static rkind fold_kind(sx_fold_op op)
{
    switch (op) {
    case SX_FOLD_SUM:
    case SX_FOLD_MEAN:
        return RK_SUM;
    case SX_FOLD_PROD:
        return RK_PROD;
    case SX_FOLD_MAX:
    case SX_FOLD_LOGSUMEXP: /* first pass */
        return RK_MAX;
    case SX_FOLD_MIN:
        return RK_MIN;
    case SX_FOLD_ARGMAX:
        return RK_ARGMAX;
    case SX_FOLD_ARGMIN:
        return RK_ARGMIN;
    case SX_FOLD_L1NORM:
        return RK_ABS;
    case SX_FOLD_L2NORM:
        return RK_SQR;
    case SX_FOLD_COUNT:
        break;
    }
    return RK_SUM;
}

static facc facc_identity(rkind rk)
{
    switch (rk) {
    case RK_PROD:
        return (facc){1, -1};
    case RK_MAX:
    case RK_ARGMAX:
        return (facc){-(double)INFINITY, -1};
    case RK_MIN:
    case RK_ARGMIN:
        return (facc){(double)INFINITY, -1};
    case RK_SUM:
    case RK_ABS:
    case RK_SQR:
    case RK_EXP:
        break;
    }
    return (facc){0, -1};
}

/* Combine the partial results of two consecutive pieces, a before b. */
static facc facc_combine(rkind rk, facc a, facc b)
{
    switch (rk) {
    case RK_SUM:
    case RK_ABS:
    case RK_SQR:
    case RK_EXP:
        a.v += b.v;
        return a;
    case RK_PROD:
        a.v *= b.v;
        return a;
    case RK_MAX:
        a.v = SEL_MAX(b.v, a.v);
        return a;
    case RK_MIN:
        a.v = SEL_MIN(b.v, a.v);
        return a;
    case RK_ARGMAX:
        return b.i >= 0 && (a.i < 0 || ARG_BETTER_MAX(b.v, a.v)) ? b : a;
    case RK_ARGMIN:
        return b.i >= 0 && (a.i < 0 || ARG_BETTER_MIN(b.v, a.v)) ? b : a;
    }
    return a;
}

static bool rk_arg(rkind rk)
{
    return rk == RK_ARGMAX || rk == RK_ARGMIN;
}

/* The identity in acc (and -1 in idx, which only argmax/argmin use). */
static void tile_identity(rkind rk, int64_t n, double *acc, int64_t *idx)
{
    const double e = facc_identity(rk).v;
    for (int64_t j = 0; j < n; j++)
        acc[j] = e;
    if (rk_arg(rk))
        for (int64_t j = 0; j < n; j++)
            idx[j] = -1;
}

/* acc/idx = acc/idx combined with the later partials pa/pi, column by column. */
static void tile_combine(rkind rk, int64_t n, double *acc, int64_t *idx, const double *pa,
                         const int64_t *pi)
{
    switch (rk) {
    case RK_SUM:
    case RK_ABS:
    case RK_SQR:
    case RK_EXP:
        for (int64_t j = 0; j < n; j++)
            acc[j] += pa[j];
        return;
    case RK_PROD:
        for (int64_t j = 0; j < n; j++)
            acc[j] *= pa[j];
        return;
    case RK_MAX:
        for (int64_t j = 0; j < n; j++)
            acc[j] = SEL_MAX(pa[j], acc[j]);
        return;
    case RK_MIN:
        for (int64_t j = 0; j < n; j++)
            acc[j] = SEL_MIN(pa[j], acc[j]);
        return;
    case RK_ARGMAX:
    case RK_ARGMIN:
        break;
    }
    for (int64_t j = 0; j < n; j++) {
        facc c = facc_combine(rk, (facc){acc[j], idx[j]}, (facc){pa[j], pi[j]});
        acc[j] = c.v;
        idx[j] = c.i;
    }
}

/* The result of op from the accumulated a over R reduced elements (logsumexp is finished by
 * its drivers; here it is the max of its first pass). */
static double fold_finish(sx_fold_op op, facc a, int64_t R)
{
    switch (op) {
    case SX_FOLD_MEAN:
        return a.v / (double)R;
    case SX_FOLD_L2NORM:
        return sqrt(a.v);
    case SX_FOLD_ARGMAX:
    case SX_FOLD_ARGMIN:
        return (double)a.i;
    case SX_FOLD_SUM:
    case SX_FOLD_PROD:
    case SX_FOLD_MAX:
    case SX_FOLD_MIN:
    case SX_FOLD_L1NORM:
    case SX_FOLD_LOGSUMEXP:
    case SX_FOLD_COUNT:
        break;
    }
    return a.v;
}

#define LANES 8
#define PW_BLOCK 128
/* GCC and Clang vector extensions for the min/max lanes (in native-width vectors: wider ones
 * are lowered to scalar code); a plain loop elsewhere. */
#if defined(__GNUC__)
#define FOLD_VEC 1
#if defined(__AVX__)
#define FOLD_VBYTES 32
#else
#define FOLD_VBYTES 16
#endif
#else
#define FOLD_VEC 0
#endif

/* Case B sums add whole rows into a row of partial sums: part[j] += the rows' sum at column j.
 * This loop is most of the time of such a fold and the vector width counts (a group of 8 rows
 * is 16 vector operations per 8 inputs), so it is built per instruction set (vmath.h) and picked
 * at run time. G rows at once in a fixed pairwise tree; the same bits on every ISA. */
#define ROWS_KERNELS(SFX, T)                                                                       \
    static void rows8_##SFX(T *restrict part, const T *const *xr, int64_t n)                       \
    {                                                                                              \
        const T *x0 = xr[0], *x1 = xr[1], *x2 = xr[2], *x3 = xr[3];                                \
        const T *x4 = xr[4], *x5 = xr[5], *x6 = xr[6], *x7 = xr[7];                                \
        for (int64_t j = 0; j < n; j++)                                                            \
            part[j] += ((x0[j] + x1[j]) + (x2[j] + x3[j])) + ((x4[j] + x5[j]) + (x6[j] + x7[j]));  \
    }                                                                                              \
    static void rows1_##SFX(T *restrict part, const T *const *xr, int64_t n)                       \
    {                                                                                              \
        const T *x0 = xr[0];                                                                       \
        for (int64_t j = 0; j < n; j++)                                                            \
            part[j] += x0[j];                                                                      \
    }
ROWS_KERNELS(f32, float)
ROWS_KERNELS(f64, double)
#if VM_DISPATCH
#pragma GCC push_options
#pragma GCC target("avx2")
ROWS_KERNELS(f32_avx2, float)
ROWS_KERNELS(f64_avx2, double)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f")
ROWS_KERNELS(f32_avx512, float)
ROWS_KERNELS(f64_avx512, double)
#pragma GCC pop_options
#endif
#undef ROWS_KERNELS

/* The row kernels of this CPU: [0] adds 8 rows, [1] one row. */
#define ROWS_PICK(SFX, T)                                                                          \
    typedef void rows_fn_##SFX(T *restrict part, const T *const *xr, int64_t n);                   \
    static void rows_pick_##SFX(rows_fn_##SFX **k)                                                 \
    {                                                                                              \
        k[0] = rows8_##SFX;                                                                        \
        k[1] = rows1_##SFX;                                                                        \
        ROWS_PICK_ISA(SFX)                                                                         \
    }
#if VM_DISPATCH
#define ROWS_PICK_ISA(SFX)                                                                         \
    if (vm_isa() == VM_ISA_AVX512) {                                                               \
        k[0] = rows8_##SFX##_avx512;                                                               \
        k[1] = rows1_##SFX##_avx512;                                                               \
    } else if (vm_isa() == VM_ISA_AVX2) {                                                          \
        k[0] = rows8_##SFX##_avx2;                                                                 \
        k[1] = rows1_##SFX##_avx2;                                                                 \
    }
#else
#define ROWS_PICK_ISA(SFX)
#endif
ROWS_PICK(f32, float)
ROWS_PICK(f64, double)
#undef ROWS_PICK
#undef ROWS_PICK_ISA

#define T float
#define IT int32_t
#define SFX f32
#include "fold_tmpl.h"
#undef T
#undef IT
#undef SFX
#define T double
#define IT int64_t
#define SFX f64
#include "fold_tmpl.h"
#undef T
#undef IT
#undef SFX

/* ---------------------------------------------------------------- public functions */

static bool has_identity(sx_fold_op op)
{
    return op != SX_FOLD_MAX && op != SX_FOLD_MIN && op != SX_FOLD_ARGMAX && op != SX_FOLD_ARGMIN;
}

/* The axes mask with SX_AXES_ALL resolved to the axes of `rank`; SX_E_AXIS for bits >= rank. */
static sx_status resolve_axes(const char *who, int rank, unsigned axes, unsigned *out)
{
    unsigned all = (1u << rank) - 1u;
    if (axes == SX_AXES_ALL) {
        *out = all;
        return SX_OK;
    }
    if (axes & ~all)
        return sx_error(SX_E_AXIS, "%s: axes 0x%x name an axis >= rank %d", who, axes, rank);
    *out = axes;
    return SX_OK;
}

sx_status sx_fold_shape(const char *who, int rank, const int64_t *shape, unsigned axes,
                        bool keepdims, int *out_rank, int64_t *out_shape)
{
    if (who == NULL)
        who = "sx_fold_shape";
    if (out_rank == NULL || out_shape == NULL)
        return sx_error(SX_E_ARG, "%s: out_rank or out_shape is NULL", who);
    SX_TRY(sx_shape_check(who, rank, shape));
    unsigned mask = 0;
    SX_TRY(resolve_axes(who, rank, axes, &mask));
    int r = 0;
    for (int i = 0; i < rank; i++) {
        if (!((mask >> i) & 1u))
            out_shape[r++] = shape[i];
        else if (keepdims)
            out_shape[r++] = 1;
    }
    *out_rank = r;
    return SX_OK;
}

sx_status sx_tensor_fold_out(sx_fold_op op, const sx_tensor *x, unsigned axes, bool keepdims,
                             sx_tensor *out)
{
    const char *who = "sx_tensor_fold_out";
    if ((unsigned)op >= SX_FOLD_COUNT)
        return sx_error(SX_E_ARG, "%s: unknown op %d", who, (int)op);
    SX_TRY(sx__check_tensor(who, "x", x));
    int r;
    int64_t shape[SX_MAX_RANK];
    unsigned mask = 0;
    SX_TRY(sx_fold_shape(who, x->rank, x->shape, axes, keepdims, &r, shape));
    SX_TRY(resolve_axes(who, x->rank, axes, &mask));
    SX_TRY(sx__check_out(who, out, x->dtype, r, shape));
    fplan p;
    fplan_make(x->rank, x->shape, mask, &p);
    if (p.R == 0 && !has_identity(op)) {
        char s[128];
        return sx_error(SX_E_SHAPE, "%s: %s of an empty set (x %s, axes 0x%x) has no identity", who,
                        sx_fold_name(op), sx_shape_str(x->rank, x->shape, s, sizeof s), mask);
    }
    if (p.K == 0)
        return SX_OK;
    if (x->dtype == SX_F32)
        fold_f32(op, &p, x->data, out->data);
    else
        fold_f64(op, &p, x->data, out->data);
    return SX_OK;
}

sx_status sx_tensor_fold(sx_fold_op op, const sx_tensor *x, unsigned axes, bool keepdims,
                         sx_tensor **out)
{
    const char *who = "sx_tensor_fold";
    if (out == NULL)
        return sx_error(SX_E_ARG, "%s: out is NULL", who);
    *out = NULL;
    if ((unsigned)op >= SX_FOLD_COUNT)
        return sx_error(SX_E_ARG, "%s: unknown op %d", who, (int)op);
    SX_TRY(sx__check_tensor(who, "x", x));
    int r;
    int64_t shape[SX_MAX_RANK];
    SX_TRY(sx_fold_shape(who, x->rank, x->shape, axes, keepdims, &r, shape));
    sx_tensor *y = NULL;
    SX_TRY(sx_tensor_new(x->dtype, r, shape, &y));
    sx_status s = sx_tensor_fold_out(op, x, axes, keepdims, y);
    if (s != SX_OK) {
        sx_tensor_free(y);
        return s;
    }
    *out = y;
    return SX_OK;
}
