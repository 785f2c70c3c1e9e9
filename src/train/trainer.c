/* trainer.c - the training and validation loop (see trainer.h): create and
 * free, the epochs and their steps, md_trainer_run with its --auto-batch
 * restarts. The other concerns live beside it (trainer_impl.h lists them;
 * docs/training-internals.md tells how a step runs in each mode). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/signals.h"
#include "core/timer.h"
#include "nn/model.h"
#include "train/trainer_impl.h"

/* --metrics: one line per this many steps besides the per-epoch line */
#define METRICS_EVERY 50

/* The task of the model against the data's, and the loss function. */
static md_status choose_loss(md_trainer *t)
{
    const char *name = t->o->loss_function;
    const char *mname = md_model_name(t->model);
    t->regress = md_model_is_regression(t->model);
    int data_regress = md_data_task(t->data) == MD_TASK_REGRESS;
    if (t->regress && !data_regress)
        return md_errf(MD_ERR_CONFIG, "model %s is a regression model but dataset %s has classes; give it a time "
                       "series (a CSV file)", mname, md_data_name(t->data));
    if (!t->regress && data_regress)
        return md_errf(MD_ERR_CONFIG, "dataset %s is a time series (regression) but model %s is a classifier; use a "
                       "forecasting model (--model itransformer)", md_data_name(t->data), mname);
    int autom = !name[0] || strcmp(name, "auto") == 0;
    if (!t->regress) {
        if (!autom && strcmp(name, "cross_entropy") != 0)
            return md_errf(MD_ERR_USAGE, "--loss-function %s is a regression loss; model %s is a classifier "
                           "(cross_entropy)", name, mname);
        t->loss_name = "cross_entropy";
        return MD_OK;
    }
    static const char *const names[] = {"mse", "mae", "huber", "financial"};
    static const md_regress_kind kinds[] = {MD_REGRESS_MSE, MD_REGRESS_MAE, MD_REGRESS_HUBER, MD_REGRESS_FINANCIAL};
    if (autom) name = "mse";
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) {
            t->rkind = kinds[i];
            t->loss_name = names[i];
        }
    if (!t->loss_name)
        return md_errf(MD_ERR_USAGE, "--loss-function %s is for classifiers; model %s is a regression model (mse, "
                       "mae, huber or financial)", name, mname);
    t->ser = *md_data_series(t->data);
    t->out_elems = t->ser.pred_len * t->ser.n_out;
    int c, h, w;
    md_model_output_shape(t->model, &c, &h, &w);
    if ((long long)c * h * w != t->out_elems && t->ser.seq_len == 0)
        return md_errf(MD_ERR_CONFIG, "model %s outputs %d x %d x %d values per image but the data has %d target%s "
                       "(--target-cols)", mname, c, h, w, t->ser.n_out, t->ser.n_out == 1 ? "" : "s");
    if ((long long)c * h * w != t->out_elems)
        return md_errf(MD_ERR_CONFIG, "model %s forecasts %d x %d x %d values per window but the data's targets are "
                       "%d rows x %d variates (pred_len x outputs%s)", mname, c, h, w, t->ser.pred_len, t->ser.n_out,
                       t->ser.n_out != t->ser.n_in ? "; --features MS/S need a model with that many outputs" : "");
    return MD_OK;
}

