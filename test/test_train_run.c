/* test_train_run.c - the training loop end to end on the CPU device with the
 * synthetic dataset: loss falls, interruption leaves a loadable checkpoint,
 * resume reaches the same weights as an uninterrupted run, failures are
 * clean. Small shapes and few steps: a few seconds in all. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/json.h"
#include "core/log.h"
#include "core/safetensors.h"
#include "core/signals.h"
#include "nn/model.h"
#include "train/trainer.h"
#include "helpers.h"
#include "helpers_job.h"

struct run_out {
    md_status st;
    float *params;     /* host copy of the final flat parameters (malloc) */
    size_t n;
    cJSON *training;   /* report["training"] (caller deletes) */
    char err[512];
};

static void run_out_free(struct run_out *r)
{
    free(r->params);
    cJSON_Delete(r->training);
}

/* 1: the trainer pipelines its steps (device-side step values, results read
 * one step late) as it does on CUDA, though the CPU cannot capture. */
static int g_force_pipe;

/* The job run in this process with an interruption after `interrupt_after`
 * optimizer steps (0: none). */
static struct run_out run_job(const char *args, long long interrupt_after)
{
    struct th_job j;
    th_job_run(&j, args, interrupt_after, g_force_pipe);
    struct run_out r = {.st = j.st, .training = j.training};
    j.training = NULL;
    snprintf(r.err, sizeof r.err, "%s", j.err);
    if (j.job.model && md_model_params(j.job.model)) {
        r.n = md_model_nparams(j.job.model);
        r.params = th_download_flat(j.job.model, md_model_params(j.job.model));
    }
    th_job_end(&j);
    return r;
}

/* The tiny CNN with dropout before its classifier. */
static const char tiny_model[] = TH_TINY_CNN("  {\"name\": \"dropout\", \"type\": \"dropout\", \"p\": 0.1},\n");

/* Writes the tiny model into dir and returns the common flags (static buffer). */
static const char *base_args(const char *dir) { return th_tiny_args(dir, tiny_model); }
#define BASE "%s "

static double curve_at(const cJSON *training, const char *key, int i)
{
    const cJSON *a = cJSON_GetObjectItem(cJSON_GetObjectItem(training, "curves"), key);
    cr_assert(cJSON_IsArray(a) && cJSON_GetArraySize(a) > i, "curves.%s[%d]", key, i);
    return cJSON_GetArrayItem(a, i)->valuedouble;
}

Test(train_run, loss_falls_on_learnable_data, .timeout = 120)
{
    char *dir = th_tmpdir();
    char args[1024];
    snprintf(args, sizeof args, BASE " --epochs 4 --lr 0.01 --checkpoint-dir %s/ck", base_args(dir), dir);
    struct run_out r = run_job(args, 0);
    cr_assert_eq(r.st, MD_OK, "%s", r.err);
    double l0 = curve_at(r.training, "train_loss", 0), l2 = curve_at(r.training, "train_loss", 3);
    double a2 = curve_at(r.training, "train_acc", 3);
    fprintf(stderr, "  synthetic: train loss %.4f -> %.4f, acc %.3f\n", l0, l2, a2);
    cr_assert(l2 < l0, "loss must fall: %g -> %g", l0, l2);
    cr_assert(l2 < 0.8 * log(10.0), "loss %.4f not below 0.8 x ln(10)", l2);
    char p[4300];
    snprintf(p, sizeof p, "%s/ck/best.safetensors", dir);
    md_st_file *f;
    cr_assert_eq(md_st_open(p, &f), MD_OK, "%s", md_errmsg());
    cr_assert(md_st_meta(f, "epoch") && atoi(md_st_meta(f, "epoch")) >= 2, "best epoch");
    md_st_close(f);
    run_out_free(&r);
    th_tmpdir_free(dir);
}

