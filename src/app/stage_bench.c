/* stage_bench.c - the benchmark stage (warm-up, inference, training, memory,
 * data; sweeps, finder, device comparison, ablations), the recommendation
 * stage with the --ci thresholds, and the extra outputs (--html, --junit).
 *
 * The stages talk through the JSON report: the benchmark writes
 * report.benchmark, the recommendations read it back, the outputs render the
 * whole report. So the HTML, the JUnit file and the recommendations never
 * disagree with the JSON.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app/diagnostics.h"
#include "app/job.h"
#include "app/resolve.h"
#include "app/stage_profile.h"
#include "core/json.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/platform.h"
#include "core/signals.h"
#include "core/timer.h"
#include "data/data.h"
#include "diag/bench.h"
#include "diag/html.h"
#include "diag/junit.h"
#include "diag/preset.h"
#include "diag/recommend.h"

/* ---- small helpers ---------------------------------------------------------- */

static cJSON *warnings_of(md_job *job)
{
    cJSON *w = cJSON_GetObjectItemCaseSensitive(job->report, "warnings");
    if (!cJSON_IsArray(w)) w = cJSON_AddArrayToObject(job->report, "warnings");
    return w;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void warn(md_job *job, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    md_warn("%s", msg);
    cJSON_AddItemToArray(warnings_of(job), cJSON_CreateString(msg));
}

/* Numbers that may be NaN go into JSON as null (JSON has no NaN). */
static void add_num(cJSON *o, const char *k, double v)
{
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

static cJSON *stats_json(const md_stats *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "n", (double)s->n);
    add_num(o, "mean", s->mean);
    add_num(o, "std", s->stddev);
    add_num(o, "min", s->min);
    add_num(o, "p50", s->p50);
    add_num(o, "p95", s->p95);
    add_num(o, "p99", s->p99);
    add_num(o, "max", s->max);
    return o;
}

static double jnum(const cJSON *o, const char *k, double dflt)
{
    const cJSON *it = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    return cJSON_IsNumber(it) ? it->valuedouble : dflt;
}

static const cJSON *jget(const cJSON *o, const char *k) { return o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL; }

/* ---- --ci defaults -------------------------------------------------------------- */

void md_stage_ci_defaults(md_job *job)
{
    md_options *o = job->opts;
    if (!o->ci) return;
    /* the diagnostics run's models are its own (--models, or the default pair) */
    if (!md_options_given(o, "model") && !o->model[0] && !md_diagnostics_wanted(o)) {
        snprintf(o->model, sizeof o->model, "small_cnn");
        md_job_setting(job, "model", "small_cnn", "--ci: the small model keeps the smoke test short");
    }
    if (!md_options_given(o, "dataset") && !o->data_dir[0] && strcmp(o->dataset, "auto") == 0) {
        snprintf(o->dataset, sizeof o->dataset, "synthetic");
        md_job_setting(job, "dataset", "synthetic", "--ci: synthetic data runs anywhere, with no files");
    }
    if (!md_options_given(o, "epochs") && !o->benchmark_only) {
        o->epochs = 1;
        md_job_setting(job, "epochs", "1", "--ci: one short epoch");
    }
    if (!md_options_given(o, "steps")) {
        o->steps = 20;
        md_job_setting(job, "steps", "20", "--ci: a few steps per epoch");
    }
    if (!md_options_given(o, "bench-iters")) o->bench_iters = 10;
    if (!md_options_given(o, "warmup-iters")) o->warmup_iters = 2;
}

/* ---- the benchmark ------------------------------------------------------------------ */

struct ctx {
    md_job *job;
    md_options *o;
    md_device *dev;
    const struct md_device_info *info;
    struct md_data *data[2];     /* per layout: NCHW, NHWC */
    char model[MD_PATH_MAX];
    cJSON *config;               /* the run config when its "model" is inline (owned) */
    const cJSON *inline_model;
    struct md_model_opts mopts;
    struct md_bench_opts bopts;
    int batch;
    long long budget;            /* bytes a measurement may plan (0: none) */
    cJSON *bench;                /* report.benchmark */
};

static md_dtype best_half(const struct md_device_info *info)
{
    if (strcmp(info->backend, "cuda") == 0 && info->supports_bf16) return MD_BF16;
    if (info->supports_fp16) return MD_F16;
    if (info->supports_bf16) return MD_BF16;
    return MD_F32;
}

static md_dtype compute_dtype(const md_options *o, const struct md_device_info *info)
{
    if (o->precision == MD_PREC_FP16) return MD_F16;
    if (o->precision == MD_PREC_BF16) return MD_BF16;
    if (o->amp) return best_half(info);
    return MD_F32;
}

static struct md_bench_setup setup_for(struct ctx *c, int batch, int iters, int inf_iters, double budget_s)
{
    struct md_bench_setup s;
    memset(&s, 0, sizeof s);
    s.model = c->model;
    s.inline_model = c->inline_model;
    s.mopts = c->mopts;
    s.batch = batch;
    s.warmup_iters = c->o->warmup_iters;
    s.iters = iters;
    s.inference_iters = inf_iters;
    s.time_budget_s = budget_s;
    s.opts = &c->bopts;
    s.mem_budget = c->budget;
    return s;
}

static md_status run(struct ctx *c, md_device *dev, const struct md_bench_setup *s, struct md_bench_result *r)
{
    int li = s->mopts.layout == MD_NHWC;
    return md_bench_run(dev, s, &c->data[li], r);
}

static void print_stats_row(const char *what, const md_stats *s, const char *unit)
{
    /* 2 + 30 + 7 x 9 + 2 + 2: fits 100 columns */
    md_out("  %-30s %8.4g %8.4g %8.4g %8.4g %8.4g %8.4g %8.4g  %s\n", what, s->mean, s->stddev, s->min, s->p50, s->p95,
           s->p99, s->max, unit);
}

static md_status main_benchmark(struct ctx *c, struct md_bench_result *r)
{
    md_options *o = c->o;
    char a[32], b[32], d[32], e[32], f[32];
    struct md_bench_setup s = setup_for(c, c->batch, o->bench_iters, o->bench_iters, 0);
    md_profile_setup(o, &s);
    int pg = md_progress_begin("benchmark", 0, NULL);
    md_status st = run(c, c->dev, &s, r);
    md_progress_end(pg);
    if (st != MD_OK) {
        md_err_prefix("benchmark of %s", c->model);
        return st;
    }
    cJSON *B = c->bench;
    char dev[64];
    snprintf(dev, sizeof dev, "%s:%d", c->info->backend, c->info->index);
    cJSON_AddStringToObject(B, "device", dev);
    cJSON_AddStringToObject(B, "device_name", c->info->name);
    cJSON_AddStringToObject(B, "model", c->model);
    cJSON_AddNumberToObject(B, "batch_size", c->batch);
    struct md_data *data = c->data[c->mopts.layout == MD_NHWC];
    cJSON_AddStringToObject(B, "data_source", md_data_name(data));
    cJSON_AddStringToObject(B, "precision", md_dtype_name(c->mopts.compute_dtype));
    cJSON_AddStringToObject(B, "layout", c->mopts.layout == MD_NHWC ? "NHWC" : "NCHW");
    cJSON_AddBoolToObject(B, "compile", c->mopts.compile);
    cJSON_AddStringToObject(B, "timer", r->timer_events ? "device events" : "host clock after a device sync");

    cJSON *w = cJSON_AddObjectToObject(B, "warmup");
    cJSON_AddNumberToObject(w, "iters", o->warmup_iters < 1 ? 1 : o->warmup_iters);
    cJSON_AddNumberToObject(w, "plan_s", r->load_s);
    cJSON_AddNumberToObject(w, "bind_s", r->bind_s);
    cJSON_AddNumberToObject(w, "first_step_ms", r->first_step_ms);
    cJSON_AddNumberToObject(w, "other_steps_ms", r->warmup_rest_ms);
    cJSON_AddNumberToObject(w, "steady_step_ms", r->step_ms.mean);
    cJSON_AddNumberToObject(w, "overhead_ms", r->first_step_ms - r->step_ms.mean + r->load_s * 1e3 + r->bind_s * 1e3);

    cJSON *inf = cJSON_AddObjectToObject(B, "inference");
    cJSON_AddNumberToObject(inf, "batch_size", c->batch);
    cJSON_AddNumberToObject(inf, "iters", r->inf_iters);
    cJSON_AddItemToObject(inf, "latency_ms", stats_json(&r->inf_ms));
    md_stats per = r->inf_ms;
    per.mean /= c->batch; per.stddev /= c->batch; per.min /= c->batch; per.p50 /= c->batch;
    per.p95 /= c->batch; per.p99 /= c->batch; per.max /= c->batch;
    cJSON_AddItemToObject(inf, "per_sample_ms", stats_json(&per));
    cJSON_AddNumberToObject(inf, "samples_per_s", r->inf_samples_per_s);
    cJSON *raw = cJSON_AddArrayToObject(inf, "samples_ms");
    for (int i = 0; i < r->inf_iters; i++) cJSON_AddItemToArray(raw, cJSON_CreateNumber(r->inf_samples_ms[i]));

    cJSON *t = cJSON_AddObjectToObject(B, "training");
    cJSON_AddNumberToObject(t, "batch_size", c->batch);
    cJSON_AddNumberToObject(t, "iters", r->train_iters);
    cJSON_AddStringToObject(t, "optimizer", o->optimizer);
    cJSON_AddItemToObject(t, "step_ms", stats_json(&r->step_ms));
    cJSON_AddNumberToObject(t, "samples_per_s", r->train_samples_per_s);
    cJSON *split = cJSON_AddObjectToObject(t, "split_ms");
    cJSON_AddNumberToObject(split, "forward", r->fwd_ms.mean);
    cJSON_AddNumberToObject(split, "backward", r->bwd_ms.mean);
    cJSON_AddNumberToObject(split, "optimizer", r->opt_ms.mean);
    cJSON_AddStringToObject(split, "measured_on", r->graph ? "eager steps before capture" : "the timed steps");
    if (r->nkinds > 0) {
        cJSON *lk = cJSON_AddObjectToObject(t, "layer_kinds");
        cJSON_AddNumberToObject(lk, "steps", MD_BENCH_PROFILE_STEPS);
        cJSON_AddNumberToObject(lk, "step_ms", r->profiled_step_ms);
        cJSON_AddNumberToObject(lk, "layers_ms", r->profiled_layers_ms);
        cJSON *arr = cJSON_AddArrayToObject(lk, "kinds");
        for (int k = 0; k < r->nkinds; k++) {
            const struct md_bench_kind *K = &r->kinds[k];
            cJSON *kj = cJSON_CreateObject();
            cJSON_AddStringToObject(kj, "kind", K->kind);
            cJSON_AddNumberToObject(kj, "layers", K->layers);
            cJSON_AddNumberToObject(kj, "forward_ms", K->fwd_ms);
            cJSON_AddNumberToObject(kj, "backward_ms", K->bwd_ms);
            cJSON_AddNumberToObject(kj, "share", r->profiled_step_ms > 0 ? (K->fwd_ms + K->bwd_ms) / r->profiled_step_ms : 0.0);
            cJSON_AddItemToArray(arr, kj);
        }
    }
    cJSON *gj = cJSON_AddObjectToObject(t, "graph");
    cJSON_AddBoolToObject(gj, "captured", r->graph);
    cJSON_AddNumberToObject(gj, "capture_ms", r->capture_ms);
    if (r->eager_iters > 0) {
        cJSON_AddItemToObject(gj, "eager_step_ms", stats_json(&r->eager_step_ms));
        add_num(gj, "speedup", r->graph && r->step_ms.p50 > 0 ? r->eager_step_ms.p50 / r->step_ms.p50 : (double)NAN);
    }
    if (r->graph_note[0]) {
        cJSON_AddStringToObject(gj, "note", r->graph_note);
        warn(c->job, "benchmark: %s; steps timed eagerly", r->graph_note);
    }
    add_num(t, "first_loss", r->first_loss);
    add_num(t, "final_loss", r->final_loss);
    cJSON_AddNumberToObject(t, "flops_per_sample", r->flops_train);
    double achieved = r->flops_train * r->train_samples_per_s / 1e9;
    cJSON_AddNumberToObject(t, "achieved_gflops", achieved);
    cJSON_AddNumberToObject(inf, "flops_per_sample", r->flops_fwd);
    cJSON_AddNumberToObject(inf, "achieved_gflops", r->flops_fwd * r->inf_samples_per_s / 1e9);

    /* the device's peak, measured once with a large GEMM (small on a
     * simulated device, whose rate means nothing and whose GEMM of 4096 would
     * take minutes) */
    int n = md_device_kind(c->dev) == MD_BACKEND_CPU ? 1024 : 4096;
    if (strstr(md_device_get_info(c->dev)->name, "simulated")) n = 128;
    double peak = 0, peak_half = 0;
    pg = md_progress_begin("benchmark", 0, NULL);
    md_status pst = md_bench_gemm_peak(c->dev, MD_F32, n, &peak);
    if (pst == MD_ERR_INTERRUPTED) {
        md_progress_end(pg);
        return pst;
    }
    if (pst != MD_OK) warn(c->job, "GEMM peak not measured: %s", md_errmsg());
    if (c->mopts.compute_dtype != MD_F32 && md_bench_gemm_peak(c->dev, c->mopts.compute_dtype, n, &peak_half) != MD_OK)
        peak_half = 0;
    /* the CPU's FMA rate bounds what its kernels can reach; a GEMM on slow
     * OpenBLAS kernels does not (GPUs: the GEMM figure only) */
    const char *fma_isa = NULL;
    double fma = md_dev_fma_peak_gflops(c->dev, &fma_isa);
    cJSON *pk = cJSON_AddObjectToObject(B, "peak");
    cJSON_AddNumberToObject(pk, "gemm_n", n);
    cJSON_AddNumberToObject(pk, "gflops", peak);
    if (peak_half > 0) cJSON_AddNumberToObject(pk, "gflops_compute_dtype", peak_half);
    if (fma > 0) {
        cJSON_AddNumberToObject(pk, "fma_gflops", fma);
        cJSON_AddStringToObject(pk, "fma_isa", fma_isa);
    } else {
        cJSON_AddNullToObject(pk, "fma_gflops");
    }
    struct md_peak_ref ref;
    md_bench_peak_ref(achieved, peak_half > 0 ? peak_half : peak, fma, &ref);
    cJSON_AddNumberToObject(t, "peak_gflops", ref.gflops);
    add_num(t, "fraction_of_peak", ref.fraction);
    if (ref.basis) cJSON_AddStringToObject(t, "peak_basis", ref.basis);
    else cJSON_AddNullToObject(t, "peak_basis");

    cJSON *m = cJSON_AddObjectToObject(B, "memory");
    cJSON_AddNumberToObject(m, "params_bytes", (double)r->params_bytes);
    cJSON_AddNumberToObject(m, "grads_bytes", (double)r->grads_bytes);
    cJSON_AddNumberToObject(m, "optimizer_bytes", (double)r->optimizer_bytes);
    cJSON_AddNumberToObject(m, "activations_bytes", (double)r->activations_bytes);
    cJSON_AddNumberToObject(m, "device_peak_bytes", (double)r->peak_bytes);
    cJSON_AddNumberToObject(m, "host_peak_rss_bytes", (double)md_peak_rss_bytes());

    /* data: the loader alone against the step */
    int workers = o->num_workers > 0 ? o->num_workers : 0;
    double lsps = 0;
    md_status lst = md_bench_loader(data, &c->bopts, c->batch, workers, o->bench_iters > 10 ? o->bench_iters : 10, 3.0, &lsps);
    md_progress_end(pg);
    if (lst == MD_ERR_INTERRUPTED) return lst;
    cJSON *dj = cJSON_AddObjectToObject(B, "data");
    cJSON_AddNumberToObject(dj, "loader_samples_per_s", lsps);
    cJSON_AddNumberToObject(dj, "step_samples_per_s", r->train_samples_per_s);
    cJSON_AddNumberToObject(dj, "num_workers", workers);
    char verdict[256];
    int bottleneck = lsps > 0 && lsps < 1.2 * r->train_samples_per_s;
    if (lst != MD_OK || lsps <= 0)
        snprintf(verdict, sizeof verdict, "loader not measured: %s", lst != MD_OK ? md_errmsg() : "no batches");
    else if (bottleneck)
        snprintf(verdict, sizeof verdict, "the loader sustains %.2fx the step's rate: data loading is the bottleneck",
                 lsps / r->train_samples_per_s);
    else
        snprintf(verdict, sizeof verdict, "the loader is %.1fx faster than the step: data loading is not the bottleneck",
                 lsps / r->train_samples_per_s);
    cJSON_AddBoolToObject(dj, "bottleneck", bottleneck);
    cJSON_AddStringToObject(dj, "verdict", verdict);

    /* text */
    md_section("Benchmark");
    md_out("  %s on %s (%s), batch %d, %s, %s, compile %s, %s data\n", c->model, dev, c->info->name, c->batch,
           md_dtype_name(c->mopts.compute_dtype), c->mopts.layout == MD_NHWC ? "NHWC" : "NCHW",
           c->mopts.compile ? "on" : "off", md_data_name(data));
    md_out("  timed with %s\n\n", r->timer_events ? "device events" : "the host clock after a device sync (no device events)");
    md_out("  %-30s %12s\n", "warm-up", "");
    md_out("  %-30s %12.2f ms\n", "  plan (load, shapes, fusion)", r->load_s * 1e3);
    md_out("  %-30s %12.2f ms\n", "  bind (allocate, initialise)", r->bind_s * 1e3);
    md_out("  %-30s %12.2f ms\n", "  first step", r->first_step_ms);
    md_out("  %-30s %12.2f ms\n", "  steady step (mean)", r->step_ms.mean);
    md_out("\n  %-30s %8s %8s %8s %8s %8s %8s %8s\n", "", "mean", "std", "min", "p50", "p95", "p99", "max");
    print_stats_row("inference per batch", &r->inf_ms, "ms");
    print_stats_row("inference per sample", &per, "ms");
    if (r->graph) {
        print_stats_row("training step (CUDA graph)", &r->step_ms, "ms");
        print_stats_row("training step (op by op)", &r->eager_step_ms, "ms");
        print_stats_row("  forward + loss (op by op)", &r->fwd_ms, "ms");
        print_stats_row("  backward (op by op)", &r->bwd_ms, "ms");
        print_stats_row("  optimizer (op by op)", &r->opt_ms, "ms");
    } else {
        print_stats_row("training step", &r->step_ms, "ms");
        print_stats_row("  forward + loss", &r->fwd_ms, "ms");
        print_stats_row("  backward", &r->bwd_ms, "ms");
        print_stats_row("  optimizer", &r->opt_ms, "ms");
    }
    if (r->nkinds > 0) {
        md_out("\n  %-30s %9s %9s %9s %7s\n", "time by layer kind (ms)", "forward", "backward", "total", "share");
        int shown = r->nkinds < 8 ? r->nkinds : 8;
        double rest_f = 0, rest_b = 0;
        for (int k = shown; k < r->nkinds; k++) rest_f += r->kinds[k].fwd_ms, rest_b += r->kinds[k].bwd_ms;
        for (int k = 0; k <= shown; k++) {
            if (k == shown && rest_f + rest_b <= 0) break;
            char name[40];
            double fm = k < shown ? r->kinds[k].fwd_ms : rest_f, bm = k < shown ? r->kinds[k].bwd_ms : rest_b;
            if (k < shown) snprintf(name, sizeof name, "  %s (%d)", r->kinds[k].kind, r->kinds[k].layers);
            else snprintf(name, sizeof name, "  %d other kinds", r->nkinds - shown);
            md_out("  %-30s %9.3f %9.3f %9.3f %6.1f%%\n", name, fm, bm, fm + bm,
                   r->profiled_step_ms > 0 ? 100.0 * (fm + bm) / r->profiled_step_ms : 0.0);
        }
        md_out("  %-30s %29.3f ms\n", "  step", r->profiled_step_ms);
        md_out("  %-30s (%d op-by-op steps, an event around every layer)\n", "", MD_BENCH_PROFILE_STEPS);
    }
    if (r->graph)
        md_out("\n  %-30s captured in %.1f ms; a replayed step takes %.3f ms against %.3f ms op by op (%.2fx, p50)\n",
               "CUDA graph", r->capture_ms, r->step_ms.p50, r->eager_step_ms.p50,
               r->step_ms.p50 > 0 ? r->eager_step_ms.p50 / r->step_ms.p50 : 0.0);
    md_out("\n  %-30s %12.1f samples/s\n", "training throughput", r->train_samples_per_s);
    md_out("  %-30s %12.1f samples/s\n", "inference throughput", r->inf_samples_per_s);
    md_profile_energy_line(r);
    md_out("  %-30s %12.2f GFLOP/s %s\n", "achieved (training)", achieved, ref.text);
    md_out("  %-30s %12.1f samples/s with %d worker%s: %s\n", "loader", lsps, workers, md_s(workers),
           verdict);
    md_out("  %-30s %s params, %s grads, %s optimizer, %s activations; peak %s\n", "memory",
           md_fmt_bytes((double)r->params_bytes, a, sizeof a), md_fmt_bytes((double)r->grads_bytes, b, sizeof b),
           md_fmt_bytes((double)r->optimizer_bytes, d, sizeof d),
           md_fmt_bytes((double)r->activations_bytes, e, sizeof e), md_fmt_bytes((double)r->peak_bytes, f, sizeof f));
    if (isfinite(r->final_loss))
        md_out("  %-30s %.4f -> %.4f over %d step%s\n", "training loss", r->first_loss, r->final_loss, r->train_iters,
               md_s(r->train_iters));
    else
        warn(c->job, "benchmark: the training loss is not finite (%s)", md_dtype_name(c->mopts.compute_dtype));
    if (!r->timer_events) cJSON_AddStringToObject(B, "timer_note", "the device has no events; each timing syncs the device first");
    return md_stage_profile(c->job, c->dev, r, ref.gflops, ref.basis);
}

/* "8,16,32" or "auto" into a list of batch sizes. */
static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    const char *p = s;
    while (*p && n < max) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) return -1;
        if (v < 1 || v > (1 << 20)) return -1;
        out[n++] = (int)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) return -1;
    }
    return n;
}

