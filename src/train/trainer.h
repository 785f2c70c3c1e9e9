/* trainer.h - the training and validation loop.
 *
 * md_trainer_create sets up loaders, device batch buffers, the optimizer,
 * schedule and loss scaler for a model on a device over a dataset, and
 * restores a checkpoint (resume); md_trainer_run trains the epochs, validates
 * after each, keeps the best and last checkpoints, writes the metrics lines,
 * prints the epoch lines and fills its report["training"] object, which the
 * caller takes (md_trainer_take_report). The trainer knows only its options
 * (md_train_opts) and tells its caller what it decided through hooks
 * (md_train_hooks); the application layer (app/stage_train.c) owns it.
 *
 * Determinism: batches depend on (seed, epoch, position) (data.h), dropout
 * on (seed, global step), so a run resumed from a checkpoint reaches the same
 * weights as an uninterrupted one.
 *
 * Steps run one of two ways:
 * - host-synced (eager): one sync per step (a 12-byte download of the step's
 *   loss, gradient sum of squares and correct count) to stop on a non-finite
 *   loss, skip fp16 overflow steps and clip by global norm. Used with
 *   --no-compile, on devices without graph capture, and for each epoch's
 *   last step and a short batch;
 * - pipelined (compile on, CUDA): the step's changing values (lr, optimizer
 *   t, clip, dropout offset) live in device memory (kernels.h md_optim_ctl),
 *   the optimizer skips a non-finite step on the device and clips there
 *   (fp16: it also applies the loss scaler's rule there, md_scale_ctl), the
 *   results come back asynchronously and are checked while the next step
 *   runs; inputs are double-buffered and copied on a separate stream. After
 *   one eager step each input set's step is captured as a CUDA graph and
 *   replayed. The weights are the same as host-synced steps give.
 * Plus one sync per epoch for validation.
 */
#ifndef MD_TRAINER_H
#define MD_TRAINER_H

#include <cjson/cJSON.h>

#include <stdint.h>

#include "core/platform.h"
#include "core/status.h"
#include "core/tensor.h"

struct md_model;
struct md_data;
struct md_device;

typedef struct md_trainer md_trainer;

/* The run's options the trainer uses, resolved by the caller. Those marked
 * (recorded) only go into the checkpoint metadata and the report. */
struct md_train_opts {
    char model[MD_PATH_MAX];    /* (recorded) the model's name or path */
    md_precision precision;     /* of matrix work; fp16 turns on dynamic loss scaling */
    double init_loss_scale;     /* fp16: the first loss scale (0: 65536) */
    double dropout;             /* (recorded) < 0: the model config's */
    int compile;                /* 0: host-synced steps only */
    int tf32;                   /* (recorded) */
    int max_samples;            /* (recorded) */
    double val_split;           /* (recorded) */
    uint64_t seed;              /* batch order, augmentation, dropout */
    /* the loaders */
    int augment;
    int num_workers;            /* <= 0: in the consumer's thread */
    int prefetch;
    int pin_memory;             /* > 0: page-locked batches */
    /* the loop */
    int batch_size;             /* 0: 64 */
    int epochs;
    int steps;                  /* > 0: at most this many steps per epoch */
    double lr;                  /* < 0: the optimizer's default */
    char optimizer[16];         /* sgd|adamw */
    double momentum;
    int nesterov;
    double weight_decay;
    int decay_all;
    char lradj[16];             /* constant|step|cosine|onecycle */
    double warmup_epochs;
    double grad_clip;           /* 0 = off */
    double label_smoothing;
    char loss_function[16];     /* ""/"auto": by the model's task; cross_entropy|mse|mae|huber|financial */
    int patience;               /* > 0: stop after this many epochs without a better validation score */
    double time_budget;         /* > 0: seconds from t_start by which the run (test scoring included) ends:
                                   the steps and the schedule are sized from the step time measured after a
                                   short warm-up; `epochs` stays the most it runs */
    double t_start;             /* md_now() when the run started (the budget's origin; 0: at md_trainer_run) */
    double target_acc;          /* > 0: fraction; stop after the epoch whose validation accuracy (test accuracy
                                   without a validation split) reaches it */
    int val_batch_multiplier;
    int auto_batch;             /* halve the batch on out-of-memory */
    /* files ("" = none) */
    char checkpoint_dir[MD_PATH_MAX];
    int overwrite;              /* replace an earlier run's checkpoints */
    char resume[MD_PATH_MAX];
    char metrics[MD_PATH_MAX];  /* JSON lines appended */
    char init_from[MD_PATH_MAX];
    int init_names;             /* enum md_naming (nn/name_map.h); MD_NAMES_AUTO: by the file's keys */
    char freeze[512];           /* "" = none (nn/transfer.h md_model_freeze_mask) */
    double backbone_lr;         /* < 0: --lr for all */
    int unfreeze_after;         /* > 0: the frozen parameters train from this epoch (0-based) on */
    char dump_grads[MD_PATH_MAX]; /* set: no checkpoint folder is opened */
    /* data parallelism (core/dist.h): this process is rank `rank` of `ranks`;
     * batch_size is per rank, the global batch ranks x batch_size. Only
     * rank 0 writes (the caller leaves checkpoint_dir and metrics empty on
     * the others). */
    int ranks;                  /* 0 or 1: one process */
    int rank;
    int lr_scaling;             /* 1: linear (lr x ranks), 0: none */
    double bucket_mb;           /* gradient all-reduce buckets (device collectives), MB; 0: one */
    int sync_bn;                /* batch norm statistics over every rank (--sync-bn) */
};

