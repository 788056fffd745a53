/* Save and load (cgraph/serial.c): every op of the table and a small CNN trained after
 * optimisation (fused chains, fused Adam updates, dropout) round trip bit for bit; named tensors
 * and metadata round trip exactly; the bytes on disk match an encoding written here from the
 * format's description; writes are atomic; and every damaged file is a clean error: each
 * truncation, each flipped byte, crafted files with a valid checksum, failing allocations. */
#include "testutil.h"

#include "opsamples.c"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <sx_autodiff.h>
#include <sx_optim.h>

/* ---------------------------------------------------------------- files */

typedef struct tdir {
    char path[64];
} tdir;

/* A new folder, in memory when the system has one (the damaged-file tests write thousands of
 * small files). */
static void tdir_new(tdir *d)
{
    strcpy(d->path, "/dev/shm/sx_serial_XXXXXX");
    if (mkdtemp(d->path) != NULL)
        return;
    strcpy(d->path, "/tmp/sx_serial_XXXXXX");
    cr_assert_not_null(mkdtemp(d->path));
}

static void tdir_file(const tdir *d, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", d->path, name);
}

/* Entries of the folder other than . and .. */
static int tdir_count(const tdir *d)
{
    DIR *dir = opendir(d->path);
    cr_assert_not_null(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(dir);
    return n;
}

static void tdir_free(tdir *d)
{
    chmod(d->path, 0700);
    DIR *dir = opendir(d->path);
    if (dir == NULL)
        return;
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", d->path, e->d_name);
        if (remove(p) != 0)
            rmdir(p);
    }
    closedir(dir);
    rmdir(d->path);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    cr_assert_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void spit(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

static uint64_t le(const unsigned char *b, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static void le_set(unsigned char *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

/* Recompute the trailer's CRC (zlib's crc32 of everything before the 20-byte trailer), so a
 * crafted change reaches the checks behind the checksum. */
static void reseal(unsigned char *b, size_t n)
{
    le_set(b + n - 8, crc32(0, b, (uInt)(n - 20)), 4);
}

/* The offset of the first occurrence of needle (n bytes) in b, or -1. */
static long find(const unsigned char *b, size_t size, const void *needle, size_t n)
{
    for (size_t i = 0; i + n <= size; i++)
        if (memcmp(b + i, needle, n) == 0)
            return (long)i;
    return -1;
}

/* ---------------------------------------------------------------- graphs */

static sx_cg_graph *new_graph(sx_dtype dt)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &g), SX_OK);
    return g;
}

static int64_t count_op(const sx_cg_graph *g, sx_cg_op op)
{
    int64_t c = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        c += n != NULL && sx_cg_node_op(n) == op;
    }
    return c;
}

static bool same_bits(const sx_tensor *a, const sx_tensor *b)
{
    return a != NULL && b != NULL && a->dtype == b->dtype &&
           sx_shape_equal(a->rank, a->shape, b->rank, b->shape) &&
           (a->size == 0 ||
            memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)) == 0);
}

static sx_cg_node *param_rand(sx_cg_graph *g, sx_rng *r, const char *name, sx_dtype dt, int rank,
                              const int64_t *shape, double lo, double hi)
{
    sx_tensor *t = tu_rand(r, dt, rank, shape, lo, hi);
    sx_cg_node *p = sx_cg_param(g, name, t);
    sx_tensor_free(t);
    cr_assert_not_null(p);
    return p;
}

static void set_input(sx_cg_graph *g, sx_cg_node *x, const sx_tensor *v)
{
    cr_assert_eq(sx_cg_input_set(g, x, v, SX_CG_COPY), SX_OK, "%s", sx_last_error());
}

/* ---------------------------------------------------------------- every op */

/* One graph with every variant of every op's sample (opsamples.c), saved with the samples and
 * every input as outputs; the loaded graph, given the same input values, must compute the
 * same bits for every sample (mutating ops and dropout masks included: parameters and
 * generator states travel with the graph). */
static void every_op_round_trip(sx_dtype dt)
{
    enum { MAXO = 4096 };
    static sx_cg_node *outs[MAXO], *louts[MAXO];
    static char names[MAXO][48];
    static const char *onames[MAXO];
    tdir d;
    tdir_new(&d);
    char path[128];
    tdir_file(&d, "ops.sxm", path, sizeof path);
    sx_cg_graph *a = new_graph(dt);
    int n = 0;
    for (int op = 0; op < SX_OP_COUNT; op++)
        for (int v = 0; v < os_ops[op].n_variants; v++) {
            os_sample s;
            sx_cg_node *o = os_build(a, (sx_cg_op)op, dt, 7000 + 16 * (uint64_t)op + v, v, &s);
            cr_assert_not_null(o, "%s/%d: %s", os_ops[op].name, v, sx_last_error());
            snprintf(names[n], sizeof names[n], "%s/%d", os_ops[op].name, v);
            outs[n++] = o;
        }
    int n_samples = n;
    for (int64_t i = 0; i < sx_cg_graph_size(a); i++) {
        sx_cg_node *x = sx_cg_graph_node(a, i);
        if (x != NULL && sx_cg_node_op(x) == SX_OP_INPUT) {
            cr_assert_lt(n, MAXO);
            snprintf(names[n], sizeof names[n], "input/%lld", (long long)i);
            outs[n++] = x;
        }
    }
    for (int i = 0; i < n; i++)
        onames[i] = names[i];
    cr_assert_eq(sx_cg_save(a, n, outs, onames, 0, NULL, NULL, 0, NULL, NULL, path), SX_OK, "%s",
                 sx_last_error());

    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_file_n_outputs(f), n);
    for (int i = 0; i < n; i++)
        cr_assert_str_eq(sx_cg_file_output_name(f, i), names[i]);
    sx_cg_graph *b = NULL;
    cr_assert_eq(sx_cg_file_graph(f, n, onames, &b, louts), SX_OK, "%s", sx_last_error());
    sx_cg_file_free(f);
    cr_assert_eq(sx_cg_graph_dtype(b), dt);
    cr_assert_leq(sx_cg_graph_stats(b).nodes, sx_cg_graph_stats(a).nodes);
    for (int i = n_samples; i < n; i++) {
        cr_assert_eq(sx_cg_node_op(louts[i]), SX_OP_INPUT);
        cr_assert_str_eq(sx_cg_node_name(louts[i]), sx_cg_node_name(outs[i]));
        set_input(b, louts[i], sx_cg_value(outs[i]));
    }
    cr_assert_eq(sx_cg_eval(a, n_samples, outs), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(b, n_samples, louts), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < n_samples; i++) {
        cr_assert_eq(sx_cg_node_op(louts[i]), sx_cg_node_op(outs[i]), "%s", names[i]);
        cr_assert_eq(
            memcmp(sx_cg_node_attr(louts[i]), sx_cg_node_attr(outs[i]), sizeof(sx_cg_attr)), 0,
            "%s: attributes differ", names[i]);
        cr_assert(same_bits(sx_cg_value(outs[i]), sx_cg_value(louts[i])), "%s %s differs", names[i],
                  sx_dtype_name(dt));
    }
    sx_cg_graph_free(a);
    sx_cg_graph_free(b);
    tdir_free(&d);
}

Test(cgraph_serial, every_op_round_trips_bit_for_bit_f32)
{
    every_op_round_trip(SX_F32);
}

Test(cgraph_serial, every_op_round_trips_bit_for_bit_f64)
{
    every_op_round_trip(SX_F64);
}

/* ---------------------------------------------------------------- a trained CNN */

enum { CNN_PARAMS = 3, CNN_MAX_OUT = 32 };
typedef struct cnn {
    sx_cg_graph *g;
    sx_cg_node *x, *y, *lr, *step, *mask, *loss;
    sx_cg_node *params[CNN_PARAMS];
    sx_cg_node *outs[CNN_MAX_OUT]; /* loss, the updates */
    int n_outs;
} cnn;

/* conv2d 3x3 SAME -> relu -> maxpool 2x2 -> dropout -> reshape -> slice/concat (swap halves) ->
 * matmul (weights transposed) + bias -> softmax cross-entropy -> mean; Adam on every parameter;
 * optimised (fused element-wise chains and fused updates). */
