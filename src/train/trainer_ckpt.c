/* trainer_ckpt.c - the trainer's checkpoints: which tensors go in, the
 * metadata that lets --resume continue exactly, the best and last
 * checkpoints after each epoch, the one written on an interrupt, and the
 * resume (trainer_impl.h; the file format is checkpoint.c, the metadata
 * checks ckpt_meta.c, the folder run_dir.c). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/outfile.h"
#include "core/signals.h"
#include "nn/model.h"
#include "train/checkpoint.h"
#include "train/ckpt_meta.h"
#include "train/trainer_impl.h"

#define CKPT_FORMAT "mpsdiag-checkpoint-1"

/* Parameters (views into the flat buffer), buffers and optimizer state, in
 * a fixed order, with the convolution filters inside each: a conv weight is
 * one, and the optimizer state mirrors the flat parameter buffer, so it
 * holds all of them at their flat offsets. *out is one md_malloc'd block
 * (the filter lists follow the tensors); names are borrowed from the model. */
static md_status ckpt_tensors(md_trainer *t, struct md_ckpt_tensor **out, int *n)
{
    int np = md_model_num_tensors(t->model), nb = md_model_num_buffers(t->model);
    int dev_krsc = md_model_get_opts(t->model)->layout == MD_NHWC;
    size_t fsz = sizeof(struct md_ckpt_filter);
    size_t head = ((size_t)(np + nb + 2) * sizeof(struct md_ckpt_tensor) + fsz - 1) / fsz * fsz;
    char *block = md_calloc(1, head + 2 * (size_t)(np + 1) * fsz);
    if (!block) return MD_ERR_OOM;
    struct md_ckpt_tensor *v = (struct md_ckpt_tensor *)(void *)block;
    struct md_ckpt_filter *own = (struct md_ckpt_filter *)(void *)(block + head), *flat = own + np + 1;
    int nflat = 0, k = 0;
    float *params = md_model_params(t->model);
    for (int i = 0; i < np; i++) {
        const struct md_param_info *p = md_model_tensor(t->model, i);
        v[k] = (struct md_ckpt_tensor){.name = p->name, .dtype = MD_F32, .ndim = p->ndim, .dev = params + p->offset};
        for (int d = 0; d < p->ndim; d++) v[k].shape[d] = p->shape[d];
        if (p->ndim == 4) { /* conv weight (K, C/g, R, S) */
            own[i] = (struct md_ckpt_filter){0, p->shape[0], p->shape[1], p->shape[2] * p->shape[3]};
            flat[nflat] = own[i];
            flat[nflat++].offset = p->offset;
            v[k].filters = &own[i];
            v[k].nfilters = 1;
            v[k].dev_krsc = dev_krsc;
        }
        k++;
    }
    for (int i = 0; i < nb; i++) {
        const struct md_param_info *b = md_model_buffer(t->model, i);
        v[k] = (struct md_ckpt_tensor){.name = b->name, .dtype = MD_F32, .ndim = b->ndim,
                                       .dev = md_model_bn_stats(t->model) + b->offset};
        for (int d = 0; d < b->ndim; d++) v[k].shape[d] = b->shape[d];
        k++;
    }
    long long n_all = (long long)md_optim_size(t->opt);
    MD_ASSERT(n_all <= 0 || (size_t)n_all == md_model_nparams(t->model));
    if (n_all > 0) {
        v[k++] = (struct md_ckpt_tensor){.name = "__optim__.m", .dtype = MD_F32, .ndim = 1, .shape = {n_all},
                                         .dev = md_optim_m(t->opt), .filters = flat, .nfilters = nflat,
                                         .dev_krsc = dev_krsc};
        if (md_optim_v(t->opt))
            v[k++] = (struct md_ckpt_tensor){.name = "__optim__.v", .dtype = MD_F32, .ndim = 1, .shape = {n_all},
                                             .dev = md_optim_v(t->opt), .filters = flat, .nfilters = nflat,
                                             .dev_krsc = dev_krsc};
    }
    *out = v;
    *n = k;
    return MD_OK;
}

static void meta_num(cJSON *m, const char *key, double v)
{
    char b[64];
    snprintf(b, sizeof b, "%.17g", v);
    cJSON_AddStringToObject(m, key, b);
}

static void meta_ll(cJSON *m, const char *key, long long v)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", v);
    cJSON_AddStringToObject(m, key, b);
}

