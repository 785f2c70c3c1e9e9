/* data.c - opening a dataset through its format (format.h): the delivered
 * inputs, augmentation defaults, the decoded-image cache, bad-sample
 * bookkeeping, and the queries of data.h.
 * Splits are in splits.c, normalisation in normalise.c, per-sample
 * preparation in prepare.c, the config's "data" section in data_config.c. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cJSON.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/platform.h"
#include "data/format.h"

/* ------------------------------------------------------------------------ */
/* bad samples                                                                */

void md_data_note_bad(struct md_data *d, const char *path, const char *msg)
{
    long long n = __atomic_add_fetch(&d->skipped, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&d->mu);
    if (!d->first_bad[0]) snprintf(d->first_bad, sizeof d->first_bad, "%s", msg);
    if (d->nbad_listed < MD_DATA_BAD_LISTED) {
        /* the reason without the "<path>: " the message starts with */
        size_t pl = strlen(path);
        const char *why = strncmp(msg, path, pl) == 0 && msg[pl] == ':' && msg[pl + 1] == ' ' ? msg + pl + 2 : msg;
        snprintf(d->bad_path[d->nbad_listed], sizeof d->bad_path[0], "%s", path);
        snprintf(d->bad_msg[d->nbad_listed], sizeof d->bad_msg[0], "%s", why);
        d->nbad_listed++;
    }
    pthread_mutex_unlock(&d->mu);
    if (n == 1) md_warn("skipping bad sample: %s (--on-bad-sample skip; the report counts them)", msg);
    else md_verbose("  skipping bad sample: %s\n", msg);
}

/* ------------------------------------------------------------------------ */
/* the delivered inputs                                                       */

static md_status resolve_inputs(struct md_data *d, const struct md_data_opts *o, const struct md_data_request *req)
{
    d->layout = req->layout;
    d->num_inputs = req->num_inputs > 0 ? req->num_inputs : 1;
    if (d->num_inputs > MD_DATA_MAX_INPUTS)
        return md_errf(MD_ERR_CONFIG, "the model has %d inputs; the loader delivers at most %d", d->num_inputs,
                       MD_DATA_MAX_INPUTS);
    int nimg = 0; /* image inputs so far: with halves, the first two are left and right */
    for (int i = 0; i < d->num_inputs; i++) {
        struct md_data_input *in = &d->inputs[i];
        if (req->num_inputs > 0) *in = req->inputs[i];
        else memset(in, 0, sizeof *in);
        if (!in->name[0]) snprintf(in->name, sizeof in->name, i ? "input%d" : "image", i);
        d->view_x0[i] = 0;
        d->view_w[i] = d->src_w;
        if (in->kind == MD_INPUT_SIDE) {
            long long k = (long long)(in->c ? in->c : 1) * (in->h ? in->h : 1) * (in->w ? in->w : 1);
            if (d->n_side == 0)
                return md_errf(MD_ERR_CONFIG, "model input '%s' takes side values; name their columns with --side-cols",
                               in->name);
            if (in->c == 0 && in->h == 0 && in->w == 0) k = d->n_side;
            if (k != d->n_side)
                return md_errf(MD_ERR_CONFIG, "model input '%s' takes %lld side values; --side-cols names %d", in->name,
                               k, d->n_side);
            if (!in->c) in->c = 1;
            if (!in->h) in->h = 1;
            if (!in->w) in->w = d->n_side / (in->c * in->h);
            continue;
        }
        if (d->halves && in->kind == MD_INPUT_IMAGE && nimg < 2) in->kind = nimg == 0 ? MD_INPUT_LEFT : MD_INPUT_RIGHT;
        if (in->kind == MD_INPUT_LEFT || in->kind == MD_INPUT_RIGHT) {
            if (!d->halves)
                return md_errf(MD_ERR_CONFIG, "model input '%s' takes the %s half of a wide image: use --dataset "
                               "images-csv (halves are made from its images)", in->name,
                               in->kind == MD_INPUT_LEFT ? "left" : "right");
            d->view_w[i] = d->src_w / 2;
            d->view_x0[i] = in->kind == MD_INPUT_LEFT ? 0 : d->src_w / 2;
        }
        nimg++;
        if (in->kind == MD_INPUT_LUMA) {
            if (in->c == 0) in->c = 1;
            if (in->c != 1)
                return md_errf(MD_ERR_CONFIG, "model input '%s': a brightness input has 1 channel, not %d", in->name,
                               in->c);
        }
        if (in->c == 0) in->c = d->src_c;
        if (in->c != d->src_c && !(in->c == 3 && d->src_c == 1) && !(in->c == 1 && d->src_c == 3))
            return md_errf(MD_ERR_CONFIG, "model input '%s' wants %d channels; %s images have %d", in->name, in->c,
                           d->name, d->src_c);
        if (in->h == 0) in->h = o->image_size > 0 ? o->image_size : d->src_h;
        if (in->w == 0) in->w = o->image_size > 0 ? o->image_size : d->view_w[i];
        if (in->h < 1 || in->w < 1 || in->h > 4096 || in->w > 4096 || in->c < 1 || in->c > 3)
            return md_errf(MD_ERR_CONFIG, "model input '%s': unusable shape (%d, %d, %d)", in->name, in->c, in->h,
                           in->w);
    }
    if (d->halves && nimg < 2)
        return md_errf(MD_ERR_CONFIG, "--halves: the model has %d image input%s; the halves need two (left, right)",
                       nimg, nimg == 1 ? "" : "s");
    if (d->n_side > 0) {
        int have = 0;
        for (int i = 0; i < d->num_inputs; i++) have |= d->inputs[i].kind == MD_INPUT_SIDE;
        if (!have)
            return md_errf(MD_ERR_CONFIG, "--side-cols: the model has no input named \"side\" to take them");
    }
    return MD_OK;
}