static void cnn_build(cnn *m, sx_dtype dt)
{
    sx_cg_graph *g = new_graph(dt);
    m->g = g;
    sx_rng r;
    sx_rng_seed(&r, 11);
    int64_t xs[4] = {4, 6, 6, 2}, ks[4] = {3, 3, 2, 4}, ys[2] = {4, 5}, ws[2] = {5, 36},
            bs[1] = {5}, ms[4] = {4, 3, 3, 4}, flat[2] = {4, 36};
    m->x = sx_cg_input(g, "x", dt, 4, xs);
    m->y = sx_cg_input(g, "y", dt, 2, ys);
    m->lr = sx_cg_input(g, "lr", dt, 0, NULL);
    m->step = sx_cg_input(g, "step", dt, 0, NULL);
    m->params[0] = param_rand(g, &r, "k1", dt, 4, ks, -0.5, 0.5);
    m->params[1] = param_rand(g, &r, "w2", dt, 2, ws, -0.3, 0.3);
    m->params[2] = param_rand(g, &r, "b2", dt, 1, bs, -0.1, 0.1);
    sx_conv2d_params cp = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    sx_pool2d_params pp = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    int rng;
    cr_assert_eq(sx_cg_rng_new(g, 99, &rng), SX_OK);
    sx_cg_node *h = sx_cg_relu(g, sx_cg_conv2d(g, m->x, m->params[0], &cp));
    m->mask = sx_cg_dropout_mask(g, rng, 0.25, 4, ms);
    sx_cg_node *p = sx_cg_mul(g, sx_cg_maxpool2d(g, h, &pp), m->mask);
    sx_cg_node *fl = sx_cg_reshape(g, p, 2, flat);
    sx_slice left[2] = {SX_SLICE_ALL, {0, 18, 1}}, right[2] = {SX_SLICE_ALL, {18, 36, 1}};
    sx_cg_node *halves[2] = {sx_cg_slice(g, fl, right), sx_cg_slice(g, fl, left)};
    sx_cg_node *c = sx_cg_concat(g, 2, halves, 1);
    sx_cg_node *logits = sx_cg_add(g, sx_cg_matmul(g, c, m->params[1], false, true), m->params[2]);
    m->loss = sx_cg_mean(g, sx_cg_softmax_xent(g, logits, m->y), SX_AXES_ALL, false);
    cr_assert_not_null(m->loss, "%s", sx_last_error());
    sx_cg_node *grads[CNN_PARAMS];
    cr_assert_eq(sx_ad_grad(g, m->loss, CNN_PARAMS, m->params, grads), SX_OK, "%s",
                 sx_last_error());
    sx_optim_params op = sx_optim_params_default(SX_OPTIM_ADAM);
    m->outs[0] = m->loss;
    m->n_outs = 1;
    for (int i = 0; i < CNN_PARAMS; i++) {
        int k = 0;
        cr_assert_eq(sx_optim_update(g, &op, m->params[i], grads[i], m->lr, m->step, NULL,
                                     m->outs + m->n_outs, &k),
                     SX_OK, "%s", sx_last_error());
        m->n_outs += k;
    }
    sx_cg_node *keep[CNN_MAX_OUT];
    int nk = m->n_outs;
    memcpy(keep, m->outs, (size_t)nk * sizeof *keep);
    keep[nk++] = m->mask;
    cr_assert_eq(sx_cg_optimise(g, nk, keep, NULL, NULL), SX_OK, "%s", sx_last_error());
}

/* One training step's inputs, the same for any graph given the same seed. */
static void cnn_feed(cnn *m, sx_dtype dt, int it)
{
    sx_rng r;
    sx_rng_seed(&r, 500 + (uint64_t)it);
    sx_tensor *xv = tu_rand(&r, dt, 4, sx_cg_node_shape(m->x), -1, 1);
    sx_tensor *yv = tu_zeros(dt, 2, sx_cg_node_shape(m->y));
    for (int i = 0; i < 4; i++)
        sx_tensor_set(yv, i * 5 + (int64_t)sx_rng_below(&r, 5), 1);
    sx_tensor *lv = NULL, *sv = NULL;
    cr_assert_eq(sx_tensor_scalar(dt, 0.01 / it, &lv), SX_OK);
    cr_assert_eq(sx_tensor_scalar(dt, it, &sv), SX_OK);
    set_input(m->g, m->x, xv);
    set_input(m->g, m->y, yv);
    set_input(m->g, m->lr, lv);
    set_input(m->g, m->step, sv);
    if (it > 1)
        cr_assert_eq(sx_cg_invalidate(m->g, m->mask), SX_OK);
    sx_tensor_free(xv);
    sx_tensor_free(yv);
    sx_tensor_free(lv);
    sx_tensor_free(sv);
}

static void cnn_round_trip(sx_dtype dt)
{
    tdir d;
    tdir_new(&d);
    char path[128];
    tdir_file(&d, "cnn.sxm", path, sizeof path);
    cnn a;
    cnn_build(&a, dt);
    /* the dense weights' step folds their gradient's GEMM in (matmul_update) */
    int64_t fused = count_op(a.g, SX_OP_FUSED),
            adam = count_op(a.g, SX_OP_FUSED_UPDATE) + count_op(a.g, SX_OP_MATMUL_UPDATE);
    cr_assert_gt(fused, 0, "the optimiser made fused chains");
    cr_assert_eq(adam, CNN_PARAMS, "one fused Adam step per parameter");

    /* outputs: loss, updates, then the handles the training loop needs */
    sx_cg_node *outs[CNN_MAX_OUT];
    char names[CNN_MAX_OUT][16];
    const char *onames[CNN_MAX_OUT];
    int n = 0;
    for (int i = 0; i < a.n_outs; i++) {
        snprintf(names[n], sizeof names[n], "out%d", i);
        outs[n++] = a.outs[i];
    }
    sx_cg_node *handles[] = {a.x, a.y, a.lr, a.step, a.mask, a.params[0], a.params[1], a.params[2]};
    const char *hnames[] = {"x", "y", "lr", "step", "mask", "k1", "w2", "b2"};
    for (int i = 0; i < 8; i++) {
        snprintf(names[n], sizeof names[n], "%s", hnames[i]);
        outs[n++] = handles[i];
    }
    for (int i = 0; i < n; i++)
        onames[i] = names[i];
    const char *keys[] = {"epoch", "net"};
    const char *vals[] = {"3", "conv2d(4) maxpool dropout(0.25) linear(5)"};
    cr_assert_eq(sx_cg_save(a.g, n, outs, onames, 0, NULL, NULL, 2, keys, vals, path), SX_OK, "%s",
                 sx_last_error());

    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK, "%s", sx_last_error());
    cr_assert_str_eq(sx_cg_file_meta(f, "net"), vals[1]);
    cnn b = {0};
    sx_cg_node *louts[CNN_MAX_OUT];
    cr_assert_eq(sx_cg_file_graph(f, n, onames, &b.g, louts), SX_OK, "%s", sx_last_error());
    sx_cg_file_free(f);
    b.n_outs = a.n_outs;
    memcpy(b.outs, louts, (size_t)a.n_outs * sizeof *louts);
    b.loss = louts[0];
    b.x = louts[a.n_outs];
    b.y = louts[a.n_outs + 1];
    b.lr = louts[a.n_outs + 2];
    b.step = louts[a.n_outs + 3];
    b.mask = louts[a.n_outs + 4];
    for (int i = 0; i < CNN_PARAMS; i++)
        b.params[i] = louts[a.n_outs + 5 + i];
    cr_assert_eq(count_op(b.g, SX_OP_FUSED), fused);
    cr_assert_eq(count_op(b.g, SX_OP_FUSED_UPDATE) + count_op(b.g, SX_OP_MATMUL_UPDATE), adam);
    cr_assert_eq(count_op(b.g, SX_OP_DROPOUT_MASK), 1);
    cr_assert_str_eq(sx_cg_node_name(b.params[1]), "w2");

    for (int it = 1; it <= 3; it++) {
        cnn_feed(&a, dt, it);
        cnn_feed(&b, dt, it);
        cr_assert_eq(sx_cg_eval(a.g, a.n_outs, a.outs), SX_OK, "%s", sx_last_error());
        cr_assert_eq(sx_cg_eval(b.g, b.n_outs, b.outs), SX_OK, "%s", sx_last_error());
        cr_assert(same_bits(sx_cg_value(a.loss), sx_cg_value(b.loss)), "step %d: losses differ",
                  it);
        cr_assert(same_bits(sx_cg_value(a.mask), sx_cg_value(b.mask)), "step %d: masks differ", it);
    }
    for (int i = 0; i < CNN_PARAMS; i++)
        cr_assert(same_bits(sx_cg_value(a.params[i]), sx_cg_value(b.params[i])),
                  "parameter %d differs after training", i);
    sx_cg_graph_free(a.g);
    sx_cg_graph_free(b.g);
    tdir_free(&d);
}

