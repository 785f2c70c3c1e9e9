/* metrics.c - regression metrics and the naive baseline (metrics.h). */
#include "data/metrics.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/log.h"
#include "core/mem.h"
#include "data/format.h"

void md_metrics_acc_init(struct md_metrics_acc *a) { memset(a, 0, sizeof *a); }

static int sign_of(double v) { return (v > 0) - (v < 0); }

void md_metrics_acc_add(struct md_metrics_acc *a, const float *pred, const float *target, const float *last,
                        long long last_ld, int n, int horizon, int channels, const double *std)
{
    for (int i = 0; i < n; i++)
        for (int t = 0; t < horizon; t++)
            for (int c = 0; c < channels; c++) {
                size_t k = ((size_t)i * horizon + t) * channels + c;
                double p = (double)pred[k], y = (double)target[k], e = p - y;
                a->sae += fabs(e);
                a->sse += e * e;
                if (std) {
                    double eo = e * std[c];
                    a->sae_orig += fabs(eo);
                    a->sse_orig += eo * eo;
                }
                if (last) {
                    double x = (double)last[(size_t)i * (size_t)last_ld + c];
                    a->hits += sign_of(p - x) == sign_of(y - x);
                }
            }
    long long m = (long long)n * horizon * channels;
    a->count += m;
    if (std) a->orig_count += m;
    if (last) a->dir_count += m;
}

void md_metrics_acc_add_sums(struct md_metrics_acc *a, const float sums[3], long long count, int has_dir)
{
    a->sae += (double)sums[0];
    a->sse += (double)sums[1];
    a->count += count;
    if (has_dir) {
        a->hits += (double)sums[2];
        a->dir_count += count;
    }
}

void md_metrics_result(const struct md_metrics_acc *a, struct md_metrics *out)
{
    memset(out, 0, sizeof *out);
    out->count = a->count;
    if (a->count > 0) {
        out->mse = a->sse / (double)a->count;
        out->mae = a->sae / (double)a->count;
        out->rmse = sqrt(out->mse);
    }
    /* original units only when every element had them */
    out->has_orig = a->count > 0 && a->orig_count == a->count;
    if (out->has_orig) {
        out->mse_orig = a->sse_orig / (double)a->count;
        out->mae_orig = a->sae_orig / (double)a->count;
        out->rmse_orig = sqrt(out->mse_orig);
    }
    out->has_dir = a->count > 0 && a->dir_count == a->count;
    if (out->has_dir) out->dir_acc = a->hits / (double)a->count;
}

md_status md_metrics_naive(struct md_data *d, md_split s, struct md_metrics *out)
{
    memset(out, 0, sizeof *out);
    if (md_data_task(d) != MD_TASK_REGRESS || md_data_series(d)->seq_len == 0)
        return md_errf(MD_ERR_USAGE, "%s: the naive forecast needs a time series", md_data_name(d));
    const struct md_data_series *sr = md_data_series(d);
    size_t xs = (size_t)sr->seq_len * sr->n_in, ys = (size_t)sr->pred_len * sr->n_out;
    float *x = md_malloc(xs * sizeof(float)), *y = md_malloc(ys * sizeof(float)), *p = md_malloc(ys * sizeof(float));
    md_status st = x && y && p ? MD_OK : MD_ERR_OOM;
    struct md_metrics_acc acc;
    md_metrics_acc_init(&acc);
    const float *last = x + (size_t)(sr->seq_len - 1) * sr->n_in + sr->out_col;
    for (long long i = 0; st == MD_OK && i < md_data_count(d, s); i++) {
        if ((st = d->fmt->read_series(d->fstate, md_data_split_index(d, s, i), x, NULL, y)) != MD_OK) break;
        for (int t = 0; t < sr->pred_len; t++)
            for (int c = 0; c < sr->n_out; c++) p[(size_t)t * sr->n_out + c] = last[c];
        md_metrics_acc_add(&acc, p, y, last, 0, 1, sr->pred_len, sr->n_out, md_data_target_std(d));
    }
    if (st == MD_OK) md_metrics_result(&acc, out);
    md_free(x);
    md_free(y);
    md_free(p);
    return st;
}

