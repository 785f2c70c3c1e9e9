/* html_models.c - the diagnostics run's comparison and per-model sections of
 * the HTML report (html_models.h). Inline SVG, coordinates printed with
 * %.1f, so the page is deterministic. */
#include "diag/html_models.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "core/mem.h"
#include "diag/html_util.h"

#define W 380.0  /* bar chart width */
#define LW 560.0 /* line chart width */
#define LH 280.0 /* line chart height */
#define MAXM 32

/* The finite number at o.k, else NaN. */
static double num(const cJSON *o, const char *k)
{
    double v;
    return md_hj_num(o, k, &v) ? v : (double)NAN;
}

/* The last finite element of the array o.k, else NaN. */
static double last(const cJSON *o, const char *k)
{
    const cJSON *a = md_hj_get(o, k);
    for (int i = cJSON_GetArraySize(a) - 1; i >= 0; i--) {
        const cJSON *v = cJSON_GetArrayItem(a, i);
        if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) return v->valuedouble;
    }
    return (double)NAN;
}

static void text(md_strbuf *b, double x, double y, const char *anchor, const char *cls, const char *t)
{
    char attr[64];
    snprintf(attr, sizeof attr, " class=\"%s\"", cls);
    md_html_svg_text(b, x, y, anchor, attr, t);
}

/* A model's name as the charts show it: its file's stem ("a/b/tiny.json":
 * "tiny"). */
static const char *stem(const char *name, char *buf, size_t n)
{
    const char *s = strrchr(name, '/');
    s = s && s[1] ? s + 1 : name;
    size_t l = strlen(s);
    if (l > 5 && strcmp(s + l - 5, ".json") == 0) l -= 5;
    snprintf(buf, n, "%.*s", (int)l, s);
    return buf;
}

/* ---- the comparison charts ---------------------------------------------------- */

struct bar {
    const char *name;
    double v;   /* NaN: not measured */
    int colour; /* the model's index: one colour per model in every chart */
};

/* Horizontal bars, one per model, with the value printed after each; `fmt`
 * formats a value (bytes or a number with its unit). */
static void bars(md_strbuf *b, const char *title, const char *better, const struct bar *r, int n,
                 void (*fmt)(double, char *, size_t))
{
    double vmax = 0;
    int have = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(r[i].v)) {
            vmax = fmax(vmax, r[i].v);
            have++;
        }
    if (!have) return;
    double a0, a1, st;
    md_html_nice_axis(0, vmax > 0 ? vmax : 1, &a0, &a1, &st);
    a0 = 0;
    double rowh = 26, top = 40, h = top + rowh * n + 30, left = 120, right = W - 90;
    md_html_svg_open(b, "cmp", title, W, h);
    text(b, W / 2, 18, "middle", "ttl", title);
    text(b, W / 2, 32, "middle", "tick", better);
    double bottom = top + rowh * n;
    md_html_vgrid(b, a0, a1, st, left, right, top, bottom, bottom + 14);
    for (int i = 0; i < n; i++) {
        double y = top + rowh * i + 4;
        char lab[40], sn[256];
        stem(r[i].name, sn, sizeof sn);
        snprintf(lab, sizeof lab, "%.17s%s", sn, strlen(sn) > 17 ? "~" : "");
        text(b, left - 6, y + rowh / 2 - 2, "end", "leg", lab);
        if (!isfinite(r[i].v)) {
            text(b, left + 4, y + rowh / 2 - 2, "start", "tick", "not measured");
            continue;
        }
        double w = r[i].v / (a1 - a0) * (right - left);
        md_strbuf_printf(b, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
                         left, y, w, rowh - 8, md_html_colour(r[i].colour));
        char t[48];
        fmt(r[i].v, t, sizeof t);
        text(b, left + w + 4, y + rowh / 2 - 2, "start", "leg", t);
    }
    md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\"/>\n", left, top, left,
                     bottom);
    md_html_svg_close(b, NULL);
}

static void fmt_pct(double v, char *t, size_t n) { snprintf(t, n, "%.2f%%", v); }
static void fmt_plain(double v, char *t, size_t n) { snprintf(t, n, "%.4g", v); }
static void fmt_sps(double v, char *t, size_t n)
{
    if (v >= 100) snprintf(t, n, "%.0f/s", v);
    else snprintf(t, n, "%.3g/s", v);
}
static void fmt_ms(double v, char *t, size_t n) { snprintf(t, n, "%.4g ms", v); }
static void fmt_bytes(double v, char *t, size_t n) { md_fmt_bytes(v, t, n); }

