/* test_dist.c - data-parallel training over MPI on the CPU: two ranks give
 * the loss curve of one process with the same global batch and seed, a
 * killed or hung rank ends the job with a message (and leaves the last
 * checkpoint whole, resumable with another number of ranks), the loader's
 * shards make up the one-process batches, and the launcher's errors.
 * The mpirun runs are skipped, saying so, where mpirun is not on PATH or
 * mpsdiag was built without MPI. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/dist.h"
#include "core/safetensors.h"
#include "core/timer.h"
#include "data/data.h"
#include "data/metrics.h"
#include "helpers.h"
#include "json_schema.h"

/* conv + ReLU + pool + linear: no batch norm and no dropout, whose results
 * depend on how the batch is split */
static const char tiny_model[] =
    "{\"name\": \"tiny\", \"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],\n"
    " \"layers\": [\n"
    "  {\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"padding\": 1},\n"
    "  {\"name\": \"relu1\", \"type\": \"relu\"},\n"
    "  {\"name\": \"pool1\", \"type\": \"maxpool\", \"kernel\": 4},\n"
    "  {\"name\": \"flatten\", \"type\": \"flatten\"},\n"
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n";

/* Open MPI refuses root without the first two; the others let the
 * sanitizer build name Open MPI's own blocks at exit (its plug-ins stay
 * loaded, full stacks), which test/lsan.supp then leaves out */
#define MPIENV                                                                                               \
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mca_base_component_disable_dlclose=1 "   \
    "LSAN_OPTIONS=\"$LSAN_OPTIONS:fast_unwind_on_malloc=0\" "
/* --oversubscribe: 2 ranks on any machine. timeout: Open MPI's mpirun has
 * been seen to hang after its ranks ended (a signal during a loaded start);
 * the bound turns that into a failure instead of a stuck suite. timeout
 * passes a SIGINT on to mpirun and kills it 20 s later if it is still there. */
#define MPIRUN "timeout -k 20 50 mpirun -np 2 --oversubscribe --bind-to none "

static int have_mpirun(void)
{
    const char *path = getenv("PATH");
    char buf[4096];
    while (path && *path) {
        size_t len = strcspn(path, ":");
        snprintf(buf, sizeof buf, "%.*s/mpirun", (int)len, path);
        if (access(buf, X_OK) == 0) return 1;
        path += len;
        if (*path == ':') path++;
    }
    return 0;
}

#define NEED_MPI()                                                                                           \
    do {                                                                                                     \
        if (!md_dist_built()) cr_skip_test("mpsdiag was built without MPI (no Open MPI found at build time)");  \
        if (!have_mpirun()) cr_skip_test("mpirun is not on PATH (install openmpi-bin)");                       \
    } while (0)

/* Common flags (static buffer): the tiny model written into dir. */
static const char *base(const char *dir)
{
    static char b[2048];
    char *m = th_write(dir, "tiny.json", tiny_model);
    snprintf(b, sizeof b,
             "--device cpu --threads 1 --dataset synthetic --model %s --max-samples 256 --num-workers 0 --seed 7 "
             "--no-augment",
             m);
    free(m);
    return b;
}

static const cJSON *curve(const cJSON *report, const char *key)
{
    const cJSON *c = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(report, "training"), "curves"), key);
    cr_assert(cJSON_IsArray(c), "report.training.curves.%s", key);
    return c;
}

static void assert_same_curve(const cJSON *a, const cJSON *b, const char *key)
{
    const cJSON *x = curve(a, key), *y = curve(b, key);
    cr_assert_eq(cJSON_GetArraySize(x), cJSON_GetArraySize(y), "%s: epochs", key);
    for (int i = 0; i < cJSON_GetArraySize(x); i++) {
        double u = cJSON_GetArrayItem(x, i)->valuedouble, v = cJSON_GetArrayItem(y, i)->valuedouble;
        fprintf(stderr, "  %s[%d]: one process %.7f, two ranks %.7f\n", key, i, u, v);
        /* fp32 sums in another order: a few ulps per step, some 1e-6 after two epochs */
        cr_assert(fabs(u - v) <= 1e-4 * fabs(u) + 1e-6, "%s[%d]: %.8f vs %.8f", key, i, u, v);
    }
}

static void assert_same_fields_of(const cJSON *x, const cJSON *y, const char *what, const char *const *keys)
{
    cr_assert(cJSON_IsObject(x) && cJSON_IsObject(y), "%s", what);
    for (int i = 0; keys[i]; i++) {
        const cJSON *a = cJSON_GetObjectItem(x, keys[i]), *b = cJSON_GetObjectItem(y, keys[i]);
        cr_assert(cJSON_IsNumber(a) && cJSON_IsNumber(b), "%s.%s", what, keys[i]);
        double u = a->valuedouble, v = b->valuedouble;
        fprintf(stderr, "  %s.%s: one process %.7f, two ranks %.7f\n", what, keys[i], u, v);
        cr_assert(fabs(u - v) <= 1e-4 * fabs(u) + 1e-6, "%s.%s: %.8f vs %.8f", what, keys[i], u, v);
    }
}

