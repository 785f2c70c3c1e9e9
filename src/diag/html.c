/* html.c - the self-contained HTML report with inline SVG charts. */
#include "diag/html.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "core/mem.h"
#include "diag/html_models.h"
#include "diag/strbuf.h"

/* ---- JSON access ---------------------------------------------------------- */

static const cJSON *get(const cJSON *o, const char *k) { return o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL; }

static int num(const cJSON *o, const char *k, double *v)
{
    const cJSON *it = get(o, k);
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble)) return 0;
    *v = it->valuedouble;
    return 1;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *it = get(o, k);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

/* First key of `keys` (NULL-terminated) that holds a finite number. */
static int num_any(const cJSON *o, const char *const *keys, double *v)
{
    for (; *keys; keys++)
        if (num(o, *keys, v)) return 1;
    return 0;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* training.task; older reports have none: curves with val_mse are a regression
 * run's. */
static int is_regression(const cJSON *tr)
{
    const char *task = str(tr, "task");
    if (task) return strcmp(task, "regression") == 0;
    return get(get(tr, "curves"), "val_mse") != NULL;
}

/* ---- value formatting ------------------------------------------------------
 * Units come from the key's suffix, as the schema names them. */

static void fmt_number(const char *key, double v, char *buf, size_t n)
{
    if (key && ends_with(key, "_bytes")) {
        md_fmt_bytes(v, buf, n);
    } else if (key && (ends_with(key, "_ms"))) {
        snprintf(buf, n, "%.4g ms", v);
    } else if (key && (ends_with(key, "_s") && !ends_with(key, "per_s"))) {
        snprintf(buf, n, "%.4g s", v);
    } else if (key && ends_with(key, "per_s")) {
        if (fabs(v) >= 1e4) {
            fmt_number(NULL, v, buf, n);
            size_t l = strlen(buf);
            snprintf(buf + l, n - l, " /s");
        } else {
            snprintf(buf, n, "%.4g /s", v);
        }
    } else if ((v == floor(v) || fabs(v) >= 1e4) && fabs(v) < 1e15) {
        long long i = (long long)llround(v);
        char tmp[48];
        int neg = i < 0;
        unsigned long long u = neg ? (unsigned long long)(-i) : (unsigned long long)i;
        int len = 0, digits = 0;
        do {
            if (digits && digits % 3 == 0) tmp[len++] = ',';
            tmp[len++] = (char)('0' + u % 10);
            u /= 10;
            digits++;
        } while (u);
        if (neg) tmp[len++] = '-';
        size_t j = 0;
        for (; len > 0 && j + 1 < n; j++) buf[j] = tmp[--len];
        buf[j] = '\0';
    } else {
        snprintf(buf, n, "%.4g", v);
    }
}

static void add_value(md_strbuf *b, const char *key, const cJSON *v);

static void add_scalar(md_strbuf *b, const char *key, const cJSON *v)
{
    char buf[64];
    if (cJSON_IsNumber(v)) {
        if (!isfinite(v->valuedouble)) md_strbuf_add(b, "<span class=\"bad\">not finite</span>");
        else {
            fmt_number(key, v->valuedouble, buf, sizeof buf);
            md_strbuf_add_escaped(b, buf);
        }
    } else if (cJSON_IsString(v)) {
        md_strbuf_add_escaped(b, v->valuestring);
    } else if (cJSON_IsBool(v)) {
        md_strbuf_add(b, cJSON_IsTrue(v) ? "yes" : "no");
    } else {
        md_strbuf_add(b, "<span class=\"dim\">&#8212;</span>");
    }
}

static int is_scalar(const cJSON *v) { return !cJSON_IsObject(v) && !cJSON_IsArray(v); }

/* [1, 28, 28]: shown joined in a table cell */
static int scalar_array(const cJSON *v)
{
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > 16) return 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) if (!is_scalar(e)) return 0;
    return 1;
}

/* A table of records (array of objects): columns are the scalar keys in order
 * of first appearance. */
static void add_records(md_strbuf *b, const cJSON *arr)
{
    enum { MAXCOL = 16 };
    const char *cols[MAXCOL];
    int nc = 0;
    const cJSON *r, *f;
    cJSON_ArrayForEach(r, arr)
    {
        cJSON_ArrayForEach(f, r)
        {
            if (!(is_scalar(f) || scalar_array(f)) || !f->string) continue;
            int seen = 0;
            for (int i = 0; i < nc; i++) seen |= strcmp(cols[i], f->string) == 0;
            if (!seen && nc < MAXCOL) cols[nc++] = f->string;
        }
    }
    md_strbuf_add(b, "<table class=\"rec\"><thead><tr>");
    for (int i = 0; i < nc; i++) {
        md_strbuf_add(b, "<th>");
        md_strbuf_add_escaped(b, cols[i]);
        md_strbuf_add(b, "</th>");
    }
    md_strbuf_add(b, "</tr></thead><tbody>\n");
    cJSON_ArrayForEach(r, arr)
    {
        md_strbuf_add(b, "<tr>");
        for (int i = 0; i < nc; i++) {
            const cJSON *v = get(r, cols[i]);
            md_strbuf_add(b, cJSON_IsNumber(v) ? "<td class=\"n\">" : "<td>");
            if (v && cJSON_IsArray(v)) add_value(b, cols[i], v);
            else if (v) add_scalar(b, cols[i], v);
            md_strbuf_add(b, "</td>");
        }
        md_strbuf_add(b, "</tr>\n");
    }
    md_strbuf_add(b, "</tbody></table>\n");
}

/* Key/value table of an object; nested objects and arrays recurse. Keys in
 * `skip` (NULL-terminated, may be NULL) are left out (drawn elsewhere). */
static void add_kv(md_strbuf *b, const cJSON *obj, const char *const *skip)
{
    md_strbuf_add(b, "<table class=\"kv\"><tbody>\n");
    const cJSON *f;
    cJSON_ArrayForEach(f, obj)
    {
        int skipped = 0;
        for (const char *const *s = skip; s && *s; s++) skipped |= strcmp(*s, f->string) == 0;
        if (skipped) continue;
        md_strbuf_add(b, "<tr><th>");
        md_strbuf_add_escaped(b, f->string);
        md_strbuf_add(b, "</th><td>");
        add_value(b, f->string, f);
        md_strbuf_add(b, "</td></tr>\n");
    }
    md_strbuf_add(b, "</tbody></table>\n");
}

/* A small object of scalars ({"mean": .., "p50": ..}) on one line. */
static int is_flat(const cJSON *o)
{
    int n = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, o)
    {
        if (!is_scalar(f) || (cJSON_IsString(f) && strlen(f->valuestring) > 40)) return 0;
        n++;
    }
    return n > 0 && n <= 10;
}

