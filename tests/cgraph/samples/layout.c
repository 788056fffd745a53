/* layout.c: the samples of the data-moving ops (cgraph/ops/layout.c): each op's SPEC_, DT_, sample
 * generator and references. Part of ../opsamples.c, which includes it. */

/* ---------------------------------------------------------------- layout (all linear) */

static const struct {
    shp x;
    int64_t reps[SX_MAX_RANK];
} repeat_cases[] = {
    {{2, {2, 3}}, {2, 1}}, {{2, {2, 3}}, {1, 3}},       {{1, {3}}, {2}},
    {{0, {0}}, {0}},       {{3, {2, 1, 2}}, {1, 3, 2}}, {{2, {2, 2}}, {0, 2}},
};
#define N_REPEAT 6

#define SPEC_repeat N_REPEAT, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_repeat, plain_remap)
#define DT_repeat GEN(gen_repeat, 2)
static sx_cg_node *sample_repeat(GEN_ARGS)
{
    CTX;
    return sx_cg_repeat(g, in(c, repeat_cases[v].x, V_UNIFORM, -2, 2), repeat_cases[v].reps);
}

#define SPEC_tile N_REPEAT, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_tile, plain_remap)
#define DT_tile GEN(gen_repeat, 2)
static sx_cg_node *sample_tile(GEN_ARGS)
{
    CTX;
    return sx_cg_tile(g, in(c, repeat_cases[v].x, V_UNIFORM, -2, 2), repeat_cases[v].reps);
}

static const shp broadcast_cases[][2] = {
    {{2, {3, 1}}, {3, {2, 3, 4}}}, {{0, {0}}, {2, {2, 2}}}, {{1, {4}}, {2, {3, 4}}},
    {{2, {2, 3}}, {2, {2, 3}}},    {{1, {1}}, {2, {3, 0}}},
};
#define SPEC_broadcast 5, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_broadcast, plain_remap)
#define DT_broadcast GEN(gen_broadcast, 2)
static sx_cg_node *sample_broadcast(GEN_ARGS)
{
    CTX;
    shp to = broadcast_cases[v][1];
    return sx_cg_broadcast(g, in(c, broadcast_cases[v][0], V_UNIFORM, -2, 2), to.rank, to.d);
}

static const shp reshape_cases[][2] = {
    {{2, {2, 6}}, {2, {3, 4}}}, {{3, {2, 3, 4}}, {1, {24}}}, {{1, {1}}, {0, {0}}},
    {{0, {0}}, {2, {1, 1}}},    {{2, {0, 3}}, {2, {3, 0}}},
};
#define SPEC_reshape 5, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_copy, plain_copy)
#define DT_reshape GEN(gen_reshape, 2)
static sx_cg_node *sample_reshape(GEN_ARGS)
{
    CTX;
    shp to = reshape_cases[v][1];
    return sx_cg_reshape(g, in(c, reshape_cases[v][0], V_UNIFORM, -2, 2), to.rank, to.d);
}

/* identity has no named constructor: the generic one */
#define SPEC_identity 3, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_copy, plain_copy)
#define DT_identity GEN(gen_identity, 1)
static sx_cg_node *sample_identity(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, leaf_shapes[v], V_UNIFORM, -2, 2);
    return x == NULL ? NULL : sx_cg_op_new(g, SX_OP_IDENTITY, 1, &x, NULL);
}

/* Slices: steps > 1, negative starts and steps, an empty slice. */
static const struct {
    shp x;
    sx_slice s[SX_MAX_RANK];
} slice_cases[] = {
    {{2, {5, 6}}, {{1, 4, 1}, {0, SX_SLICE_END, 2}}},
    {{2, {5, 6}}, {{4, SX_SLICE_END, -1}, {-2, SX_SLICE_END, 1}}},
    {{1, {7}}, {{1, -1, 3}}},
    {{3, {3, 4, 5}}, {{0, SX_SLICE_END, 1}, {3, 0, -2}, {2, 3, 1}}},
    {{1, {4}}, {{2, 2, 1}}},
};
#define N_SLICE 5

