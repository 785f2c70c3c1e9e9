/* html_chart.c - the HTML report's charts: plain inline SVG 1.1 (no scripts),
 * deterministic coordinates (%.1f). Declared in html_util.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "diag/html_util.h"

/* ---- SVG charts --------------------------------------------------------------
 * Plain SVG 1.1 elements with presentation attributes; text in the page's
 * font. Coordinates are printed with %.1f, so the output is deterministic. */

#define CW 560.0  /* chart width */
#define CH 300.0  /* chart height */
#define ML 64.0   /* margins */
#define MR 64.0
#define MT 34.0
#define MB 48.0

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                      "#e377c2", "#7f7f7f"};

/* "Nice" tick spacing (1, 2, 5 x 10^k) covering [lo, hi] with at most ~6 ticks. */
static void nice_axis(double lo, double hi, double *a0, double *a1, double *step)
{
    if (!(hi > lo)) {
        double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1.0;
        lo -= pad;
        hi += pad;
    }
    double raw = (hi - lo) / 5.0;
    double mag = pow(10.0, floor(log10(raw)));
    double f = raw / mag;
    double s = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    *step = s * mag;
    *a0 = floor(lo / *step) * *step;
    *a1 = ceil(hi / *step) * *step;
}

static void fmt_tick(double v, char *buf, size_t n)
{
    double a = fabs(v);
    if (a >= 1e9) snprintf(buf, n, "%.3gG", v / 1e9);
    else if (a >= 1e6) snprintf(buf, n, "%.3gM", v / 1e6);
    else if (a >= 1e4) snprintf(buf, n, "%.3gk", v / 1e3);
    else snprintf(buf, n, "%.4g", fabs(v) < 1e-12 ? 0.0 : v);
}

void md_html_svg_open(md_strbuf *b, const char *figure_class, const char *label, double w, double h)
{
    md_strbuf_add(b, "<figure");
    if (figure_class) md_strbuf_printf(b, " class=\"%s\"", figure_class);
    md_strbuf_printf(b, "><svg class=\"chart\" role=\"img\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" aria-label=\"",
                     w, h, w, h);
    md_strbuf_add_escaped(b, label);
    md_strbuf_add(b, "\">\n");
    md_strbuf_printf(b, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", w, h);
}

void md_html_svg_close(md_strbuf *b, const char *caption)
{
    md_strbuf_add(b, "</svg>");
    if (caption) {
        md_html_wrap(b, "<figcaption>", caption, "</figcaption>");
    }
    md_strbuf_add(b, "</figure>\n");
}

void md_html_svg_text(md_strbuf *b, double x, double y, const char *anchor, const char *extra, const char *text)
{
    md_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>", x, y, anchor, extra ? extra : "");
    md_strbuf_add_escaped(b, text);
    md_strbuf_add(b, "</text>\n");
}

/* Title, frame, y ticks with grid lines on the left (or right) axis. */
static void svg_yaxis(md_strbuf *b, double y0, double y1, double step, int right, const char *label, const char *color)
{
    double top = MT, bottom = CH - MB;
    for (double v = y0; v <= y1 + step * 0.5; v += step) {
        double y = bottom - (v - y0) / (y1 - y0) * (bottom - top);
        char t[32];
        fmt_tick(v, t, sizeof t);
        if (!right)
            md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", ML, y,
                             CW - MR, y);
        md_html_svg_text(b, right ? CW - MR + 6 : ML - 6, y + 4, right ? "start" : "end", " class=\"tick\"", t);
    }
    char style[64];
    snprintf(style, sizeof style, " class=\"axl\" fill=\"%s\"", color ? color : "#333");
    double x = right ? CW - 12 : 14;
    md_strbuf_printf(b, "<g transform=\"translate(%.1f %.1f) rotate(-90)\">", x, (top + bottom) / 2);
    md_html_svg_text(b, 0, 0, "middle", style, label);
    md_strbuf_add(b, "</g>\n");
}

