/* main.c - mpsdiag's entry point: parse, run, print the error, exit. */
#include <stdio.h>

#include "cli/job.h"
#include "cli/run_info.h"
#include "core/log.h"
#include "core/signals.h"

int main(int argc, char **argv)
{
    md_options opts;
    md_options_defaults(&opts);
    md_run_info_set_command_line(argc, argv);
    md_status st = md_options_parse(&opts, argc, argv);
    if (st == MD_OK) st = md_options_validate(&opts);
    if (st != MD_OK) {
        fprintf(stderr, "mpsdiag: %s\n", md_errmsg());
        return md_status_exit_code(st);
    }
    if (opts.help) {
        md_options_usage(stdout);
        return 0;
    }
    if (opts.version) {
        md_options_version(stdout);
        return 0;
    }
    md_log_init((md_verbosity)opts.verbosity);
    md_signals_install();
    st = md_job_run(&opts);
    fflush(stdout);
    if (st != MD_OK) fprintf(stderr, "mpsdiag: %s\n", md_errmsg());
    return md_status_exit_code(st);
}