static void add_value(md_strbuf *b, const char *key, const cJSON *v)
{
    if (key && strcmp(key, "samples_ms") == 0 && cJSON_IsArray(v)) {
        md_strbuf_printf(b, "<span class=\"dim\">%d timings, drawn in the histogram</span>", cJSON_GetArraySize(v));
    } else if (cJSON_IsObject(v) && is_flat(v)) {
        const cJSON *f;
        int i = 0;
        md_strbuf_add(b, "<span class=\"flat\">");
        cJSON_ArrayForEach(f, v)
        {
            if (i++) md_strbuf_add(b, " <span class=\"dim\">&#183;</span> ");
            md_strbuf_add(b, "<span class=\"k\">");
            md_strbuf_add_escaped(b, f->string);
            md_strbuf_add(b, "</span> ");
            /* stats of a timing ({"n", "mean", ...} under "latency_ms") take the parent's unit */
            add_scalar(b, cJSON_IsNumber(f) && key && ends_with(key, "_ms") && strcmp(f->string, "n") ? key : f->string, f);
        }
        md_strbuf_add(b, "</span>");
    } else if (cJSON_IsObject(v)) {
        add_kv(b, v, NULL);
    } else if (cJSON_IsArray(v)) {
        int objects = 0, n = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, v)
        {
            objects += cJSON_IsObject(e);
            n++;
        }
        if (n == 0) {
            md_strbuf_add(b, "<span class=\"dim\">none</span>");
        } else if (objects == n) {
            add_records(b, v);
        } else {
            int i = 0, shown = 0;
            cJSON_ArrayForEach(e, v)
            {
                if (i++ >= 64) break; /* raw samples: the charts show them */
                if (shown++) md_strbuf_add(b, ", ");
                if (is_scalar(e)) {
                    add_scalar(b, key, e);
                } else if (scalar_array(e) && cJSON_GetArraySize(e) <= 4) { /* [first, last] row ranges */
                    const cJSON *x;
                    int k = 0;
                    md_strbuf_add(b, "[");
                    cJSON_ArrayForEach(x, e)
                    {
                        if (k++) md_strbuf_add(b, ", ");
                        add_scalar(b, key, x);
                    }
                    md_strbuf_add(b, "]");
                } else {
                    md_strbuf_add(b, "&#8230;");
                }
            }
            if (n > 64) md_strbuf_printf(b, ", &#8230; (%d values)", n);
        }
    } else {
        add_scalar(b, key, v);
    }
}

/* ---- SVG charts --------------------------------------------------------------
 * Plain SVG 1.1 elements with presentation attributes; text in the page's
 * font. Coordinates are printed with %.1f, so the output is deterministic. */

#define CW 560.0  /* chart width */
#define CH 300.0  /* chart height */
#define ML 64.0   /* margins */
#define MR 64.0
#define MT 34.0
#define MB 48.0

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};

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

static void svg_open(md_strbuf *b, const char *label, double w, double h)
{
    md_strbuf_printf(b, "<figure><svg class=\"chart\" role=\"img\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" aria-label=\"",
                     w, h, w, h);
    md_strbuf_add_escaped(b, label);
    md_strbuf_add(b, "\">\n");
    md_strbuf_printf(b, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", w, h);
}

static void svg_close(md_strbuf *b, const char *caption)
{
    md_strbuf_add(b, "</svg>");
    if (caption) {
        md_strbuf_add(b, "<figcaption>");
        md_strbuf_add_escaped(b, caption);
        md_strbuf_add(b, "</figcaption>");
    }
    md_strbuf_add(b, "</figure>\n");
}

static void svg_text(md_strbuf *b, double x, double y, const char *anchor, const char *extra, const char *text)
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
        svg_text(b, right ? CW - MR + 6 : ML - 6, y + 4, right ? "start" : "end", " class=\"tick\"", t);
    }
    char style[64];
    snprintf(style, sizeof style, " class=\"axl\" fill=\"%s\"", color ? color : "#333");
    double x = right ? CW - 12 : 14;
    md_strbuf_printf(b, "<g transform=\"translate(%.1f %.1f) rotate(-90)\">", x, (top + bottom) / 2);
    svg_text(b, 0, 0, "middle", style, label);
    md_strbuf_add(b, "</g>\n");
}

static void svg_frame_at(md_strbuf *b, const char *title, const char *xlabel, int left_title)
{
    md_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#999\"/>\n", ML,
                     MT, CW - ML - MR, CH - MT - MB);
    if (left_title) svg_text(b, ML, 18, "start", " class=\"ttl\"", title);
    else svg_text(b, CW / 2, 20, "middle", " class=\"ttl\"", title);
    if (xlabel) svg_text(b, (ML + CW - MR) / 2, CH - 10, "middle", " class=\"axl\"", xlabel);
}

static void svg_frame(md_strbuf *b, const char *title, const char *xlabel) { svg_frame_at(b, title, xlabel, 0); }

struct series {
    const char *name;
    const double *x, *y; /* n points; NaN y = missing */
    int n;
    int dashed;
};

/* Line chart with markers; x numeric (epochs). A finite mark_x draws a
 * dashed vertical line there, labelled mark_label (the best epoch). */
static void line_chart_marked(md_strbuf *b, const char *title, const char *xlabel, const char *ylabel,
                              const struct series *s, int ns, const char *caption, double mark_x,
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
    svg_open(b, title, CW, CH);
    svg_yaxis(b, y0, y1, ys, 0, ylabel, NULL);
    double left = ML, right = CW - MR, top = MT, bottom = CH - MB;
#define PX(v) (left + ((v) - x0) / (x1 - x0) * (right - left))
#define PY(v) (bottom - ((v) - y0) / (y1 - y0) * (bottom - top))
    for (double v = ceil(x0); v <= x1 + 1e-9; v += xs) {
        char t[32];
        fmt_tick(v, t, sizeof t);
        svg_text(b, PX(v), bottom + 16, "middle", " class=\"tick\"", t);
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
        svg_text(b, lx + 26, ly, "start", " class=\"leg\"", s[i].name);
    }
    if (isfinite(mark_x) && mark_x >= x0 && mark_x <= x1) {
        md_strbuf_printf(b, "<line class=\"mark\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#2ca02c\" "
                            "stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>\n",
                         PX(mark_x), top, PX(mark_x), bottom);
        int at_right = PX(mark_x) > (left + right) / 2;
        svg_text(b, PX(mark_x) + (at_right ? -4 : 4), top + 14, at_right ? "end" : "start", " class=\"leg\"", mark_label);
    }
#undef PX
#undef PY
    svg_frame_at(b, title, xlabel, 1);
    svg_close(b, caption);
}

static void line_chart(md_strbuf *b, const char *title, const char *xlabel, const char *ylabel,
                       const struct series *s, int ns, const char *caption)
{
    line_chart_marked(b, title, xlabel, ylabel, s, ns, caption, (double)NAN, NULL);
}

/* Histogram of samples with p50/p95/p99 markers. */
static void histogram(md_strbuf *b, const char *title, const double *v, int n, const cJSON *stats, const char *caption)
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
    svg_open(b, title, CW, CH);
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
        svg_text(b, x, bottom + 16, "middle", " class=\"tick\"", t);
    }
    static const char *const pk[] = {"p50", "p95", "p99"};
    for (int i = 0; i < 3; i++) {
        double p;
        if (!num(stats, pk[i], &p) || p < lo || p > hi) continue;
        double x = left + (p - lo) / (hi - lo) * (right - left);
        md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>\n",
                         x, top, x, bottom, i == 0 ? "#222222" : palette[3]);
        svg_text(b, x + 3, top + 12 + 12 * i, "start", " class=\"leg\"", pk[i]);
    }
    svg_frame(b, title, "latency per batch (ms)");
    svg_close(b, caption);
}

/* Batch-size sweep: throughput line on the left axis, peak memory bars on the
 * right axis; batch sizes equally spaced (they are usually powers of two);
 * batches that did not fit are marked. */
