/* recommend.c - rules from measurements to advice. Thresholds are stated
 * where they are used; each is a margin over measurement noise, not a
 * claim about hardware. A comparison is advised on only when its repeated,
 * interleaved measurements differ by more than their own scatter
 * (md_rec_compare); docs/recommendations.md gives the rules. */
#include "diag/recommend.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"

struct recs {
    struct md_rec *r;
    int n, max;
};

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static struct md_rec *add(struct recs *rs, const char *topic, const char *source, const char *fmt, ...)
{
    if (rs->n >= rs->max) return NULL;
    struct md_rec *r = &rs->r[rs->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->topic, sizeof r->topic, "%s", topic);
    snprintf(r->source, sizeof r->source, "%s", source);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->advice, sizeof r->advice, fmt, ap);
    va_end(ap);
    return r;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void figure(struct md_rec *r, const char *fmt, ...)
{
    if (!r) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->figure, sizeof r->figure, fmt, ap);
    va_end(ap);
}

static const char *bytes(long long v, char *buf, size_t n) { return md_fmt_bytes((double)v, buf, n); }

/* The memory the run may use: the cap, else the device's total (0 = unknown). */
static long long budget(const struct md_rec_in *in)
{
    return in->memory_limit > 0 ? in->memory_limit : in->device_memory;
}

/* ---- repeated measurements ------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double md_rec_median(const double *v, int n)
{
    double t[MD_REC_MAX_REPS];
    if (n < 1) return 0;
    if (n > MD_REC_MAX_REPS) n = MD_REC_MAX_REPS;
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void range(const double *v, int n, double *lo, double *hi)
{
    *lo = *hi = n > 0 ? v[0] : 0;
    for (int i = 1; i < n; i++) {
        if (v[i] < *lo) *lo = v[i];
        if (v[i] > *hi) *hi = v[i];
    }
}

void md_rec_compare(const struct md_rec_ablation *a, struct md_rec_compare *o)
{
    memset(o, 0, sizeof *o);
    int n = a->n < MD_REC_MAX_REPS ? a->n : MD_REC_MAX_REPS;
    double r[MD_REC_MAX_REPS];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (a->on[i] > 0 && a->off[i] > 0) r[k++] = a->on[i] / a->off[i];
    o->pairs = k;
    if (k == 0) {
        o->verdict = MD_REC_NOT_MEASURED;
        return;
    }
    o->on_median = md_rec_median(a->on, n);
    o->off_median = md_rec_median(a->off, n);
    range(a->on, n, &o->on_min, &o->on_max);
    range(a->off, n, &o->off_min, &o->off_max);
    o->speedup = md_rec_median(r, k);
    range(r, k, &o->ratio_min, &o->ratio_max);
    /* relative to the smallest ratio: then a verdict implies that every pair
     * lies on its side of 1 (see recommend.h) */
    o->noise = (o->ratio_max - o->ratio_min) / o->ratio_min;
    if (o->noise < MD_REC_NOISE_FLOOR) o->noise = MD_REC_NOISE_FLOOR;
    if (k < MD_REC_MIN_REPS) o->verdict = MD_REC_TOO_FEW;
    else if (o->speedup - 1 > o->noise) o->verdict = MD_REC_ON_FASTER;
    else if (1 / o->speedup - 1 > o->noise) o->verdict = MD_REC_OFF_FASTER;
    else o->verdict = MD_REC_NO_DIFFERENCE;
}

const char *md_rec_gain_text(double gain, char *buf, size_t n)
{
    if (gain < 2) snprintf(buf, n, "%.0f%% faster than", (gain - 1) * 100);
    else snprintf(buf, n, "%.1fx as fast as", gain);
    return buf;
}

/* ---- batch size ------------------------------------------------------------ */

/* The fastest repetition of a point (its median when measured once). */
static double point_max(const struct md_rec_sweep_point *p)
{
    return p->max_samples_per_s > p->samples_per_s ? p->max_samples_per_s : p->samples_per_s;
}

/* A sweep point may count: it ran, and fits: within what the finder found
 * to fit when it ran (the finder is the one source of "fits"), else within
 * the memory budget. */
