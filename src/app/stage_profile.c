/* stage_profile.c - report.profile and the Profile section: time per layer
 * against the device's peaks, memory as the tool, the driver and the OS see
 * it, the leak check and energy per step (docs/doctor.md). The measurement
 * is the main benchmark's (diag/bench.c); the rules are in diag/profile.c. */
#define _POSIX_C_SOURCE 200809L
#include "app/stage_profile.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/platform.h"
#include "diag/profile.h"

/* Steps of the leak check that --profile runs when --leak-check is not given. */
#define PROFILE_LEAK_STEPS 20
/* Rows of the per-layer table without --verbose. */
#define PROFILE_ROWS 12

static const cJSON *jget(const cJSON *o, const char *k) { return o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL; }
static double jnum(const cJSON *o, const char *k, double dflt)
{
    const cJSON *it = jget(o, k);
    return cJSON_IsNumber(it) ? it->valuedouble : dflt;
}

static void add_num(cJSON *o, const char *k, double v)
{
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

int md_profile_wants_bench(const md_options *o) { return o->profile || o->leak_check > 0; }

void md_profile_defaults(md_job *job)
{
    md_options *o = job->opts;
    if (!md_profile_wants_bench(o) || o->benchmark || o->benchmark_only || md_options_given(o, "epochs")) return;
    o->benchmark_only = 1; /* settings.c says "epochs 0: --benchmark-only: no training" */
}

void md_profile_setup(const md_options *o, struct md_bench_setup *s)
{
    s->measure_energy = 1;
    s->leak_steps = o->leak_check > 0 ? o->leak_check : o->profile ? PROFILE_LEAK_STEPS : 0;
}

void md_profile_energy_line(const struct md_bench_result *r)
{
    if (r->energy_ok && r->energy_steps > 0 && r->energy_j > 0) {
        double per = r->energy_j / r->energy_steps;
        md_out("  %-30s %12.4g J per step, %.4g samples/J, %.1f W over %.2f s (%s)\n", "energy", per,
               (double)r->batch / per, r->energy_window_s > 0 ? r->energy_j / r->energy_window_s : 0.0,
               r->energy_window_s, r->energy_source);
    } else if (r->energy_ok) {
        md_out("  %-30s %12s the counter did not move in %.3f s (%s): too short a window for its resolution\n",
               "energy", "-", r->energy_window_s, r->energy_source);
    } else {
        md_out("  %-30s not available: %s\n", "energy", r->energy_reason[0] ? r->energy_reason : "not measured");
    }
}

static cJSON *energy_json(const struct md_bench_result *r)
{
    cJSON *e = cJSON_CreateObject();
    int ok = r->energy_ok && r->energy_steps > 0 && r->energy_j > 0;
    cJSON_AddBoolToObject(e, "available", ok);
    if (r->energy_source[0]) cJSON_AddStringToObject(e, "source", r->energy_source);
    else cJSON_AddNullToObject(e, "source");
    if (ok) {
        cJSON_AddNullToObject(e, "reason");
    } else {
        const char *why = r->energy_ok ? "the counter did not move during the timed steps: too short a window for "
                                         "its resolution (more --bench-iters)"
                                       : r->energy_reason[0] ? r->energy_reason : "not measured";
        cJSON_AddStringToObject(e, "reason", why);
    }
    cJSON_AddNumberToObject(e, "steps", r->energy_steps);
    add_num(e, "window_s", r->energy_ok ? r->energy_window_s : (double)NAN);
    add_num(e, "joules", ok ? r->energy_j : (double)NAN);
    add_num(e, "joules_per_step", ok ? r->energy_j / r->energy_steps : (double)NAN);
    add_num(e, "samples_per_joule", ok ? (double)r->batch * r->energy_steps / r->energy_j : (double)NAN);
    add_num(e, "watts", ok && r->energy_window_s > 0 ? r->energy_j / r->energy_window_s : (double)NAN);
    return e;
}

/* ---- per-layer rows ---- */

static cJSON *layer_json(const struct md_prof_layer *l, double step_ms, double peak, double gbs)
{
    struct md_prof_rates rt;
    md_prof_rates_of(l, peak, gbs, &rt);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", l->name);
    cJSON_AddStringToObject(o, "type", l->type);
    cJSON_AddNumberToObject(o, "forward_ms", l->fwd_ms);
    cJSON_AddNumberToObject(o, "backward_ms", l->bwd_ms);
    add_num(o, "share", step_ms > 0 ? (l->fwd_ms + l->bwd_ms) / step_ms : (double)NAN);
    cJSON_AddNumberToObject(o, "flops", l->flops);
    cJSON_AddNumberToObject(o, "bytes", l->bytes);
    cJSON_AddNumberToObject(o, "gflops", rt.gflops);
    cJSON_AddNumberToObject(o, "gbytes_per_s", rt.gbs);
    add_num(o, "fraction_of_peak", rt.frac_flops);
    add_num(o, "fraction_of_bandwidth", rt.frac_bytes);
    return o;
}

/* "…end" of a name longer than w columns; returns the printf width to use. */
static int cut_name(const char *name, int w, char *buf, size_t n)
{
    int len = (int)strlen(name);
    if (len <= w) {
        snprintf(buf, n, "%s", name);
        return w;
    }
    snprintf(buf, n, "\xe2\x80\xa6%s", name + len - (w - 1)); /* the ellipsis: 3 bytes, 1 column */
    return w + 2;
}

static void pct_cell(double f, char *buf, size_t n)
{
    if (isfinite(f)) snprintf(buf, n, "%.1f%%", 100 * f);
    else snprintf(buf, n, "-");
}

static void print_layers(const struct md_bench_result *r, double peak, double gbs, const char *basis)
{
    int verbose = md_log_level() >= MD_VERBOSE;
    struct md_prof_layer *rows = md_calloc((size_t)(r->nprof > 0 ? r->nprof : 1), sizeof *rows);
    if (!rows) return;
    int n = md_prof_rows(r->prof, r->nprof, !verbose, rows);
    char a[32], b[32];
    md_out("  %d op-by-op training steps, timed with %s around every layer; FLOP/s against %s, bytes/s "
           "against %s\n",
           MD_BENCH_PROFILE_STEPS, r->timer_events ? "device events" : "the host clock after a sync",
           peak > 0 ? (snprintf(a, sizeof a, "%.4g GFLOP/s (%s)", peak, basis ? basis : "measured"), a) : "no peak",
           gbs > 0 ? (snprintf(b, sizeof b, "%.4g GB/s (copy)", gbs), b) : "no copy rate");
    md_out("\n  %-24s %-11s %8s %8s %6s %9s %6s %8s %6s\n", verbose ? "layer" : "layer or block", "type", "fwd ms",
           "bwd ms", "share", "GFLOP/s", "peak", "GB/s", "copy");
    int shown = verbose || n <= PROFILE_ROWS ? n : PROFILE_ROWS;
    for (int i = 0; i < shown; i++) {
        const struct md_prof_layer *l = &rows[i];
        struct md_prof_rates rt;
        md_prof_rates_of(l, peak, gbs, &rt);
        char name[160], type[40], fp[16], bp[16];
        int w = cut_name(l->name, 24, name, sizeof name);
        if (l->layers > 1) snprintf(type, sizeof type, "%d layers", l->layers);
        else snprintf(type, sizeof type, "%.11s", l->type);
        pct_cell(rt.frac_flops, fp, sizeof fp);
        pct_cell(rt.frac_bytes, bp, sizeof bp);
        double share = r->profiled_step_ms > 0 ? 100 * (l->fwd_ms + l->bwd_ms) / r->profiled_step_ms : 0;
        md_out("  %-*s %-11s %8.3f %8.3f %5.1f%% %9.4g %6s %8.4g %6s\n", w, name, type, l->fwd_ms, l->bwd_ms, share,
               rt.gflops, fp, rt.gbs, bp);
    }
    if (shown < n) md_out("  (%d more rows; --verbose lists every layer)\n", n - shown);
    else if (!verbose && n < r->nprof) md_out("  (%d layers in %d rows: a block's layers are summed; --verbose lists every layer)\n", r->nprof, n);
    md_out("  %-24s %-11s %17.3f ms per step (the layers: %.3f ms)\n", "step", "", r->profiled_step_ms,
           r->profiled_layers_ms);
    md_free(rows);
}

/* ---- memory side by side ---- */

static const char *driver_what(md_backend_kind k)
{
    switch (k) {
    case MD_BACKEND_CUDA: return "cudaMemGetInfo: the whole GPU, other processes and the CUDA context included";
    case MD_BACKEND_METAL: return "MTLDevice currentAllocatedSize of recommendedMaxWorkingSetSize";
    default: return NULL;
    }
}

static cJSON *memory_json(md_job *job, md_device *dev, const struct md_bench_result *r, int print)
{
    struct md_mem_stats ms;
    md_dev_mem_stats(dev, &ms);
    const struct md_device_info *info = md_device_get_info(dev);
    cJSON *m = cJSON_CreateObject();
    cJSON *devs = cJSON_AddArrayToObject(m, "devices");
    cJSON *d = cJSON_CreateObject();
    cJSON_AddItemToArray(devs, d);
    char id[64];
    snprintf(id, sizeof id, "%s:%d", info->backend, info->index);
    cJSON_AddStringToObject(d, "device", id);
    cJSON *t = cJSON_AddObjectToObject(d, "tool");
    cJSON_AddNumberToObject(t, "current_bytes", (double)ms.current);
    cJSON_AddNumberToObject(t, "peak_bytes", (double)ms.peak);
    cJSON_AddNumberToObject(t, "reserved_bytes", (double)ms.reserved);
    cJSON_AddNumberToObject(t, "limit_bytes", (double)ms.limit);
    cJSON *dr = cJSON_AddObjectToObject(d, "driver");
    const char *what = driver_what(md_device_kind(dev));
    int have = ms.driver_total > 0 && what;
    cJSON_AddBoolToObject(dr, "available", have);
    if (have) {
        cJSON_AddStringToObject(dr, "what", what);
        cJSON_AddNumberToObject(dr, "total_bytes", (double)ms.driver_total);
        cJSON_AddNumberToObject(dr, "free_bytes", (double)ms.driver_free);
        cJSON_AddNumberToObject(dr, "used_bytes", (double)(ms.driver_total - ms.driver_free));
    } else {
        cJSON_AddStringToObject(dr, "what", md_device_kind(dev) == MD_BACKEND_CUDA || md_device_kind(dev) == MD_BACKEND_METAL
                                                ? "the driver gave no figures"
                                                : "none: the device's memory is the process's (see process)");
    }
    long long rss = md_rss_bytes(), prss = md_peak_rss_bytes();
    cJSON *p = cJSON_AddObjectToObject(m, "process");
    cJSON_AddNumberToObject(p, "rss_bytes", (double)rss);
    cJSON_AddNumberToObject(p, "peak_rss_bytes", (double)prss);
    cJSON_AddNumberToObject(p, "host_tracked_bytes", (double)md_host_mem()->current);
    cJSON *pl = cJSON_AddObjectToObject(m, "planned");
    long long plan = r->params_bytes + r->grads_bytes + r->optimizer_bytes + r->activations_bytes;
    long long ws = r->peak_bytes > plan ? r->peak_bytes - plan : 0;
    cJSON_AddNumberToObject(pl, "batch_size", r->batch);
    cJSON_AddNumberToObject(pl, "params_bytes", (double)r->params_bytes);
    cJSON_AddNumberToObject(pl, "grads_bytes", (double)r->grads_bytes);
    cJSON_AddNumberToObject(pl, "optimizer_bytes", (double)r->optimizer_bytes);
    cJSON_AddNumberToObject(pl, "activations_bytes", (double)r->activations_bytes);
    cJSON_AddNumberToObject(pl, "workspace_bytes", (double)ws);
    cJSON_AddNumberToObject(pl, "measured_peak_bytes", (double)r->peak_bytes);
    /* the steps' own figures: after the last step of the leak check */
    int n = r->leak_n;
    double in_cur = n ? r->leak_current[n - 1] : (double)NAN, in_res = n ? r->leak_reserved[n - 1] : (double)NAN;
    double in_rss = n ? r->leak_rss[n - 1] : (double)NAN, in_drv = n && r->leak_driver[n - 1] > 0 ? r->leak_driver[n - 1] : (double)NAN;
    add_num(t, "in_steps_current_bytes", in_cur);
    add_num(t, "in_steps_reserved_bytes", in_res);
    if (have) add_num(dr, "in_steps_used_bytes", in_drv);
    add_num(p, "in_steps_rss_bytes", in_rss);
    if (!print) return m;
    char a[32], b[32], c[32], e[32], f[32], g[32];
#define B(v, buf) (isfinite(v) ? md_fmt_bytes((v), buf, sizeof buf) : "-")
    md_out("\n  %-32s %12s %12s %12s %12s\n", "memory", n ? "in the steps" : "", "now", "peak", "limit");
    md_out("  %-32s %12s %12s %12s %12s\n", "mpsdiag's accounting (live)", B(in_cur, a), B((double)ms.current, b),
           B((double)ms.peak, c), ms.limit > 0 ? B((double)ms.limit, e) : "none");
    md_out("  %-32s %12s %12s\n", "mpsdiag's accounting (reserved)", B(in_res, a), B((double)ms.reserved, b));
    if (have)
        md_out("  %-32s %12s %12s %12s %12s\n  %-32s (%s)\n", "driver (used)", B(in_drv, a),
               B((double)(ms.driver_total - ms.driver_free), b), "", B((double)ms.driver_total, c), "", what);
    else
        md_out("  %-32s %s\n", "driver", cJSON_GetStringValue(jget(dr, "what")));
    md_out("  %-32s %12s %12s %12s\n", "process RSS", B(in_rss, a), B((double)rss, b), B((double)prss, c));
#undef B
    md_out("  %-32s params %s, grads %s, optimizer %s, activations %s; workspace and the rest %s (the measured "
           "peak %s less the plan)\n",
           "planned", md_fmt_bytes((double)r->params_bytes, a, sizeof a), md_fmt_bytes((double)r->grads_bytes, b, sizeof b),
           md_fmt_bytes((double)r->optimizer_bytes, c, sizeof c), md_fmt_bytes((double)r->activations_bytes, e, sizeof e),
           md_fmt_bytes((double)ws, f, sizeof f), md_fmt_bytes((double)r->peak_bytes, g, sizeof g));
    (void)job;
    return m;
}

/* ---- leak check ---- */

struct series {
    const char *key, *label;
    const double *v;
    double floor, rel;
};

static cJSON *leak_json(const struct md_bench_result *r, int print, int o_profile, const char *asked)
{
    cJSON *l = cJSON_CreateObject();
    struct series ss[] = {
        {"tool_current_bytes", "mpsdiag (live)", r->leak_current, MD_LEAK_TOOL_FLOOR, MD_LEAK_TOOL_REL},
        {"tool_reserved_bytes", "mpsdiag (reserved)", r->leak_reserved, MD_LEAK_TOOL_FLOOR, MD_LEAK_TOOL_REL},
        {"rss_bytes", "process RSS", r->leak_rss, MD_LEAK_OS_FLOOR, MD_LEAK_OS_REL},
        {"driver_used_bytes", "driver (used)", r->leak_driver, MD_LEAK_OS_FLOOR, MD_LEAK_OS_REL},
    };
    int n = r->leak_n, flagged = 0, warm = 0;
    cJSON_AddNumberToObject(l, "steps", n);
    cJSON_AddStringToObject(l, "asked_by", asked);
    cJSON_AddNumberToObject(l, "injected_bytes_per_step", (double)r->leak_injected);
    cJSON *ser = cJSON_AddObjectToObject(l, "series");
    cJSON *ver = cJSON_AddArrayToObject(l, "verdicts");
    char a[32], b[32], c[32], d[32], e[32];
    struct md_leak_verdict vs[4];
    for (int k = 0; k < 4; k++) {
        cJSON *arr = cJSON_AddArrayToObject(ser, ss[k].key);
        int any = 0;
        for (int i = 0; i < n; i++) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(ss[k].v[i]));
            any |= ss[k].v[i] > 0;
        }
        md_leak_judge(ss[k].v, n, ss[k].floor, ss[k].rel, &vs[k]);
        warm = vs[k].warmup;
        if (!any) continue; /* a figure the device does not report */
        cJSON *v = cJSON_CreateObject();
        cJSON_AddStringToObject(v, "measure", ss[k].key);
        cJSON_AddStringToObject(v, "what", ss[k].label);
        cJSON_AddBoolToObject(v, "judged", vs[k].judged);
        cJSON_AddBoolToObject(v, "flagged", vs[k].flagged);
        cJSON_AddNumberToObject(v, "first_bytes", vs[k].first);
        cJSON_AddNumberToObject(v, "last_bytes", vs[k].last);
        cJSON_AddNumberToObject(v, "growth_bytes", vs[k].growth);
        cJSON_AddNumberToObject(v, "per_step_bytes", vs[k].per_step);
        cJSON_AddNumberToObject(v, "bound_bytes", vs[k].bound);
        cJSON_AddItemToArray(ver, v);
        flagged |= vs[k].flagged;
    }
    cJSON_AddNumberToObject(l, "warmup_steps", warm);
    cJSON_AddBoolToObject(l, "flagged", flagged);
    if (!print) return l;
    md_out("%s  leak check: memory after each of %d more training steps; the first %d are warm-up\n", o_profile ? "\n" : "", n,
           warm);
    md_out("  %-24s %11s %11s %11s %11s %11s  verdict\n", "measure", "first", "last", "growth", "per step", "bound");
    for (int k = 0; k < 4; k++) {
        if (!vs[k].judged) {
            int any = 0;
            for (int i = 0; i < n; i++) any |= ss[k].v[i] > 0;
            if (any || k < 2)
                md_out("  %-24s not judged: %d steps (at least %d, %d after warm-up)\n", ss[k].label, n,
                       MD_LEAK_MIN_STEPS, 3);
            continue;
        }
        md_out("  %-24s %11s %11s %11s %11s %11s  %s\n", ss[k].label, md_fmt_bytes(vs[k].first, a, sizeof a),
               md_fmt_bytes(vs[k].last, b, sizeof b), md_fmt_bytes(vs[k].growth, c, sizeof c),
               md_fmt_bytes(vs[k].per_step, d, sizeof d), md_fmt_bytes(vs[k].bound, e, sizeof e),
               vs[k].flagged ? "LEAK" : "ok");
    }
    if (r->leak_injected > 0)
        md_out("  (MPSDIAG_TEST_LEAK held back %s each step)\n", md_fmt_bytes((double)r->leak_injected, a, sizeof a));
    return l;
}