/* ---- R2, MAE and RMSE per target ---------------------------------------------- */

enum { RS_MEAN, RS_M2, RS_SAE, RS_SSE, RS_COUNT };

md_status md_regress_acc_init(struct md_regress_acc *a, int k)
{
    memset(a, 0, sizeof *a);
    if (k < 1) return md_errf(MD_ERR_USAGE, "regression metrics: %d targets", k);
    a->s = md_calloc((size_t)RS_COUNT * (size_t)k, sizeof(double));
    if (!a->s) return md_errf(MD_ERR_OOM, "regression metrics: out of host memory for %d targets", k);
    a->k = k;
    return MD_OK;
}

void md_regress_acc_free(struct md_regress_acc *a)
{
    md_free(a->s);
    memset(a, 0, sizeof *a);
}

void md_regress_acc_reset(struct md_regress_acc *a)
{
    if (a->s) memset(a->s, 0, (size_t)RS_COUNT * (size_t)a->k * sizeof(double));
    a->n = 0;
}

void md_regress_acc_add(struct md_regress_acc *a, const float *pred, const float *target, long long n,
                        const double *mean, const double *std)
{
    int k = a->k;
    double *mu = a->s + (size_t)RS_MEAN * k, *m2 = a->s + (size_t)RS_M2 * k;
    double *sae = a->s + (size_t)RS_SAE * k, *sse = a->s + (size_t)RS_SSE * k;
    for (long long i = 0; i < n; i++) {
        double cnt = (double)(a->n + i + 1);
        for (int j = 0; j < k; j++) {
            size_t e = (size_t)i * (size_t)k + (size_t)j;
            double p = (double)pred[e], y = (double)target[e];
            if (std) {
                double m = mean ? mean[j] : 0.0;
                p = p * std[j] + m;
                y = y * std[j] + m;
            }
            double d = y - mu[j];
            mu[j] += d / cnt;
            m2[j] += d * (y - mu[j]);
            sae[j] += fabs(p - y);
            sse[j] += (p - y) * (p - y);
        }
    }
    a->n += n;
}

void md_regress_acc_merge(struct md_regress_acc *a, long long n, const double *s)
{
    if (n <= 0) return;
    int k = a->k;
    double na = (double)a->n, nb = (double)n, nt = na + nb;
    for (int j = 0; j < k; j++) {
        double *mu = &a->s[(size_t)RS_MEAN * k + j], *m2 = &a->s[(size_t)RS_M2 * k + j];
        double d = s[(size_t)RS_MEAN * k + j] - *mu;
        /* Chan et al.: the M2 of the union of two sets from theirs */
        *m2 += s[(size_t)RS_M2 * k + j] + d * d * na * nb / nt;
        *mu += d * nb / nt;
        a->s[(size_t)RS_SAE * k + j] += s[(size_t)RS_SAE * k + j];
        a->s[(size_t)RS_SSE * k + j] += s[(size_t)RS_SSE * k + j];
    }
    a->n += n;
}

size_t md_regress_acc_state_len(const struct md_regress_acc *a) { return (size_t)RS_COUNT * (size_t)a->k; }

