/* html_profile.c - the Profile section of the HTML report (html_profile.h). */
#include "diag/html_profile.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "diag/html_util.h"

/* Rows shown; the JSON has every layer. */
#define MAX_ROWS 25

static const char *num_or_dash(const cJSON *o, const char *k, const char *fmt, double scale, char *buf, size_t n)
{
    double v;
    if (!md_hj_num(o, k, &v) || !isfinite(v)) return "-";
    snprintf(buf, n, fmt, v * scale);
    return buf;
}

static void layers_table(md_strbuf *b, const cJSON *p)
{
    const cJSON *layers = md_hj_get(p, "layers");
    if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) == 0) return;
    md_html_heading(b, "Time per layer");
    double steps = 0, step = 0, peak = 0, copy = 0;
    md_hj_num(p, "steps", &steps);
    md_hj_num(p, "step_ms", &step);
    md_hj_num(p, "peak_gflops", &peak);
    int have_copy = md_hj_num(p, "copy_gbytes_per_s", &copy) && copy > 0;
    char a[32], c[64], d[64];
    const char *timer = md_hj_str(p, "timer");
    snprintf(c, sizeof c, peak > 0 ? "%.4g GFLOP/s" : "no peak", peak);
    snprintf(d, sizeof d, have_copy ? "%.4g GB/s (a device copy)" : "no copy rate (--profile measures it)", copy);
    md_strbuf_printf(b, "<p class=\"fig\">Measured over %.0f op-by-op training steps with %s around every layer; a "
                        "step took %s. Rates against the device's peaks: %s, %s. The slowest first.</p>\n",
                     steps, timer ? timer : "a timer", md_html_fmt_ms(step, a, sizeof a), c, d);
    md_html_table_begin(b, "rec kinds",
                        (const char *const[]){"Layer", "Type", "Forward", "Backward", "Share of the step", "GFLOP/s",
                                              "of peak", "GB/s", "of copy", NULL});
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach(e, layers)
    {
        if (n++ >= MAX_ROWS) break;
        double f = NAN, bw = NAN, s = NAN;
        md_hj_num(e, "forward_ms", &f);
        md_hj_num(e, "backward_ms", &bw);
        md_hj_num(e, "share", &s);
        char t1[32], t2[32], t3[32], t4[32], t5[32], t6[32];
        md_html_table_row_begin(b, md_hj_str(e, "name") ? md_hj_str(e, "name") : "?");
        md_html_table_cell(b, md_hj_str(e, "type"));
        md_html_table_cell(b, isfinite(f) ? md_html_fmt_ms(f, t1, sizeof t1) : NULL);
        md_html_table_cell(b, isfinite(bw) ? md_html_fmt_ms(bw, t2, sizeof t2) : NULL);
        md_html_bar_cell(b, isfinite(s) ? s : 0, 0);
        md_html_table_cell(b, num_or_dash(e, "gflops", "%.4g", 1, t3, sizeof t3));
        md_html_table_cell(b, num_or_dash(e, "fraction_of_peak", "%.1f%%", 100, t4, sizeof t4));
        md_html_table_cell(b, num_or_dash(e, "gbytes_per_s", "%.4g", 1, t5, sizeof t5));
        md_html_table_cell(b, num_or_dash(e, "fraction_of_bandwidth", "%.1f%%", 100, t6, sizeof t6));
        md_html_table_row_end(b);
    }
    md_html_table_end(b);
    if (n > MAX_ROWS)
        md_strbuf_printf(b, "<p class=\"fig\">%d more layers in the JSON report.</p>\n", cJSON_GetArraySize(layers) - MAX_ROWS);
}

static void energy_part(md_strbuf *b, const cJSON *en)
{
    if (!en) return;
    md_html_heading(b, "Energy");
    if (cJSON_IsTrue(md_hj_get(en, "available"))) {
        double jps = 0, spj = 0, w = 0, win = 0;
        md_hj_num(en, "joules_per_step", &jps);
        md_hj_num(en, "samples_per_joule", &spj);
        md_hj_num(en, "watts", &w);
        md_hj_num(en, "window_s", &win);
        char v1[32], v2[32], v3[32];
        md_html_cards_begin(b);
        snprintf(v1, sizeof v1, "%.4g J", jps);
        md_html_card(b, v1, "per training step");
        snprintf(v2, sizeof v2, "%.4g", spj);
        md_html_card(b, v2, "samples per joule");
        snprintf(v3, sizeof v3, "%.1f W", w);
        md_html_card(b, v3, "mean power");
        md_html_cards_end(b);
        md_strbuf_printf(b, "<p class=\"fig\">Over %.2f s of timed training steps, read from ", win);
        md_strbuf_add_escaped(b, md_hj_str(en, "source") ? md_hj_str(en, "source") : "?");
        md_strbuf_add(b, ".</p>\n");
    } else {
        md_html_callout(b, MD_HTML_INFO, "Energy not measured",
                        md_hj_str(en, "reason") ? md_hj_str(en, "reason") : "no reason given");
    }
}

