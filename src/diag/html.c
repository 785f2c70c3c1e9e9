/* html.c - the self-contained HTML report: a summary for a person at the top
 * (device, what ran, results, findings, the first recommendations), then one
 * section per part of the JSON report with readable labels and units.
 * Sections are separate functions built from html_util.h's pieces; charts are
 * inline SVG (html_chart.c). */
#include "diag/html.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "core/mem.h"
#include "diag/html_epochs.h"
#include "diag/html_doctor.h"
#include "diag/html_profile.h"
#include "diag/html_models.h"
#include "diag/html_util.h"
#include "diag/strbuf.h"

/* training.task; older reports have none: curves with val_mse are a regression
 * run's. */
static int is_regression(const cJSON *tr)
{
    const char *task = md_hj_str(tr, "task");
    if (task) return strcmp(task, "regression") == 0;
    return md_hj_get(md_hj_get(tr, "curves"), "val_mse") != NULL;
}

/* The last finite number of training.curves[key] (or of the epoch rows),
 * its epoch in *epoch when asked. */
static int last_curve(const cJSON *tr, const char *key, double *v, double *epoch)
{
    const cJSON *c = md_hj_get(md_hj_get(tr, "curves"), key);
    const cJSON *ep = md_hj_get(md_hj_get(tr, "curves"), "epoch");
    int found = 0;
    if (cJSON_IsArray(c)) {
        int n = cJSON_GetArraySize(c);
        for (int i = n - 1; i >= 0 && !found; i--) {
            const cJSON *e = cJSON_GetArrayItem(c, i);
            if (cJSON_IsNumber(e) && isfinite(e->valuedouble)) {
                *v = e->valuedouble;
                const cJSON *x = cJSON_GetArrayItem(ep, i);
                if (epoch) *epoch = cJSON_IsNumber(x) ? x->valuedouble : i + 1;
                found = 1;
            }
        }
        return found;
    }
    const cJSON *rows = md_hj_get(tr, "epochs");
    if (!cJSON_IsArray(rows)) return 0;
    int n = cJSON_GetArraySize(rows);
    for (int i = n - 1; i >= 0; i--) {
        const cJSON *r = cJSON_GetArrayItem(rows, i);
        if (md_hj_num(r, key, v)) {
            if (epoch && !md_hj_num(r, "epoch", epoch)) *epoch = i + 1;
            return 1;
        }
    }
    return 0;
}

/* Non-finite values in a training curve (written as null) or a non-finite
 * final loss: the run diverged. */
static int curve_not_finite(const cJSON *tr, const char *key)
{
    const cJSON *c = md_hj_get(md_hj_get(tr, "curves"), key), *e;
    cJSON_ArrayForEach(e, c) if (cJSON_IsNull(e) || (cJSON_IsNumber(e) && !isfinite(e->valuedouble))) return 1;
    return 0;
}

/* ---- findings: what a reader should see first ------------------------------------ */

struct finding {
    enum md_html_level level;
    const char *where; /* section id it belongs to */
    char title[120];
    char text[480];
};

struct findings {
    struct finding f[16];
    int n;
};

static struct finding *add_finding(struct findings *fs, enum md_html_level lv, const char *where, const char *title)
{
    if (fs->n >= 16) return NULL;
    struct finding *f = &fs->f[fs->n++];
    f->level = lv;
    f->where = where;
    snprintf(f->title, sizeof f->title, "%s", title);
    f->text[0] = '\0';
    return f;
}

/* The last epoch's ReLU statistics (training.diagnostics[-1].relu). */
static const cJSON *last_relu(const cJSON *tr)
{
    const cJSON *d = md_hj_get(tr, "diagnostics");
    int n = cJSON_IsArray(d) ? cJSON_GetArraySize(d) : 0;
    return n > 0 ? md_hj_get(cJSON_GetArrayItem(d, n - 1), "relu") : NULL;
}

#define DEAD_WARN 0.5 /* a ReLU layer with this share of dead units is a finding */

static void dead_units_finding(const cJSON *tr, struct findings *fs)
{
    const cJSON *e;
    char list[400] = "";
    size_t o = 0;
    int n = 0;
    double worst = 0;
    cJSON_ArrayForEach(e, last_relu(tr))
    {
        double d;
        if (!md_hj_num(e, "dead_share", &d) || d < DEAD_WARN || !md_hj_str(e, "layer")) continue;
        char p[32];
        if (o < sizeof list)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s (%s)", n ? ", " : "", md_hj_str(e, "layer"),
                                  md_html_fmt_pct(d, p, sizeof p));
        worst = d > worst ? d : worst;
        n++;
    }
    if (!n) return;
    char t[120];
    snprintf(t, sizeof t, "%s of dead ReLU units", worst >= 0.8 ? "A large share" : "Many");
    struct finding *f = add_finding(fs, MD_HTML_WARN, "training", t);
    if (f)
        snprintf(f->text, sizeof f->text,
                 "%s: units that output zero for every sample of the probe batch learn nothing. A lower learning "
                 "rate, another initialisation or LeakyReLU/GELU usually help.",
                 list);
}

static void collect_findings(const cJSON *r, struct findings *fs)
{
    fs->n = 0;
    const cJSON *st = md_hj_get(r, "status");
    const char *res = md_hj_str(st, "result");
    if (res && strcmp(res, "ok") != 0) {
        struct finding *f = add_finding(fs, MD_HTML_BAD, "summary", "The run did not finish:");
        if (f) snprintf(f->text, sizeof f->text, "%s%s%s", res, md_hj_str(st, "error") ? ": " : "",
                        md_hj_str(st, "error") ? md_hj_str(st, "error") : "");
    }
    const cJSON *tr = md_hj_get(r, "training");
    if (tr) {
        double fl;
        int nonfinite = curve_not_finite(tr, "train_loss") || curve_not_finite(tr, "val_loss") ||
                        cJSON_IsNull(md_hj_get(tr, "final_loss")) ||
                        (cJSON_IsNumber(md_hj_get(tr, "final_loss")) && !md_hj_num(tr, "final_loss", &fl));
        double first = 0, last = 0, e0 = 0;
        const cJSON *tl = md_hj_get(md_hj_get(tr, "curves"), "train_loss");
        if (cJSON_IsArray(tl) && cJSON_IsNumber(cJSON_GetArrayItem(tl, 0))) first = cJSON_GetArrayItem(tl, 0)->valuedouble;
        if (nonfinite) {
            struct finding *f = add_finding(fs, MD_HTML_BAD, "training", "The loss became NaN or infinite:");
            if (f) snprintf(f->text, sizeof f->text, "training diverged. Lower the learning rate, clip gradients "
                                                     "(--grad-clip 1.0) or train in fp32.");
        } else if (first > 0 && last_curve(tr, "train_loss", &last, &e0) && last > 2 * first) {
            struct finding *f = add_finding(fs, MD_HTML_WARN, "training", "The training loss rose:");
            if (f) snprintf(f->text, sizeof f->text, "from %.3g in the first epoch to %.3g in epoch %.0f; the learning "
                                                     "rate may be too high.", first, last, e0);
        }
        const cJSON *es = md_hj_get(tr, "early_stopping");
        double stopped, patience = 0, best;
        if (md_hj_num(es, "stopped_after_epoch", &stopped)) {
            md_hj_num(es, "patience", &patience);
            struct finding *f = add_finding(fs, MD_HTML_INFO, "training", "Early stopping:");
            if (f) {
                int o = snprintf(f->text, sizeof f->text, "training stopped after epoch %.0f (patience %.0f: that many epochs "
                                 "without a better validation score)", stopped, patience);
                if (md_hj_num(md_hj_get(tr, "best"), "epoch", &best) && o > 0 && (size_t)o < sizeof f->text)
                    snprintf(f->text + o, sizeof f->text - (size_t)o, "; the best weights are from epoch %.0f.", best);
                else if (o > 0 && (size_t)o < sizeof f->text)
                    snprintf(f->text + o, sizeof f->text - (size_t)o, ".");
            }
        }
        dead_units_finding(tr, fs);
        double skipped;
        if (md_hj_num(md_hj_get(tr, "loss_scaling"), "skipped_steps", &skipped) && skipped > 0) {
            struct finding *f = add_finding(fs, MD_HTML_INFO, "training", "Mixed precision skipped steps:");
            if (f) snprintf(f->text, sizeof f->text, "%.0f steps had overflowing gradients and were skipped while the "
                                                     "loss scale adjusted.", skipped);
        }
    }
    const cJSON *bench = md_hj_get(r, "benchmark");
    const cJSON *data = md_hj_get(bench, "data");
    const cJSON *bn = md_hj_get(data, "bottleneck");
    double lsps, ssps;
    if (cJSON_IsBool(bn) && md_hj_num(data, "loader_samples_per_s", &lsps) && lsps > 0 &&
        md_hj_num(data, "step_samples_per_s", &ssps) && ssps > 0) {
        int bad = cJSON_IsTrue(bn);
        struct finding *f = add_finding(fs, bad ? MD_HTML_WARN : MD_HTML_GOOD, "benchmark",
                                        bad ? "Data loading is the bottleneck:" : "Data loading is not the bottleneck:");
        char a[32], c[32];
        if (f) {
            md_html_fmt_num(round(lsps), a, sizeof a);
            md_html_fmt_num(round(ssps), c, sizeof c);
            if (bad)
                snprintf(f->text, sizeof f->text, "the loader prepares %s samples/s and a training step consumes %s "
                         "samples/s (%.2fx). More loader threads (--num-workers) or cached images (--cache-images) "
                         "would help.", a, c, lsps / ssps);
            else
                snprintf(f->text, sizeof f->text, "the loader prepares %s samples/s, %.1fx what a training step "
                         "consumes (%s samples/s).", a, lsps / ssps, c);
        }
    }
}