md_status md_trainer_create(const struct md_train_opts *opts, const struct md_train_hooks *hooks,
                            struct md_device *dev, struct md_model *model, struct md_data *data, md_trainer **out)
{
    *out = NULL;
    md_status st = MD_OK;
    md_trainer *t = md_calloc(1, sizeof *t);
    if (!t) return MD_ERR_OOM;
    t->opts = *opts;
    t->o = &t->opts;
    if (hooks) t->hooks = *hooks;
    t->dev = dev;
    t->model = model;
    t->data = data;
    t->unfrozen_epoch = -1;
    t->ranks = opts->ranks > 1 ? opts->ranks : 1;
    t->rank = t->ranks > 1 ? opts->rank : 0;
    const struct md_train_opts *o = t->o;
    st = choose_loss(t);
    md_trainer_report_init(t);
    if (st == MD_OK && o->target_acc > 0 && t->regress)
        st = md_errf(MD_ERR_USAGE, "--target-accuracy: model %s is a regression model (it has no accuracy)",
                     md_model_name(t->model));
    /* each rank would size its own plan from its own step times and stop at a different step */
    if (st == MD_OK && o->time_budget > 0 && t->ranks > 1)
        st = md_errf(MD_ERR_USAGE, "--time-budget sizes one process's run; it is not supported with %d ranks "
                     "(use --epochs)", t->ranks);
    if (st != MD_OK) goto fail;

    t->batch = o->batch_size > 0 ? o->batch_size : 64;
    t->classes = md_model_num_classes(t->model);
    if ((st = md_trainer_setup_batch(t)) != MD_OK) goto fail;

    if (o->checkpoint_dir[0]) {
        snprintf(t->ckpt_dir, sizeof t->ckpt_dir, "%s", o->checkpoint_dir);
        /* --dump-grads writes no checkpoints: it leaves the folder alone */
        if (!o->dump_grads[0] &&
            (st = md_run_dir_open(t->ckpt_dir, o->resume[0] != 0, o->overwrite, &t->run_dir)) != MD_OK)
            goto fail;
        snprintf(t->last_path, sizeof t->last_path, "%s/last.safetensors", t->ckpt_dir);
        snprintf(t->best_path, sizeof t->best_path, "%s/best.safetensors", t->ckpt_dir);
    }
    if (o->metrics[0] && (st = md_trainer_metrics_open(t)) != MD_OK) goto fail;
    if (o->resume[0] && (st = md_trainer_resume(t)) != MD_OK) goto fail;
    if ((st = md_trainer_dist_setup(t)) != MD_OK) goto fail;
    /* best.safetensors is replaced only by a better score than the one it
     * holds, whatever the checkpoint resumed from knew */
    double folder_best;
    int folder_best_epoch;
    if (md_run_dir_best(t->run_dir, &folder_best, &folder_best_epoch) && folder_best > t->best_acc) {
        t->best_acc = folder_best;
        t->best_epoch = folder_best_epoch;
    }
    *out = t;
    return MD_OK;
fail:
    /* what --auto-batch tried still goes into the report */
    if (t->ab_tried && t->hooks.failed_report) {
        cJSON *training = cJSON_CreateObject();
        if (training) {
            md_trainer_auto_batch_report(t, training);
            t->hooks.failed_report(t->hooks.ctx, training);
        }
    }
    md_trainer_free(t);
    return st;
}

void md_trainer_free(md_trainer *t)
{
    if (!t) return;
    md_trainer_teardown_batch(t);
    md_trainer_dist_free(t);
    if (t->metrics) fclose(t->metrics);
    md_run_dir_close(t->run_dir);
    cJSON_Delete(t->report);
    cJSON_Delete(t->ab_tried);
    md_load_report_free(&t->load);
    md_regress_acc_free(&t->racc);
    md_regress_metrics_free(&t->vreg);
    cJSON_Delete(t->target_names);
    for (int i = 0; i < MD_DATA_MAX_INPUTS; i++) md_free(t->probe_in[i]);
    md_free(t);
}

cJSON *md_trainer_take_report(md_trainer *t)
{
    cJSON *r = t->report;
    t->report = NULL;
    return r;
}
void md_trainer_interrupt_after(md_trainer *t, long long steps) { t->interrupt_after = steps; }
void md_trainer_force_pipeline(md_trainer *t) { t->force_pipe = 1; }

/* ---- the run ------------------------------------------------------------------------ */

