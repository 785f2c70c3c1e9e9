/* trainer_impl.h - the trainer's state and the functions its files share.
 *
 * Only the src/train/trainer*.c files include this; everyone else sees the
 * opaque md_trainer of trainer.h. Which file owns what (and how a step runs
 * in each mode) is written down in docs/training-internals.md:
 *   trainer.c          create/free, the epoch loop, md_trainer_run (--auto-batch restarts)
 *   trainer_setup.c    everything sized by the batch; --auto-batch halving
 *   trainer_ckpt.c     checkpoint tensors and metadata, save, --resume, save on interrupt
 *   trainer_step.c     the host-synced step; --dump-grads / --dump-logits
 *   trainer_pipe.c     pipelined steps and their CUDA-graph capture
 *   trainer_eval.c     validation and test scoring
 *   trainer_diag.c     per-epoch diagnostics (norms, update ratios, dead ReLUs)
 *   trainer_budget.c   --time-budget (warm-up, plan, schedule length) and --target-accuracy
 *   trainer_metrics.c  report["training"], its curves, --metrics lines, the printed table
 *   trainer_dist.c     data parallelism: communicator, gradient all-reduce, its figures
 */
#ifndef MD_TRAINER_IMPL_H
#define MD_TRAINER_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "backend/kernels_call.h"
#include "data/data.h"
#include "data/metrics.h"
#include "nn/transfer.h"
#include "train/optim.h"
#include "train/run_dir.h"
#include "train/scaler.h"
#include "train/schedule.h"
#include "train/trainer.h"

/* Step scalars on the device, downloaded together once per step. */
struct step_scalars {
    float loss_sum;   /* sum of per-sample losses of the batch */
    float grad_sumsq; /* sum of squared (scaled) gradients */
    int32_t correct;  /* argmax == label */
    float pad;
    float reg[3];     /* regression: sum |e|, sum e^2, direction hits */
    float pad2;
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
    /* fp16: the loss scaler and the optimizer's step count, decided on the
     * device by the step's optimizer kernel. Owned by the device while a
     * step is in flight (the upload stops before it); uploaded from
     * t->scaler when none is, read back with each step's results. */
    struct md_scale_ctl scale;
};

struct md_trainer {
    struct md_train_opts opts;   /* a copy of md_trainer_create's */
    const struct md_train_opts *o; /* == &opts */
    struct md_train_hooks hooks;
    md_device *dev;
    struct md_model *model;
    struct md_data *data;
    struct md_loader *train_l, *val_l, *test_l;

    int batch, val_batch, max_batch, classes, ninputs;
    /* regression (a forecasting model on a time series) */
    int regress;                         /* the model's task */
    md_regress_kind rkind;
    const char *loss_name;               /* cross_entropy|mse|mae|huber|financial */
    struct md_data_series ser;           /* the windows' shapes */
    int out_elems;                       /* pred_len * n_out per sample */
    float *d_targets;                    /* (max_batch, pred_len, n_out) */
    void *h_out;                         /* (val_batch, out_elems) compute dtype: evaluation outputs */
    struct md_metrics vmet;              /* the last evaluation's (regression) */
    struct md_regress_acc racc;          /* per-target sums of an evaluation (n_out targets) */
    struct md_regress_metrics vreg;      /* the last evaluation's R2/MAE/RMSE per target (owned) */
    cJSON *target_names;                 /* names of the n_out targets (owned; NULL: target_<j>) */
    cJSON *forecasts;                    /* evaluation with this set: up to 4 test windows are added */
    /* early stopping and scoring the test split with the best weights */
    int bad_epochs, stopped_after;       /* stopped_after: epoch number, 0 = ran all */
    float *d_best;                       /* params of the best epoch (with --patience) */
    float *d_best_bn;
    size_t in_elems[MD_DATA_MAX_INPUTS]; /* per sample */
    int32_t *d_labels;                   /* (max_batch) */
    struct step_scalars *d_sc;           /* one block of scalars */
    float *d_scratch;                    /* (n params): previous params for update ratios */
    float *d_diag;                       /* (3 x tensors) per-tensor sums of squares */

