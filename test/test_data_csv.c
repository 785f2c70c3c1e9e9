/* test_data_csv.c - CSV time series through the dataset machinery: the
 * format (--dataset csv / auto on a .csv file or a directory holding one),
 * the delivered shapes and task, the loader's windows, targets and time
 * features against csv_series itself, model-request checks, and the
 * regression metrics with the naive baseline (src/data/metrics.c). The
 * real-data checks read ../shared/data/timeseries and are skipped without it. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "data/csv_series.h"
#include "data/data.h"
#include "data/metrics.h"
#include "helpers.h"

#define SAMPLE "data/timeseries-sample/sample_ETTh2_first1728.csv"
#define SHARED "../shared/data/timeseries"

static struct md_data_opts csv_opts(const char *path)
{
    struct md_data_opts o;
    md_data_opts_default(&o);
    snprintf(o.dataset, sizeof o.dataset, "csv");
    snprintf(o.data_dir, sizeof o.data_dir, "%s", path);
    return o;
}

static struct md_data *open_ok(const struct md_data_opts *o, const struct md_data_request *req)
{
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(o, req, &d), MD_OK, "%s", md_errmsg());
    return d;
}

Test(data_csv, sample_shapes_task_and_splits)
{
    struct md_data_opts o = csv_opts(SAMPLE);
    struct md_data *d = open_ok(&o, NULL);
    cr_assert_eq(md_data_task(d), MD_TASK_REGRESS);
    const struct md_data_series *s = md_data_series(d);
    cr_assert(s->seq_len == 96 && s->n_in == 7 && s->n_time == 4 && s->pred_len == 96 && s->n_out == 7 &&
              s->out_col == 0);
    cr_assert_eq(md_data_target_elems(d), 96 * 7);
    /* the sample is split 70/10/20 (docs/timeseries-data.md) */
    cr_assert_eq(md_data_count(d, MD_SPLIT_TRAIN), 1018);
    cr_assert_eq(md_data_count(d, MD_SPLIT_VAL), 79);
    cr_assert_eq(md_data_count(d, MD_SPLIT_TEST), 250);
    cr_assert_eq(md_data_num_classes(d), 0);
    cr_assert_eq(md_data_num_inputs(d), 2);
    cr_assert(md_data_input(d, 0)->kind == MD_INPUT_SERIES && md_data_input_elems(d, 0) == 96 * 7);
    cr_assert(md_data_input(d, 1)->kind == MD_INPUT_TIME && md_data_input_elems(d, 1) == 96 * 4);
    cr_assert_str_eq(md_data_format(d), "csv");
    cr_assert(strstr(md_data_split_origin(d, MD_SPLIT_TEST), "rows 1287-1727"), "%s",
              md_data_split_origin(d, MD_SPLIT_TEST));
    md_data_free(d);
}

/* Every batch of the test split against md_csv_series_window on the same file. */
Test(data_csv, loader_windows_targets_and_time_features)
{
    struct md_data_opts o = csv_opts(SAMPLE);
    struct md_data *d = open_ok(&o, NULL);
    md_csv_opts co;
    md_csv_opts_default(&co);
    md_csv_series *cs = NULL;
    cr_assert_eq(md_csv_series_load(SAMPLE, &co, &cs), MD_OK, "%s", md_errmsg());
    for (int workers = 0; workers < 3; workers += 2) {
        struct md_loader_opts lo = {.split = MD_SPLIT_TEST, .batch_size = 32, .num_workers = workers, .prefetch = 2,
                                    .seed = 1};
        struct md_loader *l = NULL;
        cr_assert_eq(md_loader_create(d, &lo, &l), MD_OK, "%s", md_errmsg());
        cr_assert_eq(md_loader_start_epoch(l, 0), MD_OK);
        float x[96 * 7], y[96 * 7], m[96 * 4];
        long long seen = 0;
        for (struct md_batch *b; md_loader_next(l, &b) == MD_OK && b; md_loader_release(l, b)) {
            cr_assert(b->targets);
            for (int j = 0; j < b->n; j++, seen++) {
                md_csv_series_window(cs, 2, b->index[j], x, y, m, NULL);
                cr_assert(memcmp(b->inputs[0] + (size_t)j * 96 * 7, x, sizeof x) == 0, "window %lld", seen);
                cr_assert(memcmp(b->targets + (size_t)j * 96 * 7, y, sizeof y) == 0, "window %lld", seen);
                cr_assert(memcmp(b->inputs[1] + (size_t)j * 96 * 4, m, sizeof m) == 0, "window %lld", seen);
                cr_assert_eq(b->labels[j], 0);
            }
        }
        cr_assert_eq(seen, 250);
        md_loader_free(l);
    }
    md_csv_series_free(cs);
    md_data_free(d);
}

