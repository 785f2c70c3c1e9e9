/* html_doctor.c - the doctor's sections of the HTML report (html_doctor.h):
 * one row per layer, the failures first in words. */
#include "diag/html_doctor.h"

#include <stdio.h>
#include <string.h>

#include "diag/html_util.h"

int md_html_doctor_key(const char *key)
{
    return strcmp(key, "check") == 0 || strcmp(key, "precision_audit") == 0;
}

/* "1.2e-05", "0", "-" (absent), "inf" (null: not finite). */
static const char *rel(const cJSON *o, const char *key, char *buf, size_t n)
{
    const cJSON *v = md_hj_get(o, key);
    if (!o || cJSON_IsNull(o)) snprintf(buf, n, "-");
    else if (cJSON_IsNull(v)) snprintf(buf, n, "inf");
    else if (!cJSON_IsNumber(v)) snprintf(buf, n, "-");
    else if (v->valuedouble == 0) snprintf(buf, n, "0");
    else snprintf(buf, n, "%.1e", v->valuedouble);
    return buf;
}

static double num(const cJSON *o, const char *key)
{
    double v = 0;
    md_hj_num(o, key, &v);
    return v;
}

/* A half type's relative L2 error, or "NaN/Inf" when its output has them. */
static const char *half_err(const cJSON *c, char *buf, size_t n)
{
    if (num(c, "nan") + num(c, "inf") > 0) {
        snprintf(buf, n, "NaN/Inf");
        return buf;
    }
    return rel(c, "rel_l2", buf, n);
}

static void failure(md_strbuf *b, const char *name, const char *what, const cJSON *c)
{
    if (!cJSON_IsObject(c) || !cJSON_IsFalse(md_hj_get(c, "ok"))) return;
    md_html_calloutf(b, MD_HTML_BAD, name, "%s differs first at element %.0f: device %.6g, reference %.6g; "
                     "max |difference| %.3g above the tolerance %.3g; NaN %.0f, Inf %.0f.", what,
                     num(c, "first_index"), num(c, "device_value"), num(c, "reference_value"), num(c, "max_abs"),
                     num(c, "tolerance"), num(c, "nan"), num(c, "inf"));
}

static void check_section(md_strbuf *b, const cJSON *ck)
{
    char v[64], w[64], x[64];
    md_html_section_begin(b, "check", "Check: the device against the reference");
    int passed = cJSON_IsTrue(md_hj_get(ck, "passed"));
    md_html_cards_begin(b);
    md_html_card(b, passed ? "passed" : "FAILED", "result");
    md_html_card(b, md_hj_str(ck, "precision") ? md_hj_str(ck, "precision") : "", "precision");
    snprintf(v, sizeof v, "%.0e", num(ck, "rtol"));
    md_html_card(b, v, "tolerance (x max |reference|)");
    snprintf(v, sizeof v, "%.0f", num(ck, "failed_layers") + num(ck, "failed_params"));
    md_html_card(b, v, "tensors beyond it");
    md_html_cards_end(b);
    md_html_para(b, "One batch forward and backward on the device and on the reference backend (fp32), each layer "
                    "fed the same inputs and output gradient: the errors are the layer's own.");
    const cJSON *L;
    cJSON_ArrayForEach(L, md_hj_get(ck, "layers"))
    {
        failure(b, md_hj_str(L, "name"), "Output", md_hj_get(L, "output"));
        failure(b, md_hj_str(L, "name"), "Input gradient", md_hj_get(L, "input_grad"));
    }
    const cJSON *p;
    cJSON_ArrayForEach(p, md_hj_get(ck, "params")) failure(b, md_hj_str(p, "name"), "Gradient", p);
    static const char *const h[] = {"layer", "type", "output error", "gradient error", "NaN/Inf", "ran",
                                    "forward", "backward", "activation", "", NULL};
    md_html_table_begin(b, "rec", h);
    cJSON_ArrayForEach(L, md_hj_get(ck, "layers"))
    {
        const cJSON *y = md_hj_get(L, "output"), *g = md_hj_get(L, "input_grad");
        md_html_table_row_begin(b, md_hj_str(L, "name"));
        md_html_table_cell(b, md_hj_str(L, "type"));
        md_html_table_cell(b, rel(y, "max_rel", v, sizeof v));
        md_html_table_cell(b, rel(g, "max_rel", w, sizeof w));
        snprintf(x, sizeof x, "%.0f", num(y, "nan") + num(y, "inf") + num(g, "nan") + num(g, "inf"));
        md_html_table_cell(b, x);
        md_html_table_cell(b, md_hj_str(L, "ran"));
        md_html_table_cell(b, md_html_fmt_ms(num(L, "forward_ms"), v, sizeof v));
        md_html_table_cell(b, md_html_fmt_ms(num(L, "backward_ms"), w, sizeof w));
        md_html_table_cell(b, md_html_fmt_bytes(num(L, "activation_bytes"), x, sizeof x));
        md_html_table_cell(b, cJSON_IsTrue(md_hj_get(L, "ok")) ? "ok" : "FAIL");
        md_html_table_row_end(b);
    }
    md_html_table_end(b);
    md_html_section_end(b);
}

