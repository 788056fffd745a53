/* nn's communicator hook (sx_nn.h, "Data-parallel training"), without MPI: which
 * communicator a run uses, the refusals, and a failing communicator's error coming back from
 * sx_nn_train and sx_nn_fit with nothing leaked. (tests/mpi/run_mpi_tests runs the real thing
 * under mpirun.) */
#include "testutil.h"

#include <sx_nn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool files_equal(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa != NULL && fb != NULL;
    for (int ca = 0; same && ca != EOF;) {
        ca = fgetc(fa);
        same = ca == fgetc(fb);
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

typedef struct fake {
    int allreduces, bcasts;
    sx_status fail; /* returned by every call when not SX_OK */
} fake;

static sx_status fake_allreduce(void *ctx, void *buf, int64_t n, sx_dtype dt, bool max)
{
    fake *f = ctx;
    (void)buf, (void)n, (void)dt, (void)max;
    f->allreduces++;
    return f->fail != SX_OK ? sx_error(f->fail, "fake allreduce: a rank died") : SX_OK;
}

static sx_status fake_bcast(void *ctx, void *buf, int64_t bytes, int root)
{
    fake *f = ctx;
    (void)buf, (void)bytes, (void)root;
    f->bcasts++;
    return SX_OK; /* the start works; the first step's sum fails */
}

static sx_nn_comm fake_comm(fake *f, int size)
{
    sx_nn_comm c;
    memset(&c, 0, sizeof c);
    c.rank = 0;
    c.size = size;
    c.ctx = f;
    c.allreduce = fake_allreduce;
    c.bcast = fake_bcast;
    return c;
}

static uint8_t pixels[64 * 16], labels[64];

static sx_nn_net *small_net(void)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("comm", SX_F32, 3, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){4, 4, 1});
    x = sx_nn_fully_connected(net, x, 8, SX_ACT_RELU);
    x = sx_nn_linear(net, x, 2, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

static sx_ds_images small_set(void)
{
    for (int i = 0; i < 64; i++) {
        labels[i] = (uint8_t)(i % 2);
        for (int j = 0; j < 16; j++)
            pixels[i * 16 + j] = (uint8_t)((i * 7 + j * 13) % 256);
    }
    sx_ds_images s = {64, 4, 4, 1, 2, pixels, labels, NULL, NULL, NULL, NULL};
    return s;
}

Test(mpi_comm, which_communicator_a_run_uses)
{
    fake f = {0, 0, SX_OK};
    sx_nn_comm two = fake_comm(&f, 2), one = fake_comm(&f, 1);
    sx_nn_train_params p = sx_nn_train_params_default();
    cr_assert_null(sx_nn_comm_of(NULL));
    cr_assert_null(sx_nn_comm_of(&p), "no communicator by default");
    p.comm = &one;
    cr_assert_null(sx_nn_comm_of(&p), "one rank trains alone");
    p.comm = &two;
    cr_assert_eq(sx_nn_comm_of(&p), &two);
    p.local = true;
    cr_assert_null(sx_nn_comm_of(&p));
    p.local = false;
    p.comm = NULL;
    sx_nn_comm_set_default(&two);
    cr_assert_eq(sx_nn_comm_default(), &two);
    cr_assert_eq(sx_nn_comm_of(&p), &two, "the default");
    p.comm = &one;
    cr_assert_null(sx_nn_comm_of(&p), "p.comm wins over the default");
    sx_nn_comm_set_default(NULL);
    cr_assert_null(sx_nn_comm_default());
    cr_assert_eq(sx_nn_model_comm_bytes(NULL), 0);
}

Test(mpi_comm, eager_over_ranks_is_refused)
{
    fake f = {0, 0, SX_OK};
    sx_nn_comm two = fake_comm(&f, 2);
    sx_nn_net *net = small_net();
    sx_ds_images set = small_set();
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 8;
    p.eager = true;
    p.comm = &two;
    cr_assert_eq(sx_nn_train(net, &p, &set, NULL, NULL), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "eager training over 2 ranks") != NULL, "%s",
              sx_last_error());
    cr_assert_eq(f.allreduces + f.bcasts, 0, "nothing communicated");
    cr_assert_eq(sx_nn_net_steps(net), 0, "nothing trained");
    sx_nn_net_free(net);
}

