/* test_regress_metrics.c - R2, MAE and RMSE per target and overall
 * (md_regress_metrics in src/data/metrics.c): hand-computed values, the
 * examples of sklearn's documentation worked out with its formulas (written
 * here; nothing runs Python), original units, the edge cases sklearn
 * defines (constant target, fewer than two values), batches in any split,
 * and the report object and text table. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "data/metrics.h"
#include "core/mem.h"
#include "helpers.h"
#include "helpers_html.h"
#include "json_schema.h"

#define EPS 1e-12

/* sklearn's r2_score / mean_absolute_error / root_mean_squared_error
 * example with one output:
 *   y = [3, -0.5, 2, 7], p = [2.5, 0, 2, 8]
 *   e = [-0.5, 0.5, 0, 1]: MAE = 2 / 4 = 0.5, MSE = 1.5 / 4 = 0.375,
 *   RMSE = sqrt(0.375) = 0.6123724356957945;
 *   mean(y) = 2.875, SS_tot = 29.1875, SS_res = 1.5,
 *   R2 = 1 - 1.5 / 29.1875 = 0.9486081370449679 (sklearn: 0.948...). */
Test(regress_metrics, one_target_sklearn_example)
{
    const float y[] = {3.0f, -0.5f, 2.0f, 7.0f}, p[] = {2.5f, 0.0f, 2.0f, 8.0f};
    struct md_regress_metrics m;
    cr_assert_eq(md_regress_metrics(p, y, 4, 1, NULL, NULL, &m), MD_OK);
    cr_assert_eq(m.k, 1);
    cr_assert_eq(m.n, 4);
    cr_assert_float_eq(m.per[0].r2, 1.0 - 1.5 / 29.1875, EPS);
    cr_assert_float_eq(m.per[0].r2, 0.9486081370449679, EPS);
    cr_assert_float_eq(m.per[0].mae, 0.5, EPS);
    cr_assert_float_eq(m.per[0].rmse, 0.6123724356957945, EPS);
    /* one target: overall = that target */
    cr_assert_float_eq(m.r2, m.per[0].r2, 0);
    cr_assert_float_eq(m.rmse, m.per[0].rmse, 0);
    md_regress_metrics_free(&m);
}

/* sklearn's two-output example:
 *   y = [[0.5, 1], [-1, 1], [7, -6]], p = [[0, 2], [-1, 2], [8, -5]]
 * target 0: e = [-0.5, 0, 1]   SS_res = 1.25, mean(y) = 13/6,
 *           SS_tot = 217/6, R2 = 1 - 7.5/217 = 0.96543779...,
 *           MAE = 0.5, RMSE = sqrt(1.25/3) = 0.6454972243679028
 * target 1: e = [1, 1, 1]      SS_res = 3, mean(y) = -4/3, SS_tot = 98/3,
 *           R2 = 1 - 9/98 = 89/98, MAE = 1, RMSE = 1
 * overall (uniform_average): R2 0.9368005266622779 (sklearn: 0.936...),
 *   MAE 0.75 (sklearn: 0.75), RMSE 0.8227486121839513 (sklearn: 0.822...). */
static const float y2[] = {0.5f, 1.0f, -1.0f, 1.0f, 7.0f, -6.0f};
static const float p2[] = {0.0f, 2.0f, -1.0f, 2.0f, 8.0f, -5.0f};

Test(regress_metrics, two_targets_uniform_average)
{
    struct md_regress_metrics m;
    cr_assert_eq(md_regress_metrics(p2, y2, 3, 2, NULL, NULL, &m), MD_OK);
    cr_assert_eq(m.k, 2);
    cr_assert_eq(m.n, 3);
    cr_assert_float_eq(m.per[0].r2, 1.0 - 7.5 / 217.0, EPS);
    cr_assert_float_eq(m.per[1].r2, 89.0 / 98.0, EPS);
    cr_assert_float_eq(m.per[0].mae, 0.5, EPS);
    cr_assert_float_eq(m.per[1].mae, 1.0, EPS);
    cr_assert_float_eq(m.per[0].rmse, 0.6454972243679028, EPS);
    cr_assert_float_eq(m.per[1].rmse, 1.0, EPS);
    cr_assert_float_eq(m.r2, 0.9368005266622779, EPS);
    cr_assert_float_eq(m.mae, 0.75, EPS);
    /* the mean of per-target RMSEs, not sqrt of the pooled MSE (0.8416...) */
    cr_assert_float_eq(m.rmse, 0.8227486121839513, EPS);
    cr_assert(fabs(m.rmse - sqrt((1.25 + 3.0) / 6.0)) > 1e-3);
    md_regress_metrics_free(&m);
}

