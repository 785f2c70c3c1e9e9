/* format_csv_series.c - time series in CSV files (csv_series.c reads and
 * checks them), as forecasting windows: --dataset csv, or --dataset auto
 * with --data-dir naming a .csv file or a directory that holds exactly one.
 *
 * Samples are the windows of the three chronological splits, numbered train
 * first, then validation, then test (so the core's split ranges are
 * contiguous and the validation part is never carved out of training). A
 * window is (seq_len, n_in) standardised inputs, (seq_len, n_time) time
 * features when the file has dates, and (pred_len, n_out) targets;
 * docs/timeseries-data.md has the splits, the scaler and the windows. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "cJSON.h"
#include "core/mem.h"
#include "data/csv_series.h"
#include "core/platform.h"
#include "data/format.h"

struct csv_state {
    md_csv_series *s;
    const md_csv_info *info;
    long long first[MD_CSV_SPLITS]; /* global index of each split's window 0 */
    char path[MD_PATH_MAX];
};

static int ends_with_csv(const char *p)
{
    size_t n = strlen(p);
    return n > 4 && p[n - 4] == '.' && tolower((unsigned char)p[n - 3]) == 'c' &&
           tolower((unsigned char)p[n - 2]) == 's' && tolower((unsigned char)p[n - 1]) == 'v';
}

/* The CSV file `dir` names: itself when it is a .csv file, else the one .csv
 * file inside it. MD_ERR_DATA says why not. */
static md_status find_csv(const char *dir, char *path, size_t n)
{
    if (md_files_is_file(dir)) {
        if (!ends_with_csv(dir)) return md_errf(MD_ERR_DATA, "%s: not a .csv file", dir);
        snprintf(path, n, "%s", dir);
        return MD_OK;
    }
    DIR *dh = opendir(dir);
    if (!dh) return md_errf(MD_ERR_DATA, "%s: cannot open the directory", dir);
    int found = 0;
    char first[256] = "", second[256] = "";
    for (struct dirent *e; (e = readdir(dh));) {
        if (e->d_name[0] == '.' || !ends_with_csv(e->d_name)) continue;
        char full[MD_PATH_MAX];
        md_files_join(full, sizeof full, dir, e->d_name);
        if (!md_files_is_file(full)) continue;
        if (found == 0) snprintf(first, sizeof first, "%s", e->d_name);
        else if (found == 1) snprintf(second, sizeof second, "%s", e->d_name);
        found++;
    }
    closedir(dh);
    if (found == 0) return md_errf(MD_ERR_DATA, "%s: no .csv file", dir);
    if (found > 1)
        return md_errf(MD_ERR_DATA, "%s: %d .csv files (%s, %s, ...); name one with --data-dir FILE.csv", dir, found,
                       first, second);
    md_files_join(path, n, dir, first);
    return MD_OK;
}

static md_status csv_detect(const char *dir, const char *want, char *found, size_t n)
{
    (void)want;
    char path[MD_PATH_MAX];
    MD_TRY(find_csv(dir, path, sizeof path));
    snprintf(found, n, "csv");
    return MD_OK;
}

static md_status csv_default_dirs(const char *dataset, char (*dirs)[MD_PATH_MAX], int max, int *n)
{
    (void)dataset;
    *n = 0;
    if (max > 0) snprintf(dirs[(*n)++], MD_PATH_MAX, "data/timeseries-sample");
    /* the bundled sample beside the executable, wherever mpsdiag runs from */
    if (max > 1 && md_exe_dir()[0]) snprintf(dirs[(*n)++], MD_PATH_MAX, "%s/../data/timeseries-sample", md_exe_dir());
    return MD_OK;
}

/* The request's options as csv_series takes them. */
static md_status csv_opts(const struct md_series_request *r, md_csv_opts *o)
{
    md_csv_opts_default(o);
    o->seq_len = r->seq_len;
    o->pred_len = r->pred_len;
    if (strcmp(r->features, "M") == 0) o->features = MD_CSV_FEATURES_M;
    else if (strcmp(r->features, "S") == 0) o->features = MD_CSV_FEATURES_S;
    else if (strcmp(r->features, "MS") == 0) o->features = MD_CSV_FEATURES_MS;
    else return md_errf(MD_ERR_USAGE, "--features %s: not one of M, S, MS", r->features);
    o->target = r->target;
    o->train_frac = r->train_frac;
    o->test_frac = r->test_frac;
    if ((r->train_frac > 0) != (r->test_frac > 0))
        return md_errf(MD_ERR_USAGE, "--train-frac and --test-frac go together (validation gets the rest)");
    return MD_OK;
}

static void fill_series(const md_csv_info *in, struct md_data_series *s)
{
    s->seq_len = in->seq_len;
    s->n_in = in->n_in;
    s->n_time = in->n_time;
    s->pred_len = in->pred_len;
    s->n_out = in->n_out;
    /* stored order puts the target last: S and MS predict the last input column */
    s->out_col = in->n_in - in->n_out;
}

static md_status load(const struct md_format_args *a, struct csv_state **out)
{
    *out = NULL;
    md_csv_opts o;
    MD_TRY(csv_opts(a->series, &o));
    struct csv_state *st = md_calloc(1, sizeof *st);
    if (!st) return MD_ERR_OOM;
    md_status rc = find_csv(a->dir, st->path, sizeof st->path);
    if (rc == MD_OK) rc = md_csv_series_load(st->path, &o, &st->s);
    if (rc != MD_OK) {
        md_free(st);
        return rc;
    }
    st->info = md_csv_series_info(st->s);
    long long at = 0;
    for (int k = 0; k < MD_CSV_SPLITS; k++) {
        st->first[k] = at;
        at += st->info->windows[k];
    }
    *out = st;
    return MD_OK;
}

