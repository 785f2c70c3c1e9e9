/* stage_model.c - the model stage: build the model from its config, print
 * the per-layer summary. Not built yet: lands with issue 3. */
#include "cli/job.h"
#include "core/log.h"

const char *md_nn_pending(void) { return "models and kernels are not built yet (issue 3)"; }

md_status md_stage_model(md_job *job)
{
    (void)job;
    md_section("Model");
    md_out("  not built yet: model configs, kernels and the layer summary land with issue 3\n");
    return MD_OK;
}

void md_stage_model_cleanup(md_job *job) { (void)job; }
