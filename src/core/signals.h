/* signals.h - Ctrl-C and SIGTERM: the first asks the run to stop at the next
 * safe point (every long loop checks it: model loading, opening the dataset,
 * training steps, validation, test scoring, the benchmark; the run says where
 * it stopped and exits 130, the training loop after writing a checkpoint);
 * the second exits at once, except while a checkpoint is being written
 * (md_signals_hold). */
#ifndef MD_SIGNALS_H
#define MD_SIGNALS_H

#include "core/status.h"

void md_signals_install(void);
/* md_signals_install for a rank of a job started by an MPI launcher: it
 * also takes SIGUSR2 (which mpirun forwards to every rank at once) as a stop
 * request, and a second signal counts as the same request (mpirun and the
 * terminal may both pass one on); only a third exits at once. */
void md_signals_install_rank(void);
/* on = 1 while a checkpoint is written: a signal that would exit at once
 * waits until on = 0 (the run then stops as asked; one more signal during
 * the write still exits at once). */
void md_signals_hold(int on);
/* Number of SIGINT/SIGTERM received (0 = keep going). */
int md_interrupted(void);
/* For tests: pretend a signal arrived (n > 0) or clear (n = 0). */
void md_interrupt_set(int n);

/* MD_OK while no signal arrived; else MD_ERR_INTERRUPTED with the message
 * "interrupted <where>" (printf-style), for the loops that check it. */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
md_status md_interrupt_check(const char *where_fmt, ...);

/* Test hook (docs/robustness.md): when the environment variable
 * MPSDIAG_TEST_INTERRUPT names `phase` ("model", "data", "validation",
 * "test", "benchmark"; ":TERM" after it for SIGTERM), the process sends
 * itself SIGINT once, as the phase's loop starts, so that tests reach every
 * phase without racing a timer. No effect otherwise. */
void md_interrupt_hook(const char *phase);

#endif