Test(train_run, interrupt_then_resume_equals_uninterrupted, .timeout = 120)
{
    char *dir = th_tmpdir();
    char args[1024];
    /* 2 epochs of 4 steps; SGD with momentum, cosine: every piece of state matters */
    snprintf(args, sizeof args, BASE " --epochs 2 --steps 4 --checkpoint-dir %s/a", base_args(dir), dir);
    struct run_out a = run_job(args, 0);
    cr_assert_eq(a.st, MD_OK, "%s", a.err);

    snprintf(args, sizeof args, BASE " --epochs 2 --steps 4 --checkpoint-dir %s/b", base_args(dir), dir);
    struct run_out b = run_job(args, 3); /* Ctrl-C after step 3 of epoch 1 */
    cr_assert_eq(b.st, MD_ERR_INTERRUPTED, "status %d: %s", b.st, b.err);
    char ck[4300];
    snprintf(ck, sizeof ck, "%s/b/last.safetensors", dir);
    cr_assert(strstr(b.err, ck), "message names the checkpoint: %s", b.err);
    md_st_file *f;
    cr_assert_eq(md_st_open(ck, &f), MD_OK, "interrupted checkpoint loads: %s", md_errmsg());
    cr_assert_str_eq(md_st_meta(f, "batch_in_epoch"), "3");
    cr_assert_str_eq(md_st_meta(f, "global_step"), "3");
    md_st_close(f);

    snprintf(args, sizeof args, BASE " --epochs 2 --steps 4 --checkpoint-dir %s/c --resume %s", base_args(dir), dir, ck);
    struct run_out c = run_job(args, 0);
    cr_assert_eq(c.st, MD_OK, "%s", c.err);
    cr_assert_eq(a.n, c.n);
    size_t diff = 0;
    double worst = 0;
    for (size_t i = 0; i < a.n; i++) {
        double d = fabs((double)a.params[i] - (double)c.params[i]);
        if (d > 0) diff++;
        if (d > worst) worst = d;
    }
    fprintf(stderr, "  resume: %zu of %zu parameters differ, worst %.3g\n", diff, a.n, worst);
    cr_assert(worst <= 1e-6, "resumed run differs from the uninterrupted one by %g", worst);
    /* a different batch size would change what the saved position means */
    snprintf(args, sizeof args, BASE " --epochs 2 --steps 4 --checkpoint-dir %s/d --resume %s --batch-size 16",
             base_args(dir), dir, ck);
    struct run_out d = run_job(args, 0);
    cr_assert_eq(d.st, MD_ERR_DATA, "status %d: %s", d.st, d.err);
    cr_assert(strstr(d.err, "batch size 32") && strstr(d.err, ck), "%s", d.err);
    free(d.params);
    /* and the epoch curves continue */
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(c.training, "curves"), "epoch")), 2);
    run_out_free(&a);
    run_out_free(&b);
    run_out_free(&c);
    th_tmpdir_free(dir);
}

Test(train_run, checkpoint_dir_that_cannot_exist_fails_clearly)
{
    char *dir = th_tmpdir();
    char *file = th_write(dir, "plain-file", "x");
    char args[1024];
    snprintf(args, sizeof args, BASE " --epochs 1 --steps 1 --checkpoint-dir %s/sub", base_args(dir), file);
    struct run_out r = run_job(args, 0);
    cr_assert_eq(r.st, MD_ERR_IO, "status %d: %s", r.st, r.err);
    cr_assert(strstr(r.err, "--checkpoint-dir") && strstr(r.err, file), "%s", r.err);
    free(r.params);
    free(file);
    th_tmpdir_free(dir);
}

/* The flags of a run of th_unstable_model with lr 100 (diverges within 3 epochs). */
static void unstable_args(const char *dir, const char *extra, char *args, size_t n)
{
    char *m = th_write(dir, "unstable.json", th_unstable_model);
    snprintf(args, n,
             "--device cpu --threads 1 --dataset synthetic --model %s --max-samples 384 --batch-size 32 "
             "--num-workers 0 --quiet --epochs 3 --lr 100 --lradj constant %s",
             m, extra);
    free(m);
}

Test(train_run, diverging_run_stops_with_numeric_error, .timeout = 120)
{
    char *dir = th_tmpdir();
    char args[1024];
    char ck[1100];
    snprintf(ck, sizeof ck, "--checkpoint-dir %s", dir);
    unstable_args(dir, ck, args, sizeof args);
    struct run_out r = run_job(args, 0);
    fprintf(stderr, "  lr 100: %s\n", r.err);
    cr_assert_eq(r.st, MD_ERR_NUMERIC, "status %d: %s", r.st, r.err);
    cr_assert(strstr(r.err, "step") && strstr(r.err, "not finite"), "%s", r.err);
    run_out_free(&r);
    th_tmpdir_free(dir);
}

