/* fuzz_model.c: libFuzzer target for strix's file reader (cgraph/serial.c) and what nn/ builds
 * on it: model files (sx_nn_load) and checkpoints (nn/io.c). Each input first gets its
 * checksum recomputed (the trailer's CRC-32 over everything before it), as anyone damaging a
 * file can do, so that mutations reach the parser instead of dying at the checksum. Then, from
 * an in-memory file (memfd):
 *   - sx_cg_file_read; on success every accessor, the graph with every output, evaluated with
 *     zero inputs, then optimised, frozen and evaluated again;
 *   - sx_nn_load for a batch of 1 or 2 (by the input's size); on success a prediction for up
 *     to that many examples;
 *   - a checkpoint load into fuzz_nets.h's network, for the optimiser and batch it names.
 * A failure must be one of the documented statuses, with no result and a message naming the
 * file; ASan/UBSan (and LeakSanitizer) catch the rest. Allocations go through a hook that
 * refuses any single one above 256 MB (the loader must then say SX_E_NOMEM, not crash), and
 * graphs holding more than 4M elements in all are read but not evaluated (time, not safety).
 * Build and run: fuzz/CMakeLists.txt; the corpus replays without libFuzzer (replay.c). */
#define _GNU_SOURCE /* memfd_create */
#define FUZZ_NAME "fuzz_model"
#include "fuzz_harness.h"
#include "fuzz_nets.h"
#include "nn_impl.h"

#include <string.h>
#include <zlib.h>

#define MAX_ALLOC ((size_t)256 << 20)
#define MAX_EVAL_ELEMENTS ((int64_t)4 << 20)

/* ---------------------------------------------------------------- allocation cap */

static void *cap_alloc(void *ctx, size_t n)
{
    (void)ctx;
    return n > MAX_ALLOC ? NULL : malloc(n);
}

static void *cap_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    return n > MAX_ALLOC ? NULL : realloc(p, n);
}

static void cap_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

/* ---------------------------------------------------------------- the input as a file */

/* The input as a file (fuzz_harness.h); the allocation cap is installed with the first. */
static void input_file(const uint8_t *data, size_t size)
{
    if (memfd < 0) {
        sx_allocator a = {cap_alloc, cap_realloc, cap_free, NULL};
        sx_allocator_set(&a);
    }
    write_file(data, size);
}

/* The trailer ("END ", u64 8, u32 CRC-32, 4 zero bytes) closes the file: its CRC becomes
 * zlib's crc32 of every byte before it. */
static void reseal(uint8_t *b, size_t n)
{
    if (n < 16 + 20)
        return;
    uLong crc = crc32(0, b, (uInt)(n - 20));
    for (int i = 0; i < 4; i++)
        b[n - 8 + i] = (uint8_t)(crc >> (8 * i));
}

static void check_failure(sx_status s, const void *result)
{
    CHECK(result == NULL);
    CHECK(s == SX_E_FORMAT || s == SX_E_UNSUPPORTED || s == SX_E_NOMEM);
    if (s != SX_E_NOMEM)
        CHECK(strncmp(sx_last_error(), memfd_path, strlen(memfd_path)) == 0);
}

/* ---------------------------------------------------------------- graphs */

static int64_t elements(const sx_cg_graph *g)
{
    int64_t total = 0;
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        const sx_cg_node *n = sx_cg_graph_node(g, i);
        if (n == NULL)
            continue;
        int64_t k = sx_shape_size(sx_cg_node_rank(n), sx_cg_node_shape(n));
        if (k > MAX_EVAL_ELEMENTS - total)
            return MAX_EVAL_ELEMENTS + 1;
        total += k;
    }
    return total;
}

/* Every input gets zeros; then evaluate the outputs (any status: a hostile graph may well
 * fail at run time, e.g. a singular matrix, but must not crash). */
static void run(sx_cg_graph *g, int n, sx_cg_node *const *outs)
{
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *x = sx_cg_graph_node(g, i);
        if (x == NULL || sx_cg_node_op(x) != SX_OP_INPUT)
            continue;
        sx_tensor *v = NULL;
        if (sx_tensor_zeros(sx_cg_node_dtype(x), sx_cg_node_rank(x), sx_cg_node_shape(x), &v) !=
            SX_OK)
            return;
        sx_status s = sx_cg_input_set(g, x, v, SX_CG_COPY);
        sx_tensor_free(v);
        if (s != SX_OK)
            return;
    }
    sx_status s = sx_cg_eval(g, n, outs);
    (void)s;
}

/* The run that resumes from the file (checkpoint_file): the optimiser, with its default
 * hyper-parameters (those of the corpus), and the batch the file names, so that a checkpoint
 * reaches its tensors; anything else must be refused as another run's (SX_E_STATE). */
static sx_optim_kind ckpt_kind;
static int ckpt_batch;

