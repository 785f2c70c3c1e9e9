/* helpers_html.h - what the HTML report tests share: rendering a report,
 * keeping the page for scripts/check_html.sh, and JSON number arrays. */
#ifndef TH_HELPERS_HTML_H
#define TH_HELPERS_HTML_H

#include <cjson/cJSON.h>

/* The page for report `r` (md_html_render; fails the test on an error);
 * the caller frees it with md_free. */
char *th_html_render(const cJSON *r);
/* MPSDIAG_HTML_KEEP=DIR keeps the rendered page as DIR/name. */
void th_html_keep(const char *name, const char *html);
/* A JSON array of v[0..n): numbers, null for the non-finite ones. */
cJSON *th_json_numbers(const double *v, int n);
/* Adds v[i] to o as number keys[i], for each key of the NULL-terminated list. */
void th_json_add_numbers(cJSON *o, const char *const *keys, const double *v);
/* Adds cols[i] (n numbers, th_json_numbers) to o as array keys[i], for each
 * key of the NULL-terminated list. */
void th_json_add_columns(cJSON *o, const char *const *keys, const double *const *cols, int n);
/* The keys of a forecasting run's training.curves (epoch, train_loss,
 * val_loss, val_mse, val_mae, lr, samples_per_s, epoch_time_s) and of its
 * training.test (loss, mse, mae, rmse, directional_accuracy,
 * mse_original_units, mae_original_units, samples, after_epoch), in the
 * report's order. */
extern const char *const th_regression_curves[];
extern const char *const th_regression_test[];

/* What a forecasting run's training object ends with: best (epoch 4, its
 * val_loss best_value, best_path), early_stopping (patience, stopped after
 * `epochs`), test (the th_regression_test numbers) with the naive baseline's
 * MSE and MAE. */
void th_regression_results(cJSON *tr, double best_value, const char *best_path, int patience, int epochs,
                           const double *test, double baseline_mse, double baseline_mae);
/* Appends a forecast window (window, variate, lookback (nl), actual and
 * predicted (np)) to the array arr. */
void th_add_forecast(cJSON *arr, int window, const char *variate, const double *lookback, int nl,
                     const double *actual, const double *predicted, int np);

#endif
