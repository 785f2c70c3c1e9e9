/* stage_model.c - the model stage: load the model config (--model, the run
 * config's inline "model" object, or small_cnn), print the per-layer
 * summary, put the model in job->model and its summary in report["model"].
 * The train stage binds it to the device (it knows the batch size) and runs
 * --init-from (md_model_load_weights) and --dump-grads (md_model_dump_grads). */
#include <string.h>

#include "app/job.h"
#include "app/resolve.h"
#include "core/json.h"
#include "core/log.h"
#include "nn/model.h"

/* The run config's "model" when it is an object (caller deletes), else NULL. */
static md_status inline_model(const md_options *o, cJSON **root, const cJSON **model)
{
    *root = NULL;
    *model = NULL;
    if (!o->config[0]) return MD_OK;
    MD_TRY(md_json_load_file(o->config, root));
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(*root, "model");
    if (cJSON_IsObject(m)) *model = m;
    return MD_OK;
}

md_status md_stage_model(md_job *job)
{
    md_options *o = job->opts;
    md_section("Model");
    struct md_model_opts mo;
    md_resolve_model(o, &mo);

    cJSON *root = NULL;
    const cJSON *inl = NULL;
    md_status st = MD_OK;
    if (!md_options_given(o, "model") && (st = inline_model(o, &root, &inl)) != MD_OK) return st;
    const char *name = o->model[0] ? o->model : "small_cnn";
    char where[1200];
    if (inl) snprintf(where, sizeof where, "%s: model", o->config);
    st = md_model_load(inl ? where : name, inl, &mo, &job->model);
    cJSON_Delete(root);
    if (st != MD_OK) return st;
    md_model_print_summary(job->model);
    md_out("  layout %s, compute %s, compile %s, gradient checkpointing %s\n", md_layout_name(mo.layout),
           md_dtype_name(mo.compute_dtype), mo.compile ? "on (BN+ReLU and add+ReLU fused, memory shared by lifetime)"
                                                       : "off", mo.grad_ckpt ? "on" : "off");
    cJSON *rep = md_model_summary_json(job->model);
    if (rep) cJSON_AddItemToObject(job->report, "model", rep);
    return MD_OK;
}

void md_stage_model_cleanup(md_job *job)
{
    md_model_free(job->model);
    job->model = NULL;
}
