/* sx_engine.h: the dependency engine. Runs operations on a pool of worker threads in an order
 * that respects their declared data dependencies (as MXNet's engine does).
 *
 * The engine knows nothing of tensors or graphs. A *variable* is a tag standing for some state
 * (a buffer, a parameter, a random-number generator). Each pushed operation names the variables
 * it reads and those it mutates. The engine guarantees the result of running the operations one
 * by one in push order:
 * - operations that only read a variable may run at the same time;
 * - an operation that mutates a variable starts only after every earlier operation that reads or
 *   mutates it has finished, and every later operation that reads or mutates it starts only
 *   after it has finished.
 * A variable named in both lists of one push counts as mutated. Duplicates are allowed.
 *
 * Ownership: the engine owns its workers and its variables' bookkeeping; `arg` stays the
 * caller's and must live until the operation has run (until a wait that covers it returns).
 * The read/mutate arrays are copied by sx_engine_push.
 *
 * Errors: an operation returns sx_status. When one fails, the engine keeps its status and
 * message (the first failure wins), marks the variables it mutates as failed, and skips every
 * later operation that reads or mutates a failed variable (marking what those mutate as failed
 * too); independent operations still run. sx_engine_wait_all / sx_engine_wait_for return the
 * kept failure (SX_OK otherwise) and clear it and the failed marks, so the engine is usable
 * again.
 *
 * Threads: sx_engine_new(n) starts n worker threads (n = 0: $SX_ENGINE_WORKERS, else the number
 * of cores). n = 1 still runs operations on one worker; the caller's thread never runs
 * operations. Kernel threads: each operation runs with sx_threads_set_local() set to its share:
 * an operation pushed with SX_ENGINE_WIDE runs alone (the engine lets the running operations
 * finish, starts no other until it is done) and may use every core; any other operation runs
 * with one kernel thread beside the others, or with every core when it starts while no other
 * runs or is ready (so a chain of operations runs as fast as one thread calling them). "Every
 * core" is the global count of sx_threads_set. The rule that keeps engine workers and strix's
 * kernel pool (tensor/par.c) from oversubscribing the cores: an operation with one kernel thread
 * never touches the pool, and one with every core runs its loops on the pool while the other
 * engine workers wait (asleep); so at most "every core" threads compute at once. Pool workers
 * spin for a few tens of microseconds after a loop before they sleep; engine workers never
 * spin.
 *
 * Thread safety: push, var_new, and the waits may be called from one thread at a time (the
 * engine's owner); operations must not call into the engine.
 */
#ifndef SX_ENGINE_H
#define SX_ENGINE_H

#include "sx_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sx_engine sx_engine;

/* A variable: an index handed out by sx_engine_var_new, valid until the engine is freed. */
typedef uint32_t sx_var;

/* An operation. `arg` is the pointer given to push. */
typedef sx_status (*sx_engine_fn)(void *arg);

enum {
    SX_ENGINE_WIDE = 1u << 0, /* run alone with every core (a big GEMM) */
};

/* The most workers an engine (and a graph, sx_cg_set_workers) runs. */
#define SX_ENGINE_MAX_WORKERS 256

/* Start an engine with n workers (0: $SX_ENGINE_WORKERS or the core count; at most
 * SX_ENGINE_MAX_WORKERS; more is SX_E_ARG). */
SX_NODISCARD sx_status sx_engine_new(int workers, sx_engine **out);
/* Wait for every pushed operation, stop the workers, free everything. NULL is fine. */
void sx_engine_free(sx_engine *e);
int sx_engine_workers(const sx_engine *e);

/* A new variable (no operation has touched it yet). */
SX_NODISCARD sx_status sx_engine_var_new(sx_engine *e, sx_var *out);

/* Queue fn(arg) after the operations it depends on (see the rules above). `flags` is 0 or
 * SX_ENGINE_WIDE. Fails only on bad arguments (an unknown variable) or memory exhaustion, and
 * then queues nothing. */
SX_NODISCARD sx_status sx_engine_push(sx_engine *e, sx_engine_fn fn, void *arg, const sx_var *reads,
                                      int n_reads, const sx_var *mutates, int n_mutates,
                                      unsigned flags);

/* Make room, ahead of time, for `ops` operations naming `claims` variables in all (counting
 * repeats) to be pending at once: pushes within that allocate nothing. Pushes beyond it still
 * work (they grow the engine's free lists). For callers that must not allocate in a steady
 * state, such as a frozen graph's evaluation. Errors: SX_E_ARG, SX_E_NOMEM. */
SX_NODISCARD sx_status sx_engine_reserve(sx_engine *e, int64_t ops, int64_t claims);

/* Block until every operation pushed so far has finished / until every operation pushed so far
 * that reads or mutates v has finished. Return the first failure kept (see Errors). */
sx_status sx_engine_wait_all(sx_engine *e);
sx_status sx_engine_wait_for(sx_engine *e, sx_var v);

#ifdef __cplusplus
}
#endif
#endif