Test(cgraph_serial, optimised_cnn_trains_identically_after_reload_f32)
{
    cnn_round_trip(SX_F32);
}

Test(cgraph_serial, optimised_cnn_trains_identically_after_reload_f64)
{
    cnn_round_trip(SX_F64);
}

/* Only what the outputs need is stored; a graph built eagerly loads as a lazy one. */
Test(cgraph_serial, stores_only_what_the_outputs_need)
{
    tdir d;
    tdir_new(&d);
    char path[128];
    tdir_file(&d, "part.sxm", path, sizeof path);
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_EAGER, SX_F64, &g), SX_OK);
    sx_rng r;
    sx_rng_seed(&r, 3);
    int64_t s[2] = {2, 3};
    sx_cg_node *w = param_rand(g, &r, "w", SX_F64, 2, s, -1, 1);
    sx_cg_node *unused = sx_cg_exp(g, sx_cg_cos(g, w));
    sx_cg_node *y = sx_cg_sin(g, sx_cg_mul_scalar(g, w, 3));
    cr_assert_not_null(unused);
    const char *name = "y";
    cr_assert_eq(sx_cg_save(g, 1, &y, &name, 0, NULL, NULL, 0, NULL, NULL, path), SX_OK);
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK, "%s", sx_last_error());
    sx_cg_graph *b = NULL;
    sx_cg_node *ly = NULL;
    cr_assert_eq(sx_cg_file_graph(f, 1, &name, &b, &ly), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_graph_mode(b), SX_CG_LAZY);
    cr_assert_eq(sx_cg_graph_stats(b).nodes, 4, "w, the scalar 3, mul, sin");
    cr_assert_eq(count_op(b, SX_OP_EXP), 0);
    cr_assert_null(sx_cg_value(ly), "lazy: nothing computed yet");
    cr_assert_eq(sx_cg_eval(b, 1, &ly), SX_OK);
    cr_assert(same_bits(sx_cg_value(y), sx_cg_value(ly)));
    /* a second graph from the same file object is independent of the first */
    sx_cg_graph *b2 = NULL;
    sx_cg_node *ly2 = NULL;
    cr_assert_eq(sx_cg_file_graph(f, 1, &name, &b2, &ly2), SX_OK);
    cr_assert_eq(sx_cg_graph_stats(b2).nodes, 4);
    cr_assert_eq(sx_cg_eval(b2, 1, &ly2), SX_OK);
    cr_assert(same_bits(sx_cg_value(y), sx_cg_value(ly2)));
    cr_assert_neq(sx_cg_value(ly)->data, sx_cg_value(ly2)->data);
    sx_cg_graph_free(b2);
    sx_cg_file_free(f);
    sx_cg_graph_free(b);
    sx_cg_graph_free(g);
    tdir_free(&d);
}

/* ---------------------------------------------------------------- tensors and metadata */

static sx_tensor *special_values(sx_dtype dt, int rank, const int64_t *shape, uint64_t seed)
{
    sx_rng r;
    sx_rng_seed(&r, seed);
    sx_tensor *t = tu_rand(&r, dt, rank, shape, -1e3, 1e3);
    const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-310, -5e-324, 1.0 / 3};
    for (int64_t i = 0; i < t->size && i < 8; i++)
        sx_tensor_set(t, i, sp[i]);
    if (dt == SX_F32 && t->size > 8) { /* a NaN with a payload, and the smallest subnormal */
        uint32_t nan = 0x7fc12345u, sub = 1u;
        memcpy(SX_F32P(t) + 8, &nan, 4);
        if (t->size > 9)
            memcpy(SX_F32P(t) + 9, &sub, 4);
    }
    return t;
}

Test(cgraph_serial, tensors_and_metadata_round_trip_exactly)
{
    enum { NT = 7 };
    tdir d;
    tdir_new(&d);
    char path[128];
    tdir_file(&d, "ckpt.sxm", path, sizeof path);
    /* the last one is larger than the writer's buffer: several flushes */
    int64_t s1[1] = {13}, s3[3] = {2, 0, 4}, s8[8] = {1, 2, 1, 3, 1, 2, 1, 2}, s2[2] = {7, 5},
            sb[2] = {301, 117};
    sx_tensor *ts[NT] = {special_values(SX_F32, 1, s1, 1),   special_values(SX_F64, 1, s1, 2),
                         special_values(SX_F32, 0, NULL, 3), special_values(SX_F64, 3, s3, 4),
                         special_values(SX_F64, 8, s8, 5),   special_values(SX_F32, 2, s2, 6),
                         special_values(SX_F64, 2, sb, 7)};
    const char *tn[NT] = {"w.f32", "w.f64", "scalar", "empty", "rank8", "conv/k 1 é", "big"};
    const sx_tensor *ct[NT];
    for (int i = 0; i < NT; i++)
        ct[i] = ts[i];
    char big[3000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    const char *keys[5] = {"epoch", "step", "rng", "empty", "long"};
    const char *vals[5] = {"12", "34567", "0123456789abcdef0123456789abcdef", "", big};
    cr_assert_eq(sx_cg_save(NULL, 0, NULL, NULL, NT, tn, ct, 5, keys, vals, path), SX_OK, "%s",
                 sx_last_error());
    /* the trailer holds zlib's crc32 of everything before it */
    size_t n;
    unsigned char *bytes = slurp(path, &n);
    cr_assert_gt(n, 4 * 65536);
    cr_assert_eq(memcmp(bytes + n - 20, "END \x08\0\0\0\0\0\0\0", 12), 0);
    cr_assert_eq(le(bytes + n - 8, 4), crc32(0, bytes, (uInt)(n - 20)));
    cr_assert_eq(le(bytes + n - 4, 4), 0);
    free(bytes);

    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_file_n_outputs(f), 0);
    cr_assert_eq(sx_cg_file_n_tensors(f), NT);
    for (int i = 0; i < NT; i++) {
        cr_assert_str_eq(sx_cg_file_tensor_name(f, i), tn[i]);
        const sx_tensor *t = sx_cg_file_tensor(f, tn[i]);
        cr_assert(same_bits(t, ts[i]), "tensor %s", tn[i]);
        cr_assert_eq(t->size, ts[i]->size);
    }
    cr_assert_null(sx_cg_file_tensor(f, "missing"));
    cr_assert_null(sx_cg_file_tensor(f, NULL));
    cr_assert_null(sx_cg_file_tensor_name(f, NT));
    cr_assert_null(sx_cg_file_tensor_name(f, -1));
    cr_assert_eq(sx_cg_file_n_meta(f), 5);
    for (int i = 0; i < 5; i++) {
        cr_assert_str_eq(sx_cg_file_meta_key(f, i), keys[i]);
        cr_assert_str_eq(sx_cg_file_meta(f, keys[i]), vals[i]);
    }
    cr_assert_null(sx_cg_file_meta(f, "nope"));
    cr_assert_null(sx_cg_file_meta_key(f, 5));
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_file_graph(f, 0, NULL, &g, NULL), SX_E_ARG, "no graph in this file");
    cr_assert_null(g);
    cr_assert(strstr(sx_last_error(), "holds no graph") != NULL, "%s", sx_last_error());
    sx_cg_file_free(f);
    for (int i = 0; i < NT; i++)
        sx_tensor_free(ts[i]);
    tdir_free(&d);
}

/* ---------------------------------------------------------------- the bytes */

typedef struct bbuf {
    unsigned char b[8192];
    size_t n;
} bbuf;