Test(train_run, report_and_metrics_from_the_binary, .timeout = 120)
{
    char *dir = th_tmpdir();
    char args[2048];
    snprintf(args, sizeof args,
             "%s --epochs 2 --steps 2 --checkpoint-dir %s/ck --metrics %s/m.jsonl",
             base_args(dir), dir, dir);
    char *q = strstr(args, " --quiet");
    if (q) memmove(q, q + 8, strlen(q + 8) + 1); /* this one reads stdout */
    char *out = NULL, *err = NULL;
    cJSON *rep = th_run_report(dir, args, 0, &out, &err);
    cr_assert(strstr(out, "train loss") && strstr(out, "Saved best model"), "%s", out);
    char p[4300];
    const cJSON *tr = cJSON_GetObjectItem(rep, "training");
    cr_assert(cJSON_IsObject(tr));
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(tr, "curves"), "val_acc")), 2);
    const cJSON *diag = cJSON_GetArrayItem(cJSON_GetObjectItem(tr, "diagnostics"), 1);
    cr_assert(cJSON_IsObject(diag));
    const cJSON *p0 = cJSON_GetArrayItem(cJSON_GetObjectItem(diag, "params"), 0);
    cr_assert(cJSON_GetObjectItem(p0, "grad_norm")->valuedouble > 0);
    cr_assert(cJSON_GetObjectItem(p0, "update_ratio")->valuedouble > 0);
    cJSON_Delete(rep);
    snprintf(p, sizeof p, "%s/m.jsonl", dir);
    FILE *f = fopen(p, "r");
    cr_assert(f);
    int lines = 0;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        cr_assert(o, "metrics line is JSON: %s", line);
        if (strcmp(cJSON_GetObjectItem(o, "kind")->valuestring, "epoch") == 0) lines++;
        cJSON_Delete(o);
    }
    fclose(f);
    cr_assert_eq(lines, 2, "one metrics line per epoch");
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

Test(train_run, sigint_to_the_binary_leaves_a_loadable_checkpoint, .timeout = 60)
{
    char *dir = th_tmpdir();
    const char *bin = getenv("MPSDIAG_BIN");
    if (!bin) bin = "build/mpsdiag";
    char cmd[4096];
    /* far more epochs than 2 s allow: the SIGINT lands mid-run */
    snprintf(cmd, sizeof cmd,
             "timeout --foreground --preserve-status -s INT 2 %s %s --epochs 100000 --steps 2 --checkpoint-dir %s/ck "
             ">%s/out 2>%s/err </dev/null",
             bin, base_args(dir), dir, dir, dir);
    int rc = system(cmd);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 130, "exit status %d", WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
    char p[4300];
    snprintf(p, sizeof p, "%s/ck/last.safetensors", dir);
    md_st_file *f;
    cr_assert_eq(md_st_open(p, &f), MD_OK, "%s", md_errmsg());
    cr_assert_not_null(md_st_meta(f, "global_step"));
    md_st_close(f);
    th_tmpdir_free(dir);
}

/* A ResNet in miniature with the shipped resnet18_cifar's basic block
 * (3x3 convs, BN, identity or 1x1-downsample shortcut, add, ReLU). */
