/* mpi.c: nn's communicator over OpenMPI (issue 22). Every collective is nonblocking on a
 * duplicate of the world with MPI_ERRORS_RETURN, polled (with short sleeps, so a waiting rank
 * leaves the cores to the others) until it completes, MPI reports an error, or the watchdog's
 * timeout passes: a dead rank becomes an SX_E_IO with a message, never a hang. */
#include "sx_mpi.h"

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct sx_mpi {
    sx_nn_comm comm;
    MPI_Comm world;    /* our duplicate of MPI_COMM_WORLD */
    bool own_init;     /* sx_mpi_init initialised MPI (and so finalizes it) */
    bool failed;       /* a collective failed: the job cannot go on */
    double timeout;    /* seconds a collective may wait */
    MPI_Request *reqs; /* started sums (sx_nn_comm.start) */
    int n_reqs, cap_reqs;
    int64_t bytes;       /* payload sent */
    double wait_seconds; /* spent blocked in MPI */
};

static sx_status mpi_fail(sx_mpi *m, const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    m->failed = true;
    return sx_error(SX_E_IO, "sx_mpi: rank %d of %d: %s failed: %s (a rank died?)", m->comm.rank,
                    m->comm.size, what, msg);
}

/* Poll n requests until all complete, one fails, or the timeout passes. */
static sx_status wait_reqs(sx_mpi *m, const char *what, int n, MPI_Request *reqs)
{
    double t0 = sx_seconds();
    long nap = 1000; /* ns; doubles up to 200 us */
    for (;;) {
        int done = 0;
        int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS)
            return mpi_fail(m, what, rc);
        double waited = sx_seconds() - t0;
        if (done) {
            m->wait_seconds += waited;
            return SX_OK;
        }
        if (waited > m->timeout) {
            m->failed = true;
            m->wait_seconds += waited;
            return sx_error(SX_E_IO,
                            "sx_mpi: rank %d of %d: %s: no answer from the other ranks in %.0f s "
                            "(a rank died or hangs; $SX_MPI_TIMEOUT sets the limit)",
                            m->comm.rank, m->comm.size, what, waited);
        }
        struct timespec ts = {0, nap};
        nanosleep(&ts, NULL);
        nap = nap < 200000 ? 2 * nap : nap;
    }
}

static MPI_Datatype mpi_type(sx_dtype dt)
{
    return dt == SX_F32 ? MPI_FLOAT : MPI_DOUBLE;
}

static sx_status check_buf(sx_mpi *m, const char *who, const void *buf, int64_t n, sx_dtype dt)
{
    if (m->failed)
        return sx_error(SX_E_STATE, "%s: an earlier collective failed: the job cannot go on", who);
    if ((buf == NULL && n > 0) || n < 0 || n > INT32_MAX || (dt != SX_F32 && dt != SX_F64))
        return sx_error(SX_E_ARG, "%s: %lld elements of %s at %p (want f32 or f64, < 2^31)", who,
                        (long long)n, sx_dtype_name(dt), buf);
    return SX_OK;
}

static sx_status comm_allreduce(void *ctx, void *buf, int64_t n, sx_dtype dt, bool max)
{
    sx_mpi *m = ctx;
    SX_TRY(check_buf(m, "sx_mpi allreduce", buf, n, dt));
    MPI_Request r;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(dt), max ? MPI_MAX : MPI_SUM,
                            m->world, &r);
    if (rc != MPI_SUCCESS)
        return mpi_fail(m, "allreduce", rc);
    m->bytes += n * (int64_t)sx_dtype_size(dt);
    return wait_reqs(m, "allreduce", 1, &r);
}

static sx_status comm_bcast(void *ctx, void *buf, int64_t bytes, int root)
{
    sx_mpi *m = ctx;
    if (m->failed)
        return sx_error(SX_E_STATE, "sx_mpi bcast: an earlier collective failed");
    if ((buf == NULL && bytes > 0) || bytes < 0 || bytes > INT32_MAX || root < 0 ||
        root >= m->comm.size)
        return sx_error(SX_E_ARG, "sx_mpi bcast: %lld bytes at %p from rank %d of %d",
                        (long long)bytes, buf, root, m->comm.size);
    MPI_Request r;
    int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, m->world, &r);
    if (rc != MPI_SUCCESS)
        return mpi_fail(m, "broadcast", rc);
    if (m->comm.rank == root)
        m->bytes += bytes;
    return wait_reqs(m, "broadcast", 1, &r);
}

static sx_status comm_start(void *ctx, void *buf, int64_t n, sx_dtype dt)
{
    sx_mpi *m = ctx;
    SX_TRY(check_buf(m, "sx_mpi start", buf, n, dt));
    if (m->n_reqs == m->cap_reqs) {
        int cap = m->cap_reqs ? 2 * m->cap_reqs : 64;
        MPI_Request *r = realloc(m->reqs, (size_t)cap * sizeof *r);
        if (r == NULL)
            return sx_error(SX_E_NOMEM, "sx_mpi start: out of memory");
        m->reqs = r;
        m->cap_reqs = cap;
    }
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(dt), MPI_SUM, m->world,
                            &m->reqs[m->n_reqs]);
    if (rc != MPI_SUCCESS)
        return mpi_fail(m, "gradient allreduce", rc);
    m->n_reqs++;
    m->bytes += n * (int64_t)sx_dtype_size(dt);
    return SX_OK;
}

