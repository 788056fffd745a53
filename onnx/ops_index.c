/* ops_index.c: the ONNX ops that move elements by indices known at import time (GatherElements,
 * GatherND, ScatterElements, ScatterND, OneHot, Compress, ReverseSequence) and the losses that
 * pick one class per example (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss). The indices
 * become one flat index map, and the op one gather from the flattened data. */
#include "onnx_impl.h"

#include <math.h>
#include <string.h>

/* Row-major strides of shape (rank). */
static void strides_of(int rank, const int64_t *shape, int64_t *st)
{
    int64_t s = 1;
    for (int k = rank - 1; k >= 0; k--) {
        st[k] = s;
        s *= shape[k];
    }
}

/* The coordinates of flat position p in shape (rank). */
static void coords_of(int64_t p, int rank, const int64_t *shape, int64_t *co)
{
    for (int k = rank - 1; k >= 0; k--) {
        co[k] = shape[k] ? p % shape[k] : 0;
        p = shape[k] ? p / shape[k] : 0;
    }
}

sx_status ox_const(ox_ctx *c, int rank, const int64_t *shape, const double *f, sx_cg_node **out)
{
    sx_tensor *t = NULL;
    SX_TRY(sx_tensor_new(c->dt, rank, shape, &t));
    for (int64_t k = 0; k < t->size; k++)
        sx_tensor_set(t, k, f[k]);
    *out = sx_cg_const(c->g, t);
    sx_tensor_free(t);
    return *out != NULL ? SX_OK : ox_graph_fail(c);
}

sx_status ox_gather_flat(ox_ctx *c, sx_cg_node *x, const int64_t *idx, int rank,
                         const int64_t *shape, sx_cg_node **out)
{
    int64_t n = sx_shape_size(rank, shape), size = sx_cg_node_size(x);
    for (int64_t k = 0; k < n; k++)
        if (idx[k] < 0 || idx[k] >= size)
            return ox_fail(c, SX_E_RANGE, "index %lld out of range (%lld elements)",
                           (long long)idx[k], (long long)size);
    double *f = sx_alloc((size_t)(n ? n : 1) * sizeof *f);
    if (f == NULL)
        return SX_E_NOMEM;
    for (int64_t k = 0; k < n; k++)
        f[k] = (double)idx[k];
    sx_cg_node *in;
    sx_status s = ox_const(c, 1, &n, f, &in);
    sx_free(f);
    SX_TRY(s);
    sx_cg_node *flat = sx_cg_reshape(c->g, x, 1, &size);
    *out = sx_cg_reshape(c->g, sx_cg_gather(c->g, flat, in), rank, shape);
    return *out != NULL ? SX_OK : ox_graph_fail(c);
}

/* An index of an axis of size d, negative counting from the end, checked. */
static sx_status wrap_index(ox_ctx *c, int64_t i, int64_t d, int64_t *out)
{
    if (i < -d || i >= d)
        return ox_fail(c, SX_E_RANGE, "index %lld out of range for an axis of size %lld",
                       (long long)i, (long long)d);
    *out = i < 0 ? i + d : i;
    return SX_OK;
}

/* Element k of a known value (integers, or a float constant truncated). */
static int64_t kv(const ox_val *v, int64_t k)
{
    return v->ints != NULL ? v->ints[k] : (int64_t)sx_tensor_get(v->cst, k);
}

/* The known input i (required) of the current node: integers or a float constant. */
static sx_status known_ints(ox_ctx *c, int i, ox_val **v)
{
    SX_TRY(ox_in_req(c, i, v));
    if (!ox_known(*v))
        return ox_fail(c, SX_E_UNSUPPORTED,
                       "input %d ('%s') is computed by the graph (strix needs %s's indices at "
                       "import time)",
                       i, (*v)->name, c->node->op_type);
    return SX_OK;
}

/* The flat positions, in data of shape (rank, shape), of the elements indices (same rank)
 * address along axis: position p of indices reads data at p's coordinates with the axis one
 * replaced by indices[p]. */
