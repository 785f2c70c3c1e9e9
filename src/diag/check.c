/* check.c - the doctor's --check and --precision-audit (check.h,
 * docs/doctor.md).
 *
 * Both run one training step of freshly loaded copies of the model with
 * compile off, capturing every layer's output and input gradients
 * (md_model_capture_begin), and compare the copies tensor by tensor:
 *   --check            the device in the run's precision against the
 *                      reference backend in fp32;
 *   --precision-audit  fp16 and bf16 against fp32 on the same device.
 * The copies get the same weights (host copies) and the same inputs:
 * seeded N(0, 1) values (times input_scale) in the model's input shapes,
 * seeded labels (classification) or targets (regression, MSE). */
#include "diag/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"

#define FP16_MAX 65504.0
#define FP16_MIN_NORMAL 6.103515625e-05 /* 2^-14 */
#define FP16_MIN_SUB 5.9604644775390625e-08 /* 2^-24 */

double md_check_rtol(md_dtype dt, int tf32)
{
    if (dt == MD_F16) return 2e-2;
    if (dt == MD_BF16) return 1e-1;
    return tf32 ? 1e-2 : 1e-3;
}

/* ---- one step ------------------------------------------------------------------ */

/* A bound copy of the model and the host inputs of its step. */
struct step {
    md_model *m;
    int nlayers;
    float *grads;      /* (nparams) parameter gradients after the step, PyTorch order */
    double loss;       /* batch mean (unscaled) */
};

static md_status load_bound(const struct md_check_opts *o, md_dtype dt, md_device *dev, md_model **out)
{
    struct md_model_opts mo = o->mopts;
    mo.compile = 0;
    mo.grad_ckpt = 0;
    mo.compute_dtype = dt;
    MD_TRY(md_model_load(o->model, o->inline_model, &mo, out));
    md_status st = md_model_bind(*out, dev, o->batch);
    if (st != MD_OK) {
        md_model_free(*out);
        *out = NULL;
    }
    return st;
}

/* Elements of input i for the batch. */
static size_t input_numel(const md_model *m, int i, int batch)
{
    int c, h, w;
    md_model_input_shape(m, i, &c, &h, &w);
    return (size_t)batch * (size_t)c * (size_t)h * (size_t)w;
}

/* Runs the step on s->m with weights `params` (host, PyTorch order), every
 * layer captured; loss_scale multiplies the loss gradient (the captured input
 * gradients and the parameter gradients are divided by it again). */
static md_status run_step(const struct md_check_opts *o, struct step *s, const float *params, double loss_scale,
                          const md_model *feed)
{
    md_model *m = s->m;
    md_device *dev = md_model_device(m);
    int b = o->batch;
    md_status st = MD_OK;
    float *host = NULL, *target_dev = NULL, *loss_dev = NULL;
    int32_t *labels = NULL, *labels_dev = NULL;
    size_t most = 0;
    for (int i = 0; i < md_model_num_inputs(m); i++)
        if (input_numel(m, i, b) > most) most = input_numel(m, i, b);
    int c, h, w;
    md_model_output_shape(m, &c, &h, &w);
    size_t per = (size_t)c * (size_t)h * (size_t)w, nt = (size_t)b * per;
    if (nt > most) most = nt;
    host = md_malloc(most * sizeof *host + 4);
    labels = md_malloc((size_t)b * sizeof *labels);
    if (!host || !labels) { st = md_errf(MD_ERR_OOM, "--check: out of host memory"); goto done; }
    if ((st = md_model_set_params_host(m, params)) != MD_OK) goto done;
    for (int i = 0; i < md_model_num_inputs(m); i++) {
        md_rng r;
        md_rng_init(&r, o->seed * 1000003u + (uint64_t)i + 1);
        size_t n = input_numel(m, i, b);
        for (size_t e = 0; e < n; e++) host[e] = (float)(md_rng_normal(&r) * o->input_scale);
        if ((st = md_dev_upload(dev, md_model_input_buffer(m, i), host, n * sizeof *host)) != MD_OK) goto done;
        if ((st = md_dev_sync(dev)) != MD_OK) goto done;
    }
    if ((st = md_dev_alloc(dev, sizeof(float), (void **)&loss_dev, "check loss")) != MD_OK) goto done;
    if ((st = md_dev_memset0(dev, loss_dev, sizeof(float))) != MD_OK) goto done;
    md_model_set_step(m, 0);
    if ((st = md_model_capture_begin(m, feed)) != MD_OK) goto done;
    if ((st = md_model_forward(m, b, 1)) != MD_OK) goto done;
    md_rng r;
    md_rng_init(&r, o->seed * 7919u + 17);
    if (md_model_is_regression(m)) {
        for (size_t e = 0; e < nt; e++) host[e] = (float)md_rng_normal(&r);
        if ((st = md_dev_alloc(dev, nt * sizeof(float), (void **)&target_dev, "check targets")) != MD_OK) goto done;
        if ((st = md_dev_upload(dev, target_dev, host, nt * sizeof(float))) != MD_OK) goto done;
        st = md_model_regress_loss(m, target_dev, 1, (int)per, MD_REGRESS_MSE, 1.0f, 0.0f, NULL, 0,
                                   (float)(loss_scale / (double)nt), loss_dev, NULL);
    } else {
        int k = md_model_num_classes(m);
        for (int i = 0; i < b; i++) labels[i] = (int32_t)md_rng_below(&r, (uint32_t)(k > 0 ? k : 1));
        if ((st = md_dev_alloc(dev, (size_t)b * sizeof(int32_t), (void **)&labels_dev, "check labels")) != MD_OK)
            goto done;
        if ((st = md_dev_upload(dev, labels_dev, labels, (size_t)b * sizeof(int32_t))) != MD_OK) goto done;
        st = md_model_loss(m, labels_dev, 0.0f, (float)(loss_scale / b), loss_dev, NULL);
    }
    if (st != MD_OK) goto done;
    if ((st = md_model_backward(m)) != MD_OK) goto done;
    float loss = 0;
    if ((st = md_dev_download(dev, &loss, loss_dev, sizeof loss)) != MD_OK) goto done;
    s->loss = (double)loss / (md_model_is_regression(m) ? (double)nt : (double)b);
    s->grads = md_malloc(md_model_nparams(m) * sizeof *s->grads + 4);
    if (!s->grads) { st = md_errf(MD_ERR_OOM, "--check: out of host memory"); goto done; }
    if ((st = md_model_get_grads_host(m, s->grads)) != MD_OK) goto done;
done:
    md_dev_free(dev, loss_dev);
    md_dev_free(dev, target_dev);
    md_dev_free(dev, labels_dev);
    md_free(host);
    md_free(labels);
    return st;
}