#define SPEC_slice N_SLICE, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_slice, plain_slice)
#define DT_slice GEN(gen_slice, 2)
static sx_cg_node *sample_slice(GEN_ARGS)
{
    CTX;
    return sx_cg_slice(g, in(c, slice_cases[v].x, V_UNIFORM, -2, 2), slice_cases[v].s);
}

/* unslice: the input has the slice's shape inside the full shape of the slice case */
#define SPEC_unslice N_SLICE, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_unslice, plain_slice)
#define DT_unslice GEN(gen_unslice, 2)
static sx_cg_node *sample_unslice(GEN_ARGS)
{
    CTX;
    shp full = slice_cases[v].x, part = {full.rank, {0}};
    sx_status st = sx_slice_shape("opsamples", full.rank, full.d, slice_cases[v].s, part.d, NULL);
    if (st != SX_OK)
        return fail(c, st);
    return sx_cg_unslice(g, in(c, part, V_UNIFORM, -2, 2), slice_cases[v].s, full.rank, full.d);
}

static const struct {
    int n, axis;
    shp x[3];
} concat_cases[] = {
    {2, 0, {{2, {2, 3}}, {2, {4, 3}}}},
    {3, 1, {{2, {2, 3}}, {2, {2, 1}}, {2, {2, 4}}}},
    {1, 0, {{1, {3}}}},
    {2, -1, {{3, {2, 2, 1}}, {3, {2, 2, 3}}}},
    {2, 0, {{2, {0, 2}}, {2, {3, 2}}}},
};
#define SPEC_concat 5, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_concat, plain_concat)
#define DT_concat GEN(gen_concat, 2)
static sx_cg_node *sample_concat(GEN_ARGS)
{
    CTX;
    sx_cg_node *xs[3];
    for (int i = 0; i < concat_cases[v].n; i++)
        if ((xs[i] = in(c, concat_cases[v].x[i], V_UNIFORM, -2, 2)) == NULL)
            return NULL;
    return sx_cg_concat(g, concat_cases[v].n, xs, concat_cases[v].axis);
}

/* Permutations; variants 1 and 4 go through sx_cg_transpose (a permute of the last two). */
static const struct {
    shp x;
    int perm[SX_MAX_RANK];
} permute_cases[] = {
    {{3, {2, 3, 4}}, {2, 0, 1}},       {{2, {3, 4}}, {1, 0}},       {{1, {5}}, {0}},
    {{4, {2, 3, 1, 2}}, {3, 1, 0, 2}}, {{3, {2, 3, 4}}, {0, 2, 1}},
};
#define SPEC_permute 5, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_permute, plain_remap)
#define DT_permute GEN(gen_permute, 2)
static sx_cg_node *sample_permute(GEN_ARGS)
{
    CTX;
    sx_cg_node *x = in(c, permute_cases[v].x, V_UNIFORM, -2, 2);
    if (v == 1 || v == 4)
        return sx_cg_transpose(g, x);
    return sx_cg_permute(g, x, permute_cases[v].perm);
}

static const struct {
    shp x;
    int64_t before[SX_MAX_RANK], after[SX_MAX_RANK];
    double value;
} pad_cases[] = {
    {{2, {3, 4}}, {1, 0}, {2, 3}, 0.5},        {{1, {5}}, {2}, {0}, -1},
    {{3, {2, 3, 2}}, {0, 1, 0}, {1, 0, 2}, 0}, {{0, {0}}, {0}, {0}, 7},
    {{2, {0, 2}}, {1, 0}, {0, 1}, 3},
};
#define SPEC_pad 5, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_pad, plain_remap)
#define DT_pad GEN(gen_pad, 2)
static sx_cg_node *sample_pad(GEN_ARGS)
{
    CTX;
    return sx_cg_pad(g, in(c, pad_cases[v].x, V_UNIFORM, -2, 2), pad_cases[v].before,
                     pad_cases[v].after, pad_cases[v].value);
}

