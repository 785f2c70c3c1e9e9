/* trainer_eval.c - validation and test scoring: a split through inference
 * forwards, loss and accuracy summed on the device (trainer_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/dist.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/signals.h"
#include "nn/model.h"
#include "train/trainer_impl.h"

/* ---- regression: outputs to the host for the metrics in both units ---- */

/* The test windows shown as forecasts: first, a third, two thirds, last. */
static int wanted_window(long long i, long long n)
{
    if (n <= 0) return 0;
    long long w[4] = {0, n / 3, 2 * n / 3, n - 1};
    for (int k = 0; k < 4; k++)
        if (w[k] == i && (k == 0 || w[k - 1] != i)) return 1;
    return 0;
}

static cJSON *unscaled(const float *v, long long stride, int n, double mean, double sd)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[(size_t)i * stride] * sd + mean));
    return a;
}

/* One forecast of sample i of the chunk (window `index` of the split):
 * the last output variate, in the file's units. */
static void add_forecast(md_trainer *t, const struct md_batch *b, int from, int i, const float *pred, long long index)
{
    const struct md_data_series *s = &t->ser;
    int j = s->n_out - 1, col = s->out_col + j;
    const double *mean = md_data_target_mean(t->data), *sd = md_data_target_std(t->data);
    double mu = mean ? mean[j] : 0, sg = sd ? sd[j] : 1;
    cJSON *desc = cJSON_CreateObject(), *name = NULL;
    md_data_describe(t->data, desc);
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(desc, "time_series");
    name = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ts, "variates"), col);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "window", (double)index);
    cJSON_AddStringToObject(f, "variate", cJSON_IsString(name) ? name->valuestring : "");
    cJSON_Delete(desc);
    const float *in = b->inputs[0] + (size_t)(from + i) * t->in_elems[0];
    cJSON_AddItemToObject(f, "lookback", unscaled(in + col, s->n_in, s->seq_len, mu, sg));
    cJSON_AddItemToObject(f, "actual",
                          unscaled(b->targets + (size_t)(from + i) * t->out_elems + j, s->n_out, s->pred_len, mu, sg));
    cJSON_AddItemToObject(f, "predicted", unscaled(pred + (size_t)i * t->out_elems + j, s->n_out, s->pred_len, mu, sg));
    cJSON_AddItemToArray(t->forecasts, f);
}

/* After an evaluation forward and loss over samples [from, from + n) of b:
 * the outputs to the host, into the metrics (and forecasts). */
static md_status regress_chunk(md_trainer *t, const struct md_batch *b, int from, int n, struct md_metrics_acc *acc)
{
    md_dtype dt = md_model_get_opts(t->model)->compute_dtype;
    size_t count = (size_t)n * t->out_elems;
    size_t esize = dt == MD_F32 ? 4 : 2;
    float *pred = t->h_out;
    /* half outputs land in the second half of the buffer, then widen in place from the front */
    void *raw = dt == MD_F32 ? (void *)pred : (void *)((char *)pred + count * 2);
    MD_TRY(md_dev_download(t->dev, raw, md_model_logits(t->model), count * esize));
    MD_TRY(md_dev_sync(t->dev));
    if (dt != MD_F32)
        for (size_t k = 0; k < count; k++) pred[k] = md_load_f(raw, dt, k);
    const struct md_data_series *s = &t->ser;
    const float *in = b->inputs[0] + (size_t)from * t->in_elems[0];
    const float *last = s->seq_len > 0 ? in + (size_t)(s->seq_len - 1) * s->n_in + s->out_col : NULL;
    md_metrics_acc_add(acc, pred, b->targets + (size_t)from * t->out_elems, last, (long long)t->in_elems[0], n,
                       s->pred_len, s->n_out, md_data_target_std(t->data));
    /* per target (variate) over every window and horizon row, in the file's units */
    md_regress_acc_add(&t->racc, pred, b->targets + (size_t)from * t->out_elems, (long long)n * s->pred_len,
                       md_data_target_mean(t->data), md_data_target_std(t->data));
    if (t->forecasts && s->seq_len > 0) {
        /* the window's place in the split (this rank's shard holds some) */
        long long total = md_data_count(t->data, MD_SPLIT_TEST);
        for (int i = 0; i < n; i++) {
            long long w = b->index[from + i];
            if (wanted_window(w, total)) add_forecast(t, b, from, i, pred, w);
        }
    }
    return MD_OK;
}