/* Divides the captured input gradients and the parameter gradients of a
 * step run with loss scale `scale` by it (after any model it fed has run). */
static void unscale(struct step *s, double scale)
{
    if (scale == 1.0 || !s->m) return;
    for (size_t e = 0; s->grads && e < md_model_nparams(s->m); e++) s->grads[e] = (float)((double)s->grads[e] / scale);
    for (int i = 0; i < md_model_num_layers(s->m); i++) {
        const struct md_layer_capture *cp = md_model_capture_layer(s->m, i);
        for (size_t e = 0; e < cp->ndx; e++) cp->dx[e] = (float)((double)cp->dx[e] / scale);
    }
}

static void step_free(struct step *s)
{
    if (s->m) md_model_capture_end(s->m);
    md_model_free(s->m);
    md_free(s->grads);
    memset(s, 0, sizeof *s);
}

/* ---- comparison ------------------------------------------------------------------ */

struct cmp {
    double max_abs, scale, rel, tol;
    double rel_l2;             /* ||x - r|| / ||r|| over the finite pairs: robust to a few moved elements */
    long long nan, inf, first; /* first: the first element beyond the tolerance, -1 if none */
    double got, want;          /* the values at `first` */
};

static void compare(const float *x, const float *r, size_t n, double rtol, struct cmp *c)
{
    memset(c, 0, sizeof *c);
    c->first = -1;
    for (size_t e = 0; e < n; e++)
        if (isfinite(r[e]) && fabs((double)r[e]) > c->scale) c->scale = fabs((double)r[e]);
    c->tol = rtol * c->scale;
    double sd = 0, sr = 0;
    for (size_t e = 0; e < n; e++) {
        double xv = (double)x[e], rv = (double)r[e];
        if (isfinite(xv) && isfinite(rv)) {
            sd += (xv - rv) * (xv - rv);
            sr += rv * rv;
        }
        if (isnan(xv)) c->nan++;
        else if (isinf(xv)) c->inf++;
        int bad;
        if (!isfinite(xv) || !isfinite(rv)) {
            bad = !(isnan(xv) && isnan(rv)) && !(xv == rv);
        } else {
            double d = fabs(xv - rv);
            if (d > c->max_abs) c->max_abs = d;
            bad = d > c->tol;
        }
        if (bad && c->first < 0) {
            c->first = (long long)e;
            c->got = xv;
            c->want = rv;
        }
    }
    c->rel = c->scale > 0 ? c->max_abs / c->scale : (c->max_abs > 0 ? (double)INFINITY : 0.0);
    c->rel_l2 = sr > 0 ? sqrt(sd / sr) : (sd > 0 ? (double)INFINITY : 0.0);
}

/* A JSON number (null for NaN or infinity, which JSON cannot hold). */
static void add_num(cJSON *o, const char *key, double v)
{
    if (isfinite(v)) cJSON_AddNumberToObject(o, key, v);
    else cJSON_AddNullToObject(o, key);
}

static cJSON *cmp_json(const struct cmp *c)
{
    cJSON *o = cJSON_CreateObject();
    add_num(o, "max_abs", c->max_abs);
    add_num(o, "scale", c->scale);
    add_num(o, "max_rel", c->rel);
    add_num(o, "rel_l2", c->rel_l2);
    add_num(o, "tolerance", c->tol);
    cJSON_AddNumberToObject(o, "nan", (double)c->nan);
    cJSON_AddNumberToObject(o, "inf", (double)c->inf);
    cJSON_AddBoolToObject(o, "ok", c->first < 0);
    if (c->first >= 0) {
        cJSON_AddNumberToObject(o, "first_index", (double)c->first);
        add_num(o, "device_value", c->got);
        add_num(o, "reference_value", c->want);
    }
    return o;
}

/* ---- --check ---------------------------------------------------------------------- */

