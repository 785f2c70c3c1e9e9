/* test_html.c - the HTML report from a canned JSON report: structure,
 * self-containment, escaping, charts, atomic write. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/json.h"
#include "core/mem.h"
#include "diag/html.h"
#include "helpers.h"
#include "helpers_html.h"

/* "<tag" followed by a space, '>' or '/' (so <table does not count <tbody). */
static int count_open(const char *s, const char *tag)
{
    char pat[32];
    snprintf(pat, sizeof pat, "<%s", tag);
    size_t l = strlen(pat);
    int n = 0;
    for (const char *p = strstr(s, pat); p; p = strstr(p + l, pat))
        if (p[l] == ' ' || p[l] == '>' || p[l] == '\n') n++;
    return n;
}

static int count_close(const char *s, const char *tag)
{
    char pat[32];
    snprintf(pat, sizeof pat, "</%s>", tag);
    return th_count(s, pat);
}

static cJSON *canned(void)
{
    cJSON *r = NULL;
    md_status st = md_json_load_file("test/data/report_canned.json", &r);
    cr_assert_eq(st, MD_OK, "%s", md_errmsg());
    return r;
}

Test(html, canned_report_structure)
{
    cJSON *r = canned();
    char *html = NULL;
    size_t len = 0;
    cr_assert_eq(md_html_render(r, &html, &len), MD_OK, "%s", md_errmsg());
    th_html_keep("canned.html", html);
    cr_assert_eq(strlen(html), len);
    cr_assert(strncmp(html, "<!DOCTYPE html>", 15) == 0);
    /* self-contained: nothing fetched from anywhere */
    static const char *const banned[] = {"http://", "https://", "src=", "<script", "<link", "url(", "@import", "<img"};
    for (size_t i = 0; i < sizeof banned / sizeof banned[0]; i++)
        cr_assert_null(strstr(html, banned[i]), "found '%s' in the page", banned[i]);
    /* balanced main elements */
    static const char *const tags[] = {"html", "head", "body", "header", "nav", "section", "table", "thead",
                                       "tbody", "tr", "svg", "figure", "ol", "ul", "li", "h2", "text"};
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) {
        int o = count_open(html, tags[i]), c = count_close(html, tags[i]);
        cr_assert_eq(o, c, "<%s>: %d opened, %d closed", tags[i], o, c);
    }
    cr_assert_eq(count_open(html, "html"), 1);
    /* every section of the canned report, with its charts */
    static const char *const ids[] = {"system", "devices", "settings", "model", "data", "training",
                                      "benchmark", "memory", "recommendations", "warnings"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        char pat[64];
        snprintf(pat, sizeof pat, "<section id=\"%s\">", ids[i]);
        cr_assert_not_null(strstr(html, pat), "missing %s", pat);
    }
    static const char *const charts[] = {"Loss per epoch", "Accuracy per epoch", "Inference latency histogram",
                                         "Batch-size sweep", "Device comparison", "Ablations", "Device memory breakdown"};
    for (size_t i = 0; i < sizeof charts / sizeof charts[0]; i++)
        cr_assert_not_null(strstr(html, charts[i]), "missing chart '%s'", charts[i]);
    cr_assert_geq(count_open(html, "svg"), 7);
    /* two series per curve chart, 6 epochs each: 6 markers x 2 x 2 charts at least */
    cr_assert_geq(th_count(html, "<circle"), 24);
    cr_assert_geq(th_count(html, "<polyline"), 5);
    /* the OOM batch of the sweep is marked */
    cr_assert_not_null(strstr(html, ">OOM</text>"));
    /* escaping: the hostname and a setting carry <, > and & */
    cr_assert_not_null(strstr(html, "ci-runner &lt;7&gt;"));
    cr_assert_null(strstr(html, "<7>"));
    cr_assert_not_null(strstr(html, "loader measured slower than the step &amp; workers help"));
    /* units from the key names */
    cr_assert_not_null(strstr(html, "24.00 GiB"), "ram_total_bytes in binary units");
    cr_assert_not_null(strstr(html, "421,642"), "integers with separators");
    /* no raw coordinates went out of the charts as NaN */
    cr_assert_null(strstr(html, "nan"));
    cr_assert_null(strstr(html, "inf\""));
    md_free(html);
    cJSON_Delete(r);
}

