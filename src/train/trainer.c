/* trainer.c - the training and validation loop (see trainer.h). */
#define _POSIX_C_SOURCE 200809L
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/kernels_call.h"
#include "cli/run_info.h"
#include "core/json.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/signals.h"
#include "core/timer.h"
#include "data/data.h"
#include "nn/model.h"
#include "train/checkpoint.h"
#include "train/ckpt_meta.h"
#include "train/optim.h"
#include "train/run_dir.h"
#include "train/scaler.h"
#include "train/schedule.h"

#define CKPT_FORMAT "mpsdiag-checkpoint-1"
/* --metrics: one line per this many steps besides the per-epoch line */
#define METRICS_EVERY 50

/* Step scalars on the device, downloaded together once per step. */
struct step_scalars {
    float loss_sum;   /* sum of per-sample losses of the batch */
    float grad_sumsq; /* sum of squared (scaled) gradients */
    int32_t correct;  /* argmax == label */
    float pad;
};

/* Pipelined steps: the step's changing values in one device block, uploaded
 * before it runs, its results downloaded after it, with no host sync between
 * steps; the same kernel sequence every step, so it is captured once per
 * input buffer set as a CUDA graph and replayed. */
struct step_ctl {
    struct md_optim_ctl opt; /* lr, t, clip, grad scale in; loss_sum, grad_sumsq out */
    uint64_t rng_offset;     /* dropout: global step << 32 (md_model_set_step_dev) */
    int32_t correct;
    int32_t pad;
};

struct md_trainer {
    md_job *job;
    md_options *o;
    md_device *dev;
    struct md_model *model;
    struct md_data *data;
    struct md_loader *train_l, *val_l, *test_l;

    int batch, val_batch, max_batch, classes, ninputs;
    size_t in_elems[MD_DATA_MAX_INPUTS]; /* per sample */
    int32_t *d_labels;                   /* (max_batch) */
    struct step_scalars *d_sc;           /* one block of scalars */
    float *d_scratch;                    /* (n params): previous params for update ratios */
    float *d_diag;                       /* (3 x tensors) per-tensor sums of squares */

    md_optim *opt;
    struct md_optim_cfg ocfg;
    struct md_schedule sched;
    struct md_scaler scaler;
    double lr;
    long long steps_per_epoch;

    /* position */
    int epoch;                 /* current (0-based) */
    long long global_step;     /* optimizer iterations so far (skipped ones included) */
    long long resume_batch;    /* batches of `epoch` already done (mid-epoch resume) */
    double ep_loss;            /* running sums of the current epoch */
    long long ep_correct, ep_seen;
    double ep_time_before;     /* seconds spent in this epoch before a resume */
    int snapshot;              /* d_scratch holds the params before this epoch's last step */
    /* host seconds per phase in the current epoch (--verbose): the device is
     * synchronised once per step, so on a GPU forward/backward time shows up
     * in "sync" */
    double ph_load, ph_upload, ph_fwd, ph_bwd, ph_sync, ph_opt;

    double best_acc;
    int best_epoch;
    double run_time;           /* training seconds so far (all sessions) */

    char ckpt_dir[MD_PATH_MAX];
    md_run_dir *run_dir;       /* the locked checkpoint folder (run_dir.h) */
    char last_path[MD_PATH_MAX + 32], best_path[MD_PATH_MAX + 32];
    FILE *metrics;
    char metrics_err[700];                 /* the first failed --metrics write ("" = none) */
    long long interrupt_after;

    /* pipelined steps (see struct step_ctl); set set up by setup_pipeline */
    int pipe;                              /* full training batches run through pipe_step */
    int capture;                           /* ... captured as graphs after the first */
    int depth;                             /* steps left in flight (0 with --prefetch 1) */
    char pipe_why[200];                    /* how steps run, and why */
    struct step_ctl *d_ctl;
    struct step_ctl *h_ctl;                /* 4 host slots: [s] uploaded, [2 + s] downloaded */
    int h_ctl_pinned;
    void *in2[MD_DATA_MAX_INPUTS];         /* the second set of input buffers */
    int32_t *d_labels2;
    void *graph[2];                        /* one per input set */
    md_event *ev_done[2];
    struct md_batch *pend_b;               /* the step in flight: its batch, set, step, size */
    int pend_slot, pend_n;
    long long pend_step;
    long long pipe_steps, graph_replays, pipe_eager;
    double capture_s;
    int force_pipe;                        /* test hook */
    int rebind;                            /* --auto-batch: bind the model afresh */
    cJSON *ab_tried;                       /* --auto-batch: the batches tried (owned) */

    cJSON *report;   /* report["training"] */
    cJSON *curves;   /* report.training.curves: arrays per key */
    cJSON *diags;    /* report.training.diagnostics: one object per epoch */
};

static const char *const curve_keys[] = {"epoch", "train_loss", "train_acc", "val_loss", "val_acc",
                                         "lr", "samples_per_s", "epoch_time_s"};
#define N_CURVES ((int)(sizeof curve_keys / sizeof curve_keys[0]))
static const char *const curve_keys_z[] = {"epoch", "train_loss", "train_acc", "val_loss", "val_acc",
                                           "lr", "samples_per_s", "epoch_time_s", NULL};

