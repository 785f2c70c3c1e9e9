/* job.h - one run of mpsdiag: the stages and the context they share.
 *
 *   options -> system info -> device -> model -> data -> train -> benchmark
 *           -> recommendations -> report files
 *
 * Each stage lives in its area's folder and owns its part of the context.
 * Stages print their text section as they go (md_section + aligned tables)
 * and add their figures to the JSON report (ctx->report, see
 * docs/report-schema.md). A stage returns MD_OK, or an error that ends the run.
 */
#ifndef MD_JOB_H
#define MD_JOB_H

#include <cjson/cJSON.h>

#include "backend/backend.h"
#include "app/options.h"

struct md_model;    /* src/nn */
struct md_data;     /* src/data */
struct md_trainer;  /* src/train */

typedef struct md_job {
    md_options *opts;
    cJSON *report;          /* root of the JSON report; owned by the job */
    const md_backend *backend;
    int device_index;
    char device_why[512];   /* why this device was chosen */
    const char *fallback_why; /* why the CPU fallback is on or off (static text) */
    md_device *dev;
    struct md_model *model;     /* owned by the model stage */
    struct md_data *data;       /* owned by the data stage */
    struct md_trainer *trainer; /* owned by the train stage */
    cJSON *settings;        /* report.settings: each applied setting with its reason */
    double t_start;
    int no_layer_table;     /* the model stage prints no per-layer table (the diagnostics run
                               without --verbose) */
    double plan_loss_scale; /* --precision-plan: the initial loss scale (0: the trainer's) */
} md_job;

/* Runs the whole job; returns the status that decides the exit code. */
md_status md_job_run(md_options *opts);

/* Records a setting the run applied and why ("num_workers": 0, "MPS works
 * better with single-threaded loading"); printed in the Settings section.
 * Recording a name again (a later stage revising it) replaces its entry. */
void md_job_setting(md_job *job, const char *name, const char *value, const char *why);
/* The recorded setting `name` ({"name", "value", "why"}), or NULL. Borrowed. */
cJSON *md_job_find_setting(const md_job *job, const char *name);

/* Stages, each in its own file. Cleanup functions free what the stage owns;
 * they accept a job whose stage never ran. */
/* Resolves per-device defaults (batch size, precision/AMP, workers, pinned
 * memory, channels-last, compile) into job->opts, each recorded with
 * md_job_setting and its reason. Runs right after the device opens. */
md_status md_stage_policy(md_job *job);  /* app/policy.c      */
md_status md_stage_model(md_job *job);   /* app/stage_model.c */
void md_stage_model_cleanup(md_job *job);
md_status md_stage_data(md_job *job);    /* app/stage_data.c  */
void md_stage_data_cleanup(md_job *job);
/* Brings report.data's skipped files up to date (samples the loaders
 * skipped after the data stage) and prints them when there are new ones. */
void md_stage_data_refresh(md_job *job); /* app/stage_data.c */
md_status md_stage_train(md_job *job);   /* app/stage_train.c */
void md_stage_train_cleanup(md_job *job);
/* The trainer of the train stage, for the job's model, data and options
 * (app/resolve.c); tests drive it themselves. */
md_status md_stage_train_create(md_job *job, struct md_trainer **out);
md_status md_stage_bench(md_job *job);   /* app/stage_bench.c  */
/* The doctor (app/stage_doctor.c, docs/doctor.md): --check and/or
 * --precision-audit instead of data, training and benchmark; a failed check
 * is MD_ERR_NUMERIC. md_stage_precision_plan reads --precision-plan FILE for
 * a training run before the policy (precision, loss scale; warns about the
 * entries it cannot honour); md_stage_precision_plan_setting records it
 * after the policy. */
int md_doctor_wanted(const md_options *o);
md_status md_stage_doctor(md_job *job);
md_status md_stage_precision_plan(md_job *job);
void md_stage_precision_plan_setting(md_job *job);
md_status md_stage_recommend(md_job *job); /* app/stage_bench.c */
/* The recommendations from job->report's own benchmark, into
 * job->report["recommendations"] (the diagnostics run calls it with a model's
 * entry as job->report); the Recommendations section when `print`. `system`:
 * report.system when job->report lacks it (NULL: job->report's). Returns
 * how many. */
int md_recommend_report(md_job *job, const cJSON *system, int print);
/* One entry of a "recommendations" array as the text shows it. */
void md_recommendation_print(const cJSON *rec, int indent);
/* --ci: job->report["ci"] from job->report's benchmark and training against
 * --expect-min-throughput and --expect-max-loss; `msg` receives what missed
 * ("" when every threshold is met); the CI section when `print`. */
void md_ci_check(md_job *job, char *msg, size_t msg_n, int print);
/* Writes --html and --junit; runs also after a failed stage (the report's
 * status says how the run ended). */
md_status md_stage_outputs(md_job *job);   /* app/stage_bench.c: --html, --junit */
/* --ci: the small model, synthetic data, a few steps, unless given. */
void md_stage_ci_defaults(md_job *job);    /* app/stage_bench.c */

#endif
