/* job.c - runs the stages in order and writes the report. */
#define _POSIX_C_SOURCE 200809L
#include "app/job.h"
#include "core/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app/diagnostics.h"
#include "app/folds.h"
#include "backend/kernels_call.h"
#include "app/run_info.h"
#include "app/settings.h"
#include "app/stage_profile.h"
#include "core/json.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/signals.h"
#include "core/timer.h"
#include "diag/sysinfo.h"

#define MD_REPORT_SCHEMA_VERSION 1

cJSON *md_job_find_setting(const md_job *job, const char *name)
{
    cJSON *e;
    cJSON_ArrayForEach(e, job->settings)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0) return e;
    }
    return NULL;
}

void md_job_setting(md_job *job, const char *name, const char *value, const char *why)
{
    /* a later stage revising a setting replaces the entry in place: one row per setting */
    cJSON *e = md_job_find_setting(job, name);
    if (e) {
        cJSON_ReplaceItemInObjectCaseSensitive(e, "value", cJSON_CreateString(value));
        cJSON_ReplaceItemInObjectCaseSensitive(e, "why", cJSON_CreateString(why));
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "value", value);
    cJSON_AddStringToObject(o, "why", why);
    cJSON_AddItemToArray(job->settings, o);
}

/* Settings the foundation decides: device, threads, memory cap, fallback. */
static void device_settings(md_job *job)
{
    char v[64];
    const md_options *o = job->opts;
    const struct md_device_info *info = md_device_get_info(job->dev);
    snprintf(v, sizeof v, "%s:%d", info->backend, job->device_index);
    md_job_setting(job, "device", v, job->device_why);
    if (md_device_kind(job->dev) == MD_BACKEND_CPU) {
        snprintf(v, sizeof v, "%d", info->compute_units);
        md_job_setting(job, "threads", v,
                       o->threads ? "--threads; one pool runs every CPU kernel, GEMM tiles included"
                                  : "physical cores; one pool runs every CPU kernel, GEMM tiles included (OpenBLAS "
                                    "itself single-threaded, so nothing oversubscribes)");
    }
    if (o->memory_fraction > 0) {
        snprintf(v, sizeof v, "%.2f", o->memory_fraction);
        md_job_setting(job, "memory_fraction", v, "device allocations capped at this share of total memory");
    }
    md_job_setting(job, "fallback", o->fallback ? "on" : "off", job->fallback_why);
}

/* The one place the CPU fallback is decided: --fallback (or the config's
 * "fallback") wins, else MPSDIAG_ENABLE_FALLBACK (0 or 1). */
static md_status resolve_fallback(md_job *job)
{
    md_options *o = job->opts;
    const char *env = getenv("MPSDIAG_ENABLE_FALLBACK");
    if (!md_options_given(o, "fallback") && env && *env) {
        if (strcmp(env, "1") == 0) o->fallback = 1;
        else if (strcmp(env, "0") == 0) o->fallback = 0;
        else return md_errf(MD_ERR_USAGE, "MPSDIAG_ENABLE_FALLBACK: '%s' is not 0 or 1", env);
        job->fallback_why = o->fallback ? "MPSDIAG_ENABLE_FALLBACK=1: ops the device lacks run on the CPU "
                                          "(unified memory only)"
                                        : "MPSDIAG_ENABLE_FALLBACK=0: unsupported ops are errors";
        return MD_OK;
    }
    job->fallback_why = o->fallback ? "--fallback: ops the device lacks run on the CPU (unified memory only)"
                                    : "unsupported ops are errors (enable with --fallback)";
    return MD_OK;
}

/* report.fallback, and the text lines when the fallback is on: how often
 * each op the device lacks ran on the CPU instead. */
static void fallback_section(md_job *job, int print)
{
    if (!job->dev || cJSON_GetObjectItemCaseSensitive(job->report, "fallback")) return;
    cJSON *f = cJSON_AddObjectToObject(job->report, "fallback");
    cJSON_AddBoolToObject(f, "enabled", job->opts->fallback);
    cJSON_AddStringToObject(f, "why", job->fallback_why ? job->fallback_why : "");
    cJSON *ops = cJSON_AddObjectToObject(f, "ops");
    long long total = 0;
    char list[1024] = "";
    size_t o = 0;
    for (int k = 0; k < MD_KERNEL_COUNT; k++) {
        long long n = md_dev_fallback_count(job->dev, k);
        if (n <= 0) continue;
        total += n;
        cJSON_AddNumberToObject(ops, md_kernel_names[k], (double)n);
        if (o < sizeof list)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s %lld", o ? ", " : "", md_kernel_names[k], n);
    }
    cJSON_AddNumberToObject(f, "total_calls", (double)total);
    if (!print || !job->opts->fallback) return;
    md_section("Fallback");
    if (total) md_out("  %-22s %lld calls ran on the CPU: %s\n", "ops the device lacks", total, list);
    else md_out("  %-22s none: every op ran on the device\n", "ops the device lacks");
}

