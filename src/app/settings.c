/* settings.c - the settings that change a run's result, recorded with their
 * reasons in report.settings and printed in the Settings section (settings.h). */
#include "app/settings.h"

#include <stdio.h>
#include <string.h>

#include "app/run_info.h"
#include "core/dist.h"
#include "core/log.h"
#include "data/data.h"
#include "nn/model.h"

#define NAME_W 18
#define VALUE_W 14
#define LINE_W 100

/* Records name = value. `flag` names the option: when it was given the reason
 * starts with it, else with "default". A setting a stage already recorded
 * (the diagnostics run's recipe) keeps its reason, gets `effect` added and
 * moves to the end of the list. */
static void put(md_job *job, const char *name, const char *value, const char *flag, const char *effect)
{
    char why[600];
    cJSON *old = md_job_find_setting(job, name);
    if (old) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(old, "why");
        snprintf(why, sizeof why, "%s%s%s", cJSON_IsString(w) ? w->valuestring : "",
                 effect && *effect ? "; " : "", effect ? effect : "");
        cJSON_ReplaceItemInObjectCaseSensitive(old, "value", cJSON_CreateString(value));
        cJSON_ReplaceItemInObjectCaseSensitive(old, "why", cJSON_CreateString(why));
        /* to the end: printed with the settings decided now (md_settings_print's `from`) */
        cJSON_AddItemToArray(job->settings, cJSON_DetachItemViaPointer(job->settings, old));
        return;
    }
    int given = flag && md_options_given(job->opts, flag);
    if (flag)
        snprintf(why, sizeof why, "%s%s%s%s", given ? "--" : "default", given ? flag : "",
                 effect && *effect ? "; " : "", effect ? effect : "");
    else
        snprintf(why, sizeof why, "%s", effect ? effect : "");
    md_job_setting(job, name, value, why);
}

static const char *fmt_num(double v, char *b, size_t n)
{
    snprintf(b, n, "%.10g", v);
    return b;
}

static void optimizer_settings(md_job *job)
{
    const md_options *o = job->opts;
    char v[64], why[400];
    int adamw = strcmp(o->optimizer, "adamw") == 0;
    put(job, "optimizer", o->optimizer, "optimizer",
        adamw ? "AdamW (decoupled weight decay)" : "SGD with momentum");
    double lr = o->lr > 0 ? o->lr : adamw ? 1e-3 : 0.1;
    put(job, "lr", fmt_num(lr, v, sizeof v), "lr",
        o->lr > 0 ? "peak learning rate" : "peak learning rate: 0.1 for SGD, 1e-3 for AdamW");
    const char *sched = strcmp(o->lradj, "constant") == 0 ? "the same rate throughout"
                        : strcmp(o->lradj, "step") == 0   ? "x0.1 at 50% and again at 75% of the epochs"
                        : strcmp(o->lradj, "onecycle") == 0
                            ? "PyTorch's OneCycleLR: up from lr/25 over 30% of the steps, then down"
                        : strcmp(o->lradj, "type1") == 0 ? "halved at every epoch's start"
                                                         : "cosine decay to 0 over all steps";
    put(job, "lr_schedule", o->lradj, "lradj", sched);
    snprintf(why, sizeof why, "%s",
             o->warmup_epochs > 0 ? "linear warm-up of the learning rate from 0" : "no warm-up");
    put(job, "warmup_epochs", fmt_num(o->warmup_epochs, v, sizeof v), "warmup-epochs", why);
    if (adamw) {
        put(job, "momentum", "n/a", NULL, "AdamW uses betas 0.9 and 0.999 (fixed), not SGD momentum");
        put(job, "nesterov", "n/a", NULL, "SGD only");
    } else {
        put(job, "momentum", fmt_num(o->momentum, v, sizeof v), "momentum", "SGD momentum");
        put(job, "nesterov", o->nesterov ? "on" : "off", "nesterov", o->nesterov ? "Nesterov momentum" : "");
    }

    /* what weight decay applies to: the model's conv and linear weights */
    long long dec = 0, all = 0;
    for (int i = 0; job->model && i < md_model_num_tensors(job->model); i++) {
        const struct md_param_info *p = md_model_tensor(job->model, i);
        all += (long long)p->numel;
        if (o->decay_all || p->decay) dec += (long long)p->numel;
    }
    char a[32], b[32];
    if (o->weight_decay == 0)
        snprintf(why, sizeof why, "no weight decay");
    else if (!job->model)
        snprintf(why, sizeof why, "on %s",
                 o->decay_all ? "every parameter (--decay-all)"
                              : "conv and linear weights, not BatchNorm or biases");
    else
        snprintf(why, sizeof why, "%son %s of %s parameters: %s", adamw ? "decoupled, " : "",
                 md_fmt_thousands(dec, a, sizeof a), md_fmt_thousands(all, b, sizeof b),
                 o->decay_all
                     ? "every one (--decay-all)"
                     : "conv and linear weights, not BatchNorm or biases (--decay-all for those too)");
    put(job, "weight_decay", fmt_num(o->weight_decay, v, sizeof v), "weight-decay", why);
    put(job, "grad_clip", o->grad_clip > 0 ? fmt_num(o->grad_clip, v, sizeof v) : "off", "grad-clip",
        o->grad_clip > 0 ? "gradients clipped to this global norm" : "no gradient clipping");
    put(job, "label_smoothing", fmt_num(o->label_smoothing, v, sizeof v), "label-smoothing",
        o->label_smoothing > 0 ? "cross-entropy against smoothed targets" : "plain cross-entropy");
}