static int usable(const struct md_rec_in *in, const struct md_rec_sweep_point *p, long long budget_bytes)
{
    if (!p->ok || !(p->samples_per_s > 0)) return 0;
    if (in && in->finder_ran) return p->batch_size <= in->finder_max_batch;
    return !(budget_bytes > 0 && p->peak_bytes > budget_bytes);
}

static int knee_of(const struct md_rec_in *in, const struct md_rec_sweep_point *s, int n, long long budget_bytes,
                   double share, int *best_index)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!usable(in, &s[i], budget_bytes)) continue;
        if (best < 0 || s[i].samples_per_s > s[best].samples_per_s) best = i;
    }
    if (best_index) *best_index = best;
    if (best < 0) return -1;
    int knee = best;
    for (int i = 0; i < n; i++) {
        if (!usable(in, &s[i], budget_bytes)) continue;
        if (point_max(&s[i]) >= share * s[best].samples_per_s && s[i].batch_size < s[knee].batch_size) knee = i;
    }
    return knee;
}

int md_rec_knee(const struct md_rec_sweep_point *s, int n, long long budget_bytes, double share, int *best_index)
{
    return knee_of(NULL, s, n, budget_bytes, share, best_index);
}

/* "1000 samples/s (980-1010 over 3 runs)" or "1000 samples/s (one run)". */
static const char *sps_text(const struct md_rec_sweep_point *p, char *buf, size_t n)
{
    if (p->reps > 1 && p->min_samples_per_s > 0 && p->max_samples_per_s > 0)
        snprintf(buf, n, "%.4g samples/s (%.4g-%.4g over %d run%s)", p->samples_per_s, p->min_samples_per_s,
                 p->max_samples_per_s, p->reps, p->reps == 1 ? "" : "s");
    else
        snprintf(buf, n, "%.4g samples/s (one run)", p->samples_per_s);
    return buf;
}

/* What is known about the largest batch that fits, from one source: the
 * finder when it ran, else where the sweep ran out of memory. */
static void fits_text(const struct md_rec_in *in, char *buf, size_t n)
{
    if (in->finder_ran) {
        if (in->finder_max_batch <= 0) snprintf(buf, n, "the batch finder found no batch that fits");
        else snprintf(buf, n, "largest batch that fits: %s%d (batch finder)", in->finder_capped ? "at least " : "",
                      in->finder_max_batch);
        return;
    }
    int largest_ok = 0, first_fail = 0;
    for (int i = 0; i < in->n_sweep; i++) {
        const struct md_rec_sweep_point *p = &in->sweep[i];
        if (p->ok && p->batch_size > largest_ok) largest_ok = p->batch_size;
        if (!p->ok && (!first_fail || p->batch_size < first_fail)) first_fail = p->batch_size;
    }
    if (first_fail > largest_ok && largest_ok > 0)
        snprintf(buf, n, "the sweep fitted %d and not %d (--find-batch-size finds the largest)", largest_ok, first_fail);
    else
        snprintf(buf, n, "the sweep did not reach the memory limit (--find-batch-size finds the largest batch that fits)");
}

