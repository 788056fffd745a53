/* fuzz_idx.c: libFuzzer target for the IDX reader. Each input is parsed from memory (raw or
 * gzip, the same header checks as files), then read again as a file through zlib's gz reader
 * (an in-memory file, memfd), as a tensor with and without a limit; every path must agree on
 * the status, a failure must leave no result and a message naming the input, and a success must
 * describe exactly what it holds. ASan/UBSan catch the rest. Build and run: fuzz/CMakeLists.txt. */
#define _GNU_SOURCE /* memfd_create */
#define FUZZ_NAME "fuzz_idx"
#include "fuzz_harness.h"

#include <sx_datasets.h>

#include <string.h>

static void check_idx(const sx_ds_idx *x, int64_t limit)
{
    CHECK(sx_ds_type_size(x->type) > 0);
    CHECK(x->rank >= 1 && x->rank <= SX_MAX_RANK);
    int64_t count = 1;
    for (int i = 0; i < SX_MAX_RANK; i++) {
        CHECK(i < x->rank ? x->dims[i] >= 1 : x->dims[i] == 1);
        count *= x->dims[i];
    }
    CHECK(count == x->count);
    CHECK(x->file_dim0 >= x->dims[0]);
    CHECK(limit > 0 ? x->dims[0] == (limit < x->file_dim0 ? limit : x->file_dim0)
                    : x->dims[0] == x->file_dim0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sx_ds_idx *x = (sx_ds_idx *)1;
    sx_status st = sx_ds_idx_parse(data, size, "fuzzinput", 0, &x);
    if (st != SX_OK) {
        CHECK(x == NULL);
        CHECK(strncmp(sx_last_error(), "fuzzinput: ", 11) == 0);
        CHECK(st == SX_E_FORMAT || st == SX_E_NOMEM);
    } else {
        check_idx(x, 0);
        /* Every element is readable and converts. */
        sx_tensor *t = NULL;
        CHECK(sx_ds_idx_to_tensor(x, SX_F64, 0.5, &t) == SX_OK);
        CHECK(t->size == x->count);
        sx_tensor_free(t);
    }

    /* A limit changes what is kept, never the verdict. */
    sx_ds_idx *y = (sx_ds_idx *)1;
    CHECK(sx_ds_idx_parse(data, size, "fuzzinput", 1, &y) == st);
    if (st == SX_OK) {
        check_idx(y, 1);
        CHECK(memcmp(y->data, x->data, (size_t)y->count * sx_ds_type_size(y->type)) == 0);
    }
    sx_ds_idx_free(y);

    /* The file reader (zlib's gz reader) agrees with the memory reader. */
    write_file(data, size);
    sx_ds_idx *z = (sx_ds_idx *)1;
    sx_status fs = sx_ds_idx_read_raw(memfd_path, 0, &z);
    if (fs != st)
        fprintf(stderr, "fuzz_idx: file %s vs memory %s: %s\n", sx_status_str(fs),
                sx_status_str(st), sx_last_error());
    CHECK(fs == st);
    if (fs == SX_OK) {
        CHECK(z->count == x->count && z->type == x->type && z->rank == x->rank);
        CHECK(memcmp(z->data, x->data, (size_t)z->count * sx_ds_type_size(z->type)) == 0);
    } else {
        CHECK(z == NULL);
        CHECK(strncmp(sx_last_error(), memfd_path, strlen(memfd_path)) == 0);
    }
    sx_ds_idx_free(z);

    /* The converting reader, with a limit, also agrees. */
    sx_tensor *t = (sx_tensor *)1;
    CHECK(sx_ds_idx_read(memfd_path, SX_F32, 1.0 / 255, 2, &t) == st);
    CHECK(st == SX_OK ? t != NULL : t == NULL);
    sx_tensor_free(t);
    sx_ds_idx_free(x);
    return 0;
}
