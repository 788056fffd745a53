/* Core of the tensor library: statuses, errors, construction, ownership, reshape, fills, the
 * generator, printing, and out-of-memory behaviour. */
#include "testutil.h"

#include <math.h>
#include <string.h>

Test(tensor_core, status_strings_are_distinct)
{
    cr_assert_str_eq(sx_status_str(SX_OK), "ok");
    cr_assert_str_eq(sx_status_str(SX_E_SHAPE), "shape mismatch");
    for (int i = 0; i < SX_STATUS_COUNT; i++)
        for (int j = i + 1; j < SX_STATUS_COUNT; j++)
            cr_assert_str_neq(sx_status_str(i), sx_status_str(j));
    cr_assert_str_eq(sx_status_str(SX_STATUS_COUNT), "unknown status");
}

Test(tensor_core, new_and_free_owned_and_borrowed)
{
    int64_t shape[3] = {2, 3, 4};
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_new(SX_F64, 3, shape, &t), SX_OK);
    cr_assert_eq(t->size, 24);
    cr_assert(t->owns);
    cr_assert_eq(t->shape[3], 1);
    sx_tensor_free(t);

    float buf[6] = {1, 2, 3, 4, 5, 6};
    int64_t s2[2] = {2, 3};
    cr_assert_eq(sx_tensor_wrap(SX_F32, 2, s2, buf, &t), SX_OK);
    cr_assert_not(t->owns);
    cr_assert_eq(sx_tensor_get(t, 4), 5.0);
    sx_tensor_set(t, 0, 9.0);
    cr_assert_eq(buf[0], 9.0f, "a borrowed tensor writes through to the caller's memory");
    sx_tensor_free(t);
    cr_assert_eq(buf[5], 6.0f);
    sx_tensor_free(NULL);
}

Test(tensor_core, bad_shapes_are_errors)
{
    sx_tensor *t = (sx_tensor *)1;
    int64_t neg[2] = {2, -1};
    cr_assert_eq(sx_tensor_new(SX_F32, 2, neg, &t), SX_E_SHAPE);
    cr_assert_null(t);
    cr_assert(strstr(sx_last_error(), "negative") != NULL, "%s", sx_last_error());
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    cr_assert_eq(sx_tensor_new(SX_F32, 9, nine, &t), SX_E_RANK);
    int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 2};
    cr_assert_eq(sx_tensor_new(SX_F32, 3, huge, &t), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_new((sx_dtype)7, 0, NULL, &t), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_wrap(SX_F32, 0, NULL, NULL, &t), SX_E_ARG);
}

Test(tensor_core, empty_and_scalar_tensors)
{
    int64_t shape[2] = {0, 5};
    sx_tensor *t = NULL, *s = NULL;
    cr_assert_eq(sx_tensor_zeros(SX_F32, 2, shape, &t), SX_OK);
    cr_assert_eq(t->size, 0);
    cr_assert_eq(sx_tensor_scalar(SX_F64, 2.5, &s), SX_OK);
    cr_assert_eq(s->rank, 0);
    cr_assert_eq(s->size, 1);
    cr_assert_eq(sx_tensor_get(s, 0), 2.5);
    sx_tensor_free(t);
    sx_tensor_free(s);
}

Test(tensor_core, reshape_keeps_data_and_checks_size)
{
    int64_t s[2] = {2, 6}, s3[3] = {3, 2, 2}, bad[2] = {5, 5};
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_new(SX_F32, 2, s, &t), SX_OK);
    cr_assert_eq(sx_tensor_arange(t, 0, 1), SX_OK);
    void *data = t->data;
    cr_assert_eq(sx_tensor_reshape(t, 3, s3), SX_OK);
    cr_assert_eq(t->data, data);
    cr_assert_eq(t->rank, 3);
    cr_assert_eq(sx_tensor_get(t, 11), 11.0);
    cr_assert_eq(sx_tensor_reshape(t, 2, bad), SX_E_SHAPE);
    cr_assert_eq(t->rank, 3, "a failed reshape leaves the tensor unchanged");
    cr_assert(strstr(sx_last_error(), "(3,2,2)") && strstr(sx_last_error(), "(5,5)"), "%s",
              sx_last_error());
    sx_tensor_free(t);
}

Test(tensor_core, fills)
{
    int64_t s[1] = {5};
    sx_tensor *t = NULL;
    cr_assert_eq(sx_tensor_new(SX_F64, 1, s, &t), SX_OK);
    cr_assert_eq(sx_tensor_linspace(t, 0, 1), SX_OK);
    for (int i = 0; i < 5; i++)
        cr_assert_float_eq(sx_tensor_get(t, i), i * 0.25, 1e-15);
    cr_assert_eq(sx_tensor_fill(t, -3), SX_OK);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(sx_tensor_get(t, i), -3.0);
    cr_assert_eq(sx_tensor_arange(t, 10, -2), SX_OK);
    cr_assert_eq(sx_tensor_get(t, 4), 2.0);
    sx_tensor_free(t);
}