static void svg_frame_at(md_strbuf *b, const char *title, const char *xlabel, int left_title)
{
    md_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#999\"/>\n", ML,
                     MT, CW - ML - MR, CH - MT - MB);
    if (left_title) md_html_svg_text(b, ML, 18, "start", " class=\"ttl\"", title);
    else md_html_svg_text(b, CW / 2, 20, "middle", " class=\"ttl\"", title);
    if (xlabel) md_html_svg_text(b, (ML + CW - MR) / 2, CH - 10, "middle", " class=\"axl\"", xlabel);
}

static void svg_frame(md_strbuf *b, const char *title, const char *xlabel) { svg_frame_at(b, title, xlabel, 0); }


/* Line chart with markers; x numeric (epochs). A finite mark_x draws a
 * dashed vertical line there, labelled mark_label (the best epoch). */
void md_html_line_chart(md_strbuf *b, const char *title, const char *xlabel, const char *ylabel,
                              const struct md_html_series *s, int ns, const char *caption, double mark_x,
                              const char *mark_label)
{
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < s[i].n; j++) {
            if (!isfinite(s[i].y[j])) continue;
            xlo = fmin(xlo, s[i].x[j]);
            xhi = fmax(xhi, s[i].x[j]);
            ylo = fmin(ylo, s[i].y[j]);
            yhi = fmax(yhi, s[i].y[j]);
        }
    if (!isfinite(xlo)) return;
    double x0, x1, xs, y0, y1, ys;
    nice_axis(xlo, xhi, &x0, &x1, &xs);
    if (xhi > xlo) { x0 = xlo; x1 = xhi; } /* epochs: the axis spans the data */
    if (xs < 1) xs = 1;
    nice_axis(ylo, yhi, &y0, &y1, &ys);
    md_html_svg_open(b, NULL, title, CW, CH);
    svg_yaxis(b, y0, y1, ys, 0, ylabel, NULL);
    double left = ML, right = CW - MR, top = MT, bottom = CH - MB;
#define PX(v) (left + ((v) - x0) / (x1 - x0) * (right - left))
#define PY(v) (bottom - ((v) - y0) / (y1 - y0) * (bottom - top))
    for (double v = ceil(x0); v <= x1 + 1e-9; v += xs) {
        char t[32];
        fmt_tick(v, t, sizeof t);
        md_html_svg_text(b, PX(v), bottom + 16, "middle", " class=\"tick\"", t);
    }
    for (int i = 0; i < ns; i++) {
        const char *c = palette[i % 6];
        md_strbuf_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", c,
                         s[i].dashed ? " stroke-dasharray=\"6 4\"" : "");
        for (int j = 0; j < s[i].n; j++)
            if (isfinite(s[i].y[j])) md_strbuf_printf(b, "%.1f,%.1f ", PX(s[i].x[j]), PY(s[i].y[j]));
        md_strbuf_add(b, "\"/>\n");
        for (int j = 0; j < s[i].n; j++)
            if (isfinite(s[i].y[j]))
                md_strbuf_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(s[i].x[j]),
                                 PY(s[i].y[j]), c);
        /* legend, top right inside the plot */
        double lx = right - 110.0 * (ns - i), ly = top - 6;
        md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                         lx, ly - 4, lx + 22, ly - 4, c, s[i].dashed ? " stroke-dasharray=\"6 4\"" : "");
        md_html_svg_text(b, lx + 26, ly, "start", " class=\"leg\"", s[i].name);
    }
    if (isfinite(mark_x) && mark_x >= x0 && mark_x <= x1) {
        md_strbuf_printf(b, "<line class=\"mark\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#2ca02c\" "
                            "stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>\n",
                         PX(mark_x), top, PX(mark_x), bottom);
        int at_right = PX(mark_x) > (left + right) / 2;
        md_html_svg_text(b, PX(mark_x) + (at_right ? -4 : 4), top + 14, at_right ? "end" : "start", " class=\"leg\"", mark_label);
    }
#undef PX
#undef PY
    svg_frame_at(b, title, xlabel, 1);
    md_html_svg_close(b, caption);
}


