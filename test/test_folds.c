/* test_folds.c - k-fold cross-validation: the splits (every training sample
 * in exactly one validation fold; shuffled for independent samples,
 * contiguous for time-series windows), the flags' errors, mean +- std, and
 * `--fold all` end to end: per-fold results, a summary equal to the mean and
 * std of the per-fold numbers, per-fold checkpoint folders and --metrics
 * headers, and the report against the schema. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app/folds.h"
#include "data/data.h"
#include "data/data_impl.h"
#include "core/mem.h"
#include "helpers.h"
#include "helpers_html.h"
#include "json_schema.h"

/* ---- splits ------------------------------------------------------------------- */

static struct md_data *open_fold(const char *dataset, const char *dir, int folds, int fold, int max_samples)
{
    struct md_data_opts o;
    md_data_opts_default(&o);
    snprintf(o.dataset, sizeof o.dataset, "%s", dataset);
    if (dir) snprintf(o.data_dir, sizeof o.data_dir, "%s", dir);
    o.folds = folds;
    o.fold = fold;
    o.max_samples = max_samples;
    o.series.seq_len = 16;
    o.series.pred_len = 8;
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
    return d;
}

/* Every pooled sample lands in exactly one validation fold, never in its
 * own fold's training split; the test split is untouched. */
static void check_partition(const char *dataset, const char *dir, int k, int want_contiguous)
{
    struct md_data *d0 = open_fold(dataset, dir, 1, 0, 0);
    long long pool = md_data_count(d0, MD_SPLIT_TRAIN) + md_data_count(d0, MD_SPLIT_VAL);
    long long ntest = md_data_count(d0, MD_SPLIT_TEST), n_all = d0->n_all;
    md_data_free(d0);
    int *seen = calloc((size_t)n_all, sizeof *seen);
    long long total = 0;
    for (int f = 0; f < k; f++) {
        struct md_data *d = open_fold(dataset, dir, k, f, 0);
        long long nv = md_data_count(d, MD_SPLIT_VAL), nt = md_data_count(d, MD_SPLIT_TRAIN);
        cr_assert_eq(nv + nt, pool, "fold %d: %lld + %lld != %lld", f, nv, nt, pool);
        cr_assert_eq(nv, (long long)(f + 1) * pool / k - (long long)f * pool / k);
        cr_assert_eq(md_data_count(d, MD_SPLIT_TEST), ntest);
        int *in_val = calloc((size_t)n_all, sizeof *in_val);
        for (long long i = 0; i < nv; i++) {
            long long g = md_data_split_index(d, MD_SPLIT_VAL, i);
            seen[g]++;
            in_val[g] = 1;
            if (want_contiguous && i > 0) cr_assert_eq(g, md_data_split_index(d, MD_SPLIT_VAL, i - 1) + 1);
        }
        for (long long i = 0; i < nt; i++) cr_assert_not(in_val[md_data_split_index(d, MD_SPLIT_TRAIN, i)]);
        free(in_val);
        total += nv;
        md_data_free(d);
    }
    cr_assert_eq(total, pool);
    for (long long g = 0; g < n_all; g++) cr_assert_leq(seen[g], 1, "sample %lld in %d folds", g, seen[g]);
    free(seen);
}

Test(folds, synthetic_folds_partition_the_training_samples, .timeout = 30)
{
    check_partition("synthetic", NULL, 3, 0);
}

Test(folds, time_series_folds_are_contiguous, .timeout = 30)
{
    check_partition("auto", "data/timeseries-sample", 3, 1);
}

Test(folds, shuffled_by_seed_and_capped, .timeout = 30)
{
    /* shuffled: fold 0 of the synthetic set is not its first samples */
    struct md_data *d = open_fold("synthetic", NULL, 4, 0, 0);
    int ordered = 1;
    for (long long i = 0; i < 10; i++) ordered &= md_data_split_index(d, MD_SPLIT_VAL, i) == i;
    cr_assert_not(ordered);
    cr_assert(strstr(md_data_split_origin(d, MD_SPLIT_VAL), "fold 0 of 4"), "%s", md_data_split_origin(d, MD_SPLIT_VAL));
    md_data_free(d);
    d = open_fold("synthetic", NULL, 4, 1, 100);
    cr_assert_eq(md_data_count(d, MD_SPLIT_TRAIN), 100);
    cr_assert_eq(md_data_count(d, MD_SPLIT_VAL), 100);
    md_data_free(d);
}

