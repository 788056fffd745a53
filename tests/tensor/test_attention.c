/* Fused attention (tensor/attention/attention.c) against plain double loops of the composition
 * softmax(scale q k^T + mask) v and its gradients: f32 and f64, causal or not, lengths across
 * the 64-row blocks and not multiples of them, T = 1, odd dh, one head and several, more keys than
 * queries; the same bits on 1 and 2 threads and with a one-slot workspace; lse's adjoint; every
 * error. Tolerances: f32 rtol 2e-5 atol 2e-6 (the f32 sums of dh and of a block's keys),
 * f64 rtol 1e-12 atol 1e-13. */
#include "sx_tensor_kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const sx_dtype dtypes[2] = {SX_F32, SX_F64};

typedef struct acase {
    int64_t bh, tq, tk, dh;
    bool causal;
} acase;

/* The (bh, tq, dh + 1) output and (bh, tq + 2 tk, dh) gradients in double. */
static void reference(const acase *c, double scale, const sx_tensor *q, const sx_tensor *k,
                      const sx_tensor *v, const sx_tensor *dy, double *y, double *grad)
{
    const int64_t tq = c->tq, tk = c->tk, dh = c->dh;
    double *P = calloc((size_t)(tq * tk), sizeof(double));
    cr_assert_not_null(P);
    for (int64_t h = 0; h < c->bh; h++) {
        const int64_t qo = h * tq * dh, ko = h * tk * dh, yo = h * tq * (dh + 1);
        for (int64_t i = 0; i < tq; i++) {
            double m = -HUGE_VAL, sum = 0;
            for (int64_t j = 0; j < tk; j++) {
                double s = 0;
                for (int64_t d = 0; d < dh; d++)
                    s += sx_tensor_get(q, qo + i * dh + d) * sx_tensor_get(k, ko + j * dh + d);
                P[i * tk + j] = c->causal && j > i + tk - tq ? -HUGE_VAL : scale * s;
                m = fmax(m, P[i * tk + j]);
            }
            for (int64_t j = 0; j < tk; j++)
                sum += exp(P[i * tk + j] - m);
            for (int64_t j = 0; j < tk; j++)
                P[i * tk + j] = exp(P[i * tk + j] - m) / sum;
            for (int64_t d = 0; d < dh; d++) {
                double o = 0;
                for (int64_t j = 0; j < tk; j++)
                    o += P[i * tk + j] * sx_tensor_get(v, ko + j * dh + d);
                y[yo + i * (dh + 1) + d] = o;
            }
            y[yo + i * (dh + 1) + dh] = m + log(sum);
        }
        if (dy == NULL)
            continue;
        double *gq = grad + h * (tq + 2 * tk) * dh, *gk = gq + tq * dh, *gv = gk + tk * dh;
        for (int64_t i = 0; i < tq; i++) {
            /* d lse / d s = P, d o / d s = P (v - o): dS = P (dO v^T - dO . o + dlse) */
            double D = -sx_tensor_get(dy, yo + i * (dh + 1) + dh);
            for (int64_t d = 0; d < dh; d++)
                D += sx_tensor_get(dy, yo + i * (dh + 1) + d) * y[yo + i * (dh + 1) + d];
            for (int64_t j = 0; j < tk; j++) {
                double dp = 0;
                for (int64_t d = 0; d < dh; d++)
                    dp += sx_tensor_get(dy, yo + i * (dh + 1) + d) *
                          sx_tensor_get(v, ko + j * dh + d);
                const double ds = scale * P[i * tk + j] * (dp - D);
                for (int64_t d = 0; d < dh; d++) {
                    gq[i * dh + d] += ds * sx_tensor_get(k, ko + j * dh + d);
                    gk[j * dh + d] += ds * sx_tensor_get(q, qo + i * dh + d);
                    gv[j * dh + d] += P[i * tk + j] * sx_tensor_get(dy, yo + i * (dh + 1) + d);
                }
            }
        }
    }
    free(P);
}

static bool close_to(const sx_tensor *t, const double *want, sx_dtype dt, const char *what)
{
    const double rtol = dt == SX_F32 ? 2e-5 : 1e-12, atol = dt == SX_F32 ? 2e-6 : 1e-13;
    for (int64_t i = 0; i < t->size; i++) {
        double got = sx_tensor_get(t, i);
        if (!(fabs(got - want[i]) <= atol + rtol * fabs(want[i]))) {
            cr_log_error("%s element %lld: got %.17g, want %.17g", what, (long long)i, got,
                         want[i]);
            return false;
        }
    }
    return true;
}