static sx_status comm_finish(void *ctx)
{
    sx_mpi *m = ctx;
    int n = m->n_reqs;
    m->n_reqs = 0;
    return n > 0 ? wait_reqs(m, "gradient allreduce", n, m->reqs) : SX_OK;
}

static sx_status read_timeout(double *out)
{
    const char *v = getenv("SX_MPI_TIMEOUT");
    *out = 120;
    if (v == NULL || *v == '\0')
        return SX_OK;
    char *end = NULL;
    double t = strtod(v, &end);
    if (end == v || *end != '\0' || !(t > 0))
        return sx_error(SX_E_IO, "sx_mpi_init: SX_MPI_TIMEOUT=%s (want seconds > 0)", v);
    *out = t;
    return SX_OK;
}

sx_status sx_mpi_init(int *argc, char ***argv, sx_mpi **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "sx_mpi_init: out is NULL");
    *out = NULL;
    double timeout = 0;
    SX_TRY(read_timeout(&timeout));
    sx_mpi *m = calloc(1, sizeof *m);
    if (m == NULL)
        return sx_error(SX_E_NOMEM, "sx_mpi_init: out of memory");
    m->timeout = timeout;
    int inited = 0, provided = 0, rc = MPI_Initialized(&inited);
    if (rc == MPI_SUCCESS && !inited) {
        rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        m->own_init = rc == MPI_SUCCESS;
    }
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->world);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_rank(m->world, &m->comm.rank);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_size(m->world, &m->comm.size);
    if (rc != MPI_SUCCESS) {
        free(m);
        return sx_error(SX_E_IO, "sx_mpi_init: MPI failed to initialise (error %d)", rc);
    }
    m->comm.ctx = m;
    m->comm.allreduce = comm_allreduce;
    m->comm.bcast = comm_bcast;
    m->comm.start = comm_start;
    m->comm.finish = comm_finish;
    if (m->comm.size > 1)
        sx_nn_comm_set_default(&m->comm);
    *out = m;
    return SX_OK;
}

/* The finalize watchdog: ends the process if MPI_Finalize has not returned in time. */
typedef struct watchdog {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    double timeout;
    int rank;
} watchdog;

static void *watch(void *arg)
{
    watchdog *w = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)w->timeout + 1;
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    while (!w->done && rc == 0)
        rc = pthread_cond_timedwait(&w->cv, &w->mu, &until);
    bool done = w->done;
    pthread_mutex_unlock(&w->mu);
    if (!done) {
        fprintf(stderr,
                "sx_mpi: rank %d: MPI_Finalize did not return in %.0f s (a rank died?): "
                "exiting\n",
                w->rank, w->timeout);
        _exit(1);
    }
    return NULL;
}

void sx_mpi_finalize(sx_mpi *m, bool ok)
{
    if (m == NULL)
        return;
    if (sx_nn_comm_default() == &m->comm)
        sx_nn_comm_set_default(NULL);
    if ((m->failed || !ok) && m->comm.size > 1) {
        fprintf(stderr, "sx_mpi: rank %d of %d: ending the job (MPI_Abort)\n", m->comm.rank,
                m->comm.size);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    watchdog w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, m->timeout,
                  m->comm.rank};
    pthread_t th;
    bool watching = pthread_create(&th, NULL, watch, &w) == 0;
    MPI_Comm_free(&m->world);
    if (m->own_init)
        MPI_Finalize();
    if (watching) {
        pthread_mutex_lock(&w.mu);
        w.done = true;
        pthread_cond_signal(&w.cv);
        pthread_mutex_unlock(&w.mu);
        pthread_join(th, NULL);
    }
    free(m->reqs);
    free(m);
}

bool sx_mpi_launched(void)
{
    return getenv("OMPI_COMM_WORLD_RANK") != NULL || getenv("PMI_RANK") != NULL ||
           getenv("PMIX_RANK") != NULL;
}

int sx_mpi_rank(const sx_mpi *m)
{
    return m != NULL ? m->comm.rank : 0;
}

int sx_mpi_size(const sx_mpi *m)
{
    return m != NULL ? m->comm.size : 1;
}

const sx_nn_comm *sx_mpi_comm(const sx_mpi *m)
{
    return m != NULL ? &m->comm : NULL;
}

int64_t sx_mpi_bytes(const sx_mpi *m)
{
    return m != NULL ? m->bytes : 0;
}

double sx_mpi_wait_seconds(const sx_mpi *m)
{
    return m != NULL ? m->wait_seconds : 0;
}