/* Standardised values with std (2, 0.5) and mean (10, -3): errors scale by
 * std, the mean cancels, R2 stays. */
Test(regress_metrics, original_units)
{
    const double mean[] = {10.0, -3.0}, sd[] = {2.0, 0.5};
    struct md_regress_metrics m;
    cr_assert_eq(md_regress_metrics(p2, y2, 3, 2, mean, sd, &m), MD_OK);
    cr_assert_float_eq(m.per[0].mae, 1.0, EPS);
    cr_assert_float_eq(m.per[1].mae, 0.5, EPS);
    cr_assert_float_eq(m.per[0].rmse, 2 * 0.6454972243679028, EPS);
    cr_assert_float_eq(m.per[1].rmse, 0.5, EPS);
    cr_assert_float_eq(m.per[0].r2, 1.0 - 7.5 / 217.0, EPS);
    cr_assert_float_eq(m.per[1].r2, 89.0 / 98.0, EPS);
    md_regress_metrics_free(&m);
    /* std without mean: scale only (R2 and errors as with any mean) */
    cr_assert_eq(md_regress_metrics(p2, y2, 3, 2, NULL, sd, &m), MD_OK);
    cr_assert_float_eq(m.per[0].mae, 1.0, EPS);
    cr_assert_float_eq(m.per[1].r2, 89.0 / 98.0, EPS);
    md_regress_metrics_free(&m);
}

/* sklearn (force_finite=True): a constant target scores 1 when predicted
 * exactly, else 0; fewer than two values: R2 undefined (NaN). */
Test(regress_metrics, constant_target_and_too_few)
{
    const float y[] = {2.0f, 2.0f, 2.0f}, exact[] = {2.0f, 2.0f, 2.0f}, off[] = {2.0f, 2.5f, 2.0f};
    struct md_regress_metrics m;
    cr_assert_eq(md_regress_metrics(exact, y, 3, 1, NULL, NULL, &m), MD_OK);
    cr_assert_float_eq(m.per[0].r2, 1.0, 0);
    md_regress_metrics_free(&m);
    cr_assert_eq(md_regress_metrics(off, y, 3, 1, NULL, NULL, &m), MD_OK);
    cr_assert_float_eq(m.per[0].r2, 0.0, 0);
    cr_assert_float_eq(m.per[0].mae, 0.5 / 3, EPS);
    md_regress_metrics_free(&m);
    cr_assert_eq(md_regress_metrics(off, y, 1, 1, NULL, NULL, &m), MD_OK);
    cr_assert(isnan(m.per[0].r2));
    cr_assert(isnan(m.r2));
    md_regress_metrics_free(&m);
    cr_assert_eq(md_regress_metrics(off, y, 3, 0, NULL, NULL, &m), MD_ERR_USAGE);
    md_regress_metrics_free(&m);
}

/* A perfect forecast: R2 1, errors 0; predicting the mean: R2 0; worse than
 * the mean: negative. */
Test(regress_metrics, r2_reference_points)
{
    const float y[] = {1.0f, 2.0f, 3.0f, 6.0f}, mean[] = {3.0f, 3.0f, 3.0f, 3.0f}, bad[] = {6.0f, 3.0f, 2.0f, 1.0f};
    struct md_regress_metrics m;
    cr_assert_eq(md_regress_metrics(y, y, 4, 1, NULL, NULL, &m), MD_OK);
    cr_assert_float_eq(m.r2, 1.0, 0);
    cr_assert_float_eq(m.mae, 0.0, 0);
    md_regress_metrics_free(&m);
    cr_assert_eq(md_regress_metrics(mean, y, 4, 1, NULL, NULL, &m), MD_OK);
    cr_assert_float_eq(m.r2, 0.0, EPS);
    md_regress_metrics_free(&m);
    /* SS_tot = 4 + 1 + 0 + 9 = 14, SS_res = 25 + 1 + 1 + 25 = 52 */
    cr_assert_eq(md_regress_metrics(bad, y, 4, 1, NULL, NULL, &m), MD_OK);
    cr_assert_float_eq(m.r2, 1.0 - 52.0 / 14.0, EPS);
    md_regress_metrics_free(&m);
}

/* Batches of any size give the one-pass result; large offsets keep their
 * small variance (a naive sum y^2 - n mean^2 would lose it). */
