/* test_progress.c - the progress line: its rendering (widths, counts, rate,
 * ETA, nesting), and the binary driven through a pseudo-terminal: progress
 * redrawn in place with "\r" there, nothing of it through a pipe, with
 * NO_COLOR or with --quiet. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "core/log.h"
#include "core/progress.h"
#include "core/timer.h"
#include "helpers.h"

/* ---- rendering ------------------------------------------------------------------ */

static char line[512];

/* Rendering is checked without drawing (the test runner's own output may be
 * a terminal). */
static void quiet(void)
{
    md_log_init(MD_QUIET);
    md_progress_reset();
}

static const char *render_at(int width, double dt)
{
    md_progress_render(line, sizeof line, width, md_now() + dt);
    return line;
}

Test(progress, counts_rate_eta_and_bar, .init = quiet)
{
    int pg = md_progress_begin("training steps", 50, "steps");
    cr_assert_gt(pg, 0);
    md_progress_update(10);
    const char *s = render_at(99, 2.0); /* 10 steps in ~2 s: 5 steps/s, 40 left: 0:08 */
    cr_assert(strstr(s, "training steps ["), "%s", s);
    cr_assert(strstr(s, "10/50 steps"), "%s", s);
    cr_assert(strstr(s, "steps/s"), "%s", s);
    cr_assert(strstr(s, "ETA 0:08") || strstr(s, "ETA 0:07") || strstr(s, "ETA 0:09"), "%s", s);
    cr_assert(strstr(s, "[####................]"), "a fifth of the bar: %s", s);
    md_progress_end(pg);
    cr_assert_eq(md_progress_render(line, sizeof line, 99, md_now()), 0, "no phase, no line");
}

Test(progress, unknown_total_and_budget, .init = quiet)
{
    int pg = md_progress_begin("plan and bind", 0, NULL);
    cr_assert_str_eq(render_at(99, 1.0), "plan and bind", "nothing counted: the label alone");
    md_progress_end(pg);
    pg = md_progress_begin("batch finder", 0, "tries");
    md_progress_budget(90);
    md_progress_update(3);
    const char *s = render_at(99, 30.0);
    cr_assert(strstr(s, "3 tries"), "%s", s);
    cr_assert(strstr(s, "ETA <=1:00"), "what is left of the budget: %s", s);
    md_progress_total(7); /* now known: the count decides (4 more at 0.1/s is more than the budget) */
    s = render_at(99, 30.0);
    cr_assert(strstr(s, "3/7 tries"), "%s", s);
    cr_assert(strstr(s, "ETA 0:40"), "4 tries at 0.1/s, within the budget: %s", s);
    md_progress_end(pg);
}

Test(progress, nested_phases_and_overall_eta, .init = quiet)
{
    int outer = md_progress_begin("models", 4, "models");
    md_progress_label("model small_cnn");
    md_progress_update(1);
    int inner = md_progress_begin("epoch 1/2", 100, "steps");
    md_progress_note("loss 0.5000");
    md_progress_rate(812, "samples");
    md_progress_update(50);
    const char *s = render_at(99, 10.0);
    cr_assert(strstr(s, "model small_cnn 2/4 > epoch 1/2 "), "outer item and inner phase: %s", s);
    cr_assert_null(strchr(s, '['), "no room for a bar in 99 columns: %s", s);
    cr_assert(strstr(s, "50/100 steps  loss 0.5000  812 samples/s  ETA 0:10"), "%s", s);
    cr_assert(strstr(s, "(all ~0:30)"), "one of four models in 10 s: %s", s);
    s = render_at(112, 10.0);
    const char *bar = strstr(s, "epoch 1/2 [");
    cr_assert(bar, "a bar where there is room: %s", s);
    size_t bw = strcspn(bar + 11, "]");
    cr_assert(bw >= 6 && bw < 20, "a shorter bar where the line is full: %s", s);
    /* an inner phase left open by an error path goes with its outer one */
    (void)md_progress_begin("inference", 10, "batches");
    md_progress_end(inner);
    s = render_at(99, 1.0);
    cr_assert(strstr(s, "model small_cnn [") == s, "the outer phase alone again: %s", s);
    cr_assert(strstr(s, "1/4 models"), "%s", s);
    cr_assert_null(strstr(s, "epoch"), "%s", s);
    cr_assert_null(strstr(s, "inference"), "%s", s);
    md_progress_end(outer);
    cr_assert_eq(md_progress_render(line, sizeof line, 99, md_now()), 0);
}