Test(tensor_core, rng_is_seeded_and_reproducible)
{
    sx_rng a, b, c;
    sx_rng_seed(&a, 42);
    sx_rng_seed(&b, 42);
    sx_rng_seed(&c, 43);
    int same_c = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t x = sx_rng_u64(&a);
        cr_assert_eq(x, sx_rng_u64(&b));
        same_c += x == sx_rng_u64(&c);
    }
    cr_assert_lt(same_c, 2);
    /* uniform in [0,1) with mean 1/2, normal with mean 0 and variance 1 */
    double sum = 0, sum2 = 0, nsum = 0, nsum2 = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        double u = sx_rng_uniform(&a);
        cr_assert(u >= 0 && u < 1);
        sum += u;
        sum2 += u * u;
        double g = sx_rng_normal(&a);
        cr_assert(isfinite(g));
        nsum += g;
        nsum2 += g * g;
    }
    cr_assert_float_eq(sum / n, 0.5, 0.005);
    cr_assert_float_eq(sum2 / n - 0.25, 1.0 / 12, 0.005);
    cr_assert_float_eq(nsum / n, 0.0, 0.01);
    cr_assert_float_eq(nsum2 / n, 1.0, 0.02);
    int counts[3] = {0};
    for (int i = 0; i < 30000; i++)
        counts[sx_rng_below(&a, 3)]++;
    for (int i = 0; i < 3; i++)
        cr_assert(counts[i] > 9500 && counts[i] < 10500);
}

Test(tensor_core, random_fills_from_seed)
{
    int64_t s[2] = {30, 40};
    sx_rng r1, r2;
    sx_rng_seed(&r1, 7);
    sx_rng_seed(&r2, 7);
    sx_tensor *a = tu_rand(&r1, SX_F32, 2, s, -2, 3);
    sx_tensor *b = tu_rand(&r2, SX_F32, 2, s, -2, 3);
    cr_assert_eq(memcmp(a->data, b->data, 1200 * sizeof(float)), 0);
    for (int64_t i = 0; i < a->size; i++)
        cr_assert(sx_tensor_get(a, i) >= -2 && sx_tensor_get(a, i) < 3);
    cr_assert_eq(sx_tensor_rand_uniform(a, &r1, 1, 0), SX_E_ARG);
    cr_assert_eq(sx_tensor_rand_normal(a, NULL, 0, 1), SX_E_ARG);
    sx_tensor_free(a);
    sx_tensor_free(b);
}

Test(tensor_core, copy_cast_clone)
{
    int64_t s[2] = {3, 4}, s2[1] = {12}, s3[1] = {11};
    sx_rng r;
    sx_rng_seed(&r, 1);
    sx_tensor *a = tu_rand(&r, SX_F64, 2, s, -1, 1);
    sx_tensor *f = tu_zeros(SX_F32, 2, s), *flat = tu_zeros(SX_F64, 1, s2);
    sx_tensor *short_ = tu_zeros(SX_F64, 1, s3), *c = NULL;
    cr_assert_eq(sx_tensor_cast_out(a, f), SX_OK);
    cr_assert(tu_close(f, a, 1e-7, 0));
    cr_assert_eq(sx_tensor_copy_out(a, flat), SX_OK);
    cr_assert_eq(sx_tensor_max_abs_diff(a, flat), 0.0);
    cr_assert_eq(sx_tensor_copy_out(a, short_), SX_E_SHAPE);
    cr_assert_eq(sx_tensor_copy_out(a, f), SX_E_DTYPE);
    cr_assert_eq(sx_tensor_clone(a, &c), SX_OK);
    cr_assert_neq(c->data, a->data);
    cr_assert_eq(sx_tensor_max_abs_diff(a, c), 0.0);
    sx_tensor_free(a);
    sx_tensor_free(f);
    sx_tensor_free(flat);
    sx_tensor_free(short_);
    sx_tensor_free(c);
}

Test(tensor_core, print_small_and_summarised)
{
    int64_t s[2] = {2, 3}, big[2] = {50, 50};
    sx_tensor *t = NULL, *b = NULL;
    cr_assert_eq(sx_tensor_new(SX_F32, 2, s, &t), SX_OK);
    cr_assert_eq(sx_tensor_arange(t, 1, 1), SX_OK);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sx_tensor_print(t, f);
    fclose(f);
    cr_assert_str_eq(buf, "tensor f32 (2,3)\n[[1, 2, 3],\n [4, 5, 6]]\n");
    free(buf);
    cr_assert_eq(sx_tensor_zeros(SX_F64, 2, big, &b), SX_OK);
    f = open_memstream(&buf, &len);
    sx_tensor_print(b, f);
    fclose(f);
    cr_assert(strstr(buf, "...") != NULL);
    cr_assert_lt(len, 400);
    free(buf);
    sx_tensor_free(t);
    sx_tensor_free(b);
}

Test(tensor_core, threads_setting)
{
    int n = sx_threads_get();
    cr_assert_geq(n, 1);
    cr_assert_eq(sx_threads_set(1), SX_OK);
    cr_assert_eq(sx_threads_get(), 1);
    cr_assert_eq(sx_threads_set(-1), SX_E_ARG);
    cr_assert_eq(sx_threads_set(n), SX_OK);
}

