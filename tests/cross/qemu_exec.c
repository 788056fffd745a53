/* qemu_exec.c: lets a program under qemu-aarch64's user-mode emulation start AArch64 programs.
 * Without binfmt_misc the kernel cannot run an AArch64 executable, so a guest's execve of one
 * fails (ENOEXEC); Criterion starts every test worker that way (its BoxFort sandbox re-executes
 * the test program), and tests/tensor/test_isa.c spawns /proc/self/exe. Preloaded into the guest
 * (cmake/aarch64-linux-gnu.cmake sets LD_PRELOAD through QEMU_SET_ENV), this library runs such a
 * program under qemu-aarch64 again. The emulator's settings travel in the environment
 * (QEMU_LD_PREFIX, QEMU_SET_ENV, STRIX_QEMU: the emulator's path); the guest-only variables
 * LD_PRELOAD and LD_LIBRARY_PATH are dropped from the host process's environment (QEMU_SET_ENV
 * gives them back to its guest). Built only by a cross build for AArch64. */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

/* Is path an AArch64 ELF executable? */
static bool is_aarch64(const char *path)
{
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    Elf64_Ehdr h;
    const bool ok = read(fd, &h, sizeof h) == (ssize_t)sizeof h &&
                    memcmp(h.e_ident, ELFMAG, SELFMAG) == 0 && h.e_machine == EM_AARCH64;
    close(fd);
    return ok;
}

static bool guest_only(const char *var)
{
    return strncmp(var, "LD_PRELOAD=", 11) == 0 || strncmp(var, "LD_LIBRARY_PATH=", 16) == 0;
}

int execve(const char *path, char *const argv[], char *const envp[])
{
    if (!is_aarch64(path))
        return (int)syscall(SYS_execve, path, argv, envp);
    /* /proc/self/exe would name the emulator in the new process: the guest's own path. */
    static char exe[PATH_MAX], name[] = "qemu-aarch64", opt0[] = "-0";
    if (strcmp(path, "/proc/self/exe") == 0) {
        const ssize_t n = readlink(path, exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = '\0';
    } else {
        snprintf(exe, sizeof exe, "%s", path);
    }
    const char *qemu = getenv("STRIX_QEMU");
    size_t na = 0, ne = 0;
    while (argv[na] != NULL)
        na++;
    while (envp[ne] != NULL)
        ne++;
    /* qemu-aarch64 -0 argv[0] path argv[1..] */
    char **a = calloc(na + 5, sizeof *a);
    char **e = calloc(ne + 1, sizeof *e);
    if (a == NULL || e == NULL)
        return -1;
    size_t k = 0;
    a[k++] = name;
    a[k++] = opt0;
    a[k++] = na > 0 ? argv[0] : exe;
    a[k++] = exe;
    for (size_t i = 1; i < na; i++)
        a[k++] = argv[i];
    k = 0;
    for (size_t i = 0; i < ne; i++)
        if (!guest_only(envp[i]))
            e[k++] = envp[i];
    syscall(SYS_execve, qemu != NULL ? qemu : "/usr/bin/qemu-aarch64", a, e);
    free(a);
    free(e);
    return -1;
}

int execv(const char *path, char *const argv[])
{
    return execve(path, argv, environ);
}

int execl(const char *path, const char *arg, ...)
{
    va_list ap;
    size_t n = 1;
    va_start(ap, arg);
    while (va_arg(ap, const char *) != NULL)
        n++;
    va_end(ap);
    char **argv = calloc(n + 1, sizeof *argv);
    if (argv == NULL)
        return -1;
    memcpy(&argv[0], &arg, sizeof arg); /* execve's argv is char *const[] */
    va_start(ap, arg);
    for (size_t i = 1; i < n; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    const int rc = execve(path, argv, environ);
    free(argv);
    return rc;
}

/* glibc's posix_spawn calls its internal execve: a fork and the execve above instead (the
 * callers here pass no file actions or attributes). */
int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
                const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    (void)actions;
    (void)attr;
    const pid_t p = fork();
    if (p < 0)
        return -1;
    if (p == 0) {
        execve(path, argv, envp);
        _exit(127);
    }
    if (pid != NULL)
        *pid = p;
    return 0;
}