    md_optim *opt;
    struct md_optim_cfg ocfg;
    /* transfer learning (nn/transfer.h) */
    struct md_load_report load;          /* of --init-from (have_load) */
    int have_load;
    float backbone_mult;                 /* --backbone-lr / lr, 1 without it */
    int unfrozen_epoch;                  /* 0-based epoch whose start unfroze --freeze, or -1 */
    cJSON *transfer;                     /* report["training"]["transfer"], borrowed from report */
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
    double ph_step;            /* pipelined steps: queueing forward+backward+optimizer as one */
    double ph_epoch;           /* the epoch's step loop, seconds (this session) */
    long long ph_pipe_steps;   /* pipelined steps in the epoch */
    long long ph_replays;      /* ... of them graph replays */
    /* the fixed probe batch of the per-epoch probe (trainer_diag.c): host
     * copies of its inputs, taken once */
    float *probe_in[MD_DATA_MAX_INPUTS];
    int probe_n, probe_taken;
    const char *probe_split;

    double best_acc;
    int best_epoch;

    /* the epochs this run goes to: opts.epochs, or fewer once --time-budget sized it */
    int n_epochs;
    /* --time-budget (trainer_budget.c) */
    double bud_t0, bud_end;              /* the budget's origin and end (md_now) */
    double bud_warm_t0;                  /* the warm-up's timing starts here ... */
    long long bud_warm_s0;               /* ... at this step */
    int bud_planned;                     /* the steps are sized */
    double bud_step_s, bud_val_s;        /* measured seconds per training step and per validation */
    double bud_test_s;                   /* estimated seconds of the test scoring */
    long long bud_total;                 /* planned optimizer steps (the schedule's total) */
    long long bud_warm_steps;            /* steps timed before the plan */
    int bud_replans, bud_cut;            /* re-plans after epochs; steps stopped at the budget's end */
    int bud_said;                        /* the plan line was printed (an epoch of this run ended) */
    double bud_steps_end;                /* md_now when the steps ended */
    double bud_first_total;              /* the first plan's steps */
    long long bud_mid_step;              /* the first epoch's step at its middle (-1: not reached) ... */
    double bud_mid_t, bud_last_t;        /* ... md_now then, and after the latest step */
    /* --target-accuracy on the test split: its score after the last epoch, which the
       final test scoring reuses while the weights are those (test_cache_step == global_step) */
    long long test_cache_step;
    double test_cache_loss, test_cache_acc;
    long long test_cache_n;
    /* --target-accuracy */
    int tgt_epoch;                       /* the epoch that reached it (0: not reached) */
    double tgt_value, tgt_train_s, tgt_wall_s;
    double run_time;           /* training seconds so far (all sessions) */

    char ckpt_dir[MD_PATH_MAX];
    md_run_dir *run_dir;       /* the locked checkpoint folder (run_dir.h) */
    char last_path[MD_PATH_MAX + 32], best_path[MD_PATH_MAX + 32];
    FILE *metrics;
    char metrics_err[700];                 /* the first failed --metrics write ("" = none) */
    long long interrupt_after;

    /* pipelined steps (see struct step_ctl); set up by md_trainer_pipe_setup */
    int pipe;                              /* full training batches run through md_trainer_pipe_step */
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

    /* data parallelism (trainer_dist.c); ranks 1: none of it runs */
    int ranks, rank;
    double lr_base;                        /* --lr before the scaling rule */
    int dev_comm;                          /* the device's own all-reduce (NCCL) */
    int sync_bn;                           /* batch norm synchronised over the ranks (--sync-bn, ranks > 1) */
    float *h_grads;                        /* host copy for an MPI all-reduce */
    md_event *ev_ar[2];                    /* around the device all-reduce (bucketed: around its join) */
    int ar_timed_pending;                  /* ev_ar hold a step's all-reduce not read yet */
    int dist_stop;                         /* a rank was interrupted: every rank stops after this step */
    int buckets;                           /* the model hands gradient buckets to the all-reduce in backward */
    double ar_s, ep_ar_s;                  /* all-reduce seconds: run, this epoch */
    double ex_s, ep_ex_s;                  /* of which the step waited for (not overlapped) */
    long long ar_calls, ep_ar_calls;       /* steps with an all-reduce */
    long long ep_ar_buckets;               /* all-reduce calls (buckets) this epoch */
    long long ep_samples_local;            /* this rank's samples this epoch */
    long long ep_steps_local;              /* and its steps (some timed: ep_ar_calls) */
    cJSON *dist;                           /* report.training.distributed (borrowed) */