Test(mpi_comm, a_failing_communicator_stops_training)
{
    fake f = {0, 0, SX_E_IO};
    sx_nn_comm two = fake_comm(&f, 2);
    sx_nn_net *net = small_net();
    sx_ds_images set = small_set();
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 8;
    p.comm = &two;
    p.verbose = 0;
    cr_assert_eq(sx_nn_train(net, &p, &set, NULL, NULL), SX_E_IO);
    cr_assert(strstr(sx_last_error(), "a rank died") != NULL, "%s", sx_last_error());
    sx_ds_source *src = NULL;
    cr_assert_eq(sx_ds_source_images(&set, &src), SX_OK);
    sx_nn_fit_params fp = sx_nn_fit_params_default();
    fp.train = p;
    cr_assert_eq(sx_nn_fit(net, &fp, src, NULL, NULL), SX_E_IO);
    cr_assert_gt(f.allreduces, 0);
    sx_ds_source_free(src);
    sx_nn_net_free(net);
}

Test(mpi_comm, a_single_rank_run_is_untouched)
{
    /* p.comm of one rank: the same bits as no communicator, and nothing communicated */
    fake f = {0, 0, SX_OK};
    sx_nn_comm one = fake_comm(&f, 1);
    sx_ds_images set = small_set();
    sx_nn_net *a = small_net(), *b = small_net();
    sx_nn_train_params p = sx_nn_train_params_default();
    p.batch = 8;
    p.verbose = 0;
    cr_assert_eq(sx_nn_train(a, &p, &set, NULL, NULL), SX_OK);
    p.comm = &one;
    cr_assert_eq(sx_nn_train(b, &p, &set, NULL, NULL), SX_OK);
    cr_assert_eq(f.allreduces + f.bcasts, 0);
    char pa[64], pb[64];
    snprintf(pa, sizeof pa, "/tmp/sx_mpi_comm_a_%d", (int)getpid());
    snprintf(pb, sizeof pb, "/tmp/sx_mpi_comm_b_%d", (int)getpid());
    cr_assert_eq(sx_nn_checkpoint_save(a, &p, pa), SX_OK);
    cr_assert_eq(sx_nn_checkpoint_save(b, &p, pb), SX_OK);
    cr_assert(files_equal(pa, pb));
    remove(pa);
    remove(pb);
    sx_nn_net_free(a);
    sx_nn_net_free(b);
}

/* ---------------------------------------------------------------- the sums in the compiled step */

/* A communicator with start and wait, recording them: a sum over `copies` ranks that all hold
 * this rank's values (buf times copies), and what the graph had computed at each start. */
typedef struct rec {
    int starts, waits, allreduces;
    int64_t sizes[8];        /* elements of each start (the first 8) */
    const void *bufs[8];     /* their buffers */
    int waits_before_start;  /* waits seen while some bucket was still to start */
    const void *inflight[8]; /* started, not waited for */
    int n_inflight;
    bool later_ready[8];     /* at start k: the last bucket's gradients all computed */
    int n_buckets;           /* the model's buckets (set by the test) */
    sx_cg_node *last_bucket; /* its allreduce_start (set by the test) */
    double copies;
} rec;