static void bb_put(bbuf *b, const void *p, size_t n)
{
    cr_assert_leq(b->n + n, sizeof b->b);
    memcpy(b->b + b->n, p, n);
    b->n += n;
}

static void bb_le(bbuf *b, uint64_t v, int bytes)
{
    unsigned char t[8];
    le_set(t, v, bytes);
    bb_put(b, t, (size_t)bytes);
}

static void bb_str(bbuf *b, const char *s)
{
    bb_le(b, strlen(s), 4);
    bb_put(b, s, strlen(s));
}

static void bb_zeros(bbuf *b, size_t n)
{
    static const unsigned char z[1024];
    bb_put(b, z, n);
}

/* The format written out by hand from its description (serial.c's top comment): a graph of an
 * input and its negation, one f32 tensor, one f64 scalar, one metadata entry. */
/* Format 2 keeps every convolution and pooling option (pads, SAME_LOWER, dilation, groups,
 * output padding, ceil_mode, count_include_pad): a graph of them loads with the same attributes
 * and computes the same bits. */
Test(cgraph_serial, window_options_round_trip)
{
    tdir d;
    tdir_new(&d);
    char path[128];
    tdir_file(&d, "win.sxm", path, sizeof path);
    sx_cg_graph *g = new_graph(SX_F32);
    sx_rng r;
    sx_rng_seed(&r, 11);
    int64_t xs[4] = {2, 9, 8, 4};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F32, 4, xs);
    sx_cg_node *k = param_rand(g, &r, "k", SX_F32, 4, (int64_t[]){3, 2, 2, 6}, -1, 1);
    sx_conv2d_params cp = sx_conv2d_params_default();
    cp.stride_h = 2;
    cp.padding = SX_PAD_EXPLICIT;
    cp.pad_top = 2;
    cp.pad_bottom = 1;
    cp.pad_right = 3;
    cp.dilation_h = 2;
    cp.groups = 2;
    sx_cg_node *y = sx_cg_conv2d(g, x, k, &cp);
    cr_assert_not_null(y, "%s", sx_last_error());
    sx_pool2d_params mp = sx_pool2d_params_default(3, 2);
    mp.stride_h = 2;
    mp.padding = SX_PAD_EXPLICIT;
    mp.pad_top = 1;
    mp.pad_left = 1;
    mp.dilation_w = 2;
    mp.ceil_mode = 1;
    sx_pool2d_params ap = sx_pool2d_params_default(2, 3);
    ap.padding = SX_PAD_SAME_LOWER;
    ap.stride_w = 1;
    ap.count_include_pad = 1;
    sx_cg_node *outs[4] = {y, sx_cg_maxpool2d(g, y, &mp), sx_cg_avgpool2d(g, x, &ap), x};
    for (int i = 0; i < 3; i++)
        cr_assert_not_null(outs[i], "%d: %s", i, sx_last_error());
    const char *on[4] = {"conv", "max", "avg", "x"};
    cr_assert_eq(sx_cg_save(g, 4, outs, on, 0, NULL, NULL, 0, NULL, NULL, path), SX_OK, "%s",
                 sx_last_error());
    sx_cg_file *f = NULL;
    sx_cg_graph *b = NULL;
    sx_cg_node *louts[4];
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_file_graph(f, 4, on, &b, louts), SX_OK, "%s", sx_last_error());
    sx_cg_file_free(f);
    sx_tensor *xv = NULL;
    cr_assert_eq(sx_tensor_new(SX_F32, 4, xs, &xv), SX_OK);
    cr_assert_eq(sx_tensor_rand_uniform(xv, &r, -1, 1), SX_OK);
    set_input(g, x, xv);
    set_input(b, louts[3], xv);
    cr_assert_eq(sx_cg_eval(g, 3, outs), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(b, 3, louts), SX_OK, "%s", sx_last_error());
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(
            memcmp(sx_cg_node_attr(louts[i]), sx_cg_node_attr(outs[i]), sizeof(sx_cg_attr)), 0,
            "%s: attributes differ", on[i]);
        cr_assert(same_bits(sx_cg_value(outs[i]), sx_cg_value(louts[i])), "%s differs", on[i]);
    }
    sx_tensor_free(xv);
    sx_cg_graph_free(g);
    sx_cg_graph_free(b);
    tdir_free(&d);
}

Test(cgraph_serial, bytes_match_the_documented_format)
{
    tdir d;
    tdir_new(&d);
    char path[128];
    tdir_file(&d, "fmt.sxm", path, sizeof path);
    sx_cg_graph *g = new_graph(SX_F32);
    int64_t s3[1] = {3}, s2[1] = {2};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F32, 1, s3);
    sx_cg_node *y = sx_cg_neg(g, x);
    sx_cg_attr none = sx_cg_attr_default();
    cr_assert_eq(memcmp(sx_cg_node_attr(y), &none, sizeof none), 0);
    const double tv[2] = {1.5, -2.0};
    sx_tensor *t = NULL, *sc = NULL;
    cr_assert_eq(sx_tensor_from_doubles(SX_F32, 1, s2, tv, 2, &t), SX_OK);
    cr_assert_eq(sx_tensor_scalar(SX_F64, 0.25, &sc), SX_OK);
    const char *on[1] = {"y"}, *tn[2] = {"t", "s"}, *keys[1] = {"ab"}, *vals[1] = {"xyz"};
    const sx_tensor *ct[2] = {t, sc};
    cr_assert_eq(sx_cg_save(g, 1, &y, on, 2, tn, ct, 1, keys, vals, path), SX_OK);

    static bbuf e, sec;
    e.n = 0;
    bb_put(&e, "STRIXMDL", 8);
    bb_le(&e, 2, 4);
    bb_le(&e, 0, 4);
    /* GRPH */
    sec.n = 0;
    bb_le(&sec, 0, 1); /* f32 */
    bb_le(&sec, 0, 4); /* no generator */
    bb_le(&sec, 2, 8);
    bb_str(&sec, "input");
    bb_le(&sec, 0, 1);
    bb_le(&sec, 1, 1);
    bb_le(&sec, 3, 8);
    bb_str(&sec, "x");
    bb_le(&sec, 0, 4);
    bb_zeros(&sec, 571);
    bb_str(&sec, "neg");
    bb_le(&sec, 0, 1);
    bb_le(&sec, 1, 1);
    bb_le(&sec, 3, 8);
    bb_str(&sec, "");
    bb_le(&sec, 1, 4);
    bb_le(&sec, 0, 8);
    bb_zeros(&sec, 571);
    bb_le(&sec, 1, 4);
    bb_le(&sec, 1, 8);
    bb_str(&sec, "y");
    bb_put(&e, "GRPH", 4);
    bb_le(&e, sec.n, 8);
    bb_put(&e, sec.b, sec.n);
    /* TENS */
    sec.n = 0;
    bb_le(&sec, 2, 8);
    bb_str(&sec, "t");
    bb_le(&sec, 0, 1);
    bb_le(&sec, 1, 1);
    bb_le(&sec, 2, 8);
    bb_le(&sec, 0x3fc00000u, 4); /* 1.5f */
    bb_le(&sec, 0xc0000000u, 4); /* -2.0f */
    bb_str(&sec, "s");
    bb_le(&sec, 1, 1);
    bb_le(&sec, 0, 1);
    bb_le(&sec, 0x3fd0000000000000ull, 8); /* 0.25 */
    bb_put(&e, "TENS", 4);
    bb_le(&e, sec.n, 8);
    bb_put(&e, sec.b, sec.n);
    /* META */
    sec.n = 0;
    bb_le(&sec, 1, 8);
    bb_str(&sec, "ab");
    bb_str(&sec, "xyz");
    bb_put(&e, "META", 4);
    bb_le(&e, sec.n, 8);
    bb_put(&e, sec.b, sec.n);
    /* trailer */
    uint32_t crc = (uint32_t)crc32(0, e.b, (uInt)e.n);
    bb_put(&e, "END ", 4);
    bb_le(&e, 8, 8);
    bb_le(&e, crc, 4);
    bb_le(&e, 0, 4);

    size_t n;
    unsigned char *got = slurp(path, &n);
    cr_assert_eq(n, e.n, "file of %zu bytes, want %zu", n, e.n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], e.b[i], "byte %zu: 0x%02x, want 0x%02x", i, got[i], e.b[i]);
    free(got);
    /* and a file written here by hand loads */
    tdir_file(&d, "hand.sxm", path, sizeof path);
    spit(path, e.b, e.n);
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_get(sx_cg_file_tensor(f, "t"), 1), -2.0);
    sx_cg_file_free(f);
    sx_tensor_free(t);
    sx_tensor_free(sc);
    sx_cg_graph_free(g);
    tdir_free(&d);
}