static int by_window(const void *a, const void *b)
{
    double x = cJSON_GetObjectItemCaseSensitive(*(cJSON *const *)a, "window")->valuedouble;
    double y = cJSON_GetObjectItemCaseSensitive(*(cJSON *const *)b, "window")->valuedouble;
    return (x > y) - (x < y);
}

/* The forecasts of every rank's shard into rank 0's t->forecasts, in window
 * order (each rank's as JSON text, broadcast from it in turn). */
static md_status gather_forecasts(md_trainer *t)
{
    char *mine = cJSON_PrintUnformatted(t->forecasts);
    if (!mine) return MD_ERR_OOM;
    md_status st = MD_OK;
    for (int r = 1; st == MD_OK && r < t->ranks; r++) {
        double len = t->rank == r ? (double)strlen(mine) + 1 : 0;
        st = md_dist_bcast(&len, sizeof len, r, "the forecasts' gathering");
        char *text = st == MD_OK ? md_malloc((size_t)len) : NULL;
        if (st == MD_OK && !text) st = MD_ERR_OOM;
        if (st == MD_OK && t->rank == r) memcpy(text, mine, (size_t)len);
        if (st == MD_OK) st = md_dist_bcast(text, (size_t)len, r, "the forecasts' gathering");
        cJSON *theirs = st == MD_OK && t->rank == 0 ? cJSON_Parse(text) : NULL;
        for (cJSON *f = theirs ? theirs->child : NULL; f;) {
            cJSON *next = f->next;
            cJSON_AddItemToArray(t->forecasts, cJSON_DetachItemViaPointer(theirs, f));
            f = next;
        }
        cJSON_Delete(theirs);
        md_free(text);
    }
    cJSON_free(mine);
    int n = cJSON_GetArraySize(t->forecasts);
    if (st != MD_OK || t->rank != 0 || n < 2) return st;
    cJSON **items = md_malloc((size_t)n * sizeof *items);
    if (!items) return MD_ERR_OOM;
    for (int i = 0; i < n; i++) items[i] = cJSON_DetachItemFromArray(t->forecasts, 0);
    qsort(items, (size_t)n, sizeof *items, by_window);
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(t->forecasts, items[i]);
    md_free(items);
    return MD_OK;
}

/* The batches of one evaluation pass (md_trainer_evaluate). */
static md_status eval_batches(md_trainer *t, struct md_loader *l, const char *what, long long nb, long long *seen,
                              struct md_metrics_acc *macc)
{
    for (long long bi = 0;; bi++) {
        md_interrupt_hook(what);
        /* with several ranks every one stops at the same batch (they all
         * got the signal, not at the same moment): one small all-reduce */
        double stop = md_interrupted() ? 1 : 0;
        if (t->ranks > 1) MD_TRY(md_dist_allreduce_max_f64(&stop, 1, "the evaluation's interrupt check"));
        if (stop > 0) {
            if (!md_interrupted()) md_interrupt_set(1);
            MD_TRY(md_interrupt_check("during %s%s (batch %lld of %lld)",
                                      strcmp(what, "test") == 0 ? "scoring of the " : "",
                                      strcmp(what, "test") == 0 ? "test split" : what, bi + 1, nb));
        }
        struct md_batch *b;
        MD_TRY(md_loader_next(l, &b));
        if (!b) break;
        md_status st = MD_OK;
        /* the validation batch may exceed what the model was bound for: chunks */
        for (int from = 0; st == MD_OK && from < b->n; from += t->max_batch) {
            int n = b->n - from < t->max_batch ? b->n - from : t->max_batch;
            st = md_trainer_upload_batch(t, b, from, n);
            if (st == MD_OK) st = md_model_forward(t->model, n, 0);
            /* sums accumulate on the device; no gradient after an inference forward */
            if (st == MD_OK) st = md_trainer_loss(t, n, (float)n, 0.0f);
            if (st == MD_OK && t->regress) st = regress_chunk(t, b, from, n, macc);
        }
        *seen += b->n;
        /* Uploads are asynchronous on GPU backends: the (possibly pinned)
         * batch may go back to the loader only when the copies are done. */
        if (st == MD_OK) st = md_dev_sync(t->dev);
        md_loader_release(l, b);
        MD_TRY(st);
        md_progress_update((double)(bi + 1));
    }
    return MD_OK;
}