static void sweep_chart(md_strbuf *b, const cJSON *sweep)
{
    enum { MAXP = 32 };
    double bs[MAXP], thr[MAXP], mem[MAXP];
    int ok[MAXP], n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, sweep)
    {
        if (n >= MAXP) break;
        double v;
        if (!num(p, "batch_size", &v)) continue;
        bs[n] = v;
        const char *st = str(p, "status");
        ok[n] = !st || strcmp(st, "ok") == 0;
        thr[n] = num(p, "samples_per_s", &v) ? v : (double)NAN;
        mem[n] = num(p, "peak_bytes", &v) ? v : (double)NAN;
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
    svg_open(b, title, CW, CH);
    svg_yaxis(b, t0, t1, ts, 0, "samples/s", palette[0]);
    svg_yaxis(b, m0, m1, msx, 1, munit, palette[1]);
    double left = ML, right = CW - MR, top = MT, bottom = CH - MB;
    double slot = (right - left) / n;
    for (int i = 0; i < n; i++) {
        double cx = left + slot * (i + 0.5);
        char t[32];
        snprintf(t, sizeof t, "%.0f", bs[i]);
        svg_text(b, cx, bottom + 16, "middle", " class=\"tick\"", t);
        if (isfinite(mem[i])) {
            double h = mem[i] / mscale / (m1 - m0) * (bottom - top);
            md_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" fill-opacity=\"0.35\"/>\n",
                             cx - slot * 0.3, bottom - h, slot * 0.6, h, palette[1]);
        }
        if (!ok[i]) svg_text(b, cx, bottom - 8, "middle", " class=\"oom\"", "OOM");
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
    svg_close(b, "Line: training samples/s (left axis). Bars: peak device memory (right axis).");
}

/* Horizontal bars: one per record, value from `key`, label from `label_key`,
 * an optional note from `note_key` (a number printed as "x2.5"). */
static void hbars(md_strbuf *b, const char *title, const cJSON *arr, const char *label_key, const char *key,
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
        if (!num(r, key, &v)) continue;
        label[n] = str(r, label_key) ? str(r, label_key) : "?";
        val[n] = v;
        note[n] = note_key && num(r, note_key, &v) ? v : (double)NAN;
        n++;
    }
    if (n == 0) return;
    double vmax = 0;
    for (int i = 0; i < n; i++) vmax = fmax(vmax, val[i]);
    double a0, a1, as;
    nice_axis(0, vmax > 0 ? vmax : 1, &a0, &a1, &as);
    a0 = 0;
    double rowh = 30, h = MT + MB + rowh * n, left = 110, right = CW - 170;
    svg_open(b, title, CW, h);
    svg_text(b, CW / 2, 20, "middle", " class=\"ttl\"", title);
    double bottom = h - MB;
    for (double v = a0; v <= a1 + as * 0.5; v += as) {
        double x = left + (v - a0) / (a1 - a0) * (right - left);
        char t[32];
        fmt_tick(v, t, sizeof t);
        md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", x, MT, x, bottom);
        svg_text(b, x, bottom + 16, "middle", " class=\"tick\"", t);
    }
    for (int i = 0; i < n; i++) {
        double y = MT + rowh * i + 5, w = val[i] / (a1 - a0) * (right - left);
        md_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", left, y, w,
                         rowh - 10, palette[i % 6]);
        svg_text(b, left - 6, y + rowh / 2 - 1, "end", " class=\"leg\"", label[i]);
        char t[64];
        if (isfinite(note[i])) snprintf(t, sizeof t, "%.4g %s (x%.2f)", val[i], unit, note[i]);
        else snprintf(t, sizeof t, "%.4g %s", val[i], unit);
        svg_text(b, left + w + 4, y + rowh / 2 - 1, "start", " class=\"leg\"", t);
    }
    md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\"/>\n", left, MT, left, bottom);
    if (ref_line > 0 && ref_line <= a1) {
        double x = left + (ref_line - a0) / (a1 - a0) * (right - left);
        md_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222222\" stroke-dasharray=\"4 3\"/>\n",
                         x, MT - 4, x, bottom);
    }
    svg_close(b, caption);
}

/* Stacked bar of the memory breakdown (model, gradients, optimizer, activations). */
static void memory_bar(md_strbuf *b, const cJSON *mem)
{
    static const char *const keys[] = {"params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                                       "other_bytes"};
    static const char *const names[] = {"parameters", "gradients", "optimizer state", "activations", "other"};
    double v[5], total = 0;
    for (int i = 0; i < 5; i++) {
        v[i] = num(mem, keys[i], &v[i]) && v[i] > 0 ? v[i] : 0;
        total += v[i];
    }
    if (total <= 0) return;
    double w = CW, h = 112, left = 20, right = CW - 20, x = left, ly = 73;
    svg_open(b, "Device memory breakdown", w, h);
    svg_text(b, w / 2, 18, "middle", " class=\"ttl\"", "Device memory breakdown");
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
        svg_text(b, x + 14, ly, "start", " class=\"leg\"", t);
        x += tw;
    }
    svg_close(b, NULL);
}

/* ---- sections ---------------------------------------------------------------- */

static void section_open(md_strbuf *b, const char *id, const char *title)
{
    md_strbuf_printf(b, "<section id=\"%s\">\n<h2>", id);
    md_strbuf_add_escaped(b, title);
    md_strbuf_add(b, "</h2>\n");
}

static void section_close(md_strbuf *b) { md_strbuf_add(b, "</section>\n"); }

static void header(md_strbuf *b, const cJSON *r)
{
    const cJSON *tool = get(r, "tool");
    const cJSON *sel = get(r, "selected_device");
    const cJSON *status = get(r, "status");
    md_strbuf_add(b, "<header>\n<h1>mpsdiag report</h1>\n<p class=\"meta\">");
    md_strbuf_add_escaped(b, str(tool, "name") ? str(tool, "name") : "mpsdiag");
    md_strbuf_add(b, " ");
    md_strbuf_add_escaped(b, str(tool, "version") ? str(tool, "version") : "");
    if (str(r, "started_at")) {
        md_strbuf_add(b, " &#183; started ");
        md_strbuf_add_escaped(b, str(r, "started_at"));
    }
    double d;
    if (num(r, "duration_s", &d)) md_strbuf_printf(b, " &#183; %.1f s", d);
    if (str(get(r, "system"), "hostname")) {
        md_strbuf_add(b, " &#183; host ");
        md_strbuf_add_escaped(b, str(get(r, "system"), "hostname"));
    }
    md_strbuf_add(b, "</p>\n");
    if (sel) {
        md_strbuf_add(b, "<p class=\"dev\"><b>Device:</b> ");
        md_strbuf_add_escaped(b, str(sel, "backend") ? str(sel, "backend") : "?");
        double idx = 0;
        num(sel, "index", &idx);
        md_strbuf_printf(b, ":%.0f ", idx);
        if (str(sel, "name")) {
            md_strbuf_add(b, "(");
            md_strbuf_add_escaped(b, str(sel, "name"));
            md_strbuf_add(b, ")");
        }
        if (str(sel, "why")) {
            md_strbuf_add(b, " &#8212; ");
            md_strbuf_add_escaped(b, str(sel, "why"));
        }
        md_strbuf_add(b, "</p>\n");
    }
    if (status) {
        const char *res = str(status, "result") ? str(status, "result") : "unknown";
        int good = strcmp(res, "ok") == 0;
        md_strbuf_printf(b, "<p class=\"status %s\"><b>Result:</b> ", good ? "good" : "badbox");
        md_strbuf_add_escaped(b, res);
        double code;
        if (num(status, "exit_code", &code)) md_strbuf_printf(b, " (exit %.0f)", code);
        if (str(status, "error")) {
            md_strbuf_add(b, ": ");
            md_strbuf_add_escaped(b, str(status, "error"));
        }
        md_strbuf_add(b, "</p>\n");
    }
    /* headline figures, when the run measured them */
    const cJSON *bench = get(r, "benchmark");
    const cJSON *tr = get(bench, "training");
    const cJSON *inf = get(bench, "inference");
    double v;
    md_strbuf_add(b, "<div class=\"cards\">");
    if (num(tr, "samples_per_s", &v)) md_strbuf_printf(b, "<div class=\"card\"><span>%.4g</span>training samples/s</div>", v);
    if (num(get(inf, "latency_ms"), "p50", &v))
        md_strbuf_printf(b, "<div class=\"card\"><span>%.4g ms</span>inference p50 per batch</div>", v);
    if (num(tr, "achieved_gflops", &v))
        md_strbuf_printf(b, "<div class=\"card\"><span>%.4g</span>achieved GFLOP/s</div>", v);
    const cJSON *rt = get(r, "training");
    double bm;
    if (is_regression(rt) && num(get(rt, "test"), "mse", &v)) {
        if (num(get(get(rt, "test"), "baseline"), "mse", &bm))
            md_strbuf_printf(b, "<div class=\"card\"><span>%.4g</span>test MSE (naive %.4g)</div>", v, bm);
        else
            md_strbuf_printf(b, "<div class=\"card\"><span>%.4g</span>test MSE</div>", v);
    }
    if (num(get(r, "memory"), "device_peak_bytes", &v)) {
        char t[32];
        md_strbuf_printf(b, "<div class=\"card\"><span>%s</span>peak device memory</div>", md_fmt_bytes(v, t, sizeof t));
    }
    md_strbuf_add(b, "</div>\n</header>\n");
}

