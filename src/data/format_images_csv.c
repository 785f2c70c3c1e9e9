/* format_images_csv.c - a folder of images labelled by a CSV file:
 * --dataset images-csv, or --dataset auto with --data-dir naming a .csv file
 * whose header has an image column, or a folder holding labels.csv.
 *
 * One row per sample: an image path (relative to the CSV's folder), and
 * either numeric targets (regression: --target-cols, default every numeric
 * column that is not a side column) or a class (--class-col). --side-cols
 * names numeric columns delivered as the extra model input "side".
 * Images are JPEGs (TurboJPEG), decoded at full size and resized bilinearly
 * (half-pixel centres, no antialias) to the model input's H x W; with
 * --halves (or model inputs named "left" and "right") the left and right
 * halves (columns [0, w/2) and [w/2, w)) are each resized to H x W and
 * stored side by side. Every file is decoded once at open (at the smallest
 * DCT scale), so a bad one fails, or is skipped, there.
 * docs/image-regression-data.md has the format, flags and scalers. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cJSON.h"
#include "core/mem.h"
#include "core/platform.h"
#include "core/signals.h"
#include "data/format.h"

#define MAX_COLS 1024
#define MAX_LIST 64

struct icsv_state {
    char csv[MD_PATH_MAX];
    char image_col[64];
    char **paths;       /* (count) */
    long long count;
    int c, h, w;        /* stored: w = 2 * the model's W with halves */
    int halves;
};

struct icsv_scratch {
    md_jpeg *jpeg;
    uint8_t *file;      /* (cap) the last file read */
    size_t cap;
    uint8_t *full;      /* (fcap) decoded at full size */
    size_t fcap;
    uint8_t *part;      /* (pcap) one half, contiguous */
    size_t pcap;
};

/* ------------------------------------------------------------------------ */
/* the CSV: a header and rows of fields (RFC 4180 quotes, CRLF or LF)        */

struct table {
    int ncols;
    char **head;        /* (ncols) */
    long long nrows;
    char **cells;       /* (nrows, ncols) */
    long long *line;    /* (nrows) line of each row in the file, from 1 */
};

static void table_free(struct table *t)
{
    md_files_free_names(t->head, t->ncols);
    md_files_free_names(t->cells, t->nrows * t->ncols);
    md_free(t->line);
    memset(t, 0, sizeof *t);
}

/* Splits one line starting at *p into fields (md_strdup'd into f[]); *p
 * moves past the line's end. Returns the field count, -1 on too many, -2 on
 * an unclosed quote, -3 out of memory. */
static int split_line(const char **p, const char *end, char **f, int max, long long *lines)
{
    int n = 0;
    const char *s = *p;
    char buf[4096];
    for (;;) {
        size_t bl = 0;
        if (s < end && *s == '"') {
            s++;
            for (;;) {
                if (s >= end) return -2;
                if (*s == '"') {
                    if (s + 1 < end && s[1] == '"') { if (bl + 1 < sizeof buf) buf[bl++] = '"'; s += 2; continue; }
                    s++;
                    break;
                }
                if (*s == '\n') (*lines)++;
                if (bl + 1 < sizeof buf) buf[bl++] = *s;
                s++;
            }
            while (s < end && *s != ',' && *s != '\n' && *s != '\r') s++;
        } else {
            while (s < end && *s != ',' && *s != '\n' && *s != '\r') {
                if (bl + 1 < sizeof buf) buf[bl++] = *s;
                s++;
            }
        }
        buf[bl] = '\0';
        /* fields are trimmed of surrounding blanks */
        char *a = buf;
        while (*a == ' ' || *a == '\t') a++;
        size_t al = strlen(a);
        while (al > 0 && (a[al - 1] == ' ' || a[al - 1] == '\t')) a[--al] = '\0';
        if (n == max) return -1;
        if (!(f[n++] = md_strdup(a))) return -3;
        if (s < end && *s == ',') { s++; continue; }
        break;
    }
    if (s < end && *s == '\r') s++;
    if (s < end && *s == '\n') s++;
    *p = s;
    return n;
}