/* Index tensors: integral values, never differentiated. */
static const struct {
    shp idx;
    int64_t depth;
} one_hot_cases[] = {{{1, {5}}, 4}, {{2, {2, 3}}, 3}, {{0, {0}}, 5}, {{1, {0}}, 2}};
#define SPEC_one_hot 4, OS_NONE, 1e-6, 0, REF(kernel_one_hot, plain_one_hot)
#define DT_one_hot GEN(gen_one_hot, 1)
static sx_cg_node *sample_one_hot(GEN_ARGS)
{
    CTX;
    int64_t depth = one_hot_cases[v].depth;
    return sx_cg_one_hot(g, in_fixed(c, one_hot_cases[v].idx, V_INT, 0, (double)depth - 1), depth);
}

/* gather(x, idx): rows of x (repeats included); scatter_add(grad, idx, rows): its adjoint,
 * with repeated indices accumulating and some rows never hit */
static const struct {
    shp x;
    int64_t n_idx, rows;
} gather_cases[] = {
    {{2, {5, 3}}, 4, 5}, {{1, {6}}, 3, 4}, {{3, {4, 2, 2}}, 6, 3}, {{2, {3, 2}}, 0, 2}};
#define SPEC_gather 4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_gather, plain_gather)
#define DT_gather GEN(gen_gather, 2)
static sx_cg_node *sample_gather(GEN_ARGS)
{
    CTX;
    shp xs = gather_cases[v].x, is = {1, {gather_cases[v].n_idx}};
    sx_cg_node *x = in(c, xs, V_UNIFORM, -2, 2);
    return sx_cg_gather(g, x, in_fixed(c, is, V_INT, 0, (double)xs.d[0] - 1));
}

#define SPEC_scatter_add 4, OS_SMOOTH, 1e-6, 1e-6, REF(kernel_scatter_add, plain_gather)
#define DT_scatter_add GEN(gen_scatter_add, 2)
static sx_cg_node *sample_scatter_add(GEN_ARGS)
{
    CTX;
    shp gs = gather_cases[v].x, is = {1, {gather_cases[v].n_idx}};
    int64_t rows = gather_cases[v].rows;
    gs.d[0] = gather_cases[v].n_idx;
    sx_cg_node *grad = in(c, gs, V_UNIFORM, -2, 2);
    return sx_cg_scatter_add(g, grad, in_fixed(c, is, V_INT, 0, (double)rows - 1), rows);
}

/* ---- layout references */

static sx_status kernel_repeat(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_repeat_out(x[0], sx_cg_node_attr(n)->ints, out);
}

static sx_status kernel_tile(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_tile_out(x[0], sx_cg_node_attr(n)->ints, out);
}

static sx_status kernel_broadcast(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_broadcast_out(x[0], out);
}

/* reshape, identity: the values, copied */
static sx_status kernel_copy(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_copy_out(x[0], out);
}

static sx_status kernel_slice(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_slice_out(x[0], sx_cg_node_attr(n)->slice, out);
}

static sx_status kernel_unslice(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_unslice_out(x[0], sx_cg_node_attr(n)->slice, out);
}

static sx_status kernel_concat(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_concat_out(sx_cg_node_n_inputs(n), x, sx_cg_node_attr(n)->axis, out);
}

static sx_status kernel_permute(KERNEL_ARGS)
{
    (void)s;
    int perm[SX_MAX_RANK];
    for (int i = 0; i < out->rank; i++)
        perm[i] = (int)sx_cg_node_attr(n)->ints[i];
    return sx_tensor_permute_out(x[0], perm, out);
}

static sx_status kernel_pad(KERNEL_ARGS)
{
    (void)s;
    const sx_cg_attr *a = sx_cg_node_attr(n);
    return sx_tensor_pad_out(x[0], a->ints, a->ints2, a->alpha, out);
}

static sx_status kernel_one_hot(KERNEL_ARGS)
{
    (void)s;
    return sx_tensor_one_hot_out(x[0], sx_cg_node_attr(n)->index.count, out);
}

static sx_status kernel_gather(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_gather_out(x[0], x[1], out);
}

static sx_status kernel_scatter_add(KERNEL_ARGS)
{
    (void)n, (void)s;
    return sx_tensor_scatter_add_out(x[0], x[1], out);
}