static void csv_free(void *state)
{
    struct csv_state *st = state;
    if (!st) return;
    md_csv_series_free(st->s);
    md_free(st);
}

static md_status csv_peek(const struct md_format_args *a, struct md_data_peek *out)
{
    struct csv_state *st;
    MD_TRY(load(a, &st));
    out->num_classes = 0;
    out->task = MD_TASK_REGRESS;
    fill_series(st->info, &out->series);
    out->c = 1;
    out->h = out->series.seq_len;
    out->w = out->series.n_in;
    csv_free(st);
    return MD_OK;
}

static void rows_origin(char *buf, size_t n, const md_csv_info *in, int k)
{
    static const char *const rule[] = {"12/4/4 months of hours", "12/4/4 months of 15-minute rows", NULL};
    const char *how = in->rule == MD_CSV_SPLIT_RATIO ? "in time order" : rule[in->rule];
    snprintf(buf, n, "rows %lld-%lld of the file (%s)", in->border1[k], in->border2[k] - 1, how);
}

static md_status csv_open(const struct md_format_args *a, struct md_format_desc *d, void **state)
{
    *state = NULL;
    struct csv_state *st;
    MD_TRY(load(a, &st));
    const md_csv_info *in = st->info;
    snprintf(d->format, sizeof d->format, "csv");
    snprintf(d->source, sizeof d->source, "%s", st->path);
    d->sample = MD_SAMPLE_SERIES_F32;
    d->target = MD_TARGET_VALUES;
    fill_series(in, &d->series);
    d->target_mean = in->mean + (in->n_vars - in->n_out);
    d->target_std = in->std + (in->n_vars - in->n_out);
    d->c = 1;
    d->h = in->seq_len;
    d->w = in->n_in;
    d->count = st->first[2] + in->windows[2];
    d->labels = md_calloc((size_t)(d->count > 0 ? d->count : 1), sizeof(int32_t));
    if (!d->labels) {
        csv_free(st);
        return MD_ERR_OOM;
    }
    for (int k = 0; k < MD_CSV_SPLITS; k++) {
        d->ranges.start[k] = st->first[k];
        d->ranges.end[k] = st->first[k] + in->windows[k];
        rows_origin(d->split_origin[k], sizeof d->split_origin[k], in, k);
    }
    /* the whole series is in memory: never cached again */
    d->resident_bytes = (long long)(in->rows * in->n_vars * (long long)sizeof(float));
    *state = st;
    return MD_OK;
}

static md_status csv_read_series(const void *state, long long i, float *x, float *x_mark, float *y)
{
    const struct csv_state *st = state;
    int k = i >= st->first[2] ? 2 : i >= st->first[1] ? 1 : 0;
    md_csv_series_window(st->s, k, i - st->first[k], x, y, st->info->n_time ? x_mark : NULL, NULL);
    return MD_OK;
}

static md_status csv_read_image(const void *state, void *scratch, long long i, uint8_t *buf, const uint8_t **px)
{
    (void)state, (void)scratch, (void)i, (void)buf, (void)px;
    return md_errf(MD_ERR_INTERNAL, "csv: a time series has no images (read_series)");
}

static void csv_describe(const void *state, cJSON *data)
{
    const struct csv_state *st = state;
    const md_csv_info *in = st->info;
    static const char *const feat[] = {"M", "S", "MS"};
    cJSON *ts = cJSON_AddObjectToObject(data, "time_series");
    if (!ts) return;
    cJSON_AddStringToObject(ts, "file", st->path);
    cJSON_AddNumberToObject(ts, "rows", (double)in->rows);
    cJSON_AddNumberToObject(ts, "seq_len", in->seq_len);
    cJSON_AddNumberToObject(ts, "pred_len", in->pred_len);
    cJSON_AddStringToObject(ts, "features", feat[in->features]);
    cJSON_AddStringToObject(ts, "target", in->names[in->n_vars - 1]);
    cJSON_AddNumberToObject(ts, "time_features", in->n_time);
    cJSON *cols = cJSON_AddArrayToObject(ts, "variates");
    for (int v = 0; cols && v < in->n_vars; v++) cJSON_AddItemToArray(cols, cJSON_CreateString(in->names[v]));
    cJSON *b = cJSON_AddArrayToObject(ts, "split_rows");
    for (int k = 0; b && k < MD_CSV_SPLITS; k++) {
        cJSON *r = cJSON_CreateArray();
        cJSON_AddItemToArray(r, cJSON_CreateNumber((double)in->border1[k]));
        cJSON_AddItemToArray(r, cJSON_CreateNumber((double)in->border2[k]));
        cJSON_AddItemToArray(b, r);
    }
}

const struct md_data_format md_format_csv_series = {
    .name = "csv",
    .datasets = (const char *const[]){"csv", NULL},
    .expects = "a .csv time-series file (or a directory holding one)",
    .detect = csv_detect,
    .default_dirs = csv_default_dirs,
    .peek = csv_peek,
    .open = csv_open,
    .read = csv_read_image,
    .read_series = csv_read_series,
    .describe = csv_describe,
    .free = csv_free,
};
