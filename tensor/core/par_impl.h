/* par_impl.h: strix's one parallel runtime (tensor/core/par.c), used by every parallel kernel, the
 * GEMM, the convolution drivers and the parallel graph evaluation (never installed).
 *
 * A parallel loop is a number of tasks. The calling thread takes part: it and whichever pool
 * workers are awake claim tasks from one atomic word (a loop of at most 24 tasks: the caller
 * the lowest left, workers the highest, so that with two threads each keeps its end of the rows
 * from loop to loop, in its own core's cache), and the call returns when every TASK has run, never
 * waiting for a worker that has not claimed one (a descheduled worker cannot hold the caller up;
 * one that holds a task costs at most that task, so big loops are cut into about four tasks per
 * thread). Idle workers spin for about SX__PAR_SPIN_NS, then sleep; a call wakes only the workers
 * it may use. The policy as a whole is documented at "Threads" in sx_tensor.h. */
#ifndef SX_PAR_IMPL_H
#define SX_PAR_IMPL_H

#include <stdint.h>

/* Loops over at least this many elements run in parallel (cheap element-wise work); expensive
 * per-element work (transcendentals) uses the lower threshold. As a grain of sx__par_range (the
 * fewest items per task) use half of it, so that a loop of SX_PAR_MIN items makes two tasks. */
#define SX_PAR_MIN 32768
#define SX_PAR_MIN_HEAVY 4096

/* How long an idle worker (and a caller waiting for a worker's last task) spins before it
 * sleeps: about the time a loop of SX_PAR_MIN cheap elements takes, and a few times the cost of
 * waking a sleeping thread, so that back-to-back parallel loops keep their workers awake while
 * an idle pool leaves the cores to others within tens of microseconds. */
#define SX__PAR_SPIN_NS 50000

/* The same while a caller holds the pool (sx__par_hold): the gaps between the parallel loops of
 * a graph evaluation (its serial small-vector kernels, its bookkeeping) often outlast
 * SX__PAR_SPIN_NS, and a worker woken from sleep joins the next loop tens of microseconds late
 * (resnet20's training step: about 15 such wakes). */
#define SX__PAR_HOLD_SPIN_NS 1000000

/* At most this many pool workers (a kernel uses at most one more thread: the caller). */
#define SX__PAR_MAX_WORKERS 255

/* At most this many tasks per call run in parallel (more is an internal bug: an assert, and
 * in a release build the loop runs serially). */
#define SX__PAR_MAX_TASKS ((int64_t)1 << 24)

typedef void (*sx__par_task_fn)(void *ctx, int64_t task);
typedef void (*sx__par_range_fn)(void *ctx, int64_t lo, int64_t hi);

/* The number of threads a parallel loop started now by this thread may use: 1 inside a task of
 * a loop that runs on several threads (nested loops then run serially in the task that calls
 * them), else sx_threads_get(). Kernels that pick a strategy by the thread count ask this. */
int sx__par_threads(void);

/* Run fn(ctx, t) once for every t in [0, n_tasks), in any order and on any of up to
 * min(sx__par_threads(), n_tasks) threads (the caller included); return when all have run.
 * n_tasks <= 0 does nothing. Tasks must not depend on one another's order or thread: each
 * writes its own part of the output. Runs everything on the calling thread, in order, when one
 * thread is allowed, when called from inside a task, or when another thread's loop holds the
 * pool (one loop at a time: the pool never runs two callers' loops against each other). */
void sx__par_for(int64_t n_tasks, sx__par_task_fn fn, void *ctx);
/* The same on at most max_threads threads (a kernel whose per-thread scratch has room for
 * that many). */
void sx__par_for_upto(int max_threads, int64_t n_tasks, sx__par_task_fn fn, void *ctx);

/* Inside a task: the index of the thread running it among the threads of its loop, in
 * [0, threads used): 0 for the caller (and for every task of a loop run serially), 1.. for
 * workers. A thread keeps its index for the whole loop, so a kernel can give each thread its
 * own scratch slot. */
int sx__par_slot(void);

/* Run fn(ctx, lo, hi) over consecutive ranges covering [0, n) (n <= 0: nothing), each of at
 * least `grain` items (grain >= 1) but the last, at most four per thread; with one range the
 * call is fn(ctx, 0, n) on the calling thread. The boundaries depend on n and the thread count:
 * use it only where each item's result does not depend on them (element-wise loops); a
 * reduction cuts its input into fixed blocks itself and uses sx__par_for. */
void sx__par_range(int64_t n, int64_t grain, sx__par_range_fn fn, void *ctx);

/* Between sx__par_hold() and the matching sx__par_release(), idle workers spin for up to
 * SX__PAR_HOLD_SPIN_NS instead of SX__PAR_SPIN_NS before they sleep: for a caller about to run
 * many loops with short serial gaps between them (a graph evaluation). Holds nest and may come
 * from several threads; each hold must be released. */
void sx__par_hold(void);
void sx__par_release(void);
/* How long an idle worker spins now, in ns: SX__PAR_HOLD_SPIN_NS while held, else
 * SX__PAR_SPIN_NS. */
int64_t sx__par_spin_ns(void);

/* For the tests: how many pool workers have been started so far. */
int sx__par_workers(void);
/* For the tests: how many pool workers sleep (or are about to) until the next loop. */
int sx__par_sleeping(void);

#endif