static sx_status rec_start(void *ctx, void *buf, int64_t n, sx_dtype dt)
{
    rec *r = ctx;
    if (r->starts < 8) {
        r->sizes[r->starts] = n;
        r->bufs[r->starts] = buf;
        bool ready = true;
        for (int i = 1; i < sx_cg_node_n_inputs(r->last_bucket); i++)
            ready = ready && sx_cg_valid(sx_cg_node_input(r->last_bucket, i));
        r->later_ready[r->starts] = ready;
    }
    if (r->n_inflight < 8)
        r->inflight[r->n_inflight++] = buf;
    r->starts++;
    for (int64_t i = 0; i < n; i++) /* the other ranks held the same values */
        if (dt == SX_F32)
            ((float *)buf)[i] *= (float)r->copies;
        else
            ((double *)buf)[i] *= r->copies;
    return SX_OK;
}

/* A wait for a sum in flight (not a start's check that none is) while some bucket is still
 * to start is an update waiting too early. */
static sx_status rec_wait(void *ctx, void *buf)
{
    rec *r = ctx;
    for (int i = 0; i < r->n_inflight; i++)
        if (r->inflight[i] == buf) {
            r->inflight[i] = r->inflight[--r->n_inflight];
            r->waits++;
            if (r->starts % r->n_buckets != 0)
                r->waits_before_start++;
        }
    return SX_OK;
}

static sx_status rec_allreduce(void *ctx, void *buf, int64_t n, sx_dtype dt, bool max)
{
    rec *r = ctx;
    (void)max;
    r->allreduces++;
    for (int64_t i = 0; i < n; i++)
        if (dt == SX_F64)
            ((double *)buf)[i] *= r->copies;
    return SX_OK;
}

static sx_nn_comm rec_comm(rec *r, int rank, int size)
{
    sx_nn_comm c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.size = size;
    c.ctx = r;
    c.allreduce = rec_allreduce;
    c.bcast = fake_bcast;
    c.start = rec_start;
    c.wait = rec_wait;
    return c;
}

/* conv 3x3x4 -> dense 600 (a 1.2 MB weight: a bucket of its own) -> linear 3, on 8x8x8 */
static sx_nn_net *wide_net(void)
{
    sx_nn_net *net = NULL;
    cr_assert_eq(sx_nn_net_new("wide", SX_F32, 5, &net), SX_OK);
    sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){8, 8, 8});
    sx_nn_conv2d_params conv = sx_nn_conv2d_params_default(8, 3, 3);
    conv.conv.padding = SX_PAD_SAME;
    conv.act = SX_ACT_RELU;
    x = sx_nn_conv2d(net, x, &conv);
    x = sx_nn_fully_connected(net, x, 600, SX_ACT_RELU);
    x = sx_nn_linear(net, x, 3, SX_ACT_SOFTMAX);
    cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
    return net;
}

/* The largest difference between the weights of two networks (through their checkpoints). */
static double weights_diff(sx_nn_net *a, sx_nn_net *b, const sx_nn_train_params *p)
{
    char pa[64], pb[64];
    snprintf(pa, sizeof pa, "/tmp/sx_mpi_comm_wa_%d", (int)getpid());
    snprintf(pb, sizeof pb, "/tmp/sx_mpi_comm_wb_%d", (int)getpid());
    cr_assert_eq(sx_nn_checkpoint_save(a, p, pa), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_nn_checkpoint_save(b, p, pb), SX_OK, "%s", sx_last_error());
    sx_cg_file *fa = NULL, *fb = NULL;
    cr_assert_eq(sx_cg_file_read(pa, &fa), SX_OK);
    cr_assert_eq(sx_cg_file_read(pb, &fb), SX_OK);
    double diff = 0;
    int n = sx_cg_file_n_tensors(fa);
    cr_assert_eq(n, sx_cg_file_n_tensors(fb));
    cr_assert_gt(n, 0);
    for (int i = 0; i < n; i++) {
        const char *name = sx_cg_file_tensor_name(fa, i);
        const sx_tensor *ta = sx_cg_file_tensor(fa, name), *tb = sx_cg_file_tensor(fb, name);
        cr_assert(tb != NULL && tb->size == ta->size, "%s", name);
        for (int64_t j = 0; j < ta->size; j++)
            diff = fmax(diff, fabs(sx_tensor_get(ta, j) - sx_tensor_get(tb, j)));
    }
    sx_cg_file_free(fa);
    sx_cg_file_free(fb);
    remove(pa);
    remove(pb);
    return diff;
}

