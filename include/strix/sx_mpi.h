/* sx_mpi.h: data-parallel training over MPI, the optional module strix_mpi (built
 * when CMake finds MPI: option STRIX_MPI). It implements nn's communicator (sx_nn.h,
 * "Data-parallel training") with OpenMPI, so that sx_nn_train and sx_nn_fit train data-parallel
 * under mpirun: a program calls sx_mpi_init first and sx_mpi_finalize last, and nothing else
 * changes (examples/mnist_train and `strix train` do this).
 *
 * The gradient sums of the compiled step (sx_nn_comm's start and wait, called from the engine's
 * threads) travel while the backward pass computes: MPI is initialised MPI_THREAD_SERIALIZED,
 * one mutex serialises every MPI call, and a progress thread tests the sums in flight every
 * 20 us (OpenMPI advances a nonblocking collective only inside MPI calls).
 *
 * Faults: every collective runs nonblocking on a duplicate of MPI_COMM_WORLD whose error handler
 * is MPI_ERRORS_RETURN, and is polled until it completes or a timeout passes (the watchdog:
 * $SX_MPI_TIMEOUT seconds, default 120): then, or when MPI reports an error (a rank died), the
 * call fails with SX_E_IO and a message naming the collective, the rank and the time waited,
 * instead of hanging. After such a failure the job cannot go on: sx_mpi_finalize then ends it
 * with MPI_Abort (the other ranks are stopped too) rather than MPI_Finalize.
 *
 * Ownership: sx_mpi_init's object is the caller's, freed by sx_mpi_finalize; the communicator it
 * lends (sx_mpi_comm, and the nn default it sets) lives as long as it does. */
#ifndef SX_MPI_H
#define SX_MPI_H

#include "sx_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sx_mpi sx_mpi;

/* Initialise MPI (MPI_Init_thread, serialized; an MPI already initialised by the program is used
 * as it is and not finalized here) and, when the world has more than one rank, make this
 * process's communicator nn's default (sx_nn_comm_set_default), so that sx_nn_train / sx_nn_fit
 * train data-parallel. argc and argv may be NULL. A program started without mpirun is a world of
 * one rank (singleton MPI). Errors (*out NULL): SX_E_ARG (out NULL), SX_E_IO (MPI failed to
 * initialise, or $SX_MPI_TIMEOUT is not a number of seconds > 0), SX_E_NOMEM. */
SX_NODISCARD sx_status sx_mpi_init(int *argc, char ***argv, sx_mpi **out);

/* End MPI and free m (NULL is fine): MPI_Finalize when every collective succeeded and ok is
 * true; otherwise MPI_Abort over the world with exit code 1 (a rank that failed alone must not
 * leave the others waiting for it), which does not return when the world has > 1 rank. Clears
 * nn's default communicator if it was m's. A finalize that does not return within the timeout
 * (a rank died after the last collective) ends the process with exit code 1 and a message. */
void sx_mpi_finalize(sx_mpi *m, bool ok);

/* Whether an MPI launcher (mpirun, srun) started this process: OpenMPI's, PMI's or PMIx's rank
 * variable is set. Programs that also run alone call sx_mpi_init only then (a singleton MPI
 * would cost a start-up and may print the launcher's warnings). */
bool sx_mpi_launched(void);

int sx_mpi_rank(const sx_mpi *m); /* 0 for NULL */
int sx_mpi_size(const sx_mpi *m); /* 1 for NULL */
/* The communicator (borrowed from m). */
const sx_nn_comm *sx_mpi_comm(const sx_mpi *m);
/* Payload bytes this rank has sent into allreduces and broadcasts so far. */
int64_t sx_mpi_bytes(const sx_mpi *m);
/* Seconds this rank has spent waiting for collectives to complete (blocked in MPI). */
double sx_mpi_wait_seconds(const sx_mpi *m);
/* Seconds during which a gradient sum a compiled step started (sx_nn_comm.start) was pending
 * while this rank went on computing: the time with at least one sum started and not complete
 * (completion seen by the progress thread or a wait; it includes waiting for a slower rank to
 * start its side), less the time blocked waiting for them. (These figures are read between
 * steps, from the thread that trains.) */
double sx_mpi_hidden_seconds(const sx_mpi *m);

#ifdef __cplusplus
}
#endif
#endif