/* repeat, tile, broadcast, permute, pad: each output cell reads one input cell (or pad's value). */
static sx_status plain_remap(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    const sx_cg_attr *at = sx_cg_node_attr(n);
    sx_cg_op op = sx_cg_node_op(n);
    int64_t oidx[SX_MAX_RANK];
    for (int64_t i = 0; i < y->size; i++) {
        int64_t xi = 0;
        bool inside = true;
        ref_unravel(i, y->rank, y->shape, oidx);
        if (op == SX_OP_BROADCAST) {
            xi = ref_bcast_at(x[0], y->rank, oidx);
        } else {
            int64_t xidx[SX_MAX_RANK] = {0};
            for (int d = 0; d < y->rank; d++) {
                if (op == SX_OP_REPEAT)
                    xidx[d] = oidx[d] / at->ints[d];
                else if (op == SX_OP_TILE)
                    xidx[d] = oidx[d] % x[0]->shape[d];
                else if (op == SX_OP_PERMUTE)
                    xidx[at->ints[d]] = oidx[d];
                else
                    xidx[d] = oidx[d] - at->ints[d];
            }
            for (int d = 0; d < x[0]->rank; d++) {
                inside = inside && xidx[d] >= 0 && xidx[d] < x[0]->shape[d];
                xi = xi * x[0]->shape[d] + xidx[d];
            }
        }
        want[i] = inside ? ref_get(x[0], xi) : at->alpha;
    }
    return SX_OK;
}

/* slice and unslice: out[first + i * step] = in[i] (unslice), in[first + i * step] (slice) */
static sx_status plain_slice(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    const sx_cg_attr *at = sx_cg_node_attr(n);
    bool slice = sx_cg_node_op(n) == SX_OP_SLICE;
    const sx_tensor *full = slice ? x[0] : y, *part = slice ? y : x[0];
    int64_t len[SX_MAX_RANK], first[SX_MAX_RANK];
    sx_status st = sx_slice_shape("test", full->rank, full->shape, at->slice, len, first);
    for (int64_t i = 0; st == SX_OK && i < part->size; i++) {
        int64_t pidx[SX_MAX_RANK], fi = 0;
        ref_unravel(i, part->rank, part->shape, pidx);
        for (int d = 0; d < full->rank; d++)
            fi = fi * full->shape[d] + first[d] + pidx[d] * at->slice[d].step;
        if (slice)
            want[i] = ref_get(full, fi);
        else
            want[fi] = ref_get(part, i);
    }
    return st;
}

static sx_status plain_concat(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    int axis = sx_cg_node_attr(n)->axis;
    for (int64_t i = 0; i < y->size; i++) {
        int64_t xidx[SX_MAX_RANK] = {0}, xi = 0;
        int t = 0;
        ref_unravel(i, y->rank, y->shape, xidx);
        while (xidx[axis] >= x[t]->shape[axis])
            xidx[axis] -= x[t++]->shape[axis];
        for (int d = 0; d < y->rank; d++)
            xi = xi * x[t]->shape[d] + xidx[d];
        want[i] = ref_get(x[t], xi);
    }
    return SX_OK;
}

static sx_status plain_one_hot(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    int64_t depth = sx_cg_node_attr(n)->index.count;
    for (int64_t i = 0; i < sx_cg_value(n)->size; i++)
        want[i] = ref_get(x[0], i / depth) == (double)(i % depth);
    return SX_OK;
}

/* gather and scatter_add: rows of x[0] by the indices x[1] */
static sx_status plain_gather(PLAIN_ARGS)
{
    (void)compare;
    const sx_tensor *y = sx_cg_value(n);
    bool gather = sx_cg_node_op(n) == SX_OP_GATHER;
    int64_t row = 1;
    for (int d = 1; d < y->rank; d++)
        row *= y->shape[d];
    for (int64_t i = 0; i < x[1]->size; i++)
        for (int64_t k = 0; k < row; k++) {
            int64_t j = (int64_t)ref_get(x[1], i);
            if (gather) {
                want[i * row + k] = ref_get(x[0], j * row + k);
            } else {
                want[j * row + k] += ref_get(x[0], i * row + k);
                mag[j * row + k] += fabs(ref_get(x[0], i * row + k));
            }
        }
    return SX_OK;
}
