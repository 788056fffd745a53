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

/* PyTorch's Adam/AdamW: the parameter scaled by keep first (decoupled weight decay), eps added
 * after the bias correction of sqrt(v) (c[5] = sqrt(1 - b2^t)), lr = lr / (1 - b1^t) */
static void UPD_CAT(adamw, SFX)(const upd_args *u, int64_t lo, int64_t hi)
{
    T *restrict pp = u->p, *restrict mp = u->s1, *restrict vp = u->s2;
    const T *restrict gp = u->g;
    const T l = (T)u->lr, B1 = (T)u->c[0], C1 = (T)u->c[1], B2 = (T)u->c[2], C2 = (T)u->c[3],
            e = (T)u->c[4], q = (T)u->c[5], k = (T)u->c[6];
#pragma omp simd
    for (int64_t i = lo; i < hi; i++) {
        T gi = gp[i];
        T pk = k * pp[i];
        T mn = B1 * mp[i] + C1 * gi;
        T vn = B2 * vp[i] + C2 * (gi * gi);
        mp[i] = mn;
        vp[i] = vn;
        pp[i] = pk - l * (mn / (sqrt(vn) / q + e));
    }
}

/* AMSGrad: adamw with the running maximum of v (s3) in the denominator */
static void UPD_CAT(amsgrad, SFX)(const upd_args *u, int64_t lo, int64_t hi)
{
    T *restrict pp = u->p, *restrict mp = u->s1, *restrict vp = u->s2, *restrict xp = u->s3;
    const T *restrict gp = u->g;
    const T l = (T)u->lr, B1 = (T)u->c[0], C1 = (T)u->c[1], B2 = (T)u->c[2], C2 = (T)u->c[3],
            e = (T)u->c[4], q = (T)u->c[5], k = (T)u->c[6];
#pragma omp simd
    for (int64_t i = lo; i < hi; i++) {
        T gi = gp[i];
        T pk = k * pp[i];
        T mn = B1 * mp[i] + C1 * gi;
        T vn = B2 * vp[i] + C2 * (gi * gi);
        T xn = xp[i] > vn ? xp[i] : vn;
        mp[i] = mn;
        vp[i] = vn;
        xp[i] = xn;
        pp[i] = pk - l * (mn / (sqrt(xn) / q + e));
    }
}

/* centered RMSprop: the variance a - ga^2 (ga: the running mean of g) in the denominator */
static void UPD_CAT(rmsprop_centered, SFX)(const upd_args *u, int64_t lo, int64_t hi)
{
    T *restrict pp = u->p, *restrict ap = u->s1, *restrict mp = u->s2;
    const T *restrict gp = u->g;
    const T l = (T)u->lr, r = (T)u->c[0], cc = (T)u->c[1], e = (T)u->c[2];
#pragma omp simd
    for (int64_t i = lo; i < hi; i++) {
        T gi = gp[i];
        T an = r * ap[i] + cc * (gi * gi);
        T mn = r * mp[i] + cc * gi;
        ap[i] = an;
        mp[i] = mn;
        pp[i] = pp[i] - l * (gi / (sqrt(an - mn * mn) + e));
    }
}

/* momentum with dampening: v = mu v + damp g (damp = 1 on the first step) */
static void UPD_CAT(momentum_dampened, SFX)(const upd_args *u, int64_t lo, int64_t hi)
{
    T *restrict pp = u->p, *restrict vp = u->s1;
    const T *restrict gp = u->g;
    const T l = (T)u->lr, m = (T)u->c[0], d = (T)u->c[1];
    if (u->nesterov) {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) {
            T vn = m * vp[i] + d * gp[i];
            vp[i] = vn;
            pp[i] = pp[i] - l * (gp[i] + m * vn);
        }
    } else {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) {
            T vn = m * vp[i] + d * gp[i];
            vp[i] = vn;
            pp[i] = pp[i] - l * vn;
        }
    }
}

#undef UPD_CAT
#undef UPD_CAT_