/* report.training[key]'s numbers, one process against two ranks */
static void assert_same_fields(const cJSON *one, const cJSON *two, const char *key, const char *const *keys)
{
    assert_same_fields_of(th_obj(th_obj(one, "training"), key), th_obj(th_obj(two, "training"), key), key, keys);
}

/* Two ranks evaluated halves: each rank's samples, adding up to the split. */
static void assert_sharded(const cJSON *two, const cJSON *one)
{
    const cJSON *ev = th_obj(th_obj(th_obj(two, "training"), "distributed"), "evaluation");
    cr_assert_str_eq(th_obj(ev, "mode")->valuestring, "sharded");
    const cJSON *ts = th_obj(ev, "test_samples_per_rank");
    cr_assert_eq(cJSON_GetArraySize(ts), 2);
    long long n0 = (long long)cJSON_GetArrayItem(ts, 0)->valuedouble, n1 = (long long)cJSON_GetArrayItem(ts, 1)->valuedouble;
    cr_assert_eq(n0 + n1, (long long)th_obj(th_obj(th_obj(one, "training"), "test"), "samples")->valuedouble);
    cr_assert(n0 > 0 && n1 > 0 && llabs(n0 - n1) <= 16, "test samples per rank %lld, %lld", n0, n1);
    cr_assert_eq(cJSON_GetArraySize(th_obj(ev, "val_samples_per_rank")), 2);
}

