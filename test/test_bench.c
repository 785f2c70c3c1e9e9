/* test_bench.c - statistics, and the benchmark through the built binary on
 * the CPU: report keys and sane numbers, sweeps, the finder, ablations, --ci
 * thresholds (exit 7) and the JUnit file. Small model, few iterations. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/timer.h"
#include "helpers.h"

Test(bench, stats_and_percentiles)
{
    /* numpy: np.percentile([1..10], [50, 95, 99]) = 5.5, 9.55, 9.91 */
    double v[10] = {7, 3, 10, 1, 5, 9, 2, 8, 6, 4};
    md_stats s = md_stats_of(v, 10);
    cr_assert_eq(s.n, 10);
    cr_assert_float_eq(s.mean, 5.5, 1e-12);
    cr_assert_float_eq(s.p50, 5.5, 1e-12);
    cr_assert_float_eq(s.p95, 9.55, 1e-12);
    cr_assert_float_eq(s.p99, 9.91, 1e-12);
    cr_assert_float_eq(s.min, 1, 0);
    cr_assert_float_eq(s.max, 10, 0);
    cr_assert_float_eq(s.stddev, sqrt(82.5 / 9.0), 1e-12, "sample standard deviation (n - 1)");
    cr_assert_eq(v[0], 7, "input untouched");
    md_stats one = md_stats_of(v, 1);
    cr_assert_float_eq(one.p99, 7, 0);
    cr_assert_float_eq(one.stddev, 0, 0);
}

/* The item at a dotted path, or NULL. */
static const cJSON *item_at(const cJSON *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *it = o;
    for (char *k = strtok(buf, "."); k && it; k = strtok(NULL, ".")) it = cJSON_GetObjectItemCaseSensitive(it, k);
    return it;
}

static double num_at(const cJSON *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *it = o;
    for (char *k = strtok(buf, "."); k; k = strtok(NULL, ".")) {
        it = cJSON_GetObjectItemCaseSensitive(it, k);
        cr_assert_not_null(it, "report lacks %s (at '%s')", path, k);
    }
    cr_assert(cJSON_IsNumber(it), "%s is not a number", path);
    return it->valuedouble;
}

static void positive(const cJSON *r, const char *path)
{
    double v = num_at(r, path);
    cr_assert(isfinite(v) && v > 0, "%s = %g: not a positive finite number", path, v);
}

#define ARGS "--device cpu --dataset synthetic --model small_cnn --threads 2 --bench-iters 3 --warmup-iters 1 --quiet"

