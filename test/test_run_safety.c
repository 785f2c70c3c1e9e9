/* test_run_safety.c - what a run does with its checkpoint folder and what
 * --resume believes. Through the binary on the CPU with synthetic data and
 * a tiny model (a second or two per run):
 *   run_folder:    an earlier run's checkpoints are not overwritten without
 *                  --overwrite, and best.safetensors never gets worse;
 *   run_lock:      a second run on a folder in use is refused, naming the
 *                  first run's pid (two processes);
 *   resume_safety: every metadata field of a checkpoint is checked (a
 *                  clear error naming the file and key, never an abort), and
 *                  the safetensors reader's shape product cannot overflow. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/safetensors.h"
#include "helpers.h"

static const char tiny_model[] =
    "{\"name\": \"tiny\", \"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],\n"
    " \"layers\": [{\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"stride\": 2},\n"
    "  {\"name\": \"bn1\", \"type\": \"batchnorm\", \"act\": \"relu\"},\n"
    "  {\"type\": \"global_avgpool\"}, {\"type\": \"flatten\"},\n"
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": 10}]}\n";

/* Common flags: the binary, CPU, tiny model, 128 synthetic samples. */
static char *base(const char *dir)
{
    char *m = th_write(dir, "tiny.json", tiny_model);
    char *b = malloc(4096);
    snprintf(b, 4096,
             "--device cpu --threads 1 --dataset synthetic --model %s --max-samples 128 --batch-size 32 "
             "--num-workers 0 --seed 3 --steps 2 --no-augment",
             m);
    free(m);
    return b;
}

static int run(const char *base_args, const char *more, char **err)
{
    char args[8192];
    snprintf(args, sizeof args, "%s %s", base_args, more);
    return th_run(args, NULL, err);
}

static char *meta_of(const char *path, const char *key)
{
    md_st_file *f = NULL;
    if (md_st_open(path, &f) != MD_OK) return NULL;
    const char *v = md_st_meta(f, key);
    char *r = v ? strdup(v) : NULL;
    md_st_close(f);
    return r;
}

/* ---- run_folder ---------------------------------------------------------------- */

Test(run_folder, refuses_a_folder_with_checkpoints_without_overwrite, .timeout = 120)
{
    char *dir = th_tmpdir(), *b = base(dir), *err = NULL, more[4600], best[4300];
    snprintf(more, sizeof more, "--epochs 2 --checkpoint-dir %s/ck", dir);
    cr_assert_eq(run(b, more, &err), 0, "%s", err);
    free(err);
    snprintf(best, sizeof best, "%s/ck/best.safetensors", dir);
    char *acc0 = meta_of(best, "best_val_acc");
    cr_assert(acc0);

    /* the run: one step into the same folder */
    snprintf(more, sizeof more, "--epochs 1 --steps 1 --checkpoint-dir %s/ck", dir);
    int rc = run(b, more, &err);
    cr_expect_eq(rc, 3, "exit %d: %s", rc, err);
    char folder[4300];
    snprintf(folder, sizeof folder, "%s/ck", dir);
    cr_expect(strstr(err, folder) && strstr(err, "--overwrite") && strstr(err, "--resume"), "%s", err);
    free(err);
    char *acc1 = meta_of(best, "best_val_acc");
    cr_expect(acc1 && strcmp(acc0, acc1) == 0, "best.safetensors changed: %s -> %s", acc0, acc1);
    free(acc1);

    /* --resume continues in it; --overwrite starts afresh (and says so) */
    snprintf(more, sizeof more, "--epochs 3 --checkpoint-dir %s/ck --resume %s/ck/last.safetensors", dir, dir);
    cr_expect_eq(run(b, more, &err), 0, "%s", err);
    free(err);
    snprintf(more, sizeof more, "--epochs 1 --checkpoint-dir %s/ck --overwrite --resume %s/ck/last.safetensors", dir,
             dir);
    cr_expect_eq(run(b, more, &err), 2, "--overwrite with --resume: %s", err);
    free(err);
    char *out = NULL;
    snprintf(more, sizeof more, "--epochs 1 --checkpoint-dir %s/ck --overwrite", dir);
    char args[8192];
    snprintf(args, sizeof args, "%s %s", b, more);
    cr_expect_eq(th_run(args, &out, &err), 0, "%s", err);
    cr_expect(strstr(out, "--overwrite"), "the run says what it removed: %s", out);
    char *ep = meta_of(best, "epoch");
    cr_expect(ep && strcmp(ep, "1") == 0, "best.safetensors is the new run's: epoch %s", ep ? ep : "?");
    free(ep);
    free(out);
    free(err);
    free(acc0);
    free(b);
    th_tmpdir_free(dir);
}

