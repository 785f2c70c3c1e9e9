/* test_bench_data.c - --benchmark-only needs no dataset: with --dataset auto
 * and an installed dataset that does not fit the model (classes or input
 * shape), the run benchmarks on synthetic data shaped for the model and
 * says why; data the user named is still checked. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "helpers.h"

/* 2 classes of 3 x 32 x 32: neither the bundled Fashion-MNIST sample (10
 * classes of 1 x 28 x 28) nor any other installed set fits it. */
static const char two_class_model[] =
    "{\"name\": \"two_class\", \"num_classes\": 2, \"inputs\": [{\"name\": \"image\", \"shape\": [3, 32, 32]}],\n"
    " \"layers\": [\n"
    "  {\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"stride\": 2, \"padding\": 1},\n"
    "  {\"name\": \"relu1\", \"type\": \"relu\"},\n"
    "  {\"name\": \"gap\", \"type\": \"global_avgpool\"},\n"
    "  {\"name\": \"flatten\", \"type\": \"flatten\"},\n"
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n";

Test(bench_data, benchmark_only_falls_back_to_synthetic_data)
{
    char *dir = th_tmpdir();
    char *model = th_write(dir, "two_class.json", two_class_model);
    char args[8192];
    snprintf(args, sizeof args,
             "--device cpu --threads 1 --model %s --dataset auto --benchmark-only --bench-iters 2 --warmup-iters 1 "
             "--batch-size 4 --num-workers 0",
             model);
    char *out, *err;
    cJSON *r = th_run_report(dir, args, 0, &out, &err);
    cr_assert(strstr(out, "synthetic") && strstr(out, "benchmarking needs no dataset"), "%s", out);
    cr_assert(strstr(err, "benchmarking needs no dataset"), "no warning on stderr: %s", err);
    const cJSON *s = th_setting(r, "dataset");
    cr_assert(s, "no dataset setting");
    cr_assert_str_eq(cJSON_GetObjectItem(s, "value")->valuestring, "synthetic");
    const char *why = cJSON_GetObjectItem(s, "why")->valuestring;
    cr_assert(strstr(why, "2 outputs") && strstr(why, "classes"), "the reason names the mismatch: %s", why);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "data"), "dataset")->valuestring, "synthetic");
    const cJSON *b = cJSON_GetObjectItem(r, "benchmark");
    cr_assert(cJSON_IsObject(b), "no benchmark");
    cr_assert_str_eq(cJSON_GetObjectItem(b, "data_source")->valuestring, "synthetic");
    int warned = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(r, "warnings")) warned |= strstr(w->valuestring, "synthetic") != NULL;
    cr_assert(warned, "report.warnings does not say it");
    cJSON_Delete(r);
    free(out);
    free(err);
    free(model);
    th_tmpdir_free(dir);
}

/* A dataset the user named, and a run that trains, still need data that fits. */
Test(bench_data, named_dataset_or_training_still_fails)
{
    char *dir = th_tmpdir();
    char *model = th_write(dir, "two_class.json", two_class_model);
    char args[8192];
    char *out, *err;
    snprintf(args, sizeof args, "--device cpu --model %s --dataset fashion-mnist --benchmark-only --bench-iters 1", model);
    int rc = th_run(args, &out, &err);
    cr_assert_eq(rc, 3, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "2 outputs"), "%s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args, "--device cpu --model %s --epochs 1 --steps 1", model);
    rc = th_run(args, &out, &err);
    cr_assert_eq(rc, 3, "exit %d: %s", rc, err);
    free(out);
    free(err);
    free(model);
    th_tmpdir_free(dir);
}
