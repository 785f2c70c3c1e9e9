/* html_util.c - formatting, labels and page pieces of the HTML report
 * (declared in html_util.h). */
#include "diag/html_util.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"

/* ---- JSON access ------------------------------------------------------------------ */

const cJSON *md_hj_get(const cJSON *o, const char *k) { return o && k ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL; }

int md_hj_num(const cJSON *o, const char *k, double *v)
{
    const cJSON *it = md_hj_get(o, k);
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble)) return 0;
    *v = it->valuedouble;
    return 1;
}

const char *md_hj_str(const cJSON *o, const char *k)
{
    const cJSON *it = md_hj_get(o, k);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

int md_hj_num_any(const cJSON *o, const char *const *keys, double *v)
{
    for (; *keys; keys++)
        if (md_hj_num(o, *keys, v)) return 1;
    return 0;
}

double *md_hj_numbers(const cJSON *a, int *n)
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

/* ---- formatting ------------------------------------------------------------------- */

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static const char *grouped(double v, char *buf, size_t n)
{
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
    if (n) buf[j < n ? j : n - 1] = '\0';
    return buf;
}

const char *md_html_fmt_num(double v, char *buf, size_t n)
{
    if (!isfinite(v)) snprintf(buf, n, "not finite");
    else if ((v == floor(v) || fabs(v) >= 1000) && fabs(v) < 1e15) grouped(v, buf, n);
    else if (fabs(v) >= 100) snprintf(buf, n, "%.1f", v);
    else if (fabs(v) >= 1e-4 || v == 0) snprintf(buf, n, "%.3g", v);
    else snprintf(buf, n, "%.2e", v);
    return buf;
}

const char *md_html_fmt_pct(double f, char *buf, size_t n)
{
    double p = f * 100;
    if (!isfinite(p)) snprintf(buf, n, "not finite");
    else if (p == 0 || fabs(p) >= 10) snprintf(buf, n, "%.1f%%", p);
    else if (fabs(p) >= 0.1) snprintf(buf, n, "%.2f%%", p);
    else snprintf(buf, n, "%.2g%%", p);
    return buf;
}

const char *md_html_fmt_ms(double ms, char *buf, size_t n)
{
    if (!isfinite(ms)) snprintf(buf, n, "not finite");
    else if (ms >= 1000) return md_html_fmt_s(ms / 1000, buf, n);
    else if (ms > 0 && ms < 1) snprintf(buf, n, "%.3g \xc2\xb5s", ms * 1000);
    else snprintf(buf, n, "%.3g ms", ms);
    return buf;
}

const char *md_html_fmt_s(double s, char *buf, size_t n)
{
    if (!isfinite(s)) snprintf(buf, n, "not finite");
    else if (s < 1) return md_html_fmt_ms(s * 1000, buf, n);
    else if (s < 100) snprintf(buf, n, "%.3g s", s);
    else if (s < 3600) snprintf(buf, n, "%d min %02d s", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(buf, n, "%d h %02d min", (int)(s / 3600), (int)fmod(s / 60, 60));
    return buf;
}

const char *md_html_fmt_bytes(double v, char *buf, size_t n) { return md_fmt_bytes(v, buf, n); }

int md_html_is_fraction(const char *key, double v)
{
    if (!key || !(fabs(v) <= 1.0)) return 0;
    static const char *const suf[] = {"share", "fraction", "_frac", "_acc", "accuracy", "fraction_of_peak", "_split",
                                      "dropout"};
    for (size_t i = 0; i < sizeof suf / sizeof suf[0]; i++)
        if (ends_with(key, suf[i])) return 1;
    return strcmp(key, "accuracy") == 0 || strcmp(key, "acc") == 0 || strcmp(key, "share") == 0 || strstr(key, "fraction") != NULL;
}

const char *md_html_fmt(const char *key, double v, char *buf, size_t n)
{
    if (!key) return md_html_fmt_num(v, buf, n);
    if (ends_with(key, "_bytes") || strcmp(key, "bytes") == 0) return md_fmt_bytes(v, buf, n);
    if (ends_with(key, "_ms") || strcmp(key, "ms") == 0) return md_html_fmt_ms(v, buf, n);
    if (ends_with(key, "per_s")) {
        char t[48];
        md_html_fmt_num(fabs(v) >= 100 ? round(v) : v, t, sizeof t);
        snprintf(buf, n, "%s/s", t);
        return buf;
    }
    if (ends_with(key, "_s") || strcmp(key, "seconds") == 0) return md_html_fmt_s(v, buf, n);
    if (md_html_is_fraction(key, v)) return md_html_fmt_pct(v, buf, n);
    if (ends_with(key, "gflops")) {
        char t[48];
        snprintf(buf, n, "%s GFLOP/s", md_html_fmt_num(v, t, sizeof t));
        return buf;
    }
    return md_html_fmt_num(v, buf, n);
}

/* ---- labels ---------------------------------------------------------------------- */

/* whole keys whose words alone read badly */
static const char *const key_labels[][2] = {
    {"samples_ms", "timings"},
    {"device_peak_bytes", "peak device memory"},
    {"host_peak_rss_bytes", "peak host memory (RSS)"},
    {"fraction_of_peak", "share of the peak"},
    {"peak_gflops", "peak GFLOP/s"},
    {"achieved_gflops", "achieved GFLOP/s"},
    {"flops_per_sample", "FLOPs per sample"},
    {"split_ms", "time per phase"},
    {"step_ms", "step time"},
    {"latency_ms", "latency per batch"},
    {"per_sample_ms", "latency per sample"},
    {"max_batch", "largest batch that fits"},
    {"limited_by_search_cap", "stopped at the search limit"},
    {"num_workers", "loader threads"},
    {"schema_version", "report format version"},
    {"started_at", "started"},
    {"duration_s", "duration"},
    {"r2", "R\xc2\xb2"},
    {"dead_share", "dead units"},
    {"zero_share", "zero outputs"},
    {"update_ratio", "update / weight"},
    {"speedup_vs_cpu", "speed-up over the CPU"},
    {"exit_code", "exit code"},
};

/* words spelled differently for a reader */
static const char *const word_labels[][2] = {
    {"ram", "RAM"},   {"cpu", "CPU"},       {"gpu", "GPU"},     {"os", "OS"},       {"simd", "SIMD"},
    {"blas", "BLAS"}, {"id", "ID"},         {"mse", "MSE"},     {"mae", "MAE"},     {"rmse", "RMSE"},
    {"r2", "R\xc2\xb2"}, {"gflops", "GFLOP/s"}, {"flops", "FLOPs"}, {"val", "validation"}, {"acc", "accuracy"},
    {"lr", "learning rate"}, {"cuda", "CUDA"}, {"tf32", "TF32"}, {"rss", "RSS"},     {"ckpt", "checkpoint"},
    {"vram", "VRAM"}, {"nan", "NaN"},       {"amp", "AMP"},     {"gemm", "GEMM"},   {"fma", "FMA"},
    {"isa", "ISA"},   {"json", "JSON"},     {"html", "HTML"},   {"num", "number of"}, {"fp16", "FP16"},
    {"bf16", "BF16"}, {"fp32", "FP32"},     {"io", "I/O"},      {"oom", "out of memory"}, {"pct", "%"},
    {"std", "std"},   {"hw", "hardware"},   {"ms", "ms"},       {"bs", "batch size"}, {"nchw", "NCHW"},
    {"nhwc", "NHWC"}, {"mps", "MPS"},       {"sm", "SM"},       {"pci", "PCI"},     {"uuid", "UUID"},
};

const char *md_html_label(const char *key, char *buf, size_t n)
{
    if (!n) return buf;
    buf[0] = '\0';
    if (!key) return buf;
    const char *found = NULL;
    for (size_t i = 0; i < sizeof key_labels / sizeof key_labels[0]; i++)
        if (strcmp(key, key_labels[i][0]) == 0) found = key_labels[i][1];
    char tmp[160];
    if (found) {
        snprintf(tmp, sizeof tmp, "%s", found);
    } else {
        /* the unit suffix goes: the value carries it */
        char k[128];
        snprintf(k, sizeof k, "%s", key);
        size_t l = strlen(k);
        static const char *const units[] = {"_bytes", "_ms", "_s"};
        int per_s = ends_with(k, "_per_s");
        if (per_s) k[l - 6] = '\0';
        else
            for (size_t i = 0; i < 3; i++)
                if (ends_with(k, units[i]) && l > strlen(units[i])) {
                    k[l - strlen(units[i])] = '\0';
                    break;
                }
        size_t o = 0;
        tmp[0] = '\0';
        for (char *w = k; *w && o + 1 < sizeof tmp;) {
            size_t wl = strcspn(w, "_");
            char word[64];
            snprintf(word, sizeof word, "%.*s", (int)(wl < 63 ? wl : 63), w);
            const char *rep = word;
            for (size_t i = 0; i < sizeof word_labels / sizeof word_labels[0]; i++)
                if (strcmp(word, word_labels[i][0]) == 0) rep = word_labels[i][1];
            o += (size_t)snprintf(tmp + o, sizeof tmp - o, "%s%s", o ? " " : "", rep);
            if (o >= sizeof tmp) o = sizeof tmp - 1;
            w += wl;
            while (*w == '_') w++;
        }
        if (per_s && o + 3 < sizeof tmp) snprintf(tmp + o, sizeof tmp - o, "/s");
    }
    snprintf(buf, n, "%s", tmp);
    if (islower((unsigned char)buf[0])) buf[0] = (char)toupper((unsigned char)buf[0]);
    return buf;
}

/* ---- page pieces ------------------------------------------------------------------ */

void md_html_wrap(md_strbuf *b, const char *open, const char *text, const char *close)
{
    md_strbuf_add(b, open);
    md_strbuf_add_escaped(b, text);
    md_strbuf_add(b, close);
}

void md_html_section_begin(md_strbuf *b, const char *id, const char *title)
{
    md_html_wrap(b, "<section id=\"", id, "\">\n<h2>");
    md_strbuf_add_escaped(b, title);
    md_strbuf_add(b, "</h2>\n");
}

void md_html_section_end(md_strbuf *b) { md_strbuf_add(b, "</section>\n"); }

void md_html_heading(md_strbuf *b, const char *title)
{
    md_html_wrap(b, "<h3>", title, "</h3>\n");
}

void md_html_para(md_strbuf *b, const char *text)
{
    md_html_wrap(b, "<p class=\"fig\">", text, "</p>\n");
}

void md_html_callout(md_strbuf *b, enum md_html_level level, const char *title, const char *text)
{
    static const char *const cls[] = {"info", "good", "warn", "bad"};
    md_strbuf_printf(b, "<div class=\"callout %s\">", cls[level]);
    if (title) {
        md_html_wrap(b, "<b>", title, "</b>");
        if (text) md_strbuf_add(b, " ");
    }
    if (text) md_strbuf_add_escaped(b, text);
    md_strbuf_add(b, "</div>\n");
}

void md_html_calloutf(md_strbuf *b, enum md_html_level level, const char *title, const char *fmt, ...)
{
    char t[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    md_html_callout(b, level, title, t);
}

void md_html_table_begin(md_strbuf *b, const char *cls, const char *const *headers)
{
    md_html_wrap(b, "<table class=\"", cls ? cls : "rec", "\">");
    if (headers) {
        md_strbuf_add(b, "<thead><tr>");
        for (; *headers; headers++) {
            md_html_wrap(b, "<th>", *headers, "</th>");
        }
        md_strbuf_add(b, "</tr></thead>");
    }
    md_strbuf_add(b, "<tbody>\n");
}

void md_html_table_row_begin(md_strbuf *b, const char *th)
{
    md_strbuf_add(b, "<tr>");
    if (th) {
        md_html_wrap(b, "<th>", th, "</th>");
    }
}

void md_html_table_cell(md_strbuf *b, const char *text)
{
    const char *t = text ? text : "";
    int numeric = isdigit((unsigned char)t[0]) || ((t[0] == '-' || t[0] == '.' || t[0] == '+') && isdigit((unsigned char)t[1]));
    md_strbuf_add(b, numeric ? "<td class=\"n\">" : "<td>");
    if (text) md_strbuf_add_escaped(b, text);
    else md_strbuf_add(b, "<span class=\"dim\">&#8212;</span>");
    md_strbuf_add(b, "</td>");
}

void md_html_bar_cell(md_strbuf *b, double fraction, int bad)
{
    double f = isfinite(fraction) ? fmax(0, fmin(1, fraction)) : 0;
    char t[32];
    md_strbuf_printf(b, "<td class=\"n\"><span class=\"bar%s\"><span style=\"width:%.1f%%\"></span></span> ",
                     bad ? " badbar" : "", f * 100);
    md_strbuf_add_escaped(b, md_html_fmt_pct(fraction, t, sizeof t));
    md_strbuf_add(b, "</td>");
}

void md_html_table_row_end(md_strbuf *b) { md_strbuf_add(b, "</tr>\n"); }

void md_html_table_row(md_strbuf *b, const char *th, const char *const *cells)
{
    md_html_table_row_begin(b, th);
    for (; cells && *cells; cells++) md_html_table_cell(b, *cells);
    md_html_table_row_end(b);
}

void md_html_table_end(md_strbuf *b) { md_strbuf_add(b, "</tbody></table>\n"); }

void md_html_cards_begin(md_strbuf *b) { md_strbuf_add(b, "<div class=\"cards\">"); }

void md_html_card(md_strbuf *b, const char *value, const char *label)
{
    md_html_wrap(b, "<div class=\"card\"><span>", value, "</span>");
    md_strbuf_add_escaped(b, label);
    md_strbuf_add(b, "</div>");
}

void md_html_cards_end(md_strbuf *b) { md_strbuf_add(b, "</div>\n"); }

/* ---- JSON shown generically --------------------------------------------------------- */

static void add_label(md_strbuf *b, const char *key)
{
    char t[160];
    md_strbuf_add_escaped(b, md_html_label(key, t, sizeof t));
}

static void add_scalar(md_strbuf *b, const char *key, const cJSON *v)
{
    char buf[64];
    if (cJSON_IsNumber(v)) {
        if (!isfinite(v->valuedouble)) md_strbuf_add(b, "<span class=\"bad\">not finite</span>");
        else md_strbuf_add_escaped(b, md_html_fmt(key, v->valuedouble, buf, sizeof buf));
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

void md_html_records(md_strbuf *b, const cJSON *arr)
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
        add_label(b, cols[i]);
        md_strbuf_add(b, "</th>");
    }
    md_strbuf_add(b, "</tr></thead><tbody>\n");
    cJSON_ArrayForEach(r, arr)
    {
        md_strbuf_add(b, "<tr>");
        for (int i = 0; i < nc; i++) {
            const cJSON *v = md_hj_get(r, cols[i]);
            md_strbuf_add(b, cJSON_IsNumber(v) ? "<td class=\"n\">" : "<td>");
            if (v && cJSON_IsArray(v)) md_html_value(b, cols[i], v);
            else if (v) add_scalar(b, cols[i], v);
            md_strbuf_add(b, "</td>");
        }
        md_strbuf_add(b, "</tr>\n");
    }
    md_strbuf_add(b, "</tbody></table>\n");
}

void md_html_kv(md_strbuf *b, const cJSON *obj, const char *const *skip)
{
    int rows = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, obj)
    {
        int skipped = 0;
        for (const char *const *s = skip; s && *s; s++) skipped |= strcmp(*s, f->string) == 0;
        if (skipped) continue;
        if (!rows++) md_strbuf_add(b, "<table class=\"kv\"><tbody>\n");
        md_strbuf_add(b, "<tr><th>");
        add_label(b, f->string);
        md_strbuf_add(b, "</th><td>");
        md_html_value(b, f->string, f);
        md_strbuf_add(b, "</td></tr>\n");
    }
    if (rows) md_strbuf_add(b, "</tbody></table>\n");
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

void md_html_value(md_strbuf *b, const char *key, const cJSON *v)
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
            /* statistics names (mean, p50) stay short and lower-case */
            char t[160];
            md_html_label(f->string, t, sizeof t);
            if (t[0] && !isupper((unsigned char)t[1])) t[0] = (char)tolower((unsigned char)t[0]);
            md_strbuf_add_escaped(b, t);
            md_strbuf_add(b, "</span> ");
            /* stats of a timing ({"n", "mean", ...} under "latency_ms") take the parent's unit */
            add_scalar(b, cJSON_IsNumber(f) && key && ends_with(key, "_ms") && strcmp(f->string, "n") ? key : f->string, f);
        }
        md_strbuf_add(b, "</span>");
    } else if (cJSON_IsObject(v)) {
        if (cJSON_GetArraySize(v) == 0) md_strbuf_add(b, "<span class=\"dim\">none</span>");
        else md_html_kv(b, v, NULL);
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
            md_html_records(b, v);
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