static void batch_rule(const struct md_rec_in *in, struct recs *rs)
{
    char a[32], b[32], fits[160], ks[96], bt[96], gain[48];
    if (in->n_sweep > 0) {
        int best;
        int knee = knee_of(in, in->sweep, in->n_sweep, budget(in), 0.9, &best);
        fits_text(in, fits, sizeof fits);
        if (knee < 0) {
            struct md_rec *r = add(rs, "batch size", "measured",
                                   "no batch size of the sweep fitted: reduce the model (--reduce-architecture), "
                                   "use --grad-ckpt, or raise --memory-fraction");
            figure(r, "%d batch sizes tried, smallest %d; %s", in->n_sweep, in->sweep[0].batch_size, fits);
            return;
        }
        const struct md_rec_sweep_point *k = &in->sweep[knee], *bst = &in->sweep[best], *cur = NULL;
        for (int i = 0; i < in->n_sweep; i++)
            if (in->sweep[i].batch_size == in->batch_size && usable(in, &in->sweep[i], budget(in))) cur = &in->sweep[i];
        struct md_rec *r;
        if (cur && point_max(cur) >= 0.9 * bst->samples_per_s) {
            /* the current batch is within 10% of the best, allowing for noise: no change */
            r = add(rs, "batch size", "measured",
                    "keep --batch-size %d: within 10%% of the best throughput measured (batch %d)", cur->batch_size,
                    bst->batch_size);
            figure(r, "batch %d: %s, peak %s; best batch %d: %s; %s", cur->batch_size, sps_text(cur, ks, sizeof ks),
                   bytes(cur->peak_bytes, a, sizeof a), bst->batch_size, sps_text(bst, bt, sizeof bt), fits);
            return;
        }
        r = add(rs, "batch size", "measured",
                "use --batch-size %d: the smallest batch within 10%% of the best throughput, leaving memory for the rest",
                k->batch_size);
        if (cur) {
            md_rec_gain_text(k->samples_per_s / cur->samples_per_s, gain, sizeof gain);
            if (k->samples_per_s > cur->samples_per_s && r) {
                size_t l = strlen(r->advice);
                snprintf(r->advice + l, sizeof r->advice - l, " (%s batch %d)", gain, cur->batch_size);
            }
        }
        if (r) snprintf(r->cost, sizeof r->cost, "peak memory %s%s%s", bytes(k->peak_bytes, a, sizeof a),
                        cur ? " instead of " : "", cur ? bytes(cur->peak_bytes, b, sizeof b) : "");
        figure(r, "batch %d: %s, peak %s; best batch %d: %s; %s", k->batch_size, sps_text(k, ks, sizeof ks),
               bytes(k->peak_bytes, a, sizeof a), bst->batch_size, sps_text(bst, bt, sizeof bt), fits);
        return;
    }
    if (in->finder_ran) {
        /* the finder's tries are one short measurement each: too noisy to
         * pick the fastest, so only what fits is said */
        fits_text(in, fits, sizeof fits);
        struct md_rec *r;
        if (in->finder_max_batch <= 0)
            r = add(rs, "batch size", "measured",
                    "no batch fits: reduce the model (--reduce-architecture), use --grad-ckpt, or raise "
                    "--memory-fraction");
        else if (in->batch_size > in->finder_max_batch)
            r = add(rs, "batch size", "measured", "use --batch-size %d or less: %d does not fit",
                    in->finder_max_batch, in->batch_size);
        else
            r = add(rs, "batch size", "measured",
                    "--batch-size up to %d fits; measure which is fastest with --batch-sweep", in->finder_max_batch);
        figure(r, "%s", fits);
        return;
    }
    /* nothing measured: the chip preset, or the MPS guides' memory rule for MPS */
    if (in->kind == MD_BACKEND_METAL && in->preset) {
        struct md_rec *r = add(rs, "batch size", "preset",
                               "start image models at --batch-size %d and sequence models at %d-%d (chip preset %s); "
                               "measure with --batch-sweep auto",
                               in->preset->image_batch_size, in->preset->batch_size, in->preset->batch_size_max,
                               in->preset->chip);
        figure(r, "%s", in->preset->source);
    } else if (in->kind == MD_BACKEND_METAL && in->unified_memory && in->device_memory > 0) {
        double gib = (double)in->device_memory / (double)(1LL << 30);
        int bs = gib <= 8.5 ? 8 : gib < 16 ? 16 : 32;
        struct md_rec *r = add(rs, "batch size", "preset",
                               "start at --batch-size %d for %s of unified memory; measure with --batch-sweep auto", bs,
                               bytes(in->device_memory, a, sizeof a));
        figure(r, "common MPS guidance: 8 for 8 GB, 16 by default, 32 for 16 GB and more");
    }
}

/* One setting an ablation turns on and off: what each state is called, the
 * flag that gets there, and what it costs. */
struct knob {
    const char *topic;
    const char *on_name, *off_name;      /* "compile on", "fp32" */
    const char *use_on, *keep_on;        /* the flag that turns it on / keeps it on */
    const char *use_off, *keep_off;
    const char *cost_on, *cost_off;      /* what being on / off costs */
};

static const char *const verdict_names[] = {"", "too few runs", "no difference", "on faster", "off faster"};