/* Mean and std of `k` columns of `v` (n_all, k) over the training split;
 * std 0 (a constant column) becomes 1. identity: mean 0, std 1. */
static md_status train_stats(const struct md_data *d, const float *v, int k, int identity, double **mean, double **sd)
{
    *mean = md_calloc((size_t)(k > 0 ? k : 1), sizeof(double));
    *sd = md_calloc((size_t)(k > 0 ? k : 1), sizeof(double));
    if (!*mean || !*sd) return MD_ERR_OOM;
    long long n = d->split_n[MD_SPLIT_TRAIN];
    for (int j = 0; j < k; j++) {
        double s = 0, q = 0;
        for (long long i = 0; !identity && i < n; i++) s += (double)v[(size_t)d->split[MD_SPLIT_TRAIN][i] * k + j];
        double m = identity || n == 0 ? 0.0 : s / (double)n;
        for (long long i = 0; !identity && i < n; i++) {
            double e = (double)v[(size_t)d->split[MD_SPLIT_TRAIN][i] * k + j] - m;
            q += e * e;
        }
        double sdv = identity || n == 0 ? 1.0 : sqrt(q / (double)n);
        (*mean)[j] = m;
        (*sd)[j] = sdv > 1e-12 ? sdv : 1.0;
    }
    return MD_OK;
}

/* A time series' inputs: 0 the series, 1 its time features (when the file
 * has dates and the model takes a second input, or names none). A request's
 * MD_INPUT_IMAGE (the zero default) stands for what position i holds. */
static md_status resolve_series_inputs(struct md_data *d, const struct md_data_request *req)
{
    const struct md_data_series *s = &d->series;
    d->layout = MD_NCHW;
    d->num_inputs = req->num_inputs > 0 ? req->num_inputs : (s->n_time > 0 ? 2 : 1);
    if (d->num_inputs > 2 || (d->num_inputs == 2 && s->n_time == 0))
        return md_errf(MD_ERR_CONFIG, "the model has %d inputs; a time series gives its values%s", d->num_inputs,
                       s->n_time ? " and its time features" : " only (the file has no date column)");
    for (int i = 0; i < d->num_inputs; i++) {
        struct md_data_input *in = &d->inputs[i];
        md_input_kind want = i == 0 ? MD_INPUT_SERIES : MD_INPUT_TIME;
        int w = i == 0 ? s->n_in : s->n_time;
        if (req->num_inputs > 0) *in = req->inputs[i];
        else memset(in, 0, sizeof *in);
        if (in->kind == MD_INPUT_IMAGE) in->kind = want;
        if (!in->name[0]) snprintf(in->name, sizeof in->name, "%s", i ? "time_features" : "series");
        if (in->kind != want)
            return md_errf(MD_ERR_CONFIG, "model input '%s': input %d of a time series is its %s", in->name, i,
                           i ? "time features" : "values");
        /* (1, seq_len, w) as images are held, or (seq_len, 1, w) as a
         * sequence model's tokens: the same memory */
        if (in->c == s->seq_len && in->h == 1 && s->seq_len != 1) {
            in->c = 1;
            in->h = s->seq_len;
        }
        if ((in->c && in->c != 1) || (in->h && in->h != s->seq_len) || (in->w && in->w != w))
            return md_errf(MD_ERR_CONFIG, "model input '%s' wants (%d, %d, %d); the windows are (1, %d, %d) (seq_len %d)",
                           in->name, in->c, in->h, in->w, s->seq_len, w, s->seq_len);
        in->c = 1;
        in->h = s->seq_len;
        in->w = w;
    }
    return MD_OK;
}

