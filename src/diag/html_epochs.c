/* html_epochs.c - per-epoch diagnostics in the HTML report (html_epochs.h).
 * Self-contained (inline styles) so the page's main layout can change
 * around it. */
#include "diag/html_epochs.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "diag/html_util.h"

static int epoch_of(const cJSON *d, int i)
{
    double e;
    return md_hj_num(d, "epoch", &e) ? (int)e : i + 1;
}

/* ---- step time by phase ------------------------------------------------------------- */

static const struct phase_style {
    const char *key, *label, *color;
} phases[] = {
    {"data_wait", "data wait", "#8c564b"}, {"upload", "upload", "#9467bd"},
    {"forward", "forward", "#1f77b4"},     {"backward", "loss + backward", "#ff7f0e"},
    {"optimizer", "optimizer", "#2ca02c"}, {"combined", "forward + backward + optimizer (one unit)", "#17becf"},
    {"sync", "sync (waiting for the device)", "#d62728"}, {"other", "other (loop bookkeeping)", "#c7c7c7"},
};
#define NPH ((int)(sizeof phases / sizeof phases[0]))

static void phases_part(md_strbuf *b, const cJSON *diag)
{
    int n = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, diag) n += cJSON_IsObject(md_hj_get(d, "phases"));
    if (n == 0) return;
    const double left = 70, width = 560, rowh = 22, top = 8;
    double h = top + rowh * n + 30;
    md_strbuf_add(b, "<div id=\"epoch-phases\">\n<h3>Step time by phase, per epoch</h3>\n");
    md_strbuf_printf(b, "<figure><svg class=\"chart\" role=\"img\" aria-label=\"Step time by phase per epoch\" "
                        "width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n",
                     left + width + 90, h, left + width + 90, h);
    int row = 0, i = 0, have[NPH] = {0}, async = 0;
    const char *reason = NULL;
    cJSON_ArrayForEach(d, diag)
    {
        const cJSON *ph = md_hj_get(d, "phases");
        int ep = epoch_of(d, i++);
        if (!cJSON_IsObject(ph)) continue;
        async |= cJSON_IsTrue(md_hj_get(ph, "device_async"));
        double y = top + rowh * row++, x = left, steps = 0;
        md_hj_num(ph, "steps_s", &steps);
        md_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">epoch %d</text>\n", left - 6,
                         y + rowh / 2 + 3, ep);
        for (int k = 0; k < NPH; k++) {
            double share = 0, secs = 0;
            const cJSON *p = md_hj_get(ph, phases[k].key);
            if (!cJSON_IsObject(p) || !md_hj_num(p, "share", &share) || share <= 0) continue;
            md_hj_num(p, "seconds", &secs);
            if (k == 5 && !reason) reason = md_hj_str(p, "reason");
            have[k] = 1;
            double w = fmin(share, 1.0) * width;
            md_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\">"
                                "<title>epoch %d, %s: %.3g s (%.1f%%)</title></rect>\n",
                             x, y + 3, w, rowh - 6, phases[k].color, ep, phases[k].label, secs, 100 * share);
            x += w;
        }
        md_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\">%.3g s</text>\n", left + width + 6, y + rowh / 2 + 3,
                         steps);
    }
    double ya = top + rowh * row + 4;
    for (int k = 0; k <= 4; k++) {
        double x = left + width * k / 4.0;
        md_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d%%</text>\n", x, ya + 12, 25 * k);
    }
    md_strbuf_add(b, "</svg>\n<figcaption>Share of each epoch's training-step time (validation not included), "
                     "measured on the host. ");
    for (int k = 0; k < NPH; k++)
        if (have[k])
            md_strbuf_printf(b, "<span style=\"display:inline-block;width:10px;height:10px;background:%s;"
                                "margin:0 3px 0 8px\"></span>%s", phases[k].color, phases[k].label);
    if (async)
        md_strbuf_add(b, ". On this device the forward, backward and optimizer figures are the host's time to "
                         "queue the work; the device's own time shows as sync");
    if (reason) {
        md_strbuf_add(b, ". Forward, backward and optimizer are one unit here: ");
        md_strbuf_add_escaped(b, reason);
    }
    md_strbuf_add(b, ".</figcaption></figure>\n</div>\n");
}

/* ---- tables: one row per layer (or input), one column per epoch ----------------------- */

/* A cell's background: white to red (dead units) or to blue (balance) with
 * the value (0..1); `hi` marks it. */
static void share_cell(md_strbuf *b, double v, int hi, int blue)
{
    int c = (int)lround(255 - 120 * fmin(fmax(v, 0), 1));
    if (blue) md_strbuf_printf(b, "<td class=\"n%s\" style=\"background:rgb(%d,%d,255)", hi ? " hi" : "", c, (c + 255) / 2);
    else md_strbuf_printf(b, "<td class=\"n%s\" style=\"background:rgb(255,%d,%d)", hi ? " hi" : "", c, c);
    md_strbuf_printf(b, "%s\">%.1f%%</td>", hi ? ";font-weight:700;color:#900" : "", 100 * v);
}

static void epoch_head(md_strbuf *b, const cJSON *diag, const char *first)
{
    md_strbuf_printf(b, "<table class=\"rec\"><thead><tr><th>%s</th>", first);
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, diag) md_strbuf_printf(b, "<th>epoch %d</th>", epoch_of(d, i++));
    md_strbuf_add(b, "</tr></thead><tbody>\n");
}