static void check_case(const acase *c, uint64_t seed)
{
    for (int t = 0; t < 2; t++) {
        const sx_dtype dt = dtypes[t];
        sx_rng rng;
        sx_rng_seed(&rng, seed);
        const int64_t qs[3] = {c->bh, c->tq, c->dh}, ks[3] = {c->bh, c->tk, c->dh};
        const int64_t ys[3] = {c->bh, c->tq, c->dh + 1}, gs[3] = {c->bh, c->tq + 2 * c->tk, c->dh};
        sx_tensor *q = tu_rand(&rng, dt, 3, qs, -2, 2), *k = tu_rand(&rng, dt, 3, ks, -2, 2);
        sx_tensor *v = tu_rand(&rng, dt, 3, ks, -1, 1), *dy = tu_rand(&rng, dt, 3, ys, -1, 1);
        sx_tensor *y = tu_zeros(dt, 3, ys), *g = tu_zeros(dt, 3, gs);
        const double scale = 1 / sqrt((double)c->dh);
        double *wy = calloc((size_t)y->size + 1, sizeof(double));
        double *wg = calloc((size_t)g->size + 1, sizeof(double));
        cr_assert(wy != NULL && wg != NULL);
        reference(c, scale, q, k, v, dy, wy, wg);
        cr_assert_eq(sx_tensor_attention_out(q, k, v, scale, c->causal, y), SX_OK, "%s",
                     sx_last_error());
        cr_assert(close_to(y, wy, dt, "y"), "%s (%lld,%lld,%lld,%lld)%s forward", sx_dtype_name(dt),
                  (long long)c->bh, (long long)c->tq, (long long)c->tk, (long long)c->dh,
                  c->causal ? " causal" : "");
        /* the backward pass from the reference's y: it reads o and lse from there */
        sx_tensor *yr = NULL;
        cr_assert_eq(sx_tensor_from_doubles(dt, 3, ys, wy, y->size, &yr), SX_OK);
        cr_assert_eq(sx_tensor_attention_backward_out(q, k, v, yr, dy, scale, c->causal, g), SX_OK,
                     "%s", sx_last_error());
        cr_assert(close_to(g, wg, dt, "grad"), "%s (%lld,%lld,%lld,%lld)%s backward",
                  sx_dtype_name(dt), (long long)c->bh, (long long)c->tq, (long long)c->tk,
                  (long long)c->dh, c->causal ? " causal" : "");
        sx_tensor_free(yr);
        free(wy);
        free(wg);
        sx_tensor_free(q);
        sx_tensor_free(k);
        sx_tensor_free(v);
        sx_tensor_free(dy);
        sx_tensor_free(y);
        sx_tensor_free(g);
    }
}

Test(tensor_attention, matches_the_composition)
{
    static const acase cases[] = {
        {1, 1, 1, 1, false},    {1, 1, 1, 4, true},      {3, 5, 5, 3, false},
        {2, 7, 7, 5, true},     {1, 64, 64, 8, true},    {2, 65, 65, 4, true},
        {1, 130, 130, 7, true}, {2, 100, 100, 6, false}, {1, 3, 9, 4, true},
        {2, 70, 140, 3, true},  {1, 5, 77, 2, false},    {1, 128, 128, 64, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i], 100 + i);
}

/* o, lse and the gradients hold the same bits on 1 and 2 threads, and with a workspace of one
 * slot (one thread). */
Test(tensor_attention, same_bits_for_any_thread_count)
{
    sx_rng rng;
    sx_rng_seed(&rng, 7);
    const int64_t qs[3] = {6, 150, 16}, ys[3] = {6, 150, 17}, gs[3] = {6, 450, 16};
    for (int t = 0; t < 2; t++) {
        const sx_dtype dt = dtypes[t];
        const size_t el = dt == SX_F32 ? 4 : 8;
        sx_tensor *q = tu_rand(&rng, dt, 3, qs, -2, 2), *k = tu_rand(&rng, dt, 3, qs, -2, 2);
        sx_tensor *v = tu_rand(&rng, dt, 3, qs, -1, 1), *dy = tu_rand(&rng, dt, 3, ys, -1, 1);
        sx_tensor *y[3], *g[3];
        const size_t slot = sx_attention_workspace(dt, qs, true) / 6;
        void *ws = malloc(slot);
        cr_assert_not_null(ws);
        int before = sx_threads_get();
        for (int r = 0; r < 3; r++) {
            cr_assert_eq(sx_threads_set(r == 1 ? 2 : 1), SX_OK);
            y[r] = tu_zeros(dt, 3, ys), g[r] = tu_zeros(dt, 3, gs);
            void *w = r == 2 ? ws : NULL;
            size_t wb = r == 2 ? slot : 0;
            cr_assert_eq(sx_tensor_attention_ws(q, k, v, 0.25, true, y[r], w, wb), SX_OK, "%s",
                         sx_last_error());
            cr_assert_eq(
                sx_tensor_attention_backward_ws(q, k, v, y[r], dy, 0.25, true, g[r], w, wb), SX_OK,
                "%s", sx_last_error());
        }
        cr_assert_eq(sx_threads_set(before), SX_OK);
        for (int r = 1; r < 3; r++) {
            cr_assert(memcmp(y[r]->data, y[0]->data, (size_t)y[0]->size * el) == 0, "y, run %d", r);
            cr_assert(memcmp(g[r]->data, g[0]->data, (size_t)g[0]->size * el) == 0, "grad, run %d",
                      r);
        }
        for (int r = 0; r < 3; r++) {
            sx_tensor_free(y[r]);
            sx_tensor_free(g[r]);
        }
        free(ws);
        sx_tensor_free(q);
        sx_tensor_free(k);
        sx_tensor_free(v);
        sx_tensor_free(dy);
    }
}

