/* mpi.c: nn's communicator over OpenMPI. Every collective is nonblocking on a
 * duplicate of the world with MPI_ERRORS_RETURN, polled (with short sleeps, so a waiting rank
 * leaves the cores to the others) until it completes, MPI reports an error, or the watchdog's
 * timeout passes: a dead rank becomes an SX_E_IO with a message, never a hang. The gradient sums
 * the compiled step starts (start/wait, from the engine's threads) are kept moving by a progress
 * thread while the backward pass computes: OpenMPI advances a nonblocking collective only inside
 * MPI calls. One mutex serialises every MPI call (MPI_THREAD_SERIALIZED). */
#include "sx_mpi.h"

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A started sum (sx_nn_comm.start): its buffer names it for wait. */
typedef struct started {
    MPI_Request req;
    const void *buf;
    bool done;
    double t0, t1; /* started; completed (seen by whoever tested it) */
} started;

struct sx_mpi {
    sx_nn_comm comm;
    MPI_Comm world; /* our duplicate of MPI_COMM_WORLD */
    bool own_init;  /* sx_mpi_init initialised MPI (and so finalizes it) */
    double timeout; /* seconds a collective may wait */
    /* under mu: */
    pthread_mutex_t mu; /* every MPI call, and the fields below */
    pthread_cond_t cv;  /* a sum started, or the progress thread must stop */
    bool failed;        /* a collective failed: the job cannot go on */
    char why[512];      /* the first failure's message (it may have happened on another thread) */
    started *reqs;      /* started sums not yet waited for */
    int n_reqs, cap_reqs;
    int64_t bytes;         /* payload sent */
    double wait_seconds;   /* spent blocked in MPI */
    int pending;           /* started sums not yet complete */
    double flight_since;   /* when pending last became > 0 */
    double flight_seconds; /* time with at least one started sum pending */
    double grad_waited;    /* time blocked in waits for started sums */
    bool stop;             /* the progress thread ends */
    pthread_t progress;
    bool progressing; /* the progress thread runs */
};

/* The job cannot go on (mu held): remember why, for the other threads' calls. */
static sx_status failure(sx_mpi *m, sx_status s)
{
    if (!m->failed)
        snprintf(m->why, sizeof m->why, "%s", sx_last_error());
    m->failed = true;
    return s;
}

static sx_status mpi_fail(sx_mpi *m, const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return failure(m, sx_error(SX_E_IO, "sx_mpi: rank %d of %d: %s failed: %s (a rank died?)",
                               m->comm.rank, m->comm.size, what, msg));
}

static sx_status timed_out(sx_mpi *m, const char *what, double waited)
{
    return failure(m, sx_error(SX_E_IO,
                               "sx_mpi: rank %d of %d: %s: no answer from the other ranks in "
                               "%.0f s (a rank died or hangs; $SX_MPI_TIMEOUT sets the limit)",
                               m->comm.rank, m->comm.size, what, waited));
}

/* Sleep `nap` ns; the next nap (doubling up to 200 us). */
static long nap_for(long nap)
{
    struct timespec ts = {0, nap};
    nanosleep(&ts, NULL);
    return nap < 200000 ? 2 * nap : nap;
}

/* One test of n requests (mu held): *done when all are complete; an error when MPI failed or
 * the time waited since t0 passed the timeout. */
static sx_status test_reqs(sx_mpi *m, const char *what, int n, MPI_Request *reqs, double t0,
                           bool *done)
{
    int flag = 0;
    int rc = MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
    *done = flag != 0;
    if (rc != MPI_SUCCESS)
        return mpi_fail(m, what, rc);
    double waited = sx_seconds() - t0;
    return *done || waited <= m->timeout ? SX_OK : timed_out(m, what, waited);
}

