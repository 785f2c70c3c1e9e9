/* stage_doctor.c - the doctor's stages (docs/doctor.md): --check and
 * --precision-audit after the model stage, instead of data, training and
 * benchmark; and --precision-plan FILE applied to a training run. The
 * measuring is src/diag/check.c's. */
#include <stdio.h>
#include <string.h>

#include "app/job.h"
#include "core/json.h"
#include "core/log.h"
#include "diag/check.h"
#include "nn/model.h"

int md_doctor_wanted(const md_options *o) { return o->check || o->precision_audit; }

/* The run config's "model" when it is an object and no --model was given
 * (as the model stage loads it): *root owns it. */
static md_status inline_model(const md_options *o, cJSON **root, const cJSON **model)
{
    *root = NULL;
    *model = NULL;
    if (!o->config[0] || md_options_given(o, "model")) return MD_OK;
    MD_TRY(md_json_load_file(o->config, root));
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(*root, "model");
    if (cJSON_IsObject(m)) *model = m;
    return MD_OK;
}

static void warn(md_job *job, const char *msg)
{
    md_warn("%s", msg);
    cJSON *w = cJSON_GetObjectItemCaseSensitive(job->report, "warnings");
    if (!cJSON_IsArray(w)) w = cJSON_AddArrayToObject(job->report, "warnings");
    cJSON_AddItemToArray(w, cJSON_CreateString(msg));
}

md_status md_stage_doctor(md_job *job)
{
    md_options *o = job->opts;
    if (!job->model) return md_errf(MD_ERR_INTERNAL, "doctor: no model was built");
    md_status st = MD_OK;
    cJSON *root = NULL, *res = NULL;
    md_device *ref = NULL;
    char where[1200];
    struct md_check_opts co;
    memset(&co, 0, sizeof co);
    if ((st = inline_model(o, &root, &co.inline_model)) != MD_OK) return st;
    snprintf(where, sizeof where, "%s: model", o->config);
    co.model = co.inline_model ? where : o->model[0] ? o->model : "small_cnn";
    co.mopts = *md_model_get_opts(job->model);
    co.batch = md_options_given(o, "batch-size") ? o->batch_size : 2;
    co.seed = o->seed;
    co.input_scale = o->input_scale > 0 ? o->input_scale : 1.0;
    co.tf32 = o->tf32 && md_device_kind(job->dev) == MD_BACKEND_CUDA;
    int failed = 0;
    if (o->check) {
        md_section("Check");
        struct md_device_opts ro = {.threads = 1};
        if ((st = md_device_open(md_backend_find("ref"), 0, &ro, &ref)) != MD_OK) goto done;
        if ((st = md_check_run(&co, job->dev, ref, &res, &failed)) != MD_OK) goto done;
        md_check_print(res);
        cJSON_AddItemToObject(job->report, "check", res);
        res = NULL;
    }
    if (o->precision_audit) {
        md_section("Precision audit");
        if (md_device_kind(job->dev) == MD_BACKEND_CPU)
            md_out("  the CPU keeps fp16 and bf16 as storage (every tensor rounded to the half type) and "
                   "computes in fp32\n");
        if ((st = md_precision_audit_run(&co, job->dev, &res)) != MD_OK) goto done;
        md_precision_audit_print(res);
        cJSON_AddItemToObject(job->report, "precision_audit", res);
        if (o->precision_plan[0]) {
            if ((st = md_precision_plan_write(res, o->precision_plan)) != MD_OK) {
                res = NULL;
                goto done;
            }
            md_out("  plan written to %s (train with --precision-plan %s)\n", o->precision_plan, o->precision_plan);
        }
        res = NULL;
    }
    if (failed) {
        const cJSON *ck = cJSON_GetObjectItemCaseSensitive(job->report, "check");
        const cJSON *ff = cJSON_GetObjectItemCaseSensitive(ck, "first_failure");
        st = md_errf(MD_ERR_NUMERIC, "--check: %d layer(s) and parameter gradient(s) beyond the %s tolerance; first: %s",
                     failed, md_dtype_name(co.mopts.compute_dtype),
                     cJSON_IsString(ff) ? ff->valuestring : "a parameter gradient");
    }
done:
    cJSON_Delete(res);
    cJSON_Delete(root);
    md_device_close(ref);
    return st;
}

