/* status.c: what every module shares: status strings, dtype names and sizes, the per-thread
 * error message, the allocator hook and the thread counts (strix's pool, tensor/core/par.c, and
 * OpenBLAS). */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE (Linux) */
#include "tensor_impl.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *const status_msgs[] = {
#define X(name, msg) msg,
#include "sx_status.def"
#undef X
};
_Static_assert(sizeof status_msgs / sizeof status_msgs[0] == SX_STATUS_COUNT,
               "one message per status");

const char *sx_status_str(sx_status s)
{
    if ((unsigned)s >= SX_STATUS_COUNT)
        return "unknown status";
    return status_msgs[s];
}

/* Element types: every module names and sizes them. */
size_t sx_dtype_size(sx_dtype d)
{
    return d == SX_F64 || d == SX_I64 ? 8 : 4;
}

const char *sx_dtype_name(sx_dtype d)
{
    switch (d) {
    case SX_F32:
        return "f32";
    case SX_F64:
        return "f64";
    case SX_I32:
        return "i32";
    case SX_I64:
        return "i64";
    }
    return "bad-dtype";
}

bool sx_dtype_is_int(sx_dtype d)
{
    return d == SX_I32 || d == SX_I64;
}

static _Thread_local char last_error[512];

const char *sx_last_error(void)
{
    return last_error;
}

void sx_error_clear(void)
{
    last_error[0] = '\0';
}

sx_status sx_error(sx_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

/* ---------------------------------------------------------------- allocator hook */

/* Blocks of at least this size are aligned to 2 MiB and offered to the kernel as huge pages:
 * filling a fresh 100 MB tensor then costs a few page faults instead of 25,000 (NumPy does
 * the same). */
#define HUGE_BLOCK ((size_t)4 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

static void *default_alloc(void *ctx, size_t n)
{
    (void)ctx;
    if (n < HUGE_BLOCK)
        return malloc(n);
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, n) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1), MADV_HUGEPAGE); /* a hint: may fail */
#endif
    return p;
}

static void *default_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    return realloc(p, n);
}

static void default_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static sx_allocator allocator = {default_alloc, default_realloc, default_free, NULL};

void sx_allocator_set(const sx_allocator *a)
{
    if (a == NULL || a->alloc == NULL || a->realloc == NULL || a->free == NULL)
        allocator = (sx_allocator){default_alloc, default_realloc, default_free, NULL};
    else
        allocator = *a;
}

sx_allocator sx_allocator_get(void)
{
    return allocator;
}

void *sx_alloc(size_t bytes)
{
    void *p = allocator.alloc(allocator.ctx, bytes ? bytes : 1);
    if (p == NULL)
        sx_error(SX_E_NOMEM, "out of memory allocating %zu bytes", bytes);
    return p;
}

void *sx_calloc(size_t count, size_t size)
{
    if (size != 0 && count > SIZE_MAX / size) {
        sx_error(SX_E_NOMEM, "out of memory: %zu x %zu bytes overflows", count, size);
        return NULL;
    }
    void *p = sx_alloc(count * size);
    if (p != NULL)
        memset(p, 0, count * size > 0 ? count * size : 1);
    return p;
}

void *sx_realloc(void *p, size_t bytes)
{
    void *q = allocator.realloc(allocator.ctx, p, bytes ? bytes : 1);
    if (q == NULL)
        sx_error(SX_E_NOMEM, "out of memory reallocating to %zu bytes", bytes);
    return q;
}

void sx_free(void *p)
{
    if (p != NULL)
        allocator.free(allocator.ctx, p);
}

/* ---------------------------------------------------------------- threads */

static atomic_int n_threads; /* set once by threads_default, then by sx_threads_set */
static pthread_once_t threads_once = PTHREAD_ONCE_INIT;

static int cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

/* The one place the counts are set: strix's kernels read n_threads (sx_threads_get) at each
 * call and run on strix's pool (tensor/core/par.c). */
static void apply_threads(int n)
{
    atomic_store_explicit(&n_threads, n, memory_order_relaxed);
}

/* The default: the number of cores, or $SX_THREADS (1..1024) when set. OpenBLAS (only the
 * LAPACK-based kernels call it) runs on the calling thread, once and for all: its own workers
 * would spin-yield after each call against the pool's, and its count is process-wide, so an
 * engine worker holding one kernel thread could not keep LAPACK to one. */
static void threads_default(void)
{
    int n = cores();
    const char *env = getenv("SX_THREADS");
    if (env != NULL && atoi(env) > 0 && atoi(env) <= 1024)
        n = atoi(env);
    apply_threads(n);
    openblas_set_num_threads(1);
}

sx_status sx_threads_set(int n)
{
    if (n < 0 || n > 1024)
        return sx_error(SX_E_ARG, "sx_threads_set: %d threads (want 0..1024)", n);
    pthread_once(&threads_once, threads_default); /* never to override this call later */
    apply_threads(n == 0 ? cores() : n);
    return SX_OK;
}

static _Thread_local int local_threads; /* 0: this thread follows n_threads */

sx_status sx_threads_set_local(int n)
{
    if (n < 0 || n > 1024)
        return sx_error(SX_E_ARG, "sx_threads_set_local: %d threads (want 0..1024)", n);
    local_threads = n;
    return SX_OK;
}

int sx_threads_get(void)
{
    if (local_threads > 0)
        return local_threads;
    pthread_once(&threads_once, threads_default);
    return atomic_load_explicit(&n_threads, memory_order_relaxed);
}
