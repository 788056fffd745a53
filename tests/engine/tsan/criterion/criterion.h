/* criterion/criterion.h for ThreadSanitizer builds only (scripts/tsan puts this folder first on
 * the include path): Criterion's runner cannot start under TSan (Criterion issue #274, its
 * inheritable arena collides with TSan's shadow memory), so the suites are built against this
 * subset of its API instead. Test() registers a function; runner.c runs each in a fork. */
#ifndef SX_TSAN_CRITERION_H
#define SX_TSAN_CRITERION_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

void shim_register(const char *suite, const char *name, void (*fn)(void));
_Noreturn void shim_fail(const char *file, int line, const char *expr, const char *fmt, ...);

#define Test(suite, name)                                                                          \
    static void suite##_##name(void);                                                              \
    __attribute__((constructor)) static void shim_reg_##suite##_##name(void)                       \
    {                                                                                              \
        shim_register(#suite, #name, suite##_##name);                                              \
    }                                                                                              \
    static void suite##_##name(void)

#define cr_assert(cond, ...)                                                                       \
    ((cond) ? (void)0 : shim_fail(__FILE__, __LINE__, #cond, "" __VA_ARGS__))
#define cr_assert_not(cond, ...) cr_assert(!(cond), __VA_ARGS__)
#define cr_assert_eq(a, b, ...) cr_assert((a) == (b), __VA_ARGS__)
#define cr_assert_neq(a, b, ...) cr_assert((a) != (b), __VA_ARGS__)
#define cr_assert_lt(a, b, ...) cr_assert((a) < (b), __VA_ARGS__)
#define cr_assert_leq(a, b, ...) cr_assert((a) <= (b), __VA_ARGS__)
#define cr_assert_gt(a, b, ...) cr_assert((a) > (b), __VA_ARGS__)
#define cr_assert_geq(a, b, ...) cr_assert((a) >= (b), __VA_ARGS__)
#define cr_assert_null(p, ...) cr_assert((p) == NULL, __VA_ARGS__)
#define cr_assert_not_null(p, ...) cr_assert((p) != NULL, __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) cr_assert(strcmp((a), (b)) == 0, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) cr_assert(strcmp((a), (b)) != 0, __VA_ARGS__)
#define cr_assert_fail(...) shim_fail(__FILE__, __LINE__, "cr_assert_fail", "" __VA_ARGS__)
#define cr_log_error(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr))
#define cr_log_info(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr))
#define cr_log_warn(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr))

#endif
