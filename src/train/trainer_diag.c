/* trainer_diag.c - the per-epoch diagnostics of report.training.diagnostics:
 * per-tensor gradient and weight norms, update ratios, the weights of
 * weighted_add layers, the step phases of the epoch, and the probe (dead
 * units per activation layer, pathway balance of fusions) on one fixed batch
 * (trainer_impl.h; docs/training.md "Per-epoch diagnostics"). */
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

/* ---- the epoch's step phases --------------------------------------------------------- */

static void phase_add(cJSON *ph, const char *key, double secs, double total)
{
    cJSON *o = cJSON_AddObjectToObject(ph, key);
    cJSON_AddNumberToObject(o, "seconds", secs);
    cJSON_AddNumberToObject(o, "share", total > 0 ? secs / total : 0.0);
}

/* d["phases"]: host seconds of the epoch's training steps by phase
 * (docs/training.md "Per-epoch diagnostics"). */
static void phases_report(md_trainer *t, cJSON *d)
{
    cJSON *ph = cJSON_AddObjectToObject(d, "phases");
    double el = t->ph_epoch;
    cJSON_AddNumberToObject(ph, "steps_s", el);
    cJSON_AddStringToObject(ph, "step_mode", t->ph_replays ? "graph" : t->ph_pipe_steps ? "pipelined" : "host_synced");
    int async = md_device_kind(t->dev) != MD_BACKEND_CPU && md_device_kind(t->dev) != MD_BACKEND_REF;
    cJSON_AddBoolToObject(ph, "device_async", async);
    phase_add(ph, "data_wait", t->ph_load, el);
    phase_add(ph, "upload", t->ph_upload, el);
    double measured = t->ph_load + t->ph_upload + t->ph_sync;
    if (t->ph_pipe_steps) {
        /* a pipelined step (a replayed graph, or its kernels queued with no sync
         * between them) has no boundary the host can see between its parts */
        double fbo = t->ph_step + t->ph_fwd + t->ph_bwd + t->ph_opt;
        cJSON_AddNullToObject(ph, "forward");
        cJSON_AddNullToObject(ph, "backward");
        cJSON_AddNullToObject(ph, "optimizer");
        cJSON *c = cJSON_AddObjectToObject(ph, "combined");
        cJSON *names = cJSON_AddArrayToObject(c, "phases");
        cJSON_AddItemToArray(names, cJSON_CreateString("forward"));
        cJSON_AddItemToArray(names, cJSON_CreateString("backward"));
        cJSON_AddItemToArray(names, cJSON_CreateString("optimizer"));
        cJSON_AddNumberToObject(c, "seconds", fbo);
        cJSON_AddNumberToObject(c, "share", el > 0 ? fbo / el : 0.0);
        cJSON_AddStringToObject(c, "reason",
                                t->ph_replays ? "the step runs forward, backward and optimizer as one replayed CUDA "
                                                "graph: the host cannot time its parts"
                                              : "pipelined steps queue forward, backward and optimizer with no sync "
                                                "between them: the host cannot time their parts");
        measured += fbo;
    } else {
        phase_add(ph, "forward", t->ph_fwd, el);
        phase_add(ph, "backward", t->ph_bwd, el);
        phase_add(ph, "optimizer", t->ph_opt, el);
        cJSON_AddNullToObject(ph, "combined");
        measured += t->ph_fwd + t->ph_bwd + t->ph_opt;
    }
    phase_add(ph, "sync", t->ph_sync, el);
    phase_add(ph, "other", el > measured ? el - measured : 0.0, el);
}

/* ---- the per-epoch probe -------------------------------------------------------------- */

#define PROBE_MAX 64 /* samples of the probe batch */

/* Takes the probe batch once: the first batch of the validation split (of
 * the training split's first epoch without one), at most PROBE_MAX samples.
 * A failure leaves no probe (the probe's fields say so). */