/* ------------------------------------------------------------------------ */
/* open / free                                                                */

static void note_bad_cb(void *ctx, const char *path, const char *msg) { md_data_note_bad(ctx, path, msg); }

/* Moves what the format's open found into d (the arrays change owner). */
static void take_desc(struct md_data *d, struct md_format_desc *desc)
{
    snprintf(d->format, sizeof d->format, "%s", desc->format);
    snprintf(d->source, sizeof d->source, "%s", desc->source);
    d->src_c = desc->c;
    d->src_h = desc->h;
    d->src_w = desc->w;
    d->src_bytes = (size_t)desc->c * desc->h * desc->w;
    d->num_classes = desc->num_classes;
    d->class_names = desc->class_names;
    d->n_all = desc->count;
    d->labels = desc->labels;
    d->ranges = desc->ranges;
    memcpy(d->split_origin, desc->split_origin, sizeof d->split_origin);
    d->resident_bytes = desc->resident_bytes;
    d->keep_decoded = desc->keep_decoded;
    d->known_channels = desc->known_channels;
    memcpy(d->known_mean, desc->known_mean, sizeof d->known_mean);
    memcpy(d->known_std, desc->known_std, sizeof d->known_std);
    d->norm_samples = desc->norm_samples;
    d->no_flip = desc->no_flip;
    d->task = desc->target == MD_TARGET_VALUES ? MD_TASK_REGRESS : MD_TASK_CLASSIFY;
    d->series = desc->series;
    d->target_mean = desc->target_mean;
    d->target_std = desc->target_std;
    d->image_values = desc->sample == MD_SAMPLE_IMAGE_U8 && desc->target == MD_TARGET_VALUES;
    d->values = desc->values;
    d->target_names = desc->target_names;
    d->n_side = desc->n_side;
    d->side = desc->side;
    d->side_names = desc->side_names;
    d->halves = desc->halves;
    d->no_augment = desc->no_augment;
}