/* Large scores: the online softmax rescales without overflow (a plain exp would give inf). */
Test(tensor_attention, large_scores_stay_finite)
{
    const int64_t qs[3] = {1, 100, 4}, ys[3] = {1, 100, 5};
    sx_rng rng;
    sx_rng_seed(&rng, 9);
    sx_tensor *q = tu_rand(&rng, SX_F32, 3, qs, -40, 40),
              *k = tu_rand(&rng, SX_F32, 3, qs, -40, 40);
    sx_tensor *v = tu_rand(&rng, SX_F32, 3, qs, -1, 1), *y = tu_zeros(SX_F32, 3, ys);
    cr_assert_eq(sx_tensor_attention_out(q, k, v, 1, false, y), SX_OK);
    for (int64_t i = 0; i < y->size; i++)
        cr_assert(isfinite(sx_tensor_get(y, i)), "element %lld", (long long)i);
    sx_tensor_free(q);
    sx_tensor_free(k);
    sx_tensor_free(v);
    sx_tensor_free(y);
}

Test(tensor_attention, errors)
{
    const int64_t qs[3] = {2, 4, 3}, ks[3] = {2, 3, 3}, ys[3] = {2, 4, 4}, bad[3] = {2, 4, 3};
    const int64_t gs[3] = {2, 10, 3}, q2[2] = {4, 3};
    sx_tensor *q = tu_zeros(SX_F32, 3, qs), *k = tu_zeros(SX_F32, 3, ks),
              *y = tu_zeros(SX_F32, 3, ys);
    sx_tensor *yb = tu_zeros(SX_F32, 3, bad), *qd = tu_zeros(SX_F64, 3, qs),
              *g = tu_zeros(SX_F32, 3, gs);
    sx_tensor *r2 = tu_zeros(SX_F32, 2, q2);
    char ws[16];
    cr_assert_eq(sx_tensor_attention_out(NULL, k, k, 1, false, y), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "sx_tensor_attention_out") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_attention_out(r2, k, k, 1, false, y), SX_E_RANK);
    cr_assert_eq(sx_tensor_attention_out(q, qd, k, 1, false, y), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_attention_out(q, k, q, 1, false, y), SX_E_SHAPE); /* k and v */
    cr_assert_eq(sx_tensor_attention_out(q, k, k, 1, true, y), SX_E_SHAPE);  /* tk < tq */
    cr_assert(strstr(sx_last_error(), "causal") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_attention_out(q, k, k, NAN, false, y), SX_E_ARG);
    cr_assert_eq(sx_tensor_attention_out(q, k, k, 1, false, yb), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_attention_ws(q, k, k, 1, false, y, ws, sizeof ws), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "workspace") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_attention_out(q, q, q, 1, false, q), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_attention_backward_out(q, k, k, yb, y, 1, false, g), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_attention_backward_out(q, k, k, y, y, 1, false, y), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_attention_backward_out(q, k, k, y, NULL, 1, false, g), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "sx_tensor_attention_backward_out") != NULL, "%s",
              sx_last_error());
    cr_assert_eq(sx_tensor_attention_backward_out(q, k, k, y, y, 1, false, g), SX_OK);
    cr_assert_eq(sx_attention_workspace(SX_F32, NULL, false), 0);
    sx_tensor *zq = NULL, *zk = NULL, *zy = NULL;
    const int64_t z3[3] = {2, 4, 0}, zk3[3] = {2, 0, 3};
    cr_assert_eq(sx_tensor_zeros(SX_F32, 3, z3, &zq), SX_OK);
    cr_assert_eq(sx_tensor_zeros(SX_F32, 3, zk3, &zk), SX_OK);
    cr_assert_eq(sx_tensor_zeros(SX_F32, 3, (int64_t[3]){2, 4, 1}, &zy), SX_OK);
    cr_assert_eq(sx_tensor_attention_out(zq, zq, zq, 1, false, zy), SX_E_SHAPE); /* dh = 0 */
    cr_assert_eq(sx_tensor_attention_out(q, zk, zk, 1, false, y), SX_E_SHAPE);   /* no keys */
    sx_tensor_free(zq);
    sx_tensor_free(zk);
    sx_tensor_free(zy);
    sx_tensor_free(q);
    sx_tensor_free(k);
    sx_tensor_free(y);
    sx_tensor_free(yb);
    sx_tensor_free(qd);
    sx_tensor_free(g);
    sx_tensor_free(r2);
}