/* Poll n requests until all complete, one fails, or the timeout passes (mu not held). */
static sx_status wait_reqs(sx_mpi *m, const char *what, int n, MPI_Request *reqs)
{
    double t0 = sx_seconds();
    long nap = 1000; /* ns */
    for (;;) {
        bool done = false;
        pthread_mutex_lock(&m->mu);
        sx_status s = test_reqs(m, what, n, reqs, t0, &done);
        if (s != SX_OK || done)
            m->wait_seconds += sx_seconds() - t0;
        pthread_mutex_unlock(&m->mu);
        if (s != SX_OK || done)
            return s;
        nap = nap_for(nap);
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
    pthread_mutex_lock(&m->mu);
    sx_status s = check_buf(m, "sx_mpi allreduce", buf, n, dt);
    MPI_Request r;
    int rc = s != SX_OK ? MPI_SUCCESS
                        : MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(dt),
                                         max ? MPI_MAX : MPI_SUM, m->world, &r);
    if (s == SX_OK && rc != MPI_SUCCESS)
        s = mpi_fail(m, "allreduce", rc);
    if (s == SX_OK)
        m->bytes += n * (int64_t)sx_dtype_size(dt);
    pthread_mutex_unlock(&m->mu);
    return s != SX_OK ? s : wait_reqs(m, "allreduce", 1, &r);
}

static sx_status comm_bcast(void *ctx, void *buf, int64_t bytes, int root)
{
    sx_mpi *m = ctx;
    if ((buf == NULL && bytes > 0) || bytes < 0 || bytes > INT32_MAX || root < 0 ||
        root >= m->comm.size)
        return sx_error(SX_E_ARG, "sx_mpi bcast: %lld bytes at %p from rank %d of %d",
                        (long long)bytes, buf, root, m->comm.size);
    pthread_mutex_lock(&m->mu);
    sx_status s =
        m->failed ? sx_error(SX_E_STATE, "sx_mpi bcast: an earlier collective failed") : SX_OK;
    MPI_Request r;
    int rc = s != SX_OK ? MPI_SUCCESS : MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, m->world, &r);
    if (s == SX_OK && rc != MPI_SUCCESS)
        s = mpi_fail(m, "broadcast", rc);
    if (s == SX_OK && m->comm.rank == root)
        m->bytes += bytes;
    pthread_mutex_unlock(&m->mu);
    return s != SX_OK ? s : wait_reqs(m, "broadcast", 1, &r);
}

/* A started sum is complete (mu held): the time some sum was pending grows when none is left. */
static void complete(sx_mpi *m, started *r)
{
    r->done = true;
    r->t1 = sx_seconds();
    if (--m->pending == 0)
        m->flight_seconds += r->t1 - m->flight_since;
}

/* Test every started sum not yet complete (mu held), stamping those that completed. */
static sx_status progress_all(sx_mpi *m)
{
    for (int i = 0; i < m->n_reqs; i++) {
        started *r = &m->reqs[i];
        if (r->done)
            continue;
        int flag = 0, rc = MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return mpi_fail(m, "gradient allreduce", rc);
        if (flag)
            complete(m, r);
    }
    return SX_OK;
}