/* The allreduce_start nodes of a model's graph, in creation order. */
static int buckets_of(sx_nn_model *m, sx_cg_node **out, int cap)
{
    sx_cg_graph *g = sx_nn_model_graph(m);
    int n = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *x = sx_cg_graph_node(g, i);
        if (x != NULL && sx_cg_node_op(x) == SX_OP_ALLREDUCE_START && n < cap)
            out[n++] = x;
    }
    return n;
}

static void batch_of(sx_tensor **x, sx_tensor **y, int64_t n)
{
    cr_assert_eq(sx_tensor_new(SX_F32, 4, (int64_t[]){n, 8, 8, 8}, x), SX_OK);
    cr_assert_eq(sx_tensor_zeros(SX_F32, 2, (int64_t[]){n, 3}, y), SX_OK);
    for (int64_t i = 0; i < (*x)->size; i++)
        sx_tensor_set(*x, i, (double)((i * 37) % 101) / 101.0 - 0.4);
    for (int64_t i = 0; i < n; i++)
        sx_tensor_set(*y, i * 3 + i % 3, 1);
}

Test(mpi_comm, each_buckets_sum_starts_before_the_earlier_layers_backward_runs)
{
    /* the overlap is real: the first bucket's sum starts while the gradients of the last
     * bucket (the first layers') are not computed yet, and no update waits before every bucket
     * has started */
    rec r = {0};
    r.copies = 1;
    sx_nn_comm c = rec_comm(&r, 0, 2);
    sx_nn_net *net = wide_net();
    sx_nn_train_params p = sx_nn_train_params_default();
    p.comm = &c;
    sx_nn_model *m = NULL;
    cr_assert_eq(sx_nn_compile_train(net, &p, 4, &m), SX_OK, "%s", sx_last_error());
    sx_cg_node *b[8];
    r.n_buckets = buckets_of(m, b, 8);
    cr_assert_eq(r.n_buckets, 3, "the dense layers' small gradients, its weight, the conv's");
    r.last_bucket = b[r.n_buckets - 1];
    sx_tensor *x, *y;
    batch_of(&x, &y, 4);
    for (int step = 1; step <= 2; step++) {
        cr_assert_eq(sx_nn_model_step(m, x, y, 0.01, step, NULL, NULL), SX_OK, "%s",
                     sx_last_error());
        cr_assert_eq(r.starts, 3 * step, "one start per bucket and step");
        int k = 3 * (step - 1);
        cr_assert_not(r.later_ready[k],
                      "step %d: bucket 1 started after the first layers' "
                      "gradients were computed: nothing overlaps",
                      step);
        cr_assert_not(r.later_ready[k + 1], "step %d: bucket 2 too", step);
        cr_assert(r.later_ready[k + 2], "step %d: the last bucket starts once complete", step);
        cr_assert_eq(r.waits_before_start, 0,
                     "step %d: an update waited before every bucket "
                     "had started",
                     step);
        cr_assert_geq(r.waits, 3 * step, "each bucket is waited for before its updates");
    }
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_nn_model_free(m);
    sx_nn_net_free(net);
}