Test(progress, fits_the_width_and_keeps_the_counts, .init = quiet)
{
    int a = md_progress_begin("a rather long outer phase name that goes on and on", 3, "runs");
    int b = md_progress_begin("batch sweep, batch 65536, measured with a long explanation", 120, "steps");
    md_progress_update(60);
    for (int w = 20; w <= 100; w += 7) {
        size_t n = md_progress_render(line, sizeof line, w, md_now() + 5);
        cr_assert_leq(n, (size_t)w, "width %d: %zu columns: %s", w, n, line);
        cr_assert_eq(n, strlen(line));
        if (w >= 60) cr_assert(strstr(line, "60/120 steps"), "width %d: counts kept: %s", w, line);
        if (w >= 60) cr_assert(strstr(line, "ETA "), "width %d: %s", w, line);
    }
    /* width over 100 is the caller's; labels cut on a character boundary */
    md_progress_label("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                      "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                      "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9");
    md_progress_render(line, sizeof line, 99, md_now() + 5);
    for (const unsigned char *p = (const unsigned char *)line; *p; p++)
        if (*p == 0xc3) cr_assert_eq(p[1], 0xa9, "a cut UTF-8 sequence: %s", line);
    md_progress_end(b);
    md_progress_end(a);
}

/* ---- the binary through a pseudo-terminal ------------------------------------------- */

/* Runs mpsdiag ARGS on a pseudo-terminal of `cols` columns (raw: no "\n" to
 * "\r\n", so every "\r" is the program's own) with `env` ("NAME=VALUE" or
 * "-NAME" to unset, NULL-terminated); returns its exit code, the output in
 * *out (malloc). */