static const char resnet_tiny[] =
    "{\"name\": \"resnet_tiny\", \"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [3, 32, 32]}],\n"
    " \"blocks\": {\"basic\": {\"params\": {\"out\": null, \"stride\": 1, \"down\": false}, \"layers\": [\n"
    "  {\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": \"$out\", \"kernel\": 3, \"stride\": \"$stride\", \"padding\": 1, \"bias\": false},\n"
    "  {\"name\": \"bn1\", \"type\": \"batchnorm\"}, {\"name\": \"relu1\", \"type\": \"relu\"},\n"
    "  {\"name\": \"conv2\", \"type\": \"conv2d\", \"out\": \"$out\", \"kernel\": 3, \"padding\": 1, \"bias\": false},\n"
    "  {\"name\": \"bn2\", \"type\": \"batchnorm\"},\n"
    "  {\"name\": \"downsample.0\", \"type\": \"conv2d\", \"inputs\": [\"in\"], \"if\": \"$down\", \"out\": \"$out\", \"kernel\": 1, \"stride\": \"$stride\", \"bias\": false},\n"
    "  {\"name\": \"downsample.1\", \"type\": \"batchnorm\", \"if\": \"$down\"},\n"
    "  {\"name\": \"add\", \"type\": \"add\", \"inputs\": [\"bn2\", \"downsample.1\"]},\n"
    "  {\"name\": \"relu2\", \"type\": \"relu\"}]}},\n"
    " \"layers\": [\n"
    "  {\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"padding\": 1, \"bias\": false},\n"
    "  {\"name\": \"bn1\", \"type\": \"batchnorm\"}, {\"name\": \"relu\", \"type\": \"relu\"},\n"
    "  {\"name\": \"layer1\", \"type\": \"basic\", \"out\": 8},\n"
    "  {\"name\": \"layer2\", \"type\": \"basic\", \"out\": 16, \"stride\": 2, \"down\": true},\n"
    "  {\"name\": \"avgpool\", \"type\": \"global_avgpool\"},\n"
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n";

/* CIFAR-10 binary records (label byte, 3x32x32 bytes): each class a colour
 * with noise, so a small network learns it in a few steps. */
static void write_cifar(const char *path, int n, unsigned seed)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "%s", path);
    unsigned s = seed;
    for (int i = 0; i < n; i++) {
        int k = i % 10;
        fputc(k, f);
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 1024; p++) {
                s = s * 1103515245u + 12345u;
                int v = 40 + 20 * ((k * (c + 3)) % 10) + (int)((s >> 16) % 41) - 20;
                fputc(v < 0 ? 0 : v > 255 ? 255 : v, f);
            }
    }
    fclose(f);
}

Test(train_run, resnet_style_on_cifar_format_data_learns, .timeout = 120)
{
    char *dir = th_tmpdir();
    char p[4300];
    snprintf(p, sizeof p, "%s/data_batch_1.bin", dir);
    write_cifar(p, 320, 1);
    snprintf(p, sizeof p, "%s/test_batch.bin", dir);
    write_cifar(p, 100, 2);
    char *m = th_write(dir, "resnet_tiny.json", resnet_tiny);
    char args[2048];
    snprintf(args, sizeof args,
             "--device cpu --threads 1 --dataset cifar10 --data-dir %s --model %s --batch-size 32 --num-workers 0 "
             "--no-augment --epochs 3 --lr 0.05 --quiet --checkpoint-dir %s/ck",
             dir, m, dir);
    free(m);
    struct run_out r = run_job(args, 0);
    cr_assert_eq(r.st, MD_OK, "%s", r.err);
    double l0 = curve_at(r.training, "train_loss", 0), l2 = curve_at(r.training, "train_loss", 2);
    double a0 = curve_at(r.training, "val_acc", 0), a2 = curve_at(r.training, "val_acc", 2);
    fprintf(stderr, "  resnet_tiny on CIFAR-format data: train loss %.4f -> %.4f, val acc %.3f -> %.3f\n", l0, l2, a0,
            a2);
    cr_assert(l2 < 0.7 * l0, "loss must fall: %g -> %g", l0, l2);
    cr_assert(a2 >= a0 && a2 > 0.5, "validation accuracy must rise above chance: %g -> %g", a0, a2);
    const cJSON *te = cJSON_GetObjectItem(r.training, "test");
    cr_assert(te && cJSON_GetObjectItem(te, "samples")->valuedouble == 100, "test split scored");
    run_out_free(&r);
    th_tmpdir_free(dir);
}

/* ---- pipelined steps (what CUDA graphs replay) against host-synced ones -------------- */

static const char *exec_mode(const cJSON *training, double *synced)
{
    const cJSON *e = cJSON_GetObjectItem(training, "step_execution");
    cr_assert(cJSON_IsObject(e), "report.training.step_execution");
    *synced = cJSON_GetObjectItem(e, "host_synced_steps")->valuedouble;
    return cJSON_GetObjectItem(e, "mode")->valuestring;
}

static double scaling_num(const cJSON *training, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(training, "loss_scaling"), key);
    cr_assert(cJSON_IsNumber(v), "report.training.loss_scaling.%s", key);
    return v->valuedouble;
}

