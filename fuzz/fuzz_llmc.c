/* fuzz_llmc.c: libFuzzer target for the reader and writer of llm.c's GPT-2 checkpoint
 * (datasets/llmc.c). Each input is parsed from memory, then read again as a file (an in-memory
 * file, memfd); both must agree, a failure must leave no set and a message naming the input,
 * and a success must write back as llm.c's f32 format and read back to the same set. ASan/UBSan
 * catch the rest. Build and run: fuzz/CMakeLists.txt. */
#define _GNU_SOURCE /* memfd_create */
#define FUZZ_NAME "fuzz_llmc"
#include "fuzz_harness.h"

#include <sx_datasets.h>

#include <string.h>

static char path[] = "/tmp/fuzz_llmc_XXXXXX";

static void remove_path(void)
{
    unlink(path);
}

static void same_set(const sx_ds_tensors *a, const sx_ds_tensors *b)
{
    CHECK(sx_ds_tensors_count(a) == sx_ds_tensors_count(b));
    for (int64_t i = 0; i < sx_ds_tensors_count(a); i++) {
        const sx_tensor *x = sx_ds_tensors_at(a, i), *y = sx_ds_tensors_at(b, i);
        CHECK(strcmp(sx_ds_tensors_name(a, i), sx_ds_tensors_name(b, i)) == 0);
        CHECK(x->dtype == SX_F32 && y->dtype == SX_F32 && x->size == y->size);
        CHECK(memcmp(x->data, y->data, (size_t)x->size * 4) == 0);
    }
    CHECK(sx_ds_tensors_meta_count(a) == 6 && sx_ds_tensors_meta_count(b) == 6);
    for (int64_t i = 0; i < 6; i++) {
        const char *k = sx_ds_tensors_meta_key(a, i);
        CHECK(strcmp(sx_ds_tensors_meta_get(a, k), sx_ds_tensors_meta_get(b, k)) == 0);
    }
}

static void round_trip(const sx_ds_tensors *set)
{
    static int made = 0;
    if (!made) {
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        close(fd);
        atexit(remove_path);
        made = 1;
    }
    CHECK(sx_ds_llmc_write(path, set) == SX_OK);
    sx_ds_tensors *b = NULL;
    CHECK(sx_ds_llmc_read(path, &b) == SX_OK);
    same_set(set, b);
    sx_ds_tensors_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sx_ds_tensors *a = (sx_ds_tensors *)1;
    sx_status st = sx_ds_llmc_parse(data, size, "fuzzinput", &a);
    if (st != SX_OK) {
        CHECK(a == NULL);
        CHECK(strncmp(sx_last_error(), "fuzzinput: ", 11) == 0);
        CHECK(st == SX_E_FORMAT || st == SX_E_NOMEM);
    } else {
        round_trip(a);
    }

    write_file(data, size);
    sx_ds_tensors *b = (sx_ds_tensors *)1;
    sx_status fs = sx_ds_llmc_read(memfd_path, &b);
    CHECK(fs == st);
    if (fs == SX_OK) {
        same_set(a, b);
    } else {
        CHECK(b == NULL);
        CHECK(strncmp(sx_last_error(), memfd_path, strlen(memfd_path)) == 0);
    }
    sx_ds_tensors_free(b);
    sx_ds_tensors_free(a);
    return 0;
}
