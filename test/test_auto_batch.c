/* test_auto_batch.c - --auto-batch halves and retries on any out-of-memory
 * before or during the first step (activation arena, diagnostics scratch,
 * optimizer state, the pipelined step's buffers), down to batch 1, and the
 * report lists what was tried. Out-of-memory is injected with
 * MPSDIAG_TEST_ALLOC_FAIL (the device's allocator refusing, as a full GPU
 * would). CPU device, synthetic data, a tiny model. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/log.h"
#include "core/signals.h"
#include "nn/model.h"
#include "train/trainer.h"
#include "helpers.h"
#include "helpers_job.h"

static const char tiny_model[] =
    "{\"name\": \"tiny\", \"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],\n"
    " \"layers\": [\n"
    "  {\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"padding\": 1, \"bias\": false},\n"
    "  {\"name\": \"bn1\", \"type\": \"batchnorm\"}, {\"name\": \"relu1\", \"type\": \"relu\"},\n"
    "  {\"name\": \"pool1\", \"type\": \"maxpool\", \"kernel\": 4},\n"
    "  {\"name\": \"flatten\", \"type\": \"flatten\"},\n"
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n";

static const cJSON *path_get(const cJSON *o, const char *a, const char *b)
{
    o = cJSON_GetObjectItemCaseSensitive(o, a);
    return b ? cJSON_GetObjectItemCaseSensitive(o, b) : o;
}

/* report.training.auto_batch.tried as "32:no:<what>,16:yes" for the asserts. */
static void tried_summary(const cJSON *training, char *buf, size_t n)
{
    const cJSON *tried = path_get(path_get(training, "auto_batch", NULL), "tried", NULL);
    cr_assert(cJSON_IsArray(tried), "no training.auto_batch.tried");
    size_t o = 0;
    buf[0] = '\0';
    const cJSON *t;
    cJSON_ArrayForEach(t, tried)
    {
        int fits = cJSON_IsTrue(cJSON_GetObjectItem(t, "fits"));
        const cJSON *e = cJSON_GetObjectItem(t, "error");
        cr_assert(fits ? cJSON_IsNull(e) : cJSON_IsString(e), "error is the message of a failed try, else null");
        o += (size_t)snprintf(buf + o, n - o, "%s%d:%s", o ? "," : "", cJSON_GetObjectItem(t, "batch_size")->valueint,
                              fits ? "yes" : "no");
    }
}

/* ---- from the binary ------------------------------------------------------ */

static int run_bin(const char *dir, const char *extra, cJSON **report, char **out, char **err)
{
    char *m = th_write(dir, "tiny.json", tiny_model);
    char args[8192], rp[4200];
    snprintf(rp, sizeof rp, "%s/r.json", dir);
    snprintf(args, sizeof args,
             "--device cpu --threads 1 --dataset synthetic --model %s --max-samples 128 --epochs 1 --steps 2 "
             "--batch-size 32 --num-workers 0 --checkpoint-dir %s/ck --report %s %s",
             m, dir, rp, extra);
    free(m);
    int rc = th_run(args, out, err);
    cr_assert_eq(md_json_load_file(rp, report), MD_OK, "no report: %s", md_errmsg());
    return rc;
}

/* Before, only the activation arena was retried: the optimizer state's
 * out-of-memory ended the run with exit 5. */
