/* sub_run.c - see sub_run.h. */
#include "app/sub_run.h"

#include "core/log.h"
#include "core/mem.h"
#include "core/timer.h"

int md_sub_run_begin(md_job *job, cJSON *sub, cJSON *settings)
{
    job->report = sub;
    job->settings = cJSON_Duplicate(settings, 1);
    cJSON_AddItemToObject(sub, "settings", job->settings);
    md_dev_reset_peak(job->dev);
    return cJSON_GetArraySize(job->settings);
}

void md_sub_run_memory(md_job *job, cJSON *sub, double t0)
{
    struct md_mem_stats ms;
    md_dev_mem_stats(job->dev, &ms);
    cJSON *m = cJSON_AddObjectToObject(sub, "memory");
    cJSON_AddNumberToObject(m, "device_peak_bytes", (double)ms.peak);
    cJSON_AddNumberToObject(m, "host_peak_rss_bytes", (double)md_peak_rss_bytes());
    cJSON_AddNumberToObject(sub, "duration_s", md_now() - t0);
}

void md_sub_run_status(cJSON *sub, md_status st, const char *what)
{
    cJSON *status = cJSON_AddObjectToObject(sub, "status");
    cJSON_AddStringToObject(status, "result", md_status_name(st));
    if (st != MD_OK) {
        cJSON_AddStringToObject(status, "error", md_errmsg());
        md_out("❌ %s failed: %s\n", what, md_errmsg());
    } else {
        cJSON_AddNullToObject(status, "error");
    }
}

void md_sub_run_cleanup(md_job *job)
{
    /* the stages' cleanups accept a job whose stage never ran */
    md_stage_train_cleanup(job);
    md_stage_data_cleanup(job);
    md_stage_model_cleanup(job);
}