md_status md_data_open(const struct md_data_opts *o, const struct md_data_request *req, struct md_data **out)
{
    static const struct md_data_request none;
    if (!req) req = &none;
    *out = NULL;
    md_status st = MD_OK;
    struct md_data *d = md_calloc(1, sizeof *d);
    if (!d) return MD_ERR_OOM;
    pthread_mutex_init(&d->mu, NULL);
    d->skip_bad = o->skip_bad;
    char dir[MD_PATH_MAX];
    if ((st = md_format_resolve(o->dataset, o->data_dir, &d->fmt, d->name, sizeof d->name, dir, sizeof dir)) !=
        MD_OK)
        goto fail;
    struct md_format_args args = {
        .dataset = d->name, .dir = dir, .req = req, .image_size = o->image_size, .coarse_labels = o->coarse_labels,
        .max_samples = o->max_samples, .val_split = o->val_split, .seed = o->seed, .series = &o->series,
        .images = &o->images, .skip_bad = d->skip_bad, .bad = note_bad_cb, .bad_ctx = d,
    };
    int no_std = o->images.no_standardize;
    struct md_format_desc *desc = md_calloc(1, sizeof *desc);
    if (!desc) { st = MD_ERR_OOM; goto fail; }
    st = d->fmt->open(&args, desc, &d->fstate);
    take_desc(d, desc);
    md_free(desc);
    if (st != MD_OK) goto fail;
    if (d->n_all == 0 || d->ranges.end[MD_SPLIT_TRAIN] == d->ranges.start[MD_SPLIT_TRAIN]) {
        st = md_errf(MD_ERR_DATA, "%s: no training samples", d->source[0] ? d->source : d->name);
        goto fail;
    }
    d->folds = o->folds > 1 ? o->folds : 1;
    d->fold = d->folds > 1 ? o->fold : 0;
    if (d->folds == 1 && o->fold != 0) {
        st = md_errf(MD_ERR_USAGE, "--fold %d: give --folds K too", o->fold);
        goto fail;
    }
    if (d->folds > 1 && o->fold < 0) {
        st = md_errf(MD_ERR_USAGE, "--fold all: the caller runs each fold (internal)");
        goto fail;
    }
    if (d->task == MD_TASK_REGRESS && !d->image_values) { /* chronological splits, no classes, augmentation or pixel statistics */
        if ((st = md_splits_make(d, 0.0, o->max_samples, o->seed, &d->ranges, d->folds, d->fold)) != MD_OK) goto fail;
        if ((st = resolve_series_inputs(d, req)) != MD_OK) goto fail;
        *out = d;
        return MD_OK;
    }
    if (req->num_classes > 0 && req->num_classes < d->num_classes) {
        st = md_errf(MD_ERR_CONFIG, "the model has %d outputs but %s has %d classes", req->num_classes, d->name,
                     d->num_classes);
        goto fail;
    }
    if ((st = md_splits_make(d, o->val_split, o->max_samples, o->seed, &d->ranges, d->folds, d->fold)) != MD_OK) goto fail;
    if ((st = resolve_inputs(d, o, req)) != MD_OK) goto fail;
    /* images with float targets: the scaler of the targets and side values
     * from the training split (after the folds are cut) */
    if (d->image_values) {
        if ((st = train_stats(d, d->values, d->series.n_out, no_std, &d->tmean, &d->tstd)) != MD_OK) goto fail;
        d->target_mean = d->tmean;
        d->target_std = d->tstd;
    }
    if (d->n_side > 0 && (st = train_stats(d, d->side, d->n_side, 0, &d->smean, &d->sstd)) != MD_OK) goto fail;

    /* Augmentation: pad by an eighth of the side (4 px at 28-32 px, at most
     * 4); flip unless the format says mirror images are other classes. */
    {
        int side = d->inputs[0].h < d->inputs[0].w ? d->inputs[0].h : d->inputs[0].w;
        d->aug_pad = (side + 4) / 8 > 4 ? 4 : (side + 4) / 8;
        d->aug_flip = !d->no_flip;
        if (d->no_augment) d->aug_pad = d->aug_flip = 0;
        if (req->crop_padding) d->aug_pad = req->crop_padding > 0 ? req->crop_padding : 0;
        if (req->flip) d->aug_flip = req->flip > 0;
        if (d->aug_pad > side) {
            st = md_errf(MD_ERR_CONFIG, "data.augment.crop_padding: %d is more than the image side %d", d->aug_pad, side);
            goto fail;
        }
    }

    /* The cache: estimated, checked, then allocated (filled as samples are
     * first read), for formats that read on demand; some keep every sample
     * they made anyway (desc.keep_decoded). */
    if ((o->cache_images || d->keep_decoded) && !d->resident_bytes) {
        d->cache_estimate = (long long)((size_t)d->n_all * d->src_bytes);
        long long avail = req->mem_available > 0 ? req->mem_available : md_mem_available_bytes();
        char a[32], b[32];
        /* kept without --cache-images: only when it fits in half the RAM */
        if (!o->cache_images && avail > 0 && d->cache_estimate > avail / 2) {
            md_verbose("  decoded images not kept: %s would be more than half the %s of RAM available\n",
                       md_fmt_bytes((double)d->cache_estimate, a, sizeof a), md_fmt_bytes((double)avail, b, sizeof b));
            d->cache_estimate = 0;
        } else if (avail > 0 && d->cache_estimate > avail) {
            st = md_errf(MD_ERR_OOM,
                         "--cache-images: %lld decoded images of %dx%dx%d need %s, more than the %s of RAM available; "
                         "run without it, or with a smaller --image-size or --max-samples",
                         d->n_all, d->src_c, d->src_h, d->src_w, md_fmt_bytes((double)d->cache_estimate, a, sizeof a),
                         md_fmt_bytes((double)avail, b, sizeof b));
            goto fail;
        }
        if (d->cache_estimate > 0) {
            d->cache = md_malloc((size_t)d->cache_estimate);
            d->cache_state = md_calloc((size_t)d->n_all, sizeof(int));
            if (!d->cache || !d->cache_state) { st = MD_ERR_OOM; goto fail; }
        }
    }

    md_normalise_known(d);
    if (!d->norm_known && (st = md_normalise_compute(d)) != MD_OK) goto fail;
    if (req->norm_channels > 0) {
        if (req->norm_channels != d->inputs[0].c) {
            st = md_errf(MD_ERR_CONFIG, "data.normalize: %d mean/std values for an input of %d channels",
                         req->norm_channels, d->inputs[0].c);
            goto fail;
        }
        for (int c = 0; c < req->norm_channels; c++) {
            d->mean[0][c] = req->mean[c];
            d->stdv[0][c] = req->std[c];
        }
        d->norm_given = 1;
    }
    md_normalise_luts(d);
    *out = d;
    return MD_OK;
fail:
    md_data_free(d);
    return st;
}