/* ---- line charts over epochs --------------------------------------------------- */

struct line {
    const char *name;
    const cJSON *y; /* array over epochs (null and non-numbers: gaps) */
    int colour;
    int dashed;
};

static void lines(md_strbuf *b, const char *title, const char *ylabel, const struct line *s, int ns, double scale)
{
    double xhi = 1, ylo = INFINITY, yhi = -INFINITY;
    for (int i = 0; i < ns; i++) {
        int n = cJSON_GetArraySize(s[i].y);
        if (n > xhi) xhi = n;
        const cJSON *v;
        cJSON_ArrayForEach(v, s[i].y) if (cJSON_IsNumber(v) && isfinite(v->valuedouble))
        {
            ylo = fmin(ylo, v->valuedouble * scale);
            yhi = fmax(yhi, v->valuedouble * scale);
        }
    }
    if (!isfinite(ylo)) return;
    double y0, y1, ys, l = 60, r = LW - 20, t = 40, bt = LH - 40;
    md_html_nice_axis(ylo, yhi, &y0, &y1, &ys);
    md_html_svg_open(b, "curve", title, LW, LH);
    text(b, l, 18, "start", "ttl", title);
    double x0 = 1, x1 = xhi > 1 ? xhi : 2;
#define PX(v) (l + ((v) - x0) / (x1 - x0) * (r - l))
#define PY(v) (bt - ((v) - y0) / (y1 - y0) * (bt - t))
    for (double v = y0; v <= y1 + ys * 0.5; v += ys) {
        char tk[32];
        md_html_tick(v, tk, sizeof tk);
        md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", l, PY(v), r,
                         PY(v));
        text(b, l - 6, PY(v) + 4, "end", "tick", tk);
    }
    double xs = ceil((x1 - x0) / 8.0);
    for (double v = x0; v <= x1 + 1e-9; v += xs > 0 ? xs : 1) {
        char tk[32];
        snprintf(tk, sizeof tk, "%.0f", v);
        text(b, PX(v), bt + 16, "middle", "tick", tk);
    }
    text(b, (l + r) / 2, LH - 6, "middle", "axl", "epoch");
    md_strbuf_printf(b, "<g transform=\"translate(14 %.1f) rotate(-90)\">", (t + bt) / 2);
    text(b, 0, 0, "middle", "axl", ylabel);
    md_strbuf_add(b, "</g>\n");
    for (int i = 0; i < ns; i++) {
        const char *c = md_html_colour(s[i].colour);
        const char *dash = s[i].dashed ? " stroke-dasharray=\"6 4\"" : "";
        md_strbuf_printf(b, "<polyline class=\"line\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", c, dash);
        int k = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, s[i].y)
        {
            k++;
            if (cJSON_IsNumber(v) && isfinite(v->valuedouble))
                md_strbuf_printf(b, "%.1f,%.1f ", PX((double)k), PY(v->valuedouble * scale));
        }
        md_strbuf_add(b, "\"/>\n");
        k = 0;
        cJSON_ArrayForEach(v, s[i].y)
        {
            k++;
            if (cJSON_IsNumber(v) && isfinite(v->valuedouble))
                md_strbuf_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX((double)k),
                                 PY(v->valuedouble * scale), c);
        }
        /* legend: one row per series under the title */
        double lx = r - 170, ly = t + 4 + 14 * i;
        md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                         lx, ly, lx + 20, ly, c, dash);
        char nm[40], st[256];
        snprintf(nm, sizeof nm, "%.24s", stem(s[i].name, st, sizeof st));
        text(b, lx + 24, ly + 4, "start", "leg", nm);
    }
#undef PX
#undef PY
    md_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#999\"/>\n", l,
                     t, r - l, bt - t);
    md_html_svg_close(b, NULL);
}

/* ---- tables -------------------------------------------------------------------- */

static void cell_num(md_strbuf *b, double v, const char *fmt, double scale)
{
    if (isfinite(v)) {
        md_strbuf_add(b, "<td class=\"n\">");
        md_strbuf_printf(b, fmt, v * scale);
        md_strbuf_add(b, "</td>");
    } else {
        md_strbuf_add(b, "<td class=\"n dim\">&#8211;</td>");
    }
}

