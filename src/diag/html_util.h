/* html_util.h - the building blocks of the HTML report's sections.
 *
 * html.c writes the page section by section from the JSON report; other
 * writers (per-model pages, extra sections) use the same pieces so the page
 * looks the same throughout:
 *
 *   md_html_section_begin(b, "loader", "Data loading");
 *   md_html_callout(b, MD_HTML_WARN, "Data loading is the bottleneck", text);
 *   md_html_table_begin(b, "rec", (const char *const[]){"layer", "share", NULL});
 *   md_html_table_row(b, "relu3", (const char *const[]){"86.0%", NULL});
 *   md_html_table_end(b);
 *   md_html_section_end(b);
 *
 * Every text argument is plain text, escaped here (never HTML), unless the
 * name says _html. The formatters write plain text into a caller's buffer:
 * labels for report keys (no snake_case is shown to the reader), percentages
 * for fractions, binary units for bytes, units for times. Charts are inline
 * SVG (html_chart.c): no scripts, no network, so the page stays one file.
 */
#ifndef MD_HTML_UTIL_H
#define MD_HTML_UTIL_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "diag/strbuf.h"

/* ---- JSON access: NULL-safe --------------------------------------------------- */

const cJSON *md_hj_get(const cJSON *o, const char *key);
/* 1 and *v when o[key] is a finite number, else 0 */
int md_hj_num(const cJSON *o, const char *key, double *v);
const char *md_hj_str(const cJSON *o, const char *key); /* NULL unless a string */
/* the first of `keys` (NULL-terminated) holding a finite number */
int md_hj_num_any(const cJSON *o, const char *const *keys, double *v);
/* the numbers of an array (others: NaN) in a new md_malloc'd array; NULL when empty */
double *md_hj_numbers(const cJSON *a, int *n);

/* ---- formatting: plain text into buf; each returns buf ------------------------- */

/* A reader's label for a report key: "ram_total_bytes" -> "RAM total",
 * "val_acc" -> "Validation accuracy", "samples_per_s" -> "Samples/s". */
const char *md_html_label(const char *key, char *buf, size_t n);
/* A number with sensible precision: integers with thousands separators,
 * others with 3 significant digits (1,234 / 12.3 / 0.0123). */
const char *md_html_fmt_num(double v, char *buf, size_t n);
const char *md_html_fmt_pct(double fraction, char *buf, size_t n); /* 0.861 -> "86.1%" */
const char *md_html_fmt_ms(double ms, char *buf, size_t n);        /* "850 us", "12.3 ms", "1.23 s" */
const char *md_html_fmt_s(double s, char *buf, size_t n);          /* "12.3 s", "2 min 05 s", "1 h 02 min" */
const char *md_html_fmt_bytes(double bytes, char *buf, size_t n);  /* "512 B", "1.50 MiB" */
/* The value of report key `key` in its unit, from the key's name: *_bytes,
 * *_ms, *_s, *per_s, fractions (*share, *fraction*, *_acc, *accuracy) as
 * percentages; anything else md_html_fmt_num. */
const char *md_html_fmt(const char *key, double v, char *buf, size_t n);
/* 1 when md_html_fmt shows `key` (value v) as a percentage */
int md_html_is_fraction(const char *key, double v);

/* ---- page structure ------------------------------------------------------------ */

/* <section id="id"><h2>title</h2> ... </section>; the nav lists sections by id. */
/* open, text (escaped), close: an element with text in it, such as
 * md_html_wrap(b, "<th>", name, "</th>"). */
void md_html_wrap(md_strbuf *b, const char *open, const char *text, const char *close);
void md_html_section_begin(md_strbuf *b, const char *id, const char *title);
void md_html_section_end(md_strbuf *b);
void md_html_heading(md_strbuf *b, const char *title); /* an <h3> inside a section */
void md_html_para(md_strbuf *b, const char *text);     /* <p class="fig"> */

