/* metrics.c - regression metrics and the naive baseline (metrics.h). */
#include "data/metrics.h"

#include <math.h>
#include <string.h>

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