/* The progress thread: while sums are in flight, test them every few tens of microseconds. */
static void *progress_main(void *arg)
{
    sx_mpi *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        bool active = false;
        for (int i = 0; i < m->n_reqs && !active; i++)
            active = !m->reqs[i].done;
        if (!active || m->failed) {
            pthread_cond_wait(&m->cv, &m->mu);
            continue;
        }
        (void)progress_all(m); /* a failure is the waiter's to report (failed is set) */
        pthread_mutex_unlock(&m->mu);
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

static sx_status comm_start(void *ctx, void *buf, int64_t n, sx_dtype dt)
{
    sx_mpi *m = ctx;
    pthread_mutex_lock(&m->mu);
    sx_status s = check_buf(m, "sx_mpi start", buf, n, dt);
    if (s == SX_OK && m->n_reqs == m->cap_reqs) {
        int cap = m->cap_reqs ? 2 * m->cap_reqs : 64;
        started *r = realloc(m->reqs, (size_t)cap * sizeof *r);
        if (r == NULL)
            s = sx_error(SX_E_NOMEM, "sx_mpi start: out of memory");
        else
            m->reqs = r, m->cap_reqs = cap;
    }
    if (s == SX_OK) {
        started *r = &m->reqs[m->n_reqs];
        *r = (started){MPI_REQUEST_NULL, buf, false, sx_seconds(), 0};
        int rc =
            MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(dt), MPI_SUM, m->world, &r->req);
        if (rc != MPI_SUCCESS)
            s = mpi_fail(m, "gradient allreduce", rc);
    }
    if (s == SX_OK) {
        m->n_reqs++;
        if (m->pending++ == 0)
            m->flight_since = m->reqs[m->n_reqs - 1].t0;
        m->bytes += n * (int64_t)sx_dtype_size(dt);
        pthread_cond_signal(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    return s;
}

/* Wait for the sum started on buf (or, buf NULL, for all of them). */
static sx_status wait_on(sx_mpi *m, const void *buf)
{
    double t0 = sx_seconds();
    long nap = 1000; /* ns */
    pthread_mutex_lock(&m->mu);
    sx_status s = SX_OK;
    for (;;) {
        s = m->failed ? sx_error(SX_E_IO, "%s", m->why) : progress_all(m);
        bool pending = false;
        for (int i = 0; i < m->n_reqs;) {
            started *r = &m->reqs[i];
            if (buf != NULL && r->buf != buf) {
                i++;
            } else if (r->done) {
                m->reqs[i] = m->reqs[--m->n_reqs];
            } else {
                pending = true;
                i++;
            }
        }
        double waited = sx_seconds() - t0;
        if (s == SX_OK && pending && waited > m->timeout)
            s = timed_out(m, "gradient allreduce", waited);
        if (s != SX_OK || !pending)
            break;
        pthread_mutex_unlock(&m->mu);
        nap = nap_for(nap);
        pthread_mutex_lock(&m->mu);
    }
    m->wait_seconds += sx_seconds() - t0;
    m->grad_waited += sx_seconds() - t0;
    pthread_mutex_unlock(&m->mu);
    return s;
}

static sx_status comm_wait(void *ctx, void *buf)
{
    return wait_on(ctx, buf);
}

static sx_status comm_finish(void *ctx)
{
    return wait_on(ctx, NULL);
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
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    /* serialized: the engine's threads start and wait for sums, the progress thread tests them
     * (one at a time: mu) */
    int inited = 0, provided = 0, rc = MPI_Initialized(&inited);
    if (rc == MPI_SUCCESS && !inited) {
        rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
        m->own_init = rc == MPI_SUCCESS;
    } else if (rc == MPI_SUCCESS) {
        rc = MPI_Query_thread(&provided);
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
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv);
        free(m);
        return sx_error(SX_E_IO, "sx_mpi_init: MPI failed to initialise (error %d)", rc);
    }
    m->comm.ctx = m;
    m->comm.allreduce = comm_allreduce;
    m->comm.bcast = comm_bcast;
    m->comm.start = comm_start;
    m->comm.finish = comm_finish;
    m->comm.wait = comm_wait;
    /* without it (an MPI below MPI_THREAD_SERIALIZED) sums advance only inside waits */
    if (m->comm.size > 1 && provided >= MPI_THREAD_SERIALIZED)
        m->progressing = pthread_create(&m->progress, NULL, progress_main, m) == 0;
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
    if (m->progressing) {
        pthread_mutex_lock(&m->mu);
        m->stop = true;
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->progress, NULL);
    }
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
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
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

double sx_mpi_hidden_seconds(const sx_mpi *m)
{
    if (m == NULL)
        return 0;
    double pending_now = m->pending > 0 ? sx_seconds() - m->flight_since : 0;
    double h = m->flight_seconds + pending_now - m->grad_waited;
    return h > 0 ? h : 0;
}