/* The record of `arr` whose `key` is `name`, or NULL. */
static const cJSON *find_rec(const cJSON *arr, const char *key, const char *name)
{
    const cJSON *r;
    cJSON_ArrayForEach(r, arr)
    {
        const char *s = md_hj_str(r, key);
        if (s && strcmp(s, name) == 0) return r;
    }
    return NULL;
}

#define DEAD_HIGH 0.25 /* dead-unit shares from here on are highlighted */

static void dead_part(md_strbuf *b, const cJSON *diag)
{
    /* the layers come from the last epoch that has any */
    const cJSON *ref = NULL, *d;
    cJSON_ArrayForEach(d, diag) if (cJSON_GetArraySize(md_hj_get(d, "dead_units")) > 0) ref = md_hj_get(d, "dead_units");
    if (!ref) return;
    md_strbuf_add(b, "<div id=\"epoch-dead-units\">\n<h3>Dead units per activation layer</h3>\n");
    epoch_head(b, diag, "layer (activation)");
    int highs = 0;
    const cJSON *l;
    cJSON_ArrayForEach(l, ref)
    {
        const char *name = md_hj_str(l, "layer"), *act = md_hj_str(l, "activation");
        if (!name) continue;
        md_strbuf_add(b, "<tr><th>");
        md_strbuf_add_escaped(b, name);
        if (act) {
            md_html_wrap(b, " <span class=\"k\">", act, "</span>");
        }
        md_strbuf_add(b, "</th>");
        cJSON_ArrayForEach(d, diag)
        {
            double v;
            if (md_hj_num(find_rec(md_hj_get(d, "dead_units"), "layer", name), "dead_share", &v)) {
                share_cell(b, v, v >= DEAD_HIGH, 0);
                highs += v >= DEAD_HIGH;
            } else {
                md_strbuf_add(b, "<td class=\"dim\">-</td>");
            }
        }
        md_strbuf_add(b, "</tr>\n");
    }
    double thr = 0.01, ns = 0;
    const cJSON *probe = md_hj_get(cJSON_GetArrayItem(diag, cJSON_GetArraySize(diag) - 1), "probe");
    md_hj_num(probe, "dead_threshold", &thr);
    md_hj_num(probe, "samples", &ns);
    md_strbuf_printf(b, "</tbody></table>\n<p class=\"fig\">Share of a layer's units (channels; features of a token "
                        "sequence) that are inactive for every sample and position of a fixed probe batch of %.0f "
                        "samples: ReLU output 0, GELU-type output within &#177;%g. Shares of %.0f%% and more are in "
                        "bold%s.</p>\n</div>\n",
                     ns, thr, 100 * DEAD_HIGH, highs ? " (some layers here)" : " (none here)");
}

static void balance_part(md_strbuf *b, const cJSON *diag)
{
    const cJSON *ref = NULL, *d;
    cJSON_ArrayForEach(d, diag) if (cJSON_GetArraySize(md_hj_get(d, "pathway_balance")) > 0) ref = md_hj_get(d, "pathway_balance");
    if (!ref) return;
    md_strbuf_add(b, "<div id=\"epoch-pathways\">\n<h3>Pathway balance per fusion</h3>\n");
    const cJSON *f;
    cJSON_ArrayForEach(f, ref)
    {
        const char *layer = md_hj_str(f, "layer"), *kind = md_hj_str(f, "kind");
        if (!layer) continue;
        char head[400];
        snprintf(head, sizeof head, "%.200s (%.40s): input", layer, kind ? kind : "fusion");
        md_html_wrap(b, "<p class=\"flat\">", head, "</p>\n");
        epoch_head(b, diag, "input");
        const cJSON *in;
        cJSON_ArrayForEach(in, md_hj_get(f, "inputs"))
        {
            const char *name = md_hj_str(in, "input");
            if (!name) continue;
            md_html_wrap(b, "<tr><th>", name, "</th>");
            int nin = cJSON_GetArraySize(md_hj_get(f, "inputs"));
            cJSON_ArrayForEach(d, diag)
            {
                double v;
                const cJSON *fe = find_rec(md_hj_get(d, "pathway_balance"), "layer", layer);
                if (md_hj_num(find_rec(md_hj_get(fe, "inputs"), "input", name), "share", &v))
                    /* a pathway far below an even split is highlighted */
                    share_cell(b, v, nin > 1 && v < 0.4 / (double)nin, 1);
                else
                    md_strbuf_add(b, "<td class=\"dim\">-</td>");
            }
            md_strbuf_add(b, "</tr>\n");
        }
        md_strbuf_add(b, "</tbody></table>\n");
    }
    md_strbuf_add(b, "<p class=\"fig\">Each input's share of the fused output on the probe batch: weighted_add "
                     "mean |w<sub>i</sub> x<sub>i</sub>| / &#931;<sub>j</sub> mean |w<sub>j</sub> x<sub>j</sub>|; "
                     "film: the modulated input's mean |x| against the conditioning's mean |x&#183;&#947; + "
                     "&#946;|. Shares under 40% of an even split are in bold.</p>\n</div>\n");
}

void md_html_epochs(md_strbuf *b, const cJSON *training)
{
    const cJSON *diag = md_hj_get(training, "diagnostics");
    if (!cJSON_IsArray(diag) || cJSON_GetArraySize(diag) == 0) return;
    phases_part(b, diag);
    dead_part(b, diag);
    balance_part(b, diag);
}
