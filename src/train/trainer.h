/* trainer.h - the training and validation loop.
 *
 * md_trainer_create sets up loaders, device batch buffers, the optimizer,
 * schedule and loss scaler for job->model on job->dev over job->data, and
 * restores --resume; md_trainer_run trains the epochs, validates after each,
 * keeps the best and last checkpoints, writes --metrics, prints the epoch
 * lines and fills report["training"]. The stage (stage_train.c) owns it.
 *
 * Determinism: batches depend on (seed, epoch, position) (data.h), dropout
 * on (seed, global step), so a run resumed from a checkpoint reaches the same
 * weights as an uninterrupted one.
 *
 * Steps run one of two ways:
 * - host-synced (eager): one sync per step (a 12-byte download of the step's
 *   loss, gradient sum of squares and correct count) to stop on a non-finite
 *   loss, skip fp16 overflow steps and clip by global norm. Used with
 *   --no-compile, fp16 loss scaling, on devices without graph capture, and
 *   for each epoch's last step and a short batch;
 * - pipelined (compile on, CUDA): the step's changing values (lr, optimizer
 *   t, clip, dropout offset) live in device memory (kernels.h md_optim_ctl),
 *   the optimizer skips a non-finite step on the device and clips there, the
 *   results come back asynchronously and are checked while the next step
 *   runs; inputs are double-buffered and copied on a separate stream. After
 *   one eager step each input set's step is captured as a CUDA graph and
 *   replayed. The weights are the same as host-synced steps give.
 * Plus one sync per epoch for validation.
 */
#ifndef MD_TRAINER_H
#define MD_TRAINER_H

#include <cjson/cJSON.h>

#include "app/job.h"

typedef struct md_trainer md_trainer;

md_status md_trainer_create(md_job *job, md_trainer **out);
/* Runs every epoch. Returns MD_ERR_INTERRUPTED after writing a checkpoint
 * when SIGINT/SIGTERM arrived, MD_ERR_NUMERIC on a non-finite loss. The
 * report object is filled also when the run fails part-way. */
md_status md_trainer_run(md_trainer *t);
void md_trainer_free(md_trainer *t); /* NULL ok */

/* report["training"]: the caller takes ownership (the stage puts it into the
 * job's report); NULL on a second call. */
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