static int run_pty(const char *args, int cols, const char *const *env, char **out)
{
    char buf[4096], *argv[64];
    th_argv(buf, sizeof buf, args, argv);
    struct termios tio;
    memset(&tio, 0, sizeof tio);
    cfmakeraw(&tio);
    struct winsize ws = {.ws_row = 40, .ws_col = (unsigned short)cols};
    int master = -1;
    fflush(NULL);
    pid_t pid = forkpty(&master, NULL, &tio, &ws);
    cr_assert_neq(pid, -1, "forkpty: %s", strerror(errno));
    if (pid == 0) {
        setenv("TERM", "xterm", 1);
        unsetenv("NO_COLOR");
        for (; env && *env; env++) {
            if ((*env)[0] == '-') unsetenv(*env + 1);
            else putenv((char *)*env);
        }
        execv(th_bin(), argv);
        _exit(127);
    }
    size_t cap = 1 << 16, len = 0;
    char *o = malloc(cap);
    double t0 = md_now();
    for (;;) {
        struct pollfd pf = {.fd = master, .events = POLLIN};
        int r = poll(&pf, 1, 1000);
        if (r == 0) {
            if (md_now() - t0 > 300) break; /* a hang fails below on the exit code */
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (len + 4096 + 1 > cap) o = realloc(o, cap *= 2);
        ssize_t k = read(master, o + len, 4096);
        if (k <= 0) break; /* EIO: the terminal's other end closed */
        len += (size_t)k;
    }
    o[len] = '\0';
    close(master);
    int status = 0;
    if (md_now() - t0 > 300) kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    *out = o;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Each progress drawing ("\r" text "\033[K") of s in turn: its text into seg;
 * returns the position after it, or NULL when none is left. A bare "\r\033[K"
 * (a cleared line) counts too, with an empty text. */
static const char *next_drawing(const char *s, char *seg, size_t n)
{
    for (const char *p = strchr(s, '\r'); p; p = strchr(p + 1, '\r')) {
        const char *e = strstr(p, "\033[K");
        const char *nl = strchr(p, '\n');
        if (!e || (nl && nl < e)) continue;
        size_t l = (size_t)(e - p - 1);
        snprintf(seg, n, "%.*s", (int)(l < n ? l : n - 1), p + 1);
        return e + 3;
    }
    return NULL;
}

struct seen {
    int drawings, cleared, max_cols;
    int train_eta, epoch_bar, validation, bench_steps, bench_eta;
};

static struct seen scan(const char *out)
{
    struct seen v;
    memset(&v, 0, sizeof v);
    char seg[1024];
    for (const char *p = next_drawing(out, seg, sizeof seg); p; p = next_drawing(p, seg, sizeof seg)) {
        int cols = (int)strlen(seg);
        if (!seg[0]) {
            v.cleared++;
            continue;
        }
        v.drawings++;
        if (cols > v.max_cols) v.max_cols = cols;
        int a, b, m, s2;
        const char *ep = strstr(seg, "epoch 1/1 [");
        if (ep) v.epoch_bar++;
        /* "epoch 1/1 [###...] 5/30 steps  loss 2.3  830 samples/s  ETA 0:01" */
        if (ep && strstr(seg, "samples/s") && strstr(seg, " steps  loss ")) {
            const char *e = strstr(seg, "ETA ");
            const char *c = strstr(seg, "] ");
            if (e && c && sscanf(e, "ETA %d:%d", &m, &s2) == 2 && sscanf(c, "] %d/%d steps", &a, &b) == 2 && b == 30 &&
                a >= 1 && a <= 30)
                v.train_eta++;
        }
        if (strstr(seg, "validation")) v.validation++;
        const char *bs = strstr(seg, "benchmark > training steps [");
        if (bs) {
            v.bench_steps++;
            const char *e = strstr(seg, "ETA ");
            if (e && sscanf(e, "ETA %d:%d", &m, &s2) == 2 && strstr(seg, "/40 steps")) v.bench_eta++;
        }
    }
    return v;
}

/* A short training and benchmark; its checkpoints into a folder of its own
 * (dir: th_tmpdir). */
static const char *job(char *buf, size_t n, const char *dir, const char *extra)
{
    snprintf(buf, n,
             "--device cpu --dataset synthetic --model small_cnn --threads 2 --batch-size 32 --epochs 1 --steps 30 "
             "--benchmark --bench-iters 40 --warmup-iters 1 --checkpoint-dir %s%s",
             dir, extra);
    return buf;
}

Test(progress, pty_training_and_benchmark_redraw_in_place, .timeout = 300)
{
    char *out = NULL, args[1024], *dir = th_tmpdir();
    int rc = run_pty(job(args, sizeof args, dir, ""), 100, NULL, &out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    struct seen v = scan(out);
    cr_assert_gt(v.drawings, 5, "progress drawn and redrawn in place: %d drawings\n%s", v.drawings, out);
    cr_assert_gt(v.epoch_bar, 0, "the training bar:\n%s", out);
    cr_assert_gt(v.train_eta, 0, "the training bar's in-epoch ETA (done/total, samples/s, ETA m:ss):\n%s", out);
    cr_assert_gt(v.validation, 0, "validation shows its progress:\n%s", out);
    cr_assert_gt(v.bench_steps, 0, "the benchmark's timed steps:\n%s", out);
    cr_assert_gt(v.bench_eta, 0, "the benchmark's done/total and ETA:\n%s", out);
    cr_assert_leq(v.max_cols, 99, "within a 100-column terminal: %d", v.max_cols);
    cr_assert_gt(v.cleared, 0, "the line is cleared before the report goes on");
    cr_assert(strstr(out, "== Benchmark"), "the report itself is still there");
    free(out);

    /* a narrow terminal: narrower lines */
    rc = run_pty("--device cpu --dataset synthetic --model small_cnn --threads 2 --batch-size 16 --benchmark-only "
                 "--bench-iters 16 --warmup-iters 1",
                 50, NULL, &out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    v = scan(out);
    cr_assert_gt(v.drawings, 0, "%s", out);
    cr_assert_leq(v.max_cols, 49, "within a 50-column terminal: %d", v.max_cols);
    free(out);
    th_tmpdir_free(dir);
}

/* What must never be drawn: a "\r" redraw or an ETA. */
static void assert_no_progress(const char *how, const char *out)
{
    struct seen v = scan(out);
    cr_assert_eq(v.drawings, 0, "%s: no progress drawn, got %d drawings:\n%s", how, v.drawings, out);
    cr_assert_null(strchr(out, '\r'), "%s: no carriage return:\n%s", how, out);
    cr_assert_null(strstr(out, "ETA "), "%s: no ETA:\n%s", how, out);
}

Test(progress, pty_no_color_and_quiet_draw_nothing, .timeout = 300)
{
    char *out = NULL, args[1024], *dir = th_tmpdir();
    const char *const no_color[] = {"NO_COLOR=1", NULL};
    int rc = run_pty(job(args, sizeof args, dir, " --overwrite"), 100, no_color, &out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    assert_no_progress("NO_COLOR=1", out);
    cr_assert(strstr(out, "== Benchmark"), "the report is printed:\n%s", out);
    free(out);

    rc = run_pty(job(args, sizeof args, dir, " --overwrite --quiet"), 100, NULL, &out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    assert_no_progress("--quiet", out);
    free(out);
    th_tmpdir_free(dir);
}

Test(progress, pipe_draws_nothing, .timeout = 300)
{
    char *out = NULL, *err = NULL, args[1024], *dir = th_tmpdir();
    int rc = th_run(job(args, sizeof args, dir, ""), &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    assert_no_progress("stdout a file", out);
    assert_no_progress("stderr a file", err);
    cr_assert(strstr(out, "== Benchmark"), "the report is printed:\n%s", out);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}