md_status md_check_run(const struct md_check_opts *o, md_device *dev, md_device *ref, cJSON **out, int *failed)
{
    md_status st = MD_OK;
    struct step a = {0}, r = {0};
    float *params = NULL;
    cJSON *ck = NULL;
    *out = NULL;
    *failed = 0;
    md_dtype dt = o->mopts.compute_dtype;
    double rtol = md_check_rtol(dt, o->tf32 && dt == MD_F32);
    if ((st = load_bound(o, dt, dev, &a.m)) != MD_OK) goto done;
    if ((st = load_bound(o, MD_F32, ref, &r.m)) != MD_OK) goto done;
    params = md_malloc(md_model_nparams(a.m) * sizeof *params + 4);
    if (!params) { st = md_errf(MD_ERR_OOM, "--check: out of host memory"); goto done; }
    if ((st = md_model_get_params_host(a.m, params)) != MD_OK) goto done;
    if ((st = run_step(o, &a, params, 1.0, NULL)) != MD_OK) goto done;
    if ((st = run_step(o, &r, params, 1.0, a.m)) != MD_OK) {
        md_err_prefix("reference");
        goto done;
    }
    ck = cJSON_CreateObject();
    cJSON_AddStringToObject(ck, "model", md_model_name(a.m));
    cJSON_AddStringToObject(ck, "device", md_device_get_info(dev)->backend);
    cJSON_AddStringToObject(ck, "reference", "ref");
    cJSON_AddStringToObject(ck, "precision", md_dtype_name(dt));
    cJSON_AddBoolToObject(ck, "tf32", o->tf32 && dt == MD_F32);
    cJSON_AddStringToObject(ck, "layout", md_layout_name(md_model_get_opts(a.m)->layout));
    cJSON_AddNumberToObject(ck, "batch", o->batch);
    cJSON_AddNumberToObject(ck, "seed", (double)o->seed);
    cJSON_AddNumberToObject(ck, "input_scale", o->input_scale);
    cJSON_AddNumberToObject(ck, "rtol", rtol);
    add_num(ck, "loss", a.loss);
    add_num(ck, "reference_loss", r.loss);
    cJSON *layers = cJSON_AddArrayToObject(ck, "layers");
    int nfail = 0, pfail = 0;
    const char *first_fail = NULL;
    for (int i = 0; i < md_model_num_layers(a.m); i++) {
        const struct md_layer_capture *ca = md_model_capture_layer(a.m, i), *cr = md_model_capture_layer(r.m, i);
        if (!ca->ran) continue; /* a view of another layer's output */
        if (ca->ny != cr->ny || ca->ndx != cr->ndx) {
            st = md_errf(MD_ERR_INTERNAL, "--check: layer %s has %zu outputs on the device, %zu on the reference",
                         md_model_layer_name(a.m, i), ca->ny, cr->ny);
            goto done;
        }
        cJSON *L = cJSON_CreateObject();
        cJSON_AddStringToObject(L, "name", md_model_layer_name(a.m, i));
        cJSON_AddStringToObject(L, "type", md_model_layer_type(a.m, i));
        long long fb = ca->fallback_fwd + ca->fallback_bwd;
        cJSON_AddStringToObject(L, "ran", fb ? "fallback" : "native");
        cJSON_AddNumberToObject(L, "fallback_calls", (double)fb);
        cJSON_AddNumberToObject(L, "forward_ms", ca->fwd_ms);
        cJSON_AddNumberToObject(L, "backward_ms", ca->bwd_ms);
        cJSON_AddNumberToObject(L, "activation_bytes", (double)ca->act_bytes);
        struct cmp cy, cg;
        compare(ca->y, cr->y, ca->ny, rtol, &cy);
        cJSON_AddItemToObject(L, "output", cmp_json(&cy));
        int ok = cy.first < 0;
        if (ca->ndx) {
            compare(ca->dx, cr->dx, ca->ndx, rtol, &cg);
            cJSON_AddItemToObject(L, "input_grad", cmp_json(&cg));
            ok = ok && cg.first < 0;
        } else {
            cJSON_AddNullToObject(L, "input_grad");
        }
        cJSON_AddBoolToObject(L, "ok", ok);
        if (!ok && !nfail++) first_fail = md_model_layer_name(a.m, i);
        cJSON_AddItemToArray(layers, L);
    }
    cJSON *params_j = cJSON_AddArrayToObject(ck, "params");
    for (int t = 0; t < md_model_num_tensors(a.m); t++) {
        const struct md_param_info *ti = md_model_tensor(a.m, t);
        struct cmp c;
        compare(a.grads + ti->offset, r.grads + ti->offset, ti->numel, rtol, &c);
        cJSON *p = cmp_json(&c);
        cJSON_AddItemToObject(p, "name", cJSON_CreateString(ti->name));
        cJSON_AddItemToArray(params_j, p);
        if (c.first >= 0) pfail++;
    }
    cJSON_AddNumberToObject(ck, "failed_layers", nfail);
    cJSON_AddNumberToObject(ck, "failed_params", pfail);
    if (first_fail) cJSON_AddStringToObject(ck, "first_failure", first_fail);
    else cJSON_AddNullToObject(ck, "first_failure");
    cJSON_AddBoolToObject(ck, "passed", nfail == 0 && pfail == 0);
    *failed = nfail + pfail;
    *out = ck;
    ck = NULL;
done:
    cJSON_Delete(ck);
    md_free(params);
    step_free(&r); /* fed by a's capture */
    step_free(&a);
    return st;
}

/* "1.2e-05" in at most 8 characters, "-" for null, "inf" beyond. */
static const char *fmt_rel(const cJSON *v, char *buf, size_t n)
{
    if (!cJSON_IsNumber(v)) snprintf(buf, n, cJSON_IsNull(v) ? "inf" : "-");
    else if (v->valuedouble == 0) snprintf(buf, n, "0");
    else snprintf(buf, n, "%.1e", v->valuedouble);
    return buf;
}

static double jnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* At most w bytes of s, an ellipsis-free cut (names are ASCII). */
static const char *cut(const char *s, char *buf, size_t w)
{
    snprintf(buf, w + 1, "%s", s);
    return buf;
}

