/* test_html_regress.c - the HTML report of a regression (forecasting) run:
 * a canned report built here following the report's regression keys
 * (training.task, curves without accuracies, test with the naive baseline,
 * forecasts, early_stopping); no accuracy anywhere, the baseline table with
 * its verdict, one forecast chart per window. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/mem.h"
#include "diag/html.h"
#include "helpers.h"
#include "helpers_html.h"

enum { SEQ = 24, PRED = 12, EPOCHS = 6 };

static void add_forecast(cJSON *arr, int window, const char *variate, double level)
{
    double lb[SEQ], act[PRED], pred[PRED];
    for (int i = 0; i < SEQ; i++) lb[i] = level + sin(0.5 * i);
    for (int i = 0; i < PRED; i++) {
        act[i] = level + sin(0.5 * (SEQ + i));
        pred[i] = level + 0.8 * sin(0.5 * (SEQ + i)) + 0.05;
    }
    th_add_forecast(arr, window, variate, lb, SEQ, act, pred, PRED);
}

/* A train report of a forecasting run whose test MSE is `mse` against the
 * naive baseline's 0.0811. */
static cJSON *regression_report(double mse)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "schema_version", 1);
    cJSON *data = cJSON_AddObjectToObject(r, "data");
    cJSON_AddStringToObject(data, "dataset", "exchange_rate");
    cJSON_AddStringToObject(data, "task", "regression");
    cJSON *ts = cJSON_AddObjectToObject(data, "time_series");
    cJSON_AddNumberToObject(ts, "seq_len", SEQ);
    cJSON_AddNumberToObject(ts, "pred_len", PRED);
    cJSON_AddStringToObject(ts, "features", "M");

    cJSON *tr = cJSON_AddObjectToObject(r, "training");
    cJSON_AddStringToObject(tr, "task", "regression");
    cJSON_AddStringToObject(tr, "loss_function", "mse");
    cJSON_AddNumberToObject(tr, "epochs", 10);
    cJSON_AddNumberToObject(tr, "epochs_run", EPOCHS);
    cJSON *c = cJSON_AddObjectToObject(tr, "curves");
    double ep[EPOCHS], tl[EPOCHS], vl[EPOCHS], vmse[EPOCHS], vmae[EPOCHS], lr[EPOCHS], sps[EPOCHS], et[EPOCHS];
    for (int i = 0; i < EPOCHS; i++) {
        ep[i] = i + 1;
        tl[i] = 0.5 / (i + 1);
        vl[i] = 0.3 + 0.02 * (i - 3) * (i - 3);
        vmse[i] = vl[i];
        vmae[i] = 0.4 + 0.015 * (i - 3) * (i - 3);
        lr[i] = 1e-4;
        sps[i] = 900 + i;
        et[i] = 2.5;
    }
    th_json_add_columns(c, th_regression_curves, (const double *const[]){ep, tl, vl, vmse, vmae, lr, sps, et},
                        EPOCHS);
    th_regression_results(tr, 0.3, "ckpt/best.safetensors", 2, EPOCHS,
                          (const double[]){mse, mse, 0.1987, sqrt(mse), 0.5123, 0.000321, 0.0123, 1422, 4}, 0.0811,
                          0.1995);
    cJSON *fc = cJSON_AddArrayToObject(tr, "forecasts");
    add_forecast(fc, 0, "OT", 1.2);
    add_forecast(fc, 377, "rate <6> & co", -3.0);
    return r;
}

/* The coordinate pairs ("x,y ") of the first <polyline class="cls"> at or after p. */
static int polyline_points(const char *p, const char *cls)
{
    char pat[64];
    snprintf(pat, sizeof pat, "<polyline class=\"%s\"", cls);
    const char *l = strstr(p, pat);
    cr_assert_not_null(l, "no %s polyline", cls);
    const char *pts = strstr(l, "points=\"");
    cr_assert_not_null(pts);
    pts += 8;
    int n = 0;
    for (; *pts && *pts != '"'; pts++) n += *pts == ',';
    return n;
}