Test(run_folder, best_is_replaced_only_by_a_better_score, .timeout = 120)
{
    char *dir = th_tmpdir(), *b = base(dir), *err = NULL, more[4600], p[4300], q[4300];
    snprintf(more, sizeof more, "--epochs 1 --checkpoint-dir %s/ck", dir);
    cr_assert_eq(run(b, more, &err), 0, "%s", err);
    free(err);
    /* the folder's best claims a perfect score; the checkpoint resumed from
     * knows of no best at all (as one from another folder would) */
    snprintf(p, sizeof p, "%s/ck/best.safetensors", dir);
    th_st_rewrite_meta(p, p, "best_val_acc", "1");
    snprintf(p, sizeof p, "%s/ck/last.safetensors", dir);
    snprintf(q, sizeof q, "%s/other.safetensors", dir);
    th_st_rewrite_meta(p, q, "best_val_acc", "-1");
    th_st_rewrite_meta(q, q, "best_epoch", "-1");
    snprintf(more, sizeof more, "--epochs 3 --checkpoint-dir %s/ck --resume %s", dir, q);
    cr_assert_eq(run(b, more, &err), 0, "%s", err);
    free(err);
    snprintf(p, sizeof p, "%s/ck/best.safetensors", dir);
    char *acc = meta_of(p, "best_val_acc"), *ep = meta_of(p, "epoch");
    cr_expect(acc && strcmp(acc, "1") == 0, "best.safetensors was replaced by a worse one (%s, epoch %s)",
              acc ? acc : "?", ep ? ep : "?");
    free(acc);
    free(ep);
    /* and last.safetensors knows the folder's best */
    snprintf(p, sizeof p, "%s/ck/last.safetensors", dir);
    acc = meta_of(p, "best_val_acc");
    cr_expect(acc && strcmp(acc, "1") == 0, "last.safetensors: best_val_acc %s", acc ? acc : "?");
    free(acc);
    free(b);
    th_tmpdir_free(dir);
}

/* ---- run_lock ------------------------------------------------------------------- */

Test(run_lock, second_run_on_a_folder_in_use_is_refused_with_the_pid, .timeout = 120)
{
    char *dir = th_tmpdir(), *b = base(dir), *err = NULL, more[4600], lock[4300];
    const char *bin = getenv("MPSDIAG_BIN") ? getenv("MPSDIAG_BIN") : "build/mpsdiag";
    /* run A: trains until stopped */
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "exec %s %s --epochs 100000 --checkpoint-dir %s/ck >%s/a.out 2>%s/a.err </dev/null", bin,
             b, dir, dir, dir);
    pid_t a = fork();
    cr_assert(a >= 0);
    if (a == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* wait until A holds the folder (its lock file names it) */
    snprintf(lock, sizeof lock, "%s/ck/.mpsdiag-lock", dir);
    char want[64];
    snprintf(want, sizeof want, "pid %d", (int)a);
    int held = 0;
    for (int i = 0; i < 300 && !held; i++) {
        FILE *f = fopen(lock, "r");
        if (f) {
            char line[128] = "";
            held = fgets(line, sizeof line, f) && strstr(line, want);
            fclose(f);
        }
        if (!held) usleep(100000);
    }
    int rc = -1;
    if (held) {
        /* run B on the same folder: refused at start, whatever else it asks */
        snprintf(more, sizeof more, "--epochs 1 --checkpoint-dir %s/ck --overwrite", dir);
        rc = run(b, more, &err);
    }
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    cr_assert(held, "run A never wrote '%s' into %s", want, lock);
    cr_expect_eq(rc, 3, "exit %d: %s", rc, err);
    cr_expect(strstr(err, want) && strstr(err, "/ck"), "names the other run's pid and the folder: %s", err);
    free(err);
    /* A is gone (killed: no clean-up ran); its lock went with it */
    snprintf(more, sizeof more, "--epochs 1 --checkpoint-dir %s/ck --overwrite", dir);
    rc = run(b, more, &err);
    cr_expect_eq(rc, 0, "after the first run died: exit %d: %s", rc, err);
    free(err);
    free(b);
    th_tmpdir_free(dir);
}

/* ---- resume_safety ------------------------------------------------------------ */