/* ---- mean +- std -------------------------------------------------------------- */

Test(folds, mean_and_population_std)
{
    double v[] = {1.0, 2.0, NAN, 4.0}, m, s;
    int used;
    md_folds_mean_std(v, 4, &m, &s, &used);
    cr_assert_eq(used, 3);
    cr_assert_float_eq(m, 7.0 / 3.0, 1e-12);
    /* deviations -4/3, -1/3, 5/3: (16 + 1 + 25) / 9 / 3 */
    cr_assert_float_eq(s, sqrt(42.0 / 27.0), 1e-12);
    double one[] = {NAN};
    md_folds_mean_std(one, 1, &m, &s, &used);
    cr_assert_eq(used, 0);
    cr_assert(isnan(m));
}

/* ---- flags -------------------------------------------------------------------- */

static void expect_usage(const char *args, const char *needle)
{
    char *out = NULL, *err = NULL;
    int rc = th_run(args, &out, &err);
    cr_assert_eq(rc, 2, "rc %d for %s\n%s\n%s", rc, args, out, err);
    cr_assert(strstr(err, needle), "%s: %s", args, err);
    cr_assert_eq(th_count_messages(err), 1, "%s", err);
    free(out);
    free(err);
}

Test(folds, flag_errors, .timeout = 30)
{
    expect_usage("--fold 1", "--fold 1 needs --folds K with K >= 2");
    expect_usage("--fold all", "--fold all needs --folds K");
    expect_usage("--folds 3 --fold 3", "--folds 3 has the folds 0 to 2");
    expect_usage("--folds 3 --fold x", "--fold");
    expect_usage("--folds 3 --fold all --benchmark-only", "needs training");
    expect_usage("--folds 3 --fold all --resume x.safetensors", "--resume");
}

/* ---- --fold all end to end ------------------------------------------------------- */

#define SMALL_TS                                                                                                       \
    "--model itransformer --seq-len 16 --pred-len 8 --d-model 16 --d-ff 16 --e-layers 1 --n-heads 2 --steps 3 "        \
    "--epochs 2 --optimizer adamw --lr 0.003"

/* summary[key] equals the mean and population std of runs[i].metrics[key],
 * and each of those the fold's own report figure at `src` (NULL: skip). */
static void check_summary(const cJSON *folds, const char *key, int k)
{
    double v[8], mu = 0, q = 0;
    const cJSON *runs = th_obj(folds, "runs");
    cr_assert_eq(cJSON_GetArraySize(runs), k);
    for (int i = 0; i < k; i++) {
        const cJSON *r = cJSON_GetArrayItem(runs, i);
        cr_assert_eq((int)th_num(r, "fold"), i);
        cr_assert_str_eq(th_obj(th_obj(r, "status"), "result")->valuestring, "ok");
        v[i] = th_num(th_obj(r, "metrics"), key);
        mu += v[i] / k;
    }
    for (int i = 0; i < k; i++) q += (v[i] - mu) * (v[i] - mu);
    const cJSON *s = th_obj(th_obj(folds, "summary"), key);
    cr_assert_float_eq(th_num(s, "mean"), mu, 1e-12 * (1 + fabs(mu)), "%s mean", key);
    cr_assert_float_eq(th_num(s, "std"), sqrt(q / k), 1e-12 * (1 + fabs(mu)), "%s std", key);
    cr_assert_eq((int)th_num(s, "folds"), k);
}

static int is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