Test(auto_batch, optimizer_state_oom_halves_and_retries, .timeout = 60)
{
    char *dir = th_tmpdir();
    setenv("MPSDIAG_TEST_ALLOC_FAIL", "optimizer state:1", 1);
    cJSON *r = NULL;
    char *out, *err;
    int rc = run_bin(dir, "--auto-batch", &r, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    const cJSON *tr = path_get(r, "training", NULL);
    cr_assert_eq(path_get(tr, "batch_size", NULL)->valueint, 16);
    char s[256];
    tried_summary(tr, s, sizeof s);
    cr_assert_str_eq(s, "32:no,16:yes");
    const cJSON *first = cJSON_GetArrayItem(path_get(path_get(tr, "auto_batch", NULL), "tried", NULL), 0);
    cr_assert(strstr(cJSON_GetObjectItem(first, "error")->valuestring, "optimizer state"), "%s",
              cJSON_GetObjectItem(first, "error")->valuestring);
    cr_assert(strstr(out, "auto-batch") && strstr(out, "32") && strstr(out, "16"), "the text lists the tries: %s", out);
    cJSON_Delete(r);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

/* Out of memory at every batch: down to 1, then the error, with every try in
 * the report. */
Test(auto_batch, oom_at_every_batch_stops_at_one_and_lists_the_tries, .timeout = 60)
{
    char *dir = th_tmpdir();
    setenv("MPSDIAG_TEST_ALLOC_FAIL", "diagnostics scratch", 1);
    cJSON *r = NULL;
    char *out, *err;
    int rc = run_bin(dir, "--auto-batch", &r, &out, &err);
    cr_assert_eq(rc, 5, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "diagnostics scratch") && strstr(err, "batch 1"), "%s", err);
    char s[256];
    tried_summary(path_get(r, "training", NULL), s, sizeof s);
    cr_assert_str_eq(s, "32:no,16:no,8:no,4:no,2:no,1:no");
    cJSON_Delete(r);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

/* Without --auto-batch nothing changes: the first out-of-memory ends it. */
Test(auto_batch, without_the_flag_oom_ends_the_run, .timeout = 60)
{
    char *dir = th_tmpdir();
    setenv("MPSDIAG_TEST_ALLOC_FAIL", "optimizer state:1", 1);
    cJSON *r = NULL;
    char *out, *err;
    int rc = run_bin(dir, "", &r, &out, &err);
    cr_assert_eq(rc, 5, "exit %d: %s", rc, err);
    cr_assert_null(path_get(path_get(r, "training", NULL), "auto_batch", NULL));
    cJSON_Delete(r);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

/* ---- in this process: out-of-memory in the run's first step ------------------ */

struct run_out {
    md_status st;
    float *params; /* final flat parameters (malloc) */
    size_t n;
    cJSON *training;
};

/* options -> policy -> model -> data -> trainer, as md_job_run does, with
 * the steps pipelined (the test hook), whose buffers are allocated when the
 * run starts. */
static struct run_out run_job(const char *dir, const char *extra)
{
    char *m = th_write(dir, "tiny.json", tiny_model);
    char args[4096];
    snprintf(args, sizeof args,
             "--device cpu --threads 1 --dataset synthetic --model %s --max-samples 128 --epochs 1 "
             "--steps 3 --num-workers 0 --seed 5 --checkpoint-dir %s/ck --quiet %s",
             m, dir, extra);
    free(m);
    struct th_job j;
    th_job_run(&j, args, 0, 1);
    struct run_out r = {.st = j.st, .training = j.training};
    j.training = NULL;
    if (j.st == MD_OK) {
        r.n = md_model_nparams(j.job.model);
        r.params = th_download_flat(j.job.model, md_model_params(j.job.model));
    }
    th_job_end(&j);
    return r;
}

/* The second input buffer of pipelined steps is allocated when the run
 * starts; refused once, the run goes on at half the batch and ends where a
 * run started at that batch ends, weight for weight. */
Test(auto_batch, oom_when_the_steps_start_retries_from_scratch, .timeout = 120)
{
    char *dir = th_tmpdir();
    setenv("MPSDIAG_TEST_ALLOC_FAIL", "second buffer:1", 1);
    struct run_out a = run_job(dir, "--batch-size 32 --auto-batch");
    cr_assert_eq(a.st, MD_OK, "%s", md_errmsg());
    cr_assert_eq(path_get(a.training, "batch_size", NULL)->valueint, 16);
    char s[256];
    tried_summary(a.training, s, sizeof s);
    cr_assert_str_eq(s, "32:no,16:yes");
    cr_assert_eq(path_get(a.training, "global_step", NULL)->valueint, 3);

    unsetenv("MPSDIAG_TEST_ALLOC_FAIL");
    struct run_out b = run_job(dir, "--batch-size 16 --overwrite");
    cr_assert_eq(b.st, MD_OK, "%s", md_errmsg());
    cr_assert_eq(a.n, b.n);
    cr_assert(memcmp(a.params, b.params, a.n * sizeof(float)) == 0, "weights differ from a run at batch 16");
    free(a.params);
    free(b.params);
    cJSON_Delete(a.training);
    cJSON_Delete(b.training);
    th_tmpdir_free(dir);
}
