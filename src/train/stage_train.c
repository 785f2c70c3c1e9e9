/* stage_train.c - the training stage. Not built yet: lands with issue 5. */
#include "cli/job.h"
#include "core/log.h"

const char *md_train_pending(void) { return "training is not built yet (issue 5)"; }

md_status md_stage_train(md_job *job)
{
    if (job->opts->benchmark_only || job->opts->epochs == 0) return MD_OK;
    md_section("Training");
    md_out("  not built yet: training and validation land with issue 5\n");
    return MD_OK;
}

void md_stage_train_cleanup(md_job *job) { (void)job; }
