/* stage_data.c - the data stage: loader defaults per device, open the
 * dataset for the model, measure the loader briefly, print the Data section
 * and fill report["data"]. */
#include <stdio.h>
#include <string.h>

#include "app/job.h"
#include "app/resolve.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/platform.h"
#include "core/timer.h"
#include "data/data.h"

#define PROBE_SECONDS 0.5
#define PROBE_MAX_BATCHES 20

/* --num-workers and --pin-memory when not given: per device, with reasons. */
static void loader_defaults(md_job *job)
{
    md_options *o = job->opts;
    char v[32];
    md_backend_kind kind = job->dev ? md_device_kind(job->dev) : MD_BACKEND_CPU;
    const struct md_device_info *info = job->dev ? md_device_get_info(job->dev) : NULL;
    if (o->num_workers < 0) {
        const char *why;
        if (kind == MD_BACKEND_METAL) {
            o->num_workers = 0;
            why = "Metal/MPS: loading in the main thread works best on unified memory";
        } else if (kind == MD_BACKEND_CUDA) {
            o->num_workers = 4;
            why = "CUDA: 4 threads keep the GPU fed while it computes";
        } else {
            int cores = md_cpu_logical_cores();
            o->num_workers = cores - 1 < 2 ? (cores - 1 > 0 ? cores - 1 : 0) : 2;
            why = "CPU: the kernels use the cores; min(2, cores - 1) loader threads overlap loading with compute";
        }
        snprintf(v, sizeof v, "%d", o->num_workers);
        md_job_setting(job, "num_workers", v, why);
    } else {
        snprintf(v, sizeof v, "%d", o->num_workers);
        md_job_setting(job, "num_workers", v, "--num-workers");
    }
    int benefits = info && info->benefits_from_pinned;
    if (o->pin_memory < 0) {
        o->pin_memory = benefits;
        md_job_setting(job, "pin_memory", benefits ? "on" : "off",
                       benefits ? "page-locked batches make host-to-device copies faster and asynchronous"
                       : kind == MD_BACKEND_METAL ? "not beneficial on Metal/MPS (unified memory)"
                                                   : "the device reads host memory directly; pinning buys nothing");
    } else if (o->pin_memory && !benefits) {
        o->pin_memory = 0;
        md_job_setting(job, "pin_memory", "off",
                       "--pin-memory ignored: this device does not benefit from page-locked memory");
    } else {
        md_job_setting(job, "pin_memory", o->pin_memory ? "on" : "off",
                       o->pin_memory ? "--pin-memory" : "--no-pin-memory");
    }
}

/* The model's needs: its inputs (an input named like "brightness" or "luma"
 * gets the derived brightness channel), layout and classes. The model API
 * (src/nn/model.h) may be absent on a branch without the nn area; then, and
 * when no model was built, one image input of the dataset's own shape. */
#if defined(__has_include)
#if __has_include("nn/model.h")
#include "nn/model.h"
#define MD_DATA_HAVE_MODEL 1
#endif
#endif

static const char *kind_name(md_input_kind k)
{
    switch (k) {
    case MD_INPUT_LUMA: return "brightness";
    case MD_INPUT_LEFT: return "left half";
    case MD_INPUT_RIGHT: return "right half";
    case MD_INPUT_SIDE: return "side values";
    default: return "image";
    }
}

static int is_luma_name(const char *n)
{
    return strstr(n, "bright") || strstr(n, "luma") || strstr(n, "Bright") || strstr(n, "Luma");
}