static void nav(md_strbuf *b, const cJSON *r)
{
    static const char *const ids[][2] = {
        {"system", "System"},   {"devices", "Devices"},     {"settings", "Settings"},
        {"model", "Model"},     {"data", "Data"},           {"training", "Training"}, {"folds", "Cross-validation"},
        {"benchmark", "Benchmark"}, {"memory", "Memory"}, {"recommendations", "Recommendations"},
        {"warnings", "Warnings"},
    };
    md_strbuf_add(b, "<nav>");
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (get(r, ids[i][0])) md_strbuf_printf(b, "<a href=\"#%s\">%s</a> ", ids[i][0], ids[i][1]);
    md_strbuf_add(b, "</nav>\n");
}

static void settings_section(md_strbuf *b, const cJSON *settings)
{
    section_open(b, "settings", "Settings applied, and why");
    md_strbuf_add(b, "<table class=\"rec\"><thead><tr><th>setting</th><th>value</th><th>why</th></tr></thead><tbody>\n");
    const cJSON *s;
    cJSON_ArrayForEach(s, settings)
    {
        md_strbuf_add(b, "<tr><td><code>");
        md_strbuf_add_escaped(b, str(s, "name"));
        md_strbuf_add(b, "</code></td><td><b>");
        add_scalar(b, NULL, get(s, "value"));
        md_strbuf_add(b, "</b></td><td>");
        md_strbuf_add_escaped(b, str(s, "why"));
        md_strbuf_add(b, "</td></tr>\n");
    }
    md_strbuf_add(b, "</tbody></table>\n");
    section_close(b);
}

/* ---- regression (forecasting) runs ------------------------------------------
 * training.task is "regression": no accuracies; the validation MSE and MAE per
 * epoch, the test figures beside the naive baseline with a verdict, and a
 * forecast-against-actual chart per entry of training.forecasts. */

/* The numbers of a JSON array as doubles (null and non-numbers: NaN) into a
 * new md_malloc'd array the caller frees; NULL when empty or no memory. */
static double *num_array(const cJSON *a, int *n)
{
    *n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0;
    if (*n == 0) return NULL;
    double *v = md_malloc(sizeof(double) * (size_t)*n);
    if (!v) return NULL;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) v[i++] = cJSON_IsNumber(e) && isfinite(e->valuedouble) ? e->valuedouble : (double)NAN;
    return v;
}

/* Loss with the best epoch marked, and the validation errors, per epoch. */
static void regression_curves(md_strbuf *b, const cJSON *tr, const cJSON *ep, int n)
{
    double *buf = md_malloc(sizeof(double) * 5 * (size_t)n);
    if (!buf) return;
    double *x = buf, *tl = buf + n, *vl = buf + 2 * n, *vmse = buf + 3 * n, *vmae = buf + 4 * n;
    static const char *const k_tl[] = {"train_loss", "loss", NULL};
    static const char *const k_vl[] = {"val_loss", NULL};
    static const char *const k_mse[] = {"val_mse", NULL};
    static const char *const k_mae[] = {"val_mae", NULL};
    static const char *const k_ep[] = {"epoch", NULL};
    int i = 0, have_loss = 0, have_err = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ep)
    {
        if (!num_any(e, k_ep, &x[i])) x[i] = i + 1;
        if (!num_any(e, k_tl, &tl[i])) tl[i] = (double)NAN;
        if (!num_any(e, k_vl, &vl[i])) vl[i] = (double)NAN;
        if (!num_any(e, k_mse, &vmse[i])) vmse[i] = (double)NAN;
        if (!num_any(e, k_mae, &vmae[i])) vmae[i] = (double)NAN;
        have_loss |= isfinite(tl[i]) || isfinite(vl[i]);
        have_err |= isfinite(vmse[i]) || isfinite(vmae[i]);
        i++;
    }
    double best = (double)NAN;
    char label[48] = "";
    if (num(get(tr, "best"), "epoch", &best)) snprintf(label, sizeof label, "best epoch %.0f", best);
    const char *lf = str(tr, "loss_function");
    char ylabel[64];
    snprintf(ylabel, sizeof ylabel, "loss (%s)", lf ? lf : "standardised");
    md_strbuf_add(b, "<div class=\"charts\">\n");
    if (have_loss) {
        struct series s[2] = {{"train", x, tl, n, 0}, {"validation", x, vl, n, 1}};
        line_chart_marked(b, "Loss per epoch", "epoch", ylabel, s, 2, NULL, best, label);
    }
    if (have_err) {
        struct series s[2] = {{"val MSE", x, vmse, n, 0}, {"val MAE", x, vmae, n, 1}};
        line_chart_marked(b, "Validation error per epoch", "epoch", "error (standardised)", s, 2, NULL, best, label);
    }
    md_strbuf_add(b, "</div>\n");
    md_free(buf);
}

/* "Early stopping: ..." in one line, when --patience was given. */
static void early_stopping_line(md_strbuf *b, const cJSON *tr)
{
    const cJSON *es = get(tr, "early_stopping");
    double patience, stopped, best, epochs;
    if (!cJSON_IsObject(es) || !num(es, "patience", &patience)) return;
    md_strbuf_printf(b, "<p class=\"es\"><b>Early stopping</b> (patience %.0f epochs): ", patience);
    if (num(es, "stopped_after_epoch", &stopped))
        md_strbuf_printf(b, "stopped after epoch %.0f, the validation loss not having improved for %.0f epochs", stopped,
                         patience);
    else if (num(tr, "epochs", &epochs))
        md_strbuf_printf(b, "not triggered; all %.0f epochs ran", epochs);
    else
        md_strbuf_add(b, "not triggered; all epochs ran");
    if (num(get(tr, "best"), "epoch", &best)) {
        double v;
        md_strbuf_printf(b, "; best epoch %.0f", best);
        if (num(get(tr, "best"), "value", &v)) md_strbuf_printf(b, " (validation loss %.4g)", v);
    }
    md_strbuf_add(b, ".</p>\n");
}