md_status md_data_peek(const struct md_data_opts *o, struct md_data_peek *out)
{
    memset(out, 0, sizeof *out);
    const struct md_data_format *fmt = NULL;
    char dir[MD_PATH_MAX];
    MD_TRY(md_format_resolve(o->dataset, o->data_dir, &fmt, out->name, sizeof out->name, dir, sizeof dir));
    static const struct md_data_request none;
    struct md_format_args args = {
        .dataset = out->name, .dir = dir, .req = &none, .image_size = o->image_size,
        .coarse_labels = o->coarse_labels, .max_samples = o->max_samples, .val_split = o->val_split, .seed = o->seed,
        .series = &o->series, .images = &o->images,
    };
    return fmt->peek(&args, out);
}

void md_data_free(struct md_data *d)
{
    if (!d) return;
    if (d->fmt && d->fmt->free) d->fmt->free(d->fstate);
    md_free(d->labels);
    md_files_free_names(d->class_names, d->num_classes);
    for (int s = 0; s < MD_SPLIT_COUNT; s++) md_free(d->split[s]);
    md_free(d->class_counts);
    md_free(d->cache);
    md_free(d->cache_state);
    md_free(d->values);
    md_files_free_names(d->target_names, d->image_values ? d->series.n_out : 0);
    md_free(d->tmean);
    md_free(d->tstd);
    md_free(d->side);
    md_files_free_names(d->side_names, d->n_side);
    md_free(d->smean);
    md_free(d->sstd);
    pthread_mutex_destroy(&d->mu);
    md_free(d);
}

/* ------------------------------------------------------------------------ */
/* queries                                                                    */