/* ---- --precision-plan FILE for a training run ---- */

md_status md_stage_precision_plan(md_job *job)
{
    md_options *o = job->opts;
    if (!o->precision_plan[0] || o->precision_audit) return MD_OK;
    struct md_precision_plan p;
    MD_TRY(md_precision_plan_read(o->precision_plan, &p));
    o->precision = p.precision;
    job->plan_loss_scale = p.loss_scale;
    return MD_OK;
}

void md_stage_precision_plan_setting(md_job *job)
{
    md_options *o = job->opts;
    if (!o->precision_plan[0] || o->precision_audit) return;
    struct md_precision_plan p;
    if (md_precision_plan_read(o->precision_plan, &p) != MD_OK) return; /* read before the policy */
    const cJSON *s = md_job_find_setting(job, "precision");
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(s, "why");
    char w[600], v[32];
    snprintf(w, sizeof w, "--precision-plan %s%s%s", o->precision_plan, cJSON_IsString(why) ? ": " : "",
             cJSON_IsString(why) ? why->valuestring : "");
    md_job_setting(job, "precision", md_precision_name(o->precision), w);
    if (job->plan_loss_scale > 0 && o->precision == MD_PREC_FP16) {
        snprintf(v, sizeof v, "%g", job->plan_loss_scale);
        snprintf(w, sizeof w, "--precision-plan %s: the initial loss scale (dynamic from there)", o->precision_plan);
        md_job_setting(job, "loss_scale", v, w);
    } else if (job->plan_loss_scale > 0) {
        snprintf(w, sizeof w, "--precision-plan %s: loss_scale %g not used: the run computes in %s (loss scaling is "
                 "for fp16 only)", o->precision_plan, job->plan_loss_scale, md_precision_name(o->precision));
        if (o->precision != MD_PREC_FP32 || p.precision == MD_PREC_FP16) warn(job, w);
    }
    if (!p.nkinds && !p.nlayers) return;
    /* what the engine can do: one compute type per model; normalisation statistics always in fp32 */
    char part[512] = "", none[512] = "", msg[1400];
    for (int k = 0; k < p.nkinds; k++) {
        int norm = strcmp(p.kinds[k], "batchnorm") == 0 || strcmp(p.kinds[k], "layernorm") == 0 ||
                   strcmp(p.kinds[k], "instance_norm") == 0;
        char *dst = norm ? part : none;
        size_t l = strlen(dst);
        snprintf(dst + l, 512 - l, "%s%s", l ? ", " : "", p.kinds[k]);
    }
    for (int k = 0; k < p.nlayers; k++) {
        size_t l = strlen(none);
        snprintf(none + l, sizeof none - l, "%s%s", l ? ", " : "", p.layers[k]);
    }
    if (o->precision == MD_PREC_FP32) {
        snprintf(msg, sizeof msg, "--precision-plan %s: keep_fp32 needs nothing: the run computes in fp32",
                 o->precision_plan);
        md_out("  %s\n", msg);
        return;
    }
    if (part[0]) {
        snprintf(msg, sizeof msg, "--precision-plan %s: keep_fp32 %s: only partly honoured: their statistics are "
                 "computed in fp32, their outputs are stored in %s", o->precision_plan, part,
                 md_precision_name(o->precision));
        warn(job, msg);
    }
    if (none[0]) {
        snprintf(msg, sizeof msg, "--precision-plan %s: keep_fp32 %s: not honoured: every layer of a model runs "
                 "in the one compute type (%s)", o->precision_plan, none, md_precision_name(o->precision));
        warn(job, msg);
    }
}
