/* test_html_forecast.c - the HTML report around a forecasting run, beyond its
 * training section (test/test_html_regress.c): the canned report follows the
 * schema, a non-finite test MSE never beats the baseline, the data's split
 * rows read as ranges, and a diagnostics run with regression models. */
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
#include "json_schema.h"

enum { SEQ = 96, PRED = 48, NFC = 4, EPOCHS = 7 };
static const double pi = 3.14159265358979323846;

/* A smooth daily cycle with a drift: what the lookback, actual and predicted
 * values of a forecast look like (original units). */
static double series(int k, int t) { return 20.0 + 3.0 * k + 4.0 * sin(2 * pi * t / 24.0 + k) + 0.02 * t; }

/* The training object of a forecasting run as the JSON report writes it;
 * `test_mse` is the model's test MSE (the baseline's is 0.45). */
static cJSON *regression_training(double test_mse)
{
    cJSON *tr = cJSON_CreateObject();
    cJSON_AddStringToObject(tr, "task", "regression");
    cJSON_AddStringToObject(tr, "loss_function", "mse");
    cJSON_AddStringToObject(tr, "optimizer", "adamw");
    cJSON_AddNumberToObject(tr, "lr", 1e-4);
    cJSON_AddNumberToObject(tr, "epochs", 10);
    cJSON_AddNumberToObject(tr, "epochs_run", EPOCHS);
    cJSON *c = cJSON_AddObjectToObject(tr, "curves");
    double ep[EPOCHS], tl[EPOCHS], vl[EPOCHS], vmae[EPOCHS], lr[EPOCHS], sps[EPOCHS], et[EPOCHS];
    for (int e = 0; e < EPOCHS; e++) {
        ep[e] = e + 1;
        tl[e] = 0.30 + 0.5 / (e + 1);
        vl[e] = e <= 3 ? 0.31 + 0.3 / (e + 1) - 0.075 * (e == 3) : 0.36 + 0.01 * e; /* best at epoch 4 */
        vmae[e] = sqrt(vl[e]) * 0.8;
        lr[e] = 1e-4 * (1 + cos(pi * e / EPOCHS)) / 2;
        sps[e] = 900 + e;
        et[e] = 3.5;
    }
    /* val_mse: the loss is the MSE here */
    th_json_add_columns(c, th_regression_curves, (const double *const[]){ep, tl, vl, vl, vmae, lr, sps, et},
                        EPOCHS);
    cJSON_AddArrayToObject(tr, "diagnostics");
    th_regression_results(tr, vl[3], "runs/x/best.safetensors", 3, EPOCHS,
                          (const double[]){test_mse, test_mse, 0.39, sqrt(test_mse), 0.5625, 12.5, 2.75, 2785, 4},
                          0.45, 0.44);
    static const char *const var[NFC] = {"HUFL", "OT", "LULL", "OT"};
    cJSON *fcs = cJSON_AddArrayToObject(tr, "forecasts");
    for (int k = 0; k < NFC; k++) {
        double lb[SEQ], ac[PRED], pr[PRED];
        for (int i = 0; i < SEQ; i++) lb[i] = series(k, i);
        for (int i = 0; i < PRED; i++) {
            ac[i] = series(k, SEQ + i) + 0.6 * sin(1.7 * i + k);
            pr[i] = series(k, SEQ + i) * 0.97 + 0.5;
        }
        th_add_forecast(fcs, 700 * k, var[k], lb, SEQ, ac, pr, PRED);
    }
    return tr;
}

static cJSON *regression_data(void)
{
    cJSON *d = NULL;
    cr_assert_eq(md_json_parse("{\"dataset\": \"csv\", \"format\": \"csv\", \"task\": \"regression\","
                               " \"splits\": {\"train\": {\"count\": 8449}, \"val\": {\"count\": 2785},"
                               " \"test\": {\"count\": 2785}}, \"augmentation\": {\"enabled\": false},"
                               " \"time_series\": {\"file\": \"data/ETTh2_sample.csv\", \"rows\": 14400,"
                               " \"seq_len\": 96, \"pred_len\": 48, \"features\": \"M\", \"target\": \"OT\","
                               " \"time_features\": 4, \"variates\": [\"HUFL\", \"HULL\", \"MUFL\", \"MULL\","
                               " \"LUFL\", \"LULL\", \"OT\"], \"split_rows\": [[0, 8640], [8544, 11520], [11424, 14400]]}}",
                               "data", &d),
                 MD_OK, "%s", md_errmsg());
    return d;
}

/* The minimal valid report with a forecasting run's data and training. */
static cJSON *regression_report(double test_mse)
{
    cJSON *r = NULL;
    cr_assert_eq(md_json_load_file("test/data/report_schema_minimal.json", &r), MD_OK, "%s", md_errmsg());
    cJSON_AddItemToObject(r, "data", regression_data());
    cJSON_AddItemToObject(r, "training", regression_training(test_mse));
    return r;
}

/* "<tag" followed by a space, '>' or a newline; "</tag>". */
static void assert_balanced(const char *html, const char *tag)
{
    char o[32], c[32];
    snprintf(o, sizeof o, "<%s", tag);
    snprintf(c, sizeof c, "</%s>", tag);
    int no = 0;
    size_t l = strlen(o);
    for (const char *p = strstr(html, o); p; p = strstr(p + l, o))
        if (p[l] == ' ' || p[l] == '>' || p[l] == '\n') no++;
    cr_assert_eq(no, th_count(html, c), "<%s>: %d opened, %d closed", tag, no, th_count(html, c));
}