static int blank_line(const char *s, const char *end)
{
    while (s < end && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
    return s >= end || *s == '\n';
}

/* The start of the line after the one at s. */
static const char *next_line(const char *s, const char *end)
{
    while (s < end && *s != '\n') s++;
    return s < end ? s + 1 : s;
}

/* The error of a row split_line() refused (-1: too many `what`, -2: an
 * unclosed quote, -3: out of memory). */
static md_status split_error(const char *path, long long row, int code, const char *what)
{
    if (code == -3) return MD_ERR_OOM;
    if (code == -1) return md_errf(MD_ERR_DATA, "%s: row %lld: more than 1024 %s", path, row, what);
    return md_errf(MD_ERR_DATA, "%s: row %lld: unclosed quote", path, row);
}

static md_status table_read(const char *path, struct table *t)
{
    memset(t, 0, sizeof *t);
    if (!md_files_is_file(path)) return md_errf(MD_ERR_DATA, "%s: no such file", path);
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    MD_TRY(md_files_read(path, &buf, &cap, &len));
    md_status st = MD_OK;
    const char *p = (const char *)buf, *end = p + len;
    if (len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3; /* a UTF-8 byte-order mark */
    long long lineno = 1;
    char **f = md_calloc(MAX_COLS, sizeof *f);
    if (!f) { md_free(buf); return MD_ERR_OOM; }
    while (p < end && blank_line(p, end)) {
        p = next_line(p, end);
        lineno++;
    }
    if (p >= end) { st = md_errf(MD_ERR_DATA, "%s: empty (no header line)", path); goto done; }
    long long first = lineno;
    int n = split_line(&p, end, f, MAX_COLS, &lineno);
    if (n < 0) {
        st = split_error(path, first, n, "columns");
        goto done;
    }
    t->ncols = n;
    t->head = md_calloc((size_t)n, sizeof *t->head);
    if (!t->head) { st = MD_ERR_OOM; goto done; }
    memcpy(t->head, f, (size_t)n * sizeof *f);
    memset(f, 0, (size_t)n * sizeof *f);
    for (int a = 0; a < n; a++)
        for (int b = 0; b < a; b++)
            if (strcmp(t->head[a], t->head[b]) == 0) {
                st = md_errf(MD_ERR_DATA, "%s: row %lld: column '%s' appears twice in the header", path, first,
                             t->head[a]);
                goto done;
            }
    lineno++;
    long long rcap = 0;
    while (p < end) {
        if (blank_line(p, end)) {
            p = next_line(p, end);
            lineno++;
            continue;
        }
        long long at = lineno;
        int m = split_line(&p, end, f, MAX_COLS, &lineno);
        if (m < 0) {
            st = split_error(path, at, m, "fields");
            goto done;
        }
        if (m != t->ncols) {
            for (int k = 0; k < m; k++) { md_free(f[k]); f[k] = NULL; }
            st = md_errf(MD_ERR_DATA, "%s: row %lld: %d fields, the header has %d", path, at, m, t->ncols);
            goto done;
        }
        if (t->nrows == rcap) {
            rcap = rcap ? 2 * rcap : 256;
            char **c = md_realloc(t->cells, (size_t)rcap * t->ncols * sizeof *c);
            if (c) t->cells = c;
            long long *l = c ? md_realloc(t->line, (size_t)rcap * sizeof *l) : NULL;
            if (l) t->line = l;
            if (!c || !l) {
                for (int k = 0; k < m; k++) { md_free(f[k]); f[k] = NULL; }
                st = MD_ERR_OOM;
                goto done;
            }
        }
        memcpy(t->cells + (size_t)t->nrows * t->ncols, f, (size_t)m * sizeof *f);
        memset(f, 0, (size_t)m * sizeof *f);
        t->line[t->nrows++] = at;
        lineno++;
    }
    if (t->nrows == 0) st = md_errf(MD_ERR_DATA, "%s: no rows after the header", path);
done:
    for (int k = 0; k < MAX_COLS; k++) md_free(f[k]);
    md_free(f);
    md_free(buf);
    if (st != MD_OK) table_free(t);
    return st;
}

static int col_index(const struct table *t, const char *name)
{
    for (int c = 0; c < t->ncols; c++)
        if (strcmp(t->head[c], name) == 0) return c;
    return -1;
}

static md_status no_column(const char *path, const struct table *t, const char *name, const char *flag)
{
    char all[512] = "";
    for (int c = 0; c < t->ncols; c++) {
        size_t l = strlen(all);
        snprintf(all + l, sizeof all - l, "%s%s", c ? ", " : "", t->head[c]);
    }
    return md_errf(MD_ERR_DATA, "%s: no column '%s'%s%s (columns: %s)", path, name, flag ? " for " : "",
                   flag ? flag : "", all);
}

static int parse_num(const char *s, double *v)
{
    if (!s[0]) return 0;
    char *e = NULL;
    errno = 0;
    *v = strtod(s, &e);
    return e && *e == '\0' && errno != ERANGE && isfinite(*v);
}

/* The image column: --image-col, else the first of image, path, filename. */
static md_status image_column(const char *path, const struct table *t, const char *want, int *col)
{
    if (want[0]) {
        if ((*col = col_index(t, want)) < 0) return no_column(path, t, want, "--image-col");
        return MD_OK;
    }
    static const char *const names[] = {"image", "path", "filename", NULL};
    for (int k = 0; names[k]; k++)
        if ((*col = col_index(t, names[k])) >= 0) return MD_OK;
    return no_column(path, t, "image", "the images (or path, filename; --image-col names another)");
}

/* A comma-separated list of columns into cols[] (count *n). */
static md_status column_list(const char *path, const struct table *t, const char *list, const char *flag, int *cols,
                             int *n)
{
    *n = 0;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", list);
    for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        size_t l = strlen(tok);
        while (l > 0 && tok[l - 1] == ' ') tok[--l] = '\0';
        if (!tok[0]) continue;
        if (*n == MAX_LIST) return md_errf(MD_ERR_USAGE, "%s: more than %d columns", flag, MAX_LIST);
        int c = col_index(t, tok);
        if (c < 0) return no_column(path, t, tok, flag);
        cols[(*n)++] = c;
    }
    return MD_OK;
}

static int in_list(const int *cols, int n, int c)
{
    for (int k = 0; k < n; k++)
        if (cols[k] == c) return 1;
    return 0;
}

/* The CSV that `dir` names: itself (a .csv file) or dir/labels.csv. */
static md_status find_csv(const char *dir, char *path, size_t n)
{
    size_t l = strlen(dir);
    if (md_files_is_file(dir)) {
        if (l < 4 || strcasecmp(dir + l - 4, ".csv") != 0) return md_errf(MD_ERR_DATA, "%s: not a .csv file", dir);
        snprintf(path, n, "%s", dir);
        return MD_OK;
    }
    md_files_join(path, n, dir, "labels.csv");
    if (!md_files_is_file(path)) return md_errf(MD_ERR_DATA, "%s: no labels.csv", dir);
    return MD_OK;
}

/* The CSV's folder, where image paths start. */
static void csv_folder(const char *csv, char *out, size_t n)
{
    snprintf(out, n, "%s", csv);
    char *s = strrchr(out, '/');
    if (s) *s = '\0';
    else snprintf(out, n, ".");
}

static md_status icsv_detect(const char *dir, const char *want, char *found, size_t n)
{
    (void)want;
    char path[MD_PATH_MAX];
    MD_TRY(find_csv(dir, path, sizeof path));
    /* the header only */
    FILE *f = fopen(path, "r");
    if (!f) return md_errf(MD_ERR_DATA, "%s: cannot open", path);
    char line[4096] = "";
    if (!fgets(line, sizeof line, f)) line[0] = '\0';
    fclose(f);
    int ok = 0;
    for (char *save = NULL, *tok = strtok_r(line, ",\r\n", &save); tok && !ok; tok = strtok_r(NULL, ",\r\n", &save)) {
        while (*tok == ' ' || *tok == '"') tok++;
        size_t l = strlen(tok);
        while (l > 0 && (tok[l - 1] == ' ' || tok[l - 1] == '"')) tok[--l] = '\0';
        ok = !strcmp(tok, "image") || !strcmp(tok, "path") || !strcmp(tok, "filename");
    }
    if (!ok) return md_errf(MD_ERR_DATA, "%s: no image, path or filename column in the header", path);
    snprintf(found, n, "images-csv");
    return MD_OK;
}

static md_status icsv_default_dirs(const char *dataset, char (*dirs)[MD_PATH_MAX], int max, int *n)
{
    (void)dataset;
    *n = 0;
    if (max > 0) snprintf(dirs[(*n)++], MD_PATH_MAX, "data/green-cover-sample");
    if (max > 1 && md_exe_dir()[0]) snprintf(dirs[(*n)++], MD_PATH_MAX, "%s/../data/green-cover-sample", md_exe_dir());
    return MD_OK;
}

/* ------------------------------------------------------------------------ */
/* columns: which are image, targets, class, side                            */

struct layout {
    int img, cls;
    int ntarget, target[MAX_LIST];
    int nside, side[MAX_LIST];
};

static md_status choose_columns(const char *path, const struct table *t, const struct md_images_request *r,
                                struct layout *L)
{
    memset(L, 0, sizeof *L);
    L->cls = -1;
    MD_TRY(image_column(path, t, r->image_col, &L->img));
    MD_TRY(column_list(path, t, r->side_cols, "--side-cols", L->side, &L->nside));
    if (r->class_col[0]) {
        if (r->target_cols[0]) return md_errf(MD_ERR_USAGE, "--class-col and --target-cols: give one (classes or values)");
        if ((L->cls = col_index(t, r->class_col)) < 0) return no_column(path, t, r->class_col, "--class-col");
        return MD_OK;
    }
    if (r->target_cols[0]) {
        MD_TRY(column_list(path, t, r->target_cols, "--target-cols", L->target, &L->ntarget));
    } else { /* every numeric column that is not the image's or a side column */
        for (int c = 0; c < t->ncols && L->ntarget < MAX_LIST; c++) {
            if (c == L->img || in_list(L->side, L->nside, c)) continue;
            int num = 1;
            double v;
            for (long long i = 0; i < t->nrows && num; i++) num = parse_num(t->cells[(size_t)i * t->ncols + c], &v);
            if (num) L->target[L->ntarget++] = c;
        }
        if (L->ntarget == 0)
            return md_errf(MD_ERR_DATA, "%s: no numeric column to use as a target (name them with --target-cols, or "
                           "the classes with --class-col)", path);
    }
    for (int k = 0; k < L->ntarget; k++)
        if (L->target[k] == L->img || in_list(L->side, L->nside, L->target[k]))
            return md_errf(MD_ERR_USAGE, "--target-cols: column '%s' is also the image or a side column",
                           t->head[L->target[k]]);
    return MD_OK;
}

/* Numbers of column `col` of row i, or an error naming file, row and column. */
static md_status cell_num(const char *path, const struct table *t, long long i, int col, float *out)
{
    double v;
    const char *s = t->cells[(size_t)i * t->ncols + col];
    if (!parse_num(s, &v))
        return md_errf(MD_ERR_DATA, "%s: row %lld, column '%s': '%s' is not a number", path, t->line[i], t->head[col],
                       s);
    *out = (float)v;
    return MD_OK;
}

/* ------------------------------------------------------------------------ */
/* peek / open                                                                */

static md_status icsv_peek(const struct md_format_args *a, struct md_data_peek *out)
{
    char path[MD_PATH_MAX];
    MD_TRY(find_csv(a->dir, path, sizeof path));
    struct table t;
    MD_TRY(table_read(path, &t));
    struct layout L;
    md_status st = choose_columns(path, &t, a->images, &L);
    if (st == MD_OK && L.cls >= 0) {
        /* distinct values, counted through a sorted copy */
        char **v = md_malloc((size_t)t.nrows * sizeof *v);
        if (!v) st = MD_ERR_OOM;
        for (long long i = 0; v && i < t.nrows; i++) v[i] = t.cells[(size_t)i * t.ncols + L.cls];
        if (v) qsort(v, (size_t)t.nrows, sizeof *v, md_files_cmp_name);
        int k = 0;
        for (long long i = 0; v && i < t.nrows; i++) k += i == 0 || strcmp(v[i], v[i - 1]) != 0;
        md_free(v);
        out->num_classes = k;
        out->task = MD_TASK_CLASSIFY;
    } else if (st == MD_OK) {
        out->task = MD_TASK_REGRESS;
        out->series.pred_len = 1;
        out->series.n_out = L.ntarget;
    }
    out->n_side = L.nside;
    out->c = 3;
    out->h = out->w = a->image_size;
    table_free(&t);
    return st;
}

static void icsv_scratch_free(void *scratch)
{
    struct icsv_scratch *s = scratch;
    if (!s) return;
    md_jpeg_free(s->jpeg);
    md_free(s->file);
    md_free(s->full);
    md_free(s->part);
    md_free(s);
}

static md_status icsv_scratch_new(const void *state, void **out)
{
    (void)state;
    *out = NULL;
    struct icsv_scratch *s = md_calloc(1, sizeof *s);
    if (!s) return MD_ERR_OOM;
    md_status st = md_jpeg_new(&s->jpeg);
    if (st != MD_OK) {
        icsv_scratch_free(s);
        return st;
    }
    *out = s;
    return MD_OK;
}

static void icsv_free(void *state)
{
    struct icsv_state *s = state;
    if (!s) return;
    md_files_free_names(s->paths, s->count);
    md_free(s);
}

static char **names_of(const struct table *t, const int *cols, int n)
{
    char **v = md_calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    for (int k = 0; v && k < n; k++)
        if (!(v[k] = md_strdup(t->head[cols[k]]))) {
            md_files_free_names(v, k);
            return NULL;
        }
    return v;
}

static md_status icsv_open(const struct md_format_args *a, struct md_format_desc *d, void **state)
{
    *state = NULL;
    const struct md_data_request *req = a->req;
    const struct md_images_request *r = a->images;
    struct icsv_state *is = md_calloc(1, sizeof *is);
    struct icsv_scratch *s = NULL;
    struct table t = {0};
    struct layout L;
    char **classes = NULL;
    long long ncls = 0;
    md_status st = is ? MD_OK : MD_ERR_OOM;
    if (st != MD_OK) return st;
    if ((st = find_csv(a->dir, is->csv, sizeof is->csv)) != MD_OK) goto fail;
    if ((st = table_read(is->csv, &t)) != MD_OK) goto fail;
    if ((st = choose_columns(is->csv, &t, r, &L)) != MD_OK) goto fail;
    snprintf(is->image_col, sizeof is->image_col, "%s", t.head[L.img]);

    /* Stored size: the model's image inputs' H x W (--image-size: square),
     * 224 when it says none; gray when no image input needs colour; twice
     * the width with halves (asked, or inputs named left and right). */
    int H = 0, W = 0, need_rgb = 0, left = 0, right = 0;
    for (int i = 0; i < (req->num_inputs > 0 ? req->num_inputs : 1); i++) {
        const struct md_data_input *in = req->num_inputs > 0 ? &req->inputs[i] : NULL;
        if (in && in->kind == MD_INPUT_SIDE) continue;
        if (!in || (in->kind != MD_INPUT_LUMA && in->c != 1)) need_rgb = 1;
        if (in && in->h > H) H = in->h;
        if (in && in->w > W) W = in->w;
        left += in && in->kind == MD_INPUT_LEFT;
        right += in && in->kind == MD_INPUT_RIGHT;
    }
    if (a->image_size > 0) H = W = a->image_size;
    if (H <= 0) H = 224;
    if (W <= 0) W = 224;
    is->halves = r->halves || (left && right);
    is->c = need_rgb ? 3 : 1;
    is->h = H;
    is->w = is->halves ? 2 * W : W;
    d->c = is->c;
    d->h = is->h;
    d->w = is->w;
    d->halves = is->halves;
    snprintf(d->format, sizeof d->format, "images-csv");
    snprintf(d->source, sizeof d->source, "%s", is->csv);
    d->sample = MD_SAMPLE_IMAGE_U8;
    d->norm_samples = 200;
    d->keep_decoded = 1; /* kept when they fit (the core checks the RAM) */

    long long n = t.nrows;
    is->paths = md_calloc((size_t)n, sizeof *is->paths);
    d->labels = md_calloc((size_t)n, sizeof *d->labels);
    if (!is->paths || !d->labels) { st = MD_ERR_OOM; goto fail; }
    if (L.cls >= 0) {
        d->target = MD_TARGET_CLASS;
        char **v = md_malloc((size_t)n * sizeof *v);
        if (!v) { st = MD_ERR_OOM; goto fail; }
        for (long long i = 0; i < n; i++) v[i] = t.cells[(size_t)i * t.ncols + L.cls];
        qsort(v, (size_t)n, sizeof *v, md_files_cmp_name);
        classes = md_calloc((size_t)n, sizeof *classes);
        for (long long i = 0; classes && i < n; i++)
            if ((i == 0 || strcmp(v[i], v[i - 1]) != 0) && !(classes[ncls++] = md_strdup(v[i]))) { st = MD_ERR_OOM; break; }
        md_free(v);
        if (!classes) st = MD_ERR_OOM;
        if (st != MD_OK) goto fail;
        for (long long i = 0; i < n; i++)
            if (!t.cells[(size_t)i * t.ncols + L.cls][0]) {
                st = md_errf(MD_ERR_DATA, "%s: row %lld, column '%s': empty class", is->csv, t.line[i], t.head[L.cls]);
                goto fail;
            }
    } else {
        d->target = MD_TARGET_VALUES;
        d->series.pred_len = 1;
        d->series.n_out = L.ntarget;
        d->values = md_calloc((size_t)n * L.ntarget, sizeof(float));
        d->target_names = names_of(&t, L.target, L.ntarget);
        if (!d->values || !d->target_names) { st = MD_ERR_OOM; goto fail; }
        d->no_augment = 1;
        d->no_standardize = r->no_standardize;
    }
    d->n_side = L.nside;
    if (L.nside > 0) {
        d->side = md_calloc((size_t)n * L.nside, sizeof(float));
        d->side_names = names_of(&t, L.side, L.nside);
        if (!d->side || !d->side_names) { st = MD_ERR_OOM; goto fail; }
    }
    if ((st = icsv_scratch_new(is, (void **)&s)) != MD_OK) goto fail;
    char folder[MD_PATH_MAX];
    csv_folder(is->csv, folder, sizeof folder);
    /* rows: numbers first (a CSV error fails whatever --on-bad-sample
     * says), then each image checked */
    for (long long i = 0; i < n; i++) {
        for (int k = 0; k < L.ntarget; k++)
            if ((st = cell_num(is->csv, &t, i, L.target[k], &d->values[(size_t)i * L.ntarget + k])) != MD_OK) goto fail;
        for (int k = 0; k < L.nside; k++)
            if ((st = cell_num(is->csv, &t, i, L.side[k], &d->side[(size_t)i * L.nside + k])) != MD_OK) goto fail;
        if (!t.cells[(size_t)i * t.ncols + L.img][0]) {
            st = md_errf(MD_ERR_DATA, "%s: row %lld, column '%s': empty image path", is->csv, t.line[i], t.head[L.img]);
            goto fail;
        }
    }
    long long kept = 0;
    for (long long i = 0; i < n; i++) {
        const char *rel = t.cells[(size_t)i * t.ncols + L.img];
        char p[MD_PATH_MAX * 2];
        if (rel[0] == '/') snprintf(p, sizeof p, "%s", rel);
        else md_files_join(p, sizeof p, folder, rel);
        md_interrupt_hook("data");
        if ((st = md_interrupt_check("while opening the dataset (checking image %lld of %lld)", i, n)) != MD_OK)
            goto fail;
        md_status cs;
        size_t len = 0;
        if (!md_files_is_file(p))
            cs = md_errf(MD_ERR_DATA, "%s: row %lld, column '%s': %s: no such file", is->csv, t.line[i], t.head[L.img], p);
        else if ((cs = md_files_read(p, &s->file, &s->cap, &len)) == MD_OK)
            cs = md_jpeg_verify(s->jpeg, s->file, len, p);
        if (cs == MD_ERR_OOM) { st = cs; goto fail; }
        if (cs != MD_OK) {
            if (!a->skip_bad) { st = cs; goto fail; }
            a->bad(a->bad_ctx, p, md_errmsg());
            md_err_clear();
            continue;
        }
        if (!(is->paths[kept] = md_strdup(p))) { st = MD_ERR_OOM; goto fail; }
        /* kept rows move down over the skipped ones */
        if (L.cls >= 0) {
            char *key = t.cells[(size_t)i * t.ncols + L.cls];
            char **hit = bsearch(&key, classes, (size_t)ncls, sizeof *classes, md_files_cmp_name);
            d->labels[kept] = (int32_t)(hit - classes);
        }
        if (L.ntarget) memmove(d->values + (size_t)kept * L.ntarget, d->values + (size_t)i * L.ntarget,
                               (size_t)L.ntarget * sizeof(float));
        if (L.nside) memmove(d->side + (size_t)kept * L.nside, d->side + (size_t)i * L.nside,
                             (size_t)L.nside * sizeof(float));
        kept++;
        is->count = kept;
    }
    d->count = kept;
    d->ranges.start[MD_SPLIT_TRAIN] = 0;
    d->ranges.end[MD_SPLIT_TRAIN] = kept;
    snprintf(d->split_origin[MD_SPLIT_TRAIN], sizeof d->split_origin[0], "rows of %s", is->csv);
    if (L.cls >= 0) {
        d->num_classes = (int)ncls;
        d->class_names = classes;
        classes = NULL;
    }
    icsv_scratch_free(s);
    table_free(&t);
    *state = is;
    return MD_OK;
fail:
    md_files_free_names(classes, ncls);
    icsv_scratch_free(s);
    table_free(&t);
    icsv_free(is);
    return st;
}

/* Resizes columns [x0, x0 + pw) of full (c, h, w) to (c, H, W) at column
 * offset `at` of dst (c, H, dw). */
static md_status part_resize(struct icsv_scratch *s, const uint8_t *full, int c, int h, int w, int x0, int pw,
                             uint8_t *dst, int H, int W, int dw, int at)
{
    size_t need = (size_t)c * h * pw + (size_t)c * H * W;
    if (need > s->pcap) {
        uint8_t *p = md_realloc(s->part, need);
        if (!p) return MD_ERR_OOM;
        s->part = p;
        s->pcap = need;
    }
    uint8_t *src = s->part, *out = s->part + (size_t)c * h * pw;
    for (int k = 0; k < c; k++)
        for (int y = 0; y < h; y++) memcpy(src + ((size_t)k * h + y) * pw, full + ((size_t)k * h + y) * w + x0, (size_t)pw);
    md_image_resize_u8(src, c, h, pw, out, H, W);
    for (int k = 0; k < c; k++)
        for (int y = 0; y < H; y++) memcpy(dst + ((size_t)k * H + y) * dw + at, out + ((size_t)k * H + y) * W, (size_t)W);
    return MD_OK;
}

static md_status icsv_read(const void *state, void *scratch, long long i, uint8_t *buf, const uint8_t **px)
{
    const struct icsv_state *is = state;
    struct icsv_scratch *s = scratch;
    const char *p = is->paths[i];
    size_t len = 0;
    int w = 0, h = 0;
    *px = buf;
    MD_TRY(md_files_read(p, &s->file, &s->cap, &len));
    MD_TRY(md_jpeg_header(s->jpeg, s->file, len, p, &w, &h));
    if (is->halves && w < 2) return md_errf(MD_ERR_DATA, "%s: %d pixels wide: too narrow for halves", p, w);
    size_t need = (size_t)is->c * h * w;
    if (need > s->fcap) {
        uint8_t *f = md_realloc(s->full, need);
        if (!f) return MD_ERR_OOM;
        s->full = f;
        s->fcap = need;
    }
    /* full size (no DCT scaling), then plain bilinear */
    MD_TRY(md_jpeg_decode(s->jpeg, s->file, len, p, is->c, h, w, s->full));
    if (!is->halves) return part_resize(s, s->full, is->c, h, w, 0, w, buf, is->h, is->w, is->w, 0);
    int half = is->w / 2;
    MD_TRY(part_resize(s, s->full, is->c, h, w, 0, w / 2, buf, is->h, half, is->w, 0));
    return part_resize(s, s->full, is->c, h, w, w / 2, w - w / 2, buf, is->h, half, is->w, half);
}

static const char *icsv_sample_name(const void *state, long long i)
{
    return ((const struct icsv_state *)state)->paths[i];
}

static void icsv_describe(const void *state, cJSON *data)
{
    const struct icsv_state *is = state;
    cJSON *o = cJSON_AddObjectToObject(data, "images_csv");
    if (!o) return;
    cJSON_AddStringToObject(o, "file", is->csv);
    cJSON_AddStringToObject(o, "image_column", is->image_col);
    cJSON_AddNumberToObject(o, "rows", (double)is->count);
    cJSON_AddBoolToObject(o, "halves", is->halves);
    cJSON_AddStringToObject(o, "decoder", "jpeg (TurboJPEG), full size, then bilinear");
}

const struct md_data_format md_format_images_csv = {
    .name = "images-csv",
    .datasets = (const char *const[]){"images-csv", NULL},
    .expects = "a labels CSV with an image column (or a folder holding labels.csv)",
    .detect = icsv_detect,
    .default_dirs = icsv_default_dirs,
    .peek = icsv_peek,
    .open = icsv_open,
    .scratch_new = icsv_scratch_new,
    .scratch_free = icsv_scratch_free,
    .read = icsv_read,
    .sample_name = icsv_sample_name,
    .describe = icsv_describe,
    .free = icsv_free,
};