/* Returns the steps the loss scaler skipped (the same in both runs). */
static double expect_same_run(const char *what, const char *extra, const char *dir)
{
    char args[1024];
    /* both runs write into one folder of their own: the second replaces the first's checkpoints */
    snprintf(args, sizeof args, BASE " --epochs 2 --steps 5 --checkpoint-dir %s/same --overwrite %s", base_args(dir),
             dir, extra);
    g_force_pipe = 0;
    struct run_out a = run_job(args, 0);
    g_force_pipe = 1;
    struct run_out b = run_job(args, 0);
    g_force_pipe = 0;
    cr_assert_eq(a.st, MD_OK, "%s: %s", what, a.err);
    cr_assert_eq(b.st, MD_OK, "%s: %s", what, b.err);
    double sa, sb;
    cr_assert_str_eq(exec_mode(a.training, &sa), "eager", "%s", what);
    cr_assert_str_eq(exec_mode(b.training, &sb), "pipelined", "%s", what);
    cr_assert_eq(sa, 10, "%s: every step host-synced", what);
    cr_assert_eq(sb, 2, "%s: only each epoch's last step host-synced", what);
    cr_assert_eq(a.n, b.n);
    size_t diff = 0;
    for (size_t i = 0; i < a.n; i++) diff += a.params[i] != b.params[i];
    cr_assert_eq(diff, 0, "%s: %zu of %zu parameters differ between pipelined and host-synced steps", what, diff, a.n);
    for (int e = 0; e < 2; e++) {
        cr_assert_eq(curve_at(a.training, "train_loss", e), curve_at(b.training, "train_loss", e), "%s: loss", what);
        cr_assert_eq(curve_at(a.training, "train_acc", e), curve_at(b.training, "train_acc", e), "%s: acc", what);
        cr_assert_eq(curve_at(a.training, "val_loss", e), curve_at(b.training, "val_loss", e), "%s: val loss", what);
    }
    /* fp16: the device's loss scaler decided as the host's did */
    double skipped = scaling_num(a.training, "skipped_steps");
    cr_assert_eq(scaling_num(a.training, "final_scale"), scaling_num(b.training, "final_scale"), "%s: loss scale", what);
    cr_assert_eq(skipped, scaling_num(b.training, "skipped_steps"), "%s: skipped steps", what);
    const cJSON *ls = cJSON_GetObjectItem(b.training, "loss_scaling");
    if (cJSON_IsTrue(cJSON_GetObjectItem(ls, "enabled")))
        cr_assert_str_eq(cJSON_GetObjectItem(ls, "decided_on")->valuestring, "device", "%s", what);
    run_out_free(&a);
    run_out_free(&b);
    return skipped;
}

Test(train_pipe, same_weights_as_host_synced_steps, .timeout = 120)
{
    char *dir = th_tmpdir();
    /* dropout (the device-side offset), clipping that bites, momentum's first step, a warm-up schedule */
    expect_same_run("sgd, clip", "--grad-clip 0.05 --warmup-epochs 1", dir);
    expect_same_run("adamw (bias correction from the device step)", "--optimizer adamw --lr 0.003", dir);
    expect_same_run("one batch in flight at most, workers", "--prefetch 1 --num-workers 2 --label-smoothing 0.1", dir);
    th_tmpdir_free(dir);
}

/* fp16 with dynamic loss scaling pipelines too: the optimizer kernel applies
 * the scaler's rule on the device and the loss gradient reads the scale from
 * there. This model's fp16 gradients overflow above a scale of 2^15: a run
 * from 2^17 skips its first two steps and takes the next at 2^15 (a step
 * that read the host's scale, one step late, would be seeded at 2^16); one
 * from 2^19 skips four. Both runs alike, and AdamW's t counts taken steps
 * only. */
static double fp16_run(const char *what, double scale, const char *flags, const char *dir)
{
    char plan[128], extra[1400];
    snprintf(plan, sizeof plan, "{\"format\": \"mpsdiag-precision-plan\", \"precision\": \"fp16\", "
             "\"loss_scale\": %.0f}\n", scale);
    char *path = th_write(dir, "plan.json", plan);
    snprintf(extra, sizeof extra, "--precision-plan %s %s", path, flags);
    free(path);
    th_job_force_fp16 = 1;
    double skipped = expect_same_run(what, extra, dir);
    th_job_force_fp16 = 0;
    fprintf(stderr, "  fp16 from %.0f: %.0f of 10 steps skipped, pipelined as host-synced\n", scale, skipped);
    return skipped;
}

