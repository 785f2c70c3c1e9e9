/* test_outputs.c - output files of the built binary: paths checked before
 * any work starts, atomic writes that keep symlinks, devices and FIFOs,
 * write errors (also on stdout) that end the run non-zero, and reports that
 * are valid UTF-8 whatever bytes the paths and names hold. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

/* A short training run on generated data (a second or so). */
#define TRAIN "--device cpu --threads 1 --dataset synthetic --max-samples 64 --batch-size 32 --num-workers 0 " \
              "--epochs 1 --steps 1"

/* Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF). */
static int utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        int k;
        unsigned min;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) { k = 1; min = 0x80; c &= 0x1F; }
        else if ((c & 0xF0) == 0xE0) { k = 2; min = 0x800; c &= 0x0F; }
        else if ((c & 0xF8) == 0xF0) { k = 3; min = 0x10000; c &= 0x07; }
        else return 0;
        for (int j = 1; j <= k; j++) {
            if (i + (size_t)j >= n || (s[i + j] & 0xC0) != 0x80) return 0;
            c = (c << 6) | (s[i + j] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
        i += (size_t)k + 1;
    }
    return 1;
}

/* The report at path: valid UTF-8 and JSON (caller deletes). */
static cJSON *load_report(const char *path)
{
    size_t n = 0;
    char *text = th_slurp(path, &n);
    cr_assert(text, "no report at %s", path);
    cr_assert(utf8_valid((const unsigned char *)text, n), "report %s is not valid UTF-8", path);
    cJSON *r = cJSON_Parse(text);
    cr_assert(r, "report %s is not JSON", path);
    free(text);
    return r;
}

/* ---- output paths are checked before the run starts ----------------------------- */

Test(outputs, every_unwritable_output_is_named_before_any_work)
{
    char *dir = th_tmpdir();
    char *file = th_write(dir, "plain", "x");
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "$B " TRAIN " --ci --report %s/missing-dir/r.json --html %s --junit %s/j.xml/x.xml "
             "--metrics %s/nope/m.jsonl --checkpoint-dir %s/sub",
             dir, dir, file, dir, file);
    char *out, *err;
    int rc = th_sh(cmd, &out, &err);
    cr_assert_eq(rc, 3, "exit %d, stderr: %s", rc, err);
    static const char *const flags[] = {"--report", "--html", "--junit", "--metrics", "--checkpoint-dir"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        cr_assert(strstr(err, flags[i]), "%s not named: %s", flags[i], err);
    cr_assert_eq(th_count_messages(err), 5, "one line per output: %s", err);
    for (const char *l = err; *l; l = strchr(l, '\n') + 1) /* a long one goes on indented */
        cr_assert(strncmp(l, "mpsdiag: ", 9) == 0 || strncmp(l, "    ", 4) == 0, "line without the prefix: %s", l);
    cr_assert_null(strstr(out, "== System"), "work started: %s", out);
    /* nothing was created */
    char p[4300];
    snprintf(p, sizeof p, "%s/missing-dir", dir);
    cr_assert_neq(access(p, F_OK), 0);
    free(out);
    free(err);
    free(file);
    th_tmpdir_free(dir);
}

Test(outputs, a_checkpoint_dir_to_be_created_is_not_created_when_another_output_fails)
{
    char *dir = th_tmpdir();
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "$B " TRAIN " --checkpoint-dir %s/new/ck --report %s/nope/r.json", dir, dir);
    char *err;
    int rc = th_sh(cmd, NULL, &err);
    cr_assert_eq(rc, 3, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "--report") && !strstr(err, "--checkpoint-dir"), "%s", err);
    char p[4300];
    snprintf(p, sizeof p, "%s/new", dir);
    cr_assert_neq(access(p, F_OK), 0, "%s was created", p);
    free(err);
    th_tmpdir_free(dir);
}

Test(outputs, a_directory_given_as_the_report_file_fails_at_once, .timeout = 30)
{
    char *dir = th_tmpdir();
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "$B " TRAIN " --epochs 100000 --report %s", dir);
    char *out, *err;
    int rc = th_sh(cmd, &out, &err);
    cr_assert_eq(rc, 3, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "--report") && strstr(err, "directory"), "%s", err);
    cr_assert_null(strstr(out, "Training"), "%s", out);
    free(out);
    free(err);
    /* --dump-grads too (it trains one step, then writes) */
    snprintf(cmd, sizeof cmd, "$B " TRAIN " --dump-grads %s --report %s/nope/r.json", dir, dir);
    rc = th_sh(cmd, &out, &err);
    cr_assert_eq(rc, 3, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "--dump-grads") && strstr(err, "--report") && th_count_messages(err) == 2, "%s", err);
    cr_assert_null(strstr(out, "Training"), "%s", out);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

/* ---- atomic writes keep symlinks, devices and FIFOs -------------------------------- */