Test(dist, two_ranks_match_one_process, .timeout = 60)
{
    NEED_MPI();
    char *dir = th_tmpdir();
    char cmd[4096], *out = NULL, *err = NULL;
    const char *b = base(dir);
    /* one process, batch 32 at lr 0.02; two ranks of 16 at --lr 0.01, which
     * the linear rule makes 0.02 */
    snprintf(cmd, sizeof cmd, "$B %s --epochs 2 --batch-size 32 --lr 0.02 --report %s/one.json --checkpoint-dir %s/c1",
             b, dir, dir);
    cr_assert_eq(th_sh(cmd, NULL, &err), 0, "%s", err);
    free(err);
    snprintf(cmd, sizeof cmd,
             MPIENV MPIRUN "$B %s --epochs 2 --batch-size 16 --lr 0.01 --report %s/two.json --checkpoint-dir %s/c2", b, dir,
             dir);
    double t0 = md_now();
    int rc = th_sh(cmd, &out, &err);
    fprintf(stderr, "  two ranks: %.1f s\n", md_now() - t0);
    cr_assert_eq(rc, 0, "%s\n%s", out, err);
    char p[4200];
    snprintf(p, sizeof p, "%s/one.json", dir);
    cJSON *one = th_load_json(p);
    snprintf(p, sizeof p, "%s/two.json", dir);
    cJSON *two = th_load_json(p);
    assert_same_curve(one, two, "train_loss");
    assert_same_curve(one, two, "val_loss");
    assert_same_curve(one, two, "train_acc");
    /* validation and test scored in shards, the sums added over the ranks */
    assert_same_curve(one, two, "val_acc");
    assert_same_fields(one, two, "test", (const char *[]){"loss", "acc", "samples", NULL});
    assert_sharded(two, one);
    /* the report: two ranks, the scaled rate, per-rank figures; valid */
    const cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(two, "training"), "distributed");
    cr_assert(cJSON_IsObject(d), "report.training.distributed");
    cr_assert_eq(cJSON_GetObjectItem(d, "ranks")->valueint, 2);
    cr_assert_eq(cJSON_GetObjectItem(d, "global_batch")->valueint, 32);
    cr_assert_str_eq(cJSON_GetObjectItem(d, "collectives")->valuestring, "mpi");
    cr_assert_float_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "lr_scaling"), "lr")->valuedouble, 0.02, 1e-12);
    const cJSON *ep = cJSON_GetArrayItem(cJSON_GetObjectItem(d, "epochs"), 1);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(ep, "per_rank")), 2);
    cr_assert_gt(cJSON_GetObjectItem(ep, "allreduce_calls")->valuedouble, 0);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(two, "tool"), "ranks")->valueint, 2);
    cJSON *schema = th_load_json("docs/schema/report.schema.json");
    char verr[600];
    cr_assert(th_schema_validate(schema, two, verr, sizeof verr), "%s", verr);
    cJSON_Delete(schema);
    /* rank 0 alone prints; the rule is printed */
    cr_assert_eq(th_count(out, "data parallel"), 1, "%s", out);
    cr_assert(strstr(out, "0.01 x 2 ranks = 0.02 (linear scaling rule"), "%s", out);
    cr_assert_eq(th_count(out, "Report written"), 1, "%s", out);
    cJSON_Delete(one);
    cJSON_Delete(two);
    free(out);
    free(err);
    /* a forecasting model: the regression metrics (MSE, MAE, per target)
     * and the forecasts of the test split come from every rank's shard */
    const char *fc = "--device cpu --threads 1 --model itransformer --seq-len 16 --pred-len 8 --d-model 16 --d-ff 16 "
                     "--e-layers 1 --n-heads 2 --steps 3 --epochs 2 --num-workers 0 --seed 7 --dropout 0 --quiet";
    snprintf(cmd, sizeof cmd, "$B %s --batch-size 32 --lr 0.002 --report %s/f1.json --checkpoint-dir %s/f1", fc, dir,
             dir);
    cr_assert_eq(th_sh(cmd, NULL, &err), 0, "%s", err);
    free(err);
    snprintf(cmd, sizeof cmd,
             MPIENV MPIRUN "$B %s --batch-size 16 --lr 0.001 --report %s/f2.json --checkpoint-dir %s/f2", fc, dir, dir);
    rc = th_sh(cmd, &out, &err);
    cr_assert_eq(rc, 0, "%s\n%s", out, err);
    snprintf(p, sizeof p, "%s/f1.json", dir);
    one = th_load_json(p);
    snprintf(p, sizeof p, "%s/f2.json", dir);
    two = th_load_json(p);
    assert_same_curve(one, two, "val_loss");
    assert_same_curve(one, two, "val_mse");
    assert_same_curve(one, two, "val_mae");
    assert_same_fields(one, two, "test",
                       (const char *[]){"loss", "mse", "mae", "rmse", "mse_original_units", "mae_original_units",
                                        "directional_accuracy", "samples", NULL});
    const cJSON *m1 = th_obj(th_obj(th_obj(one, "training"), "test"), "regression_metrics");
    const cJSON *m2 = th_obj(th_obj(th_obj(two, "training"), "test"), "regression_metrics");
    assert_same_fields_of(m1, m2, "regression_metrics", (const char *[]){"count", "r2", "mae", "rmse", NULL});
    const cJSON *f1 = th_obj(one, "training") ? cJSON_GetObjectItem(th_obj(one, "training"), "forecasts") : NULL;
    const cJSON *f2 = th_obj(two, "training") ? cJSON_GetObjectItem(th_obj(two, "training"), "forecasts") : NULL;
    cr_assert(cJSON_IsArray(f1) && cJSON_IsArray(f2), "training.forecasts");
    cr_assert_eq(cJSON_GetArraySize(f1), cJSON_GetArraySize(f2), "forecasts from both ranks' shards");
    for (int i = 0; i < cJSON_GetArraySize(f1); i++)
        cr_assert_eq(th_obj(cJSON_GetArrayItem(f1, i), "window")->valueint,
                     th_obj(cJSON_GetArrayItem(f2, i), "window")->valueint, "forecast %d", i);
    assert_sharded(two, one);
    cJSON_Delete(one);
    cJSON_Delete(two);
    free(out);
    free(err);
    th_rmtree(dir);
    free(dir);
}

/* --sync-bn: a model with batch norm, two ranks of 16 with synchronised
 * statistics give one process's curve at batch 32 (there --sync-bn is a
 * no-op, said so); without it the curve differs (the test can fail). */
static const char bn_model[] =
    "{\"name\": \"tiny_bn\", \"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],\n"
    " \"layers\": [\n"
    "  {\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"padding\": 1, \"bias\": false},\n"
    "  {\"name\": \"bn1\", \"type\": \"batchnorm\"},\n"
    "  {\"name\": \"relu1\", \"type\": \"relu\"},\n"
    "  {\"name\": \"pool1\", \"type\": \"maxpool\", \"kernel\": 4},\n"
    "  {\"name\": \"flatten\", \"type\": \"flatten\"},\n"
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n";