/* Each rank evaluated its shard of every batch: the sums of all, on every
 * rank (the loss sum, correct count and samples; the regression metrics'
 * sums, the per-target accumulators merged in rank order, the forecasts
 * gathered on rank 0). */
static md_status sum_over_ranks(md_trainer *t, const char *what, double *loss_sum, double *correct,
                                long long *seen, struct md_metrics_acc *m)
{
    /* each rank's samples, for the report */
    double n_mine = (double)*seen, *n_all = md_malloc((size_t)t->ranks * sizeof *n_all);
    if (!n_all) return MD_ERR_OOM;
    md_status gst = md_dist_allgather_f64(&n_mine, 1, n_all, "the evaluation's sample counts");
    cJSON *ev = cJSON_GetObjectItemCaseSensitive(t->dist, "evaluation");
    const char *key = strcmp(what, "test") == 0 ? "test_samples_per_rank" : "val_samples_per_rank";
    if (gst == MD_OK && ev) {
        cJSON_DeleteItemFromObjectCaseSensitive(ev, key);
        cJSON *a = cJSON_AddArrayToObject(ev, key);
        for (int i = 0; a && i < t->ranks; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(n_all[i]));
    }
    md_free(n_all);
    MD_TRY(gst);
    double v[11] = {*loss_sum, *correct, (double)*seen, m->sae, m->sse, m->sae_orig, m->sse_orig, m->hits,
                    (double)m->count, (double)m->dir_count, (double)m->orig_count};
    MD_TRY(md_dist_allreduce_sum_f64(v, 11, "the evaluation's sums"));
    *loss_sum = v[0];
    *correct = v[1];
    *seen = (long long)v[2];
    m->sae = v[3];
    m->sse = v[4];
    m->sae_orig = v[5];
    m->sse_orig = v[6];
    m->hits = v[7];
    m->count = (long long)v[8];
    m->dir_count = (long long)v[9];
    m->orig_count = (long long)v[10];
    if (!t->regress) return MD_OK;
    size_t len = md_regress_acc_state_len(&t->racc) + 1, r = (size_t)t->ranks;
    double *mine = md_malloc(len * sizeof *mine), *all = md_malloc(len * r * sizeof *all);
    md_status st = mine && all ? MD_OK : MD_ERR_OOM;
    if (st == MD_OK) {
        mine[0] = (double)t->racc.n;
        memcpy(mine + 1, t->racc.s, (len - 1) * sizeof *mine);
        st = md_dist_allgather_f64(mine, len, all, "the evaluation's per-target sums");
    }
    if (st == MD_OK) {
        md_regress_acc_reset(&t->racc);
        for (size_t i = 0; i < r; i++) md_regress_acc_merge(&t->racc, (long long)all[i * len], all + i * len + 1);
    }
    md_free(mine);
    md_free(all);
    MD_TRY(st);
    return t->forecasts ? gather_forecasts(t) : MD_OK;
}

/* Loss and accuracy of the model over a whole split, without gradients. */
/* `what` names the phase for the test hook and an interruption's message
 * ("validation", "test"). */