/* ---------------------------------------------------------------- atomic writes */

static sx_status save_meta(const char *path, const char *value)
{
    const char *k = "v";
    return sx_cg_save(NULL, 0, NULL, NULL, 0, NULL, NULL, 1, &k, &value, path);
}

static void expect_meta(const char *path, const char *value)
{
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK, "%s", sx_last_error());
    cr_assert_str_eq(sx_cg_file_meta(f, "v"), value);
    sx_cg_file_free(f);
}

Test(cgraph_serial, writes_are_atomic)
{
    tdir d;
    tdir_new(&d);
    char path[128], sub[128], missing[160];
    tdir_file(&d, "model.sxm", path, sizeof path);
    umask(022);
    cr_assert_eq(save_meta(path, "old"), SX_OK, "%s", sx_last_error());
    cr_assert_eq(save_meta(path, "new"), SX_OK, "replacing a file");
    expect_meta(path, "new");
    cr_assert_eq(tdir_count(&d), 1, "no temporary file left");
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_neq(st.st_mode & 0044, 0, "readable as umask allows, not 0600 like mkstemp");

    /* a folder that does not exist */
    snprintf(missing, sizeof missing, "%s/nowhere/model.sxm", d.path);
    cr_assert_eq(save_meta(missing, "x"), SX_E_IO);
    cr_assert(strstr(sx_last_error(), strerror(ENOENT)) != NULL, "%s", sx_last_error());

    /* the target is a folder: the rename fails after the whole file was written */
    tdir_file(&d, "adir", sub, sizeof sub);
    cr_assert_eq(mkdir(sub, 0700), 0);
    cr_assert_eq(save_meta(sub, "x"), SX_E_IO);
    cr_assert_eq(tdir_count(&d), 2, "the temporary file was removed");

    /* a write that fails half-way (file size limit): the old file stays whole */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 40;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    char longer[200];
    memset(longer, 'q', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    sx_status s = save_meta(path, longer);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    cr_assert_eq(s, SX_E_IO, "%s", sx_last_error());
    cr_assert(strstr(sx_last_error(), strerror(EFBIG)) != NULL, "%s", sx_last_error());
    expect_meta(path, "new");
    cr_assert_eq(tdir_count(&d), 2, "the temporary file was removed");

    /* a read-only folder (not for root, who may write anyway) */
    if (geteuid() != 0) {
        cr_assert_eq(chmod(d.path, 0500), 0);
        cr_assert_eq(save_meta(path, "ro"), SX_E_IO);
        cr_assert_eq(chmod(d.path, 0700), 0);
        expect_meta(path, "new");
        cr_assert_eq(tdir_count(&d), 2);
    }
    tdir_free(&d);
}

/* ---------------------------------------------------------------- damaged files */

/* A small file with every part: a graph (constant, parameter, input, ops, a dropout mask),
 * tensors and metadata. With `inputs` false the graph has no input, so it can run as loaded. */
static void small_file(const char *path, bool inputs)
{
    sx_cg_graph *g = new_graph(SX_F32);
    sx_rng r;
    sx_rng_seed(&r, 4);
    int64_t s[2] = {2, 3};
    sx_tensor *cv = tu_rand(&r, SX_F32, 2, s, -1, 1);
    sx_cg_node *c = sx_cg_const(g, cv);
    sx_cg_node *w = param_rand(g, &r, "w", SX_F32, 2, s, -1, 1);
    int rng;
    cr_assert_eq(sx_cg_rng_new(g, 5, &rng), SX_OK);
    sx_cg_node *x = inputs ? sx_cg_input(g, "x", SX_F32, 2, s) : c;
    sx_cg_node *m =
        sx_cg_mul(g, sx_cg_tanh(g, sx_cg_mul(g, x, w)), sx_cg_dropout_mask(g, rng, 0.5, 2, s));
    sx_cg_node *outs[2] = {sx_cg_sum(g, m, SX_AXIS(1), false), w};
    const char *on[2] = {"y", "w"}, *tn[1] = {"t"}, *keys[1] = {"k"}, *vals[1] = {"v"};
    const sx_tensor *ct[1] = {cv};
    cr_assert_eq(sx_cg_save(g, 2, outs, on, 1, tn, ct, 1, keys, vals, path), SX_OK, "%s",
                 sx_last_error());
    sx_tensor_free(cv);
    sx_cg_graph_free(g);
}

/* A graph with no input (it runs as loaded) whose ops read many attributes: conv2d, relu,
 * maxpool, a dropout mask, reshape, matmul with a transposed operand, softmax, slice, pad,
 * sum. Outputs "y", "w" and "k". */
static void rich_file(const char *path)
{
    sx_cg_graph *g = new_graph(SX_F32);
    sx_rng r;
    sx_rng_seed(&r, 8);
    int64_t xs[4] = {1, 4, 4, 2}, ks[4] = {2, 2, 2, 3}, ms[4] = {1, 2, 2, 3}, fl[2] = {1, 12},
            ws[2] = {5, 12};
    sx_tensor *xv = tu_rand(&r, SX_F32, 4, xs, -1, 1);
    sx_cg_node *x = sx_cg_const(g, xv);
    sx_tensor_free(xv);
    sx_cg_node *k = param_rand(g, &r, "k", SX_F32, 4, ks, -1, 1);
    sx_conv2d_params cp = {.stride_h = 1, .stride_w = 1, .padding = SX_PAD_SAME};
    sx_pool2d_params pp = {
        .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .padding = SX_PAD_VALID};
    int rng;
    cr_assert_eq(sx_cg_rng_new(g, 21, &rng), SX_OK);
    sx_cg_node *h = sx_cg_maxpool2d(g, sx_cg_relu(g, sx_cg_conv2d(g, x, k, &cp)), &pp);
    h = sx_cg_reshape(g, sx_cg_mul(g, h, sx_cg_dropout_mask(g, rng, 0.5, 4, ms)), 2, fl);
    sx_cg_node *w = param_rand(g, &r, "w", SX_F32, 2, ws, -1, 1);
    sx_cg_node *sm = sx_cg_softmax(g, sx_cg_matmul(g, h, w, false, true), -1);
    sx_slice sl[2] = {SX_SLICE_ALL, {1, 4, 1}};
    int64_t before[2] = {0, 1}, after[2] = {0, 2};
    sx_cg_node *y =
        sx_cg_sum(g, sx_cg_pad(g, sx_cg_slice(g, sm, sl), before, after, 0.5), SX_AXIS(1), true);
    cr_assert_not_null(y, "%s", sx_last_error());
    sx_cg_node *outs[3] = {y, w, k};
    const char *on[3] = {"y", "w", "k"};
    cr_assert_eq(sx_cg_save(g, 3, outs, on, 0, NULL, NULL, 0, NULL, NULL, path), SX_OK, "%s",
                 sx_last_error());
    sx_cg_graph_free(g);
}

/* Read a damaged file: an error of the expected kinds, nothing handed out, nothing leaked.
 * (Hot loops assert only on failure: every Criterion assertion is a message to the runner.) */
static void expect_rejected(const char *path, const char *what, size_t at)
{
    sx_cg_file *f = (sx_cg_file *)&f;
    tu_fail_after(LONG_MAX);
    sx_status s = sx_cg_file_read(path, &f);
    long live = tu_live_allocs();
    tu_fail_reset();
    if ((s != SX_E_FORMAT && s != SX_E_UNSUPPORTED) || f != NULL || live != 0)
        cr_assert_fail("%s %zu: status %d (%s), file %p, %ld allocations leaked", what, at, (int)s,
                       sx_last_error(), (void *)f, live);
}

Test(cgraph_serial, every_truncation_is_an_error)
{
    tdir d;
    tdir_new(&d);
    char path[128], cut[128];
    tdir_file(&d, "small.sxm", path, sizeof path);
    tdir_file(&d, "cut.sxm", cut, sizeof cut);
    small_file(path, true);
    size_t n;
    unsigned char *b = slurp(path, &n);
    for (size_t len = 0; len < n; len++) {
        spit(cut, b, len);
        expect_rejected(cut, "truncated at", len);
    }
    /* the messages say what happened */
    spit(cut, b, n / 2);
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(cut, &f), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), "cut.sxm: truncated in section GRPH") != NULL, "%s",
              sx_last_error());
    spit(cut, b, 5);
    cr_assert_eq(sx_cg_file_read(cut, &f), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), "truncated") != NULL, "%s", sx_last_error());
    free(b);
    tdir_free(&d);
}

