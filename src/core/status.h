/* status.h - error status codes, one-line error messages, always-on asserts.
 *
 * Two tiers of errors (STYLE.md 5):
 *   - bugs: MD_ASSERT prints expression, file and line and aborts;
 *   - everything a user or a machine can cause returns an md_status with a
 *     one-line message set by md_errf(); the status travels up to main, which
 *     prints "mpsdiag: <message>" and exits with md_status_exit_code().
 * Library code never calls exit().
 */
#ifndef MD_STATUS_H
#define MD_STATUS_H

#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum md_status {
    MD_OK = 0,
    MD_ERR_USAGE,       /* bad flag or flag value                      exit 2 */
    MD_ERR_CONFIG,      /* malformed or invalid JSON config            exit 3 */
    MD_ERR_DATA,        /* missing/corrupt dataset file                exit 3 */
    MD_ERR_IO,          /* file system: open/write/rename/disk full    exit 3 */
    MD_ERR_DEVICE,      /* requested device unavailable or failed      exit 4 */
    MD_ERR_UNSUPPORTED, /* op not supported on device (no fallback)    exit 4 */
    MD_ERR_OOM,         /* out of memory (host or device)              exit 5 */
    MD_ERR_NUMERIC,     /* NaN/Inf loss, failed threshold              exit 6 */
    MD_ERR_INTERRUPTED, /* SIGINT/SIGTERM                              exit 130 */
    MD_ERR_THRESHOLD,   /* --ci expectation missed                     exit 7 */
    MD_ERR_INTERNAL,    /* bug caught at run time                      exit 70 */
} md_status;

/* Exit codes, documented in README.md ("Exit codes"). */
enum {
    MD_EXIT_OK = 0,
    MD_EXIT_FAILURE = 1,
    MD_EXIT_USAGE = 2,
    MD_EXIT_INPUT = 3,
    MD_EXIT_DEVICE = 4,
    MD_EXIT_OOM = 5,
    MD_EXIT_NUMERIC = 6,
    MD_EXIT_THRESHOLD = 7,
    MD_EXIT_INTERNAL = 70,
    MD_EXIT_INTERRUPTED = 130,
};

int md_status_exit_code(md_status st);
const char *md_status_name(md_status st);

/* Sets the calling thread's last error message (printf-style, one line) and
 * returns `st`, so that `return md_errf(MD_ERR_DATA, "...")` reads well. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
md_status md_errf(md_status st, const char *fmt, ...);

/* Prefixes the current message with "<prefix>: " (adds context on the way up). */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
void md_err_prefix(const char *fmt, ...);

/* The calling thread's last error message ("" if none). Borrowed pointer. */
const char *md_errmsg(void);
void md_err_clear(void);

/* Always-on assert for programming errors. */
#define MD_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "mpsdiag: internal error: assertion '%s' failed "  \
                    "at %s:%d\n", #cond, __FILE__, __LINE__);                  \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* Propagate a non-OK status. */
#define MD_TRY(expr)                                                           \
    do {                                                                       \
        md_status md_try_st_ = (expr);                                         \
        if (md_try_st_ != MD_OK) return md_try_st_;                            \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