/* Repetitions of one measurement: MD_REC_MIN_REPS short runs instead of one
 * long one, so the advice can tell a difference from noise. Each repetition
 * gets a third of the steps (at least 3) and a 1 s timing budget, which
 * keeps the total close to what one measurement took. */
static int rep_iters(const md_options *o)
{
    int iters = o->bench_iters < 10 ? o->bench_iters : 10;
    iters /= MD_REC_MIN_REPS;
    return iters < 3 ? 3 : iters;
}
#define REP_BUDGET_S 1.0

static int rep_warmup(const md_options *o) { return o->warmup_iters < 2 ? o->warmup_iters : 2; }

static void add_runs(cJSON *o, const char *k, const double *v, int n)
{
    cJSON *a = cJSON_AddArrayToObject(o, k);
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
}

/* One batch of the sweep over its repetitions. */
struct sweep_pt {
    int batch, ok, n;
    int stop;               /* a repetition failed: no more repetitions */
    md_status st;
    char error[200];
    double sps[MD_REC_MAX_REPS], step_ms[MD_REC_MAX_REPS], lat_ms[MD_REC_MAX_REPS];
    long long peak, planned;
};

static cJSON *sweep_point_json(const struct sweep_pt *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "batch_size", p->batch);
    cJSON_AddStringToObject(o, "status", p->ok ? "ok" : p->st == MD_ERR_OOM ? "oom" : "error");
    if (p->ok) {
        double lo = p->sps[0], hi = p->sps[0];
        for (int i = 1; i < p->n; i++) {
            if (p->sps[i] < lo) lo = p->sps[i];
            if (p->sps[i] > hi) hi = p->sps[i];
        }
        cJSON_AddNumberToObject(o, "samples_per_s", md_rec_median(p->sps, p->n));
        cJSON_AddNumberToObject(o, "samples_per_s_min", lo);
        cJSON_AddNumberToObject(o, "samples_per_s_max", hi);
        add_runs(o, "samples_per_s_runs", p->sps, p->n);
        cJSON_AddNumberToObject(o, "repetitions", p->n);
        cJSON_AddNumberToObject(o, "step_ms", md_rec_median(p->step_ms, p->n));
        cJSON_AddNumberToObject(o, "latency_ms", md_rec_median(p->lat_ms, p->n));
        cJSON_AddNumberToObject(o, "peak_bytes", (double)p->peak);
    } else {
        cJSON_AddNullToObject(o, "samples_per_s");
        cJSON_AddStringToObject(o, "error", p->error);
    }
    cJSON_AddNumberToObject(o, "planned_bytes", (double)p->planned);
    return o;
}

