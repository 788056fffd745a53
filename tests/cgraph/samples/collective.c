/* collective.c: the samples of the collectives (cgraph/ops/collective.c): each op's SPEC_, DT_,
 * sample generator and references. Part of ../opsamples.c, which includes it. */

/* ---------------------------------------------------------------- collectives */

/* A graph without a communicator is a job of one process: the bucket is scale * x..., packed. */
static const struct {
    double scale;
    int k;
    shp x[2];
} bucket_cases[] = {{0.5, 2, {{2, {2, 3}}, {1, {4}}}},
                    {1, 1, {{1, {5}}, {0, {0}}}},
                    {0, 2, {{2, {1, 2}}, {0, {0}}}},
                    {-3, 2, {{0, {0}}, {2, {2, 2}}}}};
#define SPEC_allreduce_start 4, OS_NONE, 0, 0, REF(kernel_allreduce_start, plain_allreduce_start)
#define DT_allreduce_start EXCLUDED("a collective: nn/ makes it after differentiation")
static sx_cg_node *sample_allreduce_start(GEN_ARGS)
{
    CTX;
    double w = bucket_cases[v].scale;
    sx_cg_node *scale = in_fixed(c, (shp){0, {0}}, V_UNIFORM, w, w), *xs[2];
    for (int i = 0; i < bucket_cases[v].k; i++)
        xs[i] = in_fixed(c, bucket_cases[v].x[i], V_UNIFORM, -2, 2);
    return sx_cg_allreduce_start(g, scale, bucket_cases[v].k, xs);
}

/* Each input times the scale (the kernel of mul by a scalar) into its range of out; scale 0
 * writes zeros. */
static sx_status kernel_allreduce_start(KERNEL_ARGS)
{
    (void)s;
    double w = sx_tensor_get(x[0], 0);
    int64_t at = 0;
    for (int i = 1; i < sx_cg_node_n_inputs(n); i++) {
        int64_t len = x[i]->size;
        sx_tensor from = sx_tensor_view(x[i]->dtype, 1, &len, x[i]->data);
        sx_tensor to = sx_tensor_view(out->dtype, 1, &len,
                                      (char *)out->data + (size_t)at * sx_dtype_size(out->dtype));
        if (w == 0) /* zeros whatever x holds (a rank without rows: sx_cgraph.h) */
            memset(to.data, 0, (size_t)len * sx_dtype_size(out->dtype));
        else
            SX_TRY(sx_tensor_binary_scalar_out(SX_BINARY_MUL, &from, w, &to));
        at += len;
    }
    return SX_OK;
}

static sx_status plain_allreduce_start(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    double w = ref_get(x[0], 0);
    int64_t at = 0;
    for (int i = 1; i < sx_cg_node_n_inputs(n); i++)
        for (int64_t j = 0; j < x[i]->size; j++)
            want[at++] = w * ref_get(x[i], j);
    return SX_OK;
}

/* Parts of a bucket of (2,3) and (4) packed with scale 1: a whole input, the other, one
 * element, an empty part. */
static const struct {
    int64_t offset;
    shp s;
} part_cases[] = {{6, {2, {2, 2}}}, {0, {2, {3, 2}}}, {3, {0, {0}}}, {10, {1, {0}}}};
#define SPEC_allreduce_part 4, OS_NONE, 0, 0, REF(kernel_allreduce_part, plain_allreduce_part)
#define DT_allreduce_part EXCLUDED("a collective: nn/ makes it after differentiation")
static sx_cg_node *sample_allreduce_part(GEN_ARGS)
{
    CTX;
    sx_cg_node *scale = in_fixed(c, (shp){0, {0}}, V_UNIFORM, 1, 1);
    sx_cg_node *xs[2] = {in_fixed(c, (shp){2, {2, 3}}, V_UNIFORM, -2, 2),
                         in_fixed(c, (shp){1, {4}}, V_UNIFORM, -2, 2)};
    return sx_cg_allreduce_part(g, sx_cg_allreduce_start(g, scale, 2, xs), part_cases[v].offset,
                                part_cases[v].s.rank, part_cases[v].s.d);
}

/* The bucket's elements from the offset, copied. */
static sx_status kernel_allreduce_part(KERNEL_ARGS)
{
    (void)s;
    int64_t len = out->size;
    sx_tensor from =
        sx_tensor_view(x[0]->dtype, 1, &len,
                       (char *)x[0]->data + (size_t)sx_cg_node_attr(n)->allreduce.offset *
                                                sx_dtype_size(x[0]->dtype));
    sx_tensor to = sx_tensor_view(out->dtype, 1, &len, out->data);
    return sx_tensor_copy_out(&from, &to);
}

static sx_status plain_allreduce_part(PLAIN_ARGS)
{
    (void)mag, (void)compare;
    int64_t at = sx_cg_node_attr(n)->allreduce.offset;
    for (int64_t j = 0; j < sx_cg_value(n)->size; j++)
        want[j] = ref_get(x[0], at + j);
    return SX_OK;
}