/* Histogram of samples with p50/p95/p99 markers. */
void md_html_histogram(md_strbuf *b, const char *title, const double *v, int n, const cJSON *stats, const char *caption)
{
    if (n < 1) return;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) {
            lo = fmin(lo, v[i]);
            hi = fmax(hi, v[i]);
        }
    if (!isfinite(lo)) return;
    int bins = (int)ceil(sqrt((double)n));
    if (bins < 5) bins = 5;
    if (bins > 30) bins = 30;
    if (!(hi > lo)) {
        double pad = lo > 0 ? lo * 0.05 : 0.5;
        lo -= pad;
        hi += pad;
    }
    int counts[30] = {0};
    int cmax = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(v[i])) continue;
        int k = (int)((v[i] - lo) / (hi - lo) * bins);
        if (k >= bins) k = bins - 1;
        if (k < 0) k = 0;
        counts[k]++;
    }
    for (int k = 0; k < bins; k++) cmax = counts[k] > cmax ? counts[k] : cmax;
    double y0, y1, ys;
    nice_axis(0, cmax, &y0, &y1, &ys);
    y0 = 0;
    if (ys < 1) ys = 1;
    md_html_svg_open(b, NULL, title, CW, CH);
    svg_yaxis(b, y0, y1, ys, 0, "iterations", NULL);
    double left = ML, right = CW - MR, top = MT, bottom = CH - MB;
    double bw = (right - left) / bins;
    for (int k = 0; k < bins; k++) {
        double h = counts[k] / (y1 - y0) * (bottom - top);
        md_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", left + k * bw + 1,
                         bottom - h, bw - 2, h, palette[0]);
    }
    double t0, t1, tstep;
    nice_axis(lo, hi, &t0, &t1, &tstep);
    for (double tv = t0; tv <= t1 + tstep * 0.5; tv += tstep) {
        if (tv < lo - 1e-12 || tv > hi + 1e-12) continue;
        char t[32];
        fmt_tick(tv, t, sizeof t);
        double x = left + (tv - lo) / (hi - lo) * (right - left);
        md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\"/>\n", x, bottom, x, bottom + 4);
        md_html_svg_text(b, x, bottom + 16, "middle", " class=\"tick\"", t);
    }
    static const char *const pk[] = {"p50", "p95", "p99"};
    for (int i = 0; i < 3; i++) {
        double p;
        if (!md_hj_num(stats, pk[i], &p) || p < lo || p > hi) continue;
        double x = left + (p - lo) / (hi - lo) * (right - left);
        md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>\n",
                         x, top, x, bottom, i == 0 ? "#222222" : palette[3]);
        md_html_svg_text(b, x + 3, top + 12 + 12 * i, "start", " class=\"leg\"", pk[i]);
    }
    svg_frame(b, title, "latency per batch (ms)");
    md_html_svg_close(b, caption);
}

/* Batch-size sweep: throughput line on the left axis, peak memory bars on the
 * right axis; batch sizes equally spaced (they are usually powers of two);
 * batches that did not fit are marked. */