static sx_status element_map(ox_ctx *c, const ox_val *dv, const ox_val *iv, int axis, int64_t *map)
{
    if (iv->rank != dv->rank)
        return ox_fail(c, SX_E_SHAPE, "indices of rank %d for data of rank %d", iv->rank, dv->rank);
    int64_t st[SX_MAX_RANK], co[SX_MAX_RANK];
    strides_of(dv->rank, dv->shape, st);
    int64_t n = sx_shape_size(iv->rank, iv->shape);
    for (int64_t p = 0; p < n; p++) {
        coords_of(p, iv->rank, iv->shape, co);
        SX_TRY(wrap_index(c, kv(iv, p), dv->shape[axis], &co[axis]));
        map[p] = 0;
        for (int k = 0; k < dv->rank; k++)
            map[p] += co[k] * st[k];
    }
    return SX_OK;
}

/* An int64 buffer of n (>= 1) elements. */
static sx_status ints_new(int64_t n, int64_t **out)
{
    *out = sx_alloc((size_t)(n > 0 ? n : 1) * sizeof **out);
    return *out != NULL ? SX_OK : SX_E_NOMEM;
}

/* GatherElements(data, indices, axis): out[p] = data[p with the axis coordinate indices[p]]. */
sx_status ox_op_GatherElements(ox_ctx *c)
{
    ox_val *dv, *iv;
    sx_cg_node *x;
    SX_TRY(ox_in_req(c, 0, &dv));
    SX_TRY(known_ints(c, 1, &iv));
    int64_t a;
    int axis;
    SX_TRY(ox_attr_int(c, "axis", 0, &a));
    SX_TRY(ox_axis(c, a, dv->rank, "attribute axis", &axis));
    SX_TRY(ox_node(c, dv, OX_ONNX, &x));
    int64_t *map;
    SX_TRY(ints_new(sx_shape_size(iv->rank, iv->shape), &map));
    sx_status s = element_map(c, dv, iv, axis, map);
    sx_cg_node *y = NULL;
    if (s == SX_OK)
        s = ox_gather_flat(c, x, map, iv->rank, iv->shape, &y);
    sx_free(map);
    SX_TRY(s);
    c->no_batch = true;
    return ox_out(c, 0, y, OX_ONNX);
}

/* Scatter: data (n elements) with updates (u elements) written at flat positions tgt[u]. With
 * reduction none the last write wins: one gather from [data, updates]. With add or mul each
 * layer l gathers the l-th update landing on a position (or the identity element) and is
 * combined with data. */
static sx_status scatter_flat(ox_ctx *c, sx_cg_node *data, sx_cg_node *upd, const int64_t *tgt,
                              const char *red, sx_cg_node **out)
{
    sx_cg_graph *g = c->g;
    int64_t n = sx_cg_node_size(data), u = sx_cg_node_size(upd), *map, *cnt;
    int rank = sx_cg_node_rank(data);
    const int64_t *shape = sx_cg_node_shape(data);
    bool none = strcmp(red, "none") == 0, add = strcmp(red, "add") == 0;
    if (!none && !add && strcmp(red, "mul") != 0)
        return ox_fail(c, SX_E_UNSUPPORTED, "attribute reduction '%s'", red);
    sx_cg_node *parts[2] = {sx_cg_reshape(g, data, 1, &n), sx_cg_reshape(g, upd, 1, &u)};
    if (!none) /* the identity element after the updates */
        parts[0] = sx_cg_reshape(g, sx_cg_scalar_like(g, data, add ? 0 : 1), 1, (int64_t[]){1});
    sx_cg_node *src = sx_cg_concat(g, 2, none ? parts : (sx_cg_node *[]){parts[1], parts[0]}, 0);
    SX_TRY(ints_new(n, &map));
    sx_status s = ints_new(n, &cnt);
    if (s != SX_OK) {
        sx_free(map);
        return s;
    }
    memset(cnt, 0, (size_t)(n > 0 ? n : 1) * sizeof *cnt);
    int64_t layers = none ? 1 : 0;
    for (int64_t j = 0; s == SX_OK && j < u; j++)
        layers = ++cnt[tgt[j]] > layers ? cnt[tgt[j]] : layers;
    *out = none ? NULL : data;
    for (int64_t l = 0; s == SX_OK && l < layers; l++) {
        for (int64_t p = 0; p < n; p++)
            map[p] = none ? p : u;
        for (int64_t j = 0, seen; j < u; j++) { /* the l-th update of each position */
            seen = 0;
            for (int64_t k = 0; k < j; k++)
                seen += tgt[k] == tgt[j];
            if (none || seen == l)
                map[tgt[j]] = none ? n + j : j;
        }
        sx_cg_node *y;
        s = ox_gather_flat(c, src, map, rank, shape, &y);
        if (s == SX_OK)
            *out = none ? y : add ? sx_cg_add(g, *out, y) : sx_cg_mul(g, *out, y);
    }
    sx_free(map);
    sx_free(cnt);
    return s;
}

