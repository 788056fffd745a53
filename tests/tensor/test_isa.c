/* The instruction-set switch (tensor/isa.c): sx_isa_name() is the widest set the CPU has
 * (checked here with __builtin_cpu_supports) capped by $SX_ISA, in this process (ctest runs the
 * suite under SX_ISA=avx2 and base too) and in fresh child processes started with each value;
 * the first calls may race; the GEMM and the vmath kernels follow the same switch. */
#include "tensor_impl.h"
#include "testutil.h"
#include "vmath.h"

#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Test hook of gemm.c: the kernel set in use (want < 0 only queries). */
extern int sx__gemm_isa(int want);
extern bool sx__gemm_blocks(int isa, sx_dtype dt, int blocks[5]);

static const char *const names[] = {"base", "avx2", "avx512", "neon"};

/* What this CPU runs: on x86-64 2 with AVX-512 F, VL, BW, DQ and AVX2 + FMA, 1 with AVX2 + FMA,
 * else 0; 3 (NEON) on AArch64; 0 elsewhere. */
static int cpu_level(void)
{
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
        return 2;
    if (avx2)
        return 1;
#elif defined(__aarch64__)
    return 3;
#endif
    return 0;
}

/* The name a process with SX_ISA = env (NULL: unset) must report: base caps every set, avx2
 * and avx512 only an x86 CPU's (on AArch64 they are ignored, as neon is on x86). */
static const char *expected(const char *env)
{
    const int cpu = cpu_level();
    int cap = cpu;
    if (env != NULL && strcmp(env, "base") == 0)
        cap = 0;
    else if (env != NULL && strcmp(env, "avx2") == 0 && cpu <= 2)
        cap = 1;
    return names[cap < cpu ? cap : cpu];
}

Test(tensor_isa, name_is_one_of_four_and_stable)
{
    const char *n = sx_isa_name();
    cr_assert_not_null(n);
    cr_assert(strcmp(n, "base") == 0 || strcmp(n, "avx2") == 0 || strcmp(n, "avx512") == 0 ||
                  strcmp(n, "neon") == 0,
              "sx_isa_name() = \"%s\"", n);
    cr_assert_str_eq(n, names[sx__isa()]);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sx_isa_name(), n, "the same string on every call");
}

/* NEON is mandatory on AArch64: an AArch64 process runs at neon unless SX_ISA=base; x86's names
 * never appear there, nor neon on x86. */
Test(tensor_isa, neon_exactly_on_aarch64)
{
    const char *env = getenv("SX_ISA");
    const bool base = env != NULL && strcmp(env, "base") == 0;
#if defined(__aarch64__)
    cr_assert_str_eq(sx_isa_name(), base ? "base" : "neon");
    cr_assert_eq(sx__isa(), base ? SX__ISA_BASE : SX__ISA_NEON);
#else
    (void)base;
    cr_assert_neq(sx__isa(), SX__ISA_NEON);
#endif
}

/* In this process: the CPU's set capped by the SX_ISA ctest gave it (which is then the name
 * itself when the CPU has that set). */
Test(tensor_isa, follows_cpu_and_environment)
{
    const char *env = getenv("SX_ISA");
    cr_assert_str_eq(sx_isa_name(), expected(env), "SX_ISA=%s, CPU level %d", env ? env : "(unset)",
                     cpu_level());
    if (env != NULL && strcmp(env, expected(NULL)) == 0)
        cr_assert_str_eq(sx_isa_name(), env);
    cr_log_info("instruction set: %s (SX_ISA=%s)", sx_isa_name(), env ? env : "(unset)");
}

static void *isa_name_main(void *arg)
{
    *(const char **)arg = sx_isa_name();
    return NULL;
}

/* Criterion runs each test in a fresh process, so these are the first calls: all agree. */
Test(tensor_isa, racing_first_calls_agree)
{
    const char *got[8] = {0};
    pthread_t th[8];
    for (int t = 0; t < 8; t++)
        cr_assert_eq(pthread_create(&th[t], NULL, isa_name_main, &got[t]), 0);
    for (int t = 0; t < 8; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < 8; t++)
        if (got[t] != NULL)
            cr_assert_str_eq(got[t], got[0], "thread %d", t);
    cr_assert_str_eq(got[0], expected(getenv("SX_ISA")));
}

