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
#include <sys/stat.h>
#include <unistd.h>

#include "core/dist.h"
#include "core/safetensors.h"
#include "core/timer.h"
#include "data/data.h"
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

/* Ctrl-C to mpirun reaches both ranks: they stop after the same step, rank 0
 * writes the checkpoint (resumable), rank 1 says nothing. */
Test(dist, interrupt_stops_every_rank_and_rank_0_saves, .timeout = 60)
{
    NEED_MPI();
    char *dir = th_tmpdir();
    char cmd[4096], *out = NULL, *err = NULL;
    const char *b = base(dir);
    snprintf(cmd, sizeof cmd,
             MPIENV MPIRUN "$B %s --epochs 100000 --steps 4 --batch-size 16 --checkpoint-dir %s/ck --quiet & "
             /* the interrupt once both ranks train (the first epoch's checkpoint is written) */
             "for i in $(seq 200); do [ -f %s/ck/last.safetensors ] && break; sleep 0.1; done; sleep 0.5; "
             "kill -INT $!; wait $!",
             b, dir, dir);
    int rc = th_sh(cmd, &out, &err);
    cr_assert_neq(rc, 0);
    cr_assert_eq(th_count(err, "mpsdiag: interrupted"), 1, "rank 0 alone says so: %s", err);
    cr_assert(strstr(err, "checkpoint") && strstr(err, "continue with --resume"), "%s", err);
    free(out);
    free(err);
    char p[4200];
    snprintf(p, sizeof p, "%s/ck/last.safetensors", dir);
    md_st_file *f = NULL;
    cr_assert_eq(md_st_open(p, &f), MD_OK, "a whole checkpoint: %s", md_errmsg());
    cr_assert_str_eq(md_st_meta(f, "format"), "mpsdiag-checkpoint-1");
    md_st_close(f);
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