/* ScatterElements(data, indices, updates, axis, reduction) and the older Scatter. */
sx_status ox_op_ScatterElements(ox_ctx *c)
{
    ox_val *dv, *iv, *uv;
    sx_cg_node *x, *up;
    SX_TRY(ox_in_req(c, 0, &dv));
    SX_TRY(known_ints(c, 1, &iv));
    SX_TRY(ox_in_req(c, 2, &uv));
    if (!sx_shape_equal(iv->rank, iv->shape, uv->rank, uv->shape))
        return ox_fail(c, SX_E_SHAPE, "indices and updates of different shapes");
    int64_t a;
    int axis;
    char red[16];
    SX_TRY(ox_attr_int(c, "axis", 0, &a));
    SX_TRY(ox_axis(c, a, dv->rank, "attribute axis", &axis));
    SX_TRY(ox_attr_str(c, "reduction", "none", red, sizeof red));
    SX_TRY(ox_node(c, dv, OX_ONNX, &x));
    SX_TRY(ox_node(c, uv, OX_ONNX, &up));
    int64_t *map;
    SX_TRY(ints_new(sx_shape_size(iv->rank, iv->shape), &map));
    sx_status s = element_map(c, dv, iv, axis, map);
    sx_cg_node *y = NULL;
    if (s == SX_OK)
        s = scatter_flat(c, x, up, map, red, &y);
    sx_free(map);
    SX_TRY(s);
    return ox_out(c, 0, y, OX_ONNX);
}

/* The flat positions of the slices GatherND / ScatterND address: indices (..., k) pick, after
 * the b batch axes, a slice of data's axes from b + k on; map gets, for each index tuple in
 * order, the slice's element positions. */
static sx_status nd_map(ox_ctx *c, const ox_val *dv, const ox_val *iv, int b, int64_t *map,
                        int64_t *slice)
{
    int k = iv->rank > 0 ? (int)iv->shape[iv->rank - 1] : -1;
    if (iv->rank < 1 || k < 1 || b + k > dv->rank || b >= iv->rank)
        return ox_fail(c, SX_E_SHAPE, "indices of shape ending in %d for data of rank %d", k,
                       dv->rank);
    int64_t st[SX_MAX_RANK];
    strides_of(dv->rank, dv->shape, st);
    *slice = sx_shape_size(dv->rank - b - k, dv->shape + b + k);
    int64_t tuples = sx_shape_size(iv->rank - 1, iv->shape);
    int64_t per_batch = sx_shape_size(iv->rank - 1 - b, iv->shape + b);
    for (int64_t t = 0; t < tuples; t++) {
        int64_t base = b > 0 ? (t / per_batch) * st[b - 1] : 0, x = 0;
        for (int j = 0; j < k; j++) {
            SX_TRY(wrap_index(c, kv(iv, t * k + j), dv->shape[b + j], &x));
            base += x * st[b + j];
        }
        for (int64_t e = 0; e < *slice; e++)
            map[t * *slice + e] = base + e;
    }
    return SX_OK;
}