Test(outputs, report_through_a_symlink_replaces_the_target_not_the_link)
{
    char *dir = th_tmpdir();
    char *real = th_write(dir, "real.json", "old");
    char link[4300], cmd[8192];
    snprintf(link, sizeof link, "%s/link.json", dir);
    cr_assert_eq(symlink("real.json", link), 0);
    snprintf(cmd, sizeof cmd, "$B --device cpu --quiet --epochs 0 --report %s", link);
    char *err;
    cr_assert_eq(th_sh(cmd, NULL, &err), 0, "%s", err);
    struct stat sb;
    cr_assert_eq(lstat(link, &sb), 0);
    cr_assert(S_ISLNK(sb.st_mode), "the symlink was replaced by a file");
    cJSON *r = load_report(real);
    cr_assert(cJSON_GetObjectItem(r, "schema_version"));
    cJSON_Delete(r);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", real);
    cr_assert_neq(access(tmp, F_OK), 0, "temporary file left");
    free(err);
    free(real);
    th_tmpdir_free(dir);
}

Test(outputs, checkpoint_symlink_is_written_through)
{
    char *dir = th_tmpdir();
    char cmd[8192], p[4300];
    snprintf(p, sizeof p, "%s/ck", dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    /* a link to where the user keeps checkpoints, not written yet (an
     * existing checkpoint in the folder would be refused without --resume) */
    char real[4300];
    snprintf(real, sizeof real, "%s/kept.safetensors", dir);
    snprintf(p, sizeof p, "%s/ck/last.safetensors", dir);
    cr_assert_eq(symlink(real, p), 0);
    snprintf(cmd, sizeof cmd, "$B " TRAIN " --quiet --checkpoint-dir %s/ck", dir);
    char *err;
    int rc = th_sh(cmd, NULL, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    struct stat sb;
    cr_assert_eq(lstat(p, &sb), 0);
    cr_assert(S_ISLNK(sb.st_mode), "last.safetensors is no longer a symlink");
    cr_assert_eq(stat(real, &sb), 0);
    cr_assert_gt(sb.st_size, 1000, "the target was not written");
    free(err);
    th_tmpdir_free(dir);
}

Test(outputs, report_into_a_fifo_is_written_directly, .timeout = 60)
{
    char *dir = th_tmpdir();
    char fifo[4300], cmd[8192], got[4300];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(got, sizeof got, "%s/got.json", dir);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    snprintf(cmd, sizeof cmd,
             "timeout 20 cat %s > %s & P=$!; $B --device cpu --quiet --epochs 0 --report %s; R=$?; wait $P; exit $R",
             fifo, got, fifo);
    char *err;
    cr_assert_eq(th_sh(cmd, NULL, &err), 0, "%s", err);
    struct stat sb;
    cr_assert_eq(lstat(fifo, &sb), 0);
    cr_assert(S_ISFIFO(sb.st_mode), "the FIFO was replaced");
    cJSON *r = load_report(got);
    cJSON_Delete(r);
    free(err);
    th_tmpdir_free(dir);
}

/* dir/name as a character device made for the test (the system's own
 * /dev/null is not put at risk): minor 3 is null, 7 full. Skips the test
 * where mknod is not allowed. */
static void make_chardev(const char *dir, const char *name, unsigned minor, char *path, size_t n)
{
    snprintf(path, n, "%s/%s", dir, name);
    if (mknod(path, S_IFCHR | 0666, makedev(1, minor)) != 0) {
        th_rmtree(dir);
        cr_skip_test("mknod not permitted here");
    }
}

Test(outputs, report_and_html_to_a_character_device_keep_the_device)
{
    char *dir = th_tmpdir();
    char dev[4300], cmd[8192];
    make_chardev(dir, "null", 3, dev, sizeof dev);
    snprintf(cmd, sizeof cmd, "$B --device cpu --quiet --epochs 0 --report %s --html %s", dev, dev);
    char *err;
    cr_assert_eq(th_sh(cmd, NULL, &err), 0, "%s", err);
    struct stat sb;
    cr_assert_eq(lstat(dev, &sb), 0);
    cr_assert(S_ISCHR(sb.st_mode), "the device node was replaced by a regular file");
    free(err);
    th_tmpdir_free(dir);
}

Test(outputs, report_to_stdout_goes_to_the_descriptor)
{
    char *dir = th_tmpdir();
    char link[4300], cmd[8192];
    /* /dev/stdout itself is a link to /proc/self/fd/1; this one is the same
     * kind of link, in a folder of the test's own */
    snprintf(link, sizeof link, "%s/stdout", dir);
    cr_assert_eq(symlink("/proc/self/fd/1", link), 0);
    const char *paths[] = {"/proc/self/fd/1", "/dev/fd/1", link};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "$B --device cpu --quiet --epochs 0 --report %s", paths[i]);
        char *out, *err;
        int rc = th_sh(cmd, &out, &err);
        cr_assert_eq(rc, 0, "%s: exit %d: %s", paths[i], rc, err);
        cJSON *r = cJSON_Parse(out);
        cr_assert(r && cJSON_GetObjectItem(r, "schema_version"), "%s: stdout is not the report: %s", paths[i], out);
        cJSON_Delete(r);
        free(out);
        free(err);
    }
    struct stat sb;
    cr_assert_eq(lstat(link, &sb), 0);
    cr_assert(S_ISLNK(sb.st_mode), "the link was replaced");
    th_tmpdir_free(dir);
}