Test(html_forecast, the_report_against_the_schema)
{
    cJSON *s = NULL;
    cr_assert_eq(md_json_load_file("docs/schema/report.schema.json", &s), MD_OK, "%s", md_errmsg());
    cJSON *r = regression_report(0.31);
    char err[600];
    cr_assert(th_schema_validate(s, r, err, sizeof err), "the canned forecasting report: %s", err);
    /* a best epoch names the value it was chosen by */
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "training"), "best"), "value");
    cr_assert_not(th_schema_validate(s, r, err, sizeof err), "a best epoch without its value");
    cJSON_Delete(r);
    cJSON_Delete(s);
}

Test(html_forecast, a_non_finite_test_mse_never_beats_the_baseline)
{
    cJSON *r = regression_report(0.31);
    char *html = th_html_render(r);
    cr_assert_not_null(strstr(html, "The model beats the naive baseline"), "the canned model beats it");
    md_free(html);
    /* NaN and infinity are written as null */
    cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "training"), "test");
    cJSON_ReplaceItemInObject(t, "mse", cJSON_CreateNull());
    html = th_html_render(r);
    cr_assert_not_null(strstr(html, "<p class=\"status badbox verdict\"><b>The model does not beat the naive baseline</b>"
                                    " (repeat the last value): its test MSE is not finite (baseline 0.45).</p>"));
    cr_assert_null(strstr(html, "The model beats"));
    cr_assert_not_null(strstr(html, "<tr><th>MSE</th><td class=\"n\"><span class=\"bad\">not finite</span></td>"
                                    "<td class=\"n\">0.45</td></tr>"));
    md_free(html);
    /* without a baseline there is nothing to beat: no verdict */
    cJSON_DeleteItemFromObject(t, "baseline");
    html = th_html_render(r);
    cr_assert_null(strstr(html, "verdict"));
    md_free(html);
    cJSON_Delete(r);
}

Test(html_forecast, split_rows_read_as_ranges)
{
    cJSON *r = regression_report(0.31);
    char *html = th_html_render(r);
    th_html_keep("forecast.html", html);
    cr_assert_not_null(strstr(html, "[0, 8,640], [8,544, 11,520], [11,424, 14,400]"));
    cr_assert_null(strstr(html, "&#8230;, &#8230;"));
    static const char *const tags[] = {"section", "table", "tr", "svg", "text", "p", "div"};
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) assert_balanced(html, tags[i]);
    md_free(html);
    cJSON_Delete(r);
}

/* The diagnostics run: models[] and the comparison with a regression model. */
static cJSON *diagnostics_report(int with_classifier)
{
    cJSON *r = NULL;
    cr_assert_eq(md_json_load_file("test/data/report_schema_minimal.json", &r), MD_OK, "%s", md_errmsg());
    cJSON *models = cJSON_AddArrayToObject(r, "models");
    cJSON *cmp = cJSON_AddObjectToObject(r, "comparison");
    cJSON *rows = cJSON_AddArrayToObject(cmp, "rows");
    for (int i = 0; i < 1 + with_classifier; i++) {
        int reg = i == 0;
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "name", reg ? "itransformer" : "small_cnn");
        if (reg) {
            cJSON_AddItemToObject(m, "data", regression_data());
            cJSON_AddItemToObject(m, "training", regression_training(0.31));
        }
        cJSON_AddNumberToObject(m, "duration_s", 12.5);
        cJSON *st = cJSON_AddObjectToObject(m, "status");
        cJSON_AddStringToObject(st, "result", "ok");
        cJSON_AddNullToObject(st, "error");
        cJSON_AddItemToArray(models, m);
        cJSON *row = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "model", reg ? "itransformer" : "small_cnn");
        cJSON_AddNumberToObject(row, "parameters", reg ? 4833504 : 421642);
        if (reg) cJSON_AddNullToObject(row, "val_accuracy");
        else cJSON_AddNumberToObject(row, "val_accuracy", 0.81);
        cJSON_AddNumberToObject(row, "val_loss", reg ? 0.36 : 0.52);
        cJSON_AddStringToObject(row, "status", "ok");
        cJSON_AddItemToArray(rows, row);
    }
    if (with_classifier) cJSON_AddStringToObject(cmp, "most_accurate", "small_cnn");
    else cJSON_AddNullToObject(cmp, "most_accurate");
    cJSON_AddStringToObject(cmp, "fastest", "itransformer");
    return r;
}

Test(html_forecast, diagnostics_run_with_a_regression_model)
{
    /* regression models only: the comparison shows no accuracy column */
    cJSON *r = diagnostics_report(0);
    char *html = th_html_render(r);
    th_html_keep("forecast_diagnostics.html", html);
    static const char *const tags[] = {"section", "table", "tr", "h3", "svg", "text", "figure", "div", "p"};
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) assert_balanced(html, tags[i]);
    cr_assert_not_null(strstr(html, "<section id=\"comparison\">"));
    cr_assert_not_null(strstr(html, "<th>val loss</th>"));
    cr_assert_not_null(strstr(html, "Validation loss"), "the loss stands in for the accuracy chart");
    cr_assert_null(strstr(html, "val accuracy"));
    cr_assert_null(strstr(html, "Validation accuracy"));
    cr_assert_null(strstr(html, "Most accurate"));
    cr_assert_null(strstr(html, "nan"));
    md_free(html);
    cJSON_Delete(r);
    /* with a classifier beside it the column stays, a dash for the forecaster */
    r = diagnostics_report(1);
    html = th_html_render(r);
    cr_assert_not_null(strstr(html, "<th>val accuracy</th>"));
    cr_assert_not_null(strstr(html, "<td class=\"n dim\">&#8211;</td>"));
    cr_assert_not_null(strstr(html, "<b>Most accurate:</b> small_cnn"));
    md_free(html);
    cJSON_Delete(r);
}