static void test_cell(md_strbuf *b, const cJSON *o, const char *key, double scale, const char *unit)
{
    double v;
    if (num(o, key, &v)) md_strbuf_printf(b, "<td class=\"n\">%.4g%s</td>", v * scale, unit);
    else if (cJSON_IsNull(get(o, key))) md_strbuf_add(b, "<td class=\"n\"><span class=\"bad\">not finite</span></td>");
    else md_strbuf_add(b, "<td class=\"n\"><span class=\"dim\">&#8212;</span></td>");
}

/* The test split's figures, the naive baseline's beside them, and whether the
 * model beats it (by test MSE, as forecasting papers rank models). */
static void regression_test(md_strbuf *b, const cJSON *tr)
{
    const cJSON *t = get(tr, "test");
    if (!cJSON_IsObject(t)) return;
    const cJSON *bl = get(t, "baseline");
    const char *bname = str(bl, "name") ? str(bl, "name") : "naive baseline";
    double m, bm;
    if (num(t, "mse", &m) && num(bl, "mse", &bm)) {
        int wins = m < bm;
        md_strbuf_printf(b, "<p class=\"status %s verdict\"><b>The model %s the naive baseline</b> (",
                         wins ? "good" : "badbox", wins ? "beats" : "does not beat");
        md_strbuf_add_escaped(b, bname);
        md_strbuf_printf(b, "): test MSE %.4g against %.4g", m, bm);
        if (bm > 0) md_strbuf_printf(b, " (%.1f%% %s)", fabs(m - bm) / bm * 100, m <= bm ? "lower" : "higher");
        double a, ba;
        if (num(t, "mae", &a) && num(bl, "mae", &ba)) {
            md_strbuf_printf(b, "; MAE %.4g against %.4g", a, ba);
            if (ba > 0) md_strbuf_printf(b, " (%.1f%% %s)", fabs(a - ba) / ba * 100, a <= ba ? "lower" : "higher");
        }
        md_strbuf_add(b, ".</p>\n");
    } else if (cJSON_IsNull(get(t, "mse")) && num(bl, "mse", &bm)) {
        /* a non-finite test MSE is written as null: it never beats the baseline */
        md_strbuf_add(b, "<p class=\"status badbox verdict\"><b>The model does not beat the naive baseline</b> (");
        md_strbuf_add_escaped(b, bname);
        md_strbuf_printf(b, "): its test MSE is not finite (baseline %.4g).</p>\n", bm);
    }
    md_strbuf_add(b, "<h3>Test split</h3>\n<p class=\"fig\">");
    double samples, after;
    if (num(t, "samples", &samples)) md_strbuf_printf(b, "%.0f windows", samples);
    if (num(t, "after_epoch", &after)) md_strbuf_printf(b, "%sweights after epoch %.0f", num(t, "samples", &samples) ? ", " : "", after);
    md_strbuf_add(b, ". MSE, MAE and RMSE on standardised values.</p>\n");
    md_strbuf_add(b, "<table class=\"rec test\"><thead><tr><th></th><th>model</th><th>");
    md_strbuf_add_escaped(b, bname);
    md_strbuf_add(b, "</th></tr></thead><tbody>\n");
    static const struct {
        const char *key, *name, *unit;
        double scale;
        int baseline;
    } rows[] = {
        {"mse", "MSE", "", 1, 1},
        {"mae", "MAE", "", 1, 1},
        {"rmse", "RMSE", "", 1, 1},
        {"directional_accuracy", "directional accuracy", "%", 100, 1},
        {"mse_original_units", "MSE (original units)", "", 1, 1},
        {"mae_original_units", "MAE (original units)", "", 1, 1},
        {"loss", "loss", "", 1, 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        double v;
        if (!num(t, rows[i].key, &v) && !num(bl, rows[i].key, &v)) continue;
        md_strbuf_printf(b, "<tr><th>%s", rows[i].name);
        if (strcmp(rows[i].key, "loss") == 0 && str(tr, "loss_function")) {
            md_strbuf_add(b, " (");
            md_strbuf_add_escaped(b, str(tr, "loss_function"));
            md_strbuf_add(b, ")");
        }
        md_strbuf_add(b, "</th>");
        test_cell(b, t, rows[i].key, rows[i].scale, rows[i].unit);
        test_cell(b, bl, rows[i].key, rows[i].scale, rows[i].unit);
        md_strbuf_add(b, "</tr>\n");
    }
    md_strbuf_add(b, "</tbody></table>\n");
}

/* A regression_metrics object (R2, MAE, RMSE per target and overall): a
 * small table under a heading. */
static void regression_metrics_table(md_strbuf *b, const cJSON *rm, const char *title)
{
    if (!cJSON_IsObject(rm)) return;
    double cnt;
    md_strbuf_printf(b, "<h3>%s</h3>\n<p class=\"fig\">", title);
    if (num(rm, "count", &cnt)) md_strbuf_printf(b, "%.0f values per target, ", cnt);
    md_strbuf_add(b, "units: ");
    md_strbuf_add_escaped(b, str(rm, "units") ? str(rm, "units") : "?");
    md_strbuf_add(b, ". Overall: the mean over the targets.</p>\n");
    md_strbuf_add(b, "<table class=\"rec regm\"><thead><tr><th>target</th><th>R&#178;</th><th>MAE</th><th>RMSE</th>"
                     "</tr></thead><tbody>\n");
    const cJSON *t;
    cJSON_ArrayForEach(t, get(rm, "per_target"))
    {
        md_strbuf_add(b, "<tr><th>");
        md_strbuf_add_escaped(b, str(t, "name") ? str(t, "name") : "?");
        md_strbuf_add(b, "</th>");
        test_cell(b, t, "r2", 1, "");
        test_cell(b, t, "mae", 1, "");
        test_cell(b, t, "rmse", 1, "");
        md_strbuf_add(b, "</tr>\n");
    }
    md_strbuf_add(b, "<tr><th>overall</th>");
    test_cell(b, rm, "r2", 1, "");
    test_cell(b, rm, "mae", 1, "");
    test_cell(b, rm, "rmse", 1, "");
    md_strbuf_add(b, "</tr>\n</tbody></table>\n");
}

/* report.folds: one row per fold, then mean +- std (population). */
static void folds_section(md_strbuf *b, const cJSON *folds)
{
    static const struct {
        const char *key, *name;
    } cols[] = {{"val_loss", "val loss"}, {"val_acc", "val accuracy"}, {"r2", "val R&#178;"}, {"mae", "val MAE"},
                {"rmse", "val RMSE"}};
    const cJSON *sum = get(folds, "summary");
    int show[5], nshow = 0;
    for (int c = 0; c < 5; c++)
        if (cJSON_IsObject(get(sum, cols[c].key))) show[nshow++] = c;
    double k = 0;
    num(folds, "k", &k);
    section_open(b, "folds", "Cross-validation");
    md_strbuf_printf(b, "<p class=\"fig\">%.0f folds, each trained afresh with the same settings; the validation "
                        "figures of each fold's last epoch, then their mean &#177; standard deviation (population, "
                        "over the folds that finished).</p>\n", k);
    md_strbuf_add(b, "<table class=\"rec folds\"><thead><tr><th>fold</th>");
    for (int c = 0; c < nshow; c++) md_strbuf_printf(b, "<th>%s</th>", cols[show[c]].name);
    md_strbuf_add(b, "<th>status</th></tr></thead><tbody>\n");
    const cJSON *run;
    cJSON_ArrayForEach(run, get(folds, "runs"))
    {
        double f = 0;
        num(run, "fold", &f);
        md_strbuf_printf(b, "<tr><th>%.0f</th>", f);
        for (int c = 0; c < nshow; c++) test_cell(b, get(run, "metrics"), cols[show[c]].key, 1, "");
        md_strbuf_add(b, "<td>");
        md_strbuf_add_escaped(b, str(get(run, "status"), "result") ? str(get(run, "status"), "result") : "?");
        md_strbuf_add(b, "</td></tr>\n");
    }
    md_strbuf_add(b, "<tr><th>mean &#177; std</th>");
    for (int c = 0; c < nshow; c++) {
        double m, sd;
        const cJSON *e = get(sum, cols[show[c]].key);
        if (num(e, "mean", &m) && num(e, "std", &sd)) md_strbuf_printf(b, "<td class=\"n\">%.4g &#177; %.2g</td>", m, sd);
        else md_strbuf_add(b, "<td class=\"n\">&#8212;</td>");
    }
    md_strbuf_add(b, "<td></td></tr>\n</tbody></table>\n");
    section_close(b);
}

/* Forecast against actual for one test window: the lookback in grey, then the
 * actual values (joined to the last input) and the prediction; x is the time
 * step, 0 the last input. */
static void forecast_chart(md_strbuf *b, const cJSON *f)
{
    int nl, na, np;
    double *lb = num_array(get(f, "lookback"), &nl);
    double *ac = num_array(get(f, "actual"), &na);
    double *pr = num_array(get(f, "predicted"), &np);
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
    const char *var = str(f, "variate");
    double w = 0;
    num(f, "window", &w);
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
        svg_text(b, PX(v), bottom + 16, "middle", " class=\"tick\"", t);
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
        svg_text(b, lx + 26, ly, "start", " class=\"leg\"", names[i]);
    }
    svg_text(b, left, CH - 10, "start", " class=\"axl\"", "time step (0 = last input)");
    svg_frame_at(b, title, NULL, 1);
    svg_close(b, NULL);
done:
    md_free(lb);
    md_free(ac);
    md_free(pr);
}