/* GatherND(data, indices, batch_dims): out (indices[:-1], data[b + k:]). */
sx_status ox_op_GatherND(ox_ctx *c)
{
    ox_val *dv, *iv;
    sx_cg_node *x;
    SX_TRY(ox_in_req(c, 0, &dv));
    SX_TRY(known_ints(c, 1, &iv));
    int64_t b;
    SX_TRY(ox_attr_int(c, "batch_dims", 0, &b));
    if (b < 0 || b >= dv->rank)
        return ox_fail(c, SX_E_FORMAT, "attribute batch_dims %lld", (long long)b);
    SX_TRY(ox_node(c, dv, OX_ONNX, &x));
    int k = iv->rank > 0 ? (int)iv->shape[iv->rank - 1] : 0;
    int r = iv->rank - 1 + dv->rank - (int)b - k;
    if (r < 0 || r > SX_MAX_RANK || k < 1)
        return ox_fail(c, SX_E_SHAPE, "indices of rank %d for data of rank %d", iv->rank, dv->rank);
    int64_t s[SX_MAX_RANK], *map, slice;
    memcpy(s, iv->shape, (size_t)(iv->rank - 1) * sizeof *s);
    memcpy(s + iv->rank - 1, dv->shape + b + k, (size_t)(dv->rank - b - k) * sizeof *s);
    SX_TRY(ints_new(sx_shape_size(r, s), &map));
    sx_status st = nd_map(c, dv, iv, (int)b, map, &slice);
    sx_cg_node *y = NULL;
    if (st == SX_OK)
        st = ox_gather_flat(c, x, map, r, s, &y);
    sx_free(map);
    SX_TRY(st);
    c->no_batch = true;
    return ox_out(c, 0, y, OX_ONNX);
}

/* ScatterND(data, indices, updates, reduction): graph data or updates (known ones fold). */
sx_status ox_op_ScatterND(ox_ctx *c)
{
    ox_val *dv, *iv, *uv;
    sx_cg_node *x, *up;
    SX_TRY(ox_in_req(c, 0, &dv));
    SX_TRY(known_ints(c, 1, &iv));
    SX_TRY(ox_in_req(c, 2, &uv));
    char red[16];
    SX_TRY(ox_attr_str(c, "reduction", "none", red, sizeof red));
    SX_TRY(ox_node(c, dv, OX_ONNX, &x));
    SX_TRY(ox_node(c, uv, OX_ONNX, &up));
    int64_t *map, slice, nu = sx_shape_size(uv->rank, uv->shape);
    SX_TRY(ints_new(nu, &map));
    sx_status s = nd_map(c, dv, iv, 0, map, &slice);
    if (s == SX_OK && sx_shape_size(iv->rank - 1, iv->shape) * slice != nu)
        s = ox_fail(c, SX_E_SHAPE, "updates of %lld elements", (long long)nu);
    sx_cg_node *y = NULL;
    if (s == SX_OK)
        s = scatter_flat(c, x, up, map, red, &y);
    sx_free(map);
    SX_TRY(s);
    return ox_out(c, 0, y, OX_ONNX);
}