static void print_failure(const char *layer, const char *what, const cJSON *c)
{
    if (!cJSON_IsObject(c) || !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(c, "ok"))) return;
    char name[48];
    md_out("  FAIL %s %s: first differs at element %.0f: device %.6g, reference %.6g\n", cut(layer, name, 40), what,
           jnum(c, "first_index"), jnum(c, "device_value"), jnum(c, "reference_value"));
    md_out("       max |diff| %.3g > tolerance %.3g; NaN %.0f, Inf %.0f\n", jnum(c, "max_abs"), jnum(c, "tolerance"),
           jnum(c, "nan"), jnum(c, "inf"));
}

void md_check_print(const cJSON *ck)
{
    char b1[40], b2[40], b3[40];
    md_out("  %s on %s (%s, batch %.0f) against the reference (fp32); tolerance %.0e x max |ref|\n",
           jstr(ck, "model"), jstr(ck, "device"), jstr(ck, "precision"), jnum(ck, "batch"), jnum(ck, "rtol"));
    md_out("  inputs: seeded N(0, 1) x %g; each reference layer gets the device layer's inputs and gradient\n",
           jnum(ck, "input_scale"));
    md_out("  %-18s %-10s %8s %8s %7s %-8s %8s %8s %9s\n", "layer", "type", "out rel", "grad rel", "NaN/Inf", "ran",
           "fwd ms", "bwd ms", "act");
    const cJSON *L;
    cJSON_ArrayForEach(L, cJSON_GetObjectItemCaseSensitive(ck, "layers"))
    {
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(L, "output");
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(L, "input_grad");
        double nonfin = jnum(y, "nan") + jnum(y, "inf") + jnum(g, "nan") + jnum(g, "inf");
        double mb = jnum(L, "activation_bytes");
        snprintf(b3, sizeof b3, mb >= 1048576 ? "%.1f MiB" : "%.1f KiB", mb >= 1048576 ? mb / 1048576 : mb / 1024);
        char name[24], type[16];
        md_out("  %-18s %-10s %8s %8s %7.0f %-8s %8.3f %8.3f %9s %s\n", cut(jstr(L, "name"), name, 18),
               cut(jstr(L, "type"), type, 10), fmt_rel(cJSON_GetObjectItemCaseSensitive(y, "max_rel"), b1, sizeof b1),
               cJSON_IsObject(g) ? fmt_rel(cJSON_GetObjectItemCaseSensitive(g, "max_rel"), b2, sizeof b2) : "-",
               nonfin, jstr(L, "ran"), jnum(L, "forward_ms"), jnum(L, "backward_ms"), b3,
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(L, "ok")) ? "ok" : "FAIL");
    }
    double worst = 0;
    const char *worst_name = "";
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(ck, "params"))
    {
        double rel = jnum(p, "max_rel");
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(p, "max_rel"))) rel = (double)INFINITY;
        if (rel >= worst) { worst = rel; worst_name = jstr(p, "name"); }
    }
    char wn[48];
    md_out("  parameter gradients: %d tensors, %.0f beyond; worst %s (%.1e)\n",
           cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ck, "params")), jnum(ck, "failed_params"),
           cut(worst_name, wn, 40), worst);
    md_out("  loss: device %.6g, reference %.6g\n", jnum(ck, "loss"), jnum(ck, "reference_loss"));
    cJSON_ArrayForEach(L, cJSON_GetObjectItemCaseSensitive(ck, "layers"))
    {
        print_failure(jstr(L, "name"), "output", cJSON_GetObjectItemCaseSensitive(L, "output"));
        print_failure(jstr(L, "name"), "input gradient", cJSON_GetObjectItemCaseSensitive(L, "input_grad"));
    }
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(ck, "params")) print_failure(jstr(p, "name"), "gradient", p);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ck, "passed")))
        md_out("  passed: every layer and parameter gradient within the tolerance\n");
    else
        md_out("  FAILED: %.0f layer(s) and %.0f parameter gradient(s) beyond the tolerance; first: %s\n",
               jnum(ck, "failed_layers"), jnum(ck, "failed_params"), jstr(ck, "first_failure"));
}

/* ---- --precision-audit -------------------------------------------------------------- */

/* Magnitudes against fp16's range. */
struct range {
    double max_abs;
    long long overflow;  /* |x| > 65504: inf in fp16 */
    long long subnormal; /* 2^-24 <= |x| < 2^-14: kept with fewer bits */
    long long flush;     /* 0 < |x| < 2^-24: zero in fp16 */
    long long sq_overflow; /* x^2 > 65504: a square (a variance term) that overflows fp16 */
};

static void range_of(const float *x, size_t n, struct range *r)
{
    memset(r, 0, sizeof *r);
    for (size_t e = 0; e < n; e++) {
        double a = fabs((double)x[e]);
        if (!isfinite(a)) { r->overflow++; continue; }
        if (a > r->max_abs) r->max_abs = a;
        if (a > FP16_MAX) r->overflow++;
        else if (a > 0 && a < FP16_MIN_SUB) r->flush++;
        else if (a > 0 && a < FP16_MIN_NORMAL) r->subnormal++;
        if (a * a > FP16_MAX) r->sq_overflow++;
    }
}

static cJSON *range_json(const struct range *r, int squares)
{
    cJSON *o = cJSON_CreateObject();
    add_num(o, "max_abs", r->max_abs);
    cJSON_AddNumberToObject(o, "overflow_fp16", (double)r->overflow);
    cJSON_AddNumberToObject(o, "subnormal_fp16", (double)r->subnormal);
    cJSON_AddNumberToObject(o, "flush_to_zero_fp16", (double)r->flush);
    if (squares) cJSON_AddNumberToObject(o, "input_square_overflow_fp16", (double)r->sq_overflow);
    return o;
}