static void regression_forecasts(md_strbuf *b, const cJSON *tr)
{
    const cJSON *fc = get(tr, "forecasts");
    if (!cJSON_IsArray(fc) || cJSON_GetArraySize(fc) == 0) return;
    md_strbuf_add(b, "<h3>Forecasts on test windows</h3>\n<p class=\"fig\">Grey: the model's input (lookback); "
                     "blue: what happened; orange: the forecast (shaded: the horizon), in original units.</p>\n"
                     "<div class=\"charts\">\n");
    const cJSON *f;
    cJSON_ArrayForEach(f, fc) if (cJSON_IsObject(f)) forecast_chart(b, f);
    md_strbuf_add(b, "</div>\n");
}

/* Per-epoch curves. The epochs array is report.training.epochs; each entry
 * names its figures train_loss, val_loss, train_acc, val_acc (the long
 * spellings *_accuracy are accepted too). */
static void training_section(md_strbuf *b, const cJSON *tr)
{
    section_open(b, "training", "Training");
    /* the trainer writes columns (training.curves: {"epoch": [..], "train_loss": [..]});
     * rows (an array of epoch objects) are accepted too */
    cJSON *rows = NULL;
    const cJSON *cols = get(tr, "curves");
    if (cJSON_IsObject(cols)) {
        rows = cJSON_CreateArray();
        int ne = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, cols) if (cJSON_IsArray(c) && cJSON_GetArraySize(c) > ne) ne = cJSON_GetArraySize(c);
        for (int i = 0; i < ne; i++) {
            cJSON *row = cJSON_CreateObject();
            cJSON_ArrayForEach(c, cols)
            {
                const cJSON *v = cJSON_IsArray(c) ? cJSON_GetArrayItem(c, i) : NULL;
                if (v) cJSON_AddItemToObject(row, c->string, cJSON_Duplicate(v, 1));
            }
            cJSON_AddItemToArray(rows, row);
        }
    }
    const cJSON *ep = rows ? rows : get(tr, "epochs");
    if (!cJSON_IsArray(ep)) ep = get(tr, "history");
    int n = cJSON_IsArray(ep) ? cJSON_GetArraySize(ep) : 0;
    int regression = is_regression(tr);
    if (regression) {
        regression_test(b, tr);
        regression_metrics_table(b, get(get(tr, "test"), "regression_metrics"), "Test split: R&#178;, MAE, RMSE per target");
        regression_metrics_table(b, get(tr, "regression_metrics"), "Validation after the last epoch: R&#178;, MAE, RMSE per target");
        early_stopping_line(b, tr);
        if (n > 0) regression_curves(b, tr, ep, n);
        regression_forecasts(b, tr);
    } else if (n > 0) {
        double *buf = md_malloc(sizeof(double) * 5 * (size_t)n);
        if (buf) {
            double *x = buf, *tl = buf + n, *vl = buf + 2 * n, *ta = buf + 3 * n, *va = buf + 4 * n;
            static const char *const k_tl[] = {"train_loss", "loss", NULL};
            static const char *const k_vl[] = {"val_loss", NULL};
            static const char *const k_ta[] = {"train_acc", "train_accuracy", "accuracy", NULL};
            static const char *const k_va[] = {"val_acc", "val_accuracy", NULL};
            static const char *const k_ep[] = {"epoch", NULL};
            int i = 0, have_acc = 0, have_loss = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, ep)
            {
                if (!num_any(e, k_ep, &x[i])) x[i] = i + 1;
                if (!num_any(e, k_tl, &tl[i])) tl[i] = (double)NAN;
                if (!num_any(e, k_vl, &vl[i])) vl[i] = (double)NAN;
                if (!num_any(e, k_ta, &ta[i])) ta[i] = (double)NAN;
                if (!num_any(e, k_va, &va[i])) va[i] = (double)NAN;
                /* accuracies stored as fractions are drawn in percent */
                if (isfinite(ta[i]) && ta[i] <= 1.0) ta[i] *= 100;
                if (isfinite(va[i]) && va[i] <= 1.0) va[i] *= 100;
                have_loss |= isfinite(tl[i]) || isfinite(vl[i]);
                have_acc |= isfinite(ta[i]) || isfinite(va[i]);
                i++;
            }
            md_strbuf_add(b, "<div class=\"charts\">\n");
            if (have_loss) {
                struct series s[2] = {{"train", x, tl, n, 0}, {"validation", x, vl, n, 1}};
                line_chart(b, "Loss per epoch", "epoch", "loss", s, 2, NULL);
            }
            if (have_acc) {
                struct series s[2] = {{"train", x, ta, n, 0}, {"validation", x, va, n, 1}};
                line_chart(b, "Accuracy per epoch", "epoch", "accuracy (%)", s, 2, NULL);
            }
            md_strbuf_add(b, "</div>\n");
            md_free(buf);
        }
    }
    if (rows) {
        md_strbuf_add(b, "<h3>Per epoch</h3>\n");
        add_records(b, rows);
        cJSON_Delete(rows);
    }
    /* per-parameter diagnostics: the last epoch, folded */
    const cJSON *diag = get(tr, "diagnostics");
    int nd = cJSON_IsArray(diag) ? cJSON_GetArraySize(diag) : 0;
    if (nd > 0) {
        const cJSON *last = cJSON_GetArrayItem(diag, nd - 1);
        double e = 0;
        num(last, "epoch", &e);
        md_strbuf_printf(b, "<details><summary>Gradient and weight norms per tensor (epoch %.0f)</summary>\n", e);
        add_kv(b, last, NULL);
        md_strbuf_add(b, "</details>\n");
    }
    static const char *const skip[] = {"curves", "diagnostics", NULL};
    static const char *const skip_regression[] = {"curves", "diagnostics", "test", "forecasts", NULL};
    add_kv(b, tr, regression ? skip_regression : skip);
    section_close(b);
}