Test(folds, fold_all_regression_end_to_end, .timeout = 120)
{
    enum { K = 3 };
    char *dir = th_tmpdir(), cmd[2048], *out = NULL, *err = NULL, path[700];
    snprintf(cmd, sizeof cmd, SMALL_TS " --folds %d --fold all --checkpoint-dir %s/ck --metrics %s/m.jsonl", K, dir, dir);
    cJSON *r = th_run_report(dir, cmd, 0, &out, &err);
    const cJSON *folds = th_obj(r, "folds");
    cr_assert_eq((int)th_num(folds, "k"), K);
    check_summary(folds, "val_loss", K);
    check_summary(folds, "r2", K);
    check_summary(folds, "mae", K);
    check_summary(folds, "rmse", K);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(th_obj(folds, "summary"), "val_acc"));
    /* each fold's figures are its own training report's; the folds differ */
    double r2_0 = 0;
    for (int i = 0; i < K; i++) {
        const cJSON *run = cJSON_GetArrayItem(th_obj(folds, "runs"), i);
        const cJSON *tr = th_obj(run, "training");
        cr_assert_float_eq(th_num(th_obj(run, "metrics"), "r2"), th_num(th_obj(tr, "regression_metrics"), "r2"), 0);
        const cJSON *vl = th_obj(th_obj(tr, "curves"), "val_loss");
        cr_assert_float_eq(th_num(th_obj(run, "metrics"), "val_loss"), cJSON_GetArrayItem(vl, 1)->valuedouble, 0);
        if (i == 0) r2_0 = th_num(th_obj(run, "metrics"), "r2");
        else cr_assert(th_num(th_obj(run, "metrics"), "r2") != r2_0, "fold %d scored as fold 0", i);
        snprintf(path, sizeof path, "%s/ck/fold-%d/last.safetensors", dir, i);
        cr_assert(is_file(path), "%s", path);
    }
    /* the text: the table and mean +- std */
    cr_assert(strstr(out, "== Folds"), "%s", out);
    cr_assert_eq(th_count(out, "== Fold "), K, "%s", out);
    cr_assert(strstr(out, "val R2"), "%s", out);
    cr_assert(strstr(out, "+-"), "%s", out);
    /* the HTML page: the folds' table with mean +- std */
    char *html = th_html_render(r);
    th_html_keep("folds.html", html);
    cr_assert(strstr(html, "id=\"folds\""), "no folds section");
    cr_assert(strstr(html, "<th>val R&#178;</th>"), "no R2 column");
    cr_assert_eq(th_count(html, "<td>ok</td></tr>"), K);
    char want[96];
    const cJSON *sr2 = th_obj(th_obj(folds, "summary"), "r2");
    snprintf(want, sizeof want, "<td class=\"n\">%.4g &#177; %.2g</td>", th_num(sr2, "mean"), th_num(sr2, "std"));
    cr_assert(strstr(html, want), "no %s", want);
    md_free(html);
    /* the report and every metrics line validate; one header per fold, with its fold */
    cJSON *s = th_load_json("docs/schema/report.schema.json");
    char e[1024];
    cr_assert(th_schema_validate(s, r, e, sizeof e), "report: %s", e);
    cJSON_Delete(s);
    s = th_load_json("docs/schema/metrics.schema.json");
    snprintf(path, sizeof path, "%s/m.jsonl", dir);
    char *lines = th_slurp(path, NULL);
    int headers = 0;
    for (char *l = strtok(lines, "\n"); l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        cr_assert(th_schema_validate(s, j, e, sizeof e), "%s: %s", l, e);
        if (strcmp(th_obj(j, "kind")->valuestring, "header") == 0) cr_assert_eq((int)th_num(j, "fold"), headers++);
        cJSON_Delete(j);
    }
    cr_assert_eq(headers, K);
    free(lines);
    cJSON_Delete(s);
    cJSON_Delete(r);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

Test(folds, fold_all_classification, .timeout = 120)
{
    char *dir = th_tmpdir(), cmd[2048], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd,
             "--dataset synthetic --model small_cnn --epochs 1 --steps 2 --max-samples 64 --batch-size 16 --folds 2 "
             "--fold all --checkpoint-dir %s/ck",
             dir);
    cJSON *r = th_run_report(dir, cmd, 0, &out, &err);
    const cJSON *folds = th_obj(r, "folds");
    check_summary(folds, "val_acc", 2);
    check_summary(folds, "val_loss", 2);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(th_obj(folds, "summary"), "r2"));
    cr_assert(strstr(out, "val acc"), "%s", out);
    cJSON *s = th_load_json("docs/schema/report.schema.json");
    char e[1024];
    cr_assert(th_schema_validate(s, r, e, sizeof e), "report: %s", e);
    cJSON_Delete(s);
    cJSON_Delete(r);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}