/* Measures batch p->batch once more; returns the run's status (p->st keeps
 * the first failure). */
static md_status sweep_once(struct ctx *c, struct sweep_pt *p)
{
    char label[64];
    snprintf(label, sizeof label, "batch sweep, batch %d", p->batch);
    md_progress_label(label);
    struct md_bench_setup s = setup_for(c, p->batch, rep_iters(c->o), rep_iters(c->o), REP_BUDGET_S);
    s.warmup_iters = rep_warmup(c->o);
    struct md_bench_result r;
    md_status st = run(c, c->dev, &s, &r);
    p->planned = r.planned_bytes;
    if (st == MD_OK && p->n < MD_REC_MAX_REPS) {
        p->sps[p->n] = r.train_samples_per_s;
        p->step_ms[p->n] = r.step_ms.mean;
        p->lat_ms[p->n] = r.inf_ms.p50;
        p->n++;
        if (r.peak_bytes > p->peak) p->peak = r.peak_bytes;
    } else if (st != MD_OK && p->n > 0) {
        p->stop = 1; /* measured before: keep those, stop repeating */
    } else if (st != MD_OK) {
        p->ok = 0;
        p->st = st;
        snprintf(p->error, sizeof p->error, "%s", r.error);
    }
    md_bench_result_clear(&r);
    return st;
}

