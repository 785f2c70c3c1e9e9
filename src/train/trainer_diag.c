/* trainer_diag.c - the per-epoch diagnostics of report.training.diagnostics:
 * per-tensor gradient and weight norms, update ratios, dead ReLUs and the
 * weights of weighted_add layers (trainer_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>

#include "core/mem.h"
#include "nn/model.h"
#include "train/trainer_impl.h"

/* The learned weights of weighted_add layers (the MPS guides' "integration
 * weights"), downloaded into d["integration_weights"]. */
static md_status integration_weights(md_trainer *t, cJSON *d)
{
    cJSON *iw = NULL;
    float *params = md_model_params(t->model);
    for (int i = 0; i < md_model_num_tensors(t->model); i++) {
        const struct md_param_info *p = md_model_tensor(t->model, i);
        if (!p->layer_type || strcmp(p->layer_type, "weighted_add") != 0) continue;
        float h[16];
        size_t n = p->numel < 16 ? p->numel : 16;
        MD_TRY(md_dev_download(t->dev, h, params + p->offset, n * sizeof(float)));
        MD_TRY(md_dev_sync(t->dev));
        if (!iw) iw = cJSON_AddObjectToObject(d, "integration_weights");
        cJSON *a = cJSON_AddArrayToObject(iw, p->name);
        for (size_t k = 0; k < n; k++) cJSON_AddItemToArray(a, cJSON_CreateNumber(h[k]));
    }
    return MD_OK;
}

/* Per-parameter-tensor sums of squares of grads, weights and the last update
 * (params - d_scratch, computed in d_scratch) into d_diag, then one download. */
md_status md_trainer_diagnostics(md_trainer *t, int have_update)
{
    int nt = md_model_num_tensors(t->model);
    float *params = md_model_params(t->model), *grads = md_model_grads(t->model);
    size_t n = md_model_nparams(t->model);
    if (have_update) {
        struct md_ew_args e = {.op = MD_EW_AXPBY, .n = n, .dtype = MD_F32, .alpha = 1.0f, .beta = -1.0f,
                               .a = params, .b = t->d_scratch, .y = t->d_scratch};
        MD_TRY(md_k_ew(t->dev, &e));
    }
    for (int i = 0; i < nt; i++) {
        const struct md_param_info *p = md_model_tensor(t->model, i);
        const float *src[3] = {grads + p->offset, params + p->offset, t->d_scratch + p->offset};
        for (int k = 0; k < 3; k++) {
            struct md_reduce_args r = {.op = MD_RED_SUMSQ, .n = p->numel, .dtype = MD_F32, .a = src[k],
                                       .out = t->d_diag + 3 * i + k, .beta = 0.0f};
            MD_TRY(md_k_reduce(t->dev, &r));
        }
    }
    float *h = md_malloc((size_t)(3 * nt + 1) * sizeof(float));
    if (!h) return MD_ERR_OOM;
    md_status st = md_dev_download(t->dev, h, t->d_diag, (size_t)(3 * nt) * sizeof(float));
    if (st == MD_OK) st = md_dev_sync(t->dev);
    if (st != MD_OK) {
        md_free(h);
        return st;
    }
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "epoch", t->epoch + 1);
    cJSON *layers = cJSON_AddArrayToObject(d, "params");
    /* the gradients hold loss_scale x the true gradient */
    double gs = 1.0 / (double)t->scaler.scale;
    for (int i = 0; i < nt; i++) {
        const struct md_param_info *p = md_model_tensor(t->model, i);
        double gn = sqrt((double)h[3 * i]) * gs, wn = sqrt((double)h[3 * i + 1]), un = sqrt((double)h[3 * i + 2]);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", p->name);
        cJSON_AddNumberToObject(o, "grad_norm", gn);
        cJSON_AddNumberToObject(o, "weight_norm", wn);
        if (have_update && wn > 0) cJSON_AddNumberToObject(o, "update_ratio", un / wn);
        else cJSON_AddNullToObject(o, "update_ratio");
        cJSON_AddItemToArray(layers, o);
    }
    md_free(h);
    cJSON_AddItemToArray(t->diags, d);
    /* dead ReLUs on the epoch's last batch (an evaluation-mode replay: no side effects) */
    struct md_relu_stat rs[256];
    int nr = 0;
    MD_TRY(md_model_relu_stats(t->model, rs, 256, &nr));
    cJSON *relu = cJSON_AddArrayToObject(d, "relu");
    for (int i = 0; i < nr && i < 256; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "layer", rs[i].layer);
        cJSON_AddNumberToObject(o, "dead_share", rs[i].dead_share);
        cJSON_AddNumberToObject(o, "zero_share", rs[i].zero_share);
        cJSON_AddItemToArray(relu, o);
    }
    return integration_weights(t, d);
}