const char *md_data_name(const struct md_data *d) { return d->name; }
const char *md_data_format(const struct md_data *d) { return d->format; }
const char *md_data_source(const struct md_data *d) { return d->source; }
const char *md_data_split_name(md_split s)
{
    static const char *const n[MD_SPLIT_COUNT] = {"train", "val", "test"};
    return s >= 0 && s < MD_SPLIT_COUNT ? n[s] : "?";
}
const char *md_data_split_origin(const struct md_data *d, md_split s) { return d->split_origin[s]; }
long long md_data_count(const struct md_data *d, md_split s) { return d->split_n[s]; }
int md_data_num_classes(const struct md_data *d) { return d->num_classes; }
const char *md_data_class_name(const struct md_data *d, int k)
{
    return k >= 0 && k < d->num_classes ? d->class_names[k] : "?";
}
long long md_data_class_count(const struct md_data *d, md_split s, int k)
{
    return k >= 0 && k < d->num_classes ? d->class_counts[(size_t)s * d->num_classes + k] : 0;
}
void md_data_source_shape(const struct md_data *d, int *c, int *h, int *w)
{
    *c = d->src_c;
    *h = d->src_h;
    *w = d->src_w;
}
int md_data_num_inputs(const struct md_data *d) { return d->num_inputs; }
const struct md_data_input *md_data_input(const struct md_data *d, int i) { return &d->inputs[i]; }
md_layout md_data_layout(const struct md_data *d) { return d->layout; }
size_t md_data_input_elems(const struct md_data *d, int i)
{
    return (size_t)d->inputs[i].c * d->inputs[i].h * d->inputs[i].w;
}
md_task md_data_task(const struct md_data *d) { return d->task; }
const struct md_data_series *md_data_series(const struct md_data *d) { return &d->series; }
size_t md_data_target_elems(const struct md_data *d)
{
    return d->task == MD_TASK_REGRESS ? (size_t)d->series.pred_len * (size_t)d->series.n_out : 0;
}
const double *md_data_target_mean(const struct md_data *d) { return d->task == MD_TASK_REGRESS ? d->target_mean : NULL; }
const double *md_data_target_std(const struct md_data *d) { return d->task == MD_TASK_REGRESS ? d->target_std : NULL; }
const float *md_data_mean(const struct md_data *d, int i) { return d->mean[i]; }
const float *md_data_std(const struct md_data *d, int i) { return d->stdv[i]; }
int md_data_norm_known(const struct md_data *d) { return d->norm_known; }
int md_data_norm_given(const struct md_data *d) { return d->norm_given; }
int md_data_aug_pad(const struct md_data *d) { return d->aug_pad; }
int md_data_aug_flip(const struct md_data *d) { return d->aug_flip; }
long long md_data_cache_bytes(const struct md_data *d)
{
    return __atomic_load_n(&d->cache_filled, __ATOMIC_RELAXED) * (long long)d->src_bytes;
}
long long md_data_cache_estimate(const struct md_data *d) { return d->cache_estimate; }
long long md_data_resident_bytes(const struct md_data *d) { return d->resident_bytes; }
long long md_data_skipped(const struct md_data *d) { return __atomic_load_n(&d->skipped, __ATOMIC_RELAXED); }
const char *md_data_first_bad(const struct md_data *d) { return d->first_bad; }
int md_data_bad_listed(struct md_data *d, int i, char *path, size_t pn, char *why, size_t wn)
{
    pthread_mutex_lock(&d->mu);
    int n = d->nbad_listed;
    if (i >= 0 && i < n) {
        snprintf(path, pn, "%s", d->bad_path[i]);
        snprintf(why, wn, "%s", d->bad_msg[i]);
    }
    pthread_mutex_unlock(&d->mu);
    return n;
}

const char *md_data_target_name(const struct md_data *d, int j)
{
    return d->target_names && j >= 0 && j < d->series.n_out && d->target_names[j] ? d->target_names[j] : "";
}
int md_data_num_side(const struct md_data *d) { return d->n_side; }
const char *md_data_side_name(const struct md_data *d, int j)
{
    return d->side_names && j >= 0 && j < d->n_side ? d->side_names[j] : "";
}
const double *md_data_side_mean(const struct md_data *d) { return d->smean; }
const double *md_data_side_std(const struct md_data *d) { return d->sstd; }
int md_data_folds(const struct md_data *d, int *fold)
{
    if (fold) *fold = d->fold;
    return d->folds;
}

static cJSON *scaler_json(char **names, int k, const double *mean, const double *sd)
{
    cJSON *a = cJSON_CreateArray();
    for (int j = 0; a && j < k; j++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "name", names && names[j] ? names[j] : "");
        cJSON_AddNumberToObject(t, "mean", mean ? mean[j] : 0.0);
        cJSON_AddNumberToObject(t, "std", sd ? sd[j] : 1.0);
        cJSON_AddItemToArray(a, t);
    }
    return a;
}

void md_data_describe(const struct md_data *d, struct cJSON *data)
{
    if (d->fmt->describe) d->fmt->describe(d->fstate, data);
    /* the scalers: original = standardised * std + mean */
    if (d->image_values) cJSON_AddItemToObject(data, "target_scaler", scaler_json(d->target_names, d->series.n_out,
                                                                                  d->tmean, d->tstd));
    if (d->n_side > 0) cJSON_AddItemToObject(data, "side_scaler", scaler_json(d->side_names, d->n_side, d->smean, d->sstd));
    if (d->folds > 1) {
        cJSON *f = cJSON_AddObjectToObject(data, "folds");
        cJSON_AddNumberToObject(f, "k", d->folds);
        cJSON_AddNumberToObject(f, "fold", d->fold);
    }
}
