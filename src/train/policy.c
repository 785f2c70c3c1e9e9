/* policy.c - per-device defaults and their reasons (the seeds' rules: AMP per
 * device, workers, pinned memory, channels-last, compile). Not built yet:
 * lands with issue 5. */
#include "cli/job.h"

md_status md_stage_policy(md_job *job)
{
    (void)job;
    return MD_OK;
}
