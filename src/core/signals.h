/* signals.h - Ctrl-C and SIGTERM: the first asks the run to stop at the next
 * safe point (the training loop checkpoints and exits 130); the second exits
 * at once. */
#ifndef MD_SIGNALS_H
#define MD_SIGNALS_H

void md_signals_install(void);
/* Number of SIGINT/SIGTERM received (0 = keep going). */
int md_interrupted(void);
/* For tests: pretend a signal arrived (n > 0) or clear (n = 0). */
void md_interrupt_set(int n);

#endif