static void probe_take(md_trainer *t)
{
    t->probe_taken = 1;
    struct md_loader *l = t->val_l ? t->val_l : t->train_l;
    struct md_batch *b = NULL;
    if (md_loader_start_epoch(l, 0) != MD_OK || md_loader_next(l, &b) != MD_OK || !b) return;
    int n = b->n < PROBE_MAX ? b->n : PROBE_MAX;
    int ok = n > 0;
    for (int i = 0; ok && i < t->ninputs; i++) {
        t->probe_in[i] = md_malloc((size_t)n * t->in_elems[i] * sizeof(float) + 4);
        if (!t->probe_in[i]) ok = 0;
        else memcpy(t->probe_in[i], b->inputs[i], (size_t)n * t->in_elems[i] * sizeof(float));
    }
    md_loader_release(l, b);
    if (ok) {
        t->probe_n = n;
        t->probe_split = t->val_l ? "validation" : "training";
    }
}

/* d["probe"], d["dead_units"], d["pathway_balance"] and (ReLU layers only)
 * d["relu"], from one evaluation forward over the probe batch. */
static md_status probe_report(md_trainer *t, cJSON *d)
{
    if (!t->probe_taken) probe_take(t);
    int n = t->probe_n < md_model_max_batch(t->model) ? t->probe_n : md_model_max_batch(t->model);
    cJSON *pr = cJSON_AddObjectToObject(d, "probe");
    cJSON_AddNumberToObject(pr, "samples", n);
    if (n > 0) cJSON_AddStringToObject(pr, "split", t->probe_split);
    else cJSON_AddNullToObject(pr, "split");
    cJSON_AddNumberToObject(pr, "dead_threshold", MD_DEAD_THRESHOLD);
    cJSON *dead = cJSON_AddArrayToObject(d, "dead_units");
    cJSON *relu = cJSON_AddArrayToObject(d, "relu");
    cJSON *bal = cJSON_AddArrayToObject(d, "pathway_balance");
    if (n <= 0) return MD_OK;
    for (int i = 0; i < t->ninputs; i++)
        MD_TRY(md_dev_upload(t->dev, md_model_input_buffer(t->model, i), t->probe_in[i],
                             (size_t)n * t->in_elems[i] * sizeof(float)));
    enum { MAXA = 256, MAXF = 32 };
    struct md_act_stat *as = md_malloc(MAXA * sizeof *as);
    struct md_fusion_stat *fs = md_malloc(MAXF * sizeof *fs);
    int na = 0, nf = 0;
    md_status st = as && fs ? md_model_probe_stats(t->model, n, as, MAXA, &na, fs, MAXF, &nf) : MD_ERR_OOM;
    if (st == MD_OK) {
        for (int i = 0; i < na && i < MAXA; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "layer", as[i].layer);
            cJSON_AddStringToObject(o, "activation", as[i].activation);
            cJSON_AddNumberToObject(o, "units", as[i].units);
            cJSON_AddNumberToObject(o, "dead_share", as[i].dead_share);
            cJSON_AddNumberToObject(o, "zero_share", as[i].zero_share);
            cJSON_AddItemToArray(dead, o);
            if (strcmp(as[i].activation, "relu") != 0) continue;
            o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "layer", as[i].layer);
            cJSON_AddNumberToObject(o, "dead_share", as[i].dead_share);
            cJSON_AddNumberToObject(o, "zero_share", as[i].zero_share);
            cJSON_AddItemToArray(relu, o);
        }
        for (int i = 0; i < nf && i < MAXF; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "layer", fs[i].layer);
            cJSON_AddStringToObject(o, "kind", fs[i].kind);
            cJSON *ins = cJSON_AddArrayToObject(o, "inputs");
            for (int k = 0; k < fs[i].nin; k++) {
                cJSON *x = cJSON_CreateObject();
                cJSON_AddStringToObject(x, "input", fs[i].input[k]);
                cJSON_AddNumberToObject(x, "weight", fs[i].weight[k]);
                cJSON_AddNumberToObject(x, "mean_abs", fs[i].mean_abs[k]);
                cJSON_AddNumberToObject(x, "share", fs[i].share[k]);
                cJSON_AddItemToArray(ins, x);
            }
            cJSON_AddItemToArray(bal, o);
        }
    }
    md_free(as);
    md_free(fs);
    return st;
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
    phases_report(t, d);
    /* after the norms: the probe's forward leaves the gradients alone but
     * refills the input buffers */
    MD_TRY(probe_report(t, d));
    return integration_weights(t, d);
}
