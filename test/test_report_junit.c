/* test_report_junit.c - the JUnit XML writer: counts, escaping, skips. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "diag/junit.h"
#include "helpers.h"

Test(junit, pass_fail_skip_and_escaping)
{
    struct md_junit_case c[3];
    memset(c, 0, sizeof c);
    snprintf(c[0].name, sizeof c[0].name, "run");
    c[0].result = MD_JUNIT_PASS;
    c[0].time_s = 1.25;
    snprintf(c[1].name, sizeof c[1].name, "throughput");
    c[1].result = MD_JUNIT_FAIL;
    snprintf(c[1].message, sizeof c[1].message, "training throughput 12.5 samples/s < --expect-min-throughput 100 & \"more\"");
    snprintf(c[2].name, sizeof c[2].name, "loss");
    c[2].result = MD_JUNIT_SKIP;
    snprintf(c[2].message, sizeof c[2].message, "--expect-max-loss not given");
    char *x = NULL;
    size_t len = 0;
    cr_assert_eq(md_junit_render("mpsdiag <ci>", c, 3, 2.5, "2026-11-22T08:00:00Z", &x, &len), MD_OK);
    cr_assert_eq(strlen(x), len);
    cr_assert(strncmp(x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", 39) == 0);
    cr_assert_not_null(strstr(x, "<testsuite name=\"mpsdiag &lt;ci&gt;\" tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\" time=\"2.500\""), "%s", x);
    cr_assert_not_null(strstr(x, "timestamp=\"2026-11-22T08:00:00Z\""));
    cr_assert_not_null(strstr(x, "name=\"run\" time=\"1.250\"/>"), "%s", x);
    cr_assert_not_null(strstr(x, "<failure message=\"training throughput 12.5 samples/s &lt; --expect-min-throughput 100 &amp; &quot;more&quot;\" type=\"threshold\">"), "%s", x);
    cr_assert_not_null(strstr(x, "<skipped message=\"--expect-max-loss not given\"/>"));
    cr_assert_eq(th_count(x, "<testcase "), 3);
    cr_assert_eq(th_count(x, "</testcase>"), 2, "the passing case is self-closed");
    cr_assert_null(strstr(x, " & "), "raw ampersand");
    cr_assert_eq(th_count(x, "<testsuites"), 1);
    cr_assert_eq(th_count(x, "</testsuites>"), 1);
    md_free(x);
}

Test(junit, control_characters_are_replaced)
{
    struct md_junit_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "run");
    c.result = MD_JUNIT_ERROR;
    snprintf(c.message, sizeof c.message, "bad\x01" "byte");
    char *x = NULL;
    cr_assert_eq(md_junit_render("mpsdiag", &c, 1, 0, NULL, &x, NULL), MD_OK);
    cr_assert_not_null(strstr(x, "errors=\"1\""));
    cr_assert_not_null(strstr(x, "<error message=\"bad?byte\" type=\"error\">bad?byte</error>"), "%s", x);
    cr_assert_null(strstr(x, "timestamp"));
    md_free(x);
}
