/* diagnostics.h - the MPS guides' "comprehensive model diagnostics" run: several
 * models, one after another, on one device, then a comparison.
 *
 * Each model runs the ordinary stages (model, data, train, benchmark) into a
 * report object of its own, which lands in report["models"]; the figures that
 * matter for choosing between them (parameters, accuracy, samples/s, peak
 * memory) go into a text table and report["comparison"]. The single-model
 * job (md_job_run without it) is unchanged.
 */
#ifndef MD_DIAGNOSTICS_H
#define MD_DIAGNOSTICS_H

#include "app/job.h"

/* The MPS guides' pair, compared when the run is asked for without --models. */
#define MD_DIAGNOSTICS_DEFAULT_MODELS "base_multi_channel_large,multi_channel_resnet50"
/* Where the MPS guides keep CIFAR-100 (the binary version). */
#define MD_DIAGNOSTICS_CIFAR_DIR "data/cifar-100"

/* Is this a diagnostics run? Yes when --models is given, or when neither
 * --model nor --config is given and --data-dir names the MPS guides' folder
 * (cifar-100 or cifar100), as in the MPS guides' `--data-dir data/cifar-100`. */
int md_diagnostics_wanted(const md_options *o);

/* Runs every model of --models (or the default pair) through the stages and
 * prints and records the comparison. A model that fails for a reason of its
 * own (out of memory, NaN loss, an op the device lacks) is recorded with its
 * error and the run goes on; anything else (a config error, a missing
 * dataset, Ctrl-C) ends the run. Returns the first failure, after the
 * comparison has been written. */
md_status md_diagnostics_run(md_job *job);

#endif