    cJSON *report;   /* report["training"] */
    cJSON *curves;   /* report.training.curves: arrays per key */
    cJSON *diags;    /* report.training.diagnostics: one object per epoch */
};

/* ---- trainer_setup.c ---------------------------------------------------------------- */

/* Everything whose size follows the batch (the model bound for it, loaders,
 * device buffers, optimizer, schedule, scaler), at t->batch, halving it on
 * out-of-memory with --auto-batch. */
md_status md_trainer_setup_batch(md_trainer *t);
/* Releases what md_trainer_setup_batch and md_trainer_pipe_setup made (the
 * model stays bound; the next setup rebinds it), and forgets the pipelined
 * steps. */
void md_trainer_teardown_batch(md_trainer *t);
/* report.training.auto_batch.tried gets {batch_size, fits, error} (error NULL: fits). */
void md_trainer_auto_batch_record(md_trainer *t, int batch, const char *error);
/* Copies the tries into training["auto_batch"] (nothing without tries). */
void md_trainer_auto_batch_report(md_trainer *t, cJSON *training);
/* After an out-of-memory `st` at t->batch (`where`: what was under way):
 * with --auto-batch and a batch above 1, records the try, releases
 * everything batch-sized, halves the batch and returns 1 (the caller sets up
 * again); else records a last failed try and returns 0. */
int md_trainer_auto_batch_halve(md_trainer *t, md_status st, const char *where);
/* The end of a run: prints the tries and puts them into the report. */
void md_trainer_auto_batch_summary(md_trainer *t);

/* ---- trainer_ckpt.c ----------------------------------------------------------------- */

/* Writes the checkpoint at `path`: the state after `epoch` whole epochs plus
 * `batch_done` batches of the next one, `ep_time` seconds into it. */
md_status md_trainer_save_checkpoint(md_trainer *t, const char *path, int epoch, long long batch_done, double ep_time);
/* --resume: weights, optimizer state, position, scaler, curves. */
md_status md_trainer_resume(md_trainer *t);
/* SIGINT/SIGTERM: writes last.safetensors (with --checkpoint-dir) and returns
 * MD_ERR_INTERRUPTED. `where` describes the point ("during validation after
 * epoch 2 (batch 3 of 10)"); NULL: at the current epoch and step. */
md_status md_trainer_interrupted(md_trainer *t, long long batch_done, double ep_time, const char *where);
/* After an epoch: `score` (validation accuracy, training accuracy without a
 * validation split) may make it the best; with --checkpoint-dir writes
 * best.safetensors (if so) and last.safetensors as the state after it. */
md_status md_trainer_keep_best(md_trainer *t, double score);
/* Regression scores the loss L as 1 / (1 + L) (higher is better, in (0, 1],
 * as accuracies are, so checkpoints and folders compare them alike). */
static inline double md_trainer_loss_score(double loss) { return 1.0 / (1.0 + (loss > 0 ? loss : 0)); }
static inline double md_trainer_score_loss(double score) { return score > 0 ? 1.0 / score - 1.0 : 0; }
/* With --patience: the parameters (and BN statistics) of the best epoch back
 * into the model, for scoring the test split. */
md_status md_trainer_restore_best(md_trainer *t);

/* ---- trainer_step.c ----------------------------------------------------------------- */

/* Samples [from, from + n) of a host batch into the model's input buffers. */
md_status md_trainer_upload_batch(md_trainer *t, const struct md_batch *b, int from, int n);
/* MD_ERR_NUMERIC for optimizer step `step` (from 0), naming the first layer
 * with a non-finite output. */
