/* trainer_setup.c - what the trainer sets up at one batch size, and
 * --auto-batch: on out-of-memory it releases all of it, halves the batch and
 * sets up again (trainer_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "nn/model.h"
#include "train/trainer_impl.h"

static md_status make_loader(md_trainer *t, md_split split, int batch, int train, struct md_loader **out)
{
    struct md_loader_opts lo = {
        .split = split,
        .batch_size = batch,
        .shuffle = train,
        .augment = train && t->o->augment,
        /* a last batch of one sample would give BatchNorm a zero variance */
        .drop_last = train && md_data_count(t->data, split) > (long long)batch * (t->ranks > 1 ? t->ranks : 1),
        .num_workers = t->o->num_workers > 0 ? t->o->num_workers : 0,
        .prefetch = t->o->prefetch,
        .seed = t->o->seed,
        .pin_dev = t->o->pin_memory > 0 ? t->dev : NULL,
        /* batches are global: each rank takes its part, for training and
         * for evaluation (whose sums trainer_eval.c adds over the ranks) */
        .shard_count = t->ranks > 1 ? t->ranks : 0,
        .shard_rank = t->rank,
    };
    return md_loader_create(t->data, &lo, out);
}

static md_status alloc_buffers(md_trainer *t)
{
    MD_TRY(md_dev_alloc(t->dev, (size_t)t->max_batch * sizeof(int32_t), (void **)&t->d_labels, "label batch"));
    MD_TRY(md_dev_alloc(t->dev, sizeof(struct step_scalars), (void **)&t->d_sc, "step scalars"));
    if (t->regress) {
        MD_TRY(md_dev_alloc(t->dev, (size_t)t->max_batch * t->out_elems * sizeof(float), (void **)&t->d_targets,
                            "target batch"));
        t->h_out = md_malloc((size_t)t->max_batch * t->out_elems * sizeof(float));
        if (!t->h_out) return MD_ERR_OOM;
    }
    if (t->o->patience > 0) {
        size_t np = md_model_nparams(t->model), nb = md_model_bn_stats_count(t->model);
        MD_TRY(md_dev_alloc(t->dev, (np ? np : 1) * sizeof(float), (void **)&t->d_best, "best parameters"));
        MD_TRY(md_dev_alloc(t->dev, (nb ? nb : 1) * sizeof(float), (void **)&t->d_best_bn, "best BN statistics"));
    }
    size_t n = md_model_nparams(t->model);
    MD_TRY(md_dev_alloc(t->dev, (n ? n : 1) * sizeof(float), (void **)&t->d_scratch, "diagnostics scratch"));
    int nt = md_model_num_tensors(t->model);
    MD_TRY(md_dev_alloc(t->dev, (size_t)(3 * nt + 1) * sizeof(float), (void **)&t->d_diag, "diagnostics"));
    return MD_OK;
}

static md_status setup_optimizer(md_trainer *t)
{
    const struct md_train_opts *o = t->o;
    int adamw = strcmp(o->optimizer, "adamw") == 0;
    t->ocfg = (struct md_optim_cfg){
        .kind = adamw ? MD_OPT_ADAMW : MD_OPT_SGD,
        .momentum = (float)o->momentum,
        .nesterov = o->nesterov,
        .weight_decay = (float)o->weight_decay,
    };
    int nt = md_model_num_tensors(t->model);
    struct md_optim_range *r = md_malloc((size_t)(nt > 0 ? nt : 1) * sizeof *r);
    uint8_t *frozen = md_calloc((size_t)nt + 1, 1), *head = md_calloc((size_t)nt + 1, 1);
    md_status st = MD_OK;
    if (!r || !frozen || !head) { st = MD_ERR_OOM; goto out; }
    /* --backbone-lr is absolute, like a PyTorch param group's lr: the schedule
     * scales the backbone's by the same factor as the head's */
    t->backbone_mult = o->backbone_lr > 0 ? (float)(o->backbone_lr / t->lr_base) : 1.0f;
    md_model_head_mask(t->model, head);
    if (o->freeze[0] && (st = md_model_freeze_mask(t->model, o->freeze, frozen)) != MD_OK) goto out;
    for (int i = 0; i < nt; i++) {
        const struct md_param_info *p = md_model_tensor(t->model, i);
        r[i] = (struct md_optim_range){p->offset, p->numel, o->decay_all || p->decay, head[i] ? 1.0f : t->backbone_mult,
                                       frozen[i]};
    }
    st = md_optim_create(t->dev, &t->ocfg, md_model_nparams(t->model), r, nt, &t->opt);
out:
    md_free(r);
    md_free(frozen);
    md_free(head);
    return st;
}


