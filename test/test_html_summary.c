/* test_html_summary.c - the HTML report for a person: the summary at the top
 * with the run's figures, the findings as callouts, readable labels instead
 * of report keys, percentages, units, the time-by-layer-kind table. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/mem.h"
#include "diag/html.h"
#include "diag/html_util.h"
#include "helpers.h"
#include "helpers_html.h"

static cJSON *canned(void)
{
    cJSON *r = NULL;
    cr_assert_eq(md_json_load_file("test/data/report_canned.json", &r), MD_OK, "%s", md_errmsg());
    return r;
}

/* The text of <section id="id"> (a copy the caller frees); fails the test without one. */
static char *section_text(const char *html, const char *id)
{
    char pat[64];
    snprintf(pat, sizeof pat, "<section id=\"%s\">", id);
    const char *s = strstr(html, pat);
    cr_assert_not_null(s, "no %s", pat);
    const char *e = strstr(s, "</section>");
    cr_assert_not_null(e);
    size_t n = (size_t)(e - s);
    char *t = malloc(n + 1);
    memcpy(t, s, n);
    t[n] = '\0';
    return t;
}

/* The visible text of a page: tags, <style> and <title> left out, entities kept. */
static char *visible_text(const char *html)
{
    const char *body = strstr(html, "<body>");
    cr_assert_not_null(body);
    char *t = malloc(strlen(body) + 1);
    size_t o = 0;
    int in_tag = 0;
    for (const char *p = body; *p; p++) {
        if (*p == '<') in_tag = 1;
        else if (*p == '>') {
            in_tag = 0;
            t[o++] = ' ';
        } else if (!in_tag) t[o++] = *p;
    }
    t[o] = '\0';
    return t;
}

/* Every key holding '_' anywhere in the report must not be shown as a word
 * of the page's visible text (labels replace them). */
static void no_keys_shown(const cJSON *o, const char *text)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, o)
    {
        if (f->string && strchr(f->string, '_')) {
            char pat[160];
            snprintf(pat, sizeof pat, " %s ", f->string);
            cr_assert_null(strstr(text, pat), "the key '%s' is shown to the reader", f->string);
        }
        if (cJSON_IsObject(f) || cJSON_IsArray(f)) no_keys_shown(f, text);
    }
}

Test(html_summary, summary_holds_the_runs_figures)
{
    cJSON *r = canned();
    /* the whole process peaked while probing batch sizes: not training's peak */
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(r, "memory"), "device_peak_bytes", cJSON_CreateNumber(3221225472.0));
    char *html = th_html_render(r);
    th_html_keep("summary.html", html);
    /* the summary is the first section, right after the navigation */
    const char *first = strstr(html, "<section");
    cr_assert_not_null(first);
    cr_assert(strncmp(first, "<section id=\"summary\">", 22) == 0, "first section: %.40s", first);
    char *s = section_text(html, "summary");
    /* device, model, data, training length, precision */
    cr_assert_not_null(strstr(s, "AMD EPYC 9654 96-Core Processor"));
    cr_assert_not_null(strstr(s, "small_cnn"));
    cr_assert_not_null(strstr(s, "421,642 parameters"));
    cr_assert_not_null(strstr(s, "fashion-mnist"));
    cr_assert_not_null(strstr(s, "54,000 training, 6,000 validation, 10,000 test samples"));
    cr_assert_not_null(strstr(s, "6 epochs"), "the canned run has 6 epochs");
    cr_assert_not_null(strstr(s, "<th>Precision</th><td>fp32</td>"));
    /* results: the last epoch's validation accuracy as a percentage, throughput, training's peak */
    const cJSON *ep = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "training"), "epochs");
    double acc = cJSON_GetObjectItem(cJSON_GetArrayItem(ep, cJSON_GetArraySize(ep) - 1), "val_acc")->valuedouble;
    char want[64];
    snprintf(want, sizeof want, "<span>%.1f%%</span>validation accuracy, epoch 6", acc * 100);
    cr_assert_not_null(strstr(s, want), "missing '%s'", want);
    cr_assert_not_null(strstr(s, "<span>1,882</span>training samples/s"));
    char peak[32];
    md_fmt_bytes(19500000, peak, sizeof peak);
    snprintf(want, sizeof want, "<span>%s</span>peak device memory of training", peak);
    cr_assert_not_null(strstr(s, want), "missing '%s'", want);
    cr_assert_null(strstr(s, "3.00 GiB"), "the batch probing's peak is not training's");
    cr_assert_not_null(strstr(s, "32.4% of peak"), "fraction_of_peak as a percentage");
    /* the batch finder as a sentence */
    cr_assert_not_null(strstr(s, "The largest batch that fits is 384; the fastest is 256 at 1,117 samples/s."));
    /* the loader: not the bottleneck, shown as a good finding */
    cr_assert_not_null(strstr(s, "<div class=\"callout good\"><b>Data loading is not the bottleneck:</b>"));
    /* the recommendations, at most three */
    cr_assert_not_null(strstr(s, "<ol class=\"recs top\">"));
    cr_assert_not_null(strstr(s, "Batch size:</b> use --batch-size 128"));
    cr_assert_eq(th_count(s, "<li>"), 2);
    free(s);
    /* the header no longer carries a peak of memory */
    const char *h = strstr(html, "<header>"), *he = strstr(html, "</header>");
    cr_assert(h && he);
    char *hd = malloc((size_t)(he - h) + 1);
    memcpy(hd, h, (size_t)(he - h));
    hd[he - h] = '\0';
    cr_assert_null(strstr(hd, "iB<"), "a byte size in the header: %s", hd);
    free(hd);
    /* self-contained */
    cr_assert_null(strstr(html, "<script"));
    cr_assert_null(strstr(html, "http://"));
    cr_assert_null(strstr(html, "https://"));
    md_free(html);
    cJSON_Delete(r);
}