md_status md_stage_profile(md_job *job, md_device *dev, const struct md_bench_result *r, double peak_gflops,
                           const char *peak_basis)
{
    const md_options *o = job->opts;
    int print = o->profile || o->leak_check > 0;
    double gbs = 0;
    if (o->profile) {
        /* the bandwidth the bytes/s are compared with: a device copy, large
         * enough to leave the caches (CPU: 64 MiB, else 256 MiB) */
        size_t bytes = md_device_kind(dev) == MD_BACKEND_CPU ? (64u << 20) : (256u << 20);
        struct md_mem_stats m0;
        md_dev_mem_stats(dev, &m0);
        md_status st = md_bench_copy_peak(dev, bytes, &gbs);
        md_dev_reset_peak(dev); /* the copy's buffers are not the run's memory */
        md_dev_raise_peak(dev, m0.peak);
        if (st == MD_ERR_INTERRUPTED) return st;
        if (st != MD_OK) gbs = 0;
    }
    cJSON *p = cJSON_AddObjectToObject(job->report, "profile");
    cJSON_AddNumberToObject(p, "steps", MD_BENCH_PROFILE_STEPS);
    cJSON_AddStringToObject(p, "timer", r->timer_events ? "device events" : "host clock after a device sync");
    cJSON_AddNumberToObject(p, "step_ms", r->profiled_step_ms);
    cJSON_AddNumberToObject(p, "layers_ms", r->profiled_layers_ms);
    cJSON_AddNumberToObject(p, "peak_gflops", peak_gflops);
    if (peak_basis) cJSON_AddStringToObject(p, "peak_basis", peak_basis);
    else cJSON_AddNullToObject(p, "peak_basis");
    add_num(p, "copy_gbytes_per_s", gbs > 0 ? gbs : (double)NAN);
    cJSON *arr = cJSON_AddArrayToObject(p, "layers");
    struct md_prof_layer *rows = md_calloc((size_t)(r->nprof > 0 ? r->nprof : 1), sizeof *rows);
    if (!rows) return MD_ERR_OOM;
    int n = md_prof_rows(r->prof, r->nprof, 0, rows);
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, layer_json(&rows[i], r->profiled_step_ms, peak_gflops, gbs));
    md_free(rows);
    cJSON_AddItemToObject(p, "energy", energy_json(r));
    if (print) md_section("Profile");
    if (o->profile) print_layers(r, peak_gflops, gbs, peak_basis);
    if (o->profile) cJSON_AddItemToObject(p, "memory", memory_json(job, dev, r, print));
    if (r->leak_n > 0)
        cJSON_AddItemToObject(p, "leak_check", leak_json(r, print, o->profile, o->leak_check > 0 ? "--leak-check" : "--profile"));
    return MD_OK;
}