static void memory_section(md_job *job)
{
    struct md_mem_stats ms;
    md_dev_mem_stats(job->dev, &ms);
    cJSON *m = cJSON_AddObjectToObject(job->report, "memory");
    cJSON_AddNumberToObject(m, "device_current_bytes", (double)ms.current);
    /* the diagnostics run resets the peak before each model: the run's is the highest */
    double peak = (double)ms.peak;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(job->report, "models"))
    {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "memory"),
                                                          "device_peak_bytes");
        if (cJSON_IsNumber(p) && p->valuedouble > peak) peak = p->valuedouble;
    }
    cJSON_AddNumberToObject(m, "device_peak_bytes", peak);
    cJSON_AddNumberToObject(m, "device_limit_bytes", (double)ms.limit);
    cJSON_AddNumberToObject(m, "device_reserved_bytes", (double)ms.reserved);
    cJSON_AddNumberToObject(m, "host_peak_tracked_bytes", (double)md_host_mem()->peak);
    cJSON_AddNumberToObject(m, "host_peak_rss_bytes", (double)md_peak_rss_bytes());
    /* the diagnostics run shows each model's peak in its comparison */
    if (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(job->report, "models"))) return;
    char a[32], b[32], c[32];
    md_section("Memory");
    md_out("  %-22s %s\n", "device peak", md_fmt_bytes((double)ms.peak, a, sizeof a));
    md_out("  %-22s %s\n", "device limit", ms.limit ? md_fmt_bytes((double)ms.limit, b, sizeof b) : "none");
    md_out("  %-22s %s\n", "host peak RSS", md_fmt_bytes((double)md_peak_rss_bytes(), c, sizeof c));
}

static void report_header(md_job *job, int argc_unused)
{
    (void)argc_unused;
    cJSON_AddNumberToObject(job->report, "schema_version", MD_REPORT_SCHEMA_VERSION);
    cJSON *tool = cJSON_AddObjectToObject(job->report, "tool");
    cJSON_AddStringToObject(tool, "name", "mpsdiag");
#ifdef MD_VERSION
    cJSON_AddStringToObject(tool, "version", MD_VERSION);
#else
    cJSON_AddStringToObject(tool, "version", "0.1.0");
#endif
    /* built with MPI or not, and this run's ranks */
    cJSON_AddStringToObject(tool, "mpi", md_dist_library());
    cJSON_AddNumberToObject(tool, "ranks", md_dist_size());
    char ts[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON_AddStringToObject(job->report, "started_at", ts);
}

/* The number at report path "a.b.c" (the last element of an array on the
 * way), or NAN. */
static double report_num(const cJSON *r, const char *path)
{
    char key[64];
    for (const char *p = path; r && *p;) {
        size_t n = strcspn(p, ".");
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        r = cJSON_GetObjectItemCaseSensitive(r, key);
        if (cJSON_IsArray(r)) r = cJSON_GetArrayItem(r, cJSON_GetArraySize(r) - 1);
        p += n;
        if (*p == '.') p++;
    }
    return cJSON_IsNumber(r) ? r->valuedouble : (double)NAN;
}

/* True when a file output of the run is stdout itself (--report /dev/stdout):
 * then nothing else may go there. */
static int an_output_is_stdout(const md_options *o)
{
    struct stat so, sp;
    if (fstat(STDOUT_FILENO, &so) != 0) return 0;
    const char *paths[] = {o->report, o->html, o->junit, o->metrics};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (paths[i][0] && stat(paths[i], &sp) == 0 && sp.st_dev == so.st_dev && sp.st_ino == so.st_ino) return 1;
    return 0;
}

/* "Done in 12.3 s: small_cnn on cpu:0, test accuracy 85.20%, training 1,234
 * samples/s" - the line --quiet keeps. */
static void summary_line(md_job *job)
{
    const cJSON *r = job->report;
    char line[512], a[32];
    int n = snprintf(line, sizeof line, "Done in %.1f s", report_num(r, "duration_s"));
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "model"), "name");
    const cJSON *diag = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "diagnostics"), "model_names");
    const char *sep = ": ";