static md_status run_epoch(md_trainer *t, double *sps_out, double *ep_time_out)
{
    long long start_batch = t->resume_batch;
    t->resume_batch = 0;
    if (start_batch == 0) {
        t->ep_loss = 0;
        t->ep_correct = t->ep_seen = 0;
        t->ep_time_before = 0;
    }
    t->snapshot = 0;
    MD_TRY(md_loader_start_epoch(t->train_l, t->epoch));
    double t0 = md_now(), ep_before = t->ep_time_before;
    long long samples_now = 0, last = md_trainer_budget_epoch_steps(t);
    char label[48];
    if (t->n_epochs >= 100000) /* --time-budget before its plan: as many as fit */
        snprintf(label, sizeof label, "epoch %d", t->epoch + 1);
    else
        snprintf(label, sizeof label, "epoch %d/%d", t->epoch + 1, t->n_epochs);
    int pg = md_progress_begin(label, (double)last, "steps");
    t->ph_load = t->ph_upload = t->ph_fwd = t->ph_bwd = t->ph_sync = t->ph_opt = t->ph_step = 0;
    long long pipe0 = t->pipe_steps, replay0 = t->graph_replays;
    for (long long i = 0; i < last; i++) {
        struct md_batch *b;
        double l0 = md_now();
        md_status lst = md_loader_next(t->train_l, &b);
        t->ph_load += md_now() - l0;
        if (lst != MD_OK) {
            md_progress_end(pg);
            return lst;
        }
        if (!b) break;
        if (i < start_batch) { /* resumed mid-epoch: the same order, these are done */
            md_loader_release(t->train_l, b);
            continue;
        }
        if (i == start_batch && i > 0) { /* the in-epoch ETA counts the steps run here */
            md_progress_update((double)i);
            md_progress_rebase();
        }
        /* the epoch's last step (diagnostics snapshot) and a short batch run apart */
        int n = b->n;
        md_status st;
        if (t->pipe && n == t->batch && i != last - 1) {
            st = md_trainer_pipe_step(t, b);
        } else {
            st = md_trainer_pipe_finish(t);
            if (st == MD_OK) st = md_trainer_step(t, b, i == last - 1);
            md_loader_release(t->train_l, b);
        }
        samples_now += n;
        t->ep_samples_local += n;
        t->ep_steps_local++;
        if (st != MD_OK) {
            md_trainer_pipe_abandon(t);
            md_progress_end(pg);
            return st;
        }
        double el = md_now() - t0;
        if (t->metrics && t->ep_seen && t->global_step % METRICS_EVERY == 0)
            md_trainer_metrics_line(t, "step", t->ep_loss / (double)t->ep_seen,
                                    (double)t->ep_correct / (double)t->ep_seen, -1, 0,
                                    md_schedule_lr(&t->sched, t->global_step - 1), samples_now / (el > 0 ? el : 1e-9),
                                    el);
        char note[48];
        snprintf(note, sizeof note, "loss %.4f", t->ep_seen ? t->ep_loss / (double)t->ep_seen : 0.0);
        md_progress_note(note);
        md_progress_rate(samples_now / (el > 0 ? el : 1e-9), "samples");
        md_progress_update((double)(i + 1));
        if (t->interrupt_after > 0 && t->global_step >= t->interrupt_after) md_interrupt_set(1);
        /* --time-budget (one process only): the plan's last step ran, or the budget's end came */
        if (md_trainer_budget_after_step(t) && !md_interrupted()) break;
        if (t->ranks > 1 ? t->dist_stop : md_interrupted()) {
            md_progress_end(pg);
            MD_TRY(md_trainer_pipe_finish(t)); /* the checkpoint holds every step counted */
            t->run_time += el;
            return md_trainer_interrupted(t, i + 1, ep_before + el, NULL);
        }
    }
    md_status fin = md_trainer_pipe_finish(t);
    md_progress_end(pg);
    if (fin != MD_OK) return fin;
    double el = md_now() - t0;
    t->ph_epoch = el;
    t->ph_pipe_steps = t->pipe_steps - pipe0;
    t->ph_replays = t->graph_replays - replay0;
    if (t->ph_pipe_steps)
        md_verbose("  epoch %d phases: data wait %.2fs, upload %.2fs, forward+backward+optimizer (queued as one) "
                   "%.2fs, sync %.2fs of %.2fs\n",
                   t->epoch + 1, t->ph_load, t->ph_upload, t->ph_step + t->ph_fwd + t->ph_bwd + t->ph_opt,
                   t->ph_sync, el);
    else
        md_verbose("  epoch %d phases: data wait %.2fs, upload %.2fs, forward %.2fs, loss+backward %.2fs, sync "
                   "%.2fs, optimizer %.2fs of %.2fs\n",
                   t->epoch + 1, t->ph_load, t->ph_upload, t->ph_fwd, t->ph_bwd, t->ph_sync, t->ph_opt, el);
    t->run_time += el;
    *ep_time_out = ep_before + el;
    *sps_out = samples_now / (el > 0 ? el : 1e-9);
    return MD_OK;
}