md_status md_trainer_numeric_failure(md_trainer *t, long long step, const char *what);
/* One host-synced step on b (not released): forward, loss, backward, one
 * sync for the step scalars, then (unless the scaler skips it) the
 * optimizer. `snapshot`: keep the params before the update for the
 * diagnostics' update ratios. */
md_status md_trainer_step(md_trainer *t, const struct md_batch *b, int snapshot);
/* The loss of the last forward over n samples into d_sc (classification:
 * cross-entropy and correct count; regression: the regression loss of
 * t->rkind against d_targets, plus its sums in d_sc->reg), with
 * d(loss)/d(output) = scale * dL/d(output) of the mean loss after a
 * training forward. */
md_status md_trainer_loss(md_trainer *t, int n, float scale, float label_smoothing);
/* Elements of the loss per sample (1 for classification). */
int md_trainer_loss_elems(const md_trainer *t);

/* ---- trainer_pipe.c ----------------------------------------------------------------- */

/* Decides whether full batches run pipelined (and captured), allocates what
 * that needs, and says why in t->pipe_why. */
md_status md_trainer_pipe_setup(md_trainer *t);
/* Queues one full-batch step and then finishes the previous one. Takes b. */
md_status md_trainer_pipe_step(md_trainer *t, struct md_batch *b);
/* Waits for the step in flight (if any), hands its batch back, adds its results. */
md_status md_trainer_pipe_finish(md_trainer *t);
/* After an error: the step in flight is dropped (its batch handed back). */
void md_trainer_pipe_abandon(md_trainer *t);

/* ---- trainer_eval.c ----------------------------------------------------------------- */

/* Loss and accuracy of the model over the split of `l`, without gradients.
 * `what` names the phase for the test hook and an interruption's message
 * ("validation", "test"). */
md_status md_trainer_evaluate(md_trainer *t, struct md_loader *l, int epoch, double *loss, double *acc,
                              long long *count, const char *what);
/* After the last epoch: the test split with the final weights, printed and
 * put into report.training.test. */
md_status md_trainer_score_test(md_trainer *t);
/* Regression, after the last epoch's validation: its per-target R2, MAE and
 * RMSE printed and put into report.training.regression_metrics. */
void md_trainer_regress_val_report(md_trainer *t);

/* ---- trainer_diag.c ----------------------------------------------------------------- */

/* Appends the epoch's object to report.training.diagnostics: per-tensor
 * gradient and weight norms, update ratios (have_update: d_scratch holds the
 * params before the last step), weighted_add weights, the epoch's step
 * phases (t->ph_*), and the probe: dead units and pathway balance on a fixed
 * batch (taken at the first call; overwrites the input buffers). Syncs. */
md_status md_trainer_diagnostics(md_trainer *t, int have_update);

/* ---- trainer_budget.c --------------------------------------------------------------- */

/* At a run's start: t->n_epochs, and the budget's clock. */
void md_trainer_budget_start(md_trainer *t);
/* Steps of the epoch that starts now at the current plan (<= steps_per_epoch). */
long long md_trainer_budget_epoch_steps(const md_trainer *t);
/* After each optimizer step: times the warm-up and sizes the run once it is
 * done. Returns 1 when no further step may run (the plan's last step ran, or
 * the budget's end came). */
int md_trainer_budget_after_step(md_trainer *t);
/* After an epoch and its validation (`steps` steps in `steps_s` seconds,
 * validation `val_s`): the plan at the measured pace. */
void md_trainer_budget_after_epoch(md_trainer *t, long long steps, double steps_s, double val_s);
/* Whether training is over by the budget (the plan's steps ran, or its end came). */
int md_trainer_budget_done(const md_trainer *t);
/* After an epoch: `acc` of `metric` (val_acc, test_acc) against
 * --target-accuracy; prints and records a hit. Returns 1 when reached. */
int md_trainer_target_check(md_trainer *t, double acc, const char *metric);
/* report.training.time_budget and .target (what each option decided). */
void md_trainer_budget_report(md_trainer *t);

