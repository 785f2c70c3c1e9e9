/* folds.c - --folds K --fold all: every fold through the ordinary stages, one
 * after another, then the per-fold table and mean +- std (folds.h).
 *
 * As in the diagnostics run, the job's report is the fold's own object for
 * the length of one fold, so each stage's section appears per fold without
 * the stages knowing about this loop.
 */
#define _POSIX_C_SOURCE 200809L
#include "app/folds.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "app/settings.h"
#include "app/sub_run.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/timer.h"

int md_folds_wanted(const md_options *o) { return o->folds > 1 && o->fold < 0; }

void md_folds_mean_std(const double *v, int n, double *mean, double *sd, int *used)
{
    double s = 0;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) {
            s += v[i];
            m++;
        }
    *used = m;
    if (m == 0) {
        *mean = *sd = (double)NAN;
        return;
    }
    double mu = s / m, q = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) q += (v[i] - mu) * (v[i] - mu);
    *mean = mu;
    *sd = sqrt(q / m);
}

/* ---- the figures of one fold, from its report ----------------------------------- */

/* The validation figures compared across folds; regression ones from
 * training.regression_metrics (original units), the loss and accuracy from
 * the last epoch's curves. */
enum { FV_LOSS, FV_ACC, FV_R2, FV_MAE, FV_RMSE, FV_COUNT };
static const char *const fv_key[FV_COUNT] = {"val_loss", "val_acc", "r2", "mae", "rmse"};

static double last_of(const cJSON *arr)
{
    const cJSON *v = cJSON_GetArrayItem(arr, cJSON_GetArraySize(arr) - 1);
    return cJSON_IsNumber(v) ? v->valuedouble : (double)NAN;
}

static double num_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : (double)NAN;
}

static void fold_figures(const cJSON *sub, double v[FV_COUNT])
{
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(sub, "training");
    const cJSON *cu = cJSON_GetObjectItemCaseSensitive(tr, "curves");
    const cJSON *rm = cJSON_GetObjectItemCaseSensitive(tr, "regression_metrics");
    v[FV_LOSS] = last_of(cJSON_GetObjectItemCaseSensitive(cu, "val_loss"));
    v[FV_ACC] = last_of(cJSON_GetObjectItemCaseSensitive(cu, "val_acc"));
    v[FV_R2] = num_of(rm, "r2");
    v[FV_MAE] = num_of(rm, "mae");
    v[FV_RMSE] = num_of(rm, "rmse");
}