/* Pass 1 walks the batches (auto: doubling until one does not fit); passes
 * 2..MD_REC_MIN_REPS measure the batches that fitted again, in the same
 * order, so the repetitions of all batches interleave (8 16 32 8 16 32 ...). */
static md_status batch_sweep(struct ctx *c)
{
    int list[64], n;
    int automatic = strcmp(c->o->batch_sweep, "auto") == 0;
    if (automatic) {
        n = 0;
        for (int b = 8; b <= 65536 && n < 64; b *= 2) list[n++] = b;
    } else {
        n = parse_list(c->o->batch_sweep, list, 64);
        if (n <= 0)
            return md_errf(MD_ERR_USAGE, "--batch-sweep: '%s' is not a list of batch sizes (8,16,32) or 'auto'",
                           c->o->batch_sweep);
    }
    struct sweep_pt *pts = md_calloc((size_t)n, sizeof *pts);
    if (!pts) return md_errf(MD_ERR_OOM, "--batch-sweep: out of memory");
    md_status st = MD_OK;
    int np = 0, done = 0;
    double t_all = md_now();
    /* total: every batch MD_REC_MIN_REPS times; auto learns it after pass 1 */
    int pg = md_progress_begin("batch sweep", automatic ? 0 : (double)n * MD_REC_MIN_REPS, "runs");
    for (int i = 0; i < n; i++) {
        if (automatic && md_now() - t_all > 60) {
            warn(c->job, "--batch-sweep auto: stopped after 60 s at batch %d", list[i - 1]);
            break;
        }
        struct sweep_pt *p = &pts[np++];
        p->batch = list[i];
        p->ok = 1;
        md_status s1 = sweep_once(c, p);
        md_progress_update(++done);
        if (s1 == MD_ERR_INTERRUPTED) { st = s1; goto done; }
        if (s1 != MD_OK && s1 != MD_ERR_OOM) warn(c->job, "--batch-sweep: batch %d failed: %s", list[i], md_errmsg());
        if (automatic && s1 != MD_OK) break; /* the first batch that does not fit ends an automatic sweep */
        if (automatic && p->step_ms[0] > 5000) {
            warn(c->job, "--batch-sweep auto: stopped at batch %d (steps take over 5 s)", list[i]);
            break;
        }
    }
    int left = 0;
    for (int i = 0; i < np; i++) left += pts[i].ok ? MD_REC_MIN_REPS - 1 : 0;
    md_progress_total(done + left);
    for (int rep = 1; rep < MD_REC_MIN_REPS; rep++)
        for (int i = 0; i < np; i++) {
            if (!pts[i].ok || pts[i].stop) continue;
            md_status s1 = sweep_once(c, &pts[i]);
            md_progress_update(++done);
            if (s1 == MD_ERR_INTERRUPTED) { st = s1; goto done; }
            if (s1 != MD_OK) warn(c->job, "--batch-sweep: batch %d failed on repetition %d: %s", pts[i].batch, rep + 1,
                                  md_errmsg());
        }
    cJSON *arr = cJSON_AddArrayToObject(c->bench, "sweep");
    md_progress_end(pg);
    pg = 0;
    char a[32], range[48];
    md_section("Batch-size sweep");
    md_out("  %8s %14s %20s %10s %12s %10s  %s\n", "BATCH", "SAMPLES/S", "RANGE", "STEP MS", "INFER P50", "PEAK",
           "STATUS");
    for (int i = 0; i < np; i++) {
        const struct sweep_pt *p = &pts[i];
        cJSON *o = sweep_point_json(p);
        cJSON_AddItemToArray(arr, o);
        if (p->ok) {
            snprintf(range, sizeof range, "%.1f-%.1f (%d)", jnum(o, "samples_per_s_min", 0),
                     jnum(o, "samples_per_s_max", 0), p->n);
            md_out("  %8d %14.1f %20s %10.2f %12.2f %10s  ok\n", p->batch, jnum(o, "samples_per_s", 0), range,
                   jnum(o, "step_ms", 0), jnum(o, "latency_ms", 0), md_fmt_bytes((double)p->peak, a, sizeof a));
        } else {
            md_out("  %8d %14s %20s %10s %12s %10s  %s\n", p->batch, "-", "-", "-", "-", "-", p->error);
        }
    }
    md_out("  median of %d interleaved repetitions per batch (range: slowest-fastest, repetitions)\n", MD_REC_MIN_REPS);
done:
    md_progress_end(pg);
    md_free(pts);
    return st;
}

/* Fits = one short training measurement succeeds within the budget. */
static md_status try_batch(struct ctx *c, int batch, int *fits, double *sps, cJSON *tried)
{
    char label[64];
    snprintf(label, sizeof label, "batch finder, batch %d", batch);
    md_progress_label(label);
    struct md_bench_setup s = setup_for(c, batch, 3, 0, 2.0);
    s.warmup_iters = 1;
    struct md_bench_result r;
    md_status st = run(c, c->dev, &s, &r);
    *fits = st == MD_OK;
    *sps = st == MD_OK ? r.train_samples_per_s : 0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "batch_size", batch);
    cJSON_AddBoolToObject(o, "fits", *fits);
    if (*fits) cJSON_AddNumberToObject(o, "samples_per_s", *sps);
    else cJSON_AddStringToObject(o, "error", r.error);
    cJSON_AddItemToArray(tried, o);
    md_bench_result_clear(&r);
    if (st == MD_OK || st == MD_ERR_OOM) return MD_OK;
    return st;
}

/* Power-of-two growth until the first failure, then binary search between
 * the last fit and the failure (PyTorch Lightning's "power" then "binsearch"). */
static md_status find_batch(struct ctx *c)
{
    cJSON *fb = cJSON_AddObjectToObject(c->bench, "find_batch_size");
    cJSON *tried = cJSON_AddArrayToObject(fb, "tried");
    int lo = 0, hi = 0, b = 8, fits, tries = 0;
    double sps;
    double t0 = md_now();
    const int cap = 1 << 16;
    /* the number of tries is known once the doubling failed: the bisection's */
    int pg = md_progress_begin("batch finder", 0, "tries");
    if (pg) md_progress_budget(90);
    md_status st = MD_OK;
    while (b <= cap) {
        if ((st = try_batch(c, b, &fits, &sps, tried)) != MD_OK) goto done;
        md_progress_update(++tries);
        if (!fits) { hi = b; break; }
        lo = b;
        if (md_now() - t0 > 60) break;
        b *= 2;
    }
    if (hi - lo > 1) md_progress_total(tries + ceil(log2((double)(hi - lo))));
    if (hi > 0)
        while (hi - lo > 1 && md_now() - t0 < 90) {
            int mid = lo + (hi - lo) / 2;
            if ((st = try_batch(c, mid, &fits, &sps, tried)) != MD_OK) goto done;
            md_progress_update(++tries);
            if (fits) lo = mid;
            else hi = mid;
        }
done:
    md_progress_end(pg);
    MD_TRY(st);
    cJSON_AddNumberToObject(fb, "max_batch", lo);
    cJSON_AddBoolToObject(fb, "limited_by_search_cap", hi == 0);
    md_section("Batch-size finder");
    if (lo == 0) {
        md_out("  no batch size fits (smallest tried: %d)\n", hi ? 1 : 8);
        warn(c->job, "--find-batch-size: no batch fits in the memory budget");
    } else if (hi == 0) {
        md_out("  largest batch that fits: at least %d (the search stopped there)\n", lo);
    } else {
        md_out("  largest batch that fits: %d (%d does not)\n", lo, hi);
    }
    /* no "fastest" here: one short try per batch is too noisy to rank them;
     * with --batch-sweep, fastest_batch comes from the sweep (fastest_of) */
    return MD_OK;
}