/* The GEMM (unless STRIX_GEMM_ISA caps it further) and the vmath kernels use the same set;
 * the GEMM's hook selects nothing above it. */
Test(tensor_isa, gemm_and_vmath_follow_the_switch)
{
    const int isa = sx__isa();
    int blocks[5];
    if (getenv("STRIX_GEMM_ISA") == NULL && sx__gemm_blocks(isa, SX_F32, blocks))
        cr_assert_eq(sx__gemm_isa(-1), isa);
    cr_assert_leq(sx__gemm_isa(-1), isa);
    cr_assert_leq(sx__gemm_isa(SX__ISA_AVX512), isa, "the hook never goes above sx__isa");
#if VM_DISPATCH
    cr_assert_eq(vm_isa(), isa);
#else
    cr_assert_eq(vm_isa(), VM_ISA_BASE);
#endif
}

/* Helper of the next test, run in a child process: writes sx_isa_name() to $SX_ISA_REPORT.
 * Does nothing in an ordinary run. */
Test(tensor_isa, child_report)
{
    const char *path = getenv("SX_ISA_REPORT");
    if (path == NULL)
        return;
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(sx_isa_name(), f);
    cr_assert_eq(fclose(f), 0);
}

/* Start this executable (only child_report) with SX_ISA = value (NULL: unset) and return the
 * name it reports in buf; false when the child could not be started. */
static bool child_name(const char *value, char *buf, size_t size)
{
    char path[] = "/tmp/strix_isa_XXXXXX";
    const int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    /* The environment without SX_ISA / SX_ISA_REPORT, plus the two settings; also without
     * Criterion's BXFI_* variables, which would make the child act as one of its workers. */
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **env = calloc(n + 3, sizeof *env);
    cr_assert_not_null(env);
    char isa_var[64], report_var[64];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "SX_ISA=", 7) != 0 && strncmp(environ[i], "SX_ISA_REPORT=", 14) &&
            strncmp(environ[i], "BXFI_", 5) != 0)
            env[k++] = environ[i];
    if (value != NULL) {
        snprintf(isa_var, sizeof isa_var, "SX_ISA=%s", value);
        env[k++] = isa_var;
    }
    snprintf(report_var, sizeof report_var, "SX_ISA_REPORT=%s", path);
    env[k++] = report_var;
    char *argv[] = {"/proc/self/exe", "--filter=tensor_isa/child_report", "-j1", "-q", NULL};
    pid_t pid;
    const bool started = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, env) == 0;
    free(env);
    bool ok = false;
    if (started) {
        int st = 0;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child with SX_ISA=%s failed",
                  value ? value : "(unset)");
        FILE *f = fopen(path, "r");
        cr_assert_not_null(f);
        ok = fgets(buf, (int)size, f) != NULL;
        fclose(f);
        cr_assert(ok, "child with SX_ISA=%s reported nothing", value ? value : "(unset)");
    }
    unlink(path);
    return ok;
}

/* Every value of SX_ISA, read at a process's first kernel call: a cap lowers, never raises;
 * unknown values (case matters) are ignored. (Run where SX_ISA is unset only: the runs under
 * SX_ISA=avx2 and base would repeat it, and unset is this process's own case.) */
Test(tensor_isa, each_value_in_a_fresh_process)
{
    if (getenv("SX_ISA") != NULL)
        cr_skip_test("run where SX_ISA is unset");
    if (access("/proc/self/exe", X_OK) != 0)
        cr_skip_test("no /proc/self/exe to start a child from");
    const char *values[] = {"base", "avx2", "avx512", "neon", "AVX2", "NEON", "sse4"};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        char got[32];
        cr_assert(child_name(values[i], got, sizeof got), "could not start a child");
        cr_assert_str_eq(got, expected(values[i]), "SX_ISA=%s", values[i] ? values[i] : "(unset)");
    }
}
