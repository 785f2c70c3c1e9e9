/* test_forecast.c - forecasting end to end through the binary: regression
 * training on the bundled time-series sample (report keys, a trained model
 * beats an untrained one), early stopping for both tasks, the flag
 * spellings, task mismatch errors, run_on_mac.sh's forecasting widths, and
 * the report against the schema. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "json_schema.h"

/* small and fast: a 1-layer itransformer over 16-row windows */
#define SMALL "--seq-len 16 --pred-len 8 --d-model 16 --d-ff 16 --e-layers 1 --n-heads 2 --steps 3 --overwrite"

/* Runs the binary with `args` plus a report in a fresh folder; the report (caller deletes). */
static cJSON *run_report(const char *args, int want_rc, char **out_text)
{
    char *dir = th_tmpdir();
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s --checkpoint-dir %s/ck", args, dir);
    cJSON *r = th_run_report(dir, cmd, want_rc, out_text, NULL);
    th_tmpdir_free(dir);
    return r;
}

Test(forecast, trains_on_the_sample_and_beats_an_untrained_model, .timeout = 60)
{
    char *text = NULL;
    cJSON *r = run_report("--model itransformer " SMALL " --epochs 2 --optimizer adamw --lr 0.003", 0, &text);
    const cJSON *t = th_obj(r, "training");
    cr_assert_str_eq(th_obj(t, "task")->valuestring, "regression");
    cr_assert_str_eq(th_obj(t, "loss_function")->valuestring, "mse");
    cr_assert_str_eq(th_obj(th_obj(r, "data"), "task")->valuestring, "regression");
    const cJSON *c = th_obj(t, "curves");
    cr_assert_null(cJSON_GetObjectItem(c, "train_acc"));
    cr_assert_null(cJSON_GetObjectItem(c, "val_acc"));
    cr_assert_eq(cJSON_GetArraySize(th_obj(c, "val_mse")), 2);
    cr_assert_eq(cJSON_GetArraySize(th_obj(c, "val_mae")), 2);
    const cJSON *best = th_obj(t, "best");
    cr_assert_str_eq(th_obj(best, "metric")->valuestring, "val_loss");
    cr_assert_gt(th_num(best, "value"), 0);
    const cJSON *te = th_obj(t, "test");
    cr_assert_null(cJSON_GetObjectItem(te, "acc"));
    double mse = th_num(te, "mse");
    cr_assert_float_eq(th_num(te, "rmse"), sqrt(mse), 1e-9);
    double dir = th_num(te, "directional_accuracy");
    cr_assert(dir >= 0 && dir <= 1);
    cr_assert_gt(th_num(te, "mse_original_units"), 0);
    cr_assert_gt(th_num(te, "mae_original_units"), 0);
    cr_assert_str_eq(th_obj(th_obj(te, "baseline"), "name")->valuestring, "repeat the last value");
    cr_assert_gt(th_num(th_obj(te, "baseline"), "mse"), 0);
    const cJSON *f = th_obj(t, "forecasts");
    cr_assert_eq(cJSON_GetArraySize(f), 4);
    const cJSON *f0 = cJSON_GetArrayItem(f, 0);
    cr_assert_eq(cJSON_GetArraySize(th_obj(f0, "lookback")), 16);
    cr_assert_eq(cJSON_GetArraySize(th_obj(f0, "actual")), 8);
    cr_assert_eq(cJSON_GetArraySize(th_obj(f0, "predicted")), 8);
    cr_assert_str_eq(th_obj(f0, "variate")->valuestring, "OT");
    cr_assert(strstr(th_obj(th_obj(t, "step_execution"), "why")->valuestring, "regression"));
    /* the text: val MSE/MAE columns, no accuracy, the baseline beside the test line */
    cr_assert(strstr(text, "val MSE") && strstr(text, "naive baseline"), "%s", text);
    cr_assert_null(strstr(text, "accuracy %"), "%s", text);
    cr_assert_null(strstr(text, "val acc"), "%s", text);
    free(text);

    /* the report validates against the schema */
    cJSON *s = th_load_json("docs/schema/report.schema.json");
    char err[600];
    cr_assert(th_schema_validate(s, r, err, sizeof err), "regression report: %s", err);
    cJSON_Delete(s);

    /* the same run with a learning rate too small to move a weight scores worse */
    cJSON *u = run_report("--model itransformer " SMALL " --epochs 2 --optimizer adamw --lr 1e-12", 0, NULL);
    double untrained = th_num(th_obj(th_obj(u, "training"), "test"), "mse");
    cr_assert_lt(mse, untrained, "trained test MSE %g, untrained %g", mse, untrained);
    cJSON_Delete(u);
    cJSON_Delete(r);
}