static void model_settings(md_job *job)
{
    const md_options *o = job->opts;
    char v[64], why[200];
    double lo = 0, hi = 0;
    int n = job->model ? md_model_dropout(job->model, &lo, &hi) : -1;
    if (md_job_find_setting(job, "dropout")) {
        /* the recipe's, with its reason */
    } else if (md_options_given(o, "dropout")) {
        snprintf(why, sizeof why, "--dropout: every dropout layer%s", n == 0 ? " (this model has none)" : "");
        put(job, "dropout", fmt_num(o->dropout, v, sizeof v), NULL, why);
    } else if (n < 0) {
        put(job, "dropout", "model's", NULL, "the model config's probabilities");
    } else if (n == 0) {
        put(job, "dropout", "none", NULL, "the model has no dropout layers");
    } else {
        if (lo == hi)
            snprintf(v, sizeof v, "%g", lo);
        else
            snprintf(v, sizeof v, "%g-%g", lo, hi);
        snprintf(why, sizeof why, "the model config's (%d dropout layer%s; --dropout to change)", n,
                 n == 1 ? "" : "s");
        put(job, "dropout", v, NULL, why);
    }
    put(job, "compile_mode", o->compile_mode, "compile-mode",
        !o->compile ? "not used: --no-compile"
        : md_device_kind(job->dev) == MD_BACKEND_CUDA
            ? (strcmp(o->compile_mode, "max-autotune") == 0 ? "cuDNN plans chosen by timing the candidates"
                                                            : "cuDNN's heuristics choose the algorithms")
            : "no effect beyond compile itself on this device");
    if (o->reduce_architecture)
        put(job, "reduce_arch", "on", NULL, "--reduce-architecture: half-width layers");
    if (o->init_from[0]) {
        put(job, "init_from", o->init_from, NULL, "--init-from: initial weights from this file, by name");
        put(job, "init_names", o->init_names, "init-names",
            strcmp(o->init_names, "auto") == 0 ? "tensor names detected from the file's keys" : "tensor names as given");
    }
    if (o->freeze[0]) put(job, "freeze", o->freeze, NULL, "--freeze: these parameters take no optimizer step");
    if (o->backbone_lr > 0) {
        char lr[32];
        snprintf(lr, sizeof lr, "%g", o->backbone_lr);
        put(job, "backbone_lr", lr, NULL, "--backbone-lr: peak lr of every parameter but the head (absolute)");
    }
    if (o->unfreeze_after > 0) {
        char ep[32];
        snprintf(ep, sizeof ep, "%d", o->unfreeze_after);
        put(job, "unfreeze_after", ep, NULL, "--unfreeze-after: the frozen parameters train after this many epochs");
    }
    if (o->resume[0]) put(job, "resume", o->resume, NULL, "--resume: continued from this checkpoint");
    if (o->sync_bn)
        put(job, "sync_bn", md_dist_size() > 1 ? "on" : "off", NULL,
            md_dist_size() > 1 ? "--sync-bn: batch norm statistics of the global batch, exchanged between the ranks"
                               : "--sync-bn with one rank: nothing to synchronise, batch norm is local");
}

