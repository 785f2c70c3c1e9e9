/* dist.h - the ranks of a data-parallel job (MPI), for the trainer and main.
 *
 * The only place that knows MPI (src/core/dist.c; built with MD_HAVE_MPI
 * when the Makefile finds it). A process started by mpirun (or srun with
 * PMIx) joins MPI_COMM_WORLD in md_dist_init; any other process is rank 0
 * of 1 and every call here is then a no-op that succeeds. Errors come back
 * as statuses (MPI_ERRORS_RETURN), never as an MPI abort inside a call.
 *
 * Hangs: every collective here (and a trainer's wait bracketed by
 * md_dist_wait_begin/end, such as the device sync behind a GPU all-reduce)
 * is watched by a thread; one that waits longer than md_dist_set_timeout's
 * seconds prints which rank waited on what and ends the whole job
 * (md_dist_abort), so a dead or stuck peer never leaves the others hanging.
 */
#ifndef MD_DIST_H
#define MD_DIST_H

#include <stddef.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when mpsdiag was built with MPI. */
int md_dist_built(void);
/* "Open MPI v4.1.4, ..." (the library's own words), or why none. */
const char *md_dist_library(void);
/* 1 when this process was started by an MPI launcher (its environment). */
int md_dist_launched(void);

/* Joins the job when launched by mpirun; else a single process. Errors:
 * launched by mpirun but built without MPI (MD_ERR_UNSUPPORTED). */
md_status md_dist_init(void);
/* MPI_Finalize after a run that ended well on every rank. */
void md_dist_finalize(void);

int md_dist_rank(void);        /* 0 in a single process */
int md_dist_size(void);        /* 1 in a single process */
int md_dist_local_rank(void);  /* rank among the ranks of this machine */
/* The host this rank runs on (for naming stragglers). */
const char *md_dist_host(void);

/* Collectives over every rank (each returns at once with one rank). `what`
 * names the wait for a timeout's message ("the gradient all-reduce"). */
md_status md_dist_bcast(void *buf, size_t bytes, int root, const char *what);
md_status md_dist_allreduce_sum_f32(float *buf, size_t n, const char *what);
md_status md_dist_allreduce_sum_f64(double *buf, size_t n, const char *what);
md_status md_dist_allreduce_max_f64(double *buf, size_t n, const char *what);
/* out[rank * n + i] = every rank's in[i]. */
md_status md_dist_allgather_f64(const double *in, size_t n, double *out, const char *what);
md_status md_dist_barrier(const char *what);

/* The watchdog's limit in seconds (<= 0: none). Default 600. */
void md_dist_set_timeout(double seconds);
/* Brackets a wait on the other ranks outside this module (a device sync
 * behind a device all-reduce). Not nested. */
void md_dist_wait_begin(const char *what);
void md_dist_wait_end(void);
/* Called by the watchdog before it ends the job (a device communicator's
 * abort, so that the GPU stops waiting too). */
void md_dist_on_abort(void (*fn)(void *), void *ctx);

/* Ends every rank of the job with exit code `code` (MPI_Abort); `msg`
 * (may be NULL) is printed first as "mpsdiag: rank R: msg". With one
 * process it exits. */
#if defined(__GNUC__)
__attribute__((noreturn))
#endif
void md_dist_abort(int code, const char *msg);

/* Test hook (MPSDIAG_TEST_DIST_FAULT=kill:R:S or hang:R:S): rank R kills
 * itself (SIGKILL) or stops answering when it reaches optimizer step S. */
void md_dist_test_fault(long long step);

#ifdef __cplusplus
}
#endif
#endif