/* ---- write errors end the run with the path and the reason --------------------------- */

Test(outputs, metrics_write_error_fails_the_run)
{
    char *dir = th_tmpdir();
    char dev[4300], cmd[8192];
    make_chardev(dir, "full", 7, dev, sizeof dev);
    snprintf(cmd, sizeof cmd, "$B " TRAIN " --quiet --checkpoint-dir %s/ck --metrics %s", dir, dev);
    char *err;
    int rc = th_sh(cmd, NULL, &err);
    cr_assert_eq(rc, 3, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "--metrics") && strstr(err, dev) && strstr(err, "No space left"), "%s", err);
    free(err);
    th_tmpdir_free(dir);
}

Test(outputs, report_write_error_fails_the_run)
{
    char *dir = th_tmpdir();
    char dev[4300], cmd[8192];
    make_chardev(dir, "full", 7, dev, sizeof dev);
    snprintf(cmd, sizeof cmd, "$B --device cpu --quiet --epochs 0 --report %s", dev);
    char *err;
    int rc = th_sh(cmd, NULL, &err);
    cr_assert_eq(rc, 3, "exit %d: %s", rc, err);
    cr_assert(strstr(err, dev) && strstr(err, "No space left"), "%s", err);
    struct stat sb;
    cr_assert_eq(lstat(dev, &sb), 0);
    cr_assert(S_ISCHR(sb.st_mode));
    free(err);
    th_tmpdir_free(dir);
}

Test(outputs, stdout_write_error_fails_the_run)
{
    static const char *const runs[] = {"$B --device cpu --epochs 0 > /dev/full", "$B --help > /dev/full",
                                       "$B --version > /dev/full", "$B --list-devices > /dev/full"};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char *err;
        int rc = th_sh(runs[i], NULL, &err);
        cr_assert_neq(rc, 0, "%s: exit 0", runs[i]);
        cr_assert(strstr(err, "mpsdiag: ") && strstr(err, "stdout") && strstr(err, "No space left"), "%s: %s",
                  runs[i], err);
        free(err);
    }
}

/* ---- reports are valid UTF-8 ------------------------------------------------------------ */

Test(outputs, invalid_utf8_in_a_layer_name_is_refused_with_its_path)
{
    char *dir = th_tmpdir();
    char *m = th_write(dir, "bad.json",
                       "{\"name\": \"bad\", \"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],\n"
                       " \"layers\": [{\"name\": \"flat\", \"type\": \"flatten\"},\n"
                       "  {\"name\": \"fc\\u00e9\xff\xfe\", \"type\": \"linear\", \"out\": 10}]}\n");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "$B --device cpu --quiet --epochs 0 --model %s --report %s/r.json", m, dir);
    char *err;
    int rc = th_sh(cmd, NULL, &err);
    cr_assert_eq(rc, 3, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "layers[1].name") && strstr(err, "UTF-8"), "%s", err);
    char p[4300];
    snprintf(p, sizeof p, "%s/r.json", dir);
    cJSON *r = load_report(p);
    cJSON_Delete(r);
    free(err);
    free(m);
    th_tmpdir_free(dir);
}

Test(outputs, paths_with_invalid_utf8_give_a_valid_report)
{
    char *dir = th_tmpdir();
    /* a model file without a "name" (the model is named after the file) and a
     * checkpoint folder, both with bytes that are not UTF-8 */
    char mpath[4300];
    snprintf(mpath, sizeof mpath, "%s/m\xff\xc3.json", dir);
    FILE *f = fopen(mpath, "w");
    cr_assert(f);
    fputs("{\"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],\n"
          " \"layers\": [{\"name\": \"flat\", \"type\": \"flatten\"}, {\"name\": \"fc\", \"type\": \"linear\", \"out\": 10}]}\n",
          f);
    fclose(f);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "$B " TRAIN " --quiet --model '%s' --checkpoint-dir '%s/ck\xe9' --report %s/r.json", mpath,
             dir, dir);
    char *err;
    int rc = th_sh(cmd, NULL, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    char p[4300];
    snprintf(p, sizeof p, "%s/r.json", dir);
    cJSON *r = load_report(p);
    const cJSON *best = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "training"), "best");
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(best, "path")), "training.best.path missing");
    cr_assert(strstr(cJSON_GetObjectItem(best, "path")->valuestring, "ck\xef\xbf\xbd"),
              "the bad byte is replaced by U+FFFD: %s", cJSON_GetObjectItem(best, "path")->valuestring);
    cJSON_Delete(r);
    free(err);
    th_tmpdir_free(dir);
}
