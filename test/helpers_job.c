/* helpers_job.c - a job run in the test process (see helpers_job.h). */
#include "helpers_job.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/signals.h"
#include "helpers.h"
#include "nn/model.h"

void th_job_open(struct th_job *r, const char *args)
{
    memset(r, 0, sizeof *r);
    char buf[8192];
    char *argv[64];
    int argc = th_argv(buf, sizeof buf, args, argv);
    md_options_defaults(&r->o);
    cr_assert_eq(md_options_parse(&r->o, argc, argv), MD_OK, "%s", md_errmsg());
    md_log_init(MD_QUIET);
    md_interrupt_set(0);
    r->job.opts = &r->o;
    r->job.report = cJSON_CreateObject();
    r->job.settings = cJSON_AddArrayToObject(r->job.report, "settings");
    struct md_device_opts dopts = {.threads = 1};
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, &dopts, &r->job.dev), MD_OK, "%s", md_errmsg());
}

int th_job_force_fp16;

void th_job_run(struct th_job *r, const char *args, long long interrupt_after, int force_pipeline)
{
    th_job_open(r, args);
    md_status st = md_stage_precision_plan(&r->job); /* as md_job_run: before the policy */
    if (st == MD_OK) st = md_stage_policy(&r->job);
    if (th_job_force_fp16) r->job.opts->precision = MD_PREC_FP16; /* the CPU policy keeps fp32 */
    if (st == MD_OK) st = md_stage_model(&r->job);
    if (st == MD_OK) st = md_stage_data(&r->job);
    if (st == MD_OK) st = md_stage_train_create(&r->job, &r->t);
    if (st == MD_OK) {
        md_trainer_interrupt_after(r->t, interrupt_after);
        if (force_pipeline) md_trainer_force_pipeline(r->t);
        st = md_trainer_run(r->t);
        r->training = md_trainer_take_report(r->t);
    }
    r->st = st;
    snprintf(r->err, sizeof r->err, "%s", md_errmsg());
}

float *th_download_flat(md_model *m, const float *dev_buf)
{
    size_t n = md_model_nparams(m);
    float *h = malloc(n * sizeof *h);
    cr_assert_eq(md_dev_download(md_model_device(m), h, dev_buf, n * sizeof *h), MD_OK);
    cr_assert_eq(md_dev_sync(md_model_device(m)), MD_OK);
    return h;
}

void th_job_end(struct th_job *r)
{
    md_trainer_free(r->t);
    md_stage_data_cleanup(&r->job);
    md_stage_model_cleanup(&r->job);
    md_device_close(r->job.dev);
    cJSON_Delete(r->job.report);
    cJSON_Delete(r->training);
    md_interrupt_set(0);
}

struct th_main_run th_job_main(const char *dir, const char *args)
{
    struct th_main_run r = {0};
    char report[4200], text[4200], full[8192], buf[8300];
    snprintf(report, sizeof report, "%s/report.json", dir);
    snprintf(text, sizeof text, "%s/stdout.txt", dir);
    snprintf(full, sizeof full, "%s --report %s", args, report);
    char *argv[64];
    int argc = th_argv(buf, sizeof buf, full, argv);
    md_options o;
    md_options_defaults(&o);
    cr_assert_eq(md_options_parse(&o, argc, argv), MD_OK, "%s", md_errmsg());
    md_log_init(MD_NORMAL);
    fflush(stdout);
    cr_assert(freopen(text, "w", stdout), "cannot capture stdout");
    r.st = md_job_run(&o);
    fflush(stdout);
    r.text = th_slurp(text, NULL);
    cr_assert(r.text, "no captured stdout");
    r.report = th_load_json(report);
    return r;
}