/* Config of the run as JSON text (options that shape the result). */
static char *run_config_json(const md_trainer *t)
{
    const struct md_train_opts *o = t->o;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "model", o->model);
    cJSON_AddStringToObject(c, "dataset", md_data_name(t->data));
    /* the global batch: a checkpoint resumes with any number of ranks that
     * keeps it (ranks x --batch-size) */
    cJSON_AddNumberToObject(c, "batch_size", (double)t->batch * (t->ranks > 1 ? t->ranks : 1));
    cJSON_AddNumberToObject(c, "epochs", o->epochs);
    cJSON_AddNumberToObject(c, "steps", o->steps);
    cJSON_AddStringToObject(c, "optimizer", o->optimizer);
    cJSON_AddNumberToObject(c, "lr", t->lr);
    cJSON_AddNumberToObject(c, "momentum", o->momentum);
    cJSON_AddBoolToObject(c, "nesterov", o->nesterov);
    cJSON_AddNumberToObject(c, "weight_decay", o->weight_decay);
    cJSON_AddBoolToObject(c, "decay_all", o->decay_all);
    cJSON_AddStringToObject(c, "lradj", o->lradj);
    cJSON_AddNumberToObject(c, "warmup_epochs", o->warmup_epochs);
    cJSON_AddNumberToObject(c, "grad_clip", o->grad_clip);
    cJSON_AddNumberToObject(c, "label_smoothing", o->label_smoothing);
    cJSON_AddStringToObject(c, "precision", md_precision_name(o->precision));
    /* dropout < 0: the model config's; augmentation and samples change the data seen */
    cJSON_AddNumberToObject(c, "dropout", o->dropout);
    cJSON_AddBoolToObject(c, "augment", o->augment);
    cJSON_AddNumberToObject(c, "max_samples", o->max_samples);
    cJSON_AddNumberToObject(c, "val_split", o->val_split);
    cJSON_AddBoolToObject(c, "tf32", o->tf32);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    cJSON_AddStringToObject(c, "seed", seed);
    char *s = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    return s;
}

/* Writes the checkpoint at `path`: the state after `epoch_done` whole epochs
 * plus `batch_done` batches of the next one. */
static md_status save_checkpoint(md_trainer *t, const char *path, int epoch, long long batch_done, double ep_time);

md_status md_trainer_save_checkpoint(md_trainer *t, const char *path, int epoch, long long batch_done, double ep_time)
{
    /* a second Ctrl-C while the file is written waits for it (the run then
     * stops as the first asked), so the interrupt's checkpoint is not lost */
    md_signals_hold(1);
    md_status st = save_checkpoint(t, path, epoch, batch_done, ep_time);
    md_signals_hold(0);
    return st;
}

static md_status save_checkpoint(md_trainer *t, const char *path, int epoch, long long batch_done, double ep_time)
{
    struct md_ckpt_tensor *v = NULL;
    int n = 0;
    MD_TRY(ckpt_tensors(t, &v, &n));
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "format", CKPT_FORMAT);
    char *cfg = run_config_json(t);
    cJSON_AddStringToObject(m, "config", cfg ? cfg : "{}");
    cJSON_free(cfg);
    cJSON_AddStringToObject(m, "model", t->o->model);
    /* the tensors are in PyTorch's layout (md_checkpoint_save says so); the
     * device's is a fact of the run, and a resume may use the other */
    cJSON_AddStringToObject(m, "device_layout", md_layout_name(md_model_get_opts(t->model)->layout));
    cJSON_AddStringToObject(m, "optimizer", t->ocfg.kind == MD_OPT_ADAMW ? "adamw" : "sgd");
    meta_ll(m, "epoch", epoch);
    meta_ll(m, "batch_in_epoch", batch_done);
    meta_ll(m, "global_step", t->global_step);
    meta_ll(m, "optimizer_step", md_optim_steps(t->opt));
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->o->seed);
    cJSON_AddStringToObject(m, "seed", seed);
    cJSON_AddStringToObject(m, "rng", "counter-based: (seed, epoch, position) for data, (seed, global_step) for dropout");
    meta_num(m, "loss_scale", t->scaler.scale);
    meta_ll(m, "loss_scale_clean_steps", t->scaler.clean);
    meta_ll(m, "skipped_steps", t->scaler.skipped);
    meta_num(m, "epoch_loss_sum", t->ep_loss);
    meta_ll(m, "epoch_correct", t->ep_correct);
    meta_ll(m, "epoch_seen", t->ep_seen);
    meta_num(m, "epoch_time_s", ep_time);
    meta_num(m, "run_time_s", t->run_time);
    meta_num(m, "best_val_acc", t->best_acc);
    meta_ll(m, "best_epoch", t->best_epoch);
    char *curves = cJSON_PrintUnformatted(t->curves);
    cJSON_AddStringToObject(m, "curves", curves ? curves : "{}");
    cJSON_free(curves);
    /* regression targets' scaler: the outputs are standardised, original =
     * output * std + mean (JSON text: [{name, mean, std}, ...]) */
    const double *tm = md_data_target_mean(t->data), *ts = md_data_target_std(t->data);
    if (t->regress && tm && ts) {
        cJSON *a = cJSON_CreateArray();
        for (int j = 0; a && j < t->ser.n_out; j++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", md_data_target_name(t->data, j));
            cJSON_AddNumberToObject(e, "mean", tm[j]);
            cJSON_AddNumberToObject(e, "std", ts[j]);
            cJSON_AddItemToArray(a, e);
        }
        char *txt = a ? cJSON_PrintUnformatted(a) : NULL;
        if (txt) cJSON_AddStringToObject(m, "target_scaler", txt);
        cJSON_free(txt);
        cJSON_Delete(a);
    }
    md_status st = md_checkpoint_save(t->dev, path, v, n, m);
    cJSON_Delete(m);
    md_free(v);
    return st;
}

