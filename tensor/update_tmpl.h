/* update_tmpl.h: the optimiser steps' loops for one dtype and instruction set; included by
 * update.c with T and SFX (e.g. f32_avx512) defined, under a `#pragma GCC target` for the wider
 * instruction sets. Each kernel runs elements [lo, hi) with the expressions of the unfused graph
 * in the same order (no contraction: the build has -ffp-contract=off), so every instance gives
 * the same bits; the wider ones only run the square roots and divisions more lanes at a time. */
#define UPD_CAT_(a, b) a##_##b
#define UPD_CAT(a, b) UPD_CAT_(a, b)

static void UPD_CAT(sgd, SFX)(const upd_args *u, int64_t lo, int64_t hi)
{
    T *restrict pp = u->p;
    const T *restrict gp = u->g;
    const T l = (T)u->lr;
#pragma omp simd
    for (int64_t i = lo; i < hi; i++)
        pp[i] = pp[i] - l * gp[i];
}

static void UPD_CAT(momentum, SFX)(const upd_args *u, int64_t lo, int64_t hi)
{
    T *restrict pp = u->p, *restrict vp = u->s1;
    const T *restrict gp = u->g;
    const T l = (T)u->lr, m = (T)u->c[0];
    if (u->nesterov) {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) {
            T vn = m * vp[i] + gp[i];
            vp[i] = vn;
            pp[i] = pp[i] - l * (gp[i] + m * vn);
        }
    } else {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) {
            T vn = m * vp[i] + gp[i];
            vp[i] = vn;
            pp[i] = pp[i] - l * vn;
        }
    }
}

static void UPD_CAT(adagrad, SFX)(const upd_args *u, int64_t lo, int64_t hi)
{
    T *restrict pp = u->p, *restrict ap = u->s1;
    const T *restrict gp = u->g;
    const T l = (T)u->lr, e = (T)u->c[0];
#pragma omp simd
    for (int64_t i = lo; i < hi; i++) {
        T gi = gp[i];
        T an = ap[i] + gi * gi;
        ap[i] = an;
        pp[i] = pp[i] - l * (gi / (sqrt(an) + e));
    }
}

static void UPD_CAT(rmsprop, SFX)(const upd_args *u, int64_t lo, int64_t hi)
{
    T *restrict pp = u->p, *restrict ap = u->s1;
    const T *restrict gp = u->g;
    const T l = (T)u->lr, r = (T)u->c[0], cc = (T)u->c[1], e = (T)u->c[2];
#pragma omp simd
    for (int64_t i = lo; i < hi; i++) {
        T gi = gp[i];
        T an = r * ap[i] + cc * (gi * gi);
        ap[i] = an;
        pp[i] = pp[i] - l * (gi / (sqrt(an) + e));
    }
}

static void UPD_CAT(adam, SFX)(const upd_args *u, int64_t lo, int64_t hi)
{
    T *restrict pp = u->p, *restrict mp = u->s1, *restrict vp = u->s2;
    const T *restrict gp = u->g;
    const T l = (T)u->lr, B1 = (T)u->c[0], C1 = (T)u->c[1], B2 = (T)u->c[2], C2 = (T)u->c[3],
            e = (T)u->c[4];
#pragma omp simd
    for (int64_t i = lo; i < hi; i++) {
        T gi = gp[i];
        T mn = B1 * mp[i] + C1 * gi;
        T vn = B2 * vp[i] + C2 * (gi * gi);
        mp[i] = mn;
        vp[i] = vn;
        pp[i] = pp[i] - l * (mn / (sqrt(vn) + e));
    }
}

#undef UPD_CAT
#undef UPD_CAT_