/* One attempt at the whole run at t->batch (md_trainer_run retries it). */
static md_status run_once(md_trainer *t)
{
    const struct md_train_opts *o = t->o;
    md_status st = MD_OK;
    md_trainer_budget_start(t);
    md_trainer_report_start(t);
    if ((st = md_trainer_pipe_setup(t)) != MD_OK) return st;
    md_trainer_print_start(t);
    int start_epoch = t->epoch;
    for (; t->epoch < t->n_epochs; t->epoch++) {
        double sps = 0, ep_time = 0;
        md_trainer_unfreeze_check(t);
        long long step0 = t->global_step;
        if ((st = run_epoch(t, &sps, &ep_time)) != MD_OK) goto done;
        if (t->ranks > 1) { /* every rank's steps: the global pace, and rank 0's BN statistics for validation */
            sps *= t->ranks;
            if ((st = md_trainer_dist_epoch(t, t->ph_epoch)) != MD_OK || (st = md_trainer_dist_sync_buffers(t)) != MD_OK)
                goto done;
        }
        if (t->bud_cut) { /* no time left for this epoch's validation: on to the test */
            char a[32];
            md_out("  Time budget: its end came during epoch %d, after step %s (no validation of it)\n",
                   t->epoch + 1, md_fmt_thousands(t->global_step, a, sizeof a));
            t->epoch++;
            break;
        }
        double end0 = md_now();
        double tl = t->ep_seen ? t->ep_loss / (double)t->ep_seen : 0;
        double ta = t->ep_seen ? (double)t->ep_correct / (double)t->ep_seen : 0;
        double vl = -1, va = 0;
        long long vn = 0;
        double v0 = md_now();
        if (t->val_l && (st = md_trainer_evaluate(t, t->val_l, t->epoch, &vl, &va, &vn, "validation")) != MD_OK) {
            if (st == MD_ERR_INTERRUPTED) {
                /* the epoch's steps are done: saved as a finished epoch (its
                 * validation is what a resumed run skips) */
                char where[600];
                snprintf(where, sizeof where, "%s after epoch %d", md_errmsg() + strlen("interrupted "),
                         t->epoch + 1);
                t->epoch++;
                t->ep_loss = 0;
                t->ep_correct = t->ep_seen = 0;
                st = md_trainer_interrupted(t, 0, 0, where);
            }
            goto done;
        }
        if (t->ranks > 1 && t->val_l) { /* rank 0's figures decide (best, patience) on every rank */
            double v[2] = {vl, va};
            if ((st = md_trainer_dist_agree(t, v, 2)) != MD_OK) goto done;
            vl = v[0];
            va = v[1];
        }
        double vtime = md_now() - v0;
        t->run_time += vtime;
        ep_time += vtime;
        double lr = md_schedule_lr(&t->sched, t->global_step > 0 ? t->global_step - 1 : 0);
        if ((st = md_trainer_diagnostics(t, t->snapshot)) != MD_OK) goto done;
        md_trainer_epoch_output(t, tl, ta, vl, va, lr, sps, ep_time);
        /* the score: validation accuracy, or 1 / (1 + validation loss) for
         * regression (training figures without a validation split) */
        double score = t->regress ? md_trainer_loss_score(t->val_l ? vl : tl) : t->val_l ? va : ta;
        int best_before = t->best_epoch;
        if ((st = md_trainer_keep_best(t, score)) != MD_OK) goto done;
        if (md_trainer_dist_interrupted(t)) {
            t->epoch++;
            st = md_trainer_interrupted(t, 0, 0, NULL);
            goto done;
        }
        /* --target-accuracy: validation accuracy, else the test split's (scored now), else training's */
        if (o->target_acc > 0 && !t->regress) {
            double acc = t->val_l ? va : ta;
            const char *metric = t->val_l ? "val_acc" : "train_acc";
            if (!t->val_l && t->test_l) {
                if ((st = md_trainer_evaluate(t, t->test_l, t->epoch, &t->test_cache_loss, &acc, &t->test_cache_n,
                                              "test")) != MD_OK)
                    goto done;
                t->test_cache_acc = acc;
                t->test_cache_step = t->global_step;
                metric = "test_acc";
            }
            if (md_trainer_target_check(t, acc, metric)) {
                t->epoch++;
                break;
            }
        }
        /* the epoch's end (validation, checkpoint, the target's test score) as measured */
        md_trainer_budget_after_epoch(t, t->global_step - step0, t->ph_epoch, md_now() - end0);
        if (md_trainer_budget_done(t)) {
            t->epoch++;
            break;
        }
        if (o->patience > 0) {
            t->bad_epochs = t->best_epoch != best_before ? 0 : t->bad_epochs + 1;
            if (t->bad_epochs >= o->patience && t->epoch + 1 < o->epochs) {
                t->stopped_after = t->epoch + 1;
                md_out("  Early stopping after epoch %d: no better %s in %d epoch%s (--patience %d); best epoch %d\n",
                       t->epoch + 1, t->regress ? "validation loss" : "validation accuracy", t->bad_epochs,
                       t->bad_epochs == 1 ? "" : "s", o->patience, t->best_epoch);
                t->epoch++;
                break;
            }
        }
    }
    if (t->regress && t->val_l) md_trainer_regress_val_report(t);
    if (t->test_l) st = md_trainer_score_test(t);
done:
    md_trainer_report_finish(t, start_epoch);
    if (st == MD_OK && t->metrics_err[0]) st = md_errf(MD_ERR_IO, "%s", t->metrics_err);
    return st;
}

