/* stage_train.c - the training stage: runs the trainer over the job's model
 * and data and puts report["training"] into the job's report. */
#include "app/job.h"
#include "core/log.h"
#include "train/trainer.h"

md_status md_stage_train(md_job *job)
{
    const md_options *o = job->opts;
    int train = !o->benchmark_only && o->epochs > 0;
    if (!o->dump_grads[0] && !o->dump_logits[0] && !train) return MD_OK;
    md_section("Training");
    if (!job->model || !job->data) {
        md_out("  skipped: %s\n", !job->model ? "no model was built" : "no dataset was opened");
        return MD_OK;
    }
    md_trainer *t = NULL;
    md_status st = md_trainer_create(job, &t);
    if (st != MD_OK) return st;
    job->trainer = t;
    if (o->dump_grads[0]) return md_trainer_dump_grads(t, o->dump_grads);
    if (train) {
        st = md_trainer_run(t);
        md_stage_data_refresh(job);
        cJSON *r = md_trainer_take_report(t);
        if (r) cJSON_AddItemToObject(job->report, "training", r);
    }
    /* the weights training ended with (those of last.safetensors), or the initial ones */
    if (st == MD_OK && o->dump_logits[0]) st = md_trainer_dump_logits(t, o->dump_logits);
    return st;
}

void md_stage_train_cleanup(md_job *job)
{
    md_trainer_free(job->trainer);
    job->trainer = NULL;
}