static md_status compare_devices(struct ctx *c, const struct md_bench_result *main_r)
{
    cJSON *arr = cJSON_AddArrayToObject(c->bench, "devices");
    int iters = c->o->bench_iters < 10 ? c->o->bench_iters : 10;
    double cpu_sps = 0;
    struct row { char dev[32]; char name[128]; double sps, lat; int ok; char err[200]; } rows[MD_MAX_DEVICES];
    int nr = 0, ndev = 0;
    for (int i = 0; i < md_backend_count(); i++) {
        const md_backend *be = md_backend_at(i);
        const struct md_probe *p = md_backend_probe(be);
        if (md_backend_kind_of(be) != MD_BACKEND_REF && p->available) ndev += p->device_count;
    }
    int pg = md_progress_begin("device comparison", ndev < MD_MAX_DEVICES ? ndev : MD_MAX_DEVICES, "devices");
    for (int i = 0; i < md_backend_count() && nr < MD_MAX_DEVICES; i++) {
        const md_backend *be = md_backend_at(i);
        if (md_backend_kind_of(be) == MD_BACKEND_REF) continue;
        const struct md_probe *p = md_backend_probe(be);
        if (!p->available) continue;
        for (int d = 0; d < p->device_count && nr < MD_MAX_DEVICES; d++) {
            struct row *rw = &rows[nr++];
            memset(rw, 0, sizeof *rw);
            snprintf(rw->dev, sizeof rw->dev, "%s:%d", md_backend_name(be), d);
            if (be == md_device_backend(c->dev) && d == c->info->index) {
                snprintf(rw->name, sizeof rw->name, "%s", c->info->name);
                rw->sps = main_r->train_samples_per_s;
                rw->lat = main_r->inf_ms.p50;
                rw->ok = 1;
            } else {
                md_device *dev = NULL;
                struct md_device_opts dopts = {.threads = c->o->threads, .memory_fraction = c->o->memory_fraction,
                                               .allow_tf32 = c->o->tf32, .fallback = c->o->fallback};
                char label[64];
                snprintf(label, sizeof label, "device comparison, %s", rw->dev);
                md_progress_label(label);
                md_status st = md_device_open(be, d, &dopts, &dev);
                if (st == MD_OK) {
                    snprintf(rw->name, sizeof rw->name, "%s", md_device_get_info(dev)->name);
                    struct md_bench_setup s = setup_for(c, c->batch, iters, iters, 5.0);
                    struct md_bench_result r;
                    st = run(c, dev, &s, &r);
                    rw->ok = st == MD_OK;
                    rw->sps = r.train_samples_per_s;
                    rw->lat = r.inf_ms.p50;
                    md_bench_result_clear(&r);
                }
                if (st != MD_OK) snprintf(rw->err, sizeof rw->err, "%s", md_errmsg());
                md_device_close(dev);
                if (st == MD_ERR_INTERRUPTED) {
                    md_progress_end(pg);
                    return st;
                }
            }
            md_progress_update(nr);
            if (strncmp(rw->dev, "cpu", 3) == 0 && rw->ok) cpu_sps = rw->sps;
        }
    }
    md_progress_end(pg);
    md_section("Device comparison");
    md_out("  %-10s %-40s %14s %14s %10s\n", "DEVICE", "NAME", "SAMPLES/S", "INFER P50 MS", "VS CPU");
    for (int i = 0; i < nr; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "device", rows[i].dev);
        cJSON_AddStringToObject(o, "name", rows[i].name);
        cJSON_AddStringToObject(o, "status", rows[i].ok ? "ok" : "error");
        if (rows[i].ok) {
            cJSON_AddNumberToObject(o, "samples_per_s", rows[i].sps);
            cJSON_AddNumberToObject(o, "latency_ms", rows[i].lat);
            if (cpu_sps > 0) cJSON_AddNumberToObject(o, "speedup_vs_cpu", rows[i].sps / cpu_sps);
            else cJSON_AddNullToObject(o, "speedup_vs_cpu");
            char vs[32] = "-";
            if (cpu_sps > 0) snprintf(vs, sizeof vs, "%.2fx", rows[i].sps / cpu_sps);
            md_out("  %-10s %-40.40s %14.1f %14.2f %10s\n", rows[i].dev, rows[i].name, rows[i].sps, rows[i].lat, vs);
        } else {
            cJSON_AddStringToObject(o, "error", rows[i].err);
            md_out("  %-10s %-40.40s %14s %14s %10s  %s\n", rows[i].dev, rows[i].name, "-", "-", "-", rows[i].err);
        }
        cJSON_AddItemToArray(arr, o);
    }
    if (nr <= 1) warn(c->job, "--compare-devices: only %s is available here; nothing to compare with", nr ? rows[0].dev : "no device");
    return MD_OK;
}

/* One repetition of an ablation: the setting on, then off. */
static md_status ablate_pair(struct ctx *c, const char *tok, const struct md_bench_result *main_r, int workers,
                             double *on, double *off, char *note, size_t nn)
{
    md_status st = MD_OK;
    *on = *off = 0;
    if (strcmp(tok, "workers") == 0) {
        double lon = 0, loff = 0;
        struct md_data *data = c->data[c->mopts.layout == MD_NHWC];
        st = md_bench_loader(data, &c->bopts, c->batch, workers, 7, REP_BUDGET_S, &lon);
        if (st == MD_OK) st = md_bench_loader(data, &c->bopts, c->batch, 0, 7, REP_BUDGET_S, &loff);
        /* the pipeline runs at the slower of loader and step */
        double step = main_r->train_samples_per_s;
        *on = lon < step ? lon : step;
        *off = loff < step ? loff : step;
        return st;
    }
    struct md_bench_setup s_on = setup_for(c, c->batch, rep_iters(c->o), 0, REP_BUDGET_S), s_off;
    s_on.warmup_iters = rep_warmup(c->o);
    s_off = s_on;
    if (strcmp(tok, "compile") == 0) {
        s_on.mopts.compile = 1;
        s_off.mopts.compile = 0;
    } else if (strcmp(tok, "channels-last") == 0) {
        s_on.mopts.layout = MD_NHWC;
        s_off.mopts.layout = MD_NCHW;
    } else {
        md_dtype h = best_half(c->info);
        if (h == MD_F32) {
            snprintf(note, nn, "not measured: the device has no half precision");
            return MD_ERR_UNSUPPORTED;
        }
        s_on.mopts.compute_dtype = h;
        s_off.mopts.compute_dtype = MD_F32;
        snprintf(note, nn, "%s vs fp32", md_dtype_name(h));
    }
    struct md_bench_result r;
    st = run(c, c->dev, &s_on, &r);
    *on = r.train_samples_per_s;
    md_bench_result_clear(&r);
    if (st != MD_OK) return st;
    st = run(c, c->dev, &s_off, &r);
    *off = r.train_samples_per_s;
    md_bench_result_clear(&r);
    return st;
}

/* Each setting on and off MD_REC_MIN_REPS times, interleaved (on off on off
 * on off), so a machine that drifts during the run moves both sides alike;
 * md_rec_compare turns the pairs into a verdict. */
static md_status ablate(struct ctx *c, const struct md_bench_result *main_r)
{
    static const char *const known[] = {"compile", "channels-last", "precision", "workers"};
    char list[128];
    int nset = 0, pairs_done = 0;
    snprintf(list, sizeof list, "%s", c->o->ablate);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int ok = 0;
        for (int i = 0; i < 4; i++) ok |= strcmp(tok, known[i]) == 0;
        if (!ok) return md_errf(MD_ERR_USAGE, "--ablate: unknown setting '%s' (compile, channels-last, precision, workers)", tok);
        nset++;
    }
    cJSON *arr = cJSON_AddArrayToObject(c->bench, "ablations");
    md_section("Ablations");
    md_out("  %-14s %14s %14s %9s %15s  %s\n", "SETTING", "ON SAMPLES/S", "OFF SAMPLES/S", "ON/OFF", "PAIRS", "VERDICT");
    snprintf(list, sizeof list, "%s", c->o->ablate);
    char *save = NULL;
    /* one phase over every on/off pair of every setting */
    int pg = md_progress_begin("ablation", (double)nset * MD_REC_MIN_REPS, "pairs");
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        struct md_rec_ablation a;
        memset(&a, 0, sizeof a);
        char note[200] = "";
        md_status st = MD_OK;
        int workers = md_cpu_logical_cores() < 4 ? md_cpu_logical_cores() : 4;
        if (workers < 2) workers = 2;
        char label[64];
        snprintf(label, sizeof label, "ablation, %s on/off", tok);
        md_progress_label(label);
        int pairs_before = pairs_done;
        for (int rep = 0; rep < MD_REC_MIN_REPS && st == MD_OK; rep++) {
            double on, off;
            st = ablate_pair(c, tok, main_r, workers, &on, &off, note, sizeof note);
            md_progress_update(++pairs_done);
            if (st == MD_OK && on > 0 && off > 0) {
                a.on[a.n] = on;
                a.off[a.n] = off;
                a.n++;
            }
        }
        pairs_done = pairs_before + MD_REC_MIN_REPS; /* a setting that stopped early */
        md_progress_update(pairs_done);
        if (st == MD_ERR_INTERRUPTED) {
            md_progress_end(pg);
            return st;
        }
        if (st != MD_OK && st != MD_ERR_UNSUPPORTED) {
            size_t l = strlen(note);
            snprintf(note + l, sizeof note - l, "%snot measured%s: %s", l ? "; " : "",
                     a.n ? " on every repetition" : "", md_errmsg());
        }
        if (strcmp(tok, "workers") == 0 && a.n > 0)
            snprintf(note, sizeof note, "loader with %d worker%s against 0, capped at the step's %.0f samples/s",
                     workers, md_s(workers), main_r->train_samples_per_s);
        struct md_rec_compare cmp;
        md_rec_compare(&a, &cmp);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "feature", tok);
        cJSON_AddNumberToObject(o, "repetitions", a.n);
        if (strcmp(tok, "workers") == 0) cJSON_AddNumberToObject(o, "workers", workers);
        static const char *const verdicts[] = {"not measured", "too few runs", "no difference", "on faster",
                                               "off faster"};
        if (a.n > 0) {
            cJSON_AddNumberToObject(o, "on_samples_per_s", cmp.on_median);
            cJSON_AddNumberToObject(o, "off_samples_per_s", cmp.off_median);
            add_runs(o, "on_runs", a.on, a.n);
            add_runs(o, "off_runs", a.off, a.n);
            cJSON_AddNumberToObject(o, "speedup", cmp.speedup);
            cJSON_AddNumberToObject(o, "speedup_min", cmp.ratio_min);
            cJSON_AddNumberToObject(o, "speedup_max", cmp.ratio_max);
            cJSON_AddNumberToObject(o, "noise", cmp.noise);
            char pairs[32];
            snprintf(pairs, sizeof pairs, "%.2f-%.2fx (%d)", cmp.ratio_min, cmp.ratio_max, a.n);
            md_out("  %-14s %14.1f %14.1f %8.2fx %15s  %s%s%s\n", tok, cmp.on_median, cmp.off_median, cmp.speedup,
                   pairs, verdicts[cmp.verdict], note[0] ? "; " : "", note);
        } else {
            cJSON_AddNullToObject(o, "speedup");
            md_out("  %-14s %14s %14s %9s %15s  %s\n", tok, "-", "-", "-", "-", note);
            if (!strstr(note, "no half")) warn(c->job, "--ablate %s: %s", tok, note);
        }
        cJSON_AddStringToObject(o, "verdict", verdicts[cmp.verdict]);
        cJSON_AddStringToObject(o, "note", note);
        cJSON_AddItemToArray(arr, o);
    }
    md_progress_end(pg);
    md_out("  samples/s: medians of %d interleaved on/off pairs; ON/OFF: median of the per-pair ratios; PAIRS:\n"
           "  their range. A verdict needs ON/OFF to differ from 1 by more than the range (and %.0f%%)\n",
           MD_REC_MIN_REPS, MD_REC_NOISE_FLOOR * 100);
    return MD_OK;
}

