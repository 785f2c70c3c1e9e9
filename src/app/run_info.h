/* run_info.h - who ran what: the run's id, its command line, and the
 * resolved options as a run config with a digest. They make the report's
 * "run" object and the header line that starts each run's lines in a
 * --metrics file, so a report, its metrics and a rerun can be matched.
 *
 * The digest is FNV-1a (64 bit) of the compact JSON text of the config as
 * mpsdiag writes it, keys sorted ("fnv1a64:" and 16 hex digits): equal digests mean equal
 * resolved options. It is a fingerprint for telling runs apart, not a
 * cryptographic hash.
 */
#ifndef MD_RUN_INFO_H
#define MD_RUN_INFO_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "app/job.h"

#define MD_METRICS_SCHEMA_VERSION 1

/* Remembers the command line for the report (borrowed: argv must outlive the
 * run, as main's does). Without a call the command line is empty. */
void md_run_info_set_command_line(int argc, char **argv);

/* This process's run id, made on the first call: UTC time, pid and random
 * bits ("20250131T120000Z-4242-9f3a1c2b"). Never NULL. */
const char *md_run_info_id(void);

/* FNV-1a, 64 bit. */
uint64_t md_run_info_fnv1a64(const void *data, size_t n);

/* The resolved options as a run config (md_options_to_json) with what the
 * job resolved (device, CPU threads, learning rate) filled in and the output
 * destinations (report, html, metrics, checkpoint_dir) left out. Caller owns. */
cJSON *md_run_info_config(const md_job *job);

/* {"id", "command_line", "config_digest", "config"} for the job's options
 * now. Caller owns; NULL when out of memory. */
cJSON *md_run_info_json(const md_job *job);

/* The --metrics header line for a "run" object made by md_run_info_json:
 * kind "header", schema_version, run_id, started_at, tool, command_line,
 * config_digest, config. Caller owns. */
cJSON *md_run_info_metrics_header(const cJSON *run);

#endif
