/* test_fallback.c - the CPU fallback: MPSDIAG_ENABLE_FALLBACK and
 * --fallback decide it in one place (the Settings row says which), and the
 * ops that fell back are counted per op in the text and the JSON report.
 * The device is a test "metal" made of the CPU backend without its pooling
 * kernels (unified memory, as Metal), so the fallback really runs. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "app/job.h"
#include "core/json.h"
#include "core/log.h"
#include "helpers.h"
#include "helpers_job.h"

static struct md_backend_ops no_pool_ops;

static void use_metal_without_pooling(void)
{
    no_pool_ops = *md_cpu_backend_ops();
    no_pool_ops.name = "metal";
    no_pool_ops.kernels.pool2d_fwd = NULL;
    no_pool_ops.kernels.pool2d_bwd = NULL;
    md_backend_set_test_ops("metal", &no_pool_ops);
}

static const char pool_model[] =
    "{\"name\": \"pooled\", \"num_classes\": 4, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 16, 16]}],\n"
    " \"layers\": [\n"
    "  {\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"padding\": 1},\n"
    "  {\"name\": \"relu1\", \"type\": \"relu\"},\n"
    "  {\"name\": \"pool1\", \"type\": \"maxpool\", \"kernel\": 2},\n"
    "  {\"name\": \"flatten\", \"type\": \"flatten\"},\n"
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n";

/* Runs `mpsdiag ARGS --model <pool_model> --report <tmp>` in this process on
 * the test "metal", with stdout captured. */
static struct th_main_run run_job(const char *extra)
{
    char *dir = th_tmpdir();
    char *model = th_write(dir, "pooled.json", pool_model);
    char args[8192];
    snprintf(args, sizeof args,
             "--device metal --model %s --dataset synthetic --max-samples 64 --batch-size 16 --steps 2 "
             "--num-workers 0 --checkpoint-dir %s/ck %s",
             model, dir, extra);
    struct th_main_run r = th_job_main(dir, args);
    free(model);
    th_tmpdir_free(dir);
    return r;
}

static double op_count(const cJSON *report, const char *op)
{
    const cJSON *fb = cJSON_GetObjectItem(report, "fallback");
    cr_assert(cJSON_IsObject(fb), "report has no fallback object");
    const cJSON *n = cJSON_GetObjectItem(cJSON_GetObjectItem(fb, "ops"), op);
    return cJSON_IsNumber(n) ? n->valuedouble : -1;
}

/* Before, the variable was read only when the device opened: the run fell
 * back, but Settings said "fallback off", and nothing counted the ops. */
Test(fallback, environment_variable_turns_it_on_and_ops_are_counted)
{
    use_metal_without_pooling();
    setenv("MPSDIAG_ENABLE_FALLBACK", "1", 1);
    struct th_main_run r = run_job("");
    cr_assert_eq(r.st, MD_OK, "%s", md_errmsg());
    const cJSON *s = th_setting(r.report, "fallback");
    cr_assert(s, "no fallback setting");
    cr_assert_str_eq(cJSON_GetObjectItem(s, "value")->valuestring, "on");
    cr_assert(strstr(cJSON_GetObjectItem(s, "why")->valuestring, "MPSDIAG_ENABLE_FALLBACK=1"), "%s",
              cJSON_GetObjectItem(s, "why")->valuestring);
    cr_assert(strstr(r.text, "fallback") && strstr(r.text, "on "), "%s", r.text);

    /* 2 training steps + validation + test: pooling forward every time, backward per step */
    cr_assert_geq(op_count(r.report, "pool2d_fwd"), 2);
    cr_assert_geq(op_count(r.report, "pool2d_bwd"), 2);
    cr_assert_eq(op_count(r.report, "conv2d_fwd"), -1, "only the ops that fell back are listed");
    const cJSON *fb = cJSON_GetObjectItem(r.report, "fallback");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(fb, "enabled")));
    cr_assert_eq(cJSON_GetObjectItem(fb, "total_calls")->valuedouble,
                 op_count(r.report, "pool2d_fwd") + op_count(r.report, "pool2d_bwd"));
    cr_assert(strstr(r.text, "pool2d_fwd") && strstr(r.text, "pool2d_bwd") && strstr(r.text, "ran on the CPU"),
              "the text names no fallen-back op: %s", r.text);
    free(r.text);
    cJSON_Delete(r.report);
}

Test(fallback, flag_says_so_and_off_fails_naming_the_op)
{
    use_metal_without_pooling();
    unsetenv("MPSDIAG_ENABLE_FALLBACK");
    struct th_main_run r = run_job("--fallback");
    cr_assert_eq(r.st, MD_OK, "%s", md_errmsg());
    cr_assert(strstr(cJSON_GetObjectItem(th_setting(r.report, "fallback"), "why")->valuestring, "--fallback"));
    cr_assert_geq(op_count(r.report, "pool2d_fwd"), 2);
    free(r.text);
    cJSON_Delete(r.report);

    r = run_job("");
    cr_assert_eq(r.st, MD_ERR_UNSUPPORTED, "%s", md_errmsg());
    cr_assert(strstr(md_errmsg(), "pool2d_fwd") && strstr(md_errmsg(), "--fallback"), "%s", md_errmsg());
    const cJSON *fb = cJSON_GetObjectItem(r.report, "fallback");
    cr_assert(cJSON_IsObject(fb) && cJSON_IsFalse(cJSON_GetObjectItem(fb, "enabled")), "failure report lacks fallback");
    free(r.text);
    cJSON_Delete(r.report);
}

Test(fallback, bad_value_of_the_variable_is_a_usage_error)
{
    setenv("MPSDIAG_ENABLE_FALLBACK", "yes please", 1);
    char *out, *err;
    int rc = th_run("--device cpu --epochs 0", &out, &err);
    cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "MPSDIAG_ENABLE_FALLBACK") && strstr(err, "yes please"), "%s", err);
    free(out);
    free(err);
    setenv("MPSDIAG_ENABLE_FALLBACK", "0", 1);
    rc = th_run("--device cpu --epochs 0", &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(out, "fallback") && strstr(out, "off"), "%s", out);
    free(out);
    free(err);
}
