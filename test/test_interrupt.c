#define _GNU_SOURCE
/* test_interrupt.c - Ctrl-C and SIGTERM outside the training steps: model
 * loading, opening the dataset, validation, test scoring and the benchmark
 * stop cleanly with exit 130 and say where. The phases are reached through
 * the documented test hook MPSDIAG_TEST_INTERRUPT=<phase>[:TERM] (the
 * process signals itself when the phase's loop starts), and one test sends a
 * real SIGINT from outside once the benchmark has said it started. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/json.h"
#include "core/signals.h"
#include "helpers.h"

#define TRAIN "--device cpu --threads 1 --dataset synthetic --max-samples 64 --batch-size 32 --num-workers 0 --steps 1"

struct phase_case {
    const char *hook;   /* MPSDIAG_TEST_INTERRUPT */
    const char *args;
    const char *needle; /* in the error message */
};

static cJSON *report_of(const char *dir)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/r.json", dir);
    cJSON *r = NULL;
    cr_assert_eq(md_json_load_file(p, &r), MD_OK, "%s", md_errmsg());
    return r;
}

Test(interrupt, every_phase_stops_with_130_and_says_where, .timeout = 120)
{
    static const struct phase_case cases[] = {
        {"model", "--device cpu --epochs 0", "loading the model"},
        {"data", TRAIN, "opening the dataset"},
        {"validation", TRAIN " --epochs 3", "validation"},
        {"validation:TERM", TRAIN " --epochs 3", "validation"},
        {"test", TRAIN, "test split"},
        {"benchmark", "--device cpu --threads 1 --benchmark-only --bench-iters 5 --warmup-iters 1 --batch-size 8 "
                      "--dataset synthetic",
         "benchmark"},
        {"benchmark:TERM", "--device cpu --threads 1 --benchmark-only --bench-iters 5 --warmup-iters 1 --batch-size 8 "
                           "--dataset synthetic",
         "benchmark"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct phase_case *c = &cases[i];
        char *dir = th_tmpdir();
        char args[4400], *out = NULL, *err = NULL;
        snprintf(args, sizeof args, "%s --checkpoint-dir %s/ck --report %s/r.json", c->args, dir, dir);
        setenv("MPSDIAG_TEST_INTERRUPT", c->hook, 1);
        int rc = th_run(args, &out, &err);
        unsetenv("MPSDIAG_TEST_INTERRUPT");
        cr_assert_eq(rc, 130, "%s: exit %d\nstderr: %s", c->hook, rc, err);
        cr_assert(strstr(err, "mpsdiag: ") && strstr(err, "interrupted") && strstr(err, c->needle),
                  "%s: stderr: %s", c->hook, err);
        cJSON *r = report_of(dir);
        const cJSON *st = cJSON_GetObjectItem(r, "status");
        cr_assert_str_eq(cJSON_GetObjectItem(st, "result")->valuestring, "interrupted", "%s", c->hook);
        cr_assert_eq(cJSON_GetObjectItem(st, "exit_code")->valueint, 130);
        if (strncmp(c->hook, "validation", 10) == 0) {
            /* the epoch's steps are done: they are saved, and resuming works */
            char p[4400];
            snprintf(p, sizeof p, "%s/ck/last.safetensors", dir);
            cr_assert_eq(access(p, R_OK), 0, "%s: no checkpoint after an interrupted validation", c->hook);
            cr_assert(strstr(err, "--resume") || strstr(err, "last.safetensors"), "%s", err);
        }
        cJSON_Delete(r);
        free(out);
        free(err);
        th_tmpdir_free(dir);
    }
}

/* A real SIGINT, sent once the benchmark has printed that it started (no
 * sleeps): --bench-iters is far more than the test's time, so only the
 * signal can end the run. */
Test(interrupt, sigint_during_the_benchmark_from_outside, .timeout = 60)
{
    const char *bin = getenv("MPSDIAG_BIN");
    if (!bin) bin = "build/mpsdiag";
    char *dir = th_tmpdir();
    char errp[4300];
    snprintf(errp, sizeof errp, "%s/err", dir);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(e, STDERR_FILENO);
        int in = open("/dev/null", O_RDONLY);
        dup2(in, STDIN_FILENO);
        close(fds[0]);
        execl(bin, bin, "--device", "cpu", "--threads", "1", "--benchmark-only", "--bench-iters", "1000000",
              "--warmup-iters", "1", "--batch-size", "8", "--dataset", "synthetic", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[4096];
    int started = 0;
    while (!started && fgets(line, sizeof line, f)) started = strstr(line, "Benchmarking") != NULL;
    cr_assert(started, "the benchmark never said it started");
    cr_assert_eq(kill(pid, SIGINT), 0);
    while (fgets(line, sizeof line, f)) {
    }
    fclose(f);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 130, "status %d", status);
    FILE *ef = fopen(errp, "r");
    char err[8192] = "";
    size_t n = fread(err, 1, sizeof err - 1, ef);
    err[n] = '\0';
    fclose(ef);
    cr_assert(strstr(err, "interrupted") && strstr(err, "benchmark"), "stderr: %s", err);
    cr_assert_null(strstr(err, "twice"), "one signal was enough: %s", err);
    th_tmpdir_free(dir);
}

/* A second Ctrl-C while a checkpoint is written waits for it (the run then
 * stops as the first asked); outside the write it exits at once. */
Test(interrupt, second_signal_during_a_checkpoint_write_waits_for_it)
{
    md_signals_install();
    md_interrupt_set(0);
    raise(SIGINT);
    cr_assert_eq(md_interrupted(), 1);
    md_signals_hold(1);
    raise(SIGINT); /* would _exit without the hold */
    md_signals_hold(0);
    cr_assert_eq(md_interrupted(), 2, "still running after the second signal during the write");
    md_interrupt_set(0);
}

/* A rank of an MPI job takes SIGUSR2 (mpirun forwards it) as a stop request
 * and a second signal as the same request (mpirun and the terminal may both
 * pass one on). */
Test(interrupt, a_rank_takes_sigusr2_and_a_repeated_signal_as_one_request)
{
    md_signals_install_rank();
    md_interrupt_set(0);
    raise(SIGUSR2);
    cr_assert_eq(md_interrupted(), 1);
    raise(SIGTERM);
    cr_assert_eq(md_interrupted(), 2, "still running after the second signal");
    md_interrupt_set(0);
}
