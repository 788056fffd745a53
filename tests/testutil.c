/* testutil.c: shared helpers of the Criterion suites (see testutil.h). */
#include "testutil.h"

#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

sx_tensor *tu_rand(sx_rng *rng, sx_dtype dt, int rank, const int64_t *shape, double lo, double hi)
{
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_new(dt, rank, shape, &t), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_rand_uniform(t, rng, lo, hi), SX_OK, "%s", sx_last_error());
    return t;
}

sx_tensor *tu_zeros(sx_dtype dt, int rank, const int64_t *shape)
{
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_zeros(dt, rank, shape, &t), SX_OK, "%s", sx_last_error());
    return t;
}

int tu_rand_shape(sx_rng *rng, int rmin, int rmax, int64_t dmax, int64_t *shape)
{
    int r = rmin + (int)sx_rng_below(rng, (uint64_t)(rmax - rmin + 1));
    for (int i = 0; i < r; i++)
        shape[i] = 1 + (int64_t)sx_rng_below(rng, (uint64_t)dmax);
    return r;
}

double tu_rtol(sx_dtype dt)
{
    return dt == SX_F32 ? 1e-5 : 1e-12;
}

bool tu_close(const sx_tensor *a, const sx_tensor *b, double rtol, double atol)
{
    if (a->size != b->size) {
        cr_log_error("sizes differ: %lld vs %lld", (long long)a->size, (long long)b->size);
        return false;
    }
    for (int64_t i = 0; i < a->size; i++) {
        double x = sx_tensor_get(a, i), y = sx_tensor_get(b, i);
        if (isnan(x) && isnan(y))
            continue;
        if (x == y)
            continue;
        if (!(fabs(x - y) <= atol + rtol * fabs(y))) {
            cr_log_error("element %lld: got %.17g, want %.17g", (long long)i, x, y);
            return false;
        }
    }
    return true;
}

/* ---------------------------------------------------------------- failing allocator */

static long fail_at = -1, count, live;

static void *f_alloc(void *ctx, size_t n)
{
    (void)ctx;
    if (fail_at >= 0 && count >= fail_at)
        return NULL;
    count++;
    void *p = malloc(n);
    if (p)
        live++;
    return p;
}

static void *f_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    if (fail_at >= 0 && count >= fail_at)
        return NULL;
    count++;
    void *q = realloc(p, n);
    if (q && !p)
        live++;
    return q;
}

static void f_free(void *ctx, void *p)
{
    (void)ctx;
    if (p)
        live--;
    free(p);
}

void tu_fail_after(long k)
{
    fail_at = k;
    count = 0;
    live = 0;
    sx_allocator a = {f_alloc, f_realloc, f_free, NULL};
    sx_allocator_set(&a);
}

void tu_fail_reset(void)
{
    fail_at = -1;
    sx_allocator_set(NULL);
}

long tu_alloc_count(void)
{
    return count;
}

long tu_live_allocs(void)
{
    return live;
}

void tu_mnist_dir(char *buf, size_t n)
{
    const char *env = getenv("SX_MNIST_DIR");
    if (env != NULL && env[0] != '\0') {
        snprintf(buf, n, "%s", env);
        return;
    }
    char file[1024]; /* this file is tests/testutil.c: the root is two levels up */
    snprintf(file, sizeof file, "%s", __FILE__);
    snprintf(buf, n, "%s/data/mnist", dirname(dirname(file)));
}