Test(html_summary, top_three_recommendations)
{
    cJSON *r = canned();
    cJSON *recs = cJSON_GetObjectItem(r, "recommendations");
    for (int i = 0; i < 3; i++) {
        cJSON *e = cJSON_CreateObject();
        char t[32];
        snprintf(t, sizeof t, "extra topic %d", i);
        cJSON_AddStringToObject(e, "topic", t);
        cJSON_AddStringToObject(e, "advice", "do something");
        cJSON_AddItemToArray(recs, e);
    }
    char *html = th_html_render(r);
    char *s = section_text(html, "summary");
    cr_assert_eq(th_count(s, "<li>"), 3);
    cr_assert_not_null(strstr(s, "Extra topic 0"));
    cr_assert_null(strstr(s, "Extra topic 1"));
    cr_assert_not_null(strstr(s, "All 5 recommendations"));
    free(s);
    md_free(html);
    cJSON_Delete(r);
}

Test(html_summary, findings_as_callouts)
{
    cJSON *r = NULL;
    cr_assert_eq(md_json_parse("{\"selected_device\": {\"backend\": \"cpu\", \"index\": 0, \"name\": \"x86\"},"
                               " \"training\": {\"task\": \"classification\", \"epochs\": 4, \"epochs_run\": 3,"
                               "  \"curves\": {\"epoch\": [1, 2, 3], \"train_loss\": [2.0, 1.0, null],"
                               "   \"val_loss\": [2.1, 1.2, null], \"train_acc\": [0.2, 0.5, 0.6], \"val_acc\": [0.3, 0.5, 0.55]},"
                               "  \"early_stopping\": {\"patience\": 1, \"stopped_after_epoch\": 3},"
                               "  \"best\": {\"epoch\": 2, \"acc\": 0.5},"
                               "  \"diagnostics\": [{\"epoch\": 3, \"params\": [],"
                               "   \"relu\": [{\"layer\": \"relu1\", \"dead_share\": 0.02, \"zero_share\": 0.4},"
                               "              {\"layer\": \"relu3\", \"dead_share\": 0.8613, \"zero_share\": 0.95}]}]},"
                               " \"benchmark\": {\"data\": {\"loader_samples_per_s\": 900, \"step_samples_per_s\": 1000,"
                               "   \"num_workers\": 0, \"bottleneck\": true, \"verdict\": \"slow\"},"
                               "  \"find_batch_size\": {\"max_batch\": 96, \"limited_by_search_cap\": false}}}",
                               "findings", &r),
                 MD_OK, "%s", md_errmsg());
    char *html = th_html_render(r);
    th_html_keep("findings.html", html);
    char *s = section_text(html, "summary");
    cr_assert_not_null(s);
    /* NaN: a red callout */
    cr_assert_not_null(strstr(s, "<div class=\"callout bad\"><b>The loss became NaN or infinite:</b>"));
    /* early stopping */
    cr_assert_not_null(strstr(s, "training stopped after epoch 3 (patience 1"));
    cr_assert_not_null(strstr(s, "the best weights are from epoch 2"));
    /* the dead ReLU layer, as a percentage; the healthy one not named */
    cr_assert_not_null(strstr(s, "<div class=\"callout warn\"><b>A large share of dead ReLU units</b> relu3 (86.1%)"));
    cr_assert_null(strstr(s, "relu1"));
    /* the loader is the bottleneck */
    cr_assert_not_null(strstr(s, "<div class=\"callout warn\"><b>Data loading is the bottleneck:</b>"));
    cr_assert_not_null(strstr(s, "900 samples/s"));
    /* the finder without a fastest batch */
    cr_assert_not_null(strstr(s, "The largest batch that fits is 96."));
    free(s);
    /* the same findings in their sections, and the ReLU table with bars */
    char *t = section_text(html, "training");
    cr_assert_not_null(strstr(t, "callout bad"));
    cr_assert_not_null(strstr(t, "Dead ReLU units (last epoch)"));
    cr_assert_not_null(strstr(t, "<th>relu3</th><td class=\"n\"><span class=\"bar badbar\"><span style=\"width:86.1%\"></span></span> 86.1%</td>"));
    free(t);
    t = section_text(html, "benchmark");
    cr_assert_not_null(strstr(t, "Data loading is the bottleneck"));
    cr_assert_not_null(strstr(t, "The largest batch that fits is 96."));
    free(t);
    md_free(html);
    cJSON_Delete(r);
}