void md_profile_rec_inputs(const cJSON *report, struct md_rec_in *in)
{
    const cJSON *p = jget(report, "profile");
    if (!p) return;
    double peak = jnum(p, "peak_gflops", 0), gbs = jnum(p, "copy_gbytes_per_s", 0);
    const cJSON *e;
    in->n_prof = 0;
    cJSON_ArrayForEach(e, jget(p, "layers"))
    {
        if (in->n_prof >= 2) break;
        struct md_rec_prof *q = &in->prof[in->n_prof++];
        memset(q, 0, sizeof *q);
        const char *nm = cJSON_GetStringValue(jget(e, "name"));
        snprintf(q->name, sizeof q->name, "%s", nm ? nm : "?");
        q->share = jnum(e, "share", 0);
        q->frac_flops = jnum(e, "fraction_of_peak", (double)NAN);
        q->frac_bytes = jnum(e, "fraction_of_bandwidth", (double)NAN);
        q->gflops = jnum(e, "gflops", 0);
        q->gbs = jnum(e, "gbytes_per_s", 0);
        q->peak_gflops = peak;
        q->peak_gbs = gbs;
    }
    const cJSON *lc = jget(p, "leak_check");
    if (!cJSON_IsTrue(jget(lc, "flagged"))) return;
    cJSON_ArrayForEach(e, jget(lc, "verdicts"))
    {
        if (!cJSON_IsTrue(jget(e, "flagged"))) continue;
        const char *m = cJSON_GetStringValue(jget(e, "what"));
        snprintf(in->leak_measure, sizeof in->leak_measure, "%s", m ? m : "?");
        in->leak_per_step = jnum(e, "per_step_bytes", 0);
        in->leak_growth = jnum(e, "growth_bytes", 0);
        in->leak_steps = (int)jnum(lc, "steps", 0);
        break;
    }
}

md_status md_profile_leak_status(md_job *job)
{
    const md_options *o = job->opts;
    const cJSON *lc = jget(jget(job->report, "profile"), "leak_check");
    if (!cJSON_IsTrue(jget(lc, "flagged")) || !(o->leak_check > 0 || o->ci)) return MD_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, jget(lc, "verdicts"))
    {
        if (!cJSON_IsTrue(jget(e, "flagged"))) continue;
        char a[32], b[32];
        return md_errf(MD_ERR_THRESHOLD, "%s: memory grows by %s per step after warm-up (%s, %s in %d steps)",
                       o->leak_check > 0 ? "--leak-check" : "--ci leak check",
                       md_fmt_bytes(jnum(e, "per_step_bytes", 0), a, sizeof a),
                       cJSON_GetStringValue(jget(e, "what")), md_fmt_bytes(jnum(e, "growth_bytes", 0), b, sizeof b),
                       (int)jnum(lc, "steps", 0));
    }
    return MD_OK;
}