/* Everything whose size follows the batch, set up at t->batch in one piece so
 * that --auto-batch can tear it down and try again: the model bound for the
 * batch (weights from the seed, or --init-from), the loaders, the device
 * buffers, the optimizer state, the schedule. */
static md_status setup_batch_once(md_trainer *t)
{
    const struct md_train_opts *o = t->o;
    md_status st;
    /* bound for the training batch: validation batches larger than that run
     * in chunks rather than planning 4x the training activations */
    if (t->rebind || md_model_device(t->model) != t->dev || md_model_max_batch(t->model) < t->batch) {
        MD_TRY(md_model_bind(t->model, t->dev, t->batch));
        if (o->init_from[0]) {
            md_load_report_free(&t->load);
            t->have_load = 0;
            MD_TRY(md_model_load_transfer(t->model, o->init_from, o->init_names, &t->load));
            t->have_load = 1;
        }
    }
    t->val_batch = t->batch * (o->val_batch_multiplier > 0 ? o->val_batch_multiplier : 1);
    t->max_batch = md_model_max_batch(t->model);
    t->ninputs = md_data_num_inputs(t->data);
    if (t->ninputs != md_model_num_inputs(t->model))
        return md_errf(MD_ERR_CONFIG, "model %s takes %d inputs but dataset %s delivers %d", md_model_name(t->model),
                       md_model_num_inputs(t->model), md_data_name(t->data), t->ninputs);
    for (int i = 0; i < t->ninputs; i++) {
        int c, h, w;
        md_model_input_shape(t->model, i, &c, &h, &w);
        const struct md_data_input *di = md_data_input(t->data, i);
        t->in_elems[i] = md_data_input_elems(t->data, i);
        if (t->in_elems[i] != (size_t)c * h * w)
            return md_errf(MD_ERR_CONFIG, "model %s input '%s' is %d x %d x %d but dataset %s delivers %d x %d x %d",
                           md_model_name(t->model), md_model_input_name(t->model, i), c, h, w, md_data_name(t->data),
                           di->c, di->h, di->w);
    }
    if (md_data_layout(t->data) != md_model_get_opts(t->model)->layout)
        return md_errf(MD_ERR_INTERNAL, "dataset layout %s differs from the model's %s",
                       md_layout_name(md_data_layout(t->data)), md_layout_name(md_model_get_opts(t->model)->layout));
    if (t->batch > t->max_batch)
        return md_errf(MD_ERR_INTERNAL, "training batch %d exceeds the model's bound batch %d", t->batch, t->max_batch);
    if (md_data_count(t->data, MD_SPLIT_TRAIN) <= 0)
        return md_errf(MD_ERR_DATA, "%s: the training split is empty", md_data_name(t->data));
    MD_TRY(make_loader(t, MD_SPLIT_TRAIN, t->batch, 1, &t->train_l));
    if (md_data_count(t->data, MD_SPLIT_VAL) > 0) MD_TRY(make_loader(t, MD_SPLIT_VAL, t->val_batch, 0, &t->val_l));
    if (md_data_count(t->data, MD_SPLIT_TEST) > 0) MD_TRY(make_loader(t, MD_SPLIT_TEST, t->val_batch, 0, &t->test_l));
    MD_TRY(alloc_buffers(t));
    t->lr = o->lr > 0 ? o->lr : strcmp(o->optimizer, "adamw") == 0 ? 1e-3 : 0.1;
    /* the linear scaling rule: the global batch is `ranks` times the batch
     * --lr was chosen for (docs/distributed.md) */
    t->lr_base = t->lr;
    if (t->ranks > 1 && o->lr_scaling) t->lr *= t->ranks;
    MD_TRY(setup_optimizer(t));

    t->steps_per_epoch = md_loader_num_batches(t->train_l);
    if (o->steps > 0 && o->steps < t->steps_per_epoch) t->steps_per_epoch = o->steps;
    if (t->steps_per_epoch < 1) t->steps_per_epoch = 1;
    int kind;
    if ((st = md_schedule_parse(o->lradj, &kind)) != MD_OK) return st;
    t->sched = (struct md_schedule){
        .kind = kind,
        .base_lr = t->lr,
        .total_steps = (long long)o->epochs * t->steps_per_epoch,
        .warmup_steps = (long long)llround(o->warmup_epochs * (double)t->steps_per_epoch),
        .steps_per_epoch = t->steps_per_epoch,
    };
    md_scaler_init(&t->scaler, o->precision == MD_PREC_FP16);
    if (t->scaler.enabled && o->init_loss_scale > 0) t->scaler.scale = (float)o->init_loss_scale;
    t->best_acc = -1;
    t->best_epoch = -1;
    return MD_OK;
}

