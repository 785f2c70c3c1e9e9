/* helpers_html.h - what the HTML report tests share: rendering a report,
 * keeping the page for scripts/check_html.sh, and JSON number arrays. */
#ifndef TH_HELPERS_HTML_H
#define TH_HELPERS_HTML_H

#include <cjson/cJSON.h>

/* The page for report `r` (md_html_render; fails the test on an error);
 * the caller frees it with md_free. */
char *th_html_render(const cJSON *r);
/* MPSDIAG_HTML_KEEP=DIR keeps the rendered page as DIR/name. */
void th_html_keep(const char *name, const char *html);
/* A JSON array of v[0..n): numbers, null for the non-finite ones. */
cJSON *th_json_numbers(const double *v, int n);

#endif