Test(data_csv, features_target_and_one_input)
{
    struct md_data_opts o = csv_opts(SAMPLE);
    snprintf(o.series.features, sizeof o.series.features, "MS");
    snprintf(o.series.target, sizeof o.series.target, "HULL");
    o.series.seq_len = 24;
    o.series.pred_len = 12;
    struct md_data_request req = {.num_inputs = 1};
    struct md_data *d = open_ok(&o, &req);
    const struct md_data_series *s = md_data_series(d);
    cr_assert(s->seq_len == 24 && s->n_in == 7 && s->pred_len == 12 && s->n_out == 1 && s->out_col == 6);
    cr_assert_eq(md_data_num_inputs(d), 1);
    /* the target (moved last) is what is predicted: its train scaler */
    cr_assert(md_data_target_std(d) && md_data_target_std(d)[0] > 0);
    md_data_free(d);
    snprintf(o.series.features, sizeof o.series.features, "S");
    d = open_ok(&o, NULL);
    cr_assert(md_data_series(d)->n_in == 1 && md_data_series(d)->n_out == 1 && md_data_series(d)->out_col == 0);
    md_data_free(d);
}

Test(data_csv, model_request_mismatch_is_a_config_error)
{
    struct md_data_opts o = csv_opts(SAMPLE);
    struct md_data_request req = {.num_inputs = 1, .inputs = {{.name = "x", .c = 1, .h = 28, .w = 28}}};
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, &req, &d), MD_ERR_CONFIG);
    cr_assert(strstr(md_errmsg(), "'x'") && strstr(md_errmsg(), "(1, 96, 7)"), "%s", md_errmsg());
    struct md_data_request three = {.num_inputs = 3};
    cr_assert_eq(md_data_open(&o, &three, &d), MD_ERR_CONFIG);
    md_err_clear();
}

Test(data_csv, auto_detects_a_file_or_a_directory_with_one)
{
    char *dir = th_tmpdir();
    char *a = th_write(dir, "series.csv", "date,a,OT\n2020-01-01 00:00:00,1,2\n2020-01-01 01:00:00,2,3\n"
                                          "2020-01-01 02:00:00,3,5\n2020-01-01 03:00:00,1,1\n2020-01-01 04:00:00,0,2\n"
                                          "2020-01-01 05:00:00,4,4\n2020-01-01 06:00:00,2,2\n2020-01-01 07:00:00,3,3\n"
                                          "2020-01-01 08:00:00,5,1\n2020-01-01 09:00:00,1,0\n");
    struct md_data_opts o = csv_opts(a);
    snprintf(o.dataset, sizeof o.dataset, "auto");
    o.series.seq_len = 2;
    o.series.pred_len = 1;
    struct md_data *d = open_ok(&o, NULL);
    cr_assert_eq(md_data_task(d), MD_TASK_REGRESS);
    md_data_free(d);
    snprintf(o.data_dir, sizeof o.data_dir, "%s", dir);
    d = open_ok(&o, NULL);
    cr_assert_str_eq(md_data_source(d), a);
    md_data_free(d);
    /* two files: say which, and how to choose */
    free(th_write(dir, "other.csv", "a,b\n1,2\n"));
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_ERR_DATA);
    snprintf(o.dataset, sizeof o.dataset, "csv");
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "2 .csv files") && strstr(md_errmsg(), "--data-dir FILE.csv"), "%s", md_errmsg());
    md_err_clear();
    free(a);
    th_tmpdir_free(dir);
}

Test(data_csv, bad_files_name_file_line_and_column)
{
    char *dir = th_tmpdir();
    char *bad = th_write(dir, "bad.csv", "date,a,OT\n2020-01-01,1,2\n2020-01-02,x,3\n2020-01-03,1,2\n");
    struct md_data_opts o = csv_opts(bad);
    o.series.seq_len = 1;
    o.series.pred_len = 1;
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "bad.csv: line 3, column 2 (a)"), "%s", md_errmsg());
    char *few = th_write(dir, "few.csv", "a,OT\n1,2\n2,3\n3,4\n");
    struct md_data_opts f = csv_opts(few);
    cr_assert_eq(md_data_open(&f, NULL, &d), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "few.csv") && strstr(md_errmsg(), "too few rows"), "%s", md_errmsg());
    snprintf(f.data_dir, sizeof f.data_dir, "%s/nothing.csv", dir);
    cr_assert_neq(md_data_open(&f, NULL, &d), MD_OK);
    md_err_clear();
    free(bad);
    free(few);
    th_tmpdir_free(dir);
}