static cJSON *num_or_null(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

/* ---- one fold ------------------------------------------------------------------ */

static int fold_local(md_status st) { return st == MD_ERR_OOM || st == MD_ERR_NUMERIC; }

/* `base`: the options as the run started; every fold starts from them
 * (stages resolve automatic values into the options). */
static md_status run_fold(md_job *job, const md_options *base, int i, cJSON *runs)
{
    md_options *o = job->opts;
    *o = *base;
    o->fold = i;
    if (base->checkpoint_dir[0])
        snprintf(o->checkpoint_dir, sizeof o->checkpoint_dir, "%s/fold-%d", base->checkpoint_dir, i);

    cJSON *root = job->report, *root_settings = job->settings;
    cJSON *sub = cJSON_CreateObject();
    cJSON_AddNumberToObject(sub, "fold", i);
    if (o->checkpoint_dir[0]) cJSON_AddStringToObject(sub, "checkpoint_dir", o->checkpoint_dir);
    int shown = md_sub_run_begin(job, sub, root_settings);
    double t0 = md_now();

    char title[64];
    snprintf(title, sizeof title, "Fold %d of %d (folds count from 0)", i, base->folds);
    md_section(title);
    md_status st = md_stage_model(job);
    if (st == MD_OK) st = md_stage_data(job);
    if (st == MD_OK) {
        md_settings_record_run(job);
        md_settings_print(job->settings, shown);
        st = md_stage_train(job);
    }
    if (!cJSON_GetObjectItemCaseSensitive(sub, "run")) md_settings_record_run(job);

    md_sub_run_memory(job, sub, t0);
    double v[FV_COUNT];
    fold_figures(sub, v);
    cJSON *fig = cJSON_AddObjectToObject(sub, "metrics");
    for (int k = 0; k < FV_COUNT; k++) cJSON_AddItemToObject(fig, fv_key[k], num_or_null(v[k]));
    char what[32];
    snprintf(what, sizeof what, "fold %d", i);
    md_sub_run_status(sub, st, what);

    md_sub_run_cleanup(job);
    job->report = root;
    job->settings = root_settings;
    *o = *base;
    cJSON_AddItemToArray(runs, sub);
    return st;
}

/* ---- the summary ----------------------------------------------------------------- */

static const char *cell(double v, const char *fmt, char *buf, size_t n)
{
    if (!isfinite(v)) return "-";
    snprintf(buf, n, fmt, v);
    return buf;
}

static void summary(cJSON *folds, const cJSON *runs, int k)
{
    double *v = md_calloc((size_t)k * FV_COUNT, sizeof *v);
    if (!v) return;
    int regress = 0, n = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, runs)
    {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(s, "metrics");
        for (int j = 0; j < FV_COUNT; j++) v[(size_t)j * k + n] = num_of(f, fv_key[j]);
        if (isfinite(v[(size_t)FV_R2 * k + n])) regress = 1;
        n++;
    }
    /* the columns of this task: loss and accuracy, or loss, R2, MAE, RMSE */
    int cols[4], nc = 0;
    cols[nc++] = FV_LOSS;
    if (regress) {
        cols[nc++] = FV_R2;
        cols[nc++] = FV_MAE;
        cols[nc++] = FV_RMSE;
    } else {
        cols[nc++] = FV_ACC;
    }
    static const char *const head[FV_COUNT] = {"val loss", "val acc", "val R2", "val MAE", "val RMSE"};
    static const char *const fmt[FV_COUNT] = {"%.4f", "%.4f", "%.4f", "%.6g", "%.6g"};
    char b[4][32];

    md_section("Folds");
    md_out("  %d folds, each trained afresh with the same settings; validation figures of each fold's last epoch%s\n",
           k, regress ? "\n  (loss on standardised targets; R2, MAE, RMSE in original units, means over the targets)" : "");
    md_out("  %-8s", "fold");
    for (int c = 0; c < nc; c++) md_out(" %14s", head[cols[c]]);
    md_out("  %s\n", "status");
    int i = 0;
    cJSON_ArrayForEach(s, runs)
    {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "status"), "result");
        md_out("  %-8d", i);
        for (int c = 0; c < nc; c++) md_out(" %14s", cell(v[(size_t)cols[c] * k + i], fmt[cols[c]], b[c], sizeof b[c]));
        md_out("  %s\n", cJSON_IsString(st) ? st->valuestring : "?");
        i++;
    }
    cJSON *sum = cJSON_AddObjectToObject(folds, "summary");
    double mean[FV_COUNT], sd[FV_COUNT];
    int used[FV_COUNT];
    for (int j = 0; j < FV_COUNT; j++) {
        md_folds_mean_std(v + (size_t)j * k, n, &mean[j], &sd[j], &used[j]);
        if (used[j] == 0) continue;
        cJSON *e = cJSON_AddObjectToObject(sum, fv_key[j]);
        cJSON_AddNumberToObject(e, "mean", mean[j]);
        cJSON_AddNumberToObject(e, "std", sd[j]);
        cJSON_AddNumberToObject(e, "folds", used[j]);
    }
    md_out("  %-8s", "mean");
    for (int c = 0; c < nc; c++) md_out(" %14s", cell(mean[cols[c]], fmt[cols[c]], b[c], sizeof b[c]));
    md_out("\n  %-8s", "std");
    for (int c = 0; c < nc; c++) md_out(" %14s", cell(sd[cols[c]], fmt[cols[c]], b[c], sizeof b[c]));
    md_out("\n");
    for (int c = 0; c < nc; c++) {
        int j = cols[c];
        if (used[j] == 0) continue;
        char m1[32], s1[32];
        md_out("  %-14s %s +- %s over %d fold%s\n", head[j], cell(mean[j], fmt[j], m1, sizeof m1),
               cell(sd[j], fmt[j], s1, sizeof s1), used[j], used[j] == 1 ? "" : "s");
    }
    md_out("  (std: population standard deviation over the folds that finished, ddof 0)\n");
    md_free(v);
}

/* ---- the run ------------------------------------------------------------------------ */

md_status md_folds_run(md_job *job)
{
    md_options *o = job->opts;
    int k = o->folds;
    cJSON *folds = cJSON_AddObjectToObject(job->report, "folds");
    cJSON_AddNumberToObject(folds, "k", k);
    cJSON_AddStringToObject(folds, "std", "population (ddof 0)");
    char v[32];
    snprintf(v, sizeof v, "all of %d", k);
    md_job_setting(job, "fold", v, "--fold all: each fold trained in turn with a fresh model, then mean +- std");
    if (o->benchmark) {
        o->benchmark = 0;
        md_job_setting(job, "benchmark", "off", "--fold all measures the folds' validation figures; benchmark one fold "
                                                "(--fold I --benchmark)");
    }
    md_settings_print(job->settings, 0);
    cJSON *runs = cJSON_AddArrayToObject(folds, "runs");
    md_options *base = md_malloc(sizeof *base);
    if (!base) return md_errf(MD_ERR_OOM, "out of host memory");
    *base = *o;
    md_status first = MD_OK;
    char first_msg[1024] = "";
    int pg = md_progress_begin("k-fold", k, "folds");
    for (int i = 0; i < k; i++) {
        md_progress_update(i);
        md_status st = run_fold(job, base, i, runs);
        if (st != MD_OK && first == MD_OK) {
            first = st;
            snprintf(first_msg, sizeof first_msg, "fold %d: %s", i, md_errmsg());
        }
        if (st != MD_OK && !fold_local(st)) break;
    }
    md_progress_end(pg);
    md_free(base);
    summary(folds, runs, k);
    if (first != MD_OK) md_errf(first, "%s", first_msg);
    return first;
}