/* The sweep's points as the recommendations see them (report.benchmark.sweep). */
static int sweep_points(const cJSON *B, struct md_rec_sweep_point *sweep, int max)
{
    int n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, jget(B, "sweep"))
    {
        if (n >= max) break;
        struct md_rec_sweep_point *s = &sweep[n++];
        memset(s, 0, sizeof *s);
        s->batch_size = (int)jnum(p, "batch_size", 0);
        const cJSON *stt = jget(p, "status");
        s->ok = cJSON_IsString(stt) && strcmp(stt->valuestring, "ok") == 0;
        s->samples_per_s = jnum(p, "samples_per_s", 0);
        s->min_samples_per_s = jnum(p, "samples_per_s_min", s->samples_per_s);
        s->max_samples_per_s = jnum(p, "samples_per_s_max", s->samples_per_s);
        s->reps = (int)jnum(p, "repetitions", 1);
        s->peak_bytes = (long long)jnum(p, "peak_bytes", jnum(p, "planned_bytes", 0));
    }
    return n;
}

/* With both the finder and the sweep: the finder's fastest batch is the
 * sweep's best median among the batches the finder found to fit, the same
 * figure the batch-size recommendation quotes. */
static void finder_fastest(struct ctx *c)
{
    cJSON *fb = cJSON_GetObjectItemCaseSensitive(c->bench, "find_batch_size");
    if (!fb) return;
    struct md_rec_sweep_point pts[64];
    int n = sweep_points(c->bench, pts, 64), k = 0;
    int max = (int)jnum(fb, "max_batch", 0);
    for (int i = 0; i < n; i++)
        if (pts[i].batch_size <= max) pts[k++] = pts[i];
    int best = -1;
    if (k > 0) md_rec_knee(pts, k, 0, 0.9, &best);
    if (best < 0) {
        cJSON_AddNullToObject(fb, "fastest_batch");
        cJSON_AddNullToObject(fb, "fastest_samples_per_s");
        return;
    }
    cJSON_AddNumberToObject(fb, "fastest_batch", pts[best].batch_size);
    cJSON_AddNumberToObject(fb, "fastest_samples_per_s", pts[best].samples_per_s);
    cJSON_AddStringToObject(fb, "fastest_from", "the batch-size sweep (median of its repetitions)");
}

static int wants_bench(const md_options *o)
{
    return o->benchmark || o->benchmark_only || o->ci || o->batch_sweep[0] || o->find_batch_size ||
           o->compare_devices || o->ablate[0] || md_profile_wants_bench(o);
}

md_status md_stage_bench(md_job *job)
{
    md_options *o = job->opts;
    if (!wants_bench(o)) return MD_OK;
    struct ctx c;
    memset(&c, 0, sizeof c);
    c.job = job;
    c.o = o;
    c.dev = job->dev;
    c.info = md_device_get_info(job->dev);
    /* the model the model stage loaded: --model, the config's inline object, or small_cnn */
    snprintf(c.model, sizeof c.model, "%s", o->model[0] ? o->model : "small_cnn");
    if (!md_options_given(o, "model") && o->config[0] && md_json_load_file(o->config, &c.config) == MD_OK) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(c.config, "model");
        if (cJSON_IsObject(m)) {
            c.inline_model = m;
            snprintf(c.model, sizeof c.model, "%s: model", o->config);
        }
    }
    md_resolve_model(o, &c.mopts);
    if (job->model) { /* the parameters the model stage fitted to the data (a forecast's window, variates) */
        const struct md_model_opts *jm = md_model_get_opts(job->model);
        c.mopts.nsets = jm->nsets;
        memcpy(c.mopts.sets, jm->sets, sizeof c.mopts.sets);
    }
    c.mopts.compute_dtype = compute_dtype(o, c.info);
    md_resolve_bench(o, &c.bopts);
    c.batch = o->batch_size > 0 ? o->batch_size : 64;
    struct md_mem_stats ms;
    md_dev_mem_stats(c.dev, &ms);
    /* What a measurement may plan: the cap, else half the free RAM on the
     * CPU (no swap storms), else 90% of the device. */
    if (ms.limit > 0) c.budget = ms.limit - ms.current;
    else if (md_device_kind(c.dev) == MD_BACKEND_CPU) c.budget = md_mem_available_bytes() / 2;
    else if (c.info->total_memory > 0) c.budget = c.info->total_memory / 10 * 9 - ms.current;
    c.bench = cJSON_AddObjectToObject(job->report, "benchmark");

    struct md_bench_result main_r;
    memset(&main_r, 0, sizeof main_r);
    md_status st = MD_OK;
    /* said (and flushed) before measuring: a long benchmark shows it runs */
    md_out("\nBenchmarking %s on %s:%d, batch %d ...\n", c.model, c.info->backend, c.info->index, c.batch);
    fflush(stdout);
    if (o->find_batch_size) {
        /* first, so the benchmark runs at a batch that fits */
        st = find_batch(&c);
        int fit = (int)jnum(jget(c.bench, "find_batch_size"), "max_batch", 0);
        if (st == MD_OK && fit > 0 && fit < c.batch) {
            char v[32], why[160];
            snprintf(v, sizeof v, "%d", fit);
            snprintf(why, sizeof why, "--find-batch-size: %d does not fit; benchmarked at the largest batch that does", c.batch);
            md_job_setting(job, "benchmark_batch_size", v, why);
            md_out("  benchmarking at batch %d (the largest that fits)\n", fit);
            c.batch = fit;
        }
    }
    if (st == MD_OK) st = main_benchmark(&c, &main_r);
    if (st == MD_OK) st = md_interrupt_check("during the benchmark");
    if (st == MD_OK && o->batch_sweep[0]) st = batch_sweep(&c);
    if (st == MD_OK && o->find_batch_size) finder_fastest(&c);
    if (st == MD_OK && o->compare_devices) st = compare_devices(&c, &main_r);
    if (st == MD_OK && o->ablate[0]) st = ablate(&c, &main_r);
    md_bench_result_clear(&main_r);
    md_data_free(c.data[0]);
    md_data_free(c.data[1]);
    cJSON_Delete(c.config);
    return st;
}

/* ---- recommendations and --ci thresholds ------------------------------------------------ */

