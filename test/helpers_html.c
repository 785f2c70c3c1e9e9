/* helpers_html.c - see helpers_html.h. */
#include "helpers_html.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "diag/html.h"

char *th_html_render(const cJSON *r)
{
    char *html = NULL;
    size_t len = 0;
    cr_assert_eq(md_html_render(r, &html, &len), MD_OK, "%s", md_errmsg());
    cr_assert_eq(strlen(html), len);
    return html;
}

void th_html_keep(const char *name, const char *html)
{
    const char *dir = getenv("MPSDIAG_HTML_KEEP");
    if (!dir || !*dir) return;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(html, f);
        fclose(f);
    }
}

cJSON *th_json_numbers(const double *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, isfinite(v[i]) ? cJSON_CreateNumber(v[i]) : cJSON_CreateNull());
    return a;
}