static void data_settings(md_job *job)
{
    const md_options *o = job->opts;
    char v[64], why[200];
    if (!o->augment) {
        put(job, "augmentation", "off", NULL,
            md_options_given(o, "no-augment") ? "--no-augment: training images as they are"
                                              : "training images as they are");
    } else if (job->data) {
        int pad = md_data_aug_pad(job->data), flip = md_data_aug_flip(job->data);
        snprintf(v, sizeof v, "%s", pad && flip ? "crop+flip" : pad ? "crop" : flip ? "flip" : "none");
        if (pad && flip)
            snprintf(why, sizeof why,
                     "training batches only: random crop after padding %d, random horizontal flip", pad);
        else if (pad)
            snprintf(why, sizeof why, "training batches only: random crop after padding %d", pad);
        else if (flip)
            snprintf(why, sizeof why, "training batches only: random horizontal flip");
        else
            snprintf(why, sizeof why, "none for this dataset (the data config's augment)");
        put(job, "augmentation", v, NULL, why);
    } else {
        put(job, "augmentation", "on", NULL,
            "random crop and flip where the dataset allows (no dataset opened)");
    }
    snprintf(v, sizeof v, "%d", o->epochs);
    if (o->time_budget > 0 && o->epochs >= 100000) snprintf(v, sizeof v, "as fit");
    put(job, "epochs", v, "epochs", o->benchmark_only ? "--benchmark-only: no training" : "");
    snprintf(v, sizeof v, "%d", o->steps);
    put(job, "steps", o->steps > 0 ? v : "all", "steps",
        o->steps > 0 ? "at most this many steps per epoch" : "every batch of each epoch");
    snprintf(v, sizeof v, "%d", o->max_samples);
    put(job, "max_samples", o->max_samples > 0 ? v : "all", "max-samples",
        o->max_samples > 0 ? "training samples used" : "every training sample");
    put(job, "val_split", fmt_num(o->val_split, v, sizeof v), "val-split",
        "share of the training set held out for validation (where the dataset has no validation split)");
    if (!md_job_find_setting(job, "num_workers")) {
        snprintf(v, sizeof v, "%d", o->num_workers);
        put(job, "num_workers", o->num_workers >= 0 ? v : "auto", "num-workers", "loader threads");
    }
}

static void device_settings(md_job *job)
{
    const md_options *o = job->opts;
    char v[32];
    if (!md_job_find_setting(job, "threads")) {
        int cpu = md_device_kind(job->dev) == MD_BACKEND_CPU;
        snprintf(v, sizeof v, "%d", cpu ? md_device_get_info(job->dev)->compute_units : o->threads);
        put(job, "threads", cpu || o->threads > 0 ? v : "default", "threads",
            cpu ? "CPU threads: one pool runs every CPU kernel"
                : "the CPU backend's thread count; this device runs the model's kernels itself");
    }
    if (md_device_kind(job->dev) == MD_BACKEND_CUDA)
        put(job, "tf32", o->tf32 ? "on" : "off", NULL,
            o->tf32 ? "fp32 matrix work may use TF32 tensor cores (--no-tf32 to keep full fp32)"
                    : "--no-tf32: fp32 matrix work in full fp32");
    snprintf(v, sizeof v, "%llu", (unsigned long long)o->seed);
    put(job, "seed", v, "seed", "initialisation, shuffling, validation split, augmentation and dropout");
}

void md_settings_record_run(md_job *job)
{
    if (!job->settings || !job->dev) return;
    device_settings(job);
    optimizer_settings(job);
    model_settings(job);
    data_settings(job);
    cJSON *run = md_run_info_json(job);
    if (!run) return;
    if (cJSON_GetObjectItemCaseSensitive(job->report, "run"))
        cJSON_ReplaceItemInObjectCaseSensitive(job->report, "run", run);
    else
        cJSON_AddItemToObject(job->report, "run", run);
}

/* Prints `text` from column `col`, wrapped at LINE_W with continuation lines
 * indented to `indent`. */
static void wrap(const char *text, int col, int indent)
{
    const char *p = text;
    while (*p) {
        int room = LINE_W - col;
        if (room < 20) { /* a long value pushed the text too far right */
            md_out("\n%*s", indent, "");
            col = indent;
            room = LINE_W - col;
        }
        size_t len = strlen(p);
        size_t take = len;
        if ((int)len > room) {
            take = (size_t)room;
            while (take > 0 && p[take] != ' ')
                take--;
            if (take == 0) take = (size_t)room; /* one word longer than the line */
        }
        md_out("%.*s", (int)take, p);
        p += take;
        while (*p == ' ')
            p++;
        if (*p) {
            md_out("\n%*s", indent, "");
            col = indent;
        }
    }
    md_out("\n");
}

void md_settings_print(const cJSON *settings, int from)
{
    if (cJSON_GetArraySize(settings) <= from) return;
    md_section("Settings");
    for (const cJSON *s = cJSON_GetArrayItem(settings, from); s; s = s->next) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "name");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, "value");
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(s, "why");
        const char *name = cJSON_IsString(n) ? n->valuestring : "?";
        const char *value = cJSON_IsString(v) ? v->valuestring : "?";
        md_out("  %-*s %-*s ", NAME_W, name, VALUE_W, value);
        int col = 2 + (strlen(name) > NAME_W ? (int)strlen(name) : NAME_W) + 1 +
                  (strlen(value) > VALUE_W ? (int)strlen(value) : VALUE_W) + 1;
        wrap(cJSON_IsString(w) ? w->valuestring : "", col, 2 + NAME_W + 1 + VALUE_W + 1);
    }
}
