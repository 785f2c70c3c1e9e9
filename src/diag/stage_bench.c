/* stage_bench.c - benchmark, recommendations and extra outputs.
 * Not built yet: lands with issue 6. */
#include "cli/job.h"
#include "core/log.h"

const char *md_bench_pending(void) { return "benchmarks and the HTML report are not built yet (issue 6)"; }

md_status md_stage_bench(md_job *job)
{
    if (!job->opts->benchmark && !job->opts->benchmark_only) return MD_OK;
    md_section("Benchmark");
    md_out("  not built yet: benchmarks land with issue 6\n");
    return MD_OK;
}

md_status md_stage_recommend(md_job *job)
{
    (void)job;
    return MD_OK;
}

md_status md_stage_outputs(md_job *job)
{
    (void)job;
    return MD_OK;
}