static void rec_inputs(md_job *job, struct md_rec_in *in, struct md_rec_sweep_point *sweep, int *nsweep,
                       struct md_preset *preset)
{
    const md_options *o = job->opts;
    const struct md_device_info *info = md_device_get_info(job->dev);
    const cJSON *B = jget(job->report, "benchmark");
    memset(in, 0, sizeof *in);
    in->kind = md_device_kind(job->dev);
    in->device_name = info->name;
    in->device_memory = info->total_memory;
    struct md_mem_stats ms;
    md_dev_mem_stats(job->dev, &ms);
    in->memory_limit = ms.limit;
    in->unified_memory = info->unified_memory;
    in->batch_size = (int)jnum(B, "batch_size", o->batch_size);
    in->precision = o->precision;
    in->amp = o->amp;
    in->supports_fp16 = info->supports_fp16;
    in->supports_bf16 = info->supports_bf16;
    in->compile = o->compile;
    in->channels_last = o->channels_last;
    in->grad_ckpt = o->grad_ckpt;
    in->num_workers = o->num_workers;
    in->pin_memory = o->pin_memory > 0;
    in->benefits_from_pinned = info->benefits_from_pinned;
    /* images-csv keeps decoded images without the flag when they fit */
    in->cache_images = o->cache_images || (job->data && md_data_cache_estimate(job->data) > 0);
    in->logical_cores = md_cpu_logical_cores();
    *nsweep = sweep_points(B, sweep, 64);
    in->sweep = sweep;
    in->n_sweep = *nsweep;
    const cJSON *fb = jget(B, "find_batch_size");
    if (fb) {
        in->finder_ran = 1;
        in->finder_max_batch = (int)jnum(fb, "max_batch", 0);
        in->finder_capped = cJSON_IsTrue(jget(fb, "limited_by_search_cap"));
    }
    const cJSON *p;
    cJSON_ArrayForEach(p, jget(B, "ablations"))
    {
        const cJSON *f = jget(p, "feature");
        if (!cJSON_IsString(f)) continue;
        struct md_rec_ablation a;
        memset(&a, 0, sizeof a);
        const cJSON *on = jget(p, "on_runs"), *off = jget(p, "off_runs");
        if (cJSON_IsArray(on) && cJSON_IsArray(off)) {
            for (int i = 0; i < cJSON_GetArraySize(on) && i < cJSON_GetArraySize(off) && a.n < MD_REC_MAX_REPS; i++) {
                const cJSON *x = cJSON_GetArrayItem(on, i), *y = cJSON_GetArrayItem(off, i);
                if (!cJSON_IsNumber(x) || !cJSON_IsNumber(y)) continue;
                a.on[a.n] = x->valuedouble;
                a.off[a.n] = y->valuedouble;
                a.n++;
            }
        } else if (jnum(p, "on_samples_per_s", 0) > 0 && jnum(p, "off_samples_per_s", 0) > 0) {
            /* a report without repetitions: one pair, too few for a verdict */
            a.n = 1;
            a.on[0] = jnum(p, "on_samples_per_s", 0);
            a.off[0] = jnum(p, "off_samples_per_s", 0);
        }
        if (strcmp(f->valuestring, "compile") == 0) in->abl_compile = a;
        else if (strcmp(f->valuestring, "channels-last") == 0) in->abl_channels_last = a;
        else if (strcmp(f->valuestring, "precision") == 0) in->abl_precision = a;
        else if (strcmp(f->valuestring, "workers") == 0) {
            in->abl_workers = a;
            in->abl_workers_count = (int)jnum(p, "workers", 0);
        }
    }
    const cJSON *dj = jget(B, "data");
    in->loader_samples_per_s = jnum(dj, "loader_samples_per_s", 0);
    in->step_samples_per_s = jnum(dj, "step_samples_per_s", 0);
    if (job->data) {
        in->dataset_bytes = md_data_cache_estimate(job->data);
        in->dataset_resident = md_data_resident_bytes(job->data) > 0;
    }
    in->ram_available = md_mem_available_bytes();
    const cJSON *m = jget(B, "memory");
    in->params_bytes = (long long)jnum(m, "params_bytes", 0);
    in->grads_bytes = (long long)jnum(m, "grads_bytes", 0);
    in->optimizer_bytes = (long long)jnum(m, "optimizer_bytes", 0);
    in->activations_bytes = (long long)jnum(m, "activations_bytes", 0);
    in->peak_bytes = (long long)jnum(m, "device_peak_bytes", 0);
    in->gemm_peak_gflops = jnum(jget(B, "peak"), "gflops", 0);
    md_profile_rec_inputs(job->report, in);
    const cJSON *w = jget(jget(jget(job->report, "system"), "blas"), "warning");
    in->blas_warning = cJSON_IsString(w) ? w->valuestring : "";
    int found = 0;
    if (in->kind == MD_BACKEND_METAL && md_preset_find(NULL, info->name, preset, &found) == MD_OK && found)
        in->preset = preset;
}

/* The final training loss: the trainer's if it reported one, else the
 * benchmark's last timed step. */
static int final_loss(const cJSON *report, double *loss, const char **from)
{
    const cJSON *t = jget(report, "training");
    static const char *const keys[] = {"final_train_loss", "final_loss", "train_loss"};
    for (int i = 0; i < 3; i++) {
        const cJSON *v = jget(t, keys[i]);
        if (cJSON_IsNumber(v)) {
            *loss = v->valuedouble;
            *from = "training";
            return 1;
        }
    }
    const cJSON *col = jget(jget(t, "curves"), "train_loss"); /* the trainer's columns */
    if (cJSON_IsArray(col) && cJSON_GetArraySize(col) > 0) {
        const cJSON *v = cJSON_GetArrayItem(col, cJSON_GetArraySize(col) - 1);
        if (cJSON_IsNumber(v)) {
            *loss = v->valuedouble;
            *from = "training";
            return 1;
        }
    }
    const cJSON *ep = jget(t, "epochs");
    if (cJSON_IsArray(ep) && cJSON_GetArraySize(ep) > 0) {
        const cJSON *last = cJSON_GetArrayItem(ep, cJSON_GetArraySize(ep) - 1);
        const cJSON *v = jget(last, "train_loss");
        if (cJSON_IsNumber(v)) {
            *loss = v->valuedouble;
            *from = "training";
            return 1;
        }
    }
    const cJSON *v = jget(jget(jget(report, "benchmark"), "training"), "final_loss");
    if (cJSON_IsNumber(v)) {
        *loss = v->valuedouble;
        *from = "benchmark training steps";
        return 1;
    }
    return 0;
}

void md_ci_check(md_job *job, char *msg, size_t msg_n, int print)
{
    const md_options *o = job->opts;
    cJSON *ci = cJSON_AddObjectToObject(job->report, "ci");
    msg[0] = '\0';
    double sps = jnum(jget(jget(job->report, "benchmark"), "training"), "samples_per_s", -1);
    cJSON *tj = cJSON_AddObjectToObject(ci, "throughput");
    add_num(tj, "samples_per_s", sps >= 0 ? sps : (double)NAN);
    if (o->expect_min_throughput > 0) {
        cJSON_AddNumberToObject(tj, "min", o->expect_min_throughput);
        int pass = sps >= o->expect_min_throughput;
        cJSON_AddBoolToObject(tj, "passed", pass);
        if (!pass)
            snprintf(msg, msg_n, "training throughput %.1f samples/s is below --expect-min-throughput %g", sps,
                     o->expect_min_throughput);
    } else {
        cJSON_AddNullToObject(tj, "passed");
    }
    double loss = (double)NAN;
    const char *from = "";
    int have = final_loss(job->report, &loss, &from);
    cJSON *lj = cJSON_AddObjectToObject(ci, "loss");
    add_num(lj, "final_loss", have ? loss : (double)NAN);
    cJSON_AddStringToObject(lj, "from", have ? from : "none");
    if (o->expect_max_loss > 0) {
        cJSON_AddNumberToObject(lj, "max", o->expect_max_loss);
        int pass = have && isfinite(loss) && loss <= o->expect_max_loss;
        cJSON_AddBoolToObject(lj, "passed", pass);
        if (!pass) {
            size_t l = strlen(msg);
            snprintf(msg + l, msg_n - l, "%sfinal loss %s%.4g (%s) is above --expect-max-loss %g", l ? "; " : "",
                     isfinite(loss) ? "" : "not finite: ", loss, have ? from : "not measured", o->expect_max_loss);
        }
    } else {
        cJSON_AddNullToObject(lj, "passed");
    }
    if (!print) return;
    md_section("CI");
    if (sps >= 0) {
        char th[64] = "no threshold";
        if (o->expect_min_throughput > 0)
            snprintf(th, sizeof th, "%s %g", sps >= o->expect_min_throughput ? "ok, at least" : "MISSED, below", o->expect_min_throughput);
        md_out("  %-12s %.1f samples/s (%s)\n", "throughput", sps, th);
    } else {
        md_out("  %-12s not measured\n", "throughput");
    }
    if (have) {
        char th[64] = "no threshold";
        if (o->expect_max_loss > 0)
            snprintf(th, sizeof th, "%s %g", isfinite(loss) && loss <= o->expect_max_loss ? "ok, at most" : "MISSED, above", o->expect_max_loss);
        md_out("  %-12s %.4f from the %s (%s)\n", "final loss", loss, from, th);
    } else {
        md_out("  %-12s not measured\n", "final loss");
    }
    if (!msg[0]) md_out("  all thresholds met\n");
}

