/* fuzz_safetensors.c: libFuzzer target for the safetensors reader and writer
 * (datasets/safetensors.c). Each input is parsed from memory, then read again as a file (an
 * in-memory file, memfd); both must agree on the status and the set, a failure must leave no set
 * and a message naming the input, and a success must hold valid, uniquely named f32/f64 tensors
 * that survive a write and a read back bit for bit (and convert from Hugging Face's GPT-2 names
 * to llm.c's, or fail saying why). ASan/UBSan catch the rest. Build and run:
 * fuzz/CMakeLists.txt. */
#define _GNU_SOURCE /* memfd_create */
#define FUZZ_NAME "fuzz_safetensors"
#include "fuzz_harness.h"

#include <sx_datasets.h>

#include <string.h>

static char path[] = "/tmp/fuzz_safetensors_XXXXXX";

static void remove_path(void)
{
    unlink(path);
}

static bool same_tensor(const sx_tensor *a, const sx_tensor *b)
{
    return a->dtype == b->dtype && sx_shape_equal(a->rank, a->shape, b->rank, b->shape) &&
           memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(a->dtype)) == 0;
}

/* The same names, tensors (bits) and metadata, in the same order. */
static void same_set(const sx_ds_tensors *a, const sx_ds_tensors *b)
{
    CHECK(sx_ds_tensors_count(a) == sx_ds_tensors_count(b));
    for (int64_t i = 0; i < sx_ds_tensors_count(a); i++) {
        CHECK(strcmp(sx_ds_tensors_name(a, i), sx_ds_tensors_name(b, i)) == 0);
        CHECK(same_tensor(sx_ds_tensors_at(a, i), sx_ds_tensors_at(b, i)));
    }
    CHECK(sx_ds_tensors_meta_count(a) == sx_ds_tensors_meta_count(b));
    for (int64_t i = 0; i < sx_ds_tensors_meta_count(a); i++) {
        const char *k = sx_ds_tensors_meta_key(a, i);
        CHECK(strcmp(k, sx_ds_tensors_meta_key(b, i)) == 0);
        CHECK(strcmp(sx_ds_tensors_meta_get(a, k), sx_ds_tensors_meta_get(b, k)) == 0);
    }
}

static void check_set(const sx_ds_tensors *set)
{
    for (int64_t i = 0; i < sx_ds_tensors_count(set); i++) {
        const char *name = sx_ds_tensors_name(set, i);
        const sx_tensor *t = sx_ds_tensors_at(set, i);
        CHECK(name != NULL && name[0] != '\0' && sx_ds_tensors_get(set, name) == t);
        CHECK(t->dtype == SX_F32 || t->dtype == SX_F64);
        CHECK(sx_shape_check(NULL, t->rank, t->shape) == SX_OK);
        CHECK(sx_shape_size(t->rank, t->shape) == t->size);
    }
}

/* Written by strix and read back: the same set. */
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
    CHECK(sx_ds_safetensors_write(path, set) == SX_OK);
    sx_ds_tensors *b = NULL;
    CHECK(sx_ds_safetensors_read(path, &b) == SX_OK);
    same_set(set, b);
    sx_ds_tensors_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sx_ds_tensors *a = (sx_ds_tensors *)1;
    sx_status st = sx_ds_safetensors_parse(data, size, "fuzzinput", &a);
    if (st != SX_OK) {
        CHECK(a == NULL);
        CHECK(strncmp(sx_last_error(), "fuzzinput: ", 11) == 0);
        CHECK(st == SX_E_FORMAT || st == SX_E_UNSUPPORTED || st == SX_E_NOMEM);
    } else {
        check_set(a);
        round_trip(a);
        /* a set of Hugging Face's GPT-2 names converts to llm.c's layout, or says why not */
        sx_ds_tensors *g = (sx_ds_tensors *)1;
        sx_status gs = sx_ds_llmc_from_hf(a, 1, &g);
        CHECK(gs == SX_OK ? g != NULL : g == NULL && strstr(sx_last_error(), "sx_ds_llmc_from_hf"));
        sx_ds_tensors_free(g);
    }

    /* The file reader agrees with the memory reader. */
    write_file(data, size);
    sx_ds_tensors *b = (sx_ds_tensors *)1;
    sx_status fs = sx_ds_safetensors_read(memfd_path, &b);
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