static void findings_in(md_strbuf *b, const struct findings *fs, const char *where)
{
    for (int i = 0; i < fs->n; i++)
        if (!where || strcmp(fs->f[i].where, where) == 0)
            md_html_callout(b, fs->f[i].level, fs->f[i].title, fs->f[i].text[0] ? fs->f[i].text : NULL);
}

/* "The largest batch that fits is N; the fastest is M at X samples/s." */
static int batch_finder_sentence(const cJSON *bench, char *buf, size_t n)
{
    const cJSON *fb = md_hj_get(bench, "find_batch_size");
    double mx, fast, fsps;
    if (!cJSON_IsObject(fb) || !md_hj_num(fb, "max_batch", &mx)) return 0;
    char a[32], c[32];
    int o;
    if (mx <= 0) o = snprintf(buf, n, "No batch size fits in the memory budget");
    else if (cJSON_IsTrue(md_hj_get(fb, "limited_by_search_cap")))
        o = snprintf(buf, n, "The largest batch that fits is at least %s (the search stopped there)",
                     md_html_fmt_num(mx, a, sizeof a));
    else o = snprintf(buf, n, "The largest batch that fits is %s", md_html_fmt_num(mx, a, sizeof a));
    if (o < 0 || (size_t)o >= n) return 1;
    if (md_hj_num(fb, "fastest_batch", &fast) && md_hj_num(fb, "fastest_samples_per_s", &fsps))
        snprintf(buf + o, n - (size_t)o, "; the fastest is %s at %s samples/s.", md_html_fmt_num(fast, a, sizeof a),
                 md_html_fmt_num(round(fsps), c, sizeof c));
    else
        snprintf(buf + o, n - (size_t)o, ".");
    return 1;
}

/* ---- header and summary ------------------------------------------------------------ */

static void header(md_strbuf *b, const cJSON *r)
{
    const cJSON *tool = md_hj_get(r, "tool");
    const cJSON *status = md_hj_get(r, "status");
    md_html_wrap(b, "<header>\n<h1>mpsdiag report</h1>\n<p class=\"meta\">",
                 md_hj_str(tool, "name") ? md_hj_str(tool, "name") : "mpsdiag", " ");
    md_strbuf_add_escaped(b, md_hj_str(tool, "version") ? md_hj_str(tool, "version") : "");
    if (md_hj_str(r, "started_at")) {
        md_strbuf_add(b, " &#183; started ");
        md_strbuf_add_escaped(b, md_hj_str(r, "started_at"));
    }
    double d;
    char t[48];
    if (md_hj_num(r, "duration_s", &d)) {
        md_strbuf_add(b, " &#183; took ");
        md_strbuf_add_escaped(b, md_html_fmt_s(d, t, sizeof t));
    }
    if (md_hj_str(md_hj_get(r, "system"), "hostname")) {
        md_strbuf_add(b, " &#183; host ");
        md_strbuf_add_escaped(b, md_hj_str(md_hj_get(r, "system"), "hostname"));
    }
    md_strbuf_add(b, "</p>\n");
    if (status) {
        const char *res = md_hj_str(status, "result") ? md_hj_str(status, "result") : "unknown";
        int good = strcmp(res, "ok") == 0;
        md_strbuf_printf(b, "<p class=\"status %s\"><b>Result:</b> ", good ? "good" : "badbox");
        md_strbuf_add_escaped(b, good ? "finished" : res);
        double code;
        if (md_hj_num(status, "exit_code", &code)) md_strbuf_printf(b, " (exit %.0f)", code);
        if (md_hj_str(status, "error")) {
            md_strbuf_add(b, ": ");
            md_strbuf_add_escaped(b, md_hj_str(status, "error"));
        }
        md_strbuf_add(b, "</p>\n");
    }
    md_strbuf_add(b, "</header>\n");
}

/* The peak device memory of training: the benchmark's training steps at the
 * run's batch size; the whole process's peak only when no batch probing
 * (finder, sweep) ran, as that probing allocates far more. */
static int training_peak(const cJSON *r, double *v)
{
    const cJSON *bench = md_hj_get(r, "benchmark");
    if (md_hj_num(md_hj_get(bench, "memory"), "device_peak_bytes", v)) return 1;
    if (md_hj_get(bench, "find_batch_size") || md_hj_get(bench, "sweep")) return 0;
    return md_hj_num(md_hj_get(r, "memory"), "device_peak_bytes", v);
}

static void summary_device(md_strbuf *b, const cJSON *r)
{
    const cJSON *sel = md_hj_get(r, "selected_device");
    if (!sel) return;
    md_strbuf_add(b, "<tr><th>Device</th><td>");
    if (md_hj_str(sel, "name")) {
        md_html_wrap(b, "<b>", md_hj_str(sel, "name"), "</b> ");
    }
    double idx = 0;
    md_hj_num(sel, "index", &idx);
    md_strbuf_add(b, "(");
    md_strbuf_add_escaped(b, md_hj_str(sel, "backend") ? md_hj_str(sel, "backend") : "?");
    md_strbuf_printf(b, ":%.0f)", idx);
    if (md_hj_str(sel, "why")) {
        md_html_wrap(b, "<br><span class=\"k\">", md_hj_str(sel, "why"), "</span>");
    }
    md_strbuf_add(b, "</td></tr>\n");
}