#define ADD(...)                                                                                                  \
    do {                                                                                                          \
        if (n < (int)sizeof line) n += snprintf(line + n, sizeof line - (size_t)n, __VA_ARGS__);                  \
        sep = ", ";                                                                                               \
    } while (0)
    if (cJSON_IsArray(diag)) ADD("%s%d model%s compared", sep, cJSON_GetArraySize(diag), md_s(cJSON_GetArraySize(diag)));
    else if (cJSON_IsString(model)) ADD("%s%s", sep, model->valuestring);
    if (job->dev) {
        const char *on = cJSON_IsString(model) || cJSON_IsArray(diag) ? " on " : sep;
        ADD("%s%s:%d", on, md_backend_name(job->backend), job->device_index);
    }
    double acc = report_num(r, "training.test.acc"), mse = report_num(r, "training.test.mse");
    double loss = report_num(r, "training.curves.train_loss");
    if (isfinite(acc)) ADD("%stest accuracy %.2f%%", sep, 100 * acc);
    else if (isfinite(mse)) ADD("%stest MSE %.4g", sep, mse);
    else if (isfinite(loss)) ADD("%sfinal training loss %.4f", sep, loss);
    double sps = report_num(r, "benchmark.training.samples_per_s");
    if (!isfinite(sps)) sps = report_num(r, "training.curves.samples_per_s");
    if (isfinite(sps) && sps > 0) ADD("%straining %s samples/s", sep, md_fmt_thousands((long long)(sps + 0.5), a, sizeof a));
#undef ADD
    md_summary("%s\n", line);
}

static md_status write_report(md_job *job, md_status st)
{
    cJSON *status = cJSON_AddObjectToObject(job->report, "status");
    cJSON_AddNumberToObject(status, "exit_code", md_status_exit_code(st));
    cJSON_AddStringToObject(status, "result", md_status_name(st));
    if (st != MD_OK) cJSON_AddStringToObject(status, "error", md_errmsg());
    else cJSON_AddNullToObject(status, "error");
    cJSON_AddNumberToObject(job->report, "duration_s", md_now() - job->t_start);
    /* paths and names may hold any bytes: the JSON, HTML and JUnit files
     * rendered from the report are valid UTF-8 */
    md_json_fix_utf8(job->report);
    if (!job->opts->report[0]) return MD_OK;
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", md_errmsg());
    md_status wst = md_json_write_file(job->report, job->opts->report);
    if (wst == MD_OK) {
        md_out("\nReport written to %s\n", job->opts->report);
        md_errf(st, "%s", saved); /* keep the run's own error message */
    }
    return wst;
}

