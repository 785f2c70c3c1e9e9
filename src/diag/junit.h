/* junit.h - a JUnit-style XML result for --ci, the format CI systems
 * (GitHub Actions test reporters, GitLab, Jenkins) read.
 *
 * One <testsuite name="mpsdiag"> with a <testcase> per check: "run" (the run
 * itself finished), "throughput" (--expect-min-throughput) and "loss"
 * (--expect-max-loss). A failed check carries <failure message="..."> with
 * the measured figure and the threshold; a check that was not asked for is
 * <skipped/>. Text and attributes are XML-escaped. The diagnostics run adds
 * these three cases per model, each with the classname "mpsdiag.<model>".
 */
#ifndef MD_JUNIT_H
#define MD_JUNIT_H

#include <stddef.h>

#include "core/status.h"

enum md_junit_result { MD_JUNIT_PASS = 0, MD_JUNIT_FAIL, MD_JUNIT_SKIP, MD_JUNIT_ERROR };

struct md_junit_case {
    char name[64];         /* "run", "throughput", "loss" */
    int result;            /* enum md_junit_result */
    double time_s;         /* 0 when not timed */
    char message[512];     /* the failure or skip reason; the detail for a pass */
    char classname[192];   /* "" : the suite's name; the diagnostics run: "mpsdiag.<model>" */
};

/* Renders the XML for n cases. *out is owned by the caller (md_free). */
md_status md_junit_render(const char *suite, const struct md_junit_case *cases, int n, double total_s,
                          const char *timestamp, char **out, size_t *len);
/* Renders and writes atomically. */
md_status md_junit_write(const char *path, const char *suite, const struct md_junit_case *cases, int n,
                         double total_s, const char *timestamp);

#endif