/* A learning rate below every weight's rounding step: nothing improves, so
 * --patience 1 stops after the second epoch. */
Test(forecast, early_stopping_regression, .timeout = 60)
{
    cJSON *r = run_report("--model itransformer " SMALL " --epochs 5 --patience 1 --lr 1e-12", 0, NULL);
    const cJSON *t = th_obj(r, "training");
    const cJSON *es = th_obj(t, "early_stopping");
    cr_assert_eq((int)th_num(es, "patience"), 1);
    cr_assert_eq((int)th_num(es, "stopped_after_epoch"), 2);
    cr_assert_eq((int)th_num(t, "epochs_run"), 2);
    cr_assert_eq((int)th_num(th_obj(t, "best"), "epoch"), 1);
    cr_assert_eq((int)th_num(th_obj(t, "test"), "after_epoch"), 1, "scored with the best epoch's weights");
    cJSON_Delete(r);
    /* --patience 0: every epoch runs and no early_stopping key appears */
    r = run_report("--model itransformer " SMALL " --epochs 3 --patience 0 --lr 1e-12", 0, NULL);
    cr_assert_null(cJSON_GetObjectItem(th_obj(r, "training"), "early_stopping"));
    cr_assert_eq((int)th_num(th_obj(r, "training"), "epochs_run"), 3);
    cJSON_Delete(r);
    /* a forecasting model's default is the public recipe's patience of 3 and Adam */
    r = run_report("--model itransformer " SMALL " --epochs 2", 0, NULL);
    cr_assert_eq((int)th_num(th_obj(th_obj(r, "training"), "early_stopping"), "patience"), 3);
    cr_assert_str_eq(th_obj(th_obj(r, "training"), "optimizer")->valuestring, "adamw");
    cJSON_Delete(r);
}

Test(forecast, early_stopping_classification, .timeout = 60)
{
    cJSON *r = run_report("--max-samples 64 --steps 1 --batch-size 32 --epochs 4 --patience 1 --lr 1e-12", 0, NULL);
    const cJSON *t = th_obj(r, "training");
    cr_assert_str_eq(th_obj(t, "task")->valuestring, "classification");
    cr_assert_str_eq(th_obj(t, "loss_function")->valuestring, "cross_entropy");
    cr_assert_eq((int)th_num(th_obj(t, "early_stopping"), "stopped_after_epoch"), 2);
    cr_assert_str_eq(th_obj(th_obj(t, "best"), "metric")->valuestring, "val_acc");
    cJSON_Delete(r);
}

Test(forecast, flag_spellings_and_model_selection, .timeout = 60)
{
    /* underscores, --train_epochs, --loss_function; a time-series flag picks the model */
    cJSON *r = run_report("--seq_len 16 --pred_len 8 --d_model 16 --d_ff 16 --e_layers 1 --n_heads 2 --steps 2 "
                          "--overwrite --train_epochs 1 --loss_function huber",
                          0, NULL);
    const cJSON *t = th_obj(r, "training");
    cr_assert_str_eq(th_obj(t, "loss_function")->valuestring, "huber");
    cr_assert_eq((int)th_num(t, "epochs"), 1);
    cr_assert_str_eq(th_obj(th_obj(r, "model"), "name")->valuestring, "itransformer");
    const cJSON *m = th_setting(r, "model");
    cr_assert_not_null(m);
    char *text = cJSON_PrintUnformatted(m);
    int found = text && strstr(text, "--seq-len given without --model");
    free(text);
    cr_assert(found, "the model setting's reason names --seq-len");
    cJSON_Delete(r);
}

static void expect_error(const char *args, const char *needle)
{
    char *out = NULL, *err = NULL;
    int rc = th_run(args, &out, &err);
    cr_assert_neq(rc, 0, "%s succeeded", args);
    cr_assert(strstr(err, needle), "%s: stderr lacks '%s':\n%s", args, needle, err);
    cr_assert_eq(th_count_messages(err), 1, "%s: one line wanted:\n%s", args, err);
    free(out);
    free(err);
}

Test(forecast, task_mismatches_are_one_line_errors, .timeout = 60)
{
    expect_error("--model itransformer --dataset fashion-mnist --epochs 1", "is a regression model but dataset");
    expect_error("--model small_cnn --dataset csv --epochs 1", "is a classifier");
    expect_error("--model itransformer " SMALL " --loss-function cross_entropy --epochs 1", "is for classifiers");
    expect_error("--max-samples 64 --loss-function mse --epochs 1", "is a regression loss");
    expect_error("--model small_cnn --d-model 16 --epochs 1", "d_model");
}

