/* helpers_html.c - see helpers_html.h. */
#include "helpers_html.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "diag/html.h"

char *th_html_render(const cJSON *r)
{
    char *html = NULL;
    size_t len = 0;
    cr_assert_eq(md_html_render(r, &html, &len), MD_OK, "%s", md_errmsg());
    cr_assert_eq(strlen(html), len);
    return html;
}

void th_html_keep(const char *name, const char *html)
{
    const char *dir = getenv("MPSDIAG_HTML_KEEP");
    if (!dir || !*dir) return;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(html, f);
        fclose(f);
    }
}

cJSON *th_json_numbers(const double *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, isfinite(v[i]) ? cJSON_CreateNumber(v[i]) : cJSON_CreateNull());
    return a;
}

void th_json_add_numbers(cJSON *o, const char *const *keys, const double *v)
{
    for (int i = 0; keys[i]; i++) cJSON_AddNumberToObject(o, keys[i], v[i]);
}

void th_json_add_columns(cJSON *o, const char *const *keys, const double *const *cols, int n)
{
    for (int i = 0; keys[i]; i++) cJSON_AddItemToObject(o, keys[i], th_json_numbers(cols[i], n));
}

const char *const th_regression_curves[] = {"epoch", "train_loss", "val_loss", "val_mse", "val_mae", "lr",
                                            "samples_per_s", "epoch_time_s", NULL};
const char *const th_regression_test[] = {"loss", "mse", "mae", "rmse", "directional_accuracy",
                                          "mse_original_units", "mae_original_units", "samples", "after_epoch", NULL};

void th_regression_results(cJSON *tr, double best_value, const char *best_path, int patience, int epochs,
                           const double *test, double baseline_mse, double baseline_mae)
{
    cJSON *best = cJSON_AddObjectToObject(tr, "best");
    cJSON_AddNumberToObject(best, "epoch", 4);
    cJSON_AddStringToObject(best, "metric", "val_loss");
    cJSON_AddNumberToObject(best, "value", best_value);
    cJSON_AddStringToObject(best, "path", best_path);
    cJSON *es = cJSON_AddObjectToObject(tr, "early_stopping");
    cJSON_AddNumberToObject(es, "patience", patience);
    cJSON_AddNumberToObject(es, "stopped_after_epoch", epochs);
    cJSON *t = cJSON_AddObjectToObject(tr, "test");
    th_json_add_numbers(t, th_regression_test, test);
    cJSON *bl = cJSON_AddObjectToObject(t, "baseline");
    cJSON_AddStringToObject(bl, "name", "repeat the last value");
    cJSON_AddNumberToObject(bl, "mse", baseline_mse);
    cJSON_AddNumberToObject(bl, "mae", baseline_mae);
}

void th_add_forecast(cJSON *arr, int window, const char *variate, const double *lookback, int nl,
                     const double *actual, const double *predicted, int np)
{
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "window", window);
    cJSON_AddStringToObject(f, "variate", variate);
    cJSON_AddItemToObject(f, "lookback", th_json_numbers(lookback, nl));
    cJSON_AddItemToObject(f, "actual", th_json_numbers(actual, np));
    cJSON_AddItemToObject(f, "predicted", th_json_numbers(predicted, np));
    cJSON_AddItemToArray(arr, f);
}
