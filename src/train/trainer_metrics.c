/* trainer_metrics.c - what the trainer writes down: report["training"] and
 * its curves, the --metrics JSON lines, and the printed settings and epoch
 * table (trainer_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "core/log.h"
#include "core/mem.h"
#include "train/trainer_impl.h"

const char *const md_trainer_curve_keys[] = {"epoch", "train_loss", "train_acc", "val_loss", "val_acc",
                                             "lr", "samples_per_s", "epoch_time_s", NULL};
const char *const md_trainer_curve_keys_regress[] = {"epoch", "train_loss", "val_loss", "val_mse", "val_mae",
                                                     "lr", "samples_per_s", "epoch_time_s", NULL};

void md_trainer_report_init(md_trainer *t)
{
    t->report = cJSON_CreateObject();
    t->curves = cJSON_AddObjectToObject(t->report, "curves");
    const char *const *keys = t->regress ? md_trainer_curve_keys_regress : md_trainer_curve_keys;
    for (int i = 0; keys[i]; i++) cJSON_AddArrayToObject(t->curves, keys[i]);
    t->diags = cJSON_AddArrayToObject(t->report, "diagnostics");
}

/* The line that starts this run's lines in the --metrics file (the caller's
 * md_train_hooks.metrics_header: the run id, command line and config), so
 * runs appended to one file can be told apart. */
static md_status metrics_header(md_trainer *t)
{
    cJSON *h = t->hooks.metrics_header ? t->hooks.metrics_header(t->hooks.ctx) : NULL;
    char *s = h ? cJSON_PrintUnformatted(h) : NULL;
    cJSON_Delete(h);
    if (!s) return md_errf(MD_ERR_OOM, "--metrics %s: out of memory for the header line", t->o->metrics);
    int bad = fprintf(t->metrics, "%s\n", s) < 0 || fflush(t->metrics) != 0;
    cJSON_free(s);
    if (bad) return md_errf(MD_ERR_IO, "--metrics %s: cannot write: %s", t->o->metrics, strerror(errno));
    return MD_OK;
}

md_status md_trainer_metrics_open(md_trainer *t)
{
    t->metrics = fopen(t->o->metrics, "a");
    if (!t->metrics)
        return md_errf(MD_ERR_IO, "--metrics %s: cannot open for appending: %s", t->o->metrics, strerror(errno));
    return metrics_header(t);
}

void md_trainer_metrics_line(md_trainer *t, const char *kind, double loss, double acc, double vloss, double vacc,
                         double lr, double sps, double secs)
{
    if (!t->metrics) return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", kind);
    cJSON_AddStringToObject(o, "run_id", t->hooks.run_id ? t->hooks.run_id : "");
    cJSON_AddNumberToObject(o, "epoch", t->epoch + 1);
    cJSON_AddNumberToObject(o, "step", (double)t->global_step);
    cJSON_AddNumberToObject(o, "train_loss", loss);
    if (t->regress) cJSON_AddNullToObject(o, "train_acc"); /* no accuracy in regression */
    else cJSON_AddNumberToObject(o, "train_acc", acc);
    if (vloss >= 0) {
        cJSON_AddNumberToObject(o, "val_loss", vloss);
        if (t->regress) {
            cJSON_AddNumberToObject(o, "val_mse", t->vmet.mse);
            cJSON_AddNumberToObject(o, "val_mae", t->vmet.mae);
            /* overall R2 (mean over targets; the same in any units) */
            if (t->vreg.per && isfinite(t->vreg.r2)) cJSON_AddNumberToObject(o, "val_r2", t->vreg.r2);
            else cJSON_AddNullToObject(o, "val_r2");
        } else {
            cJSON_AddNumberToObject(o, "val_acc", vacc);
        }
    }
    cJSON_AddNumberToObject(o, "lr", lr);
    cJSON_AddNumberToObject(o, "samples_per_s", sps);
    cJSON_AddNumberToObject(o, "time_s", secs);
    cJSON_AddNumberToObject(o, "loss_scale", t->scaler.scale);
    char *s = cJSON_PrintUnformatted(o);
    if (s) {
        /* A failed write (disk full) does not stop the training: no more
         * lines are written, and the run ends with the error (exit 3). */
        errno = 0;
        int bad = fprintf(t->metrics, "%s\n", s) < 0;
        if (fflush(t->metrics) != 0 || ferror(t->metrics)) bad = 1;
        if (bad) {
            snprintf(t->metrics_err, sizeof t->metrics_err, "--metrics %s: write failed: %s", t->o->metrics,
                     errno ? strerror(errno) : "I/O error");
            md_warn("%s; no more metrics lines are written, and the run will end with this error", t->metrics_err);
            fclose(t->metrics);
            t->metrics = NULL;
        }
        cJSON_free(s);
    }
    cJSON_Delete(o);
}