/* What ran: model, data, training length, batch, precision. */
static void summary_run(md_strbuf *b, const cJSON *r)
{
    const cJSON *model = md_hj_get(r, "model"), *data = md_hj_get(r, "data"), *tr = md_hj_get(r, "training");
    const cJSON *bench = md_hj_get(r, "benchmark");
    char t[64], u[64];
    double v, w;
    const char *mname = cJSON_IsObject(model) ? md_hj_str(model, "name") : cJSON_IsString(model) ? model->valuestring : NULL;
    if (!mname) mname = md_hj_str(bench, "model");
    if (mname) {
        md_html_wrap(b, "<tr><th>Model</th><td><b>", mname, "</b>");
        if (md_hj_num(model, "parameters", &v) || md_hj_num(model, "params", &v))
            md_strbuf_printf(b, ", %s parameters", md_html_fmt_num(v, t, sizeof t));
        if (md_hj_num(model, "flops_forward", &v) || md_hj_num(model, "flops_per_sample", &v)) {
            if (v >= 1e9) md_strbuf_printf(b, ", %.3g GFLOPs per sample (forward)", v / 1e9);
            else md_strbuf_printf(b, ", %.3g MFLOPs per sample (forward)", v / 1e6);
        }
        md_strbuf_add(b, "</td></tr>\n");
    }
    const char *dname = cJSON_IsObject(data) ? md_hj_str(data, "name") : NULL;
    if (!dname) dname = md_hj_str(data, "dataset");
    if (dname || cJSON_IsObject(data)) {
        md_html_wrap(b, "<tr><th>Data</th><td><b>", dname ? dname : "?", "</b>");
        static const char *const splits[][2] = {{"train", "training"}, {"val", "validation"}, {"test", "test"}};
        int k = 0;
        for (int i = 0; i < 3; i++) {
            const cJSON *s = md_hj_get(md_hj_get(data, "splits"), splits[i][0]);
            if (!md_hj_num(data, splits[i][0], &v) && !md_hj_num(s, "count", &v)) continue;
            md_strbuf_printf(b, "%s%s %s", k++ ? ", " : ": ", md_html_fmt_num(v, t, sizeof t), splits[i][1]);
        }
        if (k) md_strbuf_add(b, " samples");
        if (md_hj_str(data, "source")) {
            md_html_wrap(b, " <span class=\"k\">from ", md_hj_str(data, "source"), "</span>");
        }
        md_strbuf_add(b, "</td></tr>\n");
    }
    if (cJSON_IsObject(tr)) {
        md_strbuf_add(b, "<tr><th>Training</th><td>");
        double ran, steps, bs;
        int have_epochs = md_hj_num(tr, "epochs_run", &ran) || md_hj_num(tr, "epochs", &ran);
        if (!have_epochs && cJSON_IsArray(md_hj_get(tr, "epochs"))) {
            ran = cJSON_GetArraySize(md_hj_get(tr, "epochs"));
            have_epochs = 1;
        }
        if (have_epochs) md_strbuf_printf(b, "%.0f epoch%s", ran, ran == 1 ? "" : "s");
        if (md_hj_num(tr, "epochs", &w) && md_hj_num(tr, "epochs_run", &ran) && w != ran) md_strbuf_printf(b, " of %.0f", w);
        if (md_hj_num(tr, "steps_per_epoch", &steps))
            md_strbuf_printf(b, " &#215; %s steps", md_html_fmt_num(steps, t, sizeof t));
        if (md_hj_num(tr, "batch_size", &bs)) md_strbuf_printf(b, ", batch %s", md_html_fmt_num(bs, t, sizeof t));
        if (md_hj_str(tr, "optimizer")) {
            md_strbuf_add(b, ", ");
            md_strbuf_add_escaped(b, md_hj_str(tr, "optimizer"));
        }
        if (md_hj_num(tr, "lr", &v)) md_strbuf_printf(b, " (learning rate %.3g", v);
        if (md_hj_str(tr, "schedule")) {
            md_strbuf_add(b, md_hj_num(tr, "lr", &v) ? ", " : " (");
            md_strbuf_add_escaped(b, md_hj_str(tr, "schedule"));
            md_strbuf_add(b, " schedule)");
        } else if (md_hj_num(tr, "lr", &v)) {
            md_strbuf_add(b, ")");
        }
        if (md_hj_num(tr, "train_time_s", &v)) md_strbuf_printf(b, "; took %s", md_html_fmt_s(v, u, sizeof u));
        md_strbuf_add(b, "</td></tr>\n");
    }
    const char *prec = md_hj_str(tr, "precision");
    if (!prec) prec = md_hj_str(bench, "precision");
    if (prec) {
        md_html_wrap(b, "<tr><th>Precision</th><td>", prec, "</td></tr>\n");
    }
    if (cJSON_IsObject(bench)) {
        md_strbuf_add(b, "<tr><th>Benchmark</th><td>");
        double it = 0, bs = 0;
        const cJSON *btr = md_hj_get(bench, "training");
        if (md_hj_num(btr, "iters", &it)) md_strbuf_printf(b, "%.0f timed training steps", it);
        if (md_hj_num(btr, "batch_size", &bs) || md_hj_num(bench, "batch_size", &bs))
            md_strbuf_printf(b, "%sbatch %s", it > 0 ? ", " : "", md_html_fmt_num(bs, t, sizeof t));
        if (md_hj_str(bench, "data_source")) {
            md_html_wrap(b, ", ", md_hj_str(bench, "data_source"), " data");
        }
        if (md_hj_get(bench, "find_batch_size")) md_strbuf_add(b, "; batch-size finder");
        if (cJSON_IsArray(md_hj_get(bench, "sweep"))) md_strbuf_add(b, "; batch-size sweep");
        if (cJSON_IsArray(md_hj_get(bench, "devices"))) md_strbuf_add(b, "; device comparison");
        if (cJSON_IsArray(md_hj_get(bench, "ablations"))) md_strbuf_add(b, "; ablations");
        md_strbuf_add(b, "</td></tr>\n");
    }
}

/* Result cards: accuracy or errors, throughput, latency, memory. */
static void summary_cards(md_strbuf *b, const cJSON *r)
{
    const cJSON *tr = md_hj_get(r, "training"), *bench = md_hj_get(r, "benchmark");
    const cJSON *btr = md_hj_get(bench, "training"), *inf = md_hj_get(bench, "inference");
    char v1[64], lab[96];
    double v, e = 0, w;
    md_html_cards_begin(b);
    if (is_regression(tr)) {
        const cJSON *test = md_hj_get(tr, "test");
        if (md_hj_num(test, "mse", &v)) {
            if (md_hj_num(md_hj_get(test, "baseline"), "mse", &w)) snprintf(lab, sizeof lab, "test MSE (naive %.4g)", w);
            else snprintf(lab, sizeof lab, "test MSE");
            snprintf(v1, sizeof v1, "%.4g", v);
            md_html_card(b, v1, lab);
        }
        const cJSON *rm = md_hj_get(test, "regression_metrics");
        if (!rm) rm = md_hj_get(tr, "regression_metrics");
        if (md_hj_num(rm, "r2", &v)) {
            snprintf(v1, sizeof v1, "%.3f", v);
            md_html_card(b, v1, md_hj_get(test, "regression_metrics") ? "test R\xc2\xb2" : "validation R\xc2\xb2");
        }
        if (last_curve(tr, "val_loss", &v, &e)) {
            snprintf(lab, sizeof lab, "validation loss, epoch %.0f", e);
            md_html_card(b, md_html_fmt_num(v, v1, sizeof v1), lab);
        }
    } else if (tr) {
        int acc = last_curve(tr, "val_acc", &v, &e) || last_curve(tr, "val_accuracy", &v, &e);
        if (!acc && md_hj_num(tr, "final_val_acc", &v)) {
            acc = 1;
            e = 0;
        }
        if (acc) {
            if (v <= 1) md_html_fmt_pct(v, v1, sizeof v1);
            else snprintf(v1, sizeof v1, "%.1f%%", v);
            if (e > 0) snprintf(lab, sizeof lab, "validation accuracy, epoch %.0f", e);
            else snprintf(lab, sizeof lab, "final validation accuracy");
            md_html_card(b, v1, lab);
        }
        const cJSON *test = md_hj_get(tr, "test");
        if (md_hj_num(test, "acc", &v) || md_hj_num(test, "accuracy", &v)) {
            char ns[32];
            if (md_hj_num(test, "samples", &w))
                snprintf(lab, sizeof lab, "test accuracy (%s samples)", md_html_fmt_num(w, ns, sizeof ns));
            else snprintf(lab, sizeof lab, "test accuracy");
            md_html_card(b, md_html_fmt_pct(v, v1, sizeof v1), lab);
        }
        if (md_hj_num(md_hj_get(tr, "best"), "acc", &v) && md_hj_num(md_hj_get(tr, "best"), "epoch", &w) && w != e) {
            snprintf(lab, sizeof lab, "best validation accuracy (epoch %.0f)", w);
            md_html_card(b, md_html_fmt_pct(v, v1, sizeof v1), lab);
        }
        if (last_curve(tr, "val_loss", &v, &e) || last_curve(tr, "train_loss", &v, &e)) {
            snprintf(lab, sizeof lab, "%s loss, epoch %.0f", last_curve(tr, "val_loss", &w, NULL) ? "validation" : "training", e);
            md_html_card(b, md_html_fmt_num(v, v1, sizeof v1), lab);
        }
    }
    if (md_hj_num(btr, "samples_per_s", &v)) {
        md_html_card(b, md_html_fmt_num(round(v), v1, sizeof v1), "training samples/s");
    } else if (md_hj_num(tr, "samples_per_s", &v) || last_curve(tr, "samples_per_s", &v, NULL)) {
        md_html_card(b, md_html_fmt_num(round(v), v1, sizeof v1), "training samples/s");
    }
    if (md_hj_num(md_hj_get(inf, "latency_ms"), "p50", &v))
        md_html_card(b, md_html_fmt_ms(v, v1, sizeof v1), "inference latency per batch (median)");
    if (md_hj_num(btr, "achieved_gflops", &v)) {
        double f;
        if (md_hj_num(btr, "fraction_of_peak", &f)) {
            char p[32];
            snprintf(lab, sizeof lab, "GFLOP/s achieved (%s of peak)", md_html_fmt_pct(f, p, sizeof p));
        } else {
            snprintf(lab, sizeof lab, "GFLOP/s achieved");
        }
        md_html_card(b, md_html_fmt_num(v, v1, sizeof v1), lab);
    }
    if (training_peak(r, &v)) md_html_card(b, md_fmt_bytes(v, v1, sizeof v1), "peak device memory of training");
    md_html_cards_end(b);
}