/* Settings that change the result: a resumed run should use the same ones. */
static void warn_config_changes(const md_trainer *t, const cJSON *ck, const char *path)
{
    static const char *const keys[] = {"model", "dataset", "optimizer", "lr", "momentum", "nesterov",
                                       "weight_decay", "decay_all", "lradj", "warmup_epochs", "grad_clip",
                                       "label_smoothing", "precision", "seed", "steps", "dropout", "augment",
                                       "max_samples", "val_split", "tf32"};
    char *now_s = run_config_json(t);
    cJSON *now = now_s ? cJSON_Parse(now_s) : NULL;
    cJSON_free(now_s);
    for (size_t i = 0; ck && now && i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *a = cJSON_GetObjectItem(ck, keys[i]), *b = cJSON_GetObjectItem(now, keys[i]);
        if (!a || !b || cJSON_Compare(a, b, 1)) continue;
        char *as = cJSON_PrintUnformatted(a), *bs = cJSON_PrintUnformatted(b);
        md_warn("--resume %s: the checkpoint was trained with %s %s, this run uses %s (the result will differ from "
                "an uninterrupted run)",
                path, keys[i], as ? as : "?", bs ? bs : "?");
        cJSON_free(as);
        cJSON_free(bs);
    }
    cJSON_Delete(now);
}

md_status md_trainer_resume(md_trainer *t)
{
    const char *path = t->o->resume;
    struct md_ckpt_tensor *v = NULL;
    int n = 0;
    md_st_file *f = NULL;
    struct md_ckpt_meta meta = {0};
    md_status st = ckpt_tensors(t, &v, &n);
    if (st != MD_OK) return st;
    if ((st = md_st_open(path, &f)) != MD_OK) goto done;
    const char *fmt = md_st_meta(f, "format");
    if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0) {
        st = md_errf(MD_ERR_DATA, "--resume %s: not an mpsdiag checkpoint (metadata format is '%s')", path,
                     fmt ? fmt : "missing");
        goto done;
    }
    const char *opt = md_st_meta(f, "optimizer");
    const char *want = t->ocfg.kind == MD_OPT_ADAMW ? "adamw" : "sgd";
    if (!opt || strcmp(opt, want) != 0) {
        st = md_errf(MD_ERR_DATA, "--resume %s: checkpoint was trained with optimizer '%s', this run uses '%s'", path,
                     opt ? opt : "?", want);
        goto done;
    }
    /* every metadata field checked before any is used (and the batch size,
     * which fixes what "batch N of epoch E" means); the layout may differ:
     * checkpoints hold PyTorch's and md_checkpoint_load converts */
    struct md_ckpt_limits lim = {t->steps_per_epoch, t->batch * (t->ranks > 1 ? t->ranks : 1),
                                 t->regress ? md_trainer_curve_keys_regress : md_trainer_curve_keys, t->ranks};
    if ((st = md_ckpt_meta_read(f, &lim, &meta)) != MD_OK) goto done;
    warn_config_changes(t, meta.config, path);
    md_st_close(f);
    f = NULL;
    if ((st = md_checkpoint_load(t->dev, path, v, n, &f)) != MD_OK) goto done;
    if ((st = md_model_params_changed(t->model)) != MD_OK) goto done;
    t->epoch = (int)meta.epoch;
    t->resume_batch = meta.batch_in_epoch;
    t->global_step = meta.global_step;
    md_optim_set_steps(t->opt, meta.optimizer_step);
    if (t->scaler.enabled) {
        t->scaler.scale = (float)meta.loss_scale;
        t->scaler.clean = meta.loss_scale_clean_steps;
    }
    t->scaler.skipped = meta.skipped_steps;
    t->ep_loss = meta.epoch_loss_sum;
    t->ep_correct = meta.epoch_correct;
    t->ep_seen = meta.epoch_seen;
    t->ep_time_before = meta.epoch_time_s;
    t->run_time = meta.run_time_s;
    t->best_acc = meta.best_val_acc;
    t->best_epoch = (int)meta.best_epoch;
    if (meta.curves) {
        cJSON_ReplaceItemInObject(t->report, "curves", meta.curves);
        t->curves = meta.curves;
        meta.curves = NULL;
    }
    if (t->resume_batch == 0)
        md_out("  Resumed from %s: after epoch %d (step %lld)\n", path, t->epoch, t->global_step);
    else
        md_out("  Resumed from %s: epoch %d after batch %lld (step %lld)\n", path, t->epoch + 1, t->resume_batch,
               t->global_step);