md_status md_trainer_evaluate(md_trainer *t, struct md_loader *l, int epoch, double *loss, double *acc,
                              long long *count, const char *what)
{
    *loss = *acc = 0;
    *count = 0;
    MD_TRY(md_loader_start_epoch(l, epoch));
    MD_TRY(md_dev_memset0(t->dev, t->d_sc, sizeof(struct step_scalars)));
    long long seen = 0, nb = md_loader_num_batches(l);
    struct md_metrics_acc macc;
    md_metrics_acc_init(&macc);
    if (t->regress) {
        if (!t->racc.s) MD_TRY(md_regress_acc_init(&t->racc, t->ser.n_out));
        md_regress_acc_reset(&t->racc);
    }
    int pg = md_progress_begin(strcmp(what, "test") == 0 ? "scoring the test split" : what, (double)nb, "batches");
    md_status st = eval_batches(t, l, what, nb, &seen, &macc);
    md_progress_end(pg);
    MD_TRY(st);
    struct step_scalars sc;
    MD_TRY(md_dev_download(t->dev, &sc, t->d_sc, sizeof sc));
    MD_TRY(md_dev_sync(t->dev));
    double loss_sum = sc.loss_sum, correct = sc.correct;
    if (t->ranks > 1) MD_TRY(sum_over_ranks(t, what, &loss_sum, &correct, &seen, &macc));
    if (seen > 0) {
        *loss = loss_sum / (double)seen / md_trainer_loss_elems(t);
        *acc = correct / (double)seen;
    }
    *count = seen;
    if (t->regress) {
        md_metrics_result(&macc, &t->vmet);
        *acc = t->vmet.mse;
        md_regress_metrics_free(&t->vreg);
        MD_TRY(md_regress_acc_result(&t->racc, &t->vreg));
    }
    return MD_OK;
}

/* ---- R2, MAE and RMSE per target -------------------------------------------------- */

/* The targets' names: the dataset's columns (images with CSV targets: the
 * target columns; time series: "time_series.variates" from the output column
 * on; other formats: a "target_columns" array), else NULL (target_<j>). */
static const char *target_name(const void *ctx, int j)
{
    const md_trainer *t = ctx;
    const cJSON *n = cJSON_GetArrayItem(t->target_names, j);
    return cJSON_IsString(n) ? n->valuestring : NULL;
}

static void load_target_names(md_trainer *t)
{
    if (t->target_names) return;
    cJSON *desc = cJSON_CreateObject();
    if (!desc) return;
    md_data_describe(t->data, desc);
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(desc, "time_series");
    const cJSON *vars = cJSON_GetObjectItemCaseSensitive(ts, "variates");
    const cJSON *cols = cJSON_GetObjectItemCaseSensitive(desc, "target_columns");
    t->target_names = cJSON_CreateArray();
    for (int j = 0; t->target_names && j < t->ser.n_out; j++) {
        const char *own = md_data_target_name(t->data, j); /* images with CSV targets: their columns */
        const cJSON *v = cJSON_IsArray(vars) ? cJSON_GetArrayItem(vars, t->ser.out_col + j) : cJSON_GetArrayItem(cols, j);
        cJSON_AddItemToArray(t->target_names, own[0]          ? cJSON_CreateString(own)
                                              : cJSON_IsString(v) ? cJSON_CreateString(v->valuestring)
                                                                  : cJSON_CreateNull());
    }
    cJSON_Delete(desc);
}

static const char *units_of(const md_trainer *t)
{
    return md_data_target_std(t->data) ? "original" : "as delivered";
}

/* report[key] = the last evaluation's metrics, and the printed table. */
static void regress_table(md_trainer *t, cJSON *where, const char *split, const char *title)
{
    if (!t->vreg.per) return;
    load_target_names(t);
    cJSON *o = md_regress_metrics_json(&t->vreg, split, units_of(t), target_name, t);
    if (o) cJSON_AddItemToObject(where, "regression_metrics", o);
    md_regress_metrics_print(&t->vreg, title, target_name, t);
}

void md_trainer_regress_val_report(md_trainer *t)
{
    char title[160], a[32];
    snprintf(title, sizeof title, "validation after epoch %d: %s values per target, %s units", t->epoch,
             md_fmt_thousands(t->vreg.n, a, sizeof a), units_of(t));
    regress_table(t, t->report, "val", title);
}

/* report.training.test for regression, and the printed lines beside the
 * naive baseline. */