static void stats_row(md_strbuf *b, const char *what, const cJSON *st, const char *unit)
{
    static const char *const k[] = {"mean", "std", "min", "p50", "p95", "p99", "max"};
    md_strbuf_add(b, "<tr><th>");
    md_strbuf_add_escaped(b, what);
    md_strbuf_printf(b, " (%s)</th>", unit);
    for (int i = 0; i < 7; i++) {
        double v;
        if (num(st, k[i], &v)) md_strbuf_printf(b, "<td class=\"n\">%.4g</td>", v);
        else md_strbuf_add(b, "<td></td>");
    }
    md_strbuf_add(b, "</tr>\n");
}

static void benchmark_section(md_strbuf *b, const cJSON *bench)
{
    section_open(b, "benchmark", "Benchmark");
    const cJSON *inf = get(bench, "inference");
    const cJSON *tr = get(bench, "training");
    /* latency statistics table */
    if (get(inf, "latency_ms") || get(tr, "step_ms")) {
        md_strbuf_add(b, "<h3>Timings</h3>\n<table class=\"rec\"><thead><tr><th></th><th>mean</th><th>std</th><th>min</th>"
                         "<th>p50</th><th>p95</th><th>p99</th><th>max</th></tr></thead><tbody>\n");
        if (get(inf, "latency_ms")) stats_row(b, "inference latency per batch", get(inf, "latency_ms"), "ms");
        if (get(inf, "per_sample_ms")) stats_row(b, "inference latency per sample", get(inf, "per_sample_ms"), "ms");
        if (get(tr, "step_ms")) stats_row(b, "training step", get(tr, "step_ms"), "ms");
        md_strbuf_add(b, "</tbody></table>\n");
    }
    md_strbuf_add(b, "<div class=\"charts\">\n");
    const cJSON *samples = get(inf, "samples_ms");
    int n = cJSON_IsArray(samples) ? cJSON_GetArraySize(samples) : 0;
    if (n > 0) {
        double *v = md_malloc(sizeof(double) * (size_t)n);
        if (v) {
            int i = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, samples) v[i++] = cJSON_IsNumber(e) ? e->valuedouble : (double)NAN;
            double bs = 0;
            char cap[128];
            if (num(inf, "batch_size", &bs)) snprintf(cap, sizeof cap, "%d timed inference batches of %.0f samples.", n, bs);
            else snprintf(cap, sizeof cap, "%d timed inference batches.", n);
            histogram(b, "Inference latency histogram", v, n, get(inf, "latency_ms"), cap);
            md_free(v);
        }
    }
    const cJSON *sweep = get(bench, "sweep");
    if (cJSON_IsArray(sweep) && cJSON_GetArraySize(sweep) > 0) sweep_chart(b, sweep);
    const cJSON *devs = get(bench, "devices");
    if (cJSON_IsArray(devs) && cJSON_GetArraySize(devs) > 0)
        hbars(b, "Device comparison: training throughput", devs, "device", "samples_per_s", "speedup_vs_cpu", "samples/s", 0,
              "Same model, batch and data on every available device; x = speed-up over the CPU.");
    const cJSON *abl = get(bench, "ablations");
    if (cJSON_IsArray(abl) && cJSON_GetArraySize(abl) > 0)
        hbars(b, "Ablations: speed-up of each setting when on", abl, "feature", "speedup", NULL, "x", 1.0,
              "Training samples/s with the setting on divided by samples/s with it off (1 = no difference).");
    md_strbuf_add(b, "</div>\n");
    static const char *const skip[] = {"samples_ms", NULL};
    add_kv(b, bench, skip);
    section_close(b);
}

static void memory_section(md_strbuf *b, const cJSON *r)
{
    section_open(b, "memory", "Memory");
    memory_bar(b, get(get(r, "benchmark"), "memory"));
    add_kv(b, get(r, "memory"), NULL);
    section_close(b);
}

/* `open`, the escaped text and `close`; nothing when text is NULL. */
static void add_tagged(md_strbuf *b, const char *open, const char *text, const char *close)
{
    if (!text) return;
    md_strbuf_add(b, open);
    md_strbuf_add_escaped(b, text);
    md_strbuf_add(b, close);
}

/* A section that is one list (`tag` is "ol" or "ul"): `none` stands above
 * an empty one; `item` writes an element's <li> content. */
static void list_section(md_strbuf *b, const char *id, const char *title, const cJSON *items, const char *none,
                         const char *tag, const char *cls, void (*item)(md_strbuf *, const cJSON *))
{
    section_open(b, id, title);
    if (cJSON_GetArraySize(items) == 0) md_strbuf_printf(b, "<p class=\"dim\">%s</p>\n", none);
    md_strbuf_printf(b, "<%s class=\"%s\">\n", tag, cls);
    const cJSON *e;
    cJSON_ArrayForEach(e, items)
    {
        md_strbuf_add(b, "<li>");
        if (cJSON_IsString(e))
            md_strbuf_add_escaped(b, e->valuestring);
        else
            item(b, e);
        md_strbuf_add(b, "</li>\n");
    }
    md_strbuf_printf(b, "</%s>\n", tag);
    section_close(b);
}

static void recommendation_item(md_strbuf *b, const cJSON *e)
{
    add_tagged(b, "<b>", str(e, "topic"), ":</b> ");
    md_strbuf_add_escaped(b, str(e, "advice"));
    add_tagged(b, "<br><span class=\"fig\">measured: ", str(e, "figure"), "</span>");
    add_tagged(b, " <span class=\"tag\">", str(e, "source"), "</span>");
}

static void warning_item(md_strbuf *b, const cJSON *e) { md_strbuf_add_escaped(b, str(e, "message")); }

static void recommendations_section(md_strbuf *b, const cJSON *recs)
{
    list_section(b, "recommendations", "Recommendations", recs, "none: nothing measured suggests a change", "ol",
                 "recs", recommendation_item);
}

static void warnings_section(md_strbuf *b, const cJSON *w)
{
    list_section(b, "warnings", "Warnings", w, "none", "ul", "warn", warning_item);
}

/* A diagnostics run whose models all forecast: nothing in it has an accuracy. */
static int all_models_regression(const cJSON *r)
{
    const cJSON *m;
    int n = 0;
    cJSON_ArrayForEach(m, get(r, "models"))
    {
        const char *t = str(get(m, "training"), "task");
        if (!t) t = str(get(m, "data"), "task");
        if (!t || strcmp(t, "regression") != 0) return 0;
        n++;
    }
    return n > 0;
}