/* A histogram of |g| by binary exponent: the largest gradient and the
 * smallest that matters (the 0.1% quantile of the non-zero ones). */
#define HBINS 300
struct ghist {
    long long bins[HBINS]; /* exponent e of frexp, offset by 200 */
    long long nonzero, zero;
    double max_abs;
};

static void ghist_add(struct ghist *h, const float *g, size_t n)
{
    for (size_t e = 0; e < n; e++) {
        double a = fabs((double)g[e]);
        if (!isfinite(a)) continue;
        if (a == 0) { h->zero++; continue; }
        int ex;
        frexp(a, &ex);
        ex += 200;
        if (ex < 0) ex = 0;
        if (ex >= HBINS) ex = HBINS - 1;
        h->bins[ex]++;
        h->nonzero++;
        if (a > h->max_abs) h->max_abs = a;
    }
}

/* The magnitude below which a share q of the non-zero gradients lies (a power of two). */
static double ghist_quantile(const struct ghist *h, double q)
{
    long long want = (long long)ceil(q * (double)h->nonzero), seen = 0;
    for (int b = 0; b < HBINS; b++) {
        seen += h->bins[b];
        if (seen >= want && h->bins[b]) return ldexp(0.5, b - 200);
    }
    return 0;
}

/* Kinds whose statistics or softmax are kept in fp32 by rule (docs/doctor.md). */
static const char *rule_why(const char *type)
{
    if (strcmp(type, "batchnorm") == 0) return "batch statistics (mean, variance of squares)";
    if (strcmp(type, "layernorm") == 0) return "LayerNorm statistics";
    if (strcmp(type, "instance_norm") == 0) return "instance statistics";
    if (strcmp(type, "attention") == 0) return "softmax";
    return NULL;
}

static md_status audit_step(const struct md_check_opts *o, md_dtype dt, md_device *dev, const float *params,
                            double loss_scale, const md_model *feed, struct step *s)
{
    md_status st = load_bound(o, dt, dev, &s->m);
    if (st == MD_OK) st = run_step(o, s, params, loss_scale, feed);
    if (st != MD_OK) md_err_prefix("--precision-audit (%s)", md_dtype_name(dt));
    return st;
}

/* The runs of the audit, all on the same batch and weights:
 *   s32   fp32: the truth, gradients against fp16's range (loss scale S);
 *   s32s  fp32 with the loss scaled by S: what the fp16 layers are fed;
 *   f16   fp16 fed from s32s, loss scale S: each layer's own fp16 error;
 *   fbf   bf16 fed from s32: each layer's own bf16 error;
 *   e16, ebf  fp16 (scale S) and bf16 unfed: the whole step, its loss and
 *         the NaN/Inf that appear when nothing is kept in fp32. */
enum { R32, R32S, F16, FBF, E16, EBF, NRUNS };