/* ---- report["training"] and the printed table ------------------------------------------ */

static void fmt_duration(double s, char *b, size_t n)
{
    if (s < 0) snprintf(b, n, "-");
    else if (s < 60) snprintf(b, n, "%.1fs", s);
    else if (s < 3600) snprintf(b, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(b, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

static void print_header(const md_trainer *t)
{
    if (t->regress) {
        md_out("  %5s  %10s  %8s  %8s  %8s  %9s  %9s  %7s  %7s\n", "epoch", "train loss", "val loss", "val MSE",
               "val MAE", "lr", "samples/s", "time", "ETA");
        return;
    }
    md_out("  %5s  %10s  %9s  %8s  %7s  %9s  %9s  %7s  %7s\n", "epoch", "train loss", "train acc", "val loss",
           "val acc", "lr", "samples/s", "time", "ETA");
}

static void curve_add(md_trainer *t, const char *key, double v)
{
    /* JSON has no NaN: a missing value (no validation split) is null */
    cJSON_AddItemToArray(cJSON_GetObjectItem(t->curves, key), isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull());
}

/* report["training"]["transfer"]: the --init-from report and the parameter groups. */
static void transfer_report(md_trainer *t)
{
    const struct md_train_opts *o = t->o;
    cJSON *x = t->transfer = cJSON_AddObjectToObject(t->report, "transfer");
    if (t->have_load) cJSON_AddItemToObject(x, "init_from", md_load_report_json(&t->load));
    else cJSON_AddNullToObject(x, "init_from");
    int nt = md_model_num_tensors(t->model);
    uint8_t *head = md_calloc((size_t)nt + 1, 1);
    cJSON *h = cJSON_AddArrayToObject(x, "head");
    if (head) {
        md_model_head_mask(t->model, head);
        for (int i = 0; i < nt; i++)
            if (head[i]) cJSON_AddItemToArray(h, cJSON_CreateString(md_model_tensor(t->model, i)->name));
        md_free(head);
    }
    size_t frozen = md_optim_frozen_count(t->opt), all = md_model_nparams(t->model);
    if (o->freeze[0]) cJSON_AddStringToObject(x, "freeze", o->freeze);
    else cJSON_AddNullToObject(x, "freeze");
    cJSON_AddNumberToObject(x, "frozen_params", (double)frozen);
    cJSON_AddNumberToObject(x, "trainable_params", (double)(all - frozen));
    if (o->backbone_lr > 0) cJSON_AddNumberToObject(x, "backbone_lr", o->backbone_lr);
    else cJSON_AddNullToObject(x, "backbone_lr");
    cJSON_AddNumberToObject(x, "backbone_lr_multiplier", t->backbone_mult);
    if (o->unfreeze_after > 0) cJSON_AddNumberToObject(x, "unfreeze_after", o->unfreeze_after);
    else cJSON_AddNullToObject(x, "unfreeze_after");
    if (t->unfrozen_epoch >= 0) cJSON_AddNumberToObject(x, "unfrozen_at_epoch", t->unfrozen_epoch + 1);
    else cJSON_AddNullToObject(x, "unfrozen_at_epoch");
}

void md_trainer_report_start(md_trainer *t)
{
    const struct md_train_opts *o = t->o;
    cJSON_AddStringToObject(t->report, "task", t->regress ? "regression" : "classification");
    cJSON_AddStringToObject(t->report, "loss_function", t->loss_name ? t->loss_name : "cross_entropy");
    cJSON_AddStringToObject(t->report, "optimizer", o->optimizer);
    cJSON_AddNumberToObject(t->report, "lr", t->lr);
    cJSON_AddStringToObject(t->report, "schedule", md_schedule_name(t->sched.kind));
    cJSON_AddNumberToObject(t->report, "batch_size", t->batch);
    cJSON_AddNumberToObject(t->report, "val_batch_size", t->val_batch);
    cJSON_AddNumberToObject(t->report, "epochs", o->epochs);
    cJSON_AddNumberToObject(t->report, "steps_per_epoch", (double)t->steps_per_epoch);
    cJSON_AddStringToObject(t->report, "precision", md_precision_name(o->precision));
    size_t dec, plain;
    md_optim_counts(t->opt, &dec, &plain);
    cJSON_AddNumberToObject(t->report, "decayed_params", (double)dec);
    cJSON_AddNumberToObject(t->report, "non_decayed_params", (double)plain);
    if (o->resume[0]) cJSON_AddStringToObject(t->report, "resumed_from", o->resume);
    else cJSON_AddNullToObject(t->report, "resumed_from");
    transfer_report(t);
    md_trainer_dist_report_start(t);
}

void md_trainer_unfreeze_check(md_trainer *t)
{
    const struct md_train_opts *o = t->o;
    if (o->unfreeze_after <= 0 || t->epoch < o->unfreeze_after || md_optim_frozen_count(t->opt) == 0) return;
    size_t n = md_optim_frozen_count(t->opt);
    md_optim_unfreeze(t->opt, (long long)o->unfreeze_after * t->steps_per_epoch);
    t->unfrozen_epoch = o->unfreeze_after;
    char a[32];
    md_out("  Unfrozen after epoch %d (--unfreeze-after): %s more parameters train from epoch %d on\n",
           o->unfreeze_after, md_fmt_thousands((long long)n, a, sizeof a), o->unfreeze_after + 1);
    if (t->transfer) {
        cJSON_DeleteItemFromObject(t->transfer, "unfrozen_at_epoch");
        cJSON_AddNumberToObject(t->transfer, "unfrozen_at_epoch", o->unfreeze_after + 1);
    }
}

void md_trainer_print_start(md_trainer *t)
{
    const struct md_train_opts *o = t->o;
    char a[32], b[32], c[32];
    size_t dec, plain;
    md_optim_counts(t->opt, &dec, &plain);
    md_out("  %-16s %s, %s train / %s val / %s test samples\n", "data", md_data_name(t->data),
           md_fmt_thousands(md_data_count(t->data, MD_SPLIT_TRAIN), a, sizeof a),
           md_fmt_thousands(md_data_count(t->data, MD_SPLIT_VAL), b, sizeof b),
           md_fmt_thousands(md_data_count(t->data, MD_SPLIT_TEST), c, sizeof c));
    if (t->ocfg.kind == MD_OPT_ADAMW)
        md_out("  %-16s adamw (betas 0.9, 0.999), weight decay %g on %s of %s parameters\n", "optimizer",
               o->weight_decay, md_fmt_thousands((long long)dec, a, sizeof a),
               md_fmt_thousands((long long)(dec + plain), b, sizeof b));
    else
        md_out("  %-16s sgd (momentum %g%s), weight decay %g on %s of %s parameters\n", "optimizer", o->momentum,
               o->nesterov ? ", nesterov" : "", o->weight_decay, md_fmt_thousands((long long)dec, a, sizeof a),
               md_fmt_thousands((long long)(dec + plain), b, sizeof b));
    md_out("  %-16s %g peak, %s%s; batch %d (validation %d), %lld step%s per epoch\n", "schedule", t->lr,
           md_schedule_name(t->sched.kind), o->warmup_epochs > 0 ? " after linear warm-up" : "", t->batch,
           t->val_batch, t->steps_per_epoch, md_s(t->steps_per_epoch));
    if (t->scaler.enabled)
        md_out("  %-16s dynamic, starting at %.0f, decided on the %s\n", "loss scaling", (double)t->scaler.scale,
               t->pipe ? "device" : "host");
    if (t->regress && t->ser.seq_len == 0) /* images with targets: no window */
        md_out("  %-16s %s over %d target%s per image\n", "loss", t->loss_name, t->ser.n_out,
               t->ser.n_out == 1 ? "" : "s");
    else if (t->regress)
        md_out("  %-16s %s over %d rows x %d variates per window\n", "loss", t->loss_name, t->ser.pred_len,
               t->ser.n_out);
    if (o->patience > 0)
        md_out("  %-16s after %d epoch%s without a better validation %s (--patience)\n", "early stopping",
               o->patience, o->patience == 1 ? "" : "s", t->regress ? "loss" : "accuracy");
    md_out("  %-16s %s\n", "steps", t->pipe_why);
    if (o->time_budget > 0)
        md_out("  %-16s %g s from the run's start to its test score: steps and schedule sized after a short "
               "warm-up\n", "time budget", o->time_budget);
    if (o->target_acc > 0)
        md_out("  %-16s stop once %s accuracy reaches %.2f%%\n", "target",
               t->val_l ? "validation" : t->test_l ? "test" : "training", 100 * o->target_acc);
    if (t->have_load) md_load_report_print(&t->load);
    size_t frozen = md_optim_frozen_count(t->opt);
    if (o->freeze[0] || o->backbone_lr > 0) {
        char d[32], e[32], un[64] = "";
        size_t all = md_model_nparams(t->model);
        if (o->unfreeze_after > 0) snprintf(un, sizeof un, "; all from epoch %d on", o->unfreeze_after + 1);
        md_out("  %-16s %s of %s parameters trainable%s%s%s%s", "transfer",
               md_fmt_thousands((long long)(all - frozen), d, sizeof d), md_fmt_thousands((long long)all, e, sizeof e),
               o->freeze[0] ? " (--freeze " : "", o->freeze[0] ? o->freeze : "", o->freeze[0] ? ")" : "", un);
        if (o->backbone_lr > 0) md_out("; backbone peak lr %g (x%g of the head's)", o->backbone_lr, (double)t->backbone_mult);
        md_out("\n");
    }
    if (t->epoch >= o->epochs)
        md_out("  nothing to train: the checkpoint is at epoch %d of %d (raise --epochs to continue); scoring it\n",
               t->epoch, o->epochs);
    else
        print_header(t);
}

void md_trainer_epoch_output(md_trainer *t, double tl, double ta, double vl, double va, double lr, double sps,
                             double ep_time)
{
    char a[32];
    /* run_time covers every epoch so far, also those before a resume */
    double eta = (t->n_epochs - t->epoch - 1) * (t->run_time / (t->epoch + 1));
    char et[16], es[16], vls[16], vas[16];
    fmt_duration(ep_time, et, sizeof et);
    fmt_duration(eta, es, sizeof es);
    if (t->val_l) {
        snprintf(vls, sizeof vls, "%.4f", vl);
        snprintf(vas, sizeof vas, "%.2f%%", 100 * va);
    } else {
        snprintf(vls, sizeof vls, "-");
        snprintf(vas, sizeof vas, "-");
    }
    if (t->regress) {
        char vms[16], vma[16];
        snprintf(vms, sizeof vms, t->val_l ? "%.4f" : "-", t->vmet.mse);
        snprintf(vma, sizeof vma, t->val_l ? "%.4f" : "-", t->vmet.mae);
        md_out("  %5d  %10.4f  %8s  %8s  %8s  %9.3g  %9s  %7s  %7s\n", t->epoch + 1, tl, vls, vms, vma, lr,
               md_fmt_thousands(llround(sps), a, sizeof a), et, es);
    } else {
        md_out("  %5d  %10.4f  %8.2f%%  %8s  %7s  %9.3g  %9s  %7s  %7s\n", t->epoch + 1, tl, 100 * ta, vls, vas, lr,
               md_fmt_thousands(llround(sps), a, sizeof a), et, es);
    }
    fflush(stdout); /* a log file or pipe sees each epoch as it ends */
    curve_add(t, "epoch", t->epoch + 1);
    curve_add(t, "train_loss", tl);
    curve_add(t, "val_loss", t->val_l ? vl : (double)NAN);
    if (t->regress) {
        curve_add(t, "val_mse", t->val_l ? t->vmet.mse : (double)NAN);
        curve_add(t, "val_mae", t->val_l ? t->vmet.mae : (double)NAN);
    } else {
        curve_add(t, "train_acc", ta);
        curve_add(t, "val_acc", t->val_l ? va : (double)NAN);
    }
    curve_add(t, "lr", lr);
    curve_add(t, "samples_per_s", sps);
    curve_add(t, "epoch_time_s", ep_time);
    md_trainer_metrics_line(t, "epoch", tl, ta, t->val_l ? vl : -1, va, lr, sps, ep_time);
}

void md_trainer_report_finish(md_trainer *t, int start_epoch)
{
    cJSON_AddNumberToObject(t->report, "epochs_run", t->epoch - start_epoch);
    cJSON_AddNumberToObject(t->report, "global_step", (double)t->global_step);
    cJSON_AddNumberToObject(t->report, "train_time_s", t->run_time);
    cJSON *sr = cJSON_AddObjectToObject(t->report, "step_execution");
    cJSON_AddStringToObject(sr, "mode", t->graph_replays ? "graph" : t->pipe ? "pipelined" : "eager");
    cJSON_AddStringToObject(sr, "why", t->pipe_why);
    cJSON_AddNumberToObject(sr, "graph_replays", (double)t->graph_replays);
    cJSON_AddNumberToObject(sr, "graphs", (t->graph[0] != NULL) + (t->graph[1] != NULL));
    cJSON_AddNumberToObject(sr, "capture_s", t->capture_s);
    cJSON_AddNumberToObject(sr, "pipelined_eager_steps", (double)t->pipe_eager);
    cJSON_AddNumberToObject(sr, "host_synced_steps", (double)(t->global_step - t->pipe_steps));
    cJSON *ls = cJSON_AddObjectToObject(t->report, "loss_scaling");
    cJSON_AddBoolToObject(ls, "enabled", t->scaler.enabled);
    cJSON_AddNumberToObject(ls, "final_scale", t->scaler.scale);
    cJSON_AddNumberToObject(ls, "skipped_steps", (double)t->scaler.skipped);
    /* pipelined (captured) steps: the optimizer kernel applies the rule on the device */
    cJSON_AddStringToObject(ls, "decided_on", !t->scaler.enabled ? "none" : t->pipe ? "device" : "host");
    if (t->best_epoch > 0) {
        cJSON *be = cJSON_AddObjectToObject(t->report, "best");
        cJSON_AddNumberToObject(be, "epoch", t->best_epoch);
        if (t->regress) {
            cJSON_AddStringToObject(be, "metric", t->val_l ? "val_loss" : "train_loss");
            cJSON_AddNumberToObject(be, "value", md_trainer_score_loss(t->best_acc));
        } else {
            cJSON_AddNumberToObject(be, "acc", t->best_acc);
            cJSON_AddStringToObject(be, "metric", t->val_l ? "val_acc" : "train_acc");
            cJSON_AddNumberToObject(be, "value", t->best_acc);
        }
        if (t->best_path[0]) cJSON_AddStringToObject(be, "path", t->best_path);
    }
    if (t->o->patience > 0) {
        cJSON *es = cJSON_AddObjectToObject(t->report, "early_stopping");
        cJSON_AddNumberToObject(es, "patience", t->o->patience);
        if (t->stopped_after > 0) cJSON_AddNumberToObject(es, "stopped_after_epoch", t->stopped_after);
        else cJSON_AddNullToObject(es, "stopped_after_epoch");
    }
    if (t->last_path[0]) cJSON_AddStringToObject(t->report, "last_checkpoint", t->last_path);
    md_trainer_budget_report(t);
}