Test(train_pipe, fp16_loss_scale_decided_on_the_device, .timeout = 120)
{
    char *dir = th_tmpdir();
    /* SGD without clipping: a gradient seeded at the wrong scale shows */
    double s = fp16_run("fp16 from 2^17, sgd", 131072, "", dir);
    cr_assert(s >= 2, "the overflowing first steps are skipped: %g", s);
    s = fp16_run("fp16 from 2^19, adamw, clip", 524288, "--optimizer adamw --lr 0.003 --grad-clip 1", dir);
    cr_assert_eq(s, 4, "the overflowing first steps are skipped: %g", s);
    s = fp16_run("fp16 from 2^19, one batch in flight at most", 524288, "--prefetch 1", dir);
    cr_assert_eq(s, 4, "the overflowing first steps are skipped: %g", s);
    th_tmpdir_free(dir);
}

Test(train_pipe, interrupt_then_resume_equals_uninterrupted, .timeout = 120)
{
    char *dir = th_tmpdir();
    char args[1024];
    g_force_pipe = 1;
    snprintf(args, sizeof args, BASE " --epochs 2 --steps 5 --checkpoint-dir %s/a", base_args(dir), dir);
    struct run_out a = run_job(args, 0);
    cr_assert_eq(a.st, MD_OK, "%s", a.err);
    snprintf(args, sizeof args, BASE " --epochs 2 --steps 5 --checkpoint-dir %s/b", base_args(dir), dir);
    struct run_out b = run_job(args, 7); /* Ctrl-C with a step in flight */
    cr_assert_eq(b.st, MD_ERR_INTERRUPTED, "status %d: %s", b.st, b.err);
    char ck[4300];
    snprintf(ck, sizeof ck, "%s/b/last.safetensors", dir);
    md_st_file *f;
    cr_assert_eq(md_st_open(ck, &f), MD_OK, "%s", md_errmsg());
    cr_assert_str_eq(md_st_meta(f, "global_step"), "7");
    cr_assert_str_eq(md_st_meta(f, "batch_in_epoch"), "2");
    md_st_close(f);
    snprintf(args, sizeof args, BASE " --epochs 2 --steps 5 --checkpoint-dir %s/c --resume %s", base_args(dir), dir, ck);
    struct run_out c = run_job(args, 0);
    g_force_pipe = 0;
    cr_assert_eq(c.st, MD_OK, "%s", c.err);
    size_t diff = 0;
    for (size_t i = 0; i < a.n; i++) diff += a.params[i] != c.params[i];
    cr_assert_eq(diff, 0, "%zu parameters differ after resume", diff);
    run_out_free(&a);
    run_out_free(&b);
    run_out_free(&c);
    th_tmpdir_free(dir);
}

Test(train_pipe, diverging_run_stops_with_numeric_error, .timeout = 120)
{
    char *dir = th_tmpdir();
    char args[1024];
    char ck[1100];
    snprintf(ck, sizeof ck, "--checkpoint-dir %s/ck --overwrite", dir);
    unstable_args(dir, ck, args, sizeof args);
    g_force_pipe = 0;
    struct run_out a = run_job(args, 0);
    g_force_pipe = 1;
    struct run_out r = run_job(args, 0);
    g_force_pipe = 0;
    fprintf(stderr, "  pipelined, lr 100: %s\n  host-synced: %s\n", r.err, a.err);
    cr_assert_eq(r.st, MD_ERR_NUMERIC, "status %d: %s", r.st, r.err);
    /* the same step is named: the device skipped the update, as the host would have */
    const char *sa = strstr(a.err, "step "), *sr = strstr(r.err, "step ");
    cr_assert(sa && sr && atoll(sa + 5) == atoll(sr + 5), "%s / %s", a.err, r.err);
    cr_assert(strstr(r.err, "not finite"), "%s", r.err);
    run_out_free(&a);
    run_out_free(&r);
    th_tmpdir_free(dir);
}
