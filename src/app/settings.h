/* settings.h - the settings that change a run's result, each with its value
 * and reason: report.settings (an array of {name, value, why}) and the text
 * Settings section. The device, policy and data stages record their own as
 * they decide them (md_job_setting); md_settings_record_run adds the rest
 * (seed, optimizer, learning rate and schedule, warm-up, momentum, Nesterov,
 * weight decay and what it applies to, gradient clipping, label smoothing,
 * dropout, augmentation, compile mode, epochs, steps, samples, validation
 * split) and the report's "run" object (run_info.h).
 */
#ifndef MD_SETTINGS_H
#define MD_SETTINGS_H

#include <cjson/cJSON.h>

#include "app/job.h"

/* After the model and data stages (or after a failure: whatever of them ran;
 * job->model and job->data may be NULL). Needs the device open; does nothing
 * without it. Replaces job->report's "run" object. */
void md_settings_record_run(md_job *job);

/* The Settings section: name, value and reason of each setting from index
 * `from` on, the reason wrapped to keep lines within 100 columns. */
void md_settings_print(const cJSON *settings, int from);

#endif