/* ---- metrics ---- */

Test(data_csv, metrics_by_hand)
{
    /* 1 sample, horizon 2, 2 channels; last = (0, 1) */
    float pred[4] = {1, 1, -1, 3}, tgt[4] = {2, 0, -1, 1}, last[2] = {0, 1};
    double std[2] = {2, 10};
    struct md_metrics_acc a;
    md_metrics_acc_init(&a);
    md_metrics_acc_add(&a, pred, tgt, last, 2, 1, 2, 2, std);
    struct md_metrics m;
    md_metrics_result(&a, &m);
    /* errors -1, 1, 0, 2 */
    cr_assert_float_eq(m.mse, 6.0 / 4, 1e-12);
    cr_assert_float_eq(m.mae, 4.0 / 4, 1e-12);
    cr_assert_float_eq(m.rmse, sqrt(1.5), 1e-12);
    /* original units: -2, 10, 0, 20 */
    cr_assert(m.has_orig);
    cr_assert_float_eq(m.mse_orig, (4.0 + 100 + 0 + 400) / 4, 1e-9);
    cr_assert_float_eq(m.mae_orig, 32.0 / 4, 1e-12);
    /* directions (pred, true): (+,+) hit, (0,-) miss, (-,-) hit, (+,0) miss */
    cr_assert(m.has_dir);
    cr_assert_float_eq(m.dir_acc, 0.5, 1e-12);
    /* the kernel's sums give the same standardised figures */
    struct md_metrics_acc k;
    md_metrics_acc_init(&k);
    float sums[3] = {4, 6, 2};
    md_metrics_acc_add_sums(&k, sums, 4, 1);
    struct md_metrics km;
    md_metrics_result(&k, &km);
    cr_assert(km.mse == m.mse && km.mae == m.mae && km.dir_acc == m.dir_acc && !km.has_orig);
}

Test(data_csv, naive_baseline_matches_csv_series)
{
    struct md_data_opts o = csv_opts(SAMPLE);
    struct md_data *d = open_ok(&o, NULL);
    md_csv_opts co;
    md_csv_opts_default(&co);
    md_csv_series *cs = NULL;
    cr_assert_eq(md_csv_series_load(SAMPLE, &co, &cs), MD_OK);
    for (int s = 0; s < 3; s++) {
        struct md_metrics m;
        cr_assert_eq(md_metrics_naive(d, (md_split)s, &m), MD_OK, "%s", md_errmsg());
        double mse, mae, mse_o, mae_o;
        md_csv_series_naive(cs, s, 0, &mse, &mae);
        md_csv_series_naive(cs, s, 1, &mse_o, &mae_o);
        cr_assert(fabs(m.mse - mse) <= 1e-9 * mse && fabs(m.mae - mae) <= 1e-9 * mae, "split %d: %g %g vs %g %g", s,
                  m.mse, m.mae, mse, mae);
        cr_assert(fabs(m.mse_orig - mse_o) <= 1e-6 * mse_o && fabs(m.mae_orig - mae_o) <= 1e-6 * mae_o,
                  "split %d original units: %g %g vs %g %g", s, m.mse_orig, m.mae_orig, mse_o, mae_o);
        cr_assert(m.has_dir && m.dir_acc > 0 && m.dir_acc < 0.5, "split %d: %g", s, m.dir_acc); /* right only where nothing changed */
    }
    md_csv_series_free(cs);
    md_data_free(d);
}

static int have_shared(void) { return access(SHARED "/exchange_rate.csv", R_OK) == 0; }

Test(data_csv, naive_baseline_on_the_real_files, .timeout = 60)
{
    if (!have_shared()) cr_skip("no " SHARED " beside the checkout");
    static const struct { const char *file; double mse, mae; } want[] = {
        {SHARED "/exchange_rate.csv", 0.0811, 0.1964},
        {SHARED "/ETTh2.csv", 0.4317, 0.4216},
    };
    for (int f = 0; f < 2; f++) {
        struct md_data_opts o = csv_opts(want[f].file);
        struct md_data *d = open_ok(&o, NULL);
        struct md_metrics m;
        cr_assert_eq(md_metrics_naive(d, MD_SPLIT_TEST, &m), MD_OK);
        cr_assert(fabs(m.mse - want[f].mse) < 5e-5 && fabs(m.mae - want[f].mae) < 5e-5, "%s: naive test %.5f / %.5f",
                  want[f].file, m.mse, m.mae);
        md_data_free(d);
    }
}