static void regress_test_report(md_trainer *t, double tl, long long tn, int after)
{
    const struct md_metrics *m = &t->vmet;
    char a[32];
    md_out("  %-16s loss %.4f, MSE %.4f, MAE %.4f, RMSE %.4f on %s windows (standardised; the weights after epoch %d)\n",
           "test", tl, m->mse, m->mae, m->rmse, md_fmt_thousands(tn, a, sizeof a), after);
    if (m->has_orig)
        md_out("  %-16s MSE %.6g, MAE %.6g in the file's units\n", "", m->mse_orig, m->mae_orig);
    if (m->has_dir) md_out("  %-16s directional accuracy %.2f%%\n", "", 100 * m->dir_acc);
    cJSON *te = cJSON_AddObjectToObject(t->report, "test");
    cJSON_AddNumberToObject(te, "loss", tl);
    cJSON_AddNumberToObject(te, "mse", m->mse);
    cJSON_AddNumberToObject(te, "mae", m->mae);
    cJSON_AddNumberToObject(te, "rmse", m->rmse);
    if (m->has_dir) cJSON_AddNumberToObject(te, "directional_accuracy", m->dir_acc);
    else cJSON_AddNullToObject(te, "directional_accuracy");
    if (m->has_orig) {
        cJSON_AddNumberToObject(te, "mse_original_units", m->mse_orig);
        cJSON_AddNumberToObject(te, "mae_original_units", m->mae_orig);
    } else {
        cJSON_AddNullToObject(te, "mse_original_units");
        cJSON_AddNullToObject(te, "mae_original_units");
    }
    cJSON_AddNumberToObject(te, "samples", (double)tn);
    cJSON_AddNumberToObject(te, "after_epoch", after);
    char title[160];
    snprintf(title, sizeof title, "test: %s values per target, %s units", md_fmt_thousands(t->vreg.n, a, sizeof a),
             units_of(t));
    regress_table(t, te, "test", title);
    struct md_metrics naive;
    if (md_metrics_naive(t->data, MD_SPLIT_TEST, &naive) == MD_OK) {
        md_out("  %-16s MSE %.4f, MAE %.4f (repeat the last value)\n", "naive baseline", naive.mse, naive.mae);
        cJSON *bl = cJSON_AddObjectToObject(te, "baseline");
        cJSON_AddStringToObject(bl, "name", "repeat the last value");
        cJSON_AddNumberToObject(bl, "mse", naive.mse);
        cJSON_AddNumberToObject(bl, "mae", naive.mae);
    } else {
        md_err_clear();
    }
}

/* After the last epoch: the test split with the final weights (the best
 * epoch's with --patience), printed and put into report.training.test. */
md_status md_trainer_score_test(md_trainer *t)
{
    md_status st;
    char a[32];
    double tl, ta;
    long long tn;
    int after = t->epoch;
    if (t->d_best && t->best_epoch > 0 && t->best_epoch != t->epoch) {
        MD_TRY(md_trainer_restore_best(t));
        after = t->best_epoch;
    }
    if (t->regress) {
        cJSON_DeleteItemFromObjectCaseSensitive(t->report, "forecasts");
        t->forecasts = cJSON_AddArrayToObject(t->report, "forecasts");
    }
    if (!t->regress && t->test_cache_step > 0 && t->test_cache_step == t->global_step && after == t->epoch) {
        /* --target-accuracy scored the test split with these very weights after the last epoch */
        tl = t->test_cache_loss;
        ta = t->test_cache_acc;
        tn = t->test_cache_n;
        st = MD_OK;
    } else {
        st = md_trainer_evaluate(t, t->test_l, 0, &tl, &ta, &tn, "test");
    }
    t->forecasts = NULL;
    if (st != MD_OK) {
        if (st == MD_ERR_INTERRUPTED && t->last_path[0]) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", md_errmsg());
            md_errf(st, "%s; the checkpoints of every epoch are written", msg);
        }
        return st;
    }
    if (t->regress) {
        regress_test_report(t, tl, tn, after);
        return MD_OK;
    }
    md_out("  %-16s loss %.4f, accuracy %.2f%% on %s samples (the weights after epoch %d)\n", "test", tl, 100 * ta,
           md_fmt_thousands(tn, a, sizeof a), after);
    cJSON *te = cJSON_AddObjectToObject(t->report, "test");
    cJSON_AddNumberToObject(te, "loss", tl);
    cJSON_AddNumberToObject(te, "acc", ta);
    cJSON_AddNumberToObject(te, "samples", (double)tn);
    cJSON_AddNumberToObject(te, "after_epoch", after);
    return MD_OK;
}