static void onoff_rule(struct recs *rs, const struct knob *k, const struct md_rec_ablation *a, int now_on)
{
    struct md_rec_compare c;
    md_rec_compare(a, &c);
    if (c.verdict == MD_REC_NOT_MEASURED) return;
    char gain[48];
    struct md_rec *r = NULL;
    switch (c.verdict) {
    case MD_REC_ON_FASTER:
        md_rec_gain_text(c.speedup, gain, sizeof gain);
        r = add(rs, k->topic, "measured", "%s: training with %s is %s with %s here", now_on ? k->keep_on : k->use_on, k->on_name,
                gain, k->off_name);
        if (r) snprintf(r->cost, sizeof r->cost, "%s", k->cost_on);
        break;
    case MD_REC_OFF_FASTER:
        md_rec_gain_text(1 / c.speedup, gain, sizeof gain);
        r = add(rs, k->topic, "measured", "%s: training with %s is %s with %s here", now_on ? k->use_off : k->keep_off,
                k->off_name, gain, k->on_name);
        if (r) snprintf(r->cost, sizeof r->cost, "%s", k->cost_off);
        break;
    case MD_REC_NO_DIFFERENCE:
        r = add(rs, k->topic, "measured",
                "no measurable difference between %s and %s (within the %.0f%% noise): keep the current setting",
                k->on_name, k->off_name, c.noise * 100);
        break;
    default:
        r = add(rs, k->topic, "measured",
                "not enough repetitions to tell %s from %s (%d of %d pairs measured): keep the current setting",
                k->on_name, k->off_name, c.pairs, MD_REC_MIN_REPS);
        break;
    }
    if (!r) return;
    snprintf(r->verdict, sizeof r->verdict, "%s", verdict_names[c.verdict]);
    figure(r,
           "%s: median %.4g samples/s (%.4g-%.4g), %s: median %.4g (%.4g-%.4g); on/off %.2fx, pairs %.2f-%.2fx over %d "
           "interleaved pairs; differences under %.0f%% count as noise",
           k->on_name, c.on_median, c.on_min, c.on_max, k->off_name, c.off_median, c.off_min, c.off_max, c.speedup,
           c.ratio_min, c.ratio_max, c.pairs, c.noise * 100);
}

static void compile_rule(const struct md_rec_in *in, struct recs *rs)
{
    static const struct knob k = {
        "compile", "compile on", "compile off", "drop --no-compile (compile is the default)",
        "keep compile on (the default)", "use --no-compile", "keep --no-compile",
        "planning at start-up (fusion, the activation arena; CUDA graph capture)",
        "more activation memory (no shared arena) and no fusion"};
    onoff_rule(rs, &k, &in->abl_compile, in->compile);
}

static void channels_last_rule(const struct md_rec_in *in, struct recs *rs)
{
    static const struct knob k = {
        "channels-last", "NHWC (--channels-last)", "NCHW", "use --channels-last", "keep --channels-last",
        "drop --channels-last", "leave --channels-last off (the default)",
        "weights converted when loaded and saved (checkpoints keep the PyTorch layout)", "none"};
    onoff_rule(rs, &k, &in->abl_channels_last, in->channels_last);
}

static void precision_rule(const struct md_rec_in *in, struct recs *rs)
{
    int half_now = in->precision != MD_PREC_FP32 || in->amp;
    /* the half type the ablation measures: bf16 on CUDA where it has it, else fp16 */
    const char *half = in->kind == MD_BACKEND_CUDA && in->supports_bf16 ? "bf16"
                       : in->supports_fp16                              ? "fp16"
                       : in->supports_bf16                              ? "bf16"
                                                                        : "half precision";
    const char *half_flag = in->kind == MD_BACKEND_CUDA && in->supports_bf16 ? "--amp (bf16 on this GPU)"
                            : in->supports_fp16                              ? "--amp (fp16)"
                                                                             : "--amp";
    if (in->abl_precision.n > 0) {
        char use_on[64];
        snprintf(use_on, sizeof use_on, "use %s", half_flag);
        const struct knob k = {"precision", half, "fp32", use_on, "keep half precision",
                               "use --precision fp32 without --amp", "keep fp32 (no --amp)",
                               "lower numeric precision: compare the loss curve with an fp32 run",
                               "twice the activation memory of half precision"};
        onoff_rule(rs, &k, &in->abl_precision, half_now);
        return;
    }
    if (!half_now && in->kind == MD_BACKEND_CUDA && (in->supports_fp16 || in->supports_bf16)) {
        struct md_rec *r = add(rs, "precision", "measured",
                               "this GPU has fast half precision: measure %s with --ablate precision", half_flag);
        figure(r, "device reports fp16 %s, bf16 %s", in->supports_fp16 ? "yes" : "no", in->supports_bf16 ? "yes" : "no");
    }
}

