/* stage_profile.h - the per-layer profile, memory side by side, the leak
 * check and energy (docs/doctor.md), from the main benchmark's measurement:
 * report.profile, the Profile section of the text, the recommendations'
 * inputs and the leak check's exit status. Called by the benchmark stage
 * (stage_bench.c). */
#ifndef MD_STAGE_PROFILE_H
#define MD_STAGE_PROFILE_H

#include "app/job.h"
#include "diag/bench.h"
#include "diag/recommend.h"

/* --profile or --leak-check without --benchmark (or --epochs): measure
 * without training, as --benchmark-only. Right after the --ci defaults. */
void md_profile_defaults(md_job *job);
/* The flags that ask for a benchmark through the profile. */
int md_profile_wants_bench(const md_options *o);
/* The main measurement's energy and leak-check settings. */
void md_profile_setup(const md_options *o, struct md_bench_setup *s);
/* The Benchmark section's energy line, beside the throughput. */
void md_profile_energy_line(const struct md_bench_result *r);
/* report.profile (always, after the main benchmark) and, with --profile or
 * a leak check, the Profile section. `peak_gflops`/`peak_basis`: the
 * benchmark's FLOP/s reference (0/NULL: none). */
md_status md_stage_profile(md_job *job, md_device *dev, const struct md_bench_result *r, double peak_gflops,
                           const char *peak_basis);
/* The profile's rows and the leak verdict for the recommendations. */
void md_profile_rec_inputs(const cJSON *report, struct md_rec_in *in);
/* MD_ERR_THRESHOLD (exit 7) with the growth when the leak check flagged a
 * leak and --leak-check or --ci asked for a verdict; else MD_OK. */
md_status md_profile_leak_status(md_job *job);

#endif