Test(dist, sync_bn_two_ranks_match_one_process, .timeout = 90)
{
    NEED_MPI();
    char *dir = th_tmpdir(), *m = th_write(dir, "tiny_bn.json", bn_model);
    char b[2048], cmd[4096], *out = NULL, *err = NULL, p[4200];
    snprintf(b, sizeof b,
             "--device cpu --threads 1 --dataset synthetic --model %s --max-samples 256 --num-workers 0 --seed 7 "
             "--no-augment --epochs 2",
             m);
    free(m);
    snprintf(cmd, sizeof cmd, "$B %s --batch-size 32 --lr 0.02 --sync-bn --report %s/one.json --checkpoint-dir %s/c1", b,
             dir, dir);
    cr_assert_eq(th_sh(cmd, NULL, &err), 0, "%s", err);
    cr_assert(strstr(err, "--sync-bn with one rank: nothing to synchronise"), "%s", err);
    free(err);
    for (int sync = 1; sync >= 0; sync--) {
        snprintf(cmd, sizeof cmd,
                 MPIENV MPIRUN "$B %s --batch-size 16 --lr 0.01 --report %s/two%d.json --checkpoint-dir %s/c2%d%s", b,
                 dir, sync, dir, sync, sync ? " --sync-bn" : "");
        int rc = th_sh(cmd, &out, &err);
        cr_assert_eq(rc, 0, "%s\n%s", out, err);
        if (sync) cr_assert(strstr(out, "synchronised: statistics of the global batch"), "%s", out);
        free(out);
        free(err);
    }
    snprintf(p, sizeof p, "%s/one.json", dir);
    cJSON *one = th_load_json(p);
    snprintf(p, sizeof p, "%s/two1.json", dir);
    cJSON *two = th_load_json(p);
    snprintf(p, sizeof p, "%s/two0.json", dir);
    cJSON *local = th_load_json(p);
    assert_same_curve(one, two, "train_loss");
    assert_same_curve(one, two, "val_loss"); /* the running statistics too (evaluation uses them) */
    const cJSON *x = curve(one, "train_loss"), *y = curve(local, "train_loss");
    double worst = 0;
    for (int i = 0; i < cJSON_GetArraySize(x); i++) {
        double u = cJSON_GetArrayItem(x, i)->valuedouble, v = cJSON_GetArrayItem(y, i)->valuedouble;
        if (fabs(u - v) / fabs(u) > worst) worst = fabs(u - v) / fabs(u);
    }
    fprintf(stderr, "  local batch norm: train_loss off by %.2g (relative)\n", worst);
    cr_assert_gt(worst, 1e-3, "two ranks with local batch norm gave one process's curve");
    const cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(two, "training"), "distributed");
    cr_assert_str_eq(cJSON_GetObjectItem(d, "batch_norm")->valuestring, "synchronised");
    d = cJSON_GetObjectItem(cJSON_GetObjectItem(local, "training"), "distributed");
    cr_assert_str_eq(cJSON_GetObjectItem(d, "batch_norm")->valuestring, "local");
    /* settings: on with two ranks, off (a no-op) with one */
    const cJSON *r[2] = {one, two};
    for (int k = 0; k < 2; k++) {
        const cJSON *e, *found = NULL;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(r[k], "settings"))
            if (strcmp(cJSON_GetObjectItem(e, "name")->valuestring, "sync_bn") == 0) found = e;
        cr_assert(found, "settings.sync_bn");
        cr_assert_str_eq(cJSON_GetObjectItem(found, "value")->valuestring, k ? "on" : "off");
    }
    cJSON *schema = th_load_json("docs/schema/report.schema.json");
    char verr[600];
    cr_assert(th_schema_validate(schema, two, verr, sizeof verr), "%s", verr);
    cJSON_Delete(schema);
    cJSON_Delete(one);
    cJSON_Delete(two);
    cJSON_Delete(local);
    th_rmtree(dir);
    free(dir);
}

/* MPSDIAG_DIST_GRAPH=1: pipelined steps with the all-reduce inside (on the
 * CPU not captured, the host all-reduce in order) give the same curve. */