/* Releases what setup_batch_once and md_trainer_pipe_setup made (the model stays bound;
 * the next setup rebinds it), and forgets the pipelined steps. */
void md_trainer_teardown_batch(md_trainer *t)
{
    md_loader_free(t->train_l);
    md_loader_free(t->val_l);
    md_loader_free(t->test_l);
    t->train_l = t->val_l = t->test_l = NULL;
    for (int i = 0; i < 2; i++) {
        md_dev_graph_destroy(t->dev, t->graph[i]);
        md_event_destroy(t->dev, t->ev_done[i]);
        t->graph[i] = NULL;
        t->ev_done[i] = NULL;
    }
    if (t->in2[0] || t->d_ctl) { /* the model outlives the trainer: back to its own buffers */
        for (int i = 0; i < t->ninputs; i++) md_model_set_input_buffer(t->model, i, NULL);
        md_model_set_step_dev(t->model, NULL);
    }
    for (int i = 0; i < t->ninputs; i++) {
        md_dev_free(t->dev, t->in2[i]);
        t->in2[i] = NULL;
    }
    md_dev_free(t->dev, t->d_labels2);
    md_dev_free(t->dev, t->d_ctl);
    md_dev_host_free(t->dev, t->h_ctl, t->h_ctl_pinned);
    md_dev_free(t->dev, t->d_labels);
    md_dev_free(t->dev, t->d_targets);
    md_dev_free(t->dev, t->d_best);
    md_dev_free(t->dev, t->d_best_bn);
    md_free(t->h_out);
    t->d_targets = t->d_best = t->d_best_bn = NULL;
    t->h_out = NULL;
    md_dev_free(t->dev, t->d_sc);
    md_dev_free(t->dev, t->d_scratch);
    md_dev_free(t->dev, t->d_diag);
    t->d_labels2 = t->d_labels = NULL;
    t->d_ctl = NULL;
    t->h_ctl = NULL;
    t->d_sc = NULL;
    t->d_scratch = t->d_diag = NULL;
    md_optim_free(t->opt);
    t->opt = NULL;
    t->pipe = t->capture = t->depth = 0;
    t->pipe_steps = t->graph_replays = t->pipe_eager = 0;
    t->capture_s = 0;
    t->pend_b = NULL;
}

