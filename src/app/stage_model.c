/* stage_model.c - the model stage: load the model config (--model, the run
 * config's inline "model" object, or small_cnn), print the per-layer
 * summary, put the model in job->model and its summary in report["model"].
 * The train stage binds it to the device (it knows the batch size) and runs
 * --init-from (md_model_load_weights) and --dump-grads (md_model_dump_grads). */
#include <stdio.h>
#include <string.h>

#include "app/job.h"
#include "app/recipe.h"
#include "app/resolve.h"
#include "core/json.h"
#include "core/log.h"
#include "data/data.h"
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

/* The time-series flags that only a forecasting model uses: given without
 * --model, they select the bundled itransformer. */
static const char *const series_flags[] = {"seq-len", "pred-len", "d-model", "d-ff", "n-heads", "e-layers",
                                           "features", "target", NULL};

static void pick_forecasting_model(md_job *job, int have_inline)
{
    md_options *o = job->opts;
    if (md_options_given(o, "model") || have_inline || o->model[0]) return;
    for (int i = 0; series_flags[i]; i++) {
        if (!md_options_given(o, series_flags[i])) continue;
        snprintf(o->model, sizeof o->model, "itransformer");
        char why[160];
        snprintf(why, sizeof why, "--%s given without --model: a time-series flag selects the forecasting model",
                 series_flags[i]);
        md_job_setting(job, "model", "itransformer", why);
        return;
    }
}

/* A forecasting model's training defaults: the public iTransformer recipe
 * (Adam at 1e-4 halved every epoch, no weight decay, 10 epochs with early
 * stopping after 3 without a better validation loss), which reproduces the
 * published figures (docs/forecasting.md); each default yields to its flag. */
static void forecast_recipe(md_job *job)
{
    md_options *o = job->opts;
    const char *why = "forecasting model: the public iTransformer recipe (docs/forecasting.md)";
    char v[32];
    if (!md_options_given(o, "optimizer")) {
        snprintf(o->optimizer, sizeof o->optimizer, "adamw");
        if (!md_options_given(o, "weight-decay")) o->weight_decay = 0.0;
        md_job_setting(job, "optimizer", "adamw, weight decay 0", why);
    }
    if (!md_options_given(o, "lr")) {
        o->lr = 1e-4;
        md_job_setting(job, "lr", "1e-4", why);
    }
    if (!md_options_given(o, "lradj")) {
        snprintf(o->lradj, sizeof o->lradj, "type1");
        md_job_setting(job, "lr_schedule", "type1", "forecasting model: the public recipe halves the rate every epoch");
    }
    if (!md_options_given(o, "epochs") && !o->ci) {
        o->epochs = 10;
        md_job_setting(job, "epochs", "10", why);
    }
    if (!md_options_given(o, "patience") && !o->ci) {
        o->patience = 3;
        snprintf(v, sizeof v, "%d", o->patience);
        md_job_setting(job, "patience", v, "forecasting model: stop after 3 epochs without a better validation loss");
    }
}

/* A regression model on the data: the bundled time-series sample when no
 * dataset is named, the window's shapes (seq_len, pred_len, variates, time
 * features) as its parameters; a task mismatch is an error naming both. */
