/* dist.c - the ranks of a data-parallel job over MPI (dist.h). The only file
 * that includes mpi.h; without MD_HAVE_MPI it is a single process. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/dist.h"
#include "core/signals.h"
#include "core/status.h"
#include "core/timer.h"

/* After a Ctrl-C a rank waits at most this long for the others: they got
 * the signal too and stop after the same step, so a longer wait means some
 * stopped elsewhere (before training, during validation) and never come. */
#define INTERRUPTED_WAIT_S 10.0

#ifdef MD_HAVE_MPI
#include <mpi.h>
#endif

static struct {
    int active;               /* MPI initialised by us */
    int rank, size, local_rank;
    char host[256];
    char library[256];
    double timeout;
    /* the watchdog */
    pthread_t th;
    int th_started, th_stop;
    pthread_mutex_t mu;
    const char *wait_what;    /* NULL: not waiting */
    double wait_since;
    void (*abort_fn)(void *);
    void *abort_ctx;
} D = {.size = 1, .timeout = 600, .mu = PTHREAD_MUTEX_INITIALIZER};

int md_dist_launched(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int md_dist_rank(void) { return D.rank; }
int md_dist_size(void) { return D.size; }
int md_dist_local_rank(void) { return D.local_rank; }
const char *md_dist_host(void)
{
    if (!D.host[0] && gethostname(D.host, sizeof D.host - 1) != 0) snprintf(D.host, sizeof D.host, "localhost");
    return D.host;
}
void md_dist_set_timeout(double seconds) { D.timeout = seconds; }
void md_dist_on_abort(void (*fn)(void *), void *ctx)
{
    pthread_mutex_lock(&D.mu);
    D.abort_fn = fn;
    D.abort_ctx = ctx;
    pthread_mutex_unlock(&D.mu);
}

void md_dist_wait_begin(const char *what)
{
    if (D.size < 2) return;
    pthread_mutex_lock(&D.mu);
    D.wait_what = what;
    D.wait_since = md_now();
    pthread_mutex_unlock(&D.mu);
}
void md_dist_wait_end(void)
{
    if (D.size < 2) return;
    pthread_mutex_lock(&D.mu);
    D.wait_what = NULL;
    pthread_mutex_unlock(&D.mu);
}

void md_dist_abort(int code, const char *msg)
{
    if (msg) {
        if (D.size > 1) fprintf(stderr, "mpsdiag: rank %d (%s): %s\n", D.rank, md_dist_host(), msg);
        else fprintf(stderr, "mpsdiag: %s\n", msg);
        fflush(stderr);
    }
    fflush(stdout);
#ifdef MD_HAVE_MPI
    if (D.active) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    _exit(code);
}

static void *watchdog(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&D.mu);
        int stop = D.th_stop;
        const char *what = D.wait_what;
        double since = D.wait_since;
        void (*fn)(void *) = D.abort_fn;
        void *ctx = D.abort_ctx;
        pthread_mutex_unlock(&D.mu);
        if (stop) return NULL;
        if (!what) continue;
        double waited = md_now() - since;
        int intr = md_interrupted() > 0;
        double limit = D.timeout > 0 ? D.timeout : 0;
        if (intr && (limit <= 0 || limit > INTERRUPTED_WAIT_S)) limit = INTERRUPTED_WAIT_S;
        if (limit <= 0 || waited < limit) continue;
        char msg[512];
        if (intr)
            snprintf(msg, sizeof msg, "interrupted; waited %.0f s for the other ranks in %s, ending the job", waited,
                     what);
        else
            snprintf(msg, sizeof msg,
                     "waited %.0f s for the other ranks in %s (--dist-timeout); a rank died or hangs, ending the job",
                     waited, what);
        if (fn) fn(ctx);
        md_dist_abort(intr ? MD_EXIT_INTERRUPTED : 1, msg);
    }
}

void md_dist_test_fault(long long step)
{
    const char *e = getenv("MPSDIAG_TEST_DIST_FAULT");
    if (!e || D.size < 2) return;
    char kind[8] = "";
    int r = -1;
    long long s = -1;
    if (sscanf(e, "%7[a-z]:%d:%lld", kind, &r, &s) != 3 || r != D.rank || s != step) return;
    if (strcmp(kind, "kill") == 0) raise(SIGKILL);
    if (strcmp(kind, "hang") == 0)
        for (;;) pause();
}

#ifdef MD_HAVE_MPI

int md_dist_built(void) { return 1; }

