/* stage_data.c - the data stage: open the dataset, split, start the loader.
 * Not built yet: lands with issue 4. */
#include "cli/job.h"
#include "core/log.h"

const char *md_data_pending(void) { return "datasets and the loader are not built yet (issue 4)"; }

md_status md_stage_data(md_job *job)
{
    (void)job;
    md_section("Data");
    md_out("  not built yet: datasets and the loader land with issue 4\n");
    return MD_OK;
}

void md_stage_data_cleanup(md_job *job) { (void)job; }