/* OneHot(indices, depth, values = [off, on], axis): a gather from values. */
sx_status ox_op_OneHot(ox_ctx *c)
{
    ox_val *iv, *vv, *dv;
    int64_t a;
    SX_TRY(known_ints(c, 0, &iv));
    SX_TRY(known_ints(c, 1, &dv));
    int64_t nd = sx_shape_size(dv->rank, dv->shape), dp[1] = {nd == 1 ? kv(dv, 0) : 0};
    SX_TRY(ox_in_req(c, 2, &vv));
    SX_TRY(ox_attr_int(c, "axis", -1, &a));
    if (nd != 1 || dp[0] < 1 || sx_shape_size(vv->rank, vv->shape) != 2 ||
        iv->rank + 1 > SX_MAX_RANK)
        return ox_fail(c, SX_E_FORMAT, "depth must be one value >= 1 and values two");
    int axis, r = iv->rank + 1;
    SX_TRY(ox_axis(c, a, r, "attribute axis", &axis));
    int64_t s[SX_MAX_RANK], co[SX_MAX_RANK], *map;
    for (int k = 0, j = 0; k < r; k++)
        s[k] = k == axis ? dp[0] : iv->shape[j++];
    int64_t n = sx_shape_size(r, s), d = dp[0], st[SX_MAX_RANK];
    strides_of(iv->rank, iv->shape, st);
    SX_TRY(ints_new(n, &map));
    for (int64_t p = 0; p < n; p++) {
        coords_of(p, r, s, co);
        int64_t q = 0;
        for (int k = 0, j = 0; k < r; k++)
            if (k != axis)
                q += co[k] * st[j++];
        int64_t i = kv(iv, q) < 0 ? kv(iv, q) + d : kv(iv, q);
        map[p] = i == co[axis];
    }
    sx_cg_node *vals, *y = NULL;
    sx_status e = ox_node(c, vv, OX_ONNX, &vals);
    if (e == SX_OK)
        e = ox_gather_flat(c, vals, map, r, s, &y);
    sx_free(map);
    SX_TRY(e);
    return ox_out(c, 0, y, OX_ONNX);
}

/* Compress(input, condition, axis): the slices (or, without axis, the flattened elements)
 * where condition is true. */
sx_status ox_op_Compress(ox_ctx *c)
{
    ox_val *xv, *cv;
    sx_cg_node *x;
    SX_TRY(ox_in_req(c, 0, &xv));
    SX_TRY(known_ints(c, 1, &cv));
    SX_TRY(ox_node(c, xv, OX_ONNX, &x));
    int64_t n = sx_shape_size(xv->rank, xv->shape), nc = sx_shape_size(cv->rank, cv->shape);
    int rank = 1, axis = 0;
    int64_t s[SX_MAX_RANK] = {n}, st[SX_MAX_RANK], co[SX_MAX_RANK];
    if (ox_attr(c, "axis") != NULL) {
        int64_t a;
        SX_TRY(ox_attr_int(c, "axis", 0, &a));
        SX_TRY(ox_axis(c, a, xv->rank, "attribute axis", &axis));
        rank = xv->rank;
        memcpy(s, xv->shape, sizeof s);
    }
    int64_t kept = 0, *sel, *map;
    SX_TRY(ints_new(s[axis], &sel));
    for (int64_t i = 0; i < s[axis] && i < nc; i++)
        if (kv(cv, i) != 0)
            sel[kept++] = i;
    int64_t os[SX_MAX_RANK];
    memcpy(os, s, sizeof os);
    os[axis] = kept;
    strides_of(rank, s, st);
    sx_status e = ints_new(sx_shape_size(rank, os), &map);
    for (int64_t p = 0; e == SX_OK && p < sx_shape_size(rank, os); p++) {
        coords_of(p, rank, os, co);
        co[axis] = sel[co[axis]];
        map[p] = 0;
        for (int k = 0; k < rank; k++)
            map[p] += co[k] * st[k];
    }
    sx_cg_node *y = NULL;
    if (e == SX_OK)
        e = ox_gather_flat(c, x, map, rank, os, &y);
    sx_free(sel);
    sx_free(map);
    SX_TRY(e);
    c->no_batch = true;
    return ox_out(c, 0, y, OX_ONNX);
}

/* ReverseSequence(input, sequence_lens, batch_axis, time_axis): the first len of each batch
 * entry's time steps reversed. */