Test(html, minimal_report_and_non_finite_values)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "schema_version", 1);
    char *html = NULL;
    cr_assert_eq(md_html_render(r, &html, NULL), MD_OK);
    cr_assert_null(strstr(html, "<section"), "no sections without data");
    cr_assert_not_null(strstr(html, "</html>"));
    md_free(html);
    /* a loss curve with a NaN epoch: the point is left out, the page is valid */
    cJSON *tr = cJSON_AddObjectToObject(r, "training");
    cJSON *ep = cJSON_AddArrayToObject(tr, "epochs");
    for (int e = 1; e <= 3; e++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "epoch", e);
        cJSON_AddNumberToObject(o, "train_loss", e == 2 ? (double)NAN : 1.0 / e);
        cJSON_AddItemToArray(ep, o);
    }
    cJSON_AddNumberToObject(tr, "final_loss", (double)INFINITY);
    cr_assert_eq(md_html_render(r, &html, NULL), MD_OK);
    cr_assert_not_null(strstr(html, "Loss per epoch"));
    cr_assert_not_null(strstr(html, "not finite"));
    cr_assert_null(strstr(html, "nan"));
    cr_assert_eq(th_count(html, "<circle"), 2, "two finite points");
    md_free(html);
    cJSON_Delete(r);
}

Test(html, atomic_write)
{
    cJSON *r = canned();
    char *dir = th_tmpdir();
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/report.html", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cr_assert_eq(md_html_write(r, path), MD_OK, "%s", md_errmsg());
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_gt(sb.st_size, 5000);
    cr_assert_neq(stat(tmp, &sb), 0, "temporary file left behind");
    /* an unwritable place is an I/O error naming the file */
    cr_assert_eq(md_html_write(r, "/nonexistent-dir/r.html"), MD_ERR_IO);
    cr_assert_not_null(strstr(md_errmsg(), "/nonexistent-dir/r.html"));
    th_tmpdir_free(dir);
    cJSON_Delete(r);
}

Test(html, training_curves_as_columns)
{
    /* the trainer's layout: training.curves holds one array per figure */
    cJSON *r = NULL;
    cr_assert_eq(md_json_parse("{\"training\": {\"epochs\": 3, \"curves\": {\"epoch\": [1, 2, 3],"
                               " \"train_loss\": [2.2, 1.5, 1.0], \"val_loss\": [2.1, 1.5, null],"
                               " \"train_acc\": [0.2, 0.4, 0.6], \"val_acc\": [0.3, 0.5, 0.5]},"
                               " \"diagnostics\": [{\"epoch\": 3, \"params\": [{\"name\": \"fc.weight\", \"grad_norm\": 0.5}]}]}}",
                               "curves", &r),
                 MD_OK, "%s", md_errmsg());
    char *html = NULL;
    cr_assert_eq(md_html_render(r, &html, NULL), MD_OK);
    cr_assert_not_null(strstr(html, "Loss per epoch"));
    cr_assert_not_null(strstr(html, "Accuracy per epoch"));
    /* 3 + 2 loss points (one val_loss is null), 3 + 3 accuracy points */
    cr_assert_eq(th_count(html, "<circle"), 11, "%d points", th_count(html, "<circle"));
    cr_assert_not_null(strstr(html, "<h3>Per epoch</h3>"));
    cr_assert_not_null(strstr(html, "fc.weight"), "last epoch's diagnostics");
    cr_assert_eq(count_open(html, "details"), count_close(html, "details"));
    md_free(html);
    cJSON_Delete(r);
}