static void data_rule(const struct md_rec_in *in, struct recs *rs)
{
    if (in->abl_workers.n > 0) {
        char use_on[48], keep_on[48], on_name[32], cost[96];
        int w = in->abl_workers_count > 0 ? in->abl_workers_count : 2;
        snprintf(use_on, sizeof use_on, "use --num-workers %d", w);
        snprintf(keep_on, sizeof keep_on, "keep --num-workers %d", in->num_workers > 0 ? in->num_workers : w);
        snprintf(on_name, sizeof on_name, "%d loader worker%s", w, w == 1 ? "" : "s");
        snprintf(cost, sizeof cost, "%d CPU threads and memory for the batches in flight", w);
        const struct knob k = {"loader workers", on_name, "0 workers", use_on, keep_on, "use --num-workers 0",
                               "keep --num-workers 0", cost, "none: the training thread loads the batches"};
        onoff_rule(rs, &k, &in->abl_workers, in->num_workers > 0);
    }
    if (!(in->loader_samples_per_s > 0) || !(in->step_samples_per_s > 0)) return;
    double headroom = in->loader_samples_per_s / in->step_samples_per_s;
    /* below 1.2x the loader cannot keep the step fed once jitter is counted */
    if (headroom < 1.2) {
        int w = in->num_workers < 1 ? 2 : in->num_workers * 2;
        if (in->logical_cores > 0 && w > in->logical_cores) w = in->logical_cores;
        struct md_rec *r;
        if (w > in->num_workers)
            r = add(rs, "data loading", "measured",
                    "data loading is the bottleneck: use --num-workers %d%s%s", w,
                    in->benefits_from_pinned && !in->pin_memory ? " and --pin-memory" : "",
                    !in->cache_images && !in->dataset_resident ? ", and --cache-images if RAM allows" : "");
        else
            r = add(rs, "data loading", "measured",
                    "data loading is the bottleneck and every core already loads: --cache-images, smaller "
                    "--image-size, or fewer augmentations");
        figure(r, "loader %.4g samples/s vs training step %.4g samples/s (%.2fx)", in->loader_samples_per_s,
               in->step_samples_per_s, headroom);
    } else if (in->benefits_from_pinned && !in->pin_memory) {
        struct md_rec *r = add(rs, "pinned memory", "measured",
                               "use --pin-memory: this device copies page-locked batches faster");
        figure(r, "loader %.4g samples/s vs step %.4g samples/s; the device benefits from pinned memory",
               in->loader_samples_per_s, in->step_samples_per_s);
    } else if (in->kind == MD_BACKEND_METAL && in->num_workers > 0 && headroom > 4) {
        struct md_rec *r = add(rs, "loader workers", "measured",
                               "--num-workers 0 is enough here (the usual MPS setting): the loader is far ahead");
        figure(r, "loader %.4g samples/s vs step %.4g samples/s (%.1fx)", in->loader_samples_per_s,
               in->step_samples_per_s, headroom);
    }
}

static void cache_rule(const struct md_rec_in *in, struct recs *rs)
{
    char a[32], b[32];
    if (in->dataset_resident || in->dataset_bytes <= 0 || in->ram_available <= 0) return;
    if (!in->cache_images && in->dataset_bytes * 2 <= in->ram_available) {
        /* half the free RAM: room left for the model, the loader and the OS */
        struct md_rec *r = add(rs, "image caching", "measured",
                               "use --cache-images: the decoded training set fits in half the free RAM");
        figure(r, "decoded images %s, RAM available %s", bytes(in->dataset_bytes, a, sizeof a),
               bytes(in->ram_available, b, sizeof b));
    } else if (in->cache_images && in->dataset_bytes * 10 > in->ram_available * 8) {
        struct md_rec *r = add(rs, "image caching", "measured",
                               "drop --cache-images: the cache takes more than 80%% of the free RAM and risks swapping");
        figure(r, "decoded images %s, RAM available %s", bytes(in->dataset_bytes, a, sizeof a),
               bytes(in->ram_available, b, sizeof b));
    }
}

