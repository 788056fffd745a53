/* pool_vec_tmpl.h: max pooling's 2x2 windows written over simd.h's vectors, included by pool.c
 * once per instruction set (with SIMD_ISA, SIMD_BITS, T, SFX and simd.h). The compiler's loops
 * over the channels (pool_tmpl.h) leave a scalar remainder, all of it when c is below a vector
 * (lenet5's 6 channels), whose selects become branches, mispredicted on real data (the backward
 * pass ran 9x slower than the forward). These run whole vectors with a masked tail: the same
 * selects in the same order as pool_tmpl.h's loops, so the same bits. */
#define PV_CAT_(a, b) a##_##b
#define PV_CAT(a, b) PV_CAT_(a, b)
#define PV(name) PV_CAT(name, SFX)

/* yo[0..c) = the max of the four cells: the first NaN of the lane's cells, if any, else the
 * strict maximum in cell order (maxpool_fwd's rule). Masked moves are slow on some CPUs (AVX2's
 * vmaskmov on AMD's cores), so the last vector is read whole when the highest cell's vector ends
 * within x (before xend: the extra lanes are never stored) and stored whole when it ends before
 * yend: the caller guarantees that what lies between yo + c and yend is written after this. */
static VATTR void PV(pool_fwd_2x2_vec)(const T *p0, const T *p1, const T *p2, const T *p3, T *yo,
                                       int64_t c, const T *xend, const T *yend)
{
    for (int64_t j = 0; j < c; j += VL) {
        const VMASK k = V_MASK_N(c - j);
        V a, b1, b2, b3;
        if (j + VL <= c || p3 + j + VL <= xend) {
            a = V_LOAD(p0 + j), b1 = V_LOAD(p1 + j), b2 = V_LOAD(p2 + j), b3 = V_LOAD(p3 + j);
        } else {
            a = V_MLOAD(k, p0 + j), b1 = V_MLOAD(k, p1 + j);
            b2 = V_MLOAD(k, p2 + j), b3 = V_MLOAD(k, p3 + j);
        }
        V m = V_BLEND(V_GT(b1, a), a, b1);
        m = V_BLEND(V_GT(b2, m), m, b2);
        m = V_BLEND(V_GT(b3, m), m, b3);
        m = V_BLEND(V_NAN(b3), m, b3);
        m = V_BLEND(V_NAN(b2), m, b2);
        m = V_BLEND(V_NAN(b1), m, b1);
        m = V_BLEND(V_NAN(a), m, a);
        if (j + VL <= c || yo + j + VL <= yend)
            V_STORE(yo + j, m);
        else
            V_MSTORE(yo + j, k, m);
    }
}

/* dy to the lane's winning cell (POOL_ARG_2X2's rule: the first NaN, else the first strict
 * maximum) and +0 to the others; with `relu` only where the cell's x > 0. Each lane's four cells
 * are read before they are written (dx may be x). The winner's index is kept as a float vector
 * (0 to 3: exact). */
static VATTR void PV(pool_bwd_2x2_vec)(const T *xw, const T *dyo, T *dxw, int64_t c, int64_t rs,
                                       int64_t cn, bool relu)
{
    const T *p[4] = {xw, xw + c, xw + rs, xw + rs + c};
    T *d[4] = {dxw, dxw + c, dxw + rs, dxw + rs + c};
    for (int64_t j = 0; j < cn; j += VL) {
        const VMASK k = V_MASK_N(cn - j);
        V v[4];
        for (int i = 0; i < 4; i++)
            v[i] = V_MLOAD(k, p[i] + j);
        V m = v[0], at = V_ZERO();
        for (int i = 1; i < 4; i++) {
            const VSEL gt = V_GT(v[i], m);
            at = V_BLEND(gt, at, V_SET1((T)i));
            m = V_BLEND(gt, m, v[i]);
        }
        for (int i = 3; i >= 0; i--) /* the first NaN is written last */
            at = V_BLEND(V_NAN(v[i]), at, V_SET1((T)i));
        const V gj = V_MLOAD(k, dyo + j);
        for (int i = 0; i < 4; i++) {
            VSEL sel = V_EQ(at, V_SET1((T)i));
            if (relu)
                sel = V_SAND(sel, V_GT(v[i], V_ZERO()));
            V_MSTORE(d[i] + j, k, V_BLEND(sel, V_ZERO(), gj));
        }
    }
}

#undef PV
#undef PV_CAT
#undef PV_CAT_