sx_status ox_op_ReverseSequence(ox_ctx *c)
{
    ox_val *xv, *lv;
    sx_cg_node *x;
    SX_TRY(ox_in_req(c, 0, &xv));
    SX_TRY(known_ints(c, 1, &lv));
    int64_t ba, ta;
    SX_TRY(ox_attr_int(c, "batch_axis", 1, &ba));
    SX_TRY(ox_attr_int(c, "time_axis", 0, &ta));
    if (xv->rank < 2 || (ba != 0 && ba != 1) || (ta != 0 && ta != 1) || ba == ta ||
        sx_shape_size(lv->rank, lv->shape) != xv->shape[ba])
        return ox_fail(c, SX_E_FORMAT, "batch_axis %lld, time_axis %lld, sequence_lens",
                       (long long)ba, (long long)ta);
    SX_TRY(ox_node(c, xv, OX_ONNX, &x));
    int64_t n = sx_shape_size(xv->rank, xv->shape), st[SX_MAX_RANK], co[SX_MAX_RANK], *map;
    strides_of(xv->rank, xv->shape, st);
    SX_TRY(ints_new(n, &map));
    for (int64_t p = 0; p < n; p++) {
        coords_of(p, xv->rank, xv->shape, co);
        int64_t len = kv(lv, co[ba]);
        if (co[ta] < len)
            co[ta] = len - 1 - co[ta];
        map[p] = 0;
        for (int k = 0; k < xv->rank; k++)
            map[p] += co[k] * st[k];
    }
    sx_cg_node *y = NULL;
    sx_status e = ox_gather_flat(c, x, map, xv->rank, xv->shape, &y);
    sx_free(map);
    SX_TRY(e);
    return ox_out(c, 0, y, OX_ONNX);
}

/* DepthToSpace (mode DCR or CRD) and SpaceToDepth on (N, C, H, W): a reshape to six axes, a
 * permutation, a reshape back. */
static sx_status depth_space(ox_ctx *c, bool to_space)
{
    int64_t b;
    char mode[8];
    SX_TRY(ox_attr_int(c, "blocksize", 0, &b));
    SX_TRY(ox_attr_str(c, "mode", "DCR", mode, sizeof mode));
    bool crd = strcmp(mode, "CRD") == 0;
    if (!crd && strcmp(mode, "DCR") != 0)
        return ox_fail(c, SX_E_FORMAT, "attribute mode '%s'", mode);
    ox_val *v;
    sx_cg_node *x;
    SX_TRY(ox_in_req(c, 0, &v));
    if (v->rank != 4 || b < 1 || (to_space && v->shape[1] % (b * b) != 0) ||
        (!to_space && (v->shape[2] % b != 0 || v->shape[3] % b != 0)))
        return ox_fail(c, SX_E_SHAPE, "input of rank %d for blocksize %lld", v->rank, (long long)b);
    SX_TRY(ox_node(c, v, OX_ONNX, &x));
    int64_t n = v->shape[0], ch = v->shape[1], h = v->shape[2], w = v->shape[3];
    int64_t s6[6], out[4];
    const int *perm;
    static const int dcr[6] = {0, 3, 4, 1, 5, 2}, crdp[6] = {0, 1, 4, 2, 5, 3},
                     s2d[6] = {0, 3, 5, 1, 2, 4};
    if (to_space) {
        int64_t cc = ch / (b * b);
        memcpy(s6, crd ? (int64_t[]){n, cc, b, b, h, w} : (int64_t[]){n, b, b, cc, h, w},
               sizeof s6);
        memcpy(out, (int64_t[]){n, cc, h * b, w * b}, sizeof out);
        perm = crd ? crdp : dcr;
    } else {
        memcpy(s6, (int64_t[]){n, ch, h / b, b, w / b, b}, sizeof s6);
        memcpy(out, (int64_t[]){n, ch * b * b, h / b, w / b}, sizeof out);
        perm = s2d;
    }
    sx_cg_graph *g = c->g;
    x = sx_cg_permute(g, sx_cg_reshape(g, x, 6, s6), perm);
    return ox_out(c, 0, sx_cg_reshape(g, x, 4, out), OX_ONNX);
}

sx_status ox_op_DepthToSpace(ox_ctx *c)
{
    return depth_space(c, true);
}

sx_status ox_op_SpaceToDepth(ox_ctx *c)
{
    return depth_space(c, false);
}
