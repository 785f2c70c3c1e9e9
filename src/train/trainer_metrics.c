/* trainer_metrics.c - what the trainer writes down: report["training"] and
 * its curves, and the --metrics JSON lines (trainer_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/run_info.h"
#include "core/log.h"
#include "train/trainer_impl.h"

const char *const md_trainer_curve_keys[] = {"epoch", "train_loss", "train_acc", "val_loss", "val_acc",
                                             "lr", "samples_per_s", "epoch_time_s", NULL};

void md_trainer_report_init(md_trainer *t)
{
    t->report = cJSON_CreateObject();
    t->curves = cJSON_AddObjectToObject(t->report, "curves");
    for (int i = 0; md_trainer_curve_keys[i]; i++) cJSON_AddArrayToObject(t->curves, md_trainer_curve_keys[i]);
    t->diags = cJSON_AddArrayToObject(t->report, "diagnostics");
}

/* The line that starts this run's lines in the --metrics file: the run id,
 * command line and config of the report's "run" object (run_info.h), so
 * runs appended to one file can be told apart. */
static md_status metrics_header(md_trainer *t)
{
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(t->job->report, "run");
    cJSON *own = run ? NULL : md_run_info_json(t->job);
    cJSON *h = md_run_info_metrics_header(run ? run : own);
    char *s = h ? cJSON_PrintUnformatted(h) : NULL;
    cJSON_Delete(own);
    cJSON_Delete(h);
    if (!s) return md_errf(MD_ERR_OOM, "--metrics %s: out of memory for the header line", t->o->metrics);
    int bad = fprintf(t->metrics, "%s\n", s) < 0 || fflush(t->metrics) != 0;
    cJSON_free(s);
    if (bad) return md_errf(MD_ERR_IO, "--metrics %s: cannot write: %s", t->o->metrics, strerror(errno));
    return MD_OK;
}

md_status md_trainer_metrics_open(md_trainer *t)
{
    t->metrics = fopen(t->o->metrics, "a");
    if (!t->metrics)
        return md_errf(MD_ERR_IO, "--metrics %s: cannot open for appending: %s", t->o->metrics, strerror(errno));
    return metrics_header(t);
}

void md_trainer_metrics_line(md_trainer *t, const char *kind, double loss, double acc, double vloss, double vacc,
                         double lr, double sps, double secs)
{
    if (!t->metrics) return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", kind);
    cJSON_AddStringToObject(o, "run_id", md_run_info_id());
    cJSON_AddNumberToObject(o, "epoch", t->epoch + 1);
    cJSON_AddNumberToObject(o, "step", (double)t->global_step);
    cJSON_AddNumberToObject(o, "train_loss", loss);
    cJSON_AddNumberToObject(o, "train_acc", acc);
    if (vloss >= 0) {
        cJSON_AddNumberToObject(o, "val_loss", vloss);
        cJSON_AddNumberToObject(o, "val_acc", vacc);
    }
    cJSON_AddNumberToObject(o, "lr", lr);
    cJSON_AddNumberToObject(o, "samples_per_s", sps);
    cJSON_AddNumberToObject(o, "time_s", secs);
    cJSON_AddNumberToObject(o, "loss_scale", t->scaler.scale);
    char *s = cJSON_PrintUnformatted(o);
    if (s) {
        /* A failed write (disk full) does not stop the training: no more
         * lines are written, and the run ends with the error (exit 3). */
        errno = 0;
        int bad = fprintf(t->metrics, "%s\n", s) < 0;
        if (fflush(t->metrics) != 0 || ferror(t->metrics)) bad = 1;
        if (bad) {
            snprintf(t->metrics_err, sizeof t->metrics_err, "--metrics %s: write failed: %s", t->o->metrics,
                     errno ? strerror(errno) : "I/O error");
            md_warn("%s; no more metrics lines are written, and the run will end with this error", t->metrics_err);
            fclose(t->metrics);
            t->metrics = NULL;
        }
        cJSON_free(s);
    }
    cJSON_Delete(o);
}