static void recommendation_item(md_strbuf *b, const cJSON *e);

static void summary_section(md_strbuf *b, const cJSON *r, const struct findings *fs)
{
    md_html_section_begin(b, "summary", "Summary");
    md_strbuf_add(b, "<table class=\"kv sum\"><tbody>\n");
    summary_device(b, r);
    summary_run(b, r);
    md_strbuf_add(b, "</tbody></table>\n");
    md_html_heading(b, "Results");
    summary_cards(b, r);
    const cJSON *tr = md_hj_get(r, "training");
    double m, bm;
    if (is_regression(tr) && md_hj_num(md_hj_get(tr, "test"), "mse", &m) &&
        md_hj_num(md_hj_get(md_hj_get(tr, "test"), "baseline"), "mse", &bm))
        md_html_callout(b, m < bm ? MD_HTML_GOOD : MD_HTML_WARN,
                        m < bm ? "The model beats the naive baseline" : "The model does not beat the naive baseline",
                        "(test MSE; see Training).");
    char fb[240];
    if (batch_finder_sentence(md_hj_get(r, "benchmark"), fb, sizeof fb))
        md_html_callout(b, MD_HTML_INFO, "Batch size:", fb);
    if (fs->n) {
        md_html_heading(b, "Findings");
        findings_in(b, fs, NULL);
    }
    const cJSON *recs = md_hj_get(r, "recommendations");
    int nr = cJSON_IsArray(recs) ? cJSON_GetArraySize(recs) : 0;
    if (nr > 0) {
        md_html_heading(b, nr > 3 ? "Top recommendations" : "Recommendations");
        md_strbuf_add(b, "<ol class=\"recs top\">\n");
        for (int i = 0; i < nr && i < 3; i++) {
            const cJSON *e = cJSON_GetArrayItem(recs, i);
            md_strbuf_add(b, "<li>");
            if (cJSON_IsString(e)) md_strbuf_add_escaped(b, e->valuestring);
            else recommendation_item(b, e);
            md_strbuf_add(b, "</li>\n");
        }
        md_strbuf_add(b, "</ol>\n");
        if (nr > 3) md_strbuf_printf(b, "<p class=\"k\"><a href=\"#recommendations\">All %d recommendations</a></p>\n", nr);
    }
    md_html_section_end(b);
}

static void nav(md_strbuf *b, const cJSON *r, int summary)
{
    static const char *const ids[][2] = {
        {"system", "System"},   {"devices", "Devices"},     {"settings", "Settings"},
        {"model", "Model"},     {"data", "Data"},           {"run", "Run"}, {"training", "Training"}, {"folds", "Cross-validation"},
        {"benchmark", "Benchmark"}, {"profile", "Profile"}, {"check", "Check"},
        {"precision_audit", "Precision audit"}, {"memory", "Memory"}, {"recommendations", "Recommendations"},
        {"warnings", "Warnings"},
    };
    md_strbuf_add(b, "<nav>");
    if (summary) md_strbuf_add(b, "<a href=\"#summary\">Summary</a> ");
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (md_hj_get(r, ids[i][0])) md_strbuf_printf(b, "<a href=\"#%s\">%s</a> ", ids[i][0], ids[i][1]);
    md_strbuf_add(b, "</nav>\n");
}

static void settings_section(md_strbuf *b, const cJSON *settings)
{
    md_html_section_begin(b, "settings", "Settings applied, and why");
    md_html_table_begin(b, "rec", (const char *const[]){"Setting", "Value", "Why", NULL});
    const cJSON *s;
    cJSON_ArrayForEach(s, settings)
    {
        char lab[160];
        md_html_wrap(b, "<tr><td>", md_html_label(md_hj_str(s, "name"), lab, sizeof lab), "</td><td><b>");
        md_html_value(b, md_hj_str(s, "name"), md_hj_get(s, "value"));
        md_html_wrap(b, "</b></td><td>", md_hj_str(s, "why"), "</td></tr>\n");
    }
    md_html_table_end(b);
    md_html_section_end(b);
}

/* ---- regression (forecasting) runs ------------------------------------------
 * training.task is "regression": no accuracies; the validation MSE and MAE per
 * epoch, the test figures beside the naive baseline with a verdict, and a
 * forecast-against-actual chart per entry of training.forecasts. */

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
        if (!md_hj_num_any(e, k_ep, &x[i])) x[i] = i + 1;
        if (!md_hj_num_any(e, k_tl, &tl[i])) tl[i] = (double)NAN;
        if (!md_hj_num_any(e, k_vl, &vl[i])) vl[i] = (double)NAN;
        if (!md_hj_num_any(e, k_mse, &vmse[i])) vmse[i] = (double)NAN;
        if (!md_hj_num_any(e, k_mae, &vmae[i])) vmae[i] = (double)NAN;
        have_loss |= isfinite(tl[i]) || isfinite(vl[i]);
        have_err |= isfinite(vmse[i]) || isfinite(vmae[i]);
        i++;
    }
    double best = (double)NAN;
    char label[48] = "";
    if (md_hj_num(md_hj_get(tr, "best"), "epoch", &best)) snprintf(label, sizeof label, "best epoch %.0f", best);
    const char *lf = md_hj_str(tr, "loss_function");
    char ylabel[64];
    snprintf(ylabel, sizeof ylabel, "loss (%s)", lf ? lf : "standardised");
    md_strbuf_add(b, "<div class=\"charts\">\n");
    if (have_loss) {
        struct md_html_series s[2] = {{"train", x, tl, n, 0}, {"validation", x, vl, n, 1}};
        md_html_line_chart(b, "Loss per epoch", "epoch", ylabel, s, 2, NULL, best, label);
    }
    if (have_err) {
        struct md_html_series s[2] = {{"val MSE", x, vmse, n, 0}, {"val MAE", x, vmae, n, 1}};
        md_html_line_chart(b, "Validation error per epoch", "epoch", "error (standardised)", s, 2, NULL, best, label);
    }
    md_strbuf_add(b, "</div>\n");
    md_free(buf);
}

/* "Early stopping: ..." in one line, when --patience was given. */
static void early_stopping_line(md_strbuf *b, const cJSON *tr)
{
    const cJSON *es = md_hj_get(tr, "early_stopping");
    double patience, stopped, best, epochs;
    if (!cJSON_IsObject(es) || !md_hj_num(es, "patience", &patience)) return;
    if (md_hj_num(es, "stopped_after_epoch", &stopped)) return; /* a finding, above */
    md_strbuf_printf(b, "<p class=\"es\"><b>Early stopping</b> (patience %.0f epochs): ", patience);
    if (md_hj_num(es, "stopped_after_epoch", &stopped))
        md_strbuf_printf(b, "stopped after epoch %.0f, the validation loss not having improved for %.0f epochs", stopped,
                         patience);
    else if (md_hj_num(tr, "epochs", &epochs))
        md_strbuf_printf(b, "not triggered; all %.0f epochs ran", epochs);
    else
        md_strbuf_add(b, "not triggered; all epochs ran");
    if (md_hj_num(md_hj_get(tr, "best"), "epoch", &best)) {
        double v;
        md_strbuf_printf(b, "; best epoch %.0f", best);
        if (md_hj_num(md_hj_get(tr, "best"), "value", &v)) md_strbuf_printf(b, " (validation loss %.4g)", v);
    }
    md_strbuf_add(b, ".</p>\n");
}

static void test_cell(md_strbuf *b, const cJSON *o, const char *key, double scale, const char *unit)
{
    double v;
    if (md_hj_num(o, key, &v)) md_strbuf_printf(b, "<td class=\"n\">%.4g%s</td>", v * scale, unit);
    else if (cJSON_IsNull(md_hj_get(o, key))) md_strbuf_add(b, "<td class=\"n\"><span class=\"bad\">not finite</span></td>");
    else md_strbuf_add(b, "<td class=\"n\"><span class=\"dim\">&#8212;</span></td>");
}

