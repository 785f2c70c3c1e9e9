/* test_term_width.c - the terminal output of the built binary: every line of
 * stdout and stderr fits 100 columns (code points) on representative runs;
 * layer tables collapse by block unless --verbose; --help fits 80 columns and
 * lists exactly the README's flags; --quiet keeps only the summary line;
 * JPEG, BLAS and plural wording. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/wrap.h"
#include "helpers.h"

/* The widest line of text (code points); its start in *where. */
static int widest(const char *text, const char **where, int *len)
{
    int best = 0;
    *where = text;
    *len = 0;
    for (const char *p = text; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        int w = md_text_width(p, n);
        if (w > best) {
            best = w;
            *where = p;
            *len = (int)n;
        }
        p = e ? e + 1 : p + n;
    }
    return best;
}

static void assert_fits(const char *what, const char *args, const char *text, int width)
{
    const char *at;
    int n, w = widest(text, &at, &n);
    cr_expect(w <= width, "%s of `mpsdiag %s`: a line of %d columns (at most %d):\n%.*s", what, args, w, width, n,
              at);
}

/* Runs `mpsdiag ARGS` (TMP in args replaced by a fresh directory) and checks
 * the exit code and that stdout and stderr fit 100 columns. */
static void check_run(const char *args, int want_rc)
{
    char *dir = th_tmpdir(), full[2048], *o = full;
    for (const char *p = args; *p && o < full + sizeof full - 200;) {
        if (strncmp(p, "TMP", 3) == 0) {
            o += snprintf(o, 200, "%s", dir);
            p += 3;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    char *out = NULL, *err = NULL;
    int rc = th_run(full, &out, &err);
    cr_expect_eq(rc, want_rc, "`mpsdiag %s`: exit %d (wanted %d); stderr:\n%s", args, rc, want_rc, err);
    assert_fits("stdout", args, out, MD_TERM_WIDTH);
    assert_fits("stderr", args, err, MD_TERM_WIDTH);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

#define CPU "--device cpu --threads 2 --num-workers 0 --checkpoint-dir TMP/ck "

Test(term_width, default_training_run, .timeout = 60)
{
    check_run(CPU "--dataset synthetic --max-samples 64 --batch-size 16 --steps 2 --benchmark --bench-iters 2 "
                  "--warmup-iters 1",
              0);
}

Test(term_width, benchmark_sweep_and_batch_finder, .timeout = 120)
{
    check_run(CPU "--dataset synthetic --model small_cnn --max-samples 64 --benchmark-only --batch-sweep 8,16 "
                  "--find-batch-size --memory-fraction 0.0004 --bench-iters 2 --warmup-iters 1",
              0);
}

Test(term_width, list_devices_help_and_version)
{
    check_run("--list-devices", 0);
    check_run("--help", 0);
    check_run("-h", 0);
    check_run("--version", 0);
}

Test(term_width, two_model_diagnostics_run, .timeout = 120)
{
    check_run(CPU "--models base_multi_channel,custom_cnn --reduce-architecture --dataset synthetic --max-samples 8 "
                  "--batch-size 4 --steps 1 --epochs 1 --bench-iters 1 --warmup-iters 0",
              0);
}

Test(term_width, time_series_run, .timeout = 60)
{
    check_run(CPU "--dataset csv --data-dir data/timeseries-sample --seq-len 24 --pred-len 12 --max-samples 64 "
                  "--batch-size 16 --steps 2",
              0);
}

Test(term_width, images_csv_run, .timeout = 60)
{
    check_run(CPU "--dataset images-csv --data-dir data/green-cover-sample --model "
                  "configs/models/tiled_two_stream_tiny.json --target-cols green_cover,brightness,blue_cover "
                  "--max-samples 16 --batch-size 4 --steps 1",
              0);
}

Test(term_width, verbose_run_with_full_layer_table, .timeout = 60)
{
    check_run(CPU "--verbose --dataset synthetic --max-samples 16 --batch-size 8 --steps 1", 0);
}

/* Errors: stderr here is a pipe, so each error is one line (wrapped only on
 * a terminal), the rest of the output within 100 columns. */
static void check_error(const char *args, int want_rc)
{
    char *out = NULL, *err = NULL;
    int rc = th_run(args, &out, &err);
    cr_expect_eq(rc, want_rc, "`mpsdiag %s`: exit %d (wanted %d); stderr:\n%s", args, rc, want_rc, err);
    cr_expect_eq(th_count_lines(err), 1, "`mpsdiag %s`: the error is not one line:\n%s", args, err);
    cr_expect(strncmp(err, "mpsdiag: ", 9) == 0, "%s", err);
    assert_fits("stdout", args, out, MD_TERM_WIDTH);
    free(out);
    free(err);
}

Test(term_width, errors)
{
    check_error("--bogus", 2);
    check_error("--batch-size 0", 2);
    check_error("--config /nonexistent.json", 3);
    check_error("--device cpu:3 --quiet", 4);
    check_error(CPU "--dataset csv --data-dir /nonexistent-dir", 3);
    check_error(CPU "--model /nonexistent-model.json", 3);
}

/* ---- layer tables ---------------------------------------------------------- */

/* Rows of the model's layer table: lines between the "layer" header and the
 * line after it that does not start with two spaces and a non-space. */
static int table_rows(const char *out)
{
    const char *p = strstr(out, "\n  layer ");
    cr_assert(p, "no layer table:\n%s", out);
    p = strchr(p + 1, '\n') + 1;
    int rows = 0;
    while (*p == ' ' && p[1] == ' ' && p[2] != ' ' && p[2] != '(') {
        rows++;
        p = strchr(p, '\n');
        if (!p) break;
        p++;
    }
    return rows;
}

Test(layer_table, collapsed_by_block_unless_verbose, .timeout = 60)
{
    const char *args = "--device cpu --threads 2 --model resnet50 --dataset synthetic --epochs 0 --max-samples 8 "
                       "--num-workers 0";
    char *out = NULL, full[512];
    cr_assert_eq(th_run(args, &out, NULL), 0);
    int collapsed = table_rows(out);
    cr_expect(strstr(out, "--verbose lists every layer"), "%s", out);
    /* resnet50's stage layer3 (six bottleneck blocks) is one row with its
     * layer count and last output */
    cr_expect(strstr(out, "  layer3 "), "%s", out);
    cr_expect(strstr(out, " 62 layers ") && strstr(out, "1024x14x14"), "%s", out);
    free(out);
    snprintf(full, sizeof full, "%s --verbose", args);
    cr_assert_eq(th_run(full, &out, NULL), 0);
    int all = table_rows(out);
    cr_expect(strstr(out, "  layer1.0.conv1 "), "%s", out);
    free(out);
    cr_expect(all > 150, "--verbose lists %d layers", all);
    cr_expect(collapsed < 40, "collapsed table has %d rows", collapsed);
}

/* ---- --help against the README ----------------------------------------------- */

/* Adds every "--flag" of text[0..n) to set (a "\n"-separated list). */
static void add_flags(char *set, size_t cap, const char *text, size_t n)
{
    for (size_t i = 0; i + 2 < n; i++) {
        if (text[i] != '-' || text[i + 1] != '-' || !islower((unsigned char)text[i + 2])) continue;
        if (i > 0 && (isalnum((unsigned char)text[i - 1]) || text[i - 1] == '-')) continue;
        size_t j = i + 2;
        while (j < n && (islower((unsigned char)text[j]) || isdigit((unsigned char)text[j]) || text[j] == '-')) j++;
        char flag[64];
        snprintf(flag, sizeof flag, "\n%.*s\n", (int)(j - i), text + i);
        if (!strstr(set, flag) && strlen(set) + strlen(flag) + 1 < cap) strcat(set, flag + 1);
        i = j;
    }
}

/* Flags in the README's flags table (its "flag" column: every backticked
 * --flag; the line starts "| group | flag |"). */
static void readme_flags(char *set, size_t cap)
{
    char *md = th_slurp("README.md", NULL);
    cr_assert(md, "cannot read README.md");
    char *p = strstr(md, "| group | flag | meaning | default |");
    cr_assert(p, "README has no flags table");
    set[0] = '\n';
    set[1] = '\0';
    for (p = strchr(p, '\n') + 1; *p == '|'; p = strchr(p, '\n') + 1) {
        char *eol = strchr(p, '\n');
        /* the cells, split at '|' not escaped as "\|" */
        char *cell[8];
        int nc = 0;
        for (char *q = p + 1; q < eol && nc < 8; q++) {
            cell[nc++] = q;
            while (q < eol && !(*q == '|' && q[-1] != '\\')) q++;
        }
        cr_expect_eq(nc, 4, "README flags table: a row of %d cells: %.*s", nc, (int)(eol - p), p);
        if (nc > 1 && strncmp(cell[1], "---", 3) != 0) {
            char *end = strchr(cell[1], '|');
            while (end && end[-1] == '\\') end = strchr(end + 1, '|');
            add_flags(set, cap, cell[1], (size_t)(end - cell[1]));
        }
        if (!eol) break;
    }
    free(md);
}

/* Flags --help lists: every line whose first word starts with "--". */
static void help_flags(const char *out, char *set, size_t cap)
{
    set[0] = '\n';
    set[1] = '\0';
    for (const char *p = out; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 4 && p[0] == ' ' && p[1] == ' ' && p[2] == '-' && p[3] == '-') {
            size_t w = 2;
            while (w < n && p[w] != ' ') w++;
            add_flags(set, cap, p + 2, w - 2);
        }
        p = e ? e + 1 : p + n;
    }
}

/* Each "\n"-separated entry of a missing from b, into miss. */
static void missing(const char *a, const char *b, char *miss, size_t cap)
{
    miss[0] = '\0';
    for (const char *p = a + 1; *p;) {
        const char *e = strchr(p, '\n');
        char key[80];
        snprintf(key, sizeof key, "\n%.*s\n", (int)(e - p), p);
        if (!strstr(b, key) && strlen(miss) + strlen(key) < cap) strcat(miss, key + 1);
        p = e + 1;
    }
}

Test(help, lists_exactly_the_readme_flags_in_80_columns)
{
    static char readme[8192], help[8192], miss[4096];
    char *out = NULL;
    cr_assert_eq(th_run("--help", &out, NULL), 0);
    assert_fits("stdout", "--help", out, 80);
    readme_flags(readme, sizeof readme);
    help_flags(out, help, sizeof help);
    cr_assert(strstr(help, "\n--batch-size\n") && strstr(readme, "\n--batch-size\n"), "help:%s\nreadme:%s", help, readme);
    missing(help, readme, miss, sizeof miss);
    cr_expect_str_empty(miss, "in --help but not in the README's flags table:\n%s", miss);
    missing(readme, help, miss, sizeof miss);
    cr_expect_str_empty(miss, "in the README's flags table but not in --help:\n%s", miss);
    /* grouped */
    const char *groups[] = {"Device:", "Model:", "Precision:", "Data:", "Training:", "Benchmark:", "Report:"};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
        cr_expect(strstr(out, groups[i]), "no group %s", groups[i]);
    free(out);
}

Test(help, short_h_is_help)
{
    char *a = NULL, *b = NULL;
    cr_assert_eq(th_run("--help", &a, NULL), 0);
    cr_assert_eq(th_run("-h", &b, NULL), 0);
    cr_expect_str_eq(a, b);
    free(b);
    /* the value of a flag stays a value */
    cr_expect_neq(th_run("--target -h --device cpu:9", NULL, &b), 0);
    cr_expect_null(strstr(b, "Usage"));
    free(a);
    free(b);
}

/* ---- --quiet --------------------------------------------------------------------- */

Test(quiet, only_the_summary_line, .timeout = 60)
{
    char *dir = th_tmpdir(), args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args,
             "--device cpu --threads 2 --quiet --dataset synthetic --max-samples 32 --batch-size 16 --steps 1 "
             "--num-workers 0 --checkpoint-dir %s/ck",
             dir);
    cr_assert_eq(th_run(args, &out, &err), 0, "%s", err);
    cr_expect_eq(th_count_lines(out), 1, "%s", out);
    cr_expect(strncmp(out, "Done in ", 8) == 0, "%s", out);
    cr_expect(strstr(out, "cpu:0"), "%s", out);
    cr_expect_str_empty(err);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

/* ---- wording ---------------------------------------------------------------------- */

/* A JPEG folder of colour photographs for a gray 28x28 model: the image line
 * says they are decoded and resized (they are not stored at that size); the
 * BLAS line names OpenBLAS's kernel set as such; one worker is "1 worker". */
Test(wording, jpeg_image_blas_and_plurals, .timeout = 60)
{
    char *dir = th_tmpdir(), cmd[4096], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/j/train/a %s/j/train/b && cp data/green-cover-sample/images/00[0-3].jpg %s/j/train/a/ && "
             "cp data/green-cover-sample/images/01[0-3].jpg %s/j/train/b/ && $B --device cpu --threads 2 "
             "--dataset jpeg --data-dir %s/j --epochs 1 --steps 1 --batch-size 4 --num-workers 1 --benchmark "
             "--bench-iters 1 --warmup-iters 0 --checkpoint-dir %s/ck",
             dir, dir, dir, dir, dir, dir);
    cr_assert_eq(th_sh(cmd, &out, &err), 0, "%s", err);
    th_unwrap(out);
    cr_expect(strstr(out, "1 x 28 x 28: each file decoded to gray and resized to this"), "%s", out);
    cr_expect_null(strstr(out, "(stored)"), "%s", out);
    cr_expect(strstr(out, "kernel set;"), "%s", out);
    cr_expect_null(strstr(out, " kernels (GEMM"), "%s", out);
    cr_expect(strstr(out, "1 worker,") && strstr(out, "with 1 worker:"), "%s", out);
    cr_expect_null(strstr(out, "1 workers"), "%s", out);
    cr_expect_null(strstr(out, " 1 steps"), "%s", out);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}