Test(mpi_comm, gradients_travel_packed_one_message_per_bucket)
{
    /* three buckets, in the order the backward pass completes them: the linear layer's weight
     * and bias with the dense layer's bias (600 x 3 + 3 + 600 elements), the dense weight alone
     * (8 x 8 x 8 x 600: over 1 MiB), the conv's kernel and bias (3 x 3 x 8 x 8 + 8); a sum over
     * two ranks holding the same batch trains as one process does on it */
    rec r = {0};
    r.copies = 2;
    sx_nn_comm c = rec_comm(&r, 0, 2);
    sx_nn_net *a = wide_net(), *one = wide_net();
    sx_nn_train_params p = sx_nn_train_params_default();
    sx_nn_model *ma = NULL, *mo = NULL;
    cr_assert_eq(sx_nn_compile_train(one, &p, 4, &mo), SX_OK, "%s", sx_last_error());
    p.comm = &c;
    cr_assert_eq(sx_nn_compile_train(a, &p, 4, &ma), SX_OK, "%s", sx_last_error());
    sx_cg_node *b[8];
    r.n_buckets = buckets_of(ma, b, 8);
    r.last_bucket = b[r.n_buckets - 1];
    sx_tensor *x, *y;
    batch_of(&x, &y, 4);
    for (int step = 1; step <= 3; step++) {
        cr_assert_eq(sx_nn_model_step(ma, x, y, 0.05, step, NULL, NULL), SX_OK, "%s",
                     sx_last_error());
        cr_assert_eq(sx_nn_model_step(mo, x, y, 0.05, step, NULL, NULL), SX_OK, "%s",
                     sx_last_error());
    }
    cr_assert_eq(r.starts, 9);
    cr_assert_eq(r.sizes[0], 600 * 3 + 3 + 600);
    cr_assert_eq(r.sizes[1], 8 * 8 * 8 * 600);
    cr_assert_eq(r.sizes[2], 3 * 3 * 8 * 8 + 8);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(r.bufs[k], sx_cg_value(b[k])->data, "bucket %d: one buffer, in place", k);
    cr_assert_eq(sx_nn_model_comm_bytes(ma), (int64_t)4 * (2403 + 307200 + 584));
    cr_assert_eq(r.allreduces, 0, "sx_nn_model_step sends nothing else");
    /* the same weights to f32 rounding (one process fuses the dense update with its gradient) */
    double diff = weights_diff(a, one, &p);
    cr_assert_lt(diff, 1e-6, "the weights differ by %g", diff);
    sx_tensor_free(x);
    sx_tensor_free(y);
    sx_nn_model_free(ma);
    sx_nn_model_free(mo);
    sx_nn_net_free(a);
    sx_nn_net_free(one);
}

Test(mpi_comm, a_ranks_dropout_masks_are_its_rows_of_the_global_masks)
{
    /* rows [2, 5) of a (5, 3, 4) mask, drawn alone from the same generator state, are the
     * whole mask's rows; and the generator advances the same */
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F32, &g), SX_OK);
    int id = 0;
    cr_assert_eq(sx_cg_rng_new(g, 99, &id), SX_OK);
    sx_rng start = *sx_cg_rng(g, id);
    sx_cg_node *whole = sx_cg_dropout_mask(g, id, 0.5, 3, (int64_t[]){5, 3, 4});
    cr_assert_eq(sx_cg_eval(g, 1, &whole), SX_OK, "%s", sx_last_error());
    sx_rng after = *sx_cg_rng(g, id);
    *sx_cg_rng(g, id) = start;
    cr_assert_eq(sx_cg_set_mask_row(g, 2), SX_OK);
    sx_cg_node *rows = sx_cg_dropout_mask(g, id, 0.5, 3, (int64_t[]){3, 3, 4});
    cr_assert_eq(sx_cg_eval(g, 1, &rows), SX_OK, "%s", sx_last_error());
    cr_assert_eq(memcmp(sx_cg_rng(g, id), &after, sizeof after), 0, "one draw either way");
    const float *w = sx_cg_value(whole)->data, *r = sx_cg_value(rows)->data;
    int dropped = 0;
    for (int i = 0; i < 36; i++) {
        cr_assert_eq(r[i], w[24 + i], "element %d", i);
        dropped += r[i] == 0;
    }
    cr_assert(dropped > 0 && dropped < 36);
    cr_assert_eq(sx_cg_set_mask_row(g, -1), SX_E_ARG);
    cr_assert_eq(sx_cg_set_mask_row(NULL, 0), SX_E_ARG);
    sx_cg_graph_free(g);
}
