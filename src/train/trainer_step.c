/* trainer_step.c - the host-synced training step (one sync per step for its
 * loss, gradient norm and correct count), the batch upload and the
 * non-finite failure every step mode shares, and the one-batch passes of
 * --dump-grads and --dump-logits (trainer_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>

#include "core/dist.h"
#include "core/log.h"
#include "core/timer.h"
#include "nn/model.h"
#include "train/trainer_impl.h"

/* Samples [from, from + n) of a host batch into the model's input buffers. */
md_status md_trainer_upload_batch(md_trainer *t, const struct md_batch *b, int from, int n)
{
    for (int i = 0; i < t->ninputs; i++)
        MD_TRY(md_dev_upload(t->dev, md_model_input_buffer(t->model, i), b->inputs[i] + (size_t)from * t->in_elems[i],
                             (size_t)n * t->in_elems[i] * sizeof(float)));
    if (t->regress)
        return md_dev_upload(t->dev, t->d_targets, b->targets + (size_t)from * t->out_elems,
                             (size_t)n * t->out_elems * sizeof(float));
    return md_dev_upload(t->dev, t->d_labels, b->labels + from, (size_t)n * sizeof(int32_t));
}

int md_trainer_loss_elems(const md_trainer *t) { return t->regress ? t->out_elems : 1; }

md_status md_trainer_loss(md_trainer *t, int n, float scale, float label_smoothing)
{
    if (!t->regress) /* fp16: (1/n) x scale in fp32, as a pipelined step seeds it (trainer_pipe.c) */
        return md_model_loss(t->model, t->d_labels, label_smoothing,
                             t->scaler.enabled ? 1.0f / (float)n * scale : scale / (float)n, &t->d_sc->loss_sum,
                             &t->d_sc->correct);
    /* the forecast origin: the last row of the lookback window, columns out_col.. */
    const struct md_data_series *s = &t->ser;
    /* images with numeric targets have no forecast origin (seq_len 0) */
    const float *last = s->seq_len > 0 ? (const float *)md_model_input_buffer(t->model, 0) +
                                             (size_t)(s->seq_len - 1) * s->n_in + s->out_col
                                       : NULL;
    return md_model_regress_loss(t->model, t->d_targets, s->pred_len, s->n_out, t->rkind, 1.0f, 1.0f, last,
                                 (long long)s->seq_len * s->n_in, scale / ((float)n * (float)t->out_elems),
                                 &t->d_sc->loss_sum, t->d_sc->reg);
}

/* `step` counts from 0. */
md_status md_trainer_numeric_failure(md_trainer *t, long long step, const char *what)
{
    char layer[256] = "";
    int found = 0;
    if (md_dev_sync(t->dev) != MD_OK || md_model_first_nonfinite(t->model, layer, sizeof layer, &found) != MD_OK ||
        !found)
        layer[0] = '\0';
    return md_errf(MD_ERR_NUMERIC, "epoch %d, step %lld: %s%s%s", t->epoch + 1, step + 1, what,
                   layer[0] ? "; first non-finite output: " : "", layer);
}