/* One recommendation as the text shows it, indented by `indent`. */
void md_recommendation_print(const cJSON *e, int indent)
{
    const cJSON *t = jget(e, "topic"), *a = jget(e, "advice"), *f = jget(e, "figure"), *s = jget(e, "source"),
                *c = jget(e, "cost");
    md_out("%*s%-22s %s\n", indent, "", cJSON_IsString(t) ? t->valuestring : "",
           cJSON_IsString(a) ? a->valuestring : "");
    if (cJSON_IsString(f) && f->valuestring[0])
        md_out("%*s%-22s   %s: %s\n", indent, "", "", cJSON_IsString(s) ? s->valuestring : "measured", f->valuestring);
    if (cJSON_IsString(c) && c->valuestring[0]) md_out("%*s%-22s   cost: %s\n", indent, "", "", c->valuestring);
}

int md_recommend_report(md_job *job, const cJSON *system, int print)
{
    struct md_rec_in in;
    struct md_rec_sweep_point sweep[64];
    struct md_preset preset;
    int nsweep = 0;
    rec_inputs(job, &in, sweep, &nsweep, &preset);
    if (system) { /* a model's entry of the diagnostics run: the run's system facts */
        const cJSON *w = jget(jget(system, "blas"), "warning");
        in.blas_warning = cJSON_IsString(w) ? w->valuestring : "";
    }
    struct md_rec recs[MD_REC_MAX];
    int n = md_recommend(&in, recs, MD_REC_MAX);
    cJSON *arr = md_recs_to_json(recs, n);
    cJSON_AddItemToObject(job->report, "recommendations", arr);
    warnings_of(job); /* the key is always there */
    if (!print) return n;
    md_section("Recommendations");
    if (n == 0)
        md_out("  none: %s\n", jget(job->report, "benchmark") ? "nothing measured suggests a change"
                                                                : "run with --benchmark (or --batch-sweep, --ablate) to measure");
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) md_recommendation_print(e, 2);
    return n;
}

md_status md_stage_recommend(md_job *job)
{
    /* The diagnostics run advised and judged each model in its own entry
     * of report.models (src/app/diagnostics.c). */
    if (cJSON_IsArray(jget(job->report, "models"))) {
        warnings_of(job);
        return MD_OK;
    }
    md_recommend_report(job, NULL, 1);
    md_status leak = md_profile_leak_status(job);
    if (!job->opts->ci) return leak;
    char msg[600];
    md_ci_check(job, msg, sizeof msg, 1);
    if (msg[0]) return md_errf(MD_ERR_THRESHOLD, "--ci: %s", msg);
    return leak == MD_OK ? MD_OK : md_profile_leak_status(job); /* its message again, after the CI section */
}

/* ---- --html and --junit ----------------------------------------------------------------- */

/* The threshold cases ("throughput", "loss") of one report (the run's, or
 * a model's entry of the diagnostics run) into k[0..1]; `ran`: the run or
 * model got as far as its checks. */
static void junit_checks(const cJSON *r, int ran, struct md_junit_case *k, const char *who)
{
    static const char *const names[] = {"throughput", "loss"};
    for (int i = 0; i < 2; i++, k++) {
        snprintf(k->name, sizeof k->name, "%s", names[i]);
        const cJSON *t = jget(jget(r, "ci"), names[i]);
        const cJSON *passed = jget(t, "passed");
        const char *flag = i == 0 ? "--expect-min-throughput" : "--expect-max-loss";
        if (!t) {
            k->result = ran ? MD_JUNIT_SKIP : MD_JUNIT_ERROR;
            snprintf(k->message, sizeof k->message, "%s%s", who,
                     ran ? "not measured" : "the run failed before the check");
        } else if (!cJSON_IsBool(passed)) {
            k->result = MD_JUNIT_SKIP;
            snprintf(k->message, sizeof k->message, "%s%s not given", who, flag);
        } else if (i == 0) {
            k->result = cJSON_IsTrue(passed) ? MD_JUNIT_PASS : MD_JUNIT_FAIL;
            snprintf(k->message, sizeof k->message, "%straining throughput %.1f samples/s, %s %g", who,
                     jnum(t, "samples_per_s", 0), flag, jnum(t, "min", 0));
        } else {
            k->result = cJSON_IsTrue(passed) ? MD_JUNIT_PASS : MD_JUNIT_FAIL;
            snprintf(k->message, sizeof k->message, "%sfinal loss %.4g (%s), %s %g", who,
                     jnum(t, "final_loss", (double)NAN),
                     cJSON_IsString(jget(t, "from")) ? jget(t, "from")->valuestring : "?", flag, jnum(t, "max", 0));
        }
    }
}

/* The diagnostics run: "run", "throughput", "loss" per model of
 * diagnostics.model_names, classname "mpsdiag.<model>"; a model the run
 * never reached is an error in each. Returns how many cases. */
static int junit_models(const cJSON *r, struct md_junit_case *c, int max)
{
    int n = 0;
    const cJSON *name;
    cJSON_ArrayForEach(name, jget(jget(r, "diagnostics"), "model_names"))
    {
        if (!cJSON_IsString(name) || n + 3 > max) continue;
        const cJSON *m = NULL, *e;
        cJSON_ArrayForEach(e, jget(r, "models"))
        {
            const cJSON *nm = jget(e, "name");
            if (cJSON_IsString(nm) && strcmp(nm->valuestring, name->valuestring) == 0) m = e;
        }
        char who[300];
        snprintf(who, sizeof who, "%s: ", name->valuestring);
        const cJSON *res = jget(jget(m, "status"), "result"), *err = jget(jget(m, "status"), "error");
        int ran = cJSON_IsString(res) && strcmp(res->valuestring, "ok") == 0;
        struct md_junit_case *k = &c[n];
        for (int i = 0; i < 3; i++) snprintf(k[i].classname, sizeof k[i].classname, "mpsdiag.%s", name->valuestring);
        snprintf(k->name, sizeof k->name, "run");
        k->time_s = jnum(m, "duration_s", 0);
        k->result = ran ? MD_JUNIT_PASS : MD_JUNIT_ERROR;
        if (!m) snprintf(k->message, sizeof k->message, "%snot run: the run stopped before it", who);
        else if (!ran)
            snprintf(k->message, sizeof k->message, "%s%s", who,
                     cJSON_IsString(err) ? err->valuestring : cJSON_IsString(res) ? res->valuestring : "failed");
        junit_checks(m, ran, k + 1, who);
        n += 3;
    }
    return n;
}

static md_status write_junit(md_job *job)
{
    const cJSON *r = job->report;
    const cJSON *status = jget(r, "status");
    const cJSON *res = jget(status, "result");
    const char *result = cJSON_IsString(res) ? res->valuestring : "unknown";
    const cJSON *err = jget(status, "error");
    enum { MAXC = 3 + 3 * 64 };
    struct md_junit_case *c = md_calloc(MAXC, sizeof *c);
    if (!c) return md_errf(MD_ERR_OOM, "--junit: out of host memory");
    snprintf(c[0].name, sizeof c[0].name, "run");
    c[0].time_s = jnum(r, "duration_s", 0);
    int ran = strcmp(result, "ok") == 0 || strcmp(result, "threshold") == 0;
    c[0].result = ran ? MD_JUNIT_PASS : MD_JUNIT_ERROR;
    snprintf(c[0].message, sizeof c[0].message, "%s", ran ? "" : cJSON_IsString(err) ? err->valuestring : result);
    int n = 1;
    if (jget(r, "diagnostics")) n += junit_models(r, c + 1, MAXC - 1);
    else {
        junit_checks(r, ran, c + 1, "");
        n += 2;
    }
    const cJSON *ts = jget(r, "started_at");
    md_status st = md_junit_write(job->opts->junit, "mpsdiag", c, n, c[0].time_s,
                                  cJSON_IsString(ts) ? ts->valuestring : NULL);
    md_free(c);
    return st;
}

md_status md_stage_outputs(md_job *job)
{
    md_status st = MD_OK, s2;
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", md_errmsg());
    if (job->opts->html[0]) {
        if ((s2 = md_html_write(job->report, job->opts->html)) == MD_OK) md_out("HTML report written to %s\n", job->opts->html);
        else st = s2;
    }
    if (job->opts->junit[0]) {
        if ((s2 = write_junit(job)) == MD_OK) md_out("JUnit result written to %s\n", job->opts->junit);
        else if (st == MD_OK) st = s2;
    }
    if (st == MD_OK) md_errf(MD_OK, "%s", saved); /* keep the run's own message */
    return st;
}
