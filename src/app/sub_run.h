/* sub_run.h - the bookkeeping of one run among several in one job (a model
 * of the diagnostics run, a fold of cross-validation): each writes into a
 * report object of its own (`sub`) with its own copy of the run's settings,
 * and records its peak memory, duration and status alike. */
#ifndef MD_SUB_RUN_H
#define MD_SUB_RUN_H

#include <cjson/cJSON.h>

#include "app/job.h"

/* Points the job's report at `sub` and its settings at a copy of `settings`
 * (added to `sub`), resets the device's peak memory. Returns how many
 * settings the copy holds (already shown). */
int md_sub_run_begin(md_job *job, cJSON *sub, cJSON *settings);

/* sub["memory"] (device and host peaks) and sub["duration_s"] since t0. */
void md_sub_run_memory(md_job *job, cJSON *sub, double t0);

/* sub["status"]; on failure prints "❌ <what> failed: <message>". */
void md_sub_run_status(cJSON *sub, md_status st, const char *what);

/* Ends the stages' state, so the next run starts from a clean job. */
void md_sub_run_cleanup(md_job *job);

#endif