/* The comparison without its accuracy column and "most accurate" line when
 * they hold nothing but nulls; the caller frees the copy (NULL: no memory). */
static cJSON *regression_comparison(const cJSON *cmp)
{
    cJSON *c = cJSON_Duplicate(cmp, 1);
    if (!c) return NULL;
    cJSON *rows = cJSON_GetObjectItemCaseSensitive(c, "rows"), *row;
    int all_null = 1;
    cJSON_ArrayForEach(row, rows) all_null &= !get(row, "val_accuracy") || cJSON_IsNull(get(row, "val_accuracy"));
    if (all_null) cJSON_ArrayForEach(row, rows) cJSON_DeleteItemFromObjectCaseSensitive(row, "val_accuracy");
    if (cJSON_IsNull(get(c, "most_accurate"))) cJSON_DeleteItemFromObjectCaseSensitive(c, "most_accurate");
    return c;
}

static const char css[] =
    "body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0;color:#222;background:#f6f7f9}"
    "header,section,nav{max-width:1160px;margin:0 auto;padding:12px 20px}"
    "header{background:#fff;border-bottom:1px solid #ddd}"
    "h1{margin:4px 0;font-size:26px}h2{border-bottom:2px solid #1f77b4;padding-bottom:4px;font-size:20px}"
    "h3{font-size:16px;margin:14px 0 6px}"
    "section{background:#fff;margin-top:14px;border:1px solid #e2e2e2;border-radius:6px;overflow-x:auto}"
    "nav a{margin-right:12px;color:#1f5f99;text-decoration:none;font-size:14px}"
    ".meta{color:#666;margin:2px 0}.dev{margin:4px 0}"
    ".status{padding:6px 10px;border-radius:4px;margin:6px 0}.good{background:#e7f5e7}.badbox{background:#fde8e8}"
    ".cards{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0}"
    ".card{background:#f0f5fb;border:1px solid #cfe0f0;border-radius:6px;padding:8px 14px;font-size:12px;color:#555}"
    ".card span{display:block;font-size:22px;color:#123;font-weight:600}"
    "table{border-collapse:collapse;margin:6px 0;font-size:13px}"
    "th,td{border:1px solid #e0e0e0;padding:3px 8px;text-align:left;vertical-align:top}"
    "table.kv>tbody>tr>th{background:#fafafa;font-weight:600;white-space:nowrap}"
    "table.rec thead th{background:#eef3f8}td.n{text-align:right;font-variant-numeric:tabular-nums}"
    ".charts{display:flex;flex-wrap:wrap;gap:12px}figure{margin:6px 0}"
    "figcaption{font-size:12px;color:#555;max-width:560px}"
    "svg.chart{border:1px solid #e5e5e5;background:#fff}"
    "svg text{font-family:inherit;font-size:11px;fill:#333}svg text.ttl{font-size:14px;font-weight:600}"
    "svg text.axl{font-size:12px}svg text.oom{fill:#d62728;font-weight:700}"
    ".dim{color:#999}.bad{color:#b00}.fig{color:#555;font-size:13px}"
    ".tag{font-size:11px;background:#eee;border-radius:3px;padding:1px 5px;color:#555}"
    "ol.recs li,ul.warn li{margin:6px 0}ul.warn li{color:#8a4b00}"
    "code{font-size:12px}.k{color:#666;font-size:12px}.flat{font-size:13px}";

md_status md_html_render(const cJSON *r, char **out, size_t *len)
{
    md_strbuf b;
    md_strbuf_init(&b);
    md_strbuf_add(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>mpsdiag report");
    const cJSON *sel = get(r, "selected_device");
    if (str(sel, "name")) {
        md_strbuf_add(&b, ": ");
        md_strbuf_add_escaped(&b, str(sel, "name"));
    }
    md_strbuf_add(&b, "</title>\n<style>");
    md_strbuf_add(&b, css);
    md_strbuf_add(&b, "</style>\n</head>\n<body>\n");
    header(&b, r);
    nav(&b, r);
    if (get(r, "system")) {
        section_open(&b, "system", "System");
        add_kv(&b, get(r, "system"), NULL);
        section_close(&b);
    }
    if (cJSON_IsArray(get(r, "devices"))) {
        section_open(&b, "devices", "Devices");
        add_records(&b, get(r, "devices"));
        section_close(&b);
    }
    if (cJSON_IsArray(get(r, "settings"))) settings_section(&b, get(r, "settings"));
    md_html_models(&b, r); /* the diagnostics run: comparison and per-model sections */
    if (get(r, "model")) {
        section_open(&b, "model", "Model");
        if (cJSON_IsObject(get(r, "model"))) add_kv(&b, get(r, "model"), NULL);
        else add_value(&b, "model", get(r, "model"));
        section_close(&b);
    }
    if (get(r, "data")) {
        section_open(&b, "data", "Data");
        if (cJSON_IsObject(get(r, "data"))) add_kv(&b, get(r, "data"), NULL);
        else add_value(&b, "data", get(r, "data"));
        section_close(&b);
    }
    if (get(r, "training")) training_section(&b, get(r, "training"));
    if (cJSON_IsObject(get(r, "folds"))) folds_section(&b, get(r, "folds"));
    if (get(r, "benchmark")) benchmark_section(&b, get(r, "benchmark"));
    if (get(r, "memory") || get(get(r, "benchmark"), "memory")) memory_section(&b, r);
    if (cJSON_IsArray(get(r, "recommendations"))) recommendations_section(&b, get(r, "recommendations"));
    if (cJSON_IsArray(get(r, "warnings"))) warnings_section(&b, get(r, "warnings"));
    /* anything else a stage added */
    static const char *const known[] = {"schema_version", "tool", "started_at", "system", "devices", "selected_device",
                                        "settings", "model", "data", "training", "benchmark", "memory",
                                        "recommendations", "warnings", "status", "duration_s", "folds", NULL};
    const cJSON *f;
    int other = 0;
    cJSON_ArrayForEach(f, r)
    {
        int k = 0;
        for (const char *const *s = known; *s; s++) k |= strcmp(*s, f->string) == 0;
        k |= md_html_models_key(r, f->string);
        if (k) continue;
        if (!other++) section_open(&b, "other", "Other");
        md_strbuf_add(&b, "<h3>");
        md_strbuf_add_escaped(&b, f->string);
        md_strbuf_add(&b, "</h3>\n");
        if (strcmp(f->string, "comparison") == 0 && all_models_regression(r)) {
            cJSON *cmp = regression_comparison(f);
            add_value(&b, f->string, cmp ? cmp : f);
            cJSON_Delete(cmp);
        } else {
            add_value(&b, f->string, f);
        }
    }
    if (other) section_close(&b);
    md_strbuf_add(&b, "<footer><p class=\"meta\" style=\"max-width:1160px;margin:10px auto;padding:0 20px\">"
                      "Written by mpsdiag from the same figures as the JSON report (schema version ");
    double sv = 0;
    num(r, "schema_version", &sv);
    md_strbuf_printf(&b, "%.0f).</p></footer>\n</body>\n</html>\n", sv);
    return md_strbuf_take(&b, out, len);
}

md_status md_html_write(const cJSON *report, const char *path)
{
    char *text = NULL;
    size_t n = 0;
    md_status st = md_html_render(report, &text, &n);
    if (st != MD_OK) return st;
    st = md_write_file_atomic(path, text, n);
    md_free(text);
    return st;
}