static void audit_section(md_strbuf *b, const cJSON *au)
{
    char v[64], w[64], x[64], y[64];
    md_html_section_begin(b, "precision_audit", "Precision audit: fp16 and bf16 against fp32");
    const cJSON *plan = md_hj_get(au, "plan"), *g = md_hj_get(au, "gradients");
    md_html_calloutf(b, MD_HTML_INFO, "Plan", "%s, initial loss scale %g. %s", md_hj_str(plan, "precision"),
                     num(plan, "loss_scale"), md_hj_str(plan, "why") ? md_hj_str(plan, "why") : "");
    md_html_calloutf(b, cJSON_IsTrue(md_hj_get(g, "fits_fp16")) ? MD_HTML_GOOD : MD_HTML_WARN, "Gradients",
                     "largest %.3g, smallest significant %.3g: fp16 needs a loss scale between %g and %g.",
                     num(g, "max_abs"), num(g, "small_abs"), num(g, "loss_scale_min"), num(g, "loss_scale_max"));
    static const char *const h[] = {"layer", "type", "max |y| (fp32)", "above 65504", "flushed to 0",
                                    "fp16 error", "bf16 error", "keep fp32", NULL};
    md_html_table_begin(b, "rec", h);
    const cJSON *L;
    cJSON_ArrayForEach(L, md_hj_get(au, "layers"))
    {
        const cJSON *f = md_hj_get(L, "fp32");
        md_html_table_row_begin(b, md_hj_str(L, "name"));
        md_html_table_cell(b, md_hj_str(L, "type"));
        snprintf(v, sizeof v, "%.3g", num(f, "max_abs"));
        md_html_table_cell(b, v);
        snprintf(w, sizeof w, "%.0f", num(f, "overflow_fp16"));
        md_html_table_cell(b, w);
        snprintf(x, sizeof x, "%.0f", num(f, "flush_to_zero_fp16"));
        md_html_table_cell(b, x);
        md_html_table_cell(b, half_err(md_hj_get(md_hj_get(L, "fp16"), "output"), y, sizeof y));
        md_html_table_cell(b, half_err(md_hj_get(md_hj_get(L, "bf16"), "output"), v, sizeof v));
        md_html_table_cell(b, md_hj_str(L, "why") ? md_hj_str(L, "why") : "");
        md_html_table_row_end(b);
    }
    md_html_table_end(b);
    md_html_section_end(b);
}

void md_html_doctor(md_strbuf *b, const cJSON *r)
{
    if (cJSON_IsObject(md_hj_get(r, "check"))) check_section(b, md_hj_get(r, "check"));
    if (cJSON_IsObject(md_hj_get(r, "precision_audit"))) audit_section(b, md_hj_get(r, "precision_audit"));
}