md_status md_precision_audit_run(const struct md_check_opts *o, md_device *dev, cJSON **out)
{
    md_status st = MD_OK;
    struct step run[NRUNS];
    memset(run, 0, sizeof run);
    float *params = NULL;
    cJSON *au = NULL;
    *out = NULL;
    if ((st = load_bound(o, MD_F32, dev, &run[R32].m)) != MD_OK) goto done;
    params = md_malloc(md_model_nparams(run[R32].m) * sizeof *params + 4);
    if (!params) { st = md_errf(MD_ERR_OOM, "--precision-audit: out of host memory"); goto done; }
    if ((st = md_model_get_params_host(run[R32].m, params)) != MD_OK) goto done;
    if ((st = run_step(o, &run[R32], params, 1.0, NULL)) != MD_OK) goto done;
    md_model *m = run[R32].m;
    int nl = md_model_num_layers(m);

    /* gradients against fp16's range: activation and parameter gradients */
    struct ghist *h = md_calloc(1, sizeof *h);
    if (!h) { st = md_errf(MD_ERR_OOM, "--precision-audit: out of host memory"); goto done; }
    for (int i = 0; i < nl; i++) {
        const struct md_layer_capture *c = md_model_capture_layer(m, i);
        if (c->ran) ghist_add(h, c->dx, c->ndx);
    }
    ghist_add(h, run[R32].grads, md_model_nparams(m));
    double gmax = h->max_abs, gsmall = ghist_quantile(h, 1e-3);
    long long gnz = h->nonzero, gzero = h->zero;
    md_free(h);
    /* the largest scale that keeps the largest gradient 2x below 65504, the
     * smallest that lifts the small ones above fp16's smallest normal */
    double smax = gmax > 0 ? exp2(floor(log2(FP16_MAX / (2 * gmax)))) : 65536.0;
    double smin = gsmall > 0 ? exp2(ceil(log2(FP16_MIN_NORMAL / gsmall))) : 1.0;
    if (smin < 1) smin = 1;
    int fits = smin <= smax;
    double scale = smax;
    if (scale > 65536) scale = 65536;
    if (scale < 1) scale = 1;

    if ((st = audit_step(o, MD_F32, dev, params, scale, NULL, &run[R32S])) != MD_OK) goto done;
    if ((st = audit_step(o, MD_F16, dev, params, scale, run[R32S].m, &run[F16])) != MD_OK) goto done;
    if ((st = audit_step(o, MD_BF16, dev, params, 1.0, run[R32].m, &run[FBF])) != MD_OK) goto done;
    if ((st = audit_step(o, MD_F16, dev, params, scale, NULL, &run[E16])) != MD_OK) goto done;
    if ((st = audit_step(o, MD_BF16, dev, params, 1.0, NULL, &run[EBF])) != MD_OK) goto done;
    unscale(&run[R32S], scale);
    unscale(&run[F16], scale);
    unscale(&run[E16], scale);

    au = cJSON_CreateObject();
    cJSON_AddStringToObject(au, "model", md_model_name(m));
    cJSON_AddStringToObject(au, "device", md_device_get_info(dev)->backend);
    cJSON_AddNumberToObject(au, "batch", o->batch);
    cJSON_AddNumberToObject(au, "seed", (double)o->seed);
    cJSON_AddNumberToObject(au, "input_scale", o->input_scale);
    cJSON_AddNumberToObject(au, "rtol_fp16", md_check_rtol(MD_F16, 0));
    cJSON_AddNumberToObject(au, "rtol_bf16", md_check_rtol(MD_BF16, 0));
    cJSON *loss = cJSON_AddObjectToObject(au, "loss");
    add_num(loss, "fp32", run[R32].loss);
    add_num(loss, "fp16", run[E16].loss);
    add_num(loss, "bf16", run[EBF].loss);
    cJSON *gj = cJSON_AddObjectToObject(au, "gradients");
    add_num(gj, "max_abs", gmax);
    add_num(gj, "small_abs", gsmall);
    cJSON_AddNumberToObject(gj, "nonzero", (double)gnz);
    cJSON_AddNumberToObject(gj, "zero", (double)gzero);
    add_num(gj, "loss_scale_min", smin);
    add_num(gj, "loss_scale_max", smax);
    cJSON_AddBoolToObject(gj, "fits_fp16", fits);
    cJSON_AddNumberToObject(gj, "loss_scale_used_fp16", scale);

    cJSON *layers = cJSON_AddArrayToObject(au, "layers");
    double rtol16 = md_check_rtol(MD_F16, 0);
    long long overflow_fwd = 0, fp16_nonfinite = 0;
    int nkeep_kinds = 0, nkeep_layers = 0;
    const char *kinds[MD_PLAN_MAX_KEEP];
    cJSON *keep_layers = cJSON_CreateArray();
    for (int i = 0; i < nl; i++) {
        const struct md_layer_capture *c = md_model_capture_layer(m, i);
        const struct md_layer_capture *c32s = md_model_capture_layer(run[R32S].m, i);
        const struct md_layer_capture *c16 = md_model_capture_layer(run[F16].m, i);
        const struct md_layer_capture *cbf = md_model_capture_layer(run[FBF].m, i);
        const struct md_layer_capture *e16 = md_model_capture_layer(run[E16].m, i);
        if (!c->ran) continue;
        const char *type = md_model_layer_type(m, i);
        cJSON *L = cJSON_CreateObject();
        cJSON_AddStringToObject(L, "name", md_model_layer_name(m, i));
        cJSON_AddStringToObject(L, "type", type);
        struct range r;
        range_of(c->y, c->ny, &r);
        overflow_fwd += r.overflow;
        const char *rule = rule_why(type);
        /* max-pool gradients go to the window's maximum: fp16 rounding makes ties that move a
         * gradient to another element without changing it, so they are not measured */
        int routes = strcmp(type, "maxpool") == 0;
        struct range rin = {0};
        int in[8], nin = 0;
        md_model_layer_inputs(m, i, in, 8, &nin);
        int have_in = rule && nin > 0 && in[0] >= 0;
        if (have_in) {
            const struct md_layer_capture *ci = md_model_capture_layer(m, in[0]);
            range_of(ci->y, ci->ny, &rin);
        }
        cJSON *f = range_json(&r, 0);
        if (have_in) cJSON_AddNumberToObject(f, "input_square_overflow_fp16", (double)rin.sq_overflow);
        struct range rg;
        range_of(c->dx, c->ndx, &rg);
        cJSON_AddItemToObject(f, "input_grad", range_json(&rg, 0));
        cJSON_AddItemToObject(L, "fp32", f);
        struct cmp y16, g16, ybf, gbf;
        compare(c16->y, c32s->y, c->ny, md_check_rtol(MD_F16, 0), &y16);
        compare(c16->dx, c32s->dx, c->ndx, md_check_rtol(MD_F16, 0), &g16);
        compare(cbf->y, c->y, c->ny, md_check_rtol(MD_BF16, 0), &ybf);
        compare(cbf->dx, c->dx, c->ndx, md_check_rtol(MD_BF16, 0), &gbf);
        long long nf = 0;
        for (size_t e = 0; e < e16->ny; e++) nf += !isfinite(e16->y[e]);
        for (size_t e = 0; e < e16->ndx; e++) nf += !isfinite(e16->dx[e]);
        fp16_nonfinite += nf;
        cJSON *h16 = cJSON_AddObjectToObject(L, "fp16");
        cJSON_AddItemToObject(h16, "output", cmp_json(&y16));
        cJSON_AddItemToObject(h16, "input_grad", c->ndx ? cmp_json(&g16) : cJSON_CreateNull());
        cJSON_AddNumberToObject(h16, "nonfinite_whole_step", (double)nf);
        cJSON *hbf = cJSON_AddObjectToObject(L, "bf16");
        cJSON_AddItemToObject(hbf, "output", cmp_json(&ybf));
        cJSON_AddItemToObject(hbf, "input_grad", c->ndx ? cmp_json(&gbf) : cJSON_CreateNull());
        /* fp32 by rule (statistics, softmax) or by measurement (fp16 beyond its tolerance or out of range) */
        char why[160] = "";
        if (rule) {
            if (rin.sq_overflow)
                snprintf(why, sizeof why, "rule: %s; %lld input squares above 65504", rule, rin.sq_overflow);
            else
                snprintf(why, sizeof why, "rule: %s", rule);
            int seen = 0;
            for (int k = 0; k < nkeep_kinds; k++) seen |= strcmp(kinds[k], type) == 0;
            if (!seen && nkeep_kinds < MD_PLAN_MAX_KEEP) kinds[nkeep_kinds++] = type;
        } else if (r.overflow) {
            snprintf(why, sizeof why, "measured: %lld outputs above 65504", r.overflow);
        } else if (y16.nan + y16.inf + g16.nan + g16.inf > 0) {
            snprintf(why, sizeof why, "measured: fp16 NaN/Inf (%lld)", y16.nan + y16.inf + g16.nan + g16.inf);
        } else if (!(y16.rel_l2 <= rtol16) || (c->ndx && !routes && !(g16.rel_l2 <= rtol16))) {
            int out_bad = !(y16.rel_l2 <= rtol16);
            snprintf(why, sizeof why, "measured: fp16 %s error %.1e beyond %.0e", out_bad ? "output" : "gradient",
                     out_bad ? y16.rel_l2 : g16.rel_l2, rtol16);
        }
        cJSON_AddBoolToObject(L, "keep_fp32", why[0] != 0);
        if (why[0]) cJSON_AddStringToObject(L, "why", why);
        if (why[0] && !rule && nkeep_layers < MD_PLAN_MAX_KEEP) {
            cJSON_AddItemToArray(keep_layers, cJSON_CreateString(md_model_layer_name(m, i)));
            nkeep_layers++;
        }
        cJSON_AddItemToArray(layers, L);
    }
    cJSON_AddNumberToObject(au, "fp32_outputs_above_fp16_max", (double)overflow_fwd);
    cJSON_AddNumberToObject(au, "fp16_nonfinite", (double)fp16_nonfinite);

    /* the plan: fp16 when every activation and the gradients fit its range, else bf16 */
    int use16 = overflow_fwd == 0 && fits && fp16_nonfinite == 0;
    cJSON *plan = cJSON_AddObjectToObject(au, "plan");
    cJSON_AddStringToObject(plan, "format", "mpsdiag-precision-plan");
    cJSON_AddNumberToObject(plan, "version", 1);
    cJSON_AddStringToObject(plan, "model", md_model_name(m));
    cJSON_AddStringToObject(plan, "precision", use16 ? "fp16" : "bf16");
    cJSON_AddNumberToObject(plan, "loss_scale", use16 ? scale : 1.0);
    cJSON *keep = cJSON_AddObjectToObject(plan, "keep_fp32");
    cJSON *kj = cJSON_AddArrayToObject(keep, "kinds");
    for (int k = 0; k < nkeep_kinds; k++) cJSON_AddItemToArray(kj, cJSON_CreateString(kinds[k]));
    cJSON_AddItemToObject(keep, "layers", keep_layers);
    char why[320];
    if (use16)
        snprintf(why, sizeof why, "fp16: no activation above 65504 and the gradients fit its range with a loss "
                 "scale between %g and %g", smin, smax);
    else
        snprintf(why, sizeof why, "bf16: %s", overflow_fwd ? "activations exceed fp16's 65504"
                 : !fits ? "the gradients span more than fp16's range (no single loss scale fits)"
                         : "the fp16 step produced NaN/Inf");
    cJSON_AddStringToObject(plan, "why", why);
    *out = au;
    au = NULL;
done:
    cJSON_Delete(au);
    md_free(params);
    /* fed models first: they borrow their feeders' captures */
    step_free(&run[F16]);
    step_free(&run[FBF]);
    for (int k = 0; k < NRUNS; k++) step_free(&run[k]);
    return st;
}