/* Within this many steps of its start an out-of-memory still halves the batch
 * (--auto-batch): the run starts again from scratch (weights from the seed
 * or --init-from, a fresh optimizer and loaders), so it ends as a run
 * started at the smaller batch would. Lazy allocations (pipelined steps'
 * buffers, a GPU's workspaces) happen by then. */
#define AUTO_BATCH_STEPS 8

md_status md_trainer_run(md_trainer *t)
{
    int start_epoch = t->epoch;
    long long step0 = t->global_step;
    int set_up = 1;
    md_status st;
    for (;;) {
        st = run_once(t);
        if (st != MD_ERR_OOM || !t->o->auto_batch) break;
        int early = t->epoch == start_epoch && t->global_step - step0 < AUTO_BATCH_STEPS && !t->o->resume[0];
        if (!early) {
            md_trainer_auto_batch_record(t, t->batch, md_errmsg());
            break;
        }
        if (!md_trainer_auto_batch_halve(t, st, "in the first steps")) break;
        t->global_step = step0;
        cJSON_Delete(t->report);
        md_trainer_report_init(t);
        if ((st = md_trainer_setup_batch(t)) != MD_OK) {
            set_up = 0;
            break;
        }
        md_out("  --auto-batch: starting again at batch %d\n", t->batch);
    }
    /* a run that got past setting up and ended for another reason did fit */
    if (t->o->auto_batch && set_up && st != MD_ERR_OOM) md_trainer_auto_batch_record(t, t->batch, NULL);
    md_trainer_auto_batch_summary(t);
    return st;
}
