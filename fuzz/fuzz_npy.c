/* fuzz_npy.c: libFuzzer target for the .npy reader (datasets/npy.c). Each input is parsed from
 * memory, then read again as a file (an in-memory file, memfd); both must agree on the status,
 * a failure must leave no result and a message naming the input, and a success must describe
 * exactly what it holds, convert to a tensor, and survive a write and a read back bit for bit.
 * ASan/UBSan catch the rest. Build and run: fuzz/CMakeLists.txt. */
#define _GNU_SOURCE /* memfd_create */
#define FUZZ_NAME "fuzz_npy"
#include "fuzz_harness.h"

#include <sx_datasets.h>

#include <string.h>

static void check_array(const sx_ds_npy *a)
{
    CHECK(sx_ds_npy_type_size(a->type) > 0);
    CHECK(a->rank >= 0 && a->rank <= SX_MAX_RANK);
    int64_t count = 1;
    for (int i = 0; i < SX_MAX_RANK; i++) {
        CHECK(i < a->rank ? a->dims[i] >= 0 : a->dims[i] == 1);
        count *= a->dims[i];
    }
    CHECK(count == a->count);
    if (a->type == SX_DS_NPY_BOOL)
        for (int64_t i = 0; i < a->count; i++)
            CHECK(((const uint8_t *)a->data)[i] <= 1);
}

static char path[] = "/tmp/fuzz_npy_XXXXXX";

static void remove_path(void)
{
    unlink(path);
}

/* Written by strix and read back: the same array. */
static void round_trip(const sx_ds_npy *a)
{
    static int made = 0;
    if (!made) {
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        close(fd);
        atexit(remove_path);
        made = 1;
    }
    CHECK(sx_ds_npy_write(path, a->type, a->rank, a->dims, a->data) == SX_OK);
    sx_ds_npy *b = NULL;
    CHECK(sx_ds_npy_read_raw(path, &b) == SX_OK);
    CHECK(b->type == a->type && b->rank == a->rank && b->count == a->count);
    CHECK(memcmp(b->dims, a->dims, sizeof a->dims) == 0);
    CHECK(memcmp(b->data, a->data, (size_t)a->count * sx_ds_npy_type_size(a->type)) == 0);
    sx_ds_npy_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sx_ds_npy *a = (sx_ds_npy *)1;
    sx_status st = sx_ds_npy_parse(data, size, "fuzzinput", &a);
    if (st != SX_OK) {
        CHECK(a == NULL);
        CHECK(strncmp(sx_last_error(), "fuzzinput: ", 11) == 0);
        CHECK(st == SX_E_FORMAT || st == SX_E_NOMEM);
    } else {
        check_array(a);
        sx_tensor *t = NULL;
        CHECK(sx_ds_npy_to_tensor(a, SX_F64, 1.0, &t) == SX_OK);
        CHECK(t->size == a->count);
        sx_tensor_free(t);
        if (a->count <= 1 << 16)
            round_trip(a);
    }

    /* The file reader agrees with the memory reader. */
    write_file(data, size);
    sx_ds_npy *b = (sx_ds_npy *)1;
    sx_status fs = sx_ds_npy_read_raw(memfd_path, &b);
    CHECK(fs == st);
    if (fs == SX_OK) {
        CHECK(b->type == a->type && b->count == a->count && b->rank == a->rank);
        CHECK(memcmp(b->data, a->data, (size_t)a->count * sx_ds_npy_type_size(a->type)) == 0);
    } else {
        CHECK(b == NULL);
        CHECK(strncmp(sx_last_error(), memfd_path, strlen(memfd_path)) == 0);
    }
    sx_ds_npy_free(b);
    sx_ds_npy_free(a);
    return 0;
}