/* Only under real memory pressure: the run's peak above 70% of the memory it
 * may use, or the current batch at (or past) what fits. Activations
 * dominating a small footprint is no reason to recompute them. */
static void ckpt_rule(const struct md_rec_in *in, struct recs *rs)
{
    char a[32], b[32], why[160];
    long long total = in->params_bytes + in->grads_bytes + in->optimizer_bytes + in->activations_bytes;
    if (in->grad_ckpt || total <= 0 || in->activations_bytes <= 0) return;
    double share = (double)in->activations_bytes / (double)total;
    if (share < 0.5) return;
    long long cap = budget(in);
    why[0] = 0;
    if (in->finder_ran && in->finder_max_batch > 0 && in->batch_size >= in->finder_max_batch && !in->finder_capped)
        snprintf(why, sizeof why, "batch %d is the largest that fits (batch finder)", in->finder_max_batch);
    for (int i = 0; i < in->n_sweep && !why[0]; i++)
        if (!in->sweep[i].ok && in->sweep[i].batch_size <= in->batch_size)
            snprintf(why, sizeof why, "batch %d ran out of memory in the sweep", in->sweep[i].batch_size);
    if (!why[0] && cap > 0 && in->peak_bytes > cap * 7 / 10)
        snprintf(why, sizeof why, "peak %s is %.0f%% of the %s the run may use", bytes(in->peak_bytes, a, sizeof a),
                 100.0 * (double)in->peak_bytes / (double)cap, bytes(cap, b, sizeof b));
    if (!why[0]) return;
    struct md_rec *r = add(rs, "gradient checkpointing", "measured",
                           "use --grad-ckpt: memory is the limit and activations dominate it; recomputing them in "
                           "backward frees room for a larger batch");
    if (r) snprintf(r->cost, sizeof r->cost, "about one extra forward pass per step");
    figure(r, "%s; activations %s of %s planned (%.0f%%)", why, bytes(in->activations_bytes, a, sizeof a),
           bytes(total, b, sizeof b), share * 100);
}

static void blas_rule(const struct md_rec_in *in, struct recs *rs)
{
    if (in->kind != MD_BACKEND_CPU || !in->blas_warning || !in->blas_warning[0]) return;
    struct md_rec *r = add(rs, "OpenBLAS kernels", "measured", "%s", in->blas_warning);
    if (in->gemm_peak_gflops > 0) figure(r, "GEMM rate %.4g GFLOP/s with the current kernels", in->gemm_peak_gflops);
    else figure(r, "OpenBLAS reports the kernel choice (OPENBLAS_CORETYPE overrides it)");
}

static void preset_rule(const struct md_rec_in *in, struct recs *rs)
{
    if (in->kind != MD_BACKEND_METAL || !in->preset) return;
    if (in->abl_compile.n <= 0) {
        struct md_rec *r = add(rs, "compile", "preset", "start with --compile-mode %s (chip preset %s); measure with "
                               "--ablate compile", in->preset->compile_mode, in->preset->chip);
        figure(r, "%s", in->preset->source);
    }
    struct md_rec *r = add(rs, "model size", "preset",
                           "sequence models: d_model %d, d_ff %d, sequence length up to %d; keep the model under %.0f GB "
                           "(chip preset %s)", in->preset->d_model, in->preset->d_ff, in->preset->seq_len_max,
                           in->preset->model_memory_gb, in->preset->chip);
    figure(r, "%s", in->preset->source);
}

/* Profile share at which a layer is named in the advice, and the fraction of
 * a peak at which it counts as bound by it (docs/doctor.md). */
#define PROF_SHARE 0.15
#define PROF_BOUND 0.5

static void pct(double f, char *buf, size_t n)
{
    if (isfinite(f)) snprintf(buf, n, "%.0f%%", 100 * f);
    else snprintf(buf, n, "an unknown share");
}