Test(bench, benchmark_only_report_keys_and_numbers)
{
    char *dir = th_tmpdir();
    char args[2048], html[1100];
    snprintf(html, sizeof html, "%s/r.html", dir);
    snprintf(args, sizeof args, ARGS " --benchmark-only --batch-size 8 --batch-sweep 4,8 --ablate channels-last,workers --html %s",
             html);
    char *out, *err;
    cJSON *r = th_run_report(dir, args, 0, &out, &err);
    static const char *const pos[] = {
        "benchmark.batch_size", "benchmark.warmup.plan_s", "benchmark.warmup.first_step_ms",
        "benchmark.inference.latency_ms.mean", "benchmark.inference.latency_ms.p50",
        "benchmark.inference.latency_ms.p99", "benchmark.inference.per_sample_ms.p95",
        "benchmark.inference.samples_per_s", "benchmark.training.step_ms.mean", "benchmark.training.step_ms.p95",
        "benchmark.training.samples_per_s", "benchmark.training.split_ms.forward",
        "benchmark.training.split_ms.backward", "benchmark.training.flops_per_sample",
        "benchmark.training.achieved_gflops", "benchmark.training.peak_gflops",
        "benchmark.training.final_loss", "benchmark.peak.gflops", "benchmark.memory.params_bytes",
        "benchmark.memory.activations_bytes", "benchmark.memory.device_peak_bytes",
        "benchmark.memory.host_peak_rss_bytes", "benchmark.data.loader_samples_per_s",
        "benchmark.data.step_samples_per_s", "memory.device_peak_bytes",
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++) positive(r, pos[i]);
    /* ordered statistics and consistent units */
    cr_assert_leq(num_at(r, "benchmark.inference.latency_ms.min"), num_at(r, "benchmark.inference.latency_ms.p50"));
    cr_assert_leq(num_at(r, "benchmark.inference.latency_ms.p50"), num_at(r, "benchmark.inference.latency_ms.p99"));
    cr_assert_leq(num_at(r, "benchmark.inference.latency_ms.p99"), num_at(r, "benchmark.inference.latency_ms.max"));
    cr_assert_float_eq(num_at(r, "benchmark.inference.per_sample_ms.mean") * 8,
                       num_at(r, "benchmark.inference.latency_ms.mean"), 1e-9);
    double sps = num_at(r, "benchmark.training.samples_per_s"), step = num_at(r, "benchmark.training.step_ms.mean");
    cr_assert_float_eq(sps, 8 / (step / 1e3), sps * 1e-6, "samples/s = batch / mean step");
    /* null when nothing measured bounds the achieved rate (a peak measured
     * while other work loaded the machine): then no basis is named either */
    const cJSON *frac = item_at(r, "benchmark.training.fraction_of_peak");
    cr_assert(cJSON_IsNumber(frac) || cJSON_IsNull(frac), "fraction_of_peak is a number or null");
    if (cJSON_IsNumber(frac)) {
        cr_assert_gt(frac->valuedouble, 0);
        cr_assert_leq(frac->valuedouble, 1.0, "an impossible ratio was written");
    } else {
        cr_assert(cJSON_IsNull(item_at(r, "benchmark.training.peak_basis")), "no basis without a ratio");
    }
    cr_assert_eq(num_at(r, "benchmark.training.iters"), 3);
    /* per-measurement peaks do not hide the run's overall peak */
    cr_assert_geq(num_at(r, "memory.device_peak_bytes"), num_at(r, "benchmark.memory.device_peak_bytes"));
    cr_assert_geq(num_at(r, "benchmark.memory.device_peak_bytes"),
                  num_at(r, "benchmark.memory.params_bytes") + num_at(r, "benchmark.memory.activations_bytes"),
                  "the measured peak holds at least the parameters and the activations");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "benchmark"), "inference"), "samples_ms")), 3);
    /* sweep and ablations */
    const cJSON *sweep = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "benchmark"), "sweep");
    cr_assert_eq(cJSON_GetArraySize(sweep), 2);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(sweep, 1), "status")->valuestring, "ok");
    cr_assert_gt(cJSON_GetObjectItem(cJSON_GetArrayItem(sweep, 1), "samples_per_s")->valuedouble, 0);
    const cJSON *abl = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "benchmark"), "ablations");
    cr_assert_eq(cJSON_GetArraySize(abl), 2);
    cr_assert_gt(cJSON_GetObjectItem(cJSON_GetArrayItem(abl, 0), "speedup")->valuedouble, 0);
    /* recommendations carry their figure; warnings is an array */
    const cJSON *recs = cJSON_GetObjectItem(r, "recommendations");
    cr_assert(cJSON_IsArray(recs) && cJSON_GetArraySize(recs) > 0);
    const cJSON *e;
    cJSON_ArrayForEach(e, recs)
    {
        cr_assert(cJSON_IsString(cJSON_GetObjectItem(e, "topic")));
        cr_assert(cJSON_IsString(cJSON_GetObjectItem(e, "advice")));
        cr_assert(cJSON_IsString(cJSON_GetObjectItem(e, "figure")), "a recommendation without its figure");
    }
    cr_assert(cJSON_IsArray(cJSON_GetObjectItem(r, "warnings")));
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "status"), "result")->valuestring, "ok");
    cJSON_Delete(r);
    free(out);
    free(err);
    /* the HTML was written from the same report */
    snprintf(args, sizeof args, "grep -c '<svg' %s > /dev/null && ! grep -q 'https\\?://' %s", html, html);
    cr_assert_eq(system(args), 0, "HTML missing or not self-contained");
    th_tmpdir_free(dir);
}

Test(bench, find_batch_size_under_a_memory_cap)
{
    char *dir = th_tmpdir();
    /* 0.0004 of the RAM is a few MiB: small_cnn fits a batch of about ten */
    cJSON *r = th_run_report(dir, ARGS " --benchmark-only --find-batch-size --memory-fraction 0.0004", 0, NULL, NULL);
    double fit = num_at(r, "benchmark.find_batch_size.max_batch");
    cr_assert_gt(fit, 0);
    cr_assert_lt(fit, 128, "the cap must stop the search (got %g)", fit);
    cr_assert_eq(num_at(r, "benchmark.batch_size"), fit, "benchmarked at the largest fit");
    /* the search tried fit + 1 and it failed */
    const cJSON *tried = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "benchmark"), "find_batch_size"), "tried");
    int saw_fail_above = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tried)
    {
        int b = cJSON_GetObjectItem(t, "batch_size")->valueint;
        int fits = cJSON_IsTrue(cJSON_GetObjectItem(t, "fits"));
        cr_assert(fits == (b <= fit), "batch %d: fits=%d but max is %g", b, fits, fit);
        saw_fail_above |= b == (int)fit + 1 && !fits;
    }
    cr_assert(saw_fail_above, "binary search should end on max+1 failing");
    cJSON_Delete(r);
    th_tmpdir_free(dir);
}