Test(cgraph_serial, every_flipped_byte_is_an_error)
{
    tdir d;
    tdir_new(&d);
    char path[128], bad[128];
    tdir_file(&d, "small.sxm", path, sizeof path);
    tdir_file(&d, "bad.sxm", bad, sizeof bad);
    small_file(path, true);
    size_t n;
    unsigned char *b = slurp(path, &n);
    for (size_t i = 0; i < n; i++) {
        b[i] ^= 0xff;
        spit(bad, b, n);
        b[i] ^= 0xff;
        expect_rejected(bad, "byte flipped at", i);
    }
    /* a flip inside a section is caught by the checksum */
    b[n / 2] ^= 0x10;
    spit(bad, b, n);
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(bad, &f), SX_E_FORMAT);
    cr_assert(strstr(sx_last_error(), "bad.sxm: checksum mismatch (file corrupt)") != NULL, "%s",
              sx_last_error());
    free(b);
    tdir_free(&d);
}

/* Behind the checksum: change each byte of the sections (one bit, the top bit or two middle
 * bits, in turn), re-seal the checksum, and read. The file may still be valid (a changed value
 * or an unused attribute field), else the error is clean; a file that loads must build and
 * evaluate (successfully or with an error status) without a crash or a leak. */
Test(cgraph_serial, resealed_corruption_never_crashes)
{
    tdir d;
    tdir_new(&d);
    char path[128], bad[128];
    tdir_file(&d, "rich.sxm", path, sizeof path);
    tdir_file(&d, "bad.sxm", bad, sizeof bad);
    rich_file(path);
    size_t n;
    unsigned char *b = slurp(path, &n);
    const unsigned char masks[3] = {0x01, 0x80, 0x24};
    int loaded = 0, rejected = 0;
    for (size_t i = 16; i + 20 < n; i++) {
        int m = (int)(i % 3);
        b[i] ^= masks[m];
        reseal(b, n);
        spit(bad, b, n);
        b[i] ^= masks[m];
        sx_cg_file *f = NULL;
        tu_fail_after(LONG_MAX);
        sx_status s = sx_cg_file_read(bad, &f);
        if (s != SX_OK) {
            if (s != SX_E_FORMAT || f != NULL)
                cr_assert_fail("byte %zu: status %d (%s)", i, (int)s, sx_last_error());
            rejected++;
        } else {
            const char *on[3] = {"y", "w", "k"};
            sx_cg_graph *g = NULL;
            sx_cg_node *o[3];
            if (sx_cg_file_graph(f, 3, on, &g, o) == SX_OK) {
                sx_status es = sx_cg_eval(g, 3, o);
                (void)es;
                sx_cg_graph_free(g);
            }
            sx_cg_file_free(f);
            loaded++;
        }
        long live = tu_live_allocs();
        tu_fail_reset();
        if (live != 0)
            cr_assert_fail("byte %zu: %ld allocations leaked", i, live);
    }
    cr_log_info("resealed: %d rejected, %d loaded", rejected, loaded);
    cr_assert_gt(rejected, 0);
    cr_assert_gt(loaded, 0, "changed values still load");
    free(b);
    tdir_free(&d);
}

/* Crafted files with a valid checksum: each wrong field has its own clear message. */
static void expect_crafted(const char *path, const unsigned char *b, size_t n, sx_status want,
                           const char *msg)
{
    spit(path, b, n);
    sx_cg_file *f = (sx_cg_file *)&f;
    sx_status s = sx_cg_file_read(path, &f);
    cr_assert_eq(s, want, "want '%s', got %d: %s", msg, (int)s, sx_last_error());
    cr_assert_null(f);
    cr_assert(strstr(sx_last_error(), msg) != NULL, "'%s' not in '%s'", msg, sx_last_error());
}

Test(cgraph_serial, crafted_files_are_clean_errors)
{
    tdir d;
    tdir_new(&d);
    char path[128], bad[128];
    tdir_file(&d, "small.sxm", path, sizeof path);
    tdir_file(&d, "bad.sxm", bad, sizeof bad);
    small_file(path, true);
    size_t n;
    unsigned char *orig = slurp(path, &n);
    unsigned char *b = malloc(n + 64);
#define FRESH() memcpy(b, orig, n)

    FRESH();
    b[0] = 'X';
    expect_crafted(bad, b, n, SX_E_FORMAT, "bad.sxm: not a strix model file (bad magic)");
    FRESH();
    le_set(b + 8, 3, 4);
    expect_crafted(bad, b, n, SX_E_UNSUPPORTED,
                   "bad.sxm: written by a newer strix (format 3, this reads 2)");
    FRESH();
    le_set(b + 12, 4, 4);
    expect_crafted(bad, b, n, SX_E_UNSUPPORTED, "flags");
    FRESH();
    memcpy(b + n, "junk", 4);
    expect_crafted(bad, b, n + 4, SX_E_FORMAT, "4 bytes of garbage after the END trailer");

    /* an unknown op: "tanh" -> "tanq" */
    long p = find(orig, n, "\x04\0\0\0tanh", 8);
    cr_assert_geq(p, 0);
    FRESH();
    b[p + 7] = 'q';
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT, "unknown op 'tanq' (written by a newer strix?)");
    /* tanh's stored shape (2,3) -> (2,4): its shape rule gives (2,3) */
    FRESH();
    le_set(b + p + 8 + 2 + 8, 4, 8);
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT, "is stored as f32 (2,4), but its inputs give f32 (2,3)");
    /* tanh reads a later node: its input index (after dtype, rank, 2 dims, empty name, count) */
    long in_at = p + 8 + 2 + 16 + 4 + 4;
    cr_assert_eq(le(orig + in_at - 4, 4), 1, "tanh has one input");
    FRESH();
    le_set(b + in_at, 1000, 8);
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT, "input 0 is node 1000, not an earlier node");
    /* tanh with two inputs */
    FRESH();
    le_set(b + in_at - 4, 2, 4);
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT, "tanh with 2 inputs");
    /* keepdims (the attributes' 21st byte) = 2 */
    FRESH();
    b[in_at + 8 + 20] = 2;
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT, "keepdims is 2 (want 0 or 1)");
    /* the op's rule judges the attributes: the sum's axes mask names axis 5 of a rank-2 input */
    long q = find(orig, n, "\x03\0\0\0sum", 7);
    cr_assert_geq(q, 0);
    long sum_attr = q + 7 + 2 + 8 + 4 + 4 + 8; /* dtype, rank, dim, name, count, input */
    cr_assert_eq(le(orig + sum_attr + 16, 4), 2, "the sum is over axis 1");
    FRESH();
    le_set(b + sum_attr + 16, 1u << 5, 4);
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT, "node");

    /* the tensor section: a huge count, a huge shape, a repeated name */
    long t = find(orig, n, "TENS", 4);
    cr_assert_geq(t, 0);
    FRESH();
    le_set(b + t + 12, (uint64_t)1 << 60, 8);
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT, "claims 1152921504606846976 tensors");
    FRESH();
    long dims = t + 12 + 8 + 4 + 1 + 2; /* count, name "t", dtype, rank */
    le_set(b + dims, (uint64_t)1 << 40, 8);
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT, "section TENS ends inside its contents");
    FRESH();
    le_set(b + dims, (uint64_t)1 << 62, 8);
    le_set(b + dims + 8, (uint64_t)1 << 62, 8);
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT, "element count overflows");
    /* the metadata key "k" made empty */
    long mt = find(orig, n, "META", 4);
    cr_assert_geq(mt, 0);
    FRESH();
    le_set(b + mt + 12 + 8, 0, 4);
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT, "key is empty");
    free(b);
    free(orig);

    /* a fused program: an unknown instruction op, a source that is not there */
    sx_cg_graph *g = new_graph(SX_F32);
    int64_t s3[1] = {3};
    sx_cg_node *ins[2] = {sx_cg_input(g, "a", SX_F32, 1, s3), sx_cg_input(g, "b", SX_F32, 1, s3)};
    sx_cg_attr at = sx_cg_attr_default();
    at.rank = 1;
    at.shape[0] = 3;
    at.prog.n = 2;
    at.prog.ins[0] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_ADD, 0, 1, 0, 0};
    at.prog.ins[1] = (sx_fused_instr){SX_FUSED_MAP, SX_MAP_TANH, -1, 0, 0, 0};
    sx_cg_node *fu = sx_cg_op_new(g, SX_OP_FUSED, 2, ins, &at);
    cr_assert_not_null(fu, "%s", sx_last_error());
    const char *fname = "f";
    cr_assert_eq(sx_cg_save(g, 1, &fu, &fname, 0, NULL, NULL, 0, NULL, NULL, path), SX_OK);
    sx_cg_graph_free(g);
    orig = slurp(path, &n);
    b = malloc(n);
    p = find(orig, n, "\x04\0\0\0tanh", 8);
    cr_assert_geq(p, 0);
    FRESH();
    b[p + 7] = 'q';
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT, "fused instruction 1: unknown op 'tanq'");
    FRESH();
    le_set(b + p + 8, 5, 2);
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT,
                   "node 2: fused: instruction 1 (map) reads source a = 5, which is not there");
    free(b);
    free(orig);
    tdir_free(&d);