Test(html_regress, forecasting_report)
{
    cJSON *r = regression_report(0.0790);
    char *html = th_html_render(r);
    th_html_keep("regress.html", html);
    cr_assert_eq(th_count(html, "<svg"), th_count(html, "</svg>"));
    cr_assert_eq(th_count(html, "<table"), th_count(html, "</table>"));
    cr_assert_eq(th_count(html, "<figure"), th_count(html, "</figure>"));
    /* no accuracy where there is none */
    cr_assert_null(strstr(html, "Accuracy per epoch"));
    cr_assert_null(strstr(html, "train_acc"));
    cr_assert_null(strstr(html, "val_acc"));
    /* loss and the validation errors per epoch */
    cr_assert_not_null(strstr(html, "Loss per epoch"));
    cr_assert_not_null(strstr(html, "Validation error per epoch"));
    cr_assert_not_null(strstr(html, ">val MSE</text>"));
    cr_assert_not_null(strstr(html, ">val MAE</text>"));
    /* the best epoch is marked on the loss chart, early stopping said in words */
    cr_assert_not_null(strstr(html, ">best epoch 4</text>"));
    cr_assert_not_null(strstr(html, "stopped after epoch 6"));
    cr_assert_not_null(strstr(html, "patience 2"));
    /* the test figures beside the naive baseline, with a verdict */
    const char *t = strstr(html, "<table class=\"rec test\">");
    cr_assert_not_null(t, "no test table");
    cr_assert_not_null(strstr(t, "repeat the last value"));
    cr_assert_not_null(strstr(t, "0.079"));
    cr_assert_not_null(strstr(t, "0.0811"));
    cr_assert_not_null(strstr(t, "0.1995"));
    cr_assert_not_null(strstr(html, "<p class=\"status good verdict\">"));
    cr_assert_not_null(strstr(html, "beats the naive baseline"));
    cr_assert_null(strstr(html, "does not beat"));
    /* one forecast chart per entry: lookback, actual and predicted lines */
    cr_assert_eq(th_count(html, "<figure class=\"forecast\">"), 2);
    cr_assert_eq(th_count(html, "<polyline class=\"lookback\""), 2);
    cr_assert_eq(th_count(html, "<polyline class=\"actual\""), 2);
    cr_assert_eq(th_count(html, "<polyline class=\"predicted\""), 2);
    const char *f = strstr(html, "<figure class=\"forecast\">");
    cr_assert_eq(polyline_points(f, "lookback"), SEQ);
    cr_assert_eq(polyline_points(f, "actual"), PRED + 1, "the actual line starts at the last lookback value");
    cr_assert_eq(polyline_points(f, "predicted"), PRED);
    cr_assert_not_null(strstr(html, "OT, test window 0"));
    cr_assert_not_null(strstr(html, "rate &lt;6&gt; &amp; co, test window 377"));
    cr_assert_null(strstr(html, "<6>"));
    /* the raw arrays are drawn, not dumped */
    cr_assert_null(strstr(html, "<th>lookback</th>"));
    cr_assert_null(strstr(html, "nan"));
    cr_assert_null(strstr(html, "inf\""));
    md_free(html);
    cJSON_Delete(r);
}

Test(html_regress, verdict_when_the_baseline_wins)
{
    cJSON *r = regression_report(0.0900);
    char *html = th_html_render(r);
    cr_assert_not_null(strstr(html, "<p class=\"status badbox verdict\">"));
    cr_assert_not_null(strstr(html, "does not beat the naive baseline"));
    cr_assert_null(strstr(html, "status good verdict"));
    md_free(html);
    /* without a baseline there is no verdict, the figures stay */
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "training"), "test"), "baseline");
    html = th_html_render(r);
    cr_assert_null(strstr(html, "verdict"));
    cr_assert_not_null(strstr(html, "<table class=\"rec test\">"));
    md_free(html);
    cJSON_Delete(r);
}

Test(html_regress, forecast_with_missing_values)
{
    cJSON *r = regression_report(0.0790);
    cJSON *fc = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "training"), "forecasts");
    cJSON *pred = cJSON_GetObjectItem(cJSON_GetArrayItem(fc, 0), "predicted");
    cJSON_ReplaceItemInArray(pred, 3, cJSON_CreateNull());
    char *html = th_html_render(r);
    cr_assert_eq(polyline_points(strstr(html, "<figure class=\"forecast\">"), "predicted"), PRED - 1);
    cr_assert_null(strstr(html, "nan"));
    md_free(html);
    cJSON_Delete(r);
}

/* A classification run in the trainer's layout (columns, best, test):
 * accuracies drawn, nothing of the regression parts. */
Test(html_regress, classification_keeps_its_charts)
{
    cJSON *r = NULL;
    cr_assert_eq(md_json_parse("{\"schema_version\": 1, \"training\": {\"task\": \"classification\", \"epochs\": 3,"
                               " \"curves\": {\"epoch\": [1, 2, 3], \"train_loss\": [2.2, 1.5, 1.0],"
                               " \"val_loss\": [2.1, 1.5, 1.2], \"train_acc\": [0.2, 0.4, 0.6], \"val_acc\": [0.3, 0.5, 0.5],"
                               " \"lr\": [0.1, 0.1, 0.1]}, \"best\": {\"epoch\": 2, \"acc\": 0.5, \"metric\": \"val_acc\","
                               " \"path\": \"b.safetensors\"}, \"test\": {\"loss\": 1.1, \"acc\": 0.55, \"samples\": 100,"
                               " \"after_epoch\": 3}}}",
                               "classif", &r),
                 MD_OK, "%s", md_errmsg());
    char *html = th_html_render(r);
    th_html_keep("classif.html", html);
    cr_assert_not_null(strstr(html, "Accuracy per epoch"));
    cr_assert_null(strstr(html, "Validation error per epoch"));
    cr_assert_null(strstr(html, "forecast"));
    cr_assert_null(strstr(html, "verdict"));
    cr_assert_null(strstr(html, "best epoch"));
    md_free(html);
    cJSON_Delete(r);
}