/* A half type's relative L2 error, or "NaN/Inf" when its output has them. */
static const char *half_err(const cJSON *c, char *buf, size_t n)
{
    if (jnum(c, "nan") + jnum(c, "inf") > 0) {
        snprintf(buf, n, "NaN/Inf");
        return buf;
    }
    return fmt_rel(cJSON_GetObjectItemCaseSensitive(c, "rel_l2"), buf, n);
}

void md_precision_audit_print(const cJSON *au)
{
    char b1[40], b2[40], name[24], type[16];
    md_out("  %s on %s, batch %.0f: fp16 and bf16 against fp32 (same weights and inputs)\n", jstr(au, "model"),
           jstr(au, "device"), jnum(au, "batch"));
    md_out("  %-18s %-10s %9s %8s %8s %8s %8s  %s\n", "layer", "type", "max |y|", ">65504", "flush", "fp16 err",
           "bf16 err", "keep fp32");
    const cJSON *L;
    cJSON_ArrayForEach(L, cJSON_GetObjectItemCaseSensitive(au, "layers"))
    {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(L, "fp32");
        const cJSON *y16 = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(L, "fp16"), "output");
        const cJSON *ybf = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(L, "bf16"), "output");
        const char *why = jstr(L, "why");
        md_out("  %-18s %-10s %9.3g %8.0f %8.0f %8s %8s  %.21s\n", cut(jstr(L, "name"), name, 18),
               cut(jstr(L, "type"), type, 10), jnum(f, "max_abs"), jnum(f, "overflow_fp16"),
               jnum(f, "flush_to_zero_fp16"), half_err(y16, b1, sizeof b1), half_err(ybf, b2, sizeof b2),
               why[0] ? (strncmp(why, "rule", 4) == 0 ? "yes (rule)" : "yes (measured)") : "");
    }
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(au, "gradients");
    md_out("  gradients: largest %.3g, smallest significant (0.1%% quantile) %.3g\n", jnum(g, "max_abs"),
           jnum(g, "small_abs"));
    md_out("  fp16 loss scale: at least %g (small gradients above 2^-14), at most %g (largest < 32752)%s\n",
           jnum(g, "loss_scale_min"), jnum(g, "loss_scale_max"),
           cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "fits_fp16")) ? "" : ": none fits");
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(au, "loss");
    md_out("  loss: fp32 %.6g, fp16 %.6g, bf16 %.6g\n", jnum(loss, "fp32"), jnum(loss, "fp16"), jnum(loss, "bf16"));
    cJSON_ArrayForEach(L, cJSON_GetObjectItemCaseSensitive(au, "layers"))
    {
        const char *why = jstr(L, "why");
        if (why[0] && (strncmp(why, "rule", 4) != 0 || strstr(why, "squares")))
            md_out("  %s: %s\n", cut(jstr(L, "name"), name, 18), why);
    }
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(au, "plan");
    md_out("  plan: %s, initial loss scale %g; %s\n", jstr(p, "precision"), jnum(p, "loss_scale"), jstr(p, "why"));
}