static void make_request(const md_job *job, struct md_data_request *req)
{
    memset(req, 0, sizeof *req);
    req->layout = job->opts->channels_last ? MD_NHWC : MD_NCHW;
#ifdef MD_DATA_HAVE_MODEL
    const md_model *m = job->model;
    if (!m) return;
    int n = md_model_num_inputs(m);
    req->num_inputs = n < MD_DATA_MAX_INPUTS ? n : MD_DATA_MAX_INPUTS;
    for (int i = 0; i < req->num_inputs; i++) {
        struct md_data_input *in = &req->inputs[i];
        snprintf(in->name, sizeof in->name, "%s", md_model_input_name(m, i));
        md_model_input_shape(m, i, &in->c, &in->h, &in->w);
        in->kind = is_luma_name(in->name) && in->c == 1 ? MD_INPUT_LUMA : MD_INPUT_IMAGE;
        /* images-csv: the halves of a wide image, and the side values */
        if (!strcmp(in->name, "left")) in->kind = MD_INPUT_LEFT;
        else if (!strcmp(in->name, "right")) in->kind = MD_INPUT_RIGHT;
        else if (!strcmp(in->name, "side")) in->kind = MD_INPUT_SIDE;
    }
    req->layout = md_model_get_opts(m)->layout;
    req->num_classes = md_model_num_classes(m);
#else
    (void)is_luma_name;
#endif
}

static cJSON *floats(const float *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

/* A short run of the train loader: what it sustains on this machine. */
static md_status probe(md_job *job, struct md_loader_stats *ls, int *batch)
{
    const md_options *o = job->opts;
    struct md_loader *l = NULL;
    struct md_loader_opts lo = {
        .split = MD_SPLIT_TRAIN,
        .batch_size = o->batch_size > 0 && o->batch_size < 64 ? o->batch_size : 64,
        .shuffle = 1,
        .augment = o->augment,
        .num_workers = o->num_workers,
        .prefetch = o->prefetch < 2 ? o->prefetch : 2, /* a probe: little memory */
        .seed = o->seed,
        .pin_dev = o->pin_memory ? job->dev : NULL,
    };
    *batch = lo.batch_size;
    MD_TRY(md_loader_create(job->data, &lo, &l));
    md_status st = md_loader_start_epoch(l, 0);
    double t0 = md_now();
    for (int i = 0; st == MD_OK && i < PROBE_MAX_BATCHES && md_now() - t0 < PROBE_SECONDS; i++) {
        struct md_batch *b = NULL;
        st = md_loader_next(l, &b);
        if (!b) break;
        md_loader_release(l, b);
    }
    md_loader_stats(l, ls);
    md_loader_free(l);
    return st;
}

/* --benchmark-only trains nothing and benchmarks on synthetic data unless
 * the user named a dataset, so a dataset that auto found but that does not
 * fit the model (classes, input shape) or none at all need not end it:
 * synthetic data shaped for the model instead, with the reason as a setting
 * and a warning. */
static int may_use_synthetic(const md_job *job, md_status st)
{
    const md_options *o = job->opts;
    return (st == MD_ERR_CONFIG || st == MD_ERR_DATA) && o->benchmark_only && !o->dump_grads[0] &&
           !o->data_dir[0] && strcmp(o->dataset, "auto") == 0;
}

static md_status open_synthetic_instead(md_job *job, const struct md_data_request *req)
{
    md_options *o = job->opts;
    char why[800];
    snprintf(why, sizeof why, "--benchmark-only with --dataset auto: %s; benchmarking needs no dataset, so it runs on "
                              "synthetic data shaped for the model", md_errmsg());
    snprintf(o->dataset, sizeof o->dataset, "synthetic");
    md_warn("%s", why);
    md_job_setting(job, "dataset", "synthetic", why);
    cJSON *w = cJSON_GetObjectItemCaseSensitive(job->report, "warnings");
    if (!cJSON_IsArray(w)) w = cJSON_AddArrayToObject(job->report, "warnings");
    cJSON_AddItemToArray(w, cJSON_CreateString(why));
    struct md_data_opts d;
    md_resolve_data(o, &d);
    return md_data_open(&d, req, &job->data);
}

/* The skipped files, one line each (the first MD_DATA_BAD_LISTED). */
static void print_skipped(struct md_data *d, const char *label)
{
    char path[MD_PATH_MAX], why[512];
    long long n = md_data_skipped(d);
    md_out("  %-14s %lld bad sample%s skipped (--on-bad-sample skip):\n", label, n, n == 1 ? "" : "s");
    int listed = md_data_bad_listed(d, -1, path, sizeof path, why, sizeof why);
    for (int i = 0; i < listed; i++) {
        md_data_bad_listed(d, i, path, sizeof path, why, sizeof why);
        md_out("  %-14s   %s: %s\n", "", path, why);
    }
    if (n > listed) md_out("  %-14s   and %lld more (run with --verbose to see each)\n", "", n - listed);
}

/* report.data: skipped, first_skipped, skipped_files [{path, error}]. */
static void report_skipped(struct md_data *d, cJSON *r)
{
    cJSON_DeleteItemFromObjectCaseSensitive(r, "skipped");
    cJSON_DeleteItemFromObjectCaseSensitive(r, "first_skipped");
    cJSON_DeleteItemFromObjectCaseSensitive(r, "skipped_files");
    cJSON_AddNumberToObject(r, "skipped", (double)md_data_skipped(d));
    if (md_data_first_bad(d)[0]) cJSON_AddStringToObject(r, "first_skipped", md_data_first_bad(d));
    else cJSON_AddNullToObject(r, "first_skipped");
    cJSON *files = cJSON_AddArrayToObject(r, "skipped_files");
    char path[MD_PATH_MAX], why[512];
    int listed = md_data_bad_listed(d, -1, path, sizeof path, why, sizeof why);
    for (int i = 0; i < listed; i++) {
        md_data_bad_listed(d, i, path, sizeof path, why, sizeof why);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "path", path);
        cJSON_AddStringToObject(o, "error", why);
        cJSON_AddItemToArray(files, o);
    }
}