md_status md_regress_acc_result(const struct md_regress_acc *a, struct md_regress_metrics *out)
{
    memset(out, 0, sizeof *out);
    int k = a->k;
    out->per = md_calloc((size_t)(k > 0 ? k : 1), sizeof *out->per);
    if (!out->per) return md_errf(MD_ERR_OOM, "regression metrics: out of host memory");
    out->k = k;
    out->n = a->n;
    double r2 = 0, mae = 0, rmse = 0;
    for (int j = 0; j < k; j++) {
        struct md_regress_target *t = &out->per[j];
        double ss_tot = a->s[(size_t)RS_M2 * k + j], ss_res = a->s[(size_t)RS_SSE * k + j];
        if (a->n > 0) {
            t->mae = a->s[(size_t)RS_SAE * k + j] / (double)a->n;
            t->rmse = sqrt(ss_res / (double)a->n);
        }
        if (a->n < 2) t->r2 = (double)NAN;
        else if (ss_tot > 0) t->r2 = 1.0 - ss_res / ss_tot;
        else t->r2 = ss_res == 0 ? 1.0 : 0.0;
        r2 += t->r2;
        mae += t->mae;
        rmse += t->rmse;
    }
    if (k > 0) {
        out->r2 = r2 / k;
        out->mae = mae / k;
        out->rmse = rmse / k;
    }
    return MD_OK;
}

void md_regress_metrics_free(struct md_regress_metrics *m)
{
    if (!m) return;
    md_free(m->per);
    memset(m, 0, sizeof *m);
}

md_status md_regress_metrics(const float *pred, const float *target, long long n, int k, const double *mean,
                             const double *std, struct md_regress_metrics *out)
{
    memset(out, 0, sizeof *out);
    struct md_regress_acc a;
    md_status st = md_regress_acc_init(&a, k);
    if (st == MD_OK) {
        md_regress_acc_add(&a, pred, target, n, mean, std);
        st = md_regress_acc_result(&a, out);
    }
    md_regress_acc_free(&a);
    return st;
}

static cJSON *num_or_null(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

static const char *target_name(const char *(*names)(const void *, int), const void *ctx, int j, char *buf, size_t n)
{
    const char *s = names ? names(ctx, j) : NULL;
    if (s && *s) return s;
    snprintf(buf, n, "target_%d", j);
    return buf;
}

cJSON *md_regress_metrics_json(const struct md_regress_metrics *m, const char *split, const char *units,
                               const char *(*names)(const void *ctx, int j), const void *ctx)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "split", split);
    cJSON_AddStringToObject(o, "units", units);
    cJSON_AddNumberToObject(o, "count", (double)m->n);
    cJSON_AddItemToObject(o, "r2", num_or_null(m->r2));
    cJSON_AddItemToObject(o, "mae", num_or_null(m->mae));
    cJSON_AddItemToObject(o, "rmse", num_or_null(m->rmse));
    cJSON *per = cJSON_AddArrayToObject(o, "per_target");
    char buf[32];
    for (int j = 0; per && j < m->k; j++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "name", target_name(names, ctx, j, buf, sizeof buf));
        cJSON_AddItemToObject(t, "r2", num_or_null(m->per[j].r2));
        cJSON_AddItemToObject(t, "mae", num_or_null(m->per[j].mae));
        cJSON_AddItemToObject(t, "rmse", num_or_null(m->per[j].rmse));
        cJSON_AddItemToArray(per, t);
    }
    return o;
}

#define PRINT_MAX_TARGETS 16

static void print_row(const char *name, double r2, double mae, double rmse)
{
    char r[24];
    if (isfinite(r2)) snprintf(r, sizeof r, "%.4f", r2);
    else snprintf(r, sizeof r, "-");
    md_out("    %-24.24s %10s %14.6g %14.6g\n", name, r, mae, rmse);
}

void md_regress_metrics_print(const struct md_regress_metrics *m, const char *title,
                              const char *(*names)(const void *ctx, int j), const void *ctx)
{
    char buf[32];
    md_out("  %s\n", title);
    md_out("    %-24s %10s %14s %14s\n", "target", "R2", "MAE", "RMSE");
    int shown = m->k < PRINT_MAX_TARGETS ? m->k : PRINT_MAX_TARGETS;
    for (int j = 0; j < shown; j++)
        print_row(target_name(names, ctx, j, buf, sizeof buf), m->per[j].r2, m->per[j].mae, m->per[j].rmse);
    if (m->k > shown) md_out("    ... and %d more targets (all in the JSON report)\n", m->k - shown);
    if (m->k > 1) print_row("overall (target mean)", m->r2, m->mae, m->rmse);
}