static md_status fit_to_data(md_job *job, const md_model *m, struct md_model_opts *mo, int *reload)
{
    md_options *o = job->opts;
    int regress = md_model_is_regression(m);
    *reload = 0;
    /* "synthetic" here is --ci's default, which has no time series */
    if (regress && (strcmp(o->dataset, "auto") == 0 || strcmp(o->dataset, "synthetic") == 0) && !o->data_dir[0] &&
        !md_options_given(o, "dataset")) {
        snprintf(o->dataset, sizeof o->dataset, "csv");
        md_job_setting(job, "dataset", "csv",
                       "a forecasting model without --data-dir: the bundled time-series sample");
    }
    struct md_data_request req;
    memset(&req, 0, sizeof req);
    MD_TRY(md_resolve_data_config(o, &req));
    struct md_data_opts d;
    md_resolve_data(o, &d);
    struct md_data_peek pk;
    md_status st = md_data_peek(&d, &pk);
    if (st != MD_OK) {
        /* the data stage reports a dataset it cannot open; a regression model needs its shapes now */
        if (regress) return st;
        md_err_clear();
        return MD_OK;
    }
    const char *tp = md_model_task_param(m);
    if (tp && regress != (pk.task == MD_TASK_REGRESS)) {
        /* the task is a model parameter: the data decides it */
        regress = pk.task == MD_TASK_REGRESS;
        MD_TRY(md_model_opts_set(mo, tp, regress, 0));
        md_job_setting(job, "task", regress ? "regression" : "classification",
                       regress ? "the dataset has numeric targets" : "the dataset has classes");
        *reload = 1;
        if (!regress) return MD_OK;
    }
    if (regress && pk.task != MD_TASK_REGRESS)
        return md_errf(MD_ERR_CONFIG, "model %s is a regression model but dataset %s has classes; give a time-series "
                       "CSV with --data-dir FILE.csv, or images with numeric targets (--dataset images-csv)",
                       md_model_name(m), pk.name);
    if (!regress && pk.task == MD_TASK_REGRESS)
        return md_errf(MD_ERR_CONFIG, "dataset %s has numeric targets (regression) but model %s is a classifier; use a "
                       "regression model (%s)", pk.name, md_model_name(m),
                       pk.series.seq_len ? "--model itransformer" : "--model small_cnn_regress");
    if (!regress) return MD_OK;
    const struct md_data_series *s = &pk.series;
    if (s->seq_len == 0) { /* images with numeric targets: the outputs and side values */
        MD_TRY(md_model_opts_set(mo, "num_outputs", s->n_out, 1));
        MD_TRY(md_model_opts_set(mo, "n_side", pk.n_side, 1));
        *reload = 1;
        return MD_OK;
    }
    forecast_recipe(job);
    MD_TRY(md_model_opts_set(mo, "seq_len", s->seq_len, 1));
    MD_TRY(md_model_opts_set(mo, "pred_len", s->pred_len, 1));
    MD_TRY(md_model_opts_set(mo, "n_vars", s->n_in, 1));
    MD_TRY(md_model_opts_set(mo, "n_marks", s->n_time, 1));
    /* every variate in, the target out (--features MS): a model that forecasts every variate keeps the target's */
    if (s->n_out < s->n_in) {
        MD_TRY(md_model_opts_set(mo, "target_only", 1, 1));
        MD_TRY(md_model_opts_set(mo, "target_col", s->out_col, 1));
    }
    *reload = 1;
    return MD_OK;
}

/* The job's model built again from the same config with options mo. */
static md_status load_again(md_job *job, const char *src, const cJSON *inl, const struct md_model_opts *mo)
{
    md_model_free(job->model);
    job->model = NULL;
    return md_model_load(src, inl, mo, &job->model);
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
    pick_forecasting_model(job, inl != NULL);
    const char *name = o->model[0] ? o->model : "small_cnn";
    char where[1200];
    if (inl) snprintf(where, sizeof where, "%s: model", o->config);
    const char *src = inl ? where : name;
    st = md_model_load(src, inl, &mo, &job->model);
    int reload = 0;
    if (st == MD_OK) st = fit_to_data(job, job->model, &mo, &reload);
    if (st == MD_OK && reload) st = load_again(job, src, inl, &mo);
    /* the dataset's and model's recipe where no flag decided; its dropout needs the model built again */
    if (st == MD_OK && md_recipe_apply(job)) {
        mo.dropout = o->dropout;
        st = load_again(job, src, inl, &mo);
    }
    cJSON_Delete(root);
    if (st != MD_OK) return st;
    if (mo.layout == MD_NHWC && md_model_get_opts(job->model)->layout == MD_NCHW)
        md_job_setting(job, "channels_last", "off", "the model has token-sequence layers, which run in NCHW");
    md_layout lay = md_model_get_opts(job->model)->layout;
    int pools = mo.compile && !mo.grad_ckpt && job->dev && md_dev_batchnorm_pool(job->dev, lay, mo.compute_dtype);
    if (job->dev) md_model_fuse_for(job->model, job->dev); /* the table and the report show what runs */
    if (!job->no_layer_table) md_model_print_summary(job->model);
    md_out("  layout %s, compute %s, compile %s, gradient checkpointing %s\n", md_layout_name(lay),
           md_dtype_name(mo.compute_dtype),
           !mo.compile ? "off"
           : pools     ? "on (BN+ReLU, add+ReLU and BN+ReLU+max pool fused, memory shared by lifetime)"
                       : "on (BN+ReLU and add+ReLU fused, memory shared by lifetime)",
           mo.grad_ckpt ? "on" : "off");
    cJSON *rep = md_model_summary_json(job->model);
    if (rep) cJSON_AddItemToObject(job->report, "model", rep);
    return MD_OK;
}

void md_stage_model_cleanup(md_job *job)
{
    md_model_free(job->model);
    job->model = NULL;
}