Test(dist, pipelined_steps_with_the_all_reduce_inside_match, .timeout = 60)
{
    NEED_MPI();
    char *dir = th_tmpdir();
    char cmd[4096], *out = NULL, *err = NULL;
    const char *b = base(dir);
    snprintf(cmd, sizeof cmd, "$B %s --epochs 2 --batch-size 32 --lr 0.02 --report %s/one.json --checkpoint-dir %s/c1",
             b, dir, dir);
    cr_assert_eq(th_sh(cmd, NULL, &err), 0, "%s", err);
    free(err);
    snprintf(cmd, sizeof cmd,
             "MPSDIAG_DIST_GRAPH=1 " MPIENV MPIRUN
             "$B %s --epochs 2 --batch-size 16 --lr 0.01 --report %s/two.json --checkpoint-dir %s/c2",
             b, dir, dir);
    cr_assert_eq(th_sh(cmd, &out, &err), 0, "%s\n%s", out, err);
    char p[4200];
    snprintf(p, sizeof p, "%s/one.json", dir);
    cJSON *one = th_load_json(p);
    snprintf(p, sizeof p, "%s/two.json", dir);
    cJSON *two = th_load_json(p);
    const cJSON *ex = cJSON_GetObjectItem(cJSON_GetObjectItem(two, "training"), "step_execution");
    cr_assert_str_eq(cJSON_GetObjectItem(ex, "mode")->valuestring, "pipelined");
    cr_assert_gt(cJSON_GetObjectItem(ex, "pipelined_eager_steps")->valueint, 10);
    /* only the eager steps are timed; the efficiency charges their mean
     * wait to every step of the epoch */
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(two, "training"), "distributed"),
                                              "epochs"))
    {
        double steps = cJSON_GetObjectItem(e, "steps")->valuedouble;
        double calls = cJSON_GetObjectItem(e, "allreduce_calls")->valuedouble;
        double ex_ms = cJSON_GetObjectItem(e, "exposed_ms_per_step")->valuedouble;
        double loop = 0;
        const cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItem(e, "per_rank"))
        {
            double l = cJSON_GetObjectItem(r, "step_loop_s")->valuedouble;
            if (l > loop) loop = l;
        }
        cr_assert_gt(steps, calls, "every step timed: the check below would not tell");
        cr_assert_gt(ex_ms, 0);
        double want = 1.0 - ex_ms * 1e-3 * steps / loop;
        if (want < 0) want = 0;
        cr_assert_float_eq(cJSON_GetObjectItem(e, "scaling_efficiency")->valuedouble, want, 1e-6,
                           "epoch %d: efficiency %g, %g steps x %g ms exposed over %g s",
                           cJSON_GetObjectItem(e, "epoch")->valueint,
                           cJSON_GetObjectItem(e, "scaling_efficiency")->valuedouble, steps, ex_ms, loop);
    }
    cJSON *schema = th_load_json("docs/schema/report.schema.json");
    char verr[600];
    cr_assert(th_schema_validate(schema, two, verr, sizeof verr), "%s", verr);
    cJSON_Delete(schema);
    assert_same_curve(one, two, "train_loss");
    assert_same_curve(one, two, "val_loss");
    cJSON_Delete(one);
    cJSON_Delete(two);
    free(out);
    free(err);
    th_rmtree(dir);
    free(dir);
}

/* A rank killed in epoch 2 ends the job at once with mpirun's message; the
 * checkpoint of epoch 1 stays whole and resumes in one process. */
Test(dist, killed_rank_ends_the_job_and_keeps_the_checkpoint, .timeout = 60)
{
    NEED_MPI();
    char *dir = th_tmpdir();
    char cmd[4096], *out = NULL, *err = NULL;
    const char *b = base(dir);
    /* 8 steps per epoch: step 11 is in epoch 2 */
    snprintf(cmd, sizeof cmd,
             "MPSDIAG_TEST_DIST_FAULT=kill:1:11 " MPIENV "timeout 40 " MPIRUN
             "$B %s --epochs 3 --batch-size 16 --lr 0.01 --checkpoint-dir %s/ck --quiet",
             b, dir);
    double t0 = md_now();
    int rc = th_sh(cmd, &out, &err);
    double dt = md_now() - t0;
    fprintf(stderr, "  killed rank: exit %d after %.1f s\n", rc, dt);
    cr_assert_neq(rc, 0);
    cr_assert_neq(rc, 124, "the job hung until timeout(1) ended it");
    cr_assert(strstr(err, "rank 1") && strstr(err, "signal 9"), "the message names the dead rank: %s\n%s", err,
              out);
    char p[4200];
    snprintf(p, sizeof p, "%s/ck/last.safetensors", dir);
    struct stat sb;
    cr_assert_eq(stat(p, &sb), 0, "epoch 1's checkpoint is there");
    free(out);
    free(err);
    /* whole, and resumable in one process with the same global batch */
    snprintf(cmd, sizeof cmd,
             "$B %s --epochs 2 --batch-size 32 --lr 0.02 --checkpoint-dir %s/ck --resume %s --quiet", b, dir, p);
    rc = th_sh(cmd, &out, &err);
    cr_assert_eq(rc, 0, "%s\n%s", out, err);
    free(out);
    free(err);
    th_rmtree(dir);
    free(dir);
}

/* A rank that stops answering: the others give up after --dist-timeout. */
Test(dist, hung_rank_ends_the_job_within_the_timeout, .timeout = 60)
{
    NEED_MPI();
    char *dir = th_tmpdir();
    char cmd[4096], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd,
             "MPSDIAG_TEST_DIST_FAULT=hang:1:2 " MPIENV "timeout 40 " MPIRUN "$B %s --epochs 1 --batch-size 16 --quiet "
             "--dist-timeout 2 --checkpoint-dir %s/ck",
             base(dir), dir);
    double t0 = md_now();
    int rc = th_sh(cmd, &out, &err);
    double dt = md_now() - t0;
    fprintf(stderr, "  hung rank: exit %d after %.1f s\n", rc, dt);
    cr_assert_neq(rc, 0);
    cr_assert_neq(rc, 124, "the job hung until timeout(1) ended it");
    cr_assert_lt(dt, 30);
    cr_assert(strstr(err, "rank 0") && strstr(err, "waited 2 s for the other ranks in the gradient all-reduce") &&
                  strstr(err, "--dist-timeout"),
              "%s", err);
    free(out);
    free(err);
    th_rmtree(dir);
    free(dir);
}