/* The test split's figures, the naive baseline's beside them, and whether the
 * model beats it (by test MSE, as forecasting papers rank models). */
static void regression_test(md_strbuf *b, const cJSON *tr)
{
    const cJSON *t = md_hj_get(tr, "test");
    if (!cJSON_IsObject(t)) return;
    const cJSON *bl = md_hj_get(t, "baseline");
    const char *bname = md_hj_str(bl, "name") ? md_hj_str(bl, "name") : "naive baseline";
    double m, bm;
    if (md_hj_num(t, "mse", &m) && md_hj_num(bl, "mse", &bm)) {
        int wins = m < bm;
        md_strbuf_printf(b, "<p class=\"status %s verdict\"><b>The model %s the naive baseline</b> (",
                         wins ? "good" : "badbox", wins ? "beats" : "does not beat");
        md_strbuf_add_escaped(b, bname);
        md_strbuf_printf(b, "): test MSE %.4g against %.4g", m, bm);
        if (bm > 0) md_strbuf_printf(b, " (%.1f%% %s)", fabs(m - bm) / bm * 100, m <= bm ? "lower" : "higher");
        double a, ba;
        if (md_hj_num(t, "mae", &a) && md_hj_num(bl, "mae", &ba)) {
            md_strbuf_printf(b, "; MAE %.4g against %.4g", a, ba);
            if (ba > 0) md_strbuf_printf(b, " (%.1f%% %s)", fabs(a - ba) / ba * 100, a <= ba ? "lower" : "higher");
        }
        md_strbuf_add(b, ".</p>\n");
    } else if (cJSON_IsNull(md_hj_get(t, "mse")) && md_hj_num(bl, "mse", &bm)) {
        /* a non-finite test MSE is written as null: it never beats the baseline */
        md_strbuf_add(b, "<p class=\"status badbox verdict\"><b>The model does not beat the naive baseline</b> (");
        md_strbuf_add_escaped(b, bname);
        md_strbuf_printf(b, "): its test MSE is not finite (baseline %.4g).</p>\n", bm);
    }
    md_strbuf_add(b, "<h3>Test split</h3>\n<p class=\"fig\">");
    double samples, after;
    if (md_hj_num(t, "samples", &samples)) md_strbuf_printf(b, "%.0f windows", samples);
    if (md_hj_num(t, "after_epoch", &after)) md_strbuf_printf(b, "%sweights after epoch %.0f", md_hj_num(t, "samples", &samples) ? ", " : "", after);
    md_strbuf_add(b, ". MSE, MAE and RMSE on standardised values.</p>\n");
    md_html_wrap(b, "<table class=\"rec test\"><thead><tr><th></th><th>model</th><th>", bname,
                 "</th></tr></thead><tbody>\n");
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
        if (!md_hj_num(t, rows[i].key, &v) && !md_hj_num(bl, rows[i].key, &v)) continue;
        md_strbuf_printf(b, "<tr><th>%s", rows[i].name);
        if (strcmp(rows[i].key, "loss") == 0 && md_hj_str(tr, "loss_function")) {
            md_html_wrap(b, " (", md_hj_str(tr, "loss_function"), ")");
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
    if (md_hj_num(rm, "count", &cnt)) md_strbuf_printf(b, "%.0f values per target, ", cnt);
    md_html_wrap(b, "units: ", md_hj_str(rm, "units") ? md_hj_str(rm, "units") : "?",
                 ". Overall: the mean over the targets.</p>\n");
    md_strbuf_add(b, "<table class=\"rec regm\"><thead><tr><th>target</th><th>R&#178;</th><th>MAE</th><th>RMSE</th>"
                     "</tr></thead><tbody>\n");
    const cJSON *t;
    cJSON_ArrayForEach(t, md_hj_get(rm, "per_target"))
    {
        md_html_wrap(b, "<tr><th>", md_hj_str(t, "name") ? md_hj_str(t, "name") : "?", "</th>");
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
    const cJSON *sum = md_hj_get(folds, "summary");
    int show[5], nshow = 0;
    for (int c = 0; c < 5; c++)
        if (cJSON_IsObject(md_hj_get(sum, cols[c].key))) show[nshow++] = c;
    double k = 0;
    md_hj_num(folds, "k", &k);
    md_html_section_begin(b, "folds", "Cross-validation");
    md_strbuf_printf(b, "<p class=\"fig\">%.0f folds, each trained afresh with the same settings; the validation "
                        "figures of each fold's last epoch, then their mean &#177; standard deviation (population, "
                        "over the folds that finished).</p>\n", k);
    md_strbuf_add(b, "<table class=\"rec folds\"><thead><tr><th>fold</th>");
    for (int c = 0; c < nshow; c++) md_strbuf_printf(b, "<th>%s</th>", cols[show[c]].name);
    md_strbuf_add(b, "<th>status</th></tr></thead><tbody>\n");
    const cJSON *run;
    cJSON_ArrayForEach(run, md_hj_get(folds, "runs"))
    {
        double f = 0;
        md_hj_num(run, "fold", &f);
        md_strbuf_printf(b, "<tr><th>%.0f</th>", f);
        for (int c = 0; c < nshow; c++) test_cell(b, md_hj_get(run, "metrics"), cols[show[c]].key, 1, "");
        md_html_wrap(b, "<td>",
                     md_hj_str(md_hj_get(run, "status"), "result")
                         ? md_hj_str(md_hj_get(run, "status"), "result")
                         : "?",
                     "</td></tr>\n");
    }
    md_strbuf_add(b, "<tr><th>mean &#177; std</th>");
    for (int c = 0; c < nshow; c++) {
        double m, sd;
        const cJSON *e = md_hj_get(sum, cols[show[c]].key);
        if (md_hj_num(e, "mean", &m) && md_hj_num(e, "std", &sd)) md_strbuf_printf(b, "<td class=\"n\">%.4g &#177; %.2g</td>", m, sd);
        else md_strbuf_add(b, "<td class=\"n\">&#8212;</td>");
    }
    md_strbuf_add(b, "<td></td></tr>\n</tbody></table>\n");
    md_html_section_end(b);
}

/* Forecast against actual for one test window: the lookback in grey, then the
 * actual values (joined to the last input) and the prediction; x is the time
 * step, 0 the last input. */
static void regression_forecasts(md_strbuf *b, const cJSON *tr)
{
    const cJSON *fc = md_hj_get(tr, "forecasts");
    if (!cJSON_IsArray(fc) || cJSON_GetArraySize(fc) == 0) return;
    md_strbuf_add(b, "<h3>Forecasts on test windows</h3>\n<p class=\"fig\">Grey: the model's input (lookback); "
                     "blue: what happened; orange: the forecast (shaded: the horizon), in original units.</p>\n"
                     "<div class=\"charts\">\n");
    const cJSON *f;
    cJSON_ArrayForEach(f, fc) if (cJSON_IsObject(f)) md_html_forecast_chart(b, f);
    md_strbuf_add(b, "</div>\n");
}

/* The last epoch's ReLU layers: dead units as bars, flagged above DEAD_WARN. */
static void dead_units_table(md_strbuf *b, const cJSON *tr)
{
    const cJSON *relu = last_relu(tr);
    if (!cJSON_IsArray(relu) || cJSON_GetArraySize(relu) == 0) return;
    md_html_heading(b, "Dead ReLU units (last epoch)");
    md_html_para(b, "Share of a ReLU layer's units that output zero for every sample of the fixed probe batch "
                    "(dead), and the share of all its outputs that are zero.");
    md_html_table_begin(b, "rec relu", (const char *const[]){"Layer", "Dead units", "Zero outputs", NULL});
    const cJSON *e;
    cJSON_ArrayForEach(e, relu)
    {
        double d = (double)NAN, z = (double)NAN;
        md_hj_num(e, "dead_share", &d);
        md_hj_num(e, "zero_share", &z);
        md_html_table_row_begin(b, md_hj_str(e, "layer") ? md_hj_str(e, "layer") : "?");
        md_html_bar_cell(b, d, d >= DEAD_WARN);
        md_html_bar_cell(b, z, 0);
        md_html_table_row_end(b);
    }
    md_html_table_end(b);
}

/* Per-epoch curves. The epochs array is report.training.epochs; each entry
 * names its figures train_loss, val_loss, train_acc, val_acc (the long
 * spellings *_accuracy are accepted too). */
static void training_section(md_strbuf *b, const cJSON *tr, const struct findings *fs)
{
    md_html_section_begin(b, "training", "Training");
    findings_in(b, fs, "training");
    /* the trainer writes columns (training.curves: {"epoch": [..], "train_loss": [..]});
     * rows (an array of epoch objects) are accepted too */
    cJSON *rows = NULL;
    const cJSON *cols = md_hj_get(tr, "curves");
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
    const cJSON *ep = rows ? rows : md_hj_get(tr, "epochs");
    if (!cJSON_IsArray(ep)) ep = md_hj_get(tr, "history");
    int n = cJSON_IsArray(ep) ? cJSON_GetArraySize(ep) : 0;
    int regression = is_regression(tr);
    if (regression) {
        regression_test(b, tr);
        regression_metrics_table(b, md_hj_get(md_hj_get(tr, "test"), "regression_metrics"), "Test split: R&#178;, MAE, RMSE per target");
        regression_metrics_table(b, md_hj_get(tr, "regression_metrics"), "Validation after the last epoch: R&#178;, MAE, RMSE per target");
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
                if (!md_hj_num_any(e, k_ep, &x[i])) x[i] = i + 1;
                if (!md_hj_num_any(e, k_tl, &tl[i])) tl[i] = (double)NAN;
                if (!md_hj_num_any(e, k_vl, &vl[i])) vl[i] = (double)NAN;
                if (!md_hj_num_any(e, k_ta, &ta[i])) ta[i] = (double)NAN;
                if (!md_hj_num_any(e, k_va, &va[i])) va[i] = (double)NAN;
                /* accuracies stored as fractions are drawn in percent */
                if (isfinite(ta[i]) && ta[i] <= 1.0) ta[i] *= 100;
                if (isfinite(va[i]) && va[i] <= 1.0) va[i] *= 100;
                have_loss |= isfinite(tl[i]) || isfinite(vl[i]);
                have_acc |= isfinite(ta[i]) || isfinite(va[i]);
                i++;
            }
            md_strbuf_add(b, "<div class=\"charts\">\n");
            if (have_loss) {
                struct md_html_series s[2] = {{"train", x, tl, n, 0}, {"validation", x, vl, n, 1}};
                md_html_line_chart(b, "Loss per epoch", "epoch", "loss", s, 2, NULL, (double)NAN, NULL);
            }
            if (have_acc) {
                struct md_html_series s[2] = {{"train", x, ta, n, 0}, {"validation", x, va, n, 1}};
                md_html_line_chart(b, "Accuracy per epoch", "epoch", "accuracy (%)", s, 2, NULL, (double)NAN, NULL);
            }
            md_strbuf_add(b, "</div>\n");
            md_free(buf);
        }
    }
    if (rows) {
        md_html_heading(b, "Per epoch");
        md_html_records(b, rows);
        cJSON_Delete(rows);
    }
    dead_units_table(b, tr);
    md_html_epochs(b, tr); /* phases, dead units, pathway balance per epoch */
    /* per-parameter diagnostics: the last epoch, folded */
    const cJSON *diag = md_hj_get(tr, "diagnostics");
    int nd = cJSON_IsArray(diag) ? cJSON_GetArraySize(diag) : 0;
    if (nd > 0) {
        const cJSON *last = cJSON_GetArrayItem(diag, nd - 1);
        double e = 0;
        md_hj_num(last, "epoch", &e);
        md_strbuf_printf(b, "<details><summary>Gradient and weight norms per tensor (epoch %.0f)</summary>\n", e);
        static const char *const skip_relu[] = {"relu", "epoch", NULL};
        md_html_kv(b, last, skip_relu);
        md_strbuf_add(b, "</details>\n");
    }
    static const char *const skip[] = {"curves", "diagnostics", NULL};
    static const char *const skip_regression[] = {"curves", "diagnostics", "test", "forecasts", NULL};
    md_strbuf_add(b, "<details><summary>All training settings and figures</summary>\n");
    md_html_kv(b, tr, regression ? skip_regression : skip);
    md_strbuf_add(b, "</details>\n");
    md_html_section_end(b);
}