Test(bench, ci_threshold_miss_exits_7_with_junit)
{
    char *dir = th_tmpdir();
    char args[2048], junit[1100];
    snprintf(junit, sizeof junit, "%s/ci.xml", dir);
    snprintf(args, sizeof args,
             "--device cpu --threads 2 --ci --benchmark-only --batch-size 8 --expect-max-loss 0.0001 "
             "--expect-min-throughput 0.001 --junit %s",
             junit);
    char *out, *err;
    cJSON *r = th_run_report(dir, args, 7, &out, &err);
    cr_assert_not_null(strstr(err, "mpsdiag: --ci: final loss"), "%s", err);
    cr_assert_not_null(strstr(err, "is above --expect-max-loss 0.0001"), "%s", err);
    cr_assert_null(strstr(err, "throughput"), "the throughput threshold was met: %s", err);
    char *x = th_slurp(junit, NULL);
    cr_assert_not_null(x, "no JUnit file");
    cr_assert_not_null(strstr(x, "tests=\"3\" failures=\"1\" errors=\"0\""), "%s", x);
    cr_assert_not_null(strstr(x, "<testcase classname=\"mpsdiag\" name=\"loss\""), "%s", x);
    cr_assert_not_null(strstr(x, "<failure message=\"final loss"), "%s", x);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "status"), "result")->valuestring, "threshold");
    cr_assert_eq(num_at(r, "status.exit_code"), 7);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "ci"), "loss"), "passed")));
    cJSON_Delete(r);
    free(out);
    free(err);

    /* thresholds met: exit 0, no failures */
    snprintf(args, sizeof args,
             "--device cpu --threads 2 --ci --benchmark-only --batch-size 8 --expect-max-loss 100 --junit %s --quiet",
             junit);
    int rc = th_run(args, NULL, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    free(x);
    x = th_slurp(junit, NULL);
    cr_assert_not_null(x, "no JUnit file");
    cr_assert_not_null(strstr(x, "failures=\"0\" errors=\"0\" skipped=\"1\""), "throughput skipped: %s", x);
    free(x);
    free(err);
    th_tmpdir_free(dir);
}

Test(bench, inline_model_of_the_run_config)
{
    char *dir = th_tmpdir();
    char *cfg = th_write(dir, "run.json",
                         "{\"device\": \"cpu\", \"model\": {\"name\": \"tiny\", \"num_classes\": 10,"
                         " \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],"
                         " \"layers\": [{\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"padding\": 1},"
                         " {\"name\": \"relu1\", \"type\": \"relu\"}, {\"name\": \"gap\", \"type\": \"global_avgpool\"},"
                         " {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}}");
    char args[2400];
    snprintf(args, sizeof args, "--config %s --dataset synthetic --benchmark-only --batch-size 16 --bench-iters 3 "
             "--warmup-iters 1 --quiet", cfg);
    cJSON *r = th_run_report(dir, args, 0, NULL, NULL);
    const cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "benchmark"), "model");
    cr_assert(cJSON_IsString(m) && strstr(m->valuestring, "run.json: model"), "benchmarked the inline model");
    positive(r, "benchmark.training.samples_per_s");
    /* 4 filters and a 4 x 10 classifier: parameters far below small_cnn's */
    cr_assert_lt(num_at(r, "benchmark.memory.params_bytes"), 4096);
    cJSON_Delete(r);
    free(cfg);
    th_tmpdir_free(dir);
}

/* The fusions made when the model is bound to the device (the CPU folds each
 * 2x2 max pool into the batch norm + ReLU before it) show in the layer table
 * and in report["model"] as they run, and not with compile off. */
Test(bench, device_fusions_in_the_model_summary)
{
    char *dir = th_tmpdir();
    for (int nc = 0; nc < 2; nc++) {
        char args[2048];
        snprintf(args, sizeof args,
                 "--device cpu --dataset synthetic --model small_cnn --threads 2 --bench-iters 1 --warmup-iters 1 "
                 "--benchmark-only --batch-size 4%s",
                 nc ? " --no-compile" : "");
        char *out = NULL;
        cJSON *r = th_run_report(dir, args, 0, &out, NULL);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "model");
        cr_assert_eq(num_at(m, "fused"), nc ? 0 : 4, "relu1, pool1, relu2, pool2 fused with compile on");
        int pools = 0;
        const cJSON *L;
        cJSON_ArrayForEach(L, cJSON_GetObjectItemCaseSensitive(m, "layers"))
        {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(L, "type");
            if (!cJSON_IsString(t) || strcmp(t->valuestring, "maxpool") != 0) continue;
            pools++;
            cr_assert_eq(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(L, "fused")), !nc, "pool fused: %s",
                         nc ? "with --no-compile" : "compile on");
        }
        cr_assert_eq(pools, 2);
        /* the table's columns stay aligned around the longest type */
        const char *row = strstr(out, "  bn1 ");
        cr_assert_not_null(row, "no bn1 row in: %s", out);
        const char *hdr = strstr(out, "  layer ");
        cr_assert_not_null(hdr);
        const char *sh = strstr(hdr, "output"), *rs = strstr(row, nc ? "32x28x28" : "32x14x14");
        cr_assert(sh && rs, "%s", out);
        cr_assert_eq(sh - hdr, rs - row, "the output column moved: %.*s", (int)(strchr(row, '\n') - row), row);
        if (!nc) cr_assert(strstr(row, "batchnorm+relu+maxpool"), "%.*s", (int)(strchr(row, '\n') - row), row);
        cJSON_Delete(r);
        free(out);
    }
    th_tmpdir_free(dir);
}