/* Starts the shell line cmd ($B the binary) as its own session (setsid:
 * nothing that signals this test's process group reaches mpirun or its
 * ranks), stdout and stderr into *out / *err. When wait_file is given it
 * waits (up to 60 s) for that file, which shows training really runs, then
 * sends sig to that one process. The job gets `limit` seconds to end after
 * that; past them it is ended (SIGTERM, then SIGKILL 5 s later) and *hung
 * is set. Returns the exit code (128 + signal when killed). */
static int run_signalled(const char *cmd, const char *wait_file, int sig, double limit, char **out, char **err,
                         int *hung)
{
    char *dir = th_tmpdir();
    char po[4200], pe[4200];
    snprintf(po, sizeof po, "%s/out", dir);
    snprintf(pe, sizeof pe, "%s/err", dir);
    setenv("B", th_bin(), 1);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        setsid();
        int o = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        dup2(o, 1);
        dup2(e, 2);
        /* exec env VAR=... mpirun: the pid signalled below is mpirun's own */
        char *full = NULL;
        if (asprintf(&full, "exec env %s", cmd) < 0) _exit(127);
        execl("/bin/sh", "sh", "-c", full, (char *)NULL);
        _exit(127);
    }
    int status = 0, done = 0;
    *hung = 0;
    double t0 = md_now();
    struct stat sb;
    while (wait_file && stat(wait_file, &sb) != 0 && md_now() - t0 < 60 && !done) {
        done = waitpid(pid, &status, WNOHANG) == pid;
        usleep(50 * 1000);
    }
    if (!done) kill(pid, sig);
    double t1 = md_now();
    while (!done && md_now() - t1 < limit) {
        done = waitpid(pid, &status, WNOHANG) == pid;
        if (!done) usleep(50 * 1000);
    }
    if (!done) {
        *hung = 1;
        kill(pid, SIGTERM);
        for (double t2 = md_now(); !done && md_now() - t2 < 5; usleep(50 * 1000))
            done = waitpid(pid, &status, WNOHANG) == pid;
        if (!done) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
    }
    *out = th_slurp(po, NULL);
    *err = th_slurp(pe, NULL);
    if (!*out) *out = strdup("");
    if (!*err) *err = strdup("");
    th_rmtree(dir);
    free(dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Starts `launch $B flags` (mpirun, or the launcher) on a long training run, sends
 * `sig` once the first checkpoint is there, and expects a clean stop: rank 0
 * alone says so, exit 130, a whole checkpoint. */
static void expect_clean_stop(const char *launch, const char *flags, int sig, const char *who)
{
    NEED_MPI();
    char *dir = th_tmpdir();
    char cmd[4096], *out = NULL, *err = NULL;
    const char *b = base(dir);
    snprintf(cmd, sizeof cmd,
             MPIENV "%s $B %s %s --epochs 100000 --steps 4 --batch-size 16 --checkpoint-dir %s/ck --quiet", launch, flags,
             b, dir);
    char p[4200];
    snprintf(p, sizeof p, "%s/ck/last.safetensors", dir);
    int hung = 0;
    double t0 = md_now();
    int rc = run_signalled(cmd, p, sig, 40, &out, &err, &hung);
    fprintf(stderr, "  %s: exit %d after %.1f s\n", who, rc, md_now() - t0);
    cr_assert(!hung, "%s still ran 40 s after the signal: %s", who, err);
    cr_assert_eq(th_count(err, "mpsdiag: interrupted"), 1, "rank 0 alone says so (exit %d): %s\n%s", rc, err, out);
    cr_assert_eq(rc, 130, "%s\n%s", out, err);
    cr_assert(strstr(err, "checkpoint") && strstr(err, "continue with --resume"), "%s", err);
    free(out);
    free(err);
    md_st_file *f = NULL;
    cr_assert_eq(md_st_open(p, &f), MD_OK, "a whole checkpoint: %s", md_errmsg());
    cr_assert_str_eq(md_st_meta(f, "format"), "mpsdiag-checkpoint-1");
    md_st_close(f);
    th_rmtree(dir);
    free(dir);
}

/* A stop request to mpirun reaches both ranks: they stop after the same
 * step, rank 0 writes the checkpoint (resumable) and alone says so, and the
 * job ends with 130. SIGUSR2, which mpirun passes on to every rank at once:
 * its Ctrl-C path sends SIGTERM only after odls_base_sigkill_timeout (1 s)
 * and SIGKILL as long again later, without reading the ranks' output in
 * between, so a message or a checkpoint may not make it (docs/distributed.md).
 * The signal goes once training runs (the first epoch's checkpoint is
 * there), to mpirun's pid alone, with a bound on the job. */
Test(dist, interrupt_stops_every_rank_and_rank_0_saves, .timeout = 120)
{
    expect_clean_stop("mpirun -np 2 --oversubscribe --bind-to none", "", SIGUSR2, "mpirun");
}

/* Ctrl-C on a job the launcher started (--devices): the SIGINT reaches the
 * launcher only (mpirun runs in its own process group), which passes it on as
 * SIGUSR2; every rank stops after the same step and rank 0 saves. */
Test(dist, ctrl_c_on_the_launcher_stops_every_rank_and_rank_0_saves, .timeout = 120)
{
    expect_clean_stop("", "--devices cpu,cpu", SIGINT, "the launcher");
}

/* An interrupt before training (every rank while opening the dataset, by
 * the test hook): every rank ends, rank 0 with the message, exit 130, no
 * rank left waiting for the others. */
Test(dist, interrupt_before_training_ends_every_rank, .timeout = 120)
{
    NEED_MPI();
    char *dir = th_tmpdir();
    char cmd[4096], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd,
             "MPSDIAG_TEST_INTERRUPT=data " MPIENV "mpirun -np 2 --oversubscribe --bind-to none "
             "$B %s --epochs 1 --batch-size 16 --checkpoint-dir %s/ck --quiet",
             base(dir), dir);
    int hung = 0;
    double t0 = md_now();
    int rc = run_signalled(cmd, NULL, 0, 40, &out, &err, &hung);
    double dt = md_now() - t0;
    fprintf(stderr, "  interrupt before training: exit %d after %.1f s\n", rc, dt);
    cr_assert(!hung, "mpirun still ran after 40 s: %s", err);
    cr_assert_eq(rc, 130, "%s\n%s", out, err);
    cr_assert_eq(th_count(err, "mpsdiag: interrupted while opening the dataset"), 1, "%s", err);
    free(out);
    free(err);
    th_rmtree(dir);
    free(dir);
}

