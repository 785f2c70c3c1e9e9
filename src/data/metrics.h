/* metrics.h - regression metrics of forecasts: MSE, MAE, RMSE and
 * directional accuracy, on standardised values and in the file's units,
 * and the naive "repeat the last value" baseline of a split.
 *
 * Pure functions over host arrays, accumulated in double (any number of
 * batches, in any order of addition within a batch's elements: the sums are
 * taken in element order). A direction is the sign (-1, 0, 1) of a value
 * minus the last observed input value of its variate (the forecast origin);
 * a hit is a predicted direction equal to the true one, 0 included, as the
 * regression kernel counts them (md_regress_args.metrics).
 * docs/regression.md has the formulas.
 */
#ifndef MD_DATA_METRICS_H
#define MD_DATA_METRICS_H

#include "data/data.h"

#ifdef __cplusplus
extern "C" {
#endif

struct md_metrics_acc {
    double sae, sse;           /* standardised: sum |e|, sum e^2 */
    double sae_orig, sse_orig; /* original units: e * std of the variate */
    double hits;               /* direction hits */
    long long count;           /* elements added */
    long long dir_count;       /* of them, with a direction (last values given) */
    long long orig_count;      /* of them, with original units (std given) */
};

struct md_metrics {
    double mse, mae, rmse;          /* standardised */
    double mse_orig, mae_orig, rmse_orig; /* original units (has_orig) */
    double dir_acc;                 /* hits / elements, in [0, 1] (has_dir) */
    long long count;
    int has_orig, has_dir;
};

void md_metrics_acc_init(struct md_metrics_acc *a);

/* Adds n forecasts: pred and target (n, horizon, channels) row-major,
 * standardised. last (may be NULL): last observed value of sample i,
 * channel c at last[i * last_ld + c]. std (may be NULL): per-channel scale
 * of the standardisation (channels values), for original units. */
void md_metrics_acc_add(struct md_metrics_acc *a, const float *pred, const float *target, const float *last,
                        long long last_ld, int n, int horizon, int channels, const double *std);

/* Adds what the regression kernel summed for `count` elements:
 * sums = {sum |e|, sum e^2, hits} (md_regress_args.metrics); has_dir when it
 * had the last values. Original units are not known from these. */
void md_metrics_acc_add_sums(struct md_metrics_acc *a, const float sums[3], long long count, int has_dir);

/* The metrics so far (zeros when nothing was added). */
void md_metrics_result(const struct md_metrics_acc *a, struct md_metrics *out);

/* The naive forecast "every future step repeats the last input value" over
 * the split's windows of a time series (as the loader delivers them, so
 * --max-samples applies): standardised and original units, and directional
 * accuracy (the naive forecast predicts no change: a hit only where nothing
 * changed). MD_ERR_USAGE when d is not a time series. */
md_status md_metrics_naive(struct md_data *d, md_split s, struct md_metrics *out);

#ifdef __cplusplus
}
#endif
#endif
