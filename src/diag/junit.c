/* junit.c - JUnit-style XML for --ci. */
#include "diag/junit.h"

#include "core/json.h"
#include "core/mem.h"
#include "diag/strbuf.h"

md_status md_junit_render(const char *suite, const struct md_junit_case *c, int n, double total_s,
                          const char *timestamp, char **out, size_t *len)
{
    int failures = 0, errors = 0, skipped = 0;
    for (int i = 0; i < n; i++) {
        failures += c[i].result == MD_JUNIT_FAIL;
        errors += c[i].result == MD_JUNIT_ERROR;
        skipped += c[i].result == MD_JUNIT_SKIP;
    }
    md_strbuf b;
    md_strbuf_init(&b);
    md_strbuf_add(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    md_strbuf_printf(&b, "<testsuites tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\" time=\"%.3f\">\n", n,
                     failures, errors, skipped, total_s);
    md_strbuf_add(&b, "  <testsuite name=\"");
    md_strbuf_add_escaped(&b, suite);
    md_strbuf_printf(&b, "\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\" time=\"%.3f\"", n, failures,
                     errors, skipped, total_s);
    if (timestamp && *timestamp) {
        md_strbuf_add(&b, " timestamp=\"");
        md_strbuf_add_escaped(&b, timestamp);
        md_strbuf_add(&b, "\"");
    }
    md_strbuf_add(&b, ">\n");
    for (int i = 0; i < n; i++) {
        md_strbuf_add(&b, "    <testcase classname=\"");
        md_strbuf_add_escaped(&b, c[i].classname[0] ? c[i].classname : suite);
        md_strbuf_add(&b, "\" name=\"");
        md_strbuf_add_escaped(&b, c[i].name);
        md_strbuf_printf(&b, "\" time=\"%.3f\"", c[i].time_s);
        static const char *const tag[] = {NULL, "failure", "skipped", "error"};
        if (c[i].result == MD_JUNIT_PASS) {
            if (c[i].message[0]) {
                md_strbuf_add(&b, ">\n      <system-out>");
                md_strbuf_add_escaped(&b, c[i].message);
                md_strbuf_add(&b, "</system-out>\n    </testcase>\n");
            } else {
                md_strbuf_add(&b, "/>\n");
            }
            continue;
        }
        md_strbuf_printf(&b, ">\n      <%s message=\"", tag[c[i].result]);
        md_strbuf_add_escaped(&b, c[i].message);
        md_strbuf_add(&b, "\"");
        if (c[i].result == MD_JUNIT_SKIP) {
            md_strbuf_add(&b, "/>\n");
        } else {
            md_strbuf_printf(&b, " type=\"%s\">", c[i].result == MD_JUNIT_FAIL ? "threshold" : "error");
            md_strbuf_add_escaped(&b, c[i].message);
            md_strbuf_printf(&b, "</%s>\n", tag[c[i].result]);
        }
        md_strbuf_add(&b, "    </testcase>\n");
    }
    md_strbuf_add(&b, "  </testsuite>\n</testsuites>\n");
    return md_strbuf_take(&b, out, len);
}

md_status md_junit_write(const char *path, const char *suite, const struct md_junit_case *cases, int n,
                         double total_s, const char *timestamp)
{
    char *text = NULL;
    size_t len = 0;
    md_status st = md_junit_render(suite, cases, n, total_s, timestamp, &text, &len);
    if (st != MD_OK) return st;
    st = md_write_file_atomic(path, text, len);
    md_free(text);
    return st;
}