Test(regress_metrics, batches_and_offsets)
{
    enum { N = 37, K = 3 };
    float y[N * K], p[N * K];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < K; j++) {
            y[i * K + j] = (float)(1e5 * j + sin(0.7 * i + j));
            p[i * K + j] = y[i * K + j] + (float)(0.1 * cos(1.3 * i * (j + 1)));
        }
    struct md_regress_metrics whole, parts;
    cr_assert_eq(md_regress_metrics(p, y, N, K, NULL, NULL, &whole), MD_OK);
    struct md_regress_acc a;
    cr_assert_eq(md_regress_acc_init(&a, K), MD_OK);
    const int cuts[] = {0, 1, 5, 6, 20, N};
    for (int c = 0; c + 1 < (int)(sizeof cuts / sizeof cuts[0]); c++)
        md_regress_acc_add(&a, p + cuts[c] * K, y + cuts[c] * K, cuts[c + 1] - cuts[c], NULL, NULL);
    cr_assert_eq(md_regress_acc_result(&a, &parts), MD_OK);
    for (int j = 0; j < K; j++) {
        cr_assert_float_eq(parts.per[j].r2, whole.per[j].r2, 1e-12);
        cr_assert_float_eq(parts.per[j].mae, whole.per[j].mae, 1e-12);
        cr_assert_float_eq(parts.per[j].rmse, whole.per[j].rmse, 1e-12);
    }
    /* the two-pass R2 in double, here */
    for (int j = 0; j < K; j++) {
        double mu = 0, tot = 0, res = 0;
        for (int i = 0; i < N; i++) mu += (double)y[i * K + j] / N;
        for (int i = 0; i < N; i++) {
            double d = (double)y[i * K + j] - mu, e = (double)p[i * K + j] - (double)y[i * K + j];
            tot += d * d;
            res += e * e;
        }
        cr_assert_float_eq(whole.per[j].r2, 1 - res / tot, 1e-9, "target %d: %.12g vs %.12g", j, whole.per[j].r2,
                           1 - res / tot);
    }
    md_regress_acc_reset(&a);
    cr_assert_eq(a.n, 0);
    md_regress_acc_free(&a);
    md_regress_metrics_free(&whole);
    md_regress_metrics_free(&parts);
}

static const char *two_names(const void *ctx, int j)
{
    (void)ctx;
    return j == 0 ? "length_mm" : NULL; /* the second: the default name */
}

Test(regress_metrics, report_object)
{
    struct md_regress_metrics m;
    cr_assert_eq(md_regress_metrics(p2, y2, 3, 2, NULL, NULL, &m), MD_OK);
    cJSON *o = md_regress_metrics_json(&m, "val", "original", two_names, NULL);
    cr_assert_str_eq(cJSON_GetObjectItem(o, "split")->valuestring, "val");
    cr_assert_str_eq(cJSON_GetObjectItem(o, "units")->valuestring, "original");
    cr_assert_float_eq(cJSON_GetObjectItem(o, "r2")->valuedouble, 0.9368005266622779, EPS);
    cr_assert_float_eq(cJSON_GetObjectItem(o, "mae")->valuedouble, 0.75, EPS);
    const cJSON *per = cJSON_GetObjectItem(o, "per_target");
    cr_assert_eq(cJSON_GetArraySize(per), 2);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(per, 0), "name")->valuestring, "length_mm");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(per, 1), "name")->valuestring, "target_1");
    cr_assert_float_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(per, 1), "r2")->valuedouble, 89.0 / 98.0, EPS);
    cJSON_Delete(o);
    md_regress_metrics_free(&m);
    /* NaN is null */
    cr_assert_eq(md_regress_metrics(p2, y2, 1, 2, NULL, NULL, &m), MD_OK);
    o = md_regress_metrics_json(&m, "test", "original", NULL, NULL);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "r2")));
    cJSON_Delete(o);
    md_regress_metrics_free(&m);
}

Test(regress_metrics, text_table, .init = cr_redirect_stdout)
{
    struct md_regress_metrics m;
    cr_assert_eq(md_regress_metrics(p2, y2, 3, 2, NULL, NULL, &m), MD_OK);
    md_regress_metrics_print(&m, "validation", two_names, NULL);
    md_regress_metrics_free(&m);
    fflush(stdout);
    char buf[4096] = "";
    FILE *f = cr_get_redirected_stdout();
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    cr_assert(strstr(buf, "length_mm"), "%s", buf);
    cr_assert(strstr(buf, "0.9654"), "%s", buf);
    cr_assert(strstr(buf, "0.9082"), "%s", buf);
    const char *ov = strstr(buf, "overall (target mean)");
    cr_assert(ov, "%s", buf);
    const char *nl = strchr(ov, '\n'), *val = strstr(ov, "0.9368");
    cr_assert(val && nl && val < nl, "%s", buf);
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
        cr_assert_leq(strlen(line), 100, "wider than 100 columns: %s", line);
}

/* ---- end to end: a forecasting run's report ------------------------------------ */