/* A highlighted finding: a coloured box with a bold title and a sentence. */
enum md_html_level { MD_HTML_INFO, MD_HTML_GOOD, MD_HTML_WARN, MD_HTML_BAD };
void md_html_callout(md_strbuf *b, enum md_html_level level, const char *title, const char *text);
void md_html_calloutf(md_strbuf *b, enum md_html_level level, const char *title, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A table: headers NULL-terminated (NULL for none); a row has a header cell
 * `th` (NULL for none) and NULL-terminated text cells, right-aligned when
 * they start with a digit, a sign or a dot. */
void md_html_table_begin(md_strbuf *b, const char *cls, const char *const *headers);
void md_html_table_row(md_strbuf *b, const char *th, const char *const *cells);
void md_html_table_end(md_strbuf *b);
/* A cell holding an inline bar of `fraction` (0..1) and its percentage;
 * write it between md_html_table_row_begin/_end for mixed rows. */
void md_html_table_row_begin(md_strbuf *b, const char *th);
void md_html_table_cell(md_strbuf *b, const char *text);
void md_html_bar_cell(md_strbuf *b, double fraction, int level_bad);
void md_html_table_row_end(md_strbuf *b);

/* Summary figures: a card with a big value and a small label. */
void md_html_cards_begin(md_strbuf *b);
void md_html_card(md_strbuf *b, const char *value, const char *label);
void md_html_cards_end(md_strbuf *b);

/* ---- JSON shown generically, with labels and units ------------------------------ */

void md_html_value(md_strbuf *b, const char *key, const cJSON *v);
/* key/value table of an object; keys in skip (NULL-terminated, or NULL) left out */
void md_html_kv(md_strbuf *b, const cJSON *obj, const char *const *skip);
/* table of an array of objects: one column per scalar key */
void md_html_records(md_strbuf *b, const cJSON *arr);

/* ---- charts (html_chart.c): inline SVG ----------------------------------------- */

/* A chart's frame: <figure [class]><svg ...> on a white w x h background,
 * labelled for screen readers; close adds the caption (NULL: none). */
void md_html_svg_open(md_strbuf *b, const char *figure_class, const char *label, double w, double h);
void md_html_svg_close(md_strbuf *b, const char *caption);
/* <text> at (x, y), escaped; extra: more attributes (" class=\"tick\"") or NULL. */
void md_html_svg_text(md_strbuf *b, double x, double y, const char *anchor, const char *extra, const char *text);

/* The value axis of horizontal bars: a light vertical line from top to bottom
 * and its tick label (at label_y) for each value a0, a0 + step, ... up to a1,
 * at x = left .. right for a0 .. a1. */
void md_html_vgrid(md_strbuf *b, double a0, double a1, double step, double left, double right, double top,
                   double bottom, double label_y);

struct md_html_series {
    const char *name;
    const double *x, *y; /* n points; NaN y = missing */
    int n;
    int dashed;
};

/* Line chart with markers; a finite mark_x draws a dashed vertical line
 * labelled mark_label (NULL: none). */
void md_html_line_chart(md_strbuf *b, const char *title, const char *xlabel, const char *ylabel,
                        const struct md_html_series *s, int ns, const char *caption, double mark_x,
                        const char *mark_label);
/* Histogram of n samples with the p50/p95/p99 of `stats` marked. */
void md_html_histogram(md_strbuf *b, const char *title, const double *v, int n, const cJSON *stats,
                       const char *caption);
/* Batch sweep records (batch_size, samples_per_s, peak_bytes, status). */
void md_html_sweep_chart(md_strbuf *b, const cJSON *sweep);
/* Horizontal bars, one per record of arr: label_key, value key, optional
 * note_key (printed "(x2.50)"), a dashed reference line at ref_line (> 0). */
void md_html_hbars(md_strbuf *b, const char *title, const cJSON *arr, const char *label_key, const char *key,
                   const char *note_key, const char *unit, double ref_line, const char *caption);
/* Stacked bar of a memory breakdown (params/grads/optimizer/activations/other_bytes). */
void md_html_memory_bar(md_strbuf *b, const cJSON *mem);
/* A forecast window (lookback, actual, predicted). */
void md_html_forecast_chart(md_strbuf *b, const cJSON *f);

/* The charts' rules, for charts drawn elsewhere: "nice" tick spacing (1, 2,
 * 5 x 10^k) covering [lo, hi] in about five steps; a tick label (k, M, G);
 * colour i of the palette (8 colours, repeating). */
void md_html_nice_axis(double lo, double hi, double *a0, double *a1, double *step);
void md_html_tick(double v, char *buf, size_t n);
const char *md_html_colour(int i);

#endif