static void memory_part(md_strbuf *b, const cJSON *m)
{
    if (!m) return;
    md_html_heading(b, "Memory side by side");
    md_html_table_begin(b, NULL, (const char *const[]){"", "In the steps", "Now", "Peak", "Total or limit", NULL});
    char a[32], c[32], d[32], e[32];
    double v;
    const cJSON *dev;
    cJSON_ArrayForEach(dev, md_hj_get(m, "devices"))
    {
        const cJSON *t = md_hj_get(dev, "tool"), *dr = md_hj_get(dev, "driver");
        char lab[96];
        snprintf(lab, sizeof lab, "mpsdiag on %s (live)", md_hj_str(dev, "device") ? md_hj_str(dev, "device") : "?");
        md_html_table_row(b, lab, (const char *const[]){
            md_hj_num(t, "in_steps_current_bytes", &v) ? md_html_fmt_bytes(v, a, sizeof a) : "-",
            md_hj_num(t, "current_bytes", &v) ? md_html_fmt_bytes(v, c, sizeof c) : "-",
            md_hj_num(t, "peak_bytes", &v) ? md_html_fmt_bytes(v, d, sizeof d) : "-",
            md_hj_num(t, "limit_bytes", &v) && v > 0 ? md_html_fmt_bytes(v, e, sizeof e) : "none", NULL});
        md_html_table_row(b, "mpsdiag (reserved by the caching allocator)", (const char *const[]){
            md_hj_num(t, "in_steps_reserved_bytes", &v) ? md_html_fmt_bytes(v, a, sizeof a) : "-",
            md_hj_num(t, "reserved_bytes", &v) ? md_html_fmt_bytes(v, c, sizeof c) : "-", "-", "-", NULL});
        if (cJSON_IsTrue(md_hj_get(dr, "available")))
            md_html_table_row(b, md_hj_str(dr, "what"), (const char *const[]){
                md_hj_num(dr, "in_steps_used_bytes", &v) ? md_html_fmt_bytes(v, a, sizeof a) : "-",
                md_hj_num(dr, "used_bytes", &v) ? md_html_fmt_bytes(v, c, sizeof c) : "-", "-",
                md_hj_num(dr, "total_bytes", &v) ? md_html_fmt_bytes(v, d, sizeof d) : "-", NULL});
        else
            md_html_table_row(b, "driver", (const char *const[]){md_hj_str(dr, "what"), "", "", "", NULL});
    }
    const cJSON *p = md_hj_get(m, "process");
    md_html_table_row(b, "process RSS", (const char *const[]){
        md_hj_num(p, "in_steps_rss_bytes", &v) ? md_html_fmt_bytes(v, a, sizeof a) : "-",
        md_hj_num(p, "rss_bytes", &v) ? md_html_fmt_bytes(v, c, sizeof c) : "-",
        md_hj_num(p, "peak_rss_bytes", &v) ? md_html_fmt_bytes(v, d, sizeof d) : "-", "-", NULL});
    md_html_table_end(b);
    md_html_para(b, "Planned for the measured batch (workspace: the measured peak less the plan):");
    md_html_kv(b, md_hj_get(m, "planned"), NULL);
}

static void leak_part(md_strbuf *b, const cJSON *lc)
{
    if (!lc) return;
    md_html_heading(b, "Leak check");
    double steps = 0, warm = 0;
    md_hj_num(lc, "steps", &steps);
    md_hj_num(lc, "warmup_steps", &warm);
    if (cJSON_IsTrue(md_hj_get(lc, "flagged")))
        md_html_calloutf(b, MD_HTML_BAD, "Memory grows", "after warm-up, over %.0f training steps: see the table",
                         steps);
    md_strbuf_printf(b, "<p class=\"fig\">Memory after each of %.0f more training steps; the first %.0f are warm-up "
                        "and not judged.</p>\n", steps, warm);
    md_html_table_begin(b, NULL, (const char *const[]){"Measure", "First", "Last", "Growth", "Per step", "Bound",
                                                       "Verdict", NULL});
    const cJSON *v;
    cJSON_ArrayForEach(v, md_hj_get(lc, "verdicts"))
    {
        char a[32], c[32], d[32], e[32], f[32];
        double x;
        int judged = cJSON_IsTrue(md_hj_get(v, "judged"));
        md_html_table_row(b, md_hj_str(v, "what"), (const char *const[]){
            md_hj_num(v, "first_bytes", &x) ? md_html_fmt_bytes(x, a, sizeof a) : "-",
            md_hj_num(v, "last_bytes", &x) ? md_html_fmt_bytes(x, c, sizeof c) : "-",
            md_hj_num(v, "growth_bytes", &x) ? md_html_fmt_bytes(x, d, sizeof d) : "-",
            md_hj_num(v, "per_step_bytes", &x) ? md_html_fmt_bytes(x, e, sizeof e) : "-",
            md_hj_num(v, "bound_bytes", &x) ? md_html_fmt_bytes(x, f, sizeof f) : "-",
            !judged ? "too few steps" : cJSON_IsTrue(md_hj_get(v, "flagged")) ? "grows" : "ok", NULL});
    }
    md_html_table_end(b);
}

void md_html_profile(md_strbuf *b, const cJSON *p)
{
    md_html_section_begin(b, "profile", "Profile");
    layers_table(b, p);
    energy_part(b, md_hj_get(p, "energy"));
    memory_part(b, md_hj_get(p, "memory"));
    leak_part(b, md_hj_get(p, "leak_check"));
    md_html_section_end(b);
}