/* ---- setup ------------------------------------------------------------------------ */

static md_status make_loader(md_trainer *t, md_split split, int batch, int train, struct md_loader **out)
{
    struct md_loader_opts lo = {
        .split = split,
        .batch_size = batch,
        .shuffle = train,
        .augment = train && t->o->augment,
        /* a last batch of one sample would give BatchNorm a zero variance */
        .drop_last = train && md_data_count(t->data, split) > batch,
        .num_workers = t->o->num_workers > 0 ? t->o->num_workers : 0,
        .prefetch = t->o->prefetch,
        .seed = t->o->seed,
        .pin_dev = t->o->pin_memory > 0 ? t->dev : NULL,
    };
    return md_loader_create(t->data, &lo, out);
}

static md_status alloc_buffers(md_trainer *t)
{
    MD_TRY(md_dev_alloc(t->dev, (size_t)t->max_batch * sizeof(int32_t), (void **)&t->d_labels, "label batch"));
    MD_TRY(md_dev_alloc(t->dev, sizeof(struct step_scalars), (void **)&t->d_sc, "step scalars"));
    size_t n = md_model_nparams(t->model);
    MD_TRY(md_dev_alloc(t->dev, (n ? n : 1) * sizeof(float), (void **)&t->d_scratch, "diagnostics scratch"));
    int nt = md_model_num_tensors(t->model);
    MD_TRY(md_dev_alloc(t->dev, (size_t)(3 * nt + 1) * sizeof(float), (void **)&t->d_diag, "diagnostics"));
    return MD_OK;
}

static md_status setup_optimizer(md_trainer *t)
{
    const md_options *o = t->o;
    int adamw = strcmp(o->optimizer, "adamw") == 0;
    t->ocfg = (struct md_optim_cfg){
        .kind = adamw ? MD_OPT_ADAMW : MD_OPT_SGD,
        .momentum = (float)o->momentum,
        .nesterov = o->nesterov,
        .weight_decay = (float)o->weight_decay,
    };
    int nt = md_model_num_tensors(t->model);
    struct md_optim_range *r = md_malloc((size_t)(nt > 0 ? nt : 1) * sizeof *r);
    if (!r) return MD_ERR_OOM;
    for (int i = 0; i < nt; i++) {
        const struct md_param_info *p = md_model_tensor(t->model, i);
        r[i] = (struct md_optim_range){p->offset, p->numel, o->decay_all || p->decay};
    }
    md_status st = md_optim_create(t->dev, &t->ocfg, md_model_nparams(t->model), r, nt, &t->opt);
    md_free(r);
    return st;
}

static void setup_report(md_trainer *t)
{
    t->report = cJSON_CreateObject();
    t->curves = cJSON_AddObjectToObject(t->report, "curves");
    for (int i = 0; i < N_CURVES; i++) cJSON_AddArrayToObject(t->curves, curve_keys[i]);
    t->diags = cJSON_AddArrayToObject(t->report, "diagnostics");
}

static md_status resume(md_trainer *t);

/* Everything whose size follows the batch, set up at t->batch in one piece so
 * that --auto-batch can tear it down and try again: the model bound for the
 * batch (weights from the seed, or --init-from), the loaders, the device
 * buffers, the optimizer state, the schedule. */
