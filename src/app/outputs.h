/* outputs.h - every output path checked before a run starts.
 *
 * --report, --html, --junit, --metrics, --dump-grads (files) and
 * --checkpoint-dir (a folder, checked when training will run) are looked at
 * without creating or changing anything: a file's folder must exist and take
 * new files, an existing file must be writable, a directory is not a file,
 * a folder to create needs a writable existing ancestor, and two outputs
 * (or an output and an input) must not be the same file. Every problem is
 * collected, so a run with three bad paths names all three.
 */
#ifndef MD_OUTPUTS_H
#define MD_OUTPUTS_H

#include "app/options.h"

#define MD_OUTPUTS_MAX_PROBLEMS 16

struct md_output_problems {
    int n;
    char msg[MD_OUTPUTS_MAX_PROBLEMS][700]; /* one line each, without "mpsdiag: " */
};

/* MD_OK, or MD_ERR_IO with p->n >= 1 messages (the last one also set with
 * md_errf). */
md_status md_outputs_check(const md_options *o, struct md_output_problems *p);

#endif
