/* nn's communicator hook (sx_nn.h, "Data-parallel training"; issue 22), without MPI: which
 * communicator a run uses, the refusals, and a failing communicator's error coming back from
 * sx_nn_train and sx_nn_fit with nothing leaked. (tests/mpi/run_mpi_tests runs the real thing
 * under mpirun.) */
#include "testutil.h"

#include <sx_nn.h>

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