Test(resume_safety, every_metadata_field_is_checked, .timeout = 300)
{
    char *dir = th_tmpdir(), *b = base(dir), *err = NULL, more[9000], src[4300], bad[4300];
    /* interrupted mid-epoch would be best, but an epoch's end has every field too */
    snprintf(more, sizeof more, "--epochs 2 --checkpoint-dir %s/ck", dir);
    cr_assert_eq(run(b, more, &err), 0, "%s", err);
    free(err);
    snprintf(src, sizeof src, "%s/ck/last.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    static const struct { const char *key, *value; } cases[] = {
        {"epoch", "-1"}, {"epoch", "2147483648"}, {"epoch", "7"}, {"epoch", "1x"}, {"epoch", NULL},
        {"batch_in_epoch", "-3"}, {"batch_in_epoch", "1000000"},
        {"global_step", "-1"}, {"optimizer_step", "-5"},
        {"loss_scale", "nan"}, {"loss_scale", "-inf"}, {"loss_scale", "0"},
        {"loss_scale_clean_steps", "-1"}, {"skipped_steps", "-2"},
        {"epoch_loss_sum", "nan"}, {"epoch_loss_sum", "-1"},
        {"epoch_correct", "-1"}, {"epoch_seen", "-1"}, {"epoch_correct", "99999"},
        {"epoch_time_s", "inf"}, {"run_time_s", "-1"},
        {"best_val_acc", "1.5"}, {"best_val_acc", "nan"}, {"best_epoch", "-7"}, {"best_epoch", "0"}, {"best_epoch", "100001"},
        {"curves", "{not json"}, {"curves", "[1, 2]"}, {"curves", "{\"epoch\": \"x\"}"},
        {"curves", "{\"epoch\": [1, 2], \"epoch\": [1]}"}, {"curves", "{\"epoch\": [1, 2, 3, 4, 5]}"},
        {"config", "{bad"}, {"config", "{\"batch_size\": 32, \"batch_size\": 16}"},
    };
    int fails = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        th_st_rewrite_meta(src, bad, cases[i].key, cases[i].value);
        snprintf(more, sizeof more, "--epochs 3 --checkpoint-dir %s/r%zu --resume %s", dir, i, bad);
        int rc = run(b, more, &err);
        int ok = rc == 3 && strstr(err, bad) && strstr(err, cases[i].key);
        if (!ok) {
            fprintf(stderr, "  %s = %s: exit %d: %s", cases[i].key, cases[i].value ? cases[i].value : "(missing)",
                    rc, err);
            fails++;
        }
        free(err);
    }
    cr_expect_eq(fails, 0, "%d corrupt fields were not refused with the file and key named", fails);
    /* the unmodified checkpoint still resumes */
    snprintf(more, sizeof more, "--epochs 3 --checkpoint-dir %s/ok --resume %s", dir, src);
    cr_expect_eq(run(b, more, &err), 0, "%s", err);
    free(err);
    free(b);
    th_tmpdir_free(dir);
}

/* Shape dimensions whose product passes 2^63: refused before multiplying
 * (make asan: a signed overflow used to show here). */
Test(resume_safety, safetensors_shape_product_cannot_overflow)
{
    char *dir = th_tmpdir();
    static const char *const shapes[] = {"[4294967296, 4294967296]", "[9007199254740992, 9007199254740992, 0]",
                                         "[3037000500, 3037000500, 2]", "[1, 2, 4, 8, 16, 4294967296, 4294967296]"};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        char header[256], path[4300];
        snprintf(header, sizeof header, "{\"w\": {\"dtype\": \"F32\", \"shape\": %s, \"data_offsets\": [0, 0]}}",
                 shapes[i]);
        size_t h = strlen(header), padded = (h + 7) / 8 * 8;
        snprintf(path, sizeof path, "%s/s%zu.safetensors", dir, i);
        FILE *f = fopen(path, "wb");
        cr_assert(f);
        for (int k = 0; k < 8; k++) fputc((int)((padded >> (8 * k)) & 0xff), f);
        fputs(header, f);
        for (size_t k = h; k < padded; k++) fputc(' ', f);
        fclose(f);
        md_st_file *st = NULL;
        cr_expect_eq(md_st_open(path, &st), MD_ERR_DATA, "%s", shapes[i]);
        cr_expect(strstr(md_errmsg(), "shape too large"), "%s: %s", shapes[i], md_errmsg());
        md_st_close(st);
    }
    th_tmpdir_free(dir);
}