/* The shards of two ranks, side by side, are the batches of one process
 * with twice the batch (the same global order); a short last batch splits
 * evenly. */
Test(dist, loader_shards_make_up_the_global_batches)
{
    struct md_data_opts o;
    md_data_opts_default(&o);
    snprintf(o.dataset, sizeof o.dataset, "synthetic");
    o.max_samples = 100;
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
    struct md_loader_opts lo = {.split = MD_SPLIT_TRAIN, .batch_size = 16, .shuffle = 1, .prefetch = 2, .seed = 3};
    struct md_loader *one = NULL, *r[2] = {NULL, NULL};
    cr_assert_eq(md_loader_create(d, &lo, &one), MD_OK, "%s", md_errmsg());
    lo.batch_size = 8;
    lo.shard_count = 2;
    for (int k = 0; k < 2; k++) {
        lo.shard_rank = k;
        cr_assert_eq(md_loader_create(d, &lo, &r[k]), MD_OK, "%s", md_errmsg());
    }
    long long n = md_data_count(d, MD_SPLIT_TRAIN);
    cr_assert_eq(md_loader_num_batches(r[0]), md_loader_num_batches(one));
    cr_assert_eq(md_loader_num_batches(r[0]), (n + 15) / 16);
    size_t el = md_data_input_elems(d, 0);
    cr_assert_eq(md_loader_start_epoch(one, 1), MD_OK);
    for (int k = 0; k < 2; k++) cr_assert_eq(md_loader_start_epoch(r[k], 1), MD_OK);
    long long seen = 0;
    for (;;) {
        struct md_batch *a = NULL, *s[2] = {NULL, NULL};
        cr_assert_eq(md_loader_next(one, &a), MD_OK);
        for (int k = 0; k < 2; k++) cr_assert_eq(md_loader_next(r[k], &s[k]), MD_OK);
        if (!a) {
            cr_assert(!s[0] && !s[1]);
            break;
        }
        cr_assert_eq(s[0]->n + s[1]->n, a->n, "batch %lld", a->batch);
        cr_assert_leq(abs(s[0]->n - s[1]->n), 1, "an even split");
        for (int k = 0, j = 0; k < 2; k++)
            for (int i = 0; i < s[k]->n; i++, j++) {
                cr_assert_eq(s[k]->index[i], a->index[j], "batch %lld, sample %d", a->batch, j);
                cr_assert_eq(memcmp(s[k]->inputs[0] + (size_t)i * el, a->inputs[0] + (size_t)j * el,
                                    el * sizeof(float)), 0);
            }
        seen += a->n;
        md_loader_release(one, a);
        for (int k = 0; k < 2; k++) md_loader_release(r[k], s[k]);
    }
    cr_assert_eq(seen, n);
    md_loader_free(one);
    for (int k = 0; k < 2; k++) md_loader_free(r[k]);
    md_data_free(d);
}

