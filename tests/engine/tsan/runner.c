/* runner.c: the test runner of the ThreadSanitizer builds (see criterion/criterion.h here).
 * Each registered test runs in its own child process, one at a time, as Criterion would;
 * a failed assertion, a crash or a TSan report (halt_on_error) fails it.
 *     <suite> [SUBSTRING]      run the tests whose "suite::name" contains SUBSTRING */
#include "criterion/criterion.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAX_TESTS = 1024 };

static struct {
    const char *suite, *name;
    void (*fn)(void);
} tests[MAX_TESTS];
static int n_tests;

void shim_register(const char *suite, const char *name, void (*fn)(void))
{
    if (n_tests == MAX_TESTS) {
        fprintf(stderr, "tsan runner: more than %d tests\n", MAX_TESTS);
        exit(2);
    }
    tests[n_tests].suite = suite;
    tests[n_tests].name = name;
    tests[n_tests].fn = fn;
    n_tests++;
}

void shim_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
    fprintf(stderr, "%s:%d: assertion failed: %s\n", file, line, expr);
    if (fmt[0] != '\0') {
        va_list ap;
        va_start(ap, fmt);
        fputs("    ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    exit(1);
}

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : "";
    int run = 0, failed = 0;
    for (int i = 0; i < n_tests; i++) {
        char full[512];
        snprintf(full, sizeof full, "%s::%s", tests[i].suite, tests[i].name);
        if (strstr(full, filter) == NULL)
            continue;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        if (pid == 0) {
            tests[i].fn();
            exit(0); /* through TSan's exit handler: reports set a failing status */
        }
        int status = 0;
        waitpid(pid, &status, 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        printf("[%s] %s (%.2fs)\n", ok ? "PASS" : "FAIL", full, s);
        run++;
        failed += !ok;
    }
    printf("[====] Synthesis: Tested: %d | Passing: %d | Failing: %d\n", run, run - failed, failed);
    return failed != 0 || run == 0;
}
