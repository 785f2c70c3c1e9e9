/* trainer_eval.c - validation and test scoring: a split through inference
 * forwards, loss and accuracy summed on the device (trainer_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "core/log.h"
#include "core/signals.h"
#include "nn/model.h"
#include "train/trainer_impl.h"

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
    for (long long bi = 0;; bi++) {
        md_interrupt_hook(what);
        MD_TRY(md_interrupt_check("during %s%s (batch %lld of %lld)", strcmp(what, "test") == 0 ? "scoring of the " : "",
                                  strcmp(what, "test") == 0 ? "test split" : what, bi + 1, nb));
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
            if (st == MD_OK)
                st = md_model_loss(t->model, t->d_labels, 0.0f, 1.0f, &t->d_sc->loss_sum, &t->d_sc->correct);
        }
        seen += b->n;
        /* Uploads are asynchronous on GPU backends: the (possibly pinned)
         * batch may go back to the loader only when the copies are done. */
        if (st == MD_OK) st = md_dev_sync(t->dev);
        md_loader_release(l, b);
        MD_TRY(st);
    }
    struct step_scalars sc;
    MD_TRY(md_dev_download(t->dev, &sc, t->d_sc, sizeof sc));
    MD_TRY(md_dev_sync(t->dev));
    if (seen > 0) {
        *loss = (double)sc.loss_sum / (double)seen;
        *acc = (double)sc.correct / (double)seen;
    }
    *count = seen;
    return MD_OK;
}

/* After the last epoch: the test split with the final weights, printed and
 * put into report.training.test. */
md_status md_trainer_score_test(md_trainer *t)
{
    md_status st;
    char a[32];
    double tl, ta;
    long long tn;
    if ((st = md_trainer_evaluate(t, t->test_l, 0, &tl, &ta, &tn, "test")) != MD_OK) {
        if (st == MD_ERR_INTERRUPTED && t->last_path[0]) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", md_errmsg());
            md_errf(st, "%s; the checkpoints of every epoch are written", msg);
        }
        return st;
    }
    md_out("  %-16s loss %.4f, accuracy %.2f%% on %s samples (the weights after epoch %d)\n", "test", tl, 100 * ta,
           md_fmt_thousands(tn, a, sizeof a), t->epoch);
    cJSON *te = cJSON_AddObjectToObject(t->report, "test");
    cJSON_AddNumberToObject(te, "loss", tl);
    cJSON_AddNumberToObject(te, "acc", ta);
    cJSON_AddNumberToObject(te, "samples", (double)tn);
    cJSON_AddNumberToObject(te, "after_epoch", t->epoch);
    return MD_OK;
}