Test(dist, launcher_errors_name_the_fix, .timeout = 30)
{
    char *out = NULL, *err = NULL;
    /* no mpirun on PATH (the binary by its full path) */
    int rc = th_sh("PATH=/nonexistent \"$B\" --device cpu --gpus 2 --dataset synthetic --epochs 1", &out, &err);
    cr_assert_eq(rc, 4, "%s", err);
    if (md_dist_built())
        cr_assert(strstr(err, "--gpus 2 ranks: mpirun not found on PATH; install Open MPI"), "%s", err);
    else
        cr_assert(strstr(err, "built without MPI"), "%s", err);
    free(out);
    free(err);
}

/* A split's samples over the ranks: disjoint pieces in rank order that
 * cover it, at most one sample apart; with more ranks than samples some
 * pieces are empty. */
Test(dist, shard_bounds_cover_the_split_once)
{
    static const long long ms[] = {0, 1, 2, 3, 7, 16, 100, 101, 1000003};
    static const int rs[] = {1, 2, 3, 4, 5, 8, 13};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        for (size_t j = 0; j < sizeof rs / sizeof rs[0]; j++) {
            long long m = ms[i], next = 0, mn = m, mx = 0;
            int R = rs[j];
            for (int r = 0; r < R; r++) {
                long long lo, hi;
                md_shard_bounds(m, r, R, &lo, &hi);
                cr_assert_eq(lo, next, "m %lld, rank %d of %d: starts where rank %d ended", m, r, R, r - 1);
                cr_assert_geq(hi, lo);
                next = hi;
                if (hi - lo < mn) mn = hi - lo;
                if (hi - lo > mx) mx = hi - lo;
            }
            cr_assert_eq(next, m, "m %lld over %d ranks: every sample once", m, R);
            cr_assert_leq(mx - mn, 1, "m %lld over %d ranks: even pieces", m, R);
            if (R > m) cr_assert_eq(mn, 0, "more ranks than samples: an empty piece");
        }
}

/* Per-target accumulators of two shards, merged, give the figures of one
 * over all the rows (R2 needs the mean and spread of y of the whole). */
Test(dist, regression_sums_of_shards_merge_to_the_whole)
{
    enum { N = 37, K = 3 };
    float pred[N * K], y[N * K];
    for (int i = 0; i < N * K; i++) {
        y[i] = (float)sin(0.7 * i) * 3.0f + (float)(i % 5);
        pred[i] = y[i] + (float)cos(1.3 * i);
    }
    double mean[K] = {1, -2, 0.5}, sd[K] = {2, 0.5, 3};
    struct md_regress_acc whole, a, b;
    cr_assert_eq(md_regress_acc_init(&whole, K), MD_OK);
    cr_assert_eq(md_regress_acc_init(&a, K), MD_OK);
    cr_assert_eq(md_regress_acc_init(&b, K), MD_OK);
    md_regress_acc_add(&whole, pred, y, N, mean, sd);
    md_regress_acc_add(&a, pred, y, 12, mean, sd);
    md_regress_acc_add(&b, pred + 12 * K, y + 12 * K, N - 12, mean, sd);
    struct md_regress_acc m;
    cr_assert_eq(md_regress_acc_init(&m, K), MD_OK);
    md_regress_acc_merge(&m, a.n, a.s);
    md_regress_acc_merge(&m, 0, b.s); /* an empty shard */
    md_regress_acc_merge(&m, b.n, b.s);
    struct md_regress_metrics x, z;
    cr_assert_eq(md_regress_acc_result(&whole, &x), MD_OK);
    cr_assert_eq(md_regress_acc_result(&m, &z), MD_OK);
    cr_assert_eq(x.n, z.n);
    for (int j = 0; j < K; j++) {
        cr_assert_float_eq(x.per[j].r2, z.per[j].r2, 1e-12, "target %d", j);
        cr_assert_float_eq(x.per[j].mae, z.per[j].mae, 1e-12, "target %d", j);
        cr_assert_float_eq(x.per[j].rmse, z.per[j].rmse, 1e-12, "target %d", j);
    }
    md_regress_metrics_free(&x);
    md_regress_metrics_free(&z);
    md_regress_acc_free(&whole);
    md_regress_acc_free(&a);
    md_regress_acc_free(&b);
    md_regress_acc_free(&m);
}