static void cell_bytes(md_strbuf *b, double v)
{
    char t[32];
    if (isfinite(v)) md_strbuf_printf(b, "<td class=\"n\">%s</td>", md_fmt_bytes(v, t, sizeof t));
    else md_strbuf_add(b, "<td class=\"n dim\">&#8211;</td>");
}

static void cell_text(md_strbuf *b, const char *t)
{
    md_html_wrap(b, "<td>", t ? t : "", "</td>");
}

/* A model's anchor: "model-<index>" (names may hold any characters). */
static void model_link(md_strbuf *b, int i, const char *name)
{
    md_strbuf_printf(b, "<a href=\"#model-%d\">", i + 1);
    md_strbuf_add_escaped(b, name);
    md_strbuf_add(b, "</a>");
}

static void recommendation_list(md_strbuf *b, const cJSON *recs)
{
    if (!cJSON_IsArray(recs)) {
        md_strbuf_add(b, "<p class=\"dim\">none: the model did not get as far as its benchmark</p>\n");
        return;
    }
    if (cJSON_GetArraySize(recs) == 0) {
        md_strbuf_add(b, "<p class=\"dim\">none: nothing measured suggests a change</p>\n");
        return;
    }
    md_strbuf_add(b, "<ol class=\"recs\">\n");
    const cJSON *e;
    cJSON_ArrayForEach(e, recs)
    {
        md_html_wrap(b, "<li><b>", md_hj_str(e, "topic") ? md_hj_str(e, "topic") : "", ":</b> ");
        md_strbuf_add_escaped(b, md_hj_str(e, "advice") ? md_hj_str(e, "advice") : "");
        if (md_hj_str(e, "figure")) {
            md_html_wrap(b, "<br><span class=\"fig\">measured: ", md_hj_str(e, "figure"), "</span>");
        }
        if (md_hj_str(e, "cost")) {
            md_html_wrap(b, "<br><span class=\"fig\">cost: ", md_hj_str(e, "cost"), "</span>");
        }
        md_strbuf_add(b, "</li>\n");
    }
    md_strbuf_add(b, "</ol>\n");
}

static const char *ci_word(const cJSON *row)
{
    const cJSON *c = md_hj_get(row, "ci_passed");
    return cJSON_IsBool(c) ? (cJSON_IsTrue(c) ? "passed" : "FAILED") : NULL;
}

/* ---- the sections ------------------------------------------------------------------ */

static int is_regression(const cJSON *m)
{
    const char *t = md_hj_str(md_hj_get(m, "data"), "task");
    if (!t) t = md_hj_str(md_hj_get(m, "training"), "task");
    return t && strcmp(t, "regression") == 0;
}