/* ---- trainer_metrics.c -------------------------------------------------------------- */

/* The curve keys of report.training.curves, NULL-terminated (a resumed
 * checkpoint's curves are checked against them). */
extern const char *const md_trainer_curve_keys[];
extern const char *const md_trainer_curve_keys_regress[]; /* regression: val_mse, val_mae, no accuracies */
/* A fresh t->report with empty curves and diagnostics. */
void md_trainer_report_init(md_trainer *t);
/* --metrics: opens the file for appending and writes the run's header line. */
md_status md_trainer_metrics_open(md_trainer *t);
/* One --metrics line (vloss < 0: no validation figures). A failed write
 * closes the file and keeps the error in t->metrics_err. */
void md_trainer_metrics_line(md_trainer *t, const char *kind, double loss, double acc, double vloss, double vacc,
                             double lr, double sps, double secs);
/* Before the first epoch: the run's settings into the report (before the
 * pipeline decision), then the printed summary and the table header once
 * t->pipe_why is known. */
void md_trainer_report_start(md_trainer *t);
void md_trainer_print_start(md_trainer *t);
/* After an epoch's validation and diagnostics: its table line, curves and
 * --metrics line (vl < 0 without validation). */
void md_trainer_epoch_output(md_trainer *t, double tl, double ta, double vl, double va, double lr, double sps,
                             double ep_time);
/* The end of a run attempt, whatever ended it: epochs run, step execution,
 * loss scaling, best, last checkpoint. */
void md_trainer_report_finish(md_trainer *t, int start_epoch);

/* ---- trainer_dist.c ---------------------------------------------------------------- */

/* After the model is set up: the device communicator (NCCL: rank 0's id
 * broadcast over MPI) or a host buffer for MPI, then rank 0's weights and
 * BN statistics on every rank. Nothing with one rank. */
md_status md_trainer_dist_setup(md_trainer *t);
void md_trainer_dist_free(md_trainer *t);
/* Sums the gradients over the ranks (each rank's loss was scaled by
 * 1 / global batch, so the sum is the global mean), timed. */
md_status md_trainer_dist_grads(md_trainer *t, float *grads, size_t n);
/* The same, queued inside a pipelined (maybe captured) step: not timed. */
md_status md_trainer_dist_grads_queued(md_trainer *t, float *grads, size_t n);
/* Whether several ranks may run pipelined steps (MPSDIAG_DIST_GRAPH=1, and
 * an all-reduce that fits them: the device's own, or a device without
 * capture whose host all-reduce runs in order). */
int md_trainer_dist_pipe_ok(md_trainer *t, int can_capture);
/* The samples of global batch `b` over every rank. */
int md_trainer_dist_global_n(md_trainer *t, long long b);
/* After the step's sync: a device communicator's asynchronous error. */
md_status md_trainer_dist_check(md_trainer *t);
/* Sums the step's figures (loss sum, correct count, regression sums) over
 * the ranks; an interrupt (SIGINT/SIGTERM) any rank got is set on all, so
 * that every rank stops after the same step. */
md_status md_trainer_dist_scalars(md_trainer *t, struct step_scalars *sc);
/* md_interrupted() agreed by every rank (one collective; all must call). */
int md_trainer_dist_interrupted(md_trainer *t);
/* Rank 0's BN running statistics on every rank (before an evaluation). */
md_status md_trainer_dist_sync_buffers(md_trainer *t);
/* Rank 0's value on every rank (decisions every rank must take alike). */
md_status md_trainer_dist_agree(md_trainer *t, double *v, int n);
/* report.training.distributed at the start. */
void md_trainer_dist_report_start(md_trainer *t);
/* At an epoch's end: per-rank throughput, all-reduce time and bandwidth,
 * stragglers into the report; rank 0 prints a line. `sps`: global. */
md_status md_trainer_dist_epoch(md_trainer *t, double ep_loop_s);

/* trainer_metrics.c: at an epoch's start, --unfreeze-after's moment (also
 * when resumed past it): the frozen ranges train from then on; says so. */
void md_trainer_unfreeze_check(md_trainer *t);

#endif
