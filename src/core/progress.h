/* progress.h - one progress line on a terminal, redrawn in place.
 *
 * A phase that can take more than a second says what it is doing, how far it
 * is, how fast it goes and when it will be done:
 *
 *     int pg = md_progress_begin("training steps", 50, "steps");
 *     for (i = 0; i < 50; i++) { ...; md_progress_update(i + 1); }
 *     md_progress_end(pg);
 *
 * draws (at most 10 times a second, at most 100 columns, fewer on a narrower
 * terminal)
 *
 *     benchmark > training steps [#######.............] 18/50 steps  24.1 steps/s  ETA 0:01
 *
 * Phases nest up to MD_PROGRESS_DEPTH deep: an outer phase ("model 2/4")
 * prefixes the line of the inner one, and once one of its items is done the
 * line also gives the outer phase's remaining time ("all ~3:10").
 *
 * Drawn only when md_progress_enabled(): stdout is a terminal, NO_COLOR is
 * unset, TERM is not "dumb" and the verbosity is not --quiet. Otherwise the
 * calls only keep the bookkeeping (cheap), and nothing is written. md_out,
 * md_warn and md_section clear the line before they print; the next update
 * draws it again.
 *
 * Not thread-safe: called from the main thread only.
 */
#ifndef MD_PROGRESS_H
#define MD_PROGRESS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MD_PROGRESS_DEPTH 6

/* True when progress lines are drawn (see above). */
int md_progress_enabled(void);

/* Starts a phase inside the current one: `label` says what it does (copied,
 * cut to 64 bytes), `total` how many `unit`s it will take (<= 0: not known;
 * unit NULL: "steps"). Returns a token for md_progress_end (0 when the nesting
 * is too deep: the phase is then not shown, and its calls change nothing). */
int md_progress_begin(const char *label, double total, const char *unit);
/* Ends the phase of `token` and every phase begun inside it (so an error path
 * that skipped an inner end cannot leave it behind). The line is cleared when
 * no phase is left, else redrawn for the outer one. token 0: no-op. */
void md_progress_end(int token);

/* The innermost phase: `done` units finished so far (drawn when 0.1 s passed
 * since the last drawing). */
void md_progress_update(double done);
/* Renames the innermost phase ("batch sweep: batch 64"). */
void md_progress_label(const char *label);
/* Sets the innermost phase's total (when it becomes known on the way). */
void md_progress_total(double total);
/* Text after the counts, e.g. "loss 0.4312" (NULL or "": none; copied). */
void md_progress_note(const char *note);
/* A rate shown instead of the measured done/s (e.g. samples/s of a step
 * counter); per_s <= 0: the measured one again. */
void md_progress_rate(double per_s, const char *unit);
/* The phase stops after `seconds` at the latest (a timing budget): the ETA
 * is at most what is left of it. */
void md_progress_budget(double seconds);
/* The rate and the ETA count from here (done so far excluded), e.g. after the
 * steps a resumed epoch skipped. */
void md_progress_rebase(void);

/* Clears the line if one is drawn (the phases stay). */
void md_progress_clear(void);
/* Same as md_progress_clear, then flushes stdout. */
void md_progress_done(void);

/* The line as it would be drawn at time `now` (md_now() seconds) in `width`
 * columns, into buf (NUL-terminated, no "\r"); returns its length. For tests
 * and for the drawing itself; works whether or not drawing is enabled. */
size_t md_progress_render(char *buf, size_t n, int width, double now);
/* Drops every phase (tests). */
void md_progress_reset(void);

#ifdef __cplusplus
}
#endif
#endif