Test(forecast, run_on_mac_passes_the_presets_widths, .timeout = 30)
{
    char *out = NULL, *err = NULL;
    int rc = th_sh("RUN_ON_MAC_DRY_RUN=1 MPSDIAG_CHIP='Apple M1' scripts/run_on_mac.sh --seq_len 96 --train_epochs 5", &out,
                   &err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(out, "--d-model 192") && strstr(out, "--d-ff 768"), "%s", out);
    free(out);
    free(err);
    /* a width given wins; a classification run gets none */
    rc = th_sh("RUN_ON_MAC_DRY_RUN=1 MPSDIAG_CHIP='Apple M1' scripts/run_on_mac.sh --seq_len 96 --d_model 64", &out, &err);
    cr_assert(strstr(out, "--d_model 64") && !strstr(out, "--d-model 192"), "%s", out);
    free(out);
    free(err);
    rc = th_sh("RUN_ON_MAC_DRY_RUN=1 MPSDIAG_CHIP='Apple M1' scripts/run_on_mac.sh --epochs 1", &out, &err);
    cr_assert_null(strstr(out, "--d-model"), "%s", out);
    free(out);
    free(err);
}

Test(forecast, features_s_and_ms, .timeout = 60)
{
    /* --features S: the target column alone, in and out (a one-variate series through the token layers) */
    cJSON *r = run_report("--model itransformer " SMALL " --features S --epochs 1", 0, NULL);
    const cJSON *ts = th_obj(th_obj(r, "data"), "time_series");
    cr_assert_str_eq(th_obj(ts, "features")->valuestring, "S");
    cr_assert_eq(cJSON_GetArraySize(th_obj(ts, "variates")), 1, "the target column alone");
    cr_assert(th_num(th_obj(th_obj(r, "training"), "test"), "mse") > 0.0);
    cJSON_Delete(r);
    /* --features MS: every variate in, the target's forecast out */
    r = run_report("--model itransformer " SMALL " --features MS --target HULL --epochs 1", 0, NULL);
    ts = th_obj(th_obj(r, "data"), "time_series");
    cr_assert_str_eq(th_obj(ts, "target")->valuestring, "HULL");
    cr_assert_eq(cJSON_GetArraySize(th_obj(ts, "variates")), 7);
    cr_assert_str_eq(th_obj(cJSON_GetArrayItem(th_obj(th_obj(r, "training"), "forecasts"), 0), "variate")->valuestring, "HULL");
    cJSON_Delete(r);
}

Test(forecast, settings_say_what_ran, .timeout = 60)
{
    /* one row per setting (the forecasting model's dataset revises --ci's), and the layout the token layers
     * really run in, whatever the device's default */
    cJSON *r = run_report("--ci --model itransformer " SMALL " --channels-last", 0, NULL);
    int datasets = 0, cl = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, th_obj(r, "settings"))
    {
        const char *n = th_obj(e, "name")->valuestring;
        if (strcmp(n, "dataset") == 0) {
            datasets++;
            cr_assert_str_eq(th_obj(e, "value")->valuestring, "csv");
        }
        if (strcmp(n, "channels_last") == 0) {
            cl++;
            cr_assert_str_eq(th_obj(e, "value")->valuestring, "off");
        }
    }
    cr_assert_eq(datasets, 1);
    cr_assert_eq(cl, 1);
    cJSON_Delete(r);
}

Test(forecast, benchmark_and_ci_with_a_forecasting_model, .timeout = 60)
{
    /* --benchmark-only times the regression step on the bundled series (not synthetic images) */
    cJSON *r = run_report("--model itransformer --seq-len 16 --pred-len 8 --d-model 16 --d-ff 16 --e-layers 1 "
                          "--n-heads 2 --benchmark-only --epochs 0 --batch-size 8 --bench-iters 3 --warmup-iters 1",
                          0, NULL);
    const cJSON *b = th_obj(r, "benchmark");
    cr_assert_str_eq(th_obj(b, "data_source")->valuestring, "csv");
    const cJSON *tr = th_obj(b, "training");
    cr_assert_gt(th_num(th_obj(tr, "step_ms"), "p50"), 0.0);
    double l0 = th_num(tr, "first_loss");
    cr_assert(l0 > 0.01 && l0 < 20.0, "a per-element MSE of standardised values, not a per-sample sum: %g", l0);
    cJSON_Delete(r);
    /* --ci with a forecasting model: its data is the bundled time series, and it passes */
    r = run_report("--ci --model itransformer --seq-len 16 --pred-len 8 --d-model 16 --d-ff 16 --e-layers 1 "
                   "--n-heads 2 --steps 3",
                   0, NULL);
    cr_assert_str_eq(th_obj(th_obj(r, "training"), "task")->valuestring, "regression");
    cJSON_Delete(r);
}