#undef FRESH
}

/* A fused map whose unused source b is out of range passed the reader (which
 * checked only the sources an instruction reads), then the interpreter read period[] and ops[]
 * at it: a stack overflow at the first evaluation. The reader now judges every field with the
 * kernel's own validator; the damaged file (checksum recomputed) is a clean error. */
Test(cgraph_serial, fused_unused_source_out_of_range_is_refused)
{
    tdir d;
    tdir_new(&d);
    char path[128], bad[128];
    tdir_file(&d, "fused.sxm", path, sizeof path);
    tdir_file(&d, "bad.sxm", bad, sizeof bad);
    sx_cg_graph *g = new_graph(SX_F32);
    int64_t s3[1] = {3};
    sx_cg_node *ins[2] = {sx_cg_input(g, "a", SX_F32, 1, s3), sx_cg_input(g, "b", SX_F32, 1, s3)};
    sx_cg_attr at = sx_cg_attr_default();
    at.rank = 1;
    at.shape[0] = 3;
    at.prog.n = 2;
    at.prog.ins[0] = (sx_fused_instr){SX_FUSED_BINARY, SX_BINARY_ADD, 0, 1, 0, 0};
    at.prog.ins[1] = (sx_fused_instr){SX_FUSED_MAP, SX_MAP_TANH, -1, 0, 0, 0};
    sx_cg_node *fu = sx_cg_op_new(g, SX_OP_FUSED, 2, ins, &at);
    cr_assert_not_null(fu, "%s", sx_last_error());
    sx_cg_node *outs[3] = {fu, ins[0], ins[1]};
    const char *names[3] = {"f", "a", "b"};
    cr_assert_eq(sx_cg_save(g, 3, outs, names, 0, NULL, NULL, 0, NULL, NULL, path), SX_OK);
    /* the same program built by hand is refused by the node's shape rule */
    at.prog.ins[1].b = 1000;
    cr_assert_null(sx_cg_op_new(g, SX_OP_FUSED, 2, ins, &at));
    cr_assert(strstr(sx_last_error(), "instruction 1 (map) has source b = 1000") != NULL, "%s",
              sx_last_error());
    sx_cg_graph_free(g);
    size_t n;
    unsigned char *b = slurp(path, &n);
    long p = find(b, n, "\x04\0\0\0tanh", 8);
    cr_assert_geq(p, 0);
    cr_assert_eq(le(b + p + 10, 2), 0, "the map's b");
    struct {
        long at;
        uint64_t v;
        const char *msg;
    } cases[] = {
        {p + 10, 1000,
         "node 2: fused: instruction 1 (map) has source b = 1000, which it does not "
         "read (want 0)"},
        {p + 12, (uint64_t)-1000, "node 2: fused: instruction 1 (map) has source c = -1000"},
        {p - 11, 7, "node 2: fused: instruction 0 (binary) has source c = 7"}, /* the add's c */
    };
    cr_assert_eq(le(b + p - 13, 2), 1, "the add's b");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char *c = malloc(n);
        memcpy(c, b, n);
        le_set(c + cases[i].at, cases[i].v, 2);
        reseal(c, n);
        expect_crafted(bad, c, n, SX_E_FORMAT, cases[i].msg);
        free(c);
    }
    /* the intact file loads and runs */
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK, "%s", sx_last_error());
    sx_cg_graph *h = NULL;
    sx_cg_node *o[3];
    cr_assert_eq(sx_cg_file_graph(f, 3, names, &h, o), SX_OK);
    sx_tensor *v = tu_zeros(SX_F32, 1, s3);
    set_input(h, o[1], v);
    set_input(h, o[2], v);
    cr_assert_eq(sx_cg_eval(h, 1, o), SX_OK, "%s", sx_last_error());
    sx_tensor_free(v);
    sx_cg_graph_free(h);
    sx_cg_file_free(f);
    free(b);
    tdir_free(&d);
}

/* ---------------------------------------------------------------- out of memory */

Test(cgraph_serial, failing_allocations_are_clean_errors)
{
    tdir d;
    tdir_new(&d);
    char path[128], other[128];
    tdir_file(&d, "small.sxm", path, sizeof path);
    tdir_file(&d, "other.sxm", other, sizeof other);
    small_file(path, true);
    cr_assert_eq(save_meta(other, "old"), SX_OK, "%s", sx_last_error());
    /* reading */
    long k = 0;
    for (;; k++) {
        sx_cg_file *f = (sx_cg_file *)&f;
        tu_fail_after(k);
        sx_status s = sx_cg_file_read(path, &f);
        if (s == SX_OK) {
            sx_cg_file_free(f);
            cr_assert_eq(tu_live_allocs(), 0);
            tu_fail_reset();
            break;
        }
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(s, SX_E_NOMEM, "k = %ld: %s", k, sx_last_error());
        cr_assert_null(f);
        cr_assert_eq(live, 0, "k = %ld: leaked %ld", k, live);
    }
    cr_assert_gt(k, 10);
    /* building the graph */
    sx_cg_file *f = NULL;
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK);
    const char *on[2] = {"y", "w"};
    /* the first graph is the one built while reading: handed over, nothing to allocate */
    sx_cg_graph *first = NULL;
    sx_cg_node *fo[2];
    tu_fail_after(0);
    cr_assert_eq(sx_cg_file_graph(f, 2, on, &first, fo), SX_OK);
    tu_fail_reset();
    sx_cg_graph_free(first);
    /* later ones are built anew */
    for (k = 0;; k++) {
        sx_cg_graph *g = (sx_cg_graph *)&g;
        sx_cg_node *o[2] = {NULL, NULL};
        tu_fail_after(k);
        sx_status s = sx_cg_file_graph(f, 2, on, &g, o);
        if (s == SX_OK) {
            sx_cg_graph_free(g);
            cr_assert_eq(tu_live_allocs(), 0);
            tu_fail_reset();
            break;
        }
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(s, SX_E_NOMEM, "k = %ld: %s", k, sx_last_error());
        cr_assert_null(g);
        cr_assert_null(o[0], "outs untouched");
        cr_assert_eq(live, 0, "k = %ld: leaked %ld", k, live);
    }
    /* saving over an existing file: the old one stays, no temporary file */
    sx_cg_graph *g = NULL;
    sx_cg_node *o[2];
    cr_assert_eq(sx_cg_file_graph(f, 2, on, &g, o), SX_OK);
    for (k = 0;; k++) {
        tu_fail_after(k);
        sx_status s = sx_cg_save(g, 2, o, on, 0, NULL, NULL, 0, NULL, NULL, other);
        long live = tu_live_allocs();
        tu_fail_reset();
        cr_assert_eq(live, 0, "k = %ld: leaked %ld", k, live);
        cr_assert_eq(tdir_count(&d), 2, "k = %ld: a temporary file was left", k);
        if (s == SX_OK)
            break;
        cr_assert_eq(s, SX_E_NOMEM, "k = %ld: %s", k, sx_last_error());
        expect_meta(other, "old");
    }
    sx_cg_file *f2 = NULL;
    cr_assert_eq(sx_cg_file_read(other, &f2), SX_OK);
    cr_assert_eq(sx_cg_file_n_outputs(f2), 2);
    sx_cg_file_free(f2);
    sx_cg_graph_free(g);
    sx_cg_file_free(f);
    tdir_free(&d);
}