/* Fail the k-th allocation for every k over a sequence of tensor operations: every failure is
 * SX_E_NOMEM with nothing leaked; the sequence finishes once k passes its allocation count. */
Test(tensor_core, out_of_memory_every_allocation)
{
    int64_t s[2] = {4, 5};
    for (long k = 0;; k++) {
        tu_fail_after(k);
        sx_tensor *a = NULL, *b = NULL, *c = NULL;
        sx_status st = sx_tensor_ones(SX_F32, 2, s, &a);
        if (st == SX_OK)
            st = sx_tensor_map(SX_MAP_EXP, 0, a, &b);
        if (st == SX_OK)
            st = sx_tensor_clone(b, &c);
        bool done = st == SX_OK;
        if (!done) {
            cr_assert_eq(st, SX_E_NOMEM, "k=%ld: %s", k, sx_last_error());
        }
        sx_tensor_free(a);
        sx_tensor_free(b);
        sx_tensor_free(c);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(live, 0, "k=%ld leaked %ld allocations", k, live);
        if (done) {
            cr_assert_geq(k, 6, "the sequence makes 6 allocations");
            break;
        }
    }
}

/* Integer tensors hold indices: made, filled, converted, printed; compute functions refuse them. */
Test(tensor_core, integer_tensors_are_storage)
{
    cr_assert_str_eq(sx_dtype_name(SX_I32), "i32");
    cr_assert_str_eq(sx_dtype_name(SX_I64), "i64");
    cr_assert_eq(sx_dtype_size(SX_I32), 4);
    cr_assert_eq(sx_dtype_size(SX_I64), 8);
    cr_assert(sx_dtype_is_int(SX_I64) && !sx_dtype_is_int(SX_F64));
    sx_tensor *a = NULL, *b = NULL, *f = NULL, *c = NULL;
    cr_assert_eq(sx_tensor_full(SX_I64, 2, (int64_t[]){2, 3}, 7.9, &a), SX_OK);
    cr_assert_eq(SX_I64P(a)[5], 7); /* truncated toward zero */
    cr_assert_eq(sx_tensor_arange(a, -2, 3), SX_OK);
    cr_assert_eq(SX_I64P(a)[0], -2);
    cr_assert_eq(SX_I64P(a)[5], 13);
    SX_I64P(a)[4] = ((int64_t)1 << 40) + 1; /* beyond what f32 and i32 hold exactly */
    cr_assert_eq(sx_tensor_clone(a, &b), SX_OK);
    cr_assert_eq(SX_I64P(b)[4], ((int64_t)1 << 40) + 1);
    cr_assert_eq(sx_tensor_reshape(b, 1, (int64_t[]){6}), SX_OK);
    cr_assert_eq(sx_tensor_new(SX_F64, 2, (int64_t[]){2, 3}, &f), SX_OK);
    cr_assert_eq(sx_tensor_cast_out(a, f), SX_OK);
    cr_assert_eq(SX_F64P(f)[4], (double)(((int64_t)1 << 40) + 1));
    cr_assert_eq(SX_F64P(f)[1], 1.0);
    /* i64 -> i32 out of range, and f64 -> i32 with a NaN: SX_E_RANGE naming the element */
    cr_assert_eq(sx_tensor_new(SX_I32, 2, (int64_t[]){2, 3}, &c), SX_OK);
    cr_assert_eq(sx_tensor_cast_out(a, c), SX_E_RANGE);
    cr_assert(strstr(sx_last_error(), "element 4") != NULL, "%s", sx_last_error());
    SX_F64P(f)[4] = -3.7;
    cr_assert_eq(sx_tensor_cast_out(f, c), SX_OK);
    cr_assert_eq(SX_I32P(c)[4], -3);
    cr_assert_eq(SX_I32P(c)[5], 13);
    SX_F64P(f)[2] = NAN;
    cr_assert_eq(sx_tensor_cast_out(f, c), SX_E_RANGE);
    SX_F64P(f)[2] = 3e9;
    cr_assert_eq(sx_tensor_cast_out(f, c), SX_E_RANGE);
    cr_assert_eq(sx_tensor_fill(c, 3e9), SX_E_RANGE);
    /* a compute function refuses an integer tensor, naming it */
    cr_assert_eq(sx_tensor_binary_out(SX_BINARY_ADD, a, a, a), SX_E_DTYPE);
    cr_assert(strstr(sx_last_error(), "integer tensor (i64)") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_copy_out(a, f), SX_E_DTYPE); /* copies keep the dtype */
    /* printing shows integers in full */
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    sx_tensor_print(b, m);
    fclose(m);
    cr_assert(strstr(buf, "tensor i64 (6)") != NULL, "%s", buf);
    cr_assert(strstr(buf, "1099511627777") != NULL, "%s", buf);
    free(buf);
    double vals[2] = {1, 1e300};
    sx_tensor *d = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_I32, 1, (int64_t[]){2}, vals, 2, &d), SX_E_RANGE);
    cr_assert_null(d);
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_tensor_free(c);
    sx_tensor_free(f);
}
