/* recommend.c - rules from measurements to advice. Thresholds are stated
 * where they are used; each is a margin over measurement noise, not a
 * claim about hardware. */
#include "diag/recommend.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"

/* A measured difference smaller than this is treated as noise. */
#define NOISE 0.05

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

int md_rec_knee(const struct md_rec_sweep_point *s, int n, long long budget_bytes, double share, int *best_index)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!s[i].ok || !(s[i].samples_per_s > 0)) continue;
        if (budget_bytes > 0 && s[i].peak_bytes > budget_bytes) continue;
        if (best < 0 || s[i].samples_per_s > s[best].samples_per_s) best = i;
    }
    if (best_index) *best_index = best;
    if (best < 0) return -1;
    int knee = best;
    for (int i = 0; i < n; i++) {
        if (!s[i].ok || !(s[i].samples_per_s > 0)) continue;
        if (budget_bytes > 0 && s[i].peak_bytes > budget_bytes) continue;
        if (s[i].samples_per_s >= share * s[best].samples_per_s && s[i].batch_size < s[knee].batch_size) knee = i;
    }
    return knee;
}

static void batch_rule(const struct md_rec_in *in, struct recs *rs)
{
    char a[32], b[32];
    if (in->n_sweep > 0) {
        int best;
        int knee = md_rec_knee(in->sweep, in->n_sweep, budget(in), 0.9, &best);
        if (knee < 0) {
            struct md_rec *r = add(rs, "batch size", "measured",
                                   "no batch size of the sweep fitted: reduce the model (--reduce-architecture), "
                                   "use --grad-ckpt, or raise --memory-fraction");
            figure(r, "%d batch sizes tried, smallest %d", in->n_sweep, in->sweep[0].batch_size);
            return;
        }
        const struct md_rec_sweep_point *k = &in->sweep[knee], *bst = &in->sweep[best];
        int largest_ok = 0;
        for (int i = 0; i < in->n_sweep; i++)
            if (in->sweep[i].ok && in->sweep[i].batch_size > largest_ok) largest_ok = in->sweep[i].batch_size;
        struct md_rec *r;
        if (k->batch_size == in->batch_size)
            r = add(rs, "batch size", "measured",
                    "keep --batch-size %d: it is the throughput knee (the smallest batch within 10%% of the best)",
                    k->batch_size);
        else
            r = add(rs, "batch size", "measured",
                    "use --batch-size %d: the smallest batch within 10%% of the best throughput, "
                    "leaving memory for the rest", k->batch_size);
        figure(r, "batch %d: %.4g samples/s, peak %s; best batch %d: %.4g samples/s, peak %s; largest that fitted: %d",
               k->batch_size, k->samples_per_s, bytes(k->peak_bytes, a, sizeof a), bst->batch_size,
               bst->samples_per_s, bytes(bst->peak_bytes, b, sizeof b), largest_ok);
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

/* Speed-up of a setting when on (on/off), or 0 when not measured. */
static double ratio(const struct md_rec_ablation *a)
{
    return a->on_samples_per_s > 0 && a->off_samples_per_s > 0 ? a->on_samples_per_s / a->off_samples_per_s : 0;
}

static void onoff_rule(struct recs *rs, const char *topic, const struct md_rec_ablation *a, int now_on,
                       const char *flag_on, const char *flag_off)
{
    double s = ratio(a);
    if (s <= 0) return;
    struct md_rec *r = NULL;
    if (s > 1 + NOISE && !now_on)
        r = add(rs, topic, "measured", "turn it on with %s: %.0f%% faster here", flag_on, (s - 1) * 100);
    else if (s < 1 - NOISE && now_on)
        r = add(rs, topic, "measured", "turn it off with %s: %.0f%% faster without it here", flag_off, (1 / s - 1) * 100);
    else if (s > 1 + NOISE)
        r = add(rs, topic, "measured", "keep it on: %.0f%% faster than off", (s - 1) * 100);
    else if (s < 1 - NOISE)
        r = add(rs, topic, "measured", "keep it off: %.0f%% faster than on", (1 / s - 1) * 100);
    else
        r = add(rs, topic, "measured", "no measurable difference (within %.0f%%): either setting is fine", NOISE * 100);
    figure(r, "on: %.4g samples/s, off: %.4g samples/s", a->on_samples_per_s, a->off_samples_per_s);
}

static void precision_rule(const struct md_rec_in *in, struct recs *rs)
{
    int half_now = in->precision != MD_PREC_FP32 || in->amp;
    const char *half_flag = in->kind == MD_BACKEND_CUDA && in->supports_bf16 ? "--amp (bf16 on this GPU)"
                            : in->supports_fp16                              ? "--amp (fp16)"
                                                                             : "--amp";
    if (ratio(&in->abl_precision) > 0) {
        onoff_rule(rs, "precision", &in->abl_precision, half_now, half_flag, "--precision fp32");
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
    if (ratio(&in->abl_workers) > 0)
        onoff_rule(rs, "loader workers", &in->abl_workers, in->num_workers > 0, "--num-workers 2 or more",
                   "--num-workers 0");
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

static void ckpt_rule(const struct md_rec_in *in, struct recs *rs)
{
    char a[32], b[32];
    long long total = in->params_bytes + in->grads_bytes + in->optimizer_bytes + in->activations_bytes;
    if (in->grad_ckpt || total <= 0 || in->activations_bytes <= 0) return;
    double share = (double)in->activations_bytes / (double)total;
    if (share < 0.5) return;
    int oom = 0;
    for (int i = 0; i < in->n_sweep; i++) oom |= !in->sweep[i].ok;
    long long cap = budget(in);
    int pressure = oom || (cap > 0 && in->peak_bytes > cap * 7 / 10);
    struct md_rec *r = add(rs, "gradient checkpointing", "measured",
                           pressure ? "use --grad-ckpt: activations dominate and memory is the limit; recomputing them "
                                      "in backward frees room for a larger batch"
                                    : "activations dominate memory: --grad-ckpt would allow a larger batch if memory "
                                      "runs short (it costs about one extra forward pass)");
    figure(r, "activations %s of %s planned (%.0f%%)%s", bytes(in->activations_bytes, a, sizeof a),
           bytes(total, b, sizeof b), share * 100, oom ? "; the sweep ran out of memory" : "");
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
    if (ratio(&in->abl_compile) <= 0) {
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

int md_recommend(const struct md_rec_in *in, struct md_rec *out, int max)
{
    struct recs rs = {out, 0, max};
    batch_rule(in, &rs);
    precision_rule(in, &rs);
    onoff_rule(&rs, "compile", &in->abl_compile, in->compile, "compile on (drop --no-compile)", "--no-compile");
    onoff_rule(&rs, "channels-last", &in->abl_channels_last, in->channels_last, "--channels-last",
               "no --channels-last");
    data_rule(in, &rs);
    cache_rule(in, &rs);
    ckpt_rule(in, &rs);
    blas_rule(in, &rs);
    preset_rule(in, &rs);
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
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}