static md_status setup_batch(md_trainer *t)
{
    md_options *o = t->o;
    md_status st;
    /* bound for the training batch: validation batches larger than that run
     * in chunks rather than planning 4x the training activations */
    if (t->rebind || md_model_device(t->model) != t->dev || md_model_max_batch(t->model) < t->batch) {
        MD_TRY(md_model_bind(t->model, t->dev, t->batch));
        if (o->init_from[0]) MD_TRY(md_model_load_weights(t->model, o->init_from));
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
    MD_TRY(setup_optimizer(t));

    t->steps_per_epoch = md_loader_num_batches(t->train_l);
    if (o->steps > 0 && o->steps < t->steps_per_epoch) t->steps_per_epoch = o->steps;
    if (t->steps_per_epoch < 1) t->steps_per_epoch = 1;
    t->lr = o->lr > 0 ? o->lr : t->ocfg.kind == MD_OPT_ADAMW ? 1e-3 : 0.1;
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
    t->best_acc = -1;
    t->best_epoch = -1;
    return MD_OK;
}

/* Releases what setup_batch and setup_pipeline made (the model stays bound;
 * the next setup_batch rebinds it), and forgets the pipelined steps. */
static void teardown_batch(md_trainer *t)
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
static void auto_batch_record(md_trainer *t, int batch, const char *error)
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
static void auto_batch_report(md_trainer *t, cJSON *training)
{
    if (!t->ab_tried || !training) return;
    cJSON *ab = cJSON_AddObjectToObject(training, "auto_batch");
    cJSON_AddItemToObject(ab, "tried", cJSON_Duplicate(t->ab_tried, 1));
}

/* After an out-of-memory `st` at t->batch (`where`: what was under way):
 * with --auto-batch and a batch above 1, records the try, releases
 * everything batch-sized, halves the batch and returns 1 (the caller sets up
 * again); else records a last failed try and returns 0. */
static int auto_batch_halve(md_trainer *t, md_status st, const char *where)
{
    if (st != MD_ERR_OOM || !t->o->auto_batch) return 0;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", md_errmsg());
    auto_batch_record(t, t->batch, msg);
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
    teardown_batch(t);
    t->rebind = 1;
    t->batch /= 2;
    snprintf(v, sizeof v, "%d", t->batch);
    md_job_setting(t->job, "batch_size", v, why);
    return 1;
}

/* setup_batch, halving on out-of-memory with --auto-batch. */
static md_status setup_batch_fitting(md_trainer *t)
{
    for (;;) {
        md_status st = setup_batch(t);
        if (st == MD_OK) return MD_OK;
        if (!auto_batch_halve(t, st, "")) return st;
    }
}


/* The line that starts this run's lines in the --metrics file: the run id,
 * command line and config of the report's "run" object (run_info.h), so
 * runs appended to one file can be told apart. */
static md_status metrics_header(md_trainer *t)
{
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(t->job->report, "run");
    cJSON *own = run ? NULL : md_run_info_json(t->job);
    cJSON *h = md_run_info_metrics_header(run ? run : own);
    char *s = h ? cJSON_PrintUnformatted(h) : NULL;
    cJSON_Delete(own);
    cJSON_Delete(h);
    if (!s) return md_errf(MD_ERR_OOM, "--metrics %s: out of memory for the header line", t->o->metrics);
    int bad = fprintf(t->metrics, "%s\n", s) < 0 || fflush(t->metrics) != 0;
    cJSON_free(s);
    if (bad) return md_errf(MD_ERR_IO, "--metrics %s: cannot write: %s", t->o->metrics, strerror(errno));
    return MD_OK;
}

md_status md_trainer_create(md_job *job, md_trainer **out)
{
    *out = NULL;
    md_status st = MD_OK;
    md_trainer *t = md_calloc(1, sizeof *t);
    if (!t) return MD_ERR_OOM;
    t->job = job;
    t->o = job->opts;
    t->dev = job->dev;
    t->model = job->model;
    t->data = job->data;
    md_options *o = t->o;
    setup_report(t);

    t->batch = o->batch_size > 0 ? o->batch_size : 64;
    t->classes = md_model_num_classes(t->model);
    if ((st = setup_batch_fitting(t)) != MD_OK) goto fail;

    if (o->checkpoint_dir[0]) {
        snprintf(t->ckpt_dir, sizeof t->ckpt_dir, "%s", o->checkpoint_dir);
        /* --dump-grads writes no checkpoints: it leaves the folder alone */
        if (!o->dump_grads[0] &&
            (st = md_run_dir_open(t->ckpt_dir, o->resume[0] != 0, o->overwrite, &t->run_dir)) != MD_OK)
            goto fail;
        snprintf(t->last_path, sizeof t->last_path, "%s/last.safetensors", t->ckpt_dir);
        snprintf(t->best_path, sizeof t->best_path, "%s/best.safetensors", t->ckpt_dir);
    }
    if (o->metrics[0]) {
        t->metrics = fopen(o->metrics, "a");
        if (!t->metrics) {
            st = md_errf(MD_ERR_IO, "--metrics %s: cannot open for appending: %s", o->metrics, strerror(errno));
            goto fail;
        }
        if ((st = metrics_header(t)) != MD_OK) goto fail;
    }
    if (o->resume[0] && (st = resume(t)) != MD_OK) goto fail;
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
    if (t->ab_tried && job->report && !cJSON_GetObjectItemCaseSensitive(job->report, "training"))
        auto_batch_report(t, cJSON_AddObjectToObject(job->report, "training"));
    md_trainer_free(t);
    return st;
}

void md_trainer_free(md_trainer *t)
{
    if (!t) return;
    teardown_batch(t);
    if (t->metrics) fclose(t->metrics);
    md_run_dir_close(t->run_dir);
    cJSON_Delete(t->report);
    cJSON_Delete(t->ab_tried);
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

static md_status upload_batch(md_trainer *t, const struct md_batch *b, int from, int n);

md_status md_trainer_dump_grads(md_trainer *t, const char *path)
{
    struct md_batch *b = NULL;
    MD_TRY(md_loader_start_epoch(t->train_l, 0));
    MD_TRY(md_loader_next(t->train_l, &b));
    if (!b) return md_errf(MD_ERR_DATA, "--dump-grads: the training split gave no batch");
    md_status st = upload_batch(t, b, 0, b->n);
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
    /* the evaluation batch may exceed the bound batch: its first part */
    int n = b->n < t->max_batch ? b->n : t->max_batch;
    md_status st = upload_batch(t, b, 0, n);
    if (st == MD_OK) st = md_model_dump_logits(t->model, b->labels, n, path);
    md_status sync = md_dev_sync(t->dev);
    md_loader_release(l, b);
    MD_TRY(st);
    MD_TRY(sync);
    md_out("  Evaluation logits of the first %s batch (%d samples) and its inputs written to %s\n", split, n, path);
    return MD_OK;
}

/* ---- checkpoints ------------------------------------------------------------------- */

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
    const md_options *o = t->o;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "model", o->model);
    cJSON_AddStringToObject(c, "dataset", md_data_name(t->data));
    cJSON_AddNumberToObject(c, "batch_size", t->batch);
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

static md_status resume(md_trainer *t)
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
    struct md_ckpt_limits lim = {t->steps_per_epoch, t->batch, curve_keys_z};
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

/* ---- one step ------------------------------------------------------------------------ */

/* Samples [from, from + n) of a host batch into the model's input buffers. */
static md_status upload_batch(md_trainer *t, const struct md_batch *b, int from, int n)
{
    for (int i = 0; i < t->ninputs; i++)
        MD_TRY(md_dev_upload(t->dev, md_model_input_buffer(t->model, i), b->inputs[i] + (size_t)from * t->in_elems[i],
                             (size_t)n * t->in_elems[i] * sizeof(float)));
    return md_dev_upload(t->dev, t->d_labels, b->labels + from, (size_t)n * sizeof(int32_t));
}

/* `step` counts from 0. */
static md_status numeric_failure_at(md_trainer *t, long long step, const char *what)
{
    char layer[256] = "";
    int found = 0;
    if (md_dev_sync(t->dev) != MD_OK || md_model_first_nonfinite(t->model, layer, sizeof layer, &found) != MD_OK ||
        !found)
        layer[0] = '\0';
    return md_errf(MD_ERR_NUMERIC, "epoch %d, step %lld: %s%s%s", t->epoch + 1, step + 1, what,
                   layer[0] ? "; first non-finite output: " : "", layer);
}

static md_status numeric_failure(md_trainer *t, const char *what) { return numeric_failure_at(t, t->global_step, what); }

/* The learned weights of weighted_add layers (the seeds' "integration
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
static md_status collect_diagnostics(md_trainer *t, int have_update)
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

/* ---- pipelined steps ---------------------------------------------------------------- */

/* Decides whether full batches run pipelined (and captured), allocates what
 * that needs, and says why in pipe_why. */
static md_status setup_pipeline(md_trainer *t)
{
    const md_options *o = t->o;
    /* Metal can capture too, but its optimizer has no device-side step
     * values yet (metal_plan.c refuses md_optim_ctl): CUDA only */
    int can = md_dev_can_capture(t->dev) && md_device_kind(t->dev) == MD_BACKEND_CUDA;
    const char *why = NULL;
    if (!o->compile) why = "--no-compile: each step runs op by op and waits for its loss";
    else if (t->scaler.enabled) why = "fp16 dynamic loss scaling decides each step on the host: steps run op by op";
    else if (!can && !t->force_pipe)
        why = md_device_kind(t->dev) == MD_BACKEND_METAL
                  ? "one command buffer per step, synced once for its loss (replaying a captured step needs "
                    "device-side step values in the Metal optimizer: not built)"
                  : "each step runs as it is called and syncs once for its loss (no graph capture on this device)";
    if (why) {
        snprintf(t->pipe_why, sizeof t->pipe_why, "%s", why);
        return MD_OK;
    }
    t->pipe = 1;
    t->capture = can;
    t->depth = o->prefetch >= 2 ? 1 : 0;
    snprintf(t->pipe_why, sizeof t->pipe_why, "%s%s",
             can ? "captured as a CUDA graph after one eager step and replayed (inputs double-buffered, copied on "
                   "a separate stream)"
                 : "pipelined with device-side step values (not captured: no graph capture on this device)",
             t->depth ? "" : "; --prefetch 1: one step in flight at most, each waited for");
    MD_TRY(md_dev_alloc(t->dev, sizeof(struct step_ctl), (void **)&t->d_ctl, "step control"));
    MD_TRY(md_dev_host_alloc(t->dev, 4 * sizeof(struct step_ctl), (void **)&t->h_ctl, &t->h_ctl_pinned));
    memset(t->h_ctl, 0, 4 * sizeof(struct step_ctl));
    for (int i = 0; i < t->ninputs; i++)
        MD_TRY(md_dev_alloc(t->dev, (size_t)t->max_batch * t->in_elems[i] * sizeof(float), &t->in2[i],
                            "input batch (second buffer)"));
    MD_TRY(md_dev_alloc(t->dev, (size_t)t->max_batch * sizeof(int32_t), (void **)&t->d_labels2,
                        "label batch (second buffer)"));
    for (int i = 0; i < 2; i++) MD_TRY(md_event_create(t->dev, &t->ev_done[i]));
    return MD_OK;
}

/* The step's kernels, with every changing value read from t->d_ctl. */
static md_status pipe_body(md_trainer *t, const int32_t *labels, int n)
{
    MD_TRY(md_model_forward(t->model, n, 1));
    MD_TRY(md_model_loss(t->model, labels, (float)t->o->label_smoothing, t->scaler.scale / (float)n,
                         &t->d_ctl->opt.loss_sum, &t->d_ctl->correct));
    MD_TRY(md_model_backward(t->model));
    float *grads = md_model_grads(t->model), *params = md_model_params(t->model);
    struct md_reduce_args r = {.op = MD_RED_SUMSQ, .n = md_model_nparams(t->model), .dtype = MD_F32, .a = grads,
                               .out = &t->d_ctl->opt.grad_sumsq};
    MD_TRY(md_k_reduce(t->dev, &r));
    return md_optim_step_ctl(t->opt, params, grads, &t->d_ctl->opt, md_model_params_half(t->model),
                             md_model_get_opts(t->model)->compute_dtype);
}

/* Records the step as a graph for input set s. Nothing runs during capture;
 * on failure the capture is abandoned (the caller runs the step eagerly). */
static md_status capture_step(md_trainer *t, int s, const int32_t *labels, int n)
{
    double c0 = md_now();
    MD_TRY(md_dev_capture_begin(t->dev));
    md_status st = pipe_body(t, labels, n);
    char msg[320];
    snprintf(msg, sizeof msg, "%s", st != MD_OK ? md_errmsg() : "");
    void *g = NULL;
    md_status st2 = md_dev_capture_end(t->dev, &g);
    if (st == MD_OK) st = st2;
    else md_errf(st, "%s", msg);
    if (st != MD_OK) {
        md_dev_graph_destroy(t->dev, g);
        return st;
    }
    t->graph[s] = g;
    t->capture_s += md_now() - c0;
    return MD_OK;
}

/* Waits for the step in flight, hands its batch back and adds its results. */
static md_status pipe_finish(md_trainer *t)
{
    if (!t->pend_b) return MD_OK;
    int s = t->pend_slot;
    md_status st = md_event_wait(t->dev, t->ev_done[s]);
    md_loader_release(t->train_l, t->pend_b);
    t->pend_b = NULL;
    MD_TRY(st);
    const struct step_ctl *r = &t->h_ctl[2 + s];
    /* the device skipped the update of such a step (md_optim_ctl) */
    if (!isfinite(r->opt.loss_sum)) return numeric_failure_at(t, t->pend_step, "the loss is not finite");
    if (!isfinite(r->opt.grad_sumsq)) return numeric_failure_at(t, t->pend_step, "the gradients are not finite");
    t->ep_loss += (double)r->opt.loss_sum;
    t->ep_correct += r->correct;
    t->ep_seen += t->pend_n;
    return MD_OK;
}

/* After an error: the step in flight is dropped (its batch handed back). */
static void pipe_abandon(md_trainer *t)
{
    if (!t->pend_b) return;
    (void)md_dev_sync(t->dev);
    md_loader_release(t->train_l, t->pend_b);
    t->pend_b = NULL;
}

/* Queues one full-batch step and then finishes the previous one, so the host
 * prepares step i+1 while the device runs step i. Takes b (released by
 * pipe_finish once the step that reads it is done). */
static md_status pipe_step(md_trainer *t, struct md_batch *b)
{
    int s = (int)(t->pipe_steps & 1);
    int32_t *labels = s ? t->d_labels2 : t->d_labels;
    double c0 = md_now();
    md_status st = MD_OK;
    /* input set s was last read by step i-2, which pipe_finish waited for */
    for (int i = 0; st == MD_OK && i < t->ninputs; i++) {
        md_model_set_input_buffer(t->model, i, s ? t->in2[i] : NULL);
        st = md_dev_upload_side(t->dev, md_model_input_buffer(t->model, i), b->inputs[i],
                                (size_t)b->n * t->in_elems[i] * sizeof(float));
    }
    if (st == MD_OK) st = md_dev_upload_side(t->dev, labels, b->labels, (size_t)b->n * sizeof(int32_t));
    struct step_ctl *u = &t->h_ctl[s];
    memset(u, 0, sizeof *u);
    u->opt.step = md_optim_steps(t->opt) + 1;
    u->opt.clip = t->o->grad_clip > 0 ? t->o->grad_clip : 0.0;
    u->opt.lr = (float)md_schedule_lr(&t->sched, t->global_step);
    u->opt.grad_scale = 1.0f / t->scaler.scale;
    u->rng_offset = (uint64_t)t->global_step << 32;
    if (st == MD_OK) st = md_dev_upload(t->dev, t->d_ctl, u, sizeof *u);
    if (st == MD_OK) st = md_dev_side_join(t->dev);
    md_model_set_step_dev(t->model, &t->d_ctl->rng_offset);
    double c1 = md_now();
    if (st == MD_OK && !t->graph[s] && t->capture && t->pipe_steps > 0) {
        /* after the eager first step (lazy plans, workspaces, cuDNN choices) */
        st = capture_step(t, s, labels, b->n);
        if (st != MD_OK) {
            md_warn("CUDA graph capture of the training step failed (%s); the steps run without it", md_errmsg());
            snprintf(t->pipe_why, sizeof t->pipe_why, "pipelined; graph capture failed, so not captured");
            t->capture = 0;
            st = MD_OK;
        }
    }
    if (st == MD_OK) {
        if (t->graph[s]) {
            st = md_dev_graph_launch(t->dev, t->graph[s]);
            t->graph_replays++;
        } else {
            st = pipe_body(t, labels, b->n);
            t->pipe_eager++;
        }
    }
    if (st == MD_OK) st = md_dev_download_async(t->dev, &t->h_ctl[2 + s], t->d_ctl, sizeof(struct step_ctl));
    if (st == MD_OK) st = md_event_record(t->dev, t->ev_done[s]);
    if (st != MD_OK) {
        pipe_abandon(t);
        (void)md_dev_sync(t->dev);
        md_loader_release(t->train_l, b);
        return st;
    }
    md_optim_set_steps(t->opt, u->opt.step);
    double c2 = md_now();
    md_status prev = pipe_finish(t);
    t->pend_b = b;
    t->pend_slot = s;
    t->pend_n = b->n;
    t->pend_step = t->global_step;
    t->global_step++;
    t->pipe_steps++;
    if (prev == MD_OK && t->depth == 0) prev = pipe_finish(t);
    t->ph_upload += c1 - c0;
    t->ph_fwd += c2 - c1; /* queueing the step (or its replay) */
    t->ph_sync += md_now() - c2;
    return prev;
}

/* Forward, loss, backward and (unless skipped) the optimizer step on one batch. */
static md_status train_step(md_trainer *t, const struct md_batch *b, int snapshot)
{
    double c0 = md_now();
    MD_TRY(upload_batch(t, b, 0, b->n));
    MD_TRY(md_dev_memset0(t->dev, t->d_sc, sizeof(struct step_scalars)));
    double c1 = md_now();
    md_model_set_step_dev(t->model, NULL);
    md_model_set_step(t->model, (uint64_t)t->global_step);
    MD_TRY(md_model_forward(t->model, b->n, 1));
    double c2 = md_now();
    /* mean loss, times the loss scale (fp16) */
    float used_scale = t->scaler.scale;
    MD_TRY(md_model_loss(t->model, t->d_labels, (float)t->o->label_smoothing, used_scale / (float)b->n,
                         &t->d_sc->loss_sum, &t->d_sc->correct));
    MD_TRY(md_model_backward(t->model));
    float *grads = md_model_grads(t->model), *params = md_model_params(t->model);
    size_t n = md_model_nparams(t->model);
    struct md_reduce_args r = {.op = MD_RED_SUMSQ, .n = n, .dtype = MD_F32, .a = grads, .out = &t->d_sc->grad_sumsq};
    MD_TRY(md_k_reduce(t->dev, &r));
    double c3 = md_now();
    struct step_scalars sc;
    MD_TRY(md_dev_download(t->dev, &sc, t->d_sc, sizeof sc));
    MD_TRY(md_dev_sync(t->dev));
    double c4 = md_now();
    if (!isfinite(sc.loss_sum)) return numeric_failure(t, "the loss is not finite");
    int action = md_scaler_update(&t->scaler, isfinite(sc.grad_sumsq));
    if (action < 0) return numeric_failure(t, "the gradients are not finite");
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
    t->ep_loss += (double)sc.loss_sum;
    t->ep_correct += sc.correct;
    t->ep_seen += b->n;
    return MD_OK;
}

/* Loss and accuracy of the model over a whole split, without gradients. */
/* `what` names the phase for the test hook and an interruption's message
 * ("validation", "test"). */
static md_status evaluate(md_trainer *t, struct md_loader *l, int epoch, double *loss, double *acc, long long *count,
                          const char *what)
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
            st = upload_batch(t, b, from, n);
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

/* ---- output ------------------------------------------------------------------------- */

static void fmt_duration(double s, char *b, size_t n)
{
    if (s < 0) snprintf(b, n, "-");
    else if (s < 60) snprintf(b, n, "%.1fs", s);
    else if (s < 3600) snprintf(b, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(b, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

static void print_header(void)
{
    md_out("  %5s  %10s  %9s  %8s  %7s  %9s  %9s  %7s  %7s\n", "epoch", "train loss", "train acc", "val loss",
           "val acc", "lr", "samples/s", "time", "ETA");
}

static void curve_add(md_trainer *t, const char *key, double v)
{
    /* JSON has no NaN: a missing value (no validation split) is null */
    cJSON_AddItemToArray(cJSON_GetObjectItem(t->curves, key), isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull());
}

static void metrics_line(md_trainer *t, const char *kind, double loss, double acc, double vloss, double vacc,
                         double lr, double sps, double secs)
{
    if (!t->metrics) return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", kind);
    cJSON_AddStringToObject(o, "run_id", md_run_info_id());
    cJSON_AddNumberToObject(o, "epoch", t->epoch + 1);
    cJSON_AddNumberToObject(o, "step", (double)t->global_step);
    cJSON_AddNumberToObject(o, "train_loss", loss);
    cJSON_AddNumberToObject(o, "train_acc", acc);
    if (vloss >= 0) {
        cJSON_AddNumberToObject(o, "val_loss", vloss);
        cJSON_AddNumberToObject(o, "val_acc", vacc);
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

/* ---- the run ------------------------------------------------------------------------ */

/* `where` describes the point ("during validation after epoch 2 (batch 3
 * of 10)"); NULL: at the current epoch and step. */
static md_status interrupted(md_trainer *t, long long batch_done, double ep_time, const char *where)
{
    md_progress_done();
    char at[512];
    if (where) snprintf(at, sizeof at, "%s", where);
    else snprintf(at, sizeof at, "at epoch %d, step %lld", t->epoch + 1, t->global_step);
    if (t->last_path[0]) {
        md_status st = save_checkpoint(t, t->last_path, t->epoch, batch_done, ep_time);
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
    long long samples_now = 0, last = t->steps_per_epoch;
    char label[32];
    snprintf(label, sizeof label, "  epoch %d", t->epoch + 1);
    t->ph_load = t->ph_upload = t->ph_fwd = t->ph_bwd = t->ph_sync = t->ph_opt = 0;
    for (long long i = 0; i < last; i++) {
        struct md_batch *b;
        double l0 = md_now();
        MD_TRY(md_loader_next(t->train_l, &b));
        t->ph_load += md_now() - l0;
        if (!b) break;
        if (i < start_batch) { /* resumed mid-epoch: the same order, these are done */
            md_loader_release(t->train_l, b);
            continue;
        }
        /* the epoch's last step (diagnostics snapshot) and a short batch run apart */
        int n = b->n;
        md_status st;
        if (t->pipe && n == t->batch && i != last - 1) {
            st = pipe_step(t, b);
        } else {
            st = pipe_finish(t);
            if (st == MD_OK) st = train_step(t, b, i == last - 1);
            md_loader_release(t->train_l, b);
        }
        samples_now += n;
        if (st != MD_OK) {
            pipe_abandon(t);
            md_progress_done();
            return st;
        }
        double el = md_now() - t0;
        if (t->metrics && t->ep_seen && t->global_step % METRICS_EVERY == 0)
            metrics_line(t, "step", t->ep_loss / (double)t->ep_seen, (double)t->ep_correct / (double)t->ep_seen, -1,
                         0, md_schedule_lr(&t->sched, t->global_step - 1), samples_now / (el > 0 ? el : 1e-9), el);
        char suffix[96];
        snprintf(suffix, sizeof suffix, "loss %.4f  %.0f samples/s", t->ep_seen ? t->ep_loss / (double)t->ep_seen : 0.0,
                 samples_now / (el > 0 ? el : 1e-9));
        md_progress(label, (double)(i + 1), (double)last, suffix);
        if (t->interrupt_after > 0 && t->global_step >= t->interrupt_after) md_interrupt_set(1);
        if (md_interrupted()) {
            MD_TRY(pipe_finish(t)); /* the checkpoint holds every step counted */
            t->run_time += el;
            return interrupted(t, i + 1, ep_before + el, NULL);
        }
    }
    md_status fin = pipe_finish(t);
    if (fin != MD_OK) {
        md_progress_done();
        return fin;
    }
    md_progress_done();
    double el = md_now() - t0;
    md_verbose("  epoch %d phases: data wait %.2fs, upload %.2fs, forward %.2fs, loss+backward %.2fs, sync %.2fs, "
               "optimizer %.2fs of %.2fs\n",
               t->epoch + 1, t->ph_load, t->ph_upload, t->ph_fwd, t->ph_bwd, t->ph_sync, t->ph_opt, el);
    t->run_time += el;
    *ep_time_out = ep_before + el;
    *sps_out = samples_now / (el > 0 ? el : 1e-9);
    return MD_OK;
}

/* One attempt at the whole run at t->batch (md_trainer_run retries it). */
static md_status run_once(md_trainer *t)
{
    const md_options *o = t->o;
    md_status st = MD_OK;
    char a[32], b[32], c[32];
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
    if ((st = setup_pipeline(t)) != MD_OK) return st;

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
    md_out("  %-16s %g peak, %s%s; batch %d (validation %d), %lld steps per epoch\n", "schedule", t->lr,
           md_schedule_name(t->sched.kind), o->warmup_epochs > 0 ? " after linear warm-up" : "", t->batch,
           t->val_batch, t->steps_per_epoch);
    if (t->scaler.enabled) md_out("  %-16s dynamic, starting at %.0f\n", "loss scaling", (double)t->scaler.scale);
    md_out("  %-16s %s\n", "steps", t->pipe_why);
    int start_epoch = t->epoch;
    if (start_epoch >= o->epochs)
        md_out("  nothing to train: the checkpoint is at epoch %d of %d (raise --epochs to continue); scoring it\n",
               start_epoch, o->epochs);
    else
        print_header();
    for (; t->epoch < o->epochs; t->epoch++) {
        double sps = 0, ep_time = 0;
        if ((st = run_epoch(t, &sps, &ep_time)) != MD_OK) goto done;
        double tl = t->ep_seen ? t->ep_loss / (double)t->ep_seen : 0;
        double ta = t->ep_seen ? (double)t->ep_correct / (double)t->ep_seen : 0;
        double vl = -1, va = 0;
        long long vn = 0;
        double v0 = md_now();
        if (t->val_l && (st = evaluate(t, t->val_l, t->epoch, &vl, &va, &vn, "validation")) != MD_OK) {
            if (st == MD_ERR_INTERRUPTED) {
                /* the epoch's steps are done: saved as a finished epoch (its
                 * validation is what a resumed run skips) */
                char where[600];
                snprintf(where, sizeof where, "%s after epoch %d", md_errmsg() + strlen("interrupted "),
                         t->epoch + 1);
                t->epoch++;
                t->ep_loss = 0;
                t->ep_correct = t->ep_seen = 0;
                st = interrupted(t, 0, 0, where);
            }
            goto done;
        }
        double vtime = md_now() - v0;
        t->run_time += vtime;
        ep_time += vtime;
        double lr = md_schedule_lr(&t->sched, t->global_step > 0 ? t->global_step - 1 : 0);
        if ((st = collect_diagnostics(t, t->snapshot)) != MD_OK) goto done;
        /* run_time covers every epoch so far, also those before a resume */
        double eta = (o->epochs - t->epoch - 1) * (t->run_time / (t->epoch + 1));
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
        md_out("  %5d  %10.4f  %8.2f%%  %8s  %7s  %9.3g  %9s  %7s  %7s\n", t->epoch + 1, tl, 100 * ta, vls, vas, lr,
               md_fmt_thousands(llround(sps), a, sizeof a), et, es);
        fflush(stdout); /* a log file or pipe sees each epoch as it ends */
        curve_add(t, "epoch", t->epoch + 1);
        curve_add(t, "train_loss", tl);
        curve_add(t, "train_acc", ta);
        curve_add(t, "val_loss", t->val_l ? vl : (double)NAN);
        curve_add(t, "val_acc", t->val_l ? va : (double)NAN);
        curve_add(t, "lr", lr);
        curve_add(t, "samples_per_s", sps);
        curve_add(t, "epoch_time_s", ep_time);
        metrics_line(t, "epoch", tl, ta, t->val_l ? vl : -1, va, lr, sps, ep_time);

        /* the best model by validation accuracy (training accuracy without a val split) */
        double score = t->val_l ? va : ta;
        int best = score > t->best_acc;
        if (best) {
            t->best_acc = score;
            t->best_epoch = t->epoch + 1;
        }
        if (t->best_path[0]) {
            /* state after this epoch: the next run starts at epoch + 1, batch 0 */
            t->ep_loss = 0;
            t->ep_correct = t->ep_seen = 0;
            if (best) st = save_checkpoint(t, t->best_path, t->epoch + 1, 0, 0);
            if (st == MD_OK) st = save_checkpoint(t, t->last_path, t->epoch + 1, 0, 0);
            if (st != MD_OK) goto done;
            if (best)
                md_out("  Saved best model (epoch %d, %s accuracy %.2f%%) to %s\n", t->epoch + 1,
                       t->val_l ? "validation" : "training", 100 * score, t->best_path);
        }
        if (md_interrupted()) {
            t->epoch++;
            st = interrupted(t, 0, 0, NULL);
            goto done;
        }
    }
    if (t->test_l) {
        double tl, ta;
        long long tn;
        if ((st = evaluate(t, t->test_l, 0, &tl, &ta, &tn, "test")) != MD_OK) {
            if (st == MD_ERR_INTERRUPTED && t->last_path[0]) {
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", md_errmsg());
                md_errf(st, "%s; the checkpoints of every epoch are written", msg);
            }
            goto done;
        }
        md_out("  %-16s loss %.4f, accuracy %.2f%% on %s samples (the weights after epoch %d)\n", "test", tl, 100 * ta,
               md_fmt_thousands(tn, a, sizeof a), t->epoch);
        cJSON *te = cJSON_AddObjectToObject(t->report, "test");
        cJSON_AddNumberToObject(te, "loss", tl);
        cJSON_AddNumberToObject(te, "acc", ta);
        cJSON_AddNumberToObject(te, "samples", (double)tn);
        cJSON_AddNumberToObject(te, "after_epoch", t->epoch);
    }
done:
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
    if (t->best_epoch > 0) {
        cJSON *be = cJSON_AddObjectToObject(t->report, "best");
        cJSON_AddNumberToObject(be, "epoch", t->best_epoch);
        cJSON_AddNumberToObject(be, "acc", t->best_acc);
        cJSON_AddStringToObject(be, "metric", t->val_l ? "val_acc" : "train_acc");
        if (t->best_path[0]) cJSON_AddStringToObject(be, "path", t->best_path);
    }
    if (t->last_path[0]) cJSON_AddStringToObject(t->report, "last_checkpoint", t->last_path);
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
            auto_batch_record(t, t->batch, md_errmsg());
            break;
        }
        if (!auto_batch_halve(t, st, "in the first steps")) break;
        t->global_step = step0;
        cJSON_Delete(t->report);
        setup_report(t);
        if ((st = setup_batch_fitting(t)) != MD_OK) {
            set_up = 0;
            break;
        }
        md_out("  --auto-batch: starting again at batch %d\n", t->batch);
    }
    /* a run that got past setting up and ended for another reason did fit */
    if (t->o->auto_batch && set_up && st != MD_ERR_OOM) auto_batch_record(t, t->batch, NULL);
    if (t->ab_tried) {
        char tried[1200];
        auto_batch_text(t, tried, sizeof tried);
        md_out("  %-16s %s\n", "auto-batch", tried);
        auto_batch_report(t, t->report);
    }
    return st;
}