/* ---------------------------------------------------------------- argument errors */

Test(cgraph_serial, argument_errors)
{
    tdir d;
    tdir_new(&d);
    char path[128];
    tdir_file(&d, "m.sxm", path, sizeof path);
    sx_cg_graph *g = new_graph(SX_F64), *h = new_graph(SX_F64);
    int64_t s[1] = {2};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 1, s), *y = sx_cg_exp(g, x);
    sx_cg_node *z = sx_cg_input(h, "z", SX_F64, 1, s);
    sx_cg_node *two[2] = {x, y}, *foreign[1] = {z};
    const char *nm[2] = {"a", "b"}, *same[2] = {"a", "a"}, *empty[1] = {""}, *nul[1] = {NULL};
    sx_tensor *t = tu_zeros(SX_F64, 1, s);
    const sx_tensor *ts[2] = {t, NULL}, *tt[2] = {t, t};

    cr_assert_eq(sx_cg_save(g, 2, two, nm, 0, NULL, NULL, 0, NULL, NULL, NULL), SX_E_ARG);
    cr_assert_eq(sx_cg_save(g, 2, two, nm, 0, NULL, NULL, 0, NULL, NULL, ""), SX_E_ARG);
    cr_assert_eq(sx_cg_save(g, -1, two, nm, 0, NULL, NULL, 0, NULL, NULL, path), SX_E_ARG);
    cr_assert_eq(sx_cg_save(NULL, 1, two, nm, 0, NULL, NULL, 0, NULL, NULL, path), SX_E_ARG);
    cr_assert_eq(sx_cg_save(g, 2, two, same, 0, NULL, NULL, 0, NULL, NULL, path), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "two outputs named 'a'") != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_cg_save(g, 1, two, empty, 0, NULL, NULL, 0, NULL, NULL, path), SX_E_ARG);
    cr_assert_eq(sx_cg_save(g, 1, two, nul, 0, NULL, NULL, 0, NULL, NULL, path), SX_E_ARG);
    cr_assert_eq(sx_cg_save(g, 1, foreign, nm, 0, NULL, NULL, 0, NULL, NULL, path), SX_E_ARG);
    cr_assert_eq(sx_cg_save(g, 0, NULL, NULL, 2, nm, ts, 0, NULL, NULL, path), SX_E_ARG);
    cr_assert_eq(sx_cg_save(g, 0, NULL, NULL, 2, same, tt, 0, NULL, NULL, path), SX_E_ARG);
    cr_assert_eq(sx_cg_save(g, 0, NULL, NULL, 1, nm, NULL, 0, NULL, NULL, path), SX_E_ARG);
    cr_assert_eq(sx_cg_save(g, 0, NULL, NULL, 0, NULL, NULL, 2, same, nm, path), SX_E_ARG);
    cr_assert_eq(sx_cg_save(g, 0, NULL, NULL, 0, NULL, NULL, 1, nm, nul, path), SX_E_ARG);
    cr_assert_eq(tdir_count(&d), 0, "no file was made");

    sx_cg_file *f = (sx_cg_file *)&f;
    cr_assert_eq(sx_cg_file_read(NULL, &f), SX_E_ARG);
    cr_assert_null(f);
    cr_assert_eq(sx_cg_file_read(path, NULL), SX_E_ARG);
    cr_assert_eq(sx_cg_file_read(path, &f), SX_E_IO);
    cr_assert(strstr(sx_last_error(), strerror(ENOENT)) != NULL, "%s", sx_last_error());
    cr_assert_eq(sx_cg_file_read(d.path, &f), SX_E_IO, "a folder");
    cr_assert(strstr(sx_last_error(), "not a regular file") != NULL, "%s", sx_last_error());

    cr_assert_eq(sx_cg_save(g, 2, two, nm, 0, NULL, NULL, 0, NULL, NULL, path), SX_OK);
    cr_assert_eq(sx_cg_file_read(path, &f), SX_OK);
    sx_cg_graph *b = (sx_cg_graph *)&b;
    sx_cg_node *o[2] = {NULL, NULL};
    const char *unknown[1] = {"c"};
    cr_assert_eq(sx_cg_file_graph(f, 1, unknown, &b, o), SX_E_ARG);
    cr_assert(strstr(sx_last_error(), "has no output 'c'") != NULL, "%s", sx_last_error());
    cr_assert_null(b);
    cr_assert_null(o[0]);
    cr_assert_eq(sx_cg_file_graph(f, 1, nul, &b, o), SX_E_ARG);
    cr_assert_eq(sx_cg_file_graph(f, 1, nm, &b, NULL), SX_E_ARG);
    cr_assert_eq(sx_cg_file_graph(NULL, 0, NULL, &b, NULL), SX_E_ARG);
    cr_assert_eq(sx_cg_file_graph(f, 0, NULL, NULL, NULL), SX_E_ARG);
    /* outputs asked for in another order than saved */
    const char *ba[2] = {"b", "a"};
    cr_assert_eq(sx_cg_file_graph(f, 2, ba, &b, o), SX_OK);
    sx_cg_graph_free(b);
    cr_assert_null(sx_cg_file_output_name(f, 2));
    cr_assert_eq(sx_cg_file_n_outputs(NULL), 0);
    cr_assert_null(sx_cg_file_tensor(NULL, "a"));
    cr_assert_null(sx_cg_file_meta(NULL, "a"));
    sx_cg_file_free(f);
    sx_cg_file_free(NULL);
    sx_tensor_free(t);
    sx_cg_graph_free(g);
    sx_cg_graph_free(h);
    tdir_free(&d);
}

/* The loader audit: an empty tensor whose other dims multiply past 2^60 (the zero
 * hid them from the overflow check, and a sum over the zero axis would overflow), and a
 * generator in the all-zero state (xoshiro256** never reaches it: a stuck dropout mask) are
 * refused. */
Test(cgraph_serial, empty_shape_overflow_and_zero_generator_are_refused)
{
    tdir d;
    tdir_new(&d);
    char path[128], bad[128];
    tdir_file(&d, "small.sxm", path, sizeof path);
    tdir_file(&d, "bad.sxm", bad, sizeof bad);
    small_file(path, true);
    size_t n;
    unsigned char *orig = slurp(path, &n);
    unsigned char *b = malloc(n);
    long t = find(orig, n, "TENS", 4);
    cr_assert_geq(t, 0);
    long dims = t + 12 + 8 + 4 + 1 + 2; /* count, name "t", dtype, rank */
    cr_assert_eq(orig[dims - 1], 2, "t is (2,3)");
    memcpy(b, orig, n);
    le_set(b + dims, 0, 8);
    le_set(b + dims + 8, (uint64_t)1 << 62, 8);
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT, "t: the shape's element count overflows");
    /* the generator's state: GRPH payload = dtype, u32 count (1), 4 x u64 */
    long g = find(orig, n, "GRPH", 4);
    cr_assert_geq(g, 0);
    cr_assert_eq(le(orig + g + 13, 4), 1, "one generator");
    memcpy(b, orig, n);
    memset(b + g + 17, 0, 32);
    reseal(b, n);
    expect_crafted(bad, b, n, SX_E_FORMAT, "generator 0 has the all-zero state");
    free(b);
    free(orig);
    tdir_free(&d);
}