/* ---- --auto-batch ------------------------------------------------------------------ */

/* report.training.auto_batch.tried gets {batch_size, fits, error}. */
void md_trainer_auto_batch_record(md_trainer *t, int batch, const char *error)
{
    if (!t->o->auto_batch) return;
    if (!t->ab_tried) t->ab_tried = cJSON_CreateArray();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "batch_size", batch);
    cJSON_AddBoolToObject(o, "fits", error == NULL);
    if (error) cJSON_AddStringToObject(o, "error", error);
    else cJSON_AddNullToObject(o, "error");
    cJSON_AddItemToArray(t->ab_tried, o);
}

/* "32 (out of memory ...), 16 (fits)": the tries for the text output. */
static void auto_batch_text(const md_trainer *t, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = '\0';
    const cJSON *e;
    cJSON_ArrayForEach(e, t->ab_tried)
    {
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(e, "error");
        if (o < n)
            o += (size_t)snprintf(buf + o, n - o, "%s%d %s%s%s", o ? "; " : "",
                                  cJSON_GetObjectItemCaseSensitive(e, "batch_size")->valueint,
                                  cJSON_IsString(err) ? "did not fit (" : "fits",
                                  cJSON_IsString(err) ? err->valuestring : "", cJSON_IsString(err) ? ")" : "");
    }
}

/* The report keeps the tries (a copy: the trainer may add one more). */
void md_trainer_auto_batch_report(md_trainer *t, cJSON *training)
{
    if (!t->ab_tried || !training) return;
    cJSON *ab = cJSON_AddObjectToObject(training, "auto_batch");
    cJSON_AddItemToObject(ab, "tried", cJSON_Duplicate(t->ab_tried, 1));
}

/* After an out-of-memory `st` at t->batch (`where`: what was under way):
 * with --auto-batch and a batch above 1, records the try, releases
 * everything batch-sized, halves the batch and returns 1 (the caller sets up
 * again); else records a last failed try and returns 0. */
int md_trainer_auto_batch_halve(md_trainer *t, md_status st, const char *where)
{
    if (st != MD_ERR_OOM || !t->o->auto_batch) return 0;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", md_errmsg());
    md_trainer_auto_batch_record(t, t->batch, msg);
    if (t->batch <= 1) {
        char tried[160] = "";
        size_t o = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, t->ab_tried)
        {
            if (o < sizeof tried)
                o += (size_t)snprintf(tried + o, sizeof tried - o, "%s%d", o ? ", " : "",
                                      cJSON_GetObjectItemCaseSensitive(e, "batch_size")->valueint);
        }
        md_errf(MD_ERR_OOM, "--auto-batch: out of memory down to batch 1 (tried %s); at batch 1: %s", tried, msg);
        return 0;
    }
    char why[700], v[32];
    snprintf(why, sizeof why, "--auto-batch: batch %d did not fit (%s%s%s); halved", t->batch, where,
             where[0] ? ": " : "", msg);
    md_warn("%s", why);
    md_trainer_teardown_batch(t);
    t->rebind = 1;
    t->batch /= 2;
    snprintf(v, sizeof v, "%d", t->batch);
    if (t->hooks.setting) t->hooks.setting(t->hooks.ctx, "batch_size", v, why);
    return 1;
}

/* setup_batch_once, halving on out-of-memory with --auto-batch. */
md_status md_trainer_setup_batch(md_trainer *t)
{
    for (;;) {
        md_status st = setup_batch_once(t);
        if (st == MD_OK) return MD_OK;
        if (!md_trainer_auto_batch_halve(t, st, "")) return st;
    }
}

void md_trainer_auto_batch_summary(md_trainer *t)
{
    if (!t->ab_tried) return;
    char tried[1200];
    auto_batch_text(t, tried, sizeof tried);
    md_out("  %-16s %s\n", "auto-batch", tried);
    md_trainer_auto_batch_report(t, t->report);
}
