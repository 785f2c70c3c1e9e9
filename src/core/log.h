/* log.h - human output: verbosity, terminal detection, progress lines.
 *
 * People read stdout; machines read --report JSON. Progress and colour appear
 * only when stdout is a terminal and NO_COLOR is unset; --quiet silences
 * everything but errors (stderr); --verbose adds detail lines.
 */
#ifndef MD_LOG_H
#define MD_LOG_H

#include <stdio.h>

#include "core/progress.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum md_verbosity { MD_QUIET = 0, MD_NORMAL = 1, MD_VERBOSE = 2 } md_verbosity;

void md_log_init(md_verbosity v);
md_verbosity md_log_level(void);
/* Treats stdout as no terminal from now on (no progress, no colour): the
 * ranks of an mpirun job, whose launcher gives them a pseudo-terminal
 * wherever its own output goes. */
void md_log_plain(void);
/* True when stdout is a terminal (progress bars allowed). */
int md_log_is_tty(void);
/* True when colour may be used (tty and NO_COLOR unset). */
int md_log_color(void);

/* Normal output on stdout (suppressed by --quiet). */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
void md_out(const char *fmt, ...);
/* Detail on stdout, only with --verbose. */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
void md_verbose(const char *fmt, ...);
/* The run's final one-line summary on stdout: printed with --quiet too. */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
void md_summary(const char *fmt, ...);
/* Warning on stderr ("mpsdiag: warning: ..."), suppressed by --quiet. */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
void md_warn(const char *fmt, ...);

/* Writes what md_out left without a newline (lines are wrapped to 100
 * columns once whole: core/wrap.h). */
void md_log_flush(void);

/* Progress lines: core/progress.h (md_out and friends clear one first). */

/* "s" unless n is 1: "%d worker%s", n, md_s(n). */
static inline const char *md_s(long long n) { return n == 1 ? "" : "s"; }

/* Section banner for the text report ("== System ==="). */
void md_section(const char *title);

/* Integer with thousands separators ("25,557,032") into buf. */
const char *md_fmt_thousands(long long v, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