static void comparison_section(md_strbuf *b, const cJSON *r)
{
    const cJSON *models = md_hj_get(r, "models"), *cmp = md_hj_get(r, "comparison"), *rows = md_hj_get(cmp, "rows");
    md_strbuf_add(b, "<section id=\"comparison\">\n<h2>Model comparison</h2>\n");
    const cJSON *diag = md_hj_get(r, "diagnostics");
    if (md_hj_str(diag, "data")) {
        md_strbuf_add(b, "<p class=\"meta\">Data: ");
        md_strbuf_add_escaped(b, md_hj_str(diag, "data"));
        if (md_hj_str(diag, "data_why")) {
            md_html_wrap(b, " (", md_hj_str(diag, "data_why"), ")");
        }
        md_strbuf_add(b, "</p>\n");
    }
    /* the verdicts */
    md_strbuf_add(b, "<ul class=\"verdicts\">\n");
    if (md_hj_str(cmp, "most_accurate")) {
        md_html_wrap(b, "<li><b>Most accurate:</b> ", md_hj_str(cmp, "most_accurate"), "</li>\n");
    } else if (md_hj_str(cmp, "not_comparable")) {
        md_html_wrap(b, "<li><b>Most accurate:</b> not comparable, ", md_hj_str(cmp, "not_comparable"),
                     "</li>\n");
    }
    static const char *const verdict[][2] = {{"fastest", "Fastest to train"}, {"least_memory", "Least memory"}};
    for (int i = 0; i < 2; i++)
        if (md_hj_str(cmp, verdict[i][0])) {
            md_strbuf_printf(b, "<li><b>%s:</b> ", verdict[i][1]);
            md_strbuf_add_escaped(b, md_hj_str(cmp, verdict[i][0]));
            md_strbuf_add(b, "</li>\n");
        }
    md_strbuf_add(b, "</ul>\n");

    /* the table */
    /* forecasting models have no accuracy: the column only when a model has one */
    int n = 0, any_acc = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, rows) any_acc |= isfinite(num(row, "val_accuracy"));
    md_strbuf_printf(b, "<table class=\"rec cmp\"><thead><tr><th>model</th><th>task</th><th>classes</th>"
                        "<th>parameters</th>%s<th>val loss</th><th>val R&#178;</th><th>training samples/s</th>"
                        "<th>inference p50 ms</th><th>inference samples/s</th><th>peak memory</th><th>result</th>"
                        "</tr></thead><tbody>\n",
                     any_acc ? "<th>val accuracy</th>" : "");
    struct bar acc[MAXM], loss[MAXM], sps[MAXM], lat[MAXM], mem[MAXM];
    cJSON_ArrayForEach(row, rows)
    {
        if (n >= MAXM) break;
        const char *name = md_hj_str(row, "model") ? md_hj_str(row, "model") : "?";
        const cJSON *m = cJSON_GetArrayItem(models, n);
        double a = num(row, "val_accuracy"), r2 = num(md_hj_get(md_hj_get(m, "training"), "regression_metrics"), "r2");
        md_strbuf_add(b, "<tr><td>");
        model_link(b, n, name);
        md_strbuf_add(b, "</td>");
        cell_text(b, md_hj_str(row, "task"));
        cell_num(b, num(row, "num_classes"), "%.0f", 1);
        cell_num(b, num(row, "parameters"), "%.0f", 1);
        if (any_acc) cell_num(b, a, "%.2f%%", 100);
        cell_num(b, num(row, "val_loss"), "%.4f", 1);
        cell_num(b, r2, "%.4f", 1);
        cell_num(b, num(row, "samples_per_s"), "%.1f", 1);
        cell_num(b, num(row, "inference_latency_ms"), "%.3f", 1);
        cell_num(b, num(row, "inference_samples_per_s"), "%.1f", 1);
        cell_bytes(b, num(row, "peak_memory_bytes"));
        const char *res = md_hj_str(row, "status") ? md_hj_str(row, "status") : "?";
        const char *ci = ci_word(row);
        md_strbuf_printf(b, "<td class=\"%s\">", strcmp(res, "ok") == 0 && (!ci || ci[0] == 'p') ? "" : "bad");
        md_strbuf_add_escaped(b, res);
        if (ci) md_strbuf_printf(b, "; --ci %s", ci);
        md_strbuf_add(b, "</td></tr>\n");
        acc[n] = (struct bar){name, isfinite(a) ? a * 100 : a, n};
        loss[n] = (struct bar){name, num(row, "val_loss"), n};
        sps[n] = (struct bar){name, num(row, "samples_per_s"), n};
        lat[n] = (struct bar){name, num(row, "inference_latency_ms"), n};
        mem[n] = (struct bar){name, num(row, "peak_memory_bytes"), n};
        n++;
    }
    md_strbuf_add(b, "</tbody></table>\n");
    double batch = NAN;
    const cJSON *m;
    cJSON_ArrayForEach(m, models) if (!isfinite(batch)) batch = num(md_hj_get(m, "benchmark"), "batch_size");
    if (isfinite(batch))
        md_strbuf_printf(b, "<p class=\"fig\">Validation figures are the last epoch's; samples/s and latency come from "
                            "each model's benchmark at batch %.0f; peak memory is the device's, reset before each "
                            "model.</p>\n",
                         batch);

    /* side by side */
    md_strbuf_add(b, "<div class=\"charts\" id=\"comparison-charts\">\n");
    if (any_acc) bars(b, "Validation accuracy", "higher is better", acc, n, fmt_pct);
    else bars(b, "Validation loss", "lower is better", loss, n, fmt_plain);
    bars(b, "Training throughput (samples/s)", "higher is better", sps, n, fmt_sps);
    bars(b, "Inference latency (p50 per batch)", "lower is better", lat, n, fmt_ms);
    bars(b, "Peak device memory", "lower is better", mem, n, fmt_bytes);
    md_strbuf_add(b, "</div>\n");

    /* every model's validation curve in one chart */
    struct line ln[MAXM];
    int nl = 0, k = 0;
    cJSON_ArrayForEach(m, models)
    {
        if (nl >= MAXM) break;
        const cJSON *cu = md_hj_get(md_hj_get(m, "training"), "curves");
        const cJSON *y = any_acc ? md_hj_get(cu, "val_acc") : md_hj_get(cu, "val_loss");
        if (cJSON_GetArraySize(y) > 0) ln[nl++] = (struct line){md_hj_str(m, "name") ? md_hj_str(m, "name") : "?", y, k, 0};
        k++;
    }
    if (nl > 0) {
        md_strbuf_add(b, "<div class=\"charts\">\n");
        lines(b, any_acc ? "Validation accuracy per epoch, all models" : "Validation loss per epoch, all models",
              any_acc ? "accuracy (%)" : "loss", ln, nl, any_acc ? 100.0 : 1.0);
        md_strbuf_add(b, "</div>\n");
    }
    md_strbuf_add(b, "</section>\n");
}