void md_html_sweep_chart(md_strbuf *b, const cJSON *sweep)
{
    enum { MAXP = 32 };
    double bs[MAXP], thr[MAXP], mem[MAXP];
    int ok[MAXP], n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, sweep)
    {
        if (n >= MAXP) break;
        double v;
        if (!md_hj_num(p, "batch_size", &v)) continue;
        bs[n] = v;
        const char *st = md_hj_str(p, "status");
        ok[n] = !st || strcmp(st, "ok") == 0;
        thr[n] = md_hj_num(p, "samples_per_s", &v) ? v : (double)NAN;
        mem[n] = md_hj_num(p, "peak_bytes", &v) ? v : (double)NAN;
        n++;
    }
    if (n == 0) return;
    double tmax = 0, mmax = 0;
    for (int i = 0; i < n; i++) {
        if (isfinite(thr[i])) tmax = fmax(tmax, thr[i]);
        if (isfinite(mem[i])) mmax = fmax(mmax, mem[i]);
    }
    double t0, t1, ts, m0, m1, msx;
    nice_axis(0, tmax > 0 ? tmax : 1, &t0, &t1, &ts);
    t0 = 0;
    double mscale = mmax >= 1 << 30 ? 1 << 30 : 1 << 20;
    const char *munit = mmax >= 1 << 30 ? "peak device memory (GiB)" : "peak device memory (MiB)";
    nice_axis(0, mmax > 0 ? mmax / mscale : 1, &m0, &m1, &msx);
    m0 = 0;
    const char *title = "Batch-size sweep: throughput and peak memory";
    md_html_svg_open(b, NULL, title, CW, CH);
    svg_yaxis(b, t0, t1, ts, 0, "samples/s", palette[0]);
    svg_yaxis(b, m0, m1, msx, 1, munit, palette[1]);
    double left = ML, right = CW - MR, top = MT, bottom = CH - MB;
    double slot = (right - left) / n;
    for (int i = 0; i < n; i++) {
        double cx = left + slot * (i + 0.5);
        char t[32];
        snprintf(t, sizeof t, "%.0f", bs[i]);
        md_html_svg_text(b, cx, bottom + 16, "middle", " class=\"tick\"", t);
        if (isfinite(mem[i])) {
            double h = mem[i] / mscale / (m1 - m0) * (bottom - top);
            md_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" fill-opacity=\"0.35\"/>\n",
                             cx - slot * 0.3, bottom - h, slot * 0.6, h, palette[1]);
        }
        if (!ok[i]) md_html_svg_text(b, cx, bottom - 8, "middle", " class=\"oom\"", "OOM");
    }
    md_strbuf_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", palette[0]);
    for (int i = 0; i < n; i++)
        if (ok[i] && isfinite(thr[i]))
            md_strbuf_printf(b, "%.1f,%.1f ", left + slot * (i + 0.5), bottom - (thr[i] - t0) / (t1 - t0) * (bottom - top));
    md_strbuf_add(b, "\"/>\n");
    for (int i = 0; i < n; i++)
        if (ok[i] && isfinite(thr[i]))
            md_strbuf_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", left + slot * (i + 0.5),
                             bottom - (thr[i] - t0) / (t1 - t0) * (bottom - top), palette[0]);
    svg_frame(b, title, "batch size");
    md_html_svg_close(b, "Line: training samples/s (left axis). Bars: peak device memory (right axis).");
}

void md_html_vgrid(md_strbuf *b, double a0, double a1, double step, double left, double right, double top,
                   double bottom, double label_y)
{
    for (double v = a0; v <= a1 + step * 0.5; v += step) {
        double x = left + (v - a0) / (a1 - a0) * (right - left);
        char t[32];
        fmt_tick(v, t, sizeof t);
        md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", x, top, x,
                         bottom);
        md_html_svg_text(b, x, label_y, "middle", " class=\"tick\"", t);
    }
}

/* Horizontal bars: one per record, value from `key`, label from `label_key`,
 * an optional note from `note_key` (a number printed as "x2.5"). */
void md_html_hbars(md_strbuf *b, const char *title, const cJSON *arr, const char *label_key, const char *key,
                  const char *note_key, const char *unit, double ref_line, const char *caption)
{
    enum { MAXB = 24 };
    const char *label[MAXB];
    double val[MAXB], note[MAXB];
    int n = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, arr)
    {
        if (n >= MAXB) break;
        double v;
        if (!md_hj_num(r, key, &v)) continue;
        label[n] = md_hj_str(r, label_key) ? md_hj_str(r, label_key) : "?";
        val[n] = v;
        note[n] = note_key && md_hj_num(r, note_key, &v) ? v : (double)NAN;
        n++;
    }
    if (n == 0) return;
    double vmax = 0;
    for (int i = 0; i < n; i++) vmax = fmax(vmax, val[i]);
    double a0, a1, as;
    nice_axis(0, vmax > 0 ? vmax : 1, &a0, &a1, &as);
    a0 = 0;
    double rowh = 30, h = MT + MB + rowh * n, left = 110, right = CW - 170;
    md_html_svg_open(b, NULL, title, CW, h);
    md_html_svg_text(b, CW / 2, 20, "middle", " class=\"ttl\"", title);
    double bottom = h - MB;
    md_html_vgrid(b, a0, a1, as, left, right, MT, bottom, bottom + 16);
    for (int i = 0; i < n; i++) {
        double y = MT + rowh * i + 5, w = val[i] / (a1 - a0) * (right - left);
        md_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", left, y, w,
                         rowh - 10, palette[i % 6]);
        md_html_svg_text(b, left - 6, y + rowh / 2 - 1, "end", " class=\"leg\"", label[i]);
        char t[64];
        if (isfinite(note[i])) snprintf(t, sizeof t, "%.4g %s (x%.2f)", val[i], unit, note[i]);
        else snprintf(t, sizeof t, "%.4g %s", val[i], unit);
        md_html_svg_text(b, left + w + 4, y + rowh / 2 - 1, "start", " class=\"leg\"", t);
    }
    md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\"/>\n", left, MT, left, bottom);
    if (ref_line > 0 && ref_line <= a1) {
        double x = left + (ref_line - a0) / (a1 - a0) * (right - left);
        md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222222\" stroke-dasharray=\"4 3\"/>\n",
                         x, MT - 4, x, bottom);
    }
    md_html_svg_close(b, caption);
}

