/* main.c - mpsdiag's entry point: parse, run, print the error, exit. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "app/job.h"
#include "app/launch.h"
#include "app/outputs.h"
#include "app/run_info.h"
#include "core/blas_core.h"
#include "core/dist.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/wrap.h"

/* "mpsdiag: <msg>" on stderr: one message, in lines of at most 100 columns
 * (a longer one continues under its text, indented). */
/* An error is one line for scripts and logs (stderr not a terminal); on a
 * terminal a long one wraps at 100 columns, continuation lines indented. */
static void print_error(const char *msg)
{
    char line[2048];
    snprintf(line, sizeof line, "mpsdiag: %s", msg);
    if (isatty(fileno(stderr))) md_wrap_line_at(stderr, line, strlen(line), MD_TERM_WIDTH, 4);
    else fprintf(stderr, "%s\n", line);
}

/* Whatever was printed must have reached stdout: a full disk or a closed
 * pipe behind it is an error (exit 3 unless the run already failed).
 * `werr`: errno after the printing, the reason of a write that failed then
 * (output longer than stdout's buffer fails before the final flush). */
static int finish_stdout(int rc, int werr)
{
    md_log_flush();
    int bad = ferror(stdout);
    int e0 = bad ? werr : 0;
    errno = 0;
    if (fflush(stdout) != 0) bad = 1;
    int e = errno ? errno : e0;
    if (fclose(stdout) != 0) {
        bad = 1;
        if (!e) e = errno;
    }
    if (!bad) return rc;
    if (e) fprintf(stderr, "mpsdiag: stdout: write failed: %s\n", strerror(e));
    else fprintf(stderr, "mpsdiag: stdout: write failed\n");
    return rc ? rc : md_status_exit_code(MD_ERR_IO);
}

int main(int argc, char **argv)
{
    md_options opts;
    md_options_defaults(&opts);
    md_run_info_set_command_line(argc, argv);
    md_status st = md_options_parse(&opts, argc, argv);
    if (st == MD_OK) st = md_options_validate(&opts);
    if (st != MD_OK) {
        print_error(md_errmsg());
        return md_status_exit_code(st);
    }
    if (opts.help) {
        errno = 0;
        md_options_usage(stdout);
        return finish_stdout(0, errno);
    }
    if (opts.version) {
        errno = 0;
        md_options_version(stdout);
        return finish_stdout(0, errno);
    }
    /* OpenBLAS's kernels for this CPU where it picked slower ones: this
     * program starts again with OPENBLAS_CORETYPE set (before any work, so
     * the ranks and sub-runs inherit it) */
    md_blas_core_choose(argv);
    /* --gpus / --devices: the ranks start under mpirun (returns on failure) */
    if ((st = md_launch_reexec(&opts, argc, argv)) != MD_OK) {
        print_error(md_errmsg());
        return md_status_exit_code(st);
    }
    /* before MPI's start: a Ctrl-C or mpirun's SIGTERM during it (a loaded
     * machine takes seconds) stops the run with its message, never kills it
     * silently; again after it, in case the library took the signals */
    if (md_dist_launched()) md_signals_install_rank();
    else md_signals_install();
    if ((st = md_dist_init()) != MD_OK || (st = md_launch_rank_setup(&opts)) != MD_OK) {
        if (md_dist_size() > 1) md_dist_abort(md_status_exit_code(st), md_errmsg());
        print_error(md_errmsg());
        return md_status_exit_code(st);
    }
    if (md_dist_size() > 1) md_log_plain();
    if (md_dist_rank() > 0) {
        /* rank 0 prints and writes the report files; the others stay quiet
         * but for their errors */
        opts.report[0] = opts.html[0] = opts.junit[0] = '\0';
        if (!freopen("/dev/null", "w", stdout)) return md_status_exit_code(MD_ERR_IO);
    }
    /* every output path before any work: a bad one named now, not after a
     * whole training run (each on its own line) */
    struct md_output_problems bad;
    if (md_outputs_check(&opts, &bad) != MD_OK) {
        for (int i = 0; i < bad.n; i++) print_error(bad.msg[i]);
        if (md_dist_size() > 1) md_dist_abort(md_status_exit_code(MD_ERR_IO), NULL);
        return md_status_exit_code(MD_ERR_IO);
    }
    md_log_init((md_verbosity)opts.verbosity);
    if (md_dist_launched()) md_signals_install_rank();
    else md_signals_install();
    st = md_job_run(&opts);
    md_progress_clear(); /* no progress line left in front of an error (finish_stdout flushes) */
    int rc = finish_stdout(md_status_exit_code(st), 0);
    if (st != MD_OK) {
        /* one rank's failure ends every rank: the others would wait on it */
        /* (an interrupt reaches every rank after the same step: each
         * finishes, rank 0 with its checkpoint) */
        if (md_dist_size() > 1 && st != MD_ERR_INTERRUPTED) md_dist_abort(rc, md_errmsg());
        if (md_dist_rank() == 0 || st != MD_ERR_INTERRUPTED) print_error(md_errmsg());
    }
    md_dist_finalize();
    return rc;
}
