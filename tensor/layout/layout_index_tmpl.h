/* layout_index_tmpl.h: the parts of one_hot, gather and scatter_add that read index values or
 * add numbers, for one dtype; included by layout.c with T and SFX defined. Index tensors hold
 * integral values stored in the dtype of the data they index. */
#define LX_CAT_(a, b) a##_##b
#define LX_CAT(a, b) LX_CAT_(a, b)

/* The position of the first idx[i] that is not an integer in [0, limit), or -1 if none. */
static int64_t LX_CAT(bad_index, SFX)(const T *idx, int64_t n, int64_t limit)
{
    const double lim = (double)limit;
    for (int64_t i = 0; i < n; i++) {
        const double v = (double)idx[i];
        /* NaN fails the first comparison; huge values fail the second. */
        if (!(v >= 0 && v < lim && v == floor(v)))
            return i;
    }
    return -1;
}

/* out (n, depth), already zeroed: out[i, idx[i]] = 1 for rows [r0, r1). */
static void LX_CAT(one_hot_rows, SFX)(T *out, const T *idx, int64_t depth, int64_t r0, int64_t r1)
{
    for (int64_t i = r0; i < r1; i++)
        out[i * depth + (int64_t)idx[i]] = (T)1;
}

/* out (rows, row), already zeroed: out[idx[i], c] += g[i, c] for every i in order, restricted to
 * output rows [r0, r1) and columns [c0, c1). Each output element is summed in the order of i,
 * whatever the split, so the result does not depend on the number of threads. */
static void LX_CAT(scatter_add, SFX)(T *out, const T *g, const T *idx, int64_t m, int64_t row,
                                     int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    for (int64_t i = 0; i < m; i++) {
        const int64_t t = (int64_t)idx[i];
        if (t < r0 || t >= r1)
            continue;
        T *o = out + t * row;
        const T *gi = g + i * row;
        for (int64_t c = c0; c < c1; c++)
            o[c] += gi[c];
    }
}

#undef LX_CAT
#undef LX_CAT_