/* ---- plan files ------------------------------------------------------------------------ */

md_status md_precision_plan_write(const cJSON *audit, const char *path)
{
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(audit, "plan");
    if (!plan) return md_errf(MD_ERR_INTERNAL, "--precision-plan %s: the audit has no plan", path);
    md_status st = md_json_write_file(plan, path);
    if (st != MD_OK) md_err_prefix("--precision-plan");
    return st;
}

static md_status plan_strings(const cJSON *keep, const char *key, const char *path, char (*dst)[32], char (*dstl)[128],
                              int *n)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(keep, key);
    *n = 0;
    if (!a) return MD_OK;
    if (!cJSON_IsArray(a)) return md_errf(MD_ERR_CONFIG, "%s: plan.keep_fp32.%s: expected an array of strings", path, key);
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        size_t cap = dst ? 32 : 128;
        if (!cJSON_IsString(e) || !e->valuestring[0] || strlen(e->valuestring) >= cap)
            return md_errf(MD_ERR_CONFIG, "%s: plan.keep_fp32.%s[%d]: expected a name (1-%zu characters)", path, key, *n,
                           cap - 1);
        if (*n >= MD_PLAN_MAX_KEEP)
            return md_errf(MD_ERR_CONFIG, "%s: plan.keep_fp32.%s: more than %d entries", path, key, MD_PLAN_MAX_KEEP);
        if (dst) snprintf(dst[*n], 32, "%s", e->valuestring);
        else snprintf(dstl[*n], 128, "%s", e->valuestring);
        (*n)++;
    }
    return MD_OK;
}

md_status md_precision_plan_read(const char *path, struct md_precision_plan *p)
{
    static const char *const keys[] = {"format", "version", "model", "precision", "loss_scale", "keep_fp32", "why", NULL};
    static const char *const keep_keys[] = {"kinds", "layers", NULL};
    memset(p, 0, sizeof *p);
    cJSON *root = NULL;
    md_status st = md_json_load_file(path, &root);
    if (st != MD_OK) {
        md_err_prefix("--precision-plan");
        return st;
    }
    const char *prec = NULL, *fmt = NULL;
    char jp[1100];
    snprintf(jp, sizeof jp, "%s: plan", path);
    if (!cJSON_IsObject(root)) { st = md_errf(MD_ERR_CONFIG, "%s: expected a JSON object (a precision plan)", path); goto done; }
    if ((st = md_json_only_keys(root, jp, keys)) != MD_OK) goto done;
    if ((st = md_json_str(root, "format", jp, 0, &fmt)) != MD_OK) goto done;
    if (fmt && strcmp(fmt, "mpsdiag-precision-plan") != 0) {
        st = md_errf(MD_ERR_CONFIG, "%s: plan.format: '%s' is not mpsdiag-precision-plan", path, fmt);
        goto done;
    }
    if ((st = md_json_str(root, "precision", jp, 1, &prec)) != MD_OK) goto done;
    if (strcmp(prec, "fp32") == 0) p->precision = MD_PREC_FP32;
    else if (strcmp(prec, "fp16") == 0) p->precision = MD_PREC_FP16;
    else if (strcmp(prec, "bf16") == 0) p->precision = MD_PREC_BF16;
    else { st = md_errf(MD_ERR_CONFIG, "%s: plan.precision: '%s' is not fp32, fp16 or bf16", path, prec); goto done; }
    if ((st = md_json_num(root, "loss_scale", jp, 0, 1.0, 16777216.0, &p->loss_scale)) != MD_OK) goto done;
    const cJSON *keep = cJSON_GetObjectItemCaseSensitive(root, "keep_fp32");
    if (keep) {
        if (!cJSON_IsObject(keep)) { st = md_errf(MD_ERR_CONFIG, "%s: plan.keep_fp32: expected an object", path); goto done; }
        char kp[1100];
        snprintf(kp, sizeof kp, "%s: plan.keep_fp32", path);
        if ((st = md_json_only_keys(keep, kp, keep_keys)) != MD_OK) goto done;
        if ((st = plan_strings(keep, "kinds", path, p->kinds, NULL, &p->nkinds)) != MD_OK) goto done;
        if ((st = plan_strings(keep, "layers", path, NULL, p->layers, &p->nlayers)) != MD_OK) goto done;
    }
done:
    if (st != MD_OK) md_err_prefix("--precision-plan");
    cJSON_Delete(root);
    return st;
}