const char *md_dist_library(void)
{
    if (!D.library[0]) {
        char v[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        if (MPI_Get_library_version(v, &len) == MPI_SUCCESS) {
            v[strcspn(v, ",\n")] = '\0';
            snprintf(D.library, sizeof D.library, "%s", v);
        } else {
            snprintf(D.library, sizeof D.library, "MPI");
        }
    }
    return D.library;
}

static md_status mpi_err(int rc, const char *call, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
    return md_errf(MD_ERR_DEVICE, "rank %d: %s in %s failed: %s (another rank may have died)", D.rank, call, what, s);
}

md_status md_dist_init(void)
{
    if (D.active || !md_dist_launched()) return MD_OK;
    int provided = 0;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) return md_errf(MD_ERR_DEVICE, "MPI_Init_thread failed (error %d)", rc);
    D.active = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &D.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &D.size);
    MPI_Comm local;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, D.rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_rank(local, &D.local_rank);
        MPI_Comm_free(&local);
    }
    md_dist_host();
    /* the watchdog calls MPI_Abort while the main thread may sit in a
     * collective: that needs MPI_THREAD_MULTIPLE; without it the watchdog
     * still ends this rank (_exit), and mpirun then ends the others */
    if (D.size > 1 && pthread_create(&D.th, NULL, watchdog, NULL) == 0) D.th_started = 1;
    (void)provided;
    return MD_OK;
}

void md_dist_finalize(void)
{
    /* MPI_Finalize waits for every rank: watched like a collective (after
     * an interrupt that stopped this rank where the others did not) */
    md_dist_wait_begin("the end of the job");
    if (D.active) MPI_Finalize();
    md_dist_wait_end();
    D.active = 0;
    if (D.th_started) {
        pthread_mutex_lock(&D.mu);
        D.th_stop = 1;
        pthread_mutex_unlock(&D.mu);
        pthread_join(D.th, NULL);
        D.th_started = 0;
    }
}

#define WATCHED(what, call)                                                                                  \
    do {                                                                                                     \
        md_dist_wait_begin(what);                                                                            \
        int rc_ = (call);                                                                                    \
        md_dist_wait_end();                                                                                  \
        if (rc_ != MPI_SUCCESS) return mpi_err(rc_, #call, what);                                            \
    } while (0)

/* MPI counts are ints: large buffers go in pieces. */
#define CHUNK ((size_t)1 << 28)

md_status md_dist_bcast(void *buf, size_t bytes, int root, const char *what)
{
    if (D.size < 2) return MD_OK;
    for (size_t off = 0; off < bytes; off += CHUNK) {
        size_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
        WATCHED(what, MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD));
    }
    return MD_OK;
}

md_status md_dist_allreduce_sum_f32(float *buf, size_t n, const char *what)
{
    if (D.size < 2) return MD_OK;
    for (size_t off = 0; off < n; off += CHUNK) {
        size_t k = n - off < CHUNK ? n - off : CHUNK;
        WATCHED(what, MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    }
    return MD_OK;
}

md_status md_dist_allreduce_sum_f64(double *buf, size_t n, const char *what)
{
    if (D.size < 2) return MD_OK;
    WATCHED(what, MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return MD_OK;
}

md_status md_dist_allreduce_max_f64(double *buf, size_t n, const char *what)
{
    if (D.size < 2) return MD_OK;
    WATCHED(what, MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return MD_OK;
}

md_status md_dist_allgather_f64(const double *in, size_t n, double *out, const char *what)
{
    if (D.size < 2) {
        memcpy(out, in, n * sizeof *in);
        return MD_OK;
    }
    WATCHED(what, MPI_Allgather(in, (int)n, MPI_DOUBLE, out, (int)n, MPI_DOUBLE, MPI_COMM_WORLD));
    return MD_OK;
}

md_status md_dist_barrier(const char *what)
{
    if (D.size < 2) return MD_OK;
    WATCHED(what, MPI_Barrier(MPI_COMM_WORLD));
    return MD_OK;
}

#else /* built without MPI: one process */

int md_dist_built(void) { return 0; }
const char *md_dist_library(void) { return "none (built without MPI)"; }

md_status md_dist_init(void)
{
    if (md_dist_launched() && (getenv("OMPI_COMM_WORLD_SIZE") ? atoi(getenv("OMPI_COMM_WORLD_SIZE")) > 1 : 1))
        return md_errf(MD_ERR_UNSUPPORTED, "started by an MPI launcher but this mpsdiag was built without MPI; "
                       "install Open MPI (scripts/install-deps.sh) and rebuild");
    return MD_OK;
}
void md_dist_finalize(void) {}
md_status md_dist_bcast(void *buf, size_t bytes, int root, const char *what)
{
    (void)buf, (void)bytes, (void)root, (void)what;
    return MD_OK;
}
md_status md_dist_allreduce_sum_f32(float *buf, size_t n, const char *what)
{
    (void)buf, (void)n, (void)what;
    return MD_OK;
}
md_status md_dist_allreduce_sum_f64(double *buf, size_t n, const char *what)
{
    (void)buf, (void)n, (void)what;
    return MD_OK;
}
md_status md_dist_allreduce_max_f64(double *buf, size_t n, const char *what)
{
    (void)buf, (void)n, (void)what;
    return MD_OK;
}
md_status md_dist_allgather_f64(const double *in, size_t n, double *out, const char *what)
{
    (void)what;
    memcpy(out, in, n * sizeof *in);
    return MD_OK;
}
md_status md_dist_barrier(const char *what)
{
    (void)what;
    return MD_OK;
}

#endif
