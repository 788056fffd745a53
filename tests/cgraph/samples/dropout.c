/* dropout.c: the samples of dropout_mask (cgraph/ops/dropout.c): each op's SPEC_, DT_, sample
 * generator and references. Part of ../opsamples.c, which includes it. */

/* ---------------------------------------------------------------- dropout */

/* A mask from a graph generator seeded from rng (the seed is recorded for references). Its
 * dtype is the graph's. */
static const struct {
    shp s;
    double p;
} dropout_cases[] = {{{2, {4, 5}}, 0.5}, {{1, {3}}, 0}, {{3, {2, 3, 4}}, 0.25}, {{0, {0}}, 0.9}};
#define SPEC_dropout_mask 4, OS_NONE, 0, 0, REF(kernel_dropout_mask, plain_dropout_mask)
#define DT_dropout_mask GEN(gen_dropout_mask, 1)
static sx_cg_node *sample_dropout_mask(GEN_ARGS)
{
    CTX;
    int id;
    s->rng_seed = sx_rng_u64(rng);
    sx_status st = sx_cg_rng_new(g, s->rng_seed, &id);
    if (st != SX_OK)
        return fail(c, st);
    return sx_cg_dropout_mask(g, id, dropout_cases[v].p, dropout_cases[v].s.rank,
                              dropout_cases[v].s.d);
}

/* The first mask the graph's generator draws. */
static sx_status kernel_dropout_mask(KERNEL_ARGS)
{
    (void)x;
    sx_rng r;
    sx_rng_seed(&r, s->rng_seed);
    return sx_tensor_dropout_mask(out, &r, sx_cg_node_attr(n)->alpha);
}

/* Every entry is 0 or the dtype's 1/(1-p). */
static sx_status plain_dropout_mask(PLAIN_ARGS)
{
    (void)x, (void)want, (void)mag;
    const sx_tensor *y = sx_cg_value(n);
    sx_tensor *keep = ref_zeros(y->dtype, 0, NULL);
    sx_tensor_set(keep, 0, 1 / (1 - sx_cg_node_attr(n)->alpha));
    sx_status st = SX_OK;
    for (int64_t i = 0; st == SX_OK && i < y->size; i++)
        if (!(ref_get(y, i) == 0 || ref_get(y, i) == ref_get(keep, 0)))
            st = sx_error(SX_E_STATE, "mask entry %g", ref_get(y, i));
    sx_tensor_free(keep);
    *compare = false;
    return st;
}