md_status md_job_run(md_options *opts)
{
    md_job job;
    memset(&job, 0, sizeof job);
    job.opts = opts;
    job.t_start = md_now();
    job.report = cJSON_CreateObject();
    md_status st = MD_OK;
    report_header(&job, 0);

    cJSON *sys = md_sysinfo_collect();
    cJSON *devices = md_devices_collect();
    if (opts->list_devices) {
        md_section("Devices");
        md_devices_print(devices);
        cJSON_AddItemToObject(job.report, "system", sys);
        cJSON_AddItemToObject(job.report, "devices", devices);
        goto finish;
    }
    cJSON_AddItemToObject(job.report, "system", sys);
    cJSON_AddItemToObject(job.report, "devices", devices);
    md_sysinfo_print(sys);
    md_section("Devices");
    md_devices_print(devices);

    st = md_device_select(opts->device, &job.backend, &job.device_index, job.device_why, sizeof job.device_why);
    if (st != MD_OK) goto finish;
    if ((st = resolve_fallback(&job)) != MD_OK) goto finish;
    struct md_device_opts dopts = {
        .threads = opts->threads,
        .memory_fraction = opts->memory_fraction,
        .allow_tf32 = opts->tf32,
        .fallback = opts->fallback,
        /* --no-compile on Metal: one command buffer per op, waited on */
        .eager = !opts->compile,
        /* max-autotune: a measured algorithm search per convolution shape (cuDNN's Find) */
        .autotune = strcmp(opts->compile_mode, "max-autotune") == 0,
    };
    const char *ratio = getenv("MPSDIAG_HIGH_WATERMARK_RATIO");
    if (ratio && *ratio && !md_options_given(opts, "memory-fraction")) {
        char *end;
        double r = strtod(ratio, &end);
        if (*end || !(r > 0 && r <= 1.0)) {
            st = md_errf(MD_ERR_USAGE, "MPSDIAG_HIGH_WATERMARK_RATIO: '%s' is not a number in (0, 1]", ratio);
            goto finish;
        }
        dopts.memory_fraction = r;
        opts->memory_fraction = r;
    }
    st = md_device_open(job.backend, job.device_index, &dopts, &job.dev);
    if (st != MD_OK) goto finish;
    md_out("\nUsing %s:%d (%s): %s\n", md_backend_name(job.backend), job.device_index,
           md_device_get_info(job.dev)->name, job.device_why);
    cJSON *sel = cJSON_AddObjectToObject(job.report, "selected_device");
    cJSON_AddStringToObject(sel, "backend", md_backend_name(job.backend));
    cJSON_AddNumberToObject(sel, "index", job.device_index);
    cJSON_AddStringToObject(sel, "name", md_device_get_info(job.dev)->name);
    cJSON_AddStringToObject(sel, "why", job.device_why);

    job.settings = cJSON_AddArrayToObject(job.report, "settings");
    device_settings(&job);
    md_stage_ci_defaults(&job);
    md_profile_defaults(&job);
    if ((st = md_stage_precision_plan(&job)) != MD_OK) goto finish;
    if ((st = md_stage_policy(&job)) != MD_OK) goto finish;
    md_stage_precision_plan_setting(&job);

    if (md_diagnostics_wanted(opts)) {
        /* Several models in turn, then a comparison (src/app/diagnostics.c). */
        if ((st = md_diagnostics_run(&job)) != MD_OK) goto finish;
    } else if (md_folds_wanted(opts)) {
        /* Every fold in turn, then mean +- std (src/app/folds.c). */
        if ((st = md_folds_run(&job)) != MD_OK) goto finish;
    } else if (md_doctor_wanted(opts)) {
        /* One batch on the device against the reference, or in each precision (src/app/stage_doctor.c). */
        if ((st = md_stage_model(&job)) != MD_OK) goto finish;
        md_settings_record_run(&job);
        md_settings_print(job.settings, 0);
        if ((st = md_stage_doctor(&job)) != MD_OK) goto finish;
    } else {
        /* a signal that came between the loops that check it stops the run here */
        if ((st = md_stage_model(&job)) != MD_OK) goto finish;
        if ((st = md_interrupt_check("after loading the model")) != MD_OK) goto finish;
        if ((st = md_stage_data(&job)) != MD_OK) goto finish;
        if ((st = md_interrupt_check("after opening the dataset")) != MD_OK) goto finish;
        md_settings_record_run(&job);
        md_settings_print(job.settings, 0);
        if ((st = md_stage_train(&job)) != MD_OK) goto finish;
        if ((st = md_interrupt_check("after training")) != MD_OK) goto finish;
        if ((st = md_stage_bench(&job)) != MD_OK) goto finish;
    }
    memory_section(&job);
    fallback_section(&job, 1);
    if ((st = md_stage_recommend(&job)) != MD_OK) goto finish;

finish:
    fallback_section(&job, 0); /* a failed run's report says it too */
    /* A failed run's report keeps what was gathered, and says with which
     * settings and how much memory it got there. */
    if (job.dev && !cJSON_GetObjectItemCaseSensitive(job.report, "run")) md_settings_record_run(&job);
    if (!cJSON_GetObjectItemCaseSensitive(job.report, "run")) {
        cJSON *run = md_run_info_json(&job);
        if (run) cJSON_AddItemToObject(job.report, "run", run);
    }
    if (job.dev && !cJSON_GetObjectItemCaseSensitive(job.report, "memory")) memory_section(&job);
    md_status wst = write_report(&job, st);
    /* HTML and JUnit also when the run failed: a CI job needs them most then */
    md_status ost = md_stage_outputs(&job);
    if (st == MD_OK) st = ost != MD_OK ? ost : wst;
    if (st == MD_OK && !an_output_is_stdout(opts)) summary_line(&job);
    md_stage_train_cleanup(&job);
    md_stage_data_cleanup(&job);
    md_stage_model_cleanup(&job);
    md_device_close(job.dev);
    cJSON_Delete(job.report);
    return st;
}
