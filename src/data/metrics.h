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

/* ---- R2, MAE and RMSE per target ---------------------------------------------
 *
 * Rows of k targets (a forecast window gives pred_len rows of n_out; an
 * image regression sample one row of its targets). In original units: a
 * value v becomes v * std[j] + mean[j] when std is given (mean NULL: 0),
 * else it is taken as it is. Per target j over its n values y, predictions p:
 *
 *   MAE_j  = mean |p - y|
 *   RMSE_j = sqrt(mean (p - y)^2)
 *   R2_j   = 1 - SS_res / SS_tot,  SS_res = sum (y - p)^2, SS_tot = sum (y - mean(y))^2
 *            (SS_tot = 0: 1 when SS_res = 0, else 0, as sklearn's r2_score with
 *            force_finite; n < 2: NaN, as sklearn's)
 *
 * Overall: the uniform average over targets of each (sklearn's
 * multioutput='uniform_average' for r2_score, mean_absolute_error and
 * root_mean_squared_error), so overall RMSE is the mean of the per-target
 * RMSEs, not the RMSE of the pooled errors. R2 does not depend on the units
 * (a per-target scale cancels). Sums in double; SS_tot by Welford's update,
 * so any number of batches gives the one-pass result. */

struct md_regress_acc {
    int k;              /* targets */
    long long n;        /* rows added */
    double *s;          /* (5, k): mean of y, M2 of y, sum |e|, sum e^2; owned */
};

struct md_regress_target {
    double r2, mae, rmse;
};

struct md_regress_metrics {
    int k;                           /* targets */
    long long n;                     /* values per target */
    double r2, mae, rmse;            /* uniform averages over the targets */
    struct md_regress_target *per;   /* (k); owned, md_regress_metrics_free */
};

/* Caller frees with md_regress_acc_free (also after a failed init). */
md_status md_regress_acc_init(struct md_regress_acc *a, int k);
void md_regress_acc_free(struct md_regress_acc *a);
void md_regress_acc_reset(struct md_regress_acc *a);
/* Adds another accumulator's rows: its n and its state s (a->s's layout,
 * md_regress_acc_state_len doubles), as if they had been added here (the
 * means and M2s combine exactly; the sums to rounding). */
void md_regress_acc_merge(struct md_regress_acc *a, long long n, const double *s);
size_t md_regress_acc_state_len(const struct md_regress_acc *a);
/* Adds n rows: pred and target (n, k) row-major; mean, std (k) or NULL. */
void md_regress_acc_add(struct md_regress_acc *a, const float *pred, const float *target, long long n,
                        const double *mean, const double *std);
/* The metrics of the rows so far (all zero, R2 NaN, without rows). */
md_status md_regress_acc_result(const struct md_regress_acc *a, struct md_regress_metrics *out);
void md_regress_metrics_free(struct md_regress_metrics *m); /* NULL ok; zeroes it */

/* The whole computation for one set of rows (init, add, result). */
md_status md_regress_metrics(const float *pred, const float *target, long long n, int k, const double *mean,
                             const double *std, struct md_regress_metrics *out);

/* The report's "regression_metrics" object: {split, units, count, r2, mae,
 * rmse, per_target: [{name, r2, mae, rmse}]} (NaN as null). names(j):
 * target j's name, or NULL for "target_<j>". Caller owns the object. */
struct cJSON;
struct cJSON *md_regress_metrics_json(const struct md_regress_metrics *m, const char *split, const char *units,
                                      const char *(*names)(const void *ctx, int j), const void *ctx);
/* The text table: a title line, then target | R2 | MAE | RMSE (at most 16
 * targets, then a line saying how many more; the JSON has all), then the
 * overall row; under 100 columns. */
void md_regress_metrics_print(const struct md_regress_metrics *m, const char *title,
                              const char *(*names)(const void *ctx, int j), const void *ctx);

#ifdef __cplusplus
}
#endif
#endif