static void graph_file(void)
{
    ckpt_kind = SX_OPTIM_ADAGRAD;
    ckpt_batch = 4;
    sx_cg_file *f = (sx_cg_file *)1;
    sx_status s = sx_cg_file_read(memfd_path, &f);
    if (s != SX_OK) {
        check_failure(s, f);
        return;
    }
    CHECK(f != NULL);
    for (int i = 0; i < sx_cg_file_n_tensors(f); i++) {
        const char *name = sx_cg_file_tensor_name(f, i);
        CHECK(name != NULL && name[0] != '\0');
        const sx_tensor *t = sx_cg_file_tensor(f, name);
        CHECK(t != NULL && t->size == sx_shape_size(t->rank, t->shape));
    }
    for (int i = 0; i < sx_cg_file_n_meta(f); i++) {
        const char *key = sx_cg_file_meta_key(f, i);
        CHECK(key != NULL && sx_cg_file_meta(f, key) != NULL);
    }
    const char *opt = sx_cg_file_meta(f, "optimiser"), *batch = sx_cg_file_meta(f, "batch");
    if (opt != NULL && sx_optim_parse(opt, &ckpt_kind) != SX_OK)
        ckpt_kind = SX_OPTIM_ADAGRAD;
    ckpt_batch = batch != NULL && atoi(batch) > 0 ? atoi(batch) : 4;
    int n = sx_cg_file_n_outputs(f);
    if (n > 0 && n <= 256) {
        const char *names[256];
        sx_cg_node *outs[256];
        for (int i = 0; i < n; i++)
            CHECK((names[i] = sx_cg_file_output_name(f, i)) != NULL);
        for (int pass = 0; pass < 2; pass++) { /* the graph built while reading, then a new one */
            sx_cg_graph *g = NULL;
            s = sx_cg_file_graph(f, n, names, &g, outs);
            CHECK(s == SX_OK || (s == SX_E_NOMEM && g == NULL));
            if (s != SX_OK)
                break;
            if (elements(g) <= MAX_EVAL_ELEMENTS) {
                run(g, n, outs);
                if (pass == 1 && sx_cg_optimise(g, n, outs, NULL, NULL) == SX_OK &&
                    sx_cg_freeze(g, n, outs) == SX_OK) {
                    sx_status es = sx_cg_eval(g, n, outs);
                    (void)es;
                }
            }
            sx_cg_graph_free(g);
        }
    }
    sx_cg_file_free(f);
}

/* ---------------------------------------------------------------- models and checkpoints */

/* Loaded for batches of 1 or 2 (a graph optimised before saving, with fused nodes, only runs
 * the batch it was saved with). */
static void model_file(int64_t batch)
{
    sx_nn_model *m = (sx_nn_model *)1;
    sx_status s = sx_nn_load(memfd_path, batch, &m);
    if (s != SX_OK) {
        check_failure(s, m);
        return;
    }
    int rank = sx_nn_model_input_rank(m);
    CHECK(rank >= 1 && rank < SX_MAX_RANK);
    int64_t xs[SX_MAX_RANK], os[2] = {1, sx_nn_model_classes(m)};
    memcpy(xs + 1, sx_nn_model_input_shape(m), (size_t)rank * sizeof *xs);
    sx_dtype dt = sx_nn_model_dtype(m);
    for (xs[0] = 1; xs[0] <= batch; xs[0]++) {
        os[0] = xs[0];
        if (sx_shape_size(rank + 1, xs) > MAX_EVAL_ELEMENTS ||
            sx_shape_size(2, os) > MAX_EVAL_ELEMENTS)
            break;
        sx_tensor *x = NULL, *y = NULL;
        if (sx_tensor_zeros(dt, rank + 1, xs, &x) == SX_OK &&
            sx_tensor_zeros(dt, 2, os, &y) == SX_OK) {
            sx_status ps = sx_nn_model_predict(m, x, y);
            (void)ps;
        }
        sx_tensor_free(x);
        sx_tensor_free(y);
    }
    sx_nn_model_free(m);
}

static void checkpoint_file(void)
{
    sx_nn_net *net = NULL;
    if (fuzz_net(SX_F32, 1, &net) != SX_OK)
        return;
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim = sx_optim_params_default(ckpt_kind);
    p.batch = ckpt_batch;
    sx_status s = nn_checkpoint_load(net, &p, memfd_path);
    CHECK(s == SX_OK || s == SX_E_FORMAT || s == SX_E_UNSUPPORTED || s == SX_E_NOMEM ||
          s == SX_E_STATE);
    sx_nn_net_free(net);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > ((size_t)1 << 20))
        return 0; /* the corpus is a few KB a file; bigger inputs only slow the search */
    uint8_t *b = malloc(size > 0 ? size : 1);
    CHECK(b != NULL);
    if (size > 0)
        memcpy(b, data, size);
    reseal(b, size);
    input_file(b, size);
    free(b);
    graph_file();
    model_file(1 + (int64_t)(size & 1));
    checkpoint_file();
    return 0;
}
