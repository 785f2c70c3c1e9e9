/* stage_train.c - the training stage: runs the trainer over the job's model
 * and data and puts report["training"] into the job's report. */
#include "app/job.h"
#include "app/resolve.h"
#include "app/run_info.h"
#include "core/log.h"
#include "train/trainer.h"

/* ---- the trainer's hooks: what it decided goes into the job's settings and report ---- */

static void hook_setting(void *ctx, const char *name, const char *value, const char *why)
{
    md_job_setting(ctx, name, value, why);
}

/* The --metrics header from the report's "run" object (or one made now). */
static cJSON *hook_metrics_header(void *ctx)
{
    md_job *job = ctx;
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(job->report, "run");
    cJSON *own = run ? NULL : md_run_info_json(job);
    cJSON *h = md_run_info_metrics_header(run ? run : own);
    cJSON_Delete(own);
    /* k-fold: the lines that follow belong to this fold (--fold all appends every fold's to one file) */
    if (h && job->opts->folds > 1 && job->opts->fold >= 0) cJSON_AddNumberToObject(h, "fold", job->opts->fold);
    return h;
}

static void hook_failed_report(void *ctx, cJSON *training)
{
    md_job *job = ctx;
    if (job->report && !cJSON_GetObjectItemCaseSensitive(job->report, "training"))
        cJSON_AddItemToObject(job->report, "training", training);
    else
        cJSON_Delete(training);
}

md_status md_stage_train_create(md_job *job, md_trainer **out)
{
    struct md_train_opts to;
    md_resolve_train(job->opts, &to);
    to.t_start = job->t_start; /* a --time-budget counts from the run's start */
    to.init_loss_scale = job->plan_loss_scale;
    struct md_train_hooks hooks = {
        .ctx = job,
        .setting = hook_setting,
        .metrics_header = hook_metrics_header,
        .failed_report = hook_failed_report,
        .run_id = md_run_info_id(),
    };
    return md_trainer_create(&to, &hooks, job->dev, job->model, job->data, out);
}

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
    md_status st = md_stage_train_create(job, &t);
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