/* Attention over the first n keys of each head (a generator's filled cache): the same bits as
 * attention over a copy of those keys alone, for n across the 64-key blocks, causal or not (the
 * causal diagonal stays that of the full length); n = 0 gives o = 0 and lse = -inf; n outside
 * 0..tk is refused. */
Test(tensor_attention, leading_keys_only)
{
    const int64_t bh = 3, tq = 2, tk = 150, dh = 5;
    const int64_t qs[3] = {bh, tq, dh}, ks[3] = {bh, tk, dh}, ys[3] = {bh, tq, dh + 1};
    sx_rng rng;
    sx_rng_seed(&rng, 17);
    for (int t = 0; t < 2; t++) {
        const sx_dtype dt = dtypes[t];
        const size_t el = dt == SX_F32 ? 4 : 8;
        sx_tensor *q = tu_rand(&rng, dt, 3, qs, -2, 2), *k = tu_rand(&rng, dt, 3, ks, -2, 2);
        sx_tensor *v = tu_rand(&rng, dt, 3, ks, -1, 1);
        sx_tensor *y = tu_zeros(dt, 3, ys), *want = tu_zeros(dt, 3, ys);
        const int64_t ns[] = {1, 2, 63, 64, 65, 128, 149, 150};
        for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
            const int64_t n = ns[c], cs[3] = {bh, n, dh};
            const bool causal = c % 2 == 1 && n >= tq;
            sx_tensor *kn = tu_zeros(dt, 3, cs), *vn = tu_zeros(dt, 3, cs);
            for (int64_t h = 0; h < bh; h++) {
                memcpy((char *)kn->data + (size_t)(h * n * dh) * el,
                       (char *)k->data + (size_t)(h * tk * dh) * el, (size_t)(n * dh) * el);
                memcpy((char *)vn->data + (size_t)(h * n * dh) * el,
                       (char *)v->data + (size_t)(h * tk * dh) * el, (size_t)(n * dh) * el);
            }
            /* causal over the full length hides nothing from these queries' first n keys when
             * n <= tk - tq + 1; past that the comparison is with the shorter diagonal, so only
             * the non-causal cases and those n compare */
            bool cmp_causal = causal && n <= tk - tq + 1;
            cr_assert_eq(sx_tensor_attention_keys_ws(q, k, v, n, 0.3, cmp_causal, y, NULL, 0),
                         SX_OK, "%s", sx_last_error());
            cr_assert_eq(sx_tensor_attention_out(q, kn, vn, 0.3, false, want), SX_OK, "%s",
                         sx_last_error());
            cr_assert(memcmp(y->data, want->data, (size_t)y->size * el) == 0, "%s n %lld",
                      sx_dtype_name(dt), (long long)n);
            sx_tensor_free(kn);
            sx_tensor_free(vn);
        }
        cr_assert_eq(sx_tensor_attention_keys_ws(q, k, v, 0, 0.3, false, y, NULL, 0), SX_OK);
        for (int64_t i = 0; i < y->size; i++)
            cr_assert(i % (dh + 1) == dh ? sx_tensor_get(y, i) == -HUGE_VAL
                                         : sx_tensor_get(y, i) == 0,
                      "element %lld of no key seen: %g", (long long)i, sx_tensor_get(y, i));
        cr_assert_eq(sx_tensor_attention_keys_ws(q, k, v, tk + 1, 0.3, false, y, NULL, 0),
                     SX_E_RANGE);
        cr_assert(strstr(sx_last_error(), "151 keys seen of 150") != NULL, "%s", sx_last_error());
        cr_assert_eq(sx_tensor_attention_keys_ws(q, k, v, -1, 0.3, false, y, NULL, 0), SX_E_RANGE);
        sx_tensor_free(q);
        sx_tensor_free(k);
        sx_tensor_free(v);
        sx_tensor_free(y);
        sx_tensor_free(want);
    }
}