#define SMALL_TS                                                                                                       \
    "--model itransformer --seq-len 16 --pred-len 8 --d-model 16 --d-ff 16 --e-layers 1 --n-heads 2 --steps 3 "        \
    "--epochs 2 --optimizer adamw --lr 0.003 --overwrite"

/* The forecasting run reports R2/MAE/RMSE per variate for validation and
 * test beside the standardised figures; the overall MAE in original units is
 * the figure the run already gave (the uniform average of equal-sized
 * targets is the pooled mean); the report and metrics lines validate. */
Test(regress_metrics, forecasting_report, .timeout = 60)
{
    char *dir = th_tmpdir(), cmd[2048], *out = NULL, *err = NULL, path[600];
    snprintf(cmd, sizeof cmd, SMALL_TS " --checkpoint-dir %s/ck --metrics %s/m.jsonl", dir, dir);
    cJSON *r = th_run_report(dir, cmd, 0, &out, &err);
    const cJSON *tr = th_obj(r, "training"), *te = th_obj(tr, "test");
    const cJSON *vm = th_obj(tr, "regression_metrics"), *tm = th_obj(te, "regression_metrics");
    cr_assert_str_eq(th_obj(vm, "split")->valuestring, "val");
    cr_assert_str_eq(th_obj(tm, "split")->valuestring, "test");
    cr_assert_str_eq(th_obj(tm, "units")->valuestring, "original");
    const cJSON *per = th_obj(tm, "per_target");
    cr_assert_eq(cJSON_GetArraySize(per), 7); /* the sample's 7 variates (M) */
    cr_assert_str_eq(th_obj(cJSON_GetArrayItem(per, 6), "name")->valuestring, "OT");
    cr_assert_str_eq(th_obj(cJSON_GetArrayItem(per, 0), "name")->valuestring, "HUFL");
    /* windows x pred_len values per target */
    cr_assert_eq((long long)th_num(tm, "count"), (long long)th_num(te, "samples") * 8);
    cr_assert_float_eq(th_num(tm, "mae"), th_num(te, "mae_original_units"), 1e-9 * th_num(tm, "mae"));
    double r2 = 0, mae = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, per)
    {
        r2 += th_num(t, "r2") / 7;
        mae += th_num(t, "mae") / 7;
        cr_assert_leq(th_num(t, "r2"), 1.0);
    }
    cr_assert_float_eq(th_num(tm, "r2"), r2, 1e-9);
    cr_assert_float_eq(th_num(tm, "mae"), mae, 1e-9);
    cr_assert(strstr(out, "overall (target mean)"), "%s", out);
    /* the HTML page: a table per split, a row per target and the overall row */
    char *html = th_html_render(r);
    th_html_keep("regress_metrics.html", html);
    cr_assert(strstr(html, "Test split: R&#178;, MAE, RMSE per target"), "no test table");
    cr_assert(strstr(html, "Validation after the last epoch: R&#178;"), "no validation table");
    cr_assert_eq(th_count(html, "<tr><th>OT</th>"), 2);
    cr_assert_eq(th_count(html, "<tr><th>overall</th>"), 2);
    char want[64];
    snprintf(want, sizeof want, "<td class=\"n\">%.4g</td>", th_num(tm, "r2"));
    cr_assert(strstr(html, want), "no %s", want);
    md_free(html);
    cJSON *s = th_load_json("docs/schema/report.schema.json");
    char e[1024];
    cr_assert(th_schema_validate(s, r, e, sizeof e), "report: %s", e);
    /* a report with a wrong key inside regression_metrics does not validate */
    cJSON_AddNumberToObject((cJSON *)tm, "r2_typo", 1);
    cr_assert_not(th_schema_validate(s, r, e, sizeof e));
    cJSON_Delete(s);
    cJSON_Delete(r);
    /* every --metrics line validates; epoch lines carry val_r2 */
    s = th_load_json("docs/schema/metrics.schema.json");
    snprintf(path, sizeof path, "%s/m.jsonl", dir);
    char *lines = th_slurp(path, NULL);
    cr_assert_not_null(lines);
    int epochs = 0;
    for (char *l = strtok(lines, "\n"); l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        cr_assert_not_null(j, "%s", l);
        cr_assert(th_schema_validate(s, j, e, sizeof e), "%s: %s", l, e);
        if (strcmp(th_obj(j, "kind")->valuestring, "epoch") == 0) {
            epochs++;
            cr_assert(cJSON_IsNumber(th_obj(j, "val_r2")), "%s", l);
        }
        cJSON_Delete(j);
    }
    cr_assert_eq(epochs, 2);
    free(lines);
    cJSON_Delete(s);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}
