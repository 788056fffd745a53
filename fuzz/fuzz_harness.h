/* fuzz_harness.h: the skeleton every libFuzzer target of fuzz/ shares. CHECK(cond) aborts with
 * the condition, its place and sx_last_error(); write_file(data, size) makes the input a file
 * (one memfd, rewritten for every input, opened through memfd_path, /proc/self/fd/N) so that a
 * target can read each input from memory and again from a file and compare. Define FUZZ_NAME
 * (the target's name, a string) and _GNU_SOURCE (memfd_create) before including. */
#ifndef FUZZ_HARNESS_H
#define FUZZ_HARNESS_H

#ifndef FUZZ_NAME
#error "fuzz_harness.h: define FUZZ_NAME before including it"
#endif

#include <sx_tensor.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, FUZZ_NAME ": check failed: %s (%s:%d); last error: %s\n", #cond,       \
                    __FILE__, __LINE__, sx_last_error());                                          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int memfd = -1;
static char memfd_path[64];

static void write_file(const uint8_t *data, size_t size)
{
    if (memfd < 0) {
        memfd = memfd_create(FUZZ_NAME, 0);
        CHECK(memfd >= 0);
        snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", memfd);
    }
    CHECK(ftruncate(memfd, 0) == 0);
    size_t done = 0;
    while (done < size) {
        ssize_t n = pwrite(memfd, data + done, size - done, (off_t)done);
        CHECK(n > 0);
        done += (size_t)n;
    }
}

#endif