static void stats_row(md_strbuf *b, const char *what, const cJSON *st)
{
    static const char *const k[] = {"mean", "std", "min", "p50", "p95", "p99", "max"};
    md_html_table_row_begin(b, what);
    for (int i = 0; i < 7; i++) {
        double v;
        char t[32];
        md_html_table_cell(b, md_hj_num(st, k[i], &v) ? md_html_fmt_ms(v, t, sizeof t) : NULL);
    }
    md_html_table_row_end(b);
}

/* benchmark.training.layer_kinds: forward and backward time per kind of
 * layer, with its share of the profiled step as a bar. */
static void layer_kinds_table(md_strbuf *b, const cJSON *lk)
{
    const cJSON *kinds = md_hj_get(lk, "kinds");
    if (!cJSON_IsArray(kinds) || cJSON_GetArraySize(kinds) == 0) return;
    md_html_heading(b, "Time by layer kind");
    double steps = 0, step = 0, layers = 0;
    char a[32], c[32];
    md_hj_num(lk, "steps", &steps);
    if (md_hj_num(lk, "step_ms", &step) && md_hj_num(lk, "layers_ms", &layers) && step > 0) {
        char p[32];
        md_strbuf_printf(b, "<p class=\"fig\">Measured op by op over %.0f training steps: a step took %s, of which the "
                            "layers' forward and backward passes %s (%s); the rest is the loss, the optimizer and "
                            "overhead.</p>\n",
                         steps, md_html_fmt_ms(step, a, sizeof a), md_html_fmt_ms(layers, c, sizeof c),
                         md_html_fmt_pct(layers / step, p, sizeof p));
    }
    md_html_table_begin(b, "rec kinds",
                        (const char *const[]){"Layer kind", "Layers", "Forward", "Backward", "Share of the step", NULL});
    const cJSON *e;
    cJSON_ArrayForEach(e, kinds)
    {
        double n = 0, f = (double)NAN, bw = (double)NAN, s = (double)NAN;
        md_hj_num(e, "layers", &n);
        md_hj_num(e, "forward_ms", &f);
        md_hj_num(e, "backward_ms", &bw);
        md_hj_num(e, "share", &s);
        char tn[32];
        md_html_table_row_begin(b, md_hj_str(e, "kind") ? md_hj_str(e, "kind") : "?");
        md_html_table_cell(b, md_html_fmt_num(n, tn, sizeof tn));
        md_html_table_cell(b, isfinite(f) ? md_html_fmt_ms(f, a, sizeof a) : NULL);
        md_html_table_cell(b, isfinite(bw) ? md_html_fmt_ms(bw, c, sizeof c) : NULL);
        md_html_bar_cell(b, s, 0);
        md_html_table_row_end(b);
    }
    md_html_table_end(b);
}

