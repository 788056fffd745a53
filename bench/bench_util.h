/* bench_util.h: what the benchmark programs share (header-only: each bench_*.c is one program):
 * CHECK, which ends the program with the call, its place and strix's message when a call fails,
 * and now(), monotonic wall-clock seconds. */
#ifndef STRIX_BENCH_UTIL_H
#define STRIX_BENCH_UTIL_H

#include "sx_tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        sx_status s_ = (expr);                                                                     \
        if (s_ != SX_OK) {                                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, sx_last_error());        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static inline double now(void)
{
    return sx_seconds();
}

#endif