static void figure_row(md_strbuf *b, const char *what, double v, const char *fmt, double scale)
{
    if (!isfinite(v)) return;
    md_strbuf_add(b, "<tr><th>");
    md_strbuf_add(b, what);
    md_strbuf_add(b, "</th><td class=\"n\">");
    md_strbuf_printf(b, fmt, v * scale);
    md_strbuf_add(b, "</td></tr>\n");
}

static void model_section(md_strbuf *b, const cJSON *m, const cJSON *row, int i, int n)
{
    const char *name = md_hj_str(m, "name") ? md_hj_str(m, "name") : "?";
    md_strbuf_printf(b, "<section id=\"model-%d\" class=\"model\">\n<h2>Model %d/%d: ", i + 1, i + 1, n);
    md_strbuf_add_escaped(b, name);
    md_strbuf_add(b, "</h2>\n");
    const cJSON *st = md_hj_get(m, "status");
    const char *res = md_hj_str(st, "result") ? md_hj_str(st, "result") : "?";
    md_strbuf_printf(b, "<p class=\"status %s\"><b>Result:</b> ", strcmp(res, "ok") == 0 ? "good" : "badbox");
    md_strbuf_add_escaped(b, res);
    if (md_hj_str(st, "error")) {
        md_strbuf_add(b, ": ");
        md_strbuf_add_escaped(b, md_hj_str(st, "error"));
    }
    double d = num(m, "duration_s");
    if (isfinite(d)) md_strbuf_printf(b, " &#183; %.1f s", d);
    md_strbuf_add(b, "</p>\n");

    const cJSON *tr = md_hj_get(m, "training"), *cu = md_hj_get(tr, "curves"), *bench = md_hj_get(m, "benchmark");
    const cJSON *inf = md_hj_get(bench, "inference"), *btr = md_hj_get(bench, "training");
    /* the figures */
    md_strbuf_add(b, "<table class=\"kv figures\"><tbody>\n");
    figure_row(b, "parameters", num(md_hj_get(m, "model"), "parameters"), "%.0f", 1);
    figure_row(b, "forward GFLOPs per sample", num(md_hj_get(m, "model"), "flops_forward"), "%.3f", 1e-9);
    figure_row(b, "classes", num(md_hj_get(m, "model"), "num_classes"), "%.0f", 1);
    figure_row(b, "validation accuracy (last epoch)", last(cu, "val_acc"), "%.2f%%", 100);
    figure_row(b, "validation loss (last epoch)", last(cu, "val_loss"), "%.4f", 1);
    figure_row(b, "validation R&#178;", num(md_hj_get(tr, "regression_metrics"), "r2"), "%.4f", 1);
    figure_row(b, "benchmark batch size", num(bench, "batch_size"), "%.0f", 1);
    figure_row(b, "training samples/s (benchmark)", num(btr, "samples_per_s"), "%.1f", 1);
    figure_row(b, "training step p50 (ms)", num(md_hj_get(btr, "step_ms"), "p50"), "%.3f", 1);
    figure_row(b, "inference samples/s", num(inf, "samples_per_s"), "%.1f", 1);
    figure_row(b, "inference latency per batch p50 (ms)", num(md_hj_get(inf, "latency_ms"), "p50"), "%.3f", 1);
    figure_row(b, "inference latency per batch p95 (ms)", num(md_hj_get(inf, "latency_ms"), "p95"), "%.3f", 1);
    figure_row(b, "inference latency per sample p50 (ms)", num(md_hj_get(inf, "per_sample_ms"), "p50"), "%.4f", 1);
    double peak = num(md_hj_get(m, "memory"), "device_peak_bytes");
    if (isfinite(peak)) {
        char t[32];
        md_strbuf_printf(b, "<tr><th>peak device memory</th><td class=\"n\">%s</td></tr>\n",
                         md_fmt_bytes(peak, t, sizeof t));
    }
    md_strbuf_add(b, "</tbody></table>\n");

    /* the curves */
    int regression = is_regression(m);
    struct line l[2];
    md_strbuf_add(b, "<div class=\"charts\">\n");
    l[0] = (struct line){"train", md_hj_get(cu, "train_loss"), 0, 0};
    l[1] = (struct line){"validation", md_hj_get(cu, "val_loss"), 1, 1};
    char title[200], sn[256];
    stem(name, sn, sizeof sn);
    snprintf(title, sizeof title, "%.60s: loss per epoch", sn);
    lines(b, title, "loss", l, 2, 1.0);
    if (regression) {
        l[0] = (struct line){"validation MSE", md_hj_get(cu, "val_mse"), 2, 0};
        l[1] = (struct line){"validation MAE", md_hj_get(cu, "val_mae"), 3, 1};
        snprintf(title, sizeof title, "%.60s: validation errors per epoch", sn);
        lines(b, title, "error", l, 2, 1.0);
    } else {
        l[0] = (struct line){"train", md_hj_get(cu, "train_acc"), 0, 0};
        l[1] = (struct line){"validation", md_hj_get(cu, "val_acc"), 1, 1};
        snprintf(title, sizeof title, "%.60s: accuracy per epoch", sn);
        lines(b, title, "accuracy (%)", l, 2, 100.0);
    }
    md_strbuf_add(b, "</div>\n");
    if (!cJSON_GetArraySize(md_hj_get(cu, "train_loss")) && !cJSON_GetArraySize(md_hj_get(cu, "val_loss")))
        md_strbuf_add(b, "<p class=\"dim\">No training curves: the model trained for no epoch.</p>\n");

    md_strbuf_add(b, "<h3>Recommendations</h3>\n");
    recommendation_list(b, md_hj_get(m, "recommendations"));
    const char *ci = ci_word(row);
    if (ci) {
        const cJSON *c = md_hj_get(m, "ci");
        md_strbuf_printf(b, "<h3>CI</h3>\n<p class=\"%s\">--ci %s: training throughput ", ci[0] == 'p' ? "" : "bad", ci);
        double v = num(md_hj_get(c, "throughput"), "samples_per_s"), th = num(md_hj_get(c, "throughput"), "min");
        if (isfinite(v)) md_strbuf_printf(b, "%.1f samples/s", v);
        else md_strbuf_add(b, "not measured");
        if (isfinite(th)) md_strbuf_printf(b, " (at least %g)", th);
        md_strbuf_add(b, "; final loss ");
        v = num(md_hj_get(c, "loss"), "final_loss");
        th = num(md_hj_get(c, "loss"), "max");
        if (isfinite(v)) md_strbuf_printf(b, "%.4g", v);
        else md_strbuf_add(b, "not measured");
        if (isfinite(th)) md_strbuf_printf(b, " (at most %g)", th);
        md_strbuf_add(b, "</p>\n");
    }
    md_strbuf_add(b, "</section>\n");
}

void md_html_models(md_strbuf *b, const cJSON *r)
{
    const cJSON *models = md_hj_get(r, "models");
    if (!cJSON_IsArray(models)) return;
    int n = cJSON_GetArraySize(models);
    md_strbuf_add(b, "<nav class=\"models\">Models: ");
    for (int i = 0; i < n; i++) {
        model_link(b, i, md_hj_str(cJSON_GetArrayItem(models, i), "name") ? md_hj_str(cJSON_GetArrayItem(models, i), "name") : "?");
        md_strbuf_add(b, " ");
    }
    md_strbuf_add(b, "</nav>\n");
    if (cJSON_IsArray(md_hj_get(md_hj_get(r, "comparison"), "rows"))) comparison_section(b, r);
    const cJSON *rows = md_hj_get(md_hj_get(r, "comparison"), "rows");
    for (int i = 0; i < n; i++) model_section(b, cJSON_GetArrayItem(models, i), cJSON_GetArrayItem(rows, i), i, n);
}

int md_html_models_key(const cJSON *r, const char *key)
{
    if (!cJSON_IsArray(md_hj_get(r, "models"))) return 0;
    return strcmp(key, "models") == 0 || strcmp(key, "comparison") == 0 || strcmp(key, "diagnostics") == 0;
}