done:
    md_ckpt_meta_free(&meta);
    md_st_close(f);
    md_free(v);
    if (st != MD_OK && st != MD_ERR_OOM) md_err_prefix("--resume");
    return st;
}

/* `where` describes the point ("during validation after epoch 2 (batch 3
 * of 10)"); NULL: at the current epoch and step. */
md_status md_trainer_interrupted(md_trainer *t, long long batch_done, double ep_time, const char *where)
{
    md_progress_done();
    char at[512];
    if (where) snprintf(at, sizeof at, "%s", where);
    else snprintf(at, sizeof at, "at epoch %d, step %lld", t->epoch + 1, t->global_step);
    if (t->last_path[0]) {
        md_status st = md_trainer_save_checkpoint(t, t->last_path, t->epoch, batch_done, ep_time);
        if (st != MD_OK) {
            md_err_prefix("interrupted, and the checkpoint could not be written");
            return st;
        }
        md_out("  Interrupted %s: checkpoint written to %s (continue with --resume %s)\n", at, t->last_path,
               t->last_path);
        cJSON_AddStringToObject(t->report, "interrupted_checkpoint", t->last_path);
        return md_errf(MD_ERR_INTERRUPTED, "interrupted %s; checkpoint %s (continue with --resume)", at, t->last_path);
    }
    return md_errf(MD_ERR_INTERRUPTED, "interrupted %s (no --checkpoint-dir: nothing saved)", at);
}

/* The best model by validation accuracy (training accuracy without a
 * validation split). */
md_status md_trainer_keep_best(md_trainer *t, double score)
{
    md_status st = MD_OK;
    int best = score > t->best_acc;
    if (best) {
        t->best_acc = score;
        t->best_epoch = t->epoch + 1;
        /* --patience scores the test split with these weights */
        if (t->d_best) {
            MD_TRY(md_dev_copy(t->dev, t->d_best, md_model_params(t->model),
                               md_model_nparams(t->model) * sizeof(float)));
            if (md_model_bn_stats_count(t->model))
                MD_TRY(md_dev_copy(t->dev, t->d_best_bn, md_model_bn_stats(t->model),
                                   md_model_bn_stats_count(t->model) * sizeof(float)));
        }
    }
    if (t->best_path[0]) {
        /* state after this epoch: the next run starts at epoch + 1, batch 0 */
        t->ep_loss = 0;
        t->ep_correct = t->ep_seen = 0;
        /* the best is this same state: a second name for the file just
         * written (written again where the file system has no hard links) */
        st = md_trainer_save_checkpoint(t, t->last_path, t->epoch + 1, 0, 0);
        if (st == MD_OK && best) {
            md_signals_hold(1);
            st = md_outfile_link(t->last_path, t->best_path);
            md_signals_hold(0);
            if (st == MD_ERR_UNSUPPORTED) st = md_trainer_save_checkpoint(t, t->best_path, t->epoch + 1, 0, 0);
        }
        if (st != MD_OK) return st;
        if (best && t->regress)
            md_out("  Saved best model (epoch %d, %s loss %.4f) to %s\n", t->epoch + 1,
                   t->val_l ? "validation" : "training", md_trainer_score_loss(score), t->best_path);
        else if (best)
            md_out("  Saved best model (epoch %d, %s accuracy %.2f%%) to %s\n", t->epoch + 1,
                   t->val_l ? "validation" : "training", 100 * score, t->best_path);
    }
    return MD_OK;
}

/* Back to the best epoch's weights (kept by keep_best with --patience). */
md_status md_trainer_restore_best(md_trainer *t)
{
    if (!t->d_best || t->best_epoch <= 0) return MD_OK;
    MD_TRY(md_dev_copy(t->dev, md_model_params(t->model), t->d_best, md_model_nparams(t->model) * sizeof(float)));
    if (md_model_bn_stats_count(t->model))
        MD_TRY(md_dev_copy(t->dev, md_model_bn_stats(t->model), t->d_best_bn,
                           md_model_bn_stats_count(t->model) * sizeof(float)));
    return md_model_params_changed(t->model);
}