static void benchmark_section(md_strbuf *b, const cJSON *bench, const struct findings *fs)
{
    md_html_section_begin(b, "benchmark", "Benchmark");
    findings_in(b, fs, "benchmark");
    const cJSON *inf = md_hj_get(bench, "inference");
    const cJSON *tr = md_hj_get(bench, "training");
    /* headline figures */
    double v;
    char t[64];
    md_html_cards_begin(b);
    if (md_hj_num(tr, "samples_per_s", &v)) md_html_card(b, md_html_fmt_num(round(v), t, sizeof t), "training samples/s");
    if (md_hj_num(inf, "samples_per_s", &v)) md_html_card(b, md_html_fmt_num(round(v), t, sizeof t), "inference samples/s");
    if (md_hj_num(md_hj_get(tr, "step_ms"), "p50", &v)) md_html_card(b, md_html_fmt_ms(v, t, sizeof t), "training step (median)");
    if (md_hj_num(tr, "achieved_gflops", &v)) {
        char lab[64], p[32];
        double f;
        if (md_hj_num(tr, "fraction_of_peak", &f))
            snprintf(lab, sizeof lab, "GFLOP/s (%s of peak)", md_html_fmt_pct(f, p, sizeof p));
        else snprintf(lab, sizeof lab, "GFLOP/s");
        md_html_card(b, md_html_fmt_num(v, t, sizeof t), lab);
    }
    md_html_cards_end(b);
    /* latency statistics table */
    if (md_hj_get(inf, "latency_ms") || md_hj_get(tr, "step_ms")) {
        md_html_heading(b, "Timings");
        md_html_table_begin(b, "rec", (const char *const[]){"", "mean", "std", "min", "p50", "p95", "p99", "max", NULL});
        if (md_hj_get(inf, "latency_ms")) stats_row(b, "Inference latency per batch", md_hj_get(inf, "latency_ms"));
        if (md_hj_get(inf, "per_sample_ms")) stats_row(b, "Inference latency per sample", md_hj_get(inf, "per_sample_ms"));
        if (md_hj_get(tr, "step_ms")) stats_row(b, "Training step", md_hj_get(tr, "step_ms"));
        md_html_table_end(b);
    }
    const cJSON *split = md_hj_get(tr, "split_ms");
    double fw, bw, op;
    if (md_hj_num(split, "forward", &fw) && md_hj_num(split, "backward", &bw) && md_hj_num(split, "optimizer", &op)) {
        char a[32], c[32], d[32];
        md_strbuf_printf(b, "<p class=\"fig\">A training step: forward %s, backward %s, optimizer %s (means",
                         md_html_fmt_ms(fw, a, sizeof a), md_html_fmt_ms(bw, c, sizeof c), md_html_fmt_ms(op, d, sizeof d));
        if (md_hj_str(split, "measured_on")) {
            md_strbuf_add(b, ", measured on ");
            md_strbuf_add_escaped(b, md_hj_str(split, "measured_on"));
        }
        md_strbuf_add(b, ").</p>\n");
    }
    layer_kinds_table(b, md_hj_get(tr, "layer_kinds"));
    md_strbuf_add(b, "<div class=\"charts\">\n");
    const cJSON *samples = md_hj_get(inf, "samples_ms");
    int n = cJSON_IsArray(samples) ? cJSON_GetArraySize(samples) : 0;
    if (n > 0) {
        double *vals = md_malloc(sizeof(double) * (size_t)n);
        if (vals) {
            int i = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, samples) vals[i++] = cJSON_IsNumber(e) ? e->valuedouble : (double)NAN;
            double bs = 0;
            char cap[128];
            if (md_hj_num(inf, "batch_size", &bs)) snprintf(cap, sizeof cap, "%d timed inference batches of %.0f samples.", n, bs);
            else snprintf(cap, sizeof cap, "%d timed inference batches.", n);
            md_html_histogram(b, "Inference latency histogram", vals, n, md_hj_get(inf, "latency_ms"), cap);
            md_free(vals);
        }
    }
    md_strbuf_add(b, "</div>\n");
    /* the batch finder's answer beside the sweep's chart */
    char fb[240];
    const cJSON *sweep = md_hj_get(bench, "sweep");
    int have_sweep = cJSON_IsArray(sweep) && cJSON_GetArraySize(sweep) > 0;
    int have_fb = batch_finder_sentence(bench, fb, sizeof fb);
    if (have_sweep || have_fb) {
        md_html_heading(b, "Batch size");
        md_strbuf_add(b, "<div class=\"charts\">\n");
        if (have_sweep) md_html_sweep_chart(b, sweep);
        md_strbuf_add(b, "<div class=\"side\">");
        if (have_fb) md_html_callout(b, MD_HTML_INFO, NULL, fb);
        const cJSON *tried = md_hj_get(md_hj_get(bench, "find_batch_size"), "tried");
        if (cJSON_IsArray(tried) && cJSON_GetArraySize(tried) > 0) {
            md_html_table_begin(b, "rec tried", (const char *const[]){"Batch tried", "Fits", "Samples/s", NULL});
            const cJSON *e;
            cJSON_ArrayForEach(e, tried)
            {
                double bs = 0, sps;
                char a[32], c[32];
                md_hj_num(e, "batch_size", &bs);
                md_html_table_row_begin(b, md_html_fmt_num(bs, a, sizeof a));
                md_html_table_cell(b, cJSON_IsTrue(md_hj_get(e, "fits")) ? "yes" : "no (out of memory)");
                md_html_table_cell(b, md_hj_num(e, "samples_per_s", &sps) ? md_html_fmt_num(round(sps), c, sizeof c) : NULL);
                md_html_table_row_end(b);
            }
            md_html_table_end(b);
            md_html_para(b, "Each batch is tried once, briefly: the sweep, when run, ranks them by throughput.");
        }
        md_strbuf_add(b, "</div></div>\n");
    }
    md_strbuf_add(b, "<div class=\"charts\">\n");
    const cJSON *devs = md_hj_get(bench, "devices");
    if (cJSON_IsArray(devs) && cJSON_GetArraySize(devs) > 0)
        md_html_hbars(b, "Device comparison: training throughput", devs, "device", "samples_per_s", "speedup_vs_cpu", "samples/s", 0,
                      "Same model, batch and data on every available device; x = speed-up over the CPU.");
    const cJSON *abl = md_hj_get(bench, "ablations");
    if (cJSON_IsArray(abl) && cJSON_GetArraySize(abl) > 0)
        md_html_hbars(b, "Ablations: speed-up of each setting when on", abl, "feature", "speedup", NULL, "x", 1.0,
                      "Training samples/s with the setting on divided by samples/s with it off (1 = no difference).");
    md_strbuf_add(b, "</div>\n");
    static const char *const skip[] = {"samples_ms", NULL};
    md_strbuf_add(b, "<details><summary>All benchmark figures</summary>\n");
    md_html_kv(b, bench, skip);
    md_strbuf_add(b, "</details>\n");
    md_html_section_end(b);
}

static void memory_section(md_strbuf *b, const cJSON *r)
{
    md_html_section_begin(b, "memory", "Memory");
    const cJSON *bm = md_hj_get(md_hj_get(r, "benchmark"), "memory");
    md_html_memory_bar(b, bm);
    double tp, pp;
    char a[32], c[32];
    if (training_peak(r, &tp)) {
        md_strbuf_printf(b, "<p class=\"fig\">Peak device memory of training: <b>%s</b>", md_fmt_bytes(tp, a, sizeof a));
        if (md_hj_num(md_hj_get(r, "memory"), "device_peak_bytes", &pp) && pp > tp * 1.05)
            md_strbuf_printf(b, ". The whole run peaked at %s, batch-size probing and evaluation included",
                             md_fmt_bytes(pp, c, sizeof c));
        md_strbuf_add(b, ".</p>\n");
    }
    md_html_kv(b, md_hj_get(r, "memory"), NULL);
    md_html_section_end(b);
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
    md_html_section_begin(b, id, title);
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
    md_html_section_end(b);
}

static void recommendation_item(md_strbuf *b, const cJSON *e)
{
    const char *topic = md_hj_str(e, "topic");
    if (topic) {
        char t[160];
        md_html_wrap(b, "<b>", md_html_label(topic, t, sizeof t), ":</b> ");
    }
    md_strbuf_add_escaped(b, md_hj_str(e, "advice"));
    add_tagged(b, "<br><span class=\"fig\">measured: ", md_hj_str(e, "figure"), "</span>");
    add_tagged(b, " <span class=\"tag\">", md_hj_str(e, "source"), "</span>");
}

static void warning_item(md_strbuf *b, const cJSON *e) { md_strbuf_add_escaped(b, md_hj_str(e, "message")); }

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
    cJSON_ArrayForEach(m, md_hj_get(r, "models"))
    {
        const char *t = md_hj_str(md_hj_get(m, "training"), "task");
        if (!t) t = md_hj_str(md_hj_get(m, "data"), "task");
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
    cJSON_ArrayForEach(row, rows) all_null &= !md_hj_get(row, "val_accuracy") || cJSON_IsNull(md_hj_get(row, "val_accuracy"));
    if (all_null) cJSON_ArrayForEach(row, rows) cJSON_DeleteItemFromObjectCaseSensitive(row, "val_accuracy");
    if (cJSON_IsNull(md_hj_get(c, "most_accurate"))) cJSON_DeleteItemFromObjectCaseSensitive(c, "most_accurate");
    return c;
}

/* Generic sections: an object as a labelled table, anything else as a value. */
static void generic_section(md_strbuf *b, const cJSON *r, const char *id, const char *title)
{
    const cJSON *v = md_hj_get(r, id);
    md_html_section_begin(b, id, title);
    if (cJSON_IsObject(v)) md_html_kv(b, v, NULL);
    else if (cJSON_IsArray(v)) md_html_records(b, v);
    else md_html_value(b, id, v);
    md_html_section_end(b);
}