/* What the trainer tells its caller (each entry optional: NULL = ignored). */
struct md_train_hooks {
    void *ctx;
    /* A setting the trainer changed and why (--auto-batch's halved batch). */
    void (*setting)(void *ctx, const char *name, const char *value, const char *why);
    /* The JSON object of the --metrics file's header line; the trainer takes
     * ownership. A NULL entry or result fails the --metrics open (as out of
     * memory). */
    cJSON *(*metrics_header)(void *ctx);
    /* md_trainer_create failed after --auto-batch tried batches: the
     * report["training"] object saying what it tried; the callee owns it. */
    void (*failed_report)(void *ctx, cJSON *training);
    const char *run_id;         /* in each --metrics line; NULL = "" */
};

/* Borrows model, data and dev (they must outlive the trainer) and copies
 * opts and hooks. */
md_status md_trainer_create(const struct md_train_opts *opts, const struct md_train_hooks *hooks,
                            struct md_device *dev, struct md_model *model, struct md_data *data,
                            md_trainer **out);
/* Runs every epoch. Returns MD_ERR_INTERRUPTED after writing a checkpoint
 * when SIGINT/SIGTERM arrived, MD_ERR_NUMERIC on a non-finite loss. The
 * report object is filled also when the run fails part-way. */
md_status md_trainer_run(md_trainer *t);
void md_trainer_free(md_trainer *t); /* NULL ok */

/* report["training"]: the caller takes ownership (the stage puts it into the
 * caller's report); NULL on a second call. */
cJSON *md_trainer_take_report(md_trainer *t);

/* --dump-grads: one training step (no optimizer update) on the first batch
 * of epoch 0, written by md_model_dump_grads to `path`. */
md_status md_trainer_dump_grads(md_trainer *t, const char *path);
/* --dump-logits: the first batch of the test split (validation, then
 * training, when there is none; at most the bound batch of samples) through
 * an evaluation forward, written by md_model_dump_logits to `path`. */
md_status md_trainer_dump_logits(md_trainer *t, const char *path);

/* Test hook: calls md_interrupt_set(1) after this many optimizer steps of the
 * run (0 = never), as if Ctrl-C came at that point. */
void md_trainer_interrupt_after(md_trainer *t, long long steps);
/* Test hook: pipelined steps also where the device has no graph capture (the
 * CPU), so their results can be compared with host-synced ones. Before run. */
void md_trainer_force_pipeline(md_trainer *t);

#endif