/* Forward, loss, backward and (unless skipped) the optimizer step on one batch. */
md_status md_trainer_step(md_trainer *t, const struct md_batch *b, int snapshot)
{
    md_dist_test_fault(t->global_step);
    /* --sync-bn: a global batch smaller than the ranks leaves a rank without
     * samples to exchange statistics with; every rank skips it alike */
    if (t->sync_bn && md_trainer_dist_global_n(t, b->batch) < t->ranks) return MD_OK;
    double c0 = md_now();
    if (b->n) MD_TRY(md_trainer_upload_batch(t, b, 0, b->n));
    MD_TRY(md_dev_memset0(t->dev, t->d_sc, sizeof(struct step_scalars)));
    double c1 = md_now();
    md_model_set_step_dev(t->model, NULL);
    md_model_set_step(t->model, (uint64_t)t->global_step);
    float *grads = md_model_grads(t->model), *params = md_model_params(t->model);
    size_t n = md_model_nparams(t->model);
    /* mean loss, times the loss scale (fp16); with several ranks the mean
     * over the global batch, so that the ranks' sum is its gradient */
    float used_scale = t->scaler.scale;
    int mean_n = t->ranks > 1 ? md_trainer_dist_global_n(t, b->batch) : b->n;
    if (mean_n < b->n) mean_n = b->n;
    double c2 = c1;
    if (b->n) {
        MD_TRY(md_model_forward(t->model, b->n, 1));
        c2 = md_now();
        MD_TRY(md_trainer_loss(t, mean_n, used_scale, (float)t->o->label_smoothing));
        MD_TRY(md_model_backward(t->model));
    } else { /* an empty part of a short global batch: nothing to add */
        MD_TRY(md_model_grads_zero(t->model));
    }
    MD_TRY(md_trainer_dist_grads(t, grads, n));
    MD_TRY(md_optim_zero_frozen(t->opt, grads)); /* after the all-reduce, which may still read them */
    struct md_reduce_args r = {.op = MD_RED_SUMSQ, .n = n, .dtype = MD_F32, .a = grads, .out = &t->d_sc->grad_sumsq};
    MD_TRY(md_k_reduce(t->dev, &r));
    double c3 = md_now();
    struct step_scalars sc;
    /* on a device with its own all-reduce, the sync waits on the other ranks */
    if (t->dev_comm) md_dist_wait_begin("the gradient all-reduce (device)");
    md_status sync = md_dev_download(t->dev, &sc, t->d_sc, sizeof sc);
    if (sync == MD_OK) sync = md_dev_sync(t->dev);
    if (t->dev_comm) md_dist_wait_end();
    MD_TRY(sync);
    MD_TRY(md_trainer_dist_check(t));
    MD_TRY(md_trainer_dist_scalars(t, &sc));
    double c4 = md_now();
    if (!isfinite(sc.loss_sum)) return md_trainer_numeric_failure(t, t->global_step, "the loss is not finite");
    int action = md_scaler_update(&t->scaler, isfinite(sc.grad_sumsq));
    if (action < 0) return md_trainer_numeric_failure(t, t->global_step, "the gradients are not finite");
    double lr = md_schedule_lr(&t->sched, t->global_step);
    if (action > 0) {
        double gscale = 1.0 / (double)used_scale; /* the scale of these gradients */
        if (t->o->grad_clip > 0) {
            double norm = sqrt((double)sc.grad_sumsq) * gscale;
            if (norm > t->o->grad_clip) gscale *= t->o->grad_clip / (norm + 1e-6);
        }
        if (snapshot) {
            MD_TRY(md_dev_copy(t->dev, t->d_scratch, params, n * sizeof(float)));
            t->snapshot = 1;
        }
        MD_TRY(md_optim_step(t->opt, params, grads, (float)lr, (float)gscale, NULL, md_model_params_half(t->model),
                             md_model_get_opts(t->model)->compute_dtype));
    }
    double c5 = md_now();
    t->ph_upload += c1 - c0;
    t->ph_fwd += c2 - c1;
    t->ph_bwd += c3 - c2;
    t->ph_sync += c4 - c3;
    t->ph_opt += c5 - c4;
    t->global_step++;
    t->ep_loss += (double)sc.loss_sum / md_trainer_loss_elems(t);
    t->ep_correct += sc.correct;
    t->ep_seen += t->ranks > 1 ? mean_n : b->n; /* every rank counts the global batch */
    return MD_OK;
}

md_status md_trainer_dump_grads(md_trainer *t, const char *path)
{
    struct md_batch *b = NULL;
    MD_TRY(md_loader_start_epoch(t->train_l, 0));
    MD_TRY(md_loader_next(t->train_l, &b));
    if (!b) return md_errf(MD_ERR_DATA, "--dump-grads: the training split gave no batch");
    if (t->regress) {
        md_loader_release(t->train_l, b);
        return md_errf(MD_ERR_USAGE, "--dump-grads: model %s is a regression model; only classifiers are dumped",
                       md_model_name(t->model));
    }
    md_status st = md_trainer_upload_batch(t, b, 0, b->n);
    if (st == MD_OK) st = md_model_dump_grads(t->model, b->labels, b->n, (float)t->o->label_smoothing, path);
    int n = b->n;
    md_loader_release(t->train_l, b);
    MD_TRY(st);
    md_out("  One training step on the first batch (%d samples): inputs, logits, loss and gradients written to %s\n",
           n, path);
    return MD_OK;
}

md_status md_trainer_dump_logits(md_trainer *t, const char *path)
{
    struct md_loader *l = t->test_l ? t->test_l : t->val_l ? t->val_l : t->train_l;
    const char *split = t->test_l ? "test" : t->val_l ? "validation" : "training";
    struct md_batch *b = NULL;
    MD_TRY(md_loader_start_epoch(l, 0));
    MD_TRY(md_loader_next(l, &b));
    if (!b) return md_errf(MD_ERR_DATA, "--dump-logits: the %s split gave no batch", split);
    if (t->regress) {
        md_loader_release(l, b);
        return md_errf(MD_ERR_USAGE, "--dump-logits: model %s is a regression model; only classifiers are dumped",
                       md_model_name(t->model));
    }
    /* the evaluation batch may exceed the bound batch: its first part */
    int n = b->n < t->max_batch ? b->n : t->max_batch;
    md_status st = md_trainer_upload_batch(t, b, 0, n);
    if (st == MD_OK) st = md_model_dump_logits(t->model, b->labels, n, path);
    md_status sync = md_dev_sync(t->dev);
    md_loader_release(l, b);
    MD_TRY(st);
    MD_TRY(sync);
    md_out("  Evaluation logits of the first %s batch (%d samples) and its inputs written to %s\n", split, n, path);
    return MD_OK;
}