/* report.run: the command line as typed, the full configuration folded. */
static void run_section(md_strbuf *b, const cJSON *run)
{
    md_html_section_begin(b, "run", "Run");
    const cJSON *cl = md_hj_get(run, "command_line"), *e;
    if (cJSON_IsArray(cl)) {
        md_strbuf_add(b, "<p class=\"fig\">Command line: <code>");
        int i = 0;
        cJSON_ArrayForEach(e, cl)
        {
            if (!cJSON_IsString(e)) continue;
            if (i++) md_strbuf_add(b, " ");
            md_strbuf_add_escaped(b, e->valuestring);
        }
        md_strbuf_add(b, "</code></p>\n");
    }
    static const char *const skip[] = {"command_line", "config", NULL};
    md_html_kv(b, run, skip);
    if (cJSON_IsObject(md_hj_get(run, "config"))) {
        md_strbuf_add(b, "<details><summary>Full configuration</summary>\n");
        md_html_kv(b, md_hj_get(run, "config"), NULL);
        md_strbuf_add(b, "</details>\n");
    }
    md_html_section_end(b);
}

static void other_sections(md_strbuf *b, const cJSON *r)
{
    static const char *const known[] = {"schema_version", "tool", "started_at", "system", "devices", "selected_device",
                                        "settings", "model", "data", "training", "benchmark", "profile", "memory",
                                        "recommendations", "warnings", "status", "duration_s", "folds", "run", "fallback", NULL};
    const cJSON *f;
    int other = 0;
    cJSON_ArrayForEach(f, r)
    {
        int k = 0;
        for (const char *const *s = known; *s; s++) k |= strcmp(*s, f->string) == 0;
        k |= md_html_models_key(r, f->string);
        k |= md_html_doctor_key(f->string);
        if (k) continue;
        if (!other++) md_html_section_begin(b, "other", "Other");
        char lab[160];
        md_html_heading(b, md_html_label(f->string, lab, sizeof lab));
        if (strcmp(f->string, "comparison") == 0 && all_models_regression(r)) {
            cJSON *cmp = regression_comparison(f);
            md_html_value(b, f->string, cmp ? cmp : f);
            cJSON_Delete(cmp);
        } else {
            md_html_value(b, f->string, f);
        }
    }
    if (other) md_html_section_end(b);
}

static const char css[] =
    "body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0;color:#222;background:#f6f7f9}"
    "header,section,nav{max-width:1200px;margin:0 auto;padding:12px 20px;box-sizing:border-box}"
    "header{background:#fff;border-bottom:1px solid #ddd}"
    "h1{margin:4px 0;font-size:26px}h2{border-bottom:2px solid #1f77b4;padding-bottom:4px;font-size:20px;margin:6px 0 10px}"
    "h3{font-size:16px;margin:16px 0 6px}"
    "section{background:#fff;margin-top:14px;border:1px solid #e2e2e2;border-radius:6px;overflow-x:auto}"
    "section#summary{border:2px solid #1f77b4}"
    "nav a{margin-right:12px;color:#1f5f99;text-decoration:none;font-size:14px}"
    ".meta{color:#666;margin:2px 0}"
    ".status{padding:6px 10px;border-radius:4px;margin:6px 0}.good{background:#e7f5e7}.badbox{background:#fde8e8}"
    ".callout{border-left:5px solid #1f77b4;background:#eef5fc;padding:8px 12px;margin:8px 0;border-radius:3px;"
    "font-size:14px;max-width:1000px}"
    ".callout.good{border-color:#2ca02c;background:#eaf6ea}.callout.warn{border-color:#e08a00;background:#fff4e0}"
    ".callout.bad{border-color:#d62728;background:#fde8e8}"
    ".cards{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0}"
    ".card{background:#f0f5fb;border:1px solid #cfe0f0;border-radius:6px;padding:8px 14px;font-size:12px;color:#555;"
    "max-width:220px}"
    ".card span{display:block;font-size:22px;color:#123;font-weight:600}"
    "table{border-collapse:collapse;margin:6px 0;font-size:13px}"
    "th,td{border:1px solid #e0e0e0;padding:3px 8px;text-align:left;vertical-align:top}"
    "table.kv>tbody>tr>th{background:#fafafa;font-weight:600;white-space:nowrap}"
    "table.sum{font-size:14px}table.sum td{max-width:900px}"
    "table.rec thead th{background:#eef3f8}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    ".bar{display:inline-block;width:120px;height:10px;background:#eee;margin-right:6px;vertical-align:middle}"
    ".bar span{display:block;height:10px;background:#1f77b4}.badbar span{background:#e08a00}"
    ".charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}figure{margin:6px 0}"
    ".side{max-width:480px}"
    "figcaption{font-size:12px;color:#555;max-width:560px}"
    "svg.chart{border:1px solid #e5e5e5;background:#fff;max-width:100%;height:auto}"
    "svg text{font-family:inherit;font-size:11px;fill:#333}svg text.ttl{font-size:14px;font-weight:600}"
    "svg text.axl{font-size:12px}svg text.oom{fill:#d62728;font-weight:700}"
    ".dim{color:#999}.bad{color:#b00}.fig{color:#555;font-size:13px;max-width:1000px}"
    ".tag{font-size:11px;background:#eee;border-radius:3px;padding:1px 5px;color:#555}"
    "ol.recs li,ul.warn li{margin:6px 0}ul.warn li{color:#8a4b00}"
    "details{margin:10px 0}summary{cursor:pointer;color:#1f5f99;font-size:14px}"
    "code{font-size:12px}.k{color:#666;font-size:12px}.flat{font-size:13px}";

/* Something worth a summary: a device, a model, training or a benchmark. */
static int has_summary(const cJSON *r)
{
    return md_hj_get(r, "selected_device") || md_hj_get(r, "model") || md_hj_get(r, "training") ||
           md_hj_get(r, "benchmark");
}

md_status md_html_render(const cJSON *r, char **out, size_t *len)
{
    md_strbuf b;
    md_strbuf_init(&b);
    md_strbuf_add(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>mpsdiag report");
    const cJSON *sel = md_hj_get(r, "selected_device");
    if (md_hj_str(sel, "name")) {
        md_strbuf_add(&b, ": ");
        md_strbuf_add_escaped(&b, md_hj_str(sel, "name"));
    }
    md_strbuf_add(&b, "</title>\n<style>");
    md_strbuf_add(&b, css);
    md_strbuf_add(&b, "</style>\n</head>\n<body>\n");
    struct findings fs;
    collect_findings(r, &fs);
    header(&b, r);
    int summary = has_summary(r);
    nav(&b, r, summary);
    if (summary) summary_section(&b, r, &fs);
    if (md_hj_get(r, "system")) generic_section(&b, r, "system", "System");
    if (cJSON_IsArray(md_hj_get(r, "devices"))) generic_section(&b, r, "devices", "Devices");
    if (cJSON_IsArray(md_hj_get(r, "settings"))) settings_section(&b, md_hj_get(r, "settings"));
    md_html_models(&b, r); /* the diagnostics run: comparison and per-model sections */
    if (md_hj_get(r, "model")) generic_section(&b, r, "model", "Model");
    if (md_hj_get(r, "data")) generic_section(&b, r, "data", "Data");
    if (cJSON_IsObject(md_hj_get(r, "run"))) run_section(&b, md_hj_get(r, "run"));
    if (md_hj_get(r, "training")) training_section(&b, md_hj_get(r, "training"), &fs);
    if (cJSON_IsObject(md_hj_get(r, "folds"))) folds_section(&b, md_hj_get(r, "folds"));
    if (md_hj_get(r, "benchmark")) benchmark_section(&b, md_hj_get(r, "benchmark"), &fs);
    if (cJSON_IsObject(md_hj_get(r, "profile"))) md_html_profile(&b, md_hj_get(r, "profile"));
    md_html_doctor(&b, r); /* --check, --precision-audit */
    if (md_hj_get(r, "memory") || md_hj_get(md_hj_get(r, "benchmark"), "memory")) memory_section(&b, r);
    if (cJSON_IsObject(md_hj_get(r, "fallback"))) generic_section(&b, r, "fallback", "Operations run on the CPU (fallback)");
    if (cJSON_IsArray(md_hj_get(r, "recommendations"))) recommendations_section(&b, md_hj_get(r, "recommendations"));
    if (cJSON_IsArray(md_hj_get(r, "warnings"))) warnings_section(&b, md_hj_get(r, "warnings"));
    other_sections(&b, r);
    md_strbuf_add(&b, "<footer><p class=\"meta\" style=\"max-width:1200px;margin:10px auto;padding:0 20px\">"
                      "Written by mpsdiag from the same figures as the JSON report (report format version ");
    double sv = 0;
    md_hj_num(r, "schema_version", &sv);
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