/* Stacked bar of the memory breakdown (model, gradients, optimizer, activations). */
void md_html_memory_bar(md_strbuf *b, const cJSON *mem)
{
    static const char *const keys[] = {"params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                                       "other_bytes"};
    static const char *const names[] = {"parameters", "gradients", "optimizer state", "activations", "other"};
    double v[5], total = 0;
    for (int i = 0; i < 5; i++) {
        v[i] = md_hj_num(mem, keys[i], &v[i]) && v[i] > 0 ? v[i] : 0;
        total += v[i];
    }
    if (total <= 0) return;
    double w = CW, h = 112, left = 20, right = CW - 20, x = left, ly = 73;
    md_html_svg_open(b, NULL, "Device memory breakdown", w, h);
    md_html_svg_text(b, w / 2, 18, "middle", " class=\"ttl\"", "Device memory breakdown");
    for (int i = 0; i < 5; i++) {
        if (v[i] <= 0) continue;
        double bw = v[i] / total * (right - left);
        md_strbuf_printf(b, "<rect x=\"%.1f\" y=\"28\" width=\"%.1f\" height=\"24\" fill=\"%s\"/>\n", x, bw, palette[i]);
        x += bw;
    }
    x = left;
    for (int i = 0; i < 5; i++) {
        if (v[i] <= 0) continue;
        char t[96], sz[32];
        snprintf(t, sizeof t, "%s %s (%.0f%%)", names[i], md_fmt_bytes(v[i], sz, sizeof sz), 100.0 * v[i] / total);
        double tw = 14 + 6.2 * (double)strlen(t) + 14;
        if (x > left && x + tw > right) { /* next legend row */
            x = left;
            ly += 18;
        }
        md_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/>\n", x, ly - 9, palette[i]);
        md_html_svg_text(b, x + 14, ly, "start", " class=\"leg\"", t);
        x += tw;
    }
    md_html_svg_close(b, NULL);
}

void md_html_forecast_chart(md_strbuf *b, const cJSON *f)
{
    int nl, na, np;
    double *lb = md_hj_numbers(md_hj_get(f, "lookback"), &nl);
    double *ac = md_hj_numbers(md_hj_get(f, "actual"), &na);
    double *pr = md_hj_numbers(md_hj_get(f, "predicted"), &np);
    double ylo = INFINITY, yhi = -INFINITY;
    for (int i = 0; lb && i < nl; i++)
        if (isfinite(lb[i])) { ylo = fmin(ylo, lb[i]); yhi = fmax(yhi, lb[i]); }
    for (int i = 0; ac && i < na; i++)
        if (isfinite(ac[i])) { ylo = fmin(ylo, ac[i]); yhi = fmax(yhi, ac[i]); }
    for (int i = 0; pr && i < np; i++)
        if (isfinite(pr[i])) { ylo = fmin(ylo, pr[i]); yhi = fmax(yhi, pr[i]); }
    if (!isfinite(ylo)) goto done;
    if (!lb) nl = 0;
    if (!ac) na = 0;
    if (!pr) np = 0;
    int h = na > np ? na : np;
    double x0 = nl > 0 ? -(nl - 1) : 0, x1 = h > 0 ? h : 1;
    double y0, y1, ys, xa0, xa1, xs;
    nice_axis(ylo, yhi, &y0, &y1, &ys);
    nice_axis(x0, x1, &xa0, &xa1, &xs);
    char title[160];
    const char *var = md_hj_str(f, "variate");
    double w = 0;
    md_hj_num(f, "window", &w);
    snprintf(title, sizeof title, "Forecast: %.100s, test window %.0f", var ? var : "?", w);
    md_strbuf_printf(b, "<figure class=\"forecast\"><svg class=\"chart\" role=\"img\" width=\"%.0f\" height=\"%.0f\" "
                        "viewBox=\"0 0 %.0f %.0f\" aria-label=\"",
                     CW, CH, CW, CH);
    md_strbuf_add_escaped(b, title);
    md_strbuf_add(b, "\">\n");
    md_strbuf_printf(b, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", CW, CH);
    svg_yaxis(b, y0, y1, ys, 0, "value (original units)", NULL);
    double left = ML, right = CW - MR, top = MT, bottom = CH - MB;
#define PX(v) (left + ((v) - x0) / (x1 - x0) * (right - left))
#define PY(v) (bottom - ((v) - y0) / (y1 - y0) * (bottom - top))
    for (double v = ceil(x0 / xs) * xs; v <= x1 + 1e-9; v += xs) {
        char t[32];
        fmt_tick(v, t, sizeof t);
        md_html_svg_text(b, PX(v), bottom + 16, "middle", " class=\"tick\"", t);
    }
    /* the forecast starts after step 0 */
    md_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f3f3f3\"/>\n", PX(0), top,
                     right - PX(0), bottom - top);
    md_strbuf_printf(b, "<polyline class=\"lookback\" fill=\"none\" stroke=\"#999999\" stroke-width=\"1.5\" points=\"");
    for (int i = 0; i < nl; i++)
        if (isfinite(lb[i])) md_strbuf_printf(b, "%.1f,%.1f ", PX(i - nl + 1), PY(lb[i]));
    md_strbuf_add(b, "\"/>\n");
    md_strbuf_printf(b, "<polyline class=\"actual\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", palette[0]);
    if (nl > 0 && isfinite(lb[nl - 1])) md_strbuf_printf(b, "%.1f,%.1f ", PX(0), PY(lb[nl - 1]));
    for (int i = 0; i < na; i++)
        if (isfinite(ac[i])) md_strbuf_printf(b, "%.1f,%.1f ", PX(i + 1), PY(ac[i]));
    md_strbuf_add(b, "\"/>\n");
    md_strbuf_printf(b, "<polyline class=\"predicted\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", palette[1]);
    for (int i = 0; i < np; i++)
        if (isfinite(pr[i])) md_strbuf_printf(b, "%.1f,%.1f ", PX(i + 1), PY(pr[i]));
    md_strbuf_add(b, "\"/>\n");
#undef PX
#undef PY
    static const char *const names[] = {"lookback", "actual", "predicted"};
    const char *colors[] = {"#999999", palette[0], palette[1]};
    /* the legend under the plot, right of the x label: a long title needs the top line */
    for (int i = 0; i < 3; i++) {
        double lx = right - 82.0 * (3 - i), ly = CH - 10;
        md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n", lx,
                         ly - 4, lx + 22, ly - 4, colors[i]);
        md_html_svg_text(b, lx + 26, ly, "start", " class=\"leg\"", names[i]);
    }
    md_html_svg_text(b, left, CH - 10, "start", " class=\"axl\"", "time step (0 = last input)");
    svg_frame_at(b, title, NULL, 1);
    md_html_svg_close(b, NULL);
done:
    md_free(lb);
    md_free(ac);
    md_free(pr);
}

/* ---- the axis, tick and colour rules, for the charts of other pages ------------ */

void md_html_nice_axis(double lo, double hi, double *a0, double *a1, double *step) { nice_axis(lo, hi, a0, a1, step); }

void md_html_tick(double v, char *buf, size_t n) { fmt_tick(v, buf, n); }

const char *md_html_colour(int i) { return palette[(i % 8 + 8) % 8]; }