Test(html_summary, labels_units_and_percentages)
{
    cJSON *r = canned();
    char *html = th_html_render(r);
    char *text = visible_text(html);
    no_keys_shown(r, text);
    /* labels for keys */
    cr_assert_not_null(strstr(html, "<th>RAM total</th>"));
    cr_assert_not_null(strstr(html, "<th>Peak host memory (RSS)</th>"));
    cr_assert_not_null(strstr(html, "<th>Validation accuracy</th>"), "a records table's column");
    /* fractions as percentages, never the raw fraction */
    cr_assert_not_null(strstr(html, "32.4%"));
    cr_assert_null(strstr(html, "0.3235"));
    cr_assert_not_null(strstr(html, "82.8%"), "val_acc of the last epoch in the per-epoch table");
    /* units */
    cr_assert_not_null(strstr(html, "24.00 GiB"));
    cr_assert_not_null(strstr(html, "1,882/s"), "samples_per_s with its unit");
    free(text);
    md_free(html);
    cJSON_Delete(r);
}

Test(html_summary, time_by_layer_kind)
{
    cJSON *r = canned();
    cJSON *tr = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "benchmark"), "training");
    cJSON *lk = NULL;
    cr_assert_eq(md_json_parse("{\"steps\": 3, \"step_ms\": 40.0, \"layers_ms\": 30.0, \"kinds\": ["
                               "{\"kind\": \"conv2d\", \"layers\": 3, \"forward_ms\": 8.0, \"backward_ms\": 16.0, \"share\": 0.6},"
                               "{\"kind\": \"linear\", \"layers\": 2, \"forward_ms\": 0.5, \"backward_ms\": 1.5, \"share\": 0.05}]}",
                               "lk", &lk),
                 MD_OK);
    cJSON_AddItemToObject(tr, "layer_kinds", lk);
    char *html = th_html_render(r);
    char *s = section_text(html, "benchmark");
    cr_assert_not_null(strstr(s, "<h3>Time by layer kind</h3>"));
    cr_assert_not_null(strstr(s, "<th>Layer kind</th><th>Layers</th><th>Forward</th><th>Backward</th><th>Share of the step</th>"));
    cr_assert_not_null(strstr(s, "<tr><th>conv2d</th><td class=\"n\">3</td><td class=\"n\">8 ms</td><td class=\"n\">16 ms</td>"));
    cr_assert_not_null(strstr(s, "<span style=\"width:60.0%\"></span></span> 60.0%"));
    cr_assert_not_null(strstr(s, "<td class=\"n\">500 \xc2\xb5s</td>"), "sub-millisecond times in microseconds");
    cr_assert_not_null(strstr(s, "a step took 40 ms, of which the layers' forward and backward passes 30 ms (75.0%)"));
    free(s);
    md_free(html);
    cJSON_Delete(r);
}

Test(html_summary, formatters)
{
    char b[64];
    cr_assert_str_eq(md_html_label("ram_total_bytes", b, sizeof b), "RAM total");
    cr_assert_str_eq(md_html_label("val_acc", b, sizeof b), "Validation accuracy");
    cr_assert_str_eq(md_html_label("loader_samples_per_s", b, sizeof b), "Loader samples/s");
    cr_assert_str_eq(md_html_label("step_ms", b, sizeof b), "Step time");
    cr_assert_str_eq(md_html_fmt_pct(0.8613, b, sizeof b), "86.1%");
    cr_assert_str_eq(md_html_fmt_pct(0.0123, b, sizeof b), "1.23%");
    cr_assert_str_eq(md_html_fmt_ms(0.25, b, sizeof b), "250 \xc2\xb5s");
    cr_assert_str_eq(md_html_fmt_ms(12.345, b, sizeof b), "12.3 ms");
    cr_assert_str_eq(md_html_fmt_ms(2500, b, sizeof b), "2.5 s");
    cr_assert_str_eq(md_html_fmt_s(125, b, sizeof b), "2 min 05 s");
    cr_assert_str_eq(md_html_fmt_num(1234567, b, sizeof b), "1,234,567");
    cr_assert_str_eq(md_html_fmt_num(0.456789, b, sizeof b), "0.457");
    cr_assert_str_eq(md_html_fmt("dead_share", 0.5, b, sizeof b), "50.0%");
    cr_assert_str_eq(md_html_fmt("params_bytes", 1048576, b, sizeof b), "1.00 MiB");
    cr_assert_str_eq(md_html_fmt("train_time_s", 75, b, sizeof b), "75 s");
}
