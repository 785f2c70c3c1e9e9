/* folds.h - k-fold cross-validation in one run (--folds K --fold all): each
 * fold trained in turn, with the same settings and a fresh model, then a
 * per-fold table and the mean and standard deviation of the validation
 * figures.
 *
 * Each fold runs the ordinary stages (model, data, train) into a report
 * object of its own, which lands in report.folds.runs; its checkpoints go to
 * --checkpoint-dir/fold-<i>/ and its --metrics lines carry "fold": i in
 * their header. The single-fold run (--fold I) is the ordinary job.
 * docs/folds.md has the layout and the definitions.
 */
#ifndef MD_FOLDS_H
#define MD_FOLDS_H

#include "app/job.h"

/* --folds K (K >= 2) with --fold all. */
int md_folds_wanted(const md_options *o);

/* Trains every fold, prints the table and fills report.folds. A fold that
 * fails for a reason of its own (out of memory, NaN loss) is recorded with
 * its error and the next one runs; anything else (a config error, Ctrl-C)
 * ends the run. Returns the first failure, after the summary. */
md_status md_folds_run(md_job *job);

/* Mean and population standard deviation (ddof 0, numpy's default) of the
 * n values v; NaN values are left out; *used: how many counted (0: both NaN). */
void md_folds_mean_std(const double *v, int n, double *mean, double *sd, int *used);

#endif