static void profile_rule(const struct md_rec_in *in, struct recs *rs)
{
    for (int i = 0; i < in->n_prof && i < 2; i++) {
        const struct md_rec_prof *p = &in->prof[i];
        if (!(p->share >= PROF_SHARE)) continue;
        char fp[32], bp[32];
        pct(p->frac_flops, fp, sizeof fp);
        pct(p->frac_bytes, bp, sizeof bp);
        struct md_rec *r;
        if (isfinite(p->frac_bytes) && p->frac_bytes >= PROF_BOUND)
            r = add(rs, "slowest layer", "measured",
                    "%s takes %.0f%% of the step at %s of peak, bound by memory traffic (%s of the copy rate): "
                    "fewer bytes help (--amp halves them; compile fuses passes)", p->name, 100 * p->share, fp, bp);
        else if (isfinite(p->frac_flops) && p->frac_flops >= PROF_BOUND)
            r = add(rs, "slowest layer", "measured",
                    "%s takes %.0f%% of the step at %s of peak: it is compute-bound; only less arithmetic helps "
                    "(half precision where the device has faster half-precision units, or a smaller layer)",
                    p->name, 100 * p->share, fp);
        else if (isfinite(p->frac_bytes))
            r = add(rs, "slowest layer", "measured",
                    "%s takes %.0f%% of the step at %s of peak and %s of the copy rate: below half of both, so "
                    "per-call overhead or a kernel slow for its shape; a larger batch spreads the calls", p->name,
                    100 * p->share, fp, bp);
        else
            r = add(rs, "slowest layer", "measured",
                    "%s takes %.0f%% of the step at %s of peak: below half of it, so memory traffic, per-call "
                    "overhead or a kernel slow for its shape (--profile compares its bytes/s with the copy rate)",
                    p->name, 100 * p->share, fp);
        char pk[64] = "no FLOP/s peak known", bw[64] = "no copy rate measured";
        if (p->peak_gflops > 0) snprintf(pk, sizeof pk, "peak %.4g GFLOP/s", p->peak_gflops);
        if (p->peak_gbs > 0) snprintf(bw, sizeof bw, "copy rate %.4g GB/s", p->peak_gbs);
        figure(r, "%.4g GFLOP/s (%s), %.4g GB/s (%s); per-layer profile", p->gflops, pk, p->gbs, bw);
    }
}

static void leak_rule(const struct md_rec_in *in, struct recs *rs)
{
    if (!in->leak_measure[0]) return;
    char a[32], b[32];
    struct md_rec *r = add(rs, "memory leak", "measured",
                           "memory grows by %s per training step after warm-up (%s): something allocates every step "
                           "and keeps it; long runs will run out of memory",
                           md_fmt_bytes(in->leak_per_step, a, sizeof a), in->leak_measure);
    figure(r, "%s more after %d steps of the leak check", md_fmt_bytes(in->leak_growth, b, sizeof b), in->leak_steps);
}

int md_recommend(const struct md_rec_in *in, struct md_rec *out, int max)
{
    struct recs rs = {out, 0, max};
    leak_rule(in, &rs);
    batch_rule(in, &rs);
    precision_rule(in, &rs);
    compile_rule(in, &rs);
    channels_last_rule(in, &rs);
    data_rule(in, &rs);
    cache_rule(in, &rs);
    ckpt_rule(in, &rs);
    blas_rule(in, &rs);
    preset_rule(in, &rs);
    profile_rule(in, &rs);
    return rs.n;
}

cJSON *md_recs_to_json(const struct md_rec *r, int n)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "topic", r[i].topic);
        cJSON_AddStringToObject(o, "advice", r[i].advice);
        if (r[i].figure[0]) cJSON_AddStringToObject(o, "figure", r[i].figure);
        else cJSON_AddNullToObject(o, "figure");
        cJSON_AddStringToObject(o, "source", r[i].source);
        if (r[i].cost[0]) cJSON_AddStringToObject(o, "cost", r[i].cost);
        else cJSON_AddNullToObject(o, "cost");
        if (r[i].verdict[0]) cJSON_AddStringToObject(o, "verdict", r[i].verdict);
        else cJSON_AddNullToObject(o, "verdict");
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}