void md_stage_data_refresh(md_job *job)
{
    cJSON *r = cJSON_GetObjectItemCaseSensitive(job->report, "data");
    if (!job->data || !r) return;
    const cJSON *was = cJSON_GetObjectItemCaseSensitive(r, "skipped");
    long long before = cJSON_IsNumber(was) ? (long long)was->valuedouble : 0;
    if (md_data_skipped(job->data) == before) return;
    print_skipped(job->data, "data");
    report_skipped(job->data, r);}

md_status md_stage_data(md_job *job)
{
    md_options *o = job->opts;
    loader_defaults(job);
    struct md_data_request req;
    make_request(job, &req);
    MD_TRY(md_resolve_data_config(o, &req));
    struct md_data_opts d_opts;
    md_resolve_data(o, &d_opts);
    md_status st = md_data_open(&d_opts, &req, &job->data);
    if (may_use_synthetic(job, st)) st = open_synthetic_instead(job, &req);
    if (st != MD_OK) return st;
    struct md_data *d = job->data;

    struct md_loader_stats ls;
    int pbatch = 0;
    MD_TRY(probe(job, &ls, &pbatch));

    char a[32], b[32];
    int c, h, w;
    md_data_source_shape(d, &c, &h, &w);
    md_section("Data");
    md_out("  %-14s %s (%s)\n", "dataset", md_data_name(d), md_data_format(d));
    md_out("  %-14s %s\n", "source", md_data_source(d)[0] ? md_data_source(d) : "generated");
    for (int s = 0; s < MD_SPLIT_COUNT; s++)
        md_out("  %-14s %-8s %s\n", md_data_split_name((md_split)s),
               md_fmt_thousands(md_data_count(d, (md_split)s), a, sizeof a), md_data_split_origin(d, (md_split)s));
    int nc = md_data_num_classes(d);
    int shown = md_log_level() >= MD_VERBOSE ? nc : 10; /* --verbose: every class */
    if (nc > 0) { /* regression has none */
        md_out("  %-14s %d:", "classes", nc);
        for (int k = 0; k < nc && k < shown; k++) md_out(" %s%s", md_data_class_name(d, k), k + 1 < nc ? "," : "");
        md_out("%s\n", nc > shown ? " ... (--verbose lists all)" : "");
    }
    if (md_data_task(d) == MD_TASK_REGRESS && md_data_target_name(d, 0)[0]) {
        /* image regression: the targets and their scaler (original = value * std + mean) */
        const double *tm = md_data_target_mean(d), *ts = md_data_target_std(d);
        for (int j = 0; j < md_data_series(d)->n_out; j++)
            md_out("  %-14s %s: mean %.6g, std %.6g (training split; trained standardised)\n", j ? "" : "targets",
                   md_data_target_name(d, j), tm[j], ts[j]);
        for (int j = 0; j < md_data_num_side(d); j++)
            md_out("  %-14s %s: mean %.6g, std %.6g (standardised)\n", j ? "" : "side values", md_data_side_name(d, j),
                   md_data_side_mean(d)[j], md_data_side_std(d)[j]);
    }
    const char *fmt = md_data_format(d);
    if (strcmp(fmt, "jpeg") == 0 || strcmp(fmt, "images-csv") == 0) /* the files' own sizes vary */
        md_out("  %-14s %d x %d x %d: each file decoded%s and resized to this (%s)\n", "image", c, h, w,
               c == 1 ? " to gray" : " to RGB", o->image_size > 0 ? "--image-size" : "the model's input size");
    else
        md_out("  %-14s %d x %d x %d (stored)\n", "image", c, h, w);
    for (int i = 0; i < md_data_num_inputs(d); i++) {
        const struct md_data_input *in = md_data_input(d, i);
        md_out("  %-14s %s: %d x %d x %d %s, %s\n", i ? "" : "inputs", in->name, in->c, in->h, in->w,
               md_layout_name(md_data_layout(d)), kind_name(in->kind));
    }
    const float *mean = md_data_mean(d, 0), *sd = md_data_std(d, 0);
    md_out("  %-14s mean %.4f std %.4f%s (%s)\n", "normalise", (double)mean[0], (double)sd[0],
           md_data_input(d, 0)->c > 1 ? " (channel 0)" : "", md_data_norm_given(d) ? "config" : md_data_norm_known(d) ? "published" : "computed");
    char crop[48];
    if (md_data_aug_pad(d)) snprintf(crop, sizeof crop, "random crop (pad %d)", md_data_aug_pad(d));
    else snprintf(crop, sizeof crop, "no crop");
    if (o->augment && (md_data_aug_pad(d) || md_data_aug_flip(d)))
        md_out("  %-14s %s%s; train only\n", "augmentation", crop,
               md_data_aug_flip(d) ? " + horizontal flip" : ", no flip");
    else if (o->augment)
        md_out("  %-14s none (the config's data.augment)\n", "augmentation");
    else md_out("  %-14s off (--no-augment)\n", "augmentation");
    md_out("  %-14s %d worker%s, prefetch %d, %s memory\n", "loader", o->num_workers, o->num_workers == 1 ? "" : "s", o->prefetch,
           o->pin_memory ? "pinned" : "ordinary");
    if (md_data_cache_estimate(d) > 0)
        md_out("  %-14s up to %s for decoded images%s\n", "cache", md_fmt_bytes((double)md_data_cache_estimate(d), a, sizeof a),
               o->cache_images ? "" : " (kept without --cache-images: they fit in half the free RAM)");
    else if (o->cache_images)
        md_out("  %-14s not needed: %s images are held in memory (%s)\n", "cache", md_data_format(d),
               md_fmt_bytes((double)md_data_resident_bytes(d), b, sizeof b));
    if (md_data_skipped(d)) print_skipped(d, "skipped");
    if (o->max_samples > 0)
        md_out("  %-14s at most %d samples per split (--max-samples)\n", "max samples", o->max_samples);
    md_out("  %-14s %.0f samples/s delivered (batch %d, %lld batch%s), %.0f samples/s decode capacity\n",
           "loader probe", ls.samples_per_s, pbatch, ls.batches, ls.batches == 1 ? "" : "es", ls.decode_per_s);

    /* report["data"] */
    cJSON *r = cJSON_AddObjectToObject(job->report, "data");
    cJSON_AddStringToObject(r, "dataset", md_data_name(d));
    cJSON_AddStringToObject(r, "format", md_data_format(d));
    cJSON_AddStringToObject(r, "task", md_data_task(d) == MD_TASK_REGRESS ? "regression" : "classification");
    cJSON_AddStringToObject(r, "source", md_data_source(d));
    cJSON *splits = cJSON_AddObjectToObject(r, "splits");
    for (int s = 0; s < MD_SPLIT_COUNT; s++) {
        cJSON *so = cJSON_AddObjectToObject(splits, md_data_split_name((md_split)s));
        cJSON_AddNumberToObject(so, "count", (double)md_data_count(d, (md_split)s));
        cJSON_AddStringToObject(so, "origin", md_data_split_origin(d, (md_split)s));
        cJSON *pc = cJSON_AddArrayToObject(so, "per_class");
        for (int k = 0; k < nc; k++)
            cJSON_AddItemToArray(pc, cJSON_CreateNumber((double)md_data_class_count(d, (md_split)s, k)));
    }
    cJSON *cls = cJSON_AddArrayToObject(r, "classes");
    for (int k = 0; k < nc; k++) cJSON_AddItemToArray(cls, cJSON_CreateString(md_data_class_name(d, k)));
    cJSON *shape = cJSON_AddArrayToObject(r, "image_shape");
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(c));
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(h));
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(w));
    cJSON *ins = cJSON_AddArrayToObject(r, "inputs");
    for (int i = 0; i < md_data_num_inputs(d); i++) {
        const struct md_data_input *in = md_data_input(d, i);
        cJSON *io = cJSON_CreateObject();
        cJSON_AddStringToObject(io, "name", in->name);
        cJSON_AddStringToObject(io, "kind", kind_name(in->kind));
        int sh[3] = {in->c, in->h, in->w};
        cJSON_AddItemToObject(io, "shape", cJSON_CreateIntArray(sh, 3));
        cJSON_AddItemToObject(io, "mean", floats(md_data_mean(d, i), in->c));
        cJSON_AddItemToObject(io, "std", floats(md_data_std(d, i), in->c));
        cJSON_AddItemToArray(ins, io);
    }
    cJSON_AddStringToObject(r, "layout", md_layout_name(md_data_layout(d)));
    cJSON_AddStringToObject(r, "normalisation",
                            md_data_norm_given(d) ? "config" : md_data_norm_known(d) ? "published" : "computed");
    cJSON *aug = cJSON_AddObjectToObject(r, "augmentation");
    cJSON_AddBoolToObject(aug, "enabled", o->augment);
    cJSON_AddNumberToObject(aug, "crop_padding", md_data_aug_pad(d));
    cJSON_AddBoolToObject(aug, "flip", md_data_aug_flip(d));
    cJSON_AddNumberToObject(r, "num_workers", o->num_workers);
    cJSON_AddNumberToObject(r, "prefetch", o->prefetch);
    cJSON_AddBoolToObject(r, "pin_memory", o->pin_memory);
    cJSON *cache = cJSON_AddObjectToObject(r, "cache");
    cJSON_AddBoolToObject(cache, "enabled", o->cache_images || md_data_cache_estimate(d) > 0);
    cJSON_AddNumberToObject(cache, "estimate_bytes", (double)md_data_cache_estimate(d));
    cJSON_AddNumberToObject(cache, "bytes", (double)md_data_cache_bytes(d));
    cJSON_AddNumberToObject(r, "resident_bytes", (double)md_data_resident_bytes(d));
    report_skipped(d, r);
    md_data_describe(d, r);
    if (o->max_samples > 0) cJSON_AddNumberToObject(r, "max_samples", o->max_samples);
    else cJSON_AddNullToObject(r, "max_samples");
    cJSON *pr = cJSON_AddObjectToObject(r, "loader_probe");
    cJSON_AddNumberToObject(pr, "batch_size", pbatch);
    cJSON_AddNumberToObject(pr, "batches", (double)ls.batches);
    cJSON_AddNumberToObject(pr, "samples_per_s", ls.samples_per_s);
    cJSON_AddNumberToObject(pr, "batches_per_s", ls.batches_per_s);
    cJSON_AddNumberToObject(pr, "decode_per_s", ls.decode_per_s);
    cJSON_AddNumberToObject(pr, "wait_s", ls.wait_s);
    return MD_OK;
}

void md_stage_data_cleanup(md_job *job)
{
    md_data_free(job->data);
    job->data = NULL;
}
